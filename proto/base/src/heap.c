/*
 * The counted heap: spw_malloc and its family put a small header before each block with its
 * size and module, so spw_free keeps per-module byte counters (atomics: any thread) exact
 * without asking the allocator; spw_heap_fail_after makes the fallible calls fail, for tests.
 * Invariant: spw_heap_used(SPW_MOD_COUNT) equals the sum of the per-module counters and is 0
 * once every spw_malloc'd block has been passed to spw_free.
 */
#include "spillway/base.h"

#include <errno.h>
#include <malloc.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* Each block carries a 16-byte header with its size and module, so spw_free can keep the
 * per-module counters exact without asking the allocator. 16 bytes keeps max_align_t alignment. */
typedef struct heap_hdr {
    uint64_t size;
    uint32_t mod;
    uint32_t magic;
} heap_hdr;

#define HEAP_MAGIC 0x5350574DU /* "SPWM" */

static _Atomic int64_t heap_used[SPW_MOD_COUNT];
static _Atomic uint64_t heap_fail_countdown;

static bool heap_should_fail(void)
{
    uint64_t n = atomic_load_explicit(&heap_fail_countdown, memory_order_relaxed);
    if (n == 0)
        return false;
    if (atomic_fetch_sub(&heap_fail_countdown, 1) == 1)
        return true;
    return false;
}

void spw_heap_fail_after(uint64_t n)
{
    atomic_store(&heap_fail_countdown, n);
}

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define HEAP_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define HEAP_SANITIZED 1
#endif
#endif

void spw_heap_trim(void)
{
#ifndef HEAP_SANITIZED
    malloc_trim(0);
#else
    /* The sanitizer's allocator serves every malloc, so glibc's arena is never set up; a trim
     * would set it up lazily, and pool threads doing so at once race inside glibc (a crash in
     * mtrim, or a failed arena count assertion when the thread exits). */
#endif
}

static void *heap_wrap(heap_hdr *h, enum spw_mod mod, size_t n)
{
    h->size = n;
    h->mod = (uint32_t)mod;
    h->magic = HEAP_MAGIC;
    atomic_fetch_add_explicit(&heap_used[mod], (int64_t)n, memory_order_relaxed);
    return h + 1;
}

void spw_heap_charge(enum spw_mod mod, int64_t delta)
{
    SPW_ASSERT(mod < SPW_MOD_COUNT);
    atomic_fetch_add_explicit(&heap_used[mod], delta, memory_order_relaxed);
}

void *spw_try_malloc(enum spw_mod mod, size_t n)
{
    SPW_ASSERT(mod < SPW_MOD_COUNT);
    if (n > SIZE_MAX - sizeof(heap_hdr) || heap_should_fail())
        return NULL;
    heap_hdr *h = malloc(sizeof *h + n);
    if (h == NULL)
        return NULL;
    return heap_wrap(h, mod, n);
}

void *spw_malloc(enum spw_mod mod, size_t n)
{
    SPW_ASSERT(mod < SPW_MOD_COUNT);
    heap_hdr *h = malloc(sizeof *h + n);
    if (h == NULL)
        SPW_PANIC("out of memory allocating %zu bytes", n);
    return heap_wrap(h, mod, n);
}

void *spw_calloc(enum spw_mod mod, size_t count, size_t n)
{
    if (n != 0 && count > SIZE_MAX / n)
        SPW_PANIC("calloc overflow: %zu * %zu", count, n);
    heap_hdr *h = calloc(1, sizeof *h + count * n);
    if (h == NULL)
        SPW_PANIC("out of memory allocating %zu bytes", count * n);
    return heap_wrap(h, mod, count * n);
}

static void *heap_realloc(enum spw_mod mod, void *p, size_t n, bool may_fail)
{
    if (p == NULL)
        return may_fail ? spw_try_malloc(mod, n) : spw_malloc(mod, n);
    heap_hdr *h = (heap_hdr *)p - 1;
    SPW_ASSERT(h->magic == HEAP_MAGIC);
    if (may_fail && (n > SIZE_MAX - sizeof(heap_hdr) || heap_should_fail()))
        return NULL;
    uint64_t old = h->size;
    uint32_t oldmod = h->mod;
    heap_hdr *nh = realloc(h, sizeof *nh + n);
    if (nh == NULL) {
        if (may_fail)
            return NULL;
        SPW_PANIC("out of memory reallocating %zu bytes", n);
    }
    atomic_fetch_sub_explicit(&heap_used[oldmod], (int64_t)old, memory_order_relaxed);
    return heap_wrap(nh, mod, n);
}

void *spw_realloc(enum spw_mod mod, void *p, size_t n)
{
    return heap_realloc(mod, p, n, false);
}

void *spw_try_realloc(enum spw_mod mod, void *p, size_t n)
{
    return heap_realloc(mod, p, n, true);
}

void spw_free(void *p)
{
    if (p == NULL)
        return;
    int saved = errno;
    heap_hdr *h = (heap_hdr *)p - 1;
    SPW_ASSERT(h->magic == HEAP_MAGIC);
    h->magic = 0;
    atomic_fetch_sub_explicit(&heap_used[h->mod], (int64_t)h->size, memory_order_relaxed);
    free(h);
    errno = saved;
}

char *spw_strdup(enum spw_mod mod, const char *s)
{
    return spw_strndup(mod, s, strlen(s));
}

char *spw_strndup(enum spw_mod mod, const char *s, size_t n)
{
    size_t len = strnlen(s, n);
    char *d = spw_malloc(mod, len + 1);
    memcpy(d, s, len);
    d[len] = '\0';
    return d;
}

int64_t spw_heap_used(enum spw_mod mod)
{
    if (mod < SPW_MOD_COUNT)
        return atomic_load(&heap_used[mod]);
    int64_t sum = 0;
    for (int i = 0; i < SPW_MOD_COUNT; i++)
        sum += atomic_load(&heap_used[i]);
    return sum;
}
