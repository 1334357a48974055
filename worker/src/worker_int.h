/* Worker internals shared by its source files. Not installed. */
#ifndef SPW_WORKER_INT_H
#define SPW_WORKER_INT_H

#include <uthash.h>

#include "spillway/conn.h"
#include "spillway/slab.h"
#include "spillway/task.h"
#include "spillway/worker.h"

/* Copies of an object a worker tries when fetching it (a task argument's locations, a
 * replication's chain): the first WRK_MAX_LOCS the scheduler lists. The scheduler lists every
 * copy (most recent links of a broadcast chain first); eight sources are plenty to fall back
 * on, and a fetch that fails on all of them reports the input lost, which the scheduler answers
 * with a fresh list (task_retry_lost_input). */
#define WRK_MAX_LOCS 8
/* How long a FOLLOW read waits, parked, for an object that has not started arriving (a
 * replication chain's next link asks before its own fetch has begun). */
#define WRK_PARK_MAX_NS (3ULL * 1000000000ULL)
/* How long a task's start waits to be told to the scheduler (TASK_STARTED, for the `running`
 * counts of status and jobs). A task that ends sooner is never announced: a chain of short
 * tasks costs the scheduler one wake-up per hop (TASK_DONE), not two, and a burst of them no
 * notices at all; a long task shows as running this much later. */
#define WRK_STARTED_DELAY_MS 1
/* The last WRK_KEPT_N small task results (at most WRK_KEPT_MAX bytes, inline) are kept after
 * their TASK_DONE, for a task sent ahead that arrives after its producer ended: it runs on the
 * kept value instead of going back to the scheduler (SPW_EAHEAD), which would also drop what
 * was sent ahead after it. A chain's value is small; a scheduler lagging a few hops behind its
 * worker is what this covers. */
#define WRK_KEPT_N 16
#define WRK_KEPT_MAX 64
/* Objects kept from before a lost scheduler connection and reported on registering again go
 * when no OK claims them within this time. */
#define WRK_HELD_CLAIM_MS 30000

/* Tasks queued on one executor at most (wrk__dispatch): 64 for short tasks (under 1 ms), up
 * to WRK_EXEC_DEPTH_MAX for tiny ones, as many as make WRK_EXEC_QUEUE_US of work. */
#define WRK_EXEC_DEPTH_MAX 256
#define WRK_STORED_FNS 4
/* Inline outputs an executor keeps for tasks queued behind their producer (PROTO_ARG_PREV,
 * README, "Chains are sent ahead"): at most EXEC_KEPT_N of them, and of those the newest that
 * fit in EXEC_KEPT_BYTES (the newest always). The worker chains a task only onto an executor
 * with fewer than EXEC_KEPT_N tasks in flight, so its producer's output is still kept when it
 * runs, unless large outputs pushed it out; a task that misses is answered SPW_EAHEAD and the
 * worker gets its input itself. */
#define EXEC_KEPT_N 32
#define EXEC_KEPT_BYTES (1u << 20)
#define WRK_EXEC_QUEUE_US 2000.0

/* Admission (admit.c): admitted tasks' reservations stay under the store's capacity less a
 * margin of max(capacity / WRK_ADMIT_MARGIN_DIV, WRK_ADMIT_MARGIN_MIN), at most half of it. The
 * margin is for what no task reserves: objects a client is writing or holds a view of, reads
 * served to peers, and free space the arena splits between pinned blocks. */
#define WRK_ADMIT_MARGIN_DIV 16
#define WRK_ADMIT_MARGIN_MIN (1ULL << 20)
/* An output expected from what a function made before is taken as that plus 1/this. */
#define WRK_ADMIT_OUT_SLACK 8

/* A peer's read of an object that is only spilled is read from the spilled copy into a buffer
 * of the worker's heap, at most WRK_DISK_READ_MAX bytes (a spill record) at a time, and sent
 * from there (peer.c), never restored into the store; such buffers total at most
 * WRK_DISK_READS_MAX, one connection's at most half of it (a peer that stops reading its answers
 * holds no more), and a read that would pass either waits for one to be freed. */
#define WRK_DISK_READ_MAX (4ULL << 20)
#define WRK_DISK_READS_MAX (16ULL << 20)

/* How long the store spares from spilling for headroom (ost_obj_spare) a copy fetched for a task
 * waiting for admission (about as long as the task before it runs), and the inputs of a task
 * that ended (until the scheduler's release arrives). */
