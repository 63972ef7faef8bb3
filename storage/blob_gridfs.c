/*
 * blob_gridfs.c - blob.h on MongoDB GridFS (bucket "fs"), so several
 * interpd nodes share file bytes through the database.
 *
 * The GridFS file's _id is the file id (a string) and its filename is the
 * file id too: the user's filename lives only in the metadata.  An upload
 * streams chunks into fs.chunks as the body arrives and writes the fs.files
 * document at commit; abort (413, a client gone, a failed insert) removes
 * the chunks.  A crash mid-upload can leave chunks without an fs.files
 * document; count_incomplete finds them and the reconcile job (scheduler)
 * removes them.
 *
 * A writer or reader holds one pooled client for its whole life: the
 * driver's GridFS stream is bound to the client it was opened with.
 */
#include <stdlib.h>
#include <string.h>

#include "mongo_internal.h"

#include "../service/log.h"
#include "blob_internal.h"

#define BUCKET "fs"

struct gridfs_blobs {
    struct ipd_blobs base;
    struct ipd_mongo *mg;
};

/* A client with its bucket, for one operation or one stream. */
struct bucket {
    mongoc_client_t *client;
    mongoc_database_t *db;
    mongoc_gridfs_bucket_t *bucket;
};

struct gridfs_writer {
    struct ipd_blob_writer base;
    struct bucket b;
    mongoc_stream_t *stream;
};

struct gridfs_reader {
    struct ipd_blob_reader base;
    struct bucket b;
    mongoc_stream_t *stream;
};

static const struct ipd_blobs_ops gridfs_ops;

static struct ipd_mongo *mongo_of(struct ipd_blobs *b)
{
    return ((struct gridfs_blobs *)b)->mg;
}

static void bucket_close(struct ipd_mongo *mg, struct bucket *bk)
{
    if (bk->bucket)
        mongoc_gridfs_bucket_destroy(bk->bucket);
    if (bk->db)
        mongoc_database_destroy(bk->db);
    if (bk->client)
        ipd__mongo_push(mg, bk->client);
    memset(bk, 0, sizeof(*bk));
}

static enum ipd_err bucket_open(struct ipd_mongo *mg, struct bucket *bk)
{
    bson_error_t err;
    memset(bk, 0, sizeof(*bk));
    bk->client = ipd__mongo_pop(mg);
    bk->db = mongoc_client_get_database(bk->client, mg->db);
    bk->bucket = mongoc_gridfs_bucket_new(bk->db, NULL, NULL, &err);
    if (!bk->bucket) {
        enum ipd_err rc = ipd__mongo_err(&err, "opening the GridFS bucket");
        bucket_close(mg, bk);
        return rc;
    }
    return IPD_OK;
}

static void id_value(const char *file_id, bson_value_t *v)
{
    memset(v, 0, sizeof(*v));
    v->value_type = BSON_TYPE_UTF8;
    v->value.v_utf8.str = (char *)(uintptr_t)file_id;
    v->value.v_utf8.len = (uint32_t)strlen(file_id);
}

enum ipd_err ipd_blobs_open_gridfs(struct ipd_mongo *mg,
                                   struct ipd_blobs **out)
{
    struct gridfs_blobs *b = ipd_xcalloc(1, sizeof(*b));
    ipd__blobs_init(&b->base, &gridfs_ops);
    b->mg = mg;
    *out = &b->base;
    return IPD_OK;
}

static void gridfs_free(struct ipd_blobs *b)
{
    free(b);
}

static enum ipd_err gridfs_ping(struct ipd_blobs *b)
{
    return ipd_mongo_ping(mongo_of(b));
}

static enum ipd_err gridfs_writer_new(struct ipd_blobs *b,
                                      const char *file_id,
                                      struct ipd_blob_writer **out)
{
    struct gridfs_writer *w = ipd_xcalloc(1, sizeof(*w));
    bson_error_t err;
    bson_value_t id;
    enum ipd_err rc = bucket_open(mongo_of(b), &w->b);
    if (rc)
        goto fail;
    id_value(file_id, &id);
    w->stream = mongoc_gridfs_bucket_open_upload_stream_with_id(
        w->b.bucket, &id, file_id, NULL, &err);
    if (!w->stream) {
        rc = ipd__mongo_err(&err, "starting a GridFS upload");
        goto fail;
    }
    *out = &w->base;
    return IPD_OK;
fail:
    bucket_close(mongo_of(b), &w->b);
    free(w);
    *out = NULL;
    return rc;
}

