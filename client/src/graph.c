/*
 * libspillway graphs: tasks are encoded as SUBMIT records as they are added, cut into frames
 * well under the scheduler's frame limit, and sent together by spillway_submit. A kept task's
 * reference is tracked from the moment it is sent, since its result may arrive before the
 * scheduler has acknowledged the end of a large graph.
 */
#include <stdio.h>
#include <string.h>

#include <xxhash.h>

#include "client_int.h"

struct spillway_graph {
    spillway *c;
    uint64_t id;       /* graph id, also the request id of its frames */
    spw_buf frames;    /* finished SUBMIT frames */
    uint32_t nframes;  /* in frames */
    spw_buf recs;      /* task records of the frame being built */
    uint32_t nrecs;
    uint64_t max_tasks, max_bytes;
    spw_id *kept;      /* kept tasks, tracked once sent */
    size_t nkept, capkept;
    uint64_t ntasks;
    char place[PROTO_MAX_NAME + 1]; /* worker name for the tasks added next, or "" */
    spw_id *autos;     /* automatic puts this graph holds until it is submitted */
    size_t nautos, capautos;
    uint64_t embedded; /* bytes of large arguments embedded (no_auto_put) */
};

/* Drops the graph's hold on its automatic puts; the last graph using one releases it. */
static void autos_release(spillway_graph *g)
{
    spillway *c = g->c;
    for (size_t i = 0; i < g->nautos; i++) {
        handle *h = spillway__handle_find(c, g->autos[i]);
        if (h != NULL && h->graph_uses > 0 && --h->graph_uses == 0)
            spillway__handle_release(c, h); /* not spillway_release: submit's error stays */
    }
    g->nautos = 0;
}

/* Puts a large argument once, named by its content: the same bytes are one object. */
static int auto_put(spillway_graph *g, const void *data, size_t len, const char *site,
                    spw_id *out)
{
    spillway *c = g->c;
    XXH128_hash_t hh = XXH3_128bits(data, len);
    spw_id id = {hh.high64, hh.low64 | 1};
    handle *h = spillway__handle_find(c, id);
    if (h == NULL) {
        int rc = spillway__put_object(c, id, data, len, PROTO_PUT_CONTENT_ID, site);
        if (rc != 0)
            return rc;
        h = spillway__handle_add(c, id, H_PUT);
        h->state = H_DONE;
        h->size = len;
    }
    for (size_t i = 0; i < g->nautos; i++)
        if (spw_id_eq(g->autos[i], id)) {
            *out = id;
            return 0;
        }
    if (g->nautos == g->capautos) {
        g->capautos = g->capautos ? g->capautos * 2 : 8;
        g->autos = spw_realloc(SPW_MOD_CLIENT, g->autos, g->capautos * sizeof *g->autos);
    }
    g->autos[g->nautos++] = id;
    h->graph_uses++;
    *out = id;
    return 0;
}

spillway_graph *spillway_graph_new(spillway *c)
{
    if (c == NULL)
        return NULL;
    spillway_graph *g = spw_try_malloc(SPW_MOD_CLIENT, sizeof *g);
    if (g == NULL)
        return NULL;
    memset(g, 0, sizeof *g);
    g->c = c;
    g->id = ++c->next_req;
    return g;
}

void spillway_graph_free(spillway_graph *g)
{
    if (g == NULL)
        return;
    autos_release(g);
    spw_free(g->autos);
    spw_buf_release(&g->frames);
    spw_buf_release(&g->recs);
    spw_free(g->kept);
    spw_free(g);
}

static int graph_place__impl(spillway_graph *g, const char *worker)
{
    if (g == NULL)
        return SPW_EINVAL;
    if (worker != NULL && strlen(worker) > PROTO_MAX_NAME)
        return spillway__refuse(g->c, SPW_EINVAL, "spillway_graph_place",
                                "worker is %zu bytes; at most %u", strlen(worker), PROTO_MAX_NAME);
    snprintf(g->place, sizeof g->place, "%s", worker != NULL ? worker : "");
    return 0;
}

