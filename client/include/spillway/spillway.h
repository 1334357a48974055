/*
 * libspillway: the C client of a spillway cluster.
 *
 * Connect to the scheduler, put objects, build graphs of tasks whose arguments are values,
 * objects or earlier tasks' outputs, submit them, wait, get results and release them.
 * Every call returns 0 or a negative error code (spillway/error.h); spillway_strerror() names
 * it and spillway_errmsg() gives the detail of the last failure on a connection (for a failed
 * task: the task's own error text).
 *
 * @note A spillway handle is not thread safe: use it from one thread at a time. Calls block;
 * they run the connection's private event loop until their answer arrives.
 * @note spillway_connect sets SIGPIPE to SIG_IGN if the program left it at SIG_DFL, so a peer
 * that disconnects mid-write is an error code, not the end of the process.
 */
#ifndef SPILLWAY_H
#define SPILLWAY_H

#include <stddef.h>
#include <stdint.h>

#include "spillway/error.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The version of this header; CMake reads it from here. spillway_version() gives the library's,
 * which may be newer than the header a program was compiled with. */
#define SPILLWAY_VERSION_MAJOR 0
#define SPILLWAY_VERSION_MINOR 1
#define SPILLWAY_VERSION_PATCH 0
#define SPILLWAY_VERSION_NUMBER                                                                    \
    (SPILLWAY_VERSION_MAJOR * 10000 + SPILLWAY_VERSION_MINOR * 100 + SPILLWAY_VERSION_PATCH)

/* Marks the functions libspillway.so exports; everything else in it is hidden. */
#ifndef SPILLWAY_API
#if defined(__GNUC__) || defined(__clang__)
#define SPILLWAY_API __attribute__((visibility("default")))
#else
#define SPILLWAY_API
#endif
#endif

typedef struct spillway spillway;
typedef struct spillway_graph spillway_graph;

/** An object, or a task's output. */
typedef struct spillway_ref {
    uint64_t hi;
    uint64_t lo;
} spillway_ref;

typedef struct spillway_opts {
    const char *secret_file; /* cluster secret; NULL: $SPILLWAY_SECRET_FILE if set, else
                                /etc/spillway/secret if it exists and is readable, else none */
    int connect_timeout_ms;  /* 10000 */
    const char *name;        /* shown by spillway-ctl ("libspillway") */
    uint64_t inline_limit;   /* 0: use the scheduler's; arguments above it are put as objects */
    int no_auto_put;         /* 1: embed large BYTES arguments in every task (with a warning) */
    int no_local;            /* 1: never use same-host shared memory, always TCP (also with
                                SPILLWAY_NO_LOCAL set in the environment at connect) */
    uint64_t chunk_size;     /* 0: a put larger than every store is chunked (in chunks of a
                                quarter of the smallest store); else a put larger than this is
                                chunked too, in chunks of at most this (a power of two, at
                                least 64 KiB) */
    unsigned put_replicas;   /* copies of each put on distinct workers (0 or 1: one); see
                                spillway_put_replicas */
    int encrypt;             /* SPILLWAY_ENCRYPT_*: YES and REQUIRED both make every TCP
                                connection to another host TLS, keyed by the cluster secret (so
                                one is needed); a server that does not encrypt refuses us */
    int encrypt_local;       /* 1: loopback TCP (127.0.0.1, ::1) is encrypted too */
    const char *tls_cert;    /* with encrypt, all three or none: PEM files for mutual TLS by */
    const char *tls_key;     /* certificates instead of the secret's key (the secret is still */
    const char *tls_ca;      /* needed); the server's certificate must name the host we dial */
    int reconnect_ms;        /* 60000: when the scheduler's connection breaks, reconnect (with
                                backoff) and resume the session for this long, pending calls
                                waiting meanwhile; then they fail with SPW_ECLOSED. 0: they
                                fail at once. Bounded by the scheduler's --session-grace */
} spillway_opts;

/** spillway_opts.encrypt: the daemons' --encrypt words. */
#define SPILLWAY_ENCRYPT_NO 0
#define SPILLWAY_ENCRYPT_YES 1
#define SPILLWAY_ENCRYPT_REQUIRED 2

