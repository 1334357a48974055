/* Encrypted connections in process: a server ctx and a client ctx on one loop over 127.0.0.1
 * (encrypt_local), so every byte between them is TLS. Each case proves one behaviour of the
 * policy (who may connect in plaintext, who is refused and with which code) or of the data path
 * (frames and large payloads received in place arrive whole and in order, pausing holds
 * decrypted input back), and that both ctxs close cleanly with the module's heap back where it
 * was. Raw sockets stand in for peers that stop half way through a handshake. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include "test_main.h"
#include "spillway/conn.h"
#include "spillway/proto.h"

#define SECRET "tls-test-secret-0123456789"
#define CHUNK (1u << 20)
#define NCHUNKS 8

typedef struct fx {
    uv_loop_t loop;
    uv_timer_t bound, resume;
    proto_ctx *sctx, *cctx;
    char addr[64];
    proto_conn *client, *server;
    int ready, client_status, server_status;
    bool client_closed, server_closed, timed_out, encrypted_both;
    uint8_t *pattern; /* NCHUNKS * CHUNK bytes */
    uint8_t *sink;    /* the server receives large payloads here */
    int srv_got, cli_got, sinks;
    bool pause_once; /* the server pauses at its first chunk and resumes from a timer */
    int64_t heap_before;
} fx;

static fx *fx_of(proto_conn *c)
{
    return proto_ctx_data(proto_conn_ctx(c));
}

static void fx_stop(fx *f)
{
    uv_timer_stop(&f->bound);
    if (!uv_is_closing((uv_handle_t *)&f->bound))
        uv_close((uv_handle_t *)&f->bound, NULL);
    if (!uv_is_closing((uv_handle_t *)&f->resume))
        uv_close((uv_handle_t *)&f->resume, NULL);
    if (f->sctx != NULL)
        proto_ctx_close(f->sctx, NULL, NULL);
    if (f->cctx != NULL)
        proto_ctx_close(f->cctx, NULL, NULL);
    f->sctx = f->cctx = NULL;
}

static void on_bound(uv_timer_t *t)
{
    fx *f = t->data;
    f->timed_out = true;
    fx_stop(f);
}

static void send_chunk(proto_conn *c, uint8_t *pattern, int i, bool borrowed)
{
    proto_obj_data_msg d = {.id = {1, 2},
                            .total = (uint64_t)NCHUNKS * CHUNK,
                            .off = (uint64_t)i * CHUNK,
                            .flags = i == NCHUNKS - 1 ? PROTO_CHUNK_LAST : 0,
                            .data = {pattern + (size_t)i * CHUNK, CHUNK}};
    if (!borrowed) {
        assert_int_equal(proto_send_obj_data(c, (uint64_t)i, &d), 0);
        return;
    }
    proto_enc e;
    d.data.ptr = NULL;
    proto_enc_obj_data(&e, proto_conn_out(c), (uint64_t)i, &d);
    assert_int_equal(proto_conn_send_borrowed(c, &e, pattern + (size_t)i * CHUNK, CHUNK, NULL,
                                              NULL),
                     0);
}

/* A chunk is the pattern's bytes at its offset. */
static bool chunk_ok(fx *f, const proto_msg *m)
{
    if (m->type != PROTO_OBJ_DATA)
        return false;
    uint64_t off = m->f[F_DATA_OFF].u;
    const proto_val *d = &m->f[F_DATA_DATA];
    return off % CHUNK == 0 && off < (uint64_t)NCHUNKS * CHUNK && d->bin.len == CHUNK &&
           memcmp(d->bin.ptr, f->pattern + off, CHUNK) == 0;
}

static void cli_ready(proto_conn *c, const proto_welcome *w)
{
    (void)w;
    fx *f = fx_of(c);
    f->ready++;
    if (f->pattern == NULL) {
        proto_conn_close(c, 0);
        return;
    }
    for (int i = 0; i < NCHUNKS; i++)
        send_chunk(c, f->pattern, i, i % 2 == 0);
}

