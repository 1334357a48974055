/* Unit tests for spilling: LMDB + zstd under a real store, driven by a real loop. */
#include "spillway/objstore.h"

#include <dirent.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <xxhash.h>
#include <zstd.h>

#include "spill_record.h"
#include "store_int.h"
#include "test_main.h"

static uv_loop_t loop;
static char dir[256];

static uint32_t lanes;    /* spill_threads of the next mk (0: the default) */
static uint32_t retry_ms; /* spill_retry_ms of the next mk (0: the default) */
static uint32_t quiet_ms; /* compact_quiet_ms of the next mk (the cases compact at once) */

static ost_store *mk(uint64_t capacity, uint64_t map_size, uint64_t map_max, uint32_t wait_ms)
{
    uv_loop_init(&loop);
    snprintf(dir, sizeof dir, "/tmp/spw-spill-test-XXXXXX");
    assert_non_null(mkdtemp(dir));
    ost_opts o;
    ost_opts_default(&o);
    o.capacity = capacity;
    o.spill_dir = dir;
    o.spill_map_size = map_size;
    o.spill_map_max = map_max;
    o.alloc_wait_ms = wait_ms;
    o.name = "spilltest";
    o.spill_threads = lanes;
    if (retry_ms != 0)
        o.spill_retry_ms = retry_ms;
    o.compact_quiet_ms = quiet_ms;
    ost_store *s = NULL;
    assert_int_equal(ost_store_new(&loop, &o, &s), 0);
    return s;
}

static int entries_in(const char *path)
{
    DIR *d = opendir(path);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

static void done(ost_store *s)
{
    ost_store_quiesce(s, NULL, NULL);
    uv_run(&loop, UV_RUN_DEFAULT);
    ost_store_free(s);
    assert_int_equal(uv_loop_close(&loop), 0);
    assert_int_equal(spw_heap_used(SPW_MOD_OBJSTORE), 0);
    assert_int_equal(entries_in(dir), 0); /* nothing left behind */
    rmdir(dir);
}

static ost_stats stats(ost_store *s)
{
    ost_stats st;
    ost_stats_get(s, &st);
    return st;
}

static spw_id id(uint64_t n)
{
    return (spw_id){0x5111ULL, n};
}

/* Deterministic contents: compressible (a random walk of doubles) or not (random bytes). */
static void fill_obj(uint8_t *p, size_t n, uint64_t seed, bool compressible)
{
    uint64_t x = seed * 0x9E3779B97F4A7C15ULL + 1;
    double v = 100;
    for (size_t i = 0; i + 8 <= n; i += 8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        if (compressible) {
            v += (double)((int)(x % 21) - 10) * 0.01;
            memcpy(p + i, &v, 8);
        } else {
            memcpy(p + i, &x, 8);
        }
    }
}

static ost_obj *put(ost_store *s, uint64_t n, size_t size, bool compressible)
{
    ost_obj *o;
    assert_int_equal(ost_obj_create(s, id(n), size, &o), 0);
    fill_obj(ost_obj_data(o), size, n, compressible);
    assert_int_equal(ost_obj_seal(s, o), 0);
    return o;
}

typedef struct got {
    int calls, status;
    ost_obj *o;
} got;

static void got_cb(void *arg, int status, ost_obj *o)
{
    got *g = arg;
    g->calls++;
    g->status = status;
    g->o = o;
}

/* Gets an object back (restoring it if spilled) and checks every byte. */
static void check(ost_store *s, uint64_t n, size_t size, bool compressible)
{
    ost_obj *o = ost_obj_find(s, id(n));
    assert_non_null(o);
    got g = {0};
    ost_obj_get_async(s, o, got_cb, &g);
    while (g.calls == 0)
        uv_run(&loop, UV_RUN_ONCE);
    assert_int_equal(g.status, 0);
    uint8_t *want = malloc(size);
    fill_obj(want, size, n, compressible);
    assert_memory_equal(ost_obj_data(o), want, size);
    free(want);
    assert_int_equal(ost_obj_unpin(s, o), 0);
}

static void spill_past_threshold_then_restore_every_byte(void **state)
{
    (void)state;
    ost_store *s = mk(16u << 20, 0, 0, 30000);
    /* 10x the capacity, compressible and not, alternately. */
    for (uint64_t i = 0; i < 40; i++) {
        ost_obj *o;
        got g = {0};
        ost_obj_create_async(s, id(i), 4u << 20, got_cb, &g);
        while (g.calls == 0)
            uv_run(&loop, UV_RUN_ONCE);
        assert_int_equal(g.status, 0);
        o = g.o;
        fill_obj(ost_obj_data(o), 4u << 20, i, i % 2 == 0);
        ost_obj_seal(s, o);
        assert_true(stats(s).used <= 16u << 20);
    }
    uv_run(&loop, UV_RUN_DEFAULT);
    ost_stats st = stats(s);
    assert_true(st.objs_disk > 0);
    assert_true(st.spilled_raw >= st.objs_disk * (4u << 20) - (4u << 20));
    assert_true(st.spilled_stored < st.spilled_raw); /* half of it compresses */
    assert_true(st.used <= (uint64_t)(0.8 * (16u << 20)) + (4u << 20));
    for (uint64_t i = 0; i < 40; i++)
        check(s, i, 4u << 20, i % 2 == 0);
    assert_true(stats(s).restore_count > 0);
    for (uint64_t i = 0; i < 40; i++)
        assert_int_equal(ost_obj_delete(s, id(i)), 0);
    uv_run(&loop, UV_RUN_DEFAULT);
    st = stats(s);
    assert_int_equal(st.used, 0);
    assert_int_equal(st.objs_disk, 0);
    assert_int_equal(st.spilled_raw, 0);
    assert_int_equal(st.spilled_stored, 0);
    assert_int_equal(st.spill_entries, 0);
    done(s);
}

static void second_eviction_costs_no_write(void **state)
{
    (void)state;
    ost_store *s = mk(8u << 20, 0, 0, 30000);
    put(s, 1, 4u << 20, true);
    assert_int_equal(ost_store_spill_all(s), 0);
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_int_equal(stats(s).spill_count, 1);
    assert_int_equal(stats(s).used, 0);
    check(s, 1, 4u << 20, true); /* restored: in memory and still on disk */
    assert_int_equal(stats(s).objs_disk, 1);
    assert_int_equal(ost_store_spill_all(s), 0);
    uv_run(&loop, UV_RUN_DEFAULT);
    ost_stats st = stats(s);
    assert_int_equal(st.spill_count, 1); /* no second write */
    assert_int_equal(st.evictions, 1);
    assert_int_equal(st.used, 0);
    check(s, 1, 4u << 20, true);
    ost_obj_delete(s, id(1));
    done(s);
}

/* Pinned objects keep their memory (a spill may copy them, never free them), so a store full of
 * pinned objects makes allocations wait, then fail with SPW_EBACKPRESSURE. */
static void pinned_objects_keep_memory_and_allocations_fail_clearly(void **state)
{
    (void)state;
    ost_store *s = mk(8u << 20, 0, 0, 0);
    ost_obj *a = put(s, 1, 4u << 20, true);
    ost_obj *b = put(s, 2, 4u << 20, true);
    assert_int_equal(ost_obj_pin(s, a), 0);
    assert_int_equal(ost_obj_pin(s, b), 0);
    got g = {0};
    ost_obj_create_async(s, id(3), 1u << 20, got_cb, &g);
    uv_run(&loop, UV_RUN_DEFAULT);
    ost_store_maintain(s); /* the deadline (0 ms) has passed */
    assert_int_equal(g.calls, 1);
    assert_int_equal(g.status, SPW_EBACKPRESSURE);
    assert_int_equal(stats(s).used, 8u << 20);
    assert_int_equal(stats(s).pinned, 8u << 20);
    assert_int_equal(ost_obj_unpin(s, a), 0);
    assert_int_equal(ost_obj_unpin(s, b), 0);
    check(s, 1, 4u << 20, true);
    ost_obj_delete(s, id(1));
    ost_obj_delete(s, id(2));
    done(s);
}

static void larger_than_capacity_is_etoobig(void **state)
{
    (void)state;
    ost_store *s = mk(8u << 20, 0, 0, 30000);
    got g = {0};
    ost_obj_create_async(s, id(1), (8u << 20) + 1, got_cb, &g);
    assert_int_equal(g.calls, 1);
    assert_int_equal(g.status, SPW_ETOOBIG);
    done(s);
}

/* A tiny map that cannot grow: spills fail, nothing is lost, the error says why. */
static void full_spill_map_fails_cleanly_and_keeps_objects(void **state)
{
    (void)state;
    ost_store *s = mk(8u << 20, 1u << 20, 1u << 20, 0);
    /* Random data does not compress: 4 MiB cannot fit a 1 MiB map. */
    put(s, 1, 4u << 20, false);
    put(s, 2, 3u << 20, false);
    uv_run(&loop, UV_RUN_DEFAULT);
    ost_stats st = stats(s);
    assert_int_equal(st.objs_disk, 0);
    assert_int_equal(st.spill_entries, 0);
    got g = {0};
    ost_obj_create_async(s, id(3), 4u << 20, got_cb, &g);
    uv_run(&loop, UV_RUN_DEFAULT);
    ost_store_maintain(s);
    assert_int_equal(g.calls, 1);
    assert_int_equal(g.status, SPW_ESPILLFULL);
    check(s, 1, 4u << 20, false);
    check(s, 2, 3u << 20, false);
    ost_obj_delete(s, id(1));
    ost_obj_delete(s, id(2));
    done(s);
}

/* With the store full and the spill storage full, nothing spilling: once one allocation has
 * given up, the next ones fail at once with SPW_ESPILLFULL instead of each waiting its whole
 * alloc_wait in turn (a job of many tasks would take one wait per task to fail). When room
 * comes back, allocations succeed again. */
static void full_spill_storage_fails_later_allocations_at_once(void **state)
{
    (void)state;
    ost_store *s = mk(8u << 20, 1u << 20, 1u << 20, 50);
    put(s, 1, 4u << 20, false); /* random: cannot fit the 1 MiB map */
    put(s, 2, 3u << 20, false);
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_string_not_equal(ost_store_full_reason(s), "");
    got first = {0};
    ost_obj_create_async(s, id(3), 4u << 20, got_cb, &first);
    while (first.calls == 0) {
        uv_run(&loop, UV_RUN_NOWAIT);
        ost_store_maintain(s);
    }
    assert_int_equal(first.status, SPW_ESPILLFULL);
    for (uint64_t n = 4; n < 8; n++) {
        got g = {0};
        ost_obj_create_async(s, id(n), 2u << 20, got_cb, &g);
        assert_int_equal(g.calls, 1); /* answered before the call returns: no wait */
        assert_int_equal(g.status, SPW_ESPILLFULL);
    }
    /* An allocation that fits is not refused. */
    ost_obj *o = NULL;
    got small = {0};
    ost_obj_create_async(s, id(8), 512u << 10, got_cb, &small);
    assert_int_equal(small.calls, 1);
    assert_int_equal(small.status, 0);
    o = small.o;
    ost_obj_abort(s, o);
    /* Room comes back: a large allocation succeeds again. */
    ost_obj_delete(s, id(1));
    got later = {0};
    ost_obj_create_async(s, id(9), 4u << 20, got_cb, &later);
    while (later.calls == 0)
        uv_run(&loop, UV_RUN_ONCE);
    assert_int_equal(later.status, 0);
    ost_obj_abort(s, later.o);
    ost_obj_delete(s, id(2));
    done(s);
}

static void timer_done(uv_timer_t *t)
{
    (void)t;
}

/* A failed spill does not leave spilling off until the worker restarts: with nothing on disk
 * nothing frees space, so it is tried again spill_retry_ms after the failure (at a maintenance
 * call), and objects that fit are spilled. Here the object that did not fit the map is gone. */
static void failed_spill_is_tried_again(void **state)
{
    (void)state;
    retry_ms = 1;
    ost_store *s = mk(8u << 20, 1u << 20, 1u << 20, 0);
    put(s, 1, 4u << 20, false); /* random: 4 MiB cannot fit a 1 MiB map */
    put(s, 2, 3u << 20, false);
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_int_equal(stats(s).objs_disk, 0);
    assert_string_not_equal(ost_store_full_reason(s), "");
    ost_obj_delete(s, id(1));
    ost_obj_delete(s, id(2));
    for (uint64_t n = 3; n < 17; n++) /* 7 MiB, compressible: a 512 KiB one fits the map */
        put(s, n, 512u << 10, true);
    /* The retry interval from the failure, on the loop's clock, then a maintenance call (the
     * worker makes one every heartbeat). */
    uv_timer_t t;
    uv_timer_init(&loop, &t);
    uv_timer_start(&t, timer_done, 2, 0);
    uv_run(&loop, UV_RUN_DEFAULT);
    uv_close((uv_handle_t *)&t, NULL);
    ost_store_maintain(s);
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_true(stats(s).objs_disk > 0);
    for (uint64_t n = 3; n < 17; n++)
        check(s, n, 512u << 10, true);
    for (uint64_t n = 3; n < 17; n++)
        ost_obj_delete(s, id(n));
    retry_ms = 0;
    done(s);
}

static void map_grows_when_allowed(void **state)
{
    (void)state;
    ost_store *s = mk(8u << 20, 1u << 20, 0, 30000);
    for (uint64_t i = 0; i < 6; i++) {
        got g = {0};
        ost_obj_create_async(s, id(i), 3u << 20, got_cb, &g);
        while (g.calls == 0)
            uv_run(&loop, UV_RUN_ONCE);
        assert_int_equal(g.status, 0);
        fill_obj(ost_obj_data(g.o), 3u << 20, i, false);
        ost_obj_seal(s, g.o);
    }
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_true(stats(s).objs_disk >= 3);
    for (uint64_t i = 0; i < 6; i++)
        check(s, i, 3u << 20, false);
    for (uint64_t i = 0; i < 6; i++)
        ost_obj_delete(s, id(i));
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_int_equal(stats(s).spill_entries, 0);
    done(s);
}

/* A store of twice `size` whose object 1 of `size` bytes is deleted while its spill runs, once
 * the loop has nothing left to do: the object's memory is back. */
static ost_store *deleted_while_spilled(size_t size, bool compressible)
{
    ost_store *s = mk(2 * size, 0, 0, 30000);
    put(s, 1, size, compressible);
    assert_int_equal(ost_store_spill_all(s), 0);
    assert_int_equal(ost_obj_delete(s, id(1)), 0); /* while the job writes it */
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_int_equal(stats(s).used, 0);
    return s;
}

static void delete_during_spill_is_safe(void **state)
{
    (void)state;
    ost_store *s = deleted_while_spilled(4u << 20, true);
    ost_stats st = stats(s);
    assert_int_equal(st.objs_disk, 0);
    assert_int_equal(st.spill_entries, 0);
    done(s);
}

/* Allocated bytes of our open spill data files under dir (they are unlinked: found through
 * /proc/self/fd, like `du` of /proc/PID/fd targets; LMDB holds its data file twice). */
static uint64_t spill_disk(void)
{
    DIR *d = opendir("/proc/self/fd");
    assert_non_null(d);
    uint64_t sum = 0;
    ino_t seen[16];
    size_t nseen = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        char link[300], target[PATH_MAX];
        snprintf(link, sizeof link, "/proc/self/fd/%s", e->d_name);
        ssize_t n = readlink(link, target, sizeof target - 1);
        if (n <= 0)
            continue;
        target[n] = '\0';
        struct stat st;
        if (strncmp(target, dir, strlen(dir)) != 0 || strstr(target, "data.mdb") == NULL ||
            stat(link, &st) != 0)
            continue;
        bool dup = false;
        for (size_t i = 0; i < nseen; i++)
            dup |= seen[i] == st.st_ino;
        if (!dup && nseen < 16) {
            seen[nseen++] = st.st_ino;
            sum += (uint64_t)st.st_blocks * 512;
        }
    }
    closedir(d);
    return sum;
}

