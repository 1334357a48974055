/*
 * proto_conn encryption: TLS 1.3 between the socket and the framing, with an external
 * pre-shared key derived from the cluster secret (HKDF-SHA256), so no certificate is needed and
 * a peer without the secret cannot finish the handshake. OpenSSL runs over a BIO of our own
 * (conn_bio) that copies nothing twice: it hands OpenSSL the ciphertext where the socket read put
 * it (ctx->tls_rbuf; what a paused connection leaves is kept in t->rin) and appends OpenSSL's
 * records to t->out, which becomes c->wire when written. SSL_read puts plaintext where
 * conn__in_room says (c->in, or a sink's memory). Only this file speaks OpenSSL.
 * The accepting side decides TLS or plaintext by the peer's first byte (conn__tls_detect); the
 * HMAC handshake of auth.c then runs inside TLS unchanged. Everything runs on the loop's thread;
 * ctx->tls_rbuf is shared by a ctx's connections because a read is fed to TLS before the next.
 */
#include "conn_int.h"

#include <arpa/inet.h>
#include <errno.h>
#include <openssl/core_names.h>
#include <openssl/err.h>
#include <openssl/kdf.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#define TLS_RECORD_BYTE 0x16 /* a TLS handshake record; a frame's length starts with 0x00 */
#define TLS_RECORD_MAX 16384 /* plaintext per record */
#define TLS_RECORD_EXTRA 22  /* a record's header, inner content type and tag */

typedef struct conn_tls {
    SSL *ssl;
    BIO *bio; /* conn_bio over this struct, owned by ssl */
    /* Ciphertext for OpenSSL to read: t->rin's bytes from rin_off on (kept from earlier reads),
     * then the rn bytes at rp (the read being fed, not ours). */
    spw_buf rin;
    size_t rin_off;
    const uint8_t *rp;
    size_t rn;
    spw_buf out; /* ciphertext OpenSSL wrote, not yet taken into c->wire */
    bool up;     /* the TLS handshake finished */
    bool pre;    /* client: the server's plaintext CHALLENGE may precede its TLS reply */
} conn_tls;

static const char psk_identity[] = "spillway-psk-v1";
/* TLS_AES_128_GCM_SHA256: its hash (SHA-256) is the one the key was made for. */
static const unsigned char psk_cipher[2] = {0x13, 0x01};

/* conn_bio: OpenSSL reads ciphertext from t->rin, then from the read being fed; never blocks. */
static int bio_read(BIO *b, char *buf, size_t len, size_t *got)
{
    conn_tls *t = BIO_get_data(b);
    size_t n = 0;
    if (t->rin.len > t->rin_off) {
        n = t->rin.len - t->rin_off;
        n = n < len ? n : len;
        memcpy(buf, t->rin.data + t->rin_off, n);
        t->rin_off += n;
        if (t->rin_off == t->rin.len)
            t->rin.len = t->rin_off = 0;
    } else if (t->rn > 0) {
        n = t->rn < len ? t->rn : len;
        memcpy(buf, t->rp, n);
        t->rp += n;
        t->rn -= n;
    }
    BIO_clear_retry_flags(b);
    if (n == 0) {
        BIO_set_retry_read(b); /* nothing yet: "want more", never end of file */
        return 0;
    }
    *got = n;
    return 1;
}

/* conn_bio: OpenSSL's records go to the end of t->out, all of them. */
static int bio_write(BIO *b, const char *buf, size_t len, size_t *put)
{
    conn_tls *t = BIO_get_data(b);
    BIO_clear_retry_flags(b);
    if (spw_buf_reserve(&t->out, len) != 0)
        return 0;
    memcpy(t->out.data + t->out.len, buf, len);
    t->out.len += len;
    *put = len;
    return 1;
}

static long bio_ctrl(BIO *b, int cmd, long num, void *ptr)
{
    (void)num;
    (void)ptr;
    conn_tls *t = BIO_get_data(b);
    switch (cmd) {
    case BIO_CTRL_FLUSH:
        return 1;
    case BIO_CTRL_PENDING:
        return (long)(t->rin.len - t->rin_off + t->rn);
    case BIO_CTRL_WPENDING:
        return (long)t->out.len;
    default:
        return 0;
    }
}

static int bio_create(BIO *b)
{
    BIO_set_init(b, 1);
    return 1;
}

