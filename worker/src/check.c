/*
 * wrk__check: the worker's task and fetch tables checked against the invariants written atop
 * tasks.c and in worker_int.h. Where SPW_CHECK_INVARIANTS is defined (Debug and sanitizer
 * builds) worker.c runs it before every scheduler message and on every timer tick, and tasks.c
 * after every dispatch pass (which follows every task intake, input arrival and completion);
 * elsewhere the hook compiles to nothing. A violation prints what was violated with the task or
 * object id and aborts.
 *
 * Cost: one walk over the task table, the ready queue, the executors' FIFOs and the fetch
 * table. Above WRK_CHECK_SMALL tasks and fetches a check waits twenty times its own duration
 * after the last one started (at most a twentieth of the worker's time). Reads only.
 */
#include <stdio.h>
#include <stdlib.h>

#include "worker_int.h"

#define WRK_CHECK_SMALL 256 /* tasks + fetches checked on every event */
#define WRK_CHECK_SHARE 20  /* above: a check waits 20 times its own duration */

static const spw_id NOID = {0, 0};

#define CHECK(cond, id, ...) SPW_INVARIANT("wrk__check", cond, id, __VA_ARGS__)

static bool is_exec(const wrk *w, const wrk_exec *ex)
{
    return ex >= w->execs && ex < w->execs + w->nexec;
}

static uint32_t inline_args(const wtask *t)
{
    uint32_t n = 0;
    for (uint32_t i = 0; i < t->nargs; i++)
        n += t->args[i].kind == PROTO_ARG_INLINE;
    return n;
}

/* Counts tasks by state: [WT_INPUTS, WT_QUEUED, WT_SENT, WT_ADMIT]. */
static void check_tasks(const wrk *w, uint64_t n[4])
{
    const wtask *t, *tmp;
    HASH_ITER(hh, w->tasks, t, tmp)
    {
        spw_id id = t->id;
        const wtask *found;
        HASH_FIND(hh, w->tasks, &t->id, sizeof t->id, found);
        CHECK(found == t, id, "task not found under its own id");
        CHECK(t->state <= WT_ADMIT, id, "task state %u unknown", t->state);
        n[t->state]++;
        CHECK(t->gen <= w->gen, id, "task of generation %u, the worker is at %u", t->gen, w->gen);
        uint32_t unpinned = 0, local = 0, prev = 0, first_unpinned = 0;
        for (uint32_t i = 0; i < t->nargs; i++) {
            const warg *a = &t->args[i];
            CHECK(!a->owned || a->kind == PROTO_ARG_INLINE, id,
                  "argument %u owns an inline copy, but is not inline", i);
            if (a->kind == PROTO_ARG_INLINE) {
                CHECK(!a->pinned && !a->local, id, "inline argument %u pinned or waiting", i);
                continue;
            }
            if (a->local) {
                /* Sent ahead: its producer is here, and has not ended (ahead_settle), unless the
                 * worker is closing (tasks are then freed with no answer, in any order). */
                const wtask *p;
                HASH_FIND(hh, w->tasks, &a->id, sizeof a->id, p);
                CHECK((p != NULL && p != t) || w->closing, id,
                      "argument %u waits for a producer not here", i);
                CHECK(a->kind == PROTO_ARG_OBJ && !a->pinned && (t->flags & PROTO_TASK_AHEAD), id,
                      "argument %u waits for a producer here, but is not a whole object of a "
                      "task sent ahead",
                      i);
                local++;
            }
            if (a->prev) {
                /* Made by a task before it in its executor's queue, which keeps it (its
                 * executor gone, exec_settle takes it in again through prev_fallback). */
                CHECK(a->kind == PROTO_ARG_OBJ && !a->pinned && !a->local &&
                          t->state != WT_INPUTS && (t->flags & PROTO_TASK_AHEAD),
                      id, "argument %u is its producer's output on the executor, but not a whole "
                          "object of a task sent ahead and sent to an executor", i);
                prev++;
                continue;
            }
            CHECK(a->nlocs <= WRK_MAX_LOCS, id, "argument %u: %u locations", i, a->nlocs);
            CHECK(!a->pinned || a->obj != NULL, id, "argument %u pinned without an object", i);
            if (!a->pinned && unpinned++ == 0)
                first_unpinned = i;
        }
        CHECK(local == t->local, id, "%u arguments wait for producers here, local %u", local,
              t->local);
        CHECK(prev == t->prev, id, "%u arguments are outputs on the executor, prev %u", prev,
              t->prev);
        if (local > 0) {
            bool listed = false;
            for (const wtask *y = w->ahead; y != NULL && !listed; y = y->anext)
                listed = y == t;
            CHECK(listed && (t->state == WT_INPUTS || t->state == WT_ADMIT) && t->missing >= local,
                  id, "task waiting for producers here is not on the ahead list, or not waiting");
        }
        if (t->state == WT_ADMIT) {
            /* Waiting for admission (listed, nothing reserved), or admitted and waiting for
             * its output's room: no input got or pinned yet either way. */
            CHECK(unpinned == t->nargs - inline_args(t) - prev && t->ex == NULL && !t->pre, id,
                  "task waiting for admission holds an input, its output's room or an executor");
            bool listed = false;
            for (const wtask *y = w->adm_head; y != NULL && !listed; y = y->adm_next)
                listed = y == t;
            CHECK(listed == t->adm_listed && t->adm_listed != t->pre_wait &&
                      t->admitted == t->pre_wait,
                  id,
                  "task waiting for admission: listed %d, on the list %d, admitted %d, "
                  "waiting for room %d",
                  t->adm_listed, listed, t->admitted, t->pre_wait);
        } else if (t->state == WT_INPUTS) {
            /* Inputs that failed are counted off without a pin, so missing may be fewer. */
            CHECK(t->missing > 0 || t->plugin_wait, id, "task waits for inputs, none missing");
            CHECK(t->missing <= unpinned, id, "%u inputs missing, %u unpinned", t->missing,
                  unpinned);
            CHECK(t->ex == NULL, id, "task waiting for inputs has an executor");
        } else {
            CHECK(t->missing == 0 && unpinned == 0, id,
                  "task in state %u with %u inputs missing, %u unpinned (the first: argument %u)",
                  t->state, t->missing, unpinned, first_unpinned);
            CHECK(t->fail_status == 0, id, "task with a failed input went on (state %u)",
                  t->state);
        }
        CHECK(t->started_slot == 0 ||
                  (t->started_slot <= w->nstarted && w->started[t->started_slot - 1] == t),
              id, "task's start notice slot %u is not its own", t->started_slot);
        if (t->state == WT_QUEUED)
            CHECK(t->ex == NULL, id, "queued task has an executor");
        if (t->state == WT_SENT)
            CHECK(t->ex != NULL && is_exec(w, t->ex), id, "sent task without its executor");
    }
}

