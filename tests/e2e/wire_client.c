/* The raw wire client of the end-to-end tests; see wire_client.h. */
#include "wire_client.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include <cmocka.h>
#include <sodium.h>

#include "spillway/base.h"

const char *wire_err_name(int64_t code)
{
    return spw_err_name((int)code);
}

/* A socket of this domain with the read and write timeouts, and the state of a connection;
 * the caller connects w->fd. */
static wire *wire_new(int domain)
{
    if (sodium_init() < 0)
        fail_msg("sodium_init failed");
    wire *w = calloc(1, sizeof *w);
    assert_non_null(w);
    w->fd = socket(domain, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(w->fd >= 0);
    struct timeval tv = {WIRE_TIMEOUT_S, 0};
    setsockopt(w->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(w->fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    msgpack_zone_init(&w->zone, 4096);
    proto_limits_default(&w->lim);
    return w;
}

wire *wire_open(const char *addr)
{
    char host[64];
    int port;
    if (spw_addr_split(addr, host, &port) != 0)
        fail_msg("bad address %s", addr);
    struct sockaddr_in sin;
    memset(&sin, 0, sizeof sin);
    sin.sin_family = AF_INET;
    sin.sin_port = htons((uint16_t)port);
    if (inet_pton(AF_INET, strcmp(host, "localhost") == 0 ? "127.0.0.1" : host, &sin.sin_addr) != 1)
        fail_msg("bad host %s", host);
    wire *w = wire_new(AF_INET);
    int one = 1;
    setsockopt(w->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (connect(w->fd, (struct sockaddr *)&sin, sizeof sin) != 0)
        fail_msg("connect to %s: %s", addr, strerror(errno));
    return w;
}

wire *wire_open_local(int pid)
{
    FILE *f = fopen("/proc/net/unix", "re");
    assert_non_null(f);
    char line[512], want[64], name[108] = "";
    snprintf(want, sizeof want, "@spillway-worker-%d-", pid);
    while (name[0] == '\0' && fgets(line, sizeof line, f) != NULL) {
        char *p = strstr(line, want);
        if (p != NULL) {
            p[strcspn(p, " \n")] = '\0';
            snprintf(name, sizeof name, "%s", p);
        }
    }
    fclose(f);
    if (name[0] == '\0')
        fail_msg("no local socket of worker %d in /proc/net/unix", pid);
    struct sockaddr_un sun;
    memset(&sun, 0, sizeof sun);
    sun.sun_family = AF_UNIX;
    size_t n = strlen(name);
    memcpy(sun.sun_path + 1, name + 1, n - 1); /* abstract: a NUL where the '@' is */
    socklen_t alen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n);
    wire *w = wire_new(AF_UNIX);
    if (connect(w->fd, (struct sockaddr *)&sun, alen) != 0)
        fail_msg("connect to %s: %s", name, strerror(errno));
    return w;
}

void wire_close(wire *w)
{
    if (w == NULL)
        return;
    if (w->fd >= 0)
        close(w->fd);
    spw_buf_release(&w->in);
    spw_buf_release(&w->out);
    msgpack_zone_destroy(&w->zone);
    free(w);
}

/* Sends n bytes; false if the daemon has closed the connection already. */
bool wire_send(wire *w, const void *p, size_t n)
{
    const uint8_t *b = p;
    while (n > 0) {
        ssize_t k = send(w->fd, b, n, MSG_NOSIGNAL);
        if (k < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EPIPE || errno == ECONNRESET)
                return false;
            fail_msg("send: %s", strerror(errno));
        }
        b += k;
        n -= (size_t)k;
    }
    return true;
}

/* Reads the next frame into w->m. Returns 1, 0 when the daemon closed the connection, or
 * -ETIMEDOUT. A frame the daemon sends that our decoder refuses fails the test. */
int wire_read(wire *w)
{
    if (w->consumed > 0) {
        spw_buf_consume(&w->in, w->consumed);
        w->consumed = 0;
        msgpack_zone_clear(&w->zone);
    }
    for (;;) {
        int rc = proto_decode(w->in.data, w->in.len, &w->lim, &w->zone, &w->m);
        if (rc > 0) {
            w->consumed = (size_t)rc;
            return 1;
        }
        if (rc < 0)
            fail_msg("the daemon sent a frame we cannot decode: %s", wire_err_name(rc));
        if (spw_buf_reserve(&w->in, 64 * 1024) != 0)
            fail_msg("out of memory");
        ssize_t n = recv(w->fd, w->in.data + w->in.len, w->in.cap - w->in.len, 0);
        if (n == 0)
            return 0;
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno == ECONNRESET)
                return 0;
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                return -ETIMEDOUT;
            fail_msg("recv: %s", strerror(errno));
        }
        w->in.len += (size_t)n;
    }
}

