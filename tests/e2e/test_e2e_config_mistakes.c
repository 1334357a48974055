/* Configuration mistakes the daemons refuse at start, each with a reason naming the file, line
 * and key (or the path): bad values, unknown keys, contradicting options, unusable secret and
 * directory paths. Each case starts a daemon that must exit with the expected status. */
#include <dirent.h>
#include <errno.h>
#include <grp.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../unit/test_main.h"
#include "e2e_util.h"

typedef struct conf_case {
    const char *daemon;  /* "spillway-scheduler" or "spillway-worker" */
    const char *conf;    /* the config file's text, or NULL for none */
    const char *args[6]; /* more arguments; "@DIR" is replaced by the case's directory */
    int status;          /* expected exit status */
    const char *want[3]; /* each must appear in the output; "@CONF" = the config file's path */
} conf_case;

static char g_dir[256];

static void conf_dir(void)
{
    if (g_dir[0] == '\0') {
        const char *tmp = getenv("TMPDIR");
        snprintf(g_dir, sizeof g_dir, "%s/spw-conf.XXXXXX", tmp != NULL ? tmp : "/tmp");
        assert_non_null(mkdtemp(g_dir));
    }
}

/* Copies s to out with the first "@CONF" or "@DIR" replaced by the path it stands for. */
static void subst(char *out, size_t outlen, const char *s, const char *conf)
{
    const char *c = strstr(s, "@CONF"), *d = strstr(s, "@DIR");
    if (c != NULL)
        snprintf(out, outlen, "%.*s%s%s", (int)(c - s), s, conf, c + 5);
    else if (d != NULL)
        snprintf(out, outlen, "%.*s%s%s", (int)(d - s), s, g_dir, d + 4);
    else
        snprintf(out, outlen, "%s", s);
}

/* Runs each case: the daemon must exit with the stated status, having said each wanted thing
 * in its output (the configuration is refused before anything is started). */
static void run_conf_cases(const conf_case *cases, size_t n)
{
    conf_dir();
    for (size_t i = 0; i < n; i++) {
        const conf_case *k = &cases[i];
        char conf[512];
        snprintf(conf, sizeof conf, "%s/case%zu.conf", g_dir, i);
        const char *argv[16];
        char bufs[8][512];
        int a = 0;
        argv[a++] = h_bin(k->daemon);
        if (k->conf != NULL) {
            char text[600];
            subst(text, sizeof text, k->conf, conf);
            e2e_write_file(conf, text, 0644);
            argv[a++] = "--config";
            argv[a++] = conf;
        }
        for (int j = 0; j < 6 && k->args[j] != NULL; j++) {
            subst(bufs[j], sizeof bufs[j], k->args[j], conf);
            argv[a++] = bufs[j];
        }
        argv[a] = NULL;
        char *out = NULL;
        int st = h_run(argv, &out);
        fprintf(stderr, "case %zu: %s exited %d: %s", i, k->daemon, st, out);
        assert_int_equal(st, k->status);
        for (int j = 0; j < 3 && k->want[j] != NULL; j++) {
            char want[600];
            subst(want, sizeof want, k->want[j], conf);
            if (strstr(out, want) == NULL)
                fail_msg("case %zu: output lacks '%s'", i, want);
        }
        free(out);
    }
}

