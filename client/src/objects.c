/*
 * libspillway objects: put, get, release and waiting for results.
 *
 * Large objects never pass through the scheduler: it only says where (PUT_TARGET, LOCATION);
 * the bytes go between this process and a worker's peer port, in chunks. A put sends its chunks
 * straight from the caller's buffer (borrowed, no copy) and returns once the worker has sealed
 * the object. Small values stay in the client: they are copied into the task messages that use
 * them and never become store objects.
 */
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "client_int.h"

/* ------------------------------------------------------------- peer conns */

static void peer_ready(proto_conn *conn, const proto_welcome *w)
{
    (void)w;
    peer *p = proto_conn_data(conn);
    p->ready = true;
}

static void peer_msg(proto_conn *conn, const proto_msg *m)
{
    peer *p = proto_conn_data(conn);
    spillway *c = p->c;
    xfer *x = &c->xfer;
    if (!x->active || x->done || x->p != p || m->req != x->req)
        return;
    switch (m->type) {
    case PROTO_ERROR: {
        char msg[PROTO_MAX_STR + 1];
        x->status = proto_err_code(m->f[F_ERROR_CODE].i);
        spillway__set_err(c, "worker %s: %s", p->addr,
                          proto_str(&m->f[F_ERROR_MSG], msg, sizeof msg));
        x->done = true;
        return;
    }
    case PROTO_PUT_DONE:
        x->done = true;
        return;
    case PROTO_OBJ_DATA: {
        const proto_val *d = &m->f[F_DATA_DATA];
        uint64_t off = m->f[F_DATA_OFF].u;
        if (off != x->received || d->bin.len > x->size - x->received ||
            m->f[F_DATA_TOTAL].u != x->size) {
            x->status = SPW_EPROTO;
            spillway__set_err(c, "worker %s sent a chunk out of order", p->addr);
            x->done = true;
            return;
        }
        memcpy(x->buf + off, d->bin.ptr, d->bin.len);
        x->received += d->bin.len;
        if (m->f[F_DATA_FLAGS].u & PROTO_CHUNK_LAST) {
            if (x->received != x->size) {
                x->status = SPW_EPROTO;
                spillway__set_err(c, "worker %s ended the object early", p->addr);
            }
            x->done = true;
        }
        return;
    }
    default:
        return;
    }
}

static void peer_close(proto_conn *conn, int status)
{
    peer *p = proto_conn_data(conn);
    spillway *c = p->c;
    p->conn = NULL;
    p->status = status != 0 ? status : SPW_ECLOSED;
    if (!p->ready)
        c->peer_refused = p->status; /* SPW_ELIMIT, SPW_EAUTH, -ECONNREFUSED... */
    xfer *x = &c->xfer;
    if (x->active && !x->done && x->p == p) {
        x->status = status == SPW_ETIMEDOUT ? SPW_ETIMEDOUT : SPW_ECLOSED;
        if (status == SPW_ETIMEDOUT)
            spillway__set_err(c, "worker %s sent nothing and took nothing for %u ms: gave up on it",
                              p->addr, c->stall_ms);
        else
            spillway__set_err(c, "connection to worker %s lost: %s", p->addr,
                              spw_strerror(status));
        x->done = true;
    }
    HASH_DEL(c->peers, p);
    spw_free(p);
}

static const proto_conn_cbs peer_cbs = {
    .on_ready = peer_ready,
    .on_msg = peer_msg,
    .on_close = peer_close,
};

static bool peer_settled(spillway *c, void *arg)
{
    const char *addr = arg;
    peer *p;
    HASH_FIND_STR(c->peers, addr, p);
    return p == NULL || p->ready;
}

/* Returns a ready connection to a worker's peer port, connecting if needed. */
static int peer_get(spillway *c, const char *addr, peer **out)
{
    peer *p;
    HASH_FIND_STR(c->peers, addr, p);
    if (p == NULL) {
        p = spw_calloc(SPW_MOD_CLIENT, 1, sizeof *p);
        snprintf(p->addr, sizeof p->addr, "%s", addr);
        p->c = c;
        int rc = proto_connect(c->ctx, addr, &peer_cbs, p, &p->conn);
        if (rc != 0) {
            spw_free(p);
            spillway__set_err(c, "cannot connect to worker %s: %s", addr, spw_strerror(rc));
            return rc;
        }
        HASH_ADD_STR(c->peers, addr, p);
    }
    char key[64];
    snprintf(key, sizeof key, "%s", addr);
    c->peer_refused = 0;
    int rc = spillway__run_until(c, peer_settled, key, 10000);
    HASH_FIND_STR(c->peers, key, p);
    if (rc == 0 && p == NULL)
        rc = c->peer_refused != 0 ? c->peer_refused : SPW_ECONNREFUSED;
    if (rc != 0) {
        if (!spillway__stalled(c))
            spillway__set_err(c, "cannot reach worker %s: %s", addr, spw_strerror(rc));
        return rc;
    }
    *out = p;
    return 0;
}

static bool xfer_done(spillway *c, void *arg)
{
    (void)arg;
    return c->xfer.done;
}

/* ----------------------------------------------------------- local arenas */

static void local_msg(proto_conn *conn, const proto_msg *m)
{
    local *l = proto_conn_data(conn);
    spillway *c = l->c;
    xfer *x = &c->xfer;
    if (!x->active || x->done || x->l != l || m->req != x->req)
        return;
    switch (m->type) {
    case PROTO_ERROR: {
        char msg[PROTO_MAX_STR + 1];
        x->status = proto_err_code(m->f[F_ERROR_CODE].i);
        spillway__set_err(c, "local worker: %s", proto_str(&m->f[F_ERROR_MSG], msg, sizeof msg));
        break;
    }
    case PROTO_PINNED:
        x->off = m->f[F_PINNED_OFF].u;
        x->size = m->f[F_PINNED_SIZE].u;
        break;
    case PROTO_CREATED:
        x->off = m->f[F_CREATED_OFF].u;
        break;
    case PROTO_PUT_DONE:
        break;
    default:
        return;
    }
    x->done = true;
}

