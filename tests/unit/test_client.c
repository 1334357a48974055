/* Unit tests for libspillway's internals that need no cluster: the reference table (refs.c:
 * ids made here found by their counter, other ids by hash, chunks freed as they empty), the
 * encoder of task records (enc.c), which must write exactly proto's bytes, and the client
 * against a scheduler that misbehaves (a fake one on a thread of its own, answering as each
 * test says). */
#include <arpa/inet.h>
#include <limits.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "client_int.h"

#include "test_main.h"

/* A client with no connection: enough for the reference table. */
static spillway *client_new(uint64_t seed_hi, uint64_t seed_lo)
{
    spillway *c = calloc(1, sizeof *c);
    c->id_hi = seed_hi;
    c->id_lo = seed_lo | 1;
    spillway__refs_init(c);
    return c;
}

static void client_free(spillway *c)
{
    spillway__handles_free_all(c);
    free(c);
}

static size_t live_chunks(const spillway *c)
{
    size_t n = 0;
    for (size_t i = 0; i < c->refs.nchunks; i++)
        n += c->refs.chunks[i] != NULL;
    return n;
}

static void test_refs_counter(void **state)
{
    (void)state;
    uint64_t seeds[] = {0, 1, 0x9E3779B97F4A7C15ULL, UINT64_MAX, 0x0123456789abcdefULL};
    for (size_t s = 0; s < sizeof seeds / sizeof seeds[0]; s++) {
        spillway *c = client_new(seeds[s], seeds[s] * 3);
        for (uint64_t k = 1; k <= 5000; k++) {
            spw_id id = spillway__new_id(c);
            assert_int_equal(spillway__id_counter(c, id), k);
        }
        /* Not ours: another tag, a counter not made yet, the nil id. */
        spw_id id = spillway__new_id(c);
        assert_int_equal(spillway__id_counter(c, (spw_id){id.hi, id.lo ^ 2}), 0);
        c->next_id--;
        assert_int_equal(spillway__id_counter(c, id), 0);
        assert_int_equal(spillway__id_counter(c, (spw_id){0, 0}), 0);
        client_free(c);
    }
}

static void test_refs_dense_and_other(void **state)
{
    (void)state;
    spillway *c = client_new(42, 7);
    int64_t before = spw_heap_used(SPW_MOD_CLIENT);
    enum { N = 5 * SPILLWAY__CHUNK + 17 };
    spw_id *ids = malloc(N * sizeof *ids);
    for (size_t i = 0; i < N; i++) {
        ids[i] = spillway__new_id(c);
        if (i % 3 != 2) /* some ids have no reference (tasks not kept) */
            spillway__handle_add(c, ids[i], H_TASK)->size = i;
    }
    spw_id foreign = {0x1234, 0x5679}; /* an automatic put's content id */
    spillway__handle_add(c, foreign, H_PUT)->size = 99;
    assert_int_equal(c->refs.other.n, 1);
    assert_int_equal(c->refs.n, N - N / 3 + 1);
    for (size_t i = 0; i < N; i++) {
        handle *h = spillway__handle_find(c, ids[i]);
        if (i % 3 == 2) {
            assert_null(h);
            continue;
        }
        assert_non_null(h);
        assert_true(h->dense);
        assert_int_equal(h->size, i);
        assert_true(spw_id_eq(h->id, ids[i]));
    }
    assert_int_equal(spillway__handle_find(c, foreign)->size, 99);
    assert_null(spillway__handle_find(c, (spw_id){0x1234, 0x5677}));
    /* A result with a value and a failure with a text: freed with the handle. */
    handle *h = spillway__handle_find(c, ids[0]);
    h->inl = spw_malloc(SPW_MOD_CLIENT, 3);
    h->err = spw_strdup(SPW_MOD_CLIENT, "boom");
    spillway__handle_find(c, ids[1])->inl = spillway__empty;
    /* Releasing a chunk's every reference frees it (one spare is kept). */
    size_t chunks = live_chunks(c);
    for (size_t i = 0; i < SPILLWAY__CHUNK; i++) {
        h = spillway__handle_find(c, ids[i]);
        if (h != NULL)
            spillway__handle_free(c, h);
    }
    for (size_t i = 0; i < SPILLWAY__CHUNK; i++)
        assert_null(spillway__handle_find(c, ids[i]));
    assert_int_equal(live_chunks(c), chunks - 1);
    assert_non_null(c->refs.spare);
    /* A reference added again after its release is a fresh handle. */
    h = spillway__handle_add(c, ids[5], H_SMALL);
    assert_int_equal(h->size, 0);
    assert_ptr_equal(spillway__handle_find(c, ids[5]), h);
    assert_null(c->refs.spare); /* reused */
    spillway__handle_free(c, h);
    spillway__handle_free(c, spillway__handle_find(c, foreign));
    assert_int_equal(c->refs.other.n, 0);
    for (size_t i = 0; i < N; i++)
        if ((h = spillway__handle_find(c, ids[i])) != NULL)
            spillway__handle_free(c, h);
    assert_int_equal(c->refs.n, 0);
    assert_int_equal(live_chunks(c), 0);
    spillway__handles_free_all(c);
    assert_int_equal(spw_heap_used(SPW_MOD_CLIENT), before);
    /* Freeing everything with references still held (spillway_close). */
    for (size_t i = 0; i < 3000; i++)
        spillway__handle_add(c, spillway__new_id(c), H_TASK)->inl =
            i % 2 ? spillway__empty : spw_malloc(SPW_MOD_CLIENT, 8);
    spillway__handle_add(c, foreign, H_PUT);
    spillway__handles_free_all(c);
    assert_int_equal(spw_heap_used(SPW_MOD_CLIENT), before);
    free(ids);
    client_free(c);
}

/* A program that keeps one reference out of each chunk's worth of ids (one result of each large
 * graph) must not pin a 56 KiB chunk per reference: sparse chunks hand their handles to the
 * hash table once they are most of the memory. */
