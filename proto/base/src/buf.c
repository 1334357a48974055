/*
 * spw_buf: a growable byte buffer on the counted heap (SPW_MOD_BASE).
 */
#include "spillway/base.h"

#include <string.h>

int spw_buf_reserve(spw_buf *b, size_t extra)
{
    if (extra > SIZE_MAX - b->len)
        return SPW_ENOMEM;
    size_t need = b->len + extra;
    if (need <= b->cap)
        return 0;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < need)
        cap = cap > SIZE_MAX / 2 ? need : cap * 2;
    uint8_t *p = spw_try_realloc(SPW_MOD_BASE, b->data, cap);
    if (p == NULL)
        return SPW_ENOMEM;
    b->data = p;
    b->cap = cap;
    return 0;
}

void spw_buf_append_grow(spw_buf *b, const void *p, size_t n)
{
    if (spw_buf_reserve(b, n) != 0)
        SPW_PANIC("out of memory growing a buffer by %zu bytes", n);
    if (n > 0)
        memcpy(b->data + b->len, p, n);
    b->len += n;
}

void spw_buf_release(spw_buf *b)
{
    spw_free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
}

void spw_buf_consume(spw_buf *b, size_t n)
{
    SPW_ASSERT(n <= b->len);
    if (n == b->len) {
        b->len = 0;
        return;
    }
    memmove(b->data, b->data + n, b->len - n);
    b->len -= n;
}
