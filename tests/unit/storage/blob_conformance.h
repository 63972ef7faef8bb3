/*
 * blob_conformance.h - the behaviour every blob.h backend must show:
 * streaming writes with SHA-256 and the sample, the size limit, commit,
 * abort leaving nothing, reads, deletes and listing.  A backend's test
 * calls blob_conformance_run(store) with a fresh, empty store.
 */
#ifndef IPD_BLOB_CONFORMANCE_H
#define IPD_BLOB_CONFORMANCE_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test.h"

#include "service/util.h"
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

static void blob_conformance_run(struct ipd_blobs *b)
{
    bc_write_commit_read_delete(b);
    bc_size_limit_and_abort(b);
    bc_large_stream(b);
}

#endif
