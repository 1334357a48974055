/* End-to-end tests of a running cluster through libspillway and spillway-ctl: tasks and graphs
 * (failures, caps, plugins), objects (put/get, release, zero-copy views, transfers between
 * workers), what survives a dead client, executor or worker, spillway-ctl's answers and the
 * shipped configs. Real daemons on 127.0.0.1 with ephemeral ports, one cluster per test. */
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../unit/test_main.h"
#include "e2e_util.h"

#define N_INDEPENDENT 10000

static void ten_thousand_independent_tasks(void)
{
    h_cluster *c = h_cluster_simple(2);
    spillway *cl = e2e_connect(c);
    spillway_graph *g = spillway_graph_new(cl);
    spillway_ref *refs = calloc(N_INDEPENDENT, sizeof *refs);
    for (uint64_t i = 0; i < N_INDEPENDENT; i++) {
        spillway_arg a = spillway_arg_u64(i * 3);
        assert_int_equal(spillway_task(g, "inc", &a, 1, SPILLWAY_KEEP, &refs[i]), 0);
    }
    E2E_SUBMIT(g);
    assert_int_equal(spillway_wait(cl, refs, N_INDEPENDENT, 120000), 0);
    for (uint64_t i = 0; i < N_INDEPENDENT; i++)
        assert_int_equal(e2e_get_u64(cl, refs[i]), i * 3 + 1);
    json_t *st = e2e_ctl_json(c, "status");
    assert_non_null(st);
    /* Both workers took part. */
    size_t i;
    json_t *w;
    int busy_workers = 0;
    json_array_foreach(json_object_get(st, "workers"), i, w)
    {
        busy_workers += json_integer_value(
                            json_object_get(json_object_get(w, "memory"), "tasks_done")) > 0;
    }
    json_decref(st);
    assert_int_equal(spillway_release_many(cl, refs, N_INDEPENDENT), 0);
    assert_true(e2e_cluster_idle(c, 20000));
    spillway_close(cl);
    free(refs);
    E2E_STOP(c, NULL);
    (void)busy_workers;
}

/* A random DAG of additions checked against the same computation done locally. */
static void dependency_graph_matches_local_computation(void)
{
    h_cluster *c = h_cluster_simple(2);
    spillway *cl = e2e_connect(c);
    enum { N = 600 };
    uint64_t local[N];
    spillway_ref refs[N];
    uint32_t seed = 12345;
    spillway_graph *g = spillway_graph_new(cl);
    for (int i = 0; i < N; i++) {
        spillway_arg args[4];
        int n = 0;
        uint64_t v = (uint64_t)i;
        args[n++] = spillway_arg_u64((uint64_t)i);
        int deps = i == 0 ? 0 : 1 + (int)((seed = seed * 1103515245u + 12345u) >> 16) % 3;
        for (int d = 0; d < deps; d++) {
            int j = (int)(((seed = seed * 1103515245u + 12345u) >> 16) % (uint32_t)i);
            args[n++] = spillway_arg_ref(refs[j]);
            v += local[j];
        }
        local[i] = v;
        /* Keep one in five; the others are intermediates the scheduler frees itself. */
        unsigned flags = i % 5 == 0 || i == N - 1 ? SPILLWAY_KEEP : 0;
        assert_int_equal(spillway_task(g, "add", args, (size_t)n, flags, &refs[i]), 0);
    }
    E2E_SUBMIT(g);
    for (int i = 0; i < N; i++) {
        if (i % 5 == 0 || i == N - 1) {
            assert_int_equal(e2e_get_u64(cl, refs[i]), local[i]);
            assert_int_equal(spillway_release(cl, refs[i]), 0);
        }
    }
    E2E_FINISH(c, cl);
}

/* A cluster of one worker with `slots` slots (64 MiB store) that loads the test plugin, and a
 * client connected to it. */
static spillway *plugin_cluster(h_cluster **cp, const char *slots)
{
    h_cluster *c = *cp = h_cluster_start(false, NULL);
    const char *plugin = getenv("SPW_TEST_PLUGIN") ? getenv("SPW_TEST_PLUGIN") : SPW_TEST_PLUGIN;
    const char *const args[] = {"--slots", slots, "--store-capacity", "64M", "--plugin", plugin,
                                NULL};
    h_worker_start(c, args);
    return e2e_connect(c);
}

static void plugin_task_runs_and_bad_plugin_is_refused(void)
{
    h_cluster *c;
    spillway *cl = plugin_cluster(&c, "1");
    /* Small (inline) and large (in the store, 1 MiB) inputs through the plugin. */
    size_t big = 1 << 20;
    uint8_t *data = malloc(big);
    for (size_t i = 0; i < big; i++)
        data[i] = (uint8_t)(i * 7 + 1);
    spillway_ref in, rev, x;
    assert_int_equal(spillway_put(cl, data, big, &in), 0);
    spillway_graph *g = spillway_graph_new(cl);
    spillway_arg a = spillway_arg_ref(in);
    assert_int_equal(spillway_task(g, "reverse", &a, 1, SPILLWAY_KEEP, &rev), 0);
    spillway_arg xa[2] = {spillway_arg_bytes("hello", 5), spillway_arg_bytes("\x20", 1)};
    assert_int_equal(spillway_task(g, "xor_key", xa, 2, SPILLWAY_KEEP, &x), 0);
    E2E_SUBMIT(g);
    void *out;
    size_t len;
    assert_int_equal(spillway_get(cl, rev, 60000, &out, &len), 0);
    assert_int_equal(len, big);
    for (size_t i = 0; i < big; i++)
        if (((uint8_t *)out)[i] != data[big - 1 - i])
            fail_msg("byte %zu differs", i);
    spillway_free(out);
    assert_int_equal(spillway_get(cl, x, 60000, &out, &len), 0);
    assert_int_equal(len, 5);
    assert_memory_equal(out, "HELLO", 5);
    spillway_free(out);
    spillway_ref all[] = {in, rev, x};
    assert_int_equal(spillway_release_many(cl, all, 3), 0);
    spillway_close(cl);
    free(data);

    /* A plugin of another ABI version: the worker refuses to start, saying why. */
    const char *bad = getenv("SPW_TEST_BAD_PLUGIN") ? getenv("SPW_TEST_BAD_PLUGIN")
                                                     : SPW_TEST_BAD_PLUGIN;
    const char *argv[] = {h_bin("spillway-worker"), "--scheduler", c->addr,    "--slots", "1",
                          "--store-capacity",       "16M",         "--plugin", bad,       NULL};
    char *text = NULL;
    int rc = h_run(argv, &text);
    assert_int_not_equal(rc, 0);
    assert_non_null(strstr(text, "ABI version"));
    free(text);
    E2E_STOP(c, NULL);
}

