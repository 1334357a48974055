/*
 * The scheduler's lifecycle and its connections: registration of workers and client sessions,
 * routing of their messages, heartbeats and request deadlines.
 *
 * Owns: the proto_ctx (and through it every connection), two handles of its own (the dispatch
 * idle handle and a 250 ms timer), the worker array and the session table. Everything runs on
 * the loop's thread. A peer's bad input gets an ERROR frame and changes nothing; messages not
 * valid for a peer's role are refused the same way. A session's connection is read only while
 * sched__session_flow allows: its answers are under the high-water mark, no memory query of its
 * is under way and fewer than SCHED_WAITERS_MAX of its LOCATEs wait; workers are always read.
 */
#include <stdio.h>
#include <string.h>

#include <utlist.h>

#include "sched_int.h"

#define TIMER_MS 250

void sched_opts_default(sched_opts *o)
{
    memset(o, 0, sizeof *o);
    o->listen = "127.0.0.1:7400";
    o->max_frame = PROTO_DEFAULT_MAX_FRAME;
    o->inline_limit = PROTO_DEFAULT_INLINE_LIMIT;
    o->chunk = PROTO_DEFAULT_CHUNK;
    o->heartbeat_timeout_ms = 15000;
    o->task_retries = 3;
    o->place_wait_ms = 60000;
    o->session_grace_s = 60;
    o->queue_target_us = 2000;
    o->max_depth = 256;
    o->graph_max_total = 2000000;
    o->allow_plugin_upload = true;
    o->plugin_max_size = PROTO_PLUGIN_MAX_SIZE_DEFAULT;
}

/* ----------------------------------------------------------------- workers */

/* status: why its connection ended (0 or SPW_ESHUTDOWN: we closed it; SPW_ECLOSED: the worker
 * closed it, as it does when it stops). Any other end is logged as a warning. */
static void worker_remove(sched *s, sched_worker *w, int status)
{
    /* What it held, while its index is still kept: once it is out of the worker table, freeing
     * an object no longer finds it to update. */
    size_t nheld;
    spw_id *held = sched__worker_objs_take(w, &nheld);
    sched__workers_remove(s, w);
    bool clean = status == 0 || status == SPW_ESHUTDOWN || status == SPW_ECLOSED;
    spw_log(clean ? SPW_LOG_NOTICE : SPW_LOG_WARN, "worker=%u addr=%s left: %s", w->id, w->addr,
            status == 0 ? "closed by the scheduler" : spw_strerror(status));
    sched__memory_worker_gone(s, w);
    sched__drain_worker_gone(s, w);
    sched__broadcast_worker_gone(s, w);
    sched__push_worker_gone(s, w);
    sched__plugins_worker_gone(s, w);
    sched__worker_lost(s, w, held, nheld);
    spw_free(w->plugins);
    spw_free(w);
    sched__kick(s);
}

static void worker_msg_handle(sched *s, sched_worker *w, const proto_msg *m);

static void worker_msg(sched *s, sched_worker *w, const proto_msg *m)
{
    worker_msg_handle(s, w, m);
    if (w->drain)
        sched__drain_poke(s, w); /* a task done, an upload sealed: its drain may move on */
}