static void cli_msg(proto_conn *c, const proto_msg *m)
{
    fx *f = fx_of(c);
    if (!chunk_ok(f, m))
        fail_msg("client: a bad chunk (type %u)", m->type);
    if (++f->cli_got == NCHUNKS) {
        f->encrypted_both = proto_conn_is_encrypted(c) && f->server != NULL &&
                            proto_conn_is_encrypted(f->server);
        proto_conn_close(c, 0);
    }
}

static void cli_close(proto_conn *c, int status)
{
    fx *f = fx_of(c);
    f->client_closed = true;
    f->client_status = status;
    f->client = NULL;
    if (f->server == NULL || f->pattern == NULL || status != 0)
        fx_stop(f);
}

static void on_resume(uv_timer_t *t)
{
    fx *f = t->data;
    if (f->server != NULL)
        proto_conn_resume(f->server);
}

static void *srv_sink(proto_conn *c, const proto_msg *head, uint64_t len)
{
    fx *f = fx_of(c);
    uint64_t off = head->f[F_DATA_OFF].u;
    if (head->type != PROTO_OBJ_DATA || len != CHUNK || off % CHUNK != 0 ||
        off >= (uint64_t)NCHUNKS * CHUNK)
        return NULL;
    f->sinks++;
    return f->sink + off;
}

static int srv_hello(proto_conn *c, const proto_msg *hello, proto_welcome *w, char *err,
                     size_t errlen)
{
    (void)hello, (void)w, (void)err, (void)errlen;
    fx_of(c)->server = c;
    return 0;
}

static void srv_msg(proto_conn *c, const proto_msg *m)
{
    fx *f = fx_of(c);
    if (!chunk_ok(f, m))
        fail_msg("server: a bad chunk (type %u)", m->type);
    if (f->pause_once) {
        f->pause_once = false;
        proto_conn_pause(c);
        uv_timer_start(&f->resume, on_resume, 50, 0);
    }
    if (++f->srv_got == NCHUNKS)
        for (int i = 0; i < NCHUNKS; i++)
            send_chunk(c, f->pattern, i, i % 2 == 1);
}

static void srv_close(proto_conn *c, int status)
{
    fx *f = fx_of(c);
    if (c == f->server) {
        f->server = NULL;
        f->server_closed = true;
        f->server_status = status;
    }
    if (f->client == NULL && f->pattern != NULL && f->client_closed)
        fx_stop(f);
}

static const proto_conn_cbs srv_cbs = {
    .on_hello = srv_hello, .on_msg = srv_msg, .on_close = srv_close, .on_sink = srv_sink};
static const proto_conn_cbs cli_cbs = {
    .on_ready = cli_ready, .on_msg = cli_msg, .on_close = cli_close};

/* A server (encrypt s_enc) listening on 127.0.0.1; a client ctx with c_enc and secret. */
static void fx_start(fx *f, int s_enc, int c_enc, bool local, const char *client_secret)
{
    memset(f, 0, sizeof *f);
    f->heap_before = spw_heap_used(SPW_MOD_PROTO);
    assert_int_equal(uv_loop_init(&f->loop), 0);
    proto_ctx_opts o;
    proto_ctx_opts_default(&o);
    o.role = PROTO_ROLE_WORKER;
    o.secret = (const uint8_t *)SECRET;
    o.secret_len = strlen(SECRET);
    o.encrypt = s_enc;
    o.encrypt_local = local;
    o.limits.max_frame = 4 * CHUNK;
    assert_int_equal(proto_ctx_new(&f->loop, &o, &f->sctx), 0);
    proto_ctx_set_data(f->sctx, f);
    assert_int_equal(
        proto_listen(f->sctx, "127.0.0.1:0", &srv_cbs, NULL, NULL, f->addr, sizeof f->addr), 0);
    o.role = PROTO_ROLE_PEER;
    o.secret = (const uint8_t *)client_secret;
    o.secret_len = strlen(client_secret);
    o.encrypt = c_enc;
    assert_int_equal(proto_ctx_new(&f->loop, &o, &f->cctx), 0);
    proto_ctx_set_data(f->cctx, f);
    uv_timer_init(&f->loop, &f->bound);
    f->bound.data = f;
    uv_timer_start(&f->bound, on_bound, 20000, 0);
    uv_timer_init(&f->loop, &f->resume);
    f->resume.data = f;
}

