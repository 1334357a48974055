/*
 * spw-netbed-bench: the client side of tests/netbed/bench.sh, run on a bed host against a
 * cluster whose workers are named w2, w3, ... (one per bed host). Prints one JSON line per
 * measurement, in spillway-bench's conventions (case first, figures as numbers).
 *   ADDR broadcast K BYTES MBIT REPS  scatter BYTES to K workers (best of REPS)
 *   ADDR transfer BYTES MBIT REPS     w2 makes BYTES, a task on w3 reads them
 *   ADDR tiny N HOSTS DELAY_MS        N noop tasks, submitted and awaited
 *   ADDR sort BYTES HOSTS MBIT P BLOCK  BYTES of u64 sorted by spillway_shuffle (the example
 *       sort plugin) in P partitions over HOSTS workers; verified against the generator here
 *   ADDR drain BYTES PUT MBIT WORKER N READY  BYTES put in PUT-byte puts on the one worker up,
 *       READY written; once N workers serve, WORKER's drain is timed, every put read back
 *
 * SPW_SECRET_FILE names the cluster's secret; SPW_ENCRYPT=required (or yes) connects with
 * --encrypt as the daemons', and broadcast and transfer lines say which ("encrypt").
 * Performance is reported, never asserted: this is not a test.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "spillway/docs.h"
#include "spillway/spillway.h"
#include "sort_job.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void check(spillway *cl, const char *what, int rc)
{
    if (rc != 0) {
        fprintf(stderr, "spw-netbed-bench: %s: %s: %s\n", what, spillway_strerror(rc),
                cl != NULL ? spillway_errmsg(cl) : "");
        exit(1);
    }
}

static double bench_broadcast(spillway *cl, unsigned k, size_t bytes, int reps)
{
    uint8_t *data = malloc(bytes);
    for (size_t i = 0; i < bytes; i++)
        data[i] = (uint8_t)(i * 2654435761u >> 11);
    double best = 1e9;
    for (int r = 0; r < reps; r++) {
        spillway_ref ref;
        double t0 = now_s();
        check(cl, "scatter", spillway_scatter(cl, data, bytes, k, &ref));
        double t = now_s() - t0;
        check(cl, "release", spillway_release(cl, ref));
        if (t < best)
            best = t;
    }
    free(data);
    return best;
}

static double bench_transfer(spillway *cl, size_t bytes, int reps)
{
    double best = 1e9;
    for (int r = 0; r < reps; r++) {
        spillway_graph *g = spillway_graph_new(cl);
        spillway_graph_place(g, "w2");
        spillway_ref made, len;
        spillway_arg a[2] = {spillway_arg_u64(bytes), spillway_arg_bytes("\x5a\x33\x71", 3)};
        check(cl, "task", spillway_task(g, "fill", a, 2, SPILLWAY_KEEP, &made));
        check(cl, "submit", spillway_submit(g));
        spillway_graph_free(g);
        check(cl, "wait", spillway_wait(cl, &made, 1, 120000));
        g = spillway_graph_new(cl);
        spillway_graph_place(g, "w3");
        spillway_arg b = spillway_arg_ref(made);
        check(cl, "task", spillway_task(g, "len", &b, 1, SPILLWAY_KEEP, &len));
        double t0 = now_s();
        check(cl, "submit", spillway_submit(g));
        spillway_graph_free(g);
        check(cl, "wait", spillway_wait(cl, &len, 1, 120000));
        double t = now_s() - t0;
        spillway_release(cl, len);
        spillway_release(cl, made);
        if (t < best)
            best = t;
    }
    return best;
}

static double bench_tiny(spillway *cl, unsigned n)
{
    spillway_ref *refs = malloc(n * sizeof *refs);
    double t0 = now_s();
    spillway_graph *g = spillway_graph_new(cl);
    for (unsigned i = 0; i < n; i++)
        check(cl, "task", spillway_task(g, "noop", NULL, 0, SPILLWAY_KEEP, &refs[i]));
    check(cl, "submit", spillway_submit(g));
    spillway_graph_free(g);
    check(cl, "wait", spillway_wait(cl, refs, n, 300000));
    double t = now_s() - t0;
    check(cl, "release", spillway_release_many(cl, refs, n));
    free(refs);
    return t;
}

/* The sort job (tests/bench/sort_job.h); *verified: every partition's count, xor and sum are
 * those of its bucket of the generated values, computed here before the clock starts (the bed's
 * hosts share the machine's cores). Returns the seconds it took. */