static void failed_task_reports_its_text_and_cluster_keeps_working(void)
{
    h_cluster *c = h_cluster_simple(2);
    spillway *cl = e2e_connect(c);
    spillway_graph *g = spillway_graph_new(cl);
    spillway_ref bad, dep, unknown;
    spillway_arg msg = spillway_arg_bytes("disk on fire", 12);
    assert_int_equal(spillway_task(g, "fail", &msg, 1, SPILLWAY_KEEP, &bad), 0);
    spillway_arg r = spillway_arg_ref(bad);
    assert_int_equal(spillway_task(g, "len", &r, 1, SPILLWAY_KEEP, &dep), 0);
    assert_int_equal(spillway_task(g, "no_such_function", NULL, 0, SPILLWAY_KEEP, &unknown), 0);
    E2E_SUBMIT(g);
    void *out;
    size_t len;
    assert_int_equal(spillway_get(cl, bad, 60000, &out, &len), SPW_ETASKFAILED);
    assert_string_equal(spillway_errmsg(cl), "disk on fire");
    assert_int_equal(spillway_get(cl, dep, 60000, &out, &len), SPW_EDEPFAILED);
    assert_non_null(strstr(spillway_errmsg(cl), "disk on fire"));
    assert_int_equal(spillway_get(cl, unknown, 60000, &out, &len), SPW_ENOFUNC);
    assert_non_null(strstr(spillway_errmsg(cl), "no_such_function"));
    assert_int_equal(spillway_wait(cl, &bad, 1, 1000), SPW_ETASKFAILED);
    /* The cluster goes on. */
    g = spillway_graph_new(cl);
    spillway_ref ok;
    spillway_arg one = spillway_arg_u64(1);
    assert_int_equal(spillway_task(g, "inc", &one, 1, SPILLWAY_KEEP, &ok), 0);
    E2E_SUBMIT(g);
    assert_int_equal(e2e_get_u64(cl, ok), 2);
    spillway_ref all[] = {bad, dep, unknown, ok};
    assert_int_equal(spillway_release_many(cl, all, 4), 0);
    E2E_FINISH(c, cl);
}

/* A task function that returns SPW_EAHEAD, the code by which an executor says it dropped a task
 * sent ahead unrun, has run: it fails once, as any failed task, rather than being taken in again
 * and run twice (before: 3 runs for these 2 tasks, both failed with SPW_EPROTO). */
static void task_returning_the_ahead_code_runs_once(void)
{
    h_cluster *c;
    spillway *cl = plugin_cluster(&c, "1");
    char path[600];
    snprintf(path, sizeof path, "%s/runs", c->dir);
    /* After a producer on the same worker, so that it may be sent ahead; and alone. */
    spillway_graph *g = spillway_graph_new(cl);
    spillway_ref p, t[2];
    spillway_arg one = spillway_arg_u64(1);
    assert_int_equal(spillway_task(g, "inc", &one, 1, 0, &p), 0);
    spillway_arg a[3] = {spillway_arg_bytes(path, strlen(path)),
                         spillway_arg_u64((uint64_t)(int64_t)SPW_EAHEAD), spillway_arg_ref(p)};
    assert_int_equal(spillway_task(g, "count_return", a, 3, SPILLWAY_KEEP, &t[0]), 0);
    assert_int_equal(spillway_task(g, "count_return", a, 2, SPILLWAY_KEEP, &t[1]), 0);
    E2E_SUBMIT(g);
    for (int i = 0; i < 2; i++) {
        void *out;
        size_t len;
        assert_int_equal(spillway_get(cl, t[i], 60000, &out, &len), SPW_ETASKFAILED);
        assert_non_null(strstr(spillway_errmsg(cl), "count_return"));
    }
    assert_int_equal(spillway_release_many(cl, t, 2), 0);
    assert_true(e2e_cluster_idle(c, 20000));
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_size, 2); /* one run each */
    E2E_STOP(c, cl);
}

/* A graph held back by its cap (one task in flight) with thousands of ready tasks ahead of
 * another graph's task at the same depth: the other graph's task runs while the first is still
 * near its start, not once it has fewer ready tasks than a dispatch pass steps over (4,096).
 * The capped graph's tasks count their runs in a file; the other task reads that count. */
static void capped_graph_does_not_hold_back_others(void)
{
    h_cluster *c;
    spillway *cl = plugin_cluster(&c, "2");
    char path[600];
    snprintf(path, sizeof path, "%s/runs", c->dir);
    enum { N = 6000 };
    spillway_ref *a = malloc(N * sizeof *a);
    spillway_graph *g = spillway_graph_new(cl);
    assert_int_equal(spillway_graph_limits(g, 1, 0), 0);
    spillway_arg ca[2] = {spillway_arg_bytes(path, strlen(path)), spillway_arg_u64(0)};
    for (int i = 0; i < N; i++)
        assert_int_equal(spillway_task(g, "count_return", ca, 2, SPILLWAY_KEEP, &a[i]), 0);
    E2E_SUBMIT(g);
    g = spillway_graph_new(cl);
    spillway_ref b;
    spillway_arg ba = spillway_arg_bytes(path, strlen(path));
    assert_int_equal(spillway_task(g, "file_size", &ba, 1, SPILLWAY_KEEP, &b), 0);
    E2E_SUBMIT(g);
    uint64_t runs = e2e_get_u64(cl, b);
    /* The pass after the submit steps over 4,096 held tasks; the next ones reach it. */
    assert_true(runs < 1000);
    assert_int_equal(spillway_wait(cl, a, N, 120000), 0);
    assert_int_equal(spillway_release_many(cl, a, N), 0);
    assert_int_equal(spillway_release(cl, b), 0);
    assert_true(e2e_cluster_idle(c, 20000));
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_size, N);
    free(a);
    E2E_STOP(c, cl);
}

/* The client that client_killed_mid_job_leaves_cluster_working kills: an object and 2,000
 * tasks of its own. */
static int busy_client(spillway *cl, void *arg)
{
    (void)arg;
    spillway_graph *g = spillway_graph_new(cl);
    uint8_t big[100000];
    memset(big, 7, sizeof big);
    spillway_ref r;
    spillway_put(cl, big, sizeof big, &r);
    for (int i = 0; i < 2000; i++) {
        spillway_arg a = spillway_arg_u64(2);
        spillway_task(g, "sleep_ms", &a, 1, SPILLWAY_KEEP, NULL);
    }
    spillway_submit(g);
    return 0;
}

