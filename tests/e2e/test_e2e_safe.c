/* End-to-end tests of issue 10, "safe by default": who may use a worker's local socket and
 * which arena mapping each gets, the connection cap, configuration mistakes, and error
 * reporting. Real daemons on 127.0.0.1 with ephemeral ports; a case that needs root (to run a
 * helper as another user) exits 77, which ctest reports as SKIP, when not root. */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <grp.h>
#include <netinet/in.h>
#include <poll.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "../unit/test_main.h"
#include "e2e_util.h"
#include "spillway/proto.h"

#define SKIP_CODE 77

static h_cluster g_cluster;
static bool g_running;

static bool cluster_stop(h_cluster *c)
{
    g_running = false;
    return h_cluster_stop(c);
}

static int teardown(void **state)
{
    (void)state;
    if (g_running) {
        fprintf(stderr, "case failed: daemon logs follow\n");
        h_dump_logs(&g_cluster);
        g_running = false;
        h_cluster_stop(&g_cluster);
    }
    return 0;
}

static void need_root(void)
{
    if (geteuid() != 0) {
        fprintf(stderr, "SKIP: needs root to run a helper as user nobody\n");
        exit(SKIP_CODE);
    }
}

/* Runs spw_local_probe as nobody:nogroup against worker 0; its output goes to stderr. */
static int run_probe(h_cluster *c, const char *mode)
{
    struct passwd *pw = getpwnam("nobody");
    if (pw == NULL)
        fail_msg("no user nobody");
    char uid[16], gid[16], pid[16];
    snprintf(uid, sizeof uid, "%u", (unsigned)pw->pw_uid);
    snprintf(gid, sizeof gid, "%u", (unsigned)pw->pw_gid);
    snprintf(pid, sizeof pid, "%d", (int)c->workers[0].pid);
    const char *argv[] = {h_bin("spw_local_probe"), uid, gid, c->addr, pid, mode, NULL};
    char *out = NULL;
    int rc = h_run(argv, &out);
    fprintf(stderr, "--- spw_local_probe %s (exit %d):\n%s", mode, rc, out != NULL ? out : "");
    free(out);
    return rc;
}

/* Another local user (nobody) is refused on the worker's abstract socket with SPW_EAUTH before
 * any handshake, so it never holds the arena; libspillway falls back to TCP and still reads
 * the right bytes. */
static void local_socket_refuses_other_uid_and_client_reads_over_tcp(void **state)
{
    (void)state;
    need_root();
    h_cluster_simple(&g_cluster, 1);
    g_running = true;
    assert_int_equal(run_probe(&g_cluster, "refused"), 0);
    assert_true(e2e_cluster_idle(&g_cluster, 20000));
    assert_true(cluster_stop(&g_cluster));
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
    h_cluster_start(&g_cluster, false, NULL);
    g_running = true;
    static const char *const args[] = {"--slots", "1", "--store-capacity", "256M",
                                       "--local-group", "nogroup", NULL};
    h_worker_start(&g_cluster, args);
    assert_int_equal(run_probe(&g_cluster, "allowed"), 0);
    assert_true(e2e_cluster_idle(&g_cluster, 20000));
    assert_true(cluster_stop(&g_cluster));
}

/* ============================================================ connection caps */

