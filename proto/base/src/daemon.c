/*
 * Daemon helpers: readiness (port file, READY line, sd_notify) and config files. The systemd
 * notification protocol is one datagram to the socket named in NOTIFY_SOCKET (an abstract
 * socket when it starts with '@'); it is documented as stable for reimplementation, so we do
 * not link libsystemd for it.
 */
#include "spillway/daemon.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <stdarg.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "spillway/base.h"

void spw_sd_notify(const char *state)
{
    const char *path = getenv("NOTIFY_SOCKET");
    if (path == NULL || path[0] == '\0')
        return;
    struct sockaddr_un sun;
    memset(&sun, 0, sizeof sun);
    sun.sun_family = AF_UNIX;
    size_t len = strlen(path);
    if (len >= sizeof sun.sun_path)
        return;
    memcpy(sun.sun_path, path, len);
    if (sun.sun_path[0] == '@')
        sun.sun_path[0] = '\0';
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return;
    socklen_t sl = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len);
    if (sendto(fd, state, strlen(state), MSG_NOSIGNAL, (struct sockaddr *)&sun, sl) < 0)
        spw_log(SPW_LOG_WARN, "sd_notify: %s", strerror(errno));
    close(fd);
}

int spw_daemon_ready(const char *addr, const char *port_file, const char *status)
{
    if (port_file != NULL) {
        char line[128];
        int n = snprintf(line, sizeof line, "%s\n", addr);
        int rc = spw_file_write_atomic(port_file, line, (size_t)n);
        if (rc != 0) {
            spw_log(SPW_LOG_ERR, "cannot write port file %s: %s", port_file, spw_strerror(rc));
            return rc;
        }
    }
    /* The READY line is for whoever started us by hand or from a test; under systemd, with
     * stdout going to the journal, READY=1 below says it and the line would only be noise. */
    if (!spw_fd_is_journal(STDOUT_FILENO)) {
        printf("READY %s\n", addr);
        fflush(stdout);
    }
    char state[256];
    snprintf(state, sizeof state, "READY=1\nSTATUS=%s\nMAINPID=%d", status, (int)getpid());
    spw_sd_notify(state);
    return 0;
}

static char *trim(char *s)
{
    while (isspace((unsigned char)*s))
        s++;
    char *e = s + strlen(s);
    while (e > s && isspace((unsigned char)e[-1]))
        *--e = '\0';
    return s;
}

/* Where each argument of the vector spw_config_args built came from: "FILE:LINE" for one read
 * from the config file, NULL for the command line. One vector per process (a daemon's main). */
static char **g_origin;
static int g_norigin;
static char g_prog[64] = "spillway";

static void config_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void config_fail(const char *fmt, ...)
{
    char msg[1200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "%s: %s\n", g_prog, msg);
}

static const struct option *opt_find(const struct option *opts, const char *name, size_t len)
{
    for (const struct option *o = opts; o->name != NULL; o++)
        if (strlen(o->name) == len && strncmp(o->name, name, len) == 0)
            return o;
    return NULL;
}

/* Checks one config line (already split) against the option table; 0 or SPW_EINVAL. */
static int config_check(const char *path, int lineno, const char *key, const char *val,
                        const struct option *opts)
{
    size_t klen = strlen(key);
    for (size_t i = 0; i < klen; i++) {
        if (!isalnum((unsigned char)key[i]) && key[i] != '-') {
            config_fail("%s:%d: '%s' is not a key (want 'key = value', '#' for comments)", path,
                        lineno, key);
            return SPW_EINVAL;
        }
    }
    if (strcmp(key, "config") == 0) {
        config_fail("%s:%d: config: config files do not nest", path, lineno);
        return SPW_EINVAL;
    }
    if (opts == NULL)
        return 0;
    const struct option *o = opt_find(opts, key, klen);
    if (o == NULL || strcmp(key, "help") == 0 || strcmp(key, "version") == 0) {
        config_fail("%s:%d: unknown key '%s'", path, lineno, key);
        return SPW_EINVAL;
    }
    if (val == NULL && o->has_arg == required_argument) {
        config_fail("%s:%d: %s: a bare word; this key needs a value ('%s = VALUE')", path, lineno,
                    key, key);
        return SPW_EINVAL;
    }
    if (val != NULL && *val == '\0' && o->has_arg == required_argument) {
        config_fail("%s:%d: %s: empty value", path, lineno, key);
        return SPW_EINVAL;
    }
    if (val != NULL && o->has_arg == no_argument) {
        config_fail("%s:%d: %s: takes no value (write just '%s')", path, lineno, key, key);
        return SPW_EINVAL;
    }
    return 0;
}

