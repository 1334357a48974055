/*
 * spillway-ctl: the operator's view of a cluster.
 *
 *   spillway-ctl [--scheduler ADDR] [--secret-file PATH] [--json] status
 *   spillway-ctl [...] jobs [--watch] [--interval MS] [--count N]
 *   spillway-ctl [...] plugins
 *   spillway-ctl --secret-file PATH http-token
 *   spillway-ctl [...] memory [--group-by node|owner|ref-type|call-site] [--sort-by size|age|id]
 *                             [--stats-only] [--limit N] [--watch SECONDS]
 *
 * Every reply is first turned into one JSON document (jansson), and the human table is printed
 * from that document, so the table and --json can never disagree. Errors (scheduler down,
 * wrong secret, unknown option) are one line on stderr and a non-zero exit status. The global
 * options are the rows of ctl_opts.c; a command's own options are parsed here.
 */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "ctl_opts.h"
#include "spillway/conn.h"
#include "spillway/docs.h"


/* A whole number option: decimal digits only, min..max. Anything else (a sign, a suffix, a
 * value strtol would saturate) prints "spillway-ctl: OPT wants WHAT" and returns false. */
static bool opt_number(const char *opt, const char *arg, long min, long max, const char *what,
                       long *out)
{
    bool digits = *arg != '\0';
    for (const char *p = arg; *p != '\0'; p++)
        digits = digits && *p >= '0' && *p <= '9';
    errno = 0;
    long v = digits ? strtol(arg, NULL, 10) : 0;
    if (!digits || errno == ERANGE || v < min || v > max) {
        fprintf(stderr, "spillway-ctl: %s wants %s, not '%.40s'\n", opt, what, arg);
        return false;
    }
    *out = v;
    return true;
}

static char *human(uint64_t b, char *buf)
{
    return spw_size_fmt(b, buf, 16);
}

/* Workers listed by the status table; with more, the table shows those that most need a look
 * (paused first, then the fullest stores) under a summary of all, and --json lists every one. */
#define STATUS_ROWS_MAX 32

static double worker_fill(json_t *w)
{
    json_t *mem = json_object_get(w, "memory");
    uint64_t cap = ctl_doc_u(mem, "capacity");
    return cap ? (double)ctl_doc_u(mem, "used") / (double)cap : 0;
}

static int worker_attention_cmp(const void *x, const void *y)
{
    json_t *a = *(json_t *const *)x, *b = *(json_t *const *)y;
    bool pa = strcmp(ctl_doc_s(a, "state"), "paused") == 0;
    bool pb = strcmp(ctl_doc_s(b, "state"), "paused") == 0;
    if (pa != pb)
        return pa ? -1 : 1;
    double fa = worker_fill(a), fb = worker_fill(b);
    if (fa != fb)
        return fa > fb ? -1 : 1;
    uint64_t ia = ctl_doc_u(a, "id"), ib = ctl_doc_u(b, "id");
    return ia < ib ? -1 : ia > ib;
}

