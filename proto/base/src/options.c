/*
 * Option tables (spillway/options.h): the config file turned into arguments, getopt_long over
 * them, each value parsed and checked by its row's type, and --help printed from the rows.
 * A config line "key = value" becomes the argument "--key=value" ahead of the command line, so
 * the command line wins and both go through the same value parser; where each argument came
 * from ("FILE:LINE", or the command line) is kept for the messages. That record is one per
 * process (the last spw_opts_parse): a daemon's main parses once.
 */
#include "spillway/options.h"

#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "spillway/base.h"
#include "spillway/daemon.h"

#define LINE_MAX_BYTES 1022 /* a config line's text, without its newline */

static char **g_origin; /* "FILE:LINE" per argument of the last parse, NULL: command line */
static int g_norigin;
static char g_prog[64] = "spillway";

static void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void fail(const char *fmt, ...)
{
    char msg[1200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "%s: %s\n", g_prog, msg);
}

const char *spw_config_origin(int idx)
{
    return idx >= 0 && idx < g_norigin ? g_origin[idx] : NULL;
}

void spw_opt_error(int idx, const char *key, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    const char *where = spw_config_origin(idx);
    if (where != NULL)
        fprintf(stderr, "%s: %s: %s: %s\n", g_prog, where, key, msg);
    else
        fprintf(stderr, "%s: --%s: %s\n", g_prog, key, msg);
}

void spw_opt_path_error(int idx, const char *key, const char *path, const char *msg)
{
    const char *where = spw_config_origin(idx);
    if (where != NULL)
        fprintf(stderr, "%s: %s: %s %s: %s\n", g_prog, where, key, path, msg);
    else
        fprintf(stderr, "%s: --%s %s: %s\n", g_prog, key, path, msg);
}

int spw_opt_tls_check(const spw_opt_val v[3], uint64_t encrypt)
{
    static const char *const key[3] = {"tls-cert", "tls-key", "tls-ca"};
    int given = -1;
    for (int i = 0; i < 3; i++)
        if (v[i].set)
            given = i;
    if (given < 0)
        return 0;
    for (int i = 0; i < 3; i++) {
        if (!v[i].set) {
            spw_opt_error(v[given].at, key[given],
                          "--tls-cert, --tls-key and --tls-ca go together (mutual TLS): --%s is "
                          "missing",
                          key[i]);
            return SPW_EINVAL;
        }
    }
    if (encrypt == 0) {
        spw_opt_error(v[0].at, key[0],
                      "certificates are for encryption: needs --encrypt yes or "
                      "required");
        return SPW_EINVAL;
    }
    for (int i = 0; i < 3; i++) {
        FILE *f = fopen(v[i].str, "r");
        if (f == NULL) {
            spw_opt_path_error(v[i].at, key[i], v[i].str, strerror(errno));
            return SPW_EINVAL;
        }
        fclose(f);
    }
    return 0;
}

/* ----------------------------------------------------------------- values */

/* The offset of the first byte of s[0..len) that is not part of valid UTF-8 (overlong forms,
 * surrogates and code points past U+10FFFF included), or len when all of it is. */
static size_t utf8_bad_at(const char *s, size_t len)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0;
    while (i < len) {
        unsigned c = p[i];
        size_t n = c < 0x80             ? 1
                   : (c & 0xE0) == 0xC0 ? 2
                   : (c & 0xF0) == 0xE0 ? 3
                   : (c & 0xF8) == 0xF0 ? 4
                                        : 0;
        if (n == 0 || i + n > len || (n == 2 && c < 0xC2))
            return i;
        uint32_t cp = n == 1 ? c : n == 2 ? c & 0x1F : n == 3 ? c & 0x0F : c & 0x07;
        for (size_t k = 1; k < n; k++) {
            if ((p[i + k] & 0xC0) != 0x80)
                return i;
            cp = cp << 6 | (p[i + k] & 0x3F);
        }
        if ((n == 3 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) ||
            (n == 4 && (cp < 0x10000 || cp > 0x10FFFF)))
            return i;
        i += n;
    }
    return len;
}

/* A size as the man pages write it: 64K, 4M, 1G; bytes when it is not a whole multiple. */
static void size_short(uint64_t v, char *out, size_t len)
{
    static const char units[] = "KMGT";
    int u = -1;
    while (u < 3 && v != 0 && v % 1024 == 0) {
        v /= 1024;
        u++;
    }
    if (u < 0)
        snprintf(out, len, "%" PRIu64, v);
    else
        snprintf(out, len, "%" PRIu64 "%c", v, units[u]);
}

