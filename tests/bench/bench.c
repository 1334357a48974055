/*
 * spillway-bench: the benchmark cases, one JSON line per case.
 *
 *   spillway-bench [--case NAME[,NAME...]] [--quick] [--scheduler ADDR] [--secret-file PATH]
 *                  [--workers N] [--slots S] [--n N[,N...]] [--repeat R] [--spill-threads N]
 *                  [--spill-workers 1|2] [--cpus N]
 *
 * Without --scheduler it starts its own cluster on 127.0.0.1 (a scheduler and --workers workers,
 * default two, with --slots slots each, default one, from the binaries beside it) and stops it at
 * the end. --n gives scale_tiny's graph sizes, --repeat how many times chain_latency runs its
 * chain (default 7, 3 with --quick; it reports the median). --cpus N runs the bench and the
 * cluster it starts on the first N of the CPUs it may use (its affinity, which the daemons
 * inherit): with 1, chain_latency measures a hop's work without cross-CPU wake-ups, whose cost
 * depends on the machine (a VM's idle vCPU wakes by an interrupt through the host).
 * The plugin cases upload test plugins: they need --secret-file, or the bench's own cluster.
 * Performance is reported, never asserted: this is not a test.
 */
#include <dirent.h>
#include <errno.h>
#include <ftw.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>

#include <linux/perf_event.h>

#include <jansson.h>
#include <lmdb.h>
#include <xxhash.h>
#ifdef SPW_HAVE_XXH_DISPATCH
#include <xxh_x86dispatch.h>
#endif
#include <zstd.h>

#include "harness.h"
#include "spillway/datagen.h"
#include "spillway/spillway.h"
#include "sort_bench.h"

typedef struct bench {
    spillway *cl;
    h_cluster *cluster; /* ours (own_cluster), else an empty one */
    bool own_cluster;
    bool quick;
    bool encrypt; /* --encrypt: every connection of our cluster is TLS */
    int workers;          /* of our own cluster (--workers), default 2 */
    int slots;            /* per worker (--slots), default 1 */
    int spill_threads;    /* the spill case's workers' --spill-threads (--spill-threads) */
    uint64_t scale_n[8];  /* scale_tiny's graph sizes (--n), 0-terminated */
    int repeat;           /* chain_latency's runs (--repeat); 0: 7, or 3 with --quick */
    const char *addr;     /* the scheduler's */
    const char *secret;   /* the secret file, or NULL */
    pid_t pids[128];
    int npids;
} bench;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static _Noreturn void die(bench *b, const char *what, int rc)
{
    fprintf(stderr, "spillway-bench: %s: %s: %s\n", what, spillway_strerror(rc),
            b->cl ? spillway_errmsg(b->cl) : "");
    exit(1);
}

/* ------------------------------------------------------------ memory probe */

static void add_children(bench *b, pid_t pid)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/task/%d/children", (int)pid, (int)pid);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return;
    int child;
    while (fscanf(f, "%d", &child) == 1 && b->npids < 128)
        b->pids[b->npids++] = child;
    fclose(f);
}

/* The processes whose memory a case is charged with. */
static void collect_pids(bench *b)
{
    b->npids = 0;
    b->pids[b->npids++] = getpid();
    if (!b->own_cluster)
        return;
    b->pids[b->npids++] = b->cluster->sched.pid;
    for (int i = 0; i < b->cluster->nworkers; i++) {
        b->pids[b->npids++] = b->cluster->workers[i].pid;
        add_children(b, b->cluster->workers[i].pid);
    }
}

static void hwm_reset(bench *b)
{
    collect_pids(b);
    for (int i = 0; i < b->npids; i++) {
        char path[64];
        snprintf(path, sizeof path, "/proc/%d/clear_refs", (int)b->pids[i]);
        FILE *f = fopen(path, "w");
        if (f != NULL) {
            fputs("5", f);
            fclose(f);
        }
    }
}

static long kib(pid_t pid, const char *field)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return 0;
    long v = 0;
    size_t n = strlen(field);
    while (fgets(line, sizeof line, f) != NULL)
        if (strncmp(line, field, n) == 0 && line[n] == ':')
            v = strtol(line + n + 1, NULL, 10);
    fclose(f);
    return v;
}

/* Sum of peak resident memory (MiB) of the case's processes, with a per-process breakdown. */
static double hwm_total(bench *b, json_t *extra)
{
    collect_pids(b);
    double total = 0;
    json_t *per = json_object();
    for (int i = 0; i < b->npids; i++) {
        double mib = (double)kib(b->pids[i], "VmHWM") / 1024.0;
        total += mib;
        char key[32];
        const char *role =
            i == 0 ? "bench"
                   : (b->pids[i] == b->cluster->sched.pid ? "scheduler" : "worker_or_executor");
        snprintf(key, sizeof key, "%s_%d", role, (int)b->pids[i]);
        json_object_set_new(per, key, json_real((double)(long)(mib * 10) / 10));
    }
    if (extra != NULL)
        json_object_set_new(extra, "rss_mib", per);
    return total;
}

/* Each line carries case, n, seconds, tasks_per_s, peak_rss_mib (VmHWM summed over this
 * process, the scheduler, the workers and their executors, reset before each case) and extra
 * (case-specific figures). */

/* One JSON line: case, n, seconds, tasks_per_s, peak_rss_mib, then top-level fields the
 * case names (top, may be NULL), then extra. Consumes extra and top. */
static void emit_with(const char *name, uint64_t n, double seconds, double tasks_per_s,
                      double peak_mib, json_t *extra, json_t *top)
{
    json_t *o = json_object();
    json_object_set_new(o, "case", json_string(name));
    json_object_set_new(o, "n", json_integer((json_int_t)n));
    json_object_set_new(o, "seconds", json_real(seconds));
    json_object_set_new(o, "tasks_per_s", tasks_per_s > 0 ? json_real(tasks_per_s) : json_null());
    json_object_set_new(o, "peak_rss_mib", json_real((double)(long)(peak_mib * 10) / 10));
    if (top != NULL) {
        json_object_update(o, top);
        json_decref(top);
    }
    json_object_set_new(o, "extra", extra != NULL ? extra : json_object());
    char *s = json_dumps(o, JSON_PRESERVE_ORDER | JSON_COMPACT | JSON_REAL_PRECISION(6));
    puts(s);
    fflush(stdout);
    free(s);
    json_decref(o);
}

static void emit(const char *name, uint64_t n, double seconds, double tasks_per_s,
                 double peak_mib, json_t *extra)
{
    emit_with(name, n, seconds, tasks_per_s, peak_mib, extra, NULL);
}

/* ------------------------------------------------------------------- cases */

static double self_cpu_s(void);

/* This process's CPU seconds in each phase of run_independent: adding the tasks, submitting
 * them (until the scheduler accepted the graph), waiting for the results. */
typedef struct phase_cpu {
    double build, submit, wait;
} phase_cpu;

static void run_independent(bench *b, const char *fn, uint64_t n, spillway_ref *refs,
                            double *t_submit, phase_cpu *cpu)
{
    double t0 = now_s(), c0 = self_cpu_s();
    spillway_graph *g = spillway_graph_new(b->cl);
    for (uint64_t i = 0; i < n; i++) {
        spillway_arg a = spillway_arg_u64(i);
        int rc = spillway_task(g, fn, &a, 1, SPILLWAY_KEEP, &refs[i]);
        if (rc != 0)
            die(b, "task", rc);
    }
    double c1 = self_cpu_s();
    int rc = spillway_submit(g);
    if (rc != 0)
        die(b, "submit", rc);
    spillway_graph_free(g);
    double c2 = self_cpu_s();
    if (t_submit != NULL)
        *t_submit = now_s() - t0;
    rc = spillway_wait(b->cl, refs, n, -1);
    if (rc != 0)
        die(b, "wait", rc);
    if (cpu != NULL)
        *cpu = (phase_cpu){c1 - c0, c2 - c1, self_cpu_s() - c2};
}

/* n independent tasks of fn, one u64 argument each, and their results fetched: the seconds
 * that took, also emitted as case name unless name is NULL. */
static double tiny_tasks_run(bench *b, const char *name, const char *fn)
{
    uint64_t n = b->quick ? 2000 : 20000;
    spillway_ref *refs = calloc(n, sizeof *refs);
    /* Warm-up: executors started, function timings known, as the Dask peer does. */
    run_independent(b, fn, 200, refs, NULL, NULL);
    spillway_release_many(b->cl, refs, 200);
    hwm_reset(b);
    double t0 = now_s(), t_submit;
    run_independent(b, fn, n, refs, &t_submit, NULL);
    uint64_t fetched = 0;
    for (uint64_t i = 0; i < n; i++) {
        void *data;
        size_t len;
        int rc = spillway_get(b->cl, refs[i], -1, &data, &len);
        if (rc != 0)
            die(b, "get", rc);
        fetched += len == 0;
        spillway_free(data);
    }
    double t = now_s() - t0;
    json_t *extra = json_object();
    double peak = hwm_total(b, extra);
    spillway_release_many(b->cl, refs, n);
    json_object_set_new(extra, "per_task_overhead_us", json_real(t / (double)n * 1e6));
    json_object_set_new(extra, "submit_s", json_real(t_submit));
    json_object_set_new(extra, "results_fetched", json_integer((json_int_t)fetched));
    json_object_set_new(extra, "function", json_string(fn));
    json_object_set_new(extra, "encrypted", json_boolean(b->encrypt));
    if (name != NULL)
        emit(name, n, t, (double)n / t, peak, extra);
    else
        json_decref(extra);
    free(refs);
    return t;
}

static void case_tiny_tasks(bench *b)
{
    tiny_tasks_run(b, "tiny_tasks", "noop");
}

/* A client that may upload plugins: ours in a cluster with a secret; else, in our own cluster,
 * one on the scheduler's local socket (uploads need one or the other). *own: close it after. */
static spillway *plugin_client(bench *b, bool *own)
{
    *own = false;
    if (b->secret != NULL)
        return b->cl;
    if (!b->own_cluster) {
        fprintf(stderr, "spillway-bench: the plugin cases upload plugins: give --secret-file\n");
        exit(1);
    }
    char addr[96];
    snprintf(addr, sizeof addr, "unix:@spillway-scheduler-%s", strrchr(b->addr, ':') + 1);
    spillway *up = NULL;
    int rc = spillway_connect(addr, NULL, &up);
    if (rc != 0)
        die(b, addr, rc);
    *own = true;
    return up;
}

static spillway_plugin *plugin_add(bench *b, spillway *up, const void *bytes, size_t len)
{
    spillway_plugin *p = NULL;
    int rc = spillway_plugin_add_mem(up, bytes, len, &p);
    if (rc != 0) {
        fprintf(stderr, "spillway-bench: plugin_add: %s: %s\n", spillway_strerror(rc),
                spillway_errmsg(up));
        exit(1);
    }
    (void)b;
    return p;
}

static uint8_t *file_bytes(bench *b, const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        die(b, path, -errno);
    fseek(f, 0, SEEK_END);
    *len = (size_t)ftell(f);
    rewind(f);
    uint8_t *d = malloc(*len + 16);
    if (d == NULL || fread(d, 1, *len, f) != *len)
        die(b, path, SPW_EIO);
    fclose(f);
    return d;
}

static int cmp_double(const void *x, const void *y)
{
    double a = *(const double *)x, c = *(const double *)y;
    return (a > c) - (a < c);
}

/* tiny_tasks with the noop of an uploaded plugin against the built-in noop, in alternate rounds
 * (the medians, so that a busy machine's noise falls on both alike): what naming an uploaded
 * plugin costs a task once its workers have it (each round's warm-up fetches it). */
static void case_tiny_tasks_plugin(bench *b)
{
    bool own;
    spillway *up = plugin_client(b, &own);
    size_t len;
    uint8_t *bytes = file_bytes(b, SPW_BENCH_PLUGIN, &len);
    spillway_plugin *p = plugin_add(b, up, bytes, len);
    free(bytes);
    char fn[SPILLWAY_FN_MAX];
    spillway_plugin_fn(p, "noop", fn, sizeof fn);
    int rounds = b->repeat > 0 ? b->repeat : b->quick ? 3 : 7;
    if (rounds > 64)
        rounds = 64;
    double tb[64], tp[64];
    json_t *bl = json_array(), *pl = json_array();
    for (int r = 0; r < rounds; r++) {
        tb[r] = tiny_tasks_run(b, NULL, "noop");
        tp[r] = tiny_tasks_run(b, NULL, fn);
        json_array_append_new(bl, json_real(tb[r]));
        json_array_append_new(pl, json_real(tp[r]));
    }
    spillway_plugin_release(p);
    if (own)
        spillway_close(up);
    qsort(tb, (size_t)rounds, sizeof tb[0], cmp_double);
    qsort(tp, (size_t)rounds, sizeof tp[0], cmp_double);
    uint64_t n = b->quick ? 2000 : 20000;
    double mb = tb[rounds / 2], mp = tp[rounds / 2];
    json_t *extra = json_object();
    json_object_set_new(extra, "function", json_string(fn));
    json_object_set_new(extra, "builtin_tasks_per_s", json_real((double)n / mb));
    json_object_set_new(extra, "plugin_vs_builtin", json_real(mb / mp));
    json_object_set_new(extra, "builtin_seconds_runs", bl);
    json_object_set_new(extra, "plugin_seconds_runs", pl);
    emit("tiny_tasks_plugin", n, mp, (double)n / mp, 0, extra);
}


/* The first task of a newly uploaded 1 MiB plugin: from spillway_plugin_add's return to the
 * result of one task of it (first_task_ms), and then to the results of 16 more, which spread
 * over the workers (the queues of a new function are shallow), so each of up to 8 workers
 * fetches and loads it (all_workers_ms). Each run uploads new bytes (the file and a counter
 * appended, which the loader ignores), so no worker has them yet. Medians of --repeat runs. */
static void case_plugin_first_task(bench *b)
{
    bool own;
    spillway *up = plugin_client(b, &own);
    size_t len;
    uint8_t *bytes = file_bytes(b, SPW_BENCH_PLUGIN_1MIB, &len);
    int runs = b->repeat > 0 ? b->repeat : b->quick ? 3 : 7;
    if (runs > 64)
        runs = 64;
    double first[64], all[64];
    uint64_t nonce = (uint64_t)getpid() << 32 ^ (uint64_t)(now_s() * 1e6);
    enum { SPREAD = 16 };
    uint64_t n = SPREAD;
    spillway_ref *refs = calloc(n, sizeof *refs);
    for (int r = 0; r < runs; r++) {
        uint64_t tag = nonce + (uint64_t)r;
        memcpy(bytes + len, &tag, sizeof tag);
        spillway_plugin *p = plugin_add(b, up, bytes, len + sizeof tag);
        double t0 = now_s();
        char fn[SPILLWAY_FN_MAX];
        spillway_plugin_fn(p, "version", fn, sizeof fn);
        spillway_ref one;
        spillway_graph *g = spillway_graph_new(b->cl);
        int rc = spillway_task(g, fn, NULL, 0, SPILLWAY_KEEP, &one);
        if (rc == 0)
            rc = spillway_submit(g);
        spillway_graph_free(g);
        if (rc == 0)
            rc = spillway_wait(b->cl, &one, 1, -1);
        if (rc != 0)
            die(b, "first task", rc);
        first[r] = (now_s() - t0) * 1e3;
        spillway_release(b->cl, one);
        run_independent(b, fn, n, refs, NULL, NULL);
        all[r] = (now_s() - t0) * 1e3;
        spillway_release_many(b->cl, refs, n);
        spillway_plugin_release(p);
    }
    free(refs);
    free(bytes);
    if (own)
        spillway_close(up);
    json_t *extra = json_object();
    json_t *fl = json_array(), *al = json_array();
    for (int r = 0; r < runs; r++) {
        json_array_append_new(fl, json_real(first[r]));
        json_array_append_new(al, json_real(all[r]));
    }
    qsort(first, (size_t)runs, sizeof first[0], cmp_double);
    qsort(all, (size_t)runs, sizeof all[0], cmp_double);
    json_object_set_new(extra, "plugin_bytes", json_integer((json_int_t)(len + 8)));
    json_object_set_new(extra, "spread_tasks", json_integer(SPREAD));
    json_object_set_new(extra, "first_task_ms_runs", fl);
    json_object_set_new(extra, "all_workers_ms_runs", al);
    json_t *top = json_object();
    json_object_set_new(top, "first_task_ms", json_real(first[runs / 2]));
    json_object_set_new(top, "all_workers_ms", json_real(all[runs / 2]));
    emit_with("plugin_first_task", (uint64_t)runs, first[runs / 2] / 1e3, 0, 0, extra, top);
}

