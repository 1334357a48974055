/* A task plugin for the end-to-end tests: built as a shared library and loaded by workers with
 * --plugin. It links nothing of spillway's; everything arrives through the ABI table. */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "plugin_files.h"
#include "spillway/task.h"

static int reverse(spw_task_ctx *ctx, const spw_task_arg *args, uint32_t nargs)
{
    if (nargs != 1) {
        spw_task_fail(ctx, "reverse takes one argument, got %u", nargs);
        return -1;
    }
    uint8_t *out = spw_task_output(ctx, args[0].len);
    if (out == NULL)
        return spw_task_output_error(ctx);
    const uint8_t *in = args[0].data;
    for (uint64_t i = 0; i < args[0].len; i++)
        out[i] = in[args[0].len - 1 - i];
    return 0;
}

static int xor_key(spw_task_ctx *ctx, const spw_task_arg *args, uint32_t nargs)
{
    if (nargs != 2 || args[1].len != 1) {
        spw_task_fail(ctx, "xor_key takes data and a one-byte key");
        return -1;
    }
    uint8_t *out = spw_task_output(ctx, args[0].len);
    if (out == NULL)
        return spw_task_output_error(ctx);
    const uint8_t *in = args[0].data;
    uint8_t k = *(const uint8_t *)args[1].data;
    for (uint64_t i = 0; i < args[0].len; i++)
        out[i] = in[i] ^ k;
    return 0;
}

static int u64_arg(const spw_task_arg *a, uint64_t *v)
{
    if (a->len != 8)
        return -1;
    memcpy(v, a->data, 8);
    return 0;
}

/* The one u64 byte count `fn` takes, into *n; 0, or -1 with the task failed. */
static int byte_count_arg(spw_task_ctx *ctx, const char *fn, const spw_task_arg *args,
                          uint32_t nargs, uint64_t *n)
{
    if (nargs == 1 && u64_arg(&args[0], n) == 0)
        return 0;
    char msg[64];
    snprintf(msg, sizeof msg, "%s takes a u64 byte count", fn);
    spw_task_fail(ctx, msg);
    return -1;
}

/* hog(n): takes n bytes of heap 1 MiB at a time, touching every page, then gives it back. Out of
 * memory (a task memory limit) it frees what it took and returns -ENOMEM. */
static int hog(spw_task_ctx *ctx, const spw_task_arg *args, uint32_t nargs)
{
    uint64_t n;
    if (byte_count_arg(ctx, "hog", args, nargs, &n) != 0)
        return -1;
    size_t nchunks = (size_t)((n + (1u << 20) - 1) >> 20), got = 0;
    void **chunks = calloc(nchunks ? nchunks : 1, sizeof *chunks);
    if (chunks == NULL)
        return -ENOMEM;
    int rc = 0;
    for (; got < nchunks; got++) {
        chunks[got] = malloc(1u << 20);
        if (chunks[got] == NULL) {
            spw_task_fail(ctx, "malloc of 1 MiB failed after %zu MiB", got);
            rc = -ENOMEM;
            break;
        }
        memset(chunks[got], 0x5a, 1u << 20);
    }
    for (size_t i = 0; i < got; i++)
        free(chunks[i]);
    free(chunks);
    return rc;
}

/* leak(n): takes n bytes of heap, touches them and never frees them: a leaky plugin. The blocks
 * stay reachable from here, so leak checkers at exit see memory held, not lost. */
void *spw_test_leaked[256]; /* not static: the compiler must keep the stores and the writes */
unsigned spw_test_nleaked;

static int leak(spw_task_ctx *ctx, const spw_task_arg *args, uint32_t nargs)
{
    uint64_t n;
    if (byte_count_arg(ctx, "leak", args, nargs, &n) != 0)
        return -1;
    void *p = malloc(n);
    if (p == NULL)
        return -ENOMEM;
    memset(p, 0x33, n);
    spw_test_leaked[spw_test_nleaked++ % 256] = p;
    return 0;
}

/* The leaks end with the plugin (dlclose at the executor's exit), so leak checkers stay quiet. */
__attribute__((destructor)) static void leaks_free(void)
{
    for (unsigned i = 0; i < 256 && i < spw_test_nleaked; i++)
        free(spw_test_leaked[i]);
}

/* mark_sleep(path, ms): creates the file `path` (a test waits for it: the task has started),
 * then sleeps ms. */
static int mark_sleep(spw_task_ctx *ctx, const spw_task_arg *args, uint32_t nargs)
{
    uint64_t ms;
    if (nargs != 2 || args[0].len == 0 || args[0].len >= PLUGIN_PATH_MAX ||
        u64_arg(&args[1], &ms)) {
        spw_task_fail(ctx, "mark_sleep takes a path and a u64 of milliseconds");
        return -1;
    }
    int rc = plugin_touch(&args[0]);
    if (rc != 0)
        return rc;
    struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0)
        ;
    return 0;
}

