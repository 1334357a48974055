/*
 * Tasks: graph intake, dependency tracking, sending ahead and completion (placement and the
 * dispatch pass are in place.c).
 *
 * A task is in its output object's record (sched__obj_producer) and lives as long as that object,
 * so its specification stays known for lineage. States move waiting -> ready -> assigned -> done |
 * failed; a waiting or ready task whose output nobody references any more is cancelled.
 * Invariants: t->ndeps equals the number of t's arguments on some object's consumer list; a task
 * is on the ready queue iff its state is T_READY; w->assigned equals the length of w->tasks;
 * s->tstate[k] counts the tasks in state k.
 */
#include <stdio.h>
#include <string.h>

#include <utlist.h>

#include "sched_int.h"

void sched__task_set_state(sched *s, sched_task *t, int state)
{
    s->tstate[t->state]--;
    if (t->graph != NULL)
        sched__graph_count(t->graph, t->state, state);
    t->state = (uint8_t)state;
    s->tstate[state]++;
    if (t->planned && state != T_WAITING && state != T_READY)
        sched__push_unplan(s, t); /* placed, or ended: its inputs go where it runs */
}

static sched_fn *fn_intern(sched *s, const uint8_t *name, size_t len)
{
    sched_fn *f = s->last_fn;
    if (f != NULL && s->last_fn_len == len && memcmp(f->name, name, len) == 0)
        return f;
    HASH_FIND(hh, s->fns, name, len, f);
    if (f == NULL) {
        f = spw_calloc(SPW_MOD_SCHED, 1, sizeof *f);
        f->name = spw_strndup(SPW_MOD_SCHED, (const char *)name, len);
        HASH_ADD_KEYPTR(hh, s->fns, f->name, strlen(f->name), f);
    }
    if (strlen(f->name) == len) { /* a name with a NUL inside is never matched by memcmp */
        s->last_fn = f;
        s->last_fn_len = len;
    }
    return f;
}

static void ready_push(sched *s, sched_task *t)
{
    sched__task_set_state(s, t, T_READY);
    DL_APPEND2(s->ready[t->depth], t, qprev, qnext);
    s->nready++;
    sched__kick(s);
}

void sched__ready_remove(sched *s, sched_task *t)
{
    DL_DELETE2(s->ready[t->depth], t, qprev, qnext);
    t->qprev = t->qnext = NULL;
    s->nready--;
}

/* Takes an output off its graph's live bytes: its last consumer finished (or it is freed). */
void sched__live_uncount(sched *s, sched_obj *o)
{
    if (!o->live)
        return;
    sched_graph *g = sched__obj_task(s, o)->graph;
    g->live_bytes -= o->size < g->live_bytes ? o->size : g->live_bytes;
    o->live = 0;
    sched__kick(s);
}

/* Keeps the value of a's object (here, at most SCHED_ARG_KEEP_MAX bytes) in a, unlinked, for
 * lineage. */
static void arg_keep(sched_arg *a, const sched_obj *o)
{
    if (o->size > 0)
        memcpy(a->kept_small, sched__obj_inline(o), o->size);
    a->kept = (uint8_t)(o->size + 1);
}

/* Drops the task's TASK_ARG references and unlinks it from pending inputs. A task done with its
 * output in a store keeps the values of its inputs that were here, empty or of at most
 * SCHED_ARG_KEEP_MAX bytes (sleep_ms's, a count, an offset), in the argument's own record:
 * lineage may have to run it again once nothing else references them and their records are
 * gone. Larger inline values are not kept: a copy per finished task, held as long as its
 * output and listed nowhere, would be memory nobody could see or release. */
static void release_args(sched *s, sched_task *t)
{
    if (t->args_released)
        return;
    t->args_released = 1;
    const sched_obj *out = sched__task_out(t);
    bool stored = t->state == T_DONE && (t->nouts > 1 || (!out->has_inline && out->size > 0));
    sched_arg *a = sched__task_args(t);
    for (uint32_t i = 0; i < t->nargs; i++, a = sched__arg_next(a)) {
        if (a->obj == NULL)
            continue;
        if (a->linked) {
            DL_DELETE2(a->obj->consumers, a, cprev, cnext);
            a->linked = 0;
        }
        if (a->waiting) {
            a->waiting = 0;
            t->ndeps--;
        }
        if (stored && a->obj->state == OBJ_READY &&
            (a->obj->has_inline || a->obj->size == 0) && a->obj->size <= SCHED_ARG_KEEP_MAX)
            arg_keep(a, a->obj);
        else if (stored && (a->obj->has_task || a->obj->is_out)) {
            /* Its output may have to be made again, and then this input with it. */
            a->obj->lineage++;
            a->held = 1;
        }
        sched_obj *o = a->obj;
        a->obj = NULL;
        sched__unref(s, o, REF_TASK_ARG);
    }
}

static sched_session *session_by_id(sched *s, uint64_t id)
{
    sched_session *ss = s->last_sess; /* a graph's results mostly go to one client */
    if (ss != NULL && ss->id == id)
        return ss;
    HASH_FIND(hh, s->sessions, &id, sizeof id, ss);
    if (ss != NULL)
        s->last_sess = ss;
    return ss;
}

static void send_result(sched *s, sched_task *t)
{
    if (!(t->flags & PROTO_TASK_KEEP))
        return;
    sched_session *ss = session_by_id(s, sched__task_out(t)->origin->owner);
    if (ss == NULL)
        return;
    /* One record per output still held, each under its own id. */
    for (uint32_t i = 0; i < t->nouts; i++) {
        sched_obj *o = sched__task_output(s, t, i);
        if (o != NULL)
            sched__result_send(s, ss, o);
    }
}

void sched__result_send(sched *s, sched_session *ss, const sched_obj *o)
{
    proto_tres_rec r = {.id = o->id};
    if (o->state == OBJ_READY) {
        r.size = o->size;
        if (o->has_inline || o->size == 0) /* else nil: in a store */
            r.value = (proto_bytes){o->has_inline ? (const void *)sched__obj_inline(o) : "",
                                    (uint32_t)o->size};
    } else {
        const sched_failure *f = sched__obj_failure(s, o);
        r.status = f != NULL && f->err != 0 ? f->err : SPW_ETASKFAILED;
        r.err = f != NULL ? f->msg : NULL;
    }
    /* The results of one loop iteration for a client share a TASK_RESULTS frame. */
    proto_batch_tres(ss->conn, PROTO_TASK_RESULTS, &r);
}

void sched__task_fail(sched *s, sched_task *t, int err, const char *msg)
{
    if (t->state == T_READY && t->qprev != NULL) /* dispatch takes it off before assign() */
        sched__ready_remove(s, t);
    sched__task_set_state(s, t, T_FAILED);
    release_args(s, t);
    sched_obj *o = sched__task_out(t);
    o->graph_hold++; /* its record holds t: it stays while the outputs fail */
    for (uint32_t i = 0; i < t->nouts; i++) {
        sched_obj *oi = sched__task_output(s, t, i);
        if (oi != NULL)
            sched__obj_fail(s, oi, err, msg);
    }
    sched__jnl_task_done(s, t);
    send_result(s, t);
    o->graph_hold--;
    sched__obj_maybe_free(s, o);
}

