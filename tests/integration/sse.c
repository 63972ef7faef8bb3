/*
 * sse.c - see sse.h.
 */
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "sse.h"

/* ---- a streamed request, read by hand ----------------------------------- */

void sse_event_release(struct sse_event *e)
{
    free(e->data);
    e->data = NULL;
}

static bool sse_fill(struct sse *c, int timeout_ms)
{
    struct pollfd pf = {c->fd, POLLIN, 0};
    if (poll(&pf, 1, timeout_ms) != 1)
        return false;
    char buf[65536];
    ssize_t n = read(c->fd, buf, sizeof buf);
    if (n <= 0) {
        c->eof = true;
        return false;
    }
    c->raw = realloc(c->raw, c->raw_len + (size_t)n + 1);
    memcpy(c->raw + c->raw_len, buf, (size_t)n);
    c->raw_len += (size_t)n;
    c->raw[c->raw_len] = '\0';
    return true;
}

static void body_add(struct sse *c, const char *p, size_t n)
{
    c->body = realloc(c->body, c->body_len + n + 1);
    memcpy(c->body + c->body_len, p, n);
    c->body_len += n;
    c->body[c->body_len] = '\0';
}

/* Move whole chunks from raw to body. */
static void sse_decode(struct sse *c)
{
    for (;;) {
        if (!c->chunked) {
            body_add(c, c->raw, c->raw_len);
            c->raw_len = 0;
            return;
        }
        char *crlf = memmem(c->raw, c->raw_len, "\r\n", 2);
        if (!crlf)
            return;
        size_t size = strtoul(c->raw, NULL, 16);
        size_t hl = (size_t)(crlf - c->raw) + 2;
        if (c->raw_len < hl + size + 2)
            return;
        if (size == 0) {
            c->eof = true;
            c->raw_len = 0;
            return;
        }
        body_add(c, c->raw + hl, size);
        memmove(c->raw, c->raw + hl + size + 2, c->raw_len - hl - size - 2);
        c->raw_len -= hl + size + 2;
    }
}

/* POST /v1/executions with body (JSON text) as user; accept: the Accept
 * header or NULL.  Reads the head; c->status 0 when none came. */
void sse_open(struct sse *c, struct itest_server *s, const char *key,
              const char *user, const char *body, const char *accept)
{
    memset(c, 0, sizeof(*c));
    c->fd = itest_connect(s);
    char *rq =
        itest_fmt("POST /v1/executions HTTP/1.1\r\nHost: x\r\n"
                  "Authorization: Bearer %s\r\nX-User-Id: %s\r\n"
                  "Content-Type: application/json\r\n%s%s%s"
                  "Content-Length: %zu\r\n\r\n%s",
                  key, user, accept ? "Accept: " : "", accept ? accept : "",
                  accept ? "\r\n" : "", strlen(body), body);
    CHECK(c->fd >= 0 && itest_send_all(c->fd, rq, strlen(rq)));
    free(rq);
    char *end = NULL;
    for (int i = 0; i < 600 && !end && !c->eof; i++) {
        (void)sse_fill(c, 100);
        end = c->raw ? strstr(c->raw, "\r\n\r\n") : NULL;
    }
    if (!end)
        return;
    size_t hl = (size_t)(end - c->raw) + 4;
    snprintf(c->head, sizeof c->head, "%.*s", (int)hl, c->raw);
    c->status = atoi(c->head + 9);
    c->chunked = strcasestr(c->head, "Transfer-Encoding: chunked") != NULL;
    memmove(c->raw, c->raw + hl, c->raw_len - hl);
    c->raw_len -= hl;
    sse_decode(c);
}

/* A header of the response head (copied into out), or false. */
bool sse_header(const struct sse *c, const char *name, char *out, size_t outsz)
{
    char pat[128];
    snprintf(pat, sizeof pat, "\r\n%s: ", name);
    const char *p = strcasestr(c->head, pat);
    if (!p)
        return false;
    p += strlen(pat);
    size_t n = strcspn(p, "\r");
    snprintf(out, outsz, "%.*s", (int)n, p);
    return true;
}

/* The next event or comment, waiting up to timeout_ms; false at the end
 * of the stream or after the wait. */
