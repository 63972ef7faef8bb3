/*
 * test_callbacks.c - the pure parts of service/exec/callbacks.c: the
 * X-Interpd-Signature value (t=, v1= over "<t>.<body>", the previous
 * secret during the grace period only) against HMACs computed by
 * Python's hmac module, and the delivery status object.  Delivery itself
 * is tests/integration/test_async.c's, but for the threads' share per
 * tenant and the secrets read from the key store at each attempt
 * (against receivers on 127.0.0.1 and a SQLite key store here).
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include "service/common/util.h"
#include "service/exec/callbacks.h"
#include "storage/meta.h"
#include "test.h"

#define T0 INT64_C(1800000000000) /* ms; t=1800000000 */
/* /usr/bin/python3: hmac.new(k, b"1800000000." + b'{"a":1}', sha256) */
#define V1_NEW                                                                 \
    "6096aa106f1d37bc8064e9c92b8a1c462d86518074b048b4ca666e84e3f72568"
#define V1_OLD                                                                 \
    "603fae72dd497f968d3c5b62b4348c7af27d452ff7b61142264a24c4478a6000"

static void signature(void)
{
    static const char body[] = "{\"a\":1}";
    struct ipd_callback_keys k = {.secret = "new-secret"};
    char sig[IPD_SIGNATURE_MAX];
    ipd_callback_signature(&k, 3600000, T0 + 999, body, strlen(body), sig);
    CHECK_STR(sig, "t=1800000000,v1=" V1_NEW);

    /* Rotated at T0 - 10 s with a 60 s grace: both, the new one first;
     * at the end of the grace, the new one alone. */
    snprintf(k.prev_secret, sizeof(k.prev_secret), "old-secret");
    k.rotated_at_ms = T0 - 10000;
    ipd_callback_signature(&k, 60000, T0, body, strlen(body), sig);
    CHECK_STR(sig, "t=1800000000,v1=" V1_NEW ",v1=" V1_OLD);
    ipd_callback_signature(&k, 10001, T0, body, strlen(body), sig);
    CHECK_STR(sig, "t=1800000000,v1=" V1_NEW ",v1=" V1_OLD);
    ipd_callback_signature(&k, 10000, T0, body, strlen(body), sig);
    CHECK_STR(sig, "t=1800000000,v1=" V1_NEW);
    ipd_callback_signature(&k, 0, T0, body, strlen(body), sig);
    CHECK_STR(sig, "t=1800000000,v1=" V1_NEW);
    /* Never rotated: no second signature whatever the grace. */
    k.rotated_at_ms = 0;
    ipd_callback_signature(&k, INT64_C(1) << 40, T0, body, strlen(body), sig);
    CHECK_STR(sig, "t=1800000000,v1=" V1_NEW);
    /* The body counts to the last byte. */
    ipd_callback_signature(&k, 0, T0, body, strlen(body) - 1, sig);
    CHECK(strcmp(sig, "t=1800000000,v1=" V1_NEW) != 0);
}

static void status_object(void)
{
    struct ipd_callback_status *s = ipd_callback_status_new();
    json_t *j = ipd_callback_status_json(s);
    CHECK_STR(json_string_value(json_object_get(j, "status")), "pending");
    CHECK_INT(json_integer_value(json_object_get(j, "attempts")), 0);
    CHECK(json_is_null(json_object_get(j, "error")));
    CHECK(json_is_null(json_object_get(j, "delivery_id")));
    json_decref(j);

    /* A second holder keeps it alive after the first lets go. */
    struct ipd_callback_status *r = ipd_callback_status_ref(s);
    ipd_callback_status_unref(s);
    ipd_callback_status_fail(r, "callbacks are unavailable");
    j = ipd_callback_status_json(r);
    CHECK_STR(json_string_value(json_object_get(j, "status")), "failed");
    CHECK_STR(json_string_value(json_object_get(j, "error")),
              "callbacks are unavailable");
    json_decref(j);
    ipd_callback_status_unref(r);
    ipd_callback_status_unref(NULL);
    ipd_callback_status_fail(NULL, "nothing happens");
}

/* ---- the delivery threads' share per tenant ----------------------------- */

/* One receiver on 127.0.0.1: requests for /hang are read and never
 * answered (their connections kept until the test ends), others get 200. */
struct receiver {
    int fd, port;
    pthread_t thread;
    atomic_int hung, answered;
    int held[16];
    char last[4096]; /* the last answered request's head, written before
                        answered counts it */
};

