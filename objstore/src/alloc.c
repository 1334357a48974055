/*
 * ost_alloc: TLSF (two-level segregated fit) over the offsets of the shared-memory arena.
 *
 * Owns one out-of-band descriptor per block (spw_malloc, SPW_MOD_OBJSTORE) and never touches the
 * arena's bytes. Sizes are kept in bytes but classified in granules: class (fl, sl) with fl 0
 * holding the exact sizes 1..15 granules and fl >= 1 holding [16 << (fl-1), 32 << (fl-1))
 * granules in 16 equal steps. Get rounds the request up to the next class boundary, so the head of
 * any non-empty class at or above it fits (O(1) through the two bitmaps); only if that finds
 * nothing does it scan the request's own class. get_low instead walks the blocks in address
 * order for the first free one that holds the request. Put coalesces with free physical
 * neighbours.
 * Invariants (ost_alloc_check): the physical chain from offset 0 tiles [0, capacity) with no gap
 * or overlap; no two free blocks are adjacent; used, nalloc and nfree equal what the chain says;
 * each free block is on exactly the list of its class, allocated blocks on none; sl_bitmap[fl]
 * bit sl is set iff heads[fl][sl] is non-empty, fl_bitmap bit fl iff sl_bitmap[fl] != 0.
 * Not thread safe: one owner (the worker's loop thread).
 */
#include "alloc.h"

#include <inttypes.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SL_LOG2 4
#define SL_COUNT (1u << SL_LOG2)
/* A 64-bit granule count has its top bit at most at 63, which maps to fl 63 - SL_LOG2 + 1. */
#define FL_COUNT (64 - SL_LOG2 + 1)

_Static_assert(SL_COUNT <= 16, "sl_bitmap is 16 bits wide");
_Static_assert(FL_COUNT <= 64, "fl_bitmap is 64 bits wide");

struct ost_block {
    uint64_t off;         /* bytes from the arena start; a multiple of the granule */
    uint64_t size;        /* bytes; a non-zero multiple of the granule */
    ost_block *phys_prev; /* the block ending at off; NULL for the block at offset 0 */
    ost_block *phys_next; /* the block starting at off + size; NULL for the last block */
    ost_block *free_prev; /* free-list links; both NULL while the block is allocated */
    ost_block *free_next;
    void *owner; /* what the allocated block holds (ost_block_set_owner); NULL while free */
    bool is_free;
};

struct ost_alloc {
    uint64_t capacity;                    /* bytes, a multiple of granule */
    uint64_t granule;                     /* bytes, a power of two >= 64 */
    unsigned granule_shift;               /* log2(granule) */
    uint64_t used;                        /* bytes in allocated blocks */
    uint64_t nalloc;                      /* allocated blocks */
    uint64_t nfree;                       /* free blocks */
    ost_block *first;                     /* the block at offset 0; never NULL */
    uint64_t fl_bitmap;                   /* bit fl set iff sl_bitmap[fl] != 0 */
    uint16_t sl_bitmap[FL_COUNT];         /* bit sl set iff heads[fl][sl] != NULL */
    ost_block *heads[FL_COUNT][SL_COUNT]; /* free lists, LIFO */
};

/* --------------------------------------------------------------- classes */

static unsigned top_bit(uint64_t x)
{
    return 63u - (unsigned)__builtin_clzll(x);
}

/* The class of a block of n >= 1 granules. */
static void class_of(uint64_t n, unsigned *fl, unsigned *sl)
{
    if (n < SL_COUNT) {
        *fl = 0;
        *sl = (unsigned)n;
        return;
    }
    unsigned f = top_bit(n);
    *fl = f - SL_LOG2 + 1;
    *sl = (unsigned)(n >> (f - SL_LOG2)) - SL_COUNT;
}

/* n rounded up to the smallest size of a class, so every block in that class or above holds n.
 * n is at most 2^58 (granule >= 64), so the addition cannot overflow. */
static uint64_t round_to_class(uint64_t n)
{
    if (n < SL_COUNT)
        return n;
    uint64_t step = 1ULL << (top_bit(n) - SL_LOG2);
    return (n + step - 1) & ~(step - 1);
}

static uint64_t granules(const ost_alloc *a, uint64_t bytes)
{
    return bytes >> a->granule_shift;
}

/* ------------------------------------------------------------ free lists */

static void list_insert(ost_alloc *a, ost_block *b)
{
    unsigned fl, sl;
    class_of(granules(a, b->size), &fl, &sl);
    b->free_prev = NULL;
    b->free_next = a->heads[fl][sl];
    if (b->free_next != NULL)
        b->free_next->free_prev = b;
    a->heads[fl][sl] = b;
    a->sl_bitmap[fl] |= (uint16_t)(1u << sl);
    a->fl_bitmap |= 1ULL << fl;
}

