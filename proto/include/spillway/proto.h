/*
 * spw_proto: the wire protocol.
 *
 * A frame is a 4-byte big-endian body length followed by a msgpack body
 * [type, request_id, [field, ...]]. Every message type has a schema (codec.c) that lists its
 * fields' kinds and limits; the decoder checks the whole frame against it, so a handler never
 * sees a value of the wrong type or out of its bounds. Object payloads travel as OBJ_WRITE /
 * OBJ_DATA chunk frames, never as one huge frame.
 *
 * Fields added to a message after its first version may be absent (the decoder marks them nil),
 * so an older sender stays understood; unknown extra fields are refused.
 */
#ifndef SPW_PROTO_H
#define SPW_PROTO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <msgpack.h>

#include "spillway/base.h"
#include "spillway/proto_schema.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The wire's version, sent in HELLO and CHALLENGE; a peer of another version is refused with
 * SPW_EVERSION. It changes with every change of the wire that an older peer would misread.
 * 1: the foundation. 2: the batched frames of the scale work (TASK_RUNS, TASK_DONES,
 * TASK_RESULTS, EXECS, EXEC_DONES: types 74-78), which a version-1 peer does not know.
 * 3: PING and PONG (types 79-80), which every connection answers (a client that waits on a
 * silent peer probes it with them; a version-2 peer would close the connection instead), and
 * a store's OBJ_LIST in several frames (its `more` field: a version-2 scheduler would take the
 * first frame for the whole list).
 * 4: uploaded plugins (types 81-90) and the PLUGIN reference kind (a fifth entry in every
 * list of references by kind, which a version-3 peer would refuse).
 * 5: sessions a client resumes after a broken connection: HELLO's resume and token, WELCOME's
 * token, resumed and nrecv, a status client's drop_ms (fields a version-4 peer would refuse)
 * and BYE (type 18). */
#define PROTO_VERSION 5
#define PROTO_HDR_LEN 4
#define PROTO_MAX_FIELDS 16
#define PROTO_NONCE_LEN 16
/* A resumable session's token (HELLO, WELCOME): random bytes only its client knows. */
#define PROTO_TOKEN_LEN 16
#define PROTO_PROOF_LEN 32
#define PROTO_DEFAULT_MAX_FRAME (64u << 20)
#define PROTO_DEFAULT_CHUNK (4u << 20)
#define PROTO_DEFAULT_INLINE_LIMIT (64u << 10)
#define PROTO_MAX_STR 4096u
#define PROTO_MAX_NAME 255u
/* Uploaded plugins: the hash's bytes and hex digits, the hex digits a task function name carries
 * ("NAME@PREFIX"), and the default of --plugin-max-size (see "Uploaded plugins" below). */
#define PROTO_PLUGIN_HASH_LEN 32u
#define PROTO_PLUGIN_HEX_LEN 64u
#define PROTO_PLUGIN_PREFIX_HEX 16u
#define PROTO_PLUGIN_MAX_SIZE_DEFAULT (64ull << 20)
/* Most task slots one worker may declare (HELLO's slots field; --slots). A bound on what a peer
 * can make the scheduler account for, far above any core count a worker is run with. */
#define PROTO_MAX_SLOTS 4096u
/* Largest frame body accepted before the peer has proved the secret (CHALLENGE, HELLO, WELCOME
 * and a refusal all fit many times over). A larger declared length closes the connection with
 * SPW_EFRAMESIZE before any of its body is buffered, so unauthenticated peers hold at most this
 * much of a daemon's memory each. */
#define PROTO_PREAUTH_MAX_FRAME 4096u

/* A peer's ERROR code as a call's result: a negative int. Anything else (0, positive, past an
 * int) is the peer's mistake and reads SPW_EPROTO: taken as it is, 0 would make a refusal a
 * success and a value past an int could truncate to anything. */
static inline int proto_err_code(int64_t code)
{
    return code < 0 && code >= INT32_MIN ? (int)code : SPW_EPROTO;
}

