/*
 * Uploaded plugins' names: the BLAKE2b-256 hash of a plugin's bytes (libsodium's
 * crypto_generichash), the object id that carries those bytes, and the "NAME@PREFIX" form a
 * task names one of its functions by. Pure functions, shared by the client, the scheduler and
 * the worker so that all three derive the same names from the same bytes.
 */
#include <string.h>

#include <sodium.h>

#include "spillway/proto.h"

void proto_plugin_hash(const void *data, size_t len, uint8_t out[PROTO_PLUGIN_HASH_LEN])
{
    crypto_generichash(out, PROTO_PLUGIN_HASH_LEN, data, len, NULL, 0);
}

spw_id proto_plugin_obj_id(const uint8_t hash[PROTO_PLUGIN_HASH_LEN])
{
    /* The hash's first 16 bytes, the low output-index bits cleared and the lowest set: the
     * shape of a put's id (never read as a task's output), and never nil. */
    spw_id id = spw_id_from_bytes(hash);
    id.lo = (id.lo & ~SPW_OUT_INDEX_MASK) | 1;
    return id;
}

char *proto_plugin_hex(const uint8_t hash[PROTO_PLUGIN_HASH_LEN], char out[PROTO_PLUGIN_HEX_LEN + 1])
{
    static const char digits[] = "0123456789abcdef";
    for (unsigned i = 0; i < PROTO_PLUGIN_HASH_LEN; i++) {
        out[2 * i] = digits[hash[i] >> 4];
        out[2 * i + 1] = digits[hash[i] & 15];
    }
    out[PROTO_PLUGIN_HEX_LEN] = '\0';
    return out;
}

const char *proto_plugin_fn_prefix(const char *fn, size_t len)
{
    if (len < PROTO_PLUGIN_PREFIX_HEX + 2)
        return NULL;
    const char *p = fn + len - PROTO_PLUGIN_PREFIX_HEX;
    if (p[-1] != '@')
        return NULL;
    for (unsigned i = 0; i < PROTO_PLUGIN_PREFIX_HEX; i++)
        if (!((p[i] >= '0' && p[i] <= '9') || (p[i] >= 'a' && p[i] <= 'f')))
            return NULL;
    return p;
}
