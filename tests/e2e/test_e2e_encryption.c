/* Encryption between hosts (--encrypt, --encrypt-local) with real daemons on 127.0.0.1: a
 * cluster that requires TLS everywhere moves objects between a client and workers and between
 * workers with every byte checked; then each kind of peer the policy must turn away (another
 * secret, plaintext to a daemon that requires TLS, TLS to one that does not, a handshake cut
 * off half way) is refused with a code and a log line naming the cause, and the daemon goes on
 * serving others. With certificates (--tls-cert/--tls-key/--tls-ca, made here by the openssl
 * command at run time) the same holds for an expired certificate, one of another CA, a server
 * certificate naming another host, a peer with only the secret's key, and a ClientHello that
 * offers only TLS 1.2. What the bytes look like on a real wire is tests/netbed's business. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <openssl/ssl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
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

/* A ClientHello such as any TLS client sends first (no key: the server would refuse it),
 * offering versions up to max (0: any). */
static size_t client_hello_max(uint8_t *buf, size_t cap, int max)
{
    SSL_CTX *sc = SSL_CTX_new(TLS_method());
    if (max != 0)
        SSL_CTX_set_max_proto_version(sc, max);
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

static size_t client_hello(uint8_t *buf, size_t cap)
{
    return client_hello_max(buf, cap, 0);
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
static void assert_truncated_handshake_dropped(h_cluster *c)
{
    uint8_t hello[4096];
    size_t len = client_hello(hello, sizeof hello);
    int s = raw_connect(c->addr);
    assert_int_equal(send(s, hello, len / 2, MSG_NOSIGNAL), (ssize_t)(len / 2));
    close(s);
    assert_log_eventually(&c->sched, "TLS handshake incomplete");
}

static void truncated_handshake_is_dropped(void)
{
    h_cluster *c = encrypted_cluster(1);
    assert_truncated_handshake_dropped(c);
    spillway *cl = e2e_connect(c);
    e2e_client_works(cl);
    E2E_FINISH(c, cl);
}

/* ------------------------------------------------------------ certificates */

static char g_pki[64]; /* the certificates of this process's cases, made once */

static void pki_remove(void)
{
    const char *argv[] = {"/bin/rm", "-rf", g_pki, NULL};
    h_run(argv, NULL);
}

/* Runs the openssl command (argv[0] is replaced by its path); a host without it skips. */
static void openssl_run(const char **argv)
{
    static const char *const where[] = {"/usr/bin/openssl", "/usr/local/bin/openssl",
                                        "/bin/openssl"};
    argv[0] = NULL;
    for (size_t i = 0; i < sizeof where / sizeof where[0] && argv[0] == NULL; i++)
        if (access(where[i], X_OK) == 0)
            argv[0] = where[i];
    if (argv[0] == NULL)
        h_skip();
    char *out = NULL;
    if (h_run(argv, &out) != 0)
        fail_msg("openssl %s failed: %s", argv[1], out);
    free(out);
}

static const char *pki(const char *name)
{
    static char path[8][128];
    static int next;
    char *p = path[next++ % 8];
    snprintf(p, sizeof path[0], "%s/%s", g_pki, name);
    return p;
}

/* Makes CA NAME (NAME.pem, NAME.key), self-signed. */
static void pki_ca(const char *name)
{
    char pem[128], key[128], subj[64];
    snprintf(pem, sizeof pem, "%s", pki(name)), strcat(pem, ".pem");
    snprintf(key, sizeof key, "%s", pki(name)), strcat(key, ".key");
    snprintf(subj, sizeof subj, "/CN=%s", name);
    const char *argv[] = {"openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                          "ec_paramgen_curve:P-256", "-nodes", "-days", "2", "-subj", subj,
                          "-keyout", key, "-out", pem, NULL};
    openssl_run(argv);
}

/* Makes NAME.pem/NAME.key signed by CA, valid for days (negative: expired), for subject
 * alternative name san. */
static void pki_cert(const char *name, const char *ca, const char *days, const char *san)
{
    char pem[128], key[128], csr[128], ext[128], capem[128], cakey[128], subj[64], text[128];
    snprintf(pem, sizeof pem, "%s.pem", pki(name));
    snprintf(key, sizeof key, "%s.key", pki(name));
    snprintf(csr, sizeof csr, "%s.csr", pki(name));
    snprintf(ext, sizeof ext, "%s.ext", pki(name));
    snprintf(capem, sizeof capem, "%s.pem", pki(ca));
    snprintf(cakey, sizeof cakey, "%s.key", pki(ca));
    snprintf(subj, sizeof subj, "/CN=%s", name);
    snprintf(text, sizeof text, "subjectAltName=%s\nbasicConstraints=CA:FALSE\n", san);
    e2e_write_file(ext, text, 0600);
    const char *req[] = {"openssl", "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
                         "-nodes", "-subj", subj, "-keyout", key, "-out", csr, NULL};
    openssl_run(req);
    const char *sign[] = {"openssl", "x509", "-req", "-in", csr, "-CA", capem, "-CAkey", cakey,
                          "-CAcreateserial", "-days", days, "-extfile", ext, "-out", pem, NULL};
    openssl_run(sign);
}

/* The certificates: "node" for every daemon and good client (IP 127.0.0.1), "expired", and
 * "stranger" from another CA; all of P-256 keys, so they are quick to make. */
static void pki_make(void)
{
    if (g_pki[0] != 0)
        return;
    snprintf(g_pki, sizeof g_pki, "/tmp/spw-pki-XXXXXX");
    assert_non_null(mkdtemp(g_pki));
    atexit(pki_remove);
    pki_ca("ca");
    pki_ca("otherca");
    pki_cert("node", "ca", "2", "IP:127.0.0.1");
    pki_cert("expired", "ca", "-1", "IP:127.0.0.1");
    pki_cert("stranger", "otherca", "2", "IP:127.0.0.1");
}

/* Sets a[0..6) to the --tls-* options for certificate NAME. */
static void cert_args(const char **a, const char *name)
{
    static char pem[3][128], key[3][128];
    static int next;
    int i = next++ % 3;
    snprintf(pem[i], sizeof pem[i], "%s.pem", pki(name));
    snprintf(key[i], sizeof key[i], "%s.key", pki(name));
    a[0] = "--tls-cert", a[1] = pem[i], a[2] = "--tls-key", a[3] = key[i];
    a[4] = "--tls-ca", a[5] = pki("ca.pem");
}

/* A scheduler and a worker that require TLS with certificate "node". */
static h_cluster *cert_cluster(void)
{
    pki_make();
    const char *args[16] = {"--encrypt", "required", "--encrypt-local", "--log-level", "debug"};
    cert_args(args + 5, "node");
    h_cluster *c = h_cluster_start(true, args);
    const char *wargs[20] = {"--slots",   "1",        "--store-capacity", "16M",
                             "--encrypt", "required", "--encrypt-local",  "--log-level",
                             "debug"};
    cert_args(wargs + 9, "node");
    h_worker_start(c, wargs);
    return c;
}

/* A client of c presenting certificate name (NULL: none, the secret's key only), at addr (NULL:
 * the scheduler's). */
static int connect_cert(h_cluster *c, const char *name, const char *addr, spillway **out)
{
    spillway_opts o;
    spillway_opts_init(&o);
    o.secret_file = c->secret_file;
    o.encrypt = SPILLWAY_ENCRYPT_REQUIRED;
    o.encrypt_local = 1;
    o.no_local = 1;
    char pem[128], key[128];
    if (name != NULL) {
        snprintf(pem, sizeof pem, "%s.pem", pki(name));
        snprintf(key, sizeof key, "%s.key", pki(name));
        o.tls_cert = pem;
        o.tls_key = key;
        o.tls_ca = pki("ca.pem");
    }
    *out = NULL;
    return spillway_connect(addr != NULL ? addr : c->addr, &o, out);
}

/* The scheduler still serves a client with a good certificate. */
static void cert_cluster_serves(h_cluster *c)
{
    spillway *cl;
    assert_int_equal(connect_cert(c, "node", NULL, &cl), 0);
    e2e_client_works(cl);
    E2E_STOP(c, cl); /* the idle check's ctl has no certificate */
}

/* Mutual TLS by certificates: a client, a worker and spillway-ctl all get in, objects cross
 * TLS byte for byte, and the ciphersuite is AES-128-GCM. */
static void certificates_let_the_cluster_in(void)
{
    h_cluster *c = cert_cluster();
    spillway *cl;
    assert_int_equal(connect_cert(c, "node", NULL, &cl), 0);
    uint8_t *pattern = make_pattern();
    spillway_ref obj;
    assert_int_equal(spillway_put(cl, pattern, PATTERN_BYTES, &obj), 0);
    assert_object_is(cl, obj, pattern, PATTERN_BYTES);
    assert_int_equal(spillway_release(cl, obj), 0);
    free(pattern);
    e2e_client_works(cl);
    const char *argv[20] = {h_bin("spillway-ctl"), "--scheduler", c->addr, "--secret-file",
                            c->secret_file, "--encrypt", "required", "--encrypt-local"};
    cert_args(argv + 8, "node");
    argv[14] = "status";
    char *out = NULL;
    assert_int_equal(h_run(argv, &out), 0);
    free(out);
    assert_true(h_log_count(&c->sched, "TLS 1.3 up (TLS_AES_128_GCM_SHA256)") >= 3);
    assert_int_equal(h_log_count(&c->sched, "refused"), 0);
    E2E_STOP(c, cl); /* the idle check's ctl has no certificate */
}

/* A client whose certificate has expired: SPW_EAUTH, the scheduler says so. */
static void expired_certificate_is_refused(void)
{
    h_cluster *c = cert_cluster();
    spillway *cl;
    assert_int_equal(connect_cert(c, "expired", NULL, &cl), SPW_EAUTH);
    assert_log_eventually(&c->sched, "certificate is refused: certificate has expired");
    cert_cluster_serves(c);
}

/* A certificate from another CA: refused, the scheduler naming the missing issuer. */
static void certificate_of_another_ca_is_refused(void)
{
    h_cluster *c = cert_cluster();
    spillway *cl;
    assert_int_equal(connect_cert(c, "stranger", NULL, &cl), SPW_EAUTH);
    assert_log_eventually(&c->sched, "certificate is refused: unable to get local issuer");
    cert_cluster_serves(c);
}

/* A server reached by a name its certificate does not carry ("localhost"; it names
 * 127.0.0.1 only): the worker connecting so refuses it, saying the name does not match. */
static void server_certificate_of_another_name_is_refused(void)
{
    h_cluster *c = cert_cluster();
    char byname[80];
    snprintf(byname, sizeof byname, "localhost%s", strrchr(c->addr, ':'));
    const char *argv[24] = {h_bin("spillway-worker"), "--scheduler", byname, "--secret-file",
                            c->secret_file, "--listen", "127.0.0.1:0", "--slots", "1",
                            "--store-capacity", "16M", "--encrypt", "required",
                            "--encrypt-local"};
    cert_args(argv + 14, "node");
    pid_t pid = h_spawn(c, argv, "byname");
    h_proc p = {.pid = pid};
    snprintf(p.log, sizeof p.log, "%s/byname.log", c->dir);
    assert_log_eventually(&p, "certificate is refused: hostname mismatch");
    assert_log_eventually(&c->sched, "the peer refused us");
    kill(pid, SIGTERM);
    waitpid(pid, NULL, 0);
    cert_cluster_serves(c);
}

/* A client with the secret's key but no certificate cannot get in where certificates are
 * asked for: the scheduler says it sent none. */
static void peer_without_certificate_is_refused(void)
{
    h_cluster *c = cert_cluster();
    spillway *cl;
    assert_int_not_equal(connect_cert(c, NULL, NULL, &cl), 0);
    assert_log_eventually(&c->sched, "did not return a certificate");
    cert_cluster_serves(c);
}

/* A downgrade: a ClientHello offering TLS 1.2 at most gets a protocol_version alert, the
 * scheduler naming the protocol. */
static void assert_tls12_refused(h_cluster *c)
{
    uint8_t hello[4096];
    size_t len = client_hello_max(hello, sizeof hello, TLS1_2_VERSION);
    int s = raw_connect(c->addr);
    assert_int_equal(send(s, hello, len, MSG_NOSIGNAL), (ssize_t)len);
    /* The plaintext CHALLENGE every server sends on accept, then a fatal protocol_version
     * alert record (level 2, description 70), then the end. */
    uint8_t reply[4096];
    size_t got = 0;
    ssize_t n;
    struct timeval tv = {.tv_sec = 10};
    setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    while (got < sizeof reply && (n = recv(s, reply + got, sizeof reply - got, 0)) > 0)
        got += (size_t)n;
    close(s);
    static const uint8_t alert[] = {0x00, 0x02, 0x02, 70};
    bool found = false;
    for (size_t i = 0; i + 7 <= got && !found; i++)
        found = reply[i] == 0x15 && reply[i + 1] == 0x03 && memcmp(reply + i + 3, alert, 4) == 0;
    assert_true(found);
    assert_log_eventually(&c->sched, "unsupported protocol");
}

static void tls12_client_hello_is_refused(void)
{
    h_cluster *c = cert_cluster();
    assert_tls12_refused(c);
    cert_cluster_serves(c);
}

/* The same where the secret's key is the TLS key. */
static void tls12_client_hello_is_refused_with_the_secret_key(void)
{
    h_cluster *c = encrypted_cluster(1);
    assert_tls12_refused(c);
    spillway *cl = e2e_connect(c);
    e2e_client_works(cl);
    E2E_FINISH(c, cl);
}

/* Half a handshake, then the end: dropped where certificates are asked for too. */
static void truncated_handshake_is_dropped_with_certificates(void)
{
    h_cluster *c = cert_cluster();
    assert_truncated_handshake_dropped(c);
    cert_cluster_serves(c);
}

/* Certificate files the daemon cannot read stop it at start, naming the file and why. */
static void unreadable_certificate_stops_the_daemon(void)
{
    pki_make();
    h_cluster *c = h_cluster_bare();
    char secret[300], nofile[300];
    snprintf(secret, sizeof secret, "%s/secret", c->dir);
    snprintf(nofile, sizeof nofile, "%s/none.pem", c->dir);
    e2e_write_file(secret, "s3cret-for-the-certificate-case\n", 0600);
    const char *argv[] = {h_bin("spillway-scheduler"), "--listen", "127.0.0.1:0",
                          "--secret-file", secret, "--encrypt", "required", "--tls-cert",
                          nofile, "--tls-key", pki("node.key"), "--tls-ca", pki("ca.pem"),
                          NULL};
    char *out = NULL;
    assert_int_not_equal(h_run(argv, &out), 0);
    if (strstr(out, nofile) == NULL || strstr(out, "No such file or directory") == NULL)
        fail_msg("output lacks the file and the cause: %s", out);
    free(out);
    /* A key that is no key: named, with OpenSSL's reason. */
    argv[8] = pki("node.pem"), argv[10] = pki("ca.pem");
    assert_int_not_equal(h_run(argv, &out), 0);
    if (strstr(out, "cannot use tls-key") == NULL)
        fail_msg("output lacks the bad key: %s", out);
    free(out);
}

static const struct CMUnitTest tests[] = {
    H_CASE(encrypted_cluster_moves_every_byte_intact),
    H_CASE(wrong_secret_fails_the_tls_handshake),
    H_CASE(plaintext_client_is_refused_by_required),
    H_CASE(plaintext_worker_is_refused_by_required),
    H_CASE(encrypting_client_is_refused_by_plaintext_daemon),
    H_CASE(yes_accepts_plaintext_and_says_so),
    H_CASE(truncated_handshake_is_dropped),
    H_CASE(certificates_let_the_cluster_in),
    H_CASE(expired_certificate_is_refused),
    H_CASE(certificate_of_another_ca_is_refused),
    H_CASE(server_certificate_of_another_name_is_refused),
    H_CASE(peer_without_certificate_is_refused),
    H_CASE(tls12_client_hello_is_refused),
    H_CASE(tls12_client_hello_is_refused_with_the_secret_key),
    H_CASE(truncated_handshake_is_dropped_with_certificates),
    H_CASE(unreadable_certificate_stops_the_daemon),
};

SPW_TEST_MAIN(tests)
