/*
 * Uploaded plugins: the scheduler's records of them, and who may upload.
 *
 * A client puts a plugin's bytes as an object (id: proto_plugin_obj_id of their BLAKE2b-256
 * hash) and adds it (PLUGIN_ADD); a worker that runs uploaded plugins loads it in a process of
 * its own (PLUGIN_CHECK), and on its PLUGIN_CHECKED the plugin is READY and its adders hear it.
 * A record holds one PLUGIN reference on its object while a client (PLUGIN_ADD until
 * PLUGIN_RELEASE or its close) or a graph with tasks left naming "NAME@PREFIX" of it does.
 * Workers ask where the bytes are (PLUGIN_GET) when a task first needs them; placement only
 * keeps such tasks off workers whose WORKER_PLUGINS said they run no uploads (place.c).
 * Invariants: a record's clients equals the sum of its holders' counts; a record holds exactly
 * one PLUGIN reference, on its object, and an object's PLUGIN references are the records naming
 * it; a CHECKING record has a check under way or adders waiting; no record has neither a
 * client, a graph nor an adder waiting; s->upload_workers counts the workers runs_uploads.
 */
#include <stdio.h>
#include <string.h>

#include "sched_int.h"

void sched__local_listen(sched *s, const proto_conn_cbs *cbs)
{
    const char *colon = strrchr(s->listen, ':');
    if (colon == NULL)
        return;
    char name[sizeof s->local_name];
    snprintf(name, sizeof name, "@spillway-scheduler-%s", colon + 1);
    int rc = proto_listen_unix(s->ctx, name, cbs, NULL, NULL);
    if (rc != 0) {
        spw_log(SPW_LOG_WARN, "no local socket %s (%s): uploads need a secret", name,
                spw_strerror(rc));
        return;
    }
    memcpy(s->local_name, name, sizeof name);
    spw_log(SPW_LOG_INFO, "local socket unix:%s (programs of this user on this host)", name);
}

static sched_plugin *find_prefix(sched *s, const char *prefix)
{
    sched_plugin *p;
    HASH_FIND(hh, s->plugins, prefix, PROTO_PLUGIN_PREFIX_HEX, p);
    return p;
}

static void plugin_free(sched *s, sched_plugin *p)
{
    sched__jnl_plugin_gone(s, p);
    HASH_DEL(s->plugins, p);
    if (s->plugin_last == p)
        s->plugin_last = NULL;
    spw_log(SPW_LOG_INFO, "plugin=%s hash=%s released", p->name, p->hex);
    sched_obj *o = p->obj;
    spw_free(p->holders);
    spw_free(p->waiters);
    spw_free(p);
    if (o != NULL)
        sched__unref(s, o, REF_PLUGIN);
}

static void maybe_free(sched *s, sched_plugin *p)
{
    if (p->clients == 0 && p->graphs == 0 && p->nwaiters == 0)
        plugin_free(s, p);
}

static void holder_add(sched_plugin *p, uint64_t session)
{
    p->clients++;
    for (uint32_t i = 0; i < p->nholders; i++)
        if (p->holders[i].session == session) {
            p->holders[i].count++;
            return;
        }
    if (p->nholders == p->capholders) {
        p->capholders = p->capholders ? p->capholders * 2 : 2;
        p->holders = spw_realloc(SPW_MOD_SCHED, p->holders, p->capholders * sizeof *p->holders);
    }
    p->holders[p->nholders++] = (sched_plugin_holder){session, 1};
}

static sched_session *session_find(sched *s, uint64_t id)
{
    sched_session *ss;
    HASH_FIND(hh, s->sessions, &id, sizeof id, ss);
    return ss;
}

/* The check ended: every adder waiting hears status (and takes its reference on success). */
static void answer_waiters(sched *s, sched_plugin *p, int status, const char *msg)
{
    for (uint32_t i = 0; i < p->nwaiters; i++) {
        sched_session *ss = session_find(s, p->waiters[i].session);
        if (ss == NULL)
            continue;
        if (status == 0)
            holder_add(p, ss->id);
        proto_send_plugin_checked(ss->conn, p->waiters[i].req,
                                  &(proto_plugin_checked_msg){
                                      .hash = {p->hash, PROTO_PLUGIN_HASH_LEN},
                                      .status = status,
                                      .msg = msg,
                                      .name = p->name,
                                      .fns = p->nfns});
    }
    p->nwaiters = 0;
}

