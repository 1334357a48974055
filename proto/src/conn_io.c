/*
 * proto_conn framing: frames queued in a connection's output (owned bytes with borrowed payloads
 * spliced in) and written once per loop iteration, and input buffered, received in place for
 * large payloads (on_sink), decoded and dispatched. See conn_int.h.
 */
#include <inttypes.h>

#include "conn_int.h"

/* ----------------------------------------------------------------- output */

void conn__mark_dirty(proto_conn *c)
{
    if (c->dirty || c->state == ST_CLOSED)
        return;
    proto_ctx *ctx = c->ctx;
    c->dirty = true;
    c->dirty_next = ctx->dirty;
    ctx->dirty = c;
    if (!ctx->closing)
        uv_idle_start(&ctx->flusher, conn__flusher_cb);
}

/* ------------------------------------------------------------ held output */

static bool pos_eq(conn_pos a, conn_pos b)
{
    return a.len == b.len && a.nb == b.nb;
}

static conn_pos pos_sub(conn_pos a, conn_pos b)
{
    return (conn_pos){a.len > b.len ? a.len - b.len : 0, a.nb > b.nb ? a.nb - b.nb : 0};
}

static conn_pos out_end(const proto_conn *c)
{
    return (conn_pos){c->out.buf.len, c->out.nb};
}

/* How much of out may be written: all of it, but on a gated connection with holds pending
 * only what comes before the first of them. */
static conn_pos out_writable(const proto_conn *c)
{
    return c->gated && c->nholds > 0 ? c->covered : out_end(c);
}

/* Moves the first p of out (its owned bytes and borrowed ranges) into wout, which is empty;
 * what follows p stays in out, and the marks in it move with it. */
static void out_take(proto_conn *c, conn_pos p)
{
    outq *q = &c->out, *dst = &c->wout;
    if (pos_eq(p, out_end(c))) {
        outq t = *dst;
        *dst = *q;
        *q = t;
    } else {
        spw_buf_append(&dst->buf, q->buf.data, p.len);
        if (p.nb > dst->capb) {
            dst->capb = p.nb;
            dst->b = spw_realloc(SPW_MOD_PROTO, dst->b, dst->capb * sizeof *dst->b);
        }
        for (size_t i = 0; i < p.nb; i++) {
            dst->b[i] = q->b[i];
            dst->borrowed_bytes += q->b[i].len;
        }
        dst->nb = p.nb;
        if (q->buf.len > p.len)
            memmove(q->buf.data, q->buf.data + p.len, q->buf.len - p.len);
        q->buf.len -= p.len;
        if (q->nb > p.nb)
            memmove(q->b, q->b + p.nb, (q->nb - p.nb) * sizeof *q->b);
        q->nb -= p.nb;
        for (size_t i = 0; i < q->nb; i++)
            q->b[i].at -= p.len;
        q->borrowed_bytes -= dst->borrowed_bytes;
    }
    c->covered = pos_sub(c->covered, p);
    for (uint32_t i = 0; i < c->nholds; i++)
        c->holds[i].end = pos_sub(c->holds[i].end, p);
}

void proto_conn_set_gated(proto_conn *c, bool gated)
{
    proto_ctx *ctx = c->ctx;
    if (gated == c->gated)
        return;
    c->gated = gated;
    c->nholds = 0;
    c->covered = (conn_pos){0, 0};
    if (gated) {
        c->gated_prev = NULL;
        c->gated_next = ctx->gated;
        if (ctx->gated != NULL)
            ctx->gated->gated_prev = c;
        ctx->gated = c;
        return;
    }
    if (c->gated_prev != NULL)
        c->gated_prev->gated_next = c->gated_next;
    else
        ctx->gated = c->gated_next;
    if (c->gated_next != NULL)
        c->gated_next->gated_prev = c->gated_prev;
    c->gated_prev = c->gated_next = NULL;
    if (c->state != ST_CLOSED && (c->out.buf.len > 0 || c->out.nb > 0))
        conn__mark_dirty(c); /* what was held goes */
}

void proto_ctx_hold(proto_ctx *ctx, uint64_t epoch)
{
    for (proto_conn *c = ctx->gated, *next; c != NULL; c = next) {
        next = c->gated_next; /* a failed send may close c, which unlinks it */
        if (c->state != ST_READY)
            continue;
        conn__batch_close(c);
        if (!c->gated)
            continue;
        conn_pos end = out_end(c);
        conn_hold *last = c->nholds > 0 ? &c->holds[c->nholds - 1] : NULL;
        if (pos_eq(end, last != NULL ? last->end : c->covered))
            continue; /* nothing queued since the last hold */
        if (last != NULL && (last->epoch >= epoch || c->nholds == CONN_HOLDS)) {
            last->end = end; /* joins the last hold, which waits for the later epoch */
            if (epoch > last->epoch)
                last->epoch = epoch;
            continue;
        }
        c->holds[c->nholds++] = (conn_hold){epoch, end};
    }
}