/* A peer's status field (a task's, a location's: 0 or an error code) as a result: anything
 * that is neither (positive, past an int, whose low bits could read 0) reads SPW_EPROTO. */
static inline int proto_status(int64_t status)
{
    return status <= 0 && status >= INT32_MIN ? (int)status : SPW_EPROTO;
}

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

/* Message types. X(name, value): the schema of each is in codec.c. */
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
    X(BYE, 18)                                                                                     \
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
    X(TASK_CANCEL, 73)                                                                             \
    X(TASK_RUNS, 74)                                                                               \
    X(TASK_DONES, 75)                                                                              \
    X(TASK_RESULTS, 76)                                                                            \
    X(EXECS, 77)                                                                                   \
    X(EXEC_DONES, 78)                                                                              \
    X(PING, 79)                                                                                    \
    X(PONG, 80)                                                                                    \
    X(PLUGIN_ADD, 81)                                                                              \
    X(PLUGIN_CHECKED, 82)                                                                          \
    X(PLUGIN_RELEASE, 83)                                                                          \
    X(PLUGIN_GET, 84)                                                                              \
    X(PLUGIN_INFO, 85)                                                                             \
    X(PLUGIN_CHECK, 86)                                                                            \
    X(PLUGINS_REQ, 87)                                                                             \
    X(PLUGINS, 88)                                                                                 \
    X(PLUGIN_LOAD, 89)                                                                             \
    X(WORKER_PLUGINS, 90)                                                                          \
    X(DRAIN, 91)                                                                                   \
    X(OBJS_HELD, 92)

enum proto_type {
#define PROTO_TYPE_ENUM(name, value) PROTO_##name = (value),
    PROTO_MSG_MAP(PROTO_TYPE_ENUM)
#undef PROTO_TYPE_ENUM
        PROTO_TYPE_MAX = 93
};
/** Name of a message type ("TASK_RUN"), or "?" for an unknown one. */
const char *proto_type_name(uint32_t type);

/* One schema (proto_schema.h) is the source of both directions: an X-macro table that lists
 * every message type and record kind with its fields (index constant, C member, kind, limit).
 * Expanded here it gives the field indexes (F_*, R_*) and, per message, a typed struct
 * proto_NAME_msg and a builder proto_enc_NAME (proto_send_NAME in conn.h); expanded in codec.c
 * it gives the decoder's schema rows and the builders' bodies. Code outside proto/ never states a
 * field count or kind: it fills a struct and calls the builder. Builders write straight into the
 * output buffer and allocate nothing; arrays of records stream from an array, a per-record
 * callback or records encoded beforehand (proto_NAME_recs), so hot paths (TASK_RUN, SUBMIT)
 * build no intermediate copies. Debug and sanitizer builds (SPW_CHECK_FRAMES) decode every frame
 * again before it is sent and abort, naming the type and the error, on one that does not decode.
 *
 * Field indexes F_<MSG>_<FIELD> (messages) and R_<REC>_<FIELD> (records), and the field
 * counts PROTO_NF_<MSG> and PROTO_NF_REC_<REC>, all from the schema (proto_schema.h). */
