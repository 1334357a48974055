/* The scheduler's journal (--state-dir) end to end: a scheduler killed with SIGKILL and started
 * again on the same directory gets its puts and references back, the workers keep the objects
 * and report them, objects released before the kill stay released; a journal that cannot be
 * read is moved aside and the scheduler starts empty. Real daemons on 127.0.0.1. */
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../unit/test_main.h"
#include "e2e_util.h"

#define PUT_BYTES (1u << 20)

/* The cluster's state directory, as a --state-dir argument list. */
typedef struct sdir {
    char path[512];
    const char *args[3];
} sdir;

static void sdir_init(sdir *d, h_cluster *c)
{
    snprintf(d->path, sizeof d->path, "%s/state", c->dir);
    d->args[0] = "--state-dir";
    d->args[1] = d->path;
    d->args[2] = NULL;
}

/* A cluster whose scheduler journals into a directory of its own (a bare cluster's, which the
 * harness removes with the case), and n workers that come back quickly after a scheduler's
 * loss. */
static h_cluster *start(sdir *d, int nworkers)
{
    sdir_init(d, h_cluster_bare());
    h_cluster *c = h_cluster_start(false, d->args);
    const char *const wargs[] = {"--slots", "1", "--store-capacity", "64M", "--reconnect-max",
                                 "500",     NULL};
    h_workers_start(c, nworkers, wargs);
    return c;
}

/* What the forked client put: two objects kept, one released, their ids in a file. */
typedef struct putter {
    char ids_file[512];
} putter;

static int putting_client(spillway *cl, void *arg)
{
    const putter *p = arg;
    uint8_t *buf = malloc(PUT_BYTES);
    spillway_ref r[3];
    for (int i = 0; i < 3; i++) {
        memset(buf, 'a' + i, PUT_BYTES);
        if (spillway_put(cl, buf, PUT_BYTES, &r[i]) != 0)
            return 1;
    }
    free(buf);
    if (spillway_release(cl, r[2]) != 0)
        return 1;
    FILE *f = fopen(p->ids_file, "we");
    if (f == NULL)
        return 1;
    for (int i = 0; i < 3; i++) {
        char hex[33];
        fprintf(f, "%s\n", spillway_ref_hex(r[i], hex));
    }
    fclose(f);
    return 0;
}

typedef struct listing {
    h_cluster *c;
    char ids[3][33];
} listing;

static json_t *find_obj(json_t *doc, const char *hex)
{
    return e2e_json_find(json_object_get(doc, "objects"), "id", hex);
}

/* The two kept puts are listed ready with one copy, the released one is not. */
static bool puts_as_before(void *arg)
{
    listing *l = arg;
    json_t *doc = e2e_ctl_json(l->c, "memory");
    bool ok = doc != NULL;
    for (int i = 0; ok && i < 2; i++) {
        json_t *o = find_obj(doc, l->ids[i]);
        ok = o != NULL && strcmp(json_string_value(json_object_get(o, "state")), "ready") == 0 &&
             json_array_size(json_object_get(o, "locations")) == 1;
    }
    ok = ok && find_obj(doc, l->ids[2]) == NULL;
    json_decref(doc);
    return ok;
}

static bool released_gone(void *arg)
{
    listing *l = arg;
    json_t *doc = e2e_ctl_json(l->c, "memory");
    bool ok = doc != NULL && find_obj(doc, l->ids[2]) == NULL && find_obj(doc, l->ids[0]) != NULL;
    json_decref(doc);
    return ok;
}

static bool workers_registered(void *arg)
{
    h_cluster *c = arg;
    int n = 0;
    for (int i = 0; i < c->nworkers; i++)
        n += h_log_count(&c->workers[i], "registered again with") > 0;
    return n == c->nworkers;
}

static bool stores_hold_2mib(void *arg)
{
    uint64_t used = 0;
    return e2e_status_used(arg, &used) && used == 2 * PUT_BYTES;
}

