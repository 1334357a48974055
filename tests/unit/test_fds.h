/* Counting a process's open descriptors of one kind: shared by unit and end-to-end tests. */
#ifndef SPW_TEST_FDS_H
#define SPW_TEST_FDS_H

#include <dirent.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "test_main.h"

/* Open descriptors of process pid (0: this one) that are a memfd named name. */
static inline int test_memfds_named(int pid, const char *name)
{
    char dir[64], want[64];
    if (pid == 0)
        snprintf(dir, sizeof dir, "/proc/self/fd");
    else
        snprintf(dir, sizeof dir, "/proc/%d/fd", pid);
    snprintf(want, sizeof want, "/memfd:%s ", name); /* the link ends in " (deleted)" */
    DIR *d = opendir(dir);
    assert_non_null(d);
    int n = 0;
    struct dirent *ent;
    while ((ent = readdir(d)) != NULL) {
        char path[400], target[256];
        snprintf(path, sizeof path, "%s/%s", dir, ent->d_name);
        ssize_t len = readlink(path, target, sizeof target - 1);
        if (len <= 0)
            continue;
        target[len] = '\0';
        n += strncmp(target, want, strlen(want)) == 0;
    }
    closedir(d);
    return n;
}

#endif
