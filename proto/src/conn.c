/*
 * proto_conn implementation.
 *
 * Ownership: a proto_ctx owns every connection and listener it created (a list each) plus two
 * handles of its own: a uv_idle that flushes dirty connections once per loop iteration (while it
 * is active poll does not block, so queued frames never wait for unrelated I/O) and an
 * unref'd uv_timer that drops peers stuck in the handshake or in a draining close. A connection
 * is freed in its close callback, right after on_close; the ctx is freed when its last handle is.
 * Invariants: a connection is on the dirty list iff c->dirty; at most one uv_write is in flight
 * per connection (c->writing); c->queued equals the bytes in out + wout + borrowed segments not
 * yet written. Everything here runs on the loop's thread.
 */
#include "spillway/conn.h"

#include <fcntl.h>
#include <sodium.h>
#include <stdio.h>
#include <string.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <utlist.h>

#define IN_READ_MIN (256u << 10)
#define OUT_HIGH_WATER (32u << 20)
#define OUT_LOW_WATER (8u << 20)
#define BUF_KEEP_MAX (8u << 20) /* buffers above this are freed when emptied */
#define CLOSE_DRAIN_MS 5000
#define SWEEP_MS 500
#define SINK_MIN (64u << 10) /* payloads at least this long may be received in place */
#define SINK_HEAD_MAX 128    /* the rest of such a frame is smaller than this */
#define KEEPALIVE_IDLE_S 60  /* TCP keepalive: first probe after this much silence, */
#define KEEPALIVE_INTVL_S 10 /* then one every 10 s; */
#define KEEPALIVE_CNT 6      /* a peer that answers none of 6 is dead (about 2 minutes) */
#define LIMIT_LOG_MS 10000   /* cap and EMFILE are logged at most once per this long */

/* Events logged at most once per LIMIT_LOG_MS, with a count of those not logged. */
enum { LIM_CAP, LIM_CLIENT_CAP, LIM_ACCEPT, LIM_LOCAL, LIM_COUNT };

typedef struct borrow {
    size_t at; /* offset in the owned buffer where these bytes go */
    const void *ptr;
    size_t len;
    void (*release)(void *arg);
    void *arg;
} borrow;

/* Bytes waiting to be written: an owned buffer with borrowed ranges spliced in. */
typedef struct outq {
    spw_buf buf;
    borrow *b;
    size_t nb, capb;
    size_t borrowed_bytes;
} outq;

enum conn_state {
    ST_CONNECTING,
    ST_AWAIT_CHALLENGE,
    ST_AWAIT_HELLO,
    ST_AWAIT_WELCOME,
    ST_READY,
    ST_CLOSING, /* draining output, then closing */
    ST_CLOSED   /* uv_close called */
};

struct proto_conn {
    union {
        uv_handle_t handle;
        uv_stream_t stream;
        uv_tcp_t tcp;
        uv_pipe_t pipe;
    } h;
    proto_ctx *ctx;
    proto_conn_cbs cbs;
    void *data;
    enum conn_state state;
    bool server;
    bool dirty;
    bool writing;
    bool above_hwm;
    bool paused;
    bool resume_pending;
    bool is_unix;
    bool counted;        /* accepted: counted in ctx->naccepted */
    bool counted_client; /* a CLIENT or PEER role: counted in ctx->nclients */
    int peer_role;
    int close_status;
    char peer[64];
    uint8_t my_nonce[PROTO_NONCE_LEN];
    uint8_t peer_nonce[PROTO_NONCE_LEN];
    proto_welcome welcome;
    uint64_t deadline_ns; /* handshake or drain deadline; 0 = none */
    spw_buf in;
    size_t in_need; /* bytes needed in `in` to complete the frame at its start */
    /* A payload being received straight into the owner's memory (cbs.on_sink): the frame's
     * head, where the payload goes and how much of it has come. */
    uint8_t *sink;
    uint64_t sink_len, sink_got;
    uint32_t sink_field;
    size_t sink_head_len;
    bool sink_declined; /* the owner (or the frame's shape) said no for the frame in progress */
    uint8_t sink_head[SINK_HEAD_MAX];
    msgpack_zone zone;
    outq out;  /* being filled */
    outq wout; /* being written */
    size_t queued;
    uv_buf_t *wbufs;
    size_t wbufs_cap;
    uv_write_t wreq;
    uv_connect_t creq;
    /* Connecting by name: the pending lookup, the addresses it gave and the next to try. */
    struct conn_gai *gai;
    struct addrinfo *ai, *ai_next;
    bool switching; /* the handle is closing to try the next address */
    proto_conn *prev, *next;
    proto_conn *dirty_next;
    proto_conn *resume_next;
};

struct proto_listener {
    union {
        uv_tcp_t tcp;
        uv_pipe_t pipe;
    };
    bool is_unix;
    bool group_set; /* Unix: members of group may connect too (proto_listener_allow_group) */
    gid_t group;
    proto_ctx *ctx;
    proto_conn_cbs cbs;
    void *data;
    proto_listener *prev, *next;
};

struct proto_ctx {
    uv_loop_t *loop;
    proto_ctx_opts opts;
    char *name;
    uint8_t *secret;
    uv_idle_t flusher;
    uv_timer_t sweeper;
    proto_conn *conns;
    proto_listener *listeners;
    proto_conn *dirty;
    proto_conn *resumed; /* paused connections to deliver buffered input for */
    bool closing;
    uint32_t naccepted;               /* server-side connections, handshakes included */
    uint32_t nclients;                /* of those, authenticated CLIENT and PEER roles */
    uint64_t lim_last_ns[LIM_COUNT];  /* when each limit event was last logged */
    uint64_t lim_quiet[LIM_COUNT];    /* events since then that were not logged */
    int handles; /* open handles we own, conns and listeners included */
    void (*done)(void *arg);
    void *done_arg;
    void *data; /* the owner's */
    uint64_t io[PROTO_IO_COUNT]; /* frames and bytes in and out, for /metrics */
};

/* A host-name lookup for a connection; separate from it, since a connection closed meanwhile
 * is freed before the lookup's callback runs (conn is NULL then). */
struct conn_gai {
    uv_getaddrinfo_t req;
    proto_conn *conn;
    char host[SPW_HOST_MAX];
};

static void conn_flush(proto_conn *c);
static void conn_do_close(proto_conn *c);
static void conn_closed_cb(uv_handle_t *h);
static void conn_switch_closed(uv_handle_t *h);
static void process_input(proto_conn *c);
static void alloc_cb(uv_handle_t *h, size_t suggested, uv_buf_t *buf);
static void read_cb(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf);

uint32_t proto_default_max_conns(uint64_t nofile)
{
    uint64_t n = nofile / 4 * 3;
    if (n > 8192)
        n = 8192;
    if (n < 16)
        n = 16;
    return (uint32_t)n;
}

uint32_t proto_reserved_conns(uint32_t max)
{
    uint32_t r = max / 8;
    if (r < 4)
        r = 4;
    if (r > 64)
        r = 64;
    return r < max ? r : max;
}

