/*
 * spw_proto: the wire protocol.
 *
 * A frame is a 4-byte big-endian body length followed by a msgpack body
 * [type, request_id, [field, ...]]. Every message type has a schema (proto.c) that lists its
 * fields' kinds and limits; the decoder checks the whole frame against it, so a handler never
 * sees a value of the wrong type or out of its bounds. Object payloads travel as OBJ_WRITE /
 * OBJ_DATA chunk frames, never as one huge frame.
 *
 * Fields added to a message after its first version may be absent (the decoder marks them nil),
 * so an older sender stays understood; unknown extra fields are refused.
 *
 * Decoding contract (picohttpparser style): proto_decode() is pure, with no I/O and no globals.
 * It returns the bytes consumed (> 0), 0 for "need more", or a negative SPW_E* code for
 * malformed input. The frame length is checked against the limit before anything is buffered.
 * Decoded byte strings point into the caller's buffer and records into the caller's zone:
 * both are valid until the buffer is changed or the zone cleared.
 */
#ifndef SPW_PROTO_H
#define SPW_PROTO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <msgpack.h>

#include "spillway/base.h"

#ifdef __cplusplus
extern "C" {
#endif

#define PROTO_VERSION 1
#define PROTO_HDR_LEN 4
#define PROTO_MAX_FIELDS 16
#define PROTO_NONCE_LEN 16
#define PROTO_PROOF_LEN 32
#define PROTO_DEFAULT_MAX_FRAME (64u << 20)
#define PROTO_DEFAULT_CHUNK (4u << 20)
#define PROTO_DEFAULT_INLINE_LIMIT (64u << 10)
#define PROTO_MAX_STR 4096u
#define PROTO_MAX_NAME 255u
/* Most task slots one worker may declare (HELLO's slots field; --slots). A bound on what a peer
 * can make the scheduler account for, far above any core count a worker is run with. */
#define PROTO_MAX_SLOTS 4096u
/* Largest frame body accepted before the peer has proved the secret (CHALLENGE, HELLO, WELCOME
 * and a refusal all fit many times over). A larger declared length closes the connection with
 * SPW_EFRAMESIZE before any of its body is buffered, so unauthenticated peers hold at most this
 * much of a daemon's memory each. */
#define PROTO_PREAUTH_MAX_FRAME 4096u

/** Roles a peer announces in HELLO. */
enum proto_role {
    PROTO_ROLE_SCHEDULER = 1,
    PROTO_ROLE_WORKER = 2,
    PROTO_ROLE_CLIENT = 3,
    PROTO_ROLE_CTL = 4,
    PROTO_ROLE_EXECUTOR = 5,
    PROTO_ROLE_PEER = 6, /* a worker or client talking to a worker's peer port */
};
const char *proto_role_name(int role);

/* Message types. X(name, value): the schema of each is in proto.c. */
#define PROTO_MSG_MAP(X)                                                                           \
    X(CHALLENGE, 1)                                                                                \
    X(HELLO, 2)                                                                                    \
    X(WELCOME, 3)                                                                                  \
    X(ERROR, 4)                                                                                    \
    X(OK, 5)                                                                                       \
    X(PUT_PLACE, 10)                                                                               \
    X(PUT_TARGET, 11)                                                                              \
    X(LOCATE, 12)                                                                                  \
    X(LOCATION, 13)                                                                                \
    X(RELEASE, 14)                                                                                 \
    X(SUBMIT, 15)                                                                                  \
    X(SUBMIT_ACK, 16)                                                                              \
    X(TASK_RESULT, 17)                                                                             \
    X(TASK_RUN, 20)                                                                                \
    X(TASK_DONE, 21)                                                                               \
    X(OBJ_ADDED, 22)                                                                               \
    X(OBJ_DELETE, 23)                                                                              \
    X(HEARTBEAT, 24)                                                                               \
    X(OBJ_WRITE, 30)                                                                               \
    X(OBJ_READ, 31)                                                                                \
    X(OBJ_DATA, 32)                                                                                \
    X(PUT_DONE, 33)                                                                                \
    X(ARENA_MAP, 60)                                                                               \
    X(ARENA, 61)                                                                                   \
    X(OBJ_PIN, 62)                                                                                 \
    X(PINNED, 63)                                                                                  \
    X(OBJ_UNPIN, 64)                                                                               \
    X(OBJ_CREATE, 65)                                                                              \
    X(CREATED, 66)                                                                                 \
    X(OBJ_SEAL, 67)                                                                                \
    X(STATUS_REQ, 40)                                                                              \
    X(STATUS, 41)                                                                                  \
    X(MEMORY_REQ, 42)                                                                              \
    X(MEMORY_OBJS, 43)                                                                             \
    X(MEMORY_END, 44)                                                                              \
    X(OBJ_LIST_REQ, 45)                                                                            \
    X(OBJ_LIST, 46)                                                                                \
    X(BROADCAST, 47)                                                                               \
    X(BROADCAST_DONE, 48)                                                                          \
    X(REPLICATE, 49)                                                                               \
    X(EXEC, 50)                                                                                    \
    X(EXEC_ALLOC, 51)                                                                              \
    X(EXEC_ALLOC_OK, 52)                                                                           \
    X(EXEC_DONE, 53)                                                                               \
    X(TASK_STARTED, 70)                                                                            \
    X(GRAPHS_REQ, 71)                                                                              \
    X(GRAPHS, 72)                                                                                  \
    X(TASK_CANCEL, 73)

enum proto_type {
#define PROTO_TYPE_ENUM(name, value) PROTO_##name = (value),
    PROTO_MSG_MAP(PROTO_TYPE_ENUM)
#undef PROTO_TYPE_ENUM
        PROTO_TYPE_MAX = 80
};
/** Name of a message type ("TASK_RUN"), or "?" for an unknown one. */
const char *proto_type_name(uint32_t type);

/* Field indexes, per message and per record kind. Kept beside the schemas in proto.c. */
enum { F_CHAL_VERSION, F_CHAL_NONCE, F_CHAL_ROLE };
enum {
    F_HELLO_VERSION,
    F_HELLO_ROLE,
    F_HELLO_NONCE,
    F_HELLO_PROOF,
    F_HELLO_PID,
    F_HELLO_HOST,
    F_HELLO_NAME,
    F_HELLO_WORKER /* optional record R_WINFO */
};
enum { R_WINFO_ADDR, R_WINFO_SLOTS, R_WINFO_CAPACITY, R_WINFO_HOSTID, R_WINFO_LOCAL };
enum {
    F_WELCOME_PROOF,
    F_WELCOME_SESSION,
    F_WELCOME_INLINE_LIMIT,
    F_WELCOME_CHUNK,
    F_WELCOME_MAX_FRAME
};
enum { F_ERROR_CODE, F_ERROR_MSG };
enum { F_OK_VALUE };
enum { F_PUTP_ID, F_PUTP_SIZE, F_PUTP_SITE, F_PUTP_FLAGS, F_PUTP_HOSTID /* may be absent */ };
enum { F_PUTT_ID, F_PUTT_WORKER, F_PUTT_ADDR, F_PUTT_HOSTID, F_PUTT_LOCAL, F_PUTT_EXISTS };
enum { F_LOCATE_ID, F_LOCATE_TIMEOUT_MS };
enum {
    F_LOC_ID,
    F_LOC_STATUS,
    F_LOC_SIZE,
    F_LOC_INLINE, /* optional bin */
    F_LOC_ERR,
    F_LOC_LOCS /* records R_LOC */
};
enum { R_LOC_WORKER, R_LOC_ADDR, R_LOC_HOSTID, R_LOC_LOCAL };
enum { F_RELEASE_IDS /* list of ids */ };
enum {
    F_SUBMIT_GRAPH,
    F_SUBMIT_FLAGS,
    F_SUBMIT_MAX_TASKS,
    F_SUBMIT_MAX_BYTES,
    F_SUBMIT_TASKS, /* records R_TASK */
    F_SUBMIT_SITE   /* call site of the submit, in the last frame; may be absent */
};
enum {
    R_TASK_ID,
    R_TASK_FN,
    R_TASK_ARGS /* records R_ARG */,
    R_TASK_FLAGS,
    R_TASK_SITE,
    R_TASK_WORKER /* run only on the worker of this name; may be absent */
};
enum { R_ARG_KIND, R_ARG_INLINE /* optional bin */, R_ARG_OBJ /* optional id */, R_ARG_OFF, R_ARG_LEN };
enum { F_SUBACK_GRAPH, F_SUBACK_NTASKS };
enum { F_TRES_ID, F_TRES_STATUS, F_TRES_SIZE, F_TRES_INLINE, F_TRES_ERR };
enum { F_RUN_ID, F_RUN_FN, F_RUN_ARGS /* records R_WARG */, F_RUN_FLAGS };
enum {
    R_WARG_KIND,
    R_WARG_INLINE,
    R_WARG_OBJ,
    R_WARG_OFF,
    R_WARG_LEN,
    R_WARG_OBJSIZE,
    R_WARG_LOCS /* records R_LOC */
};
enum { F_DONE_ID, F_DONE_STATUS, F_DONE_SIZE, F_DONE_INLINE, F_DONE_ERR, F_DONE_RUN_US };
enum { F_ADDED_ID, F_ADDED_SIZE };
enum { F_DELETE_IDS /* list of ids */ };
/* TASK_CANCEL (scheduler -> worker): tasks of a client that went away; those not started are
 * dropped and answered TASK_DONE with SPW_ECANCELED. */
enum { F_CANCEL_IDS /* list of task ids */ };
enum { F_HB_STATS /* list of u64, indexes PROTO_STAT_* */ };
enum { F_WRITE_ID, F_WRITE_TOTAL, F_WRITE_OFF, F_WRITE_FLAGS, F_WRITE_DATA };
enum { F_READ_ID, F_READ_OFF, F_READ_LEN, F_READ_FLAGS /* may be absent */ };
/** OBJ_READ flags. */
#define PROTO_READ_FOLLOW 1u /* if the object is not here yet but about to be (a broadcast
                                chain), wait for it a little and forward it as it arrives */
