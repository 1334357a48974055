/*
 * Plugins by content: the worker's plugin cache and uploaded plugins.
 *
 * Every plugin an executor loads is a file in the worker's cache directory (mode 0700, made at
 * start under the spill or state directory and removed at shutdown), named by the BLAKE2b-256
 * hash of its bytes. A --plugin file is copied there at start, so replacing or rewriting the
 * original later never reaches an executor (the timer notices and logs it) until the worker is
 * told to reload (SIGHUP): then each file is read again and a changed one copied in by content
 * and loaded by executors started afterwards. An uploaded plugin
 * is fetched the first time a task here names one of its functions ("NAME@PREFIX"): the worker
 * asks the scheduler where its bytes are (PLUGIN_GET), brings the object into its store through
 * the fetch path, checks the hash, writes the file, and tells each executor to load it
 * (PLUGIN_LOAD) before the first task of it goes there. Tasks naming a plugin that is not here
 * yet wait, parked (t->plugin_wait), on its entry's list of task ids.
 * Invariants: a plugin's `uses` counts the tasks taken in naming it; only an uploaded plugin with
 * no use is removed from the cache, least recently used first, and only to make room under
 * --plugin-cache-max; a file in the cache always has the bytes its name says.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "worker_int.h"

enum { WP_GETTING, WP_FETCHING, WP_READY };

static void plugin_settle(wrk *w, wplugin *p, int status, const char *msg);

/* ------------------------------------------------------------------- cache */

/* Removes what the cache holds and the directory itself. */
static void cache_remove_dir(wrk *w)
{
    if (w->plugin_dir == NULL)
        return;
    wplugin *p, *tmp;
    HASH_ITER(hh, w->plugins, p, tmp)
    if (p->path != NULL)
        unlink(p->path);
    if (rmdir(w->plugin_dir) != 0 && errno != ENOENT)
        spw_log(SPW_LOG_WARN, "plugin cache %s: cannot remove it: %s", w->plugin_dir,
                strerror(errno));
}

/* The folder caches go in: --plugin-cache-dir, else the spill folder, else the state folder. */
static const char *cache_base(const wrk *w)
{
    const char *base = w->opts.plugin_cache_dir;
    if (base == NULL)
        base = w->opts.store.spill_dir;
    if (base == NULL) {
        const char *state = getenv("STATE_DIRECTORY");
        base = state != NULL && state[0] == '/' && strchr(state, ':') == NULL ? state : "/var/tmp";
    }
    return base;
}

/* Removes the caches that workers killed before their cleanup left under base: each is named
 * for its worker's pid, and a pid that no process has is gone (a reused one is only skipped). */
static void cache_sweep(const char *base)
{
    DIR *d = opendir(base);
    if (d == NULL)
        return;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        unsigned long pid;
        char tail[16];
        if (sscanf(e->d_name, "spillway-plugins-%lu.%15s", &pid, tail) != 2 || pid == 0 ||
            pid > INT_MAX || (pid_t)pid == getpid() || kill((pid_t)pid, 0) == 0 || errno != ESRCH)
            continue;
        char path[PATH_MAX];
        if ((size_t)snprintf(path, sizeof path, "%s/%s", base, e->d_name) >= sizeof path)
            continue;
        int dfd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        DIR *sub = dfd >= 0 ? fdopendir(dfd) : NULL;
        if (sub == NULL) {
            if (dfd >= 0)
                close(dfd);
            continue;
        }
        struct dirent *f;
        while ((f = readdir(sub)) != NULL)
            if (f->d_name[0] != '.')
                unlinkat(dfd, f->d_name, 0);
        closedir(sub);
        if (rmdir(path) == 0)
            spw_log(SPW_LOG_INFO, "plugin cache %s of a worker gone: removed", path);
    }
    closedir(d);
}

/* Makes the cache folder the first time something goes in it: a worker that never caches a
 * plugin leaves nothing behind, even when killed. */
static int cache_mkdir(wrk *w)
{
    if (w->plugin_dir != NULL)
        return 0;
    const char *base = cache_base(w);
    char tmpl[PATH_MAX];
    if ((size_t)snprintf(tmpl, sizeof tmpl, "%s/spillway-plugins-%d.XXXXXX", base,
                         (int)getpid()) >= sizeof tmpl)
        return SPW_ENAMETOOLONG;
    if (mkdtemp(tmpl) == NULL) { /* mode 0700 */
        int rc = -errno;
        spw_log(SPW_LOG_ERR, "plugin cache under %s: %s", base, strerror(errno));
        return rc;
    }
    w->plugin_dir = spw_strdup(SPW_MOD_WORKER, tmpl);
    return 0;
}

