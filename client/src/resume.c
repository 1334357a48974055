/*
 * libspillway: what a session needs to survive a broken connection to the scheduler.
 *
 * Every frame for the scheduler is built in c->log (a SUBMIT's frames in c->sub) and stays
 * there until an answer arrives: the scheduler handles a session's frames in order, so an
 * answer means every frame sent before it was processed (spillway__answered forgets them).
 * After a reconnect, WELCOME's nrecv says how many frames of the session the scheduler
 * processed; spillway__resend sends the rest, once each. When every frame was processed but
 * the call under way has no answer (it was lost with the connection), its request is sent
 * again where that is harmless: reads, and the PUT_PLACE and last SUBMIT frame the scheduler
 * recognises as repeats and answers from what they did. Other calls (BROADCAST, plugins) fail
 * with SPW_ECLOSED rather than act twice. The reconnect loop itself is in client.c.
 */
#include "client_int.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* A log this large is given back once its frames are answered, not kept for reuse. */
#define LOG_KEEP_MAX (1u << 20)
/* Unanswered frames (releases between calls) past this many bytes: a cheap request is made
 * for its answer, so that the log does not grow without bound. */
#define LOG_ANSWER_AT (4u << 20)

spw_buf *spillway__out(spillway *c)
{
    return &c->log;
}

bool spillway__can_resume(const spillway *c)
{
    return c->reconnect_ms > 0 && c->resumable && !c->lost && !spillway__stalled(c);
}

void spillway__lose(spillway *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->lost_why, sizeof c->lost_why, fmt, ap);
    va_end(ap);
    if (!c->lost)
        spw_log(SPW_LOG_WARN, "%s", c->lost_why);
    c->lost = true;
}

int spillway__send(spillway *c, proto_enc *e)
{
    int n = proto_enc_end(e, spillway__max_frame(c));
    if (n < 0)
        return n;
    if (c->sched == NULL && !spillway__can_resume(c)) {
        c->log.len = e->start;
        return SPW_ECLOSED;
    }
    c->log_frames++;
    /* On a broken connection the frame goes out again after the resume. */
    if (c->sched != NULL)
        (void)proto_conn_send_raw(c->sched, c->log.data + e->start, (size_t)n);
    return 0;
}

static void nothing(void *arg)
{
    (void)arg;
}

int spillway__send_submit(spillway *c, uint8_t *frames, size_t len, uint32_t nframes)
{
    if (c->sched == NULL && !spillway__can_resume(c)) {
        spw_free(frames);
        return SPW_ECLOSED;
    }
    spw_free(c->sub); /* one call at a time: none is left, but never leak one */
    c->sub = frames;
    c->sub_len = len;
    c->sub_frames = nframes;
    /* Sent from c->sub without a copy; it stays until the answer, after the bytes left. */
    if (c->sched != NULL)
        (void)proto_conn_send_raw_borrowed(c->sched, frames, len, nothing, NULL);
    return 0;
}

void spillway__answered(spillway *c)
{
    c->log_base += c->log_frames + c->sub_frames;
    c->log_frames = 0;
    if (c->log.cap > LOG_KEEP_MAX)
        spw_buf_release(&c->log);
    else
        spw_buf_reset(&c->log);
    spw_free(c->sub);
    c->sub = NULL;
    c->sub_len = 0;
    c->sub_frames = 0;
}

/* A GRAPHS_REQ that selects no graph: the cheapest request the scheduler answers. */
static void nothing_enc(proto_enc *e, spw_buf *out, uint64_t req, void *arg)
{
    const spillway *c = arg;
    proto_enc_graphs_req(e, out, req,
                         &(proto_graphs_req_msg){.session = c->wel.session, .graph = UINT64_MAX});
}

void spillway__log_bound(spillway *c)
{
    if (c->log.len < LOG_ANSWER_AT || c->call.active || !c->resumable || c->sched == NULL)
        return;
    (void)spillway__request(c, nothing_enc, NULL, c, PROTO_GRAPHS, -1);
}

void spillway__resume_free(spillway *c)
{
    spw_buf_release(&c->log);
    spw_free(c->sub);
    c->sub = NULL;
}

/* The offset of frame k of the whole frames in b (b->len: past the last one). */
static size_t frame_at(const spw_buf *b, uint64_t k)
{
    size_t at = 0;
    for (uint64_t i = 0; i < k && at + PROTO_HDR_LEN <= b->len; i++) {
        const uint8_t *h = b->data + at;
        at += PROTO_HDR_LEN +
              (((size_t)h[0] << 24) | ((size_t)h[1] << 16) | ((size_t)h[2] << 8) | h[3]);
    }
    return at < b->len ? at : b->len;
}

/* The reply types of calls whose request, done once already, must not be sent again. */
static bool acts_twice(uint32_t reply_type)
{
    return reply_type == PROTO_BROADCAST_DONE || reply_type == PROTO_PLUGIN_CHECKED ||
           reply_type == PROTO_OK;
}

int spillway__resend(spillway *c)
{
    uint64_t nrecv = c->wel.nrecv;
    if (c->sub != NULL) {
        /* One log from here on: the SUBMIT's frames follow the others, as they were sent. */
        spw_buf_append(&c->log, c->sub, c->sub_len);
        c->log_frames += c->sub_frames;
        spw_free(c->sub);
        c->sub = NULL;
        c->sub_len = 0;
        c->sub_frames = 0;
    }
    if (nrecv < c->log_base || nrecv - c->log_base > c->log_frames) {
        spillway__lose(c,
                       "the scheduler %s resumed session=%llu but counts %llu of its frames, "
                       "not %llu..%llu: not resumed",
                       c->addr, (unsigned long long)c->session, (unsigned long long)nrecv,
                       (unsigned long long)c->log_base,
                       (unsigned long long)(c->log_base + c->log_frames));
        return SPW_EPROTO;
    }
    uint64_t done = nrecv - c->log_base;
    call *k = &c->call;
    size_t from = frame_at(&c->log, done);
    if (done == c->log_frames && done > 0 && k->active && !k->done) {
        /* All processed, and the answer to the call under way was lost. Its request is the
         * last frame sent. */
        if (acts_twice(k->type)) {
            k->status = SPW_ECLOSED;
            k->done = true;
            spillway__set_err(c,
                              "the scheduler %s took the request before the connection broke "
                              "and its answer was lost; it was not asked again (it would "
                              "act twice)",
                              c->addr);
        } else {
            from = frame_at(&c->log, done - 1);
            done--;
        }
    }
    spw_buf_consume(&c->log, from);
    c->log_frames -= (uint32_t)done;
    /* What is left goes out now and counts anew at the scheduler, after its nrecv (a request
     * asked again too). */
    c->log_base = nrecv;
    if (c->log.len > 0 && c->sched != NULL)
        (void)proto_conn_send_raw(c->sched, c->log.data, c->log.len);
    return 0;
}
