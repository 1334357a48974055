/*
 * spw_slab: fixed-size records carved from aligned 256 KiB chunks, without a per-record header.
 * A record's chunk is found by masking its address; each chunk keeps its own free list and
 * count, so freeing is O(1) and a chunk whose records are all free goes back to the system at
 * once (one empty chunk per slab is kept to avoid mapping and unmapping at a boundary). Chunks
 * are charged to the slab's module in spw_heap_used.
 *
 * For a process that holds millions of small records of a few sizes (the scheduler's tasks and
 * objects): malloc's 16-byte chunk overhead and spw_malloc's 16-byte header are a quarter of
 * such a record, and a freed graph leaves holes that malloc cannot return.
 * Not thread-safe: a slab belongs to one thread.
 */
#ifndef SPW_SLAB_H
#define SPW_SLAB_H

#include <stddef.h>
#include <stdint.h>

#include "spillway/base.h"

#define SPW_SLAB_CHUNK ((size_t)256 * 1024)
#define SPW_SLAB_MAX 4096 /* largest record size */

struct spw_slab_chunk;

typedef struct spw_slab {
    uint32_t size;      /* record size, a multiple of 16 */
    uint32_t per_chunk; /* records in one chunk */
    uint8_t mod;        /* enum spw_mod charged */
    struct spw_slab_chunk *partial; /* chunks with a free record (and no other), listed */
    struct spw_slab_chunk *spare;   /* one chunk with no record in use, or NULL */
    uint64_t nchunks;   /* chunks held, the spare included */
    uint64_t nused;     /* records handed out */
} spw_slab;

/** Prepares sl for records of `size` bytes (1 to SPW_SLAB_MAX; rounded up to 16). */
void spw_slab_init(spw_slab *sl, size_t size, enum spw_mod mod);
/** A zeroed record, or NULL if no memory could be mapped. */
void *spw_slab_alloc(spw_slab *sl);
/** Returns record p (from spw_slab_alloc on this slab) to it; NULL is a no-op. */
void spw_slab_free(spw_slab *sl, void *p);
/** Releases the spare chunk; with no record in use the slab then holds nothing. */
void spw_slab_trim(spw_slab *sl);
/** Bytes of chunks the slab holds. */
static inline size_t spw_slab_bytes(const spw_slab *sl)
{
    return (size_t)sl->nchunks * SPW_SLAB_CHUNK;
}
/** Checks the slab's lists and counts. @return NULL, or a static text naming the violation. */
const char *spw_slab_check(const spw_slab *sl);

#endif
