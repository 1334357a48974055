/*
 * The executor process: runs tasks one at a time for its worker.
 *
 * Started by the worker as `spillway-worker --executor CAPACITY LOGLEVEL MEMLIMIT CGROUP|-
 * [PLUGIN...]` with the worker's socket on fd 3 and the store's arena memfd on fd 4. It maps
 * the arena read-only, so a task reads its inputs in place and cannot scribble over sealed
 * objects; a task's large output is allocated by the worker (EXEC_ALLOC) and mapped writable
 * on its own pages, just for that task. It uses no event loop: it reads a batch of EXEC frames,
 * runs them in order, and writes their EXEC_DONE frames together once its input is drained, so
 * a burst of short tasks costs two syscalls rather than two per task. A task that crashes takes
 * this process with it; the worker reports the task failed and starts another executor.
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <uthash.h>

#include "worker_int.h"

#define EXEC_SOCK_FD 3
#define EXEC_ARENA_FD 4

typedef struct fn_entry {
    const char *name;
    size_t len; /* strlen(name) */
    spw_task_fn fn;
    UT_hash_handle hh;
    char *owned; /* name, when it is ours ("NAME@PREFIX" of an uploaded plugin) */
} fn_entry;

/* A plugin the worker told this executor to load (PLUGIN_LOAD), by the prefix of its hash: its
 * functions are registered as "NAME@PREFIX"; one that did not load keeps why, which its tasks
 * report. */
typedef struct exec_plugin {
    char prefix[PROTO_PLUGIN_PREFIX_HEX + 1];
    void *handle;
    char *err;
} exec_plugin;

typedef struct executor {
    const uint8_t *arena;
    uint64_t capacity;
    size_t page;
    fn_entry *fns;
    void *plugins[WRK_MAX_PLUGINS];
    uint32_t nplugins;
    exec_plugin *uploaded; /* PLUGIN_LOAD, in the order told */
    uint32_t nuploaded;
    spw_buf in;      /* bytes from the worker, processed in order */
    size_t in_end;   /* the end in `in` of the frame being run */
    spw_buf backlog; /* frames read while waiting for an allocation reply */
    spw_buf out;     /* frames to the worker */
    proto_batch done; /* the open EXEC_DONES frame at the end of out */
    msgpack_zone zone;
    msgpack_zone alloc_zone; /* for allocation replies: zone holds the EXECS frame being run */
    proto_limits lim;
    uint64_t next_req;
    uint64_t mem_limit; /* bytes a task may use (0 = none) */
    fn_entry *last_fn;  /* the function the last task ran: a burst names one over and over */
    struct {
        spw_id id;
        uint8_t *v; /* heap, len bytes; NULL for an empty output */
        uint64_t len;
        bool used;
    } kept[EXEC_KEPT_N]; /* the last EXEC_KEPT_N inline outputs, a ring: PROTO_ARG_PREV */
    uint32_t kept_next;
    uint64_t kept_bytes; /* their lengths summed: at most EXEC_KEPT_BYTES but for the newest */
    uint64_t clock_ns;  /* when the task about to run starts: the end of the one before it in
                           the batch, so a task costs one clock read, not two */
    bool gone;          /* the worker closed the socket or a write to it failed */
    int broken;         /* why a frame from the worker could not be read (0: none): leave */
} executor;

/* Set by SIGTERM/SIGINT: finish the task running now, answer, and leave through the cleanup. */
static volatile sig_atomic_t exec_stop;
/* The self-pipe: the handler writes a byte to [1] (non-blocking; a full pipe is awake enough),
 * read_more polls [0], which stays readable from then on. */
static int exec_stop_pipe[2] = {-1, -1};

static void on_stop_signal(int sig)
{
    (void)sig;
    int saved = errno;
    exec_stop = 1;
    if (write(exec_stop_pipe[1], "", 1) < 0) {
        /* EAGAIN: a byte is there already */
    }
    errno = saved;
}

/* One output of the running task. */
typedef struct exec_out {
    bool called;         /* written (output_at called for it) */
    uint8_t *inline_out; /* small output, heap */
    uint8_t *mapped;     /* large output, mapped from the arena */
    size_t mapped_len;
    uint64_t size;
} exec_out;

/* One running task. */
typedef struct exec_task {
    spw_task_ctx ctx;
    executor *ex;
    spw_id id;
    uint64_t inline_limit;
    uint32_t nouts;      /* declared (EXEC's nouts; 1 when absent) */
    uint32_t written;    /* of those, written */
    uint32_t beyond;     /* output_at calls for an index >= nouts */
    int output_err;
    exec_out *outs;      /* nouts of them: out0, or the heap for a task of several */
    exec_out out0;
    char err[PROTO_MAX_STR]; /* last: run_exec zeroes the fields before it */
} exec_task;

