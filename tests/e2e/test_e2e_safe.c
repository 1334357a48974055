/* End-to-end tests of issue 10, "safe by default": who may use a worker's local socket and
 * which arena mapping each gets, the connection cap, configuration mistakes, and error
 * reporting. Real daemons on 127.0.0.1 with ephemeral ports; a case that needs root (to run a
 * helper as another user) exits 77, which ctest reports as SKIP, when not root. */
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
#include "wire_client.h"
#include "spillway/proto.h"

#define SKIP_CODE 77

/* The case's cluster, where helpers below start it (the harness owns it). */
static h_cluster *g_cluster;
static void errmsg_has(spillway *cl, const char *want);

/* The case's one-worker cluster. */
static h_cluster *one_worker_cluster(void)
{
    g_cluster = h_cluster_simple(1);
    return g_cluster;
}

static void need_root(void)
{
    if (geteuid() != 0) {
        fprintf(stderr, "SKIP: needs root to run a helper as user nobody\n");
        exit(SKIP_CODE);
    }
}

/* Runs spw_local_probe as nobody against worker 0, with nobody's own group as its primary
 * group, or with gid and supp (a supplementary group after 300 others) when gid is not NULL;
 * its output goes to stderr. */
static int run_probe_as(h_cluster *c, const char *mode, const char *gid_arg, const char *supp)
{
    struct passwd *pw = getpwnam("nobody");
    if (pw == NULL)
        fail_msg("no user nobody");
    char uid[16], gid[16], pid[16];
    snprintf(uid, sizeof uid, "%u", (unsigned)pw->pw_uid);
    snprintf(gid, sizeof gid, "%u", (unsigned)pw->pw_gid);
    snprintf(pid, sizeof pid, "%d", (int)c->workers[0].pid);
    const char *argv[] = {h_bin("spw_local_probe"), uid, gid_arg != NULL ? gid_arg : gid, c->addr,
                          pid, mode, supp, NULL};
    char *out = NULL;
    int rc = h_run(argv, &out);
    fprintf(stderr, "--- spw_local_probe %s (exit %d):\n%s", mode, rc, out != NULL ? out : "");
    free(out);
    return rc;
}

static int run_probe(h_cluster *c, const char *mode)
{
    return run_probe_as(c, mode, NULL, NULL);
}

/* Another local user (nobody) is refused on the worker's abstract socket with SPW_EAUTH before
 * any handshake, so it never holds the arena; libspillway falls back to TCP and still reads
 * the right bytes. */
static void local_socket_refuses_other_uid_and_client_reads_over_tcp(void **state)
{
    (void)state;
    need_root();
    h_cluster *c = h_cluster_simple(1);
    assert_int_equal(run_probe(c, "refused"), 0);
    E2E_FINISH(c, NULL);
}

/* With --local-group nogroup, nobody (whose primary group that is) may map the arena: a reader
 * gets a read-only descriptor that can neither be mapped writable nor reopened read-write via
 * /proc; only a put asks for (and gets) a read-write one. */
static void local_group_member_gets_read_only_arena_for_reads(void **state)
{
    (void)state;
    need_root();
    if (getgrnam("nogroup") == NULL)
        fail_msg("no group nogroup");
    h_cluster *c = h_cluster_start(false, NULL);
    static const char *const args[] = {"--slots", "1", "--store-capacity", "256M",
                                       "--local-group", "nogroup", NULL};
    h_worker_start(c, args);
    assert_int_equal(run_probe(c, "allowed"), 0);
    E2E_FINISH(c, NULL);
}

/* A --local-group member whose membership is one supplementary group among more than 256 (the
 * primary group another) gets in all the same: the peer's whole group list is read, however
 * long. It used to be refused with SPW_EAUTH: SO_PEERGROUPS into a 256-entry buffer failed
 * with ERANGE and that counted as not a member. */
static void local_group_member_with_many_groups_gets_in(void **state)
{
    (void)state;
    need_root();
    struct group *gr = getgrnam("nogroup");
    if (gr == NULL)
        fail_msg("no group nogroup");
    h_cluster *c = h_cluster_start(false, NULL);
    static const char *const args[] = {"--slots", "1", "--store-capacity", "256M",
                                       "--local-group", "nogroup", NULL};
    h_worker_start(c, args);
    char supp[16];
    snprintf(supp, sizeof supp, "%u", (unsigned)gr->gr_gid);
    assert_int_equal(run_probe_as(c, "allowed", "39999", supp), 0);
    E2E_FINISH(c, NULL);
}

/* ============================================================ connection caps */

typedef struct log_arg {
    const h_proc *p;
    const char *needle;
} log_arg;

static bool logged_cond(void *arg)
{
    log_arg *a = arg;
    return h_log_count(a->p, a->needle) > 0;
}

static int ctl_workers(h_cluster *c)
{
    json_t *st = e2e_ctl_json(c, "status");
    if (st == NULL)
        return -1;
    int n = (int)json_array_size(json_object_get(st, "workers"));
    json_decref(st);
    return n;
}

/* Connections a daemon listening on port still holds (ESTABLISHED or CLOSE_WAIT on its side,
 * from /proc/net/tcp). */
