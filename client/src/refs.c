/*
 * libspillway's reference table: the handles of the references this client holds, by id.
 *
 * An id this client made (spillway__new_id) is a bijective mix of a counter, so the counter is
 * recovered from the id with a few multiplications and indexes a directory of fixed chunks of
 * handles. Adding, finding and dropping such a reference touches the one handle at its place,
 * with no allocation per reference and no hashing, and the handles of ids made one after
 * another (a graph's tasks) lie one after another in memory: taking a graph's results and
 * fetching and releasing them in order reads memory in order, where a hash table of separately
 * allocated handles would cost two cache misses and a malloc/free per task. Every other id (an
 * automatic put is named by a hash of its bytes) lives in an spw_idmap of separately allocated
 * handles.
 * Invariants: a handle is held iff it is found; a dense handle (h->dense) sits in the chunk of
 * its counter, whose `live` counts its held handles; ndense counts them all, nalloc the chunks
 * in the directory; a chunk with none held is freed, or kept as the one spare.
 */
#include <string.h>

#include "client_int.h"

/* The value of every empty inline result: no allocation for the many tasks that return
 * nothing, and none for fetching such a result (spillway_get hands it out, spillway_free
 * knows it). Never freed. */
uint8_t spillway__empty[1];

/* The inverse of spillway__new_id's finaliser (splitmix64's: each xorshift undone by the
 * same shifts repeated, each product by the multiplicative inverse mod 2^64). */
static inline uint64_t unmix(uint64_t z)
{
    z ^= (z >> 31) ^ (z >> 62);
    z *= 0x319642B2D24D8EC3ULL; /* 0x94D049BB133111EB^-1 */
    z ^= (z >> 27) ^ (z >> 54);
    z *= 0x96DE1B173F119089ULL; /* 0xBF58476D1CE4E5B9^-1 */
    z ^= (z >> 30) ^ (z >> 60);
    return z;
}

spw_id spillway__new_id(spillway *c)
{
    /* hi: a bijective mix of (seed + counter * golden), so ids differ in their first digits
     * (the short form spillway-ctl prints) and never repeat within this client, and the
     * counter comes back from the id (spillway__id_counter); lo: this client's random tag, so
     * two clients' ids do not meet. */
    uint64_t z = c->id_hi + ++c->next_id * 0x9E3779B97F4A7C15ULL;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    z ^= z >> 31;
    return (spw_id){z, c->id_lo};
}

uint64_t spillway__id_counter(const spillway *c, spw_id id)
{
    if (id.lo != c->id_lo)
        return 0;
    uint64_t k = (unmix(id.hi) - c->id_hi) * 0xF1DE83E19937733DULL; /* golden^-1 */
    return k <= c->next_id ? k : 0;
}

/* The slot of counter k, or NULL when its chunk holds nothing. */
static inline handle *dense_slot(const reftab *t, uint64_t k)
{
    uint64_t ci = k >> SPILLWAY__CHUNK_BITS;
    ref_chunk *ch = ci < t->nchunks ? t->chunks[ci] : NULL;
    return ch != NULL ? &ch->h[k & (SPILLWAY__CHUNK - 1)] : NULL;
}

handle *spillway__handle_find(spillway *c, spw_id id)
{
    uint64_t k = spillway__id_counter(c, id);
    if (k != 0) {
        handle *h = dense_slot(&c->refs, k);
        if (h != NULL && h->held && spw_id_eq(h->id, id))
            return h;
    }
    /* Also an id of our shape that was added while it was not ours yet (a content id whose
     * halves happen to look like ours: never in practice, but then it is still found). */
    return spw_idmap_find(&c->refs.other, id);
}

/* A chunk costs 56 KiB however few of its references are held: a program that keeps one
 * result of each large graph would pin a chunk per result. So when a chunk is needed while
 * at least SWEEP_MIN chunks are allocated and under 1/16 of their slots are held, the chunks
 * holding at most 1/16 of theirs hand their handles to refs.other and are freed (at least one
 * does, being under the average, so a sweep never walks the directory for nothing): memory
 * stays within a small factor of what the held references need, and a graph's results, held
 * together, are never moved. The directory costs 8 bytes per 1,024 ids ever made. */
/* Chunks allocated before a sweep is considered (~900 KiB). */
#define SWEEP_MIN 16