static void worker_msg_handle(sched *s, sched_worker *w, const proto_msg *m)
{
    switch (m->type) {
    case PROTO_TASK_DONE:
        sched__task_done(s, w, m);
        return;
    case PROTO_TASK_DONES:
        sched__task_dones(s, w, m);
        return;
    case PROTO_TASK_STARTED:
        sched__task_started(s, w, m);
        return;
    case PROTO_OBJ_ADDED:
        sched__obj_added(s, w, m);
        return;
    case PROTO_OBJ_LIST:
        sched__memory_obj_list(s, w, m);
        return;
    case PROTO_OBJS_HELD:
        sched__objs_held(s, w, m);
        return;
    case PROTO_PLUGIN_GET:
        sched__plugin_get(s, w, m);
        return;
    case PROTO_PLUGIN_CHECKED:
        sched__plugin_checked(s, w, m);
        return;
    case PROTO_WORKER_PLUGINS:
        sched__worker_plugins(s, w, m);
        return;
    case PROTO_DRAIN:
        sched__drain(s, w, NULL, m);
        return;
    case PROTO_HEARTBEAT: {
        const proto_val *st = &m->f[F_HB_STATS];
        bool was_paused = w->stats[PROTO_STAT_PAUSED] != 0;
        for (uint32_t i = 0; i < PROTO_STAT_COUNT && i < st->arr.n; i++)
            w->stats[i] = st->arr.v[i].u;
        w->last_hb_ns = spw_now_ns();
        if (was_paused != (w->stats[PROTO_STAT_PAUSED] != 0)) {
            spw_log(SPW_LOG_NOTICE, "worker=%u %s", w->id,
                    w->stats[PROTO_STAT_PAUSED] ? "paused: memory above the pause threshold"
                                                : "resumed");
            sched__kick(s);
        }
        return;
    }
    case PROTO_ERROR: {
        char msg[256];
        if (sched__broadcast_error(s, w, m->req)) {
            spw_log(SPW_LOG_WARN, "worker=%u could not take its broadcast copy: %s", w->id,
                    proto_str(&m->f[F_ERROR_MSG], msg, sizeof msg));
            return;
        }
        spw_log(SPW_LOG_WARN, "worker=%u reported: %s err=%s", w->id,
                proto_str(&m->f[F_ERROR_MSG], msg, sizeof msg),
                spw_err_name((int)m->f[F_ERROR_CODE].i));
        return;
    }
    default:
        proto_conn_error(w->conn, m->req, SPW_EPROTO, "%s is not a worker message",
                         proto_type_name(m->type));
    }
}

/* ---------------------------------------------------------------- sessions */

/* The spill threshold assumed for a worker that has not yet sent a heartbeat (so has not said
 * its own): the worker's default --spill-threshold. */
#define SCHED_SPILL_THRESHOLD_UNKNOWN 0.8

/* Chooses where a put goes: a worker on the client's host if one has room (the client then
 * writes straight into its shared memory), else the emptiest store. */
static sched_worker *place_put(sched *s, uint64_t size, const char *host_id)
{
    sched_worker *best = NULL;
    double best_fill = 0;
    bool best_local = false;
    for (uint32_t k = 0; k < s->nworkers; k++) {
        sched_worker *w = s->workers[(s->rr + k) % s->nworkers];
        uint64_t cap = w->stats[PROTO_STAT_CAPACITY] ? w->stats[PROTO_STAT_CAPACITY] : w->capacity;
        if (cap < size || sched__worker_paused(w))
            continue;
        uint64_t after = w->stats[PROTO_STAT_USED] + w->reserved + size;
        double fill = (double)after / (double)cap;
        /* A same-host store is preferred only while the put keeps it under its own spill
         * threshold (--spill-threshold, reported in every heartbeat as bytes): beyond it, the
         * put would push other objects to disk while another store has room. */
        uint64_t spill_at = w->stats[PROTO_STAT_SPILL_AT]
                                ? w->stats[PROTO_STAT_SPILL_AT]
                                : (uint64_t)((double)cap * SCHED_SPILL_THRESHOLD_UNKNOWN);
        bool local = host_id[0] != '\0' && strcmp(host_id, w->host_id) == 0 && after <= spill_at;
        if (best == NULL || (local && !best_local) ||
            (local == best_local && fill < best_fill)) {
            best_local = local;
            best = w;
            best_fill = fill;
        }
    }
    if (best == NULL) {
        /* Every worker is paused: still place it, on the largest store, and let back-pressure
         * at the worker hold the upload. */
        for (uint32_t k = 0; k < s->nworkers; k++)
            if (s->workers[k]->capacity >= size && !s->workers[k]->drain &&
                (best == NULL || s->workers[k]->capacity > best->capacity))
                best = s->workers[k];
    }
    s->rr++;
    return best;
}

