/* End-to-end tests of a node's memory beyond the store: the per-task memory limit, executors
 * recycled when they grow, executors that always leave through their cleanup (a worker stopped
 * mid-task, SIGTERM to the whole unit), and tasks of a dead client cancelled on their worker.
 * Real daemons on 127.0.0.1. */
#include <dirent.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../unit/test_main.h"
#include "e2e_util.h"

/* A figure of the worker named `name` from `spillway-ctl status` (memory.FIELD, or a top-level
 * worker field when mem is false). */
static uint64_t figure(h_cluster *c, const char *name, bool mem, const char *field)
{
    json_t *st = e2e_ctl_json(c, "status");
    uint64_t v = 0;
    size_t i;
    json_t *w;
    json_array_foreach(json_object_get(st, "workers"), i, w)
    {
        const char *n = json_string_value(json_object_get(w, "name"));
        if (n == NULL || strcmp(n, name) != 0)
            continue;
        json_t *o = mem ? json_object_get(w, "memory") : w;
        v = (uint64_t)json_integer_value(json_object_get(o, field));
    }
    json_decref(st);
    return v;
}

/* The pids of a process's children (its executors), up to max. */
static int children(int pid, int *out, int max)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/task/%d/children", pid, pid);
    FILE *f = fopen(path, "r");
    int n = 0;
    while (f != NULL && n < max && fscanf(f, "%d", &out[n]) == 1)
        n++;
    if (f != NULL)
        fclose(f);
    return n;
}

typedef struct probe {
    int pid;
    atomic_int stop; /* set by the test, read by the sampler thread */
    uint64_t peak;   /* bytes, e2e_node_memory's largest sample */
    pthread_t th;
} probe;

static void *probe_run(void *arg)
{
    probe *p = arg;
    while (!atomic_load(&p->stop)) {
        uint64_t m = e2e_node_memory(p->pid);
        if (m > p->peak)
            p->peak = m;
        struct timespec ts = {0, 2 * 1000000}; /* a sampling period, not synchronisation */
        nanosleep(&ts, NULL);
    }
    return NULL;
}

typedef struct fig_arg {
    h_cluster *c;
    const char *name, *field;
    uint64_t want;
} fig_arg;

static bool figure_at_least(void *arg);
static bool figure_is(void *arg);

static int run_one(spillway *cl, const char *fn, uint64_t arg, spillway_ref *out)
{
    spillway_graph *g = spillway_graph_new(cl);
    spillway_arg a = spillway_arg_u64(arg);
    int rc = spillway_task(g, fn, &a, 1, SPILLWAY_KEEP, out);
    if (rc == 0)
        rc = spillway_submit(g);
    spillway_graph_free(g);
    if (rc != 0)
        return rc;
    rc = spillway_wait(cl, out, 1, 120000);
    return rc;
}

/* The default task limit of workers on one host: half of the memory their stores (and a
 * margin each) leave, shared by all their slots, at least 64 MiB (hostshare.c). */
static uint64_t host_share(uint64_t stores, uint64_t workers, uint64_t slots)
{
    uint64_t phys = (uint64_t)sysconf(_SC_PHYS_PAGES) * (uint64_t)sysconf(_SC_PAGESIZE);
    uint64_t taken = stores + workers * (128ULL << 20);
    uint64_t v = phys > taken ? (phys - taken) / 2 / slots : 0;
    return v < (64ULL << 20) ? 64ULL << 20 : v;
}

typedef struct limits_want {
    h_cluster *c;
    uint64_t w0, w1; /* w1: 0 when that worker is not looked at */
} limits_want;

static bool limits_are(void *arg)
{
    limits_want *l = arg;
    return figure(l->c, "w0", true, "task_memory_limit") == l->w0 &&
           (l->w1 == 0 || figure(l->c, "w1", true, "task_memory_limit") == l->w1);
}

/* ------------------------------------------------------------------ cases */

/* A task that allocates four times its limit fails with SPW_ETASKMEM, naming the limit and the
 * task, while the node stays under its stated budget; its executor is replaced and the next
 * task on that worker succeeds. */
