/* Unit tests for the wire codec: a round trip of every message type, every proper prefix of
 * every frame is "need more", byte-at-a-time stream feeding, and a table of malformed input. */
#include "spillway/proto.h"

#include "spillway/daemon.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <sodium.h>

#include "spillway/conn.h"

#include "proto_samples.h"
#include "test_main.h"
#include "test_fds.h"

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
        if (!proto_sample_encode(t, &b)) {
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
    assert_int_equal(samples, 68);
}

/* One TASK_DONES record for task {n, 0} (3 bytes of output), its status a string if bad. */
static void put_done_rec(proto_enc *e, uint64_t n, bool bad)
{
    proto_put_arr(e, 6);
    proto_put_id(e, (spw_id){n, 0});
    if (bad)
        proto_put_str(e, "not a status"); /* the bad field */
    else
        proto_put_i(e, 0);
    proto_put_u(e, 3);
    proto_put_bin(e, "abc", 3);
    proto_put_str(e, "");
    proto_put_u(e, 5);
}

/* A batched frame with a malformed record in the middle decodes: that record is marked bad
 * (with its task id when the id itself is fine), the others are whole; a record that is not
 * even an array is marked bad with no id. A frame-level fault still fails the whole frame. */
static void batch_marks_a_bad_record_and_keeps_the_rest(void **state)
{
    (void)state;
    spw_buf b = {0};
    proto_enc e;
    proto_enc_begin(&e, &b, PROTO_TASK_DONES, 9, 1);
    proto_put_arr(&e, 4);
    for (int i = 0; i < 4; i++) {
        if (i == 3) {
            proto_put_u(&e, 7); /* not a record at all */
            continue;
        }
        put_done_rec(&e, (uint64_t)i + 1, i == 1);
    }
    assert_true(proto_enc_end(&e, UINT32_MAX) > 0);
    msgpack_zone z;
    msgpack_zone_init(&z, 4096);
    proto_msg m;
    assert_int_equal(decode_all(&b, &m, &z), (int)b.len);
    const proto_val *recs = &m.f[F_DONES_RECS];
    assert_int_equal(recs->arr.n, 4);
    for (uint32_t i = 0; i < 3; i++) {
        const proto_val *r = PROTO_REC(recs, i);
        assert_int_equal(r[R_DONE_ID].bad, i == 1);
        assert_false(r[R_DONE_ID].nil);
        assert_true(spw_id_eq(r[R_DONE_ID].id, (spw_id){i + 1, 0}));
        if (i != 1)
            assert_int_equal(r[R_DONE_SIZE].u, 3);
    }
    const proto_val *r3 = PROTO_REC(recs, 3);
    assert_true(r3[R_DONE_ID].bad && r3[R_DONE_ID].nil);
    /* The same record in a single TASK_DONE fails the frame. */
    spw_buf one = {0};
    proto_enc_begin(&e, &one, PROTO_TASK_DONE, 9, 6);
    proto_put_id(&e, SAMPLE_ID1);
    proto_put_str(&e, "not a status");
    proto_put_u(&e, 0);
    proto_put_nil(&e);
    proto_put_str(&e, "");
    proto_put_u(&e, 0);
    proto_enc_end(&e, UINT32_MAX);
    msgpack_zone_clear(&z);
    assert_int_equal(decode_all(&one, &m, &z), SPW_EMALFORMED);
    msgpack_zone_destroy(&z);
    spw_buf_release(&one);
    spw_buf_release(&b);
}

