/*
 * proto_conn internals shared by the files that implement it: conn.c (the ctx, lifecycle,
 * listeners, connecting), conn_io.c (output queues and writes, input buffering, payloads received
 * in place, decoding and dispatch), auth.c (the handshake and the secret), local.c (Unix-socket
 * listeners, descriptor passing, the local attach), tls.c (TLS 1.3 over a BIO of its own: the
 * only file that speaks OpenSSL).
 * Ownership: a proto_ctx owns its connections and listeners, a uv_idle that flushes dirty
 * connections once per loop iteration, and an unref'd uv_timer that drops peers stuck in the
 * handshake or a draining close and trims the heap after churn. A connection is freed in its
 * close callback, right after on_close; the ctx when its last handle is. All on the loop thread.
 */
#ifndef SPW_CONN_INT_H
#define SPW_CONN_INT_H

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
#define BUF_KEEP_MAX (8u << 20)  /* buffers above this are freed when emptied */
#define ZONE_FIRST (64u << 10)   /* a connection's decode zone starts with this much, */
#define ZONE_KEEP_MAX (1u << 20) /* and grows its first chunk up to this (conn__zone_reset) */
#define ZONE_PREAUTH 1024u       /* before the handshake: made per frame, this small */
/* An unauthenticated peer's input buffer: one frame of at most PROTO_PREAUTH_MAX_FRAME, whole. */
#define IN_PREAUTH (PROTO_HDR_LEN + PROTO_PREAUTH_MAX_FRAME)
#define CONN_TLS_RBUF (256u << 10) /* ciphertext read at once from a TLS connection's socket */
#define CONN_TLS_SLICE (256u << 10) /* ciphertext per write: sealed while the last is sent */
#define CLOSE_DRAIN_MS 5000
#define SWEEP_MS 500
#define SINK_MIN (64u << 10) /* payloads at least this long may be received in place */
#define SINK_HEAD_MAX 128    /* the rest of such a frame is smaller than this */
#define KEEPALIVE_IDLE_S 60  /* TCP keepalive: first probe after this much silence, */
#define KEEPALIVE_INTVL_S 10 /* then one every 10 s; */
#define KEEPALIVE_CNT 6      /* a peer that answers none of 6 is dead (about 2 minutes) */
#define LIMIT_LOG_MS 10000   /* cap and EMFILE are logged at most once per this long */
#define TRIM_CLOSED 256      /* after this many accepted connections closed, */
#define TRIM_MIN_MS 5000     /* the heap is trimmed, at most once per this long (conn.c) */

/* Events logged at most once per LIMIT_LOG_MS, with a count of those not logged. */
enum {
    LIM_CAP,
    LIM_CLIENT_CAP,
    LIM_ACCEPT,
    LIM_LOCAL,
    LIM_REFUSED,    /* a handshake refused before the peer proved the secret */
    LIM_HS_TIMEOUT, /* an accepted connection's handshake that never finished */
    LIM_MALFORMED,  /* a malformed frame skipped past the handshake */
    LIM_TLS,        /* a TLS handshake that failed, or a peer refused for not encrypting */
    LIM_PLAIN,      /* a peer accepted in plaintext by --encrypt yes */
    LIM_COUNT
};

typedef struct borrow {
    size_t at; /* offset in the owned buffer where these bytes go */
    const void *ptr;
    size_t len;
    void (*release)(void *arg);
    void *arg;
} borrow;

/* A point in an outq at a frame's end: the owned bytes and borrowed ranges before it. */
typedef struct conn_pos {
    size_t len, nb;
} conn_pos;

/* Output that waits for an epoch's release, up to a point of out (proto_ctx_hold). */
#define CONN_HOLDS 4
typedef struct conn_hold {
    uint64_t epoch;
    conn_pos end;
} conn_hold;

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

