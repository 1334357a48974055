/*
 * Task memory limits through cgroup v2, when the worker's own cgroup is delegated to it
 * (systemd Delegate=yes): the worker moves itself into a leaf `<cg>/worker` (cgroup v2 keeps
 * processes out of inner nodes that hand controllers down), enables the memory controller for
 * its children, and makes `<cg>/exec-N` per executor with memory.max = the task limit plus a
 * fixed allowance for the executor's own baseline, and memory.swap.max = 0. Each executor joins
 * its directory itself at start, before it runs anything. Without such a cgroup (cgroup v1 or a
 * hybrid tree, no write access, no memory controller, other processes in the same cgroup) this
 * reports SPW_ENOTSUP and executors limit themselves with RLIMIT_DATA (executor.c).
 * Runs on the loop thread at start and at the end; oom_kill counters are read when an executor
 * dies.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include "worker_int.h"

#ifndef CGROUP2_SUPER_MAGIC
#define CGROUP2_SUPER_MAGIC 0x63677270
#endif

#define CG_ROOT "/sys/fs/cgroup"
#define EXEC_BASELINE (32ULL << 20) /* an executor's own code and buffers, on top of the limit */

static int write_file(const char *dir, const char *name, const char *value)
{
    char path[4400];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    if (f == NULL)
        return -errno;
    int rc = fputs(value, f) >= 0 ? 0 : -errno;
    if (fclose(f) != 0 && rc == 0)
        rc = -errno;
    return rc;
}

const char *wrk__cgroup_fake_dir;

/* Our cgroup v2 path ("0::/a/b" in /proc/self/cgroup) when the unified hierarchy is mounted at
 * /sys/fs/cgroup (pure cgroup v2, not hybrid). */
static int own_cgroup(char *out, size_t outlen)
{
    if (wrk__cgroup_fake_dir != NULL) {
        snprintf(out, outlen, "%s", wrk__cgroup_fake_dir);
        return 0;
    }
    struct statfs sf;
    if (statfs(CG_ROOT, &sf) != 0 || (unsigned long)sf.f_type != CGROUP2_SUPER_MAGIC)
        return SPW_ENOTSUP;
    FILE *f = fopen("/proc/self/cgroup", "r");
    if (f == NULL)
        return -errno;
    char line[1024];
    int rc = SPW_ENOTSUP;
    while (fgets(line, sizeof line, f) != NULL) {
        if (strncmp(line, "0::", 3) != 0)
            continue;
        line[strcspn(line, "\n")] = '\0';
        snprintf(out, outlen, "%s%s", CG_ROOT, strcmp(line + 3, "/") == 0 ? "" : line + 3);
        rc = 0;
    }
    fclose(f);
    return rc;
}

/* True when dir/cgroup.procs lists this process and no other: the cgroup is ours alone (a
 * systemd unit with Delegate=yes whose main process is the worker). A cgroup shared with other
 * processes (a login session, a container's root) is not delegated to us: the controllers
 * could not be handed to children (no internal processes) and another worker there would
 * share our exec-N directories. */
static bool alone_in(const char *dir)
{
    char path[4400];
    snprintf(path, sizeof path, "%s/cgroup.procs", dir);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return false;
    long pid;
    bool us = false, others = false;
    while (fscanf(f, "%ld", &pid) == 1) {
        if (pid == (long)getpid())
            us = true;
        else
            others = true;
    }
    fclose(f);
    return us && !others;
}

/* memory.max of an executor's directory for the current task limit. A limit within 32 MiB of
 * 2^64 would wrap to a tiny one: past that, no limit at all. */
static void exec_max(const wrk *w, char *max, size_t len)
{
    if (w->opts.task_mem_limit <= UINT64_MAX - EXEC_BASELINE)
        snprintf(max, len, "%llu\n", (unsigned long long)(w->opts.task_mem_limit + EXEC_BASELINE));
    else
        snprintf(max, len, "max\n");
}

