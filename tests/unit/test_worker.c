/*
 * The worker in process: spw_worker runs on a libuv loop in this process (its executors are
 * real child processes, the built spillway-worker), and a fake scheduler - a proto_ctx of role
 * SCHEDULER listening on 127.0.0.1 - accepts it with the real handshake and sends it frames from
 * the proto encoders. The test steps the loop (uv_run ONCE, woken at least by the worker's
 * heartbeat timer; bounded, no sleeps) and runs wrk__check_full on the worker's task and fetch
 * tables after every step.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test_main.h"

#include "store_int.h"
#include "worker_int.h"

#define SECRET "in-process-test-secret-0123456789"
#define STEPS 100000

typedef struct rx {
    uint32_t type;
    uint64_t req; /* 0 for the records of a batched frame */
    spw_id id;
    int64_t status;
    uint64_t size;
    uint8_t inl[16];
    uint32_t inl_len;
    bool inl_nil;
} rx;

typedef struct env {
    uv_loop_t loop;
    proto_ctx *sched;
    char addr[64];
    proto_conn *conn; /* the worker's connection to us */
    wrk *w;
    bool ready, closed, sched_closed;
    int ready_status;
    rx log[256];
    uint32_t n;
    uint32_t dones_frames; /* TASK_DONES frames received */
    struct {
        uint32_t frames, last_frames; /* OBJ_LIST frames; those that said more = 0 */
        uint32_t most;                /* records in the largest */
        uint64_t recs;
        bool stats_before_last; /* a frame before the last carried figures */
        uint32_t last_stats;    /* figures of the last */
    } olist;
} env;

static int on_hello(proto_conn *c, const proto_msg *hello, proto_welcome *wel, char *err,
                    size_t errlen)
{
    env *e = proto_ctx_data(proto_conn_ctx(c));
    wel->session = 7;
    wel->inline_limit = PROTO_DEFAULT_INLINE_LIMIT;
    wel->chunk = PROTO_DEFAULT_CHUNK;
    wel->max_frame = PROTO_DEFAULT_MAX_FRAME;
    e->conn = c;
    return 0;
}

/* Logs one message, or one record of a batched one as the single message it stands for. */
static void log_rx(env *e, uint32_t type, const proto_val *f)
{
    assert_true(e->n < sizeof e->log / sizeof e->log[0]);
    rx *r = &e->log[e->n++];
    memset(r, 0, sizeof *r);
    r->type = type;
    if (type == PROTO_TASK_DONE) {
        r->id = f[F_DONE_ID].id;
        r->status = f[F_DONE_STATUS].i;
        r->size = f[F_DONE_SIZE].u;
        r->inl_nil = f[F_DONE_INLINE].nil;
        if (!r->inl_nil && f[F_DONE_INLINE].bin.len <= sizeof r->inl) {
            r->inl_len = f[F_DONE_INLINE].bin.len;
            memcpy(r->inl, f[F_DONE_INLINE].bin.ptr, r->inl_len);
        }
    } else if (type == PROTO_TASK_STARTED && f[F_STARTED_IDS].arr.n > 0) {
        r->id = f[F_STARTED_IDS].arr.v[0].id;
    } else if (type == PROTO_ERROR) {
        r->status = f[F_ERROR_CODE].i;
    } else if (type == PROTO_OBJ_ADDED) {
        r->id = f[F_ADDED_ID].id;
    }
}

static void on_msg(proto_conn *c, const proto_msg *m)
{
    env *e = proto_ctx_data(proto_conn_ctx(c));
    if (m->type == PROTO_HEARTBEAT)
        return;
    if (m->type == PROTO_OBJ_LIST) {
        uint32_t n = m->f[F_OLIST_OBJS].arr.n;
        e->olist.frames++;
        e->olist.recs += n;
        e->olist.most = n > e->olist.most ? n : e->olist.most;
        if (m->f[F_OLIST_MORE].u == 0) {
            e->olist.last_frames++;
            e->olist.last_stats = m->f[F_OLIST_STATS].arr.n;
        } else {
            e->olist.stats_before_last |= m->f[F_OLIST_STATS].arr.n > 0;
        }
        return;
    }
    if (m->type == PROTO_TASK_DONES) {
        e->dones_frames++;
        for (uint32_t i = 0; i < m->f[F_DONES_RECS].arr.n; i++)
            log_rx(e, PROTO_TASK_DONE, PROTO_REC(&m->f[F_DONES_RECS], i));
        return;
    }
    log_rx(e, m->type, m->f);
    e->log[e->n - 1].req = m->req;
}

static void on_close(proto_conn *c, int status)
{
    env *e = proto_ctx_data(proto_conn_ctx(c));
    if (c == e->conn)
        e->conn = NULL;
}

static const proto_conn_cbs sched_cbs = {
    .on_hello = on_hello,
    .on_msg = on_msg,
    .on_close = on_close,
};

#define STEP_UNTIL(e, cond)                                                                        \
    do {                                                                                           \
        for (int step_ = 0; step_ < STEPS && !(cond); step_++)                                     \
            uv_run(&(e)->loop, UV_RUN_ONCE);                                                       \
        assert_true(cond);                                                                         \
        wrk__check_full((e)->w);                                                                   \
    } while (0)

static spw_id tid(uint64_t n)
{
    spw_id id = {0x3017000000000000ULL, n};
    return id;
}

static const rx *find(const env *e, uint32_t type, uint64_t id)
{
    for (uint32_t i = 0; i < e->n; i++)
        if (e->log[i].type == type && spw_id_eq(e->log[i].id, tid(id)))
            return &e->log[i];
    return NULL;
}

static void ready_cb(void *arg, int status)
{
    env *e = arg;
    e->ready = true;
    e->ready_status = status;
}

static uint32_t setup_max_frame; /* the worker's frame limit when not 0 (setup_small_frames) */
static uint64_t setup_capacity;  /* the worker's store capacity when not 0 (setup_big_store) */
static uint32_t setup_reconnect_ms; /* the worker reconnects when not 0 (setup_reconnect) */

static int setup(void **state)
{
    env *e = calloc(1, sizeof *e);
    assert_non_null(e);
    spw_log_level = SPW_LOG_ERR;
    assert_int_equal(uv_loop_init(&e->loop), 0);
    proto_ctx_opts po;
    proto_ctx_opts_default(&po);
    po.role = PROTO_ROLE_SCHEDULER;
    po.name = "fake-scheduler";
    po.secret = (const uint8_t *)SECRET;
    po.secret_len = strlen(SECRET);
    assert_int_equal(proto_ctx_new(&e->loop, &po, &e->sched), 0);
    proto_ctx_set_data(e->sched, e);
    assert_int_equal(proto_listen(e->sched, "127.0.0.1:0", &sched_cbs, NULL, NULL, e->addr,
                                  sizeof e->addr),
                     0);
    wrk_opts o;
    wrk_opts_default(&o);
    o.scheduler = e->addr;
    o.name = "w-in-process";
    o.slots = 1;
    o.secret = (const uint8_t *)SECRET;
    o.secret_len = strlen(SECRET);
    o.store.capacity = setup_capacity != 0 ? setup_capacity : 16 << 20;
    o.executor_path = SPW_WORKER_EXE;
    o.plugins[o.nplugins++] = SPW_TEST_PLUGIN; /* wait_file */
    o.heartbeat_ms = 50; /* also what wakes uv_run(ONCE) while an executor starts */
    o.reconnect_max_ms = setup_reconnect_ms;
    if (setup_max_frame != 0)
        o.max_frame = setup_max_frame;
    char bound[64];
    assert_int_equal(wrk_new(&e->loop, &o, ready_cb, e, &e->w, bound, sizeof bound), 0);
    STEP_UNTIL(e, e->ready && e->conn != NULL);
    assert_int_equal(e->ready_status, 0);
    *state = e;
    return 0;
}

/* setup with a worker whose frames are at most 1 MiB. */
static int setup_small_frames(void **state)
{
    setup_max_frame = 1u << 20;
    int rc = setup(state);
    setup_max_frame = 0;
    return rc;
}

/* setup with a worker that reconnects (at once) when it loses the scheduler. */
static int setup_reconnect(void **state)
{
    setup_reconnect_ms = 1;
    int rc = setup(state);
    setup_reconnect_ms = 0;
    return rc;
}

/* setup with a store of 128 MiB: room for some 30k objects of one page. */
static int setup_big_store(void **state)
{
    setup_capacity = 128u << 20;
    int rc = setup(state);
    setup_capacity = 0;
    return rc;
}

static void flag_done(void *arg, int status)
{
    *(bool *)arg = true;
}

static void flag_void(void *arg)
{
    *(bool *)arg = true;
}

static int teardown(void **state)
{
    env *e = *state;
    wrk_close(e->w, flag_done, &e->closed);
    for (int i = 0; i < STEPS && !e->closed; i++)
        uv_run(&e->loop, UV_RUN_ONCE);
    assert_true(e->closed);
    proto_ctx_close(e->sched, flag_void, &e->sched_closed);
    for (int i = 0; i < STEPS && !e->sched_closed; i++)
        uv_run(&e->loop, UV_RUN_NOWAIT);
    assert_true(e->sched_closed);
    uv_run(&e->loop, UV_RUN_DEFAULT);
    assert_int_equal(uv_loop_close(&e->loop), 0);
    free(e);
    return 0;
}

/* TASK_RUN with one argument: an inline u64, or an object with no location. */
static void put_run_fields(proto_enc *en, uint64_t id, const char *fn, bool inline_arg,
                           uint64_t value);

static void task_run(env *e, uint64_t id, const char *fn, bool inline_arg, uint64_t value)
{
    proto_enc en;
    proto_enc_begin(&en, proto_conn_out(e->conn), PROTO_TASK_RUN, 0, 4);
    put_run_fields(&en, id, fn, inline_arg, value);
    assert_int_equal(proto_conn_send(e->conn, &en), 0);
}

/* The four fields of a TASK_RUN (or a TASK_RUNS record). */
static void put_run_fields(proto_enc *en, uint64_t id, const char *fn, bool inline_arg,
                           uint64_t value)
{
    proto_put_id(en, tid(id));
    proto_put_str(en, fn);
    proto_put_arr(en, 1);
    proto_put_arr(en, 7);
    if (inline_arg) {
        proto_put_u(en, PROTO_ARG_INLINE);
        proto_put_bin(en, &value, sizeof value);
        proto_put_nil(en);
        proto_put_u(en, 0);
        proto_put_u(en, 0);
        proto_put_u(en, 0);
    } else {
        proto_put_u(en, PROTO_ARG_OBJ);
        proto_put_nil(en);
        proto_put_id(en, tid(1000 + id));
        proto_put_u(en, 0);
        proto_put_u(en, 8);
        proto_put_u(en, 8);
    }
    proto_put_arr(en, 0); /* locations */
    proto_put_u(en, 0);
}

/* A TASK_RUNS whose second record is malformed (its function name an integer) and fourth not a
 * record: the good ones run, the bad one is answered as a failed task (SPW_EMALFORMED) and the
 * non-record with an ERROR. */
static void worker_batch_answers_a_bad_record_and_runs_the_rest(void **state)
{
    env *e = *state;
    proto_enc en;
    proto_enc_begin(&en, proto_conn_out(e->conn), PROTO_TASK_RUNS, 0, 1);
    proto_put_arr(&en, 4);
    proto_put_arr(&en, 4);
    put_run_fields(&en, 1, "inc", true, 41);
    proto_put_arr(&en, 4);
    proto_put_id(&en, tid(2));
    proto_put_u(&en, 17); /* not a name */
    proto_put_arr(&en, 0);
    proto_put_u(&en, 0);
    proto_put_arr(&en, 4);
    put_run_fields(&en, 3, "inc", true, 9);
    proto_put_u(&en, 5);
    assert_int_equal(proto_conn_send(e->conn, &en), 0);
    STEP_UNTIL(e, find(e, PROTO_TASK_DONE, 1) != NULL && find(e, PROTO_TASK_DONE, 2) != NULL &&
                      find(e, PROTO_TASK_DONE, 3) != NULL);
    uint64_t v;
    assert_int_equal(find(e, PROTO_TASK_DONE, 1)->status, 0);
    memcpy(&v, find(e, PROTO_TASK_DONE, 1)->inl, sizeof v);
    assert_int_equal(v, 42);
    assert_int_equal(find(e, PROTO_TASK_DONE, 2)->status, SPW_EMALFORMED);
    assert_int_equal(find(e, PROTO_TASK_DONE, 3)->status, 0);
    memcpy(&v, find(e, PROTO_TASK_DONE, 3)->inl, sizeof v);
    assert_int_equal(v, 10);
    uint32_t errors = 0;
    for (uint32_t i = 0; i < e->n; i++)
        errors += e->log[i].type == PROTO_ERROR;
    assert_int_equal(errors, 1);
    assert_int_equal(HASH_COUNT(e->w->tasks), 0);
}