/* Moves the handles of sparse chunks to refs.other and frees those chunks (see the top). */
static void sweep(reftab *t)
{
    for (size_t ci = 0; ci < t->nchunks; ci++) {
        ref_chunk *ch = t->chunks[ci];
        if (ch == NULL || ch->live > SPILLWAY__CHUNK / 16)
            continue;
        for (size_t i = 0; i < SPILLWAY__CHUNK; i++) {
            if (!ch->h[i].held)
                continue;
            handle *h = spw_malloc(SPW_MOD_CLIENT, sizeof *h);
            *h = ch->h[i];
            h->dense = 0;
            spw_idmap_add(&t->other, h);
        }
        t->ndense -= ch->live;
        t->chunks[ci] = NULL;
        t->nalloc--;
        spw_free(ch);
    }
}

handle *spillway__handle_add(spillway *c, spw_id id, int kind)
{
    reftab *t = &c->refs;
    uint64_t k = spillway__id_counter(c, id);
    handle *h;
    if (k != 0 && spw_idmap_find(&t->other, id) == NULL) {
        uint64_t ci = k >> SPILLWAY__CHUNK_BITS;
        if (ci >= t->nchunks) {
            size_t n = t->nchunks ? t->nchunks : 16;
            while (n <= ci)
                n *= 2;
            t->chunks = spw_realloc(SPW_MOD_CLIENT, t->chunks, n * sizeof *t->chunks);
            memset(t->chunks + t->nchunks, 0, (n - t->nchunks) * sizeof *t->chunks);
            t->nchunks = n;
        }
        ref_chunk *ch = t->chunks[ci];
        if (ch == NULL && t->nalloc >= SWEEP_MIN &&
            (uint64_t)t->nalloc * SPILLWAY__CHUNK > 16 * t->ndense) /* sweep's cut */
            sweep(t);
        if (ch == NULL) {
            t->nalloc++;
            if (t->spare != NULL) {
                ch = t->spare; /* every slot of it is free: its live count reached 0 */
                t->spare = NULL;
            } else {
                ch = spw_calloc(SPW_MOD_CLIENT, 1,
                                sizeof *ch + SPILLWAY__CHUNK * sizeof(handle));
            }
            t->chunks[ci] = ch;
        }
        h = &ch->h[k & (SPILLWAY__CHUNK - 1)];
        if (h->held)
            SPW_PANIC("reference table: id %016llx%016llx added twice",
                      (unsigned long long)id.hi, (unsigned long long)id.lo);
        memset(h, 0, sizeof *h);
        h->dense = 1;
        ch->live++;
        t->ndense++;
    } else {
        h = spw_calloc(SPW_MOD_CLIENT, 1, sizeof *h);
    }
    h->id = id;
    h->kind = (uint8_t)kind;
    h->state = H_PENDING;
    h->held = 1;
    if (!h->dense)
        spw_idmap_add(&t->other, h); /* checks that id is not held yet */
    t->n++;
    return h;
}

/* Frees what a handle owns (not the handle). */
static void handle_clear(handle *h)
{
    if (h->inl != spillway__empty)
        spw_free(h->inl);
    spw_free(h->err);
    h->inl = NULL;
    h->err = NULL;
    h->held = 0;
}

void spillway__handle_free(spillway *c, handle *h)
{
    reftab *t = &c->refs;
    t->n--;
    if (!h->dense) {
        spw_idmap_del(&t->other, h);
        handle_clear(h);
        spw_free(h);
        return;
    }
    uint64_t ci = spillway__id_counter(c, h->id) >> SPILLWAY__CHUNK_BITS;
    handle_clear(h);
    t->ndense--;
    ref_chunk *ch = t->chunks[ci];
    if (--ch->live == 0) {
        t->nalloc--;
        t->chunks[ci] = NULL;
        if (t->spare == NULL) /* so a loop that puts and releases one value allocates once */
            t->spare = ch;
        else
            spw_free(ch);
    }
}

void spillway__handles_free_all(spillway *c)
{
    reftab *t = &c->refs;
    for (size_t ci = 0; ci < t->nchunks; ci++) {
        ref_chunk *ch = t->chunks[ci];
        for (size_t i = 0; ch != NULL && i < SPILLWAY__CHUNK; i++)
            if (ch->h[i].held)
                handle_clear(&ch->h[i]);
        spw_free(ch);
    }
    spw_free(t->chunks);
    spw_free(t->spare);
    /* One walk over the slots (handle_clear leaves the map alone); deleting one member at a
     * time would rescan from slot 0 for each and resize on the way down. */
    uint32_t pos = 0;
    for (handle *h; (h = spw_idmap_next(&t->other, &pos)) != NULL;) {
        handle_clear(h);
        spw_free(h);
    }
    spw_idmap_free(&t->other);
    spillway__refs_init(c);
}

void spillway__refs_init(spillway *c)
{
    c->refs = (reftab){.other = SPW_IDMAP_INIT(handle, id, SPW_MOD_CLIENT)};
}
