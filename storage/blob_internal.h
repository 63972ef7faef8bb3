/*
 * blob_internal.h - what blob.c and the blob backends share.
 */
#ifndef IPD_BLOB_INTERNAL_H
#define IPD_BLOB_INTERNAL_H

#include "../service/common/util.h"
#include "blob.h"

struct ipd_blobs_ops {
    const char *name;
    void (*free)(struct ipd_blobs *b);
    enum ipd_err (*ping)(struct ipd_blobs *b);
    /* NULL, or IPD_ERR_UNAVAILABLE at once while the backend is known to
     * be down (blob.c checks it before writes, reads and deletes). */
    enum ipd_err (*gate)(struct ipd_blobs *b);
    /* Allocate the backend's writer (embedding struct ipd_blob_writer
     * first) and start storing; the common fields are set by blob.c. */
    enum ipd_err (*writer_new)(struct ipd_blobs *b, const char *file_id,
                               struct ipd_blob_writer **out);
    enum ipd_err (*write)(struct ipd_blob_writer *w, const void *data,
                          size_t len);
    enum ipd_err (*commit)(struct ipd_blob_writer *w);
    void (*abort)(struct ipd_blob_writer *w); /* removes and frees */
    enum ipd_err (*open)(struct ipd_blobs *b, const char *file_id,
                         struct ipd_blob_reader **out);
    int (*take_fd)(struct ipd_blob_reader *r);
    ssize_t (*read)(struct ipd_blob_reader *r, void *buf, size_t n);
    void (*reader_free)(struct ipd_blob_reader *r);
    enum ipd_err (*del)(struct ipd_blobs *b, const char *file_id);
    enum ipd_err (*list)(struct ipd_blobs *b,
                         int (*fn)(void *cls, const char *file_id,
                                   int64_t size),
                         void *cls);
    enum ipd_err (*count_incomplete)(struct ipd_blobs *b, int64_t *n);
    /* Reconcile (blob.h); a backend without them answers
     * IPD_ERR_INTERNAL through blob.c (prune_dirs: nothing to do). */
    enum ipd_err (*stat)(struct ipd_blobs *b, const char *file_id,
                         struct ipd_blob_info *out);
    /* Allocate the backend's iterator (embedding struct ipd_blob_iter
     * first); blob.c sets the common fields. */
    enum ipd_err (*iter_new)(struct ipd_blobs *b, struct ipd_blob_iter **out);
    enum ipd_err (*iter_next)(struct ipd_blob_iter *it,
                              struct ipd_blob_info *out, size_t cap, size_t *n);
    void (*iter_free)(struct ipd_blob_iter *it);
    enum ipd_err (*reap_incomplete)(struct ipd_blobs *b, int64_t older_than_ms,
                                    int64_t *removed);
    enum ipd_err (*prune_dirs)(struct ipd_blobs *b, int64_t *removed);
};

struct ipd__blob_retry; /* deletes to retry (blob.c) */

struct ipd_blobs {
    const struct ipd_blobs_ops *ops;
    struct ipd__blob_retry *retry; /* NULL until a delete must be retried */
};

/* Backends call this on their new store before returning it. */
void ipd__blobs_init(struct ipd_blobs *b, const struct ipd_blobs_ops *ops);

/* Common writer state; backends embed it first. */
struct ipd_blob_writer {
    struct ipd_blobs *blobs;
    char file_id[IPD_ID_MAX];
    int64_t size, max;
    struct ipd_sha256 *sha;
    unsigned char *head; /* first bytes, up to IPD_BLOB_HEAD_MAX */
    size_t head_len;
    unsigned char tail[4]; /* last 4 bytes */
    /* Set by a backend that computes the SHA-256 itself (it then fills
     * hex in its sha256 op); blob.c skips hashing. */
    enum ipd_err (*own_sha256)(struct ipd_blob_writer *w,
                               char hex[IPD_SHA256_HEX]);
};

struct ipd_blob_reader {
    struct ipd_blobs *blobs;
};

struct ipd_blob_iter {
    struct ipd_blobs *blobs;
};

/* Free the common writer state (backends call it from abort/commit). */
void ipd__blob_writer_release(struct ipd_blob_writer *w);

#endif
