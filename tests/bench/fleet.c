/*
 * spillway-fleet: a simulated fleet of workers against a real spillway-scheduler, to measure the
 * scheduler's control plane at cluster scale. A test tool, not a daemon.
 *   spillway-fleet [--sim-workers N[,N...]] [--case NAME[,NAME...]] [--tasks N] [--idle-s S]
 *                  [--screenshot-dir DIR] [--smoke]
 * For each N it starts a scheduler (with its HTTP endpoint) and, on one libuv loop, N workers that
 * each do a worker's real handshake and registration under their own address and name, send
 * heartbeats on a worker's schedule, finish every task at once, answer memory queries as an empty
 * store and REPLICATE with OBJ_ADDED. Cases print one JSON line each, as spillway-bench does;
 * --smoke checks functional facts (all registered, tasks done, documents parse) and exits 1 when
 * one fails.
 */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>

#include <jansson.h>

#include "harness.h"
#include "spillway/conn.h"
#include "spillway/spillway.h"

/* The broadcast model: a hop passes on what it has received in pieces of this size (the
 * worker's FOLLOW_CHUNK), each after a per-hop delay, on links of this rate. */
#define MODEL_PIECE (256.0 * 1024)
#define MODEL_RATE 1.25e9  /* bytes/s: a 10 Gbit/s link */
#define MODEL_HOP_S 50e-6  /* seconds per hop: network and the worker's loop */
#define BLOB_FN "fleet_blob"
#define FLEET_MAX_STRIPES 8
#define SIM_CAPACITY (1ULL << 30)

/* ------------------------------------------------------------ the fleet */

typedef struct fleet fleet;

typedef struct simw {
    fleet *f;
    uint32_t idx;
    proto_ctx *ctx;
    proto_conn *conn;
    proto_hello_worker hello;
    char addr[40], name[32], host_id[32];
    uv_timer_t hb;
    bool hb_init;
    uint64_t sched_id; /* the scheduler's worker id (WELCOME's session) */
    uint64_t tasks_done;
    /* Its last REPLICATE: per byte range (one unless striped), the scheduler id of the range's
     * first source (0: none) and the range's length. */
    uint32_t parent[FLEET_MAX_STRIPES];
    uint64_t slen[FLEET_MAX_STRIPES];
    uint32_t nstripes;
    uint32_t nsrc; /* sources that REPLICATE named (0: none came) */
} simw;

enum { CMD_NONE, CMD_CONNECT, CMD_STOP };

struct fleet {
    uv_loop_t loop;
    uv_async_t wake;
    pthread_t th;
    pthread_mutex_t mu;
    char sched_addr[64];
    uint32_t n;
    simw *w;
    int cmd; /* under mu */
    /* Figures, under mu. */
    uint32_t nready, nrefused, nlost;
    uint64_t t_connect_ns, t_last_ready_ns;
    uint64_t tasks_done, replicates, olists, errors;
    uint64_t run_frames; /* TASK_RUN and TASK_RUNS messages received */
};

static double now_s(void)
{
    return (double)spw_now_ns() / 1e9;
}

static void sim_stats(const simw *w, uint64_t v[PROTO_STAT_COUNT])
{
    memset(v, 0, sizeof(uint64_t) * PROTO_STAT_COUNT);
    v[PROTO_STAT_CAPACITY] = SIM_CAPACITY;
    v[PROTO_STAT_TASKS_DONE] = w->tasks_done;
    v[PROTO_STAT_RSS_KIB] = 4096;
    v[PROTO_STAT_SPILL_AT] = SIM_CAPACITY / 10 * 8;
    v[PROTO_STAT_PAUSE_AT] = SIM_CAPACITY / 10 * 9;
}

static void hb_cb(uv_timer_t *t)
{
    simw *w = t->data;
    if (w->conn == NULL)
        return;
    uint64_t v[PROTO_STAT_COUNT];
    sim_stats(w, v);
    proto_send_heartbeat(w->conn, 0, &(proto_heartbeat_msg){.stats = {v, PROTO_STAT_COUNT}});
}

static void sim_ready(proto_conn *c, const proto_welcome *wel)
{
    simw *w = proto_ctx_data(proto_conn_ctx(c));
    w->sched_id = wel->session;
    pthread_mutex_lock(&w->f->mu);
    w->f->nready++;
    w->f->t_last_ready_ns = spw_now_ns();
    pthread_mutex_unlock(&w->f->mu);
    hb_cb(&w->hb); /* a worker reports at once, then every second */
    uv_timer_start(&w->hb, hb_cb, 1000, 1000);
}

/* One task: done at once; a fleet_blob task's output is as large as its argument says. */
static void sim_task(simw *w, const proto_val *f)
{
    if (f[F_RUN_ID].bad || f[F_RUN_ID].nil)
        return;
    char fn[64];
    proto_str(&f[F_RUN_FN], fn, sizeof fn);
    uint64_t size = 0;
    if (strcmp(fn, BLOB_FN) == 0 && f[F_RUN_ARGS].arr.n == 1) {
        const proto_val *a = PROTO_REC(&f[F_RUN_ARGS], 0);
        if (!a[R_WARG_INLINE].nil && a[R_WARG_INLINE].bin.len == sizeof size)
            memcpy(&size, a[R_WARG_INLINE].bin.ptr, sizeof size);
    }
    w->tasks_done++;
    proto_batch_done(w->conn, PROTO_TASK_DONES,
                     &(proto_done_rec){.id = f[F_RUN_ID].id,
                                       .size = size,
                                       .value = {size > 0 ? NULL : "", 0},
                                       .err = "",
                                       .run_us = 1,
                                       .omit_outs = true});
}