static void test_refs_sparse_chunks_are_swept(void **state)
{
    (void)state;
    spillway *c = client_new(99, 5);
    int64_t before = spw_heap_used(SPW_MOD_CLIENT);
    enum { GRAPHS = 200 };
    spw_id kept[GRAPHS];
    for (size_t g = 0; g < GRAPHS; g++) {
        /* A graph of 3,000 tasks of which all are kept until it is done, then one stays. */
        spw_id ids[3000];
        for (size_t i = 0; i < 3000; i++) {
            ids[i] = spillway__new_id(c);
            spillway__handle_add(c, ids[i], H_TASK)->size = g;
        }
        for (size_t i = 0; i < 2999; i++)
            spillway__handle_free(c, spillway__handle_find(c, ids[i]));
        kept[g] = ids[2999];
        assert_true(c->refs.nalloc <= 16 + 4);
    }
    assert_int_equal(c->refs.n, GRAPHS);
    assert_true(c->refs.other.n >= GRAPHS - 20); /* swept into the hash table */
    /* Memory: the table and a few chunks, not one chunk per kept reference. */
    assert_true(spw_heap_used(SPW_MOD_CLIENT) - before < 24 * 60000);
    for (size_t g = 0; g < GRAPHS; g++) {
        handle *h = spillway__handle_find(c, kept[g]);
        assert_non_null(h);
        assert_int_equal(h->size, g);
        assert_true(spw_id_eq(h->id, kept[g]));
    }
    /* Dense and swept handles side by side in one range: a new reference there is added to a
     * new chunk, the swept ones are still found. */
    for (size_t g = 0; g < GRAPHS; g += 2)
        spillway__handle_free(c, spillway__handle_find(c, kept[g]));
    for (size_t g = 0; g < GRAPHS; g++)
        assert_true((spillway__handle_find(c, kept[g]) != NULL) == (g % 2 == 1));
    spillway__handles_free_all(c);
    assert_int_equal(spw_heap_used(SPW_MOD_CLIENT), before);
    client_free(c);
}

/* Compares spillway__put_task_rec with proto_put_task_rec on record r (appended after `pre`
 * bytes already in the buffer, as in a graph). */
static void same_bytes(const proto_task_rec *r, size_t pre)
{
    spw_buf want = {0}, got = {0};
    static const uint8_t junk[300] = {1};
    spw_buf_append(&want, junk, pre);
    spw_buf_append(&got, junk, pre);
    proto_enc e;
    proto_enc_raw(&e, &want);
    proto_task_rec pr = *r;
    proto_put_task_rec(&e, &pr);
    spillway__put_task_rec(&got, r);
    if (got.len != want.len || memcmp(got.data, want.data, got.len) != 0) {
        size_t at = 0;
        while (at < got.len && at < want.len && got.data[at] == want.data[at])
            at++;
        fail_msg("task record differs from proto_put_task_rec at byte %zu (lengths %zu, %zu; "
                 "fn %zu bytes, %u args)",
                 at, got.len, want.len, strlen(r->fn), r->args.n);
    }
    spw_buf_release(&want);
    spw_buf_release(&got);
}

static void test_task_rec_matches_proto(void **state)
{
    (void)state;
    static char big[70000];
    memset(big, 'x', sizeof big);
    char name[300];
    memset(name, 'f', sizeof name);
    spw_id objs[4] = {{1, 2}, {UINT64_MAX, 0}, {0x0102030405060708ULL, 0x1112131415161718ULL}};
    /* Argument shapes: inline values of every msgpack length class, an empty one, objects,
     * views with offsets and lengths of every integer class. */
    size_t lens[] = {0, 1, 8, 31, 32, 255, 256, 65535, 65536, 69999};
    uint64_t nums[] = {0, 1, 127, 128, 255, 256, 65535, 65536, UINT32_MAX,
                       (uint64_t)UINT32_MAX + 1, UINT64_MAX};
    proto_arg_rec args[40];
    size_t na = 0;
    for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++)
        args[na++] = (proto_arg_rec){.kind = PROTO_ARG_INLINE, .value = {big, lens[i]}};
    args[na++] = (proto_arg_rec){.kind = PROTO_ARG_INLINE, .value = {"", 0}};
    args[na++] = (proto_arg_rec){.kind = PROTO_ARG_INLINE}; /* nil value */
    for (size_t i = 0; i < sizeof nums / sizeof nums[0]; i++)
        args[na++] = (proto_arg_rec){.kind = i % 2 ? PROTO_ARG_VIEW : PROTO_ARG_OBJ,
                                     .obj = &objs[i % 3],
                                     .off = nums[i],
                                     .len = nums[sizeof nums / sizeof nums[0] - 1 - i]};
    size_t fnlens[] = {1, 4, 31, 32, 255, 256, 299};
    uint32_t nargs[] = {0, 1, 2, 15, 16, (uint32_t)na};
    for (size_t f = 0; f < sizeof fnlens / sizeof fnlens[0]; f++) {
        char fn[300];
        memcpy(fn, name, fnlens[f]);
        fn[fnlens[f]] = '\0';
        for (size_t a = 0; a < sizeof nargs / sizeof nargs[0]; a++) {
            for (int variant = 0; variant < 4; variant++) {
                proto_task_rec r = {
                    .id = {0x8000000000000001ULL * (f + 1), 0xfedcba9876543211ULL},
                    .fn = fn,
                    .args = {.n = nargs[a], .v = args + (a % 2)},
                    .flags = variant % 2 ? PROTO_TASK_KEEP : nums[(f + a) % 11],
                    .site = variant == 0   ? NULL
                            : variant == 1 ? "tests/bench/bench.c:190"
                                           : fn,
                    .worker = variant >= 2 ? (variant == 2 ? "w1" : fn) : "",
                    .omit_worker = variant < 2,
                };
                if (r.args.n + (a % 2) > na)
                    r.args.n = (uint32_t)(na - (a % 2));
                same_bytes(&r, (f * 7 + a) % 300);
            }
        }
    }
}

/* ------------------------------------------------- a scheduler that misbehaves */

/* A scheduler that speaks the wire protocol from its own thread and loop, so that the client's
 * blocking calls get answers: `answer` sees every message after the handshake and says what the
 * client gets back. Both sides share a secret in a file of the test's own directory. */