/* Where chunk i of a chunked object goes: round robin over the stores that can hold it, from
 * a start the object's id picks, so that its chunks spread evenly; a paused worker only when
 * every one is. */
static sched_worker *place_chunk(sched *s, const sched_obj *parent, uint32_t i, uint64_t size)
{
    sched_worker *fallback = NULL;
    uint64_t start = spw_id_hash(parent->id) + i;
    for (uint32_t k = 0; k < s->nworkers; k++) {
        sched_worker *w = s->workers[(start + k) % s->nworkers];
        uint64_t cap = w->stats[PROTO_STAT_CAPACITY] ? w->stats[PROTO_STAT_CAPACITY] : w->capacity;
        if (cap < size || w->drain)
            continue;
        if (!w->stats[PROTO_STAT_PAUSED])
            return w;
        if (fallback == NULL)
            fallback = w;
    }
    return fallback;
}

/* PUT_PLACE of chunk 1 + i of a chunked object this session is putting: checked against its
 * parent, which holds it, and placed by place_chunk. NULL after answering an error. */
static sched_obj *chunk_new(sched *s, sched_session *ss, const proto_msg *m, sched_worker **wp)
{
    char hex[33];
    spw_id id = m->f[F_PUTP_ID].id;
    uint64_t size = m->f[F_PUTP_SIZE].u;
    uint32_t idx = spw_id_output_index(id);
    sched_obj *p = sched__obj_find(s, spw_id_output_task(id));
    if (p == NULL || !p->chunked || p->state != OBJ_PENDING || p->origin->owner != ss->id ||
        idx == 0 || idx > p->chunks.n || size != sched__chunk_bytes(p, idx - 1)) {
        proto_conn_error(ss->conn, m->req, SPW_EINVAL,
                         "obj=%s is no chunk of %llu bytes of a chunked object this client puts",
                         spw_id_hex(id, hex), (unsigned long long)size);
        return NULL;
    }
    if (sched__obj_find(s, id) != NULL) {
        proto_conn_error(ss->conn, m->req, SPW_EDUPLICATE, "obj=%s already exists",
                         spw_id_hex(id, hex));
        return NULL;
    }
    sched_worker *w = place_chunk(s, p, idx - 1, size);
    if (w == NULL) {
        proto_conn_error(ss->conn, m->req, s->nworkers ? SPW_ETOOBIG : SPW_ENOWORKER,
                         "no worker for a chunk of %llu bytes", (unsigned long long)size);
        return NULL;
    }
    sched_obj *o = sched__obj_new(s, id, ss, p->origin->site, p->origin->len);
    o->size = size;
    sched__obj_set_put_worker(s, o, w->id);
    o->is_chunk = 1;
    sched__jnl_put(s, o);
    w->reserved += size;
    *wp = w;
    return o;
}

void sched__put_target_send(sched_session *ss, uint64_t req, spw_id id, const sched_worker *w,
                            uint64_t exists, uint64_t chunk, bool omit_chunk)
{
    proto_loc_rec to = w != NULL ? sched__loc_rec(w) : (proto_loc_rec){0};
    proto_send_put_target(ss->conn, req,
                          &(proto_put_target_msg){.id = id,
                                                  .worker = to.worker,
                                                  .addr = to.addr,
                                                  .host_id = to.host_id,
                                                  .local = to.local,
                                                  .exists = exists,
                                                  .chunk = chunk,
                                                  .omit_chunk = omit_chunk});
}