static void local_close(proto_conn *conn, int status)
{
    local *l = proto_conn_data(conn);
    spillway *c = l->c;
    l->conn = NULL;
    xfer *x = &c->xfer;
    if (x->active && !x->done && x->l == l) {
        x->status = status == SPW_ETIMEDOUT ? SPW_ETIMEDOUT : SPW_ECLOSED;
        if (status == SPW_ETIMEDOUT)
            spillway__set_err(c, "same-host worker silent for %u ms: gave up on it", c->stall_ms);
        else
            spillway__set_err(c, "local worker connection lost: %s", spw_strerror(status));
        x->done = true;
    }
}

static const proto_conn_cbs local_cbs = {
    .on_msg = local_msg,
    .on_close = local_close,
};

void spillway__locals_free(spillway *c)
{
    local *l, *tmp;
    HASH_ITER(hh, c->locals, l, tmp)
    {
        HASH_DEL(c->locals, l);
        if (l->base != NULL)
            munmap(l->base, l->capacity);
        if (l->memfd >= 0)
            close(l->memfd);
        spw_free(l);
    }
}

/* The arena of a worker on this host, mapped (once per worker and mode), or NULL when the
 * worker is elsewhere or cannot be reached that way (then TCP it is): a worker that refuses our
 * uid on its local socket (SPW_EAUTH) is only ever used over TCP, by copy. Reads use a
 * read-only descriptor and mapping; only puts (write) ask for a writable one, on a connection
 * of their own. */
static local *local_get(spillway *c, const char *host_id, const char *name, bool write)
{
    if (name[0] == '\0' || strcmp(host_id, c->host_id) != 0 || c->no_local)
        return NULL;
    char key[sizeof ((local *)0)->name];
    snprintf(key, sizeof key, "%s%s", write ? "w|" : "", name);
    local *l;
    HASH_FIND_STR(c->locals, key, l);
    if (l != NULL)
        return l->conn != NULL ? l : NULL;
    l = spw_calloc(SPW_MOD_CLIENT, 1, sizeof *l);
    snprintf(l->name, sizeof l->name, "%s", key);
    l->writable = write;
    l->c = c;
    l->memfd = -1;
    HASH_ADD_STR(c->locals, name, l); /* remembered even on failure: no retry per call */
    int sock;
    int rc = proto_local_attach(c->ctx, name, 5000, write, &sock, &l->memfd, &l->capacity);
    if (rc != 0) {
        spw_log(rc == SPW_EAUTH ? SPW_LOG_NOTICE : SPW_LOG_INFO,
                "local arena %s unavailable (%s): using TCP", name, spw_strerror(rc));
        return NULL;
    }
    /* One mapping, kept: its page tables stay filled, so puts and reads after the first cost
     * a memcpy and no faults. Views hand out const pointers into it. */
    void *base = mmap(NULL, l->capacity, write ? PROT_READ | PROT_WRITE : PROT_READ, MAP_SHARED,
                      l->memfd, 0);
    if (base == MAP_FAILED) {
        close(sock);
        return NULL;
    }
    l->base = base;
    if (proto_conn_open_fd(c->ctx, sock, &local_cbs, l, &l->conn) != 0) {
        close(sock);
        l->conn = NULL;
        return NULL;
    }
    return l;
}

/* Gives the scheduler back our references to n objects, in one RELEASE. */
static void release_ids(spillway *c, const spw_id *ids, uint32_t n)
{
    proto_enc e;
    proto_enc_release(&e, spillway__out(c), 0, &(proto_release_msg){.ids = {ids, n}});
    (void)spillway__send(c, &e);
    spillway__log_bound(c);
}

static void release_id(spillway *c, spw_id id);

/* Sends a request on a local connection and waits for its reply into c->xfer. */
static int local_call(spillway *c, local *l, uint32_t type, spw_id id, uint64_t size)
{
    xfer *x = &c->xfer;
    *x = (xfer){0};
    x->active = true;
    x->req = ++c->next_req;
    x->l = l;
    x->id = id;
    int rc;
    if (type == PROTO_OBJ_CREATE)
        rc =
            proto_send_obj_create(l->conn, x->req, &(proto_obj_create_msg){.id = id, .size = size});
    else if (type == PROTO_OBJ_SEAL)
        rc = proto_send_obj_seal(l->conn, x->req, &(proto_obj_seal_msg){.id = id});
    else
        rc = proto_send_obj_pin(l->conn, x->req, &(proto_obj_pin_msg){.id = id});
    if (rc == 0)
        rc = spillway__run_until(c, xfer_done, NULL, -1);
    if (rc == 0)
        rc = x->status;
    x->active = false;
    return rc;
}

static void local_unpin(spillway *c, local *l, spw_id id)
{
    if (l->conn == NULL)
        return;
    proto_send_obj_unpin(l->conn, 0, &(proto_obj_unpin_msg){.id = id});
    spillway__flush(c);
}

/* Writes len bytes into a new object in a local arena: one copy, at memory speed. Only this
 * memcpy writes through the client's mapping, and only into the object just created for it. */
static int local_put(spillway *c, local *l, spw_id id, const void *data, size_t len)
{
    int rc = local_call(c, l, PROTO_OBJ_CREATE, id, len);
    if (rc != 0)
        return rc;
    uint64_t off = c->xfer.off;
    if (off > l->capacity || len > l->capacity - off)
        return SPW_EPROTO;
    memcpy(l->base + off, data, len);
    return local_call(c, l, PROTO_OBJ_SEAL, id, 0);
}

/* ---------------------------------------------------------------------- put */

typedef struct put_target {
    char addr[SPW_ADDR_MAX];
    char host_id[128];
    char local[64];
    uint64_t exists;
    uint64_t chunk; /* not 0: put it as a chunked object, in chunks of this many bytes */
} put_target;