static void check_fail(sched *s, sched_plugin *p, int status, const char *msg)
{
    spw_log(SPW_LOG_WARN, "plugin=%s hash=%s refused: %s", p->name, p->hex, msg);
    p->check_req = 0;
    answer_waiters(s, p, status, msg);
    if (p->state == PROTO_PLUGIN_CHECKING) {
        p->clients = p->graphs = 0; /* none: it never was READY */
        plugin_free(s, p);
    }
}

/* Asks a worker that runs uploaded plugins to load it: one holding its bytes if it can, else
 * one that fetches them. */
static void check_start(sched *s, sched_plugin *p)
{
    sched_worker *w = NULL;
    for (uint32_t i = 0; p->obj != NULL && i < p->obj->nlocs && w == NULL; i++) {
        w = sched__worker_by_id(s, p->obj->locs[i]);
        if (w != NULL && !w->runs_uploads)
            w = NULL;
    }
    for (uint32_t i = 0; w == NULL && i < s->nworkers; i++)
        if (s->workers[i]->runs_uploads)
            w = s->workers[i];
    if (p->obj == NULL || p->obj->nlocs == 0) {
        check_fail(s, p, SPW_EOBJLOST, "no connected worker holds its bytes");
        return;
    }
    bool unknown = false;
    for (uint32_t i = 0; w == NULL && i < s->nworkers; i++)
        unknown = unknown || !s->workers[i]->plugins_known;
    if (w == NULL && unknown) {
        /* Workers that just joined have not said yet whether they run uploads. */
        p->check_req = 0;
        p->check_deferred = true;
        return;
    }
    p->check_deferred = false;
    if (w == NULL) {
        check_fail(s, p, SPW_ENOWORKER,
                   "no connected worker runs uploaded plugins (all have --allow-plugin-upload "
                   "no)");
        return;
    }
    p->check_req = ++s->plugin_req;
    p->check_worker = w->id;
    sched_locs l;
    proto_send_plugin_check(w->conn, p->check_req,
                            &(proto_plugin_check_msg){.hash = {p->hash, PROTO_PLUGIN_HASH_LEN},
                                                      .name = p->name,
                                                      .size = p->size,
                                                      .obj = p->obj->id,
                                                      .locs = sched__locs(&l, s, p->obj)});
}

void sched__plugin_add(sched *s, sched_session *ss, const proto_msg *m)
{
    const uint8_t *hash = m->f[F_PADD_HASH].bin.ptr;
    uint64_t size = m->f[F_PADD_SIZE].u;
    char hex[PROTO_PLUGIN_HEX_LEN + 1];
    proto_plugin_hex(hash, hex);
    if (!s->opts.allow_plugin_upload) {
        proto_conn_error(ss->conn, m->req, SPW_EPERM,
                         "plugin %s refused: uploads are off (--allow-plugin-upload no)", hex);
        return;
    }
    /* Workers run as the scheduler's user (or one it trusts as much), so a program of that
     * user on this host, which could start a worker of its own with any --plugin, gains
     * nothing by uploading: the credential check of the local socket (SO_PEERCRED) stands in
     * for the secret. */
    if (s->opts.secret_len == 0 && !proto_conn_peer_same_uid(ss->conn)) {
        proto_conn_error(ss->conn, m->req, SPW_EPERM,
                         "plugin %s refused: uploading a plugin runs code on the workers, "
                         "allowed only in a cluster with a secret (--secret-file), or to the "
                         "scheduler's own user over its local socket (unix:%s)",
                         hex, s->local_name[0] != '\0' ? s->local_name : "none");
        return;
    }
    if (size == 0 || (s->opts.plugin_max_size != 0 && size > s->opts.plugin_max_size)) {
        proto_conn_error(ss->conn, m->req, size == 0 ? SPW_EINVAL : SPW_ETOOBIG,
                         "plugin %s of %llu bytes refused: over --plugin-max-size %llu", hex,
                         (unsigned long long)size, (unsigned long long)s->opts.plugin_max_size);
        return;
    }
    sched_plugin *p = find_prefix(s, hex);
    if (p != NULL && memcmp(p->hash, hash, PROTO_PLUGIN_HASH_LEN) != 0) {
        proto_conn_error(ss->conn, m->req, SPW_EDUPLICATE,
                         "plugin %s refused: another plugin (%s) has the same first %u hex "
                         "digits",
                         hex, p->hex, PROTO_PLUGIN_PREFIX_HEX);
        return;
    }
    if (p != NULL && p->state == PROTO_PLUGIN_READY) {
        holder_add(p, ss->id);
        sched__jnl_plugin(s, p);
        proto_send_plugin_checked(ss->conn, m->req,
                                  &(proto_plugin_checked_msg){
                                      .hash = {p->hash, PROTO_PLUGIN_HASH_LEN},
                                      .name = p->name,
                                      .fns = p->nfns});
        return;
    }
    if (p == NULL) {
        spw_id id = proto_plugin_obj_id(hash);
        sched_obj *o = sched__obj_find(s, id);
        if (o == NULL || o->state != OBJ_READY || o->size != size || o->nlocs == 0) {
            char oh[33];
            proto_conn_error(ss->conn, m->req, SPW_ENOOBJ,
                             "plugin %s: its bytes are not stored (put obj=%s of %llu bytes "
                             "first)",
                             hex, spw_id_hex(id, oh), (unsigned long long)size);
            return;
        }
        p = spw_calloc(SPW_MOD_SCHED, 1, sizeof *p);
        memcpy(p->hash, hash, PROTO_PLUGIN_HASH_LEN);
        memcpy(p->hex, hex, sizeof hex);
        memcpy(p->prefix, hex, PROTO_PLUGIN_PREFIX_HEX);
        proto_str(&m->f[F_PADD_NAME], p->name, sizeof p->name);
        p->size = size;
        p->obj = o;
        p->state = PROTO_PLUGIN_CHECKING;
        sched__ref(s, o, REF_PLUGIN);
        HASH_ADD(hh, s->plugins, prefix, PROTO_PLUGIN_PREFIX_HEX, p);
    }
    if (p->nwaiters == p->capwaiters) {
        p->capwaiters = p->capwaiters ? p->capwaiters * 2 : 2;
        p->waiters = spw_realloc(SPW_MOD_SCHED, p->waiters, p->capwaiters * sizeof *p->waiters);
    }
    p->waiters[p->nwaiters++] = (sched_plugin_waiter){ss->id, m->req};
    if (p->check_req == 0)
        check_start(s, p);
}

