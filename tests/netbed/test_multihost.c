/* Multi-host tests on the netbed (tests/netbed/netbed.sh): the scheduler on host1, a worker on
 * each of host2..host5, this process (the client) on host6, everyone known by host name. Of the
 * workers, w4 listens on 0.0.0.0 and must advertise the address that reaches the scheduler, and
 * w5 listens on [::] and advertises its name. Run as
 *   tests/netbed/netbed.sh run 6 -- tests/netbed/netbed.sh exec host6 test_multihost CASE
 * which is what ctest does; without the bed (no NETBED_PREFIX) every case is skipped. With
 * SPW_BED_ENCRYPT=1 (ctest's multihost_enc.CASE) every daemon, client and spillway-ctl of the
 * case encrypts (--encrypt required); one case captures the bed's wire to check it. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <xxhash.h>

#include "../unit/test_main.h"
#include "e2e_util.h"
#include "shuffle_job.h"

#define NW 4

static const char *const worker_hosts[NW] = {"host2", "host3", "host4", "host5"};
static const char *const worker_names[NW] = {"w2", "w3", "w4", "w5"};

static void need_bed(void)
{
    if (getenv("NETBED_PREFIX") == NULL) {
        fprintf(stderr, "SKIP: not on the netbed (run under tests/netbed/netbed.sh)\n");
        h_skip();
    }
}

/* With SPW_BED_ENCRYPT=1 in the environment (the multihost_enc.* ctests) every daemon, client
 * and spillway-ctl of a case runs with --encrypt required: the same cases with every connection
 * between hosts in TLS (a plaintext peer would be refused). */
static bool bed_encrypt(void)
{
    const char *e = getenv("SPW_BED_ENCRYPT");
    return e != NULL && strcmp(e, "1") == 0;
}

enum { BED_MAX_ARGS = 24 };

/* args, then --encrypt required when the bed encrypts, into v (NULL-terminated); returns v. */
static const char *const *bed_args(const char *const *args, const char **v)
{
    int n = 0;
    for (; args != NULL && args[n] != NULL; n++) {
        assert_true(n < BED_MAX_ARGS - 3);
        v[n] = args[n];
    }
    if (bed_encrypt()) {
        v[n++] = "--encrypt";
        v[n++] = "required";
    }
    v[n] = NULL;
    return v;
}

/* The scheduler on host1, with a secret; the harness's client and spillway-ctl encrypt as it. */
static h_cluster *bed_sched_start(const char *const *sargs)
{
    const char *v[BED_MAX_ARGS];
    h_cluster *c = h_cluster_start_on("host1", true, bed_args(sargs, v));
    c->encrypt = bed_encrypt();
    return c;
}

static void bed_worker_start(h_cluster *c, const char *host, const char *const *args)
{
    const char *v[BED_MAX_ARGS];
    h_worker_start_on(c, host, bed_args(args, v));
}

/* Runs spillway-ctl's command cmd (text output) against scheduler addr with secret_file ("" for
 * none), encrypting when the bed does; its output into *out. */
static int bed_ctl_text(const char *addr, const char *secret_file, const char *cmd, char **out)
{
    const char *argv[10];
    int n = 0;
    argv[n++] = h_bin("spillway-ctl");
    argv[n++] = "--scheduler";
    argv[n++] = addr;
    if (secret_file[0] != '\0') {
        argv[n++] = "--secret-file";
        argv[n++] = secret_file;
    }
    if (bed_encrypt()) {
        argv[n++] = "--encrypt";
        argv[n++] = "required";
    }
    argv[n++] = cmd;
    argv[n] = NULL;
    return h_run(argv, out);
}

/* The bed's cluster; extra arguments for the scheduler and for every worker. */
static h_cluster *bed_start(const char *const *sargs, const char *cap, const char *reconnect)
{
    h_cluster *c = bed_sched_start(sargs);
    for (int i = 0; i < NW; i++) {
        const char *v[16];
        int n = 0;
        v[n++] = "--name";
        v[n++] = worker_names[i];
        v[n++] = "--slots";
        v[n++] = "1";
        v[n++] = "--store-capacity";
        v[n++] = cap;
        v[n++] = "--reconnect-max";
        v[n++] = reconnect;
        if (i == 2) {
            v[n++] = "--listen";
            v[n++] = "0.0.0.0:0";
        } else if (i == 3) {
            v[n++] = "--listen";
            v[n++] = "[::]:0";
            v[n++] = "--advertise";
            v[n++] = "host5";
        }
        v[n] = NULL;
        bed_worker_start(c, worker_hosts[i], v);
    }
    return c;
}

