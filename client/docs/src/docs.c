/*
 * spw_docs (see spillway/docs.h for the contract): the JSON documents of spillway-ctl (status,
 * memory, jobs) and the Prometheus text built from status, in one place: spillway-ctl prints them
 * and the scheduler's HTTP endpoint serves them (/api/status, /api/memory, /api/jobs, /metrics),
 * so the two can never disagree. Each query is a request over a ctl session with the scheduler
 * (spillway/ctl_link.h); the reply frames are turned into a jansson document here and nowhere
 * else. Nothing here keeps state between calls; a session is used by one thread at a time.
 */
#include "spillway/docs.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "spillway/ctl_link.h"
#include "spillway/utf8.h"

static const char *const stat_names[PROTO_STAT_COUNT] = {
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
    [PROTO_STAT_SPILL_AT] = "spill_threshold",
    [PROTO_STAT_PAUSE_AT] = "pause_threshold",
    [PROTO_STAT_TASK_MEM_LIMIT] = "task_memory_limit",
    [PROTO_STAT_NODE_BUDGET] = "node_budget",
    [PROTO_STAT_EXEC_RECYCLES] = "executor_recycles",
    [PROTO_STAT_TASKS_CANCELLED] = "tasks_cancelled",
    [PROTO_STAT_FETCHED_BYTES] = "fetched_bytes",
    [PROTO_STAT_SPILLING_BYTES] = "spilling_bytes",
    [PROTO_STAT_DISK_READ_BYTES] = "disk_read_bytes",
    [PROTO_STAT_SPILLS] = "spills",
};

const char *const ctl_doc_tstate_names[] = {
    "waiting", "ready", "assigned", "running", "done", "failed",
};
_Static_assert(sizeof ctl_doc_tstate_names / sizeof ctl_doc_tstate_names[0] == PROTO_TSTATE_COUNT,
               "a name for every PROTO_TSTATE_*");

json_t *ctl_doc_str(const char *s)
{
    if (s == NULL)
        s = "";
    size_t n = strlen(s);
    if (spw_utf8_valid(s, n))
        return json_stringn(s, n);
    char *copy = strdup(s);
    if (copy == NULL)
        return NULL;
    spw_utf8_scrub(copy, n);
    json_t *j = json_stringn(copy, n);
    free(copy);
    return j;
}

static json_t *jstr(const proto_val *v)
{
    char buf[PROTO_MAX_STR + 1];
    return ctl_doc_str(proto_str(v, buf, sizeof buf));
}

static json_t *jhash(const proto_val *v)
{
    char hex[PROTO_PLUGIN_HEX_LEN + 1];
    return json_string(proto_plugin_hex(v->bin.ptr, hex));
}

/* A worker's plugins (R_PLUG records) as an array of {name, hash, size, uploaded}; each added to
 * byname, name -> {hash: true}, to find names with several hashes. */
static json_t *plugins_json(const proto_val *pl, json_t *byname)
{
    json_t *arr = json_array();
    for (uint32_t k = 0; k < pl->arr.n; k++) {
        const proto_val *r = PROTO_REC(pl, k);
        json_t *j = json_object();
        json_object_set_new(j, "name", jstr(&r[R_PLUG_NAME]));
        json_object_set_new(j, "hash", jhash(&r[R_PLUG_HASH]));
        json_object_set_new(j, "size", json_integer((json_int_t)r[R_PLUG_SIZE].u));
        json_object_set_new(j, "uploaded", json_boolean(r[R_PLUG_UPLOADED].u != 0));
        if (r[R_PLUG_UPLOADED].u == 0) {
            /* Uploaded plugins are named by their hash, side by side by design; a --plugin name
             * under several hashes means workers run different bytes for one function. */
            const char *name = json_string_value(json_object_get(j, "name"));
            json_t *set = json_object_get(byname, name);
            if (set == NULL) {
                set = json_object();
                json_object_set_new(byname, name, set);
            }
            json_object_set_new(set, json_string_value(json_object_get(j, "hash")), json_true());
        }
        json_array_append_new(arr, j);
    }
    return arr;
}