/* Client sessions the scheduler lists (status), restored ones with no connection included. */
static int client_sessions(h_cluster *c)
{
    json_t *doc = e2e_ctl_json(c, "status");
    size_t i;
    json_t *cl;
    int n = doc == NULL ? -1 : 0;
    json_array_foreach(json_object_get(doc, "clients"), i, cl) n +=
        strcmp(json_string_value(json_object_get(cl, "role")), "client") == 0;
    json_decref(doc);
    return n;
}

static bool no_client_sessions(void *arg)
{
    return client_sessions(arg) == 0;
}

static void read_ids(const char *path, listing *l)
{
    FILE *f = fopen(path, "re");
    assert_non_null(f);
    for (int i = 0; i < 3; i++)
        assert_int_equal(fscanf(f, "%32s", l->ids[i]), 1);
    fclose(f);
}

/* Puts and references survive the scheduler's end (kill -9, or a stop as `systemctl restart`
 * does): the workers keep the bytes, report them to the restarted scheduler, which claims
 * them; the released put stays released. */
static void puts_survive(int sig)
{
    sdir d;
    h_cluster *c = start(&d, 2);
    putter p;
    snprintf(p.ids_file, sizeof p.ids_file, "%s/ids", c->dir);
    pid_t pid = e2e_client_fork(c, putting_client, &p, true);
    listing l = {.c = c};
    read_ids(p.ids_file, &l);
    /* The release reached the scheduler (it sends no answer to wait for). */
    assert_true(h_eventually(released_gone, &l, 10000));
    assert_true(h_eventually(stores_hold_2mib, c, 10000));

    int ws = h_sched_kill(c, sig);
    assert_true(sig == SIGKILL ? WIFSIGNALED(ws) : WIFEXITED(ws) && WEXITSTATUS(ws) == 0);
    h_sched_restart(c, d.args);
    assert_true(e2e_logged(&c->sched, "journal", 10000));
    assert_true(h_eventually(workers_registered, c, 20000));
    assert_true(h_eventually(puts_as_before, &l, 20000));
    assert_int_equal(client_sessions(c), 1); /* restored, waiting for its client */
    for (int i = 0; i < c->nworkers; i++)
        assert_int_equal(h_log_count(&c->workers[i], "dropped"), 0);
    assert_true(h_eventually(stores_hold_2mib, c, 10000));
    e2e_client_kill(pid);
    E2E_STOP(c, NULL);
}

static void puts_survive_a_scheduler_kill(void)
{
    puts_survive(SIGKILL);
}

static void puts_survive_a_scheduler_stop(void)
{
    puts_survive(SIGTERM);
}

/* Without a journal (the default), a restarted scheduler knows nothing: the workers' reports
 * are answered with deletes, and the stores empty. */
static bool stores_empty(void *arg)
{
    uint64_t used = 1;
    return e2e_status_used(arg, &used) && used == 0;
}

static void without_journal_objects_are_dropped(void)
{
    h_cluster *c = h_cluster_start(false, NULL);
    const char *const wargs[] = {"--slots", "1", "--store-capacity", "64M", "--reconnect-max",
                                 "500",     NULL};
    h_workers_start(c, 2, wargs);
    putter p;
    snprintf(p.ids_file, sizeof p.ids_file, "%s/ids", c->dir);
    pid_t pid = e2e_client_fork(c, putting_client, &p, true);
    assert_true(h_eventually(stores_hold_2mib, c, 10000));
    h_sched_kill(c, SIGKILL);
    const char *const none[] = {"--state-dir", "none", NULL};
    h_sched_restart(c, none);
    assert_true(h_eventually(workers_registered, c, 20000));
    assert_true(h_eventually(stores_empty, c, 20000));
    e2e_client_kill(pid);
    E2E_STOP(c, NULL);
}

/* ------------------------------------------------------------------ graphs */