static double bench_sort(spillway *cl, uint64_t bytes, uint32_t p, uint64_t block, bool *verified)
{
    uint64_t total = bytes / 8, per = block / 8;
    spillway_ref *checks = calloc(p, sizeof *checks);
    uint64_t *want = calloc(3 * (size_t)p, 8);
    sort_job_expect(total, per, p, want);
    double t0 = now_s();
    spillway_graph *g = spillway_graph_new(cl);
    check(cl, "graph", sort_job_add(g, total, per, p, checks));
    check(cl, "submit", spillway_submit(g));
    spillway_graph_free(g);
    check(cl, "wait", spillway_wait(cl, checks, p, 1800000));
    double t = now_s() - t0;
    *verified = true;
    for (uint32_t j = 0; j < p; j++) {
        void *data;
        size_t len;
        check(cl, "get", spillway_get(cl, checks[j], 60000, &data, &len));
        *verified = *verified && len == 24 && memcmp(data, &want[3 * (size_t)j], 24) == 0;
        spillway_free(data);
    }
    check(cl, "release", spillway_release_many(cl, checks, p));
    free(checks);
    free(want);
    return t;
}

/* Put i's bytes: xorshift64 from a seed of i's own, incompressible like most data a store
 * spills (zstd gains nothing on them). */
static void drain_fill(uint64_t *buf, size_t n, uint64_t i)
{
    uint64_t x = 0x9e3779b97f4a7c15ull * (i + 1);
    for (size_t k = 0; k < n; k++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        buf[k] = x;
    }
}

/* The status document's record of the worker named name, or NULL (borrowed from doc). */
static json_t *drain_worker(json_t *doc, const char *name)
{
    json_t *ws = json_object_get(doc, "workers"), *w;
    size_t i;
    json_array_foreach(ws, i, w)
    {
        if (strcmp(ctl_doc_s(w, "name"), name) == 0)
            return w;
    }
    return NULL;
}

/* The status document once n workers serve, running (polled: this is a benchmark). */
static json_t *drain_wait_workers(spillway *ctl, unsigned n)
{
    for (int tries = 0; tries < 1200; tries++) {
        json_t *doc;
        check(ctl, "status", ctl_doc_status(ctl, 30000, &doc));
        json_t *ws = json_object_get(doc, "workers"), *w;
        size_t i;
        unsigned up = 0;
        json_array_foreach(ws, i, w)
        {
            up += strcmp(ctl_doc_s(w, "state"), "running") == 0;
        }
        if (up >= n)
            return doc;
        json_decref(doc);
        nanosleep(&(struct timespec){0, 100000000}, NULL);
    }
    fprintf(stderr, "spw-netbed-bench: %u workers never served\n", n);
    exit(1);
}

typedef struct drain_result {
    double seconds;
    uint64_t spilled, copies;
    bool verified;
} drain_result;

/* Puts bytes (in put-byte puts) while only `worker` serves, writes the file ready, and once n
 * workers serve drains `worker`: the seconds from the drain's request to its answer; then reads
 * every put back. */
