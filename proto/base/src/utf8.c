/*
 * UTF-8 well-formedness (RFC 3629) for strings from peers and files, with a word-at-a-time
 * pass over ASCII, which is what names and call sites nearly always are.
 */
#include <stdint.h>
#include <string.h>

#include "spillway/utf8.h"

/* The length of the well-formed sequence at p[0..n), or 0 if there is none. */
static size_t seq_len(const uint8_t *p, size_t n)
{
    uint8_t c = p[0];
    if (c < 0x80)
        return 1;
    size_t len;
    uint8_t lo = 0x80, hi = 0xbf; /* range of the second byte */
    if (c >= 0xc2 && c <= 0xdf) {
        len = 2;
    } else if (c >= 0xe0 && c <= 0xef) {
        len = 3;
        if (c == 0xe0)
            lo = 0xa0; /* overlong */
        else if (c == 0xed)
            hi = 0x9f; /* surrogates */
    } else if (c >= 0xf0 && c <= 0xf4) {
        len = 4;
        if (c == 0xf0)
            lo = 0x90; /* overlong */
        else if (c == 0xf4)
            hi = 0x8f; /* past U+10FFFF */
    } else {
        return 0;
    }
    if (n < len || p[1] < lo || p[1] > hi)
        return 0;
    for (size_t i = 2; i < len; i++)
        if ((p[i] & 0xc0) != 0x80)
            return 0;
    return len;
}

size_t spw_utf8_bad_at(const void *s, size_t n)
{
    const uint8_t *p = s;
    size_t i = 0;
    while (i < n) {
        if (n - i >= 8) {
            uint64_t w;
            memcpy(&w, p + i, sizeof w);
            if ((w & 0x8080808080808080u) == 0) {
                i += 8;
                continue;
            }
        }
        size_t l = seq_len(p + i, n - i);
        if (l == 0)
            return i;
        i += l;
    }
    return n;
}

bool spw_utf8_valid(const void *p, size_t n)
{
    return spw_utf8_bad_at(p, n) == n;
}

size_t spw_utf8_scrub(void *s, size_t n)
{
    uint8_t *p = s;
    size_t fixed = 0, i = spw_utf8_bad_at(p, n);
    while (i < n) {
        size_t l = seq_len(p + i, n - i);
        if (l == 0) {
            p[i] = '?';
            fixed++;
            l = 1;
        }
        i += l;
    }
    return fixed;
}
