/*
 * Draining a worker, and keeping objects at their number of copies.
 *
 * A worker asked to drain (its own DRAIN when it is stopped, or spillway-ctl drain) gets no new
 * task, upload or copy (sched__worker_paused says so), its tasks that have not started go back
 * to the ready queue (TASK_CANCEL, answered SPW_ECANCELED: tasks.c requeues them), and every
 * object of which it holds the only copy that others do not (or fewer than the copies the
 * object is kept at: sched_obj.copies_want) is copied to another worker, DRAIN_WINDOW copies at a
 * time. It is drained once it runs no task, receives no upload and has no such copy left; its
 * DRAIN requests are then answered. Copies are REPLICATEs tracked as broadcasts with no client
 * (sched__copies_start in broadcast.c), fetched from the draining worker's peer port: a spilled
 * object is restored there as it is read. An object kept at k copies gets a new one when a
 * holder is lost (sched__copies_restore).
 * Invariants: a worker's drain queue, copies in flight and requests are empty unless it drains;
 * s->ndraining counts the workers that drain or are drained.
 */
#include <stdio.h>
#include <string.h>

#include "sched_int.h"

/* Copies of one draining worker's objects under way at once: enough to keep the links busy,
 * few enough that the objects it restores from its spill to send them stay a small part of its
 * store. */
#define DRAIN_WINDOW 8
/* Copies of one drain that may fail (a target gone or full) before the rest are given up. */
#define DRAIN_FAILURES_MAX 64

typedef struct sched_drain_req {
    uint64_t session; /* the spillway-ctl session asking, or 0: the worker itself */
    uint64_t req;
} sched_drain_req;

/* Copies o lacks on workers that do not drain: the copies it is kept at (at least one) less
 * those it has there. */
static uint32_t copies_missing(sched *s, const sched_obj *o)
{
    uint32_t want = o->copies_want > 1 ? o->copies_want : 1, have = 0;
    for (uint32_t i = 0; i < o->nlocs; i++) {
        const sched_worker *h = sched__worker_by_id(s, o->locs[i]);
        have += h != NULL && !h->drain;
    }
    return have >= want ? 0 : want - have;
}

static void queue_push(sched_worker *w, spw_id id)
{
    if (w->ndrain_q == w->capdrain_q) {
        w->capdrain_q = w->capdrain_q ? w->capdrain_q * 2 : 64;
        w->drain_q = spw_realloc(SPW_MOD_SCHED, w->drain_q, w->capdrain_q * sizeof *w->drain_q);
    }
    w->drain_q[w->ndrain_q++] = id;
}

static void answer(sched *s, sched_worker *w, const sched_drain_req *r, int err, const char *msg)
{
    proto_conn *c = NULL;
    if (r->session == 0) {
        c = w->conn;
    } else {
        sched_session *ss;
        HASH_FIND(hh, s->sessions, &r->session, sizeof r->session, ss);
        c = ss != NULL ? ss->conn : NULL;
    }
    if (c == NULL)
        return;
    if (err == 0)
        proto_send_ok(c, r->req, &(proto_ok_msg){.value = w->drain_copies});
    else
        proto_conn_error(c, r->req, err, "worker=%u %s: %s", w->id, w->name, msg);
}

/* Whether w has a task whose output someone wants (one nobody wants any more is not waited
 * for: it is dropped when it ends). */
static bool tasks_needed(const sched_worker *w)
{
    for (const sched_task *t = w->tasks; t != NULL; t = t->wnext)
        if (!sched__task_out(t)->orphan)
            return true;
    return false;
}

/* Starts copies from w's queue while the window has room; answers its requests once it is
 * drained. */
static void pump(sched *s, sched_worker *w)
{
    char hex[33];
    if (w->drain_pumping || w->drain == 0)
        return;
    w->drain_pumping = true;
    while (w->drain_inflight < DRAIN_WINDOW && w->ndrain_q > 0) {
        sched_obj *o = sched__obj_find(s, w->drain_q[--w->ndrain_q]);
        if (o == NULL || o->state != OBJ_READY || !sched__obj_has_loc(o, w->id))
            continue;
        uint32_t missing = copies_missing(s, o);
        if (missing == 0)
            continue;
        w->drain_inflight++;
        if (!sched__copies_start(s, o, o->nlocs + missing, w->id)) {
            w->drain_inflight--;
            w->drain_failed = DRAIN_FAILURES_MAX; /* no worker can take it: nothing will */
            spw_log(SPW_LOG_WARN, "worker=%u drains: no other worker can take obj=%s", w->id,
                    spw_id_hex(o->id, hex));
        }
    }
    w->drain_pumping = false;
    if (w->drain == PROTO_WSTATE_DRAINING && w->ndrain_q == 0 && w->drain_inflight == 0 &&
        w->reserved == 0 && !tasks_needed(w)) {
        w->drain = PROTO_WSTATE_DRAINED;
        spw_log(SPW_LOG_NOTICE, "worker=%u addr=%s drained: %llu copies made%s", w->id, w->addr,
                (unsigned long long)w->drain_copies,
                w->drain_failed >= DRAIN_FAILURES_MAX ? ", some objects could not be copied" : "");
        for (uint32_t i = 0; i < w->ndrain_reqs; i++)
            answer(s, w, &w->drain_reqs[i], 0, "");
        w->ndrain_reqs = 0;
    }
}

