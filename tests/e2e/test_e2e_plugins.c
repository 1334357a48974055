/* Uploaded plugins end to end: a client uploads a plugin and runs its functions on every worker;
 * a second client runs a changed version at the same time and each gets its own results; a
 * worker that joins after the upload runs its tasks; bytes that do not hash to the plugin's name
 * are refused; uploads are refused without a cluster secret (but for the scheduler's own user on
 * its local socket) or when turned off; a plugin with a wrong ABI, one that does not load and one
 * that crashes at load are refused, naming why; tasks of uploads go only to workers that run them;
 * the cache cap holds; a released plugin leaves the stores. Real daemons on 127.0.0.1. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../unit/test_main.h"
#include "e2e_util.h"
#include "spillway/proto.h"

/* libspillway's internal put (client_int.h), to store bytes under an id of our choosing. */
int spillway__put_object(spillway *c, spw_id id, const void *data, size_t len, uint64_t flags,
                         const char *site);

static const char *const wargs0[] = {"--slots", "1", "--store-capacity", "64M", "--name", "w0",
                                     NULL};
static const char *const wargs1[] = {"--slots", "1", "--store-capacity", "64M", "--name", "w1",
                                     NULL};

/* fn(x) of plugin p on the worker named worker (NULL: anywhere), as a u64. */
static uint64_t run_one(spillway *cl, spillway_plugin *p, const char *fn, const char *worker,
                        uint64_t x)
{
    char name[SPILLWAY_FN_MAX];
    assert_non_null(spillway_plugin_fn(p, fn, name, sizeof name));
    spillway_ref r;
    spillway_graph *g = spillway_graph_new(cl);
    if (worker != NULL)
        assert_int_equal(spillway_graph_place(g, worker), 0);
    spillway_arg a = spillway_arg_u64(x);
    assert_int_equal(spillway_task(g, name, &a, 1, SPILLWAY_KEEP, &r), 0);
    int rc = spillway_submit(g);
    spillway_graph_free(g);
    if (rc != 0)
        fail_msg("submit %s: %s: %s", name, spillway_strerror(rc), spillway_errmsg(cl));
    rc = spillway_wait(cl, &r, 1, 60000);
    if (rc != 0)
        fail_msg("%s: %s: %s", name, spillway_strerror(rc), spillway_errmsg(cl));
    uint64_t v = e2e_get_u64(cl, r);
    assert_int_equal(spillway_release(cl, r), 0);
    return v;
}

typedef struct plugin_seen_arg {
    h_cluster *c;
    const char *hash;
    size_t workers; /* that must list it */
} plugin_seen_arg;

/* spillway-ctl status lists the plugin of that hash under enough workers. */
static bool plugin_seen(void *arg)
{
    plugin_seen_arg *a = arg;
    json_t *st = e2e_ctl_json(a->c, "status");
    size_t seen = 0, i, k;
    json_t *w, *x;
    json_array_foreach(json_object_get(st, "workers"), i, w)
    json_array_foreach(json_object_get(w, "plugins"), k, x)
    seen += strcmp(json_string_value(json_object_get(x, "hash")), a->hash) == 0;
    json_decref(st);
    return seen >= a->workers;
}

/* A cluster (secret as asked, scheduler args) with worker w0, and w1 when two; *cl connected. */
static h_cluster *start(bool secret, const char *const *sched_args, bool two, spillway **cl)
{
    h_cluster *c = h_cluster_start(secret, sched_args);
    h_worker_start(c, wargs0);
    if (two)
        h_worker_start(c, wargs1);
    *cl = e2e_connect(c);
    return c;
}

static spillway_plugin *add(spillway *cl, const char *path)
{
    spillway_plugin *p = NULL;
    int rc = spillway_plugin_add(cl, path, &p);
    if (rc != 0)
        fail_msg("spillway_plugin_add %s: %s: %s", path, spillway_strerror(rc),
                 spillway_errmsg(cl));
    return p;
}

static void client_uploads_a_plugin_and_runs_it_everywhere(void)
{
    spillway *cl;
    h_cluster *c = start(true, NULL, true, &cl);
    spillway_plugin *p = add(cl, SPW_TEST_PLUGIN_VER1);
    assert_string_equal(spillway_plugin_name(p), "versioned");
    assert_int_equal(strlen(spillway_plugin_hash(p)), 64);
    assert_int_equal(run_one(cl, p, "scale", "w0", 7), 7001);
    assert_int_equal(run_one(cl, p, "scale", "w1", 8), 8001);
    /* Both workers report it, by hash; spillway-ctl plugins lists it once. */
    plugin_seen_arg a = {c, spillway_plugin_hash(p), 2};
    assert_true(h_eventually(plugin_seen, &a, 20000));
    json_t *pls = e2e_ctl_json(c, "plugins");
    assert_non_null(pls);
    json_t *list = json_object_get(pls, "plugins");
    assert_int_equal(json_array_size(list), 1);
    assert_string_equal(json_string_value(json_object_get(json_array_get(list, 0), "hash")),
                        spillway_plugin_hash(p));
    json_decref(pls);
    assert_int_equal(spillway_plugin_release(p), 0);
    E2E_FINISH(c, cl);
}