typedef struct fake_sched fake_sched;
struct fake_sched {
    uv_loop_t loop;
    uv_async_t stop;
    proto_ctx *ctx;
    pthread_t thread;
    char addr[64];
    char dir[64];
    char secret_file[96];
    void (*answer)(fake_sched *f, proto_conn *c, const proto_msg *m);
    /* A worker's peer port on the same loop, for puts over TCP. */
    char peer_addr[64];
    uv_async_t resume;  /* resumes `paused` */
    proto_conn *paused; /* a connection an answer paused, or NULL */
    pthread_mutex_t mu; /* guards saw_reused, which the test thread reads */
    bool saw_reused;    /* a chunk after the first carried the bytes of a reused buffer */
    bool put_over;      /* the last chunk came, or `paused` is gone */
    proto_conn *asker;  /* the connection of a GRAPHS_REQ held until put_over */
    uint64_t asker_req;
};

#define FAKE_SECRET "0123456789abcdef0123456789abcdef"

static int fake_hello(proto_conn *c, const proto_msg *hello, proto_welcome *w, char *err,
                      size_t errlen)
{
    (void)c, (void)hello, (void)err, (void)errlen;
    *w = (proto_welcome){
        .session = 7, .inline_limit = 256, .chunk = 1 << 20, .max_frame = PROTO_DEFAULT_MAX_FRAME};
    return 0;
}

static void fake_msg(proto_conn *c, const proto_msg *m)
{
    fake_sched *f = proto_ctx_data(proto_conn_ctx(c));
    if (f->answer != NULL)
        f->answer(f, c, m);
}

/* The put's chunks have all come, or their connection is gone: a held GRAPHS_REQ is answered
 * (with no graph). */
static void fake_put_over(fake_sched *f)
{
    f->put_over = true;
    if (f->asker != NULL)
        proto_send_graphs(f->asker, f->asker_req, &(proto_graphs_msg){.graphs = {.n = 0}});
    f->asker = NULL;
}

static void fake_close(proto_conn *c, int status)
{
    (void)status;
    fake_sched *f = proto_ctx_data(proto_conn_ctx(c));
    if (c == f->paused) {
        f->paused = NULL;
        fake_put_over(f);
    }
    if (c == f->asker)
        f->asker = NULL;
}

static const proto_conn_cbs fake_cbs = {
    .on_hello = fake_hello,
    .on_msg = fake_msg,
    .on_close = fake_close,
};

static void fake_ctx_closed(void *arg)
{
    (void)arg;
}

static void fake_stop_cb(uv_async_t *a)
{
    fake_sched *f = a->data;
    proto_ctx_close(f->ctx, fake_ctx_closed, f);
    uv_close((uv_handle_t *)&f->stop, NULL);
    uv_close((uv_handle_t *)&f->resume, NULL);
}

static void fake_resume_cb(uv_async_t *a)
{
    fake_sched *f = a->data;
    if (f->paused != NULL)
        proto_conn_resume(f->paused);
}

static void *fake_run(void *arg)
{
    fake_sched *f = arg;
    uv_run(&f->loop, UV_RUN_DEFAULT);
    return NULL;
}

/* The role the fake answers the handshake as: a scheduler, unless a test says otherwise. */
static int fake_role = PROTO_ROLE_SCHEDULER;

static void fake_start(fake_sched *f, void (*answer)(fake_sched *, proto_conn *, const proto_msg *))
{
    memset(f, 0, sizeof *f);
    f->answer = answer;
    snprintf(f->dir, sizeof f->dir, "/tmp/spw-test-client-XXXXXX");
    assert_non_null(mkdtemp(f->dir));
    snprintf(f->secret_file, sizeof f->secret_file, "%s/secret", f->dir);
    FILE *fp = fopen(f->secret_file, "w");
    assert_non_null(fp);
    fputs(FAKE_SECRET "\n", fp);
    fclose(fp);
    assert_int_equal(chmod(f->secret_file, 0600), 0);
    assert_int_equal(uv_loop_init(&f->loop), 0);
    assert_int_equal(uv_async_init(&f->loop, &f->stop, fake_stop_cb), 0);
    f->stop.data = f;
    assert_int_equal(uv_async_init(&f->loop, &f->resume, fake_resume_cb), 0);
    f->resume.data = f;
    pthread_mutex_init(&f->mu, NULL);
    proto_ctx_opts po;
    proto_ctx_opts_default(&po);
    po.role = fake_role;
    po.name = "fake-scheduler";
    po.secret = (const uint8_t *)FAKE_SECRET;
    po.secret_len = strlen(FAKE_SECRET);
    assert_int_equal(proto_ctx_new(&f->loop, &po, &f->ctx), 0);
    proto_ctx_set_data(f->ctx, f);
    assert_int_equal(
        proto_listen(f->ctx, "127.0.0.1:0", &fake_cbs, NULL, NULL, f->addr, sizeof f->addr), 0);
    assert_int_equal(proto_listen(f->ctx, "127.0.0.1:0", &fake_cbs, NULL, NULL, f->peer_addr,
                                  sizeof f->peer_addr),
                     0);
    assert_int_equal(pthread_create(&f->thread, NULL, fake_run, f), 0);
}

static void fake_stop(fake_sched *f)
{
    uv_async_send(&f->stop);
    assert_int_equal(pthread_join(f->thread, NULL), 0);
    assert_int_equal(uv_loop_close(&f->loop), 0);
    pthread_mutex_destroy(&f->mu);
    unlink(f->secret_file);
    rmdir(f->dir);
}

static spillway *fake_client(const fake_sched *f)
{
    spillway_opts o;
    spillway_opts_init(&o);
    o.secret_file = f->secret_file;
    o.no_local = 1;
    spillway *c = NULL;
    assert_int_equal(spillway_connect(f->addr, &o, &c), 0);
    return c;
}

/* Answers LOCATE with a SUBMIT of the same request id, whose sixth field is a string where
 * LOCATION has its list of locations. */
static void answer_locate_with_submit(fake_sched *f, proto_conn *c, const proto_msg *m)
{
    (void)f;
    if (m->type != PROTO_LOCATE)
        return;
    proto_send_submit(c, m->req,
                      &(proto_submit_msg){.graph = 1,
                                          .max_bytes = 1,
                                          .site = "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
                                                  "AAAAAAAAAAAAAAAA"});
}