/* The forked client's job: four kept 1 MiB fills and a kept checksum of the first, finished
 * (the fourth fill then released); a kept checksum of a put of the first fill's bytes, finished,
 * the put then released (gone before the kill); then a graph in flight: a sleep, and a kept
 * checksum of the first fill and the sleep's empty output. The refs go to a file: fill 0..3,
 * sum0, sum1, sumput. */
enum { G_FILLS = 4, G_SUM0 = 4, G_SUM1 = 5, G_SUMPUT = 6, G_REFS = 7 };

static int graph_client(spillway *cl, void *arg)
{
    const putter *p = arg;
    spillway_ref r[G_REFS];
    spillway_graph *g = spillway_graph_new(cl);
    for (int i = 0; i < G_FILLS; i++) {
        uint8_t pat = (uint8_t)('a' + i);
        spillway_arg a[2] = {spillway_arg_u64(PUT_BYTES), spillway_arg_bytes(&pat, 1)};
        if (spillway_task(g, "fill", a, 2, SPILLWAY_KEEP, &r[i]) != 0)
            return 1;
    }
    spillway_arg in = spillway_arg_ref(r[0]);
    if (spillway_task(g, "checksum", &in, 1, SPILLWAY_KEEP, &r[G_SUM0]) != 0 ||
        spillway_submit(g) != 0 || spillway_wait(cl, r, G_SUM0 + 1, 60000) != 0 ||
        spillway_release(cl, r[G_FILLS - 1]) != 0)
        return 1;
    uint8_t *buf = malloc(PUT_BYTES);
    memset(buf, 'a', PUT_BYTES);
    spillway_ref put;
    int rc = spillway_put(cl, buf, PUT_BYTES, &put);
    free(buf);
    g = spillway_graph_new(cl);
    in = spillway_arg_ref(put);
    if (rc != 0 || spillway_task(g, "checksum", &in, 1, SPILLWAY_KEEP, &r[G_SUMPUT]) != 0 ||
        spillway_submit(g) != 0 || spillway_wait(cl, &r[G_SUMPUT], 1, 60000) != 0 ||
        spillway_release(cl, put) != 0)
        return 1;
    g = spillway_graph_new(cl);
    spillway_ref slept;
    spillway_arg ms = spillway_arg_u64(2500);
    if (spillway_task(g, "sleep_ms", &ms, 1, 0, &slept) != 0)
        return 1;
    spillway_arg two[2] = {spillway_arg_ref(r[0]), spillway_arg_ref(slept)};
    if (spillway_task(g, "checksum", two, 2, SPILLWAY_KEEP, &r[G_SUM1]) != 0 ||
        spillway_submit(g) != 0)
        return 1;
    FILE *f = fopen(p->ids_file, "we");
    if (f == NULL)
        return 1;
    for (int i = 0; i < G_REFS; i++)
        fprintf(f, "%llu %llu\n", (unsigned long long)r[i].hi, (unsigned long long)r[i].lo);
    fclose(f);
    return 0;
}

typedef struct gstate {
    h_cluster *c;
    spillway_ref r[G_REFS];
    char hex[G_REFS][33];
    uint64_t done; /* tasks_done summed over the workers, at least */
} gstate;

static bool fill3_released(void *arg)
{
    gstate *g = arg;
    json_t *doc = e2e_ctl_json(g->c, "memory");
    bool ok = doc != NULL && find_obj(doc, g->hex[G_FILLS - 1]) == NULL &&
              find_obj(doc, g->hex[0]) != NULL;
    json_decref(doc);
    return ok;
}

static bool tasks_done_reach(void *arg)
{
    gstate *g = arg;
    return e2e_memory_sum(g->c, "tasks_done") >= g->done;
}

