/*
 * Seed corpus generator for the fuzz targets (the CMake target spw_fuzz_gen; not a test).
 *
 *   spw_fuzz_gen <corpus-dir>
 *
 * writes <corpus-dir>/proto_decode/seed-* and <corpus-dir>/spill_record/seed-*, overwriting
 * files of the same name and leaving others (inputs found by fuzzing) alone.
 *
 * proto_decode seeds are frames from our own encoder: one valid sample of every message type
 * (tests/unit/proto_samples.c, shared with test_proto.c), the optional
 * field variants, multi-frame streams, and the malformed bodies of the same file, framed. spill_record seeds are a 4-byte little-endian expect_len followed by a
 * record from ost_rec_encode (compressible, incompressible, empty, 1 byte, just below and at the
 * zstd threshold, a large run) plus corrupted copies of them, one field broken in each.
 */
#include "spillway/proto.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "proto_samples.h"
#include "spill_record.h"

static const char *out_dir;
static int files_written;

static void fail(const char *what)
{
    fprintf(stderr, "spw_fuzz_gen: %s\n", what);
    exit(1);
}

static void write_file(const char *name, const void *data, size_t len)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", out_dir, name);
    FILE *f = fopen(path, "wb");
    if (f == NULL || (len > 0 && fwrite(data, 1, len, f) != len) || fclose(f) != 0) {
        fprintf(stderr, "spw_fuzz_gen: %s: %s\n", path, strerror(errno));
        exit(1);
    }
    files_written++;
}

static void make_dir(const char *root, const char *sub)
{
    static char dir[4096];
    snprintf(dir, sizeof dir, "%s/%s", root, sub);
    if (mkdir(root, 0777) != 0 && errno != EEXIST)
        fail("cannot create the corpus directory");
    if (mkdir(dir, 0777) != 0 && errno != EEXIST)
        fail("cannot create a target directory");
    out_dir = dir;
}

/* ------------------------------------------------------------ proto_decode */