static BIO_METHOD *bio_method_new(void)
{
    BIO_METHOD *m = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "spillway conn");
    if (m == NULL || !BIO_meth_set_read_ex(m, bio_read) || !BIO_meth_set_write_ex(m, bio_write) ||
        !BIO_meth_set_ctrl(m, bio_ctrl) || !BIO_meth_set_create(m, bio_create)) {
        BIO_meth_free(m);
        return NULL;
    }
    return m;
}

/* OpenSSL's reason for the last failure, for a log line; its error queue is emptied. */
static const char *tls_reason(char *buf, size_t len)
{
    unsigned long e = ERR_peek_last_error();
    if (e == 0)
        snprintf(buf, len, "no reason given");
    else
        ERR_error_string_n(e, buf, len);
    ERR_clear_error();
    return buf;
}

static SSL_SESSION *psk_session(SSL *ssl)
{
    proto_ctx *ctx = SSL_CTX_get_app_data(SSL_get_SSL_CTX(ssl));
    const SSL_CIPHER *cipher = SSL_CIPHER_find(ssl, psk_cipher);
    SSL_SESSION *s = SSL_SESSION_new();
    if (cipher == NULL || s == NULL ||
        !SSL_SESSION_set1_master_key(s, ctx->tls_psk, sizeof ctx->tls_psk) ||
        !SSL_SESSION_set_cipher(s, cipher) ||
        !SSL_SESSION_set_protocol_version(s, TLS1_3_VERSION)) {
        SSL_SESSION_free(s);
        return NULL;
    }
    return s;
}

/* Client: offer the key (for the ciphersuite's hash; md is NULL on the first call). */
static int psk_use(SSL *ssl, const EVP_MD *md, const unsigned char **id, size_t *idlen,
                   SSL_SESSION **sess)
{
    SSL_SESSION *s = psk_session(ssl);
    if (s == NULL)
        return 0;
    if (md != NULL && md != SSL_CIPHER_get_handshake_digest(SSL_SESSION_get0_cipher(s))) {
        SSL_SESSION_free(s);
        *sess = NULL;
        return 1;
    }
    *id = (const unsigned char *)psk_identity;
    *idlen = sizeof psk_identity - 1;
    *sess = s;
    return 1;
}

/* Server: the key for our identity; any other identity gets none (the handshake fails). */
static int psk_find(SSL *ssl, const unsigned char *id, size_t idlen, SSL_SESSION **sess)
{
    *sess = NULL;
    if (idlen != sizeof psk_identity - 1 || memcmp(id, psk_identity, idlen) != 0)
        return 1;
    *sess = psk_session(ssl);
    return *sess != NULL;
}

/* HKDF-SHA256(secret, salt "spillway", info label): one key per purpose. */
static int derive_key(const proto_ctx *ctx, const char *label, uint8_t *out, size_t len)
{
    EVP_KDF *kdf = EVP_KDF_fetch(NULL, "HKDF", NULL);
    EVP_KDF_CTX *kc = kdf != NULL ? EVP_KDF_CTX_new(kdf) : NULL;
    EVP_KDF_free(kdf);
    if (kc == NULL)
        return SPW_ETLS;
    OSSL_PARAM p[] = {
        OSSL_PARAM_construct_utf8_string(OSSL_KDF_PARAM_DIGEST, (char *)"SHA256", 0),
        OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_KEY, ctx->secret, ctx->opts.secret_len),
        OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_SALT, (char *)"spillway", 8),
        OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_INFO, (char *)label, strlen(label)),
        OSSL_PARAM_construct_end()};
    int ok = EVP_KDF_derive(kc, out, len, p);
    EVP_KDF_CTX_free(kc);
    return ok == 1 ? 0 : SPW_ETLS;
}

/* A file an option names must be readable: else the option, the file and the cause are logged. */
static int cert_file_readable(const char *opt, const char *path)
{
    FILE *f = fopen(path, "r");
    if (f == NULL) {
        spw_log(SPW_LOG_ERR, "tls: cannot read %s %s: %s", opt, path, strerror(errno));
        return SPW_ETLS;
    }
    fclose(f);
    return 0;
}

/* Certificate mode: our certificate and key, and the CA both ends' certificates must come from;
 * a peer without a certificate is refused. Logs what is wrong with which file. */
