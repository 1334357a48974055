/* End-to-end tests of task admission on a worker: jobs several times larger than the stores
 * complete when the tasks sent ahead to a worker would pin more than its store holds (an
 * out-of-core sort, a map over chunks of three quarters of a store), and a task that can never
 * fit beside its inputs fails at once, naming itself, its bytes and the capacity. They use the
 * example sort plugin (worker/examples/sort_plugin.c). Then queueing of long tasks: a task
 * queued behind a running one gets its inputs from other workers fetched while it waits, and
 * one queued on a busy worker is taken back by a worker that goes idle (the test plugin's
 * wait_file holds a task running until the case creates a file). Real daemons on 127.0.0.1. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../unit/test_main.h"
#include "e2e_util.h"

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* The plugin's generator (gen(n, seed)), value by value. */
static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static uint64_t le64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

/* Starts a scheduler and two one-slot workers with stores of `store` (a size argument),
 * allocations waiting `wait` ms, each spilling into its own directory, with the sort plugin. */
static h_cluster *cluster_two(const char *store, const char *wait)
{
    h_cluster *c = h_cluster_start(false, NULL);
    for (int i = 0; i < 2; i++) {
        char dir[512];
        snprintf(dir, sizeof dir, "%s/spill%d", c->dir, i);
        const char *const args[] = {
            "--slots", "1",        "--store-capacity", store, "--alloc-wait", wait, "--spill-dir",
            dir,       "--plugin", SPW_SORT_PLUGIN,    NULL};
        h_worker_start(c, args);
    }
    return c;
}

/* Whether any worker's log says an allocation gave up waiting for room. */
static bool a_worker_gave_up(h_cluster *c)
{
    bool found = false;
    for (int i = 0; i < c->nworkers && !found; i++) {
        FILE *f = fopen(c->workers[i].log, "r");
        char line[1024];
        while (f != NULL && fgets(line, sizeof line, f) != NULL && !found)
            found = strstr(line, "gave up") != NULL;
        if (f != NULL)
            fclose(f);
    }
    return found;
}

enum { SORT_BLOCKS = 16, SORT_BUCKETS = 10, SORT_BLOCK_VALUES = 1u << 20 /* 8 MiB */ };

/* 128 MiB of random values sorted in 16 buckets by two workers with 32 MiB stores: four times
 * what the stores hold together. Every split task of a block pins that block, and each sort
 * task pins its bucket's part of every block and then asks for an output as large: the worker
 * must not take in more tasks than its store can hold, or the running sort's output waits for
 * room held by the inputs of the tasks queued behind it. Each sorted bucket is checked by a
 * task (ascending, in its bucket) and its count, xor and sum against the generated values. */
