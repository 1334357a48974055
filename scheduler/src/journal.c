/*
 * The scheduler's journal (--state-dir): what it cannot rebuild from its workers, in one LMDB
 * file (STATE_DIR/journal), read back when it starts. scheduler/README.md has the table.
 * Records, by key (first byte the kind): 'N' the session id mark; 'S' a client session; 'P' a
 * put; 'R' a session's counts on an object; 'G' a graph's SUBMIT frame as received; 'T' and 'X'
 * a graph's task outcomes and released outputs of one loop turn. Each value starts with a
 * checksum of key and value. Records go with what they describe, so pages are reused and the
 * file follows what is live, not what ran.
 * Group commit: hooks queue records; at the end of a turn's reads (a check handle) its records
 * go to the writer, a pool thread that writes them in one transaction while the loop goes on,
 * and the answers client connections got that turn wait for that write (proto_ctx_hold):
 * no client hears of what a restart would forget. One write at a time, whole turns each; the
 * file is MDB_NOSYNC, fdatasync'd from the pool at most every JNL_SYNC_MS.
 * Start: the file is checked whole before anything is applied; one that fails is moved aside.
 * Loop thread only, but for the writer (the environment and wops) and the fdatasync.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <lmdb.h>
#include <utlist.h>
#include <xxhash.h>

#include "sched_int.h"

#define JNL_FILE "journal"
#define JNL_MAP_INIT (1ULL << 30) /* grown by doubling when full */
#define JNL_SYNC_MS 5             /* the longest committed records wait for fdatasync */
#define JNL_SESSION_BLOCK 65536   /* session ids are reserved in blocks ('N') */
/* Restored puts no worker reported by then are lost. */
#define JNL_CLAIM_MS 30000
/* Restored sessions nobody resumed by then are dropped (sched__session_restore). */

enum {
    K_GRAPH = 'G', /* + graph + frame number: a SUBMIT frame, as received */
    K_PLUGIN = 'L', /* + its bytes' object id: an uploaded plugin checked READY, its holders */
    K_NEXT = 'N',
    K_PUT = 'P',
    K_REF = 'R',
    K_SESSION = 'S',
    K_DONE = 'T',    /* + graph + number: tasks' outcomes, in the order they finished */
    K_RELEASED = 'X' /* + graph + number: kept outputs their submitter released */
};
/* OP_APPEND: an OP_PUT whose key is likely the largest yet (a graph's frames and outcomes are
 * numbered in order): LMDB appends it without a search when it is. */
enum { OP_PUT, OP_DEL, OP_DEL_PREFIX, OP_APPEND };
enum { PUT_CHUNKED = 1, PUT_IS_CHUNK = 2 };

#define TOKEN_LEN 16
#define KEY_MAX (1 + 8 + 16)

/* The outcomes ('T') or releases ('X') of one graph in the loop turn under way: written as one
 * record per graph and turn, entries of [u32 length][entry], so that a task costs the journal
 * a few dozen bytes copied, not an insert of its own. */
#define JNL_BATCHES 8
typedef struct jbatch {
    uint64_t jgid;
    uint8_t kind;
    spw_buf buf;
} jbatch;

struct sched_jnl {
    MDB_env *env;
    MDB_dbi dbi;
    char path[PATH_MAX];
    uint64_t map_size;
    spw_buf ops; /* queued: [u8 op][u8 klen][u32 vlen][key][value], value = [u32 sum][bytes] */
    uint32_t nops;
    spw_buf wops;        /* the records the writer has, while `writing` */
    bool writing;
    int wrc;             /* the writer's result */
    uv_work_t write_work;
    uint64_t epoch;      /* the records in ops go out as this epoch (output holds are tagged) */
    uint64_t wepoch;     /* the epoch being written */
    bool loading; /* records made while applying the journal are already in it */
    bool failed;  /* a commit failed: logged once, the journal is off */
    uv_check_t commit;
    uv_timer_t sync_timer;
    uv_work_t sync_work;
    bool sync_armed, syncing, sync_due;
    uint64_t session_mark; /* ids below it are reserved by the 'N' record */
    uint64_t *dirty;       /* sessions whose frame counts moved this turn (sched__jnl_nrecv) */
    uint32_t ndirty, capdirty;
    uint64_t next_jgid;    /* the last graph number given (sched_graph.jgid) */
    uint64_t next_done;    /* the last completion number given ('T' keys) */
    uint64_t replay_jgid;  /* while applying: the graph of the frame being replayed */
    spw_id *missing;       /* while applying: tasks replayed with an input that is gone */
    size_t nmissing;
    jbatch batch[JNL_BATCHES];
    uint32_t nbatch;
    spw_id *restored;      /* restored puts waiting for a worker's report */
    size_t nrestored;
    uint64_t claim_until_ms; /* spw_now_ns ms; 0: nothing waits */
};

static uint64_t now_ms(void)
{
    return spw_now_ns() / 1000000;
}

/* A record's checksum: its key's hash seeds its value's. */
static uint32_t jnl_sum(const uint8_t *key, size_t klen, const uint8_t *v, size_t n)
{
    return (uint32_t)XXH3_64bits_withSeed(v, n, XXH3_64bits(key, klen));
}

static void be64(uint8_t *p, uint64_t v)
{
    for (int i = 7; i >= 0; i--, v >>= 8)
        p[i] = (uint8_t)v;
}

static uint64_t rd_be64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = v << 8 | p[i];
    return v;
}

/* ------------------------------------------------------------ queued writes */

static void commit_cb(uv_check_t *h);
static void dirty_flush(sched *s);

/* One more record queued: the first of a turn starts the commit handle. */
static void jnl_arm(sched *s)
{
    if (s->jnl->nops++ == 0)
        uv_check_start(&s->jnl->commit, commit_cb);
}

/* Starts a record: returns where its header is, for jnl_end. */
static size_t jnl_begin(sched_jnl *j, int op, const uint8_t *key, size_t klen)
{
    size_t at = j->ops.len;
    uint8_t hdr[6] = {(uint8_t)op, (uint8_t)klen, 0, 0, 0, 0};
    spw_buf_append(&j->ops, hdr, sizeof hdr);
    spw_buf_append(&j->ops, key, klen);
    if (op == OP_PUT || op == OP_APPEND)
        spw_buf_append(&j->ops, "\0\0\0\0", 4); /* the checksum, set by the writer */
    return at;
}

static void jnl_end(sched *s, size_t at)
{
    sched_jnl *j = s->jnl;
    uint8_t *h = j->ops.data + at;
    size_t klen = h[1];
    if (h[0] == OP_PUT || h[0] == OP_APPEND) {
        uint8_t *v = h + 6 + klen;
        uint32_t vl = (uint32_t)(j->ops.data + j->ops.len - v);
        memcpy(h + 2, &vl, 4);
    }
    jnl_arm(s);
}

/* The open batch's records go to the queue, each under the next number ('T' and 'X' keys). */
static void batches_flush(sched *s)
{
    sched_jnl *j = s->jnl;
    for (uint32_t i = 0; i < j->nbatch; i++) {
        jbatch *b = &j->batch[i];
        uint8_t k[KEY_MAX];
        k[0] = b->kind;
        be64(k + 1, b->jgid);
        be64(k + 9, ++j->next_done);
        size_t at = jnl_begin(j, OP_APPEND, k, 17);
        spw_buf_append(&j->ops, b->buf.data, b->buf.len);
        jnl_end(s, at);
        spw_buf_reset(&b->buf);
    }
    j->nbatch = 0;
}

