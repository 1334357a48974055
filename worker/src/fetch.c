/*
 * Fetching objects from other workers' peer ports: a task whose input lives elsewhere gets it
 * from a worker that holds it, trying each location in turn, once per object however many tasks
 * wait for it; a broadcast copy (REPLICATE) is fetched the same way along its chain. Readers of
 * this worker may follow an object while it arrives (peer.c). A task given a strict view of an
 * object that is not here fetches the view's bytes only, into a transient object (ranged) that
 * goes when its tasks are done with it: nothing of the rest is read or kept.
 * Invariant: a fetch is in w->fetches until it seals or gives up; w->nranged counts the ranged
 * ones.
 */
#include <stdio.h>
#include <string.h>

#include <utlist.h>
#include <xxhash.h>

#include "worker_int.h"

/* =============================================================== fetching */

static bool stripe_start(wrk *w, wfetch *f, wstripe *st);

static void fetch_free(wrk *w, wfetch *f)
{
    HASH_DEL(w->fetches, f);
    if (f->ranged)
        w->nranged--;
    fwait *x, *tmp;
    LL_FOREACH_SAFE(f->waiters, x, tmp) spw_free(x);
    spw_buf_release(&f->repl);
    spw_free(f);
}

/* Answers every REPLICATE of the object that named this worker (every broadcast of it waits
 * for its own answer, however many there are at once): failures one by one. */
static void repl_answer(wrk *w, wfetch *f, int status, const char *msg)
{
    for (size_t i = 0; i + 8 <= f->repl.len && status != 0 && w->sched != NULL; i += 8) {
        uint64_t req;
        memcpy(&req, f->repl.data + i, sizeof req);
        char hex[33];
        proto_conn_error(w->sched, req, status, "obj=%s: %s", spw_id_hex(f->id, hex), msg);
    }
    spw_buf_reset(&f->repl);
}

/* Everyone following f's object (whole, or a range) as it arrives hears it will not. */
static void followers_fail(wfetch *f, int status, const char *msg)
{
    wrk__followers_fail(&f->followers, status, msg);
    for (uint32_t k = 0; k < f->nstripes; k++)
        wrk__followers_fail(&f->st[k].followers, status, msg);
}

static void fetch_fail(wrk *w, wfetch *f, int status, const char *msg)
{
    if (f->plugin)
        wrk__plugin_fetched(w, f->id, status, msg);
    followers_fail(f, status, msg);
    repl_answer(w, f, status, msg);
    if (f->obj != NULL) {
        ost_obj_abort(w->store, f->obj);
        f->obj = NULL;
    }
    fwait *waiters = f->waiters;
    f->waiters = NULL;
    fetch_free(w, f);
    fwait *x, *tmp;
    LL_FOREACH_SAFE(waiters, x, tmp)
    {
        wrk__input_ready(w, x->t, x->arg, status, msg);
        spw_free(x);
    }
}

static void fetch_done(wrk *w, wfetch *f)
{
    ost_obj *o = f->obj;
    f->obj = NULL;
    ost_obj_seal(w->store, o);
    bool ranged = f->ranged;
    spw_id id = f->id;
    if (!ranged) {
        wrk__followers_advance(w, &f->followers, true);
        for (uint32_t k = 0; k < f->nstripes; k++)
            wrk__followers_advance(w, &f->st[k].followers, true);
        wrk__sched_obj_added(w, f->id, f->size); /* also answers a REPLICATE */
        repl_answer(w, f, 0, NULL);
    }
    bool plugin = f->plugin;
    fwait *waiters = f->waiters;
    f->waiters = NULL;
    if (f->ahead && waiters == NULL)
        ost_obj_spare(w->store, o, WRK_SPARE_FETCHED_MS); /* for a task waiting for admission */
    fetch_free(w, f);
    /* Each waiter is pinned and counted off in one step, so that no check between two of them
     * sees an input pinned yet still missing. A ranged copy is deleted at once (it goes with its
     * waiters' last unpin): a guard pin keeps it while they are served, since one may fail and
     * unpin before the next is pinned. */
    bool guard = ranged && ost_obj_pin(w->store, o) == 0;
    if (ranged)
        ost_obj_delete(w->store, id);
    fwait *x, *tmp;
    LL_FOREACH_SAFE(waiters, x, tmp)
    {
        warg *a = &x->t->args[x->arg];
        int rc = ost_obj_pin(w->store, o);
        if (rc == 0) {
            a->obj = o;
            a->pinned = 1;
            if (ranged)
                a->off = 0; /* the view's bytes are the whole transient object */
        }
        wrk__input_ready(w, x->t, x->arg, rc == 0 ? 0 : SPW_EAGAIN, NULL);
        spw_free(x);
    }
    if (guard)
        ost_obj_unpin(w->store, o);
    if (plugin)
        wrk__plugin_fetched(w, id, 0, NULL);
    wrk__mem_check(w);
}