static void sort_four_times_the_stores_completes(void)
{
    /* The default --alloc-wait: a wait behind a running task ends with it; room that nothing
     * frees is still given up on, and the case fails. */
    h_cluster *c = cluster_two("32M", "30000");
    spillway *cl = e2e_connect(c);

    uint64_t want[SORT_BUCKETS][3];
    memset(want, 0, sizeof want);
    for (uint64_t b = 0; b < SORT_BLOCKS; b++) {
        uint64_t x = 1000 + b;
        for (uint64_t i = 0; i < SORT_BLOCK_VALUES; i++) {
            uint64_t v = splitmix64(&x);
            uint64_t j = (uint64_t)(((unsigned __int128)v * SORT_BUCKETS) >> 64);
            want[j][0]++;
            want[j][1] ^= v;
            want[j][2] += v;
        }
    }

    spillway_graph *g = spillway_graph_new(cl);
    spillway_ref blocks[SORT_BLOCKS], parts[SORT_BUCKETS][SORT_BLOCKS], checks[SORT_BUCKETS];
    for (uint64_t b = 0; b < SORT_BLOCKS; b++) {
        spillway_arg a[2] = {spillway_arg_u64(SORT_BLOCK_VALUES), spillway_arg_u64(1000 + b)};
        assert_int_equal(spillway_task(g, "gen", a, 2, 0, &blocks[b]), 0);
    }
    for (uint64_t b = 0; b < SORT_BLOCKS; b++) {
        for (uint64_t j = 0; j < SORT_BUCKETS; j++) {
            spillway_arg a[3] = {spillway_arg_ref(blocks[b]), spillway_arg_u64(j),
                                 spillway_arg_u64(SORT_BUCKETS)};
            assert_int_equal(spillway_task(g, "split", a, 3, 0, &parts[j][b]), 0);
        }
    }
    for (uint64_t j = 0; j < SORT_BUCKETS; j++) {
        spillway_arg a[SORT_BLOCKS];
        for (uint64_t b = 0; b < SORT_BLOCKS; b++)
            a[b] = spillway_arg_ref(parts[j][b]);
        spillway_ref sorted;
        assert_int_equal(spillway_task(g, "sort", a, SORT_BLOCKS, 0, &sorted), 0);
        spillway_arg ca[3] = {spillway_arg_ref(sorted), spillway_arg_u64(j),
                              spillway_arg_u64(SORT_BUCKETS)};
        assert_int_equal(spillway_task(g, "check", ca, 3, SPILLWAY_KEEP, &checks[j]), 0);
    }
    E2E_SUBMIT(g);

    int rc = spillway_wait(cl, checks, SORT_BUCKETS, 120000);
    if (rc != 0)
        fail_msg("sort: %s: %s", spillway_strerror(rc), spillway_errmsg(cl));
    uint64_t total = 0;
    for (uint64_t j = 0; j < SORT_BUCKETS; j++) {
        void *data;
        size_t len;
        assert_int_equal(spillway_get(cl, checks[j], 10000, &data, &len), 0);
        assert_int_equal(len, 24);
        assert_int_equal(le64(data), want[j][0]);
        assert_int_equal(le64((uint8_t *)data + 8), want[j][1]);
        assert_int_equal(le64((uint8_t *)data + 16), want[j][2]);
        total += le64(data);
        spillway_free(data);
    }
    assert_int_equal(total, (uint64_t)SORT_BLOCKS * SORT_BLOCK_VALUES);
    assert_int_equal(spillway_release_many(cl, checks, SORT_BUCKETS), 0);
    assert_false(a_worker_gave_up(c));
    E2E_STOP(c, cl);
}

enum { MAP_CHUNKS = 6, MAP_CHUNK = 12u << 20 };

/* map_blocks over chunks of three quarters of a 16 MiB store, each task making a stored output
 * (one bucket of its chunk's values): a worker takes the next task's chunk in only once the
 * running one is done with its own, so no fetch or restore of a chunk waits for room that
 * nothing will free until --alloc-wait gives up. A chunk spilled on the other worker is sent
 * from its spilled copy, needing no room there: the two workers, each with the room for a chunk
 * taken by the fetch of the other's, never wait for each other. */