static void put_place(sched *s, sched_session *ss, const proto_msg *m)
{
    char hex[33];
    spw_id id = m->f[F_PUTP_ID].id;
    uint64_t size = m->f[F_PUTP_SIZE].u;
    uint64_t flags = m->f[F_PUTP_FLAGS].u;
    if (spw_id_is_nil(id) || size == 0) {
        proto_conn_error(ss->conn, m->req, SPW_EINVAL, "put needs a non-nil id and a size > 0");
        return;
    }
    if (flags & PROTO_PUT_CHUNK) {
        sched_worker *w;
        if (chunk_new(s, ss, m, &w) != NULL)
            sched__put_target_send(ss, m->req, id, w, 0, 0, true);
        return;
    }
    uint64_t chunk = 0;
    if ((flags & PROTO_PUT_MAY_CHUNK) && sched__obj_find(s, id) == NULL &&
        spw_id_output_index(id) == 0) {
        uint64_t chunk_max = m->f[F_PUTP_CHUNK_MAX].nil ? 0 : m->f[F_PUTP_CHUNK_MAX].u;
        chunk = sched__chunk_size(s, size, chunk_max);
    }
    if (chunk != 0) {
        /* A chunked object: held by this session, pending until every chunk is sealed. */
        char site[PROTO_MAX_NAME + 1];
        proto_str(&m->f[F_PUTP_SITE], site, sizeof site);
        sched_obj *p = sched__obj_new(s, id, ss, site, strlen(site));
        p->size = size;
        p->chunked = 1;
        p->chunks.shift = (uint8_t)__builtin_ctzll(chunk);
        p->chunks.n = (uint16_t)((size + chunk - 1) / chunk);
        p->chunks.ready = 0;
        sched__jnl_put(s, p);
        sched__session_ref(s, ss, p, REF_CLIENT);
        sched__put_target_send(ss, m->req, id, NULL, 0, chunk, false);
        return;
    }
    bool may_chunk = (flags & PROTO_PUT_MAY_CHUNK) != 0;
    sched_obj *o = sched__obj_find(s, id);
    sched_worker *w = NULL;
    uint64_t exists = 0;
    if (o != NULL) {
        if (!(m->f[F_PUTP_FLAGS].u & PROTO_PUT_CONTENT_ID) || o->size != size ||
            sched__obj_producer(o) != NULL || (o->state != OBJ_READY && o->state != OBJ_PENDING)) {
            proto_conn_error(ss->conn, m->req, SPW_EDUPLICATE, "obj=%s already exists",
                             spw_id_hex(id, hex));
            return;
        }
        /* Same content already stored (or being stored): share it. */
        exists = 1;
        w = o->nlocs > 0 ? sched__worker_by_id(s, o->locs[0])
                         : sched__worker_by_id(s, o->put_worker);
    } else {
        char host_id[128] = "";
        if (!m->f[F_PUTP_HOSTID].nil)
            proto_str(&m->f[F_PUTP_HOSTID], host_id, sizeof host_id);
        w = place_put(s, size, host_id);
        if (w == NULL) {
            proto_conn_error(ss->conn, m->req, s->nworkers ? SPW_ETOOBIG : SPW_ENOWORKER,
                             s->nworkers ? "no worker has a store of %llu bytes"
                                         : "no worker connected (object of %llu bytes)",
                             (unsigned long long)size);
            return;
        }
        char site[PROTO_MAX_NAME + 1];
        proto_str(&m->f[F_PUTP_SITE], site, sizeof site);
        o = sched__obj_new(s, id, ss, site, strlen(site));
        o->size = size;
        sched__obj_set_put_worker(s, o, w->id);
        w->reserved += size;
        sched__jnl_put(s, o);
    }
    sched__session_ref(s, ss, o, REF_CLIENT);
    sched__put_target_send(ss, m->req, id, w, exists, 0, !may_chunk);
}

