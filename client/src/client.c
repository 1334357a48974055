/*
 * libspillway: connection, objects, results and releases.
 *
 * Each spillway handle owns a private libuv loop, a proto_ctx, the scheduler connection and a
 * cache of connections to workers' peer ports. The public calls are blocking: they queue
 * frames and run the loop until their answer arrives (run_until). One request is outstanding
 * at a time (the `call` slot); TASK_RESULT frames arrive at any time and update the table of
 * references this client holds (c->refs, refs.c).
 * Invariants: a handle is in c->refs iff the client holds its reference (held); small puts
 * live only here (never at the scheduler); everything allocated is freed by spillway_close.
 */
#include "client_int.h"

#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>


void spillway__set_err(spillway *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->errmsg, sizeof c->errmsg, fmt, ap);
    va_end(ap);
    c->err_set = true;
}

int spillway__leave(spillway *c, int rc, const char *fn)
{
    if (rc != 0 && c != NULL && !c->err_set)
        spillway__set_err(c, "%s: %s", fn, spw_strerror(rc));
    return rc;
}

int spillway__refuse(spillway *c, int rc, const char *fn, const char *fmt, ...)
{
    if (c == NULL)
        return rc;
    char why[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    spillway__set_err(c, "%s: %s: %s", fn, spw_strerror(rc), why);
    return rc;
}

void spillway_opts_init(spillway_opts *o)
{
    memset(o, 0, sizeof *o);
    o->connect_timeout_ms = 10000;
    o->reconnect_ms = 60000;
    o->name = "libspillway";
}

unsigned spillway_version(void)
{
    return SPILLWAY_VERSION_NUMBER;
}

const char *spillway_version_string(void)
{
    return SPW_VERSION;
}

/* The public levels are handed to spw_log unchanged. */
#define SAME_LEVEL(x) ((int)SPILLWAY_LOG_##x == (int)SPW_LOG_##x)
_Static_assert(SAME_LEVEL(ERR) && SAME_LEVEL(WARN) && SAME_LEVEL(NOTICE) && SAME_LEVEL(INFO) &&
                   SAME_LEVEL(DEBUG),
               "enum spillway_log_level mirrors SPW_LOG_*");
#undef SAME_LEVEL

void spillway_set_log(spillway_log_fn fn, int level)
{
    if (level < SPILLWAY_LOG_ERR)
        level = SPILLWAY_LOG_ERR;
    if (level > SPILLWAY_LOG_DEBUG)
        level = SPILLWAY_LOG_DEBUG;
    spw_log_set_sink(fn, level);
}

const char *spillway_strerror(int err)
{
    return spw_strerror(err);
}

/* Why the calling thread's last spillway_connect failed: it has no handle to carry the text. */
static _Thread_local char connect_err[PROTO_MAX_STR + 64];

const char *spillway_errmsg(const spillway *c)
{
    return c != NULL ? c->errmsg : connect_err;
}

static void connect_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void connect_fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(connect_err, sizeof connect_err, fmt, ap);
    va_end(ap);
}

/* What is wrong with an address spw_addr_parse refused, for the text of a failed connect. */
static const char *addr_problem(const char *addr)
{
    if (addr == NULL || addr[0] == '\0')
        return "no address given (want HOST:PORT)";
    const char *colon = addr[0] == '[' ? strstr(addr, "]:") : strrchr(addr, ':');
    if (addr[0] == '[' && strchr(addr, ']') == NULL)
        return "an IPv6 address without its closing ']'";
    if (colon == NULL)
        return "no port (want HOST:PORT)";
    if (addr[0] == '[')
        colon++;
    if (colon == addr)
        return "no host before the port";
    const char *port = colon + 1;
    if (*port == '\0')
        return "an empty port (want HOST:PORT)";
    char *end;
    errno = 0;
    long p = strtol(port, &end, 10);
    if (*end != '\0' || port[0] == '-' || port[0] == '+')
        return "the port is not a number";
    if (errno != 0 || p < 1 || p > 65535)
        return "the port is outside 1..65535";
    return "not HOST:PORT, or the host is not an IPv4 address, a host name or a bracketed IPv6 "
           "address";
}

