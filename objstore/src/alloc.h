/*
 * ost_alloc: the arena allocator (private to objstore).
 *
 * Manages the offsets [0, capacity) of the shared-memory arena; it never touches the arena's
 * bytes. Metadata lives out of band, in the worker's heap, so nothing an executor writes into
 * the arena can corrupt it. Sizes are rounded up to the granule (a power of two, normally the
 * page size, so every object can be mapped writable on its own), and every offset is a multiple
 * of the granule. Policy: good fit through two-level segregated free lists (TLSF): O(1) get and
 * put, immediate coalescing of free neighbours.
 * Invariants (checked by ost_alloc_check): blocks tile [0, capacity) in address order with no
 * gap or overlap; no two free blocks are adjacent; used == sum of allocated block sizes;
 * used + free == capacity; every free block is on exactly one free list, the one for its size.
 * Not thread safe: one owner (the worker's loop thread).
 */
#ifndef SPW_OST_ALLOC_H
#define SPW_OST_ALLOC_H

#include <stdint.h>

#include "spillway/base.h"

typedef struct ost_alloc ost_alloc;
typedef struct ost_block ost_block; /* an allocated range; opaque */

typedef struct ost_alloc_stats {
    uint64_t capacity;     /* bytes managed (a multiple of granule) */
    uint64_t granule;      /* allocation unit, bytes */
    uint64_t used;         /* bytes in allocated blocks (rounded sizes) */
    uint64_t free;         /* capacity - used */
    uint64_t largest_free; /* size of the largest free block, bytes */
    uint64_t nalloc;       /* allocated blocks */
    uint64_t nfree;        /* free blocks */
} ost_alloc_stats;

/** Creates an allocator over [0, capacity).
 * @param[in] capacity bytes; rounded down to a multiple of granule; must be >= granule.
 * @param[in] granule power of two >= 64.
 * @return 0, SPW_EINVAL for a bad granule or capacity. */
int ost_alloc_new(uint64_t capacity, uint64_t granule, ost_alloc **out);
/** Frees the allocator and every descriptor; outstanding blocks become invalid. NULL is a no-op. */
void ost_alloc_free(ost_alloc *a);

/** Allocates size bytes (rounded up to the granule).
 * @return 0 and *out; SPW_EINVAL if size is 0; SPW_ETOOBIG if the rounded size exceeds the
 *         capacity; SPW_ENOMEM if no free block is large enough (nothing changed). */
int ost_alloc_get(ost_alloc *a, uint64_t size, ost_block **out);
/** As ost_alloc_get, but from the free block of lowest address that holds it (address-ordered
 * first fit), found among the first max_scan blocks of the arena; past those, as
 * ost_alloc_get. Packs allocations at the arena's start, leaving the free space above them to
 * coalesce. */
int ost_alloc_get_low(ost_alloc *a, uint64_t size, uint32_t max_scan, ost_block **out);
/** Frees a block from ost_alloc_get and merges it with free neighbours. The block pointer is
 * invalid afterwards. Freeing a block twice is a programming error (SPW_ASSERT). */
void ost_alloc_put(ost_alloc *a, ost_block *b);
/** Whether ost_alloc_get(size) would succeed now. */
bool ost_alloc_fits(const ost_alloc *a, uint64_t size);

uint64_t ost_block_off(const ost_block *b);
/** Records what an allocated block holds, for ost_alloc_foreach_block; cleared when it is freed. */
void ost_block_set_owner(ost_block *b, void *owner);
/** Calls fn(arg, size, is_free, owner) for every block, free or not, in address order (owner
 * NULL for a free block or one whose owner was never set). fn must not allocate or free. */
void ost_alloc_foreach_block(const ost_alloc *a,
                             void (*fn)(void *arg, uint64_t size, bool is_free, void *owner),
                             void *arg);
/** The rounded size of the block. */
uint64_t ost_block_size(const ost_block *b);

void ost_alloc_stats_get(const ost_alloc *a, ost_alloc_stats *st);
/** Calls fn(arg, off, size) for every free block, in address order. fn must not allocate or
 * free. */
void ost_alloc_foreach_free(const ost_alloc *a, void (*fn)(void *arg, uint64_t off, uint64_t size),
                            void *arg);
/** Walks every block and checks the invariants above. @return 0 or SPW_ECORRUPT. */
int ost_alloc_check(const ost_alloc *a);

#endif
