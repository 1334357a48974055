/*
 * Built-in task functions, for tests, benchmarks and simple jobs. They use the same ABI as
 * plugins (spillway/task.h). Integers are little-endian u64 arguments; floats are f64 arrays.
 * The list of them, with their arguments, is above builtin_fns.
 */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <xxhash.h>

#include "spillway/datagen.h"
#include "worker_int.h"

static int get_u64(spw_task_ctx *ctx, const spw_task_arg *args, uint32_t nargs, uint32_t i,
                   uint64_t *out)
{
    if (i >= nargs || args[i].len != 8) {
        spw_task_fail(ctx, "argument %u must be a u64 (8 bytes)", i);
        return SPW_EINVAL;
    }
    memcpy(out, args[i].data, 8);
    return 0;
}

static int put_u64(spw_task_ctx *ctx, uint64_t v)
{
    void *p = spw_task_output(ctx, 8);
    if (p == NULL)
        return spw_task_output_error(ctx);
    memcpy(p, &v, 8);
    return 0;
}

static int fn_noop(spw_task_ctx *ctx, const spw_task_arg *args, uint32_t nargs)
{
    (void)ctx;
    (void)args;
    (void)nargs;
    return 0;
}

static int fn_inc(spw_task_ctx *ctx, const spw_task_arg *args, uint32_t nargs)
{
    uint64_t x;
    int rc = get_u64(ctx, args, nargs, 0, &x);
    return rc != 0 ? rc : put_u64(ctx, x + 1);
}

static int fn_add(spw_task_ctx *ctx, const spw_task_arg *args, uint32_t nargs)
{
    uint64_t sum = 0;
    for (uint32_t i = 0; i < nargs; i++) {
        uint64_t x;
        int rc = get_u64(ctx, args, nargs, i, &x);
        if (rc != 0)
            return rc;
        sum += x;
    }
    return put_u64(ctx, sum);
}

static int fn_sleep_ms(spw_task_ctx *ctx, const spw_task_arg *args, uint32_t nargs)
{
    uint64_t ms;
    int rc = get_u64(ctx, args, nargs, 0, &ms);
    if (rc != 0)
        return rc;
    struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0)
        ;
    return 0;
}

static int fn_fill(spw_task_ctx *ctx, const spw_task_arg *args, uint32_t nargs)
{
    uint64_t n;
    int rc = get_u64(ctx, args, nargs, 0, &n);
    if (rc != 0)
        return rc;
    static const uint8_t zero = 0;
    const uint8_t *pat = nargs > 1 && args[1].len > 0 ? args[1].data : &zero;
    uint64_t plen = nargs > 1 && args[1].len > 0 ? args[1].len : 1;
    uint8_t *out = spw_task_output(ctx, n);
    if (out == NULL)
        return spw_task_output_error(ctx);
    if (plen == 1) {
        memset(out, pat[0], n);
        return 0;
    }
    /* Write the pattern once, then double the filled prefix. */
    uint64_t done = plen < n ? plen : n;
    memcpy(out, pat, done);
    while (done < n) {
        uint64_t k = done < n - done ? done : n - done;
        memcpy(out + done, out, k);
        done += k;
    }
    return 0;
}

static int fn_random(spw_task_ctx *ctx, const spw_task_arg *args, uint32_t nargs)
{
    uint64_t n, seed;
    int rc = get_u64(ctx, args, nargs, 0, &n);
    if (rc == 0)
        rc = get_u64(ctx, args, nargs, 1, &seed);
    if (rc != 0)
        return rc;
    uint8_t *out = spw_task_output(ctx, n);
    if (out == NULL)
        return spw_task_output_error(ctx);
    spw_gen_random(out, n, seed);
    return 0;
}

static int fn_walk_f64(spw_task_ctx *ctx, const spw_task_arg *args, uint32_t nargs)
{
    uint64_t count, seed;
    int rc = get_u64(ctx, args, nargs, 0, &count);
    if (rc == 0)
        rc = get_u64(ctx, args, nargs, 1, &seed);
    if (rc != 0)
        return rc;
    if (count > UINT64_MAX / 8) {
        spw_task_fail(ctx, "count too large");
        return SPW_EINVAL;
    }
    uint8_t *out = spw_task_output(ctx, count * 8);
    if (out == NULL)
        return spw_task_output_error(ctx);
    spw_gen_walk_f64(out, count, seed);
    return 0;
}

