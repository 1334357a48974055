/*
 * proto_conn on Unix sockets: listeners that check the peer's credentials before any byte,
 * sending a descriptor with a frame (SCM_RIGHTS), and the blocking local attach a client uses to
 * map a worker's arena. See conn_int.h.
 */
#include "conn_int.h"

void proto_listener_allow_group(proto_listener *l, unsigned gid)
{
    l->group_set = true;
    l->group = (gid_t)gid;
}

/* Whether the group is among the peer's supplementary groups (SO_PEERGROUPS), however many it
 * has: past what fits the buffer on the stack, the kernel says ERANGE with the length needed. */
static bool peer_in_group(int fd, gid_t group)
{
    gid_t small[256], *groups = small;
    socklen_t glen = sizeof small;
    int r = getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups, &glen);
    if (r != 0 && errno == ERANGE && glen > sizeof small && glen <= 65536 * sizeof(gid_t)) {
        groups = spw_try_malloc(SPW_MOD_PROTO, glen);
        r = groups != NULL ? getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups, &glen) : -1;
    }
    bool member = false;
    for (size_t i = 0; r == 0 && i < glen / sizeof groups[0] && !member; i++)
        member = groups[i] == group;
    if (groups != small)
        spw_free(groups);
    return member;
}

/* Whether the peer on a Unix socket may use it: our euid, root, or a member of the listener's
 * group. why gets the reason for a refusal. */
static bool unix_peer_allowed(const proto_listener *l, int fd, bool *same_uid, char *peer,
                              size_t peerlen, char *why, size_t whylen)
{
    *same_uid = false;
    struct ucred cr;
    socklen_t len = sizeof cr;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &len) != 0) {
        snprintf(peer, peerlen, "unix");
        snprintf(why, whylen, "local socket: cannot read the peer's credentials: %s",
                 strerror(errno));
        return false;
    }
    snprintf(peer, peerlen, "unix:uid=%u,pid=%d", (unsigned)cr.uid, (int)cr.pid);
    *same_uid = cr.uid == geteuid();
    if (cr.uid == 0 || *same_uid)
        return true;
    if (l->group_set) {
        if (cr.gid == l->group)
            return true;
        if (peer_in_group(fd, l->group))
            return true;
        snprintf(why, whylen,
                 "local socket: uid %u is neither the worker's uid %u, root, nor a member of "
                 "group %u (--local-group); use TCP",
                 (unsigned)cr.uid, (unsigned)geteuid(), (unsigned)l->group);
        return false;
    }
    snprintf(why, whylen,
             "local socket: uid %u is neither the worker's uid %u nor root (see --local-group); "
             "use TCP",
             (unsigned)cr.uid, (unsigned)geteuid());
    return false;
}

bool proto_conn_is_local(const proto_conn *c)
{
    return c->is_unix && c->server;
}

bool proto_conn_peer_same_uid(const proto_conn *c)
{
    return c->is_unix && c->server && c->peer_same_uid;
}

static void on_unix_connection(uv_stream_t *server, int status)
{
    proto_listener *l = server->data;
    if (status < 0) {
        conn__accept_failed(l, status);
        return;
    }
    proto_conn *c = conn__new(l->ctx, &l->cbs, l->data);
    c->server = true;
    c->is_unix = true;
    uv_pipe_init(l->ctx->loop, &c->h.pipe, 0);
    if (uv_accept(server, &c->h.stream) != 0) {
        conn__do_close(c);
        return;
    }
    uv_os_fd_t fd = -1;
    char why[256];
    uv_fileno(&c->h.handle, &fd);
    if (!unix_peer_allowed(l, fd, &c->peer_same_uid, c->peer, sizeof c->peer, why, sizeof why)) {
        conn__log_limited(l->ctx, LIM_LOCAL, "peer=%s refused: %s err=SPW_EAUTH", c->peer, why);
        c->state = ST_AWAIT_HELLO;
        proto_conn_error(c, 0, SPW_EAUTH, "%s", why);
        proto_conn_close(c, SPW_EAUTH);
        return;
    }
    if (!conn__admit(c))
        return;
    c->state = ST_AWAIT_HELLO;
    conn__send_challenge(c);
    conn__start(c);
}

