/*
 * spw_local_probe: a client that first becomes another user, then checks what a worker's local
 * socket gives it. Started by test_e2e_local_socket_access as root; it drops to UID:GID itself
 * (setresgid, setgroups, setresuid) so the test needs no setpriv.
 *
 *   spw_local_probe UID GID SCHEDULER WORKER_PID refused|allowed [SUPP_GID]
 * refused: attaching to the worker's arena (read or write) fails with SPW_EAUTH, no arena
 *          descriptor is ever held, and a put and a get of 1 MiB through libspillway still
 *          return the right bytes (over TCP, a copy).
 * allowed: the read attach gives a read-only descriptor that cannot be mapped writable nor
 *          reopened read-write through /proc; the write attach gives a read-write one; a put and
 *          a zero-copy view return the right bytes.
 * SUPP_GID: besides GID, the probe is in 300 other supplementary groups and then SUPP_GID.
 * Prints what it found; exit status 0 when everything matched, 1 otherwise.
 */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <unistd.h>
#include <dirent.h>

#include "spillway/conn.h"
#include "spillway/spillway.h"

#define DATA_LEN (1u << 20)

static int failures;

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            printf("FAIL %s:%d: ", __FILE__, __LINE__);                                            \
            printf(__VA_ARGS__);                                                                   \
            printf("\n");                                                                          \
            failures++;                                                                            \
        }                                                                                          \
    } while (0)

/* The worker's abstract socket, from /proc/net/unix: "@spillway-worker-PID-XXXXXXXX". */
static int find_socket(int pid, char *out, size_t outlen)
{
    FILE *f = fopen("/proc/net/unix", "re");
    if (f == NULL)
        return -1;
    char line[512], want[64];
    snprintf(want, sizeof want, "@spillway-worker-%d-", pid);
    int rc = -1;
    while (fgets(line, sizeof line, f) != NULL) {
        char *p = strstr(line, want);
        if (p != NULL) {
            p[strcspn(p, " \n")] = '\0';
            snprintf(out, outlen, "%s", p);
            rc = 0;
            break;
        }
    }
    fclose(f);
    return rc;
}

/* Access mode of descriptor fd as /proc/self/fdinfo shows it (O_RDONLY, O_RDWR, ...). */
static int fd_accmode(int fd)
{
    char path[64], line[128];
    snprintf(path, sizeof path, "/proc/self/fdinfo/%d", fd);
    FILE *f = fopen(path, "re");
    if (f == NULL)
        return -1;
    int mode = -1;
    while (fgets(line, sizeof line, f) != NULL) {
        unsigned long flags;
        if (sscanf(line, "flags: %lo", &flags) == 1)
            mode = (int)(flags & O_ACCMODE);
    }
    fclose(f);
    return mode;
}

/* Open descriptors of ours that are a memfd, by access mode. */
static void count_memfds(int *ro, int *rw)
{
    *ro = *rw = 0;
    DIR *d = opendir("/proc/self/fd");
    if (d == NULL)
        return;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        char path[300], target[256];
        snprintf(path, sizeof path, "/proc/self/fd/%s", e->d_name);
        ssize_t n = readlink(path, target, sizeof target - 1);
        if (n <= 0)
            continue;
        target[n] = '\0';
        if (strncmp(target, "/memfd:", 7) != 0)
            continue;
        int m = fd_accmode(atoi(e->d_name));
        if (m == O_RDONLY)
            (*ro)++;
        else
            (*rw)++;
    }
    closedir(d);
}