static int write_all(int fd, const uint8_t *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -errno;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* Writes what is queued for the worker. A failed write means the worker is gone: the frames
 * are dropped and the main loop ends (ex->gone). */
static void flush_out(executor *ex)
{
    proto_batch_end(&ex->done, UINT32_MAX);
    if (ex->out.len == 0)
        return;
    PROTO_CHECK_SENT(ex->out.data, ex->out.len, "executor");
    if (!ex->gone && write_all(EXEC_SOCK_FD, ex->out.data, ex->out.len) != 0)
        ex->gone = true;
    spw_buf_reset(&ex->out);
}

/* Reads more bytes into b. @return false when the worker closed the socket (or reading it
 * failed), or when a stop signal came, before the wait or during it. */
static bool read_more(spw_buf *b)
{
    if (spw_buf_reserve(b, 256 * 1024) != 0)
        SPW_PANIC("executor out of memory");
    for (;;) {
        if (exec_stop)
            return false;
        /* What is there already comes at once, in one syscall (a busy executor's batch costs
         * its write and this read). Only with nothing there does it wait, in poll() with the
         * stop pipe, not in a blocking read(): a signal that came after the look at exec_stop
         * above would go unseen there until the worker sent more. */
        ssize_t r = recv(EXEC_SOCK_FD, b->data + b->len, b->cap - b->len, MSG_DONTWAIT);
        if (r > 0) {
            b->len += (size_t)r;
            return true;
        }
        if (r == 0)
            return false;
        if (errno == EINTR)
            continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK)
            return false;
        struct pollfd pfd[2] = {{.fd = EXEC_SOCK_FD, .events = POLLIN},
                                {.fd = exec_stop_pipe[0], .events = POLLIN}};
        if (poll(pfd, 2, -1) < 0 && errno != EINTR) {
            spw_log(SPW_LOG_ERR, "cannot wait for the worker: %s", strerror(errno));
            return false;
        }
        /* Readable, closed, or the stop pipe: the top of the loop tells which. */
    }
}

/* A frame from the worker cannot be read (rc says why). Its records cannot be answered one by
 * one, and what follows it cannot be trusted to start a frame: the executor leaves, status 1,
 * after writing the answers it has. The worker starts another; the task at the head of its
 * queue fails as with an executor that died, the rest are requeued. */
static void frame_broken(executor *ex, int rc, size_t avail)
{
    ex->broken = rc;
    spw_log(SPW_LOG_ERR, "a frame from the worker cannot be read (%s: %s; %zu bytes at hand): "
                         "leaving",
            spw_err_name(rc), spw_strerror(rc), avail);
}

static void task_fail_v(spw_task_ctx *ctx, const char *fmt, ...)
{
    exec_task *t = (exec_task *)ctx;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t->err, sizeof t->err, fmt, ap);
    va_end(ap);
}

static int task_output_error(spw_task_ctx *ctx)
{
    return ((exec_task *)ctx)->output_err;
}

/* Asks the worker for room in the store and waits for the answer. Other frames that arrive
 * meanwhile are kept, in order, for later. */
static int request_alloc(executor *ex, exec_task *t, uint32_t index, uint64_t size, uint64_t *off)
{
    uint64_t req = ++ex->next_req;
    proto_batch_end(&ex->done, UINT32_MAX); /* the frames before it stay before it */
    proto_enc e;
    proto_enc_exec_alloc(&e, &ex->out, req,
                         &(proto_exec_alloc_msg){
                             .id = t->id, .size = size, .index = index, .omit_index = index == 0});
    proto_enc_end(&e, UINT32_MAX);
    flush_out(ex);
    if (ex->gone)
        return SPW_ECLOSED;
    /* What was read after the frame being run, whole frames and maybe the first part of one
     * whose rest comes with the answer, is read first: what comes now continues it. */
    spw_buf rb = {0};
    spw_buf_append(&rb, ex->in.data + ex->in_end, ex->in.len - ex->in_end);
    ex->in.len = ex->in_end;
    spw_buf_append(&rb, ex->backlog.data, ex->backlog.len);
    spw_buf_reset(&ex->backlog);
    int result = 1;
    while (result == 1) {
        size_t pos = 0;
        for (;;) {
            proto_msg m;
            int rc = proto_decode(rb.data + pos, rb.len - pos, &ex->lim, &ex->alloc_zone, &m);
            if (rc == 0)
                break;
            if (rc < 0) {
                frame_broken(ex, rc, rb.len - pos);
                result = rc;
                snprintf(t->err, sizeof t->err, "a frame from the worker cannot be read: %s",
                         spw_err_name(rc));
                break;
            }
            if (m.req == req && m.type == PROTO_EXEC_ALLOC_OK) {
                *off = m.f[F_EALLOCOK_OFF].u;
                result = 0;
            } else if (m.req == req && m.type == PROTO_ERROR) {
                /* Only a negative code is an error. 0 or a positive one is the worker's
                 * mistake, and the request failed all the same: taken as it is, 1 read as
                 * "no answer yet" (a wait for ever) and 0 as room at an offset never given. */
                result = proto_err_code(m.f[F_ERROR_CODE].i);
                char msg[PROTO_MAX_STR];
                snprintf(t->err, sizeof t->err, "%s", proto_str(&m.f[F_ERROR_MSG], msg, sizeof msg));
            } else {
                spw_buf_append(&ex->backlog, rb.data + pos, (size_t)rc);
            }
            msgpack_zone_clear(&ex->alloc_zone);
            pos += (size_t)rc;
        }
        if (result == 1) {
            spw_buf_consume(&rb, pos);
            if (!read_more(&rb)) {
                /* The worker is gone (or we are told to stop): the task gets no output. */
                ex->gone = true;
                result = SPW_ECLOSED;
                snprintf(t->err, sizeof t->err, "the worker closed the executor's socket");
            }
        } else {
            spw_buf_append(&ex->backlog, rb.data + pos, rb.len - pos);
        }
    }
    spw_buf_release(&rb);
    return result;
}

