/*
 * The msgpack writers: each stores one value at p, in room the caller reserved beforehand,
 * and returns the end of what it wrote (a cursor, which the compiler keeps in a register).
 *
 * Every value takes the smallest form, the one msgpack-c's packer chooses, so frames are byte
 * for byte what msgpack_pack_* would write (test_proto_enc checks it). They are the one
 * encoder of the wire format: codec.c's proto_put_* reserve room for one value (an id list,
 * such as RELEASE's: room for the whole list, once) and call them; the client's enc.c
 * reserves room for a whole task record once and runs them back to back, with no call and no
 * check per value.
 *
 * Internal to spillway (used by proto/ and client/, not installed). PROTO_WR_MAX_* are the
 * most bytes each writer stores besides a body the caller knows the length of.
 */
#ifndef SPW_PROTO_WR_H
#define SPW_PROTO_WR_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "spillway/base.h"
#include "spillway/utf8.h"

#define PROTO_WR_MAX_HDR 9 /* a scalar, or a str/bin/array header */
#define PROTO_WR_MAX_LEN 5 /* a str/bin/array header */
#define PROTO_WR_ID 18     /* bin 8 header and 16 bytes */

/* x (uintN_t) in big-endian byte order. */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
#define PROTO_WR_BE(n, x) (x)
#else
#define PROTO_WR_BE(n, x) __builtin_bswap##n(x)
#endif

/* v in bytes (1, 2, 4 or 8) big-endian bytes at p: one byte swap and one store (byte by byte
 * stores of an id's halves compile to a long run of shifts and stores). */
static inline void proto_wr_store_be(uint8_t *p, uint64_t v, int bytes)
{
    if (bytes == 1) {
        *p = (uint8_t)v;
    } else if (bytes == 2) {
        uint16_t x = PROTO_WR_BE(16, (uint16_t)v);
        memcpy(p, &x, 2);
    } else if (bytes == 4) {
        uint32_t x = PROTO_WR_BE(32, (uint32_t)v);
        memcpy(p, &x, 4);
    } else {
        uint64_t x = PROTO_WR_BE(64, v);
        memcpy(p, &x, 8);
    }
}

/* A type byte followed by v in bytes big-endian bytes. */
static inline uint8_t *proto_wr_be(uint8_t *p, uint8_t tag, uint64_t v, int bytes)
{
    p[0] = tag;
    proto_wr_store_be(p + 1, v, bytes);
    return p + 1 + bytes;
}

static inline uint8_t *proto_wr_uint(uint8_t *p, uint64_t v)
{
    if (v < 128) {
        *p = (uint8_t)v;
        return p + 1;
    }
    if (v < 256)
        return proto_wr_be(p, 0xcc, v, 1);
    if (v < 65536)
        return proto_wr_be(p, 0xcd, v, 2);
    if (v <= UINT32_MAX)
        return proto_wr_be(p, 0xce, v, 4);
    return proto_wr_be(p, 0xcf, v, 8);
}

static inline uint8_t *proto_wr_int(uint8_t *p, int64_t v)
{
    if (v >= 0)
        return proto_wr_uint(p, (uint64_t)v);
    if (v >= -32) {
        *p = (uint8_t)v;
        return p + 1;
    }
    if (v >= INT8_MIN)
        return proto_wr_be(p, 0xd0, (uint64_t)v, 1);
    if (v >= INT16_MIN)
        return proto_wr_be(p, 0xd1, (uint64_t)v, 2);
    if (v >= INT32_MIN)
        return proto_wr_be(p, 0xd2, (uint64_t)v, 4);
    return proto_wr_be(p, 0xd3, (uint64_t)v, 8);
}

/* One byte: nil (0xc0), false (0xc2), true (0xc3). */
static inline uint8_t *proto_wr_byte(uint8_t *p, uint8_t v)
{
    *p = v;
    return p + 1;
}

static inline uint8_t *proto_wr_nil(uint8_t *p)
{
    return proto_wr_byte(p, 0xc0);
}

static inline uint8_t *proto_wr_arr(uint8_t *p, uint32_t n)
{
    if (n < 16)
        return proto_wr_byte(p, (uint8_t)(0x90 | n));
    return n < 65536 ? proto_wr_be(p, 0xdc, n, 2) : proto_wr_be(p, 0xdd, n, 4);
}

static inline uint8_t *proto_wr_bin_hdr(uint8_t *p, size_t n)
{
    if (n < 256)
        return proto_wr_be(p, 0xc4, n, 1);
    if (n < 65536)
        return proto_wr_be(p, 0xc5, n, 2);
    return proto_wr_be(p, 0xc6, (uint32_t)n, 4);
}

static inline uint8_t *proto_wr_str_hdr(uint8_t *p, size_t n)
{
    if (n < 32)
        return proto_wr_byte(p, (uint8_t)(0xa0 | n));
    if (n < 256)
        return proto_wr_be(p, 0xd9, n, 1);
    if (n < 65536)
        return proto_wr_be(p, 0xda, n, 2);
    return proto_wr_be(p, 0xdb, (uint32_t)n, 4);
}

/* n raw bytes (a str or bin body); s may be NULL when n is 0. */
static inline uint8_t *proto_wr_body(uint8_t *p, const void *s, size_t n)
{
    if (n > 0)
        memcpy(p, s, n);
    return p + n;
}

static inline uint8_t *proto_wr_bin(uint8_t *p, const void *s, size_t n)
{
    return proto_wr_body(proto_wr_bin_hdr(p, n), s, n);
}

static inline uint8_t *proto_wr_strn(uint8_t *p, const char *s, size_t n)
{
    return proto_wr_body(proto_wr_str_hdr(p, n), s, n);
}

/* A string field: NULL is "", one longer than max is cut to max, and bytes that are not UTF-8
 * (a sequence the cut split, too) are written as '?', so a name from configuration or a path
 * from the system can never make a frame the peer refuses. Room: PROTO_WR_MAX_HDR + max. */
static inline uint8_t *proto_wr_str_max(uint8_t *p, const char *s, size_t max)
{
    size_t n = s != NULL ? strnlen(s, max) : 0;
    uint8_t *body = proto_wr_str_hdr(p, n);
    uint8_t *end = proto_wr_body(body, s, n);
    uint8_t high = 0;
    for (size_t i = 0; i < n; i++)
        high |= body[i];
    if (high & 0x80)
        spw_utf8_scrub(body, n);
    return end;
}

/* An id: bin 8 of 16 bytes, big-endian halves (spw_id_to_bytes). Room: PROTO_WR_ID. */
static inline uint8_t *proto_wr_id(uint8_t *p, spw_id id)
{
    p[0] = 0xc4;
    p[1] = 16;
    uint64_t be[2] = {PROTO_WR_BE(64, id.hi), PROTO_WR_BE(64, id.lo)};
    memcpy(p + 2, be, 16);
    return p + PROTO_WR_ID;
}

/* An array of n ids. Room: PROTO_WR_MAX_LEN + PROTO_WR_ID * n. */
static inline uint8_t *proto_wr_ids(uint8_t *p, const spw_id *v, uint32_t n)
{
    p = proto_wr_arr(p, n);
    for (uint32_t i = 0; i < n; i++)
        p = proto_wr_id(p, v[i]);
    return p;
}

#endif