static int attach(const char *name, bool write, int *memfd, uint64_t *cap, int *sock)
{
    proto_ctx_opts o;
    proto_ctx_opts_default(&o);
    o.name = "spw_local_probe";
    proto_ctx *ctx;
    uv_loop_t loop;
    uv_loop_init(&loop);
    if (proto_ctx_new(&loop, &o, &ctx) != 0)
        return SPW_EIO;
    int rc = proto_local_attach(ctx, name, 5000, write, sock, memfd, cap);
    proto_ctx_close(ctx, NULL, NULL);
    uv_run(&loop, UV_RUN_DEFAULT);
    uv_loop_close(&loop);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc != 6 && argc != 7) {
        fprintf(stderr, "usage: spw_local_probe UID GID SCHEDULER WORKER_PID refused|allowed "
                        "[SUPP_GID]\n");
        return 2;
    }
    uid_t uid = (uid_t)atoi(argv[1]);
    gid_t gid = (gid_t)atoi(argv[2]);
    bool allowed = strcmp(argv[5], "allowed") == 0;
    /* With SUPP_GID: 300 supplementary groups that mean nothing (40000..40299), then that one,
     * more than fit a small buffer for SO_PEERGROUPS. */
    static gid_t groups[301];
    size_t ngroups = 0;
    if (argc == 7) {
        for (; ngroups < 300; ngroups++)
            groups[ngroups] = (gid_t)(40000 + ngroups);
        groups[ngroups++] = (gid_t)atoi(argv[6]);
    }
    if (setgroups(ngroups, ngroups > 0 ? groups : NULL) != 0 || setresgid(gid, gid, gid) != 0 ||
        setresuid(uid, uid, uid) != 0) {
        printf("FAIL cannot become %u:%u: %s\n", (unsigned)uid, (unsigned)gid, strerror(errno));
        return 1;
    }
    /* setuid makes us undumpable; LeakSanitizer needs to ptrace us at exit. */
    prctl(PR_SET_DUMPABLE, 1);
    printf("running as uid %u gid %u\n", (unsigned)getuid(), (unsigned)getgid());
    char name[128];
    if (find_socket(atoi(argv[4]), name, sizeof name) != 0) {
        printf("FAIL no local socket of worker %s in /proc/net/unix\n", argv[4]);
        return 1;
    }
    printf("worker socket %s\n", name);

    for (int w = 0; w < 2; w++) {
        int memfd = -1, sock = -1;
        uint64_t cap = 0;
        int rc = attach(name, w == 1, &memfd, &cap, &sock);
        printf("%s attach: %s\n", w ? "write" : "read", spw_err_name(rc));
        if (!allowed) {
            CHECK(rc == SPW_EAUTH, "attach gave %s, want SPW_EAUTH", spw_err_name(rc));
            CHECK(memfd < 0, "an arena descriptor came back");
        } else {
            CHECK(rc == 0, "attach gave %s, want success", spw_err_name(rc));
        }
        if (rc != 0)
            continue;
        int mode = fd_accmode(memfd);
        if (w == 0) {
            CHECK(mode == O_RDONLY, "read attach gave access mode %d, want O_RDONLY", mode);
            void *p = mmap(NULL, cap, PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0);
            CHECK(p == MAP_FAILED && errno == EACCES, "read-only arena mapped writable");
            if (p != MAP_FAILED)
                munmap(p, cap);
            p = mmap(NULL, cap, PROT_READ, MAP_SHARED, memfd, 0);
            CHECK(p != MAP_FAILED, "read-only mapping failed: %s", strerror(errno));
            if (p != MAP_FAILED)
                munmap(p, cap);
            char path[64];
            snprintf(path, sizeof path, "/proc/self/fd/%d", memfd);
            int again = open(path, O_RDWR | O_CLOEXEC);
            CHECK(again < 0 && errno == EACCES,
                  "read-only descriptor reopened read-write through /proc (%s)",
                  again < 0 ? strerror(errno) : "succeeded");
            if (again >= 0)
                close(again);
        } else {
            CHECK(mode == O_RDWR, "write attach gave access mode %d, want O_RDWR", mode);
        }
        close(memfd);
        close(sock);
    }

    spillway *c;
    int rc = spillway_connect(argv[3], NULL, &c);
    if (rc != 0) {
        printf("FAIL connect: %s\n", spillway_strerror(rc));
        return 1;
    }
    uint8_t *data = malloc(DATA_LEN);
    for (size_t i = 0; i < DATA_LEN; i++)
        data[i] = (uint8_t)(i * 131u + (i >> 12));
    spillway_ref r;
    rc = spillway_put(c, data, DATA_LEN, &r);
    CHECK(rc == 0, "put: %s (%s)", spillway_strerror(rc), spillway_errmsg(c));
    if (rc == 0) {
        void *got = NULL;
        size_t len = 0;
        rc = spillway_get(c, r, 10000, &got, &len);
        CHECK(rc == 0 && len == DATA_LEN && memcmp(got, data, DATA_LEN) == 0,
              "get: %s, %zu bytes%s", spillway_strerror(rc), len,
              rc == 0 && len == DATA_LEN && memcmp(got, data, DATA_LEN) != 0 ? ", wrong bytes" : "");
        spillway_free(got);
        spillway_view v;
        rc = spillway_get_view(c, r, 10000, &v);
        CHECK(rc == 0 && v.len == DATA_LEN && memcmp(v.data, data, DATA_LEN) == 0,
              "view: %s", spillway_strerror(rc));
        if (rc == 0) {
            printf("view zero_copy=%d\n", v.zero_copy);
            CHECK(v.zero_copy == (allowed ? 1 : 0), "view zero_copy=%d", v.zero_copy);
            int ro, rw;
            count_memfds(&ro, &rw);
            printf("memfds held: %d read-only, %d read-write\n", ro, rw);
            if (allowed)
                CHECK(ro == 1 && rw == 1, "want one read-only (reads) and one read-write (puts)");
            else
                CHECK(ro == 0 && rw == 0, "an arena descriptor is held");
            spillway_view_release(c, &v);
        }
        CHECK(spillway_release(c, r) == 0, "release");
    }
    free(data);
    spillway_close(c);
    printf("%s\n", failures == 0 ? "PROBE OK" : "PROBE FAILED");
    return failures == 0 ? 0 : 1;
}
