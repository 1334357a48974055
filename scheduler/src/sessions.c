/*
 * Client sessions that outlive their connection: HELLO, detaching, resuming, dropping.
 *
 * A client that says in HELLO it can resume gets a random token in WELCOME. When its
 * connection breaks (and --session-grace is not 0), its session is detached instead of dropped:
 * conn is NULL, its references and graphs stay, its LOCATE waiters go (the client asks again)
 * and whatever is sent to it meanwhile is lost (proto sends nothing to a NULL connection). A
 * HELLO naming the session with its token within the grace reattaches it: WELCOME says how many
 * of the client's frames were processed (nrecv), the client sends again those that were not,
 * and the results of its finished tasks are sent again. A session whose grace passed is dropped
 * as a closed one always was. ctl sessions, clients that cannot resume and a scheduler that is
 * closing drop at once. Everything runs on the loop's thread.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include <sodium.h>
#include <utlist.h>

#include "sched_int.h"

static uint64_t grace_ns(const sched *s)
{
    return (uint64_t)s->opts.session_grace_s * 1000000000ULL;
}

/* Whether the peer of c is certainly a process of this host: the local socket, or loopback. */
static bool peer_on_this_host(const proto_conn *c)
{
    if (proto_conn_is_local(c))
        return true;
    const char *p = proto_conn_peer(c);
    return strncmp(p, "127.", 4) == 0 || strncmp(p, "[::1]", 5) == 0;
}

/* A detached session whose client was a process of this host that has ended (killed, or gone
 * without BYE): nothing will resume it, so it is dropped at once, as the memory of a dead client
 * must not wait out the grace. A zombie (its parent has not reaped it yet) has ended too. */
static bool client_ended(const sched_session *ss)
{
    if (!ss->on_this_host || ss->pid == 0)
        return false;
    if (kill((pid_t)ss->pid, 0) != 0)
        return errno == ESRCH;
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%u/stat", ss->pid);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return false;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *close = strrchr(buf, ')'); /* the name may hold anything but ends at the last */
    return close != NULL && close[1] == ' ' && (close[2] == 'Z' || close[2] == 'X');
}

static sched_session *session_add(sched *s, uint64_t id, int role, uint32_t pid, const char *host,
                                  const char *name)
{
    sched_session *ss = spw_calloc(SPW_MOD_SCHED, 1, sizeof *ss);
    ss->id = id;
    ss->role = role;
    ss->pid = pid;
    snprintf(ss->host, sizeof ss->host, "%s", host);
    snprintf(ss->name, sizeof ss->name, "%s", name);
    HASH_ADD(hh, s->sessions, id, sizeof ss->id, ss);
    return ss;
}

sched_session *sched__session_restore(sched *s, uint64_t id, const uint8_t token[16], int role,
                                      uint32_t pid, const char *host, const char *name)
{
    sched_session *ss = session_add(s, id, role, pid, host, name);
    ss->resumable = true;
    memcpy(ss->token, token, sizeof ss->token);
    ss->drop_ns = spw_now_ns() + grace_ns(s);
    if (s->next_session < id)
        s->next_session = id;
    return ss;
}

/* The results of the session's finished tasks, again: those sent while it was detached, or
 * still on their way when its connection broke, are lost; one that comes twice replaces itself
 * at the client. */
static void results_again(sched *s, sched_session *ss)
{
    for (const sched_obj *o = ss->kept; o != NULL; o = o->knext) {
        if (o->state != OBJ_PENDING)
            sched__result_send(s, ss, o);
    }
}

/* What a session loses with its connection: its waiting LOCATEs (asked again after a resume)
 * and a memory query (ctl's only). */
static void forget_conn(sched *s, sched_session *ss)
{
    sched_waiter *w, *wtmp;
    DL_FOREACH_SAFE2(ss->waiters, w, wtmp, snext) sched__waiter_free(s, w);
    sched__memory_session_gone(s, ss);
    ss->conn = NULL;
}

/* HELLO names session id with token: the session it names, or NULL (unknown, or a token that
 * does not match: compared in constant time). A session whose old connection still looks alive
 * (its client saw the break first) is taken from it: that connection closes unheard. */
