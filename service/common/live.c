/*
 * live.c - one execution's live channel (see live.h).
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "json_out.h"
#include "live.h"
#include "util.h"

/* One call from the code: waiting for its answer, answered (the answer
 * not yet taken by the producer) or over (taken, timed out, gone). */
enum call_state { CALL_WAITING, CALL_ANSWERED, CALL_OVER };
struct live_call {
    char id[IPD_LIVE_CALL_ID_MAX];
    uint64_t seq;
    enum call_state state;
    int64_t since;  /* monotonic ms: opened */
    uint64_t order; /* answered: the channel's answer count then (the
                       order the producer takes answers in) */
    char *answer;   /* CALL_ANSWERED: JSON text */
    size_t len;
};

/* One event waiting for the consumer. */
struct live_ev {
    struct live_ev *next;
    uint64_t id;
    int stream; /* 1, 2: raw output bytes in data; 0: JSON text */
    char kind[IPD_LIVE_KIND_MAX]; /* "stdout", "stderr", ..., "result" */
    struct ipd_buf data;
    size_t counted; /* of the channel's pending bytes (not the result) */
    bool last;      /* ipd_live_end's: nothing comes after it */
};

struct ipd_live {
    atomic_int refs;
    atomic_bool cancelled;
    int fd; /* eventfd: the producer's wake-up */
    pthread_mutex_t lock;
    /* under lock: */
    bool streaming, ended, taken_end, asleep, poked, want_room;
    bool result_queued; /* ended with a result event (else none comes) */
    bool wake_due;      /* output came within IPD_LIVE_COALESCE_MS of the
                           last wake: the next is due then */
    int64_t last_wake;  /* monotonic ms */
    struct ipd_live_consumer consumer;
    struct live_ev *head, *tail;
    size_t pending; /* raw output bytes queued */
    uint64_t next_id;
    unsigned char carry[3][4]; /* [stream]: a split character's start */
    size_t carry_len[3];
    int64_t idle_since; /* monotonic ms: the last take or poke */
    /* Since when something waits for the consumer to take it (an event,
     * or a poke's keep-alive), monotonic ms; 0: nothing waits.  Read
     * without the lock (ipd_live_waiting_since). */
    _Atomic int64_t waiting_since;
    /* Calls (under lock): */
    bool calls_on, calls_over;
    struct ipd_live_call_limits call_lim;
    struct live_call *calls; /* opened so far, in order */
    unsigned n_calls, calls_alloc, calls_waiting;
    uint64_t answers; /* answers given so far */
};

struct ipd_live *ipd_live_new(void)
{
    int fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (fd < 0)
        return NULL;
    struct ipd_live *l = ipd_xcalloc(1, sizeof(*l));
    atomic_init(&l->refs, 1);
    atomic_init(&l->cancelled, false);
    atomic_init(&l->waiting_since, 0);
    l->fd = fd;
    l->next_id = 1;
    l->idle_since = ipd_mono_ms();
    pthread_mutex_init(&l->lock, NULL);
    return l;
}

struct ipd_live *ipd_live_ref(struct ipd_live *l)
{
    if (l)
        atomic_fetch_add(&l->refs, 1);
    return l;
}

static void ev_free(struct live_ev *e)
{
    ipd_buf_release(&e->data);
    free(e);
}

static void drop_events(struct ipd_live *l)
{
    while (l->head) {
        struct live_ev *e = l->head;
        l->head = e->next;
        ev_free(e);
    }
    l->tail = NULL;
    l->pending = 0;
}

void ipd_live_unref(struct ipd_live *l)
{
    if (!l || atomic_fetch_sub(&l->refs, 1) != 1)
        return;
    drop_events(l);
    for (unsigned i = 0; i < l->n_calls; i++)
        free(l->calls[i].answer);
    free(l->calls);
    free(l->call_lim.display_ctx);
    close(l->fd);
    pthread_mutex_destroy(&l->lock);
    free(l);
}

static void wake_producer(struct ipd_live *l)
{
    uint64_t one = 1;
    /* Only EAGAIN (the counter is full, so readable already) can fail. */
    (void)!write(l->fd, &one, sizeof one);
}

bool ipd_live_cancel(struct ipd_live *l)
{
    bool was = atomic_exchange(&l->cancelled, true);
    wake_producer(l);
    return !was;
}

bool ipd_live_cancelled(struct ipd_live *l)
{
    return l && atomic_load(&l->cancelled);
}

int ipd_live_fd(const struct ipd_live *l)
{
    return l ? l->fd : -1;
}

