/*
 * spillway task ABI, version 1: how a task function sees its arguments and produces its output.
 *
 * Task functions run in a worker's executor processes. Built-in functions use this ABI, and so
 * do plugins: a shared library passed to the worker with --plugin PATH.so exports
 *
 *     const spw_plugin *spillway_plugin_v1(void);
 *
 * returning a static table of functions. The worker refuses a plugin whose abi_version differs
 * from SPW_TASK_ABI_VERSION. A plugin links against nothing of spillway's: everything it needs
 * arrives through the spw_task_api table in its context.
 */
#ifndef SPW_TASK_H
#define SPW_TASK_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Version 2 added spw_task_api.output_at (many outputs per task) at the end of the table. The
 * worker loads plugins of version 1 and 2: a version-1 plugin sees the same table (it reads only
 * the entries it knows) and its functions make one output each, as they always did.
 *
 * Many outputs: a task submitted with k outputs (spillway_task_n) writes each of them exactly
 * once, output i with spw_task_output_at(ctx, i, size) (i < k); spw_task_output(ctx, size) is
 * output 0. Each is its own object, inline or in the store by its size as a single output is.
 * A task of k > 1 outputs that returns 0 having written another number of them, or any task
 * that writes an output index >= k, fails with SPW_ETASKFAILED and a message naming the task,
 * the count declared and the count written. A task of one output may still write none (its
 * output is then empty), as in version 1. */
#define SPW_TASK_ABI_VERSION 2u
#define SPW_TASK_ABI_MIN 1u /* the oldest version the worker still loads */

/* Arguments are read-only byte ranges. Object arguments point straight into the store's shared
 * memory (no copy); writing to them faults. A function produces at most one output with
 * spw_task_output(): small outputs travel back inside messages, large ones are allocated in the
 * store and written in place. Returning non-zero fails the task; the text given to
 * spw_task_fail() reaches the client that submitted it. */
typedef struct spw_task_arg {
    const void *data; /* read-only; NULL when len is 0 */
    uint64_t len;     /* bytes */
} spw_task_arg;

typedef struct spw_task_ctx spw_task_ctx;

/** Services the executor offers a running task. */
typedef struct spw_task_api {
    uint32_t abi_version;
    /** Allocates the task's output of size bytes and returns where to write it, or NULL if the
     * store cannot provide it (the task should then return the error it got from
     * spw_task_output_error). Can be called once per task. */
    void *(*output)(spw_task_ctx *ctx, uint64_t size);
    /** Sets the error text reported with a failing return (printf style). */
    void (*fail)(spw_task_ctx *ctx, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
    /** Why the last output() call returned NULL (a negative spillway error code). */
    int (*output_error)(spw_task_ctx *ctx);
    /** Version 2: allocates output i (0-based, below the count the task was submitted with) of
     * size bytes and returns where to write it, or NULL (see output; also for an index past the
     * count, or one written already). output(ctx, size) is output_at(ctx, 0, size). */
    void *(*output_at)(spw_task_ctx *ctx, uint32_t i, uint64_t size);
} spw_task_api;

struct spw_task_ctx {
    const spw_task_api *api;
    void *priv; /* the executor's */
};

/** A task function: 0 on success, non-zero on failure. spillway's own codes (-1000..-1999)
 * and the code spw_task_output_error gave are reported as they are; any other value (-1, an
 * errno, a positive number), and SPW_EAHEAD (which means "dropped unrun"), is reported as
 * SPW_ETASKFAILED with the text set by fail, or "NAME returned N". A function that returns 0
 * after output() returned NULL fails with the code spw_task_output_error gives. */
typedef int (*spw_task_fn)(spw_task_ctx *ctx, const spw_task_arg *args, uint32_t nargs);

typedef struct spw_plugin_fn {
    const char *name; /* at most 255 bytes */
    spw_task_fn fn;
} spw_plugin_fn;

typedef struct spw_plugin {
    uint32_t abi_version; /* SPW_TASK_ABI_VERSION, or 1 for a plugin that predates output_at */
    const char *name;
    const spw_plugin_fn *fns;
    uint32_t nfns;
} spw_plugin;

/** The symbol a plugin exports. */
#define SPW_PLUGIN_SYMBOL "spillway_plugin_v1"
typedef const spw_plugin *(*spw_plugin_entry)(void);

static inline void *spw_task_output(spw_task_ctx *ctx, uint64_t size)
{
    return ctx->api->output(ctx, size);
}
/** Output i of a task of several (ABI version 2; a plugin using it declares abi_version 2). */
static inline void *spw_task_output_at(spw_task_ctx *ctx, uint32_t i, uint64_t size)
{
    return ctx->api->output_at(ctx, i, size);
}
#define spw_task_fail(ctx, ...) ((ctx)->api->fail((ctx), __VA_ARGS__))
static inline int spw_task_output_error(spw_task_ctx *ctx)
{
    return ctx->api->output_error(ctx);
}

#ifdef __cplusplus
}
#endif
#endif /* SPW_TASK_H */