void proto_ctx_release(proto_ctx *ctx, uint64_t upto)
{
    for (proto_conn *c = ctx->gated; c != NULL; c = c->gated_next) {
        uint32_t n = 0;
        while (n < c->nholds && c->holds[n].epoch <= upto)
            n++;
        if (n == 0)
            continue;
        c->covered = c->holds[n - 1].end;
        c->nholds -= n;
        memmove(c->holds, c->holds + n, c->nholds * sizeof *c->holds);
        if (c->state == ST_READY)
            conn__mark_dirty(c);
    }
}

/* Closes the open batched frame, if any: it is complete and queued like any other. */
void conn__batch_close(proto_conn *c)
{
    if (c->batch.n > 0)
        (void)proto_conn_send(c, proto_batch_seal(&c->batch));
}

spw_buf *proto_conn_out(proto_conn *c)
{
    conn__batch_close(c);
    return &c->out.buf;
}

proto_enc *proto_conn_batch_rec(proto_conn *c, uint32_t type)
{
    if (c->batch.n > 0 && c->batch.type != type)
        conn__batch_close(c);
    if (c->batch.n == 0)
        conn__mark_dirty(c); /* the flusher closes and writes it in this loop iteration */
    return proto_batch_rec(&c->batch, &c->out.buf, type);
}

int proto_conn_batch_commit(proto_conn *c)
{
    proto_batch *b = &c->batch;
    spw_buf *buf = &c->out.buf;
    if (c->state == ST_CLOSED) {
        buf->len = b->e.start;
        b->n = 0;
        return SPW_ECLOSED;
    }
    uint32_t limit = conn__send_limit(c);
    if (buf->len - b->e.start - PROTO_HDR_LEN > limit) {
        /* The last record does not fit: the others go as they are, it goes alone if it can. */
        uint32_t type = b->type;
        size_t len = buf->len - b->rec_at;
        uint8_t *rec = b->n > 1 ? spw_malloc(SPW_MOD_PROTO, len) : NULL;
        if (rec != NULL)
            memcpy(rec, buf->data + b->rec_at, len);
        buf->len = b->rec_at;
        b->n--;
        if (b->n > 0)
            conn__batch_close(c);
        else
            buf->len = b->e.start;
        if (rec == NULL)
            return SPW_EFRAMESIZE;
        proto_batch_rec(b, buf, type);
        spw_buf_append(buf, rec, len);
        spw_free(rec);
        return proto_conn_batch_commit(c);
    }
    if (proto_batch_full(b))
        conn__batch_close(c);
    return 0;
}

#define DEF_BATCH(NAME, name)                                                                      \
    int proto_batch_##name(proto_conn *c, uint32_t type, const proto_##name##_rec *r)              \
    {                                                                                              \
        if (c == NULL)                                                                             \
            return SPW_ECLOSED;                                                                    \
        proto_put_##name##_rec(proto_conn_batch_rec(c, type), r);                                  \
        return proto_conn_batch_commit(c);                                                         \
    }
PROTO_SCHEMA(DEF_BATCH, PROTO__NONE, PROTO__NONE, PROTO__NONE)

uint32_t conn__send_limit(const proto_conn *c)
{
    if (!c->server && c->welcome.max_frame != 0)
        return c->welcome.max_frame;
    return c->ctx->opts.limits.max_frame;
}

void conn__after_enqueue(proto_conn *c, size_t bytes)
{
    c->ctx->io[PROTO_IO_BYTES_OUT] += bytes;
    c->queued += bytes;
    if (c->queued > OUT_HIGH_WATER)
        c->above_hwm = true;
    conn__mark_dirty(c);
}

int proto_conn_send(proto_conn *c, proto_enc *e)
{
    int n = proto_enc_end(e, conn__send_limit(c));
    if (n < 0)
        return n;
    PROTO_CHECK_SENT(e->buf->data + e->start, (size_t)n, "proto_conn_send");
    if (c->state == ST_CLOSED) {
        c->out.buf.len = e->start;
        return SPW_ECLOSED;
    }
    c->ctx->io[PROTO_IO_FRAMES_OUT]++;
    conn__after_enqueue(c, (size_t)n);
    return 0;
}

#define DEF_SEND(NAME, name)                                                                       \
    int proto_send_##name(proto_conn *c, uint64_t req, const proto_##name##_msg *m)                \
    {                                                                                              \
        if (c == NULL)                                                                             \
            return SPW_ECLOSED;                                                                    \
        proto_enc e;                                                                               \
        proto_enc_##name(&e, proto_conn_out(c), req, m);                                           \
        return proto_conn_send(c, &e);                                                             \
    }