static void print_status(json_t *doc)
{
    json_t *sch = json_object_get(doc, "scheduler");
    uint64_t up = ctl_doc_u(sch, "uptime_ms") / 1000;
    printf("scheduler %s  up %lluh%02llum%02llus\n", json_string_value(json_object_get(sch, "address")),
           (unsigned long long)(up / 3600), (unsigned long long)(up / 60 % 60),
           (unsigned long long)(up % 60));
    json_t *workers = json_object_get(doc, "workers");
    size_t nworkers = json_array_size(workers), i;
    json_t *w;
    /* The rows: every worker, or the STATUS_ROWS_MAX that most need a look. */
    json_t **rows = calloc(nworkers ? nworkers : 1, sizeof *rows);
    json_array_foreach(workers, i, w) rows[i] = w;
    size_t nrows = nworkers;
    if (nworkers > STATUS_ROWS_MAX) {
        qsort(rows, nworkers, sizeof *rows, worker_attention_cmp);
        nrows = STATUS_ROWS_MAX;
        uint64_t paused = 0, busy = 0, slots = 0, used = 0, cap = 0, spilled = 0;
        json_array_foreach(workers, i, w)
        {
            json_t *mem = json_object_get(w, "memory");
            paused += strcmp(ctl_doc_s(w, "state"), "paused") == 0;
            busy += ctl_doc_u(w, "busy");
            slots += ctl_doc_u(w, "slots");
            used += ctl_doc_u(mem, "used");
            cap += ctl_doc_u(mem, "capacity");
            spilled += ctl_doc_u(mem, "spilled_bytes");
        }
        char u[16], c[16], sp[16];
        printf("\nworkers: %zu  (%llu paused; slots %llu/%llu busy; stores %s/%s used, %s "
               "spilled)\n",
               nworkers, (unsigned long long)paused, (unsigned long long)busy,
               (unsigned long long)slots, human(used, u), human(cap, c), human(spilled, sp));
        printf("  the %d that most need a look: paused first, then the fullest stores\n",
               STATUS_ROWS_MAX);
    } else {
        printf("\nworkers: %zu\n", nworkers);
    }
    printf("  %-4s %-21s %-16s %-10s %-8s %-8s %-22s %-10s %-10s %s\n", "ID", "ADDRESS", "NAME",
           "SLOTS", "QUEUED", "STATE", "USED/CAPACITY", "PINNED", "SPILLED", "OBJECTS");
    for (i = 0; i < nrows; i++) {
        w = rows[i];
        json_t *mem = json_object_get(w, "memory");
        char u[16], cap[16], pin[16], sp[16], slots[24], usedcap[40], objs[32];
        snprintf(slots, sizeof slots, "%llu/%llu", (unsigned long long)ctl_doc_u(w, "busy"),
                 (unsigned long long)ctl_doc_u(w, "slots"));
        snprintf(usedcap, sizeof usedcap, "%s/%s", human(ctl_doc_u(mem, "used"), u),
                 human(ctl_doc_u(mem, "capacity"), cap));
        snprintf(objs, sizeof objs, "%llu+%llu spilled",
                 (unsigned long long)ctl_doc_u(mem, "objects_in_memory"),
                 (unsigned long long)ctl_doc_u(mem, "objects_spilled"));
        printf("  %-4llu %-21s %-16s %-10s %-8llu %-8s %-22s %-10s %-10s %s\n",
               (unsigned long long)ctl_doc_u(w, "id"), json_string_value(json_object_get(w, "address")),
               json_string_value(json_object_get(w, "name")), slots,
               (unsigned long long)ctl_doc_u(w, "assigned"),
               json_string_value(json_object_get(w, "state")), usedcap,
               human(ctl_doc_u(mem, "pinned"), pin), human(ctl_doc_u(mem, "spilled_bytes"), sp), objs);
    }
    if (nrows < nworkers)
        printf("  ... and %zu more (spillway-ctl --json status lists every worker)\n",
               nworkers - nrows);
    printf("\nnode memory budget (store + slots x task limit + margin) and executors:\n");
    for (i = 0; i < nrows; i++) {
        w = rows[i];
        json_t *mem = json_object_get(w, "memory");
        char b[16], cap[16], lim[16], budget[96];
        if (ctl_doc_u(mem, "node_budget") == 0)
            snprintf(budget, sizeof budget, "unbounded: no task memory limit");
        else
            snprintf(budget, sizeof budget, "%s = %s + %llu x %s + margin",
                     human(ctl_doc_u(mem, "node_budget"), b), human(ctl_doc_u(mem, "capacity"), cap),
                     (unsigned long long)ctl_doc_u(w, "slots"),
                     human(ctl_doc_u(mem, "task_memory_limit"), lim));
        /* Restarts are executors that died (a crash, a kill, the memory limit); recycles were
         * replaced on purpose (--executor-max-tasks, --executor-max-rss). */
        printf("  %-16s %s; executors restarted %llu, recycled %llu\n",
               json_string_value(json_object_get(w, "name")), budget,
               (unsigned long long)ctl_doc_u(mem, "executor_restarts"),
               (unsigned long long)ctl_doc_u(mem, "executor_recycles"));
    }
    free(rows);
    json_t *tasks = json_object_get(doc, "tasks");
    printf("\ntasks:");
    for (int k = 0; k < PROTO_TSTATE_COUNT; k++)
        printf(" %s %llu", ctl_doc_tstate_names[k], (unsigned long long)ctl_doc_u(tasks, ctl_doc_tstate_names[k]));
    json_t *objsj = json_object_get(doc, "objects");
    char ob[16];
    printf("\nobjects: %llu (%s)\n", (unsigned long long)ctl_doc_u(objsj, "count"),
           human(ctl_doc_u(objsj, "bytes"), ob));
    json_t *clients = json_object_get(doc, "clients");
    printf("\nclients: %zu\n", json_array_size(clients));
    printf("  %-8s %-20s %-8s %-7s %-8s %s\n", "SESSION", "HOST", "PID", "ROLE", "TASKS", "REFS");
    json_t *c;
    json_array_foreach(clients, i, c)
    {
        printf("  %-8llu %-20s %-8llu %-7s %-8llu %llu", (unsigned long long)ctl_doc_u(c, "session"),
               json_string_value(json_object_get(c, "host")), (unsigned long long)ctl_doc_u(c, "pid"),
               json_string_value(json_object_get(c, "role")),
               (unsigned long long)ctl_doc_u(c, "tasks_submitted"),
               (unsigned long long)ctl_doc_u(c, "references"));
        json_t *drop = json_object_get(c, "detached_drop_ms");
        if (drop != NULL)
            printf("  (detached, dropped in %llu s)",
                   ((unsigned long long)json_integer_value(drop) + 999) / 1000);
        printf("\n");
    }
    printf("\nplugins the workers load:\n");
    json_array_foreach(workers, i, w)
    {
        size_t k;
        json_t *p;
        json_array_foreach(json_object_get(w, "plugins"), k, p)
        {
            char sz[16];
            printf("  %-16s %-24s %.16s  %-8s %s\n", json_string_value(json_object_get(w, "name")),
                   ctl_doc_s(p, "name"), ctl_doc_s(p, "hash"), human(ctl_doc_u(p, "size"), sz),
                   json_is_true(json_object_get(p, "uploaded")) ? "uploaded" : "--plugin");
        }
    }
    json_t *mm = json_object_get(doc, "plugin_mismatch");
    json_array_foreach(mm, i, w)
    printf("WARNING: workers run different bytes as plugin '%s' (see the hashes above)\n",
           json_string_value(w));
}