/* Intake, the ready queue, an executor, no TASK_STARTED after TASK_DONE (a task that ends
 * within WRK_STARTED_DELAY_MS is never announced), the result inline, and nothing left in the
 * task table. */
static void worker_runs_a_task_and_reports(void **state)
{
    env *e = *state;
    task_run(e, 1, "inc", true, 41);
    STEP_UNTIL(e, find(e, PROTO_TASK_DONE, 1) != NULL);
    const rx *d = find(e, PROTO_TASK_DONE, 1);
    assert_int_equal(d->status, 0);
    assert_int_equal(d->size, 8);
    assert_false(d->inl_nil);
    uint64_t v;
    memcpy(&v, d->inl, sizeof v);
    assert_int_equal(v, 42);
    const rx *s = find(e, PROTO_TASK_STARTED, 1);
    assert_true(s == NULL || s < d);
    assert_int_equal(HASH_COUNT(e->w->tasks), 0);
    assert_int_equal(e->w->running, 0);
    assert_int_equal(e->w->nstarted_live, 0);
}

/* Creates the empty file path: the go signal for a wait_file task. */
static void touch(const char *path)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fclose(f);
}

/* TASK_RUN of the test plugin's wait_file(path, max_ms): the task runs until the test creates
 * `path`, so what the test looks for while it runs is awaited, not timed. */
static void task_run_wait(env *e, uint64_t id, const char *path)
{
    uint64_t max_ms = 600000; /* only bounds a test that never creates the file */
    proto_enc en;
    proto_enc_begin(&en, proto_conn_out(e->conn), PROTO_TASK_RUN, 0, 4);
    proto_put_id(&en, tid(id));
    proto_put_str(&en, "wait_file");
    proto_put_arr(&en, 2);
    for (int i = 0; i < 2; i++) {
        proto_put_arr(&en, 7);
        proto_put_u(&en, PROTO_ARG_INLINE);
        if (i == 0)
            proto_put_bin(&en, path, (uint32_t)strlen(path));
        else
            proto_put_bin(&en, &max_ms, sizeof max_ms);
        proto_put_nil(&en);
        proto_put_u(&en, 0);
        proto_put_u(&en, 0);
        proto_put_u(&en, 0);
        proto_put_arr(&en, 0); /* locations */
    }
    proto_put_u(&en, 0);
    assert_int_equal(proto_conn_send(e->conn, &en), 0);
}

/* A task still running after WRK_STARTED_DELAY_MS is announced while it runs, once, before its
 * TASK_DONE: the task waits for a file the test creates only after it has seen TASK_STARTED. */
static void worker_announces_a_running_task(void **state)
{
    env *e = *state;
    char dir[] = "/tmp/spw-test-worker-XXXXXX", path[64];
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/go", dir);
    task_run_wait(e, 3, path);
    STEP_UNTIL(e, find(e, PROTO_TASK_STARTED, 3) != NULL);
    assert_null(find(e, PROTO_TASK_DONE, 3));
    assert_int_equal(e->w->nstarted_live, 0);
    touch(path);
    STEP_UNTIL(e, find(e, PROTO_TASK_DONE, 3) != NULL);
    assert_int_equal(find(e, PROTO_TASK_DONE, 3)->status, 0);
    assert_true(find(e, PROTO_TASK_STARTED, 3) < find(e, PROTO_TASK_DONE, 3));
    assert_int_equal(unlink(path), 0);
    assert_int_equal(rmdir(dir), 0);
}

/* An input no worker holds fails the task with SPW_EOBJLOST without an executor; cancelling an
 * unknown task and deleting an unknown object change nothing. */
static void worker_input_nowhere_fails_the_task(void **state)
{
    env *e = *state;
    task_run(e, 2, "inc", false, 0);
    STEP_UNTIL(e, find(e, PROTO_TASK_DONE, 2) != NULL);
    assert_int_equal(find(e, PROTO_TASK_DONE, 2)->status, SPW_EOBJLOST);
    assert_null(find(e, PROTO_TASK_STARTED, 2));
    assert_int_equal(HASH_COUNT(e->w->fetches), 0);

    proto_enc en;
    proto_enc_begin(&en, proto_conn_out(e->conn), PROTO_TASK_CANCEL, 0, 1);
    proto_put_arr(&en, 1);
    proto_put_id(&en, tid(99));
    assert_int_equal(proto_conn_send(e->conn, &en), 0);
    proto_enc_begin(&en, proto_conn_out(e->conn), PROTO_OBJ_DELETE, 0, 1);
    proto_put_arr(&en, 1);
    proto_put_id(&en, tid(98));
    assert_int_equal(proto_conn_send(e->conn, &en), 0);
    task_run(e, 3, "inc", true, 1);
    STEP_UNTIL(e, find(e, PROTO_TASK_DONE, 3) != NULL);
    assert_int_equal(find(e, PROTO_TASK_DONE, 3)->status, 0);
}

/* A TCP port on 127.0.0.1 that takes connections (in its backlog) and never answers: a holder
 * across a cut link, as far as a fetch from it can tell. Returns the socket; *addr its address. */
static int silent_peer(char *addr, size_t addrlen)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(fd >= 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof sa;
    assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof sa), 0);
    assert_int_equal(listen(fd, 4), 0);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&sa, &len), 0);
    snprintf(addr, addrlen, "127.0.0.1:%u", (unsigned)ntohs(sa.sin_port));
    return fd;
}

/* TASK_RUN of `fn` on object obj (size bytes) that the worker at addr holds. */
static void task_run_from(env *e, uint64_t id, const char *fn, uint64_t obj, uint64_t size,
                          const char *addr)
{
    proto_enc en;
    proto_enc_begin(&en, proto_conn_out(e->conn), PROTO_TASK_RUN, 0, 4);
    proto_put_id(&en, tid(id));
    proto_put_str(&en, fn);
    proto_put_arr(&en, 1);
    proto_put_arr(&en, 7);
    proto_put_u(&en, PROTO_ARG_OBJ);
    proto_put_nil(&en);
    proto_put_id(&en, tid(obj));
    proto_put_u(&en, 0);
    proto_put_u(&en, size);
    proto_put_u(&en, size);
    proto_put_arr(&en, 1); /* locations */
    proto_put_arr(&en, 4);
    proto_put_u(&en, 99);
    proto_put_str(&en, addr);
    proto_put_str(&en, "other-host");
    proto_put_str(&en, "");
    proto_put_u(&en, 0);
    assert_int_equal(proto_conn_send(e->conn, &en), 0);
}

/* The scheduler re-makes an object here (lineage: its only holder was dropped) while a task here
 * still fetches it from that holder, which will never answer. The task making it runs (before,
 * its output could not be allocated: the fetch's half-written copy had the id), and the task
 * that waited for the fetch is answered SPW_EOBJLOST, which the scheduler turns into a retry
 * once the new copy is there. */
static void worker_remaking_an_object_it_fetches_drops_the_fetch(void **state)
{
    env *e = *state;
    enum { SIZE = 128u << 10 }; /* above the inline limit: stored */
    char addr[64];
    int fd = silent_peer(addr, sizeof addr);
    task_run_from(e, 2, "len", 50, SIZE, addr);
    wfetch *f = NULL;
    spw_id x = tid(50);
    for (int i = 0; i < STEPS && (f == NULL || f->obj == NULL); i++) {
        uv_run(&e->loop, UV_RUN_ONCE);
        HASH_FIND(hh, e->w->fetches, &x, sizeof x, f);
    }
    assert_true(f != NULL && f->obj != NULL); /* its copy is being written */
    task_run(e, 50, "fill", true, SIZE);
    STEP_UNTIL(e, find(e, PROTO_TASK_DONE, 50) != NULL && find(e, PROTO_TASK_DONE, 2) != NULL);
    assert_int_equal(find(e, PROTO_TASK_DONE, 50)->status, 0);
    assert_int_equal(find(e, PROTO_TASK_DONE, 50)->size, SIZE);
    assert_int_equal(find(e, PROTO_TASK_DONE, 2)->status, SPW_EOBJLOST);
    assert_int_equal(HASH_COUNT(e->w->fetches), 0);
    ost_obj *o = ost_obj_find(e->w->store, x);
    assert_true(o != NULL && ost_obj_state(o) == OST_SEALED);
    close(fd);
}

/* REPLICATE (a broadcast's copy) of object obj, size bytes, held by the worker at addr. */
static void replicate(env *e, uint64_t req, uint64_t obj, uint64_t size, const char *addr)
{
    proto_loc_rec loc = {.worker = 99, .addr = addr, .host_id = "other-host", .local = ""};
    assert_int_equal(
        proto_send_replicate(
            e->conn, req,
            &(proto_replicate_msg){.id = tid(obj), .size = size, .locs = {.n = 1, .v = &loc}}),
        0);
}

static const rx *error_of(const env *e, uint64_t req)
{
    for (uint32_t i = 0; i < e->n; i++)
        if (e->log[i].type == PROTO_ERROR && e->log[i].req == req)
            return &e->log[i];
    return NULL;
}

/* The worker loses its scheduler while a broadcast's copy waits for room: that copy is given
 * up (dropped once its memory comes). The next scheduler broadcasts the same object again: its
 * REPLICATE is answered SPW_EOBJLOST at once, as a task's fetch of it is. It used to join the
 * copy being dropped, whose end answered nobody: the broadcast waited for ever. */
static void worker_answers_a_replicate_of_a_copy_being_dropped(void **state)
{
    env *e = *state;
    char addr[64];
    int fd = silent_peer(addr, sizeof addr);
    ost_store *s = e->w->store;
    ost_obj *marker, *held;
    /* 12 of the store's 16 MiB held by an object being written: the copy waits for room. */
    assert_int_equal(ost_obj_create(s, tid(90), 12u << 20, &held), 0);
    replicate(e, 1, 50, 8u << 20, addr);
    spw_id x = tid(50);
    wfetch *f = NULL;
    for (int i = 0; i < STEPS && f == NULL; i++) {
        uv_run(&e->loop, UV_RUN_ONCE);
        HASH_FIND(hh, e->w->fetches, &x, sizeof x, f);
    }
    assert_true(f != NULL && f->creating);
    proto_conn_close(e->conn, 0);
    STEP_UNTIL(e, e->conn == NULL);
    STEP_UNTIL(e, e->conn != NULL && e->w->sched != NULL); /* back, under a new generation */
    HASH_FIND(hh, e->w->fetches, &x, sizeof x, f);
    assert_true(f != NULL && f->stale);
    /* Sealed here: its REPLICATE is answered (OBJ_ADDED) at once, behind what came before. */
    assert_int_equal(ost_obj_create(s, tid(91), 4096, &marker), 0);
    assert_int_equal(ost_obj_seal(s, marker), 0);
    size_t asked = f->repl.len; /* the first REPLICATE's request id */
    replicate(e, 2, 50, 8u << 20, addr);
    /* Taken in: joined to the copy given up, or answered. */
    STEP_UNTIL(e, f->repl.len > asked || error_of(e, 2) != NULL);
    /* Room comes: the copy given up is created and dropped. */
    ost_obj_abort(s, held);
    STEP_UNTIL(e, HASH_COUNT(e->w->fetches) == 0);
    replicate(e, 3, 91, 4096, addr);
    STEP_UNTIL(e, find(e, PROTO_OBJ_ADDED, 91) != NULL);
    const rx *r = error_of(e, 2);
    if (r == NULL)
        fail_msg("the REPLICATE sent while the earlier copy was being dropped got no answer");
    assert_int_equal(r->status, SPW_EOBJLOST);
    assert_int_equal(ost_obj_delete(s, tid(91)), 0);
    close(fd);
}

/* TASK_RUN of a task sent ahead (PROTO_TASK_AHEAD): fn of the output of task `producer`, which
 * the scheduler sent here earlier (no size, no location: it is not made yet). */
