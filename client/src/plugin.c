/*
 * Uploaded plugins, the client's side: spillway_plugin_add uploads a plugin's bytes once (a put
 * named by their hash, proto_plugin_obj_id) and adds it at the scheduler (PLUGIN_ADD), which has
 * a worker load it before answering; spillway_plugin_fn names its functions for tasks. A
 * spillway_plugin is the client's hold on it; the connection lists them so that closing it
 * leaves them detached rather than dangling.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "client_int.h"

struct spillway_plugin {
    spillway *c; /* NULL once the connection closed */
    struct spillway_plugin *prev, *next; /* on c->plugins */
    uint8_t hash[PROTO_PLUGIN_HASH_LEN];
    char hex[PROTO_PLUGIN_HEX_LEN + 1];
    char name[PROTO_MAX_NAME + 1];
};

typedef struct add_q {
    spillway_plugin *p;
    const char *name; /* ours for it, until the check names it */
} add_q;

typedef struct add_call {
    add_q q;
    uint64_t size;
} add_call;

static void add_enc_sized(proto_enc *e, spw_buf *out, uint64_t req, void *arg)
{
    add_call *a = arg;
    proto_enc_plugin_add(e, out, req,
                         &(proto_plugin_add_msg){.hash = {a->q.p->hash, PROTO_PLUGIN_HASH_LEN},
                                                 .size = a->size,
                                                 .name = a->q.name,
                                                 .site = ""});
}

static void add_reply(const proto_msg *m, void *arg)
{
    add_call *a = arg;
    spillway *c = a->q.p->c;
    int status = proto_status(m->f[F_PCHK_STATUS].i);
    if (status != 0) {
        char msg[PROTO_MAX_STR + 1];
        spillway__set_err(c, "%s", proto_str(&m->f[F_PCHK_MSG], msg, sizeof msg));
        c->call.status = status;
        return;
    }
    proto_str(&m->f[F_PCHK_NAME], a->q.p->name, sizeof a->q.p->name);
}

static int add(spillway *c, add_call *a)
{
    return spillway__request(c, add_enc_sized, add_reply, a, PROTO_PLUGIN_CHECKED, -1);
}

static int plugin_add_mem(spillway *c, const void *data, size_t len, const char *name,
                          spillway_plugin **out)
{
    if (c == NULL || data == NULL || len == 0 || out == NULL)
        return spillway__refuse(c, SPW_EINVAL, "spillway_plugin_add_mem", "%s",
                                len == 0       ? "len is 0; a plugin has at least one byte"
                                : data == NULL ? "data is NULL"
                                               : "out is NULL");
    if (spillway__connected(c) != 0)
        return SPW_ECLOSED;
    spillway_plugin *p = spw_calloc(SPW_MOD_CLIENT, 1, sizeof *p);
    p->c = c;
    proto_plugin_hash(data, len, p->hash);
    proto_plugin_hex(p->hash, p->hex);
    add_call a = {{p, name}, len};
    int rc = add(c, &a);
    if (rc == SPW_ENOOBJ) {
        /* Not stored yet: put the bytes, wait until the scheduler has them, add again. */
        spw_id id = proto_plugin_obj_id(p->hash);
        rc = spillway__put_object(c, id, data, len, PROTO_PUT_CONTENT_ID, "spillway_plugin_add");
        if (rc == 0) {
            handle *h = spillway__handle_find(c, id);
            if (h == NULL)
                h = spillway__handle_add(c, id, H_PUT);
            h->state = H_DONE;
            h->size = len;
            uint64_t size;
            rc = spillway__resolve_size(c, id, &size, NULL);
            if (rc == 0)
                rc = add(c, &a);
            /* The plugin's record holds its bytes now (or nothing does: refused). */
            h = spillway__handle_find(c, id);
            if (h != NULL && h->graph_uses == 0)
                spillway__handle_release(c, h);
        }
    }
    if (rc != 0) {
        spw_free(p);
        return rc;
    }
    p->next = c->plugins;
    if (c->plugins != NULL)
        c->plugins->prev = p;
    c->plugins = p;
    *out = p;
    return 0;
}

void spillway__plugins_detach(spillway *c)
{
    for (spillway_plugin *p = c->plugins; p != NULL; p = p->next)
        p->c = NULL;
    c->plugins = NULL;
}