void sched__task_cancel(sched *s, sched_task *t)
{
    if (t->state == T_READY)
        sched__ready_remove(s, t);
    release_args(s, t);
    sched__task_set_state(s, t, T_FAILED);
}

void sched__task_free(sched *s, sched_task *t)
{
    if (t->planned)
        sched__push_unplan(s, t);
    release_args(s, t);
    SPW_ASSERT(t->state != T_READY && t->state != T_ASSIGNED && t->state != T_RUNNING &&
               t->worker == NULL);
    s->tstate[t->state]--;
    sched__graph_release(s, t->graph);
    sched_arg *a = sched__task_args(t);
    for (uint32_t i = 0; i < t->nargs; i++, a = sched__arg_next(a)) {
        if (a->kind != PROTO_ARG_INLINE && a->held) {
            a->held = 0;
            sched__lineage_drop(s, a->id);
        }
    }
    /* Its memory is its output object's record, freed with it. */
}

static void ahead_promote(sched *s, sched_task *t);

void sched__dep_ready(sched *s, sched_arg *a)
{
    sched_task *t = sched__arg_task(a);
    if (!a->waiting)
        return;
    a->waiting = 0;
    t->ndeps--;
    if (t->ndeps == 0 && t->state == T_WAITING) {
        if (t->worker != NULL)
            ahead_promote(s, t); /* sent ahead: its worker starts it on its own */
        else
            ready_push(s, t);
    }
}

/* Why a task cannot run: its input o failed with err and msg. A chain of failures names the
 * input and the task that failed first with its own error, not every link between:
 * "dependency O (fn) failed: MSG" for an input whose task failed itself, else
 * "dependency O failed: task R (fn) failed first: MSG", R's message taken from msg (which is
 * itself one of these two forms when err is SPW_EDEPFAILED). */
static void dep_msg(sched *s, const sched_obj *o, int err, const char *msg, char *buf, size_t len)
{
    char hex[33];
    spw_id_hex(o->id, hex);
    static const char dep[] = "dependency ", sep[] = " failed: ", first[] = " failed first: ";
    const char *mid = err == SPW_EDEPFAILED && strncmp(msg, dep, sizeof dep - 1) == 0
                          ? strstr(msg, sep)
                          : NULL;
    if (mid != NULL) {
        const char *rest = mid + sizeof sep - 1;
        if (strncmp(rest, "task ", 5) == 0 && strstr(rest, first) != NULL)
            snprintf(buf, len, "dependency %s failed: %s", hex, rest);
        else
            snprintf(buf, len, "dependency %s failed: task %.*s%s%s", hex,
                     (int)(mid - msg - (sizeof dep - 1)), msg + sizeof dep - 1, first, rest);
        return;
    }
    const sched_task *t = sched__obj_task(s, o);
    if (t != NULL)
        snprintf(buf, len, "dependency %s (%s) failed: %s", hex, t->fn->name, msg);
    else
        snprintf(buf, len, "dependency %s failed: %s", hex, msg);
}

void sched__dep_failed(sched *s, sched_arg *a, int err, const char *msg)
{
    sched_task *t = sched__arg_task(a);
    char buf[PROTO_MAX_STR];
    dep_msg(s, a->obj, err, msg, buf, sizeof buf);
    sched__task_fail(s, t, SPW_EDEPFAILED, buf);
}

/* ----------------------------------------------------------------- intake */

void sched__graph_hold(sched_session *ss, sched_obj *o)
{
    if (ss->nbuilding == ss->capbuilding) {
        ss->capbuilding = ss->capbuilding ? ss->capbuilding * 2 : 64;
        ss->building =
            spw_realloc(SPW_MOD_SCHED, ss->building, ss->capbuilding * sizeof *ss->building);
    }
    ss->building[ss->nbuilding++] = o;
    o->graph_hold++;
}

/* Creates one task from its record. Returns 0, or an error for a record that cannot become a
 * task at all (the client hears of it in an ERROR frame). */