static void fetch_send(wrk *w, wfetch *f, wstripe *st)
{
    proto_conn *c = st->peer->conn;
    st->peer->active_ns = spw_now_ns();
    /* A broadcast copy may come from a worker still receiving it, or about to. */
    bool chain = f->repl.len != 0;
    proto_send_obj_read(c, st->req,
                        &(proto_obj_read_msg){.id = f->src,
                                              .off = st->upto,
                                              .len = st->end - st->upto,
                                              .flags = PROTO_READ_FOLLOW,
                                              .omit_flags = !chain});
    (void)w;
}

static void fpeer_ready(proto_conn *c, const proto_welcome *wel)
{
    (void)wel;
    wpeer *p = proto_conn_data(c);
    wrk *w = p->w;
    p->ready = true;
    wfetch *f, *tmp;
    HASH_ITER(hh, w->fetches, f, tmp)
    {
        for (uint32_t k = 0; k < f->nstripes && f->obj != NULL; k++)
            if (f->st[k].peer == p && f->st[k].upto < f->st[k].end)
                fetch_send(w, f, &f->st[k]);
    }
}

/* The range of f that request req to p reads, or NULL. */
static wstripe *stripe_of(wfetch *f, const wpeer *p, uint64_t req)
{
    for (uint32_t k = 0; k < f->nstripes; k++)
        if (f->st[k].peer == p && f->st[k].req == req)
            return &f->st[k];
    return NULL;
}

static wfetch *fetch_by_req(wrk *w, wpeer *p, uint64_t req, wstripe **st)
{
    wfetch *f, *tmp;
    HASH_ITER(hh, w->fetches, f, tmp)
    if ((*st = stripe_of(f, p, req)) != NULL)
        return f;
    return NULL;
}

/* The fetch and range an OBJ_DATA of object id answers (request req, from p), or NULL: found by
 * id, or, while views are fetched (keyed by their private ids), by request. */
static wfetch *fetch_for_data(wrk *w, wpeer *p, spw_id id, uint64_t req, wstripe **st)
{
    wfetch *f;
    HASH_FIND(hh, w->fetches, &id, sizeof id, f);
    *st = f != NULL ? stripe_of(f, p, req) : NULL;
    if (*st == NULL && w->nranged > 0)
        f = fetch_by_req(w, p, req, st);
    return *st != NULL ? f : NULL;
}

static void *fpeer_sink(proto_conn *c, const proto_msg *head, uint64_t len)
{
    wpeer *p = proto_conn_data(c);
    if (head->type != PROTO_OBJ_DATA)
        return NULL;
    wstripe *st;
    wfetch *f = fetch_for_data(p->w, p, head->f[F_DATA_ID].id, head->req, &st);
    if (f == NULL || f->obj == NULL || head->f[F_DATA_OFF].u != st->upto ||
        head->f[F_DATA_TOTAL].u != f->src_size || len > st->end - st->upto)
        return NULL; /* fpeer_msg deals with it */
    return wrk__sink_into(p->w, &p->sink_obj, f->obj, st->upto - f->src_off);
}

static bool fetch_complete(const wfetch *f)
{
    for (uint32_t k = 0; k < f->nstripes; k++)
        if (f->st[k].upto != f->st[k].end)
            return false;
    return true;
}

/* More of range st arrived: its followers, and those of the whole object if its gap-free
 * start grew, send what they can. */