/* wait_file(path, max_ms[, mark[, ...]]): creates the file `mark` if given (a test waits for
 * it: the task has started), then returns (empty result) once the file `path` exists, which the
 * test creates when it has seen what it wanted while the task runs; fails after max_ms so that
 * a test that never creates it cannot hang the worker. Further arguments (objects the task is
 * to hold while it waits) are not read. */
static int wait_file(spw_task_ctx *ctx, const spw_task_arg *args, uint32_t nargs)
{
    uint64_t ms;
    char path[512];
    if (nargs < 2 || args[0].len == 0 || args[0].len >= sizeof path || u64_arg(&args[1], &ms) ||
        (nargs >= 3 && (args[2].len == 0 || args[2].len >= sizeof path))) {
        spw_task_fail(ctx, "wait_file takes a path, a u64 of milliseconds, maybe a mark path and "
                           "more");
        return -1;
    }
    int rc = nargs >= 3 ? plugin_touch(&args[2]) : 0;
    if (rc != 0)
        return rc;
    memcpy(path, args[0].data, args[0].len);
    path[args[0].len] = '\0';
    for (uint64_t waited = 0; access(path, F_OK) != 0; waited += 5) {
        if (waited >= ms) {
            spw_task_fail(ctx, "wait_file: the file never appeared");
            return -1;
        }
        struct timespec ts = {0, 5000000L};
        nanosleep(&ts, NULL);
    }
    return 0;
}

/* wait_make(path, max_ms, mark, n): wait_file(path, max_ms, mark), then an output of n bytes,
 * byte i being i % 251: a task that asks for its output only when the test lets it. */
static int wait_make(spw_task_ctx *ctx, const spw_task_arg *args, uint32_t nargs)
{
    uint64_t n;
    if (nargs != 4 || u64_arg(&args[3], &n) != 0) {
        spw_task_fail(ctx, "wait_make takes a path, a u64 of milliseconds, a mark path and a u64 "
                           "byte count");
        return -1;
    }
    int rc = wait_file(ctx, args, 3);
    if (rc != 0)
        return rc;
    uint8_t *out = spw_task_output(ctx, n);
    if (out == NULL)
        return spw_task_output_error(ctx);
    for (uint64_t i = 0; i < n; i++)
        out[i] = (uint8_t)(i % 251);
    return 0;
}

/* Fails with an errno-style value and no text of its own. */
static int fail_bare(spw_task_ctx *ctx, const spw_task_arg *args, uint32_t nargs)
{
    (void)ctx;
    (void)args;
    (void)nargs;
    return -5;
}

/* count_return(path, code[, ...]): appends one byte to the file `path` (a test counts the
 * runs), then returns code (a u64 holding an int64); further arguments (a producer's output, so
 * that the task can be sent ahead) are not read. */
static int count_return(spw_task_ctx *ctx, const spw_task_arg *args, uint32_t nargs)
{
    uint64_t code;
    if (nargs < 2 || args[0].len == 0 || args[0].len >= PLUGIN_PATH_MAX ||
        u64_arg(&args[1], &code)) {
        spw_task_fail(ctx, "count_return takes a path and a u64 holding the code to return");
        return -1;
    }
    int rc = plugin_count_run(&args[0]);
    return rc != 0 ? rc : (int)(int64_t)code;
}

/* file_size(path): the size of the file `path` now (0 if there is none), as a u64. */
static int file_size(spw_task_ctx *ctx, const spw_task_arg *args, uint32_t nargs)
{
    char path[512];
    if (nargs != 1 || args[0].len == 0 || args[0].len >= sizeof path) {
        spw_task_fail(ctx, "file_size takes a path");
        return -1;
    }
    memcpy(path, args[0].data, args[0].len);
    path[args[0].len] = '\0';
    struct stat st;
    uint64_t size = stat(path, &st) == 0 ? (uint64_t)st.st_size : 0;
    uint8_t *out = spw_task_output(ctx, sizeof size);
    if (out == NULL)
        return spw_task_output_error(ctx);
    memcpy(out, &size, sizeof size);
    return 0;
}

/* ignore_output(n): asks for an output of n bytes, fills it if it got one, and returns 0 either
 * way: a task that does not check what output() gave it. */
static int ignore_output(spw_task_ctx *ctx, const spw_task_arg *args, uint32_t nargs)
{
    uint64_t n;
    if (byte_count_arg(ctx, "ignore_output", args, nargs, &n) != 0)
        return -1;
    uint8_t *out = spw_task_output(ctx, n);
    if (out != NULL)
        memset(out, 1, n);
    return 0;
}

static const spw_plugin_fn fns[] = {
    {"reverse", reverse},     {"xor_key", xor_key},          {"hog", hog},
    {"leak", leak},           {"mark_sleep", mark_sleep},    {"fail_bare", fail_bare},
    {"wait_file", wait_file}, {"count_return", count_return}, {"file_size", file_size},
    {"ignore_output", ignore_output}, {"wait_make", wait_make}};
static const spw_plugin plugin = {1 /* task ABI version 1: no output_at */, "e2e-test", fns,
                                  sizeof fns / sizeof fns[0]};

const spw_plugin *spillway_plugin_v1(void)
{
    return &plugin;
}
