/* Spill record codec; see spill_record.h. */
#include "spill_record.h"

#include <string.h>

#include <xxhash.h>

#include "spillway/base.h"

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

int64_t ost_rec_encode(ZSTD_CCtx *cctx, int level, const uint8_t *raw, size_t len, uint8_t *out,
                       size_t outcap)
{
    if (len > OST_REC_MAX_RAW || outcap < OST_REC_HDR + len)
        return SPW_EINVAL;
    uint8_t codec = OST_REC_RAW;
    size_t stored = len;
    size_t room = outcap - OST_REC_HDR;
    if (cctx != NULL && len >= 256) {
        size_t z = ZSTD_compressCCtx(cctx, out + OST_REC_HDR, room, raw, len, level);
        /* Incompressible data is stored raw: reading it back then costs a memcpy. */
        if (!ZSTD_isError(z) && z < len - len / 16) {
            codec = OST_REC_ZSTD;
            stored = z;
        }
    }
    if (codec == OST_REC_RAW && len > 0)
        memcpy(out + OST_REC_HDR, raw, len);
    put32(out, OST_REC_MAGIC);
    out[4] = OST_REC_VERSION;
    out[5] = codec;
    out[6] = out[7] = 0;
    put32(out + 8, (uint32_t)len);
    put32(out + 12, (uint32_t)stored);
    put64(out + 16, XXH3_64bits(raw, len));
    put64(out + 24, 0);
    return (int64_t)(OST_REC_HDR + stored);
}

int64_t ost_rec_try_zstd(ZSTD_CCtx *cctx, int level, const uint8_t *raw, size_t len, uint8_t *out,
                         size_t outcap)
{
    if (len > OST_REC_MAX_RAW || outcap < OST_REC_HDR)
        return SPW_EINVAL;
    if (cctx == NULL || len < 256)
        return 0;
    size_t z = ZSTD_compressCCtx(cctx, out + OST_REC_HDR, outcap - OST_REC_HDR, raw, len, level);
    if (ZSTD_isError(z) || z >= len - len / 16)
        return 0;
    put32(out, OST_REC_MAGIC);
    out[4] = OST_REC_VERSION;
    out[5] = OST_REC_ZSTD;
    out[6] = out[7] = 0;
    put32(out + 8, (uint32_t)len);
    put32(out + 12, (uint32_t)z);
    put64(out + 16, XXH3_64bits(raw, len));
    put64(out + 24, 0);
    return (int64_t)(OST_REC_HDR + z);
}

void ost_rec_raw_header(uint8_t hdr[OST_REC_HDR], const uint8_t *raw, size_t len)
{
    put32(hdr, OST_REC_MAGIC);
    hdr[4] = OST_REC_VERSION;
    hdr[5] = OST_REC_RAW;
    hdr[6] = hdr[7] = 0;
    put32(hdr + 8, (uint32_t)len);
    put32(hdr + 12, (uint32_t)len);
    put64(hdr + 16, XXH3_64bits(raw, len));
    put64(hdr + 24, 0);
}

int ost_rec_decode(ZSTD_DCtx *dctx, const uint8_t *rec, size_t reclen, uint8_t *dst,
                   size_t expect_len)
{
    if (reclen < OST_REC_HDR || get32(rec) != OST_REC_MAGIC || rec[4] != OST_REC_VERSION)
        return SPW_ECORRUPT;
    uint8_t codec = rec[5];
    uint32_t raw_len = get32(rec + 8), stored = get32(rec + 12);
    if (raw_len != expect_len || raw_len > OST_REC_MAX_RAW || stored != reclen - OST_REC_HDR)
        return SPW_ECORRUPT;
    const uint8_t *p = rec + OST_REC_HDR;
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
    if (XXH3_64bits(dst, raw_len) != get64(rec + 16))
        return SPW_ECORRUPT;
    return 0;
}
