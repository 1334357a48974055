/*
 * The scheduler's HTTP endpoint under attack, end to end, over raw sockets on 127.0.0.0/8: a
 * legitimate scraper on 127.0.0.1 keeps getting /metrics while an attacker on 127.0.0.2 and up
 * holds a thousand idle, trickling and half-sent connections; one address cannot hold more
 * than its share; past the total a request is told 503; half-sent requests whose sender closed
 * leave no socket in CLOSE_WAIT; a Host that does not name the endpoint (DNS rebinding) gets
 * 421 and a GET with a body 400. The limits come from the endpoint's start line in the log.
 * Also: a worker's non-ASCII name round-trips through spillway-ctl --json and /api/status.
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "../unit/test_main.h"
#include "e2e_util.h"
#include "harness.h"

#define REQUEST_S 10       /* the endpoint's deadline for a whole request head */
#define SCRAPE_MS 3000     /* a legitimate /metrics must answer within this */
#define ATTACKERS 1000

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static int http_port(const h_cluster *c)
{
    const char *colon = strrchr(c->http, ':');
    return colon != NULL ? atoi(colon + 1) : 0;
}

/* A non-blocking socket from src (an address of 127.0.0.0/8) connecting to 127.0.0.1:port. */
static int dial(const char *src, int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    struct sockaddr_in a = {.sin_family = AF_INET};
    inet_pton(AF_INET, src, &a.sin_addr);
    struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, "127.0.0.1", &to.sin_addr);
    if (bind(fd, (struct sockaddr *)&a, sizeof a) != 0 ||
        (connect(fd, (struct sockaddr *)&to, sizeof to) != 0 && errno != EINPROGRESS)) {
        close(fd);
        return -1;
    }
    return fd;
}

/* Sends raw (a whole request) from src and reads the answer until the server closes or
 * timeout_ms pass. Returns the status code, or -1 (no answer in time). *body, if not NULL,
 * gets the answer (heap). */
static int http_raw(const char *src, int port, const char *raw, int timeout_ms, char **body)
{
    uint64_t end = now_ms() + (uint64_t)timeout_ms;
    int fd = dial(src, port);
    if (fd < 0)
        return -1;
    size_t sent = 0, len = strlen(raw), got = 0, cap = 4096;
    char *buf = malloc(cap);
    bool eof = false;
    while (!eof && now_ms() < end) {
        struct pollfd p = {fd, (short)(sent < len ? POLLOUT : POLLIN), 0};
        if (poll(&p, 1, (int)(end - now_ms())) <= 0)
            continue;
        if (sent < len) {
            ssize_t n = send(fd, raw + sent, len - sent, MSG_NOSIGNAL);
            if (n < 0 && errno != EAGAIN)
                break;
            sent += n > 0 ? (size_t)n : 0;
            continue;
        }
        if (got + 1024 > cap)
            buf = realloc(buf, cap *= 2);
        ssize_t n = recv(fd, buf + got, cap - got - 1, 0);
        if (n <= 0 && !(n < 0 && errno == EAGAIN))
            eof = true;
        got += n > 0 ? (size_t)n : 0;
    }
    close(fd);
    buf[got] = '\0';
    int code = -1;
    if (eof && sscanf(buf, "HTTP/1.%*d %d", &code) != 1)
        code = -1;
    if (body != NULL)
        *body = buf;
    else
        free(buf);
    return code;
}

/* GET path with the given Host (NULL: none, as HTTP/1.0), from src. */
static int http_get(const char *src, int port, const char *path, const char *host, char **body)
{
    char req[512];
    if (host != NULL)
        snprintf(req, sizeof req, "GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", path,
                 host);
    else
        snprintf(req, sizeof req, "GET %s HTTP/1.0\r\n\r\n", path);
    return http_raw(src, port, req, SCRAPE_MS, body);
}

static int scrape(const h_cluster *c)
{
    char host[64];
    snprintf(host, sizeof host, "127.0.0.1:%d", http_port(c));
    return http_get("127.0.0.1", http_port(c), "/metrics", host, NULL);
}

/* The endpoint's limits: MAX_CONNS connections in all, or an eighth of the descriptor limit
 * (the scheduler raises its soft limit to the hard one, which it inherits) if that is less but
 * at least 64, and a quarter of that, at most 64, per address. Its start line in the log must
 * say the same; a missing line is reported, and the test goes on to the behaviour (so that the
 * behaviour is what fails on an endpoint without limits) and fails at its end. */
