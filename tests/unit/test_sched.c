/*
 * The scheduler in process: spw_sched runs on a libuv loop in this process, and fake workers
 * and clients connect to it over 127.0.0.1 (an ephemeral port) with their own proto_ctx, so
 * they run the real handshake (with the secret's proof) and send frames built by the proto
 * encoders. The test steps the loop itself (uv_run NOWAIT until a condition holds, with a
 * bound; never a sleep) and looks at the scheduler's state through sched_int.h: task states,
 * references by kind, graph counters, locations. sched__check_full() runs after every step.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "test_main.h"

#include "sched_int.h"

#define SECRET "in-process-test-secret-0123456789"
#define STEPS 200000 /* loop iterations before a condition counts as never met */

/* One message a fake peer received, the fields the tests look at. */
typedef struct rx {
    uint32_t type;
    spw_id id;        /* TASK_RUN, TASK_RESULT, PUT_TARGET, LOCATION */
    int64_t code;     /* ERROR code, TASK_RESULT / LOCATION status */
    uint64_t u;       /* SUBMIT_ACK accepted, PUT_TARGET worker, TASK_RUN flags */
    spw_id ids[16];   /* OBJ_DELETE, TASK_CANCEL */
    uint32_t nids;
    uint32_t frame; /* which frame it came in (records of one batch share it) */
    uint64_t arg0_kind; /* TASK_RUN: its first argument's kind, */
    int64_t arg0_len;   /* and its inline value's length (-1: not inline) */
    char err[96];       /* TASK_RESULT: the start of its text */
} rx;

typedef struct peer {
    proto_ctx *ctx;
    proto_conn *conn;
    bool ready, closed, ctx_closed;
    uint64_t session; /* the scheduler's id for us (a worker's id) */
    proto_hello_worker hw;
    rx log[256];
    uint32_t n;
    uint32_t frames; /* frames received; rx.frame is the one each message came in */
} peer;

typedef struct env {
    uv_loop_t loop;
    sched *s;
    char addr[64];
    bool sched_closed;
    peer peers[4];
    uint32_t npeers;
} env;

/* ------------------------------------------------------------------ peers */

static void on_ready(proto_conn *c, const proto_welcome *w)
{
    peer *p = proto_conn_data(c);
    p->ready = true;
    p->session = w->session;
}

/* Logs one message, or one record of a batched one as the single message it stands for. */
static void log_rx(peer *p, uint32_t type, const proto_val *f)
{
    assert_true(p->n < sizeof p->log / sizeof p->log[0]);
    rx *r = &p->log[p->n++];
    memset(r, 0, sizeof *r);
    r->type = type;
    r->frame = p->frames;
    switch (type) {
    case PROTO_TASK_RUN:
        r->id = f[0].id;
        r->u = f[F_RUN_FLAGS].u; /* a TASK_RUNS record has TASK_RUN's fields */
        if (f[F_RUN_ARGS].arr.n > 0) {
            const proto_val *a0 = PROTO_REC(&f[F_RUN_ARGS], 0);
            r->arg0_kind = a0[R_WARG_KIND].u;
            r->arg0_len = a0[R_WARG_INLINE].nil ? -1 : (int64_t)a0[R_WARG_INLINE].bin.len;
        }
        break;
    case PROTO_PUT_TARGET:
        r->id = f[0].id;
        r->u = f[1].u; /* the worker receiving the upload */
        break;
    case PROTO_TASK_RESULT:
        proto_str(&f[F_TRES_ERR], r->err, sizeof r->err);
        /* fall through */
    case PROTO_LOCATION:
        r->id = f[0].id;
        r->code = f[1].i;
        break;
    case PROTO_SUBMIT_ACK:
        r->u = f[1].u;
        break;
    case PROTO_BROADCAST_DONE:
        r->id = f[F_BCDONE_ID].id;
        r->u = f[F_BCDONE_FAILED].u;
        break;
    case PROTO_ERROR:
        r->code = f[F_ERROR_CODE].i;
        break;
    case PROTO_REPLICATE:
        r->id = f[F_REPL_ID].id;
        break;
    case PROTO_OBJ_DELETE:
    case PROTO_TASK_CANCEL:
        for (uint32_t i = 0; i < f[0].arr.n && r->nids < 16; i++)
            r->ids[r->nids++] = f[0].arr.v[i].id;
        break;
    default:
        break;
    }
}

static void on_msg(proto_conn *c, const proto_msg *m)
{
    peer *p = proto_conn_data(c);
    p->frames++;
    uint32_t single = m->type == PROTO_TASK_RUNS      ? PROTO_TASK_RUN
                      : m->type == PROTO_TASK_RESULTS ? PROTO_TASK_RESULT
                                                      : 0;
    if (single == 0) {
        log_rx(p, m->type, m->f);
        return;
    }
    for (uint32_t i = 0; i < m->f[0].arr.n; i++)
        log_rx(p, single, PROTO_REC(&m->f[0], i));
}

static void on_close(proto_conn *c, int status)
{
    peer *p = proto_conn_data(c);
    p->closed = true;
    p->conn = NULL;
}

static const proto_conn_cbs peer_cbs = {
    .on_ready = on_ready,
    .on_msg = on_msg,
    .on_close = on_close,
};

/* Runs the loop until cond holds (or STEPS iterations), then checks every invariant. */
#define STEP_UNTIL(e, cond)                                                                        \
    do {                                                                                           \
        for (int step_ = 0; step_ < STEPS && !(cond); step_++)                                     \
            uv_run(&(e)->loop, UV_RUN_NOWAIT);                                                     \
        assert_true(cond);                                                                         \
        sched__check_full((e)->s);                                                                 \
    } while (0)

/* Runs the loop a fixed number of times: for asserting that something does not happen. */
static void settle(env *e)
{
    for (int i = 0; i < 2000; i++)
        uv_run(&e->loop, UV_RUN_NOWAIT);
    sched__check_full(e->s);
}

static peer *peer_connect_cbs(env *e, int role, const char *name, uint32_t slots,
                              const proto_conn_cbs *cbs)
{
    peer *p = &e->peers[e->npeers++];
    memset(p, 0, sizeof *p);
    proto_ctx_opts o;
    proto_ctx_opts_default(&o);
    o.role = role;
    o.name = name;
    o.secret = (const uint8_t *)SECRET;
    o.secret_len = strlen(SECRET);
    if (role == PROTO_ROLE_WORKER) {
        p->hw.addr = "127.0.0.1:1";
        p->hw.slots = slots;
        p->hw.capacity = 1 << 30;
        p->hw.host_id = "test-host";
        p->hw.local = "";
        o.worker = &p->hw;
    }
    assert_int_equal(proto_ctx_new(&e->loop, &o, &p->ctx), 0);
    assert_int_equal(proto_connect(p->ctx, e->addr, cbs, p, &p->conn), 0);
    STEP_UNTIL(e, p->ready);
    return p;
}

static peer *peer_connect(env *e, int role, const char *name, uint32_t slots)
{
    return peer_connect_cbs(e, role, name, slots, &peer_cbs);
}

static void peer_close(env *e, peer *p)
{
    proto_conn_close(p->conn, 0);
    STEP_UNTIL(e, p->closed);
}

static uint32_t count(const peer *p, uint32_t type)
{
    uint32_t n = 0;
    for (uint32_t i = 0; i < p->n; i++)
        n += p->log[i].type == type;
    return n;
}

/* Whether p received a message of type naming id (in its id field or its id list). */
static bool got(const peer *p, uint32_t type, spw_id id)
{
    for (uint32_t i = 0; i < p->n; i++) {
        const rx *r = &p->log[i];
        if (r->type != type)
            continue;
        if (spw_id_eq(r->id, id))
            return true;
        for (uint32_t j = 0; j < r->nids; j++)
            if (spw_id_eq(r->ids[j], id))
                return true;
    }
    return false;
}

static const rx *last(const peer *p, uint32_t type)
{
    for (uint32_t i = p->n; i-- > 0;)
        if (p->log[i].type == type)
            return &p->log[i];
    return NULL;
}

/* The number of the k-th task p was told to run. */
static uint64_t nth_run(const peer *p, uint32_t k)
{
    for (uint32_t i = 0; i < p->n; i++)
        if (p->log[i].type == PROTO_TASK_RUN && k-- == 0)
            return p->log[i].id.lo;
    fail_msg("fewer TASK_RUN than asked for");
    return 0;
}

static spw_id tid(uint64_t n)
{
    spw_id id = {0x5eed000000000000ULL, n};
    return id;
}

/* How many TASK_RUN p got for task id, and the flags of the last. */
static uint32_t runs(const peer *p, uint64_t id, uint64_t *flags)
{
    uint32_t n = 0;
    for (uint32_t i = 0; i < p->n; i++)
        if (p->log[i].type == PROTO_TASK_RUN && spw_id_eq(p->log[i].id, tid(id))) {
            n++;
            if (flags != NULL)
                *flags = p->log[i].u;
        }
    return n;
}

/* A task for submit(): object arguments (none: one inline value). */
typedef struct tspec {
    uint64_t id;
    uint64_t args[3];
    uint32_t nargs;
    uint32_t flags;
} tspec;

/* Begins a SUBMIT frame of graph (the last one of it if end) of n task records. */
static void submit_begin(proto_enc *en, peer *c, uint64_t graph, bool end, uint64_t max_tasks,
                         uint64_t max_bytes, uint32_t n)
{
    proto_enc_begin(en, proto_conn_out(c->conn), PROTO_SUBMIT, 7, 6);
    proto_put_u(en, graph);
    proto_put_u(en, end ? PROTO_SUBMIT_END : 0);
    proto_put_u(en, max_tasks);
    proto_put_u(en, max_bytes);
    proto_put_arr(en, n);
}

/* One SUBMIT frame of graph; the last one of it if end. */
static void submit_frame(peer *c, uint64_t graph, bool end, uint64_t max_tasks, uint64_t max_bytes,
                         const tspec *ts, uint32_t n)
{
    proto_enc en;
    submit_begin(&en, c, graph, end, max_tasks, max_bytes, n);
    for (uint32_t i = 0; i < n; i++) {
        proto_put_arr(&en, 5);
        proto_put_id(&en, tid(ts[i].id));
        proto_put_str(&en, "fn");
        if (ts[i].nargs == 0) {
            proto_put_arr(&en, 1);
            proto_put_arr(&en, 5);
            proto_put_u(&en, PROTO_ARG_INLINE);
            proto_put_bin(&en, "x", 1);
            proto_put_nil(&en);
            proto_put_u(&en, 0);
            proto_put_u(&en, 0);
        } else {
            proto_put_arr(&en, ts[i].nargs);
            for (uint32_t a = 0; a < ts[i].nargs; a++) {
                proto_put_arr(&en, 5);
                proto_put_u(&en, PROTO_ARG_OBJ);
                proto_put_nil(&en);
                proto_put_id(&en, tid(ts[i].args[a]));
                proto_put_u(&en, 0);
                proto_put_u(&en, 0);
            }
        }
        proto_put_u(&en, ts[i].flags);
        proto_put_str(&en, "test_sched.c:1");
    }
    proto_put_str(&en, "test_sched.c:2");
    assert_int_equal(proto_conn_send(c->conn, &en), 0);
}

static void submit(peer *c, uint64_t graph, uint64_t max_tasks, uint64_t max_bytes, const tspec *ts,
                   uint32_t n)
{
    submit_frame(c, graph, true, max_tasks, max_bytes, ts, n);
}

static void send_ids(peer *p, uint32_t type, const uint64_t *ids, uint32_t n)
{
    proto_enc en;
    proto_enc_begin(&en, proto_conn_out(p->conn), type, 9, 1);
    proto_put_arr(&en, n);
    for (uint32_t i = 0; i < n; i++)
        proto_put_id(&en, tid(ids[i]));
    assert_int_equal(proto_conn_send(p->conn, &en), 0);
}

/* TASK_DONE from a fake worker: inline (the value's bytes travel, at most 48 KiB) or stored
 * (size only), after a run of run_us. */
static void done_after(peer *w, uint64_t id, int64_t status, uint64_t size, bool inl,
                       uint64_t run_us)
{
    static const uint8_t zeros[48 * 1024];
    assert_true(!inl || size <= sizeof zeros);
    proto_enc en;
    proto_enc_begin(&en, proto_conn_out(w->conn), PROTO_TASK_DONE, 0, 6);
    proto_put_id(&en, tid(id));
    proto_put_i(&en, status);
    proto_put_u(&en, status == 0 ? size : 0);
    if (status == 0 && inl)
        proto_put_bin(&en, zeros, size);
    else
        proto_put_nil(&en);
    proto_put_str(&en, status == 0 ? "" : "failed in test");
    proto_put_u(&en, run_us);
    assert_int_equal(proto_conn_send(w->conn, &en), 0);
}

/* The same after a short run (100 us). */
static void done(peer *w, uint64_t id, int64_t status, uint64_t size, bool inl)
{
    done_after(w, id, status, size, inl, 100);
}

static void put_place(peer *c, uint64_t id, uint64_t size)
{
    proto_enc en;
    proto_enc_begin(&en, proto_conn_out(c->conn), PROTO_PUT_PLACE, 3, 4);
    proto_put_id(&en, tid(id));
    proto_put_u(&en, size);
    proto_put_str(&en, "test_sched.c:3");
    proto_put_u(&en, 0);
    assert_int_equal(proto_conn_send(c->conn, &en), 0);
}

static sched_obj *obj(env *e, uint64_t id)
{
    return sched__obj_find(e->s, tid(id));
}

static int tstate(env *e, uint64_t id)
{
    sched_obj *o = obj(e, id);
    return o != NULL && sched__obj_producer(o) != NULL ? sched__obj_producer(o)->state : -1;
}

/* ---------------------------------------------------------------- fixture */

static void sched_done(void *arg)
{
    *(bool *)arg = true;
}

static void ctx_done(void *arg)
{
    ((peer *)arg)->ctx_closed = true;
}

/* max_frame: the scheduler's --max-frame, or 0 for its default. */
static int setup_frame(void **state, uint32_t max_frame)
{
    env *e = calloc(1, sizeof *e);
    assert_non_null(e);
    spw_log_level = SPW_LOG_ERR;
    assert_int_equal(uv_loop_init(&e->loop), 0);
    sched_opts o;
    sched_opts_default(&o);
    o.listen = "127.0.0.1:0";
    if (max_frame != 0)
        o.max_frame = max_frame;
    o.secret = (const uint8_t *)SECRET;
    o.secret_len = strlen(SECRET);
    assert_int_equal(sched_new(&e->loop, &o, &e->s, e->addr, sizeof e->addr), 0);
    *state = e;
    return 0;
}

static int setup(void **state)
{
    return setup_frame(state, 0);
}

static int setup_64k_frames(void **state)
{
    return setup_frame(state, 64 * 1024);
}

