/*
 * spillway-bench --case sort: an out-of-core sort through spillway_shuffle against what the
 * same computation costs without a cluster.
 *
 * The data (--sort-data, default 8 x the stores together) is made by gen tasks of the example
 * sort plugin, dealt by split(block, P) and sorted by sort into P partitions, each verified by
 * check, in one graph on a cluster of its own (--workers x --slots, stores of --sort-store,
 * spilling into a temporary directory under /var/tmp). The limit runs the plugin's very
 * functions on the same data in this process, on one core, and divides that time by the
 * workers, then adds one write and one read of every byte at the speed of the spill directory's
 * disk, measured in the same run (a file written with fsync, dropped from the page cache, read).
 * Prints one JSON line: seconds, limit_s, vs_limit (limit_s / seconds), the workers' peak
 * memory and the bytes they spilled.
 */
#include "sort_bench.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <sys/stat.h>

#include <jansson.h>

#include "harness.h"
#include "local_plugin.h"
#include "spillway/base.h"
#include "spillway/spillway.h"
#include "spillway/task.h"
#include "sort_job.h"

static uint64_t opt_data, opt_store = 128u << 20, opt_block;
static uint32_t opt_parts;

bool sort_bench_option(int code, const char *arg)
{
    if (code == SORT_OPT_PARTS) {
        char *end;
        unsigned long v = strtoul(arg, &end, 10);
        if (*arg == '\0' || *end != '\0' || v < 1 || v > SPILLWAY_MAX_OUTPUTS) {
            fprintf(stderr, "spillway-bench: --sort-partitions: '%s' is not 1 to %u\n", arg,
                    SPILLWAY_MAX_OUTPUTS);
            return false;
        }
        opt_parts = (uint32_t)v;
        return true;
    }
    uint64_t v;
    if (spw_size_parse(arg, &v) != 0 || v < 8) {
        fprintf(stderr, "spillway-bench: '%s' is not a size (64M, 2G)\n", arg);
        return false;
    }
    *(code == SORT_OPT_DATA ? &opt_data : code == SORT_OPT_STORE ? &opt_store : &opt_block) = v;
    return true;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static double thread_cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static _Noreturn void die(const char *what, const char *detail)
{
    fprintf(stderr, "spillway-bench: sort: %s: %s\n", what, detail);
    exit(1);
}

/* ------------------------------------------------ the plugin, in this process */

typedef struct plugin {
    void *dl;
    spw_task_fn gen, split, sort, check;
} plugin;

static void plugin_open(plugin *p)
{
    const char *why = NULL;
    const spw_plugin *pl = local_plugin_open(SPW_SORT_PLUGIN, &p->dl, &why);
    if (pl == NULL)
        die(SPW_SORT_PLUGIN, why);
    p->gen = local_plugin_fn(pl, "gen");
    p->split = local_plugin_fn(pl, "split");
    p->sort = local_plugin_fn(pl, "sort");
    p->check = local_plugin_fn(pl, "check");
    if (p->gen == NULL || p->split == NULL || p->sort == NULL || p->check == NULL)
        die(SPW_SORT_PLUGIN, "not the example sort plugin");
}

/* Runs fn(args) with nouts outputs into outs/lens. */
static void run_fn(spw_task_fn fn, const spw_task_arg *args, uint32_t nargs, uint32_t nouts,
                   void **outs, uint64_t *lens)
{
    char err[256];
    if (local_run_fn(fn, args, nargs, nouts, outs, lens, err) != 0)
        die("local run", err);
}

static spw_task_arg u64_arg(uint64_t *v)
{
    return (spw_task_arg){v, 8};
}

/* The job's computation on one core: gen, split, sort and check over the same blocks.
 * sums gets each partition's check output (count, xor, sum). Returns the thread's CPU seconds. */
static double local_run(const plugin *pl, uint32_t nblocks, uint64_t per_block, uint64_t total,
                        uint32_t p, uint64_t *sums, double *wall)
{
    void **pieces = calloc((size_t)nblocks * p, sizeof *pieces);
    uint64_t *plens = calloc((size_t)nblocks * p, sizeof *plens);
    spw_task_arg *args = calloc(nblocks, sizeof *args);
    if (pieces == NULL || plens == NULL || args == NULL)
        die("local run", "out of memory");
    double c0 = thread_cpu_s(), w0 = now_s();
    for (uint32_t b = 0; b < nblocks; b++) {
        uint64_t n = b + 1 < nblocks ? per_block : total - (uint64_t)b * per_block, seed = 1 + b;
        spw_task_arg ga[2] = {u64_arg(&n), u64_arg(&seed)};
        void *block;
        uint64_t blen;
        run_fn(pl->gen, ga, 2, 1, &block, &blen);
        uint64_t pp = p;
        spw_task_arg sa[2] = {{block, blen}, u64_arg(&pp)};
        run_fn(pl->split, sa, 2, p, pieces + (size_t)b * p, plens + (size_t)b * p);
        free(block);
    }
    for (uint32_t j = 0; j < p; j++) {
        for (uint32_t b = 0; b < nblocks; b++)
            args[b] = (spw_task_arg){pieces[(size_t)b * p + j], plens[(size_t)b * p + j]};
        void *part, *sum;
        uint64_t plen, slen, jj = j, pp = p;
        run_fn(pl->sort, args, nblocks, 1, &part, &plen);
        for (uint32_t b = 0; b < nblocks; b++)
            free(pieces[(size_t)b * p + j]);
        spw_task_arg ca[3] = {{part, plen}, u64_arg(&jj), u64_arg(&pp)};
        run_fn(pl->check, ca, 3, 1, &sum, &slen);
        memcpy(sums + 3 * (size_t)j, sum, 24);
        free(sum);
        free(part);
    }
    double cpu = thread_cpu_s() - c0;
    *wall = now_s() - w0;
    free(pieces);
    free(plens);
    free(args);
    return cpu;
}

/* ------------------------------------------------------------- the disk */

/* Write (with fsync) and read speeds, bytes per second, of a file of `size` in dir; the file
 * is dropped from the page cache before it is read. */
static void disk_speed(const char *dir, uint64_t size, double *write_bps, double *read_bps)
{
    char path[512];
    snprintf(path, sizeof path, "%s/disk-probe", dir);
    enum { CHUNK = 4u << 20 };
    uint64_t *buf = malloc(CHUNK), x = 42;
    for (size_t i = 0; i < CHUNK / 8; i++)
        buf[i] = x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    int fd = open(path, O_CREAT | O_TRUNC | O_RDWR | O_CLOEXEC, 0600);
    if (fd < 0 || buf == NULL)
        die(path, strerror(errno));
    double t0 = now_s();
    for (uint64_t off = 0; off < size; off += CHUNK) {
        buf[0] = off; /* no two chunks alike */
        if (write(fd, buf, CHUNK) != CHUNK)
            die(path, strerror(errno));
    }
    if (fsync(fd) != 0)
        die(path, strerror(errno));
    *write_bps = (double)size / (now_s() - t0);
    posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    lseek(fd, 0, SEEK_SET);
    t0 = now_s();
    for (uint64_t off = 0; off < size; off += CHUNK)
        if (read(fd, buf, CHUNK) != CHUNK)
            die(path, strerror(errno));
    *read_bps = (double)size / (now_s() - t0);
    close(fd);
    unlink(path);
    free(buf);
}

/* ------------------------------------------------------------ the cluster */

static long status_kib(pid_t pid, const char *field)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    long v = 0;
    size_t n = strlen(field);
    while (f != NULL && fgets(line, sizeof line, f) != NULL)
        if (strncmp(line, field, n) == 0 && line[n] == ':')
            v = strtol(line + n + 1, NULL, 10);
    if (f != NULL)
        fclose(f);
    return v;
}