static void locate(sched *s, sched_session *ss, const proto_msg *m)
{
    char hex[33];
    sched_obj *o = sched__obj_find(s, m->f[F_LOCATE_ID].id);
    if (o == NULL || o->husk) {
        proto_conn_error(ss->conn, m->req, SPW_ENOOBJ, "obj=%s unknown",
                         spw_id_hex(m->f[F_LOCATE_ID].id, hex));
        return;
    }
    if (o->state != OBJ_PENDING) {
        sched__locate_reply(s, ss, m->req, o);
        return;
    }
    sched_waiter *w = spw_calloc(SPW_MOD_SCHED, 1, sizeof *w);
    w->sess = ss;
    w->req = m->req;
    w->obj = o;
    uint64_t ms = m->f[F_LOCATE_TIMEOUT_MS].u;
    if (ms > 365ULL * 24 * 3600 * 1000)
        ms = 365ULL * 24 * 3600 * 1000;
    w->deadline_ns = spw_now_ns() + ms * 1000000ULL;
    sched__waiter_add(s, w);
    DL_APPEND2(ss->waiters, w, sprev, snext);
    ss->nwaiters++; /* at SCHED_WAITERS_MAX its reads are held (sched__session_flow) */
}

static void release(sched *s, sched_session *ss, const proto_msg *m)
{
    const proto_val *ids = &m->f[F_RELEASE_IDS];
    uint32_t bad = 0;
    spw_id first_bad = {0, 0};
    for (uint32_t i = 0; i < ids->arr.n; i++) {
        sched__objs_prefetch(s, ids, -1, i);
        int rc = sched__session_release(s, ss, ids->arr.v[i].id);
        if (rc != 0 && bad++ == 0)
            first_bad = ids->arr.v[i].id;
    }
    if (bad > 0) {
        char hex[33];
        proto_conn_error(ss->conn, m->req, SPW_ENOTHELD,
                         "release of %u id(s) not held by this client (double release or unknown "
                         "id), first obj=%s; nothing changed for them",
                         bad, spw_id_hex(first_bad, hex));
    }
}

void sched__session_flow(sched *s, sched_session *ss)
{
    (void)s;
    proto_conn *c = ss->conn;
    if (c == NULL || proto_conn_is_closing(c))
        return;
    bool full = ss->nwaiters >= SCHED_WAITERS_MAX;
    if (proto_conn_writable(c) && ss->memqs == 0 && !full) {
        proto_conn_resume(c);
        return;
    }
    proto_conn_pause(c);
    /* Logged once per session: a slow reader of a large listing may be held many times. */
    if (!ss->held_logged && !proto_conn_writable(c)) {
        ss->held_logged = true;
        spw_log(SPW_LOG_NOTICE,
                "session=%llu %s pid=%u host=%s does not read its answers (%zu bytes queued): "
                "its requests wait until they drain",
                (unsigned long long)ss->id, proto_role_name(ss->role), ss->pid, ss->host,
                proto_conn_queued(c));
    }
    if (!ss->waiters_logged && full) {
        ss->waiters_logged = true;
        spw_log(SPW_LOG_NOTICE,
                "session=%llu %s pid=%u host=%s has %u LOCATE requests waiting for objects: its "
                "requests wait until one is answered",
                (unsigned long long)ss->id, proto_role_name(ss->role), ss->pid, ss->host,
                ss->nwaiters);
    }
}

