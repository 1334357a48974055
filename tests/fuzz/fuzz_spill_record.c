/*
 * Fuzz target for the spill record decoder, ost_rec_decode (objstore/src/spill_record.c).
 *
 * Input layout: a 4-byte little-endian selector, then the record. The selector, reduced modulo
 * FUZZ_MAX_EXPECT + 1, is the expect_len the caller believes the chunk has (a value up to
 * 1 MiB is taken as is, so a seed can name the right length). dst is a heap block of exactly
 * expect_len bytes, so any write past it trips ASan, and the record is the tail of the input,
 * so any read past it does too. One ZSTD_DCtx is reused across calls, as the store reuses one
 * per thread; a failed call must not poison it for the next.
 *
 * Checked besides "no crash": the decoder returns 0 or SPW_ECORRUPT and nothing else; on
 * success the header's raw length equals expect_len and the checksum holds: over dst for a
 * version 1 record, over the stored bytes for version 2, whose zstd payload must then also
 * decode, on a context of its own, to exactly dst.
 */
#include "spill_record.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

#include "spillway/base.h"

#define FUZZ_MAX_EXPECT (1u << 20)      /* largest dst the selector can ask for */
#define FUZZ_MAX_ROUND_TRIP (64u << 10) /* largest input used for the encode round trip */

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "fuzz_spill_record: %s:%d: check failed: %s: ", __FILE__, __LINE__,    \
                    #cond);                                                                        \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fputc('\n', stderr);                                                                   \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

static volatile uint64_t sink;

