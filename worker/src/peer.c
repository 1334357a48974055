/*
 * Serving objects on the worker's peer port (fetching them from other workers is fetch.c).
 *
 * Peers (clients putting or getting, workers fetching) send OBJ_WRITE chunks, which become a
 * store object sealed at the last chunk, and OBJ_READ requests, answered by OBJ_DATA chunks sent
 * straight from the arena (borrowed buffers, the object pinned until the kernel has them) at the
 * pace the connection drains. A read of an object that is only spilled is read from the spilled
 * copy into a buffer, a piece at a time, and sent from there: restoring it would take store room,
 * spilling others, for bytes that only pass through, and could wait for room that the reader's
 * own worker holds for the very object it asks for (two workers fetching from each other into
 * full stores). An upload that must wait for room pauses its connection: TCP carries the
 * back-pressure to the sender. Reads of an object still arriving (a broadcast chain) follow it
 * as it comes, whether by upload here or by a fetch (fetch.c).
 * Invariant: a wsrv lives until its connection closed and srv->refs (pending allocations and
 * reads with chunks in flight) is 0.
 */
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <utlist.h>

#include "worker_int.h"

/* A broadcast hop forwards in pieces this small, whatever the chunk size: a hop can pass on
 * only what it has received whole, so each hop of a chain lags its upstream by one piece's time
 * on the link. With whole chunks as pieces, a long chain would cost a good part of a transfer
 * more than one hop. */
#define FOLLOW_CHUNK (256u << 10)

/* ================================================================ serving */

static void srv_maybe_free(wsrv *srv)
{
    if (srv->closed && srv->refs == 0)
        spw_free(srv);
}

/* Receiving a chunk straight into its object (proto_conn_cbs.on_sink): the object is pinned
 * until the chunk's message has been handled, so an abort meanwhile cannot free the memory the
 * connection is reading into. */
void *wrk__sink_into(wrk *w, ost_obj **slot, ost_obj *o, uint64_t off)
{
    if (*slot != NULL || ost_obj_pin_writing(w->store, o) != 0)
        return NULL;
    *slot = o;
    return ost_obj_data(o) + off;
}

void wrk__sink_release(wrk *w, ost_obj **slot)
{
    if (*slot != NULL) {
        ost_obj_unpin(w->store, *slot);
        *slot = NULL;
    }
}

static void upload_remove(wsrv *srv, wupload *u, bool abort_obj)
{
    if (u->followers != NULL)
        wrk__followers_fail(&u->followers, SPW_ECLOSED, "the upload stopped");
    HASH_DEL(srv->uploads, u);
    HASH_DELETE(hh_all, srv->w->uploads, u);
    if (abort_obj && u->obj != NULL)
        ost_obj_abort(srv->w->store, u->obj);
    spw_buf_release(&u->pending);
    spw_free(u);
}

/* Writes one chunk into an upload; seals and acknowledges at the last one. */
static void upload_apply(wsrv *srv, wupload *u, uint64_t off, uint64_t flags, const uint8_t *data,
                         size_t len, uint64_t req)
{
    char hex[33];
    wrk *w = srv->w;
    if (u->gen != w->gen) {
        /* Begun under a scheduler that is gone: no reference to it could survive. */
        proto_conn_error(srv->conn, req, SPW_ECLOSED,
                         "obj=%s: the worker lost its scheduler: upload dropped",
                         spw_id_hex(u->id, hex));
        upload_remove(srv, u, true);
        return;
    }
    if (off != u->next_off || len > u->total - off) {
        proto_conn_error(srv->conn, req, SPW_EINVAL,
                         "obj=%s: chunk at %llu+%zu, expected offset %llu of %llu: upload dropped",
                         spw_id_hex(u->id, hex), (unsigned long long)off, len,
                         (unsigned long long)u->next_off, (unsigned long long)u->total);
        upload_remove(srv, u, true);
        return;
    }
    uint8_t *dst = ost_obj_data(u->obj) + off;
    if (len > 0 && data != dst) /* else it was received in place */
        memcpy(dst, data, len);
    u->next_off += len;
    if (!(flags & PROTO_CHUNK_LAST)) {
        if (u->followers != NULL)
            wrk__followers_advance(w, &u->followers, false);
        return;
    }
    if (u->next_off != u->total) {
        proto_conn_error(srv->conn, req, SPW_EINVAL, "obj=%s: last chunk at %llu of %llu bytes",
                         spw_id_hex(u->id, hex), (unsigned long long)u->next_off,
                         (unsigned long long)u->total);
        upload_remove(srv, u, true);
        return;
    }
    ost_obj *o = u->obj;
    u->obj = NULL;
    spw_id id = u->id;
    uint64_t total = u->total;
    ost_obj_seal(w->store, o);
    wrk__followers_advance(w, &u->followers, true);
    upload_remove(srv, u, false);
    wrk__sched_obj_added(w, id, total);
    proto_send_put_done(srv->conn, req, &(proto_put_done_msg){.id = id});
    wrk__mem_check(w);
}

/* Tells the uploader why its object cannot be stored. An id already in the store is the wire's
 * SPW_EDUPLICATE, as at the scheduler; the store's SPW_EEXIST stays inside the worker. */
static void upload_refuse(wsrv *srv, wupload *u, int status)
{
    char hex[33];
    int code = status == SPW_EEXIST ? SPW_EDUPLICATE : status;
    const char *why = code == SPW_ESPILLFULL ? ost_store_full_reason(srv->w->store) : "";
    proto_conn_error(srv->conn, u->req, code, "obj=%s: cannot store %llu bytes: %s%s%s",
                     spw_id_hex(u->id, hex), (unsigned long long)u->total, spw_strerror(code),
                     why[0] ? ": " : "", why);
    upload_remove(srv, u, false);
}

