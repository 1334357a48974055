/* Tasks with many outputs end to end: each output read back byte by byte (inline and stored
 * outputs mixed), outputs nobody references released, a wrong number of outputs failing with a
 * clear error, version-1 and version-2 plugins in one worker, and one output lost with its worker
 * re-made by running its task once more. Real daemons on 127.0.0.1. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../unit/test_main.h"
#include "e2e_util.h"

static const char *const worker_args[] = {
    "--slots",       "2",        "--store-capacity", "64M", "--plugin",
    SPW_TEST_PLUGIN, "--plugin", SPW_TEST_PLUGIN_V2, NULL};

/* Byte j of output i of the plugin's parts (plugin_outputs.c). */
static uint8_t part_byte(uint32_t i, uint64_t j)
{
    return (uint8_t)(i * 31u + j * 7u + (j >> 8));
}

/* Adds parts(sizes[0..n)) declaring k outputs, into refs (k of them). */
static int add_parts(spillway_graph *g, const uint64_t *sizes, uint32_t n, uint32_t k,
                     unsigned flags, const char *path, spillway_ref *refs)
{
    spillway_arg a[2] = {spillway_arg_bytes(sizes, n * sizeof *sizes),
                         spillway_arg_bytes(path, path != NULL ? strlen(path) : 0)};
    return spillway_task_n(g, "parts", a, path != NULL ? 2 : 1, flags, k, refs);
}

/* Output i is there, and is what parts wrote: size bytes of part_byte(i, j). */
static void check_output(spillway *cl, spillway_ref r, uint32_t i, uint64_t size)
{
    void *data;
    size_t len;
    int rc = spillway_get(cl, r, 60000, &data, &len);
    if (rc != 0)
        fail_msg("output %u: %s: %s", i, spillway_strerror(rc), spillway_errmsg(cl));
    assert_int_equal(len, size);
    const uint8_t *p = data;
    for (uint64_t j = 0; j < len; j++)
        if (p[j] != part_byte(i, j))
            fail_msg("output %u: byte %llu is %u, not %u", i, (unsigned long long)j, p[j],
                     part_byte(i, j));
    spillway_free(data);
}

static void outputs_read_back_byte_by_byte(void)
{
    h_cluster *c = h_cluster_start(false, NULL);
    h_worker_start(c, worker_args);
    spillway *cl = e2e_connect(c);
    /* Inline (under the 64 KiB limit), stored, empty and one-byte outputs, mixed. */
    static const uint64_t sizes[] = {16, 300000, 0, 1000, 100000, 1};
    enum { K = sizeof sizes / sizeof sizes[0] };
    spillway_ref refs[K], viewed, whole;
    spillway_graph *g = spillway_graph_new(cl);
    assert_int_equal(add_parts(g, sizes, K, K, SPILLWAY_KEEP, NULL, refs), 0);
    /* Later tasks take one output, or a view of one. */
    spillway_arg ca[2] = {spillway_arg_ref(refs[1]), spillway_arg_u64(1)};
    assert_int_equal(spillway_task(g, "check_part", ca, 2, SPILLWAY_KEEP, &whole), 0);
    spillway_arg va[2] = {spillway_arg_view(refs[4], 0, 5000), spillway_arg_u64(4)};
    assert_int_equal(spillway_task(g, "check_part", va, 2, SPILLWAY_KEEP, &viewed), 0);
    E2E_SUBMIT(g);
    for (uint32_t i = 0; i < K; i++)
        check_output(cl, refs[i], i, sizes[i]);
    assert_int_equal(e2e_get_u64(cl, whole), sizes[1]);
    assert_int_equal(e2e_get_u64(cl, viewed), 5000);
    /* spillway-ctl memory names each output's task and index. */
    json_t *doc = e2e_ctl_json(c, "memory");
    assert_non_null(doc);
    char want[33], task0[33];
    spillway_ref_hex(refs[3], want);
    spillway_ref_hex(refs[0], task0);
    size_t n;
    json_t *o, *found = NULL;
    json_array_foreach(json_object_get(doc, "objects"), n, o)
    {
        if (strcmp(json_string_value(json_object_get(o, "id")), want) == 0)
            found = o;
    }
    assert_non_null(found);
    json_t *out = json_object_get(found, "output");
    assert_non_null(out);
    assert_string_equal(json_string_value(json_object_get(out, "task")), task0);
    assert_int_equal(json_integer_value(json_object_get(out, "index")), 3);
    assert_int_equal(json_integer_value(json_object_get(out, "of")), K);
    json_decref(doc);
    char *table = NULL;
    const char *const argv[] = {h_bin("spillway-ctl"), "--scheduler", c->addr, "memory", NULL};
    assert_int_equal(h_run(argv, &table), 0);
    char cell[24];
    snprintf(cell, sizeof cell, "%.12s#3", task0);
    assert_non_null(strstr(table, cell));
    free(table);
    /* Output 0 is the id a one-output task would have; the others follow it. */
    char h0[33], h1[33];
    spillway_ref_hex(refs[0], h0);
    spillway_ref_hex(refs[1], h1);
    assert_memory_equal(h0, h1, 29);
    assert_int_equal(spillway_release_many(cl, refs, K), 0);
    assert_int_equal(spillway_release(cl, whole), 0);
    assert_int_equal(spillway_release(cl, viewed), 0);
    E2E_FINISH(c, cl);
}

