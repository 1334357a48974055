/* Helpers shared by the end-to-end test files. */
#ifndef SPW_E2E_UTIL_H
#define SPW_E2E_UTIL_H

#include <jansson.h>

#include "harness.h"
#include "spillway/spillway.h"

/* Connects a client to the cluster (with its secret, if any); fails the test on error. */
spillway *e2e_connect(h_cluster *c);
/* `spillway-ctl --json ARGS...` against the cluster, parsed; NULL if it failed. */
json_t *e2e_ctl_json(h_cluster *c, const char *cmd);
/* Fetches a u64 result. */
uint64_t e2e_get_u64(spillway *cl, spillway_ref r);
/* Waits until the scheduler reports no objects and no unfinished tasks. */
bool e2e_cluster_idle(h_cluster *c, int deadline_ms);
/* Sum of "used" over the workers in a status document. */
uint64_t e2e_used_bytes(json_t *status);
/* A "Name:  N kB" field of /proc/PID/status, in KiB; 0 if the process or field is gone. */
long e2e_status_kib(int pid, const char *field);
/* Bytes of shared memory a worker's arena holds (its memfd's allocated blocks), counted once
 * rather than in each mapping process's RssShmem; 0 if the process or the memfd is gone. */
uint64_t e2e_arena_resident(int pid);

#endif
