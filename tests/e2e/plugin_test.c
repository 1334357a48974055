/* A task plugin for the end-to-end tests: built as a shared library and loaded by workers with
 * --plugin. It links nothing of spillway's; everything arrives through the ABI table. */
#include <stdint.h>
#include <string.h>

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

/* Fails with an errno-style value and no text of its own. */
static int fail_bare(spw_task_ctx *ctx, const spw_task_arg *args, uint32_t nargs)
{
    (void)ctx;
    (void)args;
    (void)nargs;
    return -5;
}

static const spw_plugin_fn fns[] = {
    {"reverse", reverse}, {"xor_key", xor_key}, {"fail_bare", fail_bare}};
static const spw_plugin plugin = {SPW_TASK_ABI_VERSION, "e2e-test", fns, 3};

const spw_plugin *spillway_plugin_v1(void)
{
    return &plugin;
}