static int task_intake(sched *s, sched_session *ss, const proto_val *rec, uint64_t now_ms,
                       char *err, size_t errlen)
{
    char hex[33];
    spw_id id = rec[R_TASK_ID].id;
    if (spw_id_is_nil(id)) {
        snprintf(err, errlen, "task id is nil");
        return SPW_EINVAL;
    }
    if (sched__obj_find(s, id) != NULL) {
        snprintf(err, errlen, "task=%s: id already in use", spw_id_hex(id, hex));
        return SPW_EDUPLICATE;
    }
    /* Absent or 0 (a sender that left it unset): one output. */
    uint64_t nouts = rec[R_TASK_NOUTS].nil || rec[R_TASK_NOUTS].u == 0 ? 1 : rec[R_TASK_NOUTS].u;
    if (nouts > SPW_TASK_OUTPUTS_MAX) {
        snprintf(err, errlen, "task=%s declares %llu outputs: a task has 1 to %u",
                 spw_id_hex(id, hex), (unsigned long long)nouts, SPW_TASK_OUTPUTS_MAX);
        return SPW_EINVAL;
    }
    if (nouts > 1 && spw_id_output_index(id) != 0) {
        snprintf(err, errlen,
                 "task=%s declares %llu outputs, but the low %d bits of its id are not zero "
                 "(output ids are spw_id_output(task, i))",
                 spw_id_hex(id, hex), (unsigned long long)nouts, SPW_OUT_INDEX_BITS);
        return SPW_EINVAL;
    }
    for (uint32_t i = 1; i < nouts; i++) {
        if (sched__obj_find(s, spw_id_output(id, i)) != NULL) {
            snprintf(err, errlen, "task=%s: the id of its output %u is already in use",
                     spw_id_hex(id, hex), i);
            return SPW_EDUPLICATE;
        }
    }
    sched_plugin *plugin;
    int prc = sched__plugin_for_task(s, rec[R_TASK_FN].bin.ptr, rec[R_TASK_FN].bin.len, &plugin,
                                     err, errlen);
    if (prc != 0)
        return prc;
    const proto_val *args = &rec[R_TASK_ARGS];
    uint32_t nargs = args->arr.n;
    size_t argbytes = 0; /* of the arguments, each as long as its kind needs */
    for (uint32_t i = 0; i < nargs; i++) {
        const proto_val *a = PROTO_REC(args, i);
        if (a[R_ARG_KIND].u > PROTO_ARG_VIEW) {
            snprintf(err, errlen, "task=%s arg %u: unknown kind %llu", spw_id_hex(id, hex), i,
                     (unsigned long long)a[R_ARG_KIND].u);
            return SPW_EINVAL;
        }
        if (a[R_ARG_KIND].u == PROTO_ARG_INLINE) {
            if (a[R_ARG_INLINE].nil) {
                snprintf(err, errlen, "task=%s arg %u: inline value missing", spw_id_hex(id, hex), i);
                return SPW_EINVAL;
            }
        } else if (a[R_ARG_OBJ].nil) {
            snprintf(err, errlen, "task=%s arg %u: object id missing", spw_id_hex(id, hex), i);
            return SPW_EINVAL;
        }
        argbytes += sched__arg_size_of(a[R_ARG_KIND].u, a[R_ARG_INLINE].bin.len);
    }
    size_t placelen = rec[R_TASK_WORKER].nil ? 0 : rec[R_TASK_WORKER].bin.len;
    size_t size = sizeof(sched_task) + argbytes;
    if (placelen > 0)
        size = sched__place_at(size) + sizeof(uint64_t) + placelen + 1;
    sched_obj *out = sched__obj_new_task(s, id, ss, (const char *)rec[R_TASK_SITE].bin.ptr,
                                         rec[R_TASK_SITE].bin.len, size, now_ms);
    if (out == NULL) {
        snprintf(err, errlen, "task=%s: out of memory", spw_id_hex(id, hex));
        return SPW_ENOMEM;
    }
    out->has_task = 1;
    sched_task *t = sched__obj_producer(out);
    if (placelen > 0) {
        char *place = (char *)t + sched__place_at(sizeof *t + argbytes) + sizeof(uint64_t);
        memcpy(place, rec[R_TASK_WORKER].bin.ptr, placelen);
        place[placelen] = '\0';
        t->placed = 1;
    }
    t->nargs = nargs;
    t->nouts = (uint16_t)nouts;
    t->flags = (uint32_t)rec[R_TASK_FLAGS].u & ~PROTO_TASK_AHEAD; /* ours to set */
    t->fn = fn_intern(s, rec[R_TASK_FN].bin.ptr, rec[R_TASK_FN].bin.len);
    t->graph = ss->cur_graph;
    t->graph->ntasks++;
    if (plugin != NULL)
        sched__plugin_graph_use(s, t->graph, plugin);
    t->state = T_WAITING;
    s->tstate[T_WAITING]++;
    sched__graph_count(t->graph, -1, T_WAITING);
    ss->tasks_submitted++;

    /* An output the client keeps needs no hold while its OUTPUT reference lasts: it gets one if
     * that goes before the graph's last frame (sched__obj_maybe_free), so the session's building
     * list holds only the outputs that would otherwise go, not one pointer per task. */
    for (uint32_t i = 0; i < nouts; i++) {
        sched_obj *oi = out;
        if (i > 0) {
            /* Output i: a record of its own, as the submit's objects share their origin. */
            oi = sched__obj_new(s, spw_id_output(id, i), ss,
                                (const char *)rec[R_TASK_SITE].bin.ptr, rec[R_TASK_SITE].bin.len);
            oi->is_out = 1;
            t->outs_alive++;
        }
        if (t->flags & PROTO_TASK_KEEP)
            sched__session_ref(s, ss, oi, REF_OUTPUT);
        else
            sched__graph_hold(ss, oi);
    }

    const char *bad = NULL;
    int bad_err = 0;
    char badbuf[256];
    sched_arg *sa = sched__task_args(t);
    for (uint32_t i = 0; i < nargs; i++, sa = sched__arg_next(sa)) {
        const proto_val *a = PROTO_REC(args, i);
        sa->kind = (uint8_t)a[R_ARG_KIND].u;
        if (sa->kind == PROTO_ARG_INLINE) {
            sa->inline_len = a[R_ARG_INLINE].bin.len;
            memcpy((uint8_t *)sa + SCHED_ARG_INLINE_HDR, a[R_ARG_INLINE].bin.ptr, sa->inline_len);
            continue;
        }
        sa->task_off = (uint32_t)((const char *)sa - (const char *)t);
        if (sa->kind == PROTO_ARG_VIEW) {
            sa->off = a[R_ARG_OFF].u;
            sa->len = a[R_ARG_LEN].u;
        }
        sa->id = a[R_ARG_OBJ].id;
        sched_obj *o = sched__obj_find(s, a[R_ARG_OBJ].id);
        if (o == out || (o != NULL && o->is_out && spw_id_eq(spw_id_output_task(o->id), id))) {
            /* A task cannot wait for its own output: it would never run, nor be freed. */
            if (bad == NULL) {
                snprintf(badbuf, sizeof badbuf, "argument %u names the task itself", i);
                bad = badbuf;
                bad_err = SPW_EINVAL;
            }
            continue;
        }
        if (o == NULL && sched__journal_replaying(s)) {
            /* Replayed from the journal: an input freed after this task ran; its outcome
             * follows (else the replay fails it). */
            sched__jnl_missing_input(s, id);
            continue;
        }
        if (o == NULL || o->chunked) {
            if (bad == NULL && o == NULL) {
                snprintf(badbuf, sizeof badbuf, "argument %u: no such object %s", i,
                         spw_id_hex(a[R_ARG_OBJ].id, hex));
                bad = badbuf;
                bad_err = SPW_ENOOBJ;
            } else if (bad == NULL) {
                /* Its bytes are in no one store: a task takes views of its chunks. */
                snprintf(badbuf, sizeof badbuf,
                         "argument %u: obj=%s is chunked; pass its chunks (libspillway does)", i,
                         spw_id_hex(a[R_ARG_OBJ].id, hex));
                bad = badbuf;
                bad_err = SPW_EINVAL;
            }
            continue;
        }
        sa->obj = o;
        sched__ref(s, o, REF_TASK_ARG);
        const sched_task *producer = sched__obj_task(s, o);
        if (producer != NULL && producer->depth + 1 > t->depth)
            t->depth = (uint8_t)(producer->depth + 1 < SCHED_DEPTHS ? producer->depth + 1
                                                                    : SCHED_DEPTHS - 1);
        DL_APPEND2(o->consumers, sa, cprev, cnext);
        sa->linked = 1;
        if (o->state == OBJ_PENDING) {
            sa->waiting = 1;
            t->ndeps++;
        } else if ((o->state == OBJ_FAILED || o->state == OBJ_LOST) && bad == NULL) {
            const sched_failure *f = o->state == OBJ_LOST ? NULL : sched__obj_failure(s, o);
            dep_msg(s, o, f != NULL ? f->err : 0,
                    o->state == OBJ_LOST ? "object lost"
                    : f != NULL          ? f->msg
                                         : "?",
                    badbuf, sizeof badbuf);
            bad = badbuf;
            bad_err = SPW_EDEPFAILED;
        }
    }
    if (bad != NULL)
        sched__task_fail(s, t, bad_err, bad);
    else if (t->ndeps == 0)
        ready_push(s, t);
    return 0;
}

