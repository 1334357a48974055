/* Seeing a cluster work: the running state, per-graph progress (spillway-ctl jobs and
 * spillway_graph_status), the HTTP endpoint (/metrics through Prometheus's own parser,
 * /api/status, memory and jobs against spillway-ctl's output, the token) and the dashboard in
 * headless Chromium. Real
 * daemons on 127.0.0.1; every wait is a bounded poll of state the scheduler reports, never a
 * sleep standing in for an event. tests/e2e/http_check.py does the HTTP and browser work. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../unit/test_main.h"
#include "e2e_util.h"
#include "spillway/base.h"

#define NTASKS 24
#define PROTO_TSTATE_COUNT_E2E 6
#define TASK_MS "150"
#define NTASKS_STR "24"

static json_int_t jget(json_t *o, const char *a, const char *b)
{
    return json_integer_value(json_object_get(json_object_get(o, a), b));
}

static bool some_running(void *arg)
{
    json_t *doc = e2e_ctl_json(arg, "status");
    bool yes = doc != NULL && jget(doc, "tasks", "running") > 0;
    json_decref(doc);
    return yes;
}

/* The one graph in a jobs document, or NULL. */
static json_t *only_graph(json_t *doc)
{
    json_t *gs = json_object_get(doc, "graphs");
    return json_array_size(gs) == 1 ? json_array_get(gs, 0) : NULL;
}

typedef struct progress_probe {
    h_cluster *c;
    json_int_t last_done;
    int increases;  /* times `done` was seen to grow while the graph was unfinished */
    bool finished;
} progress_probe;

static bool done_grows(void *arg)
{
    progress_probe *p = arg;
    json_t *doc = e2e_ctl_json(p->c, "jobs");
    json_t *g = only_graph(doc);
    if (g != NULL) {
        json_int_t done = jget(g, "tasks", "done");
        assert_true(done >= p->last_done); /* progress never goes backwards here */
        if (done > p->last_done && done < NTASKS)
            p->increases++;
        p->last_done = done;
        p->finished = json_is_true(json_object_get(g, "finished"));
    }
    json_decref(doc);
    return p->increases >= 2;
}

static bool graph_finished(void *arg)
{
    progress_probe *p = arg;
    json_t *doc = e2e_ctl_json(p->c, "jobs");
    json_t *g = only_graph(doc);
    p->finished = g != NULL && json_is_true(json_object_get(g, "finished"));
    if (p->finished)
        p->last_done = jget(g, "tasks", "done");
    json_decref(doc);
    return p->finished;
}