static void sim_msg(proto_conn *c, const proto_msg *m)
{
    simw *w = proto_ctx_data(proto_conn_ctx(c));
    fleet *f = w->f;
    uint64_t done0 = w->tasks_done;
    switch (m->type) {
    case PROTO_TASK_RUN:
        sim_task(w, m->f);
        break;
    case PROTO_TASK_RUNS:
        for (uint32_t i = 0; i < m->f[F_RUNS_RECS].arr.n; i++)
            sim_task(w, PROTO_REC(&m->f[F_RUNS_RECS], i));
        break;
    case PROTO_REPLICATE: {
        const proto_val *locs = &m->f[F_REPL_LOCS], *st = &m->f[F_REPL_STRIPES];
        pthread_mutex_lock(&f->mu);
        w->parent[0] = locs->arr.n > 0 ? (uint32_t)PROTO_REC(locs, 0)[R_LOC_WORKER].u : 0;
        w->slen[0] = m->f[F_REPL_SIZE].u;
        w->nstripes = 1;
        w->nsrc = locs->arr.n;
        if (!st->nil && st->arr.n > 0 && st->arr.n <= FLEET_MAX_STRIPES) {
            w->nstripes = st->arr.n;
            for (uint32_t k = 0; k < st->arr.n; k++) {
                const proto_val *r = PROTO_REC(st, k), *sl = &r[R_STRIPE_LOCS];
                w->parent[k] = sl->arr.n > 0 ? (uint32_t)PROTO_REC(sl, 0)[R_LOC_WORKER].u : 0;
                w->slen[k] = r[R_STRIPE_LEN].u;
            }
        }
        f->replicates++;
        pthread_mutex_unlock(&f->mu);
        proto_send_obj_added(c, m->req, &(proto_obj_added_msg){.id = m->f[F_REPL_ID].id,
                                                               .size = m->f[F_REPL_SIZE].u});
        break;
    }
    case PROTO_OBJ_LIST_REQ: {
        uint64_t v[PROTO_STAT_COUNT];
        sim_stats(w, v);
        proto_send_obj_list(c, m->req,
                            &(proto_obj_list_msg){.stats = {v, PROTO_STAT_COUNT}, .more = 0});
        pthread_mutex_lock(&f->mu);
        f->olists++;
        pthread_mutex_unlock(&f->mu);
        break;
    }
    case PROTO_OBJ_DELETE:
    case PROTO_TASK_CANCEL:
        break; /* nothing is stored, nothing waits */
    default:
        pthread_mutex_lock(&f->mu);
        f->errors++;
        pthread_mutex_unlock(&f->mu);
        break;
    }
    if (w->tasks_done != done0) {
        pthread_mutex_lock(&f->mu);
        f->tasks_done += w->tasks_done - done0;
        f->run_frames++;
        pthread_mutex_unlock(&f->mu);
    }
}

static void sim_close(proto_conn *c, int status)
{
    (void)status;
    simw *w = proto_ctx_data(proto_conn_ctx(c));
    pthread_mutex_lock(&w->f->mu);
    if (w->sched_id == 0)
        w->f->nrefused++;
    else
        w->f->nlost++;
    pthread_mutex_unlock(&w->f->mu);
    w->conn = NULL;
    if (w->hb_init)
        uv_timer_stop(&w->hb);
}

static const proto_conn_cbs sim_cbs = {
    .on_ready = sim_ready, .on_msg = sim_msg, .on_close = sim_close};

static void sim_connect_all(fleet *f)
{
    pthread_mutex_lock(&f->mu);
    f->t_connect_ns = spw_now_ns();
    pthread_mutex_unlock(&f->mu);
    for (uint32_t i = 0; i < f->n; i++) {
        simw *w = &f->w[i];
        w->f = f;
        w->idx = i;
        /* Distinct advertised addresses in 127.0.0.0/8; nothing ever connects to them. */
        snprintf(w->addr, sizeof w->addr, "127.%u.%u.%u:7401", 1 + i / 65536, (i / 256) % 256,
                 i % 256);
        snprintf(w->name, sizeof w->name, "sim-%04u", i);
        snprintf(w->host_id, sizeof w->host_id, "fleet-host-%u", i);
        w->hello = (proto_hello_worker){.addr = w->addr,
                                        .slots = 1,
                                        .capacity = SIM_CAPACITY,
                                        .host_id = w->host_id,
                                        .local = ""};
        proto_ctx_opts po;
        proto_ctx_opts_default(&po);
        po.role = PROTO_ROLE_WORKER;
        po.name = w->name;
        po.worker = &w->hello;
        if (proto_ctx_new(&f->loop, &po, &w->ctx) != 0) {
            fprintf(stderr, "spillway-fleet: proto_ctx_new failed for worker %u\n", i);
            exit(1);
        }
        proto_ctx_set_data(w->ctx, w);
        uv_timer_init(&f->loop, &w->hb);
        w->hb.data = w;
        w->hb_init = true;
        int rc = proto_connect(w->ctx, f->sched_addr, &sim_cbs, NULL, &w->conn);
        if (rc != 0) {
            w->conn = NULL;
            pthread_mutex_lock(&f->mu);
            f->nrefused++;
            pthread_mutex_unlock(&f->mu);
        }
    }
}