void sched__submit(sched *s, sched_session *ss, const proto_msg *m)
{
    uint64_t graph = m->f[F_SUBMIT_GRAPH].u;
    if (graph == 0) {
        proto_conn_error(ss->conn, m->req, SPW_EINVAL, "graph id 0 is reserved");
        return;
    }
    if (ss->graph != 0 && ss->graph != graph) {
        proto_conn_error(ss->conn, m->req, SPW_EPROTO,
                         "graph %llu submitted while graph %llu is still being sent",
                         (unsigned long long)graph, (unsigned long long)ss->graph);
        return;
    }
    if (ss->graph == 0) {
        sched_graph *g = sched__graph_new(s, ss, graph);
        g->max_tasks = m->f[F_SUBMIT_MAX_TASKS].u ? m->f[F_SUBMIT_MAX_TASKS].u
                                                   : s->opts.graph_max_tasks;
        g->max_bytes = m->f[F_SUBMIT_MAX_BYTES].u;
        if (g->max_bytes == 0 && s->opts.graph_max_bytes != 0)
            g->max_bytes = s->opts.graph_max_bytes;
        if (g->max_bytes == 0) {
            /* By default a graph may keep a quarter of the cluster's stores busy. */
            uint64_t cap = 0;
            for (uint32_t i = 0; i < s->nworkers; i++)
                cap += s->workers[i]->capacity;
            g->max_bytes = cap / 4;
        }
        ss->cur_graph = g;
    }
    ss->graph = graph;
    sched__jnl_submit(s, ss, ss->cur_graph);
    const proto_val *tasks = &m->f[F_SUBMIT_TASKS];
    uint32_t accepted = 0, over = 0;
    uint64_t max_total = s->opts.graph_max_total;
    uint64_t now_ms = spw_wall_ms(); /* the frame's tasks are made at once */
    for (uint32_t i = 0; i < tasks->arr.n; i++) {
        char err[512];
        sched__objs_prefetch_new(s, tasks, R_TASK_ID, i); /* task_intake's check, then add */
        if (max_total != 0 && ss->cur_graph->total >= max_total) {
            /* Over the cap: refused. A kept one is named, so the client settles its handle. */
            const proto_val *rec = PROTO_REC(tasks, i);
            char hex[33];
            if (over++ == 0 || (rec[R_TASK_FLAGS].u & PROTO_TASK_KEEP))
                proto_conn_error(ss->conn, m->req, SPW_ELIMIT,
                                 "task=%s: graph %llu has more than %llu tasks (--graph-max-total)",
                                 spw_id_hex(rec[R_TASK_ID].id, hex), (unsigned long long)graph,
                                 (unsigned long long)max_total);
            continue;
        }
        int rc = task_intake(s, ss, PROTO_REC(tasks, i), now_ms, err, sizeof err);
        if (rc != 0) {
            spw_log(SPW_LOG_WARN, "session=%llu refused a task: %s err=%s",
                    (unsigned long long)ss->id, err, spw_err_name(rc));
            proto_conn_error(ss->conn, m->req, rc, "%s", err);
            continue;
        }
        ss->cur_graph->total++;
        accepted++;
    }
    if (over > 0)
        spw_log(SPW_LOG_WARN, "session=%llu graph=%llu: %u tasks refused over --graph-max-total %llu",
                (unsigned long long)ss->id, (unsigned long long)graph, over,
                (unsigned long long)max_total);
    if (m->f[F_SUBMIT_FLAGS].u & PROTO_SUBMIT_END) {
        /* Outputs nobody asked for and nothing consumes are dropped now. */
        sched_obj **held = ss->building;
        uint32_t n = ss->nbuilding;
        ss->building = NULL;
        ss->nbuilding = ss->capbuilding = 0;
        ss->graph = 0;
        for (uint32_t i = 0; i < n; i++) {
            held[i]->graph_hold--;
            sched__obj_maybe_free(s, held[i]);
        }
        spw_free(held);
        const proto_val *site = &m->f[F_SUBMIT_SITE];
        sched__graph_submitted(s, ss->cur_graph, site->nil ? NULL : (const char *)site->bin.ptr,
                               site->nil ? 0 : site->bin.len);
        sched__graph_release(s, ss->cur_graph);
        ss->cur_graph = NULL;
        proto_send_submit_ack(ss->conn, m->req,
                              &(proto_submit_ack_msg){.graph = graph, .ntasks = accepted});
    }
}

/* ---------------------------------------------------------- sending ahead */

/* A chain's dependent is sent to the worker that runs its producer before the producer ends, as
 * Ray and Dask pipeline chains: that worker starts it the moment the producer's result is there,
 * so a hop costs executor -> worker -> executor, not two more wake-ups through the scheduler.
 * A task goes ahead to worker w when it waits only for outputs of tasks on w (assigned there, or
 * themselves sent ahead), as whole objects; every other object argument is inline here or in
 * w's store (a task with inputs from two workers is dispatched as usual); and its graph admits
 * it. At most SCHED_AHEAD_PER_SLOT x slots tasks (and never more than SCHED_AHEAD_VISITS) are
 * ahead on a worker at once, and a walk looks at SCHED_AHEAD_VISITS consumers, so a wide graph
 * is not pushed onto one worker and the cost per event stays constant. Links of a linear chain
 * (chain_link) may go further, up to SCHED_AHEAD_CHAIN_PER_SLOT x slots: such a link can start
 * nowhere sooner than where its only input is made, so holding more of them there takes no work
 * from other workers, and the round trip through the scheduler that refills a worker is paid
 * once per many hops instead of every few. A fan-in (a reduction tree's node) keeps the smaller
 * limit: its inputs come from several tasks, so holding many fan-ins on one worker takes work
 * other workers could do.
 * A task ahead stays T_WAITING (it still waits for its input) until its inputs are ready, then
 * becomes T_ASSIGNED with no message: its worker starts it by itself. It counts in its graph's
 * inflight from the moment it is sent. Its worker answers it with exactly one TASK_DONE: a
 * result, a failure, or SPW_EAHEAD (dropped unrun: its producer failed there, or the producer's
 * inline result was gone when it arrived), after which it is dispatched as if never sent ahead.
 * Until that answer it stays on w->tasks, even if the scheduler failed it meanwhile (a producer
 * failed) or it was released (orphaned, as an assigned task is). */

/* Whether t may be sent ahead to w now. */
static bool ahead_eligible(const sched_task *t, const sched_worker *w)
{
    if (t->state != T_WAITING || t->worker != NULL || t->placed)
        return false;
    const sched_arg *a = sched__task_args(t);
    for (uint32_t i = 0; i < t->nargs; i++, a = sched__arg_next(a)) {
        const sched_obj *o = a->obj;
        if (a->kind == PROTO_ARG_INLINE || a->kept)
            continue;
        if (o == NULL)
            return false;
        if (a->waiting) {
            const sched_task *p = sched__obj_producer(o);
            if (a->kind != PROTO_ARG_OBJ || p == NULL || p->worker != w || p->state == T_FAILED)
                return false;
            continue;
        }
        if (o->state != OBJ_READY ||
            (a->kind == PROTO_ARG_VIEW && (a->off > o->size || a->len > o->size - a->off)))
            return false; /* a bad view fails in dispatch, with its message */
        if (o->has_inline || o->size == 0)
            continue;
        bool here = false;
        for (uint32_t j = 0; j < o->nlocs && !here; j++)
            here = o->locs[j] == w->id;
        if (!here)
            return false;
    }
    return sched__graph_admits(t->graph, t);
}

static bool ahead_send(sched *s, sched_task *t, sched_worker *w)
{
    /* In the same TASK_RUNS frame as assign()'s: the worker reads its producer first. */
    int rc = sched__task_send(s, t, w, t->flags | PROTO_TASK_AHEAD);
    if (rc != 0)
        return false; /* too large for the wire: dispatch fails it, with the reason */
    t->flags |= PROTO_TASK_AHEAD; /* until assign() sends it as usual: SPW_EAHEAD is valid */
    t->worker = w;
    w->ahead++;
    t->graph->inflight++;
    DL_APPEND2(w->tasks, t, wprev, wnext);
    return true;
}