static int certs_load(const proto_ctx_opts *o, SSL_CTX *sc)
{
    char why[256];
    if (cert_file_readable("tls-cert", o->tls_cert) != 0 ||
        cert_file_readable("tls-key", o->tls_key) != 0 ||
        cert_file_readable("tls-ca", o->tls_ca) != 0)
        return SPW_ETLS;
    const char *bad = NULL, *file = NULL;
    if (SSL_CTX_use_certificate_chain_file(sc, o->tls_cert) != 1)
        bad = "tls-cert", file = o->tls_cert;
    else if (SSL_CTX_use_PrivateKey_file(sc, o->tls_key, SSL_FILETYPE_PEM) != 1)
        bad = "tls-key", file = o->tls_key;
    else if (SSL_CTX_check_private_key(sc) != 1)
        bad = "tls-key (it does not match tls-cert)", file = o->tls_key;
    else if (SSL_CTX_load_verify_locations(sc, o->tls_ca, NULL) != 1)
        bad = "tls-ca", file = o->tls_ca;
    if (bad != NULL) {
        spw_log(SPW_LOG_ERR, "tls: cannot use %s %s: %s", bad, file, tls_reason(why, sizeof why));
        return SPW_ETLS;
    }
    SSL_CTX_set_verify(sc, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, NULL);
    return 0;
}

int conn__tls_ctx_init(proto_ctx *ctx)
{
    proto_ctx_opts *o = &ctx->opts;
    int nfiles = (o->tls_cert != NULL) + (o->tls_key != NULL) + (o->tls_ca != NULL);
    int rc = 0;
    if (nfiles > 0 && nfiles < 3) {
        spw_log(SPW_LOG_ERR,
                "tls: tls-cert, tls-key and tls-ca go together (mutual TLS); %s is "
                "missing",
                o->tls_cert == NULL  ? "tls-cert"
                : o->tls_key == NULL ? "tls-key"
                                     : "tls-ca");
        rc = SPW_EINVAL;
    } else if (nfiles == 3 && o->encrypt == PROTO_ENCRYPT_NO) {
        spw_log(SPW_LOG_ERR, "tls: certificates (tls-cert) are for encryption: set encrypt to "
                             "yes or required");
        rc = SPW_EINVAL;
    }
    if (rc != 0 || o->encrypt == PROTO_ENCRYPT_NO)
        goto out;
    if (ctx->secret == NULL) {
        spw_log(SPW_LOG_ERR, "encryption needs the cluster secret: its key is made from it");
        rc = SPW_EINVAL;
        goto out;
    }
    char why[256];
    if (derive_key(ctx, "spillway tls psk v1", ctx->tls_psk, sizeof ctx->tls_psk) != 0) {
        spw_log(SPW_LOG_ERR, "tls: cannot derive the key: %s", tls_reason(why, sizeof why));
        rc = SPW_ETLS;
        goto out;
    }
    SSL_CTX *sc = SSL_CTX_new(TLS_method());
    if (sc == NULL || !SSL_CTX_set_min_proto_version(sc, TLS1_3_VERSION) ||
        !SSL_CTX_set_max_proto_version(sc, TLS1_3_VERSION) ||
        !SSL_CTX_set_ciphersuites(sc, "TLS_AES_128_GCM_SHA256") ||
        !SSL_CTX_set_num_tickets(sc, 0)) {
        spw_log(SPW_LOG_ERR, "tls: cannot set up: %s", tls_reason(why, sizeof why));
        SSL_CTX_free(sc);
        sodium_memzero(ctx->tls_psk, sizeof ctx->tls_psk);
        rc = SPW_ETLS;
        goto out;
    }
    if (nfiles == 3 && certs_load(o, sc) != 0) {
        SSL_CTX_free(sc);
        sodium_memzero(ctx->tls_psk, sizeof ctx->tls_psk);
        rc = SPW_ETLS;
        goto out;
    }
    ctx->tls_certs = nfiles == 3;
    /* No tickets: every connection authenticates with the cluster key, none resumes. Kernel
     * TLS (SSL_OP_ENABLE_KTLS) is not asked for: it works on socket BIOs, not memory ones. */
    SSL_CTX_set_options(sc, SSL_OP_NO_TICKET);
    /* OpenSSL's record buffers go back to the heap while a connection has nothing in them until
     * its handshake is done: a stalled peer (one that never finishes it) holds its SSL object
     * only. A peer past it has the key: its buffers are kept (conn__tls_pump). Partial writes
     * let a slice end inside a buffer. */
    SSL_CTX_set_mode(sc, SSL_MODE_RELEASE_BUFFERS | SSL_MODE_ENABLE_PARTIAL_WRITE |
                             SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    SSL_CTX_set_app_data(sc, ctx);
    if (!ctx->tls_certs) {
        SSL_CTX_set_psk_use_session_callback(sc, psk_use);
        SSL_CTX_set_psk_find_session_callback(sc, psk_find);
    }
    ctx->tls_bio = bio_method_new();
    if (ctx->tls_bio == NULL) {
        spw_log(SPW_LOG_ERR, "tls: cannot set up: %s", tls_reason(why, sizeof why));
        SSL_CTX_free(sc);
        sodium_memzero(ctx->tls_psk, sizeof ctx->tls_psk);
        rc = SPW_ETLS;
        goto out;
    }
    ctx->tls = sc;
    ctx->tls_rbuf = spw_malloc(SPW_MOD_PROTO, CONN_TLS_RBUF);
out:
    o->tls_cert = o->tls_key = o->tls_ca = NULL; /* read: the caller's strings may go */
    return rc;
}

void conn__tls_ctx_free(proto_ctx *ctx)
{
    if (ctx->tls == NULL)
        return;
    SSL_CTX_free(ctx->tls);
    ctx->tls = NULL;
    BIO_meth_free(ctx->tls_bio);
    ctx->tls_bio = NULL;
    spw_free(ctx->tls_rbuf);
    ctx->tls_rbuf = NULL;
    sodium_memzero(ctx->tls_psk, sizeof ctx->tls_psk);
}

static bool addr_is_loopback(const struct sockaddr *sa)
{
    if (sa->sa_family == AF_INET)
        return (ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr) >> 24) == 127;
    if (sa->sa_family == AF_INET6) {
        const struct in6_addr *a = &((const struct sockaddr_in6 *)sa)->sin6_addr;
        if (IN6_IS_ADDR_LOOPBACK(a))
            return true;
        return IN6_IS_ADDR_V4MAPPED(a) && a->s6_addr[12] == 127;
    }
    return false;
}