static const char *role_name(int role)
{
    switch (role) {
    case PROTO_ROLE_SCHEDULER:
        return "a scheduler";
    case PROTO_ROLE_WORKER:
        return "a worker's peer port";
    case PROTO_ROLE_CLIENT:
        return "a client";
    case PROTO_ROLE_CTL:
        return "spillway-ctl";
    case PROTO_ROLE_EXECUTOR:
        return "an executor";
    default:
        return "a peer of unknown role";
    }
}

char *spillway_ref_hex(spillway_ref ref, char out[33])
{
    return spw_id_hex((spw_id){ref.hi, ref.lo}, out);
}

const char *spillway__addr(const spillway *c)
{
    return c->addr;
}

/* ------------------------------------------------------------- the loop */

static void timer_cb(uv_timer_t *t)
{
    spillway *c = t->data;
    c->timer_fired = 1;
}

/* Calls fn(conn, c) on every connection of c: the scheduler's, the workers', the local ones. */
static void conns_each(spillway *c, void (*fn)(proto_conn *conn, spillway *c))
{
    if (c->sched != NULL)
        fn(c->sched, c);
    peer *p, *ptmp;
    HASH_ITER(hh, c->peers, p, ptmp)
    {
        if (p->conn != NULL)
            fn(p->conn, c);
    }
    local *l, *ltmp;
    HASH_ITER(hh, c->locals, l, ltmp)
    {
        if (l->conn != NULL)
            fn(l->conn, c);
    }
}

/* One whose peer neither answers nor takes our bytes for stall_ms is closed with SPW_ETIMEDOUT
 * (proto_conn_watch; for the scheduler, sched_close records it), which fails what waits on it. */
static void conn_watch(proto_conn *conn, spillway *c)
{
    proto_conn_watch(conn, c->stall_ms);
}

/* Probes every connection while a call waits (idle ones too: a PING costs a frame each
 * stall_ms/3). */
static void watch_cb(uv_timer_t *t)
{
    conns_each(t->data, conn_watch);
}

static void conn_watch_skip(proto_conn *conn, spillway *c)
{
    proto_conn_watch_skip(conn, c->watch_end_ms);
}

/* A wait begins: the time since the last one ended is the program's own (nothing read the
 * connections), not the peers' silence; the silence inside earlier waits still counts, so a
 * program that polls with short waits finds a silent peer all the same. Looked at once now: a
 * wait may end before the timer's first turn. */
static void watch_begin(spillway *c)
{
    uv_update_time(&c->loop);
    conns_each(c, conn_watch_skip);
    conns_each(c, conn_watch);
}

/* Runs the loop until cond(c, arg) holds, the deadline passes or the scheduler goes away
 * (SPW_ECLOSED; SPW_ETIMEDOUT when it went silent for the stall timeout). */
int spillway__run_until(spillway *c, bool (*cond)(spillway *c, void *arg), void *arg, int timeout_ms)
{
    uint64_t deadline = timeout_ms < 0 ? UINT64_MAX
                                       : spw_now_ns() + (uint64_t)timeout_ms * 1000000ULL;
    bool watching = false;
    int rc = 0;
    while (!cond(c, arg)) {
        if (!watching && c->stall_ms > 0 && c->sched != NULL) {
            /* Not before the first wait: a call answered at once arms nothing. */
            uint64_t every = c->stall_ms / 3 < 250 ? c->stall_ms / 3 + 1 : 250;
            watch_begin(c); /* may close the scheduler's connection: looked at next */
            uv_timer_start(&c->watch, watch_cb, every, every);
            watching = true;
        }
        if (c->sched == NULL && spillway__can_resume(c) && spillway__connected(c) == 0)
            continue; /* resumed: cond may hold now (a call failed rather than asked again) */
        if (c->sched == NULL) {
            rc = SPW_ECLOSED;
            if (c->lost) {
                spillway__set_err(c, "%s", c->lost_why);
            } else if (spillway__stalled(c)) {
                rc = SPW_ETIMEDOUT;
                spillway__set_err(c,
                                  "the scheduler %s sent nothing for %u ms (the stall timeout): "
                                  "connection closed",
                                  c->addr, c->stall_ms);
            }
            break;
        }
        uint64_t now = spw_now_ns();
        if (now >= deadline) {
            rc = SPW_ETIMEDOUT;
            break;
        }
        c->timer_fired = 0;
        if (deadline != UINT64_MAX)
            uv_timer_start(&c->timer, timer_cb, (deadline - now) / 1000000ULL + 1, 0);
        uv_run(&c->loop, UV_RUN_ONCE);
        uv_timer_stop(&c->timer);
    }
    if (watching) {
        uv_timer_stop(&c->watch);
        uv_update_time(&c->loop);
        c->watch_end_ms = uv_now(&c->loop);
    }
    return rc;
}

