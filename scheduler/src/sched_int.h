/* Scheduler internals shared by its source files. Not installed. */
#ifndef SPW_SCHED_INT_H
#define SPW_SCHED_INT_H

#include <string.h>

#include "spillway/conn.h"
#include "spillway/idmap.h"
#include "spillway/slab.h"
#include "spillway/sched.h"

/* Every uthash table keyed by an object id (sessions' references) hashes it with
 * spw_id_hash, a few multiplies, instead of uthash's byte-wise Jenkins hash, a loop over the
 * key's bytes on every lookup of the scheduler's busiest tables. Other keys (strings, session
 * ids) keep Jenkins. Every scheduler file includes uthash through this header, so one table
 * never meets two functions. */
static inline unsigned sched__hash_key(const void *key, size_t len)
{
    if (len == sizeof(spw_id)) {
        spw_id id;
        memcpy(&id, key, sizeof id);
        return (unsigned)spw_id_hash(id);
    }
    if (len == sizeof(uint64_t)) {
        uint64_t v;
        memcpy(&v, key, sizeof v);
        return (unsigned)((v * 0x9E3779B97F4A7C15ULL) >> 32);
    }
    return 0; /* not reached: callers use HASH_JEN for other lengths */
}
#define HASH_FUNCTION(keyptr, keylen, hashv)                                                        \
    do {                                                                                            \
        if ((keylen) == sizeof(spw_id) || (keylen) == sizeof(uint64_t))                             \
            (hashv) = sched__hash_key((keyptr), (keylen));                                          \
        else                                                                                        \
            HASH_JEN((keyptr), (keylen), (hashv));                                                  \
    } while (0)
#include <uthash.h>

/* Reference kinds, as reported by spillway-ctl memory. The wire (R_MOBJ_REFS, F_STATUS_REFS)
 * indexes them by enum proto_refkind, so the two must stay the same list. */
enum ref_kind {
    REF_CLIENT,
    REF_TASK_ARG,
    REF_PINNED,
    REF_BROADCAST,
    REF_OUTPUT,
    REF_PLUGIN, /* held by the plugin record whose bytes the object is (plugins.c) */
    REF_KINDS
};
#define SCHED_SAME_REF(x) ((int)REF_##x == (int)PROTO_REF_##x)
_Static_assert(SCHED_SAME_REF(CLIENT) && SCHED_SAME_REF(TASK_ARG) && SCHED_SAME_REF(PINNED) &&
                   SCHED_SAME_REF(BROADCAST) && SCHED_SAME_REF(OUTPUT) &&
                   SCHED_SAME_REF(PLUGIN) && SCHED_SAME_REF(KINDS),
               "enum ref_kind mirrors enum proto_refkind");
#undef SCHED_SAME_REF

/* Object states in the directory. */
enum obj_state {
    OBJ_PENDING, /* its task has not finished, or its upload is not sealed */
    OBJ_READY,   /* sealed: inline here or in one or more stores */
    OBJ_FAILED,  /* its task failed; its sched_failure says why */
    OBJ_LOST,    /* every copy was on workers that died */
};

typedef struct sched_obj sched_obj;
typedef struct sched_task sched_task;
typedef struct sched_worker sched_worker;
typedef struct sched_session sched_session;

/* Interned task function name with its observed run time. */
typedef struct sched_fn {
    char *name;
    UT_hash_handle hh;
    double ewma_us; /* exponentially weighted mean run time, microseconds */
    uint64_t runs;
    /* Its last task's output was inline (or empty): a chain of its tasks is sent ahead several
     * hops deep; one of outputs in stores only one hop, so that a worker running ahead of the
     * scheduler's releases never holds more than a few of them (tasks.c). */
    bool inline_out;
    /* A function of an uploaded plugin ("NAME@PREFIX"): 1, else -1; 0 until place.c looks. */
    int8_t uploaded;
} sched_fn;

/* One task argument. The arguments follow their task in its record, each as long as its kind
 * needs (sched__arg_size; walk them with sched__arg_next): an inline value is 16 bytes and the
 * value's bytes, padded to 8; an object reference 48 bytes, a view 64. For object arguments the
 * node links the task into the object's list of consumers until the task finishes, which is how
 * spillway-ctl memory names TASK_ARG holders; the task is found from the argument's offset in
 * its record (sched__arg_task). obj is NULL for inline arguments (and for object arguments once
 * their task finished). The fields after obj exist only for the kinds that say so: read them
 * after checking kind.
 * Lineage: an object argument whose object's value was here (inline of at most
 * SCHED_ARG_KEEP_MAX bytes, or empty) keeps that value when its task finishes with an output in
 * a store (kept != 0), in the bytes its consumer links used, so that the task can run again
 * (sched__worker_lost) after that object's record is gone: nothing else may reference it (a
 * sleep_ms before a fill). The task then gets the value inline, and the argument is never
 * linked again. */
typedef struct sched_arg {
    uint8_t kind;         /* PROTO_ARG_* */
    uint8_t waiting;      /* the object is pending: counted in task->ndeps */
    uint8_t linked : 1;   /* on obj->consumers */
    /* Its task finished with an output in a store: it holds one lineage count on the object
     * (sched_obj.lineage), whose task can then run again to re-make it (tasks.c). */
    uint8_t held : 1;
    uint8_t kept; /* 0, or its value is kept: length + 1, the bytes in kept_small */
    union {
        uint32_t task_off;   /* PROTO_ARG_OBJ, PROTO_ARG_VIEW: bytes from its task to it */
        uint32_t inline_len; /* PROTO_ARG_INLINE: the value's bytes, which follow obj */
    };
    sched_obj *obj;       /* object arguments: holds a TASK_ARG reference until finished */
    /* PROTO_ARG_OBJ and PROTO_ARG_VIEW only: */
    union {
        struct {
            struct sched_arg *cprev, *cnext; /* while linked */
        };
        uint8_t kept_small[16]; /* kept in 1..17: the value (kept - 1 bytes) */
    };
    spw_id id; /* the object's id, kept for lineage after the task finished */
    /* PROTO_ARG_VIEW only: */
    uint64_t off, len;
} sched_arg;
#define SCHED_ARG_KEEP_MAX 16 /* the largest value an argument keeps for lineage */
#define SCHED_ARG_INLINE_HDR offsetof(sched_arg, cprev)
#define SCHED_ARG_OBJ_SIZE offsetof(sched_arg, off)
_Static_assert(SCHED_ARG_INLINE_HDR == 16 && SCHED_ARG_OBJ_SIZE == 48 && sizeof(sched_arg) == 64,
               "sched_arg's sizes by kind");
static inline size_t sched__arg_size_of(uint64_t kind, size_t inline_len)
{
    if (kind == PROTO_ARG_INLINE)
        return SCHED_ARG_INLINE_HDR + ((inline_len + 7) & ~(size_t)7);
    return kind == PROTO_ARG_VIEW ? sizeof(sched_arg) : SCHED_ARG_OBJ_SIZE;
}
static inline size_t sched__arg_size(const sched_arg *a)
{
    return sched__arg_size_of(a->kind, a->kind == PROTO_ARG_INLINE ? a->inline_len : 0);
}
/* The argument after a. */
static inline sched_arg *sched__arg_next(const sched_arg *a)
{
    return (sched_arg *)(uintptr_t)((const char *)a + sched__arg_size(a));
}
/* An inline argument's value (inline_len bytes). */
static inline const uint8_t *sched__arg_value(const sched_arg *a)
{
    return (const uint8_t *)a + SCHED_ARG_INLINE_HDR;
}
/* The value an object argument keeps for lineage (a->kept != 0): *len bytes. */
static inline const uint8_t *sched__arg_kept_value(const sched_arg *a, uint64_t *len)
{
    *len = (uint64_t)a->kept - 1;
    return a->kept_small;
}

