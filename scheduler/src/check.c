/*
 * sched__check: the invariants written atop tasks.c, objects.c, graphs.c and sched_int.h, as
 * code. Where SPW_CHECK_INVARIANTS is defined (Debug and sanitizer builds, see the top
 * CMakeLists.txt) sched.c runs it after every handled message and closed connection, place.c
 * after every dispatch pass, and the timer on every tick; elsewhere the hook compiles to
 * nothing. sched__check_full (always built) is what the in-process tests call after each
 * step. A violation prints what was violated, with the task or object id, and aborts: in tests
 * a broken invariant is found where it breaks, not where it bites.
 *
 * Cost: one walk over the objects (with their tasks' arguments), sessions, workers and graphs.
 * While that state is small (SCHED_CHECK_SMALL units) every event checks it all. Above, a check
 * runs only once SCHED_CHECK_SHARE times its own duration has passed since the last one
 * started, so checking takes a bounded share of the scheduler's time: a large graph under ASan
 * stays linear, not quadratic, and heartbeats are still read in time. Reads only (graph_hold
 * is counted down and back up); allocates a table of the live graphs for a check's duration.
 */
#include <stdio.h>
#include <stdlib.h>

#include <utlist.h>

#include "sched_int.h"

#define SCHED_CHECK_SMALL 256 /* units (objects + sessions + workers) checked on every event */
#define SCHED_CHECK_SHARE 20  /* above: a check waits 20 times its own duration (a twentieth) */

/* What one check found out about one graph, from its task records and the sessions. */
typedef struct gacc {
    const sched_graph *g;
    UT_hash_handle hh;
    uint64_t ntasks;   /* task records naming it, + 1 per session submitting it */
    uint64_t inflight; /* of those, on a worker's list (assigned, or sent ahead) */
    uint64_t live_bytes;
    uint64_t counts[PROTO_TSTATE_COUNT];
} gacc;

static const spw_id NOID = {0, 0};

#define CHECK(cond, id, ...) SPW_INVARIANT("sched__check", cond, id, __VA_ARGS__)

static gacc *gacc_find(gacc *table, const sched_graph *g)
{
    gacc *a;
    HASH_FIND_PTR(table, &g, a);
    return a;
}

static bool worker_live(const sched *s, uint32_t id)
{
    for (uint32_t i = 0; i < s->nworkers; i++)
        if (s->workers[i]->id == id)
            return true;
    return false;
}

