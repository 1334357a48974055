/* A --plugin file replaced under running workers changes nothing a job computes: moved over with
 * mv (a new build renamed onto the path), or rewritten in place with cp (what `make install`
 * does), and then executors restarted. Workers load plugins by content, from copies made at
 * start, so every task keeps running the bytes its worker started with. The plugin is built
 * twice from one source (plugin_versioned.c), version 1 and version 2, whose functions say which
 * ran. Told to reload (SIGHUP), a worker takes the changed file, again by content. Real daemons on
 * 127.0.0.1. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../unit/test_main.h"
#include "e2e_util.h"
#include "spillway/proto.h"

/* Copies file from to to: into a new file renamed over to (mv), or over its bytes in place
 * (cp: truncated, then written). */
static void copy_file(const char *from, const char *to, bool in_place)
{
    char tmp[600];
    snprintf(tmp, sizeof tmp, "%s.new", to);
    FILE *in = fopen(from, "rb");
    assert_non_null(in);
    int fd = open(in_place ? to : tmp, O_WRONLY | O_CREAT | O_TRUNC, 0755);
    assert_true(fd >= 0);
    char buf[65536];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, in)) > 0)
        assert_int_equal(write(fd, buf, n), (ssize_t)n);
    fclose(in);
    assert_int_equal(close(fd), 0);
    if (!in_place)
        assert_int_equal(rename(tmp, to), 0);
}

/* Runs n tasks of "version" on the worker named worker: how many answered v, and how many
 * answered anything else or failed. */
static void run_versions(spillway *cl, const char *worker, int n, uint64_t v, int *same,
                         int *other)
{
    spillway_ref refs[64];
    assert_true(n <= 64);
    spillway_graph *g = spillway_graph_new(cl);
    assert_int_equal(spillway_graph_place(g, worker), 0);
    for (int i = 0; i < n; i++)
        assert_int_equal(spillway_task(g, "version", NULL, 0, SPILLWAY_KEEP, &refs[i]), 0);
    assert_int_equal(spillway_submit(g), 0);
    spillway_graph_free(g);
    *same = *other = 0;
    for (int i = 0; i < n; i++) {
        void *data;
        size_t len;
        uint64_t got = 0;
        int rc = spillway_get(cl, refs[i], 60000, &data, &len);
        if (rc == 0 && len == 8)
            memcpy(&got, data, 8);
        if (rc == 0)
            spillway_free(data);
        if (rc == 0 && got == v)
            (*same)++;
        else
            (*other)++;
    }
    assert_int_equal(spillway_release_many(cl, refs, (size_t)n), 0);
}

/* Kills the executor of the worker named worker with a task that crashes it: a new one starts. */
static void restart_executor(spillway *cl, const char *worker)
{
    spillway_ref r;
    spillway_graph *g = spillway_graph_new(cl);
    assert_int_equal(spillway_graph_place(g, worker), 0);
    assert_int_equal(spillway_task(g, "crash", NULL, 0, SPILLWAY_KEEP, &r), 0);
    assert_int_equal(spillway_submit(g), 0);
    spillway_graph_free(g);
    assert_int_equal(spillway_wait(cl, &r, 1, 60000), SPW_EEXECCRASH);
    assert_int_equal(spillway_release(cl, r), 0);
}

static void replaced_plugin_changes_nothing(bool in_place)
{
    h_cluster *c = h_cluster_start(false, NULL);
    char path[512];
    snprintf(path, sizeof path, "%s/plugin.so", c->dir);
    copy_file(SPW_TEST_PLUGIN_VER1, path, false);
    const char *const w0[] = {"--slots", "1", "--store-capacity", "64M", "--name", "w0",
                              "--plugin", path, NULL};
    const char *const w1[] = {"--slots", "1", "--store-capacity", "64M", "--name", "w1",
                              "--plugin", path, NULL};
    h_worker_start(c, w0);
    h_worker_start(c, w1);
    spillway *cl = e2e_connect(c);
    int same, other;
    run_versions(cl, "w0", 16, 1, &same, &other);
    assert_int_equal(same, 16);
    run_versions(cl, "w1", 16, 1, &same, &other);
    assert_int_equal(same, 16);

    copy_file(SPW_TEST_PLUGIN_VER2, path, in_place);
    /* Running executors, then a restarted one on w0: all still run version 1. */
    run_versions(cl, "w1", 16, 1, &same, &other);
    if (other != 0)
        fail_msg("after the file was replaced, %d of 16 tasks on w1 did not answer 1", other);
    restart_executor(cl, "w0");
    run_versions(cl, "w0", 16, 1, &same, &other);
    if (other != 0)
        fail_msg("after the file was replaced, %d of 16 tasks on w0's new executor did not "
                 "answer 1",
                 other);
    run_versions(cl, "w1", 16, 1, &same, &other);
    assert_int_equal(other, 0);
    spillway_close(cl);
    assert_true(h_cluster_stop(c));
}

