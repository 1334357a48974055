/*
 * End-to-end harness, after Redis's start_server: starts real spillway daemons on 127.0.0.1
 * with ephemeral ports, each cluster in its own temporary directory, waits for their READY
 * lines (never a fixed sleep), and stops them by pid: SIGTERM, a deadline, then SIGKILL. Daemons
 * die with the test process (PR_SET_PDEATHSIG) if it crashes. A daemon that exits non-zero on
 * SIGTERM (a leak under LeakSanitizer, a failed shutdown) fails the test, and the daemons' logs
 * are printed for failing tests only.
 */
#ifndef SPW_HARNESS_H
#define SPW_HARNESS_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#define H_MAX_WORKERS 16

typedef struct h_proc {
    pid_t pid;
    char addr[64];
    char host[16]; /* the netbed host it runs on ("host3"), or "" for this one */
    char log[512];
    bool exited;
    int status;
} h_proc;

typedef struct h_cluster {
    char dir[256];
    char addr[64]; /* the scheduler's */
    h_proc sched;
    h_proc workers[H_MAX_WORKERS];
    int nworkers;
    char secret_file[512]; /* "" when the cluster has no secret */
    char http[80];         /* the scheduler's HTTP endpoint "127.0.0.1:PORT" when started with
                              --http (the harness adds --http-port-file), else "" */
} h_cluster;

/** Path of a built binary ("spillway-worker"). */
const char *h_bin(const char *name);

/** Starts a scheduler (extra args, NULL-terminated list, may be NULL) in a fresh temp dir.
 * Its HTTP endpoint is off (--http none) unless the args name --http.
 * With secret true, a secret file is made and passed. Aborts the test on failure. */
void h_cluster_start(h_cluster *c, bool secret, const char *const *sched_args);
/** Starts a worker with extra args (NULL-terminated). Returns its index. */
int h_worker_start(h_cluster *c, const char *const *args);

/* Multi-host runs, under tests/netbed/netbed.sh (NETBED_PREFIX set): the daemon starts on the
 * bed's host ("host1"...) through `ip netns exec`, listening on that host's name (extra args
 * may override), and everyone knows the scheduler as "HOST:PORT". The pid is the daemon's own
 * (ip execs it). */
void h_cluster_start_on(h_cluster *c, const char *host, bool secret,
                        const char *const *sched_args);
int h_worker_start_on(h_cluster *c, const char *host, const char *const *args);
/** Starts a scheduler and n workers with "--slots 1 --store-capacity 256M". */
void h_cluster_simple(h_cluster *c, int n);
/** Sends sig to worker i and waits for it to exit (up to 20 s). Returns its wait status. */
int h_worker_kill(h_cluster *c, int i, int sig);
/** Sends sig to the scheduler and waits for it to exit (up to 20 s). Returns its wait status. */
int h_sched_kill(h_cluster *c, int sig);
/** Starts a scheduler again on the address the first one had (same port; the same secret), with
 * extra args; its log is scheduler-N.log. Aborts the test on failure. */
void h_sched_restart(h_cluster *c, const char *const *sched_args);
/** Stops everything; returns true if every daemon exited with status 0. */
bool h_cluster_stop(h_cluster *c);

/** Runs a command (argv, NULL-terminated), capturing stdout and stderr into out (heap,
 * NUL-terminated; may be NULL). Returns the exit status, or -1. Times out after 60 s. */
int h_run(const char *const *argv, char **out);

/** Starts a process without waiting for a READY line; returns its pid. */
pid_t h_spawn(h_cluster *c, const char *const *argv, const char *logname);

/** Polls cond(arg) every 10 ms until true or the deadline (ms); returns cond's last value.
 * For state that has no event to wait on from outside (the scheduler's tables). */
bool h_eventually(bool (*cond)(void *arg), void *arg, int deadline_ms);

/** Daemons started from now on join the cgroup v2 directory dir (its cgroup.procs) before
 * exec; NULL or "" stops that. */
void h_spawn_in_cgroup(const char *dir);

/** Prints the logs of every daemon of the cluster to stderr. */
void h_dump_logs(h_cluster *c);
/** Prints the logs of every cluster started and not stopped by h_cluster_stop, and forgets
 * them: for a test's teardown, since a failed assertion leaves the test before its stop (the
 * h_cluster on its stack is gone by then; the harness kept each cluster's directory). */
void h_dump_unstopped(void);

#endif