bool conn__tls_wanted(proto_conn *c)
{
    if (c->is_unix || c->ctx->opts.encrypt == PROTO_ENCRYPT_NO)
        return false;
    if (c->ctx->opts.encrypt_local)
        return true;
    struct sockaddr_storage ss;
    int len = sizeof ss;
    if (uv_tcp_getpeername(&c->h.tcp, (struct sockaddr *)&ss, &len) != 0)
        return true;
    return !addr_is_loopback((struct sockaddr *)&ss);
}

bool conn__tls_up(const proto_conn *c)
{
    return c->tls != NULL && c->tls->up;
}

/* Certificate mode, connecting: the server's certificate must carry the name (or IP address)
 * we connected to. */
static int peer_name_expect(proto_conn *c, SSL *ssl)
{
    spw_addr a;
    if (spw_addr_parse(c->peer, -1, &a) != 0) {
        spw_log(SPW_LOG_ERR, "peer=%s tls: no host name to check its certificate against", c->peer);
        return SPW_ETLS;
    }
    X509_VERIFY_PARAM *vp = SSL_get0_param(ssl);
    int ok = a.numeric ? X509_VERIFY_PARAM_set1_ip_asc(vp, a.host)
                       : X509_VERIFY_PARAM_set1_host(vp, a.host, 0) &&
                             SSL_set_tlsext_host_name(ssl, a.host);
    if (!ok) {
        char why[256];
        spw_log(SPW_LOG_ERR, "peer=%s tls: %s", c->peer, tls_reason(why, sizeof why));
        return SPW_ETLS;
    }
    return 0;
}

int conn__tls_start(proto_conn *c, bool server)
{
    conn_tls *t = spw_calloc(SPW_MOD_PROTO, 1, sizeof *t);
    t->ssl = SSL_new(c->ctx->tls);
    t->bio = BIO_new(c->ctx->tls_bio);
    if (t->ssl == NULL || t->bio == NULL) {
        char why[256];
        spw_log(SPW_LOG_ERR, "peer=%s tls: %s", c->peer, tls_reason(why, sizeof why));
        BIO_free(t->bio);
        SSL_free(t->ssl);
        spw_free(t);
        return SPW_ETLS;
    }
    BIO_set_data(t->bio, t);
    SSL_set_bio(t->ssl, t->bio, t->bio); /* one reference, for both directions */
    if (c->ctx->tls_certs && !server && peer_name_expect(c, t->ssl) != 0) {
        SSL_free(t->ssl);
        spw_free(t);
        return SPW_ETLS;
    }
    c->tls = t;
    if (server) {
        SSL_set_accept_state(t->ssl);
    } else {
        SSL_set_connect_state(t->ssl);
        t->pre = true;
        conn__tls_pump(c); /* the ClientHello */
    }
    return 0;
}

