/*
 * spw_objstore: a worker node's object store.
 *
 * One arena of `capacity` bytes in shared memory (a memfd the worker maps, and its executors
 * and same-host clients map too), an allocator over it, and a table of objects by id. An object
 * is created, written, sealed, read, and deleted; sealed objects are immutable. Memory is counted
 * once, at the allocator, into ost_stats. Above the spill threshold the least-recently-used
 * unpinned sealed objects are compressed with zstd into an LMDB environment and their memory
 * freed; reading one restores it. Decisions about memory go through ost_mem_state().
 * The store is used from one thread (the worker's loop); zstd and LMDB work runs on the libuv
 * threadpool and never touches the object table.
 */
#ifndef SPW_OBJSTORE_H
#define SPW_OBJSTORE_H

#include <stdbool.h>
#include <stdint.h>

#include <uv.h>

#include "spillway/base.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ost_store ost_store;
typedef struct ost_obj ost_obj;

/** Object states. */
enum ost_state {
    OST_CREATED, /* allocated, being written; not visible to readers */
    OST_SEALED,  /* immutable; in memory, spilled, or both */
};

/** Where a sealed object's bytes are. */
enum ost_where {
    OST_IN_MEMORY = 1, /* in the arena */
    OST_ON_DISK = 2,   /* a spilled copy in LMDB */
};

typedef struct ost_opts {
    uint64_t capacity;        /* arena bytes */
    uint64_t granule;         /* allocation unit (power of two); 0 = page size */
    double spill_threshold;   /* start spilling above this fraction of capacity (0.8) */
    double spill_target;      /* spill until use falls under this fraction (0.7) */
    double pause_threshold;   /* report paused above this fraction (0.9) */
    const char *spill_dir;    /* LMDB environment directory; NULL disables spilling */
    int compression_level;    /* zstd level (1) */
    uint64_t spill_map_size;  /* initial LMDB map size, bytes (0 = 4 × capacity) */
    uint64_t spill_map_max;   /* largest LMDB map size, bytes (0 = no limit but the disk) */
    uint32_t alloc_wait_ms;   /* how long an allocation waits under back-pressure (30000) */
    uint32_t spill_retry_ms;  /* after a failed spill (disk or map full), spilling is tried
                                 again this long after, at the next ost_store_maintain (5000) */
    uint32_t compact_quiet_ms; /* a compaction waits until no spilled copy was deleted for
                                  this long, at an ost_store_maintain (1000): while a job still
                                  consumes what it spilled, the live records it would copy are
                                  about to go too */
    uint32_t spill_threads;   /* spill/restore jobs run at once (libuv threadpool); 0 =
                                 min(cores, 4). The pool must have at least this many threads. */
    const char *name;         /* used in log lines and the memfd name */
    /* Called on the loop thread when memory was freed in the background (a spill finished),
     * so the owner can re-read ost_mem_state at once rather than at its next timer tick. */
    void (*freed_cb)(void *arg);
    void *freed_arg;
    /* When set, memory freed by one of the owner's own calls (a delete, abort, unpin, resize, or
     * an eviction they start) calls this instead of serving the allocations waiting for room at
     * once: the owner then calls ost_store_maintain from its loop, so that no waiter's callback
     * runs in the middle of the owner's call and sees its state half changed. NULL: served at
     * once, inside that call. */
    void (*room_cb)(void *arg);
    void *room_arg;
} ost_opts;

void ost_opts_default(ost_opts *o);
/** Raw bytes of an object per spill record: the least a spill map must hold to take a chunk
 * (a smaller spill_map_max could never hold one). */
#define OST_SPILL_CHUNK (4u << 20)
/** The spill lanes a store with these options runs: spill_threads, or min(cores, 4). */
uint32_t ost_spill_lanes(const ost_opts *o);