#define WRK_SPARE_FETCHED_MS 2000
#define WRK_SPARE_USED_MS 250

typedef struct wrk_exec wrk_exec;
typedef struct wtask wtask;
typedef struct wfetch wfetch;
typedef struct wfnout wfnout;

/* Store bytes reserved for one object by the admitted tasks naming it (admit.c). */
typedef struct wres {
    spw_id id;
    UT_hash_handle hh;
    uint64_t bytes;       /* the object's size rounded to the granule, or an output's guess */
    uint32_t refs;        /* admitted tasks' arguments and outputs naming it */
} wres;

/* A plugin the worker knows (plugins.c): loaded from --plugin at start, or uploaded by a client
 * and brought here for a task that names it. Keyed by the first PROTO_PLUGIN_PREFIX_HEX hex
 * digits of its hash, which is how a task names it ("NAME@PREFIX"). */
typedef struct wplugin {
    char prefix[PROTO_PLUGIN_PREFIX_HEX + 1];
    UT_hash_handle hh;   /* in w->plugins */
    uint8_t hash[PROTO_PLUGIN_HASH_LEN];
    char hex[PROTO_PLUGIN_HEX_LEN + 1];
    char name[PROTO_MAX_NAME + 1]; /* its own (spw_plugin.name), or the uploader's for it */
    uint64_t size;       /* bytes */
    spw_id obj;          /* the object carrying an uploaded one's bytes */
    char *path;          /* its file in the cache, once written */
    uint8_t state;       /* WP_GETTING (asked the scheduler), WP_FETCHING, WP_READY */
    bool uploaded;       /* false: --plugin */
    uint32_t serial;     /* what executors remember it by (wrk_exec.told) */
    uint32_t uses;       /* tasks here naming it */
    uint64_t used_seq;   /* w->plugin_uses when a task last named it: the cache's LRU order */
    uint64_t req;        /* its PLUGIN_GET, while asked */
    uint64_t check_req;  /* the scheduler's PLUGIN_CHECK to answer once it is here (0: none) */
    spw_buf waiters;     /* spw_id of the tasks parked until it is here */
    /* --plugin only: the file it was copied from, as it was then, to notice a change. */
    const char *src;
    uint64_t src_dev, src_ino, src_size, src_mtime_ns;
    bool src_changed;    /* noticed (logged once) */
} wplugin;

/* One task argument, copied out of TASK_RUN. */
typedef struct warg {
    uint8_t kind;         /* PROTO_ARG_* (INLINE for values the scheduler inlined) */
    uint8_t pinned;       /* obj is pinned for this task */
    uint8_t local;        /* waits for the output of the task of that id here (sent ahead) */
    uint8_t owned;        /* inline_data is a copy of such a task's inline result: freed with
                             the task */
    uint8_t prev;         /* sent to the executor as the output of its producer, queued before
                             it there (PROTO_ARG_PREV): the executor keeps that output */
    uint8_t reserved;     /* holds a reference on w->adm_res for its object (admit.c) */
    uint32_t inline_len;
    const uint8_t *inline_data; /* into the task's blob */
    spw_id id;
    uint64_t off, len;    /* byte range used (whole object: 0, size) */
    uint64_t objsize;
    ost_obj *obj;         /* local copy, pinned while the task needs it */
    uint32_t nlocs;
    char locs[WRK_MAX_LOCS][64]; /* peer addresses holding a copy */
} warg;

enum wtask_state {
    WT_INPUTS, /* waiting for inputs to be fetched or restored */
    WT_QUEUED, /* inputs pinned, waiting for an executor */
    WT_SENT,   /* sent to an executor */
    WT_ADMIT,  /* waiting for admission (on w->adm_head), or admitted and waiting for its
                  output's room (pre_wait): no input got, pinned or fetched yet */
};

