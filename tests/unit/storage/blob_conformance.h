/*
 * blob_conformance.h - the behaviour every blob.h backend must show:
 * streaming writes with SHA-256 and the sample, the size limit, commit,
 * abort leaving nothing, reads, deletes and listing; for the reconcile
 * job, the batched listing, stat, abandoned uploads and empty directories.
 * A backend's test calls blob_conformance_run(store) with a fresh, empty
 * store.
 */
#ifndef IPD_BLOB_CONFORMANCE_H
#define IPD_BLOB_CONFORMANCE_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test.h"

#include "service/common/util.h"
#include "storage/blob.h"

/* Read a whole blob through a reader (fd or stream) into a new buffer. */
static unsigned char *bc_read_all(struct ipd_blobs *b, const char *id,
                                  size_t *len)
{
    struct ipd_blob_reader *r = NULL;
    size_t cap = 1 << 16, n = 0;
    if (ipd_blob_open(b, id, &r))
        return NULL;
    unsigned char *buf = malloc(cap);
    int fd = ipd_blob_reader_take_fd(r);
    for (;;) {
        if (n == cap)
            buf = realloc(buf, cap *= 2);
        ssize_t got = fd >= 0 ? read(fd, buf + n, cap - n)
                              : ipd_blob_reader_read(r, buf + n, cap - n);
        if (got <= 0) {
            CHECK(got == 0);
            break;
        }
        n += (size_t)got;
    }
    if (fd >= 0)
        close(fd);
    ipd_blob_reader_free(r);
    *len = n;
    return buf;
}

static int bc_count(void *cls, const char *file_id, int64_t size)
{
    (void)file_id;
    (void)size;
    (*(int *)cls)++;
    return 0;
}

static int bc_blobs(struct ipd_blobs *b)
{
    int n = 0;
    CHECK_INT(ipd_blob_list(b, bc_count, &n), IPD_OK);
    return n;
}

static int64_t bc_incomplete(struct ipd_blobs *b)
{
    int64_t n = -1;
    CHECK_INT(ipd_blobs_count_incomplete(b, &n), IPD_OK);
    return n;
}

static void bc_write_commit_read_delete(struct ipd_blobs *b)
{
    struct ipd_blob_writer *w = NULL;
    char hex[IPD_SHA256_HEX], id[IPD_ID_MAX];
    const void *head = NULL, *tail = NULL;
    size_t head_len = 0, len = 0;

    CHECK_INT(ipd_blobs_ping(b), IPD_OK);
    ipd_id_new("file", id);
    REQUIRE(ipd_blob_writer_new(b, id, 100, &w) == IPD_OK);
    CHECK_INT(ipd_blob_writer_write(w, "ab", 2), IPD_OK);
    CHECK_INT(ipd_blob_writer_write(w, "c", 1), IPD_OK);
    CHECK_INT(ipd_blob_writer_size(w), 3);
    ipd_blob_writer_sample(w, &head, &head_len, &tail);
    CHECK_INT(head_len, 3);
    CHECK(memcmp(head, "abc", 3) == 0);
    CHECK(tail == NULL); /* fewer than 4 bytes */
    CHECK_INT(ipd_blob_writer_write(w, "defg", 4), IPD_OK);
    ipd_blob_writer_sample(w, &head, &head_len, &tail);
    REQUIRE(tail != NULL);
    CHECK(memcmp(tail, "defg", 4) == 0);
    /* In progress: a temporary file, or (GridFS) maybe nothing yet while
     * the first chunk fills in memory. */
    CHECK(bc_incomplete(b) <= 1);
    CHECK_INT(ipd_blob_writer_sha256(w, hex), IPD_OK);
    char want[IPD_SHA256_HEX];
    ipd_sha256_hex("abcdefg", 7, want);
    CHECK_STR(hex, want);
    CHECK_INT(ipd_blob_writer_commit(w), IPD_OK);
    CHECK_INT(bc_incomplete(b), 0);
    CHECK_INT(bc_blobs(b), 1);

    unsigned char *data = bc_read_all(b, id, &len);
    REQUIRE(data != NULL);
    CHECK_INT(len, 7);
    CHECK(memcmp(data, "abcdefg", 7) == 0);
    free(data);

    CHECK_INT(ipd_blob_delete(b, id), IPD_OK);
    CHECK_INT(ipd_blob_delete(b, id), IPD_ERR_NOT_FOUND);
    struct ipd_blob_reader *r = NULL;
    CHECK_INT(ipd_blob_open(b, id, &r), IPD_ERR_NOT_FOUND);
    CHECK_INT(ipd_blob_open(b, "../../etc/passwd", &r), IPD_ERR_NOT_FOUND);
    CHECK_INT(bc_blobs(b), 0);
}

