/*
 * An example task plugin: `upper(text)` returns its argument with ASCII letters upper-cased,
 * `count_byte(data, byte)` the number of times a byte occurs (a little-endian u64).
 *
 *   cc -shared -fPIC -o upper.so plugin_upper.c $(pkg-config --cflags spillway)
 *   spillway-worker --plugin /path/to/upper.so ...    (or `plugin = ...` in worker-N.conf)
 *
 * A plugin links nothing of spillway's: it includes spillway/task.h and exports one function,
 * spillway_plugin_v1, returning a static table of task functions. Object arguments point
 * straight into the worker's shared memory and are read-only; the output is allocated in the
 * store with spw_task_output and written in place.
 */
#include <stddef.h>
#include <stdint.h>

#include <spillway/task.h>

static int upper(spw_task_ctx *ctx, const spw_task_arg *args, uint32_t nargs)
{
    if (nargs != 1) {
        spw_task_fail(ctx, "upper takes one argument, got %u", nargs);
        return -1;
    }
    uint8_t *out = spw_task_output(ctx, args[0].len);
    if (out == NULL)
        return spw_task_output_error(ctx);
    const uint8_t *in = args[0].data;
    for (uint64_t i = 0; i < args[0].len; i++)
        out[i] = (in[i] >= 'a' && in[i] <= 'z') ? (uint8_t)(in[i] - 'a' + 'A') : in[i];
    return 0;
}

static int count_byte(spw_task_ctx *ctx, const spw_task_arg *args, uint32_t nargs)
{
    if (nargs != 2 || args[1].len != 1) {
        spw_task_fail(ctx, "count_byte takes data and a one-byte argument");
        return -1;
    }
    const uint8_t *in = args[0].data;
    uint8_t b = *(const uint8_t *)args[1].data;
    uint64_t n = 0;
    for (uint64_t i = 0; i < args[0].len; i++)
        n += in[i] == b;
    uint8_t *out = spw_task_output(ctx, 8);
    if (out == NULL)
        return spw_task_output_error(ctx);
    for (int i = 0; i < 8; i++)
        out[i] = (uint8_t)(n >> (8 * i));
    return 0;
}

static const spw_plugin_fn fns[] = {{"upper", upper}, {"count_byte", count_byte}};
static const spw_plugin plugin = {SPW_TASK_ABI_VERSION, "example-upper", fns, 2};

const spw_plugin *spillway_plugin_v1(void)
{
    return &plugin;
}