/* Each kind of mistake in a config file is refused with FILE:LINE and the key. */
static void config_file_mistakes_name_file_line_and_key(void)
{
    static const conf_case cases[] = {
        {"spillway-worker",
         "slots = 1\n# comment\nstroe-capacity = 8G\n",
         {NULL},
         2,
         {"@CONF:3: unknown key 'stroe-capacity'"}},
        {"spillway-worker",
         "\nslots = many\n",
         {NULL},
         2,
         {"@CONF:2: slots: wants a whole number", "'many'"}},
        {"spillway-worker",
         "store-capacity = 12 apples\n",
         {NULL},
         2,
         {"@CONF:1: store-capacity: wants a size"}},
        {"spillway-worker",
         "store-capacity = nan%\n",
         {NULL},
         2,
         {"@CONF:1: store-capacity: wants a size", "'nan%'"}},
        {"spillway-worker",
         "spill-threshold = 1.5\n",
         {NULL},
         2,
         {"@CONF:1: spill-threshold: wants a fraction in (0, 1]"}},
        {"spillway-worker",
         "encrypt = yes\nsecret-file = /nonexistent/secret\ntls-cert = /nonexistent/c.pem\n"
         "tls-key = /nonexistent/c.key\ntls-ca = /nonexistent/ca.pem\n",
         {NULL},
         2,
         {"@CONF:3: tls-cert /nonexistent/c.pem: No such file or directory"}},
        {"spillway-worker",
         "\ntls-key = /nonexistent/c.key\n",
         {NULL},
         2,
         {"@CONF:2: tls-key: --tls-cert, --tls-key and --tls-ca go together",
          "--tls-cert is missing"}},
        {"spillway-scheduler",
         "listen = 127.0.0.1:0\nmax-frame\n",
         {NULL},
         2,
         {"@CONF:2: max-frame: a bare word; this key needs a value"}},
        {"spillway-scheduler",
         "listen 127.0.0.1:0\n",
         {NULL},
         2,
         {"@CONF:1: 'listen 127.0.0.1:0' is not a key"}},
        {"spillway-scheduler",
         "listen = 127.0.0.1:port\n",
         {NULL},
         2,
         {"@CONF:1: listen: wants HOST:PORT", "'127.0.0.1:port'"}},
        {"spillway-scheduler",
         "\nhttp = ::1:7480\n",
         {NULL},
         2,
         {"@CONF:2: http: wants HOST:PORT", "'::1:7480'"}},
        {"spillway-worker",
         "scheduler = 127.0.0.1\n",
         {NULL},
         2,
         {"@CONF:1: scheduler: wants HOST:PORT", "'127.0.0.1'"}},
        {"spillway-worker",
         "advertise = :7000\n",
         {NULL},
         2,
         {"@CONF:1: advertise: wants HOST or HOST:PORT", "':7000'"}},
        {"spillway-scheduler", "log-level =\n", {NULL}, 2, {"@CONF:1: log-level: empty value"}},
        {"spillway-scheduler",
         "log-level = loud\n",
         {NULL},
         2,
         {"@CONF:1: log-level: unknown level 'loud'"}},
        {"spillway-scheduler", "version = 2\n", {NULL}, 2, {"@CONF:1: unknown key 'version'"}},
        {"spillway-scheduler",
         "config = /etc/other.conf\n",
         {NULL},
         2,
         {"@CONF:1: config: config files do not nest"}},
        {"spillway-scheduler", "= 5\n", {NULL}, 2, {"@CONF:1: missing key before '='"}},
        {"spillway-scheduler",
         "task-retries = -1\n",
         {NULL},
         2,
         {"@CONF:1: task-retries: wants a whole number, got '-1'"}},
        {"spillway-worker",
         "max-connections = 3\n",
         {NULL},
         2,
         {"@CONF:1: max-connections: wants a whole number 8..1000000"}},
        {"spillway-worker",
         "local-group = no-such-group-here\n",
         {NULL},
         2,
         {"@CONF:1: local-group: no-such-group-here: no such group"}},
        /* A directory, or nothing at all, given as the file. */
        {"spillway-scheduler",
         NULL,
         {"--config", "@DIR"},
         2,
         {"--config @DIR: is a directory, not a config file"}},
        {"spillway-worker",
         NULL,
         {"--config", "@DIR/absent.conf"},
         2,
         {"--config @DIR/absent.conf: no such file or directory"}},
        /* On the command line the option is named instead. */
        {"spillway-worker", NULL, {"--slots", "0"}, 2, {"--slots: wants a whole number 1..4096"}},
        {"spillway-scheduler", NULL, {"--frobnicate"}, 2, {"unknown option '--frobnicate'"}},
    };
    run_conf_cases(cases, sizeof cases / sizeof cases[0]);
}