static void list_remove(ost_alloc *a, ost_block *b)
{
    unsigned fl, sl;
    class_of(granules(a, b->size), &fl, &sl);
    if (b->free_prev != NULL)
        b->free_prev->free_next = b->free_next;
    else
        a->heads[fl][sl] = b->free_next;
    if (b->free_next != NULL)
        b->free_next->free_prev = b->free_prev;
    b->free_prev = b->free_next = NULL;
    if (a->heads[fl][sl] == NULL) {
        a->sl_bitmap[fl] &= (uint16_t) ~(1u << sl);
        if (a->sl_bitmap[fl] == 0)
            a->fl_bitmap &= ~(1ULL << fl);
    }
}

/* The head of the first non-empty class at or above (fl, sl), or NULL. */
static ost_block *first_at_or_above(const ost_alloc *a, unsigned fl, unsigned sl)
{
    if (fl >= FL_COUNT)
        return NULL;
    unsigned sl_map = a->sl_bitmap[fl] & (~0u << sl);
    if (sl_map == 0) {
        uint64_t fl_map = fl + 1 < 64 ? a->fl_bitmap & (~0ULL << (fl + 1)) : 0;
        if (fl_map == 0)
            return NULL;
        fl = (unsigned)__builtin_ctzll(fl_map);
        sl_map = a->sl_bitmap[fl];
    }
    return a->heads[fl][__builtin_ctz(sl_map)];
}

/* A free block of at least n granules, or NULL. Shared by get and fits so they cannot disagree:
 * good fit first, then the request's own class, whose blocks may or may not be large enough.
 * Together the two find a block whenever any free block is large enough. */
static ost_block *find_fit(const ost_alloc *a, uint64_t n)
{
    unsigned fl, sl;
    class_of(round_to_class(n), &fl, &sl);
    ost_block *b = first_at_or_above(a, fl, sl);
    if (b != NULL)
        return b;
    class_of(n, &fl, &sl);
    for (b = a->heads[fl][sl]; b != NULL; b = b->free_next)
        if (granules(a, b->size) >= n)
            return b;
    return NULL;
}

/* ------------------------------------------------------------------- API */

int ost_alloc_new(uint64_t capacity, uint64_t granule, ost_alloc **out)
{
    SPW_ASSERT(out != NULL);
    if (granule < 64 || (granule & (granule - 1)) != 0)
        return SPW_EINVAL;
    capacity &= ~(granule - 1);
    if (capacity < granule)
        return SPW_EINVAL;
    ost_alloc *a = spw_calloc(SPW_MOD_OBJSTORE, 1, sizeof *a);
    ost_block *b = spw_calloc(SPW_MOD_OBJSTORE, 1, sizeof *b);
    a->capacity = capacity;
    a->granule = granule;
    a->granule_shift = top_bit(granule);
    b->off = 0;
    b->size = capacity;
    b->is_free = true;
    a->first = b;
    a->nfree = 1;
    list_insert(a, b);
    *out = a;
    return 0;
}

void ost_alloc_free(ost_alloc *a)
{
    if (a == NULL)
        return;
    ost_block *b = a->first;
    while (b != NULL) {
        ost_block *next = b->phys_next;
        spw_free(b);
        b = next;
    }
    spw_free(a);
}

/* Validates a request of size bytes: 0 and *bytes (rounded up to the granule), or an error. */
static int request_bytes(const ost_alloc *a, uint64_t size, uint64_t *bytes)
{
    if (size == 0)
        return SPW_EINVAL;
    /* capacity is a granule multiple, so the rounded size exceeds it iff size does; checking
     * first also keeps the rounding below from overflowing. */
    if (size > a->capacity)
        return SPW_ETOOBIG;
    *bytes = (size + a->granule - 1) & ~(a->granule - 1);
    return 0;
}

/* Allocates the first `bytes` of free block b; the rest stays free. */
static void take(ost_alloc *a, ost_block *b, uint64_t bytes)
{
    list_remove(a, b);
    if (b->size > bytes) {
        /* The remainder is at least one granule: both sizes are granule multiples. */
        ost_block *rest = spw_calloc(SPW_MOD_OBJSTORE, 1, sizeof *rest);
        rest->off = b->off + bytes;
        rest->size = b->size - bytes;
        rest->is_free = true;
        rest->phys_prev = b;
        rest->phys_next = b->phys_next;
        if (rest->phys_next != NULL)
            rest->phys_next->phys_prev = rest;
        b->phys_next = rest;
        b->size = bytes;
        list_insert(a, rest);
    } else {
        a->nfree--;
    }
    b->is_free = false;
    b->owner = NULL;
    a->used += bytes;
    a->nalloc++;
}

int ost_alloc_get(ost_alloc *a, uint64_t size, ost_block **out)
{
    return ost_alloc_get_low(a, size, 0, out);
}

