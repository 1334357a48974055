/*
 * An example plugin for an out-of-core sort of 64-bit values (task ABI version 2):
 *
 *   gen(n, seed)       n random u64 (splitmix64 from seed), the block's values in order
 *   split(block, P)    P outputs, output j the values of block in bucket j (v * P >> 64: the
 *                      top bits of v when P is a power of two), in their order; one pass to
 *                      count, one to deal. split(block, j, P) makes bucket j alone.
 *   sort(parts...)     the concatenation of its arguments, sorted (radix sort); as well a
 *                      merge of sorted runs, so a shuffle may use it to merge early
 *   check(bucket, j, P) verifies a sorted bucket (ascending, every value in bucket j) and
 *                      returns 24 bytes: its count, the xor and the sum of its values
 *
 * Every number (n, seed, j, P, and the values) is a little-endian u64. A sort is a shuffle
 * (spillway_shuffle): gen makes the blocks, split(block, P) is the map, sort the reduce, and
 * check verifies each bucket; client/examples/sort.c runs one.
 *
 *   cc -O2 -shared -fPIC -o sort.so sort_plugin.c $(pkg-config --cflags spillway)
 *   spillway-worker --plugin /path/to/sort.so ...
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <spillway/task.h>

static uint64_t get_u64(const spw_task_arg *a)
{
    const uint8_t *p = a->data;
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

static void put_u64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

/* Values in memory are little-endian u64; this reads one wherever it lies. */
static uint64_t load(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    v = __builtin_bswap64(v);
#endif
    return v;
}

static void store(uint8_t *p, uint64_t v)
{
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    v = __builtin_bswap64(v);
#endif
    memcpy(p, &v, 8);
}

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static uint64_t bucket_of(uint64_t v, uint64_t nbuckets)
{
    return (uint64_t)(((unsigned __int128)v * nbuckets) >> 64);
}

/* Checks that args from `first` on are nargs - first u64 values. */
static int u64_args(spw_task_ctx *ctx, const char *fn, const spw_task_arg *args, uint32_t nargs,
                    uint32_t first, uint32_t want)
{
    if (nargs != want) {
        spw_task_fail(ctx, "%s takes %u arguments, got %u", fn, want, nargs);
        return -1;
    }
    for (uint32_t i = first; i < nargs; i++) {
        if (args[i].len != 8) {
            spw_task_fail(ctx, "%s: argument %u is not a u64", fn, i);
            return -1;
        }
    }
    return 0;
}

static int gen(spw_task_ctx *ctx, const spw_task_arg *args, uint32_t nargs)
{
    if (u64_args(ctx, "gen", args, nargs, 0, 2) != 0)
        return -1;
    uint64_t n = get_u64(&args[0]), x = get_u64(&args[1]);
    if (n == 0 || n > UINT64_MAX / 8) {
        spw_task_fail(ctx, "gen: bad count %llu", (unsigned long long)n);
        return -1;
    }
    uint8_t *out = spw_task_output(ctx, n * 8);
    if (out == NULL)
        return spw_task_output_error(ctx);
    for (uint64_t i = 0; i < n; i++)
        store(out + 8 * i, splitmix64(&x));
    return 0;
}

/* Reads the arguments of split and check (values, j, P) into *j and *p: 0, or -1 with the task
 * failed. */
static int bucket_args(spw_task_ctx *ctx, const char *fn, const spw_task_arg *args, uint32_t nargs,
                       uint64_t *j, uint64_t *p)
{
    if (u64_args(ctx, fn, args, nargs, 1, 3) != 0)
        return -1;
    *j = get_u64(&args[1]);
    *p = get_u64(&args[2]);
    if (*p == 0 || *j >= *p || args[0].len % 8 != 0) {
        spw_task_fail(ctx, "%s: bucket %llu of %llu, or values of %llu bytes", fn,
                      (unsigned long long)*j, (unsigned long long)*p,
                      (unsigned long long)args[0].len);
        return -1;
    }
    return 0;
}