static void on_put_target(const proto_msg *m, void *arg)
{
    put_target *t = arg;
    proto_str(&m->f[F_PUTT_ADDR], t->addr, sizeof t->addr);
    proto_str(&m->f[F_PUTT_HOSTID], t->host_id, sizeof t->host_id);
    proto_str(&m->f[F_PUTT_LOCAL], t->local, sizeof t->local);
    t->exists = m->f[F_PUTT_EXISTS].u;
    t->chunk = m->f[F_PUTT_CHUNK].nil ? 0 : m->f[F_PUTT_CHUNK].u;
}

static void on_bcast_done(const proto_msg *m, void *arg);

typedef struct bcast_res {
    uint64_t copies, failed;
} bcast_res;

/* Uploads len bytes as object id (flags: PROTO_PUT_*). The client holds a CLIENT reference
 * afterwards (a chunk: its parent does). With bcast != NULL it also asks for copies on nworkers
 * (0: all) right after placement, so the copies follow the upload as it happens instead of
 * starting after it. With chunked != NULL (PROTO_PUT_MAY_CHUNK) the scheduler may answer that
 * it goes in chunks: then *chunked is their size, nothing was sent, and the client holds the
 * chunked object, pending until its chunks are put (put_chunks). */
static int put_object(spillway *c, spw_id id, const void *data, size_t len, uint64_t flags,
                      const char *site, bcast_res *bcast, unsigned nworkers, bool keep,
                      uint64_t *chunked);

int spillway__put_object(spillway *c, spw_id id, const void *data, size_t len, uint64_t flags,
                         const char *site)
{
    return put_object(c, id, data, len, flags, site, NULL, 0, false, NULL);
}

/* A put's chunk is no longer queued: written, or its connection is gone. */
static void chunk_released(void *arg)
{
    spillway *c = arg;
    c->put_borrowed--;
}

/* bcast: copies on nworkers workers, reported there; keep: the scheduler keeps that many (a put
 * with replicas). */
static int put_object(spillway *c, spw_id id, const void *data, size_t len, uint64_t flags,
                      const char *site, bcast_res *bcast, unsigned nworkers, bool keep,
                      uint64_t *chunked)
{
    if (spillway__connected(c) != 0)
        return SPW_ECLOSED;
    uint64_t req = spillway__call_begin(c, PROTO_PUT_TARGET);
    put_target tgt;
    memset(&tgt, 0, sizeof tgt);
    c->call.on_reply = on_put_target;
    c->call.arg = &tgt;
    proto_enc pe;
    proto_enc_put_place(&pe, spillway__out(c), req,
                         &(proto_put_place_msg){.id = id,
                                                .size = len,
                                                .site = site,
                                                .flags = flags |
                                                         (chunked != NULL ? PROTO_PUT_MAY_CHUNK : 0),
                                                /* prefer our host */
                                                .host_id = c->no_local ? "" : c->host_id,
                                                .chunk_max = c->chunk_size,
                                                .omit_chunk_max = chunked == NULL});
    int rc = spillway__send(c, &pe);
    if (rc == 0)
        rc = spillway__call_wait(c, -1);
    if (rc != 0)
        return rc;
    if (chunked != NULL && tgt.chunk != 0) {
        *chunked = tgt.chunk;
        return 0;
    }
    if (bcast != NULL) {
        spillway__call_begin(c, PROTO_BROADCAST_DONE);
        uint64_t breq = c->call.req;
        c->call.on_reply = on_bcast_done;
        c->call.arg = bcast;
        proto_enc be;
        proto_enc_broadcast(&be, spillway__out(c), breq,
                            &(proto_broadcast_msg){
                                .id = id, .workers = nworkers, .keep = 1, .omit_keep = !keep});
        (void)spillway__send(c, &be); /* a failure fails the wait below */
    }
    if (tgt.exists)
        return bcast != NULL ? spillway__call_wait(c, -1) : 0; /* stored already: shared */
    local *l = local_get(c, tgt.host_id, tgt.local, true);
    peer *p = NULL;
    if (l != NULL)
        rc = local_put(c, l, id, data, len);
    else
        rc = peer_get(c, tgt.addr, &p);
    if (rc == 0 && l == NULL) {
        xfer *x = &c->xfer;
        *x = (xfer){0};
        x->active = true;
        x->req = ++c->next_req;
        x->id = id;
        x->p = p;
        uint64_t chunk = c->wel.chunk ? c->wel.chunk : PROTO_DEFAULT_CHUNK;
        const uint8_t *b = data;
        for (uint64_t off = 0; off < len && rc == 0; off += chunk) {
            uint64_t n = len - off < chunk ? len - off : chunk;
            proto_enc we; /* the chunk's bytes are borrowed: only the header is encoded */
            proto_enc_obj_write(
                &we, proto_conn_out(p->conn), x->req,
                &(proto_obj_write_msg){.id = id,
                                       .total = len,
                                       .off = off,
                                       .flags = off + n == len ? PROTO_CHUNK_LAST : 0,
                                       .data = {NULL, n}});
            c->put_borrowed++;
            rc = proto_conn_send_borrowed(p->conn, &we, b + off, n, chunk_released, c);
        }
        if (rc == 0)
            rc = spillway__run_until(c, xfer_done, NULL, -1);
        if (rc == 0)
            rc = x->status;
        x->active = false;
        /* The caller's buffer is theirs again once we return, so no chunk of it may stay
         * queued. After a failure (a worker that refuses the object answers its first chunk)
         * the rest is not wanted: the connection closes, which writes or drops what is queued
         * within its drain deadline. */
        if (rc != 0 && c->put_borrowed > 0) {
            HASH_FIND_STR(c->peers, tgt.addr, p);
            if (p != NULL && p->conn != NULL)
                proto_conn_close(p->conn, 0);
        }
        while (c->put_borrowed > 0)
            uv_run(&c->loop, UV_RUN_ONCE);
    }
    if (bcast != NULL) {
        int brc = spillway__call_wait(c, -1);
        if (rc == 0)
            rc = brc;
        if (brc == 0 && rc != 0) {
            /* The broadcast took a reference of ours too: give it back as well. */
            release_ids(c, &id, 1);
        }
    }
    if (rc != 0 && !(flags & PROTO_PUT_CHUNK)) {
        /* The scheduler holds a reference for us: give it back. (A chunk's parent holds it.) */
        release_id(c, id);
    }
    return rc;
}

