/*
 * proto_conn: framed, authenticated, batched connections over libuv.
 *
 * A proto_ctx belongs to one loop and holds what its connections share: our role and name, the
 * cluster secret, the decoder limits, and the flusher, which writes each connection's queued
 * frames once per loop iteration (one write in flight per connection).
 * Handshake: the accepting side sends CHALLENGE (version, nonce); the connecting side answers
 * HELLO with HMAC-SHA256(secret, "spillway-hello" | nonces | role), and the server answers
 * WELCOME with its own proof; with no secret the proofs use an empty key, so a cluster with a
 * secret rejects peers without one, and vice versa. With encryption (proto_ctx_opts.encrypt)
 * the connecting side starts TLS 1.3 keyed by the secret, the accepting side tells TLS from
 * plaintext by the first byte, and the same handshake runs inside (proto/README.md).
 */
#ifndef SPW_CONN_H
#define SPW_CONN_H

#include <uv.h>

#include "spillway/proto.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct proto_ctx proto_ctx;
typedef struct proto_conn proto_conn;
typedef struct proto_listener proto_listener;

/** What a server tells a peer in WELCOME, and what the peer learns from it. */
typedef struct proto_welcome {
    uint64_t session;      /* the server's id for this connection */
    uint64_t inline_limit; /* values up to this size travel inside messages */
    uint32_t chunk;        /* object chunk size, bytes */
    uint32_t max_frame;    /* largest frame the server accepts, bytes */
    /* A session a client can resume (it set proto_conn_set_resume): its token, whether the
     * session HELLO named goes on, and how many of the client's frames it has processed. */
    bool has_token;
    bool resumed;
    uint8_t token[PROTO_TOKEN_LEN];
    uint64_t nrecv;
} proto_welcome;

/* A connection's callbacks. The promise is libuv's: on_close is called exactly once per
 * connection, after which the connection is freed; no other callback follows it. */
typedef struct proto_conn_cbs {
    /** Server side: the peer proved the secret. Return 0 and fill *w to accept; return an error
     * code (and text in err) to refuse: the peer gets an ERROR frame and is disconnected. */
    int (*on_hello)(proto_conn *c, const proto_msg *hello, proto_welcome *w, char *err,
                    size_t errlen);
    /** Client side: the server proved the secret and welcomed us. */
    void (*on_ready)(proto_conn *c, const proto_welcome *w);
    /** A message after the handshake. The message points into the connection's buffer and is
     * valid only during the call. The callback may close the connection. */
    void (*on_msg)(proto_conn *c, const proto_msg *m);
    /** The connection is gone; status 0 for a close we asked for, else why. */
    void (*on_close)(proto_conn *c, int status);
    /** Optional: a large frame is arriving whose last field is a byte string (object data).
     * head is the message with that field empty, len the byte string's length. Return memory
     * of len bytes to receive it straight into (on_msg then gets the message with the field
     * pointing there), or NULL to receive it as usual. The memory must stay valid until that
     * on_msg or on_close. Must not close the connection. */
    void *(*on_sink)(proto_conn *c, const proto_msg *head, uint64_t len);
    /** Optional: queued output fell under the low-water mark after being above it. */
    void (*on_drain)(proto_conn *c);
} proto_conn_cbs;

/** What a worker announces about itself in HELLO. */
typedef struct proto_hello_worker {
    const char *addr;    /* peer port, "host:port" */
    uint32_t slots;      /* task slots */
    uint64_t capacity;   /* store capacity, bytes */
    const char *host_id; /* spw_host_id(): same value means shared memory is reachable */
    const char *local;   /* local socket for arena mapping, or "" */
} proto_hello_worker;