static int daemon_conns(int port)
{
    FILE *f = fopen("/proc/net/tcp", "re");
    if (f == NULL)
        return -1;
    char line[512];
    int n = 0;
    while (fgets(line, sizeof line, f) != NULL) {
        unsigned lport, st;
        if (sscanf(line, " %*d: %*x:%x %*x:%*x %x", &lport, &st) == 2 && (int)lport == port &&
            (st == 1 || st == 8))
            n++;
    }
    fclose(f);
    return n;
}

typedef struct conns_arg {
    int port, most;
} conns_arg;

static bool conns_at_most(void *arg)
{
    conns_arg *a = arg;
    int n = daemon_conns(a->port);
    return n >= 0 && n <= a->most;
}

/* --max-connections 8 on the scheduler keeps 4 for workers and spillway-ctl: the fifth client
 * is refused with SPW_ELIMIT while the clients already connected keep working and a new worker
 * and spillway-ctl still get in; past the total cap even a raw connection gets an ERROR frame
 * (SPW_ELIMIT, "too many connections") before anything else. Each kind of refusal is logged
 * once, however many peers are refused. */
static void connection_cap_refuses_clients_but_not_workers_or_ctl(void **state)
{
    (void)state;
    static const char *const sargs[] = {"--max-connections", "8", NULL};
    h_cluster *c = h_cluster_start(false, sargs);
    static const char *const wargs[] = {"--slots", "1", "--store-capacity", "64M", NULL};
    h_worker_start(c, wargs);
    enum { QUOTA = 4 };
    spillway *cl[QUOTA];
    for (int i = 0; i < QUOTA; i++)
        cl[i] = e2e_connect(c);
    for (int i = 0; i < 3; i++) {
        spillway *extra = NULL;
        int rc = spillway_connect(c->addr, NULL, &extra);
        assert_int_equal(rc, SPW_ELIMIT);
        assert_null(extra);
    }
    assert_int_equal(h_log_count(&c->sched, "too many connections: 4 clients connected"), 1);
    /* The reserved room: a new worker registers and spillway-ctl answers. */
    h_worker_start(c, wargs);
    assert_int_equal(ctl_workers(c), 2);
    e2e_client_works(cl[0]);
    e2e_client_works(cl[QUOTA - 1]);

    /* Scheduler connections now: 4 clients + 2 workers (+ spillway-ctl's, until the scheduler
     * has seen it go). Raw connections fill the rest of the cap of 8; the next one is refused
     * before its handshake. */
    wire *raw[4];
    int nraw = 0;
    uint32_t type = 0;
    int64_t code = 0;
    char msg[512] = "";
    while (nraw < 4) {
        raw[nraw] = wire_open(c->addr);
        assert_int_equal(wire_first_frame(raw[nraw++], &type, &code, msg, sizeof msg), 1);
        if (type != PROTO_CHALLENGE)
            break;
    }
    assert_int_equal(type, PROTO_ERROR);
    assert_int_equal(code, SPW_ELIMIT);
    fprintf(stderr, "refusal after %d raw connections: %s\n", nraw - 1, msg);
    assert_non_null(strstr(msg, "too many connections: --max-connections 8 reached"));
    for (int i = 0; i < nraw; i++)
        wire_close(raw[i]);
    int port;
    char host[64];
    assert_int_equal(spw_addr_split(c->addr, host, &port), 0);
    conns_arg ca = {port, 6};
    assert_true(h_eventually(conns_at_most, &ca, 20000)); /* the scheduler saw them go */
    assert_int_equal(h_log_count(&c->sched, "--max-connections 8 reached"), 1);
    /* Once those are gone there is room again. */
    assert_int_equal(ctl_workers(c), 2);
    e2e_client_works(cl[1]);
    for (int i = 0; i < QUOTA; i++)
        spillway_close(cl[i]);
    ca.most = 2;
    assert_true(h_eventually(conns_at_most, &ca, 20000));
    spillway *again = e2e_connect(c);
    e2e_client_works(again);
    spillway_close(again);
    E2E_FINISH(c, NULL);
}

/* The same on a worker's peer port: with --max-connections 8, four clients uploading over TCP
 * fill the clients' share; the fifth is refused (SPW_ELIMIT, said in errmsg), while another
 * worker still connects to copy an object (a broadcast) and the clients already in still read. */
static void worker_connection_cap_keeps_room_for_workers(void **state)
{
    (void)state;
    h_cluster *c = h_cluster_start(false, NULL);
    static const char *const w0[] = {"--slots", "1", "--store-capacity", "64M",
                                     "--max-connections", "8", NULL};
    h_worker_start(c, w0);
    enum { QUOTA = 4 };
    spillway_opts o;
    spillway_opts_init(&o);
    o.no_local = 1; /* every client uploads over the worker's TCP port */
    static uint8_t big[300000];
    memset(big, 9, sizeof big);
    spillway *cl[QUOTA + 1];
    spillway_ref r[QUOTA + 1];
    for (int i = 0; i <= QUOTA; i++) {
        assert_int_equal(spillway_connect(c->addr, &o, &cl[i]), 0);
        int rc = spillway_put(cl[i], big, sizeof big, &r[i]);
        if (i < QUOTA) {
            assert_int_equal(rc, 0);
        } else {
            assert_int_equal(rc, SPW_ELIMIT);
            errmsg_has(cl[i], "limit exceeded");
        }
    }
    assert_int_equal(h_log_count(&c->workers[0], "too many connections: 4 clients connected"), 1);
    static const char *const w1[] = {"--slots", "1", "--store-capacity", "64M", NULL};
    h_worker_start(c, w1);
    assert_int_equal(spillway_broadcast(cl[0], r[0], 0), 0); /* worker 1 fetched it from 0 */
    void *data;
    size_t len;
    assert_int_equal(spillway_get(cl[1], r[1], 10000, &data, &len), 0);
    assert_true(len == sizeof big && memcmp(data, big, len) == 0);
    spillway_free(data);
    for (int i = 0; i <= QUOTA; i++) {
        if (i < QUOTA)
            assert_int_equal(spillway_release(cl[i], r[i]), 0);
        spillway_close(cl[i]);
    }
    E2E_FINISH(c, NULL);
}