bool spillway__stalled(const spillway *c)
{
    return c->sched == NULL && c->sched_status == SPW_ETIMEDOUT;
}

int spillway_set_stall_timeout(spillway *c, int timeout_ms)
{
    spillway__enter(c);
    if (c == NULL || timeout_ms < 0)
        return spillway__refuse(c, SPW_EINVAL, "spillway_set_stall_timeout",
                                "timeout_ms is %d; at least 0 (0: never)", timeout_ms);
    c->stall_ms = (uint32_t)timeout_ms;
    return 0;
}

/* Lets queued frames go out without waiting for anything. */
void spillway__flush(spillway *c)
{
    uv_run(&c->loop, UV_RUN_NOWAIT);
}

static bool call_done(spillway *c, void *arg)
{
    (void)arg;
    return c->call.done;
}

uint64_t spillway__call_begin(spillway *c, uint32_t reply_type)
{
    c->call = (call){0};
    c->call.req = ++c->next_req;
    c->call.active = true;
    c->call.type = reply_type;
    c->call.status = 0;
    return c->call.req;
}

/* Waits for the outstanding call. */
int spillway__call_wait(spillway *c, int timeout_ms)
{
    int rc = spillway__run_until(c, call_done, NULL, timeout_ms);
    c->call.active = false;
    if (rc != 0) {
        if (rc == SPW_ECLOSED && c->lost)
            spillway__set_err(c, "%s", c->lost_why);
        else if (rc == SPW_ECLOSED)
            spillway__set_err(c, "connection to the scheduler %s closed: %s", c->addr,
                    spw_strerror(c->sched_status));
        else if (!spillway__stalled(c)) /* else run_until said so */
            spillway__set_err(c, "no answer from the scheduler in %d ms", timeout_ms);
        return rc;
    }
    return c->call.status;
}

/* --------------------------------------------------------- scheduler side */

/* One result: the fields of a TASK_RESULT, or a record of a TASK_RESULTS (a bad record is
 * logged, and fails its task when its id is readable). */
static void on_task_result(spillway *c, const proto_val *f)
{
    char hex[33];
    if (f[F_TRES_ID].bad)
        spw_log(SPW_LOG_WARN,
                "scheduler: a TASK_RESULTS record does not match the schema "
                "(task=%s)",
                f[F_TRES_ID].nil ? "?" : spw_id_hex(f[F_TRES_ID].id, hex));
    handle *h = f[F_TRES_ID].nil ? NULL : spillway__handle_find(c, f[F_TRES_ID].id);
    if (h == NULL || h->kind != H_TASK)
        return; /* released before it finished */
    /* A result that comes again (a lineage re-run, or a scheduler repeating itself) replaces
     * the one before, whose value and text are freed here: nothing else would free them. */
    if (h->inl != spillway__empty)
        spw_free(h->inl);
    spw_free(h->err);
    h->inl = NULL;
    h->err = NULL;
    h->has_inl = false;
    if (f[F_TRES_ID].bad) {
        h->status = SPW_EMALFORMED;
        h->state = H_FAILED;
        h->err = spw_strdup(SPW_MOD_CLIENT, "the scheduler sent a malformed result");
        return;
    }
    int status = proto_status(f[F_TRES_STATUS].i);
    h->status = status;
    h->state = status == 0 ? H_DONE : H_FAILED;
    h->size = f[F_TRES_SIZE].u;
    if (!f[F_TRES_INLINE].nil) {
        const proto_val *v = &f[F_TRES_INLINE];
        if (v->bin.len == 0) {
            h->inl = spillway__empty;
        } else {
            h->inl = spw_malloc(SPW_MOD_CLIENT, v->bin.len);
            memcpy(h->inl, v->bin.ptr, v->bin.len);
        }
        h->size = v->bin.len;
        h->has_inl = true;
    }
    if (status != 0) {
        char err[PROTO_MAX_STR + 1];
        h->err = spw_strdup(SPW_MOD_CLIENT, proto_str(&f[F_TRES_ERR], err, sizeof err));
    }
}

