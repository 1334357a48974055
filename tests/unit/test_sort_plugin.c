/* Unit tests for the example sort plugin (worker/examples/sort_plugin.c), its functions run in
 * this process: sort against qsort on data of every shape its radix sort treats apart (empty,
 * one value, all equal, two values, a narrow range, mostly one value, a partition's top bits,
 * spread, sizes around its insertion cutoff, the data split over many arguments of uneven
 * sizes), a ragged argument refused, and gen, split, sort and check as a job computes them. */
#include <stdio.h>
#include <stdlib.h>

#include "spillway/datagen.h"

#include "local_plugin.h"
#include "test_main.h"

static const spw_plugin *plugin_table(void **dl)
{
    const char *why = NULL;
    const spw_plugin *pl = local_plugin_open(SPW_SORT_PLUGIN, dl, &why);
    if (pl == NULL)
        fail_msg("%s: %s", SPW_SORT_PLUGIN, why);
    return pl;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* The shapes of data: value i of n from the generator x. */
enum { SPREAD, EQUAL, TWO, NARROW, MOSTLY_ZERO, PARTITION, LOW_BITS, HOLES, NSHAPES };

static uint64_t shaped(int shape, uint64_t i, uint64_t *x)
{
    uint64_t v = spw_splitmix64(x);
    switch (shape) {
    case EQUAL:
        return 0x0123456789abcdefULL;
    case TWO:
        return v & 1 ? UINT64_MAX : 0;
    case NARROW:
        return v % 1000;
    case MOSTLY_ZERO:
        return i % 7 == 0 ? v : 0;
    case PARTITION:
        return (v >> 5) | (5ULL << 59); /* bucket 5 of 32 */
    case LOW_BITS:
        return 0xfeed000000000000ULL | (v & 0xffff);
    case HOLES:
        return v & 0xffff00000000ffffULL;
    default:
        return v;
    }
}

/* Sorts n values of the given shape, dealt into nargs arguments of uneven sizes (some empty),
 * and compares the output with qsort's. */
static void sort_case(spw_task_fn sort, int shape, uint64_t n, uint32_t nargs)
{
    uint64_t *v = malloc((n > 0 ? n : 1) * 8), x = n * 31 + (uint64_t)shape;
    spw_task_arg *args = calloc(nargs, sizeof *args);
    assert_non_null(v);
    assert_non_null(args);
    for (uint64_t i = 0; i < n; i++)
        v[i] = shaped(shape, i, &x);
    uint64_t at = 0;
    for (uint32_t k = 0; k < nargs; k++) {
        uint64_t left = n - at, take = k + 1 == nargs ? left
                                       : k % 3 == 1   ? 0
                                                      : spw_splitmix64(&x) % (left + 1);
        args[k] = (spw_task_arg){v + at, take * 8};
        at += take;
    }
    void *out;
    uint64_t len;
    char err[256];
    assert_int_equal(local_run_fn(sort, args, nargs, 1, &out, &len, err), 0);
    qsort(v, n, 8, cmp_u64);
    assert_int_equal(len, n * 8);
    if (n > 0 && memcmp(out, v, n * 8) != 0)
        fail_msg("shape %d, %llu values in %u arguments: not in order", shape,
                 (unsigned long long)n, nargs);
    free(out);
    free(args);
    free(v);
}

static void test_sort_matches_qsort(void **state)
{
    (void)state;
    void *dl;
    spw_task_fn sort = local_plugin_fn(plugin_table(&dl), "sort");
    assert_non_null(sort);
    static const uint64_t sizes[] = {0, 1, 2, 3, 5, 15, 16, 17, 31, 64, 100, 1000, 4099, 70001};
    for (int shape = 0; shape < NSHAPES; shape++)
        for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
            sort_case(sort, shape, sizes[s], 1);
            sort_case(sort, shape, sizes[s], 7);
        }
    sort_case(sort, SPREAD, 300000, 64);
    sort_case(sort, PARTITION, 300000, 64);
    sort_case(sort, HOLES, 300000, 3);
    sort_case(sort, TWO, 300000, 2);
    dlclose(dl);
}

static void test_sort_refuses_a_ragged_argument(void **state)
{
    (void)state;
    void *dl;
    spw_task_fn sort = local_plugin_fn(plugin_table(&dl), "sort");
    uint64_t v[2] = {2, 1};
    spw_task_arg args[2] = {{v, 8}, {v + 1, 5}};
    void *out;
    uint64_t len;
    char err[256];
    assert_int_not_equal(local_run_fn(sort, args, 2, 1, &out, &len, err), 0);
    assert_non_null(strstr(err, "argument 1 is 5 bytes"));
    assert_null(out);
    dlclose(dl);
}

/* check fails a bucket that is out of order, or holds a value of another bucket, naming the
 * first value at fault; a bucket in order passes. */
