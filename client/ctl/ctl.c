/*
 * spillway-ctl: the operator's view of a cluster.
 *
 *   spillway-ctl [--scheduler ADDR] [--secret-file PATH] [--json] status
 *   spillway-ctl [...] memory [--group-by node|owner|ref-type|call-site] [--sort-by size|age|id]
 *                             [--stats-only] [--limit N] [--watch SECONDS]
 *
 * Every reply is first turned into one JSON document (jansson), and the human table is printed
 * from that document, so the table and --json can never disagree. Errors (scheduler down,
 * wrong secret, unknown option) are one line on stderr and a non-zero exit status.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "client_int.h"

static const char *stat_names[PROTO_STAT_COUNT] = {
    [PROTO_STAT_CAPACITY] = "capacity",
    [PROTO_STAT_USED] = "used",
    [PROTO_STAT_PINNED] = "pinned",
    [PROTO_STAT_OBJS_MEM] = "objects_in_memory",
    [PROTO_STAT_OBJS_DISK] = "objects_spilled",
    [PROTO_STAT_SPILLED_RAW] = "spilled_bytes",
    [PROTO_STAT_SPILLED_STORED] = "spilled_stored_bytes",
    [PROTO_STAT_SPILL_COUNT] = "spill_count",
    [PROTO_STAT_SPILL_BYTES] = "spill_total_bytes",
    [PROTO_STAT_SPILL_NS] = "spill_ns",
    [PROTO_STAT_RESTORE_COUNT] = "restore_count",
    [PROTO_STAT_RESTORE_BYTES] = "restore_total_bytes",
    [PROTO_STAT_RESTORE_NS] = "restore_ns",
    [PROTO_STAT_PAUSED] = "paused",
    [PROTO_STAT_RUNNING] = "running",
    [PROTO_STAT_TASKS_DONE] = "tasks_done",
    [PROTO_STAT_TASKS_FAILED] = "tasks_failed",
    [PROTO_STAT_EXEC_RESTARTS] = "executor_restarts",
    [PROTO_STAT_RSS_KIB] = "rss_kib",
    [PROTO_STAT_PEAK_USED] = "peak_used",
    [PROTO_STAT_SPILL_ENTRIES] = "spill_entries",
    [PROTO_STAT_EVICTIONS] = "evictions",
};

static const char *tstate_names[PROTO_TSTATE_COUNT] = {
    "waiting", "ready", "assigned", "running", "done", "failed",
};

static json_t *jstr(const proto_val *v)
{
    char buf[PROTO_MAX_STR + 1];
    return json_string(proto_str(v, buf, sizeof buf));
}

static void status_enc(proto_enc *e, spw_buf *out, uint64_t req, void *arg)
{
    (void)arg;
    proto_enc_begin(e, out, PROTO_STATUS_REQ, req, 0);
}

static void status_reply(const proto_msg *m, void *arg)
{
    json_t **out = arg;
    if (m->type != PROTO_STATUS)
        return;
    json_t *doc = json_object();
    json_t *sch = json_object();
    json_object_set_new(sch, "address", jstr(&m->f[F_STATUS_LISTEN]));
    json_object_set_new(sch, "uptime_ms", json_integer((json_int_t)m->f[F_STATUS_UPTIME_MS].u));
    json_object_set_new(doc, "scheduler", sch);
    json_t *workers = json_array();
    const proto_val *ws = &m->f[F_STATUS_WORKERS];
    for (uint32_t i = 0; i < ws->arr.n; i++) {
        const proto_val *w = PROTO_REC(ws, i);
        json_t *jw = json_object();
        json_object_set_new(jw, "id", json_integer((json_int_t)w[R_SWORKER_ID].u));
        json_object_set_new(jw, "address", jstr(&w[R_SWORKER_ADDR]));
        json_object_set_new(jw, "name", jstr(&w[R_SWORKER_NAME]));
        json_object_set_new(jw, "slots", json_integer((json_int_t)w[R_SWORKER_SLOTS].u));
        json_object_set_new(jw, "busy", json_integer((json_int_t)w[R_SWORKER_BUSY].u));
        json_object_set_new(jw, "assigned", json_integer((json_int_t)w[R_SWORKER_ASSIGNED].u));
        json_object_set_new(jw, "state",
                            json_string(w[R_SWORKER_STATE].u ? "paused" : "running"));
        json_t *mem = json_object();
        const proto_val *st = &w[R_SWORKER_STATS];
        for (uint32_t k = 0; k < st->arr.n && k < PROTO_STAT_COUNT; k++)
            if (stat_names[k] != NULL && k != PROTO_STAT_PAUSED && k != PROTO_STAT_RUNNING)
                json_object_set_new(mem, stat_names[k], json_integer((json_int_t)st->arr.v[k].u));
        json_object_set_new(jw, "memory", mem);
        json_array_append_new(workers, jw);
    }
    json_object_set_new(doc, "workers", workers);
    json_t *tasks = json_object();
    const proto_val *ts = &m->f[F_STATUS_TASKS];
    for (uint32_t k = 0; k < ts->arr.n && k < PROTO_TSTATE_COUNT; k++)
        json_object_set_new(tasks, tstate_names[k], json_integer((json_int_t)ts->arr.v[k].u));
    json_object_set_new(doc, "tasks", tasks);
    json_t *clients = json_array();
    const proto_val *cs = &m->f[F_STATUS_CLIENTS];
    for (uint32_t i = 0; i < cs->arr.n; i++) {
        const proto_val *c = PROTO_REC(cs, i);
        json_t *jc = json_object();
        json_object_set_new(jc, "session", json_integer((json_int_t)c[R_SCLIENT_SESSION].u));
        json_object_set_new(jc, "host", jstr(&c[R_SCLIENT_HOST]));
        json_object_set_new(jc, "pid", json_integer((json_int_t)c[R_SCLIENT_PID].u));
        json_object_set_new(jc, "role", json_string(proto_role_name((int)c[R_SCLIENT_ROLE].u)));
        json_object_set_new(jc, "tasks_submitted",
                            json_integer((json_int_t)c[R_SCLIENT_TASKS].u));
        json_object_set_new(jc, "references", json_integer((json_int_t)c[R_SCLIENT_REFS].u));
        json_array_append_new(clients, jc);
    }
    json_object_set_new(doc, "clients", clients);
    json_t *objs = json_object();
    json_object_set_new(objs, "count", json_integer((json_int_t)m->f[F_STATUS_OBJECTS].u));
    json_object_set_new(objs, "bytes", json_integer((json_int_t)m->f[F_STATUS_OBJ_BYTES].u));
    json_object_set_new(doc, "objects", objs);
    *out = doc;
}

static uint64_t ju(json_t *o, const char *k)
{
    return (uint64_t)json_integer_value(json_object_get(o, k));
}

static char *human(uint64_t b, char *buf)
{
    return spw_size_fmt(b, buf, 16);
}

static void print_status(json_t *doc)
{
    json_t *sch = json_object_get(doc, "scheduler");
    uint64_t up = ju(sch, "uptime_ms") / 1000;
    printf("scheduler %s  up %lluh%02llum%02llus\n", json_string_value(json_object_get(sch, "address")),
           (unsigned long long)(up / 3600), (unsigned long long)(up / 60 % 60),
           (unsigned long long)(up % 60));
    json_t *workers = json_object_get(doc, "workers");
    printf("\nworkers: %zu\n", json_array_size(workers));
    printf("  %-4s %-21s %-16s %-10s %-8s %-8s %-22s %-10s %-10s %s\n", "ID", "ADDRESS", "NAME",
           "SLOTS", "QUEUED", "STATE", "USED/CAPACITY", "PINNED", "SPILLED", "OBJECTS");
    size_t i;
    json_t *w;
    json_array_foreach(workers, i, w)
    {
        json_t *mem = json_object_get(w, "memory");
        char u[16], cap[16], pin[16], sp[16], slots[24], usedcap[40], objs[32];
        snprintf(slots, sizeof slots, "%llu/%llu", (unsigned long long)ju(w, "busy"),
                 (unsigned long long)ju(w, "slots"));
        snprintf(usedcap, sizeof usedcap, "%s/%s", human(ju(mem, "used"), u),
                 human(ju(mem, "capacity"), cap));
        snprintf(objs, sizeof objs, "%llu+%llu spilled",
                 (unsigned long long)ju(mem, "objects_in_memory"),
                 (unsigned long long)ju(mem, "objects_spilled"));
        printf("  %-4llu %-21s %-16s %-10s %-8llu %-8s %-22s %-10s %-10s %s\n",
               (unsigned long long)ju(w, "id"), json_string_value(json_object_get(w, "address")),
               json_string_value(json_object_get(w, "name")), slots,
               (unsigned long long)ju(w, "assigned"),
               json_string_value(json_object_get(w, "state")), usedcap,
               human(ju(mem, "pinned"), pin), human(ju(mem, "spilled_bytes"), sp), objs);
    }
    json_t *tasks = json_object_get(doc, "tasks");
    printf("\ntasks:");
    for (int k = 0; k < PROTO_TSTATE_COUNT; k++)
        printf(" %s %llu", tstate_names[k], (unsigned long long)ju(tasks, tstate_names[k]));
    json_t *objsj = json_object_get(doc, "objects");
    char ob[16];
    printf("\nobjects: %llu (%s)\n", (unsigned long long)ju(objsj, "count"),
           human(ju(objsj, "bytes"), ob));
    json_t *clients = json_object_get(doc, "clients");
    printf("\nclients: %zu\n", json_array_size(clients));
    printf("  %-8s %-20s %-8s %-7s %-8s %s\n", "SESSION", "HOST", "PID", "ROLE", "TASKS", "REFS");
    json_t *c;
    json_array_foreach(clients, i, c)
    {
        printf("  %-8llu %-20s %-8llu %-7s %-8llu %llu\n", (unsigned long long)ju(c, "session"),
               json_string_value(json_object_get(c, "host")), (unsigned long long)ju(c, "pid"),
               json_string_value(json_object_get(c, "role")),
               (unsigned long long)ju(c, "tasks_submitted"),
               (unsigned long long)ju(c, "references"));
    }
}

/* ------------------------------------------------------------------ memory */

