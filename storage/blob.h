/*
 * blob.h - the bytes of stored files, behind one interface with two
 * backends: local disk (blob_local.c, the default) and GridFS
 * (blob_gridfs.c, for several nodes sharing one MongoDB).
 *
 * Local layout under <data-dir>/blobs/:
 *   tmp/<random>.part   uploads in progress (removed on abort, and at start)
 *   <xx>/<file_id>      committed blobs; xx = two characters of the id
 * GridFS: bucket "fs" (fs.files, fs.chunks) with _id = the file id.
 * Either way the place derives only from the file id, never from a user's
 * filename.
 *
 * Thread-safety: a struct ipd_blobs is shared; a writer or reader belongs
 * to one request at a time.
 */
#ifndef IPD_BLOB_H
#define IPD_BLOB_H

#include <stdint.h>
#include <sys/types.h>

#include "../service/common/crypto.h"
#include "../service/common/ipd.h"
#include "../service/common/util.h"

/* How much of an upload's beginning a writer keeps for content sniffing. */
#define IPD_BLOB_HEAD_MAX (256 * 1024)

struct ipd_blobs;
struct ipd_blob_writer;
struct ipd_blob_reader;
struct ipd_blob_iter;
struct ipd_mongo;

/* Open (creating) the local store under data_dir/blobs and remove stale
 * temporary files.  *out is new; free with ipd_blobs_free. */
enum ipd_err ipd_blobs_open_local(const char *data_dir, struct ipd_blobs **out);
/* The GridFS store on mg (borrowed; must outlive the store). */
enum ipd_err ipd_blobs_open_gridfs(struct ipd_mongo *mg,
                                   struct ipd_blobs **out);
void ipd_blobs_free(struct ipd_blobs *b); /* NULL is fine */
const char *
ipd_blobs_backend(const struct ipd_blobs *b); /* "local", "gridfs" */
/* IPD_OK when the store can take writes (readiness). */
enum ipd_err ipd_blobs_ping(struct ipd_blobs *b);

/* Start an upload of at most max_size bytes that will belong to file_id.
 * *out is new; end it with ipd_blob_writer_commit or _abort. */
enum ipd_err ipd_blob_writer_new(struct ipd_blobs *b, const char *file_id,
                                 int64_t max_size,
                                 struct ipd_blob_writer **out);
/* Append; IPD_ERR_TOO_LARGE once the total would pass max_size (nothing of
 * that chunk is written), IPD_ERR_IO / IPD_ERR_UNAVAILABLE when the
 * backend fails. */
enum ipd_err ipd_blob_writer_write(struct ipd_blob_writer *w, const void *data,
                                   size_t len);
int64_t ipd_blob_writer_size(const struct ipd_blob_writer *w);
/* The first bytes written (up to IPD_BLOB_HEAD_MAX) and the last 4
 * (*tail NULL when fewer than 4 were written); borrowed, valid until
 * commit or abort. */
void ipd_blob_writer_sample(const struct ipd_blob_writer *w, const void **head,
                            size_t *head_len, const void **tail);
/* The SHA-256 of everything written; call once, after the last write.
 * IPD_ERR_IO when the bytes could not be read back to hash them. */
enum ipd_err ipd_blob_writer_sha256(struct ipd_blob_writer *w,
                                    char hex[IPD_SHA256_HEX]);
/* Make the bytes durable under the writer's file id and free w (also on
 * failure, after removing what was written). */
enum ipd_err ipd_blob_writer_commit(struct ipd_blob_writer *w);
/* Remove what was written and free w; NULL is fine. */
void ipd_blob_writer_abort(struct ipd_blob_writer *w);

/* Open a committed blob for reading.  *out is new (ipd_blob_reader_free).
 * IPD_ERR_NOT_FOUND when the bytes are missing. */
enum ipd_err ipd_blob_open(struct ipd_blobs *b, const char *file_id,
                           struct ipd_blob_reader **out);
/* For blobs that are plain local files: hand over the descriptor (the
 * caller now owns it and the reader no longer reads).  -1 otherwise. */
int ipd_blob_reader_take_fd(struct ipd_blob_reader *r);
/* Read up to n bytes: the count, 0 at the end, -1 on an error. */
ssize_t ipd_blob_reader_read(struct ipd_blob_reader *r, void *buf, size_t n);
void ipd_blob_reader_free(struct ipd_blob_reader *r); /* NULL is fine */

/* Remove a committed blob; IPD_ERR_NOT_FOUND when already gone. */
enum ipd_err ipd_blob_delete(struct ipd_blobs *b, const char *file_id);
/* Remove a blob that must not stay (its metadata is gone or was never
 * written).  Tries now; if the backend fails (a database down), the id is
 * queued and retried in the background with a backoff until it succeeds
 * or the store is freed (then the orphan reconcile job finds it). */
