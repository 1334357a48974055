/*
 * Tasks on a worker: intake of TASK_RUN, getting inputs local and pinned, the executor pool,
 * and reporting completions.
 *
 * Owns: every wtask (in w->tasks by id) and the executor processes. A task is pinned-input
 * complete before it reaches an executor, so an executor only reads memory that cannot move.
 * Each executor runs its FIFO in order: the head is the running task, the rest are queued
 * behind it (deep queues only for short tasks, see wrk__dispatch). When an executor dies its
 * head task fails with the signal as the reason and the others go back to the ready queue.
 * Invariants: ex->inflight equals the length of ex's FIFO; a task is in exactly one of the
 * ready queue, an executor FIFO, or waiting for inputs (t->missing > 0).
 * Executors are recycled (their socket closed once their FIFO is empty, a new one started) after
 * a task over its memory limit, after --executor-max-tasks tasks, or when their resident
 * private memory passes --executor-max-rss; none gets new tasks while marked.
 */
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <utlist.h>

#include "worker_int.h"

static void respawn_cb(uv_timer_t *t);

/* ------------------------------------------------------------ completion */

/* Takes t's start notice, if one is waiting, off the next TASK_STARTED frame. */
static void started_strike(wrk *w, wtask *t)
{
    if (t->started_slot == 0)
        return;
    w->started[t->started_slot - 1] = NULL;
    t->started_slot = 0;
    if (--w->nstarted_live == 0) {
        w->nstarted = 0; /* nothing left to tell */
        if (!w->closing)
            uv_timer_stop(&w->started_timer);
    }
}

/* Frees a task that is on no list: its record, and an heir still waiting for it (the worker
 * closes). */
static void task_release(wrk *w, wtask *t)
{
    if (t->heir != NULL)
        task_release(w, t->heir);
    wrk__plugin_unuse(w, t);
    spw_free(t->fail_msg);
    if (t->slab)
        spw_slab_free(&w->task_slab, t);
    else
        spw_free(t);
}

/* Drops the outputs allocated for t and not sealed (it failed, or goes back to the queue). */
static void outs_abort(wrk *w, wtask *t)
{
    t->out_bytes = 0;
    if (t->out != NULL) {
        ost_obj_abort(w->store, t->out);
        t->out = NULL;
    }
    for (uint32_t i = 0; t->outx != NULL && i + 1 < t->nouts; i++) {
        if (t->outx[i] != NULL) {
            ost_obj_abort(w->store, t->outx[i]);
            t->outx[i] = NULL;
        }
    }
}

static void task_free(wrk *w, wtask *t)
{
    for (uint32_t i = 0; i < t->nargs; i++) {
        warg *a = &t->args[i];
        if (a->pinned) {
            /* Released by the scheduler in a moment (or read by another task): not worth
             * writing out to keep headroom meanwhile. Marked while pinned: the unpin may free
             * it. */
            ost_obj_spare(w->store, a->obj, WRK_SPARE_USED_MS);
            ost_obj_unpin(w->store, a->obj);
            a->pinned = 0;
        }
        if (a->owned) {
            spw_free((void *)a->inline_data);
            a->owned = 0;
        }
    }
    if (t->local > 0)
        DL_DELETE2(w->ahead, t, aprev, anext);
    if (t->adm_listed)
        DL_DELETE2(w->adm_head, t, adm_prev, adm_next);
    outs_abort(w, t);
    spw_free(t->outx);
    t->outx = NULL;
    if (t->pre != NULL) {
        ost_obj_abort(w->store, t->pre);
        t->pre = NULL;
    }
    wrk__admit_release(w, t); /* its inputs are unpinned above */
    started_strike(w, t); /* its end tells the scheduler */
    HASH_DEL(w->tasks, t);
    task_release(w, t);
}

/* Notes that t reached the head of its executor's FIFO: it runs now. The notices go out in one
 * TASK_STARTED frame WRK_STARTED_DELAY_MS after the first; a task that ends sooner is struck out
 * (task_free), so no notice ever follows a task's end, and short tasks cost none. */
static void started_note(wrk *w, wtask *t)
{
    if (t->gen != w->gen || t->started_slot != 0)
        return; /* its scheduler is gone (the next one never heard of it), or already noted */
    if (w->nstarted == w->capstarted) {
        w->capstarted = w->capstarted ? w->capstarted * 2 : 64;
        w->started = spw_realloc(SPW_MOD_WORKER, w->started, w->capstarted * sizeof *w->started);
        w->started_ids = spw_realloc(SPW_MOD_WORKER, w->started_ids,
                                     w->capstarted * sizeof *w->started_ids);
    }
    if (w->nstarted_live++ == 0 && !w->closing)
        uv_timer_start(&w->started_timer, wrk__started_timer_cb, WRK_STARTED_DELAY_MS, 0);
    w->started[w->nstarted++] = t;
    t->started_slot = w->nstarted;
}

/* Forgets the notices gathered so far (sent, or for a scheduler that is gone). */
static void started_clear(wrk *w)
{
    for (uint32_t i = 0; i < w->nstarted; i++)
        if (w->started[i] != NULL)
            w->started[i]->started_slot = 0;
    w->nstarted = w->nstarted_live = 0;
    if (!w->closing)
        uv_timer_stop(&w->started_timer);
}

void wrk__started_flush(wrk *w)
{
    uint32_t n = 0;
    for (uint32_t i = 0; i < w->nstarted; i++)
        if (w->started[i] != NULL)
            w->started_ids[n++] = w->started[i]->id;
    started_clear(w);
    if (n > 0 && w->sched != NULL)
        proto_send_task_started(w->sched, 0, &(proto_task_started_msg){.ids = {w->started_ids, n}});
}

void wrk__started_timer_cb(uv_timer_t *h)
{
    wrk__started_flush(h->data);
}

static void ahead_settle(wrk *w, spw_id id, int status, uint64_t size, const uint8_t *inl);
static void heir_start(wrk *w, wtask *t);
static void admit_pump(wrk *w);

/* Record i of a completion's outs, forwarded from the executor's (records of kind OUT). */
static void put_out_fwd(proto_enc *e, uint32_t i, void *arg)
{
    const proto_val *r = PROTO_REC((const proto_val *)arg, i);
    proto_put_out_rec(e, &(proto_out_rec){
                             .size = r[R_OUT_SIZE].u,
                             .value = r[R_OUT_INLINE].nil
                                          ? (proto_bytes){NULL, 0}
                                          : (proto_bytes){r[R_OUT_INLINE].bin.ptr != NULL
                                                              ? r[R_OUT_INLINE].bin.ptr
                                                              : (const void *)"",
                                                          r[R_OUT_INLINE].bin.len}});
}

static void task_report_outs(wrk *w, wtask *t, int status, uint64_t size, const uint8_t *inl,
                             const char *err, uint64_t run_us, const proto_val *outs);

/* Reports a finished task to the scheduler and frees it. The output, if in the store, has been
 * sealed by the caller. */
static void task_report(wrk *w, wtask *t, int status, uint64_t size, const uint8_t *inl,
                        const char *err, uint64_t run_us)
{
    task_report_outs(w, t, status, size, inl, err, run_us, NULL);
}

/* task_report for a task of several outputs: outs is the executor's list of outputs 1.. (an
 * array of OUT records), forwarded as it is; NULL for one output or a failure. */
static void task_report_outs(wrk *w, wtask *t, int status, uint64_t size, const uint8_t *inl,
                             const char *err, uint64_t run_us, const proto_val *outs)
{
    if (status == 0)
        w->tasks_done++;
    else if (status == SPW_ECANCELED)
        w->tasks_cancelled++;
    else
        w->tasks_failed++;
    if (w->sched != NULL && t->gen == w->gen) {
        /* Completions of one loop iteration share a TASK_DONES frame. */
        proto_batch_done(w->sched, PROTO_TASK_DONES,
                         &(proto_done_rec){.id = t->id,
                                           .status = status,
                                           .size = size,
                                           .value = {inl, inl != NULL ? size : 0},
                                           .err = err,
                                           .run_us = run_us,
                                           .outs = {.n = outs != NULL ? outs->arr.n : 0,
                                                    .put = put_out_fwd,
                                                    .arg = (void *)(uintptr_t)outs},
                                           .omit_outs = outs == NULL});
    }
    spw_id id = t->id;
    if (status == 0 && inl != NULL && size <= WRK_KEPT_MAX && t->gen == w->gen) {
        uint32_t k = w->kept_next++ % WRK_KEPT_N;
        w->kept[k].id = id;
        w->kept[k].len = (uint32_t)size;
        memcpy(w->kept[k].v, inl, size);
    }
    wtask *heir = t->heir;
    t->heir = NULL;
    task_free(w, t);
    if (w->ahead != NULL)
        ahead_settle(w, id, status, size, inl);
    if (heir != NULL)
        heir_start(w, heir);
    if (w->adm_head != NULL)
        admit_pump(w); /* its reservation, if it held one, is free */
}

static void ready_push(wrk *w, wtask *t, bool front)
{
    t->state = WT_QUEUED;
    t->ex = NULL;
    if (front) {
        t->next = w->ready_head;
        w->ready_head = t;
        if (w->ready_tail == NULL)
            w->ready_tail = t;
    } else {
        t->next = NULL;
        if (w->ready_tail != NULL)
            w->ready_tail->next = t;
        else
            w->ready_head = t;
        w->ready_tail = t;
    }
}

