/*
 * spillway error codes: one code space for every module and for the client library.
 *
 * 0 is success. System errors are negative errno values (SPW_ENOMEM == -ENOMEM), so a failed
 * syscall or libuv call (libuv's codes are -errno on Unix) can be returned as is. spillway's own
 * codes sit in -1000..-1999. Names and messages come from the single table below, which
 * generates the enum, spw_strerror() and spw_err_name() (declared in spillway/base.h: they are
 * internal; programs use spillway_strerror()); add a row here rather than a private
 * strerror anywhere else. Foreign codes (LMDB, zstd, msgpack) are translated at the boundary.
 */
#ifndef SPW_ERROR_H
#define SPW_ERROR_H

#include <errno.h>

#ifdef __cplusplus
extern "C" {
#endif

/* System errors we use by name. XX(name, value, message) */
#define SPW_ERRNO_MAP(XX)                                                                          \
    XX(EPERM, -EPERM, "operation not permitted")                                                   \
    XX(ENOENT, -ENOENT, "no such file or directory")                                               \
    XX(EIO, -EIO, "input/output error")                                                            \
    XX(EBADF, -EBADF, "bad file descriptor")                                                       \
    XX(EAGAIN, -EAGAIN, "resource temporarily unavailable")                                        \
    XX(ENOMEM, -ENOMEM, "out of memory")                                                           \
    XX(EACCES, -EACCES, "permission denied")                                                       \
    XX(EEXIST, -EEXIST, "already exists")                                                          \
    XX(EINVAL, -EINVAL, "invalid argument")                                                        \
    XX(ENOSPC, -ENOSPC, "no space left on device")                                                 \
    XX(EPIPE, -EPIPE, "broken pipe")                                                               \
    XX(ERANGE, -ERANGE, "result out of range")                                                     \
    XX(ENAMETOOLONG, -ENAMETOOLONG, "name too long")                                               \
    XX(ENOTSUP, -ENOTSUP, "operation not supported")                                               \
    XX(EADDRINUSE, -EADDRINUSE, "address already in use")                                          \
    XX(ECONNRESET, -ECONNRESET, "connection reset by peer")                                        \
    XX(ECONNREFUSED, -ECONNREFUSED, "connection refused")                                          \
    XX(ETIMEDOUT, -ETIMEDOUT, "timed out")                                                         \
    XX(ECANCELED, -ECANCELED, "operation canceled")

/* spillway's own errors, -1000..-1999. XX(name, value, message) */
#define SPW_OWN_ERROR_MAP(XX)                                                                      \
    XX(EMALFORMED, -1000, "malformed message")                                                     \
    XX(EFRAMESIZE, -1001, "frame larger than the configured maximum")                              \
    XX(EVERSION, -1002, "protocol version mismatch")                                               \
    XX(EAUTH, -1003, "authentication failed")                                                      \
    XX(EPROTO, -1004, "message not valid in this state")                                           \
    XX(ENOOBJ, -1005, "no such object")                                                            \
    XX(ENOTHELD, -1006, "reference not held (double release or unknown id)")                       \
    XX(EPINNED, -1007, "object is pinned")                                                         \
    XX(ESEALED, -1008, "object is sealed")                                                         \
    XX(ENOTSEALED, -1009, "object is not sealed yet")                                              \
    XX(ETOOBIG, -1010, "object larger than the store's capacity")                                  \
    XX(EBACKPRESSURE, -1011, "store full of pinned objects: allocation deadline passed")           \
    XX(ETASKFAILED, -1012, "task failed")                                                          \
    XX(EDEPFAILED, -1013, "a task this one depends on failed")                                     \
    XX(ENOFUNC, -1014, "unknown task function")                                                    \
    XX(EEXECCRASH, -1015, "executor process died while running the task")                         \
    XX(EWORKERLOST, -1016, "worker lost")                                                          \
    XX(ENOWORKER, -1017, "no worker available")                                                    \
    XX(ECLOSED, -1018, "connection closed")                                                        \
    XX(ECORRUPT, -1019, "corrupt data")                                                            \
    XX(ELIMIT, -1020, "limit exceeded")                                                            \
    XX(EDUPLICATE, -1021, "duplicate id")                                                          \
    XX(EOBJLOST, -1022, "object lost and cannot be recomputed")                                    \
    XX(ESPILLFULL, -1023, "spill storage full")                                                    \
    XX(EPLUGIN, -1024, "plugin rejected")                                                          \
    XX(ESHUTDOWN, -1025, "shutting down")                                                          \
    XX(ETASKMEM, -1026, "task exceeded its memory limit")                                         \
    XX(ENONAME, -1027, "host name does not resolve")                                              \
    XX(EAHEAD, -1028, "sent ahead, but its input made on that worker is not there")            \
    XX(ETLS, -1029, "TLS handshake failed")                                                        \
    XX(EENCRYPT, -1030, "encryption settings do not match (--encrypt)")

typedef enum spw_err {
    SPW_OK = 0,
#define SPW_ERR_ENUM_ROW(name, value, msg) SPW_##name = (value),
    SPW_ERRNO_MAP(SPW_ERR_ENUM_ROW) SPW_OWN_ERROR_MAP(SPW_ERR_ENUM_ROW)
#undef SPW_ERR_ENUM_ROW
} spw_err;

#ifdef __cplusplus
}
#endif
#endif /* SPW_ERROR_H */