static void two_versions_run_side_by_side(void)
{
    h_cluster *c = h_cluster_start(true, NULL);
    h_worker_start(c, wargs0);
    h_worker_start(c, wargs1);
    spillway *a = e2e_connect(c), *b = e2e_connect(c);
    spillway_plugin *pa = add(a, SPW_TEST_PLUGIN_VER1), *pb = add(b, SPW_TEST_PLUGIN_VER2);
    assert_string_not_equal(spillway_plugin_hash(pa), spillway_plugin_hash(pb));
    /* Graphs of both in flight at once, on both workers. */
    enum { N = 40 };
    spillway_ref ra[N], rb[N];
    char fa[SPILLWAY_FN_MAX], fb[SPILLWAY_FN_MAX];
    spillway_plugin_fn(pa, "scale", fa, sizeof fa);
    spillway_plugin_fn(pb, "scale", fb, sizeof fb);
    spillway_graph *ga = spillway_graph_new(a), *gb = spillway_graph_new(b);
    for (int i = 0; i < N; i++) {
        spillway_arg x = spillway_arg_u64((uint64_t)i);
        assert_int_equal(spillway_task(ga, fa, &x, 1, SPILLWAY_KEEP, &ra[i]), 0);
        assert_int_equal(spillway_task(gb, fb, &x, 1, SPILLWAY_KEEP, &rb[i]), 0);
    }
    assert_int_equal(spillway_submit(ga), 0);
    assert_int_equal(spillway_submit(gb), 0);
    spillway_graph_free(ga);
    spillway_graph_free(gb);
    for (int i = 0; i < N; i++) {
        assert_int_equal(e2e_get_u64(a, ra[i]), (uint64_t)i * 1000 + 1);
        assert_int_equal(e2e_get_u64(b, rb[i]), (uint64_t)i * 1000 + 2);
    }
    assert_int_equal(spillway_release_many(a, ra, N), 0);
    assert_int_equal(spillway_release_many(b, rb, N), 0);
    assert_int_equal(spillway_plugin_release(pa), 0);
    assert_int_equal(spillway_plugin_release(pb), 0);
    spillway_close(a);
    spillway_close(b);
    assert_true(e2e_cluster_idle(c, 20000));
    assert_true(h_cluster_stop(c));
}

static void worker_started_after_the_upload_runs_its_tasks(void)
{
    spillway *cl;
    h_cluster *c = start(true, NULL, false, &cl);
    spillway_plugin *p = add(cl, SPW_TEST_PLUGIN_VER2);
    assert_int_equal(run_one(cl, p, "scale", "w0", 1), 1002);
    h_worker_start(c, wargs1);
    assert_int_equal(run_one(cl, p, "scale", "w1", 3), 3002);
    assert_int_equal(spillway_plugin_release(p), 0);
    E2E_STOP(c, cl);
}

static uint8_t *read_all(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    *len = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = malloc(*len);
    assert_non_null(b);
    assert_int_equal(fread(b, 1, *len, f), *len);
    fclose(f);
    return b;
}

static void bytes_that_do_not_match_the_hash_are_refused(void)
{
    spillway *cl;
    h_cluster *c = start(true, NULL, false, &cl);
    size_t len;
    uint8_t *b = read_all(SPW_TEST_PLUGIN_VER1, &len);
    uint8_t hash[PROTO_PLUGIN_HASH_LEN];
    proto_plugin_hash(b, len, hash);
    /* Stored under the plugin's object id, one byte changed: a corrupted transfer. */
    b[len / 2] ^= 0xff;
    assert_int_equal(spillway__put_object(cl, proto_plugin_obj_id(hash), b, len, 1, "test"), 0);
    b[len / 2] ^= 0xff;
    spillway_plugin *p = NULL;
    int rc = spillway_plugin_add_mem(cl, b, len, &p);
    assert_int_equal(rc, SPW_ECORRUPT);
    assert_null(p);
    if (strstr(spillway_errmsg(cl), "hash to") == NULL)
        fail_msg("errmsg: %s", spillway_errmsg(cl));
    free(b);
    E2E_STOP(c, cl);
}

