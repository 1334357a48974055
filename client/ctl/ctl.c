/*
 * spillway-ctl: the operator's view of a cluster.
 *
 *   spillway-ctl [--scheduler ADDR] [--secret-file PATH] [--json] status
 *
 * Every reply is first turned into one JSON document (jansson), and the human table is printed
 * from that document, so the table and --json can never disagree. Errors (scheduler down,
 * wrong secret, unknown option) are one line on stderr and a non-zero exit status.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

static void usage(FILE *f)
{
    fputs("usage: spillway-ctl [options] COMMAND\n"
          "commands:\n"
          "  status                    workers, slots, tasks by state, clients\n"
          "options:\n"
          "  --scheduler HOST:PORT     the scheduler ($SPILLWAY_SCHEDULER or 127.0.0.1:7400)\n"
          "  --secret-file PATH        cluster secret (mode 0600)\n"
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
    if (strcmp(cmd, "status") != 0) {
        fprintf(stderr, "spillway-ctl: unknown command '%s'; see spillway-ctl --help\n", cmd);
        return 2;
    }
    if (optind + 1 < argc) {
        fprintf(stderr, "spillway-ctl: unexpected argument '%s'\n", argv[optind + 1]);
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
