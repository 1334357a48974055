/*
 * Placement: which worker a ready task goes to, and the dispatch pass that sends them.
 *
 * A dispatch pass (dispatch, started by sched__kick) walks the ready queue deepest first, and
 * sends each task its graph admits to the worker pick_worker chooses, in that worker's TASK_RUNS
 * batch. Placement is O(workers × arguments) per task, and each worker gets at most slots × depth
 * tasks, where depth follows the function's observed run time so that about queue_target_us of
 * work waits per slot: short tasks are pipelined deeply, long ones are not hoarded by one worker.
 * Queued work goes to a worker in short runs (run_on), within a grain of the least loaded.
 * A reduce whose inputs are being moved to the worker it is planned on (push.c) waits for that
 * worker, as a task placed by name does.
 * A long task (depth 1) goes to a free slot when there is one; when every slot is busy, one
 * more per slot may wait on a worker (queued), which then fetches its inputs while the task
 * before it runs; a worker that goes idle while such a task (or one of a function not run yet)
 * waits elsewhere and nothing is ready takes it back (take_back).
 * Big sources (pick_spread) are dealt evenly over the workers instead of to whichever frees a
 * slot first: what they make is where the rest of the job works on it, and in a shuffle every
 * worker's share of it crosses that worker's link.
 * The rest of a task's life (intake, dependencies, sending ahead, completion) is in tasks.c.
 */
#include <stdio.h>
#include <string.h>

#include <utlist.h>

#include "sched_int.h"

/* Tasks per slot a long task may wait behind (the running one included). */
#define LONG_QUEUE_DEPTH 2

static uint32_t depth_for(const sched *s, const sched_fn *f)
{
    if (f->runs == 0)
        return 2;
    double d = (double)s->opts.queue_target_us / (f->ewma_us > 1.0 ? f->ewma_us : 1.0);
    if (d < 1.0)
        return 1;
    if (d > s->opts.max_depth)
        return s->opts.max_depth;
    return (uint32_t)d;
}

/* The worker that computed the task's largest computed input, or NULL. */
static sched_worker *home_worker(sched *s, const sched_task *t)
{
    const sched_obj *best = NULL;
    const sched_arg *a = sched__task_args(t);
    for (uint32_t i = 0; i < t->nargs; i++, a = sched__arg_next(a)) {
        const sched_obj *o = a->obj;
        if (o != NULL && o->home != 0 && (best == NULL || o->size > best->size))
            best = o;
    }
    return best != NULL ? sched__worker_by_id(s, best->home) : NULL;
}

static bool worker_takes(const sched_worker *w, uint32_t depth)
{
    return !sched__worker_paused(w) && w->assigned < (uint64_t)w->slots * depth &&
           !proto_conn_is_closing(w->conn);
}

/* Bytes of the task's stored (not inline) inputs that worker id holds. */
static uint64_t local_bytes(const sched_task *t, uint32_t id)
{
    uint64_t local = 0;
    const sched_arg *a = sched__task_args(t);
    for (uint32_t i = 0; i < t->nargs; i++, a = sched__arg_next(a)) {
        const sched_obj *o = a->obj;
        if (o == NULL || o->has_inline)
            continue;
        for (uint32_t j = 0; j < o->nlocs; j++)
            if (o->locs[j] == id)
                local += o->size;
    }
    return local;
}

/* Queued work (every worker's slots are full: w, the least loaded, has none free) goes in runs to
 * one worker, the one given the last task placed by load, while its load stays below w's plus a
 * grain of an eighth of the queue depth (a fraction of queue_target_us of work). Tasks in a row
 * then share one worker's frame instead of going one per worker round robin: with thousands of
 * workers, touching a different worker (its record, connection and frame) for every task is
 * most of what placing it costs, in cache misses. Returns the worker to use: w or s->fill. */
static sched_worker *run_on(const sched *s, sched_worker *w, uint32_t depth)
{
    sched_worker *f = s->fill;
    uint64_t grain = depth / 8;
    if (f == NULL || f == w || grain == 0 || w->assigned < w->slots || !worker_takes(f, depth))
        return w;
    /* f->assigned / f->slots < w->assigned / w->slots + grain, exactly. */
    return (uint64_t)f->assigned * w->slots < ((uint64_t)w->assigned + grain * w->slots) * f->slots
               ? f
               : w;
}