/* A client process killed mid-job: its work is dropped and others carry on. */
static void client_killed_mid_job_leaves_cluster_working(void)
{
    h_cluster *c = h_cluster_simple(2);
    e2e_client_kill(e2e_client_fork(c, busy_client, NULL, true));
    /* Another client's work runs to completion meanwhile. */
    spillway *cl = e2e_connect(c);
    spillway_graph *g = spillway_graph_new(cl);
    spillway_ref refs[100];
    for (int i = 0; i < 100; i++) {
        spillway_arg a = spillway_arg_u64((uint64_t)i);
        assert_int_equal(spillway_task(g, "inc", &a, 1, SPILLWAY_KEEP, &refs[i]), 0);
    }
    E2E_SUBMIT(g);
    for (int i = 0; i < 100; i++)
        assert_int_equal(e2e_get_u64(cl, refs[i]), (uint64_t)i + 1);
    assert_int_equal(spillway_release_many(cl, refs, 100), 0);
    /* The dead client's tasks were dropped, its object released: the cluster drains. */
    assert_true(e2e_cluster_idle(c, 30000));
    E2E_STOP(c, cl);
}

static void put_get_round_trips_every_size(void)
{
    h_cluster *c = h_cluster_simple(2);
    spillway *cl = e2e_connect(c);
    static const size_t sizes[] = {1, 65536, 65537, 1 << 20, (10 << 20) + 3};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        size_t n = sizes[k];
        uint8_t *data = malloc(n);
        for (size_t i = 0; i < n; i++)
            data[i] = (uint8_t)(i ^ (i >> 8) ^ k);
        spillway_ref r;
        assert_int_equal(spillway_put(cl, data, n, &r), 0);
        void *out;
        size_t len;
        assert_int_equal(spillway_get(cl, r, 60000, &out, &len), 0);
        assert_int_equal(len, n);
        assert_memory_equal(out, data, n);
        spillway_free(out);
        assert_int_equal(spillway_release(cl, r), 0);
        free(data);
    }
    E2E_FINISH(c, cl);
}

static void release_twice_or_unknown_is_enotheld(void)
{
    h_cluster *c = h_cluster_simple(1);
    spillway *cl = e2e_connect(c);
    uint8_t data[200000];
    memset(data, 1, sizeof data);
    spillway_ref r, small;
    assert_int_equal(spillway_put(cl, data, sizeof data, &r), 0);
    assert_int_equal(spillway_put(cl, data, 10, &small), 0);
    assert_int_equal(spillway_release(cl, r), 0);
    assert_int_equal(spillway_release(cl, r), SPW_ENOTHELD);
    assert_int_equal(spillway_release(cl, small), 0);
    assert_int_equal(spillway_release(cl, small), SPW_ENOTHELD);
    spillway_ref bogus = {12345, 678};
    assert_int_equal(spillway_release(cl, bogus), SPW_ENOTHELD);
    void *out;
    size_t len;
    assert_int_equal(spillway_get(cl, r, 1000, &out, &len), SPW_ENOOBJ);
    E2E_FINISH(c, cl);
}

/* inc(v) as a kept task of its own graph, bound to the worker named worker (NULL: any). */
static spillway_ref placed_inc(spillway *cl, const char *worker, uint64_t v)
{
    spillway_graph *g = spillway_graph_new(cl);
    assert_int_equal(spillway_graph_place(g, worker), 0);
    spillway_arg a = spillway_arg_u64(v);
    spillway_ref r;
    assert_int_equal(spillway_task(g, "inc", &a, 1, SPILLWAY_KEEP, &r), 0);
    E2E_SUBMIT(g);
    return r;
}

/* Many kept results across the client's reference chunks (1,024 handles each), with
 * failures, automatic puts (ids the client did not make) and releases in between: each is
 * found, fetched, waited for and released once, and spillway_wait reports the first failure in
 * the order given. An empty result comes back as a non-NULL pointer of length 0. */
static void many_kept_results_across_reference_chunks(void)
{
    h_cluster *c = h_cluster_simple(2);
    spillway *cl = e2e_connect(c);
    enum { N = 3000, BIG = 300000 };
    uint8_t *big = malloc(BIG);
    memset(big, 7, BIG);
    spillway_ref *refs = calloc(N, sizeof *refs);
    spillway_graph *g = spillway_graph_new(cl);
    for (int i = 0; i < N; i++) {
        spillway_arg a;
        const char *fn = "noop";
        if (i == 1500 || i == 2500) {
            a = spillway_arg_bytes(i == 1500 ? "first" : "second", i == 1500 ? 5 : 6);
            fn = "fail";
        } else if (i % 500 == 7) {
            a = spillway_arg_bytes(big, BIG); /* one automatic put, shared by these tasks */
            fn = "len";
        } else {
            a = spillway_arg_u64((uint64_t)i);
        }
        /* Every third task is not kept: its id takes a slot that stays empty. */
        unsigned keep = i % 3 == 1 && fn[0] == 'n' ? 0 : SPILLWAY_KEEP;
        assert_int_equal(spillway_task(g, fn, &a, 1, keep, keep ? &refs[i] : NULL), 0);
    }
    E2E_SUBMIT(g);
    /* The kept ones, in order, except the two failures. */
    spillway_ref *kept = calloc(N, sizeof *kept);
    size_t nk = 0;
    for (int i = 0; i < N; i++)
        if (refs[i].hi != 0 || refs[i].lo != 0)
            kept[nk++] = refs[i];
    assert_int_equal(spillway_wait(cl, kept, nk, 120000), SPW_ETASKFAILED);
    assert_non_null(strstr(spillway_errmsg(cl), "first"));
    spillway_ref later[2] = {refs[2500], refs[1500]};
    assert_int_equal(spillway_wait(cl, later, 2, 1000), SPW_ETASKFAILED);
    assert_non_null(strstr(spillway_errmsg(cl), "second"));
    for (int i = 0; i < N; i++) {
        if (refs[i].hi == 0 && refs[i].lo == 0)
            continue;
        void *out = NULL;
        size_t len = 99;
        int rc = spillway_get(cl, refs[i], 60000, &out, &len);
        if (i == 1500 || i == 2500) {
            assert_int_equal(rc, SPW_ETASKFAILED);
            continue;
        }
        assert_int_equal(rc, 0);
        if (i % 500 == 7) {
            uint64_t v;
            assert_int_equal(len, 8);
            memcpy(&v, out, 8);
            assert_int_equal(v, BIG);
        } else {
            assert_non_null(out);
            assert_int_equal(len, 0);
        }
        spillway_free(out);
    }
    spillway_view v;
    assert_int_equal(spillway_get_view(cl, refs[0], 1000, &v), 0);
    assert_non_null(v.data);
    assert_int_equal(v.len, 0);
    spillway_view_release(cl, &v);
    /* Release the middle chunk's references one by one, then all of them in one call: those
     * released already are reported and skipped. */
    for (int i = 1024; i < 2048; i++)
        if (refs[i].hi != 0 || refs[i].lo != 0)
            assert_int_equal(spillway_release(cl, refs[i]), 0);
    assert_int_equal(spillway_release(cl, refs[1030]), SPW_ENOTHELD);
    assert_int_equal(spillway_wait(cl, &refs[1030], 1, 1000), SPW_ENOTHELD);
    assert_int_equal(spillway_release_many(cl, kept, nk), SPW_ENOTHELD);
    assert_int_equal(spillway_release_many(cl, kept, nk), SPW_ENOTHELD);
    assert_int_equal(spillway_release(cl, refs[0]), SPW_ENOTHELD);
    assert_true(e2e_cluster_idle(c, 20000));
    /* New references after all that still work. */
    spillway_ref ok = placed_inc(cl, NULL, 41);
    assert_int_equal(e2e_get_u64(cl, ok), 42);
    assert_int_equal(spillway_release(cl, ok), 0);
    assert_true(e2e_cluster_idle(c, 20000));
    spillway_close(cl);
    free(kept);
    free(refs);
    free(big);
    E2E_STOP(c, NULL);
}