/* The batch of kind for graph jgid this turn, opened if need be. */
static spw_buf *batch_for(sched *s, int kind, uint64_t jgid)
{
    sched_jnl *j = s->jnl;
    for (uint32_t i = j->nbatch; i-- > 0;)
        if (j->batch[i].jgid == jgid && j->batch[i].kind == kind)
            return &j->batch[i].buf;
    if (j->nbatch == JNL_BATCHES)
        batches_flush(s);
    jbatch *b = &j->batch[j->nbatch++];
    b->jgid = jgid;
    b->kind = (uint8_t)kind;
    jnl_arm(s); /* the turn's commit writes it */
    return &b->buf;
}

/* An entry of a batch: [u32 length] now, set by entry_end. */
static size_t entry_begin(spw_buf *b)
{
    size_t at = b->len;
    spw_buf_append(b, "\0\0\0\0", 4);
    return at;
}

static void entry_end(spw_buf *b, size_t at)
{
    uint32_t n = (uint32_t)(b->len - at - 4);
    memcpy(b->data + at, &n, 4);
}

static void w8(spw_buf *b, uint8_t v)
{
    spw_buf_append(b, &v, 1);
}
static void w32(spw_buf *b, uint32_t v)
{
    spw_buf_append(b, &v, 4);
}
static void w64(spw_buf *b, uint64_t v)
{
    spw_buf_append(b, &v, 8);
}
static void wstr(spw_buf *b, const char *str, size_t n)
{
    w32(b, (uint32_t)n);
    spw_buf_append(b, str, n);
}

/* A record being read: every read is bounds-checked; a short or long record sets bad. */
typedef struct jrd {
    const uint8_t *p;
    size_t n, at;
    bool bad;
} jrd;

static const uint8_t *rd(jrd *r, size_t n)
{
    if (r->bad || r->n - r->at < n) {
        r->bad = true;
        return NULL;
    }
    const uint8_t *p = r->p + r->at;
    r->at += n;
    return p;
}
static uint8_t r8(jrd *r)
{
    const uint8_t *p = rd(r, 1);
    return p != NULL ? *p : 0;
}
/* n bytes into out, which keeps its value when the record is short. */
static void rdn(jrd *r, void *out, size_t n)
{
    const uint8_t *p = rd(r, n);
    if (p != NULL)
        memcpy(out, p, n);
}
static uint32_t r32(jrd *r)
{
    uint32_t v = 0;
    rdn(r, &v, sizeof v);
    return v;
}
static uint64_t r64(jrd *r)
{
    uint64_t v = 0;
    rdn(r, &v, sizeof v);
    return v;
}
/* A string of at most max bytes into out (NUL-terminated). */
static void rstr(jrd *r, char *out, size_t max)
{
    uint32_t n = r32(r);
    if (n > max) {
        r->bad = true;
        n = 0;
    }
    const uint8_t *p = rd(r, n);
    if (p == NULL)
        n = 0;
    memcpy(out, p != NULL ? (const char *)p : "", n);
    out[n] = '\0';
}

/* ------------------------------------------------------------- group commit */

static void map_grow(sched_jnl *j)
{
    j->map_size *= 2;
    int rc = mdb_env_set_mapsize(j->env, j->map_size);
    if (rc != 0)
        spw_log(SPW_LOG_ERR, "journal %s: cannot grow its map to %llu bytes: %s", j->path,
                (unsigned long long)j->map_size, mdb_strerror(rc));
}

/* Deletes every record whose key starts with prefix's bytes. */
static int del_prefix(MDB_txn *txn, MDB_dbi dbi, const MDB_val *prefix)
{
    MDB_cursor *cur;
    int rc = mdb_cursor_open(txn, dbi, &cur);
    if (rc != 0)
        return rc;
    /* After mdb_cursor_del the cursor stands on the next record, which MDB_NEXT returns. */
    MDB_val k = *prefix, v;
    for (rc = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE); rc == 0;
         rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
        if (k.mv_size < prefix->mv_size || memcmp(k.mv_data, prefix->mv_data, prefix->mv_size) != 0)
            break;
        rc = mdb_cursor_del(cur, 0);
        if (rc != 0)
            break;
    }
    mdb_cursor_close(cur);
    return rc == MDB_NOTFOUND ? 0 : rc;
}

/* Sets the checksum of every record in ops (off the loop: commit_ops runs on the writer). */
static void ops_sum(spw_buf *ops)
{
    for (size_t at = 0; at < ops->len;) {
        uint8_t *h = ops->data + at;
        uint32_t vlen;
        memcpy(&vlen, h + 2, 4);
        if (h[0] == OP_PUT || h[0] == OP_APPEND) {
            uint8_t *v = h + 6 + h[1];
            uint32_t sum = jnl_sum(h + 6, h[1], v + 4, vlen - 4);
            memcpy(v, &sum, 4);
            at += 6 + h[1] + vlen;
        } else {
            at += 6 + h[1];
        }
    }
}

static int commit_ops(sched_jnl *j, spw_buf *ops)
{
    ops_sum(ops);
    for (int tries = 0; tries < 8; tries++) {
        MDB_txn *txn;
        int rc = mdb_txn_begin(j->env, NULL, 0, &txn);
        for (size_t at = 0; rc == 0 && at < ops->len;) {
            const uint8_t *h = ops->data + at;
            uint32_t vlen;
            memcpy(&vlen, h + 2, 4);
            MDB_val k = {h[1], (void *)(uintptr_t)(h + 6)};
            if (h[0] == OP_PUT || h[0] == OP_APPEND) {
                MDB_val v = {vlen, (void *)(uintptr_t)(h + 6 + h[1])};
                rc = mdb_put(txn, j->dbi, &k, &v, h[0] == OP_APPEND ? MDB_APPEND : 0);
                if (rc == MDB_KEYEXIST && h[0] == OP_APPEND)
                    rc = mdb_put(txn, j->dbi, &k, &v, 0); /* not the largest after all */
                at += 6 + h[1] + vlen;
            } else if (h[0] == OP_DEL) {
                rc = mdb_del(txn, j->dbi, &k, NULL);
                if (rc == MDB_NOTFOUND)
                    rc = 0;
                at += 6 + h[1];
            } else {
                rc = del_prefix(txn, j->dbi, &k);
                at += 6 + h[1];
            }
        }
        if (rc == 0)
            return mdb_txn_commit(txn);
        mdb_txn_abort(txn);
        if (rc != MDB_MAP_FULL)
            return rc;
        map_grow(j);
    }
    return MDB_MAP_FULL;
}

static void sync_work(uv_work_t *req)
{
    sched *s = req->data;
    mdb_env_sync(s->jnl->env, 1); /* only the file's descriptor: nothing of the scheduler */
}

static void sync_fire(uv_timer_t *t);

/* The fdatasync ended: another is due if commits came meanwhile. While the scheduler closes,
 * the last one is done by sched__journal_free instead. */
static void sync_done(uv_work_t *req, int status)
{
    (void)status;
    sched *s = req->data;
    sched_jnl *j = s->jnl;
    j->syncing = false;
    if (j->sync_due && !s->closing) {
        j->sync_due = false;
        j->sync_armed = true;
        uv_timer_start(&j->sync_timer, sync_fire, JNL_SYNC_MS, 0);
    }
    s->handles--; /* the work counted as a handle: the scheduler is freed after it */
    sched__maybe_done(s);
}

static void sync_fire(uv_timer_t *t)
{
    sched *s = t->data;
    sched_jnl *j = s->jnl;
    j->sync_armed = false;
    if (j->syncing || s->closing) {
        j->sync_due = true;
        return;
    }
    j->syncing = true;
    j->sync_work.data = s;
    s->handles++;
    uv_queue_work(t->loop, &j->sync_work, sync_work, sync_done);
}

