/* A plugin's task functions run in this process, without a worker: what spillway-bench's sort
 * case measures its limit with, and what the unit test of the example sort plugin checks. A
 * task's outputs are malloc'd here; the caller frees them. */
#ifndef SPW_LOCAL_PLUGIN_H
#define SPW_LOCAL_PLUGIN_H

#include <dlfcn.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <spillway/task.h>

typedef struct local_ctx {
    spw_task_ctx ctx;
    void **outs;
    uint64_t *lens;
    uint32_t nouts;
    char err[256]; /* what the task's last spw_task_fail said */
} local_ctx;

static inline void *local_output_at(spw_task_ctx *ctx, uint32_t i, uint64_t size)
{
    local_ctx *l = (local_ctx *)ctx;
    if (i >= l->nouts)
        return NULL;
    l->outs[i] = malloc(size > 0 ? size : 1);
    l->lens[i] = size;
    return l->outs[i];
}

static inline void *local_output(spw_task_ctx *ctx, uint64_t size)
{
    return local_output_at(ctx, 0, size);
}

static inline void local_fail(spw_task_ctx *ctx, const char *fmt, ...)
{
    local_ctx *l = (local_ctx *)ctx;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(l->err, sizeof l->err, fmt, ap);
    va_end(ap);
}

static inline int local_output_error(spw_task_ctx *ctx)
{
    (void)ctx;
    return -ENOMEM;
}

static const spw_task_api local_api = {SPW_TASK_ABI_VERSION, local_output, local_fail,
                                       local_output_error, local_output_at};

/* Runs fn(args) with nouts outputs into outs/lens (each NULL and 0 until written): fn's result;
 * err (when not NULL, 256 bytes) gets what a failing task said. */
static inline int local_run_fn(spw_task_fn fn, const spw_task_arg *args, uint32_t nargs,
                               uint32_t nouts, void **outs, uint64_t *lens, char *err)
{
    local_ctx l = {{&local_api, NULL}, outs, lens, nouts, ""};
    for (uint32_t i = 0; i < nouts; i++) {
        outs[i] = NULL;
        lens[i] = 0;
    }
    int rc = fn(&l.ctx, args, nargs);
    if (err != NULL)
        memcpy(err, l.err, sizeof l.err);
    return rc;
}

/* Loads the plugin at path: its table, with *dl to dlclose, or NULL with *why set. */
static inline const spw_plugin *local_plugin_open(const char *path, void **dl, const char **why)
{
    *dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    spw_plugin_entry entry = *dl != NULL ? (spw_plugin_entry)dlsym(*dl, SPW_PLUGIN_SYMBOL) : NULL;
    if (entry == NULL) {
        *why = dlerror();
        return NULL;
    }
    return entry();
}

/* The plugin's function called name, or NULL. */
static inline spw_task_fn local_plugin_fn(const spw_plugin *pl, const char *name)
{
    for (uint32_t i = 0; i < pl->nfns; i++)
        if (strcmp(pl->fns[i].name, name) == 0)
            return pl->fns[i].fn;
    return NULL;
}

#endif
