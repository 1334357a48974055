/* Helpers shared by the end-to-end test files; see e2e_util.h. */
#include "e2e_util.h"

#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

spillway *e2e_connect(h_cluster *c)
{
    return e2e_connect_at(c, c->addr, E2E_RECONNECT_DEFAULT);
}

spillway *e2e_connect_at(h_cluster *c, const char *addr, int reconnect_ms)
{
    spillway_opts o;
    spillway_opts_init(&o);
    if (reconnect_ms != E2E_RECONNECT_DEFAULT)
        o.reconnect_ms = reconnect_ms;
    if (c->secret_file[0] != '\0')
        o.secret_file = c->secret_file;
    if (c->encrypt) {
        o.encrypt = SPILLWAY_ENCRYPT_REQUIRED;
        o.encrypt_local = 1;
    }
    spillway *cl = NULL;
    int rc = spillway_connect(addr, &o, &cl);
    if (rc != 0)
        fail_msg("connect to %s: %s", addr, spillway_strerror(rc));
    return cl;
}

json_t *e2e_ctl_json(h_cluster *c, const char *cmd)
{
    const char *argv[16];
    int n = 0;
    argv[n++] = h_bin("spillway-ctl");
    argv[n++] = "--scheduler";
    argv[n++] = c->addr;
    if (c->secret_file[0] != '\0') {
        argv[n++] = "--secret-file";
        argv[n++] = c->secret_file;
    }
    if (c->encrypt) {
        argv[n++] = "--encrypt";
        argv[n++] = "required";
        argv[n++] = "--encrypt-local";
    }
    argv[n++] = "--json";
    argv[n++] = cmd;
    argv[n] = NULL;
    char *out = NULL;
    int rc = h_run(argv, &out);
    json_t *doc = NULL;
    if (rc == 0) {
        json_error_t err;
        doc = json_loads(out, 0, &err);
        if (doc == NULL)
            fprintf(stderr, "ctl output is not JSON (%s): %s\n", err.text, out);
    } else {
        fprintf(stderr, "spillway-ctl %s exited %d: %s\n", cmd, rc, out ? out : "");
    }
    free(out);
    return doc;
}

uint64_t e2e_get_u64(spillway *cl, spillway_ref r)
{
    void *data;
    size_t len;
    int rc = spillway_get(cl, r, 60000, &data, &len);
    if (rc != 0)
        fail_msg("get: %s: %s", spillway_strerror(rc), spillway_errmsg(cl));
    assert_int_equal(len, 8);
    uint64_t v;
    memcpy(&v, data, 8);
    spillway_free(data);
    return v;
}

void e2e_client_works(spillway *cl)
{
    spillway_ref r = e2e_submit_u64(cl, "inc", 41);
    assert_int_equal(e2e_get_u64(cl, r), 42);
    assert_int_equal(spillway_release(cl, r), 0);
}

void e2e_errmsg_has(spillway *cl, const char *want)
{
    const char *m = spillway_errmsg(cl);
    fprintf(stderr, "errmsg: %s\n", m);
    if (strstr(m, want) == NULL)
        fail_msg("errmsg '%s' lacks '%s'", m, want);
}

void e2e_write_file(const char *path, const char *text, mode_t mode)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, mode);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
    assert_int_equal(chmod(path, mode), 0);
}

static bool is_idle(void *arg)
{
    json_t *st = e2e_ctl_json(arg, "status");
    if (st == NULL)
        return false;
    json_t *tasks = json_object_get(st, "tasks");
    json_int_t pending = json_integer_value(json_object_get(tasks, "waiting")) +
                         json_integer_value(json_object_get(tasks, "ready")) +
                         json_integer_value(json_object_get(tasks, "assigned")) +
                         json_integer_value(json_object_get(tasks, "running")) +
                         json_integer_value(json_object_get(tasks, "done")) +
                         json_integer_value(json_object_get(tasks, "failed"));
    json_int_t objs = json_integer_value(json_object_get(json_object_get(st, "objects"), "count"));
    uint64_t used = e2e_used_bytes(st);
    json_decref(st);
    return pending == 0 && objs == 0 && used == 0;
}

bool e2e_cluster_idle(h_cluster *c, int deadline_ms)
{
    return h_eventually(is_idle, c, deadline_ms);
}

uint64_t e2e_used_bytes(json_t *status)
{
    uint64_t used = 0;
    size_t i;
    json_t *w;
    json_array_foreach(json_object_get(status, "workers"), i, w) used +=
        (uint64_t)json_integer_value(json_object_get(json_object_get(w, "memory"), "used"));
    return used;
}

bool e2e_status_used(h_cluster *c, uint64_t *used)
{
    json_t *st = e2e_ctl_json(c, "status");
    if (st == NULL)
        return false;
    *used = e2e_used_bytes(st);
    json_decref(st);
    return true;
}

