/* spillway-ctl memory end to end: known objects with known references, checked through the
 * JSON document and the table. Real daemons on 127.0.0.1. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../unit/test_main.h"
#include "e2e_util.h"

static char site_a[64], site_t2[64];

static json_t *find_object(json_t *doc, spillway_ref r)
{
    char hex[33];
    return e2e_json_find(json_object_get(doc, "objects"), "id", spillway_ref_hex(r, hex));
}

static json_int_t ref(json_t *o, const char *kind)
{
    return json_integer_value(json_object_get(json_object_get(o, "refs"), kind));
}

static bool has_holder(json_t *o, const char *kind, const char *who_part)
{
    size_t i;
    json_t *h;
    json_array_foreach(json_object_get(o, "holders"), i, h)
    {
        if (strcmp(json_string_value(json_object_get(h, "kind")), kind) == 0 &&
            strstr(json_string_value(json_object_get(h, "who")), who_part) != NULL)
            return true;
    }
    return false;
}

typedef struct probe {
    h_cluster *c;
    spillway_ref r;
} probe;

static bool some_spilled(void *arg)
{
    json_t *doc = e2e_ctl_json(arg, "memory");
    bool found = false;
    size_t i;
    json_t *o;
    json_array_foreach(json_object_get(doc, "objects"), i, o)
    {
        size_t l;
        json_t *loc;
        json_array_foreach(json_object_get(o, "locations"), l, loc)
            found = found || strcmp(json_string_value(json_object_get(loc, "state")), "spilled") == 0;
    }
    json_decref(doc);
    return found;
}

static bool listing_empty(void *arg)
{
    json_t *doc = e2e_ctl_json(arg, "memory");
    bool empty = doc != NULL && json_array_size(json_object_get(doc, "objects")) == 0;
    json_decref(doc);
    return empty;
}

static json_t *ctl_memory(h_cluster *c, const char *const *extra)
{
    const char *argv[16];
    int n = 0;
    argv[n++] = h_bin("spillway-ctl");
    argv[n++] = "--scheduler";
    argv[n++] = c->addr;
    argv[n++] = "--json";
    argv[n++] = "memory";
    for (int i = 0; extra != NULL && extra[i] != NULL; i++)
        argv[n++] = extra[i];
    argv[n] = NULL;
    char *out = NULL;
    int rc = h_run(argv, &out);
    json_t *doc = rc == 0 ? json_loads(out, 0, NULL) : NULL;
    if (doc == NULL)
        fprintf(stderr, "ctl memory failed (%d): %s\n", rc, out ? out : "");
    free(out);
    return doc;
}

static void memory_lists_every_object_with_its_holders(void)
{
    h_cluster *c = h_cluster_start(false, NULL);
    const char *const args[] = {"--slots", "1", "--store-capacity", "16M",
                                "--plugin", SPW_TEST_PLUGIN, NULL};
    h_workers_start(c, 2, args);
    spillway *cl = e2e_connect(c);
    uint8_t *buf = calloc(1, 4u << 20);
    /* The task t2 waits on runs until the test creates this file: the listings below see t2
     * pending however slow the machine is. */
    char go[512];
    snprintf(go, sizeof go, "%s/go", c->dir);

    /* A client handle, which a pending task also uses. */
    spillway_ref a;
    snprintf(site_a, sizeof site_a, "%s:%d", __FILE__, __LINE__ + 1);
    assert_int_equal(spillway_put(cl, buf, 1u << 20, &a), 0);
    spillway_graph *g = spillway_graph_new(cl);
    spillway_ref t1, t2;
    spillway_arg sl[2] = {spillway_arg_bytes(go, strlen(go)), spillway_arg_u64(120000)};
    assert_int_equal(spillway_task(g, "wait_file", sl, 2, 0, &t1), 0);
    spillway_arg ca[2] = {spillway_arg_ref(a), spillway_arg_ref(t1)};
    snprintf(site_t2, sizeof site_t2, "%s:%d", __FILE__, __LINE__ + 1);
    assert_int_equal(spillway_task(g, "concat", ca, 2, SPILLWAY_KEEP, &t2), 0);
    E2E_SUBMIT(g);
    /* A broadcast object, on both nodes. */
    spillway_ref b;
    memset(buf, 1, 2u << 20);
    assert_int_equal(spillway_scatter(cl, buf, 2u << 20, 0, &b), 0);
    /* A view pins an object. */
    spillway_ref p;
    memset(buf, 2, 1u << 20);
    assert_int_equal(spillway_put(cl, buf, (1u << 20) + 1, &p), 0);
    spillway_view v;
    assert_int_equal(spillway_get_view(cl, p, 10000, &v), 0);
    /* Enough data to make the 16 MiB stores spill. */
    spillway_ref fill[6];
    for (int i = 0; i < 6; i++) {
        memset(buf, 10 + i, 4u << 20);
        assert_int_equal(spillway_put(cl, buf, 4u << 20, &fill[i]), 0);
    }
    assert_true(h_eventually(some_spilled, c, 20000));

    json_t *doc = ctl_memory(c, NULL);
    assert_non_null(doc);
    json_t *oa = find_object(doc, a);
    assert_non_null(oa);
    assert_int_equal(json_integer_value(json_object_get(oa, "size")), 1u << 20);
    assert_string_equal(json_string_value(json_object_get(oa, "state")), "ready");
    assert_string_equal(json_string_value(json_object_get(oa, "call_site")), site_a);
    assert_int_equal(ref(oa, "CLIENT"), 1);
    assert_int_equal(ref(oa, "TASK_ARG"), 1);
    assert_true(has_holder(oa, "CLIENT", "client "));
    assert_true(has_holder(oa, "TASK_ARG", "concat waiting"));
    assert_int_equal(json_integer_value(json_object_get(json_object_get(oa, "owner"), "pid")),
                     getpid());
    json_t *ot2 = find_object(doc, t2);
    assert_non_null(ot2);
    assert_string_equal(json_string_value(json_object_get(ot2, "state")), "pending");
    assert_string_equal(json_string_value(json_object_get(ot2, "task")), "concat");
    assert_string_equal(json_string_value(json_object_get(ot2, "call_site")), site_t2);
    assert_int_equal(ref(ot2, "OUTPUT"), 1);
    json_t *ob = find_object(doc, b);
    assert_non_null(ob);
    assert_int_equal(ref(ob, "BROADCAST"), 1);
    assert_int_equal(ref(ob, "CLIENT"), 0);
    assert_int_equal(json_array_size(json_object_get(ob, "locations")), 2);
    json_t *op = find_object(doc, p);
    assert_non_null(op);
    assert_int_equal(ref(op, "PINNED"), 1);
    assert_true(has_holder(op, "PINNED", "worker "));
    /* Spilled objects say so, with their stored size. */
    int spilled = 0;
    size_t i;
    json_t *o;
    json_array_foreach(json_object_get(doc, "objects"), i, o)
    {
        json_t *loc = json_array_get(json_object_get(o, "locations"), 0);
        if (loc != NULL && strstr(json_string_value(json_object_get(loc, "state")), "spilled")) {
            spilled++;
            assert_true(json_integer_value(json_object_get(o, "stored_size")) > 0);
            /* Zeros and constant bytes compress: the copy on disk is smaller. */
            assert_true(json_integer_value(json_object_get(o, "stored_size")) <
                        json_integer_value(json_object_get(o, "size")));
        }
    }
    assert_true(spilled > 0);
    /* Nodes and totals. */
    assert_int_equal(json_array_size(json_object_get(doc, "nodes")), 2);
    json_t *tot = json_object_get(doc, "totals");
    json_int_t nobj = json_integer_value(json_object_get(tot, "objects"));
    json_int_t nbytes = json_integer_value(json_object_get(tot, "bytes"));
    assert_int_equal(nobj, (json_int_t)json_array_size(json_object_get(doc, "objects")));
    assert_true(json_integer_value(json_object_get(tot, "spilled_bytes")) > 0);
    json_decref(doc);

    /* Groups whose keys partition the objects sum to the totals. */
    static const char *const partitions[] = {"owner", "call-site"};
    for (int k = 0; k < 2; k++) {
        const char *extra[] = {"--group-by", partitions[k], NULL};
        json_t *gd = ctl_memory(c, extra);
        assert_non_null(gd);
        json_int_t so = 0, sb = 0;
        json_t *gr;
        json_array_foreach(json_object_get(gd, "groups"), i, gr)
        {
            so += json_integer_value(json_object_get(gr, "objects"));
            sb += json_integer_value(json_object_get(gr, "bytes"));
        }
        /* Compare with this listing's own totals. */
        json_t *t = json_object_get(gd, "totals");
        assert_int_equal(so, json_integer_value(json_object_get(t, "objects")));
        assert_int_equal(sb, json_integer_value(json_object_get(t, "bytes")));
        json_decref(gd);
    }
    (void)nbytes;
    /* --limit, --stats-only. */
    const char *lim[] = {"--limit", "2", "--sort-by", "size", NULL};
    json_t *ld = ctl_memory(c, lim);
    assert_int_equal(json_array_size(json_object_get(ld, "objects")), 2);
    assert_true(json_integer_value(json_object_get(json_array_get(json_object_get(ld, "objects"), 0), "size")) >=
                json_integer_value(json_object_get(json_array_get(json_object_get(ld, "objects"), 1), "size")));
    json_decref(ld);
    const char *so_args[] = {"--stats-only", NULL};
    json_t *sd = ctl_memory(c, so_args);
    assert_null(json_object_get(sd, "objects"));
    assert_non_null(json_object_get(sd, "nodes"));
    json_decref(sd);

    /* The table has its columns. */
    const char *targv[] = {h_bin("spillway-ctl"), "--scheduler", c->addr, "memory", NULL};
    char *text = NULL;
    assert_int_equal(h_run(targv, &text), 0);
    static const char *const cols[] = {"ID", "SIZE", "STORED", "STATE", "WHERE", "REFS", "OWNER",
                                       "CALL SITE", "AGE", "NODE", "CAPACITY", "SPILLED",
                                       "RESTORES", "total:"};
    for (size_t k = 0; k < sizeof cols / sizeof cols[0]; k++)
        if (strstr(text, cols[k]) == NULL)
            fail_msg("table lacks column %s:\n%s", cols[k], text);
    assert_non_null(strstr(text, "BROADCAST=1"));
    assert_non_null(strstr(text, "spilled"));
    free(text);
    const char *bad[] = {h_bin("spillway-ctl"), "--scheduler", c->addr, "memory",
                         "--group-by",          "colour",      NULL};
    assert_int_equal(h_run(bad, &text), 2);
    free(text);

    /* Let t1 finish: t2 runs and its output is listed until released. */
    int gofd = open(go, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
    assert_true(gofd >= 0);
    close(gofd);
    void *t2out;
    size_t t2len;
    assert_int_equal(spillway_get(cl, t2, 60000, &t2out, &t2len), 0);
    assert_int_equal(t2len, 1u << 20);
    spillway_free(t2out);

    /* After release: nothing. */
    spillway_view_release(cl, &v);
    spillway_ref all[] = {a, t2, b, p, fill[0], fill[1], fill[2], fill[3], fill[4], fill[5]};
    assert_int_equal(spillway_release_many(cl, all, 10), 0);
    assert_true(h_eventually(listing_empty, c, 20000));
    spillway_close(cl);
    free(buf);
    E2E_STOP(c, NULL);
}

