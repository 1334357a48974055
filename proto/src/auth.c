/*
 * proto_conn authentication: the cluster secret file, the proofs, and the handshake (CHALLENGE,
 * HELLO, WELCOME) described in conn.h. See conn_int.h.
 */
#include "conn_int.h"

int proto_secret_load(const char *path, uint8_t **secret, size_t *len)
{
    struct stat st;
    if (stat(path, &st) != 0)
        return -errno;
    if ((st.st_mode & 027) != 0)
        return SPW_EACCES;
    char *data;
    size_t n;
    int rc = spw_file_read(path, 4096, &data, &n);
    if (rc != 0)
        return rc;
    while (n > 0 && (data[n - 1] == '\n' || data[n - 1] == '\r' || data[n - 1] == ' '))
        n--;
    if (n < PROTO_MIN_SECRET) {
        sodium_memzero(data, n);
        spw_free(data);
        return n == 0 ? SPW_EINVAL : SPW_ERANGE;
    }
    *secret = (uint8_t *)data;
    *len = n;
    return 0;
}

const char *proto_secret_strerror(int rc)
{
    switch (rc) {
    case SPW_EINVAL:
        return "the secret file is empty";
    case SPW_ERANGE:
        return "the secret is shorter than 16 bytes; use e.g. "
               "'head -c 32 /dev/urandom | base64'";
    case SPW_EACCES:
        return "permission denied, or its mode is too open (mode 0600 or 0640: no access for "
               "others, no writing for its group)";
    case SPW_ELIMIT:
        return "larger than 4096 bytes: not a secret file";
    default:
        return spw_strerror(rc);
    }
}

/* ----------------------------------------------------------------- auth */

void conn__make_proof(const proto_ctx *ctx, const char *label, const uint8_t *n1, const uint8_t *n2,
                      uint8_t role, uint8_t out[PROTO_PROOF_LEN])
{
    crypto_auth_hmacsha256_state st;
    static const uint8_t no_key[1] = {0};
    /* No secret means an empty key (libsodium wants a non-NULL pointer even for 0 bytes). */
    crypto_auth_hmacsha256_init(&st, ctx->secret != NULL ? ctx->secret : no_key,
                                ctx->opts.secret_len);
    crypto_auth_hmacsha256_update(&st, (const uint8_t *)label, strlen(label));
    crypto_auth_hmacsha256_update(&st, n1, PROTO_NONCE_LEN);
    crypto_auth_hmacsha256_update(&st, n2, PROTO_NONCE_LEN);
    crypto_auth_hmacsha256_update(&st, &role, 1);
    crypto_auth_hmacsha256_final(&st, out);
}

/* Appends HELLO: our role, host and name, my_nonce and the proof over both nonces that we hold
 * the secret, what a worker announces (NULL: not a worker), and the session a client resumes
 * (resume: a connection with proto_conn_set_resume, else NULL). */
void conn__enc_hello(proto_enc *e, spw_buf *out, const proto_ctx *ctx, const uint8_t *server_nonce,
                     const uint8_t *my_nonce, const proto_winfo_rec *worker,
                     const proto_conn *resume)
{
    bool r = resume != NULL && resume->resume_set;
    uint8_t proof[PROTO_PROOF_LEN];
    conn__make_proof(ctx, "spillway-hello", server_nonce, my_nonce, (uint8_t)ctx->opts.role, proof);
    char host[256] = "";
    gethostname(host, sizeof host - 1);
    proto_enc_hello(e, out, 0,
                    &(proto_hello_msg){.version = PROTO_VERSION,
                                       .role = (uint64_t)ctx->opts.role,
                                       .nonce = {my_nonce, PROTO_NONCE_LEN},
                                       .proof = {proof, sizeof proof},
                                       .pid = (uint64_t)getpid(),
                                       .host = host,
                                       .name = ctx->name,
                                       .worker = worker,
                                       .resume = r ? resume->resume_id : 0,
                                       .token = {r ? resume->resume_token : NULL,
                                                 r ? PROTO_TOKEN_LEN : 0},
                                       .omit_resume = !r,
                                       .omit_token = !r});
}

void proto_conn_set_resume(proto_conn *c, uint64_t session, const uint8_t *token)
{
    c->resume_set = true;
    c->resume_id = session;
    memset(c->resume_token, 0, sizeof c->resume_token);
    if (token != NULL)
        memcpy(c->resume_token, token, sizeof c->resume_token);
}

/* ------------------------------------------------------------------ input */