static int graph_limits__impl(spillway_graph *g, uint64_t max_tasks, uint64_t max_bytes)
{
    if (g == NULL)
        return SPW_EINVAL;
    g->max_tasks = max_tasks;
    g->max_bytes = max_bytes;
    return 0;
}

spillway *spillway__graph_client(const spillway_graph *g)
{
    return g->c;
}

void spillway__graph_uncap_bytes(spillway_graph *g)
{
    if (g->max_bytes == 0)
        g->max_bytes = UINT64_MAX;
}

/* SUBMIT frames are cut past 256 KiB of records (a record larger than that goes alone). The
 * scheduler decodes a frame whole into its connection's zone, several times the frame's size
 * for tiny tasks, so the frame size bounds the scheduler's transient memory per client, and
 * smaller frames cost no more work per task. */
#define SUBMIT_FRAME_BUDGET (256u << 10)
static uint32_t frame_budget(const spillway *c)
{
    uint32_t mf = spillway__max_frame(c);
    return mf / 2 < SUBMIT_FRAME_BUDGET ? mf / 2 : SUBMIT_FRAME_BUDGET;
}

/* A SUBMIT frame's bytes besides its records (type, request, the other fields, the site of up
 * to 255 bytes: ~330 at most). */
#define SUBMIT_FRAME_HEAD 512u
/* The most bytes of records one SUBMIT frame may carry: the scheduler closes the connection at
 * a frame over its --max-frame (never less than 4096, auth.c). */
static size_t frame_room(const spillway *c)
{
    return spillway__max_frame(c) - SUBMIT_FRAME_HEAD;
}

/* Wraps the pending records into a SUBMIT frame; the last one names the submit's call site. */
static void cut_frame(spillway_graph *g, bool end, const char *site)
{
    proto_enc e;
    proto_enc_submit(&e, &g->frames, g->id,
                     &(proto_submit_msg){.graph = g->id,
                                         .flags = end ? PROTO_SUBMIT_END : 0,
                                         .max_tasks = g->max_tasks,
                                         .max_bytes = g->max_bytes,
                                         .tasks = {.n = g->nrecs, .pre = &g->recs},
                                         .site = site,
                                         .omit_site = !end});
    proto_enc_end(&e, UINT32_MAX);
    g->nframes++;
    spw_buf_reset(&g->recs);
    g->nrecs = 0;
}

/* A task's argument as the client sends it: bytes travel inline (so does a small value held
 * here, or a view of one), objects by id. r->obj points at *rid. */
static void arg_rec(spillway *c, const spillway_arg *a, spw_id *rid, proto_arg_rec *r)
{
    *r = (proto_arg_rec){.kind = PROTO_ARG_INLINE};
    if (a->kind == SPILLWAY_ARG_BYTES) {
        r->value = (proto_bytes){a->data != NULL ? a->data : a->small, a->len};
        return;
    }
    *rid = (spw_id){a->ref.hi, a->ref.lo};
    handle *h = spillway__handle_find(c, *rid);
    if (h != NULL && h->kind == H_SMALL) {
        /* A small value lives here: it travels with the task. */
        if (a->kind == SPILLWAY_ARG_VIEW)
            r->value = (proto_bytes){h->inl + a->off, a->len};
        else
            r->value = (proto_bytes){h->inl, h->size};
        if (r->value.ptr == NULL)
            r->value.ptr = ""; /* empty, not nil */
        return;
    }
    bool view = a->kind == SPILLWAY_ARG_VIEW;
    *r = (proto_arg_rec){.kind = view ? PROTO_ARG_VIEW : PROTO_ARG_OBJ,
                         .obj = rid,
                         .off = view ? a->off : 0,
                         .len = view ? a->len : 0};
}

_Static_assert(SPILLWAY_MAX_OUTPUTS == SPW_TASK_OUTPUTS_MAX, "one limit on a task's outputs");
#define TASK_MAX_ARGS 65535u /* a task's arguments at most */

static int task_at__impl(spillway_graph *g, const char *me, const char *fn,
                         const spillway_arg *args, size_t nargs, unsigned flags, uint32_t nouts,
                         spillway_ref *out, const char *site);