static void *task_output_at(spw_task_ctx *ctx, uint32_t i, uint64_t size)
{
    exec_task *t = (exec_task *)ctx;
    executor *ex = t->ex;
    if (i >= t->nouts) {
        /* Counted, and failed once the function returns (run_exec), naming the counts. */
        t->beyond++;
        t->output_err = SPW_EINVAL;
        snprintf(t->err, sizeof t->err, "output %u written, of %u declared", i, t->nouts);
        return NULL;
    }
    exec_out *o = &t->outs[i];
    if (o->called) {
        t->output_err = SPW_EPROTO;
        if (t->nouts == 1)
            snprintf(t->err, sizeof t->err, "a task has one output: output() called twice");
        else
            snprintf(t->err, sizeof t->err, "output %u written twice", i);
        return NULL;
    }
    o->called = true;
    t->written++;
    o->size = size;
    if (size <= t->inline_limit) {
        o->inline_out = malloc(size > 0 ? size : 1);
        if (o->inline_out == NULL)
            t->output_err = SPW_ENOMEM;
        return o->inline_out;
    }
    uint64_t off;
    int rc = request_alloc(ex, t, i, size, &off);
    if (rc != 0) {
        t->output_err = rc;
        return NULL;
    }
    if (off % ex->page != 0 || off > ex->capacity || size > ex->capacity - off) {
        t->output_err = SPW_EPROTO;
        snprintf(t->err, sizeof t->err, "worker returned a bad output offset");
        return NULL;
    }
    size_t len = (size + ex->page - 1) / ex->page * ex->page;
    /* Populated in one go: faulting 4 KiB at a time costs more than writing the output. */
    void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, EXEC_ARENA_FD,
                   (off_t)off);
    if (p == MAP_FAILED) {
        t->output_err = -errno;
        snprintf(t->err, sizeof t->err, "cannot map the output: %s", strerror(errno));
        return NULL;
    }
    o->mapped = p;
    o->mapped_len = len;
    return p;
}

static void *task_output(spw_task_ctx *ctx, uint64_t size)
{
    return task_output_at(ctx, 0, size);
}

static const spw_task_api task_api = {
    SPW_TASK_ABI_VERSION, task_output, task_fail_v, task_output_error, task_output_at,
};

/* Output o as a completion reports it: in the store (value nil), or its bytes (an output never
 * written is empty). */
static void out_report(const exec_out *o, uint64_t *size, proto_bytes *value)
{
    *size = o->mapped != NULL || o->inline_out != NULL ? o->size : 0;
    *value = o->mapped != NULL ? (proto_bytes){NULL, 0}
                               : (proto_bytes){o->inline_out != NULL ? (const void *)o->inline_out
                                                                     : "",
                                               *size};
}

/* Record i of a completion's outs: output i + 1. */
static void put_out(proto_enc *e, uint32_t i, void *arg)
{
    proto_out_rec r;
    out_report(&((const exec_task *)arg)->outs[i + 1], &r.size, &r.value);
    proto_put_out_rec(e, &r);
}

static void send_done(executor *ex, const exec_task *t, int status, uint64_t run_us)
{
    proto_done_rec d = {.id = t->id, .status = status, .run_us = run_us, .omit_outs = true};
    if (status != 0) {
        d.err = t->err[0] ? t->err : spw_strerror(status);
    } else {
        out_report(&t->outs[0], &d.size, &d.value);
        if (t->nouts > 1) {
            d.outs = (proto_out_recs){.n = t->nouts - 1, .put = put_out, .arg = (void *)t};
            d.omit_outs = false;
        }
    }
    /* The completions of one batch read go back as one EXEC_DONES frame (flush_out). */
    proto_put_done_rec(proto_batch_rec(&ex->done, &ex->out, PROTO_EXEC_DONES), &d);
    if (proto_batch_full(&ex->done))
        proto_batch_end(&ex->done, UINT32_MAX);
}

static void kept_drop(executor *ex, uint32_t k)
{
    free(ex->kept[k].v);
    ex->kept_bytes -= ex->kept[k].len;
    ex->kept[k].v = NULL;
    ex->kept[k].len = 0;
    ex->kept[k].used = false;
}

/* Keeps task id's inline output v (heap, len bytes; the ring takes it) for tasks queued behind
 * it, in place of the oldest kept, then lets the oldest others go while they hold more than
 * EXEC_KEPT_BYTES. */
static void kept_put(executor *ex, spw_id id, uint8_t *v, uint64_t len)
{
    uint32_t k = ex->kept_next++ % EXEC_KEPT_N;
    kept_drop(ex, k);
    ex->kept[k].id = id;
    ex->kept[k].v = v;
    ex->kept[k].len = v != NULL ? len : 0;
    ex->kept[k].used = true;
    ex->kept_bytes += ex->kept[k].len;
    for (uint32_t i = 1; i < EXEC_KEPT_N && ex->kept_bytes > EXEC_KEPT_BYTES; i++)
        kept_drop(ex, (k + i) % EXEC_KEPT_N); /* oldest first */
}