sched_plugin *sched__plugin_restore(sched *s, const uint8_t *hash, const char *name, uint64_t size,
                                   uint32_t nfns)
{
    sched_obj *o = sched__obj_find(s, proto_plugin_obj_id(hash));
    if (o == NULL || o->size != size)
        return NULL;
    sched_plugin *p = spw_calloc(SPW_MOD_SCHED, 1, sizeof *p);
    memcpy(p->hash, hash, PROTO_PLUGIN_HASH_LEN);
    proto_plugin_hex(hash, p->hex);
    memcpy(p->prefix, p->hex, PROTO_PLUGIN_PREFIX_HEX);
    snprintf(p->name, sizeof p->name, "%s", name);
    p->size = size;
    p->nfns = nfns;
    p->obj = o;
    p->state = PROTO_PLUGIN_READY;
    sched__ref(s, o, REF_PLUGIN);
    HASH_ADD(hh, s->plugins, prefix, PROTO_PLUGIN_PREFIX_HEX, p);
    return p;
}

void sched__plugins_restored(sched *s)
{
    sched_plugin *p, *tmp;
    HASH_ITER(hh, s->plugins, p, tmp)
    maybe_free(s, p);
}

void sched__plugin_restore_holder(sched_plugin *p, uint64_t session, uint32_t count)
{
    while (count-- > 0)
        holder_add(p, session);
}

void sched__plugin_checked(sched *s, sched_worker *w, const proto_msg *m)
{
    sched_plugin *p, *tmp;
    HASH_ITER(hh, s->plugins, p, tmp)
    {
        if (p->check_req != m->req || p->check_worker != w->id)
            continue;
        char msg[PROTO_MAX_STR / 2];
        proto_str(&m->f[F_PCHK_MSG], msg, sizeof msg);
        int status = proto_status(m->f[F_PCHK_STATUS].i);
        if (status != 0) {
            char full[PROTO_MAX_STR];
            snprintf(full, sizeof full, "plugin %s (%s) refused by worker %s: %s", p->name,
                     p->hex, w->name, msg);
            check_fail(s, p, status, full);
            return;
        }
        p->check_req = 0;
        p->state = PROTO_PLUGIN_READY;
        proto_str(&m->f[F_PCHK_NAME], p->name, sizeof p->name);
        p->nfns = (uint32_t)m->f[F_PCHK_FNS].u;
        spw_log(SPW_LOG_NOTICE, "plugin=%s hash=%s size=%llu functions=%u added", p->name, p->hex,
                (unsigned long long)p->size, p->nfns);
        answer_waiters(s, p, 0, "");
        sched__jnl_plugin(s, p);
        maybe_free(s, p); /* its adders may all be gone */
        return;
    }
}

