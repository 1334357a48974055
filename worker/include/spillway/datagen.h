/*
 * The data the built-in generator tasks make (random, walk_f64), as inline functions, so that
 * tests and benchmarks can compute locally what every byte must be. Not installed.
 */
#ifndef SPW_DATAGEN_H
#define SPW_DATAGEN_H

#include <stdint.h>
#include <string.h>

/** splitmix64: the stream behind both generators. */
static inline uint64_t spw_splitmix64(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

/** n incompressible bytes from seed (the `random` task). */
static inline void spw_gen_random(uint8_t *out, uint64_t n, uint64_t seed)
{
    uint64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t v = spw_splitmix64(&seed);
        memcpy(out + i, &v, 8);
    }
    uint64_t v = spw_splitmix64(&seed);
    memcpy(out + i, &v, n - i);
}

/** count float64 values of a random walk from seed (the `walk_f64` task): prices moving in
 * cents, numbers whose high bytes repeat as real data's do. out holds 8 * count bytes. */
static inline void spw_gen_walk_f64(uint8_t *out, uint64_t count, uint64_t seed)
{
    double x = 100.0;
    for (uint64_t i = 0; i < count; i++) {
        uint64_t r = spw_splitmix64(&seed);
        x += (double)((int64_t)(r % 21) - 10) * 0.01;
        memcpy(out + 8 * i, &x, 8);
    }
}

#endif