static void task_run_ahead(env *e, uint64_t id, const char *fn, uint64_t producer)
{
    proto_enc en;
    proto_enc_begin(&en, proto_conn_out(e->conn), PROTO_TASK_RUN, 0, 4);
    proto_put_id(&en, tid(id));
    proto_put_str(&en, fn);
    proto_put_arr(&en, 1);
    proto_put_arr(&en, 7);
    proto_put_u(&en, PROTO_ARG_OBJ);
    proto_put_nil(&en);
    proto_put_id(&en, tid(producer));
    proto_put_u(&en, 0);
    proto_put_u(&en, 0);
    proto_put_u(&en, 0);
    proto_put_arr(&en, 0); /* locations */
    proto_put_u(&en, PROTO_TASK_AHEAD);
    assert_int_equal(proto_conn_send(e->conn, &en), 0);
}

static uint64_t done_u64(const env *e, uint64_t id)
{
    const rx *d = find(e, PROTO_TASK_DONE, id);
    assert_non_null(d);
    assert_int_equal(d->status, 0);
    assert_int_equal(d->inl_len, 8);
    uint64_t v;
    memcpy(&v, d->inl, sizeof v);
    return v;
}

/* A chain sent ahead: each task waits for its producer here and runs on its result, an inline
 * value (copied for it: the producer's TASK_DONE still carries it) or a stored object; every
 * task is answered once, in chain order, and nothing is left waiting. */
static void worker_runs_a_chain_sent_ahead(void **state)
{
    env *e = *state;
    task_run(e, 1, "inc", true, 41);
    task_run_ahead(e, 2, "inc", 1);
    task_run_ahead(e, 3, "inc", 2);
    STEP_UNTIL(e, find(e, PROTO_TASK_DONE, 3) != NULL);
    assert_int_equal(done_u64(e, 1), 42);
    assert_int_equal(done_u64(e, 2), 43);
    assert_int_equal(done_u64(e, 3), 44);
    assert_true(find(e, PROTO_TASK_DONE, 1) < find(e, PROTO_TASK_DONE, 2));
    assert_true(find(e, PROTO_TASK_DONE, 2) < find(e, PROTO_TASK_DONE, 3));

    /* Two dependents of one producer both get its value. */
    task_run(e, 10, "inc", true, 9);
    task_run_ahead(e, 11, "inc", 10);
    task_run_ahead(e, 12, "inc", 10);
    STEP_UNTIL(e, find(e, PROTO_TASK_DONE, 11) != NULL && find(e, PROTO_TASK_DONE, 12) != NULL);
    assert_int_equal(done_u64(e, 11), 11);
    assert_int_equal(done_u64(e, 12), 11);

    /* A stored result (over the inline limit): pinned in the store for its consumer, with the
     * size the consumer's TASK_RUN could not tell. */
    uint64_t n = 100000;
    task_run(e, 4, "fill", true, n);
    task_run_ahead(e, 5, "len", 4);
    STEP_UNTIL(e, find(e, PROTO_TASK_DONE, 5) != NULL);
    assert_true(find(e, PROTO_TASK_DONE, 4)->inl_nil);
    assert_int_equal(find(e, PROTO_TASK_DONE, 4)->size, n);
    assert_int_equal(done_u64(e, 5), n);
    assert_null(e->w->ahead);
    assert_int_equal(HASH_COUNT(e->w->tasks), 0);
}

/* A producer that fails takes what waits for it here along: each is answered SPW_EAHEAD after
 * the producer's own TASK_DONE, without running; so is a task sent ahead whose producer is
 * neither here nor in the store. */
static void worker_drops_what_waits_for_a_failed_producer(void **state)
{
    env *e = *state;
    proto_enc en;
    proto_enc_begin(&en, proto_conn_out(e->conn), PROTO_TASK_RUN, 0, 4);
    proto_put_id(&en, tid(1));
    proto_put_str(&en, "fail");
    proto_put_arr(&en, 0);
    proto_put_u(&en, 0);
    assert_int_equal(proto_conn_send(e->conn, &en), 0);
    task_run_ahead(e, 2, "inc", 1);
    task_run_ahead(e, 3, "inc", 2);
    STEP_UNTIL(e, find(e, PROTO_TASK_DONE, 3) != NULL);
    assert_int_equal(find(e, PROTO_TASK_DONE, 1)->status, SPW_ETASKFAILED);
    assert_int_equal(find(e, PROTO_TASK_DONE, 2)->status, SPW_EAHEAD);
    assert_int_equal(find(e, PROTO_TASK_DONE, 3)->status, SPW_EAHEAD);
    assert_true(find(e, PROTO_TASK_DONE, 1) < find(e, PROTO_TASK_DONE, 2));
    assert_true(find(e, PROTO_TASK_DONE, 2) < find(e, PROTO_TASK_DONE, 3));
    assert_int_equal(e->w->tasks_done, 0);

    task_run_ahead(e, 4, "inc", 77); /* never sent here */
    STEP_UNTIL(e, find(e, PROTO_TASK_DONE, 4) != NULL);
    assert_int_equal(find(e, PROTO_TASK_DONE, 4)->status, SPW_EAHEAD);
    assert_null(e->w->ahead);
    assert_int_equal(HASH_COUNT(e->w->tasks), 0);
}

/* TASK_CANCEL of a task waiting for its producer here answers it SPW_ECANCELED at once, while
 * the producer runs on and finishes. */
static void worker_cancels_a_task_waiting_ahead(void **state)
{
    env *e = *state;
    char dir[] = "/tmp/spw-test-worker-XXXXXX", path[64];
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/go", dir);
    task_run_wait(e, 1, path);
    task_run_ahead(e, 2, "len", 1);
    STEP_UNTIL(e, e->w->ahead != NULL);
    proto_enc en;
    proto_enc_begin(&en, proto_conn_out(e->conn), PROTO_TASK_CANCEL, 0, 1);
    proto_put_arr(&en, 1);
    proto_put_id(&en, tid(2));
    assert_int_equal(proto_conn_send(e->conn, &en), 0);
    STEP_UNTIL(e, find(e, PROTO_TASK_DONE, 2) != NULL);
    assert_int_equal(find(e, PROTO_TASK_DONE, 2)->status, SPW_ECANCELED);
    assert_null(find(e, PROTO_TASK_DONE, 1));
    assert_null(e->w->ahead);
    touch(path);
    STEP_UNTIL(e, find(e, PROTO_TASK_DONE, 1) != NULL);
    assert_int_equal(find(e, PROTO_TASK_DONE, 1)->status, 0);
    assert_int_equal(HASH_COUNT(e->w->tasks), 0);
    assert_int_equal(unlink(path), 0);
    assert_int_equal(rmdir(dir), 0);
}

/* A burst of tiny tasks in one TASK_RUNS goes to the executor in one EXECS frame (tiny tasks
 * queue up to WRK_EXEC_DEPTH_MAX deep), which the executor answers in one EXEC_DONES write, and
 * the worker in one TASK_DONES frame: one wake-up of each for the whole burst (at most two, if
 * a read splits the answer), where 64 at a time took three rounds for 150 tasks. */
static void worker_runs_a_burst_in_one_executor_batch(void **state)
{
    env *e = *state;
    task_run(e, 1, "noop", true, 0); /* its run time makes the worker queue tiny tasks deep */
    STEP_UNTIL(e, find(e, PROTO_TASK_DONE, 1) != NULL);
    enum { BURST = 150 };
    proto_enc en;
    proto_enc_begin(&en, proto_conn_out(e->conn), PROTO_TASK_RUNS, 0, 1);
    proto_put_arr(&en, BURST);
    for (uint64_t i = 0; i < BURST; i++) {
        proto_put_arr(&en, 4);
        put_run_fields(&en, 100 + i, "noop", true, i);
    }
    e->w->ewma_us = 1.0; /* tiny, whatever the machine's load made noop's run time */
    assert_int_equal(proto_conn_send(e->conn, &en), 0);
    uint32_t frames0 = e->dones_frames;
    STEP_UNTIL(e, find(e, PROTO_TASK_DONE, 100 + BURST - 1) != NULL);
    for (uint64_t i = 0; i < BURST; i++)
        assert_int_equal(find(e, PROTO_TASK_DONE, 100 + i)->status, 0);
    assert_true(e->dones_frames - frames0 <= 2);
    assert_int_equal(HASH_COUNT(e->w->tasks), 0);
}

static const wtask *task_of(const env *e, uint64_t id)
{
    spw_id k = tid(id);
    const wtask *t;
    HASH_FIND(hh, e->w->tasks, &k, sizeof k, t);
    return t;
}

/* A task sent ahead whose producer is already on an executor goes to that executor at once,
 * behind it, and runs there on the output the executor kept (PROTO_ARG_PREV): no round trip
 * through the worker. If that executor dies first, the worker takes the task in again at once
 * (a new executor would not have the output), and with its producer failed here answers it
 * SPW_EAHEAD, after the producer. */
static void worker_queues_a_chain_behind_its_producer(void **state)
{
    env *e = *state;
    task_run(e, 9, "inc", true, 1); /* a short task first: tasks then queue on the executor */
    STEP_UNTIL(e, find(e, PROTO_TASK_DONE, 9) != NULL);
    char dir[] = "/tmp/spw-test-worker-XXXXXX", path[64];
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/go", dir);
    e->w->ewma_us = 1.0; /* short, whatever the load: the worker queues behind a producer */
    task_run_wait(e, 1, path);
    task_run_ahead(e, 2, "len", 1);
    STEP_UNTIL(e, task_of(e, 2) != NULL && task_of(e, 2)->state == WT_SENT);
    assert_int_equal(task_of(e, 2)->prev, 1);
    assert_ptr_equal(task_of(e, 2)->ex, task_of(e, 1)->ex);
    assert_null(e->w->ahead);
    touch(path);
    STEP_UNTIL(e, find(e, PROTO_TASK_DONE, 2) != NULL);
    assert_int_equal(find(e, PROTO_TASK_DONE, 1)->status, 0);
    assert_int_equal(done_u64(e, 2), 0); /* len of wait_file's empty result */
    assert_int_equal(unlink(path), 0);

    e->w->ewma_us = 1.0; /* wait_file's polls above made it long */
    task_run_wait(e, 3, path);
    task_run_ahead(e, 4, "len", 3);
    STEP_UNTIL(e, task_of(e, 4) != NULL && task_of(e, 4)->state == WT_SENT);
    assert_int_equal(task_of(e, 4)->prev, 1);
    signal(SIGPIPE, SIG_IGN); /* as the daemon: the worker may write to the dead executor */
    assert_int_equal(kill(task_of(e, 3)->ex->pid, SIGKILL), 0);
    STEP_UNTIL(e, find(e, PROTO_TASK_DONE, 4) != NULL);
    assert_int_equal(find(e, PROTO_TASK_DONE, 3)->status, SPW_EEXECCRASH);
    assert_int_equal(find(e, PROTO_TASK_DONE, 4)->status, SPW_EAHEAD);
    assert_true(find(e, PROTO_TASK_DONE, 3) < find(e, PROTO_TASK_DONE, 4));
    assert_null(e->w->ahead);
    assert_int_equal(HASH_COUNT(e->w->tasks), 0);
    assert_int_equal(rmdir(dir), 0);
}

static uint32_t errors(const env *e)
{
    uint32_t n = 0;
    for (uint32_t i = 0; i < e->n; i++)
        n += e->log[i].type == PROTO_ERROR;
    return n;
}

/* wait_file runs; the fake scheduler drops the worker and takes it back `rounds` times, each
 * time sending the task again; then the file is made: the last scheduler's run is answered. */
static void task_sent_again_after_reconnects(env *e, int rounds)
{
    char dir[] = "/tmp/spw-test-worker-XXXXXX", path[64];
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/go", dir);
    task_run_wait(e, 1, path);
    STEP_UNTIL(e, task_of(e, 1) != NULL && task_of(e, 1)->state == WT_SENT);
    for (int round = 0; round < rounds; round++) {
        proto_conn_close(e->conn, 0);
        STEP_UNTIL(e, e->conn == NULL);
        STEP_UNTIL(e, e->conn != NULL && e->w->sched != NULL); /* back, under a new generation */
        task_run_wait(e, 1, path);
        STEP_UNTIL(e, task_of(e, 1)->heir != NULL || errors(e) > 0);
    }
    touch(path);
    STEP_UNTIL(e, find(e, PROTO_TASK_DONE, 1) != NULL || errors(e) > 0);
    assert_int_equal(errors(e), 0);
    assert_int_equal(find(e, PROTO_TASK_DONE, 1)->status, 0);
    STEP_UNTIL(e, HASH_COUNT(e->w->tasks) == 0);
    assert_int_equal(unlink(path), 0);
    assert_int_equal(rmdir(dir), 0);
}