static void stash_one(wire *w, const proto_val *f)
{
    if (w->nstash == WIRE_MAX_STASH)
        fail_msg("too many unclaimed TASK_RESULT frames");
    stashed_result *r = &w->stash[w->nstash++];
    memset(r, 0, sizeof *r);
    r->id = f[F_TRES_ID].id;
    r->status = f[F_TRES_STATUS].i;
    r->size = f[F_TRES_SIZE].u;
    if (!f[F_TRES_INLINE].nil && f[F_TRES_INLINE].bin.len == 8) {
        r->has_inline = true;
        memcpy(r->inl, f[F_TRES_INLINE].bin.ptr, 8);
    }
}

/* Keeps the results of a TASK_RESULT or a TASK_RESULTS for wire_task_result. */
static void stash_result(wire *w, const proto_msg *m)
{
    if (m->type == PROTO_TASK_RESULT) {
        stash_one(w, m->f);
        return;
    }
    for (uint32_t i = 0; i < m->f[F_TRESS_RECS].arr.n; i++)
        stash_one(w, PROTO_REC(&m->f[F_TRESS_RECS], i));
}

/* Waits for the frame of this type and request id. TASK_RESULTs met meanwhile are kept for
 * wire_task_result; any other frame, an ERROR above all, fails the test. */
const proto_msg *wire_await(wire *w, uint32_t type, uint64_t req)
{
    for (;;) {
        int rc = wire_read(w);
        if (rc <= 0)
            fail_msg("waiting for %s req=%llu: %s", proto_type_name(type), (unsigned long long)req,
                     rc == 0 ? "the daemon closed the connection" : "timed out");
        const proto_msg *m = &w->m;
        if (m->type == type && m->req == req)
            return m;
        if (m->type == PROTO_ERROR) {
            char msg[PROTO_MAX_STR + 1];
            fail_msg("waiting for %s req=%llu: got ERROR req=%llu %s: %s", proto_type_name(type),
                     (unsigned long long)req, (unsigned long long)m->req,
                     wire_err_name(m->f[F_ERROR_CODE].i),
                     proto_str(&m->f[F_ERROR_MSG], msg, sizeof msg));
        }
        if (m->type == PROTO_TASK_RESULT || m->type == PROTO_TASK_RESULTS) {
            stash_result(w, m);
            continue;
        }
        fail_msg("waiting for %s req=%llu: got an unexpected %s req=%llu", proto_type_name(type),
                 (unsigned long long)req, proto_type_name(m->type), (unsigned long long)m->req);
    }
}

/* Waits for the ERROR frame answering req and checks its code. */
void wire_expect_error(wire *w, uint64_t req, int code)
{
    const proto_msg *m = wire_await(w, PROTO_ERROR, req);
    int64_t got = m->f[F_ERROR_CODE].i;
    if (got != code) {
        char msg[PROTO_MAX_STR + 1];
        fail_msg("req=%llu: expected ERROR %s, got %s (%lld): %s", (unsigned long long)req,
                 wire_err_name(code), wire_err_name(got), (long long)got,
                 proto_str(&m->f[F_ERROR_MSG], msg, sizeof msg));
    }
}

/* The daemon closes the connection, with no frame before the close. */
void wire_expect_eof(wire *w)
{
    int rc = wire_read(w);
    if (rc > 0)
        fail_msg("expected the connection to be closed, got %s req=%llu",
                 proto_type_name(w->m.type), (unsigned long long)w->m.req);
    if (rc < 0)
        fail_msg("expected the connection to be closed; it is still open after %d s",
                 WIRE_TIMEOUT_S);
}