static bool limits_logged;

static void limits(const h_cluster *c, unsigned *total, unsigned *per_ip)
{
    struct rlimit rl;
    assert_int_equal(getrlimit(RLIMIT_NOFILE, &rl), 0);
    uint64_t n = rl.rlim_max == RLIM_INFINITY ? UINT64_MAX : rl.rlim_max / 8;
    *total = n > 2048 ? 2048 : n < 64 ? 64 : (unsigned)n;
    *per_ip = *total / 4 < 64 ? *total / 4 : 64;
    FILE *f = fopen(c->sched.log, "r");
    assert_non_null(f);
    char line[512];
    unsigned t = 0, p = 0;
    limits_logged = false;
    while (!limits_logged && fgets(line, sizeof line, f) != NULL) {
        const char *at = strstr(line, "http: at most ");
        limits_logged = at != NULL && sscanf(at, "http: at most %u connections, %u per address",
                                             &t, &p) == 2;
    }
    fclose(f);
    if (!limits_logged)
        fprintf(stderr, "no 'http: at most' line in %s\n", c->sched.log);
    else if (t != *total || p != *per_ip)
        fail_msg("the endpoint says %u connections, %u per address; wanted %u, %u", t, p,
                 *total, *per_ip);
}

static int count_fds(int pid)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/fd", pid);
    DIR *d = opendir(path);
    if (d == NULL)
        return -1;
    int n = 0;
    while (readdir(d) != NULL)
        n++;
    closedir(d);
    return n - 2;
}

/* Sockets in CLOSE_WAIT on the local port (IPv4). */
static int close_waits(int port)
{
    return e2e_tcp_count(port, 1u << 8);
}

/* ------------------------------------------------------------- attacker */

enum { IDLE, TRICKLE, HALF_SENT };
enum { CONNECTING, OPEN, SERVER_CLOSED, WE_CLOSED };

typedef struct aconn {
    int fd, kind;
    atomic_int state; /* read by the test while the attacker thread runs */
    uint64_t t_open, t_closed, t_next;
} aconn;

typedef struct attack {
    int port, n, per_addr, first_addr; /* sources 127.0.0.first_addr and up, per_addr each */
    const int *kinds;                  /* kind of connection i is kinds[i % nkinds] */
    int nkinds;
    aconn *c;
    atomic_bool stop;
    atomic_int open; /* connections open now */
    pthread_t thread;
} attack;

static void attack_send(aconn *a, const char *s, uint64_t now)
{
    if (send(a->fd, s, strlen(s), MSG_NOSIGNAL) < 0 && errno != EAGAIN) {
        a->state = SERVER_CLOSED;
        a->t_closed = now;
    }
}

static void *attack_main(void *arg)
{
    attack *at = arg;
    struct pollfd *p = calloc((size_t)at->n, sizeof *p);
    int *idx = calloc((size_t)at->n, sizeof *idx);
    while (!atomic_load(&at->stop)) {
        int np = 0, open = 0;
        for (int i = 0; i < at->n; i++) {
            aconn *a = &at->c[i];
            if (a->state == CONNECTING || a->state == OPEN) {
                p[np] = (struct pollfd){a->fd, (short)(a->state == CONNECTING ? POLLOUT : POLLIN), 0};
                idx[np++] = i;
            }
            open += a->state == OPEN;
        }
        atomic_store(&at->open, open);
        poll(p, (nfds_t)np, 50);
        uint64_t now = now_ms();
        for (int k = 0; k < np; k++) {
            aconn *a = &at->c[idx[k]];
            if (a->state == CONNECTING && p[k].revents != 0) {
                int err = 0;
                socklen_t el = sizeof err;
                getsockopt(a->fd, SOL_SOCKET, SO_ERROR, &err, &el);
                a->state = err != 0 ? SERVER_CLOSED : OPEN;
                a->t_open = a->t_closed = now;
                if (a->state == OPEN && a->kind == HALF_SENT) {
                    attack_send(a, "GET /metrics HTTP/1.1\r\nHo", now);
                    close(a->fd);
                    a->fd = -1;
                    a->state = WE_CLOSED;
                } else if (a->state == OPEN && a->kind == TRICKLE) {
                    attack_send(a, "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n", now);
                    a->t_next = now + 2000;
                }
            } else if (a->state == OPEN && p[k].revents != 0) {
                char buf[512];
                ssize_t n = recv(a->fd, buf, sizeof buf, 0);
                if (n == 0 || (n < 0 && errno != EAGAIN)) {
                    a->state = SERVER_CLOSED;
                    a->t_closed = now;
                }
            }
            if (a->state == OPEN && a->kind == TRICKLE && now >= a->t_next) {
                attack_send(a, "X-Slow: x\r\n", now);
                a->t_next = now + 2000;
            }
        }
    }
    free(p);
    free(idx);
    return NULL;
}

