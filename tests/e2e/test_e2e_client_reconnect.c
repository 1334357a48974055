/*
 * A client whose connection to the scheduler breaks while both live: the client reconnects by
 * itself and resumes its session (spillway_opts.reconnect_ms, the scheduler's --session-grace).
 * A TCP relay (spw_tcp_proxy) stands between client and scheduler; the cases kill it by pid to
 * break the connection and start it again on the same port to let the client back. Pending
 * waits, gets and graphs complete, references stay, nothing runs twice; a client away longer
 * than the grace is dropped; reconnect_ms = 0 fails at once; a wrong token resumes nothing.
 */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sodium.h>

#include "../unit/test_main.h"
#include "e2e_util.h"
#include "spillway/conn.h"

typedef struct proxy {
    h_cluster *c;
    pid_t pid;
    int port;
    char port_file[512];
    char addr[64];
} proxy;

static bool port_written(void *arg)
{
    proxy *p = arg;
    FILE *f = fopen(p->port_file, "r");
    if (f == NULL)
        return false;
    int ok = fscanf(f, "%d", &p->port);
    fclose(f);
    return ok == 1 && p->port > 0;
}

static bool port_closed(void *arg)
{
    return access(((proxy *)arg)->port_file, F_OK) != 0;
}

/* Starts the relay to the cluster's scheduler (from the case's own thread: the harness's
 * children die with the thread that started them). */
static void proxy_start(proxy *p)
{
    snprintf(p->port_file, sizeof p->port_file, "%s/proxy.port", p->c->dir);
    const char *argv[] = {h_bin("spw_tcp_proxy"), p->port_file, p->c->addr, NULL};
    p->pid = h_spawn(p->c, argv, "proxy");
    assert_true(h_eventually(port_written, p, 10000));
    snprintf(p->addr, sizeof p->addr, "127.0.0.1:%d", p->port);
}

/* Breaks every connection through the relay, and refuses new ones until proxy_open. Safe
 * from any thread; false if the relay did not do it in time. */
static bool proxy_cut(proxy *p)
{
    return kill(p->pid, SIGUSR1) == 0 && h_eventually(port_closed, p, 10000);
}

static bool proxy_open(proxy *p)
{
    return kill(p->pid, SIGUSR2) == 0 && h_eventually(port_written, p, 10000);
}

static json_t *client_session(json_t *st)
{
    size_t i;
    json_t *s;
    json_array_foreach(json_object_get(st, "clients"), i, s)
    {
        if (strcmp(json_string_value(json_object_get(s, "role")), "client") == 0)
            return s;
    }
    return NULL;
}

/* The scheduler keeps the client's session, detached, for it to resume. */
static bool session_detached(void *arg)
{
    json_t *st = e2e_ctl_json(arg, "status");
    json_t *s = st != NULL ? client_session(st) : NULL;
    bool yes = s != NULL && json_object_get(s, "detached_drop_ms") != NULL;
    json_decref(st);
    return yes;
}

static bool no_client_session(void *arg)
{
    json_t *st = e2e_ctl_json(arg, "status");
    bool yes = st != NULL && client_session(st) == NULL;
    json_decref(st);
    return yes;
}

/* Tasks that finished at the scheduler, all told (its latency histogram counts each TASK_DONE
 * once): a task that ran twice counts twice. */
static uint64_t tasks_run(h_cluster *c)
{
    json_t *st = e2e_ctl_json(c, "status");
    uint64_t n =
        (uint64_t)json_integer_value(json_object_get(json_object_get(st, "task_latency"), "count"));
    json_decref(st);
    return n;
}

#define N1 40 /* tasks of the graph that finishes while the client is away */
#define N2 25 /* tasks of the graph submitted while it is away */

typedef struct away {
    proxy *p;
    bool restarted; /* the relay is back: set before the client can get an answer again */
    bool failed;
} away;

static bool first_graph_done(void *arg)
{
    return tasks_run(arg) >= N1 + 1;
}

