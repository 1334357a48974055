/*
 * Fuzz target for the wire decoder, proto_decode (proto/src/codec.c).
 *
 * The input is treated as a byte stream from a peer and decoded the way proto/src/conn.c's
 * process_input does: decode a frame, consume what it returned, clear the zone, and stop on
 * "need more" or a fatal error; a malformed frame whose length prefix is within the limit is
 * skipped. The stream is decoded three times: with the default limits, with a tiny max_frame
 * and with a tiny max_list.
 *
 * Besides "no crash", the target checks the decoder's contract and aborts when it is broken:
 * a return > 0 is exactly one whole frame; 0 only when the frame is incomplete; SPW_EMALFORMED
 * only when the whole frame is present (conn.c skips that many bytes); SPW_EFRAMESIZE only for a
 * length over the limit; out untouched unless the return is > 0. Every field of every decoded
 * message is read, walking records recursively, so a dangling pointer trips ASan; byte strings
 * must point inside the frame and respect the schema's length bounds.
 */
#include "spillway/proto.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "fuzz_proto_decode: %s:%d: check failed: %s: ", __FILE__, __LINE__,    \
                    #cond);                                                                        \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fputc('\n', stderr);                                                                   \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

/* ------------------------------------------------------------ schema mirror */
/* ------------------------------------------------------------ schema mirror */

/* This mirror repeats codec.c's private tables (which member of proto_val is valid for each
 * field). If the two drift apart the field counts stop matching and the target aborts, so the
 * checked-in corpus, replayed by ctest, catches it. */

enum fk { K_NONE, K_U, K_I, K_BIN, K_STR, K_ID, K_REC, K_RECS, K_LIST_U, K_LIST_ID, K_BATCH };

typedef struct fspec {
    uint8_t kind;
    uint8_t opt; /* nil accepted */
    uint8_t sub; /* record schema for K_REC / K_RECS */
    uint32_t min;
    uint32_t max;
} fspec;

typedef struct sspec {
    uint8_t nf;
    fspec f[PROTO_MAX_FIELDS];
    uint8_t nreq; /* fields that must be present (0 = all); later ones may be absent */
} sspec;

/* clang-format off */
#define U {K_U, 0, 0, 0, 0}
#define I {K_I, 0, 0, 0, 0}
#define ID {K_ID, 0, 0, 16, 16}
#define OPT_ID {K_ID, 1, 0, 16, 16}
#define BIN(mn, mx) {K_BIN, 0, 0, (mn), (mx)}
#define OPT_BIN {K_BIN, 1, 0, 0, UINT32_MAX}
#define DATA {K_BIN, 0, 0, 0, UINT32_MAX}
#define NAME {K_STR, 0, 0, 0, PROTO_MAX_NAME}
#define TEXT {K_STR, 0, 0, 0, PROTO_MAX_STR}
#define RECS(sub) {K_RECS, 0, (sub), 0, UINT32_MAX}
#define BATCH(sub) {K_BATCH, 0, (sub), 0, UINT32_MAX}
#define OPT_REC(sub) {K_REC, 1, (sub), 0, 0}
#define LIST_U(mn) {K_LIST_U, 0, 0, (mn), UINT32_MAX}
#define LIST_ID {K_LIST_ID, 0, 0, 0, UINT32_MAX}
/* clang-format on */

enum {
    S_WINFO,
    S_LOC,
    S_TASK,
    S_ARG,
    S_WARG,
    S_SWORKER,
    S_SCLIENT,
    S_EARG,
    S_MOBJ,
    S_HOLDER,
    S_MLOC,
    S_MNODE,
    S_OLOBJ,
    S_GRAPH,
    S_RUN,
    S_DONE,
    S_TRES,
    S_EXEC,
    S_OUT,
    S_PLUG,
    S_SPLUG,
    S_STRIPE,
    S_COUNT
};

