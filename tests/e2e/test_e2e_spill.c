/* End-to-end tests of spilling: jobs much larger than the stores, back-pressure, pause, a full
 * spill map, a worker killed with data spilled, and a spilled object read by a peer from its
 * spilled copy. Real daemons on 127.0.0.1. */
#include <dirent.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <xxhash.h>

#include "../unit/test_main.h"
#include "e2e_util.h"
#include "spillway/datagen.h"

/* What the built-in generators make, to know what every byte must be. */
static void gen_random(uint8_t *out, uint64_t n, uint64_t seed)
{
    spw_gen_random(out, n, seed);
}

static void gen_walk(uint8_t *out, uint64_t count, uint64_t seed)
{
    spw_gen_walk_f64(out, count, seed);
}

static uint64_t worker_figure(h_cluster *c, int w, const char *field)
{
    json_t *st = e2e_ctl_json(c, "status");
    uint64_t v = 0;
    json_t *wj = json_array_get(json_object_get(st, "workers"), (size_t)w);
    v = (uint64_t)json_integer_value(json_object_get(json_object_get(wj, "memory"), field));
    json_decref(st);
    return v;
}

static uint64_t all_workers_figure(h_cluster *c, const char *field)
{
    uint64_t v = 0;
    for (int i = 0; i < c->nworkers; i++)
        v += worker_figure(c, i, field);
    return v;
}

/* ------------------------------------------------------------ memory probe */

typedef struct probe {
    h_cluster *c;
    atomic_int stop; /* set by the test, read by the sampler thread */
    uint64_t peak[H_MAX_WORKERS]; /* bytes: private memory of the worker and its executors plus
                                     the pages its arena really holds */
    pthread_t th;
} probe;

static void *probe_run(void *arg)
{
    probe *p = arg;
    while (!atomic_load(&p->stop)) {
        for (int i = 0; i < p->c->nworkers; i++) {
            uint64_t m = e2e_node_memory(p->c->workers[i].pid);
            if (m > p->peak[i])
                p->peak[i] = m;
        }
        struct timespec ts = {0, 5 * 1000000}; /* a sampling period, not synchronisation */
        nanosleep(&ts, NULL);
    }
    return NULL;
}

/* ------------------------------------------------------------------ cases */

#define OBJ (4u << 20)

static bool entries_gone(void *arg)
{
    return all_workers_figure(arg, "spill_entries") == 0;
}

/* A job whose outputs are ten times the stores' capacity, all kept referenced, completes; every
 * byte checks; the stores spill; each worker stays within its capacity plus a fixed margin. */
