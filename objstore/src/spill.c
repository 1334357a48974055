/*
 * Spilling to LMDB with zstd. This stage has no spill storage yet: a store opened with a spill
 * directory refuses with SPW_ENOTSUP, and memory pressure only makes allocations wait.
 */
#include "store_int.h"

int ost__spill_open(ost_store *s, const char *dir)
{
    (void)s;
    (void)dir;
    return SPW_ENOTSUP;
}

void ost__spill_close(ost_store *s)
{
    (void)s;
}

void ost__spill_forget(ost_store *s, ost_obj *o)
{
    (void)s;
    o->on_disk = false;
}

void ost__spill_maintain(ost_store *s)
{
    (void)s;
}

void ost__spill_for(ost_store *s, uint64_t bytes)
{
    (void)s;
    (void)bytes;
}

int ost_obj_get_async(ost_store *s, ost_obj *o, ost_cb cb, void *arg)
{
    int rc = ost_obj_pin(s, o);
    cb(arg, rc, rc == 0 ? o : NULL);
    return 0;
}

int ost_store_spill_all(ost_store *s, void (*cb)(void *arg), void *arg)
{
    (void)s;
    (void)cb;
    (void)arg;
    return SPW_ENOTSUP;
}