static void sim_stop_all(fleet *f)
{
    for (uint32_t i = 0; i < f->n; i++) {
        simw *w = &f->w[i];
        if (w->hb_init)
            uv_close((uv_handle_t *)&w->hb, NULL);
        if (w->ctx != NULL)
            proto_ctx_close(w->ctx, NULL, NULL);
        w->ctx = NULL;
    }
    uv_close((uv_handle_t *)&f->wake, NULL);
}

static void wake_cb(uv_async_t *a)
{
    fleet *f = a->data;
    pthread_mutex_lock(&f->mu);
    int cmd = f->cmd;
    f->cmd = CMD_NONE;
    pthread_mutex_unlock(&f->mu);
    if (cmd == CMD_CONNECT)
        sim_connect_all(f);
    else if (cmd == CMD_STOP)
        sim_stop_all(f);
}

static void *fleet_main(void *arg)
{
    fleet *f = arg;
    uv_run(&f->loop, UV_RUN_DEFAULT);
    return NULL;
}

static void fleet_cmd(fleet *f, int cmd)
{
    pthread_mutex_lock(&f->mu);
    f->cmd = cmd;
    pthread_mutex_unlock(&f->mu);
    uv_async_send(&f->wake);
}

static fleet *fleet_start(const char *sched_addr, uint32_t n)
{
    fleet *f = calloc(1, sizeof *f);
    f->n = n;
    f->w = calloc(n, sizeof *f->w);
    snprintf(f->sched_addr, sizeof f->sched_addr, "%s", sched_addr);
    pthread_mutex_init(&f->mu, NULL);
    uv_loop_init(&f->loop);
    uv_async_init(&f->loop, &f->wake, wake_cb);
    f->wake.data = f;
    pthread_create(&f->th, NULL, fleet_main, f);
    return f;
}

static void fleet_stop(fleet *f)
{
    fleet_cmd(f, CMD_STOP);
    pthread_join(f->th, NULL);
    uv_loop_close(&f->loop);
    pthread_mutex_destroy(&f->mu);
    free(f->w);
    free(f);
}

/* ------------------------------------------------------------ measuring */

static bool smoke;
static int failures;

static void check(bool ok, const char *what, long long got, long long want)
{
    if (ok)
        return;
    failures++;
    fprintf(stderr, "spillway-fleet: FAILED: %s (got %lld, want %lld)\n", what, got, want);
}

static double r3(double v)
{
    return round(v * 1000) / 1000;
}

/* CPU seconds (utime + stime) of a process or one of its threads, from /proc. */
static double proc_cpu_s(pid_t pid, pid_t tid)
{
    char path[96], buf[1024];
    if (tid > 0)
        snprintf(path, sizeof path, "/proc/%d/task/%d/stat", (int)pid, (int)tid);
    else
        snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *fp = fopen(path, "r");
    if (fp == NULL)
        return 0;
    size_t len = fread(buf, 1, sizeof buf - 1, fp);
    fclose(fp);
    buf[len] = '\0';
    const char *p = strrchr(buf, ')');
    unsigned long long ut = 0, st = 0;
    if (p == NULL || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut,
                            &st) != 2)
        return 0;
    return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

static long sched_kib(const h_cluster *c, const char *field)
{
    int64_t v = spw_proc_status_kib((int)c->sched.pid, field);
    return v > 0 ? (long)v : 0;
}

static void sleep_s(double s)
{
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    nanosleep(&ts, NULL);
}

/* One JSON line as spillway-bench prints them: case, n (workers here), seconds, tasks_per_s,
 * peak_rss_mib (the scheduler's), then extra. Consumes extra. */
static void emit(const h_cluster *c, const char *name, uint32_t n, double seconds,
                 double tasks_per_s, json_t *extra)
{
    json_t *o = json_object();
    json_object_set_new(o, "case", json_string(name));
    json_object_set_new(o, "n", json_integer(n));
    json_object_set_new(o, "seconds", json_real(r3(seconds)));
    json_object_set_new(o, "tasks_per_s", tasks_per_s > 0 ? json_real(tasks_per_s) : json_null());
    json_object_set_new(o, "peak_rss_mib", json_real(r3((double)sched_kib(c, "VmHWM") / 1024)));
    json_object_set_new(o, "extra", extra);
    char *s = json_dumps(o, JSON_PRESERVE_ORDER | JSON_COMPACT | JSON_REAL_PRECISION(6));
    puts(s);
    fflush(stdout);
    free(s);
    json_decref(o);
}