static void job_ten_times_capacity_completes_with_flat_memory(void)
{
    h_cluster *c = h_cluster_start(false, NULL);
    const char *const args[] = {"--slots", "1", "--store-capacity", "32M", "--spill-dir", "/var/tmp", NULL};
    h_workers_start(c, 2, args);
    probe p = {.c = c};
    pthread_create(&p.th, NULL, probe_run, &p);
    spillway *cl = e2e_connect(c);
    enum { N = 160 }; /* 640 MiB: 10x the 64 MiB of store */
    spillway_ref outs[N], sums[N];
    spillway_graph *g = spillway_graph_new(cl);
    for (int i = 0; i < N; i++) {
        spillway_arg a[2];
        if (i % 2 == 0) {
            a[0] = spillway_arg_u64(OBJ / 8);
            a[1] = spillway_arg_u64((uint64_t)i);
            assert_int_equal(spillway_task(g, "walk_f64", a, 2, SPILLWAY_KEEP, &outs[i]), 0);
        } else {
            a[0] = spillway_arg_u64(OBJ);
            a[1] = spillway_arg_u64((uint64_t)i);
            assert_int_equal(spillway_task(g, "random", a, 2, SPILLWAY_KEEP, &outs[i]), 0);
        }
    }
    E2E_SUBMIT(g);
    assert_int_equal(spillway_wait(cl, outs, N, 300000), 0);
    /* Read everything back on the workers (restoring what was spilled)... */
    g = spillway_graph_new(cl);
    for (int i = 0; i < N; i++) {
        spillway_arg a = spillway_arg_ref(outs[i]);
        assert_int_equal(spillway_task(g, "checksum", &a, 1, SPILLWAY_KEEP, &sums[i]), 0);
    }
    E2E_SUBMIT(g);
    uint8_t *want = malloc(OBJ);
    for (int i = 0; i < N; i++) {
        if (i % 2 == 0)
            gen_walk(want, OBJ / 8, (uint64_t)i);
        else
            gen_random(want, OBJ, (uint64_t)i);
        if (e2e_get_u64(cl, sums[i]) != XXH3_64bits(want, OBJ))
            fail_msg("output %d does not check", i);
        /* ...and some into this process, byte for byte. */
        if (i % 16 == 0 || i % 16 == 1) {
            void *data;
            size_t len;
            assert_int_equal(spillway_get(cl, outs[i], 60000, &data, &len), 0);
            assert_int_equal(len, OBJ);
            assert_memory_equal(data, want, OBJ);
            spillway_free(data);
        }
    }
    free(want);
    atomic_store(&p.stop, 1);
    pthread_join(p.th, NULL);
    assert_true(all_workers_figure(c, "spill_total_bytes") > 0);
    assert_true(all_workers_figure(c, "restore_total_bytes") > 0);
    for (int i = 0; i < c->nworkers; i++) {
        fprintf(stderr, "worker %d peak memory %.1f MiB (capacity 32 MiB)\n", i,
                (double)p.peak[i] / (1 << 20));
#ifndef SPW_SANITIZE /* ASan's shadow and quarantine are not ours to bound */
        /* Flat: the store and, of the 128 MiB the node budget gives the worker's own memory,
         * at most half. Busy spill lanes each hold chunk-sized buffers (zstd's output, LMDB's
         * pages of the record) in their threads' heaps, trimmed when the lanes go idle, so
         * the peak rises with how long they stay busy (a loaded machine) but not with data. */
        if (p.peak[i] > (32u << 20) + (64u << 20))
            fail_msg("worker %d peaked at %llu bytes", i, (unsigned long long)p.peak[i]);
#endif
    }
    /* Releasing everything deletes the spilled copies too. */
    assert_int_equal(spillway_release_many(cl, outs, N), 0);
    assert_int_equal(spillway_release_many(cl, sums, N), 0);
    assert_true(e2e_cluster_idle(c, 30000));
    assert_true(h_eventually(entries_gone, c, 30000));
    E2E_STOP(c, cl);
}

static void larger_than_any_store_fails_clearly(void)
{
    h_cluster *c = h_cluster_start(false, NULL);
    const char *const args[] = {"--slots", "1", "--store-capacity", "16M", NULL};
    h_worker_start(c, args);
    spillway *cl = e2e_connect(c);
    size_t n = (16u << 20) + 1;
    uint8_t *big = calloc(1, n);
    spillway_ref r;
    /* A put that large is chunked (test_e2e_bigobj); a task's output cannot be. */
    assert_int_equal(spillway_put(cl, big, n, &r), 0);
    assert_int_equal(spillway_release(cl, r), 0);
    free(big);
    spillway_graph *g = spillway_graph_new(cl);
    spillway_arg a = spillway_arg_u64(n);
    assert_int_equal(spillway_task(g, "fill", &a, 1, SPILLWAY_KEEP, &r), 0);
    E2E_SUBMIT(g);
    void *out;
    size_t len;
    assert_int_equal(spillway_get(cl, r, 60000, &out, &len), SPW_ETOOBIG);
    assert_non_null(strstr(spillway_errmsg(cl), "larger than the store"));
    assert_int_equal(spillway_release(cl, r), 0);
    E2E_STOP(c, cl);
}

static bool all_pinned(void *arg)
{
    return worker_figure(arg, 0, "pinned") >= 12u << 20;
}

static bool none_pinned(void *arg)
{
    return worker_figure(arg, 0, "pinned") == 0;
}

/* Views pin objects; a store full of pinned objects makes an allocation wait, then fail with a
 * clear error, and the worker keeps serving. */
