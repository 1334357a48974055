/*
 * The worker's lifecycle: plugins, store, executors, peer port, the scheduler connection, and
 * the timer that sends heartbeats and keeps the store under its thresholds.
 *
 * Owns: the store, the executor pool, the proto_ctx (the scheduler connection, peer
 * connections and executor sockets all live in it) and its own timer. Everything runs on the
 * loop thread. Shutdown order: stop executors (their exit callbacks), close every connection,
 * wait for the store's threadpool jobs, free the store, then report done.
 */
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "worker_int.h"

void wrk_opts_default(wrk_opts *o)
{
    memset(o, 0, sizeof *o);
    o->scheduler = "127.0.0.1:7400";
    o->listen = "127.0.0.1:0";
    o->name = NULL;
    o->slots = (uint32_t)uv_available_parallelism();
    ost_opts_default(&o->store);
    o->heartbeat_ms = 1000;
    o->reconnect_max_ms = 30000;
    o->fetch_stall_ms = 30000;
    o->max_frame = PROTO_DEFAULT_MAX_FRAME;
    o->local_group = -1;
    o->plugin_cache_max = 1ull << 30;
    o->plugin_max_size = PROTO_PLUGIN_MAX_SIZE_DEFAULT;
    o->allow_plugin_upload = true;
}

/* ------------------------------------------------------------- heartbeat */

/* The worker's figures, indexed by PROTO_STAT_*: heartbeats and object listings carry them. */
static void worker_stats(wrk *w, uint64_t v[PROTO_STAT_COUNT])
{
    ost_stats st;
    ost_stats_get(w->store, &st);
    memset(v, 0, sizeof(uint64_t) * PROTO_STAT_COUNT);
    v[PROTO_STAT_CAPACITY] = st.capacity;
    v[PROTO_STAT_USED] = st.used;
    v[PROTO_STAT_PINNED] = st.pinned;
    v[PROTO_STAT_OBJS_MEM] = st.objs_mem;
    v[PROTO_STAT_OBJS_DISK] = st.objs_disk;
    v[PROTO_STAT_SPILLED_RAW] = st.spilled_raw;
    v[PROTO_STAT_SPILLED_STORED] = st.spilled_stored;
    v[PROTO_STAT_SPILL_COUNT] = st.spill_count;
    v[PROTO_STAT_SPILL_BYTES] = st.spill_bytes;
    v[PROTO_STAT_SPILL_NS] = st.spill_ns;
    v[PROTO_STAT_RESTORE_COUNT] = st.restore_count;
    v[PROTO_STAT_RESTORE_BYTES] = st.restore_bytes;
    v[PROTO_STAT_RESTORE_NS] = st.restore_ns;
    v[PROTO_STAT_PAUSED] = w->was_paused;
    v[PROTO_STAT_RUNNING] = w->running;
    v[PROTO_STAT_TASKS_DONE] = w->tasks_done;
    v[PROTO_STAT_TASKS_FAILED] = w->tasks_failed;
    v[PROTO_STAT_EXEC_RESTARTS] = w->exec_restarts;
    /* Private and shared memory, not the LMDB file's pages (page cache the kernel may drop). */
    int64_t anon = spw_proc_status_kib((int)getpid(), "RssAnon");
    int64_t shm = spw_proc_status_kib((int)getpid(), "RssShmem");
    v[PROTO_STAT_RSS_KIB] = (anon > 0 ? (uint64_t)anon : 0) + (shm > 0 ? (uint64_t)shm : 0);
    v[PROTO_STAT_PEAK_USED] = st.peak_used;
    v[PROTO_STAT_SPILL_ENTRIES] = st.spill_entries;
    v[PROTO_STAT_EVICTIONS] = st.evictions;
    v[PROTO_STAT_SPILL_AT] = (uint64_t)((double)st.capacity * w->opts.store.spill_threshold);
    v[PROTO_STAT_PAUSE_AT] = (uint64_t)((double)st.capacity * w->opts.store.pause_threshold);
    v[PROTO_STAT_TASK_MEM_LIMIT] = w->opts.task_mem_limit;
    v[PROTO_STAT_NODE_BUDGET] =
        w->opts.task_mem_limit != 0
            ? st.capacity + (uint64_t)w->nexec * w->opts.task_mem_limit + WRK_NODE_MARGIN
            : 0;
    v[PROTO_STAT_EXEC_RECYCLES] = w->exec_recycles;
    v[PROTO_STAT_TASKS_CANCELLED] = w->tasks_cancelled;
    v[PROTO_STAT_FETCHED_BYTES] = w->fetched_bytes;
    v[PROTO_STAT_SPILLING_BYTES] = st.spilling_bytes;
    v[PROTO_STAT_DISK_READ_BYTES] = st.disk_read_bytes;
    v[PROTO_STAT_SPILLS] = w->opts.store.spill_dir != NULL;
}