/* How many records ahead on_task_results prefetches a record's handle; its table slot is
 * prefetched twice as far ahead. */
#define RESULTS_AHEAD 8

static void results_prefetch(spillway *c, const proto_val *recs, uint32_t i, int stage)
{
    const proto_val *f = PROTO_REC(recs, i);
    if (!f[F_TRES_ID].nil)
        spw_idmap_prefetch(&c->refs.other, f[F_TRES_ID].id, stage);
}

/* The records of a TASK_RESULTS. A result of this client's own task finds its handle by the
 * id's counter (refs.c), near the previous one's. A handle in refs.other (automatic puts,
 * which are not task results, and task handles a sweep moved out of sparse chunks, which may
 * be) is a slot of a hash table and a record at random places in memory: while it holds any,
 * results are prefetched a few records ahead, so that their cache misses overlap. */
static void on_task_results(spillway *c, const proto_val *recs)
{
    uint32_t n = recs->arr.n;
    bool ahead = c->refs.other.n != 0;
    for (uint32_t i = 0; ahead && i < n && i < 2 * RESULTS_AHEAD; i++)
        results_prefetch(c, recs, i, i < RESULTS_AHEAD ? 1 : 0);
    for (uint32_t i = 0; i < n; i++) {
        if (ahead && i + 2 * RESULTS_AHEAD < n)
            results_prefetch(c, recs, i + 2 * RESULTS_AHEAD, 0);
        if (ahead && i + RESULTS_AHEAD < n)
            results_prefetch(c, recs, i + RESULTS_AHEAD, 1);
        on_task_result(c, PROTO_REC(recs, i));
    }
}

static void call_msg(spillway *c, const proto_msg *m);

static void sched_msg(proto_conn *conn, const proto_msg *m)
{
    spillway *c = proto_ctx_data(proto_conn_ctx(conn));
    if (conn != c->sched)
        return; /* a connection given up on while reconnecting */
    if (m->type == PROTO_TASK_RESULT) {
        on_task_result(c, m->f);
        return;
    }
    if (m->type == PROTO_TASK_RESULTS) {
        on_task_results(c, &m->f[F_TRESS_RECS]);
        return;
    }
    bool was_done = c->call.done;
    call_msg(c, m);
    if (c->call.done && !was_done)
        spillway__answered(c);
}

/* A frame that answers (or is part of the answer to) a request. */
static void call_msg(spillway *c, const proto_msg *m)
{
    call *k = &c->call;
    if (!k->active || m->req != k->req || k->done) {
        if (m->type == PROTO_ERROR) {
            char msg[PROTO_MAX_STR + 1];
            spw_log(SPW_LOG_WARN, "scheduler: %s err=%s",
                    proto_str(&m->f[F_ERROR_MSG], msg, sizeof msg),
                    spw_err_name((int)m->f[F_ERROR_CODE].i));
        }
        return;
    }
    if (m->type == PROTO_ERROR) {
        char msg[PROTO_MAX_STR + 1];
        proto_str(&m->f[F_ERROR_MSG], msg, sizeof msg);
        const char *tid = strstr(msg, "task=");
        spw_id id;
        char hex[33];
        if (k->errors_then_ack && tid != NULL && strlen(tid + 5) >= 32) {
            /* A refused task will never report: settle its handle with the refusal. */
            memcpy(hex, tid + 5, 32);
            hex[32] = '\0';
            handle *h = spw_id_parse(hex, &id) == 0 ? spillway__handle_find(c, id) : NULL;
            if (h != NULL && h->state == H_PENDING) {
                h->state = H_FAILED;
                h->status = proto_err_code(m->f[F_ERROR_CODE].i);
                h->err = spw_strdup(SPW_MOD_CLIENT, msg);
            }
        }
        if (k->status == 0) {
            k->status = proto_err_code(m->f[F_ERROR_CODE].i);
            spillway__set_err(c, "%s", proto_str(&m->f[F_ERROR_MSG], msg, sizeof msg));
        }
        if (!k->errors_then_ack)
            k->done = true;
        return;
    }
    if (m->type == k->type || k->type == 0) {
        if (k->on_reply != NULL)
            k->on_reply(m, k->arg);
        k->done = true;
    } else if (k->parts) {
        if (k->on_reply != NULL)
            k->on_reply(m, k->arg); /* one part of a reply in several frames */
    } else {
        /* No reply to this request: read as one, its fields would be taken for others (a
         * string for a list of records). The call fails now rather than wait on. */
        if (k->status == 0) {
            k->status = SPW_EPROTO;
            spillway__set_err(c, "the scheduler answered with a message of type %u, not %u",
                              m->type, k->type);
        }
        k->done = true;
    }
}