/* The output task id's latest run kept, newest first: a task the scheduler retried (its worker
 * lost the scheduler and got the task back) may have run here before. */
static bool kept_find(const executor *ex, spw_id id, const uint8_t **v, uint64_t *len)
{
    for (uint32_t i = 1; i <= EXEC_KEPT_N; i++) {
        uint32_t k = (ex->kept_next - i) % EXEC_KEPT_N;
        if (ex->kept[k].used && spw_id_eq(ex->kept[k].id, id)) {
            *v = ex->kept[k].v;
            *len = ex->kept[k].len;
            return true;
        }
    }
    return false;
}

/* Task id ran again and kept nothing (it failed, or its output is in the store): what an
 * earlier run of it kept must not stand for this run's output. */
static void kept_forget(executor *ex, spw_id id)
{
    for (uint32_t k = 0; k < EXEC_KEPT_N; k++)
        if (ex->kept[k].used && spw_id_eq(ex->kept[k].id, id))
            kept_drop(ex, k);
}

/* One task: the fields of an EXEC, or record i_rec of an EXECS. A malformed record
 * (rec[0].bad) is answered as a failed task, SPW_EMALFORMED, unrun: by its id when that is
 * readable, else with the nil id, which the worker takes for the task at the head of its queue
 * (answers go back in the order the records came, so that is the one this record was). */