void wrk__sched_obj_added(wrk *w, spw_id id, uint64_t size)
{
    if (w->sched == NULL)
        return;
    proto_send_obj_added(w->sched, 0, &(proto_obj_added_msg){.id = id, .size = size});
}

static void send_heartbeat(wrk *w)
{
    if (w->sched == NULL || !w->welcomed)
        return;
    uint64_t v[PROTO_STAT_COUNT];
    worker_stats(w, v);
    proto_send_heartbeat(w->sched, 0, &(proto_heartbeat_msg){.stats = {v, PROTO_STAT_COUNT}});
}

/* Records of one OBJ_LIST frame at most. A store's list goes in frames small enough that
 * decoding one holds the scheduler's loop only briefly: one frame for a whole large store would
 * hold it for time in proportion to the store's objects, and a list past --max-frame could not
 * be sent at all. */
#define OLIST_BATCH 4096

/* A list being sent for spillway-ctl memory: the records of the frame being filled. */
typedef struct olist {
    wrk *w;
    uint64_t req;
    bool held; /* an OBJS_HELD report, not an OBJ_LIST */
    spw_buf recs;
    proto_enc e; /* raw: records only, into recs */
    uint32_t n;
    size_t budget; /* bytes of records that end a frame: half the scheduler's max frame */
    int rc;        /* the first send that failed */
} olist;

/* Sends the frame filled so far; the last (more false) carries the store's figures. */
static void olist_send(olist *l, bool more)
{
    uint64_t v[PROTO_STAT_COUNT];
    if (!more && !l->held)
        worker_stats(l->w, v);
    int rc;
    if (l->held)
        rc = proto_send_objs_held(l->w->sched, l->req,
                                  &(proto_objs_held_msg){.objs = {.n = l->n, .pre = &l->recs},
                                                         .more = more ? 1 : 0});
    else
        rc = proto_send_obj_list(l->w->sched, l->req,
                                 &(proto_obj_list_msg){.objs = {.n = l->n, .pre = &l->recs},
                                                       .stats = {v, more ? 0 : PROTO_STAT_COUNT},
                                                       .more = more ? 1 : 0});
    if (l->rc == 0)
        l->rc = rc;
    spw_buf_reset(&l->recs);
    proto_enc_raw(&l->e, &l->recs);
    l->n = 0;
}

static void olist_put(void *arg, const ost_obj *o)
{
    olist *l = arg;
    if (l->held && ost_obj_state(o) != OST_SEALED)
        return; /* being written: not from before the scheduler was lost */
    proto_put_olobj_rec(&l->e, &(proto_olobj_rec){.id = ost_obj_id(o),
                                                  .size = ost_obj_size(o),
                                                  .where = ost_obj_where(o),
                                                  .stored = ost_obj_stored_size(o),
                                                  .pins = ost_obj_pins(o)});
    if (++l->n == OLIST_BATCH || l->recs.len >= l->budget)
        olist_send(l, true);
}

/* Every object in the store with where it is and who pins it, for spillway-ctl memory, in
 * frames of OLIST_BATCH records at most; the last says more = 0. */
static void send_obj_list(wrk *w, uint64_t req)
{
    olist l = {.w = w, .req = req, .budget = proto_conn_welcome(w->sched)->max_frame / 2};
    proto_enc_raw(&l.e, &l.recs);
    ost_store_foreach(w->store, olist_put, &l);
    olist_send(&l, false);
    spw_buf_release(&l.recs);
    if (l.rc != 0)
        proto_conn_error(w->sched, req, SPW_ELIMIT, "object list: a frame was refused");
}

/* Checks the store's level; a change of the paused state is reported at once. A store whose
 * spill storage is full is not reported paused: nothing but releases would un-pause it, so tasks
 * keep coming and those that need room fail after --alloc-wait with SPW_ESPILLFULL rather than
 * wait at the scheduler forever. */
void wrk__mem_check(wrk *w)
{
    ost_store_maintain(w->store);
    bool paused = ost_mem_state(w->store, NULL) == OST_LEVEL_PAUSE &&
                  ost_store_full_reason(w->store)[0] == '\0';
    if (paused != w->was_paused) {
        w->was_paused = paused;
        send_heartbeat(w);
    }
}

/* A spill finished: a paused worker may resume now rather than at the next tick. */
static void store_freed(void *arg)
{
    wrk *w = arg;
    if (!w->closing) {
        wrk__mem_check(w);
        wrk__pres_recheck(w);
    }
}