struct wtask {
    spw_id id;
    UT_hash_handle hh;
    char fn[PROTO_MAX_NAME + 1];
    uint32_t flags;
    uint8_t state;
    uint32_t nargs;
    warg *args;
    uint32_t missing;     /* inputs not yet pinned locally */
    int fail_status;      /* set when an input could not be obtained */
    char *fail_msg;
    ost_obj *out;         /* output object allocated for the executor (output 0) */
    ost_obj **outx;       /* outputs 1.. of a task of several, as allocated (nouts - 1; made at
                             the first EXEC_ALLOC of one of them) */
    uint32_t nouts;       /* outputs it makes (TASK_RUN's nouts; 1 when absent) */
    uint64_t out_bytes;   /* bytes of the outputs allocated so far (admit.c) */
    ost_obj *pre;         /* room for output 0 taken at admission (the output object, CREATED
                             with the expected size): resized into out when the executor asks */
    wrk_exec *ex;
    uint32_t requeued;    /* times put back after its executor stopped cleanly before it */
    uint32_t gen;         /* w->gen when the scheduler sent it */
    uint32_t started_slot; /* 1 + its index in w->started while its start notice is unsent */
    uint32_t local;       /* arguments with local set: on w->ahead while there are any */
    uint32_t prev;        /* arguments with prev set (only while sent to an executor) */
    bool slab;            /* from w->task_slab (else spw_malloc) */
    uint8_t admitted;     /* holds a reservation (admit.c): released when it is freed */
    uint8_t out_reserved; /* its output's entry in w->adm_res is referenced by it */
    uint8_t adm_listed;   /* on w->adm_head (waiting for admission) */
    uint8_t pre_wait;     /* admitted, its output's room (pre) being allocated */
    uint8_t prefetched;   /* its inputs from elsewhere were fetched ahead of its admission */
    uint64_t alloc_wait;  /* running: bytes of an output allocation it waits for, else 0 */
    wtask *adm_prev, *adm_next; /* w->adm_head, while in state WT_ADMIT */
    wtask *next;          /* ready queue, or the executor's FIFO */
    wtask *aprev, *anext; /* w->ahead */
    wtask *heir; /* a TASK_RUN of the same id from the next scheduler, waiting (unlisted) for
                    this task of an earlier one to leave: then it starts */
    wplugin *plugin;      /* the uploaded plugin its function is in ("NAME@PREFIX"), or NULL */
    uint8_t plugin_wait;  /* parked on plugin->waiters until the plugin is here */
};

struct wrk_exec {
    struct wrk *w;
    uint32_t idx;
    uv_process_t proc;
    bool proc_running;    /* exit callback not yet seen */
    bool proc_handle;     /* proc handle initialised and not closed */
    proto_conn *conn;
    int pid;
    wtask *head, *tail;   /* tasks sent, oldest first */
    uint32_t inflight;
    uint32_t restarts;
    int term_signal;
    int64_t exit_status;
    uint64_t started_ns;
    bool killed;          /* we sent SIGKILL at shutdown */
    uv_timer_t respawn;   /* backoff before respawning a crashing executor */
    bool respawn_init;
    bool recycle;         /* to be replaced once its FIFO is empty (memory, task count) */
    uint64_t tasks_sent;  /* since it started */
    uint64_t rss_checked_ns;
    uint64_t oom_kills;   /* memory.events oom_kill of its cgroup when it started */
    uint32_t *told;       /* serials of the plugins it was told to load (PLUGIN_LOAD) */
    uint32_t ntold, captold;
};

/* A task argument waiting for a fetch (on wfetch.waiters). */
typedef struct fwait {
    wtask *t;
    uint32_t arg;
    struct fwait *next;
} fwait;

/* Byte ranges of one object a fetch reads from different sources at once (a striped
 * REPLICATE): each range comes down its own broadcast tree. */
#define WRK_MAX_STRIPES 4

/* One byte range of a fetch, read from its own sources in turn. */
typedef struct wstripe {
    uint64_t off, end;     /* bytes [off, end) of the source object */
    uint64_t upto;         /* received up to here (off <= upto <= end), in source bytes */
    uint64_t req;          /* its OBJ_READ to peer */
    struct wpeer *peer;    /* where it is read from now (NULL: between sources) */
    uint32_t nlocs, next_loc;
    char locs[WRK_MAX_LOCS][64];
    struct wread *followers; /* peers reading this range while it arrives */
} wstripe;

/* A fetch of an object from peer workers, each range (one unless striped) trying its locations
 * in turn (a stripe resumes where the last one stopped, else it starts again); or of a view of
 * one (ranged): the view's bytes only, into a transient object of its own, keyed by an id
 * private to this worker (wrk__view_id), never reported to the scheduler and deleted once its
 * waiting tasks have pinned it, so that it goes with their last unpin. */