/* Frames with the optional or newer fields in their other states. */
static void encode_variants(void)
{
    spw_buf b = {0};
    proto_enc e;

    proto_enc_begin(&e, &b, PROTO_HELLO, 1, 8); /* a client: no worker record */
    proto_put_u(&e, PROTO_VERSION);
    proto_put_u(&e, PROTO_ROLE_CLIENT);
    proto_put_bin(&e, SAMPLE_NONCE, 16);
    proto_put_bin(&e, SAMPLE_PROOF, 32);
    proto_put_u(&e, 4242);
    proto_put_str(&e, "host");
    proto_put_str(&e, "client");
    proto_put_nil(&e);
    proto_enc_end(&e, UINT32_MAX);
    write_file("seed-opt-hello-client", b.data, b.len);
    spw_buf_reset(&b);

    proto_enc_begin(&e, &b, PROTO_PUT_PLACE, 2, 5); /* with the newer host id */
    proto_put_id(&e, SAMPLE_ID1);
    proto_put_u(&e, 1000);
    proto_put_str(&e, "main.c:12");
    proto_put_u(&e, PROTO_PUT_CONTENT_ID);
    proto_put_str(&e, "host-a");
    proto_enc_end(&e, UINT32_MAX);
    write_file("seed-opt-put-place-hostid", b.data, b.len);
    spw_buf_reset(&b);

    proto_enc_begin(&e, &b, PROTO_OBJ_READ, 8, 4); /* with the newer flags */
    proto_put_id(&e, SAMPLE_ID1);
    proto_put_u(&e, 0);
    proto_put_u(&e, 6);
    proto_put_u(&e, PROTO_READ_FOLLOW);
    proto_enc_end(&e, UINT32_MAX);
    write_file("seed-opt-obj-read-follow", b.data, b.len);
    spw_buf_reset(&b);

    proto_enc_begin(&e, &b, PROTO_SUBMIT, 5, 5); /* a task pinned to a worker, inline args */
    proto_put_u(&e, 2);
    proto_put_u(&e, 0);
    proto_put_u(&e, 100);
    proto_put_u(&e, 1 << 20);
    proto_put_arr(&e, 2);
    for (int t = 0; t < 2; t++) {
        proto_put_arr(&e, 6);
        proto_put_id(&e, SAMPLE_ID1);
        proto_put_str(&e, "sum_f64");
        proto_put_arr(&e, 1);
        proto_put_arr(&e, 5);
        proto_put_u(&e, PROTO_ARG_OBJ);
        proto_put_nil(&e);
        proto_put_id(&e, SAMPLE_ID1);
        proto_put_u(&e, 0);
        proto_put_u(&e, 0);
        proto_put_u(&e, 0);
        proto_put_str(&e, "main.c:30");
        proto_put_str(&e, t == 0 ? "worker-1" : "");
    }
    proto_enc_end(&e, UINT32_MAX);
    write_file("seed-opt-submit-worker", b.data, b.len);
    spw_buf_reset(&b);

    proto_enc_begin(&e, &b, PROTO_TASK_DONE, 6, 6); /* a success with an inline result */
    proto_put_id(&e, SAMPLE_ID1);
    proto_put_i(&e, 0);
    proto_put_u(&e, 8);
    proto_put_bin(&e, "\x01\x02\x03\x04\x05\x06\x07\x08", 8);
    proto_put_str(&e, "");
    proto_put_u(&e, 1234);
    proto_enc_end(&e, UINT32_MAX);
    write_file("seed-opt-task-done-inline", b.data, b.len);
    spw_buf_reset(&b);

    /* A batch whose second record is bad (a string status), third not a record at all. */
    proto_enc_begin(&e, &b, PROTO_TASK_DONES, 6, 1);
    proto_put_arr(&e, 3);
    for (int i = 0; i < 2; i++) {
        proto_put_arr(&e, 6);
        proto_put_id(&e, SAMPLE_ID1);
        if (i == 0)
            proto_put_i(&e, 0);
        else
            proto_put_str(&e, "x");
        proto_put_u(&e, 0);
        proto_put_nil(&e);
        proto_put_str(&e, "");
        proto_put_u(&e, 7);
    }
    proto_put_u(&e, 1);
    proto_enc_end(&e, UINT32_MAX);
    write_file("seed-opt-task-dones-bad-record", b.data, b.len);
    spw_buf_reset(&b);

    proto_enc_begin(&e, &b, PROTO_LOCATION, 3, 6); /* not ready: no inline value, no locations */
    proto_put_id(&e, SAMPLE_ID1);
    proto_put_i(&e, SPW_ENOOBJ);
    proto_put_u(&e, 0);
    proto_put_nil(&e);
    proto_put_str(&e, "no such object");
    proto_put_arr(&e, 0);
    proto_enc_end(&e, UINT32_MAX);
    write_file("seed-opt-location-missing", b.data, b.len);
    spw_buf_reset(&b);

    proto_enc_begin(&e, &b, PROTO_EXEC, 11, 4); /* inline and view arguments */
    proto_put_id(&e, SAMPLE_ID1);
    proto_put_str(&e, "fill");
    proto_put_arr(&e, 2);
    proto_put_arr(&e, 4);
    proto_put_u(&e, PROTO_ARG_INLINE);
    proto_put_bin(&e, "abc", 3);
    proto_put_u(&e, 0);
    proto_put_u(&e, 0);
    proto_put_arr(&e, 4);
    proto_put_u(&e, PROTO_ARG_VIEW);
    proto_put_nil(&e);
    proto_put_u(&e, 4096);
    proto_put_u(&e, 10);
    proto_put_u(&e, 65536);
    proto_enc_end(&e, UINT32_MAX);
    write_file("seed-opt-exec-args", b.data, b.len);
    spw_buf_reset(&b);

    proto_enc_begin(&e, &b, PROTO_RELEASE, 4, 1); /* a longer list */
    proto_put_arr(&e, 40);
    for (int i = 0; i < 40; i++)
        proto_put_id(&e, (spw_id){(uint64_t)i, ~(uint64_t)i});
    proto_enc_end(&e, UINT32_MAX);
    write_file("seed-opt-release-40", b.data, b.len);
    spw_buf_reset(&b);

    proto_enc_errorf(&b, 77, SPW_EFRAMESIZE, "frame of %u bytes over the limit", 1u << 30);
    write_file("seed-opt-error-frame", b.data, b.len);
    spw_buf_release(&b);
}