static void case_tree_reduce(bench *b)
{
    uint64_t leaves = b->quick ? 500 : 2500;
    hwm_reset(b);
    double t0 = now_s();
    spillway_graph *g = spillway_graph_new(b->cl);
    spillway_ref *level = calloc(leaves, sizeof *level);
    uint64_t ntasks = 0;
    for (uint64_t i = 0; i < leaves; i++) {
        spillway_arg a = spillway_arg_u64(i);
        spillway_task(g, "inc", &a, 1, 0, &level[i]);
        ntasks++;
    }
    uint64_t width = leaves;
    int depth = 0;
    while (width > 1) {
        uint64_t next = 0;
        for (uint64_t i = 0; i + 1 < width; i += 2) {
            spillway_arg a[2] = {spillway_arg_ref(level[i]), spillway_arg_ref(level[i + 1])};
            spillway_task(g, "add", a, 2, width == 2 ? SPILLWAY_KEEP : 0, &level[next++]);
            ntasks++;
        }
        if (width % 2 == 1)
            level[next++] = level[width - 1];
        width = next;
        depth++;
    }
    int rc = spillway_submit(g);
    if (rc != 0)
        die(b, "submit", rc);
    spillway_graph_free(g);
    void *data;
    size_t len;
    rc = spillway_get(b->cl, level[0], -1, &data, &len);
    if (rc != 0)
        die(b, "get", rc);
    uint64_t sum;
    memcpy(&sum, data, 8);
    spillway_free(data);
    double t = now_s() - t0;
    json_t *extra = json_object();
    double peak = hwm_total(b, extra);
    spillway_release(b->cl, level[0]);
    json_object_set_new(extra, "leaves", json_integer((json_int_t)leaves));
    json_object_set_new(extra, "depth", json_integer(depth));
    json_object_set_new(extra, "verified", json_boolean(sum == leaves * (leaves + 1) / 2));
    emit("tree_reduce", ntasks, t, (double)ntasks / t, peak, extra);
    free(level);
}

static void case_linear_chain(bench *b)
{
    uint64_t n = 1000;
    hwm_reset(b);
    double t0 = now_s();
    spillway_graph *g = spillway_graph_new(b->cl);
    spillway_ref prev;
    spillway_arg a = spillway_arg_u64(0);
    spillway_task(g, "inc", &a, 1, 0, &prev);
    for (uint64_t i = 1; i < n; i++) {
        a = spillway_arg_ref(prev);
        spillway_task(g, "inc", &a, 1, i == n - 1 ? SPILLWAY_KEEP : 0, &prev);
    }
    int rc = spillway_submit(g);
    if (rc != 0)
        die(b, "submit", rc);
    spillway_graph_free(g);
    void *data;
    size_t len;
    rc = spillway_get(b->cl, prev, -1, &data, &len);
    if (rc != 0)
        die(b, "get", rc);
    uint64_t v;
    memcpy(&v, data, 8);
    spillway_free(data);
    double t = now_s() - t0;
    json_t *extra = json_object();
    double peak = hwm_total(b, extra);
    spillway_release(b->cl, prev);
    json_object_set_new(extra, "per_task_latency_us", json_real(t / (double)n * 1e6));
    json_object_set_new(extra, "verified", json_boolean(v == n));
    emit("linear_chain", n, t, (double)n / t, peak, extra);
}

/* --------------------------------------------------------- data movement */

static volatile uint64_t sink; /* keeps the compiler from dropping reads */

/* Reads every byte once (what a consumer of the data does at least). */
static void read_through(const void *p, size_t n)
{
    const uint64_t *w = p;
    uint64_t acc = 0;
    for (size_t i = 0; i < n / 8; i++)
        acc ^= w[i];
    sink += acc;
}

static double memcpy_gbps(size_t size, int reps)
{
    uint8_t *a = malloc(size), *b = malloc(size);
    memset(a, 1, size);
    memset(b, 2, size); /* both buffers faulted in: the physical limit, not page faults */
    double best = 0;
    for (int r = 0; r < 3; r++) {
        double t0 = now_s();
        for (int i = 0; i < reps; i++) {
            memcpy(b, a, size);
            sink += b[i % size];
        }
        double gbps = (double)size * reps / (now_s() - t0) / 1e9;
        if (gbps > best)
            best = gbps;
    }
    free(a);
    free(b);
    return best;
}

static void case_put_get(bench *b)
{
    /* A client whose inline limit is one byte: every size goes through a store. */
    spillway_opts o;
    spillway_opts_init(&o);
    o.inline_limit = 1;
    o.name = "spillway-bench-put-get";
    spillway *cl;
    int rc = spillway_connect(b->cluster->addr[0] ? b->cluster->addr : getenv("SPW_BENCH_ADDR"), &o,
                              &cl);
    if (rc != 0)
        die(b, "connect", rc);
    static const size_t sizes[] = {1024, 1 << 20, 64 << 20};
    for (size_t k = 0; k < 3; k++) {
        size_t size = sizes[k];
        int reps = size <= 1024 ? (b->quick ? 200 : 2000) : size <= (1 << 20) ? (b->quick ? 50 : 300)
                                                                               : (b->quick ? 3 : 10);
        uint8_t *data = malloc(size);
        for (size_t i = 0; i < size; i++)
            data[i] = (uint8_t)(i * 131 + k);
        hwm_reset(b);
        double put_s = 0, get_s = 0, copy_s = 0, cold_put_s = 0;
        int zero_copy = 1;
        bool ok = true;
        /* The first puts touch fresh shared pages on each worker (the kernel zeroes them once);
         * they are timed apart as put_cold_gbps, the rest are the steady state. */
        int warm = 2;
        for (int r = -warm; r < reps; r++) {
            spillway_ref ref;
            double t0 = now_s();
            rc = spillway_put(cl, data, size, &ref);
            double t1 = now_s();
            if (rc != 0)
                die(b, "put", rc);
            spillway_view v;
            rc = spillway_get_view(cl, ref, -1, &v);
            if (rc != 0)
                die(b, "get", rc);
            read_through(v.data, v.len);
            zero_copy &= v.zero_copy;
            ok = ok && v.len == size && memcmp((const uint8_t *)v.data + size - 8, data + size - 8, 8) == 0;
            spillway_view_release(cl, &v);
            double t2 = now_s();
            void *copy;
            size_t len;
            if (r >= 0 && (r < 3 || size < (1 << 20))) {
                rc = spillway_get(cl, ref, -1, &copy, &len);
                if (rc != 0)
                    die(b, "get copy", rc);
                ok = ok && len == size && memcmp(copy, data, size) == 0;
                spillway_free(copy);
            }
            double t3 = now_s();
            spillway_release(cl, ref);
            if (r < 0) {
                cold_put_s += t1 - t0;
                continue;
            }
            put_s += t1 - t0;
            get_s += t2 - t1;
            copy_s += t3 - t2;
        }
        int copies = size < (1 << 20) ? reps : 3;
        json_t *extra = json_object();
        double peak = hwm_total(b, extra);
        json_object_set_new(extra, "size", json_integer((json_int_t)size));
        json_object_set_new(extra, "reps", json_integer(reps));
        json_object_set_new(extra, "put_gbps", json_real((double)size * reps / put_s / 1e9));
        json_object_set_new(extra, "get_gbps", json_real((double)size * reps / get_s / 1e9));
        json_object_set_new(extra, "get_copy_gbps", json_real((double)size * copies / copy_s / 1e9));
        json_object_set_new(extra, "put_cold_gbps", json_real((double)size * warm / cold_put_s / 1e9));
        json_object_set_new(extra, "memcpy_gbps", json_real(memcpy_gbps(size, reps)));
        json_object_set_new(extra, "put_us", json_real(put_s / reps * 1e6));
        json_object_set_new(extra, "get_us", json_real(get_s / reps * 1e6));
        json_object_set_new(extra, "zero_copy", json_boolean(zero_copy));
        json_object_set_new(extra, "verified", json_boolean(ok));
        /* The compared figures at the top level too, for easy comparison across runs. */
        json_t *top = json_object();
        json_object_set(top, "size", json_object_get(extra, "size"));
        json_object_set(top, "put_gbps", json_object_get(extra, "put_gbps"));
        json_object_set(top, "get_gbps", json_object_get(extra, "get_gbps"));
        json_object_set(top, "memcpy_gbps", json_object_get(extra, "memcpy_gbps"));
        emit_with("put_get", (uint64_t)reps, put_s + get_s, 0, peak, extra, top);
        free(data);
    }
    spillway_close(cl);
}

typedef struct tcp_arg {
    int fd;
    size_t size;
} tcp_arg;

static void *tcp_sender(void *p)
{
    tcp_arg *a = p;
    uint8_t *buf = malloc(4 << 20);
    memset(buf, 7, 4 << 20);
    size_t left = a->size;
    while (left > 0) {
        size_t n = left < (4u << 20) ? left : (4u << 20);
        ssize_t w = write(a->fd, buf, n);
        if (w <= 0)
            break;
        left -= (size_t)w;
    }
    free(buf);
    return NULL;
}

/* A raw loopback TCP copy of size bytes: the limit a worker-to-worker transfer approaches. */
static double tcp_gbps(size_t size)
{
    int ls = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sin = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t sl = sizeof sin;
    if (bind(ls, (struct sockaddr *)&sin, sizeof sin) != 0 || listen(ls, 1) != 0 ||
        getsockname(ls, (struct sockaddr *)&sin, &sl) != 0)
        return 0;
    int cs = socket(AF_INET, SOCK_STREAM, 0);
    if (connect(cs, (struct sockaddr *)&sin, sizeof sin) != 0)
        return 0;
    int as = accept(ls, NULL, NULL);
    uint8_t *dst = malloc(size);
    memset(dst, 0, size);
    double best = 0;
    for (int r = 0; r < 3; r++) {
        tcp_arg a = {cs, size};
        pthread_t th;
        double t0 = now_s();
        pthread_create(&th, NULL, tcp_sender, &a);
        size_t got = 0;
        while (got < size) {
            ssize_t n = read(as, dst + got, size - got);
            if (n <= 0)
                break;
            got += (size_t)n;
        }
        pthread_join(th, NULL);
        double gbps = (double)size / (now_s() - t0) / 1e9;
        if (gbps > best)
            best = gbps;
    }
    free(dst);
    close(as);
    close(cs);
    close(ls);
    return best;
}

static void case_transfer(bench *b)
{
    if (!b->own_cluster) {
        fprintf(stderr, "spillway-bench: transfer needs its own cluster (named workers)\n");
        return;
    }
    size_t size = 64u << 20;
    int reps = b->quick ? 2 : 5;
    double best = 0, total = 0;
    bool ok = true;
    hwm_reset(b);
    for (int r = 0; r < reps; r++) {
        /* Made on worker 0, needed on worker 1: the bytes go worker to worker. */
        spillway_graph *g = spillway_graph_new(b->cl);
        spillway_ref made, used;
        spillway_arg fa[2] = {spillway_arg_u64(size), spillway_arg_bytes("xfer", 4)};
        spillway_graph_place(g, "bench-w0");
        spillway_task(g, "fill", fa, 2, SPILLWAY_KEEP, &made);
        int rc = spillway_submit(g);
        spillway_graph_free(g);
        if (rc == 0)
            rc = spillway_wait(b->cl, &made, 1, -1);
        if (rc != 0)
            die(b, "fill", rc);
        double t0 = now_s();
        g = spillway_graph_new(b->cl);
        spillway_graph_place(g, "bench-w1");
        spillway_arg la = spillway_arg_ref(made);
        spillway_task(g, "len", &la, 1, SPILLWAY_KEEP, &used);
        rc = spillway_submit(g);
        spillway_graph_free(g);
        void *data = NULL;
        size_t len = 0;
        if (rc == 0)
            rc = spillway_get(b->cl, used, -1, &data, &len);
        if (rc != 0)
            die(b, "transfer", rc);
        double t = now_s() - t0;
        uint64_t n;
        memcpy(&n, data, 8);
        spillway_free(data);
        ok = ok && n == size;
        spillway_ref both[] = {made, used};
        spillway_release_many(b->cl, both, 2);
        double gbps = (double)size / t / 1e9;
        total += t;
        if (gbps > best)
            best = gbps;
    }
    json_t *extra = json_object();
    double peak = hwm_total(b, extra);
    json_object_set_new(extra, "bytes", json_integer((json_int_t)size));
    json_object_set_new(extra, "gbps", json_real(best));
    json_object_set_new(extra, "mean_gbps", json_real((double)size * reps / total / 1e9));
    json_object_set_new(extra, "tcp_gbps", json_real(tcp_gbps(size)));
    json_object_set_new(extra, "reps", json_integer(reps));
    json_object_set_new(extra, "verified", json_boolean(ok));
    json_object_set_new(extra, "encrypted", json_boolean(b->encrypt));
    /* TLS is sealed in user space: proto never asks OpenSSL for kernel TLS (see proto/README). */
    if (b->encrypt)
        json_object_set_new(extra, "ktls", json_false());
    json_t *top = json_object();
    json_object_set(top, "bytes", json_object_get(extra, "bytes"));
    json_object_set(top, "gbps", json_object_get(extra, "gbps"));
    json_object_set(top, "tcp_gbps", json_object_get(extra, "tcp_gbps"));
    emit_with("transfer", (uint64_t)reps, total, 0, peak, extra, top);
}

/* ------------------------------------------------------------------- spill */

/*
 * spill: a cluster of its own (two workers, one slot, small stores spilling to a temp dir) is
 * given 10 x its total capacity in 8 MiB task outputs, all kept, then every object is read back
 * into the bench in creation order and checked byte for byte against the same generator run
 * here. Done once with compressible data (walk_f64) and once with incompressible (random).
 * The store's own figures (spill and restore bytes and time on its lane, bytes on disk raw and
 * stored) come from `spillway-ctl --json status`, read once they have stopped changing; the
 * memory of each worker (with its executors) is sampled every 5 ms from a thread. The limit to
 * compare with is measured here too: zstd at the spill level on the same kind of bytes, one
 * thread, and an LMDB write of what zstd produced.
 */

