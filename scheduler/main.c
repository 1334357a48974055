/*
 * spillway-scheduler: the cluster's scheduler daemon. A thin main over spw_sched: options,
 * signals, readiness, and a clean shutdown (every handle closed, the loop closed, zero leaked
 * bytes) on SIGTERM or SIGINT.
 */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "spillway/conn.h"
#include "spillway/daemon.h"
#include "spillway/sched.h"

#include "http.h"

#define HTTP_DEFAULT "127.0.0.1:7480"
/* --chunk-size bounds, as documented in the man page. Below a page, per-chunk framing and
 * round trips dominate a transfer; the cross-checks below also keep a chunk under half of
 * --max-frame. */
#define SCHED_MIN_CHUNK 4096u
#define SCHED_MAX_CHUNK (256u << 20)

static void usage(FILE *f)
{
    fputs("usage: spillway-scheduler [options]\n"
          "  --listen HOST:PORT        address to listen on (127.0.0.1:7400; port 0 = any)\n"
          "  --port-file PATH          write the bound host:port there once listening\n"
          "  --secret-file PATH        cluster secret (mode 0600 or 0640); peers must prove it\n"

          "  --max-connections N       accepted connections at once (3/4 of the descriptor\n"
          "                            limit, at most 8192); some kept for workers and ctl\n"
          "  --config PATH             file of key = value lines, one per option\n"
          "  --log-level LEVEL         err|warn|notice|info|debug (notice)\n"
          "  --max-frame BYTES         largest frame accepted (64M)\n"
          "  --inline-limit BYTES      values up to this size travel in messages (64K)\n"
          "  --chunk-size BYTES        object chunk size announced to peers (4M)\n"
          "  --heartbeat-timeout MS    drop a worker silent this long (15000)\n"
          "  --task-retries N          retries of a task whose worker died (3)\n"
          "  --place-wait MS           a task bound to a worker name no connected worker has\n"
          "                            fails after this long (60000; 0 = waits forever)\n"
          "  --graph-max-tasks N       default cap on a graph's tasks in flight (0 = none)\n"
          "  --graph-max-bytes BYTES   default cap on a graph's outputs in flight and not yet\n"
          "                            consumed (0 = a quarter of the workers' stores)\n"
          "  --http HOST:PORT|none     HTTP endpoint: /metrics, /api/*, the dashboard at /\n"
          "                            (127.0.0.1:7480; port 0 = any; none = off)\n"
          "  --http-port-file PATH     write the HTTP endpoint's bound host:port there\n"
          "  --http-auth auto|token    auto: a token (spillway-ctl http-token) is wanted when\n"
          "                            the endpoint is not on loopback and there is a secret;\n"
          "                            token: always (needs --secret-file) (auto)\n"
          "  --http-sample MS          dashboard history interval (1000)\n"
          "  --http-history N          dashboard history samples kept (600)\n"
          "  --graph-max-total N       tasks one submitted graph may have (2000000; 0 = none)\n"
          "  --version, --help\n",
          f);
}

typedef struct app {
    uv_loop_t loop;
    sched *s;
    spw_http *http;
    uv_signal_t sigterm, sigint;
} app;

static void closed(uv_handle_t *h)
{
    (void)h;
}

static void sched_done(void *arg)
{
    app *a = arg;
    a->s = NULL;
    uv_close((uv_handle_t *)&a->sigterm, closed);
    uv_close((uv_handle_t *)&a->sigint, closed);
}

static void on_signal(uv_signal_t *h, int sig)
{
    app *a = h->data;
    spw_log(SPW_LOG_NOTICE, "signal %d: shutting down", sig);
    spw_sd_notify("STOPPING=1");
    if (a->s != NULL)
        sched_close(a->s, sched_done, a);
}