static const sspec rec_specs[S_COUNT] = {
    [S_WINFO] = {5, {NAME, U, U, NAME, NAME}, 0},
    [S_LOC] = {4, {U, NAME, NAME, NAME}, 0},
    [S_TASK] = {7, {ID, NAME, RECS(S_ARG), U, NAME, NAME, U}, 5},
    [S_ARG] = {5, {U, OPT_BIN, OPT_ID, U, U}, 0},
    [S_WARG] = {7, {U, OPT_BIN, OPT_ID, U, U, U, RECS(S_LOC)}, 0},
    [S_SWORKER] = {9, {U, NAME, NAME, U, U, U, U, LIST_U(0), RECS(S_PLUG)}, 8},
    [S_SCLIENT] = {7, {U, NAME, U, U, U, U, U}, 6},
    [S_EARG] = {4, {U, OPT_BIN, U, U}, 0},
    [S_MOBJ] = {14,
                {ID, U, U, NAME, NAME, U, U, NAME, LIST_U(PROTO_REF_KINDS), RECS(S_HOLDER),
                 RECS(S_MLOC), U, U, U},
                12},
    [S_HOLDER] = {3, {U, U, NAME}, 0},
    [S_MLOC] = {4, {U, U, U, U}, 0},
    [S_MNODE] = {5, {U, NAME, NAME, LIST_U(0), U}, 0},
    [S_OLOBJ] = {5, {ID, U, U, U, U}, 0},
    [S_GRAPH] = {11, {U, U, NAME, U, NAME, U, LIST_U(PROTO_TSTATE_COUNT), U, U, U, U}, 10},
    [S_RUN] = {5, {ID, NAME, RECS(S_WARG), U, U}, 4},
    [S_DONE] = {7, {ID, I, U, OPT_BIN, TEXT, U, RECS(S_OUT)}, 6},
    [S_TRES] = {5, {ID, I, U, OPT_BIN, TEXT}, 0},
    [S_EXEC] = {5, {ID, NAME, RECS(S_EARG), U, U}, 4},
    [S_OUT] = {2, {U, OPT_BIN}, 0},
    [S_PLUG] = {4, {BIN(PROTO_PLUGIN_HASH_LEN, PROTO_PLUGIN_HASH_LEN), NAME, U, U}, 0},
    [S_SPLUG] = {9, {BIN(PROTO_PLUGIN_HASH_LEN, PROTO_PLUGIN_HASH_LEN), NAME, U, ID, U, U, U, U, U}, 0},
    [S_STRIPE] = {3, {U, U, RECS(S_LOC)}, 0},
};