/* How many of a graph's big sources one worker was given (place.c deals them evenly). */
typedef struct sched_spread {
    uint32_t worker; /* the key */
    uint32_t n;
    UT_hash_handle hh;
} sched_spread;

/* A submitted graph: its caps and what it has in flight. Freed with its last task. */
typedef struct sched_graph {
    uint64_t session;    /* submitter */
    uint64_t gid;        /* the client's graph id */
    uint64_t no;         /* the scheduler's number for it: unique while the scheduler runs */
    uint64_t max_tasks;  /* tasks assigned at once (0: no cap) */
    uint64_t max_bytes;  /* bytes of outputs in flight and not yet consumed (0: no cap) */
    uint64_t inflight;   /* tasks assigned and not finished */
    uint64_t live_bytes; /* outputs in stores whose consumers have not all finished */
    uint64_t peak_live;
    double avg_src_out;  /* mean output size of its source tasks (depth 0), bytes */
    uint64_t src_runs;
    sched_spread *spread; /* its big sources given to each worker (place.c), or NULL */
    uint64_t spread_held; /* the dispatch pass that last held one back for its turn */
    uint64_t ntasks;     /* task records alive (+1 while it is being submitted) */
    /* Progress, for GRAPHS (spillway-ctl jobs, spillway_graph_status, the dashboard). */
    uint64_t counts[PROTO_TSTATE_COUNT]; /* its tasks by state; a freed task keeps its last */
    uint64_t created_ms, ended_ms; /* ended: every task done or failed (0: not yet) */
    bool submitted;      /* its last SUBMIT frame arrived */
    uint32_t pid;        /* submitter's, kept after it disconnects */
    char host[64];
    char *site;          /* call site of the submit, or NULL */
    struct sched_graph *gprev, *gnext; /* s->graphs, oldest first */
    uint64_t total;      /* tasks accepted into it (--graph-max-total) */
    struct sched_plugin **plugins; /* uploaded plugins its tasks name, each referenced once
                                      until its last task record goes (plugins.c) */
    uint32_t nplugins;
    uint64_t jgid;    /* its number in the journal (journal.c; 0: not journalled) */
    uint32_t jframes; /* its SUBMIT frames journalled */
} sched_graph;

/* Graphs whose every task record is gone stay listed (finished) until this many such exist. */
#define SCHED_GRAPHS_KEPT 32

/* The smallest chunk of a chunked object (sched__chunk_size): below it a client's chunk_max is
 * rounded up. */
#define SCHED_CHUNK_MIN (64u << 10)

#define SCHED_DEPTHS 64 /* ready tasks are bucketed by depth; deeper runs first */
#define SCHED_AHEAD_PER_SLOT 8 /* tasks sent ahead to a worker at once, per slot (tasks.c) */
#define SCHED_AHEAD_CHAIN_PER_SLOT 32 /* the same for links of a linear chain (tasks.c) */
#define SCHED_AHEAD_VISITS 64 /* consumers one walk sending tasks ahead looks at (tasks.c) */

/* Object records (a sched_obj, and a task's sched_task with its arguments after it) come from
 * slabs of 16-byte size classes up to SCHED_REC_SLAB bytes; larger ones from the heap. */
#define SCHED_REC_SLAB 1024
#define SCHED_REC_CLASSES (SCHED_REC_SLAB / 16)
#define SCHED_REC_HEAP 0xFF /* sched_obj.rec_class of a record on the heap */
/* Bytes in a record of slab size class k (not SCHED_REC_HEAP). */
static inline size_t sched__rec_bytes(unsigned k)
{
    return ((size_t)k + 1) * 16;
}

enum task_state {
    T_WAITING = PROTO_TSTATE_WAITING,
    T_READY = PROTO_TSTATE_READY,
    T_ASSIGNED = PROTO_TSTATE_ASSIGNED,
    T_RUNNING = PROTO_TSTATE_RUNNING,
    T_DONE = PROTO_TSTATE_DONE,
    T_FAILED = PROTO_TSTATE_FAILED,
};
_Static_assert(T_FAILED + 1 == PROTO_TSTATE_COUNT, "enum task_state mirrors PROTO_TSTATE_*");

/* A task: in its output object's record, right after the sched_obj (sched__obj_producer), its
 * arguments right after it (sched__task_args). Its id is its output's, and the submitter and
 * submit time are the output's too (sched__task_out). */
struct sched_task {
    sched_fn *fn;
    uint32_t nargs;
    uint32_t ndeps;       /* pending object arguments */
    uint32_t flags;       /* PROTO_TASK_* */
    uint8_t state;        /* enum task_state */
    uint8_t args_released : 1;
    /* Run only on the worker of a name, which is in the record after the arguments, preceded by
     * a uint64_t: since when no connected worker has that name (0: one has). sched__task_place,
     * sched__place_missing. */
    uint8_t placed : 1;
    /* Long tasks queued behind a running one (place.c): queued while it is assigned so
     * (counted in sched.nqueued); taking while a TASK_CANCEL takes it back for a worker gone
     * idle (sched.ntaking); taken once back, until assigned again, so it goes to a free slot. */
    uint8_t queued : 1;
    uint8_t taking : 1;
    uint8_t taken : 1;
    /* Planned on a worker its inputs are moved to as they are made (push.c) while it waits. */
    uint8_t planned : 1;
    uint8_t retries;
    uint8_t depth;        /* 0 for a task on puts and values; 1 + its deepest producer */
    /* Its outputs: nouts of them (1..SPW_TASK_OUTPUTS_MAX), output 0 in this record's object,
     * output i >= 1 an object of its own (is_out) with id spw_id_output(id, i). outs_alive
     * counts the records of outputs 1.. that exist: output 0's record, which holds the task, is
     * freed only once none does (until then, if released, it is a husk). */
    uint16_t nouts;
    uint16_t outs_alive;
    uint32_t mark;        /* the last lineage pass that chose it to run again (tasks.c) */
    sched_graph *graph;
    sched_worker *worker; /* while assigned, or sent ahead there (sched__task_ahead) */
    /* A task is on a ready bucket (T_READY) or on its worker's list (T_ASSIGNED, T_RUNNING, or
     * sent ahead: sched__task_ahead), never both: the two links share their bytes, and are NULL
     * in every other state. */
    union {
        struct {
            sched_task *qprev, *qnext; /* ready bucket */
        };
        struct {
            sched_task *wprev, *wnext; /* worker's list */
        };
    };
};

/* A LOCATE waiting for a pending object to become ready (or fail), until its deadline. */
typedef struct sched_waiter {
    sched_session *sess;
    uint64_t req;
    uint64_t deadline_ns;
    struct sched_waiter *prev, *next;   /* on the object */
    struct sched_waiter *sprev, *snext; /* on the session */
    sched_obj *obj;
} sched_waiter;

/* A session's references to one object. */
typedef struct sched_ref {
    spw_id id;
    UT_hash_handle hh; /* in the session's table */
    sched_obj *obj;
    sched_session *sess;
    uint32_t count[REF_KINDS];
    struct sched_ref *oprev, *onext; /* on obj->holders */
} sched_ref;

/* Where objects come from: the session that created them (its id, host and pid, kept after it
 * disconnects) and the call site, with the time its objects' creation times count from. Interned
 * (sched__origin_intern) and counted by the objects naming it: the tasks of one submit share
 * one, so an object carries a pointer and a 32-bit time instead of the five fields. */