static void running_state_and_graph_progress(void)
{
    h_cluster *c = h_cluster_start(false, NULL);
    const char *const args[] = {"--slots", "2", "--store-capacity", "64M", NULL};
    h_workers_start(c, 2, args);
    spillway *cl = e2e_connect(c);

    spillway_graph *g = spillway_graph_new(cl);
    assert_non_null(g);
    uint64_t gid = spillway_graph_id(g);
    assert_true(gid != 0);
    spillway_ref out[NTASKS];
    spillway_arg sl = spillway_arg_u64(strtoull(TASK_MS, NULL, 10));
    for (int i = 0; i < NTASKS; i++)
        assert_int_equal(spillway_task(g, "sleep_ms", &sl, 1, SPILLWAY_KEEP, &out[i]), 0);
    char site[64];
    snprintf(site, sizeof site, "%s:%d", __FILE__, __LINE__ + 1);
    E2E_SUBMIT(g);

    /* status: `running` is set once an executor has a task, not only `assigned`. */
    assert_true(h_eventually(some_running, c, 20000));

    /* jobs: the graph, its submitter and call site, and `done` growing while it runs. */
    json_t *doc = e2e_ctl_json(c, "jobs");
    json_t *jg = only_graph(doc);
    assert_non_null(jg);
    assert_int_equal(json_integer_value(json_object_get(jg, "graph")), (json_int_t)gid);
    assert_string_equal(json_string_value(json_object_get(jg, "call_site")), site);
    assert_int_equal(jget(jg, "tasks", "total"), NTASKS);
    assert_int_equal(jget(jg, "client", "pid"), (json_int_t)getpid());
    json_decref(doc);
    progress_probe p = {c, 0, 0, false};
    assert_true(h_eventually(done_grows, &p, 60000));

    /* The client library sees the same counts. */
    spillway_graph_progress gp;
    assert_int_equal(spillway_graph_status(cl, gid, &gp), 0);
    assert_int_equal(gp.total, NTASKS);
    assert_true(gp.done + gp.failed + gp.running + gp.assigned + gp.ready + gp.waiting == NTASKS);
    assert_int_equal(spillway_graph_status(cl, gid + 1000, &gp), SPW_ENOOBJ);

    assert_true(h_eventually(graph_finished, &p, 60000));
    assert_int_equal(p.last_done, NTASKS);
    assert_int_equal(spillway_graph_status(cl, gid, &gp), 0);
    assert_int_equal(gp.done, NTASKS);
    assert_int_equal(gp.failed, 0);
    assert_int_equal(gp.finished, 1);
    /* Nothing left running once every task is done. */
    doc = e2e_ctl_json(c, "status");
    assert_int_equal(jget(doc, "tasks", "running"), 0);
    assert_int_equal(jget(doc, "tasks", "assigned"), 0);
    json_decref(doc);

    /* jobs --watch --json: one compact document per line, one line per refresh. */
    const char *argv[] = {
        h_bin("spillway-ctl"), "--scheduler", c->addr,   "--json", "jobs", "--watch",
        "--interval",          "50",          "--count", "3",      NULL};
    char *text = NULL;
    assert_int_equal(h_run(argv, &text), 0);
    int lines = 0;
    for (char *line = strtok(text, "\n"); line != NULL; line = strtok(NULL, "\n")) {
        json_error_t err;
        json_t *d = json_loads(line, 0, &err);
        assert_non_null(d);
        assert_non_null(only_graph(d));
        json_decref(d);
        lines++;
    }
    assert_int_equal(lines, 3);
    free(text);
    /* Without a terminal, --watch prints plain lines. */
    const char *argv2[] = {
        h_bin("spillway-ctl"), "--scheduler", c->addr, "jobs", "--watch", "--count", "1", NULL};
    assert_int_equal(h_run(argv2, &text), 0);
    assert_non_null(strstr(text, "done=" NTASKS_STR));
    assert_non_null(strstr(text, " finished"));
    assert_null(strstr(text, "\033["));
    free(text);

    assert_int_equal(spillway_release_many(cl, out, NTASKS), 0);
    E2E_FINISH(c, cl);
}

/* ------------------------------------------------------------------- HTTP */

#define CHECK_PY SPW_SOURCE_DIR "/tests/e2e/http_check.py"

/* Runs http_check.py with args; returns its stdout parsed (NULL if it failed or is not JSON
 * when want_json). *raw gets the text when raw != NULL. */
static json_t *http_check(const char *const *args, char **raw, int *status)
{
    const char *argv[16];
    int n = 0;
    argv[n++] = SPW_PYTHON3;
    argv[n++] = CHECK_PY;
    for (int i = 0; args[i] != NULL && n < 15; i++)
        argv[n++] = args[i];
    argv[n] = NULL;
    char *out = NULL;
    int rc = h_run(argv, &out);
    if (status != NULL)
        *status = rc;
    json_t *doc = NULL;
    if (rc == 0)
        doc = json_loads(out, JSON_DECODE_ANY, NULL);
    else
        fprintf(stderr, "http_check.py %s exited %d: %s\n", args[0], rc, out ? out : "");
    if (raw != NULL)
        *raw = out;
    else
        free(out);
    return doc;
}

static json_t *http_json(h_cluster *c, const char *path)
{
    char url[256];
    snprintf(url, sizeof url, "http://%s%s", c->http, path);
    const char *args[] = {"get", url, NULL};
    return http_check(args, NULL, NULL);
}

/* The value of a sample of family fam with label key=val (key NULL: the first sample), or -1. */
static double metric(json_t *m, const char *fam, const char *sample, const char *key,
                     const char *val)
{
    json_t *f = json_object_get(m, fam);
    size_t i;
    json_t *smp;
    json_array_foreach(json_object_get(f, "samples"), i, smp)
    {
        if (strcmp(json_string_value(json_array_get(smp, 0)), sample) != 0)
            continue;
        const char *lv = key ? json_string_value(json_object_get(json_array_get(smp, 1), key)) : NULL;
        if (key == NULL || (lv != NULL && strcmp(lv, val) == 0))
            return json_number_value(json_array_get(smp, 2));
    }
    return -1;
}

typedef struct match_probe {
    h_cluster *c;
    char why[256];
} match_probe;