typedef struct upload_req {
    wsrv *srv;
    spw_id id;
} upload_req;

/* OBJ_READs of one connection that may wait for their objects' restores at once: reads are
 * pipelined (a fetching worker asks for several inputs), so one waiting read does not hold the
 * next; past this many the connection is read again only once one is answered, so a peer
 * cannot queue a waiting restore per frame. */
#define READS_WAITING_MAX 64u

/* Reads a peer's requests only while their answers can go out and no upload of its waits for
 * room: a peer that sends OBJ_READs (or anything answered) and never reads the answers would
 * otherwise have them all queued, and a read record and pin each. Held, it costs at most about
 * the output high-water mark; it is read again from its on_drain. Requests and answers only
 * run one way on a peer-port connection (this worker never asks on it), so holding one cannot
 * hold up its peer's reading. */
static void srv_flow(wsrv *srv)
{
    if (srv->closed || proto_conn_is_closing(srv->conn))
        return;
    if (srv->pin_waits > 0 || srv->read_waits >= READS_WAITING_MAX)
        return; /* held for a pin's restore, or for reads' */
    wupload *u, *tmp;
    HASH_ITER(hh, srv->uploads, u, tmp)
    {
        if (u->creating)
            return; /* held until the upload (or local create) has room */
    }
    if (proto_conn_writable(srv->conn)) {
        proto_conn_resume(srv->conn);
        return;
    }
    proto_conn_pause(srv->conn);
    if (!srv->held_logged) {
        srv->held_logged = true; /* a slow reader of large objects is held often */
        spw_log(SPW_LOG_NOTICE,
                "peer=%s does not read its answers (%zu bytes queued): its requests wait until "
                "they drain",
                proto_conn_peer(srv->conn), proto_conn_queued(srv->conn));
    }
}

/* An upload's memory is allocated (or cannot be): one callback for TCP uploads and local
 * creates. Returns the upload once it has its object, NULL when it is gone or refused. */
static wupload *upload_got_memory(upload_req *r, int status, ost_obj *o)
{
    wsrv *srv = r->srv;
    spw_id id = r->id;
    spw_free(r);
    srv->refs--;
    if (srv->closed) {
        if (status == 0)
            ost_obj_abort(srv->w->store, o);
        srv_maybe_free(srv);
        return NULL;
    }
    wupload *u;
    HASH_FIND(hh, srv->uploads, &id, sizeof id, u);
    SPW_ASSERT(u != NULL && u->creating);
    u->creating = false;
    srv_flow(srv); /* the requests held behind the wait for room may come now */
    if (status != 0) {
        upload_refuse(srv, u, status);
        return NULL;
    }
    u->obj = o;
    wrk__unpark(srv->w, id, o);
    return u;
}

static void upload_created(void *arg, int status, ost_obj *o)
{
    wsrv *srv = ((upload_req *)arg)->srv;
    wupload *u = upload_got_memory(arg, status, o);
    if (u == NULL)
        return;
    spw_buf chunk = u->pending;
    u->pending = (spw_buf){0};
    upload_apply(srv, u, 0, u->pending_flags, chunk.data, chunk.len, u->req);
    spw_buf_release(&chunk);
}

static void upload_chunk(wsrv *srv, const proto_msg *m)
{
    char hex[33];
    spw_id id = m->f[F_WRITE_ID].id;
    uint64_t total = m->f[F_WRITE_TOTAL].u;
    uint64_t off = m->f[F_WRITE_OFF].u;
    const proto_val *data = &m->f[F_WRITE_DATA];
    wupload *u;
    HASH_FIND(hh, srv->uploads, &id, sizeof id, u);
    if (u == NULL) {
        if (off != 0 || total == 0 || data->bin.len > total) {
            proto_conn_error(srv->conn, m->req, SPW_EINVAL,
                             "obj=%s: an upload starts at offset 0 with a size > 0",
                             spw_id_hex(id, hex));
            return;
        }
        u = spw_calloc(SPW_MOD_WORKER, 1, sizeof *u);
        u->id = id;
        u->total = total;
        u->req = m->req;
        u->srv = srv;
        u->creating = true;
        u->gen = srv->w->gen;
        u->pending_flags = m->f[F_WRITE_FLAGS].u;
        if (spw_buf_reserve(&u->pending, data->bin.len) != 0) {
            spw_free(u);
            proto_conn_error(srv->conn, m->req, SPW_ENOMEM, "out of memory");
            return;
        }
        spw_buf_append(&u->pending, data->bin.ptr, data->bin.len);
        HASH_ADD(hh, srv->uploads, id, sizeof u->id, u);
        HASH_ADD(hh_all, srv->w->uploads, id, sizeof u->id, u);
        /* No more chunks until there is room for this object. */
        proto_conn_pause(srv->conn);
        upload_req *r = spw_malloc(SPW_MOD_WORKER, sizeof *r);
        *r = (upload_req){srv, id};
        srv->refs++;
        ost_obj_create_async(srv->w->store, id, total, upload_created, r);
        return;
    }
    if (u->creating || total != u->total) {
        proto_conn_error(srv->conn, m->req, SPW_EPROTO, "obj=%s: inconsistent upload",
                         spw_id_hex(id, hex));
        return;
    }
    upload_apply(srv, u, off, m->f[F_WRITE_FLAGS].u, data->bin.ptr, data->bin.len, m->req);
}

static void disk_waits_pump(wrk *w);

/* Gives back rd's buffer of a spilled copy's piece. */
static void disk_buf_free(wread *rd)
{
    rd->srv->w->disk_read_bytes -= rd->hcap;
    rd->srv->disk_bytes -= rd->hcap;
    spw_free(rd->heap);
    rd->heap = NULL;
}