/* A scheduler with a 64 KiB --max-frame, one worker, and n objects of 1,100 bytes put (over the
 * 1 KiB inline limit: in the store, listed by the directory) into *refs (heap; the caller
 * frees it after releasing them). */
static spillway *small_frame_cluster_with_puts(h_cluster **cp, int n, spillway_ref **refs)
{
    const char *const sargs[] = {"--max-frame", "64K", "--chunk-size", "16K", "--inline-limit",
                                 "1K", NULL};
    h_cluster *c = *cp = h_cluster_start(false, sargs);
    const char *const wargs[] = {"--slots", "1", "--store-capacity", "16M", NULL};
    h_worker_start(c, wargs);
    spillway *cl = e2e_connect(c);
    *refs = calloc((size_t)n, sizeof **refs);
    assert_non_null(*refs);
    uint8_t val[1100];
    for (int i = 0; i < n; i++) {
        memset(val, i, sizeof val);
        assert_int_equal(spillway_put(cl, val, sizeof val, &(*refs)[i]), 0);
    }
    return cl;
}

/* A scheduler run with a small --max-frame still lists every object: the listing's frames
 * are cut to fit the frame limit, not dropped whole when a batch of records outgrows it. */
static void memory_lists_every_object_under_a_small_max_frame(void)
{
    h_cluster *c;
    /* Records of a thousand objects take well over 64 KiB. */
    enum { N = 1000 };
    spillway_ref *refs;
    spillway *cl = small_frame_cluster_with_puts(&c, N, &refs);
    json_t *doc = ctl_memory(c, NULL);
    assert_non_null(doc);
    assert_int_equal(json_array_size(json_object_get(doc, "objects")), N);
    assert_int_equal(json_integer_value(json_object_get(json_object_get(doc, "totals"), "objects")),
                     N);
    json_decref(doc);
    assert_int_equal(spillway_release_many(cl, refs, N), 0);
    assert_true(h_eventually(listing_empty, c, 20000));
    free(refs);
    E2E_STOP(c, cl);
}

