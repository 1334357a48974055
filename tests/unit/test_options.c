/*
 * The option tables (spillway/options.h) against what users read and what the daemons do:
 * each man page names every option of its program with the table's default, each example
 * config names every config key with it, and the libraries' own defaults agree. Then the
 * refusals: the daemons are run on small config files and command lines that must each be
 * refused with exit status 2 and one message naming FILE:LINE (or --option) and the key.
 */
#include "spillway/options.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "spillway/objstore.h"
#include "spillway/sched.h"
#include "spillway/worker.h"

#include "../../client/ctl/ctl_opts.h"
#include "../../scheduler/main_opts.h"
#include "../../worker/main_opts.h"
#include "test_main.h"

/* ------------------------------------------------------- docs and tables */

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "r");
    if (f == NULL)
        fail_msg("cannot read %s: %s", path, strerror(errno));
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    assert_int_equal(fread(s, 1, (size_t)n, f), (size_t)n);
    s[n] = '\0';
    fclose(f);
    return s;
}

/* The man page's entry for --name: its term line (a line starting with '*' that names
 * "*--name*", followed by a tab-indented one) and the tab-indented lines under it, joined with
 * single spaces and with scdoc's bold marks ('*') dropped. False when no term line names the
 * option. */
static bool man_entry(const char *man, const char *name, char *out, size_t outlen)
{
    char term[128];
    snprintf(term, sizeof term, "*--%s*", name);
    for (const char *l = man; *l != '\0';) {
        const char *nl = strchr(l, '\n');
        size_t len = nl != NULL ? (size_t)(nl - l) : strlen(l);
        const char *hit = l[0] == '*' ? strstr(l, term) : NULL;
        if (hit != NULL && hit < l + len && nl != NULL && nl[1] == '\t') {
            size_t o = 0;
            for (const char *p = nl; p != NULL && p[1] == '\t'; p = strchr(p + 1, '\n')) {
                for (const char *q = p + 2; *q != '\n' && *q != '\0' && o + 2 < outlen; q++)
                    if (*q != '*')
                        out[o++] = *q;
                out[o++] = ' ';
            }
            out[o] = '\0';
            return true;
        }
        l += len + (nl != NULL);
    }
    return false;
}

/* Does text hold "Default: " + def, not followed by more of a value ("Default: 3" must not
 * match "Default: 30")? */
static bool says_default(const char *text, const char *def)
{
    char want[512];
    snprintf(want, sizeof want, "Default: %s", def);
    for (const char *p = strstr(text, want); p != NULL; p = strstr(p + 1, want)) {
        const char *e = p + strlen(want);
        if (!isalnum((unsigned char)*e) && *e != '%' && *e != '_' &&
            !(*e == '.' && isdigit((unsigned char)e[1])))
            return true;
    }
    return false;
}

/* Counts (and prints) where a man page or an example config disagrees with a table: an option
 * the man page does not name, a default it does not state, a config key the example lacks, a
 * literal default it writes differently, a key it has that the table does not allow. conf may
 * be NULL (spillway-ctl has no config file). */
/* Settings the example configs ship away from the default on purpose: they set secret-file,
 * so they encrypt between hosts (deploy/install.sh always writes the secret). */
static const char *const shipped_settings[] = {"encrypt = yes"};

static bool shipped_setting(const char *line)
{
    for (size_t i = 0; i < sizeof shipped_settings / sizeof shipped_settings[0]; i++) {
        if (strcmp(line, shipped_settings[i]) == 0)
            return true;
    }
    return false;
}