/* Whether d is a link of a linear chain after p: d is the only consumer of p's output, and that
 * output is d's only object argument (a node of a tree, which has more, is not a link even once
 * all but one of its inputs are made). */
static bool chain_link(const sched_task *p, const sched_task *d)
{
    const sched_arg *c = sched__task_out(p)->consumers;
    if (c == NULL || c->cnext != NULL || sched__arg_task(c) != d)
        return false;
    uint32_t objects = 0;
    const sched_arg *a = sched__task_args(d);
    for (uint32_t i = 0; i < d->nargs; i++, a = sched__arg_next(a))
        objects += a->kind != PROTO_ARG_INLINE;
    return objects == 1;
}

/* How many tasks may be ahead on w when d, a consumer of p, is the next to go: per slot, but
 * no more than one walk looks at. A refill walks down a chain through the tasks already ahead
 * before it sends any, so with more than that ahead (half of the cap, when it refills) every hop
 * walked them all and sent one task. */
static uint32_t ahead_cap(const sched_worker *w, const sched_task *p, const sched_task *d)
{
    uint64_t cap = (uint64_t)w->slots *
                   (chain_link(p, d) ? SCHED_AHEAD_CHAIN_PER_SLOT : SCHED_AHEAD_PER_SLOT);
    return cap < SCHED_AHEAD_VISITS ? (uint32_t)cap : SCHED_AHEAD_VISITS;
}

/* Sends ahead to w what waits for p's output (p is on w), and down from there: through tasks
 * already ahead to the first that are not, while w has room and the visits last. Past a task
 * ahead only if its function's outputs are inline: each hop of a chain of stored outputs holds
 * one more in w's store until the scheduler hears of it and releases its input. */
static void ahead_walk_from(sched *s, const sched_task *p, sched_worker *w, int *visits)
{
    for (sched_arg *c = sched__task_out(p)->consumers; c != NULL; c = c->cnext) {
        sched_task *d = sched__arg_task(c);
        if (w->ahead >= ahead_cap(w, p, d) || --*visits < 0)
            return;
        bool on = d->worker == w && d->state == T_WAITING;
        if (!on)
            on = ahead_eligible(d, w) && ahead_send(s, d, w);
        if (on && d->fn->inline_out)
            ahead_walk_from(s, d, w, visits);
    }
}

/* p was just assigned to w, or its inputs there became ready: its dependents may go ahead. */
void sched__ahead_walk(sched *s, sched_task *p, sched_worker *w)
{
    if (sched__task_out(p)->consumers == NULL || sched__worker_paused(w) ||
        proto_conn_is_closing(w->conn))
        return;
    int visits = SCHED_AHEAD_VISITS;
    ahead_walk_from(s, p, w, &visits);
}

/* Every input of t, sent ahead to t->worker, is ready: that worker has started it (or will, or
 * answers SPW_EAHEAD). */
static void ahead_promote(sched *s, sched_task *t)
{
    sched_worker *w = t->worker;
    w->ahead--;
    w->assigned++;
    sched__worker_load(s, w);
    sched__task_set_state(s, t, T_ASSIGNED);
    /* Refilled when half empty: the worker then takes several in one read, not one a hop. */
    const sched_arg *c = sched__task_out(t)->consumers;
    if (c != NULL && w->ahead <= ahead_cap(w, t, sched__arg_task(c)) / 2)
        sched__ahead_walk(s, t, w);
}

/* Takes t, assigned or ahead, off its worker. */
static void worker_unlink(sched *s, sched_task *t)
{
    sched_worker *w = t->worker;
    DL_DELETE2(w->tasks, t, wprev, wnext);
    t->wprev = t->wnext = NULL; /* shared with the ready links */
    if (t->state == T_ASSIGNED || t->state == T_RUNNING) {
        w->assigned--;
        sched__task_unqueue(s, t);
        sched__worker_load(s, w);
    } else {
        w->ahead--;
    }
    t->worker = NULL;
    t->graph->inflight--;
    sched__kick(s);
}

/* The worker's TASK_DONE for a task ahead there that never started (its inputs are not all
 * ready here): it waits on as if never sent, or, failed or released meanwhile, goes now. A
 * malformed record (record i of the frame) fails it, as it would any task. */
static void ahead_answered(sched *s, sched_worker *w, sched_task *t, uint64_t req,
                           const proto_val *f, uint32_t i)
{
    char hex[33];
    int status = proto_status(f[F_DONE_STATUS].i);
    worker_unlink(s, t);
    if (f[F_DONE_ID].bad) {
        proto_conn_error(w->conn, req, SPW_EMALFORMED,
                         "TASK_DONES record %u (task=%s) does not match the schema: task failed", i,
                         spw_id_hex(sched__task_out(t)->id, hex));
        if (t->state == T_WAITING) {
            sched__task_fail(s, t, SPW_EMALFORMED, "the worker sent a malformed completion");
            return;
        }
    } else if (status == 0)
        proto_conn_error(w->conn, req, SPW_EPROTO,
                         "task=%s was sent ahead and reported done before its inputs were",
                         spw_id_hex(sched__task_out(t)->id, hex));
    sched__obj_maybe_free(s, sched__task_out(t));
}

/* A task ahead on a worker that is gone: back to waiting (it never ran: no retry counted), or,
 * failed or released meanwhile, freed. */
static void ahead_lost(sched *s, sched_task *t)
{
    worker_unlink(s, t);
    sched__obj_maybe_free(s, sched__task_out(t));
}

/* ------------------------------------------------------------- completion */

static bool lineage_recompute(sched *s, sched_obj *o);

/* A task's worker could not get one of its inputs from any holder: the holder died (often
 * before we heard of it). If every input can still be had (held elsewhere, being made, or
 * re-made now from its task), the task runs again once they are ready, up to the retry limit.
 * Returns whether it will. */
static bool task_retry_lost_input(sched *s, sched_task *t)
{
    if (t->retries >= s->opts.task_retries)
        return false;
    const sched_arg *a = sched__task_args(t);
    for (uint32_t i = 0; i < t->nargs; i++, a = sched__arg_next(a)) {
        sched_obj *in = a->obj;
        if (a->kind == PROTO_ARG_INLINE || in == NULL)
            continue;
        if (in->state == OBJ_FAILED || (in->state == OBJ_LOST && !lineage_recompute(s, in)))
            return false;
    }
    t->retries++;
    sched__task_set_state(s, t, T_WAITING);
    sched_arg *wa = sched__task_args(t);
    for (uint32_t i = 0; i < t->nargs; i++, wa = sched__arg_next(wa)) {
        if (wa->kind != PROTO_ARG_INLINE && wa->obj != NULL && wa->obj->state == OBJ_PENDING &&
            !wa->waiting) {
            wa->waiting = 1;
            t->ndeps++;
        }
    }
    if (t->ndeps == 0)
        ready_push(s, t);
    return true;
}

/* Output o of t, made by w: size bytes, in value (not nil) or in w's store. Its state is left
 * to the caller (sched__obj_ready once every output is filled). */