/* The writer's results: a failed write turns the journal off (logged once). */
static void write_result(sched *s, int rc)
{
    sched_jnl *j = s->jnl;
    if (rc != 0) {
        j->failed = true;
        spw_log(SPW_LOG_ERR, "journal %s: cannot write: %s; the journal is off until restart",
                j->path, mdb_strerror(rc));
        return;
    }
    if (j->syncing)
        j->sync_due = true;
    else if (!j->sync_armed && !s->closing) {
        j->sync_armed = true;
        uv_timer_start(&j->sync_timer, sync_fire, JNL_SYNC_MS, 0);
    }
}

/* Writes what is queued on the loop thread: while the scheduler closes. */
static void commit_here(sched *s)
{
    sched_jnl *j = s->jnl;
    int rc = j->failed || j->nops == 0 ? 0 : commit_ops(j, &j->ops);
    spw_buf_reset(&j->ops);
    j->nops = 0;
    write_result(s, rc);
}

static void write_work(uv_work_t *req)
{
    sched_jnl *j = ((sched *)req->data)->jnl;
    j->wrc = commit_ops(j, &j->wops);
}

static void write_done(uv_work_t *req, int status)
{
    (void)status;
    sched *s = req->data;
    sched_jnl *j = s->jnl;
    j->writing = false;
    spw_buf_reset(&j->wops);
    write_result(s, j->wrc);
    /* The answers that waited for these records go out. */
    if (s->ctx != NULL)
        proto_ctx_release(s->ctx, j->failed ? UINT64_MAX : j->wepoch);
    if (s->closing)
        commit_here(s); /* the last records, queued before the close */
    s->handles--; /* the write counted as a handle: the scheduler is freed after it */
    sched__maybe_done(s);
}

/* The end of a loop turn's reads: its records go to the writer in one transaction. */
static void commit_cb(uv_check_t *h)
{
    sched *s = h->data;
    sched__journal_commit(s);
}

void sched__journal_commit(sched *s)
{
    sched_jnl *j = s->jnl;
    if (j == NULL)
        return;
    if (j->nbatch > 0)
        batches_flush(s);
    if (j->ndirty > 0)
        dirty_flush(s);
    if (j->failed) {
        spw_buf_reset(&j->ops);
        j->nops = 0;
    }
    if (j->nops == 0 && !j->writing) {
        uv_check_stop(&j->commit);
        return;
    }
    /* This turn's answers wait for the records queued so far: those going out now, those
     * queued behind a write under way, or (none queued) the write under way. */
    uint64_t hold = j->nops > 0 ? j->epoch : j->wepoch;
    if (j->nops > 0 && !j->writing) {
        spw_buf t = j->wops;
        j->wops = j->ops;
        j->ops = t;
        j->nops = 0;
        j->writing = true;
        j->wepoch = j->epoch++;
        j->write_work.data = s;
        s->handles++;
        uv_queue_work(s->loop, &j->write_work, write_work, write_done);
    }
    if (s->ctx != NULL)
        proto_ctx_hold(s->ctx, hold);
}

/* A client's or spillway-ctl's answers wait for the records they depend on (what a status
 * shows is what a restart would find); workers' traffic does not wait. */
void sched__jnl_gate(sched *s, proto_conn *c)
{
    if (s->jnl != NULL)
        proto_conn_set_gated(c, true);
}

/* ------------------------------------------------------------------ records */

static size_t key_session(uint8_t *k, uint64_t sid)
{
    k[0] = K_SESSION;
    be64(k + 1, sid);
    return 9;
}

static size_t key_put(uint8_t *k, spw_id id)
{
    k[0] = K_PUT;
    memcpy(k + 1, &id, sizeof id);
    return 1 + sizeof id;
}

static size_t key_plugin(uint8_t *k, const sched_plugin *p)
{
    spw_id id = proto_plugin_obj_id(p->hash);
    k[0] = K_PLUGIN;
    memcpy(k + 1, &id, sizeof id);
    return 1 + sizeof id;
}

static size_t key_ref(uint8_t *k, uint64_t sid, spw_id id)
{
    k[0] = K_REF;
    be64(k + 1, sid);
    memcpy(k + 9, &id, sizeof id);
    return 9 + sizeof id;
}

/* Whether hooks write: not while the journal is applied (it holds those records already), nor
 * once the scheduler closes (a shutdown ends sessions and frees objects, and none of that is
 * to be forgotten: the next start recovers what was live). */
static bool jnl_on(const sched *s)
{
    return s->jnl != NULL && !s->jnl->loading && !s->jnl->failed && !s->closing;
}

void sched__jnl_session_id(sched *s, uint64_t id)
{
    if (!jnl_on(s) || id < s->jnl->session_mark)
        return;
    sched_jnl *j = s->jnl;
    j->session_mark = id + JNL_SESSION_BLOCK;
    uint8_t k = K_NEXT;
    size_t at = jnl_begin(j, OP_PUT, &k, 1);
    w64(&j->ops, j->session_mark);
    jnl_end(s, at);
}

void sched__jnl_session(sched *s, const sched_session *ss)
{
    if (!jnl_on(s) || ss->role != PROTO_ROLE_CLIENT)
        return;
    sched_jnl *j = s->jnl;
    uint8_t k[KEY_MAX];
    size_t at = jnl_begin(j, OP_PUT, k, key_session(k, ss->id));
    w8(&j->ops, (uint8_t)ss->role);
    w32(&j->ops, ss->pid);
    spw_buf_append(&j->ops, ss->token, TOKEN_LEN);
    wstr(&j->ops, ss->host, strlen(ss->host));
    wstr(&j->ops, ss->name, strlen(ss->name));
    w64(&j->ops, ss->nrecv);
    jnl_end(s, at);
}

/* The count of a client's frames processed goes in the journal with the turn that processed
 * them, so that a restarted scheduler tells a resuming client exactly which of its frames to
 * send again (WELCOME's nrecv): the session's record is written again at the turn's commit. */
void sched__jnl_nrecv(sched *s, sched_session *ss)
{
    if (!jnl_on(s) || ss->role != PROTO_ROLE_CLIENT || !ss->resumable || ss->jnl_dirty)
        return;
    sched_jnl *j = s->jnl;
    ss->jnl_dirty = true;
    if (j->ndirty == j->capdirty) {
        j->capdirty = j->capdirty ? 2 * j->capdirty : 16;
        j->dirty = spw_realloc(SPW_MOD_SCHED, j->dirty, j->capdirty * sizeof *j->dirty);
    }
    j->dirty[j->ndirty++] = ss->id;
    jnl_arm(s);
}

/* Before a turn's commit: the records of the sessions whose counts moved. */
static void dirty_flush(sched *s)
{
    sched_jnl *j = s->jnl;
    for (uint32_t i = 0; i < j->ndirty; i++) {
        sched_session *ss;
        HASH_FIND(hh, s->sessions, &j->dirty[i], sizeof j->dirty[i], ss);
        if (ss == NULL || !ss->jnl_dirty)
            continue;
        ss->jnl_dirty = false;
        sched__jnl_session(s, ss);
    }
    j->ndirty = 0;
}

void sched__jnl_session_gone(sched *s, const sched_session *ss)
{
    if (!jnl_on(s) || ss->role != PROTO_ROLE_CLIENT)
        return;
    uint8_t k[KEY_MAX];
    jnl_end(s, jnl_begin(s->jnl, OP_DEL, k, key_session(k, ss->id)));
    for (const sched_ref *r = ss->refs; r != NULL; r = r->hh.next)
        jnl_end(s, jnl_begin(s->jnl, OP_DEL, k, key_ref(k, ss->id, r->id)));
}