static void fields_survive_round_trip(void **state)
{
    (void)state;
    spw_buf b = {0};
    msgpack_zone z;
    msgpack_zone_init(&z, 4096);
    proto_msg m;

    proto_sample_encode(PROTO_SUBMIT, &b);
    assert_int_equal(decode_all(&b, &m, &z), (int)b.len);
    assert_int_equal(m.req, 5);
    assert_int_equal(m.f[F_SUBMIT_FLAGS].u, PROTO_SUBMIT_END);
    assert_int_equal(m.f[F_SUBMIT_TASKS].arr.n, 1);
    const proto_val *task = PROTO_REC(&m.f[F_SUBMIT_TASKS], 0);
    assert_true(spw_id_eq(task[R_TASK_ID].id, SAMPLE_ID1));
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
    assert_true(spw_id_eq(a1[R_ARG_OBJ].id, SAMPLE_ID1));
    assert_int_equal(a1[R_ARG_OFF].u, 10);
    assert_int_equal(a1[R_ARG_LEN].u, 20);
    msgpack_zone_clear(&z);
    spw_buf_reset(&b);

    proto_sample_encode(PROTO_ERROR, &b);
    assert_int_equal(decode_all(&b, &m, &z), (int)b.len);
    assert_int_equal(m.f[F_ERROR_CODE].i, SPW_ENOOBJ);
    msgpack_zone_clear(&z);
    spw_buf_reset(&b);

    proto_sample_encode(PROTO_HELLO, &b);
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
        if (!proto_sample_encode(t, &b))
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
        frames += proto_sample_encode(t, &all);
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

static void malformed_table(void **state)
{
    (void)state;
    proto_limits lim;
    proto_limits_default(&lim);
    msgpack_zone z;
    msgpack_zone_init(&z, 4096);
    for (size_t i = 0; i < proto_bad_body_count; i++) {
        spw_buf b = {0};
        proto_sample_frame(&b, proto_bad_bodies[i].body, proto_bad_bodies[i].len);
        proto_msg m;
        m.type = 12345;
        int rc = proto_decode(b.data, b.len, &lim, &z, &m);
        if (rc != SPW_EMALFORMED)
            fail_msg("case '%s': got %d (%s), want SPW_EMALFORMED", proto_bad_bodies[i].name, rc,
                     spw_err_name(rc));
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
    proto_put_id(&e, SAMPLE_ID1);
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

#if defined(__SANITIZE_ADDRESS__)
#define SPW_UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SPW_UNDER_ASAN 1
#endif
#endif

/* A list of n records whose items are single zero bytes: the decoder must refuse it without
 * first taking room for n records' fields (24 bytes per field, rounded up to a power of two by
 * the zone), which let a 1 MiB frame from an unauthenticated peer buy a 512 MiB allocation.
 * Run in a child whose address space is capped 128 MiB above what it already maps (not under
 * ASan, whose shadow memory cannot live under such a cap). */
static void record_list_costs_no_more_than_its_bytes(void **state)
{
    (void)state;
    const uint32_t n = 1u << 20;
    spw_buf b = {0};
    uint8_t head[] = {0, 0, 0, 0, 0x93, 0x2b, 0x00, 0x91, 0xdd, (uint8_t)(n >> 24),
                      (uint8_t)(n >> 16), (uint8_t)(n >> 8), (uint8_t)n};
    uint32_t body = (uint32_t)(sizeof head - 4 + n);
    head[0] = (uint8_t)(body >> 24);
    head[1] = (uint8_t)(body >> 16);
    head[2] = (uint8_t)(body >> 8);
    head[3] = (uint8_t)body;
    spw_buf_append(&b, head, sizeof head);
    uint8_t *zeros = calloc(n, 1);
    assert_non_null(zeros);
    spw_buf_append(&b, zeros, n);
    free(zeros);
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
#ifndef SPW_UNDER_ASAN
        long pages = 0;
        FILE *f = fopen("/proc/self/statm", "r");
        if (f == NULL || fscanf(f, "%ld", &pages) != 1)
            _exit(90);
        fclose(f);
        rlim_t cap = (rlim_t)pages * (rlim_t)sysconf(_SC_PAGESIZE) + (128u << 20);
        struct rlimit rl = {cap, cap};
        if (setrlimit(RLIMIT_AS, &rl) != 0)
            _exit(91);
#endif
        proto_limits lim;
        proto_limits_default(&lim);
        msgpack_zone z;
        msgpack_zone_init(&z, 4096);
        proto_msg m;
        int rc = proto_decode(b.data, b.len, &lim, &z, &m);
        msgpack_zone_destroy(&z);
        _exit(rc == SPW_EMALFORMED ? 0 : rc == SPW_ENOMEM ? 92 : 93);
    }
    int st = 0;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    spw_buf_release(&b);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
        fail_msg("decoding 1 Mi zero-byte records: child status %d (92: out of memory, 93: not "
                 "refused as malformed)", WIFEXITED(st) ? WEXITSTATUS(st) : -WTERMSIG(st));
}

/* A msgpack array header of n items. */
static void put_arr_hdr(spw_buf *b, uint32_t n)
{
    uint8_t h[5] = {0xdd, (uint8_t)(n >> 24), (uint8_t)(n >> 16), (uint8_t)(n >> 8), (uint8_t)n};
    if (n < 16)
        spw_buf_append(b, (uint8_t[]){(uint8_t)(0x90 | n)}, 1);
    else
        spw_buf_append(b, h, sizeof h);
}

/* A SUBMIT frame of ntask tasks with nargs six-byte arguments each, into b. */
static void make_wide_submit(spw_buf *b, uint32_t ntask, uint32_t nargs)
{
    spw_buf_append(b, (uint8_t[]){0, 0, 0, 0}, 4);
    put_arr_hdr(b, 3);
    spw_buf_append(b, (uint8_t[]){0x0f, 0x01}, 2);
    put_arr_hdr(b, 5);
    spw_buf_append(b, (uint8_t[]){0x01, 0x00, 0x00, 0x00}, 4);
    put_arr_hdr(b, ntask);
    for (uint32_t t = 0; t < ntask; t++) {
        put_arr_hdr(b, 5);
        uint8_t id[18] = {0xc4, 16};
        id[9] = 1;
        id[14] = (uint8_t)((t + 1) >> 24), id[15] = (uint8_t)((t + 1) >> 16);
        id[16] = (uint8_t)((t + 1) >> 8), id[17] = (uint8_t)(t + 1);
        spw_buf_append(b, id, sizeof id);
        spw_buf_append(b, (uint8_t[]){0xa0}, 1);
        put_arr_hdr(b, nargs);
        for (uint32_t a = 0; a < nargs; a++)
            spw_buf_append(b, (uint8_t[]){0x95, 0x00, 0xc0, 0xc0, 0x00, 0x00}, 6);
        spw_buf_append(b, (uint8_t[]){0x00, 0xa0}, 2);
    }
    uint32_t body = (uint32_t)(b->len - 4);
    b->data[0] = (uint8_t)(body >> 24), b->data[1] = (uint8_t)(body >> 16);
    b->data[2] = (uint8_t)(body >> 8), b->data[3] = (uint8_t)body;
}

/* 1,000 tasks of 1,000 six-byte arguments: a 6 MB frame of 6 million decoded values (24 bytes
 * and more each), past what one frame may make; with 100 arguments each it decodes. */
static void many_small_values_refused(void **state)
{
    (void)state;
    proto_limits lim;
    proto_limits_default(&lim);
    for (int k = 0; k < 2; k++) {
        spw_buf b = {0};
        make_wide_submit(&b, 1000, k == 0 ? 100 : 1000);
        proto_msg m;
        msgpack_zone z;
        msgpack_zone_init(&z, 4096);
        int rc = proto_decode(b.data, b.len, &lim, &z, &m);
        msgpack_zone_destroy(&z);
        if (k == 0)
            assert_int_equal(rc, (int)b.len);
        else
            assert_int_equal(rc, SPW_EMALFORMED);
        spw_buf_release(&b);
    }
}

/* A batch whose records are one byte each: each would be marked bad, but room for all of them
 * (TASK_DONES records of 6 fields, 144 bytes) would be taken first, 144 times the frame. More
 * records than the bytes could hold as whole records fail the frame; a batch with one record
 * of one byte among whole ones still decodes, that record marked. */
static void batch_of_one_byte_records_refused(void **state)
{
    (void)state;
    proto_limits lim;
    proto_limits_default(&lim);
    for (int k = 0; k < 2; k++) {
        spw_buf b = {0};
        proto_enc e;
        proto_enc_begin(&e, &b, PROTO_TASK_DONES, 9, 1);
        uint32_t n = k == 0 ? 100000 : 3;
        proto_put_arr(&e, n);
        for (uint32_t i = 0; i < n; i++) {
            if (k == 0 || i == 1) {
                proto_put_u(&e, 7); /* not a record */
                continue;
            }
            put_done_rec(&e, (uint64_t)i + 1, false);
        }
        assert_true(proto_enc_end(&e, UINT32_MAX) > 0);
        msgpack_zone z;
        msgpack_zone_init(&z, 4096);
        proto_msg m;
        int rc = proto_decode(b.data, b.len, &lim, &z, &m);
        if (k == 0) {
            assert_int_equal(rc, SPW_EMALFORMED);
        } else {
            assert_int_equal(rc, (int)b.len);
            const proto_val *recs = &m.f[F_DONES_RECS];
            assert_int_equal(recs->arr.n, 3);
            assert_false(PROTO_REC(recs, 0)[R_DONE_ID].bad);
            assert_true(PROTO_REC(recs, 1)[R_DONE_ID].bad);
            assert_false(PROTO_REC(recs, 2)[R_DONE_ID].bad);
        }
        msgpack_zone_destroy(&z);
        spw_buf_release(&b);
    }
}

static void list_limit_enforced(void **state)
{
    (void)state;
    spw_buf b = {0};
    proto_enc e;
    proto_enc_begin(&e, &b, PROTO_RELEASE, 0, 1);
    proto_put_arr(&e, 100);
    for (int i = 0; i < 100; i++)
        proto_put_id(&e, SAMPLE_ID1);
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
        if (!proto_sample_encode(t, &b))
            continue;
        size_t body = b.len - 4;
        for (size_t cut = 1; cut < body; cut++) {
            spw_buf f = {0};
            proto_sample_frame(&f, b.data + 4, body - cut);
            msgpack_zone z;
            msgpack_zone_init(&z, 4096);
            proto_limits lim;
            proto_limits_default(&lim);
            proto_msg m;
            int rc = proto_decode(f.data, f.len, &lim, &z, &m);
            if (rc >= 0 && t != PROTO_STATUS_REQ && t != PROTO_PING && t != PROTO_PONG)
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
    spw_id_hex(SAMPLE_ID1, hex);
    assert_string_equal(hex, "01020304050607081112131415161718");
    spw_id back;
    assert_int_equal(spw_id_parse(hex, &back), 0);
    assert_true(spw_id_eq(back, SAMPLE_ID1));
    assert_int_equal(spw_id_parse("0102", &back), SPW_EINVAL);
    assert_int_equal(spw_id_parse("0102030405060708111213141516171g", &back), SPW_EINVAL);
    uint8_t raw[16];
    spw_id_to_bytes(SAMPLE_ID1, raw);
    assert_true(spw_id_eq(spw_id_from_bytes(raw), SAMPLE_ID1));
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
    /* A percentage of memory is a number in (0, 100]; "nan" is none (strtod reads it). */
    assert_int_equal(spw_capacity_parse("50%", &v), 0);
    assert_true(v > 0);
    v = 7;
    assert_int_equal(spw_capacity_parse("nan%", &v), SPW_EINVAL);
    assert_int_equal(spw_capacity_parse("-nan%", &v), SPW_EINVAL);
    assert_int_equal(spw_capacity_parse("0%", &v), SPW_EINVAL);
    assert_int_equal(spw_capacity_parse("101%", &v), SPW_EINVAL);
    assert_int_equal(v, 7);
    char host[64];
    int port;
    assert_int_equal(spw_addr_split("127.0.0.1:8080", host, &port), 0);
    assert_string_equal(host, "127.0.0.1");
    assert_int_equal(port, 8080);
    assert_int_equal(spw_addr_split("localhost:0", host, &port), 0);
    assert_string_equal(host, "localhost");
    assert_int_equal(spw_addr_split("nocolon", host, &port), SPW_EINVAL);
    assert_int_equal(spw_addr_split("h:70000", host, &port), SPW_EINVAL);
}

/* A signal for a daemon's signalfd stays pending, unhandled, until the loop reads it, once. */
static void signals_wait_on_their_descriptor(void **state)
{
    (void)state;
    static const int sigs[] = {SIGUSR2, 0};
    int fd = spw_signalfd(sigs);
    assert_true(fd >= 0);
    assert_int_equal(spw_signalfd_next(fd), 0);
    raise(SIGUSR2); /* blocked: its default action (exit) does not happen */
    assert_int_equal(spw_signalfd_next(fd), SIGUSR2);
    assert_int_equal(spw_signalfd_next(fd), 0);
    close(fd);
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGUSR2);
    pthread_sigmask(SIG_UNBLOCK, &set, NULL);
}

static void addresses_with_names_and_ipv6_parse(void **state)
{
    (void)state;
    spw_addr a;
    assert_int_equal(spw_addr_parse("host1:7400", -1, &a), 0);
    assert_string_equal(a.host, "host1");
    assert_int_equal(a.port, 7400);
    assert_false(a.numeric);
    assert_false(a.ipv6);
    assert_int_equal(spw_addr_parse("10.213.0.2:0", -1, &a), 0);
    assert_true(a.numeric);
    assert_false(a.ipv6);
    assert_int_equal(a.port, 0);
    assert_int_equal(spw_addr_parse("[::1]:7400", -1, &a), 0);
    assert_string_equal(a.host, "::1");
    assert_true(a.numeric);
    assert_true(a.ipv6);
    assert_int_equal(spw_addr_parse("[::]:0", -1, &a), 0);
    assert_true(spw_addr_host_is_wildcard(a.host));
    assert_int_equal(spw_addr_parse("0.0.0.0:0", -1, &a), 0);
    assert_true(spw_addr_host_is_wildcard(a.host));
    assert_false(spw_addr_host_is_wildcard("127.0.0.1"));
    assert_false(spw_addr_host_is_wildcard("host1"));
    assert_int_equal(spw_addr_parse("[fe80::1%eth0]:1", -1, &a), 0);
    assert_string_equal(a.host, "fe80::1%eth0");
    assert_int_equal(spw_addr_parse("node-7.example_net.org:65535", -1, &a), 0);
    /* The port may be left out only where the caller has a default. */
    assert_int_equal(spw_addr_parse("host2", 9000, &a), 0);
    assert_int_equal(a.port, 9000);
    assert_int_equal(spw_addr_parse("[::1]", 5, &a), 0);
    assert_int_equal(a.port, 5);
    assert_int_equal(spw_addr_parse("host2", -1, &a), SPW_EINVAL);
    /* Malformed. */
    assert_int_equal(spw_addr_parse("::1:7400", -1, &a), SPW_EINVAL);  /* no brackets */
    assert_int_equal(spw_addr_parse("[::1:7400", -1, &a), SPW_EINVAL); /* unclosed */
    assert_int_equal(spw_addr_parse("[host1]:7400", -1, &a), SPW_EINVAL);
    assert_int_equal(spw_addr_parse("[::1]7400", -1, &a), SPW_EINVAL);
    assert_int_equal(spw_addr_parse(":7400", -1, &a), SPW_EINVAL);
    assert_int_equal(spw_addr_parse("h:", -1, &a), SPW_EINVAL);
    assert_int_equal(spw_addr_parse("h:-1", -1, &a), SPW_EINVAL);
    assert_int_equal(spw_addr_parse("h:65536", -1, &a), SPW_EINVAL);
    assert_int_equal(spw_addr_parse("h:12x", -1, &a), SPW_EINVAL);
    assert_int_equal(spw_addr_parse("bad host:1", -1, &a), SPW_EINVAL);
    assert_int_equal(spw_addr_parse("-lead:1", -1, &a), SPW_EINVAL);
    assert_int_equal(spw_addr_parse("", -1, &a), SPW_EINVAL);
    assert_int_equal(spw_addr_parse(NULL, -1, &a), SPW_EINVAL);
    char longname[400];
    memset(longname, 'a', 300);
    strcpy(longname + 300, ":1");
    assert_int_equal(spw_addr_parse(longname, -1, &a), SPW_ENAMETOOLONG);
    /* Formatting. */
    char out[SPW_ADDR_MAX];
    assert_string_equal(spw_addr_join("::1", 7400, out, sizeof out), "[::1]:7400");
    assert_string_equal(spw_addr_join("host1", 1, out, sizeof out), "host1:1");
    struct sockaddr_in6 sin6 = {0};
    sin6.sin6_family = AF_INET6;
    sin6.sin6_port = htons(99);
    inet_pton(AF_INET6, "::ffff:10.1.2.3", &sin6.sin6_addr);
    assert_int_equal(spw_addr_from_sockaddr((struct sockaddr *)&sin6, out, sizeof out), 0);
    assert_string_equal(out, "10.1.2.3:99");
    inet_pton(AF_INET6, "fd00::5", &sin6.sin6_addr);
    assert_int_equal(spw_addr_from_sockaddr((struct sockaddr *)&sin6, out, sizeof out), 0);
    assert_string_equal(out, "[fd00::5]:99");
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
    for (int nf = 3; nf <= 7; nf++) {
        spw_buf b = {0};
        proto_enc e;
        proto_enc_begin(&e, &b, PROTO_PUT_PLACE, 1, (uint32_t)nf);
        proto_put_id(&e, SAMPLE_ID1);
        proto_put_u(&e, 100);
        proto_put_str(&e, "site");
        if (nf > 3)
            proto_put_u(&e, 0);
        if (nf > 4)
            proto_put_str(&e, "host-a");
        if (nf > 5)
            proto_put_u(&e, 1);
        if (nf > 6)
            proto_put_u(&e, 1);
        proto_enc_end(&e, UINT32_MAX);
        int rc = proto_decode(b.data, b.len, &lim, &z, &m);
        if (nf == 3 || nf == 7) {
            assert_int_equal(rc, SPW_EMALFORMED);
        } else {
            assert_int_equal(rc, (int)b.len);
            assert_int_equal(m.f[F_PUTP_HOSTID].nil, nf == 4);
            assert_int_equal(m.f[F_PUTP_CHUNK_MAX].nil, nf < 6);
            if (nf >= 5)
                assert_int_equal(m.f[F_PUTP_HOSTID].bin.len, 6);
        }
        msgpack_zone_clear(&z);
        spw_buf_release(&b);
    }
    msgpack_zone_destroy(&z);
}

/* proto_split_payload on every frame: those ending in a byte string (chunks of object data)
 * split into a head that decodes to the same message with the field empty, and the payload at
 * the end; every shorter prefix needs more bytes; other frames do not split. */
static void payload_splits_off_every_data_frame(void **state)
{
    (void)state;
    proto_limits lim;
    proto_limits_default(&lim);
    msgpack_zone z;
    msgpack_zone_init(&z, 4096);
    uint8_t head[128];
    size_t head_len, data_off;
    uint64_t data_len;
    uint32_t field;
    int split = 0;
    for (uint32_t t = 0; t < PROTO_TYPE_MAX; t++) {
        spw_buf b = {0};
        if (!proto_sample_encode(t, &b)) {
            spw_buf_release(&b);
            continue;
        }
        int rc = proto_split_payload(b.data, b.len, sizeof head, head, &head_len, &data_off,
                                     &data_len, &field);
        bool data_frame = t == PROTO_OBJ_WRITE || t == PROTO_OBJ_DATA;
        if (!data_frame) {
            /* Frames ending in a byte string of another kind may split too; these do not. */
            if (t == PROTO_OBJ_READ || t == PROTO_SUBMIT || t == PROTO_STATUS || t == PROTO_OK)
                assert_int_equal(rc, -1);
            spw_buf_release(&b);
            continue;
        }
        if (rc != 1)
            fail_msg("%s: split returned %d", proto_type_name(t), rc);
        split++;
        assert_int_equal(data_off + data_len, b.len);
        proto_msg whole, h;
        assert_int_equal(proto_decode(b.data, b.len, &lim, &z, &whole), (int)b.len);
        assert_int_equal(proto_decode(head, head_len, &lim, &z, &h), (int)head_len);
        assert_int_equal(h.type, whole.type);
        assert_int_equal(h.req, whole.req);
        assert_int_equal(field, whole.nf - 1);
        assert_int_equal(h.f[field].bin.len, 0);
        assert_int_equal(whole.f[field].bin.len, data_len);
        assert_ptr_equal(whole.f[field].bin.ptr, b.data + data_off);
        for (uint32_t i = 0; i < field; i++)
            assert_memory_equal(&h.f[i].u, &whole.f[i].u, sizeof h.f[i].u);
        for (size_t n = 0; n < data_off; n++)
            if (proto_split_payload(b.data, n, sizeof head, head, &head_len, &data_off,
                                    &data_len, &field) != 0)
                fail_msg("%s: a prefix of %zu bytes split", proto_type_name(t), n);
        /* A head longer than allowed does not split, however many bytes have come. */
        assert_int_equal(proto_split_payload(b.data, b.len, 16, head, &head_len, &data_off,
                                             &data_len, &field),
                         -1);
        msgpack_zone_clear(&z);
        spw_buf_release(&b);
    }
    assert_int_equal(split, 2);
    /* Malformed shapes: a byte string that is not last, one that overruns the frame. */
    for (size_t i = 0; i < proto_bad_body_count; i++) {
        spw_buf b = {0};
        proto_sample_frame(&b, proto_bad_bodies[i].body, proto_bad_bodies[i].len);
        int rc = proto_split_payload(b.data, b.len, sizeof head, head, &head_len, &data_off,
                                     &data_len, &field);
        if (rc == 1 && data_off + data_len != b.len)
            fail_msg("%s: split past the frame", proto_bad_bodies[i].name);
        spw_buf_release(&b);
    }
    static const uint8_t short_bin[] = {0, 0, 0, 7, 0x93, 0x21, 0x00, 0x91, 0xc4, 0x05, 0x01};
    assert_int_equal(proto_split_payload(short_bin, sizeof short_bin, sizeof head, head,
                                         &head_len, &data_off, &data_len, &field),
                     -1); /* the byte string claims more than the frame holds */
    msgpack_zone_destroy(&z);
}

/* ------------------------------------------------- local attach, fake worker */

/* Sends the frame in b with the descriptors fds[0..nfds) attached (SCM_RIGHTS). */
static void fake_send(int sock, const spw_buf *b, const int *fds, int nfds)
{
    struct iovec iov = {b->data, b->len};
    union {
        char buf[CMSG_SPACE(4 * sizeof(int))];
        struct cmsghdr align;
    } ctl;
    memset(&ctl, 0, sizeof ctl);
    struct msghdr mh = {0};
    mh.msg_iov = &iov;
    mh.msg_iovlen = 1;
    if (nfds > 0) {
        mh.msg_control = ctl.buf;
        mh.msg_controllen = CMSG_SPACE((size_t)nfds * sizeof(int));
        struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
        cm->cmsg_level = SOL_SOCKET;
        cm->cmsg_type = SCM_RIGHTS;
        cm->cmsg_len = CMSG_LEN((size_t)nfds * sizeof(int));
        memcpy(CMSG_DATA(cm), fds, (size_t)nfds * sizeof(int));
    }
    if (sendmsg(sock, &mh, MSG_NOSIGNAL) != (ssize_t)b->len)
        _exit(10);
}

/* Reads one frame into b and decodes it; exits the (child) process on any failure. */
static void fake_recv(int sock, spw_buf *b, msgpack_zone *z, proto_msg *m, uint32_t type)
{
    proto_limits lim;
    proto_limits_default(&lim);
    spw_buf_reset(b);
    for (;;) {
        int rc = proto_decode(b->data, b->len, &lim, z, m);
        if (rc > 0)
            break;
        if (rc < 0 || spw_buf_reserve(b, 4096) != 0)
            _exit(11);
        ssize_t n = recv(sock, b->data + b->len, b->cap - b->len, 0);
        if (n <= 0)
            _exit(12);
        b->len += (size_t)n;
    }
    if (m->type != type)
        _exit(13);
}

/* A fake worker with no secret on the listening socket lsock: answers one local attach
 * properly, except that it attaches two stray memfds named "spw-stray" to CHALLENGE and one
 * more to ARENA, after the arena itself. Exits 0 once the client hung up. */
static void fake_worker(int lsock)
{
    int sock = accept(lsock, NULL, NULL);
    if (sock < 0)
        _exit(14);
    int stray[2] = {memfd_create("spw-stray", 0), memfd_create("spw-stray", 0)};
    int arena = memfd_create("spw-arena", 0);
    if (stray[0] < 0 || stray[1] < 0 || arena < 0 || ftruncate(arena, 1 << 16) != 0)
        _exit(15);
    spw_buf b = {0}, in = {0};
    msgpack_zone z;
    msgpack_zone_init(&z, 4096);
    proto_msg m;
    proto_enc e;
    uint8_t nonce[PROTO_NONCE_LEN], peer_nonce[PROTO_NONCE_LEN];
    randombytes_buf(nonce, sizeof nonce);
    proto_enc_challenge(&e, &b, 0,
                        &(proto_challenge_msg){.version = PROTO_VERSION,
                                               .nonce = {nonce, sizeof nonce},
                                               .role = PROTO_ROLE_WORKER});
    proto_enc_end(&e, UINT32_MAX);
    fake_send(sock, &b, stray, 2);
    fake_recv(sock, &in, &z, &m, PROTO_HELLO);
    memcpy(peer_nonce, m.f[F_HELLO_NONCE].bin.ptr, sizeof peer_nonce);
    uint8_t proof[PROTO_PROOF_LEN], role = PROTO_ROLE_WORKER;
    static const uint8_t no_key[1] = {0};
    crypto_auth_hmacsha256_state st;
    crypto_auth_hmacsha256_init(&st, no_key, 0);
    crypto_auth_hmacsha256_update(&st, (const uint8_t *)"spillway-welcome", 16);
    crypto_auth_hmacsha256_update(&st, peer_nonce, sizeof peer_nonce);
    crypto_auth_hmacsha256_update(&st, nonce, sizeof nonce);
    crypto_auth_hmacsha256_update(&st, &role, 1);
    crypto_auth_hmacsha256_final(&st, proof);
    spw_buf_reset(&b);
    proto_enc_welcome(&e, &b, 1,
                      &(proto_welcome_msg){.proof = {proof, sizeof proof},
                                           .session = 1,
                                           .inline_limit = 1024,
                                           .chunk = 65536,
                                           .max_frame = 1 << 20,
                                           .omit_token = true,
                                           .omit_resumed = true,
                                           .omit_nrecv = true});
    proto_enc_end(&e, UINT32_MAX);
    fake_send(sock, &b, NULL, 0);
    fake_recv(sock, &in, &z, &m, PROTO_ARENA_MAP);
    spw_buf_reset(&b);
    proto_enc_arena(&e, &b, m.req, &(proto_arena_msg){.capacity = 1 << 16});
    proto_enc_end(&e, UINT32_MAX);
    fake_send(sock, &b, (int[]){arena, stray[0]}, 2);
    char c;
    while (recv(sock, &c, 1, 0) > 0)
        ;
    _exit(0);
}

/* Descriptors a local socket's server attaches where none is expected (the handshake), or more
 * than the one expected (the arena), are closed by the client, never kept open: a
 * descriptor past the first in a message used to stay open in the client for good. */
static void local_attach_closes_descriptors_it_did_not_ask_for(void **state)
{
    (void)state;
    assert_true(sodium_init() >= 0);
    char name[64];
    snprintf(name, sizeof name, "@spw-test-fd-%d", (int)getpid());
    struct sockaddr_un sun = {.sun_family = AF_UNIX};
    memcpy(sun.sun_path + 1, name + 1, strlen(name) - 1);
    socklen_t alen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + strlen(name));
    int lsock = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(lsock >= 0);
    assert_int_equal(bind(lsock, (struct sockaddr *)&sun, alen), 0);
    assert_int_equal(listen(lsock, 1), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0)
        fake_worker(lsock);
    close(lsock);

    uv_loop_t loop;
    uv_loop_init(&loop);
    proto_ctx_opts o;
    proto_ctx_opts_default(&o);
    o.name = "test_proto";
    proto_ctx *ctx;
    assert_int_equal(proto_ctx_new(&loop, &o, &ctx), 0);
    int sock = -1, memfd = -1;
    uint64_t cap = 0;
    int rc = proto_local_attach(ctx, name, 10000, false, &sock, &memfd, &cap);
    proto_ctx_close(ctx, NULL, NULL);
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_int_equal(uv_loop_close(&loop), 0);
    assert_int_equal(rc, 0);
    assert_int_equal(cap, 1 << 16);
    assert_int_equal(test_memfds_named(0, "spw-arena"), 1);
    int stray = test_memfds_named(0, "spw-stray");
    close(sock);
    close(memfd);
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    assert_int_equal(stray, 0);
}

/* ----------------------------------- a resume asked for while the flusher runs */

typedef struct resume_fx {
    uv_loop_t loop;
    proto_ctx *ctx;
    proto_conn *a; /* paused; resumed from b's release callback or on_drain */
    proto_conn *b;
    uv_timer_t bound;
    spw_buf frame; /* the frame b sends borrowed */
    int got, released; /* a's messages; b's releases or drains */
    bool timed_out;
} resume_fx;

static void rf_finish(resume_fx *f)
{
    uv_timer_stop(&f->bound);
    uv_close((uv_handle_t *)&f->bound, NULL);
    proto_ctx_close(f->ctx, NULL, NULL);
}

static void rf_release(void *arg)
{
    resume_fx *f = arg;
    f->released++;
    proto_conn_resume(f->a);
}

static void rf_msg(proto_conn *c, const proto_msg *m)
{
    resume_fx *f = proto_conn_data(c);
    if (c == f->a && m->type == PROTO_ERROR && f->got++ == 0)
        rf_finish(f);
}

static void rf_close(proto_conn *c, int status)
{
    (void)c, (void)status;
}

static void rf_bound(uv_timer_t *t)
{
    resume_fx *f = t->data;
    f->timed_out = true;
    rf_finish(f);
}

/* A fixture cleared, and the socket pairs of a and b. */
static void rf_pairs(resume_fx *f, int sa[2], int sb[2])
{
    memset(f, 0, sizeof *f);
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sa), 0);
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sb), 0);
}