void conn__send_challenge(proto_conn *c)
{
    randombytes_buf(c->my_nonce, sizeof c->my_nonce);
    proto_send_challenge(c, 0,
                         &(proto_challenge_msg){.version = PROTO_VERSION,
                                                .nonce = {c->my_nonce, sizeof c->my_nonce},
                                                .role = (uint64_t)c->ctx->opts.role});
}

void conn__refuse(proto_conn *c, uint64_t req, int code, const char *why)
{
    /* Anyone who can connect can be refused before proving anything, as often as it likes:
     * that is logged like the other refusals anyone can cause, once per LIMIT_LOG_MS. */
    if (c->server && c->state != ST_READY)
        conn__log_limited(c->ctx, LIM_REFUSED, "peer=%s refused: %s err=%s", c->peer, why,
                          spw_err_name(code));
    else
        spw_log(SPW_LOG_WARN, "peer=%s refused: %s err=%s", c->peer, why, spw_err_name(code));
    proto_conn_error(c, req, code, "%s", why);
    proto_conn_close(c, code);
}

/* The peer address a worker announces on this connection: its own, unless that is a wildcard
 * (it listens on 0.0.0.0 or [::]), which no peer can connect to; then the address of our end
 * of this very connection, the interface that reaches the scheduler, with the same port. */
static const char *hello_addr(proto_conn *c, const char *addr, char *buf, size_t buflen)
{
    spw_addr a;
    if (c->is_unix || spw_addr_parse(addr, -1, &a) != 0 || !spw_addr_host_is_wildcard(a.host))
        return addr;
    struct sockaddr_storage ss;
    int len = sizeof ss;
    char local[SPW_ADDR_MAX];
    spw_addr la;
    if (uv_tcp_getsockname(&c->h.tcp, (struct sockaddr *)&ss, &len) != 0 ||
        spw_addr_from_sockaddr((struct sockaddr *)&ss, local, sizeof local) != 0 ||
        spw_addr_parse(local, -1, &la) != 0)
        return addr;
    spw_addr_join(la.host, a.port, buf, buflen);
    spw_log(SPW_LOG_INFO, "listening on %s: advertising %s (our address towards %s)", addr, buf,
            c->peer);
    return buf;
}

void conn__on_challenge(proto_conn *c, const proto_msg *m)
{
    if (m->f[F_CHAL_VERSION].u != PROTO_VERSION) {
        char why[128];
        snprintf(why, sizeof why, "protocol version %llu, we speak %d",
                 (unsigned long long)m->f[F_CHAL_VERSION].u, PROTO_VERSION);
        conn__refuse(c, m->req, SPW_EVERSION, why);
        return;
    }
    memcpy(c->peer_nonce, m->f[F_CHAL_NONCE].bin.ptr, PROTO_NONCE_LEN);
    c->peer_role = (int)m->f[F_CHAL_ROLE].u;
    randombytes_buf(c->my_nonce, sizeof c->my_nonce);
    const proto_hello_worker *w = c->ctx->opts.worker;
    char adv[SPW_ADDR_MAX];
    proto_winfo_rec winfo;
    if (w != NULL)
        winfo = (proto_winfo_rec){.addr = hello_addr(c, w->addr, adv, sizeof adv),
                                  .slots = w->slots,
                                  .capacity = w->capacity,
                                  .host_id = w->host_id,
                                  .local = w->local};
    proto_enc e;
    conn__enc_hello(&e, proto_conn_out(c), c->ctx, c->peer_nonce, c->my_nonce,
                    w != NULL ? &winfo : NULL, c);
    proto_conn_send(c, &e);
    c->state = ST_AWAIT_WELCOME;
}

