/*
 * The object directory: every object the cluster knows, its state, its locations and its
 * references counted by kind, with the sessions that hold them.
 *
 * Invariants: o->refs[k] equals the references of kind k: the sum of holders' count[k] for
 * CLIENT, OUTPUT and BROADCAST, and the number of unfinished tasks' arguments naming o for
 * TASK_ARG. An object is freed when its total reaches zero and no task computing it is running
 * (a running producer marks it orphan and frees it on completion); freeing tells every worker
 * holding a copy to delete it. An object never has a negative count: an unknown id or a double
 * release is refused before anything changes. A chunked object holds its chunks (is_chunk
 * counts as one reference of each) until it is freed; it is ready once all of them are.
 * Each connected worker's objs indexes exactly the objects that list it in locs or name it
 * put_worker, so that a worker's departure costs its objects, not the directory.
 */
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include <utlist.h>

#include "sched_int.h"

sched_obj *sched__obj_find(sched *s, spw_id id)
{
    return spw_idmap_find(&s->objects, id);
}

sched_task *sched__obj_task(sched *s, const sched_obj *o)
{
    if (!o->is_out)
        return sched__obj_producer(o);
    sched_obj *o0 = sched__obj_find(s, spw_id_output_task(o->id));
    SPW_ASSERT(o0 != NULL && o0->has_task); /* output 0's record outlives the others */
    return sched__obj_producer(o0);
}

sched_obj *sched__task_output(sched *s, const sched_task *t, uint32_t i)
{
    sched_obj *o0 = sched__task_out(t);
    sched_obj *oi = i == 0 ? o0 : sched__obj_find(s, spw_id_output(o0->id, i));
    return oi != NULL && !oi->husk ? oi : NULL;
}

/* A zeroed record of `size` bytes: a slab's for sizes up to SCHED_REC_SLAB. NULL if out of
 * memory. */
static sched_obj *rec_alloc(sched *s, size_t size)
{
    sched_obj *o;
    if (size > SCHED_REC_SLAB) {
        o = spw_try_malloc(SPW_MOD_SCHED, size);
        if (o != NULL) {
            memset(o, 0, size);
            o->rec_class = SCHED_REC_HEAP;
        }
        return o;
    }
    uint8_t k = (uint8_t)((size - 1) / 16);
    spw_slab *sl = &s->recs[k];
    if (sl->size == 0)
        spw_slab_init(sl, sched__rec_bytes(k), SPW_MOD_SCHED);
    o = spw_slab_alloc(sl);
    if (o != NULL)
        o->rec_class = k;
    return o;
}

/* The record's class is kept in it: its size cannot be recomputed from the task once that
 * changes (a lineage re-run drops the task's place). */
static void rec_free(sched *s, sched_obj *o)
{
    if (o->rec_class == SCHED_REC_HEAP)
        spw_free(o);
    else
        spw_slab_free(&s->recs[o->rec_class], o);
}

void sched__recs_trim(sched *s)
{
    for (int k = 0; k < SCHED_REC_CLASSES; k++)
        spw_slab_trim(&s->recs[k]);
}

sched_obj *sched__obj_new(sched *s, spw_id id, sched_session *ss, const char *site,
                          size_t sitelen)
{
    sched_obj *o = sched__obj_new_task(s, id, ss, site, sitelen, 0, spw_wall_ms());
    if (o == NULL)
        SPW_PANIC("out of memory for an object record");
    return o;
}

sched_obj *sched__obj_new_task(sched *s, spw_id id, sched_session *ss, const char *site,
                               size_t sitelen, size_t task, uint64_t now_ms)
{
    _Static_assert(sizeof(sched_obj) % _Alignof(sched_task) == 0, "a task can follow its object");
    sched_obj *o = rec_alloc(s, sizeof *o + task);
    if (o == NULL)
        return NULL;
    o->id = id;
    o->state = OBJ_PENDING;
    o->origin =
        sched__origin_intern(s, ss, site != NULL ? site : "", site != NULL ? sitelen : 0, now_ms);
    o->created = (uint32_t)(now_ms - o->origin->base_ms);
    spw_idmap_add(&s->objects, o);
    return o;
}

static uint64_t total_refs(const sched_obj *o)
{
    uint64_t n = o->graph_hold + o->is_chunk;
    for (int k = 0; k < REF_KINDS; k++)
        n += o->refs[k];
    return n;
}

void sched__worker_delete(sched_worker *w, spw_id id)
{
    proto_send_obj_delete(w->conn, 0, &(proto_obj_delete_msg){.ids = {&id, 1}});
}