void sched__jnl_ref(sched *s, const sched_session *ss, spw_id id, const uint32_t *count)
{
    if (!jnl_on(s) || ss->role != PROTO_ROLE_CLIENT)
        return;
    uint8_t k[KEY_MAX];
    size_t klen = key_ref(k, ss->id, id);
    if (count[REF_CLIENT] == 0 && count[REF_BROADCAST] == 0) {
        jnl_end(s, jnl_begin(s->jnl, OP_DEL, k, klen));
        return;
    }
    size_t at = jnl_begin(s->jnl, OP_PUT, k, klen);
    w32(&s->jnl->ops, count[REF_CLIENT]);
    w32(&s->jnl->ops, count[REF_BROADCAST]);
    jnl_end(s, at);
}

void sched__jnl_put(sched *s, const sched_obj *o)
{
    if (!jnl_on(s))
        return;
    sched_jnl *j = s->jnl;
    const sched_origin *e = o->origin;
    uint8_t k[KEY_MAX];
    size_t at = jnl_begin(j, OP_PUT, k, key_put(k, o->id));
    w64(&j->ops, e->owner);
    w32(&j->ops, e->pid);
    wstr(&j->ops, e->host, strlen(e->host));
    wstr(&j->ops, e->site, e->len);
    w64(&j->ops, o->size);
    w8(&j->ops, (uint8_t)((o->chunked ? PUT_CHUNKED : 0) | (o->is_chunk ? PUT_IS_CHUNK : 0)));
    w8(&j->ops, o->chunked ? o->chunks.shift : 0);
    w32(&j->ops, o->chunked ? o->chunks.n : 0);
    w8(&j->ops, o->copies_want);
    jnl_end(s, at);
}

/* An uploaded plugin, once READY and whenever its holders change: a restarted scheduler has it
 * READY again (no check: it passed one) before the graphs naming it are replayed. */
void sched__jnl_plugin(sched *s, const sched_plugin *p)
{
    if (!jnl_on(s) || p->state != PROTO_PLUGIN_READY)
        return;
    sched_jnl *j = s->jnl;
    uint8_t k[KEY_MAX];
    size_t at = jnl_begin(j, OP_PUT, k, key_plugin(k, p));
    spw_buf_append(&j->ops, p->hash, PROTO_PLUGIN_HASH_LEN);
    wstr(&j->ops, p->name, strlen(p->name));
    w64(&j->ops, p->size);
    w32(&j->ops, p->nfns);
    w32(&j->ops, p->nholders);
    for (uint32_t i = 0; i < p->nholders; i++) {
        w64(&j->ops, p->holders[i].session);
        w32(&j->ops, p->holders[i].count);
    }
    jnl_end(s, at);
}

void sched__jnl_plugin_gone(sched *s, const sched_plugin *p)
{
    if (!jnl_on(s))
        return;
    uint8_t k[KEY_MAX];
    jnl_end(s, jnl_begin(s->jnl, OP_DEL, k, key_plugin(k, p)));
}

/* 'G', 'T' and 'X' keys: the kind, the graph, then the frame number (4 bytes), the completion
 * number (8) or the object's id. */
static size_t key_graph(uint8_t *k, int kind, uint64_t jgid)
{
    k[0] = (uint8_t)kind;
    be64(k + 1, jgid);
    return 9;
}

void sched__jnl_submit(sched *s, sched_session *ss, sched_graph *g)
{
    sched_jnl *j = s->jnl;
    if (j == NULL)
        return;
    if (j->loading) {
        if (g->jgid == 0)
            g->jgid = j->replay_jgid;
        g->jframes++;
        return;
    }
    size_t len;
    const uint8_t *frame = proto_conn_frame(ss->conn, &len);
    if (!jnl_on(s) || frame == NULL)
        return;
    if (g->jgid == 0)
        g->jgid = ++j->next_jgid;
    uint8_t k[KEY_MAX];
    size_t klen = key_graph(k, K_GRAPH, g->jgid);
    uint32_t no = g->jframes++;
    for (int i = 0; i < 4; i++)
        k[klen + (size_t)i] = (uint8_t)(no >> (24 - 8 * i));
    size_t at = jnl_begin(j, OP_APPEND, k, klen + 4);
    w64(&j->ops, ss->id);
    spw_buf_append(&j->ops, frame, len);
    jnl_end(s, at);
}

void sched__jnl_task_done(sched *s, const sched_task *t)
{
    if (!jnl_on(s) || t->graph == NULL || t->graph->jgid == 0)
        return;
    spw_buf *b = batch_for(s, K_DONE, t->graph->jgid);
    size_t at = entry_begin(b);
    const sched_obj *o = sched__task_out(t);
    spw_buf_append(b, &o->id, sizeof o->id);
    if (t->state == T_FAILED) {
        const sched_failure *f = sched__obj_failure(s, o);
        const char *msg = f != NULL && f->msg != NULL ? f->msg : "";
        w8(b, 1);
        w32(b, (uint32_t)(f != NULL ? f->err : SPW_ETASKFAILED));
        wstr(b, msg, strnlen(msg, PROTO_MAX_STR));
    } else {
        w8(b, 0);
        w32(b, t->nouts);
        for (uint32_t i = 0; i < t->nouts; i++) {
            const sched_obj *oi = sched__task_output(s, t, i);
            bool here = oi == NULL || oi->has_inline || oi->size == 0;
            w64(b, oi != NULL ? oi->size : 0);
            w8(b, here ? 1 : 0);
            if (here) {
                const uint8_t *v = oi != NULL ? sched__obj_inline(oi) : NULL;
                w32(b, v != NULL ? (uint32_t)oi->size : 0);
                if (v != NULL)
                    spw_buf_append(b, v, oi->size);
            }
        }
    }
    entry_end(b, at);
}

void sched__jnl_output_released(sched *s, const sched_obj *o)
{
    if (!jnl_on(s))
        return;
    const sched_task *t = sched__obj_task(s, o);
    if (t == NULL || t->graph == NULL || t->graph->jgid == 0)
        return;
    spw_buf *b = batch_for(s, K_RELEASED, t->graph->jgid);
    size_t at = entry_begin(b);
    w64(b, o->origin->owner);
    spw_buf_append(b, &o->id, sizeof o->id);
    entry_end(b, at);
}

void sched__jnl_graph_gone(sched *s, const sched_graph *g)
{
    if (!jnl_on(s) || g->jgid == 0)
        return;
    /* Its batches of this turn go too (written after this, they would outlive it). */
    sched_jnl *j = s->jnl;
    for (uint32_t i = 0; i < j->nbatch;) {
        if (j->batch[i].jgid != g->jgid) {
            i++;
            continue;
        }
        spw_buf tmp = j->batch[i].buf;
        j->batch[i] = j->batch[--j->nbatch];
        j->batch[j->nbatch].buf = tmp;
        spw_buf_reset(&j->batch[j->nbatch].buf);
    }
    static const int kinds[] = {K_GRAPH, K_DONE, K_RELEASED};
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
        uint8_t k[KEY_MAX];
        jnl_end(s, jnl_begin(s->jnl, OP_DEL_PREFIX, k, key_graph(k, kinds[i], g->jgid)));
    }
}

void sched__jnl_obj_freed(sched *s, const sched_obj *o)
{
    if (!jnl_on(s) || o->has_task || o->is_out)
        return;
    uint8_t k[KEY_MAX];
    jnl_end(s, jnl_begin(s->jnl, OP_DEL, k, key_put(k, o->id)));
}

