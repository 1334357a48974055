/*
 * The scheduler's HTTP endpoint over libmicrohttpd (see http.h for the contract).
 *
 * Threads: libmicrohttpd's polling thread (poll) runs every request handler; the sampler thread
 * wakes every sample_ms; the guard thread wakes every SWEEP_MS. The first two talk to the
 * scheduler through one spillway-ctl connection (cl) and share the history ring under lock, so
 * requests are answered one at a time. Nothing here runs on, or reads, the scheduler's loop: it
 * is a ctl client of its own scheduler, so /api/status is byte for byte `spillway-ctl --json
 * status`. The guard keeps one hconn per open connection (guard_lock): a connection has
 * REQUEST_S seconds from its accept, or from the end of its previous request, to send a whole
 * request head, however slowly its bytes come, else the guard shuts its socket down (MHD then
 * closes it; MHD tells us of the close before it closes the descriptor, under the same lock).
 * Invariants: ring holds nsamples <= cap samples, oldest at (head - nsamples) mod cap; nconns is
 * the length of the conns list.
 */
#include "http.h"

#include <arpa/inet.h>
#include <errno.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <microhttpd.h>
#include <sodium.h>

#include "spillway/docs.h"

#include "http_assets.h"
#include "http_host.h"

#define QUERY_MS 5000
#define REQUEST_S 10      /* from accept (or the previous request's end) to a whole request */
#define OVER_REQUEST_S 2  /* the same for a connection past max_conns, which only gets a 503 */
#define IDLE_S 10         /* libmicrohttpd's own timeout: no byte moved this long */
#define SWEEP_MS 250      /* how often the guard looks for connections past their deadline */
#define MAX_CONNS 2048    /* connections served at once, when the descriptor limit allows */
#define SPARE_CONNS 64    /* accepted past max_conns only to be told 503 */
#define MAX_PER_IP 64     /* connections from one address */
#define CONN_MEMORY (16 * 1024) /* per connection: request head and response headers */

enum { HW_CAPACITY, HW_USED, HW_PINNED, HW_SPILLED, HW_SPILL_AT, HW_PAUSE_AT, HW_COUNT };
static const char *const hw_keys[] = {"capacity", "used", "pinned", "spilled_bytes",
                                      "spill_threshold", "pause_threshold"};
static const char *const hw_names[] = {"capacity", "used", "pinned", "spilled",
                                       "spill_threshold", "pause_threshold"};
_Static_assert(sizeof hw_keys / sizeof hw_keys[0] == HW_COUNT, "a key for every HW_*");
_Static_assert(sizeof hw_names / sizeof hw_names[0] == HW_COUNT, "a name for every HW_*");

typedef struct hworker {
    char *name; /* heap (strdup), in full */
    char *addr; /* heap (strdup): the dashboard's series are keyed by it, as names may repeat */
    uint64_t v[HW_COUNT];
    bool paused;
} hworker;

typedef struct hsample {
    uint64_t t_ms;
    uint64_t tasks[PROTO_TSTATE_COUNT];
    uint32_t nw;
    hworker *w;
} hsample;

/* An open connection, known to the guard from MHD's start notice to its close notice. */
typedef struct hconn {
    struct hconn *prev, *next;
    int fd;            /* its socket, open while the hconn is listed */
    uint64_t since_ms; /* monotonic: accept, or the end of the previous request */
    bool waiting;      /* a request head is awaited (from since_ms) */
    bool over;         /* accepted past max_conns: its request is answered 503 */
    bool cut;          /* the guard has shut it down */
} hconn;

struct spw_http {
    struct MHD_Daemon *mhd;
    int fd;                  /* listening socket (MHD closes it on stop) */
    bool need_token;
    spw_http_hosts hosts;    /* the names a request's Host may carry */
    uint32_t max_conns, per_ip;
    pthread_mutex_t guard_lock; /* conns, nconns, every hconn's fields, guard_stop */
    pthread_cond_t guard_wake;
    pthread_t guard;
    bool guard_started, guard_stop;
    hconn *conns;
    uint32_t nconns;
    char token[65];
    char *sched_addr;
    char *secret_file;
    int encrypt, encrypt_local; /* for the ctl link, as the scheduler's own options */
    char *tls_cert, *tls_key, *tls_ca;
    uint32_t sample_ms;
    pthread_mutex_t lock;    /* cl, the ring, stopping */
    pthread_cond_t wake;
    pthread_t sampler;
    bool sampler_started;
    bool stopping;
    spillway *cl;            /* ctl connection, made on first use, dropped when it fails */
    hsample *ring;
    uint32_t cap, nsamples, head;
};