static const char *ostate_names[] = {"pending", "ready", "failed", "lost", "orphan"};

static void memory_enc(proto_enc *e, spw_buf *out, uint64_t req, void *arg)
{
    (void)arg;
    proto_enc_begin(e, out, PROTO_MEMORY_REQ, req, 1);
    proto_put_u(e, 0);
}

typedef struct memdoc {
    json_t *objects;
    json_t *nodes;
    json_t *node_names; /* id -> name, for locations */
    bool complete;
    bool ended;
} memdoc;

static json_t *node_json(const proto_val *n)
{
    json_t *j = json_object();
    json_object_set_new(j, "id", json_integer((json_int_t)n[R_MNODE_ID].u));
    json_object_set_new(j, "name", jstr(&n[R_MNODE_NAME]));
    json_object_set_new(j, "address", jstr(&n[R_MNODE_ADDR]));
    const proto_val *st = &n[R_MNODE_STATS];
    for (uint32_t k = 0; k < st->arr.n && k < PROTO_STAT_COUNT; k++)
        if (stat_names[k] != NULL && k != PROTO_STAT_RUNNING)
            json_object_set_new(j, stat_names[k], json_integer((json_int_t)st->arr.v[k].u));
    json_object_set_new(j, "fresh", json_boolean(n[R_MNODE_FRESH].u != 0));
    return j;
}

