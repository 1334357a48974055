/*
 * The error code space's texts and names (spillway/error.h's X-macro tables), and the report a
 * failed invariant check makes before it aborts.
 */
#include "spillway/base.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *spw_strerror(int err)
{
    switch (err) {
    case 0:
        return "success";
#define SPW_ERR_MSG_ROW(name, value, msg)                                                          \
    case (value):                                                                                  \
        return msg;
        SPW_ERRNO_MAP(SPW_ERR_MSG_ROW)
        SPW_OWN_ERROR_MAP(SPW_ERR_MSG_ROW)
#undef SPW_ERR_MSG_ROW
    default:
        if (err < 0 && err > -1000) {
            /* Another errno value: strerror's text is static for known values on glibc. */
            return strerror(-err);
        }
        return "unknown error";
    }
}

const char *spw_err_name(int err)
{
    switch (err) {
    case 0:
        return "SPW_OK";
#define SPW_ERR_NAME_ROW(name, value, msg)                                                         \
    case (value):                                                                                  \
        return "SPW_" #name;
        SPW_ERRNO_MAP(SPW_ERR_NAME_ROW)
        SPW_OWN_ERROR_MAP(SPW_ERR_NAME_ROW)
#undef SPW_ERR_NAME_ROW
    default:
        return "SPW_E?";
    }
}

void spw_invariant_failed(const char *checker, int line, spw_id id, const char *fmt, ...)
{
    char hex[SPW_ID_HEX_LEN + 1], msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "%s: invariant violated (check.c:%d): %s%s%s\n", checker, line, msg,
            spw_id_is_nil(id) ? "" : " id=", spw_id_is_nil(id) ? "" : spw_id_hex(id, hex));
    fflush(stderr);
    abort();
}
