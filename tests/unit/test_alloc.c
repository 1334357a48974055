/* Unit tests for the arena allocator (objstore/src/alloc.c): rounding and alignment, exact fits,
 * coalescing, exhaustion without side effects, exact statistics, heap accounting, argument
 * validation, and a seeded random stress run against a per-granule reference model with
 * ost_alloc_check after every step. */
#include "alloc.h"

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test_main.h"

#define G 64ULL /* the default granule in these tests */

static uint64_t rng_next(uint64_t *s)
{
    /* splitmix64: a small seeded generator, so every failure replays. */
    uint64_t z = (*s += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

/* A value in [lo, hi]. */
static uint64_t rng_range(uint64_t *s, uint64_t lo, uint64_t hi)
{
    return lo + rng_next(s) % (hi - lo + 1);
}

static ost_alloc *mk(uint64_t capacity, uint64_t granule)
{
    ost_alloc *a = NULL;
    assert_int_equal(ost_alloc_new(capacity, granule, &a), 0);
    assert_non_null(a);
    assert_int_equal(ost_alloc_check(a), 0);
    return a;
}

static ost_block *get_ok(ost_alloc *a, uint64_t size)
{
    ost_block *b = NULL;
    assert_int_equal(ost_alloc_get(a, size, &b), 0);
    assert_non_null(b);
    assert_int_equal(ost_alloc_check(a), 0);
    return b;
}

static void put_ok(ost_alloc *a, ost_block *b)
{
    ost_alloc_put(a, b);
    assert_int_equal(ost_alloc_check(a), 0);
}

static ost_alloc_stats stats_of(const ost_alloc *a)
{
    ost_alloc_stats st;
    memset(&st, 0xAB, sizeof st);
    ost_alloc_stats_get(a, &st);
    return st;
}

static void assert_stats(const ost_alloc *a, uint64_t used, uint64_t largest_free, uint64_t nalloc,
                         uint64_t nfree)
{
    ost_alloc_stats st = stats_of(a);
    assert_int_equal(st.used, used);
    assert_int_equal(st.free, st.capacity - used);
    assert_int_equal(st.largest_free, largest_free);
    assert_int_equal(st.nalloc, nalloc);
    assert_int_equal(st.nfree, nfree);
}

/* --------------------------------------------------------- validation */

static void alloc_granule_validation(void **state)
{
    (void)state;
    static const uint64_t bad[] = {0, 1, 2, 32, 63, 65, 96, 100, 4095, 4097, (1ULL << 63) + 64};
    char sentinel;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ost_alloc *a = (ost_alloc *)&sentinel;
        assert_int_equal(ost_alloc_new(1ULL << 40, bad[i], &a), SPW_EINVAL);
        assert_ptr_equal(a, (ost_alloc *)&sentinel);
    }
    static const uint64_t good[] = {64, 128, 4096, 1ULL << 21, 1ULL << 39};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        ost_alloc *a = mk(1ULL << 40, good[i]);
        ost_alloc_stats st = stats_of(a);
        assert_int_equal(st.granule, good[i]);
        assert_int_equal(st.capacity, 1ULL << 40);
        ost_alloc_free(a);
    }
}

static void alloc_capacity_validation(void **state)
{
    (void)state;
    char sentinel;
    ost_alloc *a = (ost_alloc *)&sentinel;
    assert_int_equal(ost_alloc_new(0, 64, &a), SPW_EINVAL);
    assert_int_equal(ost_alloc_new(63, 64, &a), SPW_EINVAL);
    assert_int_equal(ost_alloc_new(4095, 4096, &a), SPW_EINVAL);
    assert_ptr_equal(a, (ost_alloc *)&sentinel);

    /* Exactly one granule is enough. */
    a = mk(64, 64);
    assert_stats(a, 0, 64, 0, 1);
    ost_block *b = get_ok(a, 1);
    assert_int_equal(ost_block_off(b), 0);
    assert_int_equal(ost_block_size(b), 64);
    ost_alloc_free(a);

    /* A capacity that is not a granule multiple is rounded down. */
    a = mk(10 * 4096 + 4095, 4096);
    ost_alloc_stats st = stats_of(a);
    assert_int_equal(st.capacity, 10 * 4096);
    assert_int_equal(st.free, 10 * 4096);
    assert_int_equal(st.largest_free, 10 * 4096);
    assert_int_equal(ost_alloc_fits(a, 10 * 4096), true);
    assert_int_equal(ost_alloc_fits(a, 10 * 4096 + 1), false);
    ost_alloc_free(a);
}