/* ----------------------------------------------------------------- encoding */

proto_enc *wire_begin(wire *w, uint32_t type, uint64_t req, uint32_t nfields)
{
    spw_buf_reset(&w->out);
    proto_enc_begin(&w->enc, &w->out, type, req, nfields);
    return &w->enc;
}

/* Finishes the frame begun with wire_begin and sends it. */
bool wire_end(wire *w)
{
    int n = proto_enc_end(&w->enc, UINT32_MAX);
    assert_true(n > 0);
    return wire_send(w, w->out.data, w->out.len);
}

/* The frame begun with wire_begin, finished but not sent (for sending in pieces). */
const spw_buf *wire_end_unsent(wire *w)
{
    int n = proto_enc_end(&w->enc, UINT32_MAX);
    assert_true(n > 0);
    return &w->out;
}

/* A frame with a length prefix of our choosing and a raw body. */
bool wire_send_raw_frame(wire *w, const void *body, uint32_t len)
{
    uint8_t h[4] = {(uint8_t)(len >> 24), (uint8_t)(len >> 16), (uint8_t)(len >> 8), (uint8_t)len};
    if (!wire_send(w, h, 4))
        return false;
    return len == 0 || wire_send(w, body, len);
}

/* ---------------------------------------------------------------- handshake */

static void hmac_proof(const char *key, const char *label, const uint8_t *n1, const uint8_t *n2,
                       uint8_t role, uint8_t out[PROTO_PROOF_LEN])
{
    crypto_auth_hmacsha256_state st;
    crypto_auth_hmacsha256_init(&st, (const unsigned char *)key, strlen(key));
    crypto_auth_hmacsha256_update(&st, (const unsigned char *)label, strlen(label));
    crypto_auth_hmacsha256_update(&st, n1, PROTO_NONCE_LEN);
    crypto_auth_hmacsha256_update(&st, n2, PROTO_NONCE_LEN);
    crypto_auth_hmacsha256_update(&st, &role, 1);
    crypto_auth_hmacsha256_final(&st, out);
}

void wire_challenge(wire *w)
{
    const proto_msg *m = wire_await(w, PROTO_CHALLENGE, 0);
    assert_int_equal(m->f[F_CHAL_VERSION].u, PROTO_VERSION);
    memcpy(w->server_nonce, m->f[F_CHAL_NONCE].bin.ptr, PROTO_NONCE_LEN);
    w->server_role = m->f[F_CHAL_ROLE].u;
}

/* Encodes HELLO (request id 1) into w->out without sending it. */
const spw_buf *wire_hello_frame(wire *w, const hello_args *a)
{
    randombytes_buf(w->client_nonce, sizeof w->client_nonce);
    uint8_t proof[PROTO_PROOF_LEN];
    hmac_proof(a->key, "spillway-hello", w->server_nonce, w->client_nonce, (uint8_t)a->role, proof);
    if (a->corrupt_proof)
        proof[7] ^= 0x10;
    w->hello_role = a->role;
    w->key = a->key;
    proto_enc *e = wire_begin(w, PROTO_HELLO, 1, 8);
    proto_put_u(e, a->version);
    proto_put_u(e, a->role);
    proto_put_bin(e, w->client_nonce, sizeof w->client_nonce);
    proto_put_bin(e, proof, sizeof proof);
    proto_put_u(e, (uint64_t)getpid());
    proto_put_str(e, "e2e-wire-host");
    proto_put_str(e, "wire_client");
    if (a->worker_addr != NULL) {
        proto_put_arr(e, 5);
        proto_put_str(e, a->worker_addr);
        proto_put_u(e, a->worker_slots);
        proto_put_u(e, 1u << 20);
        proto_put_str(e, "e2e-fake-host-id");
        proto_put_str(e, "");
    } else {
        proto_put_nil(e);
    }
    return wire_end_unsent(w);
}