typedef struct sched_origin {
    UT_hash_handle hh; /* in s->origins, keyed by owner and site together (while hashed) */
    uint64_t refs;     /* objects naming it */
    uint64_t base_ms;  /* wall clock time its objects' created offsets count from */
    const char *host;  /* the owner's, interned (sched__host_intern) */
    uint32_t pid;      /* the owner's */
    uint32_t len;      /* of site */
    bool hashed;       /* false once a newer origin of the same key replaced it */
    uint64_t owner;    /* session; the key is its 8 bytes, then site's len bytes */
    char site[];       /* the call site, NUL-terminated */
} sched_origin;

struct sched_obj {
    spw_id id; /* key of s->objects */
    uint64_t size;
    uint8_t state;         /* enum obj_state */
    uint8_t rec_class;     /* its record's slab (s->recs[rec_class]), or SCHED_REC_HEAP */
    uint8_t orphan : 1;    /* released while its task runs: free when it finishes */
    /* The submitter's OUTPUT reference of a PROTO_TASK_KEEP task is held here, not in a
     * sched_ref of its own: kept is 1 while it is (counted in refs[REF_OUTPUT] and the owner
     * session's nrefs), and the object is then on that session's kept list. */
    uint8_t kept : 1;
    uint8_t has_task : 1;    /* a task computing it follows in its record (sched__obj_producer) */
    uint8_t live : 1;        /* counted in its task's graph's live_bytes */
    uint8_t has_waiters : 1; /* LOCATE requests wait for it (sched__obj_waiters) */
    uint8_t has_inline : 1;  /* its result (size > 0 bytes) is here (sched__obj_inline) */
    uint8_t has_failure : 1; /* why it failed is in s->failures (sched__obj_failure) */
    uint8_t is_out : 1;      /* output i >= 1 of a task, which is in output 0's record */
    /* A released task output whose record stays for its task, which may have to run again
     * (lineage): output 0 of a task of several while others of them live, or an output finished
     * tasks read (lineage > 0). Its data is gone (no copy, no value; state OBJ_LOST with no
     * failure). Freed with the last of them. */
    uint8_t husk : 1;
    /* A chunked put (an object larger than a store): its bytes are in its chunks, objects of
     * their own with ids spw_id_output(id, 1 + i), which it holds while it lives (each has
     * is_chunk). It has no copy and no value; it is ready once every chunk is. */
    uint8_t chunked : 1;
    uint8_t is_chunk : 1; /* chunk of the chunked object spw_id_output_task(id): held by it */
    /* Copies of it the cluster keeps (a put with replicas, BROADCAST's keep): a holder lost or
     * drained is replaced while workers remain (0 or 1: no more than it has). */
    uint8_t copies_want : 5;
#define SCHED_COPIES_MAX 31
    uint32_t created;        /* ms after origin->base_ms (sched__obj_created_ms) */
    /* Small results live here, not in a store (has_inline; their length is size): up to 8 bytes
     * in inline_small, larger ones on the heap. A chunked object has none: its layout is here. */
    union {
        uint8_t inline_small[8];
        uint8_t *inline_heap;
        struct {
            uint8_t shift;  /* its chunks are 1 << shift bytes, the last one what is left */
            uint16_t n;     /* chunks */
            uint16_t ready; /* chunks sealed so far */
        } chunks;
    };
    uint32_t refs[REF_KINDS];
    uint32_t graph_hold;   /* held while its graph is being submitted or while it is processed */
    /* Finished tasks with stored outputs that read it (sched_arg.held): while there are any, a
     * released task output keeps its record as a husk, so that lineage can make it again for
     * them (tasks.c). Not a reference: it keeps no bytes anywhere. */
    uint32_t lineage;
    uint32_t *locs;        /* worker ids holding a copy */
    uint32_t nlocs, caplocs;
    sched_ref *holders;    /* sessions holding references */
    sched_arg *consumers;  /* arguments of unfinished tasks that use it */
    uint32_t put_worker;   /* worker receiving the upload of a put, while pending */
    uint32_t home;         /* worker whose task computed it (0: a put, or not computed yet) */
    sched_obj *kprev, *knext; /* on the owner session's kept list */
    sched_origin *origin;     /* who created it, where, when (sched_origin) */
};

/* A plugin a worker's executors load, as its WORKER_PLUGINS said. */
typedef struct sched_wplugin {
    uint8_t hash[PROTO_PLUGIN_HASH_LEN];
    char name[PROTO_MAX_NAME + 1];
    uint64_t size;
    bool uploaded;
} sched_wplugin;
/* Plugins of one worker kept for status: the 16 of --plugin and the uploaded ones it caches. */
#define SCHED_WORKER_PLUGINS_MAX 256

/* An uploaded plugin (plugins.c). */
typedef struct sched_plugin_holder {
    uint64_t session;
    uint32_t count; /* PLUGIN_ADDs not yet released */
} sched_plugin_holder;
typedef struct sched_plugin_waiter {
    uint64_t session;
    uint64_t req; /* its PLUGIN_ADD, answered when the check ends */
} sched_plugin_waiter;
typedef struct sched_plugin {
    char prefix[PROTO_PLUGIN_PREFIX_HEX]; /* key in s->plugins (not NUL-terminated) */
    UT_hash_handle hh;
    uint8_t hash[PROTO_PLUGIN_HASH_LEN];
    char hex[PROTO_PLUGIN_HEX_LEN + 1];
    char name[PROTO_MAX_NAME + 1];
    uint64_t size;
    sched_obj *obj;        /* its bytes: holds one PLUGIN reference on it */
    uint8_t state;         /* PROTO_PLUGIN_CHECKING, PROTO_PLUGIN_READY */
    uint32_t nfns;
    uint32_t clients;      /* the holders' counts summed */
    uint32_t graphs;       /* graphs with task records naming it */
    sched_plugin_holder *holders;
    uint32_t nholders, capholders;
    sched_plugin_waiter *waiters;
    uint32_t nwaiters, capwaiters;
    uint64_t check_req;    /* its PLUGIN_CHECK under way (0: none) */
    bool check_deferred;   /* no worker known to run uploads yet, but some have not said:
                              checked when one does (sched__worker_plugins) */
    uint32_t check_worker; /* the worker asked */
} sched_plugin;

struct sched_worker {
    uint32_t id;
    proto_conn *conn;
    char addr[SPW_ADDR_MAX];
    char name[PROTO_MAX_NAME + 1]; /* as long as HELLO allows: tasks are placed by exact name */
    char host_id[128];
    char local[128];
    uint32_t slots;
    uint64_t capacity;
    uint32_t assigned; /* tasks sent and not finished */
    uint32_t ahead;    /* tasks sent ahead of their inputs (tasks.c): on tasks, not assigned */
    uint64_t stats[PROTO_STAT_COUNT];
    uint64_t reserved; /* bytes of uploads placed here and not yet sealed */
    uint64_t last_hb_ns;
    sched_task *tasks; /* assigned tasks, and those sent ahead */
    UT_hash_handle hh; /* in s->wbyid */
    /* Its place in the load buckets (workers.c): its class (workers of its slot count), the
     * bucket (assigned when last placed; UINT32_MAX: gone), and its links in that bucket. */
    uint32_t wclass, load_at;
    struct sched_worker *lprev, *lnext;
    uint64_t assign_seq; /* s->assign_seq when it was last given a task */
    sched_wplugin *plugins; /* what its executors load (WORKER_PLUGINS) */
    uint32_t nplugins;
    bool runs_uploads; /* its WORKER_PLUGINS came and said it runs uploaded plugins: counted in
                          s->upload_workers; until then tasks of those are not placed here */
    bool plugins_known; /* its first WORKER_PLUGINS came (whether it runs uploads is known) */
    /* Draining (drain.c): 0, PROTO_WSTATE_DRAINING or PROTO_WSTATE_DRAINED. */
    uint8_t drain;
    bool drain_pumping;
    spw_id *drain_q;         /* objects whose copy here may be one too few elsewhere */
    uint32_t ndrain_q, capdrain_q;
    uint32_t drain_inflight; /* copies of its objects under way */
    uint32_t drain_failed;   /* copies that failed */
    uint64_t drain_copies;   /* copies made */
    struct sched_drain_req *drain_reqs; /* DRAIN requests answered once it is drained */
    uint32_t ndrain_reqs, capdrain_reqs;
    /* The objects it holds a copy of (listed in their locs) or receives the upload of
     * (put_worker), so that its departure visits them only (sched__worker_lost). */
    spw_idmap objs;
};

