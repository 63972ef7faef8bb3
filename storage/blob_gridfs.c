/*
 * blob_gridfs.c - blob.h on MongoDB GridFS (bucket "fs"), so several
 * interpd nodes share file bytes through the database.
 *
 * The GridFS file's _id is the file id (a string) and its filename is the
 * file id too: the user's filename lives only in the metadata.  An upload
 * writes chunks into fs.chunks as the body arrives (255 KiB each, the
 * GridFS default) and the fs.files document at commit; abort (413, a
 * client gone, a failed insert) removes the chunks, retried in the
 * background while the database is down.  A crash mid-upload can leave chunks
 * without an fs.files document; count_incomplete finds them and the reconcile
 * job (scheduler) removes them with reap_incomplete: chunk _ids are ObjectIds,
 * whose first four bytes are the time the chunk was written, so "abandoned for
 * an hour" needs no extra field.
 *
 * The reconcile listing (iter) pages through fs.files by _id (the file id):
 * each batch is one bounded query starting after the last id seen.
 *
 * A writer or reader holds one pooled client for its whole life: the
 * driver's GridFS stream is bound to the client it was opened with.
 */
#include <stdlib.h>
#include <string.h>

#include "mongo_internal.h"

#include "../service/common/log.h"
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

/* Uploads write the GridFS documents themselves (chunks as they fill,
 * the files document at commit) rather than through the driver's upload
 * stream: that stream retried a failed chunk insert on every later write,
 * so an upload hung through a whole database outage.  Here every insert is
 * one bounded driver call whose error ends the upload. */
#define CHUNK_SIZE (255 * 1024)

struct gridfs_writer {
    struct ipd_blob_writer base;
    mongoc_client_t *client;
    mongoc_collection_t *files, *chunks;
    unsigned char *buf; /* the chunk being filled */
    size_t used;
    int32_t n;  /* chunks written */
    bool wrote; /* any chunk reached the database */
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

enum ipd_err ipd_blobs_open_gridfs(struct ipd_mongo *mg, struct ipd_blobs **out)
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

static enum ipd_err gridfs_gate(struct ipd_blobs *b)
{
    return ipd_mongo_gate(mongo_of(b));
}

static enum ipd_err gridfs_writer_new(struct ipd_blobs *b, const char *file_id,
                                      struct ipd_blob_writer **out)
{
    struct ipd_mongo *mg = mongo_of(b);
    struct gridfs_writer *w = ipd_xcalloc(1, sizeof(*w));
    (void)file_id;
    w->client = ipd__mongo_pop(mg);
    w->files = mongoc_client_get_collection(w->client, mg->db, BUCKET ".files");
    w->chunks =
        mongoc_client_get_collection(w->client, mg->db, BUCKET ".chunks");
    w->buf = ipd_xmalloc(CHUNK_SIZE);
    *out = &w->base;
    return IPD_OK;
}

static enum ipd_err insert_chunk(struct gridfs_writer *w)
{
    bson_t doc = BSON_INITIALIZER;
    bson_oid_t oid;
    bson_error_t err;
    enum ipd_err rc = IPD_OK;