static void fetch_advance(wrk *w, wfetch *f, wstripe *st)
{
    uint64_t upto = f->src_off;
    for (uint32_t k = 0; k < f->nstripes; k++) {
        upto = f->st[k].upto;
        if (upto != f->st[k].end)
            break;
    }
    bool grew = upto - f->src_off != f->received;
    f->received = upto - f->src_off;
    if (fetch_complete(f))
        return; /* fetch_done tells every follower */
    if (st->followers != NULL)
        wrk__followers_advance(w, &st->followers, false);
    if (grew && f->followers != NULL)
        wrk__followers_advance(w, &f->followers, false);
}

static void fpeer_msg_handle(wpeer *p, proto_conn *c, const proto_msg *m)
{
    wrk *w = p->w;
    wstripe *st;
    if (m->type == PROTO_ERROR) {
        wfetch *f = fetch_by_req(w, p, m->req, &st);
        char msg[256];
        proto_str(&m->f[F_ERROR_MSG], msg, sizeof msg);
        if (f != NULL) {
            spw_log(SPW_LOG_WARN, "fetch from %s failed: %s", p->addr, msg);
            stripe_start(w, f, st);
        }
        return;
    }
    if (m->type != PROTO_OBJ_DATA) {
        proto_conn_error(c, m->req, SPW_EPROTO, "unexpected %s", proto_type_name(m->type));
        return;
    }
    wfetch *f = fetch_for_data(w, p, m->f[F_DATA_ID].id, m->req, &st);
    const proto_val *data = &m->f[F_DATA_DATA];
    uint64_t off = m->f[F_DATA_OFF].u;
    if (f == NULL || f->obj == NULL)
        return; /* a fetch we gave up on: late chunks are dropped */
    if (off != st->upto || data->bin.len > st->end - st->upto ||
        m->f[F_DATA_TOTAL].u != f->src_size) {
        spw_log(SPW_LOG_WARN, "fetch from %s: chunk at %llu, expected %llu: trying elsewhere",
                p->addr, (unsigned long long)off, (unsigned long long)st->upto);
        stripe_start(w, f, st);
        return;
    }
    uint8_t *dst = ost_obj_data(f->obj) + (st->upto - f->src_off);
    if (data->bin.ptr != dst) /* else it was received in place */
        memcpy(dst, data->bin.ptr, data->bin.len);
    st->upto += data->bin.len;
    w->fetched_bytes += data->bin.len;
    fetch_advance(w, f, st);
    if (m->f[F_DATA_FLAGS].u & PROTO_CHUNK_LAST) {
        if (st->upto != st->end)
            stripe_start(w, f, st);
        else if (fetch_complete(f))
            fetch_done(w, f);
    }
}

static void fpeer_msg(proto_conn *c, const proto_msg *m)
{
    wpeer *p = proto_conn_data(c);
    p->active_ns = spw_now_ns();
    fpeer_msg_handle(p, c, m);
    wrk__sink_release(p->w, &p->sink_obj);
}

static void fpeer_close(proto_conn *c, int status)
{
    wpeer *p = proto_conn_data(c);
    wrk *w = p->w;
    wrk__sink_release(w, &p->sink_obj);
    HASH_DEL(w->peers, p);
    wfetch *f, *tmp;
    HASH_ITER(hh, w->fetches, f, tmp)
    {
        for (uint32_t k = 0; k < f->nstripes; k++) {
            if (f->st[k].peer != p)
                continue;
            f->st[k].peer = NULL;
            if (w->closing)
                continue;
            spw_log(SPW_LOG_WARN, "fetch from %s: connection %s", p->addr, spw_strerror(status));
            if (!stripe_start(w, f, &f->st[k]))
                break; /* the fetch failed and is gone */
        }
    }
    spw_free(p);
}

static const proto_conn_cbs fpeer_cbs = {
    .on_ready = fpeer_ready,
    .on_msg = fpeer_msg,
    .on_close = fpeer_close,
    .on_sink = fpeer_sink,
};