static void alloc_huge_capacity_and_granule(void **state)
{
    (void)state;
    ost_alloc *a = mk(UINT64_MAX, 64);
    uint64_t cap = UINT64_MAX & ~63ULL;
    assert_int_equal(stats_of(a).capacity, cap);
    ost_block *b = NULL;
    assert_int_equal(ost_alloc_get(a, UINT64_MAX, &b), SPW_ETOOBIG);
    assert_int_equal(ost_alloc_get(a, cap + 1, &b), SPW_ETOOBIG);
    assert_null(b);
    ost_block *x = get_ok(a, 1);
    /* The remainder, 2^58 - 2 granules, is not a class boundary: found by the own-class scan. */
    assert_int_equal(ost_alloc_fits(a, cap - 64), true);
    ost_block *y = get_ok(a, cap - 64);
    assert_int_equal(ost_block_off(y), 64);
    assert_int_equal(ost_block_size(y), cap - 64);
    assert_stats(a, cap, 0, 2, 0);
    assert_int_equal(ost_alloc_get(a, 1, &b), SPW_ENOMEM);
    put_ok(a, x);
    put_ok(a, y);
    assert_stats(a, 0, cap, 0, 1);
    ost_alloc_free(a);

    /* The largest granule: a single one. */
    a = mk(UINT64_MAX, 1ULL << 63);
    assert_int_equal(stats_of(a).capacity, 1ULL << 63);
    x = get_ok(a, 1);
    assert_int_equal(ost_block_size(x), 1ULL << 63);
    assert_int_equal(ost_alloc_get(a, 1, &b), SPW_ENOMEM);
    put_ok(a, x);
    ost_alloc_free(a);
}

static void alloc_free_null_is_noop(void **state)
{
    (void)state;
    int64_t before = spw_heap_used(SPW_MOD_OBJSTORE);
    ost_alloc_free(NULL);
    assert_int_equal(spw_heap_used(SPW_MOD_OBJSTORE), before);
}

/* ------------------------------------------------------ basic behaviour */

static void alloc_zero_size_is_einval(void **state)
{
    (void)state;
    ost_alloc *a = mk(10 * G, G);
    char sentinel;
    ost_block *b = (ost_block *)&sentinel;
    assert_int_equal(ost_alloc_get(a, 0, &b), SPW_EINVAL);
    assert_ptr_equal(b, (ost_block *)&sentinel);
    assert_int_equal(ost_alloc_fits(a, 0), false);
    assert_stats(a, 0, 10 * G, 0, 1);
    ost_alloc_free(a);
}

static void alloc_rounds_to_granule(void **state)
{
    (void)state;
    static const struct {
        uint64_t granule, size, rounded;
    } cases[] = {
        {64, 1, 64},        {64, 63, 64},       {64, 64, 64},          {64, 65, 128},
        {64, 127, 128},     {64, 128, 128},     {64, 1000, 1024},      {4096, 1, 4096},
        {4096, 4096, 4096}, {4096, 4097, 8192}, {1 << 20, 1, 1 << 20}, {1 << 20, 3 << 20, 3 << 20},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ost_alloc *a = mk(32 * cases[i].granule, cases[i].granule);
        ost_block *b = get_ok(a, cases[i].size);
        assert_int_equal(ost_block_off(b), 0);
        assert_int_equal(ost_block_size(b), cases[i].rounded);
        assert_stats(a, cases[i].rounded, 32 * cases[i].granule - cases[i].rounded, 1, 1);
        put_ok(a, b);
        ost_alloc_free(a);
    }
}

static void alloc_split_leaves_remainder_free(void **state)
{
    (void)state;
    ost_alloc *a = mk(10 * G, G);
    ost_block *x = get_ok(a, 3 * G);
    assert_int_equal(ost_block_off(x), 0);
    assert_stats(a, 3 * G, 7 * G, 1, 1);
    ost_block *y = get_ok(a, 7 * G); /* the whole remainder: no split, no free block left */
    assert_int_equal(ost_block_off(y), 3 * G);
    assert_int_equal(ost_block_size(y), 7 * G);
    assert_stats(a, 10 * G, 0, 2, 0);
    put_ok(a, x);
    put_ok(a, y);
    assert_stats(a, 0, 10 * G, 0, 1);
    ost_alloc_free(a);
}

static void alloc_offsets_are_granule_aligned(void **state)
{
    (void)state;
    static const uint64_t granules[] = {64, 256, 4096, 1 << 20};
    uint64_t seed = 7;
    for (size_t gi = 0; gi < sizeof granules / sizeof granules[0]; gi++) {
        uint64_t g = granules[gi];
        ost_alloc *a = mk(97 * g, g);
        ost_block *blocks[97];
        size_t n = 0;
        uint64_t sum = 0;
        for (;;) {
            uint64_t size = rng_range(&seed, 1, 5 * g);
            ost_block *b = NULL;
            int rc = ost_alloc_get(a, size, &b);
            if (rc == SPW_ENOMEM)
                break;
            assert_int_equal(rc, 0);
            assert_int_equal(ost_block_off(b) % g, 0);
            assert_int_equal(ost_block_size(b) % g, 0);
            assert_true(ost_block_size(b) >= size);
            assert_true(ost_block_size(b) - size < g);
            assert_true(ost_block_off(b) + ost_block_size(b) <= 97 * g);
            assert_true(n < 97);
            blocks[n++] = b;
            sum += ost_block_size(b);
        }
        assert_int_equal(ost_alloc_check(a), 0);
        assert_int_equal(stats_of(a).used, sum);
        assert_int_equal(stats_of(a).nalloc, n);
        for (size_t i = 0; i < n; i++)
            put_ok(a, blocks[i]);
        assert_stats(a, 0, 97 * g, 0, 1);
        ost_alloc_free(a);
    }
}