/* " LO..HI", " of at least LO" or "" (the whole range of the type), sizes as size_short. */
static void range_text(const spw_opt *o, char *out, size_t len)
{
    char lo[32], hi[32];
    bool size = o->type == SPW_OPT_SIZE || o->type == SPW_OPT_CAPACITY;
    if (size) {
        size_short((uint64_t)o->lo, lo, sizeof lo);
        size_short((uint64_t)o->hi, hi, sizeof hi);
    } else {
        snprintf(lo, sizeof lo, "%" PRId64, o->lo);
        snprintf(hi, sizeof hi, "%" PRId64, o->hi);
    }
    bool open_top = o->hi == INT64_MAX || (!size && o->type != SPW_OPT_INT && o->hi >= UINT32_MAX);
    if (o->lo <= 0 && open_top)
        out[0] = '\0';
    else if (open_top)
        snprintf(out, len, " of at least %s", lo);
    else
        snprintf(out, len, " %s..%s", lo, hi);
}

/* Digits only (a leading '-' where neg), no overflow of int64_t / uint64_t. */
static int parse_whole(const char *s, bool neg, uint64_t *u, int64_t *i)
{
    const char *p = s;
    bool minus = neg && *p == '-';
    if (minus)
        p++;
    if (*p == '\0')
        return -1;
    for (const char *q = p; *q != '\0'; q++)
        if (!isdigit((unsigned char)*q))
            return -1;
    errno = 0;
    unsigned long long v = strtoull(p, NULL, 10);
    if (errno != 0)
        return -1;
    if (neg) {
        if (v > (unsigned long long)INT64_MAX)
            return -1;
        *i = minus ? -(int64_t)v : (int64_t)v;
    } else {
        *u = v;
    }
    return 0;
}

static bool in_range(const spw_opt *o, uint64_t v)
{
    if (v == 0 && (o->flags & SPW_OPT_ZERO_OK))
        return true;
    return v >= (uint64_t)o->lo && v <= (uint64_t)o->hi;
}

