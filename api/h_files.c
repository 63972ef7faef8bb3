/*
 * h_files.c - /v1/files: upload (multipart and raw), list, get, content,
 * delete.
 *
 * Uploads stream: every chunk goes straight to a temporary blob (SHA-256
 * computed on the way) and is never held whole in memory.  The size limit
 * is enforced while streaming; past it the temporary file is removed at
 * once and the rest of the body is read and dropped (up to another limit's
 * worth), so the client gets a proper 413 instead of a reset connection.
 * Only after the bytes are durable does the metadata insert run; if it
 * fails, the blob is removed again.
 */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "../service/common/log.h"
#include "../service/common/util.h"
#include "http.h"
#include "../service/fetch/fetch.h"
#include "../service/common/json_out.h"

#define FIELD_MAX 4096                 /* form fields other than the file */
#define PART_NAME_MAX 16384            /* a part's filename before sanitising */
#define MULTIPART_OVERHEAD (64 * 1024) /* headers and small fields */
#define PP_BUFFER (64 * 1024)
#define TTL_CAP_MS (100.0 * 365 * 24 * 3600 * 1000)

/* Reply with one File object. */
static void reply_file(struct ipd_req *r, unsigned status,
                       const struct ipd_file_meta *f)
{
    struct ipd_buf b;
    ipd_buf_init(&b, IPD_BUF_UNLIMITED);
    IPD_ASSERT(ipd_jw_file(&b, f) == IPD_OK);
    ipd_reply_json_buf(r, status, &b);
}

/* ---- upload ---------------------------------------------------------- */

enum upload_kind { UP_RAW, UP_MULTIPART, UP_JSON };

struct upload {
    enum upload_kind kind;
    char file_id[IPD_ID_MAX]; /* chosen at the start: blobs need it */
    struct ipd_blob_writer *w;
    struct MHD_PostProcessor *pp;
    struct ipd_buf part_name;      /* filename of the `file` part */
    struct ipd_buf filename_field; /* the `filename` form field */
    struct ipd_buf ttl_field;      /* the `ttl_hours` form field */
    bool have_file, have_filename_field, have_ttl_field;
    int64_t file_bytes;
    int64_t drained; /* bytes dropped after a 413 */
    bool too_large;
    /* The first client error seen while streaming; answered at the end. */
    bool failed;
    bool deferred; /* a refusal from begin, answered late */
    enum ipd_http_error err;
    char errmsg[256];
    enum ipd_err io_err; /* a storage error while streaming */
    /* URL ingest (UP_JSON), run on a background thread. */
    char *url;  /* owned */
    char *name; /* owned; the request's filename or NULL */
    int64_t ttl_ms;
    bool ingest_submitted, ingest_done;
    enum ipd_err ingest_rc; /* IPD_OK: f holds the stored file */
    bool ingest_detail;     /* errmsg is the message, not a "what" */
    struct ipd_file_meta f;
};

static void upload_fail(struct upload *u, enum ipd_http_error e,
                        const char *msg)
{
    if (u->failed)
        return;
    u->failed = true;
    u->err = e;
    snprintf(u->errmsg, sizeof(u->errmsg), "%s", msg);
    ipd_blob_writer_abort(u->w);
    u->w = NULL;
}

static void upload_cleanup(struct ipd_req *r)
{
    struct upload *u = r->state;
    if (!u)
        return;
    if (u->pp)
        MHD_destroy_post_processor(u->pp);
    /* A client that went away mid-upload leaves nothing behind. */
    ipd_blob_writer_abort(u->w);
    ipd_buf_release(&u->part_name);
    ipd_buf_release(&u->filename_field);
    ipd_buf_release(&u->ttl_field);
    free(u->url);
    free(u->name);
    free(u);
    r->state = NULL;
}

/* Write file bytes, turning the size limit into a 413 mode. */
static void upload_write(struct ipd_req *r, struct upload *u, const char *data,
                         size_t size)
{
    if (u->too_large) {
        u->drained += (int64_t)size;
        return;
    }
    if (u->failed || !u->w) {
        u->drained += (int64_t)size;
        return;
    }
    enum ipd_err rc = ipd_blob_writer_write(u->w, data, size);
    if (rc == IPD_ERR_TOO_LARGE) {
        u->too_large = true;
        ipd_blob_writer_abort(u->w);
        u->w = NULL;
        return;
    }
    if (rc) {
        u->io_err = rc;
        upload_fail(u, IPD_HE_INTERNAL_ERROR, "writing the upload failed");
    }
    (void)r;
}

