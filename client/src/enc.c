/*
 * libspillway: a graph's task records, encoded straight into its buffer.
 *
 * proto_put_task_rec checks (and may grow) the buffer's room once per value it writes. Here
 * the record's room is reserved once (an upper bound) and its bytes are stored with no call
 * and no check per element, by the same writers (spillway/proto_wr.h) that proto_put_* use.
 * The fields come from the same schema macros (PROTO_REC_FIELDS_TASK, PROTO_REC_FIELDS_ARG)
 * in the same order, with the same rules for optional fields, so the bytes are identical to
 * proto's encoders' (test_client checks it over many records); a field kind the schema gains
 * and this file lacks fails to compile.
 */
#include <string.h>

#include "client_int.h"
#include "spillway/proto_wr.h"

/* Writers and room (upper bounds, in bytes) of each field kind the records and messages
 * written here use. */
#define W_U(p, v, arg) proto_wr_uint((p), (v))
#define W_ID(p, v, arg) proto_wr_id((p), (v))
#define W_OPT_ID(p, v, arg) ((v) != NULL ? proto_wr_id((p), *(v)) : proto_wr_nil(p))
#define W_OPT_BIN(p, v, arg)                                                                       \
    ((v).ptr != NULL ? proto_wr_bin((p), (v).ptr, (v).len) : proto_wr_nil(p))
#define W_STR(p, v, arg) proto_wr_str_max((p), (v), (arg))
#define W_RECS(p, v, arg) w_recs_##arg((p), &(v))
#define ROOM_U(v, arg) PROTO_WR_MAX_HDR
#define ROOM_ID(v, arg) PROTO_WR_ID
#define ROOM_OPT_ID(v, arg) PROTO_WR_ID
#define ROOM_OPT_BIN(v, arg) (PROTO_WR_MAX_LEN + (v).len)
#define ROOM_STR(v, arg) (PROTO_WR_MAX_LEN + (size_t)(arg))
#define ROOM_RECS(v, arg) room_recs_##arg(&(v))

/* The fields of a record: every F field, then the N fields up to the first one omitted
 * (codec.c's PUT_FIELDS). */
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
        return PROTO_WR_MAX_LEN FIELDS(ROOM_F, ROOM_N);                                            \
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
        return w_fields_##name(proto_wr_arr(p, nf), m, nf);                                        \
    }                                                                                              \
    __attribute__((unused)) static size_t room_recs_##name(const proto_##name##_recs *r)           \
    {                                                                                              \
        size_t n = PROTO_WR_MAX_LEN;                                                               \
        for (uint32_t i = 0; i < r->n; i++)                                                        \
            n += room_##name(&r->v[i]);                                                            \
        return n;                                                                                  \
    }                                                                                              \
    __attribute__((unused)) static uint8_t *w_recs_##name(uint8_t *p,                              \
                                                          const proto_##name##_recs *r)            \
    {                                                                                              \
        p = proto_wr_arr(p, r->n);                                                                 \
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

void spillway__put_task_rec(spw_buf *out, const proto_task_rec *r)
{
    SPW_ASSERT(r->args.put == NULL && r->args.pre == NULL);
    uint8_t *end = w_task(room_at_end(out, room_task(r)), r);
    out->len = (size_t)(end - out->data);
    SPW_ASSERT(out->len <= out->cap);
}