/* Logs an event of kind k now, or counts it if one was logged less than LIMIT_LOG_MS ago. */
static void log_limited(proto_ctx *ctx, int k, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void log_limited(proto_ctx *ctx, int k, const char *fmt, ...)
{
    uint64_t now = spw_now_ns();
    if (ctx->lim_last_ns[k] != 0 && now - ctx->lim_last_ns[k] < LIMIT_LOG_MS * 1000000ULL) {
        ctx->lim_quiet[k]++;
        return;
    }
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (ctx->lim_quiet[k] > 0)
        spw_log(SPW_LOG_WARN, "%s (and %llu more like it in the last %d s)", msg,
                (unsigned long long)ctx->lim_quiet[k], LIMIT_LOG_MS / 1000);
    else
        spw_log(SPW_LOG_WARN, "%s", msg);
    ctx->lim_last_ns[k] = now;
    ctx->lim_quiet[k] = 0;
}

void proto_ctx_opts_default(proto_ctx_opts *o)
{
    memset(o, 0, sizeof *o);
    o->role = PROTO_ROLE_CLIENT;
    o->name = "spillway";
    proto_limits_default(&o->limits);
    o->handshake_ms = 10000;
    o->inline_limit = PROTO_DEFAULT_INLINE_LIMIT;
    o->chunk = PROTO_DEFAULT_CHUNK;
}

/* ------------------------------------------------------------------- ctx */

static void ctx_maybe_done(proto_ctx *ctx)
{
    if (!ctx->closing || ctx->handles > 0)
        return;
    void (*done)(void *) = ctx->done;
    void *arg = ctx->done_arg;
    spw_free(ctx->name);
    if (ctx->secret != NULL)
        sodium_memzero(ctx->secret, ctx->opts.secret_len);
    spw_free(ctx->secret);
    spw_free(ctx);
    if (done != NULL)
        done(arg);
}

static void ctx_handle_closed(uv_handle_t *h)
{
    proto_ctx *ctx = h->data;
    ctx->handles--;
    ctx_maybe_done(ctx);
}

static void flusher_cb(uv_idle_t *p)
{
    proto_ctx *ctx = p->data;
    while (ctx->resumed != NULL) {
        proto_conn *c = ctx->resumed;
        ctx->resumed = c->resume_next;
        c->resume_next = NULL;
        c->resume_pending = false;
        if (!c->paused && c->state == ST_READY) {
            uv_read_start(&c->h.stream, alloc_cb, read_cb);
            process_input(c);
        }
    }
    while (ctx->dirty != NULL) {
        proto_conn *c = ctx->dirty;
        ctx->dirty = c->dirty_next;
        c->dirty = false;
        c->dirty_next = NULL;
        conn_flush(c);
    }
    uv_idle_stop(&ctx->flusher);
}

/* libuv survives EMFILE at accept by itself (it keeps a spare descriptor: closes it, accepts
 * and closes the pending connections, reopens it) but does not tell us. So a listening ctx
 * checks twice a second whether its descriptor table is full, and says so. */
static void fd_probe(proto_ctx *ctx)
{
    if (ctx->listeners == NULL)
        return;
    uv_os_fd_t lfd;
    if (uv_fileno((uv_handle_t *)&ctx->listeners->tcp, &lfd) != 0)
        return;
    int fd = fcntl(lfd, F_DUPFD_CLOEXEC, 0);
    if (fd >= 0) {
        close(fd);
        return;
    }
    if (errno == EMFILE || errno == ENFILE)
        log_limited(ctx, LIM_ACCEPT,
                    "out of file descriptors (%s): new connections are closed as they arrive; "
                    "raise the descriptor limit (LimitNOFILE=) or lower --max-connections (%u)",
                    strerror(errno), ctx->opts.max_conns);
}

static void sweeper_cb(uv_timer_t *t)
{
    proto_ctx *ctx = t->data;
    uint64_t now = spw_now_ns();
    fd_probe(ctx);
    proto_conn *c, *tmp;
    DL_FOREACH_SAFE(ctx->conns, c, tmp)
    {
        if (c->deadline_ns != 0 && now > c->deadline_ns && c->state != ST_CLOSED) {
            if (c->state == ST_CLOSING) {
                conn_do_close(c);
            } else if (c->state == ST_CONNECTING) {
                spw_log(SPW_LOG_WARN, "peer=%s connect timed out", c->peer);
                proto_conn_close(c, SPW_ETIMEDOUT);
            } else {
                spw_log(SPW_LOG_WARN, "peer=%s handshake timed out", c->peer);
                proto_conn_close(c, SPW_ETIMEDOUT);
            }
        }
    }
}

int proto_ctx_new(uv_loop_t *loop, const proto_ctx_opts *o, proto_ctx **out)
{
    if (sodium_init() < 0)
        return SPW_EIO;
    proto_ctx *ctx = spw_calloc(SPW_MOD_PROTO, 1, sizeof *ctx);
    ctx->loop = loop;
    ctx->opts = *o;
    ctx->name = spw_strdup(SPW_MOD_PROTO, o->name != NULL ? o->name : "spillway");
    ctx->opts.name = ctx->name;
    if (o->secret != NULL && o->secret_len > 0) {
        ctx->secret = spw_malloc(SPW_MOD_PROTO, o->secret_len);
        memcpy(ctx->secret, o->secret, o->secret_len);
    }
    ctx->opts.secret = ctx->secret;
    ctx->opts.secret_len = ctx->secret != NULL ? o->secret_len : 0;
    uv_idle_init(loop, &ctx->flusher);
    ctx->flusher.data = ctx;
    uv_timer_init(loop, &ctx->sweeper);
    ctx->sweeper.data = ctx;
    ctx->handles = 2;
    uv_timer_start(&ctx->sweeper, sweeper_cb, SWEEP_MS, SWEEP_MS);
    uv_unref((uv_handle_t *)&ctx->sweeper);
    *out = ctx;
    return 0;
}

void proto_ctx_set_data(proto_ctx *ctx, void *data)
{
    ctx->data = data;
}

void proto_ctx_set_name(proto_ctx *ctx, const char *name)
{
    spw_free(ctx->name);
    ctx->name = spw_strdup(SPW_MOD_PROTO, name);
    ctx->opts.name = ctx->name;
}

void *proto_ctx_data(const proto_ctx *ctx)
{
    return ctx->data;
}

proto_ctx *proto_conn_ctx(const proto_conn *c)
{
    return c->ctx;
}

uv_loop_t *proto_ctx_loop(proto_ctx *ctx)
{
    return ctx->loop;
}

void proto_ctx_io(const proto_ctx *ctx, uint64_t out[PROTO_IO_COUNT])
{
    memcpy(out, ctx->io, sizeof ctx->io);
}

const proto_ctx_opts *proto_ctx_opts_get(const proto_ctx *ctx)
{
    return &ctx->opts;
}

void proto_ctx_close(proto_ctx *ctx, void (*done)(void *arg), void *arg)
{
    if (ctx->closing)
        return;
    ctx->closing = true;
    ctx->done = done;
    ctx->done_arg = arg;
    proto_listener *l, *ltmp;
    DL_FOREACH_SAFE(ctx->listeners, l, ltmp) proto_listener_close(l);
    proto_conn *c, *tmp;
    DL_FOREACH_SAFE(ctx->conns, c, tmp)
    {
        if (c->close_status == 0)
            c->close_status = SPW_ESHUTDOWN;
        conn_do_close(c);
    }
    uv_close((uv_handle_t *)&ctx->flusher, ctx_handle_closed);
    uv_close((uv_handle_t *)&ctx->sweeper, ctx_handle_closed);
}

int proto_secret_load(const char *path, uint8_t **secret, size_t *len)
{
    struct stat st;
    if (stat(path, &st) != 0)
        return -errno;
    if ((st.st_mode & 027) != 0)
        return SPW_EACCES;
    char *data;
    size_t n;
    int rc = spw_file_read(path, 4096, &data, &n);
    if (rc != 0)
        return rc;
    while (n > 0 && (data[n - 1] == '\n' || data[n - 1] == '\r' || data[n - 1] == ' '))
        n--;
    if (n < PROTO_MIN_SECRET) {
        sodium_memzero(data, n);
        spw_free(data);
        return n == 0 ? SPW_EINVAL : SPW_ERANGE;
    }
    *secret = (uint8_t *)data;
    *len = n;
    return 0;
}

const char *proto_secret_strerror(int rc)
{
    switch (rc) {
    case SPW_EINVAL:
        return "the secret file is empty";
    case SPW_ERANGE:
        return "the secret is shorter than 16 bytes; use e.g. "
               "'head -c 32 /dev/urandom | base64'";
    case SPW_EACCES:
        return "permission denied, or its mode is too open (mode 0600 or 0640: no access for "
               "others, no writing for its group)";
    case SPW_ELIMIT:
        return "larger than 4096 bytes: not a secret file";
    default:
        return spw_strerror(rc);
    }
}

/* ----------------------------------------------------------------- auth */

static void make_proof(const proto_ctx *ctx, const char *label, const uint8_t *n1,
                       const uint8_t *n2, uint8_t role, uint8_t out[PROTO_PROOF_LEN])
{
    crypto_auth_hmacsha256_state st;
    static const uint8_t no_key[1] = {0};
    /* No secret means an empty key (libsodium wants a non-NULL pointer even for 0 bytes). */
    crypto_auth_hmacsha256_init(&st, ctx->secret != NULL ? ctx->secret : no_key,
                                ctx->opts.secret_len);
    crypto_auth_hmacsha256_update(&st, (const uint8_t *)label, strlen(label));
    crypto_auth_hmacsha256_update(&st, n1, PROTO_NONCE_LEN);
    crypto_auth_hmacsha256_update(&st, n2, PROTO_NONCE_LEN);
    crypto_auth_hmacsha256_update(&st, &role, 1);
    crypto_auth_hmacsha256_final(&st, out);
}

/* Appends HELLO: our role, host and name, my_nonce and the proof over both nonces that we hold
 * the secret, and what a worker announces (NULL: not a worker). */
static void enc_hello(proto_enc *e, spw_buf *out, const proto_ctx *ctx, const uint8_t *server_nonce,
                      const uint8_t *my_nonce, const proto_winfo_rec *worker)
{
    uint8_t proof[PROTO_PROOF_LEN];
    make_proof(ctx, "spillway-hello", server_nonce, my_nonce, (uint8_t)ctx->opts.role, proof);
    char host[256] = "";
    gethostname(host, sizeof host - 1);
    proto_enc_hello(e, out, 0,
                    &(proto_hello_msg){.version = PROTO_VERSION,
                                       .role = (uint64_t)ctx->opts.role,
                                       .nonce = {my_nonce, PROTO_NONCE_LEN},
                                       .proof = {proof, sizeof proof},
                                       .pid = (uint64_t)getpid(),
                                       .host = host,
                                       .name = ctx->name,
                                       .worker = worker});
}

/* ------------------------------------------------------------ conn basics */

static proto_conn *conn_new(proto_ctx *ctx, const proto_conn_cbs *cbs, void *data)
{
    proto_conn *c = spw_calloc(SPW_MOD_PROTO, 1, sizeof *c);
    c->ctx = ctx;
    c->cbs = *cbs;
    c->data = data;
    c->h.handle.data = c;
    msgpack_zone_init(&c->zone, 64 * 1024);
    snprintf(c->peer, sizeof c->peer, "?");
    DL_APPEND(ctx->conns, c);
    ctx->handles++;
    return c;
}

static void outq_release(outq *q, bool keep)
{
    for (size_t i = 0; i < q->nb; i++)
        if (q->b[i].release != NULL)
            q->b[i].release(q->b[i].arg);
    q->nb = 0;
    q->borrowed_bytes = 0;
    if (!keep || q->buf.cap > BUF_KEEP_MAX) {
        spw_buf_release(&q->buf);
        if (!keep) {
            spw_free(q->b);
            q->b = NULL;
            q->capb = 0;
        }
    } else {
        spw_buf_reset(&q->buf);
    }
}

static void conn_closed_cb(uv_handle_t *h)
{
    proto_conn *c = h->data;
    proto_ctx *ctx = c->ctx;
    if (c->cbs.on_close != NULL)
        c->cbs.on_close(c, c->close_status);
    outq_release(&c->out, false);
    outq_release(&c->wout, false);
    spw_buf_release(&c->in);
    msgpack_zone_destroy(&c->zone);
    spw_free(c->wbufs);
    if (c->ai != NULL)
        uv_freeaddrinfo(c->ai);
    DL_DELETE(ctx->conns, c);
    if (c->counted)
        ctx->naccepted--;
    if (c->counted_client)
        ctx->nclients--;
    spw_free(c);
    ctx->handles--;
    ctx_maybe_done(ctx);
}

static void conn_do_close(proto_conn *c)
{
    if (c->state == ST_CLOSED)
        return;
    c->state = ST_CLOSED;
    c->deadline_ns = 0;
    c->sink = NULL;
    if (c->dirty) {
        /* Unlink from the dirty list so the flusher never sees a closed connection. */
        proto_conn **pp = &c->ctx->dirty;
        while (*pp != c)
            pp = &(*pp)->dirty_next;
        *pp = c->dirty_next;
        c->dirty = false;
    }
    if (c->resume_pending) {
        proto_conn **pp = &c->ctx->resumed;
        while (*pp != c)
            pp = &(*pp)->resume_next;
        *pp = c->resume_next;
        c->resume_pending = false;
    }
    if (c->gai != NULL) {
        c->gai->conn = NULL; /* its callback frees it */
        uv_cancel((uv_req_t *)&c->gai->req);
        c->gai = NULL;
    }
    if (c->switching)
        return; /* the handle is closing already; conn_switch_closed finishes */
    uv_close(&c->h.handle, conn_closed_cb);
}

void proto_conn_close(proto_conn *c, int status)
{
    if (c->state == ST_CLOSING || c->state == ST_CLOSED)
        return;
    if (c->close_status == 0)
        c->close_status = status;
    if (c->state == ST_CONNECTING) {
        conn_do_close(c);
        return;
    }
    uv_read_stop(&c->h.stream);
    c->sink = NULL; /* nothing more is read into the owner's memory */
    c->state = ST_CLOSING;
    if (c->queued == 0 && !c->writing) {
        conn_do_close(c);
        return;
    }
    /* Let queued frames (an ERROR, a final reply) go out, but not forever. */
    c->deadline_ns = spw_now_ns() + (uint64_t)CLOSE_DRAIN_MS * 1000000ULL;
    conn_flush(c);
}

void *proto_conn_data(const proto_conn *c)
{
    return c->data;
}

void proto_conn_set_data(proto_conn *c, void *data)
{
    c->data = data;
}

int proto_conn_peer_role(const proto_conn *c)
{
    return c->peer_role;
}

const char *proto_conn_peer(const proto_conn *c)
{
    return c->peer;
}

const proto_welcome *proto_conn_welcome(const proto_conn *c)
{
    return &c->welcome;
}

bool proto_conn_is_closing(const proto_conn *c)
{
    return c->state == ST_CLOSING || c->state == ST_CLOSED;
}

size_t proto_conn_queued(const proto_conn *c)
{
    return c->queued;
}

bool proto_conn_writable(const proto_conn *c)
{
    return !c->above_hwm && c->state != ST_CLOSED && c->state != ST_CLOSING;
}

void proto_conn_pause(proto_conn *c)
{
    if (c->paused || c->state == ST_CLOSED || c->state == ST_CLOSING)
        return;
    c->paused = true;
    uv_read_stop(&c->h.stream);
}

void proto_conn_resume(proto_conn *c)
{
    if (!c->paused)
        return;
    c->paused = false;
    if (c->state != ST_READY || c->resume_pending)
        return;
    proto_ctx *ctx = c->ctx;
    c->resume_pending = true;
    c->resume_next = ctx->resumed;
    ctx->resumed = c;
    if (!ctx->closing)
        uv_idle_start(&ctx->flusher, flusher_cb);
}

/* ----------------------------------------------------------------- output */

static void mark_dirty(proto_conn *c)
{
    if (c->dirty || c->state == ST_CLOSED)
        return;
    proto_ctx *ctx = c->ctx;
    c->dirty = true;
    c->dirty_next = ctx->dirty;
    ctx->dirty = c;
    if (!ctx->closing)
        uv_idle_start(&ctx->flusher, flusher_cb);
}

spw_buf *proto_conn_out(proto_conn *c)
{
    return &c->out.buf;
}

static uint32_t send_limit(const proto_conn *c)
{
    if (!c->server && c->welcome.max_frame != 0)
        return c->welcome.max_frame;
    return c->ctx->opts.limits.max_frame;
}

static void after_enqueue(proto_conn *c, size_t bytes)
{
    c->ctx->io[PROTO_IO_BYTES_OUT] += bytes;
    c->queued += bytes;
    if (c->queued > OUT_HIGH_WATER)
        c->above_hwm = true;
    mark_dirty(c);
}

int proto_conn_send(proto_conn *c, proto_enc *e)
{
    int n = proto_enc_end(e, send_limit(c));
    if (n < 0)
        return n;
    PROTO_CHECK_SENT(e->buf->data + e->start, (size_t)n, "proto_conn_send");
    if (c->state == ST_CLOSED) {
        c->out.buf.len = e->start;
        return SPW_ECLOSED;
    }
    c->ctx->io[PROTO_IO_FRAMES_OUT]++;
    after_enqueue(c, (size_t)n);
    return 0;
}

#define DEF_SEND(NAME, name)                                                                       \
    int proto_send_##name(proto_conn *c, uint64_t req, const proto_##name##_msg *m)                \
    {                                                                                              \
        proto_enc e;                                                                               \
        proto_enc_##name(&e, proto_conn_out(c), req, m);                                           \
        return proto_conn_send(c, &e);                                                             \
    }
#define DEF_SEND0(NAME, name)                                                                      \
    int proto_send_##name(proto_conn *c, uint64_t req)                                             \
    {                                                                                              \
        proto_enc e;                                                                               \
        proto_enc_##name(&e, proto_conn_out(c), req);                                              \
        return proto_conn_send(c, &e);                                                             \
    }
#define DEF_SEND_ALIAS(NAME, name, OF, of) DEF_SEND(NAME, name)
PROTO_SCHEMA(PROTO__NONE, DEF_SEND, DEF_SEND0, DEF_SEND_ALIAS)

int proto_conn_send_raw(proto_conn *c, const void *frames, size_t len)
{
    PROTO_CHECK_SENT(frames, len, "proto_conn_send_raw");
    if (c->state == ST_CLOSED)
        return SPW_ECLOSED;
    /* Count the whole frames in the batch by their length prefixes. */
    const uint8_t *fp = frames;
    for (size_t at = 0; len - at >= PROTO_HDR_LEN;) {
        uint64_t body = ((uint64_t)fp[at] << 24) | ((uint64_t)fp[at + 1] << 16) |
                        ((uint64_t)fp[at + 2] << 8) | fp[at + 3];
        c->ctx->io[PROTO_IO_FRAMES_OUT]++;
        if (body > len - at - PROTO_HDR_LEN)
            break;
        at += PROTO_HDR_LEN + (size_t)body;
    }
    spw_buf_append(&c->out.buf, frames, len);
    after_enqueue(c, len);
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
    if (body > send_limit(c) || c->state == ST_CLOSED) {
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
    after_enqueue(c, PROTO_HDR_LEN + body);
    return 0;
}

void proto_conn_error(proto_conn *c, uint64_t req, int code, const char *fmt, ...)
{
    char msg[PROTO_MAX_STR];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    proto_send_error(c, req, &(proto_error_msg){.code = code, .msg = msg});
}

static void write_finished(proto_conn *c, size_t written)
{
    outq_release(&c->wout, true);
    c->queued -= written;
    if (c->state == ST_CLOSING && c->queued == 0) {
        conn_do_close(c);
        return;
    }
    if (c->out.buf.len > 0 || c->out.nb > 0)
        mark_dirty(c);
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
    size_t total = c->wout.buf.len + c->wout.borrowed_bytes;
    if (status < 0) {
        outq_release(&c->wout, true);
        c->queued -= total;
        if (c->state != ST_CLOSED) {
            if (c->close_status == 0)
                c->close_status = status;
            conn_do_close(c);
        }
        return;
    }
    write_finished(c, total);
}

static void conn_flush(proto_conn *c)
{
    if (c->writing || c->state == ST_CLOSED || c->state == ST_CONNECTING)
        return;
    if (c->out.buf.len == 0 && c->out.nb == 0)
        return;
    outq tmp = c->wout;
    c->wout = c->out;
    c->out = tmp;
    outq *q = &c->wout;

    size_t need = 2 * q->nb + 1;
    if (need > c->wbufs_cap) {
        c->wbufs_cap = need;
        c->wbufs = spw_realloc(SPW_MOD_PROTO, c->wbufs, need * sizeof *c->wbufs);
    }
    size_t nbufs = 0, pos = 0;
    for (size_t i = 0; i < q->nb; i++) {
        if (q->b[i].at > pos)
            c->wbufs[nbufs++] = uv_buf_init((char *)q->buf.data + pos, (unsigned)(q->b[i].at - pos));
        if (q->b[i].len > 0)
            c->wbufs[nbufs++] = uv_buf_init((char *)q->b[i].ptr, (unsigned)q->b[i].len);
        pos = q->b[i].at;
    }
    if (q->buf.len > pos)
        c->wbufs[nbufs++] = uv_buf_init((char *)q->buf.data + pos, (unsigned)(q->buf.len - pos));
    size_t total = q->buf.len + q->borrowed_bytes;

    int n = uv_try_write(&c->h.stream, c->wbufs, (unsigned)nbufs);
    if (n < 0 && n != UV_EAGAIN && n != UV_ENOSYS) {
        outq_release(q, true);
        c->queued -= total;
        if (c->close_status == 0)
            c->close_status = n;
        conn_do_close(c);
        return;
    }
    size_t done = n > 0 ? (size_t)n : 0;
    if (done == total) {
        write_finished(c, total);
        return;
    }
    /* Skip what went out and hand the rest to uv_write. */
    size_t first = 0;
    while (done > 0 && done >= c->wbufs[first].len) {
        done -= c->wbufs[first].len;
        first++;
    }
    c->wbufs[first].base += done;
    c->wbufs[first].len -= done;
    c->wreq.data = c;
    int rc = uv_write(&c->wreq, &c->h.stream, c->wbufs + first, (unsigned)(nbufs - first), write_cb);
    if (rc < 0) {
        outq_release(q, true);
        c->queued -= total;
        if (c->close_status == 0)
            c->close_status = rc;
        conn_do_close(c);
        return;
    }
    c->writing = true;
}

/* ------------------------------------------------------------------ input */

static void send_challenge(proto_conn *c)
{
    randombytes_buf(c->my_nonce, sizeof c->my_nonce);
    proto_send_challenge(c, 0,
                         &(proto_challenge_msg){.version = PROTO_VERSION,
                                                .nonce = {c->my_nonce, sizeof c->my_nonce},
                                                .role = (uint64_t)c->ctx->opts.role});
}

static void refuse(proto_conn *c, uint64_t req, int code, const char *why)
{
    spw_log(SPW_LOG_WARN, "peer=%s refused: %s err=%s", c->peer, why, spw_err_name(code));
    proto_conn_error(c, req, code, "%s", why);
    proto_conn_close(c, code);
}

/* The peer address a worker announces on this connection: its own, unless that is a wildcard
 * (it listens on 0.0.0.0 or [::]), which no peer can connect to; then the address of our end
 * of this very connection, the interface that reaches the scheduler, with the same port. */
static const char *hello_addr(proto_conn *c, const char *addr, char *buf, size_t buflen)
{
    spw_addr a;
    if (c->is_unix || spw_addr_parse(addr, -1, &a) != 0 || !spw_addr_host_is_wildcard(a.host))
        return addr;
    struct sockaddr_storage ss;
    int len = sizeof ss;
    char local[SPW_ADDR_MAX];
    spw_addr la;
    if (uv_tcp_getsockname(&c->h.tcp, (struct sockaddr *)&ss, &len) != 0 ||
        spw_addr_from_sockaddr((struct sockaddr *)&ss, local, sizeof local) != 0 ||
        spw_addr_parse(local, -1, &la) != 0)
        return addr;
    spw_addr_join(la.host, a.port, buf, buflen);
    spw_log(SPW_LOG_INFO, "listening on %s: advertising %s (our address towards %s)", addr, buf,
            c->peer);
    return buf;
}

static void on_challenge(proto_conn *c, const proto_msg *m)
{
    if (m->f[F_CHAL_VERSION].u != PROTO_VERSION) {
        char why[128];
        snprintf(why, sizeof why, "protocol version %llu, we speak %d",
                 (unsigned long long)m->f[F_CHAL_VERSION].u, PROTO_VERSION);
        refuse(c, m->req, SPW_EVERSION, why);
        return;
    }
    memcpy(c->peer_nonce, m->f[F_CHAL_NONCE].bin.ptr, PROTO_NONCE_LEN);
    c->peer_role = (int)m->f[F_CHAL_ROLE].u;
    randombytes_buf(c->my_nonce, sizeof c->my_nonce);
    const proto_hello_worker *w = c->ctx->opts.worker;
    char adv[SPW_ADDR_MAX];
    proto_winfo_rec winfo;
    if (w != NULL)
        winfo = (proto_winfo_rec){.addr = hello_addr(c, w->addr, adv, sizeof adv),
                                  .slots = w->slots,
                                  .capacity = w->capacity,
                                  .host_id = w->host_id,
                                  .local = w->local};
    proto_enc e;
    enc_hello(&e, proto_conn_out(c), c->ctx, c->peer_nonce, c->my_nonce, w != NULL ? &winfo : NULL);
    proto_conn_send(c, &e);
    c->state = ST_AWAIT_WELCOME;
}

static void on_hello_msg(proto_conn *c, const proto_msg *m)
{
    if (m->f[F_HELLO_VERSION].u != PROTO_VERSION) {
        char why[128];
        snprintf(why, sizeof why, "protocol version %llu, we speak %d",
                 (unsigned long long)m->f[F_HELLO_VERSION].u, PROTO_VERSION);
        refuse(c, m->req, SPW_EVERSION, why);
        return;
    }
    proto_ctx *ctx = c->ctx;
    uint64_t role = m->f[F_HELLO_ROLE].u;
    if (role == 0 || role > PROTO_ROLE_PEER) {
        refuse(c, m->req, SPW_EPROTO, "unknown role");
        return;
    }
    memcpy(c->peer_nonce, m->f[F_HELLO_NONCE].bin.ptr, PROTO_NONCE_LEN);
    uint8_t want[PROTO_PROOF_LEN];
    make_proof(ctx, "spillway-hello", c->my_nonce, c->peer_nonce, (uint8_t)role, want);
    if (sodium_memcmp(want, m->f[F_HELLO_PROOF].bin.ptr, PROTO_PROOF_LEN) != 0) {
        refuse(c, m->req, SPW_EAUTH, "authentication failed: wrong or missing cluster secret");
        return;
    }
    c->peer_role = (int)role;
    if ((role == PROTO_ROLE_CLIENT || role == PROTO_ROLE_PEER) && c->counted &&
        ctx->opts.max_conns > 0) {
        uint32_t quota = ctx->opts.max_conns - ctx->opts.reserved_conns;
        if (ctx->nclients >= quota) {
            char why[200];
            snprintf(why, sizeof why,
                     "too many connections: %u clients connected, the most --max-connections %u "
                     "allows (%u more are kept for workers and spillway-ctl)",
                     ctx->nclients, ctx->opts.max_conns, ctx->opts.reserved_conns);
            log_limited(ctx, LIM_CLIENT_CAP, "peer=%s refused: %s", c->peer, why);
            proto_conn_error(c, m->req, SPW_ELIMIT, "%s", why);
            proto_conn_close(c, SPW_ELIMIT);
            return;
        }
        ctx->nclients++;
        c->counted_client = true;
    }
    proto_welcome w = {0, ctx->opts.inline_limit, ctx->opts.chunk, ctx->opts.limits.max_frame};
    char err[256] = "refused";
    int rc = c->cbs.on_hello != NULL ? c->cbs.on_hello(c, m, &w, err, sizeof err) : 0;
    if (rc != 0) {
        refuse(c, m->req, rc, err);
        return;
    }
    c->welcome = w;
    uint8_t proof[PROTO_PROOF_LEN];
    make_proof(ctx, "spillway-welcome", c->peer_nonce, c->my_nonce, (uint8_t)ctx->opts.role,
               proof);
    proto_send_welcome(c, m->req,
                       &(proto_welcome_msg){.proof = {proof, sizeof proof},
                                            .session = w.session,
                                            .inline_limit = w.inline_limit,
                                            .chunk = w.chunk,
                                            .max_frame = w.max_frame});
    c->state = ST_READY;
    c->deadline_ns = 0;
}

static void on_welcome(proto_conn *c, const proto_msg *m)
{
    uint8_t want[PROTO_PROOF_LEN];
    make_proof(c->ctx, "spillway-welcome", c->my_nonce, c->peer_nonce, (uint8_t)c->peer_role,
               want);
    if (sodium_memcmp(want, m->f[F_WELCOME_PROOF].bin.ptr, PROTO_PROOF_LEN) != 0) {
        spw_log(SPW_LOG_WARN, "peer=%s did not prove the cluster secret", c->peer);
        proto_conn_close(c, SPW_EAUTH);
        return;
    }
    c->welcome.session = m->f[F_WELCOME_SESSION].u;
    c->welcome.inline_limit = m->f[F_WELCOME_INLINE_LIMIT].u;
    c->welcome.chunk = (uint32_t)(m->f[F_WELCOME_CHUNK].u > UINT32_MAX ? UINT32_MAX
                                                                        : m->f[F_WELCOME_CHUNK].u);
    uint64_t mf = m->f[F_WELCOME_MAX_FRAME].u;
    c->welcome.max_frame = (uint32_t)(mf > UINT32_MAX ? UINT32_MAX : mf);
    if (c->welcome.max_frame < 4096)
        c->welcome.max_frame = 4096;
    c->state = ST_READY;
    c->deadline_ns = 0;
    if (c->cbs.on_ready != NULL)
        c->cbs.on_ready(c, &c->welcome);
}

static void dispatch(proto_conn *c, const proto_msg *m)
{
    c->ctx->io[PROTO_IO_FRAMES_IN]++;
    switch (c->state) {
    case ST_READY:
        c->cbs.on_msg(c, m);
        return;
    case ST_AWAIT_CHALLENGE:
    case ST_AWAIT_WELCOME:
        if (m->type == PROTO_ERROR) {
            char msg[256];
            spw_log(SPW_LOG_WARN, "peer=%s refused us: %s err=%s", c->peer,
                    proto_str(&m->f[F_ERROR_MSG], msg, sizeof msg),
                    spw_err_name((int)m->f[F_ERROR_CODE].i));
            proto_conn_close(c, (int)m->f[F_ERROR_CODE].i);
        } else if (c->state == ST_AWAIT_CHALLENGE && m->type == PROTO_CHALLENGE) {
            on_challenge(c, m);
        } else if (c->state == ST_AWAIT_WELCOME && m->type == PROTO_WELCOME) {
            on_welcome(c, m);
        } else {
            refuse(c, m->req, SPW_EPROTO, "unexpected message during handshake");
        }
        return;
    case ST_AWAIT_HELLO:
        if (m->type == PROTO_HELLO)
            on_hello_msg(c, m);
        else
            refuse(c, m->req, SPW_EPROTO, "first message must be HELLO");
        return;
    default:
        return;
    }
}

/* The frame at pos in `in` is incomplete and large: if it ends with a payload the owner has
 * room for, the rest of the payload is read straight there (alloc_cb), and the bytes of the
 * frame received so far leave `in`. */
static void try_sink(proto_conn *c, size_t pos)
{
    if (c->cbs.on_sink == NULL || c->state != ST_READY || c->sink_declined ||
        c->in_need < SINK_MIN)
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
    if (proto_decode(c->sink_head, c->sink_head_len, &c->ctx->opts.limits, &c->zone, &head) ==
        (int)c->sink_head_len)
        dest = c->cbs.on_sink(c, &head, data_len);
    msgpack_zone_clear(&c->zone);
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
    int rc = proto_decode(c->sink_head, c->sink_head_len, &c->ctx->opts.limits, &c->zone, &m);
    SPW_ASSERT(rc == (int)c->sink_head_len); /* it decoded when the sink began */
    m.f[c->sink_field].bin.ptr = c->sink;
    m.f[c->sink_field].bin.len = (uint32_t)c->sink_len;
    c->sink = NULL;
    c->sink_declined = false;
    dispatch(c, &m);
    msgpack_zone_clear(&c->zone);
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

static void process_input(proto_conn *c)
{
    size_t pos = 0;
    proto_limits preauth;
    if (c->sink != NULL)
        return; /* the bytes that come next are the payload's */
    while (c->state != ST_CLOSING && c->state != ST_CLOSED && !c->paused) {
        const uint8_t *p = c->in.data + pos;
        size_t avail = c->in.len - pos;
        const proto_limits *lim = conn_limits(c, &preauth);
        proto_msg m;
        int rc = proto_decode(p, avail, lim, &c->zone, &m);
        if (rc == 0) {
            c->in_need = 0;
            if (avail >= PROTO_HDR_LEN)
                c->in_need = PROTO_HDR_LEN + ((size_t)p[0] << 24 | (size_t)p[1] << 16 |
                                              (size_t)p[2] << 8 | (size_t)p[3]);
            try_sink(c, pos);
            break;
        }
        if (rc < 0) {
            msgpack_zone_clear(&c->zone);
            if (rc == SPW_EMALFORMED && c->state == ST_READY) {
                /* The length prefix is sound, so skip just this frame and go on. */
                size_t flen = PROTO_HDR_LEN + ((size_t)p[0] << 24 | (size_t)p[1] << 16 |
                                               (size_t)p[2] << 8 | (size_t)p[3]);
                spw_log(SPW_LOG_WARN, "peer=%s sent a malformed frame of %zu bytes: skipped",
                        c->peer, flen);
                proto_conn_error(c, 0, rc, "malformed frame of %zu bytes skipped", flen);
                pos += flen;
                continue;
            }
            char why[160];
            if (rc == SPW_EFRAMESIZE && avail >= PROTO_HDR_LEN)
                snprintf(why, sizeof why, "%s (%zu bytes declared, %u allowed%s): closing "
                         "connection", spw_strerror(rc),
                         (size_t)p[0] << 24 | (size_t)p[1] << 16 | (size_t)p[2] << 8 | p[3],
                         lim->max_frame, c->state == ST_READY ? "" : " before authentication");
            else
                snprintf(why, sizeof why, "%s: closing connection", spw_strerror(rc));
            refuse(c, 0, rc, why);
            break;
        }
        pos += (size_t)rc;
        c->sink_declined = false;
        dispatch(c, &m);
        msgpack_zone_clear(&c->zone);
    }
    if (c->state == ST_CLOSED)
        return;
    spw_buf_consume(&c->in, pos);
    if (c->in.len == 0 && c->in.cap > BUF_KEEP_MAX)
        spw_buf_release(&c->in);
}

static void alloc_cb(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    (void)suggested;
    proto_conn *c = h->data;
    if (c->sink != NULL) {
        uint64_t left = c->sink_len - c->sink_got;
        *buf = uv_buf_init((char *)c->sink + c->sink_got,
                           left > UINT32_MAX ? UINT32_MAX : (unsigned)left);
        return;
    }
    size_t want = IN_READ_MIN;
    if (c->in_need > c->in.len && c->in_need - c->in.len > want)
        want = c->in_need - c->in.len;
    if (c->state != ST_READY) /* unauthenticated: room for one small frame, no more */
        want = PROTO_HDR_LEN + PROTO_PREAUTH_MAX_FRAME;
    if (c->in.cap - c->in.len < want && spw_buf_reserve(&c->in, want) != 0) {
        *buf = uv_buf_init(NULL, 0);
        return;
    }
    *buf = uv_buf_init((char *)c->in.data + c->in.len, (unsigned)(c->in.cap - c->in.len));
}

static void read_cb(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
    (void)buf;
    proto_conn *c = s->data;
    if (nread < 0) {
        if (c->state == ST_CLOSING || c->state == ST_CLOSED)
            return;
        int status = nread == UV_EOF ? SPW_ECLOSED : (int)nread;
        if (c->close_status == 0)
            c->close_status = status;
        conn_do_close(c);
        return;
    }
    if (nread == 0)
        return;
    c->ctx->io[PROTO_IO_BYTES_IN] += (uint64_t)nread;
    if (c->sink != NULL) {
        c->sink_got += (uint64_t)nread;
        if (c->sink_got == c->sink_len)
            sink_finish(c);
        return;
    }
    c->in.len += (size_t)nread;
    process_input(c);
}

static void conn_start(proto_conn *c)
{
    uv_read_start(&c->h.stream, alloc_cb, read_cb);
    c->deadline_ns = spw_now_ns() + (uint64_t)c->ctx->opts.handshake_ms * 1000000ULL;
}

static void fill_peer_name(proto_conn *c)
{
    struct sockaddr_storage ss;
    int len = sizeof ss;
    if (uv_tcp_getpeername(&c->h.tcp, (struct sockaddr *)&ss, &len) == 0)
        spw_addr_from_sockaddr((struct sockaddr *)&ss, c->peer, sizeof c->peer);
}

/* ------------------------------------------------------------- listening */

static void listener_closed(uv_handle_t *h)
{
    proto_listener *l = h->data;
    proto_ctx *ctx = l->ctx;
    DL_DELETE(ctx->listeners, l);
    spw_free(l);
    ctx->handles--;
    ctx_maybe_done(ctx);
}

void proto_listener_close(proto_listener *l)
{
    if (!uv_is_closing((uv_handle_t *)&l->tcp))
        uv_close((uv_handle_t *)&l->tcp, listener_closed);
}

/* Keepalive on a TCP connection, so a peer that vanished (power cut, cable) is noticed in
 * about two minutes even when we have nothing to send it. */
static void conn_keepalive(proto_conn *c)
{
    uv_tcp_keepalive(&c->h.tcp, 1, KEEPALIVE_IDLE_S);
    uv_os_fd_t fd;
    if (uv_fileno(&c->h.handle, &fd) == 0) {
        int intvl = KEEPALIVE_INTVL_S, cnt = KEEPALIVE_CNT;
        setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof intvl);
        setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof cnt);
    }
}

/* A failed accept. libuv keeps a spare descriptor for EMFILE/ENFILE: it closes it, accepts and
 * closes the pending connections (their peers see the connection closed), and opens it again,
 * so a full descriptor table costs no busy loop; we only say so, at most once per 10 s. */
static void accept_failed(proto_listener *l, int status)
{
    if (status == UV_EMFILE || status == UV_ENFILE)
        log_limited(l->ctx, LIM_ACCEPT,
                    "accept: %s: pending connections were closed; raise the descriptor limit "
                    "(LimitNOFILE=) or lower --max-connections (%u)",
                    uv_strerror(status), l->ctx->opts.max_conns);
    else
        log_limited(l->ctx, LIM_ACCEPT, "accept failed: %s", uv_strerror(status));
}

/* Counts an accepted connection; false (and the peer refused) if it is over the cap. */
static bool conn_admit(proto_conn *c)
{
    proto_ctx *ctx = c->ctx;
    c->counted = true;
    ctx->naccepted++;
    if (ctx->opts.max_conns == 0 || ctx->naccepted <= ctx->opts.max_conns)
        return true;
    char why[160];
    snprintf(why, sizeof why, "too many connections: --max-connections %u reached",
             ctx->opts.max_conns);
    log_limited(ctx, LIM_CAP, "peer=%s refused: %s", c->peer, why);
    c->state = ST_AWAIT_HELLO;
    proto_conn_error(c, 0, SPW_ELIMIT, "%s", why);
    proto_conn_close(c, SPW_ELIMIT);
    return false;
}

static void on_connection(uv_stream_t *server, int status)
{
    proto_listener *l = server->data;
    if (status < 0) {
        accept_failed(l, status);
        return;
    }
    proto_conn *c = conn_new(l->ctx, &l->cbs, l->data);
    c->server = true;
    uv_tcp_init(l->ctx->loop, &c->h.tcp);
    if (uv_accept(server, &c->h.stream) != 0) {
        conn_do_close(c);
        return;
    }
    uv_tcp_nodelay(&c->h.tcp, 1);
    conn_keepalive(c);
    fill_peer_name(c);
    fd_probe(l->ctx);
    if (!conn_admit(c))
        return;
    c->state = ST_AWAIT_HELLO;
    send_challenge(c);
    conn_start(c);
}

/* Turns a parsed address into a socket address; a name is looked up synchronously (used at
 * start-up, for the address to listen on), preferring an IPv4 result. */
static int addr_resolve_now(uv_loop_t *loop, const spw_addr *a, struct sockaddr_storage *ss)
{
    memset(ss, 0, sizeof *ss);
    if (a->numeric) {
        if (a->ipv6)
            return uv_ip6_addr(a->host, a->port, (struct sockaddr_in6 *)ss) == 0 ? 0 : SPW_EINVAL;
        return uv_ip4_addr(a->host, a->port, (struct sockaddr_in *)ss) == 0 ? 0 : SPW_EINVAL;
    }
    uv_getaddrinfo_t req;
    struct addrinfo hints = {0};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    int rc = uv_getaddrinfo(loop, &req, NULL, a->host, NULL, &hints);
    if (rc != 0) {
        spw_log(SPW_LOG_ERR, "host name '%s' does not resolve: %s", a->host, uv_strerror(rc));
        return SPW_ENONAME;
    }
    const struct addrinfo *pick = NULL;
    for (const struct addrinfo *ai = req.addrinfo; ai != NULL; ai = ai->ai_next) {
        if (ai->ai_family == AF_INET || (ai->ai_family == AF_INET6 && pick == NULL))
            pick = ai;
        if (pick != NULL && pick->ai_family == AF_INET)
            break;
    }
    if (pick == NULL) {
        uv_freeaddrinfo(req.addrinfo);
        spw_log(SPW_LOG_ERR, "host name '%s' has no IPv4 or IPv6 address", a->host);
        return SPW_ENONAME;
    }
    memcpy(ss, pick->ai_addr, pick->ai_addrlen);
    if (ss->ss_family == AF_INET)
        ((struct sockaddr_in *)ss)->sin_port = htons((uint16_t)a->port);
    else
        ((struct sockaddr_in6 *)ss)->sin6_port = htons((uint16_t)a->port);
    uv_freeaddrinfo(req.addrinfo);
    return 0;
}

int proto_listen(proto_ctx *ctx, const char *addr, const proto_conn_cbs *cbs, void *data,
                 proto_listener **out, char *bound, size_t boundlen)
{
    spw_addr a;
    int rc = spw_addr_parse(addr, -1, &a);
    if (rc != 0)
        return rc;
    struct sockaddr_storage ss;
    rc = addr_resolve_now(ctx->loop, &a, &ss);
    if (rc != 0)
        return rc;
    proto_listener *l = spw_calloc(SPW_MOD_PROTO, 1, sizeof *l);
    l->ctx = ctx;
    l->cbs = *cbs;
    l->data = data;
    uv_tcp_init(ctx->loop, &l->tcp);
    l->tcp.data = l;
    DL_APPEND(ctx->listeners, l);
    ctx->handles++;
    rc = uv_tcp_bind(&l->tcp, (const struct sockaddr *)&ss, 0);
    if (rc == 0)
        rc = uv_listen((uv_stream_t *)&l->tcp, 511, on_connection);
    if (rc != 0) {
        proto_listener_close(l);
        return rc;
    }
    if (bound != NULL) {
        struct sockaddr_storage got;
        int len = sizeof got;
        uv_tcp_getsockname(&l->tcp, (struct sockaddr *)&got, &len);
        spw_addr_from_sockaddr((struct sockaddr *)&got, bound, boundlen);
    }
    if (out != NULL)
        *out = l;
    return 0;
}

void proto_listener_allow_group(proto_listener *l, unsigned gid)
{
    l->group_set = true;
    l->group = (gid_t)gid;
}

/* Whether the peer on a Unix socket may use it: our euid, root, or a member of the listener's
 * group. why gets the reason for a refusal. */
static bool unix_peer_allowed(const proto_listener *l, int fd, char *peer, size_t peerlen,
                              char *why, size_t whylen)
{
    struct ucred cr;
    socklen_t len = sizeof cr;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &len) != 0) {
        snprintf(peer, peerlen, "unix");
        snprintf(why, whylen, "local socket: cannot read the peer's credentials: %s",
                 strerror(errno));
        return false;
    }
    snprintf(peer, peerlen, "unix:uid=%u,pid=%d", (unsigned)cr.uid, (int)cr.pid);
    if (cr.uid == 0 || cr.uid == geteuid())
        return true;
    if (l->group_set) {
        if (cr.gid == l->group)
            return true;
        gid_t groups[256];
        socklen_t glen = sizeof groups;
        if (getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups, &glen) == 0) {
            for (size_t i = 0; i < glen / sizeof groups[0]; i++)
                if (groups[i] == l->group)
                    return true;
        }
        snprintf(why, whylen,
                 "local socket: uid %u is neither the worker's uid %u, root, nor a member of "
                 "group %u (--local-group); use TCP",
                 (unsigned)cr.uid, (unsigned)geteuid(), (unsigned)l->group);
        return false;
    }
    snprintf(why, whylen,
             "local socket: uid %u is neither the worker's uid %u nor root (see --local-group); "
             "use TCP",
             (unsigned)cr.uid, (unsigned)geteuid());
    return false;
}