static void read_finish(wread *rd)
{
    wsrv *srv = rd->srv;
    if (rd->flist != NULL)
        DL_DELETE2(*rd->flist, rd, fprev, fnext);
    if (rd->pinned)
        ost_obj_unpin(srv->w->store, rd->obj);
    bool freed = rd->heap != NULL;
    if (freed)
        disk_buf_free(rd);
    if (rd->hcap != 0) /* a read from the spilled copy, which it holds */
        ost_obj_release_spilled(srv->w->store, rd->obj);
    wrk *w = srv->w;
    spw_free(rd);
    srv->refs--;
    srv_maybe_free(srv);
    if (freed)
        disk_waits_pump(w);
}

static void piece_next(wread *rd);

static void chunk_sent(void *arg)
{
    wread *rd = arg;
    rd->outstanding--;
    if (rd->outstanding == 0 && (rd->pos == rd->end || rd->srv->closed))
        read_finish(rd);
    else if (rd->outstanding == 0 && rd->heap != NULL && rd->pos == rd->hend) {
        DL_DELETE(rd->srv->reads, rd); /* back on it once the next piece is in */
        piece_next(rd);
    }
}

static void reads_pump(wsrv *srv)
{
    wrk *w = srv->w;
    wread *rd, *tmp;
    DL_FOREACH_SAFE(srv->reads, rd, tmp)
    {
        uint64_t total = rd->heap != NULL ? rd->total : ost_obj_size(rd->obj);
        const uint8_t *base = rd->heap != NULL ? NULL : ost_obj_data(rd->obj);
        /* A follower sends only what has arrived. Its pin keeps the memory even if the
         * object is aborted; without one (it could not be taken) it sends copies. */
        uint64_t limit = rd->avail != NULL && *rd->avail < rd->end ? *rd->avail : rd->end;
        if (rd->heap != NULL)
            limit = rd->hend; /* the piece in its buffer */
        uint64_t step = rd->chain && FOLLOW_CHUNK < w->chunk ? FOLLOW_CHUNK : w->chunk;
        while (rd->pos < limit && proto_conn_writable(srv->conn)) {
            uint64_t n = limit - rd->pos;
            if (n > step)
                n = step;
            const uint8_t *at = rd->heap != NULL ? rd->heap + (rd->pos - rd->hoff) : base + rd->pos;
            proto_obj_data_msg d = {.id = rd->id,
                                    .total = total,
                                    .off = rd->pos,
                                    .flags = rd->pos + n == rd->end ? PROTO_CHUNK_LAST : 0,
                                    .data = {at, n}};
            if (!rd->pinned && rd->heap == NULL) {
                proto_send_obj_data(srv->conn, rd->req, &d);
                rd->pos += n;
                continue;
            }
            proto_enc e;
            d.data.ptr = NULL; /* only the header: the bytes are borrowed */
            proto_enc_obj_data(&e, proto_conn_out(srv->conn), rd->req, &d);
            rd->outstanding++;
            rd->pos += n;
            proto_conn_send_borrowed(srv->conn, &e, at, n, chunk_sent, rd);
        }
        if (rd->pos == rd->end) {
            DL_DELETE(srv->reads, rd);
            if (rd->outstanding == 0)
                read_finish(rd);
        } else if (rd->heap != NULL && rd->pos == rd->hend && rd->outstanding == 0) {
            DL_DELETE(srv->reads, rd);
            piece_next(rd);
        }
        if (!proto_conn_writable(srv->conn))
            return;
    }
}

/* Readers following an object while it arrives (by fetch or upload): more of it came, or all
 * of it (sealed: then each pins it and goes on with borrowed chunks). */
void wrk__followers_advance(wrk *w, wread **list, bool sealed)
{
    wread *rd, *tmp;
    DL_FOREACH_SAFE2(*list, rd, tmp, fnext)
    {
        wsrv *srv = rd->srv;
        if (sealed) {
            DL_DELETE2(*list, rd, fprev, fnext);
            rd->flist = NULL;
            rd->avail = NULL;
            if (!rd->pinned)
                rd->pinned = ost_obj_pin(w->store, rd->obj) == 0;
        }
        if (!srv->closed)
            reads_pump(srv);
    }
}

/* The object will not arrive after all: its followers get the error and stop. */
void wrk__followers_fail(wread **list, int status, const char *msg)
{
    wread *rd, *tmp;
    DL_FOREACH_SAFE2(*list, rd, tmp, fnext)
    {
        DL_DELETE2(*list, rd, fprev, fnext);
        rd->flist = NULL;
        rd->avail = NULL;
        wsrv *srv = rd->srv;
        /* One that has sent its last byte is off srv->reads already (its chunks may still be
         * queued): its answer is complete. */
        if (!srv->closed && rd->pos != rd->end) {
            proto_conn_error(srv->conn, rd->req, status, "upstream copy failed: %s", msg);
            DL_DELETE(srv->reads, rd);
        }
        rd->pos = rd->end;
        if (rd->outstanding == 0)
            read_finish(rd);
    }
}

/* Where a read of bytes [off, end) of object id, arriving here as o, can follow it as it comes:
 * the followers list to join and the counter of how far it has arrived (in object bytes). A
 * whole read follows the object's gap-free start; a part (only if ranges may be followed: a
 * FOLLOW read), the range of the fetch that brings it (a striped fetch brings several at once;
 * an upload's parts are not followed). Returns false if no one range brings it. */