static void run_exec(executor *ex, const proto_val *rec, uint32_t i_rec)
{
    exec_task t;
    /* Not memset whole: err alone is PROTO_MAX_STR bytes, and a task of a burst is cheaper
     * than that. Every field but err is zeroed; err is a string, empty. */
    memset(&t, 0, offsetof(exec_task, err));
    t.err[0] = '\0';
    t.ctx.api = &task_api;
    t.ex = ex;
    t.id = rec[F_EXEC_ID].nil ? (spw_id){0, 0} : rec[F_EXEC_ID].id;
    t.inline_limit = rec[F_EXEC_INLINE_LIMIT].u;
    t.nouts = 1;
    t.outs = &t.out0;
    int status = 0;
    /* Absent or 0 (a sender that left it unset): one output. */
    uint64_t nouts = rec[F_EXEC_NOUTS].nil || rec[F_EXEC_ID].bad || rec[F_EXEC_NOUTS].u == 0
                         ? 1
                         : rec[F_EXEC_NOUTS].u;
    if (nouts > 1 && nouts <= SPW_TASK_OUTPUTS_MAX) {
        t.outs = calloc(nouts, sizeof *t.outs);
        if (t.outs == NULL) {
            t.outs = &t.out0;
            status = SPW_ENOMEM;
            snprintf(t.err, sizeof t.err, "no memory for %llu outputs", (unsigned long long)nouts);
        } else {
            t.nouts = (uint32_t)nouts;
        }
    } else if (nouts != 1) {
        status = SPW_EPROTO;
        snprintf(t.err, sizeof t.err, "%llu outputs declared: 1 to %u are allowed",
                 (unsigned long long)nouts, SPW_TASK_OUTPUTS_MAX);
    }
    const proto_val *args = &rec[F_EXEC_ARGS];
    uint32_t nargs = args->arr.n;
    spw_task_arg stackargs[16];
    spw_task_arg *targs = nargs <= 16 ? stackargs : calloc(nargs, sizeof *targs);
    if (status != 0)
        nargs = 0;
    if (targs == NULL) {
        status = SPW_ENOMEM;
        snprintf(t.err, sizeof t.err, "no memory for %u arguments", nargs);
        nargs = 0;
    }
    if (rec[F_EXEC_ID].bad) {
        status = SPW_EMALFORMED;
        if (rec[F_EXEC_ID].nil)
            snprintf(t.err, sizeof t.err, "EXECS record %u from the worker is malformed and "
                                          "names no task", i_rec);
        else
            snprintf(t.err, sizeof t.err, "EXECS record %u of this task does not match the "
                                          "schema", i_rec);
        spw_log(SPW_LOG_ERR, "%s", t.err);
        nargs = 0;
    }
    for (uint32_t i = 0; i < nargs && status == 0; i++) {
        const proto_val *a = PROTO_REC(args, i);
        if (a[R_EARG_KIND].u == PROTO_ARG_PREV) {
            const uint8_t *v;
            uint64_t len;
            if (a[R_EARG_INLINE].nil || a[R_EARG_INLINE].bin.len != 16 ||
                !kept_find(ex, spw_id_from_bytes(a[R_EARG_INLINE].bin.ptr), &v, &len)) {
                status = SPW_EAHEAD;
                snprintf(t.err, sizeof t.err, "argument %u: its producer's output is not kept in "
                                              "this executor", i);
                break;
            }
            targs[i].data = len ? v : NULL;
            targs[i].len = len;
        } else if (a[R_EARG_KIND].u == PROTO_ARG_INLINE) {
            if (a[R_EARG_INLINE].nil) {
                status = SPW_EPROTO;
                snprintf(t.err, sizeof t.err, "argument %u: inline, without its bytes", i);
                break;
            }
            targs[i].data = a[R_EARG_INLINE].bin.len ? a[R_EARG_INLINE].bin.ptr : NULL;
            targs[i].len = a[R_EARG_INLINE].bin.len;
        } else if (a[R_EARG_KIND].u != PROTO_ARG_VIEW) {
            /* The worker sends inline bytes, a kept output or a range of the arena; anything
             * else is no range to read. */
            status = SPW_EPROTO;
            snprintf(t.err, sizeof t.err, "argument %u: unknown kind %llu", i,
                     (unsigned long long)a[R_EARG_KIND].u);
            break;
        } else {
            uint64_t off = a[R_EARG_OFF].u, len = a[R_EARG_LEN].u;
            if (off > ex->capacity || len > ex->capacity - off) {
                status = SPW_EPROTO;
                snprintf(t.err, sizeof t.err, "argument %u outside the arena", i);
                break;
            }
            targs[i].data = len ? ex->arena + off : NULL;
            targs[i].len = len;
        }
    }
    uint64_t t0 = ex->clock_ns;
    if (status == 0) {
        char namebuf[PROTO_MAX_NAME + 1];
        const char *name = namebuf;
        const proto_val *fv = &rec[F_EXEC_FN];
        fn_entry *f = ex->last_fn;
        if (f != NULL && f->len == fv->bin.len && memcmp(f->name, fv->bin.ptr, f->len) == 0) {
            name = f->name;
        } else {
            proto_str(fv, namebuf, sizeof namebuf);
            HASH_FIND_STR(ex->fns, namebuf, f);
            if (f != NULL)
                ex->last_fn = f;
        }
        if (f == NULL) {
            status = SPW_ENOFUNC;
            snprintf(t.err, sizeof t.err, "unknown task function '%s'", name);
            const char *prefix = proto_plugin_fn_prefix(name, strlen(name));
            for (uint32_t k = 0; prefix != NULL && k < ex->nuploaded; k++)
                if (strcmp(ex->uploaded[k].prefix, prefix) == 0 && ex->uploaded[k].err != NULL) {
                    status = SPW_EPLUGIN;
                    snprintf(t.err, sizeof t.err, "task function '%s': %s", name,
                             ex->uploaded[k].err);
                }
        } else {
            int rc = f->fn(&t.ctx, targs, nargs);
            if (t.beyond > 0 || (rc == 0 && t.nouts > 1 && t.written != t.nouts)) {
                /* Past the count (whatever it returned then), or short of it. */
                char hex[33];
                snprintf(t.err, sizeof t.err, "task=%s (%s) declared %u output%s and wrote %u",
                         spw_id_hex(t.id, hex), name, t.nouts, t.nouts == 1 ? "" : "s",
                         t.written + t.beyond);
                status = SPW_ETASKFAILED;
            } else if (rc == 0 && t.output_err != 0) {
                /* It did not check what output() gave it: it has no output to report (an
                 * empty one would pass for its result), so it fails with output()'s error. */
                char why[PROTO_MAX_STR];
                snprintf(why, sizeof why, "%s", t.err[0] ? t.err : spw_strerror(t.output_err));
                int n = snprintf(t.err, sizeof t.err, "%s returned 0 without its output: ", name);
                if (n > 0 && (size_t)n < sizeof t.err)
                    memcpy(t.err + n, why, strnlen(why, sizeof t.err - (size_t)n - 1) + 1);
                t.err[sizeof t.err - 1] = '\0';
                status = t.output_err;
            } else if (rc != 0) {
                /* Spillway's own codes, and the error output() gave the task, are kept; any
                 * other value (-1, an errno) means "failed", with the task's text. Not
                 * SPW_EAHEAD: it says the task was dropped unrun, and this one ran. */
                bool own = rc <= -1000 && rc > -2000 && rc != SPW_EAHEAD;
                status = own || (t.output_err != 0 && rc == t.output_err) ? rc : SPW_ETASKFAILED;
                if (t.err[0] == '\0')
                    snprintf(t.err, sizeof t.err, "%s returned %d", name, rc);
            }
            /* -ENOMEM from the task itself (an errno, so ETASKFAILED above) counts too. */
            if (status != 0 && ex->mem_limit != 0 &&
                (rc == SPW_ENOMEM || t.output_err == SPW_ENOMEM)) {
                /* Out of memory under the task limit: say which limit and which task. */
                char hex[33], why[PROTO_MAX_STR];
                snprintf(why, sizeof why, "%s", t.err);
                int n = snprintf(t.err, sizeof t.err,
                                 "task %s (task=%s) exceeded its memory limit of %llu bytes "
                                 "(--task-memory-limit): ",
                                 name, spw_id_hex(t.id, hex), (unsigned long long)ex->mem_limit);
                if (n > 0 && (size_t)n < sizeof t.err)
                    memcpy(t.err + n, why, strnlen(why, sizeof t.err - (size_t)n - 1) + 1);
                t.err[sizeof t.err - 1] = '\0';
                status = SPW_ETASKMEM;
            }
        }
    }
    ex->clock_ns = spw_now_ns();
    uint64_t run_us = (ex->clock_ns - t0) / 1000;
    if (targs != stackargs)
        free(targs); /* NULL when its calloc failed */
    send_done(ex, &t, status, run_us);
    for (uint32_t i = 0; i < t.nouts; i++)
        if (t.outs[i].mapped != NULL)
            munmap(t.outs[i].mapped, t.outs[i].mapped_len);
    for (uint32_t i = 1; i < t.nouts; i++)
        free(t.outs[i].inline_out);
    if (status == 0 && t.outs[0].mapped == NULL) {
        kept_put(ex, t.id, t.outs[0].inline_out, t.outs[0].size); /* takes it (NULL: empty) */
    } else {
        free(t.outs[0].inline_out);
        kept_forget(ex, t.id);
    }
    if (t.outs != &t.out0)
        free(t.outs);
}

