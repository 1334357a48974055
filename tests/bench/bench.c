/*
 * spillway-bench: the benchmark cases, one JSON line per case.
 *
 *   spillway-bench [--case NAME[,NAME...]] [--quick] [--scheduler ADDR] [--secret-file PATH]
 *
 * Without --scheduler it starts its own cluster on 127.0.0.1 (a scheduler and two workers with
 * one slot each, from the binaries beside it) and stops it at the end. Each line carries
 * case, n, seconds, tasks_per_s, peak_rss_mib (VmHWM summed over this process, the scheduler,
 * the workers and their executors, reset before each case) and extra (case-specific figures).
 * Performance is reported, never asserted: this is not a test.
 */
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
#include <sys/socket.h>

#include <jansson.h>

#include "harness.h"
#include "spillway/spillway.h"

typedef struct bench {
    spillway *cl;
    h_cluster cluster;
    bool own_cluster;
    bool quick;
    pid_t pids[64];
    int npids;
} bench;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void die(bench *b, const char *what, int rc)
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
    while (fscanf(f, "%d", &child) == 1 && b->npids < 64)
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
    b->pids[b->npids++] = b->cluster.sched.pid;
    for (int i = 0; i < b->cluster.nworkers; i++) {
        b->pids[b->npids++] = b->cluster.workers[i].pid;
        add_children(b, b->cluster.workers[i].pid);
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
        const char *role = i == 0 ? "bench" : (b->pids[i] == b->cluster.sched.pid ? "scheduler" : "worker_or_executor");
        snprintf(key, sizeof key, "%s_%d", role, (int)b->pids[i]);
        json_object_set_new(per, key, json_real((double)(long)(mib * 10) / 10));
    }
    if (extra != NULL)
        json_object_set_new(extra, "rss_mib", per);
    return total;
}

/* One JSON line: case, n, seconds, tasks_per_s, peak_rss_mib, then top-level fields the
 * case's issue names (top, may be NULL), then extra. Consumes extra and top. */
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

static void run_independent(bench *b, const char *fn, uint64_t n, spillway_ref *refs,
                            double *t_submit)
{
    double t0 = now_s();
    spillway_graph *g = spillway_graph_new(b->cl);
    for (uint64_t i = 0; i < n; i++) {
        spillway_arg a = spillway_arg_u64(i);
        int rc = spillway_task(g, fn, &a, 1, SPILLWAY_KEEP, &refs[i]);
        if (rc != 0)
            die(b, "task", rc);
    }
    int rc = spillway_submit(g);
    if (rc != 0)
        die(b, "submit", rc);
    spillway_graph_free(g);
    if (t_submit != NULL)
        *t_submit = now_s() - t0;
    rc = spillway_wait(b->cl, refs, n, -1);
    if (rc != 0)
        die(b, "wait", rc);
}

static void case_tiny_tasks(bench *b)
{
    uint64_t n = b->quick ? 2000 : 20000;
    spillway_ref *refs = calloc(n, sizeof *refs);
    /* Warm-up: executors started, function timings known, as the Dask peer does. */
    run_independent(b, "noop", 200, refs, NULL);
    spillway_release_many(b->cl, refs, 200);
    hwm_reset(b);
    double t0 = now_s(), t_submit;
    run_independent(b, "noop", n, refs, &t_submit);
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
    json_object_set_new(extra, "function", json_string("noop"));
    emit("tiny_tasks", n, t, (double)n / t, peak, extra);
    free(refs);
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
    int rc = spillway_connect(b->cluster.addr[0] ? b->cluster.addr : getenv("SPW_BENCH_ADDR"),
                              &o, &cl);
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
        /* The fields at the top level too, for easy comparison. */
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
        void *data;
        size_t len;
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
    json_t *top = json_object();
    json_object_set(top, "bytes", json_object_get(extra, "bytes"));
    json_object_set(top, "gbps", json_object_get(extra, "gbps"));
    json_object_set(top, "tcp_gbps", json_object_get(extra, "tcp_gbps"));
    emit_with("transfer", (uint64_t)reps, total, 0, peak, extra, top);
}

typedef struct bcase {
    const char *name;
    void (*run)(bench *b);
} bcase;

static const bcase cases[] = {
    {"tiny_tasks", case_tiny_tasks},
    {"tree_reduce", case_tree_reduce},
    {"linear_chain", case_linear_chain},
    {"put_get", case_put_get},
    {"transfer", case_transfer},
};
#define NCASES (sizeof cases / sizeof cases[0])

static void usage(FILE *f)
{
    fprintf(f, "usage: spillway-bench [--case NAME[,NAME...]] [--quick] [--scheduler ADDR]\n"
               "                      [--secret-file PATH] [--list]\n"
               "cases:");
    for (size_t i = 0; i < NCASES; i++)
        fprintf(f, " %s", cases[i].name);
    fprintf(f, "\n");
}

int main(int argc, char **argv)
{
    bench b;
    memset(&b, 0, sizeof b);
    const char *only = NULL, *addr = NULL, *secret = NULL;
    static const struct option longopts[] = {
        {"case", required_argument, 0, 'c'},   {"quick", no_argument, 0, 'q'},
        {"scheduler", required_argument, 0, 's'}, {"secret-file", required_argument, 0, 'k'},
        {"list", no_argument, 0, 'l'},         {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0},
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
        case 's':
            addr = optarg;
            break;
        case 'k':
            secret = optarg;
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
    if (addr == NULL) {
        /* Our own cluster, from the binaries beside this one. */
        char self[PATH_MAX];
        ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
        if (n > 0) {
            self[n] = '\0';
            char *slash = strrchr(self, '/');
            if (slash != NULL) {
                *slash = '\0';
                setenv("SPW_BIN_DIR", self, 0);
            }
        }
        b.own_cluster = true;
        h_cluster_start(&b.cluster, false, NULL);
        static const char *const w0[] = {"--slots", "1", "--store-capacity", "2G", "--name",
                                         "bench-w0", NULL};
        static const char *const w1[] = {"--slots", "1", "--store-capacity", "2G", "--name",
                                         "bench-w1", NULL};
        h_worker_start(&b.cluster, w0);
        h_worker_start(&b.cluster, w1);
        addr = b.cluster.addr;
    }
    setenv("SPW_BENCH_ADDR", addr, 1);
    spillway_opts o;
    spillway_opts_init(&o);
    o.secret_file = secret;
    o.name = "spillway-bench";
    int rc = spillway_connect(addr, &o, &b.cl);
    if (rc != 0) {
        fprintf(stderr, "spillway-bench: cannot connect to %s: %s\n", addr, spillway_strerror(rc));
        if (b.own_cluster)
            h_cluster_stop(&b.cluster);
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
    if (b.own_cluster && !h_cluster_stop(&b.cluster)) {
        fprintf(stderr, "spillway-bench: the cluster did not stop cleanly\n");
        return 1;
    }
    return 0;
}
