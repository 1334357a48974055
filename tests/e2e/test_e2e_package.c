/* What issue 14 made of the library and the daemons as installed software, end to end:
 * the library's log (quiet by default, a callback on request), the daemons' lines under
 * journald, and where the library and spillway-ctl find the cluster secret. Real daemons on
 * 127.0.0.1. */
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../unit/test_main.h"
#include "e2e_util.h"

/* ------------------------------------------------------------------ helpers */

/* Runs fn with the process's stderr going to a temporary file; returns what it wrote. */
static char *capture_stderr(void (*fn)(void *), void *arg)
{
    char path[] = "/tmp/spw-stderr-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    unlink(path);
    fflush(stderr);
    int saved = dup(2);
    dup2(fd, 2);
    fn(arg);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    off_t len = lseek(fd, 0, SEEK_END);
    char *text = calloc(1, (size_t)len + 1);
    assert_int_equal(pread(fd, text, (size_t)len, 0), len);
    close(fd);
    return text;
}

static int count(const char *hay, const char *needle)
{
    int n = 0;
    for (const char *p = strstr(hay, needle); p != NULL; p = strstr(p + 1, needle))
        n++;
    return n;
}

typedef struct job_arg {
    h_cluster *c;
    int graphs;
} job_arg;

/* Submits graphs that each embed a 100 KiB argument with automatic puts off: every graph makes
 * the library warn twice, with the same two texts each time. */
static void embedding_job(void *p)
{
    job_arg *a = p;
    spillway_opts o;
    spillway_opts_init(&o);
    o.no_auto_put = 1;
    spillway *cl;
    assert_int_equal(spillway_connect(a->c->addr, &o, &cl), 0);
    static char big[100 << 10];
    for (int i = 0; i < a->graphs; i++) {
        spillway_graph *g = spillway_graph_new(cl);
        spillway_arg arg = spillway_arg_bytes(big, sizeof big);
        spillway_ref r;
        assert_int_equal(spillway_task_at(g, "len", &arg, 1, SPILLWAY_KEEP, &r, "job.c:1"), 0);
        assert_int_equal(spillway_submit(g), 0);
        spillway_graph_free(g);
        assert_int_equal(e2e_get_u64(cl, r), sizeof big);
        assert_int_equal(spillway_release(cl, r), 0);
    }
    spillway_close(cl);
}

static int logged[8];
static char last_msg[512];

static void log_cb(int level, const char *msg)
{
    if (level >= 0 && level < 8)
        logged[level]++;
    snprintf(last_msg, sizeof last_msg, "%s", msg);
}

/* ------------------------------------------------------------------ the log */

/* By default a warning reaches stderr once however often it recurs, in a plain form. */
static void library_warns_once_each_on_stderr_by_default(void **state)
{
    (void)state;
    h_cluster *c = h_cluster_simple(1);
    job_arg a = {c, 3};
    char *err = capture_stderr(embedding_job, &a);
    assert_int_equal(count(err, "embeds a 100.0 KiB argument"), 1);
    assert_int_equal(count(err, "graph of 1 tasks carried 100.0 KiB"), 1);
    assert_int_equal(count(err, "libspillway: warning: "), 2);
    assert_null(strstr(err, "<4>"));
    free(err);
    E2E_STOP(c, NULL);
}

/* With a callback, every message up to the level goes there, repeats included, and none to
 * stderr; above the level nothing arrives. */
static void library_log_callback_gets_every_message_up_to_its_level(void **state)
{
    (void)state;
    h_cluster *c = h_cluster_simple(1);
    spillway_set_log(log_cb, SPILLWAY_LOG_WARN);
    job_arg a = {c, 3};
    char *err = capture_stderr(embedding_job, &a);
    assert_string_equal(err, "");
    free(err);
    assert_int_equal(logged[SPILLWAY_LOG_WARN], 6);
    assert_non_null(strstr(last_msg, "graph of 1 tasks carried 100.0 KiB"));
    /* Errors only: the warnings are dropped. */
    memset(logged, 0, sizeof logged);
    spillway_set_log(log_cb, SPILLWAY_LOG_ERR);
    err = capture_stderr(embedding_job, &a);
    assert_string_equal(err, "");
    free(err);
    assert_int_equal(logged[SPILLWAY_LOG_WARN], 0);
    E2E_STOP(c, NULL);
}

/* ------------------------------------------------------------ under journald */

/* With stdout and stderr on the journal's stream (JOURNAL_STREAM names its device and inode),
 * a daemon writes "<N>text" (journald adds name and pid: no second ident), no READY line, and
 * tells systemd READY=1. */