static void memory_reply(const proto_msg *m, void *arg)
{
    memdoc *d = arg;
    if (m->type == PROTO_MEMORY_END) {
        const proto_val *nodes = &m->f[F_MEMEND_NODES];
        for (uint32_t i = 0; i < nodes->arr.n; i++)
            json_array_append_new(d->nodes, node_json(PROTO_REC(nodes, i)));
        d->complete = m->f[F_MEMEND_COMPLETE].u != 0;
        d->ended = true;
        return;
    }
    if (m->type != PROTO_MEMORY_OBJS)
        return;
    const proto_val *objs = &m->f[F_MEMOBJS_OBJS];
    char hex[33];
    for (uint32_t i = 0; i < objs->arr.n; i++) {
        const proto_val *o = PROTO_REC(objs, i);
        json_t *j = json_object();
        spw_id_hex(o[R_MOBJ_ID].id, hex);
        json_object_set_new(j, "id", json_string(hex));
        json_object_set_new(j, "size", json_integer((json_int_t)o[R_MOBJ_SIZE].u));
        uint64_t st = o[R_MOBJ_STATE].u;
        json_object_set_new(j, "state", json_string(st < 5 ? ostate_names[st] : "?"));
        json_object_set_new(j, "call_site", jstr(&o[R_MOBJ_SITE]));
        json_t *owner = json_object();
        json_object_set_new(owner, "host", jstr(&o[R_MOBJ_OWNER_HOST]));
        json_object_set_new(owner, "pid", json_integer((json_int_t)o[R_MOBJ_OWNER_PID].u));
        json_object_set_new(j, "owner", owner);
        json_object_set_new(j, "age_ms", json_integer((json_int_t)o[R_MOBJ_AGE_MS].u));
        json_object_set_new(j, "task", jstr(&o[R_MOBJ_TASK_FN]));
        json_object_set_new(j, "inline", json_boolean(o[R_MOBJ_INLINE].u != 0));
        json_t *refs = json_object();
        const proto_val *rv = &o[R_MOBJ_REFS];
        uint64_t total = 0;
        for (int k = 0; k < PROTO_REF_KINDS && (uint32_t)k < rv->arr.n; k++) {
            json_object_set_new(refs, proto_refkind_name(k), json_integer((json_int_t)rv->arr.v[k].u));
            total += rv->arr.v[k].u;
        }
        json_object_set_new(j, "refs", refs);
        json_object_set_new(j, "ref_total", json_integer((json_int_t)total));
        json_t *holders = json_array();
        const proto_val *hv = &o[R_MOBJ_HOLDERS];
        for (uint32_t h = 0; h < hv->arr.n; h++) {
            const proto_val *r = PROTO_REC(hv, h);
            json_t *jh = json_object();
            json_object_set_new(jh, "kind", json_string(proto_refkind_name((int)r[R_HOLDER_KIND].u)));
            json_object_set_new(jh, "count", json_integer((json_int_t)r[R_HOLDER_COUNT].u));
            json_object_set_new(jh, "who", jstr(&r[R_HOLDER_WHO]));
            json_array_append_new(holders, jh);
        }
        json_object_set_new(j, "holders", holders);
        json_t *locs = json_array();
        const proto_val *lv = &o[R_MOBJ_LOCS];
        uint64_t stored = 0;
        for (uint32_t l = 0; l < lv->arr.n; l++) {
            const proto_val *r = PROTO_REC(lv, l);
            json_t *jl = json_object();
            uint64_t where = r[R_MLOC_WHERE].u;
            json_object_set_new(jl, "node_id", json_integer((json_int_t)r[R_MLOC_WORKER].u));
            json_object_set_new(jl, "state",
                                json_string(where == 3 ? "memory+spilled"
                                            : where == 2 ? "spilled"
                                            : where == 1 ? "memory"
                                                         : "unknown"));
            json_object_set_new(jl, "stored_bytes", json_integer((json_int_t)r[R_MLOC_STORED].u));
            json_object_set_new(jl, "pins", json_integer((json_int_t)r[R_MLOC_PINS].u));
            json_array_append_new(locs, jl);
            if (r[R_MLOC_STORED].u > stored)
                stored = r[R_MLOC_STORED].u;
        }
        json_object_set_new(j, "locations", locs);
        json_object_set_new(j, "stored_size", json_integer((json_int_t)stored));
        json_array_append_new(d->objects, j);
    }
}

