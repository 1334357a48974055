/*
 * The object store: arena, object table, pins, LRU and waiting allocations.
 *
 * Owns: the memfd arena and its mapping, the allocator, every ost_obj (in the table, or on the
 * zombie list once deleted while pinned), and the queue of allocations waiting for room.
 * Threads: everything here runs on the worker's loop thread.
 * Invariants (checked by tests through ost_stats):
 *   stats.used == allocator used == sum of block sizes of objects with memory;
 *   stats.pinned == sum of block sizes of in-memory objects with pins > 0;
 *   an object is on the LRU list iff it is SEALED, in memory, unpinned and not being spilled;
 *   a deleted object is never in the table; its memory goes back at its last unpin.
 * Memory handed back: freed ranges stay resident (reused at no cost) until ost_store_trim, run
 * from the worker's timer once a tick has passed without an allocation, finds the memfd holding
 * more than used + OST_TRIM_SLACK and punches every free range out of it (fallocate PUNCH_HOLE;
 * free blocks are granule = page aligned).
 */
#include "spillway/objstore.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <uthash.h>
#include <utlist.h>

#include "alloc.h"
#include "store_int.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#define ARENA_POISON(p, n) ASAN_POISON_MEMORY_REGION((p), (n))
#define ARENA_UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION((p), (n))
#else
#define ARENA_POISON(p, n) ((void)(p), (void)(n))
#define ARENA_UNPOISON(p, n) ((void)(p), (void)(n))
#endif

void ost_opts_default(ost_opts *o)
{
    memset(o, 0, sizeof *o);
    o->capacity = 256ULL << 20;
    o->spill_threshold = 0.8;
    o->spill_target = 0.7;
    o->pause_threshold = 0.9;
    o->compression_level = 1;
    o->alloc_wait_ms = 30000;
    o->spill_retry_ms = 5000;
    o->compact_quiet_ms = 1000;
    o->name = "store";
}

static uint64_t limit_of(const ost_store *s)
{
    return s->limit != 0 && s->limit < s->capacity ? s->limit : s->capacity;
}