/* A get of an object the fake answers for fails with SPW_EPROTO, handing nothing back, and its
 * errmsg says why. */
static void get_is_eproto(spillway *c, const char *why)
{
    void *data = NULL;
    size_t len = 0;
    assert_int_equal(spillway_get(c, (spillway_ref){0x1234, 0x5679}, 60000, &data, &len),
                     SPW_EPROTO);
    assert_null(data);
    assert_non_null(strstr(spillway_errmsg(c), why));
}

/* A reply of another type than the request's is the scheduler's error: the call fails with
 * SPW_EPROTO and says so. It used to be read as the reply it is not (a string taken for a list
 * of records: a crash), or ignored while the call waited on. */
static void client_reply_of_another_type_is_eproto(void **state)
{
    (void)state;
    fake_sched f;
    fake_start(&f, answer_locate_with_submit);
    spillway *c = fake_client(&f);
    get_is_eproto(c, "type");
    spillway_close(c);
    fake_stop(&f);
}

/* Acknowledges a graph at its last SUBMIT frame, ntasks of it taken. */
static void ack_at_end(proto_conn *c, const proto_msg *m, uint64_t ntasks)
{
    if (m->type == PROTO_SUBMIT && (m->f[F_SUBMIT_FLAGS].u & PROTO_SUBMIT_END))
        proto_send_submit_ack(
            c, m->req, &(proto_submit_ack_msg){.graph = m->f[F_SUBMIT_GRAPH].u, .ntasks = ntasks});
}

/* Refuses a SUBMIT frame's first task with code, naming it as the scheduler names a refused
 * task, then acknowledges the graph at its last frame with none taken. */
static void refuse_first_task(proto_conn *c, const proto_msg *m, int code, const char *why)
{
    char hex[33];
    const proto_val *tasks = &m->f[F_SUBMIT_TASKS];
    if (tasks->arr.n > 0)
        proto_conn_error(c, m->req, code, "task=%s: %s",
                         spw_id_hex(PROTO_REC(tasks, 0)[R_TASK_ID].id, hex), why);
    ack_at_end(c, m, 0);
}

/* Answers a graph's last SUBMIT frame with three results for each kept task (a failure, then
 * two values), then the ack. */
static void answer_submit_with_repeated_results(fake_sched *f, proto_conn *c, const proto_msg *m)
{
    (void)f;
    if (m->type != PROTO_SUBMIT)
        return;
    const proto_val *tasks = &m->f[F_SUBMIT_TASKS];
    for (uint32_t i = 0; i < tasks->arr.n; i++) {
        const proto_val *r = PROTO_REC(tasks, i);
        if (!(r[R_TASK_FLAGS].u & PROTO_TASK_KEEP))
            continue;
        spw_id id = r[R_TASK_ID].id;
        proto_send_task_result(c, 0,
                               &(proto_task_result_msg){.id = id,
                                                        .status = SPW_ETASKFAILED,
                                                        .value = {NULL, 0},
                                                        .err = "the first run failed"});
        proto_send_task_result(
            c, 0, &(proto_task_result_msg){.id = id, .size = 5, .value = {"first", 5}, .err = ""});
        proto_send_task_result(
            c, 0, &(proto_task_result_msg){.id = id, .size = 6, .value = {"second", 6}, .err = ""});
    }
    ack_at_end(c, m, tasks->arr.n);
}

/* A task's result that comes again (a lineage re-run, or a scheduler that repeats itself)
 * replaces the one before and frees it: the last one is what the client gets, and releasing
 * the reference gives back all the memory the results took. */
static void client_repeated_result_replaces_the_last(void **state)
{
    (void)state;
    fake_sched f;
    fake_start(&f, answer_submit_with_repeated_results);
    int64_t before = spw_heap_used(SPW_MOD_CLIENT);
    spillway *c = fake_client(&f);
    spillway_graph *g = spillway_graph_new(c);
    spillway_ref ref;
    assert_int_equal(spillway_task(g, "f", NULL, 0, SPILLWAY_KEEP, &ref), 0);
    assert_int_equal(spillway_submit(g), 0);
    spillway_graph_free(g);
    assert_int_equal(spillway_wait(c, &ref, 1, 60000), 0);
    void *data = NULL;
    size_t len = 0;
    assert_int_equal(spillway_get(c, ref, 60000, &data, &len), 0);
    assert_int_equal(len, 6);
    assert_memory_equal(data, "second", 6);
    spillway_free(data);
    assert_int_equal(spillway_release(c, ref), 0);
    spillway_close(c);
    assert_int_equal(spw_heap_used(SPW_MOD_CLIENT), before);
    fake_stop(&f);
}

/* Answers GRAPHS_REQ with a SUBMIT_ACK. */
static void answer_graphs_with_an_ack(fake_sched *f, proto_conn *c, const proto_msg *m)
{
    (void)f;
    if (m->type == PROTO_GRAPHS_REQ)
        proto_send_submit_ack(c, m->req, &(proto_submit_ack_msg){.graph = 1, .ntasks = 0});
}

/* A reply of another type to spillway_graph_status fails it with SPW_EPROTO naming both types.
 * It was taken for no reply: SPW_ENOOBJ, "the scheduler knows no such graph". */
static void client_graph_status_of_another_type_is_eproto(void **state)
{
    (void)state;
    fake_sched f;
    fake_start(&f, answer_graphs_with_an_ack);
    spillway *c = fake_client(&f);
    spillway_graph_progress gp;
    assert_int_equal(spillway_graph_status(c, 1, &gp), SPW_EPROTO);
    assert_non_null(strstr(spillway_errmsg(c), "type"));
    spillway_close(c);
    fake_stop(&f);
}

/* Answers every kept task with a result whose status is past an int (2^32, whose low bits read
 * 0), and every LOCATE with a positive status. */