static void bc_size_limit_and_abort(struct ipd_blobs *b)
{
    struct ipd_blob_writer *w = NULL;
    char id[IPD_ID_MAX];
    ipd_id_new("file", id);
    REQUIRE(ipd_blob_writer_new(b, id, 4, &w) == IPD_OK);
    CHECK_INT(ipd_blob_writer_write(w, "abcd", 4), IPD_OK);
    CHECK_INT(ipd_blob_writer_write(w, "e", 1), IPD_ERR_TOO_LARGE);
    CHECK_INT(ipd_blob_writer_size(w), 4);
    ipd_blob_writer_abort(w);
    CHECK_INT(bc_incomplete(b), 0);
    CHECK_INT(bc_blobs(b), 0);
    struct ipd_blob_reader *r = NULL;
    CHECK_INT(ipd_blob_open(b, id, &r), IPD_ERR_NOT_FOUND);
    ipd_blob_writer_abort(NULL);
}

/* A few MiB in uneven chunks: the stream and the hash see every byte. */
static void bc_large_stream(struct ipd_blobs *b)
{
    enum { SIZE = 3 * 1024 * 1024 + 12345 };
    struct ipd_blob_writer *w = NULL;
    char id[IPD_ID_MAX], hex[IPD_SHA256_HEX], want[IPD_SHA256_HEX];
    unsigned char *src = malloc(SIZE);
    size_t len = 0;
    for (size_t i = 0; i < SIZE; i++)
        src[i] = (unsigned char)(i * 131 + (i >> 9));
    ipd_id_new("file", id);
    REQUIRE(ipd_blob_writer_new(b, id, SIZE, &w) == IPD_OK);
    for (size_t off = 0, step = 1000; off < SIZE; off += step, step += 777) {
        size_t n = off + step > SIZE ? SIZE - off : step;
        CHECK_INT(ipd_blob_writer_write(w, src + off, n), IPD_OK);
    }
    CHECK_INT(ipd_blob_writer_sha256(w, hex), IPD_OK);
    CHECK_INT(ipd_blob_writer_commit(w), IPD_OK);
    ipd_sha256_hex(src, SIZE, want);
    CHECK_STR(hex, want);
    unsigned char *data = bc_read_all(b, id, &len);
    REQUIRE(data != NULL);
    CHECK_INT(len, SIZE);
    CHECK(memcmp(data, src, SIZE) == 0);
    free(data);
    free(src);
    CHECK_INT(ipd_blob_delete(b, id), IPD_OK);
}

/* Commit a blob of len bytes of c under a new id (into id). */
static void bc_put(struct ipd_blobs *b, char id[IPD_ID_MAX], size_t len, char c)
{
    struct ipd_blob_writer *w = NULL;
    char buf[256];
    memset(buf, c, sizeof(buf));
    ipd_id_new("file", id);
    IPD_ASSERT(len <= sizeof(buf));
    IPD_ASSERT(ipd_blob_writer_new(b, id, 1 << 20, &w) == IPD_OK);
    CHECK_INT(ipd_blob_writer_write(w, buf, len), IPD_OK);
    CHECK_INT(ipd_blob_writer_commit(w), IPD_OK);
}

/* Walk the store with batches of cap; each id seen goes to seen[] (at
 * most max), and every batch is at most cap.  Returns the count. */