int ost_store_new(uv_loop_t *loop, const ost_opts *o, ost_store **out)
{
    uint64_t granule = o->granule != 0 ? o->granule : (uint64_t)sysconf(_SC_PAGESIZE);
    if (o->capacity < granule || (granule & (granule - 1)) != 0 || o->spill_target <= 0 ||
        o->spill_target > o->spill_threshold || o->spill_threshold > 1.0 ||
        o->pause_threshold < o->spill_threshold)
        return SPW_EINVAL;
    ost_store *s = spw_calloc(SPW_MOD_OBJSTORE, 1, sizeof *s);
    s->loop = loop;
    s->opts = *o;
    s->opts.name = NULL;
    s->opts.spill_dir = NULL;
    s->name = spw_strdup(SPW_MOD_OBJSTORE, o->name != NULL ? o->name : "store");
    s->capacity = o->capacity - o->capacity % granule;
    s->granule = granule;
    s->fd = -1;
    int rc = ost_alloc_new(s->capacity, granule, &s->alloc);
    if (rc != 0)
        goto fail;
    char mname[64];
    snprintf(mname, sizeof mname, "spillway-%s", s->name);
    s->fd = memfd_create(mname, MFD_CLOEXEC | MFD_ALLOW_SEALING);
    /* Sealed at its size: a local client given the read-write descriptor could otherwise
     * truncate it, and every process mapping the arena (this one first) would die of SIGBUS.
     * Punching holes (ost_store_trim) changes no size and stays allowed. */
    if (s->fd < 0 || ftruncate(s->fd, (off_t)s->capacity) != 0 ||
        fcntl(s->fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
        rc = -errno;
        spw_log(SPW_LOG_ERR, "store=%s arena of %llu bytes: %s", s->name,
                (unsigned long long)s->capacity, strerror(errno));
        goto fail;
    }
    s->base = mmap(NULL, s->capacity, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, s->fd, 0);
    if (s->base == MAP_FAILED) {
        rc = -errno;
        s->base = NULL;
        goto fail;
    }
    ARENA_POISON(s->base, s->capacity);
    if (o->spill_dir != NULL) {
        rc = ost__spill_open(s, o->spill_dir);
        if (rc != 0)
            goto fail;
    }
    *out = s;
    return 0;
fail:
    ost_store_free(s);
    return rc;
}

void ost__obj_release_memory(ost_store *s, ost_obj *o)
{
    if (o->blk == NULL)
        return;
    uint64_t bsize = ost_block_size(o->blk);
    if (o->pins > 0)
        s->st.pinned -= bsize;
    ARENA_POISON(s->base + ost_block_off(o->blk), bsize);
    ost_alloc_put(s->alloc, o->blk);
    o->blk = NULL;
    s->st.used -= bsize;
    s->st.objs_mem--;
}

static void obj_destroy(ost_store *s, ost_obj *o)
{
    ost__obj_release_memory(s, o);
    if (o->on_disk)
        ost__spill_forget(s, o);
    spw_free(o);
}

void ost_store_free(ost_store *s)
{
    if (s == NULL)
        return;
    SPW_ASSERT(s->busy == 0);
    s->closing = true;
    /* Waiters first: a restore waiter points at an object freed below. */
    ost_waiter *w, *wtmp;
    DL_FOREACH_SAFE(s->waiters, w, wtmp)
    {
        DL_DELETE(s->waiters, w);
        if (w->restore != NULL)
            ost__restore_fail(s, w->restore, SPW_ESHUTDOWN);
        else
            w->cb(w->arg, SPW_ESHUTDOWN, NULL);
        spw_free(w);
    }
    ost_obj *o, *tmp;
    HASH_ITER(hh, s->table, o, tmp)
    {
        HASH_DEL(s->table, o);
        obj_destroy(s, o);
    }
    DL_FOREACH_SAFE(s->zombies, o, tmp)
    {
        DL_DELETE(s->zombies, o);
        obj_destroy(s, o);
    }
    ost__spill_close(s);
    if (s->base != NULL) {
        /* ASan's shadow outlives the mapping: a later mmap at these addresses (LMDB's map, a
         * new store's arena) would read as poisoned. */
        ARENA_UNPOISON(s->base, s->capacity);
        munmap(s->base, s->capacity);
    }
    if (s->fd >= 0)
        close(s->fd);
    ost_alloc_free(s->alloc);
    spw_free(s->name);
    spw_free(s);
}

int ost_store_busy(const ost_store *s)
{
    return s->busy;
}

int ost_store_fd(const ost_store *s)
{
    return s->fd;
}

uint8_t *ost_store_base(const ost_store *s)
{
    return s->base;
}

void ost_stats_get(const ost_store *s, ost_stats *st)
{
    *st = s->st;
    st->capacity = limit_of(s);
    st->objs_total = HASH_COUNT(s->table);
    st->spilling_bytes = ost__spilling_bytes(s);
}

enum ost_level ost_mem_state(const ost_store *s, uint64_t *to_free)
{
    uint64_t cap = limit_of(s);
    uint64_t used = s->st.used;
    uint64_t target = (uint64_t)((double)cap * s->opts.spill_target);
    if (to_free != NULL)
        *to_free = used > target ? used - target : 0;
    if ((double)used > (double)cap * s->opts.pause_threshold)
        return OST_LEVEL_PAUSE;
    if ((double)used > (double)cap * s->opts.spill_threshold)
        return OST_LEVEL_SPILL;
    return OST_LEVEL_OK;
}

void ost_store_set_limit(ost_store *s, uint64_t limit)
{
    s->limit = limit;
    ost_store_maintain(s);
}

/* ------------------------------------------------------------------ LRU */

void ost__lru_update(ost_store *s, ost_obj *o)
{
    bool want = o->state == OST_SEALED && o->blk != NULL && o->pins == 0 && !o->spilling &&
                !o->restoring && !o->deleted;
    if (want && !o->on_lru) {
        DL_APPEND2(s->lru, o, lru_prev, lru_next);
        o->on_lru = true;
    } else if (!want && o->on_lru) {
        DL_DELETE2(s->lru, o, lru_prev, lru_next);
        o->on_lru = false;
    }
}

static void touch(ost_store *s, ost_obj *o)
{
    /* Most recently used goes to the tail; spilling takes from the head. */
    if (o->on_lru) {
        DL_DELETE2(s->lru, o, lru_prev, lru_next);
        DL_APPEND2(s->lru, o, lru_prev, lru_next);
    }
}

/* ------------------------------------------------------------- objects */

void ost__pins_changed(ost_store *s, ost_obj *o, uint32_t before)
{
    if (o->blk != NULL) {
        uint64_t bsize = ost_block_size(o->blk);
        if (before == 0 && o->pins > 0)
            s->st.pinned += bsize;
        if (before == 0 && o->pins > 0)
            o->spare_until = 0;
        else if (before > 0 && o->pins == 0)
            s->st.pinned -= bsize;
    }
    ost__lru_update(s, o);
}

/* Allocates memory for o (within the test hook's limit if `limited`); on success updates the
 * figures. */
static int obj_alloc(ost_store *s, ost_obj *o, bool limited)
{
    if (limited && s->limit != 0 && s->st.used + o->size > limit_of(s))
        return SPW_ENOMEM;
    /* While a larger allocation waits (for a contiguous block: waiting, it did not fit), this
     * one is packed at the lowest address that holds it. A good fit would place it in whatever
     * hole its size class finds, and allocations that come and go while the large one waits
     * (fetches in flight, restores) would keep the free space cut into holes indefinitely,
     * however little of the store they use; packed low, they leave the rest to coalesce into
     * the range the waiter needs. */
    bool low = s->waiters != NULL && s->waiters->size > o->size;
    int rc = low ? ost_alloc_get_low(s->alloc, o->size, OST_LOW_SCAN, &o->blk)
                 : ost_alloc_get(s->alloc, o->size, &o->blk);
    if (rc != 0)
        return rc;
    uint64_t bsize = ost_block_size(o->blk);
    ost_block_set_owner(o->blk, o);
    ARENA_UNPOISON(s->base + ost_block_off(o->blk), o->size);
    s->st.used += bsize;
    s->st.allocs++;
    if (s->st.used > s->st.peak_used)
        s->st.peak_used = s->st.used;
    s->st.objs_mem++;
    if (o->pins > 0)
        s->st.pinned += bsize;
    return 0;
}

int ost__obj_alloc(ost_store *s, ost_obj *o)
{
    return obj_alloc(s, o, true);
}

/* Why a creation can never succeed now, whatever is freed: 0 if it can. */
static int create_check(const ost_store *s, spw_id id, uint64_t size)
{
    if (size == 0)
        return SPW_EINVAL;
    if (size > limit_of(s))
        return SPW_ETOOBIG;
    return ost_obj_find(s, id) != NULL ? SPW_EEXIST : 0;
}

static int create_now(ost_store *s, spw_id id, uint64_t size, ost_obj **out)
{
    int rc = create_check(s, id, size);
    if (rc != 0)
        return rc;
    ost_obj *o = spw_calloc(SPW_MOD_OBJSTORE, 1, sizeof *o);
    o->id = id;
    o->size = size;
    o->state = OST_CREATED;
    o->pins = 1;
    o->store_base = s->base;
    rc = ost__obj_alloc(s, o);
    if (rc != 0) {
        spw_free(o);
        return rc == SPW_ETOOBIG ? SPW_ETOOBIG : SPW_ENOMEM;
    }
    HASH_ADD(hh, s->table, id, sizeof o->id, o);
    *out = o;
    return 0;
}

int ost_obj_create(ost_store *s, spw_id id, uint64_t size, ost_obj **out)
{
    int rc = create_now(s, id, size, out);
    ost__spill_maintain(s);
    return rc;
}


/* Whether an allocation that does not fit now should fail now: one already gave up with the
 * spill storage full, which still is, and no spill under way can free memory. */
static bool full_for_now(ost_store *s)
{
    if (s->full_gave_up && !ost__spill_full(s))
        s->full_gave_up = false; /* the storage takes spills again */
    return s->full_gave_up && !ost__spill_pending(s);
}

static int create_async(ost_store *s, spw_id id, uint64_t size, bool first, ost_cb cb, void *arg)
{
    ost_obj *o = NULL;
    /* A request that cannot succeed is answered now, not after the allocations waiting ahead
     * of it: queued, it would count its size as bytes to make room for (a huge size, from an
     * executor, would wrap waiting_bytes) and wait up to alloc_wait_ms for its error. */
    int rc = create_check(s, id, size);
    bool passes = false;
    if (rc == 0)
        rc = first || ost__goes_ahead(s, size, &passes) ? ost_obj_create(s, id, size, &o)
                                                        : SPW_ENOMEM;
    if (rc == 0 && passes)
        ost__passed(s, size);
    if (rc == 0)
        s->full_gave_up = false;
    else if (rc == SPW_ENOMEM && full_for_now(s))
        rc = SPW_ESPILLFULL;
    if (rc != SPW_ENOMEM) {
        cb(arg, rc, rc == 0 ? o : NULL);
        return 0;
    }
    /* Squeeze: make room by spilling, and wait (back-pressure) until there is some. */
    ost_waiter *w = spw_calloc(SPW_MOD_OBJSTORE, 1, sizeof *w);
    w->id = id;
    w->size = size;
    w->cb = cb;
    w->arg = arg;
    w->deadline_ns = spw_now_ns() + (uint64_t)s->opts.alloc_wait_ms * 1000000ULL;
    w->first = first;
    /* Ahead of the others, behind those ahead of them already (in their order). */
    ost_waiter *after = NULL;
    for (ost_waiter *x = s->waiters; first && x != NULL && x->first; x = x->next)
        after = x;
    if (!first)
        DL_APPEND(s->waiters, w);
    else if (after == NULL)
        DL_PREPEND(s->waiters, w);
    else
        DL_APPEND_ELEM(s->waiters, after, w);
    s->waiting_bytes += size;
    ost__spill_maintain(s);
    return 0;
}

int ost_obj_create_async(ost_store *s, spw_id id, uint64_t size, ost_cb cb, void *arg)
{
    return create_async(s, id, size, false, cb, arg);
}

int ost_obj_create_first(ost_store *s, spw_id id, uint64_t size, ost_cb cb, void *arg)
{
    return create_async(s, id, size, true, cb, arg);
}

int ost_obj_resize(ost_store *s, ost_obj *o, uint64_t size)
{
    if (o->state != OST_CREATED || o->aborted || o->pins != 1 || o->blk == NULL || size == 0)
        return SPW_EINVAL;
    if (size > limit_of(s))
        return SPW_ETOOBIG;
    uint64_t old = o->size;
    if (size == old)
        return 0;
    /* Freed and taken again with nothing in between: the freed block (coalesced with its free
     * neighbours) holds any size up to the old one, so that much always succeeds. */
    ost__obj_release_memory(s, o);
    o->size = size;
    int rc = ost__obj_alloc(s, o);
    if (rc != 0) {
        o->size = old;
        rc = obj_alloc(s, o, false); /* its own block, or a larger one it merged into */
        SPW_ASSERT(rc == 0);
        return SPW_ENOMEM;
    }
    if (size < old)
        ost__room_freed(s); /* what it gave back */
    return 0;
}

void ost__room_freed(ost_store *s)
{
    if (s->opts.room_cb != NULL && !s->closing)
        s->opts.room_cb(s->opts.room_arg);
    else
        ost__waiters_retry(s);
}

bool ost__waiters_pinned_only(const ost_store *s)
{
    return s->lru == NULL && !ost__spill_pending(s);
}

/* A small allocation passes the first waiter: a fetch of one piece then does not wait seconds
 * behind the room for a large output that spills are making, with the network link that feeds
 * this store idle meanwhile. The large one still gets its room: those passing it are packed low
 * (obj_alloc), away from the range emptied for it (window_room), and together no larger than
 * itself. */
static bool may_pass(ost_store *s, uint64_t size)
{
    const ost_waiter *h = s->waiters;
    if (h != s->passed_head) {
        s->passed_head = h;
        s->passed_bytes = 0;
    }
    return size <= h->size / OST_PASS_DIV && s->passed_bytes + size <= h->size;
}

bool ost__goes_ahead(ost_store *s, uint64_t size, bool *passes)
{
    *passes = false;
    if (s->waiters == NULL || ost__waiters_pinned_only(s))
        return true;
    return *passes = may_pass(s, size);
}

void ost__passed(ost_store *s, uint64_t size)
{
    s->passed_bytes += size;
}

void ost__waiters_retry(ost_store *s)
{
    /* A waiter's callback freed memory: the loop below sees it. Closing: ost_store_free fails
     * every waiter itself (an object it frees meanwhile must not serve, or free, the next). */
    if (s->retrying || s->closing)
        return;
    s->retrying = true;
    ost_waiter *w, *tmp;
    uint64_t now = spw_now_ns();
    uint64_t failed_together = 0;
    bool passing = false; /* the first cannot be served: only small ones behind it may be */
    DL_FOREACH_SAFE(s->waiters, w, tmp)
    {
        ost_obj *o = NULL;
        int rc;
        if (passing && !may_pass(s, w->size))
            continue;
        if (w->restore != NULL) {
            o = w->restore;
            rc = o->deleted ? SPW_ENOOBJ : ost__obj_alloc(s, o);
        } else {
            rc = create_now(s, w->id, w->size, &o);
        }
        /* First come, first served: a big request is not starved by small ones, unless only
         * pinned memory holds it back, which those behind it may be what lets go; small ones
         * may pass it within a budget (may_pass). Past its deadline it still waits for the
         * spills under way, whose outcome says whether room is coming or the spill storage is
         * full (they end: nothing is spilled twice). */
        bool together = rc == SPW_ENOMEM && full_for_now(s);
        if (rc == SPW_ENOMEM && !together && (now < w->deadline_ns || ost__spill_pending(s))) {
            if (ost__waiters_pinned_only(s))
                continue;
            passing = true;
            continue;
        }
        if (passing && rc == 0)
            ost__passed(s, w->size);
        DL_DELETE(s->waiters, w);
        s->waiting_bytes -= w->size;
        if (rc == 0) {
            s->full_gave_up = false;
        } else if (together) {
            rc = SPW_ESPILLFULL;
            failed_together++;
        } else if (rc == SPW_ENOMEM) {
            bool full = ost__spill_full(s);
            ost_alloc_stats as;
            ost_alloc_stats_get(s->alloc, &as);
            /* largest_free under the size with free bytes over it: the room was there, in
             * pieces that pinned objects keep apart. */
            spw_log(SPW_LOG_WARN,
                    "store=%s allocation of %llu bytes gave up after %u ms: used=%llu "
                    "pinned=%llu largest_free=%llu%s",
                    s->name, (unsigned long long)w->size, s->opts.alloc_wait_ms,
                    (unsigned long long)s->st.used, (unsigned long long)s->st.pinned,
                    (unsigned long long)as.largest_free,
                    full ? " and the spill storage is full" : "");
            rc = full ? SPW_ESPILLFULL : SPW_EBACKPRESSURE;
            if (full && !ost__spill_pending(s))
                s->full_gave_up = true;
        }
        if (w->restore != NULL) {
            if (rc == 0)
                ost__restore_start(s, w->restore);
            else
                ost__restore_fail(s, w->restore, rc);
        } else {
            w->cb(w->arg, rc, rc == 0 ? o : NULL);
        }
        spw_free(w);
    }
    s->retrying = false;
    if (failed_together > 0)
        spw_log(SPW_LOG_WARN,
                "store=%s: %llu more allocations failed at once: the store is full, the spill "
                "storage is full (%s) and nothing is being spilled",
                s->name, (unsigned long long)failed_together, ost_store_full_reason(s));
    if (s->waiters != NULL)
        ost__spill_maintain(s);
}

int ost_obj_seal(ost_store *s, ost_obj *o)
{
    if (o->state != OST_CREATED)
        return SPW_ESEALED;
    o->state = OST_SEALED;
    uint32_t before = o->pins;
    o->pins--;
    o->last_use_ns = spw_now_ns();
    ost__pins_changed(s, o, before);
    if (o->pins == 0 && o->deleted)
        ost__obj_free_deleted(s, o);
    else
        ost__spill_maintain(s);
    return 0;
}

void ost__obj_free_deleted(ost_store *s, ost_obj *o)
{
    /* Only when nobody uses it any more: no pin, no spill or restore job reading or writing,
     * no getter being called (the restore's completion reads it after they return). */
    if (!o->deleted || o->pins > 0 || o->spilling || o->restoring || o->calling || o->disk_reads)
        return;
    DL_DELETE(s->zombies, o);
    obj_destroy(s, o);
    ost__room_freed(s);
}

void ost_obj_abort(ost_store *s, ost_obj *o)
{
    SPW_ASSERT(o->state == OST_CREATED && !o->aborted);
    if (o->pins > 1) {
        /* Followers still send from its memory: it leaves lookups now, the writer's pin goes,
         * and the memory is freed at the followers' last unpin. */
        o->aborted = true;
        uint32_t before = o->pins;
        o->pins--;
        ost__pins_changed(s, o, before);
        if (!o->deleted) {
            HASH_DEL(s->table, o);
            o->deleted = true;
            DL_APPEND(s->zombies, o);
        }
        return;
    }
    if (o->blk != NULL && o->pins > 0)
        s->st.pinned -= ost_block_size(o->blk);
    o->pins = 0;
    if (o->deleted) {
        DL_DELETE(s->zombies, o);
    } else {
        HASH_DEL(s->table, o);
    }
    obj_destroy(s, o);
    ost__room_freed(s);
}

ost_obj *ost_obj_find(const ost_store *s, spw_id id)
{
    ost_obj *o;
    HASH_FIND(hh, s->table, &id, sizeof id, o);
    return o;
}

spw_id ost_obj_id(const ost_obj *o)
{
    return o->id;
}

uint64_t ost_obj_size(const ost_obj *o)
{
    return o->size;
}

enum ost_state ost_obj_state(const ost_obj *o)
{
    return (enum ost_state)o->state;
}

void ost_obj_spare(ost_store *s, ost_obj *o, uint32_t ms)
{
    (void)s;
    if (o->state == OST_SEALED)
        o->spare_until = spw_now_ns() + (uint64_t)ms * 1000000ULL;
}

unsigned ost_obj_where(const ost_obj *o)
{
    return (o->blk != NULL ? OST_IN_MEMORY : 0) | (o->on_disk ? OST_ON_DISK : 0);
}

uint32_t ost_obj_pins(const ost_obj *o)
{
    return o->pins;
}

uint64_t ost_obj_stored_size(const ost_obj *o)
{
    return o->on_disk ? o->stored_size : 0;
}

uint8_t *ost_obj_data(const ost_obj *o)
{
    SPW_ASSERT(o->blk != NULL);
    return o->store_base + ost_block_off(o->blk);
}

uint64_t ost_obj_offset(const ost_obj *o)
{
    SPW_ASSERT(o->blk != NULL);
    return ost_block_off(o->blk);
}

int ost_obj_pin(ost_store *s, ost_obj *o)
{
    if (o->state != OST_SEALED)
        return SPW_ENOTSEALED;
    /* A restore allocates the memory first and a lane then decodes into it: until it is done
     * the bytes are not there, and a failed restore frees that memory. */
    if (o->blk == NULL || o->restoring)
        return SPW_EAGAIN;
    uint32_t before = o->pins;
    o->pins++;
    o->last_use_ns = spw_now_ns();
    touch(s, o);
    ost__pins_changed(s, o, before);
    return 0;
}

int ost_obj_pin_writing(ost_store *s, ost_obj *o)
{
    if (o->state != OST_CREATED)
        return ost_obj_pin(s, o);
    if (o->aborted || o->blk == NULL)
        return SPW_ENOTSEALED;
    o->pins++; /* the writer's pin already counts its bytes as pinned */
    return 0;
}

int ost_obj_unpin(ost_store *s, ost_obj *o)
{
    if (o->pins == 0 || (o->state == OST_CREATED && !o->aborted && o->pins == 1))
        return SPW_ENOTHELD;
    uint32_t before = o->pins;
    o->pins--;
    ost__pins_changed(s, o, before);
    if (o->pins == 0 && o->deleted)
        ost__obj_free_deleted(s, o);
    else if (o->pins == 0)
        ost__spill_maintain(s);
    return 0;
}

void ost_store_foreach(const ost_store *s, void (*fn)(void *arg, const ost_obj *o), void *arg)
{
    for (const ost_obj *o = s->table; o != NULL; o = o->hh.next)
        fn(arg, o);
}

int ost_obj_delete(ost_store *s, spw_id id)
{
    ost_obj *o;
    HASH_FIND(hh, s->table, &id, sizeof id, o);
    if (o == NULL)
        return SPW_ENOOBJ;
    HASH_DEL(s->table, o);
    o->deleted = true;
    if (o->spilling)
        ost__spill_cancel(s, o);
    ost__lru_update(s, o);
    if (o->pins > 0 || o->spilling || o->restoring || o->calling || o->disk_reads) {
        /* Readers, a writer, a threadpool job or the getters being called still use it: free
         * at the last of them. */
        DL_APPEND(s->zombies, o);
        return 0;
    }
    obj_destroy(s, o);
    ost__room_freed(s);
    return 0;
}

static void punch(void *arg, uint64_t off, uint64_t size)
{
    ost_store *s = arg;
    if (fallocate(s->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)off, (off_t)size) == 0)
        s->trimmed += size;
}

uint64_t ost_store_trim(ost_store *s)
{
    struct stat st;
    if (s->fd < 0 || fstat(s->fd, &st) != 0)
        return 0;
    uint64_t resident = (uint64_t)st.st_blocks * 512;
    if (resident <= s->st.used + OST_TRIM_SLACK)
        return 0;
    s->trimmed = 0;
    ost_alloc_foreach_free(s->alloc, punch, s);
    return s->trimmed;
}

void ost_store_maintain(ost_store *s)
{
    ost__waiters_retry(s);
    ost__spill_maintain(s);
}
