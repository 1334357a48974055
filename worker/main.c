/*
 * spillway-worker: a node's worker daemon (and, with --executor, one of its executor
 * processes). A thin main over spw_worker: options, signals, readiness once the scheduler has
 * welcomed us, and a clean shutdown on SIGTERM or SIGINT. A lost scheduler is reconnected to
 * (--reconnect-max); with --reconnect-max 0, or when the scheduler refuses us, the worker exits
 * with status 3 (systemd's Restart= brings it back).
 */
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "spillway/conn.h"
#include "spillway/daemon.h"
#include "spillway/worker.h"

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
          "  --plugin PATH.so          load task functions from a plugin (repeatable)\n"
          "  --name NAME               name shown by spillway-ctl (spillway-worker)\n"
          "  --secret-file PATH        cluster secret (mode 0600 or 0640)\n"
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

int main(int argc0, char **argv0)
{
    if (argc0 > 1 && strcmp(argv0[1], "--executor") == 0)
        return wrk_executor_main(argc0, argv0);
    int argc;
    char **argv;
    if (spw_config_args(argc0, argv0, &argc, &argv) != 0)
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
        {"plugin", required_argument, 0, 'P'},
        {"name", required_argument, 0, 'N'},
        {"secret-file", required_argument, 0, 's'},
        {"config", required_argument, 0, 'C'},
        {"log-level", required_argument, 0, 'L'},
        {"version", no_argument, 0, 'V'},
        {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0},
    };
    int rc = 2, c;
    char *end;
    while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        switch (c) {
        case 'S':
            wo.scheduler = optarg;
            break;
        case 'l':
            wo.listen = optarg;
            break;
        case 'A':
            wo.advertise = optarg;
            break;
        case 'R': {
            unsigned long n = strtoul(optarg, &end, 10);
            if (*optarg == '\0' || *end != '\0' || n > 24UL * 3600 * 1000) {
                fprintf(stderr, "spillway-worker: --reconnect-max wants milliseconds "
                                "(0 = exit instead), got '%s'\n",
                        optarg);
                goto out;
            }
            wo.reconnect_max_ms = (uint32_t)n;
            break;
        }
        case 'F': {
            unsigned long n = strtoul(optarg, &end, 10);
            if (*optarg == '\0' || *end != '\0' || n > 24UL * 3600 * 1000) {
                fprintf(stderr, "spillway-worker: --fetch-stall wants milliseconds (0 = never), "
                                "got '%s'\n",
                        optarg);
                goto out;
            }
            wo.fetch_stall_ms = (uint32_t)n;
            break;
        }
        case 'p':
            a.port_file = optarg;
            break;
        case 'n': {
            unsigned long n = strtoul(optarg, &end, 10);
            if (*optarg == '\0' || *end != '\0' || n == 0 || n > 4096) {
                fprintf(stderr, "spillway-worker: --slots must be 1..4096\n");
                goto out;
            }
            wo.slots = (uint32_t)n;
            break;
        }
        case 'c':
            if (spw_capacity_parse(optarg, &wo.store.capacity) != 0 ||
                wo.store.capacity < (1u << 20)) {
                fprintf(stderr, "spillway-worker: --store-capacity wants a size (>= 1M) or a "
                                "percentage of memory, got '%s'\n",
                        optarg);
                goto out;
            }
            break;
        case 'W': {
            unsigned long n = strtoul(optarg, &end, 10);
            if (*optarg == '\0' || *end != '\0' || n > 24UL * 3600 * 1000) {
                fprintf(stderr, "spillway-worker: --alloc-wait wants milliseconds\n");
                goto out;
            }
            wo.store.alloc_wait_ms = (uint32_t)n;
            break;
        }
        case 'D':
            spill_dir = optarg;
            break;
        case 'T':
        case 'G':
        case 'Z': {
            double f = strtod(optarg, &end);
            if (*optarg == '\0' || *end != '\0' || f <= 0 || f > 1) {
                fprintf(stderr, "spillway-worker: --%s wants a fraction in (0, 1], got '%s'\n",
                        c == 'T' ? "spill-threshold" : c == 'G' ? "spill-target" : "pause-threshold",
                        optarg);
                goto out;
            }
            if (c == 'T')
                wo.store.spill_threshold = f;
            else if (c == 'G')
                wo.store.spill_target = f;
            else
                wo.store.pause_threshold = f;
            break;
        }
        case 'z': {
            long lvl = strtol(optarg, &end, 10);
            if (*optarg == '\0' || *end != '\0' || lvl < -7 || lvl > 22) {
                fprintf(stderr, "spillway-worker: --spill-compression-level wants -7..22\n");
                goto out;
            }
            wo.store.compression_level = (int)lvl;
            break;
        }
        case 'm':
        case 'M': {
            uint64_t v;
            if (spw_size_parse(optarg, &v) != 0) {
                fprintf(stderr, "spillway-worker: --%s wants a size, got '%s'\n",
                        c == 'm' ? "spill-map-size" : "spill-map-max", optarg);
                goto out;
            }
            if (c == 'm')
                wo.store.spill_map_size = v;
            else
                wo.store.spill_map_max = v;
            break;
        }
        case 'P':
            if (wo.nplugins == WRK_MAX_PLUGINS) {
                fprintf(stderr, "spillway-worker: at most %d plugins\n", WRK_MAX_PLUGINS);
                goto out;
            }
            wo.plugins[wo.nplugins++] = optarg;
            break;
        case 'N':
            wo.name = optarg;
            break;
        case 's':
            secret_file = optarg;
            break;
        case 'C':
            break; /* read by spw_config_args */
        case 'L': {
            int lvl = spw_log_level_parse(optarg);
            if (lvl < 0) {
                fprintf(stderr, "spillway-worker: unknown log level '%s'\n", optarg);
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
        default:
            usage(stderr);
            goto out;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "spillway-worker: unexpected argument '%s'\n", argv[optind]);
        goto out;
    }
    if (!(wo.store.spill_target <= wo.store.spill_threshold &&
          wo.store.spill_threshold <= wo.store.pause_threshold)) {
        fprintf(stderr, "spillway-worker: want spill-target <= spill-threshold <= "
                        "pause-threshold\n");
        goto out;
    }
    /* Spilling is on unless asked otherwise: under systemd in the unit's state directory,
     * else in /var/tmp (on disk, unlike a tmpfs /tmp). Files are unlinked once open. */
    char spill_default[4096];
    if (spill_dir == NULL) {
        const char *state = getenv("STATE_DIRECTORY");
        if (state != NULL && strchr(state, ':') == NULL)
            snprintf(spill_default, sizeof spill_default, "%s/spill", state);
        else
            snprintf(spill_default, sizeof spill_default, "/var/tmp");
        spill_dir = spill_default;
    }
    wo.store.spill_dir = strcmp(spill_dir, "none") == 0 ? NULL : spill_dir;
    uint8_t *secret = NULL;
    size_t secret_len = 0;
    if (secret_file != NULL) {
        int src = proto_secret_load(secret_file, &secret, &secret_len);
        if (src != 0) {
            fprintf(stderr, "spillway-worker: secret file %s: %s%s\n", secret_file,
                    spw_strerror(src),
                    src == SPW_EACCES ? " (mode 0600 or 0640: no access for others, no "
                                        "writing for its group)"
                                      : "");
            goto out;
        }
        wo.secret = secret;
        wo.secret_len = secret_len;
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