/* A task's own invariants, and its contribution to its graph's. */
static void check_task(sched *s, const sched_obj *o, const sched_task *t, gacc *graphs,
                       uint64_t tstate[PROTO_TSTATE_COUNT], uint64_t *linked, uint64_t *held)
{
    spw_id id = o->id;
    CHECK(o->has_task == 1 && sched__task_out(t) == o, id, "task and its output object disagree");
    CHECK(t->state <= T_FAILED, id, "task state %u unknown", t->state);
    CHECK(t->nouts >= 1 && t->nouts <= SPW_TASK_OUTPUTS_MAX && t->outs_alive < t->nouts, id,
          "task of %u outputs, %u of them after the first alive", t->nouts, t->outs_alive);
    tstate[t->state]++;
    bool live = t->state == T_WAITING || t->state == T_READY || t->state == T_ASSIGNED ||
                t->state == T_RUNNING;
    CHECK(live == !t->args_released, id,
          "task in state %u has its arguments %s", t->state,
          t->args_released ? "released" : "still held");
    uint32_t waiting = 0;
    const sched_arg *a = sched__task_args(t);
    for (uint32_t i = 0; i < t->nargs; i++, a = sched__arg_next(a)) {
        CHECK(a->kind <= PROTO_ARG_VIEW, id, "argument %u of unknown kind %u", i, a->kind);
        /* Slab records: the arguments end within the record (heap ones are larger). */
        CHECK(o->rec_class == SCHED_REC_HEAP ||
                  (const char *)a + sched__arg_size(a) <=
                      (const char *)o + sched__rec_bytes(o->rec_class),
              id, "argument %u runs past the record", i);
        if (a->kind != PROTO_ARG_INLINE)
            CHECK(sched__arg_task(a) == t, id, "argument %u does not point back to its task", i);
        if (a->kind == PROTO_ARG_INLINE) {
            CHECK(a->obj == NULL && !a->linked && !a->waiting, id,
                  "inline argument %u names an object", i);
            continue;
        }
        if (a->kept) {
            /* Its value, kept for lineage, stands for its object (tasks.c, release_args). */
            CHECK(a->obj == NULL && !a->linked && !a->waiting, id,
                  "argument %u keeps its value and still holds its object", i);
            CHECK(a->kept <= SCHED_ARG_KEEP_MAX + 1, id,
                  "argument %u keeps a value of unknown length", i);
            continue;
        }
        if (t->args_released) {
            CHECK(a->obj == NULL && !a->linked && !a->waiting, id,
                  "finished task's argument %u still holds its object", i);
            if (a->held) {
                const sched_obj *in = sched__obj_find(s, a->id);
                CHECK(in != NULL && in->lineage > 0, id,
                      "argument %u holds lineage on an object that is gone or not counted", i);
                (*held)++;
            }
            continue;
        }
        CHECK(!a->held, id, "unfinished task's argument %u holds lineage", i);
        /* The TASK_ARG reference of an unfinished task is its link on obj->consumers; the
         * object's walk counts the links, so refs[TASK_ARG] is checked there. */
        CHECK(a->obj != NULL && a->linked, id, "unfinished task's argument %u is not linked", i);
        CHECK(spw_id_eq(a->obj->id, a->id), id, "argument %u names another object", i);
        (*linked)++;
        if (a->waiting) {
            waiting++;
            CHECK(a->obj->state == OBJ_PENDING, id,
                  "argument %u waits for an object in state %u", i, a->obj->state);
        } else if (t->state == T_WAITING || t->state == T_READY) {
            /* LOST: not recomputable; the worker will fail the task (SPW_EOBJLOST). */
            CHECK(a->obj->state == OBJ_READY || a->obj->state == OBJ_LOST, id,
                  "argument %u counted as ready, but its object is in state %u", i,
                  a->obj->state);
        }
    }
    CHECK(t->ndeps == waiting, id, "ndeps %u, but %u arguments wait", t->ndeps, waiting);
    CHECK(t->state != T_WAITING || t->ndeps > 0, id, "waiting task has nothing to wait for");
    CHECK(t->state == T_WAITING || t->ndeps == 0, id, "task in state %u waits for %u inputs",
          t->state, t->ndeps);
    bool assigned = t->state == T_ASSIGNED || t->state == T_RUNNING;
    bool ahead = sched__task_ahead(t);
    if (t->state == T_READY)
        CHECK(t->depth < SCHED_DEPTHS, id, "ready task at depth %u", t->depth);
    else if (assigned || ahead)
        CHECK(t->wprev != NULL, id, "task in state %u (%s) is not on its worker's list",
              t->state, ahead ? "sent ahead" : "assigned");
    else
        CHECK(t->qprev == NULL && t->qnext == NULL, id,
              "task in state %u is linked on a ready queue or a worker's list", t->state);
    CHECK(assigned == (t->worker != NULL) || ahead, id, "task in state %u %s a worker", t->state,
          t->worker != NULL ? "has" : "lacks");
    CHECK(!ahead || t->state == T_WAITING || t->state == T_FAILED, id,
          "task sent ahead is in state %u", t->state);
    CHECK(!ahead || (t->flags & PROTO_TASK_AHEAD), id,
          "task sent ahead lacks PROTO_TASK_AHEAD (its SPW_EAHEAD would be refused)");
    if (t->worker != NULL)
        CHECK(worker_live(s, t->worker->id), id, "task on a worker that left");
    if (ahead) {
        /* Sent ahead: it waits only for whole objects (the worker takes their size from the
         * result it makes), and is bound to no worker name. */
        CHECK(!t->placed, id, "task bound to a worker name was sent ahead");
        const sched_arg *v = sched__task_args(t);
        for (uint32_t i = 0; i < t->nargs; i++, v = sched__arg_next(v))
            CHECK(!v->waiting || v->kind == PROTO_ARG_OBJ, id,
                  "task sent ahead waits for a view (argument %u)", i);
    }
    /* Object state follows its producer's. */
    switch (t->state) {
    case T_DONE:
        /* Or pending: restored from the journal, until a worker reports it (journal.c). */
        CHECK(o->state == OBJ_READY || o->state == OBJ_LOST ||
                  (o->state == OBJ_PENDING && o->home == SCHED_HOME_RESTORED),
              id, "task done, output in state %u", o->state);
        break;
    case T_FAILED:
        CHECK(o->state == OBJ_FAILED, id, "task failed, output in state %u", o->state);
        break;
    default:
        CHECK(o->state == OBJ_PENDING, id, "task in state %u, output in state %u", t->state,
              o->state);
    }
    CHECK(t->graph != NULL, id, "task without a graph");
    gacc *ga = gacc_find(graphs, t->graph);
    CHECK(ga != NULL, id, "task's graph is not on the graph list");
    ga->ntasks++;
    ga->counts[t->state]++;
    ga->inflight += t->worker != NULL;
}