/* CPU seconds the process has used (user + system). */
static double proc_cpu_s(pid_t pid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "re");
    if (f == NULL)
        return -1;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    char *p = strrchr(buf, ')');
    unsigned long ut = 0, st = 0;
    /* fields after the name: state ppid pgrp session tty tpgid flags minflt cminflt majflt
     * cmajflt utime stime */
    if (p == NULL || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut,
                            &st) != 2)
        return -1;
    return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

/* The scheduler runs out of descriptors (its limit is lowered under it to a little above what
 * it uses). Peers past that are closed by libuv's spare-descriptor trick instead of waiting in
 * the backlog; the scheduler logs it once, does not spin while the table is full, and serves
 * normally once descriptors are free again. */
static void accept_survives_emfile_without_spinning(void **state)
{
    (void)state;
    h_cluster *c = one_worker_cluster();
    pid_t pid = c->sched.pid;
    struct rlimit old, low;
    assert_int_equal(prlimit(pid, RLIMIT_NOFILE, NULL, &old), 0);
    int used = 0;
    char dir[64];
    snprintf(dir, sizeof dir, "/proc/%d/fd", (int)pid);
    DIR *d = opendir(dir);
    assert_non_null(d);
    while (readdir(d) != NULL)
        used++;
    closedir(d);
    low.rlim_cur = (rlim_t)used + 8; /* the soft limit only: ours to put back */
    low.rlim_max = old.rlim_max;
    assert_int_equal(prlimit(pid, RLIMIT_NOFILE, &low, NULL), 0);
    enum { N = 40 };
    wire *fds[N];
    int challenged = 0, closed = 0;
    for (int i = 0; i < N; i++)
        fds[i] = wire_open(c->addr);
    for (int i = 0; i < N; i++) {
        uint32_t type;
        int64_t code;
        char msg[256];
        int rc = wire_first_frame(fds[i], &type, &code, msg, sizeof msg);
        assert_true(rc >= 0); /* answered or closed, never left hanging */
        if (rc == 1)
            challenged++;
        else
            closed++;
    }
    fprintf(stderr, "%d peers got a CHALLENGE, %d were closed at EMFILE\n", challenged, closed);
    assert_true(closed > 0);
    log_arg la = {&c->sched, "raise the descriptor limit"};
    assert_true(h_eventually(logged_cond, &la, 20000));
    assert_int_equal(h_log_count(&c->sched, "raise the descriptor limit"), 1);
    /* With the table still full, the scheduler is idle: no accept busy loop. */
    double cpu0 = proc_cpu_s(pid);
    poll(NULL, 0, 1000);
    double cpu1 = proc_cpu_s(pid);
    fprintf(stderr, "scheduler CPU while full: %.2f s in 1 s\n", cpu1 - cpu0);
    assert_true(cpu0 >= 0 && cpu1 - cpu0 < 0.5);
    /* Descriptors again: the limit back up (the held connections stay, and count). */
    assert_int_equal(prlimit(pid, RLIMIT_NOFILE, &old, NULL), 0);
    for (int i = 0; i < N; i++)
        wire_close(fds[i]);
    assert_int_equal(ctl_workers(c), 1);
    spillway *cl = e2e_connect(c);
    e2e_client_works(cl);
    spillway_close(cl);
    E2E_FINISH(c, NULL);
}

/* Established TCP connections to or from port (both ends: the daemon's accepted socket and the
 * peer's connected one, all on this host): how many, and how many have the keepalive timer
 * running (timer 2 in /proc/net/tcp). */
static void tcp_keepalive_count(int port, int *total, int *keepalive)
{
    *total = *keepalive = 0;
    FILE *f = fopen("/proc/net/tcp", "re");
    if (f == NULL)
        return;
    char line[512];
    while (fgets(line, sizeof line, f) != NULL) {
        unsigned lport, rport, st, tr;
        if (sscanf(line, " %*d: %*x:%x %*x:%x %x %*x:%*x %x:", &lport, &rport, &st, &tr) != 4)
            continue;
        if (((int)lport != port && (int)rport != port) || st != 1)
            continue;
        (*total)++;
        *keepalive += tr == 2;
    }
    fclose(f);
}

typedef struct ka_arg {
    int port, want;
} ka_arg;

static bool ka_cond(void *arg)
{
    ka_arg *a = arg;
    int total, ka;
    tcp_keepalive_count(a->port, &total, &ka);
    return total >= a->want && ka == total;
}

/* Every TCP connection has keepalive on at both ends (so a peer that vanished is noticed):
 * accepted by the scheduler or a worker's peer port, and made by a worker or a client. */