/* /metrics agrees with `spillway-ctl status --json` taken just before it. */
static bool metrics_match_status(void *arg)
{
    match_probe *p = arg;
    json_t *st = e2e_ctl_json(p->c, "status");
    char url[256];
    snprintf(url, sizeof url, "http://%s/metrics", p->c->http);
    const char *args[] = {"metrics", url, NULL};
    json_t *m = http_check(args, NULL, NULL);
    bool ok = st != NULL && m != NULL;
    if (ok) {
        json_t *t = json_object_get(st, "tasks");
        for (int k = 0; k < PROTO_TSTATE_COUNT_E2E && ok; k++) {
            static const char *const names[] = {"waiting", "ready", "assigned", "running", "done", "failed"};
            ok = metric(m, "spillway_tasks", "spillway_tasks", "state", names[k]) ==
                 (double)json_integer_value(json_object_get(t, names[k]));
            if (!ok)
                snprintf(p->why, sizeof p->why, "tasks{state=%s}", names[k]);
        }
        json_t *o = json_object_get(st, "objects");
        if (ok && metric(m, "spillway_objects", "spillway_objects", NULL, NULL) !=
                      (double)json_integer_value(json_object_get(o, "count")))
            ok = false, snprintf(p->why, sizeof p->why, "objects");
        if (ok && metric(m, "spillway_object_bytes", "spillway_object_bytes", NULL, NULL) !=
                      (double)json_integer_value(json_object_get(o, "bytes")))
            ok = false, snprintf(p->why, sizeof p->why, "object bytes");
        if (ok && metric(m, "spillway_references", "spillway_references", "kind", "OUTPUT") !=
                      (double)jget(st, "references", "OUTPUT"))
            ok = false, snprintf(p->why, sizeof p->why, "references{kind=OUTPUT}");
        if (ok && metric(m, "spillway_workers", "spillway_workers", NULL, NULL) !=
                      (double)json_array_size(json_object_get(st, "workers")))
            ok = false, snprintf(p->why, sizeof p->why, "workers");
        size_t i;
        json_t *w;
        json_array_foreach(json_object_get(st, "workers"), i, w)
        {
            const char *name = json_string_value(json_object_get(w, "name"));
            json_t *mem = json_object_get(w, "memory");
            static const char *const pairs[][2] = {
                {"spillway_store_used_bytes", "used"},
                {"spillway_store_capacity_bytes", "capacity"},
                {"spillway_store_pinned_bytes", "pinned"},
                {"spillway_store_spilled_bytes", "spilled_bytes"},
                {"spillway_store_objects_in_memory", "objects_in_memory"},
                {"spillway_store_objects_spilled", "objects_spilled"},
            };
            for (size_t k = 0; k < sizeof pairs / sizeof pairs[0] && ok; k++)
                if (metric(m, pairs[k][0], pairs[k][0], "worker", name) !=
                    (double)json_integer_value(json_object_get(mem, pairs[k][1]))) {
                    ok = false;
                    snprintf(p->why, sizeof p->why, "%s{worker=%s}", pairs[k][0], name);
                }
            if (ok && metric(m, "spillway_worker_tasks_done", "spillway_worker_tasks_done_total",
                             "worker", name) !=
                          (double)json_integer_value(json_object_get(mem, "tasks_done")))
                ok = false, snprintf(p->why, sizeof p->why, "tasks_done_total{worker=%s}", name);
        }
    }
    json_decref(st);
    json_decref(m);
    return ok;
}

/* Removes the members that change with every look (ages, uptime, the asking sessions). */
static void strip_volatile(json_t *doc)
{
    json_object_del(doc, "clients");
    json_object_del(doc, "connections");
    json_object_del(doc, "io");
    json_object_del(json_object_get(doc, "scheduler"), "uptime_ms");
    size_t i;
    json_t *x;
    json_array_foreach(json_object_get(doc, "objects"), i, x) json_object_del(x, "age_ms");
    json_array_foreach(json_object_get(doc, "graphs"), i, x) json_object_del(x, "age_ms");
    json_array_foreach(json_object_get(doc, "nodes"), i, x) json_object_del(x, "rss_kib");
    json_array_foreach(json_object_get(doc, "workers"), i, x)
        json_object_del(json_object_get(x, "memory"), "rss_kib");
}

typedef struct api_probe {
    h_cluster *c;
    const char *cmd, *path;
} api_probe;