#define DEF_SEND0(NAME, name)                                                                      \
    int proto_send_##name(proto_conn *c, uint64_t req)                                             \
    {                                                                                              \
        if (c == NULL)                                                                             \
            return SPW_ECLOSED;                                                                    \
        proto_enc e;                                                                               \
        proto_enc_##name(&e, proto_conn_out(c), req);                                              \
        return proto_conn_send(c, &e);                                                             \
    }
#define DEF_SEND_ALIAS(NAME, name, OF, of) DEF_SEND(NAME, name)
PROTO_SCHEMA(PROTO__NONE, DEF_SEND, DEF_SEND0, DEF_SEND_ALIAS)

/* Counts the whole frames in len bytes of frames by their length prefixes. */
static void count_raw_frames(proto_conn *c, const void *frames, size_t len)
{
    const uint8_t *fp = frames;
    for (size_t at = 0; len - at >= PROTO_HDR_LEN;) {
        uint64_t body = ((uint64_t)fp[at] << 24) | ((uint64_t)fp[at + 1] << 16) |
                        ((uint64_t)fp[at + 2] << 8) | fp[at + 3];
        c->ctx->io[PROTO_IO_FRAMES_OUT]++;
        if (body > len - at - PROTO_HDR_LEN)
            break;
        at += PROTO_HDR_LEN + (size_t)body;
    }
}

int proto_conn_send_raw(proto_conn *c, const void *frames, size_t len)
{
    PROTO_CHECK_SENT(frames, len, "proto_conn_send_raw");
    conn__batch_close(c);
    if (c->state == ST_CLOSED)
        return SPW_ECLOSED;
    count_raw_frames(c, frames, len);
    spw_buf_append(&c->out.buf, frames, len);
    conn__after_enqueue(c, len);
    return 0;
}

int proto_conn_send_raw_borrowed(proto_conn *c, const void *frames, size_t len,
                                 void (*release)(void *arg), void *arg)
{
    PROTO_CHECK_SENT(frames, len, "proto_conn_send_raw_borrowed");
    conn__batch_close(c);
    if (c->state == ST_CLOSED) {
        if (release != NULL)
            release(arg);
        return SPW_ECLOSED;
    }
    count_raw_frames(c, frames, len);
    outq *q = &c->out;
    if (q->nb == q->capb) {
        q->capb = q->capb ? q->capb * 2 : 8;
        q->b = spw_realloc(SPW_MOD_PROTO, q->b, q->capb * sizeof *q->b);
    }
    q->b[q->nb++] = (borrow){q->buf.len, frames, len, release, arg};
    q->borrowed_bytes += len;
    conn__after_enqueue(c, len);
    return 0;
}

#ifdef SPW_CHECK_FRAMES
/* A frame whose payload is sent from elsewhere: the head (head_len bytes, ending in the
 * payload's bin header) is decoded with an empty payload in its place. */
static void check_borrowed(const uint8_t *head, size_t head_len, size_t len)
{
    uint8_t copy[512];
    size_t copy_len, data_off;
    uint64_t data_len;
    uint32_t field;
    if (head_len > sizeof copy ||
        proto_split_payload(head, head_len, sizeof copy, copy, &copy_len, &data_off, &data_len,
                            &field) != 1 ||
        data_off != head_len || data_len != len) {
        spw_log(SPW_LOG_ERR,
                "proto_conn_send_borrowed: frame type %u (%s) of %zu head bytes "
                "does not end in a bin header of its %zu payload bytes",
                head[PROTO_HDR_LEN + 1], proto_type_name(head[PROTO_HDR_LEN + 1]), head_len, len);
        abort();
    }
    proto_assert_frames(copy, copy_len, "proto_conn_send_borrowed");
}
#endif

int proto_conn_send_borrowed(proto_conn *c, proto_enc *e, const void *data, size_t len,
                             void (*release)(void *arg), void *arg)
{
    spw_buf *b = e->buf;
    size_t body = b->len - e->start - PROTO_HDR_LEN + len;
    if (body > conn__send_limit(c) || c->state == ST_CLOSED) {
        b->len = e->start;
        if (release != NULL)
            release(arg);
        return c->state == ST_CLOSED ? SPW_ECLOSED : SPW_EFRAMESIZE;
    }
    uint8_t *h = b->data + e->start;
    h[0] = (uint8_t)(body >> 24);
    h[1] = (uint8_t)(body >> 16);
    h[2] = (uint8_t)(body >> 8);
    h[3] = (uint8_t)body;
#ifdef SPW_CHECK_FRAMES
    check_borrowed(h, b->len - e->start, len);
#endif
    outq *q = &c->out;
    if (q->nb == q->capb) {
        q->capb = q->capb ? q->capb * 2 : 8;
        q->b = spw_realloc(SPW_MOD_PROTO, q->b, q->capb * sizeof *q->b);
    }
    q->b[q->nb++] = (borrow){b->len, data, len, release, arg};
    c->ctx->io[PROTO_IO_FRAMES_OUT]++;
    q->borrowed_bytes += len;
    conn__after_enqueue(c, PROTO_HDR_LEN + body);
    return 0;
}

