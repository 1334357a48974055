/* Unit tests for the wire codec: a round trip of every message type, every proper prefix of
 * every frame is "need more", byte-at-a-time stream feeding, and a table of malformed input. */
#include "spillway/proto.h"

#include <stdio.h>
#include <stdlib.h>

#include "test_main.h"

static const spw_id ID1 = {0x0102030405060708ULL, 0x1112131415161718ULL};
static const uint8_t NONCE[16] = "0123456789abcdef";
static const uint8_t PROOF[32] = "0123456789abcdef0123456789abcdef";

static void put_loc(proto_enc *e)
{
    proto_put_arr(e, 4);
    proto_put_u(e, 3);
    proto_put_str(e, "127.0.0.1:9");
    proto_put_str(e, "hostid");
    proto_put_str(e, "");
}

/* Encodes a valid sample of message `type` into b. Returns false for a type with no sample. */
static bool encode_sample(uint32_t type, spw_buf *b)
{
    proto_enc e;
    switch (type) {
    case PROTO_CHALLENGE:
        proto_enc_begin(&e, b, type, 1, 3);
        proto_put_u(&e, PROTO_VERSION);
        proto_put_bin(&e, NONCE, 16);
        proto_put_u(&e, PROTO_ROLE_SCHEDULER);
        break;
    case PROTO_HELLO:
        proto_enc_begin(&e, b, type, 1, 8);
        proto_put_u(&e, PROTO_VERSION);
        proto_put_u(&e, PROTO_ROLE_WORKER);
        proto_put_bin(&e, NONCE, 16);
        proto_put_bin(&e, PROOF, 32);
        proto_put_u(&e, 4242);
        proto_put_str(&e, "host");
        proto_put_str(&e, "worker-1");
        proto_put_arr(&e, 5);
        proto_put_str(&e, "127.0.0.1:5");
        proto_put_u(&e, 2);
        proto_put_u(&e, 1 << 20);
        proto_put_str(&e, "hostid");
        proto_put_str(&e, "");
        break;
    case PROTO_WELCOME:
        proto_enc_begin(&e, b, type, 1, 5);
        proto_put_bin(&e, PROOF, 32);
        proto_put_u(&e, 77);
        proto_put_u(&e, 65536);
        proto_put_u(&e, 1 << 20);
        proto_put_u(&e, 1 << 24);
        break;
    case PROTO_ERROR:
        proto_enc_begin(&e, b, type, 9, 2);
        proto_put_i(&e, SPW_ENOOBJ);
        proto_put_str(&e, "no such object");
        break;
    case PROTO_OK:
        proto_enc_begin(&e, b, type, 9, 1);
        proto_put_u(&e, 5);
        break;
    case PROTO_PUT_PLACE:
        proto_enc_begin(&e, b, type, 2, 4);
        proto_put_id(&e, ID1);
        proto_put_u(&e, 1000);
        proto_put_str(&e, "main.c:12");
        proto_put_u(&e, 0);
        break;
    case PROTO_PUT_TARGET:
        proto_enc_begin(&e, b, type, 2, 6);
        proto_put_id(&e, ID1);
        proto_put_u(&e, 3);
        proto_put_str(&e, "127.0.0.1:9");
        proto_put_str(&e, "hostid");
        proto_put_str(&e, "");
        proto_put_u(&e, 0);
        break;
    case PROTO_LOCATE:
        proto_enc_begin(&e, b, type, 3, 2);
        proto_put_id(&e, ID1);
        proto_put_u(&e, 1000);
        break;
    case PROTO_LOCATION:
        proto_enc_begin(&e, b, type, 3, 6);
        proto_put_id(&e, ID1);
        proto_put_i(&e, 0);
        proto_put_u(&e, 3);
        proto_put_bin(&e, "abc", 3);
        proto_put_str(&e, "");
        proto_put_arr(&e, 2);
        put_loc(&e);
        put_loc(&e);
        break;
    case PROTO_RELEASE:
    case PROTO_OBJ_DELETE:
        proto_enc_begin(&e, b, type, 4, 1);
        proto_put_arr(&e, 2);
        proto_put_id(&e, ID1);
        proto_put_id(&e, ID1);
        break;
    case PROTO_SUBMIT:
        proto_enc_begin(&e, b, type, 5, 5);
        proto_put_u(&e, 1);
        proto_put_u(&e, PROTO_SUBMIT_END);
        proto_put_u(&e, 0);
        proto_put_u(&e, 0);
        proto_put_arr(&e, 1);
        proto_put_arr(&e, 5);
        proto_put_id(&e, ID1);
        proto_put_str(&e, "noop");
        proto_put_arr(&e, 2);
        proto_put_arr(&e, 5);
        proto_put_u(&e, PROTO_ARG_INLINE);
        proto_put_bin(&e, "xyz", 3);
        proto_put_nil(&e);
        proto_put_u(&e, 0);
        proto_put_u(&e, 0);
        proto_put_arr(&e, 5);
        proto_put_u(&e, PROTO_ARG_VIEW);
        proto_put_nil(&e);
        proto_put_id(&e, ID1);
        proto_put_u(&e, 10);
        proto_put_u(&e, 20);
        proto_put_u(&e, PROTO_TASK_KEEP);
        proto_put_str(&e, "main.c:20");
        break;
    case PROTO_SUBMIT_ACK:
        proto_enc_begin(&e, b, type, 5, 2);
        proto_put_u(&e, 1);
        proto_put_u(&e, 1);
        break;
    case PROTO_TASK_RESULT:
    case PROTO_TASK_DONE:
    case PROTO_EXEC_DONE:
        proto_enc_begin(&e, b, type, 6, type == PROTO_TASK_RESULT ? 5 : 6);
        proto_put_id(&e, ID1);
        proto_put_i(&e, SPW_ETASKFAILED);
        proto_put_u(&e, 0);
        proto_put_nil(&e);
        proto_put_str(&e, "boom");
        if (type != PROTO_TASK_RESULT)
            proto_put_u(&e, 12);
        break;
    case PROTO_TASK_RUN:
        proto_enc_begin(&e, b, type, 7, 4);
        proto_put_id(&e, ID1);
        proto_put_str(&e, "sum_f64");
        proto_put_arr(&e, 1);
        proto_put_arr(&e, 7);
        proto_put_u(&e, PROTO_ARG_OBJ);
        proto_put_nil(&e);
        proto_put_id(&e, ID1);
        proto_put_u(&e, 0);
        proto_put_u(&e, 800);
        proto_put_u(&e, 800);
        proto_put_arr(&e, 1);
        put_loc(&e);
        proto_put_u(&e, 0);
        break;
    case PROTO_OBJ_ADDED:
        proto_enc_begin(&e, b, type, 0, 2);
        proto_put_id(&e, ID1);
        proto_put_u(&e, 800);
        break;
    case PROTO_HEARTBEAT:
        proto_enc_begin(&e, b, type, 0, 1);
        proto_put_arr(&e, PROTO_STAT_COUNT);
        for (int i = 0; i < PROTO_STAT_COUNT; i++)
            proto_put_u(&e, (uint64_t)i);
        break;
    case PROTO_OBJ_WRITE:
    case PROTO_OBJ_DATA:
        proto_enc_begin(&e, b, type, 8, 5);
        proto_put_id(&e, ID1);
        proto_put_u(&e, 6);
        proto_put_u(&e, 0);
        proto_put_u(&e, PROTO_CHUNK_LAST);
        proto_put_bin(&e, "abcdef", 6);
        break;
    case PROTO_OBJ_READ:
        proto_enc_begin(&e, b, type, 8, 3);
        proto_put_id(&e, ID1);
        proto_put_u(&e, 0);
        proto_put_u(&e, 6);
        break;
    case PROTO_PUT_DONE:
        proto_enc_begin(&e, b, type, 8, 1);
        proto_put_id(&e, ID1);
        break;
    case PROTO_STATUS_REQ:
        proto_enc_begin(&e, b, type, 10, 0);
        break;
    case PROTO_STATUS:
        proto_enc_begin(&e, b, type, 10, 8);
        proto_put_u(&e, 1);
        proto_put_u(&e, 2);
        proto_put_str(&e, "127.0.0.1:1");
        proto_put_arr(&e, 1);
        proto_put_arr(&e, 8);
        proto_put_u(&e, 1);
        proto_put_str(&e, "127.0.0.1:2");
        proto_put_str(&e, "w1");
        proto_put_u(&e, 2);
        proto_put_u(&e, 1);
        proto_put_u(&e, 1);
        proto_put_u(&e, 0);
        proto_put_arr(&e, 0);
        proto_put_arr(&e, 1);
        proto_put_arr(&e, 6);
        proto_put_u(&e, 5);
        proto_put_str(&e, "host");
        proto_put_u(&e, 99);
        proto_put_u(&e, PROTO_ROLE_CLIENT);
        proto_put_u(&e, 0);
        proto_put_u(&e, 0);
        proto_put_arr(&e, PROTO_TSTATE_COUNT);
        for (int i = 0; i < PROTO_TSTATE_COUNT; i++)
            proto_put_u(&e, 0);
        proto_put_u(&e, 0);
        proto_put_u(&e, 0);
        break;
    case PROTO_EXEC:
        proto_enc_begin(&e, b, type, 11, 4);
        proto_put_id(&e, ID1);
        proto_put_str(&e, "fill");
        proto_put_arr(&e, 1);
        proto_put_arr(&e, 4);
        proto_put_u(&e, PROTO_ARG_OBJ);
        proto_put_nil(&e);
        proto_put_u(&e, 4096);
        proto_put_u(&e, 100);
        proto_put_u(&e, 65536);
        break;
    case PROTO_EXEC_ALLOC:
        proto_enc_begin(&e, b, type, 12, 2);
        proto_put_id(&e, ID1);
        proto_put_u(&e, 1 << 20);
        break;
    case PROTO_MEMORY_OBJS:
        proto_enc_begin(&e, b, type, 14, 1);
        proto_put_arr(&e, 1);
        proto_put_arr(&e, 12);
        proto_put_id(&e, ID1);
        proto_put_u(&e, 100);
        proto_put_u(&e, PROTO_OSTATE_READY);
        proto_put_str(&e, "main.c:3");
        proto_put_str(&e, "host");
        proto_put_u(&e, 77);
        proto_put_u(&e, 1000);
        proto_put_str(&e, "fill");
        proto_put_arr(&e, PROTO_REF_KINDS);
        for (int i = 0; i < PROTO_REF_KINDS; i++)
            proto_put_u(&e, (uint64_t)i);
        proto_put_arr(&e, 1);
        proto_put_arr(&e, 3);
        proto_put_u(&e, PROTO_REF_CLIENT);
        proto_put_u(&e, 1);
        proto_put_str(&e, "client host pid 77");
        proto_put_arr(&e, 1);
        proto_put_arr(&e, 4);
        proto_put_u(&e, 1);
        proto_put_u(&e, 3);
        proto_put_u(&e, 50);
        proto_put_u(&e, 0);
        proto_put_u(&e, 0);
        break;
    case PROTO_BROADCAST:
        proto_enc_begin(&e, b, type, 15, 2);
        proto_put_id(&e, ID1);
        proto_put_u(&e, 0);
        break;
    case PROTO_BROADCAST_DONE:
        proto_enc_begin(&e, b, type, 15, 3);
        proto_put_id(&e, ID1);
        proto_put_u(&e, 4);
        proto_put_u(&e, 0);
        break;
    case PROTO_REPLICATE:
        proto_enc_begin(&e, b, type, 15, 3);
        proto_put_id(&e, ID1);
        proto_put_u(&e, 1 << 20);
        proto_put_arr(&e, 1);
        put_loc(&e);
        break;
    case PROTO_MEMORY_END:
        proto_enc_begin(&e, b, type, 14, 2);
        proto_put_arr(&e, 1);
        proto_put_arr(&e, 5);
        proto_put_u(&e, 1);
        proto_put_str(&e, "127.0.0.1:1");
        proto_put_str(&e, "w");
        proto_put_arr(&e, 2);
        proto_put_u(&e, 1);
        proto_put_u(&e, 2);
        proto_put_u(&e, 1);
        proto_put_u(&e, 1);
        break;
    case PROTO_OBJ_LIST:
        proto_enc_begin(&e, b, type, 14, 2);
        proto_put_arr(&e, 1);
        proto_put_arr(&e, 5);
        proto_put_id(&e, ID1);
        proto_put_u(&e, 100);
        proto_put_u(&e, 1);
        proto_put_u(&e, 0);
        proto_put_u(&e, 2);
        proto_put_arr(&e, 0);
        break;
    case PROTO_MEMORY_REQ:
    case PROTO_OBJ_LIST_REQ:
    case PROTO_EXEC_ALLOC_OK:
    case PROTO_ARENA_MAP:
    case PROTO_ARENA:
        proto_enc_begin(&e, b, type, 12, 1);
        proto_put_u(&e, 8192);
        break;
    case PROTO_OBJ_PIN:
    case PROTO_OBJ_UNPIN:
    case PROTO_OBJ_SEAL:
        proto_enc_begin(&e, b, type, 13, 1);
        proto_put_id(&e, ID1);
        break;
    case PROTO_PINNED:
        proto_enc_begin(&e, b, type, 13, 3);
        proto_put_id(&e, ID1);
        proto_put_u(&e, 4096);
        proto_put_u(&e, 100);
        break;
    case PROTO_OBJ_CREATE:
    case PROTO_CREATED:
        proto_enc_begin(&e, b, type, 13, 2);
        proto_put_id(&e, ID1);
        proto_put_u(&e, 1 << 20);
        break;
    default:
        return false;
    }
    assert_true(proto_enc_end(&e, UINT32_MAX) > 0);
    return true;
}