struct wfetch {
    spw_id id;
    UT_hash_handle hh;
    uint64_t size;
    bool ranged;          /* the bytes [src_off, src_off + size) of object src */
    spw_id src;           /* the object read (id itself unless ranged) */
    uint64_t src_off, src_size;
    wstripe st[WRK_MAX_STRIPES]; /* in order, covering [src_off, src_off + size) */
    uint32_t nstripes;
    ost_obj *obj;         /* local object being written */
    uint64_t received;    /* bytes of it received from its start without a gap */
    fwait *waiters;
    bool creating;        /* waiting for store room */
    bool stale;           /* the scheduler that wanted it is gone: dropped once created */
    spw_buf repl;         /* uint64_t request ids of the broadcasts (REPLICATE) to answer */
    struct wread *followers; /* peers reading it whole while it arrives (a broadcast chain) */
    bool plugin;          /* an uploaded plugin's bytes: wrk__plugin_fetched hears how it ends */
    bool ahead;           /* for a task waiting for admission (wrk__fetch_ahead): the copy is
                             spared (ost_obj_spare) if that task has not joined by the end */
};

/* A connection to another worker's peer port, for fetches. */
typedef struct wpeer {
    char addr[SPW_ADDR_MAX];
    UT_hash_handle hh;
    proto_conn *conn;
    bool ready;
    struct wrk *w;
    ost_obj *sink_obj; /* pinned while a chunk is received straight into it */
    uint64_t active_ns; /* last message from it, or request to it */
} wpeer;

/* An object being uploaded to us on a peer-port connection (a client's put), by chunks or
 * written in place by a local client. */
typedef struct wupload {
    spw_id id;
    UT_hash_handle hh;
    UT_hash_handle hh_all; /* in w->uploads, every connection's uploads by id */
    ost_obj *obj;
    uint64_t total;
    uint64_t next_off;
    uint64_t req;
    bool creating;
    bool local;           /* written in place by a local client (OBJ_CREATE / OBJ_SEAL) */
    uint32_t gen;         /* w->gen when it started */
    spw_buf pending;      /* first chunk, kept while waiting for room */
    uint64_t pending_flags;
    struct wsrv *srv;
    struct wread *followers; /* peers reading it while it arrives (a broadcast chain) */
} wupload;

/* A read of one of our objects served on a peer-port connection (OBJ_READ, or a FOLLOW of a
 * broadcast chain), sent chunk by chunk. */
typedef struct wread {
    ost_obj *obj;
    spw_id id;
    uint64_t req;
    uint64_t off, end, pos;
    uint32_t outstanding; /* chunks queued on the connection, not yet written */
    bool pinned;          /* holds a pin on obj (sends borrow its memory) */
    uint8_t *heap;        /* or bytes [hoff, hend) read from obj's spilled copy, one piece of
                             hcap at most at a time (sends borrow them); hcap != 0 for any read
                             from the copy, which it holds (ost_obj_hold_spilled) until freed */
    uint64_t hoff, hend, hcap;
    uint64_t total;       /* the object's size */
    bool chain;           /* a broadcast hop: sent in FOLLOW_CHUNK pieces */
    const uint64_t *avail; /* while obj is still arriving: how much has (a fetch's or an
                              upload's counter); NULL once it is sealed */
    struct wread **flist; /* the followers list it is on */
    uint64_t park_deadline_ns; /* parked: waiting for the object to start arriving */
    struct wsrv *srv;
    struct wread *prev, *next;
    struct wread *fprev, *fnext; /* on *flist (a followers list, or w->disk_waits), or on
                                    w->parked */
} wread;

/* Objects a local client has pinned for zero-copy views. */
typedef struct wpin {
    spw_id id;
    UT_hash_handle hh;
    ost_obj *obj;
    uint32_t count;
} wpin;

/* State of a connection accepted on our peer port (or our local socket). */
typedef struct wsrv {
    struct wrk *w;
    proto_conn *conn;
    wupload *uploads;
    wpin *pins;
    wread *reads;
    bool closed;
    bool held_logged;     /* its reads were held for its unread answers once (logged then) */
    uint32_t pin_waits;   /* OBJ_PINs waiting for their object (the connection is paused) */
    uint32_t read_waits;  /* OBJ_READs waiting for their object's restore (paused at a cap) */
    uint32_t refs;        /* reads with chunks in flight keep this alive after close */
    uint64_t disk_bytes;  /* its reads' buffers of spilled copies (at most half the worker's) */
    ost_obj *sink_obj;    /* pinned while a chunk is received straight into it */
} wsrv;