/* A raw TCP connection to addr with 30 s receive timeouts. */
static int raw_connect(const char *addr)
{
    char host[64];
    int port;
    assert_int_equal(spw_addr_split(addr, host, &port), 0);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(fd >= 0);
    struct timeval tv = {30, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    struct sockaddr_in sin;
    memset(&sin, 0, sizeof sin);
    sin.sin_family = AF_INET;
    sin.sin_port = htons((uint16_t)port);
    inet_pton(AF_INET, "127.0.0.1", &sin.sin_addr);
    if (connect(fd, (struct sockaddr *)&sin, sizeof sin) != 0)
        fail_msg("connect %s: %s", addr, strerror(errno));
    return fd;
}

/* Reads the first frame the daemon sends: 1 with its type and error code/message, 0 if the
 * daemon closed the connection without a frame, -1 on timeout. */
static int raw_first_frame(int fd, uint32_t *type, int64_t *code, char *msg, size_t msglen)
{
    uint8_t buf[8192];
    size_t len = 0;
    for (;;) {
        proto_limits lim;
        proto_limits_default(&lim);
        msgpack_zone z;
        msgpack_zone_init(&z, 4096);
        proto_msg m;
        int rc = proto_decode(buf, len, &lim, &z, &m);
        if (rc > 0) {
            *type = m.type;
            *code = m.type == PROTO_ERROR ? m.f[F_ERROR_CODE].i : 0;
            if (m.type == PROTO_ERROR)
                proto_str(&m.f[F_ERROR_MSG], msg, msglen);
            msgpack_zone_destroy(&z);
            return 1;
        }
        msgpack_zone_destroy(&z);
        assert_true(rc == 0 && len < sizeof buf);
        ssize_t n = recv(fd, buf + len, sizeof buf - len, 0);
        if (n == 0 || (n < 0 && errno == ECONNRESET))
            return 0;
        if (n < 0)
            return errno == EINTR ? raw_first_frame(fd, type, code, msg, msglen) : -1;
        len += (size_t)n;
    }
}

/* Lines of a daemon's log that contain needle. */
static int log_count(const h_proc *p, const char *needle)
{
    FILE *f = fopen(p->log, "re");
    if (f == NULL)
        return 0;
    char line[2048];
    int n = 0;
    while (fgets(line, sizeof line, f) != NULL)
        n += strstr(line, needle) != NULL;
    fclose(f);
    return n;
}

typedef struct log_arg {
    const h_proc *p;
    const char *needle;
} log_arg;

static bool logged_cond(void *arg)
{
    log_arg *a = arg;
    return log_count(a->p, a->needle) > 0;
}

/* The client does a round trip: an inc task on 41 gives 42. */
static void client_works(spillway *cl)
{
    spillway_graph *g = spillway_graph_new(cl);
    spillway_ref r;
    spillway_arg a = spillway_arg_u64(41);
    assert_int_equal(spillway_task(g, "inc", &a, 1, SPILLWAY_KEEP, &r), 0);
    assert_int_equal(spillway_submit(g), 0);
    spillway_graph_free(g);
    assert_int_equal(e2e_get_u64(cl, r), 42);
    assert_int_equal(spillway_release(cl, r), 0);
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

/* --max-connections 8 on the scheduler keeps 4 for workers and spillway-ctl: the fifth client
 * is refused with SPW_ELIMIT while the clients already connected keep working and a new worker
 * and spillway-ctl still get in; past the total cap even a raw connection gets an ERROR frame
 * (SPW_ELIMIT, "too many connections") before anything else. Each kind of refusal is logged
 * once, however many peers are refused. */
static void connection_cap_refuses_clients_but_not_workers_or_ctl(void **state)
{
    (void)state;
    static const char *const sargs[] = {"--max-connections", "8", NULL};
    h_cluster_start(&g_cluster, false, sargs);
    g_running = true;
    h_cluster *c = &g_cluster;
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
    assert_int_equal(log_count(&c->sched, "too many connections: 4 clients connected"), 1);
    /* The reserved room: a new worker registers and spillway-ctl answers. */
    h_worker_start(c, wargs);
    assert_int_equal(ctl_workers(c), 2);
    client_works(cl[0]);
    client_works(cl[QUOTA - 1]);

    /* Scheduler connections now: 4 clients + 2 workers. Two raw ones reach the cap of 8;
     * the next is refused before its handshake. */
    int raw[3];
    for (int i = 0; i < 3; i++)
        raw[i] = raw_connect(c->addr);
    uint32_t type;
    int64_t code;
    char msg[512] = "";
    for (int i = 0; i < 2; i++) {
        assert_int_equal(raw_first_frame(raw[i], &type, &code, msg, sizeof msg), 1);
        assert_int_equal(type, PROTO_CHALLENGE);
    }
    assert_int_equal(raw_first_frame(raw[2], &type, &code, msg, sizeof msg), 1);
    assert_int_equal(type, PROTO_ERROR);
    assert_int_equal(code, SPW_ELIMIT);
    fprintf(stderr, "refusal: %s\n", msg);
    assert_non_null(strstr(msg, "too many connections: --max-connections 8 reached"));
    for (int i = 0; i < 3; i++)
        close(raw[i]);
    assert_int_equal(log_count(&c->sched, "--max-connections 8 reached"), 1);
    /* Once those are gone there is room again. */
    assert_int_equal(ctl_workers(c), 2);
    client_works(cl[1]);
    for (int i = 0; i < QUOTA; i++)
        spillway_close(cl[i]);
    spillway *again = e2e_connect(c);
    client_works(again);
    spillway_close(again);
    assert_true(e2e_cluster_idle(c, 20000));
    assert_true(cluster_stop(c));
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
    h_cluster_simple(&g_cluster, 1);
    g_running = true;
    h_cluster *c = &g_cluster;
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
    int fds[N], challenged = 0, closed = 0;
    for (int i = 0; i < N; i++)
        fds[i] = raw_connect(c->addr);
    for (int i = 0; i < N; i++) {
        uint32_t type;
        int64_t code;
        char msg[256];
        int rc = raw_first_frame(fds[i], &type, &code, msg, sizeof msg);
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
    assert_int_equal(log_count(&c->sched, "raise the descriptor limit"), 1);
    /* With the table still full, the scheduler is idle: no accept busy loop. */
    double cpu0 = proc_cpu_s(pid);
    poll(NULL, 0, 1000);
    double cpu1 = proc_cpu_s(pid);
    fprintf(stderr, "scheduler CPU while full: %.2f s in 1 s\n", cpu1 - cpu0);
    assert_true(cpu0 >= 0 && cpu1 - cpu0 < 0.5);
    /* Descriptors again: the limit back up (the held connections stay, and count). */
    assert_int_equal(prlimit(pid, RLIMIT_NOFILE, &old, NULL), 0);
    for (int i = 0; i < N; i++)
        close(fds[i]);
    assert_int_equal(ctl_workers(c), 1);
    spillway *cl = e2e_connect(c);
    client_works(cl);
    spillway_close(cl);
    assert_true(e2e_cluster_idle(c, 20000));
    assert_true(cluster_stop(c));
}

/* Established connections on the daemon's side with local port `port`: how many, and how many
 * have the keepalive timer running (timer 2 in /proc/net/tcp). */
static void tcp_keepalive_count(int port, int *total, int *keepalive)
{
    *total = *keepalive = 0;
    FILE *f = fopen("/proc/net/tcp", "re");
    if (f == NULL)
        return;
    char line[512];
    while (fgets(line, sizeof line, f) != NULL) {
        unsigned lport, st, tr;
        if (sscanf(line, " %*d: %*x:%x %*x:%*x %x %*x:%*x %x:", &lport, &st, &tr) != 3)
            continue;
        if ((int)lport != port || st != 1)
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

/* Every accepted TCP connection has keepalive on (so a peer that vanished is noticed), on the
 * scheduler and on a worker's peer port. */
static void every_tcp_connection_has_keepalive(void **state)
{
    (void)state;
    h_cluster_simple(&g_cluster, 1);
    g_running = true;
    h_cluster *c = &g_cluster;
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
    ka_arg a = {0, 2}; /* the worker's and the client's connections */
    assert_int_equal(spw_addr_split(c->addr, host, &a.port), 0);
    assert_true(h_eventually(ka_cond, &a, 20000));
    a.want = 1; /* the client's upload connection */
    assert_int_equal(spw_addr_split(c->workers[0].addr, host, &a.port), 0);
    assert_true(h_eventually(ka_cond, &a, 20000));
    assert_int_equal(spillway_release(cl, r), 0);
    spillway_close(cl);
    assert_true(e2e_cluster_idle(c, 20000));
    assert_true(cluster_stop(c));
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test_teardown(local_socket_refuses_other_uid_and_client_reads_over_tcp, teardown),
    cmocka_unit_test_teardown(local_group_member_gets_read_only_arena_for_reads, teardown),
    cmocka_unit_test_teardown(connection_cap_refuses_clients_but_not_workers_or_ctl, teardown),
    cmocka_unit_test_teardown(accept_survives_emfile_without_spinning, teardown),
    cmocka_unit_test_teardown(every_tcp_connection_has_keepalive, teardown),
};

SPW_TEST_MAIN(tests)