static void map_blocks_of_three_quarters_of_the_store_never_give_up(void)
{
    h_cluster *c = cluster_two("16M", "30000");
    spillway *cl = e2e_connect(c);
    uint64_t *buf = malloc(MAP_CHUNK);
    assert_non_null(buf);
    spillway_ref chunks[MAP_CHUNKS], out[MAP_CHUNKS];
    uint64_t want[MAP_CHUNKS] = {0};
    for (int k = 0; k < MAP_CHUNKS; k++) {
        uint64_t x = 77 + (uint64_t)k;
        for (size_t i = 0; i < MAP_CHUNK / 8; i++) {
            buf[i] = splitmix64(&x);
            want[k] += buf[i] >> 60 == 0; /* bucket 0 of 16 */
        }
        assert_int_equal(spillway_put(cl, buf, MAP_CHUNK, &chunks[k]), 0);
    }
    free(buf);
    spillway_arg shared[2] = {spillway_arg_u64(0), spillway_arg_u64(16)};
    spillway_map_opts mo = {.nblocks = 1};
    for (int k = 0; k < MAP_CHUNKS; k++) {
        spillway_ref *res;
        size_t n;
        assert_int_equal(spillway_map_blocks(cl, "split", chunks[k], shared, 2, &mo, &res, &n), 0);
        assert_int_equal(n, 1);
        out[k] = res[0];
        spillway_free(res);
    }
    int rc = spillway_wait(cl, out, MAP_CHUNKS, 60000);
    if (rc != 0)
        fail_msg("map: %s: %s", spillway_strerror(rc), spillway_errmsg(cl));
    for (int k = 0; k < MAP_CHUNKS; k++) {
        void *data;
        size_t len;
        assert_int_equal(spillway_get(cl, out[k], 10000, &data, &len), 0);
        assert_int_equal(len, want[k] * 8);
        spillway_free(data);
    }
    assert_false(a_worker_gave_up(c));
    assert_int_equal(spillway_release_many(cl, out, MAP_CHUNKS), 0);
    assert_int_equal(spillway_release_many(cl, chunks, MAP_CHUNKS), 0);
    E2E_STOP(c, cl);
}

/* Waits for r, a task that must fail at once with SPW_ETOOBIG and a text naming it and the
 * store's capacity (16 MiB). */
static void fails_at_once(spillway *cl, spillway_ref r, uint64_t t0)
{
    int rc = spillway_wait(cl, &r, 1, 60000);
    uint64_t took = now_ms() - t0;
    const char *msg = spillway_errmsg(cl);
    char hex[33];
    spillway_ref_hex(r, hex);
    if (rc != SPW_ETOOBIG || strstr(msg, hex) == NULL || strstr(msg, "16777216") == NULL)
        fail_msg("wanted SPW_ETOOBIG naming task=%s and the capacity, got %s after %llu ms: %s",
                 hex, spillway_strerror(rc), (unsigned long long)took, msg);
    if (took >= 5000) /* --alloc-wait is 20 s */
        fail_msg("failed after %llu ms, not at once: %s", (unsigned long long)took, msg);
}

/* A task whose output cannot fit beside its pinned input (10 MiB + 10 MiB in a 16 MiB store),
 * and one whose inputs alone cannot (two of 10 MiB), fail at once rather than after
 * --alloc-wait, each naming the task, its bytes and the capacity. */
static void a_task_that_cannot_fit_fails_at_once(void)
{
    h_cluster *c = h_cluster_start(false, NULL);
    char dir[512];
    snprintf(dir, sizeof dir, "%s/spill", c->dir);
    const char *const args[] = {
        "--slots", "1", "--store-capacity", "16M", "--alloc-wait", "20000", "--spill-dir",
        dir,       NULL};
    h_worker_start(c, args);
    spillway *cl = e2e_connect(c);
    uint8_t *buf = calloc(1, 10u << 20);
    assert_non_null(buf);
    spillway_ref a, b;
    assert_int_equal(spillway_put(cl, buf, 10u << 20, &a), 0);
    buf[0] = 1;
    assert_int_equal(spillway_put(cl, buf, 10u << 20, &b), 0);
    free(buf);

    spillway_graph *g = spillway_graph_new(cl);
    spillway_arg one = spillway_arg_ref(a);
    spillway_ref echo;
    assert_int_equal(spillway_task(g, "echo", &one, 1, SPILLWAY_KEEP, &echo), 0);
    uint64_t t0 = now_ms();
    E2E_SUBMIT(g);
    fails_at_once(cl, echo, t0);
    assert_true(strstr(spillway_errmsg(cl), "20971520") != NULL); /* inputs + output */

    g = spillway_graph_new(cl);
    spillway_arg two[2] = {spillway_arg_ref(a), spillway_arg_ref(b)};
    spillway_ref cat;
    assert_int_equal(spillway_task(g, "concat", two, 2, SPILLWAY_KEEP, &cat), 0);
    t0 = now_ms();
    E2E_SUBMIT(g);
    fails_at_once(cl, cat, t0);
    assert_true(strstr(spillway_errmsg(cl), "20971520") != NULL); /* its inputs */

    spillway_release(cl, echo);
    spillway_release(cl, cat);
    spillway_release(cl, a);
    spillway_release(cl, b);
    assert_false(a_worker_gave_up(c));
    E2E_STOP(c, cl);
}