static void session_msg(sched *s, sched_session *ss, const proto_msg *m)
{
    bool ctl = ss->role == PROTO_ROLE_CTL;
    switch (m->type) {
    case PROTO_STATUS_REQ:
        sched__status(s, ss->conn, m->req);
        return;
    case PROTO_MEMORY_REQ:
        sched__memory_req(s, ss, m);
        return;
    case PROTO_GRAPHS_REQ:
        sched__graphs_req(s, ss, m);
        return;
    case PROTO_PLUGINS_REQ:
        sched__plugins_req(s, ss, m);
        return;
    case PROTO_DRAIN:
        if (ctl) {
            sched__drain(s, NULL, ss, m);
            return;
        }
        break;
    case PROTO_PLUGIN_ADD:
        if (!ctl) {
            sched__plugin_add(s, ss, m);
            return;
        }
        break;
    case PROTO_PLUGIN_RELEASE:
        if (!ctl) {
            sched__plugin_release(s, ss, m);
            return;
        }
        break;
    case PROTO_BROADCAST:
        if (!ctl) {
            sched__broadcast(s, ss, m);
            return;
        }
        break;
    case PROTO_PUT_PLACE:
        if (!ctl) {
            put_place(s, ss, m);
            return;
        }
        break;
    case PROTO_LOCATE:
        if (!ctl) {
            locate(s, ss, m);
            return;
        }
        break;
    case PROTO_RELEASE:
        if (!ctl) {
            release(s, ss, m);
            return;
        }
        break;
    case PROTO_SUBMIT:
        if (!ctl) {
            sched__submit(s, ss, m);
            return;
        }
        break;
    case PROTO_BYE:
        ss->resumable = false; /* the client closes: its session ends with its connection */
        return;
    default:
        break;
    }
    proto_conn_error(ss->conn, m->req, SPW_EPROTO, "%s is not valid from a %s",
                     proto_type_name(m->type), proto_role_name(ss->role));
}

/* ------------------------------------------------------------- connections */

static sched *sched_of(proto_conn *c)
{
    return proto_ctx_data(proto_conn_ctx(c));
}

static int on_hello(proto_conn *c, const proto_msg *hello, proto_welcome *wel, char *err,
                    size_t errlen)
{
    sched *s = sched_of(c);
    int role = (int)hello->f[F_HELLO_ROLE].u;
    conn_tag *tag = spw_calloc(SPW_MOD_SCHED, 1, sizeof *tag);
    if (role == PROTO_ROLE_WORKER) {
        uint64_t id = ++s->next_session;
        sched__jnl_session_id(s, id);
        wel->session = id;
        if (hello->f[F_HELLO_WORKER].nil) {
            spw_free(tag);
            snprintf(err, errlen, "a worker must describe itself in HELLO");
            return SPW_EPROTO;
        }
        const proto_val *wi = PROTO_REC(&hello->f[F_HELLO_WORKER], 0);
        if (wi[R_WINFO_SLOTS].u == 0 || wi[R_WINFO_SLOTS].u > PROTO_MAX_SLOTS) {
            spw_free(tag);
            snprintf(err, errlen, "worker slots must be 1..%u", PROTO_MAX_SLOTS);
            return SPW_EINVAL;
        }
        sched_worker *w = spw_calloc(SPW_MOD_SCHED, 1, sizeof *w);
        w->id = (uint32_t)id;
        w->conn = c;
        w->objs = SPW_IDMAP_INIT(sched_obj, id, SPW_MOD_SCHED);
        proto_str(&wi[R_WINFO_ADDR], w->addr, sizeof w->addr);
        proto_str(&hello->f[F_HELLO_NAME], w->name, sizeof w->name);
        proto_str(&wi[R_WINFO_HOSTID], w->host_id, sizeof w->host_id);
        proto_str(&wi[R_WINFO_LOCAL], w->local, sizeof w->local);
        w->slots = (uint32_t)wi[R_WINFO_SLOTS].u;
        w->capacity = wi[R_WINFO_CAPACITY].u;
        w->stats[PROTO_STAT_CAPACITY] = w->capacity;
        w->last_hb_ns = spw_now_ns();
        sched__workers_add(s, w);
        tag->kind = 1;
        tag->w = w;
        spw_log(SPW_LOG_NOTICE, "worker=%u addr=%s slots=%u capacity=%llu joined", w->id, w->addr,
                w->slots, (unsigned long long)w->capacity);
        sched__kick(s);
    } else if (role == PROTO_ROLE_CLIENT || role == PROTO_ROLE_CTL) {
        tag->kind = 2;
        tag->s = sched__session_hello(s, c, hello, role, wel);
    } else {
        spw_free(tag);
        snprintf(err, errlen, "role %s cannot talk to the scheduler", proto_role_name(role));
        return SPW_EPROTO;
    }
    proto_conn_set_data(c, tag);
    return 0;
}

