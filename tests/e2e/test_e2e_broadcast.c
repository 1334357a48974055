/* End-to-end tests of broadcast scatter, automatic puts, map_blocks and bounded in-flight
 * memory: the Dask and Rayon failures, made impossible. Real daemons on 127.0.0.1. */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <xxhash.h>

#include "../unit/test_main.h"
#include "e2e_util.h"

static json_t *memory_doc(h_cluster *c)
{
    return e2e_ctl_json(c, "memory");
}

/* Objects and bytes each node's store holds, from the store's own figures. */
static void node_figures(h_cluster *c, int node, uint64_t *objects, uint64_t *used)
{
    json_t *st = e2e_ctl_json(c, "status");
    json_t *w = json_array_get(json_object_get(st, "workers"), (size_t)node);
    json_t *m = json_object_get(w, "memory");
    *objects = (uint64_t)json_integer_value(json_object_get(m, "objects_in_memory"));
    *used = (uint64_t)json_integer_value(json_object_get(m, "used"));
    json_decref(st);
}

typedef struct used_bound {
    h_cluster *c;
    uint64_t max;
} used_bound;

/* Whether both nodes' stores use at most b->max bytes. */
static bool stores_within(void *arg)
{
    const used_bound *b = arg;
    for (int node = 0; node < 2; node++) {
        uint64_t objects, used;
        node_figures(b->c, node, &objects, &used);
        if (used > b->max)
            return false;
    }
    return true;
}

static h_cluster *start_named(int n, const char *cap)
{
    h_cluster *c = h_cluster_start(false, NULL);
    for (int i = 0; i < n; i++) {
        char name[32];
        snprintf(name, sizeof name, "w%d", i);
        const char *const args[] = {"--slots", "1", "--store-capacity", cap, "--name", name, NULL};
        h_worker_start(c, args);
    }
    return c;
}

static uint64_t checksum_on(spillway *cl, spillway_ref r, const char *worker)
{
    spillway_graph *g = spillway_graph_new(cl);
    spillway_graph_place(g, worker);
    spillway_ref out;
    spillway_arg a = spillway_arg_ref(r);
    assert_int_equal(spillway_task(g, "checksum", &a, 1, SPILLWAY_KEEP, &out), 0);
    E2E_SUBMIT(g);
    uint64_t v = e2e_get_u64(cl, out);
    assert_int_equal(spillway_release(cl, out), 0);
    return v;
}

static void broadcast_to_four_workers_delivers_identical_bytes(void)
{
    h_cluster *c = start_named(4, "64M");
    spillway *cl = e2e_connect(c);
    size_t n = (16u << 20) + 12345;
    uint8_t *data = malloc(n);
    for (size_t i = 0; i < n; i++)
        data[i] = (uint8_t)(i * 2654435761u >> 13);
    spillway_ref r;
    assert_int_equal(spillway_scatter(cl, data, n, 0, &r), 0);
    /* Every node holds it once, in memory, before any task ran. */
    json_t *mem = memory_doc(c);
    json_t *objs = json_object_get(mem, "objects");
    assert_int_equal(json_array_size(objs), 1);
    json_t *o = json_array_get(objs, 0);
    assert_int_equal(json_array_size(json_object_get(o, "locations")), 4);
    assert_int_equal(json_integer_value(json_object_get(json_object_get(o, "refs"), "BROADCAST")), 1);
    assert_int_equal(json_integer_value(json_object_get(json_object_get(o, "refs"), "CLIENT")), 0);
    json_decref(mem);
    /* And the bytes are the same everywhere. */
    uint64_t want = XXH3_64bits(data, n);
    for (int i = 0; i < 4; i++) {
        char name[8];
        snprintf(name, sizeof name, "w%d", i);
        assert_int_equal(checksum_on(cl, r, name), want);
    }
    assert_int_equal(spillway_release(cl, r), 0);
    assert_true(e2e_cluster_idle(c, 20000));
    spillway_close(cl);
    free(data);
    E2E_STOP(c, NULL);
}

/* More copies than any fixed-size list in the scheduler or the client once held (8): the
 * memory listing shows every one, each on a different node, and a task on the last worker reads
 * its own copy. Small stores and one slot each, so ten workers fit a two-core machine under the
 * sanitizers. */
