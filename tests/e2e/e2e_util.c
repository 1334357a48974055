/* Helpers shared by the end-to-end test files; see e2e_util.h. */
#include "e2e_util.h"

#include <dirent.h>
#include <limits.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

spillway *e2e_connect(h_cluster *c)
{
    spillway_opts o;
    spillway_opts_init(&o);
    if (c->secret_file[0] != '\0')
        o.secret_file = c->secret_file;
    spillway *cl = NULL;
    int rc = spillway_connect(c->addr, &o, &cl);
    if (rc != 0)
        fail_msg("connect to %s: %s", c->addr, spillway_strerror(rc));
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
    spillway_graph *g = spillway_graph_new(cl);
    spillway_ref r;
    spillway_arg a = spillway_arg_u64(41);
    assert_int_equal(spillway_task(g, "inc", &a, 1, SPILLWAY_KEEP, &r), 0);
    assert_int_equal(spillway_submit(g), 0);
    spillway_graph_free(g);
    assert_int_equal(e2e_get_u64(cl, r), 42);
    assert_int_equal(spillway_release(cl, r), 0);
}

typedef struct idle_arg {
    h_cluster *c;
} idle_arg;

static bool is_idle(void *arg)
{
    idle_arg *a = arg;
    json_t *st = e2e_ctl_json(a->c, "status");
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
    idle_arg a = {c};
    return h_eventually(is_idle, &a, deadline_ms);
}

uint64_t e2e_used_bytes(json_t *status)
{
    uint64_t used = 0;
    size_t i;
    json_t *w;
    json_array_foreach(json_object_get(status, "workers"), i, w)
    {
        used += (uint64_t)json_integer_value(json_object_get(json_object_get(w, "memory"), "used"));
    }
    return used;
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

/* Bytes of shared memory the worker's arena holds: the memfd's allocated blocks. Counting it
 * once, rather than each process's RssShmem, does not count pages shared with executors twice. */
uint64_t e2e_arena_resident(int pid)
{
    char dirp[64];
    snprintf(dirp, sizeof dirp, "/proc/%d/fd", pid);
    DIR *d = opendir(dirp);
    if (d == NULL)
        return 0;
    uint64_t v = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        char path[PATH_MAX], link[PATH_MAX];
        snprintf(path, sizeof path, "%s/%s", dirp, e->d_name);
        ssize_t n = readlink(path, link, sizeof link - 1);
        if (n <= 0)
            continue;
        link[n] = '\0';
        struct stat st;
        if (strncmp(link, "/memfd:spillway-worker", 22) == 0 && stat(path, &st) == 0) {
            v = (uint64_t)st.st_blocks * 512;
            break;
        }
    }
    closedir(d);
    return v;
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