static void send_delete(sched *s, uint32_t worker, spw_id id)
{
    sched_worker *w = sched__worker_by_id(s, worker);
    if (w != NULL)
        sched__worker_delete(w, id);
}

/* The waiters of one object. */
typedef struct sched_waitq {
    const sched_obj *obj; /* the key: its address */
    sched_waiter *head;
    UT_hash_handle hh;
} sched_waitq;

static sched_waitq *waitq_find(const sched *s, const sched_obj *o)
{
    sched_waitq *q;
    HASH_FIND(hh, s->waitqs, &o, sizeof o, q);
    return q;
}

void sched__waiter_add(sched *s, sched_waiter *w)
{
    sched_obj *o = w->obj;
    sched_waitq *q = o->has_waiters ? waitq_find(s, o) : NULL;
    if (q == NULL) {
        q = spw_calloc(SPW_MOD_SCHED, 1, sizeof *q);
        q->obj = o;
        HASH_ADD(hh, s->waitqs, obj, sizeof q->obj, q);
        o->has_waiters = 1;
    }
    DL_APPEND(q->head, w);
}

sched_waiter *sched__obj_waiters(const sched *s, const sched_obj *o)
{
    if (!o->has_waiters)
        return NULL;
    sched_waitq *q = waitq_find(s, o);
    return q != NULL ? q->head : NULL;
}

uint32_t sched__waitqs_count(const sched *s)
{
    return HASH_COUNT(s->waitqs);
}

void sched__waiter_free(sched *s, sched_waiter *w)
{
    sched_waitq *q = w->obj != NULL ? waitq_find(s, w->obj) : NULL;
    if (q != NULL) {
        DL_DELETE(q->head, w);
        if (q->head == NULL) {
            HASH_DEL(s->waitqs, q);
            w->obj->has_waiters = 0;
            spw_free(q);
        }
    }
    sched_session *ss = w->sess;
    DL_DELETE2(ss->waiters, w, sprev, snext);
    spw_free(w);
    if (ss->nwaiters-- == SCHED_WAITERS_MAX)
        sched__session_flow(s, ss); /* its reads were held for its waiters */
}

/* Forgets why the object failed: it is being freed, or it was lost and a copy turned up. */
static void failure_drop(sched *s, sched_obj *o)
{
    if (!o->has_failure)
        return;
    sched_failure *f = (sched_failure *)(uintptr_t)sched__obj_failure(s, o);
    HASH_DEL(s->failures, f);
    spw_free(f->msg);
    spw_free(f);
    o->has_failure = 0;
}

/* Frees the record and what it owns; it is out of the directory. */
static void obj_release(sched *s, sched_obj *o)
{
    if (o->has_inline && o->size > sizeof o->inline_small)
        spw_free(o->inline_heap);
    failure_drop(s, o);
    sched__origin_unref(s, o->origin);
    spw_free(o->locs);
    rec_free(s, o);
}

/* What releasing o ends, whether its record goes or stays (a husk): its waiters are answered,
 * its bytes uncounted. */
static void obj_gone(sched *s, sched_obj *o)
{
    char hex[33];
    for (sched_waiter *w; (w = sched__obj_waiters(s, o)) != NULL;) {
        proto_conn_error(w->sess->conn, w->req, SPW_ENOOBJ, "obj=%s was released while waited for",
                         spw_id_hex(o->id, hex));
        sched__waiter_free(s, w);
    }
    if (o->state == OBJ_READY && !o->chunked)
        s->obj_bytes -= o->size;
    sched__live_uncount(s, o);
}

/* ---------------------------------------------------------- chunked objects */

uint64_t sched__chunk_size(sched *s, uint64_t size, uint64_t chunk_max)
{
    uint64_t smallest = 0, largest = 0;
    for (uint32_t k = 0; k < s->nworkers; k++) {
        const sched_worker *w = s->workers[k];
        uint64_t cap = w->stats[PROTO_STAT_CAPACITY] ? w->stats[PROTO_STAT_CAPACITY] : w->capacity;
        if (smallest == 0 || cap < smallest)
            smallest = cap;
        if (cap > largest)
            largest = cap;
    }
    /* A quarter of the smallest store: a chunk then fits beside others anywhere, and a store
     * spills whole chunks. */
    uint64_t limit = smallest / 4;
    if (chunk_max != 0 && chunk_max < limit)
        limit = chunk_max;
    if (s->nworkers == 0 || (size <= largest && (chunk_max == 0 || size <= chunk_max)))
        return 0;
    /* A power of two, so that blocks of a power-of-two size never straddle two chunks. */
    uint64_t cs = SCHED_CHUNK_MIN;
    while (cs * 2 <= limit)
        cs *= 2;
    while ((size + cs - 1) / cs > PROTO_CHUNKS_MAX)
        cs *= 2;
    return cs <= largest ? cs : 0;
}

