/* What the client library reports when calls fail: every failing call leaves its own text in
 * spillway_errmsg, calls on closed connections are SPW_ECLOSED, and a scheduler or worker that
 * goes silent (SIGSTOP) fails the waiting call with SPW_ETIMEDOUT naming the peer, while a
 * slow answer or an idle spell between calls is not taken for a stall. */
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
#include "spillway/base.h"

/* The case's cluster, where helpers below start it (the harness owns it). */
static h_cluster *g_cluster;

/* The case's one-worker cluster. */
static h_cluster *one_worker_cluster(void)
{
    g_cluster = h_cluster_simple(1);
    return g_cluster;
}

/* ============================================================ error reporting */

/* Every failing call leaves its own text in spillway_errmsg (an argument check included, which
 * used to leave the previous call's text), and a plugin function's -1 or errno is a failed task
 * (SPW_ETASKFAILED) with its text, not SPW_EPERM. */
static void every_failing_call_sets_errmsg(void)
{
    h_cluster *c = h_cluster_start(false, NULL);
    const char *plugin = getenv("SPW_TEST_PLUGIN") ? getenv("SPW_TEST_PLUGIN") : SPW_TEST_PLUGIN;
    const char *const args[] = {"--slots", "1", "--store-capacity", "64M", "--plugin",
                                plugin,    NULL};
    h_worker_start(c, args);
    spillway *cl = e2e_connect(c);
    spillway_ref bogus = {1, 2}, r;
    assert_int_equal(spillway_release(cl, bogus), SPW_ENOTHELD);
    e2e_errmsg_has(cl, "is not held by this client");
    /* Argument checks: each names the call, none keeps the text above. */
    uint8_t b[4] = {1, 2, 3, 4};
    assert_int_equal(spillway_put(cl, b, 0, &r), SPW_EINVAL);
    e2e_errmsg_has(cl, "spillway_put: len is 0");
    assert_int_equal(spillway_put(cl, b, sizeof b, &r), 0);
    assert_int_equal(spillway_get(cl, r, 1000, NULL, NULL), SPW_EINVAL);
    e2e_errmsg_has(cl, "spillway_get: invalid argument");
    assert_int_equal(spillway_get_view(cl, r, 1000, NULL), SPW_EINVAL);
    e2e_errmsg_has(cl, "spillway_get_view: invalid argument");
    assert_int_equal(spillway_wait(cl, NULL, 3, 1000), SPW_EINVAL);
    e2e_errmsg_has(cl, "spillway_wait: invalid argument");
    assert_int_equal(spillway_release_many(cl, NULL, 2), SPW_EINVAL);
    e2e_errmsg_has(cl, "spillway_release_many: invalid argument");
    spillway_graph *g = spillway_graph_new(cl);
    spillway_ref t;
    spillway_arg a[2] = {spillway_arg_bytes("abc", 3), spillway_arg_bytes("d", 1)};
    assert_int_equal(spillway_task(g, "", a, 1, SPILLWAY_KEEP, &t), SPW_EINVAL);
    e2e_errmsg_has(cl, "spillway_task_at: invalid argument");
    char longname[400];
    memset(longname, 'x', sizeof longname - 1);
    longname[sizeof longname - 1] = '\0';
    assert_int_equal(spillway_graph_place(g, longname), SPW_EINVAL);
    e2e_errmsg_has(cl, "spillway_graph_place: invalid argument");
    /* A plugin function failing with -1 (and a text), and with an errno value (no text). */
    spillway_ref t1, t2;
    assert_int_equal(spillway_task(g, "reverse", a, 2, SPILLWAY_KEEP, &t1), 0);
    assert_int_equal(spillway_task(g, "fail_bare", a, 1, SPILLWAY_KEEP, &t2), 0);
    E2E_SUBMIT(g);
    void *data;
    size_t len;
    assert_int_equal(spillway_get(cl, t1, 60000, &data, &len), SPW_ETASKFAILED);
    e2e_errmsg_has(cl, "reverse takes one argument, got 2");
    assert_int_equal(spillway_get(cl, t2, 60000, &data, &len), SPW_ETASKFAILED);
    e2e_errmsg_has(cl, "fail_bare returned -5");
    spillway_ref held[] = {t1, t2, r};
    assert_int_equal(spillway_release_many(cl, held, 3), 0);
    spillway_close(cl);
    E2E_FINISH(c, NULL);
}

