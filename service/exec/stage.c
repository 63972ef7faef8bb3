/*
 * stage.c - one run's stage (sandbox.h ipd_sandbox_stage: as root a tmpfs
 * that is never attached on the host) and the job written into it: job/
 * (code.py, files.json, variables.json, and display.json from the stage's
 * creation on), data/<file_id>/<filename>
 * (copies of the user's files) and interpd/ (a copy of the prelude dir's
 * files), bound read-only at /mnt/job, /mnt/data and /opt/interpd.
 *
 * Nothing is written to the data dir or any other host dir for a run, so
 * the data dir stays 0700 with 0600 files, and the run's
 * /proc/self/mountinfo shows "/job", "/data", "/interpd" rather than host
 * paths or the execution id.  Directories are 0755 and files 0644, owned
 * by the service: the run's unprivileged host uid reads them.  The input
 * files' bytes are in memory (the service's, swappable) while the run
 * lasts; the stage goes with it.  GridFS blobs (no fd) are copied through
 * the reader and checked against the metadata's sha256.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include "../common/live.h"
#include "../common/log.h"
#include "../common/util.h"
#include "exec_internal.h"
#include "request.h"

/* Create name in dirfd (must not exist), mode 0644 whatever the umask. */
enum ipd_err ipd__write_file_at(int dirfd, const char *name, const void *data,
                                size_t len)
{
    enum ipd_err rc = IPD_ERR_IO;
    int fd = openat(dirfd, name,
                    O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0)
        goto out;
    if (fchmod(fd, 0644))
        goto out;
    rc = ipd_write_all(fd, data, len);
out:
    if (fd >= 0)
        close(fd);
    return rc;
}

/* mkdirat + open, with an exact mode.  Returns the dir fd or -1. */
int ipd__mkdir_open_at(int dirfd, const char *name, mode_t mode)
{
    int fd;
    if (mkdirat(dirfd, name, mode) && errno != EEXIST)
        return -1;
    fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd >= 0 && fchmod(fd, mode)) {
        close(fd);
        fd = -1;
    }
    return fd;
}

/* A blob without an fd (GridFS): copy through the reader, hash it. */
static enum ipd_err copy_reader(struct ipd_blob_reader *rd, int ofd,
                                int64_t limit, int64_t *copied,
                                char hex[IPD_SHA256_HEX])
{
    char buf[IPD__COPY_CHUNK];
    struct ipd_sha256 *h = ipd_sha256_new();
    enum ipd_err rc = IPD_ERR_IO;
    *copied = 0;
    for (;;) {
        ssize_t n = ipd_blob_reader_read(rd, buf, sizeof(buf));
        if (n < 0)
            goto out;
        if (n == 0)
            break;
        *copied += n;
        if (*copied > limit)
            goto out;
        ipd_sha256_update(h, buf, (size_t)n);
        if (ipd_write_all(ofd, buf, (size_t)n))
            goto out;
    }
    ipd_sha256_final(h, hex);
    rc = IPD_OK;
out:
    ipd_sha256_free(h);
    return rc;
}

/* data/<file_id>/<filename> in the run's stage, a 0644 copy of the
 * blob owned by the service. */
static enum ipd_err stage_file(struct ipd_executor *ex, int data_fd,
                               const struct ipd_file_meta *f,
                               struct ipd_buf *detail)
{
    struct ipd_blob_reader *rd = NULL;
    int dfd = -1, ofd = -1, in = -1;
    int64_t copied = 0;
    char hex[IPD_SHA256_HEX] = "";
    enum ipd_err rc = IPD_ERR_INTERNAL;