void wrk__input_ready(wrk *w, wtask *t, uint32_t arg, int status, const char *msg)
{
    SPW_ASSERT(t->missing > 0);
    t->missing--;
    const warg *in = &t->args[arg];
    char range[128];
    if (status == 0 && in->pinned &&
        (in->off > ost_obj_size(in->obj) || in->len > ost_obj_size(in->obj) - in->off)) {
        /* The scheduler has its size wrong: the executor would read the bytes after it. */
        snprintf(range, sizeof range, "range %llu+%llu outside its %llu bytes",
                 (unsigned long long)in->off, (unsigned long long)in->len,
                 (unsigned long long)ost_obj_size(in->obj));
        status = SPW_EINVAL;
        msg = range;
    }
    if (status != 0 && t->fail_status == 0) {
        char buf[512];
        char hex[33];
        snprintf(buf, sizeof buf, "input %u (obj=%s) unavailable: %s", arg,
                 spw_id_hex(t->args[arg].id, hex), msg != NULL ? msg : spw_strerror(status));
        t->fail_status = status;
        t->fail_msg = spw_strdup(SPW_MOD_WORKER, buf);
    }
    if (t->missing > 0)
        return;
    if (t->fail_status != 0) {
        task_report(w, t, t->fail_status, 0, NULL, t->fail_msg, 0);
        return;
    }
    if (t->gen != w->gen) {
        task_report(w, t, SPW_ECLOSED, 0, NULL, "the scheduler that sent it is gone", 0);
        return;
    }
    ready_push(w, t, (t->flags & PROTO_TASK_AHEAD) != 0); /* a chain's next hop goes first */
    wrk__dispatch(w);
}

/* ost_obj_get_async's completion: the argument names the task by id because the task may be
 * gone by the time a restore finishes. */
typedef struct input_req {
    wrk *w;
    spw_id task;
    uint32_t arg;
} input_req;

static void input_done(void *arg, int status, ost_obj *o)
{
    input_req *r = arg;
    wrk *w = r->w;
    uint32_t idx = r->arg;
    wtask *t;
    HASH_FIND(hh, w->tasks, &r->task, sizeof r->task, t);
    spw_free(r);
    if (t == NULL || w->closing) {
        if (status == 0)
            ost_obj_unpin(w->store, o);
        return;
    }
    if (status == 0) {
        t->args[idx].obj = o;
        t->args[idx].pinned = 1;
    }
    wrk__input_ready(w, t, idx, status, NULL);
}

/* ------------------------------------------------------- tasks sent ahead */

/* A task the scheduler sends ahead (PROTO_TASK_AHEAD) names, among its whole-object arguments,
 * outputs of tasks it sent here earlier that have not finished. Such an argument waits (local)
 * for its producer instead of being fetched: the moment the producer ends here, its result
 * becomes the argument (its inline value copied, or its sealed object pinned) and the task joins
 * the front of the ready queue, so a chain's hop costs executor -> worker -> executor. A
 * producer that fails here, for whatever reason, takes its waiting dependents along: each is
 * answered SPW_EAHEAD (dropped unrun), and the scheduler then dispatches it as usual. So is a
 * task whose producer is neither here nor sealed in the store when it arrives (its inline result
 * went to the scheduler already). Every task sent ahead is answered with one TASK_DONE. */

/* a becomes the inline value v of len bytes (a producer's small result), copied. */
static void arg_set_inline(warg *a, const uint8_t *v, uint32_t len)
{
    a->kind = PROTO_ARG_INLINE;
    a->inline_len = len;
    a->inline_data = NULL;
    if (len > 0) {
        uint8_t *copy = spw_malloc(SPW_MOD_WORKER, len);
        memcpy(copy, v, len);
        a->inline_data = copy;
        a->owned = 1;
    }
}

/* A producer here ended (status 0: with this result, inline or in the store): the arguments
 * waiting for it get it, or their tasks are dropped. All of them stop waiting first, so that no
 * check in between (a dispatch) sees one waiting for a producer that is gone. */
static void ahead_settle(wrk *w, spw_id id, int status, uint64_t size, const uint8_t *inl)
{
    input_req *todo = NULL;
    uint32_t n = 0, cap = 0;
    wtask *d, *tmp;
    DL_FOREACH_SAFE2(w->ahead, d, tmp, anext)
    {
        for (uint32_t i = 0; i < d->nargs; i++) {
            if (!d->args[i].local || !spw_id_eq(d->args[i].id, id))
                continue;
            d->args[i].local = 0;
            if (--d->local == 0)
                DL_DELETE2(w->ahead, d, aprev, anext);
            if (n == cap) {
                cap = cap ? cap * 2 : 4;
                todo = spw_realloc(SPW_MOD_WORKER, todo, cap * sizeof *todo);
            }
            todo[n++] = (input_req){w, d->id, i};
        }
    }
    for (uint32_t k = 0; k < n; k++) {
        /* Each step may free tasks (a drop cascades): find it again by id. */
        HASH_FIND(hh, w->tasks, &todo[k].task, sizeof todo[k].task, d);
        if (d == NULL)
            continue;
        uint32_t i = todo[k].arg;
        warg *a = &d->args[i];
        ost_obj *o = NULL;
        /* A task waiting for admission gets nothing yet: a stored output is got when it is
         * admitted, and a failure answers it at once (it holds nothing to wait for). */
        bool waiting = d->state == WT_ADMIT;
        const char *gone = NULL;
        if (status != 0) {
            gone = "sent ahead; its producer failed here";
        } else if (inl != NULL || size == 0) {
            arg_set_inline(a, inl, (uint32_t)size);
            if (waiting)
                d->missing--;
            else
                wrk__input_ready(w, d, i, 0, NULL);
        } else if ((o = ost_obj_find(w->store, id)) == NULL || ost_obj_state(o) != OST_SEALED) {
            gone = "sent ahead; its producer's output is gone";
        } else if (waiting) {
            a->len = a->objsize = ost_obj_size(o);
        } else {
            a->len = a->objsize = ost_obj_size(o);
            wrk__admit_late(w, d);
            input_req *r = spw_malloc(SPW_MOD_WORKER, sizeof *r);
            *r = todo[k];
            ost_obj_get_async(w->store, o, input_done, r);
        }
        if (gone != NULL && waiting)
            task_report(w, d, SPW_EAHEAD, 0, NULL, gone, 0);
        else if (gone != NULL)
            wrk__input_ready(w, d, i, SPW_EAHEAD, gone);
    }
    spw_free(todo);
}

/* Whether a's object is a small result kept here (WRK_KEPT_N): then a is that value now. */
static bool ahead_kept(wrk *w, warg *a)
{
    for (uint32_t k = 0; k < WRK_KEPT_N; k++) {
        if (!spw_id_eq(w->kept[k].id, a->id) || spw_id_is_nil(a->id))
            continue;
        arg_set_inline(a, w->kept[k].v, w->kept[k].len);
        return true;
    }
    return false;
}

/* Intake of a task sent ahead: marks the arguments its producers here will make. Returns 0, or
 * -1 when it was answered SPW_EAHEAD (and freed): an input is neither here nor being made. */
static int ahead_intake(wrk *w, wtask *t)
{
    char hex[33], msg[128];
    for (uint32_t i = 0; i < t->nargs; i++) {
        warg *a = &t->args[i];
        if (a->kind == PROTO_ARG_INLINE || a->pinned)
            continue; /* pinned: got already (prev_fallback takes a task in again) */
        ost_obj *o = ost_obj_find(w->store, a->id);
        if (o != NULL && ost_obj_state(o) == OST_SEALED) {
            if (a->kind == PROTO_ARG_OBJ) /* made since it was sent: its size was unknown */
                a->len = a->objsize = ost_obj_size(o);
            continue;
        }
        wtask *p;
        HASH_FIND(hh, w->tasks, &a->id, sizeof a->id, p);
        if (p == NULL && a->kind == PROTO_ARG_OBJ && ahead_kept(w, a)) {
            t->missing--; /* ended here already: its small result was kept */
            continue;
        }
        if (p == NULL || p == t || p->gen != t->gen || a->kind != PROTO_ARG_OBJ) {
            t->local = 0; /* not listed yet */
            snprintf(msg, sizeof msg, "sent ahead; input %u (obj=%s) is not here", i,
                     spw_id_hex(a->id, hex));
            task_report(w, t, SPW_EAHEAD, 0, NULL, msg, 0);
            return -1;
        }
        a->local = 1;
        t->local++;
    }
    if (t->local > 0)
        DL_APPEND2(w->ahead, t, aprev, anext);
    return 0;
}

/* Chains on one executor. A task sent ahead whose every missing input is the output of tasks
 * already sent to one executor goes to that executor at once, queued behind them, each such
 * argument as PROTO_ARG_PREV: the executor runs it on the output it kept from its producer, so a
 * chain's hop costs no round trip through the worker. An executor that does not have the output
 * (the producer failed, its output went to the store, or the task was requeued to another
 * executor) answers SPW_EAHEAD without running it, and prev_fallback takes the task in again
 * the usual way. Both ends are this binary (the worker starts its executors), so the kind needs
 * no negotiation. */

/* Tasks an executor may have queued: 64 deep for short ones, up to WRK_EXEC_DEPTH_MAX for tiny
 * ones, one at a time for long ones (wrk__dispatch). */
static uint32_t exec_depth(const wrk *w)
{
    if (w->ewma_us <= 0 || w->ewma_us >= 1000.0)
        return 1;
    double d = WRK_EXEC_QUEUE_US / w->ewma_us;
    return d >= WRK_EXEC_DEPTH_MAX ? WRK_EXEC_DEPTH_MAX : d > 64 ? (uint32_t)d : 64;
}

/* Whether ex takes new tasks now, up to limit queued. Not while its socket is closing: ex->conn
 * stays set until the close callback, and a task queued on a closed socket, never sent, would
 * be taken for the one the executor was running when it ended (exec_settle fails that one). */