static bool follow_target(wrk *w, spw_id id, const ost_obj *o, uint64_t off, uint64_t end,
                          bool ranges, wread ***list, const uint64_t **avail)
{
    wfetch *f;
    HASH_FIND(hh, w->fetches, &id, sizeof id, f);
    if (f != NULL && !f->ranged && f->obj != NULL && f->obj == o) {
        if (off == 0 && end == f->size) {
            *list = &f->followers;
            *avail = &f->received;
            return true;
        }
        for (uint32_t k = 0; ranges && k < f->nstripes; k++) {
            if (off >= f->st[k].off && end <= f->st[k].end && off < end) {
                *list = &f->st[k].followers;
                *avail = &f->st[k].upto;
                return true;
            }
        }
        return false;
    }
    wupload *u;
    HASH_FIND(hh_all, w->uploads, &id, sizeof id, u);
    if (u != NULL && u->obj != NULL && u->obj == o && off == 0 && end == u->total) {
        *list = &u->followers;
        *avail = &u->next_off;
        return true;
    }
    return false;
}

/* Makes rd follow an object arriving here (avail counts what has), and sends what it can. */
static void follow(wread *rd, ost_obj *o, wread **list, const uint64_t *avail)
{
    char hex[33];
    spw_log(SPW_LOG_DEBUG, "obj=%s bytes %llu..%llu followed by a peer from byte %llu",
            spw_id_hex(rd->id, hex), (unsigned long long)rd->off, (unsigned long long)rd->end,
            (unsigned long long)*avail);
    rd->obj = o;
    rd->avail = avail;
    rd->pinned = ost_obj_pin_writing(rd->srv->w->store, o) == 0;
    rd->flist = list;
    rd->park_deadline_ns = 0;
    DL_APPEND2(*list, rd, fprev, fnext);
    DL_APPEND(rd->srv->reads, rd);
    reads_pump(rd->srv);
}

/* An object started arriving (a fetch or an upload got its memory): parked FOLLOW reads for
 * it start following. */
void wrk__unpark(wrk *w, spw_id id, ost_obj *o)
{
    wread *rd, *tmp;
    DL_FOREACH_SAFE2(w->parked, rd, tmp, fnext)
    {
        if (!spw_id_eq(rd->id, id))
            continue;
        DL_DELETE2(w->parked, rd, fprev, fnext);
        /* Asked for before its size was known: it follows the whole object, or the range that
         * brings its bytes. */
        wread **list = NULL;
        const uint64_t *avail = NULL;
        bool ok = follow_target(w, id, o, rd->off, rd->end, rd->chain, &list, &avail);
        if (rd->srv->closed || !ok) {
            if (!rd->srv->closed) {
                char hex[33];
                proto_conn_error(rd->srv->conn, rd->req, SPW_EINVAL,
                                 "obj=%s: bytes %llu..%llu do not arrive here as one range of "
                                 "its %llu bytes",
                                 spw_id_hex(id, hex), (unsigned long long)rd->off,
                                 (unsigned long long)rd->end, (unsigned long long)ost_obj_size(o));
            }
            rd->pos = rd->end;
            read_finish(rd);
            continue;
        }
        follow(rd, o, list, avail);
    }
}

void wrk__uploads_check(wrk *w)
{
    if (w->opts.fetch_stall_ms == 0)
        return;
    char hex[33];
    wupload *u, *tmp;
    HASH_ITER(hh_all, w->uploads, u, tmp)
    {
        /* Still waiting for room: the worker paused that connection itself. Local: written in
         * shared memory, nothing travels on the socket. */
        proto_conn *conn = u->srv->conn;
        if (u->creating || u->local || conn == NULL || proto_conn_is_closing(conn) ||
            proto_conn_quiet_ms(conn) < w->opts.fetch_stall_ms)
            continue;
        spw_log(SPW_LOG_WARN,
                "upload of obj=%s from %s: nothing came for %u ms at %llu of %llu bytes: "
                "dropping it",
                spw_id_hex(u->id, hex), proto_conn_peer(conn), w->opts.fetch_stall_ms,
                (unsigned long long)u->next_off, (unsigned long long)u->total);
        proto_conn_close(conn, SPW_ETIMEDOUT); /* peer_close drops its uploads */
    }
}

void wrk__parked_expire(wrk *w)
{
    uint64_t now = spw_now_ns();
    wread *rd, *tmp;
    DL_FOREACH_SAFE2(w->parked, rd, tmp, fnext)
    {
        if (now < rd->park_deadline_ns && !rd->srv->closed && !w->closing)
            continue;
        DL_DELETE2(w->parked, rd, fprev, fnext);
        if (!rd->srv->closed) {
            char hex[33];
            proto_conn_error(rd->srv->conn, rd->req, SPW_ENOOBJ,
                             "obj=%s did not arrive here in time", spw_id_hex(rd->id, hex));
        }
        rd->pos = rd->end;
        read_finish(rd);
    }
}

typedef struct read_req {
    wsrv *srv;
    spw_id id;
    uint64_t req, off, len;
    bool chain;
} read_req;

static void read_got(void *arg, int status, ost_obj *o)
{
    read_req *r = arg;
    wsrv *srv = r->srv;
    if (srv->read_waits-- == READS_WAITING_MAX)
        srv_flow(srv); /* held at the cap: its next requests may come */
    if (srv->closed || status != 0) {
        if (status == 0)
            ost_obj_unpin(srv->w->store, o);
        else if (!srv->closed) {
            char hex[33];
            proto_conn_error(srv->conn, r->req, status, "obj=%s: %s", spw_id_hex(r->id, hex),
                             spw_strerror(status));
        }
        srv->refs--;
        spw_free(r);
        srv_maybe_free(srv);
        return;
    }
    wread *rd = spw_calloc(SPW_MOD_WORKER, 1, sizeof *rd);
    rd->obj = o;
    rd->id = r->id;
    rd->req = r->req;
    rd->off = rd->pos = r->off;
    rd->end = r->off + r->len;
    rd->pinned = true;
    rd->chain = r->chain;
    rd->srv = srv; /* the ref taken for the request now belongs to the read */
    spw_free(r);
    DL_APPEND(srv->reads, rd);
    reads_pump(srv);
}