static const sspec msg_specs[PROTO_TYPE_MAX] = {
    [PROTO_CHALLENGE] = {3, {U, BIN(PROTO_NONCE_LEN, PROTO_NONCE_LEN), U}, 0},
    [PROTO_HELLO] = {10,
                     {U, U, BIN(PROTO_NONCE_LEN, PROTO_NONCE_LEN),
                      BIN(PROTO_PROOF_LEN, PROTO_PROOF_LEN), U, NAME, NAME, OPT_REC(S_WINFO), U,
                      BIN(PROTO_TOKEN_LEN, PROTO_TOKEN_LEN)},
                     8},
    [PROTO_WELCOME] = {8,
                       {BIN(PROTO_PROOF_LEN, PROTO_PROOF_LEN), U, U, U, U,
                        BIN(PROTO_TOKEN_LEN, PROTO_TOKEN_LEN), U, U},
                       5},
    [PROTO_ERROR] = {2, {I, TEXT}, 0},
    [PROTO_OK] = {1, {U}, 0},
    [PROTO_PUT_PLACE] = {6, {ID, U, NAME, U, NAME, U}, 4},
    [PROTO_PUT_TARGET] = {7, {ID, U, NAME, NAME, NAME, U, U}, 6},
    [PROTO_LOCATE] = {2, {ID, U}, 0},
    [PROTO_LOCATION] = {7, {ID, I, U, OPT_BIN, TEXT, RECS(S_LOC), U}, 6},
    [PROTO_RELEASE] = {1, {LIST_ID}, 0},
    [PROTO_SUBMIT] = {6, {U, U, U, U, RECS(S_TASK), NAME}, 5},
    [PROTO_SUBMIT_ACK] = {2, {U, U}, 0},
    [PROTO_TASK_RESULT] = {5, {ID, I, U, OPT_BIN, TEXT}, 0},
    [PROTO_TASK_RUN] = {5, {ID, NAME, RECS(S_WARG), U, U}, 4},
    [PROTO_TASK_DONE] = {7, {ID, I, U, OPT_BIN, TEXT, U, RECS(S_OUT)}, 6},
    [PROTO_OBJ_ADDED] = {2, {ID, U}, 0},
    [PROTO_OBJ_DELETE] = {1, {LIST_ID}, 0},
    [PROTO_HEARTBEAT] = {1, {LIST_U(PROTO_STAT_SPILL_AT)}, 0},
    [PROTO_OBJ_WRITE] = {5, {ID, U, U, U, DATA}, 0},
    [PROTO_OBJ_READ] = {4, {ID, U, U, U}, 3},
    [PROTO_OBJ_DATA] = {5, {ID, U, U, U, DATA}, 0},
    [PROTO_PUT_DONE] = {1, {ID}, 0},
    [PROTO_ARENA_MAP] = {1, {U}, 0},
    [PROTO_ARENA] = {1, {U}, 0},
    [PROTO_OBJ_PIN] = {1, {ID}, 0},
    [PROTO_PINNED] = {3, {ID, U, U}, 0},
    [PROTO_OBJ_UNPIN] = {1, {ID}, 0},
    [PROTO_OBJ_CREATE] = {2, {ID, U}, 0},
    [PROTO_CREATED] = {2, {ID, U}, 0},
    [PROTO_OBJ_SEAL] = {1, {ID}, 0},
    [PROTO_STATUS_REQ] = {0, {{0}}, 0},
    [PROTO_PING] = {0, {{0}}, 0},
    [PROTO_PONG] = {0, {{0}}, 0},
    [PROTO_PLUGIN_ADD] = {4, {BIN(PROTO_PLUGIN_HASH_LEN, PROTO_PLUGIN_HASH_LEN), U, NAME, NAME}, 0},
    [PROTO_PLUGIN_CHECKED] = {5, {BIN(PROTO_PLUGIN_HASH_LEN, PROTO_PLUGIN_HASH_LEN), I, TEXT, NAME, U}, 0},
    [PROTO_PLUGIN_RELEASE] = {1, {BIN(PROTO_PLUGIN_HASH_LEN, PROTO_PLUGIN_HASH_LEN)}, 0},
    [PROTO_PLUGIN_GET] = {1, {{K_STR, 0, 0, 0, PROTO_PLUGIN_HEX_LEN}}, 0},
    [PROTO_PLUGIN_INFO] = {5, {BIN(PROTO_PLUGIN_HASH_LEN, PROTO_PLUGIN_HASH_LEN), NAME, U, ID, RECS(S_LOC)}, 0},
    [PROTO_PLUGIN_CHECK] = {5, {BIN(PROTO_PLUGIN_HASH_LEN, PROTO_PLUGIN_HASH_LEN), NAME, U, ID, RECS(S_LOC)}, 0},
    [PROTO_PLUGINS_REQ] = {0, {{0}}, 0},
    [PROTO_PLUGINS] = {1, {RECS(S_SPLUG)}, 0},
    [PROTO_PLUGIN_LOAD] = {2, {BIN(PROTO_PLUGIN_HASH_LEN, PROTO_PLUGIN_HASH_LEN), TEXT}, 0},
    [PROTO_WORKER_PLUGINS] = {2, {RECS(S_PLUG), U}, 1},
    [PROTO_DRAIN] = {2, {U, NAME}, 0},
    [PROTO_BYE] = {0, {{0}}, 0},
    [PROTO_OBJS_HELD] = {2, {RECS(S_OLOBJ), U}, 0},
    [PROTO_STATUS] =
        {13,
         {U, U, NAME, RECS(S_SWORKER), RECS(S_SCLIENT), LIST_U(PROTO_TSTATE_COUNT), U, U,
          LIST_U(0), LIST_U(0), LIST_U(0), LIST_U(0), LIST_U(0)},
         8},
    [PROTO_BROADCAST] = {3, {ID, U, U}, 2},
    [PROTO_BROADCAST_DONE] = {3, {ID, U, U}, 0},
    [PROTO_REPLICATE] = {4, {ID, U, RECS(S_LOC), RECS(S_STRIPE)}, 3},
    [PROTO_MEMORY_REQ] = {1, {U}, 0},
    [PROTO_MEMORY_OBJS] = {1, {RECS(S_MOBJ)}, 0},
    [PROTO_MEMORY_END] = {2, {RECS(S_MNODE), U}, 0},
    [PROTO_OBJ_LIST_REQ] = {1, {U}, 0},
    [PROTO_OBJ_LIST] = {3, {RECS(S_OLOBJ), LIST_U(0), U}, 2},
    [PROTO_EXEC] = {5, {ID, NAME, RECS(S_EARG), U, U}, 4},
    [PROTO_EXEC_ALLOC] = {3, {ID, U, U}, 2},
    [PROTO_EXEC_ALLOC_OK] = {1, {U}, 0},
    [PROTO_EXEC_DONE] = {7, {ID, I, U, OPT_BIN, TEXT, U, RECS(S_OUT)}, 6},
    [PROTO_TASK_STARTED] = {1, {LIST_ID}, 0},
    [PROTO_GRAPHS_REQ] = {2, {U, U}, 0},
    [PROTO_GRAPHS] = {1, {RECS(S_GRAPH)}, 0},
    [PROTO_TASK_CANCEL] = {1, {LIST_ID}, 0},
    [PROTO_TASK_RUNS] = {1, {BATCH(S_RUN)}, 0},
    [PROTO_TASK_DONES] = {1, {BATCH(S_DONE)}, 0},
    [PROTO_TASK_RESULTS] = {1, {BATCH(S_TRES)}, 0},
    [PROTO_EXECS] = {1, {BATCH(S_EXEC)}, 0},
    [PROTO_EXEC_DONES] = {1, {BATCH(S_DONE)}, 0},
};