static void check_object(sched *s, sched_obj *o, gacc *graphs, uint64_t tstate[PROTO_TSTATE_COUNT],
                         uint64_t refs[REF_KINDS], uint64_t *obj_bytes, uint64_t *linked,
                         uint64_t *consumers, uint64_t *holders, uint64_t *reserved_total,
                         uint64_t *waited, uint64_t *failed, uint64_t lin[3])
{
    spw_id id = o->id;
    CHECK(sched__obj_find(s, o->id) == o, id, "object not found under its own id");
    CHECK(o->state <= OBJ_LOST, id, "object state %u unknown", o->state);
    for (int k = 0; k < REF_KINDS; k++)
        refs[k] += o->refs[k];
    CHECK(o->refs[REF_PINNED] == 0, id, "the scheduler holds PINNED references (%u)",
          o->refs[REF_PINNED]);

    /* TASK_ARG: one per unfinished task's argument naming it, each linked here. */
    uint32_t nconsumers = 0;
    for (const sched_arg *a = o->consumers; a != NULL; a = a->cnext) {
        CHECK(a->obj == o && a->linked, id, "consumer list holds an argument of another object");
        CHECK(!sched__arg_task(a)->args_released, id,
              "consumer list holds a finished task's argument");
        CHECK(a->waiting == 0 || o->state == OBJ_PENDING, id, "consumer waits for a %s object",
              "non-pending");
        nconsumers++;
    }
    *consumers += nconsumers;
    CHECK(o->refs[REF_TASK_ARG] == nconsumers, id, "refs[TASK_ARG] %u, but %u consumers",
          o->refs[REF_TASK_ARG], nconsumers);

    /* CLIENT, OUTPUT, BROADCAST: the sum of the holding sessions' counts. */
    uint64_t held[REF_KINDS] = {0};
    for (const sched_ref *r = o->holders; r != NULL; r = r->onext) {
        CHECK(r->obj == o && spw_id_eq(r->id, o->id), id, "holder names another object");
        sched_session *ss;
        HASH_FIND(hh, s->sessions, &r->sess->id, sizeof r->sess->id, ss);
        CHECK(ss == r->sess, id, "holder's session is gone");
        sched_ref *back;
        HASH_FIND(hh, ss->refs, &o->id, sizeof o->id, back);
        CHECK(back == r, id, "holder not in its session's table");
        bool any = false;
        for (int k = 0; k < REF_KINDS; k++) {
            held[k] += r->count[k];
            any = any || r->count[k] > 0;
        }
        CHECK(any, id, "holder with no reference left is still linked");
        CHECK(r->count[REF_TASK_ARG] == 0 && r->count[REF_PINNED] == 0, id,
              "a session holds a TASK_ARG or PINNED reference");
        CHECK(r->count[REF_OUTPUT] == 0, id, "an OUTPUT reference in a session's table");
        (*holders)++;
    }
    /* The submitter's OUTPUT reference is inline: its session lists the object as kept. */
    CHECK(o->origin != NULL && o->origin->refs > 0, id, "names no live origin");
    if (o->kept) {
        held[REF_OUTPUT]++;
        sched_session *owner;
        HASH_FIND(hh, s->sessions, &o->origin->owner, sizeof o->origin->owner, owner);
        CHECK(owner != NULL, id, "kept for session %llu, which is gone",
              (unsigned long long)o->origin->owner);
        CHECK((o->has_task || o->is_out) && (sched__obj_task(s, o)->flags & PROTO_TASK_KEEP), id,
              "kept, but not the output of a task that keeps it");
        (*holders)++;
    } else {
        CHECK(o->kprev == NULL && o->knext == NULL, id, "not kept, but on a kept list");
    }
    CHECK(o->refs[REF_PLUGIN] == sched__plugins_on(s, o), id,
          "refs[PLUGIN] is %u, %u plugin records name it", o->refs[REF_PLUGIN],
          sched__plugins_on(s, o));
    for (int k = REF_CLIENT; k < REF_KINDS; k++) {
        if (k == REF_TASK_ARG || k == REF_PINNED || k == REF_PLUGIN)
            continue;
        CHECK(o->refs[k] == held[k], id, "refs[%d] is %u, its holders hold %llu", k, o->refs[k],
              (unsigned long long)held[k]);
    }

    /* Nothing unreferenced stays, except an output whose task still runs (orphan) and a chunk
     * of a chunked object, which holds it. */
    uint64_t total = o->graph_hold + o->is_chunk;
    for (int k = 0; k < REF_KINDS; k++)
        total += o->refs[k];
    const sched_task *t = sched__obj_producer(o);
    /* Output 0 of a task of several stays while the others do: a husk once its task ended. */
    /* Any output finished tasks read stays for lineage (sched_obj.lineage). */
    bool held_by_outs = (t != NULL && t->outs_alive > 0) || o->lineage > 0;
    if (total == 0)
        CHECK((t != NULL && t->worker != NULL && o->orphan) || held_by_outs, id,
              "object with no reference left was not freed (task state %d, orphan %u)",
              t != NULL ? t->state : -1, o->orphan);
    if (o->lineage > 0)
        CHECK(o->has_task || o->is_out, id, "lineage counted on a put");
    if (o->husk)
        CHECK(total == 0 && held_by_outs && o->state == OBJ_LOST && o->nlocs == 0 &&
                  !o->has_inline && !o->has_failure,
              id, "husk with references, a copy, a value or no other output of its task");
    if (o->is_out) {
        const sched_obj *o0 = sched__obj_find(s, spw_id_output_task(o->id));
        CHECK(o0 != NULL && o0->has_task, id, "output %u of a task that is gone",
              spw_id_output_index(o->id));
        CHECK(spw_id_output_index(o->id) < sched__obj_producer(o0)->nouts, id,
              "output %u of a task of %u", spw_id_output_index(o->id),
              sched__obj_producer(o0)->nouts);
        CHECK(!o->has_task && (!o->husk || o->lineage > 0), id,
              "a later output holds a task or is a husk nothing reads");
    }

    if (o->chunked) {
        CHECK(!o->has_task && !o->is_out && !o->is_chunk && !o->has_inline && o->nlocs == 0 &&
                  o->put_worker == 0,
              id, "a chunked object with a task, a copy or a value of its own");
        CHECK(o->chunks.n > 0 && o->chunks.n <= PROTO_CHUNKS_MAX &&
                  o->chunks.ready <= o->chunks.n &&
                  ((uint64_t)o->chunks.n - 1) << o->chunks.shift < o->size &&
                  (uint64_t)o->chunks.n << o->chunks.shift >= o->size,
              id, "chunked object: %u chunks (%u sealed) of 2^%u bytes for %llu bytes",
              o->chunks.n, o->chunks.ready, o->chunks.shift, (unsigned long long)o->size);
        CHECK(o->state != OBJ_READY || o->chunks.ready == o->chunks.n, id,
              "chunked object ready with %u of %u chunks", o->chunks.ready, o->chunks.n);
    }
    if (o->is_chunk) {
        const sched_obj *p = sched__obj_find(s, spw_id_output_task(o->id));
        uint32_t idx = spw_id_output_index(o->id);
        CHECK(p != NULL && p->chunked && idx >= 1 && idx <= p->chunks.n &&
                  o->size == sched__chunk_bytes(p, idx - 1) && !o->has_task,
              id, "chunk %u of no chunked object, or of the wrong size", idx);
    }

    /* Locations: distinct live workers, and only for ready objects. */
    CHECK(o->nlocs <= o->caplocs, id, "nlocs over caplocs");
    for (uint32_t i = 0; i < o->nlocs; i++) {
        CHECK(worker_live(s, o->locs[i]), id, "location on worker %u, which left", o->locs[i]);
        const sched_worker *lw = sched__worker_by_id(s, o->locs[i]);
        CHECK(lw == NULL || spw_idmap_find(&lw->objs, id) == o, id,
              "copy on worker %u missing from its index", o->locs[i]);
        for (uint32_t j = 0; j < i; j++)
            CHECK(o->locs[j] != o->locs[i], id, "worker %u listed twice", o->locs[i]);
    }
    if (o->nlocs > 0)
        CHECK(o->state == OBJ_READY, id, "object in state %u has %u locations", o->state,
              o->nlocs);
    if (o->has_inline)
        CHECK(o->size > 0 && (o->has_task || o->is_out), id, "inline value of %llu bytes, for a %s",
              (unsigned long long)o->size, o->has_task ? "task" : "put");
    if (o->has_failure) {
        (*failed)++;
        CHECK(sched__obj_failure(s, o) != NULL, id, "marked failed, with no failure recorded");
        CHECK(o->state == OBJ_FAILED || o->state == OBJ_LOST, id,
              "failure recorded for an object in state %u", o->state);
    }
    if (o->state == OBJ_READY) {
        *obj_bytes += o->chunked ? 0 : o->size; /* a chunked object's bytes are its chunks' */
        CHECK(o->nlocs > 0 || o->has_inline || o->size == 0 || sched__obj_producer(o) == NULL, id,
              "ready task output with no copy anywhere");
    }
    if (o->state == OBJ_PENDING && t == NULL && !o->is_out && !o->chunked)
        CHECK(o->put_worker != 0 || o->home == SCHED_HOME_RESTORED, id,
              "pending put with no worker receiving it (nor restored, waiting for a report)");
    if (o->put_worker != 0) {
        CHECK(t == NULL, id, "task output with an upload worker");
        if (o->state == OBJ_PENDING)
            CHECK(worker_live(s, o->put_worker), id, "upload placed on worker %u, which left",
                  o->put_worker);
        if (worker_live(s, o->put_worker)) {
            *reserved_total += o->size;
            CHECK(spw_idmap_find(&sched__worker_by_id(s, o->put_worker)->objs, id) == o, id,
                  "upload to worker %u missing from its index", o->put_worker);
        }
    }
    if (o->has_waiters) {
        (*waited)++;
        CHECK(sched__obj_waiters(s, o) != NULL, id, "marked waited for, with no waiter");
    }
    for (const sched_waiter *w = sched__obj_waiters(s, o); w != NULL; w = w->next) {
        CHECK(w->obj == o, id, "waiter for another object");
        CHECK(o->state == OBJ_PENDING, id, "LOCATE waits for an object in state %u", o->state);
    }

    if (o->live) {
        CHECK(o->refs[REF_TASK_ARG] > 0, id, "counted in live bytes with no consumer left");
        const sched_task *lt = sched__obj_task(s, o);
        CHECK(lt != NULL, id, "a put counted in a graph's live bytes");
        gacc *ga = gacc_find(graphs, lt->graph);
        CHECK(ga != NULL, id, "counted in a graph that is not on the list");
        ga->live_bytes += o->size;
    }

    if (t != NULL)
        check_task(s, o, t, graphs, tstate, linked, &lin[0]);
    lin[1] += o->lineage;
    lin[2] += o->husk;
}