/* split(block, P): every bucket of the block, output j bucket j. */
static int split_all(spw_task_ctx *ctx, const spw_task_arg *args)
{
    uint64_t p = get_u64(&args[1]);
    if (p == 0 || p > 4096 || args[0].len % 8 != 0) {
        spw_task_fail(ctx, "split: %llu buckets (1 to 4096), or values of %llu bytes",
                      (unsigned long long)p, (unsigned long long)args[0].len);
        return -1;
    }
    const uint8_t *in = args[0].data;
    uint64_t n = args[0].len / 8;
    uint64_t *count = calloc(p, sizeof *count);
    uint8_t **out = calloc(p, sizeof *out);
    int rc = 0;
    if (count == NULL || out == NULL) {
        spw_task_fail(ctx, "split: no memory for %llu buckets", (unsigned long long)p);
        rc = -1;
    }
    for (uint64_t i = 0; rc == 0 && i < n; i++)
        count[bucket_of(load(in + 8 * i), p)]++;
    for (uint64_t j = 0; rc == 0 && j < p; j++)
        if ((out[j] = spw_task_output_at(ctx, (uint32_t)j, count[j] * 8)) == NULL)
            rc = spw_task_output_error(ctx);
    for (uint64_t i = 0; rc == 0 && i < n; i++) {
        uint64_t v = load(in + 8 * i), j = bucket_of(v, p);
        store(out[j], v);
        out[j] += 8;
    }
    free(count);
    free(out);
    return rc;
}

static int split(spw_task_ctx *ctx, const spw_task_arg *args, uint32_t nargs)
{
    if (nargs == 2 && args[1].len == 8)
        return split_all(ctx, args);
    uint64_t j, p;
    if (bucket_args(ctx, "split", args, nargs, &j, &p) != 0)
        return -1;
    const uint8_t *in = args[0].data;
    uint64_t n = args[0].len / 8, count = 0;
    for (uint64_t i = 0; i < n; i++)
        count += bucket_of(load(in + 8 * i), p) == j;
    uint8_t *out = spw_task_output(ctx, count * 8);
    if (out == NULL)
        return spw_task_output_error(ctx);
    for (uint64_t i = 0, k = 0; i < n; i++) {
        uint64_t v = load(in + 8 * i);
        if (bucket_of(v, p) == j)
            store(out + 8 * k++, v);
    }
    return 0;
}

/* The sort is a radix sort that goes most significant digit first. The first pass deals the
 * values, as it reads them from the arguments, into up to 2^FIRST_BITS buckets of the output by
 * their highest bits that differ. Each bucket is then sorted in the cache: a pass deals it into a
 * scratch array by a digit wide enough that a sub-bucket holds about one value, and one
 * insertion pass carries it back, ordering the values that share a sub-bucket (a sub-bucket of
 * more than SMALL_VALUES, as skewed data make, is sorted the same way first).
 * So spread data cross memory about twice. The pass that looks for the highest bit that differs
 * also counts the values by their top TOP_BITS bits, which gives the first digit's counts
 * whenever that digit lies among them. */
#define FIRST_BITS 11  /* a bucket of spread data then fits the cache */
#define BUCKET_BITS 12 /* the widest digit a bucket is dealt by */
#define TOP_BITS 16
#define SMALL_VALUES 16 /* at most this many are sorted by insertion alone */

/* Sorts src[0..n) into dst by insertion (src and dst may be the same array). */
static void insertion_sort(const uint64_t *src, uint64_t *dst, uint64_t n)
{
    for (uint64_t i = 0; i < n; i++) {
        uint64_t v = src[i], j = i;
        for (; j > 0 && dst[j - 1] > v; j--)
            dst[j] = dst[j - 1];
        dst[j] = v;
    }
}