bool sse_next(struct sse *c, int timeout_ms, struct sse_event *e)
{
    double until = itest_now() + timeout_ms / 1000.0;
    memset(e, 0, sizeof(*e));
    e->id = -1;
    for (;;) {
        char *sep = c->body ? strstr(c->body, "\n\n") : NULL;
        if (sep) {
            size_t n = (size_t)(sep - c->body);
            char *block = strndup(c->body, n);
            memmove(c->body, sep + 2, c->body_len - n - 2 + 1);
            c->body_len -= n + 2;
            for (char *save, *l = strtok_r(block, "\n", &save); l;
                 l = strtok_r(NULL, "\n", &save)) {
                if (!strncmp(l, "id: ", 4))
                    e->id = atol(l + 4);
                else if (!strncmp(l, "event: ", 7))
                    snprintf(e->kind, sizeof e->kind, "%s", l + 7);
                else if (!strncmp(l, "data: ", 6))
                    e->data = strdup(l + 6);
                else if (l[0] == ':')
                    e->data = strdup(l + 1);
            }
            free(block);
            return true;
        }
        if (c->eof)
            return false;
        double left = until - itest_now();
        if (left <= 0)
            return false;
        if (sse_fill(c, (int)(left * 1000) + 1))
            sse_decode(c);
    }
}

void sse_close(struct sse *c)
{
    if (c->fd >= 0)
        close(c->fd);
    c->fd = -1;
    free(c->raw);
    free(c->body);
    c->raw = c->body = NULL;
}

/* The run's events up to its result (stdout and stderr joined into out
 * and err, when given; the ids checked to count up from 1): the result
 * (new), or NULL. */
json_t *sse_collect(struct sse *c, int timeout_ms, long want, char **out,
                    char **err)
{
    struct sse_event e;
    json_t *result = NULL;
    size_t ol = 0, el = 0;
    char *o = calloc(1, 1), *er = calloc(1, 1);
    while (!result && sse_next(c, timeout_ms, &e)) {
        if (!e.kind[0]) { /* a comment */
            sse_event_release(&e);
            continue;
        }
        CHECKF(e.id == want, "event id %ld, want %ld", e.id, want);
        want = e.id + 1;
        json_t *d = e.data ? json_loads(e.data, JSON_DECODE_ANY, NULL) : NULL;
        CHECKF(d != NULL, "event %s: data is not JSON: %.200s", e.kind,
               e.data ? e.data : "(none)");
        if (!strcmp(e.kind, "result")) {
            result = json_incref(d);
        } else if (!strcmp(e.kind, "stdout") || !strcmp(e.kind, "stderr")) {
            CHECK(json_is_string(d));
            const char *t = json_string_value(d);
            size_t n = t ? strlen(t) : 0;
            char **dst = e.kind[3] == 'o' ? &o : &er;
            size_t *len = e.kind[3] == 'o' ? &ol : &el;
            *dst = realloc(*dst, *len + n + 1);
            memcpy(*dst + *len, t ? t : "", n + 1);
            *len += n;
        }
        json_decref(d);
        sse_event_release(&e);
    }
    if (out)
        *out = o;
    else
        free(o);
    if (err)
        *err = er;
    else
        free(er);
    return result;
}

/* ---- sessions: in integration-session/, streamed runs are calls ------- */

char *session_new(struct itest_server *s, const char *user)
{
    struct itest_resp r;
    itest_request(s, "POST", "/v1/sessions", s->admin_key, user,
                  "application/json", "{}", 2, NULL, &r);
    CHECK_STATUS(&r, 201);
    char *id = itest_json_dup(r.json, "session_id");
    itest_resp_release(&r);
    return id;
}

void session_end(struct itest_server *s, const char *user, const char *id)
{
    struct itest_resp r;
    char *path = itest_fmt("/v1/sessions/%s", id);
    itest_request(s, "DELETE", path, s->admin_key, user, NULL, NULL, 0, NULL,
                  &r);
    itest_resp_release(&r);
    free(path);
}

/* The request body for code: {"code", "stream", extra...}, in a session
 * of sid when not NULL.  New text. */
char *body_of(const char *code, bool stream, const char *sid, json_t *extra)
{
    json_t *b = extra ? extra : json_object();
    json_object_set_new(b, "code", json_string(code));
    if (stream)
        json_object_set_new(b, "stream", json_true());
    if (sid)
        json_object_set_new(b, "session_id", json_string(sid));
    char *text = json_dumps(b, JSON_COMPACT);
    json_decref(b);
    return text;
}