/** Figures of a store. Counted incrementally; nothing walks the table to produce them. */
typedef struct ost_stats {
    uint64_t capacity;       /* arena bytes */
    uint64_t used;           /* bytes allocated in the arena (rounded to the granule) */
    uint64_t pinned;         /* bytes of objects pinned by readers or tasks */
    uint64_t peak_used;      /* highest `used` seen */
    uint64_t objs_mem;       /* objects with bytes in memory (sealed or being written) */
    uint64_t objs_disk;      /* objects with a spilled copy */
    uint64_t objs_total;     /* objects in the table */
    uint64_t spilled_raw;    /* raw bytes of objects with a spilled copy */
    uint64_t spilled_stored; /* bytes those copies take in LMDB (after compression) */
    uint64_t spill_count;    /* objects written to LMDB, ever */
    uint64_t spill_bytes;    /* raw bytes written to LMDB, ever */
    uint64_t spill_ns;       /* time spent spilling (threadpool), ever */
    uint64_t restore_count;  /* objects read back from LMDB, ever */
    uint64_t restore_bytes;  /* raw bytes read back, ever */
    uint64_t restore_ns;     /* time spent restoring, ever */
    uint64_t disk_read_bytes; /* raw bytes read from spilled copies without a restore, ever */
    uint64_t spilling_bytes; /* of objects whose spill is queued or running now */
    uint64_t evictions;      /* in-memory copies dropped because a spilled copy existed */
    uint64_t spill_entries;  /* records in the LMDB environment */
    uint64_t allocs;         /* allocations of memory for objects, ever */
} ost_stats;

/** Memory levels, from ost_mem_state(). */
enum ost_level {
    OST_LEVEL_OK,
    OST_LEVEL_SPILL, /* above the spill threshold */
    OST_LEVEL_PAUSE, /* above the pause threshold */
};

/** Creates a store: the memfd arena, its mapping, and (if spill_dir is set) the LMDB env.
 * @return 0; SPW_EINVAL for bad options; -errno if the memfd or mapping fails; an LMDB
 *         failure translated to SPW_EIO / -errno. */
int ost_store_new(uv_loop_t *loop, const ost_opts *o, ost_store **out);
/** Frees the store, every object and its arena. Outstanding async operations must have
 * completed (see ost_store_busy). NULL is a no-op. */
void ost_store_free(ost_store *s);
/** Number of threadpool jobs in flight; the store may be freed only when it is 0. */
int ost_store_busy(const ost_store *s);

/** The arena's memfd (for executors and local clients to map) and its base address here. */
int ost_store_fd(const ost_store *s);
uint8_t *ost_store_base(const ost_store *s);
void ost_stats_get(const ost_store *s, ost_stats *st);
/** The memory level and how many bytes must be freed to get back under the spill target. */
enum ost_level ost_mem_state(const ost_store *s, uint64_t *to_free);
/** Why the spill storage is full, for error texts: "no space left on device in DIR" or "spill
 * map at --spill-map-max (N bytes) in DIR"; "" while it is not full.
 * @note valid until the next call into the store. */
const char *ost_store_full_reason(const ost_store *s);
/** Test hook: changes the capacity limit at run time (not the mapping): a lower value makes
 * the store spill and refuse as if it were that small. 0 restores the real capacity. */
void ost_store_set_limit(ost_store *s, uint64_t limit);

/** Creates an object of size bytes, in state CREATED, pinned once (by its writer).
 * @return 0; SPW_EEXIST if the id is present; SPW_EINVAL if size is 0; SPW_ETOOBIG if size
 *         exceeds the capacity; SPW_ENOMEM if it does not fit now (the caller may squeeze and
 *         retry, see ost_obj_create_async). */
int ost_obj_create(ost_store *s, spw_id id, uint64_t size, ost_obj **out);

/** Completion of an asynchronous store operation. status 0 or an SPW_E* code. */
typedef void (*ost_cb)(void *arg, int status, ost_obj *o);

