/*
 * What this host and process are: an id of the host (and network namespace) that tells whether
 * two processes can share memory and abstract Unix sockets, and fields of /proc/<pid>/status.
 */
#include "spillway/base.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static void read_first_line(const char *path, char *out, size_t outlen)
{
    out[0] = '\0';
    FILE *f = fopen(path, "re");
    if (f == NULL)
        return;
    if (fgets(out, (int)outlen, f) == NULL)
        out[0] = '\0';
    fclose(f);
    out[strcspn(out, "\n")] = '\0';
}

void spw_host_id(char *out, size_t outlen)
{
    char machine[64], boot[64];
    read_first_line("/etc/machine-id", machine, sizeof machine);
    read_first_line("/proc/sys/kernel/random/boot_id", boot, sizeof boot);
    if (machine[0] == '\0' && boot[0] == '\0') {
        char host[64] = "";
        gethostname(host, sizeof host - 1);
        snprintf(out, outlen, "host:%s", host);
        return;
    }
    /* Abstract Unix sockets (how a worker's arena is reached) belong to a network namespace:
     * processes of one kernel in different namespaces share memory but cannot connect, so
     * they count as different hosts and use TCP. */
    struct stat st;
    if (stat("/proc/self/ns/net", &st) == 0)
        snprintf(out, outlen, "%s/%s/net:%llu:%llu", machine, boot, (unsigned long long)st.st_dev,
                 (unsigned long long)st.st_ino);
    else
        snprintf(out, outlen, "%s/%s", machine, boot);
}

int64_t spw_proc_status_kib(int pid, const char *field)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", pid);
    FILE *f = fopen(path, "re");
    if (f == NULL)
        return -errno;
    size_t flen = strlen(field);
    int64_t v = SPW_ENOENT;
    while (fgets(line, sizeof line, f) != NULL) {
        if (strncmp(line, field, flen) == 0 && line[flen] == ':') {
            v = strtoll(line + flen + 1, NULL, 10);
            break;
        }
    }
    fclose(f);
    return v;
}
