/*
 * Helpers the daemons and the CLI share: readiness reporting, systemd notification and
 * config files that feed the same option parser as the command line.
 */
#ifndef SPW_DAEMON_H
#define SPW_DAEMON_H

#include <getopt.h>
#include <stddef.h>
#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/** Reports that a daemon is ready: writes "host:port\n" to port_file (atomically, if given),
 * prints "READY host:port" on stdout unless stdout is the journal (JOURNAL_STREAM), and tells
 * systemd (READY=1) when NOTIFY_SOCKET is set.
 * @return 0 or the error writing port_file. */
int spw_daemon_ready(const char *addr, const char *port_file, const char *status);
/** Sends a raw sd_notify state string ("STOPPING=1"); a no-op outside systemd. */
void spw_sd_notify(const char *state);

/** Builds an argument vector from a config file and the command line: the file's
 * "key = value" lines become "--key=value" (a bare "key", for an option that takes no value,
 * becomes "--key"), '#' starts a comment, and the command line comes after so it wins. Looks
 * for --config PATH / --config=PATH in argv. Each line is checked against longopts (NULL: not
 * checked): an unknown key, a bare word for a key that needs a value, a value for one that takes
 * none, a nested "config", a line that is not "key = value", an unreadable file or a directory
 * are refused with one line on stderr naming FILE:LINE and the key. Remembers where each
 * argument came from, for spw_opt_error. The result is heap allocated; free it with
 * spw_config_free.
 * @return 0, or SPW_EINVAL / -errno (the message printed). */
int spw_config_args(int argc, char **argv, const struct option *longopts, int *out_argc,
                    char ***out_argv);
void spw_config_free(int argc, char **argv);
/** "FILE:LINE" of argument idx of the vector spw_config_args built, or NULL if it came from
 * the command line. */
const char *spw_config_origin(int idx);
/** Reports a bad path: "PROG: FILE:LINE: KEY PATH: MESSAGE" or "PROG: --KEY PATH: MESSAGE". */
void spw_opt_path_error(int idx, const char *key, const char *path, const char *msg);
/** Reports a bad option on stderr: "PROG: FILE:LINE: KEY: MESSAGE" for an argument read from
 * the config file, "PROG: --KEY: MESSAGE" for one from the command line. */
void spw_opt_error(int idx, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/** Checks an address option's value: HOST:PORT (HOST an IPv4 address, a host name or an IPv6
 * address in brackets), or HOST alone where port_optional. On a bad one reports it as
 * spw_opt_error does (FILE:LINE for a config line). @return 0, or -1 when reported. */
int spw_opt_addr(int idx, const char *key, const char *value, bool port_optional);

/** Raises the soft RLIMIT_NOFILE to the hard limit (a daemon's connections and files are
 * bounded by --max-connections, not by a low default soft limit).
 * @return the soft limit now in force. */
uint64_t spw_raise_nofile(void);

/** Parses "N%" of physical memory or a byte size ("64M"). @return 0 or SPW_EINVAL. */
int spw_capacity_parse(const char *s, uint64_t *out);

#ifdef __cplusplus
}
#endif
#endif
