/*
 * A program outside the tree, built by tests/install/test_install.sh against the installed
 * library only (pkg-config or find_package): the version calls, a task of the example plugin
 * and a built-in one, through spillway_connect with NULL options. With a file named after the
 * address, it also keeps tasks running for a few seconds, writes the file once they are
 * submitted (for the caller to restart the scheduler meanwhile) and waits for them.
 *
 *   ext_prog HOST:PORT [SUBMITTED-FILE]
 */
#include <stdio.h>
#include <string.h>

#include <spillway/spillway.h>

static int fail(spillway *c, int rc, const char *what)
{
    fprintf(stderr, "ext_prog: %s: %s: %s\n", what, spillway_strerror(rc), spillway_errmsg(c));
    return 1;
}

int main(int argc, char **argv)
{
    if (argc != 2 && argc != 3) {
        fprintf(stderr, "usage: ext_prog HOST:PORT [SUBMITTED-FILE]\n");
        return 2;
    }
    char want[32];
    snprintf(want, sizeof want, "%d.%d.%d", SPILLWAY_VERSION_MAJOR, SPILLWAY_VERSION_MINOR,
             SPILLWAY_VERSION_PATCH);
    if (spillway_version() != SPILLWAY_VERSION_NUMBER ||
        strcmp(spillway_version_string(), want) != 0) {
        fprintf(stderr, "ext_prog: library %u/%s, header %u/%s\n", spillway_version(),
                spillway_version_string(), (unsigned)SPILLWAY_VERSION_NUMBER, want);
        return 1;
    }
    spillway *c;
    int rc = spillway_connect(argv[1], NULL, &c);
    if (rc != 0)
        return fail(NULL, rc, "connect");
    spillway_graph *g = spillway_graph_new(c);
    spillway_ref up, sum;
    spillway_arg text = spillway_arg_bytes("hello, spillway", 15);
    spillway_task(g, "upper", &text, 1, SPILLWAY_KEEP, &up);
    spillway_arg ab[2] = {spillway_arg_u64(40), spillway_arg_u64(2)};
    spillway_task(g, "add", ab, 2, SPILLWAY_KEEP, &sum);
    enum { SLOW = 8 };
    spillway_ref slow[SLOW];
    for (int i = 0; argc == 3 && i < SLOW; i++) {
        spillway_arg ms = spillway_arg_u64(1500);
        spillway_task(g, "sleep_ms", &ms, 1, SPILLWAY_KEEP, &slow[i]);
    }
    if ((rc = spillway_submit(g)) != 0)
        return fail(c, rc, "submit");
    spillway_graph_free(g);
    if (argc == 3) {
        FILE *f = fopen(argv[2], "w");
        if (f == NULL || fclose(f) != 0)
            return fail(c, -1, argv[2]);
        /* The scheduler may be restarted now: the client resumes its session by itself. */
        if ((rc = spillway_wait(c, slow, SLOW, 120000)) != 0)
            return fail(c, rc, "wait for the slow tasks");
        spillway_release_many(c, slow, SLOW);
    }
    void *out;
    size_t len;
    if ((rc = spillway_get(c, up, 30000, &out, &len)) != 0)
        return fail(c, rc, "get upper");
    int ok = len == 15 && memcmp(out, "HELLO, SPILLWAY", 15) == 0;
    spillway_free(out);
    if ((rc = spillway_get(c, sum, 30000, &out, &len)) != 0)
        return fail(c, rc, "get add");
    ok = ok && len == 8 && ((unsigned char *)out)[0] == 42;
    spillway_free(out);
    spillway_ref refs[2] = {up, sum};
    spillway_release_many(c, refs, 2);
    spillway_close(c);
    printf("ext_prog: library %s, %s\n", spillway_version_string(), ok ? "OK" : "WRONG RESULTS");
    return ok ? 0 : 1;
}
