/*
 * spw_docs: the JSON documents of spillway-ctl (status, memory, jobs), the Prometheus text built
 * from status and the HTTP endpoint's token, shared by spillway-ctl and the scheduler's HTTP
 * endpoint so that the two print the same bytes. Not installed.
 *
 * The documents are read over a libspillway session in the ctl role; this module reaches the
 * library only through spillway.h and the library's ctl link (spillway/ctl_link.h).
 * Prefix ctl_doc_: STYLE.md gives ctl_ to spillway-ctl's code (spw_ is spw_base's, spillway_
 * the installed API's), and these are spillway-ctl's documents, wherever they are served.
 */
#ifndef SPW_DOCS_H
#define SPW_DOCS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "spillway/proto.h"
#include "spillway/spillway.h"

/** The documents' names of the task states, indexed by PROTO_TSTATE_*. */
extern const char *const ctl_doc_tstate_names[PROTO_TSTATE_COUNT];

/** Member k of o as an unsigned integer (0 if absent). */
uint64_t ctl_doc_u(json_t *o, const char *k);
/** Member k of o as a string ("" if absent). @note Valid while o holds the member. */
const char *ctl_doc_s(json_t *o, const char *k);

/** Opens a session with the scheduler at addr in the ctl role (it may query, not submit).
 * @param[in] o options (name, secret file, connect timeout), or NULL, as for spillway_connect.
 * @param[out] out the session (close it with spillway_close); untouched on failure.
 * @return 0, or spillway_connect's codes: SPW_EINVAL, SPW_ENONAME, SPW_ECONNREFUSED,
 *         SPW_ETIMEDOUT, SPW_EAUTH, SPW_EVERSION, -errno reading the secret file. */
int ctl_doc_connect(const char *addr, const spillway_opts *o, spillway **out);

/** The `status` document (README: spillway-ctl status --json).
 * @param[out] out a new reference on success, else NULL.
 * @return 0, or the request's error (SPW_ETIMEDOUT, SPW_ECLOSED, the scheduler's refusal). */
int ctl_doc_status(spillway *cl, int timeout_ms, json_t **out);
/** The `memory` document: group_by (NULL or node|owner|ref-type|call-site), sort_by (size|age|id;
 * NULL = size), at most limit objects listed (< 0: all), objects left out with stats_only.
 * @param[out] out a new reference on success, else NULL.
 * @return as ctl_doc_status. */
int ctl_doc_memory(spillway *cl, int timeout_ms, const char *group_by, const char *sort_by,
                   long limit, bool stats_only, json_t **out);
/** The `jobs` document: every graph the scheduler lists, with its progress.
 * @param[out] out a new reference on success, else NULL.
 * @return as ctl_doc_status. */
int ctl_doc_jobs(spillway *cl, int timeout_ms, json_t **out);
/** The document that reply frames already decoded make, as ctl_doc_status, ctl_doc_jobs and
 * ctl_doc_memory (sorted by size, all objects) build it: for tests, which can feed it what no
 * decoder passes (a string that is not UTF-8).
 * @param[in] msgs a STATUS, a GRAPHS, or MEMORY_OBJS replies then a MEMORY_END.
 * @param[in] group_by as for ctl_doc_memory.
 * @return a new reference, or NULL if the replies make no document. */
json_t *ctl_doc__build(const proto_msg *msgs, size_t n, const char *group_by);

/** Every string the documents hold is made here: s as a JSON string, each byte that is not
 * part of well-formed UTF-8 replaced by '?' (jansson refuses such text, which would drop the
 * key). NULL is taken as "". @return a new reference; NULL only when out of memory. */
json_t *ctl_doc_str(const char *s);

/** spillway-ctl drain: drains the worker of that id (all digits) or name (or peer address),
 * and waits until it is drained: {worker, state: "drained", copies}. The worker stays up.
 * @return as ctl_doc_status; SPW_ENOWORKER (no such worker), SPW_ECLOSED (it left first). */
int ctl_doc_drain(spillway *cl, int timeout_ms, const char *worker, json_t **out);
/** spillway-ctl plugins: the uploaded plugins {plugins: [{name, hash, size, object, state,
 * functions, clients, graphs, copies}], bytes}. @return as ctl_doc_status. */
int ctl_doc_plugins(spillway *cl, int timeout_ms, json_t **out);
/** /metrics: the Prometheus text exposition of a status document. @return malloc'd text, or
 * NULL when out of memory. */
char *ctl_doc_metrics(json_t *status);

/** The bearer token of the scheduler's HTTP endpoint: hex HMAC-SHA256(secret, "spillway-http"),
 * 64 characters and a NUL. Cannot fail. */
void ctl_doc_http_token(const uint8_t *secret, size_t len, char out[65]);

#endif