static void attack_start(attack *at, int port, int n, int per_addr, int first_addr,
                         const int *kinds, int nkinds)
{
    memset(at, 0, sizeof *at);
    at->port = port;
    at->n = n;
    at->kinds = kinds;
    at->nkinds = nkinds;
    at->c = calloc((size_t)n, sizeof *at->c);
    for (int i = 0; i < n; i++) {
        char src[32];
        snprintf(src, sizeof src, "127.0.0.%d", first_addr + i / per_addr);
        at->c[i].kind = kinds[i % nkinds];
        at->c[i].fd = dial(src, port);
        assert_true(at->c[i].fd >= 0);
    }
    assert_int_equal(pthread_create(&at->thread, NULL, attack_main, at), 0);
}

static void attack_stop(attack *at)
{
    atomic_store(&at->stop, true);
    pthread_join(at->thread, NULL);
    for (int i = 0; i < at->n; i++)
        if (at->c[i].fd >= 0)
            close(at->c[i].fd);
}

static bool attack_all_open(void *arg)
{
    attack *at = arg;
    return atomic_load(&at->open) == at->n;
}

/* Connections in each state, counted in *closed and *open; whether the cap is what they show:
 * per_ip open, the rest closed by the server. */
typedef struct cap_seen {
    const attack *at;
    int per_ip, closed, open;
} cap_seen;

static bool attack_capped(void *arg)
{
    cap_seen *cs = arg;
    cs->closed = cs->open = 0;
    for (int i = 0; i < cs->at->n; i++) {
        cs->closed += cs->at->c[i].state == SERVER_CLOSED;
        cs->open += cs->at->c[i].state == OPEN;
    }
    return cs->closed == cs->at->n - cs->per_ip && cs->open == cs->per_ip;
}

static bool attack_all_cut(void *arg)
{
    const attack *at = arg;
    for (int i = 0; i < at->n; i++)
        if (at->c[i].state != WE_CLOSED)
            return false;
    return true;
}

static bool no_close_waits(void *arg)
{
    return close_waits(*(const int *)arg) == 0;
}

/* The test needs more descriptors than a default soft limit gives. */
static void raise_nofile(rlim_t want)
{
    struct rlimit rl;
    assert_int_equal(getrlimit(RLIMIT_NOFILE, &rl), 0);
    if (rl.rlim_max < want)
        h_skip();
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
}

static h_cluster *start(const char *const *extra)
{
    const char *args[16] = {"--http", "127.0.0.1:0"};
    int n = 2;
    for (int i = 0; extra != NULL && extra[i] != NULL; i++)
        args[n++] = extra[i];
    args[n] = NULL;
    h_cluster *c = h_cluster_start(false, args);
    assert_true(c->http[0] != '\0');
    return c;
}

/* A scheduler for an attack: the descriptor limit raised to nofile (0: as it is), its HTTP
 * port, and the endpoint's connection caps. */
static h_cluster *attack_target(rlim_t nofile, int *port, unsigned *total, unsigned *per_ip)
{
    if (nofile != 0)
        raise_nofile(nofile);
    h_cluster *c = start(NULL);
    *port = http_port(c);
    limits(c, total, per_ip);
    return c;
}

/* -------------------------------------------------------------- tests */

typedef struct quiet {
    int pid, port, fds;
} quiet;

