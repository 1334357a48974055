/* End-to-end tests of chains, whose dependents the scheduler sends ahead to the worker running
 * their producer (README "Scheduling"): real daemons on 127.0.0.1 with ephemeral ports, one
 * cluster per test. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../unit/test_main.h"
#include "e2e_util.h"

#define CHAIN 500

typedef struct done_count {
    h_cluster *c;
    json_int_t want;
} done_count;

/* The workers' heartbeats report `want` tasks done in all, every one of them on one worker. */
static bool one_worker_did_all(void *arg)
{
    done_count *d = arg;
    json_t *st = e2e_ctl_json(d->c, "status");
    json_int_t sum = 0, max = 0;
    size_t i;
    json_t *w;
    json_array_foreach(json_object_get(st, "workers"), i, w)
    {
        json_int_t n =
            json_integer_value(json_object_get(json_object_get(w, "memory"), "tasks_done"));
        sum += n;
        max = n > max ? n : max;
    }
    json_decref(st);
    return sum == d->want && max == d->want;
}

/* A chain of inline results and one of stored results (over the inline limit, so each hop's
 * input is an object in the store) give the right answers, each hop on the worker of the one
 * before it though another worker is idle. */
static void chain_results_are_right(void)
{
    h_cluster *c = h_cluster_simple(2);
    spillway *cl = e2e_connect(c);
    spillway_graph *g = spillway_graph_new(cl);
    spillway_ref prev;
    spillway_arg a = spillway_arg_u64(7);
    assert_int_equal(spillway_task(g, "inc", &a, 1, 0, &prev), 0);
    for (int i = 1; i < CHAIN; i++) {
        a = spillway_arg_ref(prev);
        assert_int_equal(spillway_task(g, "inc", &a, 1, i == CHAIN - 1 ? SPILLWAY_KEEP : 0, &prev),
                         0);
    }
    E2E_SUBMIT(g);
    assert_int_equal(e2e_get_u64(cl, prev), 7 + CHAIN);
    done_count d = {c, CHAIN};
    assert_true(h_eventually(one_worker_did_all, &d, 20000));
    assert_int_equal(spillway_release(cl, prev), 0);

    /* Stored results (200,000 bytes), then inline ones large enough (60,000 bytes) that an
     * executor keeps fewer of them than it may have queued (EXEC_KEPT_BYTES). */
    static const uint64_t sizes[] = {200000, 60000};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        g = spillway_graph_new(cl);
        spillway_arg fa[2] = {spillway_arg_u64(sizes[k]), spillway_arg_bytes("ab", 2)};
        assert_int_equal(spillway_task(g, "fill", fa, 2, 0, &prev), 0);
        for (int i = 0; i < 40; i++) {
            a = spillway_arg_ref(prev);
            assert_int_equal(spillway_task(g, "echo", &a, 1, 0, &prev), 0);
        }
        a = spillway_arg_ref(prev);
        spillway_ref len;
        assert_int_equal(spillway_task(g, "len", &a, 1, SPILLWAY_KEEP, &len), 0);
        E2E_SUBMIT(g);
        assert_int_equal(e2e_get_u64(cl, len), sizes[k]);
        assert_int_equal(spillway_release(cl, len), 0);
    }
    E2E_FINISH(c, cl);
}

/* A task failing mid-chain fails everything after it, as if each had been dispatched after it
 * (SPW_EDEPFAILED naming the failure), keeps what came before it, and leaves nothing behind;
 * the cluster goes on. */
static void failing_producer_in_a_chain(void)
{
    h_cluster *c = h_cluster_simple(2);
    spillway *cl = e2e_connect(c);
    spillway_graph *g = spillway_graph_new(cl);
    spillway_ref before, bad, prev;
    spillway_arg a = spillway_arg_u64(1);
    assert_int_equal(spillway_task(g, "inc", &a, 1, 0, &prev), 0);
    a = spillway_arg_ref(prev);
    assert_int_equal(spillway_task(g, "inc", &a, 1, SPILLWAY_KEEP, &before), 0);
    spillway_arg msg[2] = {spillway_arg_bytes("chain link broke", 16), spillway_arg_ref(before)};
    assert_int_equal(spillway_task(g, "fail", msg, 2, SPILLWAY_KEEP, &bad), 0);
    prev = bad;
    for (int i = 0; i < 30; i++) {
        a = spillway_arg_ref(prev);
        assert_int_equal(spillway_task(g, "inc", &a, 1, i == 29 ? SPILLWAY_KEEP : 0, &prev), 0);
    }
    E2E_SUBMIT(g);
    void *out;
    size_t len;
    assert_int_equal(spillway_get(cl, prev, 60000, &out, &len), SPW_EDEPFAILED);
    /* It names the task that failed first and its error, not each link of the chain. */
    assert_non_null(strstr(spillway_errmsg(cl), "(fail) failed first: chain link broke"));
    assert_null(strstr(strstr(spillway_errmsg(cl), ": ") + 2, "dependency"));
    assert_int_equal(spillway_get(cl, bad, 60000, &out, &len), SPW_ETASKFAILED);
    assert_string_equal(spillway_errmsg(cl), "chain link broke");
    assert_int_equal(e2e_get_u64(cl, before), 3);
    spillway_ref all[] = {before, bad, prev};
    assert_int_equal(spillway_release_many(cl, all, 3), 0);
    assert_true(e2e_cluster_idle(c, 20000));

    /* The cluster goes on: a chain after it is right. */
    g = spillway_graph_new(cl);
    a = spillway_arg_u64(0);
    assert_int_equal(spillway_task(g, "inc", &a, 1, 0, &prev), 0);
    for (int i = 1; i < 50; i++) {
        a = spillway_arg_ref(prev);
        assert_int_equal(spillway_task(g, "inc", &a, 1, i == 49 ? SPILLWAY_KEEP : 0, &prev), 0);
    }
    E2E_SUBMIT(g);
    assert_int_equal(e2e_get_u64(cl, prev), 50);
    assert_int_equal(spillway_release(cl, prev), 0);
    E2E_FINISH(c, cl);
}

static const struct CMUnitTest tests[] = {
    H_CASE(chain_results_are_right),
    H_CASE(failing_producer_in_a_chain),
};

SPW_TEST_MAIN(tests)
