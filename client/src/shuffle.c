/*
 * libspillway shuffles: N map tasks of P outputs each and P reduce tasks, reduce j taking output
 * j ("piece" j) of every map, with merges in between when a partition has too many pieces.
 *
 * The plan is the same for every partition: level 0 is the N map outputs in map order; while a
 * level has more pieces than the fan-in (or, where the pieces' sizes can be estimated, more
 * bytes than the merge budget), runs of consecutive pieces are grouped (by count, and by bytes
 * while that still groups some) and each group of two or more becomes one merge task per
 * partition, a group of one passing through. Every level has fewer pieces than the one before,
 * so the plan ends; its top has at most the fan-in. Tasks are added level by level, groups in
 * map order, so a merge is ready as soon as its maps are done and runs (deepest first) before
 * the maps after them. Only the map tasks' ids are kept for level 0 (piece (i, j) is
 * spw_id_output(map i, j)); higher levels keep their pieces' references.
 */
#include <string.h>

#include "client_int.h"

/* Most pieces a reduce or merge task takes when the caller sets no fan-in: a task record
 * carrying that many pieces, each up to the inline limit, stays a quarter of a frame. */
#define SHUFFLE_FAN_IN_MAX 256u

/* A run of pieces [start, end) of the level below. */
typedef struct sgroup {
    size_t start, end;
} sgroup;

typedef struct slevel {
    sgroup *groups;
    size_t ngroups;
    spillway_ref *pieces; /* ngroups x P: piece of group g for partition j at g * P + j */
} slevel;

/* The smallest worker store, from the scheduler's STATUS (0: no worker). */
static void status_enc(proto_enc *e, spw_buf *out, uint64_t req, void *arg)
{
    (void)arg;
    proto_enc_status_req(e, out, req);
}

static void status_reply(const proto_msg *m, void *arg)
{
    uint64_t *smallest = arg;
    if (m->type != PROTO_STATUS)
        return;
    const proto_val *ws = &m->f[F_STATUS_WORKERS];
    for (uint32_t i = 0; i < ws->arr.n; i++) {
        const proto_val *st = &PROTO_REC(ws, i)[R_SWORKER_STATS];
        uint64_t cap = st->arr.n > PROTO_STAT_CAPACITY ? st->arr.v[PROTO_STAT_CAPACITY].u : 0;
        if (cap > 0 && (*smallest == 0 || cap < *smallest))
            *smallest = cap;
    }
}

/* Estimated bytes of input a: a view's or value's length, an object's size where this client
 * knows it; 0 when unknown (an output not made yet). */
static uint64_t input_bytes(spillway *c, const spillway_arg *a)
{
    if (a->kind != SPILLWAY_ARG_REF)
        return a->len;
    handle *h = spillway__handle_find(c, (spw_id){a->ref.hi, a->ref.lo});
    return h != NULL && h->state == H_DONE ? h->size : 0;
}

/* Groups n pieces of estimated sizes sz into runs of at most fan_in, and of at most budget
 * bytes (0: any) where a run of two fits; returns the number of groups. */
static size_t group_level(const uint64_t *sz, size_t n, uint32_t fan_in, uint64_t budget,
                          sgroup *out)
{
    /* Balanced by count: ceil(n / fan_in) runs, whose lengths differ by one at most. */
    size_t runs = (n + fan_in - 1) / fan_in, ng = 0;
    for (size_t start = 0; start < n;) {
        size_t per = n / runs + (ng < n % runs), end = start + 1;
        uint64_t bytes = sz[start];
        while (end < n && end - start < per && (budget == 0 || bytes + sz[end] <= budget))
            bytes += sz[end++];
        out[ng++] = (sgroup){start, end};
        start = end;
    }
    return ng;
}

static spillway_ref piece_at(const slevel *below, const spw_id *maps, uint32_t p, size_t i,
                             uint32_t j)
{
    if (below != NULL)
        return below->pieces[i * p + j];
    spw_id id = spw_id_output(maps[i], j);
    return (spillway_ref){id.hi, id.lo};
}

static void levels_free(slevel *lv, size_t n)
{
    for (size_t k = 0; k < n; k++) {
        spw_free(lv[k].groups);
        spw_free(lv[k].pieces);
    }
    spw_free(lv);
}