static void task_over_its_memory_limit_fails_and_the_node_stays_in_budget(void)
{
    h_cluster *c = h_cluster_start(false, NULL);
    const char *const args[] = {"--slots", "1", "--store-capacity", "64M", "--name", "w0",
                                "--task-memory-limit", "64M", "--plugin", SPW_TEST_PLUGIN, NULL};
    h_worker_start(c, args);
    spillway *cl = e2e_connect(c);
    uint64_t budget = figure(c, "w0", true, "node_budget");
    assert_int_equal(figure(c, "w0", true, "task_memory_limit"), 64u << 20);
    assert_int_equal(budget, (64u << 20) + (64u << 20) + (128u << 20));
    probe p = {.pid = c->workers[0].pid};
    pthread_create(&p.th, NULL, probe_run, &p);
    spillway_ref r;
    int rc = run_one(cl, "hog", 4 * (64ULL << 20), &r);
    void *out;
    size_t len;
    if (rc == 0)
        rc = spillway_get(cl, r, 10000, &out, &len);
    assert_int_equal(rc, SPW_ETASKMEM);
    const char *msg = spillway_errmsg(cl);
    fprintf(stderr, "error: %s\n", msg);
    assert_non_null(strstr(msg, "memory limit of 67108864 bytes"));
    assert_non_null(strstr(msg, "hog"));
    assert_int_equal(spillway_release(cl, r), 0);
    atomic_store(&p.stop, 1);
    pthread_join(p.th, NULL);
    fprintf(stderr, "node peak %.1f MiB, budget %.1f MiB\n", (double)p.peak / (1 << 20),
            (double)budget / (1 << 20));
#ifndef SPW_SANITIZE /* a sanitizer's shadow and quarantine are not part of the budget */
    assert_true(p.peak < budget);
#endif
    /* The worker and its store are untouched: the next task runs, on a new executor. */
    spillway_ref r2;
    assert_int_equal(run_one(cl, "hog", 16ULL << 20, &r2), 0);
    assert_int_equal(spillway_release(cl, r2), 0);
    spillway_arg a = spillway_arg_u64(41);
    spillway_graph *g = spillway_graph_new(cl);
    assert_int_equal(spillway_task(g, "inc", &a, 1, SPILLWAY_KEEP, &r2), 0);
    E2E_SUBMIT(g);
    assert_int_equal(e2e_get_u64(cl, r2), 42);
    assert_int_equal(spillway_release(cl, r2), 0);
    fig_arg fa = {c, "w0", "executor_recycles", 1};
    assert_true(h_eventually(figure_at_least, &fa, 20000));
    assert_int_equal(figure(c, "w0", true, "executor_restarts"), 0);
    E2E_STOP(c, cl);
}

#define CG_ROOT "/sys/fs/cgroup"

static void cg_skip(const char *why)
{
    printf("SKIP: %s\n", why);
    fflush(stdout);
    exit(77); /* ctest SKIP_RETURN_CODE */
}

static bool cg_write(const char *dir, const char *file, const char *value)
{
    char path[600];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    FILE *f = fopen(path, "w");
    if (f == NULL)
        return false;
    bool ok = fputs(value, f) >= 0;
    return fclose(f) == 0 && ok;
}

/* The first line of dir/file (or "" when it cannot be read). */
static void cg_read(const char *dir, const char *file, char *out, size_t len)
{
    char path[600];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    out[0] = '\0';
    FILE *f = fopen(path, "r");
    if (f != NULL) {
        if (fgets(out, (int)len, f) == NULL)
            out[0] = '\0';
        fclose(f);
    }
    out[strcspn(out, "\n")] = '\0';
}

static uint64_t cg_event(const char *dir, const char *key)
{
    char path[600], line[256];
    snprintf(path, sizeof path, "%s/memory.events", dir);
    FILE *f = fopen(path, "r");
    uint64_t v = 0;
    size_t kl = strlen(key);
    while (f != NULL && fgets(line, sizeof line, f) != NULL)
        if (strncmp(line, key, kl) == 0 && line[kl] == ' ')
            v = strtoull(line + kl + 1, NULL, 10);
    if (f != NULL)
        fclose(f);
    return v;
}

static bool cg_gone(void *arg)
{
    return rmdir(arg) == 0 || errno == ENOENT;
}

/* Removes the test's cgroup tree (the worker's leaf and its executors' directories first),
 * waiting for the kernel to let go of exited members. */