static void status_enc(proto_enc *e, spw_buf *out, uint64_t req, void *arg)
{
    (void)arg;
    proto_enc_status_req(e, out, req);
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
    json_t *byname = json_object();
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
        static const char *const wstates[PROTO_WSTATE_COUNT] = {"running", "paused",
                                                                "draining", "drained"};
        uint64_t ws_k = w[R_SWORKER_STATE].u;
        json_object_set_new(jw, "state", ctl_doc_str(ws_k < PROTO_WSTATE_COUNT ? wstates[ws_k]
                                                                               : "unknown"));
        json_t *mem = json_object();
        const proto_val *st = &w[R_SWORKER_STATS];
        for (uint32_t k = 0; k < st->arr.n && k < PROTO_STAT_COUNT; k++)
            if (stat_names[k] != NULL && k != PROTO_STAT_PAUSED && k != PROTO_STAT_RUNNING)
                json_object_set_new(mem, stat_names[k], json_integer((json_int_t)st->arr.v[k].u));
        json_object_set_new(jw, "memory", mem);
        if (!w[R_SWORKER_PLUGINS].nil)
            json_object_set_new(jw, "plugins", plugins_json(&w[R_SWORKER_PLUGINS], byname));
        json_array_append_new(workers, jw);
    }
    json_object_set_new(doc, "workers", workers);
    /* Names of --plugin plugins that workers run in different bytes. */
    json_t *mismatch = json_array();
    const char *name;
    json_t *set;
    json_object_foreach(byname, name, set)
    if (json_object_size(set) > 1)
        json_array_append_new(mismatch, ctl_doc_str(name));
    json_object_set_new(doc, "plugin_mismatch", mismatch);
    json_decref(byname);
    json_t *tasks = json_object();
    const proto_val *ts = &m->f[F_STATUS_TASKS];
    for (uint32_t k = 0; k < ts->arr.n && k < PROTO_TSTATE_COUNT; k++)
        json_object_set_new(tasks, ctl_doc_tstate_names[k], json_integer((json_int_t)ts->arr.v[k].u));
    json_object_set_new(doc, "tasks", tasks);
    json_t *clients = json_array();
    const proto_val *cs = &m->f[F_STATUS_CLIENTS];
    for (uint32_t i = 0; i < cs->arr.n; i++) {
        const proto_val *c = PROTO_REC(cs, i);
        json_t *jc = json_object();
        json_object_set_new(jc, "session", json_integer((json_int_t)c[R_SCLIENT_SESSION].u));
        json_object_set_new(jc, "host", jstr(&c[R_SCLIENT_HOST]));
        json_object_set_new(jc, "pid", json_integer((json_int_t)c[R_SCLIENT_PID].u));
        json_object_set_new(jc, "role", ctl_doc_str(proto_role_name((int)c[R_SCLIENT_ROLE].u)));
        json_object_set_new(jc, "tasks_submitted",
                            json_integer((json_int_t)c[R_SCLIENT_TASKS].u));
        json_object_set_new(jc, "references", json_integer((json_int_t)c[R_SCLIENT_REFS].u));
        /* A session whose connection broke, kept for its client to resume it. */
        if (!c[R_SCLIENT_DROP_MS].nil)
            json_object_set_new(jc, "detached_drop_ms",
                                json_integer((json_int_t)c[R_SCLIENT_DROP_MS].u));
        json_array_append_new(clients, jc);
    }
    json_object_set_new(doc, "clients", clients);
    json_t *objs = json_object();
    json_object_set_new(objs, "count", json_integer((json_int_t)m->f[F_STATUS_OBJECTS].u));
    json_object_set_new(objs, "bytes", json_integer((json_int_t)m->f[F_STATUS_OBJ_BYTES].u));
    json_object_set_new(doc, "objects", objs);
    /* Fields an older scheduler does not send are left out of the document. */
    if (m->nf > F_STATUS_REFS && !m->f[F_STATUS_REFS].nil) {
        json_t *refs = json_object();
        const proto_val *rv = &m->f[F_STATUS_REFS];
        for (uint32_t k = 0; k < rv->arr.n && k < PROTO_REF_KINDS; k++)
            json_object_set_new(refs, proto_refkind_name((int)k),
                                json_integer((json_int_t)rv->arr.v[k].u));
        json_object_set_new(doc, "references", refs);
    }
    if (m->nf > F_STATUS_CONNS && !m->f[F_STATUS_CONNS].nil) {
        json_t *conns = json_object();
        const proto_val *cv = &m->f[F_STATUS_CONNS];
        for (uint32_t k = 1; k < cv->arr.n && k <= PROTO_ROLE_PEER; k++)
            if (k != PROTO_ROLE_SCHEDULER && k != PROTO_ROLE_EXECUTOR && k != PROTO_ROLE_PEER)
                json_object_set_new(conns, proto_role_name((int)k),
                                    json_integer((json_int_t)cv->arr.v[k].u));
        json_object_set_new(doc, "connections", conns);
    }
    if (m->nf > F_STATUS_IO && !m->f[F_STATUS_IO].nil && m->f[F_STATUS_IO].arr.n >= 4) {
        static const char *const io_names[] = {"frames_in", "frames_out", "bytes_in",
                                               "bytes_out"};
        json_t *io = json_object();
        for (size_t k = 0; k < sizeof io_names / sizeof io_names[0]; k++)
            json_object_set_new(io, io_names[k],
                                json_integer((json_int_t)m->f[F_STATUS_IO].arr.v[k].u));
        json_object_set_new(doc, "io", io);
    }
    if (m->nf > F_STATUS_LATENCY && !m->f[F_STATUS_LATENCY].nil &&
        m->f[F_STATUS_LATENCY].arr.n == PROTO_LATENCY_NBOUNDS + 2) {
        static const uint64_t bounds[PROTO_LATENCY_NBOUNDS] = PROTO_LATENCY_BOUNDS_MS;
        const proto_val *lv = &m->f[F_STATUS_LATENCY];
        json_t *lat = json_object();
        json_t *buckets = json_array();
        uint64_t count = 0;
        for (int k = 0; k <= PROTO_LATENCY_NBOUNDS; k++) {
            count += lv->arr.v[k].u;
            json_t *b = json_object();
            if (k < PROTO_LATENCY_NBOUNDS)
                json_object_set_new(b, "le_ms", json_integer((json_int_t)bounds[k]));
            else
                json_object_set_new(b, "le_ms", json_null());
            json_object_set_new(b, "count", json_integer((json_int_t)lv->arr.v[k].u));
            json_array_append_new(buckets, b);
        }
        json_object_set_new(lat, "count", json_integer((json_int_t)count));
        json_object_set_new(lat, "sum_us",
                            json_integer((json_int_t)lv->arr.v[PROTO_LATENCY_NBOUNDS + 1].u));
        json_object_set_new(lat, "buckets", buckets);
        json_object_set_new(doc, "task_latency", lat);
    }
    if (m->nf > F_STATUS_LINEAGE && !m->f[F_STATUS_LINEAGE].nil &&
        m->f[F_STATUS_LINEAGE].arr.n >= PROTO_LINEAGE_COUNT) {
        const proto_val *lv = &m->f[F_STATUS_LINEAGE];
        json_t *lin = json_object();
        json_object_set_new(lin, "reruns",
                            json_integer((json_int_t)lv->arr.v[PROTO_LINEAGE_RERUNS].u));
        json_object_set_new(lin, "lost", json_integer((json_int_t)lv->arr.v[PROTO_LINEAGE_LOST].u));
        json_object_set_new(doc, "lineage", lin);
    }
    *out = doc;
}