static void pinned_memory_gives_back_pressure_then_a_clear_error(void)
{
    h_cluster *c = h_cluster_start(false, NULL);
    const char *const args[] = {"--slots", "1", "--store-capacity", "16M", "--alloc-wait", "300",
                                "--pause-threshold", "1.0", "--spill-threshold", "1.0", NULL};
    h_worker_start(c, args);
    spillway *cl = e2e_connect(c);
    uint8_t *data = malloc(4u << 20);
    memset(data, 9, 4u << 20);
    spillway_ref objs[3];
    spillway_view views[3];
    for (int i = 0; i < 3; i++) {
        assert_int_equal(spillway_put(cl, data, 4u << 20, &objs[i]), 0);
        assert_int_equal(spillway_get_view(cl, objs[i], 10000, &views[i]), 0);
        assert_int_equal(views[i].zero_copy, 1);
    }
    /* 12 MiB pinned; an 8 MiB output cannot fit and nothing can be spilled. */
    spillway_graph *g = spillway_graph_new(cl);
    spillway_ref big;
    spillway_arg a = spillway_arg_u64(8u << 20);
    assert_int_equal(spillway_task(g, "fill", &a, 1, SPILLWAY_KEEP, &big), 0);
    E2E_SUBMIT(g);
    void *out;
    size_t len;
    assert_int_equal(spillway_get(cl, big, 60000, &out, &len), SPW_EBACKPRESSURE);
    assert_non_null(strstr(spillway_errmsg(cl), "pinned"));
    /* The worker's reports arrive in order: once they show the pins, a later report of none
     * means the releases below reached it. Without awaiting that, the next allocation could
     * reach the worker before the unpins on a loaded machine and time out like the first. */
    assert_true(h_eventually(all_pinned, c, 20000));
    for (int i = 0; i < 3; i++)
        spillway_view_release(cl, &views[i]);
    assert_true(h_eventually(none_pinned, c, 20000));
    /* Unpinned, they can move to disk: the same allocation now succeeds. */
    g = spillway_graph_new(cl);
    spillway_ref ok;
    assert_int_equal(spillway_task(g, "fill", &a, 1, SPILLWAY_KEEP, &ok), 0);
    E2E_SUBMIT(g);
    assert_int_equal(spillway_get(cl, ok, 60000, &out, &len), 0);
    assert_int_equal(len, 8u << 20);
    spillway_free(out);
    assert_int_equal(spillway_get(cl, objs[2], 60000, &out, &len), 0);
    assert_memory_equal(out, data, 4u << 20);
    spillway_free(out);
    spillway_ref all[] = {objs[0], objs[1], objs[2], big, ok};
    assert_int_equal(spillway_release_many(cl, all, 5), 0);
    free(data);
    E2E_STOP(c, cl);
}

static bool worker_paused(void *arg)
{
    json_t *st = e2e_ctl_json(arg, "status");
    const char *state = json_string_value(
        json_object_get(json_array_get(json_object_get(st, "workers"), 0), "state"));
    bool paused = state != NULL && strcmp(state, "paused") == 0;
    json_decref(st);
    return paused;
}

static bool task_ready_not_assigned(void *arg)
{
    json_t *st = e2e_ctl_json(arg, "status");
    json_t *tasks = json_object_get(st, "tasks");
    bool ok = json_integer_value(json_object_get(tasks, "ready")) == 1 &&
              json_integer_value(json_object_get(tasks, "assigned")) == 0;
    json_decref(st);
    return ok;
}

/* Above the pause threshold a worker gets no new tasks until it drops below. */
static void paused_worker_gets_no_tasks_until_memory_drops(void)
{
    h_cluster *c = h_cluster_start(false, NULL);
    const char *const args[] = {"--slots", "1", "--store-capacity", "16M", NULL};
    h_worker_start(c, args);
    spillway *cl = e2e_connect(c);
    uint8_t *data = malloc(5u << 20);
    memset(data, 3, 5u << 20);
    spillway_ref objs[3];
    spillway_view views[3];
    for (int i = 0; i < 3; i++) {
        assert_int_equal(spillway_put(cl, data, 5u << 20, &objs[i]), 0);
        assert_int_equal(spillway_get_view(cl, objs[i], 10000, &views[i]), 0);
    }
    assert_true(h_eventually(worker_paused, c, 10000)); /* 15 of 16 MiB pinned */
    spillway_ref r = e2e_submit_u64(cl, "inc", 41);
    /* The task waits, ready but not sent to the paused worker. */
    assert_true(h_eventually(task_ready_not_assigned, c, 5000));
    assert_int_equal(spillway_wait(cl, &r, 1, 300), SPW_ETIMEDOUT);
    for (int i = 0; i < 3; i++)
        spillway_view_release(cl, &views[i]);
    /* Unpinned objects spill, the worker resumes, the task runs. */
    assert_int_equal(e2e_get_u64(cl, r), 42);
    assert_false(worker_paused(c));
    spillway_ref all[] = {objs[0], objs[1], objs[2], r};
    assert_int_equal(spillway_release_many(cl, all, 4), 0);
    free(data);
    E2E_STOP(c, cl);
}