static void alloc_too_big_is_etoobig(void **state)
{
    (void)state;
    ost_alloc *a = mk(10 * G, G);
    ost_block *b = NULL;
    assert_int_equal(ost_alloc_get(a, 10 * G + 1, &b), SPW_ETOOBIG);
    assert_int_equal(ost_alloc_get(a, UINT64_MAX, &b), SPW_ETOOBIG);
    assert_int_equal(ost_alloc_get(a, UINT64_MAX - G + 2, &b), SPW_ETOOBIG); /* rounding wraps */
    assert_null(b);
    assert_int_equal(ost_alloc_fits(a, 10 * G + 1), false);
    assert_int_equal(ost_alloc_fits(a, UINT64_MAX), false);
    assert_int_equal(ost_alloc_fits(a, 10 * G), true);
    /* Too big stays too big when the arena is partly used; a fitting size that has no room is
     * ENOMEM instead. */
    ost_block *x = get_ok(a, G);
    assert_int_equal(ost_alloc_get(a, 10 * G + 1, &b), SPW_ETOOBIG);
    assert_int_equal(ost_alloc_get(a, 10 * G, &b), SPW_ENOMEM);
    assert_null(b);
    assert_stats(a, G, 9 * G, 1, 1);
    put_ok(a, x);
    ost_alloc_free(a);
}

static void alloc_exhaustion_returns_enomem_and_changes_nothing(void **state)
{
    (void)state;
    ost_alloc *a = mk(12 * G, G);
    ost_block *x = get_ok(a, 4 * G);
    ost_block *y = get_ok(a, 5 * G);
    ost_block *z = get_ok(a, 3 * G);
    put_ok(a, y); /* one free block of 5 granules in the middle */

    ost_alloc_stats before = stats_of(a);
    int64_t heap_before = spw_heap_used(SPW_MOD_OBJSTORE);
    char sentinel;
    ost_block *b = (ost_block *)&sentinel;
    assert_int_equal(ost_alloc_get(a, 5 * G + 1, &b), SPW_ENOMEM);
    assert_int_equal(ost_alloc_get(a, 6 * G, &b), SPW_ENOMEM);
    assert_ptr_equal(b, (ost_block *)&sentinel);
    ost_alloc_stats after = stats_of(a);
    assert_memory_equal(&before, &after, sizeof before);
    assert_int_equal(spw_heap_used(SPW_MOD_OBJSTORE), heap_before);
    assert_int_equal(ost_alloc_check(a), 0);

    /* Full: nothing fits. */
    y = get_ok(a, 5 * G);
    assert_int_equal(ost_block_off(y), 4 * G);
    before = stats_of(a);
    heap_before = spw_heap_used(SPW_MOD_OBJSTORE);
    assert_int_equal(ost_alloc_get(a, 1, &b), SPW_ENOMEM);
    assert_ptr_equal(b, (ost_block *)&sentinel);
    assert_int_equal(ost_alloc_fits(a, 1), false);
    after = stats_of(a);
    assert_memory_equal(&before, &after, sizeof before);
    assert_int_equal(spw_heap_used(SPW_MOD_OBJSTORE), heap_before);
    assert_stats(a, 12 * G, 0, 3, 0);
    assert_int_equal(ost_alloc_check(a), 0);

    put_ok(a, x);
    put_ok(a, y);
    put_ok(a, z);
    ost_alloc_free(a);
}

/* 1000 granules lies strictly inside its class (992..1023), so good fit rounds the request up to
 * the 1024 class and finds nothing; the own-class scan must find the block. */
static void alloc_exact_fit_of_last_free_block(void **state)
{
    (void)state;
    /* The whole arena as one request. */
    ost_alloc *a = mk(1000 * G, G);
    assert_int_equal(ost_alloc_fits(a, 1000 * G), true);
    ost_block *x = get_ok(a, 1000 * G);
    assert_int_equal(ost_block_off(x), 0);
    assert_int_equal(ost_block_size(x), 1000 * G);
    assert_stats(a, 1000 * G, 0, 1, 0);
    put_ok(a, x);
    x = get_ok(a, 999 * G + 1); /* rounds up to the same 1000 granules */
    assert_int_equal(ost_block_size(x), 1000 * G);
    put_ok(a, x);
    ost_alloc_free(a);

    /* The only free block sits between allocated ones. */
    a = mk(1102 * G, G);
    ost_block *lo = get_ok(a, G);
    x = get_ok(a, 1000 * G);
    ost_block *hi = get_ok(a, 101 * G);
    put_ok(a, x);
    assert_stats(a, 102 * G, 1000 * G, 2, 1);
    ost_block *b = NULL;
    assert_int_equal(ost_alloc_fits(a, 1000 * G + 1), false);
    assert_int_equal(ost_alloc_get(a, 1000 * G + 1, &b), SPW_ENOMEM);
    assert_int_equal(ost_alloc_fits(a, 1000 * G), true);
    x = get_ok(a, 1000 * G);
    assert_int_equal(ost_block_off(x), G);
    assert_stats(a, 1102 * G, 0, 3, 0);
    put_ok(a, lo);
    put_ok(a, x);
    put_ok(a, hi);
    assert_stats(a, 0, 1102 * G, 0, 1);
    ost_alloc_free(a);
}