static int unix_addr(const char *name, struct sockaddr_un *sun, socklen_t *len)
{
    memset(sun, 0, sizeof *sun);
    sun->sun_family = AF_UNIX;
    size_t n = strlen(name);
    if (n == 0 || n >= sizeof sun->sun_path)
        return SPW_ENAMETOOLONG;
    memcpy(sun->sun_path, name, n);
    if (name[0] == '@')
        sun->sun_path[0] = '\0';
    *len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n);
    return 0;
}

/* A socket connected to the Unix socket name: a connect to a listening one completes (or fails)
 * at once, so no connect request on the loop is needed. The descriptor, or an error. */
static int unix_connect(const char *name)
{
    struct sockaddr_un sun;
    socklen_t alen;
    int rc = unix_addr(name, &sun, &alen);
    if (rc != 0)
        return rc;
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    if (connect(fd, (struct sockaddr *)&sun, alen) != 0) {
        rc = -errno;
        close(fd);
        return rc;
    }
    return fd;
}

int conn__connect_unix(proto_ctx *ctx, const char *name, const proto_conn_cbs *cbs, void *data,
                       proto_conn **out)
{
    if (ctx->closing)
        return SPW_ESHUTDOWN;
    int fd = unix_connect(name);
    if (fd < 0)
        return fd;
    proto_conn *c = conn__new(ctx, cbs, data);
    snprintf(c->peer, sizeof c->peer, "unix:%s", name);
    c->is_unix = true;
    uv_pipe_init(ctx->loop, &c->h.pipe, 0);
    c->h.handle.data = c;
    int rc = uv_pipe_open(&c->h.pipe, fd);
    if (rc != 0) {
        close(fd);
        c->cbs.on_close = NULL;
        conn__do_close(c);
        return rc;
    }
    c->state = ST_AWAIT_CHALLENGE;
    conn__start(c);
    if (out != NULL)
        *out = c;
    return 0;
}

int proto_listen_unix(proto_ctx *ctx, const char *name, const proto_conn_cbs *cbs, void *data,
                      proto_listener **out)
{
    struct sockaddr_un sun;
    socklen_t len;
    int rc = unix_addr(name, &sun, &len);
    if (rc != 0)
        return rc;
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0)
        return -errno;
    if (bind(fd, (struct sockaddr *)&sun, len) != 0 || listen(fd, 128) != 0) {
        rc = -errno;
        close(fd);
        return rc;
    }
    proto_listener *l = spw_calloc(SPW_MOD_PROTO, 1, sizeof *l);
    l->ctx = ctx;
    l->cbs = *cbs;
    l->data = data;
    l->is_unix = true;
    uv_pipe_init(ctx->loop, &l->pipe, 0);
    l->pipe.data = l;
    DL_APPEND(ctx->listeners, l);
    ctx->handles++;
    rc = uv_pipe_open(&l->pipe, fd);
    if (rc == 0)
        rc = uv_listen((uv_stream_t *)&l->pipe, 128, on_unix_connection);
    if (rc != 0) {
        if (uv_fileno((uv_handle_t *)&l->pipe, &(uv_os_fd_t){0}) != 0)
            close(fd);
        proto_listener_close(l);
        return rc;
    }
    if (out != NULL)
        *out = l;
    return 0;
}

int proto_conn_send_fd(proto_conn *c, proto_enc *e, int fd)
{
    int n = proto_enc_end(e, conn__send_limit(c));
    if (n < 0)
        return n;
    PROTO_CHECK_SENT(e->buf->data + e->start, (size_t)n, "proto_conn_send_fd");
    spw_buf *b = e->buf;
    size_t start = e->start;
    if (!c->is_unix) {
        b->len = start;
        return SPW_ENOTSUP;
    }
    if (c->writing || c->queued > 0 || c->state != ST_READY) {
        b->len = start;
        return SPW_EAGAIN;
    }
    uv_os_fd_t sock;
    if (uv_fileno(&c->h.handle, &sock) != 0) {
        b->len = start;
        return SPW_EBADF;
    }
    struct iovec iov = {b->data + start, (size_t)n};
    union {
        char buf[CMSG_SPACE(sizeof(int))];
        struct cmsghdr align;
    } ctl;
    memset(&ctl, 0, sizeof ctl);
    struct msghdr mh = {0};
    mh.msg_iov = &iov;
    mh.msg_iovlen = 1;
    mh.msg_control = ctl.buf;
    mh.msg_controllen = sizeof ctl.buf;
    struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(cm), &fd, sizeof(int));
    ssize_t w;
    do {
        w = sendmsg(sock, &mh, MSG_DONTWAIT | MSG_NOSIGNAL);
    } while (w < 0 && errno == EINTR);
    if (w < 0) {
        int rc = -errno;
        b->len = start;
        return rc;
    }
    /* The descriptor went with the first byte; whatever did not fit goes the usual way. */
    size_t left = (size_t)n - (size_t)w;
    if (left > 0) {
        memmove(b->data + start, b->data + start + w, left);
        b->len = start + left;
        conn__after_enqueue(c, left);
    } else {
        b->len = start;
    }
    return 0;
}