static bool api_equals_ctl(void *arg)
{
    api_probe *p = arg;
    json_t *a = http_json(p->c, p->path);
    json_t *b = e2e_ctl_json(p->c, p->cmd);
    bool eq = false;
    if (a != NULL && b != NULL) {
        strip_volatile(a);
        strip_volatile(b);
        eq = json_equal(a, b);
        if (!eq) {
            char *x = json_dumps(a, JSON_COMPACT), *y = json_dumps(b, JSON_COMPACT);
            fprintf(stderr, "%s differs:\n http: %.600s\n ctl:  %.600s\n", p->path, x, y);
            free(x);
            free(y);
        }
    }
    json_decref(a);
    json_decref(b);
    return eq;
}

/* Submits n fill tasks of size bytes, KEEP, and waits for the graph to finish. */
static uint64_t run_fill_job(spillway *cl, int n, uint64_t size, spillway_ref *out)
{
    spillway_graph *g = spillway_graph_new(cl);
    for (int i = 0; i < n; i++) {
        spillway_arg fa[2] = {spillway_arg_u64(size), spillway_arg_bytes("see", 3)};
        assert_int_equal(spillway_task(g, "fill", fa, 2, SPILLWAY_KEEP, &out[i]), 0);
    }
    assert_int_equal(spillway_submit(g), 0);
    uint64_t gid = spillway_graph_id(g);
    spillway_graph_free(g);
    for (int i = 0; i < n; i++) {
        void *data;
        size_t len;
        assert_int_equal(spillway_get(cl, out[i], 60000, &data, &len), 0);
        assert_int_equal(len, size);
        spillway_free(data);
    }
    return gid;
}

/* The workers' heartbeats have told the scheduler of every finished task. */
static bool workers_report_12_done(void *arg)
{
    return e2e_memory_sum(arg, "tasks_done") >= 12;
}

static void http_metrics_and_api_match_ctl(void)
{
    const char *const sargs[] = {"--http", "127.0.0.1:0", NULL};
    h_cluster *c = h_cluster_start(false, sargs);
    assert_true(c->http[0] != '\0');
    const char *const args[] = {"--slots", "2", "--store-capacity", "64M", "--name", NULL, NULL};
    const char *a1[] = {args[0], args[1], args[2], args[3], args[4], "alpha", NULL};
    const char *a2[] = {args[0], args[1], args[2], args[3], args[4], "beta", NULL};
    h_worker_start(c, a1);
    h_worker_start(c, a2);
    spillway *cl = e2e_connect(c);
    spillway_ref out[12];
    run_fill_job(cl, 12, 1u << 20, out);
    assert_true(h_eventually(workers_report_12_done, c, 20000));

    /* /metrics: valid for Prometheus's parser, and the figures of status --json. */
    match_probe mp = {c, ""};
    if (!h_eventually(metrics_match_status, &mp, 20000))
        fail_msg("/metrics never matched status --json: %s", mp.why);
    char url[256];
    snprintf(url, sizeof url, "http://%s/metrics", c->http);
    const char *margs[] = {"metrics", url, NULL};
    json_t *m = http_check(margs, NULL, NULL);
    assert_non_null(m);
    assert_string_equal(json_string_value(json_object_get(json_object_get(m, "spillway_spills"), "type")),
                        "counter");
    assert_string_equal(json_string_value(json_object_get(
                            json_object_get(m, "spillway_task_latency_seconds"), "type")),
                        "histogram");
    double count = metric(m, "spillway_task_latency_seconds", "spillway_task_latency_seconds_count", NULL, NULL);
    assert_true(count >= 12);
    assert_true(metric(m, "spillway_task_latency_seconds", "spillway_task_latency_seconds_bucket", "le", "+Inf") == count);
    assert_true(metric(m, "spillway_connections", "spillway_connections", "role", "worker") == 2);
    assert_true(metric(m, "spillway_frames_received", "spillway_frames_received_total", NULL, NULL) > 0);
    assert_true(metric(m, "spillway_worker_tasks_done", "spillway_worker_tasks_done_total", "worker", "alpha") +
                    metric(m, "spillway_worker_tasks_done", "spillway_worker_tasks_done_total", "worker", "beta") >= 12);
    json_decref(m);

    /* /api/status, /api/memory, /api/jobs: the documents spillway-ctl prints. */
    api_probe ap = {c, "status", "/api/status"};
    assert_true(h_eventually(api_equals_ctl, &ap, 20000));
    ap = (api_probe){c, "memory", "/api/memory"};
    assert_true(h_eventually(api_equals_ctl, &ap, 20000));
    ap = (api_probe){c, "jobs", "/api/jobs"};
    assert_true(h_eventually(api_equals_ctl, &ap, 20000));
    /* Bad queries and pages are refused with a reason. */
    snprintf(url, sizeof url, "http://%s/api/memory?limit=x", c->http);
    const char *bad[] = {"status", url, NULL};
    char *text = NULL;
    json_t *code = http_check(bad, &text, NULL);
    assert_int_equal(json_integer_value(code), 400);
    json_decref(code);
    free(text);
    snprintf(url, sizeof url, "http://%s/nope", c->http);
    code = http_check(bad, NULL, NULL);
    assert_int_equal(json_integer_value(code), 404);
    json_decref(code);

    assert_int_equal(spillway_release_many(cl, out, 12), 0);
    E2E_FINISH(c, cl);
}