struct sched_session {
    uint64_t id;
    proto_conn *conn;
    int role;
    uint32_t pid;
    char host[64];
    const char *ihost;    /* host, interned (sched__host_intern) at its first object */
    char name[64];
    sched_ref *refs;      /* by object id */
    sched_obj *kept;      /* objects holding its OUTPUT reference inline (sched_obj.kept) */
    uint64_t nrefs;
    sched_waiter *waiters;
    uint64_t tasks_submitted;
    uint64_t graph;         /* graph being submitted, 0 = none */
    sched_graph *cur_graph; /* its record */
    sched_obj **building;   /* outputs of that graph, held until its last frame */
    uint32_t nbuilding, capbuilding;
    uint32_t memqs;         /* its memory queries under way (memory.c): at most one */
    uint32_t nwaiters;      /* its LOCATE requests waiting (on waiters): SCHED_WAITERS_MAX at most */
    bool held_logged;       /* its reads were held for its answers once (logged then only) */
    bool waiters_logged;    /* its reads were held for its LOCATEs once (logged then only) */
    /* Resuming (sessions.c): a client that said in HELLO it can resume gets a token; when its
     * connection breaks the session is detached (conn NULL) until drop_ns, and a HELLO naming
     * it with the token reattaches it. */
    bool resumable;
    /* Its connection came over loopback or the local socket: its pid is a process of this
     * host, whose end drops the session at once rather than after the grace (sessions.c). */
    bool on_this_host;
    bool resumed;           /* reattached: its next frame may repeat a request already done */
    bool results_due;       /* reattached: its finished tasks' results go out again */
    uint8_t token[PROTO_TOKEN_LEN];
    uint64_t drop_ns;       /* detached: when it is dropped (spw_now_ns clock) */
    uint64_t nrecv;         /* its client's frames processed (WELCOME's nrecv on resume) */
    bool jnl_dirty;         /* nrecv moved this turn: its journal record is written again */
    UT_hash_handle hh;      /* in sched.sessions by id */
};

/* What a connection's data pointer refers to. */
typedef struct conn_tag {
    int kind; /* 0 unknown, 1 worker, 2 session */
    union {
        sched_worker *w;
        sched_session *s;
    };
} conn_tag;

struct sched {
    uv_loop_t *loop;
    sched_opts opts;
    proto_ctx *ctx;
    char listen[64];
    char local_name[48]; /* the local socket's name ("@spillway-scheduler-PORT"), or "" */
    uint64_t start_ms;
    uv_idle_t kick;     /* runs dispatch when there is ready work */
    uv_timer_t timer;   /* heartbeats, LOCATE deadlines */
    bool closing;
    uint64_t pass; /* dispatch passes so far (place.c) */
    int handles;
    void (*done)(void *);
    void *done_arg;
    uint64_t next_session;
    sched_worker **workers;
    uint32_t nworkers, capworkers;
    sched_worker *wbyid;    /* the workers by id (workers.c) */
    struct sched_wclass *wclass; /* the workers by slot count, bucketed by load (workers.c) */
    uint32_t nwclass;
    uint64_t assign_seq;
    sched_worker *fill; /* the worker given the last task placed by load (place.c), or NULL */
    uint64_t graph_seq; /* the last graph's number (sched_graph.no) */
    /* A worker whose place in the load buckets is fixed once at the end of its TASK_DONES frame,
     * not per task (sched__worker_load skips it meanwhile); NULL otherwise. */
    sched_worker *load_later;
    uint32_t rr;        /* round-robin start for placement */
    sched_session *sessions; /* by id */
    spw_idmap objects;  /* the directory: sched_obj by id (spillway/idmap.h) */
    spw_slab recs[SCHED_REC_CLASSES]; /* object records by size class (sched__rec_alloc) */
    sched_fn *fns;
    struct sched_host *hosts; /* interned host names */
    sched_origin *origins;    /* interned origins, counted by the objects naming them */
    struct sched_waitq *waitqs;     /* LOCATE requests waiting, by object (sched__obj_waiters) */
    struct sched_failure *failures; /* why objects failed, by object (sched__obj_failure) */
    sched_origin *last_origin;      /* the last one interned: a graph's tasks share one */
    sched_session *last_sess;       /* the last session found by id (send_result); NULL when gone */
    sched_fn *last_fn;              /* the last function interned (a graph's tasks share one), */
    size_t last_fn_len;             /* and the length of the name it was found by */
    struct memq *memqs;       /* spillway-ctl memory queries under way */
    uint64_t memq_indexed;    /* store records they indexed, SCHED_MEMQ_SCAN a turn at most */
    struct bcast *bcasts;     /* broadcasts under way */
    sched_task *ready[SCHED_DEPTHS]; /* DL lists by depth */
    uint64_t nready;
    uint64_t nqueued;  /* tasks with `queued` set: long ones queued behind a running one */
    uint64_t ntaking;  /* tasks with `taking` set: being taken back for an idle worker */
    uint64_t tstate[PROTO_TSTATE_COUNT];
    uint64_t obj_bytes; /* sizes of READY objects */
    uint64_t refs[REF_KINDS]; /* references of each kind over all objects */
    sched_graph *graphs;      /* live graphs and the last SCHED_GRAPHS_KEPT finished ones */
    uint32_t graphs_gone;     /* graphs on that list with no task record left */
    uint64_t latency[PROTO_LATENCY_NBOUNDS + 1]; /* tasks done per submit->done bucket */
    uint64_t latency_sum_us;
    uint32_t ndraining;       /* workers draining or drained (drain.c) */
    uint32_t copy_rr;         /* where the next copy's search for a target starts */
    double copy_rate;         /* bytes per microsecond one move of an object took, a moving
                                 average over the moves seen (0: none yet) */
    uint32_t lineage_mark;    /* the last lineage pass (sched_task.mark) */
    uint64_t lineage_reruns;  /* tasks run again to re-make lost outputs */
    uint64_t objects_lost;    /* objects lost with no task to re-make them */
    uint64_t nhusks;          /* records that are husks (no object to users) */
    spw_id *lin_drop;         /* lineage counts to drop, one at a time (sched__lineage_drop) */
    uint32_t nlin_drop, caplin_drop;
    bool lin_dropping;
    sched_plugin *plugins;    /* uploaded plugins by prefix (plugins.c) */
    uint64_t plugin_req;      /* the last PLUGIN_CHECK's request id */
    sched_plugin *plugin_last; /* the plugin the last task naming one named (NULL: none, or it
                                  went), by its function's name: */
    char plugin_last_fn[PROTO_MAX_NAME];
    uint32_t plugin_last_len;
    uint32_t upload_workers;  /* connected workers that run uploaded plugins (runs_uploads) */
    uint64_t upload_none_ns;  /* since when a task of an uploaded plugin found no such worker
                                 (place.c; 0: one is connected) */
    struct sched_jnl *jnl;    /* the journal (journal.c), or NULL without --state-dir */
    struct sched_push *push;  /* plans and moves (push.c), or NULL while there are none */
};