static void test_check_names_the_value_at_fault(void **state)
{
    (void)state;
    enum { N = 1000 };
    void *dl;
    spw_task_fn check = local_plugin_fn(plugin_table(&dl), "check");
    uint64_t v[N], j = 2, p = 4, step = (UINT64_MAX / 4) / N;
    for (uint64_t i = 0; i < N; i++)
        v[i] = j * (UINT64_MAX / 4 + 1) + i * step; /* ascending, all in bucket 2 of 4 */
    spw_task_arg args[3] = {{v, sizeof v}, {&j, 8}, {&p, 8}};
    void *out;
    uint64_t len;
    char err[256];
    assert_int_equal(local_run_fn(check, args, 3, 1, &out, &len, err), 0);
    assert_int_equal(len, 24);
    free(out);

    uint64_t keep = v[500];
    v[500] = v[499] - 1; /* one value smaller than the one before it */
    assert_int_not_equal(local_run_fn(check, args, 3, 1, &out, &len, err), 0);
    assert_non_null(strstr(err, "value 500 is smaller than the one before it"));
    v[500] = keep;

    v[N - 1] = 3 * (UINT64_MAX / 4 + 1); /* the last value in bucket 3: still ascending */
    assert_int_not_equal(local_run_fn(check, args, 3, 1, &out, &len, err), 0);
    assert_non_null(strstr(err, "value 999 is not in bucket 2 of 4"));
    v[N - 1] = v[N - 2] + step;

    v[0] = 0; /* the first value in bucket 0 */
    assert_int_not_equal(local_run_fn(check, args, 3, 1, &out, &len, err), 0);
    assert_non_null(strstr(err, "value 0 is not in bucket 2 of 4"));
    dlclose(dl);
}

/* gen makes two blocks, split deals each into P, sort makes each bucket and check returns its
 * count, xor and sum, which must be those of the generated values in that bucket. */
static void test_gen_split_sort_check(void **state)
{
    (void)state;
    enum { P = 8, BLOCKS = 2, N = 50000 };
    void *dl;
    const spw_plugin *pl = plugin_table(&dl);
    spw_task_fn gen = local_plugin_fn(pl, "gen"), split = local_plugin_fn(pl, "split");
    spw_task_fn sort = local_plugin_fn(pl, "sort"), check = local_plugin_fn(pl, "check");
    uint64_t want[3 * P] = {0}, n = N, p = P;
    void *block[BLOCKS], *piece[BLOCKS][P];
    uint64_t blen[BLOCKS], plen[BLOCKS][P];
    for (uint64_t b = 0; b < BLOCKS; b++) {
        uint64_t seed = b + 1, x = seed;
        spw_task_arg ga[2] = {{&n, 8}, {&seed, 8}}, sa[2];
        assert_int_equal(local_run_fn(gen, ga, 2, 1, &block[b], &blen[b], NULL), 0);
        assert_int_equal(blen[b], N * 8);
        for (uint64_t i = 0; i < N; i++) {
            uint64_t v = spw_splitmix64(&x), *w = &want[3 * (((unsigned __int128)v * P) >> 64)];
            assert_memory_equal((uint8_t *)block[b] + 8 * i, &v, 8);
            w[0]++;
            w[1] ^= v;
            w[2] += v;
        }
        sa[0] = (spw_task_arg){block[b], blen[b]};
        sa[1] = (spw_task_arg){&p, 8};
        assert_int_equal(local_run_fn(split, sa, 2, P, piece[b], plen[b], NULL), 0);
    }
    for (uint64_t j = 0; j < P; j++) {
        spw_task_arg ra[BLOCKS], ca[3];
        for (int b = 0; b < BLOCKS; b++)
            ra[b] = (spw_task_arg){piece[b][j], plen[b][j]};
        void *bucket, *sums;
        uint64_t len, slen;
        assert_int_equal(local_run_fn(sort, ra, BLOCKS, 1, &bucket, &len, NULL), 0);
        ca[0] = (spw_task_arg){bucket, len};
        ca[1] = (spw_task_arg){&j, 8};
        ca[2] = (spw_task_arg){&p, 8};
        assert_int_equal(local_run_fn(check, ca, 3, 1, &sums, &slen, NULL), 0);
        assert_int_equal(slen, 24);
        assert_memory_equal(sums, &want[3 * j], 24);
        free(bucket);
        free(sums);
    }
    for (int b = 0; b < BLOCKS; b++) {
        free(block[b]);
        for (int j = 0; j < P; j++)
            free(piece[b][j]);
    }
    dlclose(dl);
}

int main(int argc, char **argv);
static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_sort_matches_qsort),
    cmocka_unit_test(test_sort_refuses_a_ragged_argument),
    cmocka_unit_test(test_check_names_the_value_at_fault),
    cmocka_unit_test(test_gen_split_sort_check),
};
SPW_TEST_MAIN(tests)
