/* A bounded chaos soak (label soak, plain build only): 200 small jobs while clients are killed
 * mid-job and workers are killed and replaced. Afterwards nothing is left: 0 objects, 0
 * orphans, `used` 0 on every worker, and the scheduler's memory and descriptor counts are
 * where they were once warm. Real daemons on 127.0.0.1. */
#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../unit/test_main.h"
#include "e2e_util.h"

/* Descriptors the scheduler holds. */
static int sched_fds(h_cluster *c)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/fd", (int)c->sched.pid);
    return e2e_dir_entries(path);
}

/* One job: a few sources of 512 KiB to 2 MiB, each checked by a checksum task, and a sum of
 * the checksums; every kept result is read and released. */
static void run_job(spillway *cl, unsigned seed)
{
    enum { W = 8 };
    spillway_graph *g = spillway_graph_new(cl);
    spillway_ref src[W], sum[W], total;
    spillway_arg sums[W];
    for (int i = 0; i < W; i++) {
        spillway_arg a[2] = {spillway_arg_u64((512u << 10) * (1 + (seed + i) % 4)),
                             spillway_arg_u64(seed * 10 + (unsigned)i)};
        assert_int_equal(spillway_task(g, "random", a, 2, 0, &src[i]), 0);
        spillway_arg s = spillway_arg_ref(src[i]);
        assert_int_equal(spillway_task(g, "checksum", &s, 1, 0, &sum[i]), 0);
        sums[i] = spillway_arg_ref(sum[i]);
    }
    assert_int_equal(spillway_task(g, "len", sums, W, SPILLWAY_KEEP, &total), 0);
    E2E_SUBMIT(g);
    void *out;
    size_t len;
    int rc = spillway_get(cl, total, 120000, &out, &len);
    if (rc != 0)
        fail_msg("job %u: %s: %s", seed, spillway_strerror(rc), spillway_errmsg(cl));
    uint64_t v;
    memcpy(&v, out, 8);
    assert_int_equal(v, 8 * W);
    spillway_free(out);
    assert_int_equal(spillway_release(cl, total), 0);
}

/* A client that submits a job of large outputs (seed: *(unsigned *)arg) and holds them. */
static int large_output_client(spillway *kc, void *arg)
{
    unsigned seed = *(unsigned *)arg;
    static uint8_t buf[1 << 20];
    memset(buf, (int)seed, sizeof buf);
    spillway_ref put;
    spillway_put(kc, buf, sizeof buf, &put);
    spillway_graph *g = spillway_graph_new(kc);
    for (int i = 0; i < 12; i++) {
        spillway_arg a[2] = {spillway_arg_u64(1u << 20), spillway_arg_u64(seed + (unsigned)i)};
        spillway_ref r;
        spillway_task(g, "random", a, 2, SPILLWAY_KEEP, &r);
        spillway_arg s = spillway_arg_ref(r);
        spillway_task(g, "checksum", &s, 1, SPILLWAY_KEEP, NULL);
    }
    spillway_submit(g);
    return 0;
}

/* A client that submits a job of large outputs and holds them, and is killed after `delay_us`. */
static void killed_client_job(h_cluster *c, unsigned seed, int delay_us)
{
    pid_t pid = e2e_client_fork(c, large_output_client, &seed, true);
    struct timespec ts = {0, delay_us * 1000L}; /* chaos: where in its job it dies */
    nanosleep(&ts, NULL);
    e2e_client_kill(pid);
}

static int live_workers(h_cluster *c)
{
    int n = 0;
    for (int i = 0; i < c->nworkers; i++)
        n += !c->workers[i].exited;
    return n;
}

static bool nothing_left(void *arg)
{
    h_cluster *c = arg;
    json_t *m = e2e_ctl_json(c, "memory");
    if (m == NULL)
        return false;
    json_int_t n = json_integer_value(json_object_get(json_object_get(m, "totals"), "objects"));
    json_int_t listed = (json_int_t)json_array_size(json_object_get(m, "objects"));
    json_decref(m);
    return n == 0 && listed == 0;
}

static void chaos_soak_leaves_nothing_behind(void)
{
    h_cluster *c = h_cluster_start(false, NULL);
    const char *const args[] = {"--slots", "1", "--store-capacity", "24M", "--alloc-wait", "5000",
                                NULL};
    h_workers_start(c, 2, args);
    spillway *cl = e2e_connect(c);
    srand(1234);
    enum { JOBS = 200, WARM = 20 };
    long warm_rss = 0;
    int warm_fds = 0;
    int kills = 0;
    for (int j = 0; j < JOBS; j++) {
        if (j == WARM) {
            assert_true(e2e_cluster_idle(c, 60000));
            warm_rss = e2e_status_kib(c->sched.pid, "VmRSS");
            warm_fds = sched_fds(c);
        }
        if (j % 2 == 1)
            killed_client_job(c, (unsigned)j, rand() % 30000);
        if (j % 33 == 32 && c->nworkers < H_MAX_WORKERS) {
            /* A worker dies (mid-work, when the killed client's tasks still run) and a new one
             * takes its place. */
            int victim = -1;
            for (int i = 0; i < c->nworkers && victim < 0; i++)
                if (!c->workers[i].exited && rand() % 2 == 0)
                    victim = i;
            for (int i = 0; i < c->nworkers && victim < 0; i++)
                if (!c->workers[i].exited)
                    victim = i;
            h_worker_kill(c, victim, SIGKILL);
            kills++;
            h_worker_start(c, args);
        }
        run_job(cl, (unsigned)j);
    }
    assert_int_equal(live_workers(c), 2);
    spillway_close(cl);
    assert_true(e2e_cluster_idle(c, 60000));
    assert_true(h_eventually(nothing_left, c, 30000));
    long end_rss = e2e_status_kib(c->sched.pid, "VmRSS");
    int end_fds = sched_fds(c);
    fprintf(stderr, "%d jobs, %d workers killed: scheduler RSS %ld KiB warm, %ld KiB at the end; "
                    "descriptors %d warm, %d at the end\n",
            JOBS, kills, warm_rss, end_rss, warm_fds, end_fds);
    assert_true(end_rss <= warm_rss + 16 * 1024);
    assert_true(end_fds <= warm_fds);
    E2E_STOP(c, NULL);
}

static const struct CMUnitTest tests[] = {
    H_CASE(chaos_soak_leaves_nothing_behind),
};

SPW_TEST_MAIN(tests)
