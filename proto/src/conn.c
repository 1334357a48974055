/*
 * proto_conn: the ctx, a connection's lifecycle (creation, pause and resume, close), TCP
 * listeners and connecting by address or name. See conn_int.h for the ownership rules and the
 * other files of the module.
 */
#include "conn_int.h"


static void conn_switch_closed(uv_handle_t *h);

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

void conn__log_limited(proto_ctx *ctx, int k, const char *fmt, ...)
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
    conn__tls_ctx_free(ctx);
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

void conn__flusher_cb(uv_idle_t *p)
{
    proto_ctx *ctx = p->data;
    while (ctx->resumed != NULL) {
        proto_conn *c = ctx->resumed;
        ctx->resumed = c->resume_next;
        c->resume_next = NULL;
        c->resume_pending = false;
        if (!c->paused && c->state == ST_READY) {
            uv_read_start(&c->h.stream, conn__alloc_cb, conn__read_cb);
            conn__process_input(c);
            if (c->tls != NULL)
                conn__tls_pump(c); /* then what TLS decrypts but had no room for */
        }
    }
    while (ctx->dirty != NULL) {
        proto_conn *c = ctx->dirty;
        ctx->dirty = c->dirty_next;
        c->dirty = false;
        c->dirty_next = NULL;
        conn__flush(c);
    }
    /* A write done here runs callbacks (a borrowed buffer's release, on_drain) that may resume a
     * connection: its start of the flusher found it running, so it stays for the next pass. */
    if (ctx->resumed == NULL)
        uv_idle_stop(&ctx->flusher);
}

/* libuv survives EMFILE at accept by itself (it keeps a spare descriptor: closes it, accepts
 * and closes the pending connections, reopens it) but does not tell us. So a listening ctx
 * checks twice a second whether its descriptor table is full, and says so.
 *
 * The probe opens /dev/null rather than duplicating the listener: libuv closes descriptors
 * with a raw close syscall that ThreadSanitizer does not see, so a descriptor number it frees
 * on one thread's loop and that a dup() or fcntl(F_DUPFD) hands to another thread's loop (the
 * tests run a fake peer's loop beside the client's) reads to TSan as a race on the old
 * descriptor; open() is a creation TSan records. */
static void fd_probe(proto_ctx *ctx)
{
    if (ctx->listeners == NULL)
        return;
    int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        close(fd);
        return;
    }
    if (errno == EMFILE || errno == ENFILE)
        conn__log_limited(
            ctx, LIM_ACCEPT,
            "out of file descriptors (%s): new connections are closed as they arrive; "
            "raise the descriptor limit (LimitNOFILE=) or lower --max-connections (%u)",
            strerror(errno), ctx->opts.max_conns);
}

/* Connections that come and go (a burst of peers, a client's reconnects) leave the heap full of
 * freed records and buffers that glibc keeps rather than hands back. Once TRIM_CLOSED accepted
 * connections have closed since the last trim, the heap's free pages go back to the kernel; at
 * most once per TRIM_MIN_MS, so a steady churn costs a trim now and then, not one per close. */
static void heap_trim(proto_ctx *ctx, uint64_t now)
{
    if (ctx->closed_since_trim < TRIM_CLOSED ||
        now - ctx->trim_last_ns < (uint64_t)TRIM_MIN_MS * 1000000ULL)
        return;
    ctx->closed_since_trim = 0;
    ctx->trim_last_ns = now;
    spw_heap_trim();
}