/* Objects 0..n-1 of 4 MiB of random bytes, each made as room comes, all spilled. */
static void spill_random(ost_store *s, uint64_t n)
{
    for (uint64_t i = 0; i < n; i++) {
        got g = {0};
        ost_obj_create_async(s, id(i), 4u << 20, got_cb, &g);
        while (g.calls == 0)
            uv_run(&loop, UV_RUN_ONCE);
        assert_int_equal(g.status, 0);
        fill_obj(ost_obj_data(g.o), 4u << 20, i, false);
        ost_obj_seal(s, g.o);
    }
    assert_int_equal(ost_store_spill_all(s), 0);
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_int_equal(stats(s).objs_disk, n);
}

static int compactions; /* "compacted" lines the store logged (count_compactions) */

static void count_compactions(int level, const char *msg)
{
    (void)level;
    if (strstr(msg, "spill environment compacted") != NULL) /* on the loop thread */
        compactions++;
}

/* Deletes objects 0..n-1 but every keep-th, counting the compactions logged from now on. */
static void delete_all_but_every(ost_store *s, uint64_t n, uint64_t keep)
{
    compactions = 0;
    spw_log_set_sink(count_compactions, SPW_LOG_INFO);
    for (uint64_t i = 0; i < n; i++)
        if (i % keep != 0)
            assert_int_equal(ost_obj_delete(s, id(i)), 0);
}

/* The end of a case of delete_all_but_every: the store logged one compaction, and the kept
 * objects read back whole; then the store goes. */
static void compacted_once_kept_readable(ost_store *s, uint64_t n, uint64_t keep)
{
    spw_log_set_sink(NULL, SPW_LOG_WARN);
    assert_int_equal(compactions, 1);
    for (uint64_t i = 0; i < n; i += keep)
        check(s, i, 4u << 20, false);
    done(s);
}

/* Deletions that finish while a compaction waits for the lanes to drain find the file as
 * large as before: they must not queue another copy of the same live records. */
static void spill_file_is_compacted_once_per_need(void **state)
{
    (void)state;
    const uint64_t n = 48, keep = 8;
    lanes = 4; /* several deletions finish after the one that queues the compaction */
    ost_store *s = mk(16u << 20, 0, 0, 30000);
    lanes = 0;
    spill_random(s, n);
    delete_all_but_every(s, n, keep);
    uv_run(&loop, UV_RUN_DEFAULT);
    compacted_once_kept_readable(s, n, keep);
}

/* While spilled copies are still being deleted the file is not compacted (the live records it
 * would copy may go next, as a job consumes what it spilled); once none went for
 * compact_quiet_ms, the next maintenance compacts it. */
