/*
 * Pushing a shuffle's pieces to the worker that will reduce them.
 *
 * An output of a task of several outputs (a map of a shuffle) whose one consumer still waits for
 * other inputs and takes at least PUSH_MIN_ARGS objects (a reduce), or is such a planned reduce
 * that the outputs of this very map made ready and that waits for a slot, is moved, once made, to
 * the worker that consumer is planned on: copied there (sched__copies_move: a REPLICATE) and then
 * dropped where it was made. The network then carries the shuffle while the maps still run, not
 * only after the last one, and a map's worker does not spill pieces about to leave it. A consumer
 * is planned when its first such input is made, on the worker with the fewest planned consumers
 * per slot; placement later finds its inputs there (most local bytes). Moves to one worker run
 * SCHED_PUSH_WINDOW at a time. The workers sending to it take turns for the window (a move waiting
 * from each in a ring), so that a map's worker whose pieces were made later is not kept off every
 * target's window by the others' earlier ones while its own link stands idle; from one worker, the
 * moves for the consumer planned first go first, so that the consumers there become ready one
 * after the other and run while later pieces still cross the network. A move whose copy fails
 * leaves the piece where it was (its consumer fetches it then); a piece lost with the worker it
 * moved to is made again by lineage, like any output.
 * Owns: s->push (NULL until something is planned).
 * Invariants: a task has `planned` iff a plan names it, and it is then waiting or ready; a
 * target's `planned` counts the plans naming its worker, `inflight` its moves under way; a
 * pair is in its target's ring iff moves wait in it (an empty pair is freed).
 */
#include <stdio.h>
#include <string.h>

#include <utlist.h>

#include "sched_int.h"

/* Object arguments that make a consumer a reduce worth planning, and the least bytes worth a
 * move of its own. */
#define PUSH_MIN_ARGS 4
#define PUSH_MIN_BYTES (64u << 10)

typedef struct push_plan {
    sched_task *t; /* the key */
    uint32_t worker;
    uint64_t rank; /* the order plans were made in: moves for a lower rank go first */
    UT_hash_handle hh;
} push_plan;

typedef struct push_move {
    spw_id id;
    uint64_t rank;
} push_move;

/* The moves waiting from one worker to another: a binary heap, the lowest rank first. */
typedef struct push_pair {
    uint64_t key; /* the target's worker << 32 | from */
    uint32_t from;
    push_move *q;
    uint32_t nq, capq;
    struct push_pair *prev, *next; /* its target's ring */
    UT_hash_handle hh;
} push_pair;

typedef struct push_target {
    uint32_t worker; /* the key */
    uint32_t planned;
    uint32_t inflight;
    push_pair *ring; /* the pairs with moves waiting for the window, served in turn */
    UT_hash_handle hh;
} push_target;

static void heap_push(push_pair *pr, push_move m)
{
    if (pr->nq == pr->capq) {
        pr->capq = pr->capq ? pr->capq * 2 : 16;
        pr->q = spw_realloc(SPW_MOD_SCHED, pr->q, pr->capq * sizeof *pr->q);
    }
    uint32_t i = pr->nq++;
    for (; i > 0 && pr->q[(i - 1) / 2].rank > m.rank; i = (i - 1) / 2)
        pr->q[i] = pr->q[(i - 1) / 2];
    pr->q[i] = m;
}

static push_move heap_pop(push_pair *pr)
{
    push_move top = pr->q[0], last = pr->q[--pr->nq];
    uint32_t i = 0;
    for (;;) {
        uint32_t c = 2 * i + 1;
        if (c >= pr->nq)
            break;
        if (c + 1 < pr->nq && pr->q[c + 1].rank < pr->q[c].rank)
            c++;
        if (pr->q[c].rank >= last.rank)
            break;
        pr->q[i] = pr->q[c];
        i = c;
    }
    if (pr->nq > 0)
        pr->q[i] = last;
    return top;
}

struct sched_push {
    push_plan *plans;
    push_target *targets;
    push_pair *pairs;
    uint64_t rank;
    uint32_t rr; /* where the search for a worker to plan on starts */
};

