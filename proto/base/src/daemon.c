/*
 * Daemon helpers: readiness (port file, READY line, sd_notify), the descriptor limit and
 * capacities given as a share of memory (config files and options: options.c). The systemd
 * notification protocol is one datagram to the socket named in NOTIFY_SOCKET (an abstract
 * socket when it starts with '@'); it is documented as stable for reimplementation, so we do
 * not link libsystemd for it.
 */
#include "spillway/daemon.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
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

int spw_signalfd(const int *sigs)
{
    sigset_t set;
    sigemptyset(&set);
    for (; *sigs != 0; sigs++)
        sigaddset(&set, *sigs);
    int rc = pthread_sigmask(SIG_BLOCK, &set, NULL);
    if (rc != 0)
        return -rc;
    int fd = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
    return fd < 0 ? -errno : fd;
}

int spw_signalfd_next(int fd)
{
    struct signalfd_siginfo si;
    ssize_t n;
    do
        n = read(fd, &si, sizeof si);
    while (n < 0 && errno == EINTR);
    return n == (ssize_t)sizeof si ? (int)si.ssi_signo : 0;
}