static const char *jss(json_t *o, const char *k)
{
    const char *v = json_string_value(json_object_get(o, k));
    return v != NULL ? v : "";
}

/* Names locations after their nodes, computes totals and groups. */
static json_t *memory_finish(memdoc *d, const char *group_by)
{
    json_t *names = json_object();
    size_t i;
    json_t *n;
    json_array_foreach(d->nodes, i, n)
    {
        char key[32];
        snprintf(key, sizeof key, "%llu", (unsigned long long)ju(n, "id"));
        json_object_set(names, key, json_object_get(n, "name"));
    }
    json_t *totals = json_object();
    uint64_t count = 0, bytes = 0, mem = 0, spilled = 0, stored = 0, inl = 0;
    uint64_t refs[PROTO_REF_KINDS] = {0};
    json_t *o;
    json_array_foreach(d->objects, i, o)
    {
        count++;
        uint64_t size = ju(o, "size");
        bytes += size;
        if (json_is_true(json_object_get(o, "inline")))
            inl += size;
        size_t l;
        json_t *loc;
        bool in_mem = false, on_disk = false;
        json_array_foreach(json_object_get(o, "locations"), l, loc)
        {
            char key[32];
            snprintf(key, sizeof key, "%llu", (unsigned long long)ju(loc, "node_id"));
            json_t *nm = json_object_get(names, key);
            json_object_set_new(loc, "node", json_string(nm ? json_string_value(nm) : "(gone)"));
            const char *st = jss(loc, "state");
            in_mem = in_mem || strstr(st, "memory") != NULL;
            on_disk = on_disk || strstr(st, "spilled") != NULL;
        }
        if (in_mem)
            mem += size;
        if (on_disk) {
            spilled += size;
            stored += ju(o, "stored_size");
        }
        for (int k = 0; k < PROTO_REF_KINDS; k++)
            refs[k] += ju(json_object_get(o, "refs"), proto_refkind_name(k));
    }
    json_object_set_new(totals, "objects", json_integer((json_int_t)count));
    json_object_set_new(totals, "bytes", json_integer((json_int_t)bytes));
    json_object_set_new(totals, "in_memory_bytes", json_integer((json_int_t)mem));
    json_object_set_new(totals, "spilled_bytes", json_integer((json_int_t)spilled));
    json_object_set_new(totals, "spilled_stored_bytes", json_integer((json_int_t)stored));
    json_object_set_new(totals, "inline_bytes", json_integer((json_int_t)inl));
    json_t *jr = json_object();
    for (int k = 0; k < PROTO_REF_KINDS; k++)
        json_object_set_new(jr, proto_refkind_name(k), json_integer((json_int_t)refs[k]));
    json_object_set_new(totals, "refs", jr);
    json_object_set_new(totals, "complete", json_boolean(d->complete));
    json_decref(names);

    json_t *doc = json_object();
    json_object_set(doc, "objects", d->objects);
    json_object_set(doc, "nodes", d->nodes);
    json_object_set_new(doc, "totals", totals);
    if (group_by != NULL) {
        /* Sizes and counts per group; an object in several groups (two nodes, two kinds of
         * reference) counts in each. */
        json_t *groups = json_object();
        json_array_foreach(d->objects, i, o)
        {
            json_t *keys = json_array();
            if (strcmp(group_by, "node") == 0) {
                size_t l;
                json_t *loc;
                json_array_foreach(json_object_get(o, "locations"), l, loc)
                    json_array_append_new(keys, json_string(jss(loc, "node")));
                if (json_array_size(keys) == 0)
                    json_array_append_new(keys, json_string(json_is_true(json_object_get(o, "inline"))
                                                                ? "(scheduler, inline)"
                                                                : "(nowhere)"));
            } else if (strcmp(group_by, "owner") == 0) {
                char key[128];
                json_t *ow = json_object_get(o, "owner");
                snprintf(key, sizeof key, "%s pid %llu", jss(ow, "host"),
                         (unsigned long long)ju(ow, "pid"));
                json_array_append_new(keys, json_string(key));
            } else if (strcmp(group_by, "ref-type") == 0) {
                for (int k = 0; k < PROTO_REF_KINDS; k++)
                    if (ju(json_object_get(o, "refs"), proto_refkind_name(k)) > 0)
                        json_array_append_new(keys, json_string(proto_refkind_name(k)));
                if (json_array_size(keys) == 0)
                    json_array_append_new(keys, json_string("(none)"));
            } else {
                json_array_append_new(keys, json_string(jss(o, "call_site")));
            }
            size_t k;
            json_t *key;
            json_array_foreach(keys, k, key)
            {
                json_t *g = json_object_get(groups, json_string_value(key));
                if (g == NULL) {
                    g = json_object();
                    json_object_set_new(g, "objects", json_integer(0));
                    json_object_set_new(g, "bytes", json_integer(0));
                    json_object_set_new(groups, json_string_value(key), g);
                }
                json_object_set_new(g, "objects", json_integer(json_integer_value(json_object_get(g, "objects")) + 1));
                json_object_set_new(g, "bytes", json_integer(json_integer_value(json_object_get(g, "bytes")) +
                                                             (json_int_t)ju(o, "size")));
            }
            json_decref(keys);
        }
        json_t *arr = json_array();
        const char *key;
        json_t *g;
        json_object_foreach(groups, key, g)
        {
            json_t *e = json_object();
            json_object_set_new(e, "group", json_string(key));
            json_object_set(e, "objects", json_object_get(g, "objects"));
            json_object_set(e, "bytes", json_object_get(g, "bytes"));
            json_array_append_new(arr, e);
        }
        json_decref(groups);
        json_object_set_new(doc, "group_by", json_string(group_by));
        json_object_set_new(doc, "groups", arr);
    }
    return doc;
}

