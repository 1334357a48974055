/* End-to-end tests of addresses and of workers rejoining: daemons and clients reached by host
 * name (localhost), over IPv6 loopback ([::1], skipped where the machine has none), workers
 * that listen on a wildcard or advertise an address, malformed addresses refused by name, and
 * workers that register again with a restarted scheduler (or exit, with --reconnect-max 0).
 * Everything stays on this host's loopback. */
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../unit/test_main.h"
#include "e2e_util.h"

/* These cases reach this host by the name "localhost". A machine where that name does not
 * resolve to a loopback address (a bare chroot has no /etc/hosts) cannot run them: they exit
 * 77, which ctest reports as skipped, with the reason. */
static void need_localhost(void)
{
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *res = NULL;
    int loopback = 0;
    if (getaddrinfo("localhost", NULL, &hints, &res) == 0) {
        for (struct addrinfo *a = res; a != NULL; a = a->ai_next) {
            if (a->ai_family == AF_INET) {
                const struct sockaddr_in *in = (const void *)a->ai_addr;
                loopback |= (ntohl(in->sin_addr.s_addr) >> 24) == 127;
            } else if (a->ai_family == AF_INET6) {
                const struct sockaddr_in6 *in6 = (const void *)a->ai_addr;
                loopback |= IN6_IS_ADDR_LOOPBACK(&in6->sin6_addr);
            }
        }
        freeaddrinfo(res);
    }
    if (!loopback) {
        printf("SKIP: the name 'localhost' does not resolve to a loopback address here "
               "(no /etc/hosts?)\n");
        fflush(stdout);
        exit(77);
    }
}

/* Two workers, a graph whose second stage needs outputs made on both: bytes cross between
 * workers, and are checked one by one. */
static void transfers_are_exact(spillway *cl)
{
    enum { N = 8, PART = 1u << 20 };
    spillway_graph *g = spillway_graph_new(cl);
    spillway_ref parts[N], cat[N / 2];
    for (int i = 0; i < N; i++) {
        uint8_t pat[3] = {(uint8_t)i, (uint8_t)(i * 7), 0x5A};
        spillway_arg a[2] = {spillway_arg_u64(PART), spillway_arg_bytes(pat, 3)};
        assert_int_equal(spillway_task(g, "fill", a, 2, 0, &parts[i]), 0);
    }
    for (int i = 0; i < N / 2; i++) {
        spillway_arg a[2] = {spillway_arg_ref(parts[i]), spillway_arg_ref(parts[N - 1 - i])};
        assert_int_equal(spillway_task(g, "concat", a, 2, SPILLWAY_KEEP, &cat[i]), 0);
    }
    E2E_SUBMIT(g);
    for (int i = 0; i < N / 2; i++) {
        void *out;
        size_t len;
        assert_int_equal(spillway_get(cl, cat[i], 60000, &out, &len), 0);
        assert_int_equal(len, 2 * PART);
        const uint8_t *b = out;
        int p1 = i, p2 = N - 1 - i;
        for (size_t k = 0; k < PART; k++) {
            uint8_t e1 = k % 3 == 0 ? (uint8_t)p1 : k % 3 == 1 ? (uint8_t)(p1 * 7) : 0x5A;
            uint8_t e2 = k % 3 == 0 ? (uint8_t)p2 : k % 3 == 1 ? (uint8_t)(p2 * 7) : 0x5A;
            if (b[k] != e1 || b[PART + k] != e2)
                fail_msg("concat %d differs at byte %zu", i, k);
        }
        spillway_free(out);
    }
    assert_int_equal(spillway_release_many(cl, cat, N / 2), 0);
}

/* The "address" of every worker in `spillway-ctl status`, comma-separated into out. */
static void worker_addrs(h_cluster *c, char *out, size_t outlen)
{
    json_t *st = e2e_ctl_json(c, "status");
    assert_non_null(st);
    out[0] = '\0';
    size_t i;
    json_t *w;
    json_array_foreach(json_object_get(st, "workers"), i, w)
    {
        size_t len = strlen(out);
        snprintf(out + len, outlen - len, "%s,", json_string_value(json_object_get(w, "address")));
    }
    json_decref(st);
}

static const char *port_of(const char *addr)
{
    const char *colon = strrchr(addr, ':');
    assert_non_null(colon);
    return colon + 1;
}

static void cluster_by_name_localhost(void)
{
    need_localhost();
    const char *const sargs[] = {"--listen", "localhost:0", NULL};
    h_cluster *c = h_cluster_start(false, sargs);
    /* From here on every daemon, the client and spillway-ctl know the scheduler by name. */
    snprintf(c->addr, sizeof c->addr, "localhost:%s", port_of(c->sched.addr));
    const char *const wargs[] = {"--listen", "localhost:0", "--slots", "1", "--store-capacity",
                                 "64M", NULL};
    h_workers_start(c, 2, wargs);
    spillway *cl = e2e_connect(c);
    transfers_are_exact(cl);
    E2E_FINISH(c, cl);
}