/* Adds the task of a group of pieces of partition j: fn(pieces..., rshared...); args has room
 * for the largest group and the shared arguments. */
static int add_group(spillway_graph *g, const char *fn, const slevel *below, const spw_id *maps,
                     uint32_t p, sgroup gr, uint32_t j, const spillway_shuffle_opts *o,
                     spillway_arg *args, unsigned flags, spillway_ref *out, const char *site)
{
    size_t k = gr.end - gr.start;
    for (size_t i = 0; i < k; i++)
        args[i] = spillway_arg_ref(piece_at(below, maps, p, gr.start + i, j));
    for (size_t i = 0; i < o->nreduce_shared; i++)
        args[k + i] = o->reduce_shared[i];
    return spillway_task_at(g, fn, args, k + o->nreduce_shared, flags, out, site);
}

/* The fan-in and merge budget this shuffle uses. */
static void shuffle_bounds(spillway *c, const spillway_shuffle_opts *o, uint64_t known,
                           uint32_t *fan_in, uint64_t *budget)
{
    uint32_t f = o->fan_in;
    if (f == 0) {
        uint64_t per = c->inline_limit > 0 ? spillway__max_frame(c) / 4 / c->inline_limit : 0;
        f = per == 0 || per > SHUFFLE_FAN_IN_MAX ? SHUFFLE_FAN_IN_MAX : (uint32_t)per;
    }
    *fan_in = f < 2 ? 2 : f;
    *budget = o->merge_bytes;
    if (*budget == 0 && known > 0) {
        uint64_t smallest = 0;
        if (spillway__request(c, status_enc, status_reply, &smallest, PROTO_STATUS, 10000) == 0)
            *budget = smallest / 4;
    }
}

/* Plans the merge levels over n pieces of estimated sizes sz (overwritten): levels until one
 * has at most fan_in pieces and, where sizes are known, fits the budget or cannot be grouped
 * further under it. *widest: the most pieces a task of the plan takes. */
static int plan_levels(uint64_t *sz, size_t n, uint32_t fan_in, uint64_t budget, slevel **out,
                       size_t *nout, size_t *widest)
{
    slevel *lv = NULL;
    size_t nlv = 0, width = n;
    *widest = 1;
    while (width > 1) {
        uint64_t total = 0;
        for (size_t i = 0; i < width; i++)
            total += sz[i];
        bool by_count = width > fan_in, by_bytes = budget > 0 && total > budget;
        if (!by_count && !by_bytes)
            break;
        sgroup *gr = spw_try_malloc(SPW_MOD_CLIENT, width * sizeof *gr);
        slevel *nl = gr != NULL ? spw_try_realloc(SPW_MOD_CLIENT, lv, (nlv + 1) * sizeof *lv)
                                : NULL;
        if (nl == NULL) {
            spw_free(gr);
            levels_free(lv, nlv);
            return SPW_ENOMEM;
        }
        lv = nl;
        size_t ng = group_level(sz, width, fan_in, budget, gr);
        if (ng == width && by_count)
            ng = group_level(sz, width, fan_in, 0, gr); /* the count must come down */
        if (ng == width) {
            spw_free(gr); /* no two pieces fit one merge: the reduces take them as they are */
            break;
        }
        for (size_t k = 0; k < ng; k++) {
            uint64_t b = 0;
            for (size_t i = gr[k].start; i < gr[k].end; i++)
                b += sz[i];
            sz[k] = b;
            if (gr[k].end - gr[k].start > *widest)
                *widest = gr[k].end - gr[k].start;
        }
        lv[nlv++] = (slevel){gr, ng, NULL};
        width = ng;
    }
    if (width > *widest)
        *widest = width;
    *out = lv;
    *nout = nlv;
    return 0;
}