static bool exec_open(const wrk *w, const wrk_exec *ex, uint32_t limit)
{
    return ex->conn != NULL && !proto_conn_is_closing(ex->conn) && ex->inflight < limit &&
           !ex->recycle && (w->opts.exec_max_tasks == 0 || ex->tasks_sent < w->opts.exec_max_tasks);
}

static void exec_send(wrk *w, wrk_exec *ex, wtask *t);

/* Notes whether a task of function fn just stored its output (else it was inline). */
static void stored_note(wrk *w, const char *fn, bool stored)
{
    if (!stored && w->nstored == 0)
        return; /* the common case: no function stores */
    for (uint32_t k = 0; k < WRK_STORED_FNS; k++) {
        if (w->stored_fns[k][0] == '\0' || strcmp(w->stored_fns[k], fn) != 0)
            continue;
        if (!stored) {
            w->stored_fns[k][0] = '\0';
            w->nstored--;
        }
        return;
    }
    if (!stored)
        return;
    uint32_t k = w->stored_next++ % WRK_STORED_FNS;
    w->nstored += w->stored_fns[k][0] == '\0';
    snprintf(w->stored_fns[k], sizeof w->stored_fns[k], "%s", fn);
}

static bool stored_fn(const wrk *w, const char *fn)
{
    for (uint32_t k = 0; k < WRK_STORED_FNS && w->nstored > 0; k++)
        if (w->stored_fns[k][0] != '\0' && strcmp(w->stored_fns[k], fn) == 0)
            return true;
    return false;
}

/* The executor that all of d's missing inputs are being made on, or NULL. Not when a producer's
 * function last stored its output: the executor would not have it, and the task would go there
 * and back for nothing. */
static wrk_exec *ahead_chain_exec(wrk *w, const wtask *d)
{
    if (d->missing != d->local || d->fail_status != 0 || d->state == WT_ADMIT)
        return NULL; /* other inputs still to come, or not admitted yet */
    wrk_exec *ex = NULL;
    for (uint32_t i = 0; i < d->nargs; i++) {
        const warg *a = &d->args[i];
        if (!a->local)
            continue;
        wtask *p;
        HASH_FIND(hh, w->tasks, &a->id, sizeof a->id, p);
        if (p == NULL || p->state != WT_SENT || p->gen != d->gen || (ex != NULL && p->ex != ex) ||
            stored_fn(w, p->fn))
            return NULL;
        ex = p->ex;
    }
    return ex;
}

/* Sends each task sent ahead that can run on its producers' executor there now. */
static void ahead_chain(wrk *w)
{
    /* No deeper than the executor keeps outputs: behind more successful tasks, the producer's
     * would be gone and d answered SPW_EAHEAD. What cannot be chained stays on w->ahead. */
    uint32_t limit = exec_depth(w);
    limit = limit < EXEC_KEPT_N ? limit : EXEC_KEPT_N;
    bool again = true;
    while (again && !w->closing) {
        again = false;
        for (wtask *d = w->ahead; d != NULL; d = d->anext) {
            wrk_exec *ex = ahead_chain_exec(w, d);
            if (ex == NULL || !exec_open(w, ex, limit))
                continue;
            for (uint32_t i = 0; i < d->nargs; i++) {
                if (!d->args[i].local)
                    continue;
                d->args[i].local = 0;
                d->args[i].prev = 1;
                d->prev++;
            }
            DL_DELETE2(w->ahead, d, aprev, anext);
            d->local = 0;
            d->missing = 0;
            exec_send(w, ex, d);
            again = true; /* the list changed under the walk: from the top */
            break;
        }
    }
}

/* The executor answered t SPW_EAHEAD: it did not have a PROTO_ARG_PREV input. Its producers
 * have ended (they were before it in the executor's queue) or were requeued: t is taken in
 * again as a task sent ahead, its inputs from the store, the kept small results or producers
 * still here, or it is answered SPW_EAHEAD as one whose input is gone. */
static void prev_fallback(wrk *w, wtask *t)
{
    uint32_t n = 0;
    for (uint32_t i = 0; i < t->nargs; i++)
        n += t->args[i].prev;
    t->prev = 0;
    t->state = WT_INPUTS;
    t->ex = NULL;
    t->next = NULL;
    t->missing = n;
    started_strike(w, t); /* it did not start after all */
    if (ahead_intake(w, t) != 0)
        return; /* answered */
    t->missing++; /* the gets below may complete at once */
    for (uint32_t i = 0; i < t->nargs; i++) {
        warg *a = &t->args[i];
        if (!a->prev)
            continue;
        a->prev = 0;
        if (a->kind == PROTO_ARG_INLINE || a->local)
            continue; /* a kept result, or its producer is here again */
        wrk__admit_late(w, t);
        input_req *r = spw_malloc(SPW_MOD_WORKER, sizeof *r);
        *r = (input_req){w, t->id, i};
        ost_obj_get_async(w->store, ost_obj_find(w->store, a->id), input_done, r);
    }
    if (--t->missing == 0) {
        t->missing = 1;
        wrk__input_ready(w, t, 0, 0, NULL);
    }
}

/* A task sent ahead stops waiting for its producers here (it was cancelled): each such argument
 * counts as failed with status, which may answer and free the task. */
static void ahead_unwait(wrk *w, wtask *t, int status, const char *msg)
{
    uint32_t n = t->local;
    if (n == 0)
        return;
    DL_DELETE2(w->ahead, t, aprev, anext);
    t->local = 0;
    for (uint32_t i = 0; n > 0; i++) {
        if (!t->args[i].local)
            continue;
        t->args[i].local = 0;
        n--;
        wrk__input_ready(w, t, i, status, msg); /* frees t at the last input, if n is 0 */
    }
}

/* ---------------------------------------------------------------- intake */

static void task_begin(wrk *w, wtask *t);

/* One task to run: the fields of a TASK_RUN, or record i of a TASK_RUNS (f[0].bad: the record
 * did not match the schema; answered as a failed task when its id is readable). */
static void task_run_rec(wrk *w, uint64_t req, const proto_val *f, uint32_t i_rec)
{
    char hex[33];
    if (f[F_RUN_ID].bad) {
        if (f[F_RUN_ID].nil) {
            proto_conn_error(w->sched, req, SPW_EMALFORMED,
                             "TASK_RUNS record %u is malformed and names no task", i_rec);
            return;
        }
        char msg[96];
        snprintf(msg, sizeof msg, "TASK_RUNS record %u does not match the schema", i_rec);
        spw_log(SPW_LOG_WARN, "task=%s: %s", spw_id_hex(f[F_RUN_ID].id, hex), msg);
        proto_batch_done(
            w->sched, PROTO_TASK_DONES,
            &(proto_done_rec){
                .id = f[F_RUN_ID].id, .status = SPW_EMALFORMED, .err = msg, .omit_outs = true});
        return;
    }
    spw_id id = f[F_RUN_ID].id;
    wtask *t;
    HASH_FIND(hh, w->tasks, &id, sizeof id, t);
    if (t != NULL && t->gen != w->gen && t->heir != NULL && t->heir->gen != w->gen) {
        /* Its heir came from a scheduler lost since, and would only be dropped: this one takes
         * its place (never taken in, it holds nothing but itself). */
        task_release(w, t->heir);
        t->heir = NULL;
    }
    if (t != NULL && (t->gen == w->gen || t->heir != NULL)) {
        proto_conn_error(w->sched, req, SPW_EDUPLICATE, "task=%s is already here",
                         spw_id_hex(id, hex));
        return;
    }
    /* Still here for a scheduler that is gone (it runs on, to be dropped): this scheduler sent
     * it again, and it starts when that run leaves. */
    wtask *held = t;
    wrk__fetch_supersede(w, id); /* its output is made here now, not fetched */
    const proto_val *args = &f[F_RUN_ARGS];
    uint32_t nargs = args->arr.n;
    size_t blob = 0;
    for (uint32_t i = 0; i < nargs; i++) {
        const proto_val *a = PROTO_REC(args, i);
        if (!a[R_WARG_INLINE].nil)
            blob += a[R_WARG_INLINE].bin.len;
    }
    size_t need = sizeof *t + nargs * sizeof(warg) + blob;
    bool slab = need <= WRK_TASK_REC;
    t = slab ? spw_slab_alloc(&w->task_slab) : spw_try_malloc(SPW_MOD_WORKER, need);
    if (t == NULL) {
        /* Answered as a failed task, naming it: an ERROR would leave it assigned here in the
         * scheduler's eyes, its client waiting for ever. */
        char msg[96];
        snprintf(msg, sizeof msg,
                 "the worker is out of memory: no room for the task's %zu-byte record", need);
        spw_log(SPW_LOG_ERR, "task=%s: %s", spw_id_hex(id, hex), msg);
        proto_batch_done(w->sched, PROTO_TASK_DONES,
                         &(proto_done_rec){
                             .id = id, .status = SPW_ENOMEM, .err = msg, .omit_outs = true});
        return;
    }
    if (!slab) { /* a slab record comes zeroed */
        memset(t, 0, sizeof *t);
        memset(t + 1, 0, nargs * sizeof(warg));
    }
    t->slab = slab;
    t->id = id;
    t->args = (warg *)(t + 1);
    t->nargs = nargs;
    t->flags = (uint32_t)f[F_RUN_FLAGS].u;
    t->nouts = 1;
    t->outx = NULL;
    t->state = WT_INPUTS;
    t->gen = w->gen;
    proto_str(&f[F_RUN_FN], t->fn, sizeof t->fn);
    if (held == NULL)
        HASH_ADD(hh, w->tasks, id, sizeof t->id, t);
    uint8_t *bp = (uint8_t *)(t->args + nargs);

    /* First copy everything, so that a failure below can report through the usual path. */
    int bad = 0;
    char badmsg[256] = "";
    /* Absent or 0 (a sender that left it unset): one output. */
    uint64_t nouts = f[F_RUN_NOUTS].nil || f[F_RUN_NOUTS].u == 0 ? 1 : f[F_RUN_NOUTS].u;
    if (nouts > SPW_TASK_OUTPUTS_MAX) {
        bad = SPW_EINVAL;
        snprintf(badmsg, sizeof badmsg, "%llu outputs: a task has 1 to %u",
                 (unsigned long long)nouts, SPW_TASK_OUTPUTS_MAX);
    } else {
        t->nouts = (uint32_t)nouts;
    }
    for (uint32_t i = 0; i < nargs; i++) {
        const proto_val *a = PROTO_REC(args, i);
        warg *wa = &t->args[i];
        wa->kind = (uint8_t)a[R_WARG_KIND].u;
        if (wa->kind == PROTO_ARG_INLINE) {
            if (a[R_WARG_INLINE].nil) {
                bad = SPW_EINVAL;
                snprintf(badmsg, sizeof badmsg, "argument %u: inline value missing", i);
                continue;
            }
            wa->inline_len = a[R_WARG_INLINE].bin.len;
            memcpy(bp, a[R_WARG_INLINE].bin.ptr, wa->inline_len);
            wa->inline_data = bp;
            bp += wa->inline_len;
            continue;
        }
        if ((wa->kind != PROTO_ARG_OBJ && wa->kind != PROTO_ARG_VIEW) || a[R_WARG_OBJ].nil) {
            bad = SPW_EINVAL;
            snprintf(badmsg, sizeof badmsg, "argument %u: bad kind or missing object id", i);
            continue;
        }
        wa->id = a[R_WARG_OBJ].id;
        wa->off = a[R_WARG_OFF].u;
        wa->len = a[R_WARG_LEN].u;
        wa->objsize = a[R_WARG_OBJSIZE].u;
        if (wa->off > wa->objsize || wa->len > wa->objsize - wa->off) {
            bad = SPW_EINVAL;
            snprintf(badmsg, sizeof badmsg, "argument %u: range outside the object", i);
            continue;
        }
        const proto_val *locs = &a[R_WARG_LOCS];
        for (uint32_t j = 0; j < locs->arr.n && wa->nlocs < WRK_MAX_LOCS; j++) {
            const proto_val *l = PROTO_REC(locs, j);
            proto_str(&l[R_LOC_ADDR], wa->locs[wa->nlocs], sizeof wa->locs[0]);
            if (strcmp(wa->locs[wa->nlocs], w->bound) != 0)
                wa->nlocs++;
        }
        t->missing++;
    }
    if (bad != 0 && held != NULL) {
        /* Unlisted: answered here, as a record that does not match the schema is. */
        w->tasks_failed++;
        proto_batch_done(w->sched, PROTO_TASK_DONES,
                         &(proto_done_rec){
                             .id = id, .status = bad, .err = badmsg, .omit_outs = true});
        task_release(w, t);
        return;
    }
    if (bad != 0) {
        t->missing = 0;
        task_report(w, t, bad, 0, NULL, badmsg, 0);
        return;
    }
    if (held != NULL) {
        held->heir = t;
        return;
    }
    task_begin(w, t);
}