static void every_tcp_connection_has_keepalive(void **state)
{
    (void)state;
    h_cluster *c = one_worker_cluster();
    spillway_opts o;
    spillway_opts_init(&o);
    o.no_local = 1; /* the client talks to the worker over TCP */
    spillway *cl;
    assert_int_equal(spillway_connect(c->addr, &o, &cl), 0);
    uint8_t big[200000];
    memset(big, 7, sizeof big);
    spillway_ref r;
    assert_int_equal(spillway_put(cl, big, sizeof big, &r), 0);
    char host[64];
    ka_arg a = {0, 4}; /* the worker's and the client's connections, both ends of each */
    assert_int_equal(spw_addr_split(c->addr, host, &a.port), 0);
    assert_true(h_eventually(ka_cond, &a, 20000));
    a.want = 2; /* the client's upload connection, both ends */
    assert_int_equal(spw_addr_split(c->workers[0].addr, host, &a.port), 0);
    assert_true(h_eventually(ka_cond, &a, 20000));
    assert_int_equal(spillway_release(cl, r), 0);
    spillway_close(cl);
    E2E_FINISH(c, NULL);
}

/* ============================================================ configuration */

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

static void write_file(const char *path, const char *text, mode_t mode)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
    assert_int_equal(chmod(path, mode), 0);
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
            write_file(conf, text, 0644);
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
static void config_file_mistakes_name_file_line_and_key(void **state)
{
    (void)state;
    static const conf_case cases[] = {
        {"spillway-worker", "slots = 1\n# comment\nstroe-capacity = 8G\n", {NULL}, 2,
         {"@CONF:3: unknown key 'stroe-capacity'"}},
        {"spillway-worker", "\nslots = many\n", {NULL}, 2,
         {"@CONF:2: slots: wants a whole number", "'many'"}},
        {"spillway-worker", "store-capacity = 12 apples\n", {NULL}, 2,
         {"@CONF:1: store-capacity: wants a size"}},
        {"spillway-worker", "store-capacity = nan%\n", {NULL}, 2,
         {"@CONF:1: store-capacity: wants a size", "'nan%'"}},
        {"spillway-worker", "spill-threshold = 1.5\n", {NULL}, 2,
         {"@CONF:1: spill-threshold: wants a fraction in (0, 1]"}},
        {"spillway-scheduler", "listen = 127.0.0.1:0\nmax-frame\n", {NULL}, 2,
         {"@CONF:2: max-frame: a bare word; this key needs a value"}},
        {"spillway-scheduler", "listen 127.0.0.1:0\n", {NULL}, 2,
         {"@CONF:1: 'listen 127.0.0.1:0' is not a key"}},
        {"spillway-scheduler", "listen = 127.0.0.1:port\n", {NULL}, 2,
         {"@CONF:1: listen: wants HOST:PORT", "'127.0.0.1:port'"}},
        {"spillway-scheduler", "\nhttp = ::1:7480\n", {NULL}, 2,
         {"@CONF:2: http: wants HOST:PORT", "'::1:7480'"}},
        {"spillway-worker", "scheduler = 127.0.0.1\n", {NULL}, 2,
         {"@CONF:1: scheduler: wants HOST:PORT", "'127.0.0.1'"}},
        {"spillway-worker", "advertise = :7000\n", {NULL}, 2,
         {"@CONF:1: advertise: wants HOST or HOST:PORT", "':7000'"}},
        {"spillway-scheduler", "log-level =\n", {NULL}, 2, {"@CONF:1: log-level: empty value"}},
        {"spillway-scheduler", "log-level = loud\n", {NULL}, 2,
         {"@CONF:1: log-level: unknown level 'loud'"}},
        {"spillway-scheduler", "version = 2\n", {NULL}, 2, {"@CONF:1: unknown key 'version'"}},
        {"spillway-scheduler", "config = /etc/other.conf\n", {NULL}, 2,
         {"@CONF:1: config: config files do not nest"}},
        {"spillway-scheduler", "= 5\n", {NULL}, 2, {"@CONF:1: missing key before '='"}},
        {"spillway-scheduler", "task-retries = -1\n", {NULL}, 2,
         {"@CONF:1: task-retries: wants a whole number, got '-1'"}},
        {"spillway-worker", "max-connections = 3\n", {NULL}, 2,
         {"@CONF:1: max-connections: wants a whole number 8..1000000"}},
        {"spillway-worker", "local-group = no-such-group-here\n", {NULL}, 2,
         {"@CONF:1: local-group: no-such-group-here: no such group"}},
        /* A directory, or nothing at all, given as the file. */
        {"spillway-scheduler", NULL, {"--config", "@DIR"}, 2,
         {"--config @DIR: is a directory, not a config file"}},
        {"spillway-worker", NULL, {"--config", "@DIR/absent.conf"}, 2,
         {"--config @DIR/absent.conf: no such file or directory"}},
        /* On the command line the option is named instead. */
        {"spillway-worker", NULL, {"--slots", "0"}, 2, {"--slots: wants a whole number 1..4096"}},
        {"spillway-scheduler", NULL, {"--frobnicate"}, 2, {"unknown option '--frobnicate'"}},
    };
    run_conf_cases(cases, sizeof cases / sizeof cases[0]);
}

