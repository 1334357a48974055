/*
 * spillway-ctl's global options (those before the command): one row each in ctl_optset
 * (ctl_opts.c), indexed by this enum. The commands' own options are parsed in ctl.c.
 */
#ifndef SPW_CTL_OPTS_H
#define SPW_CTL_OPTS_H

#include "spillway/options.h"

enum ctl_opt {
    COPT_SCHEDULER,
    COPT_SECRET_FILE,
    COPT_JSON,
    COPT_TIMEOUT,
    COPT_ENCRYPT,
    COPT_ENCRYPT_LOCAL,
    COPT_TLS_CERT,
    COPT_TLS_KEY,
    COPT_TLS_CA,
    COPT_VERSION,
    COPT_HELP,
    COPT_COUNT
};

extern const spw_optset ctl_optset;

#endif