/* ------------------------------------------------------------- admission */

/* A task is admitted before it gets, fetches or pins any input (admit.c holds the bytes): in
 * arrival order, while the reservations of those admitted fit under the store's capacity less
 * a margin, and always when no other is admitted, so one that fits alone always runs. Tasks
 * with nothing to get here (inline arguments, or only outputs of producers here, which those
 * reserve) whose function has not stored an output here skip it: they pin nothing. */

static void task_inputs(wrk *w, wtask *t);

/* The room for an admitted task's output (t->pre) arrived, or could not be had: the task goes
 * on without it then (its executor's request for the output is served first, see
 * ost_obj_create_first). */
static void pre_done(void *arg, int status, ost_obj *o)
{
    input_req *r = arg;
    wrk *w = r->w;
    wtask *t;
    HASH_FIND(hh, w->tasks, &r->task, sizeof r->task, t);
    spw_free(r);
    if (t == NULL || !t->pre_wait || w->closing) {
        if (status == 0)
            ost_obj_abort(w->store, o);
        return;
    }
    t->pre_wait = 0;
    t->pre = status == 0 ? o : NULL;
    t->state = WT_INPUTS;
    if (t->gen != w->gen) {
        task_report(w, t, SPW_ECLOSED, 0, NULL, "the scheduler that sent it is gone", 0);
        return;
    }
    task_inputs(w, t);
}

/* Takes the room for the output of a task just admitted, out bytes, before any of its inputs is
 * pinned: while it waits for that room, the inputs it has here can still be spilled to make
 * it (pinned, scattered through the arena, they could leave no hole large enough), and when
 * it runs its output never waits for memory that others' inputs hold. Then the task gets its
 * inputs. Not for an output expected inline (out 0). It waits only while spilling can make
 * the room; otherwise it takes room that is free now, or none (its executor's request is
 * then served first of those waiting, see ost_obj_create_first). */
static void admit_room(wrk *w, wtask *t, uint64_t out)
{
    ost_stats st;
    bool squeeze = false;
    if (out != 0 && t->pre == NULL) {
        ost_stats_get(w->store, &st);
        squeeze = w->opts.store.spill_dir != NULL && st.capacity - st.pinned >= out;
        if (!squeeze && ost_obj_create(w->store, t->id, out, &t->pre) != 0)
            t->pre = NULL;
    }
    if (!squeeze) {
        t->state = WT_INPUTS;
        task_inputs(w, t);
        return;
    }
    t->state = WT_ADMIT;
    t->pre_wait = 1;
    input_req *r = spw_malloc(SPW_MOD_WORKER, sizeof *r);
    *r = (input_req){w, t->id, 0};
    ost_obj_create_async(w->store, t->id, out, pre_done, r);
}

/* Admits t if it fits and no task waits ahead of it (queued): 1 (its reservation taken; the
 * caller goes on with admit_room and *room), or 0 (it waits), or -1 when it can never fit
 * (answered, freed). */
static int admit_try(wrk *w, wtask *t, bool queued, uint64_t *room)
{
    uint64_t in, out;
    uint64_t cost = wrk__admit_cost(w, t, &in, &out);
    uint64_t limit;
    uint64_t cap = wrk__admit_capacity(w, &limit, NULL);
    if (in > cap) {
        char hex[33], msg[512];
        snprintf(msg, sizeof msg,
                 "task=%s (%s) cannot run here: its inputs take %llu bytes of store, more than "
                 "its capacity of %llu bytes",
                 spw_id_hex(t->id, hex), t->fn, (unsigned long long)in, (unsigned long long)cap);
        spw_log(SPW_LOG_WARN, "%s", msg);
        task_report(w, t, SPW_ETOOBIG, 0, NULL, msg, 0);
        return -1;
    }
    if (queued || (w->adm_tasks > 0 && w->adm_reserved + cost > limit))
        return 0;
    /* Alone it is admitted whatever its guessed output, the guess cut to what is left beside
     * its inputs: a guess may be wrong, and the real size is checked when the task asks. */
    if (in + out > limit)
        out = in < limit ? limit - in : 0;
    wrk__admit_take(w, t, out);
    *room = out;
    return 1;
}

/* The first task waiting for admission gets its inputs from other workers fetched here now,
 * unpinned, when they fit beside the reservations of the tasks admitted (its output is not
 * counted: it is made only once the task is admitted). Then a long task's inputs cross the
 * network while the one before it runs, not after. Only with a spill directory: a copy
 * fetched ahead is an ordinary object here, which the store may spill to make room (the task
 * then restores it), and can never hold room that an admitted task needs. */
static void admit_prefetch(wrk *w)
{
    wtask *t = w->adm_head;
    if (t == NULL || t->prefetched || w->opts.store.spill_dir == NULL || w->closing)
        return;
    uint64_t in, out, limit;
    uint64_t cost = wrk__admit_cost(w, t, &in, &out);
    wrk__admit_capacity(w, &limit, NULL);
    if (w->adm_reserved + (cost - out) > limit)
        return;
    t->prefetched = 1;
    for (uint32_t i = 0; i < t->nargs; i++)
        wrk__fetch_ahead(w, &t->args[i]);
}

/* Admits waiting tasks, oldest first, while they fit. */
static void admit_pump(wrk *w)
{
    if (w->adm_pumping)
        return; /* the call below us goes on with what this one would see */
    w->adm_pumping = true;
    while (w->adm_head != NULL && !w->closing) {
        wtask *t = w->adm_head;
        uint64_t room;
        int rc = admit_try(w, t, false, &room);
        if (rc == 0)
            break;
        if (rc < 0)
            continue; /* answered and freed: off the list */
        DL_DELETE2(w->adm_head, t, adm_prev, adm_next);
        t->adm_listed = 0;
        admit_room(w, t, room); /* t may be gone after */
    }
    w->adm_pumping = false;
    admit_prefetch(w);
}

/* Takes a task in whose arguments are copied: marks what it waits for here, then admits it
 * (admit_try) or lists it to wait for admission. */
static void task_begin(wrk *w, wtask *t)
{
    if (t->plugin == NULL) {
        /* A function of an uploaded plugin not here yet: parked, unadmitted, until it is. */
        char why[PROTO_MAX_STR];
        int rc = wrk__plugin_intake(w, t, why, sizeof why);
        if (rc < 0)
            wrk__task_fail(w, t, rc, why);
        if (rc != 0)
            return;
    }
    if ((t->flags & PROTO_TASK_AHEAD) && t->missing > 0 && ahead_intake(w, t) != 0)
        return;
    if (t->missing > t->local || (w->adm_fns != NULL && wrk__admit_fn_stores(w, t->fn))) {
        uint64_t room;
        int rc = admit_try(w, t, w->adm_head != NULL, &room);
        if (rc == 0) {
            t->state = WT_ADMIT;
            t->adm_listed = 1;
            DL_APPEND2(w->adm_head, t, adm_prev, adm_next);
            admit_prefetch(w);
        } else if (rc > 0) {
            admit_room(w, t, room);
        }
        return;
    }
    task_inputs(w, t);
}

