/* Connection limits and what the daemons do at them: the --max-connections caps keep room for
 * workers and spillway-ctl, a full descriptor table (EMFILE) closes peers without a busy
 * accept loop, and every TCP connection has keepalive. Real daemons on 127.0.0.1. */
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

static int ctl_workers(h_cluster *c)
{
    json_t *st = e2e_ctl_json(c, "status");
    if (st == NULL)
        return -1;
    int n = (int)json_array_size(json_object_get(st, "workers"));
    json_decref(st);
    return n;
}

/* Connections a daemon listening on port still holds (ESTABLISHED or CLOSE_WAIT on its side). */
static int daemon_conns(int port)
{
    return e2e_tcp_count(port, 1u << 1 | 1u << 8);
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
static void connection_cap_refuses_clients_but_not_workers_or_ctl(void)
{
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
static void worker_connection_cap_keeps_room_for_workers(void)
{
    h_cluster *c = h_cluster_start(false, NULL);
    static const char *const w0[] = {"--slots", "1", "--store-capacity", "64M", "--max-connections",
                                     "8",       NULL};
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
            e2e_errmsg_has(cl[i], "limit exceeded");
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
    if (p == NULL ||
        sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st) != 2)
        return -1;
    return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

/* The scheduler runs out of descriptors (its limit is lowered under it to a little above what
 * it uses). Peers past that are closed by libuv's spare-descriptor trick instead of waiting in
 * the backlog; the scheduler logs it once, does not spin while the table is full, and serves
 * normally once descriptors are free again. */
static void accept_survives_emfile_without_spinning(void)
{
    h_cluster *c = h_cluster_simple(1);
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
    assert_true(e2e_logged(&c->sched, "raise the descriptor limit", 20000));
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
static void every_tcp_connection_has_keepalive(void)
{
    h_cluster *c = h_cluster_simple(1);
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

static const struct CMUnitTest tests[] = {
    H_CASE(connection_cap_refuses_clients_but_not_workers_or_ctl),
    H_CASE(worker_connection_cap_keeps_room_for_workers),
    H_CASE(accept_survives_emfile_without_spinning),
    H_CASE(every_tcp_connection_has_keepalive),
};

SPW_TEST_MAIN(tests)