/* Settings that each parse but do not fit together are refused, naming the key to change. */
static void config_cross_checks_refuse_with_a_reason(void **state)
{
    (void)state;
    static char huge[64];
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    snprintf(huge, sizeof huge, "%lluM",
             (unsigned long long)pages * (unsigned long long)page / (1u << 20) * 2 + 1);
    const conf_case cases[] = {
        {"spillway-scheduler", "heartbeat-timeout = 2500\n", {NULL}, 2,
         {"@CONF:1: heartbeat-timeout: 2500 ms is less than 3 heartbeats", "at least 3000"}},
        {"spillway-scheduler", "max-frame = 1M\nchunk-size = 768K\n", {NULL}, 2,
         {"@CONF:2: chunk-size: 786432 bytes must be at most half of max-frame (1048576)"}},
        {"spillway-scheduler", "inline-limit = 8M\n", {NULL}, 2,
         {"@CONF:1: inline-limit: 8388608 bytes must be at most a sixteenth of max-frame"}},
        {"spillway-worker", "spill-target = 0.8\n", {NULL}, 2,
         {"@CONF:1: spill-target: want spill-target < spill-threshold < pause-threshold <= 1",
          "got 0.8, 0.8, 0.9"}},
        {"spillway-worker", "spill-threshold = 0.95\n", {NULL}, 2,
         {"@CONF:1: spill-threshold: want spill-target < spill-threshold < pause-threshold"}},
        /* A store larger than the host only warns (checked together with a mistake that stops
         * the worker before it would make that store). */
        {"spillway-worker", NULL, {"--store-capacity", huge, "--spill-target", "0.9"}, 2,
         {"--store-capacity", "warning: more than this host's physical memory",
          "want spill-target < spill-threshold"}},
    };
    run_conf_cases(cases, sizeof cases / sizeof cases[0]);
}

/* Secret files and directories are named with what is wrong with them. */
static void secret_and_path_mistakes_name_the_path(void **state)
{
    (void)state;
    conf_dir();
    char p[600];
    snprintf(p, sizeof p, "%s/empty.secret", g_dir);
    write_file(p, "\n", 0600);
    snprintf(p, sizeof p, "%s/short.secret", g_dir);
    write_file(p, "fifteen-bytes!!\n", 0600);
    snprintf(p, sizeof p, "%s/open.secret", g_dir);
    write_file(p, "a-secret-of-enough-bytes\n", 0644);
    snprintf(p, sizeof p, "%s/file", g_dir);
    write_file(p, "not a directory\n", 0644);
    static const conf_case cases[] = {
        {"spillway-scheduler", NULL, {"--secret-file", "@DIR/empty.secret"}, 2,
         {"--secret-file @DIR/empty.secret: the secret file is empty"}},
        {"spillway-worker", "secret-file = @DIR/short.secret\n", {NULL}, 2,
         {"shorter than 16 bytes"}},
        {"spillway-scheduler", NULL, {"--secret-file", "@DIR/short.secret"}, 2,
         {"--secret-file @DIR/short.secret: the secret is shorter than 16 bytes"}},
        {"spillway-scheduler", NULL, {"--secret-file", "@DIR/open.secret"}, 2,
         {"--secret-file @DIR/open.secret:", "mode 0600"}},
        {"spillway-scheduler", NULL, {"--secret-file", "@DIR/absent.secret"}, 2,
         {"--secret-file @DIR/absent.secret: no such file or directory"}},
        {"spillway-worker", NULL, {"--spill-dir", "@DIR/no/such/dir"}, 2,
         {"--spill-dir @DIR/no/such/dir: no such file or directory"}},
        {"spillway-worker", NULL, {"--spill-dir", "@DIR/file"}, 2,
         {"--spill-dir @DIR/file: not a directory"}},
    };
    run_conf_cases(cases, sizeof cases / sizeof cases[0]);
}

/* ============================================================ error reporting */

static void errmsg_has(spillway *cl, const char *want)
{
    const char *m = spillway_errmsg(cl);
    fprintf(stderr, "errmsg: %s\n", m);
    if (strstr(m, want) == NULL)
        fail_msg("errmsg '%s' lacks '%s'", m, want);
}

/* Every failing call leaves its own text in spillway_errmsg (an argument check included, which
 * used to leave the previous call's text), and a plugin function's -1 or errno is a failed task
 * (SPW_ETASKFAILED) with its text, not SPW_EPERM. */