/* w drains from now on: its unstarted tasks are taken back, and its sole copies queued. */
static void drain_start(sched *s, sched_worker *w)
{
    w->drain = PROTO_WSTATE_DRAINING;
    s->ndraining++;
    spw_log(SPW_LOG_NOTICE, "worker=%u addr=%s draining", w->id, w->addr);
    /* Its tasks not yet started come back (SPW_ECANCELED, requeued by tasks.c); those running
     * finish there, and their outputs are copied away like the rest. */
    spw_id *ids = NULL;
    uint32_t n = 0, cap = 0;
    for (sched_task *t = w->tasks; t != NULL; t = t->wnext) {
        if (t->state == T_RUNNING)
            continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 64;
            ids = spw_realloc(SPW_MOD_SCHED, ids, cap * sizeof *ids);
        }
        ids[n++] = sched__task_out(t)->id;
    }
    for (uint32_t i = 0; i < n; i += PROTO_BATCH_MAX_RECS) {
        uint32_t k = n - i < PROTO_BATCH_MAX_RECS ? n - i : PROTO_BATCH_MAX_RECS;
        proto_send_task_cancel(w->conn, 0, &(proto_task_cancel_msg){.ids = {ids + i, k}});
    }
    spw_free(ids);
    uint32_t pos = 0;
    for (sched_obj *o; (o = spw_idmap_next(&s->objects, &pos)) != NULL;)
        if (o->state == OBJ_READY && sched__obj_has_loc(o, w->id))
            queue_push(w, o->id);
    sched__kick(s); /* its tasks go elsewhere */
}

void sched__drain(sched *s, sched_worker *self, sched_session *ss, const proto_msg *m)
{
    sched_worker *w = self;
    proto_conn *c = self != NULL ? self->conn : ss->conn;
    if (w == NULL) {
        char name[PROTO_MAX_NAME + 1];
        proto_str(&m->f[F_DRAIN_NAME], name, sizeof name);
        uint64_t id = m->f[F_DRAIN_WORKER].u;
        uint32_t found = 0;
        for (uint32_t i = 0; i < s->nworkers; i++) {
            sched_worker *x = s->workers[i];
            if (id != 0 ? x->id == id : strcmp(x->name, name) == 0 || strcmp(x->addr, name) == 0) {
                w = x;
                found++;
            }
        }
        if (found == 0) {
            if (id != 0)
                proto_conn_error(c, m->req, SPW_ENOWORKER, "no worker with id %llu",
                                 (unsigned long long)id);
            else
                proto_conn_error(c, m->req, SPW_ENOWORKER, "no worker named %s", name);
            return;
        }
        if (found > 1) {
            proto_conn_error(c, m->req, SPW_EINVAL, "%u workers are named %s: give its id", found,
                             name);
            return;
        }
    }
    if (w->drain == PROTO_WSTATE_DRAINED) {
        sched_drain_req r = {ss != NULL ? ss->id : 0, m->req};
        answer(s, w, &r, 0, "");
        return;
    }
    if (w->ndrain_reqs == w->capdrain_reqs) {
        w->capdrain_reqs = w->capdrain_reqs ? w->capdrain_reqs * 2 : 2;
        w->drain_reqs =
            spw_realloc(SPW_MOD_SCHED, w->drain_reqs, w->capdrain_reqs * sizeof *w->drain_reqs);
    }
    w->drain_reqs[w->ndrain_reqs++] = (sched_drain_req){ss != NULL ? ss->id : 0, m->req};
    if (w->drain == 0)
        drain_start(s, w);
    pump(s, w);
}

void sched__drain_poke(sched *s, sched_worker *w)
{
    if (w->drain == PROTO_WSTATE_DRAINING)
        pump(s, w);
}

void sched__drain_obj_added(sched *s, sched_obj *o, uint32_t worker)
{
    sched_worker *w = sched__worker_by_id(s, worker);
    if (w != NULL && w->drain != 0) {
        if (w->drain == PROTO_WSTATE_DRAINED)
            w->drain = PROTO_WSTATE_DRAINING; /* a copy came after all (a task that ran on) */
        queue_push(w, o->id);
    }
}

void sched__drain_copied(sched *s, uint32_t drainer, spw_id id, bool ok)
{
    sched_worker *w = sched__worker_by_id(s, drainer);
    if (w == NULL || w->drain == 0)
        return;
    w->drain_inflight--;
    if (ok) {
        w->drain_copies++;
    } else if (++w->drain_failed < DRAIN_FAILURES_MAX) {
        queue_push(w, id); /* tried again, on another worker if this one could not take it */
    }
    pump(s, w);
}

void sched__drain_worker_gone(sched *s, sched_worker *w)
{
    for (uint32_t i = 0; i < w->ndrain_reqs; i++) {
        sched_drain_req *r = &w->drain_reqs[i];
        if (r->session != 0)
            answer(s, w, r, SPW_ECLOSED, "left before it was drained");
    }
    if (w->drain != 0)
        s->ndraining--;
    spw_free(w->drain_q);
    spw_free(w->drain_reqs);
    w->drain_q = NULL;
    w->drain_reqs = NULL;
    w->ndrain_q = w->ndrain_reqs = 0;
}

void sched__drain_session_gone(sched *s, sched_session *ss)
{
    for (uint32_t k = 0; k < s->nworkers; k++) {
        sched_worker *w = s->workers[k];
        uint32_t j = 0;
        for (uint32_t i = 0; i < w->ndrain_reqs; i++)
            if (w->drain_reqs[i].session != ss->id)
                w->drain_reqs[j++] = w->drain_reqs[i];
        w->ndrain_reqs = j;
    }
}

void sched__copies_restore(sched *s, sched_obj *o)
{
    char hex[33];
    if (o->copies_want <= 1 || o->state != OBJ_READY || o->nlocs == 0)
        return;
    uint32_t missing = copies_missing(s, o);
    if (missing > 0 && sched__copies_start(s, o, o->nlocs + missing, 0))
        spw_log(SPW_LOG_INFO, "obj=%s lost a copy: making %u more", spw_id_hex(o->id, hex),
                missing);
}