/* ------------------------------------------------------------------ walking */

/* Everything read from a decoded message is folded into this, so no read can be optimised out. */
static volatile uint64_t sink;

typedef struct frame_ctx {
    const uint8_t *start; /* the frame, length prefix included */
    const uint8_t *end;
    const proto_limits *lim;
} frame_ctx;

static void touch_bytes(const frame_ctx *fc, const proto_val *v, const fspec *fs, bool is_str)
{
    uint32_t len = v->bin.len;
    CHECK(len >= fs->min && len <= fs->max, "byte string of %u bytes outside [%u, %u]", len,
          fs->min, fs->max);
    if (len == 0)
        return;
    /* Compare as integers: the pointer may be garbage if the decoder is wrong. */
    uintptr_t p = (uintptr_t)v->bin.ptr, s = (uintptr_t)(fc->start + PROTO_HDR_LEN),
              e = (uintptr_t)fc->end;
    CHECK(p >= s && p <= e && len <= e - p, "byte string of %u bytes is not inside the frame", len);
    uint64_t acc = 0;
    for (uint32_t i = 0; i < len; i++) {
        uint8_t c = v->bin.ptr[i];
        if (is_str)
            CHECK(c != 0, "decoded string contains NUL at %u", i);
        acc = acc * 31 + c;
    }
    sink += acc;
}

static void walk_fields(const frame_ctx *fc, const sspec *s, const proto_val *f, uint32_t nf,
                        int depth);

