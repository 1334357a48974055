/* Unit tests for the object store: lifecycle, pins, deletion while in use, waiting
 * allocations, and the exactness of its figures. */
#include "spillway/objstore.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include "test_main.h"

static uv_loop_t loop;

static ost_store *mk(uint64_t capacity)
{
    uv_loop_init(&loop);
    ost_opts o;
    ost_opts_default(&o);
    o.capacity = capacity;
    o.name = "unit";
    ost_store *s = NULL;
    assert_int_equal(ost_store_new(&loop, &o, &s), 0);
    return s;
}

static void done(ost_store *s)
{
    ost_store_free(s);
    assert_int_equal(uv_loop_close(&loop), 0);
    assert_int_equal(spw_heap_used(SPW_MOD_OBJSTORE), 0);
}

static spw_id id(uint64_t n)
{
    return (spw_id){0xABCDULL, n};
}

static ost_stats stats(ost_store *s)
{
    ost_stats st;
    ost_stats_get(s, &st);
    return st;
}

static void ost_lifecycle_returns_used_to_zero(void **state)
{
    (void)state;
    ost_store *s = mk(1 << 20);
    ost_obj *o;
    assert_int_equal(ost_obj_create(s, id(1), 10000, &o), 0);
    assert_int_equal(ost_obj_state(o), OST_CREATED);
    assert_int_equal(stats(s).used, 12288); /* rounded to pages */
    assert_int_equal(stats(s).pinned, 12288); /* the writer's pin */
    memset(ost_obj_data(o), 0x5a, 10000);
    assert_null(ost_obj_find(s, id(2)));
    assert_ptr_equal(ost_obj_find(s, id(1)), o);
    assert_int_equal(ost_obj_seal(s, o), 0);
    assert_int_equal(ost_obj_state(o), OST_SEALED);
    assert_int_equal(stats(s).pinned, 0);
    assert_int_equal(ost_obj_pin(s, o), 0);
    assert_int_equal(ost_obj_data(o)[9999], 0x5a);
    assert_int_equal(stats(s).pinned, 12288);
    assert_int_equal(ost_obj_unpin(s, o), 0);
    assert_int_equal(stats(s).objs_mem, 1);
    assert_int_equal(ost_obj_delete(s, id(1)), 0);
    ost_stats st = stats(s);
    assert_int_equal(st.used, 0);
    assert_int_equal(st.pinned, 0);
    assert_int_equal(st.objs_mem, 0);
    assert_int_equal(st.objs_total, 0);
    assert_int_equal(st.peak_used, 12288);
    done(s);
}

/* The arena's memfd is sealed at its size: a local client given the read-write descriptor
 * cannot truncate it (every process mapping it, the worker first, would die of SIGBUS) nor grow
 * it; punching holes (the store's trim) still works. */
static void ost_arena_cannot_be_resized(void **state)
{
    (void)state;
    ost_store *s = mk(1 << 20);
    int fd = ost_store_fd(s);
    assert_true(fd >= 0);
    assert_int_equal(ftruncate(fd, 0), -1);
    assert_int_equal(errno, EPERM);
    assert_int_equal(ftruncate(fd, 2 << 20), -1);
    assert_int_equal(errno, EPERM);
    assert_int_equal(fcntl(fd, F_ADD_SEALS, 0), -1); /* and the seals stay */
    assert_int_equal(errno, EPERM);
    ost_obj *o;
    assert_int_equal(ost_obj_create(s, id(1), 10000, &o), 0);
    memset(ost_obj_data(o), 0x5a, 10000);
    assert_int_equal(ost_obj_seal(s, o), 0);
    assert_int_equal(ost_obj_delete(s, id(1)), 0);
    ost_store_trim(s);
    struct stat st;
    assert_int_equal(fstat(fd, &st), 0);
    assert_int_equal(st.st_size, 1 << 20);
    done(s);
}

