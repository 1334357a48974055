/* Helpers shared by the end-to-end test files: a client of a cluster, spillway-ctl's answers,
 * the common end of a case, and client processes forked to be killed mid-job. */
#ifndef SPW_E2E_UTIL_H
#define SPW_E2E_UTIL_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "harness.h"
#include "spillway/spillway.h"

/* Connects a client to the cluster (with its secret, if any); fails the test on error. */
spillway *e2e_connect(h_cluster *c);
/* `spillway-ctl --json ARGS...` against the cluster, parsed; NULL if it failed. */
json_t *e2e_ctl_json(h_cluster *c, const char *cmd);
/* The client does a round trip: an inc task on 41 gives 42 (released after). */
void e2e_client_works(spillway *cl);
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

/* The end of a case: closes cl (may be NULL) and asserts that every daemon exits 0. A failure
 * is reported at the caller's line. */
#define E2E_STOP(c, cl) e2e__stop((c), (cl), false, __FILE__, __LINE__)
/* The same after asserting that the cluster is idle within 20 s (e2e_cluster_idle). */
#define E2E_FINISH(c, cl) e2e__stop((c), (cl), true, __FILE__, __LINE__)
void e2e__stop(h_cluster *c, spillway *cl, bool idle_first, const char *file, int line);

/* What a forked client does once connected; non-zero makes it exit with status 1. */
typedef int (*e2e_client_fn)(spillway *cl, void *arg);
/* Forks a process that connects to c (with no secret), runs fn(cl, arg), says so on a pipe and
 * then waits to be killed; with wait_ready, returns once it has said so. The harness kills it
 * at teardown if the case does not. Returns its pid. */
pid_t e2e_client_fork(h_cluster *c, e2e_client_fn fn, void *arg, bool wait_ready);
/* Kills a forked client (SIGKILL) and reaps it. */
void e2e_client_kill(pid_t pid);

#endif