/* ------------------------------------------------------------ ctl link */

/* The ctl connection, connecting if needed. Called with lock held. */
static spillway *link_get(spw_http *h)
{
    if (h->cl != NULL)
        return h->cl;
    spillway_opts o;
    spillway_opts_init(&o);
    o.name = "spillway-scheduler-http";
    o.secret_file = h->secret_file;
    o.encrypt = h->encrypt;
    o.encrypt_local = h->encrypt_local;
    o.tls_cert = h->tls_cert;
    o.tls_key = h->tls_key;
    o.tls_ca = h->tls_ca;
    o.connect_timeout_ms = QUERY_MS;
    if (ctl_doc_connect(h->sched_addr, &o, &h->cl) != 0)
        h->cl = NULL;
    return h->cl;
}

/* After a failed request: a closed or stuck connection is dropped, to be made again. */
static void link_failed(spw_http *h, int rc)
{
    if ((rc == SPW_ECLOSED || rc == SPW_ETIMEDOUT) && h->cl != NULL) {
        spillway_close(h->cl);
        h->cl = NULL;
    }
}

/* ------------------------------------------------------------- history */

static void sample_free(hsample *s)
{
    for (uint32_t i = 0; i < s->nw; i++) {
        free(s->w[i].name);
        free(s->w[i].addr);
    }
    free(s->w);
    s->w = NULL;
    s->nw = 0;
}