static void on_msg(proto_conn *c, const proto_msg *m)
{
    conn_tag *tag = proto_conn_data(c);
    sched *s = sched_of(c);
    if (tag->kind == 1) {
        worker_msg(s, tag->w, m);
    } else if (tag->kind == 2) {
        tag->s->nrecv++;
        sched__jnl_nrecv(s, tag->s);
        if (!sched__session_replay(s, tag->s, m))
            session_msg(s, tag->s, m);
        /* The next request is read only if this one's answer can go out (pausing here stops
         * the delivery of those already read, too). */
        sched__session_flow(s, tag->s);
    }
    sched__check(s);
}

static void on_drain(proto_conn *c)
{
    conn_tag *tag = proto_conn_data(c);
    if (tag == NULL || tag->kind != 2)
        return; /* workers' connections are never held */
    sched *s = sched_of(c);
    sched__memory_session_drained(s, tag->s);
    sched__session_flow(s, tag->s);
}

static void on_close(proto_conn *c, int status)
{
    sched *s = sched_of(c);
    conn_tag *tag = proto_conn_data(c);
    if (tag == NULL)
        return; /* closed before HELLO completed */
    if (tag->kind == 1) {
        worker_remove(s, tag->w, status);
    } else if (tag->kind == 2) {
        sched__session_closed(s, tag->s, status);
    }
    spw_free(tag);
    sched__check(s);
}

/* ------------------------------------------------------------------- timer */

static void timer_cb(uv_timer_t *t)
{
    sched *s = t->data;
    if (s->objects.n == 0)
        sched__recs_trim(s); /* idle: the slabs' spare chunks go (not per object: a client
                              * running one task at a time would map a chunk per task) */
    sched__memory_tick(s);
    sched__journal_tick(s);
    sched__kick(s); /* tasks waiting for a named worker are timed out by dispatch */
    uint64_t now = spw_now_ns();
    uint64_t hb_ns = (uint64_t)s->opts.heartbeat_timeout_ms * 1000000ULL;
    for (uint32_t i = 0; i < s->nworkers; i++) {
        sched_worker *w = s->workers[i];
        if (now - w->last_hb_ns > hb_ns && !proto_conn_is_closing(w->conn)) {
            spw_log(SPW_LOG_WARN, "worker=%u silent for %u ms: dropping it", w->id,
                    s->opts.heartbeat_timeout_ms);
            proto_conn_close(w->conn, SPW_ETIMEDOUT);
        }
    }
    sched__sessions_tick(s);
    sched_session *ss, *tmp;
    HASH_ITER(hh, s->sessions, ss, tmp)
    {
        sched_waiter *w, *wtmp;
        DL_FOREACH_SAFE2(ss->waiters, w, wtmp, snext)
        {
            if (now >= w->deadline_ns) {
                char hex[33];
                proto_conn_error(ss->conn, w->req, SPW_ETIMEDOUT, "obj=%s not ready in time",
                                 spw_id_hex(w->obj->id, hex));
                sched__waiter_free(s, w);
            }
        }
    }
    sched__check(s);
}

/* --------------------------------------------------------------- lifecycle */

static const proto_conn_cbs conn_cbs = {
    .on_hello = on_hello,
    .on_msg = on_msg,
    .on_close = on_close,
    .on_drain = on_drain,
};