static void broadcast_to_ten_workers_lists_every_location(void)
{
    enum { NW = 10 };
    h_cluster *c = start_named(NW, "8M");
    spillway *cl = e2e_connect(c);
    size_t n = (1u << 20) + 77;
    uint8_t *data = malloc(n);
    for (size_t i = 0; i < n; i++)
        data[i] = (uint8_t)(i * 40503u >> 7);
    spillway_ref r;
    assert_int_equal(spillway_scatter(cl, data, n, 0, &r), 0);
    json_t *mem = memory_doc(c);
    json_t *nodes = json_object_get(mem, "nodes");
    assert_int_equal(json_array_size(nodes), NW);
    json_t *objs = json_object_get(mem, "objects");
    assert_int_equal(json_array_size(objs), 1);
    json_t *locs = json_object_get(json_array_get(objs, 0), "locations");
    assert_int_equal(json_array_size(locs), NW);
    /* One location per node, every node once. */
    bool seen[NW] = {false};
    size_t i;
    json_t *loc;
    json_array_foreach(locs, i, loc)
    {
        json_int_t id = json_integer_value(json_object_get(loc, "node_id"));
        size_t k;
        json_t *node;
        bool found = false;
        json_array_foreach(nodes, k, node)
        {
            if (json_integer_value(json_object_get(node, "id")) == id) {
                assert_false(seen[k]);
                seen[k] = found = true;
            }
        }
        assert_true(found);
        assert_string_equal(json_string_value(json_object_get(loc, "state")), "memory");
    }
    json_decref(mem);
    /* The table's WHERE cell names all ten too (it used to stop at 63 characters). */
    const char *targv[] = {h_bin("spillway-ctl"), "--scheduler", c->addr, "memory", NULL};
    char *text = NULL;
    assert_int_equal(h_run(targv, &text), 0);
    int shown = 0;
    for (const char *p = text; (p = strstr(p, ":memory")) != NULL; p++)
        shown++;
    if (shown != NW)
        fail_msg("WHERE lists %d of %d copies:\n%s", shown, NW, text);
    free(text);
    char last[8];
    snprintf(last, sizeof last, "w%d", NW - 1);
    assert_int_equal(checksum_on(cl, r, last), XXH3_64bits(data, n));
    void *back;
    size_t len;
    assert_int_equal(spillway_get(cl, r, 10000, &back, &len), 0);
    assert_int_equal(len, n);
    assert_memory_equal(back, data, n);
    spillway_free(back);
    assert_int_equal(spillway_release(cl, r), 0);
    assert_true(e2e_cluster_idle(c, 20000));
    spillway_close(cl);
    free(data);
    E2E_STOP(c, NULL);
}

/* A cluster of n workers w0.. whose scheduler stripes every broadcast in `stripes` ranges
 * (its test knob) and logs the plans it chooses, with extra worker and scheduler args. */
static h_cluster *start_striped(int n, const char *stripes, const char *const *sched_args,
                                const char *const *worker_args)
{
    const char *sargs[16] = {"--log-level", "info"};
    int ns = 2;
    for (int k = 0; sched_args != NULL && sched_args[k] != NULL && ns < 15; k++)
        sargs[ns++] = sched_args[k];
    sargs[ns] = NULL;
    setenv("SPILLWAY_TEST_STRIPES", stripes, 1);
    h_cluster *c = h_cluster_start(false, sargs);
    unsetenv("SPILLWAY_TEST_STRIPES");
    for (int i = 0; i < n; i++) {
        char name[32];
        snprintf(name, sizeof name, "w%d", i);
        const char *args[16] = {"--slots", "1", "--store-capacity", "96M", "--name", name};
        int na = 6;
        for (int k = 0; worker_args != NULL && worker_args[k] != NULL && na < 15; k++)
            args[na++] = worker_args[k];
        args[na] = NULL;
        h_worker_start(c, args);
    }
    return c;
}

/* Which worker w0.. holds the only copy of the one object listed (-1: not one yet). */
static int sole_holder(h_cluster *c)
{
    json_t *mem = memory_doc(c);
    json_t *o = json_array_get(json_object_get(mem, "objects"), 0);
    json_t *locs = json_object_get(o, "locations");
    int found = -1;
    if (json_array_size(locs) == 1) {
        json_int_t id = json_integer_value(json_object_get(json_array_get(locs, 0), "node_id"));
        size_t k;
        json_t *node;
        json_array_foreach(json_object_get(mem, "nodes"), k, node)
        {
            const char *name = json_string_value(json_object_get(node, "name"));
            if (json_integer_value(json_object_get(node, "id")) == id && name != NULL &&
                name[0] == 'w')
                found = atoi(name + 1);
        }
    }
    json_decref(mem);
    return found;
}