/* ----------------------------------------------- local attach (blocking) */

static int io_wait(int fd, short ev, uint64_t deadline_ns)
{
    for (;;) {
        uint64_t now = spw_now_ns();
        if (now >= deadline_ns)
            return SPW_ETIMEDOUT;
        struct pollfd p = {fd, ev, 0};
        int r = poll(&p, 1, (int)((deadline_ns - now) / 1000000ULL) + 1);
        if (r > 0)
            return 0;
        if (r < 0 && errno != EINTR)
            return -errno;
    }
}

static int write_full(int fd, const uint8_t *p, size_t n, uint64_t deadline)
{
    while (n > 0) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w < 0 && (errno == EAGAIN || errno == EINTR)) {
            int rc = io_wait(fd, POLLOUT, deadline);
            if (rc != 0)
                return rc;
            continue;
        }
        if (w < 0)
            return -errno;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* Reads exactly n bytes; collects a passed descriptor if one comes along. */
static int read_full(int fd, uint8_t *p, size_t n, uint64_t deadline, int *passed)
{
    while (n > 0) {
        struct iovec iov = {p, n};
        union {
            char buf[CMSG_SPACE(sizeof(int))];
            struct cmsghdr align;
        } ctl;
        struct msghdr mh = {0};
        mh.msg_iov = &iov;
        mh.msg_iovlen = 1;
        mh.msg_control = ctl.buf;
        mh.msg_controllen = sizeof ctl.buf;
        ssize_t r = recvmsg(fd, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
        if (r < 0 && (errno == EAGAIN || errno == EINTR)) {
            int rc = io_wait(fd, POLLIN, deadline);
            if (rc != 0)
                return rc;
            continue;
        }
        if (r < 0)
            return -errno;
        if (r == 0)
            return SPW_ECLOSED;
        /* Every descriptor that came is ours now: the first one wanted is kept, the rest
         * closed. A message can carry more than one even in this buffer (the kernel fits as
         * many ints as the space after the header holds: two here); those that did not fit
         * (MSG_CTRUNC) the kernel has closed. */
        for (struct cmsghdr *cm = CMSG_FIRSTHDR(&mh); cm != NULL; cm = CMSG_NXTHDR(&mh, cm)) {
            if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS ||
                cm->cmsg_len < CMSG_LEN(0))
                continue;
            size_t nfds = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
            for (size_t i = 0; i < nfds; i++) {
                int got;
                memcpy(&got, CMSG_DATA(cm) + i * sizeof got, sizeof got);
                if (passed != NULL && *passed < 0)
                    *passed = got;
                else
                    close(got);
            }
        }
        p += r;
        n -= (size_t)r;
    }
    return 0;
}