/* Registers p's functions by their names, or with suffix ("@PREFIX") after each. */
static void register_fns(executor *ex, const spw_plugin *p, const char *suffix)
{
    for (uint32_t i = 0; i < p->nfns; i++) {
        char *owned = NULL;
        const char *name = p->fns[i].name;
        if (suffix != NULL) {
            size_t n = strlen(name) + strlen(suffix) + 1;
            owned = malloc(n);
            if (owned == NULL)
                SPW_PANIC("executor out of memory");
            snprintf(owned, n, "%s%s", name, suffix);
            name = owned;
        }
        fn_entry *f;
        HASH_FIND_STR(ex->fns, name, f);
        if (f != NULL) {
            f->fn = p->fns[i].fn; /* a plugin may override a built-in */
            free(owned);
            continue;
        }
        f = calloc(1, sizeof *f);
        if (f == NULL)
            SPW_PANIC("executor out of memory");
        f->name = name;
        f->owned = owned;
        f->len = strlen(f->name);
        f->fn = p->fns[i].fn;
        HASH_ADD_KEYPTR(hh, ex->fns, f->name, strlen(f->name), f);
    }
}

int wrk__plugin_open(const char *path, void **handle, const spw_plugin **plugin, char *why,
                     size_t whylen)
{
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (h == NULL) {
        const char *e = dlerror();
        snprintf(why, whylen, "cannot be loaded: %s", e != NULL ? e : "?");
        return SPW_EPLUGIN;
    }
    spw_plugin_entry entry = (spw_plugin_entry)(uintptr_t)dlsym(h, SPW_PLUGIN_SYMBOL);
    const spw_plugin *p = entry != NULL ? entry() : NULL;
    int rc = SPW_EPLUGIN;
    if (p == NULL) {
        snprintf(why, whylen, "exports no %s() (or it returned NULL)", SPW_PLUGIN_SYMBOL);
    } else if (p->abi_version < SPW_TASK_ABI_MIN || p->abi_version > SPW_TASK_ABI_VERSION) {
        snprintf(why, whylen, "has task ABI version %u, this worker speaks %u to %u",
                 p->abi_version, SPW_TASK_ABI_MIN, SPW_TASK_ABI_VERSION);
    } else {
        rc = 0;
        for (uint32_t i = 0; i < p->nfns && rc == 0; i++) {
            if (p->fns[i].name == NULL || p->fns[i].fn == NULL || p->fns[i].name[0] == '\0' ||
                strlen(p->fns[i].name) + 1 + PROTO_PLUGIN_PREFIX_HEX > PROTO_MAX_NAME ||
                strchr(p->fns[i].name, '@') != NULL) {
                snprintf(why, whylen, "function %u has no name or code, a name with '@', or a "
                                      "name over %u bytes",
                         i, PROTO_MAX_NAME - 1 - PROTO_PLUGIN_PREFIX_HEX);
                rc = SPW_EPLUGIN;
            }
        }
    }
    if (rc != 0) {
        dlclose(h);
        return rc;
    }
    *handle = h;
    *plugin = p;
    return 0;
}

int wrk__plugin_probe(const char *path, const char **name, uint32_t *nfns, char *why,
                      size_t whylen)
{
    void *h;
    const spw_plugin *p;
    int rc = wrk__plugin_open(path, &h, &p, why, whylen);
    if (rc != 0)
        return rc;
    *name = spw_strdup(SPW_MOD_WORKER, p->name != NULL && p->name[0] != '\0' ? p->name : "?");
    *nfns = p->nfns;
    dlclose(h);
    return 0;
}

int wrk_plugin_check_main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: spillway-worker --plugin-check PATH OUT\n");
        return 2;
    }
    char why[PROTO_MAX_STR - 16];
    void *h;
    const spw_plugin *p;
    int rc = wrk__plugin_open(argv[2], &h, &p, why, sizeof why);
    FILE *out = fopen(argv[3], "w");
    if (out == NULL)
        return 1;
    if (rc == 0) {
        fprintf(out, "0 %u %s\n", p->nfns, p->name != NULL && p->name[0] != '\0' ? p->name : "?");
        dlclose(h);
    } else {
        fprintf(out, "%d %s\n", rc, why);
    }
    return fclose(out) == 0 ? 0 : 1;
}

/* PLUGIN_LOAD: loads a plugin from the worker's cache and registers its functions as
 * "NAME@PREFIX". One that does not load is remembered with why (its tasks fail with it). */
