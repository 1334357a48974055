/*
 * spw_idmap (spillway/idmap.h): open addressing, linear probing, backward-shift deletion.
 *
 * Invariants: the table is empty (slots NULL, mask 0) or 2^k >= 64 slots; n records, at most
 * 70 % of the slots; every record sits in the run of occupied slots that starts at its home
 * slot (key & mask), so a probe from the home slot finds it before any empty slot.
 */
#include "spillway/idmap.h"

#include <sys/mman.h>

#if defined(__SANITIZE_ADDRESS__)
#define IDMAP_HEAP_ONLY 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define IDMAP_HEAP_ONLY 1
#endif
#endif

#define IDMAP_MIN 64u
/* Tables of at least this many bytes are mapped on their own (table_alloc). */
#define IDMAP_MAP_BYTES ((size_t)2 << 20)

/* A zeroed table of cap slots. A large one is mapped and its pages are made at once
 * (MADV_POPULATE_WRITE, where the kernel has it): resize reads a slot before it writes it, so a
 * fresh page would otherwise fault twice (the zero page, then a copy on write), and a table of
 * a million records has thousands of pages. Sanitizer builds keep every table on the heap, where
 * LeakSanitizer looks for the records it points to. */
static spw_idmap_slot *table_alloc(const spw_idmap *m, uint32_t cap)
{
#ifndef IDMAP_HEAP_ONLY
    size_t bytes = (size_t)cap * sizeof(spw_idmap_slot);
    if (bytes >= IDMAP_MAP_BYTES) {
        void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED)
            SPW_PANIC("out of memory for an id map of %zu bytes", bytes);
#ifdef MADV_POPULATE_WRITE
        (void)madvise(p, bytes, MADV_POPULATE_WRITE); /* only a hint: pages fault in otherwise */
#endif
        spw_heap_charge((enum spw_mod)m->mod, (int64_t)bytes);
        return p;
    }
#endif
    return spw_calloc((enum spw_mod)m->mod, cap, sizeof(spw_idmap_slot));
}

static void table_free(const spw_idmap *m, spw_idmap_slot *t, uint32_t cap)
{
    size_t bytes = (size_t)cap * sizeof(spw_idmap_slot);
    (void)m;
    (void)bytes;
#ifndef IDMAP_HEAP_ONLY
    if (t != NULL && bytes >= IDMAP_MAP_BYTES) {
        munmap(t, bytes);
        spw_heap_charge((enum spw_mod)m->mod, -(int64_t)bytes);
        return;
    }
#endif
    spw_free(t);
}

static void place(spw_idmap *m, uint64_t key, void *p)
{
    uint32_t i = (uint32_t)key & m->mask;
    while (m->slots[i].p != NULL)
        i = (i + 1) & m->mask;
    m->slots[i] = (spw_idmap_slot){key, p};
}

static void resize(spw_idmap *m, uint32_t ncap)
{
    spw_idmap_slot *old = m->slots;
    uint32_t ocap = old == NULL ? 0 : m->mask + 1;
    if (ncap == 0) {
        m->slots = NULL;
        m->mask = 0;
    } else {
        m->slots = table_alloc(m, ncap);
        m->mask = ncap - 1;
        for (uint32_t i = 0; i < ocap; i++)
            if (old[i].p != NULL)
                place(m, old[i].key, old[i].p);
    }
    table_free(m, old, ocap);
}

/* Load limit: n records fit in cap slots while n <= 0.7 cap. */
static bool fits(uint64_t n, uint64_t cap)
{
    return n * 10 <= cap * 7;
}

void spw_idmap_reserve(spw_idmap *m, uint32_t more)
{
    uint64_t need = (uint64_t)m->n + more;
    uint64_t cap = m->slots == NULL ? 0 : (uint64_t)m->mask + 1;
    if (more == 0 || (cap != 0 && fits(need, cap)))
        return;
    uint64_t ncap = cap != 0 ? cap * 2 : IDMAP_MIN;
    while (!fits(need, ncap))
        ncap *= 2;
    if (ncap > (1ull << 31))
        SPW_PANIC("more than 2^30 records in one id map");
    resize(m, (uint32_t)ncap);
}