static json_t *worker_by_name(json_t *status, const char *name)
{
    size_t i;
    json_t *w;
    json_array_foreach(json_object_get(status, "workers"), i, w)
    {
        if (strcmp(json_string_value(json_object_get(w, "name")), name) == 0)
            return w;
    }
    return NULL;
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

static void fill_pattern(uint8_t *buf, size_t n, int i)
{
    for (size_t k = 0; k < n; k++)
        buf[k] = k % 3 == 0 ? (uint8_t)i : k % 3 == 1 ? (uint8_t)(i * 7) : 0x5A;
}

/* Parts made on one host, joined on another: every join moves bytes between hosts. */
static void cross_host_transfers_are_exact(spillway *cl)
{
    enum { PART = 1u << 20 };
    spillway_graph *g = spillway_graph_new(cl);
    spillway_ref parts[NW], joined[NW];
    for (int i = 0; i < NW; i++) {
        uint8_t pat[3] = {(uint8_t)i, (uint8_t)(i * 7), 0x5A};
        spillway_arg a[2] = {spillway_arg_u64(PART), spillway_arg_bytes(pat, 3)};
        spillway_graph_place(g, worker_names[i]);
        assert_int_equal(spillway_task(g, "fill", a, 2, 0, &parts[i]), 0);
    }
    for (int i = 0; i < NW; i++) {
        spillway_arg a[2] = {spillway_arg_ref(parts[(i + 1) % NW]),
                             spillway_arg_ref(parts[(i + 2) % NW])};
        spillway_graph_place(g, worker_names[i]);
        assert_int_equal(spillway_task(g, "concat", a, 2, SPILLWAY_KEEP, &joined[i]), 0);
    }
    E2E_SUBMIT(g);
    uint8_t *want = malloc(2 * PART);
    for (int i = 0; i < NW; i++) {
        void *out;
        size_t len;
        assert_int_equal(spillway_get(cl, joined[i], 60000, &out, &len), 0);
        assert_int_equal(len, 2 * PART);
        fill_pattern(want, PART, (i + 1) % NW);
        fill_pattern(want + PART, PART, (i + 2) % NW);
        if (memcmp(out, want, 2 * PART) != 0)
            fail_msg("join %d differs from the parts made on other hosts", i);
        spillway_free(out);
    }
    free(want);
    assert_int_equal(spillway_release_many(cl, joined, NW), 0);
}

static bool stores_empty(void *arg)
{
    uint64_t used;
    return e2e_status_used(arg, &used) && used == 0;
}

static bool all_registered(void *arg)
{
    h_cluster *c = arg;
    json_t *st = e2e_ctl_json(c, "status");
    if (st == NULL)
        return false;
    bool all = true;
    for (int i = 0; i < NW; i++) {
        json_t *w = worker_by_name(st, worker_names[i]);
        all = all && w != NULL &&
              strcmp(json_string_value(json_object_get(w, "state")), "running") == 0;
    }
    json_decref(st);
    return all;
}

/* Everything by name across hosts: addresses advertised, transfers, a scatter to every host,
 * map_blocks with a shared argument, and spillway-ctl memory seeing every host's store. */
static void cluster_across_hosts_by_name(void)
{
    need_bed();
    h_cluster *c = bed_start(NULL, "64M", "30000");
    assert_int_equal(strncmp(c->addr, "host1:", 6), 0);

    /* What each worker advertises: its bound address, the address of its interface towards
     * the scheduler for the wildcard, the name it was given for --advertise. */
    json_t *st = e2e_ctl_json(c, "status");
    assert_non_null(st);
    static const char *const want_addr[NW] = {"10.213.0.2:", "10.213.0.3:", "10.213.0.4:",
                                              "host5:"};
    for (int i = 0; i < NW; i++) {
        json_t *w = worker_by_name(st, worker_names[i]);
        assert_non_null(w);
        const char *addr = json_string_value(json_object_get(w, "address"));
        if (strncmp(addr, want_addr[i], strlen(want_addr[i])) != 0)
            fail_msg("%s advertises %s, want %s...", worker_names[i], addr, want_addr[i]);
    }
    json_decref(st);

    if (bed_encrypt()) {
        /* The daemons do require TLS: a plaintext client is refused. */
        spillway_opts o;
        spillway_opts_init(&o);
        o.secret_file = c->secret_file;
        spillway *plain = NULL;
        assert_int_equal(spillway_connect(c->addr, &o, &plain), SPW_EENCRYPT);
    }
    spillway *cl = e2e_connect(c);
    cross_host_transfers_are_exact(cl);

    /* Scatter: one copy on every host, identical everywhere, listed by spillway-ctl memory. */
    size_t n = (6u << 20) + 4321;
    uint8_t *data = malloc(n);
    for (size_t i = 0; i < n; i++)
        data[i] = (uint8_t)(i * 2654435761u >> 13);
    spillway_ref r;
    assert_int_equal(spillway_scatter(cl, data, n, 0, &r), 0);
    uint64_t want = XXH3_64bits(data, n);
    for (int i = 0; i < NW; i++)
        assert_int_equal(checksum_on(cl, r, worker_names[i]), want);
    json_t *mem = e2e_ctl_json(c, "memory");
    assert_non_null(mem);
    json_t *objs = json_object_get(mem, "objects");
    bool found = false;
    size_t i;
    json_t *o;
    json_array_foreach(objs, i, o)
    {
        if (json_integer_value(json_object_get(o, "size")) == (json_int_t)n) {
            assert_int_equal(json_array_size(json_object_get(o, "locations")), NW);
            found = true;
        }
    }
    assert_true(found);
    assert_int_equal(json_array_size(json_object_get(mem, "nodes")), NW);
    json_decref(mem);
    char *text = NULL;
    assert_int_equal(bed_ctl_text(c->addr, c->secret_file, "memory", &text), 0);
    for (int k = 0; k < NW; k++)
        assert_non_null(strstr(text, worker_names[k]));
    free(text);

    /* map_blocks with the scattered object as the shared argument of every block's task. */
    enum { BLOCKS = 64 };
    uint64_t *input = malloc(BLOCKS * 512);
    for (uint64_t k = 0; k < BLOCKS * 64; k++)
        input[k] = k;
    spillway_ref in;
    assert_int_equal(spillway_put(cl, input, BLOCKS * 512, &in), 0);
    spillway_arg shared = spillway_arg_ref(r);
    spillway_map_opts mo = {.block_size = 512, .reduce = "add"};
    spillway_ref *res;
    size_t nres;
    assert_int_equal(spillway_map_blocks(cl, "len", in, &shared, 1, &mo, &res, &nres), 0);
    assert_int_equal(nres, 1);
    assert_int_equal(e2e_get_u64(cl, res[0]), (uint64_t)BLOCKS * (512 + n));
    assert_int_equal(spillway_release(cl, res[0]), 0);
    spillway_free(res);
    assert_int_equal(spillway_release(cl, in), 0);
    assert_int_equal(spillway_release(cl, r), 0);
    free(input);
    free(data);

    assert_true(e2e_cluster_idle(c, 20000));
    assert_true(h_eventually(stores_empty, c, 20000));
    E2E_STOP(c, cl);
}

static bool some_store_spilled(void *arg)
{
    json_t *st = e2e_ctl_json(arg, "status");
    if (st == NULL)
        return false;
    bool spilled = false;
    size_t i;
    json_t *w;
    json_array_foreach(json_object_get(st, "workers"), i, w)
    {
        json_t *m = json_object_get(w, "memory");
        spilled = spilled || json_integer_value(json_object_get(m, "spill_count")) > 0;
    }
    json_decref(st);
    return spilled;
}

/* Kept outputs worth more than the four stores together: they spill, and come back exact. */
static void spilling_job_across_hosts(void)
{
    need_bed();
    h_cluster *c = bed_start(NULL, "16M", "30000");
    spillway *cl = e2e_connect(c);
    enum { N = 40, SIZE = 2u << 20 };
    spillway_graph *g = spillway_graph_new(cl);
    spillway_ref out[N];
    for (int i = 0; i < N; i++) {
        uint8_t pat[3] = {(uint8_t)i, (uint8_t)(i * 7), 0x5A};
        spillway_arg a[2] = {spillway_arg_u64(SIZE), spillway_arg_bytes(pat, 3)};
        assert_int_equal(spillway_task(g, "fill", a, 2, SPILLWAY_KEEP, &out[i]), 0);
    }
    E2E_SUBMIT(g);
    assert_int_equal(spillway_wait(cl, out, N, 120000), 0);
    assert_true(h_eventually(some_store_spilled, c, 20000));
    uint8_t *want = malloc(SIZE);
    for (int i = 0; i < N; i++) {
        void *data;
        size_t len;
        assert_int_equal(spillway_get(cl, out[i], 60000, &data, &len), 0);
        assert_int_equal(len, SIZE);
        fill_pattern(want, SIZE, i);
        if (memcmp(data, want, SIZE) != 0)
            fail_msg("output %d came back from its spill different", i);
        spillway_free(data);
    }
    free(want);
    assert_int_equal(spillway_release_many(cl, out, N), 0);
    assert_true(e2e_cluster_idle(c, 20000));
    assert_true(h_eventually(stores_empty, c, 20000));
    E2E_STOP(c, cl);
}

static int netbed(const char *what, const char *host, const char *arg)
{
    const char *sh = getenv("NETBED");
    assert_non_null(sh);
    const char *argv[] = {"/bin/sh", sh, what, host, arg, NULL};
    char *out = NULL;
    int rc = h_run(argv, &out);
    if (rc != 0)
        fprintf(stderr, "netbed %s %s %s: %s\n", what, host, arg, out != NULL ? out : "");
    free(out);
    return rc;
}

typedef struct busy_arg {
    h_cluster *c;
    const char *name;
} busy_arg;

static bool worker_busy(void *arg)
{
    busy_arg *b = arg;
    json_t *st = e2e_ctl_json(b->c, "status");
    if (st == NULL)
        return false;
    json_t *w = worker_by_name(st, b->name);
    bool busy = w != NULL && json_integer_value(json_object_get(w, "assigned")) > 0;
    json_decref(st);
    return busy;
}

static bool worker_present(void *arg)
{
    busy_arg *b = arg;
    json_t *st = e2e_ctl_json(b->c, "status");
    if (st == NULL)
        return false;
    bool present = worker_by_name(st, b->name) != NULL;
    json_decref(st);
    return present;
}

static bool worker_gone(void *arg)
{
    busy_arg *b = arg;
    json_t *st = e2e_ctl_json(b->c, "status");
    if (st == NULL)
        return false;
    bool gone = worker_by_name(st, b->name) == NULL;
    json_decref(st);
    return gone;
}

/* host2's link goes down mid-job: the scheduler drops w2 after its heartbeat timeout, its
 * tasks run elsewhere, what only it held is made again; the job completes exactly. The link
 * comes back, w2 registers again as a new worker and runs a task bound to it. */
static void partition_mid_job_then_worker_serves_next_job(void)
{
    need_bed();
    const char *const sargs[] = {"--heartbeat-timeout", "3000", NULL};
    h_cluster *c = bed_start(sargs, "64M", "1000");
    spillway *cl = e2e_connect(c);
    enum { N = 24, SIZE = 256u << 10 };
    spillway_graph *g = spillway_graph_new(cl);
    spillway_ref sums[N];
    for (int i = 0; i < N; i++) {
        /* A nap first (the job lasts long enough to be cut), then the part (fill ignores
         * its third argument, only waits for it), then its checksum. */
        spillway_ref part, nap;
        spillway_arg s = spillway_arg_u64(150);
        assert_int_equal(spillway_task(g, "sleep_ms", &s, 1, 0, &nap), 0);
        uint8_t pat[3] = {(uint8_t)i, (uint8_t)(i * 7), 0x5A};
        spillway_arg a[3] = {spillway_arg_u64(SIZE), spillway_arg_bytes(pat, 3),
                             spillway_arg_ref(nap)};
        assert_int_equal(spillway_task(g, "fill", a, 3, 0, &part), 0);
        spillway_arg b = spillway_arg_ref(part);
        assert_int_equal(spillway_task(g, "checksum", &b, 1, SPILLWAY_KEEP, &sums[i]), 0);
    }
    E2E_SUBMIT(g);
    busy_arg b = {c, "w2"};
    assert_true(h_eventually(worker_busy, &b, 20000));
    assert_int_equal(netbed("link", "host2", "down"), 0);
    assert_true(h_eventually(worker_gone, &b, 20000));
    uint8_t *buf = malloc(SIZE);
    for (int i = 0; i < N; i++) {
        fill_pattern(buf, SIZE, i);
        assert_int_equal(e2e_get_u64(cl, sums[i]), XXH3_64bits(buf, SIZE));
    }
    free(buf);
    assert_int_equal(spillway_release_many(cl, sums, N), 0);
    assert_int_equal(netbed("link", "host2", "up"), 0);
    assert_true(h_eventually(all_registered, c, 30000));
    /* The next job: a task that only w2 may run. */
    spillway_graph *g2 = spillway_graph_new(cl);
    spillway_graph_place(g2, "w2");
    spillway_ref r;
    spillway_arg a = spillway_arg_u64(41);
    assert_int_equal(spillway_task(g2, "inc", &a, 1, SPILLWAY_KEEP, &r), 0);
    E2E_SUBMIT(g2);
    assert_int_equal(e2e_get_u64(cl, r), 42);
    assert_int_equal(spillway_release(cl, r), 0);
    cross_host_transfers_are_exact(cl);
    assert_true(e2e_cluster_idle(c, 20000));
    assert_true(h_eventually(stores_empty, c, 20000));
    E2E_STOP(c, cl);
}

/* A partition in the middle of a worker-to-worker fetch: the fetching worker hears nothing more
 * from the holder (no reset ever comes), gives up after --fetch-stall, the task fails over to
 * re-making its input (the holder was dropped by the scheduler meanwhile) and the result is
 * exact. host2's link is slowed so that the fetch is still under way when the link goes. */
static void partition_mid_fetch_fails_over(void)
{
    need_bed();
    const char *const sargs[] = {"--heartbeat-timeout", "3000", NULL};
    h_cluster *c = bed_sched_start(sargs);
    for (int i = 0; i < 2; i++) {
        const char *const v[] = {"--name", worker_names[i], "--slots", "1", "--store-capacity",
                                 "128M", "--fetch-stall", "2000", "--reconnect-max", "1000",
                                 NULL};
        bed_worker_start(c, worker_hosts[i], v);
    }
    assert_int_equal(netbed("shape", "host2", "40"), 0); /* 32 MiB: about 7 s */
    spillway *cl = e2e_connect(c);
    enum { SIZE = 32u << 20 };
    uint8_t pat[3] = {0x11, 0x22, 0x33};
    spillway_graph *g = spillway_graph_new(cl);
    spillway_graph_place(g, "w2");
    spillway_ref big, sum;
    spillway_arg a[2] = {spillway_arg_u64(SIZE), spillway_arg_bytes(pat, 3)};
    assert_int_equal(spillway_task(g, "fill", a, 2, SPILLWAY_KEEP, &big), 0);
    E2E_SUBMIT(g);
    assert_int_equal(spillway_wait(cl, &big, 1, 60000), 0);
    g = spillway_graph_new(cl);
    spillway_graph_place(g, "w3");
    spillway_arg b = spillway_arg_ref(big);
    assert_int_equal(spillway_task(g, "checksum", &b, 1, SPILLWAY_KEEP, &sum), 0);
    E2E_SUBMIT(g);
    busy_arg w3 = {c, "w3"};
    assert_true(h_eventually(worker_busy, &w3, 20000));
    assert_int_equal(netbed("link", "host2", "down"), 0);
    uint8_t *buf = malloc(SIZE);
    fill_pattern(buf, SIZE, 0);
    for (size_t k = 0; k < SIZE; k++)
        buf[k] = pat[k % 3];
    assert_int_equal(e2e_get_u64(cl, sum), XXH3_64bits(buf, SIZE));
    free(buf);
    spillway_ref all[] = {big, sum};
    assert_int_equal(spillway_release_many(cl, all, 2), 0);
    assert_int_equal(netbed("link", "host2", "up"), 0);
    assert_int_equal(netbed("shape", "host2", "0"), 0);
    busy_arg w2 = {c, "w2"};
    assert_true(h_eventually(worker_present, &w2, 30000));
    assert_true(e2e_cluster_idle(c, 20000));
    assert_true(h_eventually(stores_empty, c, 20000));
    E2E_STOP(c, cl);
}

/* kill -9 of the scheduler on host1 mid-job; the client hears SPW_ECLOSED at once; a scheduler
 * restarted on host1 gets every worker back within 10 s; a new job passes; stores end empty. */
static void scheduler_restart_on_host1(void)
{
    need_bed();
    h_cluster *c = bed_start(NULL, "64M", "2000");
    spillway *cl = e2e_connect_at(c, c->addr, 0); /* one that does not reconnect */
    spillway_graph *g = spillway_graph_new(cl);
    spillway_ref kept[NW], slow[NW];
    for (int i = 0; i < NW; i++) {
        uint8_t pat = (uint8_t)i;
        spillway_arg a[2] = {spillway_arg_u64(2u << 20), spillway_arg_bytes(&pat, 1)};
        spillway_graph_place(g, worker_names[i]);
        assert_int_equal(spillway_task(g, "fill", a, 2, SPILLWAY_KEEP, &kept[i]), 0);
        spillway_arg s = spillway_arg_u64(3000);
        assert_int_equal(spillway_task(g, "sleep_ms", &s, 1, SPILLWAY_KEEP, &slow[i]), 0);
    }
    E2E_SUBMIT(g);
    assert_int_equal(spillway_wait(cl, kept, NW, 60000), 0);
    int ws = h_sched_kill(c, SIGKILL);
    assert_true(WIFSIGNALED(ws));
    void *out;
    size_t len;
    assert_int_equal(spillway_get(cl, slow[0], 5000, &out, &len), SPW_ECLOSED);
    spillway_ref r;
    void *big = calloc(1, 1u << 20);
    assert_int_equal(spillway_put(cl, big, 1u << 20, &r), SPW_ECLOSED);
    free(big);
    spillway_close(cl);
    const char *rv[BED_MAX_ARGS];
    h_sched_restart(c, bed_args(NULL, rv));
    assert_true(h_eventually(all_registered, c, 10000));
    cl = e2e_connect(c);
    cross_host_transfers_are_exact(cl);
    spillway_close(cl);
    assert_true(e2e_cluster_idle(c, 20000));
    assert_true(h_eventually(stores_empty, c, 20000));
    E2E_STOP(c, NULL);
}

/* A plugin uploaded from host6 runs on every worker host: each fetches it from the store that
 * holds it, by name across the bed, checks its hash and caches it. */
static void uploaded_plugin_runs_on_every_host(void)
{
    need_bed();
    h_cluster *c = bed_start(NULL, "64M", "30000");
    spillway *cl = e2e_connect(c);
    spillway_plugin *p;
    int rc = spillway_plugin_add(cl, SPW_TEST_PLUGIN_VER1, &p);
    if (rc != 0)
        fail_msg("spillway_plugin_add: %s: %s", spillway_strerror(rc), spillway_errmsg(cl));
    char fn[SPILLWAY_FN_MAX];
    assert_non_null(spillway_plugin_fn(p, "scale", fn, sizeof fn));
    spillway_ref out[NW];
    spillway_graph *g = spillway_graph_new(cl);
    for (int i = 0; i < NW; i++) {
        spillway_arg a = spillway_arg_u64((uint64_t)i);
        spillway_graph_place(g, worker_names[i]);
        assert_int_equal(spillway_task(g, fn, &a, 1, SPILLWAY_KEEP, &out[i]), 0);
    }
    assert_int_equal(spillway_submit(g), 0);
    spillway_graph_free(g);
    for (int i = 0; i < NW; i++)
        assert_int_equal(e2e_get_u64(cl, out[i]), (uint64_t)i * 1000 + 1);
    assert_int_equal(spillway_release_many(cl, out, NW), 0);
    assert_int_equal(spillway_plugin_release(p), 0);
    E2E_FINISH(c, cl);
}

/* A name that does not resolve on the bed is a clear error naming it (the bed's resolver has
 * nowhere to send the question, so this never leaves the machine). */
static void unresolvable_scheduler_name_is_named(void)
{
    need_bed();
    /* Encrypting needs a secret before any name is looked up: a cluster's, without daemons. */
    h_cluster *c = h_cluster_bare();
    spillway_opts o;
    spillway_opts_init(&o);
    if (bed_encrypt()) {
        snprintf(c->secret_file, sizeof c->secret_file, "%s/secret", c->dir);
        e2e_write_file(c->secret_file, "e2e-cluster-secret\n", 0600);
        o.secret_file = c->secret_file;
        o.encrypt = SPILLWAY_ENCRYPT_REQUIRED;
    }
    spillway *cl = NULL;
    assert_int_equal(spillway_connect("host99:7400", &o, &cl), SPW_ENONAME);
    char *text = NULL;
    assert_int_not_equal(bed_ctl_text("host99:7400", c->secret_file, "status", &text), 0);
    assert_non_null(strstr(text, "host99:7400"));
    assert_non_null(strstr(text, "host name does not resolve"));
    free(text);
}

static uint64_t deal_values(uint32_t i)
{
    return 2000 + (uint64_t)i * 977 % 12000;
}

/* Shuffles across the four hosts, every byte checked: inputs dealt to partitions with the
 * reduces taking the maps' outputs directly and through a tree of merges, and a sort of twice
 * what the stores hold. Every piece a reduce takes from another host crosses the bed. */
static void shuffle_across_hosts(void)
{
    need_bed();
    h_cluster *c = bed_sched_start(NULL);
    for (int i = 0; i < NW; i++) {
        const char *const v[] = {"--name",           worker_names[i], "--slots", "1",
                                 "--store-capacity", "16M",           "--plugin", SPW_SORT_PLUGIN,
                                 NULL};
        bed_worker_start(c, worker_hosts[i], v);
    }
    spillway *cl = e2e_connect(c);
    spillway_shuffle_opts o = {0};
    assert_int_equal(shuffle_job_deal(cl, 40, deal_values, 8, o), 40 + 8);
    o.fan_in = 4;
    o.merge = "concat";
    assert_true(shuffle_job_deal(cl, 40, deal_values, 8, o) > 40 + 8);
    shuffle_job_sort(cl, 32, 1u << 19, 32, NULL, NULL);
    E2E_FINISH(c, cl);
}

/* The full path of program name found in $PATH into out, or false. */
static bool find_program(const char *name, char *out, size_t cap)
{
    const char *path = getenv("PATH");
    char dirs[1024];
    snprintf(dirs, sizeof dirs, "%s", path != NULL ? path : "/usr/sbin:/usr/bin:/sbin:/bin");
    char *save = NULL;
    for (char *d = strtok_r(dirs, ":", &save); d != NULL; d = strtok_r(NULL, ":", &save)) {
        snprintf(out, cap, "%s/%s", d, name);
        if (access(out, X_OK) == 0)
            return true;
    }
    return false;
}

/* Starts tcpdump on the bed's bridge (in the switch's namespace it sees every host's link),
 * writing every packet whole to pcap; returns once it reports that it captures. */
static pid_t capture_start(h_cluster *c, const char *tcpdump, const char *pcap)
{
    /* -Z root: it keeps the right to write into the case's root-owned directory. */
    const char *argv[] = {
        "/bin/sh", getenv("NETBED"), "exec", "sw",   tcpdump, "-i", "br0", "-n", "-s", "0",
        "-B",      "32768",          "-Z",   "root", "-w",    pcap, NULL};
    pid_t pid = h_spawn(c, argv, "tcpdump"); /* ip netns exec execs it: the pid is tcpdump's */
    h_proc p = {.pid = pid};
    snprintf(p.log, sizeof p.log, "%s/tcpdump.log", c->dir);
    if (!e2e_logged(&p, "listening on", 20000)) {
        h_dump_logs(c);
        fail_msg("tcpdump never said it was listening");
    }
    return pid;
}

/* Stops tcpdump with SIGINT (it writes out what it holds) and reaps it. */
static void capture_stop(pid_t pid)
{
    assert_int_equal(kill(pid, SIGINT), 0);
    int st;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
        fail_msg("tcpdump ended with wait status %#x", (unsigned)st);
}

/* How many of the nwin 64-byte runs of pattern, taken every step bytes, the file holds; its
 * size into *size. */
static int runs_in_file(const char *path, const uint8_t *pattern, int nwin, size_t step,
                        size_t *size)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    size_t cap = 1u << 20, len = 0, n;
    uint8_t *buf = malloc(cap);
    while ((n = fread(buf + len, 1, cap - len, f)) > 0) {
        len += n;
        if (len == cap)
            buf = realloc(buf, cap *= 2);
    }
    fclose(f);
    int found = 0;
    for (int w = 0; w < nwin; w++)
        found += memmem(buf, len, pattern + (size_t)w * step + 7, 64) != NULL;
    free(buf);
    *size = len;
    fprintf(stderr, "capture %s: %zu bytes, %d of %d runs of the pattern\n", path, len, found,
            nwin);
    return found;
}