/* Adds the merges of every level and the reduces. */
static int add_merges_reduces(spillway_graph *g, const char *merge_fn, const char *reduce_fn,
                              const spw_id *maps, size_t n, slevel *lv, size_t nlv,
                              const spillway_shuffle_opts *o, spillway_arg *args, unsigned flags,
                              spillway_ref *results, const char *site)
{
    uint32_t p = o->partitions;
    const slevel *below = NULL;
    size_t width = n;
    for (size_t k = 0; k < nlv; k++) {
        slevel *l = &lv[k];
        if (l->ngroups > SIZE_MAX / sizeof(spillway_ref) / p)
            return SPW_ENOMEM;
        l->pieces = spw_try_malloc(SPW_MOD_CLIENT, l->ngroups * p * sizeof *l->pieces);
        if (l->pieces == NULL)
            return SPW_ENOMEM;
        for (size_t gi = 0; gi < l->ngroups; gi++) {
            for (uint32_t j = 0; j < p; j++) {
                spillway_ref *out = &l->pieces[gi * p + j];
                if (l->groups[gi].end - l->groups[gi].start == 1) {
                    *out = piece_at(below, maps, p, l->groups[gi].start, j); /* passes through */
                    continue;
                }
                int rc = add_group(g, merge_fn, below, maps, p, l->groups[gi], j, o, args, 0,
                                   out, site);
                if (rc != 0)
                    return rc;
            }
        }
        below = l;
        width = l->ngroups;
    }
    for (uint32_t j = 0; j < p; j++) {
        int rc = add_group(g, reduce_fn, below, maps, p, (sgroup){0, width}, j, o, args, flags,
                           &results[j], site);
        if (rc != 0)
            return rc;
    }
    return 0;
}

/* Whether fn is a function name a task takes. */
static bool fn_ok(const char *fn)
{
    return fn != NULL && fn[0] != '\0' && strlen(fn) <= PROTO_MAX_NAME;
}

/* Whether every argument is of a kind a task takes (checked before any task is added, so that
 * a bad one leaves the graph as it was). */
static bool args_ok(const spillway_arg *a, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (a[i].kind < SPILLWAY_ARG_BYTES || a[i].kind > SPILLWAY_ARG_VIEW ||
            (a[i].kind == SPILLWAY_ARG_BYTES && a[i].data == NULL && a[i].len > 8))
            return false;
    return true;
}

static int graph_shuffle__impl(spillway_graph *g, const char *map_fn, const spillway_arg *inputs,
                               size_t n, const spillway_arg *shared, size_t nshared,
                               const char *reduce_fn, const spillway_shuffle_opts *o,
                               unsigned flags, spillway_ref *results, const char *site)
{
    if (g == NULL || !fn_ok(map_fn) || !fn_ok(reduce_fn) || o == NULL || results == NULL ||
        inputs == NULL || n == 0 || o->partitions == 0 || (shared == NULL && nshared > 0) ||
        nshared > 1000 || (o->reduce_shared == NULL && o->nreduce_shared > 0) ||
        o->nreduce_shared > 1000 || (o->merge != NULL && !fn_ok(o->merge)) ||
        !args_ok(inputs, n) || !args_ok(shared, nshared) ||
        !args_ok(o->reduce_shared, o->nreduce_shared))
        return SPW_EINVAL;
    spillway *c = spillway__graph_client(g);
    uint32_t p = o->partitions;
    if (p > SPILLWAY_MAX_OUTPUTS) {
        spillway__set_err(c, "shuffle of %u partitions: over the %u outputs a task may have", p,
                          SPILLWAY_MAX_OUTPUTS);
        return SPW_ELIMIT;
    }
    if (n > SIZE_MAX / sizeof(spw_id))
        return SPW_ENOMEM;
    uint64_t *sz = spw_try_malloc(SPW_MOD_CLIENT, n * sizeof *sz);
    spw_id *maps = spw_try_malloc(SPW_MOD_CLIENT, n * sizeof *maps);
    spillway_ref *outs = spw_try_malloc(SPW_MOD_CLIENT, p * sizeof *outs);
    if (sz == NULL || maps == NULL || outs == NULL) {
        spw_free(sz);
        spw_free(maps);
        spw_free(outs);
        return SPW_ENOMEM;
    }
    /* Level 0's pieces: an input's bytes over P where known (unknown ones count nothing). */
    uint64_t known = 0;
    for (size_t i = 0; i < n; i++) {
        sz[i] = input_bytes(c, &inputs[i]) / p;
        known += sz[i];
    }
    uint32_t fan_in;
    uint64_t budget;
    shuffle_bounds(c, o, known, &fan_in, &budget);
    slevel *lv = NULL;
    size_t nlv = 0, widest = 1;
    int rc = plan_levels(sz, n, fan_in, budget, &lv, &nlv, &widest);
    spw_free(sz);
    size_t nargs = (widest > nshared + 1 ? widest : nshared + 1) + o->nreduce_shared;
    spillway_arg *args = rc == 0 ? spw_try_malloc(SPW_MOD_CLIENT, nargs * sizeof *args) : NULL;
    if (rc == 0 && args == NULL)
        rc = SPW_ENOMEM;
    if (rc == 0)
        spillway__graph_uncap_bytes(g);
    /* The maps: map_fn(input i, shared...), P outputs each. */
    for (size_t i = 0; i < n && rc == 0; i++) {
        args[0] = inputs[i];
        for (size_t k = 0; k < nshared; k++)
            args[k + 1] = shared[k];
        rc = spillway_task_n_at(g, map_fn, args, nshared + 1, 0, p, outs, site);
        maps[i] = (spw_id){outs[0].hi, outs[0].lo};
    }
    spillway_ref *res = rc == 0 ? spw_try_malloc(SPW_MOD_CLIENT, p * sizeof *res) : NULL;
    if (rc == 0 && res == NULL)
        rc = SPW_ENOMEM;
    if (rc == 0)
        rc = add_merges_reduces(g, o->merge != NULL ? o->merge : reduce_fn, reduce_fn, maps, n, lv,
                                nlv, o, args, flags, res, site);
    if (rc == 0)
        memcpy(results, res, p * sizeof *res);
    spw_free(res);
    spw_free(args);
    spw_free(outs);
    spw_free(maps);
    levels_free(lv, nlv);
    return rc;
}