/* Runs spillway-ctl with args; its output in *out (heap), its wall time in *secs. */
static int ctl(const h_cluster *c, const char *a1, const char *a2, char **out, double *secs)
{
    const char *argv[8] = {h_bin("spillway-ctl"), "--scheduler", c->addr, a1, a2, NULL};
    double t0 = now_s();
    int rc = h_run(argv, out);
    *secs = now_s() - t0;
    return rc;
}

/* GET path from the HTTP endpoint: the body (heap) and its length, or NULL. */
static char *http_get(const h_cluster *c, const char *path, size_t *len, double *secs)
{
    const char *colon = strrchr(c->http, ':');
    if (colon == NULL)
        return NULL;
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(colon + 1))};
    inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
    double t0 = now_s();
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
        if (fd >= 0)
            close(fd);
        return NULL;
    }
    char req[256];
    int rl = snprintf(req, sizeof req, "GET %s HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n", path);
    if (write(fd, req, (size_t)rl) != rl) {
        close(fd);
        return NULL;
    }
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    ssize_t got;
    while ((got = read(fd, buf + n, cap - n - 1)) > 0) {
        n += (size_t)got;
        if (cap - n < 4096)
            buf = realloc(buf, cap *= 2);
    }
    close(fd);
    *secs = now_s() - t0;
    buf[n] = '\0';
    char *body = strstr(buf, "\r\n\r\n");
    if (body == NULL) {
        free(buf);
        return NULL;
    }
    body += 4;
    *len = n - (size_t)(body - buf);
    memmove(buf, body, *len + 1);
    return buf;
}

static uint32_t fleet_ready(fleet *f)
{
    pthread_mutex_lock(&f->mu);
    uint32_t n = f->nready + f->nrefused;
    pthread_mutex_unlock(&f->mu);
    return n;
}

static json_t *status_doc(const h_cluster *c, double *secs, size_t *bytes)
{
    char *text = NULL;
    double s;
    int rc = ctl(c, "--json", "status", &text, &s);
    json_t *doc = rc == 0 && text != NULL ? json_loads(text, 0, NULL) : NULL;
    if (secs != NULL)
        *secs = s;
    if (bytes != NULL)
        *bytes = text != NULL ? strlen(text) : 0;
    free(text);
    return doc;
}

/* The join storm: every simulated worker connects in the same loop turn. */
static void case_join(h_cluster *c, fleet *f)
{
    fleet_cmd(f, CMD_CONNECT);
    double t0 = now_s();
    while (fleet_ready(f) < f->n && now_s() - t0 < 120)
        sleep_s(0.002);
    /* Every worker is registered once the scheduler lists it. */
    double seen = -1;
    size_t listed = 0;
    while (now_s() - t0 < 120) {
        json_t *doc = status_doc(c, NULL, NULL);
        listed = doc != NULL ? json_array_size(json_object_get(doc, "workers")) : 0;
        json_decref(doc);
        if (listed >= f->n) {
            seen = now_s() - t0;
            break;
        }
        sleep_s(0.05);
    }
    pthread_mutex_lock(&f->mu);
    double join = f->nready == f->n ? (double)(f->t_last_ready_ns - f->t_connect_ns) / 1e9 : -1;
    uint32_t refused = f->nrefused, ready = f->nready;
    pthread_mutex_unlock(&f->mu);
    json_t *extra = json_object();
    json_object_set_new(extra, "registered", json_integer(ready));
    json_object_set_new(extra, "refused", json_integer(refused));
    json_object_set_new(extra, "status_workers", json_integer((json_int_t)listed));
    json_object_set_new(extra, "status_listed_all_s", json_real(r3(seen)));
    emit(c, "fleet_join", f->n, join, 0, extra);
    check(ready == f->n, "workers registered", ready, f->n);
    check(refused == 0, "workers refused", refused, 0);
    check(listed == f->n, "workers in spillway-ctl status", (long long)listed, f->n);
}

/* The scheduler's CPU and memory with the fleet connected and nothing to do. */
static void case_idle(h_cluster *c, fleet *f, long base_kib, double idle_s)
{
    sleep_s(idle_s < 2 ? idle_s : 2); /* the join's after-effects */
    pid_t pid = c->sched.pid;
    double c0 = proc_cpu_s(pid, 0), l0 = proc_cpu_s(pid, pid), s0 = proc_cpu_s(getpid(), 0);
    double t0 = now_s();
    sleep_s(idle_s);
    double t = now_s() - t0;
    double cpu = proc_cpu_s(pid, 0) - c0, loop = proc_cpu_s(pid, pid) - l0;
    double self = proc_cpu_s(getpid(), 0) - s0;
    long rss = sched_kib(c, "VmRSS");
    json_t *extra = json_object();
    json_object_set_new(extra, "sched_cpu_pct", json_real(r3(cpu / t * 100)));
    json_object_set_new(extra, "sched_loop_cpu_pct", json_real(r3(loop / t * 100)));
    json_object_set_new(extra, "sched_rss_kib", json_integer(rss));
    json_object_set_new(extra, "sched_rss_no_workers_kib", json_integer(base_kib));
    json_object_set_new(extra, "sched_kib_per_worker",
                        json_real(r3((double)(rss - base_kib) / (double)f->n)));
    json_object_set_new(extra, "fleet_cpu_pct", json_real(r3(self / t * 100)));
    emit(c, "fleet_idle", f->n, t, 0, extra);
}