/* What crosses the wire: tcpdump on the bed's bridge while a 4 MiB pattern is put from host6
 * (client to a worker's peer port), read by a task on every worker host (worker to worker) and
 * got back. In the clear the capture must hold runs of the pattern (the control: the search
 * finds what is there); encrypted (multihost_enc), none of them. */
static void wire_capture_holds_the_pattern_only_in_the_clear(void)
{
    need_bed();
    char tcpdump[512];
    if (geteuid() != 0 || !find_program("tcpdump", tcpdump, sizeof tcpdump)) {
        /* Status 77: ctest reports the case skipped, with this reason. */
        fprintf(stderr, "SKIP: %s\n",
                geteuid() != 0 ? "capturing needs root" : "no tcpdump (apt-get install tcpdump)");
        exit(77);
    }
    h_cluster *c = bed_start(NULL, "64M", "30000");
    spillway *cl = e2e_connect(c);
    enum { SIZE = 4u << 20, NWIN = 64 };
    uint8_t *data = malloc(SIZE);
    uint64_t x = 0x9E3779B97F4A7C15ull; /* xorshift64: no run repeats, none is common */
    for (size_t i = 0; i < SIZE; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        data[i] = (uint8_t)(x >> 24);
    }
    char pcap[512];
    snprintf(pcap, sizeof pcap, "%s/wire.pcap", c->dir);
    pid_t cap = capture_start(c, tcpdump, pcap);
    spillway_ref r;
    assert_int_equal(spillway_put(cl, data, SIZE, &r), 0);
    uint64_t want = XXH3_64bits(data, SIZE);
    for (int i = 0; i < NW; i++)
        assert_int_equal(checksum_on(cl, r, worker_names[i]), want);
    void *back;
    size_t len;
    assert_int_equal(spillway_get(cl, r, 60000, &back, &len), 0);
    assert_int_equal(len, SIZE);
    assert_memory_equal(back, data, SIZE);
    spillway_free(back);
    capture_stop(cap);
    size_t captured;
    int found = runs_in_file(pcap, data, NWIN, SIZE / NWIN, &captured);
    /* The put, three fetches and the get crossed the bridge, five copies: the capture holds
     * at least four (tcpdump may stop before reading the last packets the kernel holds). */
    assert_true(captured >= 4 * (size_t)SIZE);
    if (bed_encrypt())
        assert_int_equal(found, 0);
    else
        assert_true(found >= NWIN / 2);
    free(data);
    assert_int_equal(spillway_release(cl, r), 0);
    assert_true(e2e_cluster_idle(c, 20000));
    E2E_STOP(c, cl);
}

