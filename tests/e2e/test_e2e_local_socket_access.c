/* Who may use a worker's local socket and which arena mapping each gets: another user is
 * refused and reads over TCP, a --local-group member maps the arena read-only for reads.
 * The cases run a helper as user nobody, so they need root; without it they exit 77, which
 * ctest reports as SKIP. */
#include <dirent.h>
#include <errno.h>
#include <grp.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../unit/test_main.h"
#include "e2e_util.h"

#define SKIP_CODE 77

static void need_root(void)
{
    if (geteuid() != 0) {
        fprintf(stderr, "SKIP: needs root to run a helper as user nobody\n");
        exit(SKIP_CODE);
    }
}

/* Runs spw_local_probe as nobody against worker 0, with nobody's own group as its primary
 * group, or with gid and supp (a supplementary group after 300 others) when gid is not NULL;
 * its output goes to stderr. */
static int run_probe_as(h_cluster *c, const char *mode, const char *gid_arg, const char *supp)
{
    struct passwd *pw = getpwnam("nobody");
    if (pw == NULL)
        fail_msg("no user nobody");
    char uid[16], gid[16], pid[16];
    snprintf(uid, sizeof uid, "%u", (unsigned)pw->pw_uid);
    snprintf(gid, sizeof gid, "%u", (unsigned)pw->pw_gid);
    snprintf(pid, sizeof pid, "%d", (int)c->workers[0].pid);
    const char *argv[] = {h_bin("spw_local_probe"),
                          uid,
                          gid_arg != NULL ? gid_arg : gid,
                          c->addr,
                          pid,
                          mode,
                          supp,
                          NULL};
    char *out = NULL;
    int rc = h_run(argv, &out);
    fprintf(stderr, "--- spw_local_probe %s (exit %d):\n%s", mode, rc, out != NULL ? out : "");
    free(out);
    return rc;
}

static int run_probe(h_cluster *c, const char *mode)
{
    return run_probe_as(c, mode, NULL, NULL);
}

/* Another local user (nobody) is refused on the worker's abstract socket with SPW_EAUTH before
 * any handshake, so it never holds the arena; libspillway falls back to TCP and still reads
 * the right bytes. */
static void local_socket_refuses_other_uid_and_client_reads_over_tcp(void)
{
    need_root();
    h_cluster *c = h_cluster_simple(1);
    assert_int_equal(run_probe(c, "refused"), 0);
    E2E_FINISH(c, NULL);
}

/* With --local-group nogroup, nobody (whose primary group that is) may map the arena: a reader
 * gets a read-only descriptor that can neither be mapped writable nor reopened read-write via
 * /proc; only a put asks for (and gets) a read-write one. */
static void local_group_member_gets_read_only_arena_for_reads(void)
{
    need_root();
    if (getgrnam("nogroup") == NULL)
        fail_msg("no group nogroup");
    h_cluster *c = h_cluster_start(false, NULL);
    static const char *const args[] = {"--slots", "1", "--store-capacity", "256M", "--local-group",
                                       "nogroup", NULL};
    h_worker_start(c, args);
    assert_int_equal(run_probe(c, "allowed"), 0);
    E2E_FINISH(c, NULL);
}

/* A --local-group member whose membership is one supplementary group among more than 256 (the
 * primary group another) gets in all the same: the peer's whole group list is read, however
 * long. It used to be refused with SPW_EAUTH: SO_PEERGROUPS into a 256-entry buffer failed
 * with ERANGE and that counted as not a member. */
static void local_group_member_with_many_groups_gets_in(void)
{
    need_root();
    struct group *gr = getgrnam("nogroup");
    if (gr == NULL)
        fail_msg("no group nogroup");
    h_cluster *c = h_cluster_start(false, NULL);
    static const char *const args[] = {"--slots", "1", "--store-capacity", "256M", "--local-group",
                                       "nogroup", NULL};
    h_worker_start(c, args);
    char supp[16];
    snprintf(supp, sizeof supp, "%u", (unsigned)gr->gr_gid);
    assert_int_equal(run_probe_as(c, "allowed", "39999", supp), 0);
    E2E_FINISH(c, NULL);
}

static const struct CMUnitTest tests[] = {
    H_CASE(local_socket_refuses_other_uid_and_client_reads_over_tcp),
    H_CASE(local_group_member_gets_read_only_arena_for_reads),
    H_CASE(local_group_member_with_many_groups_gets_in),
};

SPW_TEST_MAIN(tests)