static void on_unix_connection(uv_stream_t *server, int status)
{
    proto_listener *l = server->data;
    if (status < 0) {
        accept_failed(l, status);
        return;
    }
    proto_conn *c = conn_new(l->ctx, &l->cbs, l->data);
    c->server = true;
    c->is_unix = true;
    uv_pipe_init(l->ctx->loop, &c->h.pipe, 0);
    if (uv_accept(server, &c->h.stream) != 0) {
        conn_do_close(c);
        return;
    }
    uv_os_fd_t fd = -1;
    char why[256];
    uv_fileno(&c->h.handle, &fd);
    if (!unix_peer_allowed(l, fd, c->peer, sizeof c->peer, why, sizeof why)) {
        log_limited(l->ctx, LIM_LOCAL, "peer=%s refused: %s err=SPW_EAUTH", c->peer, why);
        c->state = ST_AWAIT_HELLO;
        proto_conn_error(c, 0, SPW_EAUTH, "%s", why);
        proto_conn_close(c, SPW_EAUTH);
        return;
    }
    if (!conn_admit(c))
        return;
    c->state = ST_AWAIT_HELLO;
    send_challenge(c);
    conn_start(c);
}

static int unix_addr(const char *name, struct sockaddr_un *sun, socklen_t *len)
{
    memset(sun, 0, sizeof *sun);
    sun->sun_family = AF_UNIX;
    size_t n = strlen(name);
    if (n == 0 || n >= sizeof sun->sun_path)
        return SPW_ENAMETOOLONG;
    memcpy(sun->sun_path, name, n);
    if (name[0] == '@')
        sun->sun_path[0] = '\0';
    *len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n);
    return 0;
}