static void check_sessions(sched *s, uint64_t *holders, gacc *graphs)
{
    sched_session *ss, *tmp;
    HASH_ITER(hh, s->sessions, ss, tmp)
    {
        CHECK(ss->conn != NULL || ((ss->resumable || s->jnl != NULL) && ss->nwaiters == 0), NOID,
              "session %llu without a connection", (unsigned long long)ss->id);
        uint64_t n = 0;
        sched_ref *r, *rtmp;
        HASH_ITER(hh, ss->refs, r, rtmp)
        {
            CHECK(r->sess == ss, r->id, "session %llu's reference names another session",
                  (unsigned long long)ss->id);
            CHECK(sched__obj_find(s, r->id) == r->obj, r->id,
                  "session %llu holds a reference to a freed object", (unsigned long long)ss->id);
            for (int k = 0; k < REF_KINDS; k++)
                n += r->count[k];
            (*holders)--;
        }
        for (const sched_obj *o = ss->kept; o != NULL; o = o->knext) {
            CHECK(o->kept && o->origin->owner == ss->id, o->id,
                  "on session %llu's kept list, but not kept by it", (unsigned long long)ss->id);
            CHECK(sched__obj_find(s, o->id) == o, o->id, "a freed object on a kept list");
            n++;
            (*holders)--;
        }
        CHECK(n == ss->nrefs, NOID, "session %llu: nrefs %llu, its table holds %llu",
              (unsigned long long)ss->id, (unsigned long long)ss->nrefs, (unsigned long long)n);
        CHECK((ss->graph != 0) == (ss->cur_graph != NULL), NOID,
              "session %llu: graph id and graph record disagree", (unsigned long long)ss->id);
        CHECK(ss->nbuilding == 0 || ss->cur_graph != NULL, NOID,
              "session %llu holds outputs with no graph being submitted",
              (unsigned long long)ss->id);
        if (ss->cur_graph != NULL) {
            gacc *ga = gacc_find(graphs, ss->cur_graph);
            CHECK(ga != NULL, NOID, "session %llu submits a graph not on the list",
                  (unsigned long long)ss->id);
            ga->ntasks++;
        }
        for (uint32_t i = 0; i < ss->nbuilding; i++) {
            sched_obj *o = ss->building[i];
            CHECK(sched__obj_find(s, o->id) == o, o->id,
                  "session %llu holds a freed output for its graph", (unsigned long long)ss->id);
            CHECK(o->graph_hold > 0, o->id, "graph output held without graph_hold");
            o->graph_hold--; /* restored below */
        }
        uint32_t nwaiters = 0;
        for (const sched_waiter *w = ss->waiters; w != NULL; w = w->snext, nwaiters++) {
            CHECK(w->sess == ss, NOID, "waiter on another session's list");
            CHECK(w->obj != NULL && sched__obj_find(s, w->obj->id) == w->obj, NOID,
                  "LOCATE waits for a freed object");
        }
        CHECK(nwaiters == ss->nwaiters, NOID, "session %llu counts %u waiters and lists %u",
              (unsigned long long)ss->id, ss->nwaiters, nwaiters);
        CHECK(ss->memqs <= 1, NOID, "session %llu has %u memory queries under way",
              (unsigned long long)ss->id, ss->memqs);
    }
    /* Every graph_hold left after an event is a session's building entry. */
    uint32_t pos = 0;
    for (sched_obj *o; (o = spw_idmap_next(&s->objects, &pos)) != NULL;)
        CHECK(o->graph_hold == 0, o->id, "graph_hold %u left over after an event", o->graph_hold);
    HASH_ITER(hh, s->sessions, ss, tmp)
        for (uint32_t i = 0; i < ss->nbuilding; i++)
            ss->building[i]->graph_hold++;
}