enum { F_DATA_ID, F_DATA_TOTAL, F_DATA_OFF, F_DATA_FLAGS, F_DATA_DATA };
enum { F_PUTDONE_ID };
/* Local (same-host) access to a worker's arena, over its Unix socket. */
enum { F_AMAP_FLAGS };
/** ARENA_MAP flags. Without PROTO_ARENA_WRITE the descriptor that comes back is read-only. */
#define PROTO_ARENA_WRITE 1u /* the client puts objects: it needs a writable mapping */
enum { F_ARENA_CAPACITY };       /* the memfd rides along as SCM_RIGHTS */
enum { F_PIN_ID };
enum { F_PINNED_ID, F_PINNED_OFF, F_PINNED_SIZE };
enum { F_UNPIN_ID };
enum { F_CREATE_ID, F_CREATE_SIZE };
enum { F_CREATED_ID, F_CREATED_OFF };
enum { F_SEAL_ID };
enum {
    F_STATUS_NOW_MS,
    F_STATUS_UPTIME_MS,
    F_STATUS_LISTEN,
    F_STATUS_WORKERS /* records R_SWORKER */,
    F_STATUS_CLIENTS /* records R_SCLIENT */,
    F_STATUS_TASKS /* list of u64, indexes PROTO_TSTATE_* */,
    F_STATUS_OBJECTS,
    F_STATUS_OBJ_BYTES,
    /* Added for /metrics; an older scheduler leaves them out. */
    F_STATUS_REFS,    /* list of u64 by PROTO_REF_* kind: references held */
    F_STATUS_CONNS,   /* list of u64 indexed by PROTO_ROLE_*: connections by role */
    F_STATUS_IO,      /* list of u64, PROTO_IO_* (conn.h): frames and bytes in and out */
    F_STATUS_LATENCY  /* list of u64: tasks finished per PROTO_LATENCY_BOUNDS_MS bucket (the
                         last is +Inf), then the sum of their latencies in microseconds */
};
/** Upper bounds (ms) of the submit -> done latency buckets in STATUS; one more bucket, +Inf,
 * follows them. */