int wrk__cgroup_setup(wrk *w)
{
    char dir[4096], leaf[4200], path[4300], ctl[256] = "";
    int rc = own_cgroup(dir, sizeof dir);
    if (rc != 0)
        return rc;
    snprintf(path, sizeof path, "%s/cgroup.controllers", dir);
    FILE *f = fopen(path, "r");
    if (f != NULL) {
        if (fgets(ctl, sizeof ctl, f) == NULL)
            ctl[0] = '\0';
        fclose(f);
    }
    snprintf(path, sizeof path, "%s/cgroup.procs", dir);
    if (strstr(ctl, "memory") == NULL || access(path, W_OK) != 0 ||
        access(dir, W_OK) != 0 || !alone_in(dir))
        return SPW_ENOTSUP; /* not delegated to us */
    /* Into a leaf of our own, then hand the memory controller to the children. */
    snprintf(leaf, sizeof leaf, "%s/worker", dir);
    if (mkdir(leaf, 0755) != 0 && errno != EEXIST)
        return -errno;
    char pid[32];
    snprintf(pid, sizeof pid, "%d\n", (int)getpid());
    rc = write_file(leaf, "cgroup.procs", pid);
    if (rc == 0)
        rc = write_file(dir, "cgroup.subtree_control", "+memory");
    if (rc != 0) {
        spw_log(SPW_LOG_WARN, "cgroup %s is not usable for task limits: %s", dir,
                spw_strerror(rc));
        return rc;
    }
    char max[32];
    exec_max(w, max, sizeof max);
    for (uint32_t i = 0; i < w->nexec; i++) {
        snprintf(path, sizeof path, "%s/exec-%u", dir, i);
        if (mkdir(path, 0755) != 0 && errno != EEXIST)
            return -errno;
        rc = write_file(path, "memory.max", max);
        if (rc != 0)
            return rc;
        /* Without swap.max 0 a task at its memory.max is swapped out rather than failing with
         * SPW_ETASKMEM: the limit would not hold. The file is absent without swap accounting
         * (nothing to limit then); present and not written, the cgroup is not usable. */
        char swap[4400];
        snprintf(swap, sizeof swap, "%s/memory.swap.max", path);
        if (access(swap, F_OK) == 0 && (rc = write_file(path, "memory.swap.max", "0\n")) != 0) {
            spw_log(SPW_LOG_WARN, "cgroup %s: cannot write memory.swap.max: %s", path,
                    spw_strerror(rc));
            return rc;
        }
    }
    w->cgroup = spw_strdup(SPW_MOD_WORKER, dir);
    return 0;
}

void wrk__cgroup_cleanup(wrk *w)
{
    if (w->cgroup == NULL)
        return;
    char path[4400];
    for (uint32_t i = 0; i < w->nexec; i++) {
        snprintf(path, sizeof path, "%s/exec-%u", w->cgroup, i);
        rmdir(path); /* empty once its executor has exited */
    }
    spw_free(w->cgroup);
    w->cgroup = NULL;
}

int wrk__cgroup_exec_dir(wrk *w, uint32_t idx, char *out, size_t outlen)
{
    if (w->cgroup == NULL)
        return SPW_ENOTSUP;
    snprintf(out, outlen, "%s/exec-%u", w->cgroup, idx);
    /* The limit may have changed since the last executor of this slot (hostshare.c). */
    char max[32];
    exec_max(w, max, sizeof max);
    return write_file(out, "memory.max", max);
}

uint64_t wrk__cgroup_oom_kills(wrk *w, uint32_t idx)
{
    char path[4400], line[256];
    if (w->cgroup == NULL)
        return 0;
    snprintf(path, sizeof path, "%s/exec-%u/memory.events", w->cgroup, idx);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return 0;
    uint64_t v = 0;
    while (fgets(line, sizeof line, f) != NULL)
        if (strncmp(line, "oom_kill ", 9) == 0)
            v = strtoull(line + 9, NULL, 10);
    fclose(f);
    return v;
}