/* Memory came back inside one of our own store calls (a task freed, an upload aborted): the
 * allocations waiting for room are served from the loop, never in the middle of the call whose
 * state their callbacks (dispatching tasks) would see half changed. */
static void room_idle_cb(uv_idle_t *h)
{
    wrk *w = h->data;
    uv_idle_stop(h);
    if (!w->closing)
        ost_store_maintain(w->store);
}

static void store_room(void *arg)
{
    wrk *w = arg;
    if (!w->closing)
        uv_idle_start(&w->room_idle, room_idle_cb);
}

void wrk_reload(wrk *w)
{
    if (w->closing)
        return;
    spw_log(SPW_LOG_NOTICE, "told to reload: reading every --plugin file again");
    wrk__plugins_reload(w);
}

static void held_drop(wrk *w, const char *why);
static void held_report(wrk *w);

static void timer_cb(uv_timer_t *t)
{
    wrk *w = t->data;
    wrk__parked_expire(w);
    wrk__peers_check(w);
    wrk__uploads_check(w);
    wrk__mem_check(w);
    wrk__pres_recheck(w);
    wrk__exec_maintain(w);
    wrk__plugins_watch(w);
    wrk__plugins_report(w, false);
    wrk__host_check(w);
    if (w->held_deadline_ms != 0 && spw_now_ns() / 1000000 >= w->held_deadline_ms)
        held_drop(w, "no scheduler claimed them in time");
    /* Freed arena pages back to the kernel once a tick passed without an allocation (while a job
     * allocates, freed pages are about to be written again: punching them would only make the
     * next output fault in zeroed pages); and when that found something to give back (a job's
     * data went), the heap's free pages too: glibc keeps freed chunk buffers of transfers. */
    ost_stats st;
    ost_stats_get(w->store, &st);
    bool quiet = st.allocs == w->trim_allocs;
    w->trim_allocs = st.allocs;
    if (quiet && ost_store_trim(w->store) > 0)
        spw_heap_trim();
    send_heartbeat(w);
    wrk__check(w);
}

/* ----------------------------------------------------- scheduler connection */

#define RECONNECT_FIRST_MS 100


static void sched_ready(proto_conn *c, const proto_welcome *wel)
{
    wrk *w = proto_ctx_data(proto_conn_ctx(c));
    w->welcomed = true;
    w->backoff_ms = RECONNECT_FIRST_MS;
    w->inline_limit = wel->inline_limit;
    w->chunk = wel->chunk;
    spw_log(SPW_LOG_NOTICE, "%s scheduler=%s as worker=%llu peer=%s slots=%u",
            w->registered_once ? "registered again with" : "registered with", w->sched_addr,
            (unsigned long long)wel->session, w->hello.addr, w->nexec);
    send_heartbeat(w);
    wrk__plugins_report(w, true);
    held_report(w);
    if (!w->registered_once) {
        w->registered_once = true;
        /* Ready means the scheduler can plan with this worker: its first report (what its
         * store is, whether it spills) leaves before anyone hears it, not at the end of this
         * loop iteration, after a client told of it may have submitted. */
        proto_conn_flush(c);
        if (w->ready != NULL)
            w->ready(w->ready_arg, 0);
    }
}

/* Objects collected for deletion (deleting while walking the store's table is not allowed). */
typedef struct idlist {
    spw_id *ids;
    size_t n, cap;
} idlist;

static void idlist_add(void *arg, const ost_obj *o)
{
    idlist *l = arg;
    if (ost_obj_state(o) != OST_SEALED)
        return; /* being written: its writer (an upload, a fetch, a task) drops it */
    if (l->n == l->cap) {
        l->cap = l->cap ? l->cap * 2 : 64;
        l->ids = spw_realloc(SPW_MOD_WORKER, l->ids, l->cap * sizeof *l->ids);
    }
    l->ids[l->n++] = ost_obj_id(o);
}

/* The objects kept for a scheduler that did not claim them go (a pinned one at its last unpin). */
static void held_drop(wrk *w, const char *why)
{
    size_t n = 0;
    for (size_t i = 0; i < w->nheld; i++)
        if (ost_obj_delete(w->store, w->held[i]) == 0)
            n++;
    if (n > 0)
        spw_log(SPW_LOG_NOTICE, "dropped %zu objects held from before the scheduler was lost: %s",
                n, why);
    spw_free(w->held);
    w->held = NULL;
    w->nheld = 0;
    w->held_req = 0;
    w->held_deadline_ms = 0;
    wrk__mem_check(w);
}

/* Registered again with objects kept: tells the scheduler which (OBJS_HELD, in frames of
 * OLIST_BATCH at most). A scheduler that reads a journal claims those it knows and deletes the
 * others; one without a journal deletes them all. Unclaimed after WRK_HELD_CLAIM_MS, they go. */