static int decode_all(const spw_buf *b, proto_msg *m, msgpack_zone *z)
{
    proto_limits lim;
    proto_limits_default(&lim);
    return proto_decode(b->data, b->len, &lim, z, m);
}

static void every_type_round_trips(void **state)
{
    (void)state;
    int samples = 0;
    for (uint32_t t = 0; t < PROTO_TYPE_MAX; t++) {
        spw_buf b = {0};
        if (!encode_sample(t, &b)) {
            assert_string_equal(proto_type_name(t), "?");
            continue;
        }
        samples++;
        msgpack_zone z;
        msgpack_zone_init(&z, 4096);
        proto_msg m;
        int rc = decode_all(&b, &m, &z);
        if (rc != (int)b.len)
            fail_msg("type %s: decode returned %d for %zu bytes", proto_type_name(t), rc, b.len);
        assert_int_equal(m.type, t);
        msgpack_zone_destroy(&z);
        spw_buf_release(&b);
    }
    assert_int_equal(samples, 44);
}

static void fields_survive_round_trip(void **state)
{
    (void)state;
    spw_buf b = {0};
    msgpack_zone z;
    msgpack_zone_init(&z, 4096);
    proto_msg m;

    encode_sample(PROTO_SUBMIT, &b);
    assert_int_equal(decode_all(&b, &m, &z), (int)b.len);
    assert_int_equal(m.req, 5);
    assert_int_equal(m.f[F_SUBMIT_FLAGS].u, PROTO_SUBMIT_END);
    assert_int_equal(m.f[F_SUBMIT_TASKS].arr.n, 1);
    const proto_val *task = PROTO_REC(&m.f[F_SUBMIT_TASKS], 0);
    assert_true(spw_id_eq(task[R_TASK_ID].id, ID1));
    char fn[32];
    assert_string_equal(proto_str(&task[R_TASK_FN], fn, sizeof fn), "noop");
    assert_int_equal(task[R_TASK_ARGS].arr.n, 2);
    const proto_val *a0 = PROTO_REC(&task[R_TASK_ARGS], 0);
    const proto_val *a1 = PROTO_REC(&task[R_TASK_ARGS], 1);
    assert_int_equal(a0[R_ARG_KIND].u, PROTO_ARG_INLINE);
    assert_int_equal(a0[R_ARG_INLINE].bin.len, 3);
    assert_memory_equal(a0[R_ARG_INLINE].bin.ptr, "xyz", 3);
    assert_true(a0[R_ARG_OBJ].nil);
    assert_true(a1[R_ARG_INLINE].nil);
    assert_true(spw_id_eq(a1[R_ARG_OBJ].id, ID1));
    assert_int_equal(a1[R_ARG_OFF].u, 10);
    assert_int_equal(a1[R_ARG_LEN].u, 20);
    msgpack_zone_clear(&z);
    spw_buf_reset(&b);

    encode_sample(PROTO_ERROR, &b);
    assert_int_equal(decode_all(&b, &m, &z), (int)b.len);
    assert_int_equal(m.f[F_ERROR_CODE].i, SPW_ENOOBJ);
    msgpack_zone_clear(&z);
    spw_buf_reset(&b);

    encode_sample(PROTO_HELLO, &b);
    assert_int_equal(decode_all(&b, &m, &z), (int)b.len);
    assert_false(m.f[F_HELLO_WORKER].nil);
    const proto_val *w = PROTO_REC(&m.f[F_HELLO_WORKER], 0);
    assert_int_equal(w[R_WINFO_SLOTS].u, 2);
    assert_int_equal(w[R_WINFO_CAPACITY].u, 1 << 20);

    msgpack_zone_destroy(&z);
    spw_buf_release(&b);
}