static bool memory_listing_empty(void *arg)
{
    json_t *doc = e2e_ctl_json(arg, "memory");
    if (doc == NULL)
        return false;
    bool empty = json_array_size(json_object_get(doc, "objects")) == 0;
    json_decref(doc);
    return empty;
}

/* Outputs nobody holds go as soon as their task ends; the one a later task reads goes after
 * that task; the stores end empty. */
static void unreferenced_outputs_are_released(void)
{
    h_cluster *c = h_cluster_start(false, NULL);
    h_worker_start(c, worker_args);
    spillway *cl = e2e_connect(c);
    static const uint64_t sizes[] = {200000, 100, 300000, 150000};
    spillway_ref refs[4], sum;
    spillway_graph *g = spillway_graph_new(cl);
    assert_int_equal(add_parts(g, sizes, 4, 4, 0, NULL, refs), 0);
    spillway_arg ca[2] = {spillway_arg_ref(refs[2]), spillway_arg_u64(2)};
    assert_int_equal(spillway_task(g, "check_part", ca, 2, SPILLWAY_KEEP, &sum), 0);
    E2E_SUBMIT(g);
    assert_int_equal(e2e_get_u64(cl, sum), sizes[2]);
    /* Only the kept result is left: one object, inline. */
    json_t *doc = e2e_ctl_json(c, "memory");
    assert_non_null(doc);
    assert_int_equal(json_array_size(json_object_get(doc, "objects")), 1);
    json_decref(doc);
    assert_int_equal(spillway_release(cl, sum), 0);
    assert_true(h_eventually(memory_listing_empty, c, 20000));
    E2E_FINISH(c, cl);
}

/* Reads a failed output's error: rc and the message. */
static void expect_failure(spillway *cl, spillway_ref r, const char *part)
{
    void *data;
    size_t len;
    int rc = spillway_get(cl, r, 60000, &data, &len);
    if (rc != SPW_ETASKFAILED)
        fail_msg("got %d (%s), not SPW_ETASKFAILED", rc, spillway_errmsg(cl));
    if (strstr(spillway_errmsg(cl), part) == NULL)
        fail_msg("error \"%s\" does not say \"%s\"", spillway_errmsg(cl), part);
}