static void spill_file_is_compacted_once_deletions_settle(void **state)
{
    (void)state;
    const uint64_t n = 48, keep = 8;
    quiet_ms = 300;
    ost_store *s = mk(16u << 20, 0, 0, 30000);
    quiet_ms = 0;
    spill_random(s, n);
    uint64_t before = spill_disk();
    delete_all_but_every(s, n, keep);
    uv_run(&loop, UV_RUN_DEFAULT);
    ost_store_maintain(s);
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_int_equal(compactions, 0); /* the last deletion was just now */
    assert_true(spill_disk() >= before / 2);
    /* The rule is one of time: wait it out. */
    struct timespec ts = {0, 300 * 1000000L};
    nanosleep(&ts, NULL);
    ost_store_maintain(s);
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_true(spill_disk() < before / 2);
    compacted_once_kept_readable(s, n, keep);
}

/* Most spilled copies released, a few kept: the file is compacted while they stay readable. */
static void spill_file_is_compacted_when_mostly_free(void **state)
{
    (void)state;
    const uint64_t n = 48, keep = 8;
    ost_store *s = mk(16u << 20, 0, 0, 30000);
    spill_random(s, n);
    uint64_t before = spill_disk();
    assert_true(before >= n * (4u << 20));
    for (uint64_t i = 0; i < n; i++)
        if (i % keep != 0)
            assert_int_equal(ost_obj_delete(s, id(i)), 0);
    /* A spill queued behind the deletions (and so behind the compaction they lead to), and a
     * restore asked for meanwhile. */
    put(s, 1000, 4u << 20, true);
    assert_int_equal(ost_store_spill_all(s), 0);
    check(s, keep, 4u << 20, false);
    uv_run(&loop, UV_RUN_DEFAULT);
    ost_stats st = stats(s);
    assert_int_equal(st.objs_disk, n / keep + 1);
    assert_int_equal(st.spill_entries, n / keep + 1);
    uint64_t after = spill_disk();
    printf("spill file: %llu KiB allocated before, %llu KiB after (%llu KiB live)\n",
           (unsigned long long)(before >> 10), (unsigned long long)(after >> 10),
           (unsigned long long)(st.spilled_stored >> 10));
    assert_true(after <= 2 * st.spilled_stored + (64u << 20));
    assert_true(after < before / 2);
    /* Evict the in-memory copies (no write: they are on disk) and read every byte back from
     * the compacted file. */
    assert_int_equal(ost_store_spill_all(s), 0);
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_int_equal(stats(s).used, 0);
    for (uint64_t i = 0; i < n; i += keep)
        check(s, i, 4u << 20, false);
    check(s, 1000, 4u << 20, true);
    assert_int_equal(stats(s).spill_count, n + 1); /* nothing written twice */
    for (uint64_t i = 0; i < n; i += keep)
        assert_int_equal(ost_obj_delete(s, id(i)), 0);
    assert_int_equal(ost_obj_delete(s, id(1000)), 0);
    uv_run(&loop, UV_RUN_DEFAULT);
    st = stats(s);
    assert_int_equal(st.spill_entries, 0);
    assert_int_equal(st.spilled_stored, 0);
    assert_true(spill_disk() < (1u << 20)); /* recreated empty */
    done(s);
}

/* Once the deletions queued are done nothing is counted on disk; ends the test's store. */
static void gone_from_disk(ost_store *s)
{
    uv_run(&loop, UV_RUN_DEFAULT);
    ost_stats st = stats(s);
    assert_int_equal(st.objs_disk, 0);
    assert_int_equal(st.spilled_raw, 0);
    assert_int_equal(st.spilled_stored, 0);
    assert_int_equal(st.spill_entries, 0);
    assert_int_equal(ost__spill_records(s), 0);
    lanes = 0;
    done(s);
}

/* An object deleted while its spill runs stops it: the lane stops at its next chunk and what
 * was committed is taken back, so its memory comes back without the whole object written for
 * nobody. Written to the end, the spill would count once in spill_count. */
static void deleted_object_stops_its_running_spill(void **state)
{
    (void)state;
    lanes = 1;
    ost_store *s = deleted_while_spilled(8 * (size_t)OST_SPILL_CHUNK, false);
    ost_stats st = stats(s);
    assert_int_equal(st.spill_count, 0);
    assert_int_equal(st.spill_bytes, 0);
    gone_from_disk(s);
}

/* A spilled object deleted while a reader pins it, written again under the same id and spilled:
 * the old copy's deletion, queued at the reader's unpin, must not take the new copy with it. */
static void late_deletion_of_an_old_copy_keeps_the_new_one(void **state)
{
    (void)state;
    ost_store *s = mk(16u << 20, 0, 0, 30000);
    put(s, 1, 1u << 20, true);
    assert_int_equal(ost_store_spill_all(s), 0);
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_int_equal(stats(s).objs_disk, 1);
    got old = {0};
    ost_obj_get_async(s, ost_obj_find(s, id(1)), got_cb, &old); /* restored and pinned */
    while (old.calls == 0)
        uv_run(&loop, UV_RUN_ONCE);
    assert_int_equal(old.status, 0);
    assert_int_equal(ost_obj_delete(s, id(1)), 0); /* the reader keeps it */
    ost_obj *o;
    assert_int_equal(ost_obj_create(s, id(1), 1u << 20, &o), 0);
    fill_obj(ost_obj_data(o), 1u << 20, 2, true);
    assert_int_equal(ost_obj_seal(s, o), 0);
    assert_int_equal(ost_store_spill_all(s), 0);
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_int_equal(ost_obj_where(o), OST_ON_DISK);
    assert_int_equal(ost_obj_unpin(s, old.o), 0); /* the old copy goes now */
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_int_equal(stats(s).spill_entries, 1);
    got g = {0};
    ost_obj_get_async(s, o, got_cb, &g);
    while (g.calls == 0)
        uv_run(&loop, UV_RUN_ONCE);
    assert_int_equal(g.status, 0);
    uint8_t *want = malloc(1u << 20);
    fill_obj(want, 1u << 20, 2, true);
    assert_memory_equal(ost_obj_data(o), want, 1u << 20);
    free(want);
    assert_int_equal(ost_obj_unpin(s, o), 0);
    assert_int_equal(ost_obj_delete(s, id(1)), 0);
    gone_from_disk(s);
}

/* A restore that gets its memory while the store quiesces (another object went meanwhile)
 * fails its getters with SPW_ESHUTDOWN: none is left waiting, nothing leaks. */
static void restore_given_memory_while_quiescing_fails_cleanly(void **state)
{
    (void)state;
    ost_store *s = mk(8u << 20, 0, 0, 30000);
    put(s, 1, 4u << 20, true);
    assert_int_equal(ost_store_spill_all(s), 0);
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_int_equal(stats(s).used, 0);
    ost_obj *big;
    assert_int_equal(ost_obj_create(s, id(2), 6u << 20, &big), 0); /* the writer pins it */
    got g = {0};
    ost_obj_get_async(s, ost_obj_find(s, id(1)), got_cb, &g); /* waits for room */
    uv_run(&loop, UV_RUN_NOWAIT);
    assert_int_equal(g.calls, 0);
    ost_store_quiesce(s, NULL, NULL);
    ost_obj_abort(s, big); /* room for the restore, now */
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_int_equal(g.calls, 1);
    assert_int_equal(g.status, SPW_ESHUTDOWN);
    ost_obj_delete(s, id(1));
    done(s);
}

/* While a restore decodes an object into its new memory, the object is not readable yet: a pin
 * then answers SPW_EAGAIN (as for an object only on disk), never 0 with bytes still being
 * written by a lane - and memory a failed restore would free under the pin. */
static void pin_during_restore_is_eagain(void **state)
{
    (void)state;
    ost_store *s = mk(8u << 20, 0, 0, 30000);
    ost_obj *o = put(s, 1, 4u << 20, true);
    assert_int_equal(ost_store_spill_all(s), 0);
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_int_equal(ost_obj_where(o), OST_ON_DISK);
    got g = {0};
    assert_int_equal(ost_obj_get_async(s, o, got_cb, &g), 0);
    assert_int_equal(g.calls, 0); /* its memory is allocated, a lane fills it */
    assert_int_equal(ost_obj_pin(s, o), SPW_EAGAIN);
    assert_int_equal(ost_obj_pin_writing(s, o), SPW_EAGAIN);
    assert_int_equal(ost_obj_pins(o), 0);
    assert_int_equal(stats(s).pinned, 0);
    while (g.calls == 0)
        uv_run(&loop, UV_RUN_ONCE);
    assert_int_equal(g.status, 0);
    assert_int_equal(ost_obj_pins(o), 1); /* the getter's pin only */
    assert_int_equal(ost_obj_pin(s, o), 0); /* restored: readable now */
    assert_int_equal(ost_obj_unpin(s, o), 0);
    assert_int_equal(ost_obj_unpin(s, o), 0);
    check(s, 1, 4u << 20, true);
    assert_int_equal(stats(s).pinned, 0);
    assert_int_equal(ost_obj_delete(s, id(1)), 0);
    gone_from_disk(s);
}

/* The map fills up during the spill of an object deleted meanwhile: nothing is retried for it,
 * but the map could grow, so spilling stays on (no "spill storage full", no SPW_ESPILLFULL for
 * waiting allocations) and the next object is spilled into the grown map. */