static int docs_disagree(const spw_optset *set, const char *man, const char *conf)
{
    int bad = 0;
    char entry[4096];
    for (size_t r = 0; r < set->nopts; r++) {
        const spw_opt *o = &set->opts[r];
        const char *def = o->def != NULL ? o->def : o->def_doc;
        if (!man_entry(man, o->name, entry, sizeof entry)) {
            fprintf(stderr, "%s: the man page has no entry for --%s\n", set->prog, o->name);
            bad++;
        } else if (def != NULL && !says_default(entry, def)) {
            fprintf(stderr, "%s: the man page's --%s does not say 'Default: %s'\n", set->prog,
                    o->name, def);
            bad++;
        }
        if (conf == NULL || !(o->flags & SPW_OPT_CONF))
            continue;
        /* Lines "key = value" (a flag: "key" alone), commented out ("# key = value") or not. */
        int seen = 0;
        for (const char *l = conf; *l != '\0';) {
            size_t len = strcspn(l, "\n");
            char line[512];
            snprintf(line, sizeof line, "%.*s", (int)len, l);
            l += len + (l[len] == '\n');
            char *s = line;
            while (*s == '#' || *s == ' ')
                s++;
            size_t klen = strlen(o->name);
            if (strncmp(s, o->name, klen) != 0 ||
                (o->type == SPW_OPT_FLAG ? s[klen] != '\0' : strncmp(s + klen, " = ", 3) != 0))
                continue;
            seen++;
            if (o->def != NULL && strcmp(s + klen + 3, o->def) != 0 && !shipped_setting(s)) {
                fprintf(stderr, "%s: the example config has '%s', the default is %s\n", set->prog,
                        line, o->def);
                bad++;
            }
        }
        if (seen == 0) {
            fprintf(stderr, "%s: the example config does not name %s\n", set->prog, o->name);
            bad++;
        }
    }
    /* Every uncommented key of the example is one the table allows in a config file. */
    for (const char *l = conf != NULL ? conf : ""; *l != '\0';) {
        size_t len = strcspn(l, "\n"), klen = strcspn(l, " =\n");
        char key[128];
        snprintf(key, sizeof key, "%.*s", (int)klen, l);
        if (len > 0 && l[0] != '#') {
            size_t r = 0;
            while (r < set->nopts && strcmp(set->opts[r].name, key) != 0)
                r++;
            if (r == set->nopts || !(set->opts[r].flags & SPW_OPT_CONF)) {
                fprintf(stderr, "%s: the example config sets '%s', not a config key\n", set->prog,
                        key);
                bad++;
            }
        }
        l += len + (l[len] == '\n');
    }
    return bad;
}

static void check_docs(const spw_optset *set, const char *man_path, const char *conf_path)
{
    char *man = slurp(man_path), *conf = conf_path != NULL ? slurp(conf_path) : NULL;
    assert_int_equal(docs_disagree(set, man, conf), 0);
    /* With the secret the daemons' examples set, they encrypt between hosts. */
    if (conf != NULL && strstr(conf, "\nsecret-file = ") != NULL)
        assert_non_null(strstr(conf, "\nencrypt = yes\n"));
    free(man);
    free(conf);
}

static void worker_man_page_and_config_match_the_table(void **state)
{
    (void)state;
    check_docs(&wrk_optset, SPW_SOURCE_DIR "/deploy/man/spillway-worker.8.scd",
               SPW_SOURCE_DIR "/deploy/worker.conf");
}

static void scheduler_man_page_and_config_match_the_table(void **state)
{
    (void)state;
    check_docs(&sched_optset, SPW_SOURCE_DIR "/deploy/man/spillway-scheduler.8.scd",
               SPW_SOURCE_DIR "/deploy/scheduler.conf");
}

static void ctl_man_page_matches_the_table(void **state)
{
    (void)state;
    check_docs(&ctl_optset, SPW_SOURCE_DIR "/deploy/man/spillway-ctl.1.scd", NULL);
}

/* Replaces the first "from" in s (which must hold it) by "to"; a new string. */
static char *replaced(const char *s, const char *from, const char *to)
{
    const char *p = strstr(s, from);
    assert_non_null(p);
    size_t n = strlen(s) - strlen(from) + strlen(to) + 1;
    char *out = malloc(n);
    snprintf(out, n, "%.*s%s%s", (int)(p - s), s, to, p + strlen(from));
    return out;
}

/* The check can fail: a default changed in the config, or in the man page, or an option the
 * man page forgets, each counts. */
static void docs_check_catches_a_differing_default(void **state)
{
    (void)state;
    char *man = slurp(SPW_SOURCE_DIR "/deploy/man/spillway-worker.8.scd");
    char *conf = slurp(SPW_SOURCE_DIR "/deploy/worker.conf");
    assert_int_equal(docs_disagree(&wrk_optset, man, conf), 0);
    char *conf2 = replaced(conf, "reconnect-max = 30000", "reconnect-max = 3000");
    assert_int_equal(docs_disagree(&wrk_optset, man, conf2), 1);
    char *conf3 = replaced(conf, "alloc-wait = 30000", "stroe-capacity = 30%");
    assert_int_equal(docs_disagree(&wrk_optset, man, conf3), 2); /* alloc-wait gone, a typo */
    char *man2 = replaced(man, "Default: 0.8.", "Default: 0.85.");
    assert_int_equal(docs_disagree(&wrk_optset, man2, conf), 1);
    char *man3 = replaced(man, "*--fetch-stall*", "*--fetch-stal*");
    assert_int_equal(docs_disagree(&wrk_optset, man3, conf), 1);
    free(man);
    free(conf);
    free(conf2);
    free(conf3);
    free(man2);
    free(man3);
}