static void print_plugins(json_t *doc)
{
    json_t *list = json_object_get(doc, "plugins");
    char b[16];
    printf("uploaded plugins: %zu (%s)\n", json_array_size(list), human(ctl_doc_u(doc, "bytes"), b));
    printf("  %-20s %-64s %-8s %-8s %-5s %-7s %-6s %s\n", "NAME", "HASH", "SIZE", "STATE", "FNS",
           "CLIENTS", "GRAPHS", "COPIES");
    size_t i;
    json_t *p;
    json_array_foreach(list, i, p)
    {
        printf("  %-20s %-64s %-8s %-8s %-5llu %-7llu %-6llu %llu\n", ctl_doc_s(p, "name"),
               ctl_doc_s(p, "hash"), human(ctl_doc_u(p, "size"), b), ctl_doc_s(p, "state"),
               (unsigned long long)ctl_doc_u(p, "functions"),
               (unsigned long long)ctl_doc_u(p, "clients"),
               (unsigned long long)ctl_doc_u(p, "graphs"), (unsigned long long)ctl_doc_u(p, "copies"));
    }
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

/* The WHERE cell: node:state for each location while they fit in len, then "+N more" for the
 * rest (--json lists them all): a cut is always shown. */
static void where_cell(json_t *locs, char *out, size_t len)
{
    size_t n = json_array_size(locs), used = 0, shown = 0;
    out[0] = '\0';
    for (; shown < n; shown++) {
        json_t *loc = json_array_get(locs, shown);
        char item[2 * PROTO_MAX_NAME];
        int k = snprintf(item, sizeof item, "%s%s:%s", shown ? "," : "", ctl_doc_s(loc, "node"),
                         ctl_doc_s(loc, "state"));
        size_t ilen = k < 0 ? 0 : (size_t)k < sizeof item ? (size_t)k : sizeof item - 1;
        /* Room for the NUL, and for ",+N more" while more locations follow. */
        size_t reserve = shown + 1 < n ? sizeof ",+18446744073709551615 more" : 1;
        if (used + ilen + reserve > len)
            break;
        memcpy(out + used, item, ilen + 1);
        used += ilen;
    }
    if (shown < n)
        snprintf(out + used, len - used, "%s+%zu more", shown ? "," : "", n - shown);
}

static int group_bytes_cmp(const void *x, const void *y)
{
    uint64_t a = ctl_doc_u(*(json_t *const *)x, "bytes"), b = ctl_doc_u(*(json_t *const *)y, "bytes");
    return a > b ? -1 : a < b;
}

static void print_memory(json_t *doc, bool stats_only)
{
    char a[16], b[16], c[16], d[16], e[16];
    json_t *objs = json_object_get(doc, "objects");
    size_t i;
    json_t *o;
    if (!stats_only) {
        printf("%-12s %-10s %-10s %-8s %-26s %-34s %-22s %-24s %s\n", "ID", "SIZE", "STORED",
               "STATE", "WHERE", "REFS", "OWNER", "CALL SITE", "AGE");
        json_array_foreach(objs, i, o)
        {
            char where[160], refs[128] = "", owner[PROTO_MAX_NAME + 24], age[40];
            where_cell(json_object_get(o, "locations"), where, sizeof where);
            if (where[0] == '\0' && json_object_get(o, "chunks") != NULL)
                snprintf(where, sizeof where, "%llu chunks",
                         (unsigned long long)ctl_doc_u(o, "chunks"));
            else if (where[0] == '\0')
                snprintf(where, sizeof where, "%s",
                         json_is_true(json_object_get(o, "inline")) ? "scheduler:inline" : "-");
            for (int k = 0; k < PROTO_REF_KINDS; k++) {
                uint64_t v = ctl_doc_u(json_object_get(o, "refs"), proto_refkind_name(k));
                if (v > 0) {
                    size_t len = strlen(refs);
                    snprintf(refs + len, sizeof refs - len, "%s%s=%llu", len ? " " : "",
                             proto_refkind_name(k), (unsigned long long)v);
                }
            }
            json_t *ow = json_object_get(o, "owner");
            snprintf(owner, sizeof owner, "%s:%llu", ctl_doc_s(ow, "host"), (unsigned long long)ctl_doc_u(ow, "pid"));
            human_age(ctl_doc_u(o, "age_ms"), age, sizeof age);
            uint64_t stored = ctl_doc_u(o, "stored_size");
            /* An output of a task of several reads task#index (its id is the task's, with the
             * index in the low bits). */
            char idc[40];
            json_t *out = json_object_get(o, "output");
            json_t *chunk = json_object_get(o, "chunk");
            if (out != NULL)
                snprintf(idc, sizeof idc, "%.12s#%llu", ctl_doc_s(out, "task"),
                         (unsigned long long)ctl_doc_u(out, "index"));
            else if (chunk != NULL) /* chunk i of n of a chunked object, under its id */
                snprintf(idc, sizeof idc, "%.12s[%llu/%llu]", ctl_doc_s(chunk, "parent"),
                         (unsigned long long)ctl_doc_u(chunk, "index"),
                         (unsigned long long)ctl_doc_u(chunk, "of"));
            else
                snprintf(idc, sizeof idc, "%.12s", ctl_doc_s(o, "id"));
            printf("%-12s %-10s %-10s %-8s %-26s %-34s %-22s %-24s %s\n", idc,
                   human(ctl_doc_u(o, "size"), a), stored ? human(stored, b) : "-", ctl_doc_s(o, "state"),
                   where, refs[0] ? refs : "-", owner, ctl_doc_s(o, "call_site"), age);
        }
        json_t *tot = json_object_get(doc, "totals");
        if (ctl_doc_u(tot, "listed") < ctl_doc_u(tot, "objects"))
            printf("(%llu of %llu objects listed)\n", (unsigned long long)ctl_doc_u(tot, "listed"),
                   (unsigned long long)ctl_doc_u(tot, "objects"));
        printf("\n");
    }
    json_t *groups = json_object_get(doc, "groups");
    if (groups != NULL && !stats_only) {
        /* Largest first, as the objects are listed. */
        size_t ng = json_array_size(groups);
        json_t **sorted = calloc(ng ? ng : 1, sizeof *sorted);
        json_array_foreach(groups, i, o) sorted[i] = o;
        qsort(sorted, ng, sizeof *sorted, group_bytes_cmp);
        printf("%-40s %-10s %s\n", "GROUP", "OBJECTS", "BYTES");
        for (i = 0; i < ng; i++)
            printf("%-40s %-10llu %s\n", ctl_doc_s(sorted[i], "group"),
                   (unsigned long long)ctl_doc_u(sorted[i], "objects"),
                   human(ctl_doc_u(sorted[i], "bytes"), a));
        printf("\n");
        free(sorted);
    }
    printf("%-16s %-10s %-10s %-10s %-10s %-10s %-14s %-16s %s\n", "NODE", "CAPACITY", "USED",
           "PINNED", "SPILLED", "ON DISK", "OBJS MEM/DISK", "SPILLS", "RESTORES");
    json_array_foreach(json_object_get(doc, "nodes"), i, o)
    {
        char objs_s[32], spills[32], restores[32];
        snprintf(objs_s, sizeof objs_s, "%llu/%llu", (unsigned long long)ctl_doc_u(o, "objects_in_memory"),
                 (unsigned long long)ctl_doc_u(o, "objects_spilled"));
        snprintf(spills, sizeof spills, "%llu (%s)", (unsigned long long)ctl_doc_u(o, "spill_count"),
                 human(ctl_doc_u(o, "spill_total_bytes"), d));
        snprintf(restores, sizeof restores, "%llu (%s)", (unsigned long long)ctl_doc_u(o, "restore_count"),
                 human(ctl_doc_u(o, "restore_total_bytes"), e));
        printf("%-16s %-10s %-10s %-10s %-10s %-10s %-14s %-16s %s%s\n", ctl_doc_s(o, "name"),
               human(ctl_doc_u(o, "capacity"), a), human(ctl_doc_u(o, "used"), b), human(ctl_doc_u(o, "pinned"), c),
               human(ctl_doc_u(o, "spilled_bytes"), d), human(ctl_doc_u(o, "spilled_stored_bytes"), e), objs_s,
               spills, restores, json_is_true(json_object_get(o, "fresh")) ? "" : " (stale)");
    }
    json_t *t = json_object_get(doc, "totals");
    printf("\ntotal: %llu objects, %s (%s in memory, %s spilled, %s on disk, %s inline)%s\n",
           (unsigned long long)ctl_doc_u(t, "objects"), human(ctl_doc_u(t, "bytes"), a),
           human(ctl_doc_u(t, "in_memory_bytes"), b), human(ctl_doc_u(t, "spilled_bytes"), c),
           human(ctl_doc_u(t, "spilled_stored_bytes"), d), human(ctl_doc_u(t, "inline_bytes"), e),
           json_is_true(json_object_get(t, "complete")) ? "" : " (a worker did not answer)");
}

/* One round of `memory`: query, shape, print. Returns an exit status. */
static int memory_once(spillway *cl, const char *addr, int timeout, bool json, const char *group_by,
                       const char *sort_by, long limit, bool stats_only)
{
    json_t *doc;
    int rc = ctl_doc_memory(cl, timeout, group_by, sort_by, limit, stats_only, &doc);
    if (rc != 0) {
        fprintf(stderr, "spillway-ctl: memory from %s failed: %s\n", addr, spillway_strerror(rc));
        return 1;
    }
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

/* ------------------------------------------------------------------- jobs */

/* The last w characters of a call site (its file name and line matter most), "..." marking a cut. */
static const char *site_tail(const char *site, size_t w, char *buf, size_t buflen)
{
    size_t n = strlen(site);
    if (n <= w || w < 4)
        return site;
    snprintf(buf, buflen, "...%s", site + n - (w - 3));
    return buf;
}

/* A graph's number unique in the cluster (id), or the client's (graph) from an older scheduler. */
static unsigned long long graph_no(json_t *g)
{
    json_t *id = json_object_get(g, "id");
    return (unsigned long long)(json_is_integer(id) ? ctl_doc_u(g, "id") : ctl_doc_u(g, "graph"));
}

static void print_jobs_table(json_t *doc)
{
    printf("%-6s %-24s %-28s %-8s %-8s %-8s %-8s %-8s %-20s %s\n", "GRAPH", "CLIENT", "CALL SITE",
           "TOTAL", "WAITING", "RUNNING", "DONE", "FAILED", "IN FLIGHT/CAP", "AGE");
    size_t i;
    json_t *g;
    json_array_foreach(json_object_get(doc, "graphs"), i, g)
    {
        json_t *t = json_object_get(g, "tasks"), *cl = json_object_get(g, "client");
        char who[96], fl[48], a[16], b[16], age[40];
        /* The client's own id for the graph (spillway_graph_id) after its host and pid. */
        snprintf(who, sizeof who, "%s:%llu #%llu", ctl_doc_s(cl, "host"),
                 (unsigned long long)ctl_doc_u(cl, "pid"), (unsigned long long)ctl_doc_u(g, "graph"));
        snprintf(fl, sizeof fl, "%s/%s", human(ctl_doc_u(g, "bytes_in_flight"), a),
                 human(ctl_doc_u(g, "max_bytes_in_flight"), b));
        human_age(ctl_doc_u(g, "age_ms"), age, sizeof age);
        char st[64];
        printf("%-6llu %-24s %-28s %-8llu %-8llu %-8llu %-8llu %-8llu %-20s %s%s\n",
               graph_no(g), who,
               site_tail(ctl_doc_s(g, "call_site"), 28, st, sizeof st),
               (unsigned long long)ctl_doc_u(t, "total"),
               (unsigned long long)(ctl_doc_u(t, "waiting") + ctl_doc_u(t, "ready") + ctl_doc_u(t, "assigned")),
               (unsigned long long)ctl_doc_u(t, "running"), (unsigned long long)ctl_doc_u(t, "done"),
               (unsigned long long)ctl_doc_u(t, "failed"), fl, age,
               json_is_true(json_object_get(g, "finished")) ? " finished" : "");
    }
}

/* One line per graph: a bar of done (#) and failed (x, red on a terminal) tasks. */
static void print_jobs_bars(json_t *doc, bool tty)
{
    size_t i;
    json_t *g;
    if (json_array_size(json_object_get(doc, "graphs")) == 0)
        printf("no graphs\n");
    json_array_foreach(json_object_get(doc, "graphs"), i, g)
    {
        json_t *t = json_object_get(g, "tasks"), *cl = json_object_get(g, "client");
        uint64_t total = ctl_doc_u(t, "total"), done = ctl_doc_u(t, "done"),
                 failed = ctl_doc_u(t, "failed"), running = ctl_doc_u(t, "running");
        char a[16], b[16], age[40];
        human_age(ctl_doc_u(g, "age_ms"), age, sizeof age);
        if (!tty) {
            printf("id=%llu graph=%llu client=%s:%llu site=%s total=%llu done=%llu failed=%llu "
                   "running=%llu in_flight=%llu cap=%llu age_ms=%llu%s\n",
                   graph_no(g), (unsigned long long)ctl_doc_u(g, "graph"), ctl_doc_s(cl, "host"),
                   (unsigned long long)ctl_doc_u(cl, "pid"), ctl_doc_s(g, "call_site"),
                   (unsigned long long)total, (unsigned long long)done, (unsigned long long)failed,
                   (unsigned long long)running, (unsigned long long)ctl_doc_u(g, "bytes_in_flight"),
                   (unsigned long long)ctl_doc_u(g, "max_bytes_in_flight"),
                   (unsigned long long)ctl_doc_u(g, "age_ms"),
                   json_is_true(json_object_get(g, "finished")) ? " finished" : "");
            continue;
        }
        enum { W = 40 };
        int nd = total ? (int)(done * W / total) : 0, nf = total ? (int)(failed * W / total) : 0;
        if (nd + nf > W)
            nf = W - nd;
        char st[64];
        printf("graph %-4llu %-22s [", graph_no(g),
               site_tail(ctl_doc_s(g, "call_site"), 22, st, sizeof st));
        for (int k = 0; k < nd; k++)
            putchar('#');
        if (nf > 0) {
            printf("\033[31m");
            for (int k = 0; k < nf; k++)
                putchar('x');
            printf("\033[0m");
        }
        for (int k = nd + nf; k < W; k++)
            putchar('.');
        printf("] %3d%% %llu/%llu", total ? (int)((done + failed) * 100 / total) : 0,
               (unsigned long long)(done + failed), (unsigned long long)total);
        if (failed)
            printf(" \033[31m%llu failed\033[0m", (unsigned long long)failed);
        printf("  %llu running  %s/%s in flight  %s%s\n", (unsigned long long)running,
               human(ctl_doc_u(g, "bytes_in_flight"), a), human(ctl_doc_u(g, "max_bytes_in_flight"), b),
               age, json_is_true(json_object_get(g, "finished")) ? "  done" : "");
    }
}

/* `jobs`, once or every interval_ms (count rounds; 0 = until interrupted). */
static int jobs_run(spillway *cl, const char *addr, int timeout, bool json, bool watch,
                    long interval_ms, long count)
{
    bool tty = isatty(STDOUT_FILENO) != 0;
    for (long round = 0;; round++) {
        json_t *doc;
        int rc = ctl_doc_jobs(cl, timeout, &doc);
        if (rc != 0) {
            fprintf(stderr, "spillway-ctl: jobs from %s failed: %s\n", addr, spillway_strerror(rc));
            return 1;
        }
        if (json) {
            /* Watching: one compact document per line, one line per refresh. */
            char *out = json_dumps(doc, watch ? JSON_COMPACT | JSON_PRESERVE_ORDER
                                              : JSON_INDENT(2) | JSON_PRESERVE_ORDER);
            puts(out);
            free(out);
        } else if (watch) {
            if (tty)
                printf("\033[H\033[2J");
            print_jobs_bars(doc, tty);
        } else {
            print_jobs_table(doc);
        }
        fflush(stdout);
        json_decref(doc);
        if (!watch || (count > 0 && round + 1 >= count))
            return 0;
        struct timespec ts = {interval_ms / 1000, (interval_ms % 1000) * 1000000L};
        nanosleep(&ts, NULL);
    }
}

/* Runs the command after the global options that po holds. Returns the exit status. */
/* One document as --json prints it. */
static void print_json(json_t *doc)
{
    char *s = json_dumps(doc, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    puts(s);
    free(s);
}

/* How long drain waits without --timeout: copying a large store takes a while. */
#define DRAIN_WAIT_MS (3600 * 1000)

static int drain_run(spillway_opts *o, const char *addr, int timeout, bool json, int nargs,
                     char **args);

static int run(const spw_opts *po)
{
    const spw_opt_val *v = po->val;
    const char *addr = getenv("SPILLWAY_SCHEDULER");
    if (v[COPT_SCHEDULER].set)
        addr = v[COPT_SCHEDULER].str;
    else if (addr == NULL)
        addr = "127.0.0.1:7400";
    spillway_opts o;
    spillway_opts_init(&o);
    o.name = "spillway-ctl";
    if (v[COPT_SECRET_FILE].set)
        o.secret_file = v[COPT_SECRET_FILE].str;
    o.encrypt = (int)v[COPT_ENCRYPT].u;
    o.encrypt_local = v[COPT_ENCRYPT_LOCAL].u != 0;
    if (spw_opt_tls_check(&v[COPT_TLS_CERT], v[COPT_ENCRYPT].u) != 0)
        return 2;
    o.tls_cert = v[COPT_TLS_CERT].set ? v[COPT_TLS_CERT].str : NULL;
    o.tls_key = v[COPT_TLS_KEY].set ? v[COPT_TLS_KEY].str : NULL;
    o.tls_ca = v[COPT_TLS_CA].set ? v[COPT_TLS_CA].str : NULL;
    int json = v[COPT_JSON].set, timeout = (int)v[COPT_TIMEOUT].u;
    int argc = po->argc, c;
    char **argv = po->argv;
    optind = po->operand;
    if (optind >= argc) {
        fprintf(stderr, "spillway-ctl: no command given; see spillway-ctl --help\n");
        return 2;
    }
    const char *cmd = argv[optind];
    bool is_memory = strcmp(cmd, "memory") == 0, is_jobs = strcmp(cmd, "jobs") == 0;
    bool is_plugins = strcmp(cmd, "plugins") == 0;
    if (strcmp(cmd, "http-token") == 0) {
        if (o.secret_file == NULL) {
            fprintf(stderr, "spillway-ctl: http-token needs --secret-file\n");
            return 2;
        }
        uint8_t *secret;
        size_t slen;
        int src = proto_secret_load(o.secret_file, &secret, &slen);
        if (src != 0) {
            fprintf(stderr, "spillway-ctl: secret file %s: %s\n", o.secret_file, spillway_strerror(src));
            return 1;
        }
        char tok[65];
        ctl_doc_http_token(secret, slen, tok);
        spw_free(secret);
        puts(tok);
        return 0;
    }
    if (strcmp(cmd, "drain") == 0)
        return drain_run(&o, addr, v[COPT_TIMEOUT].set ? timeout : DRAIN_WAIT_MS, json,
                         argc - optind - 1, argv + optind + 1);
    if (strcmp(cmd, "status") != 0 && !is_memory && !is_jobs && !is_plugins) {
        fprintf(stderr, "spillway-ctl: unknown command '%s'; see spillway-ctl --help\n", cmd);
        return 2;
    }
    const char *group_by = NULL, *sort_by = "size";
    long limit = -1, watch = 0, interval_ms = 1000, count = 0;
    bool jobs_watch = false;
    bool stats_only = false;
    /* The command's own options follow it. */
    static const struct option memopts[] = {
        {"group-by", required_argument, 0, 'g'}, {"sort-by", required_argument, 0, 'o'},
        {"stats-only", no_argument, 0, 'x'},     {"limit", required_argument, 0, 'n'},
        {"watch", required_argument, 0, 'w'},    {"json", no_argument, 0, 'j'},
        {0, 0, 0, 0},
    };
    static const struct option jobopts[] = {
        {"watch", no_argument, 0, 'W'},          {"interval", required_argument, 0, 'i'},
        {"count", required_argument, 0, 'k'},    {"json", no_argument, 0, 'j'},
        {0, 0, 0, 0},
    };
    int sub_argc = argc - optind;
    char **sub_argv = argv + optind;
    optind = 1;
    while ((c = getopt_long(sub_argc, sub_argv, "", is_jobs ? jobopts : memopts, NULL)) != -1) {
        switch (c) {
        case 'W':
            jobs_watch = true;
            break;
        case 'i':
            if (!opt_number("--interval", optarg, 1, 3600000, "milliseconds 1..3600000",
                            &interval_ms))
                return 2;
            break;
        case 'k':
            if (!opt_number("--count", optarg, 0, LONG_MAX, "a number >= 0", &count))
                return 2;
            break;
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
            if (!opt_number("--limit", optarg, 0, LONG_MAX, "a number >= 0", &limit))
                return 2;
            break;
        case 'w':
            if (!opt_number("--watch", optarg, 1, 86400, "seconds 1..86400", &watch))
                return 2;
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
    int rc = ctl_doc_connect(addr, &o, &cl);
    if (rc != 0) {
        fprintf(stderr, "spillway-ctl: cannot connect to the scheduler at %s: %s\n", addr,
                spillway_strerror(rc));
        return 1;
    }
    if (is_jobs) {
        int status = jobs_run(cl, addr, timeout, json, jobs_watch, interval_ms, count);
        spillway_close(cl);
        return status;
    }
    if (is_memory) {
        int status;
        for (;;) {
            /* In place on a terminal; into a pipe or file, one table after another. */
            if (watch > 0 && !json && isatty(STDOUT_FILENO))
                printf("\033[H\033[2J");
            status = memory_once(cl, addr, timeout, json, group_by, sort_by, limit, stats_only);
            if (status != 0 || watch == 0)
                break;
            sleep((unsigned)watch);
        }
        spillway_close(cl);
        return status;
    }
    json_t *doc = NULL;
    rc = is_plugins ? ctl_doc_plugins(cl, timeout, &doc) : ctl_doc_status(cl, timeout, &doc);
    if (rc != 0) {
        fprintf(stderr, "spillway-ctl: %s from %s failed: %s\n", cmd, addr, spillway_strerror(rc));
        spillway_close(cl);
        return 1;
    }
    if (json) {
        print_json(doc);
    } else if (is_plugins) {
        print_plugins(doc);
    } else {
        print_status(doc);
    }
    json_decref(doc);
    spillway_close(cl);
    return 0;
}

/* spillway-ctl drain WORKER: asks the scheduler to drain it and waits until it is drained. */
static int drain_run(spillway_opts *o, const char *addr, int timeout, bool json, int nargs,
                     char **args)
{
    if (nargs != 1 || args[0][0] == '-') {
        fprintf(stderr, "spillway-ctl: drain wants one worker (its id, name or address)\n");
        return 2;
    }
    spillway *cl;
    int rc = ctl_doc_connect(addr, o, &cl);
    if (rc != 0) {
        fprintf(stderr, "spillway-ctl: cannot connect to the scheduler at %s: %s\n", addr,
                spillway_strerror(rc));
        return 1;
    }
    json_t *doc = NULL;
    rc = ctl_doc_drain(cl, timeout, args[0], &doc);
    if (rc != 0) {
        const char *msg = spillway_errmsg(cl);
        if (rc == SPW_ETIMEDOUT)
            fprintf(stderr, "spillway-ctl: worker %s is not drained yet (it goes on: see "
                            "spillway-ctl status)\n", args[0]);
        else
            fprintf(stderr, "spillway-ctl: drain %s: %s%s%s\n", args[0], spillway_strerror(rc),
                    msg[0] != '\0' ? ": " : "", msg);
        spillway_close(cl);
        return 1;
    }
    if (json) {
        print_json(doc);
    } else {
        printf("worker %s drained: %llu copies made; it takes no tasks\n", args[0],
               (unsigned long long)ctl_doc_u(doc, "copies"));
    }
    json_decref(doc);
    spillway_close(cl);
    return 0;
}

int main(int argc, char **argv)
{
    spw_log_init("spillway-ctl", SPW_LOG_ERR);
    spw_opts po;
    int rc = spw_opts_parse(&ctl_optset, argc, argv, &po);
    rc = rc == 0 ? run(&po) : rc > 0 ? 0 : 2;
    spw_opts_free(&po);
    return rc;
}
