/*
 * result_store.c - the store of asynchronous execution results on disk
 * (see result_store.h; the result object itself is built by result.c).
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../common/log.h"
#include "result_store.h"

#define NAME_MAX_LEN (IPD_ID_MAX + 8) /* "<id>.json.tmp" */
#define WRITE_CHUNK (64 * 1024)

struct ipd_results {
    char *dir;  /* owned: <data-dir>/results */
    int datafd; /* owned: the data dir */
    int dirfd;  /* owned: results/ in it */
};

/* The file name of id ("<id>.json"), with suffix appended. */
static void file_name(const char *id, const char *suffix,
                      char out[NAME_MAX_LEN])
{
    snprintf(out, NAME_MAX_LEN, "%s.json%s", id, suffix);
}

enum ipd_err ipd_results_open(const char *data_dir, struct ipd_results **out)
{
    struct ipd_results *rs = ipd_xcalloc(1, sizeof(*rs));
    enum ipd_err rc = IPD_ERR_INTERNAL;
    int dd;

    *out = NULL;
    rs->dirfd = -1;
    rs->dir = ipd_xmalloc(strlen(data_dir) + sizeof("/results"));
    snprintf(rs->dir, strlen(data_dir) + sizeof("/results"), "%s/results",
             data_dir);
    rs->datafd = open(data_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    dd = rs->datafd;
    if (dd < 0)
        goto out;
    /* Results do not survive a restart: whatever a crash left is
     * removed, not served. */
    if (ipd_remove_tree_at(dd, "results") && errno != ENOENT)
        goto out;
    if (mkdirat(dd, "results", 0700) && errno != EEXIST)
        goto out;
    rs->dirfd =
        openat(dd, "results", O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
    if (rs->dirfd < 0)
        goto out;
    rc = IPD_OK;
out:
    if (rc)
        ipd_error("results: %s: %s", rs->dir, strerror(errno));
    if (rc)
        ipd_results_free(rs);
    else
        *out = rs;
    return rc;
}

void ipd_results_free(struct ipd_results *rs)
{
    if (!rs)
        return;
    if (rs->dirfd >= 0) {
        close(rs->dirfd);
        /* Forgotten at a stop: nothing of them stays on disk. */
        if (ipd_remove_tree_at(rs->datafd, "results"))
            ipd_warn("results: removing %s: %s", rs->dir, strerror(errno));
    }
    if (rs->datafd >= 0)
        close(rs->datafd);
    free(rs->dir);
    free(rs);
}

/* jansson's dump goes through a buffer: its callback sees every token. */
struct writer {
    int fd;
    char buf[WRITE_CHUNK];
    size_t len;
    int64_t total;
    enum ipd_err rc;
};

static int writer_flush(struct writer *w)
{
    if (!w->rc && w->len)
        w->rc = ipd_write_all(w->fd, w->buf, w->len);
    w->total += (int64_t)w->len;
    w->len = 0;
    return w->rc ? -1 : 0;
}

static int writer_add(const char *data, size_t len, void *ctx)
{
    struct writer *w = ctx;
    if (len > sizeof(w->buf) - w->len && writer_flush(w))
        return -1;
    if (len > sizeof(w->buf)) {
        w->rc = ipd_write_all(w->fd, data, len);
        w->total += (int64_t)len;
        return w->rc ? -1 : 0;
    }
    memcpy(w->buf + w->len, data, len);
    w->len += len;
    return 0;
}

enum ipd_err ipd_results_write(struct ipd_results *rs, const char *id,
                               const json_t *result, int64_t *bytes)
{
    char tmp[NAME_MAX_LEN], name[NAME_MAX_LEN];
    struct writer *w = ipd_xcalloc(1, sizeof(*w));
    enum ipd_err rc = IPD_OK;

    file_name(id, ".tmp", tmp);
    file_name(id, "", name);
    w->fd = openat(rs->dirfd, tmp,
                   O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (w->fd < 0) {
        rc = IPD_ERR_IO;
        goto out;
    }
    /* The flags of every JSON reply (reply.c), so GET serves the file's
     * bytes as they are. */
    if (json_dump_callback(result, writer_add, w,
                           JSON_COMPACT | JSON_ENSURE_ASCII |
                               JSON_REAL_PRECISION(12)) ||
        writer_flush(w))
        rc = w->rc ? w->rc : IPD_ERR_INTERNAL;
    if (close(w->fd) && !rc)
        rc = IPD_ERR_IO;
    w->fd = -1;
    /* Renamed once whole: a file under its name is always complete. */
    if (!rc && renameat(rs->dirfd, tmp, rs->dirfd, name))
        rc = IPD_ERR_IO;
out:
    if (rc) {
        ipd_error("results: writing %s/%s: %s", rs->dir, tmp,
                  rc == IPD_ERR_IO ? strerror(errno) : ipd_err_name(rc));
        unlinkat(rs->dirfd, tmp, 0);
    } else {
        *bytes = w->total;
    }
    free(w);
    return rc;
}

enum ipd_err ipd_results_open_file(struct ipd_results *rs, const char *id,
                                   int *fd, int64_t *len)
{
    char name[NAME_MAX_LEN];
    struct stat st;

    file_name(id, "", name);
    *fd = openat(rs->dirfd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (*fd < 0)
        return errno == ENOENT ? IPD_ERR_NOT_FOUND : IPD_ERR_IO;
    if (fstat(*fd, &st) || !S_ISREG(st.st_mode)) {
        close(*fd);
        *fd = -1;
        return IPD_ERR_IO;
    }
    *len = (int64_t)st.st_size;
    return IPD_OK;
}

char *ipd_results_path(struct ipd_results *rs, const char *id)
{
    size_t n = strlen(rs->dir) + 1 + NAME_MAX_LEN;
    char *p = ipd_xmalloc(n);
    snprintf(p, n, "%s/%s.json", rs->dir, id);
    return p;
}

void ipd_results_remove(struct ipd_results *rs, const char *id)
{
    char name[NAME_MAX_LEN];
    file_name(id, "", name);
    if (unlinkat(rs->dirfd, name, 0) && errno != ENOENT)
        ipd_warn("results: removing %s/%s: %s", rs->dir, name, strerror(errno));
}