static void alloc_good_fit_takes_smallest_class_that_fits(void **state)
{
    (void)state;
    /* Free blocks of 100 granules at 0 and 32 granules at 101, separated by allocated ones. */
    ost_alloc *a = mk(134 * G, G);
    ost_block *big = get_ok(a, 100 * G);
    ost_block *s1 = get_ok(a, G);
    ost_block *small = get_ok(a, 32 * G);
    ost_block *s2 = get_ok(a, G);
    put_ok(a, small);
    put_ok(a, big);

    ost_block *x = get_ok(a, 20 * G);
    assert_int_equal(ost_block_off(x), 101 * G);
    put_ok(a, x);
    x = get_ok(a, 32 * G);
    assert_int_equal(ost_block_off(x), 101 * G);
    ost_block *y = get_ok(a, 33 * G);
    assert_int_equal(ost_block_off(y), 0);
    assert_stats(a, 67 * G, 67 * G, 4, 1);
    put_ok(a, x);
    put_ok(a, y);
    put_ok(a, s1);
    put_ok(a, s2);
    assert_stats(a, 0, 134 * G, 0, 1);
    ost_alloc_free(a);
}

static void alloc_coalesces_both_neighbours(void **state)
{
    (void)state;
    ost_alloc *a = mk(10 * G, G);
    ost_block *p = get_ok(a, 1 * G);
    ost_block *q = get_ok(a, 2 * G);
    ost_block *r = get_ok(a, 3 * G);
    ost_block *s = get_ok(a, 4 * G);
    assert_int_equal(ost_block_off(s), 6 * G);
    assert_stats(a, 10 * G, 0, 4, 0);
    put_ok(a, p);
    assert_stats(a, 9 * G, 1 * G, 3, 1);
    put_ok(a, r);
    assert_stats(a, 6 * G, 3 * G, 2, 2);
    put_ok(a, q); /* merges with p before and r after */
    assert_stats(a, 4 * G, 6 * G, 1, 1);
    ost_block *t = get_ok(a, 6 * G);
    assert_int_equal(ost_block_off(t), 0);
    assert_stats(a, 10 * G, 0, 2, 0);
    put_ok(a, s);
    put_ok(a, t);
    assert_stats(a, 0, 10 * G, 0, 1);
    ost_alloc_free(a);
}

static void alloc_coalesces_with_next_only_and_prev_only(void **state)
{
    (void)state;
    ost_alloc *a = mk(6 * G, G);
    ost_block *p = get_ok(a, G);
    ost_block *q = get_ok(a, G);
    ost_block *r = get_ok(a, G);
    ost_block *s = get_ok(a, 3 * G);
    put_ok(a, r); /* no free neighbour */
    assert_stats(a, 5 * G, G, 3, 1);
    put_ok(a, q); /* merges with r after it */
    assert_stats(a, 4 * G, 2 * G, 2, 1);
    put_ok(a, s); /* merges with q+r before it */
    assert_stats(a, G, 5 * G, 1, 1);
    put_ok(a, p);
    assert_stats(a, 0, 6 * G, 0, 1);
    ost_alloc_free(a);
}