/* The scheduler is back to its descriptors before the attack, none in CLOSE_WAIT. */
static bool back_to_normal(void *arg)
{
    quiet *q = arg;
    return count_fds(q->pid) <= q->fds && close_waits(q->port) == 0;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static void http_metrics_answer_under_a_thousand_hostile_connections(void)
{
    int port;
    unsigned total, per_ip;
    h_cluster *c = attack_target(ATTACKERS + 256, &port, &total, &per_ip);
    assert_true(total > ATTACKERS);
    assert_int_equal(scrape(c), 200);
    quiet q = {c->sched.pid, port, count_fds(c->sched.pid)};

    static const int kinds[] = {IDLE, TRICKLE, HALF_SENT};
    attack at;
    int per_addr = (int)(per_ip / 2);
    attack_start(&at, port, ATTACKERS, per_addr, 2, kinds, 3);
    /* A scrape a second, for longer than the deadline, so the attacker's first connections are
     * cut while it runs. */
    enum { SCRAPES = REQUEST_S + 5 };
    uint64_t lat[SCRAPES];
    int failed = 0;
    for (int i = 0; i < SCRAPES; i++) {
        uint64_t t0 = now_ms();
        int code = scrape(c);
        lat[i] = now_ms() - t0;
        if (code != 200) {
            fprintf(stderr, "scrape %d: %d after %llu ms\n", i, code, (unsigned long long)lat[i]);
            failed++;
        }
        if (lat[i] < 1000)
            usleep((useconds_t)(1000 - lat[i]) * 1000);
    }
    /* Every idle or trickling connection was cut at its deadline (a sweep and a scheduling
     * delay late at most). */
    uint64_t end = now_ms() + (REQUEST_S + 4) * 1000;
    bool all_cut = false;
    while (!all_cut && now_ms() < end) {
        all_cut = atomic_load(&at.open) == 0;
        usleep(100000);
    }
    attack_stop(&at);
    int late = 0, never = 0, opened = 0;
    for (int i = 0; i < ATTACKERS; i++) {
        aconn *a = &at.c[i];
        if (a->kind == HALF_SENT)
            continue;
        opened += a->t_open != 0;
        if (a->state == OPEN || a->t_open == 0)
            never++;
        else if (a->t_closed - a->t_open > (REQUEST_S + 3) * 1000)
            late++;
    }
    free(at.c);
    qsort(lat, SCRAPES, sizeof lat[0], cmp_u64);
    printf("legitimate /metrics under %d hostile connections: median %llu ms, max %llu ms, "
           "%d of %d failed; attacker connections cut late %d, never %d (of %d)\n",
           ATTACKERS, (unsigned long long)lat[SCRAPES / 2], (unsigned long long)lat[SCRAPES - 1],
           failed, SCRAPES, late, never, opened);
    assert_int_equal(failed, 0);
    assert_int_equal(never, 0);
    assert_int_equal(late, 0);
    /* The attacker gone, the scheduler holds no more sockets than before. */
    if (!h_eventually(back_to_normal, &q, 5000))
        fail_msg("after the attack: %d descriptors (before: %d), %d in CLOSE_WAIT",
                 count_fds(q.pid), q.fds, close_waits(port));
    assert_true(limits_logged);
    E2E_STOP(c, NULL);
}

static void http_caps_connections_per_address(void)
{
    int port;
    unsigned total, per_ip;
    h_cluster *c = attack_target(512, &port, &total, &per_ip);
    assert_true(per_ip < total);
    static const int kinds[] = {IDLE};
    attack at;
    int n = (int)per_ip + 20;
    attack_start(&at, port, n, n, 250, kinds, 1);
    /* The connections past the cap are closed as soon as accepted; those within it stay (their
     * deadline is far off). */
    cap_seen cs = {&at, (int)per_ip, 0, 0};
    (void)h_eventually(attack_capped, &cs, 3000);
    int closed = cs.closed, open = cs.open;
    printf("%d connections from one address: %d kept, %d closed at once (cap %u)\n", n, open,
           closed, per_ip);
    /* Another address is served meanwhile. */
    assert_int_equal(scrape(c), 200);
    attack_stop(&at);
    free(at.c);
    assert_int_equal(open, (int)per_ip);
    assert_int_equal(closed, n - (int)per_ip);
    assert_true(limits_logged);
    E2E_STOP(c, NULL);
}

static void http_releases_half_sent_requests_at_once(void)
{
    int port;
    unsigned total, per_ip;
    h_cluster *c = attack_target(1024, &port, &total, &per_ip);
    /* Idle connections first (as many as the old fixed limit held), then requests cut off by
     * their sender: none may linger in CLOSE_WAIT. */
    static const int idle[] = {IDLE}, half[] = {HALF_SENT};
    attack hold, cut;
    int per_addr = (int)(per_ip / 2);
    attack_start(&hold, port, 100, per_addr, 2, idle, 1);
    assert_true(h_eventually(attack_all_open, &hold, 5000));
    attack_start(&cut, port, 200, per_addr, 100, half, 1);
    bool sent = h_eventually(attack_all_cut, &cut, 5000);
    /* Released at once: well before any timeout could do it. */
    uint64_t t0 = now_ms();
    (void)h_eventually(no_close_waits, &port, 2000);
    int waits = close_waits(port);
    printf("200 half-sent requests closed by their sender (all connected: %s): %d in CLOSE_WAIT "
           "after %llu ms\n", sent ? "yes" : "no", waits, (unsigned long long)(now_ms() - t0));
    assert_true(sent);
    assert_int_equal(waits, 0);
    assert_int_equal(scrape(c), 200);
    attack_stop(&cut);
    attack_stop(&hold);
    free(cut.c);
    free(hold.c);
    assert_true(limits_logged);
    E2E_STOP(c, NULL);
}

static void http_full_answers_503(void)
{
    /* A small descriptor limit, inherited by the scheduler, makes the total small enough to
     * fill: it takes an eighth of the limit. */
    struct rlimit rl = {1024, 1024};
    if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
        h_skip();
    int port;
    unsigned total, per_ip;
    h_cluster *c = attack_target(0, &port, &total, &per_ip);
    assert_true(total < 512);
    assert_int_equal(scrape(c), 200); /* the endpoint's own session is up before the count */
    quiet q = {c->sched.pid, port, count_fds(c->sched.pid)};
    static const int idle[] = {IDLE};
    attack at;
    attack_start(&at, port, (int)total, (int)per_ip, 2, idle, 1);
    assert_true(h_eventually(attack_all_open, &at, 5000));
    char *body = NULL;
    char host[64];
    snprintf(host, sizeof host, "127.0.0.1:%d", port);
    uint64_t t0 = now_ms();
    int code = http_get("127.0.0.1", port, "/metrics", host, &body);
    printf("with %u connections held: %d after %llu ms\n", total, code,
           (unsigned long long)(now_ms() - t0));
    assert_int_equal(code, 503);
    assert_non_null(strstr(body, "too many connections"));
    free(body);
    attack_stop(&at);
    free(at.c);
    if (!h_eventually(back_to_normal, &q, 5000))
        fail_msg("after the attack: %d descriptors (before: %d), %d in CLOSE_WAIT",
                 count_fds(q.pid), q.fds, close_waits(port));
    assert_int_equal(scrape(c), 200);
    assert_true(limits_logged);
    E2E_STOP(c, NULL);
}

static void http_refuses_foreign_host_names(void)
{
    h_cluster *c = start(NULL);
    int port = http_port(c);
    char p[16];
    snprintf(p, sizeof p, "%d", port);
    static const struct {
        const char *host, *port; /* port NULL: none; "": the endpoint's */
        int code;
    } cases[] = {
        {"evil.example", "", 421},  {"evil.example", NULL, 421},
        {"localhost.evil.example", "", 421}, {"127.0.0.2", "", 421},
        {"127.0.0.1", "", 200},     {"127.0.0.1", NULL, 200},
        {"localhost", "", 200},     {"LocalHost", "", 200},
        {"[::1]", "", 200},         {"127.0.0.1", "8080", 200}, /* a port mapping */
        {"127.0.0.1", "x", 421},    {"", "", 421},
    };
    static const char *const paths[] = {"/metrics", "/api/status", "/"};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char host[128];
        snprintf(host, sizeof host, "%s%s%s", cases[i].host, cases[i].port ? ":" : "",
                 cases[i].port == NULL ? "" : cases[i].port[0] ? cases[i].port : p);
        for (size_t k = 0; k < sizeof paths / sizeof paths[0]; k++) {
            int code = http_get("127.0.0.1", port, paths[k], host, NULL);
            if (code != cases[i].code)
                fail_msg("GET %s with Host '%s': %d, wanted %d", paths[k], host, code,
                         cases[i].code);
        }
    }
    /* No Host at all (HTTP/1.0) names nothing. */
    assert_int_equal(http_get("127.0.0.1", port, "/metrics", NULL, NULL), 421);
    E2E_STOP(c, NULL);
}