#define PROTO__ENUM_FIELD(index, member, kind, arg) index,
#define PROTO__ENUM_REC(NAME, name)                                                                \
    enum { PROTO_REC_FIELDS_##NAME(PROTO__ENUM_FIELD, PROTO__ENUM_FIELD) PROTO_NF_REC_##NAME };
#define PROTO__ENUM_MSG(NAME, name)                                                                \
    enum { PROTO_FIELDS_##NAME(PROTO__ENUM_FIELD, PROTO__ENUM_FIELD) PROTO_NF_##NAME };
#define PROTO__ENUM_MSG0(NAME, name) enum { PROTO_NF_##NAME };
#define PROTO__ENUM_ALIAS(NAME, name, OF, of) enum { PROTO_NF_##NAME = PROTO_NF_##OF };
PROTO_SCHEMA(PROTO__ENUM_REC, PROTO__ENUM_MSG, PROTO__ENUM_MSG0, PROTO__ENUM_ALIAS)

/** OBJ_READ flags. */
#define PROTO_READ_FOLLOW                                                                          \
    1u /* if the object is not here yet but about to be (a broadcast                               \
          chain), wait for it a little and forward it as it arrives */
/** ARENA_MAP flags. Without PROTO_ARENA_WRITE the descriptor that comes back is read-only. */
#define PROTO_ARENA_WRITE 1u /* the client puts objects: it needs a writable mapping */
/** Upper bounds (ms) of the submit -> done latency buckets in STATUS; one more bucket, +Inf,
 * follows them. */
#define PROTO_LATENCY_BOUNDS_MS {1, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000, 60000}
#define PROTO_LATENCY_NBOUNDS 14

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
    PROTO_REF_PLUGIN, /* an uploaded plugin's bytes, held while anyone references the plugin */
    PROTO_REF_KINDS
};
const char *proto_refkind_name(int kind);

/* Uploaded plugins. A plugin is named by the BLAKE2b-256 hash of its bytes (libsodium's
 * crypto_generichash, 32 bytes, printed as 64 hex digits); its bytes travel as an object whose id
 * is proto_plugin_obj_id(hash). A task names a function of one as "NAME@PREFIX", PREFIX being
 * the first PROTO_PLUGIN_PREFIX_HEX hex digits of the hash. */
/** PLUGIN records' states (R_SPLUG_STATE). */
enum proto_plugin_state {
    PROTO_PLUGIN_CHECKING, /* a worker is loading it to check it; not usable yet */
    PROTO_PLUGIN_READY,
};
/** The hash of a plugin's bytes. */
void proto_plugin_hash(const void *data, size_t len, uint8_t out[PROTO_PLUGIN_HASH_LEN]);
/** The id of the object that carries a plugin's bytes. */
spw_id proto_plugin_obj_id(const uint8_t hash[PROTO_PLUGIN_HASH_LEN]);
/** The hash as 64 lower-case hex digits and a NUL. Returns out. */
char *proto_plugin_hex(const uint8_t hash[PROTO_PLUGIN_HASH_LEN], char out[PROTO_PLUGIN_HEX_LEN + 1]);
/** The PREFIX of a task function name "NAME@PREFIX" (exactly PROTO_PLUGIN_PREFIX_HEX lower-case
 * hex digits after the last '@', NAME not empty), or NULL for any other name (a built-in or a
 * --plugin function). Looks at len bytes of fn. */
const char *proto_plugin_fn_prefix(const char *fn, size_t len);

/** Task argument kinds (R_ARG_KIND, R_WARG_KIND, R_EARG_KIND). */
enum proto_arg_kind {
    PROTO_ARG_INLINE = 0, /* bytes carried in the message */
    PROTO_ARG_OBJ = 1,    /* a whole object (or a task's output) */
    PROTO_ARG_VIEW = 2,   /* a byte range [off, off+len) of an object */
    /* R_EARG_KIND only (worker to its executor): the output of an earlier task in the same
     * executor's queue, whose 16-byte id is the value (README, "Chains are sent ahead"). */
    PROTO_ARG_PREV = 3,
};

/** SUBMIT flags. */
#define PROTO_SUBMIT_END 1u /* last frame of this graph */
/** Task flags (R_TASK_FLAGS). */
#define PROTO_TASK_KEEP 1u /* the client wants the result: an OUTPUT reference */
/* TASK_RUN only (the scheduler strips it from SUBMIT): the task is sent ahead of its inputs. Each
 * whole-object argument that is not sealed in the worker's store is the output of a task the
 * worker was sent earlier; the task waits for those and starts the moment they finish there. The
 * worker answers every such task with one TASK_DONE; SPW_EAHEAD says it dropped it unrun (an
 * input failed there or is gone), and the scheduler then dispatches it as usual. */
#define PROTO_TASK_AHEAD 0x100u
/** OBJ_WRITE / OBJ_DATA flags. */
#define PROTO_CHUNK_LAST 1u
/** PUT_PLACE flags. */
#define PROTO_PUT_CONTENT_ID 1u /* the id is a content hash: dedupe against an existing copy */
/* The client can put the object in chunks: the scheduler may answer PUT_TARGET with a chunk
 * size instead of a worker (an object larger than a store, or than F_PUTP_CHUNK_MAX). It then
 * holds the object, pending, as the parent of its chunks, each put with PROTO_PUT_CHUNK. */
#define PROTO_PUT_MAY_CHUNK 2u
/* Chunk i of a chunked object being put: the id is spw_id_output(parent, 1 + i). The parent
 * holds it (no CLIENT reference); chunks are spread over the workers. */
#define PROTO_PUT_CHUNK 4u
/* The most chunks of one chunked object: chunk i's id is spw_id_output(parent, 1 + i). */
#define PROTO_CHUNKS_MAX (SPW_TASK_OUTPUTS_MAX - 1u)

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
    PROTO_STAT_FETCHED_BYTES,   /* bytes of objects and views fetched from other workers */
    PROTO_STAT_SPILLING_BYTES,  /* bytes of objects queued or being written to the spill now */
    PROTO_STAT_DISK_READ_BYTES, /* bytes sent to peers from spilled copies, not restored */
    PROTO_STAT_SPILLS,          /* 1: it has a spill directory (its store can make room) */
    PROTO_STAT_COUNT
};