static struct sched_push *push_of(sched *s)
{
    if (s->push == NULL)
        s->push = spw_calloc(SPW_MOD_SCHED, 1, sizeof *s->push);
    return s->push;
}

static push_target *target_find(const struct sched_push *p, uint32_t worker)
{
    push_target *pt = NULL;
    HASH_FIND(hh, p->targets, &worker, sizeof worker, pt);
    return pt;
}

static push_target *target_get(struct sched_push *p, uint32_t worker)
{
    push_target *pt = target_find(p, worker);
    if (pt == NULL) {
        pt = spw_calloc(SPW_MOD_SCHED, 1, sizeof *pt);
        pt->worker = worker;
        HASH_ADD(hh, p->targets, worker, sizeof pt->worker, pt);
    }
    return pt;
}

/* Takes pr out of pt's ring and frees it. */
static void pair_free(struct sched_push *p, push_target *pt, push_pair *pr)
{
    DL_DELETE(pt->ring, pr);
    HASH_DEL(p->pairs, pr);
    spw_free(pr->q);
    spw_free(pr);
}

/* Queues move m from worker `from` to pt's worker. */
static void pair_queue(struct sched_push *p, push_target *pt, uint32_t from, push_move m)
{
    uint64_t key = (uint64_t)pt->worker << 32 | from;
    push_pair *pr = NULL;
    HASH_FIND(hh, p->pairs, &key, sizeof key, pr);
    if (pr == NULL) {
        pr = spw_calloc(SPW_MOD_SCHED, 1, sizeof *pr);
        pr->key = key;
        pr->from = from;
        HASH_ADD(hh, p->pairs, key, sizeof pr->key, pr);
        DL_APPEND(pt->ring, pr);
    }
    heap_push(pr, m);
}

/* Drops every move waiting for pt's window. */
static void target_drop_queued(struct sched_push *p, push_target *pt)
{
    while (pt->ring != NULL)
        pair_free(p, pt, pt->ring);
}

static void target_free(struct sched_push *p, push_target *pt)
{
    target_drop_queued(p, pt);
    HASH_DEL(p->targets, pt);
    spw_free(pt);
}

/* Whether d is a reduce its inputs may be moved for: waiting, not bound to a worker, taking at
 * least PUSH_MIN_ARGS objects. */
static bool is_reduce(const sched_task *d)
{
    if (d->state != T_WAITING || d->worker != NULL || d->placed)
        return false;
    uint32_t objects = 0;
    const sched_arg *a = sched__task_args(d);
    for (uint32_t i = 0; i < d->nargs; i++, a = sched__arg_next(a))
        objects += a->kind != PROTO_ARG_INLINE;
    return objects >= PUSH_MIN_ARGS;
}

/* Whether d is a planned reduce that the outputs being pushed made ready (the last map's) and
 * that still waits for a slot: its pieces from that map move like the others, in their turn,
 * rather than when it starts, after the rest of the shuffle has crossed the network. */
static bool made_ready(const sched_task *d)
{
    return d->planned && d->state == T_READY && d->worker == NULL && !d->placed;
}

/* Whether w may be planned on for a reduce of function f: its store can spill (pieces for its
 * later reduces can wait on its disk, never holding memory its running task needs), and it runs
 * f. */
static bool plan_ok(const sched_worker *w, sched_fn *f)
{
    return !w->drain && !proto_conn_is_closing(w->conn) && w->stats[PROTO_STAT_SPILLS] != 0 &&
           (w->runs_uploads || !sched__fn_uploaded(f));
}

/* d's plan, made now on the worker with the fewest plans per slot when it has none, or when
 * the worker it names is gone. NULL: no worker can take it. */