static void answer_statuses_that_are_no_codes(fake_sched *f, proto_conn *c, const proto_msg *m)
{
    (void)f;
    if (m->type == PROTO_LOCATE) {
        proto_send_location(c, m->req,
                            &(proto_location_msg){.id = m->f[F_LOCATE_ID].id,
                                                  .status = 5,
                                                  .value = {NULL, 0},
                                                  .err = "a positive status"});
        return;
    }
    if (m->type != PROTO_SUBMIT)
        return;
    const proto_val *tasks = &m->f[F_SUBMIT_TASKS];
    for (uint32_t i = 0; i < tasks->arr.n; i++) {
        const proto_val *r = PROTO_REC(tasks, i);
        if (r[R_TASK_FLAGS].u & PROTO_TASK_KEEP)
            proto_send_task_result(c, 0,
                                   &(proto_task_result_msg){.id = r[R_TASK_ID].id,
                                                            .status = INT64_C(1) << 32,
                                                            .value = {NULL, 0},
                                                            .err = "a status past an int"});
    }
    ack_at_end(c, m, tasks->arr.n);
}

/* A task's or a location's status that is neither 0 nor an error code fails the call with
 * SPW_EPROTO. It was cast to int: 2^32 made the task a success with no value, a positive status
 * came back from spillway_get as it was. */
static void client_status_that_is_no_code_fails_the_call(void **state)
{
    (void)state;
    fake_sched f;
    fake_start(&f, answer_statuses_that_are_no_codes);
    spillway *c = fake_client(&f);
    spillway_graph *g = spillway_graph_new(c);
    spillway_ref ref;
    assert_int_equal(spillway_task(g, "f", NULL, 0, SPILLWAY_KEEP, &ref), 0);
    assert_int_equal(spillway_submit(g), 0);
    spillway_graph_free(g);
    assert_int_equal(spillway_wait(c, &ref, 1, 60000), SPW_EPROTO);
    assert_int_equal(spillway_release(c, ref), 0);
    get_is_eproto(c, "a positive status");
    spillway_close(c);
    fake_stop(&f);
}

/* A scheduler that takes puts as stored already, locates every object as 4 inline bytes, and
 * refuses the first task of every graph (naming it, as the scheduler does) and accepts the
 * rest. */
static void answer_refusing_the_first_task(fake_sched *f, proto_conn *c, const proto_msg *m)
{
    (void)f;
    if (m->type == PROTO_PUT_PLACE) {
        proto_send_put_target(
            c, m->req,
            &(proto_put_target_msg){
                .id = m->f[F_PUTP_ID].id, .addr = "", .host_id = "", .local = "", .exists = 1});
    } else if (m->type == PROTO_LOCATE) {
        proto_send_location(
            c, m->req,
            &(proto_location_msg){
                .id = m->f[F_LOCATE_ID].id, .size = 4, .value = {"abcd", 4}, .err = ""});
    } else if (m->type == PROTO_SUBMIT) {
        refuse_first_task(c, m, SPW_ELIMIT, "refused by the test");
    }
}

/* A graph refused in part fails spillway_submit with the refusal's own text (which task and
 * why), also when the graph held automatic puts it gives back on the way out. */
static void client_submit_refusal_keeps_its_message(void **state)
{
    (void)state;
    fake_sched f;
    fake_start(&f, answer_refusing_the_first_task);
    spillway *c = fake_client(&f);
    static char big[1000]; /* over the inline limit of 256: an automatic put */
    spillway_graph *g = spillway_graph_new(c);
    spillway_arg a = spillway_arg_bytes(big, sizeof big);
    assert_int_equal(spillway_task(g, "f", &a, 1, 0, NULL), 0);
    assert_int_equal(spillway_submit(g), SPW_ELIMIT);
    assert_non_null(strstr(spillway_errmsg(c), "refused by the test"));
    spillway_graph_free(g);
    spillway_close(c);
    fake_stop(&f);
}

/* map_blocks whose submission fails hands out no references: it holds none either (the
 * results of the tasks that were accepted are given back), else a client that retries keeps
 * them, and the scheduler their objects, for as long as it stays connected. */
static void client_map_blocks_refused_holds_nothing(void **state)
{
    (void)state;
    fake_sched f;
    fake_start(&f, answer_refusing_the_first_task);
    spillway *c = fake_client(&f);
    spillway_map_opts o = {.nblocks = 4};
    spillway_ref *parts = NULL;
    size_t nparts = 0;
    assert_int_equal(
        spillway_map_blocks(c, "f", ((spillway_ref){0x1234, 0x5679}), NULL, 0, &o, &parts, &nparts),
        SPW_ELIMIT);
    assert_null(parts);
    assert_non_null(strstr(spillway_errmsg(c), "refused by the test"));
    assert_int_equal(c->refs.n, 0);
    spillway_close(c);
    fake_stop(&f);
}

/* Places every put on the fake worker, which refuses the object at its first chunk (as a
 * worker whose store and spill are full does) and then reads nothing more until resumed: the
 * rest of the put's chunks stay queued in the client. Chunks read after that are checked for
 * the bytes the test writes into the put's buffer once spillway_put has returned; a GRAPHS_REQ
 * is answered once the put's chunks have all come or their connection is gone. */
static void answer_put_refused_at_first_chunk(fake_sched *f, proto_conn *c, const proto_msg *m)
{
    if (m->type == PROTO_PUT_PLACE) {
        proto_send_put_target(
            c, m->req,
            &(proto_put_target_msg){
                .id = m->f[F_PUTP_ID].id, .addr = f->peer_addr, .host_id = "", .local = ""});
    } else if (m->type == PROTO_OBJ_WRITE && m->f[F_WRITE_OFF].u == 0) {
        proto_conn_error(c, m->req, SPW_ESPILLFULL, "refused by the test");
        f->paused = c;
        proto_conn_pause(c);
    } else if (m->type == PROTO_OBJ_WRITE) {
        const proto_val *d = &m->f[F_WRITE_DATA];
        if (memchr(d->bin.ptr, 'X', d->bin.len) != NULL) {
            pthread_mutex_lock(&f->mu);
            f->saw_reused = true;
            pthread_mutex_unlock(&f->mu);
        }
        if (m->f[F_WRITE_FLAGS].u & PROTO_CHUNK_LAST)
            fake_put_over(f);
    } else if (m->type == PROTO_GRAPHS_REQ) {
        f->asker = c;
        f->asker_req = m->req;
        if (f->put_over)
            fake_put_over(f);
    }
}