    /* Sanitised names never hold '/', but this is a host path. */
    if (strchr(f->filename, '/') || !strcmp(f->filename, ".") ||
        !strcmp(f->filename, "..") || !f->filename[0])
        goto out;
    dfd = ipd__mkdir_open_at(data_fd, f->file_id, 0755);
    if (dfd < 0 && errno == EEXIST) {
        rc = IPD_OK; /* already staged */
        goto out;
    }
    if (dfd < 0)
        goto out;
    ofd = openat(dfd, f->filename,
                 O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (ofd < 0 || fchmod(ofd, 0644))
        goto out;
    rc = ipd_blob_open(ex->blobs, f->file_id, &rd);
    if (rc == IPD_ERR_NOT_FOUND)
        rc = IPD_ERR_INTERNAL; /* metadata without bytes */
    if (rc) {
        if (detail)
            ipd_buf_addf(detail, "the bytes of file %s can't be read",
                         f->file_id);
        goto out;
    }
    in = ipd_blob_reader_take_fd(rd);
    if (in >= 0) {
        rc = ipd_copy_fd(in, ofd, &copied);
    } else {
        rc = copy_reader(rd, ofd, f->size, &copied, hex);
        if (!rc && strcmp(hex, f->sha256)) {
            ipd_error("executor: blob %s does not match its sha256",
                      f->file_id);
            rc = IPD_ERR_INTERNAL;
        }
    }
    if (!rc && copied != f->size) {
        ipd_error("executor: blob %s has %lld bytes, metadata says %lld",
                  f->file_id, (long long)copied, (long long)f->size);
        rc = IPD_ERR_INTERNAL;
    }
    if (rc && detail && !detail->len)
        ipd_buf_addf(detail, "file %s could not be prepared", f->file_id);
out:
    if (in >= 0)
        close(in);
    ipd_close_fd(&ofd);
    ipd_close_fd(&dfd);
    ipd_blob_reader_free(rd);
    return rc;
}

static json_t *file_entry(const struct ipd_file_meta *f)
{
    char path[IPD_FILENAME_MAX + IPD_ID_MAX + 16];
    snprintf(path, sizeof(path), "/mnt/data/%s/%s", f->file_id, f->filename);
    return json_pack("{s:s, s:s, s:s, s:s, s:s, s:I}", "file_id", f->file_id,
                     "filename", f->filename, "path", path, "file_type",
                     f->file_type, "mime_type", f->mime_type, "size",
                     (json_int_t)f->size);
}

static enum ipd_err write_json_at(int dirfd, const char *name,
                                  const json_t *doc)
{
    char *text = json_dumps(doc, JSON_COMPACT | JSON_ENSURE_ASCII);
    enum ipd_err rc = IPD_ERR_INTERNAL;
    if (text)
        rc = ipd__write_file_at(dirfd, name, text, strlen(text));
    free(text);
    return rc;
}

/* Look up every file of rq in the caller's scope into fs (rq->n_files
 * of them at most; duplicates once): *n of them, *total bytes. */
static enum ipd_err lookup_files(struct ipd_executor *ex,
                                 const struct ipd_exec_request *rq,
                                 struct ipd_file_meta *fs, size_t *n,
                                 int64_t *total, struct ipd_buf *detail)
{
    int64_t now = ipd_now_ms();

    *n = 0;
    *total = 0;
    for (size_t i = 0; i < rq->n_files; i++) {
        bool dup = false;
        const char *id = rq->file_ids[i];
        for (size_t j = 0; j < i; j++)
            dup = dup || !strcmp(rq->file_ids[j], id);
        if (dup)
            continue;
        enum ipd_err rc = ipd_id_valid("file", id)
                              ? ipd_meta_file_get(ex->meta, rq->tenant,
                                                  rq->user_id, id, now, &fs[*n])
                              : IPD_ERR_NOT_FOUND;
        if (rc == IPD_ERR_NOT_FOUND && detail)
            ipd_buf_addf(detail, "file %.64s not found", id);
        if (rc)
            return rc;
        *total += fs[(*n)++].size;
    }
    return IPD_OK;
}

enum ipd_err ipd__stage_check_files(struct ipd_executor *ex,
                                    const struct ipd_exec_request *rq,
                                    struct ipd_buf *detail)
{
    struct ipd_file_meta *fs =
        ipd_xcalloc(rq->n_files ? rq->n_files : 1, sizeof(*fs));
    size_t n = 0;
    int64_t total = 0;
    enum ipd_err rc = lookup_files(ex, rq, fs, &n, &total, detail);
    free(fs);
    return rc;
}

/* Look up every file in the caller's scope; when they total at most limit
 * bytes (0: no limit), copy them and write files.json.  Over the limit
 * nothing is copied: IPD_ERR_TOO_LARGE. */
static enum ipd_err stage_files(struct ipd_executor *ex,
                                const struct ipd_exec_request *rq, int job_fd,
                                int data_fd, int64_t limit,
                                struct ipd_buf *detail)
{
    struct ipd_file_meta *fs =
        ipd_xcalloc(rq->n_files ? rq->n_files : 1, sizeof(*fs));
    json_t *list = json_array();
    size_t n = 0;
    int64_t total = 0;
    enum ipd_err rc = lookup_files(ex, rq, fs, &n, &total, detail);

