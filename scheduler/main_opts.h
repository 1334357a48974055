/*
 * spillway-scheduler's options: one row each in sched_optset (main_opts.c), indexed by this
 * enum. main.c applies the parsed values; tests/unit/test_options.c checks the man page and the
 * example config against the rows.
 */
#ifndef SPW_SCHEDULER_MAIN_OPTS_H
#define SPW_SCHEDULER_MAIN_OPTS_H

#include "spillway/options.h"

/* --chunk-size bounds. Below a page, per-chunk framing and round trips dominate a transfer;
 * main.c's cross-checks also keep a chunk under half of --max-frame. */
#define SCHED_MIN_CHUNK 4096u
#define SCHED_MAX_CHUNK (256u << 20)

enum sched_opt {
    SOPT_LISTEN,
    SOPT_PORT_FILE,
    SOPT_SECRET_FILE,
    SOPT_MAX_CONNECTIONS,
    SOPT_CONFIG,
    SOPT_LOG_LEVEL,
    SOPT_MAX_FRAME,
    SOPT_INLINE_LIMIT,
    SOPT_CHUNK_SIZE,
    SOPT_HEARTBEAT_TIMEOUT,
    SOPT_TASK_RETRIES,
    SOPT_PLACE_WAIT,
    SOPT_SESSION_GRACE,
    SOPT_GRAPH_MAX_TASKS,
    SOPT_GRAPH_MAX_BYTES,
    SOPT_HTTP,
    SOPT_HTTP_PORT_FILE,
    SOPT_HTTP_AUTH,
    SOPT_HTTP_SAMPLE,
    SOPT_HTTP_HISTORY,
    SOPT_HTTP_HOST,
    SOPT_GRAPH_MAX_TOTAL,
    SOPT_ALLOW_PLUGIN_UPLOAD,
    SOPT_PLUGIN_MAX_SIZE,
    SOPT_ENCRYPT,
    SOPT_ENCRYPT_LOCAL,
    SOPT_TLS_CERT,
    SOPT_TLS_KEY,
    SOPT_TLS_CA,
    SOPT_STATE_DIR,
    SOPT_VERSION,
    SOPT_HELP,
    SOPT_COUNT
};

/* SOPT_HTTP_AUTH's words, in the order of its choices. */
enum { SCHED_HTTP_AUTH_AUTO, SCHED_HTTP_AUTH_TOKEN };

extern const spw_optset sched_optset;

#endif
