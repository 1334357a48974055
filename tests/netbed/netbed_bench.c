/*
 * spw-netbed-bench: the client side of tests/netbed/bench.sh, run on a bed host against a
 * cluster whose workers are named w2, w3, ... (one per bed host). Prints one JSON line per
 * measurement, in spillway-bench's conventions (case first, figures as numbers).
 *
 *   spw-netbed-bench ADDR broadcast K BYTES MBIT REPS   scatter BYTES to K workers (best of REPS)
 *   spw-netbed-bench ADDR transfer BYTES MBIT REPS      w2 makes BYTES, a task on w3 reads them
 *   spw-netbed-bench ADDR tiny N HOSTS DELAY_MS         N noop tasks, submitted and awaited
 *
 * Performance is reported, never asserted: this is not a test.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "spillway/spillway.h"

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

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: spw-netbed-bench ADDR broadcast|transfer|tiny ARGS...\n");
        return 2;
    }
    spillway_opts o;
    spillway_opts_init(&o);
    o.name = "spw-netbed-bench";
    o.secret_file = getenv("SPW_SECRET_FILE");
    spillway *cl;
    check(NULL, "connect", spillway_connect(argv[1], &o, &cl));
    const char *what = argv[2];
    if (strcmp(what, "broadcast") == 0 && argc == 7) {
        unsigned k = (unsigned)atoi(argv[3]);
        size_t bytes = (size_t)strtoull(argv[4], NULL, 10);
        double s = bench_broadcast(cl, k, bytes, atoi(argv[6]));
        printf("{\"case\":\"broadcast_hosts\",\"hosts\":%u,\"link_mbit\":%s,\"bytes\":%zu,"
               "\"seconds\":%.4f}\n",
               k, argv[5], bytes, s);
    } else if (strcmp(what, "transfer") == 0 && argc == 6) {
        size_t bytes = (size_t)strtoull(argv[3], NULL, 10);
        double s = bench_transfer(cl, bytes, atoi(argv[5]));
        printf("{\"case\":\"transfer_hosts\",\"link_mbit\":%s,\"bytes\":%zu,\"gbps\":%.4f,"
               "\"seconds\":%.4f}\n",
               argv[4], bytes, (double)bytes * 8 / s / 1e9, s);
    } else if (strcmp(what, "tiny") == 0 && argc == 6) {
        unsigned n = (unsigned)atoi(argv[3]);
        double s = bench_tiny(cl, n);
        printf("{\"case\":\"tiny_tasks_hosts\",\"hosts\":%s,\"tasks_per_s\":%.0f,"
               "\"delay_ms\":%s,\"n\":%u,\"seconds\":%.4f}\n",
               argv[4], (double)n / s, argv[5], n, s);
    } else {
        fprintf(stderr, "spw-netbed-bench: bad arguments for '%s'\n", what);
        spillway_close(cl);
        return 2;
    }
    fflush(stdout);
    spillway_close(cl);
    return 0;
}