static void encode_bad(void)
{
    char name[128];
    for (size_t i = 0; i < proto_bad_body_count; i++) {
        spw_buf b = {0};
        proto_sample_frame(&b, proto_bad_bodies[i].body, proto_bad_bodies[i].len);
        snprintf(name, sizeof name, "seed-bad-%s", proto_bad_bodies[i].name);
        write_file(name, b.data, b.len);
        spw_buf_release(&b);
    }
    static const uint8_t zero_len[4] = {0, 0, 0, 0};
    write_file("seed-bad-zero-length", zero_len, sizeof zero_len);
    static const uint8_t huge_len[4] = {0xff, 0xff, 0xff, 0xff};
    write_file("seed-bad-huge-length", huge_len, sizeof huge_len);
    static const uint8_t over_default[4] = {0x04, 0x00, 0x00, 0x01}; /* 64 MiB + 1 */
    write_file("seed-bad-over-default-max", over_default, sizeof over_default);

    /* PUT_PLACE with one field too few and one too many (optional_trailing_fields test). */
    for (uint32_t nf = 3; nf <= 6; nf += 3) {
        spw_buf b = {0};
        proto_enc e;
        proto_enc_begin(&e, &b, PROTO_PUT_PLACE, 1, nf);
        proto_put_id(&e, SAMPLE_ID1);
        proto_put_u(&e, 100);
        proto_put_str(&e, "site");
        if (nf > 3) {
            proto_put_u(&e, 0);
            proto_put_str(&e, "host-a");
            proto_put_u(&e, 1);
        }
        proto_enc_end(&e, UINT32_MAX);
        snprintf(name, sizeof name, "seed-bad-put-place-%u-fields", nf);
        write_file(name, b.data, b.len);
        spw_buf_release(&b);
    }

    /* A valid body under a length prefix that cuts it short. */
    spw_buf b = {0}, f = {0};
    proto_sample_encode(PROTO_SUBMIT, &b);
    proto_sample_frame(&f, b.data + 4, (b.len - 4) / 2);
    write_file("seed-bad-submit-cut-short", f.data, f.len);
    spw_buf_release(&f);
    spw_buf_release(&b);
}