#define PROTO_LATENCY_BOUNDS_MS {1, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000, 60000}
#define PROTO_LATENCY_NBOUNDS 14
/* Task start notices, worker -> scheduler: the tasks an executor has begun (batched). */
enum { F_STARTED_IDS /* list of ids */ };
/* Graph progress: GRAPHS_REQ {session, graph} (0 = any) -> GRAPHS {records R_GRAPH}. */
enum { F_GREQ_SESSION, F_GREQ_GRAPH };
enum { F_GRAPHS_GRAPHS /* records R_GRAPH */ };
enum {
    R_GRAPH_SESSION,
    R_GRAPH_ID,
    R_GRAPH_HOST,
    R_GRAPH_PID,
    R_GRAPH_SITE,     /* call site of the submit ("" if unknown) */
    R_GRAPH_AGE_MS,
    R_GRAPH_COUNTS,   /* list of u64 by PROTO_TSTATE_*: tasks of the graph in each state */
    R_GRAPH_LIVE,     /* bytes of outputs in flight and not yet consumed */
    R_GRAPH_MAX_BYTES,/* its cap on those (0: none) */
    R_GRAPH_ENDED_MS  /* age when its last task finished; 0 while it has unfinished tasks */
};
enum {
    R_SWORKER_ID,
    R_SWORKER_ADDR,
    R_SWORKER_NAME,
    R_SWORKER_SLOTS,
    R_SWORKER_BUSY,
    R_SWORKER_ASSIGNED,
    R_SWORKER_STATE,
    R_SWORKER_STATS /* list of u64 */
};
enum { R_SCLIENT_SESSION, R_SCLIENT_HOST, R_SCLIENT_PID, R_SCLIENT_ROLE, R_SCLIENT_TASKS, R_SCLIENT_REFS };
/* Broadcast: client -> scheduler BROADCAST, scheduler -> workers REPLICATE (fetch it from the
 * first of locs, which may still be receiving it: a pipelined chain), workers answer OBJ_ADDED
 * or ERROR, scheduler -> client BROADCAST_DONE. */