    bson_oid_init(&oid, NULL);
    BSON_APPEND_OID(&doc, "_id", &oid);
    BSON_APPEND_UTF8(&doc, "files_id", w->base.file_id);
    BSON_APPEND_INT32(&doc, "n", w->n);
    BSON_APPEND_BINARY(&doc, "data", BSON_SUBTYPE_BINARY, w->buf,
                       (uint32_t)w->used);
    w->wrote = true; /* a failed insert may still have landed */
    if (!mongoc_collection_insert_one(w->chunks, &doc, NULL, NULL, &err))
        rc = ipd__mongo_err(&err, "writing a GridFS chunk");
    bson_destroy(&doc);
    if (!rc) {
        w->n++;
        w->used = 0;
    }
    return rc;
}

static enum ipd_err gridfs_write(struct ipd_blob_writer *base, const void *data,
                                 size_t len)
{
    struct gridfs_writer *w = (struct gridfs_writer *)base;
    const unsigned char *p = data;
    while (len) {
        size_t n = CHUNK_SIZE - w->used;
        if (n > len)
            n = len;
        memcpy(w->buf + w->used, p, n);
        w->used += n;
        p += n;
        len -= n;
        if (w->used == CHUNK_SIZE) {
            enum ipd_err rc = insert_chunk(w);
            if (rc)
                return rc;
        }
    }
    return IPD_OK;
}

static void writer_release(struct gridfs_writer *w)
{
    struct ipd_mongo *mg = mongo_of(w->base.blobs);
    mongoc_collection_destroy(w->files);
    mongoc_collection_destroy(w->chunks);
    ipd__mongo_push(mg, w->client);
    free(w->buf);
    ipd__blob_writer_release(&w->base);
    free(w);
}

static enum ipd_err gridfs_del(struct ipd_blobs *b, const char *file_id);

static void gridfs_abort(struct ipd_blob_writer *base)
{
    struct gridfs_writer *w = (struct gridfs_writer *)base;
    struct ipd_blobs *b = base->blobs;
    char id[IPD_ID_MAX];
    bool wrote = w->wrote;
    memcpy(id, base->file_id, sizeof(id));
    writer_release(w);
    /* Remove the chunks written so far; while the database is down the
     * retry queue keeps trying. */
    if (wrote)
        ipd_blob_delete_later(b, id);
}

static enum ipd_err gridfs_commit(struct ipd_blob_writer *base)
{
    struct gridfs_writer *w = (struct gridfs_writer *)base;
    bson_t doc = BSON_INITIALIZER;
    bson_error_t err;
    enum ipd_err rc = IPD_OK;

    if (w->used) {
        rc = insert_chunk(w);
        if (rc)
            goto out;
    }
    /* The files document last: only now is the file visible. */
    BSON_APPEND_UTF8(&doc, "_id", base->file_id);
    BSON_APPEND_INT64(&doc, "length", base->size);
    BSON_APPEND_INT32(&doc, "chunkSize", CHUNK_SIZE);
    BSON_APPEND_DATE_TIME(&doc, "uploadDate", ipd_now_ms());
    BSON_APPEND_UTF8(&doc, "filename", base->file_id);
    w->wrote = true;
    if (!mongoc_collection_insert_one(w->files, &doc, NULL, NULL, &err))
        rc = ipd__mongo_err(&err, "finishing a GridFS upload");
out:
    bson_destroy(&doc);
    if (rc) {
        gridfs_abort(base);
        return rc;
    }
    writer_release(w);
    return IPD_OK;
}

static enum ipd_err stream_error(mongoc_stream_t *s, const char *what)
{
    bson_error_t err;
    if (mongoc_gridfs_bucket_stream_error(s, &err))
        return ipd__mongo_err(&err, what);
    ipd_error("%s failed without a driver error", what);
    return IPD_ERR_UNAVAILABLE;
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
    r->stream =
        mongoc_gridfs_bucket_open_download_stream(r->b.bucket, &id, &err);
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

/* Delete the fs.files document and every chunk of the id.  By hand rather
 * than mongoc_gridfs_bucket_delete_by_id, which gives up when the files
 * document is missing: chunks of an upload that never finished (its
 * abort failed while the database was down) must go too. */
static enum ipd_err gridfs_del(struct ipd_blobs *b, const char *file_id)
{
    struct ipd_mongo *mg = mongo_of(b);
    mongoc_client_t *c = ipd__mongo_pop(mg);
    mongoc_database_t *db = mongoc_client_get_database(c, mg->db);
    mongoc_collection_t *files =
        mongoc_database_get_collection(db, BUCKET ".files");
    mongoc_collection_t *chunks =
        mongoc_database_get_collection(db, BUCKET ".chunks");
    bson_t fq = BSON_INITIALIZER, cq = BSON_INITIALIZER, reply;
    bson_error_t err;
    bson_iter_t it;
    enum ipd_err rc = IPD_OK;
    int64_t gone = 0;