/* An argument naming a chunked object this client put (id, size bytes in chunks of 1 << shift)
 * becomes an argument naming its chunks, which are objects of their own: the chunk its range
 * lies in (whole, or a view of it), or, for a range across chunks or the whole object, the
 * output of a `concat` task over views of the chunks it covers, added to the graph first: those
 * bytes are gathered, once, in one store. Argument i of the task being added by the public call
 * me, for errors. */
static int chunk_arg(spillway_graph *g, const char *me, spw_id id, uint64_t size, unsigned shift,
                     const spillway_arg *a, size_t i, const char *site, spillway_arg *out)
{
    spillway *c = g->c;
    uint64_t off = a->kind == SPILLWAY_ARG_VIEW ? a->off : 0;
    uint64_t len = a->kind == SPILLWAY_ARG_VIEW ? a->len : size;
    if (off > size || len > size - off)
        return spillway__refuse(c, SPW_EINVAL, me,
                                "args[%zu] is a view of %llu bytes at %llu, outside its "
                                "%llu-byte object",
                                i, (unsigned long long)len, (unsigned long long)off,
                                (unsigned long long)size);
    uint64_t cs = (uint64_t)1 << shift, nchunks = (size + cs - 1) / cs;
    uint64_t first = off / cs, last = len > 0 ? (off + len - 1) / cs : first;
    if (first >= nchunks)
        first = last = nchunks - 1; /* an empty view at the very end */
    if (first == last) {
        spillway_ref r = {id.hi, id.lo | (1 + first)};
        uint64_t at = off - first * cs, clen = size - first * cs < cs ? size - first * cs : cs;
        *out = at == 0 && len == clen ? spillway_arg_ref(r) : spillway_arg_view(r, at, len);
        return 0;
    }
    size_t n = (size_t)(last - first + 1);
    spillway_arg *parts = spw_try_malloc(SPW_MOD_CLIENT, n * sizeof *parts);
    if (parts == NULL)
        return SPW_ENOMEM;
    for (size_t k = 0; k < n; k++) {
        uint64_t cb = (first + k) * cs, ce = cb + cs < size ? cb + cs : size;
        uint64_t b = off > cb ? off : cb, e = off + len < ce ? off + len : ce;
        parts[k] = spillway_arg_view((spillway_ref){id.hi, id.lo | (1 + first + k)}, b - cb, e - b);
    }
    spillway_ref r;
    int rc = task_at__impl(g, me, "concat", parts, n, 0, 1, &r, site);
    spw_free(parts);
    if (rc == 0)
        *out = spillway_arg_ref(r);
    return rc;
}

