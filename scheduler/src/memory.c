/*
 * spillway-ctl memory: every object, who holds it and why, where it lives.
 *
 * A query snapshots the directory's ids, asks every worker for its object list (placement,
 * stored size and pins, which only the stores know), then streams MEMORY_OBJS frames of at most
 * BATCH objects, and of records filling at most about half the connection's max frame, per loop
 * iteration from an idle handle, stopped while the ctl connection is not writable (its on_drain
 * starts it again), and ends with MEMORY_END (per-node figures). So a directory of many thousands
 * of objects never stalls the loop. A session has at most one query under way: its further
 * requests are not read until the query ends (sched__session_flow). Objects freed meanwhile
 * are skipped; objects a store holds that the directory does not know are listed as orphans:
 * memory nobody can release.
 * Owns: the memq records (s->memqs) and their idle handle.
 */
#include <stdio.h>
#include <string.h>

#include <utlist.h>

#include "sched_int.h"

#define BATCH 1000
#define MAX_HOLDERS 16
#define WORKER_ANSWER_MS 3000

typedef struct mloc {
    uint32_t worker;
    uint8_t where;
    uint64_t stored;
    uint32_t pins;
} mloc;

/* What the stores said about one object: one location per worker that holds it, as many as
 * there are (grown on demand, so a broadcast to every worker shows every copy). */
typedef struct mobj {
    spw_id id;
    UT_hash_handle hh;
    uint64_t size;
    uint32_t n, cap; /* locations used, allocated */
    mloc *l;
} mobj;

typedef struct mnode {
    uint32_t id;
    uint64_t stats[PROTO_STAT_COUNT];
    bool fresh; /* answered this query; otherwise its last heartbeat's figures */
} mnode;

typedef struct memq {
    uint64_t id;        /* request id sent to workers */
    sched_session *ss;  /* the ctl session */
    uint64_t req;       /* its request id */
    spw_id *ids;        /* directory snapshot */
    size_t nids, pos;
    mobj *objs;         /* by id, from the workers */
    mobj *orphan_pos;   /* streaming cursor over objs for orphans */
    mnode *nodes;
    uint32_t nnodes;
    uint32_t waiting;   /* workers yet to answer */
    uint64_t deadline_ns;
    bool streaming, orphans_done;
    uv_idle_t idle;
    sched *s;
    struct memq *next;
} memq;

static void memq_closed(uv_handle_t *h)
{
    memq *q = h->data;
    mobj *o, *tmp;
    HASH_ITER(hh, q->objs, o, tmp)
    {
        HASH_DEL(q->objs, o);
        spw_free(o->l);
        spw_free(o);
    }
    spw_free(q->ids);
    spw_free(q->nodes);
    spw_free(q);
}

static void memq_free(sched *s, memq *q)
{
    q->ss->memqs--;
    LL_DELETE(s->memqs, q);
    uv_close((uv_handle_t *)&q->idle, memq_closed);
}

static uint64_t state_of(const sched_obj *o)
{
    switch (o->state) {
    case OBJ_PENDING:
        return PROTO_OSTATE_PENDING;
    case OBJ_READY:
        return PROTO_OSTATE_READY;
    case OBJ_FAILED:
        return PROTO_OSTATE_FAILED;
    default:
        return PROTO_OSTATE_LOST;
    }
}

static const char *task_state_name(int st)
{
    static const char *const names[] = {"waiting", "ready", "assigned", "running", "done",
                                        "failed"};
    _Static_assert(sizeof names / sizeof names[0] == PROTO_TSTATE_COUNT,
                   "a name for every task state");
    return st >= 0 && st < PROTO_TSTATE_COUNT ? names[st] : "?";
}

static void put_holder(proto_enc *e, int kind, uint64_t count, const char *who)
{
    proto_put_holder_rec(e,
                         &(proto_holder_rec){.kind = (uint64_t)kind, .count = count, .who = who});
}

/* Location i of an object as its store reported it. */
static void put_mloc(proto_enc *e, uint32_t i, void *arg)
{
    const mloc *l = &((const mobj *)arg)->l[i];
    proto_put_mloc_rec(
        e, &(proto_mloc_rec){
               .worker = l->worker, .where = l->where, .stored = l->stored, .pins = l->pins});
}

/* Location i of an object from the directory: its worker did not answer (where unknown). */
static void put_dir_loc(proto_enc *e, uint32_t i, void *arg)
{
    proto_put_mloc_rec(e, &(proto_mloc_rec){.worker = ((const sched_obj *)arg)->locs[i]});
}