    if (!rc && limit > 0 && total > limit) {
        if (detail)
            ipd_buf_addf(detail,
                         "the files of this call total %lld bytes; "
                         "a session's call may stage at most its "
                         "policy's memory (%lld bytes)",
                         (long long)total, (long long)limit);
        rc = IPD_ERR_TOO_LARGE;
    }
    for (size_t i = 0; !rc && i < n; i++) {
        rc = stage_file(ex, data_fd, &fs[i], detail);
        if (!rc)
            json_array_append_new(list, file_entry(&fs[i]));
    }
    if (!rc)
        rc = write_json_at(job_fd, "files.json", list);
    json_decref(list);
    free(fs);
    return rc;
}

/* Copy the regular files of the prelude dir into the stage's interpd/
 * (each run gets the prelude as it is on disk now, as a bind did). */
static enum ipd_err copy_prelude(const struct ipd_executor *ex, int to)
{
    int from = open(ex->prelude_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR *d = ipd_fdopendir(from);
    struct dirent *e;
    enum ipd_err rc = d ? IPD_OK : IPD_ERR_IO;

    while (!rc && (e = ipd_readdir(d)) != NULL) {
        struct stat st;
        int64_t copied;
        int in, out;
        if (fstatat(dirfd(d), e->d_name, &st, 0) || !S_ISREG(st.st_mode))
            continue;
        in = openat(dirfd(d), e->d_name, O_RDONLY | O_CLOEXEC);
        out =
            openat(to, e->d_name,
                   O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
        rc = in < 0 || out < 0 || fchmod(out, 0644)
                 ? IPD_ERR_IO
                 : ipd_copy_fd(in, out, &copied);
        if (in >= 0)
            close(in);
        if (out >= 0)
            close(out);
    }
    if (d)
        closedir(d);
    return rc;
}

/* job/display.json, {"inline_image_max": bytes}: the budget of the
 * result's display images (result.c collect_display), so that the prelude
 * saves a shown figure that would not fit as a file instead of showing
 * it (prelude_lib.py _show_figure).  The same for every run of the
 * executor, so it is written once per stage: a warm child's, a session's
 * for all its calls (clear_call leaves it), a cold run's. */
static enum ipd_err write_display_limits(const struct ipd_executor *ex,
                                         int job_fd)
{
    char text[64];
    int n = snprintf(text, sizeof(text), "{\"inline_image_max\": %lld}\n",
                     (long long)(ex->inline_max > 0 ? ex->inline_max : 0));
    IPD_ASSERT(n > 0 && (size_t)n < sizeof(text));
    return ipd__write_file_at(job_fd, "display.json", text, (size_t)n);
}

/* The run's stage with job/, data/ and interpd/ (the prelude).  Its
 * size is a limit, not a reservation: every input file at the largest
 * size, and room for the job. */
enum ipd_err ipd__run_stage_create(struct ipd_executor *ex,
                                   struct ipd__run_stage *wk, const char *id,
                                   uid_t host_uid, struct ipd_buf *why)
{
    char err[256];
    int fd, dir = -1;
    int64_t files = IPD_EXEC_FILES_MAX; /* a stage holds at most these */
    int64_t bytes =
        (files + 1) *
        (ex->max_file_size > (16LL << 20) ? ex->max_file_size : (16LL << 20));

    wk->job_fd = wk->data_fd = -1;
    wk->host_uid = host_uid;
    ipd__exec_id(id, wk->id);
    if (ipd_sandbox_stage_new(bytes, 4 * files + 64, NULL, &wk->stage, err,
                              sizeof(err))) {
        ipd_buf_addf(why, "%s", err);
        return IPD_ERR_INTERNAL;
    }
    fd = ipd_sandbox_stage_fd(wk->stage);
    wk->job_fd = ipd__mkdir_open_at(fd, "job", 0755);
    wk->data_fd = ipd__mkdir_open_at(fd, "data", 0755);
    dir = ipd__mkdir_open_at(fd, "interpd", 0755);
    if (wk->job_fd < 0 || wk->data_fd < 0 || dir < 0) {
        ipd_buf_addf(why, "mkdir: %s", strerror(errno));
        ipd_close_fd(&dir);
        return IPD_ERR_INTERNAL;
    }
    if (copy_prelude(ex, dir)) {
        ipd_buf_addf(why, "copying the prelude from %s: %s", ex->prelude_dir,
                     strerror(errno));
        ipd_close_fd(&dir);
        return IPD_ERR_INTERNAL;
    }
    ipd_close_fd(&dir);
    if (write_display_limits(ex, wk->job_fd)) {
        ipd_buf_addf(why, "writing job/display.json: %s", strerror(errno));
        return IPD_ERR_INTERNAL;
    }
    return IPD_OK;
}

void ipd__run_stage_remove(struct ipd__run_stage *wk)
{
    ipd_close_fd(&wk->job_fd);
    ipd_close_fd(&wk->data_fd);
    ipd_sandbox_stage_free(wk->stage);
    wk->stage = NULL;
}

/* A streamed run's calls to its client (docs/API.md "Calls"): enabled
 * on its live channel within ep's limits, and job/calls.json for the
 * prelude, {"functions": [names], "max_bytes", "max_in_flight"}. */
static enum ipd_err stage_calls(const struct ipd_executor *ex,
                                const struct ipd_exec_policy *ep,
                                const struct ipd_exec_request *rq, int job_fd)
{
    if (!ipd_live_streamed(rq->live))
        return IPD_OK;
    struct ipd_live_call_limits lim = {
        .max_bytes = (size_t)ep->call_bytes,
        .max_calls = (unsigned)ep->calls,
        .max_in_flight = (unsigned)ep->calls_in_flight,
        .call_timeout_ms = ep->call_timeout_ms,
        .max_wait_ms = ep->max_call_wait_ms,
    };
    ipd__live_display(ex, ep, rq->live, &lim);
    ipd_live_calls_enable(rq->live, &lim);
    json_t *doc =
        json_pack("{s:o, s:I, s:I}", "functions",
                  rq->functions ? json_copy((json_t *)(uintptr_t)rq->functions)
                                : json_array(),
                  "max_bytes", (json_int_t)ep->call_bytes, "max_in_flight",
                  (json_int_t)ep->calls_in_flight);
    enum ipd_err rc = write_json_at(job_fd, "calls.json", doc);
    json_decref(doc);
    return rc;
}

/* Write the request's job into the staging; its files total at most
 * files_max bytes (0: no limit). */
enum ipd_err ipd__stage_job(struct ipd_executor *ex,
                            const struct ipd_exec_request *rq,
                            const struct ipd_exec_policy *ep,
                            struct ipd__run_stage *wk, int64_t files_max,
                            struct ipd_buf *detail)
{
    enum ipd_err rc = ipd__write_file_at(
        wk->job_fd, "code.py", rq->code ? rq->code : "", rq->code_len);
    if (!rc && rq->variables)
        rc = write_json_at(wk->job_fd, "variables.json", rq->variables);
    if (!rc)
        rc = stage_calls(ex, ep, rq, wk->job_fd);
    if (!rc)
        rc = stage_files(ex, rq, wk->job_fd, wk->data_fd, files_max, detail);
    return rc;
}