/* Opens connections a and b over the socket pairs' first ends with cbs, pauses a, and puts a
 * frame for a in the kernel (it waits there while a is paused). */
static void rf_start(resume_fx *f, int sa[2], int sb[2], const proto_conn_cbs *cbs)
{
    assert_int_equal(uv_loop_init(&f->loop), 0);
    proto_ctx_opts o;
    proto_ctx_opts_default(&o);
    o.name = "test_proto";
    assert_int_equal(proto_ctx_new(&f->loop, &o, &f->ctx), 0);
    assert_int_equal(proto_conn_open_fd(f->ctx, sa[0], cbs, f, &f->a), 0);
    assert_int_equal(proto_conn_open_fd(f->ctx, sb[0], cbs, f, &f->b), 0);
    proto_conn_pause(f->a);
    spw_buf in = {0};
    proto_enc_errorf(&in, 7, SPW_EPROTO, "for a");
    assert_int_equal(send(sa[1], in.data, in.len, MSG_NOSIGNAL), (ssize_t)in.len);
    spw_buf_release(&in);
}

/* Runs the loop until a has its message (the timer is a bound on failure only), then checks
 * that one release or drain resumed a and that a got its message once. */
static void rf_run(resume_fx *f, int sa[2], int sb[2])
{
    uv_timer_init(&f->loop, &f->bound);
    f->bound.data = f;
    uv_timer_start(&f->bound, rf_bound, 30000, 0);
    uv_run(&f->loop, UV_RUN_DEFAULT);
    assert_int_equal(uv_loop_close(&f->loop), 0);
    close(sa[1]);
    close(sb[1]);
    assert_int_equal(f->released, 1);
    assert_false(f->timed_out);
    assert_int_equal(f->got, 1);
}

