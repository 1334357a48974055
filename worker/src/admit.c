/*
 * Byte-based admission of tasks: what an admitted task may hold in the store.
 *
 * A task whose inputs must be got or fetched here (or whose function is known to store its
 * output) is admitted before any of its inputs is pinned, and while admitted it holds a
 * reservation of store bytes: each object it names (an input, or the output it makes, whose id
 * is the task's) counted once in w->adm_reserved however many admitted tasks name it (a table
 * shared by a whole map is counted once). Admission (tasks.c) takes tasks in arrival order
 * while the reservations fit under the capacity less a margin, so the inputs pinned for queued
 * tasks can never fill the store against the output of the one running.
 * Invariant: w->adm_reserved is the sum of `bytes` over w->adm_res, and every entry has as many
 * refs as admitted tasks' arguments and outputs naming it.
 */
#include <stdio.h>
#include <string.h>

#include "worker_int.h"

/* What a function's outputs were (the largest stored one, 0 when all were inline). */
struct wfnout {
    UT_hash_handle hh;
    uint64_t max_out; /* bytes, rounded to the granule */
    char fn[PROTO_MAX_NAME + 1];
};

static uint64_t round_up(const wrk *w, uint64_t n)
{
    uint64_t g = w->opts.store.granule != 0 ? w->opts.store.granule : 4096;
    return n > UINT64_MAX - g ? UINT64_MAX : (n + g - 1) / g * g;
}

uint64_t wrk__admit_capacity(const wrk *w, uint64_t *limit, uint64_t *margin)
{
    ost_stats st;
    ost_stats_get(w->store, &st); /* honours a test's lowered limit */
    uint64_t m = st.capacity / WRK_ADMIT_MARGIN_DIV;
    if (m < WRK_ADMIT_MARGIN_MIN)
        m = WRK_ADMIT_MARGIN_MIN;
    if (m > st.capacity / 2)
        m = st.capacity / 2; /* a store of a few MiB still admits half of itself */
    if (margin != NULL)
        *margin = m;
    if (limit != NULL)
        *limit = st.capacity - m;
    return st.capacity;
}

static wfnout *fn_find(const wrk *w, const char *fn)
{
    wfnout *f = NULL;
    if (w->adm_fns != NULL)
        HASH_FIND_STR(w->adm_fns, fn, f);
    return f;
}

bool wrk__admit_fn_stores(const wrk *w, const char *fn)
{
    const wfnout *f = fn_find(w, fn);
    return f != NULL && f->max_out > 0;
}

static void fn_learn(wrk *w, const char *fn, uint64_t bytes)
{
    wfnout *f = fn_find(w, fn);
    if (f == NULL) {
        f = spw_calloc(SPW_MOD_WORKER, 1, sizeof *f);
        snprintf(f->fn, sizeof f->fn, "%s", fn);
        HASH_ADD_STR(w->adm_fns, fn, f);
    }
    if (bytes > f->max_out)
        f->max_out = bytes;
}

void wrk__admit_learn_inline(wrk *w, const wtask *t)
{
    if (t->admitted && fn_find(w, t->fn) == NULL)
        fn_learn(w, t->fn, 0);
}

/* The store bytes argument a pins: the whole object, even for a view of part of it. */
static uint64_t arg_bytes(const wrk *w, const warg *a)
{
    return round_up(w, a->objsize);
}

/* Whether argument i names the same object as an earlier one of t (counted there). Tasks with
 * very many arguments are not searched: a duplicate among them is counted twice, which only
 * errs on the safe side. */
static bool arg_dup(const wtask *t, uint32_t i)
{
    if (t->nargs > 64)
        return false;
    for (uint32_t k = 0; k < i; k++)
        if (t->args[k].kind != PROTO_ARG_INLINE && spw_id_eq(t->args[k].id, t->args[i].id))
            return true;
    return false;
}

static wres *res_find(const wrk *w, spw_id id)
{
    wres *r = NULL;
    if (w->adm_res != NULL)
        HASH_FIND(hh, w->adm_res, &id, sizeof id, r);
    return r;
}

