/*
 * The HTTP endpoint's request checks (see http_host.h for the contract): Host names and the
 * head of a request. Pure: no I/O, no globals, nothing kept between calls but the name list.
 * A name is compared without its port, case-insensitively; two IP literals of one family are
 * compared as addresses ("[::1]" and "[0::1]" are one host).
 */
#include "http_host.h"

#include <arpa/inet.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "spillway/error.h"

#define NAME_MAX_LEN 253 /* a DNS name's longest text form; brackets and IPv6 fit too */

static bool name_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           c == '-' || c == '.' || c == '_';
}

/* Whether the n bytes at s are a host name, an IPv4 literal or a bracketed IPv6 literal; the
 * address is stored in ip (family AF_INET or AF_INET6) when it is a literal, else family 0. */
static bool parse_name(const char *s, size_t n, int *family, uint8_t ip[16])
{
    char buf[NAME_MAX_LEN + 1];
    *family = 0;
    if (n == 0 || n > NAME_MAX_LEN)
        return false;
    if (s[0] == '[') {
        if (n < 3 || s[n - 1] != ']')
            return false;
        memcpy(buf, s + 1, n - 2);
        buf[n - 2] = '\0';
        if (inet_pton(AF_INET6, buf, ip) != 1)
            return false;
        *family = AF_INET6;
        return true;
    }
    for (size_t i = 0; i < n; i++)
        if (!name_char(s[i]))
            return false;
    memcpy(buf, s, n);
    buf[n] = '\0';
    if (inet_pton(AF_INET, buf, ip) == 1)
        *family = AF_INET;
    return true;
}

/* Splits a Host value into its name (returned length) and an optional ":PORT" of 1 to 5
 * digits; 0 when the value is not NAME[:PORT]. */
static size_t host_name_len(const char *host)
{
    size_t len = strlen(host), n;
    if (host[0] == '[') {
        const char *close = memchr(host, ']', len);
        if (close == NULL)
            return 0;
        n = (size_t)(close - host) + 1;
    } else {
        const char *colon = memchr(host, ':', len);
        n = colon != NULL ? (size_t)(colon - host) : len;
    }
    if (n == len)
        return n;
    if (host[n] != ':' || len - n - 1 < 1 || len - n - 1 > 5)
        return 0;
    for (size_t i = n + 1; i < len; i++)
        if (host[i] < '0' || host[i] > '9')
            return 0;
    return n;
}

bool spw_http_hosts_valid(const char *list)
{
    const char *p = list;
    for (;;) {
        const char *end = strchr(p, ',');
        size_t n = end != NULL ? (size_t)(end - p) : strlen(p);
        int family;
        uint8_t ip[16];
        if (!parse_name(p, n, &family, ip))
            return false;
        if (end == NULL)
            return true;
        p = end + 1;
    }
}

int spw_http_hosts_add(spw_http_hosts *a, const char *list)
{
    if (!spw_http_hosts_valid(list))
        return SPW_EINVAL;
    size_t count = 1;
    for (const char *p = list; *p != '\0'; p++)
        count += *p == ',';
    char **names = realloc(a->names, (a->n + count) * sizeof *names);
    if (names == NULL)
        return SPW_ENOMEM;
    a->names = names;
    size_t added = 0;
    for (const char *p = list;; p++) {
        size_t n = strcspn(p, ",");
        char *name = strndup(p, n);
        if (name == NULL) {
            for (size_t i = 0; i < added; i++)
                free(a->names[a->n + i]);
            return SPW_ENOMEM;
        }
        for (char *c = name; *c != '\0'; c++)
            if (*c >= 'A' && *c <= 'Z')
                *c = (char)(*c - 'A' + 'a');
        a->names[a->n + added++] = name;
        p += n;
        if (*p == '\0')
            break;
    }
    a->n += added;
    return 0;
}

void spw_http_hosts_free(spw_http_hosts *a)
{
    for (size_t i = 0; i < a->n; i++)
        free(a->names[i]);
    free(a->names);
    a->names = NULL;
    a->n = 0;
}

bool spw_http_host_ok(const spw_http_hosts *a, const char *host)
{
    if (host == NULL)
        return false;
    size_t n = host_name_len(host);
    int family;
    uint8_t ip[16];
    if (n == 0 || !parse_name(host, n, &family, ip))
        return false;
    if (family != 0 && a->any_ip)
        return true;
    for (size_t i = 0; i < a->n; i++) {
        const char *name = a->names[i];
        size_t len = strlen(name);
        int f;
        uint8_t addr[16];
        if (family != 0 && parse_name(name, len, &f, addr) && f == family &&
            memcmp(ip, addr, family == AF_INET ? 4 : 16) == 0)
            return true;
        if (len == n && strncasecmp(name, host, n) == 0)
            return true;
    }
    return false;
}

unsigned spw_http_request_check(const spw_http_hosts *a, const char *method, const char *host,
                                const char *content_length, const char *transfer_encoding)
{
    if (!spw_http_host_ok(a, host))
        return 421;
    if (method == NULL || (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0))
        return 405;
    if (transfer_encoding != NULL)
        return 400;
    if (content_length != NULL) {
        const char *p = content_length;
        while (*p == '0')
            p++;
        if (p == content_length || *p != '\0')
            return 400;
    }
    return 0;
}