static void put_object(sched *s, proto_enc *e, const sched_obj *o, mobj *m)
{
    char who[2 * PROTO_MAX_NAME], hex[33]; /* sent cut to PROTO_MAX_NAME (put_holder) */
    uint64_t pins = 0;
    for (uint32_t i = 0; m != NULL && i < m->n; i++)
        pins += m->l[i].pins;
    uint64_t refs[PROTO_REF_KINDS];
    for (int k = 0; k < PROTO_REF_KINDS; k++)
        refs[k] = k == REF_PINNED ? pins : o->refs[k];
    spw_buf holders = {0};
    proto_enc he;
    proto_enc_raw(&he, &holders);
    /* Holders: sessions (CLIENT, OUTPUT, BROADCAST), consumer tasks (TASK_ARG), stores (PINNED). */
    uint32_t nh = o->kept;
    for (const sched_ref *r = o->holders; r != NULL; r = r->onext)
        for (int k = 0; k < REF_KINDS; k++)
            nh += r->count[k] > 0;
    uint32_t ntask = 0;
    for (const sched_arg *a = o->consumers; a != NULL; a = a->cnext)
        ntask++;
    uint32_t npin = 0;
    for (uint32_t i = 0; m != NULL && i < m->n; i++)
        npin += m->l[i].pins > 0;
    uint32_t shown_tasks = ntask > MAX_HOLDERS ? MAX_HOLDERS : ntask;
    if (o->kept) { /* the submitter's OUTPUT reference, held in the object */
        snprintf(who, sizeof who, "client %s pid %u session %llu", o->origin->host, o->origin->pid,
                 (unsigned long long)o->origin->owner);
        put_holder(&he, REF_OUTPUT, 1, who);
    }
    for (const sched_ref *r = o->holders; r != NULL; r = r->onext) {
        for (int k = 0; k < REF_KINDS; k++) {
            if (r->count[k] == 0)
                continue;
            snprintf(who, sizeof who, "client %s pid %u session %llu", r->sess->host,
                     r->sess->pid, (unsigned long long)r->sess->id);
            put_holder(&he, k, r->count[k], who);
        }
    }
    uint32_t i = 0;
    for (const sched_arg *a = o->consumers; a != NULL && i < shown_tasks; a = a->cnext, i++) {
        const sched_task *t = sched__arg_task(a);
        spw_id_hex(sched__task_out(t)->id, hex);
        snprintf(who, sizeof who, "task %.12s %s %s", hex, t->fn->name,
                 task_state_name(t->state));
        put_holder(&he, REF_TASK_ARG, 1, who);
    }
    if (ntask > shown_tasks) {
        snprintf(who, sizeof who, "%u more tasks", ntask - shown_tasks);
        put_holder(&he, REF_TASK_ARG, ntask - shown_tasks, who);
    }
    for (uint32_t j = 0; m != NULL && j < m->n; j++) {
        if (m->l[j].pins == 0)
            continue;
        sched_worker *w = sched__worker_by_id(s, m->l[j].worker);
        snprintf(who, sizeof who, "worker %s (readers, tasks or a writer)",
                 w != NULL ? w->name : "?");
        put_holder(&he, REF_PINNED, m->l[j].pins, who);
    }
    uint64_t now = spw_wall_ms();
    const sched_task *producer = sched__obj_producer(o);
    proto_mobj_rec r = {
        .id = o->id,
        .size = o->size,
        .state = state_of(o),
        .site = o->origin->site,
        .owner_host = o->origin->host,
        .owner_pid = o->origin->pid,
        .age_ms = now > sched__obj_created_ms(o) ? now - sched__obj_created_ms(o) : 0,
        .task_fn = producer != NULL ? producer->fn->name : "",
        .refs = {refs, PROTO_REF_KINDS},
        .holders = {.n = nh + shown_tasks + (ntask > shown_tasks) + npin, .pre = &holders},
        /* Locations: what the stores said, else the directory's (their worker did not answer). */
        .locs = m != NULL ? (proto_mloc_recs){.n = m->n, .put = put_mloc, .arg = m}
                          : (proto_mloc_recs){.n = o->nlocs, .put = put_dir_loc, .arg = (void *)o},
        .is_inline = o->has_inline};
    proto_put_mobj_rec(e, &r);
    spw_buf_release(&holders);
}

static void put_orphan(proto_enc *e, mobj *m)
{
    uint64_t refs[PROTO_REF_KINDS] = {0};
    for (uint32_t j = 0; j < m->n; j++)
        refs[REF_PINNED] += m->l[j].pins;
    proto_put_mobj_rec(e, &(proto_mobj_rec){.id = m->id,
                                            .size = m->size,
                                            .state = PROTO_OSTATE_ORPHAN,
                                            .refs = {refs, PROTO_REF_KINDS},
                                            .locs = {.n = m->n, .put = put_mloc, .arg = m}});
}