/** The library's version: MAJOR * 10000 + MINOR * 100 + PATCH (compare SPILLWAY_VERSION_NUMBER). */
SPILLWAY_API unsigned spillway_version(void);
/** The library's version as "MAJOR.MINOR.PATCH". Never NULL. */
SPILLWAY_API const char *spillway_version_string(void);

/** Log levels (syslog's numbers). */
enum spillway_log_level {
    SPILLWAY_LOG_ERR = 3,
    SPILLWAY_LOG_WARN = 4,
    SPILLWAY_LOG_NOTICE = 5,
    SPILLWAY_LOG_INFO = 6,
    SPILLWAY_LOG_DEBUG = 7,
};
/** Receives one message of the library: its level and its text (one line, no newline). Called
 * from whichever thread is inside a spillway call. */
typedef void (*spillway_log_fn)(int level, const char *msg);
/** Where the library's messages go. By default only warnings and errors, each distinct one once
 * per process, to stderr ("libspillway: warning: ..."). After this call every message at or
 * below level reaches fn (stderr when fn is NULL), repeats included. Process-wide; call it
 * before connecting. */
SPILLWAY_API void spillway_set_log(spillway_log_fn fn, int level);

/** Fills o with the defaults. */
SPILLWAY_API void spillway_opts_init(spillway_opts *o);

/** Connects to the scheduler at "HOST:PORT".
 * @param[in] opts options, or NULL for the defaults.
 * @param[out] out the connection; untouched on failure.
 * HOST is an IPv4 address, a host name (looked up, every address it has tried in turn) or an
 * IPv6 address in brackets ("[::1]:7400").
 * On failure, spillway_errmsg(NULL) in the same thread says why, naming the address.
 * @return 0; SPW_EINVAL (bad address); SPW_ENONAME (the name does not resolve);
 *         SPW_ECONNREFUSED / SPW_ETIMEDOUT (no scheduler); SPW_EPROTO (the peer is a spillway
 *         daemon but no scheduler, e.g. a worker's peer port);
 *         SPW_EAUTH (secret mismatch); SPW_EVERSION; -errno reading the secret file. */
SPILLWAY_API int spillway_connect(const char *addr, const spillway_opts *opts, spillway **out);
/** The stall timeout's default: 60 s, twice a worker's default --alloc-wait. */
#define SPILLWAY_STALL_TIMEOUT_MS 60000
/** How long a call waits on a silent peer. While a call waits, every connection of c (to the
 * scheduler and to workers) whose peer has sent nothing and taken none of our bytes for a third
 * of this is probed (PING, which a live daemon answers at once, however long the answer to
 * the call itself takes); one silent for all of it (a hung or stopped daemon, a dead link the
 * kernel has not noticed) is closed and the call fails with SPW_ETIMEDOUT; a silent scheduler
 * leaves c closed (later calls: SPW_ECLOSED). A call's own timeout, where it has one
 * (spillway_get, spillway_wait), is apart from this: waiting forever there still fails here on
 * a silent peer. Keep it above the workers' --alloc-wait: a worker making room for a put
 * stops reading it meanwhile.
 * @param timeout_ms milliseconds, 0 = never (SPILLWAY_STALL_TIMEOUT_MS after connect).
 * @return 0; SPW_EINVAL for a negative value or a NULL c. */
SPILLWAY_API int spillway_set_stall_timeout(spillway *c, int timeout_ms);
/** Closes the connection; the scheduler drops every reference it held. NULL is a no-op. */
SPILLWAY_API void spillway_close(spillway *c);

/** Text for an error code. Never NULL. */
SPILLWAY_API const char *spillway_strerror(int err);
/** Detail of the last failed call on c (for a failed task, its error text). Never NULL.
 * With c NULL: why this thread's last spillway_connect failed ("" after one that succeeded).
 * @note valid until the next call on c (with NULL: the thread's next spillway_connect). */
SPILLWAY_API const char *spillway_errmsg(const spillway *c);

