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
#include <stdlib.h>
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
    uint32_t only;      /* internal: the one target (a move, push.c), or 0: any with room */
    uint32_t move_from; /* a move: the worker whose copy goes once `only` has one */
    uint32_t rot;       /* where the search for targets starts among the workers */
    uint32_t copies0;   /* copies when it started */
    uint64_t bytes;     /* a move: the object's size, and when it started */
    uint64_t started_ns;
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
    uint32_t drainer = b->drainer, only = b->only, from = b->move_from;
    spw_id id = b->obj;
    if (internal && from != 0 && ok)
        sched__copy_rate_seen(s, b->bytes, spw_now_ns() - b->started_ns);
    spw_free(b->targets);
    spw_free(b);
    if (internal && drainer != 0)
        sched__drain_copied(s, drainer, id, ok);
    if (internal && from != 0)
        sched__push_moved(s, id, only, from, ok);
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

/* The byte pieces a hop forwards (FOLLOW_CHUNK in worker/src/peer.c): what HOP_LAG_BYTES is
 * made of besides the network's and the loop's delay. */
#define PIECE_BYTES (256u << 10)
/* Stripes of a striped plan, and the least bytes each carries: below that a range's
 * connections and pieces cost more than its share of the link saves. */
#define STRIPES_MAX 4u
#define STRIPE_MIN_BYTES (1u << 20)

/* A plan's shape: children per node of one tree (1: a chain from each holder, 2: a binary
 * tree), or stripes > 1 trees, one per byte range. */
typedef struct plan {
    uint32_t fanout;
    uint32_t stripes; /* 1: not striped */
} plan;

/* Levels below the root of a tree that gives each node `fanout` children and starts with
 * `first` nodes under the roots, to hold n nodes. */
static uint64_t tree_levels(uint64_t n, uint64_t first, uint64_t fanout)
{
    uint64_t depth = 0;
    for (uint64_t reach = 0, level = first; reach < n; level *= fanout)
        reach += level, depth++;
    return depth;
}

/* Stripes forced by the tests (SPILLWAY_TEST_STRIPES=S, 2 to STRIPES_MAX): a striped plan
 * however few the targets, so that a handful of workers exercise it. 0: none forced. */
static uint32_t stripes_forced(void)
{
    const char *v = getenv("SPILLWAY_TEST_STRIPES");
    long n = v != NULL ? strtol(v, NULL, 10) : 0;
    return n >= 2 && n <= (long)STRIPES_MAX ? (uint32_t)n : 0;
}

/* The plan that ends first, in units of the object's bytes: a chain of d hops ends after
 * size + d x lag; a binary tree of depth t, whose links carry two copies each, after about
 * 2 x (size + t x lag). Striped in S ranges (only from holders that have it whole), each range
 * goes down its own tree whose inner nodes are a different S-th of the targets, each with S
 * children: every node sends S copies of one range, one object's worth, and receives its S
 * ranges from S parents at once, each at an S-th of the link's rate. So it ends after about
 * size + depth x (S x piece + the hop's delay), depth logarithmic in base S. */