/* Starts getting an admitted task's inputs, or queues it for an executor. */
static void task_inputs(wrk *w, wtask *t)
{
    spw_id id = t->id;
    uint32_t nargs = t->nargs;
    if (t->missing == 0) {
        ready_push(w, t, false);
        wrk__dispatch(w);
        return;
    }
    /* Count the inputs still to come before starting any, since some complete at once. */
    uint32_t nobj = t->missing;
    t->missing++;
    for (uint32_t i = 0; i < nargs && nobj > 0; i++) {
        warg *wa = &t->args[i];
        if (wa->kind == PROTO_ARG_INLINE)
            continue;
        nobj--;
        if (wa->local)
            continue; /* its producer here makes it (ahead_settle) */
        ost_obj *o = ost_obj_find(w->store, wa->id);
        if (o != NULL && ost_obj_state(o) == OST_SEALED) {
            input_req *r = spw_malloc(SPW_MOD_WORKER, sizeof *r);
            *r = (input_req){w, id, i};
            ost_obj_get_async(w->store, o, input_done, r);
        } else {
            wrk__fetch(w, t, i);
        }
    }
    /* Drop the extra count taken above; this may complete the task's inputs. */
    t->missing--;
    if (t->missing == 0) {
        t->missing = 1;
        wrk__input_ready(w, t, 0, 0, NULL);
    } else if (w->ahead != NULL) {
        ahead_chain(w); /* it may go behind its producers now */
    }
}

/* t waited for the task of its id an earlier scheduler sent, which has left: it is listed and
 * taken in now (or dropped, the worker closing). */
static void heir_start(wrk *w, wtask *t)
{
    if (w->closing) {
        task_release(w, t);
        return;
    }
    wtask *dup;
    HASH_FIND(hh, w->tasks, &t->id, sizeof t->id, dup);
    SPW_ASSERT(dup == NULL);
    HASH_ADD(hh, w->tasks, id, sizeof t->id, t);
    task_begin(w, t);
}

void wrk__task_begin(wrk *w, wtask *t)
{
    task_begin(w, t);
}

void wrk__task_fail(wrk *w, wtask *t, int status, const char *msg)
{
    t->missing = 0;
    task_report(w, t, status, 0, NULL, msg, 0);
}

void wrk__task_run(wrk *w, const proto_msg *m)
{
    task_run_rec(w, m->req, m->f, 0);
}

void wrk__task_runs(wrk *w, const proto_msg *m)
{
    const proto_val *recs = &m->f[F_RUNS_RECS];
    for (uint32_t i = 0; i < recs->arr.n; i++)
        task_run_rec(w, m->req, PROTO_REC(recs, i), i);
}

/* -------------------------------------------------------------- executors */

/* Argument i of a task as its executor sees it: inline bytes, or a range of the arena. */
static void put_earg(proto_enc *e, uint32_t i, void *arg)
{
    const warg *a = &((const wtask *)arg)->args[i];
    if (a->prev) {
        uint8_t idb[16];
        spw_id_to_bytes(a->id, idb);
        proto_put_earg_rec(e, &(proto_earg_rec){.kind = PROTO_ARG_PREV, .value = {idb, 16}});
    } else if (a->kind == PROTO_ARG_INLINE)
        proto_put_earg_rec(e, &(proto_earg_rec){.kind = PROTO_ARG_INLINE,
                                                .value = {a->inline_data != NULL ? a->inline_data
                                                                                 : (const void *)"",
                                                          a->inline_len}});
    else
        proto_put_earg_rec(e, &(proto_earg_rec){.kind = PROTO_ARG_VIEW,
                                                .off = ost_obj_offset(a->obj) + a->off,
                                                .len = a->len});
}

/* Gives t to ex, at the tail of its FIFO; or fails t (reported and freed) when its record
 * cannot be sent. */
static void exec_send(wrk *w, wrk_exec *ex, wtask *t)
{
    if (t->plugin != NULL)
        wrk__plugin_tell(w, ex, t->plugin); /* before its first task there */
    /* The tasks one dispatch gives an executor share an EXECS frame. */
    int rc = proto_batch_exec(ex->conn, PROTO_EXECS,
                              &(proto_exec_rec){.id = t->id,
                                                .fn = t->fn,
                                                .args = {.n = t->nargs, .put = put_earg, .arg = t},
                                                .inline_limit = w->inline_limit,
                                                .nouts = t->nouts,
                                                .omit_nouts = t->nouts <= 1});
    if (rc != 0 && rc != SPW_ECLOSED) {
        /* SPW_EFRAMESIZE: its inline arguments (small outputs of producers here, gathered for
         * it) make a record larger than a frame. Queued unsent, it would never be answered
         * and would hold up the tasks behind it. (A closing socket is settled as usual: the
         * task goes back to the ready queue with the executor's others.) */
        char hex[33], msg[256];
        snprintf(msg, sizeof msg, "task=%s cannot be sent to an executor: %s (its %u arguments "
                                  "are too large for one message)",
                 spw_id_hex(t->id, hex), spw_strerror(rc), t->nargs);
        spw_log(SPW_LOG_WARN, "%s", msg);
        t->state = WT_QUEUED;
        t->ex = NULL;
        t->next = NULL;
        task_report(w, t, rc, 0, NULL, msg, 0);
        return;
    }
    t->state = WT_SENT;
    t->ex = ex;
    t->next = NULL;
    if (ex->tail != NULL)
        ex->tail->next = t;
    else
        ex->head = t;
    ex->tail = t;
    if (ex->head == t)
        started_note(w, t);
    if (ex->inflight++ == 0)
        w->running++;
    ex->tasks_sent++;
}

void wrk__dispatch(wrk *w)
{
    /* Short tasks are queued deeply so an executor never waits for a round trip; long ones go
     * one at a time so no executor hoards work another could start. Tiny ones go up to
     * WRK_EXEC_DEPTH_MAX deep (about WRK_EXEC_QUEUE_US of work): an executor then takes a
     * scheduler's whole batch in one read and answers it in one write, rather than waking
     * once for every 64. */
    uint32_t limit = exec_depth(w);
    while (w->ready_head != NULL && !w->closing) {
        wrk_exec *best = NULL;
        for (uint32_t i = 0; i < w->nexec; i++) {
            wrk_exec *ex = &w->execs[i];
            if (!exec_open(w, ex, limit))
                continue;
            if (best == NULL || ex->inflight < best->inflight)
                best = ex;
        }
        if (best == NULL)
            break;
        wtask *t = w->ready_head;
        w->ready_head = t->next;
        if (w->ready_head == NULL)
            w->ready_tail = NULL;
        exec_send(w, best, t);
    }
    if (w->ahead != NULL)
        ahead_chain(w);
    wrk__check(w);
}

static wtask *exec_pop(wrk *w, wrk_exec *ex)
{
    wtask *t = ex->head;
    ex->head = t->next;
    if (ex->head == NULL)
        ex->tail = NULL;
    t->next = NULL;
    if (--ex->inflight == 0)
        w->running--;
    return t;
}

typedef struct alloc_req {
    wrk *w;
    spw_id task;
    uint32_t index;      /* which output */
    wrk_exec *ex;        /* the executor that asked */
    uint64_t ex_started; /* its started_ns then: req is that process's request id */
    uint64_t req;
    uint64_t size;
} alloc_req;

static void exec_alloc_done(void *arg, int status, ost_obj *o)
{
    alloc_req *r = arg;
    wrk *w = r->w;
    wtask *t;
    HASH_FIND(hh, w->tasks, &r->task, sizeof r->task, t);
    if (t != NULL)
        t->alloc_wait = 0;
    uint64_t req = r->req;
    uint64_t size = r->size;
    uint32_t index = r->index;
    /* Not for a successor of the executor that asked (its task requeued when it stopped):
     * that one asks under request ids of its own. */
    bool asker = t != NULL && t->ex == r->ex && t->ex->started_ns == r->ex_started;
    spw_free(r);
    if (!asker || t->state != WT_SENT || t->ex->conn == NULL || t->ex->head != t || w->closing) {
        if (status == 0)
            ost_obj_abort(w->store, o);
        return;
    }
    proto_conn *c = t->ex->conn;
    if (status != 0) {
        const char *why = status == SPW_ESPILLFULL ? ost_store_full_reason(w->store) : "";
        proto_conn_error(c, req, status, "cannot allocate %llu bytes for the output: %s%s%s",
                         (unsigned long long)size, spw_strerror(status), why[0] ? ": " : "",
                         why);
        return;
    }
    if (index == 0)
        t->out = o;
    else
        t->outx[index - 1] = o;
    if (w->cgroup != NULL) {
        /* Fault the output's pages in here, so the shared memory is charged to the worker's
         * cgroup, not to the executor's (whose memory.max is the task's own heap). */
        uint64_t pg = (uint64_t)sysconf(_SC_PAGESIZE);
        if (fallocate(ost_store_fd(w->store), 0, (off_t)ost_obj_offset(o),
                      (off_t)((size + pg - 1) / pg * pg)) != 0)
            spw_log(SPW_LOG_DEBUG, "fallocate of an output: %s", strerror(errno));
    }
    proto_send_exec_alloc_ok(c, req, &(proto_exec_alloc_ok_msg){.off = ost_obj_offset(o)});
}

/* Whether the output t asks for can never fit beside its pinned inputs (then its executor is
 * answered SPW_ETOOBIG at once, naming the task and the bytes; waiting for room that pinned
 * inputs hold would only end at --alloc-wait). Otherwise its reservation becomes that size. */