/* Without a scan over the workers: only those holding an input are looked at (the inputs'
 * location lists are short), then the least loaded worker, first in the load buckets. Returns
 * NULL with *scan set when that one is paused or closing (rare): the caller scans. */
static sched_worker *pick_indexed(sched *s, const sched_task *t, uint32_t depth, bool *scan)
{
    sched_worker *best = NULL;
    uint64_t best_local = 0;
    const sched_arg *a = sched__task_args(t);
    for (uint32_t i = 0; i < t->nargs; i++, a = sched__arg_next(a)) {
        const sched_obj *o = a->obj;
        if (o == NULL || o->has_inline || o->size == 0)
            continue;
        for (uint32_t j = 0; j < o->nlocs; j++) {
            sched_worker *w = sched__worker_by_id(s, o->locs[j]);
            if (w == NULL || w == best || !worker_takes(w, depth))
                continue;
            uint64_t local = local_bytes(t, w->id);
            if (best == NULL || local > best_local ||
                (local == best_local && sched__worker_less(w, best))) {
                best = w;
                best_local = local;
            }
        }
    }
    if (best != NULL)
        return best;
    sched_worker *w = sched__worker_least_loaded(s);
    if (w == NULL)
        return NULL;
    if (sched__worker_paused(w) || proto_conn_is_closing(w->conn)) {
        *scan = true;
        return NULL;
    }
    /* The least loaded worker's queue is full: so is every other's. */
    if (w->assigned >= (uint64_t)w->slots * depth)
        return NULL;
    s->fill = run_on(s, w, depth);
    return s->fill;
}

bool sched__fn_uploaded(sched_fn *f)
{
    if (f->uploaded == 0) {
        size_t len = strlen(f->name);
        bool up = memchr(f->name, '@', len) != NULL && proto_plugin_fn_prefix(f->name, len) != NULL;
        f->uploaded = up ? 1 : -1;
    }
    return f->uploaded > 0;
}

/* Whether t names a function of an uploaded plugin while some connected worker runs none:
 * then only the workers that do may take it. */
static bool needs_upload_worker(const sched *s, const sched_task *t)
{
    return sched__fn_uploaded(t->fn) && s->upload_workers < s->nworkers;
}

/* Sources whose outputs in their graph average at least this are dealt evenly. */
#define SPREAD_MIN_BYTES (1u << 20)

/* Whether t may be a big source: a task of its graph's first level that reads values only (no
 * stored object, whose place would matter) and whose function's last output was stored. The
 * deal counts these from the first, before any has made its output. */
static bool source_maybe_big(const sched_task *t)
{
    if (t->depth != 0 || t->fn->inline_out)
        return false;
    const sched_arg *a = sched__task_args(t);
    for (uint32_t i = 0; i < t->nargs; i++, a = sched__arg_next(a))
        if (a->obj != NULL && !a->obj->has_inline)
            return false;
    return true;
}

/* Whether t is a big source: one in a graph whose sources make stored outputs of
 * SPREAD_MIN_BYTES or more on average. */
static bool spreads(const sched_task *t)
{
    return t->graph->avg_src_out >= SPREAD_MIN_BYTES && source_maybe_big(t);
}

static uint32_t spread_count(const sched_graph *g, uint32_t worker)
{
    sched_spread *e = NULL;
    HASH_FIND(hh, g->spread, &worker, sizeof worker, e);
    return e != NULL ? e->n : 0;
}

static void spread_add(sched_graph *g, uint32_t worker)
{
    sched_spread *e = NULL;
    HASH_FIND(hh, g->spread, &worker, sizeof worker, e);
    if (e == NULL) {
        e = spw_calloc(SPW_MOD_SCHED, 1, sizeof *e);
        e->worker = worker;
        HASH_ADD(hh, g->spread, worker, sizeof e->worker, e);
    }
    e->n++;
}