/* Reads one frame into b and decodes it into m (valid until b or zone change). */
static int read_frame(proto_ctx *ctx, int fd, spw_buf *b, msgpack_zone *z, proto_msg *m,
                      uint64_t deadline, int *passed)
{
    /* Every frame of this exchange is small, and all but the last come before the server has
     * proved the secret. */
    proto_limits lim = ctx->opts.limits;
    if (lim.max_frame > PROTO_PREAUTH_MAX_FRAME)
        lim.max_frame = PROTO_PREAUTH_MAX_FRAME;
    spw_buf_reset(b);
    if (spw_buf_reserve(b, PROTO_HDR_LEN) != 0)
        return SPW_ENOMEM;
    int rc = read_full(fd, b->data, PROTO_HDR_LEN, deadline, passed);
    if (rc != 0)
        return rc;
    size_t body =
        (size_t)b->data[0] << 24 | (size_t)b->data[1] << 16 | (size_t)b->data[2] << 8 | b->data[3];
    if (body > lim.max_frame || body == 0)
        return SPW_EFRAMESIZE;
    b->len = PROTO_HDR_LEN;
    if (spw_buf_reserve(b, body) != 0)
        return SPW_ENOMEM;
    rc = read_full(fd, b->data + PROTO_HDR_LEN, body, deadline, passed);
    if (rc != 0)
        return rc;
    b->len += body;
    msgpack_zone_clear(z);
    rc = proto_decode(b->data, b->len, &lim, z, m);
    if (rc < 0)
        return rc;
    if (m->type == PROTO_ERROR)
        return proto_err_code(m->f[F_ERROR_CODE].i);
    return 0;
}

int proto_local_attach(proto_ctx *ctx, const char *name, int timeout_ms, bool write, int *sock_out,
                       int *memfd_out, uint64_t *capacity)
{
    int fd = unix_connect(name);
    if (fd < 0)
        return fd;
    int rc;
    uint64_t deadline = spw_now_ns() + (uint64_t)timeout_ms * 1000000ULL;
    spw_buf in = {0}, out = {0};
    msgpack_zone z;
    msgpack_zone_init(&z, 4096);
    proto_msg m;
    int memfd = -1;
    uint8_t server_nonce[PROTO_NONCE_LEN], my_nonce[PROTO_NONCE_LEN];
    int server_role = 0;
    rc = read_frame(ctx, fd, &in, &z, &m, deadline, NULL);
    if (rc == 0 && (m.type != PROTO_CHALLENGE || m.f[F_CHAL_VERSION].u != PROTO_VERSION))
        rc = m.type == PROTO_CHALLENGE ? SPW_EVERSION : SPW_EPROTO;
    if (rc == 0) {
        memcpy(server_nonce, m.f[F_CHAL_NONCE].bin.ptr, PROTO_NONCE_LEN);
        server_role = (int)m.f[F_CHAL_ROLE].u;
        randombytes_buf(my_nonce, sizeof my_nonce);
        proto_enc e;
        conn__enc_hello(&e, &out, ctx, server_nonce, my_nonce, NULL, NULL);
        proto_enc_end(&e, UINT32_MAX);
        PROTO_CHECK_SENT(out.data, out.len, "proto_local_attach");
        rc = write_full(fd, out.data, out.len, deadline);
    }
    if (rc == 0)
        rc = read_frame(ctx, fd, &in, &z, &m, deadline, NULL);
    if (rc == 0 && m.type != PROTO_WELCOME)
        rc = SPW_EPROTO;
    if (rc == 0) {
        uint8_t want[PROTO_PROOF_LEN];
        conn__make_proof(ctx, "spillway-welcome", my_nonce, server_nonce, (uint8_t)server_role,
                         want);
        if (sodium_memcmp(want, m.f[F_WELCOME_PROOF].bin.ptr, PROTO_PROOF_LEN) != 0)
            rc = SPW_EAUTH;
    }
    if (rc == 0) {
        /* Only now: the server sends the descriptor on an idle connection. */
        spw_buf_reset(&out);
        proto_enc e;
        proto_enc_arena_map(&e, &out, 1,
                            &(proto_arena_map_msg){.flags = write ? PROTO_ARENA_WRITE : 0});
        proto_enc_end(&e, UINT32_MAX);
        PROTO_CHECK_SENT(out.data, out.len, "proto_local_attach");
        rc = write_full(fd, out.data, out.len, deadline);
    }
    if (rc == 0)
        rc = read_frame(ctx, fd, &in, &z, &m, deadline, &memfd);
    if (rc == 0 && (m.type != PROTO_ARENA || memfd < 0))
        rc = SPW_EPROTO;
    if (rc == 0)
        *capacity = m.f[F_ARENA_CAPACITY].u;
    spw_buf_release(&in);
    spw_buf_release(&out);
    msgpack_zone_destroy(&z);
    if (rc != 0) {
        if (memfd >= 0)
            close(memfd);
        close(fd);
        return rc;
    }
    *sock_out = fd;
    *memfd_out = memfd;
    return 0;
}