/* ------------------------------------------------------------- reading it */

/* A record's value checked against its key: its payload, or bad. */
static jrd rec_open(const MDB_val *k, const MDB_val *v)
{
    jrd r = {(const uint8_t *)v->mv_data + 4, v->mv_size >= 4 ? v->mv_size - 4 : 0, 0,
             v->mv_size < 4};
    uint32_t sum;
    if (!r.bad) {
        memcpy(&sum, v->mv_data, 4);
        r.bad = sum != jnl_sum(k->mv_data, k->mv_size, r.p, r.n);
    }
    return r;
}

typedef struct jput {
    uint64_t owner;
    uint32_t pid;
    char host[64];
    char site[PROTO_MAX_NAME + 1];
    uint64_t size;
    uint8_t flags, shift, copies;
    uint32_t nchunks;
} jput;

static bool put_read(jrd *r, jput *p)
{
    p->owner = r64(r);
    p->pid = r32(r);
    rstr(r, p->host, sizeof p->host - 1);
    rstr(r, p->site, sizeof p->site - 1);
    p->size = r64(r);
    p->flags = r8(r);
    p->shift = r8(r);
    p->nchunks = r32(r);
    p->copies = r8(r);
    if ((p->flags & PUT_CHUNKED) &&
        (p->nchunks == 0 || p->nchunks > PROTO_CHUNKS_MAX || p->shift >= 63 ||
         ((uint64_t)p->nchunks - 1) << p->shift >= p->size ||
         (uint64_t)p->nchunks << p->shift < p->size))
        r->bad = true;
    return !r->bad && r->at == r->n && p->size > 0 && p->copies <= SCHED_COPIES_MAX;
}

typedef struct jsess {
    uint8_t role;
    uint32_t pid;
    uint8_t token[TOKEN_LEN];
    char host[64], name[64];
    uint64_t nrecv; /* its client's frames processed */
} jsess;

static bool session_read(jrd *r, jsess *q)
{
    q->role = r8(r);
    q->pid = r32(r);
    const uint8_t *t = rd(r, TOKEN_LEN);
    if (t != NULL)
        memcpy(q->token, t, TOKEN_LEN);
    rstr(r, q->host, sizeof q->host - 1);
    rstr(r, q->name, sizeof q->name - 1);
    q->nrecv = r64(r);
    return !r->bad && r->at == r->n && q->role == PROTO_ROLE_CLIENT;
}

/* A task's outcome ('T'). */
typedef struct jdone {
    spw_id id;
    bool failed;
    int err;
    char msg[PROTO_MAX_STR + 1];
    uint32_t nouts;
    uint64_t sizes[SPW_TASK_OUTPUTS_MAX];
    const uint8_t *values[SPW_TASK_OUTPUTS_MAX]; /* into the record; NULL: in a store */
} jdone;

static bool done_read(jrd *r, jdone *d)
{
    const uint8_t *id = rd(r, sizeof d->id);
    if (id != NULL)
        memcpy(&d->id, id, sizeof d->id);
    d->failed = r8(r) != 0;
    if (d->failed) {
        d->err = (int)r32(r);
        rstr(r, d->msg, PROTO_MAX_STR);
        return !r->bad && r->at == r->n && d->err < 0;
    }
    d->nouts = r32(r);
    if (d->nouts == 0 || d->nouts > SPW_TASK_OUTPUTS_MAX)
        return false;
    for (uint32_t i = 0; i < d->nouts && !r->bad; i++) {
        d->sizes[i] = r64(r);
        d->values[i] = NULL;
        if (r8(r)) {
            uint32_t len = r32(r);
            d->values[i] = rd(r, len);
            if (len != d->sizes[i] || (len > 0 && d->values[i] == NULL))
                r->bad = true;
            if (d->values[i] == NULL)
                d->values[i] = (const uint8_t *)"";
        }
    }
    return !r->bad && r->at == r->n;
}

/* The next entry of a batch record into e; false at its end or on a bad length (r->bad). */
static bool entry_next(jrd *r, jrd *e)
{
    if (r->at == r->n)
        return false;
    uint32_t len = r32(r);
    const uint8_t *p = rd(r, len);
    *e = (jrd){p, p != NULL ? len : 0, 0, p == NULL};
    return p != NULL;
}

static bool entries_check(jrd *r, int kind)
{
    jrd e;
    while (entry_next(r, &e)) {
        jdone d;
        if (kind == K_DONE ? !done_read(&e, &d) : e.n != 8 + sizeof(spw_id))
            return false;
    }
    return !r->bad && r->at == r->n;
}

typedef struct jplug {
    uint8_t hash[PROTO_PLUGIN_HASH_LEN];
    char name[PROTO_MAX_NAME + 1];
    uint64_t size;
    uint32_t nfns, nholders;
    const uint8_t *holders; /* nholders of [u64 session][u32 count] */
} jplug;

static bool plugin_read(jrd *r, jplug *q)
{
    const uint8_t *h = rd(r, PROTO_PLUGIN_HASH_LEN);
    if (h != NULL)
        memcpy(q->hash, h, PROTO_PLUGIN_HASH_LEN);
    rstr(r, q->name, sizeof q->name - 1);
    q->size = r64(r);
    q->nfns = r32(r);
    q->nholders = r32(r);
    q->holders = r->bad || q->nholders > (r->n - r->at) / 12 ? NULL : r->p + r->at;
    if (q->holders == NULL)
        return false;
    r->at += (size_t)q->nholders * 12;
    return !r->bad && r->at == r->n;
}

/* Whether record (k, v) is well formed; why not in why. */
static bool rec_check(const MDB_val *k, const MDB_val *v, char *why, size_t len)
{
    const uint8_t *kp = k->mv_data;
    jrd r = rec_open(k, v);
    if (k->mv_size == 0) {
        snprintf(why, len, "an empty key");
        return false;
    }
    if (r.bad) {
        snprintf(why, len, "a record of kind '%c' fails its checksum", kp[0]);
        return false;
    }
    bool ok;
    switch (kp[0]) {
    case K_NEXT:
        ok = k->mv_size == 1 && r.n == 8;
        break;
    case K_SESSION: {
        jsess q;
        ok = k->mv_size == 9 && session_read(&r, &q);
        break;
    }
    case K_PUT: {
        jput p;
        ok = k->mv_size == 17 && put_read(&r, &p);
        break;
    }
    case K_REF:
        ok = k->mv_size == 25 && r.n == 8;
        break;
    case K_PLUGIN: {
        jplug q;
        ok = k->mv_size == 17 && plugin_read(&r, &q);
        break;
    }
    case K_GRAPH: {
        /* The session, then one whole frame: its length prefix says the rest. */
        const uint8_t *f = r.n >= 8 + PROTO_HDR_LEN ? r.p + 8 : NULL;
        ok = k->mv_size == 13 && f != NULL &&
             ((uint64_t)f[0] << 24 | (uint64_t)f[1] << 16 | (uint64_t)f[2] << 8 | f[3]) ==
                 r.n - 8 - PROTO_HDR_LEN;
        break;
    }
    case K_DONE:
    case K_RELEASED:
        ok = k->mv_size == 17 && entries_check(&r, kp[0]);
        break;
    default:
        ok = false;
    }
    if (!ok)
        snprintf(why, len, "a malformed record of kind 0x%02x", kp[0]);
    return ok;
}

