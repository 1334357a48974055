/* Wire samples shared by the codec's unit tests and the fuzz corpus generator: a valid frame of
 * every message type, and bodies every decoder must refuse as malformed. One copy, so the corpus
 * cannot drift from what the tests check. */
#include "proto_samples.h"

#include <stdio.h>
#include <stdlib.h>

const spw_id SAMPLE_ID1 = {0x0102030405060708ULL, 0x1112131415161718ULL};
const uint8_t SAMPLE_NONCE[16] = "0123456789abcdef";
const uint8_t SAMPLE_PROOF[32] = "0123456789abcdef0123456789abcdef";

static void put_loc(proto_enc *e)
{
    proto_put_arr(e, 4);
    proto_put_u(e, 3);
    proto_put_str(e, "127.0.0.1:9");
    proto_put_str(e, "hostid");
    proto_put_str(e, "");
}

/* A batched message: two records, each the fields of the single message's sample (whose frame
 * is [type, req, fields] with type and request id of one byte each). */
static bool batch_sample(uint32_t type, spw_buf *b)
{
    uint32_t single = type == PROTO_TASK_RUNS      ? PROTO_TASK_RUN
                      : type == PROTO_TASK_DONES   ? PROTO_TASK_DONE
                      : type == PROTO_TASK_RESULTS ? PROTO_TASK_RESULT
                      : type == PROTO_EXECS        ? PROTO_EXEC
                                                   : PROTO_EXEC_DONE;
    spw_buf one = {0};
    proto_sample_encode(single, &one);
    const size_t skip = PROTO_HDR_LEN + 3;
    proto_enc e;
    proto_enc_begin(&e, b, type, 13, 1);
    proto_put_arr(&e, 2);
    for (int i = 0; i < 2; i++)
        spw_buf_append(b, one.data + skip, one.len - skip);
    spw_buf_release(&one);
    if (proto_enc_end(&e, UINT32_MAX) <= 0)
        abort();
    return true;
}