static const struct option longopts[] = {
    {"listen", required_argument, 0, 'l'},
    {"port-file", required_argument, 0, 'p'},
    {"secret-file", required_argument, 0, 's'},
    {"max-connections", required_argument, 0, 'X'},
    {"config", required_argument, 0, 'c'},
    {"log-level", required_argument, 0, 'L'},
    {"max-frame", required_argument, 0, 'F'},
    {"inline-limit", required_argument, 0, 'I'},
    {"chunk-size", required_argument, 0, 'C'},
    {"heartbeat-timeout", required_argument, 0, 'H'},
    {"task-retries", required_argument, 0, 'R'},
    {"place-wait", required_argument, 0, 'P'},
    {"graph-max-tasks", required_argument, 0, 'g'},
    {"graph-max-bytes", required_argument, 0, 'b'},
    {"http", required_argument, 0, 'T'},
    {"http-port-file", required_argument, 0, 'Q'},
    {"http-auth", required_argument, 0, 'A'},
    {"http-sample", required_argument, 0, 'M'},
    {"http-history", required_argument, 0, 'N'},
    {"graph-max-total", required_argument, 0, 'G'},
    {"version", no_argument, 0, 'V'},
    {"help", no_argument, 0, 'h'},
    {0, 0, 0, 0},
};

/* The heartbeat interval of workers (wrk_opts.heartbeat_ms); a worker is declared dead only
 * after missing at least this many. */
#define WORKER_HEARTBEAT_MS 1000
#define MIN_HEARTBEATS 3

/* Option value parsers: on a bad value they report it (FILE:LINE for a config line) and
 * return -1. at is the argument's index, for spw_opt_error. */
static int parse_u32(int at, const char *name, const char *v, uint32_t *out)
{
    char *end;
    errno = 0;
    unsigned long x = strtoul(v, &end, 10);
    if (*v == '\0' || *end != '\0' || x > UINT32_MAX || errno != 0 || *v == '-') {
        spw_opt_error(at, name, "wants a whole number, got '%s'", v);
        return -1;
    }
    *out = (uint32_t)x;
    return 0;
}

static int parse_bytes(int at, const char *name, const char *v, uint64_t *out)
{
    if (spw_size_parse(v, out) != 0) {
        spw_opt_error(at, name, "wants a size like 64K or 8M, got '%s'", v);
        return -1;
    }
    return 0;
}