static void every_failing_call_sets_errmsg(void **state)
{
    (void)state;
    h_cluster *c = h_cluster_start(false, NULL);
    const char *plugin = getenv("SPW_TEST_PLUGIN") ? getenv("SPW_TEST_PLUGIN") : SPW_TEST_PLUGIN;
    const char *const args[] = {"--slots", "1", "--store-capacity", "64M", "--plugin", plugin, NULL};
    h_worker_start(c, args);
    spillway *cl = e2e_connect(c);
    spillway_ref bogus = {1, 2}, r;
    assert_int_equal(spillway_release(cl, bogus), SPW_ENOTHELD);
    errmsg_has(cl, "is not held by this client");
    /* Argument checks: each names the call, none keeps the text above. */
    uint8_t b[4] = {1, 2, 3, 4};
    assert_int_equal(spillway_put(cl, b, 0, &r), SPW_EINVAL);
    errmsg_has(cl, "spillway_put: len is 0");
    assert_int_equal(spillway_put(cl, b, sizeof b, &r), 0);
    assert_int_equal(spillway_get(cl, r, 1000, NULL, NULL), SPW_EINVAL);
    errmsg_has(cl, "spillway_get: invalid argument");
    assert_int_equal(spillway_get_view(cl, r, 1000, NULL), SPW_EINVAL);
    errmsg_has(cl, "spillway_get_view: invalid argument");
    assert_int_equal(spillway_wait(cl, NULL, 3, 1000), SPW_EINVAL);
    errmsg_has(cl, "spillway_wait: invalid argument");
    assert_int_equal(spillway_release_many(cl, NULL, 2), SPW_EINVAL);
    errmsg_has(cl, "spillway_release_many: invalid argument");
    spillway_graph *g = spillway_graph_new(cl);
    spillway_ref t;
    spillway_arg a[2] = {spillway_arg_bytes("abc", 3), spillway_arg_bytes("d", 1)};
    assert_int_equal(spillway_task(g, "", a, 1, SPILLWAY_KEEP, &t), SPW_EINVAL);
    errmsg_has(cl, "spillway_task_at: invalid argument");
    char longname[400];
    memset(longname, 'x', sizeof longname - 1);
    longname[sizeof longname - 1] = '\0';
    assert_int_equal(spillway_graph_place(g, longname), SPW_EINVAL);
    errmsg_has(cl, "spillway_graph_place: invalid argument");
    /* A plugin function failing with -1 (and a text), and with an errno value (no text). */
    spillway_ref t1, t2;
    assert_int_equal(spillway_task(g, "reverse", a, 2, SPILLWAY_KEEP, &t1), 0);
    assert_int_equal(spillway_task(g, "fail_bare", a, 1, SPILLWAY_KEEP, &t2), 0);
    assert_int_equal(spillway_submit(g), 0);
    spillway_graph_free(g);
    void *data;
    size_t len;
    assert_int_equal(spillway_get(cl, t1, 60000, &data, &len), SPW_ETASKFAILED);
    errmsg_has(cl, "reverse takes one argument, got 2");
    assert_int_equal(spillway_get(cl, t2, 60000, &data, &len), SPW_ETASKFAILED);
    errmsg_has(cl, "fail_bare returned -5");
    assert_int_equal(spillway_release(cl, t1), 0);
    assert_int_equal(spillway_release(cl, t2), 0);
    assert_int_equal(spillway_release(cl, r), 0);
    spillway_close(cl);
    E2E_FINISH(c, NULL);
}

/* Releasing references once the scheduler connection is gone says so (SPW_ECLOSED), for one
 * reference and for many, instead of returning 0. */
static void release_on_closed_connection_is_eclosed(void **state)
{
    (void)state;
    h_cluster *c = one_worker_cluster();
    spillway *cl = e2e_connect(c);
    static uint8_t big[300000];
    memset(big, 3, sizeof big);
    spillway_ref r[3];
    for (int i = 0; i < 3; i++)
        assert_int_equal(spillway_put(cl, big, sizeof big, &r[i]), 0);
    E2E_STOP(c, NULL); /* the scheduler is gone: our connection is closed */
    assert_int_equal(spillway_release_many(cl, r, 2), SPW_ECLOSED);
    errmsg_has(cl, "is closed");
    assert_int_equal(spillway_release(cl, r[2]), SPW_ECLOSED);
    errmsg_has(cl, "is closed");
    /* Those handles are gone all the same: a second release is SPW_ENOTHELD. */
    assert_int_equal(spillway_release_many(cl, r, 2), SPW_ENOTHELD);
    spillway_close(cl);
}

/* Releasing many references at once under a small --max-frame releases them all at the
 * scheduler: the ids go in frames under its limit. They used to go 65,536 to a frame (1.1 MiB),
 * a frame over 64 KiB was not sent at all, and the scheduler kept every reference. */
static void release_many_fits_a_small_max_frame(void **state)
{
    (void)state;
    const char *const sargs[] = {"--max-frame", "64K", "--chunk-size", "16K", "--inline-limit",
                                 "4K", NULL};
    h_cluster *c = h_cluster_start(false, sargs);
    const char *const wargs[] = {"--slots", "1", "--store-capacity", "64M", NULL};
    h_worker_start(c, wargs);
    spillway *cl = e2e_connect(c);
    enum { N = 5000 };
    spillway_ref *r = calloc(N, sizeof *r);
    assert_non_null(r);
    spillway_graph *g = spillway_graph_new(cl);
    for (uint64_t i = 0; i < N; i++) {
        spillway_arg a = spillway_arg_u64(i);
        assert_int_equal(spillway_task(g, "inc", &a, 1, SPILLWAY_KEEP, &r[i]), 0);
    }
    assert_int_equal(spillway_submit(g), 0);
    spillway_graph_free(g);
    assert_int_equal(spillway_wait(cl, r, N, 60000), 0);
    assert_int_equal(spillway_release_many(cl, r, N), 0);
    free(r);
    assert_true(e2e_cluster_idle(c, 20000)); /* the scheduler holds none of them */
    E2E_STOP(c, cl);
}

/* ============================================================ silent peers */