/* A digit: the `width` bits below bit `bits` of a value. */
typedef struct digit {
    int shift;
    uint64_t mask;
} digit;

static digit digit_below(int bits, int width)
{
    width = bits < width ? bits : width;
    return (digit){bits - width, ((uint64_t)1 << width) - 1};
}

static uint64_t digit_of(uint64_t v, digit g)
{
    return (v >> g.shift) & g.mask;
}

/* Sorts a[0..n), values that differ only in their low `bits`, in place, with b as large as
 * scratch. */
static void sort_bucket(uint64_t *restrict a, uint64_t *restrict b, uint64_t n, int bits)
{
    uint64_t end[1u << BUCKET_BITS];
    digit g;
    do {
        if (n <= SMALL_VALUES || bits == 0) {
            insertion_sort(a, a, n);
            return;
        }
        int width = 64 - __builtin_clzll(n); /* 2^width > n */
        g = digit_below(bits, width < BUCKET_BITS ? width : BUCKET_BITS);
        memset(end, 0, (g.mask + 1) * sizeof *end);
        for (uint64_t i = 0; i < n; i++)
            end[digit_of(a[i], g)]++;
        bits = g.shift; /* a digit the same in every value moves nothing: the next one down */
    } while (end[digit_of(a[0], g)] == n);
    for (uint64_t k = 0, sum = 0; k <= g.mask; k++) {
        uint64_t c = end[k];
        end[k] = sum; /* the sub-bucket's first position; its end once dealt */
        sum += c;
    }
    for (uint64_t i = 0; i < n; i++)
        b[end[digit_of(a[i], g)]++] = a[i];
    for (uint64_t k = 0, at = 0; k <= g.mask; at = end[k++])
        if (end[k] - at > SMALL_VALUES)
            sort_bucket(b + at, a + at, end[k] - at, g.shift);
    insertion_sort(b, a, n); /* back to a; only values that share a small sub-bucket move */
}

/* The arguments are dealt by their first digit straight into the output (as the machine reads
 * values), and each bucket is then sorted there with a scratch array as large as the largest
 * bucket: for spread data a few thousand values, which stay in the cache. */
static int sort(spw_task_ctx *ctx, const spw_task_arg *args, uint32_t nargs)
{
    uint64_t total = 0;
    for (uint32_t i = 0; i < nargs; i++) {
        if (args[i].len % 8 != 0) {
            spw_task_fail(ctx, "sort: argument %u is %llu bytes, not u64 values", i,
                          (unsigned long long)args[i].len);
            return -1;
        }
        total += args[i].len;
    }
    uint64_t n = total / 8, first = 0, differ = 0, most = 1;
    uint64_t *top = calloc((size_t)1 << TOP_BITS, sizeof *top);
    uint64_t *count = calloc((size_t)1 << FIRST_BITS, sizeof *count);
    uint64_t *pos = malloc(((size_t)1 << FIRST_BITS) * sizeof *pos);
    if (top == NULL || count == NULL || pos == NULL) {
        free(top);
        free(count);
        free(pos);
        spw_task_fail(ctx, "sort: no memory for its counts");
        return -1;
    }
    for (uint32_t i = 0, seen = 0; i < nargs; i++) {
        const uint8_t *p = args[i].data;
        if (!seen && args[i].len > 0) {
            first = load(p);
            seen = 1;
        }
        for (uint64_t j = 0; j < args[i].len / 8; j++) {
            uint64_t v = load(p + 8 * j);
            differ |= v ^ first;
            top[v >> (64 - TOP_BITS)]++;
        }
    }
    /* The highest bit that differs lies in the first digit, so that digit splits the values. */
    int bits = differ != 0 ? 64 - __builtin_clzll(differ) : 0;
    int width = n < 4 ? 1 : 63 - __builtin_clzll(n); /* buckets of one or two values */
    digit g = digit_below(bits, width < FIRST_BITS ? width : FIRST_BITS);
    if (g.shift >= 64 - TOP_BITS) {
        for (uint64_t k = 0; k < (uint64_t)1 << TOP_BITS; k++)
            count[digit_of(k << (64 - TOP_BITS), g)] += top[k];
    } else {
        for (uint32_t i = 0; i < nargs; i++) {
            const uint8_t *p = args[i].data;
            for (uint64_t j = 0; j < args[i].len / 8; j++)
                count[digit_of(load(p + 8 * j), g)]++;
        }
    }
    free(top);
    for (uint64_t k = 0, sum = 0; k <= g.mask; k++) {
        pos[k] = sum;
        sum += count[k];
        most = count[k] > most ? count[k] : most;
    }
    uint64_t *b = malloc(most * sizeof *b);
    uint8_t *out = b != NULL ? spw_task_output(ctx, total) : NULL;
    if (out == NULL) {
        free(b);
        free(count);
        free(pos);
        if (b == NULL)
            spw_task_fail(ctx, "sort: no memory for %llu values", (unsigned long long)most);
        return b == NULL ? -1 : spw_task_output_error(ctx);
    }
    uint64_t *a = (uint64_t *)(void *)out; /* an output is aligned for any type */
    for (uint32_t i = 0; i < nargs; i++) {
        const uint8_t *p = args[i].data;
        for (uint64_t j = 0; j < args[i].len / 8; j++) {
            uint64_t v = load(p + 8 * j);
            a[pos[digit_of(v, g)]++] = v;
        }
    }
    for (uint64_t k = 0, at = 0; k <= g.mask; at += count[k++])
        sort_bucket(a + at, b, count[k], g.shift);
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    for (uint64_t k = 0; k < n; k++)
        store(out + 8 * k, a[k]); /* back to little-endian */
#endif
    free(b);
    free(count);
    free(pos);
    return 0;
}