static void alloc_fragmentation_then_coalesce_back_to_one_block(void **state)
{
    (void)state;
    enum { N = 256 };
    ost_alloc *a = mk(N * G, G);
    ost_block *blocks[N];
    for (size_t i = 0; i < N; i++) {
        blocks[i] = get_ok(a, G);
        assert_int_equal(ost_block_off(blocks[i]), i * G);
    }
    ost_block *b = NULL;
    assert_int_equal(ost_alloc_get(a, 1, &b), SPW_ENOMEM);
    for (size_t i = 0; i < N; i += 2)
        put_ok(a, blocks[i]);
    assert_stats(a, N / 2 * G, G, N / 2, N / 2);
    assert_int_equal(ost_alloc_fits(a, G), true);
    assert_int_equal(ost_alloc_fits(a, G + 1), false);
    assert_int_equal(ost_alloc_get(a, 2 * G, &b), SPW_ENOMEM);

    /* Put the odd blocks back in a seeded random order. Each one merges with both neighbours
     * (all even blocks are free), except the last block, which has no next neighbour. */
    size_t order[N / 2];
    for (size_t i = 0; i < N / 2; i++)
        order[i] = 2 * i + 1;
    uint64_t seed = 42;
    for (size_t i = N / 2 - 1; i > 0; i--) {
        size_t j = (size_t)rng_range(&seed, 0, i);
        size_t t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
    uint64_t nfree = N / 2;
    for (size_t i = 0; i < N / 2; i++) {
        put_ok(a, blocks[order[i]]);
        if (order[i] != N - 1)
            nfree--;
        assert_int_equal(stats_of(a).nfree, nfree);
        assert_int_equal(stats_of(a).nalloc, N / 2 - 1 - i);
    }
    assert_stats(a, 0, N * G, 0, 1);
    b = get_ok(a, N * G);
    assert_int_equal(ost_block_off(b), 0);
    put_ok(a, b);
    ost_alloc_free(a);
}

static void alloc_stats_exact(void **state)
{
    (void)state;
    const uint64_t g = 4096;
    ost_alloc *a = mk(100 * g + 123, g);
    ost_alloc_stats st = stats_of(a);
    assert_int_equal(st.capacity, 100 * g);
    assert_int_equal(st.granule, g);
    assert_int_equal(st.used, 0);
    assert_int_equal(st.free, 100 * g);
    assert_int_equal(st.largest_free, 100 * g);
    assert_int_equal(st.nalloc, 0);
    assert_int_equal(st.nfree, 1);

    ost_block *x = get_ok(a, 5000);   /* 2 granules at 0 */
    ost_block *y = get_ok(a, 1);      /* 1 granule at 2 */
    ost_block *z = get_ok(a, 10 * g); /* 10 granules at 3 */
    assert_int_equal(ost_block_off(y), 2 * g);
    assert_int_equal(ost_block_off(z), 3 * g);
    assert_stats(a, 13 * g, 87 * g, 3, 1);
    put_ok(a, y);
    assert_stats(a, 12 * g, 87 * g, 2, 2);
    put_ok(a, x);
    assert_stats(a, 10 * g, 87 * g, 1, 2);
    put_ok(a, z);
    assert_stats(a, 0, 100 * g, 0, 1);
    ost_alloc_free(a);

    /* largest_free is exact when the top class holds blocks of different sizes (40 and 41
     * granules share a class), whichever is at the head of the list. */
    for (int order = 0; order < 2; order++) {
        a = mk(83 * G, G);
        ost_block *p = get_ok(a, 40 * G);
        ost_block *s1 = get_ok(a, G);
        ost_block *q = get_ok(a, 41 * G);
        ost_block *s2 = get_ok(a, G);
        put_ok(a, order ? p : q);
        put_ok(a, order ? q : p);
        assert_stats(a, 2 * G, 41 * G, 2, 2);
        put_ok(a, s1);
        assert_stats(a, G, 82 * G, 1, 1);
        put_ok(a, s2);
        ost_alloc_free(a);
    }
}

/* --------------------------------------------------------------- heap */

static void alloc_heap_counters_return_to_start(void **state)
{
    (void)state;
    int64_t h0 = spw_heap_used(SPW_MOD_OBJSTORE);
    ost_alloc *a = mk(16 * G, G);
    int64_t h1 = spw_heap_used(SPW_MOD_OBJSTORE);
    assert_true(h1 > h0);

    /* Taking the whole free block needs no new descriptor; a split needs one, a merge frees. */
    ost_block *all = get_ok(a, 16 * G);
    assert_int_equal(spw_heap_used(SPW_MOD_OBJSTORE), h1);
    put_ok(a, all);
    assert_int_equal(spw_heap_used(SPW_MOD_OBJSTORE), h1);
    ost_block *x = get_ok(a, G);
    int64_t h2 = spw_heap_used(SPW_MOD_OBJSTORE);
    assert_true(h2 > h1);
    ost_block *y = get_ok(a, G);
    int64_t h3 = spw_heap_used(SPW_MOD_OBJSTORE);
    assert_int_equal(h3 - h2, h2 - h1);
    put_ok(a, x); /* no free neighbour: its descriptor stays */
    assert_int_equal(spw_heap_used(SPW_MOD_OBJSTORE), h3);
    put_ok(a, y); /* merges with both: two descriptors go */
    assert_int_equal(spw_heap_used(SPW_MOD_OBJSTORE), h1);
    ost_alloc_free(a);
    assert_int_equal(spw_heap_used(SPW_MOD_OBJSTORE), h0);

    /* Outstanding blocks are released with the allocator. */
    a = mk(64 * G, G);
    for (int i = 0; i < 20; i++)
        (void)get_ok(a, (uint64_t)(i % 3 + 1) * G);
    assert_true(spw_heap_used(SPW_MOD_OBJSTORE) > h1);
    ost_alloc_free(a);
    assert_int_equal(spw_heap_used(SPW_MOD_OBJSTORE), h0);
}

/* ------------------------------------------------------------ misuse */

static void alloc_double_put_asserts(void **state)
{
    (void)state;
    ost_alloc *a = mk(10 * G, G);
    ost_block *x = get_ok(a, G);
    ost_block *y = get_ok(a, G);
    ost_block *z = get_ok(a, G);
    put_ok(a, y); /* both neighbours allocated, so y's descriptor survives as the free block */

    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        int fd = open("/dev/null", O_WRONLY);
        if (fd >= 0)
            dup2(fd, STDERR_FILENO);
        ost_alloc_put(a, y);
        _exit(0);
    }
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFSIGNALED(status));
    assert_int_equal(WTERMSIG(status), SIGABRT);

    assert_stats(a, 2 * G, 7 * G, 2, 2);
    put_ok(a, x);
    put_ok(a, z);
    ost_alloc_free(a);
}

