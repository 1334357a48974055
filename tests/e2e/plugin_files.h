/* File helpers shared by the test plugins (each is a shared object of its own, so these are
 * static inline): tasks leave marks in files that a test creates, waits for or counts. The
 * caller checks that the path argument is non-empty and shorter than PLUGIN_PATH_MAX. */
#ifndef SPW_PLUGIN_FILES_H
#define SPW_PLUGIN_FILES_H

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#include "spillway/task.h"

#define PLUGIN_PATH_MAX 512

/* Opens the file whose path is the argument a with flags (O_CREAT, mode 0600): a descriptor or
 * -errno. */
static inline int plugin_open(const spw_task_arg *a, int flags)
{
    char path[PLUGIN_PATH_MAX];
    memcpy(path, a->data, a->len);
    path[a->len] = '\0';
    int fd = open(path, flags | O_CREAT | O_CLOEXEC, 0600);
    return fd < 0 ? -errno : fd;
}

/* Creates the file named by a: 0 or -errno. */
static inline int plugin_touch(const spw_task_arg *a)
{
    int fd = plugin_open(a, O_WRONLY);
    if (fd < 0)
        return fd;
    close(fd);
    return 0;
}

/* Counts a run: appends one byte to the file named by a. 0, -errno or -EIO. */
static inline int plugin_count_run(const spw_task_arg *a)
{
    int fd = plugin_open(a, O_WRONLY | O_APPEND);
    if (fd < 0)
        return fd;
    ssize_t n = write(fd, "r", 1);
    close(fd);
    return n == 1 ? 0 : -EIO;
}

#endif