static void check_workers(sched *s, uint64_t tstate[PROTO_TSTATE_COUNT], uint64_t reserved_total)
{
    uint64_t assigned = 0, reserved = 0, queued = 0, taking = 0;
    uint32_t depth_max = s->opts.max_depth > 2 ? s->opts.max_depth : 2;
    uint32_t ndraining = 0;
    for (uint32_t i = 0; i < s->nworkers; i++) {
        const sched_worker *w = s->workers[i];
        CHECK(w->conn != NULL && w->slots > 0, NOID, "worker %u without a connection or slots",
              w->id);
        for (uint32_t j = 0; j < i; j++)
            CHECK(s->workers[j]->id != w->id, NOID, "worker id %u used twice", w->id);
        CHECK(sched__worker_by_id(s, w->id) == w, NOID, "worker %u not indexed by its id", w->id);
        CHECK(w->wclass < s->nwclass && s->wclass[w->wclass].slots == w->slots, NOID,
              "worker %u not in the load class of its slot count", w->id);
        const sched_wclass *wc = &s->wclass[w->wclass];
        CHECK(w->load_at == w->assigned && w->load_at < wc->nbuckets && wc->min <= w->load_at, NOID,
              "worker %u not in the load bucket of its assigned count", w->id);
        const sched_worker *b = wc->head[w->load_at];
        while (b != NULL && b != w)
            b = b->lnext;
        CHECK(b == w, NOID, "worker %u missing from its load bucket", w->id);
        uint32_t n = 0, running = 0, ahead = 0;
        for (const sched_task *t = w->tasks; t != NULL; t = t->wnext) {
            CHECK(t->worker == w, sched__task_out(t)->id,
                  "task on worker %u's list names another worker", w->id);
            CHECK(t->state == T_ASSIGNED || t->state == T_RUNNING || sched__task_ahead(t),
                  sched__task_out(t)->id, "task in state %u on worker %u's list", t->state, w->id);
            if (sched__task_ahead(t)) {
                ahead++;
                continue;
            }
            n++;
            running += t->state == T_RUNNING;
            queued += t->queued;
            taking += t->taking;
            CHECK(!t->taking || t->queued, sched__task_out(t)->id,
                  "task taken back from worker %u was not queued there", w->id);
        }
        CHECK(n == w->assigned, NOID, "worker %u: assigned %u, its list holds %u", w->id,
              w->assigned, n);
        CHECK(ahead == w->ahead, NOID, "worker %u: %u tasks ahead, its list holds %u", w->id,
              w->ahead, ahead);
        CHECK(w->ahead <= w->slots * SCHED_AHEAD_CHAIN_PER_SLOT &&
                  w->ahead <= SCHED_AHEAD_VISITS,
              NOID, "worker %u: %u tasks sent ahead to %u slots", w->id, w->ahead, w->slots);
        /* Tasks sent ahead join the queue when their inputs are ready. */
        CHECK(w->assigned <= (uint64_t)w->slots * (depth_max + SCHED_AHEAD_CHAIN_PER_SLOT), NOID,
              "worker %u: %u tasks assigned to %u slots", w->id, w->assigned, w->slots);
        CHECK(running <= w->assigned, NOID, "worker %u: more running than assigned", w->id);
        CHECK(w->drain != 0 || (w->ndrain_q == 0 && w->drain_inflight == 0 &&
                                w->ndrain_reqs == 0),
              NOID, "worker %u: drain work while it does not drain", w->id);
        ndraining += w->drain != 0;
        assigned += n;
        reserved += w->reserved;
        /* Its index holds only objects of the directory that name it (the checks of the
         * objects find every such object in it). */
        const char *bad = spw_idmap_check(&w->objs);
        CHECK(bad == NULL, NOID, "worker %u's object index: %s", w->id, bad);
        uint32_t pos = 0;
        for (const sched_obj *o; (o = spw_idmap_next(&w->objs, &pos)) != NULL;) {
            bool named = o->put_worker == w->id;
            for (uint32_t k = 0; k < o->nlocs && !named; k++)
                named = o->locs[k] == w->id;
            CHECK(sched__obj_find(s, o->id) == o && named, o->id,
                  "worker %u's index holds an object that names it not", w->id);
        }
    }
    CHECK(queued == s->nqueued && taking == s->ntaking, NOID,
          "%llu tasks queued and %llu taken back on workers' lists, %llu and %llu counted",
          (unsigned long long)queued, (unsigned long long)taking,
          (unsigned long long)s->nqueued, (unsigned long long)s->ntaking);
    CHECK(ndraining == s->ndraining, NOID, "%u workers drain, %u counted", ndraining,
          s->ndraining);
    CHECK(HASH_COUNT(s->wbyid) == s->nworkers, NOID, "%u workers indexed by id, %u connected",
          HASH_COUNT(s->wbyid), s->nworkers);
    CHECK(assigned == tstate[T_ASSIGNED] + tstate[T_RUNNING], NOID,
          "workers' lists hold %llu tasks, %llu are assigned or running",
          (unsigned long long)assigned,
          (unsigned long long)(tstate[T_ASSIGNED] + tstate[T_RUNNING]));
    CHECK(reserved == reserved_total, NOID,
          "workers reserve %llu bytes for uploads, pending puts placed on them total %llu",
          (unsigned long long)reserved, (unsigned long long)reserved_total);
}