/* Large outputs made on one worker and consumed on another arrive byte for byte. */
static void large_outputs_move_between_workers(void)
{
    h_cluster *c = h_cluster_simple(2);
    spillway *cl = e2e_connect(c);
    enum { N = 16 };
    spillway_graph *g = spillway_graph_new(cl);
    spillway_ref parts[N], cat[N / 2];
    for (int i = 0; i < N; i++) {
        uint8_t pat[3] = {(uint8_t)i, (uint8_t)(i * 3), 0xA5};
        spillway_arg a[2] = {spillway_arg_u64(3u << 20), spillway_arg_bytes(pat, 3)};
        assert_int_equal(spillway_task(g, "fill", a, 2, 0, &parts[i]), 0);
    }
    for (int i = 0; i < N / 2; i++) {
        spillway_arg a[2] = {spillway_arg_ref(parts[2 * i]), spillway_arg_ref(parts[N - 1 - 2 * i])};
        assert_int_equal(spillway_task(g, "concat", a, 2, SPILLWAY_KEEP, &cat[i]), 0);
    }
    E2E_SUBMIT(g);
    for (int i = 0; i < N / 2; i++) {
        void *out;
        size_t len;
        assert_int_equal(spillway_get(cl, cat[i], 60000, &out, &len), 0);
        assert_int_equal(len, 6u << 20);
        const uint8_t *b = out;
        int p1 = 2 * i, p2 = N - 1 - 2 * i;
        for (size_t k = 0; k < (3u << 20); k++) {
            uint8_t e1 = k % 3 == 0 ? (uint8_t)p1 : k % 3 == 1 ? (uint8_t)(p1 * 3) : 0xA5;
            uint8_t e2 = k % 3 == 0 ? (uint8_t)p2 : k % 3 == 1 ? (uint8_t)(p2 * 3) : 0xA5;
            if (b[k] != e1 || b[(3u << 20) + k] != e2)
                fail_msg("concat %d differs at byte %zu", i, k);
        }
        spillway_free(out);
    }
    assert_int_equal(spillway_release_many(cl, cat, N / 2), 0);
    E2E_FINISH(c, cl);
}

static void executor_crash_fails_one_task_and_worker_survives(void)
{
    h_cluster *c = h_cluster_simple(1);
    spillway *cl = e2e_connect(c);
    spillway_graph *g = spillway_graph_new(cl);
    spillway_ref crash, after[20];
    assert_int_equal(spillway_task(g, "crash", NULL, 0, SPILLWAY_KEEP, &crash), 0);
    for (int i = 0; i < 20; i++) {
        spillway_arg a = spillway_arg_u64((uint64_t)i);
        assert_int_equal(spillway_task(g, "inc", &a, 1, SPILLWAY_KEEP, &after[i]), 0);
    }
    E2E_SUBMIT(g);
    void *out;
    size_t len;
    assert_int_equal(spillway_get(cl, crash, 60000, &out, &len), SPW_EEXECCRASH);
    assert_non_null(strstr(spillway_errmsg(cl), "executor"));
    for (int i = 0; i < 20; i++)
        assert_int_equal(e2e_get_u64(cl, after[i]), (uint64_t)i + 1);
    json_t *st = e2e_ctl_json(c, "status");
    assert_non_null(st);
    json_t *w0 = json_array_get(json_object_get(st, "workers"), 0);
    assert_non_null(w0);
    json_decref(st);
    assert_int_equal(spillway_release(cl, crash), 0);
    assert_int_equal(spillway_release_many(cl, after, 20), 0);
    E2E_STOP(c, cl);
}

static void ctl_status_reports_workers_tasks_and_clients(void)
{
    h_cluster *c = h_cluster_start(false, NULL);
    const char *const w1[] = {"--slots", "2", "--store-capacity", "32M", "--name", "alpha", NULL};
    const char *const w2[] = {"--slots", "3", "--store-capacity", "48M", "--name", "beta", NULL};
    h_worker_start(c, w1);
    h_worker_start(c, w2);
    spillway *cl = e2e_connect(c);
    json_t *st = e2e_ctl_json(c, "status");
    assert_non_null(st);
    assert_string_equal(
        json_string_value(json_object_get(json_object_get(st, "scheduler"), "address")), c->addr);
    json_t *ws = json_object_get(st, "workers");
    assert_int_equal(json_array_size(ws), 2);
    int seen = 0;
    size_t i;
    json_t *w;
    json_array_foreach(ws, i, w)
    {
        const char *name = json_string_value(json_object_get(w, "name"));
        json_int_t slots = json_integer_value(json_object_get(w, "slots"));
        json_int_t cap =
            json_integer_value(json_object_get(json_object_get(w, "memory"), "capacity"));
        if (strcmp(name, "alpha") == 0 && slots == 2 && cap == 32 << 20)
            seen |= 1;
        if (strcmp(name, "beta") == 0 && slots == 3 && cap == 48 << 20)
            seen |= 2;
        assert_string_equal(json_string_value(json_object_get(w, "state")), "running");
    }
    assert_int_equal(seen, 3);
    /* Our client and the ctl session itself. */
    json_t *clients = json_object_get(st, "clients");
    int roles = 0;
    json_array_foreach(clients, i, w)
    {
        const char *role = json_string_value(json_object_get(w, "role"));
        roles |= strcmp(role, "client") == 0 ? 1 : strcmp(role, "ctl") == 0 ? 2 : 4;
    }
    assert_int_equal(roles, 3);
    assert_non_null(json_object_get(json_object_get(st, "tasks"), "waiting"));
    json_decref(st);

    /* The human table has its columns. */
    const char *argv[] = {h_bin("spillway-ctl"), "--scheduler", c->addr, "status", NULL};
    char *text = NULL;
    assert_int_equal(h_run(argv, &text), 0);
    assert_non_null(strstr(text, "USED/CAPACITY"));
    assert_non_null(strstr(text, "alpha"));
    assert_non_null(strstr(text, "tasks: waiting 0"));
    free(text);
    E2E_STOP(c, cl);
}