static void walk_value(const frame_ctx *fc, const fspec *fs, const proto_val *v, bool may_be_absent,
                       int depth)
{
    if (v->nil) {
        CHECK(fs->opt || may_be_absent, "nil in a required field of kind %d", fs->kind);
        return;
    }
    switch (fs->kind) {
    case K_U:
        sink += v->u;
        break;
    case K_I:
        sink += (uint64_t)v->i;
        break;
    case K_ID:
        sink += v->id.hi ^ v->id.lo;
        break;
    case K_BIN:
    case K_STR:
        touch_bytes(fc, v, fs, fs->kind == K_STR);
        break;
    case K_REC:
    case K_RECS:
    case K_BATCH: {
        const sspec *sub = &rec_specs[fs->sub];
        CHECK(v->arr.nf == sub->nf, "record of %u fields, schema has %u", v->arr.nf, sub->nf);
        if (fs->kind == K_REC)
            CHECK(v->arr.n == 1, "single record with n=%u", v->arr.n);
        else
            CHECK(v->arr.n <= fc->lim->max_list, "%u records over max_list %u", v->arr.n,
                  fc->lim->max_list);
        CHECK(v->arr.n == 0 || sub->nf == 0 || v->arr.v != NULL, "records without storage");
        for (uint32_t i = 0; i < v->arr.n; i++) {
            const proto_val *r = PROTO_REC(v, i);
            if (fs->kind == K_BATCH && r[0].bad) {
                /* A bad record of a batch: all nil but its first value, if that one is right. */
                for (uint32_t k = 1; k < sub->nf; k++)
                    CHECK(r[k].nil, "bad batch record with field %u set", k);
                walk_value(fc, &sub->f[0], &r[0], true, depth + 1);
                continue;
            }
            CHECK(!r[0].bad, "bad mark outside a batch");
            walk_fields(fc, sub, r, sub->nf, depth + 1);
        }
        break;
    }
    case K_LIST_U:
    case K_LIST_ID:
        CHECK(v->arr.nf == 1, "list with nf=%u", v->arr.nf);
        CHECK(v->arr.n >= fs->min && v->arr.n <= fc->lim->max_list,
              "list of %u outside [%u, max_list %u]", v->arr.n, fs->min, fc->lim->max_list);
        CHECK(v->arr.n == 0 || v->arr.v != NULL, "list without storage");
        for (uint32_t i = 0; i < v->arr.n; i++) {
            const proto_val *e = &v->arr.v[i];
            CHECK(!e->nil, "nil list element");
            sink += fs->kind == K_LIST_U ? e->u : (e->id.hi ^ e->id.lo);
        }
        break;
    default:
        CHECK(0, "no kind for a field");
    }
}

static void walk_fields(const frame_ctx *fc, const sspec *s, const proto_val *f, uint32_t nf,
                        int depth)
{
    CHECK(depth < 8, "records nested %d deep", depth);
    uint32_t nreq = s->nreq != 0 ? s->nreq : s->nf;
    for (uint32_t i = 0; i < nf; i++)
        walk_value(fc, &s->f[i], &f[i], i >= nreq, depth);
}

static void walk_msg(const frame_ctx *fc, const proto_msg *m)
{
    CHECK(m->type < PROTO_TYPE_MAX && strcmp(proto_type_name(m->type), "?") != 0,
          "decoded unknown type %u", m->type);
    const sspec *s = &msg_specs[m->type];
    CHECK(m->nf == s->nf, "type %s decoded with %u fields, mirror has %u: update the mirror",
          proto_type_name(m->type), m->nf, s->nf);
    sink += m->req;
    walk_fields(fc, s, m->f, m->nf, 0);
}

/* ------------------------------------------------------------------ stream */

static uint32_t be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

static bool untouched(const proto_msg *m)
{
    const uint8_t *p = (const uint8_t *)m;
    for (size_t i = 0; i < sizeof *m; i++)
        if (p[i] != 0xa5)
            return false;
    return true;
}

