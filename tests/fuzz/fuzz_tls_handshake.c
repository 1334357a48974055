/*
 * Fuzz target for the TLS handshake of proto_conn (proto/src/tls.c with conn.c and conn_io.c):
 * arbitrary bytes play the peer of a real connection on 127.0.0.1, so the server's first-byte
 * detection, its PSK lookup and handshake, and the client's skipping of the plaintext CHALLENGE,
 * its handshake and its refusal reporting all read them as they would from a hostile peer.
 *
 * Input layout: one flag byte, then the peer's bytes (at most PEER_MAX, so the kernel's socket
 * buffer takes them at once and one thread can play both ends). Flag bit 0: 0 = we are the
 * server (the bytes are a client's: ClientHello and on), 1 = we are the client (the bytes are a
 * server's: its CHALLENGE, ServerHello and on). Bit 1: the encrypt mode is yes (plaintext peers
 * accepted) instead of required. The peer's side is shut after its bytes; the connection must
 * then close, by a refusal or the end of the bytes.
 *
 * Seeds (corpus/tls_handshake, captured once by hand) hold real first flights: spillway-ctl's
 * ClientHello with this target's secret as key, other TLS 1.3 and TLS 1.2-only ClientHellos, a
 * plaintext frame, a scheduler's CHALLENGE followed by an alert or a server's first flight.
 * FUZZ_TLS_LOG set in the environment shows the connections' log lines.
 */
#include "spillway/conn.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <uv.h>

#define PEER_MAX (32u << 10)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static uv_loop_t g_loop;
static bool g_closed, g_ctx_done;

static void on_close(proto_conn *c, int status)
{
    (void)c, (void)status;
    g_closed = true;
}

static int on_hello(proto_conn *c, const proto_msg *hello, proto_welcome *w, char *err,
                    size_t errlen)
{
    (void)c, (void)hello, (void)w;
    snprintf(err, errlen, "the fuzzer accepts nobody");
    return SPW_EAUTH;
}

static void ctx_done(void *arg)
{
    (void)arg;
    g_ctx_done = true;
}

static const proto_conn_cbs g_cbs = {.on_hello = on_hello, .on_close = on_close};

static void fail(const char *what)
{
    fprintf(stderr, "fuzz_tls_handshake: %s\n", what);
    abort();
}

static int port_of(const char *addr)
{
    return atoi(strrchr(addr, ':') + 1);
}

static int raw_socket(void)
{
    int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (s < 0)
        fail("socket");
    return s;
}

/* A fresh loopback address for each connection (127.0.0.0/8 is all ours): the connections a
 * campaign leaves in TIME_WAIT, thousands a second, are spread over many addresses instead of
 * using up the ports of 127.0.0.1, which everything else on the host shares. */
static struct sockaddr_in loopback(int port)
{
    static uint32_t next;
    uint32_t host = next++ % (254u * 256u * 200u);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    sa.sin_addr.s_addr = htonl(127u << 24 | (2 + host / (254u * 256u)) << 16 |
                               (host / 254u % 256u) << 8 | (1 + host % 254u));
    return sa;
}

/* Writes the peer's bytes and shuts its sending side. */
static void peer_send(int s, const uint8_t *p, size_t n)
{
    while (n > 0) {
        ssize_t w = send(s, p, n, MSG_NOSIGNAL);
        if (w <= 0)
            break; /* refused already: what is left is not needed */
        p += w, n -= (size_t)w;
    }
    shutdown(s, SHUT_WR);
}

/* We serve: the bytes come from a client that connected. */
static void run_server(proto_ctx *ctx, const uint8_t *p, size_t n)
{
    proto_listener *l = NULL;
    char at[32], bound[64];
    struct sockaddr_in sa = loopback(0), from = loopback(0);
    inet_ntop(AF_INET, &sa.sin_addr, at, sizeof at);
    strcat(at, ":0");
    if (proto_listen(ctx, at, &g_cbs, NULL, &l, bound, sizeof bound) != 0)
        fail("proto_listen");
    sa.sin_port = htons((uint16_t)port_of(bound));
    int s = raw_socket();
    if (bind(s, (struct sockaddr *)&from, sizeof from) != 0 ||
        connect(s, (struct sockaddr *)&sa, sizeof sa) != 0)
        fail("connect");
    peer_send(s, p, n);
    while (!g_closed)
        uv_run(&g_loop, UV_RUN_ONCE);
    close(s);
}

/* We connect: the bytes come from the server we reached. */
static void run_client(proto_ctx *ctx, const uint8_t *p, size_t n)
{
    int ls = raw_socket();
    struct sockaddr_in sa = loopback(0);
    socklen_t len = sizeof sa;
    if (bind(ls, (struct sockaddr *)&sa, sizeof sa) != 0 || listen(ls, 1) != 0 ||
        getsockname(ls, (struct sockaddr *)&sa, &len) != 0)
        fail("listen");
    char addr[32];
    inet_ntop(AF_INET, &sa.sin_addr, addr, sizeof addr);
    snprintf(addr + strlen(addr), sizeof addr - strlen(addr), ":%d", ntohs(sa.sin_port));
    if (proto_connect(ctx, addr, &g_cbs, NULL, NULL) != 0)
        fail("proto_connect");
    int s = accept(ls, NULL, NULL);
    if (s < 0)
        fail("accept");
    peer_send(s, p, n);
    while (!g_closed)
        uv_run(&g_loop, UV_RUN_ONCE);
    close(s);
    close(ls);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static bool init;
    if (!init) {
        init = true;
        spw_log_init("fuzz_tls_handshake", getenv("FUZZ_TLS_LOG") ? SPW_LOG_DEBUG : SPW_LOG_ERR);
        uv_loop_init(&g_loop);
    }
    if (size < 1)
        return 0;
    unsigned flags = data[0];
    const uint8_t *p = data + 1;
    size_t n = size - 1 > PEER_MAX ? PEER_MAX : size - 1;
    static const uint8_t secret[] = "fuzz-cluster-secret-0123456789";
    proto_ctx_opts o;
    proto_ctx_opts_default(&o);
    o.secret = secret;
    o.secret_len = sizeof secret - 1;
    o.encrypt = (flags & 2) ? PROTO_ENCRYPT_YES : PROTO_ENCRYPT_REQUIRED;
    o.encrypt_local = true;
    o.handshake_ms = 2000;
    proto_ctx *ctx = NULL;
    if (proto_ctx_new(&g_loop, &o, &ctx) != 0)
        fail("proto_ctx_new");
    g_closed = false;
    if (flags & 1)
        run_client(ctx, p, n);
    else
        run_server(ctx, p, n);
    g_ctx_done = false;
    proto_ctx_close(ctx, ctx_done, NULL);
    while (!g_ctx_done)
        uv_run(&g_loop, UV_RUN_ONCE);
    return 0;
}