/* Encodes a valid sample of message `type` into b. Returns false for a type with no sample. */
bool proto_sample_encode(uint32_t type, spw_buf *b)
{
    proto_enc e;
    switch (type) {
    case PROTO_CHALLENGE:
        proto_enc_begin(&e, b, type, 1, 3);
        proto_put_u(&e, PROTO_VERSION);
        proto_put_bin(&e, SAMPLE_NONCE, 16);
        proto_put_u(&e, PROTO_ROLE_SCHEDULER);
        break;
    case PROTO_HELLO:
        proto_enc_begin(&e, b, type, 1, 8);
        proto_put_u(&e, PROTO_VERSION);
        proto_put_u(&e, PROTO_ROLE_WORKER);
        proto_put_bin(&e, SAMPLE_NONCE, 16);
        proto_put_bin(&e, SAMPLE_PROOF, 32);
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
        proto_put_bin(&e, SAMPLE_PROOF, 32);
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
        proto_put_id(&e, SAMPLE_ID1);
        proto_put_u(&e, 1000);
        proto_put_str(&e, "main.c:12");
        proto_put_u(&e, 0);
        break;
    case PROTO_PUT_TARGET:
        proto_enc_begin(&e, b, type, 2, 6);
        proto_put_id(&e, SAMPLE_ID1);
        proto_put_u(&e, 3);
        proto_put_str(&e, "127.0.0.1:9");
        proto_put_str(&e, "hostid");
        proto_put_str(&e, "");
        proto_put_u(&e, 0);
        break;
    case PROTO_LOCATE:
        proto_enc_begin(&e, b, type, 3, 2);
        proto_put_id(&e, SAMPLE_ID1);
        proto_put_u(&e, 1000);
        break;
    case PROTO_LOCATION:
        proto_enc_begin(&e, b, type, 3, 6);
        proto_put_id(&e, SAMPLE_ID1);
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
    case PROTO_TASK_CANCEL:
        proto_enc_begin(&e, b, type, 4, 1);
        proto_put_arr(&e, 2);
        proto_put_id(&e, SAMPLE_ID1);
        proto_put_id(&e, SAMPLE_ID1);
        break;
    case PROTO_SUBMIT:
        proto_enc_begin(&e, b, type, 5, 5);
        proto_put_u(&e, 1);
        proto_put_u(&e, PROTO_SUBMIT_END);
        proto_put_u(&e, 0);
        proto_put_u(&e, 0);
        proto_put_arr(&e, 1);
        proto_put_arr(&e, 5);
        proto_put_id(&e, SAMPLE_ID1);
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
        proto_put_id(&e, SAMPLE_ID1);
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
        proto_put_id(&e, SAMPLE_ID1);
        proto_put_i(&e, SPW_ETASKFAILED);
        proto_put_u(&e, 0);
        proto_put_nil(&e);
        proto_put_str(&e, "boom");
        if (type != PROTO_TASK_RESULT)
            proto_put_u(&e, 12);
        break;
    case PROTO_TASK_RUN:
        proto_enc_begin(&e, b, type, 7, 4);
        proto_put_id(&e, SAMPLE_ID1);
        proto_put_str(&e, "sum_f64");
        proto_put_arr(&e, 1);
        proto_put_arr(&e, 7);
        proto_put_u(&e, PROTO_ARG_OBJ);
        proto_put_nil(&e);
        proto_put_id(&e, SAMPLE_ID1);
        proto_put_u(&e, 0);
        proto_put_u(&e, 800);
        proto_put_u(&e, 800);
        proto_put_arr(&e, 1);
        put_loc(&e);
        proto_put_u(&e, 0);
        break;
    case PROTO_OBJ_ADDED:
        proto_enc_begin(&e, b, type, 0, 2);
        proto_put_id(&e, SAMPLE_ID1);
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
        proto_put_id(&e, SAMPLE_ID1);
        proto_put_u(&e, 6);
        proto_put_u(&e, 0);
        proto_put_u(&e, PROTO_CHUNK_LAST);
        proto_put_bin(&e, "abcdef", 6);
        break;
    case PROTO_OBJ_READ:
        proto_enc_begin(&e, b, type, 8, 3);
        proto_put_id(&e, SAMPLE_ID1);
        proto_put_u(&e, 0);
        proto_put_u(&e, 6);
        break;
    case PROTO_PUT_DONE:
        proto_enc_begin(&e, b, type, 8, 1);
        proto_put_id(&e, SAMPLE_ID1);
        break;
    case PROTO_STATUS_REQ:
    case PROTO_PING:
    case PROTO_PONG:
    case PROTO_BYE:
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
        proto_put_id(&e, SAMPLE_ID1);
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
        proto_put_id(&e, SAMPLE_ID1);
        proto_put_u(&e, 1 << 20);
        break;
    case PROTO_MEMORY_OBJS:
        proto_enc_begin(&e, b, type, 14, 1);
        proto_put_arr(&e, 1);
        proto_put_arr(&e, 12);
        proto_put_id(&e, SAMPLE_ID1);
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
        proto_put_id(&e, SAMPLE_ID1);
        proto_put_u(&e, 0);
        break;
    case PROTO_BROADCAST_DONE:
        proto_enc_begin(&e, b, type, 15, 3);
        proto_put_id(&e, SAMPLE_ID1);
        proto_put_u(&e, 4);
        proto_put_u(&e, 0);
        break;
    case PROTO_REPLICATE:
        proto_enc_begin(&e, b, type, 15, 3);
        proto_put_id(&e, SAMPLE_ID1);
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
        proto_put_id(&e, SAMPLE_ID1);
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
        proto_put_id(&e, SAMPLE_ID1);
        break;
    case PROTO_PINNED:
        proto_enc_begin(&e, b, type, 13, 3);
        proto_put_id(&e, SAMPLE_ID1);
        proto_put_u(&e, 4096);
        proto_put_u(&e, 100);
        break;
    case PROTO_OBJ_CREATE:
    case PROTO_CREATED:
        proto_enc_begin(&e, b, type, 13, 2);
        proto_put_id(&e, SAMPLE_ID1);
        proto_put_u(&e, 1 << 20);
        break;
    case PROTO_TASK_STARTED:
        proto_enc_begin(&e, b, type, 0, 1);
        proto_put_arr(&e, 1);
        proto_put_id(&e, SAMPLE_ID1);
        break;
    case PROTO_GRAPHS_REQ:
        proto_enc_begin(&e, b, type, 20, 2);
        proto_put_u(&e, 0);
        proto_put_u(&e, 0);
        break;
    case PROTO_GRAPHS:
        proto_enc_begin(&e, b, type, 20, 1);
        proto_put_arr(&e, 1);
        proto_put_arr(&e, 10);
        proto_put_u(&e, 5);
        proto_put_u(&e, 1);
        proto_put_str(&e, "host");
        proto_put_u(&e, 99);
        proto_put_str(&e, "main.c:30");
        proto_put_u(&e, 1500);
        proto_put_arr(&e, PROTO_TSTATE_COUNT);
        for (int i = 0; i < PROTO_TSTATE_COUNT; i++)
            proto_put_u(&e, (uint64_t)i);
        proto_put_u(&e, 4096);
        proto_put_u(&e, 1 << 20);
        proto_put_u(&e, 0);
        break;
    case PROTO_PLUGINS_REQ:
        proto_enc_begin(&e, b, type, 21, 0);
        break;
    case PROTO_PLUGIN_ADD:
        proto_enc_begin(&e, b, type, 21, 4);
        proto_put_bin(&e, SAMPLE_PROOF, 32);
        proto_put_u(&e, 4096);
        proto_put_str(&e, "libfoo.so");
        proto_put_str(&e, "main.c:9");
        break;
    case PROTO_PLUGIN_CHECKED:
        proto_enc_begin(&e, b, type, 21, 5);
        proto_put_bin(&e, SAMPLE_PROOF, 32);
        proto_put_i(&e, SPW_EPLUGIN);
        proto_put_str(&e, "wrong ABI version");
        proto_put_str(&e, "foo");
        proto_put_u(&e, 2);
        break;
    case PROTO_PLUGIN_RELEASE:
        proto_enc_begin(&e, b, type, 21, 1);
        proto_put_bin(&e, SAMPLE_PROOF, 32);
        break;
    case PROTO_PLUGIN_GET:
        proto_enc_begin(&e, b, type, 21, 1);
        proto_put_str(&e, "0123456789abcdef");
        break;
    case PROTO_PLUGIN_INFO:
    case PROTO_PLUGIN_CHECK:
        proto_enc_begin(&e, b, type, 21, 5);
        proto_put_bin(&e, SAMPLE_PROOF, 32);
        proto_put_str(&e, "foo");
        proto_put_u(&e, 4096);
        proto_put_id(&e, SAMPLE_ID1);
        proto_put_arr(&e, 1);
        put_loc(&e);
        break;
    case PROTO_PLUGINS:
        proto_enc_begin(&e, b, type, 21, 1);
        proto_put_arr(&e, 1);
        proto_put_arr(&e, 9);
        proto_put_bin(&e, SAMPLE_PROOF, 32);
        proto_put_str(&e, "foo");
        proto_put_u(&e, 4096);
        proto_put_id(&e, SAMPLE_ID1);
        proto_put_u(&e, PROTO_PLUGIN_READY);
        proto_put_u(&e, 2);
        proto_put_u(&e, 1);
        proto_put_u(&e, 0);
        proto_put_u(&e, 1);
        break;
    case PROTO_PLUGIN_LOAD:
        proto_enc_begin(&e, b, type, 21, 2);
        proto_put_bin(&e, SAMPLE_PROOF, 32);
        proto_put_str(&e, "/var/tmp/plugins/x.so");
        break;
    case PROTO_WORKER_PLUGINS:
        proto_enc_begin(&e, b, type, 21, 1);
        proto_put_arr(&e, 1);
        proto_put_arr(&e, 4);
        proto_put_bin(&e, SAMPLE_PROOF, 32);
        proto_put_str(&e, "foo");
        proto_put_u(&e, 4096);
        proto_put_u(&e, 1);
        break;
    case PROTO_DRAIN:
        proto_enc_begin(&e, b, type, 22, 2);
        proto_put_u(&e, 3);
        proto_put_str(&e, "w1");
        break;
    case PROTO_OBJS_HELD:
        proto_enc_begin(&e, b, type, 23, 2);
        proto_put_arr(&e, 1);
        proto_put_arr(&e, 5);
        proto_put_id(&e, SAMPLE_ID1);
        proto_put_u(&e, 100);
        proto_put_u(&e, 1);
        proto_put_u(&e, 0);
        proto_put_u(&e, 0);
        proto_put_u(&e, 0);
        break;
    case PROTO_TASK_RUNS:
    case PROTO_TASK_DONES:
    case PROTO_TASK_RESULTS:
    case PROTO_EXECS:
    case PROTO_EXEC_DONES:
        return batch_sample(type, b);
    default:
        return false;
    }
    if (proto_enc_end(&e, UINT32_MAX) <= 0) {
        fprintf(stderr, "the encoder refused the sample of message type %u\n", (unsigned)type);
        abort();
    }
    return true;
}

