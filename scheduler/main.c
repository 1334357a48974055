/*
 * spillway-scheduler: the cluster's scheduler daemon. A thin main over spw_sched: it applies
 * the options its table (main_opts.c) parsed, then handles signals, readiness and a clean
 * shutdown (every handle closed, the loop closed, zero leaked bytes) on SIGTERM or SIGINT.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "spillway/conn.h"
#include "spillway/daemon.h"
#include "spillway/options.h"
#include "spillway/sched.h"

#include "http.h"
#include "main_opts.h"

typedef struct app {
    uv_loop_t loop;
    sched *s;
    spw_http *http;
    int sigfd;         /* SIGTERM and SIGINT (spw_signalfd) */
    uv_poll_t sigpoll; /* on sigfd */
} app;

static void closed(uv_handle_t *h)
{
    (void)h;
}

static void sched_done(void *arg)
{
    app *a = arg;
    a->s = NULL;
    uv_close((uv_handle_t *)&a->sigpoll, closed);
}

static void on_signals(uv_poll_t *h, int status, int events)
{
    (void)status;
    (void)events;
    app *a = h->data;
    int sig;
    while (a->s != NULL && (sig = spw_signalfd_next(a->sigfd)) != 0) {
        spw_log(SPW_LOG_NOTICE, "signal %d: shutting down", sig);
        spw_sd_notify("STOPPING=1");
        sched_close(a->s, sched_done, a);
    }
}

/* The heartbeat interval of workers (wrk_opts.heartbeat_ms); a worker is declared dead only
 * after missing at least this many. */
#define WORKER_HEARTBEAT_MS 1000
#define MIN_HEARTBEATS 3

