/*
 * STATUS replies for spillway-ctl status: the scheduler's address and uptime, its workers with
 * their slots and store figures, its sessions, tasks by state and the directory's totals. Every
 * figure is a counter kept up to date elsewhere; nothing here walks the task table.
 */
#include <string.h>

#include "sched_int.h"

/* Plugin i of a worker. */
static void put_wplugin(proto_enc *e, uint32_t i, void *arg)
{
    const sched_wplugin *x = &((const sched_worker *)arg)->plugins[i];
    proto_put_plug_rec(e, &(proto_plug_rec){.hash = {x->hash, PROTO_PLUGIN_HASH_LEN},
                                            .name = x->name,
                                            .size = x->size,
                                            .uploaded = x->uploaded});
}

static void put_worker(proto_enc *e, uint32_t i, void *arg)
{
    const sched_worker *w = ((const sched *)arg)->workers[i];
    proto_put_sworker_rec(e, &(proto_sworker_rec){.id = w->id,
                                                  .addr = w->addr,
                                                  .name = w->name,
                                                  .slots = w->slots,
                                                  .busy = w->stats[PROTO_STAT_RUNNING],
                                                  .assigned = w->assigned,
                                                  .state = w->drain ? w->drain
                                                           : w->stats[PROTO_STAT_PAUSED]
                                                               ? PROTO_WSTATE_PAUSED
                                                               : PROTO_WSTATE_RUNNING,
                                                  .stats = {w->stats, PROTO_STAT_COUNT},
                                                  .plugins = {.n = w->nplugins,
                                                              .put = put_wplugin,
                                                              .arg = (void *)w}});
}

/* Sessions in hash order; the cursor is the next one. */
static void put_session(proto_enc *e, uint32_t i, void *arg)
{
    sched_session **next = arg;
    const sched_session *ss = *next;
    *next = ss->hh.next;
    proto_put_sclient_rec(e, &(proto_sclient_rec){.session = ss->id,
                                                  .host = ss->host,
                                                  .pid = ss->pid,
                                                  .role = (uint64_t)ss->role,
                                                  .tasks = ss->tasks_submitted,
                                                  .refs = ss->nrefs,
                                                  .drop_ms = sched__session_drop_ms(ss),
                                                  .omit_drop_ms = ss->conn != NULL});
}

void sched__status(sched *s, proto_conn *c, uint64_t req)
{
    uint64_t now = spw_wall_ms();
    uint64_t conns[PROTO_ROLE_PEER + 1] = {0};
    conns[PROTO_ROLE_WORKER] = s->nworkers;
    for (sched_session *ss = s->sessions; ss != NULL; ss = ss->hh.next)
        if (ss->role >= 0 && ss->role <= PROTO_ROLE_PEER)
            conns[ss->role]++;
    uint64_t io[PROTO_IO_COUNT];
    proto_ctx_io(s->ctx, io);
    uint64_t latency[PROTO_LATENCY_NBOUNDS + 2];
    memcpy(latency, s->latency, sizeof s->latency);
    latency[PROTO_LATENCY_NBOUNDS + 1] = s->latency_sum_us;
    uint64_t lineage[PROTO_LINEAGE_COUNT] = {[PROTO_LINEAGE_RERUNS] = s->lineage_reruns,
                                             [PROTO_LINEAGE_LOST] = s->objects_lost};
    sched_session *cursor = s->sessions;
    proto_send_status(
        c, req,
        &(proto_status_msg){
            .now_ms = now,
            .uptime_ms = now - s->start_ms,
            .listen = s->listen,
            .workers = {.n = s->nworkers, .put = put_worker, .arg = s},
            .clients = {.n = HASH_COUNT(s->sessions), .put = put_session, .arg = &cursor},
            .tasks = {s->tstate, PROTO_TSTATE_COUNT},
            .objects = s->objects.n - s->nhusks,
            .obj_bytes = s->obj_bytes,
            .refs = {s->refs, REF_KINDS},
            .conns = {conns, PROTO_ROLE_PEER + 1},
            .io = {io, PROTO_IO_COUNT},
            .latency = {latency, PROTO_LATENCY_NBOUNDS + 2},
            .lineage = {lineage, PROTO_LINEAGE_COUNT}});
}
