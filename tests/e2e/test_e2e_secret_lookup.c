/* Where the library and spillway-ctl find the cluster secret: the options first, then
 * $SPILLWAY_SECRET_FILE, then /etc/spillway/secret; a secret file others may read is refused.
 * Real daemons on 127.0.0.1; the /etc case runs in a mount namespace of its own (root). */
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

static int connect_null(h_cluster *c)
{
    spillway *cl = NULL;
    int rc = spillway_connect(c->addr, NULL, &cl);
    spillway_close(cl);
    return rc;
}

/* Options first, then $SPILLWAY_SECRET_FILE; spillway-ctl the same with no --secret-file.
 * A group-readable secret (0640) is accepted by daemons and clients, a world-readable one by
 * neither. */
static void secret_comes_from_options_then_environment(void)
{
    h_cluster *c = h_cluster_start(true, NULL);
    assert_int_equal(chmod(c->secret_file, 0640), 0);
    const char *wargs[] = {"--slots", "1", "--store-capacity", "16M", NULL};
    h_worker_start(c, wargs); /* a worker reads the 0640 file */
    char wrong[600], open_[600];
    snprintf(wrong, sizeof wrong, "%s/wrong", c->dir);
    snprintf(open_, sizeof open_, "%s/open", c->dir);
    e2e_write_file(wrong, "another-cluster-secret\n", 0600); /* 16+ bytes: refused as wrong */
    e2e_write_file(open_, "e2e-cluster-secret\n", 0644);

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
    const char *sargv[] = {
        h_bin("spillway-scheduler"), "--listen", "127.0.0.1:0", "--secret-file", open_, NULL};
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

static void secret_falls_back_to_etc_spillway_secret(void)
{
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
    H_CASE(secret_comes_from_options_then_environment),
    H_CASE(secret_falls_back_to_etc_spillway_secret),
};

SPW_TEST_MAIN(tests)