int proto_listen_unix(proto_ctx *ctx, const char *name, const proto_conn_cbs *cbs, void *data,
                      proto_listener **out)
{
    struct sockaddr_un sun;
    socklen_t len;
    int rc = unix_addr(name, &sun, &len);
    if (rc != 0)
        return rc;
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0)
        return -errno;
    if (bind(fd, (struct sockaddr *)&sun, len) != 0 || listen(fd, 128) != 0) {
        rc = -errno;
        close(fd);
        return rc;
    }
    proto_listener *l = spw_calloc(SPW_MOD_PROTO, 1, sizeof *l);
    l->ctx = ctx;
    l->cbs = *cbs;
    l->data = data;
    l->is_unix = true;
    uv_pipe_init(ctx->loop, &l->pipe, 0);
    l->pipe.data = l;
    DL_APPEND(ctx->listeners, l);
    ctx->handles++;
    rc = uv_pipe_open(&l->pipe, fd);
    if (rc == 0)
        rc = uv_listen((uv_stream_t *)&l->pipe, 128, on_unix_connection);
    if (rc != 0) {
        if (uv_fileno((uv_handle_t *)&l->pipe, &(uv_os_fd_t){0}) != 0)
            close(fd);
        proto_listener_close(l);
        return rc;
    }
    if (out != NULL)
        *out = l;
    return 0;
}