    BSON_APPEND_UTF8(&fq, "_id", file_id);
    BSON_APPEND_UTF8(&cq, "files_id", file_id);
    /* The files document first: once it is gone, readers see no file, and
     * the chunks left by a failure here are only garbage. */
    if (!mongoc_collection_delete_one(files, &fq, NULL, &reply, &err)) {
        rc = ipd__mongo_err(&err, "deleting a GridFS file");
        bson_destroy(&reply);
        goto out;
    }
    if (bson_iter_init_find(&it, &reply, "deletedCount"))
        gone += bson_iter_as_int64(&it);
    bson_destroy(&reply);
    if (!mongoc_collection_delete_many(chunks, &cq, NULL, &reply, &err)) {
        rc = ipd__mongo_err(&err, "deleting GridFS chunks");
        bson_destroy(&reply);
        goto out;
    }
    if (bson_iter_init_find(&it, &reply, "deletedCount"))
        gone += bson_iter_as_int64(&it);
    bson_destroy(&reply);
    if (!gone)
        rc = IPD_ERR_NOT_FOUND;
out:
    bson_destroy(&fq);
    bson_destroy(&cq);
    mongoc_collection_destroy(files);
    mongoc_collection_destroy(chunks);
    mongoc_database_destroy(db);
    ipd__mongo_push(mg, c);
    return rc;
}

static enum ipd_err
gridfs_list(struct ipd_blobs *b,
            int (*fn)(void *cls, const char *file_id, int64_t size), void *cls)
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
    mongoc_collection_t *files =
        mongoc_database_get_collection(db, BUCKET ".files");
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
            int64_t found = mongoc_collection_count_documents(files, &q, NULL,
                                                              NULL, NULL, &err);
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

/* A files document's length and uploadDate into out. */
static void info_from_doc(const bson_t *doc, struct ipd_blob_info *out)
{
    bson_iter_t it;
    if (bson_iter_init_find(&it, doc, "length") && BSON_ITER_HOLDS_NUMBER(&it))
        out->size = bson_iter_as_int64(&it);
    if (bson_iter_init_find(&it, doc, "uploadDate") &&
        BSON_ITER_HOLDS_DATE_TIME(&it))
        out->mtime_ms = bson_iter_date_time(&it);
}

/* {projection: {length: 1, uploadDate: 1}} into an empty b. */
static void info_projection(bson_t *b)
{
    bson_t proj;
    bson_append_document_begin(b, "projection", -1, &proj);
    BSON_APPEND_INT32(&proj, "length", 1);
    BSON_APPEND_INT32(&proj, "uploadDate", 1);
    bson_append_document_end(b, &proj);
}

static enum ipd_err gridfs_stat(struct ipd_blobs *b, const char *file_id,
                                struct ipd_blob_info *out)
{
    struct ipd_mongo *mg = mongo_of(b);
    mongoc_client_t *c = ipd__mongo_pop(mg);
    mongoc_collection_t *files =
        mongoc_client_get_collection(c, mg->db, BUCKET ".files");
    bson_t filter = BSON_INITIALIZER, opts = BSON_INITIALIZER;
    const bson_t *doc;
    bson_error_t err;
    enum ipd_err rc = IPD_ERR_NOT_FOUND;

