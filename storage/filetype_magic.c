/*
 * filetype_magic.c - the filetype.h adapter for libmagic: what the bytes
 * are.  The mapping to a category is the pure ipd_filetype_classify in
 * filetype.c; this file only asks libmagic and adds the two answers its
 * database (5.44) lacks.
 *
 * Threads: a magic_t is not thread-safe (it keeps its result, error and
 * scratch state inside), so each call needs a handle of its own.  We keep a
 * pool of handles handed out under a mutex, rather than one handle per
 * thread (a pthread key):
 *  - libmicrohttpd may run a thread per connection, and a per-thread handle
 *    would then pay magic_load (milliseconds, the whole database) for
 *    nearly every upload, where a pool loads it once per handle;
 *  - ipd_filetype_free can close every handle it made, where a key's
 *    destructor runs only when each thread exits;
 *  - one handle behind a mutex would serialise the detection of concurrent
 *    uploads (libmagic's text tests scan the whole 1 MiB sample), which a
 *    pool avoids.
 * A caller finding every handle busy waits for one to come back.
 *
 * Memory (issue 20 item 11): a handle costs the service about 11 MB of RSS
 * once it has answered for text: magic_load maps the 8 MB compiled
 * database privately per handle (about 7 MB of it becomes resident as the
 * tests read it: page cache, but counted in each mapping's RSS), and the
 * first text answer fills about 2-3 MB of libmagic's own caches.  The pool
 * used to grow a handle whenever more detections than ever before ran at
 * once (upload threads, fetch threads and execution workers all detect), so
 * a soak's RSS took an 11 MB step at a random time.  Now:
 *  - the pool is made whole by ipd_filetype_new, one handle per online CPU
 *    (at least 2, at most POOL_MAX): detection is CPU-bound, so handles
 *    beyond the cores only buy memory; and each handle answers one short
 *    text first, so its caches are filled at start, not hours later;
 *  - every handle loads the same read-only mapping of the compiled
 *    database (magic_load_buffers: libmagic uses the buffer in place), so
 *    the database is resident once, whatever the number of handles.  When
 *    the default path holds more than one compiled database or a text
 *    magic file with entries (which only magic_load can compile), each
 *    handle loads its own, as before.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <magic.h>

#include "filetype.h"

#define POOL_MAX 8
/* libmagic sees at most this much of the file.  Its tests look at the start
 * (and text tests at all of what they get); a file that is text for 1 MiB
 * and something else after is called text. */
#define SAMPLE_MAX (1024 * 1024)
/* A text magic file larger than this is taken to have entries. */
#define TEXT_MAGIC_MAX (64 * 1024)

struct ipd_filetype {
    pthread_mutex_t lock; /* guards the fields below */
    pthread_cond_t cond;  /* signalled when a handle goes back */
    magic_t idle[POOL_MAX];
    size_t n_idle; /* handles in idle[] */
    size_t n_open; /* handles that exist: idle and lent out */
    void *db;      /* the compiled database, mapped read-only once
                    * for every handle; NULL: each loads its own */
    size_t db_len;
};

/* True if the text magic file at path has no entries (only comments and
 * blank lines), as Debian's /etc/magic ships: skipping it changes nothing.
 * A file that cannot be read, or is large, counts as having entries. */
static bool text_magic_empty(const char *path)
{
    char line[512];
    bool empty = false;
    long size = 0;
    FILE *f = fopen(path, "re");

    if (!f)
        goto out;
    empty = true;
    while (empty && fgets(line, sizeof(line), f)) {
        size_t lead = strspn(line, " \t\r\n");
        size += (long)strlen(line);
        empty =
            size <= TEXT_MAGIC_MAX && (line[lead] == '\0' || line[lead] == '#');
    }
    empty = empty && !ferror(f);
out:
    if (f)
        fclose(f);
    return empty;
}

/* Map the compiled database of libmagic's default path (magic_getpath:
 * the MAGIC environment variable, else the built-in list) into ft->db, if
 * that path is one compiled database plus missing or entry-free parts;
 * else leave ft->db NULL. */
static void db_map(struct ipd_filetype *ft)
{
    const char *list = magic_getpath(NULL, 0);
    char *copy = list ? strdup(list) : NULL, *save = NULL, *part;
    char mgc[4096] = "";
    struct stat st;
    int fd = -1;
    bool ok = copy != NULL;

    for (part = copy ? strtok_r(copy, ":", &save) : NULL; ok && part;
         part = strtok_r(NULL, ":", &save)) {
        size_t len = strlen(part);
        bool is_mgc = len >= 4 && strcmp(part + len - 4, ".mgc") == 0;
        char cand[4096];
        /* libmagic tries PART.mgc first, then PART as text. */
        ok = (size_t)snprintf(cand, sizeof(cand), "%s%s", part,
                              is_mgc ? "" : ".mgc") < sizeof(cand);
        if (ok && stat(cand, &st) == 0 && S_ISREG(st.st_mode)) {
            ok = mgc[0] == '\0';
            memcpy(mgc, cand, sizeof(mgc));
        } else if (ok && stat(part, &st) == 0) {
            ok = S_ISREG(st.st_mode) && text_magic_empty(part);
        }
    }
    if (!ok || !mgc[0])
        goto out;
    fd = open(mgc, O_RDONLY | O_CLOEXEC);
    if (fd < 0 || fstat(fd, &st) != 0 || st.st_size <= 0)
        goto out;
    ft->db = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (ft->db == MAP_FAILED)
        ft->db = NULL;
    else
        ft->db_len = (size_t)st.st_size;
out:
    if (fd >= 0)
        close(fd);
    free(copy);
}