static enum ipd_err stream_error(mongoc_stream_t *s, const char *what)
{
    bson_error_t err;
    if (mongoc_gridfs_bucket_stream_error(s, &err))
        return ipd__mongo_err(&err, what);
    ipd_error("%s failed without a driver error", what);
    return IPD_ERR_UNAVAILABLE;
}

static enum ipd_err gridfs_write(struct ipd_blob_writer *base,
                                 const void *data, size_t len)
{
    struct gridfs_writer *w = (struct gridfs_writer *)base;
    ssize_t n = mongoc_stream_write(w->stream, (void *)(uintptr_t)data, len,
                                    0);
    if (n < 0 || (size_t)n != len)
        return stream_error(w->stream, "writing a GridFS chunk");
    return IPD_OK;
}

static void gridfs_abort(struct ipd_blob_writer *base)
{
    struct gridfs_writer *w = (struct gridfs_writer *)base;
    struct ipd_mongo *mg = mongo_of(base->blobs);
    if (w->stream) {
        /* Removes the chunks written so far. */
        if (!mongoc_gridfs_bucket_abort_upload(w->stream))
            ipd_warn("GridFS upload %s: chunks not removed; the reconcile "
                     "job will", base->file_id);
        mongoc_stream_destroy(w->stream);
    }
    bucket_close(mg, &w->b);
    ipd__blob_writer_release(base);
    free(w);
}

static enum ipd_err gridfs_commit(struct ipd_blob_writer *base)
{
    struct gridfs_writer *w = (struct gridfs_writer *)base;
    struct ipd_mongo *mg = mongo_of(base->blobs);
    enum ipd_err rc = IPD_OK;
    /* Closing flushes the last chunk and writes the fs.files document. */
    if (mongoc_stream_close(w->stream) != 0) {
        rc = stream_error(w->stream, "finishing a GridFS upload");
        gridfs_abort(base);
        return rc;
    }
    mongoc_stream_destroy(w->stream);
    w->stream = NULL;
    bucket_close(mg, &w->b);
    ipd__blob_writer_release(base);
    free(w);
    return IPD_OK;
}

static enum ipd_err gridfs_open(struct ipd_blobs *b, const char *file_id,
                                struct ipd_blob_reader **out)
{
    struct gridfs_reader *r = ipd_xcalloc(1, sizeof(*r));
    bson_error_t err;
    bson_value_t id;
    enum ipd_err rc = bucket_open(mongo_of(b), &r->b);
    if (rc)
        goto fail;
    id_value(file_id, &id);
    r->stream = mongoc_gridfs_bucket_open_download_stream(r->b.bucket, &id,
                                                          &err);
    if (!r->stream) {
        rc = err.domain == MONGOC_ERROR_GRIDFS &&
                     err.code == MONGOC_ERROR_GRIDFS_BUCKET_FILE_NOT_FOUND
                 ? IPD_ERR_NOT_FOUND
                 : ipd__mongo_err(&err, "opening a GridFS download");
        goto fail;
    }
    *out = &r->base;
    return IPD_OK;
fail:
    bucket_close(mongo_of(b), &r->b);
    free(r);
    *out = NULL;
    return rc;
}

static int gridfs_take_fd(struct ipd_blob_reader *r)
{
    (void)r;
    return -1;
}

static ssize_t gridfs_read(struct ipd_blob_reader *base, void *buf, size_t n)
{
    struct gridfs_reader *r = (struct gridfs_reader *)base;
    ssize_t got = mongoc_stream_read(r->stream, buf, n, 1, 0);
    if (got < 0) {
        stream_error(r->stream, "reading a GridFS chunk");
        return -1;
    }
    return got;
}

static void gridfs_reader_free(struct ipd_blob_reader *base)
{
    struct gridfs_reader *r = (struct gridfs_reader *)base;
    if (r->stream)
        mongoc_stream_destroy(r->stream);
    bucket_close(mongo_of(base->blobs), &r->b);
    free(r);
}