const uint8_t *proto_conn_frame(const proto_conn *c, size_t *len)
{
    *len = c != NULL ? c->cur_frame_len : 0;
    return c != NULL ? c->cur_frame : NULL;
}

void proto_conn_error(proto_conn *c, uint64_t req, int code, const char *fmt, ...)
{
    if (c == NULL)
        return;
    char msg[PROTO_MAX_STR];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    proto_send_error(c, req, &(proto_error_msg){.code = code, .msg = msg});
}

/* The write in flight is done: its plaintext leaves the queue. */
static void write_finished(proto_conn *c)
{
    /* Output buffers are kept for the traffic that follows the handshake; before it, an
     * unauthenticated peer holds none between writes. */
    bool keep = c->state == ST_READY;
    /* TLS: wout has plaintext left to encrypt, or a slice is sealed and waits for its write. */
    bool more = c->wenc_n > 0 || (c->tls != NULL && conn__tls_sealed(c) > 0);
    if (c->wenc_n == 0)
        conn__outq_release(&c->wout, keep);
    if (!keep && !more) {
        spw_free(c->wbufs);
        c->wbufs = NULL;
        c->wbufs_cap = 0;
    }
    c->queued -= c->wout_queued;
    c->tx_done += c->wout_total;
    c->wout_total = 0;
    c->wout_queued = 0;
    if (c->wire.cap > BUF_KEEP_MAX || !keep)
        spw_buf_release(&c->wire);
    if (c->state == ST_CLOSING && c->queued == 0) {
        conn__do_close(c);
        return;
    }
    if (more || c->out.buf.len > 0 || c->out.nb > 0)
        conn__mark_dirty(c);
    if (c->above_hwm && c->queued < OUT_LOW_WATER) {
        c->above_hwm = false;
        if (c->cbs.on_drain != NULL && c->state == ST_READY)
            c->cbs.on_drain(c);
    }
}

static void write_cb(uv_write_t *req, int status)
{
    proto_conn *c = req->data;
    c->writing = false;
    if (status < 0) {
        c->wenc_n = 0;
        conn__outq_release(&c->wout, true);
        c->queued -= c->wout_queued + c->wenc_plain;
        c->wout_queued = c->wenc_plain = 0;
        if (c->state != ST_CLOSED) {
            if (c->close_status == 0)
                c->close_status = status;
            conn__do_close(c);
        }
        return;
    }
    write_finished(c);
}

/* A write failed at once: what it carried is dropped and the connection closed. */
static void write_failed(proto_conn *c, int rc)
{
    c->wenc_n = 0;
    conn__outq_release(&c->wout, true);
    c->queued -= c->wout_queued + c->wenc_plain;
    c->wout_queued = c->wenc_plain = 0;
    if (c->close_status == 0)
        c->close_status = rc;
    conn__do_close(c);
}

/* Writes bufs (wout_total bytes, carrying wout_queued of the queue): what the socket takes now,
 * the rest with uv_write. */
static void write_bufs(proto_conn *c, uv_buf_t *bufs, size_t nbufs)
{
    size_t total = c->wout_total;
    int n = uv_try_write(&c->h.stream, bufs, (unsigned)nbufs);
    if (n < 0 && n != UV_EAGAIN && n != UV_ENOSYS) {
        write_failed(c, n);
        return;
    }
    size_t done = n > 0 ? (size_t)n : 0;
    if (done == total) {
        write_finished(c);
        return;
    }
    /* Skip what went out and hand the rest to uv_write. */
    size_t first = 0;
    while (done > 0 && done >= bufs[first].len) {
        done -= bufs[first].len;
        first++;
    }
    bufs[first].base += done;
    bufs[first].len -= done;
    c->wreq.data = c;
    int rc = uv_write(&c->wreq, &c->h.stream, bufs + first, (unsigned)(nbufs - first), write_cb);
    if (rc < 0) {
        write_failed(c, rc);
        return;
    }
    c->writing = true;
}

/* c->wbufs over q: its owned bytes with the borrowed ranges spliced in. @return their count. */
static size_t outq_bufs(proto_conn *c, const outq *q)
{
    size_t need = 2 * q->nb + 1;
    if (need > c->wbufs_cap) {
        c->wbufs_cap = need;
        c->wbufs = spw_realloc(SPW_MOD_PROTO, c->wbufs, need * sizeof *c->wbufs);
    }
    size_t nbufs = 0, pos = 0;
    for (size_t i = 0; i < q->nb; i++) {
        if (q->b[i].at > pos)
            c->wbufs[nbufs++] =
                uv_buf_init((char *)q->buf.data + pos, (unsigned)(q->b[i].at - pos));
        if (q->b[i].len > 0)
            c->wbufs[nbufs++] = uv_buf_init((char *)q->b[i].ptr, (unsigned)q->b[i].len);
        pos = q->b[i].at;
    }
    if (q->buf.len > pos)
        c->wbufs[nbufs++] = uv_buf_init((char *)q->buf.data + pos, (unsigned)(q->buf.len - pos));
    return nbufs;
}