static enum MHD_Result on_part(void *cls, enum MHD_ValueKind kind,
                               const char *key, const char *filename,
                               const char *content_type,
                               const char *transfer_encoding, const char *data,
                               uint64_t off, size_t size)
{
    struct ipd_req *r = cls;
    struct upload *u = r->state;
    (void)kind;
    (void)content_type;
    (void)transfer_encoding;

    if (u->failed)
        return MHD_NO;
    if (!key)
        return MHD_YES;
    if (!strcmp(key, "file")) {
        /* A second `file` part starts at offset 0 again.  After an empty
         * first part the offset can't tell the two apart, but a different
         * filename can. */
        if (off == 0 && u->have_file &&
            (u->file_bytes > 0 ||
             strcmp(filename ? filename : "", u->part_name.buf) != 0)) {
            upload_fail(u, IPD_HE_INVALID_REQUEST,
                        "more than one `file` part; send one file per "
                        "request");
            return MHD_NO;
        }
        if (!u->have_file) {
            u->have_file = true;
            if (filename && ipd_buf_adds(&u->part_name, filename)) {
                upload_fail(u, IPD_HE_INVALID_REQUEST,
                            "filename is longer than 255 bytes");
                return MHD_NO;
            }
            enum ipd_err rc = ipd_blob_writer_new(
                r->app->blobs, u->file_id, r->app->cfg->max_file_size, &u->w);
            if (rc) {
                u->io_err = rc;
                upload_fail(u, IPD_HE_INTERNAL_ERROR,
                            "cannot store the upload");
                return MHD_NO;
            }
        }
        u->file_bytes += (int64_t)size;
        upload_write(r, u, data, size);
        return u->failed ? MHD_NO : MHD_YES;
    }
    struct ipd_buf *field = NULL;
    if (!strcmp(key, "filename")) {
        field = &u->filename_field;
        u->have_filename_field = true;
    } else if (!strcmp(key, "ttl_hours")) {
        field = &u->ttl_field;
        u->have_ttl_field = true;
    }
    /* Other fields are ignored (and not stored anywhere). */
    if (field && size && ipd_buf_add(field, data, size)) {
        upload_fail(u, IPD_HE_INVALID_REQUEST,
                    !strcmp(key, "filename")
                        ? "filename is longer than 255 bytes"
                        : "form field ttl_hours is too long");
        return MHD_NO;
    }
    return MHD_YES;
}

/* The configured quota: the user's limits in *q, pointing at the
 * tenant's in *t (all of the tenant's users together). */
static void cfg_quota(const struct ipd_config *cfg, struct ipd_quota *q,
                      struct ipd_quota *t)
{
    *t = (struct ipd_quota){cfg->tenant_quota_files, cfg->tenant_quota_bytes,
                            NULL};
    *q = (struct ipd_quota){cfg->quota_files, cfg->quota_bytes, t};
}

/* The early quota check before a body of size bytes (0: not known yet)
 * is received: IPD_ERR_QUOTA with the message in msg when the user's or
 * the tenant's quota has no room for it. */
static enum ipd_err quota_room(struct ipd_req *r, int64_t size, char *msg,
                               size_t n)
{
    struct ipd_quota q, t;
    const char *full = NULL;
    cfg_quota(r->app->cfg, &q, &t);
    enum ipd_err rc =
        ipd_meta_quota_full(r->app->meta, &q, r->principal.tenant,
                            r->principal.user_id, size, ipd_now_ms(), &full);
    if (!rc && full) {
        ipd_quota_message(&q, full, msg, n);
        rc = IPD_ERR_QUOTA;
    }
    return rc;
}

/* The message of a 507 after the insert refused a file of size bytes:
 * the insert does not say which quota it was, so look again.  NULL
 * (the generic message) when neither is full any more. */
static const char *quota_refusal(struct ipd_req *r, int64_t size, char *msg,
                                 size_t n)
{
    return quota_room(r, size, msg, n) == IPD_ERR_QUOTA ? msg : NULL;
}

/* The first failure of an upload, answered once its body is read. */
static void reply_upload_failure(struct ipd_req *r, struct upload *u)
{
    if (u->deferred)
        ipd_reply_failure(r, u->io_err, u->errmsg[0] ? u->errmsg : NULL,
                          "storing the upload");
    else if (u->io_err)
        ipd_reply_failure(r, u->io_err, NULL, "storing the upload");
    else
        ipd_reply_code(r, u->err, "%s", u->errmsg);
}

/* A refusal known before the body (quota, a store down, a full disk):
 * answered now when the client waits for our go-ahead (Expect:
 * 100-continue) or sends no body, so the body never comes; else the body
 * is already on its way, and answering while it comes closes the
 * connection under the client, which may then see a reset instead of
 * the answer.  So it is remembered, the body read and dropped (about the
 * size limit at most), and answered at the end. */