enum { F_BCAST_ID, F_BCAST_WORKERS /* 0 = all */ };
enum { F_BCDONE_ID, F_BCDONE_COPIES, F_BCDONE_FAILED };
enum { F_REPL_ID, F_REPL_SIZE, F_REPL_LOCS /* records R_LOC */ };

/* spillway-ctl memory. The reply is any number of MEMORY_OBJS frames, then MEMORY_END. */
enum { F_MEMREQ_FLAGS };
enum { F_MEMOBJS_OBJS /* records R_MOBJ */ };
enum {
    R_MOBJ_ID,
    R_MOBJ_SIZE,
    R_MOBJ_STATE,    /* PROTO_OSTATE_* */
    R_MOBJ_SITE,
    R_MOBJ_OWNER_HOST,
    R_MOBJ_OWNER_PID,
    R_MOBJ_AGE_MS,
    R_MOBJ_TASK_FN,  /* "" for a put */
    R_MOBJ_REFS,     /* list of u64 by kind: CLIENT, TASK_ARG, PINNED, BROADCAST, OUTPUT */
    R_MOBJ_HOLDERS,  /* records R_HOLDER */
    R_MOBJ_LOCS,     /* records R_MLOC */
    R_MOBJ_INLINE    /* 1 if the value lives in the scheduler (small task result) */
};
enum { R_HOLDER_KIND, R_HOLDER_COUNT, R_HOLDER_WHO };
enum { R_MLOC_WORKER, R_MLOC_WHERE /* OST_IN_MEMORY | OST_ON_DISK */, R_MLOC_STORED, R_MLOC_PINS };
enum { F_MEMEND_NODES /* records R_MNODE */, F_MEMEND_COMPLETE /* 0 if a worker did not answer */ };
enum { R_MNODE_ID, R_MNODE_ADDR, R_MNODE_NAME, R_MNODE_STATS /* list of u64, PROTO_STAT_* */, R_MNODE_FRESH };
enum { F_OLISTREQ_FLAGS };
enum { F_OLIST_OBJS /* records R_OLOBJ */, F_OLIST_STATS /* list of u64 */ };
enum { R_OLOBJ_ID, R_OLOBJ_SIZE, R_OLOBJ_WHERE, R_OLOBJ_STORED, R_OLOBJ_PINS };

/** Object states in MEMORY_OBJS. */
enum proto_ostate {
    PROTO_OSTATE_PENDING,
    PROTO_OSTATE_READY,
    PROTO_OSTATE_FAILED,
    PROTO_OSTATE_LOST,
    PROTO_OSTATE_ORPHAN, /* in a store, unknown to the scheduler */
};
/** Reference kinds, indexes of R_MOBJ_REFS. */
enum proto_refkind {
    PROTO_REF_CLIENT,
    PROTO_REF_TASK_ARG,
    PROTO_REF_PINNED,
    PROTO_REF_BROADCAST,
    PROTO_REF_OUTPUT,
    PROTO_REF_KINDS
};
const char *proto_refkind_name(int kind);