static const char *sort_key;

static int cmp_objects(const void *a, const void *b)
{
    json_t *x = *(json_t *const *)a, *y = *(json_t *const *)b;
    if (strcmp(sort_key, "id") == 0)
        return strcmp(jss(x, "id"), jss(y, "id"));
    const char *f = strcmp(sort_key, "age") == 0 ? "age_ms" : "size";
    uint64_t vx = ju(x, f), vy = ju(y, f);
    return vx < vy ? 1 : vx > vy ? -1 : strcmp(jss(x, "id"), jss(y, "id"));
}

static void sort_and_limit(json_t *doc, const char *by, long limit)
{
    json_t *objs = json_object_get(doc, "objects");
    size_t n = json_array_size(objs);
    json_t **v = malloc((n > 0 ? n : 1) * sizeof *v);
    for (size_t i = 0; i < n; i++)
        v[i] = json_incref(json_array_get(objs, i));
    sort_key = by;
    qsort(v, n, sizeof *v, cmp_objects);
    json_t *sorted = json_array();
    for (size_t i = 0; i < n; i++) {
        if (limit < 0 || (long)i < limit)
            json_array_append(sorted, v[i]);
        json_decref(v[i]);
    }
    free(v);
    json_object_set_new(doc, "objects", sorted);
    json_object_set_new(json_object_get(doc, "totals"), "listed", json_integer((json_int_t)json_array_size(sorted)));
}

