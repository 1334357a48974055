/*
 * spillway-worker: a node's worker daemon (and, with --executor, one of its executor
 * processes). A thin main over spw_worker: options, signals, readiness once the scheduler has
 * welcomed us, and a clean shutdown on SIGTERM or SIGINT. A lost scheduler is reconnected to
 * (--reconnect-max); with --reconnect-max 0, or when the scheduler refuses us, the worker exits
 * with status 3 (systemd's Restart= brings it back).
 */
#include <errno.h>
#include <limits.h>
#include <getopt.h>
#include <grp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "spillway/conn.h"
#include "spillway/daemon.h"
#include "spillway/worker.h"

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

static void usage(FILE *f)
{
    fputs("usage: spillway-worker [options]\n"
          "  --scheduler HOST:PORT     the scheduler (127.0.0.1:7400)\n"
          "  --listen HOST:PORT        peer port for object transfers (127.0.0.1:0 = any port)\n"
          "  --advertise HOST[:PORT]   address peers reach the peer port at (the bound one; on\n"
          "                            a wildcard, our address towards the scheduler)\n"
          "  --reconnect-max MS        longest wait between attempts to reach a lost scheduler\n"
          "                            (30000; 0 = exit with status 3 instead)\n"
          "  --fetch-stall MS          give up on a peer silent this long mid-fetch (30000)\n"
          "  --port-file PATH          write the bound peer host:port there once registered\n"
          "  --slots N                 executor processes, tasks run at once (cores)\n"
          "  --store-capacity SIZE|N%  object store size (30% of memory)\n"
          "  --alloc-wait MS           how long an allocation waits for room (30000)\n"
          "  --spill-dir PATH|none     where objects spill ($STATE_DIRECTORY/spill or /var/tmp)\n"
          "  --spill-threshold F       spill above this fraction of capacity (0.8)\n"
          "  --spill-target F          spill until use falls under this fraction (0.7)\n"
          "  --pause-threshold F       take no new tasks above this fraction (0.9)\n"
          "  --spill-compression-level N  zstd level for spilled objects (1)\n"
          "  --spill-map-size SIZE     initial LMDB map size (4 x capacity)\n"
          "  --spill-map-max SIZE      largest LMDB map size (0 = the disk is the limit)\n"
          "  --spill-threads N         objects spilled or restored at once (min(cores, 4))\n"
          "  --task-memory-limit SIZE|N%  memory a task may use in its executor; 0 = none\n"
          "                            (half of what the store leaves, shared by the slots)\n"
          "  --executor-max-tasks N    replace an executor after N tasks (0 = never)\n"
          "  --executor-max-rss SIZE   replace an executor whose private memory passes SIZE\n"
          "                            (half the task memory limit; 0 = never)\n"
          "  --plugin PATH.so          load task functions from a plugin (repeatable)\n"
          "  --name NAME               name shown by spillway-ctl (HOSTNAME:PEER_PORT)\n"
          "  --secret-file PATH        cluster secret (mode 0600 or 0640)\n"
          "  --local-group GROUP       members may map the arena through the local socket\n"
          "                            (besides the worker's own uid and root)\n"
          "  --max-connections N       accepted connections at once (3/4 of the descriptor\n"
          "                            limit, at most 8192); some kept for workers and ctl\n"
          "  --config PATH             file of key = value lines, one per option\n"
          "  --log-level LEVEL         err|warn|notice|info|debug (notice)\n"
          "  --version, --help\n",
          f);
}

typedef struct app {
    uv_loop_t loop;
    wrk *w;
    uv_signal_t sigterm, sigint;
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
    uv_close((uv_handle_t *)&a->sigterm, closed);
    uv_close((uv_handle_t *)&a->sigint, closed);
}

static void stop(app *a)
{
    if (a->w != NULL)
        wrk_close(a->w, wrk_done, a);
}