static bool fills_as_before(void *arg)
{
    gstate *g = arg;
    json_t *doc = e2e_ctl_json(g->c, "memory");
    bool ok = doc != NULL && find_obj(doc, g->hex[G_FILLS - 1]) == NULL;
    for (int i = 0; ok && i < G_FILLS - 1; i++) {
        json_t *o = find_obj(doc, g->hex[i]);
        ok = o != NULL && strcmp(json_string_value(json_object_get(o, "state")), "ready") == 0 &&
             json_array_size(json_object_get(o, "locations")) == 1;
    }
    json_decref(doc);
    return ok;
}

static bool graphs_finished(void *arg)
{
    gstate *g = arg;
    json_t *doc = e2e_ctl_json(g->c, "jobs");
    size_t i, n = 0;
    json_t *gr;
    bool ok = doc != NULL;
    json_array_foreach(json_object_get(doc, "graphs"), i, gr)
    {
        n++;
        ok = ok && json_is_true(json_object_get(gr, "finished"));
    }
    json_decref(doc);
    return ok && n == 3;
}

/* Graphs survive kill -9 of the scheduler: finished tasks stay finished (their outputs, kept
 * by the workers, are claimed, not computed again; an inline result comes from the journal),
 * the graph in flight runs to its end, a released output stays released. */
static void graphs_survive_a_scheduler_kill(void)
{
    sdir d;
    h_cluster *c = start(&d, 2);
    putter p;
    snprintf(p.ids_file, sizeof p.ids_file, "%s/refs", c->dir);
    pid_t pid = e2e_client_fork(c, graph_client, &p, true);
    gstate g = {.c = c, .done = G_FILLS + 2};
    FILE *f = fopen(p.ids_file, "re");
    assert_non_null(f);
    for (int i = 0; i < G_REFS; i++) {
        unsigned long long hi, lo;
        assert_int_equal(fscanf(f, "%llu %llu", &hi, &lo), 2);
        g.r[i] = (spillway_ref){hi, lo};
        spillway_ref_hex(g.r[i], g.hex[i]);
    }
    fclose(f);
    assert_true(h_eventually(fill3_released, &g, 10000));
    assert_true(h_eventually(tasks_done_reach, &g, 10000));
    uint64_t before = e2e_memory_sum(c, "tasks_done");
    assert_int_equal(before, G_FILLS + 2);

    int ws = h_sched_kill(c, SIGKILL);
    assert_true(WIFSIGNALED(ws));
    h_sched_restart(c, d.args);
    assert_true(h_eventually(workers_registered, c, 20000));
    assert_true(h_eventually(fills_as_before, &g, 20000));
    /* Another client reads both checksums by id: the one made before the kill (restored from
     * the journal) and the one made after (from the claimed fill). */
    spillway *cl = e2e_connect(c);
    uint64_t sum0 = e2e_get_u64(cl, g.r[G_SUM0]);
    uint64_t sum1 = e2e_get_u64(cl, g.r[G_SUM1]);
    assert_int_equal(sum0, sum1);
    /* Its input was released before the kill: its outcome comes from the journal alone. */
    assert_int_equal(e2e_get_u64(cl, g.r[G_SUMPUT]), sum0);
    assert_true(h_eventually(graphs_finished, &g, 20000));
    /* The sleep ran at most twice (a run the old scheduler never heard the end of, and again),
     * the second checksum once; the fills and the first checksums not again. */
    g.done = before + 2;
    assert_true(h_eventually(tasks_done_reach, &g, 10000));
    assert_true(e2e_memory_sum(c, "tasks_done") <= before + 3);
    json_t *st = e2e_ctl_json(c, "status");
    assert_non_null(st);
    assert_int_equal(json_integer_value(json_object_get(json_object_get(st, "lineage"), "reruns")),
                     0);
    json_decref(st);
    e2e_client_kill(pid);
    E2E_STOP(c, cl);
}

/* ------------------------------------------------------------- compaction */

#define ROUND_TASKS 1000