static void every_prefix_needs_more(void **state)
{
    (void)state;
    for (uint32_t t = 0; t < PROTO_TYPE_MAX; t++) {
        spw_buf b = {0};
        if (!encode_sample(t, &b))
            continue;
        msgpack_zone z;
        msgpack_zone_init(&z, 4096);
        proto_limits lim;
        proto_limits_default(&lim);
        for (size_t n = 0; n < b.len; n++) {
            proto_msg m;
            int rc = proto_decode(b.data, n, &lim, &z, &m);
            if (rc != 0)
                fail_msg("type %s: prefix %zu of %zu gave %d", proto_type_name(t), n, b.len, rc);
        }
        msgpack_zone_destroy(&z);
        spw_buf_release(&b);
    }
}

/* Feeds a stream of every sample frame one byte at a time, as a slow peer would. */
static void byte_at_a_time_stream(void **state)
{
    (void)state;
    spw_buf all = {0};
    int frames = 0;
    for (uint32_t t = 0; t < PROTO_TYPE_MAX; t++)
        frames += encode_sample(t, &all);
    spw_buf in = {0};
    msgpack_zone z;
    msgpack_zone_init(&z, 4096);
    proto_limits lim;
    proto_limits_default(&lim);
    int got = 0;
    for (size_t i = 0; i < all.len; i++) {
        spw_buf_append(&in, all.data + i, 1);
        proto_msg m;
        int rc = proto_decode(in.data, in.len, &lim, &z, &m);
        assert_true(rc >= 0);
        if (rc > 0) {
            got++;
            spw_buf_consume(&in, (size_t)rc);
            msgpack_zone_clear(&z);
        }
    }
    assert_int_equal(got, frames);
    assert_int_equal(in.len, 0);
    msgpack_zone_destroy(&z);
    spw_buf_release(&in);
    spw_buf_release(&all);
}