int proto_conn_send_fd(proto_conn *c, proto_enc *e, int fd)
{
    int n = proto_enc_end(e, send_limit(c));
    if (n < 0)
        return n;
    PROTO_CHECK_SENT(e->buf->data + e->start, (size_t)n, "proto_conn_send_fd");
    spw_buf *b = e->buf;
    size_t start = e->start;
    if (!c->is_unix) {
        b->len = start;
        return SPW_ENOTSUP;
    }
    if (c->writing || c->queued > 0 || c->state != ST_READY) {
        b->len = start;
        return SPW_EAGAIN;
    }
    uv_os_fd_t sock;
    if (uv_fileno(&c->h.handle, &sock) != 0) {
        b->len = start;
        return SPW_EBADF;
    }
    struct iovec iov = {b->data + start, (size_t)n};
    union {
        char buf[CMSG_SPACE(sizeof(int))];
        struct cmsghdr align;
    } ctl;
    memset(&ctl, 0, sizeof ctl);
    struct msghdr mh = {0};
    mh.msg_iov = &iov;
    mh.msg_iovlen = 1;
    mh.msg_control = ctl.buf;
    mh.msg_controllen = sizeof ctl.buf;
    struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(cm), &fd, sizeof(int));
    ssize_t w;
    do {
        w = sendmsg(sock, &mh, MSG_DONTWAIT | MSG_NOSIGNAL);
    } while (w < 0 && errno == EINTR);
    if (w < 0) {
        int rc = -errno;
        b->len = start;
        return rc;
    }
    /* The descriptor went with the first byte; whatever did not fit goes the usual way. */
    size_t left = (size_t)n - (size_t)w;
    if (left > 0) {
        memmove(b->data + start, b->data + start + w, left);
        b->len = start + left;
        after_enqueue(c, left);
    } else {
        b->len = start;
    }
    return 0;
}