/* A task of nouts outputs; out: nouts references, or NULL. me: the public call, for errmsg. */
static int task_at__impl(spillway_graph *g, const char *me, const char *fn,
                         const spillway_arg *args, size_t nargs, unsigned flags, uint32_t nouts,
                         spillway_ref *out, const char *site)
{
    if (g == NULL)
        return SPW_EINVAL;
    spillway *c = g->c;
    size_t fnlen = fn != NULL ? strlen(fn) : 0;
    if (fnlen == 0)
        return spillway__refuse(c, SPW_EINVAL, me, "fn is %s; a name of 1 to %u bytes",
                                fn == NULL ? "NULL" : "empty", PROTO_MAX_NAME);
    if (fnlen > PROTO_MAX_NAME)
        return spillway__refuse(c, SPW_EINVAL, me, "fn is %zu bytes; at most %u", fnlen,
                                PROTO_MAX_NAME);
    if (nargs > TASK_MAX_ARGS)
        return spillway__refuse(c, SPW_EINVAL, me, "nargs is %zu; at most %u", nargs,
                                TASK_MAX_ARGS);
    if (args == NULL && nargs > 0)
        return spillway__refuse(c, SPW_EINVAL, me,
                                "args is NULL with nargs %zu; nargs must be 0 without args", nargs);
    if (nouts == 0)
        return spillway__refuse(c, SPW_EINVAL, me, "k is 0; a task has at least one output");
    if (nouts > SPILLWAY_MAX_OUTPUTS)
        return spillway__refuse(c, SPW_ELIMIT, me, "k is %u outputs; at most %u (task %llu, %s)",
                                nouts, SPILLWAY_MAX_OUTPUTS, (unsigned long long)g->ntasks, fn);
    /* Validate before encoding anything, so a refusal leaves the graph as it was. */
    for (size_t i = 0; i < nargs; i++) {
        const spillway_arg *a = &args[i];
        if (a->kind == SPILLWAY_ARG_BYTES) {
            if (a->data == NULL && a->len > sizeof a->small)
                return spillway__refuse(c, SPW_EINVAL, me,
                                        "args[%zu] is bytes without data, len %zu; at most %zu "
                                        "travel in the argument itself",
                                        i, a->len, sizeof a->small);
        } else if (a->kind == SPILLWAY_ARG_REF || a->kind == SPILLWAY_ARG_VIEW) {
            handle *h = spillway__handle_find(c, (spw_id){a->ref.hi, a->ref.lo});
            if (a->kind == SPILLWAY_ARG_VIEW && h != NULL && h->kind == H_SMALL &&
                (a->off > h->size || a->len > h->size - a->off))
                return spillway__refuse(c, SPW_EINVAL, me,
                                        "args[%zu] is a view of %zu bytes at %llu, outside its "
                                        "%llu-byte value",
                                        i, a->len, (unsigned long long)a->off,
                                        (unsigned long long)h->size);
        } else {
            return spillway__refuse(c, SPW_EINVAL, me,
                                    "args[%zu] has kind %d; 0 (bytes), 1 (ref) or 2 (view)", i,
                                    a->kind);
        }
    }
    /* Large values go to a store once and are referred to, never embedded per task. */
    uint64_t embedded = g->embedded;
    spillway_arg argv_local[16];
    spillway_arg *av = nargs <= 16 ? argv_local : spw_malloc(SPW_MOD_CLIENT, nargs * sizeof *av);
    for (size_t i = 0; i < nargs; i++) {
        av[i] = args[i];
        if (args[i].kind != SPILLWAY_ARG_BYTES) {
            handle *h = spillway__handle_find(c, (spw_id){args[i].ref.hi, args[i].ref.lo});
            if (h == NULL || h->chunk_shift == 0)
                continue;
            int rc = chunk_arg(g, me, h->id, h->size, h->chunk_shift, &args[i], i, site, &av[i]);
            if (rc != 0) {
                if (av != argv_local)
                    spw_free(av);
                return rc;
            }
            continue;
        }
        if (args[i].len <= c->inline_limit)
            continue;
        if (!c->auto_put) {
            g->embedded += args[i].len;
            char sz[16];
            spw_log(SPW_LOG_WARN,
                    "task %llu (%s, %s) embeds a %s argument: it is copied into the task's "
                    "message and every worker running it; put it once with spillway_put, or "
                    "leave automatic puts on",
                    (unsigned long long)g->ntasks, fn, site != NULL ? site : "?",
                    spw_size_fmt(args[i].len, sz, sizeof sz));
            continue;
        }
        spw_id aid;
        int rc = auto_put(g, args[i].data != NULL ? args[i].data : args[i].small, args[i].len,
                          site != NULL ? site : "", &aid);
        if (rc != 0) {
            if (av != argv_local)
                spw_free(av);
            return rc;
        }
        av[i] = spillway_arg_ref((spillway_ref){aid.hi, aid.lo});
    }
    args = av;
    /* The arguments' records, and the ids they point to, beside the values (one allocation
     * for both when there are more than 16). */
    proto_arg_rec recs_local[16];
    spw_id rids_local[16];
    proto_arg_rec *recs = recs_local;
    spw_id *rids = rids_local;
    if (nargs > 16) {
        recs = spw_malloc(SPW_MOD_CLIENT, nargs * (sizeof *recs + sizeof *rids));
        rids = (spw_id *)(recs + nargs);
    }
    for (size_t i = 0; i < nargs; i++)
        arg_rec(c, &args[i], &rids[i], &recs[i]);
    spw_id id = spillway__new_id(c);
    size_t before = g->recs.len;
    spillway__put_task_rec(&g->recs,
                           &(proto_task_rec){.id = id,
                                             .fn = fn,
                                             .args = {.n = (uint32_t)nargs, .v = recs},
                                             .flags = flags & SPILLWAY_KEEP ? PROTO_TASK_KEEP : 0,
                                             .site = site,
                                             .worker = g->place,
                                             .omit_worker = g->place[0] == '\0' && nouts <= 1,
                                             .nouts = nouts,
                                             .omit_nouts = nouts <= 1});
    if (recs != recs_local)
        spw_free(recs);
    size_t rec_len = g->recs.len - before;
    if (rec_len > frame_room(c)) {
        /* No frame the scheduler takes could carry it. */
        g->recs.len = before;
        g->embedded = embedded;
        if (av != argv_local)
            spw_free(av);
        spillway__set_err(c,
                          "task %llu (%s): its record of %zu bytes, with the values it carries, "
                          "is over the scheduler's frame limit of %u bytes (--max-frame); pass "
                          "large values as objects",
                          (unsigned long long)g->ntasks, fn, rec_len, spillway__max_frame(c));
        return SPW_EFRAMESIZE;
    }
    if (before > 0 && g->recs.len > frame_room(c)) {
        /* It fits alone, not beside the records before it: those go in a frame of their own. */
        spw_buf rec = {0};
        spw_buf_append(&rec, g->recs.data + before, rec_len);
        g->recs.len = before;
        cut_frame(g, false, NULL);
        spw_buf_append(&g->recs, rec.data, rec_len);
        spw_buf_release(&rec);
    }
    g->nrecs++;
    g->ntasks++;
    for (uint32_t i = 0; (flags & SPILLWAY_KEEP) && i < nouts; i++) {
        if (g->nkept == g->capkept) {
            g->capkept = g->capkept ? g->capkept * 2 : 64;
            g->kept = spw_realloc(SPW_MOD_CLIENT, g->kept, g->capkept * sizeof *g->kept);
        }
        g->kept[g->nkept++] = spw_id_output(id, i);
    }
    if (g->recs.len > frame_budget(c))
        cut_frame(g, false, NULL);
    for (uint32_t i = 0; out != NULL && i < nouts; i++) {
        spw_id oid = spw_id_output(id, i);
        out[i] = (spillway_ref){oid.hi, oid.lo};
    }
    if (av != argv_local)
        spw_free(av);
    return 0;
}