/* A file under the cluster's directory, made (empty) when make is true. */
static void case_file(h_cluster *c, const char *name, bool make, char *path, size_t len)
{
    snprintf(path, len, "%s/%s", c->dir, name);
    if (make) {
        FILE *f = fopen(path, "w");
        assert_non_null(f);
        fclose(f);
    }
}

static bool file_exists(void *arg)
{
    return access(arg, F_OK) == 0;
}

/* Submits wait_file(go, 120 s, mark, extra...) on the worker named `on` (NULL: any), kept. */
static spillway_ref submit_wait(spillway *cl, const char *on, const char *go, const char *mark,
                                const spillway_arg *extra, uint32_t nextra)
{
    spillway_graph *g = spillway_graph_new(cl);
    if (on != NULL)
        assert_int_equal(spillway_graph_place(g, on), 0);
    spillway_arg a[4] = {spillway_arg_bytes(go, strlen(go)), spillway_arg_u64(120000),
                         spillway_arg_bytes(mark, strlen(mark))};
    for (uint32_t i = 0; i < nextra; i++)
        a[3 + i] = extra[i];
    spillway_ref r;
    assert_int_equal(spillway_task(g, "wait_file", a, 3 + nextra, SPILLWAY_KEEP, &r), 0);
    E2E_SUBMIT(g);
    return r;
}

typedef struct locs_arg {
    h_cluster *c;
    spillway_ref r;
    size_t want;
} locs_arg;

static bool has_locations(void *arg)
{
    locs_arg *a = arg;
    return e2e_copies(a->c, a->r, NULL) == a->want;
}

/* Two one-slot workers with the test plugin, w0 with a store of 48 MiB (45 admitted) and a
 * spill directory. On w0 a task holding a 12 MiB object runs until the case lets it go; a second
 * task there, over a 12 MiB object stored on w1, does not fit beside it with the output it is
 * guessed to make (12 MiB each), so it waits for admission; its input does fit, and is fetched
 * to w0 while the first still runs: the object has two copies before the first task ends. */
static void a_queued_task_fetches_its_inputs_while_it_waits(void)
{
    h_cluster *c = h_cluster_start(false, NULL);
    char spill[512];
    snprintf(spill, sizeof spill, "%s/spill0", c->dir);
    const char *const a0[] = {"--slots", "1",           "--store-capacity", "48M",
                              "--name",  "w0",          "--spill-dir",      spill,
                              "--plugin", SPW_TEST_PLUGIN, NULL};
    const char *const a1[] = {"--slots", "1",  "--store-capacity", "48M", "--name", "w1",
                              "--plugin", SPW_TEST_PLUGIN, NULL};
    h_worker_start(c, a0);
    h_worker_start(c, a1);
    spillway *cl = e2e_connect(c);
    spillway_ref held = e2e_fill_on(cl, "w0", 12u << 20, NULL),
                 far = e2e_fill_on(cl, "w1", 12u << 20, NULL);

    char go[512], mark[512], go2[512], mark2[512];
    case_file(c, "go", false, go, sizeof go);
    case_file(c, "started", false, mark, sizeof mark);
    case_file(c, "go2", true, go2, sizeof go2);
    case_file(c, "started2", false, mark2, sizeof mark2);
    spillway_arg ha = spillway_arg_ref(held), fa = spillway_arg_ref(far);
    spillway_ref first = submit_wait(cl, "w0", go, mark, &ha, 1);
    assert_true(h_eventually(file_exists, mark, 30000));
    spillway_ref second = submit_wait(cl, "w0", go2, mark2, &fa, 1);
    locs_arg la = {c, far, 2};
    assert_true(h_eventually(has_locations, &la, 30000));
    assert_true(access(mark2, F_OK) != 0); /* the second has not started */

    case_file(c, "go", true, go, sizeof go);
    spillway_ref both[2] = {first, second};
    assert_int_equal(spillway_wait(cl, both, 2, 60000), 0);
    assert_int_equal(spillway_release_many(cl, both, 2), 0);
    spillway_release(cl, held);
    spillway_release(cl, far);
    E2E_STOP(c, cl);
}