void sched__plugin_release(sched *s, sched_session *ss, const proto_msg *m)
{
    char hex[PROTO_PLUGIN_HEX_LEN + 1];
    proto_plugin_hex(m->f[F_PREL_HASH].bin.ptr, hex);
    sched_plugin *p = find_prefix(s, hex);
    for (uint32_t i = 0; p != NULL && i < p->nholders; i++) {
        if (p->holders[i].session != ss->id)
            continue;
        p->clients--;
        if (--p->holders[i].count == 0)
            p->holders[i] = p->holders[--p->nholders];
        sched__jnl_plugin(s, p);
        proto_send_ok(ss->conn, m->req, &(proto_ok_msg){.value = 0});
        maybe_free(s, p);
        return;
    }
    proto_conn_error(ss->conn, m->req, SPW_ENOTHELD, "plugin %s is not held by this client", hex);
}

void sched__plugins_session_gone(sched *s, sched_session *ss)
{
    sched_plugin *p, *tmp;
    HASH_ITER(hh, s->plugins, p, tmp)
    {
        bool held = false;
        for (uint32_t i = 0; i < p->nholders; i++)
            if (p->holders[i].session == ss->id) {
                p->clients -= p->holders[i].count;
                p->holders[i--] = p->holders[--p->nholders];
                held = true;
            }
        if (held)
            sched__jnl_plugin(s, p);
        for (uint32_t i = 0; i < p->nwaiters; i++)
            if (p->waiters[i].session == ss->id)
                p->waiters[i--] = p->waiters[--p->nwaiters];
        if (p->state == PROTO_PLUGIN_READY || p->check_req == 0)
            maybe_free(s, p); /* a check under way settles it when it ends */
    }
}

/* Checks that waited for workers to say whether they run uploads: started, or refused once
 * every worker has said. */
static void plugins_deferred(sched *s)
{
    sched_plugin *p, *tmp;
    HASH_ITER(hh, s->plugins, p, tmp)
    if (p->check_deferred)
        check_start(s, p);
}

void sched__plugins_worker_gone(sched *s, sched_worker *w)
{
    if (w->runs_uploads)
        s->upload_workers--;
    w->runs_uploads = false;
    sched_plugin *p, *tmp;
    HASH_ITER(hh, s->plugins, p, tmp)
    if (p->check_req != 0 && p->check_worker == w->id) {
        if (p->nwaiters == 0) {
            p->check_req = 0;
            maybe_free(s, p);
        } else {
            check_start(s, p); /* another copy, or a refusal */
        }
    }
    w->plugins_known = true; /* gone: it will not say */
    plugins_deferred(s);
}

int sched__plugin_for_task(sched *s, const uint8_t *fn, size_t len, sched_plugin **out, char *err,
                           size_t errlen)
{
    *out = NULL;
    if (memchr(fn, '@', len) == NULL)
        return 0;
    /* A graph's tasks name one function many times over: the last answer, without parsing the
     * name or looking the prefix up. */
    if (s->plugin_last != NULL && s->plugin_last_len == len &&
        memcmp(s->plugin_last_fn, fn, len) == 0) {
        *out = s->plugin_last;
        return 0;
    }
    const char *prefix = proto_plugin_fn_prefix((const char *)fn, len);
    if (prefix == NULL)
        return 0; /* not the form of an uploaded plugin's function: a --plugin one, maybe */
    sched_plugin *p = find_prefix(s, prefix);
    if (p == NULL || p->state != PROTO_PLUGIN_READY) {
        snprintf(err, errlen, "task function '%.*s': no plugin @%s is added (add it with "
                              "spillway_plugin_add; a released one is gone)",
                 (int)len, (const char *)fn, prefix);
        return SPW_ENOFUNC;
    }
    *out = p;
    if (len <= sizeof s->plugin_last_fn) {
        s->plugin_last = p; /* READY until it goes (plugin_free forgets it) */
        memcpy(s->plugin_last_fn, fn, len);
        s->plugin_last_len = (uint32_t)len;
    }
    return 0;
}

void sched__plugin_graph_use(sched *s, sched_graph *g, sched_plugin *p)
{
    (void)s;
    for (uint32_t i = 0; i < g->nplugins; i++)
        if (g->plugins[i] == p)
            return;
    g->plugins = spw_realloc(SPW_MOD_SCHED, g->plugins, (g->nplugins + 1) * sizeof *g->plugins);
    g->plugins[g->nplugins++] = p;
    p->graphs++;
}