static bool one_holder(void *arg)
{
    return sole_holder(arg) >= 0;
}

/* Puts n patterned bytes on one worker and waits until the scheduler knows where, so that a
 * broadcast of it starts from a whole copy (the striped plan's condition). */
static uint8_t *put_pattern(h_cluster *c, spillway *cl, size_t n, spillway_ref *r, int *holder)
{
    uint8_t *data = malloc(n);
    for (size_t i = 0; i < n; i++)
        data[i] = (uint8_t)(i * 2246822519u >> 11);
    assert_int_equal(spillway_put(cl, data, n, r), 0);
    assert_true(h_eventually(one_holder, c, 20000));
    *holder = sole_holder(c);
    return data;
}

/* Every copy listed, on `want` workers, and the same bytes on each of them but skip. */
static void copies_identical(h_cluster *c, spillway *cl, spillway_ref r, const uint8_t *data,
                             size_t n, int nworkers, int skip, size_t want)
{
    json_t *mem = memory_doc(c);
    json_t *o = json_array_get(json_object_get(mem, "objects"), 0);
    assert_int_equal(json_array_size(json_object_get(o, "locations")), want);
    json_decref(mem);
    uint64_t sum = XXH3_64bits(data, n);
    for (int i = 0; i < nworkers; i++) {
        char name[16];
        snprintf(name, sizeof name, "w%d", i);
        if (i != skip)
            assert_int_equal(checksum_on(cl, r, name), sum);
    }
}

/* A broadcast forced into three striped trees (each worker fetches three byte ranges from
 * three parents at once, and relays its own range as it arrives): every copy byte for byte. */
static void striped_broadcast_delivers_identical_bytes(void)
{
    enum { NW = 6 };
    h_cluster *c = start_striped(NW, "3", NULL, NULL);
    spillway *cl = e2e_connect(c);
    size_t n = (24u << 20) + 4321; /* ranges of unequal length */
    spillway_ref r;
    int holder;
    uint8_t *data = put_pattern(c, cl, n, &r, &holder);
    assert_int_equal(spillway_broadcast(cl, r, 0), 0);
    assert_true(h_log_count(&c->sched, "along striped trees (3 stripes)") >= 1);
    /* Each range came from its first source, though that parent was still receiving it: no
     * fetch was refused or fell back. */
    for (int i = 0; i < NW; i++)
        assert_int_equal(h_log_count(&c->workers[i], "fetch from"), 0);
    copies_identical(c, cl, r, data, n, NW, -1, NW);
    assert_int_equal(spillway_release(cl, r), 0);
    assert_true(e2e_cluster_idle(c, 20000));
    spillway_close(cl);
    free(data);
    E2E_STOP(c, NULL);
}

/* Two striped trees over four targets make every target a parent of one range. One target
 * never answers (stopped): its children give it up after --fetch-stall and take that range
 * from the next source named (the parent's parent, or the holder), while their other range
 * goes on; every other worker ends with the same bytes. */
static void striped_broadcast_range_falls_back_from_a_silent_parent(void)
{
    enum { NW = 5 };
    const char *const sched_args[] = {"--heartbeat-timeout", "3000", NULL};
    const char *const worker_args[] = {"--fetch-stall", "300", NULL};
    h_cluster *c = start_striped(NW, "2", sched_args, worker_args);
    spillway *cl = e2e_connect(c);
    size_t n = (16u << 20) + 999;
    spillway_ref r;
    int holder;
    uint8_t *data = put_pattern(c, cl, n, &r, &holder);
    int victim = (holder + 1) % NW;
    assert_int_equal(kill(c->workers[victim].pid, SIGSTOP), 0);
    assert_int_equal(spillway_broadcast(cl, r, 0), 0);
    assert_true(h_log_count(&c->sched, "along striped trees (2 stripes)") >= 1);
    h_worker_kill(c, victim, SIGKILL);
    int gave_up = 0;
    for (int i = 0; i < NW; i++)
        if (i != victim)
            gave_up += h_log_count(&c->workers[i], "giving up on it");
    assert_true(gave_up >= 1);
    copies_identical(c, cl, r, data, n, NW, victim, NW - 1);
    assert_int_equal(spillway_release(cl, r), 0);
    assert_true(e2e_cluster_idle(c, 20000));
    spillway_close(cl);
    free(data);
    E2E_STOP(c, NULL);
}