static void check_ready(sched *s, uint64_t tstate[PROTO_TSTATE_COUNT])
{
    uint64_t n = 0;
    for (int d = 0; d < SCHED_DEPTHS; d++)
        for (const sched_task *t = s->ready[d]; t != NULL; t = t->qnext) {
            CHECK(t->state == T_READY, sched__task_out(t)->id,
                  "task in state %u on the ready queue", t->state);
            CHECK(t->depth == d, sched__task_out(t)->id, "task of depth %u on ready queue %d",
                  t->depth, d);
            CHECK(sched__obj_find(s, sched__task_out(t)->id) == sched__task_out(t),
                  sched__task_out(t)->id, "freed task on the ready queue");
            n++;
        }
    CHECK(n == s->nready, NOID, "nready %llu, ready queues hold %llu",
          (unsigned long long)s->nready, (unsigned long long)n);
    CHECK(n == tstate[T_READY], NOID, "%llu tasks ready, ready queues hold %llu",
          (unsigned long long)tstate[T_READY], (unsigned long long)n);
}

static void check_graphs(sched *s, gacc *graphs)
{
    uint32_t gone = 0;
    gacc *ga, *tmp;
    HASH_ITER(hh, graphs, ga, tmp)
    {
        const sched_graph *g = ga->g;
        gone += g->ntasks == 0;
        CHECK(g->ntasks == ga->ntasks, NOID,
              "graph %llu/%llu: ntasks %llu, %llu task records and submitters",
              (unsigned long long)g->session, (unsigned long long)g->gid,
              (unsigned long long)g->ntasks, (unsigned long long)ga->ntasks);
        CHECK(g->inflight == ga->inflight, NOID, "graph %llu/%llu: inflight %llu, %llu assigned",
              (unsigned long long)g->session, (unsigned long long)g->gid,
              (unsigned long long)g->inflight, (unsigned long long)ga->inflight);
        CHECK(g->max_tasks == 0 || g->inflight <= g->max_tasks, NOID,
              "graph %llu/%llu: %llu tasks in flight over its cap of %llu",
              (unsigned long long)g->session, (unsigned long long)g->gid,
              (unsigned long long)g->inflight, (unsigned long long)g->max_tasks);
        CHECK(g->live_bytes == ga->live_bytes, NOID,
              "graph %llu/%llu: live_bytes %llu, its unconsumed outputs total %llu",
              (unsigned long long)g->session, (unsigned long long)g->gid,
              (unsigned long long)g->live_bytes, (unsigned long long)ga->live_bytes);
        CHECK(g->peak_live >= g->live_bytes, NOID, "graph %llu/%llu: peak under live bytes",
              (unsigned long long)g->session, (unsigned long long)g->gid);
        /* Freed tasks keep their last state in counts, and are never unfinished. */
        for (int k = 0; k < PROTO_TSTATE_COUNT; k++) {
            bool unfinished = k != T_DONE && k != T_FAILED;
            CHECK(unfinished ? g->counts[k] == ga->counts[k] : g->counts[k] >= ga->counts[k],
                  NOID, "graph %llu/%llu: counts[%d] %llu, %llu live tasks in that state",
                  (unsigned long long)g->session, (unsigned long long)g->gid, k,
                  (unsigned long long)g->counts[k], (unsigned long long)ga->counts[k]);
        }
    }
    CHECK(gone == s->graphs_gone, NOID, "graphs_gone %u, %u listed graphs have no task", s->graphs_gone,
          gone);
}