/* The function behind the macro, for callers (and other languages) that call it by address. */
int(spillway_submit)(spillway_graph *g)
{
    return spillway_submit_at(g, NULL);
}

uint64_t spillway_graph_id(const spillway_graph *g)
{
    return g != NULL ? g->id : 0;
}

static int submit_at__impl(spillway_graph *g, const char *site)
{
    if (g == NULL)
        return SPW_EINVAL;
    spillway *c = g->c;
    if (spillway__connected(c) != 0)
        return SPW_ECLOSED;
    cut_frame(g, true, site);
    for (size_t i = 0; i < g->nkept; i++)
        spillway__handle_add(c, g->kept[i], H_TASK);
    spillway__call_begin(c, PROTO_SUBMIT_ACK);
    c->call.req = g->id;
    c->call.errors_then_ack = true;
    /* The graph's frames go out from its own buffer, kept until the answer (they go out again
     * after a resume): a copy into the output queue would write several MB of fresh pages for
     * a large graph. */
    int rc = spillway__send_submit(c, g->frames.data, g->frames.len, g->nframes);
    g->frames = (spw_buf){0};
    g->nframes = 0;
    g->nkept = 0; /* tracked by the connection now */
    if (rc == 0)
        rc = spillway__call_wait(c, -1);
    if (g->embedded > 0) {
        char sz[16];
        spw_log(SPW_LOG_WARN, "graph of %llu tasks carried %s of embedded arguments",
                (unsigned long long)g->ntasks, spw_size_fmt(g->embedded, sz, sizeof sz));
    }
    /* The tasks hold their own references now. */
    autos_release(g);
    return rc;
}