static void map_full_for_a_deleted_object_leaves_spilling_on(void **state)
{
    (void)state;
    ost_store *s = mk(8u << 20, 1u << 20, 0, 30000); /* a 1 MiB map that may grow */
    put(s, 1, 4u << 20, false);                      /* random: does not fit the map */
    assert_int_equal(ost_store_spill_all(s), 0);
    assert_int_equal(ost_obj_delete(s, id(1)), 0); /* while its spill is under way */
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_string_equal(ost_store_full_reason(s), "");
    ost_stats st = stats(s);
    assert_int_equal(st.used, 0);
    assert_int_equal(st.objs_disk, 0);
    assert_int_equal(st.spill_entries, 0);
    put(s, 2, 4u << 20, false);
    assert_int_equal(ost_store_spill_all(s), 0);
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_string_equal(ost_store_full_reason(s), "");
    assert_int_equal(stats(s).objs_disk, 1);
    assert_int_equal(stats(s).used, 0);
    check(s, 2, 4u << 20, false);
    assert_int_equal(ost_obj_delete(s, id(2)), 0);
    gone_from_disk(s);
}

/* The store is freed while two restores wait for room, both of objects deleted meanwhile: each
 * getter is told once, and the waiters are freed once (freeing the first object must not
 * retry the other waiters from inside the store's teardown). */
static void free_with_restores_of_deleted_objects_waiting(void **state)
{
    (void)state;
    ost_store *s = mk(8u << 20, 0, 0, 30000);
    put(s, 1, 2u << 20, true);
    put(s, 2, 2u << 20, true);
    assert_int_equal(ost_store_spill_all(s), 0);
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_int_equal(stats(s).used, 0);
    ost_obj *writing; /* pinned by its writer: no room for either restore */
    assert_int_equal(ost_obj_create(s, id(3), 7u << 20, &writing), 0);
    got g1 = {0}, g2 = {0};
    assert_int_equal(ost_obj_get_async(s, ost_obj_find(s, id(1)), got_cb, &g1), 0);
    assert_int_equal(ost_obj_get_async(s, ost_obj_find(s, id(2)), got_cb, &g2), 0);
    uv_run(&loop, UV_RUN_NOWAIT);
    assert_int_equal(g1.calls + g2.calls, 0);
    assert_int_equal(ost_obj_delete(s, id(1)), 0);
    assert_int_equal(ost_obj_delete(s, id(2)), 0);
    assert_int_equal(g1.calls + g2.calls, 0);
    done(s);
    assert_int_equal(g1.calls, 1);
    assert_int_equal(g2.calls, 1);
    assert_true(g1.status < 0);
    assert_true(g2.status < 0);
}

/* The map cannot grow (its new size cannot be mapped: an address-space limit, ulimit -v):
 * the spill that wanted the room fails and leaves its object in memory, and the copies
 * already spilled stay readable. */
static void failed_map_growth_keeps_spilled_copies_readable(void **state)
{
    (void)state;
    ost_store *s = mk(16u << 20, 4u << 20, 0, 0);
    put(s, 1, 1u << 20, true);
    assert_int_equal(ost_store_spill_all(s), 0);
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_int_equal(stats(s).objs_disk, 1);
    ost__spill_set_map_size(s, 1ULL << 61); /* growing it asks for 2^62 bytes */
    put(s, 2, 6u << 20, false);             /* random: does not fit the 4 MiB map */
    assert_int_equal(ost_store_spill_all(s), 0);
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_string_not_equal(ost_store_full_reason(s), "");
    ost_stats st = stats(s);
    assert_int_equal(st.objs_disk, 1);
    assert_int_equal(st.spill_entries, 1);
    assert_int_equal(st.used, 6u << 20);
    check(s, 1, 1u << 20, true); /* read back from the map as it was */
    check(s, 2, 6u << 20, false);
    assert_int_equal(ost_obj_delete(s, id(1)), 0);
    assert_int_equal(ost_obj_delete(s, id(2)), 0);
    gone_from_disk(s);
}

/* A spill of two chunks whose second one finds the map full, the first one written: taking the
 * first one back may itself find no room (freeing a 4 MiB record writes a free list of its
 * pages). The spill still fails for the map, not for "input/output error": a map that may grow
 * grows and the spill is tried again (its keys overwritten), and one at its limit says so.
 * Map sizes around the object's, page by page, so that some leave no room for the take-back. */
static void map_full_spill_whose_take_back_fails_keeps_its_reason(void **state)
{
    (void)state;
    lanes = 1;
    const uint64_t pg = (uint64_t)sysconf(_SC_PAGESIZE);
    const size_t size = (4u << 20) + 8192; /* random: a 4 MiB record and a short one */
    const uint64_t first = ((4u << 20) + 32) / pg + 1;
    for (uint64_t pages = first; pages < first + 16; pages++) {
        for (int at_max = 0; at_max < 2; at_max++) {
            ost_store *s = mk(16u << 20, pages * pg, at_max ? pages * pg : 0, 0);
            put(s, 1, size, false);
            assert_int_equal(ost_store_spill_all(s), 0);
            uv_run(&loop, UV_RUN_DEFAULT);
            ost_stats st = stats(s);
            const char *why = ost_store_full_reason(s);
            if (!at_max) {
                assert_string_equal(why, "");
                assert_int_equal(st.objs_disk, 1);
                assert_int_equal(st.spill_entries, 2);
                assert_int_equal(ost__spill_records(s), 2);
            } else if (st.objs_disk == 0) {
                assert_non_null(strstr(why, "--spill-map-max"));
            }
            check(s, 1, size, false);
            assert_int_equal(ost_obj_delete(s, id(1)), 0);
            uv_run(&loop, UV_RUN_DEFAULT);
            done(s);
        }
    }
    lanes = 0;
}

/* A spill at the map's limit fails and its take-back finds no room either (as in the test
 * above): the records it left must not outlive the objects. Once nothing is on disk, LMDB holds
 * no record (spill_entries is 0, and says so truly) and the map's room is back: an object that
 * fits is spilled. */
static void records_left_by_a_failed_take_back_are_handed_back(void **state)
{
    (void)state;
    lanes = 1;
    retry_ms = 1;
    const uint64_t pg = (uint64_t)sysconf(_SC_PAGESIZE);
    const size_t size = (4u << 20) + 8192; /* random: a 4 MiB record and a short one */
    const uint64_t first = ((4u << 20) + 32) / pg + 1;
    for (uint64_t pages = first; pages < first + 16; pages++) {
        ost_store *s = mk(16u << 20, pages * pg, pages * pg, 0);
        put(s, 1, size, false);
        assert_int_equal(ost_store_spill_all(s), 0);
        uv_run(&loop, UV_RUN_DEFAULT);
        bool failed = stats(s).objs_disk == 0;
        assert_int_equal(ost_obj_delete(s, id(1)), 0);
        uv_run(&loop, UV_RUN_DEFAULT);
        assert_int_equal(stats(s).spill_entries, 0);
        if (failed) {
            assert_int_equal(ost__spill_records(s), 0);
            /* A smaller object fits the map again, once spilling is tried again. */
            put(s, 2, 2u << 20, false);
            while (ost_store_full_reason(s)[0] != '\0')
                ost_store_maintain(s); /* lifts `full` once spill_retry_ms (1) is past */
            assert_int_equal(ost_store_spill_all(s), 0);
            uv_run(&loop, UV_RUN_DEFAULT);
            assert_int_equal(stats(s).objs_disk, 1);
            check(s, 2, 2u << 20, false);
            assert_int_equal(ost_obj_delete(s, id(2)), 0);
            uv_run(&loop, UV_RUN_DEFAULT);
        }
        done(s);
    }
    lanes = 0;
    retry_ms = 0;
}

/* A getter that lets go of the object in its callback, having noted whether it was in memory. */
typedef struct letgo {
    ost_store *s;
    int calls, status;
    bool in_memory;
} letgo;

static void letgo_cb(void *arg, int status, ost_obj *o)
{
    letgo *l = arg;
    l->calls++;
    l->status = status;
    l->in_memory = status == 0 && (ost_obj_where(o) & OST_IN_MEMORY) != 0;
    if (status == 0)
        assert_int_equal(ost_obj_unpin(l->s, o), 0);
}

/* Two getters wait for one restore, above the spill threshold. The first one called lets go at
 * once (a reader whose connection closed meanwhile): the object, unpinned and on disk, must not
 * be evicted before the second one has it pinned, in memory. */
static void getter_letting_go_leaves_the_next_one_its_memory(void **state)
{
    (void)state;
    ost_store *s = mk(8u << 20, 0, 0, 30000);
    put(s, 1, 4u << 20, true);
    assert_int_equal(ost_store_spill_all(s), 0);
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_int_equal(stats(s).used, 0);
    ost_obj *writing; /* pinned by its writer: neither spilled nor evicted */
    assert_int_equal(ost_obj_create(s, id(2), 3u << 20, &writing), 0);
    ost_obj *o = ost_obj_find(s, id(1));
    letgo a = {.s = s}, b = {.s = s};
    ost_obj_get_async(s, o, letgo_cb, &a);
    ost_obj_get_async(s, o, letgo_cb, &b);
    while (a.calls == 0 || b.calls == 0)
        uv_run(&loop, UV_RUN_ONCE);
    assert_int_equal(a.status, 0);
    assert_int_equal(b.status, 0);
    assert_true(a.in_memory);
    assert_true(b.in_memory);
    ost_obj_abort(s, writing);
    assert_int_equal(ost_obj_delete(s, id(1)), 0);
    gone_from_disk(s);
}