static int shuffle__impl(spillway *c, const char *map_fn, const spillway_arg *inputs, size_t n,
                         const spillway_arg *shared, size_t nshared, const char *reduce_fn,
                         const spillway_shuffle_opts *o, spillway_ref *results, const char *site)
{
    if (c == NULL || o == NULL)
        return SPW_EINVAL;
    spillway_graph *g = spillway_graph_new(c);
    if (g == NULL)
        return SPW_ENOMEM;
    spillway_graph_limits(g, o->max_tasks, o->max_bytes != 0 ? o->max_bytes : UINT64_MAX);
    int rc = spillway_graph_shuffle_at(g, map_fn, inputs, n, shared, nshared, reduce_fn, o,
                                       SPILLWAY_KEEP, results, site);
    if (rc == 0 && (rc = spillway_submit_at(g, site)) != 0) {
        /* The kept results reach no caller: given back here (see spillway_map_blocks). */
        for (uint32_t j = 0; j < o->partitions; j++) {
            handle *h = spillway__handle_find(c, (spw_id){results[j].hi, results[j].lo});
            if (h != NULL)
                spillway__handle_release(c, h);
        }
    }
    spillway_graph_free(g);
    return rc;
}

/* ------------------------------------------------------- public entry points */

int spillway_graph_shuffle_at(spillway_graph *g, const char *map_fn, const spillway_arg *inputs,
                              size_t ninputs, const spillway_arg *shared, size_t nshared,
                              const char *reduce_fn, const spillway_shuffle_opts *opts,
                              unsigned flags, spillway_ref *results, const char *site)
{
    spillway *c_ = g != NULL ? spillway__graph_client(g) : NULL;
    spillway__enter(c_);
    return spillway__leave(c_,
                           graph_shuffle__impl(g, map_fn, inputs, ninputs, shared, nshared,
                                               reduce_fn, opts, flags, results, site),
                           "spillway_graph_shuffle_at");
}

int spillway_shuffle_at(spillway *c, const char *map_fn, const spillway_arg *inputs,
                        size_t ninputs, const spillway_arg *shared, size_t nshared,
                        const char *reduce_fn, const spillway_shuffle_opts *opts,
                        spillway_ref *results, const char *site)
{
    spillway__enter(c);
    return spillway__leave(c,
                           shuffle__impl(c, map_fn, inputs, ninputs, shared, nshared, reduce_fn,
                                         opts, results, site),
                           "spillway_shuffle_at");
}