long e2e_status_kib(int pid, const char *field)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", pid);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return 0;
    long v = 0;
    size_t n = strlen(field);
    while (fgets(line, sizeof line, f) != NULL)
        if (strncmp(line, field, n) == 0 && line[n] == ':')
            v = strtol(line + n + 1, NULL, 10);
    fclose(f);
    return v;
}

uint64_t e2e_fd_blocks(int pid, const char *what)
{
    char dirp[64];
    snprintf(dirp, sizeof dirp, "/proc/%d/fd", pid);
    DIR *d = opendir(dirp);
    if (d == NULL)
        return 0;
    uint64_t v = 0;
    ino_t seen[16];
    int nseen = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        char path[PATH_MAX], link[PATH_MAX];
        snprintf(path, sizeof path, "%s/%s", dirp, e->d_name);
        ssize_t n = readlink(path, link, sizeof link - 1);
        if (n <= 0)
            continue;
        link[n] = '\0';
        struct stat st;
        if (strstr(link, what) == NULL || stat(path, &st) != 0)
            continue;
        bool dup = false;
        for (int i = 0; i < nseen; i++)
            dup = dup || seen[i] == st.st_ino;
        if (dup)
            continue;
        if (nseen < 16)
            seen[nseen++] = st.st_ino;
        v += (uint64_t)st.st_blocks * 512;
    }
    closedir(d);
    return v;
}

/* Counting the memfd's blocks once, rather than each process's RssShmem, does not count pages
 * shared with executors twice. */
uint64_t e2e_arena_resident(int pid)
{
    return e2e_fd_blocks(pid, "/memfd:spillway-worker");
}

/* A process's share of the anonymous pages it maps, in bytes: a page shared copy-on-write with
 * a child forked but not yet exec'd (an executor being spawned) counts half in each, so the sum
 * over a worker and its children counts it once, where RssAnon would count it in both. */
static uint64_t anon_share(int pid)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/smaps_rollup", pid);
    FILE *f = fopen(path, "r");
    long kib = -1;
    while (f != NULL && kib < 0 && fgets(line, sizeof line, f) != NULL)
        if (strncmp(line, "Pss_Anon:", 9) == 0)
            kib = strtol(line + 9, NULL, 10);
    if (f != NULL)
        fclose(f);
    if (kib < 0) /* a kernel without Pss_Anon */
        kib = e2e_status_kib(pid, "RssAnon");
    return (uint64_t)kib * 1024;
}

uint64_t e2e_node_memory(int pid)
{
    uint64_t v = anon_share(pid) + e2e_arena_resident(pid);
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/task/%d/children", pid, pid);
    FILE *f = fopen(path, "r");
    int child;
    while (f != NULL && fscanf(f, "%d", &child) == 1)
        v += anon_share(child);
    if (f != NULL)
        fclose(f);
    return v;
}

int e2e_notify_socket(const char *path)
{
    unlink(path);
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    assert_true(fd >= 0);
    struct sockaddr_un sun = {.sun_family = AF_UNIX};
    snprintf(sun.sun_path, sizeof sun.sun_path, "%s", path);
    assert_int_equal(bind(fd, (struct sockaddr *)&sun, sizeof sun), 0);
    return fd;
}

