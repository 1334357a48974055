/*
 * spillway-worker's options: one row each in wrk_optset (main_opts.c), indexed by this enum.
 * main.c applies the parsed values; tests/unit/test_options.c checks the man page and the
 * example config against the rows.
 */
#ifndef SPW_WORKER_MAIN_OPTS_H
#define SPW_WORKER_MAIN_OPTS_H

#include "spillway/options.h"

enum wrk_opt {
    WOPT_SCHEDULER,
    WOPT_LISTEN,
    WOPT_ADVERTISE,
    WOPT_RECONNECT_MAX,
    WOPT_FETCH_STALL,
    WOPT_DRAIN_TIMEOUT,
    WOPT_PORT_FILE,
    WOPT_SLOTS,
    WOPT_STORE_CAPACITY,
    WOPT_ALLOC_WAIT,
    WOPT_SPILL_DIR,
    WOPT_SPILL_THRESHOLD,
    WOPT_SPILL_TARGET,
    WOPT_PAUSE_THRESHOLD,
    WOPT_SPILL_COMPRESSION_LEVEL,
    WOPT_SPILL_MAP_SIZE,
    WOPT_SPILL_MAP_MAX,
    WOPT_SPILL_THREADS,
    WOPT_TASK_MEMORY_LIMIT,
    WOPT_EXECUTOR_MAX_TASKS,
    WOPT_EXECUTOR_MAX_RSS,
    WOPT_PLUGIN,
    WOPT_PLUGIN_CACHE_MAX,
    WOPT_PLUGIN_MAX_SIZE,
    WOPT_ALLOW_PLUGIN_UPLOAD,
    WOPT_NAME,
    WOPT_SECRET_FILE,
    WOPT_LOCAL_GROUP,
    WOPT_MAX_CONNECTIONS,
    WOPT_CONFIG,
    WOPT_LOG_LEVEL,
    WOPT_ENCRYPT,
    WOPT_ENCRYPT_LOCAL,
    WOPT_TLS_CERT,
    WOPT_TLS_KEY,
    WOPT_TLS_CA,
    WOPT_VERSION,
    WOPT_HELP,
    WOPT_COUNT
};

extern const spw_optset wrk_optset;

#endif