typedef struct node_iter {
    sched *s;
    memq *q;
} node_iter;

static void put_node(proto_enc *e, uint32_t i, void *arg)
{
    node_iter *it = arg;
    const mnode *n = &it->q->nodes[i];
    const sched_worker *w = sched__worker_by_id(it->s, n->id);
    const uint64_t *st = n->fresh ? n->stats : (w != NULL ? w->stats : n->stats);
    proto_put_mnode_rec(e, &(proto_mnode_rec){.id = n->id,
                                              .addr = w != NULL ? w->addr : "?",
                                              .name = w != NULL ? w->name : "(gone)",
                                              .stats = {st, PROTO_STAT_COUNT},
                                              .fresh = n->fresh ? 1 : 0});
}

static void send_end(sched *s, memq *q)
{
    bool complete = true;
    for (uint32_t i = 0; i < q->nnodes; i++)
        complete = complete && q->nodes[i].fresh;
    node_iter it = {s, q};
    proto_send_memory_end(
        q->ss->conn, q->req,
        &(proto_memory_end_msg){.nodes = {.n = q->nnodes, .put = put_node, .arg = &it},
                                .complete = complete ? 1 : 0});
}

/* Sends n object records encoded in recs, and frees them. */
static void send_objs(memq *q, uint32_t n, spw_buf *recs)
{
    proto_send_memory_objs(q->ss->conn, q->req,
                           &(proto_memory_objs_msg){.objs = {.n = n, .pre = recs}});
    spw_buf_release(recs);
}

/* Streams one batch; re-armed by the idle handle until done. */
static void stream_cb(uv_idle_t *h)
{
    memq *q = h->data;
    sched *s = q->s;
    proto_conn *c = q->ss->conn;
    if (!proto_conn_writable(c)) {
        /* The ctl reads slowly: wait for the queue to drain (sched__memory_session_drained
         * starts this again), without spinning the loop meanwhile. */
        uv_idle_stop(h);
        sched__session_flow(s, q->ss);
        return;
    }
    /* Each batch's records are encoded first, then sent as one MEMORY_OBJS. */
    spw_buf recs = {0};
    proto_enc e;
    proto_enc_raw(&e, &recs);
    /* A frame the ctl's connection would refuse is dropped whole, so a batch also ends once its
     * records fill half a frame (a record past that still fits: the others are far smaller). */
    size_t budget = proto_conn_welcome(c)->max_frame / 2;
    if (q->pos < q->nids) {
        size_t end = q->pos + BATCH < q->nids ? q->pos + BATCH : q->nids;
        uint32_t n = 0;
        size_t i = q->pos;
        for (; i < end && recs.len < budget; i++) {
            const sched_obj *o = sched__obj_find(s, q->ids[i]);
            if (o == NULL)
                continue;
            mobj *m;
            HASH_FIND(hh, q->objs, &o->id, sizeof o->id, m);
            put_object(s, &e, o, m);
            n++;
        }
        send_objs(q, n, &recs);
        q->pos = i;
        return;
    }
    if (!q->orphans_done) {
        /* Objects in stores that the directory does not know. A turn looks at SCHED_MEMQ_SCAN
         * of the stores' objects at most, listed or not: most are known, and one pass over all
         * of them stalled the loop about 50 ms per million objects (release build). */
        mobj *m = q->orphan_pos != NULL ? q->orphan_pos : q->objs;
        uint32_t n = 0, seen = 0;
        for (; m != NULL && n < BATCH && seen < SCHED_MEMQ_SCAN && recs.len < budget;
             m = m->hh.next, seen++) {
            if (sched__obj_find(s, m->id) != NULL)
                continue;
            put_orphan(&e, m);
            n++;
        }
        q->orphan_pos = m;
        if (m == NULL)
            q->orphans_done = true;
        if (n > 0)
            send_objs(q, n, &recs);
        else
            spw_buf_release(&recs);
        return;
    }
    send_end(s, q);
    sched_session *ss = q->ss;
    memq_free(s, q);
    sched__session_flow(s, ss); /* its next request may be read now */
}

static void start_streaming(sched *s, memq *q)
{
    if (q->streaming)
        return;
    q->streaming = true;
    (void)s;
    uv_idle_start(&q->idle, stream_cb);
}