static void *receiver_main(void *arg)
{
    struct receiver *rc = arg;
    for (;;) {
        int c = accept4(rc->fd, NULL, NULL, SOCK_CLOEXEC);
        if (c < 0)
            return NULL; /* shut down */
        char buf[4096];
        size_t got = 0;
        struct pollfd p = {.fd = c, .events = POLLIN};
        while (got < sizeof(buf) - 1 && poll(&p, 1, 5000) == 1) {
            ssize_t n = read(c, buf + got, sizeof(buf) - 1 - got);
            if (n <= 0)
                break;
            got += (size_t)n;
            buf[got] = '\0';
            if (strstr(buf, "\r\n\r\n"))
                break; /* the body (a few bytes) is not needed */
        }
        buf[got] = '\0';
        if (strstr(buf, "POST /hang")) {
            int i = atomic_fetch_add(&rc->hung, 1);
            if (i < 16)
                rc->held[i] = c;
            else
                close(c);
            continue;
        }
        memcpy(rc->last, buf, got + 1);
        static const char ok[] = "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n"
                                 "Connection: close\r\n\r\n";
        if (write(c, ok, sizeof(ok) - 1) < 0)
            (void)0;
        close(c);
        atomic_fetch_add(&rc->answered, 1);
    }
}

static bool receiver_start(struct receiver *rc)
{
    struct sockaddr_in a = {.sin_family = AF_INET};
    socklen_t al = sizeof(a);
    memset(rc, 0, sizeof(*rc));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    rc->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (rc->fd < 0 || bind(rc->fd, (struct sockaddr *)&a, sizeof(a)) ||
        getsockname(rc->fd, (struct sockaddr *)&a, &al) || listen(rc->fd, 64))
        return false;
    rc->port = ntohs(a.sin_port);
    return pthread_create(&rc->thread, NULL, receiver_main, rc) == 0;
}

/* Bounded poll (10 s) until *v >= want. */
static bool reaches(atomic_int *v, int want)
{
    for (int i = 0; i < 1000 && atomic_load(v) < want; i++)
        usleep(10000);
    return atomic_load(v) >= want;
}

/* A SQLite key store in a new directory under /tmp holding one key of
 * each tenant named in tenants (NULL-terminated), whose secret is
 * "<tenant>-secret"; key_store_free removes it. */
static char store_dir[64];

static struct ipd_meta *key_store(const char *const *tenants)
{
    static unsigned seq;
    char *dir = store_dir, path[96];
    struct ipd_meta *m = NULL;
    snprintf(dir, sizeof(store_dir), "/tmp/ipd-callbacks-XXXXXX");
    if (!mkdtemp(dir))
        abort();
    snprintf(path, sizeof(path), "%s/meta.db", dir);
    if (ipd_meta_sqlite_open(path, 10000, &m))
        abort();
    for (unsigned i = 0; tenants[i]; i++) {
        struct ipd_key k = {.created_at_ms = ipd_now_ms()};
        ipd_id_new("key", k.key_id);
        snprintf(k.tenant, sizeof(k.tenant), "%s", tenants[i]);
        snprintf(k.hash, sizeof(k.hash), "%064u", seq++);
        snprintf(k.secret, sizeof(k.secret), "%s-secret", tenants[i]);
        if (ipd_meta_key_insert(m, &k))
            abort();
    }
    return m;
}

static void key_store_free(struct ipd_meta *m)
{
    char path[128];
    ipd_meta_free(m);
    snprintf(path, sizeof(path), "rm -rf '%s'", store_dir);
    if (system(path) != 0)
        fprintf(stderr, "could not remove %s\n", store_dir);
}

static const char *state_of(struct ipd_callback_status *s)
{
    json_t *j = ipd_callback_status_json(s);
    static char state[16];
    snprintf(state, sizeof(state), "%s",
             json_string_value(json_object_get(j, "status")));
    json_decref(j);
    return state;
}

/* Tenant a's five callbacks go to a receiver that never answers: a holds
 * IPD_CALLBACK_TENANT_THREADS (2) of the 4 threads, its other three wait
 * (pending), and tenant b's callback is delivered meanwhile.  With every
 * thread free to take a's, b's waited for the 15 s attempt timeout. */
static void tenant_thread_share(void)
{
    struct receiver rc;
    struct ipd_fetch_opts o;
    struct ipd_fetch_allowlist *allow = NULL;
    struct ipd_callbacks *cb = NULL;
    struct ipd_buf err;
    ipd_buf_init(&err, 256);
    REQUIRE(receiver_start(&rc));
    REQUIRE(ipd_fetch_allowlist_parse("127.0.0.1/32", &allow, &err) == IPD_OK);
    ipd_fetch_opts_init(&o);
    o.allow = allow;
    static const char *const tenants[] = {"a", "b", NULL};
    struct ipd_meta *m = key_store(tenants);
    REQUIRE(ipd_callbacks_new(&o, m, 60000, 0, &cb) == IPD_OK);
    char hang[64], fine[64];
    snprintf(hang, sizeof(hang), "http://127.0.0.1:%d/hang", rc.port);
    snprintf(fine, sizeof(fine), "http://127.0.0.1:%d/fine", rc.port);
    for (int i = 0; i < 5; i++)
        ipd_callbacks_send(cb, hang, "{}", 2, "a", NULL);
    CHECK(reaches(&rc.hung, 2));
    CHECK_INT(ipd_callbacks_tenant_pending(cb, "a"), 5);
    struct ipd_callback_status *sb = ipd_callback_status_new();
    ipd_callbacks_send(cb, fine, "{}", 2, "b", sb);
    CHECK(reaches(&rc.answered, 1));
    for (int i = 0; i < 1000 && !strcmp(state_of(sb), "pending"); i++)
        usleep(10000);
    CHECK_STR(state_of(sb), "delivered");
    CHECK_INT(ipd_callbacks_tenant_pending(cb, "b"), 0);
    CHECK_INT(atomic_load(&rc.hung), 2); /* a never had a third thread */
    /* Let a's attempts fail (their retries are a minute away). */
    for (int i = 0; i < atomic_load(&rc.hung) && i < 16; i++)
        close(rc.held[i]);
    ipd_callbacks_free(cb);
    shutdown(rc.fd, SHUT_RDWR);
    pthread_join(rc.thread, NULL);
    close(rc.fd);
    ipd_callback_status_unref(sb);
    ipd_fetch_allowlist_free(allow);
    ipd_buf_release(&err);
    key_store_free(m);
}

