/*
 * Broadcast scatter: an object placed on every worker (or on n of them) once, before the tasks
 * that use it run.
 *
 * Copies are pipelined: a target fetches from a worker that may still be receiving the object,
 * which forwards pieces as they arrive. The plan is a forest rooted at the holders: each holder
 * heads a chain (every link sends one copy, so reaching k workers costs about one transfer plus a
 * piece's lag per hop), or, when that lag over the chain's length would cost more than a
 * transfer, a binary tree (each node sends two copies at half its link's rate, but the depth is
 * logarithmic). Each target is also given its ancestors and the original holders to fall back
 * on. The client holds a BROADCAST reference from the request on; it hears BROADCAST_DONE once
 * every target has a copy or has failed. Owns: the bcast records (s->bcasts).
 */
#include <stdio.h>
#include <string.h>

#include <utlist.h>

#include "sched_int.h"

/* Sources named in one REPLICATE: the target's ancestors in the plan, then the holders, nearest
 * first (a worker keeps at most WRK_MAX_LOCS of them). */
#define MAX_LOCS 8

/* How far, in bytes of the object, each hop lags the one it copies from: a hop forwards only
 * pieces it has received whole (FOLLOW_CHUNK in worker/src/peer.c, 256 KiB), plus what a fast
 * link carries while a piece crosses the network and the worker's loop. */
#define HOP_LAG_BYTES (320u << 10)

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
    bool internal;      /* copies the scheduler wants (drain.c): no client, targets with room */
    uint32_t drainer;   /* internal: the draining worker told when it ends (0: none) */
    uint32_t rot;       /* where the search for targets starts among the workers */
    uint32_t copies0;   /* copies when it started */
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
    bool internal = b->internal, ok = b->failed == 0 && b->copies > b->copies0;
    uint32_t drainer = b->drainer;
    spw_id id = b->obj;
    spw_free(b->targets);
    spw_free(b);
    if (internal && drainer != 0)
        sched__drain_copied(s, drainer, id, ok);
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

/* Children per node of the plan: 1 (a chain from each holder) unless the chains' lag, a piece
 * per hop, would cost more than a binary tree, whose links carry two copies each but whose
 * depth is logarithmic. In units of the object's bytes: a chain of d hops ends after
 * size + d x lag, a binary tree of depth t after about 2 x (size + t x lag). */
static uint32_t plan_fanout(uint64_t size, uint32_t ntargets, uint32_t nroots)
{
    if (ntargets <= nroots)
        return 1;
    uint64_t chain_depth = (ntargets + nroots - 1) / nroots;
    uint64_t tree_depth = 0;
    for (uint64_t reach = 0, level = nroots; reach < ntargets; level *= 2)
        reach += 2 * level, tree_depth++;
    double chain = (double)size + (double)chain_depth * HOP_LAG_BYTES;
    double tree = 2.0 * ((double)size + (double)tree_depth * HOP_LAG_BYTES);
    return tree < chain ? 2 : 1;
}

static bool holds(const sched_obj *o, const sched_worker *w)
{
    if (w->drain)
        return true; /* a worker that drains takes no copy: as if it had one */
    if (w->id == o->put_worker)
        return true;
    for (uint32_t i = 0; i < o->nlocs; i++)
        if (o->locs[i] == w->id)
            return true;
    return false;
}

/* Whether w may be given a copy of o: it lacks one and does not drain; for the scheduler's own
 * copies, its store can hold it too. */
static bool target_ok(const bcast *b, const sched_obj *o, const sched_worker *w)
{
    if (holds(o, w))
        return false;
    if (!b->internal)
        return true;
    uint64_t cap = w->stats[PROTO_STAT_CAPACITY] ? w->stats[PROTO_STAT_CAPACITY] : w->capacity;
    return cap >= o->size && !proto_conn_is_closing(w->conn);
}

/* Sends REPLICATE to every target along the plan; the object is READY and in at least one
 * store, or being uploaded to one. */