static wpeer *peer_get(wrk *w, const char *addr)
{
    wpeer *p;
    HASH_FIND_STR(w->peers, addr, p);
    if (p != NULL)
        return p;
    p = spw_calloc(SPW_MOD_WORKER, 1, sizeof *p);
    snprintf(p->addr, sizeof p->addr, "%s", addr);
    p->w = w;
    p->active_ns = spw_now_ns();
    if (proto_connect(w->ctx, addr, &fpeer_cbs, p, &p->conn) != 0) {
        spw_free(p);
        return NULL;
    }
    HASH_ADD_STR(w->peers, addr, p);
    return p;
}

/* Reads range st from its next source (a stripe from where it stopped). Returns false when it has
 * no source left: then the whole fetch failed and f is freed. */
static bool stripe_start(wrk *w, wfetch *f, wstripe *st)
{
    st->peer = NULL;
    if (f->nstripes == 1) {
        /* Unstriped, it reads the whole object (or view) again: its next source may be
         * receiving it still, and serves a follower only from the start. */
        st->upto = st->off;
        f->received = 0;
    }
    while (st->next_loc < st->nlocs) {
        const char *addr = st->locs[st->next_loc++];
        char hex[33];
        spw_log(SPW_LOG_DEBUG, "obj=%s fetching bytes %llu..%llu from %s", spw_id_hex(f->id, hex),
                (unsigned long long)st->upto, (unsigned long long)st->end, addr);
        wpeer *p = peer_get(w, addr);
        if (p == NULL)
            continue;
        st->peer = p;
        st->req = ++w->next_req;
        if (p->ready)
            fetch_send(w, f, st);
        return true;
    }
    char msg[128];
    snprintf(msg, sizeof msg, "no worker holding it could send it (%u tried)", st->nlocs);
    fetch_fail(w, f, SPW_EOBJLOST, msg);
    return false;
}

static void fetch_start(wrk *w, wfetch *f)
{
    for (uint32_t k = 0; k < f->nstripes; k++)
        if (f->st[k].upto < f->st[k].end && !stripe_start(w, f, &f->st[k]))
            return;
}

typedef struct fetch_req {
    wrk *w;
    spw_id id;
} fetch_req;

static void fetch_created(void *arg, int status, ost_obj *o)
{
    fetch_req *r = arg;
    wrk *w = r->w;
    wfetch *f;
    HASH_FIND(hh, w->fetches, &r->id, sizeof r->id, f);
    spw_free(r);
    if (f == NULL || w->closing || f->stale) {
        if (status == 0)
            ost_obj_abort(w->store, o);
        if (f != NULL && f->stale)
            fetch_free(w, f);
        return;
    }
    f->creating = false;
    if (status != 0) {
        fetch_fail(w, f, status, status == SPW_EEXIST ? "object is being written here already"
                                                      : spw_strerror(status));
        return;
    }
    f->obj = o;
    if (!f->ranged)
        wrk__unpark(w, f->id, o);
    fetch_start(w, f);
}

/* f reads its object (or view) as one range, from the sources already in st[0]. */
static void stripe_whole(wfetch *f)
{
    f->nstripes = 1;
    f->st[0].off = f->st[0].upto = f->src_off;
    f->st[0].end = f->src_off + f->size;
}

/* Copies the addresses of a RECS(loc) into st's sources, leaving out this worker's own. */
static void stripe_locs(wrk *w, wstripe *st, const proto_val *locs)
{
    for (uint32_t j = 0; locs != NULL && j < locs->arr.n && st->nlocs < WRK_MAX_LOCS; j++) {
        proto_str(&PROTO_REC(locs, j)[R_LOC_ADDR], st->locs[st->nlocs], sizeof st->locs[0]);
        if (strcmp(st->locs[st->nlocs], w->bound) != 0)
            st->nlocs++;
    }
}

/* A striped REPLICATE's ranges (RECS(stripe), nil or empty: none) into f: they must follow one
 * another from 0 to f->size, each non-empty with a source other than this worker. Returns 0 or
 * SPW_EINVAL (f's ranges then do not matter). */