/* /api/memory's numbers are refused with a 400 that names them when out of range, never read
 * as something else: a limit past a long's range (strtol would saturate it to "no limit"),
 * negative or signed ones, and stats_only other than 0 or 1. In-range ones are served. The
 * same for /api/history's top. */
static void http_memory_query_out_of_range_is_400_naming_it(void)
{
    const char *const sargs[] = {"--http", "127.0.0.1:0", NULL};
    h_cluster *c = h_cluster_start(false, sargs);
    static const struct {
        const char *query, *names;
    } bad[] = {
        {"memory?limit=99999999999999999999", "limit=99999999999999999999"},
        {"memory?limit=9223372036854775808", "limit=9223372036854775808"},
        {"memory?limit=-1", "limit=-1"},
        {"memory?limit=%2B5", "limit=+5"},
        {"memory?limit=%205", "limit= 5"},
        {"memory?limit=", "limit="},
        {"memory?stats_only=2", "stats_only=2"},
        {"memory?stats_only=99999999999999999999", "stats_only=99999999999999999999"},
        {"history?top=-1", "top=-1"},
        {"history?top=100001", "top=100001"},
    };
    char url[256];
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(url, sizeof url, "http://%s/api/%s", c->http, bad[i].query);
        const char *args[] = {"get", url, NULL};
        char *out = NULL;
        int rc = 0;
        json_t *doc = http_check(args, &out, &rc);
        if (rc == 0 || out == NULL || strstr(out, "HTTP 400") == NULL ||
            strstr(out, bad[i].names) == NULL)
            fail_msg("%s: expected a 400 naming %s, got exit %d: %s", bad[i].query, bad[i].names,
                     rc, out != NULL ? out : "");
        json_decref(doc);
        free(out);
    }
    static const char *const good[] = {"/api/memory?limit=9223372036854775807",
                                       "/api/memory?limit=0&stats_only=0",
                                       "/api/memory?stats_only=1"};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        json_t *doc = http_json(c, good[i]);
        if (doc == NULL)
            fail_msg("%s was refused", good[i]);
        json_decref(doc);
    }
    E2E_STOP(c, NULL);
}

typedef struct hist_probe {
    h_cluster *c;
    json_int_t since_ms; /* samples at or after this time */
    json_t *hist;        /* the last /api/history read */
} hist_probe;

/* Two samples taken at or after since_ms: the second one's status was asked for after it. */
static bool two_samples_since(void *arg)
{
    hist_probe *p = arg;
    json_decref(p->hist);
    p->hist = http_json(p->c, "/api/history");
    int later = 0;
    size_t i;
    json_t *t;
    json_array_foreach(json_object_get(p->hist, "t"), i, t)
        later += json_integer_value(t) >= p->since_ms;
    return later >= 2;
}

/* Two workers of one name (--name may repeat: tasks placed by name go to either) each have
 * their own series in /api/history, with their own figures, as in /api/status and /metrics. */
static void http_history_keeps_workers_of_one_name_apart(void)
{
    const char *const sargs[] = {"--http", "127.0.0.1:0", "--http-sample", "50", NULL};
    h_cluster *c = h_cluster_start(false, sargs);
    const char *const w8[] = {"--store-capacity", "8M", "--name", "pool", NULL};
    const char *const w16[] = {"--store-capacity", "16M", "--name", "pool", NULL};
    h_worker_start(c, w8);
    h_worker_start(c, w16);
    json_t *st = e2e_ctl_json(c, "status");
    assert_int_equal(json_array_size(json_object_get(st, "workers")), 2);
    json_decref(st);
    hist_probe p = {c, (json_int_t)spw_wall_ms(), NULL};
    assert_true(h_eventually(two_samples_since, &p, 20000));
    json_t *ws = json_object_get(p.hist, "workers");
    assert_int_equal(json_array_size(ws), 2);
    size_t n = json_array_size(json_object_get(p.hist, "t"));
    json_int_t caps = 0;
    size_t i;
    json_t *w;
    json_array_foreach(ws, i, w)
    {
        assert_string_equal(json_string_value(json_object_get(w, "name")), "pool");
        caps += json_integer_value(json_array_get(json_object_get(w, "capacity"), n - 1));
    }
    assert_int_equal(caps, (8 << 20) + (16 << 20));
    assert_string_not_equal(json_string_value(json_object_get(json_array_get(ws, 0), "address")),
                            json_string_value(json_object_get(json_array_get(ws, 1), "address")));
    json_decref(p.hist);
    E2E_STOP(c, NULL);
}