static void out_fill(sched *s, sched_worker *w, sched_task *t, sched_obj *o, uint64_t size,
                     const proto_val *value)
{
    o->size = size;
    o->home = w->id;
    if (!value->nil) {
        if (value->bin.len > 0) {
            uint8_t *dst = o->inline_small;
            if (value->bin.len > sizeof o->inline_small)
                dst = o->inline_heap = spw_malloc(SPW_MOD_SCHED, value->bin.len);
            memcpy(dst, value->bin.ptr, value->bin.len);
            o->has_inline = 1;
        }
    } else if (size > 0) {
        sched__obj_add_loc(s, o, w->id);
        if (o->refs[REF_TASK_ARG] > 0) {
            /* Produced, not yet consumed: counts against the graph's byte cap. */
            sched_graph *g = t->graph;
            o->live = 1;
            g->live_bytes += size;
            if (g->live_bytes > g->peak_live)
                g->peak_live = g->live_bytes;
        }
    }
}

/* One completion: the fields of a TASK_DONE, or record i of a TASK_DONES (f[0].bad: the record
 * did not match the schema; its id, if readable, fails that task). o: the record of its id, found
 * by the caller, or NULL to look it up. now_ms: spw_wall_ms() as the caller read it. */
static void task_done_rec(sched *s, sched_worker *w, uint64_t req, const proto_val *f, uint32_t i,
                          sched_obj *o, uint64_t now_ms)
{
    char hex[33];
    if (f[F_DONE_ID].bad && f[F_DONE_ID].nil) {
        proto_conn_error(w->conn, req, SPW_EMALFORMED,
                         "TASK_DONES record %u is malformed and names no task", i);
        return;
    }
    spw_id id = f[F_DONE_ID].id;
    if (o == NULL)
        o = sched__obj_find(s, id);
    sched_task *t = o != NULL ? sched__obj_producer(o) : NULL;
    if (t != NULL && t->worker == w && sched__task_ahead(t)) {
        ahead_answered(s, w, t, req, f, i);
        return;
    }
    if (t == NULL || t->worker != w || (t->state != T_ASSIGNED && t->state != T_RUNNING)) {
        proto_conn_error(w->conn, req, SPW_ENOOBJ, "task=%s is not assigned to this worker",
                         spw_id_hex(id, hex));
        return;
    }
    DL_DELETE2(w->tasks, t, wprev, wnext);
    t->wprev = t->wnext = NULL; /* shared with the ready links */
    w->assigned--;
    bool taken = sched__task_unqueue(s, t);
    sched__worker_load(s, w);
    t->worker = NULL;
    t->graph->inflight--;
    sched__kick(s);
    if (!f[F_DONE_ID].bad && proto_status(f[F_DONE_STATUS].i) == SPW_EAHEAD) {
        if (!(t->flags & PROTO_TASK_AHEAD)) {
            /* Only a task sent ahead may be dropped so: requeueing any other would let a worker
             * bounce it for ever. */
            proto_conn_error(w->conn, req, SPW_EPROTO,
                             "task=%s was not sent ahead, but answered SPW_EAHEAD: task failed",
                             spw_id_hex(id, hex));
            sched__task_fail(s, t, SPW_EPROTO,
                             "the worker answered SPW_EAHEAD for a task not sent ahead");
            return;
        }
        /* Sent ahead; its producer's inline result was gone when it got there: it runs now as
         * if it had never been sent ahead (it did not run: no retry counted). */
        t->flags &= ~PROTO_TASK_AHEAD;
        ready_push(s, t);
        sched__obj_maybe_free(s, o);
        return;
    }

    if (f[F_DONE_ID].bad) {
        proto_conn_error(w->conn, req, SPW_EMALFORMED,
                         "TASK_DONES record %u (task=%s) does not match the schema: task failed", i,
                         spw_id_hex(id, hex));
        sched__task_fail(s, t, SPW_EMALFORMED, "the worker sent a malformed completion");
        return;
    }
    double us = (double)f[F_DONE_RUN_US].u;
    sched_fn *fn = t->fn;
    fn->ewma_us = fn->runs == 0 ? us : fn->ewma_us * 0.9 + us * 0.1;
    fn->runs++;

    int64_t st = f[F_DONE_STATUS].i;
    int status = proto_status(st);
    if (status != 0) {
        char msg[PROTO_MAX_STR + 1];
        proto_str(&f[F_DONE_ERR], msg, sizeof msg);
        if (status == SPW_EPROTO && st != SPW_EPROTO)
            snprintf(msg, sizeof msg, "the worker reported status %lld, which is no error code",
                     (long long)st);
        if (status == SPW_ECANCELED && (w->drain || taken) && !o->orphan) {
            /* Taken back before it started, from a worker that drains or for one gone idle
             * (place.c): it runs elsewhere, as if never sent (it did not run: no retry
             * counted); one taken for an idle worker goes only to a free slot. */
            t->flags &= ~PROTO_TASK_AHEAD;
            t->taken = taken;
            sched__spread_undo(t, w->id);
            ready_push(s, t);
            return;
        }
        if (status == SPW_EOBJLOST && task_retry_lost_input(s, t)) {
            spw_log(SPW_LOG_NOTICE, "task=%s retried: %s", spw_id_hex(id, hex), msg);
            sched__obj_maybe_free(s, o); /* an orphan is dropped, not rerun */
            return;
        }
        sched__task_fail(s, t, status, msg);
        return;
    }
    /* Output k's size and value (nil: in w's store): output 0 in the record's own fields, the
     * others in its outs list, exactly one per output after the first. */
    const proto_val *outs = &f[F_DONE_OUTS];
    uint32_t nrep = 1 + (outs->nil ? 0 : outs->arr.n);
    if (nrep != t->nouts) {
        proto_conn_error(w->conn, req, SPW_EMALFORMED,
                         "task=%s: %u outputs reported for a task of %u", spw_id_hex(id, hex),
                         nrep, t->nouts);
        sched__task_fail(s, t, SPW_EMALFORMED, "the worker reported the wrong number of outputs");
        return;
    }
    for (uint32_t k = 0; k < t->nouts; k++) {
        const proto_val *sz = k == 0 ? &f[F_DONE_SIZE] : &PROTO_REC(outs, k - 1)[R_OUT_SIZE];
        const proto_val *v = k == 0 ? &f[F_DONE_INLINE] : &PROTO_REC(outs, k - 1)[R_OUT_INLINE];
        if (!v->nil && v->bin.len != sz->u) {
            proto_conn_error(w->conn, req, SPW_EMALFORMED,
                             "task=%s: inline result %u of %u bytes for a size of %llu",
                             spw_id_hex(id, hex), k, v->bin.len, (unsigned long long)sz->u);
            sched__task_fail(s, t, SPW_EMALFORMED, "worker sent an inconsistent result");
            return;
        }
    }
    bool all_inline = true;
    uint64_t stored_bytes = 0;
    for (uint32_t k = 0; k < t->nouts; k++) {
        uint64_t size = k == 0 ? f[F_DONE_SIZE].u : PROTO_REC(outs, k - 1)[R_OUT_SIZE].u;
        const proto_val *v = k == 0 ? &f[F_DONE_INLINE] : &PROTO_REC(outs, k - 1)[R_OUT_INLINE];
        all_inline = all_inline && (!v->nil || size == 0);
        sched_obj *oi = sched__task_output(s, t, k);
        if (oi == NULL) {
            /* Released before it was made (or a husk made again by lineage): its copy goes. */
            if (v->nil && size > 0)
                sched__worker_delete(w, spw_id_output(id, k));
            continue;
        }
        out_fill(s, w, t, oi, size, v);
        if (v->nil)
            stored_bytes += size;
    }
    fn->inline_out = all_inline;
    if (stored_bytes > 0 && t->depth == 0) {
        sched_graph *g = t->graph;
        g->avg_src_out = g->src_runs++ == 0 ? (double)stored_bytes
                                             : 0.8 * g->avg_src_out + 0.2 * (double)stored_bytes;
    }
    /* Submit -> done latency, for /metrics. */
    uint64_t created_ms = sched__obj_created_ms(o);
    uint64_t lat_ms = now_ms > created_ms ? now_ms - created_ms : 0;
    static const uint64_t bounds[PROTO_LATENCY_NBOUNDS] = PROTO_LATENCY_BOUNDS_MS;
    int b = 0;
    while (b < PROTO_LATENCY_NBOUNDS && lat_ms > bounds[b])
        b++;
    s->latency[b]++;
    s->latency_sum_us += lat_ms * 1000;
    sched__task_set_state(s, t, T_DONE);
    sched__jnl_task_done(s, t);
    o->graph_hold++; /* its record holds t, which the loop below reads */
    release_args(s, t);
    for (uint32_t k = 0; k < t->nouts; k++) {
        sched_obj *oi = sched__task_output(s, t, k);
        if (oi != NULL)
            sched__obj_ready(s, oi);
    }
    sched__push_outputs(s, t, w);
    send_result(s, t);
    o->graph_hold--;
    sched__obj_maybe_free(s, o);
}