static void fx_run(fx *f)
{
    if (f->cctx != NULL)
        assert_int_equal(proto_connect(f->cctx, f->addr, &cli_cbs, NULL, &f->client), 0);
    uv_run(&f->loop, UV_RUN_DEFAULT);
    assert_int_equal(uv_loop_close(&f->loop), 0);
    assert_false(f->timed_out);
    assert_int_equal(spw_heap_used(SPW_MOD_PROTO), f->heap_before);
}

/* Frames and large payloads (received in place, borrowed or copied when sent) cross a TLS
 * connection both ways whole and in order, with a pause on the way. */
static void tls_carries_frames_and_payloads_both_ways(void **state)
{
    (void)state;
    fx f;
    fx_start(&f, PROTO_ENCRYPT_REQUIRED, PROTO_ENCRYPT_YES, true, SECRET);
    f.pattern = malloc((size_t)NCHUNKS * CHUNK);
    f.sink = malloc((size_t)NCHUNKS * CHUNK);
    for (size_t i = 0; i < (size_t)NCHUNKS * CHUNK; i++)
        f.pattern[i] = (uint8_t)(i * 2654435761u >> 13);
    f.pause_once = true;
    fx_run(&f);
    assert_int_equal(f.ready, 1);
    assert_int_equal(f.srv_got, NCHUNKS);
    assert_int_equal(f.cli_got, NCHUNKS);
    assert_true(f.sinks > 0);
    assert_true(f.encrypted_both);
    assert_int_equal(f.client_status, 0);
    free(f.pattern);
    free(f.sink);
}

/* A client whose secret differs cannot finish the TLS handshake: SPW_EAUTH, nothing else. */
static void tls_wrong_secret_is_refused(void **state)
{
    (void)state;
    fx f;
    fx_start(&f, PROTO_ENCRYPT_REQUIRED, PROTO_ENCRYPT_YES, true, "another-secret-0123456789");
    fx_run(&f);
    assert_int_equal(f.ready, 0);
    assert_true(f.client_closed);
    assert_int_equal(f.client_status, SPW_EAUTH);
}

/* A client that does not encrypt is refused by --encrypt required with SPW_EENCRYPT. */
static void tls_required_refuses_plaintext(void **state)
{
    (void)state;
    fx f;
    fx_start(&f, PROTO_ENCRYPT_REQUIRED, PROTO_ENCRYPT_NO, true, SECRET);
    fx_run(&f);
    assert_int_equal(f.ready, 0);
    assert_int_equal(f.client_status, SPW_EENCRYPT);
}

/* --encrypt yes takes a plaintext client (logged), and it works unencrypted. */
static void tls_yes_accepts_plaintext(void **state)
{
    (void)state;
    fx f;
    fx_start(&f, PROTO_ENCRYPT_YES, PROTO_ENCRYPT_NO, true, SECRET);
    fx_run(&f);
    assert_int_equal(f.ready, 1);
    assert_int_equal(f.client_status, 0);
}

/* A client that encrypts, to a server that does not, is told so: SPW_EENCRYPT. */
static void tls_client_refused_by_plaintext_server(void **state)
{
    (void)state;
    fx f;
    fx_start(&f, PROTO_ENCRYPT_NO, PROTO_ENCRYPT_YES, true, SECRET);
    fx_run(&f);
    assert_int_equal(f.ready, 0);
    assert_int_equal(f.client_status, SPW_EENCRYPT);
}

