/* Unit tests for the typed builders generated from the schema (proto_schema.h): every message
 * type's production encoder, filled with distinct values by a filler generated from the same
 * table, must decode with proto_decode to exactly those values, field by field; and every type
 * of PROTO_MSG_MAP must have been covered. Also: fields a sender omits, the three ways to give
 * an array of records, strings cut to their limit, borrowed payloads, the sent-frame check, and
 * values written in exactly msgpack-c's forms. */
#include "spillway/proto.h"
#include "spillway/utf8.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test_main.h"

/* ------------------------------------------------------------------- filler */

/* Distinct values for every field, and the memory behind pointers (freed by filler_free). */
typedef struct filler {
    uint64_t next;
    void *blocks[4096];
    size_t nblocks;
} filler;

static uint64_t nextv(filler *f)
{
    return ++f->next * 7919u;
}

static void *falloc(filler *f, size_t n)
{
    assert_true(f->nblocks < sizeof f->blocks / sizeof f->blocks[0]);
    void *p = calloc(1, n > 0 ? n : 1);
    assert_non_null(p);
    f->blocks[f->nblocks++] = p;
    return p;
}

static void filler_free(filler *f)
{
    for (size_t i = 0; i < f->nblocks; i++)
        free(f->blocks[i]);
    f->nblocks = 0;
}

static proto_bytes fill_bytes(filler *f, size_t n)
{
    uint8_t *p = falloc(f, n);
    for (size_t i = 0; i < n; i++)
        p[i] = (uint8_t)nextv(f);
    return (proto_bytes){p, n};
}

#define RECS_N 2 /* records in each array */
#define LIST_N 3 /* values in a list, unless its minimum is more */

/* One fill statement per kind: v is the member, arg the kind's argument. Optional values
 * alternate between present and nil. */
#define FILL_U(dst_, arg) (dst_) = nextv(f)
#define FILL_I(dst_, arg) (dst_) = -(int64_t)nextv(f)
#define FILL_ID(dst_, arg)                                                                         \
    (dst_) = (spw_id)                                                                              \
    {                                                                                              \
        nextv(f), nextv(f)                                                                         \
    }
#define FILL_OPT_ID(dst_, arg)                                                                     \
    do {                                                                                           \
        if (nextv(f) & 8) {                                                                        \
            spw_id *id = falloc(f, sizeof *id);                                                    \
            *id = (spw_id){nextv(f), nextv(f)};                                                    \
            (dst_) = id;                                                                           \
        }                                                                                          \
    } while (0)
#define FILL_BIN(dst_, arg) (dst_) = fill_bytes(f, (arg))
#define FILL_OPT_BIN(dst_, arg)                                                                    \
    do {                                                                                           \
        if (nextv(f) & 8)                                                                          \
            (dst_) = fill_bytes(f, nextv(f) % 5);                                                  \
    } while (0)
#define FILL_DATA(dst_, arg) (dst_) = fill_bytes(f, 1 + nextv(f) % 9)
#define FILL_STR(dst_, arg)                                                                        \
    do {                                                                                           \
        char *s = falloc(f, 32);                                                                   \
        snprintf(s, 32, "s%llu", (unsigned long long)nextv(f));                                    \
        (dst_) = s;                                                                                \
    } while (0)
#define FILL_REC(dst_, arg)                                                                        \
    do {                                                                                           \
        if (nextv(f) & 8) {                                                                        \
            proto_##arg##_rec *r = falloc(f, sizeof *r);                                           \
            fill_##arg##_rec(f, r);                                                                \
            (dst_) = r;                                                                            \
        }                                                                                          \
    } while (0)