/* A worker's executors (its children). */
static int executors(pid_t w, pid_t *out, int max)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/task/%d/children", (int)w, (int)w);
    FILE *f = fopen(path, "r");
    int n = 0, child;
    while (f != NULL && n < max && fscanf(f, "%d", &child) == 1)
        out[n++] = child;
    if (f != NULL)
        fclose(f);
    return n;
}

typedef struct wpeak {
    long hwm_kib;      /* the worker's VmHWM */
    long exec_hwm_kib; /* its largest executor's VmHWM */
    long sampled_kib;  /* most of RssAnon + RssShmem of the worker plus its executors' RssAnon */
    long file_kib;     /* most of the worker's RssFile: the spill map's pages, the kernel's to
                          reclaim, which VmHWM counts too */
} wpeak;

static void sample(const h_cluster *c, wpeak *pk)
{
    for (int i = 0; i < c->nworkers; i++) {
        pid_t w = c->workers[i].pid, ex[64];
        long kib = status_kib(w, "RssAnon") + status_kib(w, "RssShmem");
        int n = executors(w, ex, 64);
        for (int k = 0; k < n; k++) {
            kib += status_kib(ex[k], "RssAnon");
            long h = status_kib(ex[k], "VmHWM");
            if (h > pk[i].exec_hwm_kib)
                pk[i].exec_hwm_kib = h;
        }
        if (kib > pk[i].sampled_kib)
            pk[i].sampled_kib = kib;
        long file = status_kib(w, "RssFile");
        if (file > pk[i].file_kib)
            pk[i].file_kib = file;
    }
}