/* spillway-ctl status and memory, /metrics, /api/status and /api/history: time and size. */
static void case_ctl(h_cluster *c, fleet *f)
{
    json_t *extra = json_object();
    char *text = NULL;
    double s;
    int rc = ctl(c, "status", NULL, &text, &s);
    json_object_set_new(extra, "status_s", json_real(r3(s)));
    json_object_set_new(extra, "status_bytes", json_integer(text ? (json_int_t)strlen(text) : 0));
    json_object_set_new(extra, "status_lines", json_integer(0));
    if (text != NULL) {
        json_int_t lines = 0;
        for (const char *p = text; *p; p++)
            lines += *p == '\n';
        json_object_set_new(extra, "status_lines", json_integer(lines));
    }
    check(rc == 0, "spillway-ctl status exit status", rc, 0);
    free(text);
    size_t bytes;
    json_t *doc = status_doc(c, &s, &bytes);
    json_object_set_new(extra, "status_json_s", json_real(r3(s)));
    json_object_set_new(extra, "status_json_bytes", json_integer((json_int_t)bytes));
    size_t nw = json_array_size(json_object_get(doc, "workers"));
    check(doc != NULL && nw == f->n, "status --json parses and lists every worker", (long long)nw,
          f->n);
    json_decref(doc);
    text = NULL;
    rc = ctl(c, "--json", "memory", &text, &s);
    doc = rc == 0 && text != NULL ? json_loads(text, 0, NULL) : NULL;
    json_object_set_new(extra, "memory_json_s", json_real(r3(s)));
    json_object_set_new(extra, "memory_json_bytes",
                        json_integer(text ? (json_int_t)strlen(text) : 0));
    nw = json_array_size(json_object_get(doc, "nodes"));
    bool complete =
        json_is_true(json_object_get(json_object_get(doc, "totals"), "complete"));
    check(doc != NULL && nw == f->n, "memory --json parses and lists every node", (long long)nw,
          f->n);
    check(complete, "memory --json complete", complete, 1);
    json_decref(doc);
    free(text);
    static const char *const paths[] = {"/metrics", "/api/status", "/api/history", "/"};
    static const char *const keys[] = {"metrics", "api_status", "api_history", "dashboard_page"};
    for (int i = 0; i < 4; i++) {
        size_t len = 0;
        char key[64];
        s = 0;
        char *body = http_get(c, paths[i], &len, &s);
        snprintf(key, sizeof key, "%s_s", keys[i]);
        json_object_set_new(extra, key, json_real(r3(s)));
        snprintf(key, sizeof key, "%s_bytes", keys[i]);
        json_object_set_new(extra, key, json_integer((json_int_t)len));
        check(body != NULL && len > 0, paths[i], (long long)len, 1);
        if (i == 1 && body != NULL) {
            json_t *d = json_loads(body, 0, NULL);
            check(d != NULL, "/api/status parses", d != NULL, 1);
            json_decref(d);
        }
        free(body);
    }
    emit(c, "fleet_ctl", f->n, 0, 0, extra);
}

/* The dashboard in headless Chromium, its screenshot in dir. */
static void case_dashboard(h_cluster *c, fleet *f, const char *dir)
{
    char png[512], url[128], cmd[2048];
    snprintf(png, sizeof png, "%s/fleet-dashboard-%u.png", dir, f->n);
    snprintf(url, sizeof url, "http://%s/", c->http);
    snprintf(cmd, sizeof cmd,
             "HOME=%s chromium --headless --no-sandbox --disable-gpu --disable-dev-shm-usage "
             "--no-first-run --hide-scrollbars --virtual-time-budget=6000 "
             "--user-data-dir=%s/chromium-profile --window-size=1280,1600 --screenshot=%s %s "
             ">/dev/null 2>&1",
             c->dir, c->dir, png, url);
    double t0 = now_s();
    int rc = system(cmd);
    double t = now_s() - t0;
    FILE *fp = fopen(png, "rb");
    long size = 0;
    if (fp != NULL) {
        fseek(fp, 0, SEEK_END);
        size = ftell(fp);
        fclose(fp);
    }
    json_t *extra = json_object();
    json_object_set_new(extra, "chromium_status", json_integer(rc));
    json_object_set_new(extra, "screenshot", json_string(png));
    json_object_set_new(extra, "screenshot_bytes", json_integer(size));
    emit(c, "fleet_dashboard", f->n, t, 0, extra);
}

/* Modelled completion of the plan the scheduler chose. Each node's link sends at MODEL_RATE,
 * shared evenly among all it sends (every child, in every range), and receives at MODEL_RATE,
 * shared evenly among the ranges it fetches at once; a range flows to a node at the least of
 * its parent's rate for that range and the two shares, a piece behind its parent plus a hop's
 * delay. A node is done when its last range is. Unstriped plans are one range, the object. */
typedef struct plan_stats {
    double seconds, one;
    uint32_t depth, max_fanout, roots, stripes;
} plan_stats;