/* A connection resumed from a callback the ctx's flusher runs (a borrowed buffer's release once
 * its bytes are written, or an on_drain) reads again. The flusher used to stop itself after
 * writing whatever a callback had just queued for resumption, so the connection stayed
 * unread until some unrelated frame restarted the flusher: with none, its peer's messages were
 * never delivered. */
static void resume_from_a_release_callback_is_not_lost(void **state)
{
    (void)state;
    resume_fx f;
    int sa[2], sb[2];
    rf_pairs(&f, sa, sb);
    const proto_conn_cbs cbs = {.on_msg = rf_msg, .on_close = rf_close};
    rf_start(&f, sa, sb, &cbs);
    /* b's borrowed frame goes out in one write from the flusher, whose release resumes a. */
    proto_enc_errorf(&f.frame, 8, SPW_EPROTO, "from b");
    assert_int_equal(proto_conn_send_raw_borrowed(f.b, f.frame.data, f.frame.len, rf_release, &f),
                     0);
    rf_run(&f, sa, sb);
    spw_buf_release(&f.frame);
}

static void rf_drain(proto_conn *c)
{
    resume_fx *f = proto_conn_data(c);
    f->released++;
    proto_conn_resume(f->a);
}

/* The same through on_drain, the way the scheduler and a worker's peer port resume a held
 * connection: output past the high-water mark that the flusher gets out in one write (the
 * socket's send buffer is made large enough for it, which needs CAP_NET_ADMIN). */