/* Parses argv against set; the values of a successful parse. */
static spw_opts parsed(const spw_optset *set, int argc, const char **argv)
{
    spw_opts po;
    assert_int_equal(spw_opts_parse(set, argc, (char **)argv, &po), 0);
    return po;
}

/* The defaults the daemons run with (the tables') are the libraries' own. */
static void table_defaults_are_the_libraries_defaults(void **state)
{
    (void)state;
    const char *argv[] = {"spillway-worker", NULL};
    spw_opts po = parsed(&wrk_optset, 1, argv);
    const spw_opt_val *v = po.val;
    wrk_opts wo;
    wrk_opts_default(&wo);
    assert_string_equal(v[WOPT_SCHEDULER].str, wo.scheduler);
    assert_string_equal(v[WOPT_LISTEN].str, wo.listen);
    assert_int_equal(v[WOPT_RECONNECT_MAX].u, wo.reconnect_max_ms);
    assert_int_equal(v[WOPT_FETCH_STALL].u, wo.fetch_stall_ms);
    assert_int_equal(v[WOPT_ALLOC_WAIT].u, wo.store.alloc_wait_ms);
    assert_true(v[WOPT_SPILL_THRESHOLD].f == wo.store.spill_threshold);
    assert_true(v[WOPT_SPILL_TARGET].f == wo.store.spill_target);
    assert_true(v[WOPT_PAUSE_THRESHOLD].f == wo.store.pause_threshold);
    assert_int_equal(v[WOPT_SPILL_COMPRESSION_LEVEL].i, wo.store.compression_level);
    assert_int_equal(v[WOPT_SPILL_MAP_MAX].u, wo.store.spill_map_max);
    assert_int_equal(v[WOPT_EXECUTOR_MAX_TASKS].u, wo.exec_max_tasks);
    assert_int_equal(v[WOPT_LOG_LEVEL].u + SPW_LOG_ERR, SPW_LOG_NOTICE);
    spw_opts_free(&po);
    argv[0] = "spillway-scheduler";
    po = parsed(&sched_optset, 1, argv);
    v = po.val;
    sched_opts so;
    sched_opts_default(&so);
    assert_string_equal(v[SOPT_LISTEN].str, so.listen);
    assert_int_equal(v[SOPT_MAX_FRAME].u, so.max_frame);
    assert_int_equal(v[SOPT_INLINE_LIMIT].u, so.inline_limit);
    assert_int_equal(v[SOPT_CHUNK_SIZE].u, so.chunk);
    assert_int_equal(v[SOPT_HEARTBEAT_TIMEOUT].u, so.heartbeat_timeout_ms);
    assert_int_equal(v[SOPT_TASK_RETRIES].u, so.task_retries);
    assert_int_equal(v[SOPT_PLACE_WAIT].u, so.place_wait_ms);
    assert_int_equal(v[SOPT_GRAPH_MAX_TASKS].u, so.graph_max_tasks);
    assert_int_equal(v[SOPT_GRAPH_MAX_BYTES].u, so.graph_max_bytes);
    assert_int_equal(v[SOPT_GRAPH_MAX_TOTAL].u, so.graph_max_total);
    spw_opts_free(&po);
}

/* Every row parses its own default, names an option once, and --help lists it. */
static void every_row_is_well_formed_and_in_help(void **state)
{
    (void)state;
    const spw_optset *sets[] = {&wrk_optset, &sched_optset, &ctl_optset};
    for (size_t s = 0; s < 3; s++) {
        char *buf = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&buf, &len);
        spw_opts_usage(sets[s], f);
        fclose(f);
        for (size_t r = 0; r < sets[s]->nopts; r++) {
            const spw_opt *o = &sets[s]->opts[r];
            assert_non_null(o->name);
            assert_non_null(o->help);
            for (size_t k = 0; k < r; k++)
                assert_string_not_equal(sets[s]->opts[k].name, o->name);
            char want[128];
            snprintf(want, sizeof want, "--%s ", o->name);
            if (strstr(buf, want) == NULL)
                fail_msg("%s --help lacks %s", sets[s]->prog, want);
            spw_opt_val v;
            char why[256];
            if (o->def != NULL && spw_opt_value(o, o->def, &v, why, sizeof why) != 0)
                fail_msg("%s: --%s's default '%s': %s", sets[s]->prog, o->name, o->def, why);
        }
        free(buf);
    }
}