static void upload_refuse(struct ipd_req *r, struct upload *u, enum ipd_err rc,
                          const char *detail, const char *what, int64_t length)
{
    const char *expect = ipd_req_header(r, "Expect");
    if (length == 0 || (expect && strcasestr(expect, "100-continue"))) {
        ipd_reply_failure(r, rc, detail, what);
        return;
    }
    u->failed = u->deferred = true;
    u->io_err = rc;
    snprintf(u->errmsg, sizeof(u->errmsg), "%s", detail ? detail : "");
}

static void upload_begin(struct ipd_req *r)
{
    const struct ipd_config *cfg = r->app->cfg;
    const char *ct = ipd_req_header(r, MHD_HTTP_HEADER_CONTENT_TYPE);
    const char *cl = ipd_req_header(r, MHD_HTTP_HEADER_CONTENT_LENGTH);
    int64_t length = -1;
    char msg[256];
    struct upload *u = ipd_xcalloc(1, sizeof(*u));
    r->state = u;
    ipd_buf_init(&u->part_name, PART_NAME_MAX);
    ipd_buf_init(&u->filename_field, FIELD_MAX);
    ipd_buf_init(&u->ttl_field, 64);
    ipd_id_new("file", u->file_id);

    if (cl && ipd_int_parse(cl, 0, INT64_MAX, &length))
        length = -1;
    if (ipd_media_type_is(ct, "application/json"))
        u->kind = UP_JSON;
    else if (ipd_media_type_is(ct, "multipart/form-data"))
        u->kind = UP_MULTIPART;
    else
        u->kind = UP_RAW;

    if (u->kind == UP_JSON)
        return;
    /* Refuse early what can't succeed, before the client sends the body. */
    int64_t overhead = u->kind == UP_MULTIPART ? MULTIPART_OVERHEAD : 0;
    if (length > cfg->max_file_size + overhead) {
        ipd_reply_code(r, IPD_HE_PAYLOAD_TOO_LARGE,
                       "upload of %lld bytes is over the limit of %lld bytes",
                       (long long)length, (long long)cfg->max_file_size);
        return;
    }
    /* The size is known early only for a raw body with Content-Length. */
    enum ipd_err rc = quota_room(
        r, u->kind == UP_RAW && length > 0 ? length : 0, msg, sizeof(msg));
    if (rc) {
        upload_refuse(r, u, rc, rc == IPD_ERR_QUOTA ? msg : NULL,
                      "checking the quota", length);
        return;
    }
    /* While the delete reserve is spent the disk is full: refuse before
     * the body comes (507), so uploads cannot eat what deletes need. */
    rc = ipd_space_check_write(r->app->space);
    if (rc) {
        upload_refuse(r, u, rc, NULL, "storing the upload", length);
        return;
    }
    if (u->kind == UP_MULTIPART) {
        u->pp = MHD_create_post_processor(r->conn, PP_BUFFER, on_part, r);
        if (!u->pp)
            ipd_reply_code(r, IPD_HE_INVALID_REQUEST,
                           "multipart/form-data needs a boundary parameter");
        return;
    }
    size_t nlen = 0;
    if (!ipd_req_query_n(r, "filename", &nlen)) {
        ipd_reply_code(r, IPD_HE_INVALID_REQUEST,
                       "a raw upload needs ?filename=NAME (or send "
                       "multipart/form-data with a `file` part)");
        return;
    }
    rc = ipd_blob_writer_new(r->app->blobs, u->file_id, cfg->max_file_size,
                             &u->w);
    if (rc)
        upload_refuse(r, u, rc, NULL, "storing the upload", length);
}

static void upload_data(struct ipd_req *r, const char *data, size_t size)
{
    struct upload *u = r->state;
    if (u->kind == UP_JSON) {
        if (!r->body_too_large && ipd_buf_add(&r->body, data, size))
            r->body_too_large = true;
        return;
    }
    if (u->kind == UP_RAW) {
        upload_write(r, u, data, size);
    } else if (u->too_large || u->failed) {
        u->drained += (int64_t)size;
    } else if (MHD_post_process(u->pp, data, size) != MHD_YES && !u->failed) {
        upload_fail(u, IPD_HE_INVALID_REQUEST, "malformed multipart body");
    }
    /* Past twice the limit, stop reading: answer now and let the
     * connection close. */
    if (u->drained > r->app->cfg->max_file_size) {
        if (u->too_large)
            ipd_reply_code(r, IPD_HE_PAYLOAD_TOO_LARGE,
                           "upload is over the limit of %lld bytes",
                           (long long)r->app->cfg->max_file_size);
        else if (u->failed)
            reply_upload_failure(r, u);
    }
}

/* A query value; *bad when it hides a NUL byte (which would cut it). */
static const char *query_value(struct ipd_req *r, const char *name, bool *bad)
{
    size_t n = 0;
    const char *v = ipd_req_query_n(r, name, &n);
    *bad = v && strlen(v) != n;
    return v;
}