/* Puts the chunks of the chunked object id (len bytes at data, in chunks of chunk bytes) one
 * after the other, each sent from the caller's buffer; the scheduler spreads them over the
 * stores. On failure the chunked object is released, and its chunks with it. */
static int put_chunks(spillway *c, spw_id id, const uint8_t *data, size_t len, uint64_t chunk,
                      const char *site)
{
    int rc = 0;
    for (uint64_t off = 0, i = 0; off < len && rc == 0; off += chunk, i++) {
        uint64_t n = len - off < chunk ? len - off : chunk;
        rc = put_object(c, spw_id_output(id, (uint32_t)(1 + i)), data + off, n, PROTO_PUT_CHUNK,
                        site, NULL, 0, false, NULL);
    }
    if (rc != 0)
        release_id(c, id);
    return rc;
}

static int scatter_at__impl(spillway *c, const void *data, size_t len, unsigned nworkers,
                            bool keep, spillway_ref *out, const char *site);

static int put_at__impl(spillway *c, const void *data, size_t len, spillway_ref *out,
                        const char *site)
{
    if (c == NULL)
        return SPW_EINVAL;
    if (len == 0 || data == NULL || out == NULL) {
        spillway__set_err(c, "spillway_put: %s", len == 0 ? "len is 0; an object has at least "
                                                            "one byte"
                                                 : data == NULL ? "data is NULL" : "out is NULL");
        return SPW_EINVAL;
    }
    if (len <= c->inline_limit || c->put_replicas > 1)
        return scatter_at__impl(c, data, len, c->put_replicas > 1 ? c->put_replicas : 1, true,
                                out, site);
    spw_id id = spillway__new_id(c);
    uint64_t chunk = 0;
    int rc = put_object(c, id, data, len, 0, site != NULL ? site : "", NULL, 0, false, &chunk);
    if (rc == 0 && chunk != 0)
        rc = put_chunks(c, id, data, len, chunk, site != NULL ? site : "");
    if (rc != 0)
        return rc;
    handle *h = spillway__handle_add(c, id, H_PUT);
    h->state = H_DONE;
    h->size = len;
    h->chunk_shift = (uint8_t)(chunk != 0 ? __builtin_ctzll(chunk) : 0);
    *out = (spillway_ref){id.hi, id.lo};
    return 0;
}

/* -------------------------------------------------------------- broadcast */

static void on_bcast_done(const proto_msg *m, void *arg)
{
    bcast_res *r = arg;
    r->copies = m->f[F_BCDONE_COPIES].u;
    r->failed = m->f[F_BCDONE_FAILED].u;
}

static void release_id(spillway *c, spw_id id)
{
    release_ids(c, &id, 1);
    spillway__flush(c);
}

/* After a broadcast: it holds a BROADCAST reference of ours; drop the other one we had, so the
 * handle stands for exactly one. */
static int broadcast_settle(spillway *c, spw_id id, const bcast_res *res)
{
    release_id(c, id);
    if (res->copies == 0) {
        spillway__set_err(c, "no worker could take a copy");
        return SPW_EOBJLOST;
    }
    if (res->failed > 0)
        spw_log(SPW_LOG_WARN, "broadcast: %llu of %llu workers could not take a copy",
                (unsigned long long)res->failed,
                (unsigned long long)(res->failed + res->copies));
    return 0;
}

static int broadcast__impl(spillway *c, spillway_ref ref, unsigned nworkers)
{
    if (c == NULL)
        return SPW_EINVAL;
    spw_id id = {ref.hi, ref.lo};
    handle *h = spillway__handle_find(c, id);
    if (h == NULL)
        return SPW_ENOTHELD;
    if (h->kind == H_SMALL)
        return 0; /* small values travel with every task anyway */
    if (h->chunk_shift != 0) {
        spillway__set_err(c, "a chunked object is spread over the stores: it is not broadcast");
        return SPW_EINVAL;
    }
    if (spillway__connected(c) != 0)
        return SPW_ECLOSED;
    bcast_res res = {0, 0};
    uint64_t req = spillway__call_begin(c, PROTO_BROADCAST_DONE);
    c->call.on_reply = on_bcast_done;
    c->call.arg = &res;
    proto_enc e;
    proto_enc_broadcast(&e, spillway__out(c), req,
                        &(proto_broadcast_msg){.id = id, .workers = nworkers});
    int rc = spillway__send(c, &e);
    if (rc == 0)
        rc = spillway__call_wait(c, -1);
    if (rc != 0)
        return rc;
    return broadcast_settle(c, id, &res);
}

/* A put with copies on nworkers workers (0: all), kept at that many with keep. */
static int scatter_at__impl(spillway *c, const void *data, size_t len, unsigned nworkers,
                            bool keep, spillway_ref *out, const char *site)
{
    if (c == NULL || data == NULL || len == 0 || out == NULL)
        return spillway__refuse(c, SPW_EINVAL, "spillway_scatter_at", "%s",
                                len == 0       ? "len is 0; an object has at least one byte"
                                : data == NULL ? "data is NULL"
                                               : "out is NULL");
    if (len <= c->inline_limit) {
        /* Travels with every task anyway, and lives in the client: never lost. */
        spillway_ref r;
        spw_id id = spillway__new_id(c);
        handle *h = spillway__handle_add(c, id, H_SMALL);
        h->inl = spw_malloc(SPW_MOD_CLIENT, len);
        memcpy(h->inl, data, len);
        h->has_inl = true;
        h->size = len;
        h->state = H_DONE;
        r = (spillway_ref){id.hi, id.lo};
        *out = r;
        return 0;
    }
    spw_id id = spillway__new_id(c);
    bcast_res res = {0, 0};
    int rc =
        put_object(c, id, data, len, 0, site != NULL ? site : "", &res, nworkers, keep, NULL);
    if (rc != 0)
        return rc;
    handle *h = spillway__handle_add(c, id, H_PUT);
    h->state = H_DONE;
    h->size = len;
    rc = broadcast_settle(c, id, &res);
    if (rc != 0) {
        spillway_release(c, (spillway_ref){id.hi, id.lo});
        return rc;
    }
    *out = (spillway_ref){id.hi, id.lo};
    return 0;
}