static void plugin_load(executor *ex, const proto_msg *m)
{
    char path[PROTO_MAX_STR + 1], hex[PROTO_PLUGIN_HEX_LEN + 1];
    proto_str(&m->f[F_PLOAD_PATH], path, sizeof path);
    proto_plugin_hex(m->f[F_PLOAD_HASH].bin.ptr, hex);
    hex[PROTO_PLUGIN_PREFIX_HEX] = '\0';
    for (uint32_t k = 0; k < ex->nuploaded; k++)
        if (strcmp(ex->uploaded[k].prefix, hex) == 0)
            return; /* told twice: once is enough */
    exec_plugin *v = realloc(ex->uploaded, (ex->nuploaded + 1) * sizeof *v);
    if (v == NULL)
        SPW_PANIC("executor out of memory");
    ex->uploaded = v;
    exec_plugin *e = &v[ex->nuploaded++];
    memset(e, 0, sizeof *e);
    memcpy(e->prefix, hex, sizeof e->prefix);
    char why[PROTO_MAX_STR - 64];
    const spw_plugin *p;
    if (wrk__plugin_open(path, &e->handle, &p, why, sizeof why) != 0) {
        e->handle = NULL;
        e->err = strdup(why);
        spw_log(SPW_LOG_ERR, "plugin=%s %s", path, why);
        return;
    }
    char suffix[PROTO_PLUGIN_PREFIX_HEX + 2] = "@";
    memcpy(suffix + 1, hex, PROTO_PLUGIN_PREFIX_HEX + 1);
    register_fns(ex, p, suffix);
    ex->last_fn = NULL;
}

/* Task memory: with a limit, the task heap is bounded by the cgroup the worker made for this
 * executor (memory.max), or else by RLIMIT_DATA set to what the process uses at start plus the
 * limit. RLIMIT_DATA counts private writable mappings and the brk heap, not the MAP_SHARED
 * arena, so the store never counts against a task. A task that fails for lack of memory under
 * the limit reports SPW_ETASKMEM. */

/* Joins the cgroup the worker made for this executor (memory.max set there). @return 0 or
 * -errno; on failure the caller falls back to RLIMIT_DATA. */
static int join_cgroup(const char *dir)
{
    char path[PATH_MAX], pid[32];
    snprintf(path, sizeof path, "%s/cgroup.procs", dir);
    int n = snprintf(pid, sizeof pid, "%d\n", (int)getpid());
    FILE *f = fopen(path, "w");
    if (f == NULL)
        return -errno;
    int rc = fwrite(pid, 1, (size_t)n, f) == (size_t)n ? 0 : -EIO;
    if (fclose(f) != 0 && rc == 0)
        rc = -errno;
    return rc;
}

/* RLIMIT_DATA = what the executor uses now (its code, plugins, buffers, and under a sanitizer
 * its shadow) + the task limit: the limit is what a task adds. */
static int limit_data(uint64_t limit)
{
    int64_t base_kib = spw_proc_status_kib((int)getpid(), "VmData");
    if (base_kib < 0)
        return (int)base_kib;
    struct rlimit rl;
    if (getrlimit(RLIMIT_DATA, &rl) != 0)
        return -errno;
    uint64_t base = (uint64_t)base_kib * 1024;
    /* A limit near 2^64 (no real bound) would wrap the sum to a few bytes: no limit then. */
    uint64_t want = limit > RLIM_INFINITY - base ? RLIM_INFINITY : base + limit;
    if (rl.rlim_max != RLIM_INFINITY && want > rl.rlim_max)
        want = rl.rlim_max;
    rl.rlim_cur = (rlim_t)want;
    if (setrlimit(RLIMIT_DATA, &rl) != 0)
        return -errno;
    return 0;
}

/* Every way out goes through the cleanup at the end (no exit() elsewhere): the worker closing
 * the socket, a failed write (the worker is gone), a frame from the worker that cannot be read
 * (status 1: frame_broken; a bad record is answered on its own and the executor goes on), and
 * SIGTERM/SIGINT, whose handler only sets a flag (read after the task running now has finished)
 * and writes a byte to a pipe that every wait for the worker polls with the socket: a signal
 * that comes after the last look at the flag still ends the wait. The handler is SA_RESTART, so
 * a task's own system calls are not cut short by it. */