sched_obj *sched__chunk_parent(sched *s, const sched_obj *c)
{
    sched_obj *p = sched__obj_find(s, spw_id_output_task(c->id));
    SPW_ASSERT(p != NULL && p->chunked); /* it holds its chunks */
    return p;
}

/* The chunked object p is being freed: its chunks are no longer held by it. */
static void chunks_release(sched *s, sched_obj *p)
{
    for (uint32_t i = 0; i < p->chunks.n; i++) {
        sched_obj *c = sched__obj_find(s, spw_id_output(p->id, 1 + i));
        if (c == NULL || !c->is_chunk)
            continue; /* not put yet */
        c->is_chunk = 0;
        sched__obj_maybe_free(s, c);
    }
}

/* Chunk c was sealed: its parent is ready with its last chunk. */
static void chunk_ready(sched *s, sched_obj *c)
{
    sched_obj *p = sched__chunk_parent(s, c);
    if (p->state == OBJ_PENDING && ++p->chunks.ready == p->chunks.n)
        sched__obj_ready(s, p);
}

static void obj_free(sched *s, sched_obj *o)
{
    char hex[33];
    spw_log(SPW_LOG_DEBUG, "obj=%s released", spw_id_hex(o->id, hex));
    for (uint32_t i = 0; i < o->nlocs; i++)
        send_delete(s, o->locs[i], o->id);
    sched__obj_clear_locs(s, o);
    sched__broadcast_obj_freed(s, o->id);
    if (o->put_worker != 0) {
        /* Still uploading, or sealed and copied elsewhere before its uploader reported. */
        sched_worker *w = sched__worker_by_id(s, o->put_worker);
        if (w != NULL) {
            w->reserved -= o->size < w->reserved ? o->size : w->reserved;
            if (o->state == OBJ_PENDING)
                send_delete(s, w->id, o->id); /* drops a half-written upload */
        }
        sched__obj_set_put_worker(s, o, 0);
    }
    obj_gone(s, o);
    sched__jnl_obj_freed(s, o);
    if (o->husk)
        s->nhusks--;
    if (sched__obj_producer(o) != NULL)
        sched__task_free(s, sched__obj_producer(o));
    if (o->chunked)
        chunks_release(s, o);
    SPW_ASSERT(!o->kept);
    sched_obj *o0 = o->is_out ? sched__obj_find(s, spw_id_output_task(o->id)) : NULL;
    spw_idmap_del(&s->objects, o);
    obj_release(s, o);
    if (o0 != NULL && --sched__obj_producer(o0)->outs_alive == 0)
        sched__obj_maybe_free(s, o0); /* a husk, or output 0 waiting for its task to end */
}

/* A task output released while its task must stay (sched_obj.husk): its copies and value go
 * now, its record stays. */
static void obj_husk(sched *s, sched_obj *o)
{
    s->nhusks++;
    for (uint32_t i = 0; i < o->nlocs; i++)
        send_delete(s, o->locs[i], o->id);
    sched__obj_clear_locs(s, o);
    sched__broadcast_obj_freed(s, o->id);
    obj_gone(s, o);
    if (o->has_inline && o->size > sizeof o->inline_small)
        spw_free(o->inline_heap);
    o->has_inline = 0;
    failure_drop(s, o);
    o->state = OBJ_LOST;
    o->husk = 1;
}

void sched__obj_maybe_free(sched *s, sched_obj *o)
{
    if (total_refs(o) > 0)
        return;
    if (o->lineage > 0) {
        /* Finished tasks read it: its record stays for lineage, its bytes go once its task has
         * ended (a re-run nobody waits for any more finishes, and is husked then). */
        sched_task *t = sched__obj_task(s, o);
        if (!o->husk && (t->state == T_DONE || t->state == T_FAILED) && !sched__task_ahead(t))
            obj_husk(s, o);
        return;
    }
    if (o->is_out) {
        /* A later output: its record goes now, whatever its task does; a copy the task still
         * makes is dropped when it reports (task_done_rec). */
        obj_free(s, o);
        return;
    }
    sched_task *t = sched__obj_producer(o);
    if (t != NULL && t->outs_alive > 0) {
        /* Other outputs of its task live: the task stays, and runs on (or waits) for them. */
        if (!o->husk && (t->state == T_DONE || t->state == T_FAILED) && !sched__task_ahead(t))
            obj_husk(s, o);
        return;
    }
    if (t != NULL && !t->graph->submitted) {
        /* Its graph is still being submitted: its session holds it until the last frame, as it
         * holds every output that has no reference when it is made (sched__graph_hold). */
        sched_session *ss;
        HASH_FIND(hh, s->sessions, &o->origin->owner, sizeof o->origin->owner, ss);
        if (ss != NULL && ss->graph != 0 && ss->cur_graph == t->graph) {
            sched__graph_hold(ss, o);
            return;
        }
    }
    if (t != NULL && (t->state == T_ASSIGNED || t->state == T_RUNNING || sched__task_ahead(t))) {
        if (!o->orphan && t->worker != NULL && t->worker->conn != NULL) {
            /* Nobody wants it any more: if it has not started, its worker drops it now and
             * answers SPW_ECANCELED (its slot is free at once); if it runs, it finishes. */
            proto_send_task_cancel(t->worker->conn, 0,
                                   &(proto_task_cancel_msg){.ids = {&sched__task_out(t)->id, 1}});
        }
        o->orphan = 1; /* freed when the task reports back */
        return;
    }
    if (t != NULL && (t->state == T_WAITING || t->state == T_READY))
        sched__task_cancel(s, t);
    obj_free(s, o);
}