/* Builds a frame around an arbitrary body. */
static void frame_body(spw_buf *b, const uint8_t *body, size_t n)
{
    uint8_t h[4] = {(uint8_t)(n >> 24), (uint8_t)(n >> 16), (uint8_t)(n >> 8), (uint8_t)n};
    spw_buf_append(b, h, 4);
    spw_buf_append(b, body, n);
}

typedef struct bad_case {
    const char *what;
    const uint8_t *body;
    size_t len;
    int expect;
} bad_case;

#define BODY(...) (const uint8_t[]){__VA_ARGS__}, sizeof((const uint8_t[]){__VA_ARGS__})

static void malformed_table(void **state)
{
    (void)state;
    const bad_case cases[] = {
        {"not an array", BODY(0x01), SPW_EMALFORMED},
        {"array of 2", BODY(0x92, 0x05, 0x00), SPW_EMALFORMED},
        {"unknown type 59", BODY(0x93, 0x3b, 0x00, 0x90), SPW_EMALFORMED},
        {"unknown type 79", BODY(0x93, 0x4f, 0x00, 0x90), SPW_EMALFORMED},
        {"type 0", BODY(0x93, 0x00, 0x00, 0x90), SPW_EMALFORMED},
        {"type beyond table", BODY(0x93, 0xcc, 0xff, 0x00, 0x90), SPW_EMALFORMED},
        {"negative type", BODY(0x93, 0xff, 0x00, 0x90), SPW_EMALFORMED},
        {"string request id", BODY(0x93, 0x05, 0xa1, 'x', 0x91, 0x01), SPW_EMALFORMED},
        {"OK with no fields", BODY(0x93, 0x05, 0x00, 0x90), SPW_EMALFORMED},
        {"OK with a string", BODY(0x93, 0x05, 0x00, 0x91, 0xa1, 'x'), SPW_EMALFORMED},
        {"OK with negative", BODY(0x93, 0x05, 0x00, 0x91, 0xff), SPW_EMALFORMED},
        {"OK with two fields", BODY(0x93, 0x05, 0x00, 0x92, 0x01, 0x01), SPW_EMALFORMED},
        {"OK with nil", BODY(0x93, 0x05, 0x00, 0x91, 0xc0), SPW_EMALFORMED},
        {"PUT_DONE short id", BODY(0x93, 0x21, 0x00, 0x91, 0xc4, 0x02, 0x01, 0x02), SPW_EMALFORMED},
        {"PUT_DONE id as str", BODY(0x93, 0x21, 0x00, 0x91, 0xa2, 'a', 'b'), SPW_EMALFORMED},
        {"trailing byte", BODY(0x93, 0x05, 0x00, 0x91, 0x01, 0x00), SPW_EMALFORMED},
        {"map payload", BODY(0x93, 0x05, 0x00, 0x81, 0x01, 0x01), SPW_EMALFORMED},
        {"float field", BODY(0x93, 0x05, 0x00, 0x91, 0xca, 0, 0, 0, 0), SPW_EMALFORMED},
        {"ext field", BODY(0x93, 0x05, 0x00, 0x91, 0xd4, 0x01, 0x00), SPW_EMALFORMED},
        {"reserved 0xc1", BODY(0x93, 0x05, 0x00, 0x91, 0xc1), SPW_EMALFORMED},
        {"array claims 2^32-1", BODY(0x93, 0x05, 0x00, 0xdd, 0xff, 0xff, 0xff, 0xff), SPW_EMALFORMED},
        {"str claims more than frame", BODY(0x93, 0x04, 0x00, 0x92, 0x01, 0xdb, 0x7f, 0xff, 0xff, 0xff),
         SPW_EMALFORMED},
        {"truncated inside body", BODY(0x93, 0x05, 0x00, 0x91, 0xcd, 0x01), SPW_EMALFORMED},
        {"deep nesting", BODY(0x93, 0x05, 0x00, 0x91, 0x91, 0x91, 0x91, 0x91, 0x91, 0x91, 0x91, 0x91,
                              0x91, 0x01),
         SPW_EMALFORMED},
        {"ERROR code as str", BODY(0x93, 0x04, 0x00, 0x92, 0xa1, 'x', 0xa0), SPW_EMALFORMED},
        {"str with NUL", BODY(0x93, 0x04, 0x00, 0x92, 0x01, 0xa2, 'a', 0x00), SPW_EMALFORMED},
        {"RELEASE ids not an array", BODY(0x93, 0x0e, 0x00, 0x91, 0x01), SPW_EMALFORMED},
        {"RELEASE id wrong length", BODY(0x93, 0x0e, 0x00, 0x91, 0x91, 0xc4, 0x01, 0x00), SPW_EMALFORMED},
        {"HEARTBEAT too few stats", BODY(0x93, 0x18, 0x00, 0x91, 0x91, 0x01), SPW_EMALFORMED},
    };
    proto_limits lim;
    proto_limits_default(&lim);
    msgpack_zone z;
    msgpack_zone_init(&z, 4096);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        spw_buf b = {0};
        frame_body(&b, cases[i].body, cases[i].len);
        proto_msg m;
        m.type = 12345;
        int rc = proto_decode(b.data, b.len, &lim, &z, &m);
        if (rc != cases[i].expect)
            fail_msg("case '%s': got %d (%s), want %d", cases[i].what, rc, spw_err_name(rc),
                     cases[i].expect);
        assert_int_equal(m.type, 12345); /* out untouched on error */
        msgpack_zone_clear(&z);
        spw_buf_release(&b);
    }
    msgpack_zone_destroy(&z);
}

