/* Seeing a cluster work: the running state, per-graph progress (spillway-ctl jobs and
 * spillway_graph_status). Real daemons on 127.0.0.1; every wait is a bounded poll of state the
 * scheduler reports, never a sleep standing in for an event. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../unit/test_main.h"
#include "e2e_util.h"

#define NTASKS 24
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

static void running_state_and_graph_progress(void **state)
{
    (void)state;
    h_cluster c;
    h_cluster_start(&c, false, NULL);
    const char *const args[] = {"--slots", "2", "--store-capacity", "64M", NULL};
    h_worker_start(&c, args);
    h_worker_start(&c, args);
    spillway *cl = e2e_connect(&c);

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
    assert_int_equal(spillway_submit(g), 0);
    spillway_graph_free(g);

    /* status: `running` is set once an executor has a task, not only `assigned`. */
    assert_true(h_eventually(some_running, &c, 20000));

    /* jobs: the graph, its submitter and call site, and `done` growing while it runs. */
    json_t *doc = e2e_ctl_json(&c, "jobs");
    json_t *jg = only_graph(doc);
    assert_non_null(jg);
    assert_int_equal(json_integer_value(json_object_get(jg, "graph")), (json_int_t)gid);
    assert_string_equal(json_string_value(json_object_get(jg, "call_site")), site);
    assert_int_equal(jget(jg, "tasks", "total"), NTASKS);
    assert_int_equal(jget(jg, "client", "pid"), (json_int_t)getpid());
    json_decref(doc);
    progress_probe p = {&c, 0, 0, false};
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
    doc = e2e_ctl_json(&c, "status");
    assert_int_equal(jget(doc, "tasks", "running"), 0);
    assert_int_equal(jget(doc, "tasks", "assigned"), 0);
    json_decref(doc);

    /* jobs --watch --json: one compact document per line, one line per refresh. */
    const char *argv[] = {h_bin("spillway-ctl"), "--scheduler", c.addr, "--json", "jobs",
                          "--watch", "--interval", "50", "--count", "3", NULL};
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
    const char *argv2[] = {h_bin("spillway-ctl"), "--scheduler", c.addr, "jobs", "--watch",
                           "--count", "1", NULL};
    assert_int_equal(h_run(argv2, &text), 0);
    assert_non_null(strstr(text, "done=" NTASKS_STR));
    assert_non_null(strstr(text, " finished"));
    assert_null(strstr(text, "\033["));
    free(text);

    assert_int_equal(spillway_release_many(cl, out, NTASKS), 0);
    assert_true(e2e_cluster_idle(&c, 20000));
    spillway_close(cl);
    assert_true(h_cluster_stop(&c));
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(running_state_and_graph_progress),
};

SPW_TEST_MAIN(tests)