static int teardown(void **state)
{
    env *e = *state;
    for (uint32_t i = 0; i < e->npeers; i++)
        proto_ctx_close(e->peers[i].ctx, ctx_done, &e->peers[i]);
    sched_close(e->s, sched_done, &e->sched_closed);
    for (int i = 0; i < STEPS && !e->sched_closed; i++)
        uv_run(&e->loop, UV_RUN_NOWAIT);
    assert_true(e->sched_closed);
    for (uint32_t i = 0; i < e->npeers; i++)
        assert_true(e->peers[i].ctx_closed);
    uv_run(&e->loop, UV_RUN_DEFAULT); /* close callbacks still due; returns once none is left */
    assert_int_equal(uv_loop_close(&e->loop), 0);
    free(e);
    return 0;
}

/* ------------------------------------------------------------------ tests */

/* The message received for task id (of any type), or NULL. */
static const rx *find_rx(const peer *p, uint32_t type, spw_id id)
{
    for (uint32_t i = 0; i < p->n; i++)
        if (p->log[i].type == type && spw_id_eq(p->log[i].id, id))
            return &p->log[i];
    return NULL;
}

/* One record of a TASK_DONES: ok (stored result of 8 bytes), or with a malformed status. */
static void put_done_rec(proto_enc *en, uint64_t id, bool bad)
{
    proto_put_arr(en, 6);
    proto_put_id(en, tid(id));
    if (bad)
        proto_put_str(en, "not a status");
    else
        proto_put_i(en, 0);
    proto_put_u(en, 8);
    proto_put_nil(en);
    proto_put_str(en, "");
    proto_put_u(en, 10);
}

/* One dispatch pass sends a worker its tasks in one TASK_RUNS frame. A TASK_DONES with a bad
 * record (its task fails with SPW_EMALFORMED), a record for a task the worker does not run
 * (ERROR SPW_ENOOBJ) and one that is not a record (ERROR SPW_EMALFORMED) still completes its
 * good records, and the client gets all results. */
static void batch_with_bad_records_answers_them_and_takes_the_rest(void **state)
{
    env *e = *state;
    peer *w = peer_connect(e, PROTO_ROLE_WORKER, "w1", 4);
    peer *c = peer_connect(e, PROTO_ROLE_CLIENT, "client", 0);
    tspec t[3] = {{.id = 1, .flags = PROTO_TASK_KEEP},
                  {.id = 2, .flags = PROTO_TASK_KEEP},
                  {.id = 3, .flags = PROTO_TASK_KEEP}};
    submit(c, 1, 0, 0, t, 3);
    STEP_UNTIL(e, count(w, PROTO_TASK_RUN) == 3);
    assert_int_equal(find_rx(w, PROTO_TASK_RUN, tid(1))->frame,
                     find_rx(w, PROTO_TASK_RUN, tid(3))->frame);

    proto_enc en;
    proto_enc_begin(&en, proto_conn_out(w->conn), PROTO_TASK_DONES, 0, 1);
    proto_put_arr(&en, 5);
    put_done_rec(&en, 1, false);
    put_done_rec(&en, 2, true);
    put_done_rec(&en, 99, false);
    proto_put_u(&en, 5);
    put_done_rec(&en, 3, false);
    assert_int_equal(proto_conn_send(w->conn, &en), 0);

    STEP_UNTIL(e, got(c, PROTO_TASK_RESULT, tid(1)) && got(c, PROTO_TASK_RESULT, tid(2)) &&
                      got(c, PROTO_TASK_RESULT, tid(3)) && count(w, PROTO_ERROR) == 3);
    assert_int_equal(find_rx(c, PROTO_TASK_RESULT, tid(1))->code, 0);
    assert_int_equal(find_rx(c, PROTO_TASK_RESULT, tid(2))->code, SPW_EMALFORMED);
    assert_int_equal(find_rx(c, PROTO_TASK_RESULT, tid(3))->code, 0);
    assert_int_equal(tstate(e, 1), T_DONE);
    assert_int_equal(tstate(e, 2), T_FAILED);
    assert_int_equal(tstate(e, 3), T_DONE);
    assert_int_equal(e->s->workers[0]->assigned, 0);
    uint32_t codes[3] = {0}, k = 0;
    for (uint32_t i = 0; i < w->n; i++)
        if (w->log[i].type == PROTO_ERROR && k < 3)
            codes[k++] = (uint32_t)-w->log[i].code;
    /* In record order: the bad one, the unknown task, the non-record. */
    assert_int_equal(codes[0], (uint32_t)-SPW_EMALFORMED);
    assert_int_equal(codes[1], (uint32_t)-SPW_ENOOBJ);
    assert_int_equal(codes[2], (uint32_t)-SPW_EMALFORMED);
}

/* A lone completion is not held back for company: its result reaches the client within a few
 * loop iterations that never block (UV_RUN_NOWAIT), so no timer can be what sends it. */
static void lone_result_goes_out_in_the_same_iteration(void **state)
{
    env *e = *state;
    peer *w = peer_connect(e, PROTO_ROLE_WORKER, "w1", 1);
    peer *c = peer_connect(e, PROTO_ROLE_CLIENT, "client", 0);
    tspec t = {.id = 1, .flags = PROTO_TASK_KEEP};
    submit(c, 1, 0, 0, &t, 1);
    STEP_UNTIL(e, got(w, PROTO_TASK_RUN, tid(1)));
    done(w, 1, 0, 3, true);
    int steps = 0;
    while (!got(c, PROTO_TASK_RESULT, tid(1)) && steps < 64) {
        uv_run(&e->loop, UV_RUN_NOWAIT);
        steps++;
    }
    assert_true(got(c, PROTO_TASK_RESULT, tid(1)));
    sched__check_full(e->s);
}

/* WAITING -> READY -> ASSIGNED (TASK_RUN) -> RUNNING (TASK_STARTED) -> DONE, with the counts by
 * state, the OUTPUT reference of a kept result, and its release. */
static void task_moves_through_its_states(void **state)
{
    env *e = *state;
    peer *w = peer_connect(e, PROTO_ROLE_WORKER, "w1", 1);
    peer *c = peer_connect(e, PROTO_ROLE_CLIENT, "client", 0);
    tspec t = {.id = 1, .flags = PROTO_TASK_KEEP};
    submit(c, 1, 0, 0, &t, 1);
    STEP_UNTIL(e, got(w, PROTO_TASK_RUN, tid(1)));
    assert_int_equal(last(c, PROTO_SUBMIT_ACK)->u, 1);
    assert_int_equal(tstate(e, 1), T_ASSIGNED);
    assert_int_equal(e->s->tstate[T_ASSIGNED], 1);
    assert_int_equal(obj(e, 1)->refs[REF_OUTPUT], 1);
    assert_int_equal(e->s->workers[0]->assigned, 1);
    assert_int_equal(sched__obj_producer(obj(e, 1))->graph->inflight, 1);

    uint64_t ids[] = {1};
    send_ids(w, PROTO_TASK_STARTED, ids, 1);
    STEP_UNTIL(e, tstate(e, 1) == T_RUNNING);
    assert_int_equal(e->s->tstate[T_RUNNING], 1);
    assert_int_equal(e->s->tstate[T_ASSIGNED], 0);

    done(w, 1, 0, 3, true);
    STEP_UNTIL(e, got(c, PROTO_TASK_RESULT, tid(1)));
    assert_int_equal(last(c, PROTO_TASK_RESULT)->code, 0);
    assert_int_equal(tstate(e, 1), T_DONE);
    assert_int_equal(obj(e, 1)->state, OBJ_READY);
    assert_int_equal(e->s->workers[0]->assigned, 0);
    assert_int_equal(e->s->obj_bytes, 3);

    send_ids(c, PROTO_RELEASE, ids, 1);
    STEP_UNTIL(e, obj(e, 1) == NULL);
    assert_int_equal(e->s->refs[REF_OUTPUT], 0);
    assert_int_equal(e->s->tstate[T_DONE], 0);
    assert_int_equal(e->s->obj_bytes, 0);
    /* A second release changes nothing and is refused. */
    send_ids(c, PROTO_RELEASE, ids, 1);
    STEP_UNTIL(e, count(c, PROTO_ERROR) == 1);
    assert_int_equal(last(c, PROTO_ERROR)->code, SPW_ENOTHELD);
}

/* A -> B: A's output is held by B's argument (TASK_ARG) and counted in the graph's live bytes
 * until B finishes; then nothing holds it, it is freed and its worker told to delete it. */
static void input_is_released_after_its_consumer(void **state)
{
    env *e = *state;
    peer *w = peer_connect(e, PROTO_ROLE_WORKER, "w1", 1);
    peer *c = peer_connect(e, PROTO_ROLE_CLIENT, "client", 0);
    tspec ts[] = {{.id = 1}, {.id = 2, .args = {1}, .nargs = 1, .flags = PROTO_TASK_KEEP}};
    submit(c, 1, 0, 0, ts, 2);
    STEP_UNTIL(e, got(w, PROTO_TASK_RUN, tid(1)));
    assert_int_equal(tstate(e, 2), T_WAITING); /* sent ahead, but waiting all the same */
    assert_int_equal(sched__obj_producer(obj(e, 2))->ndeps, 1);
    assert_int_equal(obj(e, 1)->refs[REF_TASK_ARG], 1);
    assert_int_equal(obj(e, 1)->refs[REF_OUTPUT], 0);
    assert_int_equal(obj(e, 2)->refs[REF_OUTPUT], 1);

    done(w, 1, 0, 1000, false); /* stored on the worker, not inline */
    STEP_UNTIL(e, tstate(e, 2) == T_ASSIGNED);
    sched_obj *a = obj(e, 1);
    assert_non_null(a);
    assert_int_equal(a->nlocs, 1);
    assert_int_equal(a->locs[0], w->session);
    sched_graph *g = sched__obj_producer(obj(e, 2))->graph;
    assert_int_equal(g->live_bytes, 1000);

    done(w, 2, 0, 8, true);
    STEP_UNTIL(e, got(c, PROTO_TASK_RESULT, tid(2)) && got(w, PROTO_OBJ_DELETE, tid(1)));
    assert_null(obj(e, 1));
    assert_int_equal(g->live_bytes, 0);
    assert_int_equal(e->s->refs[REF_TASK_ARG], 0);
    assert_int_equal(g->counts[T_DONE], 2);
}

/* A kept output is not on its session's building list (its OUTPUT reference holds it), but if
 * the client releases it before the graph's last frame, the graph holds it from then on, so a
 * task of a later frame may still consume it. */
static void kept_output_released_mid_graph_is_held_for_it(void **state)
{
    env *e = *state;
    peer *c = peer_connect(e, PROTO_ROLE_CLIENT, "client", 0);
    tspec t1 = {.id = 1, .flags = PROTO_TASK_KEEP};
    submit_frame(c, 1, false, 0, 0, &t1, 1);
    STEP_UNTIL(e, obj(e, 1) != NULL);
    sched_session *ss = e->s->sessions;
    assert_int_equal(ss->nbuilding, 0);
    assert_int_equal(obj(e, 1)->graph_hold, 0);
    uint64_t ids[] = {1};
    send_ids(c, PROTO_RELEASE, ids, 1);
    STEP_UNTIL(e, obj(e, 1)->refs[REF_OUTPUT] == 0);
    assert_int_equal(obj(e, 1)->graph_hold, 1);
    assert_int_equal(ss->nbuilding, 1);
    tspec t2 = {.id = 2, .args = {1}, .nargs = 1, .flags = PROTO_TASK_KEEP};
    submit_frame(c, 1, true, 0, 0, &t2, 1);
    STEP_UNTIL(e, count(c, PROTO_SUBMIT_ACK) == 1);
    assert_int_equal(count(c, PROTO_ERROR), 0);
    assert_int_equal(obj(e, 1)->graph_hold, 0);
    assert_int_equal(obj(e, 1)->refs[REF_TASK_ARG], 1);
    assert_int_equal(ss->nbuilding, 0);
    /* Releasing the consumer frees both (neither ran). */
    uint64_t ids2[] = {2};
    send_ids(c, PROTO_RELEASE, ids2, 1);
    STEP_UNTIL(e, obj(e, 2) == NULL && obj(e, 1) == NULL);
}

/* A failed input fails its consumer, whose client hears why. */
static void failure_propagates_to_consumers(void **state)
{
    env *e = *state;
    peer *w = peer_connect(e, PROTO_ROLE_WORKER, "w1", 1);
    peer *c = peer_connect(e, PROTO_ROLE_CLIENT, "client", 0);
    tspec ts[] = {{.id = 1}, {.id = 2, .args = {1}, .nargs = 1, .flags = PROTO_TASK_KEEP}};
    submit(c, 1, 0, 0, ts, 2);
    STEP_UNTIL(e, got(w, PROTO_TASK_RUN, tid(1)));
    done(w, 1, 1, 0, false);
    STEP_UNTIL(e, got(c, PROTO_TASK_RESULT, tid(2)));
    assert_int_equal(last(c, PROTO_TASK_RESULT)->code, SPW_EDEPFAILED);
    assert_int_equal(tstate(e, 2), T_FAILED);
    assert_null(obj(e, 1)); /* nobody holds the failed input */
    assert_int_equal(count(w, PROTO_TASK_RUN), 2); /* 2 was sent ahead, never again */
    /* The worker drops what it held for 1 (test_ahead_* below). */
    done(w, 2, SPW_EAHEAD, 0, false);
    STEP_UNTIL(e, e->s->workers[0]->ahead == 0);
}

/* A worker's status that is neither 0 nor an error code fails its task with SPW_EPROTO. One
 * past an int was cast to int: 2^32 read as 0, a success with no output made; a positive one
 * reached the client as the task's result, which a call returns as it is (positive, where every
 * call returns 0 or a negative code). */
static void worker_status_that_is_no_code_fails_the_task(void **state)
{
    env *e = *state;
    peer *w = peer_connect(e, PROTO_ROLE_WORKER, "w1", 2);
    peer *c = peer_connect(e, PROTO_ROLE_CLIENT, "client", 0);
    tspec ts[] = {{.id = 1, .flags = PROTO_TASK_KEEP}, {.id = 2, .flags = PROTO_TASK_KEEP}};
    submit(c, 1, 0, 0, ts, 2);
    STEP_UNTIL(e, got(w, PROTO_TASK_RUN, tid(1)) && got(w, PROTO_TASK_RUN, tid(2)));
    done(w, 1, INT64_C(1) << 32, 0, false);
    done(w, 2, 7, 0, false);
    STEP_UNTIL(e, got(c, PROTO_TASK_RESULT, tid(1)) && got(c, PROTO_TASK_RESULT, tid(2)));
    assert_int_equal(find_rx(c, PROTO_TASK_RESULT, tid(1))->code, SPW_EPROTO);
    assert_int_equal(find_rx(c, PROTO_TASK_RESULT, tid(2))->code, SPW_EPROTO);
    assert_int_equal(tstate(e, 1), T_FAILED);
    assert_int_equal(tstate(e, 2), T_FAILED);
    assert_non_null(strstr(find_rx(c, PROTO_TASK_RESULT, tid(1))->err, "status 4294967296"));
}