static sched_session *resumable(sched *s, uint64_t id, const proto_val *token)
{
    sched_session *ss;
    HASH_FIND(hh, s->sessions, &id, sizeof id, ss);
    if (ss == NULL || !ss->resumable || token->nil || token->bin.len != PROTO_TOKEN_LEN ||
        sodium_memcmp(ss->token, token->bin.ptr, PROTO_TOKEN_LEN) != 0)
        return NULL;
    if (ss->conn != NULL) {
        proto_conn *old = ss->conn;
        conn_tag *tag = proto_conn_data(old);
        tag->kind = 0; /* its frames and its close no longer reach the session */
        forget_conn(s, ss);
        proto_conn_close(old, SPW_ECLOSED);
    }
    return ss;
}

sched_session *sched__session_hello(sched *s, proto_conn *c, const proto_msg *hello, int role,
                                    proto_welcome *wel)
{
    uint32_t pid = (uint32_t)hello->f[F_HELLO_PID].u;
    char host[sizeof((sched_session *)0)->host], name[sizeof((sched_session *)0)->name];
    proto_str(&hello->f[F_HELLO_HOST], host, sizeof host);
    proto_str(&hello->f[F_HELLO_NAME], name, sizeof name);
    bool can = role == PROTO_ROLE_CLIENT && !hello->f[F_HELLO_RESUME].nil;
    uint64_t want = can ? hello->f[F_HELLO_RESUME].u : 0;
    sched_session *ss = want != 0 ? resumable(s, want, &hello->f[F_HELLO_TOKEN]) : NULL;
    if (ss != NULL) {
        ss->conn = c;
        ss->pid = pid;
        ss->on_this_host = peer_on_this_host(c);
        ss->resumed = true;
        ss->results_due = true;
        ss->drop_ns = 0;
        wel->session = ss->id;
        wel->resumed = true;
        wel->nrecv = ss->nrecv;
        spw_log(SPW_LOG_NOTICE, "session=%llu pid=%u host=%s resumed (%llu references)",
                (unsigned long long)ss->id, ss->pid, ss->host, (unsigned long long)ss->nrefs);
    } else {
        if (want != 0)
            spw_log(SPW_LOG_NOTICE,
                    "session=%llu cannot be resumed (unknown, gone or a wrong token): pid=%u "
                    "host=%s gets a new session",
                    (unsigned long long)want, pid, host);
        ss = session_add(s, ++s->next_session, role, pid, host, name);
        sched__jnl_session_id(s, ss->id);
        ss->conn = c;
        ss->on_this_host = peer_on_this_host(c);
        ss->resumable = can;
        if (can)
            randombytes_buf(ss->token, sizeof ss->token);
        sched__jnl_session(s, ss); /* token and all */
        wel->session = ss->id;
        spw_log(SPW_LOG_INFO, "session=%llu %s pid=%u host=%s connected",
                (unsigned long long)ss->id, proto_role_name(role), ss->pid, ss->host);
    }
    sched__jnl_gate(s, c);
    if (ss->resumable) {
        wel->has_token = true;
        memcpy(wel->token, ss->token, sizeof wel->token);
    }
    return ss;
}

/* The full drop: what a session holds goes, and so does the session. */
static void drop(sched *s, sched_session *ss)
{
    sched__jnl_session_gone(s, ss);
    sched__memory_session_gone(s, ss);
    sched__broadcast_session_gone(s, ss);
    sched__drain_session_gone(s, ss);
    sched__plugins_session_gone(s, ss);
    sched__session_drop_all(s, ss);
    HASH_DEL(s->sessions, ss);
    if (s->last_sess == ss)
        s->last_sess = NULL;
    spw_free(ss);
}

void sched__session_closed(sched *s, sched_session *ss, int status)
{
    ss->conn = NULL;
    if (!ss->resumable || s->opts.session_grace_s == 0 || s->closing || client_ended(ss)) {
        spw_log(SPW_LOG_INFO, "session=%llu closed: %s, dropping %llu references",
                (unsigned long long)ss->id, spw_strerror(status), (unsigned long long)ss->nrefs);
        drop(s, ss);
        return;
    }
    forget_conn(s, ss);
    ss->drop_ns = spw_now_ns() + grace_ns(s);
    spw_log(SPW_LOG_NOTICE,
            "session=%llu pid=%u host=%s lost its connection (%s): detached with %llu "
            "references, dropped unless it resumes in %u s",
            (unsigned long long)ss->id, ss->pid, ss->host, spw_strerror(status),
            (unsigned long long)ss->nrefs, s->opts.session_grace_s);
}