/* Invariants: a connection is on the dirty list iff c->dirty; at most one uv_write is in flight
 * per connection (c->writing); c->queued equals the bytes in out + wout + borrowed segments not
 * yet written. Until its peer is authenticated (state before ST_READY) a connection holds its
 * record and at most IN_PREAUTH input bytes, and between frames no decode zone and no output
 * buffers: that is all an unauthenticated peer costs (README). */
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
    bool peer_same_uid; /* accepted on a Unix socket from a peer with our effective uid */
    bool counted;        /* accepted: counted in ctx->naccepted */
    bool counted_client; /* a CLIENT or PEER role: counted in ctx->nclients */
    bool tls_detect;     /* accepted over TCP, no byte read yet: TLS or plaintext is not known */
    struct conn_tls *tls; /* TLS state (tls.c) when this connection is encrypted, else NULL */
    spw_buf wire;        /* TLS: the ciphertext being written (the write in flight's bytes) */
    int peer_role;
    int close_status;
    char peer[64];
    uint8_t my_nonce[PROTO_NONCE_LEN];
    uint8_t peer_nonce[PROTO_NONCE_LEN];
    proto_welcome welcome;
    bool resume_set; /* proto_conn_set_resume: HELLO carries resume_id and resume_token */
    uint64_t resume_id;
    uint8_t resume_token[PROTO_TOKEN_LEN];
    uint64_t deadline_ns; /* handshake or drain deadline; 0 = none */
    /* Progress, for proto_conn_watch (loop time, ms): the last byte in, the last sample of
     * the bytes written and when it last grew, and whether a PING awaits its answer. */
    uint64_t rx_ms, tx_ms;
    uint64_t tx_done;  /* bytes of finished writes */
    uint64_t tx_seen;  /* proto_conn_watch's last sample of the bytes written */
    size_t wout_total; /* bytes handed to the write in flight (ciphertext under TLS) */
    size_t wout_queued; /* of c->queued, the bytes that write carries (plaintext) */
    uint64_t since_ms; /* silence is counted from no earlier than this: moved on over the
                          spans nobody read c (proto_conn_watch_skip), and to when we read c
                          again (proto_conn_resume) */
    bool ping_out;
    spw_buf in;
    size_t in_need; /* bytes needed in `in` to complete the frame at its start */
    /* A payload being received straight into the owner's memory (cbs.on_sink): the frame's
     * head, where the payload goes and how much of it has come. */
    uint8_t *sink;
    uint64_t sink_len, sink_got;
    uint32_t sink_field;
    size_t sink_head_len;
    bool sink_declined; /* the owner (or the frame's shape) said no for the frame in progress */
    const uint8_t *cur_frame; /* the frame being delivered to on_msg (proto_conn_frame) */
    size_t cur_frame_len;
    uint8_t sink_head[SINK_HEAD_MAX];
    msgpack_zone zone;      /* made for a frame's decoding (conn_io.c conn_zone); kept between
                               frames only once the peer is authenticated */
    const void *zone_first; /* the zone's first chunk (another head means a frame overflowed it);
                               NULL: no zone made */
    outq out;               /* being filled */
    proto_batch batch;      /* an open batched frame at the end of out.buf (batch.n > 0) */
    outq wout;              /* being written */
    /* Held output (proto_conn_set_gated): holds[] end where what each epoch waits for ends in
     * out, in order; what comes before `covered` (the end of the last released hold) may be
     * written while holds are pending; with none, all of out. */
    bool gated;
    uint32_t nholds;
    conn_pos covered;
    conn_hold holds[CONN_HOLDS];
    proto_conn *gated_prev, *gated_next;
    size_t queued;
    uv_buf_t *wbufs;
    size_t wbufs_cap;
    /* TLS: wout's plaintext is encrypted a slice per write; wbufs[wenc_i] + wenc_off is where
     * the next slice starts, of wenc_n buffers (0: none left, wout is released). */
    size_t wenc_i, wenc_off, wenc_n;
    size_t wenc_plain; /* TLS: plaintext sealed into ciphertext that no write carries yet */
    union { /* a connection connects before it writes, so one request's memory serves both */
        uv_write_t wreq;
        uv_connect_t creq;
    };
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
    proto_conn *gated;   /* connections whose output may be held (proto_conn_set_gated) */
    proto_conn *resumed; /* paused connections to deliver buffered input for */
    bool closing;
    uint32_t naccepted;              /* server-side connections, handshakes included */
    uint32_t nclients;               /* of those, authenticated CLIENT and PEER roles */
    uint32_t closed_since_trim;      /* accepted connections closed since the heap was trimmed */
    uint64_t trim_last_ns;           /* when it was */
    uint64_t lim_last_ns[LIM_COUNT]; /* when each limit event was last logged */
    uint64_t lim_quiet[LIM_COUNT];   /* events since then that were not logged */
    int handles;                     /* open handles we own, conns and listeners included */
    void (*done)(void *arg);
    void *done_arg;
    void *data;                  /* the owner's */
    uint64_t io[PROTO_IO_COUNT]; /* frames and bytes in and out, for /metrics */
    struct ssl_ctx_st *tls;      /* OpenSSL's SSL_CTX when opts.encrypt != NO, else NULL */
    uint8_t *tls_rbuf;           /* ciphertext read from a socket, fed to TLS at once */
    struct bio_method_st *tls_bio; /* the BIO between OpenSSL and a connection (tls.c) */
    uint8_t tls_psk[32];         /* the pre-shared key: HKDF-SHA256 of the secret */
    bool tls_certs;              /* TLS authenticates with certificates (opts.tls_*), not tls_psk */
};

/* A host-name lookup for a connection; separate from it, since a connection closed meanwhile
 * is freed before the lookup's callback runs (conn is NULL then). */
struct conn_gai {
    uv_getaddrinfo_t req;
    proto_conn *conn;
    char host[SPW_HOST_MAX];
};

