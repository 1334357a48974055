/* End-to-end harness; see harness.h for the life cycle. The clusters and helper processes of the
 * running case are kept in two static tables: a cluster is added when started and freed, with
 * its directory, by the case's teardown; a helper process is held by a pidfd, so killing it at
 * teardown can never reach another process that took its pid. */
#include "harness.h"

#include "spillway/base.h"

#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

const char *h_bin(const char *name)
{
    static char path[8][512];
    static int next;
    char *p = path[next++ % 8];
    const char *dir = getenv("SPW_BIN_DIR");
    snprintf(p, 512, "%s/%s", dir != NULL ? dir : SPW_BIN_DIR, name);
    return p;
}

static void die(const char *fmt, const char *arg)
{
    fprintf(stderr, "harness: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n");
    abort();
}

/* ------------------------------------------------- what the running case owns */

#define H_MAX_CLUSTERS 8
#define H_MAX_TRACKED 256

static h_cluster *clusters[H_MAX_CLUSTERS]; /* started by the running case; NULL: free slot */
static int tracked[H_MAX_TRACKED];          /* pidfds of its helper processes; -1: free slot */
static h_case *current;                     /* the running case, between setup and teardown */
static bool skipped;                        /* the running case called h_skip */
static pid_t owner;                         /* the test process (not a forked child) */

static void release_at_exit(void);

/* The tables start empty, and whatever is in them at exit is released. */
static void tables_init(void)
{
    if (owner != 0)
        return;
    owner = getpid();
    for (int i = 0; i < H_MAX_TRACKED; i++)
        tracked[i] = -1;
    atexit(release_at_exit);
}

static h_cluster *cluster_new(void)
{
    tables_init();
    for (int i = 0; i < H_MAX_CLUSTERS; i++) {
        if (clusters[i] == NULL) {
            clusters[i] = calloc(1, sizeof *clusters[i]);
            if (clusters[i] == NULL)
                die("%s", "out of memory");
            return clusters[i];
        }
    }
    die("more than %s clusters in one case", "8");
    return NULL;
}

void h_track(pid_t pid)
{
    tables_init();
    int fd = (int)syscall(SYS_pidfd_open, pid, 0);
    if (fd < 0)
        return; /* gone already */
    for (int pass = 0; pass < 2; pass++) {
        for (int i = 0; i < H_MAX_TRACKED; i++) {
            if (tracked[i] < 0) {
                tracked[i] = fd;
                return;
            }
        }
        /* Full: the slots of helpers the case reaped itself (waitid says ECHILD) are free. */
        for (int i = 0; i < H_MAX_TRACKED; i++) {
            siginfo_t si;
            if (waitid(P_PIDFD, (id_t)tracked[i], &si, WEXITED | WNOHANG | WNOWAIT) != 0 &&
                errno == ECHILD) {
                close(tracked[i]);
                tracked[i] = -1;
            }
        }
    }
    die("more than %s helper processes running in one case", "256");
}

/* Kills and reaps every tracked helper that still runs (a test may have reaped it: waitid on
 * the pidfd then says ECHILD). */
static void tracked_kill(void)
{
    for (int i = 0; i < H_MAX_TRACKED; i++) {
        if (tracked[i] < 0)
            continue;
        syscall(SYS_pidfd_send_signal, tracked[i], SIGKILL, NULL, 0);
        siginfo_t si;
        while (waitid(P_PIDFD, (id_t)tracked[i], &si, WEXITED) != 0 && errno == EINTR) {
        }
        close(tracked[i]);
        tracked[i] = -1;
    }
}

static void cluster_free(int i)
{
    h_cluster *c = clusters[i];
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", c->dir);
    if (system(cmd) != 0)
        fprintf(stderr, "harness: could not remove %s\n", c->dir);
    free(c);
    clusters[i] = NULL;
}

void h_cluster_release(h_cluster *c)
{
    if (!c->stopped)
        h_cluster_stop(c);
    for (int i = 0; i < H_MAX_CLUSTERS; i++)
        if (clusters[i] == c)
            cluster_free(i);
}

