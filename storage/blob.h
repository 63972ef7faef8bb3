/*
 * blob.h - the bytes of stored files, on local disk.
 *
 * Layout under <data-dir>/blobs/:
 *   tmp/<random>.part   uploads in progress (removed on abort, and at start)
 *   <xx>/<file_id>      committed blobs; xx = two characters of the id
 * Paths derive only from the file id, never from a user's filename.
 *
 * Thread-safety: a struct ipd_blobs is shared; a writer belongs to one
 * request at a time.
 */
#ifndef IPD_BLOB_H
#define IPD_BLOB_H

#include <stdint.h>

#include "../service/crypto.h"
#include "../service/ipd.h"

struct ipd_blobs;
struct ipd_blob_writer;

/* Open (creating) the store under dir/blobs and remove stale temporary
 * files.  *out is new; free with ipd_blobs_free. */
enum ipd_err ipd_blobs_open(const char *data_dir, struct ipd_blobs **out);
void ipd_blobs_free(struct ipd_blobs *b); /* NULL is fine */
const char *ipd_blobs_backend(const struct ipd_blobs *b); /* "local" */
/* IPD_OK when the store can take writes (readiness). */
enum ipd_err ipd_blobs_ping(struct ipd_blobs *b);

/* Start a new upload of at most max_size bytes into a temporary file.
 * *out is new; end it with ipd_blob_writer_commit or _abort. */
enum ipd_err ipd_blob_writer_new(struct ipd_blobs *b, int64_t max_size,
                                 struct ipd_blob_writer **out);
/* Append; IPD_ERR_TOO_LARGE once the total would pass max_size (nothing of
 * that chunk is written), IPD_ERR_IO on a write error. */
enum ipd_err ipd_blob_writer_write(struct ipd_blob_writer *w,
                                   const void *data, size_t len);
int64_t ipd_blob_writer_size(const struct ipd_blob_writer *w);
/* A descriptor to read the written bytes with pread (borrowed: valid until
 * commit or abort). */
int ipd_blob_writer_fd(const struct ipd_blob_writer *w);
/* The SHA-256 of everything written; call once, after the last write. */
void ipd_blob_writer_sha256(struct ipd_blob_writer *w,
                            char hex[IPD_SHA256_HEX]);
/* fsync, rename into place under file_id, fsync the directory, free w. */
enum ipd_err ipd_blob_writer_commit(struct ipd_blob_writer *w,
                                    const char *file_id);
/* Remove the temporary file and free w; NULL is fine. */
void ipd_blob_writer_abort(struct ipd_blob_writer *w);

/* Open a committed blob for reading.  *fd is new (close it); *size its
 * length.  IPD_ERR_NOT_FOUND when the bytes are missing. */
enum ipd_err ipd_blob_open(struct ipd_blobs *b, const char *file_id, int *fd,
                           int64_t *size);
/* Remove a committed blob; IPD_ERR_NOT_FOUND when already gone. */
enum ipd_err ipd_blob_delete(struct ipd_blobs *b, const char *file_id);
/* Number of temporary files (tests and status). */
enum ipd_err ipd_blobs_count_tmp(struct ipd_blobs *b, int64_t *n);

#endif