static void plugin_moved_over_under_running_workers_changes_nothing(void)
{
    replaced_plugin_changes_nothing(false);
}

static void plugin_copied_over_under_running_workers_changes_nothing(void)
{
    replaced_plugin_changes_nothing(true);
}

/* The BLAKE2b-256 hash of a file's bytes, in hex: the name status gives a plugin. */
static void file_hash(const char *path, char hex[PROTO_PLUGIN_HEX_LEN + 1])
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    assert_int_equal(fseek(f, 0, SEEK_END), 0);
    size_t len = (size_t)ftell(f);
    rewind(f);
    uint8_t *b = malloc(len);
    assert_non_null(b);
    assert_int_equal(fread(b, 1, len, f), len);
    fclose(f);
    uint8_t hash[PROTO_PLUGIN_HASH_LEN];
    proto_plugin_hash(b, len, hash);
    proto_plugin_hex(hash, hex);
    free(b);
}

typedef struct hash_shown {
    h_cluster *c;
    const char *hash;
} hash_shown;

/* spillway-ctl status lists a plugin of that hash for the cluster's one worker. */
static bool status_shows(void *arg)
{
    hash_shown *a = arg;
    json_t *st = e2e_ctl_json(a->c, "status");
    json_t *w = json_array_get(json_object_get(st, "workers"), 0);
    bool seen = e2e_json_find(json_object_get(w, "plugins"), "hash", a->hash) != NULL;
    json_decref(st);
    return seen;
}

/* Told to reload (SIGHUP, what `systemctl reload` sends), a worker reads its --plugin file
 * again: tasks from then on run the new bytes and status shows their hash; a file that no longer
 * loads leaves it running the bytes it had. */
static void reload_runs_the_changed_plugin(void)
{
    h_cluster *c = h_cluster_start(false, NULL);
    char path[512];
    snprintf(path, sizeof path, "%s/plugin.so", c->dir);
    copy_file(SPW_TEST_PLUGIN_VER1, path, false);
    const char *const w0[] = {"--slots", "2", "--store-capacity", "64M", "--name", "w0",
                              "--plugin", path, NULL};
    h_worker_start(c, w0);
    spillway *cl = e2e_connect(c);
    int same, other;
    char h1[PROTO_PLUGIN_HEX_LEN + 1], h2[PROTO_PLUGIN_HEX_LEN + 1];
    file_hash(SPW_TEST_PLUGIN_VER1, h1);
    file_hash(SPW_TEST_PLUGIN_VER2, h2);
    assert_true(h_eventually(status_shows, &(hash_shown){c, h1}, 20000));

    copy_file(SPW_TEST_PLUGIN_VER2, path, true);
    run_versions(cl, "w0", 16, 1, &same, &other);
    assert_int_equal(same, 16); /* not told yet */
    assert_int_equal(kill(c->workers[0].pid, SIGHUP), 0);
    assert_true(h_eventually(status_shows, &(hash_shown){c, h2}, 20000));
    run_versions(cl, "w0", 16, 2, &same, &other);
    if (other != 0)
        fail_msg("after the reload, %d of 16 tasks did not answer 2", other);
    assert_false(status_shows(&(hash_shown){c, h1}));

    /* A file that does not load: logged, and version 2 goes on running. */
    e2e_write_file(path, "not a shared library", 0755);
    assert_int_equal(kill(c->workers[0].pid, SIGHUP), 0);
    assert_true(e2e_logged(&c->workers[0], "not reloaded", 20000));
    run_versions(cl, "w0", 16, 2, &same, &other);
    assert_int_equal(same, 16);
    assert_true(status_shows(&(hash_shown){c, h2}));
    spillway_close(cl);
    assert_true(h_cluster_stop(c));
}

static const struct CMUnitTest tests[] = {
    H_CASE(plugin_moved_over_under_running_workers_changes_nothing),
    H_CASE(plugin_copied_over_under_running_workers_changes_nothing),
    H_CASE(reload_runs_the_changed_plugin),
};

SPW_TEST_MAIN(tests)