/* A graph's cap on tasks in flight holds the rest back although the worker has room. */
static void graph_task_cap_holds_back(void **state)
{
    env *e = *state;
    peer *w = peer_connect(e, PROTO_ROLE_WORKER, "w1", 8);
    peer *c = peer_connect(e, PROTO_ROLE_CLIENT, "client", 0);
    tspec ts[] = {{.id = 1, .flags = PROTO_TASK_KEEP},
                  {.id = 2, .flags = PROTO_TASK_KEEP},
                  {.id = 3, .flags = PROTO_TASK_KEEP},
                  {.id = 4, .flags = PROTO_TASK_KEEP}};
    submit(c, 1, 2, 0, ts, 4);
    STEP_UNTIL(e, count(w, PROTO_TASK_RUN) == 2);
    settle(e);
    assert_int_equal(count(w, PROTO_TASK_RUN), 2);
    assert_int_equal(e->s->tstate[T_READY], 2);
    sched_graph *g = sched__obj_producer(obj(e, 1))->graph;
    assert_int_equal(g->inflight, 2);
    done(w, nth_run(w, 0), 0, 1, true);
    STEP_UNTIL(e, count(w, PROTO_TASK_RUN) == 3);
    settle(e);
    assert_int_equal(count(w, PROTO_TASK_RUN), 3);
    assert_int_equal(g->inflight, 2);
}

/* The byte cap holds back sources once a graph's unconsumed outputs would pass it, and a graph
 * with nothing in flight may always start one task, so a consumer that needs every source is
 * reached. */
static void graph_byte_cap_holds_back_sources(void **state)
{
    env *e = *state;
    peer *w = peer_connect(e, PROTO_ROLE_WORKER, "w1", 1); /* two tasks queued at most */
    peer *c = peer_connect(e, PROTO_ROLE_CLIENT, "client", 0);
    tspec ts[] = {{.id = 1},
                  {.id = 2},
                  {.id = 3},
                  {.id = 4, .args = {1, 2, 3}, .nargs = 3, .flags = PROTO_TASK_KEEP}};
    submit(c, 1, 0, 1500, ts, 4);
    STEP_UNTIL(e, count(w, PROTO_TASK_RUN) == 2);
    done(w, nth_run(w, 0), 0, 1000, false);
    settle(e);
    /* 1000 live + 2 x 1000 expected > 1500: the third source waits although a slot is free. */
    assert_int_equal(count(w, PROTO_TASK_RUN), 2);
    done(w, nth_run(w, 1), 0, 1000, false);
    STEP_UNTIL(e, got(w, PROTO_TASK_RUN, tid(3)));
    done(w, 3, 0, 1000, false);
    STEP_UNTIL(e, got(w, PROTO_TASK_RUN, tid(4)));
    done(w, 4, 0, 8, true);
    STEP_UNTIL(e, got(c, PROTO_TASK_RESULT, tid(4)));
    assert_int_equal(sched__obj_producer(obj(e, 4))->graph->live_bytes, 0);
}

/* Tasks go to the worker that holds their input. */
static void task_placed_where_its_input_is(void **state)
{
    env *e = *state;
    peer *w1 = peer_connect(e, PROTO_ROLE_WORKER, "w1", 1);
    peer *c = peer_connect(e, PROTO_ROLE_CLIENT, "client", 0);
    tspec a = {.id = 1, .flags = PROTO_TASK_KEEP};
    submit(c, 1, 0, 0, &a, 1);
    STEP_UNTIL(e, got(w1, PROTO_TASK_RUN, tid(1)));
    peer *w2 = peer_connect(e, PROTO_ROLE_WORKER, "w2", 1);
    done(w1, 1, 0, 5000, false);
    STEP_UNTIL(e, tstate(e, 1) == T_DONE);
    /* Both workers are idle; the consumers go to w1, which holds the input. */
    tspec b[] = {{.id = 2, .args = {1}, .nargs = 1, .flags = PROTO_TASK_KEEP},
                 {.id = 3, .args = {1}, .nargs = 1, .flags = PROTO_TASK_KEEP}};
    submit(c, 2, 0, 0, b, 2);
    STEP_UNTIL(e, got(w1, PROTO_TASK_RUN, tid(2)) && got(w1, PROTO_TASK_RUN, tid(3)));
    assert_int_equal(count(w2, PROTO_TASK_RUN), 0);
    assert_ptr_equal(sched__obj_producer(obj(e, 2))->worker, e->s->workers[0]);
}

/* Three 1-slot workers w1, w2, w3 into w. */
static void three_workers(env *e, peer *w[3])
{
    w[0] = peer_connect(e, PROTO_ROLE_WORKER, "w1", 1);
    w[1] = peer_connect(e, PROTO_ROLE_WORKER, "w2", 1);
    w[2] = peer_connect(e, PROTO_ROLE_WORKER, "w3", 1);
}

/* TASK_RUN messages the three workers got together. */
static uint32_t runs_of_three(peer *const w[3])
{
    return count(w[0], PROTO_TASK_RUN) + count(w[1], PROTO_TASK_RUN) +
           count(w[2], PROTO_TASK_RUN);
}

/* Independent tasks go to the least loaded workers (the load heap, workers.c): three 1-slot
 * workers get one task each; the next task goes to the one that finished. */
static void tasks_go_to_the_least_loaded(void **state)
{
    env *e = *state;
    peer *w[3];
    three_workers(e, w);
    peer *c = peer_connect(e, PROTO_ROLE_CLIENT, "client", 0);
    tspec ts[] = {{.id = 1, .flags = PROTO_TASK_KEEP},
                  {.id = 2, .flags = PROTO_TASK_KEEP},
                  {.id = 3, .flags = PROTO_TASK_KEEP}};
    submit(c, 1, 0, 0, ts, 3);
    STEP_UNTIL(e, runs_of_three(w) == 3);
    for (int i = 0; i < 3; i++)
        assert_int_equal(count(w[i], PROTO_TASK_RUN), 1);
    /* w2 finishes: the next task goes to it (load 0), not to a worker with load 1. */
    uint64_t r2 = nth_run(w[1], 0);
    done(w[1], r2, 0, 0, true);
    STEP_UNTIL(e, tstate(e, r2) == T_DONE);
    tspec more[] = {{.id = 4, .flags = PROTO_TASK_KEEP}};
    submit(c, 2, 0, 0, more, 1);
    STEP_UNTIL(e, got(w[1], PROTO_TASK_RUN, tid(4)));
    for (uint32_t i = 0; i < e->s->nworkers; i++)
        assert_int_equal(e->s->workers[i]->assigned, 1);
}

/* Sources that make big stored outputs are dealt evenly. Three 1-slot workers get two each of
 * twelve (a function not run yet queues two deep). w1 finishes its first with 4 MiB after
 * 100 ms (the function is long now: one queued per slot) and gets one more, and when it
 * finishes its second it gets none while w2 and w3, behind it in the deal, are busy; w2
 * finishes one and takes the next. */
static void big_sources_are_dealt_evenly(void **state)
{
    env *e = *state;
    peer *w[3];
    three_workers(e, w);
    peer *c = peer_connect(e, PROTO_ROLE_CLIENT, "client", 0);
    tspec ts[12];
    for (uint64_t i = 0; i < 12; i++)
        ts[i] = (tspec){.id = 1 + i, .flags = PROTO_TASK_KEEP};
    submit(c, 1, 0, 0, ts, 12);
    STEP_UNTIL(e, runs_of_three(w) == 6);
    for (int i = 0; i < 3; i++)
        assert_int_equal(count(w[i], PROTO_TASK_RUN), 2);
    done_after(w[0], nth_run(w[0], 0), 0, 4u << 20, false, 100000);
    STEP_UNTIL(e, count(w[0], PROTO_TASK_RUN) == 3);
    done_after(w[0], nth_run(w[0], 1), 0, 4u << 20, false, 100000);
    STEP_UNTIL(e, tstate(e, nth_run(w[0], 1)) == T_DONE);
    settle(e);
    assert_int_equal(count(w[0], PROTO_TASK_RUN), 3);
    done_after(w[1], nth_run(w[1], 0), 0, 4u << 20, false, 100000);
    STEP_UNTIL(e, count(w[1], PROTO_TASK_RUN) == 3);
    settle(e);
    assert_int_equal(count(w[0], PROTO_TASK_RUN), 3);
    assert_int_equal(count(w[2], PROTO_TASK_RUN), 2);
}

/* How many of its graph's big sources task id's graph gave worker p. */
static uint32_t dealt_to(env *e, uint64_t id, const peer *p)
{
    sched_spread *d = NULL;
    uint32_t worker = (uint32_t)p->session;
    HASH_FIND(hh, sched__obj_producer(obj(e, id))->graph->spread, &worker, sizeof worker, d);
    return d != NULL ? d->n : 0;
}

/* A big source taken back from the worker it was queued on no longer counts there. Two 1-slot
 * workers get two each of five sources; w1 finishes one (4 MiB, 100 ms) and gets the fifth,
 * queued; w2 finishes both of its own and, with nothing ready, takes the fifth back: the deal
 * then counts two for w1 and three for w2, as they ran. */
static void big_source_taken_back_leaves_the_deal(void **state)
{
    env *e = *state;
    peer *w1 = peer_connect(e, PROTO_ROLE_WORKER, "w1", 1);
    peer *w2 = peer_connect(e, PROTO_ROLE_WORKER, "w2", 1);
    peer *c = peer_connect(e, PROTO_ROLE_CLIENT, "client", 0);
    tspec ts[5];
    for (uint64_t i = 0; i < 5; i++)
        ts[i] = (tspec){.id = 1 + i, .flags = PROTO_TASK_KEEP};
    submit(c, 1, 0, 0, ts, 5);
    STEP_UNTIL(e, count(w1, PROTO_TASK_RUN) == 2 && count(w2, PROTO_TASK_RUN) == 2);
    done_after(w1, nth_run(w1, 0), 0, 4u << 20, false, 100000);
    STEP_UNTIL(e, count(w1, PROTO_TASK_RUN) == 3);
    uint64_t fifth = nth_run(w1, 2);
    done_after(w2, nth_run(w2, 0), 0, 4u << 20, false, 100000);
    done_after(w2, nth_run(w2, 1), 0, 4u << 20, false, 100000);
    STEP_UNTIL(e, got(w1, PROTO_TASK_CANCEL, tid(fifth)));
    done(w1, fifth, SPW_ECANCELED, 0, false);
    STEP_UNTIL(e, got(w2, PROTO_TASK_RUN, tid(fifth)));
    assert_int_equal(dealt_to(e, fifth, w1), 2);
    assert_int_equal(dealt_to(e, fifth, w2), 3);
}

/* Whether a task queued on w1 behind a running one, over an input of `size` bytes that w1 made,
 * is taken back when w2 goes idle. The function runs 100 ms; no move was seen yet, so moving
 * the input counts at the guessed rate (100 MB/s). */
static bool queued_over_input_taken_back(env *e, uint64_t size)
{
    peer *w1 = peer_connect(e, PROTO_ROLE_WORKER, "w1", 1);
    peer *c = peer_connect(e, PROTO_ROLE_CLIENT, "client", 0);
    tspec a = {.id = 1, .flags = PROTO_TASK_KEEP};
    submit(c, 1, 0, 0, &a, 1);
    STEP_UNTIL(e, got(w1, PROTO_TASK_RUN, tid(1)));
    done_after(w1, 1, 0, size, false, 100000);
    STEP_UNTIL(e, tstate(e, 1) == T_DONE);
    peer *w2 = peer_connect(e, PROTO_ROLE_WORKER, "w2", 1);
    tspec busy[] = {{.id = 2, .flags = PROTO_TASK_KEEP}, {.id = 3, .flags = PROTO_TASK_KEEP}};
    submit(c, 2, 0, 0, busy, 2);
    STEP_UNTIL(e, count(w1, PROTO_TASK_RUN) == 2 && count(w2, PROTO_TASK_RUN) == 1);
    tspec over = {.id = 4, .args = {1}, .nargs = 1, .flags = PROTO_TASK_KEEP};
    submit(c, 3, 0, 0, &over, 1);
    STEP_UNTIL(e, got(w1, PROTO_TASK_RUN, tid(4)));
    done_after(w2, nth_run(w2, 0), 0, 8, true, 100000);
    STEP_UNTIL(e, tstate(e, nth_run(w2, 0)) == T_DONE);
    settle(e);
    return got(w1, PROTO_TASK_CANCEL, tid(4));
}

/* A task queued on a busy worker whose input there would take longer to move than the task
 * runs (64 MiB at 100 MB/s: 0.67 s, against 100 ms) waits there when another worker goes idle;
 * one over 1 MiB (10 ms) is taken back for the idle worker. */
static void queued_task_stays_with_a_large_input(void **state)
{
    assert_false(queued_over_input_taken_back(*state, 64u << 20));
}

static void queued_task_over_a_small_input_is_taken_back(void **state)
{
    assert_true(queued_over_input_taken_back(*state, 1u << 20));
}

/* A chain of inline results stays on the worker that ran its first task while that worker has a
 * free slot, though two other workers are idle (locality: a hop never lands on a cold worker). */
static void chain_stays_on_its_worker(void **state)
{
    env *e = *state;
    peer *w[3];
    three_workers(e, w);
    peer *c = peer_connect(e, PROTO_ROLE_CLIENT, "client", 0);
    tspec chain[] = {{.id = 1},
                     {.id = 2, .args = {1}, .nargs = 1},
                     {.id = 3, .args = {2}, .nargs = 1},
                     {.id = 4, .args = {3}, .nargs = 1, .flags = PROTO_TASK_KEEP}};
    submit(c, 1, 0, 0, chain, 4);
    STEP_UNTIL(e, got(w[0], PROTO_TASK_RUN, tid(1)) || got(w[1], PROTO_TASK_RUN, tid(1)) ||
                      got(w[2], PROTO_TASK_RUN, tid(1)));
    peer *home = got(w[0], PROTO_TASK_RUN, tid(1))   ? w[0]
                 : got(w[1], PROTO_TASK_RUN, tid(1)) ? w[1]
                                                     : w[2];
    for (uint64_t id = 1; id < 4; id++) {
        done(home, id, 0, 8, true);
        STEP_UNTIL(e, got(home, PROTO_TASK_RUN, tid(id + 1)));
    }
    done(home, 4, 0, 8, true);
    STEP_UNTIL(e, tstate(e, 4) == T_DONE);
    assert_int_equal(count(home, PROTO_TASK_RUN), 4);
    for (int i = 0; i < 3; i++)
        if (w[i] != home)
            assert_int_equal(count(w[i], PROTO_TASK_RUN), 0);
}

/* A client that goes away: its ready tasks are dropped at once, its assigned ones are
 * cancelled on the worker (TASK_CANCEL) and freed when the worker answers. */