int ost_alloc_get_low(ost_alloc *a, uint64_t size, uint32_t max_scan, ost_block **out)
{
    SPW_ASSERT(a != NULL && out != NULL);
    uint64_t bytes;
    int rc = request_bytes(a, size, &bytes);
    if (rc != 0)
        return rc;
    ost_block *b = a->first;
    uint32_t n = 0;
    for (; b != NULL && n < max_scan && !(b->is_free && b->size >= bytes); n++)
        b = b->phys_next;
    if (b == NULL || n == max_scan) /* none in reach: a good fit */
        b = find_fit(a, granules(a, bytes));
    if (b == NULL)
        return SPW_ENOMEM;
    take(a, b, bytes);
    *out = b;
    return 0;
}

/* Absorbs next (free, not on a list, physically after b) into b and frees its descriptor. */
static void absorb_next(ost_block *b, ost_block *next)
{
    b->size += next->size;
    b->phys_next = next->phys_next;
    if (b->phys_next != NULL)
        b->phys_next->phys_prev = b;
    spw_free(next);
}

void ost_alloc_put(ost_alloc *a, ost_block *b)
{
    SPW_ASSERT(a != NULL && b != NULL);
    SPW_ASSERT(!b->is_free);
    SPW_ASSERT(b->off + b->size <= a->capacity && b->size <= a->used);
    a->used -= b->size;
    a->nalloc--;
    a->nfree++;
    b->is_free = true;
    b->owner = NULL;
    ost_block *prev = b->phys_prev;
    if (prev != NULL && prev->is_free) {
        list_remove(a, prev);
        absorb_next(prev, b);
        b = prev;
        a->nfree--;
    }
    ost_block *next = b->phys_next;
    if (next != NULL && next->is_free) {
        list_remove(a, next);
        absorb_next(b, next);
        a->nfree--;
    }
    list_insert(a, b);
}

bool ost_alloc_fits(const ost_alloc *a, uint64_t size)
{
    SPW_ASSERT(a != NULL);
    if (size == 0 || size > a->capacity)
        return false;
    uint64_t bytes = (size + a->granule - 1) & ~(a->granule - 1);
    return find_fit(a, granules(a, bytes)) != NULL;
}

void ost_block_set_owner(ost_block *b, void *owner)
{
    b->owner = owner;
}

void ost_alloc_foreach_block(const ost_alloc *a,
                             void (*fn)(void *arg, uint64_t size, bool is_free, void *owner),
                             void *arg)
{
    for (const ost_block *b = a->first; b != NULL; b = b->phys_next)
        fn(arg, b->size, b->is_free, b->is_free ? NULL : b->owner);
}

uint64_t ost_block_off(const ost_block *b)
{
    return b->off;
}

uint64_t ost_block_size(const ost_block *b)
{
    return b->size;
}

void ost_alloc_foreach_free(const ost_alloc *a, void (*fn)(void *arg, uint64_t off, uint64_t size),
                            void *arg)
{
    for (const ost_block *b = a->first; b != NULL; b = b->phys_next)
        if (b->is_free)
            fn(arg, b->off, b->size);
}

void ost_alloc_stats_get(const ost_alloc *a, ost_alloc_stats *st)
{
    SPW_ASSERT(a != NULL && st != NULL);
    uint64_t largest = 0;
    if (a->fl_bitmap != 0) {
        /* Every block in the highest non-empty class is larger than any block below it. */
        unsigned fl = top_bit(a->fl_bitmap);
        unsigned sl = top_bit(a->sl_bitmap[fl]);
        for (const ost_block *b = a->heads[fl][sl]; b != NULL; b = b->free_next)
            if (b->size > largest)
                largest = b->size;
    }
    *st = (ost_alloc_stats){
        .capacity = a->capacity,
        .granule = a->granule,
        .used = a->used,
        .free = a->capacity - a->used,
        .largest_free = largest,
        .nalloc = a->nalloc,
        .nfree = a->nfree,
    };
}

/* ----------------------------------------------------------------- check */

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            spw_log(SPW_LOG_ERR, "ost_alloc_check: " __VA_ARGS__);                                 \
            goto corrupt;                                                                          \
        }                                                                                          \
    } while (0)

/* The index of the free block at offset off in the chain's free blocks (sorted by offset). */
static bool free_index(const ost_block *const *frees, uint64_t n, uint64_t off, uint64_t *idx)
{
    uint64_t lo = 0, hi = n;
    while (lo < hi) {
        uint64_t mid = lo + (hi - lo) / 2;
        if (frees[mid]->off < off)
            lo = mid + 1;
        else
            hi = mid;
    }
    *idx = lo;
    return lo < n && frees[lo]->off == off;
}