/* One value parser for both sources: the refusal names the kind of value wanted. */
static void value_refusals_name_the_kind_of_value(void **state)
{
    (void)state;
    static const struct {
        const spw_optset *set;
        int row;
        const char *text, *why;
    } cases[] = {
        {&sched_optset, SOPT_GRAPH_MAX_TOTAL, "-1", "wants a whole number (a task count)"},
        {&sched_optset, SOPT_GRAPH_MAX_TASKS, "64K", "wants a whole number (a task count)"},
        {&sched_optset, SOPT_TASK_RETRIES, "-1", "wants a whole number, got '-1'"},
        {&sched_optset, SOPT_MAX_FRAME, "1", "wants a size 64K..1G, got '1'"},
        {&sched_optset, SOPT_INLINE_LIMIT, "lots", "wants a size like 64K or 8M"},
        {&sched_optset, SOPT_HTTP_SAMPLE, "10", "wants a whole number 50..3600000"},
        {&sched_optset, SOPT_HTTP_AUTH, "always", "unknown mode 'always' (auto|token)"},
        {&sched_optset, SOPT_HTTP, "::1:80", "wants HOST:PORT"},
        {&wrk_optset, WOPT_SLOTS, "0", "wants a whole number 1..4096"},
        {&wrk_optset, WOPT_SPILL_MAP_MAX, "1M", "wants 0 or a size of at least 4M"},
        {&wrk_optset, WOPT_SPILL_COMPRESSION_LEVEL, "-8", "wants a whole number -7..22"},
        {&wrk_optset, WOPT_SPILL_TARGET, "nan", "wants a fraction in (0, 1]"},
        {&wrk_optset, WOPT_STORE_CAPACITY, "1K", "wants a size (>= 1M) or a percentage"},
        {&wrk_optset, WOPT_NAME, "caf\xc3", "wants UTF-8 text"},
        {&wrk_optset, WOPT_NAME, "\xc0\xaf", "wants UTF-8 text"}, /* overlong '/' */
        {&wrk_optset, WOPT_LOG_LEVEL, "loud", "unknown level 'loud'"},
        {&ctl_optset, COPT_TIMEOUT, "0", "wants a whole number 1..2147483647 (milliseconds)"},
        {&ctl_optset, COPT_SCHEDULER, "unix:", "wants unix:NAME with a NAME of 1..107"},
        {&wrk_optset, WOPT_SCHEDULER, "unix:@spillway-scheduler-7400", "wants HOST:PORT"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        spw_opt_val v;
        char why[256] = "";
        const spw_opt *o = &cases[i].set->opts[cases[i].row];
        assert_int_equal(spw_opt_value(o, cases[i].text, &v, why, sizeof why), -1);
        if (strstr(why, cases[i].why) == NULL)
            fail_msg("--%s %s: '%s' lacks '%s'", o->name, cases[i].text, why, cases[i].why);
    }
    /* And what is fine stays fine. */
    spw_opt_val v;
    char why[256];
    assert_int_equal(spw_opt_value(&wrk_optset.opts[WOPT_SPILL_MAP_MAX], "4M", &v, why, 256), 0);
    assert_int_equal(v.u, OST_SPILL_CHUNK);
    assert_int_equal(spw_opt_value(&wrk_optset.opts[WOPT_NAME], "caf\xc3\xa9", &v, why, 256), 0);
    assert_int_equal(spw_opt_value(&sched_optset.opts[SOPT_HTTP], "none", &v, why, 256), 0);
    /* spillway-ctl reaches the scheduler's local socket too. */
    assert_int_equal(spw_opt_value(&ctl_optset.opts[COPT_SCHEDULER],
                                   "unix:@spillway-scheduler-7400", &v, why, 256),
                     0);
}

/* --plugin may be given again; each value is kept, in order. */
static void repeatable_option_keeps_every_value(void **state)
{
    (void)state;
    const char *argv[] = {"spillway-worker", "--plugin",      "a.so",
                          "--slots=2",       "--plugin=b.so", NULL};
    spw_opts po = parsed(&wrk_optset, 5, argv);
    assert_int_equal(po.val[WOPT_PLUGIN].n, 2);
    assert_string_equal(po.val[WOPT_PLUGIN].list[0], "a.so");
    assert_string_equal(po.val[WOPT_PLUGIN].list[1], "b.so");
    assert_true(po.val[WOPT_SLOTS].set);
    assert_int_equal(po.val[WOPT_SLOTS].u, 2);
    assert_false(po.val[WOPT_NAME].set);
    spw_opts_free(&po);
}

/* ------------------------------------------------------- daemon refusals */

static char g_dir[256];

static void make_dir(void)
{
    if (g_dir[0] != '\0')
        return;
    const char *tmp = getenv("TMPDIR");
    snprintf(g_dir, sizeof g_dir, "%s/spw-opts.XXXXXX", tmp != NULL ? tmp : "/tmp");
    assert_non_null(mkdtemp(g_dir));
}

/* Runs argv (stdin /dev/null); returns its exit status with stdout and stderr in *out. */
static int run(const char *const *argv, char **out)
{
    int pfd[2];
    assert_int_equal(pipe(pfd), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        int null = open("/dev/null", O_RDONLY);
        dup2(null, 0);
        dup2(pfd[1], 1);
        dup2(pfd[1], 2);
        close(pfd[0]);
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    close(pfd[1]);
    size_t len = 0, cap = 4096;
    char *buf = malloc(cap);
    ssize_t n;
    while ((n = read(pfd[0], buf + len, cap - len - 1)) > 0) {
        len += (size_t)n;
        if (cap - len < 2)
            buf = realloc(buf, cap *= 2);
    }
    buf[len] = '\0';
    close(pfd[0]);
    int st;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    *out = buf;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

typedef struct refusal {
    const char *daemon;  /* "spillway-worker" or "spillway-scheduler" */
    const char *conf;    /* the config file's bytes (NUL bytes written as \0), or NULL */
    size_t conf_len;     /* 0: strlen(conf) */
    const char *args[5]; /* command line after --config FILE */
    const char *want[2]; /* each must be in the output; "@CONF" is the config file's path */
} refusal;

/* Each case must exit with status 2 before starting anything, with one line of output that
 * holds every wanted text. */
static void run_refusals(const refusal *cases, size_t n)
{
    make_dir();
    for (size_t i = 0; i < n; i++) {
        const refusal *k = &cases[i];
        char conf[512], bin[512];
        snprintf(conf, sizeof conf, "%s/case%zu.conf", g_dir, i);
        snprintf(bin, sizeof bin, "%s/%s", SPW_BIN_DIR, k->daemon);
        const char *argv[10];
        int a = 0;
        argv[a++] = bin;
        if (k->conf != NULL) {
            FILE *f = fopen(conf, "w");
            assert_non_null(f);
            size_t len = k->conf_len != 0 ? k->conf_len : strlen(k->conf);
            assert_int_equal(fwrite(k->conf, 1, len, f), len);
            fclose(f);
            argv[a++] = "--config";
            argv[a++] = conf;
        }
        for (int j = 0; j < 5 && k->args[j] != NULL; j++)
            argv[a++] = k->args[j];
        argv[a] = NULL;
        char *out;
        int st = run(argv, &out);
        fprintf(stderr, "case %zu: %s exited %d: %s", i, k->daemon, st, out);
        assert_int_equal(st, 2);
        assert_non_null(strchr(out, '\n'));
        assert_int_equal(strchr(out, '\n') - out + 1, (long)strlen(out)); /* one line */
        for (int j = 0; j < 2 && k->want[j] != NULL; j++) {
            char want[700];
            const char *at = strstr(k->want[j], "@CONF");
            if (at != NULL)
                snprintf(want, sizeof want, "%.*s%s%s", (int)(at - k->want[j]), k->want[j], conf,
                         at + 5);
            else
                snprintf(want, sizeof want, "%s", k->want[j]);
            if (strstr(out, want) == NULL)
                fail_msg("case %zu: output lacks '%s'", i, want);
        }
        free(out);
    }
}

/* A config text with NUL bytes in it, and its length. */
#define BYTES(s) s, sizeof(s) - 1

static char g_long_advertise[160];

/* Config files the daemons must refuse, each naming FILE:LINE and the key. */
static void config_refusals_name_file_line_and_key(void **state)
{
    (void)state;
    snprintf(g_long_advertise, sizeof g_long_advertise, "advertise = %0100d\n", 0);
    const refusal cases[] = {
        {"spillway-worker",
         "slots = 2\n# more\nslots = 3\n",
         0,
         {NULL},
         {"@CONF:3: slots: given again (first at line 1)"}},
        {"spillway-scheduler",
         "listen = 127.0.0.1:0\nlisten = 127.0.0.1:0\n",
         0,
         {NULL},
         {"@CONF:2: listen: given again"}},
        {"spillway-worker",
         BYTES("slots = 2\nname = ab\0cd\n"),
         {NULL},
         {"@CONF:2: name: a NUL byte in the line"}},
        {"spillway-worker", BYTES("\0slots = 2\n"), {NULL}, {"@CONF:1: a NUL byte in the line"}},
        {"spillway-worker",
         "slots = 1\nname = caf\xe9\n",
         0,
         {NULL},
         {"@CONF:2: name: byte 4 of the value is not UTF-8"}},
        {"spillway-worker",
         "spill-dir = /tmp/\xff\xfe\n",
         0,
         {NULL},
         {"@CONF:1: spill-dir: byte 6 of the value is not UTF-8"}},
        {"spillway-worker",
         "spill-map-max = 1M\n",
         0,
         {NULL},
         {"@CONF:1: spill-map-max: wants 0 or a size of at least 4M",
          "one chunk of the spill map"}},
        {"spillway-worker",
         g_long_advertise,
         0,
         {NULL},
         {"@CONF:1: advertise: '000", "is longer than 63 characters (HOST or HOST:PORT"}},
        {"spillway-scheduler",
         "listen = 127.0.0.1:0\nhttp-auth = token\n",
         0,
         {NULL},
         {"@CONF:2: http-auth: token needs --secret-file"}},
        {"spillway-scheduler",
         "graph-max-total = -1\n",
         0,
         {NULL},
         {"@CONF:1: graph-max-total: wants a whole number (a task count), got '-1'"}},
        {"spillway-scheduler",
         "graph-max-tasks = 64K\n",
         0,
         {NULL},
         {"@CONF:1: graph-max-tasks: wants a whole number (a task count), got '64K'"}},
    };
    run_refusals(cases, sizeof cases / sizeof cases[0]);
}

/* The same mistakes on the command line name the option instead; the command line may repeat an
 * option (the last wins) and override the config file. */
static void command_line_refusals_name_the_option(void **state)
{
    (void)state;
    static const refusal cases[] = {
        {"spillway-worker",
         NULL,
         0,
         {"--spill-map-max", "1M"},
         {"spillway-worker: --spill-map-max: wants 0 or a size of at least 4M"}},
        {"spillway-worker",
         NULL,
         0,
         {"--name", "caf\xe9"},
         {"spillway-worker: --name: wants UTF-8 text"}},
        {"spillway-scheduler",
         NULL,
         0,
         {"--http-auth", "token"},
         {"spillway-scheduler: --http-auth: token needs --secret-file"}},
        {"spillway-scheduler",
         NULL,
         0,
         {"--graph-max-total=-1"},
         {"spillway-scheduler: --graph-max-total: wants a whole number (a task count)"}},
        /* Repeated and overridden values parse; the refusal comes from a later cross-check. */
        {"spillway-worker",
         "spill-target = 0.75\n",
         0,
         {"--slots", "1", "--slots", "2", "--spill-target=0.85"},
         {"spillway-worker: --spill-target: want spill-target < spill-threshold"}},
    };
    run_refusals(cases, sizeof cases / sizeof cases[0]);
}

int main(int argc, char **argv);
static const struct CMUnitTest tests[] = {
    cmocka_unit_test(worker_man_page_and_config_match_the_table),
    cmocka_unit_test(scheduler_man_page_and_config_match_the_table),
    cmocka_unit_test(ctl_man_page_matches_the_table),
    cmocka_unit_test(docs_check_catches_a_differing_default),
    cmocka_unit_test(table_defaults_are_the_libraries_defaults),
    cmocka_unit_test(every_row_is_well_formed_and_in_help),
    cmocka_unit_test(value_refusals_name_the_kind_of_value),
    cmocka_unit_test(repeatable_option_keeps_every_value),
    cmocka_unit_test(config_refusals_name_file_line_and_key),
    cmocka_unit_test(command_line_refusals_name_the_option),
};
SPW_TEST_MAIN(tests)