struct wrk {
    uv_loop_t *loop;
    wrk_opts opts;
    char *name;
    char *sched_addr;
    char *exe;
    const char *plugin_srcs[WRK_MAX_PLUGINS]; /* --plugin files as given (copies, in opts) */
    char *static_paths[WRK_MAX_PLUGINS]; /* their copies in the cache, in the executors' argv */
    uint32_t nstatic;
    wplugin *plugins;      /* by prefix (plugins.c) */
    char *plugin_dir;      /* the cache directory */
    uint64_t plugin_bytes; /* the sizes of the files in it */
    uint32_t plugin_serial;
    uint64_t plugin_uses;  /* tasks taken in naming a plugin, ever: orders wplugin.used_seq */
    wplugin *plugin_last;  /* the plugin the last task naming one named (NULL: none, or gone), */
    char plugin_last_fn[PROTO_MAX_NAME]; /* by that function's name */
    uint32_t plugin_last_len;
    bool plugins_changed;  /* the scheduler has not heard the list since it changed */
    char bound[SPW_ADDR_MAX];
    char advert[SPW_ADDR_MAX]; /* --advertise with the bound port filled in, or "" */
    char host_id[128];
    char local_name[64];   /* Unix socket for same-host clients: abstract, or a path */
    proto_hello_worker hello;
    proto_ctx *ctx;
    proto_conn *sched;
    ost_store *store;
    uint64_t inline_limit;
    uint32_t chunk;
    wrk_exec *execs;
    uint32_t nexec;
    wtask *tasks;          /* by id */
    spw_slab task_slab;    /* tasks of at most WRK_TASK_REC bytes (task_run_rec) */
    /* Functions whose last output went to the store (WRK_STORED_FNS, a ring; "" = none): a task
     * sent ahead waits for such a producer here rather than on its executor (tasks.c), since
     * an executor keeps only inline outputs. */
    char stored_fns[WRK_STORED_FNS][PROTO_MAX_NAME + 1];
    uint32_t stored_next, nstored;
    wtask *ready_head, *ready_tail;
    /* Admission (admit.c, tasks.c): tasks waiting for it in arrival order, the reservations
     * of those admitted by object id, their sum, and what each function's outputs were. */
    wtask *adm_head;
    wres *adm_res;
    uint64_t adm_reserved; /* bytes */
    uint32_t adm_tasks;    /* tasks admitted with a reservation */
    bool adm_pumping;      /* admit_pump is running (a nested call returns) */
    wfnout *adm_fns;
    wtask *ahead;          /* tasks sent ahead, waiting for outputs of tasks here (tasks.c) */
    struct {
        spw_id id;
        uint32_t len;
        uint8_t v[WRK_KEPT_MAX];
    } kept[WRK_KEPT_N];    /* recent small results (WRK_KEPT_N), a ring; len 0 and nil id: none */
    uint32_t kept_next;
    wfetch *fetches;       /* by id */
    wupload *uploads;      /* uploads under way on any connection, by id (hh_all) */
    struct wread *parked;  /* FOLLOW reads of objects not here yet */
    struct wread *disk_waits; /* reads from spilled copies waiting for buffer room (peer.c) */
    wpeer *peers;          /* by address */
    uint32_t nranged;      /* fetches of views under way (fetch.c) */
    uint64_t disk_read_bytes; /* buffers of peers' reads from spilled copies (peer.c) */
    uint64_t next_req;
    uv_timer_t timer;      /* heartbeat and store maintenance */
    uv_idle_t room_idle;   /* serves the store's waiters after memory came back (store_room) */
    bool closing;
    bool welcomed;
    bool registered_once;  /* ready(0) has run */
    uint32_t gen;          /* scheduler sessions so far: work of an older one is dropped */
    uint32_t backoff_ms;   /* next reconnect delay */
    /* Objects kept from before the scheduler connection was lost (sched_lost), until a
     * scheduler claims them (its OK to our OBJS_HELD) or held_deadline_ms passes; held_req: the
     * report's request id while it waits for that OK (0: not sent yet). */
    spw_id *held;
    size_t nheld;
    uint64_t held_req;
    uint64_t held_deadline_ms; /* spw_now_ns-based ms; 0: no deadline running */
    uint64_t trim_allocs;      /* the store's allocations at the last tick (the timer trims) */
    uv_timer_t reconnect;  /* waits before the next attempt to reach the scheduler */
    bool was_paused;
    int handles;
    void (*ready)(void *arg, int status);
    void *ready_arg;
    void (*done)(void *arg, int status);
    int close_status;      /* reported to done */
    uv_timer_t kill_timer; /* SIGKILLs executors that outlive the shutdown deadline */
    bool kill_timer_init;
    void *done_arg;
    uint64_t tasks_done, tasks_failed, exec_restarts;
    uint64_t exec_recycles;  /* executors replaced for memory or task count */
    uint64_t tasks_cancelled; /* dropped before they started: their client went away */
    uint64_t fetched_bytes;   /* received from other workers' peer ports (fetch.c) */
    char *cgroup;          /* delegated cgroup v2 directory, NULL: task limits by rlimit */
    bool host_listed;      /* our entry is in the host's worker directory (hostshare.c) */
    uint32_t running;
    double ewma_us;        /* mean task run time, for executor pipelining */
    /* Tasks an executor began, not yet told to the scheduler: sent in one TASK_STARTED frame
     * WRK_STARTED_DELAY_MS after the first of them (started_timer). A task that ends first is
     * struck out (NULL): its TASK_DONE says all, so no notice follows its end. */
    wtask **started;
    spw_id *started_ids;   /* the frame's ids, same capacity */
    uint32_t nstarted, capstarted;
    uint32_t nstarted_live; /* entries not struck out */
    uv_timer_t started_timer;
    /* Draining (wrk_drain): the DRAIN request the scheduler answers once nothing here is needed
     * any more, the deadline, and whom to tell. */
    uv_timer_t drain_timer;
    uint64_t drain_req; /* 0: not draining */
    void (*drain_done)(void *arg, int status);
    void *drain_arg;
};