/* A one-worker cluster, and a client of it whose stall timeout is ms with a graph of one kept
 * task fn(arg) built, not submitted (*r its result). */
static spillway *stall_client(int ms, const char *fn, uint64_t arg, spillway_graph **g,
                              spillway_ref *r)
{
    spillway *cl = e2e_connect(one_worker_cluster());
    assert_int_equal(spillway_set_stall_timeout(cl, ms), 0);
    spillway_arg a = spillway_arg_u64(arg);
    *g = spillway_graph_new(cl);
    assert_int_equal(spillway_task(*g, fn, &a, 1, SPILLWAY_KEEP, r), 0);
    return cl;
}

/* A call on a scheduler that stopped answering (here SIGSTOP: the kernel still takes our bytes)
 * fails with SPW_ETIMEDOUT after the stall timeout instead of waiting for ever, and says
 * which peer went silent; the connection is closed then. */
static void call_on_a_stopped_scheduler_times_out(void **state)
{
    (void)state;
    spillway_graph *g;
    spillway_ref r;
    spillway *cl = stall_client(600, "inc", 1, &g, &r);
    h_cluster *c = g_cluster;
    assert_int_equal(spillway_set_stall_timeout(cl, -1), SPW_EINVAL);
    assert_int_equal(kill(c->sched.pid, SIGSTOP), 0);
    int rc = spillway_submit(g);
    assert_int_equal(kill(c->sched.pid, SIGCONT), 0);
    spillway_graph_free(g);
    assert_int_equal(rc, SPW_ETIMEDOUT);
    errmsg_has(cl, "sent nothing for 600 ms");
    spillway_ref r2;
    static uint8_t b[300000]; /* above the inline limit: it needs the scheduler */
    assert_int_equal(spillway_put(cl, b, sizeof b, &r2), SPW_ECLOSED);
    E2E_STOP(c, cl);
}

/* A client with a 600 ms stall timeout whose kept sleep_ms(60 s) (*r) is submitted on a cluster
 * (stall_client's, or c's when given) whose scheduler is then stopped (SIGSTOP). */
static spillway *client_of_a_stopped_scheduler(h_cluster *c, spillway_ref *r)
{
    spillway_graph *g;
    spillway *cl;
    if (c == NULL) {
        cl = stall_client(600, "sleep_ms", 60000, &g, r);
    } else {
        cl = e2e_connect(c);
        assert_int_equal(spillway_set_stall_timeout(cl, 600), 0);
        spillway_arg a = spillway_arg_u64(60000);
        g = spillway_graph_new(cl);
        assert_int_equal(spillway_task(g, "sleep_ms", &a, 1, SPILLWAY_KEEP, r), 0);
    }
    assert_int_equal(spillway_submit(g), 0);
    spillway_graph_free(g);
    assert_int_equal(kill(g_cluster->sched.pid, SIGSTOP), 0);
    return cl;
}

/* The scheduler goes on; the client's wait on it (rc) failed as a stall naming it. */
static void stopped_scheduler_wait_failed(spillway *cl, int rc)
{
    assert_int_equal(kill(g_cluster->sched.pid, SIGCONT), 0);
    assert_int_equal(rc, SPW_ETIMEDOUT);
    errmsg_has(cl, "sent nothing for 600 ms");
    spillway_close(cl);
}

/* Waits that send nothing (spillway_wait, spillway_get of a result still running) on a scheduler
 * that stopped answering fail the same way, and their text names the scheduler too. Before,
 * it said only "1 of 1 results not ready: operation timed out" (and "obj=... not ready"). */
static void wait_on_a_stopped_scheduler_names_it(void **state)
{
    (void)state;
    spillway_ref r;
    spillway *cl = client_of_a_stopped_scheduler(NULL, &r);
    stopped_scheduler_wait_failed(cl, spillway_wait(cl, &r, 1, -1));

    cl = client_of_a_stopped_scheduler(g_cluster, &r);
    void *data = NULL;
    size_t len = 0;
    stopped_scheduler_wait_failed(cl, spillway_get(cl, r, -1, &data, &len));
    E2E_STOP(g_cluster, NULL);
}

/* A program that polls (short waits in a loop, its own work between them) on a scheduler that
 * stopped answering still finds out: the silence inside its waits adds up across them, while
 * the time between them does not count. With the clock started afresh at each wait, 100 ms
 * waits under a 600 ms stall timeout never saw the silence: the loop timed out 300 times. */
static void polling_waits_on_a_stopped_scheduler_find_it_silent(void **state)
{
    (void)state;
    spillway_ref r;
    spillway *cl = client_of_a_stopped_scheduler(NULL, &r);
    int rc = SPW_ETIMEDOUT, polls = 0;
    while (rc == SPW_ETIMEDOUT && strstr(spillway_errmsg(cl), "sent nothing") == NULL &&
           polls++ < 300)
        rc = spillway_wait(cl, &r, 1, 100);
    stopped_scheduler_wait_failed(cl, rc);
    E2E_STOP(g_cluster, NULL);
}

/* The stall timeout is about silence, not about how long the answer takes: a result that
 * comes after many stall timeouts still comes, since the live scheduler answers the probes
 * sent meanwhile (without them this get would fail after 300 ms). */