#define SPILLWAY_STR_(x) #x
#define SPILLWAY_STR(x) SPILLWAY_STR_(x)
/** "file:line" of the caller, recorded with every object and task for spillway-ctl memory. */
#define SPILLWAY_SITE (__FILE__ ":" SPILLWAY_STR(__LINE__))

/* ------------------------------------------------------------------ objects */

/** Stores len bytes as an immutable object and returns a reference to it. Small values (up to
 * the inline limit) stay in the client and travel inside task messages; larger ones go to a
 * worker's store once. The data is copied; the caller may reuse it on return.
 * An object larger than every store (or than spillway_opts.chunk_size) becomes a chunked
 * object: chunks of a power-of-two size, each an object of its own spread over the workers'
 * stores, under the one reference returned (released as one). spillway_get gathers it into the
 * caller's buffer; a task given a view within one chunk reads that chunk in place; a task given
 * a view across chunks, or the whole object, gets those bytes gathered first by a `concat`
 * task (one copy of them, in one store: a whole object larger than every store cannot be a
 * task's argument). spillway_map_blocks runs over its chunks without gathering it.
 * @return 0; SPW_EINVAL for len 0; SPW_ETOOBIG if no store is large enough for a chunk;
 *         SPW_ENOWORKER; SPW_EBACKPRESSURE if the store stayed full; SPW_ECLOSED. */
SPILLWAY_API int spillway_put_at(spillway *c, const void *data, size_t len,
                                 spillway_ref *out, const char *site);
#define spillway_put(c, data, len, out) spillway_put_at((c), (data), (len), (out), SPILLWAY_SITE)

/** Like spillway_put, keeping k copies of the object on k distinct workers (fewer if fewer
 * are connected), so that losing a worker (SIGKILL, a crash) loses no put: the call returns once
 * every copy is sealed, and the scheduler makes a new copy when a holder is lost or drained
 * while other workers remain. k 0 or 1 is spillway_put (spillway_opts.put_replicas sets k for
 * every spillway_put of the handle). An object at most the inline limit stays in the client and
 * is never lost; a put with replicas is never chunked.
 * @return as spillway_put; SPW_EOBJLOST if no copy could be made; SPW_EINVAL for k over
 *         SPILLWAY_MAX_REPLICAS. */
SPILLWAY_API int spillway_put_replicas_at(spillway *c, const void *data, size_t len, unsigned k,
                                          spillway_ref *out, const char *site);
#define spillway_put_replicas(c, data, len, k, out)                                               \
    spillway_put_replicas_at((c), (data), (len), (k), (out), SPILLWAY_SITE)
/** The most copies spillway_put_replicas keeps. */
#define SPILLWAY_MAX_REPLICAS 16u

/** Puts len bytes once and places a copy on every worker (nworkers 0) or on nworkers of them,
 * before any task uses it: broadcast scatter. The copies travel worker to worker along a
 * pipelined chain, so reaching k workers costs about one transfer. Each node stores it once,
 * however many tasks use it; a worker that joins later fetches it when a task there needs it.
 * The client holds one reference (kind BROADCAST); release it once.
 * @return as spillway_put; SPW_EOBJLOST if no worker could take a copy. */
SPILLWAY_API int spillway_scatter_at(spillway *c, const void *data, size_t len,
                                     unsigned nworkers, spillway_ref *out, const char *site);
#define spillway_scatter(c, data, len, nworkers, out)                                              \
    spillway_scatter_at((c), (data), (len), (nworkers), (out), SPILLWAY_SITE)
/** Places copies of an object this client holds on every worker (0) or on nworkers. */
SPILLWAY_API int spillway_broadcast(spillway *c, spillway_ref ref, unsigned nworkers);

/** Gets an object or a kept task's result, waiting up to timeout_ms (-1: forever) for it to
 * exist. *data is a heap copy the caller frees with spillway_free() (never free(3)); for an
 * empty value it is a non-NULL pointer to no bytes, *len 0, which spillway_free accepts. A small
 * result arrived with its task's completion and is copied from the client without a message.
 * @return 0; SPW_ETASKFAILED / SPW_EDEPFAILED (errmsg has the task's text); SPW_ETIMEDOUT;
 *         SPW_ENOOBJ (unknown or released); SPW_EOBJLOST. */