static void ost_bad_requests_change_nothing(void **state)
{
    (void)state;
    ost_store *s = mk(1 << 20);
    ost_obj *o, *o2 = NULL;
    assert_int_equal(ost_obj_create(s, id(1), 0, &o2), SPW_EINVAL);
    assert_int_equal(ost_obj_create(s, id(1), (1 << 20) + 1, &o2), SPW_ETOOBIG);
    assert_null(o2);
    assert_int_equal(ost_obj_create(s, id(1), 4096, &o), 0);
    assert_int_equal(ost_obj_create(s, id(1), 4096, &o2), SPW_EEXIST);
    assert_int_equal(ost_obj_pin(s, o), SPW_ENOTSEALED);
    assert_int_equal(ost_obj_unpin(s, o), SPW_ENOTHELD); /* the writer's pin is not a reader's */
    assert_int_equal(ost_obj_seal(s, o), 0);
    assert_int_equal(ost_obj_seal(s, o), SPW_ESEALED);
    assert_int_equal(ost_obj_unpin(s, o), SPW_ENOTHELD);
    assert_int_equal(ost_obj_delete(s, id(99)), SPW_ENOOBJ);
    ost_stats st = stats(s);
    assert_int_equal(st.used, 4096);
    assert_int_equal(st.pinned, 0);
    assert_int_equal(st.objs_total, 1);
    assert_int_equal(ost_obj_delete(s, id(1)), 0);
    assert_int_equal(ost_obj_delete(s, id(1)), SPW_ENOOBJ);
    done(s);
}

static void ost_delete_while_pinned_frees_at_last_unpin(void **state)
{
    (void)state;
    ost_store *s = mk(1 << 20);
    ost_obj *o;
    assert_int_equal(ost_obj_create(s, id(1), 8192, &o), 0);
    ost_obj_seal(s, o);
    assert_int_equal(ost_obj_pin(s, o), 0);
    assert_int_equal(ost_obj_pin(s, o), 0);
    assert_int_equal(ost_obj_delete(s, id(1)), 0);
    assert_null(ost_obj_find(s, id(1)));      /* gone for lookups */
    assert_int_equal(stats(s).used, 8192);    /* but its readers keep the memory */
    assert_int_equal(ost_obj_unpin(s, o), 0);
    assert_int_equal(stats(s).used, 8192);
    assert_int_equal(ost_obj_unpin(s, o), 0); /* the last one frees it */
    assert_int_equal(stats(s).used, 0);
    assert_int_equal(stats(s).pinned, 0);
    /* The id can be used again. */
    assert_int_equal(ost_obj_create(s, id(1), 4096, &o), 0);
    ost_obj_abort(s, o);
    assert_int_equal(stats(s).used, 0);
    done(s);
}

static void ost_delete_while_being_written_frees_at_abort(void **state)
{
    (void)state;
    ost_store *s = mk(1 << 20);
    ost_obj *o;
    assert_int_equal(ost_obj_create(s, id(1), 8192, &o), 0);
    assert_int_equal(ost_obj_delete(s, id(1)), 0);
    assert_int_equal(stats(s).used, 8192);
    ost_obj_abort(s, o);
    assert_int_equal(stats(s).used, 0);
    assert_int_equal(stats(s).pinned, 0);
    done(s);
}

/* A follower (a broadcast's next hop) pins an object still being written and sends from its
 * memory: an abort then hides the object at once but keeps the memory until the follower lets
 * go; a seal hands the follower a pin on the sealed object. */
