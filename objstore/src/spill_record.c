/* Spill record codec; see spill_record.h. */
#include "spill_record.h"

#include <stdbool.h>
#include <string.h>

#include <xxhash.h>
#ifdef SPW_HAVE_XXH_DISPATCH
#include <xxh_x86dispatch.h>
#endif

#include "spillway/base.h"

/* The checksum of stored bytes: XXH3-64, through the library's entry point that uses the
 * widest vector unit of the machine where it has one (the same hash either way). */
static uint64_t rec_sum(const void *p, size_t n)
{
#ifdef SPW_HAVE_XXH_DISPATCH
    return XXH3_64bits_dispatch(p, n);
#else
    return XXH3_64bits(p, n);
#endif
}

static void put32(uint8_t *p, uint32_t v)
{
    memcpy(p, &v, 4);
}

static void put64(uint8_t *p, uint64_t v)
{
    memcpy(p, &v, 8);
}

static uint32_t get32(const uint8_t *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

static uint64_t get64(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

static void write_header(uint8_t *out, uint8_t codec, uint32_t raw_len, uint32_t stored,
                         uint64_t checksum)
{
    put32(out, OST_REC_MAGIC);
    out[4] = OST_REC_VERSION;
    out[5] = codec;
    out[6] = out[7] = 0;
    put32(out + 8, raw_len);
    put32(out + 12, stored);
    put64(out + 16, checksum);
    put64(out + 24, 0);
}

/* A chunk is stored compressed only when that saves at least 1/ZSTD_SAVING of its bytes:
 * compressing it and decoding it again at level 1 takes longer than writing and reading that
 * many bytes more on a disk of a few hundred MB/s, and spilling is often short of CPU (the
 * tasks run beside it). Random values that share their top bits (a shuffle's buckets, sorted or
 * not) save less and stay raw. */
#define ZSTD_SAVING 8

/* Whether a sample of raw (PROBE_SLICE-byte slices spread over it, len / 16 bytes in all, at
 * most PROBE_MAX) compresses by at least 1/PROBE_SAVING: a chunk that saves so little there
 * will not save the 1/ZSTD_SAVING a zstd record needs, and compressing the sample costs a
 * sixteenth of trying the whole chunk. Data with little redundancy (random bytes whose top bits
 * are shared, ciphertext) makes zstd build and apply Huffman tables over every byte only to give
 * up. The sample is put together at the end of out, which must hold it beside its compressed
 * form; true when it does not, or the chunk is too small to sample. */
#define PROBE_SLICE (8u << 10)
#define PROBE_MAX (64u << 10)
#define PROBE_MIN_LEN (16u * PROBE_SLICE)
#define PROBE_SAVING 12

static bool probe_compresses(ZSTD_CCtx *cctx, int level, const uint8_t *raw, size_t len,
                             uint8_t *out, size_t outcap)
{
    size_t want = len / 16 < PROBE_MAX ? len / 16 : PROBE_MAX;
    size_t nslices = want / PROBE_SLICE, sample = nslices * PROBE_SLICE;
    if (len < PROBE_MIN_LEN || outcap < sample + ZSTD_compressBound(sample))
        return true;
    uint8_t *in = out + outcap - sample;
    for (size_t i = 0; i < nslices; i++)
        memcpy(in + i * PROBE_SLICE, raw + i * (len / nslices), PROBE_SLICE);
    size_t z = ZSTD_compressCCtx(cctx, out, outcap - sample, in, sample, level);
    return ZSTD_isError(z) || z < sample - sample / PROBE_SAVING;
}

int64_t ost_rec_try_zstd(ZSTD_CCtx *cctx, int level, const uint8_t *raw, size_t len, uint8_t *out,
                         size_t outcap)
{
    if (len > OST_REC_MAX_RAW || outcap < OST_REC_HDR)
        return SPW_EINVAL;
    if (cctx == NULL || len < 256 || !probe_compresses(cctx, level, raw, len, out, outcap))
        return 0;
    size_t z = ZSTD_compressCCtx(cctx, out + OST_REC_HDR, outcap - OST_REC_HDR, raw, len, level);
    /* Incompressible data is stored raw: reading it back then costs a memcpy. */
    if (ZSTD_isError(z) || z >= len - len / ZSTD_SAVING)
        return 0;
    /* The checksum covers the stored bytes (a third of the raw ones here): cheaper to write
     * and checked before anything is decoded. */
    write_header(out, OST_REC_ZSTD, (uint32_t)len, (uint32_t)z, rec_sum(out + OST_REC_HDR, z));
    return (int64_t)(OST_REC_HDR + z);
}

void ost_rec_raw_header(uint8_t hdr[OST_REC_HDR], const uint8_t *raw, size_t len)
{
    write_header(hdr, OST_REC_RAW, (uint32_t)len, (uint32_t)len, rec_sum(raw, len));
}

int64_t ost_rec_encode(ZSTD_CCtx *cctx, int level, const uint8_t *raw, size_t len, uint8_t *out,
                       size_t outcap)
{
    if (len > OST_REC_MAX_RAW || outcap < OST_REC_HDR + len)
        return SPW_EINVAL;
    int64_t z = ost_rec_try_zstd(cctx, level, raw, len, out, outcap);
    if (z != 0)
        return z;
    ost_rec_raw_header(out, raw, len);
    if (len > 0)
        memcpy(out + OST_REC_HDR, raw, len);
    return (int64_t)(OST_REC_HDR + len);
}

int ost_rec_decode(ZSTD_DCtx *dctx, const uint8_t *rec, size_t reclen, uint8_t *dst,
                   size_t expect_len)
{
    if (reclen < OST_REC_HDR || get32(rec) != OST_REC_MAGIC ||
        (rec[4] != OST_REC_VERSION && rec[4] != OST_REC_VERSION_RAWSUM))
        return SPW_ECORRUPT;
    uint8_t codec = rec[5];
    uint32_t raw_len = get32(rec + 8), stored = get32(rec + 12);
    if (raw_len != expect_len || raw_len > OST_REC_MAX_RAW || stored != reclen - OST_REC_HDR)
        return SPW_ECORRUPT;
    const uint8_t *p = rec + OST_REC_HDR;
    bool rawsum = rec[4] == OST_REC_VERSION_RAWSUM;
    if (!rawsum && rec_sum(p, stored) != get64(rec + 16))
        return SPW_ECORRUPT; /* before a byte is decoded */
    if (codec == OST_REC_RAW) {
        if (stored != raw_len)
            return SPW_ECORRUPT;
        if (raw_len > 0)
            memcpy(dst, p, raw_len);
    } else if (codec == OST_REC_ZSTD) {
        /* The frame must say it decodes to exactly raw_len before we let it write. */
        unsigned long long fsz = ZSTD_getFrameContentSize(p, stored);
        if (fsz != raw_len || dctx == NULL)
            return SPW_ECORRUPT;
        size_t n = ZSTD_decompressDCtx(dctx, dst, expect_len, p, stored);
        if (ZSTD_isError(n) || n != raw_len)
            return SPW_ECORRUPT;
    } else {
        return SPW_ECORRUPT;
    }
    if (rawsum && rec_sum(dst, raw_len) != get64(rec + 16))
        return SPW_ECORRUPT;
    return 0;
}