/* ttl_hours: a positive number; it can shorten the TTL, never extend it. */
static bool parse_ttl(const char *s, int64_t max_ms, int64_t *ttl_ms)
{
    char *end = NULL;
    if (!s || !*s || isspace((unsigned char)*s))
        return false;
    errno = 0;
    double h = strtod(s, &end);
    if (errno || *end || !isfinite(h) || h <= 0)
        return false;
    double ms = h * 3600.0 * 1000.0;
    /* With TTL "never", any finite value shortens it; keep it below 100
     * years so created_at + ttl stays a real RFC 3339 time. */
    if (max_ms == IPD_TIME_NEVER && ms > TTL_CAP_MS)
        ms = TTL_CAP_MS;
    *ttl_ms = ms >= (double)max_ms ? max_ms : (int64_t)ms;
    if (*ttl_ms < 1)
        *ttl_ms = 1;
    return true;
}

/* The name and TTL the client chose, validated; replies on error. */
static bool upload_params(struct ipd_req *r, struct upload *u,
                          struct ipd_file_meta *f, int64_t *ttl_ms)
{
    const char *name = NULL, *ttl = NULL;
    size_t nlen = 0;
    bool ttl_bad = false;
    if (u->kind == UP_RAW) {
        name = ipd_req_query_n(r, "filename", &nlen);
        ttl = query_value(r, "ttl_hours", &ttl_bad);
    } else {
        if (u->have_filename_field && u->filename_field.len) {
            name = u->filename_field.buf;
            nlen = u->filename_field.len;
        } else {
            name = u->part_name.buf;
            nlen = u->part_name.len;
        }
        if (u->have_ttl_field) {
            ttl = u->ttl_field.buf;
            ttl_bad = strlen(ttl) != u->ttl_field.len;
        } else {
            ttl = query_value(r, "ttl_hours", &ttl_bad);
        }
    }
    enum ipd_err rc =
        ipd_filename_sanitize(name ? name : "", nlen, f->filename);
    if (rc == IPD_ERR_TOO_LARGE) { /* a long name is an invalid one */
        ipd_reply_failure(r, IPD_ERR_INVALID,
                          "filename is longer than 255 bytes", "filename");
        return false;
    }
    if (rc) {
        ipd_reply_code(r, IPD_HE_INVALID_REQUEST,
                       nlen || u->kind == UP_RAW
                           ? "filename must be valid UTF-8 and not empty, "
                             "\".\" or \"..\""
                           : "the upload has no filename: give the part a "
                             "filename or send a `filename` field");
        return false;
    }
    *ttl_ms = r->app->cfg->file_ttl_ms;
    if (ttl && (ttl_bad || !parse_ttl(ttl, *ttl_ms, ttl_ms))) {
        ipd_reply_code(r, IPD_HE_INVALID_REQUEST,
                       "ttl_hours must be a positive number of hours");
        return false;
    }
    return true;
}

/*
 * Type, commit and record the bytes of *w as the caller's file f (its
 * filename already set): the common end of uploads and URL ingest.  *w is
 * consumed.  On failure nothing stays behind (no metadata, no bytes) and
 * *what names the failed step.  Blocking storage calls only: safe on a
 * background thread.
 */
static enum ipd_err store_upload(struct ipd_req *r, struct ipd_blob_writer **w,
                                 const char *file_id, const char *source,
                                 int64_t ttl_ms, struct ipd_file_meta *f,
                                 const char **what)
{
    struct ipd_app *app = r->app;
    enum ipd_err rc;
    f->size = ipd_blob_writer_size(*w);
    rc = ipd_blob_writer_sha256(*w, f->sha256);
    if (rc) {
        *what = "hashing the upload";
        goto fail;
    }
    const void *head = NULL, *tail = NULL;
    size_t head_len = 0;
    ipd_blob_writer_sample(*w, &head, &head_len, &tail);
    rc = ipd_filetype_detect_buf(app->ft, head, head_len, tail, f->size,
                                 f->filename, f->mime_type, f->file_type);
    if (rc) {
        *what = "detecting the file type";
        goto fail;
    }
    memcpy(f->file_id, file_id, sizeof(f->file_id));
    snprintf(f->tenant, sizeof(f->tenant), "%s", r->principal.tenant);
    snprintf(f->user_id, sizeof(f->user_id), "%s", r->principal.user_id);
    snprintf(f->source, sizeof(f->source), "%s", source);
    snprintf(f->blob, sizeof(f->blob), "%s", ipd_blobs_backend(app->blobs));
    f->created_at_ms = ipd_now_ms();
    f->expires_at_ms =
        ttl_ms == IPD_TIME_NEVER ? IPD_TIME_NEVER : f->created_at_ms + ttl_ms;
    rc = ipd_blob_writer_commit(*w);
    *w = NULL;
    if (rc) {
        *what = "storing the upload";
        return rc;
    }
    struct ipd_quota q, t;
    cfg_quota(app->cfg, &q, &t);
    rc = ipd_meta_file_insert(app->meta, f, &q, f->created_at_ms);
    if (rc) {
        /* No metadata, no bytes: never leave an orphan behind. */
        ipd_blob_undo_insert(app->blobs, app->meta, f->file_id, rc);
        *what = "recording the file";
    }
    return rc;
fail:
    ipd_blob_writer_abort(*w);
    *w = NULL;
    return rc;
}