static void ost_follower_pin_outlives_abort_and_seal(void **state)
{
    (void)state;
    ost_store *s = mk(1 << 20);
    ost_obj *o;
    assert_int_equal(ost_obj_create(s, id(1), 8192, &o), 0);
    assert_int_equal(ost_obj_pin(s, o), SPW_ENOTSEALED); /* readers of whole objects wait */
    assert_int_equal(ost_obj_pin_writing(s, o), 0);
    assert_int_equal(ost_obj_pins(o), 2);
    assert_int_equal(stats(s).pinned, 8192);
    ost_obj_abort(s, o);
    assert_null(ost_obj_find(s, id(1)));
    assert_int_equal(stats(s).used, 8192); /* the follower's chunks are still in flight */
    assert_int_equal(stats(s).pinned, 8192);
    assert_int_equal(ost_obj_pin_writing(s, o), SPW_ENOTSEALED); /* no new follower */
    ost_obj *o2;
    assert_int_equal(ost_obj_create(s, id(1), 4096, &o2), 0); /* the id is free again */
    ost_obj_abort(s, o2);
    assert_int_equal(ost_obj_unpin(s, o), 0); /* the last pin frees it */
    assert_int_equal(stats(s).used, 0);
    assert_int_equal(stats(s).pinned, 0);
    assert_int_equal(stats(s).objs_mem, 0);

    assert_int_equal(ost_obj_create(s, id(2), 8192, &o), 0);
    assert_int_equal(ost_obj_pin_writing(s, o), 0);
    assert_int_equal(ost_obj_unpin(s, o), 0);
    assert_int_equal(ost_obj_unpin(s, o), SPW_ENOTHELD); /* the writer's pin is not a reader's */
    assert_int_equal(ost_obj_pin_writing(s, o), 0);
    assert_int_equal(ost_obj_seal(s, o), 0);
    assert_int_equal(ost_obj_pins(o), 1);
    assert_int_equal(stats(s).pinned, 8192);
    assert_int_equal(ost_obj_unpin(s, o), 0);
    assert_int_equal(stats(s).pinned, 0);
    assert_int_equal(stats(s).used, 8192);
    assert_int_equal(ost_obj_pin_writing(s, o), 0); /* sealed: an ordinary pin */
    assert_int_equal(ost_obj_unpin(s, o), 0);
    assert_int_equal(ost_obj_delete(s, id(2)), 0);
    assert_int_equal(stats(s).used, 0);
    done(s);
}

typedef struct cb_log {
    int calls;
    int status;
    ost_obj *o;
} cb_log;

static void log_cb(void *arg, int status, ost_obj *o)
{
    cb_log *l = arg;
    l->calls++;
    l->status = status;
    l->o = o;
}

static void ost_full_store_makes_allocations_wait_then_succeed(void **state)
{
    (void)state;
    ost_store *s = mk(64 * 1024);
    ost_obj *a;
    assert_int_equal(ost_obj_create(s, id(1), 48 * 1024, &a), 0);
    ost_obj_seal(s, a);
    cb_log l = {0};
    assert_int_equal(ost_obj_create_async(s, id(2), 32 * 1024, log_cb, &l), 0);
    assert_int_equal(l.calls, 0); /* waiting for room */
    assert_int_equal(ost_obj_delete(s, id(1)), 0);
    assert_int_equal(l.calls, 1);
    assert_int_equal(l.status, 0);
    assert_non_null(l.o);
    assert_int_equal(ost_obj_size(l.o), 32 * 1024);
    ost_obj_abort(s, l.o);
    /* Immediate when there is room: the callback runs before the call returns. */
    cb_log l2 = {0};
    assert_int_equal(ost_obj_create_async(s, id(3), 4096, log_cb, &l2), 0);
    assert_int_equal(l2.calls, 1);
    ost_obj_abort(s, l2.o);
    done(s);
}

/* With room_cb, memory freed inside the owner's call (a delete) serves no waiter in that call:
 * the owner is told, and serves them with ost_store_maintain from its loop. */
static void room_cb_counts(void *arg)
{
    (*(int *)arg)++;
}