void sched__sessions_tick(sched *s)
{
    uint64_t now = spw_now_ns();
    sched_session *ss, *tmp;
    HASH_ITER(hh, s->sessions, ss, tmp)
    {
        if (ss->results_due && ss->conn != NULL && !proto_conn_is_closing(ss->conn)) {
            ss->results_due = false;
            results_again(s, ss);
        }
        if (ss->conn != NULL)
            continue;
        if (now < ss->drop_ns && client_ended(ss)) {
            spw_log(SPW_LOG_NOTICE,
                    "session=%llu pid=%u host=%s: its process has ended: dropping %llu references",
                    (unsigned long long)ss->id, ss->pid, ss->host, (unsigned long long)ss->nrefs);
            drop(s, ss);
            continue;
        }
        if (now < ss->drop_ns)
            continue;
        spw_log(SPW_LOG_NOTICE,
                "session=%llu pid=%u host=%s did not resume within --session-grace %u s: "
                "dropping %llu references",
                (unsigned long long)ss->id, ss->pid, ss->host, s->opts.session_grace_s,
                (unsigned long long)ss->nrefs);
        drop(s, ss);
    }
}

void sched__sessions_detached_free(sched *s)
{
    sched_session *ss, *tmp;
    HASH_ITER(hh, s->sessions, ss, tmp)
    {
        if (ss->conn == NULL)
            drop(s, ss);
    }
}

uint64_t sched__session_drop_ms(const sched_session *ss)
{
    if (ss->conn != NULL)
        return 0;
    uint64_t now = spw_now_ns();
    return ss->drop_ns > now ? (ss->drop_ns - now) / 1000000ULL + 1 : 1;
}

/* A PUT_PLACE already done: the same placement, and no second reference. */
static bool put_place_again(sched *s, sched_session *ss, const proto_msg *m)
{
    spw_id id = m->f[F_PUTP_ID].id;
    sched_obj *o = sched__obj_find(s, id);
    if (o == NULL || o->size != m->f[F_PUTP_SIZE].u)
        return false;
    bool may_chunk = (m->f[F_PUTP_FLAGS].u & PROTO_PUT_MAY_CHUNK) != 0;
    if (o->is_chunk) {
        sched_obj *p = sched__obj_find(s, spw_id_output_task(id));
        if (p == NULL || p->origin->owner != ss->id || o->state != OBJ_PENDING)
            return false;
        sched__put_target_send(ss, m->req, id, sched__worker_by_id(s, o->put_worker), 0, 0, true);
        return true;
    }
    sched_ref *r;
    HASH_FIND(hh, ss->refs, &id, sizeof id, r);
    if (r == NULL || r->count[REF_CLIENT] == 0)
        return false;
    if (o->chunked) {
        sched__put_target_send(ss, m->req, id, NULL, 0, 1ULL << o->chunks.shift, false);
        return true;
    }
    const sched_worker *w =
        o->nlocs > 0 ? sched__worker_by_id(s, o->locs[0]) : sched__worker_by_id(s, o->put_worker);
    if (w == NULL)
        return false;
    sched__put_target_send(ss, m->req, id, w, o->state == OBJ_READY, 0, !may_chunk);
    return true;
}

/* The last frame of a SUBMIT already received whole: its acknowledgement again. */
static bool submit_again(sched *s, sched_session *ss, const proto_msg *m)
{
    uint64_t gid = m->f[F_SUBMIT_GRAPH].u;
    if (gid == 0 || gid == ss->graph || !(m->f[F_SUBMIT_FLAGS].u & PROTO_SUBMIT_END))
        return false;
    for (const sched_graph *g = s->graphs; g != NULL; g = g->gnext) {
        if (g->session == ss->id && g->gid == gid && g->submitted) {
            proto_send_submit_ack(ss->conn, m->req,
                                  &(proto_submit_ack_msg){.graph = gid, .ntasks = g->total});
            return true;
        }
    }
    return false;
}

bool sched__session_replay(sched *s, sched_session *ss, const proto_msg *m)
{
    if (ss->results_due) {
        ss->results_due = false;
        results_again(s, ss);
    }
    if (!ss->resumed)
        return false;
    ss->resumed = false; /* only the first frame after a resume can repeat one */
    switch (m->type) {
    case PROTO_PUT_PLACE:
        return put_place_again(s, ss, m);
    case PROTO_SUBMIT:
        return submit_again(s, ss, m);
    default:
        return false;
    }
}
