/* A task plugin built twice with a different PLUGIN_VERSION (tests/e2e/CMakeLists.txt): "the
 * same" plugin in two versions, whose functions say which one ran. With PLUGIN_CRASH_AT_LOAD it
 * kills whatever loads it, and with PLUGIN_PAD_BYTES it carries that many bytes of padding (a
 * large plugin for the bench). */
#include <signal.h>
#include <stdint.h>
#include <string.h>

#include "spillway/task.h"

#ifndef PLUGIN_VERSION
#define PLUGIN_VERSION 1
#endif

#ifdef PLUGIN_PAD_BYTES
/* Initialised, so it is in the file, and read by version() so that it stays. */
__attribute__((used)) static const uint8_t pad[PLUGIN_PAD_BYTES] = {1};
#endif

/* version(): this build's PLUGIN_VERSION, as a u64. */
static int version(spw_task_ctx *ctx, const spw_task_arg *args, uint32_t nargs)
{
    (void)args;
    (void)nargs;
    uint64_t v = PLUGIN_VERSION;
#ifdef PLUGIN_PAD_BYTES
    v += pad[0] - 1;
#endif
    void *out = spw_task_output(ctx, 8);
    if (out == NULL)
        return spw_task_output_error(ctx);
    memcpy(out, &v, 8);
    return 0;
}

/* scale(x): x * 1000 + PLUGIN_VERSION. */
static int scale(spw_task_ctx *ctx, const spw_task_arg *args, uint32_t nargs)
{
    uint64_t x;
    if (nargs != 1 || args[0].len != 8) {
        spw_task_fail(ctx, "scale takes a u64");
        return -1;
    }
    memcpy(&x, args[0].data, 8);
    x = x * 1000 + PLUGIN_VERSION;
    void *out = spw_task_output(ctx, 8);
    if (out == NULL)
        return spw_task_output_error(ctx);
    memcpy(out, &x, 8);
    return 0;
}

/* noop(): an empty result, as the built-in noop (the bench's tiny tasks). */
static int noop(spw_task_ctx *ctx, const spw_task_arg *args, uint32_t nargs)
{
    (void)ctx;
    (void)args;
    (void)nargs;
    return 0;
}

#ifdef PLUGIN_CRASH_AT_LOAD
__attribute__((constructor)) static void crash(void)
{
    raise(SIGSEGV);
}
#endif

static const spw_plugin_fn fns[] = {{"version", version}, {"scale", scale}, {"noop", noop}};
static const spw_plugin plugin = {SPW_TASK_ABI_VERSION, "versioned", fns,
                                  sizeof fns / sizeof fns[0]};

const spw_plugin *spillway_plugin_v1(void)
{
    return &plugin;
}