uint64_t ctl_doc_u(json_t *o, const char *k)
{
    return (uint64_t)json_integer_value(json_object_get(o, k));
}

/* ------------------------------------------------------------------ memory */

static const char *const ostate_names[] = {"pending", "ready", "failed", "lost", "orphan"};
#define OSTATE_COUNT (sizeof ostate_names / sizeof ostate_names[0])
_Static_assert(OSTATE_COUNT == PROTO_OSTATE_ORPHAN + 1, "a name for every PROTO_OSTATE_*");

static void memory_enc(proto_enc *e, spw_buf *out, uint64_t req, void *arg)
{
    (void)arg;
    proto_enc_memory_req(e, out, req, &(proto_memory_req_msg){.flags = 0});
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
        json_object_set_new(j, "id", ctl_doc_str(hex));
        json_object_set_new(j, "size", json_integer((json_int_t)o[R_MOBJ_SIZE].u));
        uint64_t st = o[R_MOBJ_STATE].u;
        json_object_set_new(j, "state", ctl_doc_str(st < OSTATE_COUNT ? ostate_names[st] : "?"));
        json_object_set_new(j, "call_site", jstr(&o[R_MOBJ_SITE]));
        json_t *owner = json_object();
        json_object_set_new(owner, "host", jstr(&o[R_MOBJ_OWNER_HOST]));
        json_object_set_new(owner, "pid", json_integer((json_int_t)o[R_MOBJ_OWNER_PID].u));
        json_object_set_new(j, "owner", owner);
        json_object_set_new(j, "age_ms", json_integer((json_int_t)o[R_MOBJ_AGE_MS].u));
        json_object_set_new(j, "task", jstr(&o[R_MOBJ_TASK_FN]));
        if (!o[R_MOBJ_NOUTS].nil && o[R_MOBJ_NOUTS].u > 1) {
            /* An output of a task of several: which task, which output. */
            json_t *out = json_object();
            char thex[33];
            spw_id_hex(spw_id_output_task(o[R_MOBJ_ID].id), thex);
            json_object_set_new(out, "task", json_string(thex));
            json_object_set_new(out, "index",
                                json_integer((json_int_t)spw_id_output_index(o[R_MOBJ_ID].id)));
            json_object_set_new(out, "of", json_integer((json_int_t)o[R_MOBJ_NOUTS].u));
            json_object_set_new(j, "output", out);
        }
        if (!o[R_MOBJ_CHUNKS].nil && o[R_MOBJ_CHUNKS].u > 0) {
            /* A chunked object (its chunks listed as objects of their own), or one chunk. */
            uint32_t idx = spw_id_output_index(o[R_MOBJ_ID].id);
            if (idx == 0) {
                json_object_set_new(j, "chunks", json_integer((json_int_t)o[R_MOBJ_CHUNKS].u));
            } else {
                json_t *ch = json_object();
                char phex[33];
                spw_id_hex(spw_id_output_task(o[R_MOBJ_ID].id), phex);
                json_object_set_new(ch, "parent", json_string(phex));
                json_object_set_new(ch, "index", json_integer((json_int_t)(idx - 1)));
                json_object_set_new(ch, "of", json_integer((json_int_t)o[R_MOBJ_CHUNKS].u));
                json_object_set_new(j, "chunk", ch);
            }
        }
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
            json_object_set_new(jh, "kind", ctl_doc_str(proto_refkind_name((int)r[R_HOLDER_KIND].u)));
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
                                ctl_doc_str(where == 3 ? "memory+spilled"
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

const char *ctl_doc_s(json_t *o, const char *k)
{
    const char *v = json_string_value(json_object_get(o, k));
    return v != NULL ? v : "";
}

static json_t *memory_finish(memdoc *d, const char *group_by)
{
    json_t *names = json_object();
    size_t i;
    json_t *n;
    json_array_foreach(d->nodes, i, n)
    {
        char key[32];
        snprintf(key, sizeof key, "%llu", (unsigned long long)ctl_doc_u(n, "id"));
        json_object_set(names, key, json_object_get(n, "name"));
    }
    json_t *totals = json_object();
    uint64_t count = 0, bytes = 0, mem = 0, spilled = 0, stored = 0, inl = 0;
    uint64_t refs[PROTO_REF_KINDS] = {0};
    json_t *o;
    json_array_foreach(d->objects, i, o)
    {
        count++;
        uint64_t size = ctl_doc_u(o, "size");
        if (json_object_get(o, "chunks") == NULL) /* a chunked object's bytes are its chunks' */
            bytes += size;
        if (json_is_true(json_object_get(o, "inline")))
            inl += size;
        size_t l;
        json_t *loc;
        bool in_mem = false, on_disk = false;
        json_array_foreach(json_object_get(o, "locations"), l, loc)
        {
            char key[32];
            snprintf(key, sizeof key, "%llu", (unsigned long long)ctl_doc_u(loc, "node_id"));
            json_t *nm = json_object_get(names, key);
            json_object_set_new(loc, "node", ctl_doc_str(nm ? json_string_value(nm) : "(gone)"));
            const char *st = ctl_doc_s(loc, "state");
            in_mem = in_mem || strstr(st, "memory") != NULL;
            on_disk = on_disk || strstr(st, "spilled") != NULL;
        }
        if (in_mem)
            mem += size;
        if (on_disk) {
            spilled += size;
            stored += ctl_doc_u(o, "stored_size");
        }
        for (int k = 0; k < PROTO_REF_KINDS; k++)
            refs[k] += ctl_doc_u(json_object_get(o, "refs"), proto_refkind_name(k));
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
                    json_array_append_new(keys, ctl_doc_str(ctl_doc_s(loc, "node")));
                if (json_array_size(keys) == 0)
                    json_array_append_new(keys, ctl_doc_str(json_is_true(json_object_get(o, "inline"))
                                                                ? "(scheduler, inline)"
                                                                : "(nowhere)"));
            } else if (strcmp(group_by, "owner") == 0) {
                char key[128];
                json_t *ow = json_object_get(o, "owner");
                snprintf(key, sizeof key, "%s pid %llu", ctl_doc_s(ow, "host"),
                         (unsigned long long)ctl_doc_u(ow, "pid"));
                json_array_append_new(keys, ctl_doc_str(key));
            } else if (strcmp(group_by, "ref-type") == 0) {
                for (int k = 0; k < PROTO_REF_KINDS; k++)
                    if (ctl_doc_u(json_object_get(o, "refs"), proto_refkind_name(k)) > 0)
                        json_array_append_new(keys, ctl_doc_str(proto_refkind_name(k)));
                if (json_array_size(keys) == 0)
                    json_array_append_new(keys, ctl_doc_str("(none)"));
            } else {
                json_array_append_new(keys, ctl_doc_str(ctl_doc_s(o, "call_site")));
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
                                                             (json_int_t)ctl_doc_u(o, "size")));
            }
            json_decref(keys);
        }
        json_t *arr = json_array();
        const char *key;
        json_t *g;
        json_object_foreach(groups, key, g)
        {
            json_t *e = json_object();
            json_object_set_new(e, "group", ctl_doc_str(key));
            json_object_set(e, "objects", json_object_get(g, "objects"));
            json_object_set(e, "bytes", json_object_get(g, "bytes"));
            json_array_append_new(arr, e);
        }
        json_decref(groups);
        json_object_set_new(doc, "group_by", ctl_doc_str(group_by));
        json_object_set_new(doc, "groups", arr);
    }
    return doc;
}

