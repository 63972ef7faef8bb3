/*
 * test_sweep.c - the expiry sweep on SQLite and local disk: expired
 * records and their bytes go, live ones stay, a second sweep finds
 * nothing, two sweeps at once delete each file exactly once, and a
 * record the sweep fails to delete keeps its bytes.
 */
#include <pthread.h>
#include <unistd.h>

#include <sqlite3.h>

#include "scheduler/sweep.h"
#include "service/common/util.h"
#include "test.h"

#define NOW INT64_C(1800000000000)

static char dir[64];
static struct ipd_meta *meta;
static struct ipd_blobs *blobs;

static void open_stores(void)
{
    char path[128];
    snprintf(dir, sizeof(dir), "/tmp/ipd-sweep-XXXXXX");
    IPD_ASSERT(mkdtemp(dir));
    snprintf(path, sizeof(path), "%s/meta.db", dir);
    IPD_ASSERT(ipd_meta_sqlite_open(path, 5000, &meta) == IPD_OK);
    IPD_ASSERT(ipd_blobs_open_local(dir, &blobs) == IPD_OK);
}

static void close_stores(void)
{
    char cmd[128];
    ipd_blobs_free(blobs);
    ipd_meta_free(meta);
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    CHECK(system(cmd) == 0);
}

/* A stored file of size bytes expiring at expires (ms). */
static void put(const char *user, int64_t size, int64_t expires,
                char id[IPD_ID_MAX])
{
    struct ipd_file_meta f;
    struct ipd_blob_writer *w = NULL;
    char buf[64];
    memset(buf, 'p', sizeof(buf));
    memset(&f, 0, sizeof(f));
    ipd_id_new("file", f.file_id);
    IPD_ASSERT(ipd_blob_writer_new(blobs, f.file_id, 1 << 20, &w) == IPD_OK);
    IPD_ASSERT(ipd_blob_writer_write(w, buf, (size_t)size) == IPD_OK);
    IPD_ASSERT(ipd_blob_writer_sha256(w, f.sha256) == IPD_OK);
    IPD_ASSERT(ipd_blob_writer_commit(w) == IPD_OK);
    snprintf(f.tenant, sizeof(f.tenant), "t");
    snprintf(f.user_id, sizeof(f.user_id), "%s", user);
    snprintf(f.filename, sizeof(f.filename), "f.bin");
    snprintf(f.mime_type, sizeof(f.mime_type), "application/octet-stream");
    snprintf(f.file_type, sizeof(f.file_type), "binary");
    snprintf(f.source, sizeof(f.source), "upload");
    snprintf(f.blob, sizeof(f.blob), "local");
    f.size = size;
    f.created_at_ms = NOW - 1000;
    f.expires_at_ms = expires;
    IPD_ASSERT(ipd_meta_file_insert(meta, &f, NULL, NOW - 1000) == IPD_OK);
    memcpy(id, f.file_id, IPD_ID_MAX);
}

static bool has_blob(const char *id)
{
    struct ipd_blob_reader *r = NULL;
    enum ipd_err rc = ipd_blob_open(blobs, id, &r);
    ipd_blob_reader_free(r);
    return rc == IPD_OK;
}

static void sweeps_expired_only(void)
{
    char a[IPD_ID_MAX], b[IPD_ID_MAX], c[IPD_ID_MAX], live[IPD_ID_MAX];
    struct ipd_sweep_result res;
    struct ipd_file_meta got;
    open_stores();
    put("u1", 10, NOW - 1, a);
    put("u1", 20, NOW, b); /* expires_at == now: expired */
    put("u2", 30, NOW - 5000, c);
    put("u1", 40, IPD_TIME_NEVER, live);
    CHECK_INT(ipd_sweep_expired(meta, blobs, NOW, &res), IPD_OK);
    CHECK_INT(res.deleted_files, 3);
    CHECK_INT(res.freed_bytes, 60);
    CHECK(!has_blob(a) && !has_blob(b) && !has_blob(c));
    CHECK(has_blob(live));
    CHECK_INT(ipd_meta_file_get(meta, "t", "u1", live, NOW, &got), IPD_OK);
    /* Run again: nothing left to do. */
    CHECK_INT(ipd_sweep_expired(meta, blobs, NOW, &res), IPD_OK);
    CHECK_INT(res.deleted_files, 0);
    CHECK_INT(res.freed_bytes, 0);
    json_t *j = ipd_sweep_json(&res);
    CHECK(json_is_integer(json_object_get(j, "deleted_files")));
    CHECK(json_is_integer(json_object_get(j, "freed_bytes")));
    CHECK(json_is_integer(json_object_get(j, "orphans_removed")));
    CHECK(json_is_integer(json_object_get(j, "duration_ms")));
    json_decref(j);
    close_stores();
}

/* A sweep killed after the metadata delete, before the bytes: the next
 * sweep has nothing to delete, and the bytes are an orphan for the
 * reconcile job, never a record without bytes. */