static void human_age(uint64_t ms, char *out, size_t len)
{
    uint64_t s = ms / 1000;
    if (s < 60)
        snprintf(out, len, "%llus", (unsigned long long)s);
    else if (s < 3600)
        snprintf(out, len, "%llum%02llus", (unsigned long long)(s / 60), (unsigned long long)(s % 60));
    else
        snprintf(out, len, "%lluh%02llum", (unsigned long long)(s / 3600), (unsigned long long)(s / 60 % 60));
}

static void print_memory(json_t *doc, bool stats_only)
{
    char a[16], b[16], c[16], d[16], e[16];
    json_t *objs = json_object_get(doc, "objects");
    size_t i;
    json_t *o;
    if (!stats_only && json_object_get(doc, "groups") == NULL) {
        printf("%-12s %-10s %-10s %-8s %-26s %-34s %-22s %-24s %s\n", "ID", "SIZE", "STORED",
               "STATE", "WHERE", "REFS", "OWNER", "CALL SITE", "AGE");
        json_array_foreach(objs, i, o)
        {
            char where[64] = "", refs[128] = "", owner[64], age[40];
            size_t l;
            json_t *loc;
            json_array_foreach(json_object_get(o, "locations"), l, loc)
            {
                size_t len = strlen(where);
                snprintf(where + len, sizeof where - len, "%s%s:%s", len ? "," : "",
                         jss(loc, "node"), jss(loc, "state"));
            }
            if (where[0] == '\0')
                snprintf(where, sizeof where, "%s",
                         json_is_true(json_object_get(o, "inline")) ? "scheduler:inline" : "-");
            for (int k = 0; k < PROTO_REF_KINDS; k++) {
                uint64_t v = ju(json_object_get(o, "refs"), proto_refkind_name(k));
                if (v > 0) {
                    size_t len = strlen(refs);
                    snprintf(refs + len, sizeof refs - len, "%s%s=%llu", len ? " " : "",
                             proto_refkind_name(k), (unsigned long long)v);
                }
            }
            json_t *ow = json_object_get(o, "owner");
            snprintf(owner, sizeof owner, "%s:%llu", jss(ow, "host"), (unsigned long long)ju(ow, "pid"));
            human_age(ju(o, "age_ms"), age, sizeof age);
            uint64_t stored = ju(o, "stored_size");
            printf("%-12.12s %-10s %-10s %-8s %-26s %-34s %-22s %-24s %s\n", jss(o, "id"),
                   human(ju(o, "size"), a), stored ? human(stored, b) : "-", jss(o, "state"),
                   where, refs[0] ? refs : "-", owner, jss(o, "call_site"), age);
        }
        json_t *tot = json_object_get(doc, "totals");
        if (ju(tot, "listed") < ju(tot, "objects"))
            printf("(%llu of %llu objects listed)\n", (unsigned long long)ju(tot, "listed"),
                   (unsigned long long)ju(tot, "objects"));
        printf("\n");
    }
    json_t *groups = json_object_get(doc, "groups");
    if (groups != NULL && !stats_only) {
        printf("%-40s %-10s %s\n", "GROUP", "OBJECTS", "BYTES");
        json_array_foreach(groups, i, o)
        printf("%-40s %-10llu %s\n", jss(o, "group"), (unsigned long long)ju(o, "objects"),
               human(ju(o, "bytes"), a));
        printf("\n");
    }
    printf("%-16s %-10s %-10s %-10s %-10s %-10s %-14s %-16s %s\n", "NODE", "CAPACITY", "USED",
           "PINNED", "SPILLED", "ON DISK", "OBJS MEM/DISK", "SPILLS", "RESTORES");
    json_array_foreach(json_object_get(doc, "nodes"), i, o)
    {
        char objs_s[32], spills[32], restores[32];
        snprintf(objs_s, sizeof objs_s, "%llu/%llu", (unsigned long long)ju(o, "objects_in_memory"),
                 (unsigned long long)ju(o, "objects_spilled"));
        snprintf(spills, sizeof spills, "%llu (%s)", (unsigned long long)ju(o, "spill_count"),
                 human(ju(o, "spill_total_bytes"), d));
        snprintf(restores, sizeof restores, "%llu (%s)", (unsigned long long)ju(o, "restore_count"),
                 human(ju(o, "restore_total_bytes"), e));
        printf("%-16s %-10s %-10s %-10s %-10s %-10s %-14s %-16s %s%s\n", jss(o, "name"),
               human(ju(o, "capacity"), a), human(ju(o, "used"), b), human(ju(o, "pinned"), c),
               human(ju(o, "spilled_bytes"), d), human(ju(o, "spilled_stored_bytes"), e), objs_s,
               spills, restores, json_is_true(json_object_get(o, "fresh")) ? "" : " (stale)");
    }
    json_t *t = json_object_get(doc, "totals");
    printf("\ntotal: %llu objects, %s (%s in memory, %s spilled, %s on disk, %s inline)%s\n",
           (unsigned long long)ju(t, "objects"), human(ju(t, "bytes"), a),
           human(ju(t, "in_memory_bytes"), b), human(ju(t, "spilled_bytes"), c),
           human(ju(t, "spilled_stored_bytes"), d), human(ju(t, "inline_bytes"), e),
           json_is_true(json_object_get(t, "complete")) ? "" : " (a worker did not answer)");
}