int main(int argc0, char **argv0)
{
    int argc;
    char **argv;
    if (spw_config_args(argc0, argv0, longopts, &argc, &argv) != 0)
        return 2;
    spw_log_init("spillway-scheduler", SPW_LOG_NOTICE);
    /* A peer that hangs up mid-write is an error on that connection, not a reason to die. */
    signal(SIGPIPE, SIG_IGN);
    sched_opts so;
    sched_opts_default(&so);
    const char *port_file = NULL, *secret_file = NULL;
    const char *http_listen = NULL, *http_port_file = NULL;
    uint32_t http_sample_ms = 1000, http_history = 600;
    int http_token_always = 0;
    int rc = 2, c;
    uint64_t v;
    uint32_t max_conns = 0;
    int secret_at = -1, chunk_at = -1, inline_at = -1;
    opterr = 0; /* our messages name the config line */
    for (int at = optind; (c = getopt_long(argc, argv, ":h", longopts, NULL)) != -1; at = optind) {
        switch (c) {
        case 'l':
            if (spw_opt_addr(at, "listen", optarg, false) != 0)
                goto out;
            so.listen = optarg;
            break;
        case 'p':
            port_file = optarg;
            break;
        case 's':
            secret_file = optarg;
            secret_at = at;
            break;
        case 'c':
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
        case 'F':
            if (parse_bytes(at, "max-frame", optarg, &v) != 0)
                goto out;
            if (v < 65536 || v > (1u << 30)) {
                spw_opt_error(at, "max-frame", "must be 64K..1G, got '%s'", optarg);
                goto out;
            }
            so.max_frame = (uint32_t)v;
            break;
        case 'I':
            if (parse_bytes(at, "inline-limit", optarg, &so.inline_limit) != 0)
                goto out;
            inline_at = at;
            break;
        case 'C':
            if (parse_bytes(at, "chunk-size", optarg, &v) != 0)
                goto out;
            if (v < SCHED_MIN_CHUNK || v > SCHED_MAX_CHUNK) {
                spw_opt_error(at, "chunk-size", "must be 4K..256M, got '%s'", optarg);
                goto out;
            }
            so.chunk = (uint32_t)v;
            chunk_at = at;
            break;
        case 'H':
            if (parse_u32(at, "heartbeat-timeout", optarg, &so.heartbeat_timeout_ms) != 0)
                goto out;
            if (so.heartbeat_timeout_ms < MIN_HEARTBEATS * WORKER_HEARTBEAT_MS) {
                spw_opt_error(at, "heartbeat-timeout",
                              "%u ms is less than %d heartbeats (workers send one every %d ms): "
                              "one late heartbeat would drop a live worker; use at least %d",
                              so.heartbeat_timeout_ms, MIN_HEARTBEATS, WORKER_HEARTBEAT_MS,
                              MIN_HEARTBEATS * WORKER_HEARTBEAT_MS);
                goto out;
            }
            break;
        case 'R':
            if (parse_u32(at, "task-retries", optarg, &so.task_retries) != 0)
                goto out;
            break;
        case 'P':
            if (parse_u32(at, "place-wait", optarg, &so.place_wait_ms) != 0)
                goto out;
            break;
        case 'g':
            if (parse_bytes(at, "graph-max-tasks", optarg, &so.graph_max_tasks) != 0)
                goto out;
            break;
        case 'b':
            if (parse_bytes(at, "graph-max-bytes", optarg, &so.graph_max_bytes) != 0)
                goto out;
            break;
        case 'T':
            if (strcmp(optarg, "none") != 0 && spw_opt_addr(at, "http", optarg, false) != 0)
                goto out;
            http_listen = optarg;
            break;
        case 'Q':
            http_port_file = optarg;
            break;
        case 'A':
            if (strcmp(optarg, "auto") != 0 && strcmp(optarg, "token") != 0) {
                spw_opt_error(at, "http-auth", "wants auto or token, got '%s'", optarg);
                goto out;
            }
            http_token_always = strcmp(optarg, "token") == 0;
            break;
        case 'M':
            if (parse_u32(at, "http-sample", optarg, &http_sample_ms) != 0)
                goto out;
            if (http_sample_ms < 50 || http_sample_ms > 3600000) {
                spw_opt_error(at, "http-sample", "must be 50..3600000 ms, got '%s'", optarg);
                goto out;
            }
            break;
        case 'N':
            if (parse_u32(at, "http-history", optarg, &http_history) != 0)
                goto out;
            if (http_history < 2 || http_history > 100000) {
                spw_opt_error(at, "http-history", "must be 2..100000, got '%s'", optarg);
                goto out;
            }
            break;
        case 'G':
            if (parse_bytes(at, "graph-max-total", optarg, &so.graph_max_total) != 0)
                goto out;
            break;
        case 'X': {
            uint32_t n;
            if (parse_u32(at, "max-connections", optarg, &n) != 0)
                goto out;
            if (n < 8 || n > 1000000) {
                spw_opt_error(at, "max-connections", "must be 8..1000000, got '%s'", optarg);
                goto out;
            }
            max_conns = n;
            break;
        }
        case 'V':
            printf("spillway-scheduler %s\n", SPW_VERSION);
            rc = 0;
            goto out;
        case 'h':
            usage(stdout);
            rc = 0;
            goto out;
        case ':':
            fprintf(stderr, "spillway-scheduler: %s needs a value\n", argv[at]);
            goto out;
        default:
            fprintf(stderr, "spillway-scheduler: unknown option '%s'\n", argv[at]);
            usage(stderr);
            goto out;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "spillway-scheduler: unexpected argument '%s'\n", argv[optind]);
        goto out;
    }
    if (http_token_always && secret_file == NULL) {
        fprintf(stderr, "spillway-scheduler: --http-auth token needs --secret-file\n");
        goto out;
    }

    /* Cross-checks: a chunk or an inline value must fit in a frame with room to spare (a task
     * message carries several inline arguments, an OBJ_WRITE a header besides its chunk). */
    if (so.chunk > so.max_frame / 2) {
        spw_opt_error(chunk_at, "chunk-size", "%u bytes must be at most half of max-frame (%u)",
                      so.chunk, so.max_frame);
        goto out;
    }
    if (so.inline_limit > so.max_frame / 16) {
        spw_opt_error(inline_at, "inline-limit",
                      "%llu bytes must be at most a sixteenth of max-frame (%u): a task carries "
                      "several inline values",
                      (unsigned long long)so.inline_limit, so.max_frame);
        goto out;
    }
    uint64_t nofile = spw_raise_nofile();
    if (max_conns == 0)
        max_conns = proto_default_max_conns(nofile);
    else if (max_conns > nofile / 4 * 3)
        spw_log(SPW_LOG_WARN, "--max-connections %u is close to the descriptor limit %llu: "
                "expect EMFILE under load", max_conns, (unsigned long long)nofile);
    so.max_conns = max_conns;
    uint8_t *secret = NULL;
    size_t secret_len = 0;
    if (secret_file != NULL) {
        int src = proto_secret_load(secret_file, &secret, &secret_len);
        if (src != 0) {
            spw_opt_path_error(secret_at, "secret-file", secret_file, proto_secret_strerror(src));
            goto out;
        }
        so.secret = secret;
        so.secret_len = secret_len;
    }
    app a;
    memset(&a, 0, sizeof a);
    uv_loop_init(&a.loop);
    char bound[64];
    rc = sched_new(&a.loop, &so, &a.s, bound, sizeof bound);
    if (rc == 0 && (http_listen == NULL || strcmp(http_listen, "none") != 0)) {
        /* The endpoint reads the scheduler as a ctl client of its own port. */
        char self[80];
        if (strncmp(bound, "0.0.0.0:", 8) == 0)
            snprintf(self, sizeof self, "127.0.0.1:%s", bound + 8);
        else if (strncmp(bound, "[::]:", 5) == 0)
            snprintf(self, sizeof self, "[::1]:%s", bound + 5);
        else
            snprintf(self, sizeof self, "%s", bound);
        spw_http_opts ho = {http_listen != NULL ? http_listen : HTTP_DEFAULT, self, secret_file,
                            secret, secret_len, http_sample_ms, http_history, http_token_always};
        char hbound[80];
        int hrc = spw_http_start(&ho, &a.http, hbound, sizeof hbound);
        if (hrc == 0) {
            spw_log(SPW_LOG_NOTICE, "http endpoint on http://%s/", hbound);
            if (http_port_file != NULL &&
                spw_file_write_atomic(http_port_file, hbound, strlen(hbound)) != 0) {
                fprintf(stderr, "spillway-scheduler: cannot write %s\n", http_port_file);
                rc = SPW_EIO;
            }
        } else if (http_listen == NULL) {
            /* The default address is a convenience: another scheduler on this host may hold it. */
            spw_log(SPW_LOG_WARN, "http endpoint off: cannot listen on %s: %s (use --http)",
                    HTTP_DEFAULT, spw_strerror(hrc));
        } else {
            fprintf(stderr, "spillway-scheduler: --http %s: %s\n", http_listen, spw_strerror(hrc));
            rc = hrc;
        }
        if (rc != 0) {
            spw_free(secret);
            sched_close(a.s, NULL, NULL);
            uv_run(&a.loop, UV_RUN_DEFAULT);
            uv_loop_close(&a.loop);
            spw_http_stop(a.http);
            rc = 1;
            goto out;
        }
    }
    spw_free(secret);
    if (rc != 0) {
        fprintf(stderr, "spillway-scheduler: cannot listen on %s: %s\n", so.listen,
                spw_strerror(rc));
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
    spw_log(SPW_LOG_NOTICE, "listening on %s", bound);
    char status[128];
    snprintf(status, sizeof status, "listening on %s", bound);
    bool failed = spw_daemon_ready(bound, port_file, status) != 0; /* it says why */
    if (failed)
        sched_close(a.s, sched_done, &a);
    uv_run(&a.loop, UV_RUN_DEFAULT);
    spw_http_stop(a.http); /* after the loop: a request under way fails at once */
    rc = uv_loop_close(&a.loop) == 0 && !failed ? 0 : 1;
    if (rc != 0)
        spw_log(SPW_LOG_ERR, "loop still had handles at exit");
out:
    spw_config_free(argc, argv);
    return rc;
}
