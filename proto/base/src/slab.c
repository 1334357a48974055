/*
 * spw_slab (spillway/slab.h).
 *
 * Invariants: every chunk is SPW_SLAB_CHUNK bytes at an address aligned to that size, with its
 * header first and per_chunk records after it. A chunk's records are in use (nused of them),
 * on its free list, or at index `bump` and above (never handed out since the chunk was
 * mapped). A chunk with 0 < nused < per_chunk is on `partial`; a full one is on no list; an
 * empty one is the spare or is unmapped. nused of the slab is the sum over its chunks.
 */
#include "spillway/slab.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#if defined(__SANITIZE_ADDRESS__)
#define SLAB_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SLAB_ASAN 1
#endif
#endif
#ifdef SLAB_ASAN
#include <sanitizer/asan_interface.h>
#define SLAB_POISON(p, n) ASAN_POISON_MEMORY_REGION((p), (n))
#define SLAB_UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION((p), (n))
#else
#define SLAB_POISON(p, n) ((void)(p), (void)(n))
#define SLAB_UNPOISON(p, n) ((void)(p), (void)(n))
#endif

typedef struct spw_slab_chunk {
    struct spw_slab_chunk *prev, *next; /* on partial */
    void *free;      /* records freed and not reused, linked through their first word */
    uint32_t nused;
    uint32_t bump;   /* records from here on were never handed out */
    bool listed;     /* on partial */
} spw_slab_chunk;

#define SLAB_HDR 64 /* records start here: the header, rounded to a cache line */
_Static_assert(sizeof(spw_slab_chunk) <= SLAB_HDR, "slab chunk header fits its line");

static uint8_t *rec_at(spw_slab_chunk *c, const spw_slab *sl, uint32_t i)
{
    return (uint8_t *)c + SLAB_HDR + (size_t)i * sl->size;
}

/* Sanitizer builds take chunks from the (instrumented) heap, so that LeakSanitizer scans the
 * records for the pointers they hold; others map them, so that an empty chunk leaves the
 * process at once instead of staying in malloc's free lists. */
static spw_slab_chunk *chunk_map(void)
{
#ifdef SLAB_ASAN
    return aligned_alloc(SPW_SLAB_CHUNK, SPW_SLAB_CHUNK);
#else
    uint8_t *p = mmap(NULL, 2 * SPW_SLAB_CHUNK, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                      -1, 0);
    if (p == MAP_FAILED)
        return NULL;
    uintptr_t a = ((uintptr_t)p + SPW_SLAB_CHUNK - 1) & ~(uintptr_t)(SPW_SLAB_CHUNK - 1);
    size_t head = a - (uintptr_t)p, tail = SPW_SLAB_CHUNK - head;
    if (head > 0)
        munmap(p, head);
    if (tail > 0)
        munmap((uint8_t *)a + SPW_SLAB_CHUNK, tail);
    /* Its pages fault in as records are handed out. Not populated here (MADV_POPULATE_WRITE):
     * a worker's task slab maps and trims chunks as batches come and go, and would pay for
     * making every page of a chunk of which a batch uses a few. */
    return (spw_slab_chunk *)a;
#endif
}

static void chunk_unmap(spw_slab_chunk *c)
{
#ifdef SLAB_ASAN
    SLAB_UNPOISON(c, SPW_SLAB_CHUNK);
    free(c);
#else
    munmap(c, SPW_SLAB_CHUNK);
#endif
}

void spw_slab_init(spw_slab *sl, size_t size, enum spw_mod mod)
{
    SPW_ASSERT(size > 0 && size <= SPW_SLAB_MAX);
    *sl = (spw_slab){.size = (uint32_t)((size + 15) & ~(size_t)15), .mod = (uint8_t)mod};
    sl->per_chunk = (uint32_t)((SPW_SLAB_CHUNK - SLAB_HDR) / sl->size);
}

static void list_add(spw_slab *sl, spw_slab_chunk *c)
{
    c->prev = NULL;
    c->next = sl->partial;
    if (sl->partial != NULL)
        sl->partial->prev = c;
    sl->partial = c;
    c->listed = true;
}