void sched__lineage_drop(sched *s, spw_id id)
{
    if (s->nlin_drop == s->caplin_drop) {
        s->caplin_drop = s->caplin_drop ? s->caplin_drop * 2 : 16;
        s->lin_drop = spw_realloc(SPW_MOD_SCHED, s->lin_drop, s->caplin_drop * sizeof(spw_id));
    }
    s->lin_drop[s->nlin_drop++] = id;
    if (s->lin_dropping)
        return; /* the loop below, further up the stack, takes it */
    s->lin_dropping = true;
    while (s->nlin_drop > 0) {
        /* Still there: a count on it keeps its record. */
        sched_obj *o = sched__obj_find(s, s->lin_drop[--s->nlin_drop]);
        SPW_ASSERT(o != NULL && o->lineage > 0);
        o->lineage--;
        sched__obj_maybe_free(s, o);
    }
    s->lin_dropping = false;
    if (s->caplin_drop > 1024) {
        spw_free(s->lin_drop);
        s->lin_drop = NULL;
        s->caplin_drop = 0;
    }
}

void sched__ref(sched *s, sched_obj *o, int kind)
{
    o->refs[kind]++;
    s->refs[kind]++;
}

void sched__unref(sched *s, sched_obj *o, int kind)
{
    SPW_ASSERT(o->refs[kind] > 0);
    o->refs[kind]--;
    s->refs[kind]--;
    if (kind == REF_TASK_ARG && o->refs[kind] == 0)
        sched__live_uncount(s, o); /* its last consumer is done with it */
    sched__obj_maybe_free(s, o);
}

int sched__session_ref(sched *s, sched_session *ss, sched_obj *o, int kind)
{
    if (kind == REF_OUTPUT) {
        /* Only a task's submitter takes it, once, at intake: held inline (sched_obj.kept). */
        SPW_ASSERT(o->origin->owner == ss->id && !o->kept);
        o->kept = 1;
        DL_APPEND2(ss->kept, o, kprev, knext);
        ss->nrefs++;
        sched__ref(s, o, kind);
        return 0;
    }
    sched_ref *r;
    HASH_FIND(hh, ss->refs, &o->id, sizeof o->id, r);
    if (r == NULL) {
        r = spw_calloc(SPW_MOD_SCHED, 1, sizeof *r);
        r->id = o->id;
        r->obj = o;
        r->sess = ss;
        HASH_ADD(hh, ss->refs, id, sizeof r->id, r);
        DL_APPEND2(o->holders, r, oprev, onext);
    }
    r->count[kind]++;
    ss->nrefs++;
    sched__ref(s, o, kind);
    sched__jnl_ref(s, ss, o->id, r->count);
    return 0;
}

static void ref_unlink(sched_session *ss, sched_ref *r)
{
    HASH_DEL(ss->refs, r);
    DL_DELETE2(r->obj->holders, r, oprev, onext);
    spw_free(r);
}

static void kept_unlink(sched_session *ss, sched_obj *o)
{
    DL_DELETE2(ss->kept, o, kprev, knext);
    o->kprev = o->knext = NULL;
    o->kept = 0;
}

