/* Unit tests for spw_idmap (proto/base/src/idmap.c): find/add/delete, growth and shrinking,
 * colliding home slots and a wrapped run, iteration, and a seeded random run of a million
 * operations against a flag per record, with spw_idmap_check along the way. */
#include <stdio.h>
#include <stdlib.h>

#include "spillway/idmap.h"

#include "test_main.h"

typedef struct rec {
    uint32_t pad; /* the id is not at offset 0 */
    spw_id id;
    bool in;
} rec;

static void check(const spw_idmap *m)
{
    const char *why = spw_idmap_check(m);
    if (why != NULL)
        fail_msg("spw_idmap_check: %s", why);
}

static void test_idmap_basic(void **state)
{
    (void)state;
    spw_idmap m = SPW_IDMAP_INIT(rec, id, SPW_MOD_BASE);
    rec a = {.id = {1, 2}}, b = {.id = {2, 1}}, c = {.id = {0, 0}};
    assert_null(spw_idmap_find(&m, a.id));
    assert_null(spw_idmap_any(&m));
    int64_t before = spw_heap_used(SPW_MOD_BASE);
    spw_idmap_add(&m, &a);
    spw_idmap_add(&m, &b);
    spw_idmap_add(&m, &c);
    check(&m);
    assert_int_equal(m.n, 3);
    assert_ptr_equal(spw_idmap_find(&m, (spw_id){1, 2}), &a);
    assert_ptr_equal(spw_idmap_find(&m, (spw_id){2, 1}), &b);
    assert_ptr_equal(spw_idmap_find(&m, (spw_id){0, 0}), &c);
    assert_null(spw_idmap_find(&m, (spw_id){1, 1}));
    assert_true(spw_heap_used(SPW_MOD_BASE) - before == (int64_t)spw_idmap_bytes(&m));
    spw_idmap_del(&m, &b);
    check(&m);
    assert_null(spw_idmap_find(&m, b.id));
    assert_ptr_equal(spw_idmap_find(&m, a.id), &a);
    spw_idmap_del(&m, &a);
    spw_idmap_del(&m, &c);
    /* Empty: the table is gone and its bytes are back. */
    assert_int_equal(m.n, 0);
    assert_null(m.slots);
    assert_int_equal(spw_heap_used(SPW_MOD_BASE), before);
    check(&m);
    spw_idmap_add(&m, &a); /* reusable */
    assert_ptr_equal(spw_idmap_find(&m, a.id), &a);
    spw_idmap_free(&m);
    assert_null(spw_idmap_find(&m, a.id));
    assert_int_equal(spw_heap_used(SPW_MOD_BASE), before);
}

/* Ids whose home slots (in a 64-slot table) are all `home`, found by trying ids. */
static size_t colliding(uint32_t home, rec *out, size_t want, uint64_t *next)
{
    size_t n = 0;
    while (n < want) {
        spw_id id = {++*next, 7};
        if ((spw_id_hash(id) & 63) == home)
            out[n++] = (rec){.id = id};
    }
    return n;
}

static void test_idmap_collisions(void **state)
{
    (void)state;
    spw_idmap m = SPW_IDMAP_INIT(rec, id, SPW_MOD_BASE);
    rec r[12];
    uint64_t next = 0;
    /* Six that share the last slot (their run wraps to slot 0..) and six homed at slot 0. */
    colliding(63, r, 6, &next);
    colliding(0, r + 6, 6, &next);
    for (int i = 0; i < 12; i++)
        spw_idmap_add(&m, &r[i]);
    assert_int_equal(m.mask, 63); /* still one 64-slot table: the test means what it says */
    check(&m);
    for (int i = 0; i < 12; i++)
        assert_ptr_equal(spw_idmap_find(&m, r[i].id), &r[i]);
    /* Delete from the middle of the wrapped run, one at a time, checking every survivor. */
    int order[12] = {2, 0, 7, 5, 11, 1, 6, 3, 10, 4, 9, 8};
    for (int k = 0; k < 12; k++) {
        spw_idmap_del(&m, &r[order[k]]);
        r[order[k]].in = true; /* gone */
        if (m.n > 0)
            check(&m);
        for (int i = 0; i < 12; i++)
            assert_ptr_equal(spw_idmap_find(&m, r[i].id), r[i].in ? NULL : &r[i]);
    }
    assert_null(m.slots);
}

static uint64_t rng_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