static void sched_ready(proto_conn *conn, const proto_welcome *w)
{
    spillway *c = proto_ctx_data(proto_conn_ctx(conn));
    if (conn != c->sched)
        return;
    int role = proto_conn_peer_role(conn);
    if (role != PROTO_ROLE_SCHEDULER) {
        /* A worker's peer port also says READY HOST:PORT and takes a client's handshake, but
         * never answers a scheduler's requests: a call made there would wait for ever. */
        spillway__set_err(c, "%s answered as %s, not a scheduler", c->addr, role_name(role));
        c->wrong_role = true;
        proto_conn_close(conn, SPW_EPROTO);
        return;
    }
    c->ready = true;
    c->wel = *w;
    if (c->inline_limit == 0)
        c->inline_limit = w->inline_limit;
    if (!c->resumable && w->has_token) { /* the first WELCOME: later ones resume or refuse */
        c->resumable = true;
        c->session = w->session;
        memcpy(c->token, w->token, sizeof c->token);
    }
}

static void sched_close(proto_conn *conn, int status)
{
    spillway *c = proto_ctx_data(proto_conn_ctx(conn));
    if (conn != c->sched)
        return;
    c->sched = NULL;
    c->ready = false;
    c->sched_status = status != 0 ? status : SPW_ECLOSED;
}

static const proto_conn_cbs sched_cbs = {
    .on_ready = sched_ready,
    .on_msg = sched_msg,
    .on_close = sched_close,
};

static bool is_ready(spillway *c, void *arg)
{
    (void)arg;
    return c->ready;
}

/* Runs the loop until c is ready, its connection closed, or the deadline (spw_now_ns) passes,
 * without the stall watch or a reconnect of run_until: a connection being made is waited for
 * by its own handshake deadline. */
static void run_plain(spillway *c, bool until_closed, uint64_t deadline)
{
    for (;;) {
        if (until_closed ? c->sched == NULL || c->ready : false)
            return;
        uint64_t now = spw_now_ns();
        if (now >= deadline)
            return;
        uv_timer_start(&c->timer, timer_cb, (deadline - now) / 1000000ULL + 1, 0);
        uv_run(&c->loop, UV_RUN_ONCE);
        uv_timer_stop(&c->timer);
    }
}

/* The connection broke: connects again, with a backoff from 100 ms doubling to 2 s, until the
 * scheduler resumes the session (then what it did not process goes out again), refuses it, or
 * reconnect_ms (the stall timeout if shorter) passes. Either of the last two loses it. */
