/*
 * filetype_magic.c - the filetype.h adapter for libmagic: what the bytes
 * are.  The mapping to a category is the pure ipd_filetype_classify in
 * filetype.c; this file only asks libmagic and adds the two answers its
 * database (5.44) lacks.
 *
 * Threads: a magic_t is not thread-safe (it keeps its result, error and
 * scratch state inside), so each call needs a handle of its own.  We keep a
 * small pool of handles, created on demand up to POOL_MAX and handed out
 * under a mutex, rather than one handle per thread (a pthread key):
 *  - libmicrohttpd may run a thread per connection, and a per-thread handle
 *    would then pay magic_load (milliseconds, the whole database) for
 *    nearly every upload, where a pool loads it once per handle;
 *  - ipd_filetype_free can close every handle it made, where a key's
 *    destructor runs only when each thread exits;
 *  - one handle behind a mutex would serialise the detection of concurrent
 *    uploads (libmagic's text tests scan the whole 1 MiB sample), which a
 *    pool avoids.
 * A caller finding all POOL_MAX handles busy waits for one to come back.
 */
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <magic.h>

#include "filetype.h"

#define POOL_MAX 8
/* libmagic sees at most this much of the file.  Its tests look at the start
 * (and text tests at all of what they get); a file that is text for 1 MiB
 * and something else after is called text. */
#define SAMPLE_MAX (1024 * 1024)

struct ipd_filetype {
    pthread_mutex_t lock; /* guards the fields below */
    pthread_cond_t cond;  /* signalled when a handle goes back or dies */
    magic_t idle[POOL_MAX];
    size_t n_idle;        /* handles in idle[] */
    size_t n_open;        /* handles that exist: idle and lent out */
};

/* A new handle with the default database loaded, or NULL. */
static magic_t handle_open(void)
{
    size_t bytes_max = SAMPLE_MAX;
    /* MAGIC_ERROR: report errors as a NULL result rather than as text in
     * the answer.  No MAGIC_COMPRESS: never decompress untrusted input. */
    magic_t m = magic_open(MAGIC_MIME_TYPE | MAGIC_ERROR);
    if (!m)
        goto out;
    if (magic_load(m, NULL) != 0 ||
        magic_setparam(m, MAGIC_PARAM_BYTES_MAX, &bytes_max) != 0) {
        magic_close(m);
        m = NULL;
    }
out:
    return m;
}

/* Borrow a handle: *out is lent to the caller until handle_release. */
static enum ipd_err handle_acquire(struct ipd_filetype *ft, magic_t *out)
{
    enum ipd_err rc = IPD_OK;
    bool create = false;

    *out = NULL;
    pthread_mutex_lock(&ft->lock);
    while (ft->n_idle == 0 && ft->n_open >= POOL_MAX)
        pthread_cond_wait(&ft->cond, &ft->lock);
    if (ft->n_idle) {
        *out = ft->idle[--ft->n_idle];
    } else {
        ft->n_open++;
        create = true;
    }
    pthread_mutex_unlock(&ft->lock);
    if (!create)
        goto out;

    /* Outside the lock: loading the database takes milliseconds. */
    *out = handle_open();
    if (!*out) {
        pthread_mutex_lock(&ft->lock);
        ft->n_open--;
        pthread_cond_signal(&ft->cond);
        pthread_mutex_unlock(&ft->lock);
        rc = IPD_ERR_INTERNAL;
    }
out:
    return rc;
}

static void handle_release(struct ipd_filetype *ft, magic_t m)
{
    pthread_mutex_lock(&ft->lock);
    IPD_ASSERT(ft->n_idle < POOL_MAX);
    ft->idle[ft->n_idle++] = m;
    pthread_cond_signal(&ft->cond);
    pthread_mutex_unlock(&ft->lock);
}

enum ipd_err ipd_filetype_new(struct ipd_filetype **out)
{
    enum ipd_err rc = IPD_OK;
    struct ipd_filetype *ft = ipd_xcalloc(1, sizeof(*ft));
    magic_t m = NULL;

    *out = NULL;
    IPD_ASSERT(pthread_mutex_init(&ft->lock, NULL) == 0);
    IPD_ASSERT(pthread_cond_init(&ft->cond, NULL) == 0);
    /* Load one handle now, so a missing or broken database fails at
     * startup rather than on the first upload. */
    rc = handle_acquire(ft, &m);
    if (rc)
        goto out;
    handle_release(ft, m);
    *out = ft;
    ft = NULL;
out:
    ipd_filetype_free(ft);
    return rc;
}