/* While the client waits: once the scheduler holds its session detached and the first graph
 * has finished (its results went nowhere), the relay comes back. */
static void *let_back(void *arg)
{
    away *a = arg;
    h_cluster *c = a->p->c;
    if (!h_eventually(session_detached, c, 30000) || !h_eventually(first_graph_done, c, 30000)) {
        json_t *st = e2e_ctl_json(c, "status");
        char *dump = json_dumps(st, JSON_COMPACT);
        fprintf(stderr, "the client's session or its graph did not get there: %s\n", dump);
        free(dump);
        json_decref(st);
        a->failed = true;
        return NULL;
    }
    __atomic_store_n(&a->restarted, true, __ATOMIC_SEQ_CST);
    if (!proxy_open(a->p))
        a->failed = true;
    return NULL;
}

static void severed_connection_resumes_with_every_call_answered(void)
{
    h_cluster *c = h_cluster_simple(2);
    proxy p = {.c = c};
    proxy_start(&p);
    spillway *cl = e2e_connect_at(c, p.addr, E2E_RECONNECT_DEFAULT);
    static uint8_t big[300000];
    memset(big, 7, sizeof big);
    spillway_ref put;
    assert_int_equal(spillway_put(cl, big, sizeof big, &put), 0);
    spillway_ref r[N1 + N2];
    spillway_graph *g = spillway_graph_new(cl);
    /* Its tasks wait for a gate that outlasts the break below (a margin, not a condition: were
     * they done before it, the case would pass without results to send again). */
    spillway_ref gate;
    spillway_arg ga = spillway_arg_u64(1000);
    assert_int_equal(spillway_task(g, "sleep_ms", &ga, 1, 0, &gate), 0);
    for (uint64_t i = 0; i < N1; i++) {
        spillway_arg a[2] = {spillway_arg_u64(i), spillway_arg_ref(gate)};
        assert_int_equal(spillway_task(g, "inc", a, 2, SPILLWAY_KEEP, &r[i]), 0);
    }
    E2E_SUBMIT(g);
    /* The connection breaks with the graph in flight and the client unaware of it. */
    assert_true(proxy_cut(&p));
    away a = {&p, false, false};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, let_back, &a), 0);
    /* A graph submitted while the client is away waits for the resume, and goes once. */
    g = spillway_graph_new(cl);
    for (uint64_t i = 0; i < N2; i++) {
        spillway_arg a2 = spillway_arg_u64(1000 + i);
        assert_int_equal(spillway_task(g, "inc", &a2, 1, SPILLWAY_KEEP, &r[N1 + i]), 0);
    }
    int rc = spillway_submit(g);
    if (rc != 0)
        fail_msg("submit while away: %s: %s", spillway_strerror(rc), spillway_errmsg(cl));
    spillway_graph_free(g);
    rc = spillway_wait(cl, r, N1 + N2, -1);
    assert_int_equal(pthread_join(t, NULL), 0);
    assert_false(a.failed);
    assert_true(__atomic_load_n(&a.restarted, __ATOMIC_SEQ_CST));
    if (rc != 0)
        fail_msg("wait across the break: %s: %s", spillway_strerror(rc), spillway_errmsg(cl));
    for (uint64_t i = 0; i < N1; i++)
        assert_int_equal(e2e_get_u64(cl, r[i]), i + 1);
    for (uint64_t i = 0; i < N2; i++)
        assert_int_equal(e2e_get_u64(cl, r[N1 + i]), 1000 + i + 1);
    /* The put made before the break is still held, byte for byte. */
    void *data = NULL;
    size_t len = 0;
    assert_int_equal(spillway_get(cl, put, -1, &data, &len), 0);
    assert_int_equal(len, sizeof big);
    assert_memory_equal(data, big, sizeof big);
    spillway_free(data);
    /* Every task ran once: no frame of either graph was taken twice. */
    assert_int_equal(tasks_run(c), N1 + 1 + N2);
    /* A second break, now between calls: the next call resumes by itself. */
    assert_true(proxy_cut(&p));
    assert_true(h_eventually(session_detached, c, 30000));
    a = (away){&p, false, false};
    assert_int_equal(pthread_create(&t, NULL, let_back, &a), 0);
    assert_int_equal(spillway_get(cl, put, -1, &data, &len), 0);
    assert_int_equal(pthread_join(t, NULL), 0);
    assert_int_equal(len, sizeof big);
    spillway_free(data);
    assert_int_equal(spillway_release(cl, put), 0);
    assert_int_equal(spillway_release_many(cl, r, N1 + N2), 0);
    E2E_FINISH(c, cl);
}