static void http_host_option_adds_names(void)
{
    const char *const extra[] = {"--http-host", "dash.example", "--http-host",
                                 "b.example,[::2]", NULL};
    h_cluster *c = start(extra);
    int port = http_port(c);
    static const struct {
        const char *host;
        int code;
    } cases[] = {
        {"dash.example", 200}, {"DASH.example:443", 200},  {"b.example:80", 200},
        {"[::2]", 200},        {"[0::2]:1", 200},          {"localhost", 200},
        {"c->example", 421},   {"dash.example.evil", 421},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int code = http_get("127.0.0.1", port, "/metrics", cases[i].host, NULL);
        if (code != cases[i].code)
            fail_msg("Host '%s': %d, wanted %d", cases[i].host, code, cases[i].code);
    }
    E2E_STOP(c, NULL);
    /* A name with a port, or an empty one, is refused at start. */
    static const char *const bad[] = {"a.example:80", "a.example,,b", "evil/x"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        const char *argv[] = {h_bin("spillway-scheduler"), "--listen", "127.0.0.1:0", "--http",
                              "127.0.0.1:0", "--http-host", bad[i], NULL};
        char *out = NULL;
        int st = h_run(argv, &out);
        if (st != 2 || out == NULL || strstr(out, "http-host") == NULL)
            fail_msg("--http-host %s: exit %d: %s", bad[i], st, out ? out : "");
        free(out);
    }
}

