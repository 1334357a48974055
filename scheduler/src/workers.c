/*
 * The connected workers: the array s->workers (in joining order, with holes filled by the last),
 * an index by id, and load buckets, so that placement finds a worker by id and the least loaded
 * worker in O(1), and a change of a worker's count of assigned tasks costs O(1), instead of a
 * scan over every worker per task (or a heap's O(log workers), which touches a different path of
 * entries for every task once thousands of workers share the same load).
 *
 * Workers are grouped by slot count (a class: clusters have few); in a class, bucket k lists the
 * workers with k tasks assigned, in the order they came into it, which spreads equal work round
 * robin. The least loaded worker is the least (load = assigned / slots, compared exactly) of the
 * classes' first workers of their lowest non-empty bucket. Invariants: every worker of s->workers
 * is in s->wbyid under its id and in bucket w->load_at of class w->wclass, and nothing else is;
 * load_at is w->assigned except within a TASK_DONES frame (s->load_later); a class's min is its
 * lowest non-empty bucket (nbuckets when it has none).
 */
#include <string.h>

#include <utlist.h>

#include "sched_int.h"

bool sched__worker_less(const sched_worker *a, const sched_worker *b)
{
    uint64_t la = (uint64_t)a->assigned * b->slots, lb = (uint64_t)b->assigned * a->slots;
    return la != lb ? la < lb : a->assign_seq < b->assign_seq;
}

static sched_wclass *class_of(sched *s, uint32_t slots)
{
    for (uint32_t i = 0; i < s->nwclass; i++)
        if (s->wclass[i].slots == slots)
            return &s->wclass[i];
    s->wclass = spw_realloc(SPW_MOD_SCHED, s->wclass, (s->nwclass + 1) * sizeof *s->wclass);
    sched_wclass *c = &s->wclass[s->nwclass++];
    *c = (sched_wclass){.slots = slots};
    return c;
}

/* Puts w at the end of the bucket of its current count of assigned tasks. */
static void bucket_put(sched_wclass *c, sched_worker *w)
{
    uint32_t k = w->assigned;
    if (k >= c->nbuckets) {
        uint32_t n = c->nbuckets ? c->nbuckets : 16;
        while (n <= k)
            n *= 2;
        c->head = spw_realloc(SPW_MOD_SCHED, c->head, n * sizeof *c->head);
        memset(c->head + c->nbuckets, 0, (n - c->nbuckets) * sizeof *c->head);
        if (c->min == c->nbuckets)
            c->min = n;
        c->nbuckets = n;
    }
    DL_APPEND2(c->head[k], w, lprev, lnext);
    w->load_at = k;
    if (k < c->min)
        c->min = k;
}

static void bucket_take(sched_wclass *c, sched_worker *w)
{
    uint32_t k = w->load_at;
    DL_DELETE2(c->head[k], w, lprev, lnext);
    w->lprev = w->lnext = NULL;
    w->load_at = UINT32_MAX;
    if (k == c->min)
        while (c->min < c->nbuckets && c->head[c->min] == NULL)
            c->min++;
}

void sched__workers_add(sched *s, sched_worker *w)
{
    if (s->nworkers == s->capworkers) {
        s->capworkers = s->capworkers ? s->capworkers * 2 : 8;
        s->workers = spw_realloc(SPW_MOD_SCHED, s->workers, s->capworkers * sizeof *s->workers);
    }
    s->workers[s->nworkers++] = w;
    sched_wclass *c = class_of(s, w->slots);
    w->wclass = (uint32_t)(c - s->wclass);
    c->n++;
    bucket_put(c, w);
    HASH_ADD(hh, s->wbyid, id, sizeof w->id, w);
}

void sched__workers_remove(sched *s, sched_worker *w)
{
    for (uint32_t i = 0; i < s->nworkers; i++) {
        if (s->workers[i] == w) {
            s->workers[i] = s->workers[s->nworkers - 1];
            break;
        }
    }
    s->nworkers--;
    if (s->load_later == w)
        s->load_later = NULL;
    if (s->fill == w)
        s->fill = NULL;
    sched_wclass *c = &s->wclass[w->wclass];
    bucket_take(c, w);
    c->n--;
    HASH_DEL(s->wbyid, w);
}

void sched__worker_load(sched *s, sched_worker *w)
{
    if (w->load_at == UINT32_MAX)
        return; /* left the cluster: its tasks are being handed back */
    if (w == s->load_later || w->load_at == w->assigned)
        return; /* within its TASK_DONES frame: once at its end */
    sched_wclass *c = &s->wclass[w->wclass];
    bucket_take(c, w);
    bucket_put(c, w);
}

sched_worker *sched__worker_least_loaded(sched *s)
{
    sched_worker *best = NULL;
    for (uint32_t i = 0; i < s->nwclass; i++) {
        const sched_wclass *c = &s->wclass[i];
        if (c->min >= c->nbuckets)
            continue;
        sched_worker *w = c->head[c->min];
        if (best == NULL || sched__worker_less(w, best))
            best = w;
    }
    return best;
}

sched_worker *sched__worker_by_id(sched *s, uint32_t id)
{
    sched_worker *w;
    HASH_FIND(hh, s->wbyid, &id, sizeof id, w);
    return w;
}

void sched__workers_free(sched *s)
{
    HASH_CLEAR(hh, s->wbyid);
    for (uint32_t i = 0; i < s->nwclass; i++)
        spw_free(s->wclass[i].head);
    spw_free(s->wclass);
    s->wclass = NULL;
    s->nwclass = 0;
}
