/* The library's and the daemons' log as installed software: the library is quiet but for one
 * warning of each kind on stderr, a log callback gets every message up to its level, and
 * under journald the daemons write "<N>text" lines with no ident and no READY line. */
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

/* Submits on the cluster three graphs that each embed a 100 KiB argument with automatic
 * puts off: every graph makes the library warn twice, with the same two texts each time. */
static void embedding_job(void *cluster)
{
    h_cluster *c = cluster;
    spillway_opts o;
    spillway_opts_init(&o);
    o.no_auto_put = 1;
    spillway *cl;
    assert_int_equal(spillway_connect(c->addr, &o, &cl), 0);
    static char big[100 << 10];
    for (int i = 0; i < 3; i++) {
        spillway_graph *g = spillway_graph_new(cl);
        spillway_arg arg = spillway_arg_bytes(big, sizeof big);
        spillway_ref r;
        assert_int_equal(spillway_task_at(g, "len", &arg, 1, SPILLWAY_KEEP, &r, "job.c:1"), 0);
        E2E_SUBMIT(g);
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
static void library_warns_once_each_on_stderr_by_default(void)
{
    h_cluster *c = h_cluster_simple(1);
    char *err = capture_stderr(embedding_job, c);
    assert_int_equal(count(err, "embeds a 100.0 KiB argument"), 1);
    assert_int_equal(count(err, "graph of 1 tasks carried 100.0 KiB"), 1);
    assert_int_equal(count(err, "libspillway: warning: "), 2);
    assert_null(strstr(err, "<4>"));
    free(err);
    E2E_STOP(c, NULL);
}

/* With a callback, every message up to the level goes there, repeats included, and none to
 * stderr; above the level nothing arrives. */
static void library_log_callback_gets_every_message_up_to_its_level(void)
{
    h_cluster *c = h_cluster_simple(1);
    spillway_set_log(log_cb, SPILLWAY_LOG_WARN);
    char *err = capture_stderr(embedding_job, c);
    assert_string_equal(err, "");
    free(err);
    assert_int_equal(logged[SPILLWAY_LOG_WARN], 6);
    assert_non_null(strstr(last_msg, "graph of 1 tasks carried 100.0 KiB"));
    /* Errors only: the warnings are dropped. */
    memset(logged, 0, sizeof logged);
    spillway_set_log(log_cb, SPILLWAY_LOG_ERR);
    err = capture_stderr(embedding_job, c);
    assert_string_equal(err, "");
    free(err);
    assert_int_equal(logged[SPILLWAY_LOG_WARN], 0);
    E2E_STOP(c, NULL);
}

/* ------------------------------------------------------------ under journald */

/* With stdout and stderr on the journal's stream (JOURNAL_STREAM names its device and inode),
 * a daemon writes "<N>text" (journald adds name and pid: no second ident), no READY line, and
 * tells systemd READY=1. */
static void daemon_lines_under_journald_carry_no_ident_and_no_ready(void)
{
    h_cluster *c = h_cluster_bare();
    char log[600], sock[108];
    snprintf(log, sizeof log, "%s/journal.log", c->dir);
    snprintf(sock, sizeof sock, "/tmp/spw-journal-notify-%d", (int)getpid());
    int lfd = open(log, O_WRONLY | O_CREAT, 0644);
    assert_true(lfd >= 0);
    struct stat st;
    assert_int_equal(fstat(lfd, &st), 0);
    close(lfd);
    int nfd = e2e_notify_socket(sock);
    char js[64];
    snprintf(js, sizeof js, "%llu:%llu", (unsigned long long)st.st_dev,
             (unsigned long long)st.st_ino);
    setenv("JOURNAL_STREAM", js, 1);
    setenv("NOTIFY_SOCKET", sock, 1);
    const char *argv[] = {
        h_bin("spillway-scheduler"), "--listen", "127.0.0.1:0", "--http", "none", NULL};
    pid_t pid = h_spawn(c, argv, "journal");
    unsetenv("JOURNAL_STREAM");
    unsetenv("NOTIFY_SOCKET");
    char msg[512];
    e2e_notify_recv(nfd, 30, msg, sizeof msg);
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

static const struct CMUnitTest tests[] = {
    H_CASE(library_warns_once_each_on_stderr_by_default),
    H_CASE(library_log_callback_gets_every_message_up_to_its_level),
    H_CASE(daemon_lines_under_journald_carry_no_ident_and_no_ready),
};

SPW_TEST_MAIN(tests)
