/*
 * spillway-worker: a node's worker daemon (and, with --executor, one of its executor
 * processes). A thin main over spw_worker: it applies the options its table (main_opts.c)
 * parsed, then handles signals, readiness once the scheduler has welcomed us, a clean
 * shutdown on SIGTERM or SIGINT, and SIGHUP (read the --plugin files again). A lost scheduler is
 * reconnected to (--reconnect-max); with --reconnect-max 0, or when the scheduler refuses us,
 * the worker exits with status 3 (systemd's Restart= brings it back).
 */
#include <errno.h>
#include <limits.h>
#include <grp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "spillway/conn.h"
#include "spillway/daemon.h"
#include "spillway/options.h"
#include "spillway/worker.h"

#include "main_opts.h"

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
/* Under a task memory limit an allocation may fail; the sanitizers' allocators then return
 * NULL, as malloc does, rather than abort (the task fails with SPW_ETASKMEM). */
#if defined(__SANITIZE_ADDRESS__)
const char *__asan_default_options(void);
const char *__asan_default_options(void)
#else
const char *__tsan_default_options(void);
const char *__tsan_default_options(void)
#endif
{
    return "allocator_may_return_null=1";
}
#endif

typedef struct app {
    uv_loop_t loop;
    wrk *w;
    uint32_t drain_timeout_ms; /* --drain-timeout */
    bool draining;             /* a first signal started a drain */
    int sigfd;          /* SIGTERM, SIGINT and SIGHUP (spw_signalfd) */
    uv_poll_t sigpoll;  /* on sigfd */
    const char *port_file;
    const char *bound;
    int exit_status;
} app;

static void closed(uv_handle_t *h)
{
    (void)h;
}

static void wrk_done(void *arg, int status)
{
    app *a = arg;
    if (status != 0 && a->exit_status == 0)
        a->exit_status = 1;
    a->w = NULL;
    uv_close((uv_handle_t *)&a->sigpoll, closed);
}

static void stop(app *a)
{
    if (a->w != NULL)
        wrk_close(a->w, wrk_done, a);
}

static void drained(void *arg, int status)
{
    (void)status; /* said in the log */
    stop(arg);
}

/* The first SIGTERM or SIGINT drains the worker first (its sole copies go to other workers,
 * within --drain-timeout), then stops it; a second one stops it at once. */
static void on_signal(app *a, int sig)
{
    spw_log(SPW_LOG_NOTICE, "signal %d: shutting down", sig);
    spw_sd_notify("STOPPING=1");
    if (!a->draining && a->w != NULL && a->drain_timeout_ms > 0) {
        a->draining = true;
        if (wrk_drain(a->w, a->drain_timeout_ms, drained, a) == 0)
            return;
    }
    stop(a);
}

/* The signals that came, one by one; SIGHUP (systemctl reload) reads the --plugin files again. */
static void on_signals(uv_poll_t *h, int status, int events)
{
    (void)status;
    (void)events;
    app *a = h->data;
    int sig;
    while (a->w != NULL && (sig = spw_signalfd_next(a->sigfd)) != 0) {
        if (sig == SIGHUP)
            wrk_reload(a->w);
        else
            on_signal(a, sig);
    }
}

static void on_ready(void *arg, int status)
{
    app *a = arg;
    if (status != 0) {
        /* Under systemd a Type=notify service that exits before READY=1 is a failed start
         * ("Failed with result 'protocol'"), whatever its status. Saying READY first lets the
         * unit's SuccessExitStatus=3 and RestartForceExitStatus=3 read the exit as what it is:
         * no scheduler to serve yet, start again. */
        spw_log(SPW_LOG_NOTICE, "no scheduler to register with: exiting with status 3");
        spw_sd_notify("READY=1\nSTATUS=no scheduler to register with: exiting with status 3");
        a->exit_status = 3;
        stop(a);
        return;
    }
    char msg[128];
    snprintf(msg, sizeof msg, "registered; peer port %s", a->bound);
    if (spw_daemon_ready(a->bound, a->port_file, msg) != 0) {
        a->exit_status = 1;
        stop(a);
    }
}

/* The spill directory must exist, be a directory, and be ours to write in: said now, naming
 * the path, rather than as a store error later. */
