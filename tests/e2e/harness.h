/*
 * End-to-end harness, after Redis's start_server: starts real spillway daemons on 127.0.0.1
 * with ephemeral ports, each cluster in its own temporary directory, waits for their READY
 * lines (never a fixed sleep), and stops them by pid: SIGTERM, a deadline, then SIGKILL.
 * The harness owns every cluster and helper process a case starts. A case is declared with
 * H_CASE: its teardown stops whatever the case left running and, when the case failed (a
 * cmocka assertion, a signal, a daemon that exited non-zero), prints the logs of the daemons
 * of every cluster the case started, then removes their directories. Daemons also die with
 * the test process (PR_SET_PDEATHSIG) if it crashes. Single-threaded: only a case's main
 * thread starts and stops clusters.
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
    bool encrypt;          /* e2e_connect and e2e_ctl_json encrypt loopback too (the case
                              started the daemons with --encrypt ... --encrypt-local) */
    bool stopped;          /* h_cluster_stop ran */
    bool stop_ok;          /* ... and every daemon exited 0 */
} h_cluster;

/* ------------------------------------------------------------------ cases */

/* One case: the test function and whether it returned (an assertion leaves it by longjmp). */
typedef struct h_case {
    void (*fn)(void);
    bool finished;
} h_case;

int h_case_setup(void **state);
void h_case_run(void **state);
int h_case_teardown(void **state);

/** A CMUnitTest for `static void fn(void)` run under the harness's life cycle (see the top of
 * this file). The case table is a file-scope array, so the compound literal has static
 * storage. */
#define H_CASE(fn)                                                                                 \
    {                                                                                              \
#fn, h_case_run, h_case_setup, h_case_teardown, &(h_case)                                  \
        {                                                                                          \
            fn, false                                                                              \
        }                                                                                          \
    }

/** Skips the current case (cmocka's skip()) without printing its daemons' logs. */
void h_skip(void);

/* --------------------------------------------------------------- clusters */

/** Path of a built binary ("spillway-worker"). */
const char *h_bin(const char *name);

/** Starts a scheduler (extra args, NULL-terminated list, may be NULL) in a fresh temp dir.
 * Its HTTP endpoint is off (--http none) unless the args name --http.
 * With secret true, a secret file is made and passed. Aborts the test on failure.
 * With SPW_E2E_HOSTS="H1 H2 ..." in the environment (an e2e case run on the multi-host bed,
 * tests/netbed) the scheduler listens on H1 and h_worker_start places workers on H2, H3, ... in
 * turn, by host name.
 * @return the cluster, owned by the harness until the case's teardown. */
h_cluster *h_cluster_start(bool secret, const char *const *sched_args);
/** A cluster of no daemon yet, only its directory: for a case that starts its own processes
 * there (h_spawn). */
h_cluster *h_cluster_bare(void);
/** Starts a worker with extra args (NULL-terminated). Returns its index. */
int h_worker_start(h_cluster *c, const char *const *args);
/** Starts n workers with the same extra args. */
void h_workers_start(h_cluster *c, int n, const char *const *args);

/* Multi-host runs, under tests/netbed/netbed.sh (NETBED_PREFIX set): the daemon starts on the
 * bed's host ("host1"...) through `ip netns exec`, listening on that host's name (extra args
 * may override), and everyone knows the scheduler as "HOST:PORT". The pid is the daemon's own
 * (ip execs it). */
h_cluster *h_cluster_start_on(const char *host, bool secret, const char *const *sched_args);
int h_worker_start_on(h_cluster *c, const char *host, const char *const *args);
/** Starts a scheduler and n workers with "--slots 1 --store-capacity 256M". */
h_cluster *h_cluster_simple(int n);
/** Sends sig to worker i and waits for it to exit (up to 20 s). Returns its wait status. */
int h_worker_kill(h_cluster *c, int i, int sig);
/** Sends sig to the scheduler and waits for it to exit (up to 20 s). Returns its wait status. */
int h_sched_kill(h_cluster *c, int sig);
/** Starts a scheduler again on the address the first one had (same port; the same secret), with
 * extra args; its log is scheduler-N.log. Aborts the test on failure. */
void h_sched_restart(h_cluster *c, const char *const *sched_args);
/** Stops every daemon still running; returns true if each exited with status 0. The cluster's
 * directory and logs stay until the case's teardown. */
bool h_cluster_stop(h_cluster *c);

/** Stops c if it still runs, removes its directory and frees it: for a program that is not a
 * case (the bench) and starts clusters one after another. c is invalid afterwards. */
void h_cluster_release(h_cluster *c);

/* ------------------------------------------------------- other processes */

/** Runs a command (argv, NULL-terminated), capturing stdout and stderr into out (heap,
 * NUL-terminated; may be NULL). Returns the exit status, or -1. Times out after 60 s. */
int h_run(const char *const *argv, char **out);

/** Starts a process without waiting for a READY line, its output in the cluster's LOGNAME.log;
 * returns its pid. The teardown kills it if it still runs. */
pid_t h_spawn(h_cluster *c, const char *const *argv, const char *logname);

/** The teardown kills pid (a child of this process) if it still runs then. */
void h_track(pid_t pid);

/** Polls cond(arg) every 10 ms until true or the deadline (ms); returns cond's last value.
 * For state that has no event to wait on from outside (the scheduler's tables). */
bool h_eventually(bool (*cond)(void *arg), void *arg, int deadline_ms);

/** Daemons started from now on join the cgroup v2 directory dir (its cgroup.procs) before
 * exec; NULL or "" stops that. */
void h_spawn_in_cgroup(const char *dir);

/* -------------------------------------------------------------------- logs */

/** Lines of a daemon's log that contain needle. */
int h_log_count(const h_proc *p, const char *needle);
/** Prints the logs of every daemon of the cluster to stderr. */
void h_dump_logs(h_cluster *c);

#endif