/* ---------------------------------------------------------------------- get */

/* One worker holding a copy, as the scheduler's LOCATION listed it. */
typedef struct loc_src {
    char addr[64];   /* peer port, host:port */
    char hostid[128];
    char local[64];  /* Unix socket for same-host clients */
} loc_src;

/* Where an object is: its value (inline), or every worker holding a copy (srcs, heap, all of
 * those listed: a same-host copy is found however many remote ones come first). */
typedef struct location {
    int status;
    uint64_t size;
    uint64_t chunk; /* a chunked object: its chunks' size (no copies, no value); else 0 */
    uint8_t *inl;
    bool has_inl;
    uint32_t nlocs;
    loc_src *srcs;
    char err[PROTO_MAX_STR + 1];
} location;

static void on_location(const proto_msg *m, void *arg)
{
    location *l = arg;
    l->status = proto_status(m->f[F_LOC_STATUS].i);
    l->size = m->f[F_LOC_SIZE].u;
    l->chunk = m->f[F_LOC_CHUNK].nil ? 0 : m->f[F_LOC_CHUNK].u;
    proto_str(&m->f[F_LOC_ERR], l->err, sizeof l->err);
    if (!m->f[F_LOC_INLINE].nil) {
        const proto_val *v = &m->f[F_LOC_INLINE];
        l->inl = spw_malloc(SPW_MOD_CLIENT, v->bin.len > 0 ? v->bin.len : 1);
        memcpy(l->inl, v->bin.ptr, v->bin.len);
        l->size = v->bin.len;
        l->has_inl = true;
    }
    const proto_val *locs = &m->f[F_LOC_LOCS];
    spw_free(l->srcs);
    l->srcs = spw_calloc(SPW_MOD_CLIENT, locs->arr.n > 0 ? locs->arr.n : 1, sizeof *l->srcs);
    l->nlocs = 0;
    for (uint32_t i = 0; i < locs->arr.n; i++) {
        const proto_val *r = PROTO_REC(locs, i);
        loc_src *src = &l->srcs[l->nlocs++];
        proto_str(&r[R_LOC_ADDR], src->addr, sizeof src->addr);
        proto_str(&r[R_LOC_HOSTID], src->hostid, sizeof src->hostid);
        proto_str(&r[R_LOC_LOCAL], src->local, sizeof src->local);
    }
}

static bool task_settled(spillway *c, void *arg)
{
    handle *h = spillway__handle_find(c, *(spw_id *)arg);
    return h == NULL || h->state != H_PENDING;
}

/* A heap copy of n bytes for the caller (spillway_free); an empty value is spillway__empty,
 * neither allocated nor freed: most task results are empty. */
static uint8_t *copy_bytes(const uint8_t *p, uint64_t n)
{
    if (n == 0)
        return spillway__empty;
    uint8_t *d = spw_try_malloc(SPW_MOD_CLIENT, n);
    if (d != NULL)
        memcpy(d, p, n);
    return d;
}

static void bytes_free(void *p)
{
    if (p != spillway__empty)
        spw_free(p);
}

/* Finds where an object is, waiting up to timeout_ms for it to exist. On success loc holds
 * either the value itself (has_inl, heap copy owned by loc) or the workers holding copies
 * (loc->srcs, heap: the caller frees it). On failure, or with has_inl, srcs is NULL. */
static int resolve(spillway *c, spw_id id, int timeout_ms, location *loc)
{
    char hex[33];
    /* Not a memset: err is 4 KiB, and a fetch of an inline result needs none of it. */
    loc->status = 0;
    loc->size = 0;
    loc->chunk = 0;
    loc->inl = NULL;
    loc->has_inl = false;
    loc->nlocs = 0;
    loc->srcs = NULL;
    loc->err[0] = '\0';
    uint64_t deadline = timeout_ms < 0 ? 0 : spw_now_ns() + (uint64_t)timeout_ms * 1000000ULL;
    handle *h = spillway__handle_find(c, id);
    if (h != NULL && h->kind == H_TASK && h->state == H_PENDING) {
        int rc = spillway__run_until(c, task_settled, &id, timeout_ms);
        if (rc != 0) {
            if (!spillway__stalled(c))
                spillway__set_err(c, "obj=%s not ready: %s", spw_id_hex(id, hex),
                                  spw_strerror(rc));
            return rc;
        }
        h = spillway__handle_find(c, id);
    }
    if (h != NULL && h->state == H_FAILED) {
        spillway__set_err(c, "%s", h->err != NULL ? h->err : "task failed");
        return h->status;
    }
    if (h != NULL && h->has_inl) {
        loc->inl = copy_bytes(h->inl, h->size);
        if (loc->inl == NULL)
            return SPW_ENOMEM;
        loc->has_inl = true;
        loc->size = h->size;
        return 0;
    }
    if (spillway__connected(c) != 0)
        return SPW_ECLOSED;
    int left = timeout_ms;
    if (timeout_ms >= 0) {
        uint64_t now = spw_now_ns();
        left = now >= deadline ? 0 : (int)((deadline - now) / 1000000ULL);
    }
    uint64_t req = spillway__call_begin(c, PROTO_LOCATION);
    c->call.on_reply = on_location;
    c->call.arg = loc;
    proto_enc e;
    proto_enc_locate(
        &e, spillway__out(c), req,
        &(proto_locate_msg){.id = id, .timeout_ms = left < 0 ? UINT32_MAX : (uint64_t)left});
    int rc = spillway__send(c, &e);
    /* A second more than the scheduler waits, as far as an int goes. */
    if (rc == 0)
        rc = spillway__call_wait(c, left < 0 ? -1 : left > INT_MAX - 1000 ? INT_MAX : left + 1000);
    if (rc == 0 && loc->status != 0) {
        rc = loc->status;
        spillway__set_err(c, "%s", loc->err);
    }
    if (rc != 0) {
        bytes_free(loc->inl);
        loc->inl = NULL;
        loc->has_inl = false;
    }
    if (rc != 0 || loc->has_inl) {
        spw_free(loc->srcs);
        loc->srcs = NULL;
        loc->nlocs = 0;
    }
    return rc;
}