/* A task with at most one argument and 64 bytes of inline arguments (a noop, a chain's hop)
 * comes from the worker's slab: a burst costs no malloc per task. */
#define WRK_TASK_REC (sizeof(wtask) + sizeof(warg) + 64)
_Static_assert(WRK_TASK_REC <= SPW_SLAB_MAX, "a task record fits a slab");

/* worker.c */
/* Tells the scheduler an object is stored here (OBJ_ADDED), if it is connected. */
void wrk__sched_obj_added(wrk *w, spw_id id, uint64_t size);
void wrk__maybe_done(wrk *w);
void wrk__exec_gone(wrk *w);
void wrk__mem_check(wrk *w);

/* tasks.c */
void wrk__respawn_closed(uv_handle_t *h);
void wrk__task_run(wrk *w, const proto_msg *m);
/** TASK_RUNS: each record as one TASK_RUN; a bad record is answered alone. */
void wrk__task_runs(wrk *w, const proto_msg *m);
void wrk__exec_msg(wrk_exec *ex, const proto_msg *m);
void wrk__exec_lost(wrk_exec *ex, const char *why);
void wrk__dispatch(wrk *w);
int wrk__exec_start(wrk *w, wrk_exec *ex);
void wrk__input_ready(wrk *w, wtask *t, uint32_t arg, int status, const char *msg);
void wrk__tasks_free_all(wrk *w);
/* Sends the TASK_STARTED notices gathered so far in one frame (nothing if none). */
void wrk__started_flush(wrk *w);
/* The started_timer callback: wrk__started_flush. */
void wrk__started_timer_cb(uv_timer_t *h);
/* Replaces executors marked for recycling that are idle; checks idle executors' memory. */
void wrk__exec_maintain(wrk *w);
/* The scheduler cancels tasks of a client that went away: those not started are dropped. */
void wrk__task_cancel(wrk *w, const proto_msg *m);
/* The host's share of task memory (hostshare.c). */
int wrk__host_join(wrk *w);
void wrk__host_leave(wrk *w);
void wrk__host_check(wrk *w);

/* cgroup v2 task limits (cgroup.c). */
int wrk__cgroup_setup(wrk *w);
void wrk__cgroup_cleanup(wrk *w);
int wrk__cgroup_exec_dir(wrk *w, uint32_t idx, char *out, size_t outlen);
uint64_t wrk__cgroup_oom_kills(wrk *w, uint32_t idx);
/* Test hook: a plain directory that stands in for the worker's own cgroup v2 directory
 * (the cgroup2 mount and /proc/self/cgroup are not consulted); NULL in the daemon. */