typedef struct proto_ctx_opts {
    int role;                /* our role, PROTO_ROLE_* */
    const char *name;        /* our name, sent in HELLO */
    const uint8_t *secret;   /* cluster secret, or NULL */
    size_t secret_len;
    proto_limits limits;     /* what we accept */
    uint32_t handshake_ms;   /* a peer that does not finish the handshake in time is dropped */
    uint64_t inline_limit;   /* sent in WELCOME */
    uint32_t chunk;          /* sent in WELCOME */
    const proto_hello_worker *worker; /* sent in HELLO when set; must outlive the ctx */
    /* Accepted connections (all listeners, handshakes included) at once; 0 = no cap. A peer
     * over the cap gets ERROR SPW_ELIMIT and is disconnected. Of these, reserved_conns are kept
     * for peers whose role is not CLIENT or PEER (workers, spillway-ctl): a client is refused
     * once max_conns - reserved_conns clients are connected. */
    uint32_t max_conns;
    uint32_t reserved_conns;
    /* TLS 1.3 with a key derived from the secret (needs one): PROTO_ENCRYPT_NO, _YES (we start
     * TLS on every TCP connection we make; peers that connect in plaintext are accepted and
     * logged) or _REQUIRED (they are refused). Loopback TCP stays plaintext unless
     * encrypt_local; Unix sockets always do. */
    int encrypt;
    bool encrypt_local;
    /* With encrypt: PEM files for mutual TLS with certificates instead of the secret's key (all
     * three or none; read by proto_ctx_new, need not outlive it). Both ends present a certificate
     * signed by tls_ca; the connecting side checks the name it connected to against the peer's.
     * The secret's handshake still runs inside TLS. */
    const char *tls_cert, *tls_key, *tls_ca;
} proto_ctx_opts;

/* proto_ctx_opts.encrypt, in the order of the --encrypt words */
enum { PROTO_ENCRYPT_NO, PROTO_ENCRYPT_YES, PROTO_ENCRYPT_REQUIRED };

/** The default --max-connections for a process whose descriptor limit is nofile: three
 * quarters of it (room for stores, spill files, executors and outgoing connections), at most
 * 8192, at least 16. */
uint32_t proto_default_max_conns(uint64_t nofile);
/** Connections kept for workers and spillway-ctl out of max: an eighth, 4..64. */
uint32_t proto_reserved_conns(uint32_t max);

void proto_ctx_opts_default(proto_ctx_opts *o);

/** Creates the shared state for loop. @return 0, a libuv error, SPW_EINVAL (encryption without
 * a secret, or some of tls_cert/tls_key/tls_ca without the others), or SPW_ETLS (the TLS library
 * could not be set up, or a certificate, key or CA file cannot be used; logged, naming it). */
int proto_ctx_new(uv_loop_t *loop, const proto_ctx_opts *o, proto_ctx **out);
/** Closes every connection and listener (their on_close run), then the ctx's own handles;
 * the ctx is freed once the loop has run the close callbacks. done (optional) runs then. */
void proto_ctx_close(proto_ctx *ctx, void (*done)(void *arg), void *arg);
uv_loop_t *proto_ctx_loop(proto_ctx *ctx);
/** A pointer of the owner's, for callbacks that only have a connection. */
void proto_ctx_set_data(proto_ctx *ctx, void *data);
/** Changes the name sent in HELLO by connections made from now on. */
void proto_ctx_set_name(proto_ctx *ctx, const char *name);
void *proto_ctx_data(const proto_ctx *ctx);
proto_ctx *proto_conn_ctx(const proto_conn *c);
const proto_ctx_opts *proto_ctx_opts_get(const proto_ctx *ctx);
/** Indexes of proto_ctx_io's figures. */
enum { PROTO_IO_FRAMES_IN, PROTO_IO_FRAMES_OUT, PROTO_IO_BYTES_IN, PROTO_IO_BYTES_OUT, PROTO_IO_COUNT };
/** Frames and bytes every connection of ctx received and queued for sending since it was made
 * (bytes in include object chunks received straight into a store). Cannot fail. */
void proto_ctx_io(const proto_ctx *ctx, uint64_t out[PROTO_IO_COUNT]);
/** Shortest secret accepted, bytes (trailing newlines and spaces not counted). */
#define PROTO_MIN_SECRET 16
/** Reads a secret file. Its group may read it (mode 0640, group spillway: members may submit
 * jobs), nobody else may, and its group may not write it.
 * @return 0, -errno, SPW_EACCES if its mode is too open, SPW_EINVAL if empty, SPW_ERANGE if
 *         shorter than PROTO_MIN_SECRET, SPW_ELIMIT if larger than 4 KiB. */