static push_plan *plan_for(sched *s, sched_task *d)
{
    struct sched_push *p = push_of(s);
    push_plan *pl = NULL;
    if (d->planned) {
        HASH_FIND(hh, p->plans, &d, sizeof d, pl);
        sched_worker *w = pl != NULL ? sched__worker_by_id(s, pl->worker) : NULL;
        if (w != NULL && plan_ok(w, d->fn))
            return pl;
        sched__push_unplan(s, d);
    }
    sched_worker *best = NULL;
    double best_load = 0;
    for (uint32_t k = 0; k < s->nworkers; k++) {
        sched_worker *w = s->workers[(p->rr + k) % s->nworkers];
        if (!plan_ok(w, d->fn))
            continue;
        const push_target *pt = target_find(p, w->id);
        double load = (double)(pt != NULL ? pt->planned : 0) / (double)(w->slots ? w->slots : 1);
        if (best == NULL || load < best_load) {
            best = w;
            best_load = load;
        }
    }
    if (best == NULL)
        return NULL;
    p->rr++;
    pl = spw_calloc(SPW_MOD_SCHED, 1, sizeof *pl);
    pl->t = d;
    pl->worker = best->id;
    pl->rank = ++p->rank;
    HASH_ADD(hh, p->plans, t, sizeof pl->t, pl);
    target_get(p, best->id)->planned++;
    d->planned = 1;
    return pl;
}

sched_worker *sched__push_plan_worker(sched *s, const sched_task *t)
{
    push_plan *pl = NULL;
    if (s->push != NULL)
        HASH_FIND(hh, s->push->plans, &t, sizeof t, pl);
    sched_worker *w = pl != NULL ? sched__worker_by_id(s, pl->worker) : NULL;
    return w != NULL && plan_ok(w, t->fn) ? w : NULL;
}

/* The one consumer of o when it is still to run on worker `to` (waiting, ready, or assigned
 * there), else NULL. */
static const sched_task *sole_consumer(const sched_obj *o, uint32_t to)
{
    const sched_arg *c = o->consumers;
    if (c == NULL || c->cnext != NULL)
        return NULL;
    const sched_task *d = sched__arg_task(c);
    if (d->state == T_WAITING || d->state == T_READY)
        return d->worker == NULL || d->worker->id == to ? d : NULL;
    return d->state == T_ASSIGNED && d->worker != NULL && d->worker->id == to ? d : NULL;
}

/* Whether o should still move from `from` to `to`. */
static bool move_wanted(const sched_obj *o, uint32_t from, uint32_t to)
{
    return o != NULL && o->state == OBJ_READY && !o->has_inline && o->copies_want <= 1 &&
           sched__obj_has_loc(o, from) && !sched__obj_has_loc(o, to) &&
           sole_consumer(o, to) != NULL;
}

/* Starts the moves waiting for pt's window: one from each sending worker in turn, from each the
 * lowest rank first. */
static void pump(sched *s, push_target *pt)
{
    struct sched_push *p = s->push;
    sched_worker *to = sched__worker_by_id(s, pt->worker);
    while (pt->inflight < SCHED_PUSH_WINDOW && pt->ring != NULL) {
        if (to == NULL || proto_conn_is_closing(to->conn)) {
            target_drop_queued(p, pt);
            return;
        }
        push_pair *pr = pt->ring;
        uint32_t from = pr->from;
        push_move m = heap_pop(pr);
        if (pr->nq == 0) {
            pair_free(p, pt, pr);
        } else {
            DL_DELETE(pt->ring, pr); /* the next sender's turn */
            DL_APPEND(pt->ring, pr);
        }
        const sched_obj *o = sched__obj_find(s, m.id);
        if (!move_wanted(o, from, pt->worker))
            continue;
        /* Counted first: a copy that ends at once (its REPLICATE not sent) is answered inside
         * sched__copies_move, which takes its count back. */
        pt->inflight++;
        if (!sched__copies_move(s, o, to, from))
            pt->inflight--;
    }
}