/* Checks the whole file: its pages lie within it and every record is well formed. */
static int journal_check(sched_jnl *j, char *why, size_t len)
{
    MDB_envinfo info;
    MDB_stat st;
    struct stat fs;
    mdb_env_info(j->env, &info);
    mdb_env_stat(j->env, &st);
    if (stat(j->path, &fs) != 0) {
        snprintf(why, len, "cannot stat it: %s", strerror(errno));
        return SPW_EIO;
    }
    if ((uint64_t)(info.me_last_pgno + 1) * st.ms_psize > (uint64_t)fs.st_size) {
        snprintf(why, len, "truncated: %llu bytes, its pages need %llu",
                 (unsigned long long)fs.st_size,
                 (unsigned long long)(info.me_last_pgno + 1) * st.ms_psize);
        return SPW_ECORRUPT;
    }
    MDB_txn *txn;
    MDB_cursor *cur;
    int rc = mdb_txn_begin(j->env, NULL, MDB_RDONLY, &txn);
    if (rc == 0)
        rc = mdb_dbi_open(txn, NULL, 0, &j->dbi);
    if (rc == 0)
        rc = mdb_cursor_open(txn, j->dbi, &cur);
    if (rc != 0) {
        if (txn != NULL)
            mdb_txn_abort(txn);
        snprintf(why, len, "%s", mdb_strerror(rc));
        return SPW_ECORRUPT;
    }
    MDB_val k, v;
    int ret = 0;
    for (rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); rc == 0;
         rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
        if (!rec_check(&k, &v, why, len)) {
            ret = SPW_ECORRUPT;
            break;
        }
    }
    if (ret == 0 && rc != MDB_NOTFOUND) {
        snprintf(why, len, "%s", mdb_strerror(rc));
        ret = SPW_ECORRUPT;
    }
    mdb_cursor_close(cur);
    mdb_txn_abort(txn);
    return ret;
}

/* Calls fn for every record of a kind, in key order. */
static void each(MDB_txn *txn, MDB_dbi dbi, uint8_t kind,
                 void (*fn)(sched *s, const MDB_val *k, jrd *r, void *arg), sched *s, void *arg)
{
    MDB_cursor *cur;
    if (mdb_cursor_open(txn, dbi, &cur) != 0)
        return;
    MDB_val k = {1, &kind}, v;
    for (int rc = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE); rc == 0;
         rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
        if (((const uint8_t *)k.mv_data)[0] != kind)
            break;
        jrd r = rec_open(&k, &v);
        fn(s, &k, &r, arg);
    }
    mdb_cursor_close(cur);
}

static void apply_next(sched *s, const MDB_val *k, jrd *r, void *arg)
{
    (void)k;
    (void)arg;
    s->jnl->session_mark = r64(r);
    if (s->next_session < s->jnl->session_mark)
        s->next_session = s->jnl->session_mark;
}

static void apply_session(sched *s, const MDB_val *k, jrd *r, void *arg)
{
    uint64_t *n = arg;
    jsess q;
    session_read(r, &q);
    uint64_t id = rd_be64((const uint8_t *)k->mv_data + 1);
    if (s->next_session < id)
        s->next_session = id;
    sched_session *ss = sched__session_restore(s, id, q.token, q.role, q.pid, q.host, q.name);
    ss->nrecv = q.nrecv;
    (*n)++;
}

bool sched__journal_replaying(const sched *s)
{
    return s->jnl != NULL && s->jnl->loading;
}

void sched__jnl_missing_input(sched *s, spw_id task)
{
    sched_jnl *j = s->jnl;
    j->missing = spw_realloc(SPW_MOD_SCHED, j->missing, (j->nmissing + 1) * sizeof *j->missing);
    j->missing[j->nmissing++] = task;
}

/* Tasks replayed with an input that is gone and no outcome to finish them: they fail, as the
 * submit of a task naming an unknown object does. */
static void missing_fail(sched *s)
{
    sched_jnl *j = s->jnl;
    for (size_t i = 0; i < j->nmissing; i++) {
        sched_obj *o = sched__obj_find(s, j->missing[i]);
        sched_task *t = o != NULL ? sched__obj_producer(o) : NULL;
        if (t != NULL && (t->state == T_WAITING || t->state == T_READY))
            sched__task_fail(s, t, SPW_ENOOBJ,
                             "an input of this task was released before the scheduler restarted");
    }
    spw_free(j->missing);
    j->missing = NULL;
    j->nmissing = 0;
}

/* An object restored as pending until a worker reports a copy (sched__journal_tick). */
static void restored_add(sched_jnl *j, spw_id id)
{
    j->restored = spw_realloc(SPW_MOD_SCHED, j->restored, (j->nrestored + 1) * sizeof *j->restored);
    j->restored[j->nrestored++] = id;
}

/* Puts: chunked objects and whole ones first (pass 0), then chunks, which need their parent. */
static void apply_put(sched *s, const MDB_val *k, jrd *r, void *arg)
{
    int *pass = arg;
    jput p;
    put_read(r, &p);
    spw_id id;
    memcpy(&id, (const uint8_t *)k->mv_data + 1, sizeof id);
    bool chunk = (p.flags & PUT_IS_CHUNK) != 0;
    if (chunk != (*pass == 1) || sched__obj_find(s, id) != NULL)
        return;
    if (chunk) {
        sched_obj *parent = sched__obj_find(s, spw_id_output_task(id));
        uint32_t idx = spw_id_output_index(id);
        if (parent == NULL || !parent->chunked || idx == 0 || idx > parent->chunks.n ||
            p.size != sched__chunk_bytes(parent, idx - 1))
            return; /* a chunk of nothing known: its worker is told to drop it */
    }
    /* The owner as it was: the origin keeps its id, host and pid, not the session. */
    sched_session owner;
    memset(&owner, 0, sizeof owner);
    owner.id = p.owner;
    owner.pid = p.pid;
    snprintf(owner.host, sizeof owner.host, "%s", p.host);
    sched_obj *o = sched__obj_new(s, id, &owner, p.site, strlen(p.site));
    o->size = p.size;
    o->copies_want = p.copies & SCHED_COPIES_MAX;
    if (p.flags & PUT_CHUNKED) {
        o->chunked = 1;
        o->chunks.shift = p.shift;
        o->chunks.n = (uint16_t)p.nchunks;
        o->chunks.ready = 0;
    } else {
        o->is_chunk = chunk;
        o->home = SCHED_HOME_RESTORED;
    }
    /* Held until the references are applied, last: the replayed tasks that read it finish
     * from their outcomes before that, and their arguments' release must not free it. */
    if (!o->is_chunk)
        o->graph_hold++;
    restored_add(s->jnl, id);
}

static void apply_ref(sched *s, const MDB_val *k, jrd *r, void *arg)
{
    (void)arg;
    const uint8_t *kp = k->mv_data;
    uint64_t sid = rd_be64(kp + 1);
    spw_id id;
    memcpy(&id, kp + 9, sizeof id);
    uint32_t client = r32(r), bcast = r32(r);
    sched_session *ss;
    HASH_FIND(hh, s->sessions, &sid, sizeof sid, ss);
    sched_obj *o = sched__obj_find(s, id);
    if (ss == NULL || o == NULL)
        return;
    for (uint32_t i = 0; i < client; i++)
        sched__session_ref(s, ss, o, REF_CLIENT);
    for (uint32_t i = 0; i < bcast; i++)
        sched__session_ref(s, ss, o, REF_BROADCAST);
}

