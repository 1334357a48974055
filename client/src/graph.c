/*
 * libspillway graphs: tasks are encoded as SUBMIT records as they are added, cut into frames
 * well under the scheduler's frame limit, and sent together by spillway_submit. A kept task's
 * reference is tracked from the moment it is sent, since its result may arrive before the
 * scheduler has acknowledged the end of a large graph.
 */
#include <stdio.h>
#include <string.h>

#include "client_int.h"

struct spillway_graph {
    spillway *c;
    uint64_t id;       /* graph id, also the request id of its frames */
    spw_buf frames;    /* finished SUBMIT frames */
    spw_buf recs;      /* task records of the frame being built */
    uint32_t nrecs;
    uint64_t max_tasks, max_bytes;
    spw_id *kept;      /* kept tasks, tracked once sent */
    size_t nkept, capkept;
    uint64_t ntasks;
    char place[PROTO_MAX_NAME + 1]; /* worker name for the tasks added next, or "" */
};

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
    spw_buf_release(&g->frames);
    spw_buf_release(&g->recs);
    spw_free(g->kept);
    spw_free(g);
}

int spillway_graph_place(spillway_graph *g, const char *worker)
{
    if (g == NULL || (worker != NULL && strlen(worker) > PROTO_MAX_NAME))
        return SPW_EINVAL;
    snprintf(g->place, sizeof g->place, "%s", worker != NULL ? worker : "");
    return 0;
}

int spillway_graph_limits(spillway_graph *g, uint64_t max_tasks, uint64_t max_bytes)
{
    if (g == NULL)
        return SPW_EINVAL;
    g->max_tasks = max_tasks;
    g->max_bytes = max_bytes;
    return 0;
}

static uint32_t frame_budget(const spillway *c)
{
    uint32_t mf = c->wel.max_frame ? c->wel.max_frame : PROTO_DEFAULT_MAX_FRAME;
    return mf / 2 < (8u << 20) ? mf / 2 : (8u << 20);
}

/* Wraps the pending records into a SUBMIT frame. */
static void cut_frame(spillway_graph *g, bool end)
{
    proto_enc e;
    proto_enc_begin(&e, &g->frames, PROTO_SUBMIT, g->id, 5);
    proto_put_u(&e, g->id);
    proto_put_u(&e, end ? PROTO_SUBMIT_END : 0);
    proto_put_u(&e, g->max_tasks);
    proto_put_u(&e, g->max_bytes);
    proto_put_arr(&e, g->nrecs);
    spw_buf_append(&g->frames, g->recs.data, g->recs.len);
    proto_enc_end(&e, UINT32_MAX);
    spw_buf_reset(&g->recs);
    g->nrecs = 0;
}

static void put_inline(proto_enc *e, const void *p, uint64_t len)
{
    proto_put_arr(e, 5);
    proto_put_u(e, PROTO_ARG_INLINE);
    proto_put_bin(e, p, len);
    proto_put_nil(e);
    proto_put_u(e, 0);
    proto_put_u(e, 0);
}

