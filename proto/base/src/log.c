/*
 * Logging: one line per message, written with one write(2) so that lines of processes sharing
 * stderr do not interleave, prefixed for the journal (<level>name[pid]:) in daemons; inside a
 * client program, to its sink or once per distinct message. spw_panic_at logs and aborts.
 * Safe to call from any thread.
 */
#include "spillway/base.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Library defaults: warnings and errors only, each distinct one once (log_once). A program's
 * spw_log_init turns that into its own level with every line written. */
int spw_log_level = SPW_LOG_WARN;
static char log_name[64] = "";            /* empty: the library inside someone's program */
static bool log_journal_bare;             /* stderr is our journal stream: no "name[pid]: " */
static _Atomic(spw_log_sink_fn) log_sink; /* library only: the program's callback */
static atomic_bool log_all;               /* false: each distinct message once */
/* Hashes of the messages written so far while log_all is false (0 = empty slot). When full,
 * further messages are written every time: losing one is worse than repeating one. */
#define LOG_SEEN_SLOTS 256
static _Atomic uint64_t log_seen[LOG_SEEN_SLOTS];

bool spw_fd_is_journal(int fd)
{
    const char *js = getenv("JOURNAL_STREAM");
    if (js == NULL)
        return false;
    unsigned long long dev, ino;
    if (sscanf(js, "%llu:%llu", &dev, &ino) != 2)
        return false;
    struct stat st;
    if (fstat(fd, &st) != 0)
        return false;
    return (unsigned long long)st.st_dev == dev && (unsigned long long)st.st_ino == ino;
}

void spw_log_init(const char *progname, int level)
{
    if (progname != NULL)
        snprintf(log_name, sizeof log_name, "%s", progname);
    spw_log_level = level;
    atomic_store(&log_all, true);
    atomic_store(&log_sink, NULL);
    log_journal_bare = false;
    if (spw_fd_is_journal(STDERR_FILENO)) {
        /* journald names the stream after the unit's main process. Our children inherit the
         * stream, and the variable that says whose it is. */
        char pid[32];
        snprintf(pid, sizeof pid, "%d", (int)getpid());
        const char *owner = getenv("SPW_LOG_JOURNAL_PID");
        if (owner == NULL) {
            setenv("SPW_LOG_JOURNAL_PID", pid, 1);
            owner = pid;
        }
        log_journal_bare = strcmp(owner, pid) == 0;
    }
}

void spw_log_set_sink(spw_log_sink_fn fn, int level)
{
    atomic_store(&log_sink, fn);
    spw_log_level = level;
    atomic_store(&log_all, true);
}

int spw_log_level_parse(const char *s)
{
    static const struct {
        const char *name;
        int level;
    } names[] = {{"err", SPW_LOG_ERR},   {"error", SPW_LOG_ERR},   {"warn", SPW_LOG_WARN},
                 {"warning", SPW_LOG_WARN}, {"notice", SPW_LOG_NOTICE}, {"info", SPW_LOG_INFO},
                 {"debug", SPW_LOG_DEBUG}};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strcmp(s, names[i].name) == 0)
            return names[i].level;
    return SPW_EINVAL;
}

/* True the first time this text is seen (or when the table is full). */
static bool log_first_time(const char *text)
{
    uint64_t h = 1469598103934665603ULL; /* FNV-1a */
    for (const char *p = text; *p != '\0'; p++)
        h = (h ^ (uint8_t)*p) * 1099511628211ULL;
    if (h == 0)
        h = 1;
    for (size_t i = 0; i < LOG_SEEN_SLOTS; i++) {
        size_t k = (size_t)(h + i) % LOG_SEEN_SLOTS;
        uint64_t cur = atomic_load(&log_seen[k]);
        if (cur == h)
            return false;
        if (cur == 0) {
            uint64_t zero = 0;
            if (atomic_compare_exchange_strong(&log_seen[k], &zero, h))
                return true;
            if (zero == h)
                return false;
        }
    }
    return true;
}

static const char *level_word(int level)
{
    switch (level) {
    case SPW_LOG_ERR:
        return "error";
    case SPW_LOG_WARN:
        return "warning";
    case SPW_LOG_NOTICE:
        return "notice";
    case SPW_LOG_INFO:
        return "info";
    default:
        return "debug";
    }
}

static void log_vwrite(int level, const char *fmt, va_list ap)
{
    char line[2048];
    /* The prefix is written in front of the text afterwards; reserve room for the longest. */
    enum { PREFIX_MAX = 112 };
    char *text = line + PREFIX_MAX;
    int m = vsnprintf(text, sizeof line - PREFIX_MAX - 1, fmt, ap);
    if (m < 0)
        return;
    size_t tlen = (size_t)m;
    if (tlen > sizeof line - PREFIX_MAX - 2)
        tlen = sizeof line - PREFIX_MAX - 2;
    text[tlen] = '\0';
    char prefix[PREFIX_MAX];
    int n;
    if (log_name[0] == '\0') {
        /* The library, in a program. */
        if (!atomic_load(&log_all) && !log_first_time(text))
            return;
        spw_log_sink_fn sink = atomic_load(&log_sink);
        if (sink != NULL) {
            sink(level, text);
            return;
        }
        if (spw_fd_is_journal(STDERR_FILENO))
            n = snprintf(prefix, sizeof prefix, "<%d>libspillway: ", level);
        else
            n = snprintf(prefix, sizeof prefix, "libspillway: %s: ", level_word(level));
    } else if (log_journal_bare) {
        n = snprintf(prefix, sizeof prefix, "<%d>", level);
    } else {
        n = snprintf(prefix, sizeof prefix, "<%d>%s[%d]: ", level, log_name, (int)getpid());
    }
    if (n < 0 || n >= PREFIX_MAX)
        return;
    char *start = text - n;
    memcpy(start, prefix, (size_t)n);
    text[tlen] = '\n';
    /* One write per line so lines from several processes sharing stderr do not interleave. */
    ssize_t w = write(STDERR_FILENO, start, (size_t)n + tlen + 1);
    (void)w;
}

void spw_log_write(int level, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    log_vwrite(level, fmt, ap);
    va_end(ap);
}

void spw_panic_at(const char *file, int line, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    spw_log_write(SPW_LOG_ERR, "panic at %s:%d: %s", file, line, msg);
    abort();
}