static size_t bc_walk(struct ipd_blobs *b, size_t cap, char (*seen)[IPD_ID_MAX],
                      int64_t *sizes, size_t max)
{
    struct ipd_blob_iter *it = NULL;
    struct ipd_blob_info *batch = calloc(cap, sizeof(*batch));
    size_t total = 0, n = 0;
    CHECK_INT(ipd_blob_iter_new(b, &it), IPD_OK);
    for (int rounds = 0; it && rounds < 10000; rounds++) {
        CHECK_INT(ipd_blob_iter_next(it, batch, cap, &n), IPD_OK);
        CHECK(n <= cap);
        if (!n)
            break;
        for (size_t i = 0; i < n; i++, total++) {
            if (total < max) {
                memcpy(seen[total], batch[i].file_id, IPD_ID_MAX);
                sizes[total] = batch[i].size;
            }
        }
    }
    /* The end stays the end. */
    if (it) {
        CHECK_INT(ipd_blob_iter_next(it, batch, cap, &n), IPD_OK);
        CHECK_INT(n, 0);
    }
    ipd_blob_iter_free(it);
    free(batch);
    return total;
}

/* Index of id in ids[0..n), or -1. */
static int bc_index(char (*ids)[IPD_ID_MAX], size_t n, const char *id)
{
    for (size_t i = 0; i < n; i++)
        if (!strcmp(ids[i], id))
            return (int)i;
    return -1;
}

/* The batched listing sees each committed blob once with its size and
 * commit time, never an upload in progress; stat agrees. */
static void bc_iterate_and_stat(struct ipd_blobs *b)
{
    enum { N = 11 };
    char ids[N][IPD_ID_MAX], seen[N + 4][IPD_ID_MAX];
    int64_t sizes[N + 4];
    struct ipd_blob_info info;
    struct ipd_blob_writer *w = NULL;
    static char big[300 * 1024]; /* flushes a GridFS chunk */
    char pending[IPD_ID_MAX];
    int64_t t0 = ipd_now_ms();

    CHECK_INT(bc_walk(b, 4, seen, sizes, N + 4), 0);
    for (int i = 0; i < N; i++)
        bc_put(b, ids[i], (size_t)(10 + i), 'a');
    /* An upload in progress is no blob. */
    ipd_id_new("file", pending);
    REQUIRE(ipd_blob_writer_new(b, pending, sizeof(big), &w) == IPD_OK);
    CHECK_INT(ipd_blob_writer_write(w, big, sizeof(big)), IPD_OK);

    for (size_t cap = 1; cap <= N + 1; cap += 5) {
        memset(seen, 0, sizeof(seen));
        CHECK_INT(bc_walk(b, cap, seen, sizes, N + 4), N);
        for (int i = 0; i < N; i++) {
            int at = bc_index(seen, N, ids[i]);
            CHECK(at >= 0);
            if (at >= 0)
                CHECK_INT(sizes[at], 10 + i);
            /* Once only. */
            if (at >= 0)
                CHECK(bc_index(seen + at + 1, (size_t)(N - at - 1), ids[i]) <
                      0);
        }
    }
    for (int i = 0; i < N; i++) {
        memset(&info, 0, sizeof(info));
        CHECK_INT(ipd_blob_stat(b, ids[i], &info), IPD_OK);
        CHECK_STR(info.file_id, ids[i]);
        CHECK_INT(info.size, 10 + i);
        /* Commit times: the wall clock, to the second (GridFS). */
        CHECK(info.mtime_ms >= t0 - 2000 &&
              info.mtime_ms <= ipd_now_ms() + 2000);
    }
    CHECK_INT(ipd_blob_stat(b, pending, &info), IPD_ERR_NOT_FOUND);
    CHECK_INT(ipd_blob_stat(b, "file_nonexistent", &info), IPD_ERR_NOT_FOUND);
    CHECK_INT(ipd_blob_stat(b, "../../etc/passwd", &info), IPD_ERR_NOT_FOUND);
    CHECK_INT(ipd_blob_stat(b, "", &info), IPD_ERR_NOT_FOUND);

    /* Deleting what a batch returned before asking for the next (the
     * reconcile does) loses nothing still there. */
    struct ipd_blob_iter *it = NULL;
    struct ipd_blob_info batch[3];
    size_t n = 0, total = 0;
    REQUIRE(ipd_blob_iter_new(b, &it) == IPD_OK);
    for (;;) {
        CHECK_INT(ipd_blob_iter_next(it, batch, 3, &n), IPD_OK);
        if (!n)
            break;
        for (size_t i = 0; i < n; i++)
            CHECK_INT(ipd_blob_delete(b, batch[i].file_id), IPD_OK);
        total += n;
    }
    ipd_blob_iter_free(it);
    CHECK_INT(total, N);
    CHECK_INT(bc_walk(b, 4, seen, sizes, N + 4), 0);
    ipd_blob_writer_abort(w);
    ipd_blob_iter_free(NULL);
}