/* A worker name longer than the scheduler's old 64-byte field: a task placed by that name runs
 * there (it used to be truncated, so no worker ever matched). */
static void task_placed_on_a_long_worker_name_runs_there(void)
{
    char name[201];
    for (size_t i = 0; i < sizeof name - 1; i++)
        name[i] = (char)('a' + i % 26);
    name[sizeof name - 1] = '\0';
    h_cluster *c = h_cluster_start(false, NULL);
    const char *const args[] = {"--slots", "1", "--store-capacity", "8M", "--name", name, NULL};
    h_worker_start(c, args);
    spillway *cl = e2e_connect(c);
    static const uint8_t data[] = "placed by a long name";
    spillway_ref r;
    assert_int_equal(spillway_put(cl, data, sizeof data, &r), 0);
    assert_int_equal(checksum_on(cl, r, name), XXH3_64bits(data, sizeof data));
    assert_int_equal(spillway_release(cl, r), 0);
    E2E_STOP(c, cl);
}

static bool broadcast_ref_seen(void *arg)
{
    json_t *mem = memory_doc(arg);
    json_t *o = json_array_get(json_object_get(mem, "objects"), 0);
    bool seen = o != NULL &&
                json_integer_value(json_object_get(json_object_get(o, "refs"), "BROADCAST")) == 1;
    json_decref(mem);
    return seen;
}

static bool no_objects_listed(void *arg)
{
    json_t *mem = memory_doc(arg);
    bool empty = mem != NULL && json_array_size(json_object_get(mem, "objects")) == 0;
    json_decref(mem);
    return empty;
}

/* A client that scatters 96 MiB. */
static int scattering_client(spillway *cl, void *arg)
{
    (void)arg;
    size_t n = 96u << 20;
    uint8_t *data = malloc(n);
    memset(data, 0x42, n);
    spillway_ref r;
    spillway_scatter(cl, data, n, 0, &r);
    return 0;
}

/* The client that scattered dies while the copies travel: nothing half-written stays. */
static void broadcast_whose_source_dies_leaves_nothing(void)
{
    h_cluster *c = start_named(4, "128M");
    pid_t pid = e2e_client_fork(c, scattering_client, NULL, false);
    /* Kill it as soon as the scheduler knows of the broadcast, whatever its progress. */
    assert_true(h_eventually(broadcast_ref_seen, c, 30000));
    e2e_client_kill(pid);
    assert_true(e2e_cluster_idle(c, 30000)); /* no object, no byte used on any node */
    /* The stores' own listing (fresh, not a heartbeat's): no orphan, no half-copied object. */
    assert_true(h_eventually(no_objects_listed, c, 30000));
    json_t *mem = memory_doc(c);
    if (json_array_size(json_object_get(mem, "objects")) != 0) {
        char *d = json_dumps(mem, JSON_INDENT(1));
        fprintf(stderr, "%s\n", d);
        free(d);
    }
    assert_int_equal(json_array_size(json_object_get(mem, "objects")), 0); /* no orphan */
    json_decref(mem);
    E2E_STOP(c, NULL);
}

/* The Dask case: one 8 MiB object used by 500 map_blocks tasks. Scattered, passed as a plain
 * large argument, or as the same bytes twice: each node's store holds exactly one copy. */