/* /api/history?top=K lists K workers' series (the fullest first) and sums up every worker in
 * summary (a top that is not a count is refused: http_memory_query_out_of_range_...). */
static void http_history_top_lists_k_and_sums_all(void)
{
    const char *const sargs[] = {"--http", "127.0.0.1:0", "--http-sample", "50", NULL};
    h_cluster *c = h_cluster_start(false, sargs);
    const char *const wargs[] = {"--store-capacity", "8M", NULL};
    h_workers_start(c, 3, wargs);
    hist_probe p = {c, (json_int_t)spw_wall_ms(), NULL};
    assert_true(h_eventually(two_samples_since, &p, 20000));
    json_decref(p.hist);
    json_t *hist = http_json(c, "/api/history?top=1");
    assert_non_null(hist);
    assert_int_equal(json_array_size(json_object_get(hist, "workers")), 1);
    assert_int_equal(json_integer_value(json_object_get(hist, "workers_seen")), 3);
    json_t *sum = json_object_get(hist, "summary");
    assert_int_equal(json_integer_value(json_object_get(sum, "workers")), 3);
    assert_int_equal(json_integer_value(json_object_get(sum, "capacity")), 3 * (8 << 20));
    json_decref(hist);
    hist = http_json(c, "/api/history");
    assert_int_equal(json_array_size(json_object_get(hist, "workers")), 3);
    json_decref(hist);
    E2E_STOP(c, NULL);
}

/* Two clients' first graphs share the client's id; jobs tells them apart by id. */
static void graphs_of_two_clients_have_distinct_ids(void)
{
    h_cluster *c = h_cluster_simple(1);
    spillway *a = e2e_connect(c), *b = e2e_connect(c);
    spillway_graph *ga = spillway_graph_new(a), *gb = spillway_graph_new(b);
    assert_int_equal(spillway_graph_id(ga), spillway_graph_id(gb));
    spillway_arg sl = spillway_arg_u64(0);
    spillway_ref ra, rb;
    assert_int_equal(spillway_task(ga, "sleep_ms", &sl, 1, SPILLWAY_KEEP, &ra), 0);
    assert_int_equal(spillway_task(gb, "sleep_ms", &sl, 1, SPILLWAY_KEEP, &rb), 0);
    E2E_SUBMIT(ga);
    E2E_SUBMIT(gb);
    json_t *doc = e2e_ctl_json(c, "jobs");
    json_t *gs = json_object_get(doc, "graphs");
    assert_int_equal(json_array_size(gs), 2);
    json_t *x = json_array_get(gs, 0), *y = json_array_get(gs, 1);
    assert_int_equal(json_integer_value(json_object_get(x, "graph")),
                     json_integer_value(json_object_get(y, "graph")));
    assert_true(json_is_integer(json_object_get(x, "id")));
    assert_true(json_integer_value(json_object_get(x, "id")) !=
                json_integer_value(json_object_get(y, "id")));
    json_decref(doc);
    assert_int_equal(spillway_release(a, ra), 0);
    assert_int_equal(spillway_release(b, rb), 0);
    spillway_close(b);
    E2E_FINISH(c, a);
}

