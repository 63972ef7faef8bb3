/*
 * sse.h - a streamed execution read by hand in the integration tests
 * (test_live.c, test_calls.c): a plain socket and a small HTTP/1.1
 * chunked reader, so what is checked is the bytes on the wire; and the
 * sessions those tests run their streamed calls in.
 */
#ifndef ITEST_SSE_H
#define ITEST_SSE_H

#include "harness.h"

/* a and b equal, NULL equal to nothing. */
static inline bool streq(const char *a, const char *b)
{
    return a && b && !strcmp(a, b);
}

struct sse {
    int fd;
    int status;
    char head[4096]; /* the response head */
    char *raw;       /* bytes read, not yet decoded */
    size_t raw_len;
    char *body; /* decoded body, not yet split into events */
    size_t body_len;
    bool chunked, eof;
};

struct sse_event {
    long id;       /* -1: none */
    char kind[32]; /* "" for a comment */
    char *data;    /* owned; the data line (or the comment's text) */
};

void sse_event_release(struct sse_event *e);

/* POST /v1/executions with body (JSON text) as user; accept: the Accept
 * header or NULL.  Reads the head; c->status 0 when none came. */
void sse_open(struct sse *c, struct itest_server *s, const char *key,
              const char *user, const char *body, const char *accept);

/* A header of the response head (copied into out), or false. */
bool sse_header(const struct sse *c, const char *name, char *out, size_t outsz);

/* The next event or comment, waiting up to timeout_ms; false at the end
 * of the stream or after the wait. */
bool sse_next(struct sse *c, int timeout_ms, struct sse_event *e);

void sse_close(struct sse *c);

/* The run's events up to its result (stdout and stderr joined into out
 * and err, when given; the ids checked to count up from 1): the result
 * (new), or NULL. */
json_t *sse_collect(struct sse *c, int timeout_ms, long want, char **out,
                    char **err);

char *session_new(struct itest_server *s, const char *user);

void session_end(struct itest_server *s, const char *user, const char *id);

/* The request body for code: {"code", "stream", extra...}, in a session
 * of sid when not NULL.  New text. */
char *body_of(const char *code, bool stream, const char *sid, json_t *extra);

#endif