void wire_hello(wire *w, const hello_args *a)
{
    const spw_buf *b = wire_hello_frame(w, a);
    wire_send(w, b->data, b->len);
}

/* Waits for WELCOME and checks the daemon's proof of the secret. */
void wire_welcomed(wire *w)
{
    const proto_msg *m = wire_await(w, PROTO_WELCOME, 1);
    uint8_t want[PROTO_PROOF_LEN];
    hmac_proof(w->key, "spillway-welcome", w->client_nonce, w->server_nonce,
               (uint8_t)w->server_role, want);
    assert_memory_equal(m->f[F_WELCOME_PROOF].bin.ptr, want, PROTO_PROOF_LEN);
    assert_true(m->f[F_WELCOME_MAX_FRAME].u >= 4096);
}

/* Connects and completes the handshake as role, proving key. */
wire *wire_connect_as(const char *addr, uint64_t role, const char *key)
{
    wire *w = wire_open(addr);
    wire_challenge(w);
    hello_args a = {PROTO_VERSION, role, key, false, NULL, 0};
    wire_hello(w, &a);
    wire_welcomed(w);
    return w;
}

wire *wire_client(h_cluster *c)
{
    return wire_connect_as(c->addr, PROTO_ROLE_CLIENT, c->secret_file[0] ? WIRE_SECRET : "");
}

wire *wire_peer(h_cluster *c, int worker)
{
    return wire_connect_as(c->workers[worker].addr, PROTO_ROLE_CLIENT,
                           c->secret_file[0] ? WIRE_SECRET : "");
}

/* A client on worker's local socket, past the handshake. */
wire *wire_local(h_cluster *c, int worker)
{
    wire *w = wire_open_local((int)c->workers[worker].pid);
    wire_challenge(w);
    hello_args a = {
        PROTO_VERSION, PROTO_ROLE_CLIENT, c->secret_file[0] ? WIRE_SECRET : "", false, NULL, 0};
    wire_hello(w, &a);
    wire_welcomed(w);
    return w;
}

/* ------------------------------------------------------------- messages */

void wire_send_status_req(wire *w, uint64_t req)
{
    wire_begin(w, PROTO_STATUS_REQ, req, 0);
    wire_end(w);
}

/* The connection is usable: a STATUS_REQ gets its STATUS. */
void wire_expect_status(wire *w, uint64_t req)
{
    wire_send_status_req(w, req);
    const proto_msg *m = wire_await(w, PROTO_STATUS, req);
    assert_true(m->f[F_STATUS_LISTEN].bin.len > 0);
}

void wire_send_release(wire *w, uint64_t req, const spw_id *ids, uint32_t n)
{
    proto_enc *e = wire_begin(w, PROTO_RELEASE, req, 1);
    proto_put_arr(e, n);
    for (uint32_t i = 0; i < n; i++)
        proto_put_id(e, ids[i]);
    wire_end(w);
}

void wire_send_locate(wire *w, uint64_t req, spw_id id, uint64_t timeout_ms)
{
    proto_enc *e = wire_begin(w, PROTO_LOCATE, req, 2);
    proto_put_id(e, id);
    proto_put_u(e, timeout_ms);
    wire_end(w);
}

void wire_send_put_place(wire *w, uint64_t req, spw_id id, uint64_t size)
{
    proto_enc *e = wire_begin(w, PROTO_PUT_PLACE, req, 4);
    proto_put_id(e, id);
    proto_put_u(e, size);
    proto_put_str(e, "wire_client.c");
    proto_put_u(e, 0);
    wire_end(w);
}

void wire_put_task(proto_enc *e, const raw_task *t)
{
    proto_put_arr(e, 5);
    proto_put_id(e, t->id);
    proto_put_str(e, t->fn);
    proto_put_arr(e, t->nargs);
    for (uint32_t i = 0; i < t->nargs; i++) {
        const raw_arg *a = &t->args[i];
        proto_put_arr(e, 5);
        proto_put_u(e, (uint64_t)a->kind);
        if (a->kind == PROTO_ARG_INLINE) {
            uint8_t b[8];
            for (int k = 0; k < 8; k++)
                b[k] = (uint8_t)(a->u64 >> (8 * k));
            proto_put_bin(e, b, 8);
            proto_put_nil(e);
        } else {
            proto_put_nil(e);
            proto_put_id(e, a->obj);
        }
        proto_put_u(e, a->off);
        proto_put_u(e, a->len);
    }
    proto_put_u(e, t->flags);
    proto_put_str(e, "wire_client.c");
}