static void session_away_longer_than_the_grace_is_dropped(void)
{
    static const char *const args[] = {"--session-grace", "1", NULL};
    h_cluster *c = h_cluster_start(false, args);
    static const char *const wargs[] = {"--slots", "1", "--store-capacity", "256M", NULL};
    h_workers_start(c, 1, wargs);
    proxy p = {.c = c};
    proxy_start(&p);
    spillway *cl = e2e_connect_at(c, p.addr, E2E_RECONNECT_DEFAULT);
    static uint8_t big[300000];
    spillway_ref put;
    assert_int_equal(spillway_put(cl, big, sizeof big, &put), 0);
    assert_true(proxy_cut(&p));
    /* Its grace passes: the session goes, and its object with it. */
    assert_true(h_eventually(no_client_session, c, 30000));
    assert_true(e2e_cluster_idle(c, 20000));
    assert_true(proxy_open(&p));
    void *data = NULL;
    size_t len = 0;
    assert_int_equal(spillway_get(cl, put, -1, &data, &len), SPW_ECLOSED);
    e2e_errmsg_has(cl, "did not resume session=");
    /* The session is gone for good: later calls fail at once, saying so. */
    assert_int_equal(spillway_put(cl, big, sizeof big, &put), SPW_ECLOSED);
    e2e_errmsg_has(cl, "--session-grace");
    E2E_STOP(c, cl);
}

static void reconnect_off_fails_at_once_and_drops_the_session(void)
{
    h_cluster *c = h_cluster_simple(1);
    proxy p = {.c = c};
    proxy_start(&p);
    spillway *cl = e2e_connect_at(c, p.addr, 0);
    static uint8_t big[300000];
    spillway_ref put;
    assert_int_equal(spillway_put(cl, big, sizeof big, &put), 0);
    assert_true(proxy_cut(&p));
    /* The scheduler drops it at once (it never said it could resume), the relay back or not. */
    assert_true(e2e_cluster_idle(c, 20000));
    assert_true(proxy_open(&p));
    void *data = NULL;
    size_t len = 0;
    assert_int_equal(spillway_get(cl, put, -1, &data, &len), SPW_ECLOSED);
    e2e_errmsg_has(cl, "closed");
    E2E_STOP(c, cl);
}

static int holding_client(spillway *cl, void *arg)
{
    (void)arg;
    static uint8_t big[300000];
    spillway_ref put;
    return spillway_put(cl, big, sizeof big, &put);
}

/* A client of this host killed while it could resume: the scheduler sees its process gone and
 * drops the session at once, not after a grace far longer than the test's deadline. */
static void killed_client_on_this_host_is_dropped_at_once(void)
{
    static const char *const args[] = {"--session-grace", "600", NULL};
    h_cluster *c = h_cluster_start(false, args);
    static const char *const wargs[] = {"--slots", "1", "--store-capacity", "64M", NULL};
    h_workers_start(c, 1, wargs);
    pid_t pid = e2e_client_fork(c, holding_client, NULL, true);
    assert_false(e2e_cluster_idle(c, 0)); /* its put is held */
    e2e_client_kill(pid);
    assert_true(e2e_cluster_idle(c, 20000));
    assert_true(h_eventually(no_client_session, c, 20000));
    E2E_STOP(c, NULL);
}