void ipd_filetype_free(struct ipd_filetype *ft)
{
    if (!ft)
        return;
    /* Every handle must be back: freeing during a detect is a bug. */
    IPD_ASSERT(ft->n_idle == ft->n_open);
    for (size_t i = 0; i < ft->n_idle; i++)
        magic_close(ft->idle[i]);
    pthread_cond_destroy(&ft->cond);
    pthread_mutex_destroy(&ft->lock);
    free(ft);
}

/* pread up to max bytes from offset off; *got < max only at end of file. */
static enum ipd_err read_at(int fd, unsigned char *buf, size_t max, off_t off,
                            size_t *got)
{
    enum ipd_err rc = IPD_OK;
    size_t n = 0;

    while (n < max) {
        ssize_t r = pread(fd, buf + n, max - n, off + (off_t)n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            rc = IPD_ERR_IO;
            goto out;
        }
        if (r == 0)
            break;
        n += (size_t)r;
    }
out:
    *got = n;
    return rc;
}

/* Parquet starts and ends with "PAR1"; libmagic 5.44 does not know it.
 * tail is the file's last 4 bytes (NULL when unknown). */
static bool is_parquet(const unsigned char *head, size_t n,
                       const unsigned char *tail, int64_t size)
{
    /* Header magic, at least a footer length, footer magic. */
    return n >= 4 && memcmp(head, "PAR1", 4) == 0 && tail && size >= 12 &&
           memcmp(tail, "PAR1", 4) == 0;
}

/*
 * Second opinions where libmagic says only application/octet-stream:
 *  - a zip local header: libmagic's "Microsoft OOXML" fallback entry (a zip
 *    whose first entry is [Content_Types].xml but whose xl/, word/ or ppt/
 *    entry is not where it looks) has no MIME type, and older databases
 *    answer octet-stream for it; it is a zip, which the extension may then
 *    refine to excel;
 *  - Parquet.
 * Both only ever make binary content more specific, never text.
 */
static void second_opinion(const unsigned char *head, size_t n,
                           const unsigned char *tail, int64_t size,
                           char magic[IPD_MIME_MAX])
{
    if (strcmp(magic, "application/octet-stream") != 0)
        return;
    if (n >= 4 && memcmp(head, "PK\003\004", 4) == 0)
        memcpy(magic, "application/zip", sizeof("application/zip"));
    else if (is_parquet(head, n, tail, size))
        memcpy(magic, "application/vnd.apache.parquet",
               sizeof("application/vnd.apache.parquet"));
}

enum ipd_err ipd_filetype_detect_buf(struct ipd_filetype *ft,
                                     const void *head, size_t n,
                                     const void *tail, int64_t size,
                                     const char *filename,
                                     char mime[IPD_MIME_MAX],
                                     char file_type[IPD_FILE_TYPE_MAX])
{
    magic_t m = NULL;
    const char *answer = NULL;
    char magic[IPD_MIME_MAX] = "application/octet-stream";

    mime[0] = '\0';
    file_type[0] = '\0';
    enum ipd_err rc = handle_acquire(ft, &m);
    if (rc)
        return rc;
    answer = magic_buffer(m, head, n);
    /* The answer lives in the handle until its next call: copy it before
     * the handle goes back.  No answer (libmagic failed on these bytes)
     * counts as unknown content, so it is "binary", never a failed upload. */
    if (answer && strlen(answer) < sizeof(magic))
        memcpy(magic, answer, strlen(answer) + 1);
    handle_release(ft, m);
    second_opinion(head, n, tail, size, magic);
    ipd_filetype_classify(magic, filename, mime, file_type);
    return IPD_OK;
}

enum ipd_err ipd_filetype_detect(struct ipd_filetype *ft, int fd,
                                 const char *filename,
                                 char mime[IPD_MIME_MAX],
                                 char file_type[IPD_FILE_TYPE_MAX])
{
    enum ipd_err rc = IPD_OK;
    unsigned char *buf = NULL, tail[4];
    size_t n = 0, got = 0;
    struct stat st;

    mime[0] = '\0';
    file_type[0] = '\0';
    /* Our own buffer and pread: the caller's offset stays where it was,
     * and libmagic never sees (or closes) the descriptor. */
    buf = ipd_xmalloc(SAMPLE_MAX);
    rc = read_at(fd, buf, SAMPLE_MAX, 0, &n);
    if (rc)
        goto out;
    if (fstat(fd, &st) != 0) {
        rc = IPD_ERR_IO;
        goto out;
    }
    if (st.st_size >= 4) {
        rc = read_at(fd, tail, sizeof(tail), st.st_size - 4, &got);
        if (rc)
            goto out;
    }
    rc = ipd_filetype_detect_buf(ft, buf, n, got == sizeof(tail) ? tail : NULL,
                                 st.st_size, filename, mime, file_type);
out:
    free(buf);
    return rc;
}