void sched__spread_undo(const sched_task *t, uint32_t worker)
{
    sched_spread *e = NULL;
    if (source_maybe_big(t))
        HASH_FIND(hh, t->graph->spread, &worker, sizeof worker, e);
    if (e != NULL && e->n > 0)
        e->n--;
}

void sched__spread_free(sched_graph *g)
{
    sched_spread *e, *tmp;
    HASH_ITER(hh, g->spread, e, tmp)
    {
        HASH_DEL(g->spread, e);
        spw_free(e);
    }
}

/* A big source's worker: the one with a free place (within depth) that was given the fewest of
 * its graph's big sources per slot, when no worker in the deal was given fewer; else NULL with
 * *held set when it waits for its turn (a worker behind in the deal is busy). In the deal are
 * the workers that may run it and were given one, or have a free place now: one busy with other
 * work from the start does not hold the others up, and joins when it frees a slot. A paused
 * worker is left out (its store may stay full for long); one taken back from a worker stops
 * counting there (sched__spread_undo). */
static sched_worker *pick_spread(sched *s, const sched_task *t, uint32_t depth, bool *held)
{
    sched_graph *g = t->graph;
    if (g->spread_held == s->pass) {
        *held = true; /* nothing freed since, in this pass */
        return NULL;
    }
    bool upload = needs_upload_worker(s, t);
    sched_worker *best = NULL, *least = NULL;
    uint64_t best_n = 0, least_n = 0;
    for (uint32_t k = 0; k < s->nworkers; k++) {
        sched_worker *w = s->workers[(s->rr + k) % s->nworkers];
        if (sched__worker_paused(w) || proto_conn_is_closing(w->conn) ||
            (upload && !w->runs_uploads))
            continue;
        uint64_t n = spread_count(g, w->id);
        bool takes = worker_takes(w, depth);
        if (n == 0 && !takes)
            continue;
        uint32_t slots = w->slots ? w->slots : 1;
        /* Per slot, exactly: n / slots < least_n / least->slots. */
        if (least == NULL || n * least->slots < least_n * slots) {
            least = w;
            least_n = n;
        }
        if (takes && (best == NULL || n * best->slots < best_n * slots)) {
            best = w;
            best_n = n;
        }
    }
    if (best == NULL)
        return NULL; /* no free place anywhere */
    if (best_n * least->slots > least_n * best->slots) {
        g->spread_held = s->pass;
        *held = true;
        return NULL;
    }
    s->rr++;
    return best;
}

/* Placement. Locality first: a task goes to the worker that computed its (largest) input when
 * that worker has a free slot, as Ray does for chains, so a dependent chain stays on one warm
 * worker whatever the cluster's size and its inline results never move. Otherwise the worker
 * holding most of its input bytes in its store, then the least loaded, within each worker's
 * queue depth (slots x depth_for). */
static sched_worker *pick_at(sched *s, const sched_task *t, uint32_t depth)
{
    bool upload = needs_upload_worker(s, t);
    if (!t->placed && !upload) {
        sched_worker *h = home_worker(s, t);
        if (h != NULL && !sched__worker_paused(h) && h->assigned < h->slots &&
            !proto_conn_is_closing(h->conn))
            return h;
        bool scan = false;
        sched_worker *w = pick_indexed(s, t, depth, &scan);
        if (!scan)
            return w;
    }
    /* A task placed by name or of an uploaded plugin, or a paused or closing worker first in
     * the load buckets. */
    sched_worker *best = NULL;
    uint64_t best_local = 0;
    double best_load = 0;
    const char *place = sched__task_place(t); /* walks the arguments: once, not per worker */
    for (uint32_t k = 0; k < s->nworkers; k++) {
        sched_worker *w = s->workers[(s->rr + k) % s->nworkers];
        if (sched__worker_paused(w) || w->assigned >= (uint64_t)w->slots * depth ||
            proto_conn_is_closing(w->conn))
            continue;
        if ((place != NULL && strcmp(place, w->name) != 0) || (upload && !w->runs_uploads))
            continue;
        uint64_t local = local_bytes(t, w->id);
        double load = (double)w->assigned / (double)(w->slots ? w->slots : 1);
        if (best == NULL || local > best_local || (local == best_local && load < best_load)) {
            best = w;
            best_local = local;
            best_load = load;
        }
    }
    if (best != NULL)
        s->rr++;
    return best;
}

