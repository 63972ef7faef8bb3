/*
 * test_tenant_quota.c - the tenant's storage quota (--tenant-quota-files,
 * --tenant-quota-bytes): the user quota is per X-User-Id, which the
 * client chooses, so a tenant that invents user ids still stops at its
 * own quota: 507 on upload and URL ingest, generated files come back not
 * stored (quota "tenant"); other tenants go on; the admin status shows
 * each tenant's usage.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <sys/socket.h>
#include <unistd.h>

#include "harness.h"

#define BODY_LEN 200 /* what the origin serves */

/* ---- a one-route HTTP origin on 127.0.0.1 ------------------------------- */

struct origin {
    int fd, port;
    int release[2]; /* closed at the end: the accept loop stops */
    pthread_t thread;
};

/* Every request gets BODY_LEN bytes of 'u'. */
static void origin_serve(int fd)
{
    char req[4096], body[BODY_LEN];
    size_t got = 0;
    while (got < sizeof(req) - 1) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 10000) != 1)
            break;
        ssize_t n = read(fd, req + got, sizeof(req) - 1 - got);
        if (n <= 0)
            break;
        got += (size_t)n;
        req[got] = '\0';
        if (strstr(req, "\r\n\r\n"))
            break;
    }
    char *head = itest_fmt("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n"
                           "Content-Length: %d\r\nConnection: close\r\n\r\n",
                           BODY_LEN);
    memset(body, 'u', sizeof(body));
    itest_send_all(fd, head, strlen(head));
    itest_send_all(fd, body, sizeof(body));
    free(head);
}

static void *origin_main(void *arg)
{
    struct origin *o = arg;
    for (;;) {
        struct pollfd p[2] = {{.fd = o->fd, .events = POLLIN},
                              {.fd = o->release[0], .events = POLLIN}};
        if (poll(p, 2, -1) < 0 || p[1].revents)
            break;
        int fd = accept4(o->fd, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0)
            continue;
        origin_serve(fd);
        close(fd);
    }
    return NULL;
}

static bool origin_start(struct origin *o)
{
    struct sockaddr_in a = {.sin_family = AF_INET};
    socklen_t al = sizeof(a);
    memset(o, 0, sizeof(*o));
    if (pipe2(o->release, O_CLOEXEC))
        return false;
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    o->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (o->fd < 0 || bind(o->fd, (struct sockaddr *)&a, sizeof(a)) ||
        listen(o->fd, 16) || getsockname(o->fd, (struct sockaddr *)&a, &al))
        return false;
    o->port = ntohs(a.sin_port);
    return pthread_create(&o->thread, NULL, origin_main, o) == 0;
}

static void origin_stop(struct origin *o)
{
    close(o->release[1]);
    pthread_join(o->thread, NULL);
    close(o->fd);
    close(o->release[0]);
}

/* ---- helpers ------------------------------------------------------------ */

static struct itest_server *srv;
static struct origin origin;
static char *acme, *beta, *gamma_key;

static long upload(const char *key, const char *user, size_t len,
                   struct itest_resp *r)
{
    char *buf = malloc(len + 1);
    memset(buf, 'd', len);
    long st = itest_upload_raw(srv, key, user, "d.txt", "text/plain", buf, len,
                               NULL, r);
    free(buf);
    return st;
}

static long ingest(const char *key, const char *user, struct itest_resp *r)
{
    char *body =
        itest_fmt("{\"url\": \"http://127.0.0.1:%d/u.txt\"}", origin.port);
    long st = itest_request(srv, "POST", "/v1/files", key, user,
                            "application/json", body, strlen(body), NULL, r);
    free(body);
    return st;
}

/* A 507 whose message names the tenant's quota. */
static void check_tenant_507(const struct itest_resp *r)
{
    CHECK_ERROR(r, 507, "quota_exceeded");
    const char *msg = itest_json_str(r->json, "error.message");
    CHECKF(msg && strstr(msg, "tenant"), "message: %s", msg ? msg : "(none)");
}

/* Run code as (key, user) that writes out.txt of n bytes; the one
 * generated_files entry (new reference) or NULL. */