/* ----------------------------------------------- local attach (blocking) */

static int io_wait(int fd, short ev, uint64_t deadline_ns)
{
    for (;;) {
        uint64_t now = spw_now_ns();
        if (now >= deadline_ns)
            return SPW_ETIMEDOUT;
        struct pollfd p = {fd, ev, 0};
        int r = poll(&p, 1, (int)((deadline_ns - now) / 1000000ULL) + 1);
        if (r > 0)
            return 0;
        if (r < 0 && errno != EINTR)
            return -errno;
    }
}

static int write_full(int fd, const uint8_t *p, size_t n, uint64_t deadline)
{
    while (n > 0) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w < 0 && (errno == EAGAIN || errno == EINTR)) {
            int rc = io_wait(fd, POLLOUT, deadline);
            if (rc != 0)
                return rc;
            continue;
        }
        if (w < 0)
            return -errno;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* Reads exactly n bytes; collects a passed descriptor if one comes along. */
static int read_full(int fd, uint8_t *p, size_t n, uint64_t deadline, int *passed)
{
    while (n > 0) {
        struct iovec iov = {p, n};
        union {
            char buf[CMSG_SPACE(sizeof(int))];
            struct cmsghdr align;
        } ctl;
        struct msghdr mh = {0};
        mh.msg_iov = &iov;
        mh.msg_iovlen = 1;
        mh.msg_control = ctl.buf;
        mh.msg_controllen = sizeof ctl.buf;
        ssize_t r = recvmsg(fd, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
        if (r < 0 && (errno == EAGAIN || errno == EINTR)) {
            int rc = io_wait(fd, POLLIN, deadline);
            if (rc != 0)
                return rc;
            continue;
        }
        if (r < 0)
            return -errno;
        if (r == 0)
            return SPW_ECLOSED;
        for (struct cmsghdr *cm = CMSG_FIRSTHDR(&mh); cm != NULL; cm = CMSG_NXTHDR(&mh, cm)) {
            if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS) {
                int got;
                memcpy(&got, CMSG_DATA(cm), sizeof got);
                if (passed != NULL && *passed < 0)
                    *passed = got;
                else
                    close(got);
            }
        }
        p += r;
        n -= (size_t)r;
    }
    return 0;
}