static int fn_checksum(spw_task_ctx *ctx, const spw_task_arg *args, uint32_t nargs)
{
    XXH3_state_t *st = XXH3_createState();
    if (st == NULL) {
        spw_task_fail(ctx, "out of memory");
        return SPW_ENOMEM;
    }
    XXH3_64bits_reset(st);
    for (uint32_t i = 0; i < nargs; i++)
        XXH3_64bits_update(st, args[i].data, args[i].len);
    uint64_t h = XXH3_64bits_digest(st);
    XXH3_freeState(st);
    return put_u64(ctx, h);
}

static int fn_sum_f64(spw_task_ctx *ctx, const spw_task_arg *args, uint32_t nargs)
{
    double sum = 0;
    for (uint32_t i = 0; i < nargs; i++) {
        if (args[i].len % 8 != 0) {
            spw_task_fail(ctx, "argument %u is %llu bytes, not a whole number of f64", i,
                          (unsigned long long)args[i].len);
            return SPW_EINVAL;
        }
        const uint8_t *p = args[i].data;
        for (uint64_t k = 0; k < args[i].len; k += 8) {
            double d;
            memcpy(&d, p + k, 8);
            sum += d;
        }
    }
    void *out = spw_task_output(ctx, 8);
    if (out == NULL)
        return spw_task_output_error(ctx);
    memcpy(out, &sum, 8);
    return 0;
}

static int fn_concat(spw_task_ctx *ctx, const spw_task_arg *args, uint32_t nargs)
{
    uint64_t total = 0;
    for (uint32_t i = 0; i < nargs; i++)
        total += args[i].len;
    uint8_t *out = spw_task_output(ctx, total);
    if (out == NULL)
        return spw_task_output_error(ctx);
    for (uint32_t i = 0; i < nargs; i++) {
        if (args[i].len > 0)
            memcpy(out, args[i].data, args[i].len);
        out += args[i].len;
    }
    return 0;
}

static int fn_len(spw_task_ctx *ctx, const spw_task_arg *args, uint32_t nargs)
{
    uint64_t total = 0;
    for (uint32_t i = 0; i < nargs; i++)
        total += args[i].len;
    return put_u64(ctx, total);
}

static int fn_echo(spw_task_ctx *ctx, const spw_task_arg *args, uint32_t nargs)
{
    if (nargs != 1) {
        spw_task_fail(ctx, "echo takes one argument");
        return SPW_EINVAL;
    }
    return fn_concat(ctx, args, nargs);
}

static int fn_fail(spw_task_ctx *ctx, const spw_task_arg *args, uint32_t nargs)
{
    if (nargs > 0)
        spw_task_fail(ctx, "%.*s", (int)(args[0].len > 1024 ? 1024 : args[0].len),
                      (const char *)args[0].data);
    else
        spw_task_fail(ctx, "failed as asked");
    return SPW_ETASKFAILED;
}

static int fn_crash(spw_task_ctx *ctx, const spw_task_arg *args, uint32_t nargs)
{
    (void)ctx;
    (void)args;
    (void)nargs;
    raise(SIGSEGV);
    return 0;
}

/* The built-in functions:
 *   noop()                    empty result
 *   inc(x)                    x + 1
 *   add(a, b, ...)            sum of u64 values
 *   sleep_ms(ms)              sleeps, empty result
 *   fill(n, pattern)          n bytes repeating pattern (default one 0 byte)
 *   random(n, seed)           n pseudo-random bytes (incompressible)
 *   walk_f64(count, seed)     a random walk of count float64 values (compressible numbers)
 *   checksum(data, ...)       XXH3-64 of the concatenated arguments, as u64
 *   sum_f64(data, ...)        sum of the float64 values in all arguments, as f64
 *   concat(a, b, ...)         the arguments one after another
 *   len(a, ...)               total length in bytes, as u64
 *   echo(a)                   a copy of a
 *   fail(text)                fails with text
 *   crash()                   kills its executor with SIGSEGV (tests the executor pool)
 */
static const spw_plugin_fn builtin_fns[] = {
    {"noop", fn_noop},         {"inc", fn_inc},         {"add", fn_add},
    {"sleep_ms", fn_sleep_ms}, {"fill", fn_fill},       {"random", fn_random},
    {"walk_f64", fn_walk_f64}, {"checksum", fn_checksum}, {"sum_f64", fn_sum_f64},
    {"concat", fn_concat},     {"len", fn_len},         {"echo", fn_echo},
    {"fail", fn_fail},         {"crash", fn_crash},
};

static const spw_plugin builtins = {
    SPW_TASK_ABI_VERSION,
    "builtin",
    builtin_fns,
    sizeof builtin_fns / sizeof builtin_fns[0],
};

const spw_plugin *wrk__builtins(void)
{
    return &builtins;
}