static int stripes_parse(wrk *w, wfetch *f, const proto_val *v)
{
    if (v->nil || v->arr.n == 0)
        return 0;
    if (v->arr.n > WRK_MAX_STRIPES)
        return SPW_EINVAL;
    uint64_t at = 0;
    for (uint32_t k = 0; k < v->arr.n; k++) {
        const proto_val *r = PROTO_REC(v, k);
        wstripe *st = &f->st[k];
        st->off = st->upto = r[R_STRIPE_OFF].u;
        st->end = st->off + r[R_STRIPE_LEN].u;
        stripe_locs(w, st, &r[R_STRIPE_LOCS]);
        if (st->off != at || st->end <= st->off || st->end > f->size || st->nlocs == 0)
            return SPW_EINVAL;
        at = st->end;
    }
    f->nstripes = v->arr.n;
    return at == f->size ? 0 : SPW_EINVAL;
}

spw_id wrk__view_id(spw_id id, uint64_t off, uint64_t len)
{
    uint64_t key[4] = {id.hi, id.lo, off, len};
    XXH128_hash_t h = XXH3_128bits_withSeed(key, sizeof key, WRK_VIEW_ID_SEED);
    return (spw_id){h.high64, h.low64};
}

/* Whether argument wa is a strict part of its object: fetched as those bytes only. */
static bool strict_view(const warg *wa)
{
    return wa->kind == PROTO_ARG_VIEW && wa->len > 0 && wa->len < wa->objsize;
}

void wrk__fetch(wrk *w, wtask *t, uint32_t arg)
{
    warg *wa = &t->args[arg];
    /* A strict part of an object: only those bytes, under an id of their own. */
    bool ranged = strict_view(wa);
    spw_id key = ranged ? wrk__view_id(wa->id, wa->off, wa->len) : wa->id;
    wfetch *f;
    HASH_FIND(hh, w->fetches, &key, sizeof key, f);
    if (f != NULL && f->stale) {
        /* Given up (its copy goes once created): nobody would answer a waiter. */
        wrk__input_ready(w, t, arg, SPW_EOBJLOST, "its copy here is being dropped");
        return;
    }
    if (f == NULL) {
        if (wa->nlocs == 0) {
            wrk__input_ready(w, t, arg, SPW_EOBJLOST, "no worker holds a copy");
            return;
        }
        f = spw_calloc(SPW_MOD_WORKER, 1, sizeof *f);
        f->id = key;
        f->src = wa->id;
        f->ranged = ranged;
        f->src_off = ranged ? wa->off : 0;
        f->src_size = wa->objsize;
        f->size = ranged ? wa->len : wa->objsize;
        w->nranged += ranged;
        stripe_whole(f);
        f->st[0].nlocs = wa->nlocs;
        memcpy(f->st[0].locs, wa->locs, sizeof f->st[0].locs);
        f->creating = true;
        HASH_ADD(hh, w->fetches, id, sizeof f->id, f);
        fwait *x = spw_calloc(SPW_MOD_WORKER, 1, sizeof *x);
        x->t = t;
        x->arg = arg;
        LL_PREPEND(f->waiters, x);
        fetch_req *r = spw_malloc(SPW_MOD_WORKER, sizeof *r);
        *r = (fetch_req){w, key};
        ost_obj_create_async(w->store, key, f->size, fetch_created, r);
        return;
    }
    fwait *x = spw_calloc(SPW_MOD_WORKER, 1, sizeof *x);
    x->t = t;
    x->arg = arg;
    LL_PREPEND(f->waiters, x);
}

/* Starts a fetch of the whole object id (size bytes) from st's sources that no task waits on
 * yet: for a plugin (its room waited for, spilling if need be), or ahead of a task into o, room
 * that was free. */
static void fetch_whole(wrk *w, spw_id id, uint64_t size, const wstripe *st, bool plugin,
                        ost_obj *o)
{
    wfetch *f = spw_calloc(SPW_MOD_WORKER, 1, sizeof *f);
    f->id = id;
    f->src = id; /* the whole object, from offset 0 */
    f->src_size = size;
    f->size = size;
    f->st[0] = *st;
    stripe_whole(f);
    f->plugin = plugin;
    f->ahead = o != NULL;
    HASH_ADD(hh, w->fetches, id, sizeof f->id, f);
    if (o != NULL) {
        f->obj = o;
        wrk__unpark(w, id, o);
        fetch_start(w, f);
        return;
    }
    f->creating = true;
    fetch_req *r = spw_malloc(SPW_MOD_WORKER, sizeof *r);
    *r = (fetch_req){w, id};
    ost_obj_create_async(w->store, id, size, fetch_created, r);
}