static void start(sched *s, bcast *b, const sched_obj *o)
{
    b->waiting = false;
    b->copies = o->nlocs > 0 ? o->nlocs : 1; /* a put under way counts as its worker's copy */
    b->copies0 = b->copies;
    b->targets = spw_calloc(SPW_MOD_SCHED, s->nworkers > 0 ? s->nworkers : 1, sizeof *b->targets);
    /* The plan's nodes in the order they join it, holders first; parent[i] is the index of the
     * node that node i copies from (holders: none). */
    uint32_t cap = o->nlocs + 1 + s->nworkers;
    sched_worker **node = spw_malloc(SPW_MOD_SCHED, cap * sizeof *node);
    uint32_t *parent = spw_malloc(SPW_MOD_SCHED, cap * sizeof *parent);
    uint32_t nnode = 0;
    for (uint32_t i = 0; i < o->nlocs; i++) {
        sched_worker *w = sched__worker_by_id(s, o->locs[i]);
        if (w != NULL)
            node[nnode++] = w;
    }
    if (nnode == 0 && o->put_worker != 0) {
        /* Still being uploaded: the plan starts at the worker receiving it, and follows. */
        sched_worker *w = sched__worker_by_id(s, o->put_worker);
        if (w != NULL)
            node[nnode++] = w;
    }
    uint32_t holders = nnode, eligible = 0;
    for (uint32_t k = 0; k < s->nworkers; k++)
        eligible += target_ok(b, o, s->workers[k]);
    if (b->want != 0 && b->want > b->copies && eligible > b->want - b->copies)
        eligible = (uint32_t)(b->want - b->copies);
    uint32_t fanout = plan_fanout(o->size, eligible, holders > 0 ? holders : 1);
    /* Parents are given children in the order nodes joined (breadth first), fanout each. */
    uint32_t next_parent = 0, children = 0;
    for (uint32_t k = 0; k < s->nworkers; k++) {
        sched_worker *w = s->workers[(b->rot + k) % s->nworkers];
        if (!target_ok(b, o, w) || (b->want != 0 && b->copies + b->ntargets >= b->want))
            continue;
        /* Fetch from the parent (maybe still receiving), then its ancestors, then the
         * holders. */
        proto_loc_rec locs[MAX_LOCS];
        uint32_t nl = 0;
        uint32_t up = next_parent < nnode ? next_parent : UINT32_MAX; /* none: the first */
        uint32_t par = up;
        for (; up != UINT32_MAX && up >= holders && nl < MAX_LOCS; up = parent[up])
            locs[nl++] = sched__loc_rec(node[up]);
        for (uint32_t i = 0; i < holders && nl < MAX_LOCS; i++) {
            /* The parent holder first: several holders each head a part of the plan. */
            uint32_t h = (up != UINT32_MAX && up < holders ? up + i : i) % holders;
            locs[nl++] = sched__loc_rec(node[h]);
        }
        if (proto_send_replicate(w->conn, b->id,
                                 &(proto_replicate_msg){.id = o->id,
                                                        .size = o->size,
                                                        .locs = {.n = nl, .v = locs}}) != 0)
            continue;
        b->targets[b->ntargets++] = w->id;
        parent[nnode] = par;
        node[nnode++] = w;
        if (par != UINT32_MAX && ++children == fanout) {
            children = 0;
            next_parent++;
        }
    }
    spw_free(node);
    spw_free(parent);
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
    uint64_t want = m->f[F_BCAST_WORKERS].u;
    if (!m->f[F_BCAST_KEEP].nil && m->f[F_BCAST_KEEP].u != 0 && want > o->copies_want)
        o->copies_want = (uint8_t)(want < SCHED_COPIES_MAX ? want : SCHED_COPIES_MAX);
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

bool sched__copies_start(sched *s, const sched_obj *o, uint32_t want, uint32_t drainer)
{
    static uint64_t next_id;
    bcast probe = {.internal = true};
    uint32_t eligible = 0;
    for (uint32_t k = 0; k < s->nworkers; k++)
        eligible += target_ok(&probe, o, s->workers[k]);
    if (eligible == 0 || o->nlocs == 0)
        return false;
    bcast *b = spw_calloc(SPW_MOD_SCHED, 1, sizeof *b);
    b->id = (1ULL << 63) | ++next_id; /* apart from clients' broadcasts (their ids are small) */
    b->obj = o->id;
    b->want = want;
    b->internal = true;
    b->drainer = drainer;
    b->rot = s->copy_rr++;
    LL_PREPEND(s->bcasts, b);
    start(s, b, o);
    return true;
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