static void disk_read_done(void *arg, int status, ost_obj *o);

/* Reads the next piece of rd's range from its object's spilled copy into its buffer
 * (disk_read_done). Returns 0, or an error when the read cannot start. */
static int piece_read(wread *rd)
{
    uint64_t n = rd->end - rd->hend < rd->hcap ? rd->end - rd->hend : rd->hcap;
    rd->hoff = rd->hend;
    rd->hend += n; /* not read from until disk_read_done puts rd back on srv->reads */
    return ost_obj_read_spilled(rd->srv->w->store, rd->obj, rd->hoff, n, rd->heap,
                                disk_read_done, rd);
}

/* The bytes of a piece of a read from a spilled copy are in its buffer (or could not be read). */
static void disk_read_done(void *arg, int status, ost_obj *o)
{
    (void)o;
    wread *rd = arg;
    wsrv *srv = rd->srv;
    if (rd->hoff == rd->off && srv->read_waits-- == READS_WAITING_MAX)
        srv_flow(srv); /* the first piece answers the request */
    if (srv->closed || status != 0) {
        if (status != 0 && !srv->closed) {
            char hex[33];
            proto_conn_error(srv->conn, rd->req, status, "obj=%s: %s", spw_id_hex(rd->id, hex),
                             spw_strerror(status));
        }
        read_finish(rd);
        return;
    }
    DL_APPEND(srv->reads, rd);
    reads_pump(srv);
}

/* The last piece was sent and written out: the buffer is free for the next one. */
static void piece_next(wread *rd)
{
    wsrv *srv = rd->srv;
    int rc = srv->closed ? SPW_ESHUTDOWN : piece_read(rd);
    if (rc == 0)
        return;
    if (!srv->closed) {
        /* Its first bytes went out: the peer hears the rest will not come. */
        char hex[33];
        proto_conn_error(srv->conn, rd->req, rc, "obj=%s: %s", spw_id_hex(rd->id, hex),
                         spw_strerror(rc));
    }
    read_finish(rd);
}

/* Gives rd its buffer and reads its first piece; false (the read finished, with an error to
 * the peer) when that cannot start. */
static bool disk_read_begin(wread *rd)
{
    wsrv *srv = rd->srv;
    int rc = SPW_ESHUTDOWN;
    if (!srv->closed) {
        rd->heap = spw_try_malloc(SPW_MOD_WORKER, rd->hcap);
        rc = rd->heap == NULL ? SPW_ENOMEM : 0;
    }
    if (rc == 0) {
        srv->w->disk_read_bytes += rd->hcap;
        srv->disk_bytes += rd->hcap;
        rc = piece_read(rd);
        if (rc != 0)
            disk_buf_free(rd); /* here: read_finish would start the next waiter within this one */
    }
    if (rc == 0)
        return true;
    if (srv->read_waits-- == READS_WAITING_MAX && !srv->closed)
        srv_flow(srv); /* it will not answer through disk_read_done */
    if (!srv->closed) {
        char hex[33];
        proto_conn_error(srv->conn, rd->req, rc, "obj=%s: %s", spw_id_hex(rd->id, hex),
                         spw_strerror(rc));
    }
    read_finish(rd);
    return false;
}

/* Buffer room was freed: the reads waiting for it start, first come first; one whose connection
 * holds its share already lets those behind it by, one that the worker's bound stops stops them
 * too (a large read is not starved by small ones). */
static void disk_waits_pump(wrk *w)
{
    wread *rd, *tmp;
    DL_FOREACH_SAFE2(w->disk_waits, rd, tmp, fnext)
    {
        if (!rd->srv->closed && w->disk_read_bytes + rd->hcap > WRK_DISK_READS_MAX)
            break;
        if (!rd->srv->closed && rd->srv->disk_bytes + rd->hcap > WRK_DISK_READS_MAX / 2)
            continue;
        DL_DELETE2(w->disk_waits, rd, fprev, fnext);
        rd->flist = NULL;
        disk_read_begin(rd); /* frees no buffer of another waiter: tmp stays on the list */
    }
}

/* Reads [off, off + len) of o from its spilled copy, a piece at a time, when o is only spilled:
 * once a buffer fits the worker's bound (WRK_DISK_READ_MAX, WRK_DISK_READS_MAX, half of it per
 * connection), after the reads that waited before it (no restore, so serving a peer never waits
 * for room in the store); false when o is in memory (it is read from there). */
static bool disk_read_start(wsrv *srv, ost_obj *o, uint64_t req, uint64_t off, uint64_t len)
{
    wrk *w = srv->w;
    if (ost_obj_where(o) != OST_ON_DISK)
        return false;
    wread *rd = spw_calloc(SPW_MOD_WORKER, 1, sizeof *rd);
    rd->hcap = len < WRK_DISK_READ_MAX ? len : WRK_DISK_READ_MAX;
    rd->obj = o;
    rd->id = ost_obj_id(o);
    rd->req = req;
    rd->off = rd->pos = rd->hoff = rd->hend = off;
    rd->end = off + len;
    rd->total = ost_obj_size(o);
    rd->srv = srv;
    ost_obj_hold_spilled(w->store, o); /* its copy stays while the read waits or runs */
    srv->refs++;
    srv->read_waits++; /* until its first piece is in (disk_read_done) */
    if (srv->read_waits >= READS_WAITING_MAX)
        proto_conn_pause(srv->conn);
    rd->flist = &w->disk_waits;
    DL_APPEND2(w->disk_waits, rd, fprev, fnext);
    disk_waits_pump(w);
    return true;
}