/* Whether t may wait on a worker behind a running task: a long task (depth 1) that has not just
 * been taken back from such a wait, when queueing is allowed at all. */
static bool may_queue(const sched *s, const sched_task *t, uint32_t depth)
{
    return depth == 1 && !t->taken && s->opts.max_depth >= LONG_QUEUE_DEPTH;
}

/* The worker t goes to now, or NULL: *held is set when it waits for its turn in a deal of big
 * sources while others have room. */
static sched_worker *pick_worker(sched *s, const sched_task *t, bool *held)
{
    uint32_t depth = depth_for(s, t->fn);
    if (!t->placed && !t->planned && spreads(t)) {
        sched_worker *w = pick_spread(s, t, depth, held);
        if (w == NULL && !*held && may_queue(s, t, depth))
            w = pick_spread(s, t, LONG_QUEUE_DEPTH, held);
        return w;
    }
    sched_worker *p = t->planned ? sched__push_plan_worker(s, t) : NULL;
    if (p != NULL) {
        /* Its inputs are being moved there (push.c): it waits for that worker. */
        bool takes = worker_takes(p, depth) ||
                     (may_queue(s, t, depth) && worker_takes(p, LONG_QUEUE_DEPTH));
        return takes ? p : NULL;
    }
    sched_worker *w = pick_at(s, t, depth);
    if (w == NULL && may_queue(s, t, depth))
        w = pick_at(s, t, LONG_QUEUE_DEPTH);
    return w;
}

typedef struct warg_iter {
    sched *s;
    const sched_task *t;
    const sched_arg *next; /* argument i (the encoder asks for them in order) */
    sched_locs locs;
} warg_iter;

/* Argument i of a task as its worker gets it: the bytes, or the object and where it is. */
static void put_warg(proto_enc *e, uint32_t i, void *arg)
{
    warg_iter *it = arg;
    if (i == 0)
        it->next = sched__task_args(it->t);
    const sched_arg *a = it->next;
    it->next = sched__arg_next(a);
    const sched_obj *o = a->obj;
    if (a->kind == PROTO_ARG_INLINE || a->kept ||
        (o != NULL && o->state != OBJ_PENDING && (o->has_inline || o->size == 0))) {
        const uint8_t *p;
        uint64_t len;
        if (a->kind == PROTO_ARG_INLINE) {
            p = sched__arg_value(a);
            len = a->inline_len;
        } else if (a->kept) {
            p = sched__arg_kept_value(a, &len); /* a lineage run: the object may be gone */
        } else {
            p = sched__obj_inline(o);
            len = o->size;
        }
        if (a->kind == PROTO_ARG_VIEW) {
            p += a->off;
            len = a->len;
        }
        proto_put_warg_rec(e, &(proto_warg_rec){.kind = PROTO_ARG_INLINE,
                                                .value = {p != NULL ? (const void *)p : "", len}});
        return;
    }
    proto_put_warg_rec(e, &(proto_warg_rec){.kind = a->kind,
                                            .obj = &o->id,
                                            .off = a->kind == PROTO_ARG_VIEW ? a->off : 0,
                                            .len = a->kind == PROTO_ARG_VIEW ? a->len : o->size,
                                            .obj_size = o->size,
                                            .locs = sched__locs(&it->locs, it->s, o)});
}

int sched__task_send(sched *s, const sched_task *t, sched_worker *w, uint32_t flags)
{
    warg_iter it = {.s = s, .t = t};
    return proto_batch_run(w->conn, PROTO_TASK_RUNS,
                           &(proto_run_rec){.id = sched__task_out(t)->id,
                                            .fn = t->fn->name,
                                            .args = {.n = t->nargs, .put = put_warg, .arg = &it},
                                            .flags = flags,
                                            .nouts = t->nouts,
                                            .omit_nouts = t->nouts <= 1});
}