static plan_stats plan_model(fleet *f, double size)
{
    uint32_t n = f->n;
    /* Index by scheduler id: ids are small (sessions numbered from 1). */
    uint64_t maxid = 0;
    for (uint32_t i = 0; i < n; i++)
        maxid = f->w[i].sched_id > maxid ? f->w[i].sched_id : maxid;
    int32_t *byid = malloc((maxid + 1) * sizeof *byid);
    for (uint64_t k = 0; k <= maxid; k++)
        byid[k] = -1;
    for (uint32_t i = 0; i < n; i++)
        byid[f->w[i].sched_id] = (int32_t)i;
    plan_stats ps = {.one = size / MODEL_RATE + MODEL_HOP_S};
    /* The node a range of node v comes from, or -1 (a holder: it has the whole object). */
#define PARENT_OF(v, k)                                                                            \
    (f->w[v].nsrc > 0 && (k) < f->w[v].nstripes && f->w[v].parent[k] != 0 &&                      \
             f->w[v].parent[k] <= maxid                                                            \
         ? byid[f->w[v].parent[k]]                                                                 \
         : -1)
    uint32_t *sends = calloc(n, sizeof *sends);
    for (uint32_t v = 0; v < n; v++) {
        ps.stripes = f->w[v].nsrc > 0 && f->w[v].nstripes > ps.stripes ? f->w[v].nstripes
                                                                        : ps.stripes;
        for (uint32_t k = 0; f->w[v].nsrc > 0 && k < f->w[v].nstripes; k++)
            if (PARENT_OF(v, k) >= 0)
                sends[PARENT_OF(v, k)]++;
        if (f->w[v].nsrc == 0)
            ps.roots++;
    }
    double *rate = calloc(n, sizeof *rate), *first = calloc(n, sizeof *first);
    double *end = calloc(n, sizeof *end);
    uint32_t *depth = calloc(n, sizeof *depth);
    bool *doneflag = calloc(n, sizeof *doneflag);
    uint32_t *stack = malloc(n * sizeof *stack);
    for (uint32_t k = 0; k < ps.stripes; k++) {
        memset(doneflag, 0, n * sizeof *doneflag);
        /* Each node's rate, first-piece time and depth in range k, resolved parent first
         * (memoised walk). */
        for (uint32_t i = 0; i < n; i++) {
            uint32_t sp = 0, v = i;
            while (!doneflag[v]) {
                stack[sp++] = v;
                int32_t p = PARENT_OF(v, k);
                if (p < 0 || sp > n)
                    break;
                v = (uint32_t)p;
            }
            while (sp > 0) {
                v = stack[--sp];
                int32_t p = PARENT_OF(v, k);
                if (p < 0 || !doneflag[p]) {
                    rate[v] = INFINITY; /* a holder, or a node without range k */
                    first[v] = 0;
                    depth[v] = 0;
                } else {
                    uint32_t q = (uint32_t)p;
                    double len = (double)f->w[v].slen[k];
                    double piece = len < MODEL_PIECE ? len : MODEL_PIECE;
                    double r = MODEL_RATE / (double)sends[q];
                    double in = MODEL_RATE / (double)f->w[v].nstripes;
                    r = r < in ? r : in;
                    rate[v] = r < rate[q] ? r : rate[q];
                    first[v] = first[q] + piece / rate[v] + MODEL_HOP_S;
                    depth[v] = depth[q] + 1;
                    double t = first[v] + (len - piece) / rate[v];
                    end[v] = t > end[v] ? t : end[v];
                }
                doneflag[v] = true;
            }
        }
        for (uint32_t i = 0; i < n; i++)
            ps.depth = depth[i] > ps.depth ? depth[i] : ps.depth;
    }
#undef PARENT_OF
    for (uint32_t i = 0; i < n; i++) {
        ps.seconds = end[i] > ps.seconds ? end[i] : ps.seconds;
        ps.max_fanout = sends[i] > ps.max_fanout ? sends[i] : ps.max_fanout;
    }
    free(byid);
    free(sends);
    free(rate);
    free(first);
    free(end);
    free(depth);
    free(doneflag);
    free(stack);
    return ps;
}

static spillway *connect_or_die(const h_cluster *c)
{
    spillway *cl = NULL;
    int rc = spillway_connect(c->addr, NULL, &cl);
    if (rc != 0) {
        fprintf(stderr, "spillway-fleet: connect %s: %s\n", c->addr, spillway_strerror(rc));
        exit(1);
    }
    return cl;
}