static void encode_streams(void)
{
    spw_buf s = {0}, tmp = {0};

    for (uint32_t t = 0; t < PROTO_TYPE_MAX; t++)
        proto_sample_encode(t, &s);
    write_file("seed-stream-every-type", s.data, s.len);
    spw_buf_reset(&s);

    proto_sample_encode(PROTO_CHALLENGE, &s);
    proto_sample_encode(PROTO_HELLO, &s);
    proto_sample_encode(PROTO_WELCOME, &s);
    proto_sample_encode(PROTO_HEARTBEAT, &s);
    write_file("seed-stream-handshake", s.data, s.len);
    spw_buf_reset(&s);

    /* A malformed frame between two good ones: the reader skips it and goes on. */
    proto_sample_encode(PROTO_OK, &s);
    proto_sample_frame(&s, proto_bad_bodies[9].body, proto_bad_bodies[9].len);
    proto_sample_encode(PROTO_PUT_DONE, &s);
    static const uint8_t zero_len[4] = {0, 0, 0, 0};
    spw_buf_append(&s, zero_len, sizeof zero_len);
    proto_sample_encode(PROTO_OBJ_DATA, &s);
    write_file("seed-stream-skip-malformed", s.data, s.len);
    spw_buf_reset(&s);

    /* A complete frame, then half of the next. */
    proto_sample_encode(PROTO_SUBMIT, &s);
    proto_sample_encode(PROTO_TASK_RUN, &tmp);
    spw_buf_append(&s, tmp.data, tmp.len / 2);
    write_file("seed-stream-truncated-tail", s.data, s.len);
    spw_buf_reset(&s);
    spw_buf_reset(&tmp);

    /* A good frame, then a length over the default limit. */
    proto_sample_encode(PROTO_LOCATE, &s);
    static const uint8_t over[8] = {0x7f, 0xff, 0xff, 0xff, 0x93, 0x05, 0x00, 0x91};
    spw_buf_append(&s, over, sizeof over);
    write_file("seed-stream-then-oversize", s.data, s.len);
    spw_buf_reset(&s);

    /* Status and memory replies back to back, as spillway-ctl receives them. */
    proto_sample_encode(PROTO_STATUS_REQ, &s);
    proto_sample_encode(PROTO_STATUS, &s);
    proto_sample_encode(PROTO_MEMORY_OBJS, &s);
    proto_sample_encode(PROTO_MEMORY_OBJS, &s);
    proto_sample_encode(PROTO_MEMORY_END, &s);
    proto_sample_encode(PROTO_OBJ_LIST, &s);
    write_file("seed-stream-ctl-replies", s.data, s.len);
    spw_buf_release(&s);
    spw_buf_release(&tmp);
}

static void gen_proto(const char *root)
{
    make_dir(root, "proto_decode");
    char name[128];
    int samples = 0;
    for (uint32_t t = 0; t < PROTO_TYPE_MAX; t++) {
        spw_buf b = {0};
        if (proto_sample_encode(t, &b)) {
            snprintf(name, sizeof name, "seed-type-%s", proto_type_name(t));
            write_file(name, b.data, b.len);
            samples++;
        }
        spw_buf_release(&b);
    }
    if (samples != 53)
        fail("expected a sample of each of the 53 message types");
    encode_variants();
    encode_bad();
    encode_streams();
}

/* ------------------------------------------------------------ spill_record */

typedef struct seed_rec {
    uint8_t *buf; /* 4-byte expect_len, then the record */
    size_t len;
} seed_rec;

static void put_le32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}

static seed_rec make_rec(ZSTD_CCtx *cctx, const uint8_t *raw, size_t len)
{
    size_t cap = 4 + OST_REC_HDR + ZSTD_compressBound(len);
    seed_rec r = {malloc(cap), 0};
    if (r.buf == NULL)
        fail("out of memory");
    int64_t n = ost_rec_encode(cctx, 3, raw, len, r.buf + 4, cap - 4);
    if (n < OST_REC_HDR)
        fail("ost_rec_encode failed");
    put_le32(r.buf, (uint32_t)len);
    r.len = 4 + (size_t)n;
    return r;
}

/* Writes r as name, then a copy with byte off (of the record) xor'ed with x as name-suffix. */
static void write_corrupt(const seed_rec *r, const char *name, const char *suffix, size_t off,
                          uint8_t x)
{
    if (4 + off >= r->len)
        return;
    uint8_t *c = malloc(r->len);
    if (c == NULL)
        fail("out of memory");
    memcpy(c, r->buf, r->len);
    c[4 + off] ^= x;
    char full[160];
    snprintf(full, sizeof full, "%s-%s", name, suffix);
    write_file(full, c, r->len);
    free(c);
}