static int reconnect(spillway *c)
{
    uint32_t budget = c->reconnect_ms;
    if (c->stall_ms > 0 && c->stall_ms < budget)
        budget = c->stall_ms;
    uint64_t start = spw_now_ns();
    uint64_t deadline = start + (uint64_t)budget * 1000000ULL;
    int why = c->sched_status;
    spw_log(SPW_LOG_NOTICE, "scheduler %s: connection lost (%s): reconnecting to resume session=%llu",
            c->addr, spw_strerror(why), (unsigned long long)c->session);
    uint32_t delay_ms = 100;
    int last = why;
    for (unsigned tries = 1;; tries++) {
        c->ready = false;
        int rc = proto_connect(c->ctx, c->addr, &sched_cbs, NULL, &c->sched);
        if (rc == 0) {
            proto_conn_set_resume(c->sched, c->session, c->token);
            run_plain(c, true, deadline);
            if (c->ready && !c->wel.resumed) {
                spillway__lose(c, "the scheduler %s did not resume session=%llu (it was away "
                                  "longer than the scheduler's --session-grace, or the "
                                  "scheduler lost it): its references and pending calls are gone",
                               c->addr, (unsigned long long)c->session);
                (void)proto_send_bye(c->sched, 0); /* the new session it was given ends too */
                proto_conn_close(c->sched, 0);
                return SPW_ECLOSED;
            }
            if (c->ready) {
                spw_log(SPW_LOG_NOTICE, "scheduler %s: session=%llu resumed after %u tries",
                        c->addr, (unsigned long long)c->session, tries);
                return spillway__resend(c) == 0 ? 0 : SPW_ECLOSED;
            }
            last = c->sched_status;
            if (c->sched != NULL) { /* the deadline passed during the handshake */
                proto_conn_close(c->sched, SPW_ETIMEDOUT);
                c->sched = NULL; /* its close is not ours to hear any more */
                last = SPW_ETIMEDOUT;
            }
        } else {
            c->sched = NULL;
            last = rc;
        }
        uint64_t now = spw_now_ns();
        if (now >= deadline || c->wrong_role) {
            spillway__lose(c, "connection to the scheduler %s lost (%s) and not resumed within "
                              "%u ms (reconnect_ms, or the stall timeout if shorter; %u tries, "
                              "the last: %s)",
                           c->addr, spw_strerror(why), budget, tries, spw_strerror(last));
            return SPW_ECLOSED;
        }
        uint64_t wake = now + (uint64_t)delay_ms * 1000000ULL;
        run_plain(c, false, wake < deadline ? wake : deadline);
        delay_ms = delay_ms * 2 < 2000 ? delay_ms * 2 : 2000;
    }
}

/* spillway_close after the connection broke (a stall, or a close not yet resumed): the
 * session, detached at the scheduler, would outlive us for its --session-grace. One short try
 * resumes it, only for the BYE that ends it now. */
static void resume_to_leave(spillway *c)
{
    if (c->sched != NULL || !c->resumable || c->lost || c->reconnect_ms == 0)
        return;
    uint32_t ms = c->reconnect_ms < 1000 ? c->reconnect_ms : 1000;
    c->ready = false;
    if (proto_connect(c->ctx, c->addr, &sched_cbs, NULL, &c->sched) != 0) {
        c->sched = NULL;
        return;
    }
    proto_conn_set_resume(c->sched, c->session, c->token);
    run_plain(c, true, spw_now_ns() + (uint64_t)ms * 1000000ULL);
}

int spillway__connected(spillway *c)
{
    if (c->sched != NULL)
        return 0;
    if (!spillway__can_resume(c)) {
        if (c->lost)
            spillway__set_err(c, "%s", c->lost_why);
        return SPW_ECLOSED;
    }
    return reconnect(c);
}

const char *spillway__secret_file(const spillway_opts *o)
{
    if (o->secret_file != NULL)
        return o->secret_file;
    const char *env = getenv("SPILLWAY_SECRET_FILE");
    if (env != NULL && env[0] != '\0')
        return env;
    if (access(SPW_DEFAULT_SECRET_FILE, R_OK) == 0)
        return SPW_DEFAULT_SECRET_FILE;
    if (errno != ENOENT && errno != ENOTDIR)
        spw_log(SPW_LOG_WARN,
                "%s: %s: connecting without a cluster secret (members of its group, "
                "usually spillway, can read it)",
                SPW_DEFAULT_SECRET_FILE, strerror(errno));
    return NULL;
}

