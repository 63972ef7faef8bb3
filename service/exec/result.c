/*
 * result.c - what an execution produced, as the contract's result object
 * (CONTRACT.md, Executions): the prelude's report, the error, the output
 * streams, and the files the code wrote to /mnt/output, stored as the
 * user's generated files.
 *
 * Generated files are found by walking the sandbox's /mnt/output tmpfs
 * through the directory fd the sandbox handed over, one component at a
 * time (openat O_NOFOLLOW, fstatat AT_SYMLINK_NOFOLLOW): symlinks, fifos
 * and devices are skipped and reported, never followed.  By the time we
 * walk, every process of the run is dead, so nothing changes under us.
 *
 * display: the bundles the prelude appended to .interpd/display.jsonl
 * (display(obj) and a bare last expression), which the code could have
 * rewritten: read bounded here, parsed by display.h's parser, within the
 * budgets of collect_display.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../../storage/meta.h"
#include "../../storage/space.h"
#include "../common/crypto.h"
#include "../common/json_out.h"
#include "../common/live.h"
#include "../common/log.h"
#include "../common/util.h"
#include "display.h"
#include "exec_internal.h"

#define RESULT_JSON_MAX (1024 * 1024) /* the prelude's result.json */
#define ERROR_FIELD_MAX (64 * 1024)   /* error.message / error.traceback */
#define ERROR_TYPE_MAX 256
#define SCAN_MAX 10000      /* output entries looked at */
#define SCAN_DEPTH_MAX 16   /* output subfolder depth */
#define SKIPPED_LIST_MAX 20 /* entries of generated_files_skipped */

/* ---- the result object ------------------------------------------------- */

/* Program output as a JSON string: invalid UTF-8 (binary output, a cut
 * at the cap in the middle of a character) becomes U+FFFD.  New ref. */
static json_t *lossy_string(const char *s, size_t len)
{
    struct ipd_buf b;
    json_t *j;
    size_t i = 0;

    if (ipd_utf8_valid(s, len))
        return json_stringn(s, len);
    ipd_buf_init(&b, IPD_BUF_UNLIMITED);
    while (i < len) {
        size_t n = ipd_utf8_char(s + i, len - i);
        if (n) {
            IPD_ASSERT(!ipd_buf_add(&b, s + i, n));
            i += n;
        } else {
            IPD_ASSERT(!ipd_buf_adds(&b, "\xef\xbf\xbd"));
            i++;
        }
    }
    j = json_stringn(b.buf, b.len);
    ipd_buf_release(&b);
    return j;
}

/* A string field of the prelude's error, bounded at a character
 * boundary.  New ref. */
static json_t *bounded_field(const json_t *obj, const char *key, size_t max)
{
    const json_t *v = json_object_get(obj, key);
    const char *s;
    size_t n;
    if (!json_is_string(v))
        return json_string("");
    s = json_string_value(v);
    n = json_string_length(v);
    if (n > max) {
        n = max;
        while (n && ((unsigned char)s[n] & 0xc0) == 0x80)
            n--;
    }
    return json_stringn(s, n);
}

/* The first bytes (at most max) of the regular file rel below
 * /mnt/output, never through a symlink: malloc'd (the caller frees), its
 * length in *len; NULL when there is none, it is empty or unreadable.
 * *over: the file is longer than max. */