/* The worker loses its scheduler while a task runs, and the scheduler, once the worker is back,
 * sends it that task again (it retries what a lost worker had, and this worker may well be the
 * one it picks). The run the earlier scheduler asked for still holds the task's id: the new one
 * waits for it to leave, then runs and is answered. It used to be refused as a duplicate (an
 * ERROR naming no task), so the scheduler waited for its answer for ever. */
static void worker_runs_a_task_sent_again_after_a_reconnect(void **state)
{
    task_sent_again_after_reconnects(*state, 1);
}

/* The same across two reconnects while the first run still runs: the task sent by the second
 * scheduler (lost too) waits as the first run's heir; the third scheduler's replaces it, rather
 * than being refused as a duplicate (an ERROR naming no task: its answer never came). */
static void worker_runs_a_task_sent_again_after_two_reconnects(void **state)
{
    task_sent_again_after_reconnects(*state, 2);
}

static uint32_t dones_of(const env *e, uint64_t id)
{
    uint32_t n = 0;
    for (uint32_t i = 0; i < e->n; i++)
        n += e->log[i].type == PROTO_TASK_DONE && spw_id_eq(e->log[i].id, tid(id));
    return n;
}

/* The small results a worker keeps for dependents sent after their producer ended belong to
 * the scheduler that sent those producers. Once the worker lost it, the next one may send a
 * task of the same id again (a retry): a dependent sent ahead after that run failed is answered
 * SPW_EAHEAD. It used to run on the result the earlier run left in the kept results. */
static void worker_forgets_kept_results_of_a_lost_scheduler(void **state)
{
    env *e = *state;
    task_run(e, 1, "inc", true, 41);
    STEP_UNTIL(e, dones_of(e, 1) == 1);
    proto_conn_close(e->conn, 0);
    STEP_UNTIL(e, e->conn == NULL);
    STEP_UNTIL(e, e->conn != NULL && e->w->sched != NULL);
    task_run(e, 1, "fail", true, 0); /* its rerun fails */
    STEP_UNTIL(e, dones_of(e, 1) == 2);
    task_run_ahead(e, 2, "inc", 1);
    STEP_UNTIL(e, find(e, PROTO_TASK_DONE, 2) != NULL);
    assert_int_equal(find(e, PROTO_TASK_DONE, 2)->status, SPW_EAHEAD);
    assert_int_equal(HASH_COUNT(e->w->tasks), 0);
}

/* An executor keeps its last outputs for the tasks chained behind them only up to
 * EXEC_KEPT_BYTES (the newest always): a task chained behind a producer whose 60,000-byte output
 * 20 newer ones pushed out is answered SPW_EAHEAD by the executor, and then by the worker, which
 * does not have that value either (the scheduler dispatches it again, with the value). */
static void executor_keeps_outputs_up_to_a_byte_budget(void **state)
{
    env *e = *state;
    task_run(e, 9, "inc", true, 1);
    STEP_UNTIL(e, find(e, PROTO_TASK_DONE, 9) != NULL);
    char dir[] = "/tmp/spw-test-worker-XXXXXX", path[64];
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/go", dir);
    e->w->ewma_us = 1.0; /* short, whatever the load: the worker queues behind a producer */
    task_run_wait(e, 1, path);
    task_run(e, 2, "fill", true, 60000);
    for (uint64_t i = 0; i < 20; i++)
        task_run(e, 10 + i, "fill", true, 60000);
    task_run_ahead(e, 3, "len", 2);
    STEP_UNTIL(e, task_of(e, 3) != NULL && task_of(e, 3)->state == WT_SENT);
    assert_int_equal(task_of(e, 3)->prev, 1);
    assert_ptr_equal(task_of(e, 3)->ex, task_of(e, 2)->ex);
    touch(path);
    STEP_UNTIL(e, find(e, PROTO_TASK_DONE, 3) != NULL);
    assert_int_equal(find(e, PROTO_TASK_DONE, 2)->status, 0);
    assert_int_equal(find(e, PROTO_TASK_DONE, 3)->status, SPW_EAHEAD);
    for (uint64_t i = 0; i < 20; i++)
        assert_int_equal(find(e, PROTO_TASK_DONE, 10 + i)->status, 0);
    assert_null(e->w->ahead);
    assert_int_equal(HASH_COUNT(e->w->tasks), 0);
    assert_int_equal(unlink(path), 0);
    assert_int_equal(rmdir(dir), 0);
}

/* TASK_RUN of the test plugin's reverse(data), data n bytes inline: its output of n bytes, past
 * the inline limit, goes to the store through an EXEC_ALLOC. */
static void task_run_reverse(env *e, uint64_t id, size_t n)
{
    uint8_t *data = malloc(n);
    assert_non_null(data);
    memset(data, 7, n);
    proto_enc en;
    proto_enc_begin(&en, proto_conn_out(e->conn), PROTO_TASK_RUN, 0, 4);
    proto_put_id(&en, tid(id));
    proto_put_str(&en, "reverse");
    proto_put_arr(&en, 1);
    proto_put_arr(&en, 7);
    proto_put_u(&en, PROTO_ARG_INLINE);
    proto_put_bin(&en, data, (uint32_t)n);
    proto_put_nil(&en);
    proto_put_u(&en, 0);
    proto_put_u(&en, 0);
    proto_put_u(&en, 0);
    proto_put_arr(&en, 0); /* locations */
    proto_put_u(&en, 0);
    assert_int_equal(proto_conn_send(e->conn, &en), 0);
    free(data);
}

/* Allocations waiting for room in the worker's store. */
static uint32_t store_waiters(const wrk *w)
{
    uint32_t n = 0;
    for (const ost_waiter *x = w->store->waiters; x != NULL; x = x->next)
        n++;
    return n;
}

/* Whether process pid sleeps (state S in /proc/PID/stat): an executor that asked for room does
 * so only in its wait for the answer, which a stop signal ends (also one sent just before the
 * wait: executor_stops_promptly_after_a_signal_in_a_write). */
static bool proc_sleeping(int pid)
{
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%d/stat", pid);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return false;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *p = strrchr(buf, ')');
    return p != NULL && p[1] == ' ' && p[2] == 'S';
}

/* An executor told to stop (SIGTERM) while it waits for room for its task's output: the task
 * goes to its successor, whose own request gets the room. The stopped executor's request, still
 * waiting, must not be answered on the successor's socket when room comes: it asked under
 * another request id, so the successor's request would then fail (SPW_EEXIST, the output made
 * already) and with it a task that was never to fail. */
static void worker_requeued_task_gets_no_stale_allocation(void **state)
{
    env *e = *state;
    const size_t n = 256u << 10;
    task_run_reverse(e, 1, n); /* the executor's first allocation */
    STEP_UNTIL(e, find(e, PROTO_TASK_DONE, 1) != NULL);
    assert_int_equal(find(e, PROTO_TASK_DONE, 1)->status, 0);
    ost_store *s = e->w->store;
    ost_obj *out1 = ost_obj_find(s, tid(1));
    assert_non_null(out1);
    assert_int_equal(ost_obj_pin(s, out1), 0); /* neither spilled nor evicted */
    ost_stats st;
    ost_stats_get(s, &st);
    ost_obj *fill; /* all but 64 KiB of the store: the next output waits for room */
    assert_int_equal(ost_obj_create(s, tid(900), st.capacity - st.used - (64u << 10), &fill), 0);
    task_run_reverse(e, 2, n);
    wrk_exec *ex = &e->w->execs[0];
    int pid = ex->pid;
    STEP_UNTIL(e, store_waiters(e->w) == 1 && proc_sleeping(pid));
    assert_int_equal(kill(pid, SIGTERM), 0);
    STEP_UNTIL(e, ex->pid != pid && ex->head != NULL && store_waiters(e->w) == 2);
    ost_obj_abort(s, fill); /* room for both requests */
    STEP_UNTIL(e, find(e, PROTO_TASK_DONE, 2) != NULL);
    assert_int_equal(find(e, PROTO_TASK_DONE, 2)->status, 0);
    assert_int_equal(store_waiters(e->w), 0);
    assert_int_equal(ost_obj_unpin(s, out1), 0);
}

/* The worker cannot allocate a task's record (out of memory at intake): the task is answered
 * failed with SPW_ENOMEM, naming it, and the worker goes on. It used to answer with an ERROR
 * naming no task, which the scheduler only logs: the task stayed assigned to this worker and its
 * client waited for ever. */
static void worker_answers_a_task_it_cannot_take_in(void **state)
{
    env *e = *state;
    /* A record past the slab's size comes from the heap. The first such task also grows the
     * connections' buffers to its frame's size, so that for the second the next allocation that
     * may fail is that record. */
    task_run_reverse(e, 1, 4096);
    STEP_UNTIL(e, find(e, PROTO_TASK_DONE, 1) != NULL);
    assert_int_equal(find(e, PROTO_TASK_DONE, 1)->status, 0);
    task_run_reverse(e, 2, 4096); /* encoded: the fake scheduler allocates nothing more for it */
    spw_heap_fail_after(1);
    STEP_UNTIL(e, find(e, PROTO_TASK_DONE, 2) != NULL || errors(e) > 0 || e->conn == NULL);
    spw_heap_fail_after(0);
    assert_non_null(e->conn);
    assert_int_equal(errors(e), 0);
    assert_int_equal(find(e, PROTO_TASK_DONE, 2)->status, SPW_ENOMEM);
    STEP_UNTIL(e, HASH_COUNT(e->w->tasks) == 0);
    task_run(e, 3, "inc", true, 1);
    STEP_UNTIL(e, find(e, PROTO_TASK_DONE, 3) != NULL);
    assert_int_equal(find(e, PROTO_TASK_DONE, 3)->status, 0);
}

/* A TASK_RUN whose argument names an object here as len bytes at off of an object of objsize
 * bytes, whatever its true size. */
static void task_run_range(env *e, uint64_t id, uint64_t obj, uint64_t off, uint64_t len,
                           uint64_t objsize)
{
    proto_enc en;
    proto_enc_begin(&en, proto_conn_out(e->conn), PROTO_TASK_RUN, 0, 4);
    proto_put_id(&en, tid(id));
    proto_put_str(&en, "reverse");
    proto_put_arr(&en, 1);
    proto_put_arr(&en, 7);
    proto_put_u(&en, PROTO_ARG_VIEW);
    proto_put_nil(&en);
    proto_put_id(&en, tid(obj));
    proto_put_u(&en, off);
    proto_put_u(&en, len);
    proto_put_u(&en, objsize);
    proto_put_arr(&en, 0); /* locations */
    proto_put_u(&en, 0);
    assert_int_equal(proto_conn_send(e->conn, &en), 0);
}

/* An argument's range past the end of the object it names here (a scheduler that has the size
 * wrong) fails the task clearly: the executor must not read the bytes that follow the object
 * in the arena (other objects') as the task's input. A range inside it runs. */
static void worker_argument_past_its_object_fails_the_task(void **state)
{
    env *e = *state;
    ost_store *s = e->w->store;
    ost_obj *o;
    assert_int_equal(ost_obj_create(s, tid(500), 8, &o), 0);
    memcpy(ost_obj_data(o), "abcdefgh", 8);
    assert_int_equal(ost_obj_seal(s, o), 0);
    task_run_range(e, 1, 500, 0, 4096, 4096);
    STEP_UNTIL(e, find(e, PROTO_TASK_DONE, 1) != NULL);
    assert_int_equal(find(e, PROTO_TASK_DONE, 1)->status, SPW_EINVAL);
    task_run_range(e, 2, 500, 2, 4, 8);
    STEP_UNTIL(e, find(e, PROTO_TASK_DONE, 2) != NULL);
    const rx *r = find(e, PROTO_TASK_DONE, 2);
    assert_int_equal(r->status, 0);
    assert_int_equal(r->inl_len, 4);
    assert_memory_equal(r->inl, "fedc", 4);
    assert_int_equal(ost_obj_pins(o), 0);
    assert_int_equal(HASH_COUNT(e->w->tasks), 0);
}

/* How many of the n objects tid(first).. are pinned. */
static uint32_t objs_pinned(ost_store *s, uint64_t first, uint32_t n)
{
    uint32_t pinned = 0;
    for (uint32_t k = 0; k < n; k++) {
        const ost_obj *o = ost_obj_find(s, tid(first + k));
        pinned += o != NULL && ost_obj_pins(o) > 0;
    }
    return pinned;
}