static void read_start(wsrv *srv, const proto_msg *m)
{
    char hex[33];
    spw_id id = m->f[F_READ_ID].id;
    ost_obj *o = ost_obj_find(srv->w->store, id);
    wrk *w = srv->w;
    uint64_t off = m->f[F_READ_OFF].u, len = m->f[F_READ_LEN].u;
    bool may_wait = !m->f[F_READ_FLAGS].nil && (m->f[F_READ_FLAGS].u & PROTO_READ_FOLLOW);
    if ((o == NULL || ost_obj_state(o) == OST_CREATED) && len > 0 && off + len > off) {
        /* Still arriving here (or about to): forward it as it comes (a broadcast chain, or a
         * tree of one range). */
        wread **list = NULL;
        const uint64_t *avail = NULL;
        bool follows =
            o != NULL && follow_target(w, id, o, off, off + len, may_wait, &list, &avail);
        bool whole = o != NULL && off == 0 && len == ost_obj_size(o);
        if (follows || (may_wait && (o == NULL || whole))) {
            wread *rd = spw_calloc(SPW_MOD_WORKER, 1, sizeof *rd);
            rd->id = id;
            rd->req = m->req;
            rd->off = rd->pos = off;
            rd->end = off + len;
            rd->srv = srv;
            rd->chain = may_wait;
            srv->refs++;
            if (follows) {
                follow(rd, o, list, avail);
            } else {
                spw_log(SPW_LOG_DEBUG, "obj=%s not here yet: read parked", spw_id_hex(id, hex));
                rd->park_deadline_ns = spw_now_ns() + WRK_PARK_MAX_NS;
                DL_APPEND2(w->parked, rd, fprev, fnext);
            }
            return;
        }
        if (o == NULL) {
            proto_conn_error(srv->conn, m->req, SPW_ENOOBJ, "obj=%s is not on this worker yet",
                             spw_id_hex(id, hex));
            return;
        }
    }
    if (o == NULL || ost_obj_state(o) != OST_SEALED) {
        proto_conn_error(srv->conn, m->req, SPW_ENOOBJ, "obj=%s is not on this worker",
                         spw_id_hex(id, hex));
        return;
    }
    uint64_t size = ost_obj_size(o);
    if (off > size || len > size - off || len == 0) {
        proto_conn_error(srv->conn, m->req, SPW_EINVAL,
                         "obj=%s: range %llu+%llu outside %llu bytes", spw_id_hex(id, hex),
                         (unsigned long long)off, (unsigned long long)len,
                         (unsigned long long)size);
        return;
    }
    if (disk_read_start(srv, o, m->req, off, len))
        return;
    read_req *r = spw_malloc(SPW_MOD_WORKER, sizeof *r);
    *r = (read_req){srv, id, m->req, off, len, may_wait};
    srv->refs++;
    srv->read_waits++; /* read_got: at once when the object is in memory */
    ost_obj_get_async(srv->w->store, o, read_got, r);
    if (srv->read_waits >= READS_WAITING_MAX)
        proto_conn_pause(srv->conn);
}

/* ----------------------------------------------------- local zero-copy access */

static void arena_map(wsrv *srv, const proto_msg *m)
{
    wrk *w = srv->w;
    proto_enc e;
    proto_enc_arena(&e, proto_conn_out(srv->conn), m->req,
                    &(proto_arena_msg){.capacity = w->opts.store.capacity});
    /* A client that only reads gets a read-only descriptor of its own (a fresh open of the
     * memfd through /proc: it cannot be mapped writable, and the memfd's mode 0600 stops a
     * --local-group member from reopening it read-write). Only a client that puts gets the
     * read-write one. */
    int fd = ost_store_fd(w->store), rofd = -1, rc = 0;
    if ((m->f[F_AMAP_FLAGS].u & PROTO_ARENA_WRITE) == 0) {
        char path[64];
        snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
        rofd = open(path, O_RDONLY | O_CLOEXEC);
        if (rofd < 0)
            rc = -errno;
        fd = rofd;
    }
    if (rc == 0)
        rc = proto_conn_send_fd(srv->conn, &e, fd);
    else
        proto_conn_out(srv->conn)->len = e.start;
    if (rofd >= 0)
        close(rofd);
    if (rc != 0)
        proto_conn_error(srv->conn, m->req, rc, "cannot pass the arena: %s", spw_strerror(rc));
}

typedef struct pin_req {
    wsrv *srv;
    spw_id id;
    uint64_t req;
} pin_req;

static void pin_got(void *arg, int status, ost_obj *o)
{
    pin_req *r = arg;
    wsrv *srv = r->srv;
    srv->refs--;
    srv->pin_waits--;
    srv_flow(srv); /* the requests held behind the pin may come now */
    if (srv->closed || status != 0) {
        if (status == 0)
            ost_obj_unpin(srv->w->store, o);
        else if (!srv->closed) {
            char hex[33];
            proto_conn_error(srv->conn, r->req, status, "obj=%s: %s", spw_id_hex(r->id, hex),
                             spw_strerror(status));
        }
        spw_free(r);
        srv_maybe_free(srv);
        return;
    }
    wpin *p;
    HASH_FIND(hh, srv->pins, &r->id, sizeof r->id, p);
    if (p == NULL) {
        p = spw_calloc(SPW_MOD_WORKER, 1, sizeof *p);
        p->id = r->id;
        p->obj = o;
        HASH_ADD(hh, srv->pins, id, sizeof p->id, p);
    }
    p->count++;
    proto_send_pinned(
        srv->conn, r->req,
        &(proto_pinned_msg){.id = r->id, .off = ost_obj_offset(o), .size = ost_obj_size(o)});
    spw_free(r);
}

