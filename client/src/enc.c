/*
 * libspillway: a graph's task records, encoded straight into the graph's buffer.
 *
 * proto_put_task_rec writes through msgpack-c's packer, whose every element (a header, an id,
 * a string) is a call of the packer's callback, which appends to an spw_buf after checking its
 * room: ~1,350 instructions per noop task, three quarters of the client's cost of adding a
 * task in scale_tiny. Here the record's room is reserved once (an upper bound) and its bytes
 * are stored with no call and no check per element. The fields come from the same schema
 * macros (PROTO_REC_FIELDS_TASK, PROTO_REC_FIELDS_ARG) in the same order, with the same rules
 * for optional fields, so the bytes are identical to proto_put_task_rec's (test_client checks
 * it over many records); a field kind the schema gains and this file lacks fails to compile.
 */
#include <string.h>

#include "client_int.h"

/* A cursor into room reserved beforehand. */
typedef struct rec_w {
    uint8_t *p;
} rec_w;

static inline void w_be(rec_w *w, uint8_t tag, uint64_t v, int bytes)
{
    *w->p++ = tag;
    for (int i = bytes - 1; i >= 0; i--)
        *w->p++ = (uint8_t)(v >> (8 * i));
}

/* msgpack's smallest forms, as msgpack-c's packers choose them. */
static inline void w_uint(rec_w *w, uint64_t v)
{
    if (v < 128)
        *w->p++ = (uint8_t)v;
    else if (v < 256)
        w_be(w, 0xcc, v, 1);
    else if (v < 65536)
        w_be(w, 0xcd, v, 2);
    else if (v <= UINT32_MAX)
        w_be(w, 0xce, v, 4);
    else
        w_be(w, 0xcf, v, 8);
}

static inline void w_arr(rec_w *w, uint32_t n)
{
    if (n < 16)
        *w->p++ = (uint8_t)(0x90 | n);
    else if (n < 65536)
        w_be(w, 0xdc, n, 2);
    else
        w_be(w, 0xdd, n, 4);
}

static inline void w_nil(rec_w *w)
{
    *w->p++ = 0xc0;
}

static inline void w_body(rec_w *w, const void *p, size_t n)
{
    if (n > 0)
        memcpy(w->p, p, n);
    w->p += n;
}

static inline void w_bin(rec_w *w, const void *p, size_t n)
{
    if (n < 256)
        w_be(w, 0xc4, n, 1);
    else if (n < 65536)
        w_be(w, 0xc5, n, 2);
    else
        w_be(w, 0xc6, n, 4);
    w_body(w, p, n);
}

/* A string field: NULL is "", one longer than max is cut to max (as proto's put_str_max). */
static inline void w_str(rec_w *w, const char *s, size_t max)
{
    size_t n = s != NULL ? strnlen(s, max) : 0;
    if (n < 32)
        *w->p++ = (uint8_t)(0xa0 | n);
    else if (n < 256)
        w_be(w, 0xd9, n, 1);
    else if (n < 65536)
        w_be(w, 0xda, n, 2);
    else
        w_be(w, 0xdb, n, 4);
    w_body(w, s, n);
}

static inline void w_id(rec_w *w, spw_id id)
{
    *w->p++ = 0xc4;
    *w->p++ = 16;
    for (int i = 7; i >= 0; i--)
        *w->p++ = (uint8_t)(id.hi >> (8 * i));
    for (int i = 7; i >= 0; i--)
        *w->p++ = (uint8_t)(id.lo >> (8 * i));
}

/* Writers and room (upper bounds, in bytes) of each field kind the two records use. */
#define W_U(w, v, arg) w_uint((w), (v))
#define W_ID(w, v, arg) w_id((w), (v))
#define W_OPT_ID(w, v, arg) ((v) != NULL ? w_id((w), *(v)) : w_nil(w))
#define W_OPT_BIN(w, v, arg) ((v).ptr != NULL ? w_bin((w), (v).ptr, (v).len) : w_nil(w))
#define W_STR(w, v, arg) w_str((w), (v), (arg))
#define W_RECS(w, v, arg) w_recs_##arg((w), &(v))
#define ROOM_U(v, arg) 9
#define ROOM_ID(v, arg) 18
#define ROOM_OPT_ID(v, arg) 18
#define ROOM_OPT_BIN(v, arg) (5 + (v).len)
#define ROOM_STR(v, arg) (5 + (size_t)(arg))
#define ROOM_RECS(v, arg) room_recs_##arg(&(v))

/* A record's fields: every F field, then the N fields up to the first one omitted (proto.c's
 * PUT_FIELDS). */
#define COUNT_F(index, member, kind, arg) +1
#define COUNT_N(index, member, kind, arg)
#define GROW_F(index, member, kind, arg)
#define GROW_N(index, member, kind, arg)                                                           \
    if (nf == (index) && !m->omit_##member)                                                        \
        nf++;
#define WRITE_F(index, member, kind, arg) W_##kind(w, m->member, arg);
#define WRITE_N(index, member, kind, arg)                                                          \
    if ((index) < nf)                                                                              \
        W_##kind(w, m->member, arg);
#define ROOM_F(index, member, kind, arg) +ROOM_##kind(m->member, arg)
#define ROOM_N(index, member, kind, arg) ROOM_F(index, member, kind, arg)

#define DEF_REC_WRITER(name, FIELDS)                                                               \
    static size_t room_##name(const proto_##name##_rec *m)                                         \
    {                                                                                              \
        return 5 FIELDS(ROOM_F, ROOM_N);                                                           \
    }                                                                                              \
    static void w_##name(rec_w *w, const proto_##name##_rec *m)                                    \
    {                                                                                              \
        uint32_t nf = 0 FIELDS(COUNT_F, COUNT_N);                                                  \
        FIELDS(GROW_F, GROW_N)                                                                     \
        w_arr(w, nf);                                                                              \
        FIELDS(WRITE_F, WRITE_N)                                                                   \
    }                                                                                              \
    __attribute__((unused)) static size_t room_recs_##name(const proto_##name##_recs *r)           \
    {                                                                                              \
        size_t n = 5;                                                                              \
        for (uint32_t i = 0; i < r->n; i++)                                                        \
            n += room_##name(&r->v[i]);                                                            \
        return n;                                                                                  \
    }                                                                                              \
    __attribute__((unused)) static void w_recs_##name(rec_w *w, const proto_##name##_recs *r)      \
    {                                                                                              \
        w_arr(w, r->n);                                                                            \
        for (uint32_t i = 0; i < r->n; i++)                                                        \
            w_##name(w, &r->v[i]);                                                                 \
    }

DEF_REC_WRITER(arg, PROTO_REC_FIELDS_ARG)
DEF_REC_WRITER(task, PROTO_REC_FIELDS_TASK)

void spillway__put_task_rec(spw_buf *out, const proto_task_rec *r)
{
    SPW_ASSERT(r->args.put == NULL && r->args.pre == NULL);
    size_t room = room_task(r);
    if (spw_buf_reserve(out, room) != 0)
        SPW_PANIC("out of memory growing a graph by %zu bytes", room);
    rec_w w = {out->data + out->len};
    w_task(&w, r);
    out->len = (size_t)(w.p - out->data);
    SPW_ASSERT(out->len <= out->cap);
}