/** STATUS's lineage list. */
enum proto_lineage {
    PROTO_LINEAGE_RERUNS, /* finished tasks run again to re-make outputs lost with a worker */
    PROTO_LINEAGE_LOST,   /* objects lost for good: no copy left and no task to re-make them */
    PROTO_LINEAGE_COUNT
};

/** A worker's state in STATUS (R_SWORKER_STATE). */
enum proto_wstate {
    PROTO_WSTATE_RUNNING,
    PROTO_WSTATE_PAUSED,   /* its store is above its pause threshold: no new tasks */
    PROTO_WSTATE_DRAINING, /* it takes no tasks and its sole copies are being copied away */
    PROTO_WSTATE_DRAINED,  /* it takes no tasks and holds no object's only copy */
    PROTO_WSTATE_COUNT
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
    uint8_t bad; /* on the first field of a BATCH record that did not match its kind */
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

/* Decoding contract (picohttpparser style): proto_decode() is pure, with no I/O and no globals.
 * It returns the bytes consumed (> 0), 0 for "need more", or a negative SPW_E* code for
 * malformed input. The frame length is checked against the limit before anything is buffered.
 * Decoded byte strings point into the caller's buffer and records into the caller's zone:
 * both are valid until the buffer is changed or the zone cleared. */
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

/** A frame being built at the end of a buffer. */
typedef struct proto_enc {
    spw_buf *buf;
    size_t start; /* offset of the length prefix */
} proto_enc;

/* Typed builders, generated from the schema (proto_schema.h). For each message type NAME:
 *   proto_name_msg   a struct with one member per field, in the C type of its kind (see
 *                    proto_schema.h); a field a sender may leave out has a bool omit_member
 *                    beside it (false: sent);
 *   proto_enc_name(e, buf, req, &m)   appends the frame for m to buf, all but its length:
 *                    finish it with proto_enc_end or proto_conn_send (and _borrowed, _fd);
 *   proto_send_name(conn, req, &m)    (conn.h) builds it in the connection's output and sends.
 * For each record kind: proto_kind_rec (its struct), proto_put_kind_rec(e, &r) (one record,
 * inside a frame or a proto_enc_raw buffer) and proto_kind_recs, an array field's value: n
 * records taken from exactly one of v (an array), put (called once per record, for i in 0..n-1,
 * and must write exactly one record with proto_put_kind_rec: records made on the fly without an
 * array), or pre (n records already encoded into a buffer with proto_enc_raw; spliced as is).
 * Nothing allocates except the output buffer's growth, so the builders suit the hot paths. */
typedef struct proto_bytes {
    const void *ptr;
    size_t len;
} proto_bytes;
typedef struct proto_u64s {
    const uint64_t *v;
    uint32_t n;
} proto_u64s;
typedef struct proto_ids {
    const spw_id *v;
    uint32_t n;
} proto_ids;

#define PROTO__TYPE_U(arg) uint64_t
#define PROTO__TYPE_I(arg) int64_t
#define PROTO__TYPE_ID(arg) spw_id
#define PROTO__TYPE_OPT_ID(arg) const spw_id *
#define PROTO__TYPE_BIN(arg) proto_bytes
#define PROTO__TYPE_OPT_BIN(arg) proto_bytes
#define PROTO__TYPE_DATA(arg) proto_bytes
#define PROTO__TYPE_STR(arg) const char *
#define PROTO__TYPE_REC(arg) const proto_##arg##_rec *
#define PROTO__TYPE_RECS(arg) proto_##arg##_recs
#define PROTO__TYPE_BATCH(arg) proto_##arg##_recs
#define PROTO__TYPE_LIST_U(arg) proto_u64s
#define PROTO__TYPE_LIST_ID(arg) proto_ids
#define PROTO__MEMBER(index, member, kind, arg) PROTO__TYPE_##kind(arg) member;
#define PROTO__MEMBER_NEW(index, member, kind, arg)                                                \
    PROTO__TYPE_##kind(arg) member;                                                                \
    bool omit_##member;
#define PROTO__NONE(...)

#define PROTO__DECL_RECS(NAME, name)                                                               \
    typedef struct proto_##name##_rec proto_##name##_rec;                                          \
    typedef struct proto_##name##_recs {                                                           \
        uint32_t n;                                                                                \
        const proto_##name##_rec *v;                                                               \
        void (*put)(proto_enc * e, uint32_t i, void *arg);                                         \
        void *arg;                                                                                 \
        const spw_buf *pre;                                                                        \
    } proto_##name##_recs;