int proto_secret_load(const char *path, uint8_t **secret, size_t *len);
/** What a proto_secret_load error means, for a message that also names the file. */
const char *proto_secret_strerror(int rc);

/** Listens on "HOST:PORT" (port 0: ephemeral). bound receives the actual "host:port".
 * Accepted peers get cbs and data. @return 0 or a negative error (address in use, ...). */
int proto_listen(proto_ctx *ctx, const char *addr, const proto_conn_cbs *cbs, void *data,
                 proto_listener **out, char *bound, size_t boundlen);
void proto_listener_close(proto_listener *l);

/** Listens on a Unix stream socket: "@name" is Linux's abstract namespace (no file, gone with
 * the process), anything else a filesystem path. Peers run the same handshake as over TCP.
 * @return 0 or a negative error. */
int proto_listen_unix(proto_ctx *ctx, const char *name, const proto_conn_cbs *cbs, void *data,
                      proto_listener **out);
/** Who may connect to a Unix-socket listener, checked with SO_PEERCRED the moment a peer
 * connects (before any handshake): our own effective uid, root, and, once this is called,
 * members of group gid (primary or supplementary). Anyone else gets an ERROR frame with
 * SPW_EAUTH and is disconnected. Abstract sockets have no file permissions, so this is what
 * stands between other local users and the arena. */
void proto_listener_allow_group(proto_listener *l, unsigned gid);

/** Client side of local arena access, done without the loop because a file descriptor comes
 * back: connects to a worker's Unix socket (name as for proto_listen_unix), runs the handshake
 * with ctx's role and secret, sends ARENA_MAP and receives the arena's memfd: opened read-only
 * unless write is true (only a client that puts asks for that).
 * @param[out] sock the connected socket, ready for proto_conn_open_fd (nothing unread on it).
 * @param[out] memfd the arena; @param[out] capacity its size in bytes.
 * @return 0; SPW_EAUTH (among others: our uid is not allowed on that socket), SPW_EVERSION,
 *         SPW_ETIMEDOUT, SPW_EPROTO, or -errno. */
int proto_local_attach(proto_ctx *ctx, const char *name, int timeout_ms, bool write, int *sock,
                       int *memfd, uint64_t *capacity);

/** An address "unix:NAME" names a Unix socket (NAME as for proto_listen_unix). */
#define PROTO_UNIX_PREFIX "unix:"

/** Connects to "HOST:PORT", or to "unix:NAME", and runs the handshake; on_ready or on_close
 * follows.
 * @return 0 (a callback will follow), or an error now (no callback). */
int proto_connect(proto_ctx *ctx, const char *addr, const proto_conn_cbs *cbs, void *data,
                  proto_conn **out);
/** Wraps an already connected stream socket (an executor's socketpair end); no handshake,
 * the connection is ready at once and gets no on_ready. @return 0 or a libuv error. */
int proto_conn_open_fd(proto_ctx *ctx, int fd, const proto_conn_cbs *cbs, void *data,
                       proto_conn **out);

/** Client side, before the handshake (right after proto_connect): HELLO says this client can
 * resume its session and names the one to resume (session 0: none yet; token: its WELCOME's,
 * NULL with session 0). */
void proto_conn_set_resume(proto_conn *c, uint64_t session, const uint8_t *token);
void *proto_conn_data(const proto_conn *c);
void proto_conn_set_data(proto_conn *c, void *data);
int proto_conn_peer_role(const proto_conn *c);
/** "ip:port" of the peer, or "fd" for a wrapped socket. */
const char *proto_conn_peer(const proto_conn *c);
/** What the server said in WELCOME (client side), or what we sent (server side). */
const proto_welcome *proto_conn_welcome(const proto_conn *c);
bool proto_conn_is_closing(const proto_conn *c);
/** Whether c came through a Unix-socket listener (proto_listen_unix): its peer passed the
 * credential check there. */