/* Checks what can only be checked once inputs exist. Returns 0 or fills err. */
static int check_inputs(const sched_task *t, char *err, size_t errlen)
{
    const sched_arg *a = sched__task_args(t);
    for (uint32_t i = 0; i < t->nargs; i++, a = sched__arg_next(a)) {
        if (a->kind != PROTO_ARG_VIEW || a->obj == NULL)
            continue;
        if (a->off > a->obj->size || a->len > a->obj->size - a->off) {
            snprintf(err, errlen, "argument %u: view [%llu, +%llu) outside an object of %llu bytes",
                     i, (unsigned long long)a->off, (unsigned long long)a->len,
                     (unsigned long long)a->obj->size);
            return SPW_EINVAL;
        }
    }
    return 0;
}

/* Sends t to w. Returns false if it could not (too large for the wire): t is failed then, and
 * the failure may have freed other records, t's included. */
static bool assign(sched *s, sched_task *t, sched_worker *w)
{
    t->flags &= ~PROTO_TASK_AHEAD; /* sent as usual: its worker may not answer SPW_EAHEAD */
    /* The tasks one dispatch pass gives a worker share a TASK_RUNS frame. */
    int rc = sched__task_send(s, t, w, t->flags);
    if (rc != 0) {
        char msg[128];
        snprintf(msg, sizeof msg, "task message too large for the wire: %s", spw_strerror(rc));
        sched__task_fail(s, t, rc, msg);
        return false;
    }
    if (source_maybe_big(t))
        spread_add(t->graph, w->id);
    sched__task_set_state(s, t, T_ASSIGNED);
    t->worker = w;
    t->graph->inflight++;
    t->taken = 0;
    /* Queued behind a running task: a long one, or one of a function not run yet (which may be
     * long). Only a task any worker may run is taken back: one bound to a worker by name, or to
     * those that run uploads, would come back to the worker it left. */
    if (w->assigned >= w->slots && (t->fn->runs == 0 || depth_for(s, t->fn) == 1) &&
        !t->placed && !needs_upload_worker(s, t)) {
        t->queued = 1;
        s->nqueued++;
    }
    w->assigned++;
    w->assign_seq = ++s->assign_seq;
    sched__worker_load(s, w);
    DL_APPEND2(w->tasks, t, wprev, wnext);
    sched__ahead_walk(s, t, w);
    return true;
}

/* Whether the task's graph lets it start now. The byte cap holds back sources (tasks that
 * only read puts and values): they are what makes a job's live data grow, while deeper tasks
 * consume it. A graph with nothing in flight may always start one task. */
bool sched__graph_admits(const sched_graph *g, const sched_task *t)
{
    if (g->inflight == 0)
        return true;
    if (g->max_tasks != 0 && g->inflight >= g->max_tasks)
        return false;
    if (g->max_bytes != 0 && t->depth == 0 &&
        (double)g->live_bytes + (double)(g->inflight + 1) * g->avg_src_out > (double)g->max_bytes)
        return false;
    return true;
}

/* A ready task bound to a worker name no connected worker has: it waits --place-wait for such
 * a worker (a restart under systemd keeps the name), then fails. Returns whether it failed. */
static bool place_expired(sched *s, sched_task *t)
{
    /* Finding the place field walks the arguments: once. */
    uint64_t *missing = sched__place_missing(t);
    const char *place = (const char *)(missing + 1);
    for (uint32_t i = 0; i < s->nworkers; i++)
        if (strcmp(s->workers[i]->name, place) == 0) {
            *missing = 0;
            return false;
        }
    uint64_t now = spw_now_ns();
    if (*missing == 0)
        *missing = now;
    if (s->opts.place_wait_ms == 0 || now - *missing < (uint64_t)s->opts.place_wait_ms * 1000000ULL)
        return false;
    char msg[256];
    snprintf(msg, sizeof msg,
             "bound to worker '%s', and no worker of that name has been "
             "connected for %u ms",
             place, s->opts.place_wait_ms);
    sched__task_fail(s, t, SPW_ENOWORKER, msg);
    return true;
}

