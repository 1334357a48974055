/* The sort job of spillway-bench's sort case and of spw-netbed-bench's sort_hosts, in one
 * place: the example sort plugin's gen tasks, a shuffle (split, sort) and a check per
 * partition, all in one graph, and what each check must return. */
#ifndef SPW_SORT_JOB_H
#define SPW_SORT_JOB_H

#include <stdlib.h>

#include "spillway/datagen.h"
#include "spillway/spillway.h"

/* Adds to g gen tasks making `total` u64 in blocks of per_block (seeds 1, 2, ...), the
 * shuffle into p partitions and check(partition j, j, p), kept as checks[j] (24 bytes each:
 * count, xor, sum). Returns 0 or the first error. */
static inline int sort_job_add(spillway_graph *g, uint64_t total, uint64_t per_block, uint32_t p,
                               spillway_ref *checks)
{
    uint32_t nb = (uint32_t)((total + per_block - 1) / per_block);
    spillway_arg *in = calloc(nb, sizeof *in);
    spillway_ref *parts = calloc(p, sizeof *parts);
    int rc = in == NULL || parts == NULL ? SPW_ENOMEM : 0;
    for (uint32_t b = 0; b < nb && rc == 0; b++) {
        uint64_t n = b + 1 < nb ? per_block : total - (uint64_t)b * per_block;
        spillway_arg a[2] = {spillway_arg_u64(n), spillway_arg_u64(1 + b)};
        spillway_ref r;
        rc = spillway_task(g, "gen", a, 2, 0, &r);
        in[b] = spillway_arg_ref(r);
    }
    spillway_arg np = spillway_arg_u64(p);
    spillway_shuffle_opts o = {.partitions = p};
    if (rc == 0)
        rc = spillway_graph_shuffle(g, "split", in, nb, &np, 1, "sort", &o, 0, parts);
    for (uint32_t j = 0; j < p && rc == 0; j++) {
        spillway_arg a[3] = {spillway_arg_ref(parts[j]), spillway_arg_u64(j), np};
        rc = spillway_task(g, "check", a, 3, SPILLWAY_KEEP, &checks[j]);
    }
    free(in);
    free(parts);
    return rc;
}

/* What the checks of sort_job_add must return, computed here: want[3 j ..] = count, xor and
 * sum of the values in bucket j. */
static inline void sort_job_expect(uint64_t total, uint64_t per_block, uint32_t p,
                                   uint64_t *want)
{
    uint32_t nb = (uint32_t)((total + per_block - 1) / per_block);
    for (uint32_t b = 0; b < nb; b++) {
        uint64_t n = b + 1 < nb ? per_block : total - (uint64_t)b * per_block, x = 1 + b;
        for (uint64_t k = 0; k < n; k++) {
            uint64_t v = spw_splitmix64(&x), *w = &want[3 * (((unsigned __int128)v * p) >> 64)];
            w[0]++;
            w[1] ^= v;
            w[2] += v;
        }
    }
}

#endif