/* The objects spillway-ctl memory lists: exactly want of them, none pending or lost. */
typedef struct listed {
    h_cluster *c;
    size_t want;
} listed;

static bool memory_lists(void *arg)
{
    listed *l = arg;
    json_t *doc = e2e_ctl_json(l->c, "memory");
    if (doc == NULL)
        return false;
    json_t *objs = json_object_get(doc, "objects");
    bool ok = json_array_size(objs) == l->want;
    size_t i;
    json_t *o;
    json_array_foreach(objs, i, o) ok =
        ok && strcmp(json_string_value(json_object_get(o, "state")), "ready") == 0;
    json_decref(doc);
    return ok;
}

/* kill -9 of the scheduler on host1, three times, during one client's job of puts, a scatter,
 * kept outputs and a spilling stage, the scheduler restarted each time on its state directory:
 * the client (reconnecting by itself) sees its job through with every byte checked; spillway-ctl
 * memory then lists exactly its live objects, nothing was lost, and every store is back to 0
 * once it releases them. */
enum { RIDE_ROUNDS = 3, RIDE_FILLS = 8, RIDE_SIZE = 4u << 20 };

static void job_rides_out_three_scheduler_kills(void)
{
    need_bed();
    h_cluster *sd = h_cluster_bare(); /* a directory for the journal, removed with the case */
    char state[600];
    snprintf(state, sizeof state, "%s/state", sd->dir);
    const char *const sargs[] = {"--state-dir", state, NULL};
    h_cluster *c = bed_start(sargs, "16M", "500");
    spillway *cl = e2e_connect(c);
    uint8_t *buf = malloc(RIDE_SIZE);
    fill_pattern(buf, RIDE_SIZE, 99);
    spillway_ref scat;
    assert_int_equal(spillway_scatter(cl, buf, RIDE_SIZE, 0, &scat), 0);
    uint64_t scat_sum = XXH3_64bits(buf, RIDE_SIZE);
    spillway_ref puts[RIDE_ROUNDS], sums[RIDE_ROUNDS], slow[RIDE_ROUNDS];
    spillway_ref fills[RIDE_ROUNDS][RIDE_FILLS];
    for (int k = 0; k < RIDE_ROUNDS; k++) {
        fill_pattern(buf, RIDE_SIZE, 50 + k);
        assert_int_equal(spillway_put(cl, buf, RIDE_SIZE, &puts[k]), 0);
        spillway_graph *g = spillway_graph_new(cl);
        for (int i = 0; i < RIDE_FILLS; i++) {
            int p = k * RIDE_FILLS + i;
            uint8_t pat[3] = {(uint8_t)p, (uint8_t)(p * 7), 0x5A};
            spillway_arg a[2] = {spillway_arg_u64(RIDE_SIZE), spillway_arg_bytes(pat, 3)};
            assert_int_equal(spillway_task(g, "fill", a, 2, SPILLWAY_KEEP, &fills[k][i]), 0);
        }
        spillway_arg in = spillway_arg_ref(puts[k]);
        assert_int_equal(spillway_task(g, "checksum", &in, 1, SPILLWAY_KEEP, &sums[k]), 0);
        spillway_arg ms = spillway_arg_u64(1500);
        assert_int_equal(spillway_task(g, "sleep_ms", &ms, 1, SPILLWAY_KEEP, &slow[k]), 0);
        E2E_SUBMIT(g);
        assert_int_equal(spillway_wait(cl, fills[k], RIDE_FILLS, 120000), 0);
        /* The sleep is under way when the scheduler dies; it comes back on its journal. */
        int ws = h_sched_kill(c, SIGKILL);
        assert_true(WIFSIGNALED(ws));
        const char *v[BED_MAX_ARGS];
        h_sched_restart(c, bed_args(sargs, v));
        assert_int_equal(spillway_wait(cl, &slow[k], 1, 120000), 0);
        assert_int_equal(e2e_get_u64(cl, sums[k]), XXH3_64bits(buf, RIDE_SIZE));
    }
    assert_true(h_eventually(some_store_spilled, c, 20000));
    /* Every byte, after three restarts: the fills, the puts, the scattered object everywhere. */
    uint8_t *want = malloc(RIDE_SIZE);
    for (int k = 0; k < RIDE_ROUNDS; k++) {
        for (int i = 0; i < RIDE_FILLS; i++) {
            int p = k * RIDE_FILLS + i;
            uint8_t pat[3] = {(uint8_t)p, (uint8_t)(p * 7), 0x5A};
            for (size_t b = 0; b < RIDE_SIZE; b++)
                want[b] = pat[b % 3];
            void *data;
            size_t len;
            assert_int_equal(spillway_get(cl, fills[k][i], 60000, &data, &len), 0);
            assert_int_equal(len, RIDE_SIZE);
            assert_memory_equal(data, want, RIDE_SIZE);
            spillway_free(data);
        }
        fill_pattern(want, RIDE_SIZE, 50 + k);
        void *data;
        size_t len;
        assert_int_equal(spillway_get(cl, puts[k], 60000, &data, &len), 0);
        assert_int_equal(len, RIDE_SIZE);
        assert_memory_equal(data, want, RIDE_SIZE);
        spillway_free(data);
    }
    for (int i = 0; i < NW; i++)
        assert_int_equal(checksum_on(cl, scat, worker_names[i]), scat_sum);
    listed l = {c, 1 + RIDE_ROUNDS * (RIDE_FILLS + 3)};
    assert_true(h_eventually(memory_lists, &l, 20000));
    json_t *st = e2e_ctl_json(c, "status");
    assert_non_null(st);
    assert_int_equal(json_integer_value(json_object_get(json_object_get(st, "lineage"), "lost")),
                     0);
    json_decref(st);
    assert_int_equal(spillway_release(cl, scat), 0);
    for (int k = 0; k < RIDE_ROUNDS; k++) {
        assert_int_equal(spillway_release_many(cl, fills[k], RIDE_FILLS), 0);
        assert_int_equal(spillway_release(cl, puts[k]), 0);
        assert_int_equal(spillway_release(cl, sums[k]), 0);
        assert_int_equal(spillway_release(cl, slow[k]), 0);
    }
    free(want);
    free(buf);
    assert_true(e2e_cluster_idle(c, 20000));
    assert_true(h_eventually(stores_empty, c, 20000));
    E2E_STOP(c, cl);
}

static const struct CMUnitTest tests[] = {
    H_CASE(cluster_across_hosts_by_name),
    H_CASE(spilling_job_across_hosts),
    H_CASE(partition_mid_job_then_worker_serves_next_job),
    H_CASE(partition_mid_fetch_fails_over),
    H_CASE(scheduler_restart_on_host1),
    H_CASE(unresolvable_scheduler_name_is_named),
    H_CASE(uploaded_plugin_runs_on_every_host),
    H_CASE(shuffle_across_hosts),
    H_CASE(job_rides_out_three_scheduler_kills),
    H_CASE(wire_capture_holds_the_pattern_only_in_the_clear),
};

SPW_TEST_MAIN(tests)