static void ctl_errors_are_one_line_and_nonzero(void)
{
    h_cluster *c = h_cluster_start(true, NULL);
    char *text = NULL;
    /* Nothing listens on port 1 of 127.0.0.1. */
    const char *down[] = {h_bin("spillway-ctl"), "--scheduler", "127.0.0.1:1", "status", NULL};
    assert_int_equal(h_run(down, &text), 1);
    assert_non_null(strstr(text, "cannot connect"));
    assert_int_equal(strchr(text, '\n') - text + 1, (long)strlen(text));
    free(text);
    /* No secret against a cluster that has one. */
    const char *nosecret[] = {h_bin("spillway-ctl"), "--scheduler", c->addr, "status", NULL};
    assert_int_equal(h_run(nosecret, &text), 1);
    assert_non_null(strstr(text, "authentication failed"));
    free(text);
    /* A wrong secret. */
    char wrong[600];
    snprintf(wrong, sizeof wrong, "%s/wrong", c->dir);
    FILE *f = fopen(wrong, "w");
    fputs("not-the-cluster-secret\n", f); /* long enough: refused for being wrong */
    fclose(f);
    chmod(wrong, 0600);
    const char *bad[] = {
        h_bin("spillway-ctl"), "--scheduler", c->addr, "--secret-file", wrong, "status", NULL};
    assert_int_equal(h_run(bad, &text), 1);
    assert_non_null(strstr(text, "authentication failed"));
    free(text);
    /* The right one. */
    const char *good[] = {h_bin("spillway-ctl"), "--scheduler", c->addr, "--secret-file",
                          c->secret_file,        "status",      NULL};
    assert_int_equal(h_run(good, &text), 0);
    free(text);
    const char *opt[] = {h_bin("spillway-ctl"), "--frobnicate", "status", NULL};
    assert_int_equal(h_run(opt, &text), 2);
    assert_non_null(strstr(text, "--frobnicate"));
    assert_int_equal(strchr(text, '\n') - text + 1, (long)strlen(text));
    free(text);
    const char *cmd[] = {h_bin("spillway-ctl"), "--scheduler", c->addr, "launch", NULL};
    assert_int_equal(h_run(cmd, &text), 2);
    free(text);
    /* Numbers: a suffix, a sign or a value past the option's range is refused by name (a
     * --limit past LONG_MAX was read as "no limit"; --timeout 10abc as 10). */
    static const char *const nums[][3] = {{"memory", "--limit", "99999999999999999999"},
                                          {"memory", "--limit", "-1"},
                                          {"memory", "--watch", "0"},
                                          {"jobs", "--interval", "5x"},
                                          {"jobs", "--count", "+3"}};
    for (size_t i = 0; i < sizeof nums / sizeof nums[0]; i++) {
        const char *argv[] = {h_bin("spillway-ctl"),
                              "--scheduler",
                              c->addr,
                              nums[i][0],
                              nums[i][1],
                              nums[i][2],
                              NULL};
        assert_int_equal(h_run(argv, &text), 2);
        assert_non_null(strstr(text, nums[i][1]));
        assert_non_null(strstr(text, nums[i][2]));
        free(text);
    }
    const char *tmo[] = {h_bin("spillway-ctl"), "--timeout", "10abc", "status", NULL};
    assert_int_equal(h_run(tmo, &text), 2);
    assert_non_null(strstr(text, "'10abc'"));
    free(text);
    E2E_STOP(c, NULL);
}

static void secret_is_required_of_clients_and_workers(void)
{
    h_cluster *c = h_cluster_start(true, NULL);
    const char *const args[] = {"--slots", "1", "--store-capacity", "32M", NULL};
    h_worker_start(c, args); /* with the cluster's secret */
    spillway *cl = NULL;
    assert_int_equal(spillway_connect(c->addr, NULL, &cl), SPW_EAUTH);
    cl = e2e_connect(c);
    spillway_ref r = e2e_submit_u64(cl, "inc", 9);
    assert_int_equal(e2e_get_u64(cl, r), 10);
    assert_int_equal(spillway_release(cl, r), 0);
    spillway_close(cl);
    /* A worker without the secret cannot join. */
    const char *argv[] = {h_bin("spillway-worker"), "--scheduler", c->addr, "--slots", "1",
                          "--store-capacity",       "16M",         NULL};
    char *text = NULL;
    assert_int_not_equal(h_run(argv, &text), 0);
    assert_non_null(strstr(text, "authentication failed"));
    free(text);
    E2E_STOP(c, NULL);
}

/* The configs shipped in deploy/ parse, with every default written out, and the command line
 * overrides them. */
static void shipped_configs_parse_and_command_line_wins(void)
{
    h_cluster *c;
    const char *const sargs[] = {"--config", SPW_SOURCE_DIR "/deploy/scheduler.conf", NULL};
    /* h_cluster_start puts --listen and --secret-file first; the config file's values come
     * before the whole command line, so ours win. */
    c = h_cluster_start(true, sargs);
    const char *const wargs[] = {"--config", SPW_SOURCE_DIR "/deploy/worker.conf", "--slots", "1",
                                 "--store-capacity", "32M", "--name", "from-config", NULL};
    h_worker_start(c, wargs);
    json_t *st = e2e_ctl_json(c, "status");
    assert_non_null(st);
    json_t *w = json_array_get(json_object_get(st, "workers"), 0);
    assert_string_equal(json_string_value(json_object_get(w, "name")), "from-config");
    json_decref(st);
    /* A config file with a bad line is refused with its line number. */
    char bad[600];
    snprintf(bad, sizeof bad, "%s/bad.conf", c->dir);
    FILE *f = fopen(bad, "w");
    fputs("# fine\nlisten = 127.0.0.1:0\n= no key\n", f);
    fclose(f);
    const char *argv[] = {h_bin("spillway-scheduler"), "--config", bad, NULL};
    char *text = NULL;
    assert_int_equal(h_run(argv, &text), 2);
    assert_non_null(strstr(text, "bad.conf:3"));
    free(text);
    E2E_STOP(c, NULL);
}