/* Stops what still runs; with logs, prints every cluster's daemon logs; then removes the
 * clusters' directories and frees them. Returns false if a daemon stopped here exited
 * non-zero. */
static bool release_all(bool logs)
{
    tracked_kill();
    bool ok = true;
    for (int i = 0; i < H_MAX_CLUSTERS; i++)
        if (clusters[i] != NULL && !clusters[i]->stopped)
            ok = h_cluster_stop(clusters[i]) && ok;
    logs = logs || !ok;
    if (logs)
        fprintf(stderr, "harness: the case failed; the logs of its daemons follow\n");
    for (int i = 0; i < H_MAX_CLUSTERS; i++) {
        if (clusters[i] == NULL)
            continue;
        if (logs)
            h_dump_logs(clusters[i]);
        cluster_free(i);
    }
    return ok;
}

/* A case that leaves by exit() (a skip with status 77) still leaves nothing behind; a forked
 * child that exits does not touch its parent's daemons. */
static void release_at_exit(void)
{
    if (getpid() == owner)
        release_all(false);
}

int h_case_setup(void **state)
{
    current = *state;
    current->finished = false;
    skipped = false;
    return 0;
}

void h_case_run(void **state)
{
    (void)state;
    current->fn();
    current->finished = true;
}

int h_case_teardown(void **state)
{
    (void)state;
    bool failed = !current->finished && !skipped;
    bool ok = release_all(failed);
    current = NULL;
    /* A case that returned but left a daemon that exited non-zero fails here. */
    return failed || ok ? 0 : -1;
}

void h_skip(void)
{
    skipped = true;
    skip();
}

static char spawn_cgroup[512]; /* h_spawn_in_cgroup */

void h_spawn_in_cgroup(const char *dir)
{
    snprintf(spawn_cgroup, sizeof spawn_cgroup, "%s", dir != NULL ? dir : "");
}

/* Forks and execs argv with stdout to a pipe (returned in *rfd, if asked) and stderr to log. */
static pid_t spawn(const char *const *argv, const char *log, int *rfd)
{
    int p[2] = {-1, -1};
    if (rfd != NULL && pipe2(p, O_CLOEXEC) != 0)
        die("pipe: %s", strerror(errno));
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0)
        die("fork: %s", strerror(errno));
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent)
            _exit(127);
        int lfd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);
        if (lfd >= 0) {
            dup2(lfd, 2);
            if (rfd == NULL)
                dup2(lfd, 1);
        }
        if (rfd != NULL)
            dup2(p[1], 1);
        if (spawn_cgroup[0] != '\0') {
            /* Into the cgroup before exec, so the daemon starts there. */
            char procs[600];
            snprintf(procs, sizeof procs, "%s/cgroup.procs", spawn_cgroup);
            int cfd = open(procs, O_WRONLY | O_CLOEXEC);
            if (cfd < 0 || dprintf(cfd, "%d\n", (int)getpid()) < 0) {
                fprintf(stderr, "joining %s: %s\n", spawn_cgroup, strerror(errno));
                _exit(127);
            }
            close(cfd);
        }
        execv(argv[0], (char *const *)argv);
        fprintf(stderr, "exec %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    if (rfd != NULL) {
        close(p[1]);
        *rfd = p[0];
    }
    return pid;
}

/* Reads "READY host:port" from fd within deadline_ms. */
static bool read_ready(int fd, char *addr, size_t addrlen, int deadline_ms)
{
    char buf[256];
    size_t len = 0;
    uint64_t end = now_ms() + (uint64_t)deadline_ms;
    while (len < sizeof buf - 1) {
        uint64_t t = now_ms();
        if (t >= end)
            return false;
        struct pollfd pfd = {fd, POLLIN, 0};
        int r = poll(&pfd, 1, (int)(end - t));
        if (r <= 0)
            continue;
        ssize_t n = read(fd, buf + len, sizeof buf - 1 - len);
        if (n <= 0)
            return false;
        len += (size_t)n;
        buf[len] = '\0';
        char *nl = strchr(buf, '\n');
        if (nl != NULL) {
            *nl = '\0';
            if (strncmp(buf, "READY ", 6) != 0)
                return false;
            size_t alen = strnlen(buf + 6, addrlen - 1);
            memcpy(addr, buf + 6, alen);
            addr[alen] = '\0';
            return true;
        }
    }
    return false;
}

