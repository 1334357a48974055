/*
 * Wire codec: message schemas, the pure frame decoder and the frame encoder.
 *
 * Decoding runs in two steps, each bounded: (1) the length prefix is checked against the
 * limit; (2) one pass reads the body straight into typed proto_val fields (record arrays in the
 * caller's zone), checking it against the message's schema and its structure as it goes:
 * rejecting types we never send (maps, floats, ext), nesting deeper than PROTO_MAX_DEPTH,
 * headers that run past the body, arrays that declare more elements than bytes remain, and
 * bodies with trailing bytes. Each field is read by code generated for its kind from the schema
 * table. msgpack-c is used for its zone only.
 * Nothing here keeps state between calls.
 */
#include "spillway/proto.h"
#include "spillway/proto_wr.h"
#include "spillway/utf8.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PROTO_MAX_DEPTH 8
/* Decoded values (proto_val, 24+ bytes each) one frame may make: a frame of small values must
 * not buy a decode many times its size (dec_array). */
#define PROTO_MAX_VALUES (4u << 20)

const char *proto_role_name(int role)
{
    switch (role) {
    case PROTO_ROLE_SCHEDULER:
        return "scheduler";
    case PROTO_ROLE_WORKER:
        return "worker";
    case PROTO_ROLE_CLIENT:
        return "client";
    case PROTO_ROLE_CTL:
        return "ctl";
    case PROTO_ROLE_EXECUTOR:
        return "executor";
    case PROTO_ROLE_PEER:
        return "peer";
    default:
        return "?";
    }
}

const char *proto_refkind_name(int kind)
{
    static const char *const names[PROTO_REF_KINDS] = {"CLIENT", "TASK_ARG", "PINNED",
                                                       "BROADCAST", "OUTPUT", "PLUGIN"};
    return kind >= 0 && kind < PROTO_REF_KINDS ? names[kind] : "?";
}

const char *proto_type_name(uint32_t type)
{
    switch (type) {
#define PROTO_TYPE_NAME(name, value)                                                               \
    case (value):                                                                                  \
        return #name;
        PROTO_MSG_MAP(PROTO_TYPE_NAME)
#undef PROTO_TYPE_NAME
    default:
        return "?";
    }
}

void proto_limits_default(proto_limits *lim)
{
    lim->max_frame = PROTO_DEFAULT_MAX_FRAME;
    lim->max_list = 1u << 20;
}

/* ------------------------------------------------------------------ schemas */

enum pf_kind {
    PF_NONE,
    PF_U,      /* unsigned integer */
    PF_I,      /* signed integer */
    PF_BOOL,   /* boolean */
    PF_BIN,    /* bin, length in [min, max] */
    PF_STR,    /* str, length <= max */
    PF_ID,     /* bin of exactly 16 bytes */
    PF_REC,    /* one record (array of fields) of schema sub */
    PF_RECS,   /* array of at most max records of schema sub */
    PF_LIST_U, /* array of at most max unsigned integers (at least min) */
    PF_LIST_ID /* array of at most max ids */
};

typedef struct pfield {
    uint8_t kind;
    uint8_t opt; /* nil accepted */
    uint8_t sub; /* record schema for PF_REC / PF_RECS */
    uint32_t min;
    uint32_t max;
    uint8_t lenient; /* PF_RECS: a bad record is marked (proto_val.bad), not fatal */
} pfield;

typedef struct rd rd;

typedef struct pschema {
    uint8_t nf;
    pfield f[PROTO_MAX_FIELDS];
    uint8_t nreq; /* fields a sender must send; later ones were added since (0 = all) */
    /* Reads the n fields of one record or message (its header read, nreq <= n <= nf): code
     * generated per schema with each field's kind known at compile time (dec_body_*). */
    int (*body)(rd *r, uint32_t n, proto_val *out);
} pschema;

/* Schema rows, generated from the table in proto_schema.h. MSG0's row leaves its fields out,
 * which clang's -Wmissing-field-initializers would flag. */
#if defined(__clang__)
#pragma clang diagnostic push
#pragma clang diagnostic ignored "-Wmissing-field-initializers"
#endif
#define ROW_U(arg)                                                                                 \
    {                                                                                              \
        PF_U, 0, 0, 0, 0, 0                                                                        \
    }
#define ROW_I(arg)                                                                                 \
    {                                                                                              \
        PF_I, 0, 0, 0, 0, 0                                                                        \
    }
#define ROW_ID(arg)                                                                                \
    {                                                                                              \
        PF_ID, 0, 0, 16, 16, 0                                                                     \
    }
#define ROW_OPT_ID(arg)                                                                            \
    {                                                                                              \
        PF_ID, 1, 0, 16, 16, 0                                                                     \
    }
#define ROW_BIN(arg)                                                                               \
    {                                                                                              \
        PF_BIN, 0, 0, (arg), (arg), 0                                                              \
    }
#define ROW_OPT_BIN(arg)                                                                           \
    {                                                                                              \
        PF_BIN, 1, 0, 0, UINT32_MAX, 0                                                             \
    }
#define ROW_DATA(arg)                                                                              \
    {                                                                                              \
        PF_BIN, 0, 0, 0, UINT32_MAX, 0                                                             \
    }
#define ROW_STR(arg)                                                                               \
    {                                                                                              \
        PF_STR, 0, 0, 0, (arg), 0                                                                  \
    }
#define ROW_REC(arg)                                                                               \
    {                                                                                              \
        PF_REC, 1, REC_##arg, 0, 0, 0                                                              \
    }
#define ROW_RECS(arg)                                                                              \
    {                                                                                              \
        PF_RECS, 0, REC_##arg, 0, UINT32_MAX, 0                                                    \
    }
#define ROW_BATCH(arg)                                                                             \
    {                                                                                              \
        PF_RECS, 0, REC_##arg, 0, UINT32_MAX, 1                                                    \
    }
#define ROW_LIST_U(arg)                                                                            \
    {                                                                                              \
        PF_LIST_U, 0, 0, (arg), UINT32_MAX, 0                                                      \
    }
#define ROW_LIST_ID(arg)                                                                           \
    {                                                                                              \
        PF_LIST_ID, 0, 0, 0, UINT32_MAX, 0                                                         \
    }
#define ROW_FIELD(index, member, kind, arg) ROW_##kind(arg),
#define COUNT_REQ(index, member, kind, arg) +1
#define COUNT_NONE(index, member, kind, arg)

#define REC_INDEX(NAME, name) REC_##name,
enum rec_schema { PROTO_SCHEMA(REC_INDEX, PROTO__NONE, PROTO__NONE, PROTO__NONE) REC_COUNT };

#define DECL_BODY_REC(NAME, name) static int dec_body_rec_##name(rd *r, uint32_t n, proto_val *out);
#define DECL_BODY_MSG(NAME, name) static int dec_body_msg_##name(rd *r, uint32_t n, proto_val *out);
PROTO_SCHEMA(DECL_BODY_REC, DECL_BODY_MSG, DECL_BODY_MSG, PROTO__NONE)