#define MAP_MAX_SHARED 1000u /* shared arguments of a map at most */

/* map_blocks over inputs[0..ninputs) as one graph (spillway_map_blocks_list); me: the public
 * call, for errmsg. */
static int map_blocks_list_at__impl(spillway *c, const char *me, const char *fn,
                                    const spillway_ref *inputs, size_t ninputs,
                                    const spillway_arg *shared, size_t nshared,
                                    const spillway_map_opts *o, spillway_ref **results,
                                    size_t *nresults, const char *site)
{
    if (c == NULL || fn == NULL || o == NULL || results == NULL || nresults == NULL ||
        inputs == NULL)
        return spillway__refuse(c, SPW_EINVAL, me, "%s is NULL",
                                fn == NULL         ? "fn"
                                : o == NULL        ? "o"
                                : results == NULL  ? "results"
                                : nresults == NULL ? "nresults"
                                                   : "inputs");
    if (ninputs == 0)
        return spillway__refuse(c, SPW_EINVAL, me, "ninputs is 0; at least 1");
    if (o->block_size == 0 && o->nblocks == 0)
        return spillway__refuse(c, SPW_EINVAL, me,
                                "o->block_size and o->nblocks are 0; one of them must be set");
    if (nshared > MAP_MAX_SHARED)
        return spillway__refuse(c, SPW_EINVAL, me, "nshared is %zu; at most %u", nshared,
                                MAP_MAX_SHARED);
    if (shared == NULL && nshared > 0)
        return spillway__refuse(c, SPW_EINVAL, me,
                                "shared is NULL with nshared %zu; nshared must be 0 without shared",
                                nshared);
    uint64_t *sizes = spw_try_malloc(SPW_MOD_CLIENT, ninputs * sizeof *sizes);
    if (sizes == NULL)
        return SPW_ENOMEM;
    uint64_t total = 0;
    int rc = 0;
    for (size_t i = 0; i < ninputs && rc == 0; i++) {
        rc = spillway__resolve_size(c, (spw_id){inputs[i].hi, inputs[i].lo}, &sizes[i], NULL);
        total += rc == 0 ? sizes[i] : 0;
    }
    uint64_t bs = o->block_size;
    if (bs == 0)
        bs = (total + o->nblocks - 1) / o->nblocks;
    if (bs == 0)
        bs = 1;
    uint64_t nb = 0;
    for (size_t i = 0; i < ninputs && rc == 0; i++)
        nb += sizes[i] == 0 ? 1 : (sizes[i] + bs - 1) / bs;
    if (rc == 0 && nb > SIZE_MAX / sizeof(spillway_ref))
        rc = SPW_ENOMEM; /* more references than an array can count */
    spillway_graph *g = rc == 0 ? spillway_graph_new(c) : NULL;
    if (rc == 0 && g == NULL)
        rc = SPW_ENOMEM;
    if (rc != 0) {
        spw_free(sizes);
        return rc;
    }
    spillway_graph_limits(g, o->max_tasks, o->max_bytes);
    spillway_ref *parts = spw_try_malloc(SPW_MOD_CLIENT, nb * sizeof *parts);
    spillway_arg *av = spw_try_malloc(SPW_MOD_CLIENT, (nshared + 1) * sizeof *av);
    if (parts == NULL || av == NULL) {
        spw_free(parts);
        spw_free(av);
        spw_free(sizes);
        spillway_graph_free(g);
        return SPW_ENOMEM;
    }
    for (size_t i = 0; i < nshared; i++)
        av[i + 1] = shared[i];
    unsigned keep = o->reduce == NULL ? SPILLWAY_KEEP : 0;
    /* A block of a chunked input is a view of its chunk (spillway_task_at makes it so): a block
     * size dividing the chunk size never makes a block straddle two. */
    uint64_t b = 0;
    for (size_t i = 0; i < ninputs && rc == 0; i++) {
        uint64_t size = sizes[i];
        for (uint64_t off = 0; rc == 0 && (off < size || (size == 0 && off == 0)); off += bs) {
            uint64_t len = size - off < bs ? size - off : bs;
            av[0] = spillway_arg_view(inputs[i], off, len);
            rc = spillway_task_at(g, fn, av, nshared + 1, keep, &parts[b++], site);
            if (size == 0)
                break;
        }
    }
    spw_free(sizes);
    /* A pairwise reduction tree: partial results are released as soon as they are combined. */
    uint64_t width = nb;
    while (rc == 0 && o->reduce != NULL && width > 1) {
        uint64_t next = 0;
        for (uint64_t i = 0; i + 1 < width && rc == 0; i += 2) {
            spillway_arg pair[2] = {spillway_arg_ref(parts[i]), spillway_arg_ref(parts[i + 1])};
            rc = spillway_task_at(g, o->reduce, pair, 2, width == 2 ? SPILLWAY_KEEP : 0,
                                  &parts[next++], site);
        }
        if (width % 2 == 1)
            parts[next++] = parts[width - 1];
        width = next;
    }
    if (rc == 0 && o->reduce != NULL && nb == 1) {
        /* A single block: its result is the answer, but it was not kept; reduce it alone. */
        spillway_arg one = spillway_arg_ref(parts[0]);
        rc = spillway_task_at(g, "echo", &one, 1, SPILLWAY_KEEP, &parts[0], site);
    }
    spw_free(av);
    if (rc == 0 && (rc = spillway_submit_at(g, site)) != 0) {
        /* The kept results reach no caller: given back here, else they stay held (here, and at
         * the scheduler with their objects) as long as the connection. */
        size_t nkept = o->reduce != NULL ? 1 : nb;
        for (size_t i = 0; i < nkept; i++) {
            handle *h = spillway__handle_find(c, (spw_id){parts[i].hi, parts[i].lo});
            if (h != NULL)
                spillway__handle_release(c, h);
        }
    }
    spillway_graph_free(g);
    if (rc != 0) {
        spw_free(parts);
        return rc;
    }
    *nresults = o->reduce != NULL ? 1 : nb;
    *results = parts;
    return 0;
}