/* Three tasks each read an object of 4 MiB here and make as much, in a 16 MiB store: a task is
 * given its input only once it is admitted, and two of them (inputs and expected outputs) do not
 * fit under the store's capacity less its margin together, so one input at a time is pinned.
 * A worker that pinned every task's inputs at intake held all three while the first ran; in a
 * fuller store the running task's output then waited for room they held. */
static void worker_pins_inputs_only_of_tasks_it_admitted(void **state)
{
    env *e = *state;
    ost_store *s = e->w->store;
    const uint64_t n = 4u << 20;
    for (uint64_t k = 0; k < 3; k++) {
        ost_obj *o;
        assert_int_equal(ost_obj_create(s, tid(600 + k), n, &o), 0);
        memset(ost_obj_data(o), (int)k, n);
        assert_int_equal(ost_obj_seal(s, o), 0);
    }
    for (uint64_t k = 0; k < 3; k++)
        task_run_range(e, 1 + k, 600 + k, 0, n, n);
    uint32_t most = 0;
    for (uint64_t k = 0; k < 3; k++) {
        for (int step = 0; step < STEPS && find(e, PROTO_TASK_DONE, 1 + k) == NULL; step++) {
            uv_run(&e->loop, UV_RUN_ONCE);
            uint32_t p = objs_pinned(s, 600, 3);
            most = p > most ? p : most;
        }
        const rx *r = find(e, PROTO_TASK_DONE, 1 + k);
        assert_non_null(r);
        assert_int_equal(r->status, 0);
        /* Its input and output go, so the next output has room (this store does not spill). */
        assert_int_equal(ost_obj_delete(s, tid(1 + k)), 0);
        assert_int_equal(ost_obj_delete(s, tid(600 + k)), 0);
    }
    assert_int_equal(most, 1);
    STEP_UNTIL(e, HASH_COUNT(e->w->tasks) == 0);
    assert_int_equal(e->w->adm_reserved, 0);
    assert_int_equal(e->w->adm_tasks, 0);
    assert_null(e->w->adm_head);
}

/* The store's object list for spillway-ctl memory goes in frames of at most 4096 records (the
 * scheduler decodes a frame whole in one loop turn), all but the last saying more = 1, the last
 * with the store's figures; every object is in one of them. Before, the list went in one frame
 * whatever its size (and one past the scheduler's --max-frame not at all). */
static void worker_object_list_comes_in_bounded_frames(void **state)
{
    env *e = *state;
    ost_store *s = e->w->store;
    enum { N = 3 * 4096 + 5 };
    for (uint64_t i = 0; i < N; i++) {
        ost_obj *o;
        assert_int_equal(ost_obj_create(s, tid(1000 + i), 8, &o), 0);
        assert_int_equal(ost_obj_seal(s, o), 0);
    }
    assert_int_equal(proto_send_obj_list_req(e->conn, 77, &(proto_obj_list_req_msg){.flags = 0}),
                     0);
    STEP_UNTIL(e, e->olist.last_frames > 0);
    assert_int_equal(e->olist.recs, N);
    assert_int_equal(e->olist.frames, 4);
    assert_int_equal(e->olist.most, 4096);
    assert_int_equal(e->olist.last_frames, 1);
    assert_false(e->olist.stats_before_last);
    assert_int_equal(e->olist.last_stats, PROTO_STAT_COUNT);
}

/* Hands ex's worker an EXEC_DONE as if ex had sent it: task id ended with status, text err. */
static void fake_exec_done(wrk_exec *ex, spw_id id, int64_t status, const char *err)
{
    proto_msg m;
    memset(&m, 0, sizeof m);
    m.type = PROTO_EXEC_DONE;
    m.nf = 6;
    m.f[F_DONE_ID].id = id;
    m.f[F_DONE_STATUS].i = status;
    m.f[F_DONE_INLINE].nil = 1;
    m.f[F_DONE_ERR].bin.ptr = (const uint8_t *)err;
    m.f[F_DONE_ERR].bin.len = (uint32_t)strlen(err);
    wrk__exec_msg(ex, &m);
}

/* A status from an executor that is no error code, a positive one or one past an int (whose
 * low 32 bits are 0), fails the task with SPW_EPROTO. The first went on to the scheduler as it
 * was, the second was cut to an int and read as success: a task reported done with an empty
 * output it never made. (Handed to the worker while the real executor runs the task, as in
 * worker_takes_an_unnamed_failure_for_its_head.) */
static void worker_fails_a_task_whose_status_is_no_code(void **state)
{
    env *e = *state;
    char dir[] = "/tmp/spw-test-worker-XXXXXX", path[64];
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/go", dir);
    static const int64_t statuses[] = {5, INT64_C(1) << 32};
    for (uint64_t k = 0; k < 2; k++) {
        task_run_wait(e, k + 1, path);
        STEP_UNTIL(e, task_of(e, k + 1) != NULL && task_of(e, k + 1)->state == WT_SENT &&
                          task_of(e, k + 1)->ex->head == task_of(e, k + 1));
        wrk_exec *ex = task_of(e, k + 1)->ex;
        int pid = ex->pid;
        fake_exec_done(ex, tid(k + 1), statuses[k], "");
        STEP_UNTIL(e, find(e, PROTO_TASK_DONE, k + 1) != NULL);
        assert_int_equal(find(e, PROTO_TASK_DONE, k + 1)->status, SPW_EPROTO);
        touch(path); /* the real answer now restarts it */
        STEP_UNTIL(e, ex->pid != pid && ex->conn != NULL);
        assert_int_equal(unlink(path), 0);
    }
    assert_int_equal(HASH_COUNT(e->w->tasks), 0);
    assert_int_equal(rmdir(dir), 0);
}

/* An executor answers an EXECS record it could not read a task id from with a failure under
 * the nil id (executor_answers_a_record_naming_no_task), in order: the worker fails the task at
 * the head of that executor's queue with the executor's text and keeps the executor, rather
 * than take the answer for one out of order and restart it (which failed the task as a crash).
 * The answer is handed to the worker here while the real executor still runs the task; that
 * one's own answer, once it ends, is then out of order and restarts the executor. */
static void worker_takes_an_unnamed_failure_for_its_head(void **state)
{
    env *e = *state;
    char dir[] = "/tmp/spw-test-worker-XXXXXX", path[64];
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/go", dir);
    task_run_wait(e, 1, path);
    STEP_UNTIL(e, task_of(e, 1) != NULL && task_of(e, 1)->state == WT_SENT);
    wrk_exec *ex = task_of(e, 1)->ex;
    int pid = ex->pid;
    fake_exec_done(ex, (spw_id){0, 0}, SPW_EMALFORMED,
                   "EXECS record 0 from the worker is malformed and names no task");
    STEP_UNTIL(e, find(e, PROTO_TASK_DONE, 1) != NULL);
    assert_int_equal(find(e, PROTO_TASK_DONE, 1)->status, SPW_EMALFORMED);
    assert_int_equal(ex->pid, pid);
    assert_non_null(ex->conn);
    assert_null(ex->head);

    touch(path); /* the real answer now restarts it; the next task runs on its successor */
    STEP_UNTIL(e, ex->pid != pid && ex->conn != NULL);
    task_run(e, 2, "inc", true, 1);
    STEP_UNTIL(e, find(e, PROTO_TASK_DONE, 2) != NULL);
    assert_int_equal(done_u64(e, 2), 2);
    assert_int_equal(HASH_COUNT(e->w->tasks), 0);
    assert_int_equal(unlink(path), 0);
    assert_int_equal(rmdir(dir), 0);
}

/* A task sent ahead whose producers here ended with small outputs gets them as inline values;
 * with enough of them its EXECS record is larger than a frame (the worker's limit is 1 MiB
 * here; 20 values of 60,000 bytes), and it cannot go to an executor. It fails with
 * SPW_EFRAMESIZE; it used to be queued on the executor unsent, never answered, and every task
 * queued behind it there waited with it. The next task runs. */
static void worker_fails_a_task_too_large_for_its_executor(void **state)
{
    env *e = *state;
    enum { NPROD = 20 };
    e->w->ewma_us = 1e9; /* long tasks: one at a time, so none is chained on the executor */
    uint64_t size = 60000;
    for (uint64_t i = 1; i <= NPROD; i++)
        task_run(e, i, "fill", true, size);
    proto_enc en;
    proto_enc_begin(&en, proto_conn_out(e->conn), PROTO_TASK_RUN, 0, 4);
    proto_put_id(&en, tid(100));
    proto_put_str(&en, "len");
    proto_put_arr(&en, NPROD);
    for (uint64_t i = 1; i <= NPROD; i++) {
        proto_put_arr(&en, 7);
        proto_put_u(&en, PROTO_ARG_OBJ);
        proto_put_nil(&en);
        proto_put_id(&en, tid(i));
        proto_put_u(&en, 0);
        proto_put_u(&en, 0);
        proto_put_u(&en, 0);
        proto_put_arr(&en, 0); /* locations */
    }
    proto_put_u(&en, PROTO_TASK_AHEAD);
    assert_int_equal(proto_conn_send(e->conn, &en), 0);
    /* Bounded by time rather than STEPS (each up to a 50 ms heartbeat): unanswered, it fails. */
    uint64_t deadline = spw_now_ns() + 30ULL * 1000000000ULL;
    while (find(e, PROTO_TASK_DONE, 100) == NULL && spw_now_ns() < deadline)
        uv_run(&e->loop, UV_RUN_ONCE);
    assert_non_null(find(e, PROTO_TASK_DONE, 100));
    wrk__check_full(e->w);
    for (uint64_t i = 1; i <= NPROD; i++) {
        assert_int_equal(find(e, PROTO_TASK_DONE, i)->status, 0);
        assert_int_equal(find(e, PROTO_TASK_DONE, i)->size, size);
    }
    assert_int_equal(find(e, PROTO_TASK_DONE, 100)->status, SPW_EFRAMESIZE);
    assert_int_equal(e->w->running, 0);
    task_run(e, 101, "inc", true, 1);
    STEP_UNTIL(e, find(e, PROTO_TASK_DONE, 101) != NULL);
    assert_int_equal(done_u64(e, 101), 2);
    assert_int_equal(HASH_COUNT(e->w->tasks), 0);
}

/* What the loop's check phase hands the worker once executor 0's socket is closing (after the
 * poll phase that saw it end, before the close callbacks): a TASK_RUN of inc, as one read from
 * the scheduler after the executor's end in the same loop turn. */
static struct {
    env *e;
    uint64_t id;
    bool injected;
} late_run;

static void late_run_check_cb(uv_check_t *h)
{
    (void)h;
    env *e = late_run.e;
    wrk_exec *ex = &e->w->execs[0];
    if (late_run.injected || ex->conn == NULL || !proto_conn_is_closing(ex->conn))
        return;
    late_run.injected = true;
    spw_buf b = {0};
    proto_enc en;
    proto_enc_begin(&en, &b, PROTO_TASK_RUN, 0, 4);
    put_run_fields(&en, late_run.id, "inc", true, 1);
    assert_true(proto_enc_end(&en, UINT32_MAX) > 0);
    proto_limits lim;
    proto_limits_default(&lim);
    msgpack_zone z;
    msgpack_zone_init(&z, 4096);
    proto_msg m;
    assert_true(proto_decode(b.data, b.len, &lim, &z, &m) > 0);
    wrk__task_run(e->w, &m);
    msgpack_zone_destroy(&z);
    spw_buf_release(&b);
}

/* An idle executor dies (killed here; the OOM killer picks one holding much memory) and a task
 * comes in the same loop turn, after its socket closed but before the close callback: the task
 * waits for the next executor and runs there. It used to go to the dead one's socket (open in
 * name until the callback), be queued there unsent, and fail as the task the executor was
 * running when it was killed (SPW_EEXECCRASH, "killed by signal 9 while running inc"): a task
 * that never ran, failed for good. */
static void worker_sends_no_task_to_an_executor_that_ended(void **state)
{
    env *e = *state;
    task_run(e, 1, "inc", true, 1); /* the executor is up and idle */
    STEP_UNTIL(e, find(e, PROTO_TASK_DONE, 1) != NULL);
    assert_int_equal(done_u64(e, 1), 2);
    wrk_exec *ex = &e->w->execs[0];
    int pid = ex->pid;
    late_run.e = e;
    late_run.id = 2;
    late_run.injected = false;
    uv_check_t chk;
    assert_int_equal(uv_check_init(&e->loop, &chk), 0);
    assert_int_equal(uv_check_start(&chk, late_run_check_cb), 0);
    assert_int_equal(kill(pid, SIGKILL), 0);
    STEP_UNTIL(e, late_run.injected);
    uv_check_stop(&chk);
    uv_close((uv_handle_t *)&chk, NULL);
    STEP_UNTIL(e, find(e, PROTO_TASK_DONE, 2) != NULL);
    assert_int_equal(find(e, PROTO_TASK_DONE, 2)->status, 0);
    assert_int_equal(done_u64(e, 2), 2);
    assert_int_not_equal(ex->pid, pid);
    assert_int_equal(HASH_COUNT(e->w->tasks), 0);
}