SPILLWAY_API int spillway_get(spillway *c, spillway_ref ref, int timeout_ms, void **data,
                              size_t *len);
/** Frees what spillway_get returned. */
SPILLWAY_API void spillway_free(void *p);

/** A read-only view of an object, straight from a worker's shared memory when the worker is on
 * this host (no copy), or a private copy otherwise. Release it with spillway_view_release. */
typedef struct spillway_view {
    const void *data;
    size_t len;
    int zero_copy;  /* 1 when data points into a store's shared memory */
    void *priv;
} spillway_view;
SPILLWAY_API int spillway_get_view(spillway *c, spillway_ref ref, int timeout_ms,
                                   spillway_view *view);
SPILLWAY_API void spillway_view_release(spillway *c, spillway_view *view);

/* References: a put returns a reference the client holds (kind CLIENT at the scheduler); a task
 * submitted with SPILLWAY_KEEP gives a reference to its result (kind OUTPUT). Each held
 * reference is released once with spillway_release(); releasing twice or releasing something
 * never held returns SPW_ENOTHELD and changes nothing. Closing the connection, or the process
 * dying, releases everything it held. */

/** Drops a reference this client holds.
 * @return 0, or SPW_ENOTHELD if it is not held (never held, or released already). */
SPILLWAY_API int spillway_release(spillway *c, spillway_ref ref);
/** Releases n references in one message. Ones not held are skipped (nothing changes for them).
 * @return 0, or SPW_ENOTHELD if any was not held (errmsg names the first). */
SPILLWAY_API int spillway_release_many(spillway *c, const spillway_ref *refs, size_t n);

/* ------------------------------------------------------------------- graphs */

enum spillway_arg_kind {
    SPILLWAY_ARG_BYTES = 0, /* a value carried with the task */
    SPILLWAY_ARG_REF = 1,   /* a whole object or task output */
    SPILLWAY_ARG_VIEW = 2,  /* a byte range of an object, without copying */
};

typedef struct spillway_arg {
    int kind;
    const void *data;   /* BYTES */
    size_t len;         /* BYTES, VIEW */
    spillway_ref ref;   /* REF, VIEW */
    uint64_t off;       /* VIEW */
    unsigned char small[8];
} spillway_arg;

static inline spillway_arg spillway_arg_bytes(const void *data, size_t len)
{
    spillway_arg a = {SPILLWAY_ARG_BYTES, data, len, {0, 0}, 0, {0}};
    return a;
}
/** A u64 value, little-endian (what the built-in functions expect). */
static inline spillway_arg spillway_arg_u64(uint64_t v)
{
    spillway_arg a = {SPILLWAY_ARG_BYTES, 0, 8, {0, 0}, 0, {0}};
    for (int i = 0; i < 8; i++)
        a.small[i] = (unsigned char)(v >> (8 * i));
    return a;
}
static inline spillway_arg spillway_arg_ref(spillway_ref r)
{
    spillway_arg a = {SPILLWAY_ARG_REF, 0, 0, r, 0, {0}};
    return a;
}
static inline spillway_arg spillway_arg_view(spillway_ref r, uint64_t off, uint64_t len)
{
    spillway_arg a = {SPILLWAY_ARG_VIEW, 0, (size_t)len, r, off, {0}};
    return a;
}

/** Task flags. */
#define SPILLWAY_KEEP 1u /* keep the result: the client holds a reference until it releases it */

/** Starts a graph. @return the graph, or NULL if out of memory. */
SPILLWAY_API spillway_graph *spillway_graph_new(spillway *c);
/** Adds a task running fn(args...). Its output can be an argument of later tasks in this graph;
 * with SPILLWAY_KEEP it can also be waited for, fetched and used by later graphs.
 * BYTES arguments are copied now. One larger than the inline limit is not embedded: it is put
 * into a store once, named by a hash of its bytes, and the task refers to it, so the same bytes
 * passed to many tasks (or twice) are stored once. The graph keeps that object alive until it
 * is submitted; its tasks keep it after. (With no_auto_put such arguments are embedded, and a
 * warning names the task and the size.)
 * @param[out] out the task's output (may be NULL).
 * @return 0; SPW_EINVAL (no name, name over 255 bytes, bad argument kind); SPW_EFRAMESIZE (the
 *         values the task carries are more than the scheduler's --max-frame takes in one
 *         message: the task is not added). */