static bool have_ipv6_loopback(void)
{
    int fd = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return false;
    struct sockaddr_in6 sin6 = {0};
    sin6.sin6_family = AF_INET6;
    sin6.sin6_addr = in6addr_loopback;
    bool ok = bind(fd, (struct sockaddr *)&sin6, sizeof sin6) == 0;
    close(fd);
    return ok;
}

static void cluster_over_ipv6_loopback(void)
{
    if (!have_ipv6_loopback()) {
        fprintf(stderr, "SKIP: this machine has no IPv6 loopback (cannot bind [::1])\n");
        h_skip();
    }
    const char *const sargs[] = {"--listen", "[::1]:0", NULL};
    h_cluster *c = h_cluster_start(false, sargs);
    assert_int_equal(strncmp(c->addr, "[::1]:", 6), 0);
    const char *const wargs[] = {"--listen", "[::1]:0", "--slots", "1", "--store-capacity", "64M",
                                 NULL};
    h_workers_start(c, 2, wargs);
    char addrs[512];
    worker_addrs(c, addrs, sizeof addrs);
    assert_int_equal(strncmp(addrs, "[::1]:", 6), 0);
    spillway *cl = e2e_connect(c);
    transfers_are_exact(cl);
    E2E_FINISH(c, cl);
}

static void wildcard_and_advertised_workers_are_reachable(void)
{
    need_localhost();
    h_cluster *c = h_cluster_start(false, NULL);
    /* One listens everywhere and must advertise the address that reaches the scheduler
     * (127.0.0.1 here); the other advertises a name, without a port (its bound one). */
    const char *const w1[] = {"--listen", "0.0.0.0:0", "--slots", "1", "--store-capacity", "64M",
                              "--name", "wild", NULL};
    const char *const w2[] = {"--advertise", "localhost", "--slots", "1", "--store-capacity",
                              "64M", "--name", "adv", NULL};
    h_worker_start(c, w1);
    h_worker_start(c, w2);
    char addrs[512], want[128];
    worker_addrs(c, addrs, sizeof addrs);
    snprintf(want, sizeof want, "127.0.0.1:%s,", port_of(c->workers[0].addr));
    assert_non_null(strstr(addrs, want));
    snprintf(want, sizeof want, "localhost:%s,", port_of(c->workers[1].addr));
    assert_non_null(strstr(addrs, want));
    assert_null(strstr(addrs, "0.0.0.0"));
    spillway *cl = e2e_connect(c);
    transfers_are_exact(cl);
    E2E_FINISH(c, cl);
}

static void malformed_addresses_are_refused_by_name(void)
{
    spillway *cl = NULL;
    assert_int_equal(spillway_connect("::1:7400", NULL, &cl), SPW_EINVAL);
    assert_int_equal(spillway_connect("bad_host!:7400", NULL, &cl), SPW_EINVAL);
    assert_int_equal(spillway_connect("[::1:7400", NULL, &cl), SPW_EINVAL);
    assert_int_equal(spillway_connect("127.0.0.1", NULL, &cl), SPW_EINVAL);
    char *text = NULL;
    const char *ctl[] = {h_bin("spillway-ctl"), "--scheduler", "no:such:port", "status", NULL};
    assert_int_not_equal(h_run(ctl, &text), 0);
    assert_non_null(strstr(text, "no:such:port"));
    free(text);
    const char *wrk[] = {h_bin("spillway-worker"), "--scheduler", "127.0.0.1:1", "--advertise",
                         "0.0.0.0", "--slots", "1", "--store-capacity", "16M", NULL};
    assert_int_not_equal(h_run(wrk, &text), 0);
    assert_non_null(strstr(text, "advertise address '0.0.0.0'"));
    free(text);
    const char *longer[] = {h_bin("spillway-worker"), "--scheduler", "127.0.0.1:1", "--advertise",
                            "a-very-long-host-name-that-goes-on.and-on.example-domain.internal",
                            "--slots", "1", "--store-capacity", "16M", NULL};
    assert_int_not_equal(h_run(longer, &text), 0);
    assert_non_null(strstr(text, "is longer than 63 characters"));
    free(text);
}

static bool workers_registered(void *arg)
{
    h_cluster *c = arg;
    json_t *st = e2e_ctl_json(c, "status");
    if (st == NULL)
        return false;
    size_t n = json_array_size(json_object_get(st, "workers"));
    json_decref(st);
    return n == (size_t)c->nworkers;
}