/* One job: a put and a graph of kept tasks reading it, waited for and released. The put is
 * above the inline limit, so tasks name it rather than carry it. */
static void one_job(spillway *cl)
{
    static uint8_t buf[1 << 20];
    spillway_ref in, out[ROUND_TASKS];
    assert_int_equal(spillway_put(cl, buf, sizeof buf, &in), 0);
    spillway_graph *g = spillway_graph_new(cl);
    for (int i = 0; i < ROUND_TASKS; i++) {
        spillway_arg a[2] = {spillway_arg_ref(in), spillway_arg_u64((uint64_t)i)};
        assert_int_equal(spillway_task(g, "len", a, 2, SPILLWAY_KEEP, &out[i]), 0);
    }
    E2E_SUBMIT(g);
    assert_int_equal(spillway_wait(cl, out, ROUND_TASKS, 60000), 0);
    assert_int_equal(spillway_release_many(cl, out, ROUND_TASKS), 0);
    assert_int_equal(spillway_release(cl, in), 0);
}

static off_t file_size(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 ? st.st_size : -1;
}

/* Records of finished, released graphs and freed objects are deleted: over repeated jobs the
 * journal's file stops growing (LMDB reuses the freed pages), and nothing is left to restore. */
static void journal_stays_bounded_over_repeated_jobs(void)
{
    sdir d;
    h_cluster *c = start(&d, 1);
    char path[600];
    snprintf(path, sizeof path, "%s/journal", d.path);
    spillway *cl = e2e_connect(c);
    off_t early = 0;
    for (int round = 0; round < 30; round++) {
        one_job(cl);
        if (round == 9)
            early = file_size(path);
    }
    off_t late = file_size(path);
    fprintf(stderr, "journal: %lld bytes after 10 jobs, %lld after 30\n", (long long)early,
            (long long)late);
    assert_true(early > 0);
    /* A journal that kept every job would be three times its size after 10 by now. The level
     * the file settles at moves with how many turns each write carries (the writer takes what
     * queued while it wrote), so it may still step up a little after 10 jobs. */
    assert_true(late <= early + early / 2 + (64 << 10));
    assert_true(e2e_cluster_idle(c, 20000));
    spillway_close(cl);
    /* The client is gone: a restart finds nothing to restore. */
    assert_true(h_eventually(no_client_sessions, c, 10000));
    h_sched_kill(c, SIGKILL);
    h_sched_restart(c, d.args);
    assert_true(e2e_logged(&c->sched, "restored 0 sessions, 0 plugins, 0 SUBMIT frames", 10000));
    E2E_STOP(c, NULL);
}

/* ------------------------------------------------------ unusable journals */

static bool corrupt_aside(const char *dir)
{
    DIR *dh = opendir(dir);
    bool found = false;
    for (struct dirent *e; dh != NULL && (e = readdir(dh)) != NULL;)
        found = found || strncmp(e->d_name, "journal.corrupt-", 16) == 0;
    if (dh != NULL)
        closedir(dh);
    return found;
}

enum damage { TRUNCATE, OVERWRITE, GARBAGE };

/* A journal with content, damaged while the scheduler is down: it starts empty, says so
 * naming the file, keeps the damaged file aside, and serves. */