static void wrong_number_of_outputs_fails_clearly(void)
{
    h_cluster *c = h_cluster_start(false, NULL);
    h_worker_start(c, worker_args);
    spillway *cl = e2e_connect(c);
    static const uint64_t sizes[] = {10, 20, 30};
    spillway_ref fewer[4], more[2], v1[2];
    spillway_graph *g = spillway_graph_new(cl);
    assert_int_equal(add_parts(g, sizes, 3, 4, SPILLWAY_KEEP, NULL, fewer), 0);
    assert_int_equal(add_parts(g, sizes, 3, 2, SPILLWAY_KEEP, NULL, more), 0);
    /* A version-1 function writes one output. */
    spillway_arg ra[1] = {spillway_arg_bytes("abc", 3)};
    assert_int_equal(spillway_task_n(g, "reverse", ra, 1, SPILLWAY_KEEP, 2, v1), 0);
    /* Over the limit: refused at once, naming k and the limit. */
    spillway_ref big[1];
    assert_int_equal(spillway_task_n(g, "parts", ra, 1, 0, SPILLWAY_MAX_OUTPUTS + 1, big),
                     SPW_ELIMIT);
    assert_non_null(strstr(spillway_errmsg(cl), "4097 outputs"));
    assert_non_null(strstr(spillway_errmsg(cl), "4096"));
    E2E_SUBMIT(g);
    char hex[33], want[96];
    snprintf(want, sizeof want, "task=%s (parts) declared 4 outputs and wrote 3",
             spillway_ref_hex(fewer[0], hex));
    for (int i = 0; i < 4; i++)
        expect_failure(cl, fewer[i], want);
    expect_failure(cl, more[1], "declared 2 outputs and wrote 3");
    expect_failure(cl, v1[0], "(reverse) declared 2 outputs and wrote 1");
    assert_int_equal(spillway_release_many(cl, fewer, 4), 0);
    assert_int_equal(spillway_release_many(cl, more, 2), 0);
    assert_int_equal(spillway_release_many(cl, v1, 2), 0);
    E2E_FINISH(c, cl);
}

/* One worker runs functions of a version-1 plugin and of a version-2 one, a version-1 function
 * in a graph with many-output tasks. */
static void abi_v1_and_v2_plugins_side_by_side(void)
{
    h_cluster *c = h_cluster_start(false, NULL);
    h_worker_start(c, worker_args);
    spillway *cl = e2e_connect(c);
    static const uint64_t sizes[] = {5, 70000};
    spillway_ref refs[2], rev;
    spillway_graph *g = spillway_graph_new(cl);
    assert_int_equal(add_parts(g, sizes, 2, 2, SPILLWAY_KEEP, NULL, refs), 0);
    spillway_arg ra[1] = {spillway_arg_ref(refs[0])};
    assert_int_equal(spillway_task(g, "reverse", ra, 1, SPILLWAY_KEEP, &rev), 0);
    E2E_SUBMIT(g);
    check_output(cl, refs[1], 1, sizes[1]);
    void *data;
    size_t len;
    assert_int_equal(spillway_get(cl, rev, 60000, &data, &len), 0);
    assert_int_equal(len, 5);
    for (uint64_t j = 0; j < 5; j++)
        assert_int_equal(((uint8_t *)data)[j], part_byte(0, 4 - j));
    spillway_free(data);
    assert_int_equal(spillway_release_many(cl, refs, 2), 0);
    assert_int_equal(spillway_release(cl, rev), 0);
    E2E_FINISH(c, cl);
}

/* One stored output of a task lives only on a worker that is SIGKILLed: the task runs once more,
 * on the other worker, and every output reads back right afterwards. */
static void lost_output_is_remade_by_running_its_task_again(void)
{
    h_cluster *c = h_cluster_start(false, NULL);
    h_worker_start(c, worker_args);
    spillway *cl = e2e_connect(c);
    char count[512];
    snprintf(count, sizeof count, "%s/runs", c->dir);
    static const uint64_t sizes[] = {100, 500000, 50};
    spillway_ref refs[3];
    spillway_graph *g = spillway_graph_new(cl);
    assert_int_equal(add_parts(g, sizes, 3, 3, SPILLWAY_KEEP, count, refs), 0);
    E2E_SUBMIT(g);
    for (uint32_t i = 0; i < 3; i++)
        check_output(cl, refs[i], i, sizes[i]); /* made on worker 0 */
    h_worker_start(c, worker_args);
    h_worker_kill(c, 0, SIGKILL);
    for (uint32_t i = 0; i < 3; i++)
        check_output(cl, refs[i], i, sizes[i]);
    struct stat st;
    assert_int_equal(stat(count, &st), 0);
    assert_int_equal(st.st_size, 2); /* run once, then once more for the lost output */
    assert_int_equal(spillway_release_many(cl, refs, 3), 0);
    E2E_STOP(c, cl);
}

typedef struct moved_arg {
    h_cluster *c;
    const spillway_ref *pieces; /* maps x parts, map-major */
    uint32_t maps, parts;
    const char *avoid; /* a worker no piece may be on (then two j may share one), or NULL */
} moved_arg;

/* Whether piece j of every map in a->pieces has one copy, on one worker for each j, a different
 * worker for each j (with a->avoid: any worker but that one). */