/* Sum over the workers of a `spillway-ctl --json status` memory figure. */
static uint64_t workers_sum(const h_cluster *c, const char *field)
{
    const char *argv[] = {h_bin("spillway-ctl"), "--scheduler", c->addr, "--json", "status", NULL};
    char *text = NULL;
    json_t *doc = h_run(argv, &text) == 0 ? json_loads(text, 0, NULL) : NULL;
    free(text);
    uint64_t sum = 0;
    size_t i;
    json_t *w;
    json_array_foreach(json_object_get(doc, "workers"), i, w)
    {
        sum += (uint64_t)json_integer_value(json_object_get(json_object_get(w, "memory"), field));
    }
    json_decref(doc);
    return sum;
}

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    remove(path);
    return 0;
}

static h_cluster *running; /* the cluster whose logs tell why the job failed */

static void check_rc(spillway *cl, const char *what, int rc)
{
    if (rc == 0)
        return;
    if (running != NULL)
        h_dump_logs(running);
    die(what, spillway_errmsg(cl));
}

/* The job on the cluster; fills got (P x 24 bytes of check outputs). Returns its seconds. */
static double cluster_run(h_cluster *c, uint64_t per_block, uint64_t total,
                          uint32_t p, uint64_t *got, wpeak *pk)
{
    spillway *cl;
    if (spillway_connect(c->addr, NULL, &cl) != 0)
        die("connect", spillway_errmsg(NULL));
    spillway_ref *checks = calloc(p, sizeof *checks);
    double t0 = now_s();
    spillway_graph *g = spillway_graph_new(cl);
    check_rc(cl, "graph", sort_job_add(g, total, per_block, p, checks));
    check_rc(cl, "submit", spillway_submit(g));
    spillway_graph_free(g);
    int rc;
    while ((rc = spillway_wait(cl, checks, p, 20)) == SPW_ETIMEDOUT)
        sample(c, pk);
    check_rc(cl, "wait", rc);
    double t = now_s() - t0;
    sample(c, pk);
    for (uint32_t j = 0; j < p; j++) {
        void *data;
        size_t len;
        check_rc(cl, "get", spillway_get(cl, checks[j], 10000, &data, &len));
        if (len == 24)
            memcpy(got + 3 * (size_t)j, data, 24);
        spillway_free(data);
    }
    spillway_release_many(cl, checks, p);
    spillway_close(cl);
    free(checks);
    return t;
}