/* Without encrypt_local, loopback stays plaintext on both sides, even with required. */
static void tls_loopback_stays_plain_without_encrypt_local(void **state)
{
    (void)state;
    fx f;
    fx_start(&f, PROTO_ENCRYPT_REQUIRED, PROTO_ENCRYPT_REQUIRED, false, SECRET);
    f.pattern = malloc((size_t)NCHUNKS * CHUNK);
    f.sink = malloc((size_t)NCHUNKS * CHUNK);
    memset(f.pattern, 7, (size_t)NCHUNKS * CHUNK);
    fx_run(&f);
    assert_int_equal(f.cli_got, NCHUNKS);
    assert_false(f.encrypted_both);
    free(f.pattern);
    free(f.sink);
}

/* Encryption needs the secret its key is made from. */
static void tls_needs_a_secret(void **state)
{
    (void)state;
    uv_loop_t loop;
    uv_loop_init(&loop);
    proto_ctx_opts o;
    proto_ctx_opts_default(&o);
    o.encrypt = PROTO_ENCRYPT_YES;
    proto_ctx *ctx = NULL;
    assert_int_equal(proto_ctx_new(&loop, &o, &ctx), SPW_EINVAL);
    assert_null(ctx);
    assert_int_equal(uv_loop_close(&loop), 0);
}

/* Certificates come as three files or not at all, only with encryption, and a file that
 * cannot be read fails the ctx (SPW_ETLS) rather than falling back to the secret's key. */
static void tls_certificate_files_are_checked(void **state)
{
    (void)state;
    uv_loop_t loop;
    uv_loop_init(&loop);
    proto_ctx_opts o;
    proto_ctx_opts_default(&o);
    o.secret = (const uint8_t *)SECRET;
    o.secret_len = strlen(SECRET);
    o.encrypt = PROTO_ENCRYPT_REQUIRED;
    o.tls_cert = "/nonexistent/node.pem";
    proto_ctx *ctx = NULL;
    assert_int_equal(proto_ctx_new(&loop, &o, &ctx), SPW_EINVAL);
    o.tls_key = "/nonexistent/node.key";
    o.tls_ca = "/nonexistent/ca.pem";
    assert_int_equal(proto_ctx_new(&loop, &o, &ctx), SPW_ETLS);
    o.encrypt = PROTO_ENCRYPT_NO;
    assert_int_equal(proto_ctx_new(&loop, &o, &ctx), SPW_EINVAL);
    assert_null(ctx);
    assert_int_equal(uv_loop_close(&loop), 0);
}

/* ----------------------------------------------------- raw peers mid-handshake */

typedef struct raw_fx {
    fx f;
    int lsock;     /* a plain listening socket the TLS client connects to */
    int peer;      /* its accepted end */
    uint8_t hello[4096];
    size_t hello_len;
} raw_fx;

static void raw_idle(uv_idle_t *h)
{
    raw_fx *r = h->data;
    if (r->peer < 0)
        r->peer = accept(r->lsock, NULL, NULL);
    if (r->peer >= 0) {
        ssize_t n = recv(r->peer, r->hello + r->hello_len, sizeof r->hello - r->hello_len,
                         MSG_DONTWAIT);
        if (n > 0)
            r->hello_len += (size_t)n;
        /* A TLS record header gives the length of the whole ClientHello record. */
        if (r->hello_len >= 5 &&
            r->hello_len >= 5 + (size_t)(r->hello[3] << 8 | r->hello[4])) {
            uv_idle_stop(h);
            uv_close((uv_handle_t *)h, NULL);
            fx_stop(&r->f);
        }
    }
}

static int raw_connect(const char *addr)
{
    int port = atoi(strrchr(addr, ':') + 1);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
    int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_int_equal(connect(s, (struct sockaddr *)&sa, sizeof sa), 0);
    return s;
}