/* A getter that drops the object it waited for: after a restore, it lets go and deletes it (its
 * task is gone, and so is the object); after a failed restore (no room in time), it deletes it
 * at once. The object is freed inside the callback: the restore's completion must not touch it
 * afterwards (ASan: heap-use-after-free). */
typedef struct dropper {
    ost_store *s;
    spw_id id;
    int calls, status;
} dropper;

static void dropper_cb(void *arg, int status, ost_obj *o)
{
    dropper *d = arg;
    d->calls++;
    d->status = status;
    if (status == 0)
        assert_int_equal(ost_obj_unpin(d->s, o), 0);
    assert_int_equal(ost_obj_delete(d->s, d->id), 0);
}

static void getter_deleting_the_object_it_waited_for(void **state)
{
    (void)state;
    ost_store *s = mk(8u << 20, 0, 0, 0); /* an allocation that must wait fails at once */
    put(s, 1, 2u << 20, true);
    put(s, 2, 2u << 20, true);
    assert_int_equal(ost_store_spill_all(s), 0);
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_int_equal(stats(s).used, 0);
    /* Restored, then dropped by its getter. */
    dropper d1 = {.s = s, .id = id(1)};
    assert_int_equal(ost_obj_get_async(s, ost_obj_find(s, id(1)), dropper_cb, &d1), 0);
    while (d1.calls == 0)
        uv_run(&loop, UV_RUN_ONCE);
    assert_int_equal(d1.status, 0);
    assert_null(ost_obj_find(s, id(1)));
    /* No room for the restore (a writer holds the arena): it fails, and its getter drops it. */
    ost_obj *writing;
    assert_int_equal(ost_obj_create(s, id(3), 7u << 20, &writing), 0);
    dropper d2 = {.s = s, .id = id(2)};
    assert_int_equal(ost_obj_get_async(s, ost_obj_find(s, id(2)), dropper_cb, &d2), 0);
    while (d2.calls == 0) {
        ost_store_maintain(s); /* past its deadline, with no spill under way */
        uv_run(&loop, UV_RUN_NOWAIT);
    }
    assert_int_equal(d2.status, SPW_EBACKPRESSURE);
    assert_null(ost_obj_find(s, id(2)));
    ost_obj_abort(s, writing);
    ost_stats st = stats(s);
    assert_int_equal(st.used, 0);
    assert_int_equal(st.pinned, 0);
    gone_from_disk(s);
}

/* Four lanes spill and restore at once: every byte comes back, the figures stay exact, and a
 * spilled copy deleted and written again under the same id (its deletion still queued) is the
 * new one. */
static void parallel_lanes_keep_order_and_accounting(void **state)
{
    (void)state;
    lanes = 4;
    const uint64_t n = 24;
    ost_store *s = mk(64u << 20, 1u << 20, 0, 30000); /* a small map: it grows meanwhile */
    for (uint64_t i = 0; i < n; i++)
        put(s, i, (i % 3 + 1) << 20, i % 2 == 0);
    assert_int_equal(ost_store_spill_all(s), 0);
    uv_run(&loop, UV_RUN_DEFAULT);
    ost_stats st = stats(s);
    assert_int_equal(st.objs_disk, n);
    assert_int_equal(st.used, 0);
    uint64_t raw = 0;
    for (uint64_t i = 0; i < n; i++)
        raw += (i % 3 + 1) << 20;
    assert_int_equal(st.spilled_raw, raw);
    assert_int_equal(st.spill_entries, n);
    assert_int_equal(ost__spill_records(s), n); /* the figure is what LMDB holds */
    for (uint64_t i = 0; i < n; i++)
        check(s, i, (i % 3 + 1) << 20, i % 2 == 0);
    /* Delete the odd ones and write them again at once, with other contents (seed n + i). */
    for (uint64_t i = 1; i < n; i += 2) {
        assert_int_equal(ost_obj_delete(s, id(i)), 0);
        ost_obj *o;
        assert_int_equal(ost_obj_create(s, id(i), 1u << 20, &o), 0);
        fill_obj(ost_obj_data(o), 1u << 20, n + i, true);
        assert_int_equal(ost_obj_seal(s, o), 0);
    }
    assert_int_equal(ost_store_spill_all(s), 0);
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_int_equal(stats(s).used, 0);
    for (uint64_t i = 0; i < n; i++) {
        ost_obj *o = ost_obj_find(s, id(i));
        got g = {0};
        ost_obj_get_async(s, o, got_cb, &g);
        while (g.calls == 0)
            uv_run(&loop, UV_RUN_ONCE);
        assert_int_equal(g.status, 0);
        size_t size = i % 2 ? 1u << 20 : (i % 3 + 1) << 20;
        uint8_t *want = malloc(size);
        fill_obj(want, size, i % 2 ? n + i : i, true);
        assert_memory_equal(ost_obj_data(o), want, size);
        free(want);
        assert_int_equal(ost_obj_unpin(s, o), 0);
    }
    for (uint64_t i = 0; i < n; i++)
        assert_int_equal(ost_obj_delete(s, id(i)), 0);
    gone_from_disk(s);
}

/* Many spills and restores queued at once, with a part queued ahead of the lanes: never more
 * than `lanes` at work, both lanes used, every byte back, the figures exact at each step. */
static void queued_ahead_parts_keep_lanes_and_accounting(void **state)
{
    (void)state;
    lanes = 2;
    const uint64_t n = 10; /* 50 MiB: all restored at once stay under the threshold */
    const size_t size = (5u << 20) + 3; /* two chunks, the second short */
    ost_store *s = mk(64u << 20, 0, 0, 30000);
    uint64_t raw = 0;
    for (uint64_t i = 0; i < n; i++) {
        put(s, i, size, i % 3 != 0);
        raw += size;
        if (i % 4 == 3) { /* spill while more come */
            assert_int_equal(ost_store_spill_all(s), 0);
            uv_run(&loop, UV_RUN_ONCE);
        }
    }
    assert_int_equal(ost_store_spill_all(s), 0);
    uv_run(&loop, UV_RUN_DEFAULT);
    ost_stats st = stats(s);
    assert_int_equal(st.objs_disk, n);
    assert_int_equal(st.used, 0);
    assert_int_equal(st.spilled_raw, raw);
    assert_int_equal(st.spill_entries, 2 * n);
    assert_int_equal(st.spill_count, n);
    assert_int_equal(st.spill_bytes, raw);
    assert_int_equal(ost__spill_peak_lanes(s), 2);
    /* Every object asked for at once: n restores queued, each taking both lanes in turn. */
    got g[10] = {0};
    for (uint64_t i = 0; i < n; i++)
        assert_int_equal(ost_obj_get_async(s, ost_obj_find(s, id(i)), got_cb, &g[i]), 0);
    uv_run(&loop, UV_RUN_DEFAULT);
    uint8_t *want = malloc(size);
    for (uint64_t i = 0; i < n; i++) {
        assert_int_equal(g[i].calls, 1);
        assert_int_equal(g[i].status, 0);
        fill_obj(want, size, i, i % 3 != 0);
        assert_memory_equal(ost_obj_data(g[i].o), want, size);
        assert_int_equal(ost_obj_unpin(s, g[i].o), 0);
    }
    free(want);
    st = stats(s);
    assert_int_equal(st.restore_count, n);
    assert_int_equal(st.restore_bytes, raw);
    assert_int_equal(st.spilled_raw, raw); /* the copies stay valid */
    assert_int_equal(ost__spill_peak_lanes(s), 2);
    for (uint64_t i = 0; i < n; i++)
        assert_int_equal(ost_obj_delete(s, id(i)), 0);
    gone_from_disk(s);
}

/* One object of many chunks is spilled and restored by all four lanes at once (each part
 * takes the next chunk): every byte comes back, one record per chunk, the last one short. */
static void one_large_object_takes_every_lane(void **state)
{
    (void)state;
    lanes = 4;
    const size_t big = (37u << 20) + 5, rnd = 9u << 20;
    ost_store *s = mk(64u << 20, 8u << 20, 0, 30000);
    put(s, 1, big, true);
    put(s, 2, rnd, false);
    assert_int_equal(ost_store_spill_all(s), 0);
    uv_run(&loop, UV_RUN_DEFAULT);
    ost_stats st = stats(s);
    assert_int_equal(st.objs_disk, 2);
    assert_int_equal(st.used, 0);
    assert_int_equal(st.spilled_raw, big + rnd);
    assert_int_equal(st.spill_entries, 10 + 3);
    assert_true(st.spilled_stored < big + rnd); /* the walk compresses */
    check(s, 1, big, true);
    check(s, 2, rnd, false);
    /* Evicted again (no write), restored again by a get. */
    assert_int_equal(ost_store_spill_all(s), 0);
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_int_equal(stats(s).used, 0);
    assert_int_equal(stats(s).spill_count, 2);
    check(s, 1, big, true);
    ost_obj_delete(s, id(1));
    ost_obj_delete(s, id(2));
    gone_from_disk(s);
}