static void held_report(wrk *w)
{
    if (w->nheld == 0)
        return;
    w->held_req = ++w->next_req;
    w->held_deadline_ms = spw_now_ns() / 1000000 + WRK_HELD_CLAIM_MS;
    olist l = {.w = w,
               .req = w->held_req,
               .held = true,
               .budget = proto_conn_welcome(w->sched)->max_frame / 2};
    proto_enc_raw(&l.e, &l.recs);
    ost_store_foreach(w->store, olist_put, &l);
    olist_send(&l, false);
    spw_buf_release(&l.recs);
    spw_log(SPW_LOG_NOTICE, "reported %zu objects kept from before the scheduler was lost",
            w->nheld);
}

/* The scheduler connection is gone. Work done for it is dropped: queued tasks and fetches stop
 * now; tasks running in executors finish and are dropped with their outputs (the generation
 * tells them apart from the next scheduler's). The sealed objects of the store are kept: a
 * scheduler restarted from its journal still references them, and claims them when this worker
 * reports them (held_report); a scheduler that does not know them has them deleted. */
static void sched_lost(wrk *w)
{
    w->gen++;
    wrk__plugins_drop(w);
    wrk__fetches_drop(w);
    wrk__tasks_drop(w);
    /* The small results kept for late dependents are those of its tasks: the next scheduler may
     * send one of them again, and a dependent must get that run's result, or none. */
    for (uint32_t k = 0; k < WRK_KEPT_N; k++)
        w->kept[k].id = (spw_id){0, 0};
    idlist l = {NULL, 0, 0};
    ost_store_foreach(w->store, idlist_add, &l);
    spw_free(w->held);
    w->held = l.ids;
    w->nheld = l.n;
    w->held_req = 0;
    w->held_deadline_ms = 0; /* runs from the next registration */
    if (l.n > 0)
        spw_log(SPW_LOG_NOTICE, "keeping %zu objects for the scheduler to claim when it is back",
                l.n);
    wrk__mem_check(w);
}

static void sched_connect(wrk *w);

static void reconnect_cb(uv_timer_t *t)
{
    wrk *w = t->data;
    if (!w->closing && w->sched == NULL)
        sched_connect(w);
}

/* Waits backoff_ms (with a little jitter, so a cluster's workers do not all come back in the
 * same millisecond), doubling it up to reconnect_max_ms for the next time. */
static void reconnect_later(wrk *w)
{
    uint64_t delay = w->backoff_ms;
    delay += (uint64_t)(spw_now_ns() % (delay / 5 + 1));
    if (delay > w->opts.reconnect_max_ms)
        delay = w->opts.reconnect_max_ms;
    w->backoff_ms = w->backoff_ms >= w->opts.reconnect_max_ms / 2 ? w->opts.reconnect_max_ms
                                                                  : w->backoff_ms * 2;
    spw_log(SPW_LOG_INFO, "scheduler=%s: next attempt in %llu ms", w->sched_addr,
            (unsigned long long)delay);
    uv_timer_start(&w->reconnect, reconnect_cb, delay, 0);
}

/* The drain ended: status 0 (drained), or why not. Tells the caller once. */
static void drain_end(wrk *w, int status)
{
    void (*done)(void *, int) = w->drain_done;
    if (done == NULL)
        return;
    w->drain_done = NULL;
    w->drain_req = 0;
    uv_timer_stop(&w->drain_timer);
    done(w->drain_arg, status);
}

static void drain_timeout(uv_timer_t *t)
{
    wrk *w = t->data;
    spw_log(SPW_LOG_WARN, "not drained in time: going on without it");
    drain_end(w, SPW_ETIMEDOUT);
}

int wrk_drain(wrk *w, uint32_t timeout_ms, void (*done)(void *arg, int status), void *arg)
{
    if (w->closing || w->drain_done != NULL)
        return SPW_EINVAL;
    if (w->sched == NULL || !w->welcomed)
        return SPW_ECLOSED; /* nobody to hand anything to */
    w->drain_req = ++w->next_req;
    w->drain_done = done;
    w->drain_arg = arg;
    proto_send_drain(w->sched, w->drain_req, &(proto_drain_msg){.worker = 0, .name = ""});
    uv_timer_start(&w->drain_timer, drain_timeout, timeout_ms, 0);
    spw_log(SPW_LOG_NOTICE, "draining: no new tasks; copies only here go to other workers "
            "(at most %u ms)", timeout_ms);
    return 0;
}