static void oversized_frame_rejected_before_body(void **state)
{
    (void)state;
    proto_limits lim;
    proto_limits_default(&lim);
    lim.max_frame = 1000;
    msgpack_zone z;
    msgpack_zone_init(&z, 4096);
    /* Only the 4-byte header has arrived: the length alone must be refused. */
    uint8_t hdr[4] = {0, 0, 0x03, 0xe9}; /* 1001 */
    proto_msg m;
    assert_int_equal(proto_decode(hdr, 4, &lim, &z, &m), SPW_EFRAMESIZE);
    uint8_t huge[4] = {0xff, 0xff, 0xff, 0xff};
    assert_int_equal(proto_decode(huge, 4, &lim, &z, &m), SPW_EFRAMESIZE);
    uint8_t zero[4] = {0, 0, 0, 0};
    assert_int_equal(proto_decode(zero, 4, &lim, &z, &m), SPW_EMALFORMED);
    /* Exactly at the limit is fine if well formed. */
    spw_buf b = {0};
    proto_enc e;
    proto_enc_begin(&e, &b, PROTO_PUT_DONE, 0, 1);
    proto_put_id(&e, ID1);
    assert_true(proto_enc_end(&e, 1000) > 0);
    lim.max_frame = (uint32_t)(b.len - 4);
    assert_int_equal(proto_decode(b.data, b.len, &lim, &z, &m), (int)b.len);
    lim.max_frame--;
    assert_int_equal(proto_decode(b.data, b.len, &lim, &z, &m), SPW_EFRAMESIZE);
    /* The encoder refuses to build a frame over the limit and leaves the buffer as it was. */
    size_t before = b.len;
    proto_enc_begin(&e, &b, PROTO_OK, 0, 1);
    proto_put_u(&e, 1);
    assert_int_equal(proto_enc_end(&e, 2), SPW_EFRAMESIZE);
    assert_int_equal(b.len, before);
    spw_buf_release(&b);
    msgpack_zone_destroy(&z);
}