/* Writes len bytes as the cache file of hash hex (a temporary name, then renamed: a reader never
 * sees half a file). *path gets the file's name. */
static int cache_write(wrk *w, const char *hex, const void *data, size_t len, char **path)
{
    int mk = cache_mkdir(w);
    if (mk != 0)
        return mk;
    char tmp[PATH_MAX], final[PATH_MAX];
    snprintf(final, sizeof final, "%s/%s.so", w->plugin_dir, hex);
    snprintf(tmp, sizeof tmp, "%s/%s.tmp", w->plugin_dir, hex);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0500);
    if (fd < 0)
        return -errno;
    const uint8_t *b = data;
    size_t off = 0;
    int rc = 0;
    while (off < len) {
        ssize_t n = write(fd, b + off, len - off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            rc = n < 0 ? -errno : SPW_EIO;
            break;
        }
        off += (size_t)n;
    }
    if (close(fd) != 0 && rc == 0)
        rc = -errno;
    if (rc == 0 && rename(tmp, final) != 0)
        rc = -errno;
    if (rc != 0) {
        unlink(tmp);
        return rc;
    }
    *path = spw_strdup(SPW_MOD_WORKER, final);
    return 0;
}

/* Makes room for need more bytes under --plugin-cache-max by removing unused uploaded plugins,
 * least recently used first. @return 0, or SPW_ENOSPC when what is in use leaves no room. */
static int cache_room(wrk *w, uint64_t need)
{
    uint64_t cap = w->opts.plugin_cache_max;
    while (cap != 0 && w->plugin_bytes + need > cap) {
        wplugin *lru = NULL, *p, *tmp;
        HASH_ITER(hh, w->plugins, p, tmp)
        if (p->uploaded && p->state == WP_READY && p->uses == 0 &&
            (lru == NULL || p->used_seq < lru->used_seq))
            lru = p;
        if (lru == NULL)
            return SPW_ENOSPC;
        spw_log(SPW_LOG_INFO, "plugin=%s hash=%s removed from the cache (unused, room for %llu "
                              "bytes under --plugin-cache-max)",
                lru->name, lru->hex, (unsigned long long)need);
        wrk__plugin_forget(w, lru);
    }
    return 0;
}

/* ---------------------------------------------------------------- entries */

/* p leaves the table (its memory is about to be freed). */
static void plugin_gone(wrk *w, wplugin *p)
{
    HASH_DEL(w->plugins, p);
    if (w->plugin_last == p)
        w->plugin_last = NULL;
}

static wplugin *plugin_new(wrk *w, const char *prefix)
{
    wplugin *p = spw_calloc(SPW_MOD_WORKER, 1, sizeof *p);
    memcpy(p->prefix, prefix, PROTO_PLUGIN_PREFIX_HEX);
    p->prefix[PROTO_PLUGIN_PREFIX_HEX] = '\0';
    p->serial = ++w->plugin_serial;
    HASH_ADD_STR(w->plugins, prefix, p);
    return p;
}

void wrk__plugin_forget(wrk *w, wplugin *p)
{
    plugin_gone(w, p);
    if (p->path != NULL) {
        unlink(p->path);
        if (p->state == WP_READY)
            w->plugin_bytes -= p->size;
    }
    /* Executors that loaded it keep its code mapped: they are replaced once idle. */
    for (uint32_t i = 0; i < w->nexec; i++)
        for (uint32_t k = 0; k < w->execs[i].ntold; k++)
            if (w->execs[i].told[k] == p->serial)
                w->execs[i].recycle = true;
    spw_free(p->path);
    spw_buf_release(&p->waiters);
    spw_free(p);
    w->plugins_changed = true;
}

/* Tells the scheduler which plugins the executors here load, when that changed. */
static void put_plug(proto_enc *e, uint32_t i, void *arg)
{
    wplugin **v = arg;
    proto_put_plug_rec(e, &(proto_plug_rec){.hash = {v[i]->hash, PROTO_PLUGIN_HASH_LEN},
                                            .name = v[i]->name,
                                            .size = v[i]->size,
                                            .uploaded = v[i]->uploaded});
}

