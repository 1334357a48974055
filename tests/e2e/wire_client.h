/*
 * A raw wire client for the end-to-end tests: a TCP or local-socket connection to a daemon
 * that sends exactly the frames (or bytes) a test chooses and reads the daemon's frames back
 * with the real decoder. Reads block with a timeout (WIRE_TIMEOUT_S), waiting for the expected
 * frame; nothing sleeps to synchronise. Anything unexpected fails the running cmocka case.
 * A frame read (w->m) points into the connection's buffer and lives until the next read.
 */
#ifndef SPW_WIRE_CLIENT_H
#define SPW_WIRE_CLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "harness.h"
#include "spillway/proto.h"

#define WIRE_TIMEOUT_S 30
#define WIRE_SECRET "e2e-cluster-secret" /* what harness.c writes into a cluster's secret */
#define WIRE_MAX_STASH 64

/* A TASK_RESULT record kept while waiting for another frame. */
typedef struct stashed_result {
    spw_id id;
    int64_t status;
    uint64_t size;
    bool has_inline;
    uint8_t inl[8];
} stashed_result;

typedef struct wire {
    int fd;
    spw_buf in;      /* bytes received and not yet consumed */
    size_t consumed; /* size of the frame last returned, dropped at the next read */
    msgpack_zone zone;
    proto_limits lim;
    proto_msg m; /* the frame last returned; points into `in` */
    spw_buf out;
    proto_enc enc;
    uint8_t server_nonce[PROTO_NONCE_LEN];
    uint8_t client_nonce[PROTO_NONCE_LEN];
    uint64_t server_role;
    uint64_t hello_role;
    const char *key;
    stashed_result stash[WIRE_MAX_STASH]; /* TASK_RESULTs met waiting for another frame */
    int nstash;
} wire;

/* ------------------------------------------------------------ connections */

/* Connects over TCP to addr ("127.0.0.1:PORT"), before any handshake. */
wire *wire_open(const char *addr);
/* Connects to worker pid's local socket ("@spillway-worker-PID-XXXXXXXX" in /proc/net/unix). */
wire *wire_open_local(int pid);
/* Closes and frees w; NULL is a no-op. */
void wire_close(wire *w);

/* ---------------------------------------------------------------- reading */

/* Reads the next frame into w->m. Returns 1, 0 when the daemon closed the connection, or
 * -ETIMEDOUT. A frame the daemon sends that our decoder refuses fails the test. */
int wire_read(wire *w);
/* Reads the next frame: 1 with its type and, for an ERROR, its code and text (else code 0);
 * 0 if the daemon closed the connection without a frame; -1 on timeout. */
int wire_first_frame(wire *w, uint32_t *type, int64_t *code, char *msg, size_t msglen);
/* Waits for the frame of this type and request id. TASK_RESULTs met meanwhile are kept for
 * wire_task_result; any other frame, an ERROR above all, fails the test. */
const proto_msg *wire_await(wire *w, uint32_t type, uint64_t req);
/* Waits for the ERROR frame answering req and checks its code. */
void wire_expect_error(wire *w, uint64_t req, int code);
/* The daemon closes the connection, with no frame before the close. */
void wire_expect_eof(wire *w);
/* The connection is usable: a STATUS_REQ gets its STATUS. */
void wire_expect_status(wire *w, uint64_t req);
/* Waits for the SUBMIT_ACK of req and returns how many tasks were accepted. */
uint64_t wire_submit_ack(wire *w, uint64_t req, uint64_t graph);
/* Waits for the TASK_RESULT of task id (it may have come already). */
stashed_result wire_task_result(wire *w, spw_id id);
/* The name of an error code, for messages. */
const char *wire_err_name(int64_t code);
/* An 8-byte little-endian value (an inline result). */
uint64_t wire_le64(const uint8_t *b);

/* ---------------------------------------------------------------- sending */

/* Sends n bytes; false if the daemon has closed the connection already. */
bool wire_send(wire *w, const void *p, size_t n);
/* Begins a frame in w->out; the caller adds nfields fields. */
proto_enc *wire_begin(wire *w, uint32_t type, uint64_t req, uint32_t nfields);
/* Finishes the frame begun with wire_begin and sends it. */
bool wire_end(wire *w);
/* The frame begun with wire_begin, finished but not sent (for sending in pieces). */
const spw_buf *wire_end_unsent(wire *w);
/* A frame with a length prefix of our choosing and a raw body. */
bool wire_send_raw_frame(wire *w, const void *body, uint32_t len);

/* -------------------------------------------------------------- handshake */

typedef struct hello_args {
    uint64_t version;
    uint64_t role;
    const char *key;         /* "" for a cluster without a secret */
    bool corrupt_proof;      /* flip one bit of a correct proof */
    const char *worker_addr; /* non-NULL: a worker record with these fields */
    uint64_t worker_slots;
} hello_args;

/* Waits for the daemon's CHALLENGE and keeps its nonce and role. */
void wire_challenge(wire *w);
/* Encodes HELLO (request id 1) into w->out without sending it. */
const spw_buf *wire_hello_frame(wire *w, const hello_args *a);
/* Sends HELLO. */
void wire_hello(wire *w, const hello_args *a);
/* Waits for WELCOME and checks the daemon's proof of the secret. */
void wire_welcomed(wire *w);
/* Connects and completes the handshake as role, proving key. */
wire *wire_connect_as(const char *addr, uint64_t role, const char *key);
/* A client of c's scheduler, past the handshake. */
wire *wire_client(h_cluster *c);
/* A client on worker's peer port, past the handshake. */
wire *wire_peer(h_cluster *c, int worker);
/* A client on worker's local socket, past the handshake. */
wire *wire_local(h_cluster *c, int worker);

/* --------------------------------------------------------------- messages */

typedef struct raw_arg {
    int kind;     /* PROTO_ARG_* */
    uint64_t u64; /* the inline value, 8 bytes little-endian */
    spw_id obj;
    uint64_t off, len;
} raw_arg;

typedef struct raw_task {
    spw_id id;
    const char *fn;
    uint32_t nargs;
    raw_arg args[2];
    uint64_t flags;
} raw_task;

/* A kept task inc(x). */
raw_task wire_task_inc(spw_id id, uint64_t x);
/* Encodes one task record of a SUBMIT. */
void wire_put_task(proto_enc *e, const raw_task *t);

void wire_send_status_req(wire *w, uint64_t req);
void wire_send_release(wire *w, uint64_t req, const spw_id *ids, uint32_t n);
void wire_send_locate(wire *w, uint64_t req, spw_id id, uint64_t timeout_ms);
void wire_send_put_place(wire *w, uint64_t req, spw_id id, uint64_t size);
void wire_send_submit(wire *w, uint64_t req, uint64_t graph, uint64_t flags, const raw_task *ts,
                      uint32_t n);
void wire_send_obj_write(wire *w, uint64_t req, spw_id id, uint64_t total, uint64_t off,
                         uint64_t flags, const void *data, size_t len);
void wire_send_obj_read(wire *w, uint64_t req, spw_id id, uint64_t off, uint64_t len);

#endif
