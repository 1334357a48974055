/*
 * libspillway: a graph's task records and the RELEASE frames, encoded straight into their
 * buffers.
 *
 * proto_put_task_rec writes through msgpack-c's packer, whose every element (a header, an id,
 * a string) is a call of the packer's callback, which appends to an spw_buf after checking its
 * room: ~1,350 instructions per noop task, three quarters of the client's cost of adding a
 * task in scale_tiny. Here the record's room is reserved once (an upper bound) and its bytes
 * are stored with no call and no check per element. The fields come from the same schema
 * macros (PROTO_REC_FIELDS_TASK, PROTO_REC_FIELDS_ARG, PROTO_FIELDS_RELEASE) in the same
 * order, with the same rules for optional fields, so the bytes are identical to proto's
 * encoders' (test_client checks it over many records and id lists); a field kind the schema
 * gains and this file lacks fails to compile. A release of a million references spent ~220
 * instructions per id in proto_put_id's callbacks.
 */
#include <string.h>

#include "client_int.h"

/* Each writer stores at p, in room reserved beforehand, and returns the end of what it
 * wrote (a local cursor, which the compiler keeps in a register). */
static inline uint8_t *w_be(uint8_t *p, uint8_t tag, uint64_t v, int bytes)
{
    *p++ = tag;
    for (int i = bytes - 1; i >= 0; i--)
        *p++ = (uint8_t)(v >> (8 * i));
    return p;
}

/* msgpack's smallest forms, as msgpack-c's packers choose them. */
static inline uint8_t *w_uint(uint8_t *p, uint64_t v)
{
    if (v < 128) {
        *p = (uint8_t)v;
        return p + 1;
    }
    if (v < 256)
        return w_be(p, 0xcc, v, 1);
    if (v < 65536)
        return w_be(p, 0xcd, v, 2);
    if (v <= UINT32_MAX)
        return w_be(p, 0xce, v, 4);
    return w_be(p, 0xcf, v, 8);
}

static inline uint8_t *w_arr(uint8_t *p, uint32_t n)
{
    if (n < 16) {
        *p = (uint8_t)(0x90 | n);
        return p + 1;
    }
    return n < 65536 ? w_be(p, 0xdc, n, 2) : w_be(p, 0xdd, n, 4);
}

static inline uint8_t *w_nil(uint8_t *p)
{
    *p = 0xc0;
    return p + 1;
}

static inline uint8_t *w_body(uint8_t *p, const void *s, size_t n)
{
    if (n > 0)
        memcpy(p, s, n);
    return p + n;
}

static inline uint8_t *w_bin(uint8_t *p, const void *s, size_t n)
{
    if (n < 256)
        p = w_be(p, 0xc4, n, 1);
    else if (n < 65536)
        p = w_be(p, 0xc5, n, 2);
    else
        p = w_be(p, 0xc6, n, 4);
    return w_body(p, s, n);
}

/* A string field: NULL is "", one longer than max is cut to max (as proto's put_str_max). */
static inline uint8_t *w_str(uint8_t *p, const char *s, size_t max)
{
    size_t n = s != NULL ? strnlen(s, max) : 0;
    if (n < 32)
        *p++ = (uint8_t)(0xa0 | n);
    else if (n < 256)
        p = w_be(p, 0xd9, n, 1);
    else if (n < 65536)
        p = w_be(p, 0xda, n, 2);
    else
        p = w_be(p, 0xdb, n, 4);
    return w_body(p, s, n);
}

/* 16 bytes, big-endian halves (spw_id_to_bytes). */
static inline uint8_t *w_id(uint8_t *p, spw_id id)
{
    uint64_t be[2] = {__builtin_bswap64(id.hi), __builtin_bswap64(id.lo)};
    p[0] = 0xc4;
    p[1] = 16;
    memcpy(p + 2, be, 16);
    return p + 18;
}

/* A list of ids (proto.c's put_list_id). */
static inline uint8_t *w_list_id(uint8_t *p, proto_ids l)
{
    p = w_arr(p, l.n);
    for (uint32_t i = 0; i < l.n; i++)
        p = w_id(p, l.v[i]);
    return p;
}

/* Writers and room (upper bounds, in bytes) of each field kind the records and messages
 * written here use. */
#define W_U(p, v, arg) w_uint((p), (v))
#define W_ID(p, v, arg) w_id((p), (v))
#define W_OPT_ID(p, v, arg) ((v) != NULL ? w_id((p), *(v)) : w_nil(p))
#define W_OPT_BIN(p, v, arg) ((v).ptr != NULL ? w_bin((p), (v).ptr, (v).len) : w_nil(p))
#define W_STR(p, v, arg) w_str((p), (v), (arg))
#define W_RECS(p, v, arg) w_recs_##arg((p), &(v))
#define W_LIST_ID(p, v, arg) w_list_id((p), (v))
#define ROOM_U(v, arg) 9
#define ROOM_ID(v, arg) 18
#define ROOM_OPT_ID(v, arg) 18
#define ROOM_OPT_BIN(v, arg) (5 + (v).len)
#define ROOM_STR(v, arg) (5 + (size_t)(arg))
#define ROOM_RECS(v, arg) room_recs_##arg(&(v))
#define ROOM_LIST_ID(v, arg) (5 + 18 * (size_t)(v).n)