void wrk__plugins_report(wrk *w, bool always)
{
    if ((!w->plugins_changed && !always) || w->sched == NULL || !w->welcomed)
        return;
    w->plugins_changed = false;
    uint32_t n = 0;
    wplugin *p, *tmp;
    HASH_ITER(hh, w->plugins, p, tmp)
    n += p->state == WP_READY;
    wplugin **v = spw_calloc(SPW_MOD_WORKER, n ? n : 1, sizeof *v);
    n = 0;
    HASH_ITER(hh, w->plugins, p, tmp)
    if (p->state == WP_READY)
        v[n++] = p;
    proto_send_worker_plugins(w->sched, 0,
                              &(proto_worker_plugins_msg){
                                  .plugins = {.n = n, .put = put_plug, .arg = v},
                                  .no_uploads = !w->opts.allow_plugin_upload});
    spw_free(v);
}

/* ---------------------------------------------------- --plugin, by content */

/* Reads a whole file of at most max bytes into *data (spw_malloc'd). */
static int read_file(const char *path, uint64_t max, uint8_t **data, size_t *len, struct stat *st)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    int rc = 0;
    if (fstat(fd, st) != 0 || !S_ISREG(st->st_mode)) {
        rc = S_ISREG(st->st_mode) ? -errno : SPW_EINVAL;
        close(fd);
        return rc;
    }
    if (max != 0 && (uint64_t)st->st_size > max) {
        close(fd);
        return SPW_ETOOBIG;
    }
    size_t n = (size_t)st->st_size, off = 0;
    uint8_t *b = spw_try_malloc(SPW_MOD_WORKER, n ? n : 1);
    if (b == NULL) {
        close(fd);
        return SPW_ENOMEM;
    }
    while (off < n) {
        ssize_t r = read(fd, b + off, n - off);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            rc = r < 0 ? -errno : SPW_EIO; /* shrank under us */
            break;
        }
        off += (size_t)r;
    }
    close(fd);
    if (rc != 0) {
        spw_free(b);
        return rc;
    }
    *data = b;
    *len = n;
    return 0;
}

/* Remembers how --plugin file src looked when p's bytes were read from it. */
static void src_note(wplugin *p, const char *src, const struct stat *st)
{
    p->src = src;
    p->src_dev = st->st_dev;
    p->src_ino = st->st_ino;
    p->src_mtime_ns =
        (uint64_t)st->st_mtim.tv_sec * 1000000000ull + (uint64_t)st->st_mtim.tv_nsec;
    p->src_size = (uint64_t)st->st_size;
    p->src_changed = false;
}

/* Reads --plugin file src, copies it into the cache and loads it once to check it. *out gets
 * its entry: the one of the same bytes already here (*fresh false), or a new READY one. On
 * failure nothing changes and why says what went wrong. */
static int static_load(wrk *w, const char *src, wplugin **out, bool *fresh, char *why,
                       size_t whylen)
{
    uint8_t *data = NULL;
    size_t len = 0;
    struct stat st;
    int rc = read_file(src, w->opts.plugin_max_size, &data, &len, &st);
    if (rc != 0) {
        snprintf(why, whylen, "cannot be read: %s%s", spw_strerror(rc),
                 rc == SPW_ETOOBIG ? " (over --plugin-max-size)" : "");
        return SPW_EPLUGIN;
    }
    uint8_t hash[PROTO_PLUGIN_HASH_LEN];
    char hex[PROTO_PLUGIN_HEX_LEN + 1];
    proto_plugin_hash(data, len, hash);
    proto_plugin_hex(hash, hex);
    wplugin *p;
    HASH_FIND(hh, w->plugins, hex, PROTO_PLUGIN_PREFIX_HEX, p); /* keyed by the prefix */
    if (p != NULL && p->state == WP_READY && memcmp(p->hash, hash, sizeof hash) == 0) {
        spw_free(data);
        *out = p;
        *fresh = false;
        if (p->src == NULL)
            src_note(p, src, &st);
        return 0;
    }
    if (p != NULL) {
        spw_free(data);
        snprintf(why, whylen, "hash=%s: a plugin of another hash (or on its way here) starts "
                              "with the same %u hex digits",
                 hex, PROTO_PLUGIN_PREFIX_HEX);
        return SPW_EPLUGIN;
    }
    char *path = NULL;
    rc = cache_write(w, hex, data, len, &path);
    spw_free(data);
    if (rc != 0) {
        snprintf(why, whylen, "cannot be copied into the cache %s: %s", w->plugin_dir,
                 spw_strerror(rc));
        return rc;
    }
    const char *name = NULL;
    uint32_t nfns = 0;
    rc = wrk__plugin_probe(path, &name, &nfns, why, whylen);
    if (rc != 0) {
        unlink(path);
        spw_free(path);
        return SPW_EPLUGIN;
    }
    p = plugin_new(w, hex);
    memcpy(p->hash, hash, sizeof hash);
    memcpy(p->hex, hex, sizeof hex);
    snprintf(p->name, sizeof p->name, "%s", name);
    spw_free((void *)name);
    p->size = len;
    p->path = path;
    p->state = WP_READY;
    src_note(p, src, &st);
    w->plugin_bytes += len;
    spw_log(SPW_LOG_NOTICE, "plugin=%s name=%s functions=%u hash=%s size=%zu", src, p->name,
            nfns, hex, len);
    *out = p;
    *fresh = true;
    return 0;
}