/* Pins the object in a same-host worker's arena; returns the local arena or NULL. */
static local *pin_local(spillway *c, spw_id id, const location *loc, uint64_t *off)
{
    for (uint32_t i = 0; i < loc->nlocs; i++) {
        local *l = local_get(c, loc->srcs[i].hostid, loc->srcs[i].local, false);
        if (l == NULL)
            continue;
        if (local_call(c, l, PROTO_OBJ_PIN, id, 0) == 0 && c->xfer.size == loc->size &&
            c->xfer.off <= l->capacity && loc->size <= l->capacity - c->xfer.off) {
            *off = c->xfer.off;
            return l;
        }
    }
    return NULL;
}

/* Streams the object from a worker's peer port into buf. */
static int fetch_tcp(spillway *c, spw_id id, const location *loc, uint8_t *buf)
{
    char hex[33];
    int rc = SPW_EOBJLOST;
    spillway__set_err(c, "obj=%s has no copy on a live worker", spw_id_hex(id, hex));
    for (uint32_t i = 0; i < loc->nlocs; i++) {
        peer *p;
        rc = peer_get(c, loc->srcs[i].addr, &p);
        if (rc != 0)
            continue;
        xfer *x = &c->xfer;
        *x = (xfer){0};
        x->active = true;
        x->req = ++c->next_req;
        x->id = id;
        x->p = p;
        x->buf = buf;
        x->size = loc->size;
        proto_send_obj_read(
            p->conn, x->req,
            &(proto_obj_read_msg){.id = id, .off = 0, .len = loc->size, .omit_flags = true});
        rc = spillway__run_until(c, xfer_done, NULL, -1);
        if (rc == 0)
            rc = x->status;
        x->active = false;
        x->buf = NULL;
        if (rc == 0)
            break;
    }
    return rc;
}

int spillway__resolve_size(spillway *c, spw_id id, uint64_t *size, uint64_t *chunk)
{
    location loc;
    int rc = resolve(c, id, -1, &loc);
    if (rc == 0)
        *size = loc.size;
    if (rc == 0 && chunk != NULL)
        *chunk = loc.chunk;
    bytes_free(loc.inl);
    spw_free(loc.srcs);
    return rc;
}

/* Reads a whole object whose location is known into buf (loc->size bytes): from a
 * same-host arena, or over TCP. */
static int read_into(spillway *c, spw_id id, const location *loc, uint8_t *buf)
{
    uint64_t off;
    local *l = pin_local(c, id, loc, &off);
    if (l == NULL)
        return fetch_tcp(c, id, loc, buf);
    memcpy(buf, l->base + off, loc->size);
    local_unpin(c, l, id);
    return 0;
}

/* Gathers the chunked object id (size bytes, chunks of chunk bytes) into buf, chunk by chunk:
 * the caller's buffer is all the memory it takes. */
static int gather_chunks(spillway *c, spw_id id, uint64_t size, uint64_t chunk, int timeout_ms,
                         uint8_t *buf)
{
    char hex[33];
    for (uint64_t off = 0, i = 0; off < size; off += chunk, i++) {
        spw_id cid = spw_id_output(id, (uint32_t)(1 + i));
        uint64_t n = size - off < chunk ? size - off : chunk;
        location loc;
        int rc = resolve(c, cid, timeout_ms, &loc);
        if (rc == 0 && (loc.has_inl || loc.size != n)) {
            spillway__set_err(c, "obj=%s: chunk %llu is not the %llu bytes its object says",
                              spw_id_hex(id, hex), (unsigned long long)i, (unsigned long long)n);
            rc = SPW_EPROTO;
        }
        if (rc == 0)
            rc = read_into(c, cid, &loc, buf + off);
        bytes_free(loc.inl);
        spw_free(loc.srcs);
        if (rc != 0)
            return rc;
    }
    return 0;
}

/* Tries of a get whose copies were all unreachable: the scheduler learns a worker died a moment
 * after its connections close, so the first answer after a death may still name it. */
#define GET_RELOCATE_MAX 6

/* Whether a failed read means the copies the scheduler named are gone (their worker died or
 * dropped them), so that asking it again can name others, or wait for the object to be made
 * again. */
static bool copies_gone(int rc)
{
    return rc == SPW_ECONNREFUSED || rc == SPW_ECLOSED || rc == SPW_ENOOBJ || rc == SPW_EOBJLOST;
}

static int get__impl(spillway *c, spillway_ref ref, int timeout_ms, void **data, size_t *len)
{
    if (c == NULL || data == NULL || len == NULL)
        return spillway__refuse(c, SPW_EINVAL, "spillway_get", "%s is NULL; it receives the %s",
                                data == NULL ? "data" : "len",
                                data == NULL ? "value" : "value's length");
    spw_id id = {ref.hi, ref.lo};
    location loc;
    int rc = resolve(c, id, timeout_ms, &loc);
    if (rc != 0)
        return rc;
    if (loc.has_inl) {
        *data = loc.inl;
        *len = loc.size;
        return 0;
    }
    uint8_t *buf = spw_try_malloc(SPW_MOD_CLIENT, loc.size > 0 ? loc.size : 1);
    if (buf == NULL) {
        spw_free(loc.srcs);
        return SPW_ENOMEM;
    }
    uint64_t size = loc.size,
             deadline = timeout_ms < 0 ? 0 : spw_now_ns() + (uint64_t)timeout_ms * 1000000ULL;
    if (loc.chunk != 0)
        rc = gather_chunks(c, id, loc.size, loc.chunk, timeout_ms, buf);
    else
        rc = read_into(c, id, &loc, buf);
    for (int tries = 1; loc.chunk == 0 && copies_gone(rc) && tries < GET_RELOCATE_MAX; tries++) {
        /* Asked again after a pause that doubles: by then the scheduler knows of the death and
         * names other copies, or makes the object again (resolve waits for that). */
        uint64_t now = spw_now_ns();
        if (deadline != 0 && now >= deadline)
            break;
        uv_sleep(5u << tries);
        spw_free(loc.srcs);
        now = spw_now_ns();
        int left = deadline == 0 ? -1 : now >= deadline ? 0 : (int)((deadline - now) / 1000000ULL);
        rc = resolve(c, id, left, &loc);
        if (rc == 0 && (loc.has_inl || loc.size != size)) {
            bytes_free(loc.inl);
            loc.inl = NULL;
            char hex[33];
            spillway__set_err(c, "obj=%s changed size while being read", spw_id_hex(id, hex));
            rc = SPW_EPROTO;
        }
        if (rc == 0)
            rc = read_into(c, id, &loc, buf);
    }
    spw_free(loc.srcs);
    if (rc != 0) {
        spw_free(buf);
        return rc;
    }
    *data = buf;
    *len = size;
    return 0;
}