int spw_opt_value(const spw_opt *o, const char *text, spw_opt_val *v, char *why, size_t whylen)
{
    char range[80];
    range_text(o, range, sizeof range);
    const char *zero = o->flags & SPW_OPT_ZERO_OK ? "0 or " : "";
    char unit[96] = "";
    if (o->unit != NULL && o->type != SPW_OPT_ENUM)
        snprintf(unit, sizeof unit, " (%s)", o->unit);
    v->str = text;
    v->u = 0;
    v->i = 0;
    v->f = 0;
    if (o->word != NULL && strcmp(text, o->word) == 0)
        return 0;
    size_t len = strlen(text);
    switch (o->type) {
    case SPW_OPT_FLAG:
        v->u = 1;
        return 0;
    case SPW_OPT_PATH:
        return 0;
    case SPW_OPT_STRING: {
        size_t bad = utf8_bad_at(text, len);
        if (bad < len) {
            snprintf(why, whylen, "wants UTF-8 text; byte %zu is not UTF-8", bad + 1);
            return -1;
        }
        if (o->hi > 0 && (len < (uint64_t)o->lo || len > (uint64_t)o->hi)) {
            snprintf(why, whylen, "wants %" PRId64 "..%" PRId64 " characters, got %zu", o->lo,
                     o->hi, len);
            return -1;
        }
        return 0;
    }
    case SPW_OPT_ADDR: {
        const char *form = o->flags & SPW_OPT_PORT_OPTIONAL ? "HOST or HOST:PORT" : "HOST:PORT";
        if ((o->flags & SPW_OPT_UNIX_OK) && strncmp(text, "unix:", 5) == 0) {
            /* sun_path holds 108 bytes with its NUL (an abstract name's @ takes its place) */
            if (len == 5 || len - 5 > 107) {
                snprintf(why, whylen, "wants unix:NAME with a NAME of 1..107 characters, got '%s'",
                         text);
                return -1;
            }
            return 0;
        }
        if (o->hi > 0 && len > (uint64_t)o->hi) {
            snprintf(why, whylen,
                     "'%s' is longer than %" PRId64 " characters (%s, the port included)", text,
                     o->hi, form);
            return -1;
        }
        spw_addr a;
        if (spw_addr_parse(text, o->flags & SPW_OPT_PORT_OPTIONAL ? 0 : -1, &a) != 0) {
            snprintf(why, whylen, "wants %s (an IPv4 address, a host name or [IPv6]), got '%s'",
                     form, text);
            return -1;
        }
        return 0;
    }
    case SPW_OPT_COUNT:
    case SPW_OPT_MS:
        if (parse_whole(text, false, &v->u, &v->i) != 0 || !in_range(o, v->u)) {
            snprintf(why, whylen, "wants %sa whole number%s%s, got '%s'", zero, range,
                     unit[0] != '\0'         ? unit
                     : o->type == SPW_OPT_MS ? " (milliseconds)"
                                             : "",
                     text);
            return -1;
        }
        return 0;
    case SPW_OPT_INT:
        if (parse_whole(text, true, &v->u, &v->i) != 0 || v->i < o->lo || v->i > o->hi) {
            snprintf(why, whylen, "wants a whole number%s%s, got '%s'", range, unit, text);
            return -1;
        }
        return 0;
    case SPW_OPT_SIZE:
        if (spw_size_parse(text, &v->u) != 0 || !in_range(o, v->u)) {
            snprintf(why, whylen, "wants %sa size%s%s, got '%s'", zero,
                     range[0] != '\0' ? range : " like 64K or 8M", unit, text);
            return -1;
        }
        return 0;
    case SPW_OPT_CAPACITY: {
        bool zero_given = strcmp(text, "0") == 0 && (o->flags & SPW_OPT_ZERO_OK);
        if (!zero_given && (spw_capacity_parse(text, &v->u) != 0 || !in_range(o, v->u))) {
            char lo[32];
            size_short((uint64_t)o->lo, lo, sizeof lo);
            snprintf(why, whylen, "wants a size (>= %s)%s a percentage of memory%s, got '%s'", lo,
                     *zero ? "," : " or", *zero ? " or 0" : "", text);
            return -1;
        }
        return 0;
    }
    case SPW_OPT_FRACTION: {
        char *end;
        double f = strtod(text, &end);
        /* Written so that NaN fails too: it compares false either way. */
        if (*text == '\0' || *end != '\0' || !(f > 0 && f <= 1)) {
            snprintf(why, whylen, "wants a fraction in (0, 1], got '%s'", text);
            return -1;
        }
        v->f = f;
        return 0;
    }
    case SPW_OPT_ENUM: {
        size_t k = 0;
        for (const char *c = o->choices; *c != '\0'; k++) {
            size_t n = strcspn(c, "|");
            if (n == len && strncmp(c, text, n) == 0) {
                v->u = k;
                return 0;
            }
            c += n + (c[n] == '|');
        }
        snprintf(why, whylen, "unknown %s '%s' (%s)", o->unit != NULL ? o->unit : "value", text,
                 o->choices);
        return -1;
    }
    }
    snprintf(why, whylen, "cannot be parsed");
    return -1;
}

/* ----------------------------------------------------------------- config */

static const spw_opt *opt_named(const spw_optset *set, const char *name)
{
    for (size_t i = 0; i < set->nopts; i++)
        if (strcmp(set->opts[i].name, name) == 0)
            return &set->opts[i];
    return NULL;
}

static char *trim(char *s)
{
    while (isspace((unsigned char)*s))
        s++;
    char *e = s + strlen(s);
    while (e > s && isspace((unsigned char)e[-1]))
        *--e = '\0';
    return s;
}

/* The growing argument vector and, per argument, where it came from. */
typedef struct argvec {
    char **v;
    char **org;
    int n, cap;
} argvec;

static void vec_push(argvec *a, const char *arg, const char *origin)
{
    if (a->n + 2 > a->cap) {
        a->cap = a->cap ? a->cap * 2 : 16;
        a->v = spw_realloc(SPW_MOD_BASE, a->v, (size_t)a->cap * sizeof *a->v);
        a->org = spw_realloc(SPW_MOD_BASE, a->org, (size_t)a->cap * sizeof *a->org);
    }
    a->org[a->n] = origin != NULL ? spw_strdup(SPW_MOD_BASE, origin) : NULL;
    a->v[a->n++] = spw_strdup(SPW_MOD_BASE, arg);
    a->v[a->n] = NULL;
    a->org[a->n] = NULL;
}

/* Checks one line of the config file, already split; 0 or -1 (said). first_line[i] is the line
 * where row i was first given (0: not yet). */