/* TLS: the ciphertext sealed so far (with whatever the handshake has to say) is written from
 * c->wire, carrying the plaintext of the slice it seals. */
static void write_sealed(proto_conn *c)
{
    size_t len = conn__tls_take(c);
    if (len == 0)
        return;
    c->wout_queued = c->wenc_plain;
    c->wenc_plain = 0;
    c->wout_total = len;
    uv_buf_t b = uv_buf_init((char *)c->wire.data, (unsigned)len);
    write_bufs(c, &b, 1);
}

/* TLS: seals the next slice of the queue (CONN_TLS_SLICE of ciphertext, so the ciphertext stays
 * a cache-sized buffer however much is queued), unless one waits for its write already. The
 * plaintext of a slice leaves c->queued when its write finishes; wout (borrowed buffers too) is
 * released once all of it is encrypted. @return whether a slice was sealed. */
static bool seal_slice(proto_conn *c)
{
    if (c->state == ST_CLOSED || !conn__tls_up(c) || conn__tls_sealed(c) > 0)
        return false;
    if (c->wenc_n == 0 && (c->out.buf.len > 0 || c->out.nb > 0)) {
        conn__batch_close(c);
        conn_pos p = out_writable(c);
        if (p.len == 0 && p.nb == 0)
            return false; /* all of it is held */
        out_take(c, p);
        c->wenc_n = outq_bufs(c, &c->wout);
        c->wenc_i = 0;
        c->wenc_off = 0;
    }
    if (c->wenc_n == 0)
        return false;
    ssize_t n = conn__tls_encrypt(c, c->wbufs, c->wenc_n, &c->wenc_i, &c->wenc_off);
    if (n < 0) {
        c->wout_queued = 0;
        write_failed(c, (int)n);
        return false;
    }
    c->wenc_plain += (size_t)n;
    if (c->wenc_i == c->wenc_n) {
        c->wenc_n = 0;
        conn__outq_release(&c->wout, true); /* encrypted: the plaintext is not needed */
    }
    return true;
}

/* Under TLS what is sealed goes out first (with whatever the handshake has to say), then the
 * next slice is sealed and written, and the one after it sealed while that write is under way,
 * so the socket has it at hand when it takes more. Frames wait while the TLS handshake runs. */
static void flush_tls(proto_conn *c)
{
    if (!c->writing)
        write_sealed(c);
    if (seal_slice(c) && !c->writing) {
        write_sealed(c);
        (void)seal_slice(c);
    }
}

void conn__flush(proto_conn *c)
{
    if (c->state == ST_CLOSED || c->state == ST_CONNECTING)
        return;
    if (c->tls != NULL) {
        flush_tls(c);
        return;
    }
    if (c->writing)
        return;
    if (c->out.buf.len == 0 && c->out.nb == 0)
        return;
    conn__batch_close(c);
    conn_pos p = out_writable(c);
    if (p.len == 0 && p.nb == 0)
        return; /* all of it is held */
    out_take(c, p);
    size_t nbufs = outq_bufs(c, &c->wout);
    c->wout_total = c->wout.buf.len + c->wout.borrowed_bytes;
    c->wout_queued = c->wout_total;
    write_bufs(c, c->wbufs, nbufs);
}

static void dispatch(proto_conn *c, const proto_msg *m)
{
    c->ctx->io[PROTO_IO_FRAMES_IN]++;
    switch (c->state) {
    case ST_READY:
        /* Liveness probes are the connection's own business: answered here, never seen by
         * the owner (proto_conn_watch). So no owner's flow control sees them either: past the
         * high-water mark a PING gets no PONG (a peer that probes while it reads gets the
         * output queued for it, which shows the connection alive as well), else a peer that
         * sends PINGs and reads nothing would have a PONG queued for each. */
        if (m->type == PROTO_PING) {
            if (!c->above_hwm)
                proto_send_pong(c, m->req);
        } else if (m->type != PROTO_PONG) {
            c->cbs.on_msg(c, m);
        }
        return;
    case ST_AWAIT_CHALLENGE:
    case ST_AWAIT_WELCOME:
        if (m->type == PROTO_ERROR) {
            char msg[256];
            spw_log(SPW_LOG_WARN, "peer=%s refused us: %s err=%s", c->peer,
                    proto_str(&m->f[F_ERROR_MSG], msg, sizeof msg),
                    spw_err_name((int)m->f[F_ERROR_CODE].i));
            proto_conn_close(c, proto_err_code(m->f[F_ERROR_CODE].i));
        } else if (c->state == ST_AWAIT_CHALLENGE && m->type == PROTO_CHALLENGE) {
            conn__on_challenge(c, m);
        } else if (c->state == ST_AWAIT_WELCOME && m->type == PROTO_WELCOME) {
            conn__on_welcome(c, m);
        } else {
            conn__refuse(c, m->req, SPW_EPROTO, "unexpected message during handshake");
        }
        return;
    case ST_AWAIT_HELLO:
        if (m->type == PROTO_HELLO)
            conn__on_hello_msg(c, m);
        else
            conn__refuse(c, m->req, SPW_EPROTO, "first message must be HELLO");
        return;
    default:
        return;
    }
}