/* Reads one frame into b and decodes it into m (valid until b or zone change). */
static int read_frame(proto_ctx *ctx, int fd, spw_buf *b, msgpack_zone *z, proto_msg *m,
                      uint64_t deadline, int *passed)
{
    /* Every frame of this exchange is small, and all but the last come before the server has
     * proved the secret. */
    proto_limits lim = ctx->opts.limits;
    if (lim.max_frame > PROTO_PREAUTH_MAX_FRAME)
        lim.max_frame = PROTO_PREAUTH_MAX_FRAME;
    spw_buf_reset(b);
    if (spw_buf_reserve(b, PROTO_HDR_LEN) != 0)
        return SPW_ENOMEM;
    int rc = read_full(fd, b->data, PROTO_HDR_LEN, deadline, passed);
    if (rc != 0)
        return rc;
    size_t body = (size_t)b->data[0] << 24 | (size_t)b->data[1] << 16 | (size_t)b->data[2] << 8 |
                  b->data[3];
    if (body > lim.max_frame || body == 0)
        return SPW_EFRAMESIZE;
    b->len = PROTO_HDR_LEN;
    if (spw_buf_reserve(b, body) != 0)
        return SPW_ENOMEM;
    rc = read_full(fd, b->data + PROTO_HDR_LEN, body, deadline, passed);
    if (rc != 0)
        return rc;
    b->len += body;
    msgpack_zone_clear(z);
    rc = proto_decode(b->data, b->len, &lim, z, m);
    if (rc < 0)
        return rc;
    if (m->type == PROTO_ERROR)
        return (int)m->f[F_ERROR_CODE].i < 0 ? (int)m->f[F_ERROR_CODE].i : SPW_EPROTO;
    return 0;
}