/* A ready task of an uploaded plugin that no connected worker runs (--allow-plugin-upload no
 * on each): like a task bound to a missing worker, it waits --place-wait for one, then fails.
 * Returns whether it failed. */
static bool upload_expired(sched *s, sched_task *t)
{
    if (s->upload_workers > 0) {
        s->upload_none_ns = 0;
        return false; /* they are busy */
    }
    uint64_t now = spw_now_ns();
    if (s->upload_none_ns == 0)
        s->upload_none_ns = now;
    if (s->opts.place_wait_ms == 0 ||
        now - s->upload_none_ns < (uint64_t)s->opts.place_wait_ms * 1000000ULL)
        return false;
    char msg[256];
    snprintf(msg, sizeof msg,
             "function %s is in an uploaded plugin, and no connected worker has run uploaded "
             "plugins for %u ms (each has --allow-plugin-upload no)",
             t->fn->name, s->opts.place_wait_ms);
    sched__task_fail(s, t, SPW_ENOWORKER, msg);
    return true;
}

/* A ready task a dispatch pass stepped over (held by its graph's caps, or bound to a worker
 * that cannot take it now) goes behind the others of its depth, so that the next pass looks at
 * those first: else thousands held at the front would hide every task behind them, pass after
 * pass, however many events kicked one. */
static void ready_step_over(sched *s, sched_task *t)
{
    DL_DELETE2(s->ready[t->depth], t, qprev, qnext);
    DL_APPEND2(s->ready[t->depth], t, qprev, qnext);
}

/* Ready tasks a dispatch pass may step over (held by their graph's caps, or bound to a busy
 * worker) before it ends; the next event that frees capacity kicks a new pass. Bounds the work
 * of one loop iteration when many tasks wait on a few caps. */
#define DISPATCH_SKIP_MAX 4096

bool sched__task_unqueue(sched *s, sched_task *t)
{
    bool taking = t->taking;
    s->nqueued -= t->queued;
    s->ntaking -= t->taking;
    t->queued = t->taking = 0;
    return taking;
}

/* Moves smaller than this say more about latency than about the network's rate. */
#define COPY_RATE_MIN_BYTES (1u << 20)

void sched__copy_rate_seen(sched *s, uint64_t bytes, uint64_t took_ns)
{
    if (bytes < COPY_RATE_MIN_BYTES)
        return;
    double rate = (double)bytes * 1000.0 / (double)(took_ns > 1000 ? took_ns : 1000);
    s->copy_rate = s->copy_rate == 0 ? rate : s->copy_rate * 0.9 + rate * 0.1;
}

/* Whether t, queued on v, runs sooner where it is than on a worker its inputs on v must cross
 * the network to: moving them would take longer than it runs. The move's time is their bytes
 * at the rate moves have taken (each among the others under way: a busy network gives a slow
 * rate), before any at COPY_RATE_GUESS bytes per microsecond; the run's time is its function's
 * moving average, none for a function not run yet, so that bytes never move for a gain nobody
 * has seen. */
#define COPY_RATE_GUESS 100.0
static bool stays_with_inputs(const sched *s, const sched_task *t, const sched_worker *v)
{
    uint64_t local = local_bytes(t, v->id);
    if (local == 0)
        return false;
    double rate = s->copy_rate > 0 ? s->copy_rate : COPY_RATE_GUESS;
    return (double)local / rate > (t->fn->runs > 0 ? t->fn->ewma_us : 0.0);
}

/* The last queued long task on v that has not started, is not being taken back and would not
 * rather wait with its inputs, or NULL. */
static sched_task *queued_on(const sched *s, sched_worker *v)
{
    sched_task *last = NULL;
    if (v->assigned <= v->slots)
        return NULL;
    for (sched_task *t = v->tasks; t != NULL; t = t->wnext)
        if (t->queued && !t->taking && t->state == T_ASSIGNED && !stays_with_inputs(s, t, v))
            last = t;
    return last;
}

/* Nothing is ready and a worker has a free slot: long tasks queued on busy workers (the last
 * queued first, none that would rather wait with its inputs) are taken back, one per free slot.
 * The worker answers SPW_ECANCELED for one it has not started (tasks.c requeues it, marked taken:
 * it then goes only to a free slot) and runs one it has. Scans the workers only while some has a
 * free slot and tasks are queued. */