/* A spill map too small to grow: spills fail cleanly, what is in memory stays readable, and
 * the allocation that cannot be served says the spill storage is full. */
static void full_spill_map_fails_cleanly_nothing_lost(void)
{
    h_cluster *c = h_cluster_start(false, NULL);
    const char *const args[] = {"--slots", "1", "--store-capacity", "16M", "--alloc-wait", "500",
                                "--spill-map-size", "1M", "--spill-map-max", "4M", NULL};
    h_worker_start(c, args);
    spillway *cl = e2e_connect(c);
    uint8_t *data = malloc(4u << 20);
    spillway_ref objs[3];
    for (int i = 0; i < 3; i++) {
        gen_random(data, 4u << 20, (uint64_t)i);
        assert_int_equal(spillway_put(cl, data, 4u << 20, &objs[i]), 0);
    }
    gen_random(data, 4u << 20, 99);
    spillway_ref more;
    int rc = spillway_put(cl, data, 4u << 20, &more);
    if (rc == 0) /* it may fit while the failed spills are sorted out; a fifth cannot */
        rc = spillway_put(cl, data, 4u << 20, &more);
    assert_int_equal(rc, SPW_ESPILLFULL);
    assert_non_null(strstr(spillway_errmsg(cl), "spill storage full"));
    for (int i = 0; i < 3; i++) {
        void *out;
        size_t len;
        gen_random(data, 4u << 20, (uint64_t)i);
        assert_int_equal(spillway_get(cl, objs[i], 10000, &out, &len), 0);
        assert_memory_equal(out, data, 4u << 20);
        spillway_free(out);
    }
    assert_int_equal(worker_figure(c, 0, "spill_entries"), 0);
    assert_int_equal(spillway_release_many(cl, objs, 3), 0);
    free(data);
    E2E_STOP(c, cl);
}

static bool spilled_something(void *arg)
{
    return worker_figure(arg, 0, "spilled_bytes") > 0;
}

static bool no_worker_left(void *arg)
{
    json_t *st = e2e_ctl_json(arg, "status");
    bool none = json_array_size(json_object_get(st, "workers")) == 0;
    json_decref(st);
    return none;
}

/* A worker killed with data spilled leaves no file behind; a new one on the same directory
 * starts clean (spill data belongs to the process that wrote it: see README). */
static void killed_worker_leaves_no_spill_files(void)
{
    h_cluster *c = h_cluster_start(false, NULL);
    char dir[512];
    snprintf(dir, sizeof dir, "%s/spill", c->dir);
    const char *const args[] = {"--slots", "1", "--store-capacity", "16M", "--spill-dir", dir, NULL};
    h_worker_start(c, args);
    spillway *cl = e2e_connect(c);
    uint8_t *data = malloc(4u << 20);
    spillway_ref objs[8];
    for (int i = 0; i < 8; i++) {
        gen_walk(data, (4u << 20) / 8, (uint64_t)i);
        assert_int_equal(spillway_put(cl, data, 4u << 20, &objs[i]), 0);
    }
    assert_true(h_eventually(spilled_something, c, 20000));
    h_worker_kill(c, 0, SIGKILL);
    assert_int_equal(e2e_dir_entries(dir), 0);
    /* A get before the scheduler has seen the connection drop would still be sent to the dead
     * worker (a connection error, not the loss); await the scheduler counting no worker. */
    assert_true(h_eventually(no_worker_left, c, 20000));
    /* The objects went with the worker: the scheduler says so, not a hang. */
    void *out;
    size_t len;
    assert_int_equal(spillway_get(cl, objs[0], 10000, &out, &len), SPW_EOBJLOST);
    spillway_release_many(cl, objs, 8);
    h_worker_start(c, args);
    for (int i = 0; i < 8; i++) {
        gen_walk(data, (4u << 20) / 8, (uint64_t)i + 100);
        assert_int_equal(spillway_put(cl, data, 4u << 20, &objs[i]), 0);
    }
    for (int i = 0; i < 8; i++) {
        gen_walk(data, (4u << 20) / 8, (uint64_t)i + 100);
        assert_int_equal(spillway_get(cl, objs[i], 10000, &out, &len), 0);
        assert_memory_equal(out, data, 4u << 20);
        spillway_free(out);
    }
    assert_int_equal(spillway_release_many(cl, objs, 8), 0);
    free(data);
    E2E_STOP(c, cl);
    assert_int_equal(e2e_dir_entries(dir), 0);
}