static bool alloc_never_fits(wrk *w, wtask *t, wrk_exec *ex, uint64_t req, uint64_t size)
{
    uint64_t cap = wrk__admit_capacity(w, NULL, NULL);
    uint64_t in = wrk__admit_pinned(w, t);
    if (size > cap)
        return false; /* the store answers that one (SPW_ETOOBIG) */
    /* The outputs it made already hold their room too (a task of several). */
    uint64_t made = t->out_bytes;
    if (in == 0 || (made <= cap - size && in <= cap - size - made)) {
        wrk__admit_output(w, t, size);
        return false;
    }
    char hex[33], msg[512];
    snprintf(msg, sizeof msg,
             "task=%s (%s) needs %llu bytes of store, inputs %llu + output %llu, more than its "
             "capacity of %llu bytes",
             spw_id_hex(t->id, hex), t->fn, (unsigned long long)(in + made + size),
             (unsigned long long)in, (unsigned long long)(made + size), (unsigned long long)cap);
    spw_log(SPW_LOG_WARN, "%s", msg);
    proto_conn_error(ex->conn, req, SPW_ETOOBIG, "%s", msg);
    return true;
}

/* Marks an executor for recycling when it ran its quota of tasks or grew past the RSS ceiling
 * (read at most every 50 ms unless forced), and closes the socket of a marked one that is idle:
 * it exits through its cleanup and exec_settle starts the next. */
static void exec_check(wrk *w, wrk_exec *ex, bool force)
{
    if (ex->conn == NULL || !ex->proc_running || w->closing)
        return;
    if (!ex->recycle && w->opts.exec_max_tasks != 0 && ex->tasks_sent >= w->opts.exec_max_tasks) {
        spw_log(SPW_LOG_INFO, "executor pid=%d ran %llu tasks (--executor-max-tasks): replacing it",
                ex->pid, (unsigned long long)ex->tasks_sent);
        ex->recycle = true;
    }
    uint64_t now = spw_now_ns();
    if (!ex->recycle && w->opts.exec_max_rss != 0 &&
        (force || now - ex->rss_checked_ns > 50 * 1000000ULL)) {
        ex->rss_checked_ns = now;
        int64_t kib = spw_proc_status_kib(ex->pid, "RssAnon");
        if (kib > 0 && (uint64_t)kib * 1024 > w->opts.exec_max_rss) {
            spw_log(SPW_LOG_NOTICE,
                    "executor pid=%d holds %llu bytes of private memory, above "
                    "--executor-max-rss %llu (a leaking task?): replacing it",
                    ex->pid, (unsigned long long)kib * 1024,
                    (unsigned long long)w->opts.exec_max_rss);
            ex->recycle = true;
        }
    }
    if (ex->recycle && ex->inflight == 0)
        proto_conn_close(ex->conn, 0);
}

void wrk__exec_maintain(wrk *w)
{
    for (uint32_t i = 0; i < w->nexec; i++)
        if (w->execs[i].inflight == 0)
            exec_check(w, &w->execs[i], true);
}

/* One completion from an executor: the fields of an EXEC_DONE, or a record of an EXEC_DONES
 * (f[0].bad: malformed; the task it names fails, and one naming none restarts the executor).
 * A failure with the nil id answers an EXECS record the executor could not read a task id
 * from: the executor answers in order, so it is the head's. */
static void exec_done_run(wrk *w, wrk_exec *ex, const proto_val *f)
{
    char hex[33];
    wtask *t = ex->head;
    bool unnamed = !f[F_DONE_ID].nil && spw_id_is_nil(f[F_DONE_ID].id) &&
                   f[F_DONE_STATUS].i != 0 && !f[F_DONE_ID].bad;
    if (t == NULL || f[F_DONE_ID].nil || (!unnamed && !spw_id_eq(t->id, f[F_DONE_ID].id))) {
        spw_log(SPW_LOG_ERR, "executor pid=%d reported task=%s out of order: restarting it",
                ex->pid, f[F_DONE_ID].nil ? "?" : spw_id_hex(f[F_DONE_ID].id, hex));
        proto_conn_close(ex->conn, SPW_EPROTO);
        return;
    }
    exec_pop(w, ex);
    if (ex->head != NULL)
        started_note(w, ex->head); /* the next queued task begins now */
    uint64_t run_us = f[F_DONE_RUN_US].u;
    if (t->gen != w->gen) {
        /* Its scheduler is gone: nobody holds a reference to the output (aborted with it). */
        task_report(w, t, SPW_ECLOSED, 0, NULL, "the scheduler that sent it is gone", run_us);
        wrk__dispatch(w);
        return;
    }
    /* 0 or a negative code; anything else (a positive value, one past an int, whose low bits
     * could read as 0) is no status an executor sends, and the task fails below. */
    int64_t st = f[F_DONE_STATUS].i;
    int status = proto_status(st);
    if (status == SPW_EAHEAD && t->prev > 0 && !f[F_DONE_ID].bad) {
        prev_fallback(w, t); /* it did not run */
        if (ex->inflight == 0)
            exec_check(w, ex, false);
        wrk__dispatch(w);
        return;
    }
    w->ewma_us = w->ewma_us == 0 ? (double)run_us + 0.5 : w->ewma_us * 0.9 + 0.1 * (double)run_us;
    uint64_t size = f[F_DONE_SIZE].u;
    char err[PROTO_MAX_STR + 1];
    proto_str(&f[F_DONE_ERR], err, sizeof err);
    if (f[F_DONE_ID].bad) {
        status = SPW_EPROTO;
        snprintf(err, sizeof err, "the executor's EXEC_DONES record does not match the schema");
    } else if (status == SPW_EPROTO && st != SPW_EPROTO) {
        snprintf(err, sizeof err, "the executor reported status %lld, which is no error code",
                 (long long)st);
    }
    /* Outputs: output 0 in the record's size and value, 1.. in its outs, one each. An output
     * in the store must be the one allocated for it, of the size allocated; one inline must not
     * have been allocated. Checked for all before any is sealed. */
    const proto_val *outs = &f[F_DONE_OUTS];
    if (status == 0 && (outs->nil ? 0 : outs->arr.n) != t->nouts - 1) {
        status = SPW_EPROTO;
        snprintf(err, sizeof err, "executor reported %u outputs for a task of %u",
                 1 + (outs->nil ? 0 : outs->arr.n), t->nouts);
    }
    for (uint32_t k = 0; status == 0 && k < t->nouts; k++) {
        ost_obj *o = k == 0 ? t->out : t->outx != NULL ? t->outx[k - 1] : NULL;
        uint64_t sz = k == 0 ? size : PROTO_REC(outs, k - 1)[R_OUT_SIZE].u;
        bool inl = k == 0 ? !f[F_DONE_INLINE].nil : !PROTO_REC(outs, k - 1)[R_OUT_INLINE].nil;
        if (o != NULL && (inl || sz != ost_obj_size(o))) {
            status = SPW_EPROTO;
            snprintf(err, sizeof err, "executor reported %llu bytes for an output of %llu",
                     (unsigned long long)sz, (unsigned long long)ost_obj_size(o));
        } else if (o == NULL && !inl && sz != 0) {
            status = SPW_EPROTO;
            snprintf(err, sizeof err, "executor reported an output it never allocated");
        }
    }
    bool stored = false;
    for (uint32_t k = 0; status == 0 && k < t->nouts; k++) {
        ost_obj **slot = k == 0 ? &t->out : t->outx != NULL ? &t->outx[k - 1] : NULL;
        if (slot == NULL || *slot == NULL)
            continue;
        ost_obj *o = *slot;
        *slot = NULL;
        ost_obj_seal(w->store, o);
        stored = true;
    }
    if (status == 0 && (stored || !f[F_DONE_INLINE].nil))
        stored_note(w, t->fn, stored);
    if (status == SPW_ETASKMEM && !ex->recycle) {
        /* Its heap may be left fragmented or leaked by the failed task: start afresh. */
        spw_log(SPW_LOG_NOTICE, "executor pid=%d: %s; replacing it", ex->pid, err);
        ex->recycle = true;
    }
    const proto_val *fwd = t->nouts > 1 ? outs : NULL;
    if (status != 0) {
        task_report(w, t, status, 0, NULL, err, run_us);
    } else if (!f[F_DONE_INLINE].nil) {
        wrk__admit_learn_inline(w, t);
        task_report_outs(w, t, 0, f[F_DONE_INLINE].bin.len, f[F_DONE_INLINE].bin.ptr, NULL, run_us,
                         fwd);
    } else {
        task_report_outs(w, t, 0, size, NULL, NULL, run_us, fwd);
    }
    if (ex->inflight == 0)
        exec_check(w, ex, false);
    wrk__dispatch(w);
}

/* The task's end lets its inputs go and hands its outputs to the tasks sent ahead after it in
 * one step: the store chooses what to spill from what that leaves. Else a fresh output, or the
 * inputs fetched ahead for the next task, would be written out in between, while the inputs
 * just let go (which the scheduler is about to release) were still pinned. */
static void exec_done(wrk *w, wrk_exec *ex, const proto_val *f)
{
    ost_store_hold_spills(w->store, true);
    exec_done_run(w, ex, f);
    ost_store_hold_spills(w->store, false);
}

/* The output of run, a running task, waits for size bytes that only pinned objects hold: the
 * room taken at admission for tasks that are not running (their t->pre) is given back until it
 * would fit, and run's allocation, first in line, takes it. They ask for theirs again when they
 * run, served first then: no room set aside for a task waiting its turn holds up the one running.
 * The rooms are chosen first and aborted after, since an abort serves waiting allocations at
 * once, whose callbacks may end tasks. */
