/*
 * Wire codec: message schemas, the pure frame decoder and the frame encoder.
 *
 * Decoding runs in three steps, each bounded: (1) the length prefix is checked against the
 * limit; (2) a structural scan walks the msgpack body without allocating, rejecting types we
 * never send (maps, floats, ext), nesting deeper than PROTO_MAX_DEPTH, containers that declare
 * more elements than bytes remain, and bodies with trailing bytes — this keeps msgpack-c from
 * reserving memory for counts a peer merely claims; (3) msgpack-c unpacks into the caller's zone
 * and the schema check turns the object tree into typed proto_val fields.
 * Nothing here keeps state between calls.
 */
#include "spillway/proto.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PROTO_MAX_DEPTH 8
#define PROTO_MAX_OBJECTS (4u << 20) /* msgpack objects in one frame */

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
                                                       "BROADCAST", "OUTPUT"};
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

typedef struct pschema {
    uint8_t nf;
    pfield f[PROTO_MAX_FIELDS];
    uint8_t nreq; /* fields a sender must send; later ones were added since (0 = all) */
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

#define REC_ROW(NAME, name)                                                                        \
    [REC_##name] = {PROTO_NF_REC_##NAME,                                                           \
                    {PROTO_REC_FIELDS_##NAME(ROW_FIELD, ROW_FIELD)},                               \
                    0 PROTO_REC_FIELDS_##NAME(COUNT_REQ, COUNT_NONE)},
static const pschema rec_schemas[REC_COUNT] = {
    PROTO_SCHEMA(REC_ROW, PROTO__NONE, PROTO__NONE, PROTO__NONE)};

#define MSG_ROW(NAME, name)                                                                        \
    static const pschema schema_##name = {PROTO_NF_##NAME,                                         \
                                          {PROTO_FIELDS_##NAME(ROW_FIELD, ROW_FIELD)},             \
                                          0 PROTO_FIELDS_##NAME(COUNT_REQ, COUNT_NONE)};
#define MSG0_ROW(NAME, name) static const pschema schema_##name = {0, {{0}}, 0};
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

    /* -------------------------------------------------------- structural scan */

    static inline uint64_t be_read(const uint8_t *p, int n)
{
    uint64_t v = 0;
    for (int i = 0; i < n; i++)
        v = (v << 8) | p[i];
    return v;
}

/* Walks exactly one msgpack object starting at buf. Returns the bytes it spans, or -1 if it is
 * malformed, truncated, of a kind we never send, too deep, or claims implausible counts. */
static int64_t scan_body(const uint8_t *buf, size_t len, uint32_t max_list)
{
    uint64_t pending[PROTO_MAX_DEPTH + 1]; /* elements still to read at each open level */
    int depth = 0;
    size_t pos = 0;
    uint64_t objects = 0;
    pending[0] = 1;
    while (depth >= 0) {
        if (pending[depth] == 0) {
            depth--;
            continue;
        }
        pending[depth]--;
        if (pos >= len || ++objects > PROTO_MAX_OBJECTS)
            return -1;
        uint8_t t = buf[pos++];
        uint64_t skip = 0;    /* payload bytes following the header */
        uint64_t nested = 0;  /* array elements */
        int hdr = 0;          /* length bytes following the type byte */
        bool is_array = false;
        if (t <= 0x7f || t >= 0xe0 || t == 0xc0 || t == 0xc2 || t == 0xc3) {
            /* fixint, nil, bool */
        } else if (t >= 0xa0 && t <= 0xbf) {
            skip = t & 0x1f;
        } else if (t >= 0x90 && t <= 0x9f) {
            is_array = true;
            nested = t & 0x0f;
        } else {
            switch (t) {
            case 0xcc: case 0xd0: skip = 1; break;
            case 0xcd: case 0xd1: skip = 2; break;
            case 0xce: case 0xd2: skip = 4; break;
            case 0xcf: case 0xd3: skip = 8; break;
            case 0xc4: case 0xd9: hdr = 1; break;
            case 0xc5: case 0xda: hdr = 2; break;
            case 0xc6: case 0xdb: hdr = 4; break;
            case 0xdc: hdr = 2; is_array = true; break;
            case 0xdd: hdr = 4; is_array = true; break;
            default:
                return -1; /* maps, floats, ext, never-used 0xc1 */
            }
            if (hdr > 0) {
                if (len - pos < (size_t)hdr)
                    return -1;
                uint64_t n = be_read(buf + pos, hdr);
                pos += (size_t)hdr;
                if (is_array)
                    nested = n;
                else
                    skip = n;
            }
        }
        if (skip > len - pos)
            return -1;
        pos += skip;
        if (is_array) {
            /* Every element takes at least one byte: a count beyond what remains is a lie. */
            if (nested > max_list || nested > len - pos)
                return -1;
            if (nested > 0) {
                if (depth == PROTO_MAX_DEPTH)
                    return -1;
                pending[++depth] = nested;
            }
        }
    }
    return (int64_t)pos;
}

/* ------------------------------------------------------------- schema check */

static int check_fields(const pschema *s, const msgpack_object *o, proto_val *out,
                        msgpack_zone *zone, const proto_limits *lim);
static int mark_bad(const pschema *s, const msgpack_object *o, proto_val *out, msgpack_zone *zone,
                    const proto_limits *lim);

static int check_scalar(uint8_t kind, const pfield *fd, const msgpack_object *o, proto_val *v)
{
    switch (kind) {
    case PF_U:
        if (o->type != MSGPACK_OBJECT_POSITIVE_INTEGER)
            return SPW_EMALFORMED;
        v->u = o->via.u64;
        return 0;
    case PF_I:
        if (o->type == MSGPACK_OBJECT_POSITIVE_INTEGER) {
            if (o->via.u64 > INT64_MAX)
                return SPW_EMALFORMED;
            v->i = (int64_t)o->via.u64;
        } else if (o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER) {
            v->i = o->via.i64;
        } else {
            return SPW_EMALFORMED;
        }
        return 0;
    case PF_BOOL:
        if (o->type != MSGPACK_OBJECT_BOOLEAN)
            return SPW_EMALFORMED;
        v->b = o->via.boolean;
        return 0;
    case PF_BIN:
    case PF_ID:
        if (o->type != MSGPACK_OBJECT_BIN || o->via.bin.size < fd->min ||
            o->via.bin.size > fd->max)
            return SPW_EMALFORMED;
        if (kind == PF_ID) {
            v->id = spw_id_from_bytes((const uint8_t *)o->via.bin.ptr);
        } else {
            v->bin.ptr = (const uint8_t *)o->via.bin.ptr;
            v->bin.len = o->via.bin.size;
        }
        return 0;
    case PF_STR:
        if (o->type != MSGPACK_OBJECT_STR || o->via.str.size > fd->max ||
            (o->via.str.size > 0 && memchr(o->via.str.ptr, '\0', o->via.str.size) != NULL))
            return SPW_EMALFORMED;
        v->bin.ptr = (const uint8_t *)o->via.str.ptr;
        v->bin.len = o->via.str.size;
        return 0;
    default:
        return SPW_EMALFORMED;
    }
}

static int check_value(const pfield *fd, const msgpack_object *o, proto_val *v,
                       msgpack_zone *zone, const proto_limits *lim)
{
    memset(v, 0, sizeof *v);
    if (o->type == MSGPACK_OBJECT_NIL) {
        if (!fd->opt)
            return SPW_EMALFORMED;
        v->nil = 1;
        return 0;
    }
    switch (fd->kind) {
    case PF_REC:
    case PF_RECS:
    case PF_LIST_U:
    case PF_LIST_ID: {
        if (o->type != MSGPACK_OBJECT_ARRAY)
            return SPW_EMALFORMED;
        const pschema *sub = fd->kind == PF_REC || fd->kind == PF_RECS ? &rec_schemas[fd->sub]
                                                                        : NULL;
        uint32_t n = fd->kind == PF_REC ? 1 : o->via.array.size;
        const msgpack_object *items = fd->kind == PF_REC ? o : o->via.array.ptr;
        if (fd->kind != PF_REC && (n > fd->max || n > lim->max_list || n < fd->min))
            return SPW_EMALFORMED;
        uint32_t nf = sub != NULL ? sub->nf : 1;
        /* Every item must be a record of the right arity before room for n * nf values is
         * taken: n zero bytes must not buy an allocation nf * 24 times their size. */
        if (sub != NULL && !fd->lenient) {
            uint32_t nreq = sub->nreq != 0 ? sub->nreq : sub->nf;
            for (uint32_t i = 0; i < n; i++)
                if (items[i].type != MSGPACK_OBJECT_ARRAY || items[i].via.array.size < nreq ||
                    items[i].via.array.size > nf)
                    return SPW_EMALFORMED;
        }
        proto_val *vals = NULL;
        if ((uint64_t)n * nf > 0) {
            vals = msgpack_zone_malloc(zone, (size_t)n * nf * sizeof(proto_val));
            if (vals == NULL)
                return SPW_ENOMEM;
        }
        for (uint32_t i = 0; i < n; i++) {
            int rc;
            if (sub != NULL) {
                rc = check_fields(sub, &items[i], vals + (size_t)i * nf, zone, lim);
                if (rc == SPW_EMALFORMED && fd->lenient)
                    rc = mark_bad(sub, &items[i], vals + (size_t)i * nf, zone, lim);
            } else {
                pfield efd = {fd->kind == PF_LIST_U ? PF_U : PF_ID, 0, 0, 16, 16, 0};
                memset(&vals[i], 0, sizeof vals[i]);
                rc = check_scalar(efd.kind, &efd, &items[i], &vals[i]);
            }
            if (rc != 0)
                return rc;
        }
        v->arr.v = vals;
        v->arr.n = n;
        v->arr.nf = nf;
        return 0;
    }
    default:
        return check_scalar(fd->kind, fd, o, v);
    }
}

/* A record of a BATCH array that does not match its kind: all fields nil, the first marked bad
 * and holding the record's first value when that one is right (a task id, to answer by). Every
 * item took at least one byte of the frame, so the n * nf values stay bounded. */
static int mark_bad(const pschema *s, const msgpack_object *o, proto_val *out, msgpack_zone *zone,
                    const proto_limits *lim)
{
    for (uint32_t i = 0; i < s->nf; i++) {
        memset(&out[i], 0, sizeof out[i]);
        out[i].nil = 1;
    }
    if (o->type == MSGPACK_OBJECT_ARRAY && o->via.array.size > 0) {
        int rc = check_value(&s->f[0], &o->via.array.ptr[0], &out[0], zone, lim);
        if (rc == SPW_ENOMEM)
            return rc;
        if (rc != 0) {
            memset(&out[0], 0, sizeof out[0]);
            out[0].nil = 1;
        }
    }
    out[0].bad = 1;
    return 0;
}

static int check_fields(const pschema *s, const msgpack_object *o, proto_val *out,
                        msgpack_zone *zone, const proto_limits *lim)
{
    uint32_t nreq = s->nreq != 0 ? s->nreq : s->nf;
    if (o->type != MSGPACK_OBJECT_ARRAY || o->via.array.size < nreq ||
        o->via.array.size > s->nf)
        return SPW_EMALFORMED;
    uint32_t n = o->via.array.size;
    for (uint32_t i = 0; i < s->nf; i++) {
        if (i >= n) {
            /* A field newer than the sender: absent, as if sent as nil. */
            memset(&out[i], 0, sizeof out[i]);
            out[i].nil = 1;
            continue;
        }
        int rc = check_value(&s->f[i], &o->via.array.ptr[i], &out[i], zone, lim);
        if (rc != 0)
            return rc;
    }
    return 0;
}

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
    int64_t span = scan_body(p, (size_t)body, lim->max_list);
    if (span != (int64_t)body)
        return SPW_EMALFORMED; /* malformed, or trailing bytes after the object */

    msgpack_object root;
    size_t off = 0;
    msgpack_unpack_return ur = msgpack_unpack((const char *)p, (size_t)body, &off, zone, &root);
    if (ur == MSGPACK_UNPACK_NOMEM_ERROR)
        return SPW_ENOMEM;
    if (ur != MSGPACK_UNPACK_SUCCESS || off != body)
        return SPW_EMALFORMED;
    if (root.type != MSGPACK_OBJECT_ARRAY || root.via.array.size != 3)
        return SPW_EMALFORMED;
    const msgpack_object *top = root.via.array.ptr;
    if (top[0].type != MSGPACK_OBJECT_POSITIVE_INTEGER || top[0].via.u64 >= PROTO_TYPE_MAX ||
        top[1].type != MSGPACK_OBJECT_POSITIVE_INTEGER)
        return SPW_EMALFORMED;
    uint32_t type = (uint32_t)top[0].via.u64;
    const pschema *s = msg_schemas[type];
    if (s == NULL)
        return SPW_EMALFORMED; /* unknown message type */
    proto_msg m;
    m.type = type;
    m.req = top[1].via.u64;
    m.nf = s->nf;
    int rc = check_fields(s, &top[2], m.f, zone, lim);
    if (rc != 0)
        return rc;
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

static int enc_write(void *data, const char *p, size_t len)
{
    spw_buf_append((spw_buf *)data, p, len);
    return 0;
}

static void enc_head(proto_enc *e, spw_buf *buf, uint32_t type, uint64_t req);

void proto_enc_begin(proto_enc *e, spw_buf *buf, uint32_t type, uint64_t req, uint32_t nfields)
{
    enc_head(e, buf, type, req);
    msgpack_pack_array(&e->pk, nfields);
}

void proto_enc_raw(proto_enc *e, spw_buf *buf)
{
    e->buf = buf;
    e->start = buf->len;
    msgpack_packer_init(&e->pk, buf, enc_write);
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
    msgpack_pack_uint64(&e->pk, v);
}

void proto_put_i(proto_enc *e, int64_t v)
{
    msgpack_pack_int64(&e->pk, v);
}

void proto_put_bool(proto_enc *e, bool v)
{
    if (v)
        msgpack_pack_true(&e->pk);
    else
        msgpack_pack_false(&e->pk);
}

void proto_put_nil(proto_enc *e)
{
    msgpack_pack_nil(&e->pk);
}

void proto_put_id(proto_enc *e, spw_id id)
{
    uint8_t b[16];
    spw_id_to_bytes(id, b);
    msgpack_pack_bin(&e->pk, 16);
    msgpack_pack_bin_body(&e->pk, b, 16);
}

void proto_put_bin(proto_enc *e, const void *p, size_t len)
{
    msgpack_pack_bin(&e->pk, len);
    if (len > 0)
        msgpack_pack_bin_body(&e->pk, p, len);
}

void proto_put_bin_hdr(proto_enc *e, size_t len)
{
    msgpack_pack_bin(&e->pk, len);
}

void proto_put_str(proto_enc *e, const char *s)
{
    proto_put_strn(e, s, strlen(s));
}

void proto_put_strn(proto_enc *e, const char *s, size_t len)
{
    msgpack_pack_str(&e->pk, len);
    if (len > 0)
        msgpack_pack_str_body(&e->pk, s, len);
}

void proto_put_arr(proto_enc *e, uint32_t n)
{
    msgpack_pack_array(&e->pk, n);
}

/* ------------------------------------------------------------ typed builders */

/* Begins a frame: the length prefix (patched by proto_enc_end), type and request id; the
 * field array follows. */
static void enc_head(proto_enc *e, spw_buf *buf, uint32_t type, uint64_t req)
{
    e->buf = buf;
    e->start = buf->len;
    static const uint8_t zero[PROTO_HDR_LEN] = {0};
    spw_buf_append(buf, zero, sizeof zero);
    msgpack_packer_init(&e->pk, buf, enc_write);
    msgpack_pack_array(&e->pk, 3);
    msgpack_pack_uint32(&e->pk, type);
    msgpack_pack_uint64(&e->pk, req);
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
    if (b.ptr != NULL && b.len > 0)
        msgpack_pack_bin_body(&e->pk, b.ptr, b.len);
}

/* A string field: NULL is "", and one longer than the schema allows is cut to its limit, so a
 * name from configuration can never make a frame the peer refuses. */
static void put_str_max(proto_enc *e, const char *s, size_t max)
{
    if (s == NULL)
        s = "";
    proto_put_strn(e, s, strnlen(s, max));
}

static void put_list_u(proto_enc *e, proto_u64s l)
{
    proto_put_arr(e, l.n);
    for (uint32_t i = 0; i < l.n; i++)
        proto_put_u(e, l.v[i]);
}

static void put_list_id(proto_enc *e, proto_ids l)
{
    proto_put_arr(e, l.n);
    for (uint32_t i = 0; i < l.n; i++)
        proto_put_id(e, l.v[i]);
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