static void sample_take(spw_http *h, json_t *status)
{
    hsample *s = &h->ring[h->head];
    sample_free(s);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    s->t_ms = (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
    json_t *tasks = json_object_get(status, "tasks");
    for (int k = 0; k < PROTO_TSTATE_COUNT; k++)
        s->tasks[k] = ctl_doc_u(tasks, ctl_doc_tstate_names[k]);
    json_t *workers = json_object_get(status, "workers");
    size_t n = json_array_size(workers);
    s->w = calloc(n > 0 ? n : 1, sizeof *s->w);
    size_t i;
    json_t *w;
    json_array_foreach(workers, i, w)
    {
        if (s->w == NULL)
            break; /* out of memory: a sample without workers */
        hworker *hw = &s->w[s->nw];
        hw->name = strdup(ctl_doc_s(w, "name"));
        hw->addr = strdup(ctl_doc_s(w, "address"));
        if (hw->name == NULL || hw->addr == NULL) {
            free(hw->name);
            free(hw->addr);
            sample_free(s);
            break;
        }
        json_t *mem = json_object_get(w, "memory");
        for (int k = 0; k < HW_COUNT; k++)
            hw->v[k] = ctl_doc_u(mem, hw_keys[k]);
        hw->paused = strcmp(ctl_doc_s(w, "state"), "paused") == 0;
        s->nw++;
    }
    h->head = (h->head + 1) % h->cap;
    if (h->nsamples < h->cap)
        h->nsamples++;
}

/* CLOCK_REALTIME ms from now, for pthread_cond_timedwait. */
static struct timespec realtime_in(uint64_t ms)
{
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    uint64_t ns = (uint64_t)t.tv_nsec + ms * 1000000ULL;
    t.tv_sec += (time_t)(ns / 1000000000ULL);
    t.tv_nsec = (long)(ns % 1000000000ULL);
    return t;
}

static void *sampler_main(void *arg)
{
    spw_http *h = arg;
    pthread_mutex_lock(&h->lock);
    while (!h->stopping) {
        spillway *cl = link_get(h);
        if (cl != NULL) {
            json_t *status;
            int rc = ctl_doc_status(cl, QUERY_MS, &status);
            if (rc == 0) {
                sample_take(h, status);
                json_decref(status);
            } else {
                link_failed(h, rc);
            }
        }
        struct timespec until = realtime_in(h->sample_ms);
        while (!h->stopping && pthread_cond_timedwait(&h->wake, &h->lock, &until) != ETIMEDOUT)
            ;
    }
    pthread_mutex_unlock(&h->lock);
    return NULL;
}

/* The workers /api/history lists at most when the request names no top=K: the dashboard
 * asks for the cards it draws, and a large cluster's whole window stays out of every answer. */
#define HISTORY_TOP_DEFAULT 64
#define HISTORY_TOP_MAX 100000

/* Which worker most needs a look: paused first, then the fuller store, then by name. */
static int hworker_cmp(const void *pa, const void *pb)
{
    const hworker *a = *(const hworker *const *)pa, *b = *(const hworker *const *)pb;
    if (a->paused != b->paused)
        return a->paused ? -1 : 1;
    /* used/capacity, cross-multiplied in floating point (a store's bytes fit a double's
     * mantissa well enough for an order). */
    double fa = (double)a->v[HW_USED] * (double)(b->v[HW_CAPACITY] ? b->v[HW_CAPACITY] : 1),
           fb = (double)b->v[HW_USED] * (double)(a->v[HW_CAPACITY] ? a->v[HW_CAPACITY] : 1);
    if (fa != fb)
        return fa > fb ? -1 : 1;
    int c = strcmp(a->name, b->name);
    return c != 0 ? c : strcmp(a->addr, b->addr);
}

/* A new series of the window's n samples, every column null. */
static json_t *series_new(const hworker *w, uint32_t n)
{
    json_t *jw = json_object();
    json_object_set_new(jw, "name", ctl_doc_str(w->name));
    json_object_set_new(jw, "address", ctl_doc_str(w->addr));
    for (int k = 0; k < HW_COUNT; k++) {
        json_t *col = json_array();
        for (uint32_t j = 0; j < n; j++)
            json_array_append_new(col, json_null());
        json_object_set_new(jw, hw_names[k], col);
    }
    return jw;
}

/* /api/history: columns aligned on t (null where a worker was absent), a series per worker
 * address (two workers may share a name), and a summary of the latest sample over every
 * worker. When the window saw at most top workers, every one has a series, in order of first
 * appearance; else the top that most need a look in the latest sample (paused, then the
 * fullest stores), in that order. Costs one hash lookup per worker per sample. Lock held. */
static json_t *history_json(spw_http *h, uint32_t top)
{
    json_t *doc = json_object();
    json_object_set_new(doc, "interval_ms", json_integer(h->sample_ms));
    json_t *t = json_array(), *tasks = json_object(), *workers = json_array();
    json_t *tcols[PROTO_TSTATE_COUNT];
    for (int k = 0; k < PROTO_TSTATE_COUNT; k++) {
        tcols[k] = json_array();
        json_object_set_new(tasks, ctl_doc_tstate_names[k], tcols[k]);
    }
    uint32_t n = h->nsamples, first = (h->head + h->cap - n) % h->cap;
    const hsample *last = n > 0 ? &h->ring[(first + n - 1) % h->cap] : NULL;
    /* Every worker seen in the window, in order of first appearance: address -> position. */
    json_t *index = json_object();
    uint32_t seen = 0;
    for (uint32_t j = 0; j < n; j++) {
        const hsample *s = &h->ring[(first + j) % h->cap];
        for (uint32_t i = 0; i < s->nw; i++)
            if (json_object_get(index, s->w[i].addr) == NULL) {
                json_object_set_new(index, s->w[i].addr, json_integer(seen++));
                if (seen <= top)
                    json_array_append_new(workers, series_new(&s->w[i], n));
            }
    }
    if (seen > top) {
        /* Too many: the top of the latest sample instead. */
        json_array_clear(workers);
        json_object_clear(index);
        const hworker **order = calloc(last->nw > 0 ? last->nw : 1, sizeof *order);
        uint32_t k = 0;
        for (uint32_t i = 0; order != NULL && i < last->nw; i++)
            order[k++] = &last->w[i];
        qsort(order, k, sizeof *order, hworker_cmp);
        for (uint32_t i = 0; i < k && i < top; i++) {
            if (json_object_get(index, order[i]->addr) != NULL)
                continue;
            json_object_set_new(index, order[i]->addr,
                                json_integer((json_int_t)json_array_size(workers)));
            json_array_append_new(workers, series_new(order[i], n));
        }
        free(order);
    }
    for (uint32_t j = 0; j < n; j++) {
        const hsample *s = &h->ring[(first + j) % h->cap];
        json_array_append_new(t, json_integer((json_int_t)s->t_ms));
        for (int k = 0; k < PROTO_TSTATE_COUNT; k++)
            json_array_append_new(tcols[k], json_integer((json_int_t)s->tasks[k]));
        for (uint32_t i = 0; i < s->nw; i++) {
            json_t *at = json_object_get(index, s->w[i].addr);
            json_t *jw = at != NULL ? json_array_get(workers, (size_t)json_integer_value(at)) : NULL;
            if (jw == NULL)
                continue;
            for (int k = 0; k < HW_COUNT; k++)
                json_array_set_new(json_object_get(jw, hw_names[k]), j,
                                   json_integer((json_int_t)s->w[i].v[k]));
        }
    }
    json_decref(index);
    /* The latest sample over every worker, listed or not. */
    uint64_t sum[HW_COUNT] = {0}, paused = 0;
    for (uint32_t i = 0; last != NULL && i < last->nw; i++) {
        for (int k = 0; k < HW_COUNT; k++)
            sum[k] += last->w[i].v[k];
        paused += last->w[i].paused;
    }
    json_t *summary = json_object();
    json_object_set_new(summary, "workers", json_integer(last != NULL ? last->nw : 0));
    json_object_set_new(summary, "paused", json_integer((json_int_t)paused));
    for (int k = HW_CAPACITY; k <= HW_SPILLED; k++)
        json_object_set_new(summary, hw_names[k], json_integer((json_int_t)sum[k]));
    json_object_set_new(doc, "t", t);
    json_object_set_new(doc, "tasks", tasks);
    json_object_set_new(doc, "workers", workers);
    json_object_set_new(doc, "workers_seen", json_integer(seen));
    json_object_set_new(doc, "summary", summary);
    return doc;
}

/* --------------------------------------------------------------- guard */

static uint64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* MHD's start and close notices, on its thread. A connection we cannot track is shut down at
 * once rather than left without a deadline. */
static void on_connection(void *cls, struct MHD_Connection *conn, void **socket_context,
                          enum MHD_ConnectionNotificationCode toe)
{
    spw_http *h = cls;
    hconn *c = *socket_context;
    if (toe == MHD_CONNECTION_NOTIFY_CLOSED) {
        if (c == NULL)
            return;
        pthread_mutex_lock(&h->guard_lock);
        if (c->prev != NULL)
            c->prev->next = c->next;
        else
            h->conns = c->next;
        if (c->next != NULL)
            c->next->prev = c->prev;
        h->nconns--;
        pthread_mutex_unlock(&h->guard_lock);
        free(c);
        *socket_context = NULL;
        return;
    }
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    c = calloc(1, sizeof *c);
    if (c == NULL || ci == NULL) {
        if (ci != NULL)
            shutdown(ci->connect_fd, SHUT_RDWR);
        free(c);
        return;
    }
    c->fd = ci->connect_fd;
    c->since_ms = mono_ms();
    c->waiting = true;
    pthread_mutex_lock(&h->guard_lock);
    c->next = h->conns;
    if (h->conns != NULL)
        h->conns->prev = c;
    h->conns = c;
    c->over = ++h->nconns > h->max_conns;
    pthread_mutex_unlock(&h->guard_lock);
    *socket_context = c;
}

/* The connection's guard record, or NULL if it has none. */
static hconn *conn_guard(struct MHD_Connection *conn)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci != NULL ? ci->socket_context : NULL;
}