static void on_signal(uv_signal_t *h, int sig)
{
    app *a = h->data;
    spw_log(SPW_LOG_NOTICE, "signal %d: shutting down", sig);
    spw_sd_notify("STOPPING=1");
    stop(a);
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

static const struct option longopts[] = {
    {"scheduler", required_argument, 0, 'S'},
    {"listen", required_argument, 0, 'l'},
    {"advertise", required_argument, 0, 'A'},
    {"reconnect-max", required_argument, 0, 'R'},
    {"fetch-stall", required_argument, 0, 'F'},
    {"port-file", required_argument, 0, 'p'},
    {"slots", required_argument, 0, 'n'},
    {"store-capacity", required_argument, 0, 'c'},
    {"alloc-wait", required_argument, 0, 'W'},
    {"spill-dir", required_argument, 0, 'D'},
    {"spill-threshold", required_argument, 0, 'T'},
    {"spill-target", required_argument, 0, 'G'},
    {"pause-threshold", required_argument, 0, 'Z'},
    {"spill-compression-level", required_argument, 0, 'z'},
    {"spill-map-size", required_argument, 0, 'm'},
    {"spill-map-max", required_argument, 0, 'M'},
    {"spill-threads", required_argument, 0, 'J'},
    {"task-memory-limit", required_argument, 0, 'K'},
    {"executor-max-tasks", required_argument, 0, 'E'},
    {"executor-max-rss", required_argument, 0, 'r'},
    {"plugin", required_argument, 0, 'P'},
    {"name", required_argument, 0, 'N'},
    {"secret-file", required_argument, 0, 's'},
    {"local-group", required_argument, 0, 'g'},
    {"max-connections", required_argument, 0, 'X'},
    {"config", required_argument, 0, 'C'},
    {"log-level", required_argument, 0, 'L'},
    {"version", no_argument, 0, 'V'},
    {"help", no_argument, 0, 'h'},
    {0, 0, 0, 0},
};

/* A whole number in lo..hi, or a message naming the option (and config line). */
static int parse_ulong(int at, const char *name, const char *v, unsigned long lo,
                       unsigned long hi, unsigned long *out)
{
    char *end;
    errno = 0;
    unsigned long n = strtoul(v, &end, 10);
    if (*v == '\0' || *v == '-' || *end != '\0' || errno != 0 || n < lo || n > hi) {
        spw_opt_error(at, name, "wants a whole number %lu..%lu, got '%s'", lo, hi, v);
        return -1;
    }
    *out = n;
    return 0;
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

int main(int argc0, char **argv0)
{
    if (argc0 > 1 && strcmp(argv0[1], "--executor") == 0)
        return wrk_executor_main(argc0, argv0);
    int argc;
    char **argv;
    if (spw_config_args(argc0, argv0, longopts, &argc, &argv) != 0)
        return 2;
    spw_log_init("spillway-worker", SPW_LOG_NOTICE);
    /* A peer that hangs up mid-write is an error on that connection, not a reason to die. */
    signal(SIGPIPE, SIG_IGN);
    wrk_opts wo;
    wrk_opts_default(&wo);
    if (spw_capacity_parse("30%", &wo.store.capacity) != 0)
        wo.store.capacity = 1ULL << 30;
    app a;
    memset(&a, 0, sizeof a);
    const char *secret_file = NULL, *spill_dir = NULL;
    int spill_dir_at = -1, capacity_at = -1, secret_at = -1;
    int target_at = -1, threshold_at = -1, pause_at = -1;
    uint32_t max_conns = 0;
    bool task_mem_set = false, rss_set = false;
    int rc = 2, c;
    char *end;
    unsigned long n;
    opterr = 0; /* our messages name the config line */
    for (int at = optind; (c = getopt_long(argc, argv, ":h", longopts, NULL)) != -1; at = optind) {
        switch (c) {
        case 'S':
            if (spw_opt_addr(at, "scheduler", optarg, false) != 0)
                goto out;
            wo.scheduler = optarg;
            break;
        case 'l':
            if (spw_opt_addr(at, "listen", optarg, false) != 0)
                goto out;
            wo.listen = optarg;
            break;
        case 'A':
            if (spw_opt_addr(at, "advertise", optarg, true) != 0)
                goto out;
            wo.advertise = optarg;
            break;
        case 'R':
            if (parse_ulong(at, "reconnect-max", optarg, 0, 24UL * 3600 * 1000, &n) != 0)
                goto out;
            wo.reconnect_max_ms = (uint32_t)n;
            break;
        case 'F':
            if (parse_ulong(at, "fetch-stall", optarg, 0, 24UL * 3600 * 1000, &n) != 0)
                goto out;
            wo.fetch_stall_ms = (uint32_t)n;
            break;
        case 'p':
            a.port_file = optarg;
            break;
        case 'n':
            if (parse_ulong(at, "slots", optarg, 1, PROTO_MAX_SLOTS, &n) != 0)
                goto out;
            wo.slots = (uint32_t)n;
            break;
        case 'c':
            if (spw_capacity_parse(optarg, &wo.store.capacity) != 0 ||
                wo.store.capacity < (1u << 20)) {
                spw_opt_error(at, "store-capacity",
                              "wants a size (>= 1M) or a percentage of memory, got '%s'", optarg);
                goto out;
            }
            capacity_at = at;
            break;
        case 'W':
            if (parse_ulong(at, "alloc-wait", optarg, 0, 24UL * 3600 * 1000, &n) != 0)
                goto out;
            wo.store.alloc_wait_ms = (uint32_t)n;
            break;
        case 'J':
            if (parse_ulong(at, "spill-threads", optarg, 1, 64, &n) != 0)
                goto out;
            wo.store.spill_threads = (uint32_t)n;
            break;
        case 'D':
            spill_dir = optarg;
            spill_dir_at = at;
            break;
        case 'T':
        case 'G':
        case 'Z': {
            const char *name =
                c == 'T' ? "spill-threshold" : c == 'G' ? "spill-target" : "pause-threshold";
            double f = strtod(optarg, &end);
            if (*optarg == '\0' || *end != '\0' || !(f > 0 && f <= 1)) {
                spw_opt_error(at, name, "wants a fraction in (0, 1], got '%s'", optarg);
                goto out;
            }
            if (c == 'T') {
                wo.store.spill_threshold = f;
                threshold_at = at;
            } else if (c == 'G') {
                wo.store.spill_target = f;
                target_at = at;
            } else {
                wo.store.pause_threshold = f;
                pause_at = at;
            }
            break;
        }
        case 'z': {
            long lvl = strtol(optarg, &end, 10);
            if (*optarg == '\0' || *end != '\0' || lvl < -7 || lvl > 22) {
                spw_opt_error(at, "spill-compression-level", "wants -7..22, got '%s'", optarg);
                goto out;
            }
            wo.store.compression_level = (int)lvl;
            break;
        }
        case 'm':
        case 'M': {
            uint64_t v;
            if (spw_size_parse(optarg, &v) != 0) {
                spw_opt_error(at, c == 'm' ? "spill-map-size" : "spill-map-max",
                              "wants a size like 4G, got '%s'", optarg);
                goto out;
            }
            if (c == 'm')
                wo.store.spill_map_size = v;
            else
                wo.store.spill_map_max = v;
            break;
        }
        case 'K':
            if (strcmp(optarg, "0") == 0) {
                task_mem_set = true;
                wo.task_mem_limit = 0;
            } else if (spw_capacity_parse(optarg, &wo.task_mem_limit) != 0 ||
                       wo.task_mem_limit < (1u << 20)) {
                spw_opt_error(at, "task-memory-limit",
                              "wants a size (>= 1M), a percentage of memory or 0, got '%s'",
                              optarg);
                goto out;
            }
            task_mem_set = true;
            break;
        case 'E': {
            unsigned long long nt = strtoull(optarg, &end, 10);
            if (*optarg == '\0' || *end != '\0' || optarg[0] == '-') {
                spw_opt_error(at, "executor-max-tasks", "wants a count, got '%s'", optarg);
                goto out;
            }
            wo.exec_max_tasks = nt;
            break;
        }
        case 'r':
            if (spw_size_parse(optarg, &wo.exec_max_rss) != 0) {
                spw_opt_error(at, "executor-max-rss", "wants a size, got '%s'", optarg);
                goto out;
            }
            rss_set = true;
            break;
        case 'P':
            if (wo.nplugins == WRK_MAX_PLUGINS) {
                spw_opt_error(at, "plugin", "at most %d plugins", WRK_MAX_PLUGINS);
                goto out;
            }
            wo.plugins[wo.nplugins++] = optarg;
            break;
        case 'N':
            if (strlen(optarg) == 0 || strlen(optarg) > PROTO_MAX_NAME) {
                spw_opt_error(at, "name", "wants 1..%u characters, got %zu", PROTO_MAX_NAME,
                              strlen(optarg));
                goto out;
            }
            wo.name = optarg;
            break;
        case 's':
            secret_file = optarg;
            secret_at = at;
            break;
        case 'g': {
            struct group gr, *grp = NULL;
            char grbuf[16384];
            unsigned long gid = strtoul(optarg, &end, 10);
            if (*optarg != '\0' && *end == '\0' && gid < UINT32_MAX) {
                wo.local_group = (long)gid;
            } else if (getgrnam_r(optarg, &gr, grbuf, sizeof grbuf, &grp) == 0 && grp != NULL) {
                wo.local_group = (long)grp->gr_gid;
            } else {
                spw_opt_error(at, "local-group", "%s: no such group", optarg);
                goto out;
            }
            break;
        }
        case 'X':
            if (parse_ulong(at, "max-connections", optarg, 8, 1000000, &n) != 0)
                goto out;
            max_conns = (uint32_t)n;
            break;
        case 'C':
            break; /* read by spw_config_args */
        case 'L': {
            int lvl = spw_log_level_parse(optarg);
            if (lvl < 0) {
                spw_opt_error(at, "log-level", "unknown level '%s' (err|warn|notice|info|debug)",
                              optarg);
                goto out;
            }
            spw_log_level = lvl;
            break;
        }
        case 'V':
            printf("spillway-worker %s\n", SPW_VERSION);
            rc = 0;
            goto out;
        case 'h':
            usage(stdout);
            rc = 0;
            goto out;
        case ':':
            fprintf(stderr, "spillway-worker: %s needs a value\n", argv[at]);
            goto out;
        default:
            fprintf(stderr, "spillway-worker: unknown option '%s'\n", argv[at]);
            usage(stderr);
            goto out;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "spillway-worker: unexpected argument '%s'\n", argv[optind]);
        goto out;
    }
    /* Cross-checks. A store larger than the machine works until it fills: say so now. */
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    if (pages > 0 && page > 0 && wo.store.capacity > (uint64_t)pages * (uint64_t)page) {
        char cap[32], phys[32];
        spw_size_fmt(wo.store.capacity, cap, sizeof cap);
        spw_size_fmt((uint64_t)pages * (uint64_t)page, phys, sizeof phys);
        char msg[256];
        snprintf(msg, sizeof msg, "warning: more than this host's physical memory (%s): the "
                 "store will swap or be killed for memory once it fills", phys);
        spw_opt_path_error(capacity_at, "store-capacity", cap, msg);
    }
    /* Spilling starts above the threshold and stops under the target; the worker pauses above
     * pause-threshold. Out of order, spilling would never stop, or never start before the worker
     * stops taking tasks. Both at 1 is allowed: neither spilling nor pausing, ever. */
    bool both_off = wo.store.spill_threshold == 1.0 && wo.store.pause_threshold == 1.0;
    if (!(wo.store.spill_target < wo.store.spill_threshold &&
          (wo.store.spill_threshold < wo.store.pause_threshold || both_off))) {
        bool first = !(wo.store.spill_target < wo.store.spill_threshold);
        spw_opt_error(first ? (target_at >= 0 ? target_at : threshold_at)
                            : (threshold_at >= 0 ? threshold_at : pause_at),
                      first ? "spill-target" : "spill-threshold",
                      "want spill-target < spill-threshold < pause-threshold <= 1, got %g, %g, %g",
                      wo.store.spill_target, wo.store.spill_threshold, wo.store.pause_threshold);
        goto out;
    }
    if (!task_mem_set)
        wo.task_mem_limit = wrk_task_mem_default(wo.store.capacity, wo.slots);
    if (!rss_set)
        wo.exec_max_rss = wo.task_mem_limit / 2;
    uint64_t nofile = spw_raise_nofile();
    if (max_conns == 0)
        max_conns = proto_default_max_conns(nofile);
    else if (max_conns > nofile / 4 * 3)
        spw_log(SPW_LOG_WARN, "--max-connections %u is close to the descriptor limit %llu: "
                "expect EMFILE under load", max_conns, (unsigned long long)nofile);
    wo.max_conns = max_conns;
    /* Spilling is on unless asked otherwise: under systemd in the unit's state directory,
     * else in /var/tmp (on disk, unlike a tmpfs /tmp). Files are unlinked once open. */
    char spill_default[PATH_MAX];
    if (spill_dir == NULL) {
        const char *state = getenv("STATE_DIRECTORY");
        if (state != NULL && strchr(state, ':') == NULL)
            snprintf(spill_default, sizeof spill_default, "%s/spill", state);
        else
            snprintf(spill_default, sizeof spill_default, "/var/tmp");
        spill_dir = spill_default;
    }
    wo.store.spill_dir = strcmp(spill_dir, "none") == 0 ? NULL : spill_dir;
    if (wo.store.spill_dir != NULL && check_spill_dir(spill_dir_at, wo.store.spill_dir) != 0)
        goto out;
    uint8_t *secret = NULL;
    size_t secret_len = 0;
    if (secret_file != NULL) {
        int src = proto_secret_load(secret_file, &secret, &secret_len);
        if (src != 0) {
            spw_opt_path_error(secret_at, "secret-file", secret_file, proto_secret_strerror(src));
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
    uv_signal_init(&a.loop, &a.sigterm);
    uv_signal_init(&a.loop, &a.sigint);
    a.sigterm.data = a.sigint.data = &a;
    uv_signal_start(&a.sigterm, on_signal, SIGTERM);
    uv_signal_start(&a.sigint, on_signal, SIGINT);
    uv_run(&a.loop, UV_RUN_DEFAULT);
    if (uv_loop_close(&a.loop) != 0) {
        spw_log(SPW_LOG_ERR, "loop still had handles at exit");
        a.exit_status = 1;
    }
    rc = a.exit_status;
out:
    spw_config_free(argc, argv);
    return rc;
}
