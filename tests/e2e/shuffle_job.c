/* Shuffle jobs checked byte for byte against the same computation done here (shuffle_job.h). */
#include "shuffle_job.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../unit/test_main.h"
#include "spillway/datagen.h"

static uint64_t bucket_of(uint64_t v, uint64_t p)
{
    return (uint64_t)(((unsigned __int128)v * p) >> 64);
}

static void put_le(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t get_le(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

/* Block i of a deal: values_of(i) values from seed i + 1, little-endian. */
static uint8_t *deal_block(uint32_t i, uint64_t n)
{
    uint8_t *b = malloc(n * 8 + 1);
    assert_non_null(b);
    uint64_t x = i + 1;
    for (uint64_t k = 0; k < n; k++)
        put_le(b + 8 * k, spw_splitmix64(&x));
    return b;
}

/* Waits for the results, calling sample (if any) between short waits. */
static void wait_all(spillway *cl, const spillway_ref *r, uint32_t n, void (*sample)(void *arg),
                     void *arg)
{
    int rc;
    if (sample == NULL)
        rc = spillway_wait(cl, r, n, 240000);
    else
        for (int k = 0; (rc = spillway_wait(cl, r, n, 10)) == SPW_ETIMEDOUT && k < 24000; k++)
            sample(arg);
    if (rc != 0)
        fail_msg("shuffle: %s: %s", spillway_strerror(rc), spillway_errmsg(cl));
}

uint64_t shuffle_job_deal(spillway *cl, uint32_t nblocks, uint64_t (*values_of)(uint32_t i),
                          uint32_t p, spillway_shuffle_opts opts)
{
    uint8_t **blocks = calloc(nblocks, sizeof *blocks);
    uint64_t *lens = calloc(nblocks, sizeof *lens);
    spillway_arg *in = calloc(nblocks, sizeof *in);
    spillway_ref *puts = calloc(nblocks, sizeof *puts), *res = calloc(p, sizeof *res);
    assert_true(blocks != NULL && lens != NULL && in != NULL && puts != NULL && res != NULL);
    /* Odd blocks lie one after another in one shared put, taken as views. */
    uint64_t shared_len = 0;
    for (uint32_t i = 0; i < nblocks; i++) {
        lens[i] = values_of(i) * 8;
        blocks[i] = deal_block(i, values_of(i));
        if (i % 2 == 1)
            shared_len += lens[i];
    }
    uint8_t *cat = malloc(shared_len + 1);
    assert_non_null(cat);
    uint64_t off = 0;
    for (uint32_t i = 1; i < nblocks; i += 2) {
        memcpy(cat + off, blocks[i], lens[i]);
        off += lens[i];
    }
    spillway_ref whole = {0, 0};
    if (shared_len > 0)
        assert_int_equal(spillway_put(cl, cat, shared_len, &whole), 0);
    free(cat);
    off = 0;
    uint32_t nputs = 0;
    for (uint32_t i = 0; i < nblocks; i++) {
        if (i % 2 == 1) {
            in[i] = spillway_arg_view(whole, off, lens[i]);
            off += lens[i];
        } else {
            assert_int_equal(spillway_put(cl, blocks[i], lens[i], &puts[nputs]), 0);
            in[i] = spillway_arg_ref(puts[nputs++]);
        }
    }

    spillway_graph *g = spillway_graph_new(cl);
    spillway_arg shared = spillway_arg_u64(p);
    opts.partitions = p;
    int rc = spillway_graph_shuffle(g, "split", in, nblocks, &shared, 1, "concat", &opts,
                                    SPILLWAY_KEEP, res);
    if (rc != 0)
        fail_msg("spillway_graph_shuffle: %s: %s", spillway_strerror(rc), spillway_errmsg(cl));
    assert_int_equal(spillway_submit(g), 0);
    uint64_t gid = spillway_graph_id(g);
    spillway_graph_free(g);
    /* The inputs are the tasks' to hold now. */
    assert_int_equal(spillway_release_many(cl, puts, nputs), 0);
    if (shared_len > 0)
        assert_int_equal(spillway_release(cl, whole), 0);
    wait_all(cl, res, p, NULL, NULL);
    spillway_graph_progress prog;
    assert_int_equal(spillway_graph_status(cl, gid, &prog), 0);
    assert_int_equal(prog.failed, 0);

    uint64_t total = 0;
    for (uint32_t i = 0; i < nblocks; i++)
        total += lens[i];
    uint8_t *want = malloc(total + 1);
    assert_non_null(want);
    for (uint32_t j = 0; j < p; j++) {
        uint64_t n = 0;
        for (uint32_t i = 0; i < nblocks; i++)
            for (uint64_t k = 0; k < lens[i]; k += 8)
                if (bucket_of(get_le(blocks[i] + k), p) == j) {
                    memcpy(want + n, blocks[i] + k, 8);
                    n += 8;
                }
        void *data;
        size_t len;
        assert_int_equal(spillway_get(cl, res[j], 60000, &data, &len), 0);
        if (len != n || memcmp(data, want, n) != 0)
            fail_msg("partition %u of %u: %zu bytes, wanted %llu, or different bytes", j, p, len,
                     (unsigned long long)n);
        spillway_free(data);
    }
    assert_int_equal(spillway_release_many(cl, res, p), 0);
    free(want);
    for (uint32_t i = 0; i < nblocks; i++)
        free(blocks[i]);
    free(blocks);
    free(lens);
    free(in);
    free(puts);
    free(res);
    return prog.total;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

void shuffle_job_sort(spillway *cl, uint32_t nblocks, uint64_t values, uint32_t p,
                      void (*sample)(void *arg), void *arg)
{
    spillway_graph *g = spillway_graph_new(cl);
    spillway_arg *in = calloc(nblocks, sizeof *in);
    spillway_ref *res = calloc(p, sizeof *res);
    assert_true(in != NULL && res != NULL);
    for (uint32_t i = 0; i < nblocks; i++) {
        spillway_arg a[2] = {spillway_arg_u64(values), spillway_arg_u64(1000 + i)};
        spillway_ref r;
        assert_int_equal(spillway_task(g, "gen", a, 2, 0, &r), 0);
        in[i] = spillway_arg_ref(r);
    }
    spillway_arg shared = spillway_arg_u64(p);
    spillway_shuffle_opts o = {.partitions = p};
    assert_int_equal(
        spillway_graph_shuffle(g, "split", in, nblocks, &shared, 1, "sort", &o, SPILLWAY_KEEP, res),
        0);
    assert_int_equal(spillway_submit(g), 0);
    spillway_graph_free(g);
    free(in);

    wait_all(cl, res, p, sample, arg);
    /* Here: every value, by bucket, sorted. */
    uint64_t n = (uint64_t)nblocks * values;
    uint64_t *all = malloc(n * 8), *count = calloc(p + 1, sizeof *count);
    assert_true(all != NULL && count != NULL);
    for (uint32_t i = 0; i < nblocks; i++) {
        uint64_t x = 1000 + i;
        for (uint64_t k = 0; k < values; k++)
            all[(uint64_t)i * values + k] = spw_splitmix64(&x);
    }
    qsort(all, n, 8, cmp_u64);
    for (uint64_t k = 0; k < n; k++)
        count[bucket_of(all[k], p) + 1]++;
    uint64_t at = 0;
    for (uint32_t j = 0; j < p; j++) {
        void *data;
        size_t len;
        assert_int_equal(spillway_get(cl, res[j], 60000, &data, &len), 0);
        if (len != count[j + 1] * 8)
            fail_msg("partition %u: %zu bytes, wanted %llu", j, len,
                     (unsigned long long)count[j + 1] * 8);
        for (uint64_t k = 0; k < count[j + 1]; k++)
            if (get_le((const uint8_t *)data + 8 * k) != all[at + k])
                fail_msg("partition %u: value %llu differs", j, (unsigned long long)k);
        at += count[j + 1];
        spillway_free(data);
        assert_int_equal(spillway_release(cl, res[j]), 0);
    }
    assert_int_equal(at, n);
    free(all);
    free(count);
    free(res);
}
