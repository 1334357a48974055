/* Unit tests for spw_slab (proto/base/src/slab.c): zeroed distinct records, reuse of freed
 * ones, chunks returned as they empty (one spare kept), heap accounting, and a seeded random
 * run against a table of live records with spw_slab_check along the way. */
#include <stdio.h>
#include <stdlib.h>

#include "spillway/slab.h"

#include "test_main.h"

static void check(const spw_slab *sl)
{
    const char *why = spw_slab_check(sl);
    if (why != NULL)
        fail_msg("spw_slab_check: %s", why);
}

static void test_slab_basic(void **state)
{
    (void)state;
    int64_t before = spw_heap_used(SPW_MOD_BASE);
    spw_slab sl;
    spw_slab_init(&sl, 100, SPW_MOD_BASE);
    assert_int_equal(sl.size, 112);
    uint8_t *a = spw_slab_alloc(&sl), *b = spw_slab_alloc(&sl);
    assert_non_null(a);
    assert_non_null(b);
    assert_true(a != b);
    for (int i = 0; i < 112; i++)
        assert_int_equal(a[i] | b[i], 0);
    assert_int_equal((uintptr_t)a % 16, 0);
    memset(a, 0xAB, 112);
    assert_int_equal(spw_heap_used(SPW_MOD_BASE) - before, (int64_t)SPW_SLAB_CHUNK);
    check(&sl);
    spw_slab_free(&sl, a);
    uint8_t *c = spw_slab_alloc(&sl); /* the freed record comes back, zeroed */
    assert_ptr_equal(c, a);
    for (int i = 0; i < 112; i++)
        assert_int_equal(c[i], 0);
    spw_slab_free(&sl, b);
    spw_slab_free(&sl, c);
    spw_slab_free(&sl, NULL);
    check(&sl);
    assert_int_equal(sl.nused, 0);
    assert_int_equal(sl.nchunks, 1); /* the spare */
    spw_slab_trim(&sl);
    assert_int_equal(sl.nchunks, 0);
    assert_int_equal(spw_heap_used(SPW_MOD_BASE), before);
}

static void test_slab_chunks_return(void **state)
{
    (void)state;
    int64_t before = spw_heap_used(SPW_MOD_BASE);
    spw_slab sl;
    spw_slab_init(&sl, 192, SPW_MOD_BASE);
    enum { N = 20000 };
    void **p = calloc(N, sizeof *p);
    assert_non_null(p);
    for (int i = 0; i < N; i++) {
        p[i] = spw_slab_alloc(&sl);
        assert_non_null(p[i]);
        memcpy(p[i], &i, sizeof i);
    }
    check(&sl);
    uint64_t chunks = (N + sl.per_chunk - 1) / sl.per_chunk;
    assert_int_equal(sl.nchunks, chunks);
    for (int i = 0; i < N; i++) {
        int v;
        memcpy(&v, p[i], sizeof v);
        assert_int_equal(v, i);
    }
    /* Free every other record: no chunk empties. */
    for (int i = 0; i < N; i += 2)
        spw_slab_free(&sl, p[i]);
    check(&sl);
    assert_int_equal(sl.nchunks, chunks);
    for (int i = 1; i < N; i += 2)
        spw_slab_free(&sl, p[i]);
    check(&sl);
    /* All free: only the spare is left. */
    assert_int_equal(sl.nchunks, 1);
    assert_int_equal(spw_heap_used(SPW_MOD_BASE) - before, (int64_t)SPW_SLAB_CHUNK);
    spw_slab_trim(&sl);
    assert_int_equal(spw_heap_used(SPW_MOD_BASE), before);
    free(p);
}

static uint64_t rng_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

static void test_slab_random(void **state)
{
    (void)state;
    enum { N = 30000, OPS = 400000 };
    uint64_t **live = calloc(N, sizeof *live);
    assert_non_null(live);
    spw_slab sl;
    spw_slab_init(&sl, 40, SPW_MOD_BASE);
    uint64_t seed = 7, n = 0;
    for (uint32_t op = 0; op < OPS; op++) {
        bool filling = (op / 50000) % 2 == 0;
        uint32_t k = (uint32_t)(rng_next(&seed) % N);
        if (live[k] == NULL && (filling || rng_next(&seed) % 4 == 0)) {
            live[k] = spw_slab_alloc(&sl);
            assert_non_null(live[k]);
            assert_int_equal(live[k][0], 0);
            live[k][0] = k + 1; /* a record never overlaps another live one */
            live[k][4] = k + 1;
            n++;
        } else if (live[k] != NULL) {
            assert_int_equal(live[k][0], k + 1);
            assert_int_equal(live[k][4], k + 1);
            spw_slab_free(&sl, live[k]);
            live[k] = NULL;
            n--;
        }
        assert_int_equal(sl.nused, n);
        if (op % 20000 == 0)
            check(&sl);
    }
    for (uint32_t k = 0; k < N; k++)
        if (live[k] != NULL)
            spw_slab_free(&sl, live[k]);
    check(&sl);
    assert_true(sl.nchunks <= 1);
    spw_slab_trim(&sl);
    free(live);
}

int main(int argc, char **argv);
static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_slab_basic),
    cmocka_unit_test(test_slab_chunks_return),
    cmocka_unit_test(test_slab_random),
};
SPW_TEST_MAIN(tests)