/* A broadcast of an object of each size to every worker: the plan's shape and modelled time. */
static void case_broadcast(h_cluster *c, fleet *f)
{
    static const uint64_t sizes[] = {64ULL << 20, 1ULL << 30};
    spillway *cl = connect_or_die(c);
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        uint64_t size = sizes[k];
        pthread_mutex_lock(&f->mu);
        for (uint32_t i = 0; i < f->n; i++)
            f->w[i].nstripes = f->w[i].nsrc = 0;
        pthread_mutex_unlock(&f->mu);
        spillway_graph *g = spillway_graph_new(cl);
        spillway_arg a = spillway_arg_bytes(&size, sizeof size);
        spillway_ref ref;
        int rc = spillway_task(g, BLOB_FN, &a, 1, SPILLWAY_KEEP, &ref);
        if (rc == 0)
            rc = spillway_submit(g);
        spillway_graph_free(g);
        if (rc == 0)
            rc = spillway_wait(cl, &ref, 1, 60000);
        double t0 = now_s();
        if (rc == 0)
            rc = spillway_broadcast(cl, ref, 0);
        double t = now_s() - t0;
        check(rc == 0, "broadcast succeeds", rc, 0);
        pthread_mutex_lock(&f->mu);
        plan_stats ps = plan_model(f, (double)size);
        uint64_t reps = f->replicates;
        pthread_mutex_unlock(&f->mu);
        json_t *extra = json_object();
        json_object_set_new(extra, "object_bytes", json_integer((json_int_t)size));
        json_object_set_new(extra, "plan",
                            json_string(ps.stripes > 1        ? "striped"
                                        : ps.max_fanout <= 1 ? "chain"
                                                             : "tree"));
        json_object_set_new(extra, "stripes", json_integer(ps.stripes));
        json_object_set_new(extra, "depth", json_integer(ps.depth));
        json_object_set_new(extra, "max_fanout", json_integer(ps.max_fanout));
        json_object_set_new(extra, "modelled_s", json_real(r3(ps.seconds)));
        json_object_set_new(extra, "one_transfer_s", json_real(r3(ps.one)));
        json_object_set_new(extra, "modelled_vs_one", json_real(r3(ps.seconds / ps.one)));
        json_object_set_new(extra, "replicates_total", json_integer((json_int_t)reps));
        json_object_set_new(
            extra, "model",
            json_pack("{s:f,s:f,s:f}", "link_bytes_per_s", MODEL_RATE, "hop_s", MODEL_HOP_S,
                      "piece_bytes", MODEL_PIECE));
        emit(c, "fleet_broadcast", f->n, t, 0, extra);
        spillway_release(cl, ref);
    }
    spillway_close(cl);
}

/* scale_tiny's client side, spillway-bench's own, against this scheduler: tasks/s, and the
 * scheduler's CPU per task measured here. */
static void case_scale_tiny(h_cluster *c, fleet *f, uint64_t ntasks)
{
    char cmd[512], line[8192];
    snprintf(cmd, sizeof cmd, "%s --scheduler %s --case scale_tiny --n %llu 2>&1",
             h_bin("spillway-bench"), c->addr, (unsigned long long)ntasks);
    pid_t pid = c->sched.pid;
    pthread_mutex_lock(&f->mu);
    uint64_t done0 = f->tasks_done, frames0 = f->run_frames;
    pthread_mutex_unlock(&f->mu);
    double c0 = proc_cpu_s(pid, 0), l0 = proc_cpu_s(pid, pid), t0 = now_s();
    FILE *p = popen(cmd, "r");
    json_t *res = NULL;
    while (p != NULL && fgets(line, sizeof line, p) != NULL) {
        json_t *d = json_loads(line, 0, NULL);
        if (d != NULL && json_is_object(d)) {
            json_decref(res);
            res = d;
        } else {
            json_decref(d);
            fputs(line, stderr);
        }
    }
    int st = p != NULL ? pclose(p) : -1;
    double t = now_s() - t0;
    double cpu = proc_cpu_s(pid, 0) - c0, loop = proc_cpu_s(pid, pid) - l0;
    pthread_mutex_lock(&f->mu);
    uint64_t done = f->tasks_done - done0, frames = f->run_frames - frames0;
    pthread_mutex_unlock(&f->mu);
    uint64_t lo = UINT64_MAX, hi = 0;
    for (uint32_t i = 0; i < f->n; i++) {
        lo = f->w[i].tasks_done < lo ? f->w[i].tasks_done : lo;
        hi = f->w[i].tasks_done > hi ? f->w[i].tasks_done : hi;
    }
    json_t *extra = json_object();
    double tps = res != NULL ? json_real_value(json_object_get(res, "tasks_per_s")) : 0;
    json_int_t fetched = res != NULL ? json_integer_value(json_object_get(
                                           json_object_get(res, "extra"), "results_fetched"))
                                     : 0;
    json_object_set_new(extra, "bench_exit", json_integer(st));
    json_object_set_new(extra, "tasks", json_integer((json_int_t)ntasks));
    json_object_set_new(extra, "results_fetched", json_integer(fetched));
    json_object_set_new(extra, "tasks_run_by_fleet", json_integer((json_int_t)done));
    json_object_set_new(extra, "tasks_per_worker_min", json_integer((json_int_t)lo));
    json_object_set_new(extra, "tasks_per_worker_max", json_integer((json_int_t)hi));
    json_object_set_new(extra, "tasks_per_frame",
                        json_real(r3(frames > 0 ? (double)done / (double)frames : 0)));
    json_object_set_new(extra, "sched_cpu_us_per_task", json_real(r3(cpu / (double)done * 1e6)));
    json_object_set_new(extra, "sched_loop_cpu_us_per_task",
                        json_real(r3(loop / (double)done * 1e6)));
    emit(c, "fleet_scale_tiny", f->n, res != NULL ? json_real_value(json_object_get(res, "seconds"))
                                                  : t,
         tps, extra);
    check(st == 0, "spillway-bench scale_tiny exit status", st, 0);
    check(fetched == (json_int_t)ntasks, "scale_tiny results fetched", fetched, (long long)ntasks);
    json_decref(res);
}