/* A real ClientHello of our client, caught by a plain socket that never answers. */
static void capture_client_hello(raw_fx *r)
{
    memset(r, 0, sizeof *r);
    fx_start(&r->f, PROTO_ENCRYPT_REQUIRED, PROTO_ENCRYPT_YES, true, SECRET);
    r->lsock = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET};
    inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
    socklen_t len = sizeof sa;
    assert_int_equal(bind(r->lsock, (struct sockaddr *)&sa, sizeof sa), 0);
    assert_int_equal(listen(r->lsock, 1), 0);
    getsockname(r->lsock, (struct sockaddr *)&sa, &len);
    r->peer = -1;
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", ntohs(sa.sin_port));
    uv_idle_t idle;
    uv_idle_init(&r->f.loop, &idle);
    idle.data = r;
    uv_idle_start(&idle, raw_idle);
    assert_int_equal(proto_connect(r->f.cctx, addr, &cli_cbs, NULL, NULL), 0);
    uv_run(&r->f.loop, UV_RUN_DEFAULT);
    assert_int_equal(uv_loop_close(&r->f.loop), 0);
    close(r->peer);
    close(r->lsock);
    assert_true(r->hello_len > 5);
    assert_int_equal(r->hello[0], 0x16);
}

typedef struct feed {
    raw_fx *r;
    int sock;
    size_t send_len;
    bool hold; /* keep the socket open (the handshake deadline must end it) */
} feed;

/* A raw peer sends the first send_len bytes of the ClientHello to the server, then closes (or
 * holds the socket); after that a good client still connects. */
static void half_hello(bool hold)
{
    raw_fx r;
    capture_client_hello(&r);
    fx *f = &r.f;
    fx_start(f, PROTO_ENCRYPT_REQUIRED, PROTO_ENCRYPT_YES, true, SECRET);
    int s = raw_connect(f->addr);
    assert_int_equal(send(s, r.hello, r.hello_len / 2, MSG_NOSIGNAL), (ssize_t)(r.hello_len / 2));
    if (!hold)
        close(s);
    fx_run(f); /* the good client: connects, is ready, closes */
    assert_int_equal(f->ready, 1);
    assert_int_equal(f->client_status, 0);
    if (hold)
        close(s);
}

/* Half a ClientHello, then the peer hangs up: the server drops it and serves the next. */
static void tls_truncated_client_hello_then_close(void **state)
{
    (void)state;
    half_hello(false);
}

/* Half a ClientHello held open: the server serves others meanwhile. */
static void tls_truncated_client_hello_held(void **state)
{
    (void)state;
    half_hello(true);
}

/* Garbage after a TLS record byte fails the handshake without harm to others. */
static void tls_garbage_after_record_byte(void **state)
{
    (void)state;
    fx f;
    fx_start(&f, PROTO_ENCRYPT_YES, PROTO_ENCRYPT_YES, true, SECRET);
    int s = raw_connect(f.addr);
    uint8_t junk[300];
    for (size_t i = 0; i < sizeof junk; i++)
        junk[i] = (uint8_t)(i * 37 + 11);
    junk[0] = 0x16;
    assert_int_equal(send(s, junk, sizeof junk, MSG_NOSIGNAL), (ssize_t)sizeof junk);
    fx_run(&f);
    assert_int_equal(f.ready, 1);
    /* The server closed the junk connection: reading it ends (after any alert). */
    struct pollfd p = {s, POLLIN, 0};
    char buf[512];
    ssize_t n = 1;
    while (n > 0 && poll(&p, 1, 5000) == 1)
        n = recv(s, buf, sizeof buf, 0);
    assert_true(n <= 0);
    close(s);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(tls_carries_frames_and_payloads_both_ways),
    cmocka_unit_test(tls_wrong_secret_is_refused),
    cmocka_unit_test(tls_required_refuses_plaintext),
    cmocka_unit_test(tls_yes_accepts_plaintext),
    cmocka_unit_test(tls_client_refused_by_plaintext_server),
    cmocka_unit_test(tls_loopback_stays_plain_without_encrypt_local),
    cmocka_unit_test(tls_needs_a_secret),
    cmocka_unit_test(tls_certificate_files_are_checked),
    cmocka_unit_test(tls_truncated_client_hello_then_close),
    cmocka_unit_test(tls_truncated_client_hello_held),
    cmocka_unit_test(tls_garbage_after_record_byte),
};

SPW_TEST_MAIN(tests)
