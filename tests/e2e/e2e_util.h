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

/* A cluster and a name (a worker's, a figure's): the argument of many h_eventually
 * conditions. */
typedef struct e2e_named {
    h_cluster *c;
    const char *name;
} e2e_named;

/* Connects a client to the cluster (with its secret, if any); fails the test on error. */
spillway *e2e_connect(h_cluster *c);
/* The same, to addr (the cluster's scheduler, or a proxy in front of it), with reconnect_ms as
 * spillway_opts.reconnect_ms (E2E_RECONNECT_DEFAULT: the default). */
#define E2E_RECONNECT_DEFAULT (-1)
spillway *e2e_connect_at(h_cluster *c, const char *addr, int reconnect_ms);
/* `spillway-ctl --json ARGS...` against the cluster, parsed; NULL if it failed. */
json_t *e2e_ctl_json(h_cluster *c, const char *cmd);
/* The client does a round trip: an inc task on 41 gives 42 (released after). */
void e2e_client_works(spillway *cl);
/* Fails the test unless the client's last error text contains want (printed either way). */
void e2e_errmsg_has(spillway *cl, const char *want);
/* Writes text to path (created or truncated) and gives it mode. */
void e2e_write_file(const char *path, const char *text, mode_t mode);
/* Fetches a u64 result. */
uint64_t e2e_get_u64(spillway *cl, spillway_ref r);
/* Waits until the scheduler reports no objects and no unfinished tasks. */
bool e2e_cluster_idle(h_cluster *c, int deadline_ms);
/* Whether p's log has a line with needle within deadline_ms (polled, as h_eventually). */
bool e2e_logged(const h_proc *p, const char *needle, int deadline_ms);
/* The element of the JSON array whose string member key equals value (borrowed), or NULL. */
json_t *e2e_json_find(json_t *array, const char *key, const char *value);
/* Sum of "used" over the workers in a status document. */
uint64_t e2e_used_bytes(json_t *status);
/* Sum of "used" over the workers in a fresh `spillway-ctl status`, into *used; false (and
 * *used untouched) if that fails. */
bool e2e_status_used(h_cluster *c, uint64_t *used);
/* Sum of the workers' memory.FIELD ("pinned", "peak_used", "tasks_done"...) in a fresh
 * `spillway-ctl status`; 0 if that fails. */
uint64_t e2e_memory_sum(h_cluster *c, const char *field);
/* Copies of object r in a fresh `spillway-ctl memory` whose state is `state` ("memory",
 * "spilled"...), or all of them for NULL; 0 when r is not listed. */
size_t e2e_copies(h_cluster *c, spillway_ref r, const char *state);
/* The same, counting only the copies on the worker named `node` (every worker for NULL). */
size_t e2e_copies_on(h_cluster *c, spillway_ref r, const char *node, const char *state);
/* Field `field` of the worker named `name` in a fresh `spillway-ctl status` (of its memory
 * object when mem); 0 when it is not listed. */
uint64_t e2e_worker_figure(h_cluster *c, const char *name, bool mem, const char *field);
/* Runs fill(size[, pattern]) on the worker named `worker`, kept, and waits for it: an object
 * stored there (pattern NULL: zeros). */
spillway_ref e2e_fill_on(spillway *cl, const char *worker, uint64_t size, const char *pattern);
/* Submits graph g, asserting success (a failure is reported at the caller's line), and frees
 * it; the caller's line is the graph's call site, as with spillway_submit. */
#define E2E_SUBMIT(g) e2e__submit((g), SPILLWAY_SITE, __FILE__, __LINE__)
void e2e__submit(spillway_graph *g, const char *site, const char *file, int line);
/* Submits one kept task fn(x) in a graph of its own and returns its result. The caller's line
 * is the task's and the graph's call site, as with spillway_task and spillway_submit. */
#define e2e_submit_u64(cl, fn, x) e2e__submit_u64((cl), (fn), (x), SPILLWAY_SITE)
spillway_ref e2e__submit_u64(spillway *cl, const char *fn, uint64_t x, const char *site);
/* A datagram socket bound at path (removed first): what NOTIFY_SOCKET names for a daemon. */
int e2e_notify_socket(const char *path);
/* Receives one notification from fd within timeout_s seconds into msg (NUL-terminated); the
 * test fails if none comes. */
void e2e_notify_recv(int fd, int timeout_s, char *msg, size_t len);
/* Sockets of /proc/net/tcp (IPv4) on local port whose state is in `states`, a mask of
 * 1u << state (1 ESTABLISHED, 8 CLOSE_WAIT); -1 if the table cannot be read. */
int e2e_tcp_count(int port, unsigned states);
/* Entries of a directory, the dot files aside; 0 if it cannot be read. */
int e2e_dir_entries(const char *path);
/* Blocks allocated to the files behind a process's descriptors whose link contains `what`
 * (the arena's memfd, the spill environment's unlinked data.mdb), counted once per file. */
uint64_t e2e_fd_blocks(int pid, const char *what);
/* A node's memory: the anonymous memory of worker pid and of its executors (pages a child
 * shares copy-on-write with the worker counted once) plus the pages its arena holds (the spill
 * files' pages in the page cache are the kernel's to reclaim). */
uint64_t e2e_node_memory(int pid);
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