typedef struct spilled_arg {
    h_cluster *c;
    spillway_ref r;
} spilled_arg;

/* Whether the object's one copy is spilled. */
static bool one_spilled(void *arg)
{
    spilled_arg *a = arg;
    return e2e_copies(a->c, a->r, "spilled") == 1 && e2e_copies(a->c, a->r, NULL) == 1;
}

/* A scheduler, w0 (16 MiB store, a spill directory, allocations giving up after 2 s) and w1 (a
 * store of `store1`, spilling where workers do by default). */
static h_cluster *spilling_and_reading(const char *store1)
{
    h_cluster *c = h_cluster_start(false, NULL);
    char dir[512];
    snprintf(dir, sizeof dir, "%s/spill", c->dir);
    const char *const a0[] = {"--slots", "1",           "--store-capacity", "16M", "--name",
                              "w0",      "--spill-dir", dir,                "--alloc-wait", "2000",
                              NULL};
    const char *const a1[] = {"--slots", "1", "--store-capacity", store1, "--name", "w1", NULL};
    h_worker_start(c, a0);
    h_worker_start(c, a1);
    return c;
}

/* A task on w1 reads an object of `size` bytes that w0 has only on disk: w0 sends it from its
 * spilled copy without restoring it (its restore count stays, its copy stays spilled), and the
 * task sees every byte. With `pinned`, w0's store is pinned full by views meanwhile, so that a
 * restore could not get room before --alloc-wait gave up. */
static void peer_reads_spilled(uint64_t size, bool pinned)
{
    h_cluster *c = spilling_and_reading("16M");
    spillway *cl = e2e_connect(c);
    spillway_ref x = e2e_fill_on(cl, "w0", size, "spilled"), more[4];
    for (int i = 0; i < 4; i++)
        more[i] = e2e_fill_on(cl, "w0", 4u << 20, "more"); /* x, the oldest, is spilled for them */
    spilled_arg sa = {c, x};
    assert_true(h_eventually(one_spilled, &sa, 30000));
    spillway_view views[3];
    for (int i = 0; pinned && i < 3; i++) {
        assert_int_equal(spillway_get_view(cl, more[i], 10000, &views[i]), 0);
        assert_int_equal(views[i].zero_copy, 1);
    }
    uint64_t restores = e2e_worker_figure(c, "w0", true, "restore_count");

    spillway_graph *g = spillway_graph_new(cl);
    assert_int_equal(spillway_graph_place(g, "w1"), 0);
    spillway_arg xa = spillway_arg_ref(x);
    spillway_ref sum;
    assert_int_equal(spillway_task(g, "checksum", &xa, 1, SPILLWAY_KEEP, &sum), 0);
    E2E_SUBMIT(g);
    uint8_t *want = malloc(size);
    for (uint64_t i = 0; i < size; i++)
        want[i] = (uint8_t)"spilled"[i % 7];
    assert_int_equal(e2e_get_u64(cl, sum), XXH3_64bits(want, size));
    free(want);
    assert_int_equal(e2e_worker_figure(c, "w0", true, "restore_count"), restores);
    /* w0's copy is still spilled. w1 keeps the copy it fetched, in memory or spilled in turn:
     * the room it took for checksum's output, guessed as large as the input the first time,
     * may have taken its 16 MiB store past its threshold while the copy came in. */
    assert_int_equal(e2e_copies_on(c, x, "w0", "spilled"), 1);

    for (int i = 0; pinned && i < 3; i++)
        spillway_view_release(cl, &views[i]);
    assert_int_equal(spillway_release(cl, sum), 0);
    assert_int_equal(spillway_release(cl, x), 0);
    assert_int_equal(spillway_release_many(cl, more, 4), 0);
    E2E_STOP(c, cl);
}