static int ready_deadline_ms(void)
{
    return getenv("SPW_SLOW") != NULL ? 60000 : 30000;
}

static const char *ip_path(void)
{
    static const char *const paths[] = {"/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"};
    for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++)
        if (access(paths[i], X_OK) == 0)
            return paths[i];
    return "/usr/sbin/ip";
}

static void start_proc(h_cluster *c, h_proc *pr, const char *const *argv0, const char *logname)
{
    /* SPW_LOG_LEVEL=debug makes every daemon of the tests log more (their logs are printed for
     * failing tests). */
    const char *argv[80];
    int n = 0;
    char ns[128];
    if (pr->host[0] != '\0') {
        const char *prefix = getenv("NETBED_PREFIX");
        if (prefix == NULL)
            die("%s needs NETBED_PREFIX (run under tests/netbed/netbed.sh)", pr->host);
        snprintf(ns, sizeof ns, "%s%s", prefix, pr->host);
        argv[n++] = ip_path();
        argv[n++] = "netns";
        argv[n++] = "exec";
        argv[n++] = ns;
    }
    for (int i = 0; argv0[i] != NULL && n < 76; i++)
        argv[n++] = argv0[i];
    const char *lvl = getenv("SPW_LOG_LEVEL");
    if (lvl != NULL) {
        argv[n++] = "--log-level";
        argv[n++] = lvl;
    }
    argv[n] = NULL;
    snprintf(pr->log, sizeof pr->log, "%s/%s.log", c->dir, logname);
    int fd;
    pr->pid = spawn(argv, pr->log, &fd);
    pr->exited = false;
    bool ok = read_ready(fd, pr->addr, sizeof pr->addr, ready_deadline_ms());
    close(fd);
    if (!ok) /* the teardown stops it and prints the logs */
        fail_msg("%s did not report READY", argv[0]);
}

#define MAX_ARGS 64

static int build_args(const char **v, int n, const char *const *extra)
{
    for (int i = 0; extra != NULL && extra[i] != NULL && n < MAX_ARGS - 1; i++)
        v[n++] = extra[i];
    v[n] = NULL;
    return n;
}

static void dump_file(const char *path)
{
    fprintf(stderr, "----- %s\n", path);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return;
    char line[1024];
    while (fgets(line, sizeof line, f) != NULL)
        fputs(line, stderr);
    fclose(f);
}

static int log_name(const struct dirent *d)
{
    size_t n = strlen(d->d_name);
    return n > 4 && strcmp(d->d_name + n - 4, ".log") == 0;
}

h_cluster *h_cluster_bare(void)
{
    h_cluster *c = cluster_new();
    const char *tmp = getenv("TMPDIR");
    snprintf(c->dir, sizeof c->dir, "%s/spillway-e2e.XXXXXX", tmp != NULL ? tmp : "/tmp");
    if (mkdtemp(c->dir) == NULL)
        die("mkdtemp: %s", strerror(errno));
    /* Each cluster is a host of its own for the workers' shared task limits (hostshare.c): the
     * workers of tests running beside it do not change its limits, nor recycle its executors. */
    static bool host_dir_ours;
    if (getenv("SPILLWAY_HOST_DIR") == NULL || host_dir_ours) {
        char hd[sizeof c->dir + 8];
        snprintf(hd, sizeof hd, "%s/host", c->dir);
        setenv("SPILLWAY_HOST_DIR", hd, 1);
        host_dir_ours = true;
    }
    return c;
}