/* ------------------------------------------------------------ progress */

typedef struct gstat_q {
    uint64_t session, graph;
    spillway_graph_progress *out;
    bool found;
} gstat_q;

static void gstat_enc(proto_enc *e, spw_buf *out, uint64_t req, void *arg)
{
    gstat_q *q = arg;
    proto_enc_graphs_req(e, out, req,
                         &(proto_graphs_req_msg){.session = q->session, .graph = q->graph});
}

static void gstat_reply(const proto_msg *m, void *arg)
{
    gstat_q *q = arg;
    if (m->type != PROTO_GRAPHS || m->f[F_GRAPHS_GRAPHS].arr.n == 0)
        return;
    const proto_val *r = PROTO_REC(&m->f[F_GRAPHS_GRAPHS], 0);
    const proto_val *n = &r[R_GRAPH_COUNTS];
    spillway_graph_progress *p = q->out;
    memset(p, 0, sizeof *p);
    p->waiting = n->arr.v[PROTO_TSTATE_WAITING].u;
    p->ready = n->arr.v[PROTO_TSTATE_READY].u;
    p->assigned = n->arr.v[PROTO_TSTATE_ASSIGNED].u;
    p->running = n->arr.v[PROTO_TSTATE_RUNNING].u;
    p->done = n->arr.v[PROTO_TSTATE_DONE].u;
    p->failed = n->arr.v[PROTO_TSTATE_FAILED].u;
    p->total = p->waiting + p->ready + p->assigned + p->running + p->done + p->failed;
    p->bytes_in_flight = r[R_GRAPH_LIVE].u;
    p->max_bytes = r[R_GRAPH_MAX_BYTES].u;
    p->age_ms = r[R_GRAPH_AGE_MS].u;
    p->finished = r[R_GRAPH_ENDED_MS].u != 0;
    q->found = true;
}

