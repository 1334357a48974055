/*
 * spw_base implementation: error table, ids, logging, the counted heap, time, buffers and
 * small parsers. Nothing here touches an event loop; everything is safe to call from any thread
 * (the heap counters are atomics, logging writes one line with one write(2)).
 * Invariant: spw_heap_used(SPW_MOD_COUNT) equals the sum of the per-module counters and is 0
 * once every spw_malloc'd block has been passed to spw_free.
 */
#include "spillway/base.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <netinet/in.h>
#include <fcntl.h>
#include <limits.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* ------------------------------------------------------------------ errors */

const char *spw_strerror(int err)
{
    switch (err) {
    case 0:
        return "success";
#define SPW_ERR_MSG_ROW(name, value, msg)                                                          \
    case (value):                                                                                  \
        return msg;
        SPW_ERRNO_MAP(SPW_ERR_MSG_ROW)
        SPW_OWN_ERROR_MAP(SPW_ERR_MSG_ROW)
#undef SPW_ERR_MSG_ROW
    default:
        if (err < 0 && err > -1000) {
            /* Another errno value: strerror's text is static for known values on glibc. */
            return strerror(-err);
        }
        return "unknown error";
    }
}

const char *spw_err_name(int err)
{
    switch (err) {
    case 0:
        return "SPW_OK";
#define SPW_ERR_NAME_ROW(name, value, msg)                                                         \
    case (value):                                                                                  \
        return "SPW_" #name;
        SPW_ERRNO_MAP(SPW_ERR_NAME_ROW)
        SPW_OWN_ERROR_MAP(SPW_ERR_NAME_ROW)
#undef SPW_ERR_NAME_ROW
    default:
        return "SPW_E?";
    }
}

/* --------------------------------------------------------------------- ids */

char *spw_id_hex(spw_id id, char out[SPW_ID_HEX_LEN + 1])
{
    snprintf(out, SPW_ID_HEX_LEN + 1, "%016" PRIx64 "%016" PRIx64, id.hi, id.lo);
    return out;
}

void spw_invariant_failed(const char *checker, int line, spw_id id, const char *fmt, ...)
{
    char hex[SPW_ID_HEX_LEN + 1], msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "%s: invariant violated (check.c:%d): %s%s%s\n", checker, line, msg,
            spw_id_is_nil(id) ? "" : " id=", spw_id_is_nil(id) ? "" : spw_id_hex(id, hex));
    fflush(stderr);
    abort();
}