PROTO_SCHEMA(PROTO__DECL_RECS, PROTO__NONE, PROTO__NONE, PROTO__NONE)

#define PROTO__DECL_REC(NAME, name)                                                                \
    struct proto_##name##_rec {                                                                    \
        PROTO_REC_FIELDS_##NAME(PROTO__MEMBER, PROTO__MEMBER_NEW)                                  \
    };                                                                                             \
    void proto_put_##name##_rec(proto_enc *e, const proto_##name##_rec *r);
#define PROTO__DECL_MSG(NAME, name)                                                                \
    typedef struct proto_##name##_msg {                                                            \
        PROTO_FIELDS_##NAME(PROTO__MEMBER, PROTO__MEMBER_NEW)                                      \
    } proto_##name##_msg;                                                                          \
    void proto_enc_##name(proto_enc *e, spw_buf *buf, uint64_t req, const proto_##name##_msg *m);
#define PROTO__DECL_MSG0(NAME, name)                                                               \
    void proto_enc_##name(proto_enc *e, spw_buf *buf, uint64_t req);
#define PROTO__DECL_ALIAS(NAME, name, OF, of)                                                      \
    typedef proto_##of##_msg proto_##name##_msg;                                                   \
    void proto_enc_##name(proto_enc *e, spw_buf *buf, uint64_t req, const proto_##name##_msg *m);
PROTO_SCHEMA(PROTO__DECL_REC, PROTO__DECL_MSG, PROTO__DECL_MSG0, PROTO__DECL_ALIAS)

/* The single messages and the records of their batched forms share field lists (see
 * proto_schema.h): the same index reads either. */