void ipd_live_fd_clear(struct ipd_live *l)
{
    uint64_t v;
    (void)!read(l->fd, &v, sizeof v);
}

size_t ipd_live_room(struct ipd_live *l)
{
    if (!l)
        return SIZE_MAX;
    pthread_mutex_lock(&l->lock);
    size_t room = !l->streaming ? SIZE_MAX
                  : l->pending >= IPD_LIVE_PENDING_MAX
                      ? 0
                      : IPD_LIVE_PENDING_MAX - l->pending;
    l->want_room = room == 0;
    pthread_mutex_unlock(&l->lock);
    return room;
}

/* A sleeping consumer has something to take (under the lock). */
static void wake_consumer(struct ipd_live *l)
{
    l->wake_due = false;
    if (l->asleep && l->consumer.wake) {
        l->asleep = false;
        l->last_wake = ipd_mono_ms();
        l->consumer.wake(l->consumer.ctx);
    }
}

/* Output for a sleeping consumer: woken at once after a quiet spell, but
 * at most once per IPD_LIVE_COALESCE_MS in a flood (what comes meanwhile
 * joins the waiting event: ipd_live_due, ipd_live_flush). */
static void wake_for_output(struct ipd_live *l)
{
    if (!l->asleep)
        return; /* busy sending: what comes joins the queue */
    if (ipd_mono_ms() - l->last_wake >= IPD_LIVE_COALESCE_MS)
        wake_consumer(l);
    else
        l->wake_due = true;
}

static struct live_ev *ev_push(struct ipd_live *l, int stream, const char *kind)
{
    struct live_ev *e = ipd_xcalloc(1, sizeof(*e));
    e->id = l->next_id++;
    e->stream = stream;
    snprintf(e->kind, sizeof e->kind, "%s", kind);
    ipd_buf_init(&e->data, IPD_BUF_UNLIMITED);
    if (l->tail) {
        l->tail->next = e;
    } else {
        l->head = e;
        if (!atomic_load(&l->waiting_since))
            atomic_store(&l->waiting_since, ipd_mono_ms());
    }
    l->tail = e;
    return e;
}

/* Raw output onto the queue (under the lock): joins the last event when
 * that is of the same stream and has room. */
static void queue_output(struct ipd_live *l, int stream, const void *data,
                         size_t len)
{
    struct live_ev *e = l->tail;
    if (!len)
        return;
    if (!e || e->stream != stream || e->data.len + len > IPD_LIVE_EVENT_MAX)
        e = ev_push(l, stream, stream == 1 ? "stdout" : "stderr");
    IPD_ASSERT(ipd_buf_add(&e->data, data, len) == IPD_OK);
    e->counted += len;
    l->pending += len;
}

/* How many bytes at the end of s[0..len) start a character whose rest
 * has not come yet (0-3). */
static size_t split_tail(const unsigned char *s, size_t len)
{
    for (size_t k = 1; k <= 3 && k <= len; k++) {
        unsigned char c = s[len - k];
        if ((c & 0xC0) == 0x80)
            continue;
        size_t need = c >= 0xF5   ? 1
                      : c >= 0xF0 ? 4
                      : c >= 0xE0 ? 3
                      : c >= 0xC2 ? 2
                                  : 1;
        return need > k ? k : 0;
    }
    return 0;
}

void ipd_live_output(struct ipd_live *l, int stream, const char *data,
                     size_t len)
{
    if (!l || (stream != 1 && stream != 2) || !len)
        return;
    pthread_mutex_lock(&l->lock);
    if (l->streaming && !l->ended) {
        /* The split character held back last time comes first: the cut
         * is found in the two together. */
        size_t c = l->carry_len[stream], total = c + len;
        unsigned char *all = (unsigned char *)(uintptr_t)data;
        if (c) {
            all = ipd_xmalloc(total);
            memcpy(all, l->carry[stream], c);
            memcpy(all + c, data, len);
        }
        size_t keep = split_tail(all, total);
        queue_output(l, stream, all, total - keep);
        memcpy(l->carry[stream], all + total - keep, keep);
        l->carry_len[stream] = keep;
        if (c)
            free(all);
        wake_for_output(l);
    }
    pthread_mutex_unlock(&l->lock);
}

void ipd_live_event(struct ipd_live *l, const char *kind, const char *json,
                    size_t len)
{
    if (!l)
        return;
    pthread_mutex_lock(&l->lock);
    if (l->streaming && !l->ended) {
        struct live_ev *e = ev_push(l, 0, kind);
        IPD_ASSERT(ipd_buf_add(&e->data, json, len) == IPD_OK);
        e->counted = len;
        l->pending += len;
        wake_consumer(l);
    }
    pthread_mutex_unlock(&l->lock);
}