void sched__push_outputs(sched *s, sched_task *t, sched_worker *w)
{
    if (t->nouts < 2)
        return;
    for (uint32_t k = 0; k < t->nouts; k++) {
        sched_obj *o = sched__task_output(s, t, k);
        if (o == NULL || o->state != OBJ_READY || o->has_inline || o->size < PUSH_MIN_BYTES ||
            o->nlocs != 1 || o->locs[0] != w->id || o->consumers == NULL ||
            o->consumers->cnext != NULL)
            continue;
        sched_task *d = sched__arg_task(o->consumers);
        if (!is_reduce(d) && !made_ready(d))
            continue;
        push_plan *pl = plan_for(s, d);
        if (pl == NULL || pl->worker == w->id)
            continue;
        push_target *pt = target_get(s->push, pl->worker);
        pair_queue(s->push, pt, w->id, (push_move){o->id, pl->rank});
        pump(s, pt);
    }
}

void sched__push_moved(sched *s, spw_id id, uint32_t to, uint32_t from, bool ok)
{
    if (s->push == NULL)
        return; /* the scheduler is being freed */
    push_target *pt = target_find(s->push, to);
    if (pt != NULL && pt->inflight > 0)
        pt->inflight--;
    sched_obj *o = sched__obj_find(s, id);
    if (ok && o != NULL && o->state == OBJ_READY && sched__obj_has_loc(o, to) &&
        sched__obj_has_loc(o, from) && sole_consumer(o, to) != NULL) {
        sched_worker *fw = sched__worker_by_id(s, from);
        if (fw != NULL)
            sched__worker_delete(fw, id);
        sched__obj_drop_loc(s, o, from);
        o->home = to; /* placement's locality follows the bytes */
    }
    if (pt != NULL)
        pump(s, pt);
}

void sched__push_unplan(sched *s, sched_task *t)
{
    struct sched_push *p = s->push;
    t->planned = 0;
    push_plan *pl = NULL;
    if (p != NULL)
        HASH_FIND(hh, p->plans, &t, sizeof t, pl);
    if (pl == NULL)
        return;
    push_target *pt = target_find(p, pl->worker);
    if (pt != NULL && pt->planned > 0)
        pt->planned--;
    HASH_DEL(p->plans, pl);
    spw_free(pl);
}

void sched__push_worker_gone(sched *s, sched_worker *w)
{
    push_target *pt = s->push != NULL ? target_find(s->push, w->id) : NULL;
    /* Its plans stay: the next piece made for them plans them anew. */
    if (pt != NULL)
        target_drop_queued(s->push, pt);
}

void sched__push_free_all(sched *s)
{
    struct sched_push *p = s->push;
    if (p == NULL)
        return;
    s->push = NULL;
    push_plan *pl, *ptmp;
    HASH_ITER(hh, p->plans, pl, ptmp)
    {
        pl->t->planned = 0;
        HASH_DEL(p->plans, pl);
        spw_free(pl);
    }
    push_target *pt, *ttmp;
    HASH_ITER(hh, p->targets, pt, ttmp) target_free(p, pt);
    spw_free(p);
}

const char *sched__push_check(const sched *s)
{
    const struct sched_push *p = s->push;
    if (p == NULL)
        return NULL;
    uint64_t planned = 0, ringed = 0;
    const push_target *pt, *ttmp;
    HASH_ITER(hh, p->targets, pt, ttmp)
    {
        planned += pt->planned;
        const push_pair *pr;
        DL_FOREACH(pt->ring, pr)
        {
            if (pr->nq == 0 || pr->key >> 32 != pt->worker)
                return "a target's ring holds an empty pair or one of another target";
            ringed++;
        }
    }
    if (ringed != HASH_COUNT(p->pairs))
        return "a pair of moves is in no target's ring";
    uint64_t live = 0;
    const push_plan *pl, *ptmp;
    HASH_ITER(hh, p->plans, pl, ptmp)
    {
        if (!pl->t->planned)
            return "a plan names a task without `planned`";
        if (pl->t->state != T_WAITING && pl->t->state != T_READY)
            return "a plan names a task that is neither waiting nor ready";
        live += target_find(p, pl->worker) != NULL;
    }
    if (planned != live)
        return "the targets' planned counts differ from the plans naming them";
    return NULL;
}