int sched__session_release(sched *s, sched_session *ss, spw_id id)
{
    /* OUTPUT goes first (then CLIENT, then BROADCAST): the inline one, then the table's. A
     * client mostly releases its kept outputs in the order it made them, which is the order of
     * ss->kept: its head is checked before the directory is asked (same record: ids are unique). */
    sched_obj *ko = ss->kept != NULL && spw_id_eq(ss->kept->id, id) ? ss->kept
                                                                    : sched__obj_find(s, id);
    if (ko != NULL && ko->kept && ko->origin->owner == ss->id) {
        sched__jnl_output_released(s, ko);
        kept_unlink(ss, ko);
        ss->nrefs--;
        sched__unref(s, ko, REF_OUTPUT);
        return 0;
    }
    sched_ref *r;
    HASH_FIND(hh, ss->refs, &id, sizeof id, r);
    if (r == NULL)
        return SPW_ENOTHELD;
    static const int order[] = {REF_OUTPUT, REF_CLIENT, REF_BROADCAST};
    int kind = -1;
    for (size_t i = 0; i < sizeof order / sizeof order[0]; i++) {
        if (r->count[order[i]] > 0) {
            kind = order[i];
            break;
        }
    }
    if (kind < 0)
        return SPW_ENOTHELD;
    sched_obj *o = r->obj;
    r->count[kind]--;
    ss->nrefs--;
    sched__jnl_ref(s, ss, id, r->count);
    bool empty = true;
    for (int k = 0; k < REF_KINDS; k++)
        empty = empty && r->count[k] == 0;
    if (empty)
        ref_unlink(ss, r);
    sched__unref(s, o, kind);
    return 0;
}

void sched__session_drop_all(sched *s, sched_session *ss)
{
    /* Its graph being submitted, if any, ends here: outputs freed below are not held for it. */
    sched_graph *cur = ss->cur_graph;
    ss->cur_graph = NULL;
    ss->graph = 0;
    sched_waiter *w, *wtmp;
    DL_FOREACH_SAFE2(ss->waiters, w, wtmp, snext) sched__waiter_free(s, w);
    sched_obj *ko, *kotmp;
    DL_FOREACH_SAFE2(ss->kept, ko, kotmp, knext)
    {
        /* The next one holds its own reference: freeing this one cannot free it. */
        kept_unlink(ss, ko);
        ko->refs[REF_OUTPUT]--;
        s->refs[REF_OUTPUT]--;
        sched__obj_maybe_free(s, ko);
    }
    sched_ref *r, *tmp;
    HASH_ITER(hh, ss->refs, r, tmp)
    {
        sched_obj *o = r->obj;
        uint32_t count[REF_KINDS];
        memcpy(count, r->count, sizeof count);
        ref_unlink(ss, r);
        /* Take the references off without freeing, then free at most once. */
        for (int k = 0; k < REF_KINDS; k++) {
            SPW_ASSERT(o->refs[k] >= count[k]);
            o->refs[k] -= count[k];
            s->refs[k] -= count[k];
        }
        sched__obj_maybe_free(s, o);
    }
    ss->nrefs = 0;
    sched_obj **held = ss->building;
    uint32_t n = ss->nbuilding;
    ss->building = NULL;
    ss->nbuilding = ss->capbuilding = 0;
    for (uint32_t i = 0; i < n; i++) {
        held[i]->graph_hold--;
        sched__obj_maybe_free(s, held[i]);
    }
    spw_free(held);
    if (cur != NULL)
        sched__graph_release(s, cur);
}

proto_loc_rec sched__loc_rec(const sched_worker *w)
{
    return (proto_loc_rec){
        .worker = w->id, .addr = w->addr, .host_id = w->host_id, .local = w->local};
}

/* The next location of l->o whose worker is still connected. */
static void put_loc(proto_enc *e, uint32_t i, void *arg)
{
    sched_locs *l = arg;
    (void)i;
    for (;;) {
        sched_worker *w = sched__worker_by_id(l->s, l->o->locs[l->at++]);
        if (w != NULL) {
            proto_loc_rec r = sched__loc_rec(w);
            proto_put_loc_rec(e, &r);
            return;
        }
    }
}

proto_loc_recs sched__locs(sched_locs *l, sched *s, const sched_obj *o)
{
    *l = (sched_locs){s, o, 0};
    uint32_t n = 0;
    for (uint32_t i = 0; i < o->nlocs; i++)
        n += sched__worker_by_id(s, o->locs[i]) != NULL;
    return (proto_loc_recs){.n = n, .put = put_loc, .arg = l};
}