void conn__tls_free(proto_conn *c)
{
    if (c->tls == NULL)
        return;
    SSL_free(c->tls->ssl);
    spw_buf_release(&c->tls->rin);
    spw_buf_release(&c->tls->out);
    spw_free(c->tls);
    c->tls = NULL;
}

/* The handshake failed: logged with the reason (a key that does not match names the secret),
 * the alert for the peer written if it can be, and the connection closed. */
static void tls_fail(proto_conn *c, int err)
{
    char why[256], msg[400];
    int code = SPW_ETLS;
    unsigned long e = ERR_peek_last_error();
    int reason = ERR_GET_REASON(e);
    tls_reason(why, sizeof why);
    long vr = SSL_get_verify_result(c->tls->ssl);
    if (c->ctx->tls_certs && !c->tls->up && vr != X509_V_OK) {
        /* Certificate mode: the peer's certificate did not pass: say why (expired, another
         * CA, another name, none at all). */
        code = SPW_EAUTH;
        snprintf(msg, sizeof msg,
                 "TLS handshake failed: the peer's certificate is refused: %s (%s) err=SPW_EAUTH",
                 X509_verify_cert_error_string(vr), why);
    } else if (!c->ctx->tls_certs && err == SSL_ERROR_SSL && !c->tls->up &&
               (reason == SSL_R_BINDER_DOES_NOT_VERIFY ||
                (!c->server && reason == SSL_R_SSLV3_ALERT_ILLEGAL_PARAMETER) ||
                reason == SSL_R_TLSV1_ALERT_DECRYPT_ERROR)) {
        /* A key that does not match: the server finds the binder wrong and answers with an
         * illegal_parameter alert, the only thing our handshake can have wrong for it. */
        code = SPW_EAUTH;
        snprintf(msg, sizeof msg,
                 "TLS handshake failed: wrong or missing cluster secret (%s) err=SPW_EAUTH", why);
    } else if (c->ctx->tls_certs && err == SSL_ERROR_SSL && ERR_GET_LIB(e) == ERR_LIB_SSL &&
               reason >= SSL_AD_REASON_OFFSET && c->state < ST_READY) {
        /* The peer refused our certificate (or the handshake) with an alert that names why.
         * Under TLS 1.3 a client's handshake is done before the server has checked its
         * certificate: the alert comes as the first record. */
        code = SPW_EAUTH;
        snprintf(msg, sizeof msg, "TLS handshake failed: the peer refused us: %s err=SPW_EAUTH",
                 why);
    } else {
        snprintf(msg, sizeof msg, "TLS %s failed: %s err=SPW_ETLS",
                 c->tls->up ? "record" : "handshake", why);
    }
    if (c->server)
        conn__log_limited(c->ctx, LIM_TLS, "peer=%s refused: %s", c->peer, msg);
    else
        spw_log(SPW_LOG_WARN, "peer=%s %s", c->peer, msg);
    if (c->close_status == 0)
        c->close_status = code;
    /* The alert goes out if the socket takes it now; nothing waits for it. */
    size_t len = conn__tls_take(c);
    if (len > 0 && !c->writing) {
        uv_buf_t b = uv_buf_init((char *)c->wire.data, (unsigned)len);
        (void)uv_try_write(&c->h.stream, &b, 1);
    }
    conn__do_close(c);
}

/* Ciphertext for OpenSSL to read after what it has not read yet. */
static void tls_keep(conn_tls *t, const uint8_t *p, size_t n)
{
    if (t->rin_off > 0) {
        spw_buf_consume(&t->rin, t->rin_off);
        t->rin_off = 0;
    }
    spw_buf_append(&t->rin, p, n);
}

/* Client, before the server's first TLS byte: the plaintext CHALLENGE every server sends on
 * accept is skipped (a frame before the handshake is under 4 KiB, so its length starts with a
 * zero byte; a TLS record's content type never is zero); an ERROR (a server that does not encrypt
 * refusing our ClientHello) is reported as a refusal. Consumes c->in; false when c was closed or
 * more bytes are needed. */