static void large_shared_argument_is_stored_once_per_node(void)
{
    h_cluster *c = start_named(2, "256M");
    spillway *cl = e2e_connect(c);
    size_t n = 8u << 20;
    uint8_t *big = malloc(n);
    for (size_t i = 0; i < n; i++)
        big[i] = (uint8_t)(i % 251);
    /* The input: 500 blocks of 64 u64 counters. */
    uint64_t blocks = 500;
    uint64_t *input = malloc(blocks * 64 * 8);
    for (uint64_t i = 0; i < blocks * 64; i++)
        input[i] = i;
    spillway_ref in;
    assert_int_equal(spillway_put(cl, input, blocks * 64 * 8, &in), 0);
    for (int mode = 0; mode < 3; mode++) {
        spillway_ref shared_ref = {0, 0};
        spillway_arg shared[2];
        size_t nshared;
        if (mode == 0) {
            assert_int_equal(spillway_scatter(cl, big, n, 0, &shared_ref), 0);
            shared[0] = spillway_arg_ref(shared_ref);
            nshared = 1;
        } else if (mode == 1) {
            shared[0] = spillway_arg_bytes(big, n); /* put automatically, once */
            nshared = 1;
        } else {
            shared[0] = spillway_arg_bytes(big, n);
            shared[1] = spillway_arg_bytes(big, n); /* the same bytes again */
            nshared = 2;
        }
        spillway_map_opts mo = {.block_size = 64 * 8, .reduce = "add"};
        spillway_ref *res;
        size_t nres;
        assert_int_equal(spillway_map_blocks(cl, "len", in, shared, nshared, &mo, &res, &nres), 0);
        assert_int_equal(nres, 1);
        /* Each task's len is its block plus the shared argument(s). */
        assert_int_equal(e2e_get_u64(cl, res[0]), blocks * (64 * 8 + nshared * n));
        /* Now the stores: per node at most the input and the shared object, once. */
        json_t *mem = memory_doc(c);
        size_t i;
        json_t *o;
        int big_objects = 0;
        json_array_foreach(json_object_get(mem, "objects"), i, o)
        {
            if (json_integer_value(json_object_get(o, "size")) != (json_int_t)n)
                continue;
            big_objects++;
            size_t nl = json_array_size(json_object_get(o, "locations"));
            assert_true(nl >= 1 && nl <= 2); /* one copy per node, never more */
            size_t l;
            json_t *loc;
            int nodes[2] = {0, 0};
            json_array_foreach(json_object_get(o, "locations"), l, loc)
            {
                nodes[json_integer_value(json_object_get(loc, "node_id")) % 2]++;
            }
            assert_true(nodes[0] <= 1 && nodes[1] <= 1);
        }
        json_decref(mem);
        assert_int_equal(big_objects, mode == 0 || mode == 1 ? (mode == 0 ? 1 : 0) : 0);
        /* The figures come with the workers' heartbeats: the room admission took for outputs
         * of a function not seen yet (len's are inline) is handed back when its tasks end. */
        used_bound ub = {c, n + blocks * 64 * 8 + (1u << 20)};
        assert_true(h_eventually(stores_within, &ub, 10000));
        assert_int_equal(spillway_release(cl, res[0]), 0);
        spillway_free(res);
        if (mode == 0)
            assert_int_equal(spillway_release(cl, shared_ref), 0);
    }
    assert_int_equal(spillway_release(cl, in), 0);
    assert_true(e2e_cluster_idle(c, 20000));
    spillway_close(cl);
    free(big);
    free(input);
    E2E_STOP(c, NULL);
}

static bool peak_at_least(void *arg)
{
    return e2e_memory_sum(arg, "peak_used") >= (8u << 20);
}

/* The Rayon case: 10,000 tasks each producing 8 MiB, consumed by a sum, on 2 slots with the
 * default caps: live bytes stay bounded by the caps, not by the job, and the sum is right. */