static void alloc_check_detects_foreign_block(void **state)
{
    (void)state;
    /* Putting b's block into a corrupts both: a's counters and lists no longer match its chain,
     * and b holds a free block that is on none of its lists. */
    ost_alloc *a = mk(8 * G, G);
    ost_alloc *b = mk(8 * G, G);
    ost_block *a1 = get_ok(a, 2 * G);
    ost_block *b1 = get_ok(b, G);
    ost_block *b2 = get_ok(b, G);
    ost_block *b3 = get_ok(b, G);
    ost_alloc_put(a, b2);
    assert_int_equal(ost_alloc_check(a), SPW_ECORRUPT);
    assert_int_equal(ost_alloc_check(b), SPW_ECORRUPT);
    (void)a1;
    (void)b1;
    (void)b3;
    ost_alloc_free(a);
    ost_alloc_free(b);
}

/* ----------------------------------------------------- reference model */

/* Which granules are allocated, plus the live blocks. Because free neighbours always merge,
 * each maximal run of free granules is exactly one free block. */
typedef struct model {
    uint64_t granule;
    uint64_t ngran;
    uint8_t *taken;   /* per granule: 1 if inside an allocated block */
    ost_block **live; /* allocated blocks */
    size_t nlive;
} model;

typedef struct model_stats {
    uint64_t used_gran;
    uint64_t largest_run;
    uint64_t nruns;
} model_stats;

static model_stats model_scan(const model *m)
{
    model_stats ms = {0, 0, 0};
    uint64_t run = 0;
    for (uint64_t i = 0; i < m->ngran; i++) {
        if (m->taken[i]) {
            ms.used_gran++;
            run = 0;
            continue;
        }
        if (run++ == 0)
            ms.nruns++;
        if (run > ms.largest_run)
            ms.largest_run = run;
    }
    return ms;
}

static void model_compare(const model *m, const ost_alloc *a)
{
    assert_int_equal(ost_alloc_check(a), 0);
    model_stats ms = model_scan(m);
    ost_alloc_stats st = stats_of(a);
    assert_int_equal(st.capacity, m->ngran * m->granule);
    assert_int_equal(st.used, ms.used_gran * m->granule);
    assert_int_equal(st.free, (m->ngran - ms.used_gran) * m->granule);
    assert_int_equal(st.largest_free, ms.largest_run * m->granule);
    assert_int_equal(st.nfree, ms.nruns);
    assert_int_equal(st.nalloc, m->nlive);
}

/* One get of `size` bytes: the allocator must succeed exactly when some free run is long enough,
 * place the block at the start of a free run, and agree with ost_alloc_fits. */
static void model_get(model *m, ost_alloc *a, uint64_t size)
{
    uint64_t g = m->granule, cap = m->ngran * g;
    model_stats ms = model_scan(m);
    int expect = 0;
    if (size == 0)
        expect = SPW_EINVAL;
    else if (size > cap)
        expect = SPW_ETOOBIG;
    else if ((size + g - 1) / g > ms.largest_run)
        expect = SPW_ENOMEM;
    assert_int_equal(ost_alloc_fits(a, size), expect == 0);
    ost_block *b = NULL;
    assert_int_equal(ost_alloc_get(a, size, &b), expect);
    if (expect != 0) {
        assert_null(b);
        return;
    }
    uint64_t off = ost_block_off(b), bsize = ost_block_size(b);
    assert_int_equal(off % g, 0);
    assert_int_equal(bsize, (size + g - 1) / g * g);
    assert_true(off + bsize <= cap);
    uint64_t first = off / g;
    assert_true(first == 0 || m->taken[first - 1]);
    for (uint64_t i = first; i < first + bsize / g; i++) {
        assert_int_equal(m->taken[i], 0);
        m->taken[i] = 1;
    }
    m->live[m->nlive++] = b;
}

static void model_put(model *m, ost_alloc *a, size_t idx)
{
    ost_block *b = m->live[idx];
    uint64_t first = ost_block_off(b) / m->granule, n = ost_block_size(b) / m->granule;
    for (uint64_t i = first; i < first + n; i++) {
        assert_int_equal(m->taken[i], 1);
        m->taken[i] = 0;
    }
    m->live[idx] = m->live[--m->nlive];
    ost_alloc_put(a, b);
}