static int plugin_add(spillway *c, const char *path, spillway_plugin **out)
{
    if (c == NULL || path == NULL || out == NULL)
        return spillway__refuse(c, SPW_EINVAL, "spillway_plugin_add", "%s is NULL",
                                path == NULL ? "path" : "out");
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
        int rc = -errno;
        spillway__set_err(c, "%s: %s", path, strerror(errno));
        if (fd >= 0)
            close(fd);
        return rc;
    }
    if (!S_ISREG(st.st_mode) || st.st_size == 0) {
        close(fd);
        return spillway__refuse(c, SPW_EINVAL, "spillway_plugin_add", "path %s %s", path,
                                S_ISREG(st.st_mode) ? "is empty; a plugin has at least one byte"
                                                    : "is not a regular file");
    }
    size_t n = (size_t)st.st_size, off = 0;
    uint8_t *buf = S_ISREG(st.st_mode) ? spw_try_malloc(SPW_MOD_CLIENT, n ? n : 1) : NULL;
    int rc = buf == NULL ? (S_ISREG(st.st_mode) ? SPW_ENOMEM : SPW_EINVAL) : 0;
    while (rc == 0 && off < n) {
        ssize_t r = read(fd, buf + off, n - off);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            rc = r < 0 ? -errno : SPW_EIO;
        else
            off += (size_t)r;
    }
    close(fd);
    if (rc == 0) {
        const char *base = strrchr(path, '/');
        rc = plugin_add_mem(c, buf, n, base != NULL ? base + 1 : path, out);
    } else {
        spillway__set_err(c, "%s: %s", path, spw_strerror(rc));
    }
    spw_free(buf);
    return rc;
}

static void ok_reply(const proto_msg *m, void *arg)
{
    (void)m;
    (void)arg;
}

static void release_enc(proto_enc *e, spw_buf *out, uint64_t req, void *arg)
{
    spillway_plugin *p = arg;
    proto_enc_plugin_release(e, out, req, &(proto_plugin_release_msg){
                                              .hash = {p->hash, PROTO_PLUGIN_HASH_LEN}});
}

static int plugin_release(spillway_plugin *p)
{
    if (p == NULL)
        return 0;
    spillway *c = p->c;
    int rc = 0;
    if (c != NULL) {
        rc = spillway__request(c, release_enc, ok_reply, p, PROTO_OK, 10000);
        if (p->prev != NULL)
            p->prev->next = p->next;
        else
            c->plugins = p->next;
        if (p->next != NULL)
            p->next->prev = p->prev;
    }
    spw_free(p);
    return rc;
}

/* ------------------------------------------------------- public entry points */

int spillway_plugin_add_mem(spillway *c, const void *data, size_t len, spillway_plugin **out)
{
    spillway__enter(c);
    return spillway__leave(c, plugin_add_mem(c, data, len, "", out), "spillway_plugin_add_mem");
}

int spillway_plugin_add(spillway *c, const char *path, spillway_plugin **out)
{
    spillway__enter(c);
    return spillway__leave(c, plugin_add(c, path, out), "spillway_plugin_add");
}

int spillway_plugin_release(spillway_plugin *p)
{
    spillway *c = p != NULL ? p->c : NULL;
    spillway__enter(c);
    return spillway__leave(c, plugin_release(p), "spillway_plugin_release");
}

const char *spillway_plugin_fn(const spillway_plugin *p, const char *fn, char *buf, size_t buflen)
{
    if (p == NULL || fn == NULL || fn[0] == '\0' || strchr(fn, '@') != NULL || buf == NULL)
        return NULL;
    size_t n = strlen(fn);
    if (n + 1 + PROTO_PLUGIN_PREFIX_HEX + 1 > buflen || n + 1 + PROTO_PLUGIN_PREFIX_HEX > PROTO_MAX_NAME)
        return NULL;
    memcpy(buf, fn, n);
    buf[n] = '@';
    memcpy(buf + n + 1, p->hex, PROTO_PLUGIN_PREFIX_HEX);
    buf[n + 1 + PROTO_PLUGIN_PREFIX_HEX] = '\0';
    return buf;
}

const char *spillway_plugin_hash(const spillway_plugin *p)
{
    return p != NULL ? p->hex : "";
}

const char *spillway_plugin_name(const spillway_plugin *p)
{
    return p != NULL ? p->name : "";
}
