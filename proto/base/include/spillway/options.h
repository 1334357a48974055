/*
 * Option tables: each program (spillway-scheduler, spillway-worker, spillway-ctl) declares its
 * options once, as an array of spw_opt rows, and that table drives getopt_long, --help, the
 * config file's keys and the checking of every value, so that a value from a config line and
 * the same value on the command line are parsed, range-checked and refused alike. The man
 * pages and the example configs are tested against the tables (tests/unit/test_options.c).
 */
#ifndef SPW_OPTIONS_H
#define SPW_OPTIONS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/** What an option's value is; it picks the parser and the words of a refusal. */
typedef enum spw_opt_type {
    SPW_OPT_FLAG,     /* no value (--json, --help) */
    SPW_OPT_STRING,   /* UTF-8 text of lo..hi characters (hi 0: any length) */
    SPW_OPT_PATH,     /* a file or directory name, not checked here */
    SPW_OPT_ADDR,     /* HOST:PORT, or HOST alone with SPW_OPT_PORT_OPTIONAL; at most hi chars */
    SPW_OPT_COUNT,    /* a whole number lo..hi */
    SPW_OPT_MS,       /* a duration: whole milliseconds lo..hi */
    SPW_OPT_INT,      /* a whole number that may be negative, lo..hi (as int64_t) */
    SPW_OPT_SIZE,     /* bytes with an optional K/M/G/T suffix, lo..hi */
    SPW_OPT_CAPACITY, /* a size lo..hi, or N% of physical memory */
    SPW_OPT_FRACTION, /* a number in (0, 1] */
    SPW_OPT_ENUM,     /* one of the words in choices ("auto|token"); u is the word's index */
} spw_opt_type;

/* spw_opt.flags */
#define SPW_OPT_CONF 0x1u          /* may be a key of the config file */
#define SPW_OPT_REPEAT 0x2u        /* may be given more than once; every value is kept */
#define SPW_OPT_ZERO_OK 0x4u       /* 0 is allowed besides lo..hi ("0 = none") */
#define SPW_OPT_PORT_OPTIONAL 0x8u /* ADDR: HOST alone is fine */
#define SPW_OPT_UNIX_OK 0x10u      /* ADDR: "unix:NAME" (a Unix socket; @NAME: abstract) too */

/** One option. A row with a literal default (def) is parsed from it when not given; one whose
 * default is computed at run time has def NULL and says what it is in def_doc. */
typedef struct spw_opt {
    const char *name; /* the long name without dashes: "--slots", key "slots" */
    char letter;      /* a short option (-h), or 0 */
    spw_opt_type type;
    unsigned flags;      /* SPW_OPT_* */
    int64_t lo, hi;      /* range of numbers and sizes (inclusive); lengths of strings; most
                            values of a SPW_OPT_REPEAT option */
    const char *def;     /* the default as the man page and example config write it, or NULL */
    const char *def_doc; /* the default in words when def is NULL ("the number of cores") */
    const char *arg;     /* the value's name in --help ("HOST:PORT"); NULL: from the type */
    const char *help;    /* one line of --help, without the default */
    const char *choices; /* ENUM: the words, '|'-separated */
    const char *word;    /* a word allowed besides the type's values ("none"), or NULL */
    const char *unit;    /* what a number counts ("a task count"), named in a refusal */
} spw_opt;

/* Rows every daemon has (config, log-level) and every program (version, help). */
#define SPW_OPT_ROW_CONFIG                                                                         \
    {                                                                                              \
        .name = "config", .type = SPW_OPT_PATH,                                                    \
        .help = "file of key = value lines, one per option"                                        \
    }
#define SPW_OPT_ROW_LOG_LEVEL                                                                      \
    {                                                                                              \
        .name = "log-level", .type = SPW_OPT_ENUM, .flags = SPW_OPT_CONF, .def = "notice",         \
        .arg = "LEVEL", .help = "err|warn|notice|info|debug",                                      \
        .choices = "err|warn|notice|info|debug", .unit = "level"                                   \
    }
#define SPW_OPT_ROW_VERSION                                                                        \
    {                                                                                              \
        .name = "version", .type = SPW_OPT_FLAG, .help = "print the version"                       \
    }
#define SPW_OPT_ROW_HELP                                                                           \
    {                                                                                              \
        .name = "help", .letter = 'h', .type = SPW_OPT_FLAG, .help = "print this help"             \
    }

/* Encryption between hosts, for every program that connects (flags: SPW_OPT_CONF or 0). */
#define SPW_OPT_ROW_ENCRYPT(fl)                                                                    \
    {                                                                                              \
        .name = "encrypt", .type = SPW_OPT_ENUM, .flags = (fl), .def = "no",                       \
        .help = "TLS on TCP connections to and from other hosts, keyed by the cluster secret "   \
                "(needs --secret-file): yes = encrypt ours, accept plaintext peers (logged); "    \
                "required = refuse them too",                                                      \
        .choices = "no|yes|required", .unit = "mode"                                               \
    }
#define SPW_OPT_ROW_ENCRYPT_LOCAL(fl)                                                              \
    {                                                                                              \
        .name = "encrypt-local", .type = SPW_OPT_FLAG, .flags = (fl),                              \
        .help = "with --encrypt, loopback TCP (127.0.0.1, ::1) too"                                \
    }