/* Releasing references once the scheduler connection is gone says so (SPW_ECLOSED), for one
 * reference and for many, instead of returning 0. */
static void release_on_closed_connection_is_eclosed(void)
{
    h_cluster *c = one_worker_cluster();
    spillway *cl = e2e_connect_at(c, c->addr, 0); /* no reconnect: the session ends with it */
    static uint8_t big[300000];
    memset(big, 3, sizeof big);
    spillway_ref r[3];
    for (int i = 0; i < 3; i++)
        assert_int_equal(spillway_put(cl, big, sizeof big, &r[i]), 0);
    E2E_STOP(c, NULL); /* the scheduler is gone: our connection is closed */
    assert_int_equal(spillway_release_many(cl, r, 2), SPW_ECLOSED);
    e2e_errmsg_has(cl, "is closed");
    assert_int_equal(spillway_release(cl, r[2]), SPW_ECLOSED);
    e2e_errmsg_has(cl, "is closed");
    /* Those handles are gone all the same: a second release is SPW_ENOTHELD. */
    assert_int_equal(spillway_release_many(cl, r, 2), SPW_ENOTHELD);
    spillway_close(cl);
}

/* Releasing many references at once under a small --max-frame releases them all at the
 * scheduler: the ids go in frames under its limit. They used to go 65,536 to a frame (1.1 MiB),
 * a frame over 64 KiB was not sent at all, and the scheduler kept every reference. */
static void release_many_fits_a_small_max_frame(void)
{
    const char *const sargs[] = {"--max-frame", "64K", "--chunk-size", "16K", "--inline-limit",
                                 "4K",          NULL};
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
    E2E_SUBMIT(g);
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
static void call_on_a_stopped_scheduler_times_out(void)
{
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
    e2e_errmsg_has(cl, "sent nothing for 600 ms");
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
    E2E_SUBMIT(g);
    assert_int_equal(kill(g_cluster->sched.pid, SIGSTOP), 0);
    return cl;
}

/* The scheduler goes on; the client's wait on it (rc) failed as a stall naming it. */
static void stopped_scheduler_wait_failed(spillway *cl, int rc)
{
    assert_int_equal(kill(g_cluster->sched.pid, SIGCONT), 0);
    assert_int_equal(rc, SPW_ETIMEDOUT);
    e2e_errmsg_has(cl, "sent nothing for 600 ms");
    spillway_close(cl);
}

/* Waits that send nothing (spillway_wait, spillway_get of a result still running) on a scheduler
 * that stopped answering fail the same way, and their text names the scheduler too. Before,
 * it said only "1 of 1 results not ready: operation timed out" (and "obj=... not ready"). */
static void wait_on_a_stopped_scheduler_names_it(void)
{
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
static void polling_waits_on_a_stopped_scheduler_find_it_silent(void)
{
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
static void slow_answer_from_a_live_scheduler_is_not_a_stall(void)
{
    spillway_graph *g;
    spillway_ref r;
    spillway *cl = stall_client(300, "sleep_ms", 2000, &g, &r);
    h_cluster *c = g_cluster;
    E2E_SUBMIT(g);
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
static void idle_spell_before_a_wait_is_not_a_stall(void)
{
    spillway_graph *g;
    spillway_ref r;
    spillway_ref first;
    spillway *cl = stall_client(3000, "sleep_ms", 600, &g, &first);
    h_cluster *c = g_cluster;
    spillway_arg a = spillway_arg_u64(6000);
    assert_int_equal(spillway_task(g, "sleep_ms", &a, 1, SPILLWAY_KEEP, &r), 0);
    E2E_SUBMIT(g);
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
static void put_to_a_stopped_worker_times_out(void)
{
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
    e2e_errmsg_has(cl, "took nothing for 600 ms");
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