/* Reads [off, off + len) of spilled object o, number n (filled as fill_obj), from its spilled
 * copy and checks the bytes; the store's memory is not touched. */
static void read_spilled_piece(ost_store *s, ost_obj *o, uint64_t n, size_t size,
                               bool compressible, uint64_t off, uint64_t len)
{
    uint64_t used = stats(s).used;
    uint8_t *buf = malloc(len), *want = malloc(size);
    got g = {0};
    assert_int_equal(ost_obj_read_spilled(s, o, off, len, buf, got_cb, &g), 0);
    assert_int_equal(g.calls, 0); /* on the lanes, later */
    while (g.calls == 0)
        uv_run(&loop, UV_RUN_ONCE);
    assert_int_equal(g.status, 0);
    assert_null(g.o);
    fill_obj(want, size, n, compressible);
    assert_memory_equal(buf, want + off, len);
    assert_int_equal(stats(s).used, used);
    free(buf);
    free(want);
}

/* As read_spilled_piece, of object n found by its id, which is `where` (OST_IN_MEMORY,
 * OST_ON_DISK) before and after. */
static void read_spilled_range(ost_store *s, uint64_t n, size_t size, bool compressible,
                               uint64_t off, uint64_t len, unsigned where)
{
    ost_obj *o = ost_obj_find(s, id(n));
    assert_non_null(o);
    assert_int_equal(ost_obj_where(o), where);
    read_spilled_piece(s, o, n, size, compressible, off, len);
    assert_int_equal(ost_obj_where(o), where);
}

/* Ranges of spilled objects read straight from their records: inside one chunk, across
 * chunks, the whole object, of records compressed and raw, and of one restored since; the
 * store neither restores nor allocates. An object never spilled is refused (EAGAIN), as is a
 * range outside one. An object deleted while its read waits, or while it is held between two
 * reads, keeps its records until the read is answered or the hold released, then they go. */
static void spilled_ranges_are_read_without_a_restore(void **state)
{
    (void)state;
    const size_t big = (9u << 20) + 4096 + 24, rnd = 5u << 20;
    ost_store *s = mk(32u << 20, 64u << 20, 0, 30000);
    put(s, 1, big, true);
    put(s, 2, rnd, false);
    assert_int_equal(ost_store_spill_all(s), 0);
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_int_equal(stats(s).used, 0);
    /* Inside chunk 0; across 0 and 1; 0, 1 whole and 2; the last, whole. */
    read_spilled_range(s, 1, big, true, 100, 4000, OST_ON_DISK);
    read_spilled_range(s, 1, big, true, (4u << 20) - 8, 16, OST_ON_DISK);
    read_spilled_range(s, 1, big, true, (4u << 20) - 1, (4u << 20) + 2, OST_ON_DISK);
    read_spilled_range(s, 1, big, true, 8u << 20, big - (8u << 20), OST_ON_DISK);
    read_spilled_range(s, 1, big, true, 0, big, OST_ON_DISK);
    read_spilled_range(s, 2, rnd, false, 12345, 3u << 20, OST_ON_DISK);
    assert_int_equal(stats(s).restore_count, 0);
    assert_int_equal(stats(s).disk_read_bytes,
                     4000 + 16 + (4u << 20) + 2 + big - (8u << 20) + big + (3u << 20));

    ost_obj *o = ost_obj_find(s, id(2));
    uint8_t small[8];
    got g = {0};
    assert_int_equal(ost_obj_read_spilled(s, o, rnd - 4, 8, small, got_cb, &g), SPW_EINVAL);
    assert_int_equal(ost_obj_read_spilled(s, o, 0, 0, small, got_cb, &g), SPW_EINVAL);
    check(s, 2, rnd, false); /* restored: in memory now, its spilled copy kept */
    read_spilled_range(s, 2, rnd, false, 4096, 1u << 20, OST_IN_MEMORY | OST_ON_DISK);
    put(s, 3, 4096, true); /* never spilled: no copy to read */
    assert_int_equal(ost_obj_read_spilled(s, ost_obj_find(s, id(3)), 0, 8, small, got_cb, &g),
                     SPW_EAGAIN);
    assert_int_equal(g.calls, 0);
    ost_obj_delete(s, id(3));

    /* Held between two pieces of a read, deleted: the next piece still reads, and the records
     * go only at the release. */
    o = ost_obj_find(s, id(2));
    ost_obj_hold_spilled(s, o);
    assert_int_equal(ost_obj_delete(s, id(2)), 0);
    read_spilled_piece(s, o, 2, rnd, false, rnd - 100, 100);
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_int_equal(stats(s).objs_disk, 2);
    ost_obj_release_spilled(s, o);
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_int_equal(stats(s).objs_disk, 1);

    /* Deleted with a read queued: the read still gets every byte, then the records go. */
    o = ost_obj_find(s, id(1));
    uint8_t *buf = malloc(big), *want = malloc(big);
    assert_int_equal(ost_obj_read_spilled(s, o, 0, big, buf, got_cb, &g), 0);
    assert_int_equal(ost_obj_delete(s, id(1)), 0);
    assert_null(ost_obj_find(s, id(1)));
    while (g.calls == 0)
        uv_run(&loop, UV_RUN_ONCE);
    assert_int_equal(g.status, 0);
    fill_obj(want, big, 1, true);
    assert_memory_equal(buf, want, big);
    free(buf);
    free(want);
    ost_obj_delete(s, id(2));
    gone_from_disk(s);
}

/* Spilling decisions held: crossing the threshold starts no spill until the hold's release,
 * which starts them at once (and nests). A deleted object whose spill is still queued is not
 * written: on one lane with several spills queued, the last queued one deleted costs no write,
 * and the object is freed at once. */
static void held_spills_start_at_release_and_deleted_ones_are_not_written(void **state)
{
    (void)state;
    lanes = 1;
    ost_store *s = mk(16u << 20, 64u << 20, 0, 30000);
    ost_store_hold_spills(s, true);
    ost_store_hold_spills(s, true);
    for (uint64_t i = 0; i < 4; i++)
        put(s, i, 4u << 20, false); /* 16 MiB: past the threshold */
    assert_false(ost__spill_pending(s));
    ost_store_hold_spills(s, false);
    assert_false(ost__spill_pending(s));
    ost_store_hold_spills(s, false);
    assert_true(ost__spill_pending(s));
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_true(stats(s).spill_count >= 1);
    for (uint64_t i = 0; i < 4; i++)
        ost_obj_delete(s, id(i));
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_int_equal(stats(s).used, 0);

    uint64_t written = stats(s).spill_count;
    for (uint64_t i = 10; i < 14; i++)
        put(s, i, 3u << 20, false);
    assert_int_equal(ost_store_spill_all(s), 0); /* four spills on one lane: three queued */
    assert_true(ost_obj_find(s, id(13))->spilling);
    uint64_t used = stats(s).used;
    assert_int_equal(ost_obj_delete(s, id(13)), 0);
    assert_int_equal(stats(s).used, used - (3u << 20)); /* dropped from the queue, freed */
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_int_equal(stats(s).spill_count, written + 3);
    assert_int_equal(stats(s).objs_disk, 3);
    for (uint64_t i = 10; i < 13; i++)
        ost_obj_delete(s, id(i));
    gone_from_disk(s);
}

/* A spared object (a copy fetched for a task about to run) is passed over by spilling for
 * headroom, the oldest though it is, while others go; an allocation that waits for room may
 * still spill it. A pin clears the mark; one spared while pinned keeps it once let go; one whose
 * time is up is spilled for headroom again. */
static void spared_objects_are_spilled_only_for_waiting_room(void **state)
{
    (void)state;
    ost_store *s = mk(16u << 20, 64u << 20, 0, 30000);
    ost_obj *soon = put(s, 1, 4u << 20, false);
    ost_obj_spare(s, soon, 60000);
    for (uint64_t i = 2; i <= 4; i++)
        put(s, i, 4u << 20, false); /* 16 MiB: past the threshold, down to the target */
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_true(stats(s).objs_disk >= 1);
    assert_int_equal(ost_obj_where(soon), OST_IN_MEMORY);
    assert_true(ost_obj_where(ost_obj_find(s, id(2))) == OST_ON_DISK);

    got g = {0};
    ost_obj_create_async(s, id(9), 14u << 20, got_cb, &g); /* room only if it goes too */
    while (g.calls == 0)
        uv_run(&loop, UV_RUN_ONCE);
    assert_int_equal(g.status, 0);
    assert_int_equal(ost_obj_where(soon), OST_ON_DISK);
    ost_obj_abort(s, g.o);
    check(s, 1, 4u << 20, false); /* restored and pinned: no longer spared */
    assert_int_equal(soon->spare_until, 0);
    assert_int_equal(ost_obj_pin(s, soon), 0);
    ost_obj_spare(s, soon, 60000);
    assert_int_equal(ost_obj_unpin(s, soon), 0);
    assert_true(soon->spare_until > 0);
    /* A mark whose time is up spares nothing: spilling for headroom takes it again. */
    ost_obj_spare(s, soon, 0);
    for (uint64_t i = 5; i <= 7; i++)
        put(s, i, 4u << 20, false);
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_int_equal(ost_obj_where(soon), OST_ON_DISK); /* evicted: its copy was on disk */
    for (uint64_t i = 1; i <= 7; i++)
        ost_obj_delete(s, id(i));
    gone_from_disk(s);
}

