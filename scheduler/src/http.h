/*
 * spw_http: the scheduler's HTTP endpoint (--http): /metrics for Prometheus, /api/status,
 * /api/memory and /api/jobs (the documents spillway-ctl prints, built by the same code), the
 * dashboard at / with its history at /api/history.
 *
 * libmicrohttpd serves requests from its own thread. The endpoint reads the scheduler only as a
 * spillway-ctl session over the scheduler's own port (so every document is exactly ctl's) and
 * never touches the scheduler's loop or tables; a sampler thread records a bounded history
 * (one sample per interval: per-worker memory, tasks by state) for the dashboard's charts.
 * Owns: the MHD daemon, the sampler thread, the ctl connection, the history ring.
 */
#ifndef SPW_HTTP_H
#define SPW_HTTP_H

#include <stddef.h>
#include <stdint.h>

#include "http_host.h" /* spw_http_hosts_valid, for --http-host */

typedef struct spw_http spw_http;

typedef struct spw_http_opts {
    const char *listen;        /* "HOST:PORT" (port 0: any) */
    const char *sched_addr;    /* the scheduler's bound address, to connect to as ctl */
    const char *secret_file;   /* cluster secret file, or NULL */
    const uint8_t *secret;     /* its bytes (for the token), or NULL */
    size_t secret_len;
    int encrypt;               /* the scheduler's --encrypt and --encrypt-local, for the link */
    int encrypt_local;
    const char *tls_cert, *tls_key, *tls_ca; /* ... and its certificates, or NULL */
    uint32_t sample_ms;        /* history interval (1000) */
    uint32_t history;          /* samples kept (600) */
    int token_always;          /* want the token even on a loopback address (needs secret) */
    const char *const *hosts;  /* --http-host lists: names the Host header may carry besides */
    size_t nhosts;             /* the bound address and localhost (comma-separated each) */
} spw_http_opts;

/** Binds and starts serving. Without a secret, or on a loopback address, requests need no
 * token; otherwise each must carry "Authorization: Bearer TOKEN" (or ?token=TOKEN) where
 * TOKEN is hex HMAC-SHA256(secret, "spillway-http") (spillway-ctl http-token prints it).
 * Every request must name the endpoint in its Host header (the bound address, localhost,
 * 127.0.0.1, [::1] or a name in hosts; any port), else it is answered 421: a page of another
 * site that a DNS rebinding points here reads nothing. Connections are bounded: a request head
 * must arrive whole within 10 s of the accept (or of the previous request's end), one address
 * holds at most 64 connections, and past 2048 in all (less with a low descriptor limit) a
 * request is answered 503.
 * @param[out] bound the address bound ("127.0.0.1:PORT"), at least 64 bytes.
 * @return 0; SPW_EINVAL (bad address, token_always without a secret, a bad hosts list), a -errno from socket/bind/listen, SPW_EIO if
 *         libmicrohttpd would not start. Nothing is left running on error. */
int spw_http_start(const spw_http_opts *o, spw_http **out, char *bound, size_t boundlen);
/** Stops serving, joins the threads and frees everything. Call after the scheduler's loop has
 * stopped (a request under way then fails at once rather than waiting for a timeout). */
void spw_http_stop(spw_http *h);

#endif