static void client_disconnect_cancels_its_tasks(void **state)
{
    env *e = *state;
    peer *w = peer_connect(e, PROTO_ROLE_WORKER, "w1", 1); /* two tasks queued at most */
    peer *c = peer_connect(e, PROTO_ROLE_CLIENT, "client", 0);
    tspec ts[] = {{.id = 1, .flags = PROTO_TASK_KEEP},
                  {.id = 2, .flags = PROTO_TASK_KEEP},
                  {.id = 3, .flags = PROTO_TASK_KEEP}};
    submit(c, 1, 0, 0, ts, 3);
    STEP_UNTIL(e, count(w, PROTO_TASK_RUN) == 2);
    assert_int_equal(e->s->tstate[T_READY], 1);
    uint64_t r1 = nth_run(w, 0), r2 = nth_run(w, 1);
    uint64_t started[] = {r1};
    send_ids(w, PROTO_TASK_STARTED, started, 1);
    STEP_UNTIL(e, tstate(e, r1) == T_RUNNING);

    peer_close(e, c);
    STEP_UNTIL(e, count(w, PROTO_TASK_CANCEL) >= 1 && e->s->tstate[T_READY] == 0);
    assert_true(got(w, PROTO_TASK_CANCEL, tid(r1)) && got(w, PROTO_TASK_CANCEL, tid(r2)));
    assert_true(obj(e, r1)->orphan && obj(e, r2)->orphan);
    assert_int_equal(e->s->objects.n, 2);
    assert_int_equal(HASH_COUNT(e->s->sessions), 0);

    done(w, r2, SPW_ECANCELED, 0, false); /* not started: dropped by the worker */
    done(w, r1, 0, 100, false);           /* was running: it finishes */
    /* The stored result nobody wants is deleted on the worker. */
    STEP_UNTIL(e, e->s->objects.n == 0 && got(w, PROTO_OBJ_DELETE, tid(r1)));
    assert_int_equal(e->s->workers[0]->assigned, 0);
    for (int k = 0; k < PROTO_TSTATE_COUNT; k++)
        assert_int_equal(e->s->tstate[k], 0);
}

/* A worker that dies: its assigned tasks go back to the queue and run on another worker; an
 * output whose only copy was there is recomputed for its waiting consumer (lineage). */
static void worker_death_requeues_and_recomputes(void **state)
{
    env *e = *state;
    peer *w1 = peer_connect(e, PROTO_ROLE_WORKER, "w1", 4);
    peer *c = peer_connect(e, PROTO_ROLE_CLIENT, "client", 0);
    tspec ts[] = {{.id = 1},
                  {.id = 2},
                  {.id = 3, .args = {1, 2}, .nargs = 2, .flags = PROTO_TASK_KEEP}};
    submit(c, 1, 0, 0, ts, 3);
    STEP_UNTIL(e, got(w1, PROTO_TASK_RUN, tid(1)) && got(w1, PROTO_TASK_RUN, tid(2)));
    done(w1, 1, 0, 2000, false);
    STEP_UNTIL(e, tstate(e, 1) == T_DONE);
    assert_int_equal(obj(e, 1)->nlocs, 1);

    peer *w2 = peer_connect(e, PROTO_ROLE_WORKER, "w2", 4);
    peer_close(e, w1);
    /* Task 2 was assigned there: retried; task 1's output was only there: recomputed. */
    STEP_UNTIL(e, got(w2, PROTO_TASK_RUN, tid(1)) && got(w2, PROTO_TASK_RUN, tid(2)));
    assert_int_equal(sched__obj_producer(obj(e, 1))->retries, 1);
    assert_int_equal(sched__obj_producer(obj(e, 2))->retries, 1);
    assert_int_equal(obj(e, 1)->nlocs, 0);
    assert_int_equal(tstate(e, 3), T_WAITING);
    assert_int_equal(sched__obj_producer(obj(e, 3))->ndeps, 2);
    done(w2, 1, 0, 2000, false);
    done(w2, 2, 0, 2000, false);
    STEP_UNTIL(e, got(w2, PROTO_TASK_RUN, tid(3)));
    done(w2, 3, 0, 4, true);
    STEP_UNTIL(e, got(c, PROTO_TASK_RESULT, tid(3)));
    assert_int_equal(last(c, PROTO_TASK_RESULT)->code, 0);
    STEP_UNTIL(e, e->s->objects.n == 1); /* only the kept result */
}

/* The chain 1 -> 2 -> 3 (3 kept) on w1: task 1's result is inline, `size` bytes (0 like
 * sleep_ms's), task 2's is stored on w1. Task 2 finishing drops the last reference to task 1's
 * output, so its record goes. Then w1 dies before task 3 reports (w2 is there): returns w2 and
 * the client. Task 2's output must then be made again (lineage) from the value task 2 was given,
 * not given up on for want of task 1's record (that was
 * multihost.partition_mid_job_then_worker_serves_next_job's failure under load: the output
 * lost, and task 3 failing with "no worker holds a copy"). */
static peer *chain_loses_output_after_input_released(env *e, uint64_t size, peer **client)
{
    peer *w1 = peer_connect(e, PROTO_ROLE_WORKER, "w1", 1);
    peer *c = peer_connect(e, PROTO_ROLE_CLIENT, "client", 0);
    tspec ts[] = {{.id = 1},
                  {.id = 2, .args = {1}, .nargs = 1},
                  {.id = 3, .args = {2}, .nargs = 1, .flags = PROTO_TASK_KEEP}};
    submit(c, 1, 0, 0, ts, 3);
    STEP_UNTIL(e, got(w1, PROTO_TASK_RUN, tid(1)) && got(w1, PROTO_TASK_RUN, tid(2)));
    done(w1, 1, 0, size, true);
    STEP_UNTIL(e, tstate(e, 2) == T_ASSIGNED);
    done(w1, 2, 0, 2000, false);
    STEP_UNTIL(e, tstate(e, 2) == T_DONE && tstate(e, 3) == T_ASSIGNED);
    /* Nothing references task 1's output any more: its record is gone, or (a value too large to
     * keep in task 2's argument) a husk kept for lineage. */
    assert_true(obj(e, 1) == NULL || obj(e, 1)->husk);
    assert_int_equal(obj(e, 2)->nlocs, 1);
    peer *w2 = peer_connect(e, PROTO_ROLE_WORKER, "w2", 1);
    peer_close(e, w1);
    *client = c;
    return w2;
}

static void lost_output_remade_from_a_released_inline_input(env *e, uint64_t size)
{
    peer *c;
    peer *w2 = chain_loses_output_after_input_released(e, size, &c);
    /* Task 2 runs again on w2, given task 1's value inline; task 3 waits for it. */
    STEP_UNTIL(e, got(w2, PROTO_TASK_RUN, tid(2)));
    const rx *r = find_rx(w2, PROTO_TASK_RUN, tid(2));
    assert_int_equal(r->arg0_kind, PROTO_ARG_INLINE);
    assert_int_equal(r->arg0_len, (int64_t)size);
    assert_int_equal(obj(e, 2)->state, OBJ_PENDING);
    assert_int_equal(tstate(e, 3), T_WAITING);
    done(w2, 2, 0, 2000, false);
    STEP_UNTIL(e, tstate(e, 3) == T_ASSIGNED || tstate(e, 3) == T_RUNNING);
    done(w2, 3, 0, 8, true);
    STEP_UNTIL(e, got(c, PROTO_TASK_RESULT, tid(3)));
    assert_int_equal(last(c, PROTO_TASK_RESULT)->code, 0);
    uint64_t kept[] = {3};
    send_ids(c, PROTO_RELEASE, kept, 1);
    STEP_UNTIL(e, e->s->objects.n == 0);
}

/* An empty value (sleep_ms's) is kept with no bytes. */
static void lost_output_remade_from_a_released_empty_input(void **state)
{
    lost_output_remade_from_a_released_inline_input(*state, 0);
}

/* A small value is kept in the argument's own record, up to its 16 bytes. */
static void lost_output_remade_from_a_released_small_input(void **state)
{
    lost_output_remade_from_a_released_inline_input(*state, 8);
}

static void lost_output_remade_from_a_released_16_byte_input(void **state)
{
    lost_output_remade_from_a_released_inline_input(*state, SCHED_ARG_KEEP_MAX);
}

/* Runs task id on w, once the scheduler has it assigned there (sent ahead or not): a stored
 * result of `size` bytes. */
static void run_stored(env *e, peer *w, uint64_t id, uint64_t size)
{
    STEP_UNTIL(e, (tstate(e, id) == T_ASSIGNED || tstate(e, id) == T_RUNNING) &&
                      sched__obj_producer(obj(e, id))->worker != NULL &&
                      sched__obj_producer(obj(e, id))->worker->conn != NULL &&
                      runs(w, id, NULL) > 0);
    done(w, id, 0, size, false);
}

/* A larger inline value is not kept in the argument (a copy per finished task would be memory
 * no listing shows): task 1's record stays instead, a husk, and task 1 runs again before task
 * 2 when task 2's output is lost. */
static void lost_output_of_a_larger_released_input_is_remade_with_it(void **state)
{
    env *e = *state;
    peer *c;
    peer *w2 = chain_loses_output_after_input_released(e, SCHED_ARG_KEEP_MAX + 1, &c);
    STEP_UNTIL(e, got(w2, PROTO_TASK_RUN, tid(1)));
    assert_int_equal(obj(e, 1)->state, OBJ_PENDING);
    assert_false(obj(e, 1)->husk);
    assert_int_equal(tstate(e, 2), T_WAITING);
    assert_int_equal(e->s->lineage_reruns, 2);
    done(w2, 1, 0, SCHED_ARG_KEEP_MAX + 1, true);
    run_stored(e, w2, 2, 2000);
    STEP_UNTIL(e, tstate(e, 3) == T_ASSIGNED || tstate(e, 3) == T_RUNNING);
    done(w2, 3, 0, 8, true);
    STEP_UNTIL(e, got(c, PROTO_TASK_RESULT, tid(3)));
    assert_int_equal(last(c, PROTO_TASK_RESULT)->code, 0);
    uint64_t kept[] = {3};
    send_ids(c, PROTO_RELEASE, kept, 1);
    STEP_UNTIL(e, e->s->objects.n == 0);
}

/* Every output of the chain 1 -> 2 -> 3 (3 kept) is stored on w1, and w1 dies once all are
 * done: the kept output is made again by running all three again, once each, though the
 * first two outputs were released long before; the husks kept for that go with the result. */
static void lost_chain_is_remade_all_the_way_down(void **state)
{
    env *e = *state;
    peer *w1 = peer_connect(e, PROTO_ROLE_WORKER, "w1", 1);
    peer *c = peer_connect(e, PROTO_ROLE_CLIENT, "client", 0);
    tspec ts[] = {{.id = 1},
                  {.id = 2, .args = {1}, .nargs = 1},
                  {.id = 3, .args = {2}, .nargs = 1, .flags = PROTO_TASK_KEEP}};
    submit(c, 1, 0, 0, ts, 3);
    for (uint64_t k = 1; k <= 3; k++)
        run_stored(e, w1, k, 1000 * k);
    STEP_UNTIL(e, got(c, PROTO_TASK_RESULT, tid(3)));
    assert_true(obj(e, 1)->husk && obj(e, 2)->husk);
    assert_int_equal(e->s->nhusks, 2);
    peer *w2 = peer_connect(e, PROTO_ROLE_WORKER, "w2", 1);
    peer_close(e, w1);
    STEP_UNTIL(e, obj(e, 3)->state == OBJ_PENDING);
    assert_int_equal(e->s->lineage_reruns, 3);
    for (uint64_t k = 1; k <= 3; k++)
        run_stored(e, w2, k, 1000 * k);
    STEP_UNTIL(e, obj(e, 3)->state == OBJ_READY);
    for (uint64_t k = 1; k <= 3; k++)
        assert_int_equal(runs(w2, k, NULL), 1);
    assert_int_equal(e->s->lineage_reruns, 3);
    uint64_t kept[] = {3};
    send_ids(c, PROTO_RELEASE, kept, 1);
    STEP_UNTIL(e, e->s->objects.n == 0);
    assert_int_equal(e->s->nhusks, 0);
}

/* A diamond 1 -> {2, 3} -> 4 (4 kept), every output stored on w1, which dies: task 1, which
 * both lost outputs need, runs again once. */
static void diamond_producer_runs_again_once_per_loss(void **state)
{
    env *e = *state;
    peer *w1 = peer_connect(e, PROTO_ROLE_WORKER, "w1", 1);
    peer *c = peer_connect(e, PROTO_ROLE_CLIENT, "client", 0);
    tspec ts[] = {{.id = 1},
                  {.id = 2, .args = {1}, .nargs = 1},
                  {.id = 3, .args = {1}, .nargs = 1},
                  {.id = 4, .args = {2, 3}, .nargs = 2, .flags = PROTO_TASK_KEEP}};
    submit(c, 1, 0, 0, ts, 4);
    for (uint64_t k = 1; k <= 4; k++)
        run_stored(e, w1, k, 1000 * k);
    STEP_UNTIL(e, got(c, PROTO_TASK_RESULT, tid(4)));
    peer *w2 = peer_connect(e, PROTO_ROLE_WORKER, "w2", 1);
    peer_close(e, w1);
    STEP_UNTIL(e, obj(e, 4)->state == OBJ_PENDING);
    assert_int_equal(e->s->lineage_reruns, 4);
    run_stored(e, w2, 1, 1000);
    run_stored(e, w2, 2, 2000);
    run_stored(e, w2, 3, 3000);
    run_stored(e, w2, 4, 4000);
    STEP_UNTIL(e, obj(e, 4)->state == OBJ_READY);
    for (uint64_t k = 1; k <= 4; k++)
        assert_int_equal(runs(w2, k, NULL), 1);
    uint64_t kept[] = {4};
    send_ids(c, PROTO_RELEASE, kept, 1);
    STEP_UNTIL(e, e->s->objects.n == 0);
}

/* ---------------------------------------------------- sending ahead (tasks.c) */

/* Submits the chain 1 -> 2 -> ... -> n (the last kept) and returns the worker of peers w[0..nw)
 * that got task 1. */
static peer *submit_chain(env *e, peer *c, peer **w, int nw, uint64_t n)
{
    tspec ts[8];
    for (uint64_t i = 0; i < n; i++)
        ts[i] = (tspec){.id = i + 1,
                        .args = {i},
                        .nargs = i > 0 ? 1 : 0,
                        .flags = i == n - 1 ? PROTO_TASK_KEEP : 0};
    submit(c, 1, 0, 0, ts, (uint32_t)n);
    peer *home = NULL;
    for (int step = 0; step < STEPS && home == NULL; step++) {
        uv_run(&e->loop, UV_RUN_NOWAIT);
        for (int i = 0; i < nw; i++)
            if (got(w[i], PROTO_TASK_RUN, tid(1)))
                home = w[i];
    }
    assert_non_null(home);
    return home;
}