static void list_limit_enforced(void **state)
{
    (void)state;
    spw_buf b = {0};
    proto_enc e;
    proto_enc_begin(&e, &b, PROTO_RELEASE, 0, 1);
    proto_put_arr(&e, 100);
    for (int i = 0; i < 100; i++)
        proto_put_id(&e, ID1);
    proto_enc_end(&e, UINT32_MAX);
    proto_limits lim;
    proto_limits_default(&lim);
    msgpack_zone z;
    msgpack_zone_init(&z, 4096);
    proto_msg m;
    assert_int_equal(proto_decode(b.data, b.len, &lim, &z, &m), (int)b.len);
    assert_int_equal(m.f[F_RELEASE_IDS].arr.n, 100);
    msgpack_zone_clear(&z);
    lim.max_list = 99;
    assert_int_equal(proto_decode(b.data, b.len, &lim, &z, &m), SPW_EMALFORMED);
    msgpack_zone_destroy(&z);
    spw_buf_release(&b);
}

static void truncated_frames_of_every_type_with_short_length(void **state)
{
    (void)state;
    /* A length prefix that cuts a valid body short must be malformed, never a crash. */
    for (uint32_t t = 0; t < PROTO_TYPE_MAX; t++) {
        spw_buf b = {0};
        if (!encode_sample(t, &b))
            continue;
        size_t body = b.len - 4;
        for (size_t cut = 1; cut < body; cut++) {
            spw_buf f = {0};
            frame_body(&f, b.data + 4, body - cut);
            msgpack_zone z;
            msgpack_zone_init(&z, 4096);
            proto_limits lim;
            proto_limits_default(&lim);
            proto_msg m;
            int rc = proto_decode(f.data, f.len, &lim, &z, &m);
            if (rc >= 0 && t != PROTO_STATUS_REQ)
                fail_msg("type %s cut by %zu decoded as %d", proto_type_name(t), cut, rc);
            msgpack_zone_destroy(&z);
            spw_buf_release(&f);
        }
        spw_buf_release(&b);
    }
}