/* Uploads abandoned before the cut-off go; those written since stay. */
static void bc_reap_incomplete(struct ipd_blobs *b)
{
    struct ipd_blob_writer *w = NULL;
    static char big[300 * 1024];
    char id[IPD_ID_MAX], kept[IPD_ID_MAX];
    int64_t removed = -1;

    bc_put(b, kept, 5, 'k');
    ipd_id_new("file", id);
    REQUIRE(ipd_blob_writer_new(b, id, sizeof(big), &w) == IPD_OK);
    CHECK_INT(ipd_blob_writer_write(w, big, sizeof(big)), IPD_OK);
    CHECK_INT(bc_incomplete(b), 1);
    /* Written just now: an hour's cut-off keeps it. */
    CHECK_INT(ipd_blobs_reap_incomplete(b, ipd_now_ms() - 3600000, &removed),
              IPD_OK);
    CHECK_INT(removed, 0);
    CHECK_INT(bc_incomplete(b), 1);
    /* A cut-off in the future: everything is older.  The local store
     * still sees the writer alive (its flock) and keeps the file; GridFS
     * has no such signal and reaps it (as if the uploader had died an
     * hour ago). */
    bool local = !strcmp(ipd_blobs_backend(b), "local");
    CHECK_INT(ipd_blobs_reap_incomplete(b, ipd_now_ms() + 3600000, &removed),
              IPD_OK);
    CHECK_INT(removed, local ? 0 : 1);
    CHECK_INT(bc_incomplete(b), local ? 1 : 0);
    if (local) {
        ipd_blob_writer_abort(w);
        w = NULL;
        CHECK_INT(bc_incomplete(b), 0);
    }
    /* Committed blobs are never "incomplete". */
    CHECK_INT(ipd_blob_stat(b, kept, &(struct ipd_blob_info){0}), IPD_OK);
    CHECK_INT(ipd_blobs_reap_incomplete(b, ipd_now_ms() + 3600000, &removed),
              IPD_OK);
    CHECK_INT(removed, 0);
    ipd_blob_writer_abort(w);
    CHECK_INT(ipd_blob_delete(b, kept), IPD_OK);
}

/* Pruning empty directories leaves every blob readable, and commits
 * still work afterwards. */
static void bc_prune_dirs(struct ipd_blobs *b)
{
    char a[IPD_ID_MAX], c[IPD_ID_MAX], d[IPD_ID_MAX];
    int64_t removed = -1;
    size_t len = 0;

    bc_put(b, a, 3, 'a');
    bc_put(b, c, 4, 'c');
    CHECK_INT(ipd_blob_delete(b, a), IPD_OK);
    CHECK_INT(ipd_blobs_prune_dirs(b, &removed), IPD_OK);
    CHECK(removed >= 0);
    unsigned char *data = bc_read_all(b, c, &len);
    CHECK(data != NULL);
    CHECK_INT(len, 4);
    free(data);
    bc_put(b, d, 6, 'd');
    CHECK_INT(ipd_blob_stat(b, d, &(struct ipd_blob_info){0}), IPD_OK);
    CHECK_INT(ipd_blob_delete(b, c), IPD_OK);
    CHECK_INT(ipd_blob_delete(b, d), IPD_OK);
    CHECK_INT(ipd_blobs_prune_dirs(b, &removed), IPD_OK);
    CHECK_INT(bc_blobs(b), 0);
}

static void blob_conformance_run(struct ipd_blobs *b)
{
    bc_write_commit_read_delete(b);
    bc_size_limit_and_abort(b);
    bc_large_stream(b);
    bc_iterate_and_stat(b);
    bc_reap_incomplete(b);
    bc_prune_dirs(b);
}

#endif