enum { F_EXEC_ID, F_EXEC_FN, F_EXEC_ARGS /* records R_EARG */, F_EXEC_INLINE_LIMIT };
enum { R_EARG_KIND, R_EARG_INLINE, R_EARG_OFF, R_EARG_LEN };
enum { F_EALLOC_ID, F_EALLOC_SIZE };
enum { F_EALLOCOK_OFF };
/* EXEC_DONE has the same fields as TASK_DONE. */

/** Task argument kinds (R_ARG_KIND, R_WARG_KIND, R_EARG_KIND). */
enum proto_arg_kind {
    PROTO_ARG_INLINE = 0, /* bytes carried in the message */
    PROTO_ARG_OBJ = 1,    /* a whole object (or a task's output) */
    PROTO_ARG_VIEW = 2,   /* a byte range [off, off+len) of an object */
};

/** SUBMIT flags. */
#define PROTO_SUBMIT_END 1u /* last frame of this graph */
/** Task flags (R_TASK_FLAGS). */
#define PROTO_TASK_KEEP 1u /* the client wants the result: an OUTPUT reference */
/** OBJ_WRITE / OBJ_DATA flags. */
#define PROTO_CHUNK_LAST 1u
/** PUT_PLACE flags. */
#define PROTO_PUT_CONTENT_ID 1u /* the id is a content hash: dedupe against an existing copy */

/** Indexes into HEARTBEAT's stats list (worker store figures). */
enum proto_stat {
    PROTO_STAT_CAPACITY,
    PROTO_STAT_USED,
    PROTO_STAT_PINNED,
    PROTO_STAT_OBJS_MEM,
    PROTO_STAT_OBJS_DISK,
    PROTO_STAT_SPILLED_RAW,
    PROTO_STAT_SPILLED_STORED,
    PROTO_STAT_SPILL_COUNT,
    PROTO_STAT_SPILL_BYTES,
    PROTO_STAT_SPILL_NS,
    PROTO_STAT_RESTORE_COUNT,
    PROTO_STAT_RESTORE_BYTES,
    PROTO_STAT_RESTORE_NS,
    PROTO_STAT_PAUSED,
    PROTO_STAT_RUNNING,
    PROTO_STAT_TASKS_DONE,
    PROTO_STAT_TASKS_FAILED,
    PROTO_STAT_EXEC_RESTARTS,
    PROTO_STAT_RSS_KIB,
    PROTO_STAT_PEAK_USED,
    PROTO_STAT_SPILL_ENTRIES,
    PROTO_STAT_EVICTIONS,
    PROTO_STAT_SPILL_AT, /* bytes of the store above which it spills */
    PROTO_STAT_PAUSE_AT, /* bytes of the store above which it pauses intake */
    PROTO_STAT_TASK_MEM_LIMIT,  /* bytes a task may use, 0 = no limit */
    PROTO_STAT_NODE_BUDGET,     /* capacity + slots x task limit + margin, 0 = unbounded */
    PROTO_STAT_EXEC_RECYCLES,   /* executors replaced for memory or task count */
    PROTO_STAT_TASKS_CANCELLED, /* dropped before they started: their client went away */
    PROTO_STAT_COUNT
};

/** Task states, indexes of STATUS's task list. */
enum proto_tstate {
    PROTO_TSTATE_WAITING,
    PROTO_TSTATE_READY,
    PROTO_TSTATE_ASSIGNED,
    PROTO_TSTATE_RUNNING,
    PROTO_TSTATE_DONE,
    PROTO_TSTATE_FAILED,
    PROTO_TSTATE_COUNT
};

/* ------------------------------------------------------------ decoded form */

typedef struct proto_val proto_val;

/** One decoded field. Which member is valid follows from the schema; nil is set for an
 * optional field that was sent as nil. */
struct proto_val {
    uint8_t nil;
    union {
        uint64_t u;
        int64_t i;
        bool b;
        spw_id id;
        struct {
            const uint8_t *ptr; /* into the frame; not NUL terminated */
            uint32_t len;
        } bin; /* also for strings */
        struct {
            proto_val *v; /* n records of nf fields each, record i at v + i * nf */
            uint32_t n;
            uint32_t nf;
        } arr;
    };
};

