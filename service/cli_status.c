/*
 * cli_status.c - `interpd status`: GET /v1/admin/status from the running
 * server (at --listen, with the admin key) and print it.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <jansson.h>

#include "fetch/fetch.h"
#include "serve.h"
#include "common/util.h"

#define KEY_MAX 256

static enum ipd_err collect(void *ctx, const void *data, size_t len)
{
    return ipd_buf_add(ctx, data, len);
}

/* The admin key: INTERPD_ADMIN_KEY, else <data-dir>/admin.key; where it
 * came from in from (for the messages). */
static bool admin_key(const struct ipd_config *cfg, char out[KEY_MAX],
                      char *from, size_t fromsz)
{
    const char *env = getenv("INTERPD_ADMIN_KEY");
    if (env && *env) {
        snprintf(out, KEY_MAX, "%s", env);
        snprintf(from, fromsz, "INTERPD_ADMIN_KEY");
        return strlen(env) < KEY_MAX;
    }
    char path[4096];
    snprintf(path, sizeof(path), "%s/admin.key", cfg->data_dir);
    snprintf(from, fromsz, "%s", path);
    FILE *f = fopen(path, "re");
    if (!f) {
        fprintf(stderr,
                "interpd status: cannot read %s (%s); set "
                "INTERPD_ADMIN_KEY or --data-dir\n",
                path, strerror(errno));
        return false;
    }
    bool ok = fgets(out, KEY_MAX, f) != NULL;
    fclose(f);
    out[strcspn(out, "\r\n")] = '\0';
    if (!ok || !out[0])
        fprintf(stderr,
                "interpd status: %s is empty; set "
                "INTERPD_ADMIN_KEY or --data-dir\n",
                path);
    return ok && out[0];
}

/* Why the server did not answer 200, in words: a refused key names where
 * it came from. */
static void say_refusal(const char *url, const char *from,
                        const struct ipd_fetch_result *res,
                        const struct ipd_buf *err, enum ipd_err rc)
{
    if (res->status == 401)
        fprintf(stderr,
                "interpd status: %s refused the admin key from %s "
                "(401: not a key of this server's store, or "
                "revoked); set INTERPD_ADMIN_KEY or --data-dir to "
                "the server's\n",
                url, from);
    else if (res->status == 403)
        fprintf(stderr,
                "interpd status: %s refused the key from %s (403: "
                "not an admin key)\n",
                url, from);
    else
        fprintf(stderr, "interpd status: %s: %s\n", url,
                err->len ? err->buf : ipd_err_name(rc));
}

/* The server's own address from --listen, with the parser it listens
 * with; a wildcard address is reached on loopback.  host is the URL's
 * form ("[::1]"), addr the bare address. */
static bool server_address(const struct ipd_config *cfg, char *host,
                           size_t hostsz, char addr[INET6_ADDRSTRLEN],
                           unsigned *port)
{
    struct sockaddr_storage ss;
    socklen_t sslen = 0;
    bool v6 = false;
    if (ipd_listen_parse(cfg->listen, &ss, &sslen, &v6)) {
        fprintf(stderr, "interpd status: listen \"%s\" is not HOST:PORT\n",
                cfg->listen);
        return false;
    }
    if (v6) {
        struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;
        if (IN6_IS_ADDR_UNSPECIFIED(&a->sin6_addr))
            a->sin6_addr = in6addr_loopback;
        inet_ntop(AF_INET6, &a->sin6_addr, addr, INET6_ADDRSTRLEN);
        *port = ntohs(a->sin6_port);
        snprintf(host, hostsz, "[%s]", addr);
    } else {
        struct sockaddr_in *a = (struct sockaddr_in *)&ss;
        if (a->sin_addr.s_addr == htonl(INADDR_ANY))
            a->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        inet_ntop(AF_INET, &a->sin_addr, addr, INET6_ADDRSTRLEN);
        *port = ntohs(a->sin_port);
        snprintf(host, hostsz, "%s", addr);
    }
    if (!*port) {
        fprintf(stderr,
                "interpd status: --listen %s does not name the "
                "running server's port\n",
                cfg->listen);
        return false;
    }
    return true;
}

/* The answer, pretty-printed on stdout. */
static bool print_json(const struct ipd_buf *body)
{
    json_error_t jerr;
    json_t *doc = json_loadb(body->buf, body->len, 0, &jerr);
    if (!doc) {
        fprintf(stderr, "interpd status: the answer is not JSON\n");
        return false;
    }
    char *text = json_dumps(doc, JSON_INDENT(2) | JSON_SORT_KEYS);
    if (text)
        puts(text);
    free(text);
    json_decref(doc);
    return true;
}

int ipd_cli_status(struct ipd_config *cfg)
{
    char key[KEY_MAX], host[256], auth[KEY_MAX + 32], allow_spec[300];
    char from[4200];
    char addr[INET6_ADDRSTRLEN];
    unsigned port = 0;
    struct ipd_fetch_allowlist *allow = NULL;
    struct ipd_fetch_opts o;
    struct ipd_fetch_result res;
    struct ipd_buf body, err, url;
    int code = 1;
    ipd_buf_init(&body, 16 * 1024 * 1024);
    ipd_buf_init(&err, 1024);
    ipd_buf_init(&url, 1024);
    ipd_fetch_result_init(&res);

    if (!server_address(cfg, host, sizeof(host), addr, &port) ||
        !admin_key(cfg, key, from, sizeof(from)))
        goto out;
    /* Our own server may be on a private address: let the guard through
     * to that one address only. */
    snprintf(allow_spec, sizeof(allow_spec), "127.0.0.0/8 ::1 %s", addr);
    if (ipd_fetch_allowlist_parse(allow_spec, &allow, &err)) {
        fprintf(stderr, "interpd status: %s\n", err.buf);
        goto out;
    }
    snprintf(auth, sizeof(auth), "Authorization: Bearer %s", key);
    const char *headers[] = {auth, NULL};
    ipd_fetch_opts_init(&o);
    o.allow = allow;
    o.headers = headers;
    o.max_redirects = 0;
    o.total_timeout_ms = 30000;
    o.max_bytes = 16 * 1024 * 1024;
    ipd_buf_addf(&url, "http://%s:%u/v1/admin/status", host, port);
    struct ipd_fetch_sink sink = {.write = collect, .ctx = &body};
    enum ipd_err rc = ipd_fetch_get(&o, url.buf, &sink, &res, &err);
    if (rc) {
        say_refusal(url.buf, from, &res, &err, rc);
        goto out;
    }
    if (print_json(&body))
        code = 0;
out:
    ipd_fetch_allowlist_free(allow);
    ipd_fetch_result_release(&res);
    ipd_buf_release(&body);
    ipd_buf_release(&err);
    ipd_buf_release(&url);
    return code;
}