static void cg_remove(const char *top)
{
    DIR *d = opendir(top);
    struct dirent *e;
    char sub[64][600];
    int n = 0;
    while (d != NULL && (e = readdir(d)) != NULL && n < 64) {
        char p[600];
        struct stat st;
        snprintf(p, sizeof p, "%s/%s", top, e->d_name);
        if (e->d_name[0] != '.' && stat(p, &st) == 0 && S_ISDIR(st.st_mode))
            snprintf(sub[n++], sizeof sub[0], "%s", p);
    }
    if (d != NULL)
        closedir(d);
    for (int i = 0; i < n; i++)
        assert_true(h_eventually(cg_gone, sub[i], 10000));
    assert_true(h_eventually(cg_gone, (void *)top, 10000));
}

/* The cgroup v2 path of the task limit: a worker started in a cgroup delegated to it makes one
 * child cgroup per executor with memory.max; a task allocating 4x the limit is killed by the
 * kernel there (memory.events counts it) and fails with SPW_ETASKMEM; the next task succeeds.
 * Needs root and a pure cgroup v2 tree at /sys/fs/cgroup whose memory controller can be handed
 * to a new child of the root; otherwise SKIP with the reason. */
static void task_over_limit_in_delegated_cgroup_is_oom_killed(void)
{
    struct statfs sf;
    if (geteuid() != 0)
        cg_skip("needs root to create a cgroup");
    if (statfs(CG_ROOT, &sf) != 0 || (unsigned long)sf.f_type != 0x63677270UL)
        cg_skip("no cgroup v2 (unified) hierarchy mounted at " CG_ROOT " (v1 or hybrid layout)");
    char ctl[256];
    cg_read(CG_ROOT, "cgroup.subtree_control", ctl, sizeof ctl);
    if (strstr(ctl, "memory") == NULL && !cg_write(CG_ROOT, "cgroup.subtree_control", "+memory"))
        cg_skip("the memory controller cannot be enabled in " CG_ROOT "/cgroup.subtree_control");
    char top[128];
    snprintf(top, sizeof top, CG_ROOT "/spillway-test-%d", (int)getpid());
    if (mkdir(top, 0755) != 0)
        cg_skip("cannot create a cgroup under " CG_ROOT);
    cg_read(top, "cgroup.controllers", ctl, sizeof ctl);
    if (strstr(ctl, "memory") == NULL) {
        rmdir(top);
        cg_skip("the memory controller is not available to a new cgroup");
    }
    h_cluster *c = h_cluster_start(false, NULL);
    const char *const args[] = {"--slots", "1", "--store-capacity", "64M", "--name", "w0",
                                "--task-memory-limit", "64M", "--plugin", SPW_TEST_PLUGIN, NULL};
    h_spawn_in_cgroup(top);
    h_worker_start(c, args);
    h_spawn_in_cgroup(NULL);
    /* The worker took the cgroup path: its own leaf, one directory per executor. */
    char exec0[200], v[256];
    snprintf(exec0, sizeof exec0, "%s/exec-0", top);
    cg_read(exec0, "memory.max", v, sizeof v);
    assert_string_equal(v, "100663296"); /* the limit + 32 MiB of executor baseline */
    char wleaf[200];
    snprintf(wleaf, sizeof wleaf, "%s/worker", top);
    cg_read(wleaf, "cgroup.procs", v, sizeof v);
    assert_int_equal(atoi(v), c->workers[0].pid);
    cg_read(top, "cgroup.subtree_control", v, sizeof v);
    assert_non_null(strstr(v, "memory"));
    spillway *cl = e2e_connect(c);
    spillway_ref r;
    int rc = run_one(cl, "hog", 4 * (64ULL << 20), &r);
    void *out;
    size_t len;
    if (rc == 0)
        rc = spillway_get(cl, r, 10000, &out, &len);
    assert_int_equal(rc, SPW_ETASKMEM);
    const char *msg = spillway_errmsg(cl);
    fprintf(stderr, "error: %s\n", msg);
    assert_non_null(strstr(msg, "killed by the kernel at its memory limit of 67108864 bytes"));
    assert_true(cg_event(exec0, "oom_kill") >= 1);
    assert_int_equal(spillway_release(cl, r), 0);
    /* The executor was replaced, in the same cgroup; the next task runs. */
    spillway_ref r2;
    spillway_arg a = spillway_arg_u64(41);
    spillway_graph *g = spillway_graph_new(cl);
    assert_int_equal(spillway_task(g, "inc", &a, 1, SPILLWAY_KEEP, &r2), 0);
    E2E_SUBMIT(g);
    assert_int_equal(e2e_get_u64(cl, r2), 42);
    assert_int_equal(spillway_release(cl, r2), 0);
    cg_read(exec0, "cgroup.procs", v, sizeof v);
    assert_true(atoi(v) > 0);
    E2E_STOP(c, cl);
    cg_remove(top);
}