/* A request ended (answered, or its connection failed): the next one's deadline starts now. */
static void on_completed(void *cls, struct MHD_Connection *conn, void **req_cls,
                         enum MHD_RequestTerminationCode toe)
{
    (void)req_cls;
    (void)toe;
    spw_http *h = cls;
    hconn *c = conn_guard(conn);
    if (c == NULL)
        return;
    pthread_mutex_lock(&h->guard_lock);
    c->since_ms = mono_ms();
    c->waiting = true;
    pthread_mutex_unlock(&h->guard_lock);
}

/* Shuts down every connection whose request head is overdue: MHD reads the end of the stream
 * and closes it. Under guard_lock, so the descriptor is still the connection's. */
static void *guard_main(void *arg)
{
    spw_http *h = arg;
    pthread_mutex_lock(&h->guard_lock);
    while (!h->guard_stop) {
        uint64_t now = mono_ms();
        for (hconn *c = h->conns; c != NULL; c = c->next) {
            uint64_t limit_ms = (c->over ? OVER_REQUEST_S : REQUEST_S) * 1000ULL;
            if (c->waiting && !c->cut && now - c->since_ms >= limit_ms) {
                shutdown(c->fd, SHUT_RDWR);
                c->cut = true;
            }
        }
        struct timespec until = realtime_in(SWEEP_MS);
        pthread_cond_timedwait(&h->guard_wake, &h->guard_lock, &until);
    }
    pthread_mutex_unlock(&h->guard_lock);
    return NULL;
}

/* ------------------------------------------------------------- requests */

/* Answers the request. A refusal by the guard or the request checks (421, 400, 405, 503) also
 * closes the connection: its client is confused or hostile, and its socket is better freed. */