static void http_get_with_a_body_is_400(void)
{
    h_cluster *c = start(NULL);
    int port = http_port(c);
    static const struct {
        const char *head, *body;
        int code;
    } cases[] = {
        {"GET /metrics HTTP/1.1\r\nContent-Length: 5\r\n", "hello", 400},
        {"GET /api/status HTTP/1.1\r\nTransfer-Encoding: chunked\r\n", "5\r\nhello\r\n0\r\n\r\n",
         400},
        {"GET / HTTP/1.1\r\nContent-Length: 5\r\n", "hello", 400},
        {"POST /metrics HTTP/1.1\r\nContent-Length: 5\r\n", "hello", 405},
        {"GET /metrics HTTP/1.1\r\nContent-Length: 0\r\n", "", 200},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char req[512];
        snprintf(req, sizeof req, "%sHost: 127.0.0.1:%d\r\nConnection: close\r\n\r\n%s",
                 cases[i].head, port, cases[i].body);
        int code = http_raw("127.0.0.1", port, req, SCRAPE_MS, NULL);
        if (code != cases[i].code)
            fail_msg("%.30s...: %d, wanted %d", cases[i].head, code, cases[i].code);
    }
    E2E_STOP(c, NULL);
}

static bool worker_listed(void *arg)
{
    e2e_named *n = arg;
    json_t *st = e2e_ctl_json(n->c, "status");
    const char *name = json_string_value(
        json_object_get(json_array_get(json_object_get(st, "workers"), 0), "name"));
    bool ok = name != NULL && strcmp(name, n->name) == 0;
    json_decref(st);
    return ok;
}

static void ctl_json_status_round_trips_a_utf8_worker_name(void)
{
    h_cluster *c = start(NULL);
    const char *name = "w\xc3\xb6rker";
    const char *const wargs[] = {"--slots", "1", "--store-capacity", "32M", "--name", name, NULL};
    h_worker_start(c, wargs);
    e2e_named n = {c, name};
    assert_true(h_eventually(worker_listed, &n, 10000));
    char host[64], *body = NULL;
    snprintf(host, sizeof host, "127.0.0.1:%d", http_port(c));
    assert_int_equal(http_get("127.0.0.1", http_port(c), "/api/status", host, &body), 200);
    json_t *doc = json_loads(strstr(body, "\r\n\r\n") + 4, 0, NULL);
    assert_non_null(doc);
    assert_string_equal(
        json_string_value(json_object_get(json_array_get(json_object_get(doc, "workers"), 0),
                                          "name")),
        name);
    json_decref(doc);
    free(body);
    E2E_STOP(c, NULL);
}

static const struct CMUnitTest tests[] = {
    H_CASE(http_metrics_answer_under_a_thousand_hostile_connections),
    H_CASE(http_caps_connections_per_address),
    H_CASE(http_releases_half_sent_requests_at_once),
    H_CASE(http_full_answers_503),
    H_CASE(http_refuses_foreign_host_names),
    H_CASE(http_host_option_adds_names),
    H_CASE(http_get_with_a_body_is_400),
    H_CASE(ctl_json_status_round_trips_a_utf8_worker_name),
};

SPW_TEST_MAIN(tests)
