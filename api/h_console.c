/*
 * h_console.c - the web console: GET /console and its assets under
 * /console/{asset}, compiled in from clients/console/dist (CMakeLists.txt),
 * served only with --console (else 404, as for any unknown route).
 *
 * The page carries a strict Content-Security-Policy: scripts and styles only
 * from /console, plus styles with this response's nonce (CodeMirror writes
 * a <style> element and sets the nonce it reads from the page); images from
 * the page and data:/blob: URLs (charts); connections only to interpd
 * itself; no plugins, forms, base changes or framing by other sites.  An
 * HTML display goes into a sandboxed srcdoc frame, which inherits this
 * policy and runs no script at all.
 *
 * The page names its assets with a tag of their bytes (?v=), so they can be
 * cached for a day and a new build is never served with an old script.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "../service/common/crypto.h"
#include "../service/common/util.h"
#include "http.h"

extern const char ipd_console_index_html[], ipd_console_console_js[],
    ipd_console_console_css[], ipd_console_frame_css[];
extern const unsigned long ipd_console_index_html_len,
    ipd_console_console_js_len, ipd_console_console_css_len,
    ipd_console_frame_css_len;

struct asset {
    const char *name;
    const char *type;
    const char *data;
    const unsigned long *len;
};

static const struct asset assets[] = {
    {"console.js", "text/javascript; charset=utf-8", ipd_console_console_js,
     &ipd_console_console_js_len},
    {"console.css", "text/css; charset=utf-8", ipd_console_console_css,
     &ipd_console_console_css_len},
    {"frame.css", "text/css; charset=utf-8", ipd_console_frame_css,
     &ipd_console_frame_css_len},
};

#define CSP                                                                    \
    "default-src 'none'; script-src 'self'; style-src 'self' 'nonce-%s'; "     \
    "img-src 'self' data: blob:; connect-src 'self'; frame-src 'self'; "       \
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

#define NONCE_BYTES 16
#define TAG_LEN 16

static char asset_tag[TAG_LEN + 1];
static pthread_once_t tag_once = PTHREAD_ONCE_INIT;

/* The first hex digits of a SHA-256 over every asset. */
static void make_tag(void)
{
    char hex[IPD_SHA256_HEX];
    struct ipd_sha256 *h = ipd_sha256_new();
    for (size_t i = 0; i < IPD_ARRAY_LEN(assets); i++)
        ipd_sha256_update(h, assets[i].data, *assets[i].len);
    ipd_sha256_final(h, hex);
    ipd_sha256_free(h);
    memcpy(asset_tag, hex, TAG_LEN);
}

static bool console_on(struct ipd_req *r)
{
    if (r->app->cfg->console)
        return true;
    ipd_reply_code(r, IPD_HE_NOT_FOUND, "no such route: %s", r->path);
    return false;
}

static void common_headers(struct MHD_Response *resp, const char *type)
{
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    MHD_add_response_header(resp, "Referrer-Policy", "no-referrer");
    MHD_add_response_header(resp, "Cross-Origin-Resource-Policy",
                            "same-origin");
}

/* index.html with each __CSP_NONCE__ and __ASSET_TAG__ filled in. */
static void render_page(struct ipd_buf *b, const char *nonce)
{
    static const char *const keys[] = {"__CSP_NONCE__", "__ASSET_TAG__"};
    const char *const values[] = {nonce, asset_tag};
    const char *p = ipd_console_index_html;
    const char *end = p + ipd_console_index_html_len;
    while (p < end) {
        const char *u = memmem(p, (size_t)(end - p), "__", 2);
        size_t k = 0;
        if (!u) {
            IPD_ASSERT(!ipd_buf_add(b, p, (size_t)(end - p)));
            return;
        }
        for (; k < IPD_ARRAY_LEN(keys); k++)
            if ((size_t)(end - u) >= strlen(keys[k]) &&
                !memcmp(u, keys[k], strlen(keys[k])))
                break;
        IPD_ASSERT(!ipd_buf_add(b, p, (size_t)(u - p)));
        if (k == IPD_ARRAY_LEN(keys)) {
            IPD_ASSERT(!ipd_buf_add(b, u, 2));
            p = u + 2;
        } else {
            IPD_ASSERT(!ipd_buf_adds(b, values[k]));
            p = u + strlen(keys[k]);
        }
    }
}

static void console_page(struct ipd_req *r)
{
    unsigned char raw[NONCE_BYTES];
    char nonce[2 * NONCE_BYTES + 1], csp[sizeof(CSP) + 2 * NONCE_BYTES];
    struct ipd_buf b;

    if (!console_on(r))
        return;
    pthread_once(&tag_once, make_tag);
    ipd_random_bytes(raw, sizeof(raw));
    ipd_hex(raw, sizeof(raw), nonce);
    snprintf(csp, sizeof(csp), CSP, nonce);
    ipd_buf_init(&b, IPD_BUF_UNLIMITED);
    render_page(&b, nonce);
    size_t len = b.len;
    struct MHD_Response *resp =
        MHD_create_response_from_buffer(len, b.buf, MHD_RESPMEM_MUST_COPY);
    ipd_buf_release(&b);
    IPD_ASSERT(resp);
    common_headers(resp, "text/html; charset=utf-8");
    MHD_add_response_header(resp, "Content-Security-Policy", csp);
    MHD_add_response_header(resp, "Cross-Origin-Opener-Policy", "same-origin");
    /* frame-ancestors 'none', for browsers that predate it. */
    MHD_add_response_header(resp, "X-Frame-Options", "DENY");
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
    ipd_reply_response(r, MHD_HTTP_OK, resp, len);
}

const struct ipd_handler ipd_h_console = {.finish = console_page};

static void console_asset(struct ipd_req *r)
{
    const struct asset *a = NULL;
    if (!console_on(r))
        return;
    for (size_t i = 0; i < IPD_ARRAY_LEN(assets) && !a; i++)
        if (!strcmp(r->param, assets[i].name))
            a = &assets[i];
    if (!a) {
        ipd_reply_code(r, IPD_HE_NOT_FOUND, "no such console file: %s",
                       r->param);
        return;
    }
    struct MHD_Response *resp = MHD_create_response_from_buffer(
        *a->len, (void *)(uintptr_t)a->data, MHD_RESPMEM_PERSISTENT);
    IPD_ASSERT(resp);
    common_headers(resp, a->type);
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL,
                            "public, max-age=86400");
    ipd_reply_response(r, MHD_HTTP_OK, resp, *a->len);
}

const struct ipd_handler ipd_h_console_asset = {.finish = console_asset};