/* ---- URL ingest ------------------------------------------------------- */

static enum ipd_err ingest_write(void *ctx, const void *data, size_t len)
{
    struct upload *u = ctx;
    return ipd_blob_writer_write(u->w, data, len);
}

static void ingest_fail(struct upload *u, enum ipd_err rc, const char *msg)
{
    u->ingest_rc = rc ? rc : IPD_ERR_INVALID;
    u->ingest_detail = true;
    snprintf(u->errmsg, sizeof(u->errmsg), "%s", msg);
}

/* The fetch's own code says whose fault it was: the URL's (invalid, 400),
 * the guard's (a refused address: 400 naming the option that allows it),
 * the remote server's (502, 504).  Our own storage failing is none of
 * those. */
static void ingest_fetch_failed(struct upload *u, enum ipd_err rc,
                                const struct ipd_buf *err)
{
    if (rc == IPD_ERR_FORBIDDEN) {
        char msg[sizeof(u->errmsg)];
        snprintf(msg, sizeof(msg),
                 "%s; an operator can allow such addresses with "
                 "--fetch-allow (CIDRs)",
                 err->len ? err->buf : "the address is not allowed");
        ingest_fail(u, IPD_ERR_INVALID, msg);
    } else if (rc == IPD_ERR_TOO_LARGE) {
        ingest_fail(u, rc,
                    "the URL's body is over the limit of the upload size; "
                    "nothing was stored");
    } else if (rc == IPD_ERR_INVALID || rc == IPD_ERR_UPSTREAM ||
               rc == IPD_ERR_UPSTREAM_TIMEOUT) {
        ingest_fail(u, rc,
                    err->len ? err->buf : "the URL could not be fetched");
    } else {
        u->ingest_rc = rc;
    }
}

/* On a background thread: fetch the URL into a new blob, then store it
 * like an upload. */
static void ingest_run(struct ipd_req *r, bool stopping)
{
    struct upload *u = r->state;
    const struct ipd_config *cfg = r->app->cfg;
    struct ipd_fetch_result res;
    struct ipd_buf err;
    char msg[sizeof(u->errmsg)];
    enum ipd_err rc;
    ipd_fetch_result_init(&res);
    ipd_buf_init(&err, 512);
    u->ingest_done = true;
    if (stopping) {
        ingest_fail(u, IPD_ERR_UNAVAILABLE,
                    "the service is shutting down; nothing was fetched");
        goto out;
    }

    rc = quota_room(r, 0, msg, sizeof(msg));
    if (rc == IPD_ERR_QUOTA) {
        ingest_fail(u, rc, msg);
        goto out;
    }
    /* While the delete reserve is spent the disk is full: refuse before
     * fetching (507), as an upload is refused before its body. */
    if (!rc)
        rc = ipd_space_check_write(r->app->space);
    if (!rc)
        rc = ipd_blob_writer_new(r->app->blobs, u->file_id, cfg->max_file_size,
                                 &u->w);
    if (rc) {
        u->ingest_rc = rc;
        goto out;
    }
    struct ipd_fetch_sink sink = {.write = ingest_write, .ctx = u};
    rc = ipd_fetch_get(r->app->fetch, u->url, &sink, &res, &err);
    if (rc) {
        ipd_blob_writer_abort(u->w);
        u->w = NULL;
        ingest_fetch_failed(u, rc, &err);
        goto out;
    }
    /* The name: the request's, else Content-Disposition, else the URL's
     * last path segment; whatever the server sent is sanitised like an
     * upload's name, and a hopeless one becomes "download". */
    const char *name = u->name ? u->name : res.filename;
    memset(&u->f, 0, sizeof(u->f));
    rc = ipd_filename_sanitize(name ? name : "", name ? strlen(name) : 0,
                               u->f.filename);
    if (rc && u->name) {
        ipd_blob_writer_abort(u->w);
        u->w = NULL;
        ingest_fail(u, IPD_ERR_INVALID,
                    "filename must be valid UTF-8 of at most 255 bytes and "
                    "not empty, \".\" or \"..\"");
        goto out;
    }
    if (rc)
        snprintf(u->f.filename, sizeof(u->f.filename), "download");
    const char *what = NULL;
    rc = store_upload(r, &u->w, u->file_id, "url", u->ttl_ms, &u->f, &what);
    u->ingest_rc = rc;
    if (rc == IPD_ERR_QUOTA && quota_refusal(r, u->f.size, msg, sizeof(msg)))
        ingest_fail(u, rc, msg);
    else if (rc)
        snprintf(u->errmsg, sizeof(u->errmsg), "%s", what);
out:
    ipd_fetch_result_release(&res);
    ipd_buf_release(&err);
}

