/*
 * STATUS replies for spillway-ctl status: the scheduler's address and uptime, its workers with
 * their slots and store figures, its sessions, tasks by state and the directory's totals. Every
 * figure is a counter kept up to date elsewhere; nothing here walks the task table.
 */
#include <string.h>

#include "sched_int.h"

void sched__status(sched *s, proto_conn *c, uint64_t req)
{
    proto_enc e;
    proto_enc_begin(&e, proto_conn_out(c), PROTO_STATUS, req, 12);
    uint64_t now = spw_wall_ms();
    proto_put_u(&e, now);
    proto_put_u(&e, now - s->start_ms);
    proto_put_str(&e, s->listen);
    proto_put_arr(&e, s->nworkers);
    for (uint32_t i = 0; i < s->nworkers; i++) {
        const sched_worker *w = s->workers[i];
        proto_put_arr(&e, 8);
        proto_put_u(&e, w->id);
        proto_put_str(&e, w->addr);
        proto_put_str(&e, w->name);
        proto_put_u(&e, w->slots);
        proto_put_u(&e, w->stats[PROTO_STAT_RUNNING]);
        proto_put_u(&e, w->assigned);
        proto_put_u(&e, w->stats[PROTO_STAT_PAUSED] ? 1 : 0);
        proto_put_arr(&e, PROTO_STAT_COUNT);
        for (int k = 0; k < PROTO_STAT_COUNT; k++)
            proto_put_u(&e, w->stats[k]);
    }
    proto_put_arr(&e, HASH_COUNT(s->sessions));
    for (sched_session *ss = s->sessions; ss != NULL; ss = ss->hh.next) {
        proto_put_arr(&e, 6);
        proto_put_u(&e, ss->id);
        proto_put_str(&e, ss->host);
        proto_put_u(&e, ss->pid);
        proto_put_u(&e, (uint64_t)ss->role);
        proto_put_u(&e, ss->tasks_submitted);
        proto_put_u(&e, ss->nrefs);
    }
    proto_put_arr(&e, PROTO_TSTATE_COUNT);
    for (int k = 0; k < PROTO_TSTATE_COUNT; k++)
        proto_put_u(&e, s->tstate[k]);
    proto_put_u(&e, HASH_COUNT(s->objects));
    proto_put_u(&e, s->obj_bytes);
    proto_put_arr(&e, REF_KINDS);
    for (int k = 0; k < REF_KINDS; k++)
        proto_put_u(&e, s->refs[k]);
    uint64_t conns[PROTO_ROLE_PEER + 1] = {0};
    conns[PROTO_ROLE_WORKER] = s->nworkers;
    for (sched_session *ss = s->sessions; ss != NULL; ss = ss->hh.next)
        if (ss->role >= 0 && ss->role <= PROTO_ROLE_PEER)
            conns[ss->role]++;
    proto_put_arr(&e, PROTO_ROLE_PEER + 1);
    for (int k = 0; k <= PROTO_ROLE_PEER; k++)
        proto_put_u(&e, conns[k]);
    uint64_t io[PROTO_IO_COUNT];
    proto_ctx_io(s->ctx, io);
    proto_put_arr(&e, PROTO_IO_COUNT);
    for (int k = 0; k < PROTO_IO_COUNT; k++)
        proto_put_u(&e, io[k]);
    proto_put_arr(&e, PROTO_LATENCY_NBOUNDS + 2);
    for (int k = 0; k <= PROTO_LATENCY_NBOUNDS; k++)
        proto_put_u(&e, s->latency[k]);
    proto_put_u(&e, s->latency_sum_us);
    proto_conn_send(c, &e);
}