static int cmp_objects(const void *a, const void *b, void *arg)
{
    const char *sort_key = arg;
    json_t *x = *(json_t *const *)a, *y = *(json_t *const *)b;
    if (strcmp(sort_key, "id") == 0)
        return strcmp(ctl_doc_s(x, "id"), ctl_doc_s(y, "id"));
    const char *f = strcmp(sort_key, "age") == 0 ? "age_ms" : "size";
    uint64_t vx = ctl_doc_u(x, f), vy = ctl_doc_u(y, f);
    return vx < vy ? 1 : vx > vy ? -1 : strcmp(ctl_doc_s(x, "id"), ctl_doc_s(y, "id"));
}

static void sort_and_limit(json_t *doc, const char *by, long limit)
{
    json_t *objs = json_object_get(doc, "objects");
    size_t n = json_array_size(objs);
    json_t **v = malloc((n > 0 ? n : 1) * sizeof *v);
    for (size_t i = 0; i < n; i++)
        v[i] = json_incref(json_array_get(objs, i));
    qsort_r(v, n, sizeof *v, cmp_objects, (void *)by);
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

int ctl_doc_connect(const char *addr, const spillway_opts *o, spillway **out)
{
    return spillway__connect_role(addr, o, PROTO_ROLE_CTL, out);
}

/* One request whose reply (of type reply_type) becomes the document: *out is a new reference
 * on success, else NULL. A reply that made no document is SPW_EPROTO. */
static int doc_request(spillway *cl, spillway__enc_fn *enc, spillway__reply_fn *reply,
                       uint32_t reply_type, int timeout_ms, json_t **out)
{
    *out = NULL;
    int rc = spillway__request(cl, enc, reply, out, reply_type, timeout_ms);
    if (rc == 0 && *out == NULL)
        rc = SPW_EPROTO;
    if (rc != 0) {
        json_decref(*out);
        *out = NULL;
    }
    return rc;
}

int ctl_doc_status(spillway *cl, int timeout_ms, json_t **out)
{
    return doc_request(cl, status_enc, status_reply, PROTO_STATUS, timeout_ms, out);
}

int ctl_doc_memory(spillway *cl, int timeout_ms, const char *group_by, const char *sort_by,
                   long limit, bool stats_only, json_t **out)
{
    *out = NULL;
    memdoc d = {json_array(), json_array(), NULL, false, false};
    int rc = spillway__request_until(cl, memory_enc, memory_reply, &d, PROTO_MEMORY_END, timeout_ms);
    if (rc == 0 && !d.ended)
        rc = SPW_EPROTO;
    if (rc != 0) {
        json_decref(d.objects);
        json_decref(d.nodes);
        return rc;
    }
    json_t *doc = memory_finish(&d, group_by);
    json_decref(d.objects);
    json_decref(d.nodes);
    sort_and_limit(doc, sort_by != NULL ? sort_by : "size", limit);
    if (stats_only)
        json_object_del(doc, "objects");
    *out = doc;
    return 0;
}

/* ------------------------------------------------------------------- jobs */

static void jobs_enc(proto_enc *e, spw_buf *out, uint64_t req, void *arg)
{
    (void)arg;
    proto_enc_graphs_req(e, out, req, &(proto_graphs_req_msg){.session = 0, .graph = 0});
}

static void jobs_reply(const proto_msg *m, void *arg)
{
    json_t **out = arg;
    if (m->type != PROTO_GRAPHS)
        return;
    json_t *graphs = json_array();
    const proto_val *gs = &m->f[F_GRAPHS_GRAPHS];
    for (uint32_t i = 0; i < gs->arr.n; i++) {
        const proto_val *g = PROTO_REC(gs, i);
        json_t *j = json_object();
        /* id: unique in the cluster (absent from an older scheduler: null); graph: the
         * client's id (spillway_graph_id), which two clients may share. */
        json_object_set_new(j, "id", g[R_GRAPH_NO].nil ? json_null()
                                                        : json_integer((json_int_t)g[R_GRAPH_NO].u));
        json_object_set_new(j, "graph", json_integer((json_int_t)g[R_GRAPH_ID].u));
        json_t *cl = json_object();
        json_object_set_new(cl, "session", json_integer((json_int_t)g[R_GRAPH_SESSION].u));
        json_object_set_new(cl, "host", jstr(&g[R_GRAPH_HOST]));
        json_object_set_new(cl, "pid", json_integer((json_int_t)g[R_GRAPH_PID].u));
        json_object_set_new(j, "client", cl);
        json_object_set_new(j, "call_site", jstr(&g[R_GRAPH_SITE]));
        json_object_set_new(j, "age_ms", json_integer((json_int_t)g[R_GRAPH_AGE_MS].u));
        json_t *tasks = json_object();
        const proto_val *n = &g[R_GRAPH_COUNTS];
        uint64_t total = 0;
        for (uint32_t k = 0; k < n->arr.n && k < PROTO_TSTATE_COUNT; k++) {
            json_object_set_new(tasks, ctl_doc_tstate_names[k], json_integer((json_int_t)n->arr.v[k].u));
            total += n->arr.v[k].u;
        }
        json_object_set_new(tasks, "total", json_integer((json_int_t)total));
        json_object_set_new(j, "tasks", tasks);
        json_object_set_new(j, "bytes_in_flight", json_integer((json_int_t)g[R_GRAPH_LIVE].u));
        json_object_set_new(j, "max_bytes_in_flight",
                            json_integer((json_int_t)g[R_GRAPH_MAX_BYTES].u));
        uint64_t ended = g[R_GRAPH_ENDED_MS].u;
        json_object_set_new(j, "finished", json_boolean(ended != 0));
        json_object_set_new(j, "duration_ms", ended != 0 ? json_integer((json_int_t)ended) : json_null());
        json_array_append_new(graphs, j);
    }
    json_t *doc = json_object();
    json_object_set_new(doc, "graphs", graphs);
    *out = doc;
}

int ctl_doc_jobs(spillway *cl, int timeout_ms, json_t **out)
{
    return doc_request(cl, jobs_enc, jobs_reply, PROTO_GRAPHS, timeout_ms, out);
}

json_t *ctl_doc__build(const proto_msg *msgs, size_t n, const char *group_by)
{
    json_t *doc = NULL;
    if (n == 0)
        return NULL;
    if (msgs[0].type == PROTO_STATUS) {
        status_reply(&msgs[0], &doc);
    } else if (msgs[0].type == PROTO_GRAPHS) {
        jobs_reply(&msgs[0], &doc);
    } else {
        memdoc d = {json_array(), json_array(), NULL, false, false};
        for (size_t i = 0; i < n; i++)
            memory_reply(&msgs[i], &d);
        if (d.ended) {
            doc = memory_finish(&d, group_by);
            sort_and_limit(doc, "size", -1);
        }
        json_decref(d.objects);
        json_decref(d.nodes);
    }
    return doc;
}

/* ---------------------------------------------------------------- plugins */

static void plugins_enc(proto_enc *e, spw_buf *out, uint64_t req, void *arg)
{
    (void)arg;
    proto_enc_plugins_req(e, out, req);
}

static void plugins_reply(const proto_msg *m, void *arg)
{
    json_t **out = arg;
    if (m->type != PROTO_PLUGINS)
        return;
    json_t *list = json_array();
    const proto_val *ps = &m->f[F_PLUGINS_PLUGINS];
    uint64_t bytes = 0;
    for (uint32_t i = 0; i < ps->arr.n; i++) {
        const proto_val *r = PROTO_REC(ps, i);
        json_t *j = json_object();
        char hex[33];
        json_object_set_new(j, "name", jstr(&r[R_SPLUG_NAME]));
        json_object_set_new(j, "hash", jhash(&r[R_SPLUG_HASH]));
        json_object_set_new(j, "size", json_integer((json_int_t)r[R_SPLUG_SIZE].u));
        json_object_set_new(j, "object", json_string(spw_id_hex(r[R_SPLUG_OBJ].id, hex)));
        json_object_set_new(j, "state", json_string(r[R_SPLUG_STATE].u == PROTO_PLUGIN_READY
                                                        ? "ready"
                                                        : "checking"));
        json_object_set_new(j, "functions", json_integer((json_int_t)r[R_SPLUG_FNS].u));
        json_object_set_new(j, "clients", json_integer((json_int_t)r[R_SPLUG_CLIENTS].u));
        json_object_set_new(j, "graphs", json_integer((json_int_t)r[R_SPLUG_GRAPHS].u));
        json_object_set_new(j, "copies", json_integer((json_int_t)r[R_SPLUG_COPIES].u));
        bytes += r[R_SPLUG_SIZE].u;
        json_array_append_new(list, j);
    }
    json_t *doc = json_object();
    json_object_set_new(doc, "plugins", list);
    json_object_set_new(doc, "bytes", json_integer((json_int_t)bytes));
    *out = doc;
}

/* ------------------------------------------------------------------ drain */

typedef struct drain_ask {
    const char *worker;
    json_t *doc;
} drain_ask;

static void drain_enc(proto_enc *e, spw_buf *out, uint64_t req, void *arg)
{
    const drain_ask *d = arg;
    const char *w = d->worker;
    bool digits = w[0] != '\0' && strspn(w, "0123456789") == strlen(w) && strlen(w) < 10;
    proto_enc_drain(e, out, req,
                    &(proto_drain_msg){.worker = digits ? strtoull(w, NULL, 10) : 0,
                                       .name = digits ? "" : w});
}

static void drain_reply(const proto_msg *m, void *arg)
{
    drain_ask *d = arg;
    if (m->type != PROTO_OK)
        return;
    d->doc = json_object();
    json_object_set_new(d->doc, "worker", ctl_doc_str(d->worker));
    json_object_set_new(d->doc, "state", ctl_doc_str("drained"));
    json_object_set_new(d->doc, "copies", json_integer((json_int_t)m->f[F_OK_VALUE].u));
}

int ctl_doc_drain(spillway *cl, int timeout_ms, const char *worker, json_t **out)
{
    drain_ask d = {worker, NULL};
    *out = NULL;
    int rc = spillway__request(cl, drain_enc, drain_reply, &d, PROTO_OK, timeout_ms);
    if (rc == 0 && d.doc == NULL)
        rc = SPW_EPROTO;
    if (rc != 0) {
        json_decref(d.doc);
        return rc;
    }
    *out = d.doc;
    return 0;
}

int ctl_doc_plugins(spillway *cl, int timeout_ms, json_t **out)
{
    return doc_request(cl, plugins_enc, plugins_reply, PROTO_PLUGINS, timeout_ms, out);
}

/* ---------------------------------------------------------------- metrics */

/* Writes a label value with Prometheus's escapes (backslash, double quote, newline). */
static void label(FILE *f, const char *v)
{
    for (; v != NULL && *v != '\0'; v++) {
        if (*v == '\\' || *v == '"')
            fprintf(f, "\\%c", *v);
        else if (*v == '\n')
            fputs("\\n", f);
        else
            fputc(*v, f);
    }
}

/* {worker="NAME",address="HOST:PORT"}: the address keeps two workers of one name apart.
 * Written once per worker (heap, NUL-terminated; NULL when out of memory), then copied into
 * each of its samples. */
static char *worker_labels(json_t *w)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (f == NULL)
        return NULL;
    fputs("{worker=\"", f);
    label(f, ctl_doc_s(w, "name"));
    fputs("\",address=\"", f);
    label(f, ctl_doc_s(w, "address"));
    fputs("\"}", f);
    if (fclose(f) != 0) {
        free(text);
        return NULL;
    }
    return text;
}