static void upload_json(struct ipd_req *r)
{
    if (r->body_too_large) {
        ipd_reply_code(r, IPD_HE_PAYLOAD_TOO_LARGE, "JSON body over %d bytes",
                       IPD_JSON_BODY_MAX);
        return;
    }
    json_t *doc = ipd_req_json_body(r);
    if (!doc)
        return;
    struct upload *u = r->state;
    json_t *url = json_object_get(doc, "url");
    json_t *name = json_object_get(doc, "filename");
    json_t *ttl = json_object_get(doc, "ttl_hours");
    char ttlbuf[64];
    bool ttl_bad = false;
    if (!json_is_object(doc) || !json_is_string(url)) {
        ipd_reply_code(r, IPD_HE_INVALID_REQUEST,
                       "a JSON body must be {\"url\": \"https://...\"}; to "
                       "upload a JSON file, send it as multipart/form-data "
                       "or with another Content-Type (e.g. "
                       "application/octet-stream) and ?filename=");
        goto out;
    }
    if (json_string_length(url) > 8192 ||
        strlen(json_string_value(url)) != json_string_length(url)) {
        ipd_reply_code(r, IPD_HE_INVALID_REQUEST,
                       "\"url\" must be at most 8192 bytes without NUL");
        goto out;
    }
    if (name && !json_is_null(name) &&
        (!json_is_string(name) ||
         strlen(json_string_value(name)) != json_string_length(name) ||
         json_string_length(name) > 1024)) {
        ipd_reply_code(r, IPD_HE_INVALID_REQUEST,
                       "\"filename\" must be a string");
        goto out;
    }
    u->ttl_ms = r->app->cfg->file_ttl_ms;
    if (json_is_number(ttl))
        snprintf(ttlbuf, sizeof(ttlbuf), "%.17g", json_number_value(ttl));
    else if (json_is_string(ttl) && json_string_length(ttl) < sizeof(ttlbuf))
        snprintf(ttlbuf, sizeof(ttlbuf), "%s", json_string_value(ttl));
    else
        ttl_bad = ttl && !json_is_null(ttl);
    if (ttl_bad || ((json_is_number(ttl) || json_is_string(ttl)) &&
                    !parse_ttl(ttlbuf, u->ttl_ms, &u->ttl_ms))) {
        ipd_reply_code(r, IPD_HE_INVALID_REQUEST,
                       "ttl_hours must be a positive number of hours");
        goto out;
    }
    if (json_is_string(name)) {
        /* Checked now, so a bad name is 400 before anything is fetched. */
        char tmp[IPD_FILENAME_MAX];
        if (ipd_filename_sanitize(json_string_value(name),
                                  json_string_length(name), tmp)) {
            ipd_reply_code(r, IPD_HE_INVALID_REQUEST,
                           "filename must be valid UTF-8 of at most 255 "
                           "bytes and not empty, \".\" or \"..\"");
            goto out;
        }
        u->name = ipd_xstrdup(json_string_value(name));
    }
    if (!r->app->fetch) {
        ipd_reply_code(r, IPD_HE_UNAVAILABLE,
                       "URL ingest is unavailable on this server");
        goto out;
    }
    u->url = ipd_xstrdup(json_string_value(url));
    const struct ipd_exec_policy *kp = ipd_req_key_policy(r);
    u->ingest_submitted = ipd_bg_submit_shared(r->app->bg, r, ingest_run,
                                               kp ? kp->tenant_fetches : -50,
                                               "URL fetches", "tenant-fetches");
out:
    json_decref(doc);
}

/* After the background fetch: answer what it did. */
static void ingest_reply(struct ipd_req *r, struct upload *u)
{
    if (u->ingest_rc == IPD_OK)
        reply_file(r, MHD_HTTP_CREATED, &u->f);
    else
        ipd_reply_failure(r, u->ingest_rc, u->ingest_detail ? u->errmsg : NULL,
                          u->errmsg[0] ? u->errmsg : "fetching the URL");
}