#define SPILL_OBJ (8u << 20)   /* bytes per object */
#define SPILL_CHUNK (4u << 20) /* raw bytes per spill record, as the store writes them */
#define SPILL_TXN (16u << 20)  /* stored bytes per LMDB write transaction, as the store */
#define SPILL_WORKERS 2 /* at most; --spill-workers */
static int spill_workers = SPILL_WORKERS;
#define SPILL_GROUP 16 /* a worker and its executors */
#define SPILL_LEVEL 1  /* the workers' default --spill-compression-level */

/* The generators of worker/src/builtins.c, copied exactly: the bytes must be identical. */
/* The generators of the random and walk_f64 tasks (spillway/datagen.h). */
static void gen_random(uint8_t *out, uint64_t n, uint64_t seed)
{
    spw_gen_random(out, n, seed);
}

static void gen_walk_f64(double *out, uint64_t count, uint64_t seed)
{
    spw_gen_walk_f64((uint8_t *)(void *)out, count, seed);
}

typedef struct spill_kind {
    const char *data; /* the `data` field */
    const char *fn;   /* the built-in task function */
    uint64_t seed0;   /* object i has seed seed0 + i */
} spill_kind;

static const spill_kind spill_kinds[] = {
    {"compressible", "walk_f64", 1000000},
    {"random", "random", 2000000},
};

/* One object's bytes, as the worker's task makes them. */
static void spill_gen(const spill_kind *k, uint64_t seed, uint8_t *out)
{
    if (strcmp(k->fn, "walk_f64") == 0)
        gen_walk_f64((double *)(void *)out, SPILL_OBJ / 8, seed);
    else
        gen_random(out, SPILL_OBJ, seed);
}

static void spill_task_args(const spill_kind *k, uint64_t seed, spillway_arg a[2])
{
    a[0] = spillway_arg_u64(strcmp(k->fn, "walk_f64") == 0 ? SPILL_OBJ / 8 : SPILL_OBJ);
    a[1] = spillway_arg_u64(seed);
}

/* ------------------------------------------------------- the memory probe */

typedef struct probe_worker {
    pid_t pid;
    pid_t group[SPILL_GROUP]; /* the worker, then its executors */
    int ngroup;
    int arena_fd;           /* the arena memfd's number in the worker, -1 until found */
    double peak_mem_kib;    /* max over samples of sum(RssAnon + RssShmem) over the group */
    double peak_unique_kib; /* max of sum(RssAnon) over the group + the arena's resident
                             * size: each shared page counted once */
    double peak_file_kib;   /* max RssFile of the worker process (its LMDB map, binaries) */
    double peak_arena_kib;  /* max resident size of the arena memfd */
    double at_peak_kib[4];  /* at peak_mem: worker anon, worker shmem, executors anon, shmem */
} probe_worker;

typedef struct spill_probe {
    pthread_t th;
    pthread_mutex_t mu;
    bool stop;
    int nworkers;
    probe_worker w[SPILL_WORKERS];
    uint64_t samples;
    double max_gap_s; /* longest time between two samples */
    double cpu_s;     /* CPU time the sampling thread has used */
    bool niced;       /* the sampling thread runs at nice -10 */
} spill_probe;

/* Reads "Name: N kB" fields of a /proc file into v (kB), 0 for fields not found. */
static void proc_fields(const char *path, const char *const *names, long *v, int n)
{
    for (int i = 0; i < n; i++)
        v[i] = 0;
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return;
    char line[256];
    while (fgets(line, sizeof line, f) != NULL) {
        for (int i = 0; i < n; i++) {
            size_t len = strlen(names[i]);
            if (strncmp(line, names[i], len) == 0 && line[len] == ':')
                v[i] = strtol(line + len + 1, NULL, 10);
        }
    }
    fclose(f);
}

/* The worker and the children of each of its threads (the executors). */
static void probe_group(probe_worker *pw)
{
    pw->ngroup = 0;
    pw->group[pw->ngroup++] = pw->pid;
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/task", (int)pw->pid);
    DIR *d = opendir(path);
    if (d == NULL)
        return;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        char cpath[300];
        snprintf(cpath, sizeof cpath, "/proc/%d/task/%s/children", (int)pw->pid, e->d_name);
        FILE *f = fopen(cpath, "r");
        if (f == NULL)
            continue;
        int child;
        while (fscanf(f, "%d", &child) == 1 && pw->ngroup < SPILL_GROUP)
            pw->group[pw->ngroup++] = child;
        fclose(f);
    }
    closedir(d);
}

static void probe_find_arena(probe_worker *pw)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/fd", (int)pw->pid);
    DIR *d = opendir(path);
    if (d == NULL)
        return;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        char lpath[300], link[256];
        snprintf(lpath, sizeof lpath, "/proc/%d/fd/%s", (int)pw->pid, e->d_name);
        ssize_t n = readlink(lpath, link, sizeof link - 1);
        if (n <= 0)
            continue;
        link[n] = '\0';
        if (strstr(link, "memfd:spillway-") != NULL) {
            pw->arena_fd = atoi(e->d_name);
            break;
        }
    }
    closedir(d);
}

static void probe_sample(spill_probe *p, bool refresh)
{
    static const char *const st_names[] = {"RssAnon", "RssShmem", "RssFile"};
    for (int i = 0; i < p->nworkers; i++) {
        probe_worker *pw = &p->w[i];
        if (refresh || pw->ngroup == 0)
            probe_group(pw);
        if (pw->arena_fd < 0)
            probe_find_arena(pw);
        double mem = 0, file = 0, parts[4] = {0, 0, 0, 0};
        for (int k = 0; k < pw->ngroup; k++) {
            char path[64];
            long v[3];
            snprintf(path, sizeof path, "/proc/%d/status", (int)pw->group[k]);
            proc_fields(path, st_names, v, 3);
            mem += (double)(v[0] + v[1]);
            parts[k == 0 ? 0 : 2] += (double)v[0];
            parts[k == 0 ? 1 : 3] += (double)v[1];
            if (k == 0)
                file = (double)v[2];
        }
        double arena = 0;
        if (pw->arena_fd >= 0) {
            char path[64];
            struct stat sb;
            snprintf(path, sizeof path, "/proc/%d/fd/%d", (int)pw->pid, pw->arena_fd);
            if (stat(path, &sb) == 0)
                arena = (double)sb.st_blocks * 512 / 1024;
        }
        pthread_mutex_lock(&p->mu);
        if (mem > pw->peak_mem_kib) {
            pw->peak_mem_kib = mem;
            memcpy(pw->at_peak_kib, parts, sizeof parts);
        }
        if (parts[0] + parts[2] + arena > pw->peak_unique_kib)
            pw->peak_unique_kib = parts[0] + parts[2] + arena;
        if (file > pw->peak_file_kib)
            pw->peak_file_kib = file;
        if (arena > pw->peak_arena_kib)
            pw->peak_arena_kib = arena;
        pthread_mutex_unlock(&p->mu);
    }
}

static void *probe_main(void *arg)
{
    spill_probe *p = arg;
    /* Ahead of the busy workers on a small machine, so no peak slips between two samples; only
     * if allowed (root), and it costs them little: a sample takes well under a millisecond. */
    p->niced = setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), -10) == 0;
    double last = now_s();
    for (uint64_t n = 0;; n++) {
        pthread_mutex_lock(&p->mu);
        bool stop = p->stop;
        pthread_mutex_unlock(&p->mu);
        if (stop)
            break;
        /* Executors are looked up every 100 ms. (Pss from smaps_rollup would count shared
         * pages once too, but it walks the page tables of the whole resident LMDB map, costing
         * milliseconds, and splits the arena with the bench, which maps it to read.) */
        probe_sample(p, n % 20 == 0);
        double t = now_s();
        struct timespec cpu;
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &cpu);
        pthread_mutex_lock(&p->mu);
        p->cpu_s = (double)cpu.tv_sec + (double)cpu.tv_nsec / 1e9;
        p->samples++;
        if (n > 0 && t - last > p->max_gap_s)
            p->max_gap_s = t - last;
        pthread_mutex_unlock(&p->mu);
        last = t;
        struct timespec ts = {0, 5 * 1000000};
        nanosleep(&ts, NULL);
    }
    return NULL;
}

static void probe_start(spill_probe *p, const h_cluster *c)
{
    memset(p, 0, sizeof *p);
    pthread_mutex_init(&p->mu, NULL);
    p->nworkers = c->nworkers;
    for (int i = 0; i < p->nworkers; i++) {
        p->w[i].pid = c->workers[i].pid;
        p->w[i].arena_fd = -1;
    }
    pthread_create(&p->th, NULL, probe_main, p);
}

static void probe_reset(spill_probe *p)
{
    pthread_mutex_lock(&p->mu);
    for (int i = 0; i < p->nworkers; i++) {
        p->w[i].peak_mem_kib = p->w[i].peak_unique_kib = 0;
        p->w[i].peak_file_kib = p->w[i].peak_arena_kib = 0;
        memset(p->w[i].at_peak_kib, 0, sizeof p->w[i].at_peak_kib);
    }
    p->samples = 0;
    p->max_gap_s = 0;
    pthread_mutex_unlock(&p->mu);
}

static void probe_stop(spill_probe *p)
{
    pthread_mutex_lock(&p->mu);
    p->stop = true;
    pthread_mutex_unlock(&p->mu);
    pthread_join(p->th, NULL);
    pthread_mutex_destroy(&p->mu);
}

/* ------------------------------------------------- the workers' figures */

enum {
    WS_CAPACITY,
    WS_USED,
    WS_SPILLED,
    WS_STORED,
    WS_SPILL_COUNT,
    WS_SPILL_BYTES,
    WS_SPILL_NS,
    WS_RESTORE_COUNT,
    WS_RESTORE_BYTES,
    WS_RESTORE_NS,
    WS_TASKS_DONE,
    WS_TASKS_FAILED,
    WS_OBJS_DISK,
    WS_OBJS_MEM,
    WS_PEAK_USED,
    WS_EVICTIONS,
    WS_COUNT
};

static const char *const ws_keys[WS_COUNT] = {
    "capacity",          "used",         "spilled_bytes",   "spilled_stored_bytes", "spill_count",
    "spill_total_bytes", "spill_ns",     "restore_count",   "restore_total_bytes",  "restore_ns",
    "tasks_done",        "tasks_failed", "objects_spilled", "objects_in_memory",    "peak_used",
    "evictions",
};

typedef struct wstats {
    uint64_t v[WS_COUNT];
} wstats;

/* Reads every spill worker's figures from `spillway-ctl --json status`, by name. */
static bool spill_status(const h_cluster *c, wstats out[SPILL_WORKERS])
{
    const char *argv[] = {h_bin("spillway-ctl"), "--scheduler", c->addr, "--json", "status", NULL};
    char *text = NULL;
    int rc = h_run(argv, &text);
    json_t *doc = rc == 0 ? json_loads(text, 0, NULL) : NULL;
    free(text);
    if (doc == NULL)
        return false;
    int found = 0;
    size_t i;
    json_t *w;
    json_array_foreach(json_object_get(doc, "workers"), i, w)
    {
        const char *name = json_string_value(json_object_get(w, "name"));
        int k;
        if (name == NULL || sscanf(name, "spill-w%d", &k) != 1 || k < 0 || k >= spill_workers)
            continue;
        json_t *mem = json_object_get(w, "memory");
        for (int f = 0; f < WS_COUNT; f++) {
            json_t *v = json_object_get(mem, ws_keys[f]);
            if (v == NULL)
                v = json_object_get(w, ws_keys[f]);
            out[k].v[f] = (uint64_t)json_integer_value(v);
        }
        found++;
    }
    json_decref(doc);
    return found == spill_workers;
}

static uint64_t ws_sum(const wstats *w, int f)
{
    uint64_t s = 0;
    for (int i = 0; i < spill_workers; i++)
        s += w[i].v[f];
    return s;
}

typedef bool (*ws_cond)(const wstats *now, const wstats *base, uint64_t arg);

/* Polls the figures until cond holds and they have not changed for longer than a heartbeat
 * (1 s), or, if cond never holds, until they have not changed for 5 s. Returns whether cond
 * held; *out gets the last figures. */
static bool spill_settle(const h_cluster *c, ws_cond cond, const wstats *base, uint64_t arg,
                         wstats out[SPILL_WORKERS], double *waited)
{
    double t0 = now_s(), since = t0;
    wstats last[SPILL_WORKERS] = {0};
    bool have = false;
    for (;;) {
        wstats cur[SPILL_WORKERS] = {0};
        double t = now_s();
        if (spill_status(c, cur)) {
            if (!have || memcmp(cur, last, sizeof cur) != 0) {
                memcpy(last, cur, sizeof cur);
                since = t;
                have = true;
            }
            bool ok = cond == NULL || cond(cur, base, arg);
            if ((ok && t - since > 1.2) || t - since > 5.0 || t - t0 > 120) {
                memcpy(out, last, sizeof last);
                *waited = now_s() - t0;
                return ok;
            }
        }
        struct timespec ts = {0, 200 * 1000000};
        nanosleep(&ts, NULL);
    }
}

static bool cond_tasks_done(const wstats *now, const wstats *base, uint64_t n)
{
    uint64_t done = ws_sum(now, WS_TASKS_DONE) - ws_sum(base, WS_TASKS_DONE);
    uint64_t failed = ws_sum(now, WS_TASKS_FAILED) - ws_sum(base, WS_TASKS_FAILED);
    return done + failed >= n;
}

static bool cond_restored(const wstats *now, const wstats *base, uint64_t bytes)
{
    return ws_sum(now, WS_RESTORE_BYTES) - ws_sum(base, WS_RESTORE_BYTES) >= bytes;
}

static bool cond_empty(const wstats *now, const wstats *base, uint64_t unused)
{
    (void)base;
    (void)unused;
    return ws_sum(now, WS_USED) == 0 && ws_sum(now, WS_SPILLED) == 0;
}