static h_cluster *cluster_start(const char *host, bool secret, const char *const *sched_args)
{
    h_cluster *c = h_cluster_bare();
    char listen[64] = "127.0.0.1:0";
    if (host != NULL) {
        snprintf(c->sched.host, sizeof c->sched.host, "%s", host);
        snprintf(listen, sizeof listen, "%s:0", host);
    }
    const char *v[MAX_ARGS];
    int n = 0;
    v[n++] = h_bin("spillway-scheduler");
    v[n++] = "--listen";
    v[n++] = listen;
    if (secret) {
        snprintf(c->secret_file, sizeof c->secret_file, "%s/secret", c->dir);
        int fd = open(c->secret_file, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (fd < 0 || write(fd, "e2e-cluster-secret\n", 19) != 19)
            die("secret file: %s", strerror(errno));
        close(fd);
        v[n++] = "--secret-file";
        v[n++] = c->secret_file;
    }
    /* The HTTP endpoint only where a test asks for it (--http ...): its default address
     * would be shared by every test's scheduler. */
    bool http = false;
    for (int i = 0; sched_args != NULL && sched_args[i] != NULL; i++)
        http = http || strcmp(sched_args[i], "--http") == 0;
    char http_file[600];
    snprintf(http_file, sizeof http_file, "%s/http.addr", c->dir);
    if (http) {
        v[n++] = "--http-port-file";
        v[n++] = http_file;
    } else {
        v[n++] = "--http";
        v[n++] = "none";
    }
    build_args(v, n, sched_args);
    start_proc(c, &c->sched, v, "scheduler");
    if (host != NULL) {
        const char *colon = strrchr(c->sched.addr, ':');
        snprintf(c->addr, sizeof c->addr, "%s:%s", host, colon != NULL ? colon + 1 : "?");
    } else {
        snprintf(c->addr, sizeof c->addr, "%s", c->sched.addr);
    }
    if (http) {
        char *text = NULL;
        size_t len = 0;
        if (spw_file_read(http_file, 200, &text, &len) != 0)
            die("scheduler wrote no %s", http_file);
        snprintf(c->http, sizeof c->http, "%.*s", (int)len, text);
        spw_free(text);
    }
    return c;
}

/* SPW_E2E_HOSTS="H1 H2 ...", set when an e2e case runs on the multi-host bed (tests/netbed):
 * word i of it, or NULL (this host) without it; workers take H2, H3, ... in turn. */
static const char *bed_host(unsigned i)
{
    static char words[8][64];
    static unsigned n;
    static bool parsed;
    if (!parsed) {
        parsed = true;
        const char *e = getenv("SPW_E2E_HOSTS");
        char buf[512];
        snprintf(buf, sizeof buf, "%s", e != NULL ? e : "");
        char *save = NULL;
        for (char *w = strtok_r(buf, " ", &save); w != NULL && n < 8;
             w = strtok_r(NULL, " ", &save))
            snprintf(words[n++], sizeof words[0], "%s", w);
        if (n > 0)
            fprintf(stderr, "harness: on the hosts of SPW_E2E_HOSTS: %s\n", e);
    }
    if (n == 0)
        return NULL;
    if (i == 0)
        return words[0];
    return n == 1 ? words[0] : words[1 + (i - 1) % (n - 1)];
}

h_cluster *h_cluster_start(bool secret, const char *const *sched_args)
{
    return cluster_start(bed_host(0), secret, sched_args);
}

h_cluster *h_cluster_start_on(const char *host, bool secret, const char *const *sched_args)
{
    return cluster_start(host, secret, sched_args);
}

static int worker_start(h_cluster *c, const char *host, const char *const *args)
{
    if (c->nworkers == H_MAX_WORKERS)
        die("too many workers%s", "");
    int i = c->nworkers++;
    const char *v[MAX_ARGS];
    int n = 0;
    char listen[64] = "127.0.0.1:0";
    if (host != NULL) {
        snprintf(c->workers[i].host, sizeof c->workers[i].host, "%s", host);
        snprintf(listen, sizeof listen, "%s:0", host);
    }
    v[n++] = h_bin("spillway-worker");
    v[n++] = "--scheduler";
    v[n++] = c->addr;
    v[n++] = "--listen";
    v[n++] = listen;
    if (c->secret_file[0] != '\0') {
        v[n++] = "--secret-file";
        v[n++] = c->secret_file;
    }
    build_args(v, n, args);
    char name[32];
    snprintf(name, sizeof name, "worker%d", i);
    start_proc(c, &c->workers[i], v, name);
    return i;
}

int h_worker_start(h_cluster *c, const char *const *args)
{
    static unsigned started;
    return worker_start(c, bed_host(++started), args);
}

int h_worker_start_on(h_cluster *c, const char *host, const char *const *args)
{
    return worker_start(c, host, args);
}

void h_workers_start(h_cluster *c, int n, const char *const *args)
{
    for (int i = 0; i < n; i++)
        h_worker_start(c, args);
}

h_cluster *h_cluster_simple(int n)
{
    h_cluster *c = h_cluster_start(false, NULL);
    static const char *const args[] = {"--slots", "1", "--store-capacity", "256M", NULL};
    h_workers_start(c, n, args);
    return c;
}

static bool wait_exit(h_proc *p, int deadline_ms)
{
    if (p->pid <= 0 || p->exited)
        return true;
    uint64_t end = now_ms() + (uint64_t)deadline_ms;
    /* A pidfd becomes readable when the process exits: an event to wait on. */
    int pfd = (int)syscall(SYS_pidfd_open, p->pid, 0);
    for (;;) {
        int st;
        pid_t r = waitpid(p->pid, &st, WNOHANG);
        if (r == p->pid) {
            p->exited = true;
            p->status = st;
            if (pfd >= 0)
                close(pfd);
            return true;
        }
        uint64_t t = now_ms();
        if (t >= end) {
            if (pfd >= 0)
                close(pfd);
            return false;
        }
        if (pfd >= 0) {
            struct pollfd pf = {pfd, POLLIN, 0};
            poll(&pf, 1, (int)(end - t));
        } else {
            struct timespec ts = {0, 5 * 1000000}; /* kernels without pidfd_open */
            nanosleep(&ts, NULL);
        }
    }
}

int h_worker_kill(h_cluster *c, int i, int sig)
{
    h_proc *p = &c->workers[i];
    kill(p->pid, sig);
    if (!wait_exit(p, 20000)) {
        kill(p->pid, SIGKILL);
        wait_exit(p, 5000);
    }
    return p->status;
}

static bool stop_proc(h_proc *p, const char *what)
{
    if (p->pid <= 0)
        return true;
    if (!p->exited)
        kill(p->pid, SIGTERM);
    int deadline = getenv("SPW_SLOW") != NULL ? 30000 : 15000;
    if (!wait_exit(p, deadline)) {
        fprintf(stderr, "harness: %s pid %d ignored SIGTERM; killing it\n", what, (int)p->pid);
        kill(p->pid, SIGKILL);
        wait_exit(p, 5000);
        return false;
    }
    if (!WIFEXITED(p->status) || WEXITSTATUS(p->status) != 0) {
        fprintf(stderr, "harness: %s pid %d exited with %s %d\n", what, (int)p->pid,
                WIFEXITED(p->status) ? "status" : "signal",
                WIFEXITED(p->status) ? WEXITSTATUS(p->status) : WTERMSIG(p->status));
        return false;
    }
    return true;
}

int h_sched_kill(h_cluster *c, int sig)
{
    h_proc *p = &c->sched;
    kill(p->pid, sig);
    if (!wait_exit(p, 20000)) {
        kill(p->pid, SIGKILL);
        wait_exit(p, 5000);
    }
    return p->status;
}

void h_sched_restart(h_cluster *c, const char *const *sched_args)
{
    static int generation;
    const char *v[MAX_ARGS];
    int n = 0;
    char listen[64];
    snprintf(listen, sizeof listen, "%s", c->sched.addr);
    if (c->sched.host[0] != '\0') {
        const char *colon = strrchr(c->sched.addr, ':');
        snprintf(listen, sizeof listen, "%s:%s", c->sched.host, colon != NULL ? colon + 1 : "0");
    }
    v[n++] = h_bin("spillway-scheduler");
    v[n++] = "--listen";
    v[n++] = listen;
    if (c->secret_file[0] != '\0') {
        v[n++] = "--secret-file";
        v[n++] = c->secret_file;
    }
    v[n++] = "--http";
    v[n++] = "none"; /* as at the first start: the default address is shared */
    build_args(v, n, sched_args);
    char name[32];
    snprintf(name, sizeof name, "scheduler-%d", ++generation);
    start_proc(c, &c->sched, v, name);
}

int h_log_count(const h_proc *p, const char *needle)
{
    FILE *f = fopen(p->log, "re");
    if (f == NULL)
        return 0;
    char line[2048];
    int n = 0;
    while (fgets(line, sizeof line, f) != NULL)
        n += strstr(line, needle) != NULL;
    fclose(f);
    return n;
}

/* Every log of the cluster's directory: each scheduler generation and worker, and the helpers
 * started with h_spawn. */
void h_dump_logs(h_cluster *c)
{
    struct dirent **names;
    int n = scandir(c->dir, &names, log_name, alphasort);
    for (int k = 0; k < n; k++) {
        char path[2 * 256 + 2];
        snprintf(path, sizeof path, "%.255s/%.255s", c->dir, names[k]->d_name);
        dump_file(path);
        free(names[k]);
    }
    if (n >= 0)
        free(names);
}

bool h_cluster_stop(h_cluster *c)
{
    bool ok = true;
    /* Workers first, so the scheduler sees them leave, then the scheduler. Workers that a test
     * killed on purpose have exited already and are not judged. */
    for (int i = 0; i < c->nworkers; i++) {
        if (c->workers[i].exited)
            continue;
        ok = stop_proc(&c->workers[i], "worker") && ok;
    }
    ok = stop_proc(&c->sched, "scheduler") && ok;
    c->stopped = true;
    c->stop_ok = ok;
    return ok;
}

pid_t h_spawn(h_cluster *c, const char *const *argv, const char *logname)
{
    char log[512];
    snprintf(log, sizeof log, "%s/%s.log", c->dir, logname);
    pid_t pid = spawn(argv, log, NULL);
    h_track(pid);
    return pid;
}

int h_run(const char *const *argv, char **out)
{
    int p[2];
    if (pipe2(p, O_CLOEXEC) != 0)
        return -1;
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        dup2(p[1], 1);
        dup2(p[1], 2);
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    close(p[1]);
    size_t len = 0, cap = 4096;
    char *buf = malloc(cap);
    uint64_t end = now_ms() + 60000;
    for (;;) {
        uint64_t t = now_ms();
        if (t >= end) {
            kill(pid, SIGKILL);
            break;
        }
        struct pollfd pfd = {p[0], POLLIN, 0};
        if (poll(&pfd, 1, (int)(end - t)) <= 0)
            continue;
        if (len + 1024 > cap)
            buf = realloc(buf, cap *= 2);
        ssize_t n = read(p[0], buf + len, cap - len - 1);
        if (n <= 0)
            break;
        len += (size_t)n;
    }
    buf[len] = '\0';
    close(p[0]);
    int st;
    waitpid(pid, &st, 0);
    if (out != NULL)
        *out = buf;
    else
        free(buf);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

bool h_eventually(bool (*cond)(void *arg), void *arg, int deadline_ms)
{
    uint64_t end = now_ms() + (uint64_t)deadline_ms;
    for (;;) {
        if (cond(arg))
            return true;
        if (now_ms() >= end)
            return cond(arg);
        struct timespec ts = {0, 10 * 1000000};
        nanosleep(&ts, NULL);
    }
}