static int config_line(const spw_optset *set, const char *path, int lineno, const char *key,
                       const char *val, int *first_line)
{
    for (const char *k = key; *k != '\0'; k++) {
        if (!isalnum((unsigned char)*k) && *k != '-') {
            fail("%s:%d: '%s' is not a key (want 'key = value', '#' for comments)", path, lineno,
                 key);
            return -1;
        }
    }
    if (strcmp(key, "config") == 0) {
        fail("%s:%d: config: config files do not nest", path, lineno);
        return -1;
    }
    const spw_opt *o = opt_named(set, key);
    if (o == NULL || !(o->flags & SPW_OPT_CONF)) {
        fail("%s:%d: unknown key '%s'", path, lineno, key);
        return -1;
    }
    if (val == NULL && o->type != SPW_OPT_FLAG) {
        fail("%s:%d: %s: a bare word; this key needs a value ('%s = VALUE')", path, lineno, key,
             key);
        return -1;
    }
    if (val != NULL && o->type == SPW_OPT_FLAG) {
        fail("%s:%d: %s: takes no value (write just '%s')", path, lineno, key, key);
        return -1;
    }
    if (val != NULL && *val == '\0') {
        fail("%s:%d: %s: empty value", path, lineno, key);
        return -1;
    }
    size_t vlen = val != NULL ? strlen(val) : 0, bad = utf8_bad_at(val, vlen);
    if (bad < vlen) {
        fail("%s:%d: %s: byte %zu of the value is not UTF-8 (the file must be UTF-8 text)", path,
             lineno, key, bad + 1);
        return -1;
    }
    size_t row = (size_t)(o - set->opts);
    if (first_line[row] != 0 && !(o->flags & SPW_OPT_REPEAT)) {
        fail("%s:%d: %s: given again (first at line %d); give each key once", path, lineno, key,
             first_line[row]);
        return -1;
    }
    if (first_line[row] == 0)
        first_line[row] = lineno;
    return 0;
}

/* Appends the lines of the config file at path to a as "--key=value" arguments; 0 or -1. */
static int config_read(const spw_optset *set, const char *path, argvec *a)
{
    FILE *f = fopen(path, "re");
    struct stat st;
    if (f == NULL || fstat(fileno(f), &st) != 0) {
        fail("--config %s: %s", path, spw_strerror(-errno));
        if (f != NULL)
            fclose(f);
        return -1;
    }
    if (!S_ISREG(st.st_mode)) {
        fail("--config %s: %s", path,
             S_ISDIR(st.st_mode) ? "is a directory, not a config file" : "not a regular file");
        fclose(f);
        return -1;
    }
    int *first_line = spw_calloc(SPW_MOD_BASE, set->nopts, sizeof *first_line);
    char *line = NULL;
    size_t cap = 0;
    ssize_t got;
    int lineno = 0, rc = 0;
    errno = 0;
    while (rc == 0 && (got = getline(&line, &cap, f)) >= 0) {
        lineno++;
        size_t ll = (size_t)got;
        if (ll > 0 && line[ll - 1] == '\n')
            line[--ll] = '\0';
        if (ll > LINE_MAX_BYTES) {
            fail("%s:%d: line longer than %d bytes", path, lineno, LINE_MAX_BYTES);
            rc = -1;
            break;
        }
        char *nul = memchr(line, '\0', ll);
        if (nul != NULL) {
            /* Name the key when one comes before the NUL byte. */
            char *eq = strchr(line, '=');
            char *key = eq != NULL ? (*eq = '\0', trim(line)) : NULL;
            if (key != NULL && *key != '\0' && strchr(key, '#') == NULL)
                fail("%s:%d: %s: a NUL byte in the line (byte %zu)", path, lineno, key,
                     (size_t)(nul - line) + 1);
            else
                fail("%s:%d: a NUL byte in the line (byte %zu)", path, lineno,
                     (size_t)(nul - line) + 1);
            rc = -1;
            break;
        }
        char *hash = strchr(line, '#');
        if (hash != NULL)
            *hash = '\0';
        char *s = trim(line);
        if (*s == '\0')
            continue;
        char *eq = strchr(s, '='), *key = s, *val = NULL;
        if (eq != NULL) {
            *eq = '\0';
            key = trim(s);
            val = trim(eq + 1);
            if (*key == '\0') {
                fail("%s:%d: missing key before '='", path, lineno);
                rc = -1;
                break;
            }
        }
        if (config_line(set, path, lineno, key, val, first_line) != 0) {
            rc = -1;
            break;
        }
        size_t alen = strlen(key) + (val != NULL ? strlen(val) : 0) + 4;
        char *arg = spw_malloc(SPW_MOD_BASE, alen);
        snprintf(arg, alen, val != NULL ? "--%s=%s" : "--%s", key, val != NULL ? val : "");
        char where[600];
        snprintf(where, sizeof where, "%s:%d", path, lineno);
        vec_push(a, arg, where);
        spw_free(arg);
    }
    if (rc == 0 && ferror(f)) {
        fail("--config %s: %s", path, spw_strerror(-errno));
        rc = -1;
    }
    free(line); /* getline's buffer comes from libc's malloc */
    spw_free(first_line);
    fclose(f);
    return rc;
}

