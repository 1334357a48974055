/*
 * Object and task ids (spw_id): as 32 hex digits and back, and as 16 big-endian bytes (how the
 * wire and the spill store carry them).
 */
#include "spillway/base.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

char *spw_id_hex(spw_id id, char out[SPW_ID_HEX_LEN + 1])
{
    snprintf(out, SPW_ID_HEX_LEN + 1, "%016" PRIx64 "%016" PRIx64, id.hi, id.lo);
    return out;
}

static int hexval(int c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

int spw_id_parse(const char *s, spw_id *out)
{
    if (s == NULL || strlen(s) != SPW_ID_HEX_LEN)
        return SPW_EINVAL;
    uint64_t w[2] = {0, 0};
    for (int i = 0; i < SPW_ID_HEX_LEN; i++) {
        int v = hexval((unsigned char)s[i]);
        if (v < 0)
            return SPW_EINVAL;
        w[i / 16] = (w[i / 16] << 4) | (uint64_t)v;
    }
    out->hi = w[0];
    out->lo = w[1];
    return 0;
}

void spw_id_to_bytes(spw_id id, uint8_t out[16])
{
    for (int i = 0; i < 8; i++) {
        out[i] = (uint8_t)(id.hi >> (56 - 8 * i));
        out[8 + i] = (uint8_t)(id.lo >> (56 - 8 * i));
    }
}

spw_id spw_id_from_bytes(const uint8_t in[16])
{
    spw_id id = {0, 0};
    for (int i = 0; i < 8; i++) {
        id.hi = (id.hi << 8) | in[i];
        id.lo = (id.lo << 8) | in[8 + i];
    }
    return id;
}