static void record_first_then_bytes(void)
{
    char a[IPD_ID_MAX];
    struct ipd_sweep_result res;
    open_stores();
    put("u1", 10, NOW - 1, a);
    CHECK_INT(ipd_meta_file_delete_by_id(meta, a), IPD_OK); /* "killed" */
    CHECK_INT(ipd_sweep_expired(meta, blobs, NOW, &res), IPD_OK);
    CHECK_INT(res.deleted_files, 0);
    close_stores();
}

/* The blob of id read whole: its size, or -1 when it can't be read or a
 * byte is not put's. */
static int64_t read_blob(const char *id)
{
    struct ipd_blob_reader *r = NULL;
    char buf[256];
    int64_t total = 0;
    ssize_t n = 0;
    bool same = true;
    if (ipd_blob_open(blobs, id, &r))
        return -1;
    while ((n = ipd_blob_reader_read(r, buf, sizeof(buf))) > 0) {
        for (ssize_t i = 0; i < n; i++)
            same = same && buf[i] == 'p';
        total += n;
    }
    ipd_blob_reader_free(r);
    return n < 0 || !same ? -1 : total;
}

/* SQL on meta.db through a connection of its own, behind the store's
 * back. */
static int raw_exec(const char *sql)
{
    char path[128];
    sqlite3 *db = NULL;
    snprintf(path, sizeof(path), "%s/meta.db", dir);
    int src = sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE, NULL);
    if (!src)
        src = sqlite3_busy_timeout(db, 5000);
    if (!src)
        src = sqlite3_exec(db, sql, NULL, NULL, NULL);
    if (src)
        fprintf(stderr, "raw_exec: %s: %s\n", sql, sqlite3_errmsg(db));
    sqlite3_close(db);
    return src;
}

/* The metadata delete fails during a sweep: the sweep says so, and the
 * file stays whole, record and bytes, for the next sweep to take.  Bytes
 * deleted before their record would leave a record of a file whose
 * content is gone. */
static void failed_record_delete_keeps_bytes(void)
{
    char a[IPD_ID_MAX];
    struct ipd_sweep_result res;
    struct ipd_file_list l = {0};
    open_stores();
    put("u1", 40, NOW - 1, a);
    REQUIRE(raw_exec("CREATE TRIGGER injected BEFORE DELETE ON files "
                     "BEGIN SELECT RAISE(ABORT, 'injected'); END") == 0);
    CHECK_INT(ipd_sweep_expired(meta, blobs, NOW, &res), IPD_ERR_INTERNAL);
    CHECK_INT(res.deleted_files, 0);
    CHECK_INT(res.freed_bytes, 0);
    /* No delete waits for a retry, so what is read below is final. */
    CHECK_INT(ipd_blobs_pending_deletes(blobs), 0);
    CHECK_INT(ipd_meta_file_list_expired(meta, NOW, 10, &l), IPD_OK);
    CHECK_INT(l.n, 1);
    CHECK(l.n == 1 && !strcmp(l.items[0].file_id, a));
    ipd_file_list_release(&l);
    CHECK_INT(read_blob(a), 40);

    /* The failure gone, the next sweep deletes both. */
    REQUIRE(raw_exec("DROP TRIGGER injected") == 0);
    CHECK_INT(ipd_sweep_expired(meta, blobs, NOW, &res), IPD_OK);
    CHECK_INT(res.deleted_files, 1);
    CHECK_INT(res.freed_bytes, 40);
    CHECK(!has_blob(a));
    close_stores();
}

struct sweeper {
    struct ipd_sweep_result res;
    enum ipd_err rc;
};

static void *sweep_thread(void *arg)
{
    struct sweeper *s = arg;
    s->rc = ipd_sweep_expired(meta, blobs, NOW, &s->res);
    return NULL;
}

static void concurrent_sweeps_delete_once(void)
{
    enum { N = 600 }; /* more than one batch */
    char id[IPD_ID_MAX];
    struct sweeper s[2];
    pthread_t t[2];
    open_stores();
    for (int i = 0; i < N; i++)
        put("u1", 1, NOW - 1 - i, id);
    memset(s, 0, sizeof(s));
    for (int i = 0; i < 2; i++)
        pthread_create(&t[i], NULL, sweep_thread, &s[i]);
    for (int i = 0; i < 2; i++)
        pthread_join(t[i], NULL);
    CHECK_INT(s[0].rc, IPD_OK);
    CHECK_INT(s[1].rc, IPD_OK);
    CHECK_INT(s[0].res.deleted_files + s[1].res.deleted_files, N);
    CHECK_INT(s[0].res.freed_bytes + s[1].res.freed_bytes, N);
    close_stores();
}

TEST_MAIN(T(sweeps_expired_only), T(record_first_then_bytes),
          T(failed_record_delete_keeps_bytes), T(concurrent_sweeps_delete_once))