int spw_config_args(int argc, char **argv, const struct option *longopts, int *out_argc,
                    char ***out_argv)
{
    const char *base = strrchr(argv[0], '/');
    snprintf(g_prog, sizeof g_prog, "%s", base != NULL ? base + 1 : argv[0]);
    const char *path = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--config") == 0 && i + 1 < argc)
            path = argv[i + 1];
        else if (strncmp(argv[i], "--config=", 9) == 0)
            path = argv[i] + 9;
    }
    int cap = argc + 1, n = 0;
    char **v = spw_calloc(SPW_MOD_BASE, (size_t)cap, sizeof *v);
    char **org = spw_calloc(SPW_MOD_BASE, (size_t)cap, sizeof *org);
    v[n++] = spw_strdup(SPW_MOD_BASE, argv[0]);
    int rc = 0;
    if (path != NULL) {
        FILE *f = fopen(path, "re");
        struct stat st;
        if (f == NULL || fstat(fileno(f), &st) != 0) {
            rc = -errno;
            config_fail("--config %s: %s", path, spw_strerror(-errno));
        } else if (S_ISDIR(st.st_mode)) {
            rc = SPW_EINVAL;
            config_fail("--config %s: is a directory, not a config file", path);
        } else if (!S_ISREG(st.st_mode)) {
            rc = SPW_EINVAL;
            config_fail("--config %s: not a regular file", path);
        }
        char line[1024];
        int lineno = 0;
        while (rc == 0 && fgets(line, sizeof line, f) != NULL) {
            lineno++;
            size_t ll = strlen(line);
            if (ll == sizeof line - 1 && line[ll - 1] != '\n' && !feof(f)) {
                config_fail("%s:%d: line longer than %zu bytes", path, lineno, sizeof line - 2);
                rc = SPW_EINVAL;
                break;
            }
            char *hash = strchr(line, '#');
            if (hash != NULL)
                *hash = '\0';
            char *s = trim(line);
            if (*s == '\0')
                continue;
            char *eq = strchr(s, '=');
            char opt[1100];
            char *key = s, *val = NULL;
            if (eq != NULL) {
                *eq = '\0';
                key = trim(s);
                val = trim(eq + 1);
                if (*key == '\0') {
                    config_fail("%s:%d: missing key before '='", path, lineno);
                    rc = SPW_EINVAL;
                    break;
                }
            }
            rc = config_check(path, lineno, key, val, longopts);
            if (rc != 0)
                break;
            if (val != NULL)
                snprintf(opt, sizeof opt, "--%s=%s", key, val);
            else
                snprintf(opt, sizeof opt, "--%s", key);
            if (n + argc + 1 >= cap) {
                cap *= 2;
                v = spw_realloc(SPW_MOD_BASE, v, (size_t)cap * sizeof *v);
                org = spw_realloc(SPW_MOD_BASE, org, (size_t)cap * sizeof *org);
            }
            char where[600];
            snprintf(where, sizeof where, "%s:%d", path, lineno);
            org[n] = spw_strdup(SPW_MOD_BASE, where);
            v[n++] = spw_strdup(SPW_MOD_BASE, opt);
        }
        if (rc == 0 && ferror(f)) {
            rc = -errno;
            config_fail("--config %s: %s", path, spw_strerror(-errno));
        }
        if (f != NULL)
            fclose(f);
    }
    if (rc != 0) {
        for (int i = 0; i < n; i++)
            spw_free(org[i]);
        spw_free(org);
        spw_config_free(n, v);
        return rc;
    }
    if (n + argc >= cap) {
        cap = n + argc + 1;
        v = spw_realloc(SPW_MOD_BASE, v, (size_t)cap * sizeof *v);
        org = spw_realloc(SPW_MOD_BASE, org, (size_t)cap * sizeof *org);
    }
    for (int i = 1; i < argc; i++) {
        org[n] = NULL;
        v[n++] = spw_strdup(SPW_MOD_BASE, argv[i]);
    }
    v[n] = NULL;
    org[n] = NULL;
    g_origin = org;
    g_norigin = n;
    *out_argc = n;
    *out_argv = v;
    return 0;
}

void spw_config_free(int argc, char **argv)
{
    for (int i = 0; i < argc; i++)
        spw_free(argv[i]);
    spw_free(argv);
    if (g_origin != NULL) {
        for (int i = 0; i < g_norigin; i++)
            spw_free(g_origin[i]);
        spw_free(g_origin);
        g_origin = NULL;
        g_norigin = 0;
    }
}

void spw_opt_path_error(int idx, const char *key, const char *path, const char *msg)
{
    const char *where = spw_config_origin(idx);
    if (where != NULL)
        fprintf(stderr, "%s: %s: %s %s: %s\n", g_prog, where, key, path, msg);
    else
        fprintf(stderr, "%s: --%s %s: %s\n", g_prog, key, path, msg);
}

const char *spw_config_origin(int idx)
{
    return idx >= 0 && idx < g_norigin ? g_origin[idx] : NULL;
}

void spw_opt_error(int idx, const char *key, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    const char *where = spw_config_origin(idx);
    if (where != NULL)
        fprintf(stderr, "%s: %s: %s: %s\n", g_prog, where, key, msg);
    else
        fprintf(stderr, "%s: --%s: %s\n", g_prog, key, msg);
}

int spw_opt_addr(int idx, const char *key, const char *value, bool port_optional)
{
    spw_addr a;
    if (spw_addr_parse(value, port_optional ? 0 : -1, &a) == 0)
        return 0;
    spw_opt_error(idx, key, "wants %s (an IPv4 address, a host name or [IPv6]), got '%s'",
                  port_optional ? "HOST or HOST:PORT" : "HOST:PORT", value);
    return -1;
}

int spw_capacity_parse(const char *s, uint64_t *out)
{
    size_t len = strlen(s);
    if (len > 1 && s[len - 1] == '%') {
        char *end;
        double pct = strtod(s, &end);
        /* Written so that NaN (strtod reads "nan") fails too: it compares false either way. */
        if (end != s + len - 1 || !(pct > 0 && pct <= 100))
            return SPW_EINVAL;
        long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
        if (pages <= 0 || page <= 0)
            return SPW_EINVAL;
        *out = (uint64_t)((double)pages * (double)page * pct / 100.0);
        return 0;
    }
    return spw_size_parse(s, out);
}

uint64_t spw_raise_nofile(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
        return 1024;
    if (rl.rlim_cur < rl.rlim_max) {
        struct rlimit want = {rl.rlim_max, rl.rlim_max};
        if (setrlimit(RLIMIT_NOFILE, &want) == 0)
            rl.rlim_cur = rl.rlim_max;
    }
    return rl.rlim_cur == RLIM_INFINITY ? UINT64_MAX : (uint64_t)rl.rlim_cur;
}