static void error_table_names_and_messages(void **state)
{
    (void)state;
    assert_int_equal(SPW_ENOMEM, -ENOMEM);
    assert_string_equal(spw_err_name(SPW_ENOOBJ), "SPW_ENOOBJ");
    assert_string_equal(spw_err_name(0), "SPW_OK");
    assert_string_equal(spw_err_name(-123456), "SPW_E?");
    assert_non_null(spw_strerror(-123456));
    assert_non_null(spw_strerror(-EXDEV)); /* an errno not in our table still has a text */
    assert_string_equal(spw_strerror(SPW_EAUTH), "authentication failed");
}

static void ids_parse_and_print(void **state)
{
    (void)state;
    char hex[33];
    spw_id_hex(ID1, hex);
    assert_string_equal(hex, "01020304050607081112131415161718");
    spw_id back;
    assert_int_equal(spw_id_parse(hex, &back), 0);
    assert_true(spw_id_eq(back, ID1));
    assert_int_equal(spw_id_parse("0102", &back), SPW_EINVAL);
    assert_int_equal(spw_id_parse("0102030405060708111213141516171g", &back), SPW_EINVAL);
    uint8_t raw[16];
    spw_id_to_bytes(ID1, raw);
    assert_true(spw_id_eq(spw_id_from_bytes(raw), ID1));
}