static bool pieces_moved(void *arg)
{
    const moved_arg *a = arg;
    json_t *doc = e2e_ctl_json(a->c, "memory");
    bool ok = doc != NULL;
    const char *node[8] = {0};
    for (uint32_t j = 0; ok && j < a->parts; j++) {
        for (uint32_t m = 0; ok && m < a->maps; m++) {
            char hex[33];
            json_t *o = e2e_json_find(json_object_get(doc, "objects"), "id",
                                      spillway_ref_hex(a->pieces[m * a->parts + j], hex));
            json_t *locs = json_object_get(o, "locations");
            const char *n = json_string_value(json_object_get(json_array_get(locs, 0), "node"));
            ok = json_array_size(locs) == 1 && n != NULL && (m == 0 || strcmp(n, node[j]) == 0) &&
                 (a->avoid == NULL || strcmp(n, a->avoid) != 0);
            node[j] = m == 0 ? n : node[j];
        }
        for (uint32_t k = 0; ok && a->avoid == NULL && k < j; k++)
            ok = strcmp(node[k], node[j]) != 0;
    }
    json_decref(doc);
    return ok;
}

static bool file_exists(void *arg)
{
    return access(arg, F_OK) == 0;
}

static void touch(const char *path)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fclose(f);
}

/* A shuffle held back: MAPS maps of P pieces each (parts, kept) and P reduces (wait_file, kept)
 * each taking piece j of every map, on P workers; the last map waits for go_map, the reduces
 * for go_reduce. */
enum { HELD_MAPS = 5, HELD_P = 3 };
typedef struct held_shuffle {
    spillway_ref pieces[HELD_MAPS][HELD_P], reduce[HELD_P];
    char go_map[512], go_reduce[512], count[512], mark[HELD_P][512];
} held_shuffle;

static const uint64_t held_sizes[HELD_P] = {256u << 10, 300u << 10, 200u << 10};

/* Submits it and waits until the pieces of the maps done have moved: each piece j alone (its
 * copy where it was made dropped) on one worker, a different one for each reduce or, with avoid,
 * any worker but that one. */
static void held_shuffle_start(h_cluster *c, spillway *cl, held_shuffle *h, const char *avoid)
{
    snprintf(h->go_map, sizeof h->go_map, "%s/go-map", c->dir);
    snprintf(h->go_reduce, sizeof h->go_reduce, "%s/go-reduce", c->dir);
    snprintf(h->count, sizeof h->count, "%s/runs", c->dir);
    spillway_ref blocker;
    spillway_graph *g = spillway_graph_new(cl);
    spillway_arg ba[2] = {spillway_arg_bytes(h->go_map, strlen(h->go_map)),
                          spillway_arg_u64(120000)};
    assert_int_equal(spillway_task(g, "wait_file", ba, 2, 0, &blocker), 0);
    for (uint32_t m = 0; m < HELD_MAPS; m++) {
        spillway_arg a[3] = {spillway_arg_bytes(held_sizes, sizeof held_sizes),
                             spillway_arg_bytes(h->count, strlen(h->count)),
                             spillway_arg_ref(blocker)};
        assert_int_equal(spillway_task_n(g, "parts", a, m + 1 < HELD_MAPS ? 2 : 3, SPILLWAY_KEEP,
                                         HELD_P, h->pieces[m]),
                         0);
    }
    for (uint32_t j = 0; j < HELD_P; j++) {
        snprintf(h->mark[j], sizeof h->mark[j], "%s/reduce-%u", c->dir, j);
        spillway_arg a[3 + HELD_MAPS] = {spillway_arg_bytes(h->go_reduce, strlen(h->go_reduce)),
                                         spillway_arg_u64(120000),
                                         spillway_arg_bytes(h->mark[j], strlen(h->mark[j]))};
        for (uint32_t m = 0; m < HELD_MAPS; m++)
            a[3 + m] = spillway_arg_ref(h->pieces[m][j]);
        assert_int_equal(
            spillway_task(g, "wait_file", a, 3 + HELD_MAPS, SPILLWAY_KEEP, &h->reduce[j]), 0);
    }
    E2E_SUBMIT(g);
    assert_int_equal(spillway_wait(cl, h->pieces[0], (HELD_MAPS - 1) * HELD_P, 60000), 0);
    moved_arg ma = {c, h->pieces[0], HELD_MAPS - 1, HELD_P, avoid};
    assert_true(h_eventually(pieces_moved, &ma, 60000));
}

