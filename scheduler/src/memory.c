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

/* One location of an object as a store reported it: a record of a worker's OBJ_LIST. The
 * records of one id, from every worker that holds it, are chained in the order they came; the
 * first of them (the head, the one the index finds) also counts and ends the chain. */
typedef struct mrec {
    spw_id id;
    uint64_t size;
    uint64_t stored;
    uint32_t worker;
    uint32_t pins;
    struct mrec *next; /* the object's next location */
    struct mrec *tail; /* head only: its last location */
    uint32_t n;        /* head only: its locations; 0 in the others and before indexing */
    uint8_t where;
} mrec;

/* The records of one OBJ_LIST frame, as they came: one allocation per frame. A worker's list is
 * kept so, with no hash entry and no allocation per object in the turn it comes, and indexed by
 * id from the idle handle once every worker answered: the index's table a segment per loop turn,
 * then SCHED_MEMQ_SCAN records per turn. The orphan pass frees the index a segment per turn and
 * the chunks it has passed, so the turn the query ends frees little. Each step's work per loop
 * turn is bounded, so a list of any length never stalls the loop. */
typedef struct mchunk {
    struct mchunk *next;
    uint32_t n;
    mrec r[];
} mchunk;

typedef struct mnode {
    uint32_t id;
    uint64_t stats[PROTO_STAT_COUNT];
    bool fresh; /* answered this query; otherwise its last heartbeat's figures */
} mnode;

/* A position in the chunks, in the order their records came. */
typedef struct mpos {
    mchunk *c;
    uint32_t i;
} mpos;

typedef struct memq {
    uint64_t id;        /* request id sent to workers */
    sched_session *ss;  /* the ctl session */
    uint64_t req;       /* its request id */
    spw_id *ids;        /* directory snapshot */
    size_t nids, pos;
    mchunk *chunks, *last; /* the workers' records, in the order they came */
    uint64_t nrecs;        /* records in the chunks */
    mrec ***segs;          /* the index: head records by id, open addressing, linear probing;
                              its slots in segments of SEG_SLOTS (one, if the table is smaller) */
    uint32_t mask;         /* slots - 1 */
    uint32_t nsegs;        /* segments of the index */
    uint32_t madesegs;     /* made so far, a segment a turn */
    uint32_t freedsegs;    /* freed so far, a segment a turn once the index is needed no more */
    mpos indexed;          /* the next record to index */
    mpos orphan_pos;       /* streaming cursor over the records for orphans */
    mnode *nodes;
    uint32_t nnodes;
    uint32_t waiting;   /* workers yet to answer */
    uint64_t deadline_ns;
    bool streaming, index_done, orphans_started, orphans_done;
    uv_idle_t idle;
    sched *s;
    struct memq *next;
} memq;

