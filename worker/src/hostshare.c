/*
 * The host's share of task memory: the default --task-memory-limit counts every worker on this
 * host, not only this one. Each worker lists itself in a host-wide directory (a file named by
 * its pid holding its store capacity and slots; /dev/shm/spillway-workers, or
 * $SPILLWAY_HOST_DIR) while it runs, and the default is half of what all their stores leave of
 * the physical memory, shared by all their slots. A worker re-reads the directory on its timer:
 * when a worker joined or left, a limit it did not set explicitly follows, and its executors
 * take the new limit when next idle (they are replaced; running tasks keep theirs). Entries of
 * pids that are gone are removed by whoever sees them. Runs on the loop thread.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "worker_int.h"

#define HOST_DIR_DEFAULT "/dev/shm/spillway-workers"
#define TASK_MEM_FLOOR (64ULL << 20)

typedef struct host_sum {
    uint64_t capacity; /* the stores of the workers counted */
    uint64_t slots;
    uint32_t workers;
} host_sum;

static const char *host_dir(void)
{
    const char *d = getenv("SPILLWAY_HOST_DIR");
    return d != NULL && d[0] != '\0' ? d : HOST_DIR_DEFAULT;
}

static bool pid_gone(long pid)
{
    return kill((pid_t)pid, 0) != 0 && errno == ESRCH;
}

/* Adds the entries of live workers other than this process to sum. */
static void host_scan(host_sum *sum)
{
    DIR *d = opendir(host_dir());
    if (d == NULL)
        return;
    long self = (long)getpid();
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        char *end;
        errno = 0;
        long pid = strtol(de->d_name, &end, 10);
        if (de->d_name[0] < '1' || de->d_name[0] > '9' || *end != '\0' || errno != 0 ||
            pid == self)
            continue;
        if (pid_gone(pid)) {
            unlinkat(dirfd(d), de->d_name, 0); /* a worker that died without leaving */
            continue;
        }
        int fd = openat(dirfd(d), de->d_name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
        if (fd < 0)
            continue;
        char buf[64];
        ssize_t n = read(fd, buf, sizeof buf - 1);
        close(fd);
        unsigned long long cap, slots;
        if (n <= 0)
            continue;
        buf[n] = '\0';
        if (sscanf(buf, "%llu %llu", &cap, &slots) != 2 || slots == 0 || slots > PROTO_MAX_SLOTS)
            continue; /* not ours, or being written */
        sum->capacity += cap;
        sum->slots += slots;
        sum->workers++;
    }
    closedir(d);
}

static uint64_t share(const host_sum *sum)
{
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    uint64_t phys = pages > 0 && page > 0 ? (uint64_t)pages * (uint64_t)page : 0;
    uint64_t taken = sum->capacity + (uint64_t)sum->workers * WRK_NODE_MARGIN;
    uint64_t left = phys > taken ? phys - taken : 0;
    uint64_t v = left / 2 / (sum->slots ? sum->slots : 1);
    return v < TASK_MEM_FLOOR ? TASK_MEM_FLOOR : v;
}

uint64_t wrk_task_mem_default(uint64_t capacity, uint32_t slots)
{
    host_sum sum = {.capacity = capacity, .slots = slots ? slots : 1, .workers = 1};
    host_scan(&sum);
    return share(&sum);
}

int wrk__host_join(wrk *w)
{
    const char *dir = host_dir();
    if (mkdir(dir, 01777) == 0)
        chmod(dir, 01777); /* every user's workers list themselves; none removes another's */
    else if (errno != EEXIST)
        return -errno;
    char tmp[PATH_MAX], path[PATH_MAX];
    snprintf(tmp, sizeof tmp, "%s/.%d.new", dir, (int)getpid());
    snprintf(path, sizeof path, "%s/%d", dir, (int)getpid());
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (fd < 0)
        return -errno;
    char line[64];
    int len = snprintf(line, sizeof line, "%llu %u\n",
                       (unsigned long long)w->opts.store.capacity, w->opts.slots);
    int rc = write(fd, line, (size_t)len) == len ? 0 : -EIO;
    if (close(fd) != 0 && rc == 0)
        rc = -errno;
    if (rc == 0 && rename(tmp, path) != 0)
        rc = -errno;
    if (rc != 0) {
        unlink(tmp);
        return rc;
    }
    w->host_listed = true;
    return 0;
}

void wrk__host_leave(wrk *w)
{
    if (!w->host_listed)
        return;
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/%d", host_dir(), (int)getpid());
    unlink(path);
    w->host_listed = false;
}

void wrk__host_check(wrk *w)
{
    if (!w->opts.task_mem_auto || w->closing)
        return;
    uint64_t v = wrk_task_mem_default(w->opts.store.capacity, w->opts.slots);
    uint64_t old = w->opts.task_mem_limit;
    if (v == old)
        return;
    host_sum sum = {.capacity = w->opts.store.capacity, .slots = w->opts.slots, .workers = 1};
    host_scan(&sum);
    w->opts.task_mem_limit = v;
    if (w->opts.exec_rss_auto)
        w->opts.exec_max_rss = v / 2;
    /* Each executor takes the new limit when it is next started (its cgroup's memory.max is
     * written then too): replaced once idle, so that no running task meets a lower one. */
    for (uint32_t i = 0; i < w->nexec; i++)
        w->execs[i].recycle = true;
    spw_log(SPW_LOG_NOTICE,
            "task memory limit %llu -> %llu bytes per executor: %u workers with %llu slots and "
            "%llu bytes of stores on this host",
            (unsigned long long)old, (unsigned long long)v, sum.workers,
            (unsigned long long)sum.slots, (unsigned long long)sum.capacity);
}