static enum MHD_Result reply(struct MHD_Connection *conn, unsigned code, const char *type,
                             void *body, size_t len, enum MHD_ResponseMemoryMode mode)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(len, body, mode);
    if (r == NULL) {
        if (mode == MHD_RESPMEM_MUST_FREE)
            free(body);
        return MHD_NO;
    }
    MHD_add_response_header(r, "Content-Type", type);
    MHD_add_response_header(r, "Cache-Control", "no-store");
    MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
    if (code == 400 || code == 405 || code == 421 || code == 503)
        MHD_add_response_header(r, MHD_HTTP_HEADER_CONNECTION, "close");
    if (strncmp(type, "text/html", 9) == 0)
        MHD_add_response_header(r, "Content-Security-Policy",
                                "default-src 'self'; script-src 'self' 'unsafe-inline'; "
                                "style-src 'self' 'unsafe-inline'; img-src 'self' data:");
    enum MHD_Result ret = MHD_queue_response(conn, code, r);
    MHD_destroy_response(r);
    return ret;
}

static enum MHD_Result reply_text(struct MHD_Connection *conn, unsigned code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static enum MHD_Result reply_text(struct MHD_Connection *conn, unsigned code, const char *fmt, ...)
{
    char *msg = NULL;
    va_list ap;
    va_start(ap, fmt);
    int n = vasprintf(&msg, fmt, ap);
    va_end(ap);
    if (n < 0)
        return MHD_NO;
    return reply(conn, code, "text/plain; charset=utf-8", msg, (size_t)n, MHD_RESPMEM_MUST_FREE);
}

/* A document as spillway-ctl --json prints it: indented, in order, one trailing newline
 * (compact: one line, for the dashboard's history). */
static enum MHD_Result reply_json(struct MHD_Connection *conn, json_t *doc, bool compact)
{
    char *s = json_dumps(doc, (compact ? JSON_COMPACT : JSON_INDENT(2)) | JSON_PRESERVE_ORDER);
    json_decref(doc);
    if (s == NULL)
        return reply_text(conn, 500, "out of memory\n");
    size_t len = strlen(s);
    char *body = realloc(s, len + 2);
    if (body == NULL) {
        free(s);
        return reply_text(conn, 500, "out of memory\n");
    }
    body[len] = '\n';
    body[len + 1] = '\0';
    return reply(conn, 200, "application/json", body, len + 1, MHD_RESPMEM_MUST_FREE);
}

static bool authorized(spw_http *h, struct MHD_Connection *conn)
{
    if (!h->need_token)
        return true;
    const char *tok = NULL;
    const char *auth = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Authorization");
    if (auth != NULL && strncmp(auth, "Bearer ", 7) == 0)
        tok = auth + 7;
    if (tok == NULL)
        tok = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "token");
    return tok != NULL && strlen(tok) == 64 && sodium_memcmp(tok, h->token, 64) == 0;
}

/* A query parameter that is a count: decimal digits only (no sign, no spaces), at most max.
 * Absent: dflt. Returns false for anything else, with why naming the parameter and its range;
 * a value past max (or past what strtoull holds) is refused, never read as something else. */
static bool arg_count(struct MHD_Connection *conn, const char *name, long dflt, long max,
                      long *out, char *why, size_t whylen)
{
    const char *v = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, name);
    *out = dflt;
    if (v == NULL)
        return true;
    bool digits = *v != '\0';
    for (const char *p = v; *p != '\0'; p++)
        digits = digits && *p >= '0' && *p <= '9';
    errno = 0;
    unsigned long long x = digits ? strtoull(v, NULL, 10) : 0;
    if (!digits || errno == ERANGE || x > (unsigned long long)max) {
        snprintf(why, whylen, "%s=%.40s%s is not a whole number from 0 to %ld", name, v,
                 strlen(v) > 40 ? "..." : "", max);
        return false;
    }
    *out = (long)x;
    return true;
}