void sched__locate_reply(sched *s, sched_session *ss, uint64_t req, sched_obj *o)
{
    int status = 0;
    const char *msg = "";
    if (o->state == OBJ_FAILED) {
        const sched_failure *f = sched__obj_failure(s, o);
        status = f != NULL ? f->err : SPW_ETASKFAILED;
        msg = f != NULL ? f->msg : "";
    } else if (o->state == OBJ_LOST) {
        status = SPW_EOBJLOST;
        msg = "every copy was on workers that died";
    }
    proto_bytes value = {NULL, 0}; /* nil: not here */
    if (o->state == OBJ_READY && o->has_inline)
        value = (proto_bytes){sched__obj_inline(o), (uint32_t)o->size};
    else if (o->state == OBJ_READY && o->size == 0)
        value = (proto_bytes){"", 0};
    sched_locs l;
    proto_send_location(ss->conn, req,
                        &(proto_location_msg){.id = o->id,
                                              .status = status,
                                              .size = o->size,
                                              .value = value,
                                              .err = msg,
                                              .locs = sched__locs(&l, s, o),
                                              .chunk = o->chunked ? (uint64_t)1 << o->chunks.shift
                                                                  : 0,
                                              .omit_chunk = !o->chunked});
}

static void wake_waiters(sched *s, sched_obj *o)
{
    for (sched_waiter *w; (w = sched__obj_waiters(s, o)) != NULL;) {
        sched__locate_reply(s, w->sess, w->req, o);
        sched__waiter_free(s, w);
    }
}

void sched__obj_ready(sched *s, sched_obj *o)
{
    o->state = OBJ_READY;
    if (!o->chunked) /* its bytes are its chunks' */
        s->obj_bytes += o->size;
    /* Hold the object while its consumers move on: one of them may drop the last reference. */
    o->graph_hold++;
    sched_arg *a, *tmp;
    DL_FOREACH_SAFE2(o->consumers, a, tmp, cnext) sched__dep_ready(s, a);
    wake_waiters(s, o);
    o->graph_hold--;
    sched__obj_maybe_free(s, o);
}

const sched_failure *sched__obj_failure(const sched *s, const sched_obj *o)
{
    if (!o->has_failure)
        return NULL;
    sched_failure *f;
    HASH_FIND(hh, s->failures, &o, sizeof o, f);
    return f;
}

uint32_t sched__failures_count(const sched *s)
{
    return HASH_COUNT(s->failures);
}

void sched__obj_fail(sched *s, sched_obj *o, int err, const char *msg)
{
    if (o->is_chunk && o->state == OBJ_PENDING) {
        /* Its upload failed: so does the chunked object's, whose waiters hear it. */
        sched_obj *p = sched__chunk_parent(s, o);
        if (p->state == OBJ_PENDING)
            sched__obj_fail(s, p, err, msg);
    }
    o->state = OBJ_FAILED;
    sched_failure *f = (sched_failure *)(uintptr_t)sched__obj_failure(s, o);
    if (f == NULL) {
        f = spw_calloc(SPW_MOD_SCHED, 1, sizeof *f);
        f->obj = o;
        HASH_ADD(hh, s->failures, obj, sizeof f->obj, f);
        o->has_failure = 1;
    }
    f->err = err;
    spw_free(f->msg);
    f->msg = spw_strdup(SPW_MOD_SCHED, msg);
    o->graph_hold++;
    /* Failing a consumer unlinks all of its arguments, possibly the next one on this list: take
     * the list's first waiting argument each time. */
    for (;;) {
        sched_arg *a = o->consumers;
        while (a != NULL && !a->waiting)
            a = a->cnext;
        if (a == NULL)
            break;
        sched__dep_failed(s, a, err, msg);
    }
    wake_waiters(s, o);
    o->graph_hold--;
    sched__obj_maybe_free(s, o);
}

/* A worker's objs holds o while o names it in locs or put_worker. A worker that left is in no
 * index (sched__worker_lost took its objects out of its own). */
static void wobj_index(sched *s, sched_obj *o, uint32_t worker)
{
    sched_worker *w = sched__worker_by_id(s, worker);
    if (w != NULL && spw_idmap_find(&w->objs, o->id) != o)
        spw_idmap_add(&w->objs, o);
}

bool sched__obj_has_loc(const sched_obj *o, uint32_t worker)
{
    for (uint32_t i = 0; i < o->nlocs; i++)
        if (o->locs[i] == worker)
            return true;
    return false;
}

static void wobj_unindex(sched *s, sched_obj *o, uint32_t worker)
{
    if (worker == 0 || o->put_worker == worker || sched__obj_has_loc(o, worker))
        return;
    sched_worker *w = sched__worker_by_id(s, worker);
    if (w != NULL && spw_idmap_find(&w->objs, o->id) == o)
        spw_idmap_del(&w->objs, o);
}

void sched__obj_add_loc(sched *s, sched_obj *o, uint32_t worker)
{
    if (sched__obj_has_loc(o, worker))
        return;
    if (s->ndraining > 0)
        sched__drain_obj_added(s, o, worker); /* a copy on a draining worker: copied away */
    if (o->nlocs == o->caplocs) {
        o->caplocs = o->caplocs ? o->caplocs * 2 : 2;
        o->locs = spw_realloc(SPW_MOD_SCHED, o->locs, o->caplocs * sizeof *o->locs);
    }
    o->locs[o->nlocs++] = worker;
    wobj_index(s, o, worker);
}