/* Every simulated worker disconnects at once (the fleet stops): the time until the scheduler
 * lists none. */
static void case_leave(h_cluster *c, fleet *f)
{
    uint32_t n = f->n;
    double t0 = now_s();
    fleet_stop(f);
    double closed = now_s() - t0, gone = -1;
    size_t listed = n;
    while (now_s() - t0 < 120) {
        json_t *doc = status_doc(c, NULL, NULL);
        listed = doc != NULL ? json_array_size(json_object_get(doc, "workers")) : n;
        json_decref(doc);
        if (listed == 0) {
            gone = now_s() - t0;
            break;
        }
        sleep_s(0.02);
    }
    json_t *extra = json_object();
    json_object_set_new(extra, "fleet_closed_s", json_real(r3(closed)));
    json_object_set_new(extra, "status_workers_left", json_integer((json_int_t)listed));
    emit(c, "fleet_leave", n, gone, 0, extra);
    check(listed == 0, "workers gone after the fleet stopped", (long long)listed, 0);
}

/* ------------------------------------------------------------------ main */

static bool want(const char *cases, const char *name)
{
    if (cases == NULL)
        return true;
    size_t n = strlen(name);
    for (const char *p = cases; (p = strstr(p, name)) != NULL; p += n)
        if ((p == cases || p[-1] == ',') && (p[n] == '\0' || p[n] == ','))
            return true;
    return false;
}

static void usage(FILE *fp)
{
    fprintf(fp, "usage: spillway-fleet [--sim-workers N[,N...]] [--case "
                "join,idle,ctl,dashboard,broadcast,scale_tiny] [--tasks N] [--idle-s S] "
                "[--screenshot-dir DIR] [--smoke]\n");
}

int main(int argc, char **argv)
{
    uint32_t counts[8] = {10, 100, 1000};
    int ncounts = 3;
    const char *cases = NULL, *shots = NULL;
    uint64_t ntasks = 1000000;
    double idle_s = 10;
    static const struct option opts[] = {
        {"sim-workers", required_argument, NULL, 'w'}, {"case", required_argument, NULL, 'c'},
        {"tasks", required_argument, NULL, 't'},       {"idle-s", required_argument, NULL, 'i'},
        {"screenshot-dir", required_argument, NULL, 'd'}, {"smoke", no_argument, NULL, 's'},
        {"help", no_argument, NULL, 'h'},              {NULL, 0, NULL, 0}};
    int ch;
    while ((ch = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (ch) {
        case 'w': {
            ncounts = 0;
            char *s = optarg, *end;
            while (ncounts < 8 && *s) {
                unsigned long v = strtoul(s, &end, 10);
                if (end == s || v == 0 || v > 100000) {
                    usage(stderr);
                    return 2;
                }
                counts[ncounts++] = (uint32_t)v;
                s = *end == ',' ? end + 1 : end;
            }
            break;
        }
        case 'c':
            cases = optarg;
            break;
        case 't':
            ntasks = strtoull(optarg, NULL, 10);
            break;
        case 'i':
            idle_s = atof(optarg);
            break;
        case 'd':
            shots = optarg;
            break;
        case 's':
            smoke = true;
            break;
        case 'h':
            usage(stdout);
            return 0;
        default:
            usage(stderr);
            return 2;
        }
    }
    if (smoke && cases == NULL)
        cases = "join,idle,ctl,broadcast,scale_tiny";
    /* Each simulated worker holds a socket here and one in the scheduler, which inherits this
     * limit (its --max-connections defaults to three quarters of it). */
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    signal(SIGPIPE, SIG_IGN);
    for (int k = 0; k < ncounts; k++) {
        uint32_t n = counts[k];
        if ((uint64_t)n * 2 + 64 > rl.rlim_cur) {
            fprintf(stderr, "spillway-fleet: %u workers need %u descriptors, the limit is %llu\n",
                    n, n * 2 + 64, (unsigned long long)rl.rlim_cur);
            return 1;
        }
        char maxc[32];
        snprintf(maxc, sizeof maxc, "%u", n + n / 4 + 64);
        const char *args[] = {"--http", "127.0.0.1:0", "--max-connections", maxc, NULL};
        h_cluster *c = h_cluster_start(false, args);
        sleep_s(0.5);
        long base_kib = sched_kib(c, "VmRSS");
        fleet *f = fleet_start(c->addr, n);
        case_join(c, f); /* always: the other cases need the fleet */
        if (want(cases, "idle"))
            case_idle(c, f, base_kib, idle_s);
        if (want(cases, "ctl"))
            case_ctl(c, f);
        if (want(cases, "dashboard") && shots != NULL)
            case_dashboard(c, f, shots);
        if (want(cases, "broadcast"))
            case_broadcast(c, f);
        if (want(cases, "scale_tiny"))
            case_scale_tiny(c, f, ntasks);
        case_leave(c, f);
        bool stopped = h_cluster_stop(c);
        check(stopped, "scheduler exits 0", stopped, 1);
        h_cluster_release(c);
    }
    if (failures > 0)
        fprintf(stderr, "spillway-fleet: %d check(s) failed\n", failures);
    return smoke && failures > 0 ? 1 : 0;
}