void sched__plugins_graph_done(sched *s, sched_graph *g)
{
    for (uint32_t i = 0; i < g->nplugins; i++) {
        g->plugins[i]->graphs--;
        maybe_free(s, g->plugins[i]);
    }
    spw_free(g->plugins);
    g->plugins = NULL;
    g->nplugins = 0;
}

void sched__plugin_get(sched *s, sched_worker *w, const proto_msg *m)
{
    char prefix[PROTO_PLUGIN_HEX_LEN + 1];
    proto_str(&m->f[F_PGET_PREFIX], prefix, sizeof prefix);
    sched_plugin *p = strlen(prefix) == PROTO_PLUGIN_PREFIX_HEX ? find_prefix(s, prefix) : NULL;
    if (p == NULL || p->state != PROTO_PLUGIN_READY) {
        proto_conn_error(w->conn, m->req, SPW_ENOFUNC, "no plugin @%s is added", prefix);
        return;
    }
    sched_locs l;
    proto_send_plugin_info(w->conn, m->req,
                           &(proto_plugin_info_msg){.hash = {p->hash, PROTO_PLUGIN_HASH_LEN},
                                                    .name = p->name,
                                                    .size = p->size,
                                                    .obj = p->obj->id,
                                                    .locs = sched__locs(&l, s, p->obj)});
}

void sched__worker_plugins(sched *s, sched_worker *w, const proto_msg *m)
{
    const proto_val *v = &m->f[F_WPLUG_PLUGINS];
    uint32_t n = v->arr.n < SCHED_WORKER_PLUGINS_MAX ? v->arr.n : SCHED_WORKER_PLUGINS_MAX;
    w->plugins = spw_realloc(SPW_MOD_SCHED, w->plugins, (n ? n : 1) * sizeof *w->plugins);
    for (uint32_t i = 0; i < n; i++) {
        const proto_val *r = PROTO_REC(v, i);
        sched_wplugin *x = &w->plugins[i];
        memcpy(x->hash, r[R_PLUG_HASH].bin.ptr, PROTO_PLUGIN_HASH_LEN);
        proto_str(&r[R_PLUG_NAME], x->name, sizeof x->name);
        x->size = r[R_PLUG_SIZE].u;
        x->uploaded = r[R_PLUG_UPLOADED].u != 0;
    }
    w->nplugins = n;
    w->plugins_known = true;
    bool runs = m->f[F_WPLUG_NO_UPLOADS].u == 0;
    if (runs != w->runs_uploads) {
        w->runs_uploads = runs;
        if (runs)
            s->upload_workers++;
        else
            s->upload_workers--;
        sched__kick(s); /* tasks of uploaded plugins may go there now */
    }
    plugins_deferred(s);
}

static void put_splug(proto_enc *e, uint32_t i, void *arg)
{
    sched_plugin **v = arg;
    const sched_plugin *p = v[i];
    proto_put_splug_rec(e, &(proto_splug_rec){.hash = {p->hash, PROTO_PLUGIN_HASH_LEN},
                                              .name = p->name,
                                              .size = p->size,
                                              .obj = p->obj->id,
                                              .state = p->state,
                                              .fns = p->nfns,
                                              .clients = p->clients,
                                              .graphs = p->graphs,
                                              .copies = p->obj->nlocs});
}

void sched__plugins_req(sched *s, sched_session *ss, const proto_msg *m)
{
    uint32_t n = HASH_COUNT(s->plugins), i = 0;
    sched_plugin **v = spw_calloc(SPW_MOD_SCHED, n ? n : 1, sizeof *v);
    sched_plugin *p, *tmp;
    HASH_ITER(hh, s->plugins, p, tmp)
    v[i++] = p;
    proto_send_plugins(ss->conn, m->req,
                       &(proto_plugins_msg){.plugins = {.n = n, .put = put_splug, .arg = v}});
    spw_free(v);
}

uint32_t sched__plugins_on(const sched *s, const sched_obj *o)
{
    uint32_t n = 0;
    const sched_plugin *p, *tmp;
    HASH_ITER(hh, s->plugins, p, tmp)
    n += p->obj == o;
    return n;
}

void sched__plugins_free_all(sched *s)
{
    sched_plugin *p, *tmp;
    HASH_ITER(hh, s->plugins, p, tmp)
    {
        p->clients = p->graphs = p->nwaiters = 0;
        plugin_free(s, p);
    }
}