void ipd_live_end(struct ipd_live *l, char *json, size_t len)
{
    ipd_live_end_as(l, "result", json, len);
}

void ipd_live_end_as(struct ipd_live *l, const char *kind, char *json,
                     size_t len)
{
    if (!l) {
        free(json);
        return;
    }
    pthread_mutex_lock(&l->lock);
    if (l->streaming && !l->ended && json) {
        for (int s = 1; s <= 2; s++) {
            queue_output(l, s, l->carry[s], l->carry_len[s]);
            l->carry_len[s] = 0;
        }
        struct live_ev *e = ev_push(l, 0, kind);
        e->last = true;
        ipd_buf_release(&e->data);
        e->data.buf = json;
        e->data.len = len;
        e->data.alloc = len + 1;
        e->data.max = IPD_BUF_UNLIMITED;
        json = NULL;
        l->result_queued = true;
        wake_consumer(l);
    }
    l->ended = true;
    wake_consumer(l);
    pthread_mutex_unlock(&l->lock);
    free(json);
}

bool ipd_live_took_last(struct ipd_live *l)
{
    pthread_mutex_lock(&l->lock);
    bool over = l->taken_end;
    pthread_mutex_unlock(&l->lock);
    return over;
}

bool ipd_live_streamed(struct ipd_live *l)
{
    if (!l)
        return false;
    pthread_mutex_lock(&l->lock);
    bool on = l->streaming;
    pthread_mutex_unlock(&l->lock);
    return on;
}

bool ipd_live_ended(struct ipd_live *l)
{
    pthread_mutex_lock(&l->lock);
    bool ended = l->ended;
    pthread_mutex_unlock(&l->lock);
    return ended;
}

void ipd_live_stream(struct ipd_live *l, const struct ipd_live_consumer *c)
{
    pthread_mutex_lock(&l->lock);
    IPD_ASSERT(!l->streaming);
    l->streaming = true;
    l->consumer = *c;
    l->idle_since = ipd_mono_ms();
    pthread_mutex_unlock(&l->lock);
}

void ipd_live_unstream(struct ipd_live *l)
{
    pthread_mutex_lock(&l->lock);
    bool blocked = l->want_room;
    l->streaming = false;
    memset(&l->consumer, 0, sizeof l->consumer);
    l->asleep = false;
    drop_events(l);
    atomic_store(&l->waiting_since, 0);
    if (l->calls_waiting)
        blocked = true; /* they are over: nobody can answer them */
    pthread_mutex_unlock(&l->lock);
    if (blocked)
        wake_producer(l); /* its output goes nowhere now: read on */
}

/* Raw output as a JSON string into out. */
static void json_output(struct ipd_buf *out, const struct ipd_buf *raw)
{
    size_t cap = raw->len * 3 + 1;
    char *text = ipd_xmalloc(cap);
    ipd_utf8_lossy(text, cap, raw->buf, raw->len);
    IPD_ASSERT(ipd_jw_str(out, text) == IPD_OK);
    free(text);
}

enum ipd_live_take ipd_live_take(struct ipd_live *l, uint64_t *id,
                                 char kind[IPD_LIVE_KIND_MAX],
                                 struct ipd_buf *data)
{
    pthread_mutex_lock(&l->lock);
    struct live_ev *e = l->head;
    enum ipd_live_take t = IPD_LIVE_EVENT;
    if (!e && (l->taken_end || (l->ended && !l->result_queued))) {
        t = IPD_LIVE_OVER;
    } else if (!e && l->poked) {
        l->poked = false;
        atomic_store(&l->waiting_since, 0);
        t = IPD_LIVE_PING;
    } else if (!e) {
        l->asleep = true;
        if (l->consumer.sleep)
            l->consumer.sleep(l->consumer.ctx);
        t = IPD_LIVE_NONE;
    } else {
        l->head = e->next;
        if (!l->head)
            l->tail = NULL;
        *id = e->id;
        memcpy(kind, e->kind, IPD_LIVE_KIND_MAX);
        bool blocked = l->want_room && l->pending >= IPD_LIVE_PENDING_MAX &&
                       l->pending - e->counted < IPD_LIVE_PENDING_MAX;
        l->pending -= e->counted;
        if (blocked) {
            l->want_room = false;
            wake_producer(l);
        }
        if (e->stream) {
            json_output(data, &e->data);
        } else {
            IPD_ASSERT(ipd_buf_add(data, e->data.buf, e->data.len) == IPD_OK);
        }
        l->taken_end = e->last;
        ev_free(e);
        l->poked = false;
        l->idle_since = ipd_mono_ms();
        atomic_store(&l->waiting_since, l->head ? l->idle_since : 0);
    }
    pthread_mutex_unlock(&l->lock);
    return t;
}