static void sched_msg(proto_conn *c, const proto_msg *m)
{
    wrk *w = proto_ctx_data(proto_conn_ctx(c));
    wrk__check(w); /* the state the previous event left */
    switch (m->type) {
    case PROTO_TASK_RUN:
        wrk__task_run(w, m);
        return;
    case PROTO_TASK_RUNS:
        wrk__task_runs(w, m);
        return;
    case PROTO_REPLICATE:
        wrk__replicate(w, m);
        return;
    case PROTO_OBJ_DELETE: {
        const proto_val *ids = &m->f[F_DELETE_IDS];
        for (uint32_t i = 0; i < ids->arr.n; i++) {
            wrk__fetch_cancel(w, ids->arr.v[i].id);
            ost_obj_delete(w->store, ids->arr.v[i].id); /* unknown ids: already gone */
        }
        wrk__dispatch(w);
        return;
    }
    case PROTO_OBJ_LIST_REQ:
        send_obj_list(w, m->req);
        return;
    case PROTO_TASK_CANCEL:
        wrk__task_cancel(w, m);
        return;
    case PROTO_PLUGIN_INFO:
    case PROTO_PLUGIN_CHECK:
        wrk__plugin_msg(w, m);
        return;
    case PROTO_OK:
        if (w->held_req != 0 && m->req == w->held_req) {
            /* Claimed: those the scheduler did not know came as OBJ_DELETE before this. */
            spw_log(SPW_LOG_NOTICE, "the scheduler claimed the objects kept for it");
            spw_free(w->held);
            w->held = NULL;
            w->nheld = 0;
            w->held_req = 0;
            w->held_deadline_ms = 0;
            return;
        }
        if (w->drain_req != 0 && m->req == w->drain_req) {
            spw_log(SPW_LOG_NOTICE, "drained: %llu copies made elsewhere",
                    (unsigned long long)m->f[F_OK_VALUE].u);
            drain_end(w, 0);
        }
        return;
    case PROTO_ERROR: {
        if (w->drain_req != 0 && m->req == w->drain_req) {
            char msg[256];
            spw_log(SPW_LOG_WARN, "the scheduler could not drain us: %s",
                    proto_str(&m->f[F_ERROR_MSG], msg, sizeof msg));
            drain_end(w, (int)m->f[F_ERROR_CODE].i);
            return;
        }
        if (wrk__plugin_error(w, m))
            return;
        if (w->held_req != 0 && m->req == w->held_req) {
            held_drop(w, "the scheduler does not take them");
            return;
        }
        char msg[256];
        spw_log(SPW_LOG_WARN, "scheduler says: %s err=%s",
                proto_str(&m->f[F_ERROR_MSG], msg, sizeof msg),
                spw_err_name((int)m->f[F_ERROR_CODE].i));
        return;
    }
    default:
        proto_conn_error(c, m->req, SPW_EPROTO, "%s is not a scheduler message",
                         proto_type_name(m->type));
    }
}

static void sched_close(proto_conn *c, int status)
{
    wrk *w = proto_ctx_data(proto_conn_ctx(c));
    w->sched = NULL;
    bool was_welcomed = w->welcomed;
    w->welcomed = false;
    if (w->closing)
        return;
    /* A refusal (wrong secret, another protocol) will not change by retrying. */
    bool fatal = w->opts.reconnect_max_ms == 0 || status == SPW_EAUTH || status == SPW_EVERSION;
    spw_log(fatal || was_welcomed ? SPW_LOG_ERR : SPW_LOG_WARN, "scheduler=%s connection %s: %s%s",
            w->sched_addr, was_welcomed ? "lost" : "failed", spw_strerror(status),
            fatal ? "" : " (reconnecting)");
    if (was_welcomed)
        sched_lost(w);
    drain_end(w, SPW_ECLOSED); /* a new scheduler knows nothing of ours */
    if (fatal) {
        if (w->ready != NULL)
            w->ready(w->ready_arg, status != 0 ? status : SPW_ECLOSED);
        return;
    }
    reconnect_later(w);
}

static const proto_conn_cbs sched_cbs = {
    .on_ready = sched_ready,
    .on_msg = sched_msg,
    .on_close = sched_close,
};

static void sched_connect(wrk *w)
{
    int rc = proto_connect(w->ctx, w->sched_addr, &sched_cbs, NULL, &w->sched);
    if (rc != 0) {
        w->sched = NULL;
        spw_log(SPW_LOG_WARN, "scheduler=%s: %s (reconnecting)", w->sched_addr, spw_strerror(rc));
        reconnect_later(w);
    }
}

/* --------------------------------------------------------------- lifecycle */