int wrk__plugins_init(wrk *w)
{
    cache_sweep(cache_base(w));
    for (uint32_t i = 0; i < w->opts.nplugins; i++) {
        const char *src = w->plugin_srcs[i];
        wplugin *p;
        bool fresh;
        char why[PROTO_MAX_STR];
        int rc = static_load(w, src, &p, &fresh, why, sizeof why);
        if (rc != 0) {
            spw_log(SPW_LOG_ERR, "plugin=%s %s", src, why);
            return rc;
        }
        if (!fresh) {
            spw_log(SPW_LOG_WARN, "plugin=%s has the same bytes as one given before: loaded once",
                    src);
            continue;
        }
        w->static_paths[w->nstatic++] = p->path;
    }
    return 0;
}

/* --plugin entry old gives way to np (another file's bytes): executors start with np's copy,
 * and old stays only while tasks here name it by its hash, as an uploaded plugin would. */
static void static_replace(wrk *w, wplugin *old, wplugin *np)
{
    for (uint32_t i = 0; i < w->nstatic; i++)
        if (w->static_paths[i] == old->path)
            w->static_paths[i] = np->path;
    np->uploaded = false;
    old->src = NULL;
    if (old->uses > 0)
        old->uploaded = true;
    else
        wrk__plugin_forget(w, old);
}

void wrk__plugins_reload(wrk *w)
{
    uint32_t n = 0, changed = 0;
    wplugin *v[WRK_MAX_PLUGINS], *p, *tmp;
    HASH_ITER(hh, w->plugins, p, tmp)
    if (p->src != NULL && n < WRK_MAX_PLUGINS)
        v[n++] = p;
    for (uint32_t i = 0; i < n; i++) {
        const char *src = v[i]->src;
        wplugin *np;
        bool fresh;
        char why[PROTO_MAX_STR];
        int rc = static_load(w, src, &np, &fresh, why, sizeof why);
        if (rc != 0) {
            spw_log(SPW_LOG_ERR, "plugin=%s not reloaded, %s: its executors keep running the "
                                 "bytes they ran (name=%s hash=%s)",
                    src, why, v[i]->name, v[i]->hex);
            continue;
        }
        if (np == v[i]) {
            struct stat st;
            if (stat(src, &st) == 0)
                src_note(np, src, &st); /* touched, or changed back: the same bytes */
            spw_log(SPW_LOG_INFO, "plugin=%s unchanged (hash=%s)", src, np->hex);
            continue;
        }
        spw_log(SPW_LOG_NOTICE, "plugin=%s reloaded: name=%s hash=%s (was %s): tasks from now on "
                                "run it, running ones finish with the bytes they started with",
                src, np->name, np->hex, v[i]->hex);
        static_replace(w, v[i], np);
        changed++;
    }
    if (changed == 0)
        return;
    /* Executors load --plugin files at start: each is replaced once its queue is empty. */
    for (uint32_t i = 0; i < w->nexec; i++)
        w->execs[i].recycle = true;
    wrk__exec_maintain(w);
    w->plugins_changed = true;
    wrk__plugins_report(w, false);
}

void wrk__plugins_watch(wrk *w)
{
    wplugin *p, *tmp;
    HASH_ITER(hh, w->plugins, p, tmp)
    {
        if (p->src == NULL)
            continue;
        struct stat st;
        bool same = stat(p->src, &st) == 0 && st.st_dev == p->src_dev && st.st_ino == p->src_ino &&
                    (uint64_t)st.st_size == p->src_size &&
                    (uint64_t)st.st_mtim.tv_sec * 1000000000ull + (uint64_t)st.st_mtim.tv_nsec ==
                        p->src_mtime_ns;
        if (same || p->src_changed)
            continue;
        p->src_changed = true; /* logged once */
        spw_log(SPW_LOG_WARN, "plugin=%s changed on disk since the worker loaded it: its "
                              "executors keep running the bytes it loaded (name=%s hash=%s) "
                              "until told to reload (SIGHUP, systemctl reload)",
                p->src, p->name, p->hex);
    }
}