/* Mutual TLS with certificates (all three, with --encrypt): replaces the secret's TLS key. */
#define SPW_OPT_ROW_TLS_CERT(fl)                                                                   \
    {                                                                                              \
        .name = "tls-cert", .type = SPW_OPT_PATH, .flags = (fl),                                   \
        .help = "with --encrypt: this end's certificate (PEM, chain allowed); with --tls-key and " \
                "--tls-ca, TLS authenticates by certificates instead of the secret's key"          \
    }
#define SPW_OPT_ROW_TLS_KEY(fl)                                                                    \
    {                                                                                              \
        .name = "tls-key", .type = SPW_OPT_PATH, .flags = (fl),                                    \
        .help = "the private key of --tls-cert (PEM)"                                              \
    }
#define SPW_OPT_ROW_TLS_CA(fl)                                                                     \
    {                                                                                              \
        .name = "tls-ca", .type = SPW_OPT_PATH, .flags = (fl),                                     \
        .help = "CA certificates (PEM) the peers' certificates must be signed by; a server's "     \
                "must also name the host it is reached by"                                         \
    }

/* spw_optset.flags */
#define SPW_OPTSET_OPERANDS 0x1u /* stop at the first word that is not an option (a command) */
#define SPW_OPTSET_CONFIG 0x2u   /* --config FILE is read (the table must have a "config" row) */

/** A program's options: its name, the text --help prints first, and its table. */
typedef struct spw_optset {
    const char *prog;    /* "spillway-worker" */
    const char *usage;   /* printed before the options by --help ("usage: ...\n") */
    const spw_opt *opts; /* rows, indexed by the program's own enum */
    size_t nopts;
    const char *version; /* printed by --version after prog */
    unsigned flags;      /* SPW_OPTSET_* */
} spw_optset;

/** The value of one option after parsing: the default when not given. */
typedef struct spw_opt_val {
    bool set;          /* given on the command line or in the config file */
    int at;            /* the argument's index in spw_opts.argv, for spw_opt_error; -1 if unset */
    const char *str;   /* the text as given (or the default), valid until spw_opts_free */
    uint64_t u;        /* COUNT, MS, SIZE, CAPACITY; ENUM: the choice's index; FLAG: 1 if set */
    int64_t i;         /* INT */
    double f;          /* FRACTION */
    const char **list; /* REPEAT: every value given, in order */
    int n;             /* REPEAT: how many */
} spw_opt_val;

/** A parsed command line: the argument vector it was read from (config lines first, then the
 * command line) and one value per row of the table. */
typedef struct spw_opts {
    int argc;
    char **argv;
    spw_opt_val *val; /* one value per row of the table, in its order */
    size_t nval;
    int operand; /* SPW_OPTSET_OPERANDS: index in argv of the first operand (argc: none) */
} spw_opts;

/** Parses argc/argv (and the --config file, with SPW_OPTSET_CONFIG) against set. Every value
 * is checked by its row's type and range; a bad one is refused with one line on stderr naming
 * where it came from: "PROG: FILE:LINE: KEY: ..." for a config line, "PROG: --KEY: ..." for
 * the command line. The config file is also refused, naming FILE:LINE and the key, for an
 * unknown key, a key given twice (unless SPW_OPT_REPEAT), a NUL byte, invalid UTF-8, or a line
 * that is not "key = value". --help and --version print and return 1.
 * @param[out] out filled on 0; free it with spw_opts_free. Zeroed otherwise (freeing it then is
 * a no-op).
 * @return 0 to go on, 1 when --help or --version was answered (exit status 0), or -1 when
 * something was refused (the message printed; exit status 2). */
int spw_opts_parse(const spw_optset *set, int argc, char **argv, spw_opts *out);
/** Frees what spw_opts_parse made; the strings of out->val are gone after it. */
void spw_opts_free(spw_opts *out);

/** Parses one value as row o would (its type, range and word); on a bad one writes why
 * ("wants a whole number 1..4096, got '0'") into why. @return 0 or -1. */
int spw_opt_value(const spw_opt *o, const char *text, spw_opt_val *v, char *why, size_t whylen);

/** Prints --help for set to f: set->usage, then each option with its value, help and default. */
void spw_opts_usage(const spw_optset *set, FILE *f);

/** "FILE:LINE" of argument idx of the vector the last spw_opts_parse read, or NULL if it came
 * from the command line. */
const char *spw_config_origin(int idx);
/** Reports a bad option on stderr: "PROG: FILE:LINE: KEY: MESSAGE" for an argument read from
 * the config file, "PROG: --KEY: MESSAGE" for one from the command line. */
void spw_opt_error(int idx, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/** Reports a bad path: "PROG: FILE:LINE: KEY PATH: MESSAGE" or "PROG: --KEY PATH: MESSAGE". */
void spw_opt_path_error(int idx, const char *key, const char *path, const char *msg);
/** Checks --tls-cert, --tls-key and --tls-ca (v[0..2], rows SPW_OPT_ROW_TLS_*): all three or
 * none, only with encrypt (an --encrypt choice, 0 = no), each file readable. Reports the first
 * problem with spw_opt_error (FILE:LINE for a config line). @return 0 or SPW_EINVAL. */
int spw_opt_tls_check(const spw_opt_val v[3], uint64_t encrypt);

#ifdef __cplusplus
}
#endif
#endif
