/*
 * The connected workers: the array s->workers (in joining order, with holes filled by the last),
 * an index by id, and a binary min-heap ordered by load, so that placement finds a worker by
 * id and the least loaded worker in O(1), with O(log workers) work when a worker's count of
 * assigned tasks changes, instead of a scan over every worker per task.
 *
 * Invariants: every worker of s->workers is in s->wbyid under its id and at s->wheap[w->heap_at],
 * and nothing else is; a heap entry carries its worker's keys (load and assign_seq: a worker's
 * own change is applied by sched__worker_load), and no entry is less than its parent. Load is assigned /
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

/* The same order on heap entries, which carry their worker's keys: a sift reads the array
 * only, not a worker record per level. */
bool sched__wslot_less(const sched_wslot *a, const sched_wslot *b)
{
    uint64_t la = (uint64_t)a->assigned * b->slots, lb = (uint64_t)b->assigned * a->slots;
    return la != lb ? la < lb : a->seq < b->seq;
}

static sched_wslot slot_of(sched_worker *w)
{
    return (sched_wslot){.assigned = w->assigned, .slots = w->slots, .seq = w->assign_seq, .w = w};
}

static void heap_set(sched *s, uint32_t i, sched_wslot e)
{
    s->wheap[i] = e;
    e.w->heap_at = i;
}

static void sift_up(sched *s, uint32_t i)
{
    sched_wslot e = s->wheap[i];
    while (i > 0) {
        uint32_t p = (i - 1) / 2;
        if (!sched__wslot_less(&e, &s->wheap[p]))
            break;
        heap_set(s, i, s->wheap[p]);
        i = p;
    }
    heap_set(s, i, e);
}

static void sift_down(sched *s, uint32_t i)
{
    sched_wslot e = s->wheap[i];
    for (;;) {
        uint32_t c = 2 * i + 1;
        if (c >= s->nworkers)
            break;
        if (c + 1 < s->nworkers && sched__wslot_less(&s->wheap[c + 1], &s->wheap[c]))
            c++;
        if (!sched__wslot_less(&s->wheap[c], &e))
            break;
        heap_set(s, i, s->wheap[c]);
        i = c;
    }
    heap_set(s, i, e);
}

void sched__workers_add(sched *s, sched_worker *w)
{
    if (s->nworkers == s->capworkers) {
        s->capworkers = s->capworkers ? s->capworkers * 2 : 8;
        s->workers = spw_realloc(SPW_MOD_SCHED, s->workers, s->capworkers * sizeof *s->workers);
        s->wheap = spw_realloc(SPW_MOD_SCHED, s->wheap, s->capworkers * sizeof *s->wheap);
    }
    s->workers[s->nworkers] = w;
    s->wheap[s->nworkers] = slot_of(w);
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
    if (s->load_later == w)
        s->load_later = NULL;
    uint32_t at = w->heap_at;
    sched_wslot last = s->wheap[--s->nworkers];
    if (last.w != w) {
        heap_set(s, at, last);
        sift_up(s, at);
        sift_down(s, last.w->heap_at);
    }
    w->heap_at = UINT32_MAX;
    HASH_DEL(s->wbyid, w);
}

void sched__worker_load(sched *s, sched_worker *w)
{
    if (w->heap_at == UINT32_MAX)
        return; /* left the cluster: its tasks are being handed back */
    if (w == s->load_later)
        return; /* within its TASK_DONES frame: once at its end */
    /* Its entry's keys were what the heap was ordered by until now (the heap is right about
     * every entry): with the new ones it moves up or down. */
    s->wheap[w->heap_at] = slot_of(w);
    sift_up(s, w->heap_at);
    sift_down(s, w->heap_at);
}

sched_worker *sched__worker_least_loaded(sched *s)
{
    return s->nworkers > 0 ? s->wheap[0].w : NULL;
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