void wrk__plugins_free(wrk *w)
{
    cache_remove_dir(w);
    wplugin *p, *tmp;
    HASH_ITER(hh, w->plugins, p, tmp)
    {
        plugin_gone(w, p);
        spw_free(p->path);
        spw_buf_release(&p->waiters);
        spw_free(p);
    }
    spw_free(w->plugin_dir);
    w->plugin_dir = NULL;
}

/* ------------------------------------------------------- uploaded plugins */

static bool uploads_allowed(const wrk *w, char *why, size_t len)
{
    if (!w->opts.allow_plugin_upload) {
        snprintf(why, len, "plugin uploads are off on this worker (--allow-plugin-upload no)");
        return false;
    }
    /* The scheduler enforces who may upload (a secret, or its own user on its local socket):
     * only the scheduler this worker connected to sends it tasks and checks. */
    return true;
}

int wrk__plugin_intake(wrk *w, wtask *t, char *why, size_t whylen)
{
    size_t len = strlen(t->fn);
    wplugin *p = w->plugin_last;
    /* A graph's tasks name one function many times over: the last answer, without parsing the
     * name or looking the prefix up. */
    if (p != NULL && w->plugin_last_len == len && memcmp(w->plugin_last_fn, t->fn, len) == 0)
        goto found;
    const char *prefix = proto_plugin_fn_prefix(t->fn, len);
    if (prefix == NULL)
        return 0;
    HASH_FIND_STR(w->plugins, prefix, p);
    if (p == NULL) {
        if (!uploads_allowed(w, why, whylen))
            return SPW_EPERM;
        if (w->sched == NULL) {
            snprintf(why, whylen, "the worker lost its scheduler");
            return SPW_ECLOSED;
        }
        p = plugin_new(w, prefix);
        p->uploaded = true;
        p->state = WP_GETTING;
        p->req = ++w->next_req;
        proto_send_plugin_get(w->sched, p->req, &(proto_plugin_get_msg){.prefix = p->prefix});
    }
    if (len <= sizeof w->plugin_last_fn) {
        w->plugin_last = p; /* until p goes (plugin_gone) */
        memcpy(w->plugin_last_fn, t->fn, len);
        w->plugin_last_len = (uint32_t)len;
    }
found:
    t->plugin = p;
    p->uses++;
    p->used_seq = ++w->plugin_uses; /* a count, not a clock: no call per task */
    if (p->state == WP_READY)
        return 0;
    t->plugin_wait = 1;
    spw_buf_append(&p->waiters, &t->id, sizeof t->id);
    return 1;
}

void wrk__plugin_unuse(wrk *w, wtask *t)
{
    (void)w;
    if (t->plugin != NULL)
        t->plugin->uses--;
    t->plugin = NULL;
}

/* Its bytes are here (status 0) or not to be had: the tasks waiting for it go on, or fail. A
 * plugin that could not be had is forgotten (freed here), so the next task naming it asks
 * again. */
static void plugin_settle(wrk *w, wplugin *p, int status, const char *msg)
{
    char full[PROTO_MAX_STR];
    if (status != 0) {
        snprintf(full, sizeof full, "plugin @%s%s%s: %s", p->prefix, p->name[0] ? " " : "",
                 p->name, msg != NULL ? msg : spw_strerror(status));
        spw_log(SPW_LOG_WARN, "%s", full);
        if (p->check_req != 0 && w->sched != NULL)
            proto_send_plugin_checked(w->sched, p->check_req,
                                      &(proto_plugin_checked_msg){
                                          .hash = {p->hash, PROTO_PLUGIN_HASH_LEN},
                                          .status = status,
                                          .msg = full,
                                          .name = p->name});
        plugin_gone(w, p);
    }
    spw_buf ids = p->waiters;
    p->waiters = (spw_buf){0};
    for (size_t off = 0; off + sizeof(spw_id) <= ids.len; off += sizeof(spw_id)) {
        spw_id id;
        memcpy(&id, ids.data + off, sizeof id);
        wtask *t;
        HASH_FIND(hh, w->tasks, &id, sizeof id, t);
        if (t == NULL || t->plugin != p || !t->plugin_wait)
            continue;
        t->plugin_wait = 0;
        if (status != 0) {
            wrk__plugin_unuse(w, t);
            wrk__task_fail(w, t, status, full);
        } else if (t->fail_status != 0) {
            wrk__task_fail(w, t, t->fail_status, t->fail_msg); /* cancelled meanwhile */
        } else if (t->gen != w->gen) {
            wrk__task_fail(w, t, SPW_ECLOSED, "the scheduler that sent it is gone");
        } else {
            wrk__task_begin(w, t);
        }
    }
    spw_buf_release(&ids);
    if (status != 0) {
        /* Every task that named it waited for it, and has let it go above. */
        SPW_ASSERT(p->uses == 0);
        if (p->path != NULL)
            unlink(p->path);
        spw_free(p->path);
        spw_free(p);
        w->plugins_changed = true;
    }
}

