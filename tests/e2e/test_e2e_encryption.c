/* Encryption between hosts (--encrypt, --encrypt-local) with real daemons on 127.0.0.1: a
 * cluster that requires TLS everywhere moves objects between a client and workers and between
 * workers with every byte checked; then each kind of peer the policy must turn away (another
 * secret, plaintext to a daemon that requires TLS, TLS to one that does not, a handshake cut
 * off half way) is refused with a code and a log line naming the cause, and the daemon goes on
 * serving others. What the bytes look like on a real wire is tests/netbed's business. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <openssl/ssl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../unit/test_main.h"
#include "e2e_util.h"

#define PATTERN_BYTES (8u << 20)

static const char *const enc_required[] = {"--encrypt", "required", "--encrypt-local",
                                           "--log-level", "debug", NULL};

/* A scheduler requiring TLS on loopback too, and n named workers (w1, w2...) alike. */
static h_cluster *encrypted_cluster(int n)
{
    h_cluster *c = h_cluster_start(true, enc_required);
    c->encrypt = true;
    for (int i = 0; i < n; i++) {
        char name[16];
        snprintf(name, sizeof name, "w%d", i + 1);
        const char *args[] = {"--slots", "1", "--store-capacity", "64M", "--name", name,
                              "--encrypt", "required", "--encrypt-local", "--log-level", "debug",
                              NULL};
        h_worker_start(c, args);
    }
    return c;
}

static int connect_with(h_cluster *c, const char *secret_file, int encrypt, spillway **out)
{
    spillway_opts o;
    spillway_opts_init(&o);
    o.secret_file = secret_file;
    o.encrypt = encrypt;
    o.encrypt_local = 1;
    o.no_local = 1; /* objects over TCP, the path that is encrypted */
    *out = NULL;
    return spillway_connect(c->addr, &o, out);
}

static void assert_log_eventually(const h_proc *p, const char *needle)
{
    if (!e2e_logged(p, needle, 10000))
        fail_msg("%s never logged '%s'", p->log, needle);
}

static uint8_t *make_pattern(void)
{
    uint8_t *p = malloc(PATTERN_BYTES);
    uint64_t x = 0x9e3779b97f4a7c15u;
    for (size_t i = 0; i < PATTERN_BYTES; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        p[i] = (uint8_t)x;
    }
    return p;
}

static void assert_object_is(spillway *cl, spillway_ref r, const uint8_t *want, size_t len)
{
    void *data = NULL;
    size_t got = 0;
    assert_int_equal(spillway_get(cl, r, 30000, &data, &got), 0);
    assert_int_equal(got, len);
    assert_memory_equal(data, want, len);
    spillway_free(data);
}

/* Everything TLS: the client puts 8 MiB to a worker's peer port, a task on w1 copies it, a
 * task on w2 copies the copy (a fetch between the workers), and the client reads both copies
 * back byte for byte; every daemon brought TLS up on its connections. */
static void encrypted_cluster_moves_every_byte_intact(void)
{
    h_cluster *c = encrypted_cluster(2);
    uint8_t *pattern = make_pattern();
    spillway *cl = NULL;
    assert_int_equal(connect_with(c, c->secret_file, SPILLWAY_ENCRYPT_REQUIRED, &cl), 0);
    spillway_ref obj, copy1, copy2;
    assert_int_equal(spillway_put(cl, pattern, PATTERN_BYTES, &obj), 0);
    spillway_graph *g = spillway_graph_new(cl);
    assert_int_equal(spillway_graph_place(g, "w1"), 0);
    spillway_arg a = spillway_arg_ref(obj);
    assert_int_equal(spillway_task(g, "echo", &a, 1, SPILLWAY_KEEP, &copy1), 0);
    assert_int_equal(spillway_graph_place(g, "w2"), 0);
    a = spillway_arg_ref(copy1);
    assert_int_equal(spillway_task(g, "echo", &a, 1, SPILLWAY_KEEP, &copy2), 0);
    E2E_SUBMIT(g);
    assert_object_is(cl, copy2, pattern, PATTERN_BYTES);
    assert_object_is(cl, copy1, pattern, PATTERN_BYTES);
    assert_object_is(cl, obj, pattern, PATTERN_BYTES);
    e2e_client_works(cl);
    assert_int_equal(spillway_release(cl, copy2), 0);
    assert_int_equal(spillway_release(cl, copy1), 0);
    assert_int_equal(spillway_release(cl, obj), 0);
    /* The scheduler's connections (two workers, this client, ctl) and the workers' peer
     * ports (the client, each other) all ran TLS; nobody was let in in plaintext. */
    assert_true(h_log_count(&c->sched, "TLS 1.3 up") >= 3);
    assert_true(h_log_count(&c->workers[0], "TLS 1.3 up") >= 2);
    assert_true(h_log_count(&c->workers[1], "TLS 1.3 up") >= 2);
    assert_int_equal(h_log_count(&c->sched, "without encryption"), 0);
    free(pattern);
    E2E_FINISH(c, cl);
}

/* A client with another secret cannot finish the TLS handshake: SPW_EAUTH, the scheduler
 * logs the wrong secret, and goes on serving. */
static void wrong_secret_fails_the_tls_handshake(void)
{
    h_cluster *c = encrypted_cluster(1);
    char wrong[600];
    snprintf(wrong, sizeof wrong, "%s/wrong", c->dir);
    e2e_write_file(wrong, "another-cluster-secret\n", 0600);
    spillway *cl;
    assert_int_equal(connect_with(c, wrong, SPILLWAY_ENCRYPT_YES, &cl), SPW_EAUTH);
    assert_log_eventually(&c->sched, "wrong or missing cluster secret");
    cl = e2e_connect(c);
    e2e_client_works(cl);
    E2E_FINISH(c, cl);
}

