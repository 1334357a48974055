/* End-to-end tests of memory and disk handed back, and of nothing hanging on them: a spill
 * directory that fills up, worker memory and spill disk after a job is released, the idle
 * scheduler after a graph of a million tasks. Real daemons on 127.0.0.1. */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../unit/test_main.h"
#include "e2e_util.h"
#include "spillway/datagen.h"

#define SKIP_CODE 77 /* ctest SKIP_RETURN_CODE */

__attribute__((unused)) static uint64_t worker_figure(h_cluster *c, int w, const char *field)
{
    json_t *st = e2e_ctl_json(c, "status");
    json_t *wj = json_array_get(json_object_get(st, "workers"), (size_t)w);
    uint64_t v = (uint64_t)json_integer_value(json_object_get(json_object_get(wj, "memory"), field));
    json_decref(st);
    return v;
}

static const char *worker_state(h_cluster *c, int w, char *buf, size_t len)
{
    json_t *st = e2e_ctl_json(c, "status");
    json_t *wj = json_array_get(json_object_get(st, "workers"), (size_t)w);
    const char *s = json_string_value(json_object_get(wj, "state"));
    snprintf(buf, len, "%s", s != NULL ? s : "?");
    json_decref(st);
    return buf;
}

static bool worker_running(void *arg)
{
    char buf[32];
    return strcmp(worker_state(arg, 0, buf, sizeof buf), "running") == 0;
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

/* The tmpfs a test mounted, unmounted at exit even when an assertion ends the test early. */
static char mounted[512];

static void unmount_at_exit(void)
{
    if (mounted[0] != '\0')
        umount2(mounted, MNT_DETACH);
}

/* ------------------------------------------------------------------ cases */

/* A spill directory on a 16 MiB tmpfs fills up: the allocations waiting on spilling fail
 * within --alloc-wait with SPW_ESPILLFULL naming the directory (nothing hangs), the log says
 * "no space left on device" with the path, and once the client releases its objects the
 * worker is no longer paused and serves the next job. */
static void full_spill_disk_fails_allocations_and_the_worker_recovers(void)
{
    if (geteuid() != 0) {
        fprintf(stderr, "SKIP: mounting a tmpfs needs root\n");
        exit(SKIP_CODE);
    }
    h_cluster *c = h_cluster_start(false, NULL);
    char dir[512];
    snprintf(dir, sizeof dir, "%s/spill", c->dir);
    assert_int_equal(mkdir(dir, 0700), 0);
    if (mount("tmpfs", dir, "tmpfs", 0, "size=16m,mode=0700") != 0) {
        fprintf(stderr, "SKIP: cannot mount a tmpfs on %s: %s\n", dir, strerror(errno));
        h_cluster_stop(c);
        exit(SKIP_CODE);
    }
    snprintf(mounted, sizeof mounted, "%s", dir);
    atexit(unmount_at_exit);
    const char *const args[] = {"--slots", "1", "--store-capacity", "16M", "--alloc-wait", "2000",
                                "--spill-dir", dir, NULL};
    h_worker_start(c, args);
    spillway *cl = e2e_connect(c);
    enum { N = 16 };
    uint8_t *data = malloc(4u << 20);
    spillway_ref objs[N];
    int n = 0, rc = 0;
    uint64_t t0 = now_ns();
    for (; n < N; n++) {
        spw_gen_random(data, 4u << 20, (uint64_t)n); /* incompressible: 4 MiB on disk each */
        uint64_t ts = now_ns();
        rc = spillway_put(cl, data, 4u << 20, &objs[n]);
        if (rc != 0) {
            fprintf(stderr, "put %d: %s after %.0f ms: %s\n", n, spillway_strerror(rc),
                    (double)(now_ns() - ts) / 1e6, spillway_errmsg(cl));
            break;
        }
    }
    (void)t0;
    assert_int_equal(rc, SPW_ESPILLFULL);
    assert_non_null(strstr(spillway_errmsg(cl), dir));
    /* A task whose output cannot be stored fails with the same code, and the client hears it. */
    spillway_graph *g = spillway_graph_new(cl);
    spillway_ref big;
    spillway_arg a[2] = {spillway_arg_u64(8u << 20), spillway_arg_u64(7)};
    assert_int_equal(spillway_task(g, "random", a, 2, SPILLWAY_KEEP, &big), 0);
    E2E_SUBMIT(g);
    void *out;
    size_t len;
    assert_int_equal(spillway_get(cl, big, 60000, &out, &len), SPW_ESPILLFULL);
    assert_int_equal(spillway_release(cl, big), 0);
    /* Many more such tasks fail together, not one --alloc-wait after another: the job is over
     * in about one wait, not FULL_TASKS of them (the time is printed, not asserted). */
    enum { FULL_TASKS = 150 };
    spillway_ref each[FULL_TASKS];
    uint64_t tf = now_ns();
    g = spillway_graph_new(cl);
    for (int i = 0; i < FULL_TASKS; i++) {
        spillway_arg ra[2] = {spillway_arg_u64(1u << 20), spillway_arg_u64(1000 + (uint64_t)i)};
        assert_int_equal(spillway_task(g, "random", ra, 2, SPILLWAY_KEEP, &each[i]), 0);
    }
    E2E_SUBMIT(g);
    for (int i = 0; i < FULL_TASKS; i++)
        assert_int_equal(spillway_get(cl, each[i], 60000, &out, &len), SPW_ESPILLFULL);
    printf("%d tasks of 1 MiB with the store and the spill storage full: all failed in %.1f s "
           "(--alloc-wait 2000)\n",
           FULL_TASKS, (double)(now_ns() - tf) / 1e9);
    assert_int_equal(spillway_release_many(cl, each, FULL_TASKS), 0);
    /* What is held in memory is intact. */
    spw_gen_random(data, 4u << 20, (uint64_t)n - 1);
    assert_int_equal(spillway_get(cl, objs[n - 1], 60000, &out, &len), 0);
    assert_memory_equal(out, data, 4u << 20);
    spillway_free(out);
    assert_int_equal(spillway_release_many(cl, objs, n), 0);
    assert_true(e2e_cluster_idle(c, 30000));
    assert_true(h_eventually(worker_running, c, 30000));
    /* The next job runs, spilling again where it must. */
    spillway_ref more[6];
    for (int i = 0; i < 6; i++) {
        spw_gen_random(data, 4u << 20, 100 + (uint64_t)i);
        rc = spillway_put(cl, data, 4u << 20, &more[i]);
        assert_int_equal(rc, 0);
    }
    for (int i = 0; i < 6; i++) {
        spw_gen_random(data, 4u << 20, 100 + (uint64_t)i);
        assert_int_equal(spillway_get(cl, more[i], 60000, &out, &len), 0);
        assert_memory_equal(out, data, 4u << 20);
        spillway_free(out);
    }
    assert_int_equal(spillway_release_many(cl, more, 6), 0);
    free(data);
    spillway_close(cl);
    char log[2048];
    snprintf(log, sizeof log, "grep -q 'no space left on device.*%s' '%s'", dir, c->workers[0].log);
    int found = system(log);
    umount2(dir, MNT_DETACH); /* the worker keeps its (unlinked) files until it exits */
    mounted[0] = '\0';
    E2E_STOP(c, NULL);
    assert_int_equal(found, 0);
}

/* A worker's memory: its private pages plus what its arena holds. */
static uint64_t worker_memory(int pid)
{
    return (uint64_t)e2e_status_kib(pid, "RssAnon") * 1024 +
           e2e_fd_blocks(pid, "/memfd:spillway-worker");
}

#define RSS_SLACK (32ULL << 20) /* see README: arena within 4 MiB of used, private memory
                                   within 28 MiB of its start */

typedef struct back_arg {
    h_cluster *c;
    uint64_t start[H_MAX_WORKERS];
} back_arg;

static bool memory_back(void *arg)
{
    back_arg *a = arg;
    for (int i = 0; i < a->c->nworkers; i++)
        if (worker_memory(a->c->workers[i].pid) > a->start[i] + RSS_SLACK)
            return false;
    return true;
}

static bool spill_disk_back(void *arg)
{
    h_cluster *c = arg;
    for (int i = 0; i < c->nworkers; i++)
        if (e2e_fd_blocks(c->workers[i].pid, "data.mdb") > (64ULL << 20))
            return false;
    return true;
}

/* While a few spilled copies remain, each worker's spill file is compacted to at most 2 x its
 * live stored bytes + 64 MiB (README). */
static bool spill_disk_compacted(void *arg)
{
    h_cluster *c = arg;
    for (int i = 0; i < c->nworkers; i++)
        if (e2e_fd_blocks(c->workers[i].pid, "data.mdb") >
            2 * worker_figure(c, i, "spilled_stored_bytes") + (64ULL << 20))
            return false;
    return true;
}

/* After a job ten times the stores' capacity and the release of nine tenths of it, each
 * worker's spill file is compacted while the rest still reads back byte-exact; after the
 * release of everything, each worker's memory comes back to within the stated slack of what it
 * was at start, and its spill files' allocated blocks to at most 64 MiB. */
static void memory_and_spill_disk_handed_back_after_a_big_job(void)
{
    h_cluster *c = h_cluster_start(false, NULL);
    const char *const args[] = {"--slots", "1", "--store-capacity", "32M", "--spill-dir",
                                "/var/tmp", NULL};
    h_workers_start(c, 2, args);
    spillway *cl = e2e_connect(c);
    back_arg ba = {.c = c};
    for (int i = 0; i < c->nworkers; i++)
        ba.start[i] = worker_memory(c->workers[i].pid);
    enum { N = 160, OBJ = 4 << 20 }; /* 640 MiB: 10x the 64 MiB of store */
    spillway_ref outs[N];
    spillway_graph *g = spillway_graph_new(cl);
    for (int i = 0; i < N; i++) {
        spillway_arg a[2] = {spillway_arg_u64(OBJ), spillway_arg_u64((uint64_t)i)};
        assert_int_equal(spillway_task(g, "random", a, 2, SPILLWAY_KEEP, &outs[i]), 0);
    }
    E2E_SUBMIT(g);
    assert_int_equal(spillway_wait(cl, outs, N, 300000), 0);
    uint64_t peak_disk = 0, peak_mem = 0;
    for (int i = 0; i < c->nworkers; i++) {
        uint64_t d = e2e_fd_blocks(c->workers[i].pid, "data.mdb"),
                 m = worker_memory(c->workers[i].pid);
        peak_disk = d > peak_disk ? d : peak_disk;
        peak_mem = m > peak_mem ? m : peak_mem;
    }
    /* Keep every tenth (the first ones: spilled), release the rest. */
    spillway_ref gone[N], kept[N / 10];
    int ngone = 0, nkept = 0;
    for (int i = 0; i < N; i++) {
        if (i % 10 == 0)
            kept[nkept++] = outs[i];
        else
            gone[ngone++] = outs[i];
    }
    assert_int_equal(spillway_release_many(cl, gone, ngone), 0);
    assert_true(h_eventually(spill_disk_compacted, c, 60000));
    for (int i = 0; i < c->nworkers; i++)
        fprintf(stderr, "worker %d: spill disk after releasing 9/10: %.1f MiB (%.1f MiB live)\n", i,
                (double)e2e_fd_blocks(c->workers[i].pid, "data.mdb") / (1 << 20),
                (double)worker_figure(c, i, "spilled_stored_bytes") / (1 << 20));
    uint8_t *want = malloc(OBJ);
    for (int k = 0; k < nkept; k++) {
        void *data;
        size_t len;
        assert_int_equal(spillway_get(cl, kept[k], 60000, &data, &len), 0);
        spw_gen_random(want, OBJ, (uint64_t)(k * 10));
        assert_int_equal(len, OBJ);
        assert_memory_equal(data, want, OBJ);
        spillway_free(data);
    }
    free(want);
    assert_int_equal(spillway_release_many(cl, kept, nkept), 0);
    assert_true(e2e_cluster_idle(c, 60000));
    bool mem_ok = h_eventually(memory_back, &ba, 30000);
    bool disk_ok = h_eventually(spill_disk_back, c, 30000);
    for (int i = 0; i < c->nworkers; i++)
        fprintf(stderr,
                "worker %d: memory at start %.1f MiB, with the job %.1f MiB, after release %.1f "
                "MiB; spill disk with the job %.1f MiB, after release %.1f MiB\n",
                i, (double)ba.start[i] / (1 << 20), (double)peak_mem / (1 << 20),
                (double)worker_memory(c->workers[i].pid) / (1 << 20), (double)peak_disk / (1 << 20),
                (double)e2e_fd_blocks(c->workers[i].pid, "data.mdb") / (1 << 20));
#ifndef SPW_SANITIZE /* a sanitizer's shadow and quarantine are not ours to bound */
    assert_true(mem_ok);
#else
    (void)mem_ok;
#endif
    assert_true(disk_ok);
    E2E_STOP(c, cl);
}

typedef struct rss_arg {
    int pid;
    uint64_t limit; /* bytes */
} rss_arg;

static bool rss_under(void *arg)
{
    rss_arg *a = arg;
    return (uint64_t)e2e_status_kib(a->pid, "VmRSS") * 1024 <= a->limit;
}

/* A graph of a million tasks (10,000 groups of 99 `noop`s consumed by one `len`) runs; once its
 * results are released, the idle scheduler's memory comes back to within 64 MiB of what it was
 * before. A graph over --graph-max-total is refused with SPW_ELIMIT. */
#ifndef SPW_SANITIZE
#define HB_GROUPS 10000
#define HB_TOTAL "1000000"
#else
/* Sanitizer builds: their allocators keep freed memory on purpose (the RSS check is off there),
 * so a tenth of the graph runs the same paths (the graph, its release, the cap) in a tenth of
 * the time: a million tasks took minutes under ASan on two loaded cores. */
#define HB_GROUPS 1000
#define HB_TOTAL "100000"
#endif
static void idle_scheduler_returns_memory_after_a_million_tasks(void)
{
    const char *const sargs[] = {"--graph-max-total", HB_TOTAL, NULL};
    h_cluster *c = h_cluster_start(false, sargs);
    const char *const args[] = {"--slots", "2", "--store-capacity", "64M", NULL};
    h_worker_start(c, args);
    spillway *cl = e2e_connect(c);
    /* Warm up (connections, buffers), then take the baseline. */
    spillway_graph *g;
    spillway_ref w = e2e_submit_u64(cl, "inc", 1);
    assert_int_equal(e2e_get_u64(cl, w), 2);
    assert_int_equal(spillway_release(cl, w), 0);
    uint64_t base = (uint64_t)e2e_status_kib(c->sched.pid, "VmRSS") * 1024;
    enum { GROUPS = HB_GROUPS, WIDTH = 99 };
    spillway_ref *res = calloc(GROUPS, sizeof *res);
    g = spillway_graph_new(cl);
    for (int k = 0; k < GROUPS; k++) {
        spillway_arg a[WIDTH];
        for (int i = 0; i < WIDTH; i++) {
            spillway_ref r;
            assert_int_equal(spillway_task(g, "noop", NULL, 0, 0, &r), 0);
            a[i] = spillway_arg_ref(r);
        }
        assert_int_equal(spillway_task(g, "len", a, WIDTH, SPILLWAY_KEEP, &res[k]), 0);
    }
    E2E_SUBMIT(g);
    uint64_t peak = (uint64_t)e2e_status_kib(c->sched.pid, "VmRSS") * 1024;
    assert_int_equal(spillway_wait(cl, res, GROUPS, 600000), 0);
    assert_int_equal(e2e_get_u64(cl, res[GROUPS - 1]), 0);
    assert_int_equal(spillway_release_many(cl, res, GROUPS), 0);
    free(res);
    assert_true(e2e_cluster_idle(c, 120000));
    rss_arg ra = {c->sched.pid, base + (64ULL << 20)};
    bool ok = h_eventually(rss_under, &ra, 30000);
    fprintf(stderr,
            "scheduler RSS: %.1f MiB before, %.1f MiB with the graph, %.1f MiB idle after\n",
            (double)base / (1 << 20), (double)peak / (1 << 20),
            (double)e2e_status_kib(c->sched.pid, "VmRSS") / 1024);
#ifndef SPW_SANITIZE /* ASan's quarantine keeps freed memory on purpose */
    assert_true(ok);
#else
    (void)ok;
#endif
    /* One task more than the cap: refused, with the cap in the text. */
    g = spillway_graph_new(cl);
    spillway_ref r = {0, 0};
    for (int i = 0; i < GROUPS * (WIDTH + 1); i++)
        assert_int_equal(spillway_task(g, "noop", NULL, 0, 0, NULL), 0);
    assert_int_equal(spillway_task(g, "noop", NULL, 0, SPILLWAY_KEEP, &r), 0);
    assert_int_equal(spillway_submit(g), SPW_ELIMIT);
    assert_non_null(strstr(spillway_errmsg(cl), "--graph-max-total"));
    spillway_graph_free(g);
    void *out;
    size_t len;
    assert_int_equal(spillway_get(cl, r, 10000, &out, &len), SPW_ELIMIT);
    spillway_release(cl, r);
    E2E_STOP(c, cl);
}

static const struct CMUnitTest tests[] = {
    H_CASE(idle_scheduler_returns_memory_after_a_million_tasks),
    H_CASE(memory_and_spill_disk_handed_back_after_a_big_job),
    H_CASE(full_spill_disk_fails_allocations_and_the_worker_recovers),
};

SPW_TEST_MAIN(tests)