/* Makes the connection's decode zone, whose first chunk holds size bytes. */
static void zone_make(proto_conn *c, size_t size)
{
    if (!msgpack_zone_init(&c->zone, size))
        SPW_PANIC("out of memory for a %zu byte decode zone", size);
    c->zone_first = c->zone.chunk_list.head;
}

/* The connection's decode zone, made if it has none: ZONE_FIRST once the peer is
 * authenticated, ZONE_PREAUTH before (a handshake frame needs little, and an unauthenticated
 * peer must not hold a large zone). */
msgpack_zone *conn__zone(proto_conn *c)
{
    if (c->zone_first == NULL)
        zone_make(c, c->state == ST_READY ? ZONE_FIRST : ZONE_PREAUTH);
    return &c->zone;
}

/* Makes the decode zone ready for the next frame. msgpack_zone_clear keeps only the zone's
 * first chunk and frees the others, so a frame that outgrew it (a batch of records needs a few
 * hundred KiB) would malloc its memory afresh, and the kernel fault it in, for every frame.
 * When a frame overflowed, the zone is made again
 * with a first chunk twice as large, up to ZONE_KEEP_MAX, so steady batched traffic decodes into
 * memory that is already there; a connection keeps at most that much between frames. Before the
 * handshake is done (and once the connection closes) no zone is kept between frames, and a
 * handshake's small zone is not kept past it. */
void conn__zone_reset(proto_conn *c)
{
    msgpack_zone *z = &c->zone;
    if (c->zone_first == NULL)
        return;
    if (c->state != ST_READY || z->chunk_size < ZONE_FIRST) {
        msgpack_zone_destroy(z);
        c->zone_first = NULL;
        return;
    }
    if ((const void *)z->chunk_list.head == c->zone_first || z->chunk_size >= ZONE_KEEP_MAX) {
        msgpack_zone_clear(z);
        return;
    }
    size_t size = z->chunk_size * 2;
    msgpack_zone_destroy(z);
    zone_make(c, size);
}

/* The frame at pos in `in` is incomplete and large: if it ends with a payload the owner has
 * room for, the rest of the payload is read straight there (conn__alloc_cb), and the bytes of the
 * frame received so far leave `in`. */
static void try_sink(proto_conn *c, size_t pos)
{
    if (c->cbs.on_sink == NULL || c->state != ST_READY || c->sink_declined || c->in_need < SINK_MIN)
        return;
    const uint8_t *p = c->in.data + pos;
    size_t avail = c->in.len - pos;
    size_t data_off;
    uint64_t data_len;
    int rc = proto_split_payload(p, avail, sizeof c->sink_head, c->sink_head, &c->sink_head_len,
                                 &data_off, &data_len, &c->sink_field);
    if (rc == 0)
        return;
    if (rc < 0 || data_len < SINK_MIN) {
        c->sink_declined = true;
        return;
    }
    proto_msg head;
    void *dest = NULL;
    if (proto_decode(c->sink_head, c->sink_head_len, &c->ctx->opts.limits, conn__zone(c), &head) ==
        (int)c->sink_head_len)
        dest = c->cbs.on_sink(c, &head, data_len);
    conn__zone_reset(c);
    if (dest == NULL) {
        c->sink_declined = true; /* a malformed head is reported when the frame is complete */
        return;
    }
    size_t have = avail - data_off; /* less than data_len: the frame is incomplete */
    memcpy(dest, p + data_off, have);
    c->sink = dest;
    c->sink_len = data_len;
    c->sink_got = have;
    c->in.len = pos;
    c->in_need = 0;
}

/* The payload is all in the owner's memory: the message goes out with it in place. */
static void sink_finish(proto_conn *c)
{
    proto_msg m;
    int rc = proto_decode(c->sink_head, c->sink_head_len, &c->ctx->opts.limits, conn__zone(c), &m);
    SPW_ASSERT(rc == (int)c->sink_head_len); /* it decoded when the sink began */
    m.f[c->sink_field].bin.ptr = c->sink;
    m.f[c->sink_field].bin.len = (uint32_t)c->sink_len;
    c->sink = NULL;
    c->sink_declined = false;
    dispatch(c, &m);
    conn__zone_reset(c);
}

/* The limits for the next frame: the configured ones once the handshake is done, before that
 * at most PROTO_PREAUTH_MAX_FRAME whatever max_frame says. */