static bool figure_at_least(void *arg)
{
    fig_arg *a = arg;
    return figure(a->c, a->name, true, a->field) >= a->want;
}

static bool figure_is(void *arg)
{
    fig_arg *a = arg;
    return figure(a->c, a->name, true, a->field) == a->want;
}

/* A plugin that leaks grows its executor by the leak every run; past --executor-max-rss the
 * executor is replaced between tasks, and no task fails for it. */
static void leaking_executor_is_recycled(void)
{
    h_cluster *c = h_cluster_start(false, NULL);
    const char *const args[] = {"--slots", "1", "--store-capacity", "32M", "--name", "w0",
                                "--task-memory-limit", "512M", "--executor-max-rss", "64M",
                                "--plugin", SPW_TEST_PLUGIN, NULL};
    h_worker_start(c, args);
    spillway *cl = e2e_connect(c);
    for (int i = 0; i < 4; i++) {
        spillway_ref r;
        assert_int_equal(run_one(cl, "leak", 40ULL << 20, &r), 0);
        assert_int_equal(spillway_release(cl, r), 0);
    }
    fig_arg fa = {c, "w0", "executor_recycles", 1};
    assert_true(h_eventually(figure_at_least, &fa, 20000));
    assert_int_equal(figure(c, "w0", true, "tasks_failed"), 0);
    assert_int_equal(figure(c, "w0", true, "executor_restarts"), 0);
    E2E_STOP(c, cl);
}

/* --executor-max-tasks N: each executor runs N tasks, then a fresh one takes over. */
static void executor_max_tasks_recycles(void)
{
    h_cluster *c = h_cluster_start(false, NULL);
    const char *const args[] = {"--slots", "1", "--store-capacity", "32M", "--name", "w0",
                                "--executor-max-tasks", "2", NULL};
    h_worker_start(c, args);
    spillway *cl = e2e_connect(c);
    spillway_graph *g = spillway_graph_new(cl);
    spillway_ref r[7];
    for (int i = 0; i < 7; i++) {
        spillway_arg a = spillway_arg_u64((uint64_t)i);
        assert_int_equal(spillway_task(g, "inc", &a, 1, SPILLWAY_KEEP, &r[i]), 0);
    }
    E2E_SUBMIT(g);
    for (int i = 0; i < 7; i++)
        assert_int_equal(e2e_get_u64(cl, r[i]), (uint64_t)i + 1);
    assert_int_equal(spillway_release_many(cl, r, 7), 0);
    fig_arg fa = {c, "w0", "executor_recycles", 3};
    assert_true(h_eventually(figure_at_least, &fa, 20000));
    assert_int_equal(figure(c, "w0", true, "executor_restarts"), 0);
    E2E_STOP(c, cl);
}

/* The scheduler has handed w0 a task (the worker starts it within moments). */
static bool worker_busy(void *arg)
{
    return figure(arg, "w0", false, "assigned") >= 1;
}

static bool file_exists(void *arg)
{
    return access(arg, F_OK) == 0;
}

/* A worker stopped while its executor runs a task exits 0; the executor finishes the task and
 * leaves through its cleanup (under valgrind: nothing lost, not even "possibly"). */
static void worker_stopped_mid_task_exits_cleanly(void)
{
    h_cluster *c = h_cluster_start(false, NULL);
    const char *const args[] = {"--slots", "1", "--store-capacity", "16M", "--name", "w0",
                                "--plugin", SPW_TEST_PLUGIN, NULL};
    h_worker_start(c, args);
    spillway *cl = e2e_connect(c);
    spillway_graph *g = spillway_graph_new(cl);
    char mark[512];
    snprintf(mark, sizeof mark, "%s/started", c->dir);
    /* Short enough for the executor to finish and exit before the worker's 5 s deadline. */
    spillway_arg a[2] = {spillway_arg_bytes(mark, strlen(mark)), spillway_arg_u64(1000)};
    spillway_ref r;
    assert_int_equal(spillway_task(g, "mark_sleep", a, 2, SPILLWAY_KEEP, &r), 0);
    E2E_SUBMIT(g);
    assert_true(h_eventually(file_exists, mark, 60000)); /* running in the executor */
    int st = h_worker_kill(c, 0, SIGTERM);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
    spillway_release(cl, r);
    E2E_STOP(c, cl);
}