/* While an allocation waits, a smaller one goes to the lowest free address that holds it, not
 * to the hole its size fits best: allocations that come and go meanwhile (fetches in flight)
 * then gather at the arena's start and the free space above them coalesces, where a good fit
 * scatters them over whatever holes there are. A 32 MiB store holds objects being written
 * (pinned) at [4, 8), [8, 28) and [30, 32) MiB, free holes at [0, 4) and [28, 30), and an
 * allocation of 8 MiB waiting: 1 MiB asked now goes at 0, where a good fit takes the 2 MiB
 * hole at 28. */
static void a_waiting_allocation_packs_smaller_ones_low(void **state)
{
    (void)state;
    enum { MIB = 1u << 20 };
    ost_store *s = mk(32u * MIB, 64u * MIB, 0, 30000);
    const uint64_t sizes[5] = {4, 4, 20, 2, 2}, offs[5] = {0, 4, 8, 28, 30};
    ost_obj *o[5];
    for (int i = 0; i < 5; i++) {
        assert_int_equal(ost_obj_create(s, id(10 + (uint64_t)i), sizes[i] * MIB, &o[i]), 0);
        assert_int_equal(ost_block_off(o[i]->blk), offs[i] * MIB);
    }
    ost_obj_abort(s, o[0]);
    ost_obj_abort(s, o[3]);
    got g = {0};
    assert_int_equal(ost_obj_create_async(s, id(1), 8u * MIB, got_cb, &g), 0);
    uv_run(&loop, UV_RUN_NOWAIT);
    assert_int_equal(g.calls, 0);
    ost_obj *low;
    assert_int_equal(ost_obj_create(s, id(2), MIB, &low), 0);
    assert_int_equal(ost_block_off(low->blk), 0);
    ost_obj_abort(s, o[2]); /* 20 MiB back: the waiter is served */
    uv_run(&loop, UV_RUN_NOWAIT);
    assert_int_equal(g.calls, 1);
    assert_int_equal(g.status, 0);
    ost_obj_abort(s, g.o);
    ost_obj_abort(s, low);
    ost_obj_abort(s, o[1]);
    ost_obj_abort(s, o[4]);
    gone_from_disk(s);
}

/* A 16 MiB store holding objects 1..12 of 1 MiB at offsets 0 to 11 MiB, the odd ones pinned
 * when `pin`, the even ones up to `last` deleted: holes of 1 MiB between them. */
static ost_store *twelve_with_holes(uint64_t last, bool pin)
{
    ost_store *s = mk(16u << 20, 64u << 20, 0, 30000);
    for (uint64_t i = 1; i <= 12; i++)
        put(s, i, 1u << 20, false);
    for (uint64_t i = 1; pin && i <= 11; i += 2)
        assert_int_equal(ost_obj_pin(s, ost_obj_find(s, id(i))), 0);
    for (uint64_t i = 2; i <= last; i += 2)
        ost_obj_delete(s, id(i));
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_int_equal(stats(s).spill_count, 0); /* at most 10 MiB used: under the threshold */
    return s;
}

/* Deletes what twelve_with_holes(last, ...) left, pinned no more, and checks the spill is empty. */
static void twelve_gone(ost_store *s, uint64_t last)
{
    for (uint64_t i = 1; i <= 12; i++)
        if (i % 2 == 1 || i > last)
            ost_obj_delete(s, id(i));
    gone_from_disk(s);
}

/* 10 MiB free, but in five 1 MiB holes and 5 MiB at the end. A 6 MiB allocation waits.
 * Spilling in LRU order would queue the oldest objects until 6 MiB were on their way out,
 * scattered between the holes; the store empties the cheapest 6 MiB range instead, object 11
 * and the end: one write, however recently each object was used, since any other range holds
 * two objects or more. */
static void a_fragmented_store_empties_one_range_for_a_large_allocation(void **state)
{
    (void)state;
    ost_store *s = twelve_with_holes(12, false);
    got g = {0};
    ost_obj_create_async(s, id(20), 6u << 20, got_cb, &g);
    while (g.calls == 0)
        uv_run(&loop, UV_RUN_ONCE);
    assert_int_equal(g.status, 0);
    assert_int_equal(stats(s).spill_count, 1);
    for (uint64_t i = 1; i <= 11; i += 2)
        assert_int_equal(ost_obj_where(ost_obj_find(s, id(i))),
                         i == 11 ? OST_ON_DISK : OST_IN_MEMORY);
    ost_obj_abort(s, g.o);
    check(s, 11, 1u << 20, false);
    twelve_gone(s, 12);
}

/* Every object in memory pinned, the free bytes cut into holes by them (and 5 MiB at the end):
 * a 6 MiB allocation waits for pins to go, which nothing in the store can hasten. A 1 MiB
 * allocation behind it is served at once (the task it is for may be what holds the pins,
 * waiting for it); the first is served once the pins go and the store can spill again. */
static void waiting_only_for_pins_serves_those_behind_that_fit(void **state)
{
    (void)state;
    ost_store *s = twelve_with_holes(12, true);
    got big = {0}, small = {0};
    ost_obj_create_async(s, id(20), 6u << 20, got_cb, &big);
    assert_int_equal(big.calls, 0);
    ost_obj_create_async(s, id(21), 1u << 20, got_cb, &small);
    assert_int_equal(small.calls, 1);
    assert_int_equal(small.status, 0);
    assert_int_equal(big.calls, 0);
    ost_obj_abort(s, small.o);
    for (uint64_t i = 1; i <= 11; i += 2)
        assert_int_equal(ost_obj_unpin(s, ost_obj_find(s, id(i))), 0);
    ost_store_maintain(s);
    while (big.calls == 0)
        uv_run(&loop, UV_RUN_ONCE);
    assert_int_equal(big.status, 0);
    ost_obj_abort(s, big.o);
    twelve_gone(s, 12);
}

/* 10 MiB free in holes of 1 MiB and 5 MiB at the end, every object spillable: a 6 MiB allocation
 * waits for the range the store empties for it. Requests of 512 KiB (at most an eighth of it)
 * that fit are served ahead of it, placed low, until they add up to its size: the next waits
 * behind it although it would fit. Once the small ones go, the large one is served, then the
 * one behind it. */
static void small_allocations_pass_a_large_waiter_within_its_size(void **state)
{
    (void)state;
    enum { KIB = 1u << 10, MIB = 1u << 20, N = 12 };
    ost_store *s = twelve_with_holes(12, false);
    got big = {0}, small[N + 1] = {{0}};
    ost_obj_create_async(s, id(20), 6u * MIB, got_cb, &big);
    assert_int_equal(big.calls, 0);
    for (uint64_t i = 0; i <= N; i++)
        ost_obj_create_async(s, id(30 + i), 512u * KIB, got_cb, &small[i]);
    for (int i = 0; i < N; i++) {
        assert_int_equal(small[i].calls, 1);
        assert_int_equal(small[i].status, 0);
        assert_true(ost_block_off(small[i].o->blk) < 12u * MIB);
    }
    assert_int_equal(small[N].calls, 0);
    assert_int_equal(big.calls, 0);
    for (int i = 0; i < N; i++)
        ost_obj_abort(s, small[i].o);
    while (small[N].calls == 0)
        uv_run(&loop, UV_RUN_ONCE);
    assert_int_equal(big.calls, 1);
    assert_int_equal(big.status, 0);
    assert_int_equal(small[N].status, 0);
    ost_obj_abort(s, small[N].o);
    ost_obj_abort(s, big.o);
    twelve_gone(s, 12);
}

/* A spill of many chunks on four lanes that the map cannot hold: the parts stop, what they
 * wrote is taken back, the map grows and the spill is tried again until the map is at its
 * limit; the object stays in memory, whole, and nothing is counted on disk. */
static void large_spill_past_the_map_limit_is_taken_back(void **state)
{
    (void)state;
    lanes = 4;
    const size_t size = 24u << 20;
    ost_store *s = mk(32u << 20, 4u << 20, 12u << 20, 0);
    put(s, 1, size, false);
    assert_int_equal(ost_store_spill_all(s), 0);
    uv_run(&loop, UV_RUN_DEFAULT);
    ost_stats st = stats(s);
    assert_int_equal(st.objs_disk, 0);
    assert_int_equal(st.spill_entries, 0);
    assert_int_equal(ost__spill_records(s), 0);
    assert_int_equal(st.spilled_stored, 0);
    assert_int_equal(st.used, size);
    check(s, 1, size, false);
    ost_obj_delete(s, id(1));
    lanes = 0;
    done(s);
}

static void stale_spill_of_a_dead_worker_is_cleared(void **state)
{
    (void)state;
    char base[64];
    snprintf(base, sizeof base, "/tmp/spw-stale-XXXXXX");
    assert_non_null(mkdtemp(base));
    /* What a worker killed between creating and unlinking its files would leave. */
    char stale[256], f[300];
    snprintf(stale, sizeof stale, "%s/spillway-999999-abcdef", base);
    assert_int_equal(mkdir(stale, 0700), 0);
    snprintf(f, sizeof f, "%s/data.mdb", stale);
    FILE *fp = fopen(f, "w");
    fputs("old spill", fp);
    fclose(fp);
    uv_loop_init(&loop);
    ost_opts o;
    ost_opts_default(&o);
    o.capacity = 1u << 20;
    o.spill_dir = base;
    ost_store *s;
    assert_int_equal(ost_store_new(&loop, &o, &s), 0);
    assert_int_equal(entries_in(base), 0); /* cleared, and ours is already unlinked */
    snprintf(dir, sizeof dir, "%s", base);
    done(s);
}