static void http_token_when_asked(void)
{
    const char *const sargs[] = {"--http", "127.0.0.1:0", "--http-auth", "token", NULL};
    h_cluster *c = h_cluster_start(true, sargs);
    const char *targv[] = {h_bin("spillway-ctl"), "--secret-file", c->secret_file, "http-token",
                           NULL};
    char *tok = NULL;
    assert_int_equal(h_run(targv, &tok), 0);
    tok[strcspn(tok, "\n")] = '\0';
    assert_int_equal(strlen(tok), 64);
    char url[256];
    snprintf(url, sizeof url, "http://%s/api/status", c->http);
    const char *no[] = {"status", url, NULL};
    json_t *code = http_check(no, NULL, NULL);
    assert_int_equal(json_integer_value(code), 401);
    json_decref(code);
    const char *wrong[] = {"status", url, "0000000000000000000000000000000000000000000000000000000000000000", NULL};
    code = http_check(wrong, NULL, NULL);
    assert_int_equal(json_integer_value(code), 401);
    json_decref(code);
    const char *yes[] = {"status", url, tok, NULL};
    code = http_check(yes, NULL, NULL);
    assert_int_equal(json_integer_value(code), 200);
    json_decref(code);
    snprintf(url, sizeof url, "http://%s/metrics?token=%s", c->http, tok);
    const char *query[] = {"status", url, NULL};
    code = http_check(query, NULL, NULL);
    assert_int_equal(json_integer_value(code), 200);
    json_decref(code);
    /* The page itself holds no data: it loads, and asks with ?token= from its own URL. */
    snprintf(url, sizeof url, "http://%s/", c->http);
    const char *page[] = {"status", url, NULL};
    code = http_check(page, NULL, NULL);
    assert_int_equal(json_integer_value(code), 200);
    json_decref(code);
    free(tok);
    /* --http-auth token without a secret is refused at start. */
    const char *argv[] = {h_bin("spillway-scheduler"), "--listen", "127.0.0.1:0", "--http",
                          "127.0.0.1:0", "--http-auth", "token", NULL};
    char *err = NULL;
    assert_int_equal(h_run(argv, &err), 2);
    assert_non_null(strstr(err, "--secret-file"));
    free(err);
    E2E_STOP(c, NULL);
}

/* ------------------------------------------------------------- dashboard */

typedef struct quiet_probe {
    h_cluster *c;
    json_t *last; /* workers' memory at the previous look */
} quiet_probe;

static json_t *workers_memory(json_t *status)
{
    json_t *out = json_object();
    size_t i;
    json_t *w;
    json_array_foreach(json_object_get(status, "workers"), i, w)
    {
        json_t *mem = json_deep_copy(json_object_get(w, "memory"));
        json_object_del(mem, "rss_kib");
        json_object_set_new(out, json_string_value(json_object_get(w, "name")), mem);
    }
    return out;
}

/* The stores have stopped changing (spilling is over, nothing is pinned) and the dashboard's
 * history has a sample of that state as its latest point. */
static bool quiet_and_sampled(void *arg)
{
    quiet_probe *p = arg;
    json_t *st = http_json(p->c, "/api/status");
    json_t *hist = http_json(p->c, "/api/history");
    bool ok = false;
    if (st != NULL && hist != NULL) {
        json_t *now = workers_memory(st);
        ok = p->last != NULL && json_equal(now, p->last);
        json_decref(p->last);
        p->last = now;
        size_t n = json_array_size(json_object_get(hist, "t"));
        size_t i;
        json_t *hw;
        json_array_foreach(json_object_get(hist, "workers"), i, hw)
        {
            json_t *mem = json_object_get(now, json_string_value(json_object_get(hw, "name")));
            /* Every figure the chart shows; and nothing pinned (a read or restore under way
             * after the job moves used and pinned again once it ends), and no spill under way
             * (its memory goes when the write ends). */
            static const char *const keys[][2] = {
                {"used", "used"}, {"pinned", "pinned"}, {"spilled", "spilled_bytes"}, {"capacity", "capacity"}};
            for (size_t j = 0; j < 4; j++)
                ok = ok && mem != NULL &&
                     json_integer_value(json_array_get(json_object_get(hw, keys[j][0]), n - 1)) ==
                         json_integer_value(json_object_get(mem, keys[j][1]));
            ok = ok && json_integer_value(json_object_get(mem, "pinned")) == 0 &&
                 json_integer_value(json_object_get(mem, "spilling_bytes")) == 0;
        }
    }
    json_decref(st);
    json_decref(hist);
    return ok;
}

static bool spilled_somewhere(void *arg)
{
    return e2e_memory_sum(arg, "spilled_bytes") > 0;
}