static int hexval(int c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

int spw_id_parse(const char *s, spw_id *out)
{
    if (s == NULL || strlen(s) != SPW_ID_HEX_LEN)
        return SPW_EINVAL;
    uint64_t w[2] = {0, 0};
    for (int i = 0; i < SPW_ID_HEX_LEN; i++) {
        int v = hexval((unsigned char)s[i]);
        if (v < 0)
            return SPW_EINVAL;
        w[i / 16] = (w[i / 16] << 4) | (uint64_t)v;
    }
    out->hi = w[0];
    out->lo = w[1];
    return 0;
}

void spw_id_to_bytes(spw_id id, uint8_t out[16])
{
    for (int i = 0; i < 8; i++) {
        out[i] = (uint8_t)(id.hi >> (56 - 8 * i));
        out[8 + i] = (uint8_t)(id.lo >> (56 - 8 * i));
    }
}

spw_id spw_id_from_bytes(const uint8_t in[16])
{
    spw_id id = {0, 0};
    for (int i = 0; i < 8; i++) {
        id.hi = (id.hi << 8) | in[i];
        id.lo = (id.lo << 8) | in[8 + i];
    }
    return id;
}

/* ----------------------------------------------------------------- logging */

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

/* -------------------------------------------------------------------- heap */

/* Each block carries a 16-byte header with its size and module, so spw_free can keep the
 * per-module counters exact without asking the allocator. 16 bytes keeps max_align_t alignment. */
typedef struct heap_hdr {
    uint64_t size;
    uint32_t mod;
    uint32_t magic;
} heap_hdr;

#define HEAP_MAGIC 0x5350574DU /* "SPWM" */

static _Atomic int64_t heap_used[SPW_MOD_COUNT];
static _Atomic uint64_t heap_fail_countdown;

static bool heap_should_fail(void)
{
    uint64_t n = atomic_load_explicit(&heap_fail_countdown, memory_order_relaxed);
    if (n == 0)
        return false;
    if (atomic_fetch_sub(&heap_fail_countdown, 1) == 1)
        return true;
    return false;
}

void spw_heap_fail_after(uint64_t n)
{
    atomic_store(&heap_fail_countdown, n);
}

static void *heap_wrap(heap_hdr *h, enum spw_mod mod, size_t n)
{
    h->size = n;
    h->mod = (uint32_t)mod;
    h->magic = HEAP_MAGIC;
    atomic_fetch_add_explicit(&heap_used[mod], (int64_t)n, memory_order_relaxed);
    return h + 1;
}

void spw_heap_charge(enum spw_mod mod, int64_t delta)
{
    SPW_ASSERT(mod < SPW_MOD_COUNT);
    atomic_fetch_add_explicit(&heap_used[mod], delta, memory_order_relaxed);
}

void *spw_try_malloc(enum spw_mod mod, size_t n)
{
    SPW_ASSERT(mod < SPW_MOD_COUNT);
    if (n > SIZE_MAX - sizeof(heap_hdr) || heap_should_fail())
        return NULL;
    heap_hdr *h = malloc(sizeof *h + n);
    if (h == NULL)
        return NULL;
    return heap_wrap(h, mod, n);
}

void *spw_malloc(enum spw_mod mod, size_t n)
{
    SPW_ASSERT(mod < SPW_MOD_COUNT);
    heap_hdr *h = malloc(sizeof *h + n);
    if (h == NULL)
        SPW_PANIC("out of memory allocating %zu bytes", n);
    return heap_wrap(h, mod, n);
}

void *spw_calloc(enum spw_mod mod, size_t count, size_t n)
{
    if (n != 0 && count > SIZE_MAX / n)
        SPW_PANIC("calloc overflow: %zu * %zu", count, n);
    heap_hdr *h = calloc(1, sizeof *h + count * n);
    if (h == NULL)
        SPW_PANIC("out of memory allocating %zu bytes", count * n);
    return heap_wrap(h, mod, count * n);
}

static void *heap_realloc(enum spw_mod mod, void *p, size_t n, bool may_fail)
{
    if (p == NULL)
        return may_fail ? spw_try_malloc(mod, n) : spw_malloc(mod, n);
    heap_hdr *h = (heap_hdr *)p - 1;
    SPW_ASSERT(h->magic == HEAP_MAGIC);
    if (may_fail && (n > SIZE_MAX - sizeof(heap_hdr) || heap_should_fail()))
        return NULL;
    uint64_t old = h->size;
    uint32_t oldmod = h->mod;
    heap_hdr *nh = realloc(h, sizeof *nh + n);
    if (nh == NULL) {
        if (may_fail)
            return NULL;
        SPW_PANIC("out of memory reallocating %zu bytes", n);
    }
    atomic_fetch_sub_explicit(&heap_used[oldmod], (int64_t)old, memory_order_relaxed);
    return heap_wrap(nh, mod, n);
}

void *spw_realloc(enum spw_mod mod, void *p, size_t n)
{
    return heap_realloc(mod, p, n, false);
}

void *spw_try_realloc(enum spw_mod mod, void *p, size_t n)
{
    return heap_realloc(mod, p, n, true);
}

void spw_free(void *p)
{
    if (p == NULL)
        return;
    int saved = errno;
    heap_hdr *h = (heap_hdr *)p - 1;
    SPW_ASSERT(h->magic == HEAP_MAGIC);
    h->magic = 0;
    atomic_fetch_sub_explicit(&heap_used[h->mod], (int64_t)h->size, memory_order_relaxed);
    free(h);
    errno = saved;
}

char *spw_strdup(enum spw_mod mod, const char *s)
{
    return spw_strndup(mod, s, strlen(s));
}

char *spw_strndup(enum spw_mod mod, const char *s, size_t n)
{
    size_t len = strnlen(s, n);
    char *d = spw_malloc(mod, len + 1);
    memcpy(d, s, len);
    d[len] = '\0';
    return d;
}

int64_t spw_heap_used(enum spw_mod mod)
{
    if (mod < SPW_MOD_COUNT)
        return atomic_load(&heap_used[mod]);
    int64_t sum = 0;
    for (int i = 0; i < SPW_MOD_COUNT; i++)
        sum += atomic_load(&heap_used[i]);
    return sum;
}

/* -------------------------------------------------------------------- time */

uint64_t spw_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

uint64_t spw_wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000ULL + (uint64_t)ts.tv_nsec / 1000000ULL;
}

