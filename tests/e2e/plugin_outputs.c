/* A task plugin of task ABI version 2, for the end-to-end tests of tasks with many outputs:
 * loaded beside plugin_test.c (version 1) by the same worker. Links nothing of spillway's. */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include "plugin_files.h"
#include "spillway/task.h"

/* Byte j of output i of parts: what the tests read back. */
static uint8_t part_byte(uint32_t i, uint64_t j)
{
    return (uint8_t)(i * 31u + j * 7u + (j >> 8));
}

/* parts(sizes[, path[, ...]]): sizes is an array of u64, one per output to write; output i gets
 * sizes[i] bytes of part_byte(i, j). With path, one byte is appended to that file per run (a
 * test counts the runs); arguments after it are not read (a test makes the task wait for
 * them). It writes exactly as many outputs as sizes has entries, whatever the task declared: a
 * test of the wrong count passes another number. */
static int parts(spw_task_ctx *ctx, const spw_task_arg *args, uint32_t nargs)
{
    if (nargs < 1 || args[0].len % 8 != 0) {
        spw_task_fail(ctx, "parts takes an array of u64 sizes and an optional path");
        return -1;
    }
    if (nargs > 1) {
        if (args[1].len == 0 || args[1].len >= PLUGIN_PATH_MAX) {
            spw_task_fail(ctx, "parts: bad path");
            return -1;
        }
        int rc = plugin_count_run(&args[1]);
        if (rc != 0)
            return rc;
    }
    uint32_t k = (uint32_t)(args[0].len / 8);
    for (uint32_t i = 0; i < k; i++) {
        uint64_t size;
        memcpy(&size, (const uint8_t *)args[0].data + 8 * i, 8);
        uint8_t *out = spw_task_output_at(ctx, i, size);
        if (out == NULL)
            return spw_task_output_error(ctx);
        for (uint64_t j = 0; j < size; j++)
            out[j] = part_byte(i, j);
    }
    return 0;
}

/* check_part(data, index): 0 if data is what parts wrote as output index, else fails naming the
 * first byte that differs; its output is the data's length, as a u64. */
static int check_part(spw_task_ctx *ctx, const spw_task_arg *args, uint32_t nargs)
{
    uint64_t index;
    if (nargs != 2 || args[1].len != 8) {
        spw_task_fail(ctx, "check_part takes data and a u64 index");
        return -1;
    }
    memcpy(&index, args[1].data, 8);
    const uint8_t *p = args[0].data;
    for (uint64_t j = 0; j < args[0].len; j++) {
        if (p[j] != part_byte((uint32_t)index, j)) {
            spw_task_fail(ctx, "byte %llu of part %llu differs", (unsigned long long)j,
                          (unsigned long long)index);
            return -1;
        }
    }
    uint8_t *out = spw_task_output(ctx, 8);
    if (out == NULL)
        return spw_task_output_error(ctx);
    memcpy(out, &args[0].len, 8);
    return 0;
}

static const spw_plugin_fn fns[] = {{"parts", parts}, {"check_part", check_part}};
static const spw_plugin plugin = {2, "e2e-outputs", fns, sizeof fns / sizeof fns[0]};

const spw_plugin *spillway_plugin_v1(void)
{
    return &plugin;
}