static void test_idmap_grow_shrink(void **state)
{
    (void)state;
    enum { N = 200000 };
    rec *r = calloc(N, sizeof *r);
    assert_non_null(r);
    spw_idmap m = SPW_IDMAP_INIT(rec, id, SPW_MOD_BASE);
    int64_t before = spw_heap_used(SPW_MOD_BASE);
    for (uint32_t i = 0; i < N; i++) {
        r[i].id = (spw_id){i / 3, i % 3}; /* ids that differ in few bits */
        spw_idmap_add(&m, &r[i]);
        assert_true((uint64_t)m.n * 10 <= ((uint64_t)m.mask + 1) * 7);
    }
    check(&m);
    assert_true(m.mask + 1 == 1u << 19); /* 200k fit in 2^19 at 70 % */
    uint32_t pos = 0, seen = 0;
    for (rec *p; (p = spw_idmap_next(&m, &pos)) != NULL; seen++)
        assert_false(p->in), p->in = true;
    assert_int_equal(seen, N);
    for (uint32_t i = 0; i < N; i++)
        assert_ptr_equal(spw_idmap_find(&m, r[i].id), &r[i]);
    /* Delete all but 100: the table shrinks as it empties. */
    for (uint32_t i = 100; i < N; i++)
        spw_idmap_del(&m, &r[i]);
    check(&m);
    assert_true(m.mask + 1 <= 1024);
    for (uint32_t i = 0; i < N; i++)
        assert_ptr_equal(spw_idmap_find(&m, r[i].id), i < 100 ? &r[i] : NULL);
    for (rec *p; (p = spw_idmap_any(&m)) != NULL;)
        spw_idmap_del(&m, p);
    assert_int_equal(spw_heap_used(SPW_MOD_BASE), before);
    free(r);
}

/* spw_idmap_reserve sizes the table once for what comes: no resize while those records are
 * added, and the table is the one the adds alone would have grown to. */
static void test_idmap_reserve(void **state)
{
    (void)state;
    enum { N = 200000 };
    rec *r = calloc(N, sizeof *r);
    assert_non_null(r);
    spw_idmap m = SPW_IDMAP_INIT(rec, id, SPW_MOD_BASE);
    int64_t before = spw_heap_used(SPW_MOD_BASE);
    spw_idmap_reserve(&m, 0);
    assert_null(m.slots); /* nothing asked, nothing allocated */
    spw_idmap_reserve(&m, N);
    assert_non_null(spw_idmap_check(&m)); /* transient: an empty map holds a table */
    assert_true(m.mask + 1 == 1u << 19);
    const spw_idmap_slot *slots = m.slots;
    for (uint32_t i = 0; i < N; i++) {
        r[i].id = (spw_id){i, 7};
        spw_idmap_add(&m, &r[i]);
    }
    assert_ptr_equal(m.slots, slots); /* never resized */
    check(&m);
    spw_idmap_reserve(&m, 100); /* fits already */
    assert_ptr_equal(m.slots, slots);
    spw_idmap_reserve(&m, N); /* 400k: doubles */
    assert_true(m.mask + 1 == 1u << 20);
    check(&m);
    for (uint32_t i = 0; i < N; i++)
        assert_ptr_equal(spw_idmap_find(&m, r[i].id), &r[i]);
    for (uint32_t i = 0; i < N; i++) /* by pointer: spw_idmap_any would scan from slot 0 */
        spw_idmap_del(&m, &r[i]);
    assert_null(m.slots);
    assert_int_equal(spw_heap_used(SPW_MOD_BASE), before);
    free(r);
}

static void test_idmap_random(void **state)
{
    (void)state;
    enum { N = 50000, OPS = 1000000 };
    rec *r = calloc(N, sizeof *r);
    assert_non_null(r);
    uint64_t seed = 13;
    for (uint32_t i = 0; i < N; i++)
        r[i].id = (spw_id){rng_next(&seed), i};
    spw_idmap m = SPW_IDMAP_INIT(rec, id, SPW_MOD_BASE);
    uint32_t n = 0;
    for (uint32_t op = 0; op < OPS; op++) {
        /* Phases that fill and drain, so the table grows and shrinks many times. */
        bool filling = (op / 100000) % 2 == 0;
        rec *p = &r[rng_next(&seed) % N];
        if (!p->in && (filling || rng_next(&seed) % 4 == 0)) {
            spw_idmap_add(&m, p);
            p->in = true;
            n++;
        } else if (p->in) {
            spw_idmap_del(&m, p);
            p->in = false;
            n--;
        }
        assert_int_equal(m.n, n);
        rec *q = &r[rng_next(&seed) % N];
        assert_ptr_equal(spw_idmap_find(&m, q->id), q->in ? q : NULL);
        if (op % 50000 == 0)
            check(&m);
    }
    check(&m);
    for (uint32_t i = 0; i < N; i++)
        assert_ptr_equal(spw_idmap_find(&m, r[i].id), r[i].in ? &r[i] : NULL);
    spw_idmap_free(&m);
    free(r);
}

static void test_idmap_check_finds_damage(void **state)
{
    (void)state;
    spw_idmap m = SPW_IDMAP_INIT(rec, id, SPW_MOD_BASE);
    rec a = {.id = {5, 5}};
    spw_idmap_add(&m, &a);
    check(&m);
    a.id.lo = 6; /* the record changed its id behind the map's back */
    assert_non_null(spw_idmap_check(&m));
    a.id.lo = 5;
    m.n = 2;
    assert_non_null(spw_idmap_check(&m));
    m.n = 1;
    spw_idmap_free(&m);
}

int main(int argc, char **argv);
static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_idmap_basic),
    cmocka_unit_test(test_idmap_collisions),
    cmocka_unit_test(test_idmap_grow_shrink),
    cmocka_unit_test(test_idmap_reserve),
    cmocka_unit_test(test_idmap_random),
    cmocka_unit_test(test_idmap_check_finds_damage),
};
SPW_TEST_MAIN(tests)