static void damaged_journal(enum damage how)
{
    sdir d;
    h_cluster *c = start(&d, 1);
    spillway *cl = e2e_connect(c);
    spillway_ref r;
    uint8_t *buf = calloc(1, PUT_BYTES);
    assert_int_equal(spillway_put(cl, buf, PUT_BYTES, &r), 0);
    free(buf);
    e2e_client_works(cl);
    h_sched_kill(c, SIGKILL);
    spillway_close(cl);
    char path[600];
    snprintf(path, sizeof path, "%s/journal", d.path);
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    if (how == TRUNCATE) {
        assert_int_equal(truncate(path, st.st_size / 2 > 8192 ? 8192 : st.st_size / 2), 0);
    } else if (how == OVERWRITE) {
        /* The meta pages stay; the end of every later page, where a leaf keeps its records, is
         * overwritten. */
        int fd = open(path, O_WRONLY);
        assert_true(fd >= 0);
        char junk[64];
        memset(junk, 0x5a, sizeof junk);
        for (off_t at = 3 * 4096 - 96; at + (off_t)sizeof junk <= st.st_size; at += 4096)
            assert_int_equal(pwrite(fd, junk, sizeof junk, at), (ssize_t)sizeof junk);
        close(fd);
    } else {
        e2e_write_file(path, "this is no LMDB file, only text that took its name\n", 0600);
    }
    h_sched_restart(c, d.args);
    assert_true(e2e_logged(&c->sched, "is unusable", 10000));
    assert_true(h_log_count(&c->sched, path) > 0);
    assert_true(corrupt_aside(d.path));
    cl = e2e_connect(c);
    e2e_client_works(cl);
    E2E_STOP(c, cl);
}

static void truncated_journal_starts_empty(void)
{
    damaged_journal(TRUNCATE);
}

static void overwritten_journal_starts_empty(void)
{
    damaged_journal(OVERWRITE);
}

static void garbage_journal_starts_empty(void)
{
    damaged_journal(GARBAGE);
}

/* One client rides out three kills of its scheduler: between kills it puts, submits and
 * waits; its pending calls are answered after each restart (the client reconnects and resumes
 * its session from the journal), every result is exact, nothing it released comes back, and
 * the stores end empty once it releases the rest. */
#define RIDE_ROUNDS 3
#define RIDE_TASKS 50

static void client_rides_out_three_scheduler_kills(void)
{
    sdir d;
    h_cluster *c = start(&d, 2);
    spillway *cl = e2e_connect(c);
    uint8_t *buf = malloc(PUT_BYTES);
    spillway_ref puts[RIDE_ROUNDS], sums[RIDE_ROUNDS][RIDE_TASKS], slow[RIDE_ROUNDS];
    for (int k = 0; k < RIDE_ROUNDS; k++) {
        memset(buf, 'a' + k, PUT_BYTES);
        assert_int_equal(spillway_put(cl, buf, PUT_BYTES, &puts[k]), 0);
        spillway_graph *g = spillway_graph_new(cl);
        spillway_arg in = spillway_arg_ref(puts[k]);
        for (int i = 0; i < RIDE_TASKS; i++)
            assert_int_equal(spillway_task(g, "checksum", &in, 1, SPILLWAY_KEEP, &sums[k][i]),
                             0);
        spillway_arg ms = spillway_arg_u64(1500);
        assert_int_equal(spillway_task(g, "sleep_ms", &ms, 1, SPILLWAY_KEEP, &slow[k]), 0);
        E2E_SUBMIT(g);
        assert_int_equal(spillway_wait(cl, sums[k], RIDE_TASKS, 60000), 0);
        /* The sleep is under way: the scheduler dies and comes back on the same journal. */
        int ws = h_sched_kill(c, SIGKILL);
        assert_true(WIFSIGNALED(ws));
        h_sched_restart(c, d.args);
        assert_int_equal(spillway_wait(cl, &slow[k], 1, 60000), 0);
        uint64_t want = e2e_get_u64(cl, sums[k][0]);
        for (int i = 1; i < RIDE_TASKS; i++)
            assert_int_equal(e2e_get_u64(cl, sums[k][i]), want);
        void *out = NULL;
        size_t len = 0;
        int grc = spillway_get(cl, puts[k], 10000, &out, &len);
        if (grc != 0)
            fail_msg("get of put %d: %s", k, spillway_errmsg(cl));
        assert_int_equal(len, PUT_BYTES);
        assert_memory_equal(out, buf, PUT_BYTES);
        spillway_free(out);
        if (k > 0) { /* the last round's checksums go; the put stays */
            for (int i = 0; i < RIDE_TASKS; i++)
                assert_int_equal(spillway_release(cl, sums[k - 1][i]), 0);
            assert_int_equal(spillway_release(cl, slow[k - 1]), 0);
        }
    }
    free(buf);
    for (int k = 0; k < RIDE_ROUNDS; k++)
        assert_int_equal(spillway_release(cl, puts[k]), 0);
    for (int i = 0; i < RIDE_TASKS; i++)
        assert_int_equal(spillway_release(cl, sums[RIDE_ROUNDS - 1][i]), 0);
    assert_int_equal(spillway_release(cl, slow[RIDE_ROUNDS - 1]), 0);
    assert_true(h_eventually(stores_empty, c, 20000));
    E2E_FINISH(c, cl);
}