static bool skip_plain(proto_conn *c)
{
    conn_tls *t = c->tls;
    proto_limits lim = c->ctx->opts.limits;
    lim.max_frame = PROTO_PREAUTH_MAX_FRAME;
    while (c->in.len > 0) {
        if (c->in.data[0] != 0) { /* a TLS record: a handshake, or an alert refusing us */
            t->pre = false;
            tls_keep(t, c->in.data, c->in.len);
            c->in.len = 0;
            return true;
        }
        proto_msg m;
        int rc = proto_decode(c->in.data, c->in.len, &lim, conn__zone(c), &m);
        if (rc == 0) {
            conn__zone_reset(c);
            return false;
        }
        if (rc > 0 && m.type == PROTO_ERROR) {
            char msg[256];
            spw_log(SPW_LOG_WARN, "peer=%s refused us: %s err=%s", c->peer,
                    proto_str(&m.f[F_ERROR_MSG], msg, sizeof msg),
                    spw_err_name((int)m.f[F_ERROR_CODE].i));
            rc = proto_err_code(m.f[F_ERROR_CODE].i);
        } else if (rc < 0 || m.type != PROTO_CHALLENGE) {
            rc = rc < 0 ? rc : SPW_EPROTO;
            spw_log(SPW_LOG_WARN,
                    "peer=%s answered our TLS handshake with something else: %s err=SPW_ETLS",
                    c->peer, spw_strerror(rc));
            rc = SPW_ETLS;
        }
        conn__zone_reset(c);
        if (rc < 0) {
            if (c->close_status == 0)
                c->close_status = rc;
            conn__do_close(c);
            return false;
        }
        spw_buf_consume(&c->in, (size_t)rc);
    }
    return false;
}

void conn__tls_read(proto_conn *c, const uint8_t *p, size_t n)
{
    conn_tls *t = c->tls;
    if (t->pre) {
        /* Rare and small (one CHALLENGE): through c->in, which has room for one such frame. */
        spw_buf_append(&c->in, p, n);
        if (skip_plain(c))
            conn__tls_pump(c);
        return;
    }
    /* OpenSSL reads the ciphertext where it is; what it leaves (a paused connection, a closed
     * one) is kept, since the next socket read reuses that memory. */
    t->rp = p;
    t->rn = n;
    conn__tls_pump(c);
    if (t->rn > 0 && c->state != ST_CLOSED)
        tls_keep(t, t->rp, t->rn);
    t->rp = NULL;
    t->rn = 0;
}

void conn__tls_pump(proto_conn *c)
{
    conn_tls *t = c->tls;
    /* The error queue is emptied once: a call that succeeds or wants more leaves nothing in it,
     * and one that fails ends the loop. */
    ERR_clear_error();
    if (!t->up) {
        int r = SSL_do_handshake(t->ssl);
        if (r != 1) {
            int err = SSL_get_error(t->ssl, r);
            if (err != SSL_ERROR_WANT_READ) {
                tls_fail(c, err);
                return;
            }
        } else {
            t->up = true;
            SSL_clear_mode(t->ssl, SSL_MODE_RELEASE_BUFFERS);
            spw_log(SPW_LOG_DEBUG, "peer=%s TLS 1.3 up (%s)", c->peer, SSL_get_cipher_name(t->ssl));
            if (c->server)
                conn__send_challenge(c); /* the handshake proper starts inside TLS */
            else if (c->out.buf.len > 0 || c->out.nb > 0)
                conn__mark_dirty(c); /* frames queued while TLS was coming up */
        }
    }
    while (t->up && c->state != ST_CLOSING && c->state != ST_CLOSED && !c->paused) {
        uint8_t *at;
        size_t room;
        if (conn__in_room(c, &at, &room) != 0) {
            c->close_status = SPW_ENOMEM;
            conn__do_close(c);
            return;
        }
        if (room == 0)
            break; /* a full pre-handshake buffer: its frame is being answered */
        int r = SSL_read(t->ssl, at, (int)room);
        if (r <= 0) {
            int err = SSL_get_error(t->ssl, r);
            if (err == SSL_ERROR_WANT_READ)
                break;
            if (err == SSL_ERROR_ZERO_RETURN) { /* close_notify */
                if (c->close_status == 0)
                    c->close_status = SPW_ECLOSED;
                conn__do_close(c);
                return;
            }
            tls_fail(c, err);
            return;
        }
        conn__input(c, (size_t)r);
    }
    if (t->rin.len == 0 && t->rin.data != NULL)
        spw_buf_release(&t->rin); /* kept ciphertext is rare: its memory is not kept */
    if (c->state != ST_CLOSED && t->out.len > 0)
        conn__mark_dirty(c);
}