int main(int argc, char **argv)
{
    spw_opts po;
    int rc = spw_opts_parse(&sched_optset, argc, argv, &po);
    if (rc != 0)
        return rc > 0 ? 0 : 2;
    rc = 2;
    int sigfd = -1;
    const spw_opt_val *v = po.val;
    spw_log_init("spillway-scheduler", (int)v[SOPT_LOG_LEVEL].u + SPW_LOG_ERR);
    /* A peer that hangs up mid-write is an error on that connection, not a reason to die. */
    signal(SIGPIPE, SIG_IGN);
    sched_opts so;
    sched_opts_default(&so);
    so.listen = v[SOPT_LISTEN].str;
    so.max_frame = (uint32_t)v[SOPT_MAX_FRAME].u;
    so.inline_limit = v[SOPT_INLINE_LIMIT].u;
    so.chunk = (uint32_t)v[SOPT_CHUNK_SIZE].u;
    so.heartbeat_timeout_ms = (uint32_t)v[SOPT_HEARTBEAT_TIMEOUT].u;
    so.task_retries = (uint32_t)v[SOPT_TASK_RETRIES].u;
    so.place_wait_ms = (uint32_t)v[SOPT_PLACE_WAIT].u;
    so.session_grace_s = (uint32_t)v[SOPT_SESSION_GRACE].u;
    so.graph_max_tasks = v[SOPT_GRAPH_MAX_TASKS].u;
    so.graph_max_bytes = v[SOPT_GRAPH_MAX_BYTES].u;
    so.graph_max_total = v[SOPT_GRAPH_MAX_TOTAL].u;
    so.allow_plugin_upload = v[SOPT_ALLOW_PLUGIN_UPLOAD].u == 0;
    so.plugin_max_size = v[SOPT_PLUGIN_MAX_SIZE].u;
    /* The journal's directory: systemd's StateDirectory= (one of them) unless given. */
    const char *state_dir =
        v[SOPT_STATE_DIR].set ? v[SOPT_STATE_DIR].str : getenv("STATE_DIRECTORY");
    if (state_dir != NULL && (state_dir[0] == '\0' || strcmp(state_dir, "none") == 0 ||
                              (!v[SOPT_STATE_DIR].set && strchr(state_dir, ':') != NULL)))
        state_dir = NULL;
    so.state_dir = state_dir;
    const char *port_file = v[SOPT_PORT_FILE].set ? v[SOPT_PORT_FILE].str : NULL;
    const char *secret_file = v[SOPT_SECRET_FILE].set ? v[SOPT_SECRET_FILE].str : NULL;
    const char *http_listen = v[SOPT_HTTP].str;
    const char *http_port_file = v[SOPT_HTTP_PORT_FILE].set ? v[SOPT_HTTP_PORT_FILE].str : NULL;
    bool http_token_always = v[SOPT_HTTP_AUTH].u == SCHED_HTTP_AUTH_TOKEN;
    for (int i = 0; i < v[SOPT_HTTP_HOST].n; i++)
        if (!spw_http_hosts_valid(v[SOPT_HTTP_HOST].list[i])) {
            spw_opt_error(v[SOPT_HTTP_HOST].at, "http-host",
                          "wants host names or IP literals (IPv6 in [ ]), comma-separated, "
                          "without a port; got '%s'", v[SOPT_HTTP_HOST].list[i]);
            goto out;
        }

    if (so.heartbeat_timeout_ms < MIN_HEARTBEATS * WORKER_HEARTBEAT_MS) {
        spw_opt_error(v[SOPT_HEARTBEAT_TIMEOUT].at, "heartbeat-timeout",
                      "%u ms is less than %d heartbeats (workers send one every %d ms): one "
                      "late heartbeat would drop a live worker; use at least %d",
                      so.heartbeat_timeout_ms, MIN_HEARTBEATS, WORKER_HEARTBEAT_MS,
                      MIN_HEARTBEATS * WORKER_HEARTBEAT_MS);
        goto out;
    }
    so.encrypt = (int)v[SOPT_ENCRYPT].u;
    so.encrypt_local = v[SOPT_ENCRYPT_LOCAL].u != 0;
    if (spw_opt_tls_check(&v[SOPT_TLS_CERT], v[SOPT_ENCRYPT].u) != 0)
        goto out;
    so.tls_cert = v[SOPT_TLS_CERT].set ? v[SOPT_TLS_CERT].str : NULL;
    so.tls_key = v[SOPT_TLS_KEY].set ? v[SOPT_TLS_KEY].str : NULL;
    so.tls_ca = v[SOPT_TLS_CA].set ? v[SOPT_TLS_CA].str : NULL;
    if (so.encrypt != PROTO_ENCRYPT_NO && secret_file == NULL) {
        spw_opt_error(v[SOPT_ENCRYPT].at, "encrypt",
                      "%s needs --secret-file (the key is made from the cluster secret)",
                      v[SOPT_ENCRYPT].str);
        goto out;
    }
    if (http_token_always && secret_file == NULL) {
        spw_opt_error(v[SOPT_HTTP_AUTH].at, "http-auth",
                      "token needs --secret-file (the token is made from the cluster secret)");
        goto out;
    }
    /* Cross-checks: a chunk or an inline value must fit in a frame with room to spare (a task
     * message carries several inline arguments, an OBJ_WRITE a header besides its chunk). */
    if (so.chunk > so.max_frame / 2) {
        spw_opt_error(v[SOPT_CHUNK_SIZE].at, "chunk-size",
                      "%u bytes must be at most half of max-frame (%u)", so.chunk, so.max_frame);
        goto out;
    }
    if (so.inline_limit > so.max_frame / 16) {
        spw_opt_error(v[SOPT_INLINE_LIMIT].at, "inline-limit",
                      "%llu bytes must be at most a sixteenth of max-frame (%u): a task carries "
                      "several inline values",
                      (unsigned long long)so.inline_limit, so.max_frame);
        goto out;
    }
    uint64_t nofile = spw_raise_nofile();
    uint32_t max_conns = (uint32_t)v[SOPT_MAX_CONNECTIONS].u;
    if (!v[SOPT_MAX_CONNECTIONS].set)
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
            spw_opt_path_error(v[SOPT_SECRET_FILE].at, "secret-file", secret_file,
                               proto_secret_strerror(src));
            goto out;
        }
        so.secret = secret;
        so.secret_len = secret_len;
    }
    static const int sigs[] = {SIGTERM, SIGINT, 0};
    sigfd = spw_signalfd(sigs); /* before the endpoint or the scheduler starts a thread */
    if (sigfd < 0) {
        fprintf(stderr, "spillway-scheduler: cannot watch signals: %s\n", spw_strerror(sigfd));
        spw_free(secret);
        rc = 1;
        goto out;
    }
    app a;
    memset(&a, 0, sizeof a);
    a.sigfd = sigfd;
    uv_loop_init(&a.loop);
    char bound[64];
    rc = sched_new(&a.loop, &so, &a.s, bound, sizeof bound);
    if (rc == 0 && strcmp(http_listen, "none") != 0) {
        /* The endpoint reads the scheduler as a ctl client of its own port. */
        char self[80];
        if (strncmp(bound, "0.0.0.0:", 8) == 0)
            snprintf(self, sizeof self, "127.0.0.1:%s", bound + 8);
        else if (strncmp(bound, "[::]:", 5) == 0)
            snprintf(self, sizeof self, "[::1]:%s", bound + 5);
        else
            snprintf(self, sizeof self, "%s", bound);
        spw_http_opts ho = {http_listen,
                            self,
                            secret_file,
                            secret,
                            secret_len,
                            so.encrypt,
                            so.encrypt_local,
                            so.tls_cert,
                            so.tls_key,
                            so.tls_ca,
                            (uint32_t)v[SOPT_HTTP_SAMPLE].u,
                            (uint32_t)v[SOPT_HTTP_HISTORY].u,
                            http_token_always,
                            v[SOPT_HTTP_HOST].list,
                            (size_t)v[SOPT_HTTP_HOST].n};
        char hbound[80];
        int hrc = spw_http_start(&ho, &a.http, hbound, sizeof hbound);
        if (hrc == 0) {
            spw_log(SPW_LOG_NOTICE, "http endpoint on http://%s/", hbound);
            if (http_port_file != NULL &&
                spw_file_write_atomic(http_port_file, hbound, strlen(hbound)) != 0) {
                fprintf(stderr, "spillway-scheduler: cannot write %s\n", http_port_file);
                rc = SPW_EIO;
            }
        } else if (!v[SOPT_HTTP].set) {
            /* The default address is a convenience: another scheduler on this host may hold it. */
            spw_log(SPW_LOG_WARN, "http endpoint off: cannot listen on %s: %s (use --http)",
                    http_listen, spw_strerror(hrc));
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
        if (so.state_dir != NULL) /* the log line before this one says which */
            fprintf(stderr,
                    "spillway-scheduler: cannot open the journal in %s or listen on %s: %s\n",
                    so.state_dir, so.listen, spw_strerror(rc));
        else
            fprintf(stderr, "spillway-scheduler: cannot listen on %s: %s\n", so.listen,
                    spw_strerror(rc));
        uv_run(&a.loop, UV_RUN_DEFAULT);
        uv_loop_close(&a.loop);
        rc = 1;
        goto out;
    }
    uv_poll_init(&a.loop, &a.sigpoll, sigfd);
    a.sigpoll.data = &a;
    uv_poll_start(&a.sigpoll, UV_READABLE, on_signals);
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
    if (sigfd >= 0)
        close(sigfd);
    spw_opts_free(&po);
    return rc;
}