/* Type=notify: with NOTIFY_SOCKET set, a daemon sends READY=1 once it serves. */
static void daemons_notify_systemd_when_ready(void)
{
    char path[108];
    snprintf(path, sizeof path, "/tmp/spw-notify-%d", (int)getpid());
    int fd = e2e_notify_socket(path);
    setenv("NOTIFY_SOCKET", path, 1);
    h_cluster *c = h_cluster_simple(1);
    unsetenv("NOTIFY_SOCKET");
    int ready = 0;
    for (int i = 0; i < 2; i++) {
        char msg[512];
        e2e_notify_recv(fd, 10, msg, sizeof msg);
        ready += strstr(msg, "READY=1") != NULL;
    }
    assert_int_equal(ready, 2); /* the scheduler and the worker */
    close(fd);
    unlink(path);
    E2E_STOP(c, NULL);
}

/* Is p inside a mapping of a worker's arena (memfd "spillway-worker-...") in this process? */
static bool in_arena_mapping(const void *p)
{
    FILE *f = fopen("/proc/self/maps", "r");
    char line[512];
    bool found = false;
    while (!found && fgets(line, sizeof line, f) != NULL) {
        unsigned long lo, hi;
        if (sscanf(line, "%lx-%lx", &lo, &hi) == 2 && (uintptr_t)p >= lo && (uintptr_t)p < hi)
            found = strstr(line, "memfd:spillway-worker-") != NULL;
    }
    fclose(f);
    return found;
}

static bool nothing_pinned(void *arg)
{
    return e2e_memory_sum(arg, "pinned") == 0;
}

static bool something_pinned(void *arg)
{
    return e2e_memory_sum(arg, "pinned") > 0;
}

/* A client on the worker's host reads an object straight from the store's shared memory. */
static void zero_copy_view_points_into_the_arena(void)
{
    h_cluster *c = h_cluster_simple(2);
    spillway *cl = e2e_connect(c);
    size_t n = 8u << 20;
    uint8_t *data = malloc(n);
    for (size_t i = 0; i < n; i++)
        data[i] = (uint8_t)(i * 31 + 7);
    spillway_ref r;
    assert_int_equal(spillway_put(cl, data, n, &r), 0);
    spillway_view v;
    assert_int_equal(spillway_get_view(cl, r, 10000, &v), 0);
    assert_int_equal(v.zero_copy, 1);
    assert_int_equal(v.len, n);
    assert_true(in_arena_mapping(v.data));
    assert_memory_equal(v.data, data, n);
    /* The view pins the object in its store until released. */
    assert_true(h_eventually(something_pinned, c, 10000));
    spillway_view_release(cl, &v);
    assert_true(h_eventually(nothing_pinned, c, 10000));
    /* A copy, also through shared memory, is a private buffer. */
    void *copy;
    size_t len;
    assert_int_equal(spillway_get(cl, r, 10000, &copy, &len), 0);
    assert_false(in_arena_mapping(copy));
    assert_memory_equal(copy, data, n);
    spillway_free(copy);
    assert_int_equal(spillway_release(cl, r), 0);
    assert_true(e2e_cluster_idle(c, 20000));
    spillway_close(cl);
    free(data);
    E2E_STOP(c, NULL);
}

/* Without the local path (as for a client on another host) the same calls go over TCP. */
static void views_fall_back_to_tcp_copies(void)
{
    h_cluster *c = h_cluster_simple(1);
    setenv("SPILLWAY_NO_LOCAL", "1", 1);
    spillway *cl = e2e_connect(c);
    size_t n = (3u << 20) + 17;
    uint8_t *data = malloc(n);
    for (size_t i = 0; i < n; i++)
        data[i] = (uint8_t)(i ^ 0x5a);
    spillway_ref r;
    assert_int_equal(spillway_put(cl, data, n, &r), 0);
    spillway_view v;
    assert_int_equal(spillway_get_view(cl, r, 10000, &v), 0);
    assert_int_equal(v.zero_copy, 0);
    assert_false(in_arena_mapping(v.data));
    assert_memory_equal(v.data, data, n);
    spillway_view_release(cl, &v);
    assert_int_equal(spillway_release(cl, r), 0);
    spillway_close(cl);
    unsetenv("SPILLWAY_NO_LOCAL");
    free(data);
    E2E_FINISH(c, NULL);
}

/* A client that puts an object and holds a zero-copy view of it. */
static int viewing_client(spillway *cl, void *arg)
{
    (void)arg;
    static uint8_t big[1 << 20];
    spillway_ref r;
    spillway_view v;
    if (spillway_put(cl, big, sizeof big, &r) != 0 || spillway_get_view(cl, r, 10000, &v) != 0 ||
        !v.zero_copy)
        return 1;
    return 0;
}

/* A client that dies holding a zero-copy view does not keep the object pinned. */
static void dead_reader_releases_its_pins(void)
{
    h_cluster *c = h_cluster_simple(1);
    pid_t pid = e2e_client_fork(c, viewing_client, NULL, true);
    assert_true(h_eventually(something_pinned, c, 10000));
    e2e_client_kill(pid);
    assert_true(e2e_cluster_idle(c, 20000)); /* unpinned, released, used back to 0 */
    E2E_STOP(c, NULL);
}

static bool peak_reported(void *arg)
{
    return e2e_memory_sum(arg, "peak_used") >= (1u << 20);
}

/* A chain of 1,000 dependent tasks passing 1 MiB each: intermediates are freed as soon as their
 * consumer finishes, so the stores never hold more than a handful at once. */
static void long_chain_holds_a_handful_of_objects(void)
{
    h_cluster *c = h_cluster_simple(2);
    spillway *cl = e2e_connect(c);
    spillway_graph *g = spillway_graph_new(cl);
    spillway_ref prev;
    spillway_arg fa[2] = {spillway_arg_u64(1u << 20), spillway_arg_bytes("chain", 5)};
    assert_int_equal(spillway_task(g, "fill", fa, 2, 0, &prev), 0);
    for (int i = 1; i < 1000; i++) {
        spillway_arg a = spillway_arg_ref(prev);
        assert_int_equal(spillway_task(g, "echo", &a, 1, i == 999 ? SPILLWAY_KEEP : 0, &prev), 0);
    }
    E2E_SUBMIT(g);
    void *out;
    size_t len;
    assert_int_equal(spillway_get(cl, prev, 120000, &out, &len), 0);
    assert_int_equal(len, 1u << 20);
    assert_memory_equal(out, "chainchain", 10);
    spillway_free(out);
    /* 1,000 MiB went through the stores; at most a few MiB were ever there at once. The
     * figures come with the workers' heartbeats. */
    assert_true(h_eventually(peak_reported, c, 10000));
    uint64_t peak = e2e_memory_sum(c, "peak_used");
    if (peak > (6u << 20))
        fail_msg("stores peaked at %llu bytes", (unsigned long long)peak);
    assert_int_equal(spillway_release(cl, prev), 0);
    E2E_FINISH(c, cl);
}