/* The documents that need the scheduler. Lock held. */
static enum MHD_Result serve_api(spw_http *h, struct MHD_Connection *conn, const char *url)
{
    if (strcmp(url, "/api/history") == 0) {
        long top;
        char why[128];
        if (!arg_count(conn, "top", HISTORY_TOP_DEFAULT, HISTORY_TOP_MAX, &top, why, sizeof why))
            return reply_text(conn, 400, "bad query: %s\n", why);
        return reply_json(conn, history_json(h, (uint32_t)top), true);
    }
    spillway *cl = link_get(h);
    if (cl == NULL)
        return reply_text(conn, 503, "the scheduler does not answer on %s\n", h->sched_addr);
    json_t *doc = NULL;
    int rc;
    if (strcmp(url, "/api/status") == 0 || strcmp(url, "/metrics") == 0) {
        rc = ctl_doc_status(cl, QUERY_MS, &doc);
        if (rc == 0 && url[1] == 'm') {
            char *text = ctl_doc_metrics(doc);
            json_decref(doc);
            if (text == NULL)
                return reply_text(conn, 500, "out of memory\n");
            return reply(conn, 200, "text/plain; version=0.0.4; charset=utf-8", text, strlen(text),
                         MHD_RESPMEM_MUST_FREE);
        }
    } else if (strcmp(url, "/api/jobs") == 0) {
        rc = ctl_doc_jobs(cl, QUERY_MS, &doc);
    } else if (strcmp(url, "/api/memory") == 0) {
        const char *group = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "group_by");
        const char *sort = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "sort_by");
        long limit, stats;
        char why[128];
        if (!arg_count(conn, "limit", -1, LONG_MAX, &limit, why, sizeof why) ||
            !arg_count(conn, "stats_only", 0, 1, &stats, why, sizeof why))
            return reply_text(conn, 400, "bad query: %s\n", why);
        if ((group != NULL && strcmp(group, "node") && strcmp(group, "owner") &&
             strcmp(group, "ref-type") && strcmp(group, "call-site")) ||
            (sort != NULL && strcmp(sort, "size") && strcmp(sort, "age") && strcmp(sort, "id")))
            return reply_text(conn, 400,
                              "bad query: group_by=node|owner|ref-type|call-site, "
                              "sort_by=size|age|id, limit=N, stats_only=0|1\n");
        rc = ctl_doc_memory(cl, QUERY_MS, group, sort, limit, stats != 0, &doc);
    } else {
        return reply_text(conn, 404, "no such page: %s\n", url);
    }
    if (rc != 0) {
        link_failed(h, rc);
        return reply_text(conn, 502, "the scheduler's answer failed: %s\n", spw_strerror(rc));
    }
    return reply_json(conn, doc, false);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version, const char *upload,
                                  size_t *upload_len, void **req_cls)
{
    (void)version;
    (void)upload;
    (void)upload_len;
    (void)req_cls;
    spw_http *h = cls;
    /* The head is whole: its deadline no longer runs. Refusals come before anything is served,
     * and the head decides them all, so a body is never waited for (a response queued now is
     * sent without reading it, and the connection closed). */
    hconn *c = conn_guard(conn);
    bool over = false;
    if (c != NULL) {
        pthread_mutex_lock(&h->guard_lock);
        c->waiting = false;
        over = c->over;
        pthread_mutex_unlock(&h->guard_lock);
    }
    if (over)
        return reply_text(conn, 503, "too many connections (%u); try again\n", h->max_conns);
    const char *host = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_HOST);
    switch (spw_http_request_check(
        &h->hosts, method, host,
        MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH),
        MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_TRANSFER_ENCODING))) {
    case 0:
        break;
    case 421:
        return reply_text(conn, 421,
                          "this endpoint does not answer to the name '%.100s' (its address, "
                          "localhost, or a name given with --http-host)\n",
                          host != NULL ? host : "");
    case 405:
        return reply_text(conn, 405, "only GET and HEAD\n");
    default:
        return reply_text(conn, 400, "a GET has no body\n");
    }
    /* The page and its library need no token (they hold no data); everything else does. */
    if (strcmp(url, "/") == 0 || strcmp(url, "/index.html") == 0)
        return reply(conn, 200, "text/html; charset=utf-8", (void *)http_asset_index_html,
                     http_asset_index_html_len, MHD_RESPMEM_PERSISTENT);
    if (strcmp(url, "/dygraph.min.js") == 0)
        return reply(conn, 200, "text/javascript; charset=utf-8", (void *)http_asset_dygraph_js,
                     http_asset_dygraph_js_len, MHD_RESPMEM_PERSISTENT);
    if (strcmp(url, "/dygraph.min.css") == 0)
        return reply(conn, 200, "text/css; charset=utf-8", (void *)http_asset_dygraph_css,
                     http_asset_dygraph_css_len, MHD_RESPMEM_PERSISTENT);
    if (!authorized(h, conn))
        return reply_text(conn, 401,
                          "this endpoint wants 'Authorization: Bearer TOKEN' (or ?token=TOKEN); "
                          "spillway-ctl --secret-file PATH http-token prints it\n");
    pthread_mutex_lock(&h->lock);
    enum MHD_Result ret = serve_api(h, conn, url);
    pthread_mutex_unlock(&h->lock);
    return ret;
}

/* libmicrohttpd's messages are nearly all about one client's misbehaviour (a request cut off,
 * a connection refused at a limit): worth a line when looking into a problem, not a journal an
 * attacker can fill. */
static void mhd_log(void *arg, const char *fmt, va_list ap)
{
    (void)arg;
    char msg[512];
    vsnprintf(msg, sizeof msg, fmt, ap);
    size_t n = strlen(msg);
    while (n > 0 && msg[n - 1] == '\n')
        msg[--n] = '\0';
    spw_log(SPW_LOG_INFO, "http: %s", msg);
}