/* The workers holding the object hex (memory listing), none of them named `not`; false if the
 * listing fails. */
typedef struct copies_on {
    h_cluster *c;
    const char *hex;
    const char *not; /* a worker that must not be listed, or NULL */
    char first[64];  /* the first holder listed */
} copies_on;

static bool two_copies(void *arg)
{
    copies_on *a = arg;
    json_t *doc = e2e_ctl_json(a->c, "memory");
    json_t *o = doc != NULL ? find_obj(doc, a->hex) : NULL;
    json_t *locs = json_object_get(o, "locations"), *loc;
    size_t i, n = 0;
    bool ok = o != NULL;
    json_array_foreach(locs, i, loc)
    {
        const char *node = json_string_value(json_object_get(loc, "node"));
        ok = ok && node != NULL && (a->not == NULL || strcmp(node, a->not) != 0);
        if (node != NULL && n++ == 0)
            snprintf(a->first, sizeof a->first, "%s", node);
    }
    json_decref(doc);
    return ok && n == 2;
}

/* A put kept on two workers (put_replicas = 2) is restored with its count of copies: a holder
 * killed after the scheduler's restart is replaced by a copy on the third worker. */
static void put_replicas_survive_a_scheduler_kill(void)
{
    sdir d;
    h_cluster *c = start(&d, 3);
    spillway_opts o;
    spillway_opts_init(&o);
    o.put_replicas = 2;
    spillway *cl;
    assert_int_equal(spillway_connect(c->addr, &o, &cl), 0);
    uint8_t *buf = malloc(PUT_BYTES);
    assert_non_null(buf);
    memset(buf, 'r', PUT_BYTES);
    spillway_ref r;
    assert_int_equal(spillway_put(cl, buf, PUT_BYTES, &r), 0);
    char hex[33];
    copies_on a = {c, spillway_ref_hex(r, hex), NULL, ""};
    assert_true(h_eventually(two_copies, &a, 20000));
    h_sched_kill(c, SIGKILL);
    h_sched_restart(c, d.args);
    assert_true(h_eventually(workers_registered, c, 20000));
    assert_true(h_eventually(two_copies, &a, 20000));
    char gone[64];
    snprintf(gone, sizeof gone, "%s", a.first);
    /* Nodes are listed as HOST:PORT with the worker's peer port. */
    int victim = -1;
    const char *port = strrchr(gone, ':');
    for (int i = 0; port != NULL && i < c->nworkers; i++) {
        const char *wp = strrchr(c->workers[i].addr, ':');
        if (wp != NULL && strcmp(wp, port) == 0)
            victim = i;
    }
    assert_true(victim >= 0);
    h_worker_kill(c, victim, SIGKILL);
    a.not = gone;
    assert_true(h_eventually(two_copies, &a, 30000));
    void *back;
    size_t len;
    assert_int_equal(spillway_get(cl, r, 60000, &back, &len), 0);
    assert_int_equal(len, PUT_BYTES);
    assert_memory_equal(back, buf, PUT_BYTES);
    spillway_free(back);
    free(buf);
    assert_int_equal(spillway_release(cl, r), 0);
    spillway_close(cl);
    E2E_STOP(c, NULL);
}