/* check reads the bucket once without a branch per value: the xor, the sum, and how many values
 * are smaller than the one before them. Ascending values all lie in bucket j when the first and
 * the last do; only a bucket that fails is read again, to name the first value at fault. */
static int check(spw_task_ctx *ctx, const spw_task_arg *args, uint32_t nargs)
{
    uint64_t j, p;
    if (bucket_args(ctx, "check", args, nargs, &j, &p) != 0)
        return -1;
    const uint8_t *in = args[0].data;
    uint64_t n = args[0].len / 8, x = 0, sum = 0, prev = 0, descents = 0;
    for (uint64_t i = 0; i < n; i++) {
        uint64_t v = load(in + 8 * i);
        descents += v < prev;
        x ^= v;
        sum += v;
        prev = v;
    }
    for (uint64_t i = 1; descents > 0 && i < n; i++) {
        if (load(in + 8 * i) < load(in + 8 * (i - 1))) {
            spw_task_fail(ctx, "check: value %llu is smaller than the one before it",
                          (unsigned long long)i);
            return -1;
        }
    }
    bool outside = n > 0 && (bucket_of(load(in), p) != j || bucket_of(prev, p) != j);
    for (uint64_t i = 0; outside && i < n; i++) {
        if (bucket_of(load(in + 8 * i), p) != j) {
            spw_task_fail(ctx, "check: value %llu is not in bucket %llu of %llu",
                          (unsigned long long)i, (unsigned long long)j, (unsigned long long)p);
            return -1;
        }
    }
    uint8_t *out = spw_task_output(ctx, 24);
    if (out == NULL)
        return spw_task_output_error(ctx);
    put_u64(out, n);
    put_u64(out + 8, x);
    put_u64(out + 16, sum);
    return 0;
}

static const spw_plugin_fn fns[] = {
    {"gen", gen}, {"split", split}, {"sort", sort}, {"check", check}};
static const spw_plugin plugin = {SPW_TASK_ABI_VERSION, "example-sort", fns, 4};

const spw_plugin *spillway_plugin_v1(void)
{
    return &plugin;
}