/* ------------------------------------------------------------------ buffer */

int spw_buf_reserve(spw_buf *b, size_t extra)
{
    if (extra > SIZE_MAX - b->len)
        return SPW_ENOMEM;
    size_t need = b->len + extra;
    if (need <= b->cap)
        return 0;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < need)
        cap = cap > SIZE_MAX / 2 ? need : cap * 2;
    uint8_t *p = spw_try_realloc(SPW_MOD_BASE, b->data, cap);
    if (p == NULL)
        return SPW_ENOMEM;
    b->data = p;
    b->cap = cap;
    return 0;
}

void spw_buf_append(spw_buf *b, const void *p, size_t n)
{
    if (spw_buf_reserve(b, n) != 0)
        SPW_PANIC("out of memory growing a buffer by %zu bytes", n);
    if (n > 0)
        memcpy(b->data + b->len, p, n);
    b->len += n;
}

void spw_buf_release(spw_buf *b)
{
    spw_free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
}

void spw_buf_consume(spw_buf *b, size_t n)
{
    SPW_ASSERT(n <= b->len);
    if (n == b->len) {
        b->len = 0;
        return;
    }
    memmove(b->data, b->data + n, b->len - n);
    b->len -= n;
}

/* ----------------------------------------------------------------- parsing */

static bool host_name_ok(const char *h)
{
    if (*h == '\0' || *h == '.' || *h == '-')
        return false;
    for (; *h != '\0'; h++)
        if (!isalnum((unsigned char)*h) && *h != '-' && *h != '.' && *h != '_')
            return false;
    return true;
}

int spw_addr_parse(const char *addr, int default_port, spw_addr *out)
{
    if (addr == NULL || out == NULL)
        return SPW_EINVAL;
    memset(out, 0, sizeof *out);
    const char *host = addr, *host_end, *rest;
    if (addr[0] == '[') {
        host = addr + 1;
        host_end = strchr(host, ']');
        if (host_end == NULL)
            return SPW_EINVAL;
        rest = host_end + 1;
        out->ipv6 = true;
    } else {
        host_end = strchr(addr, ':');
        if (host_end != NULL && strchr(host_end + 1, ':') != NULL)
            return SPW_EINVAL; /* an IPv6 address needs brackets: "[::1]:7400" */
        if (host_end == NULL)
            host_end = addr + strlen(addr);
        rest = host_end;
    }
    size_t hlen = (size_t)(host_end - host);
    if (hlen == 0)
        return SPW_EINVAL;
    if (hlen >= SPW_HOST_MAX)
        return SPW_ENAMETOOLONG;
    memcpy(out->host, host, hlen);
    out->host[hlen] = '\0';
    if (*rest == '\0') {
        if (default_port < 0)
            return SPW_EINVAL;
        out->port = default_port;
    } else {
        if (*rest != ':' || !isdigit((unsigned char)rest[1]))
            return SPW_EINVAL;
        char *end;
        errno = 0;
        long p = strtol(rest + 1, &end, 10);
        if (errno != 0 || *end != '\0' || p < 0 || p > 65535)
            return SPW_EINVAL;
        out->port = (int)p;
    }
    unsigned char buf[16];
    if (out->ipv6) {
        /* A scope ("fe80::1%eth0") is allowed; the address before it must be IPv6. */
        char plain[SPW_HOST_MAX];
        snprintf(plain, sizeof plain, "%s", out->host);
        plain[strcspn(plain, "%")] = '\0';
        if (inet_pton(AF_INET6, plain, buf) != 1)
            return SPW_EINVAL;
        out->numeric = true;
    } else if (inet_pton(AF_INET, out->host, buf) == 1) {
        out->numeric = true;
    } else if (!host_name_ok(out->host)) {
        return SPW_EINVAL;
    }
    return 0;
}