/* objects.c */
sched_obj *sched__obj_find(sched *s, spw_id id);
/* How far ahead a batch loop prefetches (sched__objs_prefetch): the directory slot of the id
 * of element i + 2 * AHEAD and the record of element i + AHEAD. */
#define SCHED_PREFETCH_AHEAD 8
/* Called at element i of a batch loop over arr (a frame's array) that looks each element's id up
 * in the directory: prefetches for the elements ahead (spw_idmap_prefetch), so that the cache
 * misses on slots and records of consecutive lookups overlap instead of following one another.
 * field: the id's field in arr's records, or -1 for an array of ids. Only a hint: changes
 * nothing, and an element with no valid id costs one useless prefetch. At i = 0 it also
 * prefetches for the first elements. */
static inline spw_id sched__objs_id_at(const proto_val *arr, int field, uint32_t j)
{
    return field < 0 ? arr->arr.v[j].id : PROTO_REC(arr, j)[field].id;
}
static inline void sched__objs_prefetch(const sched *s, const proto_val *arr, int field,
                                        uint32_t i)
{
    uint32_t n = arr->arr.n;
    /* At the start, the first elements: records of those that come at once, slots of the next. */
    for (uint32_t j = 0; i == 0 && j < n && j < 2 * SCHED_PREFETCH_AHEAD; j++)
        spw_idmap_prefetch(&s->objects, sched__objs_id_at(arr, field, j),
                           j < SCHED_PREFETCH_AHEAD ? 1 : 0);
    for (int stage = 0; stage < 2; stage++) {
        uint32_t j = i + (stage == 0 ? 2 : 1) * SCHED_PREFETCH_AHEAD;
        if (j < n)
            spw_idmap_prefetch(&s->objects, sched__objs_id_at(arr, field, j), stage);
    }
}
/* Like sched__objs_prefetch for a batch of ids expected to be new (SUBMIT's tasks, looked up only
 * to refuse a duplicate, then added): there is no record to fetch, so it prefetches only the
 * directory slot of element i + SCHED_PREFETCH_AHEAD (and at i = 0 those of the first ones),
 * and never reads the table. */
static inline void sched__objs_prefetch_new(const sched *s, const proto_val *arr, int field,
                                            uint32_t i)
{
    uint32_t n = arr->arr.n;
    for (uint32_t j = 0; i == 0 && j < n && j < SCHED_PREFETCH_AHEAD; j++)
        spw_idmap_prefetch(&s->objects, sched__objs_id_at(arr, field, j), 0);
    if (i + SCHED_PREFETCH_AHEAD < n)
        spw_idmap_prefetch(&s->objects, sched__objs_id_at(arr, field, i + SCHED_PREFETCH_AHEAD), 0);
}
/* site: the call site, sitelen bytes (not NUL-terminated), interned. */
sched_obj *sched__obj_new(sched *s, spw_id id, sched_session *owner, const char *site,
                          size_t sitelen);
/* Like sched__obj_new, with `task` zeroed bytes after the object in its record, for the task
 * that computes it (its sched_task, arguments and blob: sched__obj_producer, once the caller set
 * has_task). A task lives exactly as long as its output object, so the two are one allocation.
 * now_ms: the wall clock (spw_wall_ms) as its caller last read it, its creation time: a batch
 * reads it once, not once per record. NULL if out of memory. */
sched_obj *sched__obj_new_task(sched *s, spw_id id, sched_session *owner, const char *site,
                               size_t sitelen, size_t task, uint64_t now_ms);
/* The task computing o, or NULL for a put. */
static inline sched_task *sched__obj_producer(const sched_obj *o)
{
    return o->has_task ? (sched_task *)(uintptr_t)(o + 1) : NULL;
}
/* The task computing o, or NULL for a put: its own record's (output 0), or that of output 0
 * of its task for a later output (is_out), looked up by id (spw_id_output_task). */
sched_task *sched__obj_task(sched *s, const sched_obj *o);
/* Output i of t (0: the object whose record holds it), or NULL when its record is gone (output i
 * >= 1 released) or a husk (output 0 released). */
sched_obj *sched__task_output(sched *s, const sched_task *t, uint32_t i);
/* A task's output object, whose record holds it; the task's id is the object's. */
static inline sched_obj *sched__task_out(const sched_task *t)
{
    return (sched_obj *)(uintptr_t)t - 1;
}
/* Its first argument (walk them with sched__arg_next). */
static inline sched_arg *sched__task_args(const sched_task *t)
{
    return (sched_arg *)(uintptr_t)(t + 1);
}
/* The task of an object argument. */
static inline sched_task *sched__arg_task(const sched_arg *a)
{
    return (sched_task *)(uintptr_t)((const char *)a - a->task_off);
}
/* Offset of a task's place field (its uint64_t, then the name) after `n` bytes of record. */
static inline size_t sched__place_at(size_t n)
{
    return (n + 7) & ~(size_t)7;
}
/* Where a placed task's place field is: after its arguments. */
static inline char *sched__place_field(const sched_task *t)
{
    const sched_arg *a = sched__task_args(t);
    for (uint32_t i = 0; i < t->nargs; i++)
        a = sched__arg_next(a);
    return (char *)(uintptr_t)t + sched__place_at((size_t)((const char *)a - (const char *)t));
}
/* The name of the worker t must run on, or NULL. */
static inline char *sched__task_place(const sched_task *t)
{
    return t->placed ? sched__place_field(t) + sizeof(uint64_t) : NULL;
}
/* Of a placed task. */
static inline uint64_t *sched__place_missing(sched_task *t)
{
    return (uint64_t *)(void *)sched__place_field(t);
}
/* Releases the slabs' spare chunks (the directory emptied, or shutdown). */
void sched__recs_trim(sched *s);
void sched__ref(sched *s, sched_obj *o, int kind);
void sched__unref(sched *s, sched_obj *o, int kind);
int sched__session_ref(sched *s, sched_session *ss, sched_obj *o, int kind);
int sched__session_release(sched *s, sched_session *ss, spw_id id);
void sched__session_drop_all(sched *s, sched_session *ss);

/* Sessions (sessions.c). A client or ctl session for an accepted HELLO: a new one, or the
 * detached session HELLO names with its token (then wel says resumed). */
sched_session *sched__session_hello(sched *s, proto_conn *c, const proto_msg *hello, int role,
                                    proto_welcome *wel);
/* A session with no connection, as a restart finds it in its journal: its client may resume
 * it within --session-grace, else it is dropped. */
sched_session *sched__session_restore(sched *s, uint64_t id, const uint8_t token[16], int role,
                                      uint32_t pid, const char *host, const char *name);
/* Its connection closed (status): a resumable session is detached, anything else dropped. */
void sched__session_closed(sched *s, sched_session *ss, int status);
/* Drops detached sessions whose grace has passed (the 250 ms timer). */
void sched__sessions_tick(sched *s);
/* Drops every detached session (the scheduler stops). */
void sched__sessions_detached_free(sched *s);
/* Before a client session's frame is processed: the first frame after a resume that repeats
 * a request already done before its connection broke (its answer was lost) is answered here
 * from what that request did (true); false: the caller processes it as usual. Sends the
 * results again that a resume owes first. */