static plan plan_choose(uint64_t size, uint32_t ntargets, uint32_t nroots, bool whole)
{
    plan p = {.fanout = 1, .stripes = 1};
    uint32_t forced = stripes_forced();
    if (whole && forced != 0 && size >= forced && ntargets >= forced) {
        p.stripes = forced;
        return p;
    }
    if (ntargets <= nroots)
        return p;
    uint64_t chain_depth = (ntargets + nroots - 1) / nroots;
    double chain = (double)size + (double)chain_depth * HOP_LAG_BYTES;
    double tree = 2.0 * ((double)size + (double)tree_levels(ntargets, 2ull * nroots, 2) *
                                            HOP_LAG_BYTES);
    double best = chain;
    if (tree < best) {
        best = tree;
        p.fanout = 2;
    }
    for (uint32_t k = 2; whole && k <= STRIPES_MAX && size / k >= STRIPE_MIN_BYTES; k++) {
        if (ntargets < k)
            break;
        double lag = (double)k * PIECE_BYTES + (HOP_LAG_BYTES - PIECE_BYTES);
        double striped = (double)size + (double)tree_levels(ntargets, 1, k) * lag;
        if (striped < best) {
            best = striped;
            p.stripes = k;
            p.fanout = k;
        }
    }
    return p;
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

/* Sources for one target of a tree: its parent (maybe still receiving), then the parent's
 * ancestors, then the holders, the one heading this part of the plan first. node[] lists the
 * plan's nodes, holders first; parent_of(i) gives node i's parent index (UINT32_MAX: none). */
typedef uint32_t (*parent_fn)(const void *ctx, uint32_t i);

static uint32_t tree_locs(sched_worker *const *node, uint32_t holders, uint32_t par,
                          parent_fn parent_of, const void *ctx, proto_loc_rec *locs)
{
    uint32_t nl = 0, up = par;
    for (; up != UINT32_MAX && up >= holders && nl < MAX_LOCS; up = parent_of(ctx, up))
        locs[nl++] = sched__loc_rec(node[up]);
    for (uint32_t i = 0; i < holders && nl < MAX_LOCS; i++) {
        /* The parent holder first: several holders each head a part of the plan. */
        uint32_t h = (up != UINT32_MAX && up < holders ? up + i : i) % holders;
        locs[nl++] = sched__loc_rec(node[h]);
    }
    return nl;
}

static uint32_t parent_in(const void *ctx, uint32_t i)
{
    return ((const uint32_t *)ctx)[i];
}

/* A striped plan over node[]: holders first, then n targets. Stripe k's tree takes the targets
 * from the k-th group of n/S on, round: the first hangs under holder k, and the one at place
 * i > 0 under the one at place (i - 1) / S. Its inner nodes are thus its own group, apart from
 * the other stripes' (a node uploads one range, to S children), and it is S-ary. */
typedef struct stripe_ctx {
    uint32_t holders, n, stripes, k;
} stripe_ctx;

static uint32_t stripe_parent(const void *arg, uint32_t i)
{
    const stripe_ctx *c = arg;
    if (i < c->holders)
        return UINT32_MAX;
    uint32_t start = (uint32_t)((uint64_t)c->n * c->k / c->stripes);
    uint32_t place = (i - c->holders + c->n - start) % c->n;
    if (place == 0)
        return c->k % c->holders;
    return c->holders + (start + (place - 1) / c->stripes) % c->n;
}

/* Sends REPLICATE to every target along the plan; the object is READY and in at least one
 * store, or being uploaded to one. */
static void start(sched *s, bcast *b, const sched_obj *o)
{
    b->waiting = false;
    b->copies = o->nlocs > 0 ? o->nlocs : 1; /* a put under way counts as its worker's copy */
    b->copies0 = b->copies;
    b->targets = spw_calloc(SPW_MOD_SCHED, s->nworkers > 0 ? s->nworkers : 1, sizeof *b->targets);
    /* The plan's nodes, holders first, then the targets in the order they join it; parent[i] is
     * the index of the node that node i copies from (holders: none). */
    uint32_t cap = o->nlocs + 1 + s->nworkers;
    sched_worker **node = spw_malloc(SPW_MOD_SCHED, cap * sizeof *node);
    uint32_t *parent = spw_malloc(SPW_MOD_SCHED, cap * sizeof *parent);
    uint32_t nnode = 0;
    for (uint32_t i = 0; i < o->nlocs; i++) {
        sched_worker *w = sched__worker_by_id(s, o->locs[i]);
        if (w != NULL)
            node[nnode++] = w;
    }
    bool whole = nnode > 0; /* else it is still being uploaded */
    if (nnode == 0 && o->put_worker != 0) {
        /* Still being uploaded: the plan starts at the worker receiving it, and follows. */
        sched_worker *w = sched__worker_by_id(s, o->put_worker);
        if (w != NULL)
            node[nnode++] = w;
    }
    uint32_t holders = nnode;
    for (uint32_t k = 0; k < s->nworkers; k++) {
        sched_worker *w = s->workers[(b->rot + k) % s->nworkers];
        if (!target_ok(b, o, w) || (b->want != 0 && b->copies + (nnode - holders) >= b->want) ||
            (b->only != 0 && w->id != b->only))
            continue;
        parent[nnode] = UINT32_MAX;
        node[nnode++] = w;
    }
    uint32_t ntargets = nnode - holders;
    plan pl = plan_choose(o->size, ntargets, holders > 0 ? holders : 1, whole);
    if (ntargets > 0) {
        char hex[33];
        spw_log(SPW_LOG_INFO, "obj=%s: copies to %u workers from %u along %s (%u stripes)",
                spw_id_hex(o->id, hex), ntargets, holders,
                pl.stripes > 1    ? "striped trees"
                : pl.fanout == 1 ? "chains"
                                 : "a binary tree",
                pl.stripes);
    }
    /* One tree: parents are given children in the order nodes joined (breadth first), fanout
     * each; the first targets hang under the holders. */
    for (uint32_t i = holders, next = 0, children = 0; i < nnode; i++) {
        parent[i] = next < i ? next : UINT32_MAX;
        if (parent[i] != UINT32_MAX && ++children == pl.fanout) {
            children = 0;
            next++;
        }
    }
    for (uint32_t i = holders; i < nnode; i++) {
        sched_worker *w = node[i];
        proto_loc_rec locs[STRIPES_MAX][MAX_LOCS];
        proto_stripe_rec st[STRIPES_MAX];
        uint32_t nst = pl.stripes > 1 ? pl.stripes : 0;
        for (uint32_t k = 0; k < nst; k++) {
            stripe_ctx ctx = {holders, ntargets, nst, k};
            uint64_t off = o->size / nst * k;
            st[k] = (proto_stripe_rec){
                .off = off,
                .len = k + 1 == nst ? o->size - off : o->size / nst,
                .locs = {.n = tree_locs(node, holders, stripe_parent(&ctx, i), stripe_parent,
                                        &ctx, locs[k]),
                         .v = locs[k]}};
        }
        /* A worker that knows no stripes fetches the whole object from the first range's
         * sources. */
        uint32_t nl = nst > 0 ? (uint32_t)st[0].locs.n
                              : tree_locs(node, holders, parent[i], parent_in, parent, locs[0]);
        if (proto_send_replicate(w->conn, b->id,
                                 &(proto_replicate_msg){.id = o->id,
                                                        .size = o->size,
                                                        .locs = {.n = nl, .v = locs[0]},
                                                        .stripes = {.n = nst, .v = st},
                                                        .omit_stripes = nst == 0}) != 0)
            continue;
        b->targets[b->ntargets++] = w->id;
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
    if (!m->f[F_BCAST_KEEP].nil && m->f[F_BCAST_KEEP].u != 0 && want > o->copies_want) {
        o->copies_want = (uint8_t)(want < SCHED_COPIES_MAX ? want : SCHED_COPIES_MAX);
        if (sched__obj_producer(o) == NULL && o->origin != NULL)
            sched__jnl_put(s, o); /* a put's record: a restart keeps as many copies */
    }
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

/* An internal copy of o: to `only` (0: any worker with room) until o has `want` copies. */
static bool copy_start(sched *s, const sched_obj *o, uint32_t want, uint32_t drainer,
                       sched_worker *only, uint32_t move_from)
{
    static uint64_t next_id;
    bcast probe = {.internal = true};
    uint32_t eligible = 0;
    for (uint32_t k = 0; k < s->nworkers; k++)
        eligible += (only == NULL || s->workers[k] == only) && target_ok(&probe, o, s->workers[k]);
    if (eligible == 0 || o->nlocs == 0)
        return false;
    bcast *b = spw_calloc(SPW_MOD_SCHED, 1, sizeof *b);
    b->id = (1ULL << 63) | ++next_id; /* apart from clients' broadcasts (their ids are small) */
    b->obj = o->id;
    b->want = want;
    b->internal = true;
    b->drainer = drainer;
    b->only = only != NULL ? only->id : 0;
    b->move_from = move_from;
    b->bytes = o->size;
    b->started_ns = spw_now_ns();
    b->rot = s->copy_rr++;
    LL_PREPEND(s->bcasts, b);
    start(s, b, o);
    return true;
}

bool sched__copies_start(sched *s, const sched_obj *o, uint32_t want, uint32_t drainer)
{
    return copy_start(s, o, want, drainer, NULL, 0);
}

bool sched__copies_move(sched *s, const sched_obj *o, sched_worker *to, uint32_t from)
{
    return copy_start(s, o, o->nlocs + 1, 0, to, from);
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