void ipd_blob_delete_later(struct ipd_blobs *b, const char *file_id);
/* The same with a first step: pre(cls, file_id) (e.g. delete the metadata
 * record a failed insert may still have written) must succeed (IPD_OK or
 * IPD_ERR_NOT_FOUND) before the bytes go; both are retried together.  cls
 * must outlive the store. */
void ipd_blob_delete_later_after(struct ipd_blobs *b, const char *file_id,
                                 enum ipd_err (*pre)(void *cls,
                                                     const char *file_id),
                                 void *cls);
/* Deletes waiting for a retry (status, tests). */
size_t ipd_blobs_pending_deletes(struct ipd_blobs *b);

/* Undo a stored file whose metadata insert failed with insert_rc: its
 * bytes go; when the failure leaves it unknown whether the record was
 * written (the database went away mid-call), the record goes first.
 * Retried in the background while the stores are down.  m must outlive b's
 * retries (free b first). */
struct ipd_meta;
void ipd_blob_undo_insert(struct ipd_blobs *b, struct ipd_meta *m,
                          const char *file_id, enum ipd_err insert_rc);

/* Call fn for every committed blob (orphan checks); stops early when fn
 * returns non-zero. */
enum ipd_err ipd_blob_list(struct ipd_blobs *b,
                           int (*fn)(void *cls, const char *file_id,
                                     int64_t size),
                           void *cls);
/* Uploads started and not finished (temporary files, open GridFS
 * uploads): tests and status. */
enum ipd_err ipd_blobs_count_incomplete(struct ipd_blobs *b, int64_t *n);

/* ---- Reconcile: listing and housekeeping ------------------------------ */

/* One committed blob.  Plain data. */
struct ipd_blob_info {
    char file_id[IPD_ID_MAX];
    int64_t size;     /* bytes */
    int64_t mtime_ms; /* when the bytes were committed, wall clock: the
                       * file's mtime (local), uploadDate (GridFS) */
};

/* What is known about the committed blob file_id.  IPD_ERR_NOT_FOUND when
 * there is none (an unfinished upload is none); other errors mean "could
 * not tell", never "missing".  [out] out */
enum ipd_err ipd_blob_stat(struct ipd_blobs *b, const char *file_id,
                           struct ipd_blob_info *out);

/*
 * Walk every committed blob in batches, for the orphan reconcile: the
 * iterator holds one directory handle (local) or the last id seen
 * (GridFS: each batch is one query on fs.files by _id after it), never
 * the whole listing, so memory stays bounded on big stores and no
 * server cursor lives between batches.  The order is the backend's
 * (directory order; GridFS: _id).  Blobs committed or deleted during the
 * walk may or may not be seen; every blob present for the whole walk is
 * seen exactly once.  Deleting the blobs of a batch before asking for the
 * next one is fine.
 *
 * ipd_blob_iter_new: *out is new; free with ipd_blob_iter_free (NULL is
 * fine).  ipd_blob_iter_next fills out[0..cap) and sets *n; *n == 0 means
 * the walk is over.  One thread uses an iterator at a time.
 */
enum ipd_err ipd_blob_iter_new(struct ipd_blobs *b, struct ipd_blob_iter **out);
enum ipd_err ipd_blob_iter_next(struct ipd_blob_iter *it,
                                struct ipd_blob_info *out, size_t cap,
                                size_t *n);
void ipd_blob_iter_free(struct ipd_blob_iter *it);

/* Remove uploads abandoned before older_than_ms (wall clock ms): local
 * temporary files not written since then, GridFS chunks without an
 * fs.files document whose newest chunk is older.  A live upload writes
 * continuously (and the connection timeout ends a stalled one), so a
 * cut-off an hour back never touches one.  Locally, a temporary file
 * whose writer is alive (in any process: it holds an flock) is never
 * removed, old or not, and neither by opening the store.  [out] *removed:
 * uploads removed. */
enum ipd_err ipd_blobs_reap_incomplete(struct ipd_blobs *b,
                                       int64_t older_than_ms, int64_t *removed);
/* Remove empty directories of the store (local: the two-character
 * directories blobs end up in; GridFS has none: *removed = 0).  Safe
 * against commits into the same directory at the same time, in this
 * process or another (local: an flock on the store keeps a commit's
 * mkdir and rename together).  [out] *removed: directories removed. */
enum ipd_err ipd_blobs_prune_dirs(struct ipd_blobs *b, int64_t *removed);

#endif