/* An uploaded plugin survives a kill of the scheduler: a graph naming it, in flight then, runs
 * to its end, the client's handle on it still works for a graph submitted after the restart,
 * and once released everything goes. */
static void uploaded_plugin_survives_a_scheduler_kill(void)
{
    sdir d;
    sdir_init(&d, h_cluster_bare());
    h_cluster *c = h_cluster_start(true, d.args);
    const char *const wargs[] = {"--slots", "1", "--store-capacity", "64M", "--reconnect-max",
                                 "500",     NULL};
    h_workers_start(c, 2, wargs);
    spillway *cl = e2e_connect(c);
    spillway_plugin *p = NULL;
    int rc = spillway_plugin_add(cl, SPW_TEST_PLUGIN_VER1, &p);
    if (rc != 0)
        fail_msg("spillway_plugin_add: %s: %s", spillway_strerror(rc), spillway_errmsg(cl));
    char fn[SPILLWAY_FN_MAX];
    assert_non_null(spillway_plugin_fn(p, "scale", fn, sizeof fn));
    enum { N = 20 };
    spillway_ref before[N], after[N], slow;
    spillway_graph *g = spillway_graph_new(cl);
    for (int i = 0; i < N; i++) {
        spillway_arg x = spillway_arg_u64((uint64_t)i);
        assert_int_equal(spillway_task(g, fn, &x, 1, SPILLWAY_KEEP, &before[i]), 0);
    }
    spillway_arg ms = spillway_arg_u64(1500);
    assert_int_equal(spillway_task(g, "sleep_ms", &ms, 1, SPILLWAY_KEEP, &slow), 0);
    E2E_SUBMIT(g);
    assert_int_equal(spillway_wait(cl, before, N, 60000), 0);
    int ws = h_sched_kill(c, SIGKILL);
    assert_true(WIFSIGNALED(ws));
    h_sched_restart(c, d.args);
    assert_true(h_log_count(&c->sched, "1 plugins") == 1);
    assert_int_equal(spillway_wait(cl, &slow, 1, 60000), 0);
    g = spillway_graph_new(cl);
    for (int i = 0; i < N; i++) {
        spillway_arg x = spillway_arg_u64((uint64_t)i);
        assert_int_equal(spillway_task(g, fn, &x, 1, SPILLWAY_KEEP, &after[i]), 0);
    }
    E2E_SUBMIT(g);
    for (int i = 0; i < N; i++) {
        assert_int_equal(e2e_get_u64(cl, before[i]), (uint64_t)i * 1000 + 1);
        assert_int_equal(e2e_get_u64(cl, after[i]), (uint64_t)i * 1000 + 1);
    }
    assert_int_equal(spillway_release_many(cl, before, N), 0);
    assert_int_equal(spillway_release_many(cl, after, N), 0);
    assert_int_equal(spillway_release(cl, slow), 0);
    assert_int_equal(spillway_plugin_release(p), 0);
    assert_true(h_eventually(stores_empty, c, 20000));
    E2E_FINISH(c, cl);
}

static const struct CMUnitTest tests[] = {
    H_CASE(puts_survive_a_scheduler_kill),
    H_CASE(puts_survive_a_scheduler_stop),
    H_CASE(without_journal_objects_are_dropped),
    H_CASE(graphs_survive_a_scheduler_kill),
    H_CASE(journal_stays_bounded_over_repeated_jobs),
    H_CASE(truncated_journal_starts_empty),
    H_CASE(overwritten_journal_starts_empty),
    H_CASE(garbage_journal_starts_empty),
    H_CASE(client_rides_out_three_scheduler_kills),
    H_CASE(uploaded_plugin_survives_a_scheduler_kill),
    H_CASE(put_replicas_survive_a_scheduler_kill),
};

SPW_TEST_MAIN(tests)