static void write_rec_family(const seed_rec *r, const char *name)
{
    write_file(name, r->buf, r->len);
    write_corrupt(r, name, "bad-magic", 0, 0x01);
    write_corrupt(r, name, "bad-version", 4, 0x02);
    write_corrupt(r, name, "bad-codec", 5, 0x01);
    write_corrupt(r, name, "bad-codec-2", 5, 0x03);
    write_corrupt(r, name, "bad-raw-len", 8, 0x01);
    write_corrupt(r, name, "bad-stored-len", 12, 0x01);
    write_corrupt(r, name, "bad-checksum", 16, 0x80);
    if (r->len > 4 + OST_REC_HDR) {
        write_corrupt(r, name, "bad-payload-first", OST_REC_HDR, 0x40);
        write_corrupt(r, name, "bad-payload-last", r->len - 5, 0x40);
    }

    char full[160];
    /* The caller expects one byte more than the record holds. */
    uint8_t *c = malloc(r->len);
    if (c == NULL)
        fail("out of memory");
    memcpy(c, r->buf, r->len);
    put_le32(c, (uint32_t)(c[0] | c[1] << 8 | c[2] << 16 | (uint32_t)c[3] << 24) + 1);
    snprintf(full, sizeof full, "%s-expect-more", name);
    write_file(full, c, r->len);
    free(c);
    /* The record cut short by one byte and cut to its header. */
    snprintf(full, sizeof full, "%s-truncated", name);
    write_file(full, r->buf, r->len - 1);
    if (r->len > 4 + OST_REC_HDR) {
        snprintf(full, sizeof full, "%s-header-only", name);
        write_file(full, r->buf, 4 + OST_REC_HDR);
    }
}

static void gen_spill(const char *root)
{
    make_dir(root, "spill_record");
    ZSTD_CCtx *cctx = ZSTD_createCCtx();
    if (cctx == NULL)
        fail("ZSTD_createCCtx");
    enum { BIG = 200 * 1024 };
    uint8_t *raw = malloc(BIG);
    if (raw == NULL)
        fail("out of memory");

    /* Compressible: text with repeats, 4 KiB -> zstd. */
    static const char text[] = "spillway spills objects to LMDB in zstd records; ";
    for (size_t i = 0; i < 4096; i++)
        raw[i] = (uint8_t)text[i % (sizeof text - 1)];
    seed_rec r = make_rec(cctx, raw, 4096);
    write_rec_family(&r, "seed-zstd-text");
    free(r.buf);

    /* Incompressible: xorshift bytes, 1 KiB -> raw. */
    uint64_t x = 0x9e3779b97f4a7c15ULL;
    for (size_t i = 0; i < 1024; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        raw[i] = (uint8_t)x;
    }
    r = make_rec(cctx, raw, 1024);
    write_rec_family(&r, "seed-raw-random");
    free(r.buf);

    /* Empty and one byte. */
    r = make_rec(cctx, raw, 0);
    write_rec_family(&r, "seed-empty");
    free(r.buf);
    raw[0] = 'x';
    r = make_rec(cctx, raw, 1);
    write_rec_family(&r, "seed-one-byte");
    free(r.buf);

    /* Either side of the zstd threshold (256 bytes): 255 stays raw, 256 compresses. */
    memset(raw, 'a', 256);
    r = make_rec(cctx, raw, 255);
    write_rec_family(&r, "seed-raw-255");
    free(r.buf);
    r = make_rec(cctx, raw, 256);
    write_rec_family(&r, "seed-zstd-256");
    free(r.buf);

    /* A large run: a tiny record that decodes to 200 KiB. */
    memset(raw, 0, BIG);
    r = make_rec(cctx, raw, BIG);
    write_rec_family(&r, "seed-zstd-zeros-200k");
    free(r.buf);

    /* Too short to hold a header. */
    static const uint8_t tiny[8] = {0, 0, 0, 0, 0x52, 0x57, 0x50, 0x53};
    write_file("seed-too-short", tiny, sizeof tiny);

    free(raw);
    ZSTD_freeCCtx(cctx);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s CORPUS_DIR (e.g. tests/fuzz/corpus)\n", argv[0]);
        return 2;
    }
    gen_proto(argv[1]);
    int proto_files = files_written;
    gen_spill(argv[1]);
    printf("spw_fuzz_gen: wrote %d proto_decode and %d spill_record seeds under %s\n", proto_files,
           files_written - proto_files, argv[1]);
    return 0;
}