bool proto_conn_is_local(const proto_conn *c);
/** Whether c came through a Unix-socket listener from a peer with our effective uid
 * (SO_PEERCRED): a program of the same user on this host. */
bool proto_conn_peer_same_uid(const proto_conn *c);
/** Whether c's bytes travel inside TLS (its handshake may still be running). */
bool proto_conn_is_encrypted(const proto_conn *c);

/** The buffer to build the next frame in: proto_enc_NAME(&e, proto_conn_out(c), req, &m), then
 * proto_conn_send (or proto_conn_send_borrowed / proto_conn_send_fd). */
spw_buf *proto_conn_out(proto_conn *c);
/** Finishes a frame started in proto_conn_out and schedules the write.
 * @return 0, or SPW_EFRAMESIZE (frame dropped) if it exceeds the peer's max_frame. */
int proto_conn_send(proto_conn *c, proto_enc *e);
/** Like proto_conn_send for a frame whose last field is a bin header of len bytes
 * (proto_put_bin_hdr): the len bytes are written from data without a copy. release(arg) runs
 * once the bytes are written or the connection is gone; also on error. */
int proto_conn_send_borrowed(proto_conn *c, proto_enc *e, const void *data, size_t len,
                             void (*release)(void *arg), void *arg);
/** Queues complete frames built elsewhere (len bytes of whole frames). @return 0 or
 * SPW_ECLOSED. */
int proto_conn_send_raw(proto_conn *c, const void *frames, size_t len);
/** Like proto_conn_send_raw without the copy: the bytes are written from frames, which must
 * stay unchanged until release(arg) runs (once they are written or the connection is gone;
 * also on error). @return 0 or SPW_ECLOSED. */
int proto_conn_send_raw_borrowed(proto_conn *c, const void *frames, size_t len,
                                 void (*release)(void *arg), void *arg);
/** Sends a frame with a file descriptor attached (SCM_RIGHTS) on a Unix-socket connection.
 * Needs an idle connection (nothing queued or in flight), which a request/reply exchange has.
 * @return 0, SPW_EAGAIN if output is pending, SPW_ENOTSUP on a TCP connection, or -errno. */
int proto_conn_send_fd(proto_conn *c, proto_enc *e, int fd);
/* proto_send_NAME(c, req, &m) for every message type NAME of the schema (proto.h): builds the
 * frame in c's output and sends it as proto_conn_send does, with its return. A NULL c is a
 * connection already gone (a scheduler's session waiting for its client to come back): these,
 * proto_batch_KIND and proto_conn_error send nothing to it (SPW_ECLOSED). */
#define PROTO__DECL_SEND(NAME, name)                                                               \
    int proto_send_##name(proto_conn *c, uint64_t req, const proto_##name##_msg *m);
#define PROTO__DECL_SEND0(NAME, name) int proto_send_##name(proto_conn *c, uint64_t req);
#define PROTO__DECL_SEND_ALIAS(NAME, name, OF, of) PROTO__DECL_SEND(NAME, name)
PROTO_SCHEMA(PROTO__NONE, PROTO__DECL_SEND, PROTO__DECL_SEND0, PROTO__DECL_SEND_ALIAS)

/* Batched messages (TASK_RUNS, TASK_DONES, TASK_RESULTS, EXECS, EXEC_DONES): records are added
 * to the connection's open frame of that type, which closes when it is full
 * (PROTO_BATCH_MAX_RECS, PROTO_BATCH_MAX_BYTES), when any other frame is queued on the
 * connection (order is kept), and at the latest when the output is written, once per loop
 * iteration: a lone record goes out as soon as a single message would.
 * proto_conn_batch_rec(c, type) returns the encoder to write exactly one record into
 * (proto_put_kind_rec); proto_conn_batch_commit(c) then checks its size. */
proto_enc *proto_conn_batch_rec(proto_conn *c, uint32_t type);
/** @return 0; SPW_EFRAMESIZE if the record alone exceeds the peer's max_frame (it is dropped,
 * the others kept); SPW_ECLOSED. */