int spillway__connect_role(const char *addr, const spillway_opts *o, int role, spillway **out)
{
    /* A worker or scheduler that goes away mid-write must give an error, not SIGPIPE. We only
     * change the disposition if the program never chose one. */
    struct sigaction sa;
    if (sigaction(SIGPIPE, NULL, &sa) == 0 && sa.sa_handler == SIG_DFL)
        signal(SIGPIPE, SIG_IGN);
    spillway_opts defaults;
    if (o == NULL) {
        spillway_opts_init(&defaults);
        o = &defaults;
    }
    connect_err[0] = '\0';
    spw_addr parsed = {0};
    /* "unix:NAME": the scheduler's local socket, same host only */
    bool is_unix = addr != NULL && strncmp(addr, PROTO_UNIX_PREFIX, strlen(PROTO_UNIX_PREFIX)) == 0;
    if (addr == NULL ||
        (!is_unix && (spw_addr_parse(addr, -1, &parsed) != 0 || parsed.port == 0))) {
        connect_fail("cannot connect to '%s': %s", addr != NULL ? addr : "", addr_problem(addr));
        return SPW_EINVAL;
    }
    if (!is_unix && spw_addr_host_is_wildcard(parsed.host)) {
        connect_fail("cannot connect to '%s': %s is a wildcard address, for listening on every "
                     "interface; connect to one host's address or name",
                     addr, parsed.host);
        return SPW_EINVAL;
    }
    if (out == NULL) {
        connect_fail("cannot connect to '%s': out is NULL; it receives the connection", addr);
        return SPW_EINVAL;
    }
    uint8_t *secret = NULL;
    size_t secret_len = 0;
    const char *secret_file = spillway__secret_file(o);
    if (secret_file != NULL) {
        int rc = proto_secret_load(secret_file, &secret, &secret_len);
        if (rc != 0) {
            connect_fail("cannot connect to %s: the secret file %s: %s", addr, secret_file,
                         spw_strerror(rc));
            return rc;
        }
    }
    spillway *c = spw_calloc(SPW_MOD_CLIENT, 1, sizeof *c);
    spillway__refs_init(c);
    snprintf(c->addr, sizeof c->addr, "%s", addr);
    c->inline_limit = o->inline_limit;
    c->auto_put = !o->no_auto_put;
    c->no_local = o->no_local || getenv("SPILLWAY_NO_LOCAL") != NULL;
    c->chunk_size = o->chunk_size;
    c->put_replicas = o->put_replicas;
    c->reconnect_ms = role == PROTO_ROLE_CLIENT && o->reconnect_ms > 0 ? (uint32_t)o->reconnect_ms
                                                                        : 0;
    spw_host_id(c->host_id, sizeof c->host_id);
    uint64_t seed[2];
    if (getrandom(seed, sizeof seed, 0) != sizeof seed) {
        seed[0] = spw_now_ns() ^ ((uint64_t)getpid() << 32);
        seed[1] = spw_id_hash((spw_id){seed[0], (uint64_t)getpid()});
    }
    c->id_hi = seed[0];
    /* Never the nil id; the low bits are zero, for the indexes of a task's outputs (output i of
     * task id is spw_id_output(id, i)). */
    c->id_lo = (seed[1] & ~SPW_OUT_INDEX_MASK) | SPW_TASK_OUTPUTS_MAX;
    uv_loop_init(&c->loop);
    uv_timer_init(&c->loop, &c->timer);
    c->timer.data = c;
    uv_timer_init(&c->loop, &c->watch);
    c->watch.data = c;
    c->stall_ms = SPILLWAY_STALL_TIMEOUT_MS;
    c->watch_end_ms = uv_now(&c->loop);
    proto_ctx_opts po;
    proto_ctx_opts_default(&po);
    po.role = role;
    po.name = o->name != NULL ? o->name : "libspillway";
    po.secret = secret;
    po.secret_len = secret_len;
    po.encrypt = o->encrypt;
    po.encrypt_local = o->encrypt_local != 0;
    po.tls_cert = o->tls_cert;
    po.tls_key = o->tls_key;
    po.tls_ca = o->tls_ca;
    int rc = proto_ctx_new(&c->loop, &po, &c->ctx);
    spw_free(secret);
    if (rc == SPW_EINVAL && o->encrypt != SPILLWAY_ENCRYPT_NO && secret == NULL) {
        connect_fail("cannot connect to %s: encryption needs the cluster secret (secret_file, "
                     "$SPILLWAY_SECRET_FILE or /etc/spillway/secret)", addr);
        spillway_close(c);
        return rc;
    }
    if (rc == 0) {
        proto_ctx_set_data(c->ctx, c);
        rc = proto_connect(c->ctx, addr, &sched_cbs, NULL, &c->sched);
        if (rc == 0 && c->reconnect_ms > 0)
            proto_conn_set_resume(c->sched, 0, NULL);
    }
    if (rc == 0) {
        int wait_ms = o->connect_timeout_ms > 0 ? o->connect_timeout_ms : 10000;
        rc = spillway__run_until(c, is_ready, NULL, wait_ms);
        if (rc == SPW_ECLOSED)
            rc = c->wrong_role ? SPW_EPROTO : c->sched_status;
        if (c->wrong_role)
            connect_fail("cannot connect to %s", c->errmsg);
        else if (rc == SPW_ETIMEDOUT)
            connect_fail("cannot connect to %s: no scheduler answered in %d ms", addr, wait_ms);
        else if (rc != 0)
            connect_fail("cannot connect to %s: %s", addr, spw_strerror(rc));
    } else {
        connect_fail("cannot connect to %s: %s", addr, spw_strerror(rc));
    }
    if (rc != 0) {
        spillway_close(c);
        return rc;
    }
    *out = c;
    return 0;
}