int wrk_executor_main(int argc, char **argv)
{
    if (argc < 6) {
        fprintf(stderr, "usage: spillway-worker --executor CAPACITY LOGLEVEL MEMLIMIT CGROUP|- "
                        "[PLUGIN...]\n");
        return 2;
    }
    executor ex;
    memset(&ex, 0, sizeof ex);
    spw_log_init("spillway-executor", atoi(argv[3]));
    signal(SIGPIPE, SIG_IGN); /* a worker gone mid-write: exit by EPIPE, not by signal */
    /* Open until the process ends: a late signal's handler must never write to a closed (or
     * reused) descriptor. */
    if (pipe2(exec_stop_pipe, O_CLOEXEC | O_NONBLOCK) != 0) {
        spw_log(SPW_LOG_ERR, "cannot make the stop pipe: %s", strerror(errno));
        return 1;
    }
    /* SA_RESTART: the stop pipe, not EINTR, ends the wait for the next task. */
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop_signal;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    ex.capacity = strtoull(argv[2], NULL, 10);
    ex.mem_limit = strtoull(argv[4], NULL, 10);
    const char *cgroup = argv[5];
    ex.page = (size_t)sysconf(_SC_PAGESIZE);
    proto_limits_default(&ex.lim);
    msgpack_zone_init(&ex.zone, 64 * 1024);
    msgpack_zone_init(&ex.alloc_zone, 4096);
    void *arena = mmap(NULL, ex.capacity, PROT_READ, MAP_SHARED, EXEC_ARENA_FD, 0);
    if (arena == MAP_FAILED) {
        spw_log(SPW_LOG_ERR, "cannot map the arena: %s", strerror(errno));
        msgpack_zone_destroy(&ex.zone);
        msgpack_zone_destroy(&ex.alloc_zone);
        return 1;
    }
    ex.arena = arena;
    int rc = 0;
    register_fns(&ex, wrk__builtins(), NULL);
    for (int i = 6; i < argc && ex.nplugins < WRK_MAX_PLUGINS; i++) {
        void *h;
        const spw_plugin *p;
        char why[512];
        if (wrk__plugin_open(argv[i], &h, &p, why, sizeof why) != 0) {
            spw_log(SPW_LOG_ERR, "plugin=%s %s", argv[i], why);
            rc = 1;
            goto out;
        }
        register_fns(&ex, p, NULL);
        ex.plugins[ex.nplugins++] = h;
    }
    if (ex.mem_limit != 0) {
        /* Set once everything the executor itself needs is loaded. */
        int lrc = strcmp(cgroup, "-") != 0 ? join_cgroup(cgroup) : SPW_ENOTSUP;
        if (lrc != 0 && strcmp(cgroup, "-") != 0)
            spw_log(SPW_LOG_WARN, "cannot join cgroup %s (%s): limiting task memory with "
                                  "RLIMIT_DATA",
                    cgroup, spw_strerror(lrc));
        if (lrc != 0 && (lrc = limit_data(ex.mem_limit)) != 0)
            spw_log(SPW_LOG_WARN, "cannot set RLIMIT_DATA: %s: task memory is not limited",
                    spw_strerror(lrc));
    }
    /* The executor runs until the worker closes its socket, a write to it fails, a stop
     * signal, or a frame it cannot read; each way ends here, at the cleanup below. */
    size_t pos = 0;
    bool open = true;
    while (open && !ex.gone && !exec_stop) {
        for (;;) {
            if (ex.gone || exec_stop || ex.broken)
                break; /* the rest of the batch stays unrun: the worker requeues it */
            proto_msg m;
            int drc = proto_decode(ex.in.data + pos, ex.in.len - pos, &ex.lim, &ex.zone, &m);
            if (drc == 0)
                break;
            if (drc < 0) {
                frame_broken(&ex, drc, ex.in.len - pos);
                break;
            }
            ex.clock_ns = spw_now_ns(); /* run_exec: the first task's start */
            ex.in_end = pos + (size_t)drc;
            if (m.type == PROTO_EXEC) {
                run_exec(&ex, m.f, 0);
            } else if (m.type == PROTO_PLUGIN_LOAD) {
                plugin_load(&ex, &m);
            } else if (m.type == PROTO_EXECS) {
                const proto_val *recs = &m.f[F_EXECS_RECS];
                for (uint32_t i = 0; i < recs->arr.n && !ex.gone && !exec_stop && !ex.broken;
                     i++)
                    run_exec(&ex, PROTO_REC(recs, i), i); /* the rest stays unrun: requeued */
            } else
                spw_log(SPW_LOG_WARN, "executor ignores %s", proto_type_name(m.type));
            msgpack_zone_clear(&ex.zone);
            pos += (size_t)drc;
            if (ex.backlog.len > 0) {
                /* Frames that arrived during an allocation come after what is in `in`. */
                spw_buf_consume(&ex.in, pos);
                pos = 0;
                spw_buf_append(&ex.in, ex.backlog.data, ex.backlog.len);
                spw_buf_reset(&ex.backlog);
            }
        }
        spw_buf_consume(&ex.in, pos);
        pos = 0;
        if (ex.gone || exec_stop || ex.broken)
            break;
        /* Answer the whole batch, in one write, before blocking for more: two syscalls a
         * batch (no poll for more input first: when more is there, the read below returns at
         * once and its answers go in the next write). */
        flush_out(&ex);
        open = read_more(&ex.in);
    }
    flush_out(&ex);
    if (ex.broken)
        rc = 1;
out:;
    fn_entry *f, *ftmp;
    HASH_ITER(hh, ex.fns, f, ftmp)
    {
        HASH_DEL(ex.fns, f);
        free(f->owned);
        free(f);
    }
    for (uint32_t i = 0; i < ex.nplugins; i++)
        dlclose(ex.plugins[i]);
    for (uint32_t i = 0; i < ex.nuploaded; i++) {
        if (ex.uploaded[i].handle != NULL)
            dlclose(ex.uploaded[i].handle);
        free(ex.uploaded[i].err);
    }
    free(ex.uploaded);
    for (uint32_t k = 0; k < EXEC_KEPT_N; k++)
        free(ex.kept[k].v);
    spw_buf_release(&ex.in);
    spw_buf_release(&ex.out);
    spw_buf_release(&ex.backlog);
    msgpack_zone_destroy(&ex.zone);
    msgpack_zone_destroy(&ex.alloc_zone);
    munmap(arena, ex.capacity);
    return rc;
}