SPILLWAY_API int spillway_task_at(spillway_graph *g, const char *fn, const spillway_arg *args,
                                  size_t nargs, unsigned flags, spillway_ref *out,
                                  const char *site);
#define spillway_task(g, fn, args, nargs, flags, out)                                              \
    spillway_task_at((g), (fn), (args), (nargs), (flags), (out), SPILLWAY_SITE)
/** The most outputs one task may declare (spillway_task_n). */
#define SPILLWAY_MAX_OUTPUTS 4096u
/** Adds a task running fn(args...) that makes k outputs (1 <= k <= SPILLWAY_MAX_OUTPUTS): the
 * function writes output i with spw_task_output_at(ctx, i, size) (task ABI version 2), each of
 * the k exactly once (a task of one output may write none: it is empty). Each output is an
 * object of its own: refs_out[i] refers to it, and it has its own reference count, location,
 * spill and release; a later task takes any one of them (spillway_arg_ref(refs_out[i])) or a
 * view of it. With SPILLWAY_KEEP the client holds all k until it releases each; without, each
 * lives while tasks of the graph use it, and one nobody uses is freed once the task ends. Output
 * i's id is the task's with i in its low bits (output 0's is the id spillway_task would give the
 * task), so k = 1 is exactly spillway_task. Arguments as for spillway_task_at.
 * @param[out] refs_out k references (may be NULL), untouched on failure.
 * @return 0; SPW_EINVAL (k = 0, or as spillway_task_at); SPW_ELIMIT (k over
 *         SPILLWAY_MAX_OUTPUTS: errmsg names k and the limit); SPW_EFRAMESIZE (as
 *         spillway_task_at). */
SPILLWAY_API int spillway_task_n_at(spillway_graph *g, const char *fn, const spillway_arg *args,
                                    size_t nargs, unsigned flags, uint32_t k,
                                    spillway_ref *refs_out, const char *site);
#define spillway_task_n(g, fn, args, nargs, flags, k, refs_out)                                    \
    spillway_task_n_at((g), (fn), (args), (nargs), (flags), (k), (refs_out), SPILLWAY_SITE)
/** Binds the tasks added next to the worker named worker (its --name); NULL or "" lifts the
 * binding. Such tasks wait for that worker, and fail with SPW_ENOWORKER if none of that name
 * is connected within the scheduler's --place-wait (a task run again to re-make an object lost
 * with its worker runs anywhere). For benchmarks, data placement and tests. */
SPILLWAY_API int spillway_graph_place(spillway_graph *g, const char *worker);
/** Caps on a graph's work in flight: tasks assigned at once and bytes of outputs produced and
 * not yet consumed (0: the scheduler's defaults). */
SPILLWAY_API int spillway_graph_limits(spillway_graph *g, uint64_t max_tasks, uint64_t max_bytes);
/** Sends the graph. Returns once the scheduler has accepted every task (tasks then run in the
 * background). site is the call site shown by spillway-ctl jobs and the dashboard
 * (spillway_submit passes the caller's file:line). @return 0, or the first refusal (errmsg says
 * which task and why). */
SPILLWAY_API int spillway_submit_at(spillway_graph *g, const char *site);
SPILLWAY_API int spillway_submit(spillway_graph *g);
#define spillway_submit(g) spillway_submit_at((g), SPILLWAY_SITE)
/** The graph's id, for spillway_graph_status; valid after spillway_graph_free too. */
SPILLWAY_API uint64_t spillway_graph_id(const spillway_graph *g);
SPILLWAY_API void spillway_graph_free(spillway_graph *g);