static void apply_plugin(sched *s, const MDB_val *k, jrd *r, void *arg)
{
    (void)k;
    uint64_t *n = arg;
    jplug q;
    if (!plugin_read(r, &q))
        return;
    sched_plugin *p = sched__plugin_restore(s, q.hash, q.name, q.size, q.nfns);
    if (p == NULL)
        return; /* its bytes were not restored */
    for (uint32_t i = 0; i < q.nholders; i++) {
        const uint8_t *h = q.holders + (size_t)i * 12;
        uint64_t sid;
        uint32_t count;
        memcpy(&sid, h, 8);
        memcpy(&count, h + 8, 4);
        sched_session *ss;
        HASH_FIND(hh, s->sessions, &sid, sizeof sid, ss);
        if (ss != NULL)
            sched__plugin_restore_holder(p, sid, count);
    }
    (*n)++;
}

/* SUBMIT frames, replayed through sched__submit for their sessions (with no connection, so no
 * answer goes anywhere), in the order the graphs began. */
typedef struct replay {
    msgpack_zone zone;
    uint64_t frames, skipped;
} replay;

static void apply_frame(sched *s, const MDB_val *k, jrd *r, void *arg)
{
    replay *rp = arg;
    uint64_t jgid = rd_be64((const uint8_t *)k->mv_data + 1);
    uint64_t sid = r64(r);
    sched_jnl *j = s->jnl;
    if (jgid > j->next_jgid)
        j->next_jgid = jgid;
    sched_session *ss;
    HASH_FIND(hh, s->sessions, &sid, sizeof sid, ss);
    proto_limits lim;
    proto_limits_default(&lim);
    lim.max_frame = UINT32_MAX;
    proto_msg m;
    if (ss == NULL ||
        proto_decode(r->p + r->at, r->n - r->at, &lim, &rp->zone, &m) != (int)(r->n - r->at) ||
        m.type != PROTO_SUBMIT) {
        rp->skipped++;
        msgpack_zone_clear(&rp->zone);
        return;
    }
    j->replay_jgid = jgid;
    sched__submit(s, ss, &m);
    msgpack_zone_clear(&rp->zone);
    rp->frames++;
}

/* Outcomes, in the order the tasks finished: a producer before its consumers. */
static void apply_done(sched *s, const MDB_val *k, jrd *r, void *arg)
{
    uint64_t *ndone = arg;
    sched_jnl *j = s->jnl;
    uint64_t no = rd_be64((const uint8_t *)k->mv_data + 9);
    if (no > j->next_done)
        j->next_done = no;
    jrd e;
    while (entry_next(r, &e)) {
        jdone d;
        done_read(&e, &d);
        sched_obj *o = sched__obj_find(s, d.id);
        sched_task *t = o != NULL ? sched__obj_producer(o) : NULL;
        if (t == NULL || (t->state != T_WAITING && t->state != T_READY))
            continue; /* gone, or already finished: a later outcome of a task run again */
        if (d.failed) {
            sched__task_fail(s, t, d.err, d.msg);
        } else {
            if (d.nouts != t->nouts)
                continue;
            for (uint32_t i = 0; i < d.nouts; i++)
                if (d.values[i] == NULL && d.sizes[i] > 0)
                    restored_add(j, spw_id_output(d.id, i));
            sched__task_restore_done(s, t, d.sizes, d.values);
        }
        (*ndone)++;
    }
}

static void apply_released(sched *s, const MDB_val *k, jrd *r, void *arg)
{
    (void)arg;
    sched_jnl *j = s->jnl;
    uint64_t no = rd_be64((const uint8_t *)k->mv_data + 9);
    if (no > j->next_done)
        j->next_done = no;
    jrd e;
    while (entry_next(r, &e)) {
        uint64_t sid = r64(&e);
        spw_id id = {0, 0};
        rdn(&e, &id, sizeof id);
        sched_session *ss;
        HASH_FIND(hh, s->sessions, &sid, sizeof sid, ss);
        sched_obj *o = sched__obj_find(s, id);
        if (ss != NULL && o != NULL && o->kept && o->origin->owner == sid)
            sched__session_release(s, ss, id);
    }
}

/* Restored objects nothing references go (their records too: jnl_on again by then). */
static void drop_unreferenced(sched *s)
{
    sched_jnl *j = s->jnl;
    for (size_t i = 0; i < j->nrestored; i++) {
        sched_obj *o = sched__obj_find(s, j->restored[i]);
        if (o == NULL || o->is_chunk)
            continue;
        if (!o->has_task && !o->is_out)
            o->graph_hold--; /* a put's, from apply_put (task outputs are restored too) */
        sched__obj_maybe_free(s, o);
    }
}

static void journal_apply(sched *s)
{
    sched_jnl *j = s->jnl;
    MDB_txn *txn;
    if (mdb_txn_begin(j->env, NULL, MDB_RDONLY, &txn) != 0)
        return;
    uint64_t t0 = spw_now_ns(), nsess = 0;
    j->loading = true;
    each(txn, j->dbi, K_NEXT, apply_next, s, NULL);
    each(txn, j->dbi, K_SESSION, apply_session, s, &nsess);
    for (int pass = 0; pass < 2; pass++)
        each(txn, j->dbi, K_PUT, apply_put, s, &pass);
    uint64_t nplug = 0;
    each(txn, j->dbi, K_PLUGIN, apply_plugin, s, &nplug);
    replay rp = {.frames = 0};
    msgpack_zone_init(&rp.zone, 4096);
    each(txn, j->dbi, K_GRAPH, apply_frame, s, &rp);
    msgpack_zone_destroy(&rp.zone);
    uint64_t ndone = 0;
    each(txn, j->dbi, K_DONE, apply_done, s, &ndone);
    missing_fail(s);
    each(txn, j->dbi, K_RELEASED, apply_released, s, NULL);
    each(txn, j->dbi, K_REF, apply_ref, s, NULL);
    mdb_txn_abort(txn);
    j->loading = false;
    drop_unreferenced(s);
    sched__plugins_restored(s);
    if (j->nrestored > 0)
        j->claim_until_ms = now_ms() + JNL_CLAIM_MS;
    if (j->session_mark <= s->next_session)
        sched__jnl_session_id(s, s->next_session);
    spw_log(SPW_LOG_NOTICE,
            "journal %s: restored %llu sessions, %llu plugins, %llu SUBMIT frames (%llu "
            "skipped), %llu task outcomes, %llu objects in %.1f ms; workers' reports claim what "
            "is in their stores",
            j->path, (unsigned long long)nsess, (unsigned long long)nplug,
            (unsigned long long)rp.frames,
            (unsigned long long)rp.skipped, (unsigned long long)ndone,
            (unsigned long long)s->objects.n, (double)(spw_now_ns() - t0) / 1e6);
}

/* ------------------------------------------------------------- open, close */

static int env_open(sched_jnl *j)
{
    int rc = mdb_env_create(&j->env);
    if (rc == 0)
        rc = mdb_env_set_mapsize(j->env, j->map_size);
    if (rc == 0)
        rc = mdb_env_open(j->env, j->path, MDB_NOSUBDIR | MDB_NOSYNC | MDB_NOMETASYNC | MDB_NOTLS,
                          0600);
    if (rc != 0 && j->env != NULL) {
        mdb_env_close(j->env);
        j->env = NULL;
    }
    if (rc == 0) {
        /* A file larger than the map asked for: map it whole. */
        MDB_envinfo info;
        mdb_env_info(j->env, &info);
        if (info.me_mapsize > j->map_size)
            j->map_size = info.me_mapsize;
    }
    return rc;
}