static void pres_yield(wrk *w, const wtask *run, uint64_t size)
{
    ost_stats st;
    ost_stats_get(w->store, &st);
    uint64_t beside = st.capacity - st.pinned;
    /* Enough bytes beside the pinned ones but cut into smaller holes by them, with nothing left
     * to spill and nothing being spilled: only unpinning makes the room, and all of it may be
     * needed (which rooms border which holes is not known). */
    bool cut = st.used == st.pinned && st.spilling_bytes == 0;
    if (beside >= size && !cut)
        return; /* spilling or freeing what is not pinned makes the room */
    uint64_t need = beside >= size ? UINT64_MAX : size - beside, freed = 0;
    spw_buf give = {0};
    wtask *t, *tmp;
    HASH_ITER(hh, w->tasks, t, tmp)
    {
        if (freed >= need)
            break;
        if (t == run || t->pre == NULL || (t->ex != NULL && t->ex->head == t))
            continue;
        freed += ost_obj_size(t->pre);
        spw_buf_append(&give, &t->pre, sizeof t->pre);
        t->pre = NULL;
    }
    uint32_t n = (uint32_t)(give.len / sizeof(ost_obj *));
    char hex[33];
    spw_id_hex(run->id, hex); /* run may end in the aborts' callbacks */
    for (uint32_t i = 0; i < n; i++) {
        ost_obj *o;
        memcpy(&o, give.data + i * sizeof o, sizeof o);
        ost_obj_abort(w->store, o);
    }
    spw_buf_release(&give);
    if (n > 0)
        spw_log(SPW_LOG_INFO,
                "task=%s needs %llu bytes for an output: gave back %llu bytes of room set aside "
                "for %u tasks not running yet",
                hex, (unsigned long long)size, (unsigned long long)freed, n);
}

void wrk__pres_recheck(wrk *w)
{
    /* Only an executor's running task waits for an output's room: their ids first, since
     * pres_yield's aborts serve waiting allocations, whose callbacks may end tasks. Called on
     * every free, so it looks at the executors, not at every task. */
    spw_buf ids = {0};
    wtask *t;
    for (uint32_t i = 0; i < w->nexec; i++) {
        t = w->execs[i].head;
        if (t != NULL && t->alloc_wait != 0)
            spw_buf_append(&ids, &t->id, sizeof t->id);
    }
    for (size_t off = 0; off < ids.len; off += sizeof(spw_id)) {
        spw_id id;
        memcpy(&id, ids.data + off, sizeof id);
        HASH_FIND(hh, w->tasks, &id, sizeof id, t);
        if (t != NULL && t->alloc_wait != 0 && t->state == WT_SENT && t->ex != NULL &&
            t->ex->head == t)
            pres_yield(w, t, t->alloc_wait);
    }
    spw_buf_release(&ids);
}

void wrk__exec_msg(wrk_exec *ex, const proto_msg *m)
{
    wrk *w = ex->w;
    switch (m->type) {
    case PROTO_EXEC_DONE:
        exec_done(w, ex, m->f);
        return;
    case PROTO_EXEC_DONES: {
        const proto_val *recs = &m->f[F_DONES_RECS];
        for (uint32_t i = 0;
             i < recs->arr.n && ex->conn != NULL && !proto_conn_is_closing(ex->conn); i++)
            exec_done(w, ex, PROTO_REC(recs, i));
        return;
    }
    case PROTO_EXEC_ALLOC: {
        wtask *t = ex->head;
        uint64_t index = m->f[F_EALLOC_INDEX].nil ? 0 : m->f[F_EALLOC_INDEX].u;
        if (t != NULL && index > 0 && index < t->nouts && t->outx == NULL)
            t->outx = spw_calloc(SPW_MOD_WORKER, t->nouts - 1, sizeof *t->outx);
        if (t == NULL || !spw_id_eq(t->id, m->f[F_EALLOC_ID].id) || index >= t->nouts ||
            (index == 0 ? t->out : t->outx[index - 1]) != NULL) {
            proto_conn_error(ex->conn, m->req, SPW_EPROTO,
                             "output already allocated, past the task's outputs, or no task");
            return;
        }
        uint64_t size = m->f[F_EALLOC_SIZE].u;
        if (alloc_never_fits(w, t, ex, m->req, size))
            return;
        alloc_req *r = spw_malloc(SPW_MOD_WORKER, sizeof *r);
        *r = (alloc_req){w, t->id, (uint32_t)index, ex, ex->started_ns, m->req, size};
        ost_obj *pre = index == 0 ? t->pre : NULL;
        if (index == 0)
            t->pre = NULL;
        if (pre != NULL && ost_obj_resize(w->store, pre, size) == 0) {
            exec_alloc_done(r, 0, pre); /* the room taken at admission */
        } else {
            if (pre != NULL)
                ost_obj_abort(w->store, pre); /* larger than expected: asked afresh */
            /* Ahead of other waiting allocations: its pinned inputs go when it ends. */
            spw_id id = t->id;
            t->alloc_wait = size;
            ost_obj_create_first(w->store, spw_id_output(id, (uint32_t)index), size,
                                 exec_alloc_done, r);
            HASH_FIND(hh, w->tasks, &id, sizeof id, t);
            if (t != NULL && t->state == WT_SENT &&
                (index == 0 ? t->out : t->outx[index - 1]) == NULL)
                pres_yield(w, t, size); /* it waits: first in line for what is freed */
        }
        wrk__mem_check(w);
        return;
    }
    default:
        spw_log(SPW_LOG_ERR, "executor pid=%d sent %s: restarting it", ex->pid,
                proto_type_name(m->type));
        proto_conn_close(ex->conn, SPW_EPROTO);
    }
}

/* Both the socket and the process are gone: settle the executor's tasks and respawn. An
 * executor that stopped cleanly (status 0: told to stop by SIGTERM/SIGINT, its socket closed)
 * or by SIGTERM/SIGINT ran none of the tasks left in its FIFO: they go back to the ready queue,
 * a chained one through prev_fallback (a task a few times at most, in case the task itself
 * makes its executor exit). A recycled executor is replaced at once and is not a restart. */
static void exec_settle(wrk *w, wrk_exec *ex)
{
    if (ex->conn != NULL || ex->proc_running || ex->proc_handle)
        return;
    bool stopped = ex->term_signal == SIGTERM || ex->term_signal == SIGINT ||
                   (ex->term_signal == 0 && ex->exit_status == 0);
    bool oom = false;
    if (w->cgroup != NULL && ex->term_signal == SIGKILL && w->opts.task_mem_limit != 0)
        oom = wrk__cgroup_oom_kills(w, ex->idx) > ex->oom_kills;
    char why[256];
    if (oom)
        snprintf(why, sizeof why, "executor pid %d killed by the kernel at its memory limit of "
                                  "%llu bytes (--task-memory-limit)",
                 ex->pid, (unsigned long long)w->opts.task_mem_limit);
    else if (ex->term_signal != 0)
        snprintf(why, sizeof why, "executor pid %d killed by signal %d (%s)", ex->pid,
                 ex->term_signal, strsignal(ex->term_signal));
    else
        snprintf(why, sizeof why, "executor pid %d exited with status %lld", ex->pid,
                 (long long)ex->exit_status);
    bool first = true, logged = false;
    while (ex->head != NULL) {
        wtask *t = exec_pop(w, ex);
        if (w->closing) {
            task_free(w, t);
        } else if (first && (!stopped || t->requeued >= 3)) {
            char msg[1024];
            snprintf(msg, sizeof msg, "%s while running %s", why, t->fn);
            spw_log(SPW_LOG_WARN, "%s", msg);
            logged = true;
            task_report(w, t, oom ? SPW_ETASKMEM : SPW_EEXECCRASH, 0, NULL, msg, 0);
        } else {
            outs_abort(w, t);
            if (first)
                t->requeued++;
            /* A chained task's input was on the dead executor: a new one would only answer
             * SPW_EAHEAD, so it is taken in again the way that answer would take it in. */
            if (t->prev > 0)
                prev_fallback(w, t);
            else
                ready_push(w, t, true);
        }
        first = false;
    }
    if (w->closing)
        return;
    /* An executor that ended on its own or was killed (a crash between tasks, `kill PID`) is
     * logged once, whether or not it had tasks; one recycled on purpose is not. */
    if (!logged && !ex->recycle)
        spw_log(stopped ? SPW_LOG_NOTICE : SPW_LOG_WARN, "%s %s: restarting it", why,
                first ? "while idle" : "before running its queued tasks, which run again");
    uint64_t delay = 0;
    if (ex->recycle) {
        w->exec_recycles++;
        ex->recycle = false;
    } else {
        w->exec_restarts++;
        ex->restarts++;
        /* A crash loop (an executor dying right after start) backs off up to 5 s. */
        uint64_t lived_ms = (spw_now_ns() - ex->started_ns) / 1000000ULL;
        delay = lived_ms < 1000 ? (ex->restarts > 10 ? 5000 : 100u * ex->restarts) : 0;
    }
    if (!ex->respawn_init) {
        uv_timer_init(w->loop, &ex->respawn);
        ex->respawn.data = ex;
        ex->respawn_init = true;
        w->handles++;
    }
    uv_timer_start(&ex->respawn, respawn_cb, delay, 0);
}

static void respawn_cb(uv_timer_t *t)
{
    wrk_exec *ex = t->data;
    wrk *w = ex->w;
    if (w->closing)
        return;
    int rc = wrk__exec_start(w, ex);
    if (rc != 0) {
        spw_log(SPW_LOG_ERR, "cannot restart executor %u: %s; retrying in 1 s", ex->idx,
                spw_strerror(rc));
        uv_timer_start(&ex->respawn, respawn_cb, 1000, 0);
        return;
    }
    wrk__dispatch(w);
}