uint64_t wrk__admit_cost(const wrk *w, const wtask *t, uint64_t *in_bytes, uint64_t *out_est)
{
    uint64_t in = 0, fresh = 0;
    for (uint32_t i = 0; i < t->nargs; i++) {
        const warg *a = &t->args[i];
        if (a->kind == PROTO_ARG_INLINE || arg_dup(t, i))
            continue;
        const wres *r = res_find(w, a->id);
        uint64_t b = r != NULL ? r->bytes : arg_bytes(w, a);
        in += b;
        if (r == NULL)
            fresh += b;
    }
    /* The output: the largest this function stored here so far; a function not seen yet is
     * guessed to make as much as it reads (a map, a sort, a filter make at most that). Either
     * way with WRK_ADMIT_OUT_SLACK more, since outputs of one function vary a little (a sort's
     * bucket), and the room taken for it must hold it. */
    const wfnout *f = fn_find(w, t->fn);
    uint64_t out = f != NULL ? f->max_out : in;
    if (out > 0)
        out = round_up(w, out + out / WRK_ADMIT_OUT_SLACK);
    *in_bytes = in;
    *out_est = out;
    return fresh + out;
}

static void res_ref(wrk *w, spw_id id, uint64_t bytes)
{
    wres *r = res_find(w, id);
    if (r == NULL) {
        r = spw_malloc(SPW_MOD_WORKER, sizeof *r);
        r->id = id;
        r->bytes = bytes;
        r->refs = 0;
        HASH_ADD(hh, w->adm_res, id, sizeof r->id, r);
        w->adm_reserved += bytes;
    }
    r->refs++;
}

static void res_unref(wrk *w, spw_id id)
{
    wres *r = res_find(w, id);
    SPW_ASSERT(r != NULL && r->refs > 0);
    if (--r->refs > 0)
        return;
    w->adm_reserved -= r->bytes;
    HASH_DEL(w->adm_res, r);
    spw_free(r);
}

/* Sets the bytes of an entry (the output's size became known). */
static void res_resize(wrk *w, wres *r, uint64_t bytes)
{
    w->adm_reserved = w->adm_reserved - r->bytes + bytes;
    r->bytes = bytes;
}

void wrk__admit_take(wrk *w, wtask *t, uint64_t out_est)
{
    for (uint32_t i = 0; i < t->nargs; i++) {
        warg *a = &t->args[i];
        if (a->kind == PROTO_ARG_INLINE)
            continue;
        res_ref(w, a->id, arg_bytes(w, a));
        a->reserved = 1;
    }
    res_ref(w, t->id, out_est);
    t->out_reserved = 1;
    t->admitted = 1;
    w->adm_tasks++;
}

void wrk__admit_late(wrk *w, wtask *t)
{
    if (t->admitted)
        return;
    uint64_t in, out;
    wrk__admit_cost(w, t, &in, &out);
    wrk__admit_take(w, t, out);
}

void wrk__admit_release(wrk *w, wtask *t)
{
    if (!t->admitted)
        return;
    for (uint32_t i = 0; i < t->nargs; i++) {
        warg *a = &t->args[i];
        if (a->reserved) {
            res_unref(w, a->id);
            a->reserved = 0;
        }
    }
    if (t->out_reserved) {
        res_unref(w, t->id);
        t->out_reserved = 0;
    }
    t->admitted = 0;
    w->adm_tasks--;
}

uint64_t wrk__admit_pinned(const wrk *w, const wtask *t)
{
    uint64_t in = 0;
    for (uint32_t i = 0; i < t->nargs; i++) {
        const warg *a = &t->args[i];
        if (a->pinned && !arg_dup(t, i))
            in += round_up(w, ost_obj_size(a->obj));
    }
    return in;
}

void wrk__admit_output(wrk *w, wtask *t, uint64_t size)
{
    /* A task of several outputs asks for each in turn: what it holds is their sum, learned as
     * its function's output, and its reservation never shrinks below its estimate meanwhile. */
    t->out_bytes += round_up(w, size);
    uint64_t bytes = t->out_bytes;
    fn_learn(w, t->fn, bytes);
    if (!t->admitted) {
        /* Taken in unaccounted (its function's outputs were not known to be stored): it is
         * accounted from now on, so that what is admitted next leaves room for it. */
        t->admitted = 1;
        w->adm_tasks++;
    }
    if (!t->out_reserved) {
        res_ref(w, t->id, bytes);
        t->out_reserved = 1;
    }
    wres *r = res_find(w, t->id);
    if (t->nouts > 1 && r->bytes > bytes)
        return;
    if (r->bytes != bytes)
        res_resize(w, r, bytes);
}

void wrk__admit_free_all(wrk *w)
{
    wres *r, *rt;
    HASH_ITER(hh, w->adm_res, r, rt)
    {
        HASH_DEL(w->adm_res, r);
        spw_free(r);
    }
    wfnout *f, *ft;
    HASH_ITER(hh, w->adm_fns, f, ft)
    {
        HASH_DEL(w->adm_fns, f);
        spw_free(f);
    }
    w->adm_reserved = 0;
    w->adm_tasks = 0;
}