void conn__tls_detect(proto_conn *c)
{
    proto_ctx *ctx = c->ctx;
    c->tls_detect = false;
    if (c->in.data[0] == TLS_RECORD_BYTE) {
        if (ctx->tls == NULL) {
            conn__log_limited(ctx, LIM_TLS,
                              "peer=%s refused: it starts TLS, and this daemon does not encrypt "
                              "(--encrypt no) err=SPW_EENCRYPT",
                              c->peer);
            proto_conn_error(c, 0, SPW_EENCRYPT,
                             "this daemon does not encrypt (--encrypt no): connect without "
                             "--encrypt, or turn it on here");
            proto_conn_close(c, SPW_EENCRYPT);
            return;
        }
        /* Our plaintext CHALLENGE, if it has not gone out yet, never will: a fresh one
         * follows inside TLS. One being written finishes before any ciphertext. */
        c->queued -= c->out.buf.len + c->out.borrowed_bytes;
        conn__outq_release(&c->out, true);
        if (conn__tls_start(c, true) != 0) {
            c->close_status = SPW_ETLS;
            conn__do_close(c);
            return;
        }
        tls_keep(c->tls, c->in.data, c->in.len);
        c->in.len = 0;
        conn__tls_pump(c);
        return;
    }
    if (ctx->tls != NULL && conn__tls_wanted(c)) {
        if (ctx->opts.encrypt == PROTO_ENCRYPT_REQUIRED) {
            conn__log_limited(ctx, LIM_TLS,
                              "peer=%s refused: it did not start TLS, and this daemon requires "
                              "encryption (--encrypt required) err=SPW_EENCRYPT",
                              c->peer);
            proto_conn_error(c, 0, SPW_EENCRYPT,
                             "encryption required (--encrypt required here): connect with "
                             "--encrypt yes");
            proto_conn_close(c, SPW_EENCRYPT);
            return;
        }
        conn__log_limited(ctx, LIM_PLAIN,
                          "peer=%s connected without encryption (accepted: --encrypt yes; "
                          "required would refuse it)",
                          c->peer);
    }
    conn__process_input(c);
}

ssize_t conn__tls_encrypt(proto_conn *c, const uv_buf_t *bufs, size_t nbufs, size_t *i, size_t *off)
{
    /* SSL_write_ex straight from the queued buffers: records (up to 16 KiB each) go to t->out,
     * which holds a slice of CONN_TLS_SLICE with their headers and tags, so the two buffers
     * that take turns as c->wire keep their size. */
    conn_tls *t = c->tls;
    size_t taken = 0;
    ERR_clear_error();
    while (*i < nbufs) {
        size_t room = CONN_TLS_SLICE - (t->out.len < CONN_TLS_SLICE ? t->out.len : CONN_TLS_SLICE);
        size_t records = room / TLS_RECORD_MAX + 1;
        if (room <= records * TLS_RECORD_EXTRA)
            break;
        size_t n = room - records * TLS_RECORD_EXTRA;
        size_t left = bufs[*i].len - *off;
        if (n > left)
            n = left;
        size_t done = 0;
        if (n > 0 && !SSL_write_ex(t->ssl, bufs[*i].base + *off, n, &done)) {
            char why[256];
            spw_log(SPW_LOG_WARN, "peer=%s TLS write failed: %s", c->peer,
                    tls_reason(why, sizeof why));
            return SPW_ETLS;
        }
        taken += done;
        *off += done;
        if (*off == bufs[*i].len) {
            (*i)++;
            *off = 0;
        }
    }
    return (ssize_t)taken;
}

size_t conn__tls_sealed(const proto_conn *c)
{
    return c->tls->out.len;
}

size_t conn__tls_take(proto_conn *c)
{
    conn_tls *t = c->tls;
    if (t->out.len == 0 || c->writing)
        return 0;
    /* t->out and c->wire swap: the ciphertext is written where OpenSSL put it. */
    spw_buf w = c->wire;
    c->wire = t->out;
    t->out = w;
    t->out.len = 0;
    return c->wire.len;
}