/* systemd stops a unit by signalling every process in it at once (SIGTERM), and Ctrl-C on a
 * terminal signals the whole process group (SIGINT): the executors get the signal with their
 * worker. The worker still exits 0, and so do the executors (their handler lets the task
 * finish). */
static void signal_worker_and_executors_together(int sig)
{
    h_cluster *c = h_cluster_start(false, NULL);
    const char *const args[] = {"--slots", "2", "--store-capacity", "16M", "--name", "w0", NULL};
    h_worker_start(c, args);
    spillway *cl = e2e_connect(c);
    spillway_graph *g = spillway_graph_new(cl);
    spillway_arg a = spillway_arg_u64(2000);
    spillway_ref r;
    assert_int_equal(spillway_task(g, "sleep_ms", &a, 1, SPILLWAY_KEEP, &r), 0);
    E2E_SUBMIT(g);
    assert_true(h_eventually(worker_busy, c, 30000));
    int kids[8];
    int n = children(c->workers[0].pid, kids, 8);
    assert_int_equal(n, 2);
    for (int i = 0; i < n; i++)
        kill(kids[i], sig);
    int st = h_worker_kill(c, 0, sig);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
    spillway_release(cl, r);
    E2E_STOP(c, cl);
}

static void sigterm_to_worker_and_executor_together_exits_zero(void)
{
    signal_worker_and_executors_together(SIGTERM);
}

static void sigint_to_worker_and_executors_together_exits_zero(void)
{
    signal_worker_and_executors_together(SIGINT);
}

/* An executor told to stop (SIGTERM) while the worker goes on: the task it ran finishes, the
 * tasks queued behind it are not failed but run on its successor. */
static void executor_sigterm_alone_loses_no_task(void)
{
    h_cluster *c = h_cluster_start(false, NULL);
    const char *const args[] = {"--slots", "1", "--store-capacity", "16M", "--name", "w0", NULL};
    h_worker_start(c, args);
    spillway *cl = e2e_connect(c);
    spillway_graph *g = spillway_graph_new(cl);
    spillway_ref r[3];
    for (int i = 0; i < 3; i++) {
        spillway_arg a = spillway_arg_u64(300);
        assert_int_equal(spillway_task(g, "sleep_ms", &a, 1, SPILLWAY_KEEP, &r[i]), 0);
    }
    E2E_SUBMIT(g);
    assert_true(h_eventually(worker_busy, c, 30000));
    int kid;
    assert_int_equal(children(c->workers[0].pid, &kid, 1), 1);
    kill(kid, SIGTERM);
    assert_int_equal(spillway_wait(cl, r, 3, 60000), 0);
    for (int i = 0; i < 3; i++) {
        void *out;
        size_t len;
        assert_int_equal(spillway_get(cl, r[i], 10000, &out, &len), 0);
        spillway_free(out);
    }
    assert_int_equal(figure(c, "w0", true, "tasks_failed"), 0);
    assert_int_equal(spillway_release_many(cl, r, 3), 0);
    E2E_STOP(c, cl);
}

static bool two_on_w1(void *arg)
{
    return figure(arg, "w1", false, "assigned") == 2;
}

static bool one_on_w1(void *arg)
{
    return figure(arg, "w1", false, "assigned") == 1;
}

static bool none_on_w1(void *arg)
{
    return figure(arg, "w1", false, "assigned") == 0;
}

/* The client dead_client_queued_tasks_never_run kills: on w1, a task that waits for the file
 * `go` (arg) and two more behind it. */
static int queueing_client(spillway *kc, void *arg)
{
    const char *go = arg;
    spillway_graph *kg = spillway_graph_new(kc);
    spillway_graph_place(kg, "w1");
    /* Runs until the test creates `go`, after it saw the queued one dropped: however slow
     * the machine, it cannot end before the client is killed. */
    spillway_arg s[2] = {spillway_arg_bytes(go, strlen(go)), spillway_arg_u64(120000)};
    spillway_task(kg, "wait_file", s, 2, SPILLWAY_KEEP, NULL);
    for (int i = 0; i < 2; i++) {
        spillway_arg x = spillway_arg_u64((uint64_t)i);
        spillway_task(kg, "inc", &x, 1, SPILLWAY_KEEP, NULL);
    }
    spillway_submit(kg);
    return 0;
}