void sort_bench_run(int workers, int slots)
{
    uint64_t store = opt_store, data = opt_data != 0 ? opt_data : 8 * store * (uint64_t)workers;
    uint64_t block = opt_block != 0 ? opt_block : store / 8;
    uint32_t p = opt_parts;
    if (p == 0) {
        uint64_t want = (data + store / 4 - 1) / (store / 4);
        p = want > SPILLWAY_MAX_OUTPUTS ? SPILLWAY_MAX_OUTPUTS : (uint32_t)want;
    }
    uint64_t total = data / 8, per_block = block / 8 > 0 ? block / 8 : 1;
    uint32_t nblocks = (uint32_t)((total + per_block - 1) / per_block);
    /* A sort holds its pieces (inline ones arrive in its message) and a scratch array. */
    uint64_t part = data / p, task_limit = store / 2 > 4 * part ? store / 2 : 4 * part;

    char dir[] = "/var/tmp/spw-sort-bench.XXXXXX";
    if (mkdtemp(dir) == NULL)
        die(dir, strerror(errno));
    double wbps, rbps;
    disk_speed(dir, 256u << 20, &wbps, &rbps);

    plugin pl = {0};
    plugin_open(&pl);
    uint64_t *want = calloc(3 * (size_t)p, 8), *got = calloc(3 * (size_t)p, 8);
    double local_wall, local_cpu = local_run(&pl, nblocks, per_block, total, p, want, &local_wall);

    h_cluster *c = h_cluster_start(false, NULL);
    char sslots[16], sstore[32], slimit[32];
    snprintf(sslots, sizeof sslots, "%d", slots);
    snprintf(sstore, sizeof sstore, "%llu", (unsigned long long)store);
    snprintf(slimit, sizeof slimit, "%llu", (unsigned long long)task_limit);
    for (int i = 0; i < workers; i++) {
        char name[32], sdir[600];
        snprintf(name, sizeof name, "sort-w%d", i);
        snprintf(sdir, sizeof sdir, "%s/w%d", dir, i);
        const char *const args[] = {"--slots", sslots,  "--store-capacity", sstore,
                                    "--name",  name,    "--spill-dir",      sdir,
                                    "--plugin", SPW_SORT_PLUGIN, "--task-memory-limit", slimit,
                                    NULL};
        if (mkdir(sdir, 0700) != 0)
            die(sdir, strerror(errno));
        h_worker_start(c, args);
    }
    wpeak pk[H_MAX_WORKERS] = {{0}};
    running = c;
    double secs = cluster_run(c, per_block, total, p, got, pk);
    running = NULL;
    uint64_t spilled = workers_sum(c, "spill_total_bytes");
    uint64_t restored = workers_sum(c, "restore_total_bytes");
    long hwm = 0, exec_hwm = 0, sampled = 0, file = 0;
    for (int i = 0; i < c->nworkers; i++) {
        long h = status_kib(c->workers[i].pid, "VmHWM");
        hwm = h > hwm ? h : hwm;
        exec_hwm = pk[i].exec_hwm_kib > exec_hwm ? pk[i].exec_hwm_kib : exec_hwm;
        sampled = pk[i].sampled_kib > sampled ? pk[i].sampled_kib : sampled;
        file = pk[i].file_kib > file ? pk[i].file_kib : file;
    }
    h_cluster_stop(c);
    h_cluster_release(c);
    nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);

    double limit = local_cpu / workers + (double)data / wbps + (double)data / rbps;
    json_t *o = json_object(), *extra = json_object();
    json_object_set_new(o, "case", json_string("sort"));
    json_object_set_new(o, "n", json_integer(nblocks));
    json_object_set_new(o, "seconds", json_real(secs));
    json_object_set_new(o, "tasks_per_s", json_null());
    json_object_set_new(o, "limit_s", json_real(limit));
    json_object_set_new(o, "vs_limit", json_real(limit / secs));
    json_object_set_new(o, "bytes", json_integer((json_int_t)data));
    json_object_set_new(o, "workers", json_integer(workers));
    json_object_set_new(o, "slots", json_integer(slots));
    json_object_set_new(o, "store_mib", json_integer((json_int_t)(store >> 20)));
    json_object_set_new(o, "partitions", json_integer(p));
    json_object_set_new(o, "peak_worker_mib", json_real((double)hwm / 1024));
    json_object_set_new(o, "budget_mib",
                        json_integer((json_int_t)((store + (uint64_t)slots * task_limit) >> 20) +
                                     64));
    json_object_set_new(o, "spilled_bytes", json_integer((json_int_t)spilled));
    json_object_set_new(o, "verified", json_boolean(memcmp(want, got, 24 * (size_t)p) == 0));
    json_object_set_new(extra, "local_cpu_s", json_real(local_cpu));
    json_object_set_new(extra, "local_wall_s", json_real(local_wall));
    json_object_set_new(extra, "disk_write_mb_s", json_real(wbps / 1e6));
    json_object_set_new(extra, "disk_read_mb_s", json_real(rbps / 1e6));
    json_object_set_new(extra, "restored_bytes", json_integer((json_int_t)restored));
    json_object_set_new(extra, "peak_worker_private_mib", json_real((double)sampled / 1024));
    json_object_set_new(extra, "peak_worker_file_mib", json_real((double)file / 1024));
    json_object_set_new(extra, "peak_executor_mib", json_real((double)exec_hwm / 1024));
    json_object_set_new(extra, "block_bytes", json_integer((json_int_t)block));
    json_object_set_new(extra, "task_memory_limit", json_integer((json_int_t)task_limit));
    json_object_set_new(o, "extra", extra);
    char *s = json_dumps(o, JSON_PRESERVE_ORDER | JSON_COMPACT | JSON_REAL_PRECISION(6));
    puts(s);
    fflush(stdout);
    free(s);
    json_decref(o);
    free(want);
    free(got);
    dlclose(pl.dl);
}