bool sched__session_replay(sched *s, sched_session *ss, const proto_msg *m);
/* A detached session: the ms left before it is dropped (at least 1); else 0. */
uint64_t sched__session_drop_ms(const sched_session *ss);
/* Answers a PUT_PLACE: the worker to upload to (w; NULL for a chunked object), whether the
 * bytes are there already, and the chunk size (omitted for a client that did not ask). */
void sched__put_target_send(sched_session *ss, uint64_t req, spw_id id, const sched_worker *w,
                            uint64_t exists, uint64_t chunk, bool omit_chunk);
void sched__obj_ready(sched *s, sched_obj *o);
/* Marks o failed: err and msg (copied) say why. */
void sched__obj_fail(sched *s, sched_obj *o, int err, const char *msg);
/* Why an object failed: few fail, so this is in a table by object, not in every object. */
typedef struct sched_failure {
    const sched_obj *obj; /* the key: its address */
    int err;
    char *msg;
    UT_hash_handle hh;
} sched_failure;
/* o's failure, or NULL. */
const sched_failure *sched__obj_failure(const sched *s, const sched_obj *o);
uint32_t sched__failures_count(const sched *s);
/* o's inline result (size bytes), or NULL. */
static inline const uint8_t *sched__obj_inline(const sched_obj *o)
{
    if (!o->has_inline)
        return NULL;
    return o->size <= sizeof o->inline_small ? o->inline_small : o->inline_heap;
}
void sched__obj_add_loc(sched *s, sched_obj *o, uint32_t worker);
void sched__obj_drop_loc(sched *s, sched_obj *o, uint32_t worker);
/* Whether worker `worker` holds a copy of o. */
bool sched__obj_has_loc(const sched_obj *o, uint32_t worker);
/* Forgets every copy of o (the caller tells the workers). */
void sched__obj_clear_locs(sched *s, sched_obj *o);
/* The ids of the objects w holds or receives (its objs), *n of them (heap, for the caller to
 * free); its index is emptied. Called as it leaves, before anything could free them. */
spw_id *sched__worker_objs_take(sched_worker *w, size_t *n);
/* Sets the worker receiving o's upload (0: none), kept in that worker's objs. */
void sched__obj_set_put_worker(sched *s, sched_obj *o, uint32_t worker);
/* A worker's OBJ_ADDED: it sealed a copy (a put's upload, a replica or a fetched input). */
void sched__obj_added(sched *s, sched_worker *w, const proto_msg *m);
/* The same for an id and size (req: the request answered on a size mismatch). */
void sched__obj_added_id(sched *s, sched_worker *w, uint64_t req, spw_id id, uint64_t size);
/* Interns a host name (objects record their owner's host, which outlives the session). */
const char *sched__host_intern(sched *s, const char *host);
void sched__hosts_free(sched *s);
/* Origins are interned and counted: every object of one session and call site shares one (a new
 * one when the last is older than a 32-bit millisecond offset reaches), freed with the last of
 * them. Returns it with one more reference; site[0..len) need not be NUL-terminated. */
sched_origin *sched__origin_intern(sched *s, sched_session *ss, const char *site, size_t len,
                                   uint64_t now_ms);
void sched__origin_unref(sched *s, sched_origin *e);
/* The interned origins (for the checker): how many, and the references they count. */
void sched__origins_count(const sched *s, uint64_t *norigins, uint64_t *nrefs);
static inline uint64_t sched__obj_created_ms(const sched_obj *o)
{
    return o->origin->base_ms + o->created;
}
void sched__obj_maybe_free(sched *s, sched_obj *o);
/* A finished task's record goes: the lineage count its argument held on object id is dropped,
 * which may free that record too. Iterative: a long chain of husks goes without recursion. */
void sched__lineage_drop(sched *s, spw_id id);
/* Chunked objects (objects.c). The chunk size of a put of size bytes, or 0 to put it whole:
 * chunked when no store is large enough, or when the client asked for chunks of at most
 * chunk_max bytes (not 0) and it is larger. */
uint64_t sched__chunk_size(sched *s, uint64_t size, uint64_t chunk_max);
/* Bytes of chunk i of the chunked object o. */
static inline uint64_t sched__chunk_bytes(const sched_obj *o, uint32_t i)
{
    uint64_t cs = (uint64_t)1 << o->chunks.shift, off = (uint64_t)i * cs;
    return o->size - off < cs ? o->size - off : cs;
}
/* The chunked object holding chunk c (c->is_chunk). */
sched_obj *sched__chunk_parent(sched *s, const sched_obj *c);
/* Frees whatever is left at shutdown (nothing, if every reference was dropped). */
void sched__objects_purge(sched *s);
void sched__locate_reply(sched *s, sched_session *ss, uint64_t req, sched_obj *o);
/* Few objects are waited for: their waiters are listed in a table by object, not in every
 * object. sched__waiter_add puts w (w->obj set) on its object's list; sched__obj_waiters is the
 * first waiter of o (follow ->next), or NULL; sched__waiter_free takes w off both its lists. */
void sched__waiter_add(sched *s, sched_waiter *w);
sched_waiter *sched__obj_waiters(const sched *s, const sched_obj *o);
/* The objects with waiters, for the checker. */
uint32_t sched__waitqs_count(const sched *s);
void sched__waiter_free(sched *s, sched_waiter *w);
/** The location record of a worker. */
proto_loc_rec sched__loc_rec(const sched_worker *w);
/** Where an object is, as a LOCATION / TASK_RUN field: its locations on workers still connected.
 * l is the iteration's state; it must outlive the encoding of the field. */
typedef struct sched_locs {
    sched *s;
    const sched_obj *o;
    uint32_t at;
} sched_locs;
proto_loc_recs sched__locs(sched_locs *l, sched *s, const sched_obj *o);
/** Tells a worker to drop its copy of an object (OBJ_DELETE). */
void sched__worker_delete(sched_worker *w, spw_id id);

/* workers.c: the workers by id and by load. */
sched_worker *sched__worker_by_id(sched *s, uint32_t id);
void sched__workers_add(sched *s, sched_worker *w);
void sched__workers_remove(sched *s, sched_worker *w);
/* w->assigned changed: restores its place in the load buckets. */
void sched__worker_load(sched *s, sched_worker *w);
/* The least loaded worker (assigned / slots; between equals of a slot count, the one that came
 * to that load first), paused or closing ones included, or NULL when there is none. */
sched_worker *sched__worker_least_loaded(sched *s);
/* Whether a is less loaded than b (between equals, the least recently given a task). */
bool sched__worker_less(const sched_worker *a, const sched_worker *b);
/* The workers of one slot count, bucketed by tasks assigned: head[k] lists (utlist, in the
 * order they entered it) those placed with k assigned; min is the lowest non-empty bucket. */
typedef struct sched_wclass {
    uint32_t slots, n;
    uint32_t min, nbuckets;
    sched_worker **head;
} sched_wclass;
void sched__workers_free(sched *s);

/* tasks.c */
/* Whether t was sent ahead to t->worker: that worker holds it until the inputs it makes for it
 * are there (state T_WAITING), or the scheduler failed it meanwhile (T_FAILED) and waits for the
 * worker's TASK_DONE that drops it. Either way it stays on the worker's list until that report,
 * and its output is not freed before. */
static inline bool sched__task_ahead(const sched_task *t)
{
    return t->worker != NULL && t->state != T_ASSIGNED && t->state != T_RUNNING;
}
void sched__live_uncount(sched *s, sched_obj *o);
void sched__submit(sched *s, sched_session *ss, const proto_msg *m);
/* Holds o (one graph_hold, an entry on ss->building) until ss's graph being submitted is: an
 * output nothing references yet, which later frames may consume. */