int wrk_new(uv_loop_t *loop, const wrk_opts *o, void (*ready)(void *arg, int status), void *arg,
            wrk **out, char *bound, size_t boundlen)
{
    if (o->slots == 0 || o->slots > PROTO_MAX_SLOTS || o->nplugins > WRK_MAX_PLUGINS)
        return SPW_EINVAL;
    wrk *w = spw_calloc(SPW_MOD_WORKER, 1, sizeof *w);
    spw_slab_init(&w->task_slab, WRK_TASK_REC, SPW_MOD_WORKER);
    w->loop = loop;
    w->opts = *o;
    w->ready = ready;
    w->ready_arg = arg;
    w->sched_addr = spw_strdup(SPW_MOD_WORKER, o->scheduler);
    w->opts.scheduler = w->sched_addr;
    w->inline_limit = PROTO_DEFAULT_INLINE_LIMIT;
    w->chunk = PROTO_DEFAULT_CHUNK;
    for (uint32_t i = 0; i < o->nplugins; i++) {
        char real[PATH_MAX];
        w->plugin_srcs[i] = spw_strdup(SPW_MOD_WORKER,
                                       realpath(o->plugins[i], real) ? real : o->plugins[i]);
        w->opts.plugins[i] = w->plugin_srcs[i];
    }
    if (o->executor_path != NULL) {
        w->exe = spw_strdup(SPW_MOD_WORKER, o->executor_path);
    } else {
        char self[PATH_MAX];
        ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
        self[n > 0 ? n : 0] = '\0';
        w->exe = spw_strdup(SPW_MOD_WORKER, self);
    }
    spw_host_id(w->host_id, sizeof w->host_id);
    uv_timer_init(loop, &w->timer);
    w->timer.data = w;
    uv_timer_init(loop, &w->reconnect);
    w->reconnect.data = w;
    uv_timer_init(loop, &w->started_timer);
    w->started_timer.data = w;
    uv_timer_init(loop, &w->drain_timer);
    w->drain_timer.data = w;
    uv_idle_init(loop, &w->room_idle);
    w->room_idle.data = w;
    w->backoff_ms = RECONNECT_FIRST_MS;
    w->handles = 5;

    char storename[64];
    snprintf(storename, sizeof storename, "worker-%d", (int)getpid());
    ost_opts so = o->store;
    if (so.name == NULL || strcmp(so.name, "store") == 0)
        so.name = storename;
    so.freed_cb = store_freed;
    so.freed_arg = w;
    so.room_cb = store_room;
    so.room_arg = w;
    int rc = ost_store_new(loop, &so, &w->store);
    if (rc != 0) {
        spw_log(SPW_LOG_ERR, "store of %llu bytes: %s", (unsigned long long)so.capacity,
                spw_strerror(rc));
        goto fail;
    }
    rc = wrk__plugins_init(w); /* the --plugin files, copied and checked (the spill directory
                                  the cache goes under exists now) */
    if (rc != 0)
        goto fail;

    proto_ctx_opts po;
    proto_ctx_opts_default(&po);
    po.role = PROTO_ROLE_WORKER;
    po.name = o->name != NULL ? o->name : "spillway-worker";
    w->name = spw_strdup(SPW_MOD_WORKER, po.name);
    po.secret = o->secret;
    po.secret_len = o->secret_len;
    po.encrypt = o->encrypt;
    po.encrypt_local = o->encrypt_local;
    po.tls_cert = o->tls_cert;
    po.tls_key = o->tls_key;
    po.tls_ca = o->tls_ca;
    po.limits.max_frame = o->max_frame;
    po.worker = &w->hello;
    po.max_conns = o->max_conns;
    po.reserved_conns = o->max_conns > 0 ? proto_reserved_conns(o->max_conns) : 0;
    rc = proto_ctx_new(loop, &po, &w->ctx);
    if (rc != 0)
        goto fail;
    proto_ctx_set_data(w->ctx, w);
    rc = proto_listen(w->ctx, o->listen, &wrk__peer_cbs, NULL, NULL, w->bound, sizeof w->bound);
    if (rc != 0) {
        spw_log(SPW_LOG_ERR, "cannot listen on %s: %s", o->listen, spw_strerror(rc));
        goto fail;
    }
    /* Same-host clients map the arena through this socket. Under systemd it is a file in the
     * unit's RuntimeDirectory, mode 0660 so that members of the service's group may connect
     * (systemd removes it with the directory); otherwise abstract, so nothing to clean up. */
    const char *rtdir = getenv("RUNTIME_DIRECTORY");
    if (rtdir != NULL && rtdir[0] == '/' && strchr(rtdir, ':') == NULL &&
        strlen(rtdir) + sizeof "/local.sock" <= sizeof w->local_name) {
        snprintf(w->local_name, sizeof w->local_name, "%s/local.sock", rtdir);
        unlink(w->local_name); /* left by a worker that was killed */
    } else {
        uint32_t rnd;
        if (getrandom(&rnd, sizeof rnd, 0) != sizeof rnd)
            rnd = (uint32_t)spw_now_ns();
        snprintf(w->local_name, sizeof w->local_name, "@spillway-worker-%d-%08x", (int)getpid(),
                 rnd);
    }
    /* Abstract sockets have no permissions: the listener checks each peer's uid
     * (SO_PEERCRED). The memfd's own mode keeps a peer that was let in from reopening its
     * read-only descriptor read-write through /proc. */
    if (fchmod(ost_store_fd(w->store), 0600) != 0)
        spw_log(SPW_LOG_WARN, "cannot restrict the arena's mode: %s", strerror(errno));
    proto_listener *ll = NULL;
    rc = proto_listen_unix(w->ctx, w->local_name, &wrk__peer_cbs, NULL, &ll);
    if (rc == 0 && w->local_name[0] == '/' && chmod(w->local_name, 0660) != 0)
        spw_log(SPW_LOG_WARN, "local socket %s: chmod: %s", w->local_name, strerror(errno));
    if (rc != 0) {
        spw_log(SPW_LOG_WARN, "no local socket (%s): same-host clients will use TCP",
                spw_strerror(rc));
        w->local_name[0] = '\0';
    } else if (o->local_group >= 0) {
        proto_listener_allow_group(ll, (unsigned)o->local_group);
    } else if (w->local_name[0] == '/') {
        /* The file's mode 0660 already admits our group: the credential check agrees. */
        proto_listener_allow_group(ll, (unsigned)getegid());
    }
    if (o->name == NULL) {
        /* A name that tells workers apart: host and peer port. */
        char host[64] = "", name[128];
        gethostname(host, sizeof host - 1);
        const char *colon = strrchr(w->bound, ':');
        snprintf(name, sizeof name, "%s:%s", host, colon != NULL ? colon + 1 : "?");
        proto_ctx_set_name(w->ctx, name);
        spw_free(w->name);
        w->name = spw_strdup(SPW_MOD_WORKER, name);
    }
    if (o->advertise != NULL) {
        /* Not resolved here: peers look the name up themselves, from where they are. */
        spw_addr ba, aa;
        if (spw_addr_parse(w->bound, -1, &ba) != 0 ||
            (rc = spw_addr_parse(o->advertise, ba.port, &aa)) != 0 || aa.port == 0 ||
            spw_addr_host_is_wildcard(aa.host)) {
            spw_log(SPW_LOG_ERR, "advertise address '%s' is not HOST[:PORT] with a host peers "
                                 "can connect to",
                    o->advertise);
            rc = SPW_EINVAL;
            goto fail;
        }
        spw_addr_join(aa.host, aa.port, w->advert, sizeof w->advert);
        if (strlen(w->advert) >= sizeof ((warg *)0)->locs[0]) {
            /* Task arguments carry holders' addresses in fixed slots of this size. */
            spw_log(SPW_LOG_ERR, "advertise address '%s' is longer than %zu characters",
                    w->advert, sizeof ((warg *)0)->locs[0] - 1);
            rc = SPW_ENAMETOOLONG;
            goto fail;
        }
    }
    w->hello.addr = w->advert[0] != '\0' ? w->advert : w->bound;
    w->hello.slots = o->slots;
    w->hello.capacity = so.capacity;
    w->hello.host_id = w->host_id;
    w->hello.local = w->local_name;

    /* Listed for the other workers of this host, whose default task limits count us. */
    if ((rc = wrk__host_join(w)) != 0)
        spw_log(SPW_LOG_WARN, "cannot list this worker in the host's worker directory: %s "
                "(other workers here do not count it in their task memory limits)",
                spw_strerror(rc));
    w->nexec = o->slots;
    w->execs = spw_calloc(SPW_MOD_WORKER, w->nexec, sizeof *w->execs);
    if (o->task_mem_limit != 0 && wrk__cgroup_setup(w) == 0)
        spw_log(SPW_LOG_NOTICE, "task memory limit %llu bytes per executor: cgroup v2 memory.max "
                                "under %s",
                (unsigned long long)o->task_mem_limit, w->cgroup);
    else if (o->task_mem_limit != 0)
        spw_log(SPW_LOG_INFO, "task memory limit %llu bytes per executor: RLIMIT_DATA (no "
                              "delegated cgroup v2)",
                (unsigned long long)o->task_mem_limit);
    for (uint32_t i = 0; i < w->nexec; i++) {
        w->execs[i].w = w;
        w->execs[i].idx = i;
        rc = wrk__exec_start(w, &w->execs[i]);
        if (rc != 0) {
            spw_log(SPW_LOG_ERR, "cannot start executor %u (%s): %s", i, w->exe, spw_strerror(rc));
            goto fail;
        }
    }
    rc = proto_connect(w->ctx, w->sched_addr, &sched_cbs, NULL, &w->sched);
    if (rc != 0) {
        spw_log(SPW_LOG_ERR, "scheduler address %s: %s", w->sched_addr, spw_strerror(rc));
        goto fail;
    }
    uv_timer_start(&w->timer, timer_cb, o->heartbeat_ms, o->heartbeat_ms);
    snprintf(bound, boundlen, "%s", w->bound);
    *out = w;
    return 0;
fail:
    w->ready = NULL;
    wrk_close(w, NULL, NULL);
    return rc;
}