/* ------------------------------------------------------------------ parse */

static void origins_set(char **org, int n)
{
    if (g_origin != NULL) {
        for (int i = 0; i < g_norigin; i++)
            spw_free(g_origin[i]);
        spw_free(g_origin);
    }
    g_origin = org;
    g_norigin = n;
}

void spw_opts_free(spw_opts *out)
{
    for (size_t i = 0; out->val != NULL && i < out->nval; i++)
        spw_free(out->val[i].list);
    spw_free(out->val);
    for (int i = 0; i < out->argc; i++)
        spw_free(out->argv[i]);
    spw_free(out->argv);
    origins_set(NULL, 0);
    memset(out, 0, sizeof *out);
}

/* Finds --config PATH / --config=PATH on the command line (the last one wins). */
static const char *config_path(int argc, char **argv, bool operands)
{
    const char *path = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--") == 0 || (operands && argv[i][0] != '-'))
            break;
        if (strcmp(argv[i], "--config") == 0 && i + 1 < argc)
            path = argv[++i];
        else if (strncmp(argv[i], "--config=", 9) == 0)
            path = argv[i] + 9;
    }
    return path;
}

/* Stores one given value of row r; 0 or -1 (said). */
static int take(const spw_optset *set, size_t r, int at, const char *text, spw_opt_val *v)
{
    const spw_opt *o = &set->opts[r];
    char why[512];
    spw_opt_val nv = *v;
    if (spw_opt_value(o, text != NULL ? text : "", &nv, why, sizeof why) != 0) {
        spw_opt_error(at, o->name, "%s", why);
        return -1;
    }
    if (o->flags & SPW_OPT_REPEAT) {
        if (nv.n >= o->hi) {
            spw_opt_error(at, o->name, "at most %" PRId64 " %s", o->hi,
                          o->unit != NULL ? o->unit : "values");
            return -1;
        }
        if (nv.list == NULL)
            nv.list = spw_calloc(SPW_MOD_BASE, (size_t)o->hi, sizeof *nv.list);
        nv.list[nv.n++] = nv.str;
    }
    nv.set = true;
    nv.at = at;
    *v = nv;
    return 0;
}

static int opts_parse(const spw_optset *set, int argc, char **argv, spw_opts *out)
{
    memset(out, 0, sizeof *out);
    const char *base = strrchr(argv[0], '/');
    snprintf(g_prog, sizeof g_prog, "%s", base != NULL ? base + 1 : argv[0]);
    bool operands = set->flags & SPW_OPTSET_OPERANDS;
    argvec a = {0};
    vec_push(&a, argv[0], NULL);
    const char *path = set->flags & SPW_OPTSET_CONFIG ? config_path(argc, argv, operands) : NULL;
    int rc = path != NULL ? config_read(set, path, &a) : 0;
    for (int i = 1; i < argc; i++)
        vec_push(&a, argv[i], NULL);
    out->argc = a.n;
    out->argv = a.v;
    out->operand = a.n;
    origins_set(a.org, a.n);
    out->val = spw_calloc(SPW_MOD_BASE, set->nopts, sizeof *out->val);
    out->nval = set->nopts;
    for (size_t r = 0; r < set->nopts; r++) {
        const spw_opt *o = &set->opts[r];
        char why[256];
        out->val[r].at = -1;
        /* A default the table cannot parse is the table's bug, not the user's. */
        if (o->def != NULL)
            SPW_ASSERT(spw_opt_value(o, o->def, &out->val[r], why, sizeof why) == 0);
    }
    if (rc != 0)
        return -1;

    struct option *lo = spw_calloc(SPW_MOD_BASE, set->nopts + 1, sizeof *lo);
    char shorts[64] = "+:";
    size_t ns = 2;
    for (size_t r = 0; r < set->nopts; r++) {
        const spw_opt *o = &set->opts[r];
        lo[r].name = o->name;
        lo[r].has_arg = o->type == SPW_OPT_FLAG ? no_argument : required_argument;
        lo[r].val = 256 + (int)r;
        if (o->letter != 0 && ns + 3 < sizeof shorts) {
            shorts[ns++] = o->letter;
            if (o->type != SPW_OPT_FLAG)
                shorts[ns++] = ':';
            shorts[ns] = '\0';
        }
    }
    int c, result = 0;
    opterr = 0; /* our messages name the config line */
    optind = 0; /* start afresh (glibc) */
    for (int at = 1; result == 0 && (c = getopt_long(a.n, a.v, shorts, lo, NULL)) != -1;
         at = optind) {
        size_t r = set->nopts;
        if (c >= 256)
            r = (size_t)(c - 256);
        else
            for (size_t k = 0; k < set->nopts; k++)
                if (set->opts[k].letter != 0 && set->opts[k].letter == c)
                    r = k;
        if (c == ':') {
            fail("%s needs a value", a.v[at]);
            result = -1;
        } else if (r == set->nopts) {
            fail("unknown option '%s'; see %s --help", a.v[at], g_prog);
            result = -1;
        } else if (strcmp(set->opts[r].name, "help") == 0) {
            spw_opts_usage(set, stdout);
            result = 1;
        } else if (strcmp(set->opts[r].name, "version") == 0) {
            printf("%s %s\n", g_prog, set->version != NULL ? set->version : "");
            result = 1;
        } else if (take(set, r, at, optarg, &out->val[r]) != 0) {
            result = -1;
        }
    }
    spw_free(lo);
    if (result != 0)
        return result;
    if (operands) {
        out->operand = optind;
    } else if (optind < a.n) {
        fail("unexpected argument '%s'", a.v[optind]);
        return -1;
    }
    return 0;
}