static int check_spill_dir(int at, const char *dir)
{
    struct stat st;
    if (stat(dir, &st) != 0) {
        /* A missing last component is made by the store, under systemd's StateDirectory. */
        int err = errno;
        char parent[PATH_MAX];
        snprintf(parent, sizeof parent, "%s", dir);
        char *slash = strrchr(parent, '/');
        if (err == ENOENT && slash != NULL) {
            *slash = '\0';
            if (parent[0] == '\0')
                snprintf(parent, sizeof parent, "/");
            if (stat(parent, &st) == 0 && S_ISDIR(st.st_mode) && access(parent, W_OK | X_OK) == 0)
                return 0;
        }
        spw_opt_path_error(at, "spill-dir", dir, spw_strerror(-err));
        return -1;
    }
    if (!S_ISDIR(st.st_mode)) {
        spw_opt_path_error(at, "spill-dir", dir, "not a directory");
        return -1;
    }
    if (access(dir, W_OK | X_OK) != 0) {
        spw_opt_path_error(at, "spill-dir", dir, spw_strerror(-errno));
        return -1;
    }
    return 0;
}

/* The local group by name or gid; -1 (said) when there is no such group. */
static long local_group(int at, const char *v)
{
    struct group gr, *grp = NULL;
    char grbuf[16384], *end;
    unsigned long gid = strtoul(v, &end, 10);
    if (*v != '\0' && *end == '\0' && gid < UINT32_MAX)
        return (long)gid;
    if (getgrnam_r(v, &gr, grbuf, sizeof grbuf, &grp) == 0 && grp != NULL)
        return (long)grp->gr_gid;
    spw_opt_error(at, "local-group", "%s: no such group", v);
    return -1;
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "--executor") == 0)
        return wrk_executor_main(argc, argv);
    if (argc > 1 && strcmp(argv[1], "--plugin-check") == 0)
        return wrk_plugin_check_main(argc, argv);
    spw_opts po;
    int rc = spw_opts_parse(&wrk_optset, argc, argv, &po);
    if (rc != 0)
        return rc > 0 ? 0 : 2;
    rc = 2;
    const spw_opt_val *v = po.val;
    spw_log_init("spillway-worker", (int)v[WOPT_LOG_LEVEL].u + SPW_LOG_ERR);
    /* A peer that hangs up mid-write is an error on that connection, not a reason to die. */
    signal(SIGPIPE, SIG_IGN);
    app a;
    memset(&a, 0, sizeof a);
    a.sigfd = -1;
    wrk_opts wo;
    wrk_opts_default(&wo);
    wo.scheduler = v[WOPT_SCHEDULER].str;
    wo.listen = v[WOPT_LISTEN].str;
    if (v[WOPT_ADVERTISE].set)
        wo.advertise = v[WOPT_ADVERTISE].str;
    wo.reconnect_max_ms = (uint32_t)v[WOPT_RECONNECT_MAX].u;
    wo.fetch_stall_ms = (uint32_t)v[WOPT_FETCH_STALL].u;
    a.drain_timeout_ms = (uint32_t)v[WOPT_DRAIN_TIMEOUT].u;
    if (v[WOPT_PORT_FILE].set)
        a.port_file = v[WOPT_PORT_FILE].str;
    if (v[WOPT_SLOTS].set)
        wo.slots = (uint32_t)v[WOPT_SLOTS].u;
    wo.store.capacity = v[WOPT_STORE_CAPACITY].u;
    wo.store.alloc_wait_ms = (uint32_t)v[WOPT_ALLOC_WAIT].u;
    wo.store.spill_threshold = v[WOPT_SPILL_THRESHOLD].f;
    wo.store.spill_target = v[WOPT_SPILL_TARGET].f;
    wo.store.pause_threshold = v[WOPT_PAUSE_THRESHOLD].f;
    wo.store.compression_level = (int)v[WOPT_SPILL_COMPRESSION_LEVEL].i;
    if (v[WOPT_SPILL_MAP_SIZE].set)
        wo.store.spill_map_size = v[WOPT_SPILL_MAP_SIZE].u;
    wo.store.spill_map_max = v[WOPT_SPILL_MAP_MAX].u;
    if (v[WOPT_SPILL_THREADS].set)
        wo.store.spill_threads = (uint32_t)v[WOPT_SPILL_THREADS].u;
    wo.exec_max_tasks = v[WOPT_EXECUTOR_MAX_TASKS].u;
    for (int i = 0; i < v[WOPT_PLUGIN].n; i++)
        wo.plugins[wo.nplugins++] = v[WOPT_PLUGIN].list[i];
    wo.plugin_cache_max = v[WOPT_PLUGIN_CACHE_MAX].u;
    wo.plugin_max_size = v[WOPT_PLUGIN_MAX_SIZE].u;
    wo.allow_plugin_upload = v[WOPT_ALLOW_PLUGIN_UPLOAD].u == 0;
    if (v[WOPT_NAME].set)
        wo.name = v[WOPT_NAME].str;
    if (v[WOPT_LOCAL_GROUP].set &&
        (wo.local_group = local_group(v[WOPT_LOCAL_GROUP].at, v[WOPT_LOCAL_GROUP].str)) < 0)
        goto out;
    /* Cross-checks. A store larger than the machine works until it fills: say so now. */
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    if (pages > 0 && page > 0 && wo.store.capacity > (uint64_t)pages * (uint64_t)page) {
        char cap[32], phys[32];
        spw_size_fmt(wo.store.capacity, cap, sizeof cap);
        spw_size_fmt((uint64_t)pages * (uint64_t)page, phys, sizeof phys);
        char msg[256];
        snprintf(msg, sizeof msg, "warning: more than this host's physical memory (%s): the "
                 "store will swap or be killed for memory once it fills", phys);
        spw_opt_path_error(v[WOPT_STORE_CAPACITY].at, "store-capacity", cap, msg);
    }
    /* Spilling starts above the threshold and stops under the target; the worker pauses above
     * pause-threshold. Out of order, spilling would never stop, or never start before the worker
     * stops taking tasks. Both at 1 is allowed: neither spilling nor pausing, ever. */
    bool both_off = wo.store.spill_threshold == 1.0 && wo.store.pause_threshold == 1.0;
    if (!(wo.store.spill_target < wo.store.spill_threshold &&
          (wo.store.spill_threshold < wo.store.pause_threshold || both_off))) {
        bool first = !(wo.store.spill_target < wo.store.spill_threshold);
        int target_at = v[WOPT_SPILL_TARGET].at, threshold_at = v[WOPT_SPILL_THRESHOLD].at;
        spw_opt_error(first ? (target_at >= 0 ? target_at : threshold_at)
                            : (threshold_at >= 0 ? threshold_at : v[WOPT_PAUSE_THRESHOLD].at),
                      first ? "spill-target" : "spill-threshold",
                      "want spill-target < spill-threshold < pause-threshold <= 1, got %g, %g, %g",
                      wo.store.spill_target, wo.store.spill_threshold, wo.store.pause_threshold);
        goto out;
    }
    wo.task_mem_auto = !v[WOPT_TASK_MEMORY_LIMIT].set;
    wo.task_mem_limit = wo.task_mem_auto ? wrk_task_mem_default(wo.store.capacity, wo.slots)
                                         : v[WOPT_TASK_MEMORY_LIMIT].u;
    wo.exec_rss_auto = !v[WOPT_EXECUTOR_MAX_RSS].set;
    wo.exec_max_rss = wo.exec_rss_auto ? wo.task_mem_limit / 2 : v[WOPT_EXECUTOR_MAX_RSS].u;
    uint64_t nofile = spw_raise_nofile();
    uint32_t max_conns = (uint32_t)v[WOPT_MAX_CONNECTIONS].u;
    if (!v[WOPT_MAX_CONNECTIONS].set)
        max_conns = proto_default_max_conns(nofile);
    else if (max_conns > nofile / 4 * 3)
        spw_log(SPW_LOG_WARN, "--max-connections %u is close to the descriptor limit %llu: "
                "expect EMFILE under load", max_conns, (unsigned long long)nofile);
    wo.max_conns = max_conns;
    /* Spilling is on unless asked otherwise: under systemd in the unit's state directory,
     * else in /var/tmp (on disk, unlike a tmpfs /tmp). Files are unlinked once open. */
    char spill_default[PATH_MAX];
    const char *spill_dir = v[WOPT_SPILL_DIR].str;
    if (!v[WOPT_SPILL_DIR].set) {
        const char *state = getenv("STATE_DIRECTORY");
        if (state != NULL && strchr(state, ':') == NULL)
            snprintf(spill_default, sizeof spill_default, "%s/spill", state);
        else
            snprintf(spill_default, sizeof spill_default, "/var/tmp");
        spill_dir = spill_default;
    }
    wo.store.spill_dir = strcmp(spill_dir, "none") == 0 ? NULL : spill_dir;
    if (wo.store.spill_dir != NULL &&
        check_spill_dir(v[WOPT_SPILL_DIR].at, wo.store.spill_dir) != 0)
        goto out;
    wo.encrypt = (int)v[WOPT_ENCRYPT].u;
    wo.encrypt_local = v[WOPT_ENCRYPT_LOCAL].u != 0;
    if (spw_opt_tls_check(&v[WOPT_TLS_CERT], v[WOPT_ENCRYPT].u) != 0)
        goto out;
    wo.tls_cert = v[WOPT_TLS_CERT].set ? v[WOPT_TLS_CERT].str : NULL;
    wo.tls_key = v[WOPT_TLS_KEY].set ? v[WOPT_TLS_KEY].str : NULL;
    wo.tls_ca = v[WOPT_TLS_CA].set ? v[WOPT_TLS_CA].str : NULL;
    if (wo.encrypt != PROTO_ENCRYPT_NO && !v[WOPT_SECRET_FILE].set) {
        spw_opt_error(v[WOPT_ENCRYPT].at, "encrypt",
                      "%s needs --secret-file (the key is made from the cluster secret)",
                      v[WOPT_ENCRYPT].str);
        goto out;
    }
    uint8_t *secret = NULL;
    size_t secret_len = 0;
    const char *secret_file = v[WOPT_SECRET_FILE].str;
    if (v[WOPT_SECRET_FILE].set) {
        int src = proto_secret_load(secret_file, &secret, &secret_len);
        if (src != 0) {
            spw_opt_path_error(v[WOPT_SECRET_FILE].at, "secret-file", secret_file,
                               proto_secret_strerror(src));
            goto out;
        }
        wo.secret = secret;
        wo.secret_len = secret_len;
    }
    /* The spill lanes run on libuv's threadpool (created at its first use, sized by
     * UV_THREADPOOL_SIZE, default 4), which also resolves names: room for every lane, the one
     * spill part queued ahead of a free lane (it holds a pool thread while it waits in
     * lane_take), and two more, unless the operator set it. */
    char pool[16];
    snprintf(pool, sizeof pool, "%u", ost_spill_lanes(&wo.store) + 3);
    setenv("UV_THREADPOOL_SIZE", pool, 0);
    static const int sigs[] = {SIGTERM, SIGINT, SIGHUP, 0};
    a.sigfd = spw_signalfd(sigs); /* before wrk_new starts any thread */
    if (a.sigfd < 0) {
        fprintf(stderr, "spillway-worker: cannot watch signals: %s\n", spw_strerror(a.sigfd));
        spw_free(secret);
        rc = 1;
        goto out;
    }
    uv_loop_init(&a.loop);
    char bound[64];
    a.bound = bound;
    rc = wrk_new(&a.loop, &wo, on_ready, &a, &a.w, bound, sizeof bound);
    spw_free(secret);
    if (rc != 0) {
        fprintf(stderr, "spillway-worker: cannot start: %s\n", spw_strerror(rc));
        uv_run(&a.loop, UV_RUN_DEFAULT);
        uv_loop_close(&a.loop);
        rc = 1;
        goto out;
    }
    uv_poll_init(&a.loop, &a.sigpoll, a.sigfd);
    a.sigpoll.data = &a;
    uv_poll_start(&a.sigpoll, UV_READABLE, on_signals);
    uv_run(&a.loop, UV_RUN_DEFAULT);
    if (uv_loop_close(&a.loop) != 0) {
        spw_log(SPW_LOG_ERR, "loop still had handles at exit");
        a.exit_status = 1;
    }
    rc = a.exit_status;
out:
    if (a.sigfd >= 0)
        close(a.sigfd);
    spw_opts_free(&po);
    return rc;
}