static drain_result bench_drain(spillway *cl, const char *addr, const spillway_opts *o,
                                uint64_t bytes, size_t put, const char *worker, unsigned n,
                                const char *ready)
{
    size_t nputs = (size_t)(bytes / put);
    spillway_ref *refs = calloc(nputs, sizeof *refs);
    uint64_t *buf = malloc(put);
    for (size_t i = 0; i < nputs; i++) {
        drain_fill(buf, put / 8, i);
        check(cl, "put", spillway_put(cl, buf, put, &refs[i]));
    }
    FILE *f = fopen(ready, "w");
    if (f == NULL || fputs("ready\n", f) < 0 || fclose(f) != 0) {
        perror(ready);
        exit(1);
    }
    spillway *ctl;
    check(NULL, "connect (ctl)", ctl_doc_connect(addr, o, &ctl));
    json_t *doc = drain_wait_workers(ctl, n);
    json_t *w = drain_worker(doc, worker);
    if (w == NULL) {
        fprintf(stderr, "spw-netbed-bench: no worker named %s\n", worker);
        exit(1);
    }
    drain_result r = {.spilled = ctl_doc_u(json_object_get(w, "memory"), "spilled_bytes")};
    json_decref(doc);
    double t0 = now_s();
    check(ctl, "drain", ctl_doc_drain(ctl, 3600 * 1000, worker, &doc));
    r.seconds = now_s() - t0;
    r.copies = ctl_doc_u(doc, "copies");
    json_decref(doc);
    spillway_close(ctl);
    r.verified = true;
    for (size_t i = 0; i < nputs; i++) {
        void *data;
        size_t len;
        check(cl, "get", spillway_get(cl, refs[i], 120000, &data, &len));
        drain_fill(buf, put / 8, i);
        r.verified = r.verified && len == put && memcmp(data, buf, put) == 0;
        spillway_free(data);
    }
    check(cl, "release", spillway_release_many(cl, refs, nputs));
    free(buf);
    free(refs);
    return r;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr,
                "usage: spw-netbed-bench ADDR broadcast|transfer|tiny|sort|drain ARGS...\n");
        return 2;
    }
    spillway_opts o;
    spillway_opts_init(&o);
    o.name = "spw-netbed-bench";
    o.secret_file = getenv("SPW_SECRET_FILE");
    const char *enc = getenv("SPW_ENCRYPT");
    if (enc == NULL || enc[0] == '\0')
        enc = "no";
    if (strcmp(enc, "required") == 0)
        o.encrypt = SPILLWAY_ENCRYPT_REQUIRED;
    else if (strcmp(enc, "yes") == 0)
        o.encrypt = SPILLWAY_ENCRYPT_YES;
    else if (strcmp(enc, "no") != 0) {
        fprintf(stderr, "spw-netbed-bench: SPW_ENCRYPT must be no, yes or required\n");
        return 2;
    }
    spillway *cl;
    check(NULL, "connect", spillway_connect(argv[1], &o, &cl));
    const char *what = argv[2];
    if (strcmp(what, "broadcast") == 0 && argc == 7) {
        unsigned k = (unsigned)atoi(argv[3]);
        size_t bytes = (size_t)strtoull(argv[4], NULL, 10);
        double s = bench_broadcast(cl, k, bytes, atoi(argv[6]));
        printf("{\"case\":\"broadcast_hosts\",\"hosts\":%u,\"encrypt\":\"%s\",\"link_mbit\":%s,"
               "\"bytes\":%zu,\"seconds\":%.4f}\n",
               k, enc, argv[5], bytes, s);
    } else if (strcmp(what, "transfer") == 0 && argc == 6) {
        size_t bytes = (size_t)strtoull(argv[3], NULL, 10);
        double s = bench_transfer(cl, bytes, atoi(argv[5]));
        printf("{\"case\":\"transfer_hosts\",\"encrypt\":\"%s\",\"link_mbit\":%s,\"bytes\":%zu,"
               "\"gbps\":%.4f,\"seconds\":%.4f}\n",
               enc, argv[4], bytes, (double)bytes * 8 / s / 1e9, s);
    } else if (strcmp(what, "tiny") == 0 && argc == 6) {
        unsigned n = (unsigned)atoi(argv[3]);
        double s = bench_tiny(cl, n);
        printf("{\"case\":\"tiny_tasks_hosts\",\"hosts\":%s,\"tasks_per_s\":%.0f,"
               "\"delay_ms\":%s,\"n\":%u,\"seconds\":%.4f}\n",
               argv[4], (double)n / s, argv[5], n, s);
    } else if (strcmp(what, "sort") == 0 && argc == 8) {
        uint64_t bytes = strtoull(argv[3], NULL, 10), block = strtoull(argv[7], NULL, 10);
        unsigned hosts = (unsigned)atoi(argv[4]);
        uint32_t p = (uint32_t)atoi(argv[6]);
        bool ok;
        double s = bench_sort(cl, bytes, p, block, &ok);
        /* The network's limit: a piece crosses the links unless its partition is reduced where
         * it was made, (hosts - 1) / hosts of the bytes, every host sending its share at once. */
        double rate = atof(argv[5]) * 1e6 / 8;
        double limit = (double)bytes * (hosts - 1) / hosts / hosts / rate;
        printf("{\"case\":\"sort_hosts\",\"hosts\":%u,\"link_mbit\":%s,\"bytes\":%llu,"
               "\"partitions\":%u,\"seconds\":%.4f,\"limit_s\":%.4f,\"vs_limit\":%.4f,"
               "\"verified\":%s}\n",
               hosts, argv[5], (unsigned long long)bytes, p, s, limit, limit / s,
               ok ? "true" : "false");
    } else if (strcmp(what, "drain") == 0 && argc == 9) {
        uint64_t bytes = strtoull(argv[3], NULL, 10);
        size_t put = (size_t)strtoull(argv[4], NULL, 10) & ~(size_t)7;
        if (put == 0 || bytes < put) {
            fprintf(stderr, "spw-netbed-bench: drain wants PUT (a multiple of 8) <= BYTES\n");
            spillway_close(cl);
            return 2;
        }
        bytes -= bytes % put;
        drain_result r =
            bench_drain(cl, argv[1], &o, bytes, put, argv[6], (unsigned)atoi(argv[7]), argv[8]);
        /* Every byte leaves the drained worker through its one link: its time is the floor. */
        double link = (double)bytes / (atof(argv[5]) * 1e6 / 8);
        printf("{\"case\":\"drain_hosts\",\"targets\":%d,\"link_mbit\":%s,\"bytes\":%llu,"
               "\"puts\":%llu,\"spilled_bytes\":%llu,\"copies\":%llu,\"seconds\":%.4f,"
               "\"link_s\":%.4f,\"vs_link\":%.4f,\"verified\":%s}\n",
               atoi(argv[7]) - 1, argv[5], (unsigned long long)bytes,
               (unsigned long long)(bytes / put), (unsigned long long)r.spilled,
               (unsigned long long)r.copies, r.seconds, link, r.seconds / link,
               r.verified ? "true" : "false");
    } else {
        fprintf(stderr, "spw-netbed-bench: bad arguments for '%s'\n", what);
        spillway_close(cl);
        return 2;
    }
    fflush(stdout);
    spillway_close(cl);
    return 0;
}