void sched__task_done(sched *s, sched_worker *w, const proto_msg *m)
{
    task_done_rec(s, w, m->req, m->f, 0, NULL, spw_wall_ms());
}

/* How many of a worker's oldest tasks (w->tasks, in the order they were sent) a completion is
 * matched against before the directory is asked. */
#define DONE_GUESS 4

/* The record of id if it is one of w's DONE_GUESS oldest tasks, else NULL. A worker mostly
 * answers in the order it was sent its tasks, so a completion is usually the head of w->tasks:
 * found there, in records that lie in the order they were made, it costs no directory lookup
 * (a cache miss on a random slot of a table as large as the graph, and one on the record). */
static sched_obj *done_guess(const sched_worker *w, spw_id id)
{
    const sched_task *t = w->tasks;
    for (int k = 0; k < DONE_GUESS && t != NULL; k++, t = t->wnext) {
        sched_obj *o = sched__task_out(t);
        if (spw_id_eq(o->id, id))
            return o;
    }
    return NULL;
}

void sched__task_dones(sched *s, sched_worker *w, const proto_msg *m)
{
    const proto_val *recs = &m->f[F_DONES_RECS];
    uint64_t now_ms = spw_wall_ms(); /* the frame's tasks ended at once */
    bool prefetch = false; /* started at the first completion not found by done_guess */
    /* The worker's load changes with each task: its place in the load buckets is fixed once, after
     * the frame (nothing places tasks meanwhile: dispatch runs from the loop's idle handle). */
    s->load_later = w;
    for (uint32_t i = 0; i < recs->arr.n; i++) {
        const proto_val *f = PROTO_REC(recs, i);
        sched_obj *o = f[F_DONE_ID].nil ? NULL : done_guess(w, f[F_DONE_ID].id);
        if (o == NULL && !prefetch && i + 1 < recs->arr.n) {
            prefetch = true;
            sched__objs_prefetch(s, recs, F_DONE_ID, 0);
        }
        if (prefetch && i > 0)
            sched__objs_prefetch(s, recs, F_DONE_ID, i);
        task_done_rec(s, w, m->req, f, i, o, now_ms);
    }
    s->load_later = NULL;
    sched__worker_load(s, w);
}

void sched__task_started(sched *s, sched_worker *w, const proto_msg *m)
{
    /* A notice for a task no longer assigned there (finished, or retried elsewhere after a
     * reconnect) is stale, not an error. */
    const proto_val *ids = &m->f[F_STARTED_IDS];
    for (uint32_t i = 0; i < ids->arr.n; i++) {
        sched_obj *o = sched__obj_find(s, ids->arr.v[i].id);
        sched_task *t = o != NULL ? sched__obj_producer(o) : NULL;
        if (t != NULL && t->worker == w && t->state == T_ASSIGNED)
            sched__task_set_state(s, t, T_RUNNING);
    }
}

/* Output o of a task that runs again: pending, with no copy or value (a copy that survives
 * elsewhere is dropped, so the re-made one is its only copy and nothing is counted twice), and
 * its consumers that counted on it wait for it again. A husk that finished tasks read (lineage)
 * is an object again, to be filled when its task reports. */
static void out_unmake(sched *s, sched_obj *o)
{
    if (o->state == OBJ_READY) {
        s->obj_bytes -= o->size;
        sched__live_uncount(s, o);
        for (uint32_t i = 0; i < o->nlocs; i++) {
            sched_worker *lw = sched__worker_by_id(s, o->locs[i]);
            if (lw != NULL)
                sched__worker_delete(lw, o->id);
        }
        sched__obj_clear_locs(s, o);
        if (o->has_inline && o->size > sizeof o->inline_small)
            spw_free(o->inline_heap);
        o->has_inline = 0;
    }
    if (o->husk && o->lineage > 0) {
        o->husk = 0;
        s->nhusks--;
    }
    o->state = OBJ_PENDING;
    for (sched_arg *c = o->consumers; c != NULL; c = c->cnext) {
        sched_task *ct = sched__arg_task(c);
        if (c->waiting || (ct->state != T_READY && ct->state != T_WAITING))
            continue;
        if (ct->state == T_READY) {
            sched__ready_remove(s, ct);
            sched__task_set_state(s, ct, T_WAITING);
        }
        c->waiting = 1;
        ct->ndeps++;
    }
}

/* A finished task runs again (its inputs exist or are being made again): its arguments are
 * taken and linked as at intake, its outputs made pending. */
static void lineage_rerun(sched *s, sched_task *t)
{
    if (t->retries < UINT8_MAX)
        t->retries++;
    s->lineage_reruns++;
    t->args_released = 0;
    t->placed = 0; /* its output is what matters now, not where it was made */
    sched_arg *ra = sched__task_args(t);
    for (uint32_t i = 0; i < t->nargs; i++, ra = sched__arg_next(ra)) {
        if (ra->kind == PROTO_ARG_INLINE || ra->kept)
            continue;
        sched_obj *in = sched__obj_find(s, ra->id);
        ra->obj = in;
        sched__ref(s, in, REF_TASK_ARG);
        if (ra->held) {
            ra->held = 0; /* the reference taken now holds it */
            in->lineage--;
        }
        DL_APPEND2(in->consumers, ra, cprev, cnext);
        ra->linked = 1;
        if (in->state == OBJ_PENDING) {
            ra->waiting = 1;
            t->ndeps++;
        }
    }
    /* Every output of it is made again: the lost one, and the others (see out_unmake). */
    for (uint32_t i = 0; i < t->nouts; i++) {
        sched_obj *oi = i == 0 ? sched__task_out(t)
                               : sched__obj_find(s, spw_id_output(sched__task_out(t)->id, i));
        if (oi != NULL && (!oi->husk || oi->lineage > 0))
            out_unmake(s, oi);
    }
    sched__task_set_state(s, t, T_WAITING);
    if (t->ndeps == 0)
        ready_push(s, t);
}