static int graph_status__impl(spillway *c, uint64_t graph_id, spillway_graph_progress *out)
{
    if (c == NULL || out == NULL || graph_id == 0)
        return spillway__refuse(c, SPW_EINVAL, "spillway_graph_status", "%s",
                                out == NULL ? "out is NULL; it receives the progress"
                                            : "graph_id is 0; no graph has it (spillway_graph_id)");
    gstat_q q = {c->wel.session, graph_id, out, false};
    int rc = spillway__request(c, gstat_enc, gstat_reply, &q, PROTO_GRAPHS, 10000);
    if (rc != 0)
        return rc;
    if (!q.found) {
        spillway__set_err(c, "graph %llu: the scheduler knows no such graph of this client",
                          (unsigned long long)graph_id);
        return SPW_ENOOBJ;
    }
    return 0;
}

int spillway_graph_status(spillway *c, uint64_t graph_id, spillway_graph_progress *out)
{
    spillway__enter(c);
    return spillway__leave(c, graph_status__impl(c, graph_id, out), "spillway_graph_status");
}

/* ------------------------------------------------------- public entry points */

/* Each sets spillway_errmsg when it fails (spillway__leave). */
int spillway_graph_place(spillway_graph *g, const char *worker)
{
    spillway *c_ = g != NULL ? g->c : NULL;
    spillway__enter(c_);
    return spillway__leave(c_, graph_place__impl(g, worker), "spillway_graph_place");
}

int spillway_graph_limits(spillway_graph *g, uint64_t max_tasks, uint64_t max_bytes)
{
    spillway *c_ = g != NULL ? g->c : NULL;
    spillway__enter(c_);
    return spillway__leave(c_, graph_limits__impl(g, max_tasks, max_bytes),
                           "spillway_graph_limits");
}

int spillway_task_at(spillway_graph *g, const char *fn, const spillway_arg *args, size_t nargs,
                     unsigned flags, spillway_ref *out, const char *site)
{
    spillway *c_ = g != NULL ? g->c : NULL;
    spillway__enter(c_);
    const char *me = "spillway_task_at";
    return spillway__leave(c_, task_at__impl(g, me, fn, args, nargs, flags, 1, out, site), me);
}

int spillway_task_n_at(spillway_graph *g, const char *fn, const spillway_arg *args, size_t nargs,
                       unsigned flags, uint32_t k, spillway_ref *refs_out, const char *site)
{
    spillway *c_ = g != NULL ? g->c : NULL;
    spillway__enter(c_);
    const char *me = "spillway_task_n_at";
    return spillway__leave(c_, task_at__impl(g, me, fn, args, nargs, flags, k, refs_out, site), me);
}

int spillway_submit_at(spillway_graph *g, const char *site)
{
    spillway *c_ = g != NULL ? g->c : NULL;
    spillway__enter(c_);
    return spillway__leave(c_, submit_at__impl(g, site), "spillway_submit");
}

int spillway_map_blocks_at(spillway *c, const char *fn, spillway_ref input,
                           const spillway_arg *shared, size_t nshared, const spillway_map_opts *o,
                           spillway_ref **results, size_t *nresults, const char *site)
{
    spillway *c_ = c;
    spillway__enter(c_);
    return spillway__leave(c_,
                           map_blocks_list_at__impl(c, "spillway_map_blocks_at", fn, &input, 1,
                                                    shared, nshared, o, results, nresults, site),
                           "spillway_map_blocks_at");
}

int spillway_map_blocks_list_at(spillway *c, const char *fn, const spillway_ref *inputs,
                                size_t ninputs, const spillway_arg *shared, size_t nshared,
                                const spillway_map_opts *o, spillway_ref **results,
                                size_t *nresults, const char *site)
{
    spillway *c_ = c;
    spillway__enter(c_);
    return spillway__leave(c_,
                           map_blocks_list_at__impl(c, "spillway_map_blocks_list_at", fn, inputs,
                                                    ninputs, shared, nshared, o, results, nresults,
                                                    site),
                           "spillway_map_blocks_list_at");
}
