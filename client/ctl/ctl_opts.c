/*
 * spillway-ctl's global options: names, value types, ranges, defaults and --help lines, with
 * the commands and their own options as the text --help prints first.
 */
#include "ctl_opts.h"

#include <limits.h>

static const spw_opt rows[COPT_COUNT] = {
    [COPT_SCHEDULER] = {.name = "scheduler",
                        .type = SPW_OPT_ADDR,
                        .flags = SPW_OPT_UNIX_OK,
                        .def_doc = "$SPILLWAY_SCHEDULER, else 127.0.0.1:7400",
                        .help = "the scheduler"},
    [COPT_SECRET_FILE] = {.name = "secret-file",
                          .type = SPW_OPT_PATH,
                          .def_doc = "$SPILLWAY_SECRET_FILE, else /etc/spillway/secret when it "
                                     "exists and is readable",
                          .help = "cluster secret"},
    [COPT_JSON] = {.name = "json",
                   .type = SPW_OPT_FLAG,
                   .help = "one JSON document instead of tables"},
    [COPT_TIMEOUT] = {.name = "timeout",
                      .type = SPW_OPT_MS,
                      .lo = 1,
                      .hi = INT_MAX,
                      .def = "10000",
                      .help = "give up after this long"},
    [COPT_ENCRYPT] = SPW_OPT_ROW_ENCRYPT(0),
    [COPT_ENCRYPT_LOCAL] = SPW_OPT_ROW_ENCRYPT_LOCAL(0),
    [COPT_TLS_CERT] = SPW_OPT_ROW_TLS_CERT(0),
    [COPT_TLS_KEY] = SPW_OPT_ROW_TLS_KEY(0),
    [COPT_TLS_CA] = SPW_OPT_ROW_TLS_CA(0),
    [COPT_VERSION] = SPW_OPT_ROW_VERSION,
    [COPT_HELP] = SPW_OPT_ROW_HELP,
};

const spw_optset ctl_optset = {
    .prog = "spillway-ctl",
    .usage =
        "usage: spillway-ctl [options] COMMAND\n"
        "commands:\n"
        "  status                    workers, slots, tasks by state, clients\n"
        "  memory                    every object: size, where, references by kind and who\n"
        "                            holds them, owner, call site, age; then per-node figures\n"
        "  jobs                      graphs: client, call site, tasks by state, bytes in\n"
        "                            flight against the graph's cap, age\n"
        "  plugins                   uploaded plugins: name, hash, size, state, functions,\n"
        "                            references from clients and graphs, copies\n"
        "  drain WORKER              the worker (id, name or address) takes no more tasks and\n"
        "                            its objects that have no other copy are copied to other\n"
        "                            workers; waits until it is drained (--timeout, default an\n"
        "                            hour); the worker stays up\n"
        "  http-token                the token the scheduler's HTTP endpoint wants when it\n"
        "                            listens beyond localhost (needs --secret-file)\n"
        "memory options (after the command):\n"
        "  --group-by node|owner|ref-type|call-site   sizes and counts per group\n"
        "  --sort-by size|age|id     order of the listing (size)\n"
        "  --stats-only              per-node figures and totals only\n"
        "  --limit N                 list at most N objects (totals count all)\n"
        "  --watch SECONDS           refresh every SECONDS until interrupted\n"
        "jobs options (after the command):\n"
        "  --watch                   refresh: a progress bar per graph on a terminal, one line\n"
        "                            per graph otherwise, one JSON document per line with --json\n"
        "  --interval MS             between refreshes (1000)\n"
        "  --count N                 stop after N refreshes (0 = until interrupted)\n"
        "options:\n",
    .opts = rows,
    .nopts = COPT_COUNT,
    .version = SPW_VERSION,
    .flags = SPW_OPTSET_OPERANDS,
};
