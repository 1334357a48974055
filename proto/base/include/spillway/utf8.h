/*
 * UTF-8 checks for strings that cross a process boundary: names, hosts, call sites, function
 * names and error texts travel between daemons and end up in JSON, which cannot carry invalid
 * UTF-8. Receivers refuse such strings; senders scrub their own (a path or a host name from the
 * system may hold any bytes) so that what they send is always accepted.
 */
#ifndef SPW_UTF8_H
#define SPW_UTF8_H

#include <stdbool.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/** Whether n bytes at p are well-formed UTF-8 (no overlong forms, no surrogates, nothing past
 * U+10FFFF). NUL bytes count as valid here: callers that forbid them check apart. */
bool spw_utf8_valid(const void *p, size_t n);
/** Replaces, in place, every byte of p that is not part of a well-formed UTF-8 sequence with
 * '?' (a sequence cut short at the end, too), keeping the length.
 * @return how many bytes were replaced. */
size_t spw_utf8_scrub(void *p, size_t n);
/** The offset of the first byte of p that is not part of a well-formed sequence, or n. */
size_t spw_utf8_bad_at(const void *p, size_t n);

#ifdef __cplusplus
}
#endif
#endif /* SPW_UTF8_H */
