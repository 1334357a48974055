/*
 * Spill records: how one chunk of an object is laid out in LMDB (private to objstore).
 *
 * A record is a 32-byte header and the stored bytes. The header holds a magic, a version, the
 * codec (raw or zstd), the raw length, the stored length and an XXH3-64 checksum of the stored
 * bytes (version 2; version 1, still read, summed the raw bytes after decoding: for a zstd
 * record three times the bytes, and only once they were in the arena). Spill files are
 * untrusted input, like the network: ost_rec_decode checks every field and the checksum
 * before a single byte reaches the arena (version 1: before the decoded bytes are used), and
 * zstd's decoder never writes past the expected length. Both functions are pure (no I/O, no
 * globals) so they can be fuzzed.
 */
#ifndef SPW_OST_SPILL_RECORD_H
#define SPW_OST_SPILL_RECORD_H

#include <stddef.h>
#include <stdint.h>

#include <zstd.h>

#define OST_REC_MAGIC 0x53505752u /* "SPWR" */
#define OST_REC_VERSION 2        /* written: the checksum covers the stored bytes */
#define OST_REC_VERSION_RAWSUM 1 /* read too: the checksum covers the raw (decoded) bytes */
#define OST_REC_HDR 32
#define OST_REC_RAW 0
#define OST_REC_ZSTD 1
#define OST_REC_MAX_RAW (64u << 20) /* largest chunk a record may claim */

/* The OST_REC_HDR bytes before the payload, in host byte order (a spill file never outlives
 * its process), written and read field by field at these offsets, never as a struct:
 *   0  u32 magic OST_REC_MAGIC     4  u8 version      5  u8 codec (OST_REC_RAW, OST_REC_ZSTD)
 *   6  u16 reserved (0)            8  u32 raw_len: bytes after decoding
 *  12  u32 stored_len: bytes after the header
 *  16  u64 checksum: XXH3-64 of the stored bytes (version 1: of the raw bytes)
 *  24  u64 reserved (0)
 * For a raw record the stored bytes are the raw ones, so both versions sum the same bytes. */

/** Encodes raw into out (capacity outcap, at least OST_REC_HDR + ZSTD_compressBound(len)):
 * zstd at level, or raw when that does not save at least 1/8 of the bytes (a chunk of 128 KiB
 * or more is first judged by compressing a sample of it: raw when the sample saves little).
 * @param[in] cctx a reusable compression context.
 * @return the record's size, or SPW_EINVAL (too large / no room). */
int64_t ost_rec_encode(ZSTD_CCtx *cctx, int level, const uint8_t *raw, size_t len, uint8_t *out,
                       size_t outcap);

/** Compresses raw into out like ost_rec_encode, but when the data does not compress returns 0
 * (out then holds scratch): the caller then stores it raw with ost_rec_raw_header + a copy,
 * straight into its destination (one copy fewer than going through out).
 * @return the zstd record's size, 0 for "store raw", or SPW_EINVAL. */
int64_t ost_rec_try_zstd(ZSTD_CCtx *cctx, int level, const uint8_t *raw, size_t len, uint8_t *out,
                         size_t outcap);
/** Writes the header of a raw record of len bytes whose raw bytes are raw. */
void ost_rec_raw_header(uint8_t hdr[OST_REC_HDR], const uint8_t *raw, size_t len);

/** Checks a record and decodes it into dst, which must hold exactly expect_len bytes.
 * @return 0; SPW_ECORRUPT for a bad magic, version, codec, length, checksum, or a zstd
 *         failure (the caller logs it once). */
int ost_rec_decode(ZSTD_DCtx *dctx, const uint8_t *rec, size_t reclen, uint8_t *dst,
                   size_t expect_len);

#endif