/* An upload to a cluster started with secret and sched_args is refused SPW_EPERM, naming why. */
static void upload_refused(bool secret, const char *const *sched_args, const char *why)
{
    spillway *cl;
    h_cluster *c = start(secret, sched_args, false, &cl);
    spillway_plugin *p = NULL;
    assert_int_equal(spillway_plugin_add(cl, SPW_TEST_PLUGIN_VER1, &p), SPW_EPERM);
    assert_non_null(strstr(spillway_errmsg(cl), why));
    assert_null(p);
    E2E_STOP(c, cl);
}

static void uploads_are_refused_without_a_secret_or_when_off(void)
{
    upload_refused(false, NULL, "secret");
    const char *const off[] = {"--allow-plugin-upload", "no", NULL};
    upload_refused(true, off, "allow-plugin-upload");
}

/* Without a secret, a program of the scheduler's own user that connects over the scheduler's
 * local socket may upload (the same upload over TCP is refused, above), and runs the plugin. */
static void upload_allowed_over_the_local_socket_as_the_same_user(void)
{
    h_cluster *c = h_cluster_start(false, NULL);
    h_worker_start(c, wargs0);
    char addr[96];
    snprintf(addr, sizeof addr, "unix:@spillway-scheduler-%s", strrchr(c->addr, ':') + 1);
    spillway *cl = NULL;
    int rc = spillway_connect(addr, NULL, &cl);
    if (rc != 0)
        fail_msg("connect to %s: %s", addr, spillway_strerror(rc));
    spillway_plugin *p = add(cl, SPW_TEST_PLUGIN_VER1);
    assert_int_equal(run_one(cl, p, "scale", "w0", 4), 4001);
    assert_int_equal(spillway_plugin_release(p), 0);
    spillway_close(cl);
    assert_true(h_cluster_stop(c));
}

/* A worker with uploads off gets no task of an uploaded plugin (each would fail there): every
 * one runs on the other; with no worker left that runs uploads, a task waits --place-wait for
 * one, then fails naming why. */
static void tasks_of_uploads_skip_workers_with_uploads_off(void)
{
    const char *const sargs[] = {"--place-wait", "300", NULL};
    h_cluster *c = h_cluster_start(true, sargs);
    const char *const off[] = {"--slots", "2", "--store-capacity", "64M", "--name", "off",
                               "--allow-plugin-upload", "no", NULL};
    h_worker_start(c, off);
    h_worker_start(c, wargs0);
    spillway *cl = e2e_connect(c);
    spillway_plugin *p = add(cl, SPW_TEST_PLUGIN_VER1);
    enum { N = 40 };
    spillway_ref r[N];
    char fn[SPILLWAY_FN_MAX];
    spillway_plugin_fn(p, "scale", fn, sizeof fn);
    spillway_graph *g = spillway_graph_new(cl);
    for (int i = 0; i < N; i++) {
        spillway_arg x = spillway_arg_u64((uint64_t)i);
        assert_int_equal(spillway_task(g, fn, &x, 1, SPILLWAY_KEEP, &r[i]), 0);
    }
    assert_int_equal(spillway_submit(g), 0);
    spillway_graph_free(g);
    for (int i = 0; i < N; i++)
        assert_int_equal(e2e_get_u64(cl, r[i]), (uint64_t)i * 1000 + 1);
    assert_int_equal(spillway_release_many(cl, r, N), 0);
    /* Only w0 ever had it. */
    json_t *st = e2e_ctl_json(c, "status");
    json_t *wo = e2e_json_find(json_object_get(st, "workers"), "name", "off");
    assert_non_null(wo);
    assert_int_equal(json_array_size(json_object_get(wo, "plugins")), 0);
    json_decref(st);

    /* w0 goes: the task waits for a worker that runs uploads, then fails. */
    assert_int_equal(h_worker_kill(c, 1, SIGTERM), 0);
    spillway_ref one;
    g = spillway_graph_new(cl);
    spillway_arg x = spillway_arg_u64(1);
    assert_int_equal(spillway_task(g, fn, &x, 1, SPILLWAY_KEEP, &one), 0);
    assert_int_equal(spillway_submit(g), 0);
    spillway_graph_free(g);
    assert_int_equal(spillway_wait(cl, &one, 1, 60000), SPW_ENOWORKER);
    e2e_errmsg_has(cl, "allow-plugin-upload");
    assert_int_equal(spillway_release(cl, one), 0);
    assert_int_equal(spillway_plugin_release(p), 0);
    E2E_STOP(c, cl);
}