static void memq_closed(uv_handle_t *h)
{
    memq *q = h->data;
    for (mchunk *c = q->chunks, *next; c != NULL; c = next) {
        next = c->next;
        spw_free(c);
    }
    for (uint32_t i = q->freedsegs; i < q->madesegs; i++)
        spw_free(q->segs[i]);
    spw_free(q->segs);
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

/* The record at p, or NULL past the last; steps over empty chunks. */
static mrec *mpos_rec(mpos *p)
{
    while (p->c != NULL && p->i >= p->c->n) {
        p->c = p->c->next;
        p->i = 0;
    }
    return p->c != NULL ? &p->c->r[p->i] : NULL;
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

/* Walks an object's locations for put_mloc, which the encoder calls for i = 0, 1, ... */
typedef struct mloc_iter {
    const mrec *head, *cur;
} mloc_iter;

/* Location i of an object as its store reported it. */
static void put_mloc(proto_enc *e, uint32_t i, void *arg)
{
    mloc_iter *it = arg;
    it->cur = i == 0 ? it->head : it->cur->next;
    const mrec *l = it->cur;
    proto_put_mloc_rec(
        e, &(proto_mloc_rec){
               .worker = l->worker, .where = l->where, .stored = l->stored, .pins = l->pins});
}

/* Location i of an object from the directory: its worker did not answer (where unknown). */
static void put_dir_loc(proto_enc *e, uint32_t i, void *arg)
{
    proto_put_mloc_rec(e, &(proto_mloc_rec){.worker = ((const sched_obj *)arg)->locs[i]});
}

/* o's record; m: the head of its locations from the stores, NULL if none reported it. */
static void put_object(sched *s, proto_enc *e, const sched_obj *o, const mrec *m)
{
    char who[2 * PROTO_MAX_NAME], hex[33]; /* sent cut to PROTO_MAX_NAME (put_holder) */
    uint64_t pins = 0;
    uint32_t npin = 0;
    for (const mrec *l = m; l != NULL; l = l->next) {
        pins += l->pins;
        npin += l->pins > 0;
    }
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
    for (const mrec *l = m; l != NULL; l = l->next) {
        if (l->pins == 0)
            continue;
        sched_worker *w = sched__worker_by_id(s, l->worker);
        snprintf(who, sizeof who, "worker %s (readers, tasks or a writer)",
                 w != NULL ? w->name : "?");
        put_holder(&he, REF_PINNED, l->pins, who);
    }
    uint64_t now = spw_wall_ms();
    mloc_iter it = {.head = m};
    const sched_task *producer = sched__obj_task(s, o);
    uint32_t nouts = producer != NULL ? producer->nouts : 1;
    uint32_t nchunks = o->chunked ? o->chunks.n : o->is_chunk ? sched__chunk_parent(s, o)->chunks.n : 0;
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
        .locs = m != NULL ? (proto_mloc_recs){.n = m->n, .put = put_mloc, .arg = &it}
                          : (proto_mloc_recs){.n = o->nlocs, .put = put_dir_loc, .arg = (void *)o},
        .is_inline = o->has_inline,
        .nouts = nouts,
        .omit_nouts = nouts <= 1 && nchunks == 0,
        .chunks = nchunks,
        .omit_chunks = nchunks == 0};
    proto_put_mobj_rec(e, &r);
    spw_buf_release(&holders);
}

/* m: the head of the locations of an object the directory does not know. */
static void put_orphan(proto_enc *e, const mrec *m)
{
    uint64_t refs[PROTO_REF_KINDS] = {0};
    for (const mrec *l = m; l != NULL; l = l->next)
        refs[REF_PINNED] += l->pins;
    mloc_iter it = {.head = m};
    proto_put_mobj_rec(e, &(proto_mobj_rec){.id = m->id,
                                            .size = m->size,
                                            .state = PROTO_OSTATE_ORPHAN,
                                            .refs = {refs, PROTO_REF_KINDS},
                                            .locs = {.n = m->n, .put = put_mloc, .arg = &it}});
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

/* Slots of one segment of the index (2 MiB). A segment is made, and freed, in a loop turn of
 * its own: a table's fresh pages are made as they are first written, and making (or freeing)
 * all of a large table's pages in one turn would hold the loop for as long as that takes. */
#define SEG_SHIFT 18
#define SEG_SLOTS (1u << SEG_SHIFT)

/* The slot of id's head record in the index, or the empty slot where it goes. */
static mrec **index_slot(const memq *q, spw_id id)
{
    for (uint32_t i = (uint32_t)spw_id_hash(id) & q->mask;; i = (i + 1) & q->mask) {
        mrec **slot = &q->segs[i >> SEG_SHIFT][i & (SEG_SLOTS - 1)];
        if (*slot == NULL || spw_id_eq((*slot)->id, id))
            return slot;
    }
}

/* Builds the index, one slice per loop turn: first its table, at most half full, a segment a
 * turn; then SCHED_MEMQ_SCAN records a turn, the first of an id becoming its head and a later
 * one chained behind it. */
static void index_step(sched *s, memq *q)
{
    if (q->segs == NULL) {
        uint64_t n = 64;
        while (n < 2 * q->nrecs)
            n *= 2;
        if (n > (1ull << 31))
            SPW_PANIC("memory query: %llu store records", (unsigned long long)q->nrecs);
        q->mask = (uint32_t)(n - 1);
        q->nsegs = n > SEG_SLOTS ? (uint32_t)(n >> SEG_SHIFT) : 1;
        q->segs = spw_calloc(SPW_MOD_SCHED, q->nsegs, sizeof *q->segs);
        q->indexed.c = q->chunks;
    }
    if (q->madesegs < q->nsegs) {
        size_t bytes = (q->nsegs > 1 ? SEG_SLOTS : (size_t)q->mask + 1) * sizeof **q->segs;
        q->segs[q->madesegs] = spw_malloc(SPW_MOD_SCHED, bytes);
        memset(q->segs[q->madesegs++], 0, bytes);
        return;
    }
    mrec *r;
    uint32_t seen = 0;
    for (; seen < SCHED_MEMQ_SCAN && (r = mpos_rec(&q->indexed)) != NULL; seen++, q->indexed.i++) {
        mrec **slot = index_slot(q, r->id);
        mrec *head = *slot;
        if (head == NULL) {
            r->n = 1;
            r->tail = r;
            *slot = r;
        } else {
            head->tail->next = r;
            head->tail = r;
            head->n++;
        }
    }
    s->memq_indexed += seen;
    if (r == NULL)
        q->index_done = true;
}

/* Indexes, then streams one batch; re-armed by the idle handle until done. */
static void stream_cb(uv_idle_t *h)
{
    memq *q = h->data;
    sched *s = q->s;
    if (!q->index_done) {
        index_step(s, q);
        return;
    }
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
            if (o == NULL || o->husk) /* a husk is a released output's record: no object */
                continue;
            put_object(s, &e, o, *index_slot(q, o->id));
            n++;
        }
        send_objs(q, n, &recs);
        q->pos = i;
        return;
    }
    if (!q->orphans_done) {
        /* Objects in stores that the directory does not know. A turn looks at SCHED_MEMQ_SCAN
         * of the stores' objects at most, listed or not: most are known, and one pass over all
         * of them would hold the loop for time in proportion to the cluster's objects. */
        if (!q->orphans_started) {
            q->orphans_started = true;
            q->orphan_pos.c = q->chunks;
        }
        if (q->freedsegs < q->madesegs) /* the index is needed no more: a segment a turn */
            spw_free(q->segs[q->freedsegs++]);
        const mrec *m = NULL;
        uint32_t n = 0, seen = 0;
        for (; n < BATCH && seen < SCHED_MEMQ_SCAN && recs.len < budget &&
               (m = mpos_rec(&q->orphan_pos)) != NULL;
             seen++, q->orphan_pos.i++) {
            /* An object's first location carries the others: each object is looked at once. */
            if (m->n == 0 || sched__obj_find(s, m->id) != NULL)
                continue;
            put_orphan(&e, m);
            n++;
        }
        if (mpos_rec(&q->orphan_pos) == NULL)
            q->orphans_done = true;
        /* Chunks behind the cursor are read no more (an object's locations follow its first,
         * never precede it): freed as the pass goes, not all in the turn the query ends. */
        while (q->chunks != NULL && q->chunks != q->orphan_pos.c) {
            mchunk *done = q->chunks;
            q->chunks = done->next;
            spw_free(done);
        }
        if (q->chunks == NULL)
            q->last = NULL;
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
    /* A list comes in frames of a bounded size (a worker from before F_OLIST_MORE sends one);
     * the last carries the figures. */
    bool last = m->f[F_OLIST_MORE].u == 0;
    if (last) {
        node->fresh = true;
        const proto_val *st = &m->f[F_OLIST_STATS];
        for (uint32_t k = 0; k < st->arr.n && k < PROTO_STAT_COUNT; k++)
            node->stats[k] = st->arr.v[k].u;
    }
    /* The frame's records, copied as they are: indexed later, a slice per loop turn. */
    const proto_val *objs = &m->f[F_OLIST_OBJS];
    uint32_t n = objs->arr.n;
    if (n > 0) {
        mchunk *ch = spw_malloc(SPW_MOD_SCHED, sizeof *ch + (size_t)n * sizeof ch->r[0]);
        ch->next = NULL;
        ch->n = n;
        for (uint32_t i = 0; i < n; i++) {
            const proto_val *r = PROTO_REC(objs, i);
            ch->r[i] = (mrec){.id = r[R_OLOBJ_ID].id,
                              .size = r[R_OLOBJ_SIZE].u,
                              .stored = r[R_OLOBJ_STORED].u,
                              .worker = w->id,
                              .pins = (uint32_t)r[R_OLOBJ_PINS].u,
                              .where = (uint8_t)r[R_OLOBJ_WHERE].u};
        }
        if (q->last != NULL)
            q->last->next = ch;
        else
            q->chunks = ch;
        q->last = ch;
        q->nrecs += n;
    }
    if (last && --q->waiting == 0)
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
