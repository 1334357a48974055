/*
 * A program that brings its own task functions: it uploads a plugin (a shared library built
 * from worker/examples/plugin_upper.c) to the cluster and runs it, with no worker restarted and
 * nothing installed on the workers.
 *
 *   cc -shared -fPIC -o upper.so plugin_upper.c $(pkg-config --cflags spillway)
 *   cc -o plugin-demo plugin_demo.c $(pkg-config --cflags --libs spillway)
 *   SPILLWAY_SECRET_FILE=/etc/spillway/secret ./plugin-demo 127.0.0.1:7400 ./upper.so
 *
 * Uploads run code on the workers, so the cluster needs a secret (and this program must know
 * it). The plugin is named by the hash of its bytes; spillway_plugin_fn gives the name a task
 * runs one of its functions by ("upper@1f3a..."), so a changed build is a new plugin that runs
 * beside the old one.
 */
#include <stdio.h>
#include <string.h>

#include <spillway/spillway.h>

static int fail(spillway *c, const char *what, int rc)
{
    fprintf(stderr, "plugin-demo: %s: %s: %s\n", what, spillway_strerror(rc), spillway_errmsg(c));
    return 1;
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: plugin-demo HOST:PORT PLUGIN.so\n");
        return 2;
    }
    spillway *c;
    int rc = spillway_connect(argv[1], NULL, &c);
    if (rc != 0)
        return fail(NULL, "connect", rc);
    spillway_plugin *p;
    rc = spillway_plugin_add(c, argv[2], &p);
    if (rc != 0) {
        spillway_close(c);
        return fail(c, "upload", rc);
    }
    printf("uploaded plugin %s, hash %s\n", spillway_plugin_name(p), spillway_plugin_hash(p));

    /* Ten tasks of the uploaded function, spread over the workers. */
    char fn[SPILLWAY_FN_MAX];
    spillway_plugin_fn(p, "upper", fn, sizeof fn);
    enum { N = 10 };
    spillway_ref out[N];
    char text[N][32];
    spillway_graph *g = spillway_graph_new(c);
    for (int i = 0; i < N; i++) {
        snprintf(text[i], sizeof text[i], "hello, plugin %d", i);
        spillway_arg a = spillway_arg_bytes(text[i], strlen(text[i]));
        rc = spillway_task(g, fn, &a, 1, SPILLWAY_KEEP, &out[i]);
        if (rc != 0)
            break;
    }
    if (rc == 0)
        rc = spillway_submit(g);
    spillway_graph_free(g);
    int status = 0;
    for (int i = 0; rc == 0 && i < N; i++) {
        void *data;
        size_t len;
        rc = spillway_get(c, out[i], 60000, &data, &len);
        if (rc != 0)
            break;
        printf("%s(\"%s\") = \"%.*s\"\n", fn, text[i], (int)len, (const char *)data);
        for (size_t k = 0; k < len; k++)
            if (((const char *)data)[k] >= 'a' && ((const char *)data)[k] <= 'z')
                status = 1; /* not upper-cased: wrong */
        spillway_free(data);
        spillway_release(c, out[i]);
    }
    if (rc != 0)
        status = fail(c, "tasks", rc);
    spillway_plugin_release(p);
    spillway_close(c);
    return status;
}
