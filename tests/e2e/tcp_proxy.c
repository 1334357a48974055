/*
 * spw_tcp_proxy PORT_FILE TARGET: a TCP relay on 127.0.0.1 for the e2e tests, which stand it
 * between a client and the scheduler to break the client's connection while both ends live.
 * SIGUSR1 cuts: every relayed connection is closed, the port is closed too (a client trying
 * again is refused) and PORT_FILE is removed. SIGUSR2 opens the same port again and writes
 * PORT_FILE. PORT_FILE holds the port (written whole, by a rename) while it accepts; each
 * connection is relayed to TARGET ("127.0.0.1:PORT") byte for byte until either side closes.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define MAX_PAIRS 32

static int dial(const char *target)
{
    char host[64];
    snprintf(host, sizeof host, "%s", target);
    char *colon = strrchr(host, ':');
    if (colon == NULL)
        return -1;
    *colon = '\0';
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(colon + 1))};
    if (inet_pton(AF_INET, host, &sa.sin_addr) != 1)
        return -1;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

static int write_all(int fd, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

static volatile sig_atomic_t cut_asked, open_asked;

static void on_signal(int sig)
{
    if (sig == SIGUSR1)
        cut_asked = 1;
    else
        open_asked = 1;
}

/* Listens on port (0: any) and writes the port file. @return the socket, or -1. */
static int open_port(const char *port_file, int *port)
{
    int lfd = socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)*port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof sa;
    if (bind(lfd, (struct sockaddr *)&sa, sizeof sa) != 0 || listen(lfd, 16) != 0 ||
        getsockname(lfd, (struct sockaddr *)&sa, &len) != 0) {
        perror("spw_tcp_proxy: listen");
        return -1;
    }
    *port = ntohs(sa.sin_port);
    char tmp[512];
    snprintf(tmp, sizeof tmp, "%s.tmp", port_file);
    FILE *f = fopen(tmp, "w");
    if (f == NULL || fprintf(f, "%d\n", *port) < 0 || fclose(f) != 0 ||
        rename(tmp, port_file) != 0) {
        perror("spw_tcp_proxy: port file");
        return -1;
    }
    return lfd;
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: spw_tcp_proxy PORT_FILE TARGET\n");
        return 2;
    }
    struct sigaction sa = {.sa_handler = on_signal};
    sigaction(SIGUSR1, &sa, NULL);
    sigaction(SIGUSR2, &sa, NULL);
    int port = 0;
    int lfd = open_port(argv[1], &port);
    if (lfd < 0)
        return 1;
    int fds[2 * MAX_PAIRS]; /* fds[2i] and fds[2i + 1] relay to each other; -1: free */
    for (int i = 0; i < 2 * MAX_PAIRS; i++)
        fds[i] = -1;
    for (;;) {
        if (cut_asked) {
            cut_asked = 0;
            for (int i = 0; i < 2 * MAX_PAIRS; i++)
                if (fds[i] >= 0) {
                    close(fds[i]);
                    fds[i] = -1;
                }
            if (lfd >= 0)
                close(lfd);
            lfd = -1;
            remove(argv[1]);
        }
        if (open_asked) {
            open_asked = 0;
            if (lfd < 0 && (lfd = open_port(argv[1], &port)) < 0)
                return 1;
        }
        struct pollfd pf[1 + 2 * MAX_PAIRS];
        pf[0] = (struct pollfd){.fd = lfd, .events = POLLIN};
        for (int i = 0; i < 2 * MAX_PAIRS; i++)
            pf[1 + i] = (struct pollfd){.fd = fds[i], .events = POLLIN};
        if (poll(pf, 1 + 2 * MAX_PAIRS, -1) < 0)
            continue; /* EINTR: a signal, looked at above */
        if (lfd >= 0 && (pf[0].revents & POLLIN)) {
            int a = accept(lfd, NULL, NULL);
            int b = a >= 0 ? dial(argv[2]) : -1;
            int slot = 0;
            while (slot < MAX_PAIRS && fds[2 * slot] >= 0)
                slot++;
            if (a >= 0 && b >= 0 && slot < MAX_PAIRS) {
                fds[2 * slot] = a;
                fds[2 * slot + 1] = b;
            } else {
                if (a >= 0)
                    close(a);
                if (b >= 0)
                    close(b);
            }
        }
        for (int i = 0; i < 2 * MAX_PAIRS; i++) {
            if (fds[i] < 0 || !(pf[1 + i].revents & (POLLIN | POLLHUP | POLLERR)))
                continue;
            char buf[65536];
            ssize_t n = read(fds[i], buf, sizeof buf);
            if (n > 0 && write_all(fds[i ^ 1], buf, (size_t)n) == 0)
                continue;
            if (n < 0 && errno == EINTR)
                continue;
            close(fds[i]);
            close(fds[i ^ 1]);
            fds[i] = fds[i ^ 1] = -1;
        }
    }
}
