/*
 * Helpers the daemons share: readiness reporting, systemd notification, the descriptor limit
 * and capacities. Their options and config files: spillway/options.h.
 */
#ifndef SPW_DAEMON_H
#define SPW_DAEMON_H

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

/** Raises the soft RLIMIT_NOFILE to the hard limit (a daemon's connections and files are
 * bounded by --max-connections, not by a low default soft limit).
 * @return the soft limit now in force. */
uint64_t spw_raise_nofile(void);

/** Blocks the signals of sigs (0-terminated) in the calling thread, so in every thread it starts
 * after, and returns a non-blocking, close-on-exec signalfd that reports them, or -errno. A
 * daemon calls it before its first thread starts and reads its stop and reload signals from the
 * descriptor on its loop: no handler runs asynchronously (one that interrupts a sanitizer's
 * runtime inside its own locks can hang it), and a signal sent while the daemon starts waits
 * for the loop. Children spawned through libuv start with an empty signal mask. */
int spw_signalfd(const int *sigs);
/** The next signal pending on a descriptor of spw_signalfd, or 0 when none is. */
int spw_signalfd_next(int fd);

/** Parses "N%" of physical memory or a byte size ("64M"). @return 0 or SPW_EINVAL. */
int spw_capacity_parse(const char *s, uint64_t *out);

#ifdef __cplusplus
}
#endif
#endif