void spw_idmap_add(spw_idmap *m, void *p)
{
    if (m->slots == NULL || !fits((uint64_t)m->n + 1, (uint64_t)m->mask + 1))
        spw_idmap_reserve(m, 1);
    /* One walk both checks that the id is new and finds the empty slot that ends its run. */
    spw_id id = spw_idmap__id(m, p);
    uint64_t key = spw_id_hash(id);
    uint32_t i = (uint32_t)key & m->mask;
    for (; m->slots[i].p != NULL; i = (i + 1) & m->mask)
        SPW_ASSERT(m->slots[i].key != key || !spw_id_eq(spw_idmap__id(m, m->slots[i].p), id));
    m->slots[i] = (spw_idmap_slot){key, p};
    m->n++;
}

void spw_idmap_del(spw_idmap *m, const void *p)
{
    SPW_ASSERT(m->n > 0);
    uint64_t key = spw_id_hash(spw_idmap__id(m, p));
    uint32_t i = (uint32_t)key & m->mask;
    while (m->slots[i].p != p) {
        SPW_ASSERT(m->slots[i].p != NULL);
        i = (i + 1) & m->mask;
    }
    /* Backward shift: move later members of the run into the hole when their home slot allows,
     * so that no tombstones are needed and probes stop at the first empty slot. */
    for (uint32_t j = i;;) {
        m->slots[i].p = NULL;
        for (;;) {
            j = (j + 1) & m->mask;
            if (m->slots[j].p == NULL)
                goto shifted;
            uint32_t home = (uint32_t)m->slots[j].key & m->mask;
            /* Stays unless its home lies cyclically outside (i, j]. */
            if (i <= j ? (i < home && home <= j) : (i < home || home <= j))
                continue;
            break;
        }
        m->slots[i] = m->slots[j];
        i = j;
    }
shifted:
    m->n--;
    uint32_t cap = m->mask + 1;
    if (m->n == 0)
        resize(m, 0); /* an idle process keeps no table */
    else if (cap > IDMAP_MIN && (uint64_t)m->n * 8 < cap)
        resize(m, cap / 4 < IDMAP_MIN ? IDMAP_MIN : cap / 4); /* then under half full */
}

void spw_idmap_free(spw_idmap *m)
{
    table_free(m, m->slots, m->slots == NULL ? 0 : m->mask + 1);
    m->slots = NULL;
    m->mask = 0;
    m->n = 0;
}

void *spw_idmap_any(const spw_idmap *m)
{
    uint32_t pos = 0;
    return spw_idmap_next(m, &pos);
}

const char *spw_idmap_check(const spw_idmap *m)
{
    if (m->slots == NULL)
        return m->n == 0 && m->mask == 0 ? NULL : "no table but records counted";
    uint64_t cap = (uint64_t)m->mask + 1;
    if (cap < IDMAP_MIN || (cap & m->mask) != 0)
        return "table size is not a power of two >= 64";
    if (!fits(m->n, cap))
        return "table more than 70 % full";
    if (m->n == 0)
        return "empty map keeps a table";
    uint32_t n = 0;
    for (uint32_t i = 0; i <= m->mask; i++) {
        const spw_idmap_slot *s = &m->slots[i];
        if (s->p == NULL)
            continue;
        n++;
        spw_id id = spw_idmap__id(m, s->p);
        if (s->key != spw_id_hash(id))
            return "slot key is not the hash of its record's id";
        /* No empty slot between the home slot and this one (else a probe stops short), and
         * no other slot on that path holds the same id. */
        for (uint32_t h = (uint32_t)s->key & m->mask; h != i; h = (h + 1) & m->mask) {
            if (m->slots[h].p == NULL)
                return "record beyond an empty slot on its probe path";
            if (m->slots[h].key == s->key && spw_id_eq(spw_idmap__id(m, m->slots[h].p), id))
                return "id present twice";
        }
    }
    return n == m->n ? NULL : "record count differs from the records in the table";
}