static void sizes_and_addresses_parse(void **state)
{
    (void)state;
    uint64_t v;
    assert_int_equal(spw_size_parse("64M", &v), 0);
    assert_int_equal(v, 64ULL << 20);
    assert_int_equal(spw_size_parse("2GiB", &v), 0);
    assert_int_equal(v, 2ULL << 30);
    assert_int_equal(spw_size_parse("123", &v), 0);
    assert_int_equal(v, 123);
    assert_int_equal(spw_size_parse("12Q", &v), SPW_EINVAL);
    assert_int_equal(spw_size_parse("", &v), SPW_EINVAL);
    assert_int_equal(spw_size_parse("99999999999T", &v), SPW_ERANGE);
    char host[64];
    int port;
    assert_int_equal(spw_addr_split("127.0.0.1:8080", host, &port), 0);
    assert_string_equal(host, "127.0.0.1");
    assert_int_equal(port, 8080);
    assert_int_equal(spw_addr_split("localhost:0", host, &port), 0);
    assert_string_equal(host, "127.0.0.1");
    assert_int_equal(spw_addr_split("nocolon", host, &port), SPW_EINVAL);
    assert_int_equal(spw_addr_split("h:70000", host, &port), SPW_EINVAL);
}

static void heap_counters_return_to_zero(void **state)
{
    (void)state;
    int64_t before = spw_heap_used(SPW_MOD_BASE);
    void *p = spw_malloc(SPW_MOD_BASE, 1000);
    assert_int_equal(spw_heap_used(SPW_MOD_BASE), before + 1000);
    p = spw_realloc(SPW_MOD_BASE, p, 5000);
    assert_int_equal(spw_heap_used(SPW_MOD_BASE), before + 5000);
    spw_free(p);
    assert_int_equal(spw_heap_used(SPW_MOD_BASE), before);
    spw_heap_fail_after(1);
    assert_null(spw_try_malloc(SPW_MOD_BASE, 10));
    p = spw_try_malloc(SPW_MOD_BASE, 10);
    assert_non_null(p);
    spw_free(p);
    assert_int_equal(spw_heap_used(SPW_MOD_BASE), before);
}


/* Fields added after a message's first version may be absent; extra unknown ones may not. */
static void optional_trailing_fields_may_be_absent(void **state)
{
    (void)state;
    proto_limits lim;
    proto_limits_default(&lim);
    msgpack_zone z;
    msgpack_zone_init(&z, 4096);
    proto_msg m;
    for (int nf = 3; nf <= 6; nf++) {
        spw_buf b = {0};
        proto_enc e;
        proto_enc_begin(&e, &b, PROTO_PUT_PLACE, 1, (uint32_t)nf);
        proto_put_id(&e, ID1);
        proto_put_u(&e, 100);
        proto_put_str(&e, "site");
        if (nf > 3)
            proto_put_u(&e, 0);
        if (nf > 4)
            proto_put_str(&e, "host-a");
        if (nf > 5)
            proto_put_u(&e, 1);
        proto_enc_end(&e, UINT32_MAX);
        int rc = proto_decode(b.data, b.len, &lim, &z, &m);
        if (nf == 3 || nf == 6) {
            assert_int_equal(rc, SPW_EMALFORMED);
        } else {
            assert_int_equal(rc, (int)b.len);
            assert_int_equal(m.f[F_PUTP_HOSTID].nil, nf == 4);
            if (nf == 5)
                assert_int_equal(m.f[F_PUTP_HOSTID].bin.len, 6);
        }
        msgpack_zone_clear(&z);
        spw_buf_release(&b);
    }
    msgpack_zone_destroy(&z);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(every_type_round_trips),
    cmocka_unit_test(fields_survive_round_trip),
    cmocka_unit_test(every_prefix_needs_more),
    cmocka_unit_test(byte_at_a_time_stream),
    cmocka_unit_test(malformed_table),
    cmocka_unit_test(oversized_frame_rejected_before_body),
    cmocka_unit_test(list_limit_enforced),
    cmocka_unit_test(truncated_frames_of_every_type_with_short_length),
    cmocka_unit_test(error_table_names_and_messages),
    cmocka_unit_test(ids_parse_and_print),
    cmocka_unit_test(sizes_and_addresses_parse),
    cmocka_unit_test(heap_counters_return_to_zero),
    cmocka_unit_test(optional_trailing_fields_may_be_absent),
};

SPW_TEST_MAIN(tests)