static const proto_limits *conn_limits(const proto_conn *c, proto_limits *preauth)
{
    const proto_limits *lim = &c->ctx->opts.limits;
    if (c->state == ST_READY || lim->max_frame <= PROTO_PREAUTH_MAX_FRAME)
        return lim;
    *preauth = *lim;
    preauth->max_frame = PROTO_PREAUTH_MAX_FRAME;
    return preauth;
}

void conn__process_input(proto_conn *c)
{
    size_t pos = 0;
    proto_limits preauth;
    if (c->sink != NULL)
        return; /* the bytes that come next are the payload's */
    while (c->state != ST_CLOSING && c->state != ST_CLOSED && !c->paused) {
        const uint8_t *p = c->in.data + pos;
        size_t avail = c->in.len - pos;
        const proto_limits *lim = conn_limits(c, &preauth);
        /* The frame's length with its prefix (0: the prefix is not all here yet). */
        size_t flen = avail < PROTO_HDR_LEN
                          ? 0
                          : PROTO_HDR_LEN + ((size_t)p[0] << 24 | (size_t)p[1] << 16 |
                                             (size_t)p[2] << 8 | (size_t)p[3]);
        /* A decode zone is made only for a frame that is all here: proto_decode answers any
         * other from its length prefix alone (need more, too large) and never touches it. */
        msgpack_zone *zone = flen != 0 && flen <= avail ? conn__zone(c) : &c->zone;
        proto_msg m;
        int rc = proto_decode(p, avail, lim, zone, &m);
        if (rc == 0) {
            c->in_need = flen;
            try_sink(c, pos);
            break;
        }
        if (rc < 0) {
            conn__zone_reset(c);
            if (rc == SPW_EMALFORMED && c->state == ST_READY) {
                /* The length prefix is sound, so skip just this frame and go on. */
                conn__log_limited(c->ctx, LIM_MALFORMED,
                                  "peer=%s sent a malformed frame of %zu bytes: skipped", c->peer,
                                  flen);
                proto_conn_error(c, 0, rc, "malformed frame of %zu bytes skipped", flen);
                pos += flen;
                if (c->above_hwm) {
                    /* Its answers are not read either: no owner's flow control sees these
                     * frames, so the connection ends rather than queue an ERROR for each. */
                    conn__refuse(c, 0, SPW_EPROTO,
                                 "malformed frames while the answers to them are not read: "
                                 "closing connection");
                    break;
                }
                continue;
            }
            char why[160];
            if (rc == SPW_EFRAMESIZE && avail >= PROTO_HDR_LEN)
                snprintf(why, sizeof why,
                         "%s (%zu bytes declared, %u allowed%s): closing "
                         "connection",
                         spw_strerror(rc), flen - PROTO_HDR_LEN, lim->max_frame,
                         c->state == ST_READY ? "" : " before authentication");
            else
                snprintf(why, sizeof why, "%s: closing connection", spw_strerror(rc));
            conn__refuse(c, 0, rc, why);
            break;
        }
        pos += (size_t)rc;
        c->sink_declined = false;
        c->cur_frame = p;
        c->cur_frame_len = (size_t)rc;
        dispatch(c, &m);
        c->cur_frame = NULL;
        c->cur_frame_len = 0;
        conn__zone_reset(c);
    }
    if (c->state == ST_CLOSED)
        return;
    spw_buf_consume(&c->in, pos);
    if (c->in.len == 0 && (c->in.cap > BUF_KEEP_MAX || c->state != ST_READY))
        spw_buf_release(&c->in);
}

int conn__in_room(proto_conn *c, uint8_t **at, size_t *len)
{
    if (c->sink != NULL) {
        uint64_t left = c->sink_len - c->sink_got;
        *at = c->sink + c->sink_got;
        *len = left > INT32_MAX ? INT32_MAX : (size_t)left;
        return 0;
    }
    if (c->state != ST_READY) {
        /* Unauthenticated: room for one frame of at most PROTO_PREAUTH_MAX_FRAME, no more, made
         * to measure (spw_buf_reserve would round it up to twice that). A full buffer holds a
         * whole frame, decoded and consumed by now; were it full, the empty read (UV_ENOBUFS)
         * would end the connection. */
        if (c->in.cap < IN_PREAUTH) {
            uint8_t *p = spw_try_realloc(SPW_MOD_BASE, c->in.data, IN_PREAUTH);
            if (p == NULL)
                return SPW_ENOMEM;
            c->in.data = p;
            c->in.cap = IN_PREAUTH;
        }
        *at = c->in.data + c->in.len;
        *len = c->in.cap - c->in.len;
        return 0;
    }
    size_t want = IN_READ_MIN;
    if (c->in_need > c->in.len && c->in_need - c->in.len > want)
        want = c->in_need - c->in.len;
    if (c->in.cap - c->in.len < want && spw_buf_reserve(&c->in, want) != 0)
        return SPW_ENOMEM;
    size_t room = c->in.cap - c->in.len;
    *at = c->in.data + c->in.len;
    *len = room > INT32_MAX ? INT32_MAX : room;
    return 0;
}

