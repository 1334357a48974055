/*
 * libspillway's ctl link: the few library functions that in-tree programs reading a scheduler
 * in the ctl role (spw_docs, on behalf of spillway-ctl and the scheduler's HTTP endpoint) may
 * call besides spillway.h. They are in both forms of the library but hidden (no SPILLWAY_API:
 * libspillway.so does not export them) and this header is not installed, so they are no part
 * of the public API; the spillway__ prefix says so. Link spillway_static to use them.
 * Everything else of the library stays behind client/src/client_int.h.
 */
#ifndef SPW_CTL_LINK_H
#define SPW_CTL_LINK_H

#include <stdint.h>

#include "spillway/proto.h"
#include "spillway/spillway.h"

/** Builds a request frame: proto_enc_NAME(e, out, req, &msg). */
typedef void spillway__enc_fn(proto_enc *e, spw_buf *out, uint64_t req, void *arg);
/** Sees one reply frame; m is valid only during the call. */
typedef void spillway__reply_fn(const proto_msg *m, void *arg);

/** Connects with a given role (PROTO_ROLE_CLIENT or PROTO_ROLE_CTL); otherwise as
 * spillway_connect, with the same return codes. */
int spillway__connect_role(const char *addr, const spillway_opts *o, int role, spillway **out);

/** Sends one request to the scheduler and waits for its reply, of type reply_type. enc builds
 * the frame. on_reply sees the reply while it is valid. An ERROR reply becomes the return value
 * (errmsg has its text); a reply of another type fails the call with SPW_EPROTO, naming both
 * types, without on_reply.
 * @return 0, the peer's error, SPW_EPROTO, SPW_ETIMEDOUT or SPW_ECLOSED. */
int spillway__request(spillway *c, spillway__enc_fn *enc, spillway__reply_fn *on_reply,
                      void *arg, uint32_t reply_type, int timeout_ms);

/** Like spillway__request for replies in several frames: on_reply sees each, and the frame of
 * type last_type ends the request. */
int spillway__request_until(spillway *c, spillway__enc_fn *enc, spillway__reply_fn *on_reply,
                            void *arg, uint32_t last_type, int timeout_ms);

#endif