static void ost_room_cb_defers_waiters_out_of_the_owners_call(void **state)
{
    (void)state;
    uv_loop_init(&loop);
    ost_opts o;
    ost_opts_default(&o);
    o.capacity = 64 * 1024;
    int rooms = 0;
    o.room_cb = room_cb_counts;
    o.room_arg = &rooms;
    ost_store *s;
    assert_int_equal(ost_store_new(&loop, &o, &s), 0);
    ost_obj *a;
    assert_int_equal(ost_obj_create(s, id(1), 48 * 1024, &a), 0);
    ost_obj_seal(s, a);
    cb_log l = {0};
    assert_int_equal(ost_obj_create_async(s, id(2), 32 * 1024, log_cb, &l), 0);
    assert_int_equal(ost_obj_delete(s, id(1)), 0);
    assert_int_equal(l.calls, 0); /* not inside the delete */
    assert_int_equal(rooms, 1);
    ost_store_maintain(s);
    assert_int_equal(l.calls, 1);
    assert_int_equal(l.status, 0);
    ost_obj_abort(s, l.o);
    done(s);
}

static void ost_waiting_allocation_fails_with_ebackpressure_at_deadline(void **state)
{
    (void)state;
    uv_loop_init(&loop);
    ost_opts o;
    ost_opts_default(&o);
    o.capacity = 64 * 1024;
    o.alloc_wait_ms = 0; /* the deadline is now */
    ost_store *s;
    assert_int_equal(ost_store_new(&loop, &o, &s), 0);
    ost_obj *a;
    assert_int_equal(ost_obj_create(s, id(1), 64 * 1024, &a), 0);
    cb_log l = {0};
    assert_int_equal(ost_obj_create_async(s, id(2), 4096, log_cb, &l), 0);
    ost_store_maintain(s);
    assert_int_equal(l.calls, 1);
    assert_int_equal(l.status, SPW_EBACKPRESSURE);
    assert_null(l.o);
    assert_null(ost_obj_find(s, id(2)));
    ost_obj_abort(s, a);
    done(s);
}

static void ost_free_fails_waiters_with_eshutdown(void **state)
{
    (void)state;
    ost_store *s = mk(64 * 1024);
    ost_obj *a;
    assert_int_equal(ost_obj_create(s, id(1), 64 * 1024, &a), 0);
    cb_log l = {0};
    ost_obj_create_async(s, id(2), 4096, log_cb, &l);
    assert_int_equal(l.calls, 0);
    done(s);
    assert_int_equal(l.calls, 1);
    assert_int_equal(l.status, SPW_ESHUTDOWN);
}

static void ost_too_big_async_fails_at_once(void **state)
{
    (void)state;
    ost_store *s = mk(64 * 1024);
    cb_log l = {0};
    ost_obj_create_async(s, id(1), 64 * 1024 + 1, log_cb, &l);
    assert_int_equal(l.calls, 1);
    assert_int_equal(l.status, SPW_ETOOBIG);
    done(s);
}

/* A request that can never succeed (too big, size 0, an id already here) is answered at once
 * even while other allocations wait for room: queued behind them it would wait for its turn,
 * and its size would count as bytes to make room for (spilling for nothing; a huge size from an
 * executor would even wrap the count). The waiting allocation is untouched. */