static void check_ahead(const wrk *w)
{
    for (const wtask *t = w->ahead; t != NULL; t = t->anext) {
        const wtask *found;
        HASH_FIND(hh, w->tasks, &t->id, sizeof t->id, found);
        CHECK(found == t && t->local > 0, t->id, "ahead list holds a task %s",
              found != t ? "not in the table" : "waiting for no producer here");
        CHECK(t->anext == NULL || t->anext->aprev == t, t->id, "ahead list links broken");
    }
}

static void check_queues(const wrk *w, const uint64_t n[4])
{
    uint64_t queued = 0;
    const wtask *last = NULL;
    for (const wtask *t = w->ready_head; t != NULL; t = t->next) {
        CHECK(t->state == WT_QUEUED, t->id, "task in state %u on the ready queue", t->state);
        const wtask *found;
        HASH_FIND(hh, w->tasks, &t->id, sizeof t->id, found);
        CHECK(found == t, t->id, "ready queue holds a task not in the table");
        CHECK(queued++ < n[WT_QUEUED], t->id, "ready queue longer than the queued tasks");
        last = t;
    }
    CHECK(w->ready_tail == last, NOID, "ready_tail is not the queue's last task");
    CHECK(queued == n[WT_QUEUED], NOID, "%llu tasks queued, ready queue holds %llu",
          (unsigned long long)n[WT_QUEUED], (unsigned long long)queued);

    uint64_t sent = 0;
    uint32_t running = 0;
    for (uint32_t i = 0; i < w->nexec; i++) {
        const wrk_exec *ex = &w->execs[i];
        uint32_t len = 0;
        last = NULL;
        for (const wtask *t = ex->head; t != NULL; t = t->next) {
            CHECK(t->state == WT_SENT && t->ex == ex, t->id,
                  "executor %u's FIFO holds a task in state %u of another executor", i, t->state);
            CHECK(len++ <= n[WT_SENT], t->id, "executor %u's FIFO loops", i);
            last = t;
        }
        CHECK(ex->tail == last, NOID, "executor %u: tail is not its FIFO's last task", i);
        CHECK(len == ex->inflight, NOID, "executor %u: inflight %u, FIFO holds %u", i,
              ex->inflight, len);
        sent += len;
        running += ex->inflight > 0;
    }
    CHECK(sent == n[WT_SENT], NOID, "%llu tasks sent, executors' FIFOs hold %llu",
          (unsigned long long)n[WT_SENT], (unsigned long long)sent);
    CHECK(running == w->running, NOID, "running %u, %u executors have tasks", w->running,
          running);
    CHECK(w->nstarted <= w->capstarted, NOID, "started notices over their array");
    uint32_t live = 0;
    for (uint32_t i = 0; i < w->nstarted; i++) {
        const wtask *t = w->started[i], *found;
        if (t == NULL)
            continue; /* struck out: the task ended first */
        live++;
        HASH_FIND(hh, w->tasks, &t->id, sizeof t->id, found);
        CHECK(found == t, t->id, "start notice %u for a task not in the table", i);
        CHECK(t->started_slot == i + 1, t->id, "start notice %u: the task says slot %u", i,
              t->started_slot);
    }
    CHECK(live == w->nstarted_live, NOID, "%u start notices to send, %u counted", live,
          w->nstarted_live);
}