static pid_t executor_pid(h_cluster *c, int worker)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/task/%d/children", (int)c->workers[worker].pid,
             (int)c->workers[worker].pid);
    FILE *f = fopen(path, "r");
    int pid = 0;
    if (f != NULL) {
        if (fscanf(f, "%d", &pid) != 1)
            pid = 0;
        fclose(f);
    }
    return pid;
}

/* Worker 0 runs a task: its heartbeat says a slot is busy, or (sooner: workers report each
 * start) the scheduler counts a running task while worker 0 is the only one. */
static bool slot_busy(void *arg)
{
    json_t *st = e2e_ctl_json(arg, "status");
    json_t *workers = json_object_get(st, "workers");
    json_int_t busy = json_integer_value(json_object_get(json_array_get(workers, 0), "busy"));
    json_int_t running = json_integer_value(json_object_get(json_object_get(st, "tasks"), "running"));
    json_decref(st);
    return busy > 0 || (running > 0 && json_array_size(workers) == 1);
}

static bool executor_restarted(void *arg)
{
    return e2e_memory_sum(arg, "executor_restarts") >= 1;
}

/* An executor killed from outside mid-task: that task fails with the reason, the worker and
 * its store carry on, a new executor takes over. */
static void executor_killed_mid_task_leaves_store_intact(void)
{
    h_cluster *c = h_cluster_simple(1);
    spillway *cl = e2e_connect(c);
    size_t n = 2u << 20;
    uint8_t *data = malloc(n);
    for (size_t i = 0; i < n; i++)
        data[i] = (uint8_t)(i * 5);
    spillway_ref obj, slow;
    assert_int_equal(spillway_put(cl, data, n, &obj), 0);
    spillway_graph *g = spillway_graph_new(cl);
    spillway_arg sl = spillway_arg_u64(3000);
    assert_int_equal(spillway_task(g, "sleep_ms", &sl, 1, SPILLWAY_KEEP, &slow), 0);
    E2E_SUBMIT(g);
    pid_t ex = 0;
    for (int i = 0; i < 1000 && ex == 0; i++)
        ex = executor_pid(c, 0);
    assert_true(ex > 0);
    /* Wait until the sleep is running (the worker reports one busy slot). */
    assert_true(h_eventually(slot_busy, c, 20000));
    assert_int_equal(kill(ex, SIGKILL), 0);
    void *out;
    size_t len;
    assert_int_equal(spillway_get(cl, slow, 60000, &out, &len), SPW_EEXECCRASH);
    assert_non_null(strstr(spillway_errmsg(cl), "signal 9"));
    /* The store still has the object, byte for byte, and tasks still run. */
    assert_int_equal(spillway_get(cl, obj, 10000, &out, &len), 0);
    assert_int_equal(len, n);
    assert_memory_equal(out, data, n);
    spillway_free(out);
    g = spillway_graph_new(cl);
    spillway_ref sum;
    spillway_arg ar = spillway_arg_ref(obj);
    assert_int_equal(spillway_task(g, "len", &ar, 1, SPILLWAY_KEEP, &sum), 0);
    E2E_SUBMIT(g);
    assert_int_equal(e2e_get_u64(cl, sum), n);
    assert_true(h_eventually(executor_restarted, c, 10000));
    /* The table says so too: a restart is not a recycle. */
    const char *argv[] = {h_bin("spillway-ctl"), "--scheduler", c->addr, "status", NULL};
    char *table = NULL;
    assert_int_equal(h_run(argv, &table), 0);
    assert_non_null(strstr(table, "executors restarted 1, recycled 0"));
    free(table);
    spillway_ref all[] = {obj, slow, sum};
    assert_int_equal(spillway_release_many(cl, all, 3), 0);
    assert_true(e2e_cluster_idle(c, 20000));
    spillway_close(cl);
    free(data);
    E2E_STOP(c, NULL);
}

/* The end of a lineage test: `made` (4 MiB, lost with its worker) reads back as `first` did
 * before; then both references go and the cluster stops cleanly. Frees first. */
static void remade_then_stop(h_cluster *c, spillway *cl, spillway_ref made, void *first,
                             spillway_ref other)
{
    void *again;
    size_t len;
    assert_int_equal(spillway_get(cl, made, 60000, &again, &len), 0);
    assert_int_equal(len, 4u << 20);
    assert_memory_equal(again, first, len);
    spillway_free(first);
    spillway_free(again);
    spillway_ref all[] = {made, other};
    assert_int_equal(spillway_release_many(cl, all, 2), 0);
    E2E_STOP(c, cl);
}

static bool file_exists(void *arg)
{
    return access(arg, F_OK) == 0;
}

/* A worker dies: its running task is retried elsewhere, and the object only it held is
 * recomputed from the task that produced it (lineage), byte for byte. */