void conn__alloc_cb(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    (void)suggested;
    proto_conn *c = h->data;
    if (c->tls != NULL) { /* ciphertext: decrypted into conn__in_room as it comes */
        *buf = uv_buf_init((char *)c->ctx->tls_rbuf, CONN_TLS_RBUF);
        return;
    }
    uint8_t *at;
    size_t len;
    if (conn__in_room(c, &at, &len) != 0) {
        *buf = uv_buf_init(NULL, 0);
        return;
    }
    *buf = uv_buf_init((char *)at, (unsigned)len);
}

void conn__input(proto_conn *c, size_t n)
{
    if (c->sink != NULL) {
        c->sink_got += n;
        if (c->sink_got == c->sink_len)
            sink_finish(c);
        return;
    }
    c->in.len += n;
    conn__process_input(c);
}

void conn__read_cb(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
    proto_conn *c = s->data;
    if (nread < 0) {
        if (c->state == ST_CLOSING || c->state == ST_CLOSED)
            return;
        int status = nread == UV_EOF ? SPW_ECLOSED : (int)nread;
        if (c->tls != NULL && !conn__tls_up(c) && c->server)
            conn__log_limited(c->ctx, LIM_TLS,
                              "peer=%s refused: TLS handshake incomplete: the peer closed the "
                              "connection (%s) err=SPW_ETLS",
                              c->peer, spw_strerror(status));
        if (c->close_status == 0)
            c->close_status = status;
        conn__do_close(c);
        return;
    }
    if (nread == 0)
        return;
    c->rx_ms = uv_now(c->h.handle.loop);
    c->ping_out = false;
    c->ctx->io[PROTO_IO_BYTES_IN] += (uint64_t)nread;
    if (c->tls != NULL) {
        conn__tls_read(c, (const uint8_t *)buf->base, (size_t)nread);
        return;
    }
    if (c->tls_detect) {
        c->in.len += (size_t)nread;
        conn__tls_detect(c);
        return;
    }
    conn__input(c, (size_t)nread);
}

/* Bytes written so far: finished writes and what left of the one in flight. */
static uint64_t tx_bytes(proto_conn *c)
{
    uint64_t n = c->tx_done;
    if (c->writing) {
        size_t left = uv_stream_get_write_queue_size(&c->h.stream);
        n += c->wout_total > left ? c->wout_total - left : 0;
    }
    return n;
}

uint64_t proto_conn_quiet_ms(proto_conn *c)
{
    /* We are not reading it: whatever the peer sends waits in the kernel. Unless we stopped
     * because it does not read our output either: then the bytes it takes are the measure. */
    if (c->paused && !c->above_hwm)
        return 0;
    uint64_t now = uv_now(c->h.handle.loop);
    uint64_t tx = tx_bytes(c);
    if (tx != c->tx_seen) {
        c->tx_seen = tx;
        c->tx_ms = now;
    }
    uint64_t last = c->rx_ms > c->tx_ms ? c->rx_ms : c->tx_ms;
    if (c->since_ms > last)
        last = c->since_ms;
    return now > last ? now - last : 0;
}

void proto_conn_watch_skip(proto_conn *c, uint64_t from_ms)
{
    if (c->state == ST_CLOSED)
        return;
    uint64_t now = uv_now(c->h.handle.loop);
    uint64_t last = c->rx_ms > c->tx_ms ? c->rx_ms : c->tx_ms;
    last = c->since_ms > last ? c->since_ms : last;
    from_ms = from_ms < now ? from_ms : now;
    /* The silence up to from_ms carries on from now; after it, nothing was read. */
    c->since_ms = last <= from_ms ? last + (now - from_ms) : now;
}

int proto_conn_watch(proto_conn *c, uint32_t quiet_ms)
{
    if (c->state != ST_READY || quiet_ms == 0)
        return 0;
    uint64_t q = proto_conn_quiet_ms(c);
    if (q >= quiet_ms) {
        spw_log(SPW_LOG_WARN, "peer=%s silent for %" PRIu64 " ms: closing the connection",
                c->peer, q);
        /* Not proto_conn_close: its drain would wait on the peer that stopped taking bytes. */
        if (c->close_status == 0)
            c->close_status = SPW_ETIMEDOUT;
        conn__do_close(c);
        return SPW_ETIMEDOUT;
    }
    if (q >= quiet_ms / 3 && !c->ping_out) {
        c->ping_out = true;
        proto_send_ping(c, 0);
    }
    return 0;
}

void conn__start(proto_conn *c)
{
    uv_read_start(&c->h.stream, conn__alloc_cb, conn__read_cb);
    c->rx_ms = uv_now(c->h.handle.loop);
    c->deadline_ns = spw_now_ns() + (uint64_t)c->ctx->opts.handshake_ms * 1000000ULL;
}