/* The object holding its bytes is pinned here: check them, write the file. */
static void plugin_materialize(wrk *w, wplugin *p, ost_obj *o)
{
    uint8_t hash[PROTO_PLUGIN_HASH_LEN];
    uint64_t size = ost_obj_size(o);
    proto_plugin_hash(ost_obj_data(o), size, hash);
    if (size != p->size || memcmp(hash, p->hash, sizeof hash) != 0) {
        char got[PROTO_PLUGIN_HEX_LEN + 1], msg[256];
        snprintf(msg, sizeof msg, "its bytes here (%llu) hash to %s, not to its name %s: refused",
                 (unsigned long long)size, proto_plugin_hex(hash, got), p->hex);
        ost_obj_unpin(w->store, o);
        plugin_settle(w, p, SPW_ECORRUPT, msg);
        return;
    }
    int rc = cache_room(w, size);
    if (rc == 0)
        rc = cache_write(w, p->hex, ost_obj_data(o), size, &p->path);
    ost_obj_unpin(w->store, o);
    if (rc != 0) {
        char msg[256];
        snprintf(msg, sizeof msg, "cannot be written into the cache %s: %s%s", w->plugin_dir,
                 spw_strerror(rc), rc == SPW_ENOSPC ? " (--plugin-cache-max)" : "");
        plugin_settle(w, p, rc, msg);
        return;
    }
    p->state = WP_READY;
    w->plugin_bytes += size;
    w->plugins_changed = true;
    spw_log(SPW_LOG_INFO, "plugin=%s hash=%s size=%llu cached at %s", p->name, p->hex,
            (unsigned long long)size, p->path);
    if (p->check_req != 0)
        wrk__plugin_check_start(w, p);
    wrk__plugins_report(w, false);
    plugin_settle(w, p, 0, NULL);
}

typedef struct plug_pin {
    wrk *w;
    char prefix[PROTO_PLUGIN_PREFIX_HEX + 1];
} plug_pin;

static void plugin_pinned(void *arg, int status, ost_obj *o)
{
    plug_pin *r = arg;
    wrk *w = r->w;
    wplugin *p;
    HASH_FIND_STR(w->plugins, r->prefix, p);
    spw_free(r);
    if (p == NULL || w->closing) {
        if (status == 0)
            ost_obj_unpin(w->store, o);
        return;
    }
    if (status != 0) {
        plugin_settle(w, p, status, "its object here cannot be read");
        return;
    }
    plugin_materialize(w, p, o);
}

/* Brings its bytes here: from the store, or fetched from where the scheduler says they are. */
static void plugin_obtain(wrk *w, wplugin *p, const proto_val *locs)
{
    ost_obj *o = ost_obj_find(w->store, p->obj);
    if (o != NULL && ost_obj_state(o) == OST_SEALED) {
        plug_pin *r = spw_malloc(SPW_MOD_WORKER, sizeof *r);
        r->w = w;
        memcpy(r->prefix, p->prefix, sizeof r->prefix);
        p->state = WP_FETCHING;
        int rc = ost_obj_get_async(w->store, o, plugin_pinned, r);
        if (rc != 0) {
            spw_free(r);
            plugin_settle(w, p, rc, "its object here cannot be read");
        }
        return;
    }
    p->state = WP_FETCHING;
    wrk__fetch_plugin(w, p->obj, p->size, locs);
}