/* Pins one local connection may hold on one object at once. The store counts an object's pins
 * in 32 bits: even --max-connections at its most (1,000,000) connections at this cap stay
 * under 2^32, so the count cannot wrap to 0 (which would let the store spill or free memory
 * that is being read). libspillway pins once per view; past the cap its view is a copy. */
#define LOCAL_PINS_MAX 4096u

static void obj_pin(wsrv *srv, const proto_msg *m)
{
    char hex[33];
    spw_id id = m->f[F_PIN_ID].id;
    ost_obj *o = ost_obj_find(srv->w->store, id);
    if (o == NULL || ost_obj_state(o) != OST_SEALED) {
        proto_conn_error(srv->conn, m->req, SPW_ENOOBJ, "obj=%s is not on this worker",
                         spw_id_hex(id, hex));
        return;
    }
    wpin *p;
    HASH_FIND(hh, srv->pins, &id, sizeof id, p);
    if (p != NULL && p->obj != o) {
        /* Its pins are on an earlier object of this id, deleted since (its memory stays until
         * they go). OBJ_UNPIN names only the id, so pins of two objects under one id could not
         * be told apart: each unpin goes to p->obj. */
        proto_conn_error(srv->conn, m->req, SPW_EPINNED,
                         "obj=%s: an earlier copy of it is still pinned by this connection (%u "
                         "times): unpin that first",
                         spw_id_hex(id, hex), p->count);
        return;
    }
    if (p != NULL && p->count >= LOCAL_PINS_MAX) {
        /* One pin waits at a time (the connection is paused meanwhile): the count is exact. */
        proto_conn_error(srv->conn, m->req, SPW_ELIMIT,
                         "obj=%s: already pinned %u times by this connection",
                         spw_id_hex(id, hex), p->count);
        return;
    }
    /* Nothing more from this client until the pin is answered (a spilled object is restored
     * first): else each OBJ_PIN it sends meanwhile would queue one more waiting restore. */
    proto_conn_pause(srv->conn);
    srv->pin_waits++;
    pin_req *r = spw_malloc(SPW_MOD_WORKER, sizeof *r);
    *r = (pin_req){srv, id, m->req};
    srv->refs++;
    ost_obj_get_async(srv->w->store, o, pin_got, r);
}

static void obj_unpin(wsrv *srv, const proto_msg *m)
{
    char hex[33];
    spw_id id = m->f[F_UNPIN_ID].id;
    wpin *p;
    HASH_FIND(hh, srv->pins, &id, sizeof id, p);
    if (p == NULL) {
        proto_conn_error(srv->conn, m->req, SPW_ENOTHELD, "obj=%s is not pinned by you",
                         spw_id_hex(id, hex));
        return;
    }
    ost_obj_unpin(srv->w->store, p->obj);
    if (--p->count == 0) {
        HASH_DEL(srv->pins, p);
        spw_free(p);
    }
    wrk__mem_check(srv->w);
}

static void local_created(void *arg, int status, ost_obj *o)
{
    wsrv *srv = ((upload_req *)arg)->srv;
    wupload *u = upload_got_memory(arg, status, o);
    if (u == NULL)
        return;
    proto_send_created(srv->conn, u->req,
                       &(proto_created_msg){.id = u->id, .off = ost_obj_offset(o)});
}

static void obj_create(wsrv *srv, const proto_msg *m)
{
    char hex[33];
    spw_id id = m->f[F_CREATE_ID].id;
    uint64_t size = m->f[F_CREATE_SIZE].u;
    wupload *u;
    HASH_FIND(hh, srv->uploads, &id, sizeof id, u);
    if (u != NULL || size == 0) {
        proto_conn_error(srv->conn, m->req, size == 0 ? SPW_EINVAL : SPW_EEXIST,
                         "obj=%s: %s", spw_id_hex(id, hex),
                         size == 0 ? "size must be > 0" : "already being written");
        return;
    }
    u = spw_calloc(SPW_MOD_WORKER, 1, sizeof *u);
    u->id = id;
    u->total = size;
    u->req = m->req;
    u->srv = srv;
    u->creating = true;
    u->local = true;
    u->gen = srv->w->gen;
    HASH_ADD(hh, srv->uploads, id, sizeof u->id, u);
    HASH_ADD(hh_all, srv->w->uploads, id, sizeof u->id, u);
    /* Nothing more from this client until the object has room (as for a TCP upload): else
     * each OBJ_CREATE it sends meanwhile would queue one more waiting allocation. */
    proto_conn_pause(srv->conn);
    upload_req *r = spw_malloc(SPW_MOD_WORKER, sizeof *r);
    *r = (upload_req){srv, id};
    srv->refs++;
    ost_obj_create_async(srv->w->store, id, size, local_created, r);
}

static void obj_seal(wsrv *srv, const proto_msg *m)
{
    char hex[33];
    spw_id id = m->f[F_SEAL_ID].id;
    wupload *u;
    HASH_FIND(hh, srv->uploads, &id, sizeof id, u);
    if (u == NULL || !u->local || u->creating) {
        proto_conn_error(srv->conn, m->req, SPW_ENOOBJ, "obj=%s: nothing of yours to seal",
                         spw_id_hex(id, hex));
        return;
    }
    u->next_off = u->total;
    upload_apply(srv, u, u->total, PROTO_CHUNK_LAST, NULL, 0, m->req);
}