int spw_opts_parse(const spw_optset *set, int argc, char **argv, spw_opts *out)
{
    int rc = opts_parse(set, argc, argv, out);
    if (rc != 0)
        spw_opts_free(out);
    return rc;
}

/* ------------------------------------------------------------------- help */

static const char *arg_name(const spw_opt *o)
{
    if (o->arg != NULL)
        return o->arg;
    switch (o->type) {
    case SPW_OPT_FLAG:
        return "";
    case SPW_OPT_STRING:
        return "TEXT";
    case SPW_OPT_PATH:
        return "PATH";
    case SPW_OPT_ADDR:
        return o->flags & SPW_OPT_PORT_OPTIONAL ? "HOST[:PORT]" : "HOST:PORT";
    case SPW_OPT_COUNT:
    case SPW_OPT_INT:
        return "N";
    case SPW_OPT_MS:
        return "MS";
    case SPW_OPT_SIZE:
        return "SIZE";
    case SPW_OPT_CAPACITY:
        return "SIZE|N%";
    case SPW_OPT_FRACTION:
        return "F";
    case SPW_OPT_ENUM:
        return o->choices;
    }
    return "VALUE";
}

/* Writes head, then text from column 28 (one space further when head is wider), wrapped at 100
 * columns with continuation lines from column 28. */
static void help_line(FILE *f, const char *head, const char *text)
{
    enum { INDENT = 28, WIDTH = 100 };
    int col = fprintf(f, "%s", head);
    bool first = true;
    for (const char *p = text; *p != '\0';) {
        int w = (int)strcspn(p, " ");
        int gap = first ? (col < INDENT ? INDENT - col : 2) : 1;
        if (!first && col + gap + w > WIDTH) {
            fprintf(f, "\n%*s", INDENT, "");
            col = INDENT;
            gap = 0;
        }
        col += fprintf(f, "%*s%.*s", gap, "", w, p);
        first = false;
        p += w;
        while (*p == ' ')
            p++;
    }
    fputc('\n', f);
}

void spw_opts_usage(const spw_optset *set, FILE *f)
{
    fputs(set->usage, f);
    for (size_t r = 0; r < set->nopts; r++) {
        const spw_opt *o = &set->opts[r];
        char head[160], text[600], letter[8] = "";
        const char *an = arg_name(o), *def = o->def != NULL ? o->def : o->def_doc;
        if (o->letter != 0)
            snprintf(letter, sizeof letter, "-%c, ", o->letter);
        snprintf(head, sizeof head, "  %s--%s%s%s%s%s", letter, o->name, *an ? " " : "", an,
                 o->word != NULL ? "|" : "", o->word != NULL ? o->word : "");
        snprintf(text, sizeof text, "%s%s%s%s", o->help, def != NULL ? " (" : "",
                 def != NULL ? def : "", def != NULL ? ")" : "");
        help_line(f, head, text);
    }
}