/* PLUGIN_INFO, or PLUGIN_CHECK (check: the scheduler's request to answer once it loaded). */
static void plugin_info(wrk *w, const proto_msg *m, bool check)
{
    char why[256];
    const proto_val *f = m->f;
    char hex[PROTO_PLUGIN_HEX_LEN + 1];
    proto_plugin_hex(f[F_PINFO_HASH].bin.ptr, hex);
    wplugin *p;
    HASH_FIND(hh, w->plugins, hex, PROTO_PLUGIN_PREFIX_HEX, p);
    if (check && !uploads_allowed(w, why, sizeof why)) {
        proto_send_plugin_checked(w->sched, m->req,
                                  &(proto_plugin_checked_msg){.hash = {f[F_PINFO_HASH].bin.ptr,
                                                                       PROTO_PLUGIN_HASH_LEN},
                                                              .status = SPW_EPERM,
                                                              .msg = why});
        return;
    }
    if (p == NULL && check) {
        p = plugin_new(w, hex);
        p->uploaded = true;
        p->state = WP_GETTING;
    }
    if (p == NULL || (!check && (p->req != m->req || p->state != WP_GETTING)))
        return; /* an answer nobody waits for any more */
    if (p->state == WP_READY) {
        if (check) {
            p->check_req = m->req;
            wrk__plugin_check_start(w, p);
        }
        return;
    }
    if (check)
        p->check_req = m->req;
    memcpy(p->hash, f[F_PINFO_HASH].bin.ptr, PROTO_PLUGIN_HASH_LEN);
    memcpy(p->hex, hex, sizeof hex);
    proto_str(&f[F_PINFO_NAME], p->name, sizeof p->name);
    p->size = f[F_PINFO_SIZE].u;
    p->obj = f[F_PINFO_OBJ].id;
    p->req = 0;
    if (p->size == 0 || (w->opts.plugin_max_size != 0 && p->size > w->opts.plugin_max_size)) {
        snprintf(why, sizeof why, "%llu bytes, over this worker's --plugin-max-size %llu",
                 (unsigned long long)p->size, (unsigned long long)w->opts.plugin_max_size);
        plugin_settle(w, p, SPW_ETOOBIG, why);
        return;
    }
    if (p->state == WP_GETTING)
        plugin_obtain(w, p, &f[F_PINFO_LOCS]);
}

void wrk__plugin_msg(wrk *w, const proto_msg *m)
{
    plugin_info(w, m, m->type == PROTO_PLUGIN_CHECK);
}

bool wrk__plugin_error(wrk *w, const proto_msg *m)
{
    wplugin *p, *tmp;
    HASH_ITER(hh, w->plugins, p, tmp)
    {
        if (p->req == 0 || p->req != m->req || p->state != WP_GETTING)
            continue;
        char msg[PROTO_MAX_STR];
        proto_str(&m->f[F_ERROR_MSG], msg, sizeof msg);
        plugin_settle(w, p, proto_err_code(m->f[F_ERROR_CODE].i), msg);
        return true;
    }
    return false;
}

void wrk__plugin_fetched(wrk *w, spw_id id, int status, const char *msg)
{
    wplugin *p, *tmp;
    HASH_ITER(hh, w->plugins, p, tmp)
    {
        if (p->state != WP_FETCHING || !spw_id_eq(p->obj, id))
            continue;
        if (status != 0) {
            plugin_settle(w, p, status, msg);
            return;
        }
        plugin_obtain(w, p, NULL); /* sealed here now */
        return;
    }
}

void wrk__plugins_drop(wrk *w)
{
    /* The scheduler is gone: what was asked of it will not be answered. */
    wplugin *p, *tmp;
    HASH_ITER(hh, w->plugins, p, tmp)
    {
        p->check_req = 0;
        if (p->state == WP_GETTING)
            plugin_settle(w, p, SPW_ECLOSED, "the worker lost its scheduler");
    }
}

void wrk__plugin_tell(wrk *w, wrk_exec *ex, wplugin *p)
{
    for (uint32_t k = 0; k < ex->ntold; k++)
        if (ex->told[k] == p->serial)
            return;
    if (ex->ntold == ex->captold) {
        ex->captold = ex->captold ? ex->captold * 2 : 4;
        ex->told = spw_realloc(SPW_MOD_WORKER, ex->told, ex->captold * sizeof *ex->told);
    }
    ex->told[ex->ntold++] = p->serial;
    (void)w;
    proto_send_plugin_load(ex->conn, 0,
                           &(proto_plugin_load_msg){.hash = {p->hash, PROTO_PLUGIN_HASH_LEN},
                                                    .path = p->path});
}

/* ----------------------------------------------------------- load checks */

/* A plugin's check: `spillway-worker --plugin-check PATH OUT` loads it in a process of its own
 * (a plugin that crashes at load takes that process down, not the worker) and writes
 * "STATUS NFNS NAME" or "STATUS message" to OUT. */
typedef struct wcheck {
    uv_process_t proc;
    wrk *w;
    char prefix[PROTO_PLUGIN_PREFIX_HEX + 1];
    uint64_t req;
    uint8_t hash[PROTO_PLUGIN_HASH_LEN];
    char out[PATH_MAX];
} wcheck;