/* Makes a lost object pending again by running its task again, and, first, the tasks of those
 * of its task's inputs that are lost too, however deep (their records stay while finished tasks
 * read them: sched_obj.lineage). One pass marks each task it chooses, so a task is run again at
 * most once per loss however many lost outputs need it. Nothing changes unless every task it
 * needs can run: a lost input with no task (a put whose copies are gone) or one that failed
 * leaves o lost. Returns whether o will be made again. */
static bool lineage_recompute(sched *s, sched_obj *o)
{
    sched_task *t0 = sched__obj_task(s, o);
    if (t0 == NULL || t0->state != T_DONE)
        return false;
    if (++s->lineage_mark == 0)
        s->lineage_mark = 1;
    uint32_t mark = s->lineage_mark;
    /* order: the tasks chosen, each after the first task found needing it (a walk over a list,
     * not the stack: chains of any length). */
    uint32_t n = 0, cap = 16, top = 0;
    sched_task **order = spw_malloc(SPW_MOD_SCHED, cap * sizeof *order);
    order[n++] = t0;
    t0->mark = mark;
    bool ok = true;
    while (ok && top < n) {
        sched_task *t = order[top++];
        const sched_arg *a = sched__task_args(t);
        for (uint32_t i = 0; i < t->nargs; i++, a = sched__arg_next(a)) {
            if (a->kind == PROTO_ARG_INLINE || a->kept)
                continue; /* kept: its value is here, its object may be gone */
            sched_obj *in = sched__obj_find(s, a->id);
            if (in == NULL || in->state == OBJ_FAILED) {
                ok = false;
                break;
            }
            if (in->state != OBJ_LOST)
                continue; /* ready, or being made */
            sched_task *it = sched__obj_task(s, in);
            if (it == NULL || it->state != T_DONE) {
                ok = false;
                break;
            }
            if (it->mark == mark)
                continue;
            it->mark = mark;
            if (n == cap) {
                cap *= 2;
                order = spw_realloc(SPW_MOD_SCHED, order, cap * sizeof *order);
            }
            order[n++] = it;
        }
    }
    /* Producers mostly first (a consumer that still finds an input lost is made to wait for it
     * when that input's task runs again: out_unmake). */
    for (uint32_t i = n; ok && i-- > 0;)
        lineage_rerun(s, order[i]);
    spw_free(order);
    return ok;
}

void sched__task_restore_done(sched *s, sched_task *t, const uint64_t *sizes,
                              const uint8_t *const *values)
{
    if (t->state == T_READY)
        sched__ready_remove(s, t);
    sched_obj *o = sched__task_out(t);
    for (uint32_t k = 0; k < t->nouts; k++) {
        sched_obj *oi = sched__task_output(s, t, k);
        if (oi == NULL)
            continue;
        oi->size = sizes[k];
        if (values[k] != NULL && sizes[k] > 0) {
            uint8_t *dst = oi->inline_small;
            if (sizes[k] > sizeof oi->inline_small)
                dst = oi->inline_heap = spw_malloc(SPW_MOD_SCHED, sizes[k]);
            memcpy(dst, values[k], sizes[k]);
            oi->has_inline = 1;
        }
    }
    sched__task_set_state(s, t, T_DONE);
    o->graph_hold++;
    release_args(s, t);
    for (uint32_t k = 0; k < t->nouts; k++) {
        sched_obj *oi = sched__task_output(s, t, k);
        if (oi == NULL)
            continue;
        if (values[k] != NULL || sizes[k] == 0)
            sched__obj_ready(s, oi);
        else
            oi->home = SCHED_HOME_RESTORED; /* pending until a worker reports it */
    }
    o->graph_hold--;
    sched__obj_maybe_free(s, o);
}

bool sched__obj_remake(sched *s, sched_obj *o)
{
    return lineage_recompute(s, o);
}

void sched__worker_lost(sched *s, sched_worker *w, spw_id *ids, size_t k)
{
    char hex[33];
    /* Its queued and running tasks go back to the ready queue, up to the retry limit. */
    sched_task *t, *tmp;
    DL_FOREACH_SAFE2(w->tasks, t, tmp, wnext)
    {
        if (sched__task_ahead(t)) {
            ahead_lost(s, t);
            continue;
        }
        DL_DELETE2(w->tasks, t, wprev, wnext);
        t->wprev = t->wnext = NULL; /* shared with the ready links */
        w->assigned--;
        sched__task_unqueue(s, t);
        t->worker = NULL;
        t->graph->inflight--;
        if (++t->retries > s->opts.task_retries) {
            char msg[SPW_ADDR_MAX + 64];
            snprintf(msg, sizeof msg, "worker %s died while running it, %u times", w->addr,
                     t->retries);
            sched__task_set_state(s, t, T_WAITING);
            sched__task_fail(s, t, SPW_EWORKERLOST, msg);
            continue;
        }
        spw_log(SPW_LOG_NOTICE, "task=%s retried after worker=%s was lost",
                spw_id_hex(sched__task_out(t)->id, hex), w->addr);
        ready_push(s, t);
        sched__obj_maybe_free(
            s, sched__task_out(t)); /* an orphan (nobody wants it) is dropped, not rerun */
    }
    /* Copies on that worker are gone; objects with no copy left are lost, unless their
     * producing task can run again (lineage). Only the objects it held or received (ids, taken
     * from its index before it left: handling one may free others). */
    for (size_t i = 0; i < k; i++) {
        sched_obj *o = sched__obj_find(s, ids[i]);
        if (o == NULL)
            continue;
        if (o->put_worker == w->id && o->state == OBJ_PENDING) {
            sched__obj_set_put_worker(s, o, 0);
            o->graph_hold++;
            sched__obj_fail(s, o, SPW_EOBJLOST, "the worker receiving its upload died");
            o->state = OBJ_LOST;
            o->graph_hold--;
            sched__obj_maybe_free(s, o);
            continue;
        }
        uint32_t before = o->nlocs;
        sched__obj_drop_loc(s, o, w->id);
        if (o->nlocs > 0 && o->nlocs < before)
            sched__copies_restore(s, o); /* kept at more copies (a put with replicas) */
        if (before > 0 && o->nlocs == 0 && o->state == OBJ_READY && !o->has_inline) {
            s->obj_bytes -= o->size;
            o->state = OBJ_LOST;
            sched__live_uncount(s, o); /* counted again if it is made again */
            if (lineage_recompute(s, o))
                spw_log(SPW_LOG_NOTICE, "obj=%s lost with worker=%s: recomputing it",
                        spw_id_hex(o->id, hex), w->addr);
            else {
                s->objects_lost++;
                spw_log(SPW_LOG_WARN, "obj=%s lost with worker=%s", spw_id_hex(o->id, hex),
                        w->addr);
            }
        }
    }
    spw_free(ids);
}