/* CPU seconds (user + system) in a /proc stat file, 0 if it is gone. */
static double stat_cpu_s(const char *path)
{
    char buf[1024];
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return 0;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *p = strrchr(buf, ')'); /* the command name may hold anything */
    unsigned long ut = 0, st = 0;
    if (p == NULL ||
        sscanf(p + 1, " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st) != 2)
        return 0;
    return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

/* Where a worker's CPU time went: its loop thread, its other threads (the libuv pool, which
 * runs the spill lane's compress/write, restore and delete jobs) and its executors. */
typedef struct wcpu {
    double main_s;
    double pool_s;
    double exec_s;
} wcpu;

static void worker_cpu(spill_probe *p, int i, wcpu *out)
{
    memset(out, 0, sizeof *out);
    pthread_mutex_lock(&p->mu);
    probe_worker pw = p->w[i];
    pthread_mutex_unlock(&p->mu);
    char path[300];
    snprintf(path, sizeof path, "/proc/%d/task", (int)pw.pid);
    DIR *d = opendir(path);
    if (d != NULL) {
        struct dirent *e;
        while ((e = readdir(d)) != NULL) {
            if (e->d_name[0] == '.')
                continue;
            snprintf(path, sizeof path, "/proc/%d/task/%s/stat", (int)pw.pid, e->d_name);
            double s = stat_cpu_s(path);
            if (atoi(e->d_name) == (int)pw.pid)
                out->main_s += s;
            else
                out->pool_s += s;
        }
        closedir(d);
    }
    for (int k = 1; k < pw.ngroup; k++) {
        snprintf(path, sizeof path, "/proc/%d/stat", (int)pw.group[k]);
        out->exec_s += stat_cpu_s(path);
    }
}

/* CPU seconds (user + system) of a whole process, threads that have exited included, in
 * nanoseconds through its CPU-time clock (clock_getcpuclockid; any process may be read); from
 * its /proc stat file in clock ticks (10 ms) if that clock cannot be had; 0 if it is gone. */
static double proc_cpu_s(pid_t pid)
{
    clockid_t clk;
    struct timespec ts;
    if (clock_getcpuclockid(pid, &clk) == 0 && clock_gettime(clk, &ts) == 0)
        return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    return stat_cpu_s(path);
}

static double self_cpu_s(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
           (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
}

/* The machine's CPU, for the write's breakdown: busy and idle time summed over every core
 * (/proc/stat), the spill cluster's scheduler's, and this process's (the client and the
 * memory probe; the zstd reference runs outside the windows this is read for). */
typedef struct mcpu {
    double t; /* when read */
    double busy_s;
    double idle_s;
    double sched_s;
    double bench_s;
} mcpu;

static void machine_cpu(const h_cluster *c, mcpu *out)
{
    memset(out, 0, sizeof *out);
    out->t = now_s();
    unsigned long long v[8] = {0};
    FILE *f = fopen("/proc/stat", "r");
    if (f != NULL) {
        if (fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3],
                   &v[4], &v[5], &v[6], &v[7]) != 8)
            memset(v, 0, sizeof v);
        fclose(f);
    }
    double tck = (double)sysconf(_SC_CLK_TCK);
    /* user nice system idle iowait irq softirq steal (guest time is inside user) */
    out->busy_s = (double)(v[0] + v[1] + v[2] + v[5] + v[6] + v[7]) / tck;
    out->idle_s = (double)(v[3] + v[4]) / tck;
    out->sched_s = proc_cpu_s(c->sched.pid);
    out->bench_s = self_cpu_s();
}

/* Counts lines of the workers' logs so far: map growths, and errors or warnings (syslog
 * prefixes <3> and <4>); keeps the first such line in first (may stay empty). */
static void spill_log_scan(const h_cluster *c, int *grows, int *warns, char *first, size_t cap)
{
    *grows = *warns = 0;
    for (int i = 0; i < c->nworkers; i++) {
        FILE *f = fopen(c->workers[i].log, "r");
        if (f == NULL)
            continue;
        char line[1024];
        while (fgets(line, sizeof line, f) != NULL) {
            if (strstr(line, "spill map grown") != NULL)
                (*grows)++;
            if (strncmp(line, "<3>", 3) == 0 || strncmp(line, "<4>", 3) == 0) {
                if ((*warns)++ == 0 && first[0] == '\0') {
                    line[strcspn(line, "\n")] = '\0';
                    snprintf(first, cap, "%.200s", line);
                }
            }
        }
        fclose(f);
    }
}

/* ------------------------------------------------------- the local limit */

typedef struct spill_limit {
    double zstd_gbps;         /* raw bytes compressed per second by `threads` threads at once,
                                 best of 5 */
    double zstd_1t_gbps;      /* the same, one thread */
    double zstd_1t_cpu_gbps;  /* the same per second of that thread's CPU time, best of 5:
                                 what a lane could reach on a core of its own, whatever the
                                 load */
    double zstd_ratio;        /* raw / compressed for the sample */
    double zstd_chunked_gbps; /* the same in 4 MiB calls, as the store compresses */
    double zstd_all_gbps;     /* all stores' lanes at once: workers x threads threads */
    double unzstd_1t_gbps;    /* raw bytes per second decompressed from 4 MiB records, one
                                 thread, best of 5 */
    double xxh3_gbps;         /* the record checksum the store also computes */
    double lmdb_write_gbps;   /* stored bytes written per second (0 if not measured) */
    double limit_gbps;        /* raw bytes per second of compress + write, one after the other */
} spill_limit;

static double self_thread_cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int lmdb_env_write(const char *dir, const uint8_t *const *recs, const size_t *lens,
                          int nrecs, int copies, double *seconds)
{
    MDB_env *env = NULL;
    int rc = mdb_env_create(&env);
    if (rc == 0)
        rc = mdb_env_set_mapsize(env, (size_t)4 << 30);
    if (rc == 0)
        rc = mdb_env_open(env, dir, MDB_NOSYNC | MDB_NOMETASYNC | MDB_NOTLS | MDB_NORDAHEAD, 0600);
    MDB_txn *txn = NULL;
    MDB_dbi dbi;
    if (rc == 0)
        rc = mdb_txn_begin(env, NULL, 0, &txn);
    if (rc == 0)
        rc = mdb_dbi_open(txn, NULL, 0, &dbi);
    if (rc == 0) {
        rc = mdb_txn_commit(txn);
        txn = NULL;
    }
    double t0 = now_s();
    uint64_t in_txn = 0;
    if (rc == 0)
        rc = mdb_txn_begin(env, NULL, 0, &txn);
    for (int c = 0; rc == 0 && c < copies; c++) {
        for (int r = 0; rc == 0 && r < nrecs; r++) {
            uint8_t key[20] = {0};
            uint32_t id = (uint32_t)(c * nrecs + r);
            memcpy(key, &id, 4);
            MDB_val k = {sizeof key, key}, v = {lens[r], (void *)recs[r]};
            rc = mdb_put(txn, dbi, &k, &v, 0);
            in_txn += lens[r];
            if (rc == 0 && in_txn >= SPILL_TXN) {
                rc = mdb_txn_commit(txn);
                txn = NULL;
                in_txn = 0;
                if (rc == 0)
                    rc = mdb_txn_begin(env, NULL, 0, &txn);
            }
        }
    }
    if (rc == 0) {
        rc = mdb_txn_commit(txn);
        txn = NULL;
    }
    *seconds = now_s() - t0;
    if (txn != NULL)
        mdb_txn_abort(txn);
    if (env != NULL)
        mdb_env_close(env);
    char path[PATH_MAX + 16];
    snprintf(path, sizeof path, "%s/data.mdb", dir);
    unlink(path);
    snprintf(path, sizeof path, "%s/lock.mdb", dir);
    unlink(path);
    return rc;
}

/* zstd at the spill level on an 8 MiB sample of the kind (a seed no object uses), then an LMDB
 * write of 64 MiB of raw data's records (stored as the store does: compressed unless that
 * saves under 1/16, in 4 MiB chunks, 16 MiB per transaction) in a fresh env beside the spills. */
typedef struct zstd_thread {
    const uint8_t *raw;
    pthread_t th;
    double seconds;
} zstd_thread;

static void *zstd_thread_run(void *arg)
{
    zstd_thread *t = arg;
    size_t cap = ZSTD_compressBound(SPILL_OBJ);
    uint8_t *z = malloc(cap);
    ZSTD_CCtx *cctx = ZSTD_createCCtx();
    double t0 = now_s();
    ZSTD_compressCCtx(cctx, z, cap, t->raw, SPILL_OBJ, SPILL_LEVEL);
    t->seconds = now_s() - t0;
    ZSTD_freeCCtx(cctx);
    free(z);
    return NULL;
}

/* Raw bytes per second of `threads` threads each compressing raw at once (best of 5, after a
 * warm-up run): what `threads` spill lanes could reach on this data. */
static double zstd_parallel_gbps(const uint8_t *raw, int threads)
{
    zstd_thread t[128]; /* --spill-threads (at most 64) x --spill-workers (at most 2) */
    double best = 0;
    for (int r = 0; r < 6; r++) {
        double t0 = now_s();
        for (int i = 0; i < threads; i++) {
            t[i].raw = raw;
            pthread_create(&t[i].th, NULL, zstd_thread_run, &t[i]);
        }
        for (int i = 0; i < threads; i++)
            pthread_join(t[i].th, NULL);
        double g = (double)SPILL_OBJ * threads / (now_s() - t0) / 1e9;
        if (r > 0 && g > best)
            best = g;
    }
    return best;
}

/* zstd_gbps and zstd_all_gbps measured again, on a sample of the kind as the first time:
 * the machine's load may have changed during the write. */
static void spill_zstd_again(const spill_kind *k, int threads, double *gbps, double *all_gbps)
{
    uint8_t *raw = malloc(SPILL_OBJ);
    spill_gen(k, k->seed0 - 1, raw);
    *gbps = zstd_parallel_gbps(raw, threads);
    *all_gbps = spill_workers > 1 ? zstd_parallel_gbps(raw, threads * spill_workers) : *gbps;
    free(raw);
}

static void spill_measure_limit(const spill_kind *k, const char *dir, int threads,
                                spill_limit *out)
{
    memset(out, 0, sizeof *out);
    uint8_t *raw = malloc(SPILL_OBJ);
    spill_gen(k, k->seed0 - 1, raw);
    size_t cap = ZSTD_compressBound(SPILL_OBJ);
    uint8_t *z = malloc(cap);
    ZSTD_CCtx *cctx = ZSTD_createCCtx();
    size_t zlen = 0;
    for (int r = 0; r < 6; r++) {
        double t0 = now_s(), c0 = self_thread_cpu_s();
        zlen = ZSTD_compressCCtx(cctx, z, cap, raw, SPILL_OBJ, SPILL_LEVEL);
        double t = now_s() - t0, c = self_thread_cpu_s() - c0;
        if (ZSTD_isError(zlen)) {
            fprintf(stderr, "spillway-bench: zstd: %s\n", ZSTD_getErrorName(zlen));
            break;
        }
        if (r > 0 && SPILL_OBJ / t / 1e9 > out->zstd_1t_gbps) /* the first run warms up */
            out->zstd_1t_gbps = SPILL_OBJ / t / 1e9;
        if (r > 0 && c > 0 && SPILL_OBJ / c / 1e9 > out->zstd_1t_cpu_gbps)
            out->zstd_1t_cpu_gbps = SPILL_OBJ / c / 1e9;
    }
    out->zstd_gbps = zstd_parallel_gbps(raw, threads);
    out->zstd_all_gbps =
        spill_workers > 1 ? zstd_parallel_gbps(raw, threads * spill_workers) : out->zstd_gbps;
    out->zstd_ratio = ZSTD_isError(zlen) || zlen == 0 ? 0 : (double)SPILL_OBJ / (double)zlen;
    /* Chunked, as the store calls it, keeping each chunk's record for the LMDB write. */
    enum { NCH = SPILL_OBJ / SPILL_CHUNK };
    uint8_t *recs[NCH];
    size_t lens[NCH];
    size_t ccap = 32 + ZSTD_compressBound(SPILL_CHUNK);
    for (int c = 0; c < NCH; c++) {
        recs[c] = malloc(ccap);
        memset(recs[c], 0, 32);
    }
    for (int r = 0; r < 6; r++) {
        double t0 = now_s();
        for (int c = 0; c < NCH; c++) {
            size_t n = ZSTD_compressCCtx(cctx, recs[c] + 32, ccap - 32,
                                         raw + (size_t)c * SPILL_CHUNK, SPILL_CHUNK, SPILL_LEVEL);
            lens[c] = ZSTD_isError(n) || n >= SPILL_CHUNK - SPILL_CHUNK / 16 ? SPILL_CHUNK : n;
        }
        double t = now_s() - t0;
        if (r > 0 && SPILL_OBJ / t / 1e9 > out->zstd_chunked_gbps)
            out->zstd_chunked_gbps = SPILL_OBJ / t / 1e9;
    }
    ZSTD_DCtx *dctx = ZSTD_createDCtx();
    uint8_t *back = malloc(SPILL_OBJ);
    for (int r = 0; r < 6; r++) {
        double t0 = now_s();
        for (int c = 0; c < NCH; c++) {
            if (lens[c] < SPILL_CHUNK)
                ZSTD_decompressDCtx(dctx, back + (size_t)c * SPILL_CHUNK, SPILL_CHUNK,
                                    recs[c] + 32, lens[c]);
            else
                memcpy(back + (size_t)c * SPILL_CHUNK, raw + (size_t)c * SPILL_CHUNK,
                       SPILL_CHUNK);
        }
        double t = now_s() - t0;
        if (r > 0 && SPILL_OBJ / t / 1e9 > out->unzstd_1t_gbps)
            out->unzstd_1t_gbps = SPILL_OBJ / t / 1e9;
    }
    free(back);
    ZSTD_freeDCtx(dctx);
    uint64_t stored = 0;
    for (int c = 0; c < NCH; c++) {
        if (lens[c] == SPILL_CHUNK)
            memcpy(recs[c] + 32, raw + (size_t)c * SPILL_CHUNK, SPILL_CHUNK);
        lens[c] += 32;
        stored += lens[c];
    }
    for (int r = 0; r < 6; r++) {
        double t0 = now_s();
#ifdef SPW_HAVE_XXH_DISPATCH
        sink += XXH3_64bits_dispatch(raw, SPILL_OBJ); /* as the store computes it */
#else
        sink += XXH3_64bits(raw, SPILL_OBJ);
#endif
        double t = now_s() - t0;
        if (r > 0 && SPILL_OBJ / t / 1e9 > out->xxh3_gbps)
            out->xxh3_gbps = SPILL_OBJ / t / 1e9;
    }
    char env_dir[PATH_MAX];
    snprintf(env_dir, sizeof env_dir, "%.*s/bench-lmdb", PATH_MAX - 16, dir);
    if (mkdir(env_dir, 0700) == 0) {
        int copies = 8; /* 64 MiB of raw data */
        for (int r = 0; r < 3; r++) {
            double t;
            int rc = lmdb_env_write(env_dir, (const uint8_t *const *)recs, lens, NCH, copies, &t);
            if (rc != 0) {
                fprintf(stderr, "spillway-bench: LMDB write: %s\n", mdb_strerror(rc));
                break;
            }
            double gbps = (double)stored * copies / t / 1e9;
            if (gbps > out->lmdb_write_gbps)
                out->lmdb_write_gbps = gbps;
        }
        rmdir(env_dir);
    }
    if (out->zstd_chunked_gbps > 0 && out->lmdb_write_gbps > 0)
        out->limit_gbps = 1.0 / (1.0 / out->zstd_chunked_gbps +
                                 ((double)stored / SPILL_OBJ) / out->lmdb_write_gbps);
    for (int c = 0; c < NCH; c++)
        free(recs[c]);
    ZSTD_freeCCtx(cctx);
    free(z);
    free(raw);
}

/* ------------------------------------------------------------------ the case */

typedef struct spill_run {
    bench *b;
    h_cluster *cluster;
    spillway *cl;
    spill_probe probe;
    char dir[256];     /* the spill directory, ours to remove */
    uint64_t capacity; /* per worker */
    uint64_t nobj;
    spillway_ref *refs;
    uint8_t *expect; /* one object's expected bytes */
    int log_grows;   /* log counts after the previous kind */
    int log_warns;
} spill_run;

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static void spill_teardown(spill_run *r)
{
    if (r->cl != NULL)
        spillway_close(r->cl);
    r->cl = NULL;
    probe_stop(&r->probe);
    if (!h_cluster_stop(r->cluster))
        fprintf(stderr, "spillway-bench: the spill cluster did not stop cleanly\n");
    if (nftw(r->dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS) != 0)
        fprintf(stderr, "spillway-bench: could not remove %s\n", r->dir);
}

static _Noreturn void spill_die(spill_run *r, const char *what, int rc)
{
    fprintf(stderr, "spillway-bench: spill: %s: %s: %s\n", what, spillway_strerror(rc),
            r->cl != NULL ? spillway_errmsg(r->cl) : "");
    h_dump_logs(r->cluster);
    spill_teardown(r);
    exit(1);
}

static double gbps_of(uint64_t bytes, uint64_t ns)
{
    return ns > 0 ? (double)bytes / (double)ns : 0; /* bytes per ns is GB/s */
}

static double r3(double v)
{
    return (double)(long long)(v * 1000 + (v >= 0 ? 0.5 : -0.5)) / 1000;
}

static void spill_one_kind(spill_run *r, const spill_kind *k)
{
    uint64_t total = r->nobj * SPILL_OBJ;
    spill_limit lim;
    spill_measure_limit(k, r->dir, r->b->spill_threads, &lim);

    wstats base[SPILL_WORKERS], wrote[SPILL_WORKERS], rd[SPILL_WORKERS], after[SPILL_WORKERS];
    double waited;
    if (!spill_status(r->cluster, base))
        spill_die(r, "spillway-ctl status", SPW_EIO);
    probe_reset(&r->probe);
    wcpu cpu0[SPILL_WORKERS];
    for (int i = 0; i < spill_workers; i++)
        worker_cpu(&r->probe, i, &cpu0[i]);
    double probe_cpu0 = r->probe.cpu_s;
    mcpu m0, mw;
    machine_cpu(r->cluster, &m0);

    /* Write: every object a kept task output; the stores spill as they fill. */
    double t0 = now_s();
    spillway_graph *g = spillway_graph_new(r->cl);
    for (uint64_t i = 0; i < r->nobj; i++) {
        spillway_arg a[2];
        spill_task_args(k, k->seed0 + i, a);
        int rc = spillway_task(g, k->fn, a, 2, SPILLWAY_KEEP, &r->refs[i]);
        if (rc != 0)
            spill_die(r, "task", rc);
    }
    int rc = spillway_submit(g);
    spillway_graph_free(g);
    if (rc != 0)
        spill_die(r, "submit", rc);
    rc = spillway_wait(r->cl, r->refs, r->nobj, 600000);
    if (rc != 0)
        spill_die(r, "wait", rc);
    double t_write = now_s() - t0;
    bool settled_w = spill_settle(r->cluster, cond_tasks_done, base, r->nobj, wrote, &waited);
    double settle_w = waited;
    wcpu cpu_w[SPILL_WORKERS];
    for (int i = 0; i < spill_workers; i++)
        worker_cpu(&r->probe, i, &cpu_w[i]);
    machine_cpu(r->cluster, &mw);
    /* The reference again, right after the spills it is compared with: use the mean. */
    double zstd_before = lim.zstd_gbps, zstd_all_before = lim.zstd_all_gbps, zstd_after,
           zstd_all_after;
    spill_zstd_again(k, r->b->spill_threads, &zstd_after, &zstd_all_after);
    lim.zstd_gbps = (zstd_before + zstd_after) / 2;
    lim.zstd_all_gbps = (zstd_all_before + zstd_all_after) / 2;

    /* Read back in creation order, oldest (spilled first) first; check every byte. */
    bool ok = true;
    double t_get = 0, t_check = 0, t1 = now_s();
    uint64_t bad = 0;
    for (uint64_t i = 0; i < r->nobj; i++) {
        void *data;
        size_t len;
        double ta = now_s();
        rc = spillway_get(r->cl, r->refs[i], 600000, &data, &len);
        double tb = now_s();
        if (rc != 0)
            spill_die(r, "get", rc);
        spill_gen(k, k->seed0 + i, r->expect);
        bool same = len == SPILL_OBJ && memcmp(data, r->expect, SPILL_OBJ) == 0;
        if (!same && bad++ == 0)
            fprintf(stderr, "spillway-bench: spill: %s object %llu differs (len %zu)\n", k->data,
                    (unsigned long long)i, len);
        ok = ok && same;
        spillway_free(data);
        t_get += tb - ta;
        t_check += now_s() - tb;
    }
    double t_read = now_s() - t1;
    bool settled_r = spill_settle(r->cluster, cond_restored, wrote, total, rd, &waited);
    double settle_r = waited;
    wcpu cpu1[SPILL_WORKERS];
    for (int i = 0; i < spill_workers; i++)
        worker_cpu(&r->probe, i, &cpu1[i]);

    /* Release, and wait for both memory and spill files to empty. */
    double t2 = now_s();
    rc = spillway_release_many(r->cl, r->refs, r->nobj);
    if (rc != 0)
        spill_die(r, "release", rc);
    bool emptied = spill_settle(r->cluster, cond_empty, NULL, 0, after, &waited);
    double t_cleanup = now_s() - t2;

    /* Figures: deltas over this kind's write and read; bytes on disk as they stood after the
     * read (nothing is deleted from disk before the release). */
    uint64_t sp_bytes = 0, sp_ns = 0, rs_bytes = 0, rs_ns = 0, w_bytes = 0;
    double spill_all_gbps = 0, w_pool_s = 0;
    json_t *per = json_array();
    pthread_mutex_lock(&r->probe.mu);
    double peak = 0, peak_file = 0;
    for (int i = 0; i < spill_workers; i++) {
        uint64_t sb = rd[i].v[WS_SPILL_BYTES] - base[i].v[WS_SPILL_BYTES];
        uint64_t sn = rd[i].v[WS_SPILL_NS] - base[i].v[WS_SPILL_NS];
        uint64_t rb = rd[i].v[WS_RESTORE_BYTES] - base[i].v[WS_RESTORE_BYTES];
        uint64_t rn = rd[i].v[WS_RESTORE_NS] - base[i].v[WS_RESTORE_NS];
        sp_bytes += sb;
        sp_ns += sn;
        spill_all_gbps += gbps_of(sb, sn); /* the stores spill at the same time */
        w_bytes += wrote[i].v[WS_SPILL_BYTES] - base[i].v[WS_SPILL_BYTES];
        w_pool_s += cpu_w[i].pool_s - cpu0[i].pool_s;
        rs_bytes += rb;
        rs_ns += rn;
        probe_worker *pw = &r->probe.w[i];
        if (pw->peak_mem_kib / 1024 > peak)
            peak = pw->peak_mem_kib / 1024;
        if (pw->peak_file_kib / 1024 > peak_file)
            peak_file = pw->peak_file_kib / 1024;
        json_t *w = json_object();
        char name[32];
        snprintf(name, sizeof name, "spill-w%d", i);
        json_object_set_new(w, "name", json_string(name));
        json_object_set_new(
            w, "tasks_done",
            json_integer((json_int_t)(wrote[i].v[WS_TASKS_DONE] - base[i].v[WS_TASKS_DONE])));
        json_object_set_new(
            w, "spill_count",
            json_integer((json_int_t)(rd[i].v[WS_SPILL_COUNT] - base[i].v[WS_SPILL_COUNT])));
        json_object_set_new(w, "spill_total_bytes", json_integer((json_int_t)sb));
        json_object_set_new(w, "spill_gbps", json_real(r3(gbps_of(sb, sn))));
        json_object_set_new(
            w, "restore_count",
            json_integer((json_int_t)(rd[i].v[WS_RESTORE_COUNT] - base[i].v[WS_RESTORE_COUNT])));
        json_object_set_new(w, "restore_total_bytes", json_integer((json_int_t)rb));
        json_object_set_new(w, "restore_gbps", json_real(r3(gbps_of(rb, rn))));
        json_object_set_new(w, "spilled_bytes", json_integer((json_int_t)rd[i].v[WS_SPILLED]));
        json_object_set_new(w, "spilled_stored_bytes",
                            json_integer((json_int_t)rd[i].v[WS_STORED]));
        json_object_set_new(
            w, "evictions",
            json_integer((json_int_t)(rd[i].v[WS_EVICTIONS] - base[i].v[WS_EVICTIONS])));
        json_object_set_new(w, "store_peak_used_mib",
                            json_real(r3((double)rd[i].v[WS_PEAK_USED] / 1048576.0)));
        json_object_set_new(w, "peak_rss_mib", json_real(r3(pw->peak_mem_kib / 1024)));
        json_object_set_new(w, "peak_unique_mib", json_real(r3(pw->peak_unique_kib / 1024)));
        json_object_set_new(w, "peak_file_rss_mib", json_real(r3(pw->peak_file_kib / 1024)));
        json_object_set_new(w, "arena_resident_mib", json_real(r3(pw->peak_arena_kib / 1024)));
        json_object_set_new(w, "processes", json_integer(pw->ngroup));
        json_t *parts = json_object();
        static const char *const part_names[4] = {"worker_anon", "worker_shmem", "executors_anon",
                                                  "executors_shmem"};
        for (int q = 0; q < 4; q++)
            json_object_set_new(parts, part_names[q], json_real(r3(pw->at_peak_kib[q] / 1024)));
        json_object_set_new(w, "at_peak_mib", parts);
        /* CPU over write and read; compare pool_cpu_s with the lane's spill + restore time. */
        json_object_set_new(w, "main_cpu_s", json_real(r3(cpu1[i].main_s - cpu0[i].main_s)));
        json_object_set_new(w, "pool_cpu_s", json_real(r3(cpu1[i].pool_s - cpu0[i].pool_s)));
        json_object_set_new(w, "executor_cpu_s", json_real(r3(cpu1[i].exec_s - cpu0[i].exec_s)));
        json_object_set_new(w, "lane_s", json_real(r3((double)(sn + rn) / 1e9)));
        json_array_append_new(per, w);
    }
    uint64_t samples = r->probe.samples;
    double max_gap = r->probe.max_gap_s;
    double probe_cpu = r->probe.cpu_s - probe_cpu0;
    pthread_mutex_unlock(&r->probe.mu);
    int grows, warns;
    char first_warn[256] = "";
    spill_log_scan(r->cluster, &grows, &warns, first_warn, sizeof first_warn);

    uint64_t spilled = ws_sum(rd, WS_SPILLED), stored = ws_sum(rd, WS_STORED);
    double spill_gbps = gbps_of(sp_bytes, sp_ns), restore_gbps = gbps_of(rs_bytes, rs_ns);
    json_t *extra = json_object();
    json_object_set_new(extra, "objects", json_integer((json_int_t)r->nobj));
    json_object_set_new(extra, "object_bytes", json_integer(SPILL_OBJ));
    json_object_set_new(extra, "function", json_string(k->fn));
    json_object_set_new(extra, "write_s", json_real(r3(t_write)));
    json_object_set_new(extra, "write_gbps", json_real(r3((double)total / t_write / 1e9)));
    json_object_set_new(extra, "read_s", json_real(r3(t_read)));
    json_object_set_new(extra, "read_get_s", json_real(r3(t_get)));
    json_object_set_new(extra, "read_verify_s", json_real(r3(t_check)));
    json_object_set_new(extra, "read_gbps", json_real(r3((double)total / t_get / 1e9)));
    json_object_set_new(extra, "cleanup_s", json_real(r3(t_cleanup)));
    json_object_set_new(extra, "spill_total_bytes", json_integer((json_int_t)sp_bytes));
    json_object_set_new(extra, "spill_lane_s", json_real(r3((double)sp_ns / 1e9)));
    json_object_set_new(extra, "restore_total_bytes", json_integer((json_int_t)rs_bytes));
    json_object_set_new(extra, "restore_lane_s", json_real(r3((double)rs_ns / 1e9)));
    json_object_set_new(extra, "zstd_ratio", json_real(r3(lim.zstd_ratio)));
    json_object_set_new(extra, "zstd_1t_gbps", json_real(r3(lim.zstd_1t_gbps)));
    json_object_set_new(extra, "zstd_chunked_gbps", json_real(r3(lim.zstd_chunked_gbps)));
    json_object_set_new(extra, "xxh3_gbps", json_real(r3(lim.xxh3_gbps)));
    json_object_set_new(extra, "lmdb_write_gbps", json_real(r3(lim.lmdb_write_gbps)));
    json_object_set_new(extra, "limit_gbps", json_real(r3(lim.limit_gbps)));
    json_object_set_new(extra, "spill_vs_zstd",
                        json_real(r3(lim.zstd_gbps > 0 ? spill_gbps / lim.zstd_gbps : 0)));
    json_object_set_new(extra, "zstd_gbps_before", json_real(r3(zstd_before)));
    json_object_set_new(extra, "zstd_gbps_after", json_real(r3(zstd_after)));
    json_object_set_new(extra, "spill_all_gbps", json_real(r3(spill_all_gbps)));
    json_object_set_new(extra, "zstd_all_gbps", json_real(r3(lim.zstd_all_gbps)));
    json_object_set_new(
        extra, "spill_vs_zstd_all",
        json_real(r3(lim.zstd_all_gbps > 0 ? spill_all_gbps / lim.zstd_all_gbps : 0)));
    double cpu_gbps = w_pool_s > 0 ? (double)w_bytes / w_pool_s / 1e9 : 0;
    /* The write separated: what a spill costs per byte (the lanes' CPU against zstd's, both
     * in CPU time: the load cancels out), and how much of the cores its lanes could use they
     * got while spilling (the producer - executors, worker loops -, the scheduler, this
     * process and the rest of the machine took the others). */
    int ncores = (int)sysconf(_SC_NPROCESSORS_ONLN);
    int lanes = r->b->spill_threads * spill_workers;
    int lane_cores = lanes < ncores ? lanes : ncores;
    double w_spill_s = 0, w_loop_s = 0, w_exec_s = 0;
    for (int i = 0; i < spill_workers; i++) {
        double s = (double)(wrote[i].v[WS_SPILL_NS] - base[i].v[WS_SPILL_NS]) / 1e9;
        if (s > w_spill_s)
            w_spill_s = s; /* the stores spill at the same time: the longest */
        w_loop_s += cpu_w[i].main_s - cpu0[i].main_s;
        w_exec_s += cpu_w[i].exec_s - cpu0[i].exec_s;
    }
    double win_s = mw.t - m0.t, busy_s = mw.busy_s - m0.busy_s;
    double w_sched_s = mw.sched_s - m0.sched_s, w_bench_s = mw.bench_s - m0.bench_s;
    double lane_share = w_spill_s > 0 ? w_pool_s / (lane_cores * w_spill_s) : 0;
    json_t *wc = json_object();
    json_object_set_new(wc, "window_s", json_real(r3(win_s)));
    json_object_set_new(wc, "cores", json_integer(ncores));
    json_object_set_new(wc, "spilling_s", json_real(r3(w_spill_s)));
    json_object_set_new(wc, "lanes_s", json_real(r3(w_pool_s)));
    json_object_set_new(wc, "worker_loops_s", json_real(r3(w_loop_s)));
    json_object_set_new(wc, "executors_s", json_real(r3(w_exec_s)));
    json_object_set_new(wc, "scheduler_s", json_real(r3(w_sched_s)));
    json_object_set_new(wc, "bench_s", json_real(r3(w_bench_s)));
    json_object_set_new(
        wc, "rest_s",
        json_real(r3(busy_s - w_pool_s - w_loop_s - w_exec_s - w_sched_s - w_bench_s)));
    json_object_set_new(wc, "idle_s", json_real(r3(mw.idle_s - m0.idle_s)));
    json_object_set_new(extra, "write_cpu", wc);
    json_object_set_new(extra, "zstd_1t_cpu_gbps", json_real(r3(lim.zstd_1t_cpu_gbps)));
    json_object_set_new(
        extra, "spill_cpu_vs_zstd_cpu",
        json_real(r3(lim.zstd_1t_cpu_gbps > 0 ? cpu_gbps / lim.zstd_1t_cpu_gbps : 0)));
    json_object_set_new(extra, "lane_cpu_share", json_real(r3(lane_share)));
    json_object_set_new(extra, "spill_write_pool_cpu_s", json_real(r3(w_pool_s)));
    json_object_set_new(extra, "spill_cpu_gbps", json_real(r3(cpu_gbps)));
    json_object_set_new(
        extra, "spill_cpu_vs_zstd_1t",
        json_real(r3(lim.zstd_1t_gbps > 0 ? cpu_gbps / lim.zstd_1t_gbps : 0)));
    json_object_set_new(extra, "unzstd_1t_gbps", json_real(r3(lim.unzstd_1t_gbps)));
    json_object_set_new(
        extra, "restore_vs_unzstd_1t",
        json_real(r3(lim.unzstd_1t_gbps > 0 ? restore_gbps / lim.unzstd_1t_gbps : 0)));
    json_object_set_new(extra, "spill_vs_limit",
                        json_real(r3(lim.limit_gbps > 0 ? spill_gbps / lim.limit_gbps : 0)));
    json_object_set_new(extra, "peak_unique_mib_note",
                        json_string("per worker: RssAnon summed over the worker and its "
                                    "executors, plus the arena memfd's resident size once (the "
                                    "worker and executors map the same pages; peak_rss_mib "
                                    "counts them in each)"));
    json_object_set_new(extra, "workers", per);
    json_object_set_new(extra, "rss_samples", json_integer((json_int_t)samples));
    json_object_set_new(extra, "rss_max_gap_ms", json_real(r3(max_gap * 1000)));
    json_object_set_new(extra, "rss_probe_cpu_s", json_real(r3(probe_cpu)));
    json_object_set_new(extra, "rss_probe_niced", json_boolean(r->probe.niced));
    json_object_set_new(extra, "cpus", json_integer(sysconf(_SC_NPROCESSORS_ONLN)));
    json_object_set_new(extra, "spill_map_grows", json_integer(grows - r->log_grows));
    json_object_set_new(extra, "worker_log_warnings", json_integer(warns - r->log_warns));
    if (first_warn[0] != '\0')
        json_object_set_new(extra, "first_worker_warning", json_string(first_warn));
    r->log_grows = grows;
    r->log_warns = warns;
    json_object_set_new(extra, "settled", json_boolean(settled_w && settled_r));
    json_object_set_new(extra, "settle_s", json_real(r3(settle_w + settle_r)));
    json_object_set_new(extra, "emptied_after_release", json_boolean(emptied));
    json_object_set_new(extra, "mismatched_objects", json_integer((json_int_t)bad));
    json_object_set_new(extra, "spill_dir", json_string(r->dir));

    json_t *top = json_object();
    json_object_set_new(top, "data", json_string(k->data));
    json_object_set_new(top, "capacity_bytes", json_integer((json_int_t)r->capacity));
    json_object_set_new(top, "total_bytes", json_integer((json_int_t)total));
    json_object_set_new(top, "spilled_bytes", json_integer((json_int_t)spilled));
    json_object_set_new(top, "spilled_stored_bytes", json_integer((json_int_t)stored));
    json_object_set_new(top, "compression_ratio",
                        json_real(r3(stored > 0 ? (double)spilled / (double)stored : 0)));
    json_object_set_new(top, "spill_gbps", json_real(r3(spill_gbps)));
    json_object_set_new(top, "restore_gbps", json_real(r3(restore_gbps)));
    json_object_set_new(top, "zstd_gbps", json_real(r3(lim.zstd_gbps)));
    json_object_set_new(top, "spill_threads", json_integer(r->b->spill_threads));
    json_object_set_new(top, "peak_file_rss_mib", json_real(r3(peak_file)));
    json_object_set_new(top, "verified", json_boolean(ok));
    emit_with("spill", r->nobj, t_write + t_read, (double)r->nobj / t_write, peak, extra, top);
}

/* The spill case always starts a separate cluster of small stores and prints one line per kind
 * of data, with peak_rss_mib meaning the largest worker's peak instead. --spill-workers is its
 * number of workers (2), --spill-threads their --spill-threads (default min(cores, 4)); its
 * zstd_gbps is plain zstd at the same level and thread count on the same data. */
static void case_spill(bench *b)
{
    static spill_run run; /* large, and reachable from spill_die */
    spill_run *r = &run;
    memset(r, 0, sizeof *r);
    r->b = b;
    r->capacity = b->quick ? (32u << 20) : (128u << 20);
    r->nobj = 10 * (uint64_t)spill_workers * r->capacity / SPILL_OBJ;
    /* A disk-backed directory, like the workers' default /var/tmp (often /tmp is tmpfs). */
    snprintf(r->dir, sizeof r->dir, "/var/tmp/spillway-bench-spill.XXXXXX");
    if (mkdtemp(r->dir) == NULL) {
        perror("spillway-bench: mkdtemp /var/tmp");
        exit(1);
    }
    char cap[32], threads[16];
    snprintf(cap, sizeof cap, "%lluM", (unsigned long long)(r->capacity >> 20));
    snprintf(threads, sizeof threads, "%d", b->spill_threads);
    /* With the HTTP endpoint on a free port: open it to watch the stores spill. */
    static const char *const http[] = {"--http", "127.0.0.1:0", NULL};
    r->cluster = h_cluster_start(false, http);
    fprintf(stderr, "spillway-bench: spill case: dashboard at http://%s/\n", r->cluster->http);
    for (int i = 0; i < spill_workers; i++) {
        char name[32];
        snprintf(name, sizeof name, "spill-w%d", i);
        const char *args[] = {
            "--slots",       "1",     "--store-capacity", cap,     "--spill-dir", r->dir,
            "--spill-threads", threads, "--name",           name,    NULL};
        h_worker_start(r->cluster, args);
    }
    probe_start(&r->probe, r->cluster);
    spillway_opts o;
    spillway_opts_init(&o);
    o.name = "spillway-bench-spill";
    int rc = spillway_connect(r->cluster->addr, &o, &r->cl);
    if (rc != 0)
        spill_die(r, "connect", rc);
    r->refs = calloc(r->nobj, sizeof *r->refs);
    r->expect = malloc(SPILL_OBJ);
    for (size_t i = 0; i < sizeof spill_kinds / sizeof spill_kinds[0]; i++)
        spill_one_kind(r, &spill_kinds[i]);
    spill_teardown(r);
    free(r->refs);
    free(r->expect);
}

/* ------------------------------------------------------- broadcast, embed */

/* Peak resident memory (VmHWM, reset first) summed over this process and a cluster's daemons
 * and executors. */
static int cluster_pids(h_cluster *c, pid_t *pids, int max)
{
    int n = 0;
    pids[n++] = getpid();
    pids[n++] = c->sched.pid;
    for (int i = 0; i < c->nworkers && n < max; i++) {
        pids[n++] = c->workers[i].pid;
        char path[64];
        snprintf(path, sizeof path, "/proc/%d/task/%d/children", (int)c->workers[i].pid,
                 (int)c->workers[i].pid);
        FILE *f = fopen(path, "r");
        int child;
        while (f != NULL && n < max && fscanf(f, "%d", &child) == 1)
            pids[n++] = child;
        if (f != NULL)
            fclose(f);
    }
    return n;
}

static void cluster_hwm_reset(h_cluster *c)
{
    pid_t pids[64];
    int n = cluster_pids(c, pids, 64);
    for (int i = 0; i < n; i++) {
        char path[64];
        snprintf(path, sizeof path, "/proc/%d/clear_refs", (int)pids[i]);
        FILE *f = fopen(path, "w");
        if (f != NULL) {
            fputs("5", f);
            fclose(f);
        }
    }
}

static double cluster_hwm_mib(h_cluster *c)
{
    pid_t pids[64];
    int n = cluster_pids(c, pids, 64);
    double total = 0;
    for (int i = 0; i < n; i++)
        total += (double)kib(pids[i], "VmHWM") / 1024.0;
    return total;
}

static h_cluster *start_cluster(int nworkers, const char *cap)
{
    h_cluster *c = h_cluster_start(false, NULL);
    for (int i = 0; i < nworkers; i++) {
        char name[32];
        snprintf(name, sizeof name, "bw%d", i);
        const char *args[] = {"--slots", "1", "--store-capacity", cap, "--name", name, NULL};
        h_worker_start(c, args);
    }
    return c;
}

static spillway *connect_to(const char *addr, bool no_local)
{
    if (no_local)
        setenv("SPILLWAY_NO_LOCAL", "1", 1);
    spillway *cl;
    int rc = spillway_connect(addr, NULL, &cl);
    unsetenv("SPILLWAY_NO_LOCAL");
    if (rc != 0) {
        fprintf(stderr, "spillway-bench: connect %s: %s\n", addr, spillway_strerror(rc));
        exit(1);
    }
    return cl;
}

/* 64 MiB scattered to 1, 2 and 4 workers. Timed twice: from a client on another host (TCP to
 * the first worker; the row) and from a client on the workers' host (shared memory). */
static void case_broadcast(bench *b)
{
    size_t size = 64u << 20;
    int reps = b->quick ? 2 : 4;
    uint8_t *data = malloc(size);
    for (size_t i = 0; i < size; i++)
        data[i] = (uint8_t)(i * 2654435761u >> 11);
    static const int counts[] = {1, 2, 4};
    double base = 0;
    for (size_t k = 0; k < 3; k++) {
        h_cluster *c = start_cluster(counts[k], "256M");
        double best[2] = {1e9, 1e9};
        for (int mode = 0; mode < 2; mode++) {
            spillway *cl = connect_to(c->addr, mode == 0);
            for (int r = 0; r < reps; r++) {
                spillway_ref ref;
                double t0 = now_s();
                int rc = spillway_scatter(cl, data, size, 0, &ref);
                double t = now_s() - t0;
                if (rc != 0)
                    die(b, "scatter", rc);
                spillway_release(cl, ref);
                if (t < best[mode])
                    best[mode] = t;
            }
            spillway_close(cl);
        }
        if (k == 0)
            base = best[0];
        json_t *extra = json_object();
        json_object_set_new(extra, "client", json_string("tcp (another host)"));
        json_object_set_new(extra, "local_client_seconds", json_real(best[1]));
        json_object_set_new(extra, "vs_one_worker", json_real(best[0] / base));
        json_object_set_new(extra, "reps", json_integer(reps));
        json_t *top = json_object();
        json_object_set_new(top, "workers", json_integer(counts[k]));
        json_object_set_new(top, "bytes", json_integer((json_int_t)size));
        emit_with("broadcast", (uint64_t)counts[k], best[0], 0, cluster_hwm_mib(c), extra, top);
        h_cluster_release(c);
    }
    free(data);
}

/* Copies of the payload the stores held at their peak: each store starts empty (a fresh
 * cluster), and the tasks' results are 8-byte values that never reach a store, so a store's
 * peak use divided by the payload's size is the copies it held. The figures come from
 * `spillway-ctl memory`, for which the scheduler asks every worker now ("fresh"), not from
 * `status`, whose figures are as old as the last heartbeat. */
static int store_copies(h_cluster *c, uint64_t size)
{
    const char *argv[] = {h_bin("spillway-ctl"), "--scheduler", c->addr, "--json", "memory",
                          "--stats-only", NULL};
    char *text = NULL;
    int copies = -1;
    if (h_run(argv, &text) == 0) {
        json_t *doc = json_loads(text, 0, NULL);
        size_t i;
        json_t *n;
        copies = 0;
        json_array_foreach(json_object_get(doc, "nodes"), i, n)
        {
            if (!json_is_true(json_object_get(n, "fresh")))
                copies = -1; /* a worker did not answer: no figure rather than a wrong one */
            uint64_t peak = (uint64_t)json_integer_value(json_object_get(n, "peak_used"));
            if (copies >= 0)
                copies += (int)((peak + size / 2) / size);
        }
        json_decref(doc);
    }
    free(text);
    return copies;
}

/* The Dask case: 500 tasks each take one 8 MiB object. "embed" passes its bytes as an argument
 * of every task (what code naturally does; the library puts them once); "scatter" broadcasts it
 * first and passes the reference. */
static void case_embed_vs_scatter(bench *b)
{
    size_t size = 8u << 20, n = b->quick ? 100 : 500;
    uint8_t *payload = malloc(size);
    for (size_t i = 0; i < size; i++)
        payload[i] = (uint8_t)(i * 7919u >> 5);
    for (int mode = 0; mode < 2; mode++) {
        h_cluster *c = start_cluster(2, "512M");
        spillway *cl = connect_to(c->addr, false);
        cluster_hwm_reset(c);
        double t0 = now_s();
        spillway_ref shared = {0, 0};
        if (mode == 1 && spillway_scatter(cl, payload, size, 0, &shared) != 0)
            die(b, "scatter", -1);
        spillway_graph *g = spillway_graph_new(cl);
        spillway_ref *refs = calloc(n, sizeof *refs);
        for (size_t i = 0; i < n; i++) {
            spillway_arg a[2] = {mode == 0 ? spillway_arg_bytes(payload, size)
                                           : spillway_arg_ref(shared),
                                 spillway_arg_u64(i)};
            if (spillway_task(g, "len", a, 2, SPILLWAY_KEEP, &refs[i]) != 0)
                die(b, "task", -1);
        }
        int rc = spillway_submit(g);
        spillway_graph_free(g);
        if (rc == 0)
            rc = spillway_wait(cl, refs, n, -1);
        if (rc != 0)
            die(b, "run", rc);
        bool ok = true;
        for (size_t i = 0; i < n; i++) {
            void *d;
            size_t len;
            uint64_t v = 0;
            if (spillway_get(cl, refs[i], -1, &d, &len) == 0) {
                memcpy(&v, d, 8);
                spillway_free(d);
            }
            ok = ok && v == size + 8;
        }
        double t = now_s() - t0;
        int copies = store_copies(c, size);
        double peak = cluster_hwm_mib(c);
        spillway_release_many(cl, refs, n);
        if (mode == 1)
            spillway_release(cl, shared);
        free(refs);
        spillway_close(cl);
        json_t *extra = json_object();
        json_object_set_new(extra, "verified", json_boolean(ok));
        json_object_set_new(extra, "payload_bytes", json_integer((json_int_t)size));
        json_object_set_new(extra, "how", json_string(mode == 0 ? "bytes passed to every task "
                                                                  "(put once automatically)"
                                                                : "scatter(broadcast) once, "
                                                                  "reference to every task"));
        json_t *top = json_object();
        json_object_set_new(top, "store_copies", json_integer(copies));
        emit_with(mode == 0 ? "embed_vs_scatter.embed" : "embed_vs_scatter.scatter", n, t,
                  (double)n / t, peak, extra, top);
        h_cluster_release(c);
    }
    free(payload);
}

/* ------------------------------------------------------------- scale cases */

/* The CPUs this process may run on (its affinity), the count; 0 if unknown. */
static int cpus_allowed(void)
{
    cpu_set_t set;
    return sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 0;
}

/* Keeps this process (and what it starts from now on) to the first n of the CPUs it may run
 * on; false, with a message, if it may run on fewer. */
static bool pin_cpus(int n)
{
    cpu_set_t set, keep;
    if (sched_getaffinity(0, sizeof set, &set) != 0) {
        fprintf(stderr, "spillway-bench: --cpus: cannot read this process's CPUs: %s\n",
                strerror(errno));
        return false;
    }
    if (CPU_COUNT(&set) < n) {
        fprintf(stderr,
                "spillway-bench: --cpus: %d is more than the %d CPUs this process may run on\n", n,
                CPU_COUNT(&set));
        return false;
    }
    CPU_ZERO(&keep);
    for (int cpu = 0, k = 0; cpu < CPU_SETSIZE && k < n; cpu++)
        if (CPU_ISSET(cpu, &set)) {
            CPU_SET(cpu, &keep);
            k++;
        }
    if (sched_setaffinity(0, sizeof keep, &keep) != 0) {
        fprintf(stderr, "spillway-bench: --cpus: %s\n", strerror(errno));
        return false;
    }
    return true;
}

/* The scheduler's own figures: resident now and at its peak (KiB), CPU seconds so far. */
static long sched_kib(bench *b, const char *field)
{
    return b->own_cluster ? kib(b->cluster->sched.pid, field) : 0;
}

/* CPU seconds of one thread (tid) of process pid: the first field of its schedstat
 * (nanoseconds on a CPU), or its stat file's clock ticks where the kernel has no schedstat;
 * 0 if it is gone. */
static double thread_cpu_s(pid_t pid, pid_t tid)
{
    char path[96];
    snprintf(path, sizeof path, "/proc/%d/task/%d/schedstat", (int)pid, (int)tid);
    FILE *f = fopen(path, "r");
    unsigned long long ns;
    if (f != NULL) {
        int got = fscanf(f, "%llu", &ns);
        fclose(f);
        if (got == 1)
            return (double)ns / 1e9;
    }
    snprintf(path, sizeof path, "/proc/%d/task/%d/stat", (int)pid, (int)tid);
    return stat_cpu_s(path);
}

/* The scheduler's CPU seconds so far: the whole process, and its loop thread (the thread whose
 * id is the process's: it runs every decision) in *loop_s when loop_s is not NULL. */
static double sched_cpu_s(bench *b, double *loop_s)
{
    pid_t pid = b->cluster->sched.pid;
    if (loop_s != NULL)
        *loop_s = b->own_cluster ? thread_cpu_s(pid, pid) : 0;
    return b->own_cluster ? proc_cpu_s(pid) : 0;
}

/* CPU seconds of the workers and of their executors (children). */
static double workers_cpu_s(bench *b, double *exec_s)
{
    double w = 0, e = 0;
    for (int i = 0; b->own_cluster && i < b->cluster->nworkers; i++) {
        w += proc_cpu_s(b->cluster->workers[i].pid);
        char path[64];
        snprintf(path, sizeof path, "/proc/%d/task/%d/children", (int)b->cluster->workers[i].pid,
                 (int)b->cluster->workers[i].pid);
        FILE *f = fopen(path, "r");
        int child;
        while (f != NULL && fscanf(f, "%d", &child) == 1)
            e += proc_cpu_s((pid_t)child);
        if (f != NULL)
            fclose(f);
    }
    *exec_s = e;
    return w;
}

/* Hardware counters (cycles and instructions, one perf_event_open group) on one thread of
 * another process, counting only while that thread runs. User and kernel time where the kernel
 * allows it (perf_event_paranoid, CAP_PERFMON), else user time alone; none at all where there is
 * no PMU (a VM without one) or perf events are forbidden, and then why says so. */
typedef struct hwc {
    int fd[2];         /* cycles (the group's leader), instructions; -1 when not open */
    const char *scope; /* "user+kernel" or "user"; NULL when not counting */
    char why[160];     /* why not counting, when scope is NULL */
} hwc;

static int hwc__open(pid_t tid, uint64_t config, int group, bool user_only)
{
    struct perf_event_attr a;
    memset(&a, 0, sizeof a);
    a.size = sizeof a;
    a.type = PERF_TYPE_HARDWARE;
    a.config = config;
    a.disabled = group == -1; /* the leader starts the group */
    a.exclude_hv = 1;
    a.exclude_kernel = user_only;
    a.read_format =
        PERF_FORMAT_GROUP | PERF_FORMAT_TOTAL_TIME_ENABLED | PERF_FORMAT_TOTAL_TIME_RUNNING;
    return (int)syscall(SYS_perf_event_open, &a, tid, -1, group, PERF_FLAG_FD_CLOEXEC);
}

/* Opens the group on tid, stopped; on failure h->scope is NULL and h->why says why. */
static void hwc_open(hwc *h, pid_t tid)
{
    memset(h, 0, sizeof *h);
    h->fd[0] = h->fd[1] = -1;
    if (tid <= 0) {
        snprintf(h->why, sizeof h->why, "no scheduler of the bench's own (--scheduler)");
        return;
    }
    for (int user_only = 0; user_only <= 1; user_only++) {
        h->fd[0] = hwc__open(tid, PERF_COUNT_HW_CPU_CYCLES, -1, user_only);
        int err = errno;
        if (h->fd[0] >= 0) {
            h->fd[1] = hwc__open(tid, PERF_COUNT_HW_INSTRUCTIONS, h->fd[0], user_only);
            err = errno;
            if (h->fd[1] >= 0) {
                h->scope = user_only ? "user" : "user+kernel";
                return;
            }
            close(h->fd[0]);
            h->fd[0] = -1;
        }
        /* Only a refusal of kernel counting is worth a second try with user time alone. */
        if (user_only || (err != EACCES && err != EPERM)) {
            snprintf(h->why, sizeof h->why, "perf_event_open(%s): %s%s",
                     user_only ? "user" : "user+kernel", strerror(err),
                     err == ENOENT || err == EOPNOTSUPP || err == ENODEV
                         ? " (no hardware counters here: a VM without a PMU?)"
                     : err == EACCES || err == EPERM ? " (see /proc/sys/kernel/perf_event_paranoid)"
                                                     : "");
            return;
        }
    }
}

static void hwc_start(hwc *h)
{
    if (h->scope == NULL)
        return;
    ioctl(h->fd[0], PERF_EVENT_IOC_RESET, PERF_IOC_FLAG_GROUP);
    ioctl(h->fd[0], PERF_EVENT_IOC_ENABLE, PERF_IOC_FLAG_GROUP);
}

/* Stops the group and reads it, scaled up if the kernel multiplexed it; false (and h->why
 * set) if it cannot be read or never ran. */
static bool hwc_stop(hwc *h, double *cycles, double *instructions)
{
    if (h->scope == NULL)
        return false;
    ioctl(h->fd[0], PERF_EVENT_IOC_DISABLE, PERF_IOC_FLAG_GROUP);
    uint64_t v[5]; /* nr, time_enabled, time_running, cycles, instructions */
    ssize_t got = read(h->fd[0], v, sizeof v);
    if (got != (ssize_t)sizeof v || v[0] != 2 || v[2] == 0) {
        snprintf(h->why, sizeof h->why, "perf counters unreadable or never scheduled");
        h->scope = NULL;
        return false;
    }
    double scale = (double)v[1] / (double)v[2];
    *cycles = (double)v[3] * scale;
    *instructions = (double)v[4] * scale;
    return true;
}

static void hwc_close(hwc *h)
{
    for (int i = 0; i < 2; i++)
        if (h->fd[i] >= 0)
            close(h->fd[i]);
    h->fd[0] = h->fd[1] = -1;
}

/* A figure rounded to 3 decimals, or JSON null where it could not be measured. */
static json_t *r3_or_null(bool have, double v)
{
    return have ? json_real(r3(v)) : json_null();
}

/* The scheduler's loop-thread figures per unit (task or hop, named by per): its own CPU
 * (schedstat), the ceiling that CPU puts on the rate of one loop, and the hardware counters
 * (null, with sched_counters_why, where there are none). */
static void sched_loop_extra(json_t *extra, const char *per, uint64_t units, double loop_s, hwc *h,
                             bool counted, double cycles, double instructions)
{
    char key[64];
    double us = loop_s / (double)units * 1e6;
    snprintf(key, sizeof key, "sched_loop_cpu_us_per_%s", per);
    json_object_set_new(extra, key, json_real(r3(us)));
    snprintf(key, sizeof key, "sched_loop_ceiling_%ss_per_s", per);
    json_object_set_new(extra, key, r3_or_null(us > 0, 1e6 / us));
    snprintf(key, sizeof key, "sched_instructions_per_%s", per);
    json_object_set_new(extra, key, r3_or_null(counted, instructions / (double)units));
    snprintf(key, sizeof key, "sched_cycles_per_%s", per);
    json_object_set_new(extra, key, r3_or_null(counted, cycles / (double)units));
    json_object_set_new(extra, "sched_ipc",
                        r3_or_null(counted && cycles > 0, instructions / cycles));
    json_object_set_new(extra, "sched_counters", counted ? json_string(h->scope) : json_null());
    json_object_set_new(extra, "sched_counters_why", counted ? json_null() : json_string(h->why));
}


/* The scheduler's table sizes from spillway-ctl status: live objects and tasks in any state.
 * Returns false if the status could not be read. */
static bool sched_tables(bench *b, uint64_t *objects, uint64_t *tasks)
{
    const char *argv[] = {
        h_bin("spillway-ctl"), "--scheduler", b->cluster->addr, "--json", "status", NULL};
    char *text = NULL;
    int rc = h_run(argv, &text);
    json_t *doc = rc == 0 && text != NULL ? json_loads(text, 0, NULL) : NULL;
    free(text);
    if (doc == NULL)
        return false;
    *objects = (uint64_t)json_integer_value(json_object_get(json_object_get(doc, "objects"), "count"));
    *tasks = 0;
    const char *key;
    json_t *v;
    json_object_foreach(json_object_get(doc, "tasks"), key, v)
    *tasks += (uint64_t)json_integer_value(v);
    json_decref(doc);
    return true;
}

/* Waits (up to 60 s, polling every 50 ms: the scheduler's tables have no event to wait on from
 * outside) until the scheduler holds no more objects and tasks than before the case. */
static bool sched_settle(bench *b, uint64_t objects0, uint64_t tasks0)
{
    if (!b->own_cluster)
        return false;
    double t0 = now_s();
    while (now_s() - t0 < 60) {
        uint64_t o, t;
        /* A round trip on the bench's own connection: spillway_release_many queues its frames
         * and sends what the socket takes at once, the rest on the client's next call. */
        spillway_graph_progress gp;
        (void)spillway_graph_status(b->cl, UINT64_MAX, &gp);
        if (sched_tables(b, &o, &t) && o <= objects0 && t <= tasks0)
            return true;
        struct timespec ts = {0, 50 * 1000000};
        nanosleep(&ts, NULL);
    }
    return false;
}

/* N independent noop tasks as one graph, kept and every result fetched, for each N of
 * b->scale_n; with the scheduler's peak memory for the graph, its memory once the graph is
 * released, and the CPU time each process spent per task. */
static void case_scale_tiny(bench *b)
{
    uint64_t nmax = 0;
    for (int k = 0; b->scale_n[k] != 0; k++)
        nmax = b->scale_n[k] > nmax ? b->scale_n[k] : nmax;
    spillway_ref *refs = calloc(nmax > 200 ? nmax : 200, sizeof *refs);
    if (refs == NULL)
        die(b, "calloc", SPW_ENOMEM);
    /* Warm-up: every executor started, as in tiny_tasks. */
    run_independent(b, "noop", 200, refs, NULL, NULL);
    spillway_release_many(b->cl, refs, 200);
    uint64_t objects0 = 0, tasks0 = 0;
    bool have0 = b->own_cluster && sched_settle(b, 0, 0) && sched_tables(b, &objects0, &tasks0);
    /* The scheduler's memory per task is charged against its resident memory before the first
     * graph: what an earlier graph left behind (kept by the allocator) is not reused for free. */
    long start_kib = sched_kib(b, "VmRSS");
    for (int k = 0; b->scale_n[k] != 0; k++) {
        uint64_t n = b->scale_n[k];
        long base_kib = sched_kib(b, "VmRSS");
        hwm_reset(b);
        hwc h;
        hwc_open(&h, b->own_cluster ? b->cluster->sched.pid : 0);
        double c_loop, c_loop1, cycles = 0, instructions = 0;
        double c_sched = sched_cpu_s(b, &c_loop), c_exec, c_work = workers_cpu_s(b, &c_exec);
        double c_self = self_cpu_s(), c_exec1;
        hwc_start(&h);
        double t0 = now_s(), t_submit;
        phase_cpu pc;
        run_independent(b, "noop", n, refs, &t_submit, &pc);
        double t_done = now_s() - t0, c_got = self_cpu_s();
        uint64_t fetched = 0;
        for (uint64_t i = 0; i < n; i++) {
            void *data;
            size_t len;
            int rc = spillway_get(b->cl, refs[i], -1, &data, &len);
            if (rc != 0)
                die(b, "get", rc);
            fetched += len == 0;
            spillway_free(data);
        }
        double t = now_s() - t0, c_fetched = self_cpu_s();
        bool counted = hwc_stop(&h, &cycles, &instructions);
        double d_sched = sched_cpu_s(b, &c_loop1) - c_sched;
        double d_work = workers_cpu_s(b, &c_exec1) - c_work;
        double d_exec = c_exec1 - c_exec, d_self = c_fetched - c_self;
        json_t *extra = json_object();
        double peak = hwm_total(b, extra);
        long peak_kib = sched_kib(b, "VmHWM");
        double c_rel = self_cpu_s();
        spillway_release_many(b->cl, refs, n);
        double t_rel = now_s();
        c_rel = self_cpu_s() - c_rel;
        bool settled = have0 && sched_settle(b, objects0, tasks0);
        double t_settle = now_s() - t_rel;
        long idle_kib = sched_kib(b, "VmRSS");
        json_t *top = json_object();
        json_object_set_new(top, "workers", json_integer(b->workers));
        json_object_set_new(top, "slots", json_integer(b->slots));
        json_object_set_new(top, "cpus", json_integer(cpus_allowed()));
        json_object_set_new(top, "sched_peak_rss_mib", json_real(r3((double)peak_kib / 1024.0)));
        json_object_set_new(top, "sched_bytes_per_task",
                            json_real(r3((double)(peak_kib - start_kib) * 1024.0 / (double)n)));
        json_object_set_new(top, "sched_idle_rss_mib", json_real(r3((double)idle_kib / 1024.0)));
        json_object_set_new(extra, "sched_start_rss_mib", json_real(r3((double)start_kib / 1024.0)));
        json_object_set_new(extra, "sched_before_rss_mib", json_real(r3((double)base_kib / 1024.0)));
        json_object_set_new(extra, "sched_settle_s", json_real(r3(t_settle)));
        json_object_set_new(extra, "sched_idle_settled", json_boolean(settled));
        json_object_set_new(extra, "submit_s", json_real(t_submit));
        json_object_set_new(extra, "done_s", json_real(t_done));
        json_object_set_new(extra, "results_fetched", json_integer((json_int_t)fetched));
        json_object_set_new(extra, "sched_cpu_us_per_task", json_real(r3(d_sched / (double)n * 1e6)));
        json_object_set_new(extra, "workers_cpu_us_per_task", json_real(r3(d_work / (double)n * 1e6)));
        json_object_set_new(extra, "executors_cpu_us_per_task", json_real(r3(d_exec / (double)n * 1e6)));
        json_object_set_new(extra, "client_cpu_us_per_task", json_real(r3(d_self / (double)n * 1e6)));
        json_t *phases = json_object();
        json_object_set_new(phases, "build", json_real(r3(pc.build / (double)n * 1e6)));
        json_object_set_new(phases, "submit", json_real(r3(pc.submit / (double)n * 1e6)));
        json_object_set_new(phases, "wait", json_real(r3(pc.wait / (double)n * 1e6)));
        json_object_set_new(phases, "get", json_real(r3((c_fetched - c_got) / (double)n * 1e6)));
        json_object_set_new(phases, "release", json_real(r3(c_rel / (double)n * 1e6)));
        json_object_set_new(extra, "client_phase_cpu_us_per_task", phases);
        sched_loop_extra(extra, "task", n, c_loop1 - c_loop, &h, counted, cycles, instructions);
        hwc_close(&h);
        json_object_set_new(extra, "cores", json_integer(sysconf(_SC_NPROCESSORS_ONLN)));
        emit_with("scale_tiny", n, t, (double)n / t, peak, extra, top);
    }
    free(refs);
}

/* A chain of dependent inc tasks (2,000; 200 with --quick), after a short warm-up chain: the
 * latency of one hop (task done, its dependant assigned, run, reported). */
static double run_chain(bench *b, uint64_t n, uint64_t *value)
{
    double t0 = now_s();
    spillway_graph *g = spillway_graph_new(b->cl);
    spillway_ref prev;
    spillway_arg a = spillway_arg_u64(0);
    spillway_task(g, "inc", &a, 1, n == 1 ? SPILLWAY_KEEP : 0, &prev);
    for (uint64_t i = 1; i < n; i++) {
        a = spillway_arg_ref(prev);
        spillway_task(g, "inc", &a, 1, i == n - 1 ? SPILLWAY_KEEP : 0, &prev);
    }
    int rc = spillway_submit(g);
    if (rc != 0)
        die(b, "submit", rc);
    spillway_graph_free(g);
    void *data;
    size_t len;
    rc = spillway_get(b->cl, prev, -1, &data, &len);
    if (rc != 0)
        die(b, "get", rc);
    memcpy(value, data, 8);
    spillway_free(data);
    double t = now_s() - t0;
    spillway_release(b->cl, prev);
    return t;
}

/* The chain run b->repeat times (one run of 2,000 hops is ~15 ms and noisy): us_per_hop is the
 * median run's, the CPU and counter figures are over all runs together. */
static void case_chain_latency(bench *b)
{
    uint64_t n = b->quick ? 200 : 2000, v = 0;
    int reps = b->repeat > 0 ? b->repeat : b->quick ? 3 : 7;
    double *ts = calloc((size_t)reps, sizeof *ts), *sorted = calloc((size_t)reps, sizeof *sorted);
    if (ts == NULL || sorted == NULL)
        die(b, "calloc", SPW_ENOMEM);
    run_chain(b, 50, &v);
    hwm_reset(b);
    hwc h;
    hwc_open(&h, b->own_cluster ? b->cluster->sched.pid : 0);
    double c_loop, c_loop1, cycles = 0, instructions = 0;
    double c_sched = sched_cpu_s(b, &c_loop);
    bool verified = true;
    hwc_start(&h);
    for (int r = 0; r < reps; r++) {
        ts[r] = run_chain(b, n, &v);
        verified = verified && v == n;
    }
    bool counted = hwc_stop(&h, &cycles, &instructions);
    double d_sched = sched_cpu_s(b, &c_loop1) - c_sched;
    memcpy(sorted, ts, (size_t)reps * sizeof *ts);
    qsort(sorted, (size_t)reps, sizeof *sorted, cmp_double);
    double t = reps % 2 ? sorted[reps / 2] : (sorted[reps / 2 - 1] + sorted[reps / 2]) / 2;
    uint64_t hops = n * (uint64_t)reps;
    json_t *extra = json_object();
    double peak = hwm_total(b, extra);
    json_t *top = json_object();
    json_object_set_new(top, "workers", json_integer(b->workers));
    json_object_set_new(top, "slots", json_integer(b->slots));
    json_object_set_new(top, "cpus", json_integer(cpus_allowed()));
    json_object_set_new(top, "us_per_hop", json_real(r3(t / (double)n * 1e6)));
    json_t *runs = json_array();
    for (int r = 0; r < reps; r++)
        json_array_append_new(runs, json_real(r3(ts[r] / (double)n * 1e6)));
    json_object_set_new(extra, "repeat", json_integer(reps));
    json_object_set_new(extra, "us_per_hop_runs", runs);
    json_object_set_new(extra, "us_per_hop_min", json_real(r3(sorted[0] / (double)n * 1e6)));
    json_object_set_new(extra, "us_per_hop_max", json_real(r3(sorted[reps - 1] / (double)n * 1e6)));
    json_object_set_new(extra, "sched_cpu_us_per_hop", json_real(r3(d_sched / (double)hops * 1e6)));
    sched_loop_extra(extra, "hop", hops, c_loop1 - c_loop, &h, counted, cycles, instructions);
    hwc_close(&h);
    json_object_set_new(extra, "verified", json_boolean(verified));
    emit_with("chain_latency", n, t, (double)n / t, peak, extra, top);
    free(ts);
    free(sorted);
}

static void case_sort(bench *b)
{
    sort_bench_run(b->workers, b->slots);
}

typedef struct bcase {
    const char *name;
    void (*run)(bench *b);
} bcase;

static const bcase cases[] = {
    {"tiny_tasks", case_tiny_tasks},
    {"tiny_tasks_plugin", case_tiny_tasks_plugin},
    {"plugin_first_task", case_plugin_first_task},
    {"tree_reduce", case_tree_reduce},
    {"linear_chain", case_linear_chain},
    {"put_get", case_put_get},
    {"transfer", case_transfer},
    {"spill", case_spill},
    {"broadcast", case_broadcast},
    {"embed_vs_scatter", case_embed_vs_scatter},
    {"scale_tiny", case_scale_tiny},
    {"chain_latency", case_chain_latency},
    {"sort", case_sort},
};
#define NCASES (sizeof cases / sizeof cases[0])

static void usage(FILE *f)
{
    fprintf(f, "usage: spillway-bench [--case NAME[,NAME...]] [--quick] [--scheduler ADDR]\n"
               "                      [--secret-file PATH] [--workers N] [--slots S]\n"
               "                      [--n N[,N...]] [--repeat R] [--spill-threads N]\n"
               "                      [--spill-workers 1|2] [--cpus N] [--encrypt] [--list]\n"
               "                      [--state-dir DIR|none[,DIR|none...]]\n"
               "  --encrypt: the bench's own cluster requires TLS, on loopback too\n"
               "  --state-dir: the own cluster's scheduler journals there (none: no journal);\n"
               "    several: the cases run once per directory, each on a cluster of its own\n"
               SORT_BENCH_USAGE
               "cases:");
    for (size_t i = 0; i < NCASES; i++)
        fprintf(f, " %s", cases[i].name);
    fprintf(f, "\n");
}

/* An option's whole-number value from 1 to max into *out; false (and a message naming the
 * option) if optarg is anything else. */
static bool int_opt(const char *name, long max, int *out)
{
    char *end;
    long v = strtol(optarg, &end, 10);
    if (*optarg == '\0' || *end != '\0' || v < 1 || v > max) {
        fprintf(stderr, "spillway-bench: --%s: '%s' is not a number from 1 to %ld\n", name, optarg,
                max);
        return false;
    }
    *out = (int)v;
    return true;
}

int main(int argc, char **argv)
{
    bench b;
    memset(&b, 0, sizeof b);
    static h_cluster no_cluster;
    b.cluster = &no_cluster;
    const char *only = NULL, *addr = NULL, *secret = NULL, *state_dirs = NULL;
    b.workers = 2;
    b.slots = 1;
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    b.spill_threads = cores < 1 ? 1 : cores > 4 ? 4 : (int)cores; /* the worker's default */
    bool sized = false, encrypt = false;
    int cpus = 0;
    static const struct option longopts[] = {
        {"case", required_argument, 0, 'c'},   {"quick", no_argument, 0, 'q'},
        {"scheduler", required_argument, 0, 's'}, {"secret-file", required_argument, 0, 'k'},
        {"list", no_argument, 0, 'l'},         {"help", no_argument, 0, 'h'},
        {"workers", required_argument, 0, 'w'}, {"slots", required_argument, 0, 'S'},
        {"n", required_argument, 0, 'n'},      {"spill-threads", required_argument, 0, 'T'},
        {"spill-workers", required_argument, 0, 'W'}, {"repeat", required_argument, 0, 'R'},
        {"cpus", required_argument, 0, 'C'},   {"encrypt", no_argument, 0, 'E'},
        {"state-dir", required_argument, 0, 'D'},
        SORT_BENCH_LONGOPTS, {0, 0, 0, 0},
    };
    int c;
    while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        switch (c) {
        case 'c':
            only = optarg;
            break;
        case 'q':
            b.quick = true;
            break;
        case 'E':
            encrypt = true;
            break;
        case 's':
            addr = optarg;
            break;
        case 'D':
            state_dirs = optarg;
            break;
        case 'k':
            secret = optarg;
            break;
        case 'T':
            if (!int_opt("spill-threads", 64, &b.spill_threads))
                return 2;
            break;
        case 'W':
            if (!int_opt("spill-workers", SPILL_WORKERS, &spill_workers))
                return 2;
            break;
        case 'R':
            if (!int_opt("repeat", 1000, &b.repeat))
                return 2;
            break;
        case 'C':
            if (!int_opt("cpus", CPU_SETSIZE, &cpus))
                return 2;
            break;
        case 'w':
        case 'S':
            if (!int_opt(c == 'w' ? "workers" : "slots", c == 'w' ? H_MAX_WORKERS : 256,
                         c == 'w' ? &b.workers : &b.slots))
                return 2;
            sized = true;
            break;
        case 'n': {
            int k = 0;
            char *list = strdup(optarg), *save = NULL;
            for (char *t = strtok_r(list, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
                char *end;
                unsigned long long v = strtoull(t, &end, 10);
                if (*end != '\0' || v < 1 || v > 100000000ULL || k == 7) {
                    fprintf(stderr, "spillway-bench: --n: '%s' is not a list of up to 7 task "
                                    "counts from 1 to 100000000\n", optarg);
                    free(list);
                    return 2;
                }
                b.scale_n[k++] = v;
            }
            free(list);
            if (k == 0) {
                fprintf(stderr, "spillway-bench: --n: empty list\n");
                return 2;
            }
            break;
        }
        case SORT_OPT_DATA:
        case SORT_OPT_STORE:
        case SORT_OPT_BLOCK:
        case SORT_OPT_PARTS:
            if (!sort_bench_option(c, optarg))
                return 2;
            break;
        case 'l':
            for (size_t i = 0; i < NCASES; i++)
                puts(cases[i].name);
            return 0;
        case 'h':
            usage(stdout);
            return 0;
        default:
            usage(stderr);
            return 2;
        }
    }
    if ((sized || cpus != 0 || encrypt || state_dirs != NULL) && addr != NULL) {
        fprintf(stderr, "spillway-bench: --workers, --slots, --cpus, --encrypt and --state-dir "
                        "shape the bench's own cluster; they do not apply with --scheduler\n");
        return 2;
    }
    if (cpus != 0 && !pin_cpus(cpus))
        return 2;
    if (b.scale_n[0] == 0) {
        static const uint64_t full[] = {20000, 200000, 1000000, 0}, quick[] = {2000, 20000, 0};
        if (b.quick)
            memcpy(b.scale_n, quick, sizeof quick);
        else
            memcpy(b.scale_n, full, sizeof full);
    }
    if (only != NULL) {
        /* Refuse unknown names before starting anything. */
        char *list = strdup(only), *save = NULL;
        for (char *name = strtok_r(list, ",", &save); name; name = strtok_r(NULL, ",", &save)) {
            bool known = false;
            for (size_t i = 0; i < NCASES; i++)
                known = known || strcmp(cases[i].name, name) == 0;
            if (!known) {
                fprintf(stderr, "spillway-bench: unknown case '%s'\n", name);
                usage(stderr);
                return 2;
            }
        }
        free(list);
    }
    /* Daemons and spillway-ctl come from beside this binary (the spill case starts a cluster of
     * its own even with --scheduler). */
    char self[PATH_MAX];
    ssize_t selflen = readlink("/proc/self/exe", self, sizeof self - 1);
    if (selflen > 0) {
        self[selflen] = '\0';
        char *slash = strrchr(self, '/');
        if (slash != NULL) {
            *slash = '\0';
            setenv("SPW_BIN_DIR", self, 0);
        }
    }
    /* One pass per state directory (--state-dir), each on a cluster of its own; one pass on
     * the cluster given (--scheduler) or on an own one without the option. */
    char *dirs = state_dirs != NULL ? strdup(state_dirs) : NULL, *dsave = NULL;
    const char *dir = dirs != NULL ? strtok_r(dirs, ",", &dsave) : NULL;
    const char *given = addr;
    int status = 0;
    do {
        addr = given;
        if (addr == NULL) {
            /* Our own cluster. */
            b.own_cluster = true;
            b.encrypt = encrypt;
            const char *sargs[8];
            int ns = 0;
            if (encrypt) {
                sargs[ns++] = "--encrypt";
                sargs[ns++] = "required";
                sargs[ns++] = "--encrypt-local";
            }
            if (dir != NULL) {
                sargs[ns++] = "--state-dir";
                sargs[ns++] = dir;
                printf("# state-dir %s\n", dir);
                fflush(stdout);
            }
            sargs[ns] = NULL;
            b.cluster = h_cluster_start(encrypt, sargs);
            char slots[16];
            snprintf(slots, sizeof slots, "%d", b.slots);
            for (int i = 0; i < b.workers; i++) {
                char name[32];
                snprintf(name, sizeof name, "bench-w%d", i);
                const char *const wargs[] = {"--slots",         slots, "--store-capacity", "2G",
                                             "--name",          name,  encrypt ? "--encrypt" : NULL,
                                             "required",        "--encrypt-local", NULL};
                h_worker_start(b.cluster, wargs);
            }
            addr = b.cluster->addr;
            if (encrypt)
                secret = b.cluster->secret_file;
        }
        setenv("SPW_BENCH_ADDR", addr, 1);
        b.addr = addr;
        b.secret = secret;
        spillway_opts o;
        spillway_opts_init(&o);
        o.secret_file = secret;
        o.name = "spillway-bench";
        o.encrypt = encrypt ? SPILLWAY_ENCRYPT_REQUIRED : SPILLWAY_ENCRYPT_NO;
        o.encrypt_local = encrypt;
        int rc = spillway_connect(addr, &o, &b.cl);
        if (rc != 0) {
            fprintf(stderr, "spillway-bench: cannot connect to %s: %s\n", addr,
                    spillway_strerror(rc));
            if (b.own_cluster)
                h_cluster_stop(b.cluster);
            free(dirs);
            return 1;
        }
        for (size_t i = 0; i < NCASES; i++) {
            if (only != NULL) {
                char pat[64];
                snprintf(pat, sizeof pat, ",%s,", cases[i].name);
                char list[1024];
                snprintf(list, sizeof list, ",%s,", only);
                if (strstr(list, pat) == NULL)
                    continue;
            }
            cases[i].run(&b);
        }
        spillway_close(b.cl);
        if (b.own_cluster && !h_cluster_stop(b.cluster)) {
            fprintf(stderr, "spillway-bench: the cluster did not stop cleanly\n");
            status = 1;
        }
        if (b.own_cluster && dir != NULL)
            h_cluster_release(b.cluster);
        dir = dirs != NULL ? strtok_r(NULL, ",", &dsave) : NULL;
    } while (dir != NULL);
    free(dirs);
    return status;
}