/** Creates an object, spilling and waiting for room if needed (squeeze, then back-pressure
 * until alloc_wait_ms). cb runs exactly once with the object (CREATED, pinned once) or an
 * error: SPW_EINVAL (size 0), SPW_ETOOBIG, SPW_EEXIST - these before this returns, also while
 * other allocations wait - or, after waiting, SPW_EBACKPRESSURE, SPW_ESPILLFULL, SPW_ESHUTDOWN
 * (the store is freed). It may run before this returns.
 * @return 0, always: every outcome goes to cb. */
int ost_obj_create_async(ost_store *s, spw_id id, uint64_t size, ost_cb cb, void *arg);
/** As ost_obj_create_async, but ahead of every waiting allocation not made this way (and tried
 * at once even while others wait): for memory whose use frees other memory, such as the output
 * of a running task, whose pinned inputs go when it ends. */
int ost_obj_create_first(ost_store *s, spw_id id, uint64_t size, ost_cb cb, void *arg);
/** Gives a CREATED object that nobody but its writer pins (nothing written yet that matters) a
 * new size: its memory is freed and size bytes taken at once, before any waiting allocation can
 * have what was freed, so any size up to the old one always succeeds; what a smaller size gives
 * back goes to the waiting allocations. The bytes are not kept.
 * @return 0; SPW_EINVAL (not CREATED, pinned by followers, size 0); SPW_ETOOBIG (over the
 *         capacity); SPW_ENOMEM (larger, and does not fit now: the object is as it was). */
int ost_obj_resize(ost_store *s, ost_obj *o, uint64_t size);

/** Seals a CREATED object: it becomes readable and immutable, and its writer's pin is dropped.
 * @return 0 or SPW_ESEALED. */
int ost_obj_seal(ost_store *s, ost_obj *o);
/** Drops a CREATED object (a failed write) and frees its memory, or, while followers pinned
 * it (ost_obj_pin_writing), removes it from lookups and frees it at their last unpin. */
void ost_obj_abort(ost_store *s, ost_obj *o);

/** Looks an object up. @return the object, or NULL. */
ost_obj *ost_obj_find(const ost_store *s, spw_id id);
spw_id ost_obj_id(const ost_obj *o);
uint64_t ost_obj_size(const ost_obj *o);
enum ost_state ost_obj_state(const ost_obj *o);
/** OST_IN_MEMORY and/or OST_ON_DISK. */
unsigned ost_obj_where(const ost_obj *o);
uint32_t ost_obj_pins(const ost_obj *o);
/** Bytes the spilled copy takes in LMDB, 0 if none. */
uint64_t ost_obj_stored_size(const ost_obj *o);
/** The object's bytes in the arena. @note valid while the object is pinned and in memory. */
uint8_t *ost_obj_data(const ost_obj *o);
/** Offset of the bytes in the arena. @note as ost_obj_data. */
uint64_t ost_obj_offset(const ost_obj *o);

/** Pins a sealed in-memory object (a reader or task uses it): it will not be spilled or freed
 * until unpinned. @return 0, SPW_ENOTSEALED, or SPW_EAGAIN if it is not in memory or a restore
 * is still bringing it back (ost_obj_get_async waits for that). */
int ost_obj_pin(ost_store *s, ost_obj *o);
/** Pins an object that may still be written (CREATED), for a reader that follows the write
 * and reads only bytes already written; a sealed object is pinned as by ost_obj_pin. If the
 * write is then aborted, the object leaves lookups at once and its memory stays until the
 * last such pin is dropped. @return 0, SPW_ENOTSEALED for an aborted object, or as
 * ost_obj_pin. */
int ost_obj_pin_writing(ost_store *s, ost_obj *o);
/** Spares a sealed object from spilling for headroom for the next ms milliseconds: it is about
 * to be read (a copy fetched for a task that waits to run) or released (the input of a task
 * that just ended), so writing it out would be wasted; only an allocation that waits for room
 * may still spill it. The mark goes when it is pinned next (it may be pinned now: then from its
 * next pin after it is let go), or when the time is up (then the next maintenance spills it if
 * it must: a mark never keeps a store above its threshold for long). */