static uint64_t assigned_on(h_cluster *c, const char *name)
{
    return e2e_worker_figure(c, name, false, "assigned");
}

static bool three_assigned(void *arg)
{
    return assigned_on(arg, "w0") + assigned_on(arg, "w1") == 3;
}

/* Two one-slot workers each run a task held until the case lets it go (placed by name); a
 * third task of a function not run yet (queued two deep per slot) waits behind one of them.
 * The case lets the other worker's task go: that worker goes idle with nothing ready, takes the
 * third task back from the busy one, and runs it while the busy one still runs its own. */
static void a_task_queued_on_a_busy_worker_runs_on_one_gone_idle(void)
{
    const char *const sargs[] = {"--log-level", "info", NULL};
    h_cluster *c = h_cluster_start(false, sargs);
    for (int i = 0; i < 2; i++) {
        char name[8];
        snprintf(name, sizeof name, "w%d", i);
        const char *const a[] = {"--slots", "1",  "--store-capacity", "16M", "--name", name,
                                 "--plugin", SPW_TEST_PLUGIN, NULL};
        h_worker_start(c, a);
    }
    spillway *cl = e2e_connect(c);
    char go[2][512], mark[2][512], go3[512], mark3[512];
    spillway_ref held[2];
    for (int i = 0; i < 2; i++) {
        char n[16];
        snprintf(n, sizeof n, "go%d", i);
        case_file(c, n, false, go[i], sizeof go[i]);
        snprintf(n, sizeof n, "started%d", i);
        case_file(c, n, false, mark[i], sizeof mark[i]);
        held[i] = submit_wait(cl, i == 0 ? "w0" : "w1", go[i], mark[i], NULL, 0);
        assert_true(h_eventually(file_exists, mark[i], 30000));
    }
    case_file(c, "go3", true, go3, sizeof go3);
    case_file(c, "started3", false, mark3, sizeof mark3);
    spillway_ref third = submit_wait(cl, NULL, go3, mark3, NULL, 0);
    assert_true(h_eventually(three_assigned, c, 30000));
    int busy = assigned_on(c, "w0") == 2 ? 0 : 1;
    assert_int_equal(assigned_on(c, busy == 0 ? "w0" : "w1"), 2);

    case_file(c, busy == 0 ? "go1" : "go0", true, go[1 - busy], sizeof go[1 - busy]);
    assert_int_equal(spillway_wait(cl, &third, 1, 60000), 0);
    assert_true(access(go[busy], F_OK) != 0); /* the busy one still runs */
    assert_true(h_log_count(&c->sched, "taken back") >= 1);

    case_file(c, busy == 0 ? "go0" : "go1", true, go[busy], sizeof go[busy]);
    assert_int_equal(spillway_wait(cl, held, 2, 60000), 0);
    assert_int_equal(spillway_release_many(cl, held, 2), 0);
    spillway_release(cl, third);
    E2E_STOP(c, cl);
}

static bool pins_four_mib(void *arg)
{
    return e2e_worker_figure(arg, "w0", true, "pinned") >= (4u << 20);
}

/* A task runs with a small expected output (its function made 1 MiB before) and asks for 13 MiB
 * only once a task queued behind it was admitted and took room for its own output (4.5 MiB of
 * the 16 MiB store, pinned). The room set aside for the queued task is given back to the one
 * running, which gets its output at once rather than waiting for room only its own end would
 * free (and giving up after --alloc-wait); then the queued one runs and takes its room again. */