/* The fields of a record or message: every F field, then the N fields up to the first one
 * omitted (proto.c's PUT_FIELDS). */
#define COUNT_F(index, member, kind, arg) +1
#define COUNT_N(index, member, kind, arg)
#define GROW_F(index, member, kind, arg)
#define GROW_N(index, member, kind, arg)                                                           \
    if (nf == (index) && !m->omit_##member)                                                        \
        nf++;
#define WRITE_F(index, member, kind, arg) p = W_##kind(p, m->member, arg);
#define WRITE_N(index, member, kind, arg)                                                          \
    if ((index) < nf)                                                                              \
        p = W_##kind(p, m->member, arg);
#define ROOM_F(index, member, kind, arg) +ROOM_##kind(m->member, arg)
#define ROOM_N(index, member, kind, arg) ROOM_F(index, member, kind, arg)

/* room_NAME: the fields' room with their array header; nf_NAME: how many are sent;
 * w_fields_NAME: writes them (the array header is the caller's). */
#define DEF_FIELDS(name, type, FIELDS)                                                             \
    static size_t room_##name(const type *m)                                                       \
    {                                                                                              \
        return 5 FIELDS(ROOM_F, ROOM_N);                                                           \
    }                                                                                              \
    static uint32_t nf_##name(const type *m)                                                       \
    {                                                                                              \
        (void)m;                                                                                   \
        uint32_t nf = 0 FIELDS(COUNT_F, COUNT_N);                                                  \
        FIELDS(GROW_F, GROW_N)                                                                     \
        return nf;                                                                                 \
    }                                                                                              \
    static uint8_t *w_fields_##name(uint8_t *p, const type *m, uint32_t nf)                        \
    {                                                                                              \
        (void)nf;                                                                                  \
        FIELDS(WRITE_F, WRITE_N)                                                                   \
        return p;                                                                                  \
    }

#define DEF_REC_WRITER(name, FIELDS)                                                               \
    DEF_FIELDS(name, proto_##name##_rec, FIELDS)                                                   \
    static uint8_t *w_##name(uint8_t *p, const proto_##name##_rec *m)                              \
    {                                                                                              \
        uint32_t nf = nf_##name(m);                                                                \
        return w_fields_##name(w_arr(p, nf), m, nf);                                               \
    }                                                                                              \
    __attribute__((unused)) static size_t room_recs_##name(const proto_##name##_recs *r)           \
    {                                                                                              \
        size_t n = 5;                                                                              \
        for (uint32_t i = 0; i < r->n; i++)                                                        \
            n += room_##name(&r->v[i]);                                                            \
        return n;                                                                                  \
    }                                                                                              \
    __attribute__((unused)) static uint8_t *w_recs_##name(uint8_t *p,                              \
                                                          const proto_##name##_recs *r)            \
    {                                                                                              \
        p = w_arr(p, r->n);                                                                        \
        for (uint32_t i = 0; i < r->n; i++)                                                        \
            p = w_##name(p, &r->v[i]);                                                             \
        return p;                                                                                  \
    }

/* Reserves room bytes at the end of out and returns where they start. */
static uint8_t *room_at_end(spw_buf *out, size_t room)
{
    if (spw_buf_reserve(out, room) != 0)
        SPW_PANIC("out of memory growing a buffer by %zu bytes", room);
    return out->data + out->len;
}

DEF_REC_WRITER(arg, PROTO_REC_FIELDS_ARG)
DEF_REC_WRITER(task, PROTO_REC_FIELDS_TASK)
DEF_FIELDS(release, proto_release_msg, PROTO_FIELDS_RELEASE)

void spillway__put_task_rec(spw_buf *out, const proto_task_rec *r)
{
    SPW_ASSERT(r->args.put == NULL && r->args.pre == NULL);
    uint8_t *end = w_task(room_at_end(out, room_task(r)), r);
    out->len = (size_t)(end - out->data);
    SPW_ASSERT(out->len <= out->cap);
}

void spillway__enc_release(proto_enc *e, spw_buf *out, uint64_t req, const proto_release_msg *m)
{
    uint32_t nf = nf_release(m);
    proto_enc_begin(e, out, PROTO_RELEASE, req, nf); /* the frame's head and field array */
    uint8_t *end = w_fields_release(room_at_end(out, room_release(m)), m, nf);
    out->len = (size_t)(end - out->data);
    SPW_ASSERT(out->len <= out->cap);
}