/* A downgrade: a client that starts in plaintext, and spillway-ctl without --encrypt, are
 * refused by a daemon that requires TLS, with SPW_EENCRYPT and a log line naming the option. */
static void plaintext_client_is_refused_by_required(void)
{
    h_cluster *c = encrypted_cluster(1);
    spillway *cl;
    assert_int_equal(connect_with(c, c->secret_file, SPILLWAY_ENCRYPT_NO, &cl), SPW_EENCRYPT);
    assert_non_null(strstr(spillway_errmsg(NULL), "--encrypt"));
    assert_log_eventually(&c->sched, "requires encryption (--encrypt required)");
    const char *argv[] = {h_bin("spillway-ctl"), "--scheduler", c->addr, "--secret-file",
                          c->secret_file,        "status",      NULL};
    char *out = NULL;
    assert_int_not_equal(h_run(argv, &out), 0);
    assert_non_null(strstr(out, "encryption settings do not match (--encrypt)"));
    free(out);
    cl = e2e_connect(c);
    e2e_client_works(cl);
    E2E_FINISH(c, cl);
}

/* A worker that does not encrypt cannot register with a scheduler that requires TLS: it is
 * told why and keeps trying; the scheduler serves the others meanwhile. */
static void plaintext_worker_is_refused_by_required(void)
{
    h_cluster *c = encrypted_cluster(1);
    const char *argv[] = {h_bin("spillway-worker"), "--scheduler", c->addr,
                          "--secret-file",          c->secret_file, "--listen",
                          "127.0.0.1:0",            "--slots",      "1",
                          "--store-capacity",       "16M",          NULL};
    pid_t pid = h_spawn(c, argv, "plainworker");
    h_proc p = {.pid = pid};
    snprintf(p.log, sizeof p.log, "%s/plainworker.log", c->dir);
    assert_log_eventually(&p, "encryption required");
    assert_log_eventually(&c->sched, "did not start TLS");
    kill(pid, SIGTERM);
    waitpid(pid, NULL, 0);
    spillway *cl = e2e_connect(c);
    e2e_client_works(cl);
    E2E_FINISH(c, cl);
}

/* A client that encrypts, to a scheduler that does not: refused with SPW_EENCRYPT, the
 * scheduler saying it does not encrypt. */
static void encrypting_client_is_refused_by_plaintext_daemon(void)
{
    h_cluster *c = h_cluster_start(true, NULL);
    spillway *cl;
    assert_int_equal(connect_with(c, c->secret_file, SPILLWAY_ENCRYPT_YES, &cl), SPW_EENCRYPT);
    assert_log_eventually(&c->sched, "this daemon does not encrypt (--encrypt no)");
    E2E_STOP(c, NULL);
}

/* --encrypt yes lets a plaintext client in, with a log line. */
static void yes_accepts_plaintext_and_says_so(void)
{
    const char *args[] = {"--encrypt", "yes", "--encrypt-local", NULL};
    h_cluster *c = h_cluster_start(true, args);
    const char *wargs[] = {"--slots", "1", "--store-capacity", "16M", "--encrypt", "yes",
                           "--encrypt-local", NULL};
    h_worker_start(c, wargs);
    spillway *cl;
    assert_int_equal(connect_with(c, c->secret_file, SPILLWAY_ENCRYPT_NO, &cl), 0);
    e2e_client_works(cl);
    assert_log_eventually(&c->sched, "connected without encryption");
    E2E_FINISH(c, cl);
}

/* A ClientHello such as any TLS client sends first (no key: the server would refuse it). */
static size_t client_hello(uint8_t *buf, size_t cap)
{
    SSL_CTX *sc = SSL_CTX_new(TLS_method());
    SSL *s = SSL_new(sc);
    BIO *r = BIO_new(BIO_s_mem()), *w = BIO_new(BIO_s_mem());
    SSL_set_bio(s, r, w);
    SSL_set_connect_state(s);
    SSL_do_handshake(s);
    int n = BIO_read(w, buf, (int)cap);
    SSL_free(s);
    SSL_CTX_free(sc);
    assert_true(n > 5);
    return (size_t)n;
}

static int raw_connect(const char *addr)
{
    int port = atoi(strrchr(addr, ':') + 1);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
    int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_int_equal(connect(s, (struct sockaddr *)&sa, sizeof sa), 0);
    return s;
}

/* Connect, send half a ClientHello, hang up: the scheduler logs the cut-off handshake and
 * serves the next client. */
static void truncated_handshake_is_dropped(void)
{
    h_cluster *c = encrypted_cluster(1);
    uint8_t hello[4096];
    size_t len = client_hello(hello, sizeof hello);
    int s = raw_connect(c->addr);
    assert_int_equal(send(s, hello, len / 2, MSG_NOSIGNAL), (ssize_t)(len / 2));
    close(s);
    assert_log_eventually(&c->sched, "TLS handshake incomplete");
    spillway *cl = e2e_connect(c);
    e2e_client_works(cl);
    E2E_FINISH(c, cl);
}

static const struct CMUnitTest tests[] = {
    H_CASE(encrypted_cluster_moves_every_byte_intact),
    H_CASE(wrong_secret_fails_the_tls_handshake),
    H_CASE(plaintext_client_is_refused_by_required),
    H_CASE(plaintext_worker_is_refused_by_required),
    H_CASE(encrypting_client_is_refused_by_plaintext_daemon),
    H_CASE(yes_accepts_plaintext_and_says_so),
    H_CASE(truncated_handshake_is_dropped),
};

SPW_TEST_MAIN(tests)