void sched__obj_drop_loc(sched *s, sched_obj *o, uint32_t worker)
{
    for (uint32_t i = 0; i < o->nlocs; i++) {
        if (o->locs[i] == worker) {
            o->locs[i] = o->locs[--o->nlocs];
            wobj_unindex(s, o, worker);
            return;
        }
    }
}

void sched__obj_clear_locs(sched *s, sched_obj *o)
{
    while (o->nlocs > 0)
        sched__obj_drop_loc(s, o, o->locs[o->nlocs - 1]);
}

spw_id *sched__worker_objs_take(sched_worker *w, size_t *n)
{
    spw_id *ids = spw_malloc(SPW_MOD_SCHED, (w->objs.n > 0 ? w->objs.n : 1) * sizeof *ids);
    size_t k = 0;
    uint32_t pos = 0;
    for (sched_obj *o; (o = spw_idmap_next(&w->objs, &pos)) != NULL;)
        ids[k++] = o->id;
    spw_idmap_free(&w->objs);
    *n = k;
    return ids;
}

void sched__obj_set_put_worker(sched *s, sched_obj *o, uint32_t worker)
{
    uint32_t was = o->put_worker;
    o->put_worker = worker;
    wobj_unindex(s, o, was);
    if (worker != 0)
        wobj_index(s, o, worker);
}

void sched__obj_added(sched *s, sched_worker *w, const proto_msg *m)
{
    sched__obj_added_id(s, w, m->req, m->f[F_ADDED_ID].id, m->f[F_ADDED_SIZE].u);
}

void sched__obj_added_id(sched *s, sched_worker *w, uint64_t req, spw_id id, uint64_t size)
{
    char hex[33];
    sched_obj *o = sched__obj_find(s, id);
    if (o == NULL || o->husk) {
        /* Released while it was being written: the worker should drop it. */
        send_delete(s, w->id, id);
        return;
    }
    if (o->state == OBJ_PENDING && sched__obj_producer(o) == NULL && !o->is_out) {
        if (size != o->size) {
            proto_conn_error(w->conn, req, SPW_EINVAL,
                             "obj=%s: sealed %llu bytes, %llu announced", spw_id_hex(o->id, hex),
                             (unsigned long long)size, (unsigned long long)o->size);
            return;
        }
        sched__obj_add_loc(s, o, w->id);
        if (o->put_worker == w->id) {
            w->reserved -= o->size < w->reserved ? o->size : w->reserved;
            sched__obj_set_put_worker(s, o, 0);
        }
        sched__obj_ready(s, o);
        if (o->is_chunk)
            chunk_ready(s, o);
        sched__broadcast_obj_ready(s, o);
        sched__broadcast_added(s, w, o->id, true); /* a copy that followed the upload */
    } else if (o->state == OBJ_READY || o->state == OBJ_LOST) {
        if (o->put_worker == w->id) {
            /* The uploading worker, after a copy that followed its upload. */
            w->reserved -= o->size < w->reserved ? o->size : w->reserved;
            sched__obj_set_put_worker(s, o, 0);
        }
        if (o->state == OBJ_LOST) {
            o->state = OBJ_READY;
            s->obj_bytes += o->size;
            failure_drop(s, o); /* a put lost with its uploader (sched__worker_lost) */
        }
        sched__obj_add_loc(s, o, w->id);
        sched__broadcast_added(s, w, o->id, true);
    } else {
        /* Pending again (its copies went with their workers, and lineage makes it anew) or
         * failed since: a copy sealed before the loss (a replica, a fetched input) that came
         * after it. Only ready objects have locations, so the copy is not listed: its worker
         * drops it (else it stays, known to nobody), unless the re-run is there (its output
         * takes the id; a delete would follow it). A broadcast counts it as failed there. */
        sched_task *t = sched__obj_task(s, o);
        if (t == NULL || t->worker != w)
            send_delete(s, w->id, o->id);
        sched__broadcast_added(s, w, o->id, false);
    }
}

/* Host names are interned: every object records its owner's host, which outlives sessions. */
typedef struct sched_host {
    char *name;
    UT_hash_handle hh;
} sched_host;

const char *sched__host_intern(sched *s, const char *host)
{
    sched_host *h;
    HASH_FIND_STR(s->hosts, host, h);
    if (h == NULL) {
        h = spw_calloc(SPW_MOD_SCHED, 1, sizeof *h);
        h->name = spw_strdup(SPW_MOD_SCHED, host);
        HASH_ADD_KEYPTR(hh, s->hosts, h->name, strlen(h->name), h);
    }
    return h->name;
}