static void list_del(spw_slab *sl, spw_slab_chunk *c)
{
    if (c->prev != NULL)
        c->prev->next = c->next;
    else
        sl->partial = c->next;
    if (c->next != NULL)
        c->next->prev = c->prev;
    c->prev = c->next = NULL;
    c->listed = false;
}

void *spw_slab_alloc(spw_slab *sl)
{
    spw_slab_chunk *c = sl->partial;
    if (c == NULL) {
        c = sl->spare;
        sl->spare = NULL;
        if (c == NULL) {
            c = chunk_map();
            if (c == NULL)
                return NULL;
            memset(c, 0, sizeof *c);
            SLAB_POISON((uint8_t *)c + SLAB_HDR, SPW_SLAB_CHUNK - SLAB_HDR);
            sl->nchunks++;
            spw_heap_charge((enum spw_mod)sl->mod, (int64_t)SPW_SLAB_CHUNK);
        }
        list_add(sl, c);
    }
    uint8_t *p;
    if (c->free != NULL) {
        p = c->free;
        SLAB_UNPOISON(p, sl->size);
        memcpy(&c->free, p, sizeof c->free);
    } else {
        SPW_ASSERT(c->bump < sl->per_chunk);
        p = rec_at(c, sl, c->bump++);
        SLAB_UNPOISON(p, sl->size);
    }
    if (++c->nused == sl->per_chunk)
        list_del(sl, c);
    sl->nused++;
    memset(p, 0, sl->size);
    return p;
}

void spw_slab_free(spw_slab *sl, void *p)
{
    if (p == NULL)
        return;
    spw_slab_chunk *c = (spw_slab_chunk *)((uintptr_t)p & ~(uintptr_t)(SPW_SLAB_CHUNK - 1));
    SPW_ASSERT(c->nused > 0 && sl->nused > 0);
    SPW_ASSERT(((uintptr_t)p - (uintptr_t)c - SLAB_HDR) % sl->size == 0);
    memcpy(p, &c->free, sizeof c->free);
    c->free = p;
    SLAB_POISON(p, sl->size);
    sl->nused--;
    if (!c->listed)
        list_add(sl, c); /* was full */
    if (--c->nused > 0)
        return;
    list_del(sl, c);
    /* Empty: the next allocation in a fresh chunk starts from a clean bump. */
    c->free = NULL;
    c->bump = 0;
    SLAB_POISON((uint8_t *)c + SLAB_HDR, SPW_SLAB_CHUNK - SLAB_HDR);
    if (sl->spare == NULL) {
        sl->spare = c;
        return;
    }
    chunk_unmap(c);
    sl->nchunks--;
    spw_heap_charge((enum spw_mod)sl->mod, -(int64_t)SPW_SLAB_CHUNK);
}

void spw_slab_trim(spw_slab *sl)
{
    if (sl->spare == NULL)
        return;
    chunk_unmap(sl->spare);
    sl->spare = NULL;
    sl->nchunks--;
    spw_heap_charge((enum spw_mod)sl->mod, -(int64_t)SPW_SLAB_CHUNK);
}

const char *spw_slab_check(const spw_slab *sl)
{
    uint64_t used = 0, listed = 0;
    for (const spw_slab_chunk *c = sl->partial; c != NULL; c = c->next) {
        if (!c->listed || (c->next != NULL && c->next->prev != c))
            return "partial list broken";
        if (c->nused == 0 || c->nused >= sl->per_chunk)
            return "chunk on the partial list is empty or full";
        if (c->bump > sl->per_chunk || c->nused > c->bump)
            return "chunk counts more records than it handed out";
        used += c->nused;
        if (++listed > sl->nchunks)
            return "more chunks listed than held";
    }
    if (sl->spare != NULL && (sl->spare->nused != 0 || sl->spare->listed))
        return "spare chunk in use";
    if (listed + (sl->spare != NULL) > sl->nchunks)
        return "more chunks listed than held";
    /* Full chunks are on no list: their records make up the rest of nused. */
    uint64_t full = sl->nchunks - listed - (sl->spare != NULL);
    if (used + full * sl->per_chunk != sl->nused)
        return "records in use differ from the chunks' counts";
    return NULL;
}