static void daemon_lines_under_journald_carry_no_ident_and_no_ready(void **state)
{
    (void)state;
    h_cluster *c = h_cluster_bare();
    char log[600], sock[108];
    snprintf(log, sizeof log, "%s/journal.log", c->dir);
    snprintf(sock, sizeof sock, "/tmp/spw-journal-notify-%d", (int)getpid());
    unlink(sock);
    int lfd = open(log, O_WRONLY | O_CREAT, 0644);
    assert_true(lfd >= 0);
    struct stat st;
    assert_int_equal(fstat(lfd, &st), 0);
    close(lfd);
    int nfd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    struct sockaddr_un sun = {.sun_family = AF_UNIX};
    snprintf(sun.sun_path, sizeof sun.sun_path, "%s", sock);
    assert_int_equal(bind(nfd, (struct sockaddr *)&sun, sizeof sun), 0);
    char js[64];
    snprintf(js, sizeof js, "%llu:%llu", (unsigned long long)st.st_dev,
             (unsigned long long)st.st_ino);
    setenv("JOURNAL_STREAM", js, 1);
    setenv("NOTIFY_SOCKET", sock, 1);
    const char *argv[] = {h_bin("spillway-scheduler"), "--listen", "127.0.0.1:0", "--http", "none",
                          NULL};
    pid_t pid = h_spawn(c, argv, "journal");
    unsetenv("JOURNAL_STREAM");
    unsetenv("NOTIFY_SOCKET");
    struct timeval tv = {30, 0};
    setsockopt(nfd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    char msg[512];
    ssize_t n = recv(nfd, msg, sizeof msg - 1, 0);
    assert_true(n > 0);
    msg[n] = '\0';
    assert_non_null(strstr(msg, "READY=1"));
    close(nfd);
    /* It serves: a client connects (to the address it logged before READY=1). */
    char *text = calloc(1, 65536);
    FILE *f = fopen(log, "r");
    assert_non_null(f);
    assert_non_null(fgets(text, 65536, f));
    fclose(f);
    assert_true(strncmp(text, "<5>listening on 127.0.0.1:", 26) == 0);
    snprintf(c->addr, sizeof c->addr, "%s", text + 16);
    c->addr[strcspn(c->addr, "\n")] = '\0';
    spillway *cl;
    assert_int_equal(spillway_connect(c->addr, NULL, &cl), 0);
    spillway_close(cl);
    /* Stopped like a worker of the harness: SIGTERM, a bounded wait (then SIGKILL). */
    c->nworkers = 1;
    c->workers[0].pid = pid;
    int status = h_worker_kill(c, 0, SIGTERM);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    f = fopen(log, "r");
    assert_non_null(f);
    size_t len = fread(text, 1, 65535, f);
    fclose(f);
    text[len] = '\0';
    assert_true(strncmp(text, "<5>listening on 127.0.0.1:", 26) == 0);
    assert_non_null(strstr(text, "\n<5>signal 15: shutting down\n"));
    assert_null(strstr(text, "spillway-scheduler["));
    assert_null(strstr(text, "READY "));
    free(text);
    unlink(sock);
}

/* ---------------------------------------------------------------- the secret */

static int connect_null(h_cluster *c)
{
    spillway *cl = NULL;
    int rc = spillway_connect(c->addr, NULL, &cl);
    spillway_close(cl);
    return rc;
}

static void write_file(const char *path, const char *text, mode_t mode)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, mode);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
    assert_int_equal(chmod(path, mode), 0);
}

/* Options first, then $SPILLWAY_SECRET_FILE; spillway-ctl the same with no --secret-file.
 * A group-readable secret (0640) is accepted by daemons and clients, a world-readable one by
 * neither. */