/* A put that fails gives the caller's buffer back: nothing of it is written after
 * spillway_put returns. It used to return at the worker's refusal with the rest of the chunks
 * still queued, borrowed from that buffer, and wrote them during the next call: bytes the
 * caller had reused (or, freed, a use after free). */
static void client_failed_put_leaves_its_buffer_alone(void **state)
{
    (void)state;
    fake_sched f;
    fake_start(&f, answer_put_refused_at_first_chunk);
    spillway *c = fake_client(&f);
    size_t len = 64u << 20; /* 64 chunks of 1 MiB: more than the sockets buffer */
    uint8_t *buf = malloc(len);
    assert_non_null(buf);
    memset(buf, 'a', len);
    spillway_ref ref;
    assert_int_equal(spillway_put(c, buf, len, &ref), SPW_ESPILLFULL);
    memset(buf, 'X', len); /* the caller's again */
    uv_async_send(&f.resume);
    /* A call that runs the client's loop until the worker has all it will get. */
    spillway_graph_progress gp;
    assert_int_equal(spillway_graph_status(c, 1, &gp), SPW_ENOOBJ);
    pthread_mutex_lock(&f.mu);
    bool reused = f.saw_reused;
    pthread_mutex_unlock(&f.mu);
    assert_false(reused);
    spillway_close(c);
    free(buf);
    fake_stop(&f);
}

/* Locates every object as a 4-byte value (answer_value) or, past 2^61 bytes, in no store
 * (answer_huge). */
static void answer_locate(proto_conn *c, const proto_msg *m, bool huge)
{
    if (m->type != PROTO_LOCATE)
        return;
    proto_send_location(
        c, m->req,
        &(proto_location_msg){.id = m->f[F_LOCATE_ID].id,
                              .size = huge ? (UINT64_C(1) << 61) + 8 : 4,
                              .value = huge ? (proto_bytes){NULL, 0} : (proto_bytes){"abcd", 4},
                              .err = ""});
}

static void answer_value(fake_sched *f, proto_conn *c, const proto_msg *m)
{
    (void)f;
    answer_locate(c, m, false);
}

static void answer_huge(fake_sched *f, proto_conn *c, const proto_msg *m)
{
    (void)f;
    answer_locate(c, m, true);
}

/* A timeout as long as an int allows is a timeout, not an overflow: spillway_get added its
 * second of slack to the time left in an int (undefined behaviour; a negative wait). */
static void client_get_with_the_longest_timeout(void **state)
{
    (void)state;
    fake_sched f;
    fake_start(&f, answer_value);
    spillway *c = fake_client(&f);
    void *data = NULL;
    size_t len = 0;
    assert_int_equal(spillway_get(c, (spillway_ref){0x1234, 0x5679}, INT_MAX, &data, &len), 0);
    assert_int_equal(len, 4);
    assert_memory_equal(data, "abcd", 4);
    spillway_free(data);
    spillway_close(c);
    fake_stop(&f);
}

/* map_blocks over an object of more blocks than an array of references can count fails
 * cleanly: the array's size was multiplied unchecked, so it wrapped to a few bytes and the
 * blocks' references were written past it. */
static void client_map_blocks_of_too_many_blocks_is_enomem(void **state)
{
    (void)state;
    fake_sched f;
    fake_start(&f, answer_huge);
    spillway *c = fake_client(&f);
    spillway_map_opts o = {.block_size = 1};
    spillway_ref *parts = NULL;
    size_t nparts = 0;
    assert_int_equal(
        spillway_map_blocks(c, "f", ((spillway_ref){0x1234, 0x5679}), NULL, 0, &o, &parts, &nparts),
        SPW_ENOMEM);
    assert_null(parts);
    spillway_close(c);
    fake_stop(&f);
}

/* Acknowledges every graph's last SUBMIT frame and answers GRAPHS_REQ with no graph. */
static void answer_acking(fake_sched *f, proto_conn *c, const proto_msg *m)
{
    (void)f;
    if (m->type == PROTO_SUBMIT)
        ack_at_end(c, m, m->f[F_SUBMIT_TASKS].arr.n);
    else if (m->type == PROTO_GRAPHS_REQ)
        proto_send_graphs(c, m->req, &(proto_graphs_msg){.graphs = {.n = 0}});
}

/* A task whose record, with the values it carries, is larger than the scheduler takes in one
 * frame (--max-frame) is refused by spillway_task with SPW_EFRAMESIZE, the graph left as it
 * was. It used to be sent: the scheduler closed the connection at the frame's length, so
 * spillway_submit failed with SPW_ECLOSED and the handle lost its session and every reference
 * it held. A record that fits alone but not beside the records before it goes in a frame of
 * its own. */
static void client_task_over_the_frame_limit_is_refused(void **state)
{
    (void)state;
    fake_sched f;
    fake_start(&f, answer_acking);
    spillway_opts o;
    spillway_opts_init(&o);
    o.secret_file = f.secret_file;
    o.no_local = 1;
    o.no_auto_put = 1; /* large values are embedded in the task's record */
    spillway *c = NULL;
    assert_int_equal(spillway_connect(f.addr, &o, &c), 0);
    size_t big = PROTO_DEFAULT_MAX_FRAME; /* the fake's --max-frame, with no room left */
    uint8_t *buf = calloc(1, big);
    assert_non_null(buf);
    spillway_graph *g = spillway_graph_new(c);
    spillway_ref kept;
    assert_int_equal(spillway_task(g, "f", NULL, 0, SPILLWAY_KEEP, &kept), 0);
    spillway_arg a = spillway_arg_bytes(buf, big);
    spillway_ref ref = {0, 0};
    assert_int_equal(spillway_task(g, "f", &a, 1, SPILLWAY_KEEP, &ref), SPW_EFRAMESIZE);
    assert_true(ref.hi == 0 && ref.lo == 0);
    assert_non_null(strstr(spillway_errmsg(c), "frame"));
    /* 64 KiB under the limit fits alone, though not beside the records before it (600 of over
     * 240 bytes, under the 256 KiB at which a frame is cut). */
    spillway_arg u = spillway_arg_bytes(buf, 240); /* inline: under the fake's 256 */
    for (int i = 0; i < 600; i++)
        assert_int_equal(spillway_task(g, "f", &u, 1, 0, NULL), 0);
    spillway_arg half = spillway_arg_bytes(buf, PROTO_DEFAULT_MAX_FRAME - (64u << 10));
    assert_int_equal(spillway_task(g, "f", &half, 1, 0, NULL), 0);
    assert_int_equal(spillway_submit(g), 0);
    spillway_graph_free(g);
    /* The session is still there: its references too. */
    spillway_graph_progress gp;
    assert_int_equal(spillway_graph_status(c, 1, &gp), SPW_ENOOBJ);
    assert_int_equal(spillway_release(c, kept), 0);
    free(buf);
    spillway_close(c);
    fake_stop(&f);
}

