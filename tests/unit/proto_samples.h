/* Wire samples shared by the codec's unit tests and the fuzz corpus generator. */
#ifndef SPW_TEST_PROTO_SAMPLES_H
#define SPW_TEST_PROTO_SAMPLES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "spillway/proto.h"

extern const spw_id SAMPLE_ID1;
extern const uint8_t SAMPLE_NONCE[16];
extern const uint8_t SAMPLE_PROOF[32];

/* Appends a valid frame of message `type` to b; false for a type with no sample. Aborts if the
 * encoder refuses the sample (a bug in the sample). */
bool proto_sample_encode(uint32_t type, spw_buf *b);

/* Appends a frame around an arbitrary body: the length prefix, then the bytes. */
void proto_sample_frame(spw_buf *b, const uint8_t *body, size_t n);

/* A body every decoder must refuse with SPW_EMALFORMED; name is also a corpus file name. */
typedef struct proto_bad_body {
    const char *name;
    const uint8_t *body;
    size_t len;
} proto_bad_body;

extern const proto_bad_body proto_bad_bodies[];
extern const size_t proto_bad_body_count;

#endif