static void sweeper_cb(uv_timer_t *t)
{
    proto_ctx *ctx = t->data;
    uint64_t now = spw_now_ns();
    fd_probe(ctx);
    heap_trim(ctx, now);
    proto_conn *c, *tmp;
    DL_FOREACH_SAFE(ctx->conns, c, tmp)
    {
        if (c->deadline_ns != 0 && now > c->deadline_ns && c->state != ST_CLOSED) {
            if (c->state == ST_CLOSING) {
                conn__do_close(c);
            } else if (c->state == ST_CONNECTING) {
                spw_log(SPW_LOG_WARN, "peer=%s connect timed out", c->peer);
                proto_conn_close(c, SPW_ETIMEDOUT);
            } else {
                if (c->server) /* anyone can leave a handshake hanging */
                    conn__log_limited(ctx, LIM_HS_TIMEOUT, "peer=%s handshake timed out",
                                      c->peer);
                else
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
    int rc = conn__tls_ctx_init(ctx);
    if (rc != 0) {
        if (ctx->secret != NULL)
            sodium_memzero(ctx->secret, ctx->opts.secret_len);
        spw_free(ctx->secret);
        spw_free(ctx->name);
        spw_free(ctx);
        return rc;
    }
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
        conn__do_close(c);
    }
    uv_close((uv_handle_t *)&ctx->flusher, ctx_handle_closed);
    uv_close((uv_handle_t *)&ctx->sweeper, ctx_handle_closed);
}

/* ------------------------------------------------------------ conn basics */

proto_conn *conn__new(proto_ctx *ctx, const proto_conn_cbs *cbs, void *data)
{
    proto_conn *c = spw_calloc(SPW_MOD_PROTO, 1, sizeof *c);
    c->ctx = ctx;
    c->cbs = *cbs;
    c->data = data;
    c->h.handle.data = c;
    snprintf(c->peer, sizeof c->peer, "?");
    DL_APPEND(ctx->conns, c);
    ctx->handles++;
    return c;
}

void conn__outq_release(outq *q, bool keep)
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
    conn__outq_release(&c->out, false);
    conn__outq_release(&c->wout, false);
    spw_buf_release(&c->in);
    spw_buf_release(&c->wire);
    conn__tls_free(c);
    if (c->zone_first != NULL)
        msgpack_zone_destroy(&c->zone);
    spw_free(c->wbufs);
    if (c->ai != NULL)
        uv_freeaddrinfo(c->ai);
    DL_DELETE(ctx->conns, c);
    if (c->counted) {
        ctx->naccepted--;
        ctx->closed_since_trim++;
    }
    if (c->counted_client)
        ctx->nclients--;
    spw_free(c);
    ctx->handles--;
    ctx_maybe_done(ctx);
}

void conn__do_close(proto_conn *c)
{
    if (c->state == ST_CLOSED)
        return;
    c->state = ST_CLOSED;
    c->deadline_ns = 0;
    c->sink = NULL;
    c->batch.n = 0; /* its bytes go with the output */
    if (c->gated)
        proto_conn_set_gated(c, false);
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
    proto_conn_set_gated(c, false); /* what it holds goes out before the close */
    conn__batch_close(c);
    if (c->close_status == 0)
        c->close_status = status;
    if (c->state == ST_CONNECTING || (c->tls != NULL && !conn__tls_up(c))) {
        /* Nothing queued can go out before TLS is up. */
        conn__do_close(c);
        return;
    }
    uv_read_stop(&c->h.stream);
    c->sink = NULL; /* nothing more is read into the owner's memory */
    c->state = ST_CLOSING;
    if (c->queued == 0 && !c->writing) {
        conn__do_close(c);
        return;
    }
    /* Let queued frames (an ERROR, a final reply) go out, but not forever. */
    c->deadline_ns = spw_now_ns() + (uint64_t)CLOSE_DRAIN_MS * 1000000ULL;
    conn__flush(c);
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

bool proto_conn_is_encrypted(const proto_conn *c)
{
    return c->tls != NULL;
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

void proto_conn_flush(proto_conn *c)
{
    conn__flush(c);
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
    c->since_ms = uv_now(c->h.handle.loop); /* its silence meanwhile was ours */
    if (c->state != ST_READY || c->resume_pending)
        return;
    proto_ctx *ctx = c->ctx;
    c->resume_pending = true;
    c->resume_next = ctx->resumed;
    ctx->resumed = c;
    if (!ctx->closing)
        uv_idle_start(&ctx->flusher, conn__flusher_cb);
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
void conn__accept_failed(proto_listener *l, int status)
{
    if (status == UV_EMFILE || status == UV_ENFILE)
        conn__log_limited(l->ctx, LIM_ACCEPT,
                          "accept: %s: pending connections were closed; raise the descriptor limit "
                          "(LimitNOFILE=) or lower --max-connections (%u)",
                          uv_strerror(status), l->ctx->opts.max_conns);
    else
        conn__log_limited(l->ctx, LIM_ACCEPT, "accept failed: %s", uv_strerror(status));
}

/* Counts an accepted connection; false (and the peer refused) if it is over the cap. */
bool conn__admit(proto_conn *c)
{
    proto_ctx *ctx = c->ctx;
    c->counted = true;
    ctx->naccepted++;
    if (ctx->opts.max_conns == 0 || ctx->naccepted <= ctx->opts.max_conns)
        return true;
    char why[160];
    snprintf(why, sizeof why, "too many connections: --max-connections %u reached",
             ctx->opts.max_conns);
    conn__log_limited(ctx, LIM_CAP, "peer=%s refused: %s", c->peer, why);
    c->state = ST_AWAIT_HELLO;
    proto_conn_error(c, 0, SPW_ELIMIT, "%s", why);
    proto_conn_close(c, SPW_ELIMIT);
    return false;
}

static void on_connection(uv_stream_t *server, int status)
{
    proto_listener *l = server->data;
    if (status < 0) {
        conn__accept_failed(l, status);
        return;
    }
    proto_conn *c = conn__new(l->ctx, &l->cbs, l->data);
    c->server = true;
    uv_tcp_init(l->ctx->loop, &c->h.tcp);
    if (uv_accept(server, &c->h.stream) != 0) {
        conn__do_close(c);
        return;
    }
    uv_tcp_nodelay(&c->h.tcp, 1);
    conn_keepalive(c);
    fill_peer_name(c);
    fd_probe(l->ctx);
    if (!conn__admit(c))
        return;
    c->state = ST_AWAIT_HELLO;
    c->tls_detect = true; /* the peer's first byte says whether it speaks TLS */
    conn__send_challenge(c);
    conn__start(c);
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
        conn__do_close(c);
        return;
    }
    uv_tcp_nodelay(&c->h.tcp, 1);
    conn_keepalive(c);
    c->state = ST_AWAIT_CHALLENGE;
    if (c->ctx->tls != NULL && conn__tls_wanted(c)) {
        int rc = conn__tls_start(c, false);
        if (rc != 0) {
            if (c->close_status == 0)
                c->close_status = rc;
            conn__do_close(c);
            return;
        }
    }
    conn__start(c);
    if (c->out.buf.len > 0)
        conn__mark_dirty(c);
}

/* Starts a connection attempt to sa on c's (initialised) handle; on failure closes c. */
static void conn_attempt(proto_conn *c, const struct sockaddr *sa)
{
    c->creq.data = c;
    int rc = uv_tcp_connect(&c->creq, &c->h.tcp, sa, connect_cb);
    if (rc != 0) {
        if (c->close_status == 0)
            c->close_status = rc;
        conn__do_close(c);
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
    conn__do_close(c);
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
        conn__do_close(c);
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
    if (strncmp(addr, PROTO_UNIX_PREFIX, strlen(PROTO_UNIX_PREFIX)) == 0)
        return conn__connect_unix(ctx, addr + strlen(PROTO_UNIX_PREFIX), cbs, data, out);
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
    proto_conn *c = conn__new(ctx, cbs, data);
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
        conn__do_close(c);
        return rc;
    }
    if (out != NULL)
        *out = c;
    return 0;
}

int proto_conn_open_fd(proto_ctx *ctx, int fd, const proto_conn_cbs *cbs, void *data,
                       proto_conn **out)
{
    proto_conn *c = conn__new(ctx, cbs, data);
    snprintf(c->peer, sizeof c->peer, "fd%d", fd);
    uv_pipe_init(ctx->loop, &c->h.pipe, 0);
    int rc = uv_pipe_open(&c->h.pipe, fd);
    if (rc != 0) {
        c->cbs.on_close = NULL;
        conn__do_close(c);
        return rc;
    }
    c->state = ST_READY;
    c->peer_role = PROTO_ROLE_EXECUTOR;
    c->rx_ms = uv_now(ctx->loop);
    uv_read_start(&c->h.stream, conn__alloc_cb, conn__read_cb);
    if (out != NULL)
        *out = c;
    return 0;
}