int spillway_task_at(spillway_graph *g, const char *fn, const spillway_arg *args, size_t nargs,
                     unsigned flags, spillway_ref *out, const char *site)
{
    if (g == NULL || fn == NULL || fn[0] == '\0' || strlen(fn) > PROTO_MAX_NAME ||
        (args == NULL && nargs > 0) || nargs > 65535)
        return SPW_EINVAL;
    spillway *c = g->c;
    /* Validate before encoding anything, so a refusal leaves the graph as it was. */
    for (size_t i = 0; i < nargs; i++) {
        const spillway_arg *a = &args[i];
        if (a->kind == SPILLWAY_ARG_BYTES) {
            if (a->data == NULL && a->len > 8) {
                spillway__set_err(c, "argument %zu: bytes without data", i);
                return SPW_EINVAL;
            }
        } else if (a->kind == SPILLWAY_ARG_REF || a->kind == SPILLWAY_ARG_VIEW) {
            handle *h = spillway__handle_find(c, (spw_id){a->ref.hi, a->ref.lo});
            if (a->kind == SPILLWAY_ARG_VIEW && h != NULL && h->kind == H_SMALL &&
                (a->off > h->size || a->len > h->size - a->off)) {
                spillway__set_err(c, "argument %zu: view outside a %llu-byte value", i,
                                  (unsigned long long)h->size);
                return SPW_EINVAL;
            }
        } else {
            spillway__set_err(c, "argument %zu: unknown kind %d", i, a->kind);
            return SPW_EINVAL;
        }
    }
    spw_id id = spillway__new_id(c);
    proto_enc e;
    proto_enc_raw(&e, &g->recs);
    proto_put_arr(&e, g->place[0] != '\0' ? 6 : 5);
    proto_put_id(&e, id);
    proto_put_str(&e, fn);
    proto_put_arr(&e, (uint32_t)nargs);
    for (size_t i = 0; i < nargs; i++) {
        const spillway_arg *a = &args[i];
        if (a->kind == SPILLWAY_ARG_BYTES) {
            put_inline(&e, a->data != NULL ? a->data : a->small, a->len);
            continue;
        }
        spw_id rid = {a->ref.hi, a->ref.lo};
        handle *h = spillway__handle_find(c, rid);
        if (h != NULL && h->kind == H_SMALL) {
            /* A small value lives here: it travels with the task. */
            if (a->kind == SPILLWAY_ARG_VIEW)
                put_inline(&e, h->inl + a->off, a->len);
            else
                put_inline(&e, h->inl, h->size);
            continue;
        }
        proto_put_arr(&e, 5);
        proto_put_u(&e, a->kind == SPILLWAY_ARG_VIEW ? PROTO_ARG_VIEW : PROTO_ARG_OBJ);
        proto_put_nil(&e);
        proto_put_id(&e, rid);
        proto_put_u(&e, a->kind == SPILLWAY_ARG_VIEW ? a->off : 0);
        proto_put_u(&e, a->kind == SPILLWAY_ARG_VIEW ? a->len : 0);
    }
    proto_put_u(&e, flags & SPILLWAY_KEEP ? PROTO_TASK_KEEP : 0);
    const char *s = site != NULL ? site : "";
    proto_put_strn(&e, s, strnlen(s, PROTO_MAX_NAME));
    if (g->place[0] != '\0')
        proto_put_str(&e, g->place);
    g->nrecs++;
    g->ntasks++;
    if (flags & SPILLWAY_KEEP) {
        if (g->nkept == g->capkept) {
            g->capkept = g->capkept ? g->capkept * 2 : 64;
            g->kept = spw_realloc(SPW_MOD_CLIENT, g->kept, g->capkept * sizeof *g->kept);
        }
        g->kept[g->nkept++] = id;
    }
    if (g->recs.len > frame_budget(c))
        cut_frame(g, false);
    if (out != NULL)
        *out = (spillway_ref){id.hi, id.lo};
    return 0;
}

int spillway_submit(spillway_graph *g)
{
    if (g == NULL)
        return SPW_EINVAL;
    spillway *c = g->c;
    if (c->sched == NULL)
        return SPW_ECLOSED;
    cut_frame(g, true);
    for (size_t i = 0; i < g->nkept; i++)
        spillway__handle_add(c, g->kept[i], H_TASK);
    spillway__call_begin(c, PROTO_SUBMIT_ACK);
    c->call.req = g->id;
    c->call.errors_then_ack = true;
    int rc = proto_conn_send_raw(c->sched, g->frames.data, g->frames.len);
    spw_buf_release(&g->frames);
    g->nkept = 0; /* tracked by the connection now */
    if (rc == 0)
        rc = spillway__call_wait(c, -1);
    return rc;
}