static void room_set_aside_for_a_queued_task_goes_to_the_running_one(void)
{
    h_cluster *c = h_cluster_start(false, NULL);
    char spill[512];
    snprintf(spill, sizeof spill, "%s/spill0", c->dir);
    const char *const a0[] = {"--slots", "1",      "--store-capacity", "16M", "--name",
                              "w0",      "--spill-dir", spill,         "--alloc-wait", "2000",
                              "--plugin", SPW_TEST_PLUGIN, "--log-level", "info", NULL};
    h_worker_start(c, a0);
    spillway *cl = e2e_connect(c);
    char go[512], mark[512], mark0[512];
    case_file(c, "go", false, go, sizeof go);
    case_file(c, "started", false, mark, sizeof mark);
    case_file(c, "started0", false, mark0, sizeof mark0);

    /* What each function makes, learned by the worker: 1 MiB and 4 MiB. */
    spillway_graph *g = spillway_graph_new(cl);
    spillway_arg small[4] = {spillway_arg_bytes(mark0, strlen(mark0)), spillway_arg_u64(1000),
                             spillway_arg_bytes(mark0, strlen(mark0)),
                             spillway_arg_u64(1u << 20)};
    spillway_arg four[2] = {spillway_arg_u64(4u << 20), spillway_arg_u64(1)};
    spillway_ref learn[2];
    assert_int_equal(spillway_task(g, "wait_make", small, 4, SPILLWAY_KEEP, &learn[0]), 0);
    assert_int_equal(spillway_task(g, "random", four, 2, SPILLWAY_KEEP, &learn[1]), 0);
    E2E_SUBMIT(g);
    assert_int_equal(spillway_wait(cl, learn, 2, 60000), 0);
    assert_int_equal(spillway_release_many(cl, learn, 2), 0);

    g = spillway_graph_new(cl);
    spillway_arg big[4] = {spillway_arg_bytes(go, strlen(go)), spillway_arg_u64(120000),
                           spillway_arg_bytes(mark, strlen(mark)), spillway_arg_u64(13u << 20)};
    spillway_ref run, queued;
    assert_int_equal(spillway_task(g, "wait_make", big, 4, SPILLWAY_KEEP, &run), 0);
    E2E_SUBMIT(g);
    assert_true(h_eventually(file_exists, mark, 30000));
    g = spillway_graph_new(cl);
    four[1] = spillway_arg_u64(2);
    assert_int_equal(spillway_task(g, "random", four, 2, SPILLWAY_KEEP, &queued), 0);
    E2E_SUBMIT(g);
    assert_true(h_eventually(pins_four_mib, c, 30000)); /* the queued task's room is taken */

    case_file(c, "go", true, go, sizeof go);
    spillway_ref both[2] = {run, queued};
    assert_int_equal(spillway_wait(cl, both, 2, 60000), 0);
    void *data;
    size_t len;
    assert_int_equal(spillway_get(cl, run, 60000, &data, &len), 0);
    assert_int_equal(len, 13u << 20);
    for (size_t i = 0; i < len; i += 4093)
        assert_int_equal(((uint8_t *)data)[i], (uint8_t)(i % 251));
    spillway_free(data);
    assert_true(h_log_count(&c->workers[0], "gave back") >= 1);
    assert_false(a_worker_gave_up(c));
    assert_int_equal(spillway_release_many(cl, both, 2), 0);
    E2E_STOP(c, cl);
}

static const struct CMUnitTest tests[] = {
    H_CASE(sort_four_times_the_stores_completes),
    H_CASE(map_blocks_of_three_quarters_of_the_store_never_give_up),
    H_CASE(a_task_that_cannot_fit_fails_at_once),
    H_CASE(a_queued_task_fetches_its_inputs_while_it_waits),
    H_CASE(a_task_queued_on_a_busy_worker_runs_on_one_gone_idle),
    H_CASE(room_set_aside_for_a_queued_task_goes_to_the_running_one),
};

SPW_TEST_MAIN(tests)