static void ten_thousand_8mib_outputs_stay_bounded(void)
{
    h_cluster *c = start_named(2, "128M"); /* default byte cap: a quarter of 256 MiB */
    spillway *cl = e2e_connect(c);
    enum { N = 10000 };
    const uint64_t block = 8u << 20, cap = (256u << 20) / 4;
    spillway_graph *g = spillway_graph_new(cl);
    spillway_ref *level = malloc(N * sizeof *level);
    double expect = 0;
    for (int i = 0; i < N; i++) {
        double v = 1.0 + (double)(i % 7);
        expect += v * (double)(block / 8);
        spillway_arg fa[2] = {spillway_arg_u64(block), spillway_arg_bytes(&v, 8)};
        spillway_ref leaf;
        assert_int_equal(spillway_task(g, "fill", fa, 2, 0, &leaf), 0);
        spillway_arg s = spillway_arg_ref(leaf);
        assert_int_equal(spillway_task(g, "sum_f64", &s, 1, 0, &level[i]), 0);
    }
    size_t width = N;
    while (width > 1) {
        size_t next = 0;
        for (size_t i = 0; i + 1 < width; i += 2) {
            spillway_arg pair[2] = {spillway_arg_ref(level[i]), spillway_arg_ref(level[i + 1])};
            assert_int_equal(spillway_task(g, "sum_f64", pair, 2, width == 2 ? SPILLWAY_KEEP : 0,
                                           &level[next++]),
                             0);
        }
        if (width % 2 == 1)
            level[next++] = level[width - 1];
        width = next;
    }
    E2E_SUBMIT(g);
    void *out;
    size_t len;
    assert_int_equal(spillway_get(cl, level[0], 600000, &out, &len), 0);
    double got;
    memcpy(&got, out, 8);
    spillway_free(out);
    assert_true(fabs(got - expect) < 1e-6 * expect);
    /* The bound from the caps: the byte cap, plus one block per slot of estimate lag, plus a
     * block being read by its consumer on each worker. 80 GB went through. */
    assert_true(h_eventually(peak_at_least, c, 10000));
    uint64_t peak = e2e_memory_sum(c, "peak_used"), bound = cap + 2 * 2 * block;
    fprintf(stderr, "peak live bytes in the stores: %.1f MiB (bound %.1f MiB)\n",
            (double)peak / (1 << 20), (double)bound / (1 << 20));
    if (peak > bound)
        fail_msg("stores peaked at %llu bytes, bound %llu", (unsigned long long)peak,
                 (unsigned long long)bound);
    assert_int_equal(spillway_release(cl, level[0]), 0);
    free(level);
    E2E_FINISH(c, cl);
}

/* map_blocks over views of an object, with and without a reduction. */
static void map_blocks_matches_local_computation(void)
{
    h_cluster *c = start_named(2, "128M");
    spillway *cl = e2e_connect(c);
    size_t count = 3u << 20; /* 24 MiB of f64 */
    double *v = malloc(count * 8), total = 0;
    for (size_t i = 0; i < count; i++) {
        v[i] = (double)(i % 1000) * 0.5;
        total += v[i];
    }
    spillway_ref in;
    assert_int_equal(spillway_put(cl, v, count * 8, &in), 0);
    spillway_map_opts mo = {.nblocks = 37, .reduce = NULL};
    mo.block_size = ((count * 8 / 37) + 7) / 8 * 8; /* whole doubles per block */
    spillway_ref *res;
    size_t nres;
    assert_int_equal(spillway_map_blocks(cl, "sum_f64", in, NULL, 0, &mo, &res, &nres), 0);
    assert_true(nres >= 37 && nres <= 38);
    double sum = 0;
    for (size_t i = 0; i < nres; i++) {
        void *out;
        size_t len;
        assert_int_equal(spillway_get(cl, res[i], 60000, &out, &len), 0);
        double d;
        memcpy(&d, out, 8);
        sum += d;
        spillway_free(out);
    }
    assert_true(fabs(sum - total) < 1e-9 * total);
    assert_int_equal(spillway_release_many(cl, res, nres), 0);
    spillway_free(res);
    mo.reduce = "sum_f64";
    assert_int_equal(spillway_map_blocks(cl, "sum_f64", in, NULL, 0, &mo, &res, &nres), 0);
    assert_int_equal(nres, 1);
    void *out;
    size_t len;
    assert_int_equal(spillway_get(cl, res[0], 60000, &out, &len), 0);
    double d;
    memcpy(&d, out, 8);
    spillway_free(out);
    assert_true(fabs(d - total) < 1e-9 * total);
    assert_int_equal(spillway_release(cl, res[0]), 0);
    spillway_free(res);
    assert_int_equal(spillway_release(cl, in), 0);
    assert_true(e2e_cluster_idle(c, 20000));
    spillway_close(cl);
    free(v);
    E2E_STOP(c, NULL);
}

static const struct CMUnitTest tests[] = {
    H_CASE(broadcast_to_four_workers_delivers_identical_bytes),
    H_CASE(broadcast_to_ten_workers_lists_every_location),
    H_CASE(striped_broadcast_delivers_identical_bytes),
    H_CASE(striped_broadcast_range_falls_back_from_a_silent_parent),
    H_CASE(task_placed_on_a_long_worker_name_runs_there),
    H_CASE(broadcast_whose_source_dies_leaves_nothing),
    H_CASE(large_shared_argument_is_stored_once_per_node),
    H_CASE(ten_thousand_8mib_outputs_stay_bounded),
    H_CASE(map_blocks_matches_local_computation),
};

SPW_TEST_MAIN(tests)