/* ------------------------------------------------- an executor spoken to by hand */

#define EXEC_TEST_CAPACITY (1u << 20)

/* Starts the built executor (spillway-worker --executor) on a socket and an arena memfd of its
 * own, as the worker does (fds 3 and 4), with the test plugin. Returns its pid; *sock is our
 * end of the socket. */
static pid_t exec_spawn_limit(int *sock, const char *memlimit);

static pid_t exec_spawn(int *sock)
{
    return exec_spawn_limit(sock, "0");
}

/* ...with a task memory limit (bytes, as the worker passes it; no cgroup: RLIMIT_DATA). */
static pid_t exec_spawn_limit(int *sock, const char *memlimit)
{
    int sv[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    int arena = memfd_create("spw-test-arena", MFD_CLOEXEC);
    assert_true(arena >= 0);
    assert_int_equal(ftruncate(arena, EXEC_TEST_CAPACITY), 0);
    char cap[32];
    snprintf(cap, sizeof cap, "%u", EXEC_TEST_CAPACITY);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        if (dup2(sv[1], 3) != 3 || dup2(arena, 4) != 4)
            _exit(127);
        execl(SPW_WORKER_EXE, SPW_WORKER_EXE, "--executor", cap, "3", memlimit, "-",
              SPW_TEST_PLUGIN, (char *)NULL);
        _exit(127);
    }
    close(sv[1]);
    close(arena);
    *sock = sv[0];
    return pid;
}

static void write_all_test(int fd, const uint8_t *p, size_t n)
{
    while (n > 0) {
        ssize_t k = write(fd, p, n);
        assert_true(k > 0);
        p += k;
        n -= (size_t)k;
    }
}

/* The next frame from the executor into *m (its fields point into in, valid until the next
 * call), waiting at most 10 s for it. Returns false when the executor closed the socket or
 * nothing came in time. */
static bool exec_next_frame(int fd, spw_buf *in, size_t *used, msgpack_zone *z, proto_msg *m)
{
    proto_limits lim;
    proto_limits_default(&lim);
    spw_buf_consume(in, *used);
    *used = 0;
    msgpack_zone_clear(z);
    uint64_t deadline = spw_now_ns() + 10ULL * 1000000000ULL;
    for (;;) {
        int rc = proto_decode(in->data, in->len, &lim, z, m);
        assert_true(rc >= 0);
        if (rc > 0) {
            *used = (size_t)rc;
            return true;
        }
        uint64_t now = spw_now_ns();
        if (now >= deadline)
            return false;
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        if (poll(&pfd, 1, (int)((deadline - now) / 1000000ULL) + 1) <= 0)
            continue;
        uint8_t b[4096];
        ssize_t k = read(fd, b, sizeof b);
        if (k <= 0)
            return false;
        spw_buf_append(in, b, (size_t)k);
    }
}

/* An EXECS frame of n tasks, ids id.. id + n - 1: each fn on an inline u64 argument, outputs up
 * to inline_limit bytes inline. */
static void enc_execs(spw_buf *b, uint64_t id, uint32_t n, const char *fn, uint64_t arg,
                      uint64_t inline_limit)
{
    proto_earg_rec a = {.kind = PROTO_ARG_INLINE, .value = {&arg, sizeof arg}};
    proto_exec_rec r[32];
    assert_true(n <= 32);
    for (uint32_t i = 0; i < n; i++)
        r[i] = (proto_exec_rec){
            .id = tid(id + i), .fn = fn, .args = {.n = 1, .v = &a}, .inline_limit = inline_limit};
    proto_enc en;
    proto_enc_execs(&en, b, 0, &(proto_execs_msg){.recs = {.n = n, .v = r}});
    assert_true(proto_enc_end(&en, UINT32_MAX) > 0);
}

/* An EXECS frame of one record: task id runs fn(arg), arg inline. */
static void enc_exec(spw_buf *b, uint64_t id, const char *fn, uint64_t arg, uint64_t inline_limit)
{
    enc_execs(b, id, 1, fn, arg, inline_limit);
}

/* Starts an executor for a case that drives it by hand; exec_teardown kills it (through
 * *state) if an assertion fails first. Returns the worker's end of its socket. */
static int exec_start(void **state, pid_t *pid)
{
    signal(SIGPIPE, SIG_IGN);
    int sock;
    *pid = exec_spawn(&sock);
    *state = pid;
    return sock;
}

static int exec_teardown(void **state)
{
    pid_t *pid = *state;
    if (pid != NULL && *pid > 0) {
        kill(*pid, SIGKILL);
        waitpid(*pid, NULL, 0);
        *pid = 0;
    }
    return 0;
}

/* A task whose output goes to the store makes the executor ask the worker for room and read
 * the answer. The worker's next EXECS frame may arrive cut in two by that wait: its first part
 * read with the frame being run, the rest together with the answer. The executor must join the
 * two parts: it answers both tasks, and does not take the rest for a frame of its own. */
static void executor_joins_a_frame_cut_by_an_allocation(void **state)
{
    static pid_t pid;
    int sock = exec_start(state, &pid);
    spw_buf out = {0}, in = {0};
    enc_exec(&out, 1, "fill", 4096, 0); /* 4 KiB, none inline: from the store */
    size_t first = out.len;
    enc_exec(&out, 2, "inc", 41, PROTO_DEFAULT_INLINE_LIMIT);
    size_t cut = first + (out.len - first) / 2;
    write_all_test(sock, out.data, cut);

    msgpack_zone z;
    assert_true(msgpack_zone_init(&z, 4096));
    size_t used = 0;
    proto_msg m;
    assert_true(exec_next_frame(sock, &in, &used, &z, &m));
    assert_int_equal(m.type, PROTO_EXEC_ALLOC);
    assert_true(spw_id_eq(m.f[F_EALLOC_ID].id, tid(1)));
    assert_int_equal(m.f[F_EALLOC_SIZE].u, 4096);
    spw_buf reply = {0};
    spw_buf_append(&reply, out.data + cut, out.len - cut);
    proto_enc en;
    proto_enc_exec_alloc_ok(&en, &reply, m.req, &(proto_exec_alloc_ok_msg){.off = 0});
    assert_true(proto_enc_end(&en, UINT32_MAX) > 0);
    write_all_test(sock, reply.data, reply.len);

    bool done1 = false, done2 = false;
    while (!(done1 && done2)) {
        assert_true(exec_next_frame(sock, &in, &used, &z, &m));
        assert_int_equal(m.type, PROTO_EXEC_DONES);
        for (uint32_t i = 0; i < m.f[F_DONES_RECS].arr.n; i++) {
            const proto_val *f = PROTO_REC(&m.f[F_DONES_RECS], i);
            assert_false(f[F_DONE_ID].bad);
            assert_int_equal(f[F_DONE_STATUS].i, 0);
            if (spw_id_eq(f[F_DONE_ID].id, tid(1))) {
                assert_int_equal(f[F_DONE_SIZE].u, 4096);
                assert_true(f[F_DONE_INLINE].nil);
                done1 = true;
            } else {
                assert_true(spw_id_eq(f[F_DONE_ID].id, tid(2)));
                uint64_t v;
                assert_int_equal(f[F_DONE_INLINE].bin.len, sizeof v);
                memcpy(&v, f[F_DONE_INLINE].bin.ptr, sizeof v);
                assert_int_equal(v, 42);
                done2 = true;
            }
        }
    }
    close(sock); /* the executor leaves through its cleanup */
    int st;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    pid = 0;
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
    msgpack_zone_destroy(&z);
    spw_buf_release(&out);
    spw_buf_release(&in);
    spw_buf_release(&reply);
}

/* One answer of an executor: a record of its EXEC_DONES, copied. */
typedef struct exec_ans {
    spw_id id;
    int64_t status;
    uint64_t v; /* an 8-byte inline output */
    bool has_v;
    char err[PROTO_MAX_STR + 1];
} exec_ans;

/* Reads the executor's next n answers, in order, into ans (only EXEC_DONES frames may come). */
static void exec_answers(int sock, spw_buf *in, size_t *used, msgpack_zone *z, exec_ans *ans,
                         uint32_t n)
{
    uint32_t k = 0;
    while (k < n) {
        proto_msg m;
        assert_true(exec_next_frame(sock, in, used, z, &m));
        assert_int_equal(m.type, PROTO_EXEC_DONES);
        for (uint32_t i = 0; i < m.f[F_DONES_RECS].arr.n; i++) {
            const proto_val *f = PROTO_REC(&m.f[F_DONES_RECS], i);
            assert_true(k < n);
            assert_false(f[F_DONE_ID].bad);
            exec_ans *a = &ans[k++];
            memset(a, 0, sizeof *a);
            a->id = f[F_DONE_ID].id;
            a->status = f[F_DONE_STATUS].i;
            a->has_v = !f[F_DONE_INLINE].nil && f[F_DONE_INLINE].bin.len == sizeof a->v;
            if (a->has_v)
                memcpy(&a->v, f[F_DONE_INLINE].bin.ptr, sizeof a->v);
            proto_str(&f[F_DONE_ERR], a->err, sizeof a->err);
        }
    }
}

/* The fields of an EXECS record: task id runs fn on one argument of kind `kind` (inline bytes
 * value, or nil when value is NULL; off and len for a range of the arena). */
static void put_exec_rec(proto_enc *en, uint64_t id, const char *fn, uint64_t kind,
                         const uint64_t *value, uint64_t off, uint64_t len)
{
    proto_put_arr(en, 4);
    proto_put_id(en, tid(id));
    proto_put_str(en, fn);
    proto_put_arr(en, 1);
    proto_put_arr(en, 4);
    proto_put_u(en, kind);
    if (value != NULL)
        proto_put_bin(en, value, sizeof *value);
    else
        proto_put_nil(en);
    proto_put_u(en, off);
    proto_put_u(en, len);
    proto_put_u(en, PROTO_DEFAULT_INLINE_LIMIT);
}

/* Closes our end of an executor's socket: it must leave through its cleanup, status 0. */
static void exec_close_and_reap(int sock, pid_t *pid)
{
    close(sock);
    int st;
    assert_int_equal(waitpid(*pid, &st, 0), *pid);
    *pid = 0;
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
}

/* An executor a case drives by hand, and what talking to it takes. */
typedef struct exec_io {
    int sock;        /* the worker's end */
    spw_buf out, in; /* a frame to send; bytes read */
    size_t used;     /* bytes of in already taken by frames */
    msgpack_zone z;
} exec_io;

/* Starts the executor (exec_start: exec_teardown kills it if an assertion fails first). */
static void exec_io_open(void **state, pid_t *pid, exec_io *x)
{
    memset(x, 0, sizeof *x);
    x->sock = exec_start(state, pid);
    assert_true(msgpack_zone_init(&x->z, 4096));
}

/* Begins an EXECS frame of nrecs records in x->out (put_exec_rec, ...; then proto_enc_end). */
static void exec_io_batch(exec_io *x, proto_enc *en, uint32_t nrecs)
{
    proto_enc_begin(en, &x->out, PROTO_EXECS, 0, 1);
    proto_put_arr(en, nrecs);
}

/* Writes the frame in x->out, then empties it. */
static void exec_io_send(exec_io *x)
{
    write_all_test(x->sock, x->out.data, x->out.len);
    spw_buf_reset(&x->out);
}

/* The executor's next frame. */
static void exec_io_next(exec_io *x, proto_msg *m)
{
    assert_true(exec_next_frame(x->sock, &x->in, &x->used, &x->z, m));
}

/* Closes our end (the executor leaves through its cleanup, status 0) and frees x. */
static void exec_io_close(exec_io *x, pid_t *pid)
{
    exec_close_and_reap(x->sock, pid);
    msgpack_zone_destroy(&x->z);
    spw_buf_release(&x->out);
    spw_buf_release(&x->in);
}