/* A new handle with the database loaded (ft's shared mapping, else the
 * default path) and its caches filled, or NULL. */
static magic_t handle_open(struct ipd_filetype *ft)
{
    size_t bytes_max = SAMPLE_MAX;
    void *bufs[1] = {ft->db};
    size_t lens[1] = {ft->db_len};
    /* MAGIC_ERROR: report errors as a NULL result rather than as text in
     * the answer.  No MAGIC_COMPRESS: never decompress untrusted input. */
    magic_t m = magic_open(MAGIC_MIME_TYPE | MAGIC_ERROR);
    if (!m)
        goto out;
    if ((ft->db ? magic_load_buffers(m, bufs, lens, 1) : magic_load(m, NULL)) !=
            0 ||
        magic_setparam(m, MAGIC_PARAM_BYTES_MAX, &bytes_max) != 0) {
        magic_close(m);
        m = NULL;
        goto out;
    }
    /* The first text answer fills libmagic's caches (about 2 MiB): pay it
     * now, at start, not at the first text upload. */
    (void)magic_buffer(m, "interpd\n", 8);
out:
    return m;
}

/* Borrow a handle: *out is lent to the caller until handle_release. */
static void handle_acquire(struct ipd_filetype *ft, magic_t *out)
{
    pthread_mutex_lock(&ft->lock);
    while (ft->n_idle == 0)
        pthread_cond_wait(&ft->cond, &ft->lock);
    *out = ft->idle[--ft->n_idle];
    pthread_mutex_unlock(&ft->lock);
}

static void handle_release(struct ipd_filetype *ft, magic_t m)
{
    pthread_mutex_lock(&ft->lock);
    IPD_ASSERT(ft->n_idle < POOL_MAX);
    ft->idle[ft->n_idle++] = m;
    pthread_cond_signal(&ft->cond);
    pthread_mutex_unlock(&ft->lock);
}

/* The pool's size: one handle per online CPU, at least 2, at most
 * POOL_MAX. */
static size_t pool_size(void)
{
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    return cpus < 2 ? 2 : cpus > POOL_MAX ? POOL_MAX : (size_t)cpus;
}

enum ipd_err ipd_filetype_new(struct ipd_filetype **out)
{
    enum ipd_err rc = IPD_OK;
    struct ipd_filetype *ft = ipd_xcalloc(1, sizeof(*ft));
    size_t want = pool_size();

    *out = NULL;
    IPD_ASSERT(pthread_mutex_init(&ft->lock, NULL) == 0);
    IPD_ASSERT(pthread_cond_init(&ft->cond, NULL) == 0);
    db_map(ft);
    /* Every handle now: a missing or broken database fails at startup,
     * and the pool's memory is all spent here (see the top of the file). */
    while (ft->n_open < want) {
        magic_t m = handle_open(ft);
        if (!m) {
            rc = IPD_ERR_INTERNAL;
            goto out;
        }
        ft->idle[ft->n_idle++] = m;
        ft->n_open++;
    }
    *out = ft;
    ft = NULL;
out:
    ipd_filetype_free(ft);
    return rc;
}

size_t ipd_filetype_handles(struct ipd_filetype *ft)
{
    size_t n;
    pthread_mutex_lock(&ft->lock);
    n = ft->n_open;
    pthread_mutex_unlock(&ft->lock);
    return n;
}

void ipd_filetype_free(struct ipd_filetype *ft)
{
    if (!ft)
        return;
    /* Every handle must be back: freeing during a detect is a bug. */
    IPD_ASSERT(ft->n_idle == ft->n_open);
    for (size_t i = 0; i < ft->n_idle; i++)
        magic_close(ft->idle[i]);
    /* After the handles: they point into it. */
    if (ft->db)
        munmap(ft->db, ft->db_len);
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

enum ipd_err ipd_filetype_detect_buf(struct ipd_filetype *ft, const void *head,
                                     size_t n, const void *tail, int64_t size,
                                     const char *filename,
                                     char mime[IPD_MIME_MAX],
                                     char file_type[IPD_FILE_TYPE_MAX])
{
    magic_t m = NULL;
    const char *answer = NULL;
    char magic[IPD_MIME_MAX] = "application/octet-stream";

    mime[0] = '\0';
    file_type[0] = '\0';
    handle_acquire(ft, &m);
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
                                 const char *filename, char mime[IPD_MIME_MAX],
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