#define REC_ROW(NAME, name)                                                                        \
    [REC_##name] = {PROTO_NF_REC_##NAME,                                                           \
                    {PROTO_REC_FIELDS_##NAME(ROW_FIELD, ROW_FIELD)},                               \
                    0 PROTO_REC_FIELDS_##NAME(COUNT_REQ, COUNT_NONE),                              \
                    dec_body_rec_##name},
static const pschema rec_schemas[REC_COUNT] = {
    PROTO_SCHEMA(REC_ROW, PROTO__NONE, PROTO__NONE, PROTO__NONE)};

#define MSG_ROW(NAME, name)                                                                        \
    static const pschema schema_##name = {PROTO_NF_##NAME,                                         \
                                          {PROTO_FIELDS_##NAME(ROW_FIELD, ROW_FIELD)},             \
                                          0 PROTO_FIELDS_##NAME(COUNT_REQ, COUNT_NONE),            \
                                          dec_body_msg_##name};
#define MSG0_ROW(NAME, name)                                                                       \
    static const pschema schema_##name = {0, {{0}}, 0, dec_body_msg_##name};
PROTO_SCHEMA(PROTO__NONE, MSG_ROW, MSG0_ROW, PROTO__NONE)

/* The schema of each message type; NULL for a type that does not exist. */
#define MSG_PTR(NAME, name) [PROTO_##NAME] = &schema_##name,
#define ALIAS_PTR(NAME, name, OF, of) [PROTO_##NAME] = &schema_##of,
static const pschema *const msg_schemas[PROTO_TYPE_MAX] = {
    PROTO_SCHEMA(PROTO__NONE, MSG_PTR, MSG_PTR, ALIAS_PTR)};

/* Every type of PROTO_MSG_MAP has a schema: a missing one fails to compile here. */
#define HAS_SCHEMA(NAME, name) HAS_SCHEMA_##NAME,
#define HAS_SCHEMA_ALIAS(NAME, name, OF, of) HAS_SCHEMA_##NAME,
enum { PROTO_SCHEMA(PROTO__NONE, HAS_SCHEMA, HAS_SCHEMA, HAS_SCHEMA_ALIAS) HAS_SCHEMA_COUNT };
#define CHECK_SCHEMA(name, value) (void)HAS_SCHEMA_##name;
static inline void schema_covers_every_type(void){PROTO_MSG_MAP(CHECK_SCHEMA)}
#define CHECK_NF(NAME, name) _Static_assert(PROTO_NF_##NAME <= PROTO_MAX_FIELDS, #NAME);
#define CHECK_NF_REC(NAME, name) _Static_assert(PROTO_NF_REC_##NAME <= PROTO_MAX_FIELDS, #NAME);
PROTO_SCHEMA(CHECK_NF_REC, CHECK_NF, PROTO__NONE, PROTO__NONE)
#if defined(__clang__)
#pragma clang diagnostic pop
#endif

    /* ------------------------------------------------------ type byte classes */

    static inline uint64_t be_read(const uint8_t *p, int n)
{
    uint64_t v = 0;
    for (int i = 0; i < n; i++)
        v = (v << 8) | p[i];
    return v;
}

/* What the reader's checks need to know of each msgpack type byte, from one table lookup: SC_BAD for a
 * kind we never send; else SC_ARR for an array, the length of a big-endian length or count
 * that follows the type byte (SC_HDR_SHIFT), and in the low byte the payload bytes (a scalar's,
 * a fixstr's) or a fixarray's count. */
#define SC_BAD 0x1000u
#define SC_ARR 0x0800u
#define SC_HDR_SHIFT 8
#define SC_CLASS(t)                                                                                \
    ((t) <= 0x7f || (t) >= 0xe0 || (t) == 0xc0 || (t) == 0xc2 || (t) == 0xc3 ? 0u                  \
     : (t) >= 0xa0 && (t) <= 0xbf                                        ? (t)&0x1fu               \
     : (t) >= 0x90 && (t) <= 0x9f                                        ? SC_ARR | ((t)&0x0fu)    \
     : (t) == 0xcc || (t) == 0xd0                                        ? 1u                      \
     : (t) == 0xcd || (t) == 0xd1                                        ? 2u                      \
     : (t) == 0xce || (t) == 0xd2                                        ? 4u                      \
     : (t) == 0xcf || (t) == 0xd3                                        ? 8u                      \
     : (t) == 0xc4 || (t) == 0xd9                                        ? 1u << SC_HDR_SHIFT      \
     : (t) == 0xc5 || (t) == 0xda                                        ? 2u << SC_HDR_SHIFT      \
     : (t) == 0xc6 || (t) == 0xdb                                        ? 4u << SC_HDR_SHIFT      \
     : (t) == 0xdc                                                       ? SC_ARR | 2u << SC_HDR_SHIFT \
     : (t) == 0xdd                                                       ? SC_ARR | 4u << SC_HDR_SHIFT \
                                                                         : SC_BAD) /* maps, floats, ext, 0xc1 */
#define SC_1(t) SC_CLASS(t),
#define SC_4(t) SC_1(t) SC_1((t) + 1) SC_1((t) + 2) SC_1((t) + 3)
#define SC_16(t) SC_4(t) SC_4((t) + 4) SC_4((t) + 8) SC_4((t) + 12)
#define SC_64(t) SC_16(t) SC_16((t) + 16) SC_16((t) + 32) SC_16((t) + 48)
static const uint16_t type_class[256] = {SC_64(0u) SC_64(64u) SC_64(128u) SC_64(192u)};

/* ------------------------------------------------------------- schema check */

/* The body is read in one pass straight into proto_val fields, following the schema: no
 * msgpack object tree is built first. What it checks is the schema, with the same rules (and the
 * same results) as msgpack-c's unpacker followed by a check of its tree, and the structure as it
 * goes: every header, length and count must lie within the body (an array's count within the
 * bytes left, as each element takes one at least, and within lim->max_list), kinds we never send
 * are refused, and the body must end where its one value does. Values the schema does not read
 * (the rest of a BATCH record that does not match its kind) are walked by rd_skip with the same
 * checks and PROTO_MAX_DEPTH levels of nesting at most; the schema's own nesting stays below
 * that. */

enum mo_type { MO_NIL, MO_BOOL, MO_POS, MO_NEG, MO_STR, MO_BIN, MO_ARR, MO_BAD };

/* One msgpack value's header: an integer as msgpack-c classifies it (any integer >= 0 is
 * positive, whichever form it came in), a string's or bin's bytes (already skipped), or an
 * array's count (its elements follow). */
typedef struct mobj {
    uint8_t t;
    bool b;
    uint64_t u; /* MO_POS value; MO_STR/MO_BIN length; MO_ARR count (MO_BAD: the value is
                 * malformed, truncated or of a kind we never send) */
    int64_t i;  /* MO_NEG value */
    const uint8_t *ptr;
} mobj;

struct rd {
    const uint8_t *p, *end;
    msgpack_zone *zone;
    const proto_limits *lim;
    uint64_t vals_left; /* values this frame may still make (PROTO_MAX_VALUES) */
};

/* Whether the value at r->p is of a kind we send and its header, and a string's or bin's bytes,
 * lie within the body; an array's count must be at most the bytes left and lim->max_list. */
static bool rd_fits(const rd *r)
{
    const uint8_t *p = r->p;
    size_t left = (size_t)(r->end - p);
    if (left == 0)
        return false;
    unsigned c = type_class[*p];
    if (c & SC_BAD)
        return false;
    left--;
    uint64_t n = c & 0xffu;
    unsigned hdr = (c >> SC_HDR_SHIFT) & 7u;
    if (hdr > 0) {
        if (left < hdr)
            return false;
        n = be_read(p + 1, (int)hdr);
        left -= hdr;
    }
    return n <= left && (!(c & SC_ARR) || n <= r->lim->max_list);
}

static void rd_next(rd *r, mobj *o)
{
    if (!rd_fits(r)) {
        o->t = MO_BAD;
        return;
    }
    uint8_t t = *r->p++;
    int n = 0;
    if (t <= 0x7f) {
        o->t = MO_POS;
        o->u = t;
        return;
    }
    if (t >= 0xe0) {
        o->t = MO_NEG;
        o->i = (int8_t)t;
        return;
    }
    if (t >= 0xa0 && t <= 0xbf) {
        o->t = MO_STR;
        o->u = t & 0x1f;
        o->ptr = r->p;
        r->p += o->u;
        return;
    }
    if (t >= 0x90 && t <= 0x9f) {
        o->t = MO_ARR;
        o->u = t & 0x0f;
        return;
    }
    switch (t) {
    case 0xc0:
        o->t = MO_NIL;
        return;
    case 0xc2:
    case 0xc3:
        o->t = MO_BOOL;
        o->b = t == 0xc3;
        return;
    case 0xcc: case 0xcd: case 0xce: case 0xcf:
        n = 1 << (t - 0xcc);
        o->t = MO_POS;
        o->u = be_read(r->p, n);
        r->p += n;
        return;
    case 0xd0: case 0xd1: case 0xd2: case 0xd3: {
        n = 1 << (t - 0xd0);
        uint64_t v = be_read(r->p, n);
        r->p += n;
        int64_t d = n == 1   ? (int8_t)v
                    : n == 2 ? (int16_t)v
                    : n == 4 ? (int32_t)v
                             : (int64_t)v;
        if (d >= 0) {
            o->t = MO_POS;
            o->u = (uint64_t)d;
        } else {
            o->t = MO_NEG;
            o->i = d;
        }
        return;
    }
    case 0xd9: case 0xda: case 0xdb:
    case 0xc4: case 0xc5: case 0xc6:
        n = t == 0xd9 || t == 0xc4 ? 1 : t == 0xda || t == 0xc5 ? 2 : 4;
        o->t = t >= 0xd9 ? MO_STR : MO_BIN;
        o->u = be_read(r->p, n);
        r->p += n;
        o->ptr = r->p;
        r->p += o->u;
        return;
    default: /* 0xdc, 0xdd: rd_fits lets nothing else through */
        n = t == 0xdc ? 2 : 4;
        o->t = MO_ARR;
        o->u = be_read(r->p, n);
        r->p += n;
        return;
    }
}

/* Skips one whole value at nesting level depth (the body's value is at 0), nested arrays
 * included, checking them as rd_next does. @return 0 or SPW_EMALFORMED. */
static int rd_skip(rd *r, int depth)
{
    mobj o;
    rd_next(r, &o);
    if (o.t == MO_BAD)
        return SPW_EMALFORMED;
    if (o.t == MO_ARR && o.u > 0) {
        if (depth >= PROTO_MAX_DEPTH)
            return SPW_EMALFORMED;
        for (uint64_t i = 0; i < o.u; i++)
            if (rd_skip(r, depth + 1) != 0)
                return SPW_EMALFORMED;
    }
    return 0;
}

/* The nesting level of a BATCH record's values: the body [type, req, fields] is at 0, the
 * fields at 2, the BATCH array's records at 3 (BATCH fields are message fields only). */
#define BATCH_VALUE_DEPTH 4


/* A big-endian 64-bit value at p (unaligned): the byte order proto_wr.h's writers store. */
static inline uint64_t be64(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, sizeof v);
    return PROTO_WR_BE(64, v);
}

/* Whether n bytes at p are no string a peer may send: a NUL, or bytes that are not UTF-8
 * (names and texts end up in JSON). Eight at a time, for the strings of every task record; the
 * UTF-8 check runs only for a string with a byte past ASCII. */
static inline __attribute__((always_inline)) bool str_bad(const uint8_t *p, size_t n)
{
    uint64_t high = 0;
    if (n < 8) {
        for (size_t i = 0; i < n; i++) {
            if (p[i] == 0)
                return true;
            high |= p[i] & 0x80;
        }
    } else {
        const uint64_t lo = 0x0101010101010101u, hi = 0x8080808080808080u;
        uint64_t w;
        for (size_t i = 0; i + 8 <= n; i += 8) {
            memcpy(&w, p + i, 8);
            if (((w - lo) & ~w & hi) != 0)
                return true;
            high |= w & hi;
        }
        memcpy(&w, p + n - 8, 8); /* the last (n % 8) bytes, with some seen before */
        if (((w - lo) & ~w & hi) != 0)
            return true;
        high |= w & hi;
    }
    return high != 0 && !spw_utf8_valid(p, n);
}

static int check_scalar(uint8_t kind, const pfield *fd, const mobj *o, proto_val *v)
{
    switch (kind) {
    case PF_U:
        if (o->t != MO_POS)
            return SPW_EMALFORMED;
        v->u = o->u;
        return 0;
    case PF_I:
        if (o->t == MO_POS) {
            if (o->u > INT64_MAX)
                return SPW_EMALFORMED;
            v->i = (int64_t)o->u;
        } else if (o->t == MO_NEG) {
            v->i = o->i;
        } else {
            return SPW_EMALFORMED;
        }
        return 0;
    case PF_BOOL:
        if (o->t != MO_BOOL)
            return SPW_EMALFORMED;
        v->b = o->b;
        return 0;
    case PF_BIN:
    case PF_ID:
        if (o->t != MO_BIN || o->u < fd->min || o->u > fd->max)
            return SPW_EMALFORMED;
        if (kind == PF_ID) {
            v->id.hi = be64(o->ptr); /* spw_id_from_bytes, inline: ids are in every record */
            v->id.lo = be64(o->ptr + 8);
        } else {
            v->bin.ptr = o->ptr;
            v->bin.len = (uint32_t)o->u;
        }
        return 0;
    case PF_STR:
        if (o->t != MO_STR || o->u > fd->max || str_bad(o->ptr, o->u))
            return SPW_EMALFORMED;
        v->bin.ptr = o->ptr;
        v->bin.len = (uint32_t)o->u;
        return 0;
    default:
        return SPW_EMALFORMED;
    }
}

/* A record of a BATCH array that does not match its kind (r at its start): all fields nil, the
 * first marked bad and holding the record's first value when that one is right (a task id, to
 * answer by); r ends past the record. Every item took at least one byte of the frame, so the
 * n * nf values stay bounded. */
static int mark_bad(rd *r, const pschema *s, proto_val *out);

static int dec_value(rd *r, const pfield *fd, proto_val *v);

/* ------------------------------------------------- fields of a known kind */

/* Each schema's fields are read by a function generated from its field list (dec_body_*), so
 * every field's kind and limits are constants there, and the readers below are inlined into it:
 * a value in the form our writers send (a fixint, a 16-byte id, a short string, a fixarray of
 * records...) is taken in a few instructions, and any other form, and a value that may run past
 * the body's end, goes to dec_value, the generic reader, which gives the same value or the same
 * error. */
#define DEC_INLINE static inline __attribute__((always_inline))

DEC_INLINE void val_zero(proto_val *v)
{
    memset(v, 0, sizeof *v);
}

DEC_INLINE int dec_u(rd *r, proto_val *v, const pfield *fd)
{
    const uint8_t *p = r->p;
    if (r->end - p < 9)
        return dec_value(r, fd, v);
    uint64_t u;
    switch (p[0]) {
    case 0xcc:
        u = p[1];
        r->p += 2;
        break;
    case 0xcd:
        u = (uint64_t)p[1] << 8 | p[2];
        r->p += 3;
        break;
    case 0xce:
        u = be_read(p + 1, 4);
        r->p += 5;
        break;
    case 0xcf:
        u = be64(p + 1);
        r->p += 9;
        break;
    default:
        if (p[0] > 0x7f)
            return dec_value(r, fd, v);
        u = p[0];
        r->p += 1;
        break;
    }
    val_zero(v);
    v->u = u;
    return 0;
}

DEC_INLINE int dec_i(rd *r, proto_val *v, const pfield *fd)
{
    if (r->p == r->end)
        return dec_value(r, fd, v);
    uint8_t t = r->p[0];
    if (t > 0x7f && t < 0xe0)
        return dec_value(r, fd, v);
    r->p++;
    val_zero(v);
    v->i = (int8_t)t; /* a positive or a negative fixint */
    return 0;
}

/* An optional field sent as nil, the form our writers use for "none": reads it into v. */
DEC_INLINE bool dec_opt_nil(rd *r, proto_val *v, const pfield *fd)
{
    if (r->p == r->end || r->p[0] != 0xc0 || !fd->opt)
        return false;
    val_zero(v);
    v->nil = 1;
    r->p++;
    return true;
}

/* An id (or, opt, nil), in the form our writers use: bin 8 of 16 bytes. */
DEC_INLINE int dec_id(rd *r, proto_val *v, const pfield *fd)
{
    const uint8_t *p = r->p;
    if (r->end - p < 18)
        return dec_value(r, fd, v);
    if (p[0] == 0xc4 && p[1] == 16) {
        val_zero(v);
        v->id.hi = be64(p + 2); /* spw_id_from_bytes, inline: ids are in every record */
        v->id.lo = be64(p + 10);
        r->p += 18;
        return 0;
    }
    if (dec_opt_nil(r, v, fd))
        return 0;
    return dec_value(r, fd, v);
}

DEC_INLINE int dec_bin(rd *r, proto_val *v, const pfield *fd)
{
    const uint8_t *p = r->p;
    size_t left = (size_t)(r->end - p);
    if (left >= 2 && p[0] == 0xc4 && p[1] <= left - 2 && p[1] >= fd->min && p[1] <= fd->max) {
        val_zero(v);
        v->bin.ptr = p + 2;
        v->bin.len = p[1];
        r->p += 2 + (size_t)p[1];
        return 0;
    }
    if (dec_opt_nil(r, v, fd))
        return 0;
    return dec_value(r, fd, v);
}

DEC_INLINE int dec_str(rd *r, proto_val *v, const pfield *fd)
{
    const uint8_t *p = r->p;
    size_t left = (size_t)(r->end - p), hdr, len;
    if (left >= 1 && p[0] >= 0xa0 && p[0] <= 0xbf) {
        hdr = 1;
        len = p[0] & 0x1f;
    } else if (left >= 2 && p[0] == 0xd9) {
        hdr = 2;
        len = p[1];
    } else {
        return dec_value(r, fd, v);
    }
    if (len > left - hdr)
        return dec_value(r, fd, v);
    if (len > fd->max || str_bad(p + hdr, len))
        return SPW_EMALFORMED;
    val_zero(v);
    v->bin.ptr = p + hdr;
    v->bin.len = (uint32_t)len;
    r->p += hdr + len;
    return 0;
}

/* The header of an array at r: a fixarray inline (with rd_next's checks), else rd_next. */
DEC_INLINE void rd_arr_hdr(rd *r, mobj *o)
{
    const uint8_t *p = r->p;
    if (p < r->end && *p >= 0x90 && *p <= 0x9f) {
        uint32_t n = *p & 0x0fu;
        if (n < (size_t)(r->end - p) && n <= r->lim->max_list) {
            o->t = MO_ARR;
            o->u = n;
            r->p++;
            return;
        }
    }
    rd_next(r, o);
}

/* The fields of a record whose header o was just read. */
DEC_INLINE int dec_fields(rd *r, const pschema *s, const mobj *o, proto_val *out)
{
    uint32_t nreq = s->nreq != 0 ? s->nreq : s->nf;
    if (o->t != MO_ARR || o->u < nreq || o->u > s->nf)
        return SPW_EMALFORMED;
    return s->body(r, (uint32_t)o->u, out);
}

/* The value of an array field fd (REC, RECS, LIST_U, LIST_ID) whose header o was just read;
 * inlined where fd is a constant, so the record schema's reader is called directly. */
DEC_INLINE int dec_array(rd *r, const pfield *fd, const mobj *o, proto_val *v)
{
    if (o->t != MO_ARR)
        return SPW_EMALFORMED;
    const pschema *sub = fd->kind == PF_REC || fd->kind == PF_RECS ? &rec_schemas[fd->sub] : NULL;
    uint64_t n = fd->kind == PF_REC ? 1 : o->u;
    if (fd->kind != PF_REC && (n > fd->max || n > r->lim->max_list || n < fd->min))
        return SPW_EMALFORMED;
    uint32_t nf = sub != NULL ? sub->nf : 1;
    /* Every item must be a record of the right arity before room for n * nf values is
     * taken: n zero bytes must not buy an allocation nf * 24 times their size. A record of
     * nreq fields takes 1 + nreq bytes at least, so more records than that many bytes
     * remain for cannot all be right. A batch (lenient: one bad record is marked, the rest
     * kept) is held to the same count: its records are ours, so a frame of more than could
     * be right is no batch with a bad record in it but a bad frame. */
    if (sub != NULL) {
        uint32_t nreq = sub->nreq != 0 ? sub->nreq : sub->nf;
        if (fd->kind == PF_REC ? o->u < nreq || o->u > nf
                               : n * (1 + (uint64_t)nreq) > (uint64_t)(r->end - r->p))
            return SPW_EMALFORMED;
    }
    if (n * nf > r->vals_left)
        return SPW_EMALFORMED;
    r->vals_left -= n * nf;
    proto_val *vals = NULL;
    if (n * nf > 0) {
        vals = msgpack_zone_malloc(r->zone, (size_t)n * nf * sizeof(proto_val));
        if (vals == NULL)
            return SPW_ENOMEM;
    }
    for (uint32_t i = 0; i < n; i++) {
        int rc;
        if (fd->kind == PF_REC) {
            rc = dec_fields(r, sub, o, vals);
        } else if (sub != NULL) {
            const uint8_t *at = r->p;
            mobj ro;
            rd_arr_hdr(r, &ro);
            rc = dec_fields(r, sub, &ro, vals + (size_t)i * nf);
            if (rc == SPW_EMALFORMED && fd->lenient) {
                r->p = at;
                rc = mark_bad(r, sub, vals + (size_t)i * nf);
            }
        } else if (fd->kind == PF_LIST_U) {
            static const pfield efd = {PF_U, 0, 0, 0, 0, 0};
            rc = dec_u(r, &vals[i], &efd);
        } else {
            static const pfield efd = {PF_ID, 0, 0, 16, 16, 0};
            rc = dec_id(r, &vals[i], &efd);
        }
        if (rc != 0)
            return rc;
    }
    v->arr.v = vals;
    v->arr.n = (uint32_t)n;
    v->arr.nf = nf;
    return 0;
}

/* A nil read for field fd into v (zeroed): absent if the field is optional, else malformed. */
DEC_INLINE int nil_field(const pfield *fd, proto_val *v)
{
    if (!fd->opt)
        return SPW_EMALFORMED;
    v->nil = 1;
    return 0;
}

/* An array field of a known kind (dec_value's steps, with the array's reading inlined). */
DEC_INLINE int dec_arr_field(rd *r, proto_val *v, const pfield *fd)
{
    val_zero(v);
    mobj o;
    rd_arr_hdr(r, &o);
    if (o.t == MO_NIL)
        return nil_field(fd, v);
    return dec_array(r, fd, &o, v);
}

/* The value at r for field fd, into v. */
static int dec_value(rd *r, const pfield *fd, proto_val *v)
{
    memset(v, 0, sizeof *v);
    mobj o;
    rd_next(r, &o);
    if (o.t == MO_NIL)
        return nil_field(fd, v);
    switch (fd->kind) {
    case PF_REC:
    case PF_RECS:
    case PF_LIST_U:
    case PF_LIST_ID:
        return dec_array(r, fd, &o, v);
    default:
        return check_scalar(fd->kind, fd, &o, v);
    }
}

static int mark_bad(rd *r, const pschema *s, proto_val *out)
{
    for (uint32_t i = 0; i < s->nf; i++) {
        memset(&out[i], 0, sizeof out[i]);
        out[i].nil = 1;
    }
    mobj o;
    rd_next(r, &o);
    if (o.t == MO_BAD)
        return SPW_EMALFORMED;
    if (o.t == MO_ARR && o.u > 0) {
        const uint8_t *at = r->p;
        int rc = dec_value(r, &s->f[0], &out[0]);
        if (rc == SPW_ENOMEM)
            return rc;
        if (rc != 0) {
            memset(&out[0], 0, sizeof out[0]);
            out[0].nil = 1;
            r->p = at;
            if (rd_skip(r, BATCH_VALUE_DEPTH) != 0)
                return SPW_EMALFORMED;
        }
        for (uint64_t i = 1; i < o.u; i++)
            if (rd_skip(r, BATCH_VALUE_DEPTH) != 0)
                return SPW_EMALFORMED;
    }
    out[0].bad = 1;
    return 0;
}

#define DEC_KIND_U dec_u
#define DEC_KIND_I dec_i
#define DEC_KIND_ID dec_id
#define DEC_KIND_OPT_ID dec_id
#define DEC_KIND_BIN dec_bin
#define DEC_KIND_OPT_BIN dec_bin
#define DEC_KIND_DATA dec_bin
#define DEC_KIND_STR dec_str
#define DEC_KIND_REC dec_arr_field
#define DEC_KIND_RECS dec_arr_field
#define DEC_KIND_BATCH dec_arr_field
#define DEC_KIND_LIST_U dec_arr_field
#define DEC_KIND_LIST_ID dec_arr_field

/* A field every sender sends (index < nreq <= n, checked again: a required field listed after
 * an optional one in the schema must not read past its record), and one a sender may leave out. */
#define DEC_REQ(index, member, kind, arg)                                                          \
    if ((uint32_t)(index) >= n)                                                                    \
        return SPW_EMALFORMED;                                                                     \
    if ((rc = DEC_KIND_##kind(r, &out[index], &s->f[index])) != 0)                               \
        return rc;
#define DEC_NEW(index, member, kind, arg)                                                          \
    if ((uint32_t)(index) >= n) {                                                                  \
        val_zero(&out[index]); /* newer than the sender: absent, as if sent as nil */              \
        out[index].nil = 1;                                                                        \
    } else if ((rc = DEC_KIND_##kind(r, &out[index], &s->f[index])) != 0) {                      \
        return rc;                                                                                 \
    }
#define DEF_BODY_REC(NAME, name)                                                                   \
    static int dec_body_rec_##name(rd *r, uint32_t n, proto_val *out)                              \
    {                                                                                              \
        const pschema *s = &rec_schemas[REC_##name];                                               \
        int rc;                                                                                    \
        (void)n;                                                                                   \
        PROTO_REC_FIELDS_##NAME(DEC_REQ, DEC_NEW) return 0;                                        \
    }
#define DEF_BODY_MSG(NAME, name)                                                                   \
    static int dec_body_msg_##name(rd *r, uint32_t n, proto_val *out)                              \
    {                                                                                              \
        const pschema *s = &schema_##name;                                                         \
        int rc;                                                                                    \
        (void)n;                                                                                   \
        PROTO_FIELDS_##NAME(DEC_REQ, DEC_NEW) return 0;                                            \
    }
#define DEF_BODY_MSG0(NAME, name)                                                                  \
    static int dec_body_msg_##name(rd *r, uint32_t n, proto_val *out)                              \
    {                                                                                              \
        (void)r, (void)n, (void)out;                                                               \
        return 0;                                                                                  \
    }
PROTO_SCHEMA(DEF_BODY_REC, DEF_BODY_MSG, DEF_BODY_MSG0, PROTO__NONE)

int proto_decode(const uint8_t *buf, size_t len, const proto_limits *lim, msgpack_zone *zone,
                 proto_msg *out)
{
    if (len < PROTO_HDR_LEN)
        return 0;
    uint64_t body = be_read(buf, PROTO_HDR_LEN);
    if (body > lim->max_frame)
        return SPW_EFRAMESIZE;
    if (body == 0)
        return SPW_EMALFORMED;
    if (len - PROTO_HDR_LEN < body)
        return 0;
    const uint8_t *p = buf + PROTO_HDR_LEN;
    rd r = {p, p + body, zone, lim, PROTO_MAX_VALUES};
    mobj root, type, req;
    rd_next(&r, &root);
    if (root.t != MO_ARR || root.u != 3)
        return SPW_EMALFORMED;
    rd_next(&r, &type);
    if (type.t != MO_POS || type.u >= PROTO_TYPE_MAX)
        return SPW_EMALFORMED;
    rd_next(&r, &req);
    if (req.t != MO_POS)
        return SPW_EMALFORMED;
    const pschema *s = msg_schemas[type.u];
    if (s == NULL)
        return SPW_EMALFORMED; /* unknown message type */
    proto_msg m;
    m.type = (uint32_t)type.u;
    m.req = req.u;
    m.nf = s->nf;
    mobj fields;
    rd_next(&r, &fields);
    int rc = dec_fields(&r, s, &fields, m.f);
    if (rc != 0)
        return rc;
    if (r.p != r.end)
        return SPW_EMALFORMED; /* trailing bytes after the value */
    memcpy(out, &m, offsetof(proto_msg, f) + sizeof(proto_val) * s->nf);
    return (int)(PROTO_HDR_LEN + body);
}

/* ------------------------------------------------- splitting off a payload */

/* Reads a big-endian unsigned of n bytes at *pos if all of it is in [0, end). */
static bool rd_be(const uint8_t *b, size_t end, size_t *pos, int n, uint64_t *v)
{
    if (end - *pos < (size_t)n)
        return false;
    *v = be_read(b + *pos, n);
    *pos += (size_t)n;
    return true;
}

/* Skips one scalar, byte string or string at *pos. @return 1, 0 if it runs past avail, -1 for
 * anything else (an array or map, an extension, a reserved byte). */
static int skip_scalar(const uint8_t *b, size_t avail, size_t *pos)
{
    if (*pos >= avail)
        return 0;
    uint8_t t = b[(*pos)++];
    uint64_t len = 0;
    if (t <= 0x7f || t >= 0xe0 || t == 0xc0 || t == 0xc2 || t == 0xc3)
        return 1;
    if (t >= 0xa0 && t <= 0xbf) {
        len = t & 0x1f;
    } else {
        static const struct {
            uint8_t tag;
            int fixed; /* bytes of value */
            int lenbytes; /* bytes of a length prefix */
        } kinds[] = {{0xcc, 1, 0}, {0xcd, 2, 0}, {0xce, 4, 0}, {0xcf, 8, 0}, {0xd0, 1, 0},
                     {0xd1, 2, 0}, {0xd2, 4, 0}, {0xd3, 8, 0}, {0xc4, 0, 1}, {0xc5, 0, 2},
                     {0xc6, 0, 4}, {0xd9, 0, 1}, {0xda, 0, 2}, {0xdb, 0, 4}};
        size_t k = 0;
        while (k < sizeof kinds / sizeof kinds[0] && kinds[k].tag != t)
            k++;
        if (k == sizeof kinds / sizeof kinds[0])
            return -1;
        if (kinds[k].lenbytes == 0)
            len = (uint64_t)kinds[k].fixed;
        else if (!rd_be(b, avail, pos, kinds[k].lenbytes, &len))
            return 0;
    }
    if (avail - *pos < len)
        return 0;
    *pos += (size_t)len;
    return 1;
}

int proto_split_payload(const uint8_t *buf, size_t avail, size_t head_max, uint8_t *head,
                        size_t *head_len, size_t *data_off, uint64_t *data_len, uint32_t *field)
{
    if (avail < PROTO_HDR_LEN)
        return 0;
    uint64_t body = be_read(buf, PROTO_HDR_LEN);
    uint64_t frame_end = PROTO_HDR_LEN + body;
    size_t end = avail < frame_end ? avail : (size_t)frame_end;
    if (end > PROTO_HDR_LEN + head_max)
        end = PROTO_HDR_LEN + head_max; /* the head must be short: look no further */
    /* Past head_max bytes there is nothing more to wait for: the head is too long. */
    const int need = avail >= PROTO_HDR_LEN + head_max ? -1 : 0;
    size_t pos = PROTO_HDR_LEN;
    uint64_t v, nf;
    if (pos >= end)
        return need;
    if (buf[pos++] != 0x93)
        return -1;
    for (int i = 0; i < 2; i++) { /* type and request id: unsigned */
        if (pos >= end)
            return need;
        uint8_t t = buf[pos];
        if (t > 0x7f && (t < 0xcc || t > 0xcf))
            return -1;
        int rc = skip_scalar(buf, end, &pos);
        if (rc <= 0)
            return rc == 0 ? need : rc;
    }
    if (pos >= end)
        return need;
    uint8_t t = buf[pos++];
    if (t >= 0x91 && t <= 0x9f)
        nf = t & 0x0f;
    else if (t == 0xdc && rd_be(buf, end, &pos, 2, &nf) && nf > 0)
        ;
    else
        return t == 0xdc && end - pos < 2 ? need : -1;
    for (uint64_t i = 0; i + 1 < nf; i++) {
        int rc = skip_scalar(buf, end, &pos);
        if (rc <= 0)
            return rc == 0 ? need : rc;
    }
    size_t bin_at = pos;
    if (pos >= end)
        return need;
    t = buf[pos++];
    int lenbytes = t == 0xc4 ? 1 : t == 0xc5 ? 2 : t == 0xc6 ? 4 : 0;
    if (lenbytes == 0)
        return -1;
    if (!rd_be(buf, end, &pos, lenbytes, &v))
        return need;
    if (pos + v != frame_end)
        return -1; /* the byte string is not what ends the frame */
    /* The head: the same frame with an empty byte string in place of the payload. */
    size_t hbody = bin_at - PROTO_HDR_LEN + 2;
    if (PROTO_HDR_LEN + hbody > head_max)
        return -1;
    head[0] = (uint8_t)(hbody >> 24);
    head[1] = (uint8_t)(hbody >> 16);
    head[2] = (uint8_t)(hbody >> 8);
    head[3] = (uint8_t)hbody;
    memcpy(head + PROTO_HDR_LEN, buf + PROTO_HDR_LEN, bin_at - PROTO_HDR_LEN);
    head[bin_at] = 0xc4;
    head[bin_at + 1] = 0;
    *head_len = PROTO_HDR_LEN + hbody;
    *data_off = pos;
    *data_len = v;
    *field = (uint32_t)(nf - 1);
    return 1;
}

char *proto_str(const proto_val *v, char *out, size_t outlen)
{
    size_t n = v->bin.len < outlen - 1 ? v->bin.len : outlen - 1;
    if (n > 0)
        memcpy(out, v->bin.ptr, n);
    out[n] = '\0';
    return out;
}

/* ----------------------------------------------------------------- encoding */

/* Values are written straight into the frame's buffer by proto_wr.h's writers, in the same
 * (smallest) forms msgpack-c's packer chooses, so frames are byte for byte what they were; the
 * packer's callback per value (and a spw_buf_append call behind it) cost more than a whole
 * small record. */

/* Room for n more bytes at the end of e's buffer (aborting on OOM, as spw_buf_append). */
static inline uint8_t *enc_room(proto_enc *e, size_t n)
{
    spw_buf *b = e->buf;
    if (b->cap - b->len < n && spw_buf_reserve(b, n) != 0)
        SPW_PANIC("out of memory growing a buffer by %zu bytes", n);
    return b->data + b->len;
}

/* Ends a write into enc_room's room at end. */
static inline void enc_done(proto_enc *e, uint8_t *end)
{
    e->buf->len = (size_t)(end - e->buf->data);
}

/* One value of at most room bytes, written by proto_wr_WR(p, ...). */
#define ENC_WR(e, room, WR, ...) enc_done((e), proto_wr_##WR(enc_room((e), (room)), __VA_ARGS__))

static inline void enc_bytes(proto_enc *e, const void *p, size_t len)
{
    ENC_WR(e, len, body, p, len);
}

static inline void enc_uint(proto_enc *e, uint64_t v)
{
    ENC_WR(e, PROTO_WR_MAX_HDR, uint, v);
}

static void enc_head(proto_enc *e, spw_buf *buf, uint32_t type, uint64_t req);

void proto_enc_begin(proto_enc *e, spw_buf *buf, uint32_t type, uint64_t req, uint32_t nfields)
{
    enc_head(e, buf, type, req);
    proto_put_arr(e, nfields);
}

void proto_enc_raw(proto_enc *e, spw_buf *buf)
{
    e->buf = buf;
    e->start = buf->len;
}

int proto_enc_end(proto_enc *e, uint32_t max_frame)
{
    size_t body = e->buf->len - e->start - PROTO_HDR_LEN;
    if (body > max_frame) {
        e->buf->len = e->start;
        return SPW_EFRAMESIZE;
    }
    uint8_t *h = e->buf->data + e->start;
    h[0] = (uint8_t)(body >> 24);
    h[1] = (uint8_t)(body >> 16);
    h[2] = (uint8_t)(body >> 8);
    h[3] = (uint8_t)body;
    return (int)(body + PROTO_HDR_LEN);
}

void proto_put_u(proto_enc *e, uint64_t v)
{
    enc_uint(e, v);
}

void proto_put_i(proto_enc *e, int64_t v)
{
    ENC_WR(e, PROTO_WR_MAX_HDR, int, v);
}

void proto_put_bool(proto_enc *e, bool v)
{
    ENC_WR(e, 1, byte, v ? 0xc3 : 0xc2);
}

void proto_put_nil(proto_enc *e)
{
    ENC_WR(e, 1, byte, 0xc0);
}

void proto_put_id(proto_enc *e, spw_id id)
{
    ENC_WR(e, PROTO_WR_ID, id, id);
}

void proto_put_bin(proto_enc *e, const void *p, size_t len)
{
    proto_put_bin_hdr(e, len);
    enc_bytes(e, p, len);
}

void proto_put_bin_hdr(proto_enc *e, size_t len)
{
    ENC_WR(e, PROTO_WR_MAX_HDR, bin_hdr, len);
}

void proto_put_str(proto_enc *e, const char *s)
{
    proto_put_strn(e, s, strlen(s));
}

void proto_put_strn(proto_enc *e, const char *s, size_t len)
{
    ENC_WR(e, PROTO_WR_MAX_HDR, str_hdr, len);
    enc_bytes(e, s, len);
}

void proto_put_arr(proto_enc *e, uint32_t n)
{
    ENC_WR(e, PROTO_WR_MAX_HDR, arr, n);
}

/* ------------------------------------------------------------ typed builders */

/* Begins a frame: the length prefix (patched by proto_enc_end), type and request id; the
 * field array follows. */
static void enc_head(proto_enc *e, spw_buf *buf, uint32_t type, uint64_t req)
{
    e->buf = buf;
    e->start = buf->len;
    uint8_t *p = enc_room(e, PROTO_HDR_LEN + 1);
    memset(p, 0, PROTO_HDR_LEN);
    p[PROTO_HDR_LEN] = 0x93; /* [type, req, fields] */
    buf->len += PROTO_HDR_LEN + 1;
    enc_uint(e, type);
    enc_uint(e, req);
}

static void put_opt_id(proto_enc *e, const spw_id *id)
{
    if (id != NULL)
        proto_put_id(e, *id);
    else
        proto_put_nil(e);
}

static void put_opt_bin(proto_enc *e, proto_bytes b)
{
    if (b.ptr != NULL)
        proto_put_bin(e, b.ptr, b.len);
    else
        proto_put_nil(e);
}

static void put_data(proto_enc *e, proto_bytes b)
{
    proto_put_bin_hdr(e, b.len);
    if (b.ptr != NULL)
        enc_bytes(e, b.ptr, b.len);
}

/* A string field: NULL is "", and one longer than the schema allows is cut to its limit, so a
 * name from configuration can never make a frame the peer refuses. */
static void put_str_max(proto_enc *e, const char *s, size_t max)
{
    ENC_WR(e, PROTO_WR_MAX_HDR + max, str_max, s, max);
}

static void put_list_u(proto_enc *e, proto_u64s l)
{
    proto_put_arr(e, l.n);
    for (uint32_t i = 0; i < l.n; i++)
        proto_put_u(e, l.v[i]);
}

static void put_list_id(proto_enc *e, proto_ids l)
{
    ENC_WR(e, PROTO_WR_MAX_LEN + PROTO_WR_ID * (size_t)l.n, ids, l.v, l.n);
}

#define PUT_U(e, v, arg) proto_put_u((e), (v))
#define PUT_I(e, v, arg) proto_put_i((e), (v))
#define PUT_ID(e, v, arg) proto_put_id((e), (v))
#define PUT_OPT_ID(e, v, arg) put_opt_id((e), (v))
#define PUT_BIN(e, v, arg) proto_put_bin((e), (v).ptr, (v).len)
#define PUT_OPT_BIN(e, v, arg) put_opt_bin((e), (v))
#define PUT_DATA(e, v, arg) put_data((e), (v))
#define PUT_STR(e, v, arg) put_str_max((e), (v), (arg))
#define PUT_REC(e, v, arg)                                                                         \
    do {                                                                                           \
        if ((v) != NULL)                                                                           \
            proto_put_##arg##_rec((e), (v));                                                       \
        else                                                                                       \
            proto_put_nil(e);                                                                      \
    } while (0)
#define PUT_RECS(e, v, arg) put_recs_##arg((e), &(v))
#define PUT_BATCH(e, v, arg) put_recs_##arg((e), &(v))
#define PUT_LIST_U(e, v, arg) put_list_u((e), (v))
#define PUT_LIST_ID(e, v, arg) put_list_id((e), (v))

/* The fields of one message or record m: every F field, then the N fields up to the first one
 * the sender omits. */
#define GROW_NONE(index, member, kind, arg)
#define GROW_NEW(index, member, kind, arg)                                                         \
    if (nf == (index) && !m->omit_##member)                                                        \
        nf++;
#define PUT_FIELD(index, member, kind, arg) PUT_##kind(e, m->member, arg);
#define PUT_FIELD_NEW(index, member, kind, arg)                                                    \
    if ((index) < nf)                                                                              \
        PUT_##kind(e, m->member, arg);
#define PUT_FIELDS(FIELDS)                                                                         \
    uint32_t nf = 0 FIELDS(COUNT_REQ, COUNT_NONE);                                                 \
    FIELDS(GROW_NONE, GROW_NEW)                                                                    \
    proto_put_arr(e, nf);                                                                          \
    FIELDS(PUT_FIELD, PUT_FIELD_NEW)

#define DECL_PUT_RECS(NAME, name)                                                                  \
    __attribute__((unused)) static void put_recs_##name(proto_enc *e, const proto_##name##_recs *r);
PROTO_SCHEMA(DECL_PUT_RECS, PROTO__NONE, PROTO__NONE, PROTO__NONE)

#define DEF_REC(NAME, name)                                                                        \
    void proto_put_##name##_rec(proto_enc *e, const proto_##name##_rec *m)                         \
    {                                                                                              \
        PUT_FIELDS(PROTO_REC_FIELDS_##NAME)                                                        \
    }                                                                                              \
    static void put_recs_##name(proto_enc *e, const proto_##name##_recs *r)                        \
    {                                                                                              \
        proto_put_arr(e, r->n);                                                                    \
        if (r->pre != NULL) {                                                                      \
            spw_buf_append(e->buf, r->pre->data, r->pre->len);                                     \
            return;                                                                                \
        }                                                                                          \
        for (uint32_t i = 0; i < r->n; i++) {                                                      \
            if (r->put != NULL)                                                                    \
                r->put(e, i, r->arg);                                                              \
            else                                                                                   \
                proto_put_##name##_rec(e, &r->v[i]);                                               \
        }                                                                                          \
    }
#define DEF_MSG(NAME, name)                                                                        \
    static void fields_##name(proto_enc *e, const proto_##name##_msg *m)                           \
    {                                                                                              \
        PUT_FIELDS(PROTO_FIELDS_##NAME)                                                            \
    }                                                                                              \
    void proto_enc_##name(proto_enc *e, spw_buf *buf, uint64_t req, const proto_##name##_msg *m)   \
    {                                                                                              \
        enc_head(e, buf, PROTO_##NAME, req);                                                       \
        fields_##name(e, m);                                                                       \
    }
#define DEF_MSG0(NAME, name)                                                                       \
    void proto_enc_##name(proto_enc *e, spw_buf *buf, uint64_t req)                                \
    {                                                                                              \
        enc_head(e, buf, PROTO_##NAME, req);                                                       \
        proto_put_arr(e, 0);                                                                       \
    }
#define DEF_ALIAS(NAME, name, OF, of)                                                              \
    void proto_enc_##name(proto_enc *e, spw_buf *buf, uint64_t req, const proto_##name##_msg *m)   \
    {                                                                                              \
        enc_head(e, buf, PROTO_##NAME, req);                                                       \
        fields_##of(e, m);                                                                         \
    }
PROTO_SCHEMA(DEF_REC, DEF_MSG, DEF_MSG0, DEF_ALIAS)

/* ------------------------------------------------------------ batched frames */

proto_enc *proto_batch_rec(proto_batch *b, spw_buf *buf, uint32_t type)
{
    if (b->n == 0) {
        enc_head(&b->e, buf, type, 0);
        proto_put_arr(&b->e, 1);
        /* The record array's header with a 32-bit count, patched when the frame closes. */
        b->arr_at = buf->len;
        static const uint8_t arr32[5] = {0xdd, 0, 0, 0, 0};
        spw_buf_append(buf, arr32, sizeof arr32);
        b->type = type;
    }
    b->rec_at = buf->len;
    b->n++;
    return &b->e;
}

bool proto_batch_full(const proto_batch *b)
{
    return b->n >= PROTO_BATCH_MAX_RECS || b->e.buf->len - b->e.start >= PROTO_BATCH_MAX_BYTES;
}

proto_enc *proto_batch_seal(proto_batch *b)
{
    uint8_t *h = b->e.buf->data + b->arr_at + 1;
    h[0] = (uint8_t)(b->n >> 24);
    h[1] = (uint8_t)(b->n >> 16);
    h[2] = (uint8_t)(b->n >> 8);
    h[3] = (uint8_t)b->n;
    b->n = 0;
    return &b->e;
}

int proto_batch_end(proto_batch *b, uint32_t max_frame)
{
    return b->n == 0 ? 0 : proto_enc_end(proto_batch_seal(b), max_frame);
}

/* ------------------------------------------------------ checking sent frames */

int proto_check_frames(const uint8_t *p, size_t len, uint32_t *type)
{
    proto_limits lim;
    proto_limits_default(&lim);
    lim.max_frame = UINT32_MAX;
    msgpack_zone zone;
    if (!msgpack_zone_init(&zone, 4096))
        return SPW_ENOMEM;
    int rc = 0;
    size_t at = 0;
    *type = 0;
    while (at < len) {
        proto_msg m;
        /* The type, for the message, even when the frame does not decode. */
        const uint8_t *b = p + at;
        *type = len - at > PROTO_HDR_LEN + 1 && b[PROTO_HDR_LEN] == 0x93 ? b[PROTO_HDR_LEN + 1] : 0;
        int n = proto_decode(b, len - at, &lim, &zone, &m);
        msgpack_zone_clear(&zone);
        if (n <= 0) {
            rc = n == 0 ? SPW_EMALFORMED : n; /* 0: the frame is cut short */
            break;
        }
        at += (size_t)n;
    }
    msgpack_zone_destroy(&zone);
    return rc;
}

void proto_assert_frames(const uint8_t *p, size_t len, const char *who)
{
    uint32_t type;
    int rc = proto_check_frames(p, len, &type);
    if (rc == 0)
        return;
    spw_log(SPW_LOG_ERR, "%s: about to send a frame that does not decode: type %u (%s): %s", who,
            type, proto_type_name(type), spw_strerror(rc));
    abort();
}

void proto_enc_errorf(spw_buf *buf, uint64_t req, int code, const char *fmt, ...)
{
    char msg[PROTO_MAX_STR];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (n < 0)
        msg[0] = '\0';
    proto_enc e;
    proto_enc_error(&e, buf, req, &(proto_error_msg){.code = code, .msg = msg});
    proto_enc_end(&e, UINT32_MAX);
}