int sched_new(uv_loop_t *loop, const sched_opts *o, sched **out, char *bound, size_t boundlen)
{
    sched *s = spw_calloc(SPW_MOD_SCHED, 1, sizeof *s);
    s->objects = SPW_IDMAP_INIT(sched_obj, id, SPW_MOD_SCHED);
    s->loop = loop;
    s->opts = *o;
    s->opts.listen = NULL;
    s->start_ms = spw_wall_ms();
    proto_ctx_opts po;
    proto_ctx_opts_default(&po);
    po.role = PROTO_ROLE_SCHEDULER;
    po.name = "spillway-scheduler";
    po.secret = o->secret;
    po.secret_len = o->secret_len;
    po.encrypt = o->encrypt;
    po.encrypt_local = o->encrypt_local;
    po.tls_cert = o->tls_cert;
    po.tls_key = o->tls_key;
    po.tls_ca = o->tls_ca;
    po.limits.max_frame = o->max_frame;
    po.inline_limit = o->inline_limit;
    po.chunk = o->chunk;
    po.max_conns = o->max_conns;
    po.reserved_conns = o->max_conns > 0 ? proto_reserved_conns(o->max_conns) : 0;
    int rc = proto_ctx_new(loop, &po, &s->ctx);
    if (rc != 0) {
        spw_free(s);
        return rc;
    }
    uv_idle_init(loop, &s->kick);
    s->kick.data = s;
    uv_timer_init(loop, &s->timer);
    s->timer.data = s;
    s->handles = 2;
    proto_ctx_set_data(s->ctx, s);
    if (o->state_dir != NULL && (rc = sched__journal_open(s, o->state_dir)) != 0) {
        sched_close(s, NULL, NULL);
        return rc;
    }
    rc = proto_listen(s->ctx, o->listen, &conn_cbs, NULL, NULL, s->listen, sizeof s->listen);
    if (rc != 0) {
        spw_log(SPW_LOG_ERR, "cannot listen on %s: %s", o->listen, spw_strerror(rc));
        sched_close(s, NULL, NULL);
        return rc;
    }
    sched__local_listen(s, &conn_cbs);
    uv_timer_start(&s->timer, timer_cb, TIMER_MS, TIMER_MS);
    snprintf(bound, boundlen, "%s", s->listen);
    *out = s;
    return 0;
}

void sched__maybe_done(sched *s)
{
    if (s->handles > 0 || s->ctx != NULL)
        return;
    void (*done)(void *) = s->done;
    void *arg = s->done_arg;
    /* Sessions with no connection (restored, not resumed) did not go with the connections. */
    sched__sessions_detached_free(s);
    sched_fn *f, *ftmp;
    HASH_ITER(hh, s->fns, f, ftmp)
    {
        HASH_DEL(s->fns, f);
        spw_free(f->name);
        spw_free(f);
    }
    sched__plugins_free_all(s);
    sched__objects_purge(s);
    sched__recs_trim(s);
    sched__workers_free(s);
    sched__graphs_free_all(s);
    sched__hosts_free(s);
    sched__journal_free(s);
    spw_free(s->workers);
    spw_free(s);
    if (done != NULL)
        done(arg);
}

static void handle_closed(uv_handle_t *h)
{
    sched *s = h->data;
    s->handles--;
    sched__maybe_done(s);
}

static void ctx_closed(void *arg)
{
    sched *s = arg;
    s->ctx = NULL;
    sched__maybe_done(s);
}

void sched_close(sched *s, void (*done)(void *arg), void *arg)
{
    if (s->closing)
        return;
    s->closing = true;
    s->done = done;
    s->done_arg = arg;
    uv_close((uv_handle_t *)&s->kick, handle_closed);
    uv_close((uv_handle_t *)&s->timer, handle_closed);
    sched__journal_close(s, handle_closed);
    sched__memory_free_all(s);
    sched__push_free_all(s); /* first: the moves' copies end with the broadcasts, unanswered */
    sched__broadcast_free_all(s);
    sched__sessions_detached_free(s); /* the others go as their connections close */
    proto_ctx_close(s->ctx, ctx_closed, s);
}