void wire_send_submit(wire *w, uint64_t req, uint64_t graph, uint64_t flags, const raw_task *ts,
                      uint32_t n)
{
    proto_enc *e = wire_begin(w, PROTO_SUBMIT, req, 5);
    proto_put_u(e, graph);
    proto_put_u(e, flags);
    proto_put_u(e, 0);
    proto_put_u(e, 0);
    proto_put_arr(e, n);
    for (uint32_t i = 0; i < n; i++)
        wire_put_task(e, &ts[i]);
    wire_end(w);
}

raw_task wire_task_inc(spw_id id, uint64_t x)
{
    raw_task t = {id, "inc", 1, {{PROTO_ARG_INLINE, x, {0, 0}, 0, 0}}, PROTO_TASK_KEEP};
    return t;
}

/* Waits for the SUBMIT_ACK of req and returns how many tasks were accepted. */
uint64_t wire_submit_ack(wire *w, uint64_t req, uint64_t graph)
{
    const proto_msg *m = wire_await(w, PROTO_SUBMIT_ACK, req);
    assert_int_equal(m->f[F_SUBACK_GRAPH].u, graph);
    return m->f[F_SUBACK_NTASKS].u;
}

/* Waits for the TASK_RESULT of task id (it may have come already). */
stashed_result wire_task_result(wire *w, spw_id id)
{
    for (;;) {
        for (int i = 0; i < w->nstash; i++) {
            if (spw_id_eq(w->stash[i].id, id)) {
                stashed_result r = w->stash[i];
                w->stash[i] = w->stash[--w->nstash];
                return r;
            }
        }
        int rc = wire_read(w);
        if (rc <= 0)
            fail_msg("waiting for a TASK_RESULT: %s", rc == 0 ? "connection closed" : "timed out");
        if (w->m.type != PROTO_TASK_RESULT && w->m.type != PROTO_TASK_RESULTS)
            fail_msg("waiting for a TASK_RESULT: got %s req=%llu (code %s)",
                     proto_type_name(w->m.type), (unsigned long long)w->m.req,
                     w->m.type == PROTO_ERROR ? wire_err_name(w->m.f[F_ERROR_CODE].i) : "-");
        stash_result(w, &w->m);
    }
}

uint64_t wire_le64(const uint8_t *b)
{
    uint64_t v = 0;
    for (int k = 7; k >= 0; k--)
        v = (v << 8) | b[k];
    return v;
}

void wire_send_obj_write(wire *w, uint64_t req, spw_id id, uint64_t total, uint64_t off,
                         uint64_t flags, const void *data, size_t len)
{
    proto_enc *e = wire_begin(w, PROTO_OBJ_WRITE, req, 5);
    proto_put_id(e, id);
    proto_put_u(e, total);
    proto_put_u(e, off);
    proto_put_u(e, flags);
    proto_put_bin(e, data, len);
    wire_end(w);
}

void wire_send_obj_read(wire *w, uint64_t req, spw_id id, uint64_t off, uint64_t len)
{
    proto_enc *e = wire_begin(w, PROTO_OBJ_READ, req, 3);
    proto_put_id(e, id);
    proto_put_u(e, off);
    proto_put_u(e, len);
    wire_end(w);
}

int wire_first_frame(wire *w, uint32_t *type, int64_t *code, char *msg, size_t msglen)
{
    int rc = wire_read(w);
    if (rc <= 0)
        return rc == 0 ? 0 : -1;
    *type = w->m.type;
    *code = w->m.type == PROTO_ERROR ? w->m.f[F_ERROR_CODE].i : 0;
    if (w->m.type == PROTO_ERROR)
        proto_str(&w->m.f[F_ERROR_MSG], msg, msglen);
    return 1;
}
