/*
 * spillway demo: a real job through libspillway.
 *
 *   spillway-demo [SCHEDULER_ADDR]      (default $SPILLWAY_SCHEDULER or 127.0.0.1:7400)
 *
 * Puts 32 MiB of float64 values as one object, sums each 512 KiB block in its own task over a
 * view of the object (no copies), reduces the partial sums in one more task, and checks the
 * answer against a local computation. Then a small graph with a dependency chain, and a task
 * that fails on purpose to show how its error text comes back.
 */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "spillway/spillway.h"

#define N_VALUES (4u << 20) /* 32 MiB of float64 */
#define BLOCK_VALUES (64u << 10)

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int check(spillway *c, int rc, const char *what)
{
    if (rc != 0)
        fprintf(stderr, "demo: %s failed: %s: %s\n", what, spillway_strerror(rc),
                spillway_errmsg(c));
    return rc;
}

/* Draws the graph's progress bar (done, failed in red) until every task is done or failed,
 * from spillway_graph_status; redrawn in place on a terminal, the last state only otherwise. */
static void show_progress(spillway *c, uint64_t gid, const char *label)
{
    bool tty = isatty(STDOUT_FILENO) != 0;
    spillway_graph_progress p;
    for (;;) {
        if (spillway_graph_status(c, gid, &p) != 0)
            return;
        if (tty || p.finished) {
            enum { W = 40 };
            uint64_t t = p.total ? p.total : 1;
            int nd = (int)(p.done * W / t), nf = (int)(p.failed * W / t);
            printf("%s%-10s [", tty ? "\r" : "", label);
            for (int i = 0; i < W; i++)
                fputs(i < nd ? "#" : i < nd + nf ? (tty ? "\033[31mx\033[0m" : "x") : ".", stdout);
            printf("] %llu/%llu done, %llu running, %llu failed", (unsigned long long)p.done,
                   (unsigned long long)p.total, (unsigned long long)p.running,
                   (unsigned long long)p.failed);
            fflush(stdout);
        }
        if (p.finished) {
            putchar('\n');
            return;
        }
        struct timespec ts = {0, 50 * 1000000L};
        nanosleep(&ts, NULL);
    }
}

int main(int argc, char **argv)
{
    const char *addr = argc > 1 ? argv[1] : getenv("SPILLWAY_SCHEDULER");
    if (addr == NULL)
        addr = "127.0.0.1:7400";
    spillway *c;
    int rc = spillway_connect(addr, NULL, &c);
    if (rc != 0) {
        fprintf(stderr, "demo: cannot connect to %s: %s\n", addr, spillway_strerror(rc));
        return 1;
    }
    printf("connected to the scheduler at %s\n", addr);

    double *values = malloc(N_VALUES * sizeof *values);
    double local = 0, x = 100.0;
    for (uint32_t i = 0; i < N_VALUES; i++) {
        x += (double)((int)(i * 2654435761u % 21) - 10) * 0.01;
        values[i] = x;
        local += x;
    }
    double t0 = now();
    spillway_ref data;
    if (check(c, spillway_put(c, values, N_VALUES * sizeof *values, &data), "put") != 0)
        return 1;
    printf("put %u float64 values (%.0f MiB) as one object in %.3f s\n", N_VALUES,
           N_VALUES * 8.0 / (1 << 20), now() - t0);

    t0 = now();
    spillway_graph *g = spillway_graph_new(c);
    uint32_t nblocks = N_VALUES / BLOCK_VALUES;
    spillway_arg *partials = calloc(nblocks, sizeof *partials);
    for (uint32_t b = 0; b < nblocks; b++) {
        spillway_arg view = spillway_arg_view(data, (uint64_t)b * BLOCK_VALUES * 8,
                                              BLOCK_VALUES * 8);
        spillway_ref part;
        spillway_task(g, "sum_f64", &view, 1, 0, &part);
        partials[b] = spillway_arg_ref(part);
    }
    spillway_ref total;
    spillway_task(g, "sum_f64", partials, nblocks, SPILLWAY_KEEP, &total);
    if (check(c, spillway_submit(g), "submit") != 0)
        return 1;
    uint64_t gid = spillway_graph_id(g);
    spillway_graph_free(g);
    show_progress(c, gid, "map-blocks");
    void *out;
    size_t len;
    if (check(c, spillway_get(c, total, 60000, &out, &len), "get") != 0)
        return 1;
    double sum;
    memcpy(&sum, out, sizeof sum);
    spillway_free(out);
    bool ok = fabs(sum - local) <= 1e-6 * fabs(local);
    printf("map-blocks: %u sum_f64 tasks over views of the object + 1 reduction: sum = %.6f "
           "(local %.6f) %s in %.3f s\n",
           nblocks, sum, local, ok ? "OK" : "MISMATCH", now() - t0);

    /* A chain: fill -> checksum, and inc applied three times. */
    g = spillway_graph_new(c);
    spillway_ref filled, sumref, a1, a2, a3, bad;
    spillway_arg fa[2] = {spillway_arg_u64(8u << 20), spillway_arg_bytes("spillway", 8)};
    spillway_task(g, "fill", fa, 2, 0, &filled);
    spillway_arg fr = spillway_arg_ref(filled);
    spillway_task(g, "len", &fr, 1, SPILLWAY_KEEP, &sumref);
    spillway_arg one = spillway_arg_u64(41);
    spillway_task(g, "inc", &one, 1, 0, &a1);
    spillway_arg r1 = spillway_arg_ref(a1);
    spillway_task(g, "inc", &r1, 1, 0, &a2);
    spillway_arg r2[2] = {spillway_arg_ref(a2), spillway_arg_u64(0)};
    spillway_task(g, "add", r2, 2, SPILLWAY_KEEP, &a3);
    spillway_arg msg = spillway_arg_bytes("this task fails on purpose", 26);
    spillway_task(g, "fail", &msg, 1, SPILLWAY_KEEP, &bad);
    if (check(c, spillway_submit(g), "submit") != 0)
        return 1;
    gid = spillway_graph_id(g);
    spillway_graph_free(g);
    show_progress(c, gid, "chain");
    uint64_t n = 0, answer = 0;
    if (spillway_get(c, sumref, 60000, &out, &len) == 0) {
        memcpy(&n, out, 8);
        spillway_free(out);
    }
    if (spillway_get(c, a3, 60000, &out, &len) == 0) {
        memcpy(&answer, out, 8);
        spillway_free(out);
    }
    printf("fill 8 MiB in a worker's store, len() of it = %llu; inc(inc(41)) = %llu\n",
           (unsigned long long)n, (unsigned long long)answer);
    rc = spillway_get(c, bad, 60000, &out, &len);
    printf("a failing task reports: %s: \"%s\"\n", spillway_strerror(rc), spillway_errmsg(c));
    ok = ok && n == (8u << 20) && answer == 43 && rc == SPW_ETASKFAILED;

    spillway_ref all[] = {data, total, sumref, a3, bad};
    spillway_release_many(c, all, sizeof all / sizeof all[0]);
    spillway_close(c);
    free(values);
    free(partials);
    printf("%s\n", ok ? "demo finished: all results correct" : "demo FAILED");
    return ok ? 0 : 1;
}