static void slow_answer_from_a_live_scheduler_is_not_a_stall(void **state)
{
    (void)state;
    spillway_graph *g;
    spillway_ref r;
    spillway *cl = stall_client(300, "sleep_ms", 2000, &g, &r);
    h_cluster *c = g_cluster;
    assert_int_equal(spillway_submit(g), 0);
    spillway_graph_free(g);
    void *data = NULL;
    size_t len = 0;
    assert_int_equal(spillway_get(cl, r, -1, &data, &len), 0);
    spillway_free(data);
    assert_int_equal(spillway_release(cl, r), 0);
    spillway_close(cl);
    E2E_FINISH(c, NULL);
}

/* Silence while no call waits is not a stall: a client busy elsewhere for longer than its stall
 * timeout (here 3.5 s against 3 s, its loop not run meanwhile), then waiting for a task still
 * running, gets the result; its scheduler is probed from the start of that wait. Before, the
 * first look at the connection (250 ms into the wait) counted the idle spell as silence and
 * closed the live scheduler: SPW_ETIMEDOUT. The first wait makes that look see all our bytes
 * out already (else the bytes of the last call would count as fresh progress). */
static void idle_spell_before_a_wait_is_not_a_stall(void **state)
{
    (void)state;
    spillway_graph *g;
    spillway_ref r;
    spillway_ref first;
    spillway *cl = stall_client(3000, "sleep_ms", 600, &g, &first);
    h_cluster *c = g_cluster;
    spillway_arg a = spillway_arg_u64(6000);
    assert_int_equal(spillway_task(g, "sleep_ms", &a, 1, SPILLWAY_KEEP, &r), 0);
    assert_int_equal(spillway_submit(g), 0);
    spillway_graph_free(g);
    assert_int_equal(spillway_wait(cl, &first, 1, -1), 0);
    usleep(3500 * 1000); /* the program doing other work: nothing is awaited here */
    int rc = spillway_wait(cl, &r, 1, -1);
    if (rc != 0)
        fail_msg("wait after an idle spell: %s (%s)", spw_strerror(rc), spillway_errmsg(cl));
    assert_int_equal(spillway_release(cl, first), 0);
    assert_int_equal(spillway_release(cl, r), 0);
    spillway_close(cl);
    E2E_FINISH(c, NULL);
}

/* A put over TCP to a worker that stopped reading (SIGSTOP, once the connection is up) fails
 * with SPW_ETIMEDOUT, naming the worker, once neither side has moved a byte for the stall
 * timeout; the caller's buffer is free again on return and the cluster goes on. */
static void put_to_a_stopped_worker_times_out(void **state)
{
    (void)state;
    h_cluster *c = one_worker_cluster();
    spillway_opts o;
    spillway_opts_init(&o);
    o.no_local = 1;
    spillway *cl = NULL;
    assert_int_equal(spillway_connect(c->addr, &o, &cl), 0);
    assert_int_equal(spillway_set_stall_timeout(cl, 600), 0);
    size_t n = 64u << 20;
    uint8_t *big = malloc(n);
    assert_non_null(big);
    memset(big, 7, n);
    spillway_ref first, second;
    assert_int_equal(spillway_put(cl, big, 1u << 20, &first), 0); /* the worker connection */
    assert_int_equal(kill(c->workers[0].pid, SIGSTOP), 0);
    int rc = spillway_put(cl, big, n, &second);
    assert_int_equal(kill(c->workers[0].pid, SIGCONT), 0);
    assert_int_equal(rc, SPW_ETIMEDOUT);
    errmsg_has(cl, "took nothing for 600 ms");
    memset(big, 9, n); /* ours again: nothing of it may still be queued (ASan would see) */
    free(big);
    void *data = NULL;
    size_t len = 0;
    assert_int_equal(spillway_get(cl, first, 60000, &data, &len), 0);
    assert_int_equal(len, 1u << 20);
    spillway_free(data);
    assert_int_equal(spillway_release(cl, first), 0);
    spillway_close(cl);
    E2E_FINISH(c, NULL);
}

static const struct CMUnitTest tests[] = {
    H_CASE(local_socket_refuses_other_uid_and_client_reads_over_tcp),
    H_CASE(local_group_member_gets_read_only_arena_for_reads),
    H_CASE(local_group_member_with_many_groups_gets_in),
    H_CASE(connection_cap_refuses_clients_but_not_workers_or_ctl),
    H_CASE(worker_connection_cap_keeps_room_for_workers),
    H_CASE(accept_survives_emfile_without_spinning),
    H_CASE(every_tcp_connection_has_keepalive),
    H_CASE(config_file_mistakes_name_file_line_and_key),
    H_CASE(config_cross_checks_refuse_with_a_reason),
    H_CASE(secret_and_path_mistakes_name_the_path),
    H_CASE(every_failing_call_sets_errmsg),
    H_CASE(release_on_closed_connection_is_eclosed),
    H_CASE(release_many_fits_a_small_max_frame),
    H_CASE(call_on_a_stopped_scheduler_times_out),
    H_CASE(wait_on_a_stopped_scheduler_names_it),
    H_CASE(polling_waits_on_a_stopped_scheduler_find_it_silent),
    H_CASE(slow_answer_from_a_live_scheduler_is_not_a_stall),
    H_CASE(idle_spell_before_a_wait_is_not_a_stall),
    H_CASE(put_to_a_stopped_worker_times_out),
};

SPW_TEST_MAIN(tests)