_Static_assert((int)PROTO_NF_REC_RUN == (int)PROTO_NF_TASK_RUN &&
                   (int)PROTO_NF_REC_DONE == (int)PROTO_NF_TASK_DONE &&
                   (int)PROTO_NF_REC_TRES == (int)PROTO_NF_TASK_RESULT &&
                   (int)PROTO_NF_REC_EXEC == (int)PROTO_NF_EXEC,
               "batched records and single messages differ");

/** Most records in one batched frame, and the size past which the sender closes it: far under
 * any frame limit, and the receiver's zone for one frame stays small. */
#define PROTO_BATCH_MAX_RECS 1024u
#define PROTO_BATCH_MAX_BYTES (256u << 10)

/** A batched frame (TASK_RUNS, ...) being built at the end of a buffer: records are appended
 * one at a time and the record count patched when it is closed. n == 0: none open. */
typedef struct proto_batch {
    proto_enc e;
    uint32_t type;
    uint32_t n;    /* records in the open frame */
    size_t arr_at; /* offset of its record array's header */
    size_t rec_at; /* offset of its last record */
} proto_batch;

/** Starts one more record of batched message type at the end of buf, opening a frame there
 * when none is open (the caller closes an open frame of another type, or one in another buffer,
 * first). Write exactly one record with proto_put_kind_rec(&b->e, ...) next. */
proto_enc *proto_batch_rec(proto_batch *b, spw_buf *buf, uint32_t type);
/** Whether the open frame has reached PROTO_BATCH_MAX_RECS or PROTO_BATCH_MAX_BYTES. */
bool proto_batch_full(const proto_batch *b);
/** Closes the open frame (patches the count and the length; see proto_enc_end). @return the
 * frame's size, 0 if none was open, or SPW_EFRAMESIZE (frame removed). */
int proto_batch_end(proto_batch *b, uint32_t max_frame);
/** Patches the open frame's record count and returns its encoder, for the caller to finish
 * with proto_enc_end or proto_conn_send; the batch is then closed. Needs b->n > 0. */
proto_enc *proto_batch_seal(proto_batch *b);

/** Patches the length. @return the frame's total size, or SPW_EFRAMESIZE (frame removed)
 * if the body exceeds max_frame. */
int proto_enc_end(proto_enc *e, uint32_t max_frame);
/** Starts encoding bare msgpack values (no frame) at the end of buf: records that a
 * proto_kind_recs .pre splices into a frame later. */
void proto_enc_raw(proto_enc *e, spw_buf *buf);

/** Checks that [p, p + len) holds whole frames that each decode (proto_decode with the default
 * limits, any size). @return 0, or the first bad frame's error, its type in *type (0 if the type
 * could not be read). */
int proto_check_frames(const uint8_t *p, size_t len, uint32_t *type);
/** proto_check_frames, and on failure logs "who: frame TYPE does not decode: error" and aborts.
 * Called on every frame before it is sent when built with SPW_CHECK_FRAMES (see
 * PROTO_CHECK_SENT). */
void proto_assert_frames(const uint8_t *p, size_t len, const char *who);
#ifdef SPW_CHECK_FRAMES
#define PROTO_CHECK_SENT(p, len, who) proto_assert_frames((p), (len), (who))
#else
#define PROTO_CHECK_SENT(p, len, who) ((void)0)
#endif

/* Raw encoding, for tests and tools that must build frames the schema does not allow (the
 * decoder's tests, the fuzz corpus). Production code uses the typed builders above. Usage:
 * proto_enc_begin, then the fields with the proto_put_* helpers, then proto_enc_end. */
void proto_enc_begin(proto_enc *e, spw_buf *buf, uint32_t type, uint64_t req, uint32_t nfields);
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

/** Appends a complete ERROR frame with a formatted message. */
void proto_enc_errorf(spw_buf *buf, uint64_t req, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#ifdef __cplusplus
}
#endif
#endif /* SPW_PROTO_H */
