/*
 * spw_sched: the scheduler. One libuv loop owns the task table, the object directory with its
 * reference counts, the worker registry and the client sessions. spillway-scheduler is a thin
 * main() over this library, so tests can run a scheduler in-process.
 */
#ifndef SPW_SCHED_H
#define SPW_SCHED_H

#include <stdbool.h>
#include <stdint.h>

#include <uv.h>

#include "spillway/base.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sched sched;

typedef struct sched_opts {
    const char *listen;            /* "HOST:PORT", port 0 = ephemeral ("127.0.0.1:7400") */
    const uint8_t *secret;         /* cluster secret or NULL */
    size_t secret_len;
    uint32_t max_frame;            /* bytes */
    uint64_t inline_limit;         /* values up to this size travel in messages (64 KiB) */
    uint32_t chunk;                /* object chunk size announced to peers */
    uint32_t heartbeat_timeout_ms; /* a worker silent this long is declared dead (15000) */
    uint32_t task_retries;         /* times a task is retried after its worker died (3) */
    uint32_t place_wait_ms;        /* a task bound to a worker name that no connected worker
                                      has fails after this long (60000; 0: waits forever) */
    uint32_t session_grace_s;      /* a client's session outlives its broken connection this
                                      long, for it to resume (60; 0: ends with it) */
    uint32_t queue_target_us;      /* work queued ahead per slot, by observed task time (2000) */
    uint32_t max_depth;            /* most tasks queued per slot (256) */
    uint64_t graph_max_tasks;      /* default cap on a graph's tasks in flight (0: none) */
    uint64_t graph_max_bytes;      /* default cap on a graph's bytes in flight (0: a quarter of
                                      the workers' store capacity) */
    uint64_t graph_max_total;      /* tasks one submitted graph may have (2,000,000; 0: none);
                                      more are refused with SPW_ELIMIT */
    uint32_t max_conns;            /* accepted connections at once (0: no cap); an eighth of
                                      them (4..64) are kept for workers and spillway-ctl */
    bool allow_plugin_upload;      /* clients may add plugins (true; also needs a secret) */
    uint64_t plugin_max_size;      /* largest plugin a client may add, bytes (64 MiB) */
    int encrypt;                   /* PROTO_ENCRYPT_*: TLS between hosts (needs a secret) */
    bool encrypt_local;            /* ... on loopback TCP too */
    const char *tls_cert, *tls_key, *tls_ca; /* mutual TLS by certificates (proto_ctx_opts) */
    const char *state_dir;         /* directory of the journal (journal.c); NULL: no journal, a
                                      restart forgets everything */
} sched_opts;

void sched_opts_default(sched_opts *o);

/** Creates a scheduler on loop and starts listening.
 * @param[out] bound the address actually bound ("127.0.0.1:PORT"), at least 64 bytes.
 * @return 0, or an error (bad address, address in use). */
int sched_new(uv_loop_t *loop, const sched_opts *o, sched **out, char *bound, size_t boundlen);
/** Closes every connection and handle; done(arg) runs once all are closed and the scheduler
 * is freed. */
void sched_close(sched *s, void (*done)(void *arg), void *arg);

#ifdef __cplusplus
}
#endif
#endif