static enum ipd_err gridfs_del(struct ipd_blobs *b, const char *file_id)
{
    struct bucket bk;
    bson_error_t err;
    bson_value_t id;
    enum ipd_err rc = bucket_open(mongo_of(b), &bk);
    if (rc)
        return rc;
    id_value(file_id, &id);
    if (!mongoc_gridfs_bucket_delete_by_id(bk.bucket, &id, &err))
        rc = err.domain == MONGOC_ERROR_GRIDFS &&
                     err.code == MONGOC_ERROR_GRIDFS_BUCKET_FILE_NOT_FOUND
                 ? IPD_ERR_NOT_FOUND
                 : ipd__mongo_err(&err, "deleting a GridFS file");
    bucket_close(mongo_of(b), &bk);
    return rc;
}

static enum ipd_err gridfs_list(struct ipd_blobs *b,
                                int (*fn)(void *cls, const char *file_id,
                                          int64_t size),
                                void *cls)
{
    struct bucket bk;
    bson_error_t err;
    const bson_t *doc;
    bson_t filter = BSON_INITIALIZER;
    enum ipd_err rc = bucket_open(mongo_of(b), &bk);
    if (rc)
        return rc;
    mongoc_cursor_t *cur = mongoc_gridfs_bucket_find(bk.bucket, &filter, NULL);
    while (mongoc_cursor_next(cur, &doc)) {
        bson_iter_t it;
        const char *id = NULL;
        int64_t len = 0;
        if (bson_iter_init_find(&it, doc, "_id") && BSON_ITER_HOLDS_UTF8(&it))
            id = bson_iter_utf8(&it, NULL);
        if (bson_iter_init_find(&it, doc, "length") &&
            BSON_ITER_HOLDS_NUMBER(&it))
            len = bson_iter_as_int64(&it);
        if (id && fn(cls, id, len))
            break;
    }
    if (mongoc_cursor_error(cur, &err))
        rc = ipd__mongo_err(&err, "listing GridFS files");
    mongoc_cursor_destroy(cur);
    bson_destroy(&filter);
    bucket_close(mongo_of(b), &bk);
    return rc;
}

/* Chunks whose file has no fs.files document: uploads in progress, or
 * left by a crash. */
static enum ipd_err gridfs_count_incomplete(struct ipd_blobs *b, int64_t *n)
{
    struct ipd_mongo *mg = mongo_of(b);
    mongoc_client_t *c = ipd__mongo_pop(mg);
    mongoc_database_t *db = mongoc_client_get_database(c, mg->db);
    mongoc_collection_t *files = mongoc_database_get_collection(db, BUCKET ".files");
    bson_t cmd = BSON_INITIALIZER, reply;
    bson_error_t err;
    enum ipd_err rc = IPD_OK;
    bson_iter_t it, arr;

    *n = 0;
    BSON_APPEND_UTF8(&cmd, "distinct", BUCKET ".chunks");
    BSON_APPEND_UTF8(&cmd, "key", "files_id");
    if (!mongoc_database_command_simple(db, &cmd, NULL, &reply, &err)) {
        rc = ipd__mongo_err(&err, "counting GridFS chunks");
        goto out;
    }
    if (bson_iter_init_find(&it, &reply, "values") &&
        BSON_ITER_HOLDS_ARRAY(&it) && bson_iter_recurse(&it, &arr)) {
        while (bson_iter_next(&arr)) {
            bson_t q = BSON_INITIALIZER;
            bson_append_value(&q, "_id", 3, bson_iter_value(&arr));
            int64_t found = mongoc_collection_count_documents(
                files, &q, NULL, NULL, NULL, &err);
            bson_destroy(&q);
            if (found < 0) {
                rc = ipd__mongo_err(&err, "counting GridFS files");
                break;
            }
            if (!found)
                (*n)++;
        }
    }
out:
    bson_destroy(&reply);
    bson_destroy(&cmd);
    mongoc_collection_destroy(files);
    mongoc_database_destroy(db);
    ipd__mongo_push(mg, c);
    return rc;
}

static const struct ipd_blobs_ops gridfs_ops = {
    .name = "gridfs",
    .free = gridfs_free,
    .ping = gridfs_ping,
    .writer_new = gridfs_writer_new,
    .write = gridfs_write,
    .commit = gridfs_commit,
    .abort = gridfs_abort,
    .open = gridfs_open,
    .take_fd = gridfs_take_fd,
    .read = gridfs_read,
    .reader_free = gridfs_reader_free,
    .del = gridfs_del,
    .list = gridfs_list,
    .count_incomplete = gridfs_count_incomplete,
};