int64_t ipd_live_due(struct ipd_live *l)
{
    if (!l)
        return -1;
    pthread_mutex_lock(&l->lock);
    int64_t due = -1;
    if (l->wake_due && l->asleep) {
        due = l->last_wake + IPD_LIVE_COALESCE_MS - ipd_mono_ms();
        due = due < 0 ? 0 : due;
    }
    pthread_mutex_unlock(&l->lock);
    return due;
}

void ipd_live_flush(struct ipd_live *l)
{
    if (!l)
        return;
    pthread_mutex_lock(&l->lock);
    if (l->wake_due && ipd_mono_ms() - l->last_wake >= IPD_LIVE_COALESCE_MS)
        wake_consumer(l);
    pthread_mutex_unlock(&l->lock);
}

int64_t ipd_live_waiting_since(struct ipd_live *l)
{
    return atomic_load(&l->waiting_since);
}

bool ipd_live_poke(struct ipd_live *l, int64_t idle_ms)
{
    bool woken = false;
    pthread_mutex_lock(&l->lock);
    int64_t now = ipd_mono_ms();
    if (l->streaming && now - l->idle_since >= idle_ms) {
        l->poked = true;
        l->idle_since = now;
        if (!atomic_load(&l->waiting_since))
            atomic_store(&l->waiting_since, now);
        if (l->asleep)
            woken = true;
        wake_consumer(l);
    }
    pthread_mutex_unlock(&l->lock);
    return woken;
}

/* ---- calls ------------------------------------------------------------- */

void ipd_live_calls_enable(struct ipd_live *l,
                           const struct ipd_live_call_limits *lim)
{
    if (!l) {
        free(lim->display_ctx);
        return;
    }
    pthread_mutex_lock(&l->lock);
    IPD_ASSERT(!l->calls_on);
    l->calls_on = true;
    l->call_lim = *lim;
    pthread_mutex_unlock(&l->lock);
}

bool ipd_live_calls_limits(struct ipd_live *l, struct ipd_live_call_limits *lim)
{
    if (!l)
        return false;
    pthread_mutex_lock(&l->lock);
    bool on = l->calls_on;
    if (on)
        *lim = l->call_lim;
    pthread_mutex_unlock(&l->lock);
    return on;
}

bool ipd_live_calls_begin(struct ipd_live *l, struct ipd_live_call_limits *lim)
{
    if (!l)
        return false;
    pthread_mutex_lock(&l->lock);
    bool on = l->calls_on;
    if (on) {
        *lim = l->call_lim;
        l->calls_over = false;
    }
    pthread_mutex_unlock(&l->lock);
    return on;
}

enum ipd_live_call ipd_live_call_open(struct ipd_live *l, uint64_t seq,
                                      char id[IPD_LIVE_CALL_ID_MAX])
{
    enum ipd_live_call rc = IPD_LIVE_CALL_OK;
    pthread_mutex_lock(&l->lock);
    if (!l->calls_on || l->calls_over || !l->streaming || l->ended)
        rc = IPD_LIVE_CALL_NOBODY;
    else if (l->n_calls >= l->call_lim.max_calls)
        rc = IPD_LIVE_CALL_LIMIT;
    else if (l->calls_waiting >= l->call_lim.max_in_flight)
        rc = IPD_LIVE_CALL_BUSY;
    if (rc == IPD_LIVE_CALL_OK) {
        if (l->n_calls == l->calls_alloc) {
            l->calls_alloc = l->calls_alloc ? 2 * l->calls_alloc : 8;
            l->calls =
                ipd_xrealloc(l->calls, l->calls_alloc * sizeof(*l->calls));
        }
        struct live_call *c = &l->calls[l->n_calls++];
        memset(c, 0, sizeof(*c));
        ipd_id_new("call", c->id);
        memcpy(id, c->id, IPD_LIVE_CALL_ID_MAX);
        c->seq = seq;
        c->state = CALL_WAITING;
        c->since = ipd_mono_ms();
        l->calls_waiting++;
    }
    pthread_mutex_unlock(&l->lock);
    return rc;
}