/* One worker of one slot and a client whose chain of n tasks (see submit_chain) has reached
 * the worker: the first task and, sent ahead, its dependent. */
static void ahead_chain_on_one_worker(env *e, peer **w, peer **c, uint64_t n)
{
    *w = peer_connect(e, PROTO_ROLE_WORKER, "w1", 1);
    *c = peer_connect(e, PROTO_ROLE_CLIENT, "client", 0);
    submit_chain(e, *c, w, 1, n);
    STEP_UNTIL(e, count(*w, PROTO_TASK_RUN) == 2);
}

/* ahead_chain_on_one_worker with a chain of two, whose dependent the worker drops when its
 * producer is done (SPW_EAHEAD): it has been sent a second time, as usual. */
static void ahead_chain_dropped_once(env *e, peer **w, peer **c)
{
    ahead_chain_on_one_worker(e, w, c, 2);
    done(*w, 1, 0, 8, true);
    STEP_UNTIL(e, tstate(e, 2) == T_ASSIGNED);
    done(*w, 2, SPW_EAHEAD, 0, false);
    STEP_UNTIL(e, runs(*w, 2, NULL) == 2);
}

/* A chain's dependents go to the worker of their producer with it, flagged PROTO_TASK_AHEAD, and
 * wait there (still T_WAITING, counted in the graph's inflight); each becomes T_ASSIGNED when
 * its producer's result is in, with no second TASK_RUN. One hop ahead while nothing is known of
 * the function's outputs, several once they are known to be inline. */
static void ahead_chain_goes_with_its_producer(void **state)
{
    env *e = *state;
    peer *w[2] = {peer_connect(e, PROTO_ROLE_WORKER, "w1", 1),
                  peer_connect(e, PROTO_ROLE_WORKER, "w2", 1)};
    peer *c = peer_connect(e, PROTO_ROLE_CLIENT, "client", 0);
    peer *home = submit_chain(e, c, w, 2, 4);
    peer *other = home == w[0] ? w[1] : w[0];
    STEP_UNTIL(e, count(home, PROTO_TASK_RUN) == 2);
    settle(e);
    assert_int_equal(count(home, PROTO_TASK_RUN), 2);
    uint64_t flags = 0;
    assert_int_equal(runs(home, 1, &flags), 1);
    assert_int_equal(flags & PROTO_TASK_AHEAD, 0);
    assert_int_equal(runs(home, 2, &flags), 1);
    assert_int_equal(flags & PROTO_TASK_AHEAD, PROTO_TASK_AHEAD);
    sched_worker *sw = sched__obj_producer(obj(e, 1))->worker;
    assert_int_equal(sw->assigned, 1);
    assert_int_equal(sw->ahead, 1);
    assert_int_equal(tstate(e, 2), T_WAITING);
    sched_graph *g = sched__obj_producer(obj(e, 1))->graph;
    assert_int_equal(g->inflight, 2);
    assert_int_equal(g->counts[T_WAITING], 3);

    done(home, 1, 0, 8, true); /* inline: the rest of the chain goes ahead */
    STEP_UNTIL(e, count(home, PROTO_TASK_RUN) == 4);
    assert_int_equal(tstate(e, 2), T_ASSIGNED);
    assert_int_equal(tstate(e, 3), T_WAITING);
    assert_int_equal(tstate(e, 4), T_WAITING);
    assert_int_equal(sw->ahead, 2);
    assert_int_equal(sw->assigned, 1);
    assert_int_equal(runs(home, 4, &flags), 1);
    assert_int_equal(flags & PROTO_TASK_AHEAD, PROTO_TASK_AHEAD);
    for (uint64_t id = 2; id <= 4; id++) {
        done(home, id, 0, 8, true);
        if (id < 4)
            STEP_UNTIL(e, tstate(e, id + 1) == T_ASSIGNED);
    }
    STEP_UNTIL(e, got(c, PROTO_TASK_RESULT, tid(4)));
    assert_int_equal(last(c, PROTO_TASK_RESULT)->code, 0);
    assert_int_equal(count(home, PROTO_TASK_RUN), 4);
    assert_int_equal(count(other, PROTO_TASK_RUN), 0);
    assert_int_equal(sw->ahead, 0);
    assert_int_equal(sw->assigned, 0);
    assert_int_equal(g->inflight, 0);
}

/* A chain of outputs in stores goes one hop ahead only: each hop ahead would hold one more
 * output in the worker's store before the scheduler releases its input. */
static void ahead_stored_chain_goes_one_hop(void **state)
{
    env *e = *state;
    peer *w, *c;
    ahead_chain_on_one_worker(e, &w, &c, 4);
    done(w, 1, 0, 1000, false);
    STEP_UNTIL(e, count(w, PROTO_TASK_RUN) == 3);
    settle(e);
    assert_int_equal(count(w, PROTO_TASK_RUN), 3);
    assert_int_equal(e->s->workers[0]->ahead, 1);
    done(w, 2, 0, 1000, false);
    STEP_UNTIL(e, count(w, PROTO_TASK_RUN) == 4);
    done(w, 3, 0, 1000, false);
    done(w, 4, 0, 8, true);
    STEP_UNTIL(e, got(c, PROTO_TASK_RESULT, tid(4)));
    assert_int_equal(last(c, PROTO_TASK_RESULT)->code, 0);
}

/* Frames that carried TASK_RUNs to w. */
static uint32_t run_frames(const peer *w)
{
    uint32_t n = 0, last = UINT32_MAX;
    for (uint32_t i = 0; i < w->n; i++) {
        if (w->log[i].type == PROTO_TASK_RUN && w->log[i].frame != last) {
            last = w->log[i].frame;
            n++;
        }
    }
    return n;
}

/* A chain of 160 links after a kept root: link 2 has no argument, link i > 2 takes link i - 1's
 * output and, unless linear, the root's too. Each link is completed in turn on the one worker,
 * of `slots` slots; returns the most tasks the scheduler held ahead there at once, and in
 * *frames the frames that carried the chain's TASK_RUNs. */
static uint32_t ahead_long_chain(env *e, bool linear, uint32_t slots, uint32_t *frames)
{
    enum { N = 160 };
    peer *w = peer_connect(e, PROTO_ROLE_WORKER, "w1", slots);
    peer *c = peer_connect(e, PROTO_ROLE_CLIENT, "client", 0);
    tspec ts[N + 1];
    ts[0] = (tspec){.id = 1, .flags = PROTO_TASK_KEEP};
    ts[1] = (tspec){.id = 2};
    for (uint64_t i = 3; i <= N + 1; i++)
        ts[i - 1] = (tspec){.id = i,
                            .args = {i - 1, 1},
                            .nargs = linear ? 1 : 2,
                            .flags = i == N + 1 ? PROTO_TASK_KEEP : 0};
    submit(c, 1, 0, 0, ts, N + 1);
    STEP_UNTIL(e, got(w, PROTO_TASK_RUN, tid(2)) && got(w, PROTO_TASK_RUN, tid(1)));
    done(w, 1, 0, 8, true);
    done(w, 2, 0, 8, true); /* inline: the chain goes ahead as far as it may */
    STEP_UNTIL(e, tstate(e, 3) == T_ASSIGNED);
    settle(e);
    sched_worker *sw = e->s->workers[0];
    uint32_t most = sw->ahead;
    for (uint64_t id = 3; id <= N + 1; id++) {
        STEP_UNTIL(e, tstate(e, id) == T_ASSIGNED);
        settle(e);
        most = sw->ahead > most ? sw->ahead : most;
        done(w, id, 0, 8, true);
    }
    STEP_UNTIL(e, got(c, PROTO_TASK_RESULT, tid(N + 1)));
    assert_int_equal(last(c, PROTO_TASK_RESULT)->code, 0);
    assert_int_equal(count(w, PROTO_TASK_RUN), N + 1); /* each sent once */
    assert_int_equal(sw->ahead, 0);
    *frames = run_frames(w);
    return most;
}

/* A linear chain - each link's one object argument is the output of the link before, whose
 * only consumer it is - goes SCHED_AHEAD_CHAIN_PER_SLOT ahead: the refill through the scheduler
 * is paid once per many hops. Links that take another object too (as a tree's node may, once its
 * other inputs are made) go SCHED_AHEAD_PER_SLOT, so a wide level does not pile onto one
 * worker. */
static void ahead_linear_chain_goes_deeper(void **state)
{
    uint32_t frames;
    assert_int_equal(ahead_long_chain(*state, true, 1, &frames), SCHED_AHEAD_CHAIN_PER_SLOT);
    assert_true(frames <= 160 / (SCHED_AHEAD_CHAIN_PER_SLOT / 2) + 3);
}

static void ahead_chain_of_two_inputs_stays_shallow(void **state)
{
    uint32_t frames;
    assert_int_equal(ahead_long_chain(*state, false, 1, &frames), SCHED_AHEAD_PER_SLOT);
}

/* On a worker of several slots a chain goes no further ahead than one walk can refill: a walk
 * looks at SCHED_AHEAD_VISITS tasks, through those already ahead first. With 32 per slot (128
 * on 4 slots, refilled at 64) every hop walked the 64 already ahead, found no room to send more
 * and sent one task: a TASK_RUNS frame and 64 visits a hop (161 frames here). */
static void ahead_chain_on_many_slots_refills_in_batches(void **state)
{
    uint32_t frames;
    assert_int_equal(ahead_long_chain(*state, true, 4, &frames), SCHED_AHEAD_VISITS);
    if (frames > 160 / (SCHED_AHEAD_VISITS / 2) + 3)
        fail_msg("the chain's TASK_RUNs came in %u frames", frames);
}

/* A producer that fails fails what was sent ahead for it, as if it had been dispatched after:
 * the client hears SPW_EDEPFAILED at once. Those tasks stay on the worker's list (orphaned if
 * nobody wants them) until the worker answers that it dropped them; nothing is sent again. */
static void ahead_failing_producer_fails_its_dependents(void **state)
{
    env *e = *state;
    peer *w, *c;
    ahead_chain_on_one_worker(e, &w, &c, 3);
    sched_worker *sw = e->s->workers[0];
    done(w, 1, 1, 0, false);
    STEP_UNTIL(e, got(c, PROTO_TASK_RESULT, tid(3)));
    assert_int_equal(last(c, PROTO_TASK_RESULT)->code, SPW_EDEPFAILED);
    assert_int_equal(tstate(e, 2), T_FAILED);
    assert_int_equal(tstate(e, 3), T_FAILED);
    assert_true(obj(e, 2)->orphan); /* only 3 wanted it */
    assert_int_equal(sw->ahead, 1);
    done(w, 2, SPW_EAHEAD, 0, false);
    STEP_UNTIL(e, sw->ahead == 0 && obj(e, 2) == NULL);
    assert_int_equal(count(w, PROTO_TASK_RUN), 2);
    assert_int_equal(count(c, PROTO_TASK_RESULT), 1);
    assert_int_equal(sched__obj_producer(obj(e, 3))->graph->inflight, 0);
}

/* The worker answers SPW_EAHEAD when a dependent arrives after its producer's inline result
 * left: it is dispatched again as usual (no retry counted) and its result is right. */
static void ahead_dropped_dependent_is_dispatched_again(void **state)
{
    env *e = *state;
    peer *w, *c;
    ahead_chain_dropped_once(e, &w, &c);
    uint64_t flags = 0;
    runs(w, 2, &flags);
    assert_int_equal(flags & PROTO_TASK_AHEAD, 0);
    assert_int_equal(sched__obj_producer(obj(e, 2))->retries, 0);
    assert_false(got(c, PROTO_TASK_RESULT, tid(2)));
    done(w, 2, 0, 8, true);
    STEP_UNTIL(e, got(c, PROTO_TASK_RESULT, tid(2)));
    assert_int_equal(last(c, PROTO_TASK_RESULT)->code, 0);
}

/* SPW_EAHEAD is an answer only for a task sent ahead: a worker that gives it for a task sent as
 * usual (here the dropped dependent, dispatched again) fails that task with SPW_EPROTO and is
 * told why, instead of the task bouncing between scheduler and worker for ever. */
static void ahead_refusal_of_a_task_not_sent_ahead_fails_it(void **state)
{
    env *e = *state;
    peer *w, *c;
    ahead_chain_dropped_once(e, &w, &c);
    done(w, 2, SPW_EAHEAD, 0, false);
    STEP_UNTIL(e, got(c, PROTO_TASK_RESULT, tid(2)));
    assert_int_equal(last(c, PROTO_TASK_RESULT)->code, SPW_EPROTO);
    STEP_UNTIL(e, count(w, PROTO_ERROR) == 1);
    assert_int_equal(last(w, PROTO_ERROR)->code, SPW_EPROTO);
    assert_int_equal(runs(w, 2, NULL), 2);
    assert_false(w->closed);
}

/* The worker of a producer and its dependent dies: the producer is retried elsewhere (a retry
 * counted), the dependent, which never ran, waits again and goes ahead with it there. */
static void ahead_worker_death_retries_both(void **state)
{
    env *e = *state;
    peer *w1 = peer_connect(e, PROTO_ROLE_WORKER, "w1", 1);
    peer *c = peer_connect(e, PROTO_ROLE_CLIENT, "client", 0);
    submit_chain(e, c, &w1, 1, 2);
    STEP_UNTIL(e, count(w1, PROTO_TASK_RUN) == 2);
    peer *w2 = peer_connect(e, PROTO_ROLE_WORKER, "w2", 1);
    peer_close(e, w1);
    STEP_UNTIL(e, got(w2, PROTO_TASK_RUN, tid(1)) && got(w2, PROTO_TASK_RUN, tid(2)));
    assert_int_equal(sched__obj_producer(obj(e, 1))->retries, 1);
    assert_int_equal(sched__obj_producer(obj(e, 2))->retries, 0);
    assert_int_equal(tstate(e, 2), T_WAITING);
    done(w2, 1, 0, 8, true);
    done(w2, 2, 0, 8, true);
    STEP_UNTIL(e, got(c, PROTO_TASK_RESULT, tid(2)));
    assert_int_equal(last(c, PROTO_TASK_RESULT)->code, 0);
}

/* A worker dies holding a linear chain SCHED_AHEAD_CHAIN_PER_SLOT ahead: every link comes back
 * to waiting (no retry counted for those that never started) and runs exactly once on the
 * worker that takes over. */