extern const char *wrk__cgroup_fake_dir;
/* The scheduler is gone: queued tasks are dropped now, others when they finish. */
void wrk__tasks_drop(wrk *w);

/* peer.c: serving peers */
extern const proto_conn_cbs wrk__peer_cbs;
/* Parked reads past their deadline are answered SPW_ENOOBJ. */
void wrk__parked_expire(wrk *w);
/* Receiving a chunk straight into object o at off (proto_conn_cbs.on_sink): o is pinned in *slot
 * until wrk__sink_release, so an abort meanwhile cannot free the memory being read into.
 * Returns NULL (receive it as usual) if a chunk is already in flight or the pin fails. */
void *wrk__sink_into(wrk *w, ost_obj **slot, ost_obj *o, uint64_t off);
void wrk__sink_release(wrk *w, ost_obj **slot);
/* Readers following an object while it arrives: more of it came, or all of it (sealed). */
void wrk__followers_advance(wrk *w, wread **list, bool sealed);
/* The object will not arrive after all: its followers get the error and stop. */
void wrk__followers_fail(wread **list, int status, const char *msg);
/* An object started arriving (by a fetch or an upload, o its object): parked FOLLOW reads for it
 * start following, or are refused if what they asked for does not arrive as one range. */
void wrk__unpark(wrk *w, spw_id id, ost_obj *o);

/* fetch.c: fetching from other workers */
void wrk__fetch(wrk *w, wtask *t, uint32_t arg);
/* The private id under which this worker keeps the bytes [off, off + len) of object id fetched
 * for a view (a ranged fetch): a hash of the four, seeded so that it is no id anyone makes. */
#define WRK_VIEW_ID_SEED 0x7370696c6c766965ULL
spw_id wrk__view_id(spw_id id, uint64_t off, uint64_t len);
void wrk__replicate(wrk *w, const proto_msg *m);
/* The scheduler released an object: a fetch of it under way stops. */
void wrk__fetch_cancel(wrk *w, spw_id id);
/* A task making object id here was taken in: a fetch of id under way stops, its waiters
 * answered SPW_EOBJLOST (see fetch.c). */
void wrk__fetch_supersede(wrk *w, spw_id id);
void wrk__peers_close(wrk *w);
/* Peer connections with fetches waiting and nothing heard for opts.fetch_stall_ms are closed
 * (their fetches try the next location): a peer cut off by a partition never resets the
 * connection, and nothing else would end the wait. */
void wrk__peers_check(wrk *w);
/* TCP uploads that have their memory and from whose peer nothing came for opts.fetch_stall_ms
 * are dropped (the connection closed, the half-written object freed): a stopped or hung
 * sender would hold that store memory for as long as its connection lived. */
void wrk__uploads_check(wrk *w);
/* The scheduler is gone: fetches stop (their tasks fail); uploads under way are refused. */
void wrk__fetches_drop(wrk *w);

/* check.c: both abort naming the violated invariant and the task or object. wrk__check is
 * the per-event hook (amortised on large tables; nothing unless SPW_CHECK_INVARIANTS). */
void wrk__check_full(wrk *w);
#ifdef SPW_CHECK_INVARIANTS
void wrk__check(wrk *w);
#else
#define wrk__check(w) ((void)(w))
#endif

/* admit.c */
/** The store's capacity; *limit what admitted tasks may reserve together, *margin the rest. */
uint64_t wrk__admit_capacity(const wrk *w, uint64_t *limit, uint64_t *margin);
/** Whether tasks of fn were seen storing their output here (then a task of it is admitted for
 * its output even with no object inputs). */
bool wrk__admit_fn_stores(const wrk *w, const char *fn);
/** The bytes admitting t would add to w->adm_reserved; *in_bytes its inputs (each object once),
 * *out_est the output it is expected to make. */
uint64_t wrk__admit_cost(const wrk *w, const wtask *t, uint64_t *in_bytes, uint64_t *out_est);
/** Admits t: references its inputs' and output's reservations (out_est bytes for the output). */
void wrk__admit_take(wrk *w, wtask *t, uint64_t out_est);
/** A task that skipped admission (what it waited for was to be made here, its function not known
 * to store) is about to pin a result stored here: it takes its reservation now, whatever the
 * limit, so that what is admitted next leaves it room. No-op for one admitted. */