static void dead_worker_tasks_retry_and_lost_objects_are_recomputed(void)
{
    h_cluster *c = h_cluster_start(false, NULL);
    const char *const args[] = {"--slots", "1", "--store-capacity", "64M",
                                "--plugin", SPW_TEST_PLUGIN, NULL};
    h_worker_start(c, args);
    spillway *cl = e2e_connect(c);
    spillway_graph *g = spillway_graph_new(cl);
    spillway_ref made, slow;
    spillway_arg ra[2] = {spillway_arg_u64(4u << 20), spillway_arg_u64(77)};
    assert_int_equal(spillway_task(g, "random", ra, 2, SPILLWAY_KEEP, &made), 0);
    E2E_SUBMIT(g);
    void *first;
    size_t len;
    assert_int_equal(spillway_get(cl, made, 60000, &first, &len), 0); /* made on worker 0 */
    g = spillway_graph_new(cl);
    /* The task marks that it runs and cannot finish until the test lets it (after worker 0 is
     * dead), so the kill finds it running however slow the machine is. */
    char mark[512], go[512];
    snprintf(mark, sizeof mark, "%s/started", c->dir);
    snprintf(go, sizeof go, "%s/go", c->dir);
    spillway_arg wa[3] = {spillway_arg_bytes(go, strlen(go)), spillway_arg_u64(120000),
                          spillway_arg_bytes(mark, strlen(mark))};
    assert_int_equal(spillway_task(g, "wait_file", wa, 3, SPILLWAY_KEEP, &slow), 0);
    E2E_SUBMIT(g);
    assert_true(h_eventually(file_exists, mark, 60000)); /* running on worker 0 */
    h_worker_start(c, args);
    h_worker_kill(c, 0, SIGKILL);
    int fd = open(go, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
    assert_true(fd >= 0);
    close(fd);
    /* The waiting task finishes on worker 1, and the object comes back from its task, run
     * again there, byte for byte. */
    void *out;
    assert_int_equal(spillway_get(cl, slow, 60000, &out, &len), 0);
    spillway_free(out);
    remade_then_stop(c, cl, made, first, slow);
}

static bool task_assigned(void *arg)
{
    json_t *st = e2e_ctl_json(arg, "status");
    json_t *tasks = json_object_get(st, "tasks");
    json_int_t n = json_integer_value(json_object_get(tasks, "assigned")) +
                   json_integer_value(json_object_get(tasks, "running"));
    json_decref(st);
    return n > 0;
}

/* A task already handed to a worker whose input lived only on a worker that then died: the
 * fetch fails, the input is re-made from its task, and the task runs again instead of failing
 * with SPW_EOBJLOST. The holder is stopped (SIGSTOP) while the task is handed out, so the fetch
 * cannot finish before the holder dies. The input's task was bound to the dead worker: it is
 * re-made on another. */
static void assigned_task_survives_loss_of_its_input(void)
{
    h_cluster *c = h_cluster_start(false, NULL);
    const char *const a_args[] = {"--slots", "1", "--store-capacity", "64M", "--name", "wa", NULL};
    h_worker_start(c, a_args);
    spillway *cl = e2e_connect(c);
    spillway_graph *g = spillway_graph_new(cl);
    spillway_ref made, sum;
    spillway_arg ra[2] = {spillway_arg_u64(4u << 20), spillway_arg_u64(91)};
    assert_int_equal(spillway_graph_place(g, "wa"), 0); /* re-made elsewhere all the same */
    assert_int_equal(spillway_task(g, "random", ra, 2, SPILLWAY_KEEP, &made), 0);
    E2E_SUBMIT(g);
    void *first;
    size_t len;
    assert_int_equal(spillway_get(cl, made, 60000, &first, &len), 0); /* made on wa */
    const char *const b_args[] = {"--slots", "1", "--store-capacity", "64M", "--name", "wb", NULL};
    h_worker_start(c, b_args);
    assert_int_equal(kill(c->workers[0].pid, SIGSTOP), 0);
    g = spillway_graph_new(cl);
    assert_int_equal(spillway_graph_place(g, "wb"), 0);
    spillway_arg la = spillway_arg_ref(made);
    assert_int_equal(spillway_task(g, "len", &la, 1, SPILLWAY_KEEP, &sum), 0);
    E2E_SUBMIT(g);
    assert_true(h_eventually(task_assigned, c, 20000)); /* wb is fetching from stopped wa */
    h_worker_kill(c, 0, SIGKILL);
    assert_int_equal(e2e_get_u64(cl, sum), 4u << 20);
    remade_then_stop(c, cl, made, first, sum);
}

/* A task bound to a worker name: it runs when a worker of that name joins later, and fails
 * with a clear error if none does within --place-wait; the cluster goes on serving.
 * The two halves run on two schedulers: the first waits forever (--place-wait 0), so wb's
 * start, however slow on a loaded machine, cannot outlast the window the test relies on; the
 * second has a short window that only a worker that never comes can exceed. */
static void task_bound_to_absent_worker_waits_then_fails(void)
{
    const char *const sargs[] = {"--place-wait", "0", NULL};
    h_cluster *c = h_cluster_start(false, sargs);
    const char *const a_args[] = {"--slots", "1", "--name", "wa", NULL};
    h_worker_start(c, a_args);
    spillway *cl = e2e_connect(c);
    spillway_ref later = placed_inc(cl, "wb", 1);
    const char *const b_args[] = {"--slots", "1", "--name", "wb", NULL};
    h_worker_start(c, b_args);
    assert_int_equal(e2e_get_u64(cl, later), 2); /* waited for wb, ran there */
    assert_int_equal(spillway_release(cl, later), 0);
    E2E_STOP(c, cl);

    const char *const s2args[] = {"--place-wait", "300", NULL};
    c = h_cluster_start(false, s2args);
    h_worker_start(c, a_args);
    cl = e2e_connect(c);
    spillway_ref never = placed_inc(cl, "nobody", 1);
    void *data;
    size_t len;
    int rc = spillway_get(cl, never, 60000, &data, &len);
    assert_int_equal(rc, SPW_ENOWORKER);
    assert_non_null(strstr(spillway_errmsg(cl), "'nobody'"));
    spillway_ref after = placed_inc(cl, "wa", 41);
    assert_int_equal(e2e_get_u64(cl, after), 42);
    spillway_ref all[] = {never, after};
    assert_int_equal(spillway_release_many(cl, all, 2), 0);
    E2E_STOP(c, cl);
}

static const struct CMUnitTest tests[] = {
    H_CASE(ten_thousand_independent_tasks),
    H_CASE(dependency_graph_matches_local_computation),
    H_CASE(plugin_task_runs_and_bad_plugin_is_refused),
    H_CASE(failed_task_reports_its_text_and_cluster_keeps_working),
    H_CASE(task_returning_the_ahead_code_runs_once),
    H_CASE(capped_graph_does_not_hold_back_others),
    H_CASE(client_killed_mid_job_leaves_cluster_working),
    H_CASE(put_get_round_trips_every_size),
    H_CASE(release_twice_or_unknown_is_enotheld),
    H_CASE(many_kept_results_across_reference_chunks),
    H_CASE(large_outputs_move_between_workers),
    H_CASE(executor_crash_fails_one_task_and_worker_survives),
    H_CASE(ctl_status_reports_workers_tasks_and_clients),
    H_CASE(ctl_errors_are_one_line_and_nonzero),
    H_CASE(secret_is_required_of_clients_and_workers),
    H_CASE(shipped_configs_parse_and_command_line_wins),
    H_CASE(daemons_notify_systemd_when_ready),
    H_CASE(zero_copy_view_points_into_the_arena),
    H_CASE(views_fall_back_to_tcp_copies),
    H_CASE(dead_reader_releases_its_pins),
    H_CASE(long_chain_holds_a_handful_of_objects),
    H_CASE(executor_killed_mid_task_leaves_store_intact),
    H_CASE(dead_worker_tasks_retry_and_lost_objects_are_recomputed),
    H_CASE(assigned_task_survives_loss_of_its_input),
    H_CASE(task_bound_to_absent_worker_waits_then_fails),
};

SPW_TEST_MAIN(tests)