/* Lets the last map and the reduces run, then reads every piece back byte for byte. */
static void held_shuffle_finish(spillway *cl, held_shuffle *h)
{
    touch(h->go_map);
    for (uint32_t j = 0; j < HELD_P; j++)
        assert_true(h_eventually(file_exists, h->mark[j], 60000)); /* every reduce runs */
    touch(h->go_reduce);
    assert_int_equal(spillway_wait(cl, h->reduce, HELD_P, 60000), 0);
    for (uint32_t m = 0; m < HELD_MAPS; m++)
        for (uint32_t j = 0; j < HELD_P; j++)
            check_output(cl, h->pieces[m][j], j, held_sizes[j]);
    assert_int_equal(spillway_release_many(cl, h->pieces[0], HELD_MAPS * HELD_P), 0);
    assert_int_equal(spillway_release_many(cl, h->reduce, HELD_P), 0);
}

static h_cluster *held_cluster(void)
{
    h_cluster *c = h_cluster_start(false, NULL);
    for (int i = 0; i < HELD_P; i++)
        h_worker_start(c, worker_args);
    return c;
}

/* A shuffle's pieces move to the worker their reduce is planned on as their maps end, before
 * the reduce can run; the reduces then run and every piece reads back. */
static void pieces_move_to_their_reduce_before_it_can_run(void)
{
    h_cluster *c = held_cluster();
    spillway *cl = e2e_connect(c);
    held_shuffle h;
    held_shuffle_start(c, cl, &h, NULL);
    held_shuffle_finish(cl, &h);
    struct stat st;
    assert_int_equal(stat(h.count, &st), 0);
    assert_int_equal(st.st_size, HELD_MAPS); /* each map ran once */
    E2E_STOP(c, cl);
}

/* A worker holding moved pieces killed before their reduce runs: the maps that made them run
 * again (lineage), the reduce runs on a worker left, and nothing is lost. */
static void moved_pieces_lost_with_their_worker_are_made_again(void)
{
    h_cluster *c = held_cluster();
    spillway *cl = e2e_connect(c);
    held_shuffle h;
    held_shuffle_start(c, cl, &h, NULL);
    h_worker_kill(c, 0, SIGKILL);
    held_shuffle_finish(cl, &h);
    struct stat st;
    assert_int_equal(stat(h.count, &st), 0);
    assert_true(st.st_size > HELD_MAPS); /* some ran again */
    E2E_STOP(c, cl);
}

/* A worker without a spill directory is never planned on for a reduce (pieces for its later
 * reduces would wait in memory its running tasks need): the pieces of the maps done move only
 * to the two workers that spill, those made on it leave it, and the shuffle completes. */
static void no_piece_moves_to_a_worker_that_cannot_spill(void)
{
    h_cluster *c = h_cluster_start(false, NULL);
    static const char *const nospill[] = {"--slots",     "2",       "--store-capacity", "64M",
                                          "--plugin",    SPW_TEST_PLUGIN,    "--plugin",
                                          SPW_TEST_PLUGIN_V2,                "--spill-dir",
                                          "none",        "--name",  "nospill", NULL};
    h_worker_start(c, nospill);
    for (int i = 0; i < 2; i++)
        h_worker_start(c, worker_args);
    spillway *cl = e2e_connect(c);
    held_shuffle h;
    held_shuffle_start(c, cl, &h, "nospill");
    held_shuffle_finish(cl, &h);
    E2E_STOP(c, cl);
}

static const struct CMUnitTest tests[] = {
    H_CASE(outputs_read_back_byte_by_byte),
    H_CASE(unreferenced_outputs_are_released),
    H_CASE(wrong_number_of_outputs_fails_clearly),
    H_CASE(abi_v1_and_v2_plugins_side_by_side),
    H_CASE(lost_output_is_remade_by_running_its_task_again),
    H_CASE(pieces_move_to_their_reduce_before_it_can_run),
    H_CASE(moved_pieces_lost_with_their_worker_are_made_again),
    H_CASE(no_piece_moves_to_a_worker_that_cannot_spill),
};

SPW_TEST_MAIN(tests)
