/*
 * Broadcast scatter: an object placed on every worker (or on n of them) once, before the tasks
 * that use it run.
 *
 * The transfer is a pipelined chain: the first target fetches from a worker that has the
 * object, the second from the first while the first is still receiving, and so on, each
 * forwarding chunks as they arrive; so reaching k workers costs about one transfer, not k. Each
 * target is also given the earlier links and the original holders to fall back on. The client
 * holds a BROADCAST reference from the request on; it hears BROADCAST_DONE once every target has
 * a copy or has failed. Owns: the bcast records (s->bcasts).
 */
#include <stdio.h>
#include <string.h>

#include <utlist.h>

#include "sched_int.h"

/* Sources named in one REPLICATE: the previous links of the chain and the holders, nearest
 * first (a worker keeps at most WRK_MAX_LOCS of them). */
#define MAX_LOCS 8

typedef struct bcast {
    uint64_t id;        /* request id sent to the targets */
    spw_id obj;
    sched_session *ss;
    uint64_t req;
    uint32_t *targets;  /* worker ids still to answer */
    uint32_t ntargets;
    uint32_t copies;    /* workers with a copy so far */
    uint32_t failed;
    uint64_t want;      /* workers asked for (0 = all) */
    bool waiting;       /* the put is not sealed yet: replication starts when it is */
    struct bcast *next;
} bcast;

static void done(sched *s, bcast *b)
{
    if (b->ss != NULL) {
        proto_send_broadcast_done(
            b->ss->conn, b->req,
            &(proto_broadcast_done_msg){.id = b->obj, .copies = b->copies, .failed = b->failed});
    }
    LL_DELETE(s->bcasts, b);
    spw_free(b->targets);
    spw_free(b);
}

/* A target answered (ok) or went away: it no longer holds the broadcast up. */
static void settle(sched *s, bcast *b, uint32_t worker, bool ok)
{
    if (b->waiting)
        return; /* no target yet */
    for (uint32_t i = 0; i < b->ntargets; i++) {
        if (b->targets[i] == worker) {
            b->targets[i] = b->targets[--b->ntargets];
            if (ok)
                b->copies++;
            else
                b->failed++;
            break;
        }
    }
    if (b->ntargets == 0)
        done(s, b);
}

/* Sends REPLICATE along the chain; the object is READY and in at least one store. */
static void start(sched *s, bcast *b, const sched_obj *o)
{
    b->waiting = false;
    b->copies = o->nlocs > 0 ? o->nlocs : 1; /* a put under way counts as its worker's copy */
    b->targets = spw_calloc(SPW_MOD_SCHED, s->nworkers > 0 ? s->nworkers : 1, sizeof *b->targets);
    /* The chain: holders first, then each new target after the one before it. */
    sched_worker **chain = spw_malloc(SPW_MOD_SCHED, (o->nlocs + 1 + s->nworkers) * sizeof *chain);
    uint32_t nchain = 0;
    for (uint32_t i = 0; i < o->nlocs; i++) {
        sched_worker *w = sched__worker_by_id(s, o->locs[i]);
        if (w != NULL)
            chain[nchain++] = w;
    }
    if (nchain == 0 && o->put_worker != 0) {
        /* Still being uploaded: the chain starts at the worker receiving it, and follows. */
        sched_worker *w = sched__worker_by_id(s, o->put_worker);
        if (w != NULL)
            chain[nchain++] = w;
    }
    uint32_t holders = nchain;
    for (uint32_t k = 0; k < s->nworkers; k++) {
        sched_worker *w = s->workers[k];
        bool has = w->id == o->put_worker;
        for (uint32_t i = 0; i < o->nlocs; i++)
            has = has || o->locs[i] == w->id;
        if (has || (b->want != 0 && b->copies + b->ntargets >= b->want))
            continue;
        /* Fetch from the previous link (maybe still receiving), then earlier ones, then the
         * holders. */
        proto_loc_rec locs[MAX_LOCS];
        uint32_t nl = nchain < MAX_LOCS ? nchain : MAX_LOCS;
        uint32_t put = 0;
        for (int32_t i = (int32_t)nchain - 1; i >= (int32_t)holders && put < nl; i--, put++)
            locs[put] = sched__loc_rec(chain[i]);
        for (uint32_t i = 0; i < holders && put < nl; i++, put++)
            locs[put] = sched__loc_rec(chain[i]);
        if (proto_send_replicate(w->conn, b->id,
                                 &(proto_replicate_msg){.id = o->id,
                                                        .size = o->size,
                                                        .locs = {.n = nl, .v = locs}}) != 0)
            continue;
        b->targets[b->ntargets++] = w->id;
        chain[nchain++] = w;
    }
    spw_free(chain);
    if (b->ntargets == 0)
        done(s, b);
}