static void ahead_worker_death_with_a_long_chain_ahead(void **state)
{
    enum { N = 40 };
    env *e = *state;
    peer *w1 = peer_connect(e, PROTO_ROLE_WORKER, "w1", 1);
    peer *c = peer_connect(e, PROTO_ROLE_CLIENT, "client", 0);
    tspec ts[N];
    for (uint64_t i = 1; i <= N; i++)
        ts[i - 1] = (tspec){.id = i, .args = {i - 1}, .nargs = i > 1, .flags = i == N ? PROTO_TASK_KEEP : 0};
    submit(c, 1, 0, 0, ts, N);
    STEP_UNTIL(e, count(w1, PROTO_TASK_RUN) == 2);
    done(w1, 1, 0, 8, true);
    STEP_UNTIL(e, e->s->workers[0]->ahead == SCHED_AHEAD_CHAIN_PER_SLOT);
    settle(e);
    peer *w2 = peer_connect(e, PROTO_ROLE_WORKER, "w2", 1);
    peer_close(e, w1);
    STEP_UNTIL(e, got(w2, PROTO_TASK_RUN, tid(2)));
    for (uint64_t id = 2; id <= N; id++) {
        STEP_UNTIL(e, tstate(e, id) == T_ASSIGNED);
        settle(e);
        assert_int_equal(runs(w2, id, NULL), 1);
        done(w2, id, 0, 8, true);
    }
    STEP_UNTIL(e, got(c, PROTO_TASK_RESULT, tid(N)));
    assert_int_equal(last(c, PROTO_TASK_RESULT)->code, 0);
    assert_int_equal(count(w2, PROTO_TASK_RUN), N - 1);
    assert_int_equal(sched__obj_producer(obj(e, N))->retries, 0);
    assert_int_equal(e->s->workers[0]->ahead, 0);
    assert_int_equal(e->s->workers[0]->assigned, 0);
}

/* A task whose inputs are made on two workers is not sent ahead: it is dispatched when both
 * are done. */
static void ahead_not_for_inputs_of_two_workers(void **state)
{
    env *e = *state;
    peer *w1 = peer_connect(e, PROTO_ROLE_WORKER, "w1", 1);
    peer *w2 = peer_connect(e, PROTO_ROLE_WORKER, "w2", 1);
    peer *c = peer_connect(e, PROTO_ROLE_CLIENT, "client", 0);
    tspec ts[] = {{.id = 1}, {.id = 2}, {.id = 3, .args = {1, 2}, .nargs = 2, .flags = PROTO_TASK_KEEP}};
    submit(c, 1, 0, 0, ts, 3);
    STEP_UNTIL(e, runs(w1, 1, NULL) + runs(w2, 1, NULL) == 1 &&
                      runs(w1, 2, NULL) + runs(w2, 2, NULL) == 1);
    /* Least loaded first: one source on each worker. */
    peer *p1 = got(w1, PROTO_TASK_RUN, tid(1)) ? w1 : w2;
    peer *p2 = got(w1, PROTO_TASK_RUN, tid(2)) ? w1 : w2;
    assert_ptr_not_equal(p1, p2);
    settle(e);
    assert_int_equal(runs(w1, 3, NULL) + runs(w2, 3, NULL), 0);
    assert_int_equal(e->s->workers[0]->ahead + e->s->workers[1]->ahead, 0);
    done(p1, 1, 0, 100, false);
    done(p2, 2, 0, 100, false);
    STEP_UNTIL(e, runs(w1, 3, NULL) + runs(w2, 3, NULL) == 1);
    peer *p3 = runs(w1, 3, NULL) ? w1 : w2;
    uint64_t flags = 0;
    runs(p3, 3, &flags);
    assert_int_equal(flags & PROTO_TASK_AHEAD, 0);
    done(p3, 3, 0, 8, true);
    STEP_UNTIL(e, got(c, PROTO_TASK_RESULT, tid(3)));
}

/* A client that goes away while its task waits ahead on a worker: the worker is told to cancel
 * it (TASK_CANCEL) and its record goes when the worker answers, as for an assigned task. */
static void ahead_cancelled_with_its_client(void **state)
{
    env *e = *state;
    peer *w, *c;
    ahead_chain_on_one_worker(e, &w, &c, 2);
    peer_close(e, c);
    STEP_UNTIL(e, got(w, PROTO_TASK_CANCEL, tid(2)));
    assert_true(obj(e, 2)->orphan);
    assert_int_equal(tstate(e, 2), T_WAITING);
    assert_int_equal(e->s->workers[0]->ahead, 1);
    done(w, 2, SPW_ECANCELED, 0, false);
    STEP_UNTIL(e, obj(e, 2) == NULL && got(w, PROTO_TASK_CANCEL, tid(1)));
    done(w, 1, SPW_ECANCELED, 0, false);
    STEP_UNTIL(e, e->s->objects.n == 0);
    assert_int_equal(e->s->workers[0]->ahead, 0);
    assert_int_equal(e->s->workers[0]->assigned, 0);
    for (int k = 0; k < PROTO_TSTATE_COUNT; k++)
        assert_int_equal(e->s->tstate[k], 0);
}

/* Releasing an id the client does not hold changes nothing; a put's CLIENT reference goes
 * with RELEASE. */
static void release_of_unheld_id_is_refused(void **state)
{
    env *e = *state;
    peer_connect(e, PROTO_ROLE_WORKER, "w1", 1);
    peer *c = peer_connect(e, PROTO_ROLE_CLIENT, "client", 0);
    uint64_t ids[] = {42};
    send_ids(c, PROTO_RELEASE, ids, 1);
    STEP_UNTIL(e, count(c, PROTO_ERROR) == 1);
    assert_int_equal(last(c, PROTO_ERROR)->code, SPW_ENOTHELD);

    put_place(c, 50, 4096);
    STEP_UNTIL(e, got(c, PROTO_PUT_TARGET, tid(50)));
    assert_int_equal(obj(e, 50)->refs[REF_CLIENT], 1);
    assert_int_equal(e->s->workers[0]->reserved, 4096);
    uint64_t put[] = {50};
    send_ids(c, PROTO_RELEASE, put, 1);
    STEP_UNTIL(e, obj(e, 50) == NULL);
    assert_int_equal(e->s->workers[0]->reserved, 0);
    assert_int_equal(count(c, PROTO_ERROR), 1);
}

/* A put whose copy reached another worker before its uploading worker reported (a broadcast
 * chain follows an upload while it arrives), released in between: the uploading worker's
 * reservation goes with the object. */
static void released_put_frees_its_reservation(void **state)
{
    env *e = *state;
    peer *w1 = peer_connect(e, PROTO_ROLE_WORKER, "w1", 1);
    peer *w2 = peer_connect(e, PROTO_ROLE_WORKER, "w2", 1);
    peer *c = peer_connect(e, PROTO_ROLE_CLIENT, "client", 0);
    put_place(c, 60, 4096);
    STEP_UNTIL(e, got(c, PROTO_PUT_TARGET, tid(60)));
    uint64_t target = last(c, PROTO_PUT_TARGET)->u;
    peer *other = target == w1->session ? w2 : w1;
    sched_worker *tw = sched__worker_by_id(e->s, (uint32_t)target);
    assert_non_null(tw);
    assert_int_equal(tw->reserved, 4096);

    proto_enc en;
    proto_enc_begin(&en, proto_conn_out(other->conn), PROTO_OBJ_ADDED, 0, 2);
    proto_put_id(&en, tid(60));
    proto_put_u(&en, 4096);
    assert_int_equal(proto_conn_send(other->conn, &en), 0);
    STEP_UNTIL(e, obj(e, 60)->state == OBJ_READY);
    assert_int_equal(obj(e, 60)->put_worker, target); /* its own OBJ_ADDED is still to come */

    uint64_t ids[] = {60};
    send_ids(c, PROTO_RELEASE, ids, 1);
    STEP_UNTIL(e, obj(e, 60) == NULL && got(other, PROTO_OBJ_DELETE, tid(60)));
    assert_int_equal(tw->reserved, 0);
}

/* What the peers of memory_orphan_pass_is_bounded_per_loop_turn received, counted (their
 * logs would overflow) with the loop turn it came in. */
static struct {
    uint32_t turn;
    uint64_t put_targets;
    uint64_t list_req; /* the OBJ_LIST_REQ's request id, once it came */
    bool got_list_req;
    uint32_t list_reqs;
    uint64_t listed, orphans;
    uint64_t listed_two_locs; /* listed objects with two locations */
    uint64_t orphan_locs;     /* locations of the orphans */
    uint32_t first_objs_turn, last_objs_turn, end_turn;
    bool ended;
} g_mq;

static void count_msg(proto_conn *c, const proto_msg *m)
{
    (void)c;
    switch (m->type) {
    case PROTO_PUT_TARGET:
        g_mq.put_targets++;
        break;
    case PROTO_OBJ_LIST_REQ:
        g_mq.list_req = m->req;
        g_mq.got_list_req = true;
        g_mq.list_reqs++;
        break;
    case PROTO_MEMORY_OBJS:
        for (uint32_t i = 0; i < m->f[F_MEMOBJS_OBJS].arr.n; i++) {
            const proto_val *r = PROTO_REC(&m->f[F_MEMOBJS_OBJS], i);
            bool orphan = r[R_MOBJ_STATE].u == PROTO_OSTATE_ORPHAN;
            uint32_t nlocs = r[R_MOBJ_LOCS].arr.n;
            if (g_mq.listed + g_mq.orphans == 0)
                g_mq.first_objs_turn = g_mq.turn;
            g_mq.orphans += orphan;
            g_mq.listed += !orphan;
            g_mq.listed_two_locs += !orphan && nlocs == 2;
            g_mq.orphan_locs += orphan ? nlocs : 0;
            if (!orphan)
                g_mq.last_objs_turn = g_mq.turn;
        }
        break;
    case PROTO_MEMORY_END:
        g_mq.end_turn = g_mq.turn;
        g_mq.ended = true;
        break;
    case PROTO_ERROR:
        fail_msg("ERROR %s", spw_err_name((int)m->f[F_ERROR_CODE].i));
        break;
    default:
        break;
    }
}

static const proto_conn_cbs count_cbs = {
    .on_ready = on_ready,
    .on_msg = count_msg,
    .on_close = on_close,
};

/* The store's list: the directory's objects 1..n, and after the first, the middle one and the
 * last an orphan each (ids the directory does not know), so that the search finds orphans in its
 * first, a middle and its last turn. */
static void put_olobj(proto_enc *e, uint32_t i, void *arg)
{
    uint32_t n = *(const uint32_t *)arg;
    uint32_t k = i > n / 2 + 1 ? i - 2 : i > 0 ? i - 1 : 0; /* directory objects before i */
    bool orphan = i == 1 || i == n / 2 + 1 || i == n + 2;
    spw_id id = orphan ? (spw_id){0x0e, i} : tid(1 + k);
    proto_put_olobj_rec(e, &(proto_olobj_rec){.id = id, .size = 1, .stored = 1});
}

/* spillway-ctl memory over a directory of many objects that the stores all hold (none an
 * orphan): the pass looking for orphans among the stores' objects looks at SCHED_MEMQ_SCAN of
 * them per loop turn, so its MEMORY_END comes many turns after the last listing, where a pass
 * over all of them in one turn (about 50 ms of stalled loop per million objects, release build)
 * sent it in the next turn or so. Every object is listed once, and the orphans spread over the
 * stores' list are all found. */
static void memory_orphan_pass_is_bounded_per_loop_turn(void **state)
{
    env *e = *state;
    enum { N = 20 * SCHED_MEMQ_SCAN };
    memset(&g_mq, 0, sizeof g_mq);
    peer *w = peer_connect_cbs(e, PROTO_ROLE_WORKER, "w", 1, &count_cbs);
    peer *c = peer_connect_cbs(e, PROTO_ROLE_CLIENT, "client", 0, &count_cbs);
    for (uint64_t i = 0; i < N; i++)
        put_place(c, 1 + i, 1);
    STEP_UNTIL(e, g_mq.put_targets == N);
    peer *ctl = peer_connect_cbs(e, PROTO_ROLE_CTL, "ctl", 0, &count_cbs);
    assert_int_equal(proto_send_memory_req(ctl->conn, 11, &(proto_memory_req_msg){.flags = 0}), 0);
    STEP_UNTIL(e, g_mq.got_list_req);
    uint64_t stats[PROTO_STAT_COUNT] = {0};
    uint32_t n = N;
    assert_int_equal(proto_send_obj_list(w->conn, g_mq.list_req,
                                         &(proto_obj_list_msg){
                                             .objs = {.n = N + 3, .put = put_olobj, .arg = &n},
                                             .stats = {stats, PROTO_STAT_COUNT}}),
                     0);
    for (g_mq.turn = 0; g_mq.turn < STEPS && !g_mq.ended; g_mq.turn++)
        uv_run(&e->loop, UV_RUN_NOWAIT);
    assert_true(g_mq.ended);
    assert_int_equal(g_mq.listed, N);
    assert_int_equal(g_mq.orphans, 3);
    /* 20 turns of scanning at least; half of it allows for frames arriving a turn late. */
    if (g_mq.end_turn - g_mq.last_objs_turn < 10)
        fail_msg("MEMORY_END came %u turns after the last listing: the orphan pass over %d "
                 "objects took fewer than 10 turns",
                 g_mq.end_turn - g_mq.last_objs_turn, N);
    sched__check_full(e->s);
}

/* The stores' lists of memory_store_lists_are_indexed_a_slice_per_loop_turn: the first worker
 * holds the directory's objects 1..n and an orphan, the second every other one of them, last
 * first, then the same orphan and one of its own. */
typedef struct two_lists {
    uint32_t n;
    bool second;
    uint32_t from; /* the first record of the frame being sent */
} two_lists;

static void put_listed(proto_enc *e, uint32_t i, void *arg)
{
    const two_lists *l = arg;
    uint32_t mine = l->second ? l->n / 2 : l->n;
    i += l->from;
    spw_id id =
        i < mine ? tid(l->second ? 2 * (mine - i) : 1 + i) : (spw_id){0x0e, i == mine ? 1 : 2};
    proto_put_olobj_rec(e, &(proto_olobj_rec){.id = id, .size = 1, .stored = 1, .pins = 1});
}

/* Sends l's list in frames of per_frame records, as a worker does (0: in one frame, as workers
 * from before F_OLIST_MORE did). */
static void send_list(peer *w, two_lists *l, uint32_t per_frame)
{
    uint64_t stats[PROTO_STAT_COUNT] = {0};
    uint32_t n = (l->second ? l->n / 2 + 2 : l->n + 1);
    for (l->from = 0; l->from < n; l->from += per_frame) {
        uint32_t k = per_frame == 0 || n - l->from <= per_frame ? n - l->from : per_frame;
        bool more = l->from + k < n;
        assert_int_equal(
            proto_send_obj_list(w->conn, g_mq.list_req,
                                &(proto_obj_list_msg){.objs = {.n = k, .put = put_listed, .arg = l},
                                                      .stats = {stats, PROTO_STAT_COUNT},
                                                      .more = more,
                                                      .omit_more = per_frame == 0}),
            0);
        if (per_frame == 0)
            break;
    }
}