static void take_back(sched *s)
{
    if (s->nqueued <= s->ntaking || s->nready > 0 || s->closing)
        return;
    const sched_worker *least = sched__worker_least_loaded(s);
    if (least == NULL || least->assigned >= least->slots)
        return;
    uint64_t free_slots = 0;
    for (uint32_t k = 0; k < s->nworkers; k++) {
        const sched_worker *w = s->workers[k];
        if (!sched__worker_paused(w) && !proto_conn_is_closing(w->conn) &&
            w->assigned < w->slots)
            free_slots += w->slots - w->assigned;
    }
    for (uint32_t k = 0; k < s->nworkers && s->ntaking < free_slots; k++) {
        sched_worker *v = s->workers[k];
        sched_task *t = queued_on(s, v);
        if (t == NULL || proto_conn_is_closing(v->conn))
            continue;
        t->taking = 1;
        s->ntaking++;
        char hex[33];
        spw_log(SPW_LOG_INFO, "task=%s taken back from worker=%u for an idle worker",
                spw_id_hex(sched__task_out(t)->id, hex), v->id);
        proto_send_task_cancel(v->conn, 0,
                               &(proto_task_cancel_msg){.ids = {&sched__task_out(t)->id, 1}});
    }
}

static void dispatch(uv_idle_t *h)
{
    sched *s = h->data;
    s->pass++;
    /* Deepest first: a task that consumes outputs goes before one that makes more, so a job's
     * live data stays near its width instead of its size. Within a depth, FIFO among the tasks
     * that can go. Tasks held by their graph's caps or bound to a busy worker are stepped over,
     * a bounded number of times per pass, and go behind the rest of their depth; a pass looks at
     * each task of a depth once (up to the depth's last task when it began). */
    int skipped = 0;
    bool full = false;
    for (int d = SCHED_DEPTHS - 1; d >= 0 && !full; d--) {
        sched_task *t = s->ready[d];
        sched_task *last = t != NULL ? t->qprev : NULL; /* utlist: the head's prev is the tail */
        while (t != NULL) {
            sched_task *next = t != last ? t->qnext : NULL;
            char err[256];
            int rc = check_inputs(t, err, sizeof err);
            if (rc != 0) {
                sched__task_fail(s, t, rc, err);
                t = s->ready[d]; /* failing may cascade: rescan this depth */
                last = t != NULL ? t->qprev : NULL;
                continue;
            }
            if (!sched__graph_admits(t->graph, t)) {
                if (++skipped > DISPATCH_SKIP_MAX)
                    goto out;
                ready_step_over(s, t);
                t = next;
                continue;
            }
            bool held = false;
            sched_worker *w = pick_worker(s, t, &held);
            if (w == NULL) {
                bool upload = needs_upload_worker(s, t);
                if (!t->placed && !upload && !t->planned && !held) {
                    full = true; /* no capacity anywhere: later tasks would not fit either */
                    break;
                }
                if (!t->planned && !held &&
                    (t->placed ? place_expired(s, t) : upload_expired(s, t))) {
                    t = s->ready[d]; /* failing may cascade: rescan this depth */
                    last = t != NULL ? t->qprev : NULL;
                    continue;
                }
                if (++skipped > DISPATCH_SKIP_MAX)
                    goto out;
                ready_step_over(s, t);
                t = next;
                continue;
            }
            sched__ready_remove(s, t);
            if (!assign(s, t, w)) {
                /* Failing it may cascade, and cancel the next one: rescan this depth. */
                t = s->ready[d];
                last = t != NULL ? t->qprev : NULL;
                continue;
            }
            t = next;
        }
    }
out:
    uv_idle_stop(&s->kick);
    take_back(s);
    sched__check(s);
}

void sched__kick(sched *s)
{
    if (!s->closing && (s->nready > 0 || s->nqueued > s->ntaking) && s->nworkers > 0)
        uv_idle_start(&s->kick, dispatch);
}