/* Settings that each parse but do not fit together are refused, naming the key to change. */
static void config_cross_checks_refuse_with_a_reason(void)
{
    static char huge[64];
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    snprintf(huge, sizeof huge, "%lluM",
             (unsigned long long)pages * (unsigned long long)page / (1u << 20) * 2 + 1);
    const conf_case cases[] = {
        {"spillway-scheduler",
         "heartbeat-timeout = 2500\n",
         {NULL},
         2,
         {"@CONF:1: heartbeat-timeout: 2500 ms is less than 3 heartbeats", "at least 3000"}},
        {"spillway-scheduler",
         "max-frame = 1M\nchunk-size = 768K\n",
         {NULL},
         2,
         {"@CONF:2: chunk-size: 786432 bytes must be at most half of max-frame (1048576)"}},
        {"spillway-scheduler",
         "inline-limit = 8M\n",
         {NULL},
         2,
         {"@CONF:1: inline-limit: 8388608 bytes must be at most a sixteenth of max-frame"}},
        {"spillway-worker",
         "spill-target = 0.8\n",
         {NULL},
         2,
         {"@CONF:1: spill-target: want spill-target < spill-threshold < pause-threshold <= 1",
          "got 0.8, 0.8, 0.9"}},
        {"spillway-worker",
         "spill-threshold = 0.95\n",
         {NULL},
         2,
         {"@CONF:1: spill-threshold: want spill-target < spill-threshold < pause-threshold"}},
        /* A store larger than the host only warns (checked together with a mistake that stops
         * the worker before it would make that store). */
        {"spillway-worker",
         NULL,
         {"--store-capacity", huge, "--spill-target", "0.9"},
         2,
         {"--store-capacity", "warning: more than this host's physical memory",
          "want spill-target < spill-threshold"}},
    };
    run_conf_cases(cases, sizeof cases / sizeof cases[0]);
}

/* Secret files and directories are named with what is wrong with them. */
static void secret_and_path_mistakes_name_the_path(void)
{
    conf_dir();
    char p[600];
    snprintf(p, sizeof p, "%s/empty.secret", g_dir);
    e2e_write_file(p, "\n", 0600);
    snprintf(p, sizeof p, "%s/short.secret", g_dir);
    e2e_write_file(p, "fifteen-bytes!!\n", 0600);
    snprintf(p, sizeof p, "%s/open.secret", g_dir);
    e2e_write_file(p, "a-secret-of-enough-bytes\n", 0644);
    snprintf(p, sizeof p, "%s/file", g_dir);
    e2e_write_file(p, "not a directory\n", 0644);
    static const conf_case cases[] = {
        {"spillway-scheduler",
         NULL,
         {"--secret-file", "@DIR/empty.secret"},
         2,
         {"--secret-file @DIR/empty.secret: the secret file is empty"}},
        {"spillway-worker",
         "secret-file = @DIR/short.secret\n",
         {NULL},
         2,
         {"shorter than 16 bytes"}},
        {"spillway-scheduler",
         NULL,
         {"--secret-file", "@DIR/short.secret"},
         2,
         {"--secret-file @DIR/short.secret: the secret is shorter than 16 bytes"}},
        {"spillway-scheduler",
         NULL,
         {"--secret-file", "@DIR/open.secret"},
         2,
         {"--secret-file @DIR/open.secret:", "mode 0600"}},
        {"spillway-scheduler",
         NULL,
         {"--secret-file", "@DIR/absent.secret"},
         2,
         {"--secret-file @DIR/absent.secret: no such file or directory"}},
        {"spillway-worker",
         NULL,
         {"--spill-dir", "@DIR/no/such/dir"},
         2,
         {"--spill-dir @DIR/no/such/dir: no such file or directory"}},
        {"spillway-worker",
         NULL,
         {"--spill-dir", "@DIR/file"},
         2,
         {"--spill-dir @DIR/file: not a directory"}},
    };
    run_conf_cases(cases, sizeof cases / sizeof cases[0]);
}

static const struct CMUnitTest tests[] = {
    H_CASE(config_file_mistakes_name_file_line_and_key),
    H_CASE(config_cross_checks_refuse_with_a_reason),
    H_CASE(secret_and_path_mistakes_name_the_path),
};

SPW_TEST_MAIN(tests)