static void bad_plugins_are_refused_naming_why(void)
{
    spillway *cl;
    h_cluster *c = start(true, NULL, false, &cl);
    spillway_plugin *p = NULL;
    assert_int_equal(spillway_plugin_add(cl, SPW_TEST_BAD_PLUGIN, &p), SPW_EPLUGIN);
    if (strstr(spillway_errmsg(cl), "ABI version") == NULL)
        fail_msg("errmsg: %s", spillway_errmsg(cl));
    static const char text[] = "not a shared library at all";
    assert_int_equal(spillway_plugin_add_mem(cl, text, sizeof text, &p), SPW_EPLUGIN);
    if (strstr(spillway_errmsg(cl), "cannot be loaded") == NULL)
        fail_msg("errmsg: %s", spillway_errmsg(cl));
    assert_int_equal(spillway_plugin_add(cl, SPW_TEST_PLUGIN_CRASHLOAD, &p), SPW_EPLUGIN);
    if (strstr(spillway_errmsg(cl), "signal") == NULL)
        fail_msg("errmsg: %s", spillway_errmsg(cl));
    assert_null(p);
    /* The worker lived through it, and runs a good one. */
    p = add(cl, SPW_TEST_PLUGIN_VER1);
    assert_int_equal(run_one(cl, p, "scale", "w0", 5), 5001);
    assert_int_equal(spillway_plugin_release(p), 0);
    /* A name of a plugin nobody added is refused at submit. */
    spillway_graph *g = spillway_graph_new(cl);
    spillway_ref r;
    assert_int_equal(spillway_task(g, "scale@0123456789abcdef", NULL, 0, SPILLWAY_KEEP, &r), 0);
    assert_int_equal(spillway_submit(g), SPW_ENOFUNC);
    spillway_graph_free(g);
    E2E_STOP(c, cl);
}

/* The cache holds one of the plugins at a time: the unused one goes for the next, and the
 * worker's list says so; a released plugin leaves every store. */
static void cache_cap_holds_and_released_plugins_go(void)
{
    h_cluster *c = h_cluster_start(true, NULL);
    size_t len;
    free(read_all(SPW_TEST_PLUGIN_VER1, &len));
    char cap[32];
    snprintf(cap, sizeof cap, "%zu", len + len / 2);
    const char *const args[] = {"--slots", "1", "--store-capacity", "64M", "--name", "w0",
                                "--plugin-cache-max", cap, NULL};
    h_worker_start(c, args);
    spillway *cl = e2e_connect(c);
    spillway_plugin *p1 = add(cl, SPW_TEST_PLUGIN_VER1);
    assert_int_equal(run_one(cl, p1, "scale", "w0", 1), 1001);
    spillway_plugin *p2 = add(cl, SPW_TEST_PLUGIN_VER2);
    assert_int_equal(run_one(cl, p2, "scale", "w0", 1), 1002);
    assert_int_equal(run_one(cl, p1, "scale", "w0", 2), 2001); /* back again, p2 made room */
    char h1[65];
    snprintf(h1, sizeof h1, "%s", spillway_plugin_hash(p1));
    assert_int_equal(spillway_plugin_release(p1), 0);
    assert_int_equal(spillway_plugin_release(p2), 0);
    /* Nothing references them: their objects leave the stores. */
    assert_true(e2e_cluster_idle(c, 20000));
    json_t *pls = e2e_ctl_json(c, "plugins");
    assert_non_null(pls);
    assert_int_equal(json_array_size(json_object_get(pls, "plugins")), 0);
    json_decref(pls);
    /* The worker caches at most one of the two. */
    json_t *st = e2e_ctl_json(c, "status");
    json_t *wl = json_object_get(json_array_get(json_object_get(st, "workers"), 0), "plugins");
    assert_true(json_array_size(wl) <= 1);
    json_decref(st);
    E2E_STOP(c, cl);
}

static const struct CMUnitTest tests[] = {
    H_CASE(client_uploads_a_plugin_and_runs_it_everywhere),
    H_CASE(two_versions_run_side_by_side),
    H_CASE(worker_started_after_the_upload_runs_its_tasks),
    H_CASE(bytes_that_do_not_match_the_hash_are_refused),
    H_CASE(uploads_are_refused_without_a_secret_or_when_off),
    H_CASE(upload_allowed_over_the_local_socket_as_the_same_user),
    H_CASE(tasks_of_uploads_skip_workers_with_uploads_off),
    H_CASE(bad_plugins_are_refused_naming_why),
    H_CASE(cache_cap_holds_and_released_plugins_go),
};

SPW_TEST_MAIN(tests)