int proto_conn_batch_commit(proto_conn *c);
/* proto_batch_kind(c, type, &rec) for each record kind: one record of batched message type. */
#define PROTO__DECL_BATCH(NAME, name)                                                              \
    int proto_batch_##name(proto_conn *c, uint32_t type, const proto_##name##_rec *r);
PROTO_SCHEMA(PROTO__DECL_BATCH, PROTO__NONE, PROTO__NONE, PROTO__NONE)

/** The frame (length prefix included) whose message on_msg is handling now, *len bytes, valid
 * until on_msg returns: a receiver that keeps messages as they came (the scheduler's journal)
 * copies it. NULL (and *len 0) outside on_msg, for a payload received into a sink, and for
 * c NULL. */
const uint8_t *proto_conn_frame(const proto_conn *c, size_t *len);
/** Output that waits until what it answers is on disk (the scheduler's journal). On a gated
 * connection, proto_ctx_hold marks what was queued since its last hold as waiting for an
 * epoch, and nothing after a mark is written before it, until proto_ctx_release covers that
 * epoch. Closing (or ungating) a connection lets what it holds go. */
void proto_conn_set_gated(proto_conn *c, bool gated);
/** Holds what every gated connection queued since its last hold, for epoch. */
void proto_ctx_hold(proto_ctx *ctx, uint64_t epoch);
/** Lets the holds tagged upto or lower go: their output is written from the loop. */
void proto_ctx_release(proto_ctx *ctx, uint64_t upto);
/** Sends an ERROR frame. */
void proto_conn_error(proto_conn *c, uint64_t req, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/** Bytes queued and not yet written. */
size_t proto_conn_queued(const proto_conn *c);
/** False once queued output passed the high-water mark, until on_drain. Producers of bulk data
 * stop sending while it is false. */
bool proto_conn_writable(const proto_conn *c);
/** Starts writing what is queued now rather than at the end of the loop iteration: for output
 * that must be on its way before something outside the connection happens. */
void proto_conn_flush(proto_conn *c);
/** Stops delivering messages (and reading) until proto_conn_resume; for back-pressure. */
void proto_conn_pause(proto_conn *c);
/** Resumes delivery; messages already buffered are delivered from the loop, not from inside
 * this call. */
void proto_conn_resume(proto_conn *c);
/** Watches a connection someone waits on. A connection that neither received a byte nor got a
 * byte of its output out (bytes leaving a large write count) for quiet_ms/3 sends a PING,
 * which every peer's connection answers with a PONG (once, until something comes back); one
 * quiet for quiet_ms is closed at once with SPW_ETIMEDOUT (what is queued is dropped). Call it every few hundred ms (or quiet_ms/3,
 * whichever is less) while waiting. Time is the loop's (uv_now).
 * @return 0, or SPW_ETIMEDOUT when it closed c now; closing and closed connections: 0. */
int proto_conn_watch(proto_conn *c, uint32_t quiet_ms);
/** A wait on c begins: nobody read c from from_ms (loop time) until now, so that span is not its
 * peer's silence (what the peer sent may be unread); silence before from_ms still counts, so
 * silence adds up over waits separated by the caller's own work (a PING still out stays out:
 * re-sent at every wait, its bytes leaving would look like progress for ever). Update the
 * loop's time first (uv_update_time) if the loop has not run for a while. */
void proto_conn_watch_skip(proto_conn *c, uint64_t from_ms);
/** Milliseconds of loop time c has been silent: since it last received a byte or got output
 * out, less what proto_conn_watch_skip took out, and counted from its last proto_conn_resume;
 * 0 while it is paused with its output under the high-water mark (a peer we do not read is not
 * silent: we are deaf; above the mark, whether it takes our bytes still tells). */
uint64_t proto_conn_quiet_ms(proto_conn *c);
/** Closes: queued output is written first when possible (bounded by a deadline), then the
 * handle is closed and on_close(status) runs. Safe to call twice. */
void proto_conn_close(proto_conn *c, int status);

#ifdef __cplusplus
}
#endif
#endif /* SPW_CONN_H */