static void a_peer_reads_a_spilled_object_without_a_restore(void)
{
    peer_reads_spilled(2u << 20, false);
}

/* 12 MiB, read in pieces, from a store whose other 12 MiB are pinned: two workers fetching from
 * each other into full stores would otherwise each wait for the room the other holds. */
static void a_peer_reads_a_large_spilled_object_from_a_pinned_full_store(void)
{
    peer_reads_spilled(12u << 20, true);
}

/* Five 4 MiB objects that w0 has only on disk, fetched at once by one task on w1, are more than
 * w0's buffers for reads from spilled copies: the read past them waits for a buffer to be freed,
 * with no restore (w0's store is pinned full by views, so a restore would give up). */
static void peer_reads_past_the_buffers_wait_for_one(void)
{
    h_cluster *c = spilling_and_reading("64M");
    spillway *cl = e2e_connect(c);
    enum { N = 5 };
    const uint64_t size = 4u << 20;
    spillway_ref x[N], more[3];
    for (int i = 0; i < N; i++)
        x[i] = e2e_fill_on(cl, "w0", size, "spilled");
    for (int i = 0; i < 3; i++)
        more[i] = e2e_fill_on(cl, "w0", 5u << 20, "more");
    for (int i = 0; i < N; i++) {
        spilled_arg sa = {c, x[i]};
        assert_true(h_eventually(one_spilled, &sa, 30000));
    }
    spillway_view views[3];
    for (int i = 0; i < 3; i++) {
        assert_int_equal(spillway_get_view(cl, more[i], 10000, &views[i]), 0);
        assert_int_equal(views[i].zero_copy, 1);
    }
    uint64_t restores = e2e_worker_figure(c, "w0", true, "restore_count");

    spillway_graph *g = spillway_graph_new(cl);
    assert_int_equal(spillway_graph_place(g, "w1"), 0);
    spillway_arg xa[N];
    for (int i = 0; i < N; i++)
        xa[i] = spillway_arg_ref(x[i]);
    spillway_ref all, sum;
    assert_int_equal(spillway_task(g, "concat", xa, N, 0, &all), 0);
    spillway_arg aa = spillway_arg_ref(all);
    assert_int_equal(spillway_task(g, "checksum", &aa, 1, SPILLWAY_KEEP, &sum), 0);
    E2E_SUBMIT(g);
    uint8_t *want = malloc(N * size);
    for (uint64_t i = 0; i < N * size; i++)
        want[i] = (uint8_t)"spilled"[(i % size) % 7];
    assert_int_equal(e2e_get_u64(cl, sum), XXH3_64bits(want, N * size));
    free(want);
    assert_int_equal(e2e_worker_figure(c, "w0", true, "restore_count"), restores);
    /* Every fetch went through the first time. */
    assert_int_equal(h_log_count(&c->workers[1], "fetch from"), 0);

    for (int i = 0; i < 3; i++)
        spillway_view_release(cl, &views[i]);
    assert_int_equal(spillway_release(cl, sum), 0);
    assert_int_equal(spillway_release_many(cl, x, N), 0);
    assert_int_equal(spillway_release_many(cl, more, 3), 0);
    E2E_STOP(c, cl);
}

static const struct CMUnitTest tests[] = {
    H_CASE(job_ten_times_capacity_completes_with_flat_memory),
    H_CASE(larger_than_any_store_fails_clearly),
    H_CASE(pinned_memory_gives_back_pressure_then_a_clear_error),
    H_CASE(paused_worker_gets_no_tasks_until_memory_drops),
    H_CASE(full_spill_map_fails_cleanly_nothing_lost),
    H_CASE(killed_worker_leaves_no_spill_files),
    H_CASE(a_peer_reads_a_spilled_object_without_a_restore),
    H_CASE(a_peer_reads_a_large_spilled_object_from_a_pinned_full_store),
    H_CASE(peer_reads_past_the_buffers_wait_for_one),
};

SPW_TEST_MAIN(tests)