static bool stores_empty(void *arg)
{
    uint64_t used;
    return e2e_status_used(arg, &used) && used == 0;
}

static bool stores_hold_8mib(void *arg)
{
    uint64_t used;
    return e2e_status_used(arg, &used) && used >= 8u << 20;
}

/* kill -9 of the scheduler in the middle of a job: the client's calls end with SPW_ECLOSED,
 * the workers keep running and register with a scheduler restarted on the same port, drop
 * what they held for the old one, and serve a new job. */
static void scheduler_restart_workers_rejoin(void)
{
    h_cluster *c = h_cluster_start(true, NULL);
    const char *const wargs[] = {"--slots", "2", "--store-capacity", "64M", "--reconnect-max",
                                 "2000", NULL};
    h_workers_start(c, 2, wargs);
    /* A client that does not reconnect (reconnect_ms 0): its calls end at the scheduler's loss. */
    spillway *cl = e2e_connect_at(c, c->addr, 0);
    /* Objects on the workers (kept outputs, a put) and tasks still running when it dies. */
    spillway_graph *g = spillway_graph_new(cl);
    spillway_ref kept[4], slow[4];
    for (int i = 0; i < 4; i++) {
        uint8_t pat = (uint8_t)i;
        spillway_arg a[2] = {spillway_arg_u64(2u << 20), spillway_arg_bytes(&pat, 1)};
        assert_int_equal(spillway_task(g, "fill", a, 2, SPILLWAY_KEEP, &kept[i]), 0);
    }
    E2E_SUBMIT(g);
    for (int i = 0; i < 4; i++) {
        void *out;
        size_t len;
        assert_int_equal(spillway_get(cl, kept[i], 60000, &out, &len), 0);
        spillway_free(out);
    }
    g = spillway_graph_new(cl);
    for (int i = 0; i < 4; i++) {
        spillway_arg a = spillway_arg_u64(3000);
        assert_int_equal(spillway_task(g, "sleep_ms", &a, 1, SPILLWAY_KEEP, &slow[i]), 0);
    }
    E2E_SUBMIT(g);
    assert_true(h_eventually(stores_hold_8mib, c, 10000)); /* figures come with heartbeats */

    int ws = h_sched_kill(c, SIGKILL);
    assert_true(WIFSIGNALED(ws));
    /* Every call of the client now ends with SPW_ECLOSED, promptly: the tasks sleep 3 s, and a
     * client that noticed nothing would get their results (or SPW_ETIMEDOUT), not ECLOSED. */
    void *out;
    size_t len;
    assert_int_equal(spillway_get(cl, slow[0], 5000, &out, &len), SPW_ECLOSED);
    assert_int_equal(spillway_get(cl, kept[0], 5000, &out, &len), SPW_ECLOSED);
    spillway_ref r;
    void *big = calloc(1, 1u << 20);
    assert_int_equal(spillway_put(cl, big, 1u << 20, &r), SPW_ECLOSED);
    free(big);
    spillway_close(cl);

    h_sched_restart(c, NULL);
    /* Reconnect waits are at most 2 s here: both workers are back well within 10 s. */
    assert_true(h_eventually(workers_registered, c, 10000));
    cl = e2e_connect(c);
    transfers_are_exact(cl);
    spillway_close(cl);
    /* Nothing of the old scheduler's survived: once the sleeping tasks are stopped and the
     * new job released, every store is empty. */
    assert_true(e2e_cluster_idle(c, 20000));
    assert_true(h_eventually(stores_empty, c, 20000));
    E2E_STOP(c, NULL);
}

/* --reconnect-max 0 keeps the old behaviour: the worker exits with status 3. */
static void reconnect_max_zero_exits_with_status_3(void)
{
    h_cluster *c = h_cluster_start(false, NULL);
    const char *const wargs[] = {"--slots", "1", "--store-capacity", "16M", "--reconnect-max", "0",
                                 NULL};
    h_worker_start(c, wargs);
    h_sched_kill(c, SIGKILL);
    int st = h_worker_kill(c, 0, 0); /* signal 0: only waits for it to exit */
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 3);
    c->sched.exited = false; /* judged below: a killed scheduler is not a failed stop */
    c->sched.pid = 0;
    E2E_STOP(c, NULL);
}

static const struct CMUnitTest tests[] = {
    H_CASE(cluster_by_name_localhost),
    H_CASE(cluster_over_ipv6_loopback),
    H_CASE(wildcard_and_advertised_workers_are_reachable),
    H_CASE(malformed_addresses_are_refused_by_name),
    H_CASE(scheduler_restart_workers_rejoin),
    H_CASE(reconnect_max_zero_exits_with_status_3),
};

SPW_TEST_MAIN(tests)
