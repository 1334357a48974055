/* End-to-end tests of spillway_shuffle: every value dealt to its partition in map order (puts
 * and views as inputs), early merges when a partition has more pieces than a task takes (by
 * count, as a tree, and by bytes), a sort of four times what the stores hold with the workers'
 * memory within their budget, and refusals that leave the graph as it was. Every result is
 * compared byte for byte with the same computation done here (shuffle_job.c). Real daemons on
 * 127.0.0.1, with the example sort plugin (worker/examples/sort_plugin.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../unit/test_main.h"
#include "e2e_util.h"
#include "shuffle_job.h"

/* A scheduler and two one-slot workers with stores of `store`, the sort plugin loaded. */
static h_cluster *cluster_two(const char *store)
{
    h_cluster *c = h_cluster_start(false, NULL);
    for (int i = 0; i < 2; i++) {
        char dir[512];
        snprintf(dir, sizeof dir, "%s/spill%d", c->dir, i);
        const char *const args[] = {"--slots",     "1", "--store-capacity", store, "--spill-dir",
                                    dir,           "--plugin", SPW_SORT_PLUGIN, NULL};
        h_worker_start(c, args);
    }
    return c;
}

/* Blocks of a few thousand values, some pieces above the inline limit, some under. */
static uint64_t varied(uint32_t i)
{
    return 1000 + (uint64_t)i * 3777 % 60000;
}

static uint64_t small(uint32_t i)
{
    return 64 + i % 5;
}

/* Twelve inputs, six puts and six views of one put, dealt into seven partitions by value: the
 * reduces take the maps' outputs directly (no merge), and each partition is its bucket of
 * every block in block order. */
static void shuffle_deals_every_value_in_map_order(void)
{
    h_cluster *c = cluster_two("64M");
    spillway *cl = e2e_connect(c);
    spillway_shuffle_opts o = {0};
    assert_int_equal(shuffle_job_deal(cl, 12, varied, 7, o), 12 + 7);
    E2E_FINISH(c, cl);
}

/* 600 inputs into 16 partitions: 9,600 pieces. With the default fan-in (256) each partition's
 * pieces are merged in three groups of 200 first; with a fan-in of 3, by a tree of merges, none
 * taking more than 3; with a merge budget of 2 KiB, in groups of that many bytes. The results
 * are exact either way, and nothing is left behind. */
static void shuffle_merges_early_when_partitions_have_many_pieces(void)
{
    enum { N = 600, P = 16 };
    h_cluster *c = cluster_two("64M");
    spillway *cl = e2e_connect(c);
    spillway_shuffle_opts o = {0};
    assert_int_equal(shuffle_job_deal(cl, N, small, P, o), N + 3 * P + P);

    o.fan_in = 3;
    o.merge = "concat";
    uint64_t total = shuffle_job_deal(cl, N, small, P, o);
    uint64_t merges = total - N - P;
    assert_int_equal(merges % P, 0);
    /* A merge of at most 3 pieces takes at most 2 off the count: from 600 to 3 or fewer. */
    if (merges / P < (N - 3 + 1) / 2)
        fail_msg("%llu merges per partition: some took more than 3 pieces",
                 (unsigned long long)(merges / P));

    o = (spillway_shuffle_opts){.merge_bytes = 2048};
    total = shuffle_job_deal(cl, N, small, P, o);
    assert_true(total > N + P);
    E2E_FINISH(c, cl);
}

typedef struct peaks {
    h_cluster *c;
    uint64_t bytes[H_MAX_WORKERS];
} peaks;

static void sample_peaks(void *arg)
{
    peaks *pk = arg;
    for (int i = 0; i < pk->c->nworkers; i++) {
        uint64_t m = e2e_node_memory(pk->c->workers[i].pid);
        if (m > pk->bytes[i])
            pk->bytes[i] = m;
    }
}

/* 64 MiB of generated values sorted into 16 partitions by two workers with 16 MiB stores: the
 * map outputs spill, the reduces take them back, and every value is where a sort puts it. Each
 * worker's memory, sampled throughout, stays under its store, its one slot's task (a sort holds
 * a scratch array as large as its partition) and 64 MiB. */
static void shuffle_sorts_four_times_the_stores(void)
{
    h_cluster *c = cluster_two("16M");
    spillway *cl = e2e_connect(c);
    peaks pk = {.c = c};
    shuffle_job_sort(cl, 16, 1u << 19, 16, sample_peaks, &pk);
#ifndef SPW_SANITIZE /* ASan's shadow and quarantine are not ours to bound */
    for (int i = 0; i < c->nworkers; i++) {
        if (pk.bytes[i] > (16u << 20) + (4u << 20) + (64u << 20))
            fail_msg("worker %d peaked at %llu bytes", i, (unsigned long long)pk.bytes[i]);
    }
#endif
    E2E_FINISH(c, cl);
}

/* Bad arguments are refused before any task is added: the graph submits empty. */
static void shuffle_refuses_bad_arguments(void)
{
    h_cluster *c = cluster_two("16M");
    spillway *cl = e2e_connect(c);
    spillway_graph *g = spillway_graph_new(cl);
    spillway_arg in = spillway_arg_u64(1);
    spillway_ref res[2];
    spillway_shuffle_opts o = {.partitions = 0};
    assert_int_equal(spillway_graph_shuffle(g, "split", &in, 1, NULL, 0, "sort", &o, 0, res),
                     SPW_EINVAL);
    o.partitions = SPILLWAY_MAX_OUTPUTS + 1;
    assert_int_equal(spillway_graph_shuffle(g, "split", &in, 1, NULL, 0, "sort", &o, 0, res),
                     SPW_ELIMIT);
    assert_non_null(strstr(spillway_errmsg(cl), "4097"));
    o.partitions = 2;
    spillway_arg bad = {.kind = 7};
    o.reduce_shared = &bad;
    o.nreduce_shared = 1;
    assert_int_equal(spillway_graph_shuffle(g, "split", &in, 1, NULL, 0, "sort", &o, 0, res),
                     SPW_EINVAL);
    o = (spillway_shuffle_opts){.partitions = 2, .merge = ""};
    assert_int_equal(spillway_graph_shuffle(g, "split", &in, 1, NULL, 0, "sort", &o, 0, res),
                     SPW_EINVAL);
    assert_int_equal(spillway_graph_shuffle(g, "split", &in, 0, NULL, 0, "sort", &o, 0, res),
                     SPW_EINVAL);
    assert_int_equal(spillway_submit(g), 0);
    spillway_graph_progress prog;
    assert_int_equal(spillway_graph_status(cl, spillway_graph_id(g), &prog), 0);
    assert_int_equal(prog.total, 0);
    spillway_graph_free(g);
    assert_int_equal(spillway_shuffle(cl, "split", &in, 1, NULL, 0, "sort", &o, res), SPW_EINVAL);
    E2E_STOP(c, cl);
}

static const struct CMUnitTest tests[] = {
    H_CASE(shuffle_deals_every_value_in_map_order),
    H_CASE(shuffle_merges_early_when_partitions_have_many_pieces),
    H_CASE(shuffle_sorts_four_times_the_stores),
    H_CASE(shuffle_refuses_bad_arguments),
};

SPW_TEST_MAIN(tests)