static void dashboard_shows_a_spilling_job(void)
{
    const char *pyargv[] = {SPW_PYTHON3, "-c", "import shutil,sys; sys.exit(0 if shutil.which('chromium') else 1)", NULL};
    if (h_run(pyargv, NULL) != 0) {
        fprintf(stderr, "SKIP: chromium is not installed (tests/run.sh installs it)\n");
        exit(77);
    }
    const char *const sargs[] = {"--http", "127.0.0.1:0", "--http-sample", "200", NULL};
    h_cluster *c = h_cluster_start(false, sargs);
    const char *a1[] = {"--slots", "2", "--store-capacity", "16M", "--name", "worker-a", NULL};
    const char *a2[] = {"--slots", "2", "--store-capacity", "16M", "--name", "worker-b", NULL};
    h_worker_start(c, a1);
    h_worker_start(c, a2);
    spillway *cl = e2e_connect(c);
    /* 48 MiB of results into 32 MiB of stores: they spill. */
    spillway_ref out[12];
    uint64_t gid = run_fill_job(cl, 12, 4u << 20, out);
    assert_true(h_eventually(spilled_somewhere, c, 20000));
    quiet_probe qp = {c, NULL};
    assert_true(h_eventually(quiet_and_sampled, &qp, 30000));
    json_decref(qp.last);

    char url[256];
    snprintf(url, sizeof url, "http://%s/", c->http);
    const char *dargs[] = {"dashboard", url, SPW_ARTIFACT_DIR, NULL};
    char *raw = NULL;
    json_t *dom = http_check(dargs, &raw, NULL);
    if (dom == NULL)
        fail_msg("dashboard check failed: %s", raw ? raw : "");
    free(raw);
    json_t *st = http_json(c, "/api/status");
    assert_non_null(st);
    assert_string_equal(json_string_value(json_object_get(dom, "error")), "");
    assert_true(json_integer_value(json_object_get(dom, "refreshes")) >= 1);
    assert_true(json_integer_value(json_object_get(dom, "canvases")) >= 3); /* dygraphs drew */
    assert_true(json_integer_value(json_object_get(dom, "objects")) >= 1);
    assert_true(json_integer_value(json_object_get(dom, "screenshot_bytes")) > 10000);
    /* Every worker, with the chart's latest point equal to /api/status. */
    json_t *cards = json_object_get(dom, "workers");
    assert_int_equal(json_array_size(cards), json_array_size(json_object_get(st, "workers")));
    size_t i;
    json_t *w;
    json_array_foreach(json_object_get(st, "workers"), i, w)
    {
        const char *name = json_string_value(json_object_get(w, "name"));
        json_t *card = NULL, *x;
        size_t k;
        json_array_foreach(cards, k, x)
            if (strcmp(json_string_value(json_object_get(x, "name")), name) == 0)
                card = x;
        if (card == NULL)
            fail_msg("no card for worker %s", name);
        json_t *mem = json_object_get(w, "memory");
        static const char *const keys[][2] = {
            {"used", "used"}, {"pinned", "pinned"}, {"spilled", "spilled_bytes"}, {"capacity", "capacity"}};
        for (size_t j = 0; j < 4; j++) {
            long long shown = strtoll(json_string_value(json_object_get(card, keys[j][0])), NULL, 10);
            if (shown != (long long)json_integer_value(json_object_get(mem, keys[j][1])))
                fail_msg("worker %s: the chart's latest %s is %lld, /api/status says %lld", name,
                         keys[j][0], shown, (long long)json_integer_value(json_object_get(mem, keys[j][1])));
        }
    }
    /* The finished graph at 100 %. */
    json_t *graphs = json_object_get(dom, "graphs");
    assert_int_equal(json_array_size(graphs), 1);
    json_t *g = json_array_get(graphs, 0);
    assert_int_equal(strtoll(json_string_value(json_object_get(g, "graph")), NULL, 10), (long long)gid);
    assert_string_equal(json_string_value(json_object_get(g, "pct")), "100");
    assert_string_equal(json_string_value(json_object_get(g, "finished")), "1");
    assert_string_equal(json_string_value(json_object_get(g, "done")), "12");
    assert_string_equal(json_string_value(json_object_get(g, "failed")), "0");
    json_decref(st);
    json_decref(dom);

    assert_int_equal(spillway_release_many(cl, out, 12), 0);
    E2E_FINISH(c, cl);
}

static const struct CMUnitTest tests[] = {
    H_CASE(running_state_and_graph_progress),
    H_CASE(http_metrics_and_api_match_ctl),
    H_CASE(http_memory_query_out_of_range_is_400_naming_it),
    H_CASE(http_history_keeps_workers_of_one_name_apart),
    H_CASE(http_history_top_lists_k_and_sums_all),
    H_CASE(graphs_of_two_clients_have_distinct_ids),
    H_CASE(http_token_when_asked),
    H_CASE(dashboard_shows_a_spilling_job),
};

SPW_TEST_MAIN(tests)