/** Field f of record i of a record-array value. */
#define PROTO_REC(val, i) ((val)->arr.v + (size_t)(i) * (val)->arr.nf)

typedef struct proto_msg {
    uint32_t type;
    uint64_t req; /* request id; a reply carries the request's id */
    uint32_t nf;
    proto_val f[PROTO_MAX_FIELDS];
} proto_msg;

typedef struct proto_limits {
    uint32_t max_frame; /* largest body accepted, bytes */
    uint32_t max_list;  /* most elements in one array */
} proto_limits;

void proto_limits_default(proto_limits *lim);

/** Splits a frame whose last field is a byte string (a chunk of object data) into a head and
 * the payload, so the payload can be received straight into its destination. Looks only at the
 * first head_max bytes. Pure, like proto_decode; validates nothing beyond the structure: decode
 * the head with proto_decode.
 * @param[in] buf, avail the frame's bytes received so far (at least its first bytes).
 * @param[out] head the frame with an empty byte string in place of the payload (head_max bytes).
 * @param[out] head_len its length; data_off where the payload starts in the frame; data_len its
 *             length (it runs to the end of the frame); field the payload's field index.
 * @return 1; 0 if more bytes are needed to tell; -1 if the frame does not have that shape. */
int proto_split_payload(const uint8_t *buf, size_t avail, size_t head_max, uint8_t *head,
                        size_t *head_len, size_t *data_off, uint64_t *data_len, uint32_t *field);

/** Decodes one frame from buf.
 * @param[in] buf bytes received so far.
 * @param[in] lim limits to enforce.
 * @param[in,out] zone scratch memory for records; clear it when done with the message.
 * @param[out] out the message; untouched unless the return is > 0.
 * @return bytes consumed (> 0); 0 if more bytes are needed; SPW_EFRAMESIZE if the length
 *         prefix exceeds lim->max_frame; SPW_EMALFORMED if the body is not a valid message
 *         (wrong types, bad lengths, trailing bytes, unknown type); SPW_ENOMEM if the zone
 *         cannot grow. */
int proto_decode(const uint8_t *buf, size_t len, const proto_limits *lim, msgpack_zone *zone,
                 proto_msg *out);

/** Copies a decoded string into out (NUL terminated, truncated to outlen-1). Returns out. */
char *proto_str(const proto_val *v, char *out, size_t outlen);

/* ------------------------------------------------------------------ encoding */

/** Builds one frame at the end of a buffer. Usage: proto_enc_begin, then exactly the schema's
 * fields with the proto_put_* helpers, then proto_enc_end. */
typedef struct proto_enc {
    spw_buf *buf;
    size_t start; /* offset of the length prefix */
    msgpack_packer pk;
} proto_enc;

void proto_enc_begin(proto_enc *e, spw_buf *buf, uint32_t type, uint64_t req, uint32_t nfields);
/** Starts encoding bare msgpack values (no frame) at the end of buf, e.g. records that will be
 * spliced into a frame later. */
void proto_enc_raw(proto_enc *e, spw_buf *buf);
/** Patches the length. @return the frame's total size, or SPW_EFRAMESIZE (frame removed)
 * if the body exceeds max_frame. */
int proto_enc_end(proto_enc *e, uint32_t max_frame);

void proto_put_u(proto_enc *e, uint64_t v);
void proto_put_i(proto_enc *e, int64_t v);
void proto_put_bool(proto_enc *e, bool v);
void proto_put_nil(proto_enc *e);
void proto_put_id(proto_enc *e, spw_id id);
void proto_put_bin(proto_enc *e, const void *p, size_t len);
/** Writes only a bin header of len bytes; the caller sends the len bytes itself. */
void proto_put_bin_hdr(proto_enc *e, size_t len);
void proto_put_str(proto_enc *e, const char *s);
void proto_put_strn(proto_enc *e, const char *s, size_t len);
void proto_put_arr(proto_enc *e, uint32_t n);

/** Appends a complete ERROR frame. */
void proto_enc_error(spw_buf *buf, uint64_t req, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#ifdef __cplusplus
}
#endif
#endif /* SPW_PROTO_H */