void spillway_free(void *p)
{
    bytes_free(p);
}

typedef struct view_priv {
    local *l;
    spw_id id;
    void *copy;
} view_priv;

static int get_view__impl(spillway *c, spillway_ref ref, int timeout_ms, spillway_view *view)
{
    if (c == NULL || view == NULL)
        return spillway__refuse(c, SPW_EINVAL, "spillway_get_view",
                                "view is NULL; it receives the value");
    spw_id id = {ref.hi, ref.lo};
    location loc;
    int rc = resolve(c, id, timeout_ms, &loc);
    if (rc != 0)
        return rc;
    view_priv *vp = spw_calloc(SPW_MOD_CLIENT, 1, sizeof *vp);
    vp->id = id;
    uint64_t off;
    if (loc.has_inl) {
        vp->copy = loc.inl;
        view->data = loc.inl;
        view->zero_copy = 0;
    } else if (loc.chunk == 0 && (vp->l = pin_local(c, id, &loc, &off)) != NULL) {
        /* Straight from the worker's shared memory: pinned until released. */
        view->data = vp->l->base + off;
        view->zero_copy = 1;
    } else {
        /* A private copy; of a chunked object, gathered from its chunks. */
        vp->copy = spw_try_malloc(SPW_MOD_CLIENT, loc.size > 0 ? loc.size : 1);
        rc = vp->copy == NULL           ? SPW_ENOMEM
             : loc.chunk != 0 ? gather_chunks(c, id, loc.size, loc.chunk, timeout_ms, vp->copy)
                              : fetch_tcp(c, id, &loc, vp->copy);
        if (rc != 0) {
            spw_free(loc.srcs);
            spw_free(vp->copy);
            spw_free(vp);
            return rc;
        }
        view->data = vp->copy;
        view->zero_copy = 0;
    }
    spw_free(loc.srcs);
    view->len = loc.size;
    view->priv = vp;
    return 0;
}

void spillway_view_release(spillway *c, spillway_view *view)
{
    view_priv *vp = view->priv;
    if (vp != NULL) {
        if (vp->l != NULL)
            local_unpin(c, vp->l, vp->id);
        bytes_free(vp->copy);
        spw_free(vp);
    }
    memset(view, 0, sizeof *view);
}

/* ------------------------------------------------------------------ release */

void spillway__handle_release(spillway *c, handle *h)
{
    spw_id id = h->id;
    bool remote = h->kind != H_SMALL;
    spillway__handle_free(c, h);
    if (remote)
        release_id(c, id);
}

static int release__impl(spillway *c, spillway_ref ref)
{
    if (c == NULL)
        return SPW_EINVAL;
    char hex[33];
    spw_id id = {ref.hi, ref.lo};
    handle *h = spillway__handle_find(c, id);
    if (h == NULL) {
        spillway__set_err(c, "obj=%s is not held by this client (double release or unknown id)",
                          spw_id_hex(id, hex));
        return SPW_ENOTHELD;
    }
    bool remote = h->kind != H_SMALL;
    spillway__handle_release(c, h);
    if (remote && c->sched == NULL && !spillway__can_resume(c)) {
        spillway__set_err(c, "connection to the scheduler %s is closed: its references went "
                             "with it", c->addr);
        return SPW_ECLOSED;
    }
    return 0;
}

static int release_many__impl(spillway *c, const spillway_ref *refs, size_t n)
{
    if (c == NULL || (refs == NULL && n > 0))
        return spillway__refuse(c, SPW_EINVAL, "spillway_release_many",
                                "refs is NULL with n %zu; n must be 0 without refs", n);
    char hex[33];
    int rc = 0;
    spw_id *remote = spw_malloc(SPW_MOD_CLIENT, (n > 0 ? n : 1) * sizeof *remote);
    size_t nremote = 0;
    for (size_t i = 0; i < n; i++) {
        spillway__refs_prefetch(c, refs, n, i);
        spw_id id = {refs[i].hi, refs[i].lo};
        handle *h = spillway__handle_find(c, id);
        if (h == NULL) {
            if (rc == 0)
                spillway__set_err(c, "obj=%s is not held by this client", spw_id_hex(id, hex));
            rc = SPW_ENOTHELD;
            continue;
        }
        if (h->kind != H_SMALL)
            remote[nremote++] = id;
        spillway__handle_free(c, h);
    }
    /* Frames of at most 65536 ids, and of at most half the scheduler's max frame (an id is
     * 18 bytes on the wire): a frame over its --max-frame would not be sent at all, and the
     * references would stay held there while gone here. */
    uint32_t mf = spillway__max_frame(c);
    size_t per = mf / 2 / 18 < 65536 ? mf / 2 / 18 : 65536;
    if (per == 0)
        per = 1;
    for (size_t i = 0; i < nremote; i += per) {
        size_t k = nremote - i < per ? nremote - i : per;
        release_ids(c, remote + i, (uint32_t)k);
    }
    spw_free(remote);
    spillway__flush(c);
    if (rc == 0 && nremote > 0 && c->sched == NULL && !spillway__can_resume(c)) {
        /* The handles are gone here; the scheduler dropped its side with the session. */
        spillway__set_err(c, "connection to the scheduler %s is closed: its references went "
                             "with it", c->addr);
        rc = SPW_ECLOSED;
    }
    return rc;
}