static void check_closed(uv_handle_t *h)
{
    wcheck *c = h->data;
    wrk *w = c->w;
    spw_free(c);
    w->handles--;
    wrk__maybe_done(w);
}

static void check_exit(uv_process_t *proc, int64_t status, int term_signal)
{
    wcheck *c = proc->data;
    wrk *w = c->w;
    char line[PROTO_MAX_STR] = "";
    FILE *f = fopen(c->out, "r");
    if (f != NULL) {
        if (fgets(line, sizeof line, f) == NULL)
            line[0] = '\0';
        fclose(f);
    }
    unlink(c->out);
    line[strcspn(line, "\n")] = '\0';
    wplugin *p;
    HASH_FIND_STR(w->plugins, c->prefix, p);
    int rc = SPW_EPLUGIN;
    unsigned nfns = 0;
    char name[PROTO_MAX_NAME + 1] = "", msg[PROTO_MAX_STR];
    int code = 0, used = 0;
    if (term_signal != 0) {
        snprintf(msg, sizeof msg, "loading it killed the process that loaded it (signal %d)",
                 term_signal);
    } else if (sscanf(line, "%d %n", &code, &used) >= 1 && code == 0 && status == 0 &&
               sscanf(line + used, "%u %255[^\n]", &nfns, name) >= 1) {
        rc = 0;
        msg[0] = '\0';
    } else if (line[0] == '\0' && status != 0) {
        /* No result written: it died while loading, through a handler that turned its signal
         * into an exit status (a sanitizer's, or one of the plugin's own). */
        snprintf(msg, sizeof msg,
                 "loading it ended the process that loaded it (exit status %lld, no result: a "
                 "crash caught by a signal handler)",
                 (long long)status);
    } else {
        snprintf(msg, sizeof msg, "%s", line[0] != '\0' ? line + used : "cannot be loaded");
        if (code < 0)
            rc = code;
    }
    if (w->sched != NULL && !w->closing)
        proto_send_plugin_checked(
            w->sched, c->req,
            &(proto_plugin_checked_msg){.hash = {c->hash, PROTO_PLUGIN_HASH_LEN},
                                        .status = rc,
                                        .msg = msg,
                                        .name = name,
                                        .fns = nfns});
    if (p != NULL && rc == 0 && strcmp(p->name, name) != 0) {
        snprintf(p->name, sizeof p->name, "%s", name); /* its own, not its uploader's */
        w->plugins_changed = true;
        wrk__plugins_report(w, false);
    }
    if (p != NULL && rc != 0)
        spw_log(SPW_LOG_WARN, "plugin @%s hash=%s refused: %s", p->prefix, p->hex, msg);
    uv_close((uv_handle_t *)proc, check_closed);
}

void wrk__plugin_check_start(wrk *w, wplugin *p)
{
    uint64_t req = p->check_req;
    p->check_req = 0;
    wcheck *c = spw_calloc(SPW_MOD_WORKER, 1, sizeof *c);
    c->w = w;
    c->req = req;
    memcpy(c->prefix, p->prefix, sizeof c->prefix);
    memcpy(c->hash, p->hash, sizeof c->hash);
    snprintf(c->out, sizeof c->out, "%s/check-%llu.out", w->plugin_dir, (unsigned long long)req);
    char *argv[] = {w->exe, "--plugin-check", p->path, c->out, NULL};
    uv_stdio_container_t stdio[3] = {{.flags = UV_IGNORE},
                                     {.flags = UV_INHERIT_FD, .data.fd = 1},
                                     {.flags = UV_INHERIT_FD, .data.fd = 2}};
    uv_process_options_t po;
    memset(&po, 0, sizeof po);
    po.file = w->exe;
    po.args = argv;
    po.exit_cb = check_exit;
    po.stdio = stdio;
    po.stdio_count = 3;
    c->proc.data = c;
    w->handles++;
    int rc = uv_spawn(w->loop, &c->proc, &po);
    if (rc != 0) {
        char msg[128];
        snprintf(msg, sizeof msg, "cannot start a process to load it: %s", uv_strerror(rc));
        proto_send_plugin_checked(w->sched, req,
                                  &(proto_plugin_checked_msg){
                                      .hash = {p->hash, PROTO_PLUGIN_HASH_LEN},
                                      .status = SPW_EPLUGIN,
                                      .msg = msg});
        uv_close((uv_handle_t *)&c->proc, check_closed);
    }
}