static void check_fetches(const wrk *w)
{
    const wfetch *f, *tmp;
    uint32_t ranged = 0;
    HASH_ITER(hh, w->fetches, f, tmp)
    {
        ranged += f->ranged;
        spw_id id = f->id;
        const wfetch *found;
        HASH_FIND(hh, w->fetches, &f->id, sizeof f->id, found);
        CHECK(found == f, id, "fetch not found under its own id");
        CHECK(f->ranged ? f->src_off + f->size <= f->src_size && f->size < f->src_size
                        : spw_id_eq(f->src, f->id) && f->src_off == 0 && f->src_size == f->size,
              id, "fetch of %llu bytes at %llu of %llu", (unsigned long long)f->size,
              (unsigned long long)f->src_off, (unsigned long long)f->src_size);
        CHECK(f->nstripes >= 1 && f->nstripes <= WRK_MAX_STRIPES &&
                  f->st[0].off == f->src_off &&
                  f->st[f->nstripes - 1].end == f->src_off + f->size,
              id, "fetch in %u ranges", f->nstripes);
        for (uint32_t k = 0; k < f->nstripes; k++) {
            const wstripe *st = &f->st[k];
            CHECK(st->nlocs <= WRK_MAX_LOCS && st->next_loc <= st->nlocs, id,
                  "fetch range %u: %u locations, next %u", k, st->nlocs, st->next_loc);
            CHECK(st->off <= st->upto && st->upto <= st->end &&
                      (k == 0 || st->off == f->st[k - 1].end),
                  id, "fetch range %u: %llu..%llu at %llu", k, (unsigned long long)st->off,
                  (unsigned long long)st->end, (unsigned long long)st->upto);
        }
        CHECK(f->received <= f->size, id, "fetch received %llu of %llu bytes",
              (unsigned long long)f->received, (unsigned long long)f->size);
        CHECK(f->obj == NULL || !f->creating, id, "fetch has its object and still creates it");
        for (const fwait *x = f->waiters; x != NULL; x = x->next) {
            const wtask *t;
            HASH_FIND(hh, w->tasks, &x->t->id, sizeof x->t->id, t);
            CHECK(t == x->t, id, "fetch waited for by a task not in the table");
            CHECK(t->state == WT_INPUTS && t->missing > 0, id,
                  "fetch waited for by task in state %u", t->state);
            CHECK(x->arg < t->nargs && spw_id_eq(t->args[x->arg].id, f->src), id,
                  "fetch waiter names argument %u of another object", x->arg);
            CHECK(!f->ranged ||
                      spw_id_eq(wrk__view_id(f->src, t->args[x->arg].off, t->args[x->arg].len),
                                f->id),
                  id, "ranged fetch waiter wants another range (argument %u)", x->arg);
            CHECK(!t->args[x->arg].pinned, id, "fetch waiter's argument is already pinned");
        }
    }
    CHECK(ranged == w->nranged, NOID, "%u ranged fetches, %u counted", ranged, w->nranged);
}

/* Admission: the reservations add up, and every waiting task is listed once, in its state. */
static void check_admission(const wrk *w)
{
    uint64_t sum = 0, n = 0, waiting = 0;
    const wtask *x, *xt;
    HASH_ITER(hh, w->tasks, x, xt)
    waiting += x->adm_listed;
    const wres *r, *tmp;
    HASH_ITER(hh, w->adm_res, r, tmp)
    {
        CHECK(r->refs > 0, r->id, "reservation of %llu bytes with no reference",
              (unsigned long long)r->bytes);
        sum += r->bytes;
    }
    CHECK(sum == w->adm_reserved, NOID, "reservations add up to %llu, adm_reserved %llu",
          (unsigned long long)sum, (unsigned long long)w->adm_reserved);
    for (const wtask *t = w->adm_head; t != NULL; t = t->adm_next) {
        CHECK(t->state == WT_ADMIT && t->adm_listed, t->id,
              "task in state %u on the admission list", t->state);
        CHECK(n++ < waiting, t->id, "admission list longer than the tasks waiting for it");
    }
    CHECK(n == waiting, NOID, "%llu tasks wait for admission, its list holds %llu",
          (unsigned long long)waiting, (unsigned long long)n);
}

void wrk__check_full(wrk *w)
{
    uint64_t n[4] = {0, 0, 0, 0};
    check_tasks(w, n);
    check_admission(w);
    check_queues(w, n);
    check_ahead(w);
    check_fetches(w);
}

#ifdef SPW_CHECK_INVARIANTS
void wrk__check(wrk *w)
{
    static uint64_t next_ns; /* one worker per process in practice */
    if (HASH_COUNT(w->tasks) + HASH_COUNT(w->fetches) > WRK_CHECK_SMALL) {
        uint64_t now = spw_now_ns();
        if (now < next_ns)
            return;
        wrk__check_full(w);
        next_ns = now + (spw_now_ns() - now) * WRK_CHECK_SHARE;
        return;
    }
    wrk__check_full(w);
}
#endif