static void resume_from_on_drain_in_the_flusher_is_not_lost(void **state)
{
    (void)state;
    resume_fx f;
    int sa[2], sb[2];
    rf_pairs(&f, sa, sb);
    int big = 128 << 20;
    if (setsockopt(sb[0], SOL_SOCKET, SO_SNDBUFFORCE, &big, sizeof big) != 0) {
        close(sa[0]), close(sa[1]), close(sb[0]), close(sb[1]);
        skip();
    }
    const proto_conn_cbs cbs = {.on_msg = rf_msg, .on_close = rf_close, .on_drain = rf_drain};
    rf_start(&f, sa, sb, &cbs);
    size_t n = 40u << 20;
    uint8_t *data = calloc(1, n);
    assert_non_null(data);
    proto_enc e;
    proto_enc_obj_data(
        &e, proto_conn_out(f.b), 1,
        &(proto_obj_data_msg){.total = n, .flags = PROTO_CHUNK_LAST, .data = {NULL, n}});
    assert_int_equal(proto_conn_send_borrowed(f.b, &e, data, n, NULL, NULL), 0);
    assert_false(proto_conn_writable(f.b));
    rf_run(&f, sa, sb);
    free(data);
}

/* ------------------------------------------------------------ held output */

static void ho_msg(proto_conn *c, const proto_msg *m)
{
    (void)c, (void)m;
}

