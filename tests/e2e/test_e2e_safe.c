/* End-to-end tests of issue 10, "safe by default": who may use a worker's local socket and
 * which arena mapping each gets, the connection cap, configuration mistakes, and error
 * reporting. Real daemons on 127.0.0.1 with ephemeral ports; a case that needs root (to run a
 * helper as another user) exits 77, which ctest reports as SKIP, when not root. */
#include <errno.h>
#include <grp.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../unit/test_main.h"
#include "e2e_util.h"

#define SKIP_CODE 77

static h_cluster g_cluster;
static bool g_running;

static bool cluster_stop(h_cluster *c)
{
    g_running = false;
    return h_cluster_stop(c);
}

static int teardown(void **state)
{
    (void)state;
    if (g_running) {
        fprintf(stderr, "case failed: daemon logs follow\n");
        h_dump_logs(&g_cluster);
        g_running = false;
        h_cluster_stop(&g_cluster);
    }
    return 0;
}

static void need_root(void)
{
    if (geteuid() != 0) {
        fprintf(stderr, "SKIP: needs root to run a helper as user nobody\n");
        exit(SKIP_CODE);
    }
}

/* Runs spw_local_probe as nobody:nogroup against worker 0; its output goes to stderr. */
static int run_probe(h_cluster *c, const char *mode)
{
    struct passwd *pw = getpwnam("nobody");
    if (pw == NULL)
        fail_msg("no user nobody");
    char uid[16], gid[16], pid[16];
    snprintf(uid, sizeof uid, "%u", (unsigned)pw->pw_uid);
    snprintf(gid, sizeof gid, "%u", (unsigned)pw->pw_gid);
    snprintf(pid, sizeof pid, "%d", (int)c->workers[0].pid);
    const char *argv[] = {h_bin("spw_local_probe"), uid, gid, c->addr, pid, mode, NULL};
    char *out = NULL;
    int rc = h_run(argv, &out);
    fprintf(stderr, "--- spw_local_probe %s (exit %d):\n%s", mode, rc, out != NULL ? out : "");
    free(out);
    return rc;
}

/* Another local user (nobody) is refused on the worker's abstract socket with SPW_EAUTH before
 * any handshake, so it never holds the arena; libspillway falls back to TCP and still reads
 * the right bytes. */
static void local_socket_refuses_other_uid_and_client_reads_over_tcp(void **state)
{
    (void)state;
    need_root();
    h_cluster_simple(&g_cluster, 1);
    g_running = true;
    assert_int_equal(run_probe(&g_cluster, "refused"), 0);
    assert_true(e2e_cluster_idle(&g_cluster, 20000));
    assert_true(cluster_stop(&g_cluster));
}

/* With --local-group nogroup, nobody (whose primary group that is) may map the arena: a reader
 * gets a read-only descriptor that can neither be mapped writable nor reopened read-write via
 * /proc; only a put asks for (and gets) a read-write one. */
static void local_group_member_gets_read_only_arena_for_reads(void **state)
{
    (void)state;
    need_root();
    if (getgrnam("nogroup") == NULL)
        fail_msg("no group nogroup");
    h_cluster_start(&g_cluster, false, NULL);
    g_running = true;
    static const char *const args[] = {"--slots", "1", "--store-capacity", "256M",
                                       "--local-group", "nogroup", NULL};
    h_worker_start(&g_cluster, args);
    assert_int_equal(run_probe(&g_cluster, "allowed"), 0);
    assert_true(e2e_cluster_idle(&g_cluster, 20000));
    assert_true(cluster_stop(&g_cluster));
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test_teardown(local_socket_refuses_other_uid_and_client_reads_over_tcp, teardown),
    cmocka_unit_test_teardown(local_group_member_gets_read_only_arena_for_reads, teardown),
};

SPW_TEST_MAIN(tests)