static void upload_finish(struct ipd_req *r)
{
    struct upload *u = r->state;
    struct ipd_file_meta f;
    int64_t ttl_ms = 0;
    enum ipd_err rc;

    if (u->kind == UP_JSON) {
        if (u->ingest_done)
            ingest_reply(r, u);
        else
            upload_json(r);
        return;
    }
    if (u->kind == UP_MULTIPART && !u->failed && !u->too_large) {
        enum MHD_Result done = MHD_destroy_post_processor(u->pp);
        u->pp = NULL;
        if (done != MHD_YES)
            upload_fail(u, IPD_HE_INVALID_REQUEST,
                        "truncated multipart body (no closing boundary)");
        else if (!u->have_file)
            upload_fail(u, IPD_HE_INVALID_REQUEST,
                        "multipart body has no `file` part");
    }
    if (u->too_large) {
        ipd_reply_code(r, IPD_HE_PAYLOAD_TOO_LARGE,
                       "upload is over the limit of %lld bytes",
                       (long long)r->app->cfg->max_file_size);
        return;
    }
    if (u->failed) {
        reply_upload_failure(r, u);
        return;
    }
    memset(&f, 0, sizeof(f));
    if (!upload_params(r, u, &f, &ttl_ms))
        return;
    const char *what = NULL;
    rc = store_upload(r, &u->w, u->file_id, "upload", ttl_ms, &f, &what);
    if (rc) {
        char msg[256];
        ipd_reply_failure(r, rc,
                          rc == IPD_ERR_QUOTA
                              ? quota_refusal(r, f.size, msg, sizeof(msg))
                              : NULL,
                          what);
        return;
    }
    reply_file(r, MHD_HTTP_CREATED, &f);
}

const struct ipd_handler ipd_h_files_create = {
    .flags = IPD_H_AUTH | IPD_H_USER,
    .scope = IPD_SCOPE_FILES_WRITE,
    .begin = upload_begin,
    .data = upload_data,
    .finish = upload_finish,
    .cleanup = upload_cleanup,
};

/* ---- list ------------------------------------------------------------ */

static void files_list(struct ipd_req *r)
{
    struct ipd_cursor cursor;
    const struct ipd_cursor *after = NULL;
    struct ipd_file_list list = {0};
    int64_t limit = IPD_LIST_DEFAULT;

    if (!ipd_req_list_query(r, "file", &limit, &cursor, &after))
        return;
    enum ipd_err rc = ipd_meta_file_list(r->app->meta, r->principal.tenant,
                                         r->principal.user_id, ipd_now_ms(),
                                         after, (size_t)limit, &list);
    if (rc) {
        ipd_reply_failure(r, rc, NULL, "listing files");
        return;
    }
    /* Written straight into one buffer: building a jansson tree for 50
     * files was most of the cost of this, the busiest read. */
    struct ipd_buf b;
    ipd_buf_init(&b, IPD_BUF_UNLIMITED);
    enum ipd_err wrc = ipd_buf_adds(&b, "{\"files\":[");
    for (size_t i = 0; !wrc && i < list.n; i++) {
        if (i)
            wrc = ipd_buf_addch(&b, ',');
        if (!wrc)
            wrc = ipd_jw_file(&b, &list.items[i]);
    }
    const struct ipd_file_meta *last = list.n ? &list.items[list.n - 1] : NULL;
    if (!wrc)
        wrc = ipd_list_json_end(&b, list.more && last,
                                last ? last->created_at_ms : 0,
                                last ? last->file_id : NULL);
    ipd_file_list_release(&list);
    IPD_ASSERT(wrc == IPD_OK);
    ipd_reply_json_buf(r, MHD_HTTP_OK, &b);
}

const struct ipd_handler ipd_h_files_list = {
    .flags = IPD_H_AUTH | IPD_H_USER,
    .scope = IPD_SCOPE_FILES_READ,
    .finish = files_list,
};

/* ---- one file -------------------------------------------------------- */

/* Look up r->param in the caller's scope; replies 404 and returns false
 * when it isn't there. */
static bool lookup(struct ipd_req *r, struct ipd_file_meta *f)
{
    if (!ipd_id_valid("file", r->param)) {
        ipd_reply_code(r, IPD_HE_NOT_FOUND, "no such file");
        return false;
    }
    enum ipd_err rc =
        ipd_meta_file_get(r->app->meta, r->principal.tenant,
                          r->principal.user_id, r->param, ipd_now_ms(), f);
    if (rc)
        ipd_reply_failure(r, rc,
                          rc == IPD_ERR_NOT_FOUND ? "no such file" : NULL,
                          "reading the file record");
    return rc == IPD_OK;
}

static void files_get(struct ipd_req *r)
{
    struct ipd_file_meta f;
    if (lookup(r, &f))
        reply_file(r, MHD_HTTP_OK, &f);
}