/* The file is unusable: it goes aside (journal.corrupt-TIMESTAMP), with its lock file. */
static void move_aside(sched_jnl *j, const char *why)
{
    char aside[PATH_MAX + 64], lock[PATH_MAX + 8];
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    char stamp[32];
    strftime(stamp, sizeof stamp, "%Y%m%dT%H%M%SZ", &tm);
    snprintf(aside, sizeof aside, "%s.corrupt-%s", j->path, stamp);
    snprintf(lock, sizeof lock, "%s-lock", j->path);
    int rc = rename(j->path, aside);
    unlink(lock);
    spw_log(SPW_LOG_ERR,
            "journal %s is unusable (%s): %s; starting with an empty journal, nothing restored",
            j->path, why, rc == 0 ? aside : "could not move it aside, removed it");
    if (rc != 0)
        unlink(j->path);
}

int sched__journal_open(sched *s, const char *dir)
{
    if (mkdir(dir, 0700) != 0 && errno != EEXIST) {
        int err = -errno;
        spw_log(SPW_LOG_ERR, "state-dir %s: cannot create it: %s", dir, strerror(errno));
        return err;
    }
    sched_jnl *j = spw_calloc(SPW_MOD_SCHED, 1, sizeof *j);
    if ((size_t)snprintf(j->path, sizeof j->path, "%s/%s", dir, JNL_FILE) >= sizeof j->path) {
        spw_free(j);
        return SPW_ENAMETOOLONG;
    }
    j->map_size = JNL_MAP_INIT;
    char why[256] = "";
    struct stat fs;
    bool existed = stat(j->path, &fs) == 0;
    int rc = env_open(j);
    if (rc != 0 && existed) {
        snprintf(why, sizeof why, "%s", mdb_strerror(rc));
    } else if (rc == 0 && journal_check(j, why, sizeof why) != 0) {
        mdb_env_close(j->env);
        j->env = NULL;
        rc = SPW_ECORRUPT;
    }
    if (rc != 0 && why[0] != '\0') {
        move_aside(j, why);
        j->map_size = JNL_MAP_INIT;
        rc = env_open(j);
    }
    MDB_txn *txn = NULL;
    if (rc == 0)
        rc = mdb_txn_begin(j->env, NULL, 0, &txn);
    if (rc == 0)
        rc = mdb_dbi_open(txn, NULL, 0, &j->dbi);
    if (rc == 0)
        rc = mdb_txn_commit(txn);
    else if (txn != NULL)
        mdb_txn_abort(txn);
    if (rc != 0) {
        spw_log(SPW_LOG_ERR, "journal %s: cannot open it: %s", j->path, mdb_strerror(rc));
        if (j->env != NULL)
            mdb_env_close(j->env);
        spw_free(j);
        return rc > 0 ? -rc : SPW_EIO;
    }
    s->jnl = j;
    uv_check_init(s->loop, &j->commit);
    j->commit.data = s;
    uv_timer_init(s->loop, &j->sync_timer);
    j->sync_timer.data = s;
    s->handles += 2;
    journal_apply(s);
    return 0;
}

void sched__journal_close(sched *s, uv_close_cb cb)
{
    sched_jnl *j = s->jnl;
    if (j == NULL)
        return;
    if (j->nbatch > 0)
        batches_flush(s);
    if (j->ndirty > 0)
        dirty_flush(s);
    if (!j->writing)
        commit_here(s); /* else write_done does, once the write under way ends */
    uv_close((uv_handle_t *)&j->commit, cb);
    uv_close((uv_handle_t *)&j->sync_timer, cb);
}

void sched__journal_free(sched *s)
{
    sched_jnl *j = s->jnl;
    if (j == NULL)
        return;
    if (!j->failed)
        mdb_env_sync(j->env, 1);
    mdb_env_close(j->env);
    spw_buf_release(&j->ops);
    spw_buf_release(&j->wops);
    for (uint32_t i = 0; i < JNL_BATCHES; i++)
        spw_buf_release(&j->batch[i].buf);
    spw_free(j->restored);
    spw_free(j->dirty);
    spw_free(j);
    s->jnl = NULL;
}

/* --------------------------------------------------------------- recovery */

void sched__journal_tick(sched *s)
{
    sched_jnl *j = s->jnl;
    if (j == NULL)
        return;
    uint64_t now = now_ms();
    if (j->claim_until_ms != 0 && now >= j->claim_until_ms) {
        j->claim_until_ms = 0;
        uint64_t lost = 0;
        for (size_t i = 0; i < j->nrestored; i++) {
            sched_obj *o = sched__obj_find(s, j->restored[i]);
            if (o == NULL || o->home != SCHED_HOME_RESTORED)
                continue;
            o->home = 0;
            if (o->state == OBJ_PENDING && sched__obj_task(s, o) != NULL) {
                /* A task output no worker kept: its task runs again, and what it needs. */
                o->state = OBJ_LOST;
                if (!sched__obj_remake(s, o)) {
                    s->objects_lost++;
                    lost++;
                }
                continue;
            }
            if (o->state != OBJ_PENDING)
                continue;
            o->graph_hold++;
            sched__obj_fail(s, o, SPW_EOBJLOST,
                            "no worker reported a copy after the scheduler restarted");
            o->state = OBJ_LOST;
            o->graph_hold--;
            lost++;
            sched__obj_maybe_free(s, o);
        }
        spw_free(j->restored);
        j->restored = NULL;
        j->nrestored = 0;
        if (lost > 0)
            spw_log(SPW_LOG_WARN, "%llu restored objects lost: no worker reported a copy",
                    (unsigned long long)lost);
    }
}

/* --------------------------------------------------------- workers' reports */

void sched__objs_held(sched *s, sched_worker *w, const proto_msg *m)
{
    const proto_val *recs = &m->f[F_HELD_OBJS];
    spw_id *drop = spw_malloc(SPW_MOD_SCHED, (recs->arr.n ? recs->arr.n : 1) * sizeof *drop);
    uint32_t ndrop = 0, claimed = 0;
    for (uint32_t i = 0; i < recs->arr.n; i++) {
        const proto_val *f = PROTO_REC(recs, i);
        spw_id id = f[R_OLOBJ_ID].id;
        uint64_t size = f[R_OLOBJ_SIZE].u;
        sched_obj *o = sched__obj_find(s, id);
        if (o != NULL && o->home == SCHED_HOME_RESTORED && o->state == OBJ_PENDING &&
            sched__obj_task(s, o) != NULL && o->size == size) {
            /* A task output restored as done: ready again, its consumers may run. */
            o->home = 0;
            sched__obj_add_loc(s, o, w->id);
            sched__obj_ready(s, o);
            claimed++;
            continue;
        }
        /* Known and whole here: a restored put, or a copy of a ready or lost object. */
        bool restored = o != NULL && o->state == OBJ_PENDING && o->home == SCHED_HOME_RESTORED;
        bool known =
            o != NULL && !o->husk && !o->chunked && o->size == size && !o->has_inline &&
            (restored ||
             (o->home != SCHED_HOME_RESTORED &&
              (o->state == OBJ_READY || (o->state == OBJ_LOST && sched__obj_task(s, o) == NULL))));
        if (!known) {
            drop[ndrop++] = id;
            continue;
        }
        if (restored)
            o->home = 0;
        sched__obj_added_id(s, w, m->req, id, size);
        claimed++;
    }
    if (ndrop > 0)
        proto_send_obj_delete(w->conn, 0, &(proto_obj_delete_msg){.ids = {drop, ndrop}});
    spw_free(drop);
    if (claimed > 0 || ndrop > 0)
        spw_log(SPW_LOG_INFO, "worker=%u reported %u kept objects: %u claimed, %u to drop", w->id,
                recs->arr.n, claimed, ndrop);
    if (m->f[F_HELD_MORE].u == 0)
        proto_send_ok(w->conn, m->req, &(proto_ok_msg){.value = 0});
}