char *spw_addr_join(const char *host, int port, char *out, size_t outlen)
{
    if (strchr(host, ':') != NULL)
        snprintf(out, outlen, "[%s]:%d", host, port);
    else
        snprintf(out, outlen, "%s:%d", host, port);
    return out;
}

bool spw_addr_host_is_wildcard(const char *host)
{
    unsigned char buf[16], zero[16] = {0};
    if (inet_pton(AF_INET, host, buf) == 1)
        return memcmp(buf, zero, 4) == 0;
    if (inet_pton(AF_INET6, host, buf) == 1)
        return memcmp(buf, zero, 16) == 0;
    return false;
}

int spw_addr_from_sockaddr(const struct sockaddr *sa, char *out, size_t outlen)
{
    char ip[INET6_ADDRSTRLEN];
    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *sin = (const struct sockaddr_in *)sa;
        inet_ntop(AF_INET, &sin->sin_addr, ip, sizeof ip);
        spw_addr_join(ip, ntohs(sin->sin_port), out, outlen);
        return 0;
    }
    if (sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *sin6 = (const struct sockaddr_in6 *)sa;
        if (IN6_IS_ADDR_V4MAPPED(&sin6->sin6_addr)) {
            /* A dual-stack socket's IPv4 peer: shown (and advertised) as plain IPv4. */
            inet_ntop(AF_INET, &sin6->sin6_addr.s6_addr[12], ip, sizeof ip);
        } else {
            inet_ntop(AF_INET6, &sin6->sin6_addr, ip, sizeof ip);
        }
        spw_addr_join(ip, ntohs(sin6->sin6_port), out, outlen);
        return 0;
    }
    return SPW_EINVAL;
}

int spw_addr_split(const char *addr, char host[64], int *port)
{
    spw_addr a;
    int rc = spw_addr_parse(addr, -1, &a);
    if (rc != 0)
        return rc;
    if (strlen(a.host) >= 64)
        return SPW_ENAMETOOLONG;
    strcpy(host, a.host);
    *port = a.port;
    return 0;
}

int spw_size_parse(const char *s, uint64_t *out)
{
    if (s == NULL || !isdigit((unsigned char)*s))
        return SPW_EINVAL;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno != 0)
        return SPW_EINVAL;
    uint64_t mult = 1;
    switch (toupper((unsigned char)*end)) {
    case '\0':
        break;
    case 'B':
        end++;
        break;
    case 'K':
        mult = 1ULL << 10;
        end++;
        break;
    case 'M':
        mult = 1ULL << 20;
        end++;
        break;
    case 'G':
        mult = 1ULL << 30;
        end++;
        break;
    case 'T':
        mult = 1ULL << 40;
        end++;
        break;
    default:
        return SPW_EINVAL;
    }
    if (mult > 1) {
        if (*end == 'i' || *end == 'I')
            end++;
        if (*end == 'B' || *end == 'b')
            end++;
    }
    if (*end != '\0')
        return SPW_EINVAL;
    if (v > UINT64_MAX / mult)
        return SPW_ERANGE;
    *out = (uint64_t)v * mult;
    return 0;
}

