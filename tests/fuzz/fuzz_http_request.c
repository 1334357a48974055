/*
 * Fuzz target for the HTTP endpoint's request checks (scheduler/src/http_host.c): the
 * --http-host list parser, the Host name check and spw_http_request_check, which see every
 * request's head before anything is served.
 *
 * Input layout: one flag byte, then newline-separated fields: an --http-host list, a method, a
 * Host, a Content-Length and a Transfer-Encoding. Flag bit 0 is any_ip (a wildcard bind); bits
 * 1 to 3 say whether the Host, Content-Length and Transfer-Encoding headers are present (absent:
 * NULL). Fields are copied to NUL-terminated heap blocks of exactly their size, so any read past
 * one trips ASan.
 *
 * Checked besides "no crash": adding the list succeeds exactly when spw_http_hosts_valid says it
 * is valid; every name added is then accepted as a Host, with a port and without; "localhost"
 * always is (the endpoint always lists it), and a name with a bad port never is; the request
 * check answers 0, 400, 405 or 421 and nothing else, 421 exactly when the Host check fails.
 */
#include "http_host.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "fuzz_http_request: %s:%d: check failed: %s: ", __FILE__, __LINE__,    \
                    #cond);                                                                        \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fputc('\n', stderr);                                                                   \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

enum { F_LIST, F_METHOD, F_HOST, F_CL, F_TE, NFIELDS };

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    uint8_t flags = data[0];
    const uint8_t *p = data + 1, *end = data + size;
    char *field[NFIELDS] = {0};
    for (int i = 0; i < NFIELDS; i++) {
        const uint8_t *nl = i < NFIELDS - 1 ? memchr(p, '\n', (size_t)(end - p)) : NULL;
        const uint8_t *stop = nl != NULL ? nl : end;
        /* A NUL inside a field ends it, as it would in a C string from the header parser. */
        field[i] = strndup((const char *)p, (size_t)(stop - p));
        p = nl != NULL ? nl + 1 : end;
    }
    spw_http_hosts a = {0};
    a.any_ip = (flags & 1) != 0;
    bool valid = spw_http_hosts_valid(field[F_LIST]);
    int rc = spw_http_hosts_add(&a, field[F_LIST]);
    CHECK((rc == 0) == valid, "add returned %d for a list that is %s", rc,
          valid ? "valid" : "invalid");
    for (size_t i = 0; i < a.n; i++) {
        char with_port[300];
        CHECK(spw_http_host_ok(&a, a.names[i]), "added name '%s' refused", a.names[i]);
        snprintf(with_port, sizeof with_port, "%s:8080", a.names[i]);
        CHECK(spw_http_host_ok(&a, with_port), "added name '%s' refused", with_port);
        snprintf(with_port, sizeof with_port, "%s:80x", a.names[i]);
        CHECK(!spw_http_host_ok(&a, with_port), "'%s' accepted", with_port);
    }
    rc = spw_http_hosts_add(&a, "localhost");
    CHECK(rc == 0, "localhost: %d", rc);
    CHECK(spw_http_host_ok(&a, "LOCALHOST:1"), "localhost refused");

    const char *host = (flags & 2) ? field[F_HOST] : NULL;
    unsigned code = spw_http_request_check(&a, field[F_METHOD], host, (flags & 4) ? field[F_CL] : NULL,
                                           (flags & 8) ? field[F_TE] : NULL);
    CHECK(code == 0 || code == 400 || code == 405 || code == 421, "code %u", code);
    CHECK((code == 421) == !spw_http_host_ok(&a, host), "code %u for host '%s'", code,
          host != NULL ? host : "(none)");
    spw_http_hosts_free(&a);
    for (int i = 0; i < NFIELDS; i++)
        free(field[i]);
    return 0;
}