void sched__memory_req(sched *s, sched_session *ss, const proto_msg *m)
{
    memq *q = spw_calloc(SPW_MOD_SCHED, 1, sizeof *q);
    static uint64_t next_id;
    q->id = ++next_id;
    q->ss = ss;
    ss->memqs++; /* its input waits until this query ends (sched__session_flow) */
    q->req = m->req;
    q->s = s;
    q->nids = s->objects.n;
    q->ids = spw_malloc(SPW_MOD_SCHED, (q->nids > 0 ? q->nids : 1) * sizeof *q->ids);
    size_t i = 0;
    uint32_t pos = 0;
    for (sched_obj *o; (o = spw_idmap_next(&s->objects, &pos)) != NULL;)
        q->ids[i++] = o->id;
    q->nnodes = s->nworkers;
    q->nodes = spw_calloc(SPW_MOD_SCHED, q->nnodes > 0 ? q->nnodes : 1, sizeof *q->nodes);
    for (uint32_t k = 0; k < s->nworkers; k++) {
        sched_worker *w = s->workers[k];
        q->nodes[k].id = w->id;
        memcpy(q->nodes[k].stats, w->stats, sizeof w->stats);
        if (proto_send_obj_list_req(w->conn, q->id, &(proto_obj_list_req_msg){.flags = 0}) == 0)
            q->waiting++;
    }
    q->deadline_ns = spw_now_ns() + (uint64_t)WORKER_ANSWER_MS * 1000000ULL;
    uv_idle_init(s->loop, &q->idle);
    q->idle.data = q;
    LL_PREPEND(s->memqs, q);
    if (q->waiting == 0)
        start_streaming(s, q);
}

void sched__memory_obj_list(sched *s, sched_worker *w, const proto_msg *m)
{
    memq *q;
    LL_SEARCH_SCALAR(s->memqs, q, id, m->req);
    if (q == NULL || q->streaming)
        return; /* a late answer */
    mnode *node = NULL;
    for (uint32_t i = 0; i < q->nnodes; i++)
        if (q->nodes[i].id == w->id)
            node = &q->nodes[i];
    if (node == NULL || node->fresh)
        return;
    node->fresh = true;
    const proto_val *st = &m->f[F_OLIST_STATS];
    for (uint32_t k = 0; k < st->arr.n && k < PROTO_STAT_COUNT; k++)
        node->stats[k] = st->arr.v[k].u;
    const proto_val *objs = &m->f[F_OLIST_OBJS];
    for (uint32_t i = 0; i < objs->arr.n; i++) {
        const proto_val *r = PROTO_REC(objs, i);
        spw_id id = r[R_OLOBJ_ID].id;
        mobj *mo;
        HASH_FIND(hh, q->objs, &id, sizeof id, mo);
        if (mo == NULL) {
            mo = spw_calloc(SPW_MOD_SCHED, 1, sizeof *mo);
            mo->id = id;
            mo->size = r[R_OLOBJ_SIZE].u;
            HASH_ADD(hh, q->objs, id, sizeof mo->id, mo);
        }
        if (mo->n == mo->cap) {
            mo->cap = mo->cap > 0 ? 2 * mo->cap : 4;
            mo->l = spw_realloc(SPW_MOD_SCHED, mo->l, mo->cap * sizeof *mo->l);
        }
        mo->l[mo->n++] = (mloc){w->id, (uint8_t)r[R_OLOBJ_WHERE].u, r[R_OLOBJ_STORED].u,
                                (uint32_t)r[R_OLOBJ_PINS].u};
    }
    if (--q->waiting == 0)
        start_streaming(s, q);
}

void sched__memory_worker_gone(sched *s, sched_worker *w)
{
    memq *q, *tmp;
    LL_FOREACH_SAFE(s->memqs, q, tmp)
    {
        for (uint32_t i = 0; i < q->nnodes; i++) {
            if (q->nodes[i].id == w->id && !q->nodes[i].fresh && !q->streaming) {
                q->nodes[i].fresh = false;
                if (--q->waiting == 0)
                    start_streaming(s, q);
            }
        }
    }
}

void sched__memory_session_gone(sched *s, sched_session *ss)
{
    memq *q, *tmp;
    LL_FOREACH_SAFE(s->memqs, q, tmp)
    if (q->ss == ss)
        memq_free(s, q);
}

void sched__memory_session_drained(sched *s, sched_session *ss)
{
    for (memq *q = s->memqs; q != NULL; q = q->next)
        if (q->ss == ss && q->streaming)
            uv_idle_start(&q->idle, stream_cb);
}

void sched__memory_tick(sched *s)
{
    uint64_t now = spw_now_ns();
    memq *q, *tmp;
    LL_FOREACH_SAFE(s->memqs, q, tmp)
    if (!q->streaming && now >= q->deadline_ns)
        start_streaming(s, q); /* answer with what we have; MEMORY_END says it is partial */
}

void sched__memory_free_all(sched *s)
{
    memq *q, *tmp;
    LL_FOREACH_SAFE(s->memqs, q, tmp) memq_free(s, q);
}