/* This thread's CPU time: a loop turn's cost, whatever else the machine runs. */
static uint64_t thread_cpu_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* spillway-ctl memory over stores of many objects: their lists are taken in as they come and
 * indexed by id from the idle handle, SCHED_MEMQ_SCAN records per loop turn, so no turn indexes
 * more than that and the listing starts only after as many turns as the slices need, where a
 * hash entry and an allocation per object in the turn a list came stalled the loop (about
 * 370 ms for a list of 819k objects, release build). No turn frees more than a few MiB of the
 * query's memory either. An object two stores hold is listed once with both locations, an
 * orphan two stores hold likewise; a list may come in many frames (the first worker's) or in
 * one (the second's, a worker from before F_OLIST_MORE). SPW_TEST_MEMQ_OBJECTS=N sets the
 * directory's size and prints the longest loop turn (this thread's CPU time, so that other
 * processes do not count; only reported, never asserted). */
static void memory_store_lists_are_indexed_a_slice_per_loop_turn(void **state)
{
    env *e = *state;
    const char *env_n = getenv("SPW_TEST_MEMQ_OBJECTS");
    uint32_t n = env_n != NULL ? (uint32_t)strtoul(env_n, NULL, 10) : 24 * SCHED_MEMQ_SCAN;
    memset(&g_mq, 0, sizeof g_mq);
    peer *w1 = peer_connect_cbs(e, PROTO_ROLE_WORKER, "w1", 1, &count_cbs);
    peer *w2 = peer_connect_cbs(e, PROTO_ROLE_WORKER, "w2", 1, &count_cbs);
    peer *c = peer_connect_cbs(e, PROTO_ROLE_CLIENT, "client", 0, &count_cbs);
    for (uint64_t i = 0; i < n; i++)
        put_place(c, 1 + i, 1);
    STEP_UNTIL(e, g_mq.put_targets == n);
    peer *ctl = peer_connect_cbs(e, PROTO_ROLE_CTL, "ctl", 0, &count_cbs);
    assert_int_equal(proto_send_memory_req(ctl->conn, 12, &(proto_memory_req_msg){.flags = 0}), 0);
    STEP_UNTIL(e, g_mq.list_reqs == 2);
    two_lists l1 = {n, false, 0}, l2 = {n, true, 0};
    send_list(w1, &l1, 4096);
    send_list(w2, &l2, 0);
    uint64_t records = (uint64_t)n + 1 + n / 2 + 2;
    uint64_t indexed0 = e->s->memq_indexed, most = 0, longest_ns = 0;
    int64_t most_freed = 0; /* the scheduler's heap given back in one turn, bytes */
    uint32_t longest_turn = 0;
    for (g_mq.turn = 0; g_mq.turn < STEPS && !g_mq.ended; g_mq.turn++) {
        uint64_t before = e->s->memq_indexed, t0 = thread_cpu_ns();
        int64_t heap = spw_heap_used(SPW_MOD_SCHED);
        uv_run(&e->loop, UV_RUN_NOWAIT);
        uint64_t ns = thread_cpu_ns() - t0, k = e->s->memq_indexed - before;
        int64_t freed = heap - spw_heap_used(SPW_MOD_SCHED);
        most_freed = freed > most_freed ? freed : most_freed;
        if (ns > longest_ns) {
            longest_ns = ns;
            longest_turn = g_mq.turn;
        }
        most = k > most ? k : most;
    }
    assert_true(g_mq.ended);
    if (env_n != NULL)
        print_message("%u objects, %llu store records: longest loop turn %.1f ms (turn %u; "
                      "first listing in turn %u, end in turn %u)\n",
                      n, (unsigned long long)records, (double)longest_ns / 1e6, longest_turn,
                      g_mq.first_objs_turn, g_mq.end_turn);
    assert_int_equal(e->s->memq_indexed - indexed0, records);
    if (most > SCHED_MEMQ_SCAN)
        fail_msg("a loop turn indexed %llu store records (at most %d)", (unsigned long long)most,
                 SCHED_MEMQ_SCAN);
    /* The query's memory goes a little at a time too: the largest piece is the second store's
     * list (one frame of n / 2 records, about 3 MiB at the default n), where freeing an entry
     * per object in the turn the query ended gave back about 11 MiB at once. */
    if (env_n == NULL && most_freed > (6 << 20))
        fail_msg("a loop turn freed %lld bytes of the scheduler's heap (at most 6 MiB)",
                 (long long)most_freed);
    /* Listing waits for the index: a slice per turn, spread over this many turns at least. */
    uint32_t slices = (uint32_t)((records + SCHED_MEMQ_SCAN - 1) / SCHED_MEMQ_SCAN);
    if (g_mq.first_objs_turn < slices)
        fail_msg("the listing started in turn %u, before the %u slices of the index were done",
                 g_mq.first_objs_turn, slices);
    assert_int_equal(g_mq.listed, n);
    assert_int_equal(g_mq.listed_two_locs, n / 2);
    assert_int_equal(g_mq.orphans, 2);
    assert_int_equal(g_mq.orphan_locs, 3);
    sched__check_full(e->s);
}

/* A put whose uploading worker died before sealing it is failed and lost; a copy another
 * worker reports (a broadcast chain that followed the upload) makes it ready again, and why
 * it failed is forgotten. */
static void lost_put_brought_back_by_a_copy_forgets_its_failure(void **state)
{
    env *e = *state;
    peer *w1 = peer_connect(e, PROTO_ROLE_WORKER, "w1", 1);
    peer *w2 = peer_connect(e, PROTO_ROLE_WORKER, "w2", 1);
    peer *c = peer_connect(e, PROTO_ROLE_CLIENT, "client", 0);
    put_place(c, 70, 4096);
    STEP_UNTIL(e, got(c, PROTO_PUT_TARGET, tid(70)));
    uint64_t target = last(c, PROTO_PUT_TARGET)->u;
    peer *uploader = target == w1->session ? w1 : w2;
    peer *other = uploader == w1 ? w2 : w1;

    peer_close(e, uploader);
    STEP_UNTIL(e, obj(e, 70)->state == OBJ_LOST);
    assert_true(obj(e, 70)->has_failure);

    proto_enc en;
    proto_enc_begin(&en, proto_conn_out(other->conn), PROTO_OBJ_ADDED, 0, 2);
    proto_put_id(&en, tid(70));
    proto_put_u(&en, 4096);
    assert_int_equal(proto_conn_send(other->conn, &en), 0);
    STEP_UNTIL(e, obj(e, 70)->state == OBJ_READY); /* checks every invariant */
    assert_false(obj(e, 70)->has_failure);
    assert_null(sched__obj_failure(e->s, obj(e, 70)));
    assert_int_equal(obj(e, 70)->put_worker, 0);
    settle(e);

    uint64_t ids[] = {70};
    send_ids(c, PROTO_RELEASE, ids, 1);
    STEP_UNTIL(e, obj(e, 70) == NULL && got(other, PROTO_OBJ_DELETE, tid(70)));
}

/* OBJ_ADDED from a worker, as a fake worker sends it: it sealed a copy of id. */
static void obj_added(peer *w, uint64_t id, uint64_t size)
{
    proto_enc en;
    proto_enc_begin(&en, proto_conn_out(w->conn), PROTO_OBJ_ADDED, 0, 2);
    proto_put_id(&en, tid(id));
    proto_put_u(&en, size);
    assert_int_equal(proto_conn_send(w->conn, &en), 0);
}

/* A broadcast of a stored task output to w2 and w3; its only holder w1 dies just after both
 * copied it, before their OBJ_ADDED arrive: the output is made again (lineage), on one of them.
 * Their late copies of an object that is pending again are not listed, so each target is
 * settled as failed (the client hears BROADCAST_DONE, not silence), and the worker not making it
 * again drops its copy (else it stays in its store, known to nobody, once the object goes). */
static void broadcast_copy_of_an_object_made_again_is_settled_and_dropped(void **state)
{
    env *e = *state;
    peer *w1 = peer_connect(e, PROTO_ROLE_WORKER, "w1", 1);
    peer *c = peer_connect(e, PROTO_ROLE_CLIENT, "client", 0);
    tspec t = {.id = 1, .flags = PROTO_TASK_KEEP};
    submit(c, 1, 0, 0, &t, 1);
    STEP_UNTIL(e, got(w1, PROTO_TASK_RUN, tid(1)));
    done(w1, 1, 0, 4096, false);
    STEP_UNTIL(e, tstate(e, 1) == T_DONE);
    peer *w2 = peer_connect(e, PROTO_ROLE_WORKER, "w2", 1);
    peer *w3 = peer_connect(e, PROTO_ROLE_WORKER, "w3", 1);
    assert_int_equal(
        proto_send_broadcast(c->conn, 77, &(proto_broadcast_msg){.id = tid(1), .workers = 0}), 0);
    STEP_UNTIL(e, count(w2, PROTO_REPLICATE) == 1 && count(w3, PROTO_REPLICATE) == 1);

    peer_close(e, w1);
    STEP_UNTIL(e, got(w2, PROTO_TASK_RUN, tid(1)) || got(w3, PROTO_TASK_RUN, tid(1)));
    peer *runner = got(w2, PROTO_TASK_RUN, tid(1)) ? w2 : w3;
    peer *other = runner == w2 ? w3 : w2;
    assert_int_equal(obj(e, 1)->state, OBJ_PENDING);

    obj_added(w2, 1, 4096);
    obj_added(w3, 1, 4096);
    STEP_UNTIL(e, count(c, PROTO_BROADCAST_DONE) == 1 && got(other, PROTO_OBJ_DELETE, tid(1)));
    assert_int_equal(last(c, PROTO_BROADCAST_DONE)->u, 2); /* failed: neither copy was taken */
    assert_false(got(runner, PROTO_OBJ_DELETE, tid(1)));   /* its own run replaces its copy */
    assert_int_equal(obj(e, 1)->nlocs, 0);

    done(runner, 1, 0, 4096, false);
    STEP_UNTIL(e, obj(e, 1)->state == OBJ_READY);
    assert_int_equal(obj(e, 1)->nlocs, 1);
    uint64_t ids[] = {1, 1}; /* its OUTPUT and BROADCAST references */
    send_ids(c, PROTO_RELEASE, ids, 2);
    STEP_UNTIL(e, obj(e, 1) == NULL && got(runner, PROTO_OBJ_DELETE, tid(1)));
    assert_int_equal(count(c, PROTO_ERROR), 0);
}

/* Under a --max-frame of 64 KiB, task 3 gets the two 40 KiB inline results of tasks 1 and 2 in
 * its TASK_RUN: too large for the wire, so dispatch fails it. That fails task 5, the only
 * consumer of task 4, which is cancelled and freed while it stands next in the ready queue
 * behind task 3 (both were made ready by task 2). The dispatch pass goes on with what is
 * queued, not with the freed task (a use after free), and the client hears why task 5 failed. */
static void task_too_large_for_the_wire_fails_and_dispatch_goes_on(void **state)
{
    env *e = *state;
    peer *w1 = peer_connect(e, PROTO_ROLE_WORKER, "w1", 1);
    peer *w2 = peer_connect(e, PROTO_ROLE_WORKER, "w2", 1);
    peer *c = peer_connect(e, PROTO_ROLE_CLIENT, "client", 0);
    tspec ts[] = {{.id = 1},
                  {.id = 2},
                  {.id = 3, .args = {1, 2}, .nargs = 2},
                  {.id = 4, .args = {1, 2}, .nargs = 2},
                  {.id = 5, .args = {3, 4}, .nargs = 2, .flags = PROTO_TASK_KEEP}};
    submit(c, 1, 0, 0, ts, 5);
    /* One source on each worker: tasks 3 and 4 wait for two workers, so none goes ahead. */
    STEP_UNTIL(e, (got(w1, PROTO_TASK_RUN, tid(1)) && got(w2, PROTO_TASK_RUN, tid(2))) ||
                      (got(w2, PROTO_TASK_RUN, tid(1)) && got(w1, PROTO_TASK_RUN, tid(2))));
    peer *p1 = got(w1, PROTO_TASK_RUN, tid(1)) ? w1 : w2;
    peer *p2 = p1 == w1 ? w2 : w1;
    done(p1, 1, 0, 40 * 1024, true);
    STEP_UNTIL(e, tstate(e, 1) == T_DONE);
    done(p2, 2, 0, 40 * 1024, true);
    STEP_UNTIL(e, got(c, PROTO_TASK_RESULT, tid(5)));
    assert_int_equal(last(c, PROTO_TASK_RESULT)->code, SPW_EDEPFAILED);
    assert_null(obj(e, 3));
    assert_null(obj(e, 4));
    assert_int_equal(tstate(e, 5), T_FAILED);
    assert_int_equal(e->s->nready, 0);
    uint64_t kept[] = {5};
    send_ids(c, PROTO_RELEASE, kept, 1);
    STEP_UNTIL(e, e->s->objects.n == 0);
}

/* Task 0x1000 of three outputs (ids 0x1000..0x1002, spw_id_output), none kept; task 2 (kept)
 * reads output 1. The outputs nobody reads go by the time the task ends (output 2's record at
 * once, its copy when the task reports; output 0 a husk holding the task for output 1), and
 * output 1 goes after its consumer. */
static void outputs_nobody_reads_go_when_their_task_ends(void **state)
{
    env *e = *state;
    peer *w = peer_connect(e, PROTO_ROLE_WORKER, "w1", 1);
    peer *c = peer_connect(e, PROTO_ROLE_CLIENT, "client", 0);
    proto_enc en;
    submit_begin(&en, c, 1, true, 0, 0, 2);
    proto_put_arr(&en, 7); /* with worker "" and nouts */
    proto_put_id(&en, tid(0x1000));
    proto_put_str(&en, "fn");
    proto_put_arr(&en, 0);
    proto_put_u(&en, 0);
    proto_put_str(&en, "test_sched.c:1");
    proto_put_str(&en, "");
    proto_put_u(&en, 3);
    proto_put_arr(&en, 5);
    proto_put_id(&en, tid(2));
    proto_put_str(&en, "fn");
    proto_put_arr(&en, 1);
    proto_put_arr(&en, 5);
    proto_put_u(&en, PROTO_ARG_OBJ);
    proto_put_nil(&en);
    proto_put_id(&en, tid(0x1001));
    proto_put_u(&en, 0);
    proto_put_u(&en, 0);
    proto_put_u(&en, PROTO_TASK_KEEP);
    proto_put_str(&en, "test_sched.c:1");
    proto_put_str(&en, "test_sched.c:2");
    assert_int_equal(proto_conn_send(c->conn, &en), 0);
    STEP_UNTIL(e, got(w, PROTO_TASK_RUN, tid(0x1000)));
    assert_non_null(obj(e, 0x1001));
    assert_true(obj(e, 0x1001)->is_out);
    /* Output 2 has no reader and no holder: its record went with the graph's last frame. */
    assert_null(obj(e, 0x1002));
    assert_int_equal(sched__obj_producer(obj(e, 0x1000))->outs_alive, 1);

    /* Output 0 inline, 1 and 2 stored. */
    proto_enc_begin(&en, proto_conn_out(w->conn), PROTO_TASK_DONE, 0, 7);
    proto_put_id(&en, tid(0x1000));
    proto_put_i(&en, 0);
    proto_put_u(&en, 4);
    proto_put_bin(&en, "abcd", 4);
    proto_put_str(&en, "");
    proto_put_u(&en, 100);
    proto_put_arr(&en, 2);
    for (int i = 0; i < 2; i++) {
        proto_put_arr(&en, 2);
        proto_put_u(&en, i == 0 ? 5000 : 2000);
        proto_put_nil(&en);
    }
    assert_int_equal(proto_conn_send(w->conn, &en), 0);
    STEP_UNTIL(e, got(w, PROTO_OBJ_DELETE, tid(0x1002)));
    assert_null(obj(e, 0x1002));
    assert_true(obj(e, 0x1000)->husk);
    assert_int_equal(obj(e, 0x1001)->state, OBJ_READY);
    assert_int_equal(obj(e, 0x1001)->size, 5000);
    assert_int_equal(e->s->obj_bytes, 5000);
    STEP_UNTIL(e, got(w, PROTO_TASK_RUN, tid(2)));
    done(w, 2, 0, 8, true);
    STEP_UNTIL(e, got(c, PROTO_TASK_RESULT, tid(2)) && got(w, PROTO_OBJ_DELETE, tid(0x1001)));
    assert_null(obj(e, 0x1001));
    assert_null(obj(e, 0x1000));
    STEP_UNTIL(e, e->s->objects.n == 1); /* only the kept result */
}

/* A task record of SUBMIT with its worker name (placed there, or "") and its output count. */
static void put_task_at(proto_enc *en, uint64_t id, const uint64_t *args, uint32_t nargs,
                        uint32_t flags, const char *worker, uint32_t nouts)
{
    proto_put_arr(en, 7);
    proto_put_id(en, tid(id));
    proto_put_str(en, "fn");
    proto_put_arr(en, nargs);
    for (uint32_t a = 0; a < nargs; a++) {
        proto_put_arr(en, 5);
        proto_put_u(en, PROTO_ARG_OBJ);
        proto_put_nil(en);
        proto_put_id(en, tid(args[a]));
        proto_put_u(en, 0);
        proto_put_u(en, 0);
    }
    proto_put_u(en, flags);
    proto_put_str(en, "test_sched.c:1");
    proto_put_str(en, worker);
    proto_put_u(en, nouts);
}

/* TASK_DONE of a task of two stored outputs of `size` bytes each. */
static void done_two(peer *w, uint64_t id, uint64_t size)
{
    proto_enc en;
    proto_enc_begin(&en, proto_conn_out(w->conn), PROTO_TASK_DONE, 0, 7);
    proto_put_id(&en, tid(id));
    proto_put_i(&en, 0);
    proto_put_u(&en, size);
    proto_put_nil(&en);
    proto_put_str(&en, "");
    proto_put_u(&en, 100);
    proto_put_arr(&en, 1);
    proto_put_arr(&en, 2);
    proto_put_u(&en, size);
    proto_put_nil(&en);
    assert_int_equal(proto_conn_send(w->conn, &en), 0);
}

/* The REPLICATE requests p got whose object is an output of task id. */
static uint32_t replicates_of(const peer *p, uint64_t id)
{
    uint32_t n = 0;
    for (uint32_t i = 0; i < p->n; i++)
        n += p->log[i].type == PROTO_REPLICATE &&
             spw_id_eq(spw_id_output_task(p->log[i].id), tid(id));
    return n;
}

/* A worker of one slot whose store spills (a heartbeat says so), the only kind a reduce is
 * planned on. */
static peer *spilling_worker(env *e, const char *name)
{
    peer *w = peer_connect(e, PROTO_ROLE_WORKER, name, 1);
    uint64_t v[PROTO_STAT_COUNT] = {0};
    v[PROTO_STAT_SPILLS] = 1;
    assert_int_equal(
        proto_send_heartbeat(w->conn, 0, &(proto_heartbeat_msg){.stats = {v, PROTO_STAT_COUNT}}),
        0);
    STEP_UNTIL(e, sched__worker_by_id(e->s, w->session)->stats[PROTO_STAT_SPILLS] == 1);
    return w;
}

/* The workers sending pieces to the worker their reduces are planned on take turns for its
 * window of moves. Maps on w1 (two more than half a window) and two on w2, of two outputs of
 * 100 KiB each, feed two reduces, w1's maps the first and w2's the second, both planned on w3
 * (the only worker whose store spills). w1 makes its maps' pieces: a window of them moves at
 * once, four wait. Then w2 makes one map's: as soon as two moves end, one of w2's pieces is
 * moving, though w1's waited longer and are for the reduce planned first. */
static void senders_to_a_reduce_take_turns(void **state)
{
    env *e = *state;
    peer *w1 = peer_connect(e, PROTO_ROLE_WORKER, "w1", 1);
    peer *w2 = peer_connect(e, PROTO_ROLE_WORKER, "w2", 1);
    peer *w3 = spilling_worker(e, "w3");
    peer *c = peer_connect(e, PROTO_ROLE_CLIENT, "client", 0);
    enum { W1 = SCHED_PUSH_WINDOW / 2 + 2, MAPS = W1 + 2, SIZE = 100 << 10 };
    uint64_t pieces[2 * MAPS];
    proto_enc en;
    submit_begin(&en, c, 1, true, 0, 0, MAPS + 2);
    for (uint64_t m = 0; m < MAPS; m++) {
        put_task_at(&en, (m + 1) << 12, NULL, 0, 0, m < W1 ? "w1" : "w2", 2);
        pieces[2 * m] = (m + 1) << 12;
        pieces[2 * m + 1] = ((m + 1) << 12) | 1;
    }
    put_task_at(&en, 0x100000, pieces, 2 * W1, PROTO_TASK_KEEP, "", 1);
    put_task_at(&en, 0x200000, pieces + 2 * W1, 4, PROTO_TASK_KEEP, "", 1);
    proto_put_str(&en, "test_sched.c:2");
    assert_int_equal(proto_conn_send(c->conn, &en), 0);
    for (uint64_t m = 0; m < W1; m++) {
        STEP_UNTIL(e, got(w1, PROTO_TASK_RUN, tid((m + 1) << 12)));
        done_two(w1, (m + 1) << 12, SIZE);
        STEP_UNTIL(e, tstate(e, (m + 1) << 12) == T_DONE);
    }
    STEP_UNTIL(e, count(w3, PROTO_REPLICATE) == SCHED_PUSH_WINDOW);
    settle(e);
    assert_int_equal(count(w3, PROTO_REPLICATE), SCHED_PUSH_WINDOW);
    STEP_UNTIL(e, got(w2, PROTO_TASK_RUN, tid((W1 + 1) << 12)));
    done_two(w2, (W1 + 1) << 12, SIZE);
    STEP_UNTIL(e, tstate(e, (W1 + 1) << 12) == T_DONE);
    settle(e);
    assert_int_equal(count(w3, PROTO_REPLICATE), SCHED_PUSH_WINDOW);
    /* Two moves end: w3 sealed its copies. */
    for (uint32_t i = 0, ended = 0; i < w3->n && ended < 2; i++) {
        if (w3->log[i].type == PROTO_REPLICATE) {
            obj_added(w3, w3->log[i].id.lo, SIZE);
            ended++;
        }
    }
    STEP_UNTIL(e, count(w3, PROTO_REPLICATE) == SCHED_PUSH_WINDOW + 2);
    assert_int_equal(replicates_of(w3, (W1 + 1) << 12), 1);
}

/* The last map's pieces move too, although making them makes their reduce ready: a reduce that
 * waits for its planned worker's slot would otherwise fetch that map's pieces only once it
 * starts, after the rest of the shuffle has crossed the network. Two maps on w1 of two outputs
 * of 100 KiB feed one reduce, planned on w3 (the only worker whose store spills), which runs a
 * task of its own meanwhile: all four pieces are moved. */
static void last_maps_pieces_move_to_a_reduce_made_ready(void **state)
{
    env *e = *state;
    peer *w1 = peer_connect(e, PROTO_ROLE_WORKER, "w1", 1);
    peer *w3 = spilling_worker(e, "w3");
    peer *c = peer_connect(e, PROTO_ROLE_CLIENT, "client", 0);
    enum { SIZE = 100 << 10 };
    const uint64_t pieces[4] = {1 << 12, (1 << 12) | 1, 2 << 12, (2 << 12) | 1};
    proto_enc en;
    submit_begin(&en, c, 1, true, 0, 0, 4);
    put_task_at(&en, 0x300000, NULL, 0, PROTO_TASK_KEEP, "w3", 1);
    put_task_at(&en, 1 << 12, NULL, 0, 0, "w1", 2);
    put_task_at(&en, 2 << 12, NULL, 0, 0, "w1", 2);
    put_task_at(&en, 0x100000, pieces, 4, PROTO_TASK_KEEP, "", 1);
    proto_put_str(&en, "test_sched.c:2");
    assert_int_equal(proto_conn_send(c->conn, &en), 0);
    STEP_UNTIL(e, got(w3, PROTO_TASK_RUN, tid(0x300000)));
    for (uint64_t m = 1; m <= 2; m++) {
        STEP_UNTIL(e, got(w1, PROTO_TASK_RUN, tid(m << 12)));
        done_two(w1, m << 12, SIZE);
        STEP_UNTIL(e, tstate(e, m << 12) == T_DONE);
    }
    assert_int_equal(tstate(e, 0x100000), T_READY);
    STEP_UNTIL(e, replicates_of(w3, 2 << 12) == 2);
    assert_int_equal(replicates_of(w3, 1 << 12), 2);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test_setup_teardown(task_moves_through_its_states, setup, teardown),
    cmocka_unit_test_setup_teardown(batch_with_bad_records_answers_them_and_takes_the_rest, setup,
                                    teardown),
    cmocka_unit_test_setup_teardown(lone_result_goes_out_in_the_same_iteration, setup, teardown),
    cmocka_unit_test_setup_teardown(input_is_released_after_its_consumer, setup, teardown),
    cmocka_unit_test_setup_teardown(kept_output_released_mid_graph_is_held_for_it, setup, teardown),
    cmocka_unit_test_setup_teardown(failure_propagates_to_consumers, setup, teardown),
    cmocka_unit_test_setup_teardown(worker_status_that_is_no_code_fails_the_task, setup, teardown),
    cmocka_unit_test_setup_teardown(graph_task_cap_holds_back, setup, teardown),
    cmocka_unit_test_setup_teardown(graph_byte_cap_holds_back_sources, setup, teardown),
    cmocka_unit_test_setup_teardown(task_placed_where_its_input_is, setup, teardown),
    cmocka_unit_test_setup_teardown(chain_stays_on_its_worker, setup, teardown),
    cmocka_unit_test_setup_teardown(tasks_go_to_the_least_loaded, setup, teardown),
    cmocka_unit_test_setup_teardown(big_sources_are_dealt_evenly, setup, teardown),
    cmocka_unit_test_setup_teardown(big_source_taken_back_leaves_the_deal, setup, teardown),
    cmocka_unit_test_setup_teardown(queued_task_stays_with_a_large_input, setup, teardown),
    cmocka_unit_test_setup_teardown(queued_task_over_a_small_input_is_taken_back, setup, teardown),
    cmocka_unit_test_setup_teardown(senders_to_a_reduce_take_turns, setup, teardown),
    cmocka_unit_test_setup_teardown(last_maps_pieces_move_to_a_reduce_made_ready, setup,
                                    teardown),
    cmocka_unit_test_setup_teardown(client_disconnect_cancels_its_tasks, setup, teardown),
    cmocka_unit_test_setup_teardown(worker_death_requeues_and_recomputes, setup, teardown),
    cmocka_unit_test_setup_teardown(outputs_nobody_reads_go_when_their_task_ends, setup, teardown),
    cmocka_unit_test_setup_teardown(lost_output_remade_from_a_released_empty_input, setup,
                                    teardown),
    cmocka_unit_test_setup_teardown(lost_output_remade_from_a_released_small_input, setup,
                                    teardown),
    cmocka_unit_test_setup_teardown(lost_output_remade_from_a_released_16_byte_input, setup,
                                    teardown),
    cmocka_unit_test_setup_teardown(lost_output_of_a_larger_released_input_is_remade_with_it,
                                    setup, teardown),
    cmocka_unit_test_setup_teardown(lost_chain_is_remade_all_the_way_down, setup, teardown),
    cmocka_unit_test_setup_teardown(diamond_producer_runs_again_once_per_loss, setup, teardown),
    cmocka_unit_test_setup_teardown(ahead_chain_goes_with_its_producer, setup, teardown),
    cmocka_unit_test_setup_teardown(ahead_stored_chain_goes_one_hop, setup, teardown),
    cmocka_unit_test_setup_teardown(ahead_linear_chain_goes_deeper, setup, teardown),
    cmocka_unit_test_setup_teardown(ahead_chain_of_two_inputs_stays_shallow, setup, teardown),
    cmocka_unit_test_setup_teardown(ahead_chain_on_many_slots_refills_in_batches, setup, teardown),
    cmocka_unit_test_setup_teardown(ahead_failing_producer_fails_its_dependents, setup, teardown),
    cmocka_unit_test_setup_teardown(ahead_dropped_dependent_is_dispatched_again, setup, teardown),
    cmocka_unit_test_setup_teardown(ahead_refusal_of_a_task_not_sent_ahead_fails_it, setup,
                                    teardown),
    cmocka_unit_test_setup_teardown(ahead_worker_death_retries_both, setup, teardown),
    cmocka_unit_test_setup_teardown(ahead_worker_death_with_a_long_chain_ahead, setup, teardown),
    cmocka_unit_test_setup_teardown(ahead_not_for_inputs_of_two_workers, setup, teardown),
    cmocka_unit_test_setup_teardown(ahead_cancelled_with_its_client, setup, teardown),
    cmocka_unit_test_setup_teardown(release_of_unheld_id_is_refused, setup, teardown),
    cmocka_unit_test_setup_teardown(released_put_frees_its_reservation, setup, teardown),
    cmocka_unit_test_setup_teardown(memory_orphan_pass_is_bounded_per_loop_turn, setup, teardown),
    cmocka_unit_test_setup_teardown(memory_store_lists_are_indexed_a_slice_per_loop_turn, setup,
                                    teardown),
    cmocka_unit_test_setup_teardown(lost_put_brought_back_by_a_copy_forgets_its_failure, setup,
                                    teardown),
    cmocka_unit_test_setup_teardown(broadcast_copy_of_an_object_made_again_is_settled_and_dropped,
                                    setup, teardown),
    cmocka_unit_test_setup_teardown(task_too_large_for_the_wire_fails_and_dispatch_goes_on,
                                    setup_64k_frames, teardown),
};

SPW_TEST_MAIN(tests)