void wrk__maybe_done(wrk *w)
{
    if (w->handles > 0 || w->ctx != NULL)
        return;
    if (w->store != NULL && ost_store_busy(w->store) > 0)
        return; /* the store's idle callback calls back here */
    void (*done)(void *, int) = w->done;
    void *arg = w->done_arg;
    int status = w->close_status;
    wrk__tasks_free_all(w);
    wrk__host_leave(w);
    ost_store_free(w->store);
    wrk__cgroup_cleanup(w);
    for (uint32_t i = 0; w->execs != NULL && i < w->nexec; i++)
        spw_free(w->execs[i].told);
    spw_free(w->execs);
    wrk__plugins_free(w);
    for (uint32_t i = 0; i < WRK_MAX_PLUGINS; i++)
        spw_free((void *)w->plugin_srcs[i]);
    spw_free(w->exe);
    spw_free(w->name);
    spw_free(w->sched_addr);
    spw_free(w->held);
    spw_free(w);
    if (done != NULL)
        done(arg, status);
}

static void handle_closed(uv_handle_t *h)
{
    wrk *w = h->data;
    w->handles--;
    wrk__maybe_done(w);
}

static void store_idle(void *arg)
{
    wrk__maybe_done(arg);
}

static void ctx_closed(void *arg)
{
    wrk *w = arg;
    w->ctx = NULL;
    wrk__maybe_done(w);
}