typedef struct hello_probe {
    bool done;
    proto_welcome wel;
} hello_probe;

static void probe_ready(proto_conn *conn, const proto_welcome *w)
{
    hello_probe *hp = proto_ctx_data(proto_conn_ctx(conn));
    hp->wel = *w;
    hp->done = true;
    proto_conn_close(conn, 0);
}

static void probe_close(proto_conn *conn, int status)
{
    (void)status;
    hello_probe *hp = proto_ctx_data(proto_conn_ctx(conn));
    hp->done = true;
}

/* A client HELLO naming session with token; what the scheduler's WELCOME said. */
static proto_welcome hello_resuming(h_cluster *c, uint64_t session, const uint8_t *token)
{
    uv_loop_t loop;
    uv_loop_init(&loop);
    proto_ctx_opts o;
    proto_ctx_opts_default(&o);
    o.role = PROTO_ROLE_CLIENT;
    o.name = "intruder";
    proto_ctx *ctx;
    assert_int_equal(proto_ctx_new(&loop, &o, &ctx), 0);
    hello_probe hp = {0};
    proto_ctx_set_data(ctx, &hp);
    static const proto_conn_cbs cbs = {.on_ready = probe_ready, .on_close = probe_close};
    proto_conn *conn;
    assert_int_equal(proto_connect(ctx, c->addr, &cbs, NULL, &conn), 0);
    proto_conn_set_resume(conn, session, token);
    while (!hp.done)
        uv_run(&loop, UV_RUN_ONCE);
    proto_ctx_close(ctx, NULL, NULL);
    uv_run(&loop, UV_RUN_DEFAULT);
    uv_loop_close(&loop);
    assert_true(hp.wel.session != 0);
    return hp.wel;
}

static void wrong_token_resumes_no_other_session(void)
{
    h_cluster *c = h_cluster_simple(1);
    proxy p = {.c = c};
    proxy_start(&p);
    spillway *cl = e2e_connect_at(c, p.addr, E2E_RECONNECT_DEFAULT);
    static uint8_t big[300000];
    memset(big, 9, sizeof big);
    spillway_ref put;
    assert_int_equal(spillway_put(cl, big, sizeof big, &put), 0);
    assert_true(proxy_cut(&p));
    assert_true(h_eventually(session_detached, c, 30000));
    json_t *st = e2e_ctl_json(c, "status");
    uint64_t victim = (uint64_t)json_integer_value(json_object_get(client_session(st), "session"));
    json_decref(st);
    /* Someone else names it with a token of its own: a new session, not that one. */
    uint8_t token[PROTO_TOKEN_LEN];
    randombytes_buf(token, sizeof token);
    proto_welcome w = hello_resuming(c, victim, token);
    assert_false(w.resumed);
    assert_true(w.session != victim);
    /* The victim's session is still there, detached, and its own client resumes it. */
    assert_true(session_detached(c));
    assert_true(proxy_open(&p));
    void *data = NULL;
    size_t len = 0;
    int rc = spillway_get(cl, put, -1, &data, &len);
    if (rc != 0)
        fail_msg("get after resume: %s: %s", spillway_strerror(rc), spillway_errmsg(cl));
    assert_int_equal(len, sizeof big);
    assert_memory_equal(data, big, sizeof big);
    spillway_free(data);
    assert_int_equal(spillway_release(cl, put), 0);
    E2E_FINISH(c, cl);
}

static const struct CMUnitTest tests[] = {
    H_CASE(severed_connection_resumes_with_every_call_answered),
    H_CASE(session_away_longer_than_the_grace_is_dropped),
    H_CASE(reconnect_off_fails_at_once_and_drops_the_session),
    H_CASE(wrong_token_resumes_no_other_session),
    H_CASE(killed_client_on_this_host_is_dropped_at_once),
};

SPW_TEST_MAIN(tests)