static void record_codec_round_trips_and_rejects_damage(void **state)
{
    (void)state;
    ZSTD_CCtx *cc = ZSTD_createCCtx();
    ZSTD_DCtx *dc = ZSTD_createDCtx();
    size_t n = 1u << 20;
    uint8_t *raw = malloc(n), *out = malloc(OST_REC_HDR + ZSTD_compressBound(n)), *back = malloc(n);
    for (int comp = 0; comp < 2; comp++) {
        fill_obj(raw, n, 7, comp);
        int64_t len = ost_rec_encode(cc, 1, raw, n, out, OST_REC_HDR + ZSTD_compressBound(n));
        assert_true(len > OST_REC_HDR);
        assert_int_equal(out[5], comp ? OST_REC_ZSTD : OST_REC_RAW);
        assert_int_equal(ost_rec_decode(dc, out, (size_t)len, back, n), 0);
        assert_memory_equal(back, raw, n);
        /* Wrong expected length, truncation, a flipped bit anywhere: all refused. */
        assert_int_equal(ost_rec_decode(dc, out, (size_t)len, back, n - 1), SPW_ECORRUPT);
        assert_int_equal(ost_rec_decode(dc, out, (size_t)len - 1, back, n), SPW_ECORRUPT);
        assert_int_equal(ost_rec_decode(dc, out, 10, back, n), SPW_ECORRUPT);
        for (size_t pos = 0; pos < (size_t)len; pos += (size_t)len / 97 + 1) {
            out[pos] ^= 0x10;
            assert_int_equal(ost_rec_decode(dc, out, (size_t)len, back, n), SPW_ECORRUPT);
            out[pos] ^= 0x10;
        }
    }
    free(raw);
    free(out);
    free(back);
    ZSTD_freeCCtx(cc);
    ZSTD_freeDCtx(dc);
}

/* A chunk is judged by a sample spread over it, not by its start: one whose first part is
 * random and the rest compressible is still compressed; one of random values sharing their top
 * bits (the buckets of a shuffle) and one of such values sorted (a sorted bucket of a few
 * million, where zstd saves about a tenth: less than the eighth a record needs) are raw. */
static void record_sample_judges_the_whole_chunk(void **state)
{
    (void)state;
    ZSTD_CCtx *cc = ZSTD_createCCtx();
    ZSTD_DCtx *dc = ZSTD_createDCtx();
    size_t n = 1u << 20, cap = OST_REC_HDR + ZSTD_compressBound(n);
    uint8_t *raw = malloc(n), *out = malloc(cap), *back = malloc(n);
    fill_obj(raw, n, 3, true);
    fill_obj(raw, 128u << 10, 4, false);
    int64_t len = ost_rec_try_zstd(cc, 1, raw, n, out, cap);
    assert_true(len > OST_REC_HDR && (size_t)len < n / 2);
    assert_int_equal(out[5], OST_REC_ZSTD);
    assert_int_equal(ost_rec_decode(dc, out, (size_t)len, back, n), 0);
    assert_memory_equal(back, raw, n);
    fill_obj(raw, n, 5, false);
    for (size_t i = 0; i + 8 <= n; i += 8)
        raw[i + 7] = (uint8_t)(0x40 | (raw[i + 7] & 0x03)); /* 6 top bits shared */
    assert_int_equal(ost_rec_try_zstd(cc, 1, raw, n, out, cap), 0);
    len = ost_rec_encode(cc, 1, raw, n, out, cap);
    assert_int_equal(out[5], OST_REC_RAW);
    assert_int_equal(ost_rec_decode(dc, out, (size_t)len, back, n), 0);
    assert_memory_equal(back, raw, n);
    uint64_t x = 7, at = 1ULL << 58;
    for (size_t i = 0; i + 8 <= n; i += 8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        at += x >> 27; /* gaps of 2^36 on average, as between 8 Mi values over 2^59 */
        memcpy(raw + i, &at, 8);
    }
    assert_int_equal(ost_rec_try_zstd(cc, 1, raw, n, out, cap), 0);
    free(raw);
    free(out);
    free(back);
    ZSTD_freeCCtx(cc);
    ZSTD_freeDCtx(dc);
}

/* Records are written as version 2 (checksum of the stored bytes, checked before decoding);
 * version 1 records (checksum of the raw bytes) still decode, with their checksum checked. */
static void record_version_1_is_still_read(void **state)
{
    (void)state;
    ZSTD_CCtx *cc = ZSTD_createCCtx();
    ZSTD_DCtx *dc = ZSTD_createDCtx();
    size_t n = 1u << 20, cap = OST_REC_HDR + ZSTD_compressBound(n);
    uint8_t *raw = malloc(n), *out = malloc(cap), *back = malloc(n);
    fill_obj(raw, n, 9, 1);
    int64_t len = ost_rec_encode(cc, 1, raw, n, out, cap);
    assert_true(len > OST_REC_HDR && (size_t)len < n / 2);
    assert_int_equal(out[4], OST_REC_VERSION);
    assert_int_equal(out[5], OST_REC_ZSTD);
    uint64_t sum;
    memcpy(&sum, out + 16, 8);
    assert_true(sum == XXH3_64bits(out + OST_REC_HDR, (size_t)len - OST_REC_HDR));
    /* The same record as version 1 wrote it. */
    out[4] = OST_REC_VERSION_RAWSUM;
    sum = XXH3_64bits(raw, n);
    memcpy(out + 16, &sum, 8);
    memset(back, 0, n);
    assert_int_equal(ost_rec_decode(dc, out, (size_t)len, back, n), 0);
    assert_memory_equal(back, raw, n);
    sum ^= 1;
    memcpy(out + 16, &sum, 8);
    assert_int_equal(ost_rec_decode(dc, out, (size_t)len, back, n), SPW_ECORRUPT);
    /* An unknown version: refused. */
    out[4] = 3;
    assert_int_equal(ost_rec_decode(dc, out, (size_t)len, back, n), SPW_ECORRUPT);
    free(raw);
    free(out);
    free(back);
    ZSTD_freeCCtx(cc);
    ZSTD_freeDCtx(dc);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(spill_past_threshold_then_restore_every_byte),
    cmocka_unit_test(second_eviction_costs_no_write),
    cmocka_unit_test(pinned_objects_keep_memory_and_allocations_fail_clearly),
    cmocka_unit_test(larger_than_capacity_is_etoobig),
    cmocka_unit_test(full_spill_map_fails_cleanly_and_keeps_objects),
    cmocka_unit_test(full_spill_storage_fails_later_allocations_at_once),
    cmocka_unit_test(failed_spill_is_tried_again),
    cmocka_unit_test(map_grows_when_allowed),
    cmocka_unit_test(delete_during_spill_is_safe),
    cmocka_unit_test(deleted_object_stops_its_running_spill),
    cmocka_unit_test(a_waiting_allocation_packs_smaller_ones_low),
    cmocka_unit_test(spill_file_is_compacted_when_mostly_free),
    cmocka_unit_test(spill_file_is_compacted_once_per_need),
    cmocka_unit_test(spill_file_is_compacted_once_deletions_settle),
    cmocka_unit_test(parallel_lanes_keep_order_and_accounting),
    cmocka_unit_test(one_large_object_takes_every_lane),
    cmocka_unit_test(record_version_1_is_still_read),
    cmocka_unit_test(queued_ahead_parts_keep_lanes_and_accounting),
    cmocka_unit_test(large_spill_past_the_map_limit_is_taken_back),
    cmocka_unit_test(stale_spill_of_a_dead_worker_is_cleared),
    cmocka_unit_test(record_codec_round_trips_and_rejects_damage),
    cmocka_unit_test(record_sample_judges_the_whole_chunk),
    cmocka_unit_test(late_deletion_of_an_old_copy_keeps_the_new_one),
    cmocka_unit_test(restore_given_memory_while_quiescing_fails_cleanly),
    cmocka_unit_test(getter_letting_go_leaves_the_next_one_its_memory),
    cmocka_unit_test(pin_during_restore_is_eagain),
    cmocka_unit_test(map_full_for_a_deleted_object_leaves_spilling_on),
    cmocka_unit_test(free_with_restores_of_deleted_objects_waiting),
    cmocka_unit_test(failed_map_growth_keeps_spilled_copies_readable),
    cmocka_unit_test(map_full_spill_whose_take_back_fails_keeps_its_reason),
    cmocka_unit_test(getter_deleting_the_object_it_waited_for),
    cmocka_unit_test(records_left_by_a_failed_take_back_are_handed_back),
    cmocka_unit_test(spilled_ranges_are_read_without_a_restore),
    cmocka_unit_test(held_spills_start_at_release_and_deleted_ones_are_not_written),
    cmocka_unit_test(spared_objects_are_spilled_only_for_waiting_room),
    cmocka_unit_test(a_fragmented_store_empties_one_range_for_a_large_allocation),
    cmocka_unit_test(waiting_only_for_pins_serves_those_behind_that_fit),
    cmocka_unit_test(small_allocations_pass_a_large_waiter_within_its_size),
};

SPW_TEST_MAIN(tests)