static void kill_timer_cb(uv_timer_t *t)
{
    wrk *w = t->data;
    for (uint32_t i = 0; i < w->nexec; i++) {
        wrk_exec *ex = &w->execs[i];
        if (ex->proc_running) {
            spw_log(SPW_LOG_WARN, "executor pid=%d still busy at shutdown: killing it", ex->pid);
            ex->killed = true;
            uv_process_kill(&ex->proc, SIGKILL);
        }
    }
}

void wrk__exec_gone(wrk *w)
{
    for (uint32_t i = 0; i < w->nexec; i++)
        if (w->execs[i].proc_running)
            return;
    if (w->kill_timer_init && !uv_is_closing((uv_handle_t *)&w->kill_timer))
        uv_close((uv_handle_t *)&w->kill_timer, handle_closed);
}

void wrk_close(wrk *w, void (*done)(void *arg, int status), void *arg)
{
    if (w->closing)
        return;
    w->closing = true;
    w->done = done;
    w->done_arg = arg;
    uv_close((uv_handle_t *)&w->timer, handle_closed);
    uv_close((uv_handle_t *)&w->reconnect, handle_closed);
    wrk__started_flush(w);
    uv_close((uv_handle_t *)&w->started_timer, handle_closed);
    uv_close((uv_handle_t *)&w->drain_timer, handle_closed);
    uv_close((uv_handle_t *)&w->room_idle, handle_closed);
    w->drain_req = 0;
    w->drain_done = NULL;
    bool running = false;
    for (uint32_t i = 0; i < w->nexec; i++) {
        wrk_exec *ex = &w->execs[i];
        if (ex->respawn_init && !uv_is_closing((uv_handle_t *)&ex->respawn))
            uv_close((uv_handle_t *)&ex->respawn, wrk__respawn_closed);
        running = running || ex->proc_running;
    }
    /* Executors exit when their socket closes (with the ctx below), through their own clean
     * shutdown; one stuck in a task is killed after a deadline. */
    if (running) {
        uv_timer_init(w->loop, &w->kill_timer);
        w->kill_timer.data = w;
        w->kill_timer_init = true;
        w->handles++;
        uv_timer_start(&w->kill_timer, kill_timer_cb, 5000, 0);
    }
    wrk__parked_expire(w); /* closing: every parked read is answered */
    wrk__peers_close(w);
    if (w->store != NULL)
        ost_store_quiesce(w->store, store_idle, w);
    if (w->ctx != NULL)
        proto_ctx_close(w->ctx, ctx_closed, w);
    else
        wrk__maybe_done(w);
}