/** A submitted graph's progress, as the scheduler counts it. */
typedef struct spillway_graph_progress {
    uint64_t total;           /* tasks submitted */
    uint64_t waiting;         /* for inputs */
    uint64_t ready;           /* inputs ready, not yet given to a worker */
    uint64_t assigned;        /* queued on a worker */
    uint64_t running;         /* an executor runs it now */
    uint64_t done;
    uint64_t failed;          /* failed, or cancelled because nobody wanted its output */
    uint64_t bytes_in_flight; /* outputs produced and not yet consumed by all their tasks */
    uint64_t max_bytes;       /* the graph's cap on bytes in flight (0: none) */
    uint64_t age_ms;          /* since its first SUBMIT frame */
    int finished;             /* 1 once every task is done or failed */
} spillway_graph_progress;

/** Asks the scheduler how a graph this client submitted is doing. Finished graphs stay known
 * until 32 newer ones have finished.
 * @return 0; SPW_ENOOBJ if the scheduler knows no such graph of this client; SPW_ECLOSED,
 *         SPW_ETIMEDOUT (10 s). */
SPILLWAY_API int spillway_graph_status(spillway *c, uint64_t graph_id, spillway_graph_progress *out);

/** map_blocks: one task per block of an object, over views (no copies). */
typedef struct spillway_map_opts {
    uint64_t block_size; /* bytes per block; 0: use nblocks */
    uint64_t nblocks;    /* number of blocks; 0: use block_size */
    const char *reduce;  /* NULL: one result per block; else combine them pairwise with this
                            function (it must be associative and take two arguments) */
    uint64_t max_tasks;  /* caps for the job, 0 for the scheduler's defaults */
    uint64_t max_bytes;
} spillway_map_opts;

/** Runs fn(view of block i, shared...) for every block of input and submits the job.
 * shared arguments are referenced by every task, never copied per task (large BYTES become one
 * object, see spillway_task). Without reduce, *results is an array of *nresults kept references
 * (free the array with spillway_free, release each reference); with reduce, one.
 * @return 0; SPW_EINVAL (no block size or count, bad arguments); the input's error if it is a
 *         failed task; a submission error. */
SPILLWAY_API int spillway_map_blocks_at(spillway *c, const char *fn, spillway_ref input,
                                        const spillway_arg *shared, size_t nshared,
                                        const spillway_map_opts *opts, spillway_ref **results,
                                        size_t *nresults, const char *site);
#define spillway_map_blocks(c, fn, input, shared, nshared, opts, results, nresults)                \
    spillway_map_blocks_at((c), (fn), (input), (shared), (nshared), (opts), (results),            \
                           (nresults), SPILLWAY_SITE)

/** map_blocks over several objects as one job (one graph, one entry in spillway-ctl jobs):
 * fn(view of block j of inputs[i], shared...) for every block of every input, inputs in order.
 * opts.block_size cuts each input into blocks of that size (the last block of each input may
 * be shorter); opts.nblocks cuts the inputs together into about that many blocks of one size.
 * Without reduce, *results holds the blocks' kept results, input by input, block by block;
 * with reduce, one result for all of them.
 * @return as spillway_map_blocks; SPW_EINVAL also for no inputs. */
SPILLWAY_API int spillway_map_blocks_list_at(spillway *c, const char *fn, const spillway_ref *inputs,
                                             size_t ninputs, const spillway_arg *shared,
                                             size_t nshared, const spillway_map_opts *opts,
                                             spillway_ref **results, size_t *nresults,
                                             const char *site);
#define spillway_map_blocks_list(c, fn, inputs, ninputs, shared, nshared, opts, results, nresults)  \
    spillway_map_blocks_list_at((c), (fn), (inputs), (ninputs), (shared), (nshared), (opts),       \
                                (results), (nresults), SPILLWAY_SITE)
/** shuffle: a map stage whose task i runs map_fn(input i, shared...) and writes P outputs
 * (spw_task_output_at, one per partition), and a reduce stage whose task j runs
 * reduce_fn(output j of map 0, output j of map 1, ..., reduce_shared...), in one graph. */
