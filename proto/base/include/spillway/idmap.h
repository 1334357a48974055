/*
 * spw_idmap: records keyed by the spw_id they carry, in an open-addressing table with linear
 * probing. A slot is 16 bytes: the id's mixed hash and the record's address, so a lookup is one
 * probe of a slot (compare the hash) and one touch of the record it found (compare the id),
 * not a walk of a bucket chain through other records. The table is a power of two, grown past
 * 70 % load and shrunk below 1/8 (freed when empty, so an idle process returns to its
 * baseline); deletion shifts later members back, so there are no tombstones.
 *
 * Used by the scheduler's object directory and the client's reference table. The map does not
 * own the records; a record must not change its id or move while it is in the map.
 */
#ifndef SPW_IDMAP_H
#define SPW_IDMAP_H

#include <stddef.h>
#include <string.h>

#include "spillway/base.h"

typedef struct spw_idmap_slot {
    uint64_t key; /* spw_id_hash of the record's id */
    void *p;      /* the record; NULL: empty */
} spw_idmap_slot;

typedef struct spw_idmap {
    spw_idmap_slot *slots;
    uint32_t mask;   /* slots - 1 (0 while nothing is allocated) */
    uint32_t n;      /* records */
    uint32_t id_off; /* offset of the spw_id in a record */
    uint8_t mod;     /* enum spw_mod charged for the table */
} spw_idmap;

/** An empty map of records of `type` whose id is `field`, its table charged to module mod. */
#define SPW_IDMAP_INIT(type, field, m)                                                             \
    ((spw_idmap){.id_off = (uint32_t)offsetof(type, field), .mod = (uint8_t)(m)})

static inline spw_id spw_idmap__id(const spw_idmap *m, const void *p)
{
    spw_id id;
    memcpy(&id, (const char *)p + m->id_off, sizeof id);
    return id;
}

/** The record with this id, or NULL. */
static inline void *spw_idmap_find(const spw_idmap *m, spw_id id)
{
    if (m->n == 0)
        return NULL;
    uint64_t key = spw_id_hash(id);
    for (uint32_t i = (uint32_t)key & m->mask;; i = (i + 1) & m->mask) {
        const spw_idmap_slot *s = &m->slots[i];
        if (s->p == NULL)
            return NULL;
        if (s->key == key && spw_id_eq(spw_idmap__id(m, s->p), id))
            return s->p;
    }
}

/** A hint that id is looked up soon, for callers that know their next ids (a batch of
 * records): stage 0 prefetches the id's home slot; stage 1, issued a few lookups later when that
 * slot is likely cached, prefetches the record of the first slot of the run whose hash matches.
 * Reads only slots, never records, and changes nothing. */
static inline void spw_idmap_prefetch(const spw_idmap *m, spw_id id, int stage)
{
    if (m->n == 0)
        return;
    uint64_t key = spw_id_hash(id);
    uint32_t i = (uint32_t)key & m->mask;
    if (stage == 0) {
        __builtin_prefetch(&m->slots[i]);
        return;
    }
    for (;; i = (i + 1) & m->mask) {
        const spw_idmap_slot *s = &m->slots[i];
        if (s->p == NULL)
            return;
        if (s->key == key) {
            __builtin_prefetch((const char *)s->p + m->id_off);
            return;
        }
    }
}
/** Adds record p, whose id must not be in the map yet (checked). Aborts past 2^31 records. */
void spw_idmap_add(spw_idmap *m, void *p);
/** Grows the table at once so that `more` records beyond the present ones fit without a
 * resize (one copy instead of one per doubling, for a caller about to add many). Add them
 * right away: until then an empty map holds a table, which spw_idmap_check reports. A later
 * deletion may still shrink it. Aborts past 2^31 slots. */
void spw_idmap_reserve(spw_idmap *m, uint32_t more);
/** Removes record p, which must be in the map (checked). May shrink the table. */
void spw_idmap_del(spw_idmap *m, const void *p);
/** Frees the table (not the records); the map is empty and reusable. */
void spw_idmap_free(spw_idmap *m);
/** Iteration: the first record at slot *pos or later, advancing *pos past it; NULL at the end.
 * Start with *pos = 0. Adding or deleting records during an iteration may skip or repeat some;
 * to delete everything, take spw_idmap_any until it returns NULL. */
static inline void *spw_idmap_next(const spw_idmap *m, uint32_t *pos)
{
    if (m->slots == NULL)
        return NULL;
    for (; *pos <= m->mask; (*pos)++)
        if (m->slots[*pos].p != NULL)
            return m->slots[(*pos)++].p;
    return NULL;
}
/** Some record of the map, or NULL when it is empty. */
void *spw_idmap_any(const spw_idmap *m);
/** Bytes of the table (for memory accounting and the invariant checkers). */
static inline size_t spw_idmap_bytes(const spw_idmap *m)
{
    return m->slots == NULL ? 0 : ((size_t)m->mask + 1) * sizeof(spw_idmap_slot);
}
/** Checks the table's invariants: every record is found from its home slot without crossing an
 * empty slot, keys match ids, no id twice, n counts the records, the load is within bounds.
 * @return NULL, or a static text naming the first violation. */
const char *spw_idmap_check(const spw_idmap *m);

#endif