int proto_local_attach(proto_ctx *ctx, const char *name, int timeout_ms, bool write,
                       int *sock_out, int *memfd_out, uint64_t *capacity)
{
    struct sockaddr_un sun;
    socklen_t alen;
    int rc = unix_addr(name, &sun, &alen);
    if (rc != 0)
        return rc;
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    if (connect(fd, (struct sockaddr *)&sun, alen) != 0) {
        rc = -errno;
        close(fd);
        return rc;
    }
    uint64_t deadline = spw_now_ns() + (uint64_t)timeout_ms * 1000000ULL;
    spw_buf in = {0}, out = {0};
    msgpack_zone z;
    msgpack_zone_init(&z, 4096);
    proto_msg m;
    int memfd = -1;
    uint8_t server_nonce[PROTO_NONCE_LEN], my_nonce[PROTO_NONCE_LEN];
    int server_role = 0;
    rc = read_frame(ctx, fd, &in, &z, &m, deadline, NULL);
    if (rc == 0 && (m.type != PROTO_CHALLENGE || m.f[F_CHAL_VERSION].u != PROTO_VERSION))
        rc = m.type == PROTO_CHALLENGE ? SPW_EVERSION : SPW_EPROTO;
    if (rc == 0) {
        memcpy(server_nonce, m.f[F_CHAL_NONCE].bin.ptr, PROTO_NONCE_LEN);
        server_role = (int)m.f[F_CHAL_ROLE].u;
        randombytes_buf(my_nonce, sizeof my_nonce);
        proto_enc e;
        enc_hello(&e, &out, ctx, server_nonce, my_nonce, NULL);
        proto_enc_end(&e, UINT32_MAX);
        PROTO_CHECK_SENT(out.data, out.len, "proto_local_attach");
        rc = write_full(fd, out.data, out.len, deadline);
    }
    if (rc == 0)
        rc = read_frame(ctx, fd, &in, &z, &m, deadline, NULL);
    if (rc == 0 && m.type != PROTO_WELCOME)
        rc = SPW_EPROTO;
    if (rc == 0) {
        uint8_t want[PROTO_PROOF_LEN];
        make_proof(ctx, "spillway-welcome", my_nonce, server_nonce, (uint8_t)server_role, want);
        if (sodium_memcmp(want, m.f[F_WELCOME_PROOF].bin.ptr, PROTO_PROOF_LEN) != 0)
            rc = SPW_EAUTH;
    }
    if (rc == 0) {
        /* Only now: the server sends the descriptor on an idle connection. */
        spw_buf_reset(&out);
        proto_enc e;
        proto_enc_arena_map(&e, &out, 1,
                            &(proto_arena_map_msg){.flags = write ? PROTO_ARENA_WRITE : 0});
        proto_enc_end(&e, UINT32_MAX);
        PROTO_CHECK_SENT(out.data, out.len, "proto_local_attach");
        rc = write_full(fd, out.data, out.len, deadline);
    }
    if (rc == 0)
        rc = read_frame(ctx, fd, &in, &z, &m, deadline, &memfd);
    if (rc == 0 && (m.type != PROTO_ARENA || memfd < 0))
        rc = SPW_EPROTO;
    if (rc == 0)
        *capacity = m.f[F_ARENA_CAPACITY].u;
    spw_buf_release(&in);
    spw_buf_release(&out);
    msgpack_zone_destroy(&z);
    if (rc != 0) {
        if (memfd >= 0)
            close(memfd);
        close(fd);
        return rc;
    }
    *sock_out = fd;
    *memfd_out = memfd;
    return 0;
}

/* ------------------------------------------------------------ connecting */

static void conn_try_next(proto_conn *c);

static void connect_cb(uv_connect_t *req, int status)
{
    proto_conn *c = req->data;
    if (c->state == ST_CLOSED)
        return;
    if (status < 0) {
        if (c->ai_next != NULL && status != UV_ECANCELED) {
            /* A name with several addresses: the next one may answer (localhost as ::1, then
             * 127.0.0.1). The handle is remade since the next may be of another family. */
            spw_log(SPW_LOG_DEBUG, "peer=%s: %s, trying its next address", c->peer,
                    uv_strerror(status));
            c->switching = true;
            uv_close(&c->h.handle, conn_switch_closed);
            return;
        }
        if (c->close_status == 0)
            c->close_status = status;
        conn_do_close(c);
        return;
    }
    uv_tcp_nodelay(&c->h.tcp, 1);
    conn_keepalive(c);
    c->state = ST_AWAIT_CHALLENGE;
    conn_start(c);
    if (c->out.buf.len > 0)
        mark_dirty(c);
}

/* Starts a connection attempt to sa on c's (initialised) handle; on failure closes c. */
static void conn_attempt(proto_conn *c, const struct sockaddr *sa)
{
    c->creq.data = c;
    int rc = uv_tcp_connect(&c->creq, &c->h.tcp, sa, connect_cb);
    if (rc != 0) {
        if (c->close_status == 0)
            c->close_status = rc;
        conn_do_close(c);
    }
}

static void conn_switch_closed(uv_handle_t *h)
{
    proto_conn *c = h->data;
    c->switching = false;
    if (c->state == ST_CLOSED) {
        conn_closed_cb(h); /* closed while switching: finish as a normal close */
        return;
    }
    uv_tcp_init(c->ctx->loop, &c->h.tcp);
    c->h.handle.data = c;
    conn_try_next(c);
}

static void conn_try_next(proto_conn *c)
{
    while (c->ai_next != NULL) {
        struct addrinfo *ai = c->ai_next;
        c->ai_next = ai->ai_next;
        if (ai->ai_family == AF_INET || ai->ai_family == AF_INET6) {
            conn_attempt(c, ai->ai_addr);
            return;
        }
    }
    if (c->close_status == 0)
        c->close_status = SPW_ENONAME;
    conn_do_close(c);
}

static void conn_gai_cb(uv_getaddrinfo_t *req, int status, struct addrinfo *res)
{
    struct conn_gai *g = req->data;
    proto_conn *c = g->conn;
    if (c == NULL) {
        /* The connection closed while the name was being looked up. */
        if (res != NULL)
            uv_freeaddrinfo(res);
        spw_free(g);
        return;
    }
    c->gai = NULL;
    if (status < 0) {
        spw_log(SPW_LOG_WARN, "host name '%s' does not resolve: %s", g->host,
                uv_strerror(status));
        spw_free(g);
        if (res != NULL)
            uv_freeaddrinfo(res);
        if (c->close_status == 0)
            c->close_status = SPW_ENONAME;
        conn_do_close(c);
        return;
    }
    spw_free(g);
    c->ai = res;
    c->ai_next = res;
    conn_try_next(c);
}

int proto_connect(proto_ctx *ctx, const char *addr, const proto_conn_cbs *cbs, void *data,
                  proto_conn **out)
{
    spw_addr a;
    int rc = spw_addr_parse(addr, -1, &a);
    if (rc != 0)
        return rc;
    if (a.port == 0 || spw_addr_host_is_wildcard(a.host))
        return SPW_EINVAL;
    struct sockaddr_storage ss;
    if (a.numeric && addr_resolve_now(ctx->loop, &a, &ss) != 0)
        return SPW_EINVAL;
    if (ctx->closing)
        return SPW_ESHUTDOWN;
    proto_conn *c = conn_new(ctx, cbs, data);
    snprintf(c->peer, sizeof c->peer, "%s", addr);
    uv_tcp_init(ctx->loop, &c->h.tcp);
    c->state = ST_CONNECTING;
    /* A connect to a host that does not answer (a partition) gives up with the handshake's
     * deadline, rather than after the kernel's SYN retries. */
    c->deadline_ns = spw_now_ns() + (uint64_t)ctx->opts.handshake_ms * 1000000ULL;
    if (a.numeric) {
        c->creq.data = c;
        rc = uv_tcp_connect(&c->creq, &c->h.tcp, (const struct sockaddr *)&ss, connect_cb);
    } else {
        /* Looked up on libuv's threadpool: the loop never blocks on DNS. */
        struct conn_gai *g = spw_calloc(SPW_MOD_PROTO, 1, sizeof *g);
        g->conn = c;
        g->req.data = g;
        snprintf(g->host, sizeof g->host, "%s", a.host);
        char port[8];
        snprintf(port, sizeof port, "%d", a.port);
        struct addrinfo hints = {0};
        hints.ai_family = AF_UNSPEC;
        hints.ai_socktype = SOCK_STREAM;
        hints.ai_flags = AI_NUMERICSERV;
        rc = uv_getaddrinfo(ctx->loop, &g->req, conn_gai_cb, g->host, port, &hints);
        if (rc == 0)
            c->gai = g;
        else
            spw_free(g);
    }
    if (rc != 0) {
        /* No callback will follow: drop the connection without calling on_close. */
        c->cbs.on_close = NULL;
        conn_do_close(c);
        return rc;
    }
    if (out != NULL)
        *out = c;
    return 0;
}

int proto_conn_open_fd(proto_ctx *ctx, int fd, const proto_conn_cbs *cbs, void *data,
                       proto_conn **out)
{
    proto_conn *c = conn_new(ctx, cbs, data);
    snprintf(c->peer, sizeof c->peer, "fd%d", fd);
    uv_pipe_init(ctx->loop, &c->h.pipe, 0);
    int rc = uv_pipe_open(&c->h.pipe, fd);
    if (rc != 0) {
        c->cbs.on_close = NULL;
        conn_do_close(c);
        return rc;
    }
    c->state = ST_READY;
    c->peer_role = PROTO_ROLE_EXECUTOR;
    uv_read_start(&c->h.stream, alloc_cb, read_cb);
    if (out != NULL)
        *out = c;
    return 0;
}