static void family(FILE *f, const char *name, const char *type, const char *help)
{
    fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* A gauge with one sample per member of obj, labelled key=MEMBER; nothing when obj is absent
 * (a field an older scheduler does not send). */
static void keyed_gauge(FILE *f, json_t *obj, const char *name, const char *key, const char *help)
{
    if (obj == NULL)
        return;
    family(f, name, "gauge", help);
    const char *member;
    json_t *v;
    json_object_foreach(obj, member, v)
    fprintf(f, "%s{%s=\"%s\"} %llu\n", name, key, member, (unsigned long long)json_integer_value(v));
}

/* Per-worker metrics: name, type, help, the key in the worker's memory object (NULL: special),
 * a scale (bytes per KiB, seconds per ns). */
typedef struct wmetric {
    const char *name, *type, *help, *key;
    double scale;
} wmetric;

static const wmetric wmetrics[] = {
    {"spillway_store_capacity_bytes", "gauge", "Object store capacity.", "capacity", 1},
    {"spillway_store_used_bytes", "gauge", "Bytes of the store in use (objects in memory).", "used", 1},
    {"spillway_store_pinned_bytes", "gauge", "Bytes of objects pinned by readers or tasks.", "pinned", 1},
    {"spillway_store_peak_used_bytes", "gauge", "Highest used bytes seen.", "peak_used", 1},
    {"spillway_store_spill_threshold_bytes", "gauge", "Used bytes above which the store spills.", "spill_threshold", 1},
    {"spillway_store_pause_threshold_bytes", "gauge", "Used bytes above which the worker pauses.", "pause_threshold", 1},
    {"spillway_store_spilled_bytes", "gauge", "Raw bytes of objects spilled to disk.", "spilled_bytes", 1},
    {"spillway_store_spilled_stored_bytes", "gauge", "Bytes spilled objects take on disk (compressed).", "spilled_stored_bytes", 1},
    {"spillway_store_objects_in_memory", "gauge", "Objects in the store's memory.", "objects_in_memory", 1},
    {"spillway_store_objects_spilled", "gauge", "Objects spilled to disk.", "objects_spilled", 1},
    {"spillway_spills_total", "counter", "Objects spilled to disk.", "spill_count", 1},
    {"spillway_spill_bytes_total", "counter", "Bytes spilled to disk.", "spill_total_bytes", 1},
    {"spillway_spill_seconds_total", "counter", "Time spent spilling.", "spill_ns", 1e-9},
    {"spillway_restores_total", "counter", "Objects restored from disk.", "restore_count", 1},
    {"spillway_restore_bytes_total", "counter", "Bytes restored from disk.", "restore_total_bytes", 1},
    {"spillway_restore_seconds_total", "counter", "Time spent restoring.", "restore_ns", 1e-9},
    {"spillway_store_evictions_total", "counter", "Objects evicted (their spilled copy kept).", "evictions", 1},
    {"spillway_worker_rss_bytes", "gauge", "Worker resident memory (anonymous + shared).", "rss_kib", 1024},
    {"spillway_executor_restarts_total", "counter", "Executor processes restarted.", "executor_restarts", 1},
    {"spillway_worker_tasks_done_total", "counter", "Tasks the worker finished.", "tasks_done", 1},
    {"spillway_worker_tasks_failed_total", "counter", "Tasks that failed on the worker.", "tasks_failed", 1},
};

char *ctl_doc_metrics(json_t *status)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (f == NULL)
        return NULL;
    json_t *workers = json_object_get(status, "workers");
    size_t i, nw = json_array_size(workers);
    json_t *w;
    /* Each worker's labels and memory object once, not once per family. */
    char **labels = calloc(nw > 0 ? nw : 1, sizeof *labels);
    json_t **mems = calloc(nw > 0 ? nw : 1, sizeof *mems);
    bool ok = labels != NULL && mems != NULL;
    json_array_foreach(workers, i, w)
    {
        if (!ok)
            break;
        labels[i] = worker_labels(w);
        mems[i] = json_object_get(w, "memory");
        ok = labels[i] != NULL;
    }
    for (size_t m = 0; ok && m < sizeof wmetrics / sizeof wmetrics[0]; m++) {
        const wmetric *wm = &wmetrics[m];
        family(f, wm->name, wm->type, wm->help);
        for (i = 0; i < nw; i++) {
            json_t *v = json_object_get(mems[i], wm->key);
            if (v == NULL)
                continue;
            fputs(wm->name, f);
            fputs(labels[i], f);
            if (wm->scale == 1)
                fprintf(f, " %lld\n", (long long)json_integer_value(v));
            else
                fprintf(f, " %.17g\n", (double)json_integer_value(v) * wm->scale);
        }
    }
    static const struct {
        const char *name, *help, *key;
    } wcounts[] = {
        {"spillway_worker_paused", "1 while the worker refuses new work (memory above the pause threshold).", NULL},
        {"spillway_worker_slots", "Executor slots of the worker.", "slots"},
        {"spillway_worker_tasks_running", "Executors of the worker running a task now.", "busy"},
        {"spillway_worker_tasks_assigned", "Tasks the scheduler has sent the worker and not heard back about.", "assigned"},
    };
    for (size_t m = 0; ok && m < sizeof wcounts / sizeof wcounts[0]; m++) {
        family(f, wcounts[m].name, "gauge", wcounts[m].help);
        json_array_foreach(workers, i, w)
        {
            fputs(wcounts[m].name, f);
            fputs(labels[i], f);
            if (wcounts[m].key == NULL)
                fprintf(f, " %d\n", strcmp(ctl_doc_s(w, "state"), "paused") == 0);
            else
                fprintf(f, " %llu\n", (unsigned long long)ctl_doc_u(w, wcounts[m].key));
        }
    }
    for (i = 0; labels != NULL && i < nw; i++)
        free(labels[i]);
    free(labels);
    free(mems);
    if (!ok) {
        fclose(f);
        free(text);
        return NULL;
    }

    family(f, "spillway_workers", "gauge", "Workers connected to the scheduler.");
    fprintf(f, "spillway_workers %zu\n", json_array_size(workers));
    family(f, "spillway_uptime_seconds", "gauge", "Seconds since the scheduler started.");
    fprintf(f, "spillway_uptime_seconds %.3f\n",
            (double)ctl_doc_u(json_object_get(status, "scheduler"), "uptime_ms") / 1000.0);
    family(f, "spillway_tasks", "gauge", "Tasks the scheduler knows, by state.");
    json_t *tasks = json_object_get(status, "tasks");
    for (int k = 0; k < PROTO_TSTATE_COUNT; k++)
        fprintf(f, "spillway_tasks{state=\"%s\"} %llu\n", ctl_doc_tstate_names[k],
                (unsigned long long)ctl_doc_u(tasks, ctl_doc_tstate_names[k]));
    json_t *objs = json_object_get(status, "objects");
    family(f, "spillway_objects", "gauge", "Objects in the scheduler's directory.");
    fprintf(f, "spillway_objects %llu\n", (unsigned long long)ctl_doc_u(objs, "count"));
    family(f, "spillway_object_bytes", "gauge", "Bytes of the ready objects in the directory.");
    fprintf(f, "spillway_object_bytes %llu\n", (unsigned long long)ctl_doc_u(objs, "bytes"));
    keyed_gauge(f, json_object_get(status, "references"), "spillway_references", "kind",
                "References held on objects, by kind.");
    keyed_gauge(f, json_object_get(status, "connections"), "spillway_connections", "role",
                "Connections to the scheduler, by peer role.");
    json_t *io = json_object_get(status, "io");
    if (io != NULL) {
        family(f, "spillway_frames_received_total", "counter", "Frames the scheduler received.");
        fprintf(f, "spillway_frames_received_total %llu\n", (unsigned long long)ctl_doc_u(io, "frames_in"));
        family(f, "spillway_frames_sent_total", "counter", "Frames the scheduler sent.");
        fprintf(f, "spillway_frames_sent_total %llu\n", (unsigned long long)ctl_doc_u(io, "frames_out"));
        family(f, "spillway_received_bytes_total", "counter", "Bytes the scheduler received.");
        fprintf(f, "spillway_received_bytes_total %llu\n", (unsigned long long)ctl_doc_u(io, "bytes_in"));
        family(f, "spillway_sent_bytes_total", "counter", "Bytes the scheduler sent.");
        fprintf(f, "spillway_sent_bytes_total %llu\n", (unsigned long long)ctl_doc_u(io, "bytes_out"));
    }
    json_t *lat = json_object_get(status, "task_latency");
    if (lat != NULL) {
        family(f, "spillway_task_latency_seconds", "histogram",
               "Time from a task's submission to its successful completion.");
        uint64_t cum = 0;
        json_t *b;
        json_array_foreach(json_object_get(lat, "buckets"), i, b)
        {
            cum += ctl_doc_u(b, "count");
            json_t *le = json_object_get(b, "le_ms");
            if (json_is_integer(le))
                fprintf(f, "spillway_task_latency_seconds_bucket{le=\"%g\"} %llu\n",
                        (double)json_integer_value(le) / 1000.0, (unsigned long long)cum);
            else
                fprintf(f, "spillway_task_latency_seconds_bucket{le=\"+Inf\"} %llu\n",
                        (unsigned long long)cum);
        }
        fprintf(f, "spillway_task_latency_seconds_sum %.6f\n",
                (double)ctl_doc_u(lat, "sum_us") / 1e6);
        fprintf(f, "spillway_task_latency_seconds_count %llu\n",
                (unsigned long long)ctl_doc_u(lat, "count"));
    }
    if (fclose(f) != 0) {
        free(text);
        return NULL;
    }
    return text;
}

void ctl_doc_http_token(const uint8_t *secret, size_t len, char out[65])
{
    static const char msg[] = "spillway-http";
    uint8_t mac[crypto_auth_hmacsha256_BYTES];
    crypto_auth_hmacsha256_state st;
    crypto_auth_hmacsha256_init(&st, secret, len);
    crypto_auth_hmacsha256_update(&st, (const uint8_t *)msg, sizeof msg - 1);
    crypto_auth_hmacsha256_final(&st, mac);
    sodium_bin2hex(out, 65, mac, sizeof mac);
}
