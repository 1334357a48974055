/*
 * spillway-sort: sorts random 64-bit values through a cluster with spillway_shuffle, larger
 * than the workers' stores if asked, and checks the result against the same values here.
 *
 *   spillway-sort [--scheduler HOST:PORT] [--gib G] [--block-mib M] [--partitions P]
 *
 * The workers must run the example sort plugin (sort_plugin.c beside this file):
 *   spillway-worker --plugin /path/to/sort.so ...
 * gen tasks make G GiB (default 0.25) in blocks of M MiB (default 8), split(block, P) deals
 * each block into P buckets (default: partitions of about 16 MiB), and sort(bucket j of every
 * block) makes partition j, all in one graph. Each partition is then read (straight from the
 * store on the workers' host) and checked: ascending, within its bucket, after the one before,
 * and its count, xor and sum equal to those of the values the generator gave here.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <spillway/spillway.h>

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* The plugin's generator: gen(n, seed) gives these n values. */
static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static uint64_t bucket_of(uint64_t v, uint64_t p)
{
    return (uint64_t)(((unsigned __int128)v * p) >> 64);
}

static uint64_t le64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

typedef struct sums {
    uint64_t count, xor, sum;
} sums;

static int fail(spillway *c, const char *what, int rc)
{
    fprintf(stderr, "spillway-sort: %s: %s: %s\n", what, spillway_strerror(rc),
            spillway_errmsg(c));
    spillway_close(c);
    return 1;
}

int main(int argc, char **argv)
{
    const char *addr = getenv("SPILLWAY_SCHEDULER");
    double gib = 0.25, block_mib = 8;
    long parts = 0;
    for (int i = 1; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(argv[i], "--scheduler") == 0 && v != NULL)
            addr = v;
        else if (strcmp(argv[i], "--gib") == 0 && v != NULL)
            gib = atof(v);
        else if (strcmp(argv[i], "--block-mib") == 0 && v != NULL)
            block_mib = atof(v);
        else if (strcmp(argv[i], "--partitions") == 0 && v != NULL)
            parts = atol(v);
        else {
            fprintf(stderr, "usage: spillway-sort [--scheduler HOST:PORT] [--gib G] "
                            "[--block-mib M] [--partitions P]\n");
            return 2;
        }
        i++;
    }
    uint64_t per_block = (uint64_t)(block_mib * (1 << 20)) / 8;
    uint64_t total = (uint64_t)(gib * (1 << 30)) / 8;
    if (per_block == 0 || total == 0 || parts < 0 || parts > SPILLWAY_MAX_OUTPUTS) {
        fprintf(stderr, "spillway-sort: sizes must be positive, partitions 1 to %u\n",
                SPILLWAY_MAX_OUTPUTS);
        return 2;
    }
    uint32_t nblocks = (uint32_t)((total + per_block - 1) / per_block);
    uint32_t p = parts > 0 ? (uint32_t)parts : (uint32_t)((total * 8 + (16 << 20) - 1) >> 24);
    if (p > SPILLWAY_MAX_OUTPUTS)
        p = SPILLWAY_MAX_OUTPUTS;

    spillway *c;
    int rc = spillway_connect(addr != NULL ? addr : "127.0.0.1:7400", NULL, &c);
    if (rc != 0) {
        fprintf(stderr, "spillway-sort: %s\n", spillway_errmsg(NULL));
        return 1;
    }
    double t0 = now_s();
    /* One graph: the blocks are made, dealt and sorted without coming here. */
    spillway_graph *g = spillway_graph_new(c);
    spillway_arg *in = calloc(nblocks, sizeof *in);
    spillway_ref *res = calloc(p, sizeof *res);
    sums *want = calloc(p, sizeof *want);
    if (g == NULL || in == NULL || res == NULL || want == NULL) {
        fprintf(stderr, "spillway-sort: out of memory\n");
        return 1;
    }
    for (uint32_t b = 0; b < nblocks; b++) {
        uint64_t n = b + 1 < nblocks ? per_block : total - (uint64_t)b * per_block;
        spillway_arg a[2] = {spillway_arg_u64(n), spillway_arg_u64(1 + b)};
        spillway_ref block;
        if ((rc = spillway_task(g, "gen", a, 2, 0, &block)) != 0)
            return fail(c, "gen", rc);
        in[b] = spillway_arg_ref(block);
    }
    spillway_arg buckets = spillway_arg_u64(p);
    spillway_shuffle_opts o = {.partitions = p};
    rc = spillway_graph_shuffle(g, "split", in, nblocks, &buckets, 1, "sort", &o, SPILLWAY_KEEP,
                                res);
    if (rc != 0 || (rc = spillway_submit(g)) != 0)
        return fail(c, "shuffle", rc);
    spillway_graph_free(g);
    free(in);

    /* Meanwhile, what each partition must hold. */
    for (uint32_t b = 0; b < nblocks; b++) {
        uint64_t n = b + 1 < nblocks ? per_block : total - (uint64_t)b * per_block, x = 1 + b;
        for (uint64_t k = 0; k < n; k++) {
            uint64_t v = splitmix64(&x);
            sums *s = &want[bucket_of(v, p)];
            s->count++;
            s->xor ^= v;
            s->sum += v;
        }
    }
    if ((rc = spillway_wait(c, res, p, -1)) != 0)
        return fail(c, "sort", rc);
    double t_sort = now_s() - t0;

    uint64_t prev = 0, seen = 0;
    for (uint32_t j = 0; j < p; j++) {
        spillway_view v;
        if ((rc = spillway_get_view(c, res[j], -1, &v)) != 0)
            return fail(c, "read", rc);
        sums got = {v.len / 8, 0, 0};
        for (uint64_t k = 0; k < got.count; k++) {
            uint64_t x = le64((const uint8_t *)v.data + 8 * k);
            if ((seen + k > 0 && x < prev) || bucket_of(x, p) != j) {
                fprintf(stderr, "spillway-sort: partition %u, value %llu out of order\n", j,
                        (unsigned long long)k);
                return 1;
            }
            prev = x;
            got.xor ^= x;
            got.sum += x;
        }
        seen += got.count;
        spillway_view_release(c, &v);
        spillway_release(c, res[j]);
        if (memcmp(&got, &want[j], sizeof got) != 0) {
            fprintf(stderr, "spillway-sort: partition %u: count, xor or sum differ\n", j);
            return 1;
        }
    }
    printf("sorted %llu values (%.3f GiB) in %u partitions from %u blocks in %.2f s; checked\n",
           (unsigned long long)seen, (double)seen * 8 / (1 << 30), p, nblocks, t_sort);
    free(res);
    free(want);
    spillway_close(c);
    return seen == total ? 0 : 1;
}