static int peer_hello(proto_conn *c, const proto_msg *hello, proto_welcome *wel, char *err,
                      size_t errlen)
{
    wrk *w = proto_ctx_data(proto_conn_ctx(c));
    int role = (int)hello->f[F_HELLO_ROLE].u;
    if (role != PROTO_ROLE_CLIENT && role != PROTO_ROLE_WORKER && role != PROTO_ROLE_PEER) {
        snprintf(err, errlen, "role %s has no business on a peer port", proto_role_name(role));
        return SPW_EPROTO;
    }
    wsrv *srv = spw_calloc(SPW_MOD_WORKER, 1, sizeof *srv);
    srv->w = w;
    srv->conn = c;
    proto_conn_set_data(c, srv);
    wel->inline_limit = w->inline_limit;
    wel->chunk = w->chunk;
    return 0;
}

static void *peer_sink(proto_conn *c, const proto_msg *head, uint64_t len)
{
    wsrv *srv = proto_conn_data(c);
    if (srv == NULL || head->type != PROTO_OBJ_WRITE)
        return NULL;
    spw_id id = head->f[F_WRITE_ID].id;
    uint64_t off = head->f[F_WRITE_OFF].u;
    wupload *u;
    HASH_FIND(hh, srv->uploads, &id, sizeof id, u);
    if (u == NULL || u->creating || u->obj == NULL || head->f[F_WRITE_TOTAL].u != u->total ||
        off != u->next_off || len > u->total - off)
        return NULL; /* upload_chunk answers it */
    return wrk__sink_into(srv->w, &srv->sink_obj, u->obj, off);
}

/* The zero-copy requests: they hand out the arena or arena offsets, and pin or reserve store
 * memory for a peer that writes and reads it in place. */
static bool local_only(uint32_t type)
{
    return type == PROTO_ARENA_MAP || type == PROTO_OBJ_PIN || type == PROTO_OBJ_UNPIN ||
           type == PROTO_OBJ_CREATE || type == PROTO_OBJ_SEAL;
}

static void peer_msg_handle(wsrv *srv, proto_conn *c, const proto_msg *m)
{
    if (local_only(m->type) && !proto_conn_is_local(c)) {
        /* Over TCP they would let a remote peer pin objects, or hold memory that no stall
         * timeout reclaims and seal it unwritten, with no mapping to use any of it. */
        proto_conn_error(c, m->req, SPW_ENOTSUP, "%s is only valid on the local socket",
                         proto_type_name(m->type));
        return;
    }
    switch (m->type) {
    case PROTO_OBJ_WRITE:
        upload_chunk(srv, m);
        return;
    case PROTO_OBJ_READ:
        read_start(srv, m);
        return;
    case PROTO_ARENA_MAP:
        arena_map(srv, m);
        return;
    case PROTO_OBJ_PIN:
        obj_pin(srv, m);
        return;
    case PROTO_OBJ_UNPIN:
        obj_unpin(srv, m);
        return;
    case PROTO_OBJ_CREATE:
        obj_create(srv, m);
        return;
    case PROTO_OBJ_SEAL:
        obj_seal(srv, m);
        return;
    case PROTO_ERROR:
        return;
    default:
        proto_conn_error(c, m->req, SPW_EPROTO, "%s is not valid on a peer port",
                         proto_type_name(m->type));
    }
}

static void peer_msg(proto_conn *c, const proto_msg *m)
{
    wsrv *srv = proto_conn_data(c);
    peer_msg_handle(srv, c, m);
    wrk__sink_release(srv->w, &srv->sink_obj);
    if (!proto_conn_writable(c))
        srv_flow(srv);
}

static void peer_close(proto_conn *c, int status)
{
    (void)status;
    wsrv *srv = proto_conn_data(c);
    if (srv == NULL)
        return;
    srv->closed = true;
    srv->conn = NULL;
    wrk__sink_release(srv->w, &srv->sink_obj);
    srv->refs++; /* finishing a read below may drop the last reference: not before the end */
    wupload *u, *utmp;
    HASH_ITER(hh, srv->uploads, u, utmp)
    {
        /* A half-written object from a peer that went away is dropped; one still waiting for
         * room is dropped by its allocation callback. */
        if (!u->creating)
            upload_remove(srv, u, true);
        else {
            HASH_DEL(srv->uploads, u);
            HASH_DELETE(hh_all, srv->w->uploads, u);
            spw_buf_release(&u->pending);
            spw_free(u);
        }
    }
    wread *rd, *tmp;
    DL_FOREACH_SAFE(srv->reads, rd, tmp)
    {
        DL_DELETE(srv->reads, rd);
        if (rd->outstanding == 0)
            read_finish(rd);
    }
    DL_FOREACH_SAFE2(srv->w->disk_waits, rd, tmp, fnext)
    {
        if (rd->srv == srv)
            read_finish(rd); /* off the list with it */
    }
    /* A local client that went away (or died) no longer reads what it pinned. */
    wpin *p, *ptmp;
    HASH_ITER(hh, srv->pins, p, ptmp)
    {
        while (p->count-- > 0)
            ost_obj_unpin(srv->w->store, p->obj);
        HASH_DEL(srv->pins, p);
        spw_free(p);
    }
    srv->refs--;
    srv_maybe_free(srv);
}

static void peer_drain(proto_conn *c)
{
    wsrv *srv = proto_conn_data(c);
    reads_pump(srv);
    srv_flow(srv); /* its requests may be read again */
}

const proto_conn_cbs wrk__peer_cbs = {
    .on_hello = peer_hello,
    .on_msg = peer_msg,
    .on_close = peer_close,
    .on_sink = peer_sink,
    .on_drain = peer_drain,
};