static void stress_run(uint64_t seed, uint64_t granule, uint64_t ngran, int steps)
{
    int64_t h0 = spw_heap_used(SPW_MOD_OBJSTORE);
    model m = {granule, ngran, calloc(ngran, 1), calloc(ngran, sizeof(ost_block *)), 0};
    assert_non_null(m.taken);
    assert_non_null(m.live);
    ost_alloc *a = mk(ngran * granule, granule);
    uint64_t ngets = 0, nputs = 0, nfull = 0;
    for (int step = 0; step < steps; step++) {
        /* Alternate filling and draining phases so both a full and an empty arena occur. */
        unsigned get_pct = (step / 400) % 2 == 0 ? 70 : 30;
        if (m.nlive == 0 || rng_range(&seed, 1, 100) <= get_pct) {
            uint64_t largest = model_scan(&m).largest_run;
            uint64_t r = rng_range(&seed, 1, 100), size;
            if (r <= 50)
                size = rng_range(&seed, 1, 4 * granule);
            else if (r <= 75)
                size = rng_range(&seed, 1, 64 * granule);
            else if (r <= 88 && largest > 0) /* exactly the largest free block, maybe less */
                size = largest * granule - rng_range(&seed, 0, granule - 1);
            else if (r <= 94)
                size = (largest + 1) * granule - rng_range(&seed, 0, granule - 1);
            else if (r <= 95)
                size = rng_range(&seed, 0, 1) ? 0 : ngran * granule + 1;
            else
                size = rng_range(&seed, 1, ngran * granule);
            size_t before = m.nlive;
            model_get(&m, a, size);
            ngets += m.nlive > before;
            nfull += model_scan(&m).largest_run == 0;
        } else {
            model_put(&m, a, (size_t)rng_range(&seed, 0, m.nlive - 1));
            nputs++;
        }
        model_compare(&m, a);
    }
    /* The run exercised what it claims to. */
    assert_true(ngets > (uint64_t)steps / 4);
    assert_true(nputs > (uint64_t)steps / 4);
    assert_true(nfull > 0);
    while (m.nlive > 0) {
        model_put(&m, a, m.nlive - 1);
        model_compare(&m, a);
    }
    assert_stats(a, 0, ngran * granule, 0, 1);
    ost_alloc_free(a);
    free(m.taken);
    free(m.live);
    assert_int_equal(spw_heap_used(SPW_MOD_OBJSTORE), h0);
}

static void alloc_random_stress_against_reference_model(void **state)
{
    (void)state;
    stress_run(1, 64, 1024, 8000);
    stress_run(2, 4096, 777, 6000);
    stress_run(3, 128, 3000, 6000);
    stress_run(4, 64, 37, 4000);
}

typedef struct walked {
    uint64_t size[8];
    bool is_free[8];
    void *owner[8];
    int n;
} walked;

static void walk_one(void *arg, uint64_t size, bool is_free, void *owner)
{
    walked *w = arg;
    assert_true(w->n < 8);
    w->size[w->n] = size;
    w->is_free[w->n] = is_free;
    w->owner[w->n++] = owner;
}

/* The walk over every block gives them in address order, free ones with no owner; a block's
 * owner is what was recorded for it, and none once it is freed and handed out again. */
static void alloc_walk_gives_blocks_in_order_with_owners(void **state)
{
    (void)state;
    ost_alloc *a = NULL;
    assert_int_equal(ost_alloc_new(8 * G, G, &a), 0);
    int x, y;
    ost_block *b0 = get_ok(a, G), *b1 = get_ok(a, 2 * G), *b2 = get_ok(a, G);
    ost_block_set_owner(b0, &x);
    ost_block_set_owner(b2, &y);
    put_ok(a, b1);
    walked w = {0};
    ost_alloc_foreach_block(a, walk_one, &w);
    assert_int_equal(w.n, 4);
    const uint64_t sizes[] = {G, 2 * G, G, 4 * G};
    for (int i = 0; i < 4; i++) {
        assert_int_equal(w.size[i], sizes[i]);
        assert_int_equal(w.is_free[i], i == 1 || i == 3);
    }
    assert_ptr_equal(w.owner[0], &x);
    assert_null(w.owner[1]);
    assert_ptr_equal(w.owner[2], &y);
    put_ok(a, b0);
    ost_block *again = get_ok(a, G);
    w.n = 0;
    ost_alloc_foreach_block(a, walk_one, &w);
    assert_false(w.is_free[0]);
    assert_null(w.owner[0]); /* handed out again: no owner until one is recorded */
    put_ok(a, again);
    put_ok(a, b2);
    ost_alloc_free(a);
}

/* get_low takes the free block of lowest address that holds the request, however well another
 * fits; past max_scan blocks it takes the good fit instead. Holes of 3 granules at 0 and of 1
 * granule at 4: one granule goes at 0 from get_low, at 4 from get (and from a get_low that may
 * look at no block at all). */
