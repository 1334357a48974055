/*
 * Byte sizes as people write them: "64M", "2GiB", "512k" parsed, and counts shown in binary
 * units.
 */
#include "spillway/base.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

int spw_size_parse(const char *s, uint64_t *out)
{
    if (s == NULL || !isdigit((unsigned char)*s))
        return SPW_EINVAL;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno != 0)
        return SPW_EINVAL;
    uint64_t mult = 1;
    switch (toupper((unsigned char)*end)) {
    case '\0':
        break;
    case 'B':
        end++;
        break;
    case 'K':
        mult = 1ULL << 10;
        end++;
        break;
    case 'M':
        mult = 1ULL << 20;
        end++;
        break;
    case 'G':
        mult = 1ULL << 30;
        end++;
        break;
    case 'T':
        mult = 1ULL << 40;
        end++;
        break;
    default:
        return SPW_EINVAL;
    }
    if (mult > 1) {
        if (*end == 'i' || *end == 'I')
            end++;
        if (*end == 'B' || *end == 'b')
            end++;
    }
    if (*end != '\0')
        return SPW_EINVAL;
    if (v > UINT64_MAX / mult)
        return SPW_ERANGE;
    *out = (uint64_t)v * mult;
    return 0;
}

char *spw_size_fmt(uint64_t bytes, char *out, size_t outlen)
{
    static const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
    double v = (double)bytes;
    int u = 0;
    while (v >= 1024.0 && u < 5) {
        v /= 1024.0;
        u++;
    }
    if (u == 0)
        snprintf(out, outlen, "%" PRIu64 " B", bytes);
    else
        snprintf(out, outlen, "%.1f %s", v, units[u]);
    return out;
}