/* Decodes data as a stream under lim, as conn.c's process_input would. */
static void run_stream(const uint8_t *data, size_t size, const proto_limits *lim)
{
    msgpack_zone zone;
    CHECK(msgpack_zone_init(&zone, 4096), "zone init");
    size_t pos = 0;
    while (pos < size) {
        const uint8_t *p = data + pos;
        size_t avail = size - pos;
        uint64_t body = avail >= PROTO_HDR_LEN ? be32(p) : 0;
        proto_msg m;
        memset(&m, 0xa5, sizeof m);
        int rc = proto_decode(p, avail, lim, &zone, &m);
        if (rc > 0) {
            CHECK((size_t)rc <= avail, "consumed %d of %zu bytes", rc, avail);
            CHECK(avail >= PROTO_HDR_LEN && (uint64_t)rc == PROTO_HDR_LEN + body,
                  "consumed %d for a frame of %llu", rc,
                  (unsigned long long)(PROTO_HDR_LEN + body));
            CHECK(body <= lim->max_frame, "accepted a %llu-byte body over max_frame %u",
                  (unsigned long long)body, lim->max_frame);
            frame_ctx fc = {p, p + rc, lim};
            walk_msg(&fc, &m);
            msgpack_zone_clear(&zone);
            /* The last proper prefix of a valid frame is "need more". */
            proto_msg m2;
            CHECK(proto_decode(p, (size_t)rc - 1, lim, &zone, &m2) == 0,
                  "prefix of a valid frame was not need-more");
            msgpack_zone_clear(&zone);
            pos += (size_t)rc;
            continue;
        }
        CHECK(untouched(&m), "out changed on return %d", rc);
        msgpack_zone_clear(&zone);
        if (rc == 0) {
            CHECK(avail < PROTO_HDR_LEN ||
                      (body > 0 && body <= lim->max_frame && avail - PROTO_HDR_LEN < body),
                  "need-more with %zu bytes for a %llu-byte body", avail, (unsigned long long)body);
            break;
        }
        if (rc == SPW_EFRAMESIZE) {
            CHECK(avail >= PROTO_HDR_LEN && body > lim->max_frame,
                  "EFRAMESIZE for a %llu-byte body, limit %u", (unsigned long long)body,
                  lim->max_frame);
            break;
        }
        if (rc == SPW_EMALFORMED) {
            /* conn.c skips the frame: it must be whole, or the skip would run past the data. */
            CHECK(avail >= PROTO_HDR_LEN && body <= lim->max_frame && avail - PROTO_HDR_LEN >= body,
                  "EMALFORMED for an incomplete frame: %zu bytes, body %llu", avail,
                  (unsigned long long)body);
            pos += PROTO_HDR_LEN + (size_t)body;
            continue;
        }
        CHECK(rc == SPW_ENOMEM, "unexpected return %d (%s)", rc, spw_err_name(rc));
        break;
    }
    msgpack_zone_destroy(&zone);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The split connections use to receive a chunk's payload in place (proto_split_payload), on
 * every prefix length a reader could hold: a split stays inside the frame, and the head it
 * builds either decodes to a message whose split field is an empty byte string, or is refused
 * as the whole frame would be. */
static void run_split(const uint8_t *data, size_t size, const proto_limits *lim)
{
    uint8_t head[128];
    msgpack_zone z;
    msgpack_zone_init(&z, 1024);
    for (size_t avail = 0; avail <= size && avail <= 256; avail++) {
        size_t head_len = 0, data_off = 0;
        uint64_t data_len = 0;
        uint32_t field = 0;
        int rc = proto_split_payload(data, avail, sizeof head, head, &head_len, &data_off,
                                     &data_len, &field);
        if (rc != 1)
            continue;
        uint64_t frame = PROTO_HDR_LEN + ((uint64_t)data[0] << 24 | (uint64_t)data[1] << 16 |
                                          (uint64_t)data[2] << 8 | data[3]);
        if (data_off > avail || data_off + data_len != frame || head_len > sizeof head)
            abort();
        proto_msg m;
        if (proto_decode(head, head_len, lim, &z, &m) == (int)head_len &&
            (field >= m.nf || m.f[field].bin.len != 0))
            abort();
        msgpack_zone_clear(&z);
    }
    msgpack_zone_destroy(&z);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    proto_limits lim;
    proto_limits_default(&lim);
    run_stream(data, size, &lim);
    run_split(data, size, &lim);

    proto_limits tiny_frame = lim;
    tiny_frame.max_frame = 24;
    run_stream(data, size, &tiny_frame);

    proto_limits tiny_list = lim;
    tiny_list.max_list = 6; /* applies to every array, the field lists too */
    run_stream(data, size, &tiny_list);
    return 0;
}
