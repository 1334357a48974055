/*
 * The HTTP endpoint's request checks, apart from libmicrohttpd so that they are pure functions
 * (no I/O, no globals) that a fuzz target can drive: which Host names the endpoint answers to,
 * and whether a request's method, Host and body headers are acceptable before anything is
 * served. A Host check is what stops DNS rebinding: a page of evil.example whose name is made
 * to resolve to 127.0.0.1 still sends "Host: evil.example".
 */
#ifndef SPW_HTTP_HOST_H
#define SPW_HTTP_HOST_H

#include <stdbool.h>
#include <stddef.h>

/** The names a Host header may carry (the port after them is not compared: a port mapping or
 * a proxy may change it, and a rebinding page's own name is what gives it away). */
typedef struct spw_http_hosts {
    char **names;  /* heap, n of them: lower case, no port; IPv6 in brackets */
    size_t n;
    bool any_ip;   /* bound to a wildcard address: any IP literal names this host */
} spw_http_hosts;

/** Whether list is a comma-separated list of host names or IP literals (IPv6 in brackets),
 * each without a port, none empty. */
bool spw_http_hosts_valid(const char *list);
/** Adds the names of a comma-separated list (checked as spw_http_hosts_valid does).
 * @return 0; SPW_EINVAL (a bad list: nothing is added); SPW_ENOMEM. */
int spw_http_hosts_add(spw_http_hosts *a, const char *list);
/** Frees the names; a is empty afterwards. */
void spw_http_hosts_free(spw_http_hosts *a);

/** Whether a Host header value ("NAME", "NAME:PORT", "[V6]", "[V6]:PORT") names this host.
 * NULL (no Host header) does not. */
bool spw_http_host_ok(const spw_http_hosts *a, const char *host);

/** Checks a request's head before it is served. Any argument but a may be NULL (header absent).
 * @return 0 if it may be served; 421 when its Host is not ours; 405 for a method other than GET
 *         or HEAD; 400 for a request that carries a body (Content-Length other than 0, or any
 *         Transfer-Encoding). The first that applies, in that order. */
unsigned spw_http_request_check(const spw_http_hosts *a, const char *method, const char *host,
                                const char *content_length, const char *transfer_encoding);

#endif