static void ost_hopeless_async_fails_at_once_behind_a_waiter(void **state)
{
    (void)state;
    ost_store *s = mk(64 * 1024);
    ost_obj *a;
    assert_int_equal(ost_obj_create(s, id(1), 64 * 1024, &a), 0);
    cb_log w = {0};
    assert_int_equal(ost_obj_create_async(s, id(2), 4096, log_cb, &w), 0);
    assert_int_equal(w.calls, 0); /* waiting for room */
    cb_log big = {0}, zero = {0}, dup = {0}, huge = {0};
    assert_int_equal(ost_obj_create_async(s, id(3), 64 * 1024 + 1, log_cb, &big), 0);
    assert_int_equal(ost_obj_create_async(s, id(4), 0, log_cb, &zero), 0);
    assert_int_equal(ost_obj_create_async(s, id(1), 4096, log_cb, &dup), 0);
    assert_int_equal(ost_obj_create_async(s, id(5), UINT64_MAX, log_cb, &huge), 0);
    assert_int_equal(big.calls, 1);
    assert_int_equal(big.status, SPW_ETOOBIG);
    assert_int_equal(zero.calls, 1);
    assert_int_equal(zero.status, SPW_EINVAL);
    assert_int_equal(dup.calls, 1);
    assert_int_equal(dup.status, SPW_EEXIST);
    assert_int_equal(huge.calls, 1);
    assert_int_equal(huge.status, SPW_ETOOBIG);
    assert_int_equal(w.calls, 0);
    ost_obj_abort(s, a); /* room: the waiter gets it, and only it */
    assert_int_equal(w.calls, 1);
    assert_int_equal(w.status, 0);
    assert_int_equal(big.calls + zero.calls + dup.calls + huge.calls, 4);
    ost_obj_abort(s, w.o);
    assert_int_equal(stats(s).used, 0);
    done(s);
}

static void ost_arena_fd_maps_the_same_bytes(void **state)
{
    (void)state;
    ost_store *s = mk(1 << 20);
    ost_obj *o;
    assert_int_equal(ost_obj_create(s, id(1), 100000, &o), 0);
    for (int i = 0; i < 100000; i++)
        ost_obj_data(o)[i] = (uint8_t)(i * 13);
    ost_obj_seal(s, o);
    /* Another mapping of the memfd, as an executor or a local client makes. */
    uint8_t *view = mmap(NULL, 1 << 20, PROT_READ, MAP_SHARED, ost_store_fd(s), 0);
    assert_true(view != MAP_FAILED);
    assert_memory_equal(view + ost_obj_offset(o), ost_obj_data(o), 100000);
    assert_int_equal(ost_obj_offset(o) % 4096, 0);
    munmap(view, 1 << 20);
    ost_obj_delete(s, id(1));
    done(s);
}

static void ost_limit_hook_shrinks_capacity(void **state)
{
    (void)state;
    ost_store *s = mk(1 << 20);
    ost_store_set_limit(s, 64 * 1024);
    ost_obj *o;
    assert_int_equal(ost_obj_create(s, id(1), 128 * 1024, &o), SPW_ETOOBIG);
    assert_int_equal(ost_obj_create(s, id(1), 64 * 1024, &o), 0);
    assert_int_equal(stats(s).capacity, 64 * 1024);
    assert_int_equal(ost_mem_state(s, NULL), OST_LEVEL_PAUSE);
    ost_obj_abort(s, o);
    assert_int_equal(ost_mem_state(s, NULL), OST_LEVEL_OK);
    ost_store_set_limit(s, 0);
    assert_int_equal(stats(s).capacity, 1 << 20);
    done(s);
}

static void ost_mem_state_levels_follow_thresholds(void **state)
{
    (void)state;
    ost_store *s = mk(100 * 4096);
    ost_obj *o[100];
    uint64_t to_free;
    int n = 0;
    for (; n < 80; n++)
        assert_int_equal(ost_obj_create(s, id((uint64_t)n + 1), 4096, &o[n]), 0);
    assert_int_equal(ost_mem_state(s, &to_free), OST_LEVEL_OK); /* exactly 80 %: not above */
    assert_int_equal(ost_obj_create(s, id(100), 4096, &o[n++]), 0);
    assert_int_equal(ost_mem_state(s, &to_free), OST_LEVEL_SPILL);
    assert_int_equal(to_free, 11 * 4096); /* down to the 70 % target */
    for (; n < 91; n++)
        assert_int_equal(ost_obj_create(s, id((uint64_t)n + 200), 4096, &o[n]), 0);
    assert_int_equal(ost_mem_state(s, &to_free), OST_LEVEL_PAUSE);
    for (int i = 0; i < n; i++)
        ost_obj_abort(s, o[i]);
    assert_int_equal(stats(s).used, 0);
    done(s);
}

