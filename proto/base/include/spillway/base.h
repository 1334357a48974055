/*
 * spw_base: what every spillway module shares. Object ids, logging, the control-plane heap
 * with per-module counters, monotonic time, always-on assertions, a growable byte buffer and
 * small parsing helpers for sizes and addresses.
 */
#ifndef SPW_BASE_H
#define SPW_BASE_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <stdbool.h>

#include "spillway/error.h"

#ifdef __cplusplus
extern "C" {
#endif

/* -------------------------------------------------------------- errors */

/** Message for an error code. Never NULL; unknown codes get a generic text.
 * @param[in] err a spillway error code or -errno.
 * @return a static string. */
const char *spw_strerror(int err);

/** Symbolic name of an error code ("SPW_ENOOBJ", "SPW_ENOMEM", "SPW_OK").
 * Never NULL; unknown codes return "SPW_E?" (with the numeric value written by the caller).
 * @return a static string. */
const char *spw_err_name(int err);

/* ---------------------------------------------------------------- ids */

/** A 128-bit object or task id. Ids are printed as 32 lower-case hex digits (hi then lo),
 * and in short form as the first 12 of them. */
typedef struct spw_id {
    uint64_t hi;
    uint64_t lo;
} spw_id;

#define SPW_ID_HEX_LEN 32
#define SPW_ID_SHORT_LEN 12

static inline bool spw_id_eq(spw_id a, spw_id b)
{
    return a.hi == b.hi && a.lo == b.lo;
}
static inline bool spw_id_is_nil(spw_id a)
{
    return a.hi == 0 && a.lo == 0;
}
/** Writes the id as 32 hex digits plus NUL into out (33 bytes). Returns out. */
char *spw_id_hex(spw_id id, char out[SPW_ID_HEX_LEN + 1]);
/** Parses 32 hex digits. @return 0, or SPW_EINVAL if s is not exactly 32 hex digits. */
int spw_id_parse(const char *s, spw_id *out);
/** Big-endian 16-byte wire form. */
void spw_id_to_bytes(spw_id id, uint8_t out[16]);
spw_id spw_id_from_bytes(const uint8_t in[16]);
/* A task's outputs. A task may declare up to SPW_TASK_OUTPUTS_MAX outputs; output i's object id
 * is the task's id with i in the low SPW_OUT_INDEX_BITS bits of lo, so output 0 is the task's id
 * itself (a one-output task is exactly what it always was) and any daemon maps an output's id back
 * to its task and index with no table. Hence a task that declares more than one output must have
 * an id whose low SPW_OUT_INDEX_BITS bits of lo are zero (libspillway's ids all do); an object id
 * is taken for an output only where the directory says so (a put's id has the same shape). */
#define SPW_OUT_INDEX_BITS 12
#define SPW_TASK_OUTPUTS_MAX (1u << SPW_OUT_INDEX_BITS)
#define SPW_OUT_INDEX_MASK ((uint64_t)SPW_TASK_OUTPUTS_MAX - 1)
/** Output i (< SPW_TASK_OUTPUTS_MAX) of task id `task`. */
static inline spw_id spw_id_output(spw_id task, uint32_t i)
{
    return (spw_id){task.hi, task.lo | ((uint64_t)i & SPW_OUT_INDEX_MASK)};
}
/** The index of an output id among its task's outputs. */
static inline uint32_t spw_id_output_index(spw_id id)
{
    return (uint32_t)(id.lo & SPW_OUT_INDEX_MASK);
}
/** The id of the task whose output id is. */
static inline spw_id spw_id_output_task(spw_id id)
{
    return (spw_id){id.hi, id.lo & ~SPW_OUT_INDEX_MASK};
}

/** A well-mixed 64-bit hash of the id, for hash tables. */
static inline uint64_t spw_id_hash(spw_id id)
{
    uint64_t x = id.hi ^ (id.lo * 0x9E3779B97F4A7C15ULL);
    x ^= x >> 31;
    x *= 0xBF58476D1CE4E5B9ULL;
    x ^= x >> 29;
    return x;
}

/** Reports an invariant that an in-process checker (sched__check, wrk__check) found broken: the
 * checker's name, the line of the check in its file, the message and the id concerned (nil:
 * none) go to stderr, then the process aborts. Only Debug and sanitizer builds run checkers. */
__attribute__((noreturn, format(printf, 4, 5))) void
spw_invariant_failed(const char *checker, int line, spw_id id, const char *fmt, ...);
/** A checker's assertion: aborts through spw_invariant_failed when cond is false. */
#define SPW_INVARIANT(checker, cond, id, ...)                                                      \
    do {                                                                                           \
        if (!(cond))                                                                               \
            spw_invariant_failed((checker), __LINE__, (id), __VA_ARGS__);                          \
    } while (0)

/* -------------------------------------------------------------- logging */

enum spw_log_level {
    SPW_LOG_ERR = 3,
    SPW_LOG_WARN = 4,
    SPW_LOG_NOTICE = 5,
    SPW_LOG_INFO = 6,
    SPW_LOG_DEBUG = 7,
};

extern int spw_log_level; /* messages above this level are not even formatted */

/** For programs (daemons, spillway-ctl): sets the program name printed on each line and the
 * level; every message goes to stderr as "<N>progname[pid]: text". When stderr is the journal
 * (JOURNAL_STREAM names it), lines are "<N>text": journald adds the name and pid itself. A
 * child process (an executor) started by such a program keeps its own "name[pid]: " so its
 * lines stay told apart from its parent's in the parent's stream.
 * Without a call (the library in someone's program), the level is SPW_LOG_WARN, each distinct
 * message is written once per process, to the sink set with spw_log_set_sink or else to stderr
 * as "libspillway: warning: text". */
void spw_log_init(const char *progname, int level);
/** Where the library's messages go: fn(level, text) (NULL: stderr), those at or below level,
 * every one (no once-only filter). Not for programs that called spw_log_init. */
typedef void (*spw_log_sink_fn)(int level, const char *msg);
void spw_log_set_sink(spw_log_sink_fn fn, int level);
/** True when fd is the systemd journal's stream for this service (JOURNAL_STREAM). */
bool spw_fd_is_journal(int fd);
/** Parses "err|warn|notice|info|debug". @return the level, or SPW_EINVAL. */
int spw_log_level_parse(const char *s);
void spw_log_write(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/** Logs one line (see spw_log_init for where it goes). The level is checked before the
 * arguments are evaluated. */
#define spw_log(level, ...)                                                                        \
    do {                                                                                           \
        if ((level) <= spw_log_level)                                                              \
            spw_log_write((level), __VA_ARGS__);                                                   \
    } while (0)

/* ----------------------------------------------------------- assertions */

void spw_panic_at(const char *file, int line, const char *fmt, ...)
    __attribute__((noreturn, format(printf, 3, 4)));
#define SPW_ASSERT(cond)                                                                           \
    do {                                                                                           \
        if (!(cond))                                                                               \
            spw_panic_at(__FILE__, __LINE__, "assertion failed: %s", #cond);                       \
    } while (0)
#define SPW_PANIC(...) spw_panic_at(__FILE__, __LINE__, __VA_ARGS__)

/* ----------------------------------------------------- heap with counters */

/** Modules that own control-plane heap; each has a byte counter. */
enum spw_mod {
    SPW_MOD_BASE,
    SPW_MOD_PROTO,
    SPW_MOD_SCHED,
    SPW_MOD_WORKER,
    SPW_MOD_OBJSTORE,
    SPW_MOD_CLIENT,
    SPW_MOD_COUNT
};

/** Allocates n bytes for module mod, aborting with a message on OOM. For small fixed sizes. */
void *spw_malloc(enum spw_mod mod, size_t n);
void *spw_calloc(enum spw_mod mod, size_t count, size_t n);
/** Resizes; p may be NULL. Aborts on OOM. */
void *spw_realloc(enum spw_mod mod, void *p, size_t n);
/** Like spw_malloc but returns NULL on failure: for sizes that come from outside. */
void *spw_try_malloc(enum spw_mod mod, size_t n);
void *spw_try_realloc(enum spw_mod mod, void *p, size_t n);
/** Frees p (NULL is a no-op), preserving errno. */
void spw_free(void *p);
char *spw_strdup(enum spw_mod mod, const char *s);
char *spw_strndup(enum spw_mod mod, const char *s, size_t n);
/** Bytes currently allocated by a module, or by all when mod == SPW_MOD_COUNT. */
int64_t spw_heap_used(enum spw_mod mod);
/** Charges delta bytes to mod's counter for memory it holds outside spw_malloc (slab chunks). */
void spw_heap_charge(enum spw_mod mod, int64_t delta);
/** Makes the next n-th allocation through spw_try_malloc/realloc fail (test hook); 0 disables. */
void spw_heap_fail_after(uint64_t n);
/** Hands the C heap's free pages back to the kernel (malloc_trim); any thread. Does nothing
 * where a sanitizer's allocator replaces glibc's. */
void spw_heap_trim(void);

/* ----------------------------------------------------------------- time */

/** Monotonic nanoseconds. */
uint64_t spw_now_ns(void);
/** Wall-clock milliseconds since the epoch. */
uint64_t spw_wall_ms(void);

/* ---------------------------------------------------------------- buffer */

/** A growable byte buffer. The zero value is an empty buffer; spw_buf_reset keeps capacity. */
typedef struct spw_buf {
    uint8_t *data;
    size_t len;
    size_t cap;
} spw_buf;

/** Ensures room for extra more bytes. @return 0 or SPW_ENOMEM (buffer unchanged). */
int spw_buf_reserve(spw_buf *b, size_t extra);
/** Appends n bytes, aborting on OOM (control-plane data only). Inline where they fit, so that
 * the small fixed-size appends of record writers compile to a store. */
void spw_buf_append_grow(spw_buf *b, const void *p, size_t n);
static inline void spw_buf_append(spw_buf *b, const void *p, size_t n)
{
    if (n > b->cap - b->len) {
        spw_buf_append_grow(b, p, n);
        return;
    }
    if (n > 0)
        memcpy(b->data + b->len, p, n);
    b->len += n;
}
static inline void spw_buf_reset(spw_buf *b)
{
    b->len = 0;
}
void spw_buf_release(spw_buf *b);
/** Removes the first n bytes. */
void spw_buf_consume(spw_buf *b, size_t n);

/* --------------------------------------------------------------- parsing */

/** Longest host part of an address (a DNS name is at most 253 characters) plus NUL, and the
 * longest whole "HOST:PORT" / "[V6]:PORT" string plus NUL. */
#define SPW_HOST_MAX 256
#define SPW_ADDR_MAX 264

/** A parsed "HOST:PORT": host without brackets (an IPv4 dotted quad, an IPv6 address, or a
 * name to resolve), port 0..65535. */
typedef struct spw_addr {
    char host[SPW_HOST_MAX];
    int port;
    bool ipv6;    /* host is a literal IPv6 address (it was in brackets) */
    bool numeric; /* host is a literal IPv4 or IPv6 address: nothing to resolve */
} spw_addr;

/** Parses "HOST:PORT", "[IPV6]:PORT" (brackets required around IPv6) or, when default_port
 * >= 0, also "HOST" / "[IPV6]" alone, which get default_port. HOST is an IPv4 dotted quad or a
 * host name (letters, digits, '-', '.', '_'); nothing is resolved here.
 * @return 0; SPW_EINVAL for a malformed address or port; SPW_ENAMETOOLONG for a host part of
 * SPW_HOST_MAX bytes or more. */
int spw_addr_parse(const char *addr, int default_port, spw_addr *out);
/** Formats host and port as "HOST:PORT", bracketing an IPv6 host. Returns out. */
char *spw_addr_join(const char *host, int port, char *out, size_t outlen);
/** True when host is a wildcard address (0.0.0.0 or ::), which peers cannot connect to. */
bool spw_addr_host_is_wildcard(const char *host);
struct sockaddr;
/** Formats an AF_INET/AF_INET6 socket address as "IP:PORT" / "[IP]:PORT".
 * @return 0, or SPW_EINVAL for another family. */
int spw_addr_from_sockaddr(const struct sockaddr *sa, char *out, size_t outlen);
/** Parses "HOST:PORT" like spw_addr_parse (port required) and returns the host part in host
 * (64 bytes): for callers that only need a short host. "localhost" stays "localhost".
 * @return 0, SPW_EINVAL, or SPW_ENAMETOOLONG for a host of 64 bytes or more. */
int spw_addr_split(const char *addr, char host[64], int *port);
/** Parses a byte size: a number with optional K/M/G/T (binary, with or without "iB").
 * @return 0 or SPW_EINVAL. */
int spw_size_parse(const char *s, uint64_t *out);
/** Formats bytes as "12.0 MiB" into out (at least 16 bytes). Returns out. */
char *spw_size_fmt(uint64_t bytes, char *out, size_t outlen);
/** Reads a whole small file (at most max bytes) into a NUL-terminated heap string.
 * @return 0, -errno, or SPW_ELIMIT if larger than max. */
int spw_file_read(const char *path, size_t max, char **out, size_t *outlen);
/** Writes data to path atomically (temporary file + rename). */
int spw_file_write_atomic(const char *path, const void *data, size_t len);

/** A stable identity of this host's boot and network namespace: /etc/machine-id + boot id +
 * the namespace's inode, so two processes can tell whether they share memory and can reach each
 * other's abstract Unix sockets (those are per network namespace). Written into out (at most
 * outlen bytes, NUL terminated). */
void spw_host_id(char *out, size_t outlen);

/** Resident memory of a process in KiB from /proc/PID/status; field is e.g. "VmHWM", "RssAnon".
 * @return KiB, or a negative error. */
int64_t spw_proc_status_kib(int pid, const char *field);

#ifdef __cplusplus
}
#endif
#endif /* SPW_BASE_H */