/* The X-Interpd-Signature header of a request head (static), or "". */
static const char *signature_of(const char *head)
{
    static char value[IPD_SIGNATURE_MAX];
    const char *h = strstr(head, "X-Interpd-Signature: ");
    size_t n = h ? strcspn(h + 21, "\r\n") : 0;
    snprintf(value, sizeof(value), "%.*s", (int)n, h ? h + 21 : "");
    return value;
}

/* No job carries the secrets: a callback queued before a rotation (held
 * back here by its tenant's share of the threads) is signed with the
 * secrets the key store has at its attempt, the new one and, during the
 * grace, the previous one; a tenant without any key is not signed at
 * all (the callback fails without an attempt reaching the receiver). */
static void signed_as_rotated(void)
{
    struct receiver rc;
    struct ipd_fetch_opts o;
    struct ipd_fetch_allowlist *allow = NULL;
    struct ipd_callbacks *cb = NULL;
    struct ipd_buf err;
    static const char *const tenants[] = {"a", NULL};
    struct ipd_meta *m = key_store(tenants);
    ipd_buf_init(&err, 256);
    REQUIRE(receiver_start(&rc));
    REQUIRE(ipd_fetch_allowlist_parse("127.0.0.1/32", &allow, &err) == IPD_OK);
    ipd_fetch_opts_init(&o);
    o.allow = allow;
    REQUIRE(ipd_callbacks_new(&o, m, 60000, 3600000, &cb) == IPD_OK);
    char hang[64], fine[64];
    snprintf(hang, sizeof(hang), "http://127.0.0.1:%d/hang", rc.port);
    snprintf(fine, sizeof(fine), "http://127.0.0.1:%d/fine", rc.port);
    for (int i = 0; i < IPD_CALLBACK_TENANT_THREADS; i++)
        ipd_callbacks_send(cb, hang, "{}", 2, "a", NULL);
    CHECK(reaches(&rc.hung, IPD_CALLBACK_TENANT_THREADS));
    struct ipd_callback_status *sa = ipd_callback_status_new();
    ipd_callbacks_send(cb, fine, "{}", 2, "a", sa);
    CHECK_STR(state_of(sa), "pending");
    int64_t rotated = ipd_now_ms();
    CHECK_INT(ipd_meta_key_rotate_secret(m, "a", "a-secret", "a-next", rotated),
              IPD_OK);
    for (int i = 0; i < atomic_load(&rc.hung) && i < 16; i++)
        close(rc.held[i]);
    CHECK(reaches(&rc.answered, 1));
    for (int i = 0; i < 1000 && !strcmp(state_of(sa), "pending"); i++)
        usleep(10000);
    CHECK_STR(state_of(sa), "delivered");
    const char *got = signature_of(rc.last);
    struct ipd_callback_keys k = {.secret = "a-next",
                                  .prev_secret = "a-secret",
                                  .rotated_at_ms = rotated};
    char want[IPD_SIGNATURE_MAX];
    ipd_callback_signature(&k, 3600000, strtoll(got + 2, NULL, 10) * 1000, "{}",
                           2, want);
    CHECK_STR(got, want);
    CHECK(strstr(got, ",v1=") != strrchr(got, ',')); /* two v1= */

    /* Nobody's key: failed, and never sent. */
    struct ipd_callback_status *sn = ipd_callback_status_new();
    ipd_callbacks_send(cb, fine, "{}", 2, "nobody", sn);
    for (int i = 0; i < 1000 && !strcmp(state_of(sn), "pending"); i++)
        usleep(10000);
    CHECK_STR(state_of(sn), "failed");
    CHECK_INT(atomic_load(&rc.answered), 1);

    ipd_callbacks_free(cb);
    shutdown(rc.fd, SHUT_RDWR);
    pthread_join(rc.thread, NULL);
    close(rc.fd);
    ipd_callback_status_unref(sa);
    ipd_callback_status_unref(sn);
    ipd_fetch_allowlist_free(allow);
    ipd_buf_release(&err);
    key_store_free(m);
}

TEST_MAIN(T(signature), T(status_object), T(tenant_thread_share),
          T(signed_as_rotated))
