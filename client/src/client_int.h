/* libspillway internals, for the library's own files (and its unit test). Not installed; what
 * other in-tree modules may call is in spillway/ctl_link.h. */
#ifndef SPW_CLIENT_INT_H
#define SPW_CLIENT_INT_H

#include <uthash.h>

#include "spillway/conn.h"
#include "spillway/ctl_link.h"
#include "spillway/idmap.h"
#include "spillway/spillway.h"

enum handle_kind { H_SMALL, H_PUT, H_TASK };
enum handle_state { H_PENDING, H_DONE, H_FAILED };

typedef struct handle {
    spw_id id;
    uint8_t kind;
    uint8_t state;
    uint8_t chunk_shift; /* a chunked put: its chunks are 1 << chunk_shift bytes; else 0 */
    int status;
    uint64_t size;
    uint8_t *inl; /* small value or small result (owned), NULL otherwise */
    bool has_inl;
    uint8_t held;  /* in the reference table (a free slot of a chunk: 0) */
    uint8_t dense; /* in a chunk (an id of this client's), not in refs.other */
    char *err;
    uint32_t graph_uses; /* an automatic put of a large argument: graphs still using it */
} handle;

/* The reference table (refs.c): handles of ids this client made, in chunks indexed by the
 * id's counter; other ids in an spw_idmap. */
#define SPILLWAY__CHUNK_BITS 10
#define SPILLWAY__CHUNK (1u << SPILLWAY__CHUNK_BITS)
typedef struct ref_chunk {
    uint32_t live; /* held handles in h */
    handle h[];
} ref_chunk;

typedef struct reftab {
    ref_chunk **chunks; /* by counter >> SPILLWAY__CHUNK_BITS; NULL: none held there */
    size_t nchunks;
    ref_chunk *spare;   /* a freed chunk kept for the next one needed */
    size_t nalloc;      /* chunks in the directory */
    uint64_t ndense;    /* handles held in chunks */
    uint64_t n;         /* handles held, both kinds */
    spw_idmap other;    /* handles of ids not made by this client */
} reftab;


typedef struct peer {
    char addr[SPW_ADDR_MAX];
    UT_hash_handle hh;
    proto_conn *conn;
    bool ready;
    int status; /* close status once closed */
    struct spillway *c;
} peer;

/* A same-host worker's arena, mapped once, and the Unix connection that pins, creates
 * and seals objects in it. */
typedef struct local {
    char name[72]; /* hash key: the worker's socket name, "w|" in front for a writable one */
    bool writable; /* mapped read-write: for puts; reads use a read-only mapping */
    UT_hash_handle hh;
    proto_conn *conn;
    int memfd;
    uint8_t *base;
    uint64_t capacity;
    struct spillway *c;
} local;

/* The one request in flight. */
typedef struct call {
    uint64_t req;
    bool active, done;
    int status;
    uint32_t type;  /* reply type that completes it */
    bool errors_then_ack; /* SUBMIT: ERROR frames precede the ack */
    bool parts;           /* frames of other types are parts of the reply (on_reply sees them) */
    void (*on_reply)(const proto_msg *m, void *arg);
    void *arg;
} call;

/* A transfer with a worker (put or get). */
typedef struct xfer {
    uint64_t req;
    bool active, done;
    int status;
    spw_id id;
    uint8_t *buf;     /* get: destination */
    uint64_t size, received;
    uint64_t off;     /* local: arena offset from PINNED / CREATED */
    peer *p;
    local *l;
} xfer;

