/*
 * The connected workers: the array s->workers (in joining order, with holes filled by the last),
 * an index by id, and a binary min-heap ordered by load, so that placement finds a worker by
 * id and the least loaded worker in O(1), with O(log workers) work when a worker's count of
 * assigned tasks changes, instead of a scan over every worker per task.
 *
 * Invariants: every worker of s->workers is in s->wbyid under its id and at s->wheap[w->heap_at],
 * and nothing else is; no worker in the heap is less loaded than its parent. Load is assigned /
 * slots, compared exactly (cross-multiplied); between equal loads the worker given a task least
 * recently (assign_seq) comes first, which spreads equal work round robin.
 */
#include <string.h>

#include "sched_int.h"

bool sched__worker_less(const sched_worker *a, const sched_worker *b)
{
    uint64_t la = (uint64_t)a->assigned * b->slots, lb = (uint64_t)b->assigned * a->slots;
    return la != lb ? la < lb : a->assign_seq < b->assign_seq;
}

static void heap_set(sched *s, uint32_t i, sched_worker *w)
{
    s->wheap[i] = w;
    w->heap_at = i;
}

static void sift_up(sched *s, uint32_t i)
{
    sched_worker *w = s->wheap[i];
    while (i > 0) {
        uint32_t p = (i - 1) / 2;
        if (!sched__worker_less(w, s->wheap[p]))
            break;
        heap_set(s, i, s->wheap[p]);
        i = p;
    }
    heap_set(s, i, w);
}

static void sift_down(sched *s, uint32_t i)
{
    sched_worker *w = s->wheap[i];
    for (;;) {
        uint32_t c = 2 * i + 1;
        if (c >= s->nworkers)
            break;
        if (c + 1 < s->nworkers && sched__worker_less(s->wheap[c + 1], s->wheap[c]))
            c++;
        if (!sched__worker_less(s->wheap[c], w))
            break;
        heap_set(s, i, s->wheap[c]);
        i = c;
    }
    heap_set(s, i, w);
}

void sched__workers_add(sched *s, sched_worker *w)
{
    if (s->nworkers == s->capworkers) {
        s->capworkers = s->capworkers ? s->capworkers * 2 : 8;
        s->workers = spw_realloc(SPW_MOD_SCHED, s->workers, s->capworkers * sizeof *s->workers);
        s->wheap = spw_realloc(SPW_MOD_SCHED, s->wheap, s->capworkers * sizeof *s->wheap);
    }
    s->workers[s->nworkers] = w;
    s->wheap[s->nworkers] = w;
    w->heap_at = s->nworkers++;
    sift_up(s, w->heap_at);
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
    uint32_t at = w->heap_at;
    sched_worker *last = s->wheap[--s->nworkers];
    if (last != w) {
        heap_set(s, at, last);
        sift_up(s, at);
        sift_down(s, last->heap_at);
    }
    w->heap_at = UINT32_MAX;
    HASH_DEL(s->wbyid, w);
}

void sched__worker_load(sched *s, sched_worker *w)
{
    if (w->heap_at == UINT32_MAX)
        return; /* left the cluster: its tasks are being handed back */
    sift_up(s, w->heap_at);
    sift_down(s, w->heap_at);
}

sched_worker *sched__worker_least_loaded(sched *s)
{
    return s->nworkers > 0 ? s->wheap[0] : NULL;
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
    spw_free(s->wheap);
    s->wheap = NULL;
}