/* Answers with ERROR frames that carry no error code (0): a read from the fake worker, and a
 * graph's first task (named, as the scheduler names a refused task) before its ack. Objects are
 * located as 100 bytes on the fake worker. */
static void answer_errors_without_a_code(fake_sched *f, proto_conn *c, const proto_msg *m)
{
    if (m->type == PROTO_LOCATE) {
        proto_loc_rec loc = {.worker = 1, .addr = f->peer_addr, .host_id = "", .local = ""};
        proto_send_location(c, m->req,
                            &(proto_location_msg){.id = m->f[F_LOCATE_ID].id,
                                                  .size = 100,
                                                  .value = {NULL, 0},
                                                  .err = "",
                                                  .locs = {.n = 1, .v = &loc}});
    } else if (m->type == PROTO_OBJ_READ) {
        proto_conn_error(c, m->req, 0, "an error without a code");
    } else if (m->type == PROTO_SUBMIT) {
        refuse_first_task(c, m, 0, "refused without a code");
    }
}

/* An ERROR whose code is not an error (0, or positive) fails the call with SPW_EPROTO. Its code
 * was taken as the call's result: a worker's refusal to read an object made spillway_get
 * succeed with a buffer of bytes never written, and a refused task made spillway_submit and
 * spillway_wait return 0. */
static void client_error_without_a_code_fails_the_call(void **state)
{
    (void)state;
    fake_sched f;
    fake_start(&f, answer_errors_without_a_code);
    spillway *c = fake_client(&f);
    get_is_eproto(c, "an error without a code");
    spillway_graph *g = spillway_graph_new(c);
    spillway_ref ref;
    assert_int_equal(spillway_task(g, "f", NULL, 0, SPILLWAY_KEEP, &ref), 0);
    assert_int_equal(spillway_submit(g), SPW_EPROTO);
    assert_non_null(strstr(spillway_errmsg(c), "refused without a code"));
    spillway_graph_free(g);
    assert_int_equal(spillway_wait(c, &ref, 1, 60000), SPW_EPROTO);
    assert_int_equal(spillway_release(c, ref), 0);
    spillway_close(c);
    fake_stop(&f);
}

/* A worker's peer port proves the secret and says READY like a scheduler, but answers no
 * scheduler request: connecting there is refused at once, naming what answered, rather than
 * leaving later calls waiting for ever. */
static void client_connect_to_a_worker_port_is_refused(void **state)
{
    (void)state;
    fake_sched f;
    fake_role = PROTO_ROLE_WORKER;
    fake_start(&f, NULL);
    fake_role = PROTO_ROLE_SCHEDULER;
    spillway_opts o;
    spillway_opts_init(&o);
    o.secret_file = f.secret_file;
    o.no_local = 1;
    spillway *c = NULL;
    assert_int_equal(spillway_connect(f.addr, &o, &c), SPW_EPROTO);
    assert_null(c);
    const char *why = spillway_errmsg(NULL);
    assert_non_null(strstr(why, f.addr));
    assert_non_null(strstr(why, "worker"));
    assert_non_null(strstr(why, "not a scheduler"));
    fake_stop(&f);
}

/* A connect that fails leaves a text for spillway_errmsg(NULL) naming the address and why. */
static void client_connect_failures_say_why(void **state)
{
    (void)state;
    static const struct {
        const char *addr, *why;
    } bad[] = {
        {"127.0.0.1", "no port"},
        {"127.0.0.1:99999", "outside 1..65535"},
        {"localhost:", "empty port"},
        {"127.0.0.1:7x", "not a number"},
        {":7400", "no host"},
    };
    spillway *c = NULL;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(spillway_connect(bad[i].addr, NULL, &c), SPW_EINVAL);
        assert_null(c);
        const char *why = spillway_errmsg(NULL);
        assert_non_null(strstr(why, bad[i].addr));
        assert_non_null(strstr(why, bad[i].why));
    }
    /* A port nobody listens on: bound, then closed, so it was free a moment ago. */
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof sa), 0);
    socklen_t sl = sizeof sa;
    assert_int_equal(getsockname(fd, (struct sockaddr *)&sa, &sl), 0);
    char addr[32];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", ntohs(sa.sin_port));
    close(fd);
    spillway_opts o;
    spillway_opts_init(&o);
    o.no_local = 1;
    assert_int_equal(spillway_connect(addr, &o, &c), SPW_ECONNREFUSED);
    assert_non_null(strstr(spillway_errmsg(NULL), addr));
    assert_non_null(strstr(spillway_errmsg(NULL), spillway_strerror(SPW_ECONNREFUSED)));
}

/* errmsg after a refused call has the call, the error and what was wrong: the argument, its
 * value and the limit it broke. */
static void refused_says(spillway *c, int rc, const char *fn, const char *why)
{
    assert_int_equal(rc, SPW_EINVAL);
    const char *m = spillway_errmsg(c);
    fprintf(stderr, "errmsg: %s\n", m);
    if (strstr(m, fn) == NULL || strstr(m, why) == NULL)
        fail_msg("errmsg '%s' lacks '%s' or '%s'", m, fn, why);
}