void ost_obj_spare(ost_store *s, ost_obj *o, uint32_t ms);
/** Drops one pin. @return 0, or SPW_ENOTHELD if it was not pinned (nothing changes). */
int ost_obj_unpin(ost_store *s, ost_obj *o);
/** Brings a spilled object back into memory and pins it; cb runs exactly once (possibly
 * before this returns, when it is already in memory). */
int ost_obj_get_async(ost_store *s, ost_obj *o, ost_cb cb, void *arg);
/** Reads bytes [off, off + len) of a sealed object from its spilled copy into dst, the caller's
 * len bytes, on the spill lanes: nothing of the store's memory is taken or evicted for it, and a
 * restore of o waiting for room does not hold it up (an object also in memory is better read
 * there). cb runs exactly once on the loop thread, later, with 0 or an error (its object
 * argument is NULL). o, even deleted meanwhile, keeps its spilled copy until then. @return 0 (cb
 * will run), or SPW_EAGAIN when o has no spilled copy, SPW_ENOTSEALED, SPW_EINVAL for a range
 * outside it, SPW_ESHUTDOWN (cb will not run). */
int ost_obj_read_spilled(ost_store *s, ost_obj *o, uint64_t off, uint64_t len, uint8_t *dst,
                         ost_cb cb, void *arg);

/** Keeps o, even deleted, and its spilled copy until ost_obj_release_spilled: for a reader that
 * reads the copy piece by piece with ost_obj_read_spilled, with no read under way between two
 * pieces. */
void ost_obj_hold_spilled(ost_store *s, ost_obj *o);
/** Drops a hold of ost_obj_hold_spilled (a deleted object goes at the last one). */
void ost_obj_release_spilled(ost_store *s, ost_obj *o);

/** Calls fn for every object in the table (not those deleted while in use). fn must not
 * create or delete objects. For listings (spillway-ctl memory), not for figures. */
void ost_store_foreach(const ost_store *s, void (*fn)(void *arg, const ost_obj *o), void *arg);

/** Deletes an object: its memory and its spilled copy. If pinned, it disappears from lookups
 * now and its memory is freed at the last unpin.
 * @return 0, or SPW_ENOOBJ for an unknown id (nothing changes). */
int ost_obj_delete(ost_store *s, spw_id id);

/** Hands the arena's free pages back to the kernel (punches them out of the memfd) when the
 * arena holds more than `used` + OST_TRIM_SLACK bytes. Walks the free blocks: call it from a
 * timer, not per allocation. @return bytes of free ranges punched (0: nothing to do). */
uint64_t ost_store_trim(ost_store *s);
#define OST_TRIM_SLACK (4ULL << 20)

/** Starts spilling now if the store is above its threshold (runs in bounded slices on the
 * loop). Called after allocations and by the worker's timer. */
void ost_store_maintain(ost_store *s);
/** Holds spilling decisions (on true) until the matching release (false), which makes them at
 * once: for a caller about to unpin some objects and pin others in one step (a task's end: its
 * inputs let go, its outputs taken by the tasks after it), so that the store chooses what to
 * spill from what that step leaves, not from what it happens to see halfway. Nests. */
void ost_store_hold_spills(ost_store *s, bool hold);
/** Test hook: starts spilling every unpinned sealed object now (in the background).
 * @return 0, or SPW_ENOTSUP without a spill directory. */
int ost_store_spill_all(ost_store *s);
/** Stops starting spill work (queued spills are dropped, queued restores fail with
 * SPW_ESHUTDOWN); idle(arg) runs once no job is running (at once if none is). For shutdown. */
void ost_store_quiesce(ost_store *s, void (*idle)(void *arg), void *arg);

#ifdef __cplusplus
}
#endif
#endif /* SPW_OBJSTORE_H */