    if (strlen(file_id) >= sizeof(out->file_id))
        goto done;
    BSON_APPEND_UTF8(&filter, "_id", file_id);
    info_projection(&opts);
    BSON_APPEND_INT64(&opts, "limit", 1);
    mongoc_cursor_t *cur =
        mongoc_collection_find_with_opts(files, &filter, &opts, NULL);
    if (mongoc_cursor_next(cur, &doc)) {
        memcpy(out->file_id, file_id, strlen(file_id) + 1);
        info_from_doc(doc, out);
        rc = IPD_OK;
    } else if (mongoc_cursor_error(cur, &err)) {
        rc = ipd__mongo_err(&err, "looking up a GridFS file");
    }
    mongoc_cursor_destroy(cur);
done:
    bson_destroy(&opts);
    bson_destroy(&filter);
    mongoc_collection_destroy(files);
    ipd__mongo_push(mg, c);
    return rc;
}

struct gridfs_iter {
    struct ipd_blob_iter base;
    char *last; /* the last _id seen, owned; "" before the first batch */
    bool done;
};

static enum ipd_err gridfs_iter_new(struct ipd_blobs *b,
                                    struct ipd_blob_iter **out)
{
    struct gridfs_iter *it = ipd_xcalloc(1, sizeof(*it));
    (void)b;
    it->last = ipd_xstrdup("");
    *out = &it->base;
    return IPD_OK;
}

/* One query: up to cap files documents after it->last.  *seen counts
 * the documents read, *n those that are ours. */
static enum ipd_err iter_batch(struct gridfs_iter *it, struct ipd_mongo *mg,
                               struct ipd_blob_info *out, size_t cap, size_t *n,
                               size_t *seen)
{
    mongoc_client_t *c = ipd__mongo_pop(mg);
    mongoc_collection_t *files =
        mongoc_client_get_collection(c, mg->db, BUCKET ".files");
    bson_t filter = BSON_INITIALIZER, opts = BSON_INITIALIZER, cmp, sort;
    const bson_t *doc;
    bson_error_t err;
    enum ipd_err rc = IPD_OK;

    /* $gt on a string matches string _ids only: ours. */
    bson_append_document_begin(&filter, "_id", -1, &cmp);
    BSON_APPEND_UTF8(&cmp, "$gt", it->last);
    bson_append_document_end(&filter, &cmp);
    bson_append_document_begin(&opts, "sort", -1, &sort);
    BSON_APPEND_INT32(&sort, "_id", 1);
    bson_append_document_end(&opts, &sort);
    info_projection(&opts);
    BSON_APPEND_INT64(&opts, "limit", (int64_t)cap);
    mongoc_cursor_t *cur =
        mongoc_collection_find_with_opts(files, &filter, &opts, NULL);
    while (*seen < cap && mongoc_cursor_next(cur, &doc)) {
        bson_iter_t bi;
        uint32_t len = 0;
        (*seen)++;
        if (!bson_iter_init_find(&bi, doc, "_id") || !BSON_ITER_HOLDS_UTF8(&bi))
            continue;
        const char *id = bson_iter_utf8(&bi, &len);
        free(it->last);
        it->last = ipd_xstrndup(id, len);
        if (len >= IPD_ID_MAX || memchr(id, '\0', len))
            continue; /* not one of ours: skipped, the walk goes on */
        struct ipd_blob_info *i = &out[*n];
        memset(i, 0, sizeof(*i));
        memcpy(i->file_id, id, len);
        info_from_doc(doc, i);
        (*n)++;
    }
    if (mongoc_cursor_error(cur, &err)) {
        rc = ipd__mongo_err(&err, "listing GridFS files");
        *n = 0;
    }
    mongoc_cursor_destroy(cur);
    bson_destroy(&opts);
    bson_destroy(&filter);
    mongoc_collection_destroy(files);
    ipd__mongo_push(mg, c);
    return rc;
}

static enum ipd_err gridfs_iter_next(struct ipd_blob_iter *base,
                                     struct ipd_blob_info *out, size_t cap,
                                     size_t *n)
{
    struct gridfs_iter *it = (struct gridfs_iter *)base;
    enum ipd_err rc = IPD_OK;

    if (cap > INT32_MAX)
        cap = INT32_MAX;
    /* A batch of foreign documents only: look further rather than end. */
    while (!rc && !*n && !it->done) {
        size_t seen = 0;
        rc = iter_batch(it, mongo_of(base->blobs), out, cap, n, &seen);
        if (seen < cap)
            it->done = true;
    }
    return rc;
}

static void gridfs_iter_free(struct ipd_blob_iter *base)
{
    struct gridfs_iter *it = (struct gridfs_iter *)base;
    free(it->last);
    free(it);
}

/* The ObjectId of the first instant of second ms / 1000: every id made
 * before that second sorts below it. */
static void oid_at(int64_t ms, bson_oid_t *oid)
{
    uint8_t raw[12] = {0};
    uint32_t secs = ms <= 0                  ? 0
                    : ms / 1000 > UINT32_MAX ? UINT32_MAX
                                             : (uint32_t)(ms / 1000);
    raw[0] = (uint8_t)(secs >> 24);
    raw[1] = (uint8_t)(secs >> 16);
    raw[2] = (uint8_t)(secs >> 8);
    raw[3] = (uint8_t)secs;
    bson_oid_init_from_data(oid, raw);
}

/* Whether files_id's newest chunk was written before cut (ObjectId time;
 * a chunk whose _id is no ObjectId counts as new: not ours to judge). */
static enum ipd_err chunks_idle(mongoc_collection_t *chunks,
                                const bson_value_t *files_id, int64_t cut,
                                bool *idle)
{
    bson_t filter = BSON_INITIALIZER, opts = BSON_INITIALIZER, sort;
    const bson_t *doc;
    bson_error_t err;
    bson_iter_t it;
    enum ipd_err rc = IPD_OK;

    *idle = false;
    bson_append_value(&filter, "files_id", -1, files_id);
    bson_append_document_begin(&opts, "sort", -1, &sort);
    BSON_APPEND_INT32(&sort, "_id", -1);
    bson_append_document_end(&opts, &sort);
    BSON_APPEND_INT64(&opts, "limit", 1);
    mongoc_cursor_t *cur =
        mongoc_collection_find_with_opts(chunks, &filter, &opts, NULL);
    if (mongoc_cursor_next(cur, &doc)) {
        if (bson_iter_init_find(&it, doc, "_id") && BSON_ITER_HOLDS_OID(&it))
            *idle =
                (int64_t)bson_oid_get_time_t(bson_iter_oid(&it)) * 1000 < cut;
    } else if (mongoc_cursor_error(cur, &err)) {
        rc = ipd__mongo_err(&err, "reading GridFS chunks");
    }
    mongoc_cursor_destroy(cur);
    bson_destroy(&opts);
    bson_destroy(&filter);
    return rc;
}

#define REAP_BATCH 100

/* One batch of first chunks (n: 0) written before cut, after *last
 * (unset: from the start): their files_id into ids, *last advanced. */
static enum ipd_err first_chunks(mongoc_collection_t *chunks, int64_t cut,
                                 bson_oid_t *last, bool *have_last,
                                 bson_value_t ids[REAP_BATCH], size_t *n)
{
    bson_t filter = BSON_INITIALIZER, opts = BSON_INITIALIZER, cmp, sort, proj;
    bson_oid_t lim;
    const bson_t *doc;
    bson_error_t err;
    bson_iter_t it;
    enum ipd_err rc = IPD_OK;

    *n = 0;
    oid_at(cut, &lim);
    BSON_APPEND_INT32(&filter, "n", 0);
    bson_append_document_begin(&filter, "_id", -1, &cmp);
    BSON_APPEND_OID(&cmp, "$lt", &lim);
    if (*have_last)
        BSON_APPEND_OID(&cmp, "$gt", last);
    bson_append_document_end(&filter, &cmp);
    bson_append_document_begin(&opts, "sort", -1, &sort);
    BSON_APPEND_INT32(&sort, "_id", 1);
    bson_append_document_end(&opts, &sort);
    bson_append_document_begin(&opts, "projection", -1, &proj);
    BSON_APPEND_INT32(&proj, "files_id", 1);
    bson_append_document_end(&opts, &proj);
    BSON_APPEND_INT64(&opts, "limit", REAP_BATCH);
    mongoc_cursor_t *cur =
        mongoc_collection_find_with_opts(chunks, &filter, &opts, NULL);
    while (*n < REAP_BATCH && mongoc_cursor_next(cur, &doc)) {
        if (bson_iter_init_find(&it, doc, "_id") && BSON_ITER_HOLDS_OID(&it)) {
            bson_oid_copy(bson_iter_oid(&it), last);
            *have_last = true;
        }
        if (bson_iter_init_find(&it, doc, "files_id"))
            bson_value_copy(bson_iter_value(&it), &ids[(*n)++]);
    }
    if (mongoc_cursor_error(cur, &err))
        rc = ipd__mongo_err(&err, "listing GridFS chunks");
    mongoc_cursor_destroy(cur);
    bson_destroy(&opts);
    bson_destroy(&filter);
    return rc;
}

/* Remove files_id's chunks if it has no files document and its newest
 * chunk is older than cut.  [out] *gone */
static enum ipd_err reap_one(mongoc_collection_t *files,
                             mongoc_collection_t *chunks,
                             const bson_value_t *files_id, int64_t cut,
                             bool *gone)
{
    bson_t q = BSON_INITIALIZER, reply = BSON_INITIALIZER;
    bson_error_t err;
    bson_iter_t it;
    bool idle = false;
    enum ipd_err rc = IPD_OK;

    *gone = false;
    bson_append_value(&q, "_id", -1, files_id);
    int64_t found =
        mongoc_collection_count_documents(files, &q, NULL, NULL, NULL, &err);
    if (found < 0) {
        rc = ipd__mongo_err(&err, "counting GridFS files");
        goto out;
    }
    if (found)
        goto out; /* a committed file */
    rc = chunks_idle(chunks, files_id, cut, &idle);
    if (rc || !idle)
        goto out;
    bson_reinit(&q);
    bson_append_value(&q, "files_id", -1, files_id);
    bson_destroy(&reply);
    if (!mongoc_collection_delete_many(chunks, &q, NULL, &reply, &err)) {
        rc = ipd__mongo_err(&err, "deleting abandoned GridFS chunks");
        goto out;
    }
    *gone = bson_iter_init_find(&it, &reply, "deletedCount") &&
            bson_iter_as_int64(&it) > 0;
out:
    bson_destroy(&reply);
    bson_destroy(&q);
    return rc;
}

static enum ipd_err gridfs_reap_incomplete(struct ipd_blobs *b,
                                           int64_t older_than_ms,
                                           int64_t *removed)
{
    struct ipd_mongo *mg = mongo_of(b);
    mongoc_client_t *c = ipd__mongo_pop(mg);
    mongoc_collection_t *files =
        mongoc_client_get_collection(c, mg->db, BUCKET ".files");
    mongoc_collection_t *chunks =
        mongoc_client_get_collection(c, mg->db, BUCKET ".chunks");
    bson_value_t ids[REAP_BATCH];
    bson_oid_t last;
    bool have_last = false;
    size_t n = 0;
    enum ipd_err rc;

    /* Every upload writes chunk 0 first: walking those (by _id, hence by
     * time, up to the cut-off) finds each upload once. */
    do {
        rc = first_chunks(chunks, older_than_ms, &last, &have_last, ids, &n);
        for (size_t i = 0; i < n; i++) {
            bool gone = false;
            if (!rc)
                rc = reap_one(files, chunks, &ids[i], older_than_ms, &gone);
            if (gone) {
                ipd_info("removed the chunks of an abandoned GridFS upload");
                (*removed)++;
            }
            bson_value_destroy(&ids[i]);
        }
    } while (!rc && n == REAP_BATCH);
    mongoc_collection_destroy(files);
    mongoc_collection_destroy(chunks);
    ipd__mongo_push(mg, c);
    return rc;
}

static const struct ipd_blobs_ops gridfs_ops = {
    .name = "gridfs",
    .free = gridfs_free,
    .ping = gridfs_ping,
    .gate = gridfs_gate,
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
    .stat = gridfs_stat,
    .iter_new = gridfs_iter_new,
    .iter_next = gridfs_iter_next,
    .iter_free = gridfs_iter_free,
    .reap_incomplete = gridfs_reap_incomplete,
};