int ost_alloc_check(const ost_alloc *a)
{
    SPW_ASSERT(a != NULL);
    const ost_block **frees = NULL;
    bool *seen = NULL;

    CHECK(a->granule >= 64 && (a->granule & (a->granule - 1)) == 0 &&
              a->granule == 1ULL << a->granule_shift,
          "bad granule granule=%" PRIu64, a->granule);
    CHECK(a->capacity >= a->granule && a->capacity % a->granule == 0,
          "bad capacity capacity=%" PRIu64, a->capacity);
    CHECK(a->first != NULL && a->first->phys_prev == NULL, "bad first block");

    /* Pass 1: the physical chain. Each block must start where the previous one ended and be
     * non-empty, so the walk advances strictly and stops at the capacity even if corrupt. */
    uint64_t end = 0, used = 0, nalloc = 0, nfree = 0;
    const ost_block *prev = NULL;
    for (const ost_block *b = a->first; b != NULL; prev = b, b = b->phys_next) {
        CHECK(b->phys_prev == prev, "broken prev link off=%" PRIu64, b->off);
        CHECK(b->off == end, "gap or overlap off=%" PRIu64 " expected=%" PRIu64, b->off, end);
        CHECK(b->size != 0 && b->size % a->granule == 0 && b->size <= a->capacity - b->off,
              "bad size off=%" PRIu64 " size=%" PRIu64, b->off, b->size);
        end = b->off + b->size;
        if (b->is_free) {
            CHECK(prev == NULL || !prev->is_free, "adjacent free blocks off=%" PRIu64, b->off);
            nfree++;
        } else {
            CHECK(b->free_prev == NULL && b->free_next == NULL,
                  "allocated block linked on a free list off=%" PRIu64, b->off);
            used += b->size;
            nalloc++;
        }
    }
    CHECK(end == a->capacity, "blocks end early end=%" PRIu64 " capacity=%" PRIu64, end,
          a->capacity);
    CHECK(used == a->used, "used mismatch used=%" PRIu64 " counted=%" PRIu64, a->used, used);
    CHECK(nalloc == a->nalloc, "nalloc mismatch nalloc=%" PRIu64 " counted=%" PRIu64, a->nalloc,
          nalloc);
    CHECK(nfree == a->nfree, "nfree mismatch nfree=%" PRIu64 " counted=%" PRIu64, a->nfree, nfree);

    /* Pass 2: the free lists hold exactly the chain's free blocks, each once, in its own class.
     * Every list entry is looked up among the chain's free blocks and marked; with the entry count
     * capped at nfree, a cycle, a duplicate or a foreign block is caught. */
    if (nfree > 0) {
        frees = spw_malloc(SPW_MOD_OBJSTORE, nfree * sizeof *frees);
        seen = spw_calloc(SPW_MOD_OBJSTORE, nfree, sizeof *seen);
        uint64_t i = 0;
        for (const ost_block *b = a->first; b != NULL; b = b->phys_next)
            if (b->is_free)
                frees[i++] = b;
    }
    uint64_t listed = 0;
    for (unsigned fl = 0; fl < FL_COUNT; fl++) {
        CHECK(((a->fl_bitmap >> fl) & 1) == (a->sl_bitmap[fl] != 0),
              "fl bitmap disagrees fl=%u sl_bitmap=%#x", fl, (unsigned)a->sl_bitmap[fl]);
        for (unsigned sl = 0; sl < SL_COUNT; sl++) {
            const ost_block *head = a->heads[fl][sl];
            CHECK(((a->sl_bitmap[fl] >> sl) & 1) == (head != NULL),
                  "sl bitmap disagrees fl=%u sl=%u", fl, sl);
            const ost_block *lprev = NULL;
            for (const ost_block *b = head; b != NULL; lprev = b, b = b->free_next) {
                CHECK(listed < nfree, "more listed blocks than free blocks fl=%u sl=%u", fl, sl);
                listed++;
                uint64_t idx;
                CHECK(free_index(frees, nfree, b->off, &idx) && frees[idx] == b,
                      "listed block not free in the chain fl=%u sl=%u", fl, sl);
                CHECK(!seen[idx], "block listed twice off=%" PRIu64, b->off);
                seen[idx] = true;
                CHECK(b->free_prev == lprev, "broken free-list link off=%" PRIu64, b->off);
                unsigned bfl, bsl;
                class_of(granules(a, b->size), &bfl, &bsl);
                CHECK(bfl == fl && bsl == sl,
                      "block on the wrong list off=%" PRIu64 " size=%" PRIu64 " fl=%u sl=%u",
                      b->off, b->size, fl, sl);
            }
        }
    }
    CHECK(listed == nfree, "free block missing from lists listed=%" PRIu64 " nfree=%" PRIu64,
          listed, nfree);
    spw_free(frees);
    spw_free(seen);
    return 0;

corrupt:
    spw_free(frees);
    spw_free(seen);
    return SPW_ECORRUPT;
}