/* ---------------------------------------------------------- lifecycle */

static bool is_loopback(const struct sockaddr *sa)
{
    if (sa->sa_family == AF_INET)
        return (ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr) >> 24) == 127;
    if (sa->sa_family == AF_INET6)
        return IN6_IS_ADDR_LOOPBACK(&((const struct sockaddr_in6 *)sa)->sin6_addr);
    return false;
}

/* Makes the listening socket. Returns the fd or a negative error. */
static int listen_on(const char *addr, bool *loopback, char *bound, size_t boundlen)
{
    char host[64];
    int port;
    if (spw_addr_split(addr, host, &port) != 0 || port < 0 || port > 65535)
        return SPW_EINVAL;
    char ports[16];
    snprintf(ports, sizeof ports, "%d", port);
    struct addrinfo hints, *res;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    if (getaddrinfo(host[0] != '\0' ? host : NULL, ports, &hints, &res) != 0)
        return SPW_EINVAL;
    int fd = socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        int e = -errno;
        freeaddrinfo(res);
        return e;
    }
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(fd, res->ai_addr, res->ai_addrlen) != 0 || listen(fd, SOMAXCONN) != 0) {
        int e = -errno;
        close(fd);
        freeaddrinfo(res);
        return e;
    }
    freeaddrinfo(res);
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    getsockname(fd, (struct sockaddr *)&ss, &sl);
    *loopback = is_loopback((struct sockaddr *)&ss);
    char ip[INET6_ADDRSTRLEN] = "?";
    int bport = 0;
    if (ss.ss_family == AF_INET) {
        inet_ntop(AF_INET, &((struct sockaddr_in *)&ss)->sin_addr, ip, sizeof ip);
        bport = ntohs(((struct sockaddr_in *)&ss)->sin_port);
        snprintf(bound, boundlen, "%s:%d", ip, bport);
    } else {
        inet_ntop(AF_INET6, &((struct sockaddr_in6 *)&ss)->sin6_addr, ip, sizeof ip);
        bport = ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
        snprintf(bound, boundlen, "[%s]:%d", ip, bport);
    }
    return fd;
}

/* The names the endpoint answers to: its own address, the loopback names, --http-host's. */
static int hosts_init(spw_http *h, const spw_http_opts *o, const char *bound)
{
    char ip[80];
    snprintf(ip, sizeof ip, "%s", bound);
    char *colon = strrchr(ip, ':');
    if (colon != NULL)
        *colon = '\0';
    h->hosts.any_ip = strcmp(ip, "0.0.0.0") == 0 || strcmp(ip, "[::]") == 0;
    int rc = spw_http_hosts_add(&h->hosts, "localhost,127.0.0.1,[::1]");
    if (rc == 0 && !h->hosts.any_ip)
        rc = spw_http_hosts_add(&h->hosts, ip);
    for (size_t i = 0; rc == 0 && i < o->nhosts; i++)
        rc = spw_http_hosts_add(&h->hosts, o->hosts[i]);
    return rc;
}

/* Connections served at once: MAX_CONNS, or an eighth of the descriptor limit when that is
 * less (the scheduler's own port may take three quarters of it). */
static void conn_limits(spw_http *h)
{
    struct rlimit rl;
    uint64_t nofile = getrlimit(RLIMIT_NOFILE, &rl) == 0 ? (uint64_t)rl.rlim_cur : 1024;
    uint64_t n = nofile / 8;
    h->max_conns = n > MAX_CONNS ? MAX_CONNS : n < 64 ? 64 : (uint32_t)n;
    h->per_ip = h->max_conns / 4 < MAX_PER_IP ? h->max_conns / 4 : MAX_PER_IP;
}