char *spw_size_fmt(uint64_t bytes, char *out, size_t outlen)
{
    static const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
    double v = (double)bytes;
    int u = 0;
    while (v >= 1024.0 && u < 5) {
        v /= 1024.0;
        u++;
    }
    if (u == 0)
        snprintf(out, outlen, "%" PRIu64 " B", bytes);
    else
        snprintf(out, outlen, "%.1f %s", v, units[u]);
    return out;
}

int spw_file_read(const char *path, size_t max, char **out, size_t *outlen)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = -errno;
        close(fd);
        return e;
    }
    if ((uint64_t)st.st_size > max) {
        close(fd);
        return SPW_ELIMIT;
    }
    char *buf = spw_malloc(SPW_MOD_BASE, (size_t)st.st_size + 1);
    size_t got = 0;
    while (got < (size_t)st.st_size) {
        ssize_t r = read(fd, buf + got, (size_t)st.st_size - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        got += (size_t)r;
    }
    close(fd);
    buf[got] = '\0';
    *out = buf;
    if (outlen != NULL)
        *outlen = got;
    return 0;
}

int spw_file_write_atomic(const char *path, const void *data, size_t len)
{
    char tmp[PATH_MAX];
    if (snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid()) >= (int)sizeof tmp)
        return SPW_ENAMETOOLONG;
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return -errno;
    const uint8_t *p = data;
    size_t done = 0;
    while (done < len) {
        ssize_t w = write(fd, p + done, len - done);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0) {
            int e = -errno;
            close(fd);
            unlink(tmp);
            return e;
        }
        done += (size_t)w;
    }
    if (close(fd) != 0 || rename(tmp, path) != 0) {
        int e = -errno;
        unlink(tmp);
        return e;
    }
    return 0;
}

static void read_first_line(const char *path, char *out, size_t outlen)
{
    out[0] = '\0';
    FILE *f = fopen(path, "re");
    if (f == NULL)
        return;
    if (fgets(out, (int)outlen, f) == NULL)
        out[0] = '\0';
    fclose(f);
    out[strcspn(out, "\n")] = '\0';
}

void spw_host_id(char *out, size_t outlen)
{
    char machine[64], boot[64];
    read_first_line("/etc/machine-id", machine, sizeof machine);
    read_first_line("/proc/sys/kernel/random/boot_id", boot, sizeof boot);
    if (machine[0] == '\0' && boot[0] == '\0') {
        char host[64] = "";
        gethostname(host, sizeof host - 1);
        snprintf(out, outlen, "host:%s", host);
        return;
    }
    /* Abstract Unix sockets (how a worker's arena is reached) belong to a network namespace:
     * processes of one kernel in different namespaces share memory but cannot connect, so
     * they count as different hosts and use TCP. */
    struct stat st;
    if (stat("/proc/self/ns/net", &st) == 0)
        snprintf(out, outlen, "%s/%s/net:%llu:%llu", machine, boot, (unsigned long long)st.st_dev,
                 (unsigned long long)st.st_ino);
    else
        snprintf(out, outlen, "%s/%s", machine, boot);
}

int64_t spw_proc_status_kib(int pid, const char *field)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", pid);
    FILE *f = fopen(path, "re");
    if (f == NULL)
        return -errno;
    size_t flen = strlen(field);
    int64_t v = SPW_ENOENT;
    while (fgets(line, sizeof line, f) != NULL) {
        if (strncmp(line, field, flen) == 0 && line[flen] == ':') {
            v = strtoll(line + flen + 1, NULL, 10);
            break;
        }
    }
    fclose(f);
    return v;
}
