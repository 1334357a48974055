/*
 * spw_worker: a worker daemon's logic. It registers with the scheduler, owns the node's object
 * store, runs tasks in a pool of executor processes that map the store's arena, and serves
 * object transfers to peers and clients on its peer port. spillway-worker is a thin main()
 * over this library; the same binary runs executors (`spillway-worker --executor ...`).
 */
#ifndef SPW_WORKER_H
#define SPW_WORKER_H

#include <stdint.h>

#include <uv.h>

#include "spillway/objstore.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct wrk wrk;

#define WRK_MAX_PLUGINS 16

typedef struct wrk_opts {
    const char *scheduler;     /* "HOST:PORT" of the scheduler */
    const char *listen;        /* peer port "HOST:PORT", port 0 = ephemeral */
    const char *advertise;     /* "HOST[:PORT]" peers reach us at, or NULL: the bound address,
                                * or for a wildcard the address that reaches the scheduler */
    const char *name;          /* shown by spillway-ctl */
    uint32_t slots;            /* executor processes (default: cores) */
    const uint8_t *secret;     /* cluster secret or NULL */
    size_t secret_len;
    int encrypt;               /* PROTO_ENCRYPT_*: TLS between hosts (needs a secret) */
    bool encrypt_local;        /* ... on loopback TCP too */
    const char *tls_cert, *tls_key, *tls_ca; /* mutual TLS by certificates (proto_ctx_opts) */
    ost_opts store;            /* capacity, spill settings */
    const char *executor_path; /* binary to run as executor (default /proc/self/exe) */
    const char *plugins[WRK_MAX_PLUGINS]; /* --plugin files: copied into the cache at start */
    uint32_t nplugins;
    const char *plugin_cache_dir; /* where the cache directory is made (NULL: the spill
                                     directory, else $STATE_DIRECTORY, else /var/tmp) */
    uint64_t plugin_cache_max; /* bytes of plugins the cache keeps at most (0: no cap) */
    uint64_t plugin_max_size;  /* largest plugin accepted, bytes (0: no cap) */
    bool allow_plugin_upload;  /* run plugins clients upload (also needs a secret) */
    uint32_t heartbeat_ms;     /* default 1000 */
    uint32_t reconnect_max_ms; /* longest wait between reconnect attempts after losing the
                                * scheduler (default 30000); 0: report the loss and stop */
    uint32_t fetch_stall_ms;   /* a peer silent this long while we fetch from it is given up
                                * (default 30000; 0: never) */
    uint32_t max_frame;
    uint64_t task_mem_limit;   /* bytes a task may use in its executor (0 = no limit) */
    bool task_mem_auto;        /* task_mem_limit is wrk_task_mem_default's: it follows the
                                  workers joining and leaving this host */
    bool exec_rss_auto;        /* exec_max_rss is half of task_mem_limit, and follows it */
    uint64_t exec_max_tasks;   /* an executor is replaced after this many tasks (0 = never) */
    uint64_t exec_max_rss;     /* ...or once its resident private memory passes this (0 = never) */
    long local_group;          /* gid whose members may use the local socket too; -1: none */
    uint32_t max_conns;        /* accepted connections at once (0: no cap); an eighth of them
                                  (4..64) are kept for other workers */
} wrk_opts;

/** Fixed part of a node's memory budget (store capacity + slots × task limit + this): the
 * worker's own heap and buffers and each executor's baseline. */
#define WRK_NODE_MARGIN (128ULL << 20)

/** The default --task-memory-limit: half of the physical memory that the stores of every worker
 * on this host leave (each with WRK_NODE_MARGIN), shared by all their slots, at least 64 MiB.
 * The other workers are those listed in the host's worker directory (hostshare.c). */
uint64_t wrk_task_mem_default(uint64_t capacity, uint32_t slots);

void wrk_opts_default(wrk_opts *o);

/** Creates a worker: loads and checks plugins, creates the store, starts the executors, binds
 * the peer port and connects to the scheduler. ready(arg, status) runs 0 once, when the
 * scheduler has first welcomed us, and an error when the worker gives up on its scheduler (the
 * caller then closes the worker): at once with reconnect_max_ms 0, else only for a refusal
 * (SPW_EAUTH, SPW_EVERSION). Otherwise a lost or unreachable scheduler is retried with capped
 * exponential backoff, and each new registration starts afresh (see wrk__sched_lost).
 * @param[out] bound the peer address bound, at least 64 bytes.
 * @return 0 or an error now (bad options, plugin refused, store creation, bind). */
int wrk_new(uv_loop_t *loop, const wrk_opts *o, void (*ready)(void *arg, int status), void *arg,
            wrk **out, char *bound, size_t boundlen);
/** Drains the worker before it stops: asks the scheduler to place no more tasks here, to take
 * back the tasks not yet started and to copy every object of which this worker holds the only
 * copy to other workers (they fetch it from the peer port, which keeps serving). done(arg,
 * status) runs once: 0 when the scheduler says nothing here is needed any more, SPW_ETIMEDOUT
 * after timeout_ms, SPW_ECLOSED if the scheduler connection drops, or the scheduler's error.
 * The worker goes on running either way; the caller then usually closes it (wrk_close).
 * @return 0; SPW_ECLOSED now (done never runs) when no scheduler is connected; SPW_EINVAL when
 *         closing or draining already. */
int wrk_drain(wrk *w, uint32_t timeout_ms, void (*done)(void *arg, int status), void *arg);
/** Reads every --plugin file again (SIGHUP): a file whose bytes changed is copied into the
 * plugin cache by content and checked; tasks started afterwards run it (each executor is
 * replaced once the tasks queued on it are done) and the scheduler hears the worker's new
 * plugin list. A file that cannot be read or loaded keeps its old bytes, logged. */
void wrk_reload(wrk *w);
/** Stops executors (their sockets close and they exit on their own; one still running a task
 * after 5 s is killed), closes connections and handles, frees the store. done(arg, status)
 * runs once everything is closed and freed: status 0, or SPW_EEXECCRASH if an executor exited
 * abnormally on its own during the shutdown (a leak under LeakSanitizer, say). */
void wrk_close(wrk *w, void (*done)(void *arg, int status), void *arg);

/** Runs an executor process (the `--executor` mode of the worker binary). Never returns
 * to the caller's loop; returns the process exit status. */
int wrk_executor_main(int argc, char **argv);
/** `--plugin-check PATH OUT`: loads the plugin at PATH, checks it, and writes one line to OUT:
 * "0 NFNS NAME", or "CODE why" (CODE a negative error code). Returns the exit status. */
int wrk_plugin_check_main(int argc, char **argv);

#ifdef __cplusplus
}
#endif
#endif