/* -------------------------------------------------------------------- wait */

typedef struct wait_set {
    const spillway_ref *refs;
    size_t n;
    size_t next;   /* refs before this are settled */
    handle *failed; /* the first of those that failed, or NULL */
} wait_set;

static bool all_settled(spillway *c, void *arg)
{
    wait_set *ws = arg;
    while (ws->next < ws->n) {
        spillway__refs_prefetch(c, ws->refs, ws->n, ws->next);
        spw_id id = {ws->refs[ws->next].hi, ws->refs[ws->next].lo};
        handle *h = spillway__handle_find(c, id);
        if (h != NULL && h->state == H_PENDING)
            return false;
        if (h != NULL && h->state == H_FAILED && ws->failed == NULL)
            ws->failed = h; /* settled for good: nothing releases it while we wait */
        ws->next++;
    }
    return true;
}

static int wait__impl(spillway *c, const spillway_ref *refs, size_t n, int timeout_ms)
{
    if (c == NULL || (refs == NULL && n > 0))
        return spillway__refuse(c, SPW_EINVAL, "spillway_wait",
                                "refs is NULL with n %zu; n must be 0 without refs", n);
    char hex[33];
    for (size_t i = 0; i < n; i++) {
        spillway__refs_prefetch(c, refs, n, i);
        if (spillway__handle_find(c, (spw_id){refs[i].hi, refs[i].lo}) == NULL) {
            spillway__set_err(c, "obj=%s is not held by this client",
                              spw_id_hex((spw_id){refs[i].hi, refs[i].lo}, hex));
            return SPW_ENOTHELD;
        }
    }
    wait_set ws = {refs, n, 0, NULL};
    int rc = spillway__run_until(c, all_settled, &ws, timeout_ms);
    if (rc != 0) {
        if (!spillway__stalled(c))
            spillway__set_err(c, "%zu of %zu results not ready: %s", n - ws.next, n,
                              spw_strerror(rc));
        return rc;
    }
    handle *h = ws.failed;
    if (h != NULL) {
        spillway__set_err(c, "task=%s failed: %s", spw_id_hex(h->id, hex),
                          h->err != NULL ? h->err : "?");
        return h->status;
    }
    return 0;
}

/* ------------------------------------------------------- public entry points */

/* Each sets spillway_errmsg when it fails (spillway__leave). */
int spillway_put_at(spillway *c, const void *data, size_t len, spillway_ref *out, const char *site)
{
    spillway *c_ = c;
    spillway__enter(c_);
    return spillway__leave(c_, put_at__impl(c, data, len, out, site), "spillway_put_at");
}

int spillway_broadcast(spillway *c, spillway_ref ref, unsigned nworkers)
{
    spillway *c_ = c;
    spillway__enter(c_);
    return spillway__leave(c_, broadcast__impl(c, ref, nworkers), "spillway_broadcast");
}

int spillway_scatter_at(spillway *c, const void *data, size_t len, unsigned nworkers,
                        spillway_ref *out, const char *site)
{
    spillway *c_ = c;
    spillway__enter(c_);
    return spillway__leave(c_, scatter_at__impl(c, data, len, nworkers, false, out, site),
                           "spillway_scatter_at");
}

static int put_replicas__impl(spillway *c, const void *data, size_t len, unsigned k,
                              spillway_ref *out, const char *site)
{
    if (c == NULL)
        return SPW_EINVAL;
    if (k > SPILLWAY_MAX_REPLICAS) {
        spillway__set_err(c, "spillway_put_replicas: k is %u, at most %u copies are kept", k,
                          SPILLWAY_MAX_REPLICAS);
        return SPW_EINVAL;
    }
    if (k <= 1) {
        unsigned saved = c->put_replicas;
        c->put_replicas = 1;
        int rc = put_at__impl(c, data, len, out, site);
        c->put_replicas = saved;
        return rc;
    }
    if (len == 0 || data == NULL || out == NULL)
        return put_at__impl(c, data, len, out, site); /* says which argument is wrong */
    return scatter_at__impl(c, data, len, k, true, out, site);
}

int spillway_put_replicas_at(spillway *c, const void *data, size_t len, unsigned k,
                             spillway_ref *out, const char *site)
{
    spillway *c_ = c;
    spillway__enter(c_);
    return spillway__leave(c_, put_replicas__impl(c, data, len, k, out, site),
                           "spillway_put_replicas_at");
}

int spillway_get(spillway *c, spillway_ref ref, int timeout_ms, void **data, size_t *len)
{
    spillway *c_ = c;
    spillway__enter(c_);
    return spillway__leave(c_, get__impl(c, ref, timeout_ms, data, len), "spillway_get");
}

int spillway_get_view(spillway *c, spillway_ref ref, int timeout_ms, spillway_view *view)
{
    spillway *c_ = c;
    spillway__enter(c_);
    return spillway__leave(c_, get_view__impl(c, ref, timeout_ms, view), "spillway_get_view");
}

int spillway_release(spillway *c, spillway_ref ref)
{
    spillway *c_ = c;
    spillway__enter(c_);
    return spillway__leave(c_, release__impl(c, ref), "spillway_release");
}

int spillway_release_many(spillway *c, const spillway_ref *refs, size_t n)
{
    spillway *c_ = c;
    spillway__enter(c_);
    return spillway__leave(c_, release_many__impl(c, refs, n), "spillway_release_many");
}

int spillway_wait(spillway *c, const spillway_ref *refs, size_t n, int timeout_ms)
{
    spillway *c_ = c;
    spillway__enter(c_);
    return spillway__leave(c_, wait__impl(c, refs, n, timeout_ms), "spillway_wait");
}