/* An EXECS record without a readable task id (its first value not an id; a value that is no
 * record at all) is answered in its place, in order, as a failed task with the nil id and
 * SPW_EMALFORMED, naming the record; the records around it run, and the executor carries on
 * with the next frame. It used to abort (SPW_PANIC), failing the worker's whole queue. */
static void executor_answers_a_record_naming_no_task(void **state)
{
    static pid_t pid;
    exec_io x;
    exec_io_open(state, &pid, &x);
    uint64_t v41 = 41, v9 = 9, v1 = 1;
    proto_enc en;
    exec_io_batch(&x, &en, 4);
    put_exec_rec(&en, 1, "inc", PROTO_ARG_INLINE, &v41, 0, 0);
    proto_put_arr(&en, 4); /* a record whose first value is not an id */
    proto_put_u(&en, 5);
    proto_put_str(&en, "inc");
    proto_put_arr(&en, 0);
    proto_put_u(&en, 0);
    proto_put_u(&en, 7); /* not a record */
    put_exec_rec(&en, 4, "inc", PROTO_ARG_INLINE, &v9, 0, 0);
    assert_true(proto_enc_end(&en, UINT32_MAX) > 0);
    exec_io_send(&x);

    exec_ans a[4];
    exec_answers(x.sock, &x.in, &x.used, &x.z, a, 4);
    assert_true(spw_id_eq(a[0].id, tid(1)));
    assert_int_equal(a[0].status, 0);
    assert_int_equal(a[0].v, 42);
    for (int i = 1; i <= 2; i++) {
        char want[32];
        snprintf(want, sizeof want, "EXECS record %d", i);
        assert_true(spw_id_is_nil(a[i].id));
        assert_int_equal(a[i].status, SPW_EMALFORMED);
        assert_non_null(strstr(a[i].err, want));
        assert_non_null(strstr(a[i].err, "names no task"));
    }
    assert_true(spw_id_eq(a[3].id, tid(4)));
    assert_int_equal(a[3].status, 0);
    assert_int_equal(a[3].v, 10);

    exec_io_batch(&x, &en, 1); /* and it carries on */
    put_exec_rec(&en, 5, "inc", PROTO_ARG_INLINE, &v1, 0, 0);
    assert_true(proto_enc_end(&en, UINT32_MAX) > 0);
    exec_io_send(&x);
    exec_answers(x.sock, &x.in, &x.used, &x.z, a, 1);
    assert_true(spw_id_eq(a[0].id, tid(5)));
    assert_int_equal(a[0].v, 2);
    exec_io_close(&x, &pid);
}

/* Each field of an argument the executor reads is checked: an argument of an unknown kind, an
 * inline argument without its bytes, and a range outside the arena fail their task with
 * SPW_EPROTO, without running it; they used to be read as a range of the arena (its first 8
 * bytes here, which inc took for its input and succeeded). The good task after them runs. */
static void executor_fails_an_argument_it_cannot_read(void **state)
{
    static pid_t pid;
    exec_io x;
    exec_io_open(state, &pid, &x);
    uint64_t v = 41;
    proto_enc en;
    exec_io_batch(&x, &en, 4);
    put_exec_rec(&en, 1, "inc", 7, NULL, 0, 8);                  /* no such kind */
    put_exec_rec(&en, 2, "inc", PROTO_ARG_INLINE, NULL, 0, 8);   /* inline, no bytes */
    put_exec_rec(&en, 3, "inc", PROTO_ARG_VIEW, NULL, EXEC_TEST_CAPACITY - 4, 8); /* outside */
    put_exec_rec(&en, 4, "inc", PROTO_ARG_INLINE, &v, 0, 0);
    assert_true(proto_enc_end(&en, UINT32_MAX) > 0);
    exec_io_send(&x);

    exec_ans a[4];
    exec_answers(x.sock, &x.in, &x.used, &x.z, a, 4);
    for (uint64_t i = 0; i < 3; i++) {
        assert_true(spw_id_eq(a[i].id, tid(i + 1)));
        assert_int_equal(a[i].status, SPW_EPROTO);
        assert_non_null(strstr(a[i].err, "argument 0"));
    }
    assert_true(spw_id_eq(a[3].id, tid(4)));
    assert_int_equal(a[3].status, 0);
    assert_int_equal(a[3].v, 42);
    exec_io_close(&x, &pid);
}

/* The fields of an EXECS record whose one argument is the output of task producer, kept by the
 * executor (PROTO_ARG_PREV), as the worker sends a task chained behind its producer. */
static void put_prev_rec(proto_enc *en, uint64_t id, const char *fn, uint64_t producer)
{
    uint8_t idb[16];
    spw_id_to_bytes(tid(producer), idb);
    proto_put_arr(en, 4);
    proto_put_id(en, tid(id));
    proto_put_str(en, fn);
    proto_put_arr(en, 1);
    proto_put_arr(en, 4);
    proto_put_u(en, PROTO_ARG_PREV);
    proto_put_bin(en, idb, sizeof idb);
    proto_put_u(en, 0);
    proto_put_u(en, 0);
    proto_put_u(en, PROTO_DEFAULT_INLINE_LIMIT);
}

/* A task that runs again on the same executor (the scheduler retried it: its worker had lost
 * the scheduler, which sent it back once the worker returned) stands in the kept outputs with
 * its latest run only. A task chained behind a rerun that failed is answered SPW_EAHEAD, and one
 * behind a rerun that succeeded gets that run's output. The executor used to hand either the
 * first run's output, so the dependent ran on a value its producer no longer had. */
static void executor_kept_output_is_the_latest_run(void **state)
{
    static pid_t pid;
    exec_io x;
    exec_io_open(state, &pid, &x);
    uint64_t v41 = 41, v1 = 1, v10 = 10;
    proto_enc en;
    exec_io_batch(&x, &en, 6);
    put_exec_rec(&en, 1, "inc", PROTO_ARG_INLINE, &v41, 0, 0);
    put_exec_rec(&en, 1, "fail", PROTO_ARG_INLINE, &v41, 0, 0); /* its rerun fails */
    put_prev_rec(&en, 2, "inc", 1);
    put_exec_rec(&en, 3, "inc", PROTO_ARG_INLINE, &v1, 0, 0);
    put_exec_rec(&en, 3, "inc", PROTO_ARG_INLINE, &v10, 0, 0); /* its rerun makes 11 */
    put_prev_rec(&en, 4, "inc", 3);
    assert_true(proto_enc_end(&en, UINT32_MAX) > 0);
    exec_io_send(&x);

    exec_ans a[6];
    exec_answers(x.sock, &x.in, &x.used, &x.z, a, 6);
    assert_int_equal(a[0].status, 0);
    assert_int_equal(a[0].v, 42);
    assert_int_equal(a[1].status, SPW_ETASKFAILED);
    assert_true(spw_id_eq(a[2].id, tid(2)));
    assert_int_equal(a[2].status, SPW_EAHEAD);
    assert_int_equal(a[4].v, 11);
    assert_true(spw_id_eq(a[5].id, tid(4)));
    assert_int_equal(a[5].status, 0);
    assert_int_equal(a[5].v, 12);
    exec_io_close(&x, &pid);
}

/* The system call process pid is in (/proc/PID/syscall), -1 while it runs, or -2 when the
 * kernel does not show it (no such file, or not to us). */
static long proc_syscall(pid_t pid)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/syscall", (int)pid);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return -2;
    long nr = -1;
    if (fscanf(f, "%ld", &nr) != 1)
        nr = -1;
    fclose(f);
    return nr;
}

/* Whether the executor's end of sock closes (read() gives 0) with nothing more sent, within
 * 10 s: a bound for a test that fails, not a timing. */
static bool sock_ends(int sock)
{
    uint64_t deadline = spw_now_ns() + 10ULL * 1000000000ULL;
    for (;;) {
        uint64_t now = spw_now_ns();
        if (now >= deadline)
            return false;
        struct pollfd pfd = {.fd = sock, .events = POLLIN};
        if (poll(&pfd, 1, (int)((deadline - now) / 1000000ULL) + 1) <= 0)
            continue;
        uint8_t b[64];
        return read(sock, b, sizeof b) == 0;
    }
}

/* An executor told to stop (SIGTERM) while it is blocked writing its answers (the worker reads
 * them late) finishes writing them and then leaves; it must not go on to wait for input it
 * has no use for. The signal came after its last look at the stop flag, so it used to block in
 * read() until the worker sent more or closed the socket: a stop that never completes on an
 * idle worker. The test drains the answers like a worker, sends nothing and keeps its end
 * open: the executor's exit is seen as the end of its socket, then by its pid. */
static void executor_stops_promptly_after_a_signal_in_a_write(void **state)
{
    static pid_t pid;
    int sock = exec_start(state, &pid);
    enum { N = 32, SIZE = 60000 }; /* about 2 MB of answers: far more than the socket holds */
    spw_buf out = {0}, in = {0};
    uint64_t size = SIZE;
    enc_execs(&out, 1, N, "fill", size, 1u << 20); /* inline: the answers carry the outputs */
    write_all_test(sock, out.data, out.len);

    /* Blocked in write(): past its last look at the flag before it would wait for input. */
    if (proc_syscall(pid) == -2) {
        spw_buf_release(&out);
        close(sock);
        skip(); /* exec_teardown reaps it */
    }
    uint64_t deadline = spw_now_ns() + 10ULL * 1000000000ULL;
    while (proc_syscall(pid) != SYS_write && spw_now_ns() < deadline)
        poll(NULL, 0, 1); /* a look every millisecond; nothing is read meanwhile */
    assert_int_equal(proc_syscall(pid), SYS_write);
    assert_int_equal(kill(pid, SIGTERM), 0);

    msgpack_zone z;
    assert_true(msgpack_zone_init(&z, 4096));
    size_t used = 0;
    uint32_t answered = 0;
    proto_msg m;
    while (answered < N) {
        assert_true(exec_next_frame(sock, &in, &used, &z, &m));
        assert_int_equal(m.type, PROTO_EXEC_DONES);
        for (uint32_t i = 0; i < m.f[F_DONES_RECS].arr.n; i++) {
            const proto_val *f = PROTO_REC(&m.f[F_DONES_RECS], i);
            assert_true(spw_id_eq(f[F_DONE_ID].id, tid(answered + 1)));
            assert_int_equal(f[F_DONE_STATUS].i, 0);
            assert_int_equal(f[F_DONE_INLINE].bin.len, SIZE);
            answered++;
        }
    }
    assert_true(sock_ends(sock)); /* it left: nothing more, then the end of its socket */
    int st;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    pid = 0;
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
    close(sock);
    msgpack_zone_destroy(&z);
    spw_buf_release(&out);
    spw_buf_release(&in);
}

/* A task that returns 0 although its output could not be made (the worker had no room: the
 * EXEC_ALLOC answered with an ERROR) has no output to report: it fails with the allocation's
 * error and text. It used to succeed with an empty output, which its consumers then read as the
 * result. */
static void executor_fails_a_task_that_ignores_its_failed_output(void **state)
{
    static pid_t pid;
    exec_io x;
    exec_io_open(state, &pid, &x);
    enc_exec(&x.out, 1, "ignore_output", 4096, 0); /* inline limit 0: asked of the worker */
    exec_io_send(&x);
    proto_msg m;
    exec_io_next(&x, &m);
    assert_int_equal(m.type, PROTO_EXEC_ALLOC);
    proto_enc_errorf(&x.out, m.req, SPW_EBACKPRESSURE, "no room in the store for the output");
    exec_io_send(&x);
    exec_ans a;
    exec_answers(x.sock, &x.in, &x.used, &x.z, &a, 1);
    assert_true(spw_id_eq(a.id, tid(1)));
    assert_int_equal(a.status, SPW_EBACKPRESSURE);
    assert_non_null(strstr(a.err, "no room in the store"));
    exec_io_close(&x, &pid);
}

/* An ERROR answer to an EXEC_ALLOC whose code is no error (0, or positive) still fails the
 * allocation, as SPW_EPROTO with the worker's text: code 1 was taken for "no answer yet", so the
 * executor waited for ever on a request already answered, and code 0 for room at an offset
 * never given. */
static void executor_fails_an_allocation_answered_with_no_error_code(void **state)
{
    static pid_t pid;
    exec_io x;
    exec_io_open(state, &pid, &x);
    for (uint64_t id = 1; id <= 2; id++) {
        enc_exec(&x.out, id, "fill", 4096, 0); /* the output is asked of the worker */
        exec_io_send(&x);
        proto_msg m;
        exec_io_next(&x, &m);
        assert_int_equal(m.type, PROTO_EXEC_ALLOC);
        proto_enc_errorf(&x.out, m.req, (int)id - 1, "a worker's answer without a code");
        exec_io_send(&x);
        exec_ans a;
        exec_answers(x.sock, &x.in, &x.used, &x.z, &a, 1);
        assert_true(spw_id_eq(a.id, tid(id)));
        assert_int_equal(a.status, SPW_EPROTO);
        assert_non_null(strstr(a.err, "without a code"));
    }
    exec_io_close(&x, &pid);
}