void sched__graph_hold(sched_session *ss, sched_obj *o);
void sched__task_done(sched *s, sched_worker *w, const proto_msg *m);
/** TASK_DONES: each record as one TASK_DONE; a bad record is answered alone. */
void sched__task_dones(sched *s, sched_worker *w, const proto_msg *m);
void sched__task_free(sched *s, sched_task *t);
void sched__task_cancel(sched *s, sched_task *t);
void sched__dep_ready(sched *s, sched_arg *a);
void sched__dep_failed(sched *s, sched_arg *a, int err, const char *msg);
/* ids, k: what sched__worker_objs_take returned for it (freed here). */
void sched__worker_lost(sched *s, sched_worker *w, spw_id *ids, size_t k);
void sched__task_set_state(sched *s, sched_task *t, int state);
void sched__task_started(sched *s, sched_worker *w, const proto_msg *m);
/* The journal's replay: t finished before the restart. sizes[k], values[k]: output k's size
 * and inline value (NULL: it was in a store; the output stays pending, home
 * SCHED_HOME_RESTORED, until a worker reports a copy or lineage makes it again). */
void sched__task_restore_done(sched *s, sched_task *t, const uint64_t *sizes,
                              const uint8_t *const *values);
/* A lost task output is made again by lineage; false if it cannot be. */
bool sched__obj_remake(sched *s, sched_obj *o);
/* Fails t with err and msg: its output records the failure and its client hears of it. May free
 * other records, t's included. */
/* A finished output's TASK_RESULTS record to ss (its value inline, its size, or its failure). */
void sched__result_send(sched *s, sched_session *ss, const sched_obj *o);
void sched__task_fail(sched *s, sched_task *t, int err, const char *msg);
/* Takes a ready task off the ready queue (its state is the caller's to change). */
void sched__ready_remove(sched *s, sched_task *t);
/* p was just assigned to w, or its inputs there became ready: its dependents may go ahead. */
void sched__ahead_walk(sched *s, sched_task *p, sched_worker *w);

/* place.c */
/* Whether w takes no new task: its store is above its pause threshold, or it drains. */
static inline bool sched__worker_paused(const sched_worker *w)
{
    return w->stats[PROTO_STAT_PAUSED] != 0 || w->drain != 0;
}
/* Starts a dispatch pass on the next loop iteration, if tasks are ready and workers connected. */
void sched__kick(sched *s);
/* t leaves its worker (done, taken back, or the worker lost): its queued and taking marks go.
 * Returns whether it was being taken back. */
bool sched__task_unqueue(sched *s, sched_task *t);
/* Whether t's graph g lets it start now (its caps on tasks in flight and live bytes). */
bool sched__graph_admits(const sched_graph *g, const sched_task *t);
/* Frees g's counts of big sources per worker. */
void sched__spread_free(sched_graph *g);
/* t, given to worker `worker`, was taken back before it ran: it no longer counts in the deal. */
void sched__spread_undo(const sched_task *t, uint32_t worker);
/* A move of `bytes` took took_ns: the rate take-backs weigh a move by follows it. */
void sched__copy_rate_seen(sched *s, uint64_t bytes, uint64_t took_ns);
/* Whether f is a function of an uploaded plugin (only workers that run uploads take it). */
bool sched__fn_uploaded(sched_fn *f);
/* Puts t's TASK_RUNS record, with flags, into w's open batch. Returns 0; SPW_EFRAMESIZE when the
 * record is too large for the wire (it is dropped); SPW_ECLOSED. */
int sched__task_send(sched *s, const sched_task *t, sched_worker *w, uint32_t flags);

/* graphs.c */
sched_graph *sched__graph_new(sched *s, sched_session *ss, uint64_t gid);
/* Drops one hold on g (a task record freed, or its submission over). The record stays listed
 * while SCHED_GRAPHS_KEPT newer finished graphs do not push it out. */
void sched__graph_release(sched *s, sched_graph *g);
/* Its last SUBMIT frame arrived (site: the submit's call site, or NULL). */
void sched__graph_submitted(sched *s, sched_graph *g, const char *site, size_t sitelen);
/* A task of g moved from state `from` (-1: new) to `to`. */
void sched__graph_count(sched_graph *g, int from, int to);
void sched__graphs_req(sched *s, sched_session *ss, const proto_msg *m);
void sched__graphs_free_all(sched *s);

/* sched.c */
/* A session goes (its connection closed, or it was never resumed): its references, waiters,
 * queries and record. status: why, for the log. */
/* Frees the scheduler once its handles are closed (and work it queued has ended). */
void sched__maybe_done(sched *s);
/* LOCATE requests of one session that wait for their objects at once; libspillway has one. */
#define SCHED_WAITERS_MAX 1024
/* Reads a session's requests only while their answers can go out: pauses its connection while
 * its queued output is above the high-water mark (proto_conn_writable), a memory query of its
 * is under way or SCHED_WAITERS_MAX of its LOCATEs wait, and resumes it once none holds
 * (on_drain, the query's end, a waiter answered). So a peer that sends requests and never reads
 * the answers costs at most about the high-water mark of queued output, one memory query and
 * SCHED_WAITERS_MAX waiters, and a peer that reads is never held for long. */
void sched__session_flow(sched *s, sched_session *ss);

/* status.c */
void sched__status(sched *s, proto_conn *c, uint64_t req);

/* broadcast.c */
void sched__broadcast(sched *s, sched_session *ss, const proto_msg *m);
/* w reported a copy of id: ok, it is listed; else it was not taken (the object is no longer
 * ready). Settles w in the broadcasts of id. */
void sched__broadcast_added(sched *s, sched_worker *w, spw_id id, bool ok);
bool sched__broadcast_error(sched *s, sched_worker *w, uint64_t req);
void sched__broadcast_worker_gone(sched *s, sched_worker *w);
void sched__broadcast_session_gone(sched *s, sched_session *ss);
void sched__broadcast_free_all(sched *s);
void sched__broadcast_obj_freed(sched *s, spw_id id);
void sched__broadcast_obj_ready(sched *s, const sched_obj *o);

/* Copies of o onto workers lacking it (none that drains), until it has `want`, tracked as a
 * broadcast with no client. true: REPLICATE went to at least one worker, and
 * sched__drain_copied(s, drainer, id, ok) runs once when all answered (drainer 0: nobody is
 * told); false: no worker can take it, nothing was sent and nothing will run. */
bool sched__copies_start(sched *s, const sched_obj *o, uint32_t want, uint32_t drainer);
/* A copy of o onto `to` alone, tracked the same way; sched__push_moved(s, id, to, from, ok)
 * runs once it is answered. false: `to` cannot take it, nothing was sent. */
bool sched__copies_move(sched *s, const sched_obj *o, sched_worker *to, uint32_t from);

/* push.c */
/* Moves to one worker under way at once. A move holds its place from its REPLICATE on, while
 * the receiver makes room for the piece and the sender reads it (perhaps from its spilled copy),
 * not only while bytes cross: a window sized for the bytes alone leaves a sender's link to this
 * worker idle between pieces, and the senders' links, shared by every worker they send to, then
 * serve this one unevenly. */
#define SCHED_PUSH_WINDOW 24
/* Task t (on w) is done and its outputs ready: those its consumers are planned elsewhere for
 * start moving there. */
void sched__push_outputs(sched *s, sched_task *t, sched_worker *w);
/* The copy of a move (sched__copies_move) was answered: ok, and the object is still where it
 * was, its copy on `from` goes. */