/* connection and ctx lifecycle, TCP listening and connecting (conn.c) */
/* Logs an event of kind k now, or counts it if one was logged less than LIMIT_LOG_MS ago. */
void conn__log_limited(proto_ctx *ctx, int k, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void conn__flusher_cb(uv_idle_t *p);
proto_conn *conn__new(proto_ctx *ctx, const proto_conn_cbs *cbs, void *data);
void conn__outq_release(outq *q, bool keep);
void conn__do_close(proto_conn *c);
void conn__accept_failed(proto_listener *l, int status);
bool conn__admit(proto_conn *c);

/* framing: output queues and writes, input buffering, decoding and dispatch (conn_io.c) */
void conn__mark_dirty(proto_conn *c);
uint32_t conn__send_limit(const proto_conn *c);
void conn__after_enqueue(proto_conn *c, size_t bytes);
void conn__flush(proto_conn *c);
/* Closes the open batched frame (proto_conn_batch_rec), if any, queueing it. */
void conn__batch_close(proto_conn *c);
void conn__process_input(proto_conn *c);
/* n plaintext bytes arrived where conn__in_room said (or into the sink): account and decode. */
void conn__input(proto_conn *c, size_t n);
/* Where the next plaintext bytes go: the sink, else room in c->in (a small frame's worth before
 * the handshake is done). @return 0, or SPW_ENOMEM. */
int conn__in_room(proto_conn *c, uint8_t **at, size_t *len);
void conn__zone_reset(proto_conn *c);
/* The connection's decode zone, made if it has none (conn_io.c). */
msgpack_zone *conn__zone(proto_conn *c);
void conn__alloc_cb(uv_handle_t *h, size_t suggested, uv_buf_t *buf);
void conn__read_cb(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf);
void conn__start(proto_conn *c);
/* proto_connect of "unix:NAME" (local.c): NAME as for proto_listen_unix. */
int conn__connect_unix(proto_ctx *ctx, const char *name, const proto_conn_cbs *cbs, void *data,
                       proto_conn **out);

/* the handshake and the secret (auth.c) */
void conn__make_proof(const proto_ctx *ctx, const char *label, const uint8_t *n1, const uint8_t *n2,
                      uint8_t role, uint8_t out[PROTO_PROOF_LEN]);
void conn__enc_hello(proto_enc *e, spw_buf *out, const proto_ctx *ctx, const uint8_t *server_nonce,
                     const uint8_t *my_nonce, const proto_winfo_rec *worker,
                     const proto_conn *resume);
void conn__send_challenge(proto_conn *c);
void conn__refuse(proto_conn *c, uint64_t req, int code, const char *why);
void conn__on_challenge(proto_conn *c, const proto_msg *m);
void conn__on_hello_msg(proto_conn *c, const proto_msg *m);
void conn__on_welcome(proto_conn *c, const proto_msg *m);

/* TLS (tls.c). conn__tls_ctx_init sets up ctx->tls when opts.encrypt asks (0, SPW_EINVAL without
 * a secret, SPW_ETLS); conn__tls_ctx_free undoes it. */
int conn__tls_ctx_init(proto_ctx *ctx);
void conn__tls_ctx_free(proto_ctx *ctx);
/* Whether a connection to or from this (connected) peer is encrypted by our policy: TCP, and not
 * loopback unless encrypt_local. */
bool conn__tls_wanted(proto_conn *c);
/* Starts TLS on c: as the client (the ClientHello is queued) or as the server. @return 0 or
 * SPW_ETLS, c untouched. */
int conn__tls_start(proto_conn *c, bool server);
/* A server's first bytes arrived (in c->in): TLS, or plaintext the policy accepts or refuses. */
void conn__tls_detect(proto_conn *c);
/* n bytes of ciphertext arrived (in ctx->tls_rbuf). */
void conn__tls_read(proto_conn *c, const uint8_t *p, size_t n);
/* Decrypts what TLS holds already (after a pause). */
void conn__tls_pump(proto_conn *c);
bool conn__tls_up(const proto_conn *c);
/* Encrypts plaintext from bufs[*i] + *off on, until TLS holds about CONN_TLS_SLICE bytes of
 * ciphertext or bufs[nbufs - 1] is done; moves *i and *off past it. @return the plaintext bytes
 * taken, or SPW_ETLS. */
ssize_t conn__tls_encrypt(proto_conn *c, const uv_buf_t *bufs, size_t nbufs, size_t *i,
                          size_t *off);
/* Bytes of ciphertext sealed and not yet taken into c->wire. */
size_t conn__tls_sealed(const proto_conn *c);
/* Moves the ciphertext waiting to go out into c->wire, unless a write is in flight from it.
 * @return its length (0: nothing to write now). */
size_t conn__tls_take(proto_conn *c);
void conn__tls_free(proto_conn *c);

#endif /* SPW_CONN_INT_H */