void sched__broadcast(sched *s, sched_session *ss, const proto_msg *m)
{
    char hex[33];
    spw_id id = m->f[F_BCAST_ID].id;
    sched_obj *o = sched__obj_find(s, id);
    bool pending_put = o != NULL && o->state == OBJ_PENDING && sched__obj_producer(o) == NULL;
    if (o == NULL || (!pending_put && (o->state != OBJ_READY || o->nlocs == 0))) {
        proto_conn_error(ss->conn, m->req, o == NULL ? SPW_ENOOBJ : SPW_ENOTSEALED,
                         "obj=%s cannot be broadcast: %s", spw_id_hex(id, hex),
                         o == NULL ? "unknown" : "not stored in a worker");
        return;
    }
    sched__session_ref(s, ss, o, REF_BROADCAST);
    bcast *b = spw_calloc(SPW_MOD_SCHED, 1, sizeof *b);
    static uint64_t next_id;
    b->id = ++next_id;
    b->obj = id;
    b->ss = ss;
    b->req = m->req;
    b->want = m->f[F_BCAST_WORKERS].u;
    LL_PREPEND(s->bcasts, b);
    if (pending_put && o->put_worker == 0)
        b->waiting = true; /* no worker for it yet (should not happen): wait for it */
    else
        start(s, b, o); /* a put under way is followed as it is uploaded */
}

/* A put became ready: broadcasts that waited for it start. */
void sched__broadcast_obj_ready(sched *s, const sched_obj *o)
{
    bcast *b, *tmp;
    LL_FOREACH_SAFE(s->bcasts, b, tmp)
    if (b->waiting && spw_id_eq(b->obj, o->id))
        start(s, b, o);
}

void sched__broadcast_added(sched *s, sched_worker *w, spw_id id, bool ok)
{
    bcast *b, *tmp;
    LL_FOREACH_SAFE(s->bcasts, b, tmp)
    if (!b->waiting && spw_id_eq(b->obj, id))
        settle(s, b, w->id, ok);
}

bool sched__broadcast_error(sched *s, sched_worker *w, uint64_t req)
{
    bcast *b;
    LL_SEARCH_SCALAR(s->bcasts, b, id, req);
    if (b == NULL)
        return false;
    settle(s, b, w->id, false);
    return true;
}

void sched__broadcast_worker_gone(sched *s, sched_worker *w)
{
    bcast *b, *tmp;
    LL_FOREACH_SAFE(s->bcasts, b, tmp) settle(s, b, w->id, false);
}

void sched__broadcast_session_gone(sched *s, sched_session *ss)
{
    bcast *b;
    LL_FOREACH(s->bcasts, b)
    if (b->ss == ss)
        b->ss = NULL; /* the replication goes on or is cancelled by the release; nobody to tell */
}

void sched__broadcast_free_all(sched *s)
{
    bcast *b, *tmp;
    LL_FOREACH_SAFE(s->bcasts, b, tmp)
    {
        b->ss = NULL;
        done(s, b);
    }
}

/* The object was released: targets still copying it are told to stop (a fetch under way stops
 * on OBJ_DELETE), so nothing half-copied stays behind. */
void sched__broadcast_obj_freed(sched *s, spw_id id)
{
    bcast *b, *tmp;
    LL_FOREACH_SAFE(s->bcasts, b, tmp)
    {
        if (!spw_id_eq(b->obj, id))
            continue;
        for (uint32_t i = 0; i < b->ntargets; i++) {
            sched_worker *w = sched__worker_by_id(s, b->targets[i]);
            if (w == NULL)
                continue;
            sched__worker_delete(w, id);
        }
        b->ntargets = 0;
        done(s, b);
    }
}
