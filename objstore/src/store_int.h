/* Internals shared by the store's source files (store.c, spill.c). Not installed. */
#ifndef SPW_OST_STORE_INT_H
#define SPW_OST_STORE_INT_H

#include <uthash.h>

#include "spillway/objstore.h"
#include "alloc.h"

/* Blocks looked at, from the arena's start, for an allocation packed low while a larger one
 * waits (obj_alloc): past them it takes a good fit, so a store of many small objects pays a
 * bounded walk. */
#define OST_LOW_SCAN 4096

/* An allocation at most 1/OST_PASS_DIV of the first waiting one's size may be served ahead of
 * it (ost__goes_ahead). */
#define OST_PASS_DIV 8

struct ost_obj {
    spw_id id;
    UT_hash_handle hh;
    uint64_t size;          /* payload bytes */
    ost_block *blk;         /* arena block, or NULL when only on disk */
    uint8_t *store_base;    /* the arena base, so ost_obj_data needs no store */
    uint32_t pins;          /* readers, tasks and the writer using it now */
    uint8_t state;          /* enum ost_state */
    bool on_lru;
    bool on_disk;           /* a spilled copy exists in LMDB */
    bool spilling;          /* a threadpool job is writing it to LMDB */
    bool restoring;         /* a threadpool job is reading it back */
    bool deleted;           /* removed from the table; freed when the last user lets go */
    bool aborted;           /* its write failed while followers still send from its memory */
    bool calling;           /* its getters are being called: not freed until they return */
    uint32_t disk_reads;    /* reads of its spilled copy under way or held (ost_obj_read_spilled,
                               ost_obj_hold_spilled) */
    uint64_t spare_until;   /* to be read or released soon (ost_obj_spare): until then spilled
                               only for an allocation that waits, not for headroom; 0 once
                               pinned */
    uint64_t stored_size;   /* bytes of the spilled copy */
    uint64_t copy;          /* the spilled copy's number, in its records' keys (spill.c) */
    uint64_t last_use_ns;
    ost_obj *lru_prev, *lru_next;
    ost_obj *prev, *next;   /* zombie list */
    struct ost_getter *getters; /* callbacks waiting for a restore */
};

/* An allocation waiting for room: a new object (create_async), or memory to restore a spilled
 * object into (restore != NULL). First come, first served. */
typedef struct ost_waiter {
    spw_id id;
    uint64_t size;
    ost_cb cb;
    void *arg;
    ost_obj *restore;
    uint64_t deadline_ns;
    bool first;           /* ost_obj_create_first: ahead of those that are not */
    struct ost_waiter *prev, *next;
} ost_waiter;

typedef struct ost_getter {
    ost_cb cb;
    void *arg;
    struct ost_getter *next;
} ost_getter;

struct ost_spill; /* spill.c */

struct ost_store {
    uv_loop_t *loop;
    ost_opts opts;
    char *name;
    uint64_t capacity;  /* arena bytes, a multiple of granule */
    uint64_t granule;
    uint64_t limit;     /* test hook: effective capacity, 0 = capacity */
    int fd;             /* memfd */
    uint8_t *base;      /* arena mapping */
    ost_alloc *alloc;
    ost_obj *table;     /* uthash by id */
    ost_obj *lru;       /* head = least recently used */
    ost_obj *zombies;   /* deleted while in use */
    ost_waiter *waiters;
    uint64_t waiting_bytes;
    /* Bytes served ahead of the first waiter while it waits (ost__goes_ahead), and which waiter
     * that is (compared, never followed). */
    const ost_waiter *passed_head;
    uint64_t passed_bytes;
    bool retrying;
    /* An allocation gave up with the spill storage full and nothing spilling: until an
     * allocation succeeds or the storage takes spills again, those that cannot be met at once
     * fail at once rather than each waiting alloc_wait_ms in turn. */
    bool full_gave_up;
    bool closing;       /* being freed: no more spill jobs */
    int busy;           /* threadpool jobs in flight */
    uint32_t spill_holds; /* ost_store_hold_spills nesting: no spill decision while > 0 */
    ost_stats st;
    struct ost_spill *spill;
    uint64_t trimmed;   /* bytes punched by the ost_store_trim running now */
};

void ost__lru_update(ost_store *s, ost_obj *o);
int ost__obj_alloc(ost_store *s, ost_obj *o);
void ost__obj_release_memory(ost_store *s, ost_obj *o);
void ost__obj_free_deleted(ost_store *s, ost_obj *o);
void ost__waiters_retry(ost_store *s);
/* Memory came back inside a call of the owner: its room_cb, else ost__waiters_retry at once. */
void ost__room_freed(ost_store *s);
void ost__pins_changed(ost_store *s, ost_obj *o, uint32_t before);

/* spill.c */
int ost__spill_open(ost_store *s, const char *dir);
void ost__spill_close(ost_store *s);
/* The object is going away: its spilled copy is deleted (in the background). */
void ost__spill_forget(ost_store *s, ost_obj *o);
/* A deleted object's spill is dropped (nobody will read what it would write): at once when it
 * has not started, else at the next chunk of each part. Returns whether it was dropped at once:
 * o is then not spilling. */
bool ost__spill_cancel(ost_store *s, ost_obj *o);
/* Spills or evicts LRU objects while use is above the threshold or allocations wait (an
 * allocation that must wait adds its size to s->waiting_bytes first, then calls this). */
void ost__spill_maintain(ost_store *s);
/* Queues the read of a restoring object whose memory is allocated; fails it (SPW_ESHUTDOWN)
 * while the store quiesces. */
void ost__restore_start(ost_store *s, ost_obj *o);
/* Fails the getters of a restoring object that could not get memory. */
void ost__restore_fail(ost_store *s, ost_obj *o, int status);
bool ost__spill_full(const ost_store *s);
/* Spills queued or running. */
bool ost__spill_pending(const ost_store *s);
/* Whether the waiting allocations wait only for pinned memory to be let go: nothing in memory
 * can be spilled or evicted and no spill is under way. Waiting in line then helps none of them,
 * and one behind the first that fits is served (the first may be waiting for the very task
 * whose remaining inputs queue behind it). */
bool ost__waiters_pinned_only(const ost_store *s);
/* Whether an allocation of `size` bytes is tried now rather than queued behind the waiting ones:
 * none wait, they wait only for pins, or it is small beside the first of them and what went
 * ahead of that one stays within its size (*passes then: count it with ost__passed once
 * served). */
bool ost__goes_ahead(ost_store *s, uint64_t size, bool *passes);
void ost__passed(ost_store *s, uint64_t size);
uint64_t ost__spilling_bytes(const ost_store *s);
/* For tests: the most lanes held at once so far (never more than the lanes). */
uint32_t ost__spill_peak_lanes(ost_store *s);
/* For tests: makes the store believe its map is `size` bytes, so that the next growth asks
 * LMDB for twice that (a size no mmap can give: the failed growth path). */
void ost__spill_set_map_size(ost_store *s, uint64_t size);
/* For tests, with no job running: the records in the LMDB environment (spill_entries counts
 * them as the figures see them; this asks LMDB). */
uint64_t ost__spill_records(ost_store *s);

#endif