void wrk__fetch_plugin(wrk *w, spw_id id, uint64_t size, const proto_val *locs)
{
    wfetch *f;
    HASH_FIND(hh, w->fetches, &id, sizeof id, f);
    if (f != NULL && !f->stale) {
        f->plugin = true; /* a task's input already: the plugin hears how it ends too */
        return;
    }
    wstripe st = {0};
    stripe_locs(w, &st, locs);
    if (f != NULL || st.nlocs == 0) {
        wrk__plugin_fetched(w, id, SPW_EOBJLOST,
                            f != NULL ? "its copy here is being dropped" : "no worker holds it");
        return;
    }
    fetch_whole(w, id, size, &st, true, NULL);
}

void wrk__fetch_ahead(wrk *w, const warg *wa)
{
    if (wa->kind == PROTO_ARG_INLINE || wa->local || wa->nlocs == 0 || strict_view(wa))
        return; /* a strict view is fetched as its range, when its task runs */
    wfetch *f;
    HASH_FIND(hh, w->fetches, &wa->id, sizeof wa->id, f);
    if (f != NULL || ost_obj_find(w->store, wa->id) != NULL)
        return;
    /* Only into room free now: making room would spill what others need as soon (the copies
     * fetched ahead before it, among them); without it, the task fetches it when admitted. */
    ost_obj *o;
    if (ost_obj_create(w->store, wa->id, wa->objsize, &o) != 0)
        return;
    wstripe st = {0};
    st.nlocs = wa->nlocs;
    memcpy(st.locs, wa->locs, sizeof st.locs);
    fetch_whole(w, wa->id, wa->objsize, &st, false, o);
}

void wrk__peers_close(wrk *w)
{
    wfetch *f, *tmp;
    HASH_ITER(hh, w->fetches, f, tmp)
    {
        if (f->obj != NULL) {
            ost_obj_abort(w->store, f->obj);
            f->obj = NULL;
        }
        fetch_free(w, f);
    }
}

/* REPLICATE: take a copy for a broadcast. No task waits for it; the scheduler hears OBJ_ADDED,
 * or an ERROR carrying its request id. */
void wrk__replicate(wrk *w, const proto_msg *m)
{
    spw_id id = m->f[F_REPL_ID].id;
    ost_obj *o = ost_obj_find(w->store, id);
    if (o != NULL && ost_obj_state(o) == OST_SEALED) {
        wrk__sched_obj_added(w, id, ost_obj_size(o));
        return;
    }
    wfetch *f;
    HASH_FIND(hh, w->fetches, &id, sizeof id, f);
    if (f != NULL && f->stale) {
        /* Given up (its copy goes once created, answering nobody), as in wrk__fetch. */
        char hex[33];
        proto_conn_error(w->sched, m->req, SPW_EOBJLOST, "obj=%s: its copy here is being dropped",
                         spw_id_hex(id, hex));
        return;
    }
    if (f == NULL) {
        const proto_val *locs = &m->f[F_REPL_LOCS];
        if (locs->arr.n == 0 || m->f[F_REPL_SIZE].u == 0) {
            proto_conn_error(w->sched, m->req, SPW_EINVAL, "replicate needs a size and a source");
            return;
        }
        f = spw_calloc(SPW_MOD_WORKER, 1, sizeof *f);
        f->id = f->src = id;
        f->size = f->src_size = m->f[F_REPL_SIZE].u;
        int rc = stripes_parse(w, f, &m->f[F_REPL_STRIPES]);
        if (rc != 0) {
            spw_free(f);
            proto_conn_error(w->sched, m->req, rc,
                             "replicate: its ranges must cover the object in order, each with a "
                             "source (at most %u ranges)",
                             WRK_MAX_STRIPES);
            return;
        }
        if (f->nstripes == 0) {
            stripe_locs(w, &f->st[0], locs);
            stripe_whole(f);
        }
        f->creating = true;
        HASH_ADD(hh, w->fetches, id, sizeof f->id, f);
        fetch_req *r = spw_malloc(SPW_MOD_WORKER, sizeof *r);
        *r = (fetch_req){w, id};
        spw_buf_append(&f->repl, &m->req, sizeof m->req);
        ost_obj_create_async(w->store, id, f->size, fetch_created, r);
        return;
    }
    spw_buf_append(&f->repl, &m->req, sizeof m->req);
}