const struct ipd_handler ipd_h_files_get = {
    .flags = IPD_H_AUTH | IPD_H_USER,
    .scope = IPD_SCOPE_FILES_READ,
    .finish = files_get,
};

static ssize_t read_blob(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)pos; /* sequential: libmicrohttpd asks in order */
    ssize_t n = ipd_blob_reader_read(cls, buf, max);
    if (n < 0)
        return MHD_CONTENT_READER_END_WITH_ERROR;
    if (n == 0)
        return MHD_CONTENT_READER_END_OF_STREAM;
    return n;
}

static void free_blob(void *cls)
{
    ipd_blob_reader_free(cls);
}

static void files_content(struct ipd_req *r)
{
    struct ipd_file_meta f;
    char etag[IPD_SHA256_HEX + 2];
    struct ipd_blob_reader *reader = NULL;

    if (!lookup(r, &f))
        return;
    snprintf(etag, sizeof(etag), "\"%s\"", f.sha256);
    /* NEEDSWORK: no 304 for If-None-Match: libmicrohttpd 0.9.75 puts
     * Content-Length: 0 on it, which RFC 9110 forbids. */
    enum ipd_err rc = ipd_blob_open(r->app->blobs, f.file_id, &reader);
    if (rc) {
        /* Metadata without bytes is our fault, not the client's. */
        ipd_error("request_id=%s file %s has metadata but no bytes (%s)",
                  r->request_id, f.file_id, ipd_err_name(rc));
        ipd_reply_failure(r, rc == IPD_ERR_NOT_FOUND ? IPD_ERR_INTERNAL : rc,
                          NULL, "reading the file");
        return;
    }
    /* A local file goes out with sendfile (libmicrohttpd closes the
     * descriptor); other stores stream through a read callback. */
    struct MHD_Response *resp = NULL;
    int fd = ipd_blob_reader_take_fd(reader);
    if (fd >= 0) {
        ipd_blob_reader_free(reader);
        resp = MHD_create_response_from_fd64((uint64_t)f.size, fd);
        if (!resp)
            close(fd);
    } else {
        resp = MHD_create_response_from_callback((uint64_t)f.size, 64 * 1024,
                                                 read_blob, reader, free_blob);
        if (!resp)
            ipd_blob_reader_free(reader);
    }
    if (!resp) {
        ipd_reply_failure(r, IPD_ERR_INTERNAL, NULL, "sending the file");
        return;
    }
    char *cd = ipd_content_disposition(f.filename);
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, f.mime_type);
    MHD_add_response_header(resp, MHD_HTTP_HEADER_ETAG, etag);
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_DISPOSITION, cd);
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL,
                            "private, no-cache");
    MHD_add_response_header(resp, "Content-Security-Policy",
                            "default-src 'none'; sandbox");
    free(cd);
    ipd_reply_response(r, MHD_HTTP_OK, resp, (uint64_t)f.size);
}

const struct ipd_handler ipd_h_files_content = {
    .flags = IPD_H_AUTH | IPD_H_USER,
    .scope = IPD_SCOPE_FILES_READ,
    .finish = files_content,
};

static void files_delete(struct ipd_req *r)
{
    struct ipd_file_meta f;
    if (!ipd_id_valid("file", r->param)) {
        ipd_reply_code(r, IPD_HE_NOT_FOUND, "no such file");
        return;
    }
    enum ipd_err rc =
        ipd_meta_file_delete(r->app->meta, r->principal.tenant,
                             r->principal.user_id, r->param, ipd_now_ms(), &f);
    /* A full disk must not keep a user from freeing space: give the
     * store the reserve (storage/space.h) and try once more. */
    if (rc == IPD_ERR_NO_SPACE && r->app->space &&
        ipd_space_release(r->app->space))
        rc = ipd_meta_file_delete(r->app->meta, r->principal.tenant,
                                  r->principal.user_id, r->param, ipd_now_ms(),
                                  &f);
    if (rc == IPD_ERR_NOT_FOUND) {
        ipd_reply_failure(r, rc, "no such file", "deleting the file");
        return;
    }
    if (rc) {
        ipd_reply_failure(r, rc, NULL, "deleting the file");
        return;
    }
    /* Metadata first, then bytes: a crash between leaves an orphan blob,
     * which the reconcile job removes, never a record without bytes. */
    ipd_blob_delete_later(r->app->blobs, f.file_id);
    if (r->app->space)
        ipd_space_refill(r->app->space);
    ipd_reply_empty(r, MHD_HTTP_NO_CONTENT);
}

const struct ipd_handler ipd_h_files_delete = {
    .flags = IPD_H_AUTH | IPD_H_USER,
    .scope = IPD_SCOPE_FILES_WRITE,
    .finish = files_delete,
};
