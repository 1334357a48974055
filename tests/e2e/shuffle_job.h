/* Shuffle jobs checked byte for byte against a computation in the test process, shared by the
 * end-to-end tests on 127.0.0.1 (test_e2e_shuffle.c) and the multi-host bed
 * (netbed/test_multihost.c). Both need workers loaded with the example sort plugin. */
#ifndef SPW_SHUFFLE_JOB_H
#define SPW_SHUFFLE_JOB_H

#include <stdint.h>

#include "spillway/spillway.h"

/* Deals nblocks inputs of u64 values into p partitions: map split(block, p) (one output per
 * bucket), reduce and merge concat. Half the inputs are puts of their own, half views of one
 * shared put; block i holds values_of(i) values. Partition j must be bucket j of every block,
 * in block order and in each block's order: every byte is compared. opts gives the fan-in and
 * the merge budget (partitions is set here). Returns the graph's task count. */
uint64_t shuffle_job_deal(spillway *cl, uint32_t nblocks, uint64_t (*values_of)(uint32_t i),
                          uint32_t p, spillway_shuffle_opts opts);

/* Sorts nblocks blocks of `values` u64 each, made by gen tasks in the shuffle's graph: map
 * split, reduce sort, p partitions. Each partition is fetched and compared, value by value,
 * with the same values sorted here. While the job runs, sample(arg) is called every few
 * milliseconds (sample may be NULL). */
void shuffle_job_sort(spillway *cl, uint32_t nblocks, uint64_t values, uint32_t p,
                      void (*sample)(void *arg), void *arg);

#endif