int spillway_connect(const char *addr, const spillway_opts *o, spillway **out)
{
    return spillway__connect_role(addr, o, PROTO_ROLE_CLIENT, out);
}

static void ctx_closed(void *arg)
{
    spillway *c = arg;
    c->ctx = NULL;
}

static void timer_closed(uv_handle_t *h)
{
    (void)h;
}

void spillway_close(spillway *c)
{
    if (c == NULL)
        return;
    spillway__plugins_detach(c);
    if (c->ctx != NULL) {
        resume_to_leave(c);
        if (c->sched != NULL && c->ready && c->resumable && !c->lost) {
            /* Not a broken connection: the scheduler drops the session now, not after its
             * --session-grace. */
            proto_enc e;
            proto_enc_bye(&e, spillway__out(c), 0);
            (void)spillway__send(c, &e);
        }
        /* Let queued frames (releases) leave before the connections close. */
        spillway__flush(c);
        proto_ctx_close(c->ctx, ctx_closed, c);
    }
    uv_close((uv_handle_t *)&c->timer, timer_closed);
    uv_close((uv_handle_t *)&c->watch, timer_closed);
    while (uv_run(&c->loop, UV_RUN_DEFAULT) != 0)
        ;
    uv_loop_close(&c->loop);
    spillway__handles_free_all(c);
    peer *p, *ptmp;
    HASH_ITER(hh, c->peers, p, ptmp)
    {
        HASH_DEL(c->peers, p);
        spw_free(p);
    }
    spillway__locals_free(c);
    spillway__resume_free(c);
    spw_free(c->xfer.buf);
    spw_free(c);
}

static int request(spillway *c, void (*enc)(proto_enc *e, spw_buf *out, uint64_t req, void *arg),
                   void (*on_reply)(const proto_msg *m, void *arg), void *arg, uint32_t type,
                   bool parts, int timeout_ms)
{
    if (spillway__connected(c) != 0)
        return SPW_ECLOSED;
    uint64_t req = spillway__call_begin(c, type);
    c->call.on_reply = on_reply;
    c->call.arg = arg;
    c->call.parts = parts;
    proto_enc e;
    enc(&e, spillway__out(c), req, arg);
    int rc = spillway__send(c, &e);
    if (rc != 0)
        return rc;
    return spillway__call_wait(c, timeout_ms);
}

int spillway__request(spillway *c, void (*enc)(proto_enc *e, spw_buf *out, uint64_t req, void *arg),
                      void (*on_reply)(const proto_msg *m, void *arg), void *arg,
                      uint32_t reply_type, int timeout_ms)
{
    return request(c, enc, on_reply, arg, reply_type, false, timeout_ms);
}

int spillway__request_until(spillway *c,
                            void (*enc)(proto_enc *e, spw_buf *out, uint64_t req, void *arg),
                            void (*on_reply)(const proto_msg *m, void *arg), void *arg,
                            uint32_t last_type, int timeout_ms)
{
    return request(c, enc, on_reply, arg, last_type, true, timeout_ms);
}