void sched__hosts_free(sched *s)
{
    sched_host *h, *tmp;
    HASH_ITER(hh, s->hosts, h, tmp)
    {
        HASH_DEL(s->hosts, h);
        spw_free(h->name);
        spw_free(h);
    }
}

/* An origin's hash key: the owner's id, then the site's bytes. */
#define ORIGIN_KEY(e) ((const void *)&(e)->owner)
#define ORIGIN_KEYLEN(e) (sizeof(uint64_t) + (e)->len)

sched_origin *sched__origin_intern(sched *s, sched_session *ss, const char *site, size_t len,
                                   uint64_t now_ms)
{
    sched_origin *e = s->last_origin;
    if (len > PROTO_MAX_NAME)
        len = PROTO_MAX_NAME; /* the schema's bound: not reached */
    if (e == NULL || e->owner != ss->id || e->len != len || memcmp(e->site, site, len) != 0) {
        char key[sizeof(uint64_t) + PROTO_MAX_NAME];
        memcpy(key, &ss->id, sizeof ss->id);
        memcpy(key + sizeof ss->id, site, len);
        HASH_FIND(hh, s->origins, key, sizeof ss->id + len, e);
    }
    /* Objects count their creation time from base_ms in 32 bits: about 49 days. */
    if (e != NULL && (now_ms < e->base_ms || now_ms - e->base_ms >= UINT32_MAX)) {
        HASH_DEL(s->origins, e);
        e->hashed = false; /* freed with its last object */
        e = NULL;
    }
    if (e == NULL) {
        e = spw_malloc(SPW_MOD_SCHED, sizeof *e + len + 1);
        memset(e, 0, sizeof *e);
        if (ss->ihost == NULL)
            ss->ihost = sched__host_intern(s, ss->host);
        e->host = ss->ihost;
        e->pid = ss->pid;
        e->owner = ss->id;
        e->base_ms = now_ms;
        e->len = (uint32_t)len;
        memcpy(e->site, site, len);
        e->site[len] = '\0';
        e->hashed = true;
        HASH_ADD_KEYPTR(hh, s->origins, ORIGIN_KEY(e), ORIGIN_KEYLEN(e), e);
    }
    s->last_origin = e;
    e->refs++;
    return e;
}

void sched__origin_unref(sched *s, sched_origin *e)
{
    SPW_ASSERT(e->refs > 0);
    if (--e->refs > 0)
        return;
    if (e->hashed)
        HASH_DEL(s->origins, e);
    if (s->last_origin == e)
        s->last_origin = NULL;
    spw_free(e);
}

void sched__origins_count(const sched *s, uint64_t *norigins, uint64_t *nrefs)
{
    *norigins = *nrefs = 0;
    for (const sched_origin *e = s->origins; e != NULL; e = e->hh.next) {
        ++*norigins;
        *nrefs += e->refs;
    }
}

void sched__objects_purge(sched *s)
{
    sched_obj *o;
    uint64_t n = 0;
    uint32_t pos = 0;
    while ((o = spw_idmap_next(&s->objects, &pos)) != NULL) {
        /* Only objects whose references were never taken back remain (and the husks they
         * keep for lineage); report, then free. */
        n += !o->husk;
        sched_task *t = sched__obj_producer(o);
        if (t != NULL) {
            if (t->state == T_READY || t->state == T_ASSIGNED || t->state == T_RUNNING)
                sched__task_set_state(s, t, T_FAILED);
            t->args_released = 1;
            sched_arg *a = sched__task_args(t);
            for (uint32_t i = 0; i < t->nargs; i++, a = sched__arg_next(a))
                if (a->kind != PROTO_ARG_INLINE)
                    a->held = 0; /* every record goes: no count to drop */
        }
        o->consumers = NULL;
        o->holders = NULL;
        o->kept = 0;
    }
    /* Their tasks' arguments were released above: freeing one record touches no other. */
    pos = 0;
    while ((o = spw_idmap_next(&s->objects, &pos)) != NULL) {
        if (o->has_task) {
            sched__task_free(s, sched__obj_producer(o));
            o->has_task = 0;
        }
        obj_release(s, o);
    }
    spw_idmap_free(&s->objects);
    spw_free(s->lin_drop);
    s->lin_drop = NULL;
    s->nlin_drop = s->caplin_drop = 0;
    if (n > 0)
        spw_log(SPW_LOG_WARN, "shutdown freed %llu objects that were still referenced",
                (unsigned long long)n);
}