void wrk__peers_check(wrk *w)
{
    uint64_t now = spw_now_ns();
    wfetch *f, *ftmp;
    HASH_ITER(hh, w->fetches, f, ftmp)
    {
        for (uint32_t k = 0; k < f->nstripes; k++) {
            wpeer *p = f->st[k].peer;
            if (p == NULL || p->conn == NULL || proto_conn_is_closing(p->conn) ||
                w->opts.fetch_stall_ms == 0 ||
                now - p->active_ns < (uint64_t)w->opts.fetch_stall_ms * 1000000ULL)
                continue;
            spw_log(SPW_LOG_WARN, "fetch from %s: nothing heard for %u ms: giving up on it",
                    p->addr, w->opts.fetch_stall_ms);
            /* Its fetches move on in fpeer_close, which may free f: look no further in it. */
            proto_conn_close(p->conn, SPW_ETIMEDOUT);
            break;
        }
    }
}

void wrk__fetches_drop(wrk *w)
{
    wfetch *f, *tmp;
    HASH_ITER(hh, w->fetches, f, tmp)
    {
        if (f->stale)
            continue;
        if (!f->creating) {
            fetch_fail(w, f, SPW_ECLOSED, "the worker lost its scheduler");
            continue;
        }
        /* Waiting for room: its allocation callback frees it; its waiters hear now. */
        f->stale = true;
        if (f->plugin)
            wrk__plugin_fetched(w, f->id, SPW_ECLOSED, "the worker lost its scheduler");
        followers_fail(f, SPW_ECLOSED, "the worker lost its scheduler");
        fwait *waiters = f->waiters, *x, *xtmp;
        f->waiters = NULL;
        LL_FOREACH_SAFE(waiters, x, xtmp)
        {
            wrk__input_ready(w, x->t, x->arg, SPW_ECLOSED, "the worker lost its scheduler");
            spw_free(x);
        }
    }
}

/* The scheduler re-makes an object here (its holders were dropped, lineage) while a task here
 * still fetches it from them: that fetch can only fail, late, and its half-written copy holds
 * the id the new output needs (the task making it would fail with SPW_EEXIST). It stops now;
 * its waiters get SPW_EOBJLOST, which the scheduler turns into a retry once the new copy is
 * there. A fetch still waiting for room is dropped once created, as fetch_created does. */
void wrk__fetch_supersede(wrk *w, spw_id id)
{
    static const char msg[] = "being made again on this worker";
    wfetch *f;
    HASH_FIND(hh, w->fetches, &id, sizeof id, f);
    if (f == NULL || f->stale)
        return;
    if (!f->creating) {
        fetch_fail(w, f, SPW_EOBJLOST, msg);
        return;
    }
    f->stale = true;
    followers_fail(f, SPW_EOBJLOST, msg);
    repl_answer(w, f, SPW_EOBJLOST, msg);
    fwait *waiters = f->waiters, *x, *tmp;
    f->waiters = NULL;
    LL_FOREACH_SAFE(waiters, x, tmp)
    {
        wrk__input_ready(w, x->t, x->arg, SPW_EOBJLOST, msg);
        spw_free(x);
    }
}

void wrk__fetch_cancel(wrk *w, spw_id id)
{
    wfetch *f;
    HASH_FIND(hh, w->fetches, &id, sizeof id, f);
    if (f != NULL && !f->creating)
        fetch_fail(w, f, SPW_ENOOBJ, "released while being copied here");
}