void e2e_notify_recv(int fd, int timeout_s, char *msg, size_t len)
{
    struct timeval tv = {timeout_s, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    ssize_t n = recv(fd, msg, len - 1, 0);
    assert_true(n > 0);
    msg[n] = '\0';
}

int e2e_tcp_count(int port, unsigned states)
{
    FILE *f = fopen("/proc/net/tcp", "re");
    if (f == NULL)
        return -1;
    char line[512];
    int n = 0;
    while (fgets(line, sizeof line, f) != NULL) {
        unsigned lport, st;
        if (sscanf(line, " %*d: %*x:%x %*x:%*x %x", &lport, &st) == 2 && (int)lport == port &&
            st < 32 && (states & (1u << st)) != 0)
            n++;
    }
    fclose(f);
    return n;
}

int e2e_dir_entries(const char *path)
{
    DIR *d = opendir(path);
    int n = 0;
    struct dirent *e;
    while (d != NULL && (e = readdir(d)) != NULL)
        n += e->d_name[0] != '.';
    if (d != NULL)
        closedir(d);
    return n;
}

uint64_t e2e_memory_sum(h_cluster *c, const char *field)
{
    json_t *st = e2e_ctl_json(c, "status");
    uint64_t v = 0;
    size_t i;
    json_t *w;
    json_array_foreach(json_object_get(st, "workers"), i, w)
    {
        v += (uint64_t)json_integer_value(json_object_get(json_object_get(w, "memory"), field));
    }
    json_decref(st);
    return v;
}

uint64_t e2e_worker_figure(h_cluster *c, const char *name, bool mem, const char *field)
{
    json_t *st = e2e_ctl_json(c, "status");
    json_t *w = e2e_json_find(json_object_get(st, "workers"), "name", name);
    uint64_t v = (uint64_t)json_integer_value(json_object_get(mem ? json_object_get(w, "memory") : w,
                                                              field));
    json_decref(st);
    return v;
}

size_t e2e_copies_on(h_cluster *c, spillway_ref r, const char *node, const char *state)
{
    char hex[33];
    json_t *doc = e2e_ctl_json(c, "memory");
    json_t *o = e2e_json_find(json_object_get(doc, "objects"), "id", spillway_ref_hex(r, hex));
    size_t n = 0, i;
    json_t *loc;
    json_array_foreach(json_object_get(o, "locations"), i, loc)
    {
        const char *s = json_string_value(json_object_get(loc, "state"));
        const char *on = json_string_value(json_object_get(loc, "node"));
        n += (state == NULL || (s != NULL && strcmp(s, state) == 0)) &&
             (node == NULL || (on != NULL && strcmp(on, node) == 0));
    }
    json_decref(doc);
    return n;
}

size_t e2e_copies(h_cluster *c, spillway_ref r, const char *state)
{
    return e2e_copies_on(c, r, NULL, state);
}

spillway_ref e2e_fill_on(spillway *cl, const char *worker, uint64_t size, const char *pattern)
{
    spillway_graph *g = spillway_graph_new(cl);
    assert_int_equal(spillway_graph_place(g, worker), 0);
    spillway_arg a[2] = {spillway_arg_u64(size),
                         spillway_arg_bytes(pattern, pattern != NULL ? strlen(pattern) : 0)};
    spillway_ref r;
    assert_int_equal(spillway_task(g, "fill", a, pattern != NULL ? 2 : 1, SPILLWAY_KEEP, &r), 0);
    E2E_SUBMIT(g);
    assert_int_equal(spillway_wait(cl, &r, 1, 60000), 0);
    return r;
}

void e2e__submit(spillway_graph *g, const char *site, const char *file, int line)
{
    int rc = spillway_submit_at(g, site);
    spillway_graph_free(g);
    _assert_int_equal((uintmax_t)rc, 0, file, line);
}

spillway_ref e2e__submit_u64(spillway *cl, const char *fn, uint64_t x, const char *site)
{
    spillway_graph *g = spillway_graph_new(cl);
    spillway_ref r;
    spillway_arg a = spillway_arg_u64(x);
    assert_int_equal(spillway_task_at(g, fn, &a, 1, SPILLWAY_KEEP, &r, site), 0);
    assert_int_equal(spillway_submit_at(g, site), 0);
    spillway_graph_free(g);
    return r;
}

void e2e__stop(h_cluster *c, spillway *cl, bool idle_first, const char *file, int line)
{
    if (idle_first)
        _assert_true(e2e_cluster_idle(c, 20000), "e2e_cluster_idle(c, 20000)", file, line);
    spillway_close(cl);
    _assert_true(h_cluster_stop(c), "h_cluster_stop(c)", file, line);
}

pid_t e2e_client_fork(h_cluster *c, e2e_client_fn fn, void *arg, bool wait_ready)
{
    fflush(NULL);
    int ready[2];
    assert_int_equal(pipe(ready), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL); /* never outlive the test */
        close(ready[0]);
        /* Default options, reconnecting included: a killed client's session must still end
         * when it dies (the scheduler sees its process gone), not after --session-grace. */
        spillway *cl = NULL;
        if (spillway_connect(c->addr, NULL, &cl) != 0 || fn(cl, arg) != 0)
            _exit(1);
        if (write(ready[1], "x", 1) != 1)
            _exit(1);
        pause(); /* until killed */
        _exit(0);
    }
    h_track(pid);
    close(ready[1]);
    if (wait_ready) {
        char x;
        assert_int_equal(read(ready[0], &x, 1), 1);
    }
    close(ready[0]);
    return pid;
}

void e2e_client_kill(pid_t pid)
{
    kill(pid, SIGKILL);
    int st;
    waitpid(pid, &st, 0);
}

typedef struct log_arg {
    const h_proc *p;
    const char *needle;
} log_arg;

static bool log_has(void *arg)
{
    const log_arg *a = arg;
    return h_log_count(a->p, a->needle) > 0;
}

bool e2e_logged(const h_proc *p, const char *needle, int deadline_ms)
{
    log_arg a = {p, needle};
    return h_eventually(log_has, &a, deadline_ms);
}

json_t *e2e_json_find(json_t *array, const char *key, const char *value)
{
    size_t i;
    json_t *e;
    json_array_foreach(array, i, e)
    {
        const char *s = json_string_value(json_object_get(e, key));
        if (s != NULL && strcmp(s, value) == 0)
            return e;
    }
    return NULL;
}