static json_t *generate(const char *key, const char *user, int n)
{
    struct itest_resp r;
    char *code = itest_fmt("open('out.txt', 'w').write('g' * %d)", n);
    itest_exec(srv, key, user, json_pack("{s:s}", "code", code), 90000, &r);
    free(code);
    CHECK_STATUS(&r, 200);
    json_t *files = itest_json_get(r.json, "generated_files");
    CHECKF(json_array_size(files) == 1, "%s", r.body);
    json_t *f = json_incref(json_array_get(files, 0));
    itest_resp_release(&r);
    return f;
}

static long long files_of(const char *key, const char *user)
{
    struct itest_resp r;
    itest_request(srv, "GET", "/v1/files?limit=100", key, user, NULL, NULL, 0,
                  NULL, &r);
    CHECK_STATUS(&r, 200);
    long long n = (long long)json_array_size(itest_json_get(r.json, "files"));
    itest_resp_release(&r);
    return n;
}

/* The admin status's entry for tenant (new reference) or NULL. */
static json_t *tenant_status(const char *tenant)
{
    struct itest_resp r;
    json_t *out = NULL;
    itest_request(srv, "GET", "/v1/admin/status", srv->admin_key, NULL, NULL,
                  NULL, 0, NULL, &r);
    CHECK_STATUS(&r, 200);
    json_t *list = itest_json_get(r.json, "tenants");
    CHECKF(json_is_array(list), "%s", r.body);
    CHECK(json_is_false(itest_json_get(r.json, "tenants_truncated")));
    /* The contract's fields stay. */
    CHECK(json_is_integer(itest_json_get(r.json, "total_user_files")));
    size_t i;
    json_t *t;
    json_array_foreach(list, i, t)
    {
        if (!strcmp(itest_json_str(t, "tenant") ? itest_json_str(t, "tenant")
                                                : "",
                    tenant))
            out = json_incref(t);
    }
    itest_resp_release(&r);
    return out;
}

static long long jint(const json_t *j, const char *path)
{
    return json_integer_value(itest_json_get(j, path));
}

/* ---- tests -------------------------------------------------------------- */

/* acme: 2 files per user, 4 per tenant.  Two user ids fill the tenant;
 * a third id is refused everywhere a file can come from. */
static void files_limit(void)
{
    struct itest_resp r;
    REQUIRE(srv && acme && beta);
    for (int u = 1; u <= 2; u++) {
        char user[8];
        snprintf(user, sizeof(user), "u%d", u);
        for (int i = 0; i < 2; i++) {
            upload(acme, user, 10, &r);
            CHECK_STATUS(&r, 201);
            itest_resp_release(&r);
        }
    }
    /* The per-user quota still answers for its own user. */
    upload(acme, "u1", 10, &r);
    CHECK_ERROR(&r, 507, "quota_exceeded");
    itest_resp_release(&r);

    upload(acme, "u3", 10, &r);
    check_tenant_507(&r);
    itest_resp_release(&r);
    itest_upload_multipart(srv, acme, "u3", "m.txt", "m", 1, NULL, &r);
    check_tenant_507(&r);
    itest_resp_release(&r);
    ingest(acme, "u3", &r);
    check_tenant_507(&r);
    itest_resp_release(&r);
    CHECK_INT(files_of(acme, "u3"), 0);

    json_t *g = generate(acme, "u3", 10);
    CHECKF(json_is_false(itest_json_get(g, "stored")), "not refused");
    CHECK_STR(itest_json_str(g, "not_stored_reason"), "quota_exceeded");
    CHECK_STR(itest_json_str(g, "quota"), "tenant");
    const char *msg = itest_json_str(g, "message");
    CHECKF(msg && strstr(msg, "tenant's file quota (at most 4 files"),
           "message: %s", msg ? msg : "(none)");
    CHECK(itest_json_get(g, "data_base64") != NULL);
    json_decref(g);
    CHECK_INT(files_of(acme, "u3"), 0);

    /* Another tenant is not held up by acme's quota. */
    upload(beta, "u1", 10, &r);
    CHECK_STATUS(&r, 201);
    itest_resp_release(&r);
    g = generate(beta, "u1", 10);
    CHECKF(json_is_true(itest_json_get(g, "stored")), "beta's output");
    json_decref(g);

    json_t *t = tenant_status("acme");
    CHECKF(t, "acme missing from the admin status");
    CHECK_INT(jint(t, "files"), 4);
    CHECK_INT(jint(t, "bytes"), 40);
    CHECK_INT(jint(t, "quota_files"), 4);
    CHECK_INT(jint(t, "quota_bytes"), 1000);
    json_decref(t);
    t = tenant_status("beta");
    CHECKF(t, "beta missing from the admin status");
    CHECK_INT(jint(t, "files"), 2);
    CHECK_INT(jint(t, "bytes"), 20);
    json_decref(t);

    /* Deleting one of u1's files frees a slot for u3. */
    itest_request(srv, "GET", "/v1/files", acme, "u1", NULL, NULL, 0, NULL, &r);
    const char *first = json_string_value(json_object_get(
        json_array_get(itest_json_get(r.json, "files"), 0), "file_id"));
    char *id = strdup(first ? first : "");
    itest_resp_release(&r);
    char *path = itest_fmt("/v1/files/%s", id);
    itest_request(srv, "DELETE", path, acme, "u1", NULL, NULL, 0, NULL, &r);
    CHECK_STATUS(&r, 204);
    itest_resp_release(&r);
    free(path);
    free(id);
    upload(acme, "u3", 10, &r);
    CHECK_STATUS(&r, 201);
    itest_resp_release(&r);
    CHECKF(itest_store_consistent(srv, NULL), "stores inconsistent");
}