#define FILL_RECS(dst_, arg)                                                                       \
    do {                                                                                           \
        proto_##arg##_rec *r = falloc(f, RECS_N * sizeof *r);                                      \
        for (int k = 0; k < RECS_N; k++)                                                           \
            fill_##arg##_rec(f, &r[k]);                                                            \
        (dst_) = (proto_##arg##_recs){.n = RECS_N, .v = r};                                        \
    } while (0)
#define FILL_BATCH FILL_RECS
#define FILL_LIST_U(dst_, arg)                                                                     \
    do {                                                                                           \
        uint32_t n = (arg) > LIST_N ? (arg) : LIST_N;                                              \
        uint64_t *l = falloc(f, n * sizeof *l);                                                    \
        for (uint32_t k = 0; k < n; k++)                                                           \
            l[k] = nextv(f);                                                                       \
        (dst_) = (proto_u64s){l, n};                                                               \
    } while (0)
#define FILL_LIST_ID(dst_, arg)                                                                    \
    do {                                                                                           \
        spw_id *l = falloc(f, LIST_N * sizeof *l);                                                 \
        for (uint32_t k = 0; k < LIST_N; k++)                                                      \
            l[k] = (spw_id){nextv(f), nextv(f)};                                                   \
        (dst_) = (proto_ids){l, LIST_N};                                                           \
    } while (0)
#define FILL_FIELD(index, member, kind, arg) FILL_##kind(m->member, arg);

#define DECL_FILL_REC(NAME, name) static void fill_##name##_rec(filler *f, proto_##name##_rec *m);
PROTO_SCHEMA(DECL_FILL_REC, PROTO__NONE, PROTO__NONE, PROTO__NONE)
#define DEF_FILL_REC(NAME, name)                                                                   \
    static void fill_##name##_rec(filler *f, proto_##name##_rec *m)                                \
    {                                                                                              \
        memset(m, 0, sizeof *m);                                                                   \
        PROTO_REC_FIELDS_##NAME(FILL_FIELD, FILL_FIELD)                                            \
    }
#define DEF_FILL_MSG(NAME, name)                                                                   \
    static void fill_##name(filler *f, proto_##name##_msg *m)                                      \
    {                                                                                              \
        memset(m, 0, sizeof *m);                                                                   \
        PROTO_FIELDS_##NAME(FILL_FIELD, FILL_FIELD)                                                \
    }
PROTO_SCHEMA(DEF_FILL_REC, DEF_FILL_MSG, PROTO__NONE, PROTO__NONE)

/* ------------------------------------------------------------------ checker */

/* Fails naming the message or record, the field and what differs. */
#define CHECK(cond, member)                                                                        \
    do {                                                                                           \
        if (!(cond))                                                                               \
            fail_msg("%s.%s: decoded value differs from the encoded one (%s)", what, #member,      \
                     #cond);                                                                       \
    } while (0)

static bool bytes_eq(const proto_val *v, const void *p, size_t n)
{
    return v->bin.len == n && (n == 0 || memcmp(v->bin.ptr, p, n) == 0);
}

#define CHK_U(dst_, src_, member, arg) CHECK(!(dst_)->nil && (dst_)->u == (src_), member)
#define CHK_I(dst_, src_, member, arg) CHECK(!(dst_)->nil && (dst_)->i == (src_), member)
#define CHK_ID(dst_, src_, member, arg) CHECK(!(dst_)->nil && spw_id_eq((dst_)->id, (src_)), member)
#define CHK_OPT_ID(dst_, src_, member, arg)                                                        \
    CHECK((src_) == NULL ? (dst_)->nil : !(dst_)->nil && spw_id_eq((dst_)->id, *(src_)), member)
#define CHK_BIN(dst_, src_, member, arg)                                                           \
    CHECK(!(dst_)->nil && bytes_eq((dst_), (src_).ptr, (src_).len), member)
#define CHK_OPT_BIN(dst_, src_, member, arg)                                                       \
    CHECK((src_).ptr == NULL ? (dst_)->nil                                                         \
                             : !(dst_)->nil && bytes_eq((dst_), (src_).ptr, (src_).len),           \
          member)
#define CHK_DATA(dst_, src_, member, arg) CHK_BIN(dst_, src_, member, arg)
#define CHK_STR(dst_, src_, member, arg)                                                           \
    CHECK(!(dst_)->nil && bytes_eq((dst_), (src_), strlen(src_)), member)
#define CHK_REC(dst_, src_, member, arg)                                                           \
    do {                                                                                           \
        CHECK((src_) == NULL ? (dst_)->nil : !(dst_)->nil && (dst_)->arr.n == 1, member);          \
        if ((src_) != NULL)                                                                        \
            check_##arg##_rec(PROTO_REC((dst_), 0), (src_));                                       \
    } while (0)
#define CHK_RECS(dst_, src_, member, arg)                                                          \
    do {                                                                                           \
        CHECK(!(dst_)->nil && (dst_)->arr.n == (src_).n, member);                                  \
        for (uint32_t k = 0; k < (src_).n; k++)                                                    \
            check_##arg##_rec(PROTO_REC((dst_), k), &(src_).v[k]);                                 \
    } while (0)
#define CHK_BATCH CHK_RECS
#define CHK_LIST_U(dst_, src_, member, arg)                                                        \
    do {                                                                                           \
        CHECK(!(dst_)->nil && (dst_)->arr.n == (src_).n, member);                                  \
        for (uint32_t k = 0; k < (src_).n; k++)                                                    \
            CHECK((dst_)->arr.v[k].u == (src_).v[k], member);                                      \
    } while (0)
#define CHK_LIST_ID(dst_, src_, member, arg)                                                       \
    do {                                                                                           \
        CHECK(!(dst_)->nil && (dst_)->arr.n == (src_).n, member);                                  \
        for (uint32_t k = 0; k < (src_).n; k++)                                                    \
            CHECK(spw_id_eq((dst_)->arr.v[k].id, (src_).v[k]), member);                            \
    } while (0)
#define CHK_FIELD(index, member, kind, arg) CHK_##kind(&f[index], m->member, member, arg);

#define DECL_CHECK_REC(NAME, name)                                                                 \
    static void check_##name##_rec(const proto_val *f, const proto_##name##_rec *m);
PROTO_SCHEMA(DECL_CHECK_REC, PROTO__NONE, PROTO__NONE, PROTO__NONE)
#define DEF_CHECK_REC(NAME, name)                                                                  \
    static void check_##name##_rec(const proto_val *f, const proto_##name##_rec *m)                \
    {                                                                                              \
        const char *what = "record " #NAME;                                                        \
        PROTO_REC_FIELDS_##NAME(CHK_FIELD, CHK_FIELD)                                              \
    }
#define DEF_CHECK_MSG(NAME, name)                                                                  \
    static void check_##name(const proto_val *f, const proto_##name##_msg *m)                      \
    {                                                                                              \
        const char *what = #NAME;                                                                  \
        PROTO_FIELDS_##NAME(CHK_FIELD, CHK_FIELD)                                                  \
    }
PROTO_SCHEMA(DEF_CHECK_REC, DEF_CHECK_MSG, PROTO__NONE, PROTO__NONE)

/* ------------------------------------------------------------------- tests */

/* Decodes the one frame in b (which must fill it exactly) into m. */
static void decode_one(const spw_buf *b, msgpack_zone *z, proto_msg *m, uint32_t type)
{
    proto_limits lim;
    proto_limits_default(&lim);
    int rc = proto_decode(b->data, b->len, &lim, z, m);
    if (rc != (int)b->len)
        fail_msg("%s: proto_decode returned %d for a frame of %zu bytes (%s)",
                 proto_type_name(type), rc, b->len, rc < 0 ? spw_strerror(rc) : "short");
    assert_int_equal(m->type, type);
}

static void every_production_encoder_round_trips(void **state)
{
    (void)state;
    bool seen[PROTO_TYPE_MAX] = {false};
    msgpack_zone z;
    assert_true(msgpack_zone_init(&z, 4096));
    filler f = {0};
    uint64_t req = 1000;
#define RUN_MSG(NAME, name)                                                                        \
    {                                                                                              \
        proto_##name##_msg msg;                                                                    \
        fill_##name(&f, &msg);                                                                     \
        spw_buf b = {0};                                                                           \
        proto_enc e;                                                                               \
        proto_enc_##name(&e, &b, ++req, &msg);                                                     \
        assert_true(proto_enc_end(&e, UINT32_MAX) == (int)b.len);                                  \
        proto_msg m;                                                                               \
        decode_one(&b, &z, &m, PROTO_##NAME);                                                      \
        assert_int_equal(m.req, req);                                                              \
        assert_int_equal(m.nf, PROTO_NF_##NAME);                                                   \
        check_##name(m.f, &msg);                                                                   \
        seen[PROTO_##NAME] = true;                                                                 \
        spw_buf_release(&b);                                                                       \
        msgpack_zone_clear(&z);                                                                    \
        filler_free(&f);                                                                           \
    }
#define RUN_MSG0(NAME, name)                                                                       \
    {                                                                                              \
        spw_buf b = {0};                                                                           \
        proto_enc e;                                                                               \
        proto_enc_##name(&e, &b, ++req);                                                           \
        proto_enc_end(&e, UINT32_MAX);                                                             \
        proto_msg m;                                                                               \
        decode_one(&b, &z, &m, PROTO_##NAME);                                                      \
        assert_int_equal(m.req, req);                                                              \
        assert_int_equal(m.nf, 0);                                                                 \
        seen[PROTO_##NAME] = true;                                                                 \
        spw_buf_release(&b);                                                                       \
        msgpack_zone_clear(&z);                                                                    \
    }
#define RUN_ALIAS(NAME, name, OF, of)                                                              \
    {                                                                                              \
        proto_##name##_msg msg;                                                                    \
        fill_##of(&f, &msg);                                                                       \
        spw_buf b = {0};                                                                           \
        proto_enc e;                                                                               \
        proto_enc_##name(&e, &b, ++req, &msg);                                                     \
        proto_enc_end(&e, UINT32_MAX);                                                             \
        proto_msg m;                                                                               \
        decode_one(&b, &z, &m, PROTO_##NAME);                                                      \
        check_##of(m.f, &msg);                                                                     \
        seen[PROTO_##NAME] = true;                                                                 \
        spw_buf_release(&b);                                                                       \
        msgpack_zone_clear(&z);                                                                    \
        filler_free(&f);                                                                           \
    }
    PROTO_SCHEMA(PROTO__NONE, RUN_MSG, RUN_MSG0, RUN_ALIAS)
    /* Every message type there is went through its generated encoder. */
    int types = 0;
#define MUST_BE_SEEN(name, value)                                                                  \
    if (!seen[value])                                                                              \
        fail_msg("message type %s has no generated encoder", #name);                               \
    types++;
    PROTO_MSG_MAP(MUST_BE_SEEN)
    assert_true(types >= 48);
    msgpack_zone_destroy(&z);
}

/* A field added since a message's first version can be left out, with all after it; the
 * decoder then marks it nil. */
static void omitted_fields_decode_as_absent(void **state)
{
    (void)state;
    msgpack_zone z;
    msgpack_zone_init(&z, 4096);
    spw_buf b = {0};
    proto_enc e;
    proto_msg m;
    spw_id id = {1, 2};
    proto_enc_obj_read(&e, &b, 1,
                       &(proto_obj_read_msg){.id = id, .len = 9, .flags = 1, .omit_flags = true});
    proto_enc_end(&e, UINT32_MAX);
    decode_one(&b, &z, &m, PROTO_OBJ_READ);
    assert_true(m.f[F_READ_FLAGS].nil);
    assert_int_equal(m.f[F_READ_LEN].u, 9);
    spw_buf_reset(&b);
    /* STATUS: leaving out the first new field leaves out all of them. */
    const uint64_t tasks[PROTO_TSTATE_COUNT] = {0};
    proto_enc_status(&e, &b, 2,
                     &(proto_status_msg){
                         .listen = "x", .tasks = {tasks, PROTO_TSTATE_COUNT}, .omit_refs = true});
    proto_enc_end(&e, UINT32_MAX);
    decode_one(&b, &z, &m, PROTO_STATUS);
    assert_true(m.f[F_STATUS_REFS].nil && m.f[F_STATUS_LATENCY].nil);
    spw_buf_reset(&b);
    proto_enc_status(
        &e, &b, 2,
        &(proto_status_msg){.listen = "x", .tasks = {tasks, PROTO_TSTATE_COUNT}, .omit_io = true});
    proto_enc_end(&e, UINT32_MAX);
    decode_one(&b, &z, &m, PROTO_STATUS);
    assert_false(m.f[F_STATUS_CONNS].nil);
    assert_true(m.f[F_STATUS_IO].nil && m.f[F_STATUS_LATENCY].nil);
    spw_buf_release(&b);
    msgpack_zone_destroy(&z);
}

/* The batched types as their senders build them, record by record with proto_batch (the
 * count patched at the end, a frame closed and another opened when full): each record decodes
 * to the fields it was built from, and the records of a full frame do not spill into the next. */
static void batches_built_record_by_record_round_trip(void **state)
{
    (void)state;
    msgpack_zone z;
    assert_true(msgpack_zone_init(&z, 4096));
    filler f = {0};
    proto_limits lim;
    proto_limits_default(&lim);
#define RUN_BATCH(TYPE, name, NREC)                                                                \
    {                                                                                              \
        static proto_##name##_rec recs[NREC];                                                      \
        spw_buf b = {0};                                                                           \
        proto_batch bt = {0};                                                                      \
        uint32_t frames = 0;                                                                       \
        for (uint32_t i = 0; i < (NREC); i++) {                                                    \
            fill_##name##_rec(&f, &recs[i]);                                                       \
            proto_put_##name##_rec(proto_batch_rec(&bt, &b, TYPE), &recs[i]);                      \
            if (proto_batch_full(&bt)) {                                                           \
                assert_true(proto_batch_end(&bt, UINT32_MAX) > 0);                                 \
                frames++;                                                                          \
            }                                                                                      \
        }                                                                                          \
        if (bt.n > 0) {                                                                            \
            assert_true(proto_batch_end(&bt, UINT32_MAX) > 0);                                     \
            frames++;                                                                              \
        }                                                                                          \
        assert_int_equal(proto_batch_end(&bt, UINT32_MAX), 0); /* none open: nothing */            \
        uint32_t seen = 0, got_frames = 0;                                                         \
        for (size_t at = 0; at < b.len; got_frames++) {                                            \
            proto_msg m;                                                                           \
            int rc = proto_decode(b.data + at, b.len - at, &lim, &z, &m);                          \
            assert_true(rc > 0);                                                                   \
            assert_int_equal(m.type, TYPE);                                                        \
            const proto_val *rv = &m.f[0];                                                         \
            assert_true(rv->arr.n <= PROTO_BATCH_MAX_RECS);                                        \
            for (uint32_t k = 0; k < rv->arr.n; k++, seen++) {                                     \
                assert_false(PROTO_REC(rv, k)[0].bad);                                             \
                check_##name##_rec(PROTO_REC(rv, k), &recs[seen]);                                 \
            }                                                                                      \
            msgpack_zone_clear(&z);                                                                \
            at += (size_t)rc;                                                                      \
        }                                                                                          \
        assert_int_equal(seen, (NREC));                                                            \
        assert_int_equal(got_frames, frames);                                                      \
        spw_buf_release(&b);                                                                       \
        filler_free(&f);                                                                           \
    }
    RUN_BATCH(PROTO_TASK_RUNS, run, 3)
    RUN_BATCH(PROTO_TASK_DONES, done, PROTO_BATCH_MAX_RECS + 5) /* more than one frame */
    RUN_BATCH(PROTO_TASK_RESULTS, tres, 1)
    RUN_BATCH(PROTO_EXECS, exec, 2)
    RUN_BATCH(PROTO_EXEC_DONES, done, 4)
#undef RUN_BATCH
    msgpack_zone_destroy(&z);
}

static void put_loc_i(proto_enc *e, uint32_t i, void *arg)
{
    proto_put_loc_rec(e, &((const proto_loc_rec *)arg)[i]);
}

/* An array of records given as an array, by a callback, or already encoded makes one frame. */
static void record_arrays_three_ways_same_bytes(void **state)
{
    (void)state;
    const proto_loc_rec locs[3] = {{1, "a:1", "h", ""}, {2, "b:2", "h", "@s"}, {3, "c:3", "", ""}};
    spw_buf b1 = {0}, b2 = {0}, b3 = {0}, pre = {0};
    proto_enc e;
    proto_enc_replicate(
        &e, &b1, 7, &(proto_replicate_msg){.id = {3, 4}, .size = 5, .locs = {.n = 3, .v = locs}});
    proto_enc_end(&e, UINT32_MAX);
    proto_enc_replicate(
        &e, &b2, 7,
        &(proto_replicate_msg){
            .id = {3, 4}, .size = 5, .locs = {.n = 3, .put = put_loc_i, .arg = (void *)locs}});
    proto_enc_end(&e, UINT32_MAX);
    proto_enc pe;
    proto_enc_raw(&pe, &pre);
    for (int i = 0; i < 3; i++)
        proto_put_loc_rec(&pe, &locs[i]);
    proto_enc_replicate(
        &e, &b3, 7, &(proto_replicate_msg){.id = {3, 4}, .size = 5, .locs = {.n = 3, .pre = &pre}});
    proto_enc_end(&e, UINT32_MAX);
    assert_int_equal(b1.len, b2.len);
    assert_int_equal(b1.len, b3.len);
    assert_memory_equal(b1.data, b2.data, b1.len);
    assert_memory_equal(b1.data, b3.data, b1.len);
    spw_buf_release(&b1);
    spw_buf_release(&b2);
    spw_buf_release(&b3);
    spw_buf_release(&pre);
}

/* A string longer than its field allows is cut to the limit, so the frame still decodes; NULL
 * is the empty string. */
static void long_strings_are_cut_to_the_schema_limit(void **state)
{
    (void)state;
    char name[PROTO_MAX_NAME + 50];
    memset(name, 'n', sizeof name - 1);
    name[sizeof name - 1] = '\0';
    spw_buf b = {0};
    proto_enc e;
    proto_enc_put_place(&e, &b, 1, &(proto_put_place_msg){.site = name, .host_id = NULL});
    proto_enc_end(&e, UINT32_MAX);
    msgpack_zone z;
    msgpack_zone_init(&z, 4096);
    proto_msg m;
    decode_one(&b, &z, &m, PROTO_PUT_PLACE);
    assert_int_equal(m.f[F_PUTP_SITE].bin.len, PROTO_MAX_NAME);
    assert_int_equal(m.f[F_PUTP_HOSTID].bin.len, 0);
    assert_false(m.f[F_PUTP_HOSTID].nil);
    spw_buf_release(&b);
    msgpack_zone_destroy(&z);
}

/* Strings cross to JSON readers: one that is not UTF-8 is refused by the decoder, and our own
 * encoder writes '?' for every byte that is not part of a well-formed sequence (a sequence
 * the length limit cut, too), so what we send always decodes. */
static void strings_are_utf8_both_ways(void **state)
{
    (void)state;
    msgpack_zone z;
    msgpack_zone_init(&z, 4096);
    proto_limits lim;
    proto_limits_default(&lim);
    /* The encoder: an invalid byte, a surrogate, an overlong NUL, and a cut multi-byte name. */
    static const struct {
        const char *in, *out;
    } cases[] = {
        {"w\xff" "1", "w?1"},
        {"caf\xc3\xa9", "caf\xc3\xa9"},
        {"\xed\xa0\x80" "x", "???x"},
        {"\xc0\x80", "??"},
        {"long name \xe2\x82", "long name ??"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        spw_buf b = {0};
        proto_enc e;
        proto_enc_put_place(&e, &b, 1, &(proto_put_place_msg){.site = cases[i].in});
        proto_enc_end(&e, UINT32_MAX);
        proto_msg m;
        decode_one(&b, &z, &m, PROTO_PUT_PLACE);
        assert_int_equal(m.f[F_PUTP_SITE].bin.len, strlen(cases[i].out));
        assert_memory_equal(m.f[F_PUTP_SITE].bin.ptr, cases[i].out, strlen(cases[i].out));
        spw_buf_release(&b);
    }
    /* A cut inside a sequence: PROTO_MAX_NAME - 1 ASCII bytes and a two-byte character. */
    char name[PROTO_MAX_NAME + 2];
    memset(name, 'n', PROTO_MAX_NAME - 1);
    memcpy(name + PROTO_MAX_NAME - 1, "\xc3\xa9", 3);
    spw_buf b = {0};
    proto_enc e;
    proto_enc_put_place(&e, &b, 1, &(proto_put_place_msg){.site = name});
    proto_enc_end(&e, UINT32_MAX);
    proto_msg m;
    decode_one(&b, &z, &m, PROTO_PUT_PLACE);
    assert_int_equal(m.f[F_PUTP_SITE].bin.len, PROTO_MAX_NAME);
    assert_int_equal(((const char *)m.f[F_PUTP_SITE].bin.ptr)[PROTO_MAX_NAME - 1], '?');
    /* The decoder: the same frame with the site's first byte made 0xff is malformed. */
    for (size_t at = 0; at + 1 < b.len; at++) {
        if (memcmp(b.data + at, "nnnn", 4) == 0) {
            b.data[at] = 0xff;
            break;
        }
    }
    assert_int_equal(proto_decode(b.data, b.len, &lim, &z, &m), SPW_EMALFORMED);
    spw_buf_release(&b);
    msgpack_zone_destroy(&z);
    /* The checker itself, at the edges of the ranges. */
    assert_true(spw_utf8_valid("\xf4\x8f\xbf\xbf", 4));
    assert_false(spw_utf8_valid("\xf4\x90\x80\x80", 4));
    assert_true(spw_utf8_valid("\xef\xbf\xbf", 3));
    assert_false(spw_utf8_valid("\xe0\x9f\xbf", 3));
    assert_true(spw_utf8_valid("0123456789abcdef\xc3\xa9", 18));
    assert_int_equal(spw_utf8_bad_at("0123456789abcdef\x80", 17), 16);
}

/* A payload left out of the frame (ptr NULL) is announced by its header: appending the bytes
 * gives the same frame as encoding them in. */
static void borrowed_payload_header_matches_full_frame(void **state)
{
    (void)state;
    const char data[] = "0123456789";
    proto_obj_data_msg d = {
        .id = {5, 6}, .total = 10, .off = 0, .flags = PROTO_CHUNK_LAST, .data = {data, 10}};
    spw_buf full = {0}, head = {0};
    proto_enc e;
    proto_enc_obj_data(&e, &full, 3, &d);
    proto_enc_end(&e, UINT32_MAX);
    d.data.ptr = NULL;
    proto_enc_obj_data(&e, &head, 3, &d);
    spw_buf_append(&head, data, 10);
    proto_enc_end(&e, UINT32_MAX);
    assert_int_equal(full.len, head.len);
    assert_memory_equal(full.data, head.data, full.len);
    uint32_t type;
    assert_int_equal(proto_check_frames(full.data, full.len, &type), 0);
    spw_buf_release(&full);
    spw_buf_release(&head);
}

/* The sent-frame check finds a frame the schema refuses, names its type, and in
 * proto_assert_frames aborts. */
static void sent_frame_check_catches_a_wrong_frame(void **state)
{
    (void)state;
    spw_buf b = {0};
    proto_enc e;
    proto_enc_ok(&e, &b, 1, &(proto_ok_msg){.value = 1});
    proto_enc_end(&e, UINT32_MAX);
    proto_enc_begin(&e, &b, PROTO_OBJ_ADDED, 2, 1); /* one field of two */
    proto_put_u(&e, 5);
    proto_enc_end(&e, UINT32_MAX);
    uint32_t type = 0;
    assert_int_equal(proto_check_frames(b.data, b.len, &type), SPW_EMALFORMED);
    assert_int_equal(type, PROTO_OBJ_ADDED);
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        signal(SIGABRT, SIG_DFL);
        proto_assert_frames(b.data, b.len, "test");
        _exit(0);
    }
    int st = 0;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFSIGNALED(st) || (WIFEXITED(st) && WEXITSTATUS(st) != 0));
    spw_buf_release(&b);
}

/* proto_put_* write values straight into the buffer: the bytes must be those msgpack-c's packer
 * makes for the same values (the smallest form of each), at every size boundary. */
static int pk_write(void *data, const char *p, size_t len)
{
    spw_buf_append(data, p, len);
    return 0;
}

static void values_match_msgpack_c_packer(void **state)
{
    (void)state;
    static const uint64_t us[] = {0, 1, 127, 128, 255, 256, 65535, 65536, 0xffffffffULL,
                                  0x100000000ULL, UINT64_MAX};
    static const int64_t is[] = {0, 1, -1, -31, -32, -33, 127, 128, -127, -128, -129, 32767,
                                 -32768, -32769, 65536, INT32_MIN, (int64_t)INT32_MIN - 1,
                                 INT64_MIN, INT64_MAX};
    static const size_t lens[] = {0, 1, 15, 16, 31, 32, 255, 256, 65535, 65536, 70000};
    uint8_t *blob = calloc(1, 70000);
    assert_non_null(blob);
    for (size_t i = 0; i < 70000; i++)
        blob[i] = (uint8_t)(i * 31);
    spw_buf ours = {0}, theirs = {0};
    proto_enc e;
    proto_enc_raw(&e, &ours);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &theirs, pk_write);
    for (size_t i = 0; i < sizeof us / sizeof us[0]; i++) {
        proto_put_u(&e, us[i]);
        msgpack_pack_uint64(&pk, us[i]);
    }
    for (size_t i = 0; i < sizeof is / sizeof is[0]; i++) {
        proto_put_i(&e, is[i]);
        msgpack_pack_int64(&pk, is[i]);
    }
    for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++) {
        proto_put_strn(&e, (const char *)blob, lens[i]);
        msgpack_pack_str(&pk, lens[i]);
        msgpack_pack_str_body(&pk, blob, lens[i]);
        proto_put_bin(&e, blob, lens[i]);
        msgpack_pack_bin(&pk, lens[i]);
        msgpack_pack_bin_body(&pk, blob, lens[i]);
        proto_put_arr(&e, (uint32_t)lens[i]);
        msgpack_pack_array(&pk, lens[i]);
    }
    proto_put_bool(&e, true);
    msgpack_pack_true(&pk);
    proto_put_bool(&e, false);
    msgpack_pack_false(&pk);
    proto_put_nil(&e);
    msgpack_pack_nil(&pk);
    spw_id id = {0x0123456789abcdefULL, 0xfedcba9876543210ULL};
    uint8_t idb[16];
    spw_id_to_bytes(id, idb);
    proto_put_id(&e, id);
    msgpack_pack_bin(&pk, 16);
    msgpack_pack_bin_body(&pk, idb, 16);
    assert_int_equal(ours.len, theirs.len);
    assert_memory_equal(ours.data, theirs.data, ours.len);
    spw_buf_release(&ours);
    spw_buf_release(&theirs);
    free(blob);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(every_production_encoder_round_trips),
    cmocka_unit_test(omitted_fields_decode_as_absent),
    cmocka_unit_test(batches_built_record_by_record_round_trip),
    cmocka_unit_test(record_arrays_three_ways_same_bytes),
    cmocka_unit_test(long_strings_are_cut_to_the_schema_limit),
    cmocka_unit_test(strings_are_utf8_both_ways),
    cmocka_unit_test(borrowed_payload_header_matches_full_frame),
    cmocka_unit_test(sent_frame_check_catches_a_wrong_frame),
    cmocka_unit_test(values_match_msgpack_c_packer),
};

SPW_TEST_MAIN(tests)