static struct live_call *call_find(struct ipd_live *l, const char *id)
{
    for (unsigned i = 0; i < l->n_calls; i++)
        if (!strcmp(l->calls[i].id, id))
            return &l->calls[i];
    return NULL;
}

enum ipd_live_call ipd_live_call_answer(struct ipd_live *l, const char *id,
                                        const char *json, size_t len)
{
    enum ipd_live_call rc = IPD_LIVE_CALL_OK;
    pthread_mutex_lock(&l->lock);
    struct live_call *c = call_find(l, id);
    if (!c)
        rc = IPD_LIVE_CALL_UNKNOWN;
    else if (c->state == CALL_ANSWERED || (c->state == CALL_OVER && c->len))
        rc = IPD_LIVE_CALL_TWICE;
    else if (c->state == CALL_OVER || l->calls_over)
        rc = IPD_LIVE_CALL_GONE;
    if (rc == IPD_LIVE_CALL_OK) {
        c->answer = ipd_xmalloc(len + 1);
        memcpy(c->answer, json, len);
        c->answer[len] = '\0';
        c->len = len;
        c->state = CALL_ANSWERED;
        c->order = ++l->answers;
        l->calls_waiting--;
    }
    pthread_mutex_unlock(&l->lock);
    if (rc == IPD_LIVE_CALL_OK)
        wake_producer(l);
    return rc;
}

/* A call over without its client's answer: what the code is told. */
static void call_fail(struct live_call *c, const char *type, const char *msg,
                      struct ipd_buf *answer)
{
    IPD_ASSERT(ipd_buf_addf(answer,
                            "{\"error\":{\"type\":\"%s\",\"message\":"
                            "\"%s\"}}",
                            type, msg) == IPD_OK);
    c->state = CALL_OVER;
}

bool ipd_live_call_take(struct ipd_live *l, int64_t now_ms, uint64_t *seq,
                        struct ipd_buf *answer)
{
    struct live_call *best = NULL;
    pthread_mutex_lock(&l->lock);
    for (unsigned i = 0; i < l->n_calls; i++) {
        struct live_call *c = &l->calls[i];
        if (c->state == CALL_ANSWERED && (!best || c->order < best->order))
            best = c;
    }
    if (best) {
        IPD_ASSERT(ipd_buf_add(answer, best->answer, best->len) == IPD_OK);
        free(best->answer);
        best->answer = NULL; /* len stays: it was answered (a second
                                answer is told 409, not 410) */
        best->state = CALL_OVER;
    }
    for (unsigned i = 0; !best && i < l->n_calls; i++) {
        struct live_call *c = &l->calls[i];
        if (c->state != CALL_WAITING)
            continue;
        if (!l->streaming || l->ended) {
            best = c;
            call_fail(c, "ConnectionError",
                      "interpd: the client that could answer this call is "
                      "gone",
                      answer);
        } else if (now_ms - c->since >= l->call_lim.call_timeout_ms) {
            best = c;
            call_fail(c, "TimeoutError",
                      "interpd: the client did not answer this call in time "
                      "(the policy's call-timeout)",
                      answer);
        }
        if (best)
            l->calls_waiting--;
    }
    if (best)
        *seq = best->seq;
    pthread_mutex_unlock(&l->lock);
    return best != NULL;
}

unsigned ipd_live_calls_waiting(struct ipd_live *l)
{
    if (!l)
        return 0;
    pthread_mutex_lock(&l->lock);
    unsigned n = l->calls_waiting;
    pthread_mutex_unlock(&l->lock);
    return n;
}

int64_t ipd_live_call_due(struct ipd_live *l, int64_t now_ms)
{
    int64_t due = -1;
    if (!l)
        return -1;
    pthread_mutex_lock(&l->lock);
    for (unsigned i = 0; i < l->n_calls; i++) {
        const struct live_call *c = &l->calls[i];
        if (c->state != CALL_WAITING)
            continue;
        int64_t d = c->since + l->call_lim.call_timeout_ms - now_ms;
        if (d < 0)
            d = 0;
        if (due < 0 || d < due)
            due = d;
    }
    pthread_mutex_unlock(&l->lock);
    return due;
}

void ipd_live_calls_close(struct ipd_live *l)
{
    if (!l)
        return;
    pthread_mutex_lock(&l->lock);
    l->calls_over = true;
    for (unsigned i = 0; i < l->n_calls; i++) {
        struct live_call *c = &l->calls[i];
        free(c->answer);
        c->answer = NULL;
        c->state = CALL_OVER;
    }
    l->calls_waiting = 0;
    pthread_mutex_unlock(&l->lock);
}