/* Bytes waiting at fd now, without blocking (0: none). */
static size_t ho_pending(int fd)
{
    uint8_t tmp[256];
    ssize_t n = recv(fd, tmp, sizeof tmp, MSG_DONTWAIT | MSG_PEEK);
    return n > 0 ? (size_t)n : 0;
}

/* Reads exactly want's bytes from fd and compares them. */
static void ho_expect(int fd, const spw_buf *want)
{
    uint8_t *got = malloc(want->len);
    size_t n = 0;
    while (n < want->len) {
        ssize_t r = recv(fd, got + n, want->len - n, 0);
        assert_true(r > 0);
        n += (size_t)r;
    }
    assert_memory_equal(got, want->data, want->len);
    free(got);
}

/* Output held on a gated connection (the scheduler's journal holds answers until what they
 * answer is written): nothing is written while held, however often the flusher runs, nor what
 * was queued after it (a borrowed buffer included); a release of an older epoch lets nothing
 * go; after the release of its epoch, a hold made before the flusher ran holds only what came
 * after the released part, which goes out alone; closing writes what is held. An ungated
 * connection's output is never held. */
static void held_output_waits_for_its_epoch_and_keeps_its_order(void **state)
{
    (void)state;
    int sa[2], sb[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sa), 0);
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sb), 0);
    uv_loop_t loop;
    assert_int_equal(uv_loop_init(&loop), 0);
    proto_ctx_opts o;
    proto_ctx_opts_default(&o);
    o.name = "test_proto";
    proto_ctx *ctx;
    assert_int_equal(proto_ctx_new(&loop, &o, &ctx), 0);
    const proto_conn_cbs cbs = {.on_msg = ho_msg, .on_close = rf_close};
    proto_conn *a, *b;
    assert_int_equal(proto_conn_open_fd(ctx, sa[0], &cbs, NULL, &a), 0);
    assert_int_equal(proto_conn_open_fd(ctx, sb[0], &cbs, NULL, &b), 0);
    proto_conn_set_gated(a, true);
    spw_buf f1 = {0}, f2 = {0}, f3 = {0}, f4 = {0}, want = {0};
    proto_enc_errorf(&f1, 1, SPW_EPROTO, "one");
    proto_enc_errorf(&f2, 2, SPW_EPROTO, "two, borrowed");
    proto_enc_errorf(&f3, 3, SPW_EPROTO, "three");
    proto_enc_errorf(&f4, 4, SPW_EPROTO, "four");
    assert_int_equal(proto_conn_send_raw(a, f1.data, f1.len), 0);
    assert_int_equal(proto_conn_send_raw(b, f1.data, f1.len), 0);
    proto_ctx_hold(ctx, 7);
    assert_int_equal(proto_conn_send_raw_borrowed(a, f2.data, f2.len, NULL, NULL), 0);
    assert_int_equal(proto_conn_send_raw(a, f3.data, f3.len), 0);
    for (int i = 0; i < 3; i++)
        uv_run(&loop, UV_RUN_NOWAIT);
    assert_int_equal(ho_pending(sa[1]), 0);
    ho_expect(sb[1], &f1); /* b is not gated */
    assert_int_equal(proto_conn_queued(a), f1.len + f2.len + f3.len);
    proto_ctx_release(ctx, 6);
    for (int i = 0; i < 3; i++)
        uv_run(&loop, UV_RUN_NOWAIT);
    assert_int_equal(ho_pending(sa[1]), 0);
    /* Released, and held again before the flusher ran: the released frame goes alone. */
    proto_ctx_release(ctx, 7);
    proto_ctx_hold(ctx, 8);
    for (int i = 0; i < 3; i++)
        uv_run(&loop, UV_RUN_NOWAIT);
    ho_expect(sa[1], &f1);
    assert_int_equal(ho_pending(sa[1]), 0);
    proto_ctx_release(ctx, 8);
    uv_run(&loop, UV_RUN_NOWAIT);
    spw_buf_append(&want, f2.data, f2.len);
    spw_buf_append(&want, f3.data, f3.len);
    ho_expect(sa[1], &want);
    /* Held again, then closed: the held frame goes out before the close. */
    assert_int_equal(proto_conn_send_raw(a, f4.data, f4.len), 0);
    proto_ctx_hold(ctx, 9);
    uv_run(&loop, UV_RUN_NOWAIT);
    assert_int_equal(ho_pending(sa[1]), 0);
    proto_conn_close(a, 0);
    proto_ctx_close(ctx, NULL, NULL);
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_int_equal(uv_loop_close(&loop), 0);
    ho_expect(sa[1], &f4);
    uint8_t end;
    assert_int_equal(recv(sa[1], &end, 1, 0), 0); /* and then the end */
    close(sa[1]);
    close(sb[1]);
    spw_buf_release(&f1);
    spw_buf_release(&f2);
    spw_buf_release(&f3);
    spw_buf_release(&f4);
    spw_buf_release(&want);
}