static uint64_t arena_blocks(ost_store *s)
{
    struct stat st;
    assert_int_equal(fstat(ost_store_fd(s), &st), 0);
    return (uint64_t)st.st_blocks * 512;
}

/* Freed ranges are punched out of the memfd: the arena's pages follow `used` again, objects
 * still held keep their bytes, and a trim with little to give back does nothing. */
static void ost_trim_hands_freed_pages_back(void **state)
{
    (void)state;
    ost_store *s = mk(32 << 20);
    ost_obj *o[8];
    for (int i = 0; i < 8; i++) {
        assert_int_equal(ost_obj_create(s, id((uint64_t)i), (2 << 20) + 100, &o[i]), 0);
        memset(ost_obj_data(o[i]), i + 1, (2 << 20) + 100);
        assert_int_equal(ost_obj_seal(s, o[i]), 0);
    }
    assert_true(arena_blocks(s) >= 16u << 20);
    assert_int_equal(ost_store_trim(s), 0); /* everything in use: nothing to punch */
    for (int i = 0; i < 8; i += 2)
        assert_int_equal(ost_obj_delete(s, id((uint64_t)i)), 0);
    uint64_t used = stats(s).used;
    assert_true(ost_store_trim(s) >= 8u << 20);
    assert_true(arena_blocks(s) <= used + 4096);
    for (int i = 1; i < 8; i += 2) {
        assert_int_equal(ost_obj_pin(s, o[i]), 0);
        assert_int_equal(ost_obj_data(o[i])[0], i + 1);
        assert_int_equal(ost_obj_data(o[i])[(2 << 20) + 99], i + 1);
        assert_int_equal(ost_obj_unpin(s, o[i]), 0);
    }
    /* A range punched and allocated again reads as zeros and takes new writes. */
    ost_obj *n;
    assert_int_equal(ost_obj_create(s, id(100), 4 << 20, &n), 0);
    memset(ost_obj_data(n), 0x77, 4 << 20);
    assert_int_equal(ost_obj_data(n)[(4 << 20) - 1], 0x77);
    ost_obj_abort(s, n);
    for (int i = 1; i < 8; i += 2)
        assert_int_equal(ost_obj_delete(s, id((uint64_t)i)), 0);
    ost_store_trim(s);
    assert_true(arena_blocks(s) <= OST_TRIM_SLACK);
    done(s);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(ost_trim_hands_freed_pages_back),
    cmocka_unit_test(ost_lifecycle_returns_used_to_zero),
    cmocka_unit_test(ost_arena_cannot_be_resized),
    cmocka_unit_test(ost_bad_requests_change_nothing),
    cmocka_unit_test(ost_delete_while_pinned_frees_at_last_unpin),
    cmocka_unit_test(ost_delete_while_being_written_frees_at_abort),
    cmocka_unit_test(ost_follower_pin_outlives_abort_and_seal),
    cmocka_unit_test(ost_full_store_makes_allocations_wait_then_succeed),
    cmocka_unit_test(ost_room_cb_defers_waiters_out_of_the_owners_call),
    cmocka_unit_test(ost_waiting_allocation_fails_with_ebackpressure_at_deadline),
    cmocka_unit_test(ost_free_fails_waiters_with_eshutdown),
    cmocka_unit_test(ost_too_big_async_fails_at_once),
    cmocka_unit_test(ost_hopeless_async_fails_at_once_behind_a_waiter),
    cmocka_unit_test(ost_arena_fd_maps_the_same_bytes),
    cmocka_unit_test(ost_limit_hook_shrinks_capacity),
    cmocka_unit_test(ost_mem_state_levels_follow_thresholds),
};

SPW_TEST_MAIN(tests)