void sched__push_moved(sched *s, spw_id id, uint32_t to, uint32_t from, bool ok);
/* t (planned) is placed, done, failed or freed: its plan goes. */
void sched__push_unplan(sched *s, sched_task *t);
/* The worker planned task t waits for, or NULL when that one is gone or cannot take it. */
sched_worker *sched__push_plan_worker(sched *s, const sched_task *t);
void sched__push_worker_gone(sched *s, sched_worker *w);
void sched__push_free_all(sched *s);
/* The consistency of plans and moves (check.c); NULL or why not. */
const char *sched__push_check(const sched *s);

/* drain.c */
/* DRAIN: from the worker self itself (ss NULL), or from spillway-ctl session ss naming one. */
void sched__drain(sched *s, sched_worker *self, sched_session *ss, const proto_msg *m);
/* Something changed for a draining w (a message from it): copies go on, drained is noticed. */
void sched__drain_poke(sched *s, sched_worker *w);
/* Worker `worker` got a copy of o: queued if it drains. Only while s->ndraining > 0. */
void sched__drain_obj_added(sched *s, sched_obj *o, uint32_t worker);
void sched__drain_copied(sched *s, uint32_t drainer, spw_id id, bool ok);
void sched__drain_worker_gone(sched *s, sched_worker *w);
void sched__drain_session_gone(sched *s, sched_session *ss);
/* o lost a holder: copies are made until it has its copies_want again. */
void sched__copies_restore(sched *s, sched_obj *o);

/* plugins.c */
/* Listens on the local socket "@spillway-scheduler-PORT" too (PORT: the bound port), where a
 * program of the scheduler's own user may upload plugins without a secret; a failure is logged. */
void sched__local_listen(sched *s, const proto_conn_cbs *cbs);
void sched__plugin_add(sched *s, sched_session *ss, const proto_msg *m);
void sched__plugin_release(sched *s, sched_session *ss, const proto_msg *m);
void sched__plugins_req(sched *s, sched_session *ss, const proto_msg *m);
void sched__plugin_checked(sched *s, sched_worker *w, const proto_msg *m);
void sched__plugin_get(sched *s, sched_worker *w, const proto_msg *m);
void sched__worker_plugins(sched *s, sched_worker *w, const proto_msg *m);
void sched__plugins_session_gone(sched *s, sched_session *ss);
void sched__plugins_worker_gone(sched *s, sched_worker *w);
/* A task names function fn (len bytes): 0 with *out the uploaded plugin it is in (NULL: none
 * named), or SPW_ENOFUNC (err says why) for one naming a plugin that is not added. */
int sched__plugin_for_task(sched *s, const uint8_t *fn, size_t len, sched_plugin **out, char *err,
                           size_t errlen);
/* g's tasks name p: g references it until its last task record goes. */
void sched__plugin_graph_use(sched *s, sched_graph *g, sched_plugin *p);
/* g's last task record went: its plugin references go. */
void sched__plugins_graph_done(sched *s, sched_graph *g);
/* Plugin records whose bytes are o (the checker). */
uint32_t sched__plugins_on(const sched *s, const sched_obj *o);
void sched__plugins_free_all(sched *s);

/* check.c: both abort naming the violated invariant and the task or object. sched__check is
 * the per-event hook (amortised on large states; nothing unless SPW_CHECK_INVARIANTS). */
void sched__check_full(sched *s);
#ifdef SPW_CHECK_INVARIANTS
void sched__check(sched *s);
#else
#define sched__check(s) ((void)(s))
#endif

/* memory.c */
/* Store records one loop turn of a memory query indexes by id, and looks at when it searches
 * them for orphans (objects the directory does not know), listed or not. */
#define SCHED_MEMQ_SCAN 4096
void sched__memory_req(sched *s, sched_session *ss, const proto_msg *m);
void sched__memory_obj_list(sched *s, sched_worker *w, const proto_msg *m);
void sched__memory_worker_gone(sched *s, sched_worker *w);
void sched__memory_session_gone(sched *s, sched_session *ss);
/* ss's connection drained under the low-water mark: its query streams again. */
void sched__memory_session_drained(sched *s, sched_session *ss);
void sched__memory_tick(sched *s);
void sched__memory_free_all(sched *s);

/* journal.c: --state-dir. Every sched__jnl_* hook does nothing without a journal, and while the
 * journal is being applied at start. */
typedef struct sched_jnl sched_jnl;
/* sched_obj.home of a put restored from the journal, pending until a worker reports a copy. */
#define SCHED_HOME_RESTORED UINT32_MAX
/* Opens (or creates) dir/journal and applies it; a corrupt one is moved aside, logged, and the
 * scheduler starts empty. Returns 0, or why dir cannot hold a journal. */
int sched__journal_open(sched *s, const char *dir);
/* Commits what is queued now (the end of a loop turn does it by itself). */
void sched__journal_commit(sched *s);
/* Commits what is queued and closes the journal's handles (cb: their close callback). */
void sched__journal_close(sched *s, uv_close_cb cb);
/* After the handles closed: syncs and closes the environment. */
void sched__journal_free(sched *s);
/* From the timer: restored objects nobody reported, and restored sessions nobody resumed. */
void sched__journal_tick(sched *s);
/* A session id was handed out: the high-water mark moves ahead of it when it gets close. */
void sched__jnl_session_id(sched *s, uint64_t id);
void sched__jnl_session(sched *s, const sched_session *ss);
void sched__jnl_session_gone(sched *s, const sched_session *ss);
void sched__jnl_nrecv(sched *s, sched_session *ss);
void sched__jnl_gate(sched *s, proto_conn *c);
void sched__jnl_plugin(sched *s, const sched_plugin *p);
void sched__jnl_plugin_gone(sched *s, const sched_plugin *p);
/* From the journal at start: an uploaded plugin READY again, holding its object (NULL: its
 * bytes were not restored), and its holders. A restored plugin nobody holds and no graph names
 * goes after the replay (sched__plugins_restored). */
sched_plugin *sched__plugin_restore(sched *s, const uint8_t *hash, const char *name, uint64_t size,
                                   uint32_t nfns);
void sched__plugin_restore_holder(sched_plugin *p, uint64_t session, uint32_t count);
void sched__plugins_restored(sched *s);
/* ss's counts on object id changed to count (indexed by enum ref_kind). */
void sched__jnl_ref(sched *s, const sched_session *ss, spw_id id, const uint32_t *count);
/* A SUBMIT frame of ss's graph g is being taken in (its bytes are those on ss's connection). */
void sched__jnl_submit(sched *s, sched_session *ss, sched_graph *g);
/* t finished (done or failed): its outcome, for a restart to mark it finished again. */
void sched__jnl_task_done(sched *s, const sched_task *t);
/* The submitter released o's kept (OUTPUT) reference. */
void sched__jnl_output_released(sched *s, const sched_obj *o);
/* g's last task record went: its records go. */
void sched__jnl_graph_gone(sched *s, const sched_graph *g);
/* A put, a chunked put or one of its chunks was created. */
void sched__jnl_put(sched *s, const sched_obj *o);
void sched__jnl_obj_freed(sched *s, const sched_obj *o);
/* OBJS_HELD: w's objects kept from before; known ones are claimed, the others deleted. */
void sched__objs_held(sched *s, sched_worker *w, const proto_msg *m);
/* Whether SUBMIT frames are being replayed from the journal now. */
bool sched__journal_replaying(const sched *s);
/* During the replay: task id names an object that is gone (an input released after the task
 * ran). Its outcome is expected from the journal; without one, the task fails. */
void sched__jnl_missing_input(sched *s, spw_id task);

#endif
