/*
 * spillway-ctl's JSON documents and the Prometheus text built from them, shared by spillway-ctl
 * and the scheduler's HTTP endpoint (one code path for both). Not installed.
 */
#ifndef SPW_CTL_DOCS_H
#define SPW_CTL_DOCS_H

#include <stdbool.h>

#include <jansson.h>

#include "client_int.h"

extern const char *const ctldoc_stat_names[PROTO_STAT_COUNT];
extern const char *const ctldoc_tstate_names[]; /* PROTO_TSTATE_COUNT of them */

/** Member k of o as an unsigned integer (0 if absent). */
uint64_t ctldoc_u(json_t *o, const char *k);
/** Member k of o as a string ("" if absent). */
const char *ctldoc_s(json_t *o, const char *k);

/** The `status` document (README: spillway-ctl status --json).
 * @param[out] out a new reference on success, else NULL.
 * @return 0, or the request's error (SPW_ETIMEDOUT, SPW_ECLOSED, the scheduler's refusal). */
int ctldoc_status(spillway *cl, int timeout_ms, json_t **out);
/** The `memory` document: group_by (NULL or node|owner|ref-type|call-site), sort_by (size|age|id;
 * NULL = size), at most limit objects listed (< 0: all), objects left out with stats_only. */
int ctldoc_memory(spillway *cl, int timeout_ms, const char *group_by, const char *sort_by,
                  long limit, bool stats_only, json_t **out);
/** The `jobs` document: every graph the scheduler lists, with its progress. */
int ctldoc_jobs(spillway *cl, int timeout_ms, json_t **out);
/** /metrics: the Prometheus text exposition of a status document. @return malloc'd text, or
 * NULL when out of memory. */
char *ctldoc_metrics(json_t *status);

/** The bearer token of the scheduler's HTTP endpoint: hex HMAC-SHA256(secret, "spillway-http"),
 * 64 characters and a NUL. Cannot fail. */
void ctldoc_http_token(const uint8_t *secret, size_t len, char out[65]);

#endif