/* Plugin names: the hash of known bytes, its object id, and "NAME@PREFIX" parsed strictly. */
static void plugin_names_derive_from_the_bytes(void **state)
{
    (void)state;
    uint8_t h[PROTO_PLUGIN_HASH_LEN];
    char hex[PROTO_PLUGIN_HEX_LEN + 1];
    proto_plugin_hash("", 0, h);
    /* BLAKE2b-256 of the empty string. */
    assert_string_equal(proto_plugin_hex(h, hex),
                        "0e5751c026e543b2e8ab2eb06099daa1d1e5df47778f7787faab45cdf12fe3a8");
    spw_id id = proto_plugin_obj_id(h);
    assert_int_equal(id.hi, 0x0e5751c026e543b2ULL);
    assert_int_equal(spw_id_output_index(id), 1);
    const char *ok = "scale@0e5751c026e543b2";
    assert_ptr_equal(proto_plugin_fn_prefix(ok, strlen(ok)), ok + 6);
    static const char *const bad[] = {"scale", "@0e5751c026e543b2", "scale@0E5751C026E543B2",
                                      "scale@0e5751c026e543b", "scale@0e5751c026e543b2x",
                                      "scale#0e5751c026e543b2"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        assert_null(proto_plugin_fn_prefix(bad[i], strlen(bad[i])));
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(plugin_names_derive_from_the_bytes),
    cmocka_unit_test(signals_wait_on_their_descriptor),
    cmocka_unit_test(every_type_round_trips),
    cmocka_unit_test(fields_survive_round_trip),
    cmocka_unit_test(batch_marks_a_bad_record_and_keeps_the_rest),
    cmocka_unit_test(every_prefix_needs_more),
    cmocka_unit_test(byte_at_a_time_stream),
    cmocka_unit_test(malformed_table),
    cmocka_unit_test(record_list_costs_no_more_than_its_bytes),
    cmocka_unit_test(payload_splits_off_every_data_frame),
    cmocka_unit_test(oversized_frame_rejected_before_body),
    cmocka_unit_test(many_small_values_refused),
    cmocka_unit_test(batch_of_one_byte_records_refused),
    cmocka_unit_test(list_limit_enforced),
    cmocka_unit_test(truncated_frames_of_every_type_with_short_length),
    cmocka_unit_test(error_table_names_and_messages),
    cmocka_unit_test(ids_parse_and_print),
    cmocka_unit_test(sizes_and_addresses_parse),
    cmocka_unit_test(addresses_with_names_and_ipv6_parse),
    cmocka_unit_test(heap_counters_return_to_zero),
    cmocka_unit_test(optional_trailing_fields_may_be_absent),
    cmocka_unit_test(local_attach_closes_descriptors_it_did_not_ask_for),
    cmocka_unit_test(resume_from_a_release_callback_is_not_lost),
    cmocka_unit_test(resume_from_on_drain_in_the_flusher_is_not_lost),
    cmocka_unit_test(held_output_waits_for_its_epoch_and_keeps_its_order),
};

SPW_TEST_MAIN(tests)