/* Every argument a call refuses (SPW_EINVAL) is named in errmsg with its value and the limit:
 * a task of 100,000 arguments or with a 999-byte name used to say only
 * "spillway_task_at: invalid argument". A refused task leaves the graph as it was. */
static void client_refusals_name_the_argument_and_the_limit(void **state)
{
    (void)state;
    fake_sched f;
    fake_start(&f, answer_acking);
    spillway *c = fake_client(&f);
    spillway_graph *g = spillway_graph_new(c);
    const char *task = "spillway_task_at: invalid argument";
    size_t many = 100000;
    spillway_arg *args = calloc(many, sizeof *args);
    assert_non_null(args);
    refused_says(c, spillway_task(g, "f", args, many, 0, NULL), task,
                 "nargs is 100000; at most 65535");
    char name[1000];
    memset(name, 'x', 999);
    name[999] = '\0';
    refused_says(c, spillway_task(g, name, NULL, 0, 0, NULL), task, "fn is 999 bytes; at most 255");
    refused_says(c, spillway_task(g, "", NULL, 0, 0, NULL), task, "fn is empty");
    refused_says(c, spillway_task(g, NULL, NULL, 0, 0, NULL), task, "fn is NULL");
    refused_says(c, spillway_task(g, "f", NULL, 3, 0, NULL), task, "args is NULL with nargs 3");
    spillway_arg bad[2] = {spillway_arg_u64(1), spillway_arg_u64(2)};
    bad[1].kind = 7;
    refused_says(c, spillway_task(g, "f", bad, 2, 0, NULL), task, "args[1] has kind 7");
    bad[0] = spillway_arg_bytes(NULL, 100);
    refused_says(c, spillway_task(g, "f", bad, 1, 0, NULL), task,
                 "args[0] is bytes without data, len 100; at most 8");
    spillway_ref outs[2];
    refused_says(c, spillway_task_n(g, "f", NULL, 0, 0, 0, outs), "spillway_task_n_at",
                 "k is 0; a task has at least one output");
    assert_int_equal(spillway_task_n(g, "f", NULL, 0, 0, SPILLWAY_MAX_OUTPUTS + 1, NULL),
                     SPW_ELIMIT);
    assert_non_null(strstr(spillway_errmsg(c), "spillway_task_n_at: limit exceeded: k is 4097; "
                                               "at most 4096 outputs"));
    name[400] = '\0';
    refused_says(c, spillway_graph_place(g, name), "spillway_graph_place",
                 "worker is 400 bytes; at most 255");
    spillway_ref r;
    assert_int_equal(spillway_task(g, "f", NULL, 0, SPILLWAY_KEEP, &r), 0);
    assert_int_equal(spillway_submit(g), 0);
    spillway_graph_free(g);
    /* Other calls. */
    refused_says(c, spillway_set_stall_timeout(c, -5), "spillway_set_stall_timeout",
                 "timeout_ms is -5; at least 0");
    void *data;
    refused_says(c, spillway_get(c, r, 1000, &data, NULL), "spillway_get: invalid argument",
                 "len is NULL");
    refused_says(c, spillway_wait(c, NULL, 3, 1000), "spillway_wait: invalid argument",
                 "refs is NULL with n 3");
    spillway_graph_progress gp;
    refused_says(c, spillway_graph_status(c, 0, &gp), "spillway_graph_status", "graph_id is 0");
    refused_says(c, spillway_scatter(c, "abc", 0, 0, &r), "spillway_scatter_at", "len is 0");
    spillway_map_opts mo = {0};
    spillway_ref *res;
    size_t nres;
    refused_says(c, spillway_map_blocks(c, "f", r, NULL, 0, &mo, &res, &nres),
                 "spillway_map_blocks_at", "o->block_size and o->nblocks are 0");
    mo.nblocks = 2;
    refused_says(c, spillway_map_blocks(c, "f", r, args, 1001, &mo, &res, &nres),
                 "spillway_map_blocks_at", "nshared is 1001; at most 1000");
    spillway_plugin *pl = NULL;
    refused_says(c, spillway_plugin_add(c, "/tmp", &pl), "spillway_plugin_add",
                 "path /tmp is not a regular file");
    refused_says(c, spillway_plugin_add_mem(c, "x", 0, &pl), "spillway_plugin_add_mem",
                 "len is 0");
    assert_null(pl);
    free(args);
    assert_int_equal(spillway_release(c, r), 0);
    spillway_close(c);
    fake_stop(&f);
    /* Connecting: a wildcard address names no host to connect to. */
    spillway *none = NULL;
    assert_int_equal(spillway_connect("0.0.0.0:7400", NULL, &none), SPW_EINVAL);
    assert_null(none);
    assert_non_null(strstr(spillway_errmsg(NULL), "0.0.0.0 is a wildcard address"));
}

int main(int argc, char **argv);
static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_refs_counter),
    cmocka_unit_test(test_refs_dense_and_other),
    cmocka_unit_test(test_refs_sparse_chunks_are_swept),
    cmocka_unit_test(test_task_rec_matches_proto),
    cmocka_unit_test(client_reply_of_another_type_is_eproto),
    cmocka_unit_test(client_connect_to_a_worker_port_is_refused),
    cmocka_unit_test(client_connect_failures_say_why),
    cmocka_unit_test(client_repeated_result_replaces_the_last),
    cmocka_unit_test(client_submit_refusal_keeps_its_message),
    cmocka_unit_test(client_map_blocks_refused_holds_nothing),
    cmocka_unit_test(client_failed_put_leaves_its_buffer_alone),
    cmocka_unit_test(client_get_with_the_longest_timeout),
    cmocka_unit_test(client_map_blocks_of_too_many_blocks_is_enomem),
    cmocka_unit_test(client_task_over_the_frame_limit_is_refused),
    cmocka_unit_test(client_error_without_a_code_fails_the_call),
    cmocka_unit_test(client_status_that_is_no_code_fails_the_call),
    cmocka_unit_test(client_graph_status_of_another_type_is_eproto),
    cmocka_unit_test(client_refusals_name_the_argument_and_the_limit),
};
SPW_TEST_MAIN(tests)