/* A store whose object list outgrows the scheduler's --max-frame is still listed whole, with
 * what only the store knows: the worker sends its list in frames of bounded size (OBJ_LIST
 * with more = 1 but for the last), where one frame of all of it was refused and the query
 * ended without that worker ("a worker did not answer", every location "unknown"). */
static void memory_lists_a_store_whose_list_outgrows_a_frame(void)
{
    h_cluster *c;
    /* A store's record of an object takes over 20 bytes: 4000 of them well over 64 KiB. */
    enum { N = 4000 };
    spillway_ref *refs;
    spillway *cl = small_frame_cluster_with_puts(&c, N, &refs);
    json_t *doc = ctl_memory(c, NULL);
    assert_non_null(doc);
    assert_true(json_is_true(json_object_get(json_object_get(doc, "totals"), "complete")));
    json_t *objs = json_object_get(doc, "objects");
    assert_int_equal(json_array_size(objs), N);
    size_t i;
    json_t *o;
    json_array_foreach(objs, i, o)
    {
        json_t *locs = json_object_get(o, "locations");
        assert_int_equal(json_array_size(locs), 1);
        /* memory or spilled, as the store said; "unknown" is the directory's guess */
        assert_string_not_equal(
            json_string_value(json_object_get(json_array_get(locs, 0), "state")), "unknown");
    }
    json_decref(doc);
    assert_int_equal(spillway_release_many(cl, refs, N), 0); /* cut to fit the frame */
    assert_true(h_eventually(listing_empty, c, 20000));
    free(refs);
    E2E_STOP(c, cl);
}

static const struct CMUnitTest tests[] = {
    H_CASE(memory_lists_every_object_with_its_holders),
    H_CASE(memory_lists_every_object_under_a_small_max_frame),
    H_CASE(memory_lists_a_store_whose_list_outgrows_a_frame),
};

SPW_TEST_MAIN(tests)