static uint32_t le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* Header fields are in host order (spill_record.c writes them with memcpy). */
static uint32_t hdr32(const uint8_t *p)
{
    uint32_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

static uint64_t hdr64(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

static ZSTD_DCtx *dctx_get(void)
{
    static ZSTD_DCtx *dctx; /* kept for the process, like the store's per-thread context */
    if (dctx == NULL) {
        dctx = ZSTD_createDCtx();
        CHECK(dctx != NULL, "ZSTD_createDCtx");
    }
    return dctx;
}

static ZSTD_CCtx *cctx_get(void)
{
    static ZSTD_CCtx *cctx;
    if (cctx == NULL) {
        cctx = ZSTD_createCCtx();
        CHECK(cctx != NULL, "ZSTD_createCCtx");
    }
    return cctx;
}

/* A version 2 zstd record's payload decodes, on a fresh context, to exactly dst. */
static void check_zstd_payload(const uint8_t *rec, size_t reclen, const uint8_t *dst,
                               size_t expect_len)
{
    uint8_t *again = malloc(expect_len > 0 ? expect_len : 1);
    CHECK(again != NULL, "malloc(%zu)", expect_len);
    size_t n = ZSTD_decompress(again, expect_len, rec + OST_REC_HDR, reclen - OST_REC_HDR);
    CHECK(!ZSTD_isError(n) && n == expect_len, "accepted a payload that decodes to %zu bytes",
          ZSTD_isError(n) ? 0 : n);
    CHECK(expect_len == 0 || memcmp(again, dst, expect_len) == 0, "dst differs from the payload");
    free(again);
}

/* Decodes rec (reclen bytes) expecting expect_len bytes and checks the outcome. */
static void decode_one(const uint8_t *rec, size_t reclen, size_t expect_len)
{
    uint8_t *dst = malloc(expect_len);
    CHECK(dst != NULL || expect_len == 0, "malloc(%zu)", expect_len);
    int rc = ost_rec_decode(dctx_get(), rec, reclen, dst, expect_len);
    CHECK(rc == 0 || rc == SPW_ECORRUPT, "unexpected return %d (%s)", rc, spw_err_name(rc));
    if (rc == 0) {
        CHECK(reclen >= OST_REC_HDR, "accepted a %zu-byte record", reclen);
        CHECK(hdr32(rec + 8) == expect_len, "accepted raw_len %u for expect_len %zu",
              hdr32(rec + 8), expect_len);
        CHECK(hdr32(rec + 12) == reclen - OST_REC_HDR, "accepted stored_len %u for %zu bytes",
              hdr32(rec + 12), reclen - OST_REC_HDR);
        if (rec[4] == OST_REC_VERSION_RAWSUM) {
            /* Reads every byte of dst: a short write shows up as a checksum mismatch. */
            CHECK(XXH3_64bits(dst, expect_len) == hdr64(rec + 16), "checksum of dst differs");
        } else {
            CHECK(rec[4] == OST_REC_VERSION, "accepted version %u", rec[4]);
            CHECK(XXH3_64bits(rec + OST_REC_HDR, reclen - OST_REC_HDR) == hdr64(rec + 16),
                  "checksum of the stored bytes differs");
            if (rec[5] == OST_REC_ZSTD)
                check_zstd_payload(rec, reclen, dst, expect_len);
        }
        if (rec[5] == OST_REC_RAW && expect_len > 0)
            CHECK(memcmp(dst, rec + OST_REC_HDR, expect_len) == 0, "raw record copied wrong");
        sink += expect_len;
    }
    free(dst);
}

/* The record bytes themselves (up to 64 KiB) are also used as raw data for a round trip through
 * ost_rec_encode and through ost_rec_try_zstd / ost_rec_raw_header, which must decode back to
 * the same bytes. */
/* raw must survive both encoding paths bit for bit. */
static void round_trip(const uint8_t *raw, size_t len, int level)
{
    size_t cap = OST_REC_HDR + ZSTD_compressBound(len);
    uint8_t *rec = malloc(cap);
    uint8_t *back = malloc(len > 0 ? len : 1);
    CHECK(rec != NULL && back != NULL, "malloc");

    int64_t n = ost_rec_encode(cctx_get(), level, raw, len, rec, cap);
    CHECK(n >= OST_REC_HDR && (size_t)n <= cap, "ost_rec_encode returned %lld for %zu bytes",
          (long long)n, len);
    int rc = ost_rec_decode(dctx_get(), rec, (size_t)n, back, len);
    CHECK(rc == 0, "record from ost_rec_encode (%zu bytes, codec %u) did not decode: %d", len,
          rec[5], rc);
    CHECK(len == 0 || memcmp(back, raw, len) == 0, "ost_rec_encode round trip changed bytes");

    n = ost_rec_try_zstd(cctx_get(), level, raw, len, rec, cap);
    CHECK(n >= 0 && (size_t)n <= cap, "ost_rec_try_zstd returned %lld", (long long)n);
    if (n == 0) {
        ost_rec_raw_header(rec, raw, len);
        if (len > 0)
            memcpy(rec + OST_REC_HDR, raw, len);
        n = (int64_t)(OST_REC_HDR + len);
    }
    rc = ost_rec_decode(dctx_get(), rec, (size_t)n, back, len);
    CHECK(rc == 0, "record from ost_rec_try_zstd/raw_header did not decode: %d", rc);
    CHECK(len == 0 || memcmp(back, raw, len) == 0, "try_zstd round trip changed bytes");
    free(back);
    free(rec);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 4)
        return 0;
    uint32_t sel = le32(data);
    size_t expect_len = sel % (FUZZ_MAX_EXPECT + 1);
    const uint8_t *rec = data + 4;
    size_t reclen = size - 4;

    decode_one(rec, reclen, expect_len);
    /* The length the record claims for itself: gets past the length check without the fuzzer
     * having to match the selector to the header. */
    if (reclen >= OST_REC_HDR && hdr32(rec + 8) <= FUZZ_MAX_EXPECT && hdr32(rec + 8) != expect_len)
        decode_one(rec, reclen, hdr32(rec + 8));

    if (reclen <= FUZZ_MAX_ROUND_TRIP)
        round_trip(rec, reclen, 1 + (int)(sel >> 30));
    return 0;
}