typedef struct spillway_shuffle_opts {
    uint32_t partitions; /* P: outputs of every map task, and reduce tasks (1 to
                            SPILLWAY_MAX_OUTPUTS) */
    const spillway_arg *reduce_shared; /* arguments every reduce and merge task takes after its
                                          pieces (may be NULL) */
    size_t nreduce_shared;
    const char *merge;     /* combines a group of one partition's pieces into one piece that the
                              reduce (or a merge) takes in their place; NULL: reduce_fn, which
                              must then accept its own outputs among its inputs */
    uint32_t fan_in;       /* most pieces one reduce or merge task takes; 0: the most a task
                              record carries well (256 at the default --max-frame and
                              --inline-limit), less where pieces are large (merge_bytes) */
    uint64_t merge_bytes;  /* most bytes of pieces one merge task takes, estimated from the
                              inputs' sizes over P; 0: a quarter of the smallest worker store */
    uint64_t max_tasks;    /* caps for the job (spillway_graph_limits); max_bytes 0 means no
                              cap, as every map output waits for the last map task: the stores
                              spill what does not fit */
    uint64_t max_bytes;
} spillway_shuffle_opts;

/** Adds a shuffle to g: N = ninputs map tasks map_fn(inputs[i], shared...), each of P outputs,
 * and P reduce tasks, reduce j taking output j of every map task in map order. The reduces take
 * the map outputs ("pieces") directly while a partition has at most fan_in of them; beyond, the
 * pieces are merged early, groups of consecutive maps' pieces of one partition combined by
 * merge(pieces..., reduce_shared...) as soon as those maps are done (a tree when the merged
 * pieces are still too many), so that no task takes more than fan_in pieces, nor a merge more
 * than merge_bytes, and the small pieces are consumed, and freed, while the maps go on. Order is
 * kept: a merge's output stands where its group stood. The reduces' outputs are results[0..P-1]
 * (flags: SPILLWAY_KEEP to hold them); every piece is released once consumed. Inputs are any
 * arguments (objects, views, earlier tasks' outputs in g); shared as for spillway_map_blocks.
 * When g has no byte cap (spillway_graph_limits) this sets none, as for spillway_shuffle.
 * @param[out] results P references (opts->partitions), untouched on failure.
 * @return 0; SPW_EINVAL (no function, no inputs, P = 0, bad arguments); SPW_ELIMIT (P over
 *         SPILLWAY_MAX_OUTPUTS); SPW_EFRAMESIZE (as spillway_task_at). After an error other
 *         than SPW_EINVAL or SPW_ELIMIT, g may hold some of the shuffle's tasks: free it. */
SPILLWAY_API int spillway_graph_shuffle_at(spillway_graph *g, const char *map_fn,
                                           const spillway_arg *inputs, size_t ninputs,
                                           const spillway_arg *shared, size_t nshared,
                                           const char *reduce_fn, const spillway_shuffle_opts *opts,
                                           unsigned flags, spillway_ref *results,
                                           const char *site);
#define spillway_graph_shuffle(g, map_fn, inputs, ninputs, shared, nshared, reduce_fn, opts,        \
                               flags, results)                                                     \
    spillway_graph_shuffle_at((g), (map_fn), (inputs), (ninputs), (shared), (nshared),            \
                              (reduce_fn), (opts), (flags), (results), SPILLWAY_SITE)
/** A shuffle as one graph with opts' caps, submitted: results[0..P-1] are kept references to
 * the reduces' outputs (release each). Memory stays within every worker's budget however large
 * N and P: pieces are released once consumed, reduces start as soon as their inputs exist, and
 * what the stores cannot hold spills.
 * @return as spillway_graph_shuffle_at, or a submission error (nothing is then held). */
SPILLWAY_API int spillway_shuffle_at(spillway *c, const char *map_fn, const spillway_arg *inputs,
                                     size_t ninputs, const spillway_arg *shared, size_t nshared,
                                     const char *reduce_fn, const spillway_shuffle_opts *opts,
                                     spillway_ref *results, const char *site);
#define spillway_shuffle(c, map_fn, inputs, ninputs, shared, nshared, reduce_fn, opts, results)    \
    spillway_shuffle_at((c), (map_fn), (inputs), (ninputs), (shared), (nshared), (reduce_fn),     \
                        (opts), (results), SPILLWAY_SITE)