/* gamma: 1000 bytes for the tenant.  An upload whose size is known is
 * refused before its body; a URL ingest (size unknown until fetched) by
 * the insert, with nothing left behind; a generated file comes back
 * inline, not stored. */
static void bytes_limit(void)
{
    struct itest_resp r;
    REQUIRE(srv && gamma_key);
    upload(gamma_key, "u1", 500, &r);
    CHECK_STATUS(&r, 201);
    itest_resp_release(&r);
    upload(gamma_key, "u2", 400, &r);
    CHECK_STATUS(&r, 201);
    itest_resp_release(&r);

    upload(gamma_key, "u3", 101, &r);
    check_tenant_507(&r);
    itest_resp_release(&r);
    ingest(gamma_key, "u3", &r); /* 200 bytes */
    check_tenant_507(&r);
    itest_resp_release(&r);
    json_t *g = generate(gamma_key, "u4", 150);
    CHECK_STR(itest_json_str(g, "not_stored_reason"), "quota_exceeded");
    CHECK_STR(itest_json_str(g, "quota"), "tenant");
    json_decref(g);
    CHECK_INT(files_of(gamma_key, "u3"), 0);
    CHECK_INT(files_of(gamma_key, "u4"), 0);

    /* What fits still fits: exactly up to the limit. */
    upload(gamma_key, "u5", 100, &r);
    CHECK_STATUS(&r, 201);
    itest_resp_release(&r);
    json_t *t = tenant_status("gamma");
    CHECKF(t, "gamma missing from the admin status");
    CHECK_INT(jint(t, "files"), 3);
    CHECK_INT(jint(t, "bytes"), 1000);
    json_decref(t);
    /* Every blob has its record: refused files left no bytes behind. */
    CHECKF(itest_store_consistent(srv, NULL), "stores inconsistent");
}

static void setup(void)
{
    if (!origin_start(&origin)) {
        fprintf(stderr, "origin: %s\n", strerror(errno));
        return;
    }
    char allow[] = "127.0.0.1/32";
    const char *args[] = {"--quota-files",
                          "2",
                          "--tenant-quota-files",
                          "4",
                          "--tenant-quota-bytes",
                          "1000",
                          "--fetch-allow",
                          allow,
                          NULL};
    struct itest_opts o = {.args = args};
    srv = itest_start(&o);
    if (!srv)
        return;
    if (!itest_create_key(srv, "acme", false, &acme, NULL) ||
        !itest_create_key(srv, "beta", false, &beta, NULL) ||
        !itest_create_key(srv, "gamma", false, &gamma_key, NULL))
        test__failed_checks++;
}

static void teardown(void)
{
    itest_stop(srv);
    srv = NULL;
    origin_stop(&origin);
    free(acme);
    free(beta);
    free(gamma_key);
}

static void tenant_quota(void)
{
    setup();
    files_limit();
    bytes_limit();
    teardown();
}

TEST_MAIN(T(tenant_quota))