static char *read_output_file(const struct ipd_sandbox_result *r,
                              const char *rel, size_t max, size_t *len,
                              bool *over)
{
    struct stat st;
    char *text = NULL;
    size_t want, got = 0;
    int fd = ipd_sandbox_output_open(r, rel, O_RDONLY | O_NONBLOCK);
    *len = 0;
    *over = false;
    if (fd < 0)
        goto out;
    if (fstat(fd, &st) || !S_ISREG(st.st_mode) || st.st_size <= 0)
        goto out;
    *over = (uint64_t)st.st_size > max;
    want = *over ? max : (size_t)st.st_size;
    text = ipd_xmalloc(want);
    while (got < want) {
        ssize_t n = read(fd, text + got, want - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        got += (size_t)n;
    }
    *len = got;
out:
    if (fd >= 0)
        close(fd);
    return text;
}

json_t *ipd__read_output_json(const struct ipd_sandbox_result *r,
                              const char *rel, size_t max)
{
    size_t len = 0;
    bool over = false;
    char *text = read_output_file(r, rel, max, &len, &over);
    json_t *doc = text && !over ? json_loadb(text, len, 0, NULL) : NULL;

    free(text);
    if (doc && !json_is_object(doc)) {
        json_decref(doc);
        doc = NULL;
    }
    return doc;
}

json_t *ipd__read_prelude_result(const struct ipd_sandbox_result *r)
{
    json_t *doc = NULL;
    size_t len;
    bool over;
    char *text = read_output_file(r, ".interpd/result.json", RESULT_JSON_MAX,
                                  &len, &over);
    if (text && !over)
        doc = json_loadb(text, len, 0, NULL);
    if (doc && !json_is_object(doc)) {
        json_decref(doc);
        doc = NULL;
    }
    free(text);
    return doc;
}

/* A cancelled run's error: a session call that answered its interrupt
 * keeps the traceback of where KeyboardInterrupt reached it. */
static json_t *cancel_error(const struct ipd_sandbox_result *r,
                            const json_t *prelude_error, bool session)
{
    const char *msg =
        r->interrupted
            ? "the call was cancelled: interrupted with KeyboardInterrupt; "
              "the session goes on"
        : session ? "the call was cancelled and did not stop within 2 s of "
                    "KeyboardInterrupt: the session's interpreter was killed "
                    "and the session has ended"
                  : "the execution was cancelled: its processes were killed";
    json_t *tb =
        json_is_object(prelude_error)
            ? bounded_field(prelude_error, "traceback", ERROR_FIELD_MAX)
            : json_string("");
    return json_pack("{s:s, s:s, s:o}", "type", "Cancelled", "message", msg,
                     "traceback", tb);
}

/* error: timeout and OOM first (the prelude never got to report), then
 * what the prelude reported, then a signal or a bare exit code. New ref. */
static json_t *build_error(const struct ipd_sandbox_result *r,
                           const json_t *prelude, int64_t timeout_ms,
                           bool session)
{
    const json_t *e = prelude ? json_object_get(prelude, "error") : NULL;
    char msg[128];

    if (r->cancelled)
        return cancel_error(r, e, session);
    if (r->timed_out) {
        snprintf(msg, sizeof(msg), "execution exceeded %lld seconds",
                 (long long)((timeout_ms + 999) / 1000));
        return json_pack("{s:s, s:s, s:s}", "type", "Timeout", "message", msg,
                         "traceback", "");
    }
    if (r->oom_killed)
        return json_pack("{s:s, s:s, s:s}", "type", "MemoryLimit", "message",
                         "the code used more memory than its policy allows",
                         "traceback", "");
    if (json_is_object(e))
        return json_pack(
            "{s:o, s:o, s:o}", "type", bounded_field(e, "type", ERROR_TYPE_MAX),
            "message", bounded_field(e, "message", ERROR_FIELD_MAX),
            "traceback", bounded_field(e, "traceback", ERROR_FIELD_MAX));
    if (r->term_signal) {
        snprintf(msg, sizeof(msg), "signal %d", r->term_signal);
        return json_pack("{s:s, s:s, s:s}", "type", "Killed", "message", msg,
                         "traceback", "");
    }
    if (r->exit_code != 0) {
        snprintf(msg, sizeof(msg), "exited with status %d", r->exit_code);
        return json_pack("{s:s, s:s, s:s}", "type", "SystemExit", "message",
                         msg, "traceback", "");
    }
    return json_null();
}

/* Milliseconds are plenty (and libm is not linked). */
static double round3(double x)
{
    if (!(x > 0) || x > 1e12)
        return 0.0;
    return (double)(int64_t)(x * 1000.0 + 0.5) / 1000.0;
}

/* ---- generated files ------------------------------------------------- */

struct out_entry {
    char *rel; /* owned; path below /mnt/output */
    int depth;
};

struct collect {
    struct out_entry *items; /* owned */
    size_t n, alloc;
    size_t scanned;
    json_t *before;   /* borrowed: a session's files after its last
                         call ("rel": "ino:size:mtime"), or NULL */
    json_t *now;      /* what this listing saw, for the next call */
    json_t *skipped;  /* borrowed: generated_files_skipped */
    size_t n_skipped; /* all skips, listed or not */
};

static void note_skipped(struct collect *c, const char *rel, const char *reason)
{
    char name[IPD_FILENAME_MAX];
    c->n_skipped++;
    if (json_array_size(c->skipped) >= SKIPPED_LIST_MAX)
        return;
    /* Shown to people: the sanitised form of the name. */
    if (ipd_filename_sanitize(rel, strlen(rel), name))
        snprintf(name, sizeof(name), "(unreadable name)");
    json_array_append_new(c->skipped, json_pack("{s:s, s:s}", "filename", name,
                                                "reason", reason));
}

static void collect_add(struct collect *c, const char *rel, int depth)
{
    if (c->n == c->alloc) {
        c->alloc = c->alloc ? c->alloc * 2 : 32;
        c->items = ipd_xrealloc(c->items, c->alloc * sizeof(*c->items));
    }
    c->items[c->n].rel = ipd_xstrdup(rel);
    c->items[c->n].depth = depth;
    c->n++;
}

/* A session's file as its last call left it (same inode, size and
 * mtime): not generated by this call.  Every file seen is noted for the
 * next call. */
static bool unchanged(struct collect *c, const char *rel, const struct stat *st)
{
    char sig[96];
    const char *was = json_string_value(json_object_get(c->before, rel));

    snprintf(sig, sizeof(sig), "%llu:%lld:%lld.%09ld",
             (unsigned long long)st->st_ino, (long long)st->st_size,
             (long long)st->st_mtim.tv_sec, st->st_mtim.tv_nsec);
    json_object_set_new(c->now, rel, json_string(sig));
    return was && !strcmp(was, sig);
}

/* Walk fd (owned: closed here).  Regular files are collected,
 * directories descended (never through a symlink), the rest skipped. */
static void collect_dir(struct collect *c, int fd, const char *prefix,
                        int depth)
{
    DIR *d = fdopendir(fd);
    struct dirent *e;

    if (!d) {
        close(fd);
        return;
    }
    while ((e = ipd_readdir(d)) != NULL && c->scanned < SCAN_MAX) {
        struct stat st;
        char rel[PATH_MAX];
        if (depth == 0 && !strcmp(e->d_name, ".interpd"))
            continue; /* the prelude's own results */
        c->scanned++;
        if ((size_t)snprintf(rel, sizeof(rel), "%s%s%s", prefix,
                             prefix[0] ? "/" : "", e->d_name) >= sizeof(rel))
            continue;
        if (fstatat(fd, e->d_name, &st, AT_SYMLINK_NOFOLLOW))
            continue;
        if (S_ISREG(st.st_mode)) {
            if (c->before && unchanged(c, rel, &st))
                continue;
            collect_add(c, rel, depth);
        } else if (S_ISDIR(st.st_mode) && depth < SCAN_DEPTH_MAX) {
            int sub = openat(fd, e->d_name,
                             O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
            if (sub >= 0)
                collect_dir(c, sub, rel, depth + 1);
        } else if (!S_ISDIR(st.st_mode)) {
            note_skipped(
                c, rel, S_ISLNK(st.st_mode) ? "symlink" : "not_a_regular_file");
        }
    }
    closedir(d);
}

/* Top-level files first, then by path: stable whatever readdir does. */
static int cmp_entry(const void *a, const void *b)
{
    const struct out_entry *x = a, *y = b;
    if (x->depth != y->depth)
        return x->depth < y->depth ? -1 : 1;
    return strcmp(x->rel, y->rel);
}

/*
 * The stored name of a generated file: its path below /mnt/output with
 * '/' turned into '_' ("plots/a.png" -> "plots_a.png", so files of the
 * same name in different folders stay apart), then ipd_filename_sanitize
 * (controls such as newlines become '_').  Too long: the last component
 * alone; not UTF-8 or still too long: "generated_<n><ext>".
 */
static void generated_name(const char *rel, size_t n,
                           char out[IPD_FILENAME_MAX])
{
    char joined[PATH_MAX], ext[IPD_FILENAME_MAX];
    const char *last = strrchr(rel, '/');
    const char *dot;
    size_t len = strlen(rel);
    enum ipd_err rc;

    IPD_ASSERT(len < sizeof(joined));
    for (size_t i = 0; i <= len; i++)
        joined[i] = rel[i] == '/' ? '_' : rel[i];
    rc = ipd_filename_sanitize(joined, len, out);
    if (rc == IPD_ERR_TOO_LARGE && last)
        rc = ipd_filename_sanitize(last + 1, strlen(last + 1), out);
    if (!rc)
        return;
    dot = strrchr(last ? last + 1 : rel, '.');
    if (dot && strlen(dot) <= 10 && ipd_utf8_valid(dot, strlen(dot)) &&
        !ipd_filename_sanitize(dot, strlen(dot), ext) && ext[0] == '.')
        snprintf(out, IPD_FILENAME_MAX, "generated_%zu%.10s", n + 1, ext);
    else
        snprintf(out, IPD_FILENAME_MAX, "generated_%zu", n + 1);
}

static const char b64[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/* New ref: a JSON string of the base64 of data. */
static json_t *base64_string(const unsigned char *data, size_t len)
{
    size_t olen = (len + 2) / 3 * 4;
    char *o = ipd_xmalloc(olen + 1);
    size_t j = 0;
    json_t *s;
    for (size_t i = 0; i < len; i += 3) {
        uint32_t v = (uint32_t)data[i] << 16;
        if (i + 1 < len)
            v |= (uint32_t)data[i + 1] << 8;
        if (i + 2 < len)
            v |= data[i + 2];
        o[j++] = b64[(v >> 18) & 63];
        o[j++] = b64[(v >> 12) & 63];
        o[j++] = i + 1 < len ? b64[(v >> 6) & 63] : '=';
        o[j++] = i + 2 < len ? b64[v & 63] : '=';
    }
    o[j] = '\0';
    s = json_stringn(o, j);
    free(o);
    return s;
}

/* The File object of CONTRACT.md, written by its one writer
 * (ipd_jw_file).  New ref, or NULL when it cannot be written. */
static json_t *file_object(const struct ipd_file_meta *f)
{
    struct ipd_buf b;
    json_t *obj = NULL;
    ipd_buf_init(&b, IPD_BUF_UNLIMITED);
    if (!ipd_jw_file(&b, f))
        obj = json_loadb(b.buf, b.len, 0, NULL);
    ipd_buf_release(&b);
    return obj;
}

/* Copy fd's bytes into w, the first cap of them also into copy when
 * given (kept for data_base64).  *copied: the bytes read; *why: the
 * reason to report when it fails (static). */
static enum ipd_err copy_to_blob(int fd, struct ipd_blob_writer *w,
                                 unsigned char *copy, size_t cap,
                                 size_t *copied, const char **why)
{
    char buf[IPD__COPY_CHUNK];
    enum ipd_err rc = IPD_OK;
    *copied = 0;
    while (!rc) {
        ssize_t got = read(fd, buf, sizeof(buf));
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0) {
            rc = IPD_ERR_IO;
            *why = "unreadable";
            break;
        }
        if (got == 0)
            break;
        rc = ipd_blob_writer_write(w, buf, (size_t)got);
        if (rc == IPD_ERR_TOO_LARGE)
            *why = "too_large";
        if (rc)
            break;
        if (copy && *copied + (size_t)got <= cap)
            memcpy(copy + *copied, buf, (size_t)got);
        *copied += (size_t)got;
    }
    return rc;
}

/* The record of a generated file whose bytes are all in w (not yet
 * committed): size, sha256, type, owner, source, times.  f's name and id
 * are set already. */
static enum ipd_err describe_generated(const struct ipd_executor *ex,
                                       const struct ipd_exec_request *rq,
                                       struct ipd_blob_writer *w,
                                       struct ipd_file_meta *f)
{
    const void *head = NULL, *tail = NULL;
    size_t head_len = 0;
    enum ipd_err rc;

    f->size = ipd_blob_writer_size(w);
    rc = ipd_blob_writer_sha256(w, f->sha256);
    if (rc)
        goto out;
    ipd_blob_writer_sample(w, &head, &head_len, &tail);
    rc = ipd_filetype_detect_buf(ex->ft, head, head_len, tail, f->size,
                                 f->filename, f->mime_type, f->file_type);
    if (rc)
        goto out;
    snprintf(f->tenant, sizeof(f->tenant), "%s", rq->tenant);
    snprintf(f->user_id, sizeof(f->user_id), "%s", rq->user_id);
    snprintf(f->source, sizeof(f->source), "generated");
    snprintf(f->blob, sizeof(f->blob), "%s", ipd_blobs_backend(ex->blobs));
    f->created_at_ms = ipd_now_ms();
    f->expires_at_ms = ex->file_ttl_ms == IPD_TIME_NEVER
                           ? IPD_TIME_NEVER
                           : f->created_at_ms + ex->file_ttl_ms;
out:
    return rc;
}

/* One output file on its way into generated_files. */
struct gen_file {
    int fd;                 /* owned: the file, open for reading */
    int64_t size;           /* from fstat */
    struct ipd_file_meta f; /* filename set; the rest once described */
    bool described;         /* f's size, sha256 and types are set */
    unsigned char *copy;    /* owned: its bytes when within the inline limit */
    bool have_copy;         /* copy holds all f.size bytes */
    const char *quota;      /* over a quota: "user" or "tenant" (static) */
};

/* The user's files and bytes, and the tenant's (all its users), counted
 * before the first store and kept up to date after each: a file the quota
 * cannot take is never written to the blob store only to be deleted
 * again.  The insert checks both quotas atomically anyway (a concurrent
 * upload may come first). */
struct gen_usage {
    bool known, tknown;
    int64_t count, bytes;
    int64_t tcount, tbytes;
};

/* What the outputs may cost, whatever tricks made them: each inode once
 * (a hard link is a second name, not a second file) and its full size
 * (a sparse file stores its holes as bytes), within the run's output
 * limit (the /mnt/output tmpfs size).  Without that, hard links and
 * sparse files let 64 MiB of tmpfs store a gigabyte of blobs. */
struct out_budget {
    int64_t left; /* bytes; < 0: no limit */
    struct {
        dev_t dev;
        ino_t ino;
    } * seen;
    size_t n, alloc;
};

/* NULL: f may be collected (and is charged); else the reason for
 * generated_files_skipped. */
static const char *budget_charge(struct out_budget *b, const struct stat *st)
{
    for (size_t i = 0; i < b->n; i++)
        if (b->seen[i].dev == st->st_dev && b->seen[i].ino == st->st_ino)
            return "hard_link";
    if (b->left >= 0 && st->st_size > b->left)
        return (int64_t)st->st_blocks * 512 < st->st_size
                   ? "sparse_over_output_limit"
                   : "over_output_limit";
    if (b->left >= 0)
        b->left -= st->st_size;
    if (b->n == b->alloc) {
        b->alloc = b->alloc ? b->alloc * 2 : 16;
        b->seen = ipd_xrealloc(b->seen, b->alloc * sizeof(*b->seen));
    }
    b->seen[b->n].dev = st->st_dev;
    b->seen[b->n].ino = st->st_ino;
    b->n++;
    return NULL;
}

/* Room for the bytes of a file of size to return inline: 0 is "never". */
static bool inline_fits(const struct ipd_executor *ex, int64_t size)
{
    return ex->inline_max > 0 && size <= ex->inline_max;
}

/*
 * Store g as the user's file (its bytes kept in g->copy when they fit
 * inline).  IPD_OK: stored, g described.  Otherwise nothing of it stays
 * (no blob, no record) and *why is the reason (static): quota_exceeded,
 * too_large, unreadable, storage_error.
 */
static enum ipd_err store_generated(struct ipd_executor *ex,
                                    const struct ipd_exec_request *rq,
                                    struct gen_file *g, const char **why)
{
    struct ipd_blob_writer *w = NULL;
    struct ipd_quota q = ex->quota;
    size_t copied = 0;
    enum ipd_err rc;

    ipd_id_new("file", g->f.file_id);
    *why = "storage_error";
    rc = ipd_blob_writer_new(ex->blobs, g->f.file_id, ex->max_file_size, &w);
    if (rc)
        goto out;
    if (inline_fits(ex, g->size))
        g->copy = ipd_xmalloc((size_t)g->size + 1);
    rc = copy_to_blob(g->fd, w, g->copy, (size_t)g->size, &copied, why);
    if (!rc)
        rc = describe_generated(ex, rq, w, &g->f);
    if (rc)
        goto out;
    g->described = true;
    g->have_copy = g->copy && copied == (size_t)g->f.size;
    rc = ipd_blob_writer_commit(w);
    w = NULL;
    if (rc)
        goto out;
    rc = ipd_meta_file_insert(ex->meta, &g->f, &q, g->f.created_at_ms);
    if (rc) {
        /* No metadata, no bytes. */
        ipd_blob_undo_insert(ex->blobs, ex->meta, g->f.file_id, rc);
        if (rc == IPD_ERR_QUOTA)
            *why = "quota_exceeded";
    }
    /* The insert does not say which quota refused it: look again. */
    if (rc == IPD_ERR_QUOTA &&
        (ipd_meta_quota_full(ex->meta, &q, rq->tenant, rq->user_id, g->f.size,
                             ipd_now_ms(), &g->quota) ||
         !g->quota))
        g->quota = "user";
out:
    if (rc && rc != IPD_ERR_TOO_LARGE && rc != IPD_ERR_QUOTA)
        ipd_warn("executor: generated file %s not stored: %s", g->f.file_id,
                 ipd_err_name(rc));
    ipd_blob_writer_abort(w);
    return rc;
}

/* Describe a file that is not stored (unless storing got that far): its
 * bytes read once for the sha256 (and kept when they fit inline), its
 * type from the file itself.  IPD_ERR_IO when it cannot be read. */
static enum ipd_err describe_unstored(struct ipd_executor *ex,
                                      struct gen_file *g)
{
    char buf[IPD__COPY_CHUNK];
    struct ipd_sha256 *h = NULL;
    int64_t off = 0;
    enum ipd_err rc = IPD_OK;

    g->f.file_id[0] = '\0';
    if (g->described)
        return IPD_OK;
    if (!g->copy && inline_fits(ex, g->size))
        g->copy = ipd_xmalloc((size_t)g->size + 1);
    h = ipd_sha256_new();
    for (;;) {
        ssize_t got = pread(g->fd, buf, sizeof(buf), (off_t)off);
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0)
            rc = IPD_ERR_IO;
        if (got <= 0)
            break;
        ipd_sha256_update(h, buf, (size_t)got);
        if (g->copy && off + got <= g->size)
            memcpy(g->copy + off, buf, (size_t)got);
        off += got;
    }
    ipd_sha256_final(h, g->f.sha256);
    ipd_sha256_free(h);
    if (!rc)
        rc = ipd_filetype_detect(ex->ft, g->fd, g->f.filename, g->f.mime_type,
                                 g->f.file_type);
    if (rc)
        return rc;
    g->f.size = off;
    g->have_copy = g->copy && off == g->size;
    snprintf(g->f.source, sizeof(g->f.source), "generated");
    g->f.created_at_ms = ipd_now_ms();
    g->f.expires_at_ms = IPD_TIME_NEVER;
    g->described = true;
    return IPD_OK;
}

/* The sentence behind a not_stored_reason, into out (quota: which one,
 * for quota_exceeded). */
static void not_stored_message(const struct ipd_executor *ex,
                               const char *reason, const char *quota,
                               int64_t size, char *out, size_t n)
{
    char files[48] = "", bytes[48] = "";
    bool tenant = quota && !strcmp(quota, "tenant");
    const struct ipd_quota *q = tenant ? &ex->tenant_quota : &ex->quota;
    if (!strcmp(reason, "quota_exceeded")) {
        if (q->max_files >= 0)
            snprintf(files, sizeof(files), "at most %lld files",
                     (long long)q->max_files);
        if (q->max_bytes >= 0)
            snprintf(bytes, sizeof(bytes), "at most %lld bytes",
                     (long long)q->max_bytes);
        snprintf(out, n,
                 "not stored: it would pass the %s file quota (%s%s%s%s)",
                 tenant ? "tenant's" : "user's", files,
                 files[0] && bytes[0] ? ", " : "", bytes,
                 tenant ? " for all of the tenant's users together" : "");
    } else if (!strcmp(reason, "store_outputs_false")) {
        snprintf(out, n,
                 "not stored: the request asked for "
                 "\"store_outputs\": false");
    } else if (!strcmp(reason, "no_space")) {
        snprintf(out, n, "not stored: the server is out of storage space");
    } else if (!strcmp(reason, "too_large")) {
        snprintf(out, n,
                 "not stored: %lld bytes is over the file size limit of "
                 "%lld bytes",
                 (long long)size, (long long)ex->max_file_size);
    } else {
        snprintf(out, n,
                 "not stored: the file store failed (see the "
                 "server log)");
    }
}

/* generated_files' entry for a file that is not stored: the File object
 * without file_id and expires_at, stored false, not_stored_reason, its
 * bytes as data_base64 when they fit inline (else not_inline_reason), and
 * a message saying all that.  New ref, or NULL. */
static json_t *unstored_object(const struct ipd_executor *ex,
                               const struct gen_file *g, const char *reason)
{
    char msg[512];
    size_t len;
    json_t *obj = file_object(&g->f);
    if (!obj)
        return NULL;
    json_object_del(obj, "file_id");
    json_object_del(obj, "expires_at");
    json_object_set_new(obj, "stored", json_false());
    json_object_set_new(obj, "not_stored_reason", json_string(reason));
    if (!strcmp(reason, "quota_exceeded"))
        json_object_set_new(obj, "quota",
                            json_string(g->quota ? g->quota : "user"));
    not_stored_message(ex, reason, g->quota, g->f.size, msg, sizeof(msg));
    len = strlen(msg);
    if (g->have_copy) {
        json_object_set_new(obj, "data_base64",
                            base64_string(g->copy, (size_t)g->f.size));
        snprintf(msg + len, sizeof(msg) - len,
                 "; its bytes are returned inline in data_base64");
    } else {
        json_object_set_new(obj, "not_inline_reason",
                            json_string("over_inline_limit"));
        snprintf(msg + len, sizeof(msg) - len,
                 "; too large to return inline: %lld bytes, the inline "
                 "limit is %lld bytes",
                 (long long)g->f.size, (long long)ex->inline_max);
    }
    json_object_set_new(obj, "message", json_string(msg));
    return obj;
}

/* Why g is not even offered to the store, or NULL; over a quota, which
 * one in *quota. */
static const char *store_refusal(const struct ipd_executor *ex,
                                 const struct ipd_exec_request *rq,
                                 const struct gen_usage *u, int64_t size,
                                 const char **quota)
{
    if (rq->outputs_inline_only)
        return "store_outputs_false";
    if (size > ex->max_file_size)
        return "too_large";
    /* While the delete reserve is out the disk is full: what is stored
     * now would eat the room deletes need (storage/space.h). */
    if (ipd_space_check_write(ex->space))
        return "no_space";
    if (u->known && ipd_quota_exceeded(&ex->quota, u->count, u->bytes, size))
        *quota = "user";
    else if (u->tknown &&
             ipd_quota_exceeded(&ex->tenant_quota, u->tcount, u->tbytes, size))
        *quota = "tenant";
    return *quota ? "quota_exceeded" : NULL;
}

/*
 * generated_files' entry for one output file: stored as the user's file
 * (stored true; images within the inline limit with data_base64) or, when
 * that is refused or fails, described and returned without a file_id
 * (unstored_object).  Returns IPD_OK and a new ref in *obj, or an error
 * and the reason for generated_files_skipped in *why (static) when the
 * file cannot be read at all.
 */
static enum ipd_err generated_entry(struct ipd_executor *ex,
                                    const struct ipd_exec_request *rq,
                                    const struct ipd_sandbox_result *r,
                                    const struct out_entry *oe, size_t n,
                                    struct gen_usage *u, struct out_budget *b,
                                    json_t **obj, const char **why)
{
    struct gen_file g;
    struct stat st;
    const char *reason;
    enum ipd_err rc = IPD_ERR_IO;

    memset(&g, 0, sizeof(g));
    *obj = NULL;
    *why = "unreadable";
    g.fd = ipd_sandbox_output_open(r, oe->rel, O_RDONLY | O_NONBLOCK);
    if (g.fd < 0 || fstat(g.fd, &st) || !S_ISREG(st.st_mode))
        goto out;
    if ((reason = budget_charge(b, &st)) != NULL) {
        *why = reason;
        goto out;
    }
    g.size = st.st_size;
    generated_name(oe->rel, n, g.f.filename);
    reason = store_refusal(ex, rq, u, g.size, &g.quota);
    if (!reason && !store_generated(ex, rq, &g, &reason)) {
        u->count++;
        u->bytes += g.f.size;
        u->tcount++;
        u->tbytes += g.f.size;
        *obj = file_object(&g.f);
        if (*obj && g.have_copy && !strcmp(g.f.file_type, "image"))
            json_object_set_new(*obj, "data_base64",
                                base64_string(g.copy, (size_t)g.f.size));
        if (*obj)
            json_object_set_new(*obj, "stored", json_true());
    } else {
        if (!strcmp(reason, "unreadable"))
            reason = "storage_error"; /* read once after all */
        rc = describe_unstored(ex, &g);
        if (rc)
            goto out;
        *obj = unstored_object(ex, &g, reason);
    }
    rc = *obj ? IPD_OK : IPD_ERR_INTERNAL;
out:
    free(g.copy);
    if (g.fd >= 0)
        close(g.fd);
    return rc;
}

static void collect_release(struct collect *c)
{
    for (size_t i = 0; i < c->n; i++)
        free(c->items[i].rel);
    free(c->items);
}

/* The user's usage and the tenant's for the early quota check
 * (gen_usage); each unknown when nothing is stored, there is no such
 * quota or the store cannot say. */
static void usage_start(struct ipd_executor *ex,
                        const struct ipd_exec_request *rq, struct gen_usage *u)
{
    memset(u, 0, sizeof(*u));
    if (rq->outputs_inline_only)
        return;
    if (ex->quota.max_files >= 0 || ex->quota.max_bytes >= 0)
        u->known = !ipd_meta_file_usage(ex->meta, rq->tenant, rq->user_id,
                                        ipd_now_ms(), &u->count, &u->bytes);
    if (ipd_quota_limits_tenant(&ex->quota))
        u->tknown = !ipd_meta_file_usage(ex->meta, rq->tenant, NULL,
                                         ipd_now_ms(), &u->tcount, &u->tbytes);
}

void ipd__live_emit(const struct ipd_exec_request *rq, const char *kind,
                    const json_t *obj)
{
    if (!ipd_live_streamed(rq->live))
        return; /* nobody would read it: not even dumped */
    char *text = json_dumps(obj, IPD_JSON_REPLY_FLAGS);
    IPD_ASSERT(text);
    ipd_live_event(rq->live, kind, text, strlen(text));
    free(text);
}

/* generated_files, generated_files_truncated, generated_files_dropped,
 * generated_files_skipped.  Each File goes to a stream as it is stored. */
static void collect_generated(struct ipd_executor *ex,
                              const struct ipd_exec_request *rq,
                              const struct ipd_sandbox_result *r,
                              int64_t output_limit, json_t *snapshot,
                              json_t *result)
{
    struct collect c;
    struct gen_usage u;
    struct out_budget b = {.left = output_limit > 0 ? output_limit : -1};
    json_t *files = json_array();
    size_t listed = 0, dropped = 0;
    int fd;

    memset(&c, 0, sizeof(c));
    c.skipped = json_array();
    c.before = snapshot;
    c.now = snapshot ? json_object() : NULL;
    fd = r->output_dirfd >= 0
             ? openat(r->output_dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC)
             : -1;
    if (fd >= 0)
        collect_dir(&c, fd, "", 0);
    if (c.n)
        qsort(c.items, c.n, sizeof(*c.items), cmp_entry);
    if (c.n)
        usage_start(ex, rq, &u);
    for (size_t i = 0; i < c.n; i++) {
        json_t *obj = NULL;
        const char *why = NULL;
        if (listed >= ex->max_generated) {
            dropped++;
            continue;
        }
        if (generated_entry(ex, rq, r, &c.items[i], i, &u, &b, &obj, &why)) {
            note_skipped(&c, c.items[i].rel, why ? why : "storage_error");
            continue;
        }
        ipd__live_emit(rq, "file", obj);
        json_array_append_new(files, obj);
        listed++;
    }
    json_object_set_new(result, "generated_files", files);
    json_object_set_new(result, "generated_files_truncated",
                        json_boolean(dropped > 0 || c.scanned >= SCAN_MAX));
    json_object_set_new(result, "generated_files_dropped",
                        json_integer((json_int_t)dropped));
    json_object_set_new(result, "generated_files_skipped", c.skipped);
    if (snapshot && c.scanned < SCAN_MAX) {
        json_object_clear(snapshot);
        json_object_update(snapshot, c.now);
    }
    json_decref(c.now);
    collect_release(&c);
    free(b.seen);
}

/* ---- display ---------------------------------------------------------- */

/* display and display_truncated: the bundles of display.jsonl (display.h),
 * their text/plain and text/html together within the policy's output
 * limit (as stdout), their image/png together within the inline limit
 * (--inline-image-max; 0: no images). */
static int64_t display_text_max(const struct ipd_exec_policy *ep)
{
    return ep && ep->output_bytes > 0 ? ep->output_bytes : 64 << 10;
}

static void collect_display(const struct ipd_executor *ex,
                            const struct ipd_exec_policy *ep,
                            const struct ipd_sandbox_result *r, json_t *result)
{
    size_t len;
    bool over, truncated;
    char *text = read_output_file(r, ".interpd/display.jsonl",
                                  IPD_DISPLAY_FILE_MAX, &len, &over);
    json_t *list =
        ipd_display_parse(text, len, over, display_text_max(ep),
                          ex->inline_max > 0 ? ex->inline_max : 0, &truncated);
    free(text);
    json_object_set_new(result, "display", list);
    json_object_set_new(result, "display_truncated", json_boolean(truncated));
}

/* A streamed run's display events, each as the code shows it: the
 * prelude sends each bundle it appends to display.jsonl on the call
 * socket too (calls.h), where it is checked as collect_display checks
 * the file's lines, against the same budgets counted over the run, so
 * the events are the result's display list, one by one (unless the code
 * wrote the file or the socket itself: then each stays within them). */
struct live_display {
    struct ipd_display_budget b;
    struct ipd_live *live; /* borrowed: it owns this */
};

static void live_display(void *ctx, json_t *line)
{
    struct live_display *d = ctx;
    json_t *one = ipd_display_bundle(line, &d->b);
    if (!one)
        return;
    char *text = json_dumps(one, IPD_JSON_REPLY_FLAGS);
    if (text)
        ipd_live_event(d->live, "display", text, strlen(text));
    free(text);
    json_decref(one);
}

void ipd__live_display(const struct ipd_executor *ex,
                       const struct ipd_exec_policy *ep, struct ipd_live *live,
                       struct ipd_live_call_limits *lim)
{
    struct live_display *d = ipd_xcalloc(1, sizeof(*d));
    ipd_display_budget_init(&d->b, display_text_max(ep),
                            ex->inline_max > 0 ? ex->inline_max : 0);
    d->live = live;
    lim->display = live_display;
    lim->display_ctx = d;
    lim->display_bytes = IPD_DISPLAY_FILE_MAX;
}

json_t *ipd__build_result(struct ipd_executor *ex,
                          const struct ipd_exec_request *rq,
                          const char *exec_id, const struct ipd_exec_policy *ep,
                          int64_t timeout_ms,
                          const struct ipd_sandbox_result *r,
                          const struct ipd__installs *ins, json_t *snapshot)
{
    json_t *prelude = ipd__read_prelude_result(r);
    json_t *error = build_error(r, prelude, timeout_ms, rq->session_id != NULL);

    /* Every run's imports are counted for the warm set (nothing else of
     * the run is kept there); a changed plan renews the zygotes. */
    if (ipd_warmset_note(ex->warmset, json_object_get(prelude, "imports")))
        ipd__warm_adapt(ex);
    bool success = r->exit_code == 0 && !r->timed_out && !r->oom_killed &&
                   !r->cancelled && json_is_null(error);
    json_t *res = json_object();

    json_object_set_new(res, "execution_id", json_string(exec_id));
    json_object_set_new(res, "success", json_boolean(success));
    json_object_set_new(res, "exit_code", json_integer(r->exit_code));
    json_object_set_new(res, "timed_out", json_boolean(r->timed_out));
    json_object_set_new(res, "cancelled", json_boolean(r->cancelled));
    /* Beyond the contract: how a cancel ended a session call. */
    if (r->cancelled && rq->session_id)
        json_object_set_new(
            res, "cancel_mode",
            json_string(r->interrupted ? "interrupted" : "killed"));
    json_object_set_new(res, "stdout", lossy_string(r->out.buf, r->out.len));
    json_object_set_new(res, "stderr", lossy_string(r->err.buf, r->err.len));
    json_object_set_new(res, "stdout_truncated",
                        json_boolean(r->out_truncated));
    json_object_set_new(res, "stderr_truncated",
                        json_boolean(r->err_truncated));
    json_object_set_new(res, "execution_time",
                        json_real(round3(r->wall_seconds)));
    json_object_set_new(res, "install_time", json_real(round3(ins->seconds)));
    json_object_set_new(res, "error", error);
    collect_generated(ex, rq, r, ep ? ep->output_dir_bytes : 0, snapshot, res);
    collect_display(ex, ep, r, res);
    json_object_set(res, "installed_packages", ins->results);
    /* Beyond the contract: the code ran twice because a module it
     * imported was installed for it. */
    json_object_set_new(res, "auto_installed",
                        ins->auto_dist[0] ? json_string(ins->auto_dist)
                                          : json_null());
    json_object_set_new(
        res, "resources",
        json_pack("{s:f, s:I, s:b, s:s, s:f, s:s}", "cpu_time",
                  round3(r->cpu_seconds), "max_rss_kb",
                  (json_int_t)r->max_rss_kib, "oom_killed", (int)r->oom_killed,
                  "policy", ep->name, "cpus",
                  (double)(ep->cpu_millis > 0 ? ep->cpu_millis : 1000) / 1000.0,
                  /* beyond the contract: how it ran (docs/SANDBOX.md) */
                  "mode", r->warm ? "warm" : "cold"));
    json_decref(prelude);
    return res;
}