struct spillway {
    struct spillway_plugin *plugins; /* added and not released: detached at close */
    uv_loop_t loop;
    uv_timer_t timer;
    uv_timer_t watch;  /* while a call waits: probes its connections (spillway__run_until) */
    uint32_t stall_ms; /* spillway_set_stall_timeout; 0: never */
    uint64_t watch_end_ms; /* loop time the last watched wait ended (at first: connect) */
    proto_ctx *ctx;
    proto_conn *sched;
    bool ready;
    int sched_status;
    char addr[SPW_ADDR_MAX];
    proto_welcome wel;
    uint64_t inline_limit;
    bool auto_put;
    bool no_local;
    uint64_t chunk_size; /* spillway_opts.chunk_size */
    unsigned put_replicas; /* spillway_opts.put_replicas */
    uint64_t next_req;
    uint64_t id_hi, id_lo, next_id;
    reftab refs; /* the references this client holds, by id (refs.c) */
    peer *peers;
    local *locals;
    char host_id[128];
    call call;
    xfer xfer;
    uint64_t put_borrowed; /* chunks of a put queued on a connection, borrowed from its caller */
    int timer_fired;
    char errmsg[PROTO_MAX_STR + 64];
    bool err_set; /* errmsg was written since the public call in progress began */
    bool wrong_role; /* connect: the peer proved the secret but is no scheduler */
    int peer_refused; /* why the last worker connection closed before it was ready */
    /* Resuming the session after the scheduler's connection broke (resume.c). Every frame for
     * the scheduler is built in log and stays there until an answer shows the scheduler
     * processed it; a SUBMIT's frames stay in sub. log_base + log_frames + sub_frames is the
     * count of frames sent on this session, which WELCOME's nrecv is compared with. */
    uint32_t reconnect_ms;  /* spillway_opts.reconnect_ms; 0: a broken connection is final */
    bool resumable;         /* the scheduler gave the session a token */
    bool lost;              /* the session is gone for good (lost_why says why) */
    uint8_t token[PROTO_TOKEN_LEN];
    uint64_t session;
    spw_buf log;
    uint32_t log_frames;
    uint64_t log_base;
    uint8_t *sub; /* owned: the frames of the SUBMIT in flight, sub_len bytes */
    size_t sub_len;
    uint32_t sub_frames;
    char lost_why[384];
};