static void exec_conn_msg(proto_conn *c, const proto_msg *m)
{
    wrk__exec_msg(proto_conn_data(c), m);
}

static void exec_conn_close(proto_conn *c, int status)
{
    (void)status;
    wrk_exec *ex = proto_conn_data(c);
    ex->conn = NULL;
    if (ex->proc_running && !ex->w->closing && !ex->recycle)
        uv_process_kill(&ex->proc, SIGKILL); /* a broken protocol: make sure it is gone */
    exec_settle(ex->w, ex);
}

static const proto_conn_cbs exec_cbs = {
    .on_msg = exec_conn_msg,
    .on_close = exec_conn_close,
};

static void exec_proc_closed(uv_handle_t *h)
{
    wrk_exec *ex = h->data;
    wrk *w = ex->w;
    ex->proc_handle = false;
    exec_settle(w, ex);
    w->handles--;
    wrk__maybe_done(w);
}

void wrk__respawn_closed(uv_handle_t *h)
{
    wrk_exec *ex = h->data;
    ex->w->handles--;
    wrk__maybe_done(ex->w);
}

static void exec_exit(uv_process_t *p, int64_t status, int term_signal)
{
    wrk_exec *ex = p->data;
    wrk *w = ex->w;
    ex->proc_running = false;
    ex->exit_status = status;
    ex->term_signal = term_signal;
    if (w->closing) {
        /* Stopping: an executor that got the same SIGTERM/SIGINT as us (systemd signals the
         * whole unit) ended normally. */
        if ((status != 0 || (term_signal != 0 && term_signal != SIGTERM &&
                             term_signal != SIGINT)) &&
            !ex->killed) {
            spw_log(SPW_LOG_ERR, "executor pid=%d ended abnormally at shutdown: status=%lld "
                                 "signal=%d",
                    ex->pid, (long long)status, term_signal);
            w->close_status = SPW_EEXECCRASH;
        }
        wrk__exec_gone(w);
    }
    if (ex->conn != NULL)
        proto_conn_close(ex->conn, SPW_EEXECCRASH);
    uv_close((uv_handle_t *)p, exec_proc_closed);
}

#if defined(__SANITIZE_ADDRESS__)
extern char **environ;
/* Under AddressSanitizer an executor with a memory limit runs without ASan's quarantine: freed
 * task memory would stay mapped in it and count against RLIMIT_DATA, and ASan dies, rather
 * than fail the allocation, when the quarantine itself cannot grow. */
static char **exec_env(wrk *w)
{
    if (w->opts.task_mem_limit == 0)
        return NULL;
    size_t n = 0;
    while (environ[n] != NULL)
        n++;
    char **env = spw_calloc(SPW_MOD_WORKER, n + 2, sizeof *env);
    size_t k = 0;
    const char *asan = "";
    for (size_t i = 0; i < n; i++) {
        if (strncmp(environ[i], "ASAN_OPTIONS=", 13) == 0)
            asan = environ[i] + 13;
        else
            env[k++] = spw_strdup(SPW_MOD_WORKER, environ[i]);
    }
    size_t len = strlen(asan) + 64;
    env[k] = spw_malloc(SPW_MOD_WORKER, len);
    snprintf(env[k], len, "ASAN_OPTIONS=%s%squarantine_size_mb=0", asan, asan[0] ? ":" : "");
    return env;
}

static void exec_env_free(char **env)
{
    for (size_t i = 0; env != NULL && env[i] != NULL; i++)
        spw_free(env[i]);
    spw_free(env);
}
#else
static char **exec_env(wrk *w)
{
    (void)w;
    return NULL;
}

static void exec_env_free(char **env)
{
    (void)env;
}
#endif

int wrk__exec_start(wrk *w, wrk_exec *ex)
{
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
        return -errno;
    char cap[32], lim[32], mem[32], cg[PATH_MAX] = "-";
    snprintf(cap, sizeof cap, "%llu", (unsigned long long)w->opts.store.capacity);
    snprintf(lim, sizeof lim, "%d", spw_log_level);
    snprintf(mem, sizeof mem, "%llu", (unsigned long long)w->opts.task_mem_limit);
    if (w->cgroup != NULL && w->opts.task_mem_limit != 0 &&
        wrk__cgroup_exec_dir(w, ex->idx, cg, sizeof cg) != 0)
        snprintf(cg, sizeof cg, "-");
    ex->oom_kills = strcmp(cg, "-") != 0 ? wrk__cgroup_oom_kills(w, ex->idx) : 0;
    char *argv[8 + 2 * WRK_MAX_PLUGINS];
    int n = 0;
    argv[n++] = w->exe;
    argv[n++] = "--executor";
    argv[n++] = cap;
    argv[n++] = lim;
    argv[n++] = mem;
    argv[n++] = cg;
    for (uint32_t i = 0; i < w->nstatic; i++)
        argv[n++] = w->static_paths[i]; /* the copies in the cache, never the files given */
    argv[n] = NULL;
    uv_stdio_container_t stdio[5];
    stdio[0].flags = UV_IGNORE;
    stdio[1].flags = UV_INHERIT_FD;
    stdio[1].data.fd = 1;
    stdio[2].flags = UV_INHERIT_FD;
    stdio[2].data.fd = 2;
    stdio[3].flags = UV_INHERIT_FD;
    stdio[3].data.fd = sv[1];
    stdio[4].flags = UV_INHERIT_FD;
    stdio[4].data.fd = ost_store_fd(w->store);
    uv_process_options_t po;
    memset(&po, 0, sizeof po);
    po.file = w->exe;
    po.args = argv;
    po.exit_cb = exec_exit;
    po.stdio = stdio;
    po.stdio_count = 5;
    po.env = exec_env(w);
    ex->proc.data = ex;
    int rc = uv_spawn(w->loop, &ex->proc, &po);
    exec_env_free(po.env);
    close(sv[1]);
    if (rc != 0) {
        close(sv[0]);
        /* uv_spawn initialises the handle even on failure; it must still be closed. */
        ex->proc_handle = true;
        w->handles++;
        uv_close((uv_handle_t *)&ex->proc, exec_proc_closed);
        return rc;
    }
    ex->proc_handle = true;
    ex->proc_running = true;
    ex->pid = ex->proc.pid;
    ex->term_signal = 0;
    ex->exit_status = 0;
    ex->started_ns = spw_now_ns();
    ex->tasks_sent = 0;
    ex->recycle = false;
    ex->ntold = 0; /* a new process: it loads uploaded plugins when told again */
    w->handles++;
    rc = proto_conn_open_fd(w->ctx, sv[0], &exec_cbs, ex, &ex->conn);
    if (rc != 0) {
        close(sv[0]);
        ex->conn = NULL;
        uv_process_kill(&ex->proc, SIGKILL);
        return 0; /* the exit callback settles it */
    }
    return 0;
}

void wrk__tasks_drop(wrk *w)
{
    started_clear(w); /* notices for the lost scheduler */
    /* Tasks waiting for admission hold nothing yet, and none of them is admitted on the way (a
     * task admitted and waiting for its output's room ends through pre_done). */
    w->adm_pumping = true;
    while (w->adm_head != NULL)
        task_report(w, w->adm_head, SPW_ECLOSED, 0, NULL, "the scheduler that sent it is gone", 0);
    w->adm_pumping = false;
    wtask *t = w->ready_head;
    w->ready_head = w->ready_tail = NULL;
    while (t != NULL) {
        wtask *next = t->next;
        task_report(w, t, SPW_ECLOSED, 0, NULL, "the scheduler that sent it is gone", 0);
        t = next;
    }
}

void wrk__tasks_free_all(wrk *w)
{
    w->ready_head = w->ready_tail = NULL;
    wtask *t, *tmp;
    HASH_ITER(hh, w->tasks, t, tmp) task_free(w, t);
    w->adm_head = NULL;
    wrk__admit_free_all(w);
    spw_slab_trim(&w->task_slab);
    w->ahead = NULL;
    spw_free(w->started);
    w->started = NULL;
    spw_free(w->started_ids);
    w->started_ids = NULL;
    w->nstarted = w->capstarted = 0;
}

/* ----------------------------------------------------------- cancellation */

void wrk__task_cancel(wrk *w, const proto_msg *m)
{
    const proto_val *ids = &m->f[F_CANCEL_IDS];
    for (uint32_t i = 0; i < ids->arr.n; i++) {
        spw_id id = ids->arr.v[i].id;
        wtask *t;
        HASH_FIND(hh, w->tasks, &id, sizeof id, t);
        if (t == NULL || t->state == WT_SENT)
            continue; /* done already, or started: it finishes and the scheduler drops it */
        if (t->state == WT_ADMIT) {
            task_report(w, t, SPW_ECANCELED, 0, NULL, "cancelled: its client went away", 0);
            continue;
        }
        if (t->state == WT_INPUTS) {
            /* Fetches and restores under way name it: it goes when the last one answers. */
            if (t->fail_status == 0) {
                t->fail_status = SPW_ECANCELED;
                t->fail_msg = spw_strdup(SPW_MOD_WORKER, "cancelled: its client went away");
            }
            ahead_unwait(w, t, SPW_ECANCELED, NULL); /* it waits for nothing of its own */
            continue;
        }
        /* Queued for an executor: off the ready queue, and reported now (its slot is free). */
        wtask **pp = &w->ready_head, *prev = NULL;
        while (*pp != NULL && *pp != t) {
            prev = *pp;
            pp = &(*pp)->next;
        }
        if (*pp == t) {
            *pp = t->next;
            if (w->ready_tail == t)
                w->ready_tail = prev;
        }
        task_report(w, t, SPW_ECANCELED, 0, NULL, "cancelled: its client went away", 0);
    }
}