void wrk__admit_late(wrk *w, wtask *t);
/* Running tasks whose output allocation still waits get the rooms of tasks not running yet when
 * only unpinning could make their room (tasks.c, pres_yield); on the tick and after a spill. */
void wrk__pres_recheck(wrk *w);
/** Drops t's reservation (nothing if it holds none). */
void wrk__admit_release(wrk *w, wtask *t);
/** The bytes of t's pinned inputs, each object once. */
uint64_t wrk__admit_pinned(const wrk *w, const wtask *t);
/** t asked for an output of size bytes: its reservation becomes what its outputs hold (for one
 * output: that size; for several: at least their sum so far), and fn's is learned. */
void wrk__admit_output(wrk *w, wtask *t, uint64_t size);
/** t ended with an inline result: a function not seen yet is known to make no stored output. */
void wrk__admit_learn_inline(wrk *w, const wtask *t);
void wrk__admit_free_all(wrk *w);

/* builtins.c */
const spw_plugin *wrk__builtins(void);

/* tasks.c, for plugins.c: a parked task goes on (its plugin is here), or fails. */
void wrk__task_begin(wrk *w, wtask *t);
void wrk__task_fail(wrk *w, wtask *t, int status, const char *msg);

/* plugins.c */
/* Makes the cache directory and copies the --plugin files into it, checking each. */
int wrk__plugins_init(wrk *w);
/* Removes the cache and forgets every plugin (shutdown). */
void wrk__plugins_free(wrk *w);
/* Logs, once, a --plugin file changed on disk since the start (the timer). */
void wrk__plugins_watch(wrk *w);
/* Reads every --plugin file again (wrk_reload). */
void wrk__plugins_reload(wrk *w);
/* A task is being taken in: 0 if its function is no uploaded plugin's or that plugin is here
 * (t->plugin set), 1 if it was parked until the plugin is, or an error (why says it). */
int wrk__plugin_intake(wrk *w, wtask *t, char *why, size_t whylen);
/* The task is freed: its use of its plugin ends. */
void wrk__plugin_unuse(wrk *w, wtask *t);
/* PLUGIN_INFO or PLUGIN_CHECK from the scheduler. */
void wrk__plugin_msg(wrk *w, const proto_msg *m);
/* An ERROR from the scheduler: true if it answers a PLUGIN_GET. */
bool wrk__plugin_error(wrk *w, const proto_msg *m);
/* A fetch of an uploaded plugin's object ended (fetch.c). */
void wrk__plugin_fetched(wrk *w, spw_id id, int status, const char *msg);
/* The scheduler is gone: plugins asked of it are given up. */
void wrk__plugins_drop(wrk *w);
/* Tells ex to load p (PLUGIN_LOAD), once per executor. */
void wrk__plugin_tell(wrk *w, wrk_exec *ex, wplugin *p);
/* Sends WORKER_PLUGINS when the list changed (or always). */
void wrk__plugins_report(wrk *w, bool always);
/* Removes p from the cache and the table (unused, uploaded). */
void wrk__plugin_forget(wrk *w, wplugin *p);
/* Loads p in a process of its own and answers p->check_req with PLUGIN_CHECKED. */
void wrk__plugin_check_start(wrk *w, wplugin *p);
/* fetch.c: fetches an uploaded plugin's object (no task waits on the fetch itself). */
void wrk__fetch_plugin(wrk *w, spw_id id, uint64_t size, const proto_val *locs);
/* fetch.c: starts fetching the object of argument wa here for a task that waits to be admitted
 * (no task waits on the fetch; the task joins it, or finds the copy, once admitted), into room
 * free now. Nothing for an object here or coming already, without a source, for a strict view
 * (fetched as its range when the task runs), or without free room. */
void wrk__fetch_ahead(wrk *w, const warg *wa);

/* executor.c: loading a plugin. wrk__plugin_open loads the file at path in this process and
 * checks its entry point, ABI version and functions: 0 with *handle and *plugin, or
 * SPW_EPLUGIN with why naming what is wrong. wrk__plugin_probe does the same and unloads it,
 * giving its name (spw_strdup'd, the caller frees) and function count. */
int wrk__plugin_open(const char *path, void **handle, const spw_plugin **plugin, char *why,
                     size_t whylen);
int wrk__plugin_probe(const char *path, const char **name, uint32_t *nfns, char *why,
                      size_t whylen);

#endif