/** Waits until every listed kept result (or put) is finished, up to timeout_ms (-1: forever).
 * @return 0 if all succeeded; the first failure's code otherwise (errmsg has its text);
 *         SPW_ETIMEDOUT; SPW_ENOTHELD for a reference this client does not hold. */
SPILLWAY_API int spillway_wait(spillway *c, const spillway_ref *refs, size_t n, int timeout_ms);

/* ------------------------------------------------------------------ plugins */

/** A plugin this client uploaded (spillway_plugin_add): task functions that run on every worker
 * without a restart. It is named by the BLAKE2b-256 hash of its bytes, and a task names one of
 * its functions as "NAME@PREFIX" (spillway_plugin_fn), PREFIX being the first 16 hex digits of
 * that hash: two versions of "the same" plugin are two plugins, side by side, and a graph runs
 * exactly the bytes its tasks name. */
typedef struct spillway_plugin spillway_plugin;

/** The longest task function name (spillway_plugin_fn's result included), with its NUL. */
#define SPILLWAY_FN_MAX 256

/** Uploads a plugin (a shared library exporting spillway_plugin_v1, see spillway/task.h) once,
 * and holds it: its functions may be named in tasks until spillway_plugin_release. The bytes go
 * to a worker's store like a put (only if no worker has them yet); one worker then loads the
 * plugin in a process of its own to check it before this returns. Other workers fetch it, check
 * its hash and cache it the first time a task of theirs needs it, workers that join later
 * included. Adding bytes that are added already (by this client or another) only takes another
 * hold on them.
 * @note Uploading code is running code as the workers' user: the scheduler refuses it
 * (SPW_EPERM) unless the cluster has a secret, and operators may turn it off
 * (--allow-plugin-upload no).
 * @param[out] out the plugin; untouched on failure.
 * @return 0; SPW_EINVAL (empty); SPW_EPERM (uploads refused, errmsg says why); SPW_ETOOBIG
 *         (over the scheduler's --plugin-max-size); SPW_EPLUGIN (it does not load on a worker,
 *         or its task ABI version is not one the workers speak: errmsg names it and why);
 *         SPW_EDUPLICATE (another plugin has the same 16-digit prefix); as spillway_put. */
SPILLWAY_API int spillway_plugin_add_mem(spillway *c, const void *data, size_t len,
                                         spillway_plugin **out);
/** spillway_plugin_add_mem of the file at path (read once, now: changing the file later changes
 * nothing uploaded). @return as spillway_plugin_add_mem; -errno reading the file. */
SPILLWAY_API int spillway_plugin_add(spillway *c, const char *path, spillway_plugin **out);
/** The name a task gives to run function fn of plugin p: "fn@PREFIX", written into buf
 * (SPILLWAY_FN_MAX bytes are always enough). @return buf, or NULL if it does not fit or fn is
 * empty or has an '@'. */
SPILLWAY_API const char *spillway_plugin_fn(const spillway_plugin *p, const char *fn, char *buf,
                                            size_t buflen);
/** The plugin's hash, 64 hex digits. @note valid until spillway_plugin_release. */
SPILLWAY_API const char *spillway_plugin_hash(const spillway_plugin *p);
/** The plugin's own name (its spw_plugin.name). @note valid until spillway_plugin_release. */
SPILLWAY_API const char *spillway_plugin_name(const spillway_plugin *p);
/** Drops this client's hold on the plugin and frees p (NULL is a no-op). Graphs submitted
 * already keep it until their tasks are done; once nothing holds it, its bytes are deleted from
 * the stores and the workers' caches let it go when they need the room. After spillway_close,
 * it only frees p.
 * @return 0; SPW_ECLOSED. */
SPILLWAY_API int spillway_plugin_release(spillway_plugin *p);

/** The raw 32-hex-digit form of a reference, NUL terminated in out (33 bytes). */
SPILLWAY_API char *spillway_ref_hex(spillway_ref ref, char out[33]);

#ifdef __cplusplus
}
#endif
#endif /* SPILLWAY_H */