static void alloc_low_takes_the_lowest_block_that_holds_it(void **state)
{
    (void)state;
    ost_alloc *a = NULL;
    assert_int_equal(ost_alloc_new(8 * G, G, &a), 0);
    ost_block *h0 = get_ok(a, 3 * G), *p0 = get_ok(a, G);
    ost_block *h1 = get_ok(a, G), *p1 = get_ok(a, 3 * G);
    put_ok(a, h0);
    put_ok(a, h1);
    ost_block *low, *fit, *none;
    assert_int_equal(ost_alloc_get_low(a, G, 64, &low), 0);
    assert_int_equal(ost_block_off(low), 0);
    assert_int_equal(ost_alloc_get(a, G, &fit), 0);
    assert_int_equal(ost_block_off(fit), 4 * G);
    put_ok(a, fit);
    assert_int_equal(ost_alloc_get_low(a, G, 0, &none), 0);
    assert_int_equal(ost_block_off(none), 4 * G);
    assert_int_equal(ost_alloc_get_low(a, 2 * G, 64, &fit), 0);
    assert_int_equal(ost_block_off(fit), G);
    assert_int_equal(ost_alloc_get_low(a, G, 64, &h0), SPW_ENOMEM);
    assert_int_equal(ost_alloc_get_low(a, 9 * G, 64, &h0), SPW_ETOOBIG);
    assert_int_equal(ost_alloc_get_low(a, 0, 64, &h0), SPW_EINVAL);
    assert_int_equal(ost_alloc_check(a), 0);
    put_ok(a, low);
    put_ok(a, none);
    put_ok(a, fit);
    put_ok(a, p0);
    put_ok(a, p1);
    ost_alloc_free(a);
}

static void alloc_fits_agrees_with_get(void **state)
{
    (void)state;
    const uint64_t ngran = 200;
    uint64_t seed = 99;
    model m = {G, ngran, calloc(ngran, 1), calloc(ngran, sizeof(ost_block *)), 0};
    assert_non_null(m.taken);
    assert_non_null(m.live);
    ost_alloc *a = mk(ngran * G, G);
    for (int round = 0; round < 12; round++) {
        /* Reach a new fragmented state, then probe every size class boundary and its
         * neighbours: fits must predict get, and a probe must leave the state as it was. */
        for (int i = 0; i < 40; i++) {
            if (m.nlive == 0 || rng_range(&seed, 1, 100) <= 60)
                model_get(&m, a, rng_range(&seed, 1, 12 * G));
            else
                model_put(&m, a, (size_t)rng_range(&seed, 0, m.nlive - 1));
        }
        model_compare(&m, a);
        ost_alloc_stats before = stats_of(a);
        uint64_t largest = model_scan(&m).largest_run;
        for (uint64_t n = 0; n <= ngran + 1; n++) {
            uint64_t sizes[3] = {n * G, n * G + 1, n * G > 0 ? n * G - 1 : 0};
            for (int k = 0; k < 3; k++) {
                uint64_t size = sizes[k];
                bool fits = ost_alloc_fits(a, size);
                bool expect = size > 0 && size <= ngran * G && (size + G - 1) / G <= largest;
                assert_int_equal(fits, expect);
                ost_block *b = NULL;
                int rc = ost_alloc_get(a, size, &b);
                assert_int_equal(rc == 0, fits);
                if (rc == 0)
                    ost_alloc_put(a, b);
                ost_alloc_stats after = stats_of(a);
                assert_memory_equal(&before, &after, sizeof before);
            }
        }
        assert_int_equal(ost_alloc_check(a), 0);
    }
    while (m.nlive > 0)
        model_put(&m, a, m.nlive - 1);
    model_compare(&m, a);
    ost_alloc_free(a);
    free(m.taken);
    free(m.live);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(alloc_granule_validation),
    cmocka_unit_test(alloc_capacity_validation),
    cmocka_unit_test(alloc_huge_capacity_and_granule),
    cmocka_unit_test(alloc_free_null_is_noop),
    cmocka_unit_test(alloc_zero_size_is_einval),
    cmocka_unit_test(alloc_rounds_to_granule),
    cmocka_unit_test(alloc_split_leaves_remainder_free),
    cmocka_unit_test(alloc_offsets_are_granule_aligned),
    cmocka_unit_test(alloc_too_big_is_etoobig),
    cmocka_unit_test(alloc_exhaustion_returns_enomem_and_changes_nothing),
    cmocka_unit_test(alloc_exact_fit_of_last_free_block),
    cmocka_unit_test(alloc_good_fit_takes_smallest_class_that_fits),
    cmocka_unit_test(alloc_coalesces_both_neighbours),
    cmocka_unit_test(alloc_coalesces_with_next_only_and_prev_only),
    cmocka_unit_test(alloc_fragmentation_then_coalesce_back_to_one_block),
    cmocka_unit_test(alloc_stats_exact),
    cmocka_unit_test(alloc_heap_counters_return_to_start),
    cmocka_unit_test(alloc_double_put_asserts),
    cmocka_unit_test(alloc_check_detects_foreign_block),
    cmocka_unit_test(alloc_random_stress_against_reference_model),
    cmocka_unit_test(alloc_fits_agrees_with_get),
    cmocka_unit_test(alloc_walk_gives_blocks_in_order_with_owners),
    cmocka_unit_test(alloc_low_takes_the_lowest_block_that_holds_it),
};

SPW_TEST_MAIN(tests)