static void secret_comes_from_options_then_environment(void **state)
{
    (void)state;
    h_cluster *c = h_cluster_start(true, NULL);
    assert_int_equal(chmod(c->secret_file, 0640), 0);
    const char *wargs[] = {"--slots", "1", "--store-capacity", "16M", NULL};
    h_worker_start(c, wargs); /* a worker reads the 0640 file */
    char wrong[600], open_[600];
    snprintf(wrong, sizeof wrong, "%s/wrong", c->dir);
    snprintf(open_, sizeof open_, "%s/open", c->dir);
    write_file(wrong, "another-cluster-secret\n", 0600); /* 16+ bytes: refused as wrong */
    write_file(open_, "e2e-cluster-secret\n", 0644);

    unsetenv("SPILLWAY_SECRET_FILE");
    assert_int_equal(connect_null(c), SPW_EAUTH); /* no secret anywhere (no /etc/spillway) */
    setenv("SPILLWAY_SECRET_FILE", c->secret_file, 1);
    assert_int_equal(connect_null(c), 0);
    setenv("SPILLWAY_SECRET_FILE", wrong, 1);
    assert_int_equal(connect_null(c), SPW_EAUTH);
    spillway_opts o;
    spillway_opts_init(&o);
    o.secret_file = c->secret_file; /* the options win over the environment */
    spillway *cl;
    assert_int_equal(spillway_connect(c->addr, &o, &cl), 0);
    spillway_close(cl);
    setenv("SPILLWAY_SECRET_FILE", open_, 1);
    assert_int_equal(connect_null(c), SPW_EACCES);

    /* spillway-ctl, no --secret-file: the environment. */
    setenv("SPILLWAY_SECRET_FILE", c->secret_file, 1);
    const char *argv[] = {h_bin("spillway-ctl"), "--scheduler", c->addr, "status", NULL};
    char *out = NULL;
    assert_int_equal(h_run(argv, &out), 0);
    assert_non_null(strstr(out, "workers: 1"));
    free(out);
    setenv("SPILLWAY_SECRET_FILE", wrong, 1);
    assert_int_not_equal(h_run(argv, &out), 0);
    assert_non_null(strstr(out, "authentication failed"));
    free(out);
    unsetenv("SPILLWAY_SECRET_FILE");

    /* A daemon refuses a world-readable secret, naming the rule. */
    const char *sargv[] = {h_bin("spillway-scheduler"), "--listen", "127.0.0.1:0",
                           "--secret-file", open_, NULL};
    assert_int_not_equal(h_run(sargv, &out), 0);
    assert_non_null(strstr(out, "0640"));
    free(out);
    E2E_STOP(c, NULL);
}

/* In a mount namespace of its own with a tmpfs over /etc: /etc/spillway/secret is used when
 * neither the options nor the environment name one, and when it exists but cannot be read
 * (another user), the connection goes without it and a warning says why. */
static int etc_child(h_cluster *c, const char *secret_text)
{
    if (unshare(CLONE_NEWNS) != 0)
        return 77;
    if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0 ||
        mount("tmpfs", "/etc", "tmpfs", 0, "mode=0755") != 0)
        return 77;
    if (mkdir("/etc/spillway", 0755) != 0)
        return 10;
    int fd = open("/etc/spillway/secret", O_WRONLY | O_CREAT, 0640);
    if (fd < 0 || write(fd, secret_text, strlen(secret_text)) != (ssize_t)strlen(secret_text))
        return 11;
    close(fd);
    unsetenv("SPILLWAY_SECRET_FILE");
    if (connect_null(c) != 0)
        return 12;
    /* Another user (not in the file's group) cannot read it: no secret, and a warning. */
    if (setgid(65534) != 0 || setuid(65534) != 0)
        return 77;
    if (connect_null(c) != SPW_EAUTH)
        return 13;
    return 0;
}

static void secret_falls_back_to_etc_spillway_secret(void **state)
{
    (void)state;
    h_cluster *c = h_cluster_start(true, NULL);
    char errlog[600];
    snprintf(errlog, sizeof errlog, "%s/child.err", c->dir);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        int fd = open(errlog, O_WRONLY | O_CREAT | O_TRUNC, 0666);
        dup2(fd, 2);
        _exit(etc_child(c, "e2e-cluster-secret\n"));
    }
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    char line[512] = "";
    FILE *f = fopen(errlog, "r");
    assert_non_null(f);
    if (fgets(line, sizeof line, f) == NULL)
        line[0] = '\0';
    fclose(f);
    E2E_STOP(c, NULL);
    if (WEXITSTATUS(status) == 77) /* no mount namespace here (not root) */
        h_skip();
    assert_int_equal(WEXITSTATUS(status), 0);
    assert_non_null(strstr(line, "libspillway: warning: /etc/spillway/secret: Permission denied: "
                                 "connecting without a cluster secret"));
}

static const struct CMUnitTest tests[] = {
    H_CASE(library_warns_once_each_on_stderr_by_default),
    H_CASE(library_log_callback_gets_every_message_up_to_its_level),
    H_CASE(daemon_lines_under_journald_carry_no_ident_and_no_ready),
    H_CASE(secret_comes_from_options_then_environment),
    H_CASE(secret_falls_back_to_etc_spillway_secret),
};

SPW_TEST_MAIN(tests)