void conn__on_hello_msg(proto_conn *c, const proto_msg *m)
{
    if (m->f[F_HELLO_VERSION].u != PROTO_VERSION) {
        char why[128];
        snprintf(why, sizeof why, "protocol version %llu, we speak %d",
                 (unsigned long long)m->f[F_HELLO_VERSION].u, PROTO_VERSION);
        conn__refuse(c, m->req, SPW_EVERSION, why);
        return;
    }
    proto_ctx *ctx = c->ctx;
    uint64_t role = m->f[F_HELLO_ROLE].u;
    if (role == 0 || role > PROTO_ROLE_PEER) {
        conn__refuse(c, m->req, SPW_EPROTO, "unknown role");
        return;
    }
    memcpy(c->peer_nonce, m->f[F_HELLO_NONCE].bin.ptr, PROTO_NONCE_LEN);
    uint8_t want[PROTO_PROOF_LEN];
    conn__make_proof(ctx, "spillway-hello", c->my_nonce, c->peer_nonce, (uint8_t)role, want);
    if (sodium_memcmp(want, m->f[F_HELLO_PROOF].bin.ptr, PROTO_PROOF_LEN) != 0) {
        conn__refuse(c, m->req, SPW_EAUTH,
                     "authentication failed: wrong or missing cluster secret");
        return;
    }
    c->peer_role = (int)role;
    if ((role == PROTO_ROLE_CLIENT || role == PROTO_ROLE_PEER) && c->counted &&
        ctx->opts.max_conns > 0) {
        uint32_t quota = ctx->opts.max_conns - ctx->opts.reserved_conns;
        if (ctx->nclients >= quota) {
            char why[200];
            snprintf(why, sizeof why,
                     "too many connections: %u clients connected, the most --max-connections %u "
                     "allows (%u more are kept for workers and spillway-ctl)",
                     ctx->nclients, ctx->opts.max_conns, ctx->opts.reserved_conns);
            conn__log_limited(ctx, LIM_CLIENT_CAP, "peer=%s refused: %s", c->peer, why);
            proto_conn_error(c, m->req, SPW_ELIMIT, "%s", why);
            proto_conn_close(c, SPW_ELIMIT);
            return;
        }
        ctx->nclients++;
        c->counted_client = true;
    }
    proto_welcome w = {.inline_limit = ctx->opts.inline_limit,
                       .chunk = ctx->opts.chunk,
                       .max_frame = ctx->opts.limits.max_frame};
    char err[256] = "refused";
    int rc = c->cbs.on_hello != NULL ? c->cbs.on_hello(c, m, &w, err, sizeof err) : 0;
    if (rc != 0) {
        conn__refuse(c, m->req, rc, err);
        return;
    }
    c->welcome = w;
    uint8_t proof[PROTO_PROOF_LEN];
    conn__make_proof(ctx, "spillway-welcome", c->peer_nonce, c->my_nonce, (uint8_t)ctx->opts.role,
                     proof);
    proto_send_welcome(c, m->req,
                       &(proto_welcome_msg){.proof = {proof, sizeof proof},
                                            .session = w.session,
                                            .inline_limit = w.inline_limit,
                                            .chunk = w.chunk,
                                            .max_frame = w.max_frame,
                                            .token = {w.token, PROTO_TOKEN_LEN},
                                            .resumed = w.resumed,
                                            .nrecv = w.nrecv,
                                            .omit_token = !w.has_token,
                                            .omit_resumed = !w.has_token,
                                            .omit_nrecv = !w.has_token});
    c->state = ST_READY;
    c->deadline_ns = 0;
}

void conn__on_welcome(proto_conn *c, const proto_msg *m)
{
    uint8_t want[PROTO_PROOF_LEN];
    conn__make_proof(c->ctx, "spillway-welcome", c->my_nonce, c->peer_nonce, (uint8_t)c->peer_role,
                     want);
    if (sodium_memcmp(want, m->f[F_WELCOME_PROOF].bin.ptr, PROTO_PROOF_LEN) != 0) {
        spw_log(SPW_LOG_WARN, "peer=%s did not prove the cluster secret", c->peer);
        proto_conn_close(c, SPW_EAUTH);
        return;
    }
    c->welcome.session = m->f[F_WELCOME_SESSION].u;
    c->welcome.inline_limit = m->f[F_WELCOME_INLINE_LIMIT].u;
    c->welcome.chunk =
        (uint32_t)(m->f[F_WELCOME_CHUNK].u > UINT32_MAX ? UINT32_MAX : m->f[F_WELCOME_CHUNK].u);
    uint64_t mf = m->f[F_WELCOME_MAX_FRAME].u;
    c->welcome.max_frame = (uint32_t)(mf > UINT32_MAX ? UINT32_MAX : mf);
    if (c->welcome.max_frame < 4096)
        c->welcome.max_frame = 4096;
    const proto_val *tok = &m->f[F_WELCOME_TOKEN];
    c->welcome.has_token = !tok->nil && tok->bin.len == PROTO_TOKEN_LEN;
    if (c->welcome.has_token)
        memcpy(c->welcome.token, tok->bin.ptr, PROTO_TOKEN_LEN);
    c->welcome.resumed = !m->f[F_WELCOME_RESUMED].nil && m->f[F_WELCOME_RESUMED].u == 1;
    c->welcome.nrecv = m->f[F_WELCOME_NRECV].nil ? 0 : m->f[F_WELCOME_NRECV].u;
    c->state = ST_READY;
    c->deadline_ns = 0;
    if (c->cbs.on_ready != NULL)
        c->cbs.on_ready(c, &c->welcome);
}
