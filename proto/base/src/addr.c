/*
 * Network addresses: "host:port" and "[v6]:port" parsed and joined, wildcard hosts, and a
 * socket address as text.
 */
#include "spillway/base.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