/* A frame from the worker that cannot be read as a whole (an EXECS whose records are not an
 * array; one whose array claims more records than the frame holds) cannot be answered record by
 * record: the executor says why in its log, writes the answers it has (those of the frame
 * before it, read together with it) and leaves through its cleanup with status 1, for the
 * worker to start another. It used to abort (SPW_PANIC), losing those answers with it. */
static void executor_leaves_cleanly_on_a_frame_it_cannot_read(void **state)
{
    static pid_t pid;
    signal(SIGPIPE, SIG_IGN);
    for (int bad = 0; bad < 2; bad++) {
        int sock;
        pid = exec_spawn(&sock);
        *state = &pid;
        spw_buf out = {0}, in = {0};
        uint64_t v = 41;
        proto_enc en;
        proto_enc_begin(&en, &out, PROTO_EXECS, 0, 1);
        proto_put_arr(&en, 1);
        put_exec_rec(&en, 1, "inc", PROTO_ARG_INLINE, &v, 0, 0);
        assert_true(proto_enc_end(&en, UINT32_MAX) > 0);
        proto_enc_begin(&en, &out, PROTO_EXECS, 0, 1);
        if (bad == 0) {
            proto_put_u(&en, 5); /* not an array of records */
        } else {
            proto_put_arr(&en, 3); /* three records, one there */
            put_exec_rec(&en, 2, "inc", PROTO_ARG_INLINE, &v, 0, 0);
        }
        assert_true(proto_enc_end(&en, UINT32_MAX) > 0);
        write_all_test(sock, out.data, out.len); /* both in one write */

        msgpack_zone z;
        assert_true(msgpack_zone_init(&z, 4096));
        size_t used = 0;
        exec_ans a;
        exec_answers(sock, &in, &used, &z, &a, 1);
        assert_true(spw_id_eq(a.id, tid(1)));
        assert_int_equal(a.status, 0);
        assert_int_equal(a.v, 42);
        assert_true(sock_ends(sock));
        int st;
        assert_int_equal(waitpid(pid, &st, 0), pid);
        pid = 0;
        assert_true(WIFEXITED(st));
        assert_int_equal(WEXITSTATUS(st), 1);
        close(sock);
        msgpack_zone_destroy(&z);
        spw_buf_release(&out);
        spw_buf_release(&in);
    }
}

/* ------------------------------------------------------------ cgroup setup */

static void put_file(const char *dir, const char *name, const char *text)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    assert_int_equal(fclose(f), 0);
}

/* A cgroup v2 directory delegated to this process, made of plain files: the memory controller
 * available, this process alone in it. */
static void fake_cgroup(char *dir, size_t len)
{
    snprintf(dir, len, "/tmp/spw-test-cg-XXXXXX");
    assert_non_null(mkdtemp(dir));
    char pid[32];
    snprintf(pid, sizeof pid, "%d\n", (int)getpid());
    put_file(dir, "cgroup.controllers", "cpu io memory pids\n");
    put_file(dir, "cgroup.procs", pid);
    put_file(dir, "cgroup.subtree_control", "");
}

static void rm_tree(const char *dir)
{
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
}

/* An executor's memory.swap.max that exists but cannot be written fails the cgroup setup (the
 * worker then limits tasks with RLIMIT_DATA), instead of leaving a cgroup whose task swaps
 * past its memory.max rather than failing with SPW_ETASKMEM. Only an absent file (no swap
 * accounting: nothing to limit) is passed over. It used to be ignored whatever the error. */
static void cgroup_taskmem_unwritable_swap_max_fails_the_setup(void **state)
{
    (void)state;
    char dir[64], sub[128];
    fake_cgroup(dir, sizeof dir);
    snprintf(sub, sizeof sub, "%s/exec-1", dir);
    assert_int_equal(mkdir(sub, 0755), 0);
    snprintf(sub, sizeof sub, "%s/exec-1/memory.swap.max", dir);
    assert_int_equal(mkdir(sub, 0755), 0); /* exists; opening it for writing fails (EISDIR) */
    wrk *w = calloc(1, sizeof *w);
    assert_non_null(w);
    w->opts.task_mem_limit = 64u << 20;
    w->nexec = 2;
    wrk__cgroup_fake_dir = dir;
    int rc = wrk__cgroup_setup(w);
    wrk__cgroup_fake_dir = NULL;
    bool got = w->cgroup != NULL;
    wrk__cgroup_cleanup(w);
    free(w);
    /* The same without the unwritable file: set up, and memory.swap.max absent is fine. */
    char dir2[64];
    fake_cgroup(dir2, sizeof dir2);
    wrk *w2 = calloc(1, sizeof *w2);
    assert_non_null(w2);
    w2->opts.task_mem_limit = 64u << 20;
    w2->nexec = 2;
    wrk__cgroup_fake_dir = dir2;
    int rc2 = wrk__cgroup_setup(w2);
    wrk__cgroup_fake_dir = NULL;
    bool set_up = w2->cgroup != NULL;
    wrk__cgroup_cleanup(w2);
    free(w2);
    rm_tree(dir);
    rm_tree(dir2);
    assert_int_equal(rc2, 0);
    assert_true(set_up);
    assert_false(got);
    assert_int_equal(rc, -EISDIR);
}

/* A task limit so large that adding the executor's own 32 MiB passes 2^64 (a huge
 * --task-memory-limit meant as "no real limit") gives memory.max "max", not the wrapped sum:
 * that was about 32 MiB, and every task was OOM-killed. */
static void cgroup_taskmem_huge_limit_does_not_wrap(void **state)
{
    (void)state;
    char dir[64], path[128], got[64] = "";
    fake_cgroup(dir, sizeof dir);
    wrk *w = calloc(1, sizeof *w);
    assert_non_null(w);
    w->opts.task_mem_limit = UINT64_MAX - 1;
    w->nexec = 1;
    wrk__cgroup_fake_dir = dir;
    int rc = wrk__cgroup_setup(w);
    wrk__cgroup_fake_dir = NULL;
    wrk__cgroup_cleanup(w);
    free(w);
    snprintf(path, sizeof path, "%s/exec-0/memory.max", dir);
    FILE *f = fopen(path, "r");
    if (f != NULL) {
        if (fgets(got, sizeof got, f) == NULL)
            got[0] = '\0';
        fclose(f);
    }
    rm_tree(dir);
    assert_int_equal(rc, 0);
    assert_string_equal(got, "max\n");
}

/* A task memory limit near 2^64 (no real bound) leaves the executor's data size unlimited; the
 * base it adds its own use to used to wrap the sum to a few KiB, and every task allocating
 * failed. The executor runs a task first, so the limit is set when it is read. */
static void executor_huge_task_limit_leaves_data_unlimited(void **state)
{
    static pid_t pid;
    signal(SIGPIPE, SIG_IGN);
    int sock;
    pid = exec_spawn_limit(&sock, "18446744073709551614");
    *state = &pid;
    spw_buf out = {0}, in = {0};
    enc_exec(&out, 1, "inc", 41, PROTO_DEFAULT_INLINE_LIMIT);
    write_all_test(sock, out.data, out.len);
    msgpack_zone z;
    assert_true(msgpack_zone_init(&z, 4096));
    size_t used = 0;
    exec_ans a[1];
    exec_answers(sock, &in, &used, &z, a, 1);
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/limits", (int)pid);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    bool unlimited = false, seen = false;
    while (fgets(line, sizeof line, f) != NULL) {
        if (strncmp(line, "Max data size", 13) != 0)
            continue;
        seen = true;
        fprintf(stderr, "%s", line);
        unlimited = strstr(line + 13, "unlimited") != NULL &&
                    strstr(strstr(line + 13, "unlimited") + 9, "unlimited") != NULL;
    }
    fclose(f);
    assert_true(seen);
    assert_true(unlimited);
    exec_close_and_reap(sock, &pid);
    msgpack_zone_destroy(&z);
    spw_buf_release(&out);
    spw_buf_release(&in);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test_setup_teardown(worker_runs_a_task_and_reports, setup, teardown),
    cmocka_unit_test_setup_teardown(worker_batch_answers_a_bad_record_and_runs_the_rest, setup,
                                    teardown),
    cmocka_unit_test_setup_teardown(worker_announces_a_running_task, setup, teardown),
    cmocka_unit_test_setup_teardown(worker_input_nowhere_fails_the_task, setup, teardown),
    cmocka_unit_test_setup_teardown(worker_remaking_an_object_it_fetches_drops_the_fetch, setup,
                                    teardown),
    cmocka_unit_test_setup_teardown(worker_runs_a_chain_sent_ahead, setup, teardown),
    cmocka_unit_test_setup_teardown(worker_drops_what_waits_for_a_failed_producer, setup, teardown),
    cmocka_unit_test_setup_teardown(worker_cancels_a_task_waiting_ahead, setup, teardown),
    cmocka_unit_test_setup_teardown(worker_queues_a_chain_behind_its_producer, setup, teardown),
    cmocka_unit_test_setup_teardown(executor_keeps_outputs_up_to_a_byte_budget, setup, teardown),
    cmocka_unit_test_setup_teardown(worker_runs_a_task_sent_again_after_a_reconnect,
                                    setup_reconnect, teardown),
    cmocka_unit_test_setup_teardown(worker_answers_a_replicate_of_a_copy_being_dropped,
                                    setup_reconnect, teardown),
    cmocka_unit_test_setup_teardown(worker_forgets_kept_results_of_a_lost_scheduler,
                                    setup_reconnect, teardown),
    cmocka_unit_test_setup_teardown(worker_runs_a_task_sent_again_after_two_reconnects,
                                    setup_reconnect, teardown),
    cmocka_unit_test_setup_teardown(worker_answers_a_task_it_cannot_take_in, setup, teardown),
    cmocka_unit_test_setup_teardown(worker_runs_a_burst_in_one_executor_batch, setup, teardown),
    cmocka_unit_test_setup_teardown(worker_requeued_task_gets_no_stale_allocation, setup, teardown),
    cmocka_unit_test_setup_teardown(worker_argument_past_its_object_fails_the_task, setup,
                                    teardown),
    cmocka_unit_test_setup_teardown(worker_pins_inputs_only_of_tasks_it_admitted, setup, teardown),
    cmocka_unit_test_setup_teardown(worker_takes_an_unnamed_failure_for_its_head, setup, teardown),
    cmocka_unit_test_setup_teardown(worker_fails_a_task_whose_status_is_no_code, setup, teardown),
    cmocka_unit_test_setup_teardown(worker_fails_a_task_too_large_for_its_executor,
                                    setup_small_frames, teardown),
    cmocka_unit_test_setup_teardown(worker_object_list_comes_in_bounded_frames, setup_big_store,
                                    teardown),
    cmocka_unit_test_setup_teardown(worker_sends_no_task_to_an_executor_that_ended, setup,
                                    teardown),
    cmocka_unit_test_teardown(executor_joins_a_frame_cut_by_an_allocation, exec_teardown),
    cmocka_unit_test_teardown(executor_answers_a_record_naming_no_task, exec_teardown),
    cmocka_unit_test_teardown(executor_fails_an_argument_it_cannot_read, exec_teardown),
    cmocka_unit_test_teardown(executor_kept_output_is_the_latest_run, exec_teardown),
    cmocka_unit_test_teardown(executor_stops_promptly_after_a_signal_in_a_write, exec_teardown),
    cmocka_unit_test_teardown(executor_fails_a_task_that_ignores_its_failed_output, exec_teardown),
    cmocka_unit_test_teardown(executor_fails_an_allocation_answered_with_no_error_code,
                              exec_teardown),
    cmocka_unit_test_teardown(executor_leaves_cleanly_on_a_frame_it_cannot_read, exec_teardown),
    cmocka_unit_test(cgroup_taskmem_unwritable_swap_max_fails_the_setup),
    cmocka_unit_test(cgroup_taskmem_huge_limit_does_not_wrap),
    cmocka_unit_test_teardown(executor_huge_task_limit_leaves_data_unlimited, exec_teardown),
};

SPW_TEST_MAIN(tests)