/* One round of `memory`: query, shape, print. Returns an exit status. */
static int memory_once(spillway *cl, const char *addr, int timeout, bool json, const char *group_by,
                       const char *sort_by, long limit, bool stats_only)
{
    memdoc d = {json_array(), json_array(), NULL, false, false};
    int rc = spillway__request_until(cl, memory_enc, memory_reply, &d, PROTO_MEMORY_END, timeout);
    if (rc != 0 || !d.ended) {
        fprintf(stderr, "spillway-ctl: memory from %s failed: %s\n", addr,
                rc ? spillway_strerror(rc) : "no answer");
        json_decref(d.objects);
        json_decref(d.nodes);
        return 1;
    }
    json_t *doc = memory_finish(&d, group_by);
    json_decref(d.objects);
    json_decref(d.nodes);
    sort_and_limit(doc, sort_by, limit);
    if (stats_only)
        json_object_del(doc, "objects");
    if (json) {
        char *out = json_dumps(doc, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
        puts(out);
        free(out);
    } else {
        print_memory(doc, stats_only);
    }
    fflush(stdout);
    json_decref(doc);
    return 0;
}

static void usage(FILE *f)
{
    fputs("usage: spillway-ctl [options] COMMAND\n"
          "commands:\n"
          "  status                    workers, slots, tasks by state, clients\n"
          "  memory                    every object: size, where, references by kind and who\n"
          "                            holds them, owner, call site, age; then per-node figures\n"
          "memory options (after the command):\n"
          "  --group-by node|owner|ref-type|call-site   sizes and counts per group\n"
          "  --sort-by size|age|id     order of the listing (size)\n"
          "  --stats-only              per-node figures and totals only\n"
          "  --limit N                 list at most N objects (totals count all)\n"
          "  --watch SECONDS           refresh every SECONDS until interrupted\n"
          "options:\n"
          "  --scheduler HOST:PORT     the scheduler ($SPILLWAY_SCHEDULER or 127.0.0.1:7400)\n"
          "  --secret-file PATH        cluster secret (default: $SPILLWAY_SECRET_FILE, else\n"
          "                            /etc/spillway/secret if readable)\n"
          "  --json                    one JSON document instead of tables\n"
          "  --timeout MS              give up after this long (10000)\n"
          "  --version, --help\n",
          f);
}

int main(int argc, char **argv)
{
    spw_log_init("spillway-ctl", SPW_LOG_ERR);
    const char *addr = getenv("SPILLWAY_SCHEDULER");
    if (addr == NULL)
        addr = "127.0.0.1:7400";
    spillway_opts o;
    spillway_opts_init(&o);
    o.name = "spillway-ctl";
    int json = 0, timeout = 10000;
    static const struct option longopts[] = {
        {"scheduler", required_argument, 0, 'S'},
        {"secret-file", required_argument, 0, 's'},
        {"json", no_argument, 0, 'j'},
        {"timeout", required_argument, 0, 't'},
        {"version", no_argument, 0, 'V'},
        {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0},
    };
    int c;
    opterr = 0; /* one line of our own for a bad option */
    while ((c = getopt_long(argc, argv, "+h", longopts, NULL)) != -1) {
        switch (c) {
        case 'S':
            addr = optarg;
            break;
        case 's':
            o.secret_file = optarg;
            break;
        case 'j':
            json = 1;
            break;
        case 't':
            timeout = atoi(optarg);
            if (timeout <= 0) {
                fprintf(stderr, "spillway-ctl: --timeout wants milliseconds > 0\n");
                return 2;
            }
            break;
        case 'V':
            printf("spillway-ctl %s\n", SPW_VERSION);
            return 0;
        case 'h':
            usage(stdout);
            return 0;
        default:
            fprintf(stderr, "spillway-ctl: bad option '%s'; see spillway-ctl --help\n",
                    argv[optind - 1]);
            return 2;
        }
    }
    if (optind >= argc) {
        fprintf(stderr, "spillway-ctl: no command given; see spillway-ctl --help\n");
        return 2;
    }
    const char *cmd = argv[optind];
    bool is_memory = strcmp(cmd, "memory") == 0;
    if (strcmp(cmd, "status") != 0 && !is_memory) {
        fprintf(stderr, "spillway-ctl: unknown command '%s'; see spillway-ctl --help\n", cmd);
        return 2;
    }
    const char *group_by = NULL, *sort_by = "size";
    long limit = -1, watch = 0;
    bool stats_only = false;
    /* The command's own options follow it. */
    static const struct option memopts[] = {
        {"group-by", required_argument, 0, 'g'}, {"sort-by", required_argument, 0, 'o'},
        {"stats-only", no_argument, 0, 'x'},     {"limit", required_argument, 0, 'n'},
        {"watch", required_argument, 0, 'w'},    {"json", no_argument, 0, 'j'},
        {0, 0, 0, 0},
    };
    int sub_argc = argc - optind;
    char **sub_argv = argv + optind;
    optind = 1;
    while ((c = getopt_long(sub_argc, sub_argv, "", memopts, NULL)) != -1) {
        char *end;
        switch (c) {
        case 'g':
            if (!is_memory || (strcmp(optarg, "node") && strcmp(optarg, "owner") &&
                               strcmp(optarg, "ref-type") && strcmp(optarg, "call-site"))) {
                fprintf(stderr, "spillway-ctl: --group-by wants node, owner, ref-type or "
                                "call-site\n");
                return 2;
            }
            group_by = optarg;
            break;
        case 'o':
            if (strcmp(optarg, "size") && strcmp(optarg, "age") && strcmp(optarg, "id")) {
                fprintf(stderr, "spillway-ctl: --sort-by wants size, age or id\n");
                return 2;
            }
            sort_by = optarg;
            break;
        case 'x':
            stats_only = true;
            break;
        case 'n':
            limit = strtol(optarg, &end, 10);
            if (*optarg == '\0' || *end != '\0' || limit < 0) {
                fprintf(stderr, "spillway-ctl: --limit wants a number >= 0\n");
                return 2;
            }
            break;
        case 'w':
            watch = strtol(optarg, &end, 10);
            if (*optarg == '\0' || *end != '\0' || watch <= 0) {
                fprintf(stderr, "spillway-ctl: --watch wants seconds > 0\n");
                return 2;
            }
            break;
        case 'j':
            json = 1;
            break;
        default:
            fprintf(stderr, "spillway-ctl: bad option '%s' for %s; see spillway-ctl --help\n",
                    sub_argv[optind - 1], cmd);
            return 2;
        }
    }
    if (optind < sub_argc) {
        fprintf(stderr, "spillway-ctl: unexpected argument '%s'\n", sub_argv[optind]);
        return 2;
    }
    if (!is_memory && (group_by || stats_only || limit >= 0 || watch)) {
        fprintf(stderr, "spillway-ctl: those options belong to 'memory'\n");
        return 2;
    }
    o.connect_timeout_ms = timeout;
    spillway *cl;
    int rc = spillway__connect_role(addr, &o, PROTO_ROLE_CTL, &cl);
    if (rc != 0) {
        fprintf(stderr, "spillway-ctl: cannot connect to the scheduler at %s: %s\n", addr,
                spillway_strerror(rc));
        return 1;
    }
    if (is_memory) {
        int status;
        for (;;) {
            if (watch > 0 && !json)
                printf("\033[H\033[2J"); /* refresh in place */
            status = memory_once(cl, addr, timeout, json, group_by, sort_by, limit, stats_only);
            if (status != 0 || watch == 0)
                break;
            sleep((unsigned)watch);
        }
        spillway_close(cl);
        return status;
    }
    json_t *doc = NULL;
    rc = spillway__request(cl, status_enc, status_reply, &doc, timeout);
    if (rc != 0 || doc == NULL) {
        fprintf(stderr, "spillway-ctl: status from %s failed: %s\n", addr,
                rc ? spillway_strerror(rc) : "no answer");
        spillway_close(cl);
        return 1;
    }
    if (json) {
        char *s = json_dumps(doc, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
        puts(s);
        free(s);
    } else {
        print_status(doc);
    }
    json_decref(doc);
    spillway_close(cl);
    return 0;
}