/* A client killed while one of its tasks waits queued on a one-slot worker, behind a running
 * one, and another in the scheduler: the queued one is cancelled on the worker at once, neither
 * ever runs; the running one finishes and its output is dropped. A function never run queues 2
 * deep per slot, whatever the machine's speed, so no timing is needed to know the depth. */
static void dead_client_queued_tasks_never_run(void)
{
    h_cluster *c = h_cluster_start(false, NULL);
    const char *const a1[] = {"--slots",  "1",  "--store-capacity", "16M", "--name",
                              "w1",       "--plugin", SPW_TEST_PLUGIN,  NULL};
    h_worker_start(c, a1);
    spillway *cl = e2e_connect(c);
    char go[512];
    snprintf(go, sizeof go, "%s/go", c->dir);
    pid_t pid = e2e_client_fork(c, queueing_client, go, true);
    assert_true(h_eventually(two_on_w1, c, 20000));
    e2e_client_kill(pid);
    /* The queued one is dropped at once; the sleeping one still runs. */
    assert_true(h_eventually(one_on_w1, c, 20000));
    fig_arg fa = {c, "w1", "tasks_cancelled", 1};
    assert_true(h_eventually(figure_is, &fa, 20000));
    FILE *f = fopen(go, "w");
    assert_non_null(f);
    fclose(f);
    assert_true(h_eventually(none_on_w1, c, 30000));
    assert_true(e2e_cluster_idle(c, 20000));
    fa.field = "tasks_done";
    fa.want = 1; /* only the waiting one ran */
    assert_true(h_eventually(figure_is, &fa, 20000));
    assert_int_equal(figure(c, "w1", true, "tasks_cancelled"), 1);
    E2E_STOP(c, cl);
}

/* Workers on one host share it: the default task limit counts every worker listed in the
 * host's directory (the harness gives each cluster its own), follows one joining and one killed without leaving, and a limit given with
 * --task-memory-limit stays as given (the worker still counts for the others). */
static void default_task_limit_counts_every_worker_on_the_host(void)
{
    h_cluster *c = h_cluster_start(false, NULL);
    const char *const a0[] = {"--slots", "2", "--store-capacity", "64M", "--name", "w0", NULL};
    const char *const a1[] = {"--slots", "3", "--store-capacity", "128M", "--name", "w1", NULL};
    const char *const a2[] = {"--slots", "1", "--store-capacity", "64M", "--name", "w2",
                              "--task-memory-limit", "100M", NULL};
    h_worker_start(c, a0);
    limits_want l = {.c = c, .w0 = host_share(64u << 20, 1, 2)};
    assert_true(h_eventually(limits_are, &l, 30000));
    h_worker_start(c, a1);
    uint64_t two = host_share(192u << 20, 2, 5);
    l = (limits_want){.c = c, .w0 = two, .w1 = two};
    assert_true(h_eventually(limits_are, &l, 30000));
    h_worker_start(c, a2);
    uint64_t three = host_share(256u << 20, 3, 6);
    l = (limits_want){.c = c, .w0 = three, .w1 = three};
    assert_true(h_eventually(limits_are, &l, 30000));
    assert_int_equal(figure(c, "w2", true, "task_memory_limit"), 100u << 20);
    h_worker_kill(c, 1, SIGKILL); /* its entry goes with its pid */
    l = (limits_want){.c = c, .w0 = host_share(128u << 20, 2, 3)};
    assert_true(h_eventually(limits_are, &l, 30000));
    spillway *cl = e2e_connect(c);
    spillway_ref r;
    assert_int_equal(run_one(cl, "sleep_ms", 1, &r), 0); /* executors replaced, still working */
    assert_int_equal(spillway_release(cl, r), 0);
    E2E_FINISH(c, cl);
}

static const struct CMUnitTest tests[] = {
    H_CASE(task_over_its_memory_limit_fails_and_the_node_stays_in_budget),
    H_CASE(task_over_limit_in_delegated_cgroup_is_oom_killed),
    H_CASE(leaking_executor_is_recycled),
    H_CASE(executor_max_tasks_recycles),
    H_CASE(worker_stopped_mid_task_exits_cleanly),
    H_CASE(sigterm_to_worker_and_executor_together_exits_zero),
    H_CASE(sigint_to_worker_and_executors_together_exits_zero),
    H_CASE(executor_sigterm_alone_loses_no_task),
    H_CASE(dead_client_queued_tasks_never_run),
    H_CASE(default_task_limit_counts_every_worker_on_the_host),
};

SPW_TEST_MAIN(tests)