void proto_sample_frame(spw_buf *b, const uint8_t *body, size_t n)
{
    uint8_t h[4] = {(uint8_t)(n >> 24), (uint8_t)(n >> 16), (uint8_t)(n >> 8), (uint8_t)n};
    spw_buf_append(b, h, 4);
    spw_buf_append(b, body, n);
}

#define BODY(...) (const uint8_t[]){__VA_ARGS__}, sizeof((const uint8_t[]){__VA_ARGS__})

const proto_bad_body proto_bad_bodies[] = {
    {"not-an-array", BODY(0x01)},
    {"array-of-2", BODY(0x92, 0x05, 0x00)},
    {"unknown-type-59", BODY(0x93, 0x3b, 0x00, 0x90)},
    {"unknown-type-25", BODY(0x93, 0x19, 0x00, 0x90)},
    {"type-0", BODY(0x93, 0x00, 0x00, 0x90)},
    {"type-beyond-table", BODY(0x93, 0xcc, 0xff, 0x00, 0x90)},
    {"negative-type", BODY(0x93, 0xff, 0x00, 0x90)},
    {"string-request-id", BODY(0x93, 0x05, 0xa1, 'x', 0x91, 0x01)},
    {"ok-with-no-fields", BODY(0x93, 0x05, 0x00, 0x90)},
    {"ok-with-a-string", BODY(0x93, 0x05, 0x00, 0x91, 0xa1, 'x')},
    {"ok-with-negative", BODY(0x93, 0x05, 0x00, 0x91, 0xff)},
    {"ok-with-two-fields", BODY(0x93, 0x05, 0x00, 0x92, 0x01, 0x01)},
    {"ok-with-nil", BODY(0x93, 0x05, 0x00, 0x91, 0xc0)},
    {"put-done-short-id", BODY(0x93, 0x21, 0x00, 0x91, 0xc4, 0x02, 0x01, 0x02)},
    {"put-done-id-as-str", BODY(0x93, 0x21, 0x00, 0x91, 0xa2, 'a', 'b')},
    {"trailing-byte", BODY(0x93, 0x05, 0x00, 0x91, 0x01, 0x00)},
    {"map-payload", BODY(0x93, 0x05, 0x00, 0x81, 0x01, 0x01)},
    {"float-field", BODY(0x93, 0x05, 0x00, 0x91, 0xca, 0, 0, 0, 0)},
    {"ext-field", BODY(0x93, 0x05, 0x00, 0x91, 0xd4, 0x01, 0x00)},
    {"reserved-c1", BODY(0x93, 0x05, 0x00, 0x91, 0xc1)},
    {"array-claims-2p32", BODY(0x93, 0x05, 0x00, 0xdd, 0xff, 0xff, 0xff, 0xff)},
    {"str-claims-more-than-frame",
     BODY(0x93, 0x04, 0x00, 0x92, 0x01, 0xdb, 0x7f, 0xff, 0xff, 0xff)},
    {"truncated-inside-body", BODY(0x93, 0x05, 0x00, 0x91, 0xcd, 0x01)},
    {"deep-nesting",
     BODY(0x93, 0x05, 0x00, 0x91, 0x91, 0x91, 0x91, 0x91, 0x91, 0x91, 0x91, 0x91, 0x91, 0x01)},
    {"error-code-as-str", BODY(0x93, 0x04, 0x00, 0x92, 0xa1, 'x', 0xa0)},
    {"str-with-nul", BODY(0x93, 0x04, 0x00, 0x92, 0x01, 0xa2, 'a', 0x00)},
    {"release-ids-not-an-array", BODY(0x93, 0x0e, 0x00, 0x91, 0x01)},
    {"release-id-wrong-length", BODY(0x93, 0x0e, 0x00, 0x91, 0x91, 0xc4, 0x01, 0x00)},
    {"heartbeat-too-few-stats", BODY(0x93, 0x18, 0x00, 0x91, 0x91, 0x01)},
    {"error-code-over-int64",
     BODY(0x93, 0x04, 0x00, 0x92, 0xcf, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xa0)},
    {"memory-objs-records-are-ints", BODY(0x93, 0x2b, 0x00, 0x91, 0x93, 0x00, 0x00, 0x00)},
};

const size_t proto_bad_body_count = sizeof proto_bad_bodies / sizeof proto_bad_bodies[0];