int spw_http_start(const spw_http_opts *o, spw_http **out, char *bound, size_t boundlen)
{
    *out = NULL;
    if (o->token_always && o->secret == NULL)
        return SPW_EINVAL;
    for (size_t i = 0; i < o->nhosts; i++)
        if (!spw_http_hosts_valid(o->hosts[i]))
            return SPW_EINVAL;
    bool loopback = false;
    int fd = listen_on(o->listen, &loopback, bound, boundlen);
    if (fd < 0)
        return fd;
    spw_http *h = calloc(1, sizeof *h);
    if (h == NULL) {
        close(fd);
        return SPW_ENOMEM;
    }
    h->fd = fd;
    h->sample_ms = o->sample_ms ? o->sample_ms : 1000;
    h->cap = o->history ? o->history : 600;
    h->ring = calloc(h->cap, sizeof *h->ring);
    h->sched_addr = strdup(o->sched_addr);
    h->secret_file = o->secret_file != NULL ? strdup(o->secret_file) : NULL;
    h->encrypt = o->encrypt;
    h->encrypt_local = o->encrypt_local;
    h->tls_cert = o->tls_cert != NULL ? strdup(o->tls_cert) : NULL;
    h->tls_key = o->tls_key != NULL ? strdup(o->tls_key) : NULL;
    h->tls_ca = o->tls_ca != NULL ? strdup(o->tls_ca) : NULL;
    if (o->secret != NULL && (!loopback || o->token_always)) {
        h->need_token = true;
        ctl_doc_http_token(o->secret, o->secret_len, h->token);
    } else if (!loopback) {
        spw_log(SPW_LOG_WARN, "http: %s is reachable beyond this host and the cluster has no "
                              "secret: anyone who can reach it can read the cluster's state",
                bound);
    }
    pthread_mutex_init(&h->lock, NULL);
    pthread_cond_init(&h->wake, NULL);
    pthread_mutex_init(&h->guard_lock, NULL);
    pthread_cond_init(&h->guard_wake, NULL);
    if (h->ring == NULL || h->sched_addr == NULL || hosts_init(h, o, bound) != 0) {
        spw_http_stop(h);
        return SPW_ENOMEM;
    }
    conn_limits(h);
    /* poll(2), not epoll: libmicrohttpd's epoll mode is edge-triggered and takes a short read
     * as the socket drained, so a request cut off by its sender (its bytes and its close in
     * one go) was never read to the end and sat in CLOSE_WAIT until the idle timeout. poll is
     * level-triggered and has no FD_SETSIZE bound. */
    h->mhd = MHD_start_daemon(
        MHD_USE_POLL_INTERNAL_THREAD | MHD_USE_ERROR_LOG, 0, NULL, NULL, on_request, h,
        MHD_OPTION_EXTERNAL_LOGGER, mhd_log, NULL, MHD_OPTION_LISTEN_SOCKET, (MHD_socket)fd,
        MHD_OPTION_CONNECTION_LIMIT, (unsigned)(h->max_conns + SPARE_CONNS),
        MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned)h->per_ip,
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)IDLE_S,
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)CONN_MEMORY,
        MHD_OPTION_NOTIFY_CONNECTION, on_connection, h,
        MHD_OPTION_NOTIFY_COMPLETED, on_completed, h, MHD_OPTION_END);
    if (h->mhd == NULL) {
        spw_http_stop(h);
        return SPW_EIO;
    }
    if (pthread_create(&h->guard, NULL, guard_main, h) != 0) {
        spw_http_stop(h);
        return SPW_EIO;
    }
    h->guard_started = true;
    if (pthread_create(&h->sampler, NULL, sampler_main, h) != 0) {
        spw_http_stop(h);
        return SPW_EIO;
    }
    h->sampler_started = true;
    spw_log(SPW_LOG_NOTICE, "http: at most %u connections, %u per address; %d s to send a request",
            h->max_conns, h->per_ip, REQUEST_S);
    *out = h;
    return 0;
}

void spw_http_stop(spw_http *h)
{
    if (h == NULL)
        return;
    if (h->mhd != NULL) {
        MHD_stop_daemon(h->mhd); /* closes the listening socket */
        h->fd = -1;
    }
    if (h->fd >= 0)
        close(h->fd);
    pthread_mutex_lock(&h->guard_lock);
    h->guard_stop = true;
    pthread_cond_signal(&h->guard_wake);
    pthread_mutex_unlock(&h->guard_lock);
    if (h->guard_started)
        pthread_join(h->guard, NULL);
    pthread_mutex_lock(&h->lock);
    h->stopping = true;
    pthread_cond_signal(&h->wake);
    pthread_mutex_unlock(&h->lock);
    if (h->sampler_started)
        pthread_join(h->sampler, NULL);
    if (h->cl != NULL)
        spillway_close(h->cl);
    for (uint32_t i = 0; h->ring != NULL && i < h->cap; i++)
        sample_free(&h->ring[i]);
    free(h->ring);
    free(h->sched_addr);
    free(h->secret_file);
    free(h->tls_cert);
    free(h->tls_key);
    free(h->tls_ca);
    spw_http_hosts_free(&h->hosts);
    pthread_mutex_destroy(&h->lock);
    pthread_cond_destroy(&h->wake);
    pthread_mutex_destroy(&h->guard_lock);
    pthread_cond_destroy(&h->guard_wake);
    free(h);
}