void spillway__set_err(spillway *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The scheduler's --max-frame, as its WELCOME said (the default before it). */
static inline uint32_t spillway__max_frame(const spillway *c)
{
    return c->wel.max_frame ? c->wel.max_frame : PROTO_DEFAULT_MAX_FRAME;
}
/* Every public call that returns an error leaves a text for spillway_errmsg: the public entry
 * points are thin wrappers that call spillway__enter first and return through
 * spillway__leave, which writes "FUNCTION: <the error's text>" when nothing more specific was
 * set during the call. c may be NULL (then nothing is recorded). */
static inline void spillway__enter(spillway *c)
{
    if (c != NULL)
        c->err_set = false;
}
int spillway__leave(spillway *c, int rc, const char *fn);
/* Refuses the public call fn's arguments: errmsg reads "FUNCTION: <rc's text>: WHY", where why
 * names the argument, its value and the limit ("fn is 999 bytes; at most 255"). c may be NULL
 * (then nothing is recorded). @return rc. */
int spillway__refuse(spillway *c, int rc, const char *fn, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Runs the loop until cond holds (0), the deadline passes (SPW_ETIMEDOUT), or the scheduler's
 * connection is gone: SPW_ECLOSED, or SPW_ETIMEDOUT with the error text naming the scheduler
 * when the stall watch closed it (spillway__stalled; callers keep that text). */
int spillway__run_until(spillway *c, bool (*cond)(spillway *c, void *arg), void *arg,
                        int timeout_ms);
/* The stall watch closed the scheduler's connection: it went silent for the stall timeout. */
bool spillway__stalled(const spillway *c);
/* Frames for the scheduler (resume.c): built with proto_enc_NAME(&e, spillway__out(c), ...),
 * then spillway__send(c, &e) logs and sends it (while reconnecting it only logs it: it goes out
 * on resume). @return 0; SPW_EFRAMESIZE (dropped); SPW_ECLOSED when the session is gone. */
spw_buf *spillway__out(spillway *c);
int spillway__send(spillway *c, proto_enc *e);
/* Sends a SUBMIT's nframes frames (len bytes at frames, consumed also on error), kept until
 * its answer. */
int spillway__send_submit(spillway *c, uint8_t *frames, size_t len, uint32_t nframes);
/* An answer came: the scheduler processed every frame logged so far. */
void spillway__answered(spillway *c);
/* Between calls (after releases): once the unanswered frames grow large, asks the scheduler
 * something cheap, whose answer lets the log go. */
void spillway__log_bound(spillway *c);
/* After a resume: sends what the scheduler did not process (WELCOME's nrecv), and the request
 * of the call under way again when its answer was lost; fails that call instead where asking
 * again would do it twice. @return 0, or SPW_EPROTO (the counts disagree). */
int spillway__resend(spillway *c);
/* Whether a broken connection to the scheduler may be resumed. */
bool spillway__can_resume(const spillway *c);
/* Before a call: the scheduler's connection, reconnecting and resuming if it broke.
 * @return 0, or SPW_ECLOSED (errmsg says why). */
int spillway__connected(spillway *c);
/* The session is gone for good; why is kept for the errors of later calls. */
void spillway__lose(spillway *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void spillway__resume_free(spillway *c);
uint64_t spillway__call_begin(spillway *c, uint32_t reply_type);
int spillway__call_wait(spillway *c, int timeout_ms);
void spillway__flush(spillway *c);
spw_id spillway__new_id(spillway *c);
/* The counter of an id spillway__new_id made (1, 2, ...), or 0 for any other id. */
uint64_t spillway__id_counter(const spillway *c, spw_id id);
void spillway__refs_init(spillway *c);
handle *spillway__handle_find(spillway *c, spw_id id);
/* Adds a held reference (aborts if id is held already). A pointer to a handle is valid until
 * the next spillway__handle_add or spillway__handle_free: adding may move handles (refs.c). */
handle *spillway__handle_add(spillway *c, spw_id id, int kind);
/* How far ahead a walk over many references prefetches the handles of ids not made here (in
 * refs.other, a hash table): the table slot of refs[i + 2 * AHEAD] and the handle of
 * refs[i + AHEAD] (spw_idmap_prefetch), so that the cache misses of looking up one after
 * another overlap. This client's own ids need none: their handles lie in the order they were
 * made. */
#define SPILLWAY__AHEAD 8
static inline void spillway__refs_prefetch(spillway *c, const spillway_ref *refs, size_t n,
                                           size_t i)
{
    if (c->refs.other.n == 0)
        return;
    if (i + 2 * SPILLWAY__AHEAD < n)
        spw_idmap_prefetch(&c->refs.other,
                           (spw_id){refs[i + 2 * SPILLWAY__AHEAD].hi, refs[i + 2 * SPILLWAY__AHEAD].lo},
                           0);
    if (i + SPILLWAY__AHEAD < n)
        spw_idmap_prefetch(&c->refs.other,
                           (spw_id){refs[i + SPILLWAY__AHEAD].hi, refs[i + SPILLWAY__AHEAD].lo}, 1);
}

/* Drops a held reference's handle and what it owns. */
void spillway__handle_free(spillway *c, handle *h);
/* Drops a held reference: frees its handle and, where the scheduler holds it too, sends
 * RELEASE. Writes no spillway_errmsg: for the references a failing call gives back on its way
 * out, whose own error is the one its caller hears. */
void spillway__handle_release(spillway *c, handle *h);
/* Frees every handle and the table (spillway_close). */
void spillway__handles_free_all(spillway *c);
/* The bytes of every empty value (an inline result of length 0): never allocated, never
 * freed; spillway_free ignores it. */
extern uint8_t spillway__empty[1];
void spillway__locals_free(spillway *c);
int spillway__put_object(spillway *c, spw_id id, const void *data, size_t len, uint64_t flags,
                         const char *site);
/* The size of an object, waiting for it to exist; *chunk its chunks' size if it is chunked,
 * else 0 (chunk may be NULL). */
int spillway__resolve_size(spillway *c, spw_id id, uint64_t *size, uint64_t *chunk);
/* The connection closes: its plugin handles stay valid but refer to no connection. */
void spillway__plugins_detach(spillway *c);
/* The connection a graph was made on. */
spillway *spillway__graph_client(const spillway_graph *g);
/* Lifts a graph's byte cap when none was set (0 would mean the scheduler's default). */
void spillway__graph_uncap_bytes(spillway_graph *g);


/** Appends task record r to out, the same bytes as proto_put_task_rec (enc.c); its arguments
 * are an array (r->args.v). */
void spillway__put_task_rec(spw_buf *out, const proto_task_rec *r);

/** The secret file a connection uses: opts->secret_file; else $SPILLWAY_SECRET_FILE if set and
 * not empty; else SPW_DEFAULT_SECRET_FILE (/etc/spillway/secret) when it exists and this
 * process may read it (a warning when it exists and may not); else NULL (no secret). */
const char *spillway__secret_file(const spillway_opts *o);

/** The scheduler session's address as "host:port". */
const char *spillway__addr(const spillway *c);

#endif