void sched__check_full(sched *s)
{
    gacc *graphs = NULL;
    for (const sched_graph *g = s->graphs; g != NULL; g = g->gnext) {
        gacc *ga = spw_calloc(SPW_MOD_SCHED, 1, sizeof *ga);
        ga->g = g;
        HASH_ADD_PTR(graphs, g, ga);
    }
    uint64_t tstate[PROTO_TSTATE_COUNT] = {0}, refs[REF_KINDS] = {0};
    uint64_t obj_bytes = 0, linked = 0, consumers = 0, holders = 0, reserved = 0;
    const char *why = spw_idmap_check(&s->objects);
    CHECK(why == NULL, NOID, "object directory: %s", why != NULL ? why : "");
    why = sched__push_check(s);
    CHECK(why == NULL, NOID, "push plans: %s", why != NULL ? why : "");
    /* Every object record is in the slab of its size class, or on the heap when larger. */
    uint64_t per_class[SCHED_REC_CLASSES] = {0};
    uint32_t pos = 0;
    for (sched_obj *o; (o = spw_idmap_next(&s->objects, &pos)) != NULL;) {
        CHECK(!o->has_task || o->rec_class == SCHED_REC_HEAP ||
                  sched__rec_bytes(o->rec_class) >= sizeof(sched_obj) + sizeof(sched_task),
              o->id, "task in a record of %zu bytes", sched__rec_bytes(o->rec_class));
        CHECK(o->rec_class < SCHED_REC_CLASSES || o->rec_class == SCHED_REC_HEAP, o->id,
              "record class %u unknown", o->rec_class);
        if (o->rec_class != SCHED_REC_HEAP)
            per_class[o->rec_class]++;
    }
    for (int k = 0; k < SCHED_REC_CLASSES; k++) {
        why = spw_slab_check(&s->recs[k]);
        CHECK(why == NULL, NOID, "record slab of %u bytes: %s", s->recs[k].size,
              why != NULL ? why : "");
        CHECK(s->recs[k].nused == per_class[k], NOID,
              "record slab %d hands out %llu records, %llu objects of its size", k,
              (unsigned long long)s->recs[k].nused, (unsigned long long)per_class[k]);
    }
    pos = 0;
    uint64_t waited = 0, failed = 0;
    uint64_t lin[3] = {0}; /* arguments holding lineage, lineage counted, husks */
    for (sched_obj *o; (o = spw_idmap_next(&s->objects, &pos)) != NULL;)
        check_object(s, o, graphs, tstate, refs, &obj_bytes, &linked, &consumers, &holders,
                     &reserved, &waited, &failed, lin);
    CHECK(lin[0] == lin[1], NOID, "%llu arguments hold lineage, objects count %llu",
          (unsigned long long)lin[0], (unsigned long long)lin[1]);
    CHECK(lin[2] == s->nhusks, NOID, "%llu husks, %llu counted", (unsigned long long)lin[2],
          (unsigned long long)s->nhusks);
    CHECK(s->nlin_drop == 0, NOID, "%u lineage counts left to drop", s->nlin_drop);
    CHECK(failed == sched__failures_count(s), NOID, "%llu objects failed, %u failures recorded",
          (unsigned long long)failed, sched__failures_count(s));
    CHECK(waited == sched__waitqs_count(s), NOID,
          "%llu objects waited for, %u listed in the waiters' table", (unsigned long long)waited,
          sched__waitqs_count(s));
    CHECK(linked == consumers, NOID, "%llu linked arguments, %llu on consumer lists",
          (unsigned long long)linked, (unsigned long long)consumers);
    for (int k = 0; k < PROTO_TSTATE_COUNT; k++)
        CHECK(tstate[k] == s->tstate[k], NOID, "tstate[%d] %llu, %llu tasks in that state", k,
              (unsigned long long)s->tstate[k], (unsigned long long)tstate[k]);
    for (int k = 0; k < REF_KINDS; k++)
        CHECK(refs[k] == s->refs[k], NOID, "refs[%d] %llu, objects hold %llu", k,
              (unsigned long long)s->refs[k], (unsigned long long)refs[k]);
    CHECK(obj_bytes == s->obj_bytes, NOID, "obj_bytes %llu, ready objects total %llu",
          (unsigned long long)s->obj_bytes, (unsigned long long)obj_bytes);
    /* Every object names a live origin; the hashed ones are counted here, and those replaced by
     * a newer one (after ~49 days) only by their objects. */
    uint64_t norigins, originrefs;
    sched__origins_count(s, &norigins, &originrefs);
    CHECK(originrefs <= s->objects.n, NOID, "origins counted %llu times, %llu objects",
          (unsigned long long)originrefs, (unsigned long long)s->objects.n);
    CHECK(norigins <= originrefs, NOID, "%llu origins interned with no object naming them",
          (unsigned long long)(norigins - originrefs));
    check_sessions(s, &holders, graphs);
    CHECK(holders == 0, NOID, "objects' holder lists and sessions' tables differ by %lld",
          (long long)holders);
    check_ready(s, tstate);
    check_workers(s, tstate, reserved);
    check_graphs(s, graphs);
    gacc *ga, *tmp;
    HASH_ITER(hh, graphs, ga, tmp)
    {
        HASH_DEL(graphs, ga);
        spw_free(ga);
    }
}

#ifdef SPW_CHECK_INVARIANTS
void sched__check(sched *s)
{
    /* Amortised: see the comment at the top. One scheduler per process in practice; with more,
     * they share these, which only changes which events check. */
    static uint64_t next_ns;
    uint64_t units = s->objects.n + HASH_COUNT(s->sessions) + s->nworkers;
    if (units > SCHED_CHECK_SMALL) {
        uint64_t now = spw_now_ns();
        if (now < next_ns)
            return;
        sched__check_full(s);
        uint64_t took = spw_now_ns() - now;
        next_ns = now + took * SCHED_CHECK_SHARE;
        return;
    }
    sched__check_full(s);
}
#endif
