/*
 * harness.c - see harness.h.  Processes are started with fork+execve; the
 * server reports its port on fd 3 (--ready-fd 3), which is the startup
 * event we wait for.
 */
#define ITEST_NO_TEST_H
#include "harness.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/random.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <mongoc/mongoc.h>
#include <openssl/evp.h>
#include <sqlite3.h>

extern char **environ;

#define STARTUP_TIMEOUT_MS 30000
#define STOP_TIMEOUT_MS 20000
#define CLI_TIMEOUT_MS 30000
#define WARM_TIMEOUT_MS                                                        \
    60000 /* ITEST_EXEC_MODE=warm: until every zygote is                       \
           * up */
#define LOG_TAIL_LINES 60

static struct itest_server *live_servers;

/* ITEST_TIMEOUT_SCALE=N stretches every bounded wait N times, for slow
 * runs (valgrind, a loaded CI machine). */
static int scaled(int ms)
{
    static int scale;
    if (!scale) {
        const char *e = getenv("ITEST_TIMEOUT_SCALE");
        long v = e ? strtol(e, NULL, 10) : 1;
        scale = v >= 1 && v <= 100 ? (int)v : 1;
    }
    return ms * scale;
}
static bool harness_initialised;

/* The driver's errors only: its warnings are noise here (FerretDB has no
 * endSessions, say). */
static void mongo_log(mongoc_log_level_t level, const char *domain,
                      const char *message, void *cls)
{
    (void)cls;
    if (level <= MONGOC_LOG_LEVEL_ERROR)
        fprintf(stderr, "harness: mongoc %s: %s\n", domain, message);
}

static void cleanup_at_exit(void);

static void harness_init(void)
{
    if (harness_initialised)
        return;
    harness_initialised = true;
    curl_global_init(CURL_GLOBAL_DEFAULT);
    mongoc_init();
    mongoc_log_set_handler(mongo_log, NULL);
    /* A server dying must not kill the test with SIGPIPE on a socket. */
    signal(SIGPIPE, SIG_IGN);
    atexit(cleanup_at_exit);
}

char *itest_fmt(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0)
        abort();
    char *s = malloc((size_t)n + 1);
    if (!s)
        abort();
    va_start(ap, fmt);
    vsnprintf(s, (size_t)n + 1, fmt, ap);
    va_end(ap);
    return s;
}

static char *xstrdup(const char *s)
{
    char *d = strdup(s);
    if (!d)
        abort();
    return d;
}

static void *xrealloc(void *p, size_t n)
{
    void *q = realloc(p, n ? n : 1);
    if (!q)
        abort();
    return q;
}

static int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) && errno == EINTR)
        ;
}

double itest_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

void itest_sleep_until(double t)
{
    struct timespec ts;
    ts.tv_sec = (time_t)t;
    ts.tv_nsec = (long)((t - (double)ts.tv_sec) * 1e9);
    while (clock_nanosleep(CLOCK_REALTIME, TIMER_ABSTIME, &ts, NULL) == EINTR)
        ;
}

/* ---------------------------------------------------------------- files */

char *itest_read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    size_t cap = 4096, n = 0;
    char *buf = xrealloc(NULL, cap);
    for (;;) {
        if (n + 1 >= cap) {
            cap *= 2;
            buf = xrealloc(buf, cap);
        }
        size_t got = fread(buf + n, 1, cap - n - 1, f);
        n += got;
        if (got == 0)
            break;
    }
    fclose(f);
    buf[n] = 0;
    if (len)
        *len = n;
    return buf;
}

static bool write_file(const char *path, const char *data, mode_t mode)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
    if (fd < 0)
        return false;
    bool ok = itest_send_all(fd, data, strlen(data));
    return close(fd) == 0 && ok;
}

struct strv {
    char **v;
    size_t n;
};

static void strv_push(struct strv *sv, char *s)
{
    sv->v = xrealloc(sv->v, (sv->n + 2) * sizeof(*sv->v));
    sv->v[sv->n++] = s;
    sv->v[sv->n] = NULL;
}

void itest_strv_free(char **v)
{
    if (!v)
        return;
    for (size_t i = 0; v[i]; i++)
        free(v[i]);
    free(v);
}

static void walk(const char *root, const char *rel, struct strv *out)
{
    char *path = rel[0] ? itest_fmt("%s/%s", root, rel) : xstrdup(root);
    DIR *d = opendir(path);
    if (!d) {
        free(path);
        return;
    }
    const struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        char *child_rel =
            rel[0] ? itest_fmt("%s/%s", rel, e->d_name) : xstrdup(e->d_name);
        char *child = itest_fmt("%s/%s", root, child_rel);
        struct stat st;
        if (lstat(child, &st) == 0 && S_ISDIR(st.st_mode)) {
            walk(root, child_rel, out);
            free(child_rel);
        } else if (lstat(child, &st) == 0 && S_ISREG(st.st_mode)) {
            strv_push(out, child_rel);
        } else {
            free(child_rel);
        }
        free(child);
    }
    closedir(d);
    free(path);
}

size_t itest_list_files(const char *dir, char ***out)
{
    struct strv sv = {NULL, 0};
    walk(dir, "", &sv);
    if (!sv.v) {
        sv.v = xrealloc(NULL, sizeof(*sv.v));
        sv.v[0] = NULL;
    }
    *out = sv.v;
    return sv.n;
}

/* Files of the data dir that are not user data: the admin key, the
 * SQLite database, the delete reserve, the venv (its lock, generations
 * and pip cache), the executor's matplotlib font cache. */
static bool not_user_data(const char *f)
{
    return !strcmp(f, "admin.key") || !strcmp(f, "token.key") ||
           !strncmp(f, "meta.db", 7) || !strcmp(f, ".space-reserve") ||
           !strncmp(f, "venv/", 5) || !strncmp(f, "mplcache/", 9);
}

/* Regular files under the data dir other than those. */
static void disk_strays(const struct itest_server *s, struct strv *sv)
{
    char **all;
    itest_list_files(s->data_dir, &all);
    for (size_t i = 0; all[i]; i++) {
        if (not_user_data(all[i])) {
            free(all[i]);
            continue;
        }
        strv_push(sv, all[i]);
    }
    free(all);
}

/* ---------------------------------------------------------------- mongo */

static int backend_kind(void)
{
    static int kind; /* 0 unknown, 1 sqlite, 2 mongo */
    if (!kind) {
        const char *e = getenv("ITEST_BACKEND");
        if (!e || !e[0] || !strcmp(e, "sqlite")) {
            kind = 1;
        } else if (!strcmp(e, "mongo")) {
            kind = 2;
        } else {
            fprintf(stderr,
                    "harness: ITEST_BACKEND=\"%s\": want sqlite or "
                    "mongo\n",
                    e);
            exit(2);
        }
    }
    return kind;
}

/* ITEST_EXEC_MODE: 1 cold (also when unset: the suites that are not
 * about executions pin cold, the product's default being warm, so only
 * the integration-warm/ and -session/ variants pay for zygotes), 2 warm, 3
 * session; anything else stops the program loudly, as a wrong ITEST_BACKEND
 * does. */
static int exec_mode_env(void)
{
    static int kind = -1;
    if (kind < 0) {
        const char *e = getenv("ITEST_EXEC_MODE");
        if (!e || !e[0]) {
            kind = 1;
        } else if (!strcmp(e, "cold")) {
            kind = 1;
        } else if (!strcmp(e, "warm")) {
            kind = 2;
        } else if (!strcmp(e, "session")) {
            kind = 3;
        } else {
            fprintf(stderr,
                    "harness: ITEST_EXEC_MODE=\"%s\": want warm, "
                    "cold or session\n",
                    e);
            exit(2);
        }
    }
    return kind;
}

bool itest_exec_warm(void)
{
    /* Session mode starts its servers warm too (see harness.h). */
    return exec_mode_env() >= 2;
}

bool itest_exec_session(void)
{
    return exec_mode_env() == 3;
}

const char *itest_exec_mode_name(void)
{
    return itest_exec_warm() ? "warm" : "cold";
}

bool itest_backend_mongo(void)
{
    return backend_kind() == 2;
}

const char *itest_backend_name(void)
{
    return itest_backend_mongo() ? "mongo" : "sqlite";
}

char *itest_mongo_uri_with_db(const char *base, const char *db,
                              const char *query)
{
    static _Atomic unsigned counter;
    char fresh[64];
    if (!db) {
        uint32_t rnd = 0;
        if (getrandom(&rnd, sizeof(rnd), 0) != (ssize_t)sizeof(rnd))
            rnd = (uint32_t)mono_ms();
        snprintf(fresh, sizeof(fresh), "itest_%d_%u_%08x", (int)getpid(),
                 ++counter, (unsigned)rnd);
        db = fresh;
    }
    const char *scheme = strstr(base, "://");
    const char *host = scheme ? scheme + 3 : base;
    const char *slash = strchr(host, '/');
    const char *q = strchr(host, '?');
    size_t hostlen;
    if (slash && (!q || slash < q))
        hostlen = (size_t)(slash - base);
    else
        hostlen = q ? (size_t)(q - base) : strlen(base);
    const char *old_q = q && q[1] ? q + 1 : NULL;
    return itest_fmt("%.*s/%s%s%s%s%s", (int)hostlen, base, db,
                     old_q || query ? "?" : "", old_q ? old_q : "",
                     old_q && query ? "&" : "", query ? query : "");
}

char *itest_mongo_fixture_uri(const char *db, const char *query)
{
    const char *dir = getenv("IPD_TEST_MONGO_STATE");
    if (!dir || !dir[0]) {
        fprintf(stderr, "harness: IPD_TEST_MONGO_STATE is not set: the "
                        "MongoDB tests run through ctest (fixture "
                        "mongo/start), or set it to a directory holding a "
                        "file 'uri'\n");
        return NULL;
    }
    char *path = itest_fmt("%s/uri", dir);
    size_t len;
    char *base = itest_read_file(path, &len);
    if (!base) {
        fprintf(stderr,
                "harness: no MongoDB server: cannot read %s (did the "
                "mongo/start fixture fail?)\n",
                path);
        free(path);
        return NULL;
    }
    while (len && (base[len - 1] == '\n' || base[len - 1] == '\r' ||
                   base[len - 1] == ' '))
        base[--len] = 0;
    if (!len) {
        fprintf(stderr, "harness: %s is empty\n", path);
        free(path);
        free(base);
        return NULL;
    }
    free(path);
    char *uri = itest_mongo_uri_with_db(base, db, query);
    free(base);
    return uri;
}

/* A client for uri and the URI's database (borrowed from *uri_out; the
 * caller destroys both).  The harness waits at most 5 s for a server
 * unless the URI says otherwise. */
static mongoc_client_t *mongo_connect(const char *uri_str,
                                      mongoc_uri_t **uri_out, const char **db)
{
    bson_error_t err;
    mongoc_uri_t *uri = mongoc_uri_new_with_error(uri_str, &err);
    *uri_out = NULL;
    if (!uri) {
        fprintf(stderr, "harness: bad MongoDB URI %s: %s\n", uri_str,
                err.message);
        return NULL;
    }
    if (!mongoc_uri_has_option(uri, MONGOC_URI_SERVERSELECTIONTIMEOUTMS))
        mongoc_uri_set_option_as_int32(uri, MONGOC_URI_SERVERSELECTIONTIMEOUTMS,
                                       5000);
    mongoc_client_t *c = mongoc_client_new_from_uri_with_error(uri, &err);
    if (!c) {
        fprintf(stderr, "harness: MongoDB client for %s: %s\n", uri_str,
                err.message);
        mongoc_uri_destroy(uri);
        return NULL;
    }
    mongoc_client_set_error_api(c, MONGOC_ERROR_API_VERSION_2);
    *db = mongoc_uri_get_database(uri);
    if (!*db)
        *db = "interpd";
    *uri_out = uri;
    return c;
}

bool itest_mongo_drop(const char *uri_str)
{
    harness_init();
    mongoc_uri_t *uri;
    const char *dbname;
    mongoc_client_t *c = mongo_connect(uri_str, &uri, &dbname);
    if (!c)
        return false;
    mongoc_database_t *db = mongoc_client_get_database(c, dbname);
    bson_error_t err;
    bool ok = mongoc_database_drop_with_opts(db, NULL, &err);
    if (!ok)
        fprintf(stderr, "harness: dropping database %s: %s\n", dbname,
                err.message);
    mongoc_database_destroy(db);
    mongoc_client_destroy(c);
    mongoc_uri_destroy(uri);
    return ok;
}

long itest_mongo_collection_count(const char *uri_str)
{
    harness_init();
    mongoc_uri_t *uri;
    const char *dbname;
    mongoc_client_t *c = mongo_connect(uri_str, &uri, &dbname);
    if (!c)
        return -1;
    mongoc_database_t *db = mongoc_client_get_database(c, dbname);
    bson_error_t err;
    char **names =
        mongoc_database_get_collection_names_with_opts(db, NULL, &err);
    long n = -1;
    if (names) {
        for (n = 0; names[n]; n++)
            ;
        bson_strfreev(names);
    } else {
        fprintf(stderr, "harness: listing the collections of %s: %s\n", dbname,
                err.message);
    }
    mongoc_database_destroy(db);
    mongoc_client_destroy(c);
    mongoc_uri_destroy(uri);
    return n;
}

/* What a store holds, blobs and metadata, on either backend. */
struct inv_blob {
    char *id;       /* owned: the file id */
    int64_t size;   /* bytes (fs.files length) */
    int64_t chunks; /* GridFS: chunk documents seen */
    int64_t chunk_size;
    bool has_file; /* GridFS: an fs.files document exists */
};

struct inventory {
    struct inv_blob *blobs;
    size_t nblobs;
    struct inv_blob *records; /* id and size of each metadata record */
    size_t nrecords;
    struct strv incomplete; /* half-written uploads, described */
    struct strv errors;     /* could not look */
};

static struct inv_blob *inv_find(struct inv_blob *v, size_t n, const char *id)
{
    for (size_t i = 0; i < n; i++)
        if (!strcmp(v[i].id, id))
            return &v[i];
    return NULL;
}

static struct inv_blob *inv_add(struct inv_blob **v, size_t *n, const char *id)
{
    *v = xrealloc(*v, (*n + 1) * sizeof(**v));
    struct inv_blob *b = &(*v)[(*n)++];
    memset(b, 0, sizeof(*b));
    b->id = xstrdup(id);
    return b;
}

static void inventory_release(struct inventory *inv)
{
    for (size_t i = 0; i < inv->nblobs; i++)
        free(inv->blobs[i].id);
    for (size_t i = 0; i < inv->nrecords; i++)
        free(inv->records[i].id);
    free(inv->blobs);
    free(inv->records);
    itest_strv_free(inv->incomplete.v);
    itest_strv_free(inv->errors.v);
    memset(inv, 0, sizeof(*inv));
}

/* The string form of a BSON value used as an id ("?" when not a string). */
static const char *iter_id(const bson_iter_t *it)
{
    return BSON_ITER_HOLDS_UTF8(it) ? bson_iter_utf8(it, NULL) : "?";
}

static int64_t iter_int(const bson_iter_t *it)
{
    if (BSON_ITER_HOLDS_INT32(it))
        return bson_iter_int32(it);
    if (BSON_ITER_HOLDS_INT64(it))
        return bson_iter_int64(it);
    if (BSON_ITER_HOLDS_DOUBLE(it))
        return (int64_t)bson_iter_double(it);
    return -1;
}

/* Run fn on each document of coll matching {} with projection proj. */
static bool mongo_each(mongoc_database_t *db, const char *coll_name,
                       const char *proj_json,
                       void (*fn)(void *cls, const bson_t *doc), void *cls,
                       struct strv *errors)
{
    mongoc_collection_t *coll = mongoc_database_get_collection(db, coll_name);
    bson_t filter = BSON_INITIALIZER;
    bson_error_t err;
    bson_t *opts = bson_new_from_json((const uint8_t *)proj_json, -1, &err);
    if (!opts)
        abort();
    mongoc_cursor_t *cur =
        mongoc_collection_find_with_opts(coll, &filter, opts, NULL);
    const bson_t *doc;
    while (mongoc_cursor_next(cur, &doc))
        fn(cls, doc);
    bool ok = !mongoc_cursor_error(cur, &err);
    if (!ok)
        strv_push(errors, itest_fmt("mongo-error:reading %s: %s", coll_name,
                                    err.message));
    mongoc_cursor_destroy(cur);
    bson_destroy(opts);
    bson_destroy(&filter);
    mongoc_collection_destroy(coll);
    return ok;
}

static void on_gridfs_file(void *cls, const bson_t *doc)
{
    struct inventory *inv = cls;
    bson_iter_t it;
    if (!bson_iter_init_find(&it, doc, "_id"))
        return;
    struct inv_blob *b = inv_find(inv->blobs, inv->nblobs, iter_id(&it));
    if (!b)
        b = inv_add(&inv->blobs, &inv->nblobs, iter_id(&it));
    b->has_file = true;
    b->size = bson_iter_init_find(&it, doc, "length") ? iter_int(&it) : -1;
    b->chunk_size =
        bson_iter_init_find(&it, doc, "chunkSize") ? iter_int(&it) : -1;
}

static void on_gridfs_chunk(void *cls, const bson_t *doc)
{
    struct inventory *inv = cls;
    bson_iter_t it;
    if (!bson_iter_init_find(&it, doc, "files_id"))
        return;
    struct inv_blob *b = inv_find(inv->blobs, inv->nblobs, iter_id(&it));
    if (!b)
        b = inv_add(&inv->blobs, &inv->nblobs, iter_id(&it));
    b->chunks++;
}

static void on_user_file(void *cls, const bson_t *doc)
{
    struct inventory *inv = cls;
    bson_iter_t it;
    if (!bson_iter_init_find(&it, doc, "file_id"))
        return;
    struct inv_blob *r = inv_add(&inv->records, &inv->nrecords, iter_id(&it));
    r->size = bson_iter_init_find(&it, doc, "file_size") ? iter_int(&it) : -1;
}

static void mongo_inventory(const char *uri_str, struct inventory *inv)
{
    mongoc_uri_t *uri;
    const char *dbname;
    memset(inv, 0, sizeof(*inv));
    harness_init();
    mongoc_client_t *c = mongo_connect(uri_str, &uri, &dbname);
    if (!c) {
        strv_push(&inv->errors,
                  itest_fmt("mongo-error:cannot connect to %s", uri_str));
        return;
    }
    mongoc_database_t *db = mongoc_client_get_database(c, dbname);
    /* fs.files first: a chunk group seen without its file is then an
     * orphan for sure (an upload finishing in between shows as
     * incomplete, which the polling callers allow for). */
    mongo_each(db, "fs.files",
               "{\"projection\": {\"_id\": 1, \"length\": 1, "
               "\"chunkSize\": 1}}",
               on_gridfs_file, inv, &inv->errors);
    mongo_each(db, "fs.chunks",
               "{\"projection\": {\"_id\": 0, \"files_id\": 1}}",
               on_gridfs_chunk, inv, &inv->errors);
    mongo_each(db, "user_files",
               "{\"projection\": {\"_id\": 0, \"file_id\": 1, "
               "\"file_size\": 1}}",
               on_user_file, inv, &inv->errors);
    for (size_t i = 0; i < inv->nblobs; i++) {
        struct inv_blob *b = &inv->blobs[i];
        if (!b->has_file)
            strv_push(&inv->incomplete,
                      itest_fmt("gridfs-orphan-chunks:%s (%lld chunks, no "
                                "fs.files document)",
                                b->id, (long long)b->chunks));
    }
    mongoc_database_destroy(db);
    mongoc_client_destroy(c);
    mongoc_uri_destroy(uri);
}

/* Local disk: blobs/<xx>/<id> files, blobs/tmp/ uploads, meta.db rows. */
static void local_inventory(const struct itest_server *s, struct inventory *inv)
{
    char **all;
    memset(inv, 0, sizeof(*inv));
    itest_list_files(s->data_dir, &all);
    for (size_t i = 0; all[i]; i++) {
        const char *f = all[i];
        if (not_user_data(f))
            continue;
        const char *slash = strrchr(f, '/');
        if (!strncmp(f, "blobs/tmp/", 10) || strncmp(f, "blobs/", 6) ||
            !slash) {
            strv_push(&inv->incomplete, itest_fmt("%s", f));
            continue;
        }
        char *path = itest_fmt("%s/%s", s->data_dir, f);
        struct stat st;
        struct inv_blob *b = inv_add(&inv->blobs, &inv->nblobs, slash + 1);
        b->has_file = true;
        b->size = stat(path, &st) ? -1 : (int64_t)st.st_size;
        free(path);
    }
    itest_strv_free(all);

    char *db_path = itest_fmt("%s/meta.db", s->data_dir);
    sqlite3 *db = NULL;
    sqlite3_stmt *st = NULL;
    if (sqlite3_open_v2(db_path, &db, SQLITE_OPEN_READONLY, NULL) ||
        sqlite3_busy_timeout(db, 5000) ||
        sqlite3_prepare_v2(db, "SELECT file_id, size FROM files", -1, &st,
                           NULL)) {
        strv_push(&inv->errors, itest_fmt("sqlite-error:%s: %s", db_path,
                                          db ? sqlite3_errmsg(db) : "?"));
    } else {
        int rc;
        while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
            const unsigned char *id = sqlite3_column_text(st, 0);
            struct inv_blob *r = inv_add(&inv->records, &inv->nrecords,
                                         id ? (const char *)id : "?");
            r->size = sqlite3_column_int64(st, 1);
        }
        if (rc != SQLITE_DONE)
            strv_push(&inv->errors, itest_fmt("sqlite-error:%s: %s", db_path,
                                              sqlite3_errmsg(db)));
    }
    sqlite3_finalize(st);
    sqlite3_close(db);
    free(db_path);
}

static void take_inventory(const struct itest_server *s, struct inventory *inv)
{
    if (s->mongo_uri)
        mongo_inventory(s->mongo_uri, inv);
    else
        local_inventory(s, inv);
}

size_t itest_stray_files(const struct itest_server *s, char ***out)
{
    struct strv sv = {NULL, 0};
    disk_strays(s, &sv);
    if (s->mongo_uri) {
        struct inventory inv;
        mongo_inventory(s->mongo_uri, &inv);
        for (size_t i = 0; i < inv.nblobs; i++)
            if (inv.blobs[i].has_file)
                strv_push(&sv, itest_fmt("gridfs:%s", inv.blobs[i].id));
        for (size_t i = 0; inv.incomplete.v && inv.incomplete.v[i]; i++)
            strv_push(&sv, xstrdup(inv.incomplete.v[i]));
        for (size_t i = 0; inv.errors.v && inv.errors.v[i]; i++)
            strv_push(&sv, xstrdup(inv.errors.v[i]));
        inventory_release(&inv);
    }
    if (!sv.v) {
        sv.v = xrealloc(NULL, sizeof(*sv.v));
        sv.v[0] = NULL;
    }
    *out = sv.v;
    return sv.n;
}

char *itest_read_stored(const struct itest_server *s, const char *entry,
                        size_t *len)
{
    if (strncmp(entry, "gridfs:", 7)) {
        char *path = itest_fmt("%s/%s", s->data_dir, entry);
        char *data = itest_read_file(path, len);
        free(path);
        return data;
    }
    if (!s->mongo_uri)
        return NULL;
    mongoc_uri_t *uri;
    const char *dbname;
    mongoc_client_t *c = mongo_connect(s->mongo_uri, &uri, &dbname);
    if (!c)
        return NULL;
    mongoc_collection_t *coll =
        mongoc_client_get_collection(c, dbname, "fs.chunks");
    bson_t filter = BSON_INITIALIZER;
    BSON_APPEND_UTF8(&filter, "files_id", entry + 7);
    bson_error_t err;
    bson_t *opts =
        bson_new_from_json((const uint8_t *)"{\"sort\": {\"n\": 1}}", -1, &err);
    if (!opts)
        abort();
    mongoc_cursor_t *cur =
        mongoc_collection_find_with_opts(coll, &filter, opts, NULL);
    struct gridfs_bytes {
        char *buf;
        size_t len;
    } out = {xrealloc(NULL, 1), 0};
    const bson_t *doc;
    bool ok = true;
    int64_t want_n = 0;
    while (mongoc_cursor_next(cur, &doc)) {
        bson_iter_t it;
        const uint8_t *bin = NULL;
        uint32_t blen = 0;
        bson_subtype_t sub;
        if (!bson_iter_init_find(&it, doc, "n") || iter_int(&it) != want_n++ ||
            !bson_iter_init_find(&it, doc, "data") ||
            !BSON_ITER_HOLDS_BINARY(&it)) {
            fprintf(stderr,
                    "harness: GridFS %s: chunk %lld missing or "
                    "malformed\n",
                    entry + 7, (long long)(want_n - 1));
            ok = false;
            break;
        }
        bson_iter_binary(&it, &sub, &blen, &bin);
        out.buf = xrealloc(out.buf, out.len + blen + 1);
        memcpy(out.buf + out.len, bin, blen);
        out.len += blen;
    }
    if (mongoc_cursor_error(cur, &err)) {
        fprintf(stderr, "harness: reading GridFS %s: %s\n", entry + 7,
                err.message);
        ok = false;
    }
    mongoc_cursor_destroy(cur);
    bson_destroy(opts);
    bson_destroy(&filter);
    mongoc_collection_destroy(coll);
    mongoc_client_destroy(c);
    mongoc_uri_destroy(uri);
    if (!ok) {
        free(out.buf);
        return NULL;
    }
    out.buf[out.len] = 0;
    if (len)
        *len = out.len;
    return out.buf;
}

bool itest_store_consistent(const struct itest_server *s, size_t *nrecords)
{
    struct inventory inv;
    take_inventory(s, &inv);
    bool ok = true;
    const char *where = s->mongo_uri ? "GridFS" : "blobs/";
#define PROBLEM(...)                                                           \
    do {                                                                       \
        fprintf(stderr, "harness: store: ");                                   \
        fprintf(stderr, __VA_ARGS__);                                          \
        fputc('\n', stderr);                                                   \
        ok = false;                                                            \
    } while (0)
    for (size_t i = 0; inv.errors.v && inv.errors.v[i]; i++)
        PROBLEM("%s", inv.errors.v[i]);
    for (size_t i = 0; inv.incomplete.v && inv.incomplete.v[i]; i++)
        PROBLEM("half-written or unknown: %s", inv.incomplete.v[i]);
    for (size_t i = 0; i < inv.nblobs; i++) {
        const struct inv_blob *b = &inv.blobs[i];
        if (!b->has_file)
            continue; /* reported as incomplete */
        const struct inv_blob *r = inv_find(inv.records, inv.nrecords, b->id);
        if (!r)
            PROBLEM("%s holds %s (%lld bytes) but no metadata record names "
                    "it (an orphan blob)",
                    where, b->id, (long long)b->size);
        else if (r->size != b->size)
            PROBLEM("%s: metadata says %lld bytes, %s holds %lld", b->id,
                    (long long)r->size, where, (long long)b->size);
        if (s->mongo_uri) {
            int64_t want = b->chunk_size > 0
                               ? (b->size + b->chunk_size - 1) / b->chunk_size
                               : -1;
            if (b->chunks != want)
                PROBLEM("GridFS %s: %lld bytes in chunks of %lld want %lld "
                        "chunk documents, found %lld",
                        b->id, (long long)b->size, (long long)b->chunk_size,
                        (long long)want, (long long)b->chunks);
        }
    }
    for (size_t i = 0; i < inv.nrecords; i++) {
        const struct inv_blob *r = &inv.records[i];
        const struct inv_blob *b = inv_find(inv.blobs, inv.nblobs, r->id);
        if (!b || !b->has_file)
            PROBLEM("metadata record %s (%lld bytes) has no bytes in %s", r->id,
                    (long long)r->size, where);
    }
#undef PROBLEM
    if (nrecords)
        *nrecords = inv.nrecords;
    inventory_release(&inv);
    return ok;
}

bool itest_wait_strays_at_most(const struct itest_server *s, size_t max,
                               int timeout_ms)
{
    int64_t deadline = mono_ms() + scaled(timeout_ms);
    for (;;) {
        char **v;
        size_t n = itest_stray_files(s, &v);
        itest_strv_free(v);
        if (n <= max)
            return true;
        if (mono_ms() >= deadline)
            return false;
        sleep_ms(20);
    }
}

void itest_print_strays(const struct itest_server *s)
{
    char **v;
    size_t n = itest_stray_files(s, &v);
    if (s->mongo_uri)
        fprintf(stderr,
                "  GridFS files and chunks of %s, and files under %s "
                "other than admin.key and token.key: %zu\n",
                s->mongo_uri, s->data_dir, n);
    else
        fprintf(stderr,
                "  files under %s other than admin.key, token.key, meta.db* "
                "and venv/: "
                "%zu\n",
                s->data_dir, n);
    for (size_t i = 0; v[i]; i++)
        fprintf(stderr, "    %s\n", v[i]);
    itest_strv_free(v);
}

static int rm_rf(const char *path)
{
    struct stat st;
    if (lstat(path, &st))
        return errno == ENOENT ? 0 : -1;
    if (!S_ISDIR(st.st_mode))
        return unlink(path);
    DIR *d = opendir(path);
    if (!d)
        return -1;
    const struct dirent *e;
    int rc = 0;
    while ((e = readdir(d)) != NULL) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        char *child = itest_fmt("%s/%s", path, e->d_name);
        if (rm_rf(child))
            rc = -1;
        free(child);
    }
    closedir(d);
    if (rmdir(path))
        rc = -1;
    return rc;
}

/* ------------------------------------------------------------ processes */

/* The environment for children: ours without INTERPD_* (a developer's
 * settings must not change what the tests see), plus extra. */
static char **child_env(const char *const *extra)
{
    struct strv sv = {NULL, 0};
    for (char **e = environ; e && *e; e++) {
        if (!strncmp(*e, "INTERPD_", 8))
            continue;
        strv_push(&sv, xstrdup(*e));
    }
    for (size_t i = 0; extra && extra[i]; i++)
        strv_push(&sv, xstrdup(extra[i]));
    if (!sv.v) {
        sv.v = xrealloc(NULL, sizeof(*sv.v));
        sv.v[0] = NULL;
    }
    return sv.v;
}

static const char *interpd_bin(void)
{
    const char *bin = getenv("INTERPD_BIN");
    if (!bin || !bin[0]) {
        fprintf(stderr, "harness: INTERPD_BIN is not set (ctest sets it to "
                        "the built interpd)\n");
        return NULL;
    }
    return bin;
}

/* Wait for pid with a deadline; true when reaped (*status set). */
static bool wait_pid(pid_t pid, int timeout_ms, int *status)
{
    /* Without pidfds (old kernels, valgrind) poll waitpid instead; ask
     * only once, as valgrind warns on every unknown syscall. */
    static _Atomic bool no_pidfd;
    int64_t deadline = mono_ms() + timeout_ms;
    int pfd = no_pidfd ? -1 : (int)syscall(SYS_pidfd_open, pid, 0);
    if (pfd < 0 && errno == ENOSYS)
        no_pidfd = true;
    for (;;) {
        pid_t r = waitpid(pid, status, WNOHANG);
        if (r == pid) {
            if (pfd >= 0)
                close(pfd);
            return true;
        }
        if (r < 0 && errno != EINTR) {
            if (pfd >= 0)
                close(pfd);
            *status = -1;
            return true;
        }
        int64_t left = deadline - mono_ms();
        if (left <= 0)
            break;
        if (pfd >= 0) {
            /* The pidfd becomes readable when the process exits. */
            struct pollfd p = {pfd, POLLIN, 0};
            poll(&p, 1, (int)left);
        } else {
            sleep_ms(left < 10 ? (int)left : 10);
        }
    }
    if (pfd >= 0)
        close(pfd);
    return false;
}

static void print_file_tail(const char *path, int lines, const char *title)
{
    size_t len;
    char *text = itest_read_file(path, &len);
    if (!text) {
        fprintf(stderr, "---- %s: %s unreadable\n", title, path);
        return;
    }
    size_t start = len;
    int seen = 0;
    while (start > 0) {
        if (text[start - 1] == '\n' && start != len && ++seen >= lines)
            break;
        start--;
    }
    fprintf(stderr, "---- %s (%s), last %d lines:\n%s%s---- end\n", title, path,
            lines, text + start, len && text[len - 1] != '\n' ? "\n" : "");
    free(text);
}

void itest_print_log_tail(const struct itest_server *s, int lines)
{
    print_file_tail(s->log_path, lines, "server log");
}

char *itest_read_log(const struct itest_server *s)
{
    return itest_read_file(s->log_path, NULL);
}

/* Poll the admin status until ok(value at path) or the deadline. */
static bool wait_status(struct itest_server *s, const char *path,
                        long long want, bool at_least, int timeout_ms)
{
    int64_t deadline = mono_ms() + scaled(timeout_ms);
    for (;;) {
        struct itest_resp r;
        itest_request(s, "GET", "/v1/admin/status", s->admin_key, NULL, NULL,
                      NULL, 0, NULL, &r);
        json_t *v = r.status == 200 ? itest_json_get(r.json, path) : NULL;
        long long n = json_is_integer(v) ? json_integer_value(v) : -1;
        itest_resp_release(&r);
        if (at_least ? n >= want : n == want)
            return true;
        if (mono_ms() >= deadline)
            return false;
        sleep_ms(50);
    }
}

bool itest_wait_job_ran(struct itest_server *s, const char *name,
                        int timeout_ms)
{
    char path[128];
    snprintf(path, sizeof(path), "jobs.%s.runs", name);
    return wait_status(s, path, 1, true, timeout_ms);
}

bool itest_wait_status_int(struct itest_server *s, const char *path,
                           long long want, int timeout_ms)
{
    return wait_status(s, path, want, false, timeout_ms);
}

bool itest_wait_log_line(const struct itest_server *s, int timeout_ms, ...)
{
    const char *needles[16];
    size_t n = 0;
    va_list ap;
    va_start(ap, timeout_ms);
    const char *p;
    while ((p = va_arg(ap, const char *)) != NULL && n < 16)
        needles[n++] = p;
    va_end(ap);

    int64_t deadline = mono_ms() + scaled(timeout_ms);
    for (;;) {
        char *log = itest_read_log(s);
        bool found = false;
        for (char *line = log; line && *line && !found;) {
            char *eol = strchr(line, '\n');
            if (eol)
                *eol = 0;
            found = true;
            for (size_t i = 0; i < n && found; i++)
                found = strstr(line, needles[i]) != NULL;
            line = eol ? eol + 1 : line + strlen(line);
        }
        free(log);
        if (found)
            return true;
        if (mono_ms() >= deadline)
            return false;
        sleep_ms(20);
    }
}

/* Read the port the server writes on its ready fd: the startup event. */
static int read_port(int fd, pid_t pid)
{
    char buf[32];
    size_t n = 0;
    int64_t deadline = mono_ms() + scaled(STARTUP_TIMEOUT_MS);
    for (;;) {
        int64_t left = deadline - mono_ms();
        if (left <= 0) {
            fprintf(stderr,
                    "harness: server pid %d wrote no port on its "
                    "ready fd within %d ms\n",
                    (int)pid, STARTUP_TIMEOUT_MS);
            return -1;
        }
        struct pollfd p = {fd, POLLIN, 0};
        int pr = poll(&p, 1, (int)left);
        if (pr < 0 && errno == EINTR)
            continue;
        if (pr <= 0)
            continue;
        ssize_t r = read(fd, buf + n, sizeof(buf) - 1 - n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break; /* EOF: the server closed the fd */
        n += (size_t)r;
        /* The newline completes the port; the close should follow, but a
         * server that keeps the fd open still told us its port. */
        if (n >= sizeof(buf) - 1 || memchr(buf, '\n', n))
            break;
    }
    buf[n] = 0;
    char *end;
    errno = 0;
    long port = strtol(buf, &end, 10);
    if (n == 0 || errno || end == buf || *end != '\n' || end[1] != 0 ||
        port <= 0 || port > 65535) {
        fprintf(stderr,
                "harness: server pid %d reported no valid port on its "
                "ready fd: got \"%s\" (want decimal + \"\\n\", then "
                "EOF)\n",
                (int)pid, buf);
        return -1;
    }
    return (int)port;
}

/* The value of the last `exec-mode = VALUE` line of a config text, into
 * buf; NULL when it sets none. */
static const char *config_exec_mode(const char *config, char *buf, size_t len)
{
    const char *found = NULL;
    for (const char *l = config; l && *l;) {
        const char *eol = strchr(l, '\n');
        size_t n = eol ? (size_t)(eol - l) : strlen(l);
        while (n && (*l == ' ' || *l == '\t'))
            l++, n--;
        if (n > 9 && !strncmp(l, "exec-mode", 9) &&
            (l[9] == ' ' || l[9] == '\t' || l[9] == '=')) {
            const char *v = memchr(l, '=', n);
            if (v) {
                size_t vn = n - (size_t)(v + 1 - l);
                v++;
                while (vn && (*v == ' ' || *v == '\t' || *v == '"'))
                    v++, vn--;
                while (vn && strchr(" \t\r\"", v[vn - 1]))
                    vn--;
                snprintf(buf, len, "%.*s", (int)vn, v);
                found = buf;
            }
        }
        l = eol ? eol + 1 : l + n;
    }
    return found;
}

/* The mode of the last --exec-mode of args; NULL when there is none. */
static const char *args_exec_mode(const char *const *args)
{
    const char *found = NULL;
    for (size_t i = 0; args && args[i]; i++) {
        if (!strcmp(args[i], "--exec-mode") && args[i + 1])
            found = args[++i];
        else if (!strncmp(args[i], "--exec-mode=", 12))
            found = args[i] + 12;
    }
    return found;
}

/* ITEST_EXEC_MODE=warm|cold adds `--exec-mode MODE` to argv, before the
 * test's own arguments (the command line is read in order: a later flag
 * wins, service/config.c load_flags) and only when the test's config
 * text sets no exec-mode (a flag would override the file).  s->warm says
 * which mode the server was asked for in the end. */
static void push_exec_mode(struct itest_server *s, const struct itest_opts *o,
                           struct strv *argv)
{
    char buf[32];
    const char *mode = args_exec_mode(o ? o->args : NULL);
    const char *file = config_exec_mode(o ? o->config : NULL, buf, sizeof(buf));
    if (exec_mode_env() && !file) {
        strv_push(argv, xstrdup("--exec-mode"));
        strv_push(argv, xstrdup(itest_exec_mode_name()));
    }
    if (!mode)
        mode = file;
    if (!mode && exec_mode_env())
        mode = itest_exec_mode_name();
    s->warm = mode && !strcmp(mode, "warm");
}

static bool spawn_server(struct itest_server *s, const struct itest_opts *o,
                         const char *config_path)
{
    const char *bin = interpd_bin();
    if (!bin)
        return false;

    struct strv argv = {NULL, 0};
    /* ITEST_SERVER_WRAPPER="valgrind -q --error-exitcode=99" runs the
     * server under a tool (words split on spaces). */
    const char *wrap = getenv("ITEST_SERVER_WRAPPER");
    for (const char *w = wrap; w && *w;) {
        while (*w == ' ')
            w++;
        const char *e = w;
        while (*e && *e != ' ')
            e++;
        if (e > w) {
            char *word = strndup(w, (size_t)(e - w));
            if (!word)
                abort();
            strv_push(&argv, word);
        }
        w = e;
    }
    if (argv.v && argv.v[0][0] != '/') {
        /* execve wants a path: resolve the tool in PATH. */
        char *resolved = NULL;
        const char *path = getenv("PATH");
        for (const char *p = path; p && *p && !resolved;) {
            const char *e = strchr(p, ':');
            size_t n = e ? (size_t)(e - p) : strlen(p);
            char *cand = itest_fmt("%.*s/%s", (int)n, p, argv.v[0]);
            if (access(cand, X_OK) == 0)
                resolved = cand;
            else
                free(cand);
            p += n + (e ? 1 : 0);
        }
        if (resolved) {
            free(argv.v[0]);
            argv.v[0] = resolved;
        }
    }
    strv_push(&argv, xstrdup(bin));
    strv_push(&argv, xstrdup("serve"));
    strv_push(&argv, xstrdup("--listen"));
    strv_push(&argv, xstrdup("127.0.0.1:0"));
    bool relative = o && o->relative_data_dir;
    strv_push(&argv, xstrdup("--data-dir"));
    strv_push(&argv, xstrdup(relative ? "./data" : s->data_dir));
    strv_push(&argv, xstrdup("--ready-fd"));
    strv_push(&argv, xstrdup("3"));
    if (s->mongo_uri) {
        strv_push(&argv, xstrdup("--mongo-uri"));
        strv_push(&argv, xstrdup(s->mongo_uri));
        strv_push(&argv, xstrdup("--blob-store"));
        strv_push(&argv, xstrdup("gridfs"));
    }
    if (config_path) {
        strv_push(&argv, xstrdup("--config"));
        strv_push(&argv, xstrdup(config_path));
    }
    push_exec_mode(s, o, &argv);
    for (size_t i = 0; o && o->args && o->args[i]; i++)
        strv_push(&argv, xstrdup(o->args[i]));
    char **envp = child_env(o ? o->env : NULL);

    int p[2];
    if (pipe2(p, O_CLOEXEC)) {
        perror("harness: pipe2");
        itest_strv_free(argv.v);
        itest_strv_free(envp);
        return false;
    }
    int logfd =
        open(s->log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    if (logfd < 0) {
        perror("harness: open server log");
        close(p[0]);
        close(p[1]);
        itest_strv_free(argv.v);
        itest_strv_free(envp);
        return false;
    }
    {
        FILE *lf = fopen(s->log_path, "a");
        if (lf) {
            fprintf(lf, "==== harness: starting:");
            for (size_t i = 0; argv.v[i]; i++)
                fprintf(lf, " %s", argv.v[i]);
            for (size_t i = 0; o && o->env && o->env[i]; i++)
                fprintf(lf, " [env %s]", o->env[i]);
            fprintf(lf, "\n");
            fclose(lf);
        }
    }

    pid_t pid = fork();
    if (pid < 0) {
        perror("harness: fork");
        close(p[0]);
        close(p[1]);
        close(logfd);
        itest_strv_free(argv.v);
        itest_strv_free(envp);
        return false;
    }
    if (pid == 0) {
        int nullfd = open("/dev/null", O_RDONLY);
        if (nullfd >= 0)
            dup2(nullfd, 0);
        dup2(logfd, 1);
        dup2(logfd, 2);
        if (p[1] == 3)
            fcntl(3, F_SETFD, 0);
        else
            dup2(p[1], 3); /* dup2 clears FD_CLOEXEC on fd 3 */
        if (relative && chdir(s->tmp_dir)) {
            dprintf(2, "harness: chdir %s: %s\n", s->tmp_dir, strerror(errno));
            _exit(127);
        }
        execve(argv.v[0], argv.v, envp);
        dprintf(2, "harness: execve %s: %s\n", argv.v[0], strerror(errno));
        _exit(127);
    }
    close(p[1]);
    close(logfd);
    itest_strv_free(argv.v);
    itest_strv_free(envp);

    s->pid = pid;
    s->exit_status = 0;
    int port = read_port(p[0], pid);
    close(p[0]);
    if (port < 0) {
        int st;
        if (!wait_pid(pid, 2000, &st)) {
            kill(pid, SIGKILL);
            wait_pid(pid, 5000, &st);
        } else {
            fprintf(stderr,
                    "harness: server exited during startup, wait "
                    "status 0x%x\n",
                    (unsigned)st);
        }
        s->pid = 0;
        s->exit_status = st;
        return false;
    }
    s->port = port;
    snprintf(s->url, sizeof(s->url), "http://127.0.0.1:%d", port);
    if (s->no_admin_key)
        return true;

    char *key_path = itest_fmt("%s/admin.key", s->data_dir);
    size_t klen;
    char *key = itest_read_file(key_path, &klen);
    if (!key || klen < 2 || key[klen - 1] != '\n') {
        fprintf(stderr,
                "harness: %s %s (want the admin key and a "
                "newline)\n",
                key_path, key ? "has a bad format" : "is missing");
        free(key);
        free(key_path);
        return false;
    }
    free(key_path);
    key[klen - 1] = 0;
    free(s->admin_key);
    s->admin_key = key;
    return true;
}

/* Poll GET /readyz until it answers 200 with execution_mode == mode or
 * the deadline; the last answer's body (new string) in *last when asked. */
static bool poll_exec_mode(struct itest_server *s, const char *mode,
                           int timeout_ms, char **last)
{
    int64_t deadline = mono_ms() + scaled(timeout_ms);
    for (;;) {
        struct itest_resp r;
        itest_request(s, "GET", "/readyz", NULL, NULL, NULL, NULL, 0, NULL, &r);
        const char *m =
            r.status == 200 ? itest_json_str(r.json, "execution_mode") : NULL;
        bool ok = m && !strcmp(m, mode);
        if (last && (ok || mono_ms() >= deadline))
            *last = itest_fmt("%ld %s", r.status, r.body);
        itest_resp_release(&r);
        if (ok)
            return true;
        if (mono_ms() >= deadline)
            return false;
        sleep_ms(50);
    }
}

bool itest_wait_exec_mode(struct itest_server *s, const char *mode,
                          int timeout_ms)
{
    return poll_exec_mode(s, mode, timeout_ms, NULL);
}

/* A server started warm serves warm before the test measures anything:
 * every slot's zygote is up.  Loud when it never gets there. */
static bool wait_warm_after_start(struct itest_server *s,
                                  const struct itest_opts *o)
{
    char *last = NULL;
    if (!s->warm || (o && o->no_warm_wait))
        return true;
    if (poll_exec_mode(s, "warm", WARM_TIMEOUT_MS, &last)) {
        free(last);
        return true;
    }
    fprintf(stderr,
            "harness: server pid %d started with --exec-mode warm "
            "never served warm within %d ms; last GET /readyz: %s\n",
            (int)s->pid, scaled(WARM_TIMEOUT_MS), last ? last : "(none)");
    free(last);
    if (s->admin_key) {
        struct itest_resp r;
        itest_request(s, "GET", "/v1/admin/status", s->admin_key, NULL, NULL,
                      NULL, 0, NULL, &r);
        json_t *em = itest_json_get(r.json, "execution_mode");
        char *dump = em ? json_dumps(em, JSON_COMPACT) : NULL;
        fprintf(stderr, "harness: admin status execution_mode: %s\n",
                dump ? dump : r.body);
        free(dump);
        itest_resp_release(&r);
    }
    return false;
}

static void server_free(struct itest_server *s)
{
    for (struct itest_server **pp = &live_servers; *pp; pp = &(*pp)->next) {
        if (*pp == s) {
            *pp = s->next;
            break;
        }
    }
    free(s->tmp_dir);
    free(s->data_dir);
    free(s->log_path);
    free(s->admin_key);
    free(s->mongo_uri);
    free(s);
}

/* Kill a server that failed to come up and keep its dir for a look. */
static void abandon(struct itest_server *s)
{
    if (s->pid) {
        int st;
        kill(s->pid, SIGKILL);
        wait_pid(s->pid, 5000, &st);
        s->pid = 0;
    }
    itest_print_log_tail(s, LOG_TAIL_LINES);
    fprintf(stderr, "harness: keeping %s\n", s->tmp_dir);
    if (s->mongo_uri)
        fprintf(stderr, "harness: keeping the database of %s\n", s->mongo_uri);
    server_free(s);
}

struct itest_server *itest__start(const struct itest_opts *opts, int fail_mark)
{
    harness_init();
    struct itest_server *s = calloc(1, sizeof(*s));
    if (!s)
        abort();
    s->fail_mark = fail_mark;
    const char *base = getenv("TMPDIR");
    if (!base || !base[0])
        base = "/tmp";
    char *tmpl = itest_fmt("%s/interpd-itest-XXXXXX", base);
    if (!mkdtemp(tmpl)) {
        fprintf(stderr, "harness: mkdtemp %s: %s\n", tmpl, strerror(errno));
        free(tmpl);
        free(s);
        return NULL;
    }
    /* Searchable (not readable) by others, like /var/lib, or private like
     * /root: the sandbox's uid never has to walk it either way. */
    chmod(tmpl, opts && opts->private_parent ? 0700 : 0711);
    s->tmp_dir = tmpl;
    s->data_dir = itest_fmt("%s/data", tmpl);
    s->log_path = itest_fmt("%s/server.log", tmpl);
    s->next = live_servers;
    live_servers = s;
    s->no_admin_key = opts && opts->no_admin_key;
    if (opts && opts->mongo_uri) {
        s->mongo_uri = xstrdup(opts->mongo_uri);
    } else if (itest_backend_mongo()) {
        s->mongo_uri = itest_mongo_fixture_uri(NULL, NULL);
        if (!s->mongo_uri) {
            abandon(s);
            return NULL;
        }
        s->drop_db = true;
    }
    if (mkdir(s->data_dir, 0700)) {
        fprintf(stderr, "harness: mkdir %s: %s\n", s->data_dir,
                strerror(errno));
        abandon(s);
        return NULL;
    }
    char *config_path = NULL;
    if (opts && opts->config) {
        config_path = itest_fmt("%s/interpd.conf", tmpl);
        if (!write_file(config_path, opts->config, 0600)) {
            fprintf(stderr, "harness: cannot write %s\n", config_path);
            free(config_path);
            abandon(s);
            return NULL;
        }
    }
    bool ok =
        spawn_server(s, opts, config_path) && wait_warm_after_start(s, opts);
    free(config_path);
    if (!ok) {
        fprintf(stderr, "harness: the server did not start\n");
        abandon(s);
        return NULL;
    }
    return s;
}

/* SIGTERM and reap; true when it exited 0. */
static bool terminate(struct itest_server *s)
{
    if (!s->pid)
        return true;
    int st = 0;
    bool ok = true;
    kill(s->pid, SIGTERM);
    if (!wait_pid(s->pid, scaled(STOP_TIMEOUT_MS), &st)) {
        fprintf(stderr,
                "harness: server pid %d did not exit within %d ms of "
                "SIGTERM; killing it\n",
                (int)s->pid, STOP_TIMEOUT_MS);
        kill(s->pid, SIGKILL);
        wait_pid(s->pid, 5000, &st);
        ok = false;
    } else if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        if (WIFSIGNALED(st))
            fprintf(stderr,
                    "harness: server pid %d died of signal %d after "
                    "SIGTERM (want exit 0)\n",
                    (int)s->pid, WTERMSIG(st));
        else
            fprintf(stderr,
                    "harness: server pid %d exited %d after SIGTERM "
                    "(want 0)\n",
                    (int)s->pid, WIFEXITED(st) ? WEXITSTATUS(st) : -1);
        ok = false;
    }
    s->pid = 0;
    s->exit_status = st;
    return ok;
}

/* Session mode: the hook deleted every session it made, each answer
 * named its session, and the server has no live session left. */
static bool sessions_clean(struct itest_server *s)
{
    if (!itest_exec_session() || !s->pid)
        return true;
    int errs = __atomic_load_n(&s->session_errors, __ATOMIC_SEQ_CST);
    bool ok = errs == 0;
    fprintf(stderr,
            "harness: session mode: server pid %d ran %d "
            "executions in sessions of their own\n",
            (int)s->pid, __atomic_load_n(&s->session_calls, __ATOMIC_SEQ_CST));
    if (errs)
        fprintf(stderr,
                "harness: session mode: %d failures of the session "
                "hook (above)\n",
                errs);
    if (s->admin_key) {
        struct itest_resp r;
        itest_request(s, "GET", "/v1/admin/status", s->admin_key, NULL, NULL,
                      NULL, 0, NULL, &r);
        json_t *live = itest_json_get(r.json, "sessions.live");
        if (r.status == 200 && json_is_integer(live) &&
            json_integer_value(live) != 0) {
            char *d =
                json_dumps(itest_json_get(r.json, "sessions"), JSON_COMPACT);
            fprintf(stderr,
                    "harness: session mode: %lld live sessions left "
                    "at the end: \"sessions\": %s\n",
                    (long long)json_integer_value(live), d ? d : "?");
            free(d);
            ok = false;
        }
        itest_resp_release(&r);
    }
    return ok;
}

bool itest__stop(struct itest_server *s, int failed_now)
{
    if (!s)
        return true;
    bool clean = sessions_clean(s);
    bool ok = terminate(s) && clean;
    if (!ok || failed_now != s->fail_mark) {
        itest_print_log_tail(s, LOG_TAIL_LINES);
        fprintf(stderr, "harness: test failed; keeping %s\n", s->tmp_dir);
        if (s->mongo_uri)
            fprintf(stderr, "harness: keeping the database of %s\n",
                    s->mongo_uri);
        server_free(s);
        return ok;
    }
    if (s->drop_db && !itest_mongo_drop(s->mongo_uri))
        ok = false;
    if (rm_rf(s->tmp_dir))
        fprintf(stderr, "harness: could not remove %s\n", s->tmp_dir);
    server_free(s);
    return ok;
}

bool itest_restart(struct itest_server *s, const struct itest_opts *opts)
{
    if (!terminate(s))
        return false;
    char *config_path = NULL;
    if (opts && opts->config) {
        config_path = itest_fmt("%s/interpd.conf", s->tmp_dir);
        if (!write_file(config_path, opts->config, 0600)) {
            free(config_path);
            return false;
        }
    }
    bool ok = spawn_server(s, opts, config_path);
    free(config_path);
    if (ok && !wait_warm_after_start(s, opts)) {
        int st;
        kill(s->pid, SIGKILL);
        wait_pid(s->pid, 5000, &st);
        s->pid = 0;
        s->exit_status = st;
        ok = false;
    }
    if (!ok)
        fprintf(stderr, "harness: the server did not restart\n");
    return ok;
}

void itest_signal(struct itest_server *s, int sig)
{
    if (s->pid)
        kill(s->pid, sig);
}

bool itest_wait_exit(struct itest_server *s, int timeout_ms, int *status)
{
    if (!s->pid) {
        *status = s->exit_status;
        return true;
    }
    if (!wait_pid(s->pid, scaled(timeout_ms), status))
        return false;
    s->pid = 0;
    s->exit_status = *status;
    return true;
}

static bool sig_pending(pid_t pid, int sig)
{
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    char *st = itest_read_file(path, NULL);
    if (!st)
        return false;
    bool pending = false;
    static const char *const fields[] = {"\nSigPnd:", "\nShdPnd:"};
    for (size_t i = 0; i < 2; i++) {
        const char *f = strstr(st, fields[i]);
        if (!f)
            continue;
        unsigned long long mask = strtoull(f + strlen(fields[i]), NULL, 16);
        if (mask & (1ULL << (sig - 1)))
            pending = true;
    }
    free(st);
    return pending;
}

bool itest_wait_signal_delivered(struct itest_server *s, int sig,
                                 int timeout_ms)
{
    int64_t deadline = mono_ms() + scaled(timeout_ms);
    while (s->pid && sig_pending(s->pid, sig)) {
        if (mono_ms() >= deadline)
            return false;
        sleep_ms(1);
    }
    return true;
}

static void cleanup_at_exit(void)
{
    while (live_servers) {
        struct itest_server *s = live_servers;
        if (s->pid) {
            fprintf(stderr,
                    "harness: server pid %d still running at exit (a "
                    "test returned early); killing it\n",
                    (int)s->pid);
            int st;
            kill(s->pid, SIGKILL);
            wait_pid(s->pid, 5000, &st);
            s->pid = 0;
        }
        itest_print_log_tail(s, LOG_TAIL_LINES);
        fprintf(stderr, "harness: keeping %s\n", s->tmp_dir);
        server_free(s);
    }
    curl_global_cleanup();
    mongoc_cleanup();
}

int itest_rm_rf(const char *path)
{
    return rm_rf(path);
}

int itest_run(const char *const *argv, const char *const *unset, int timeout_ms)
{
    struct strv env = {NULL, 0};
    for (char **e = environ; e && *e; e++) {
        bool drop = false;
        for (size_t i = 0; unset && unset[i] && !drop; i++) {
            size_t n = strlen(unset[i]);
            drop = !strncmp(*e, unset[i], n) && (*e)[n] == '=';
        }
        if (!drop)
            strv_push(&env, xstrdup(*e));
    }
    if (!env.v) {
        env.v = xrealloc(NULL, sizeof(*env.v));
        env.v[0] = NULL;
    }
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        int nullfd = open("/dev/null", O_RDONLY);
        if (nullfd >= 0)
            dup2(nullfd, 0);
        execve(argv[0], (char *const *)(uintptr_t)argv, env.v);
        dprintf(2, "harness: execve %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    itest_strv_free(env.v);
    if (pid < 0) {
        perror("harness: fork");
        return -1;
    }
    int st = 0;
    if (!wait_pid(pid, scaled(timeout_ms), &st)) {
        fprintf(stderr,
                "harness: %s %s did not finish within %d ms; killing "
                "it\n",
                argv[0], argv[1] ? argv[1] : "", timeout_ms);
        kill(pid, SIGKILL);
        wait_pid(pid, 5000, &st);
        return -1;
    }
    if (!WIFEXITED(st)) {
        fprintf(stderr, "harness: %s %s: wait status 0x%x\n", argv[0],
                argv[1] ? argv[1] : "", (unsigned)st);
        return -1;
    }
    return WEXITSTATUS(st);
}

/* ------------------------------------------------------------------ CLI */

/* itest_cli and itest_cli_in: the CLI run in cwd (NULL: ours). */
static int cli_run(struct itest_server *s, const char *cwd, char **out,
                   va_list ap)
{
    if (out)
        *out = NULL;
    const char *bin = interpd_bin();
    if (!bin)
        return -1;
    struct strv argv = {NULL, 0};
    strv_push(&argv, xstrdup(bin));
    const char *a;
    while ((a = va_arg(ap, const char *)) != NULL)
        strv_push(&argv, xstrdup(a));
    /* The CLI works on the server's stores: on MongoDB, its database. */
    char *mongo_env =
        s->mongo_uri ? itest_fmt("INTERPD_MONGO_URI=%s", s->mongo_uri) : NULL;
    const char *const extra_env[] = {mongo_env, NULL};
    char **envp = child_env(extra_env);
    free(mongo_env);
    char *cli_log = itest_fmt("%s/cli.log", s->tmp_dir);

    int p[2];
    int logfd = open(cli_log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    if (logfd < 0 || pipe2(p, O_CLOEXEC)) {
        perror("harness: cli setup");
        if (logfd >= 0)
            close(logfd);
        free(cli_log);
        itest_strv_free(argv.v);
        itest_strv_free(envp);
        return -1;
    }
    pid_t pid = fork();
    if (pid == 0) {
        int nullfd = open("/dev/null", O_RDONLY);
        if (nullfd >= 0)
            dup2(nullfd, 0);
        dup2(p[1], 1);
        dup2(logfd, 2);
        if (cwd && chdir(cwd)) {
            dprintf(2, "harness: chdir %s: %s\n", cwd, strerror(errno));
            _exit(127);
        }
        execve(argv.v[0], argv.v, envp);
        dprintf(2, "harness: execve %s: %s\n", argv.v[0], strerror(errno));
        _exit(127);
    }
    close(p[1]);
    close(logfd);

    size_t cap = 4096, n = 0;
    char *buf = xrealloc(NULL, cap);
    int64_t deadline = mono_ms() + scaled(CLI_TIMEOUT_MS);
    int code = -1;
    if (pid > 0) {
        for (;;) {
            int64_t left = deadline - mono_ms();
            if (left <= 0)
                break;
            struct pollfd pf = {p[0], POLLIN, 0};
            if (poll(&pf, 1, (int)left) <= 0)
                continue;
            if (n + 1 >= cap) {
                cap *= 2;
                buf = xrealloc(buf, cap);
            }
            ssize_t r = read(p[0], buf + n, cap - n - 1);
            if (r < 0 && errno == EINTR)
                continue;
            if (r <= 0)
                break;
            n += (size_t)r;
        }
        int st;
        int64_t left = deadline - mono_ms();
        if (!wait_pid(pid, left > 0 ? (int)left : 1, &st)) {
            fprintf(stderr, "harness: `%s %s` did not finish within %d ms\n",
                    bin, argv.v[1] ? argv.v[1] : "", CLI_TIMEOUT_MS);
            kill(pid, SIGKILL);
            wait_pid(pid, 5000, &st);
        } else if (WIFEXITED(st)) {
            code = WEXITSTATUS(st);
        } else {
            fprintf(stderr, "harness: `%s %s` died with wait status 0x%x\n",
                    bin, argv.v[1] ? argv.v[1] : "", (unsigned)st);
        }
    }
    close(p[0]);
    buf[n] = 0;
    if (out)
        *out = buf;
    else
        free(buf);
    free(cli_log);
    itest_strv_free(argv.v);
    itest_strv_free(envp);
    return code;
}

int itest_cli(struct itest_server *s, char **out, ...)
{
    va_list ap;
    va_start(ap, out);
    int code = cli_run(s, NULL, out, ap);
    va_end(ap);
    return code;
}

int itest_cli_in(struct itest_server *s, const char *cwd, char **out, ...)
{
    va_list ap;
    va_start(ap, out);
    int code = cli_run(s, cwd, out, ap);
    va_end(ap);
    return code;
}

bool itest_create_key(struct itest_server *s, const char *tenant, bool admin,
                      char **key, char **key_id)
{
    char *out = NULL;
    int code = itest_cli(s, &out, "keys", "create", "--data-dir", s->data_dir,
                         "--tenant", tenant, admin ? "--admin" : NULL, NULL);
    bool ok = false;
    json_error_t jerr;
    json_t *j = out ? json_loads(out, JSON_DECODE_ANY, &jerr) : NULL;
    const char *k = itest_json_str(j, "key");
    const char *id = itest_json_str(j, "key_id");
    if (code != 0 || !k || !id) {
        fprintf(stderr,
                "harness: `interpd keys create --tenant %s%s`: exit "
                "%d, stdout: %s (want exit 0 and a JSON object with "
                "\"key\" and \"key_id\")\n",
                tenant, admin ? " --admin" : "", code, out ? out : "(none)");
        char *cli_log = itest_fmt("%s/cli.log", s->tmp_dir);
        print_file_tail(cli_log, 20, "cli stderr");
        free(cli_log);
    } else {
        ok = true;
        if (key)
            *key = xstrdup(k);
        if (key_id)
            *key_id = xstrdup(id);
    }
    json_decref(j);
    free(out);
    return ok;
}

char *itest_create_policy_key(struct itest_server *s, const char *tenant,
                              const char *policy)
{
    char *out = NULL, *key = NULL;
    char *conf = itest_fmt("%s/interpd.conf", s->tmp_dir);
    json_error_t jerr;
    /* The server's config file when it was started with one (its
     * policies); else its flags' built-in policies. */
    int code =
        access(conf, F_OK) == 0
            ? itest_cli(s, &out, "keys", "create", "--config", conf,
                        "--data-dir", s->data_dir, "--tenant", tenant,
                        "--policy", policy, NULL)
            : itest_cli(s, &out, "keys", "create", "--data-dir", s->data_dir,
                        "--tenant", tenant, "--policy", policy, NULL);
    json_t *j = out ? json_loads(out, 0, &jerr) : NULL;
    if (code == 0 && itest_json_str(j, "key"))
        key = itest_json_dup(j, "key");
    else
        fprintf(stderr,
                "harness: `interpd keys create --tenant %s --policy %s`: "
                "exit %d, stdout: %s (want exit 0 and a \"key\")\n",
                tenant, policy, code, out ? out : "(none)");
    json_decref(j);
    free(out);
    free(conf);
    return key;
}

/* ----------------------------------------------------------------- HTTP */

struct sink {
    char *buf;
    size_t len, cap;
};

static size_t body_cb(char *data, size_t size, size_t n, void *ctx)
{
    struct sink *b = ctx;
    size_t add = size * n;
    if (b->len + add + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + add + 1)
            cap *= 2;
        b->buf = xrealloc(b->buf, cap);
        b->cap = cap;
    }
    memcpy(b->buf + b->len, data, add);
    b->len += add;
    b->buf[b->len] = 0;
    return add;
}

static void headers_clear(struct itest_resp *r)
{
    for (size_t i = 0; i < r->nheaders; i++) {
        free(r->headers[i].name);
        free(r->headers[i].value);
    }
    free(r->headers);
    r->headers = NULL;
    r->nheaders = 0;
}

static size_t header_cb(char *data, size_t size, size_t n, void *ctx)
{
    struct itest_resp *r = ctx;
    size_t len = size * n;
    /* A status line starts a new response (after 100 Continue, say). */
    if (len >= 5 && !memcmp(data, "HTTP/", 5)) {
        headers_clear(r);
        return len;
    }
    const char *colon = memchr(data, ':', len);
    if (!colon)
        return len;
    size_t nlen = (size_t)(colon - data);
    const char *v = colon + 1;
    const char *end = data + len;
    while (v < end && (*v == ' ' || *v == '\t'))
        v++;
    while (end > v && (end[-1] == '\r' || end[-1] == '\n' || end[-1] == ' ' ||
                       end[-1] == '\t'))
        end--;
    r->headers = xrealloc(r->headers, (r->nheaders + 1) * sizeof(*r->headers));
    struct itest_header *h = &r->headers[r->nheaders++];
    h->name = strndup(data, nlen);
    h->value = strndup(v, (size_t)(end - v));
    if (!h->name || !h->value)
        abort();
    return len;
}

const char *itest_header(const struct itest_resp *r, const char *name)
{
    for (size_t i = 0; i < r->nheaders; i++)
        if (!strcasecmp(r->headers[i].name, name))
            return r->headers[i].value;
    return NULL;
}

long itest_exec(struct itest_server *s, const char *key, const char *user,
                json_t *body, long timeout_ms, struct itest_resp *out)
{
    if (!body) {
        fprintf(stderr, "harness: itest_exec: no body (json_pack failed?)\n");
        abort();
    }
    char *text = json_dumps(body, JSON_COMPACT);
    json_decref(body);
    struct itest_req rq = {.method = "POST",
                           .path = "/v1/executions",
                           .key = key,
                           .user_id = user,
                           .content_type = "application/json",
                           .body = text,
                           .body_len = strlen(text),
                           .timeout_ms = timeout_ms ? timeout_ms : 120000};
    long st = itest_do(s, &rq, out);
    free(text);
    return st;
}

const char *itest_exec_stdout(const struct itest_resp *r)
{
    const char *v = itest_json_str(r->json, "stdout");
    return v ? v : "";
}

const char *itest_exec_stderr(const struct itest_resp *r)
{
    const char *v = itest_json_str(r->json, "stderr");
    return v ? v : "";
}

void itest_resp_release(struct itest_resp *r)
{
    if (!r)
        return;
    headers_clear(r);
    free(r->body);
    json_decref(r->json);
    memset(r, 0, sizeof(*r));
}

static struct curl_slist *add_header(struct curl_slist *l, const char *h)
{
    struct curl_slist *n = curl_slist_append(l, h);
    if (!n)
        abort();
    return n;
}

static struct curl_slist *add_headerf(struct curl_slist *l, const char *name,
                                      const char *value)
{
    char *h = itest_fmt("%s: %s", name, value);
    l = add_header(l, h);
    free(h);
    return l;
}

static int pattern_seek(void *ctx, curl_off_t offset, int origin)
{
    struct itest_pattern_src *src = ctx;
    if (origin != SEEK_SET || offset < 0 || (uint64_t)offset > src->total)
        return CURL_SEEKFUNC_CANTSEEK;
    src->sent = (uint64_t)offset;
    return CURL_SEEKFUNC_OK;
}

static void add_parts(CURL *h, curl_mime **mimep, const struct itest_req *rq)
{
    curl_mime *mime = curl_mime_init(h);
    if (!mime)
        abort();
    for (size_t i = 0; i < rq->nparts; i++) {
        const struct itest_part *p = &rq->parts[i];
        curl_mimepart *mp = curl_mime_addpart(mime);
        if (!mp)
            abort();
        curl_mime_name(mp, p->name);
        if (p->stream)
            curl_mime_data_cb(mp, (curl_off_t)p->stream->total,
                              itest_pattern_read, pattern_seek, NULL,
                              p->stream);
        else
            curl_mime_data(mp, p->data ? p->data : "", p->data ? p->len : 0);
        if (p->filename)
            curl_mime_filename(mp, p->filename);
        if (p->type)
            curl_mime_type(mp, p->type);
    }
    curl_easy_setopt(h, CURLOPT_MIMEPOST, mime);
    *mimep = mime;
}

/* Send rq to s as it is (itest_do, but for the session hook). */
static long perform(struct itest_server *s, const struct itest_req *rq,
                    struct itest_resp *out)
{
    memset(out, 0, sizeof(*out));
    struct sink body = {NULL, 0, 0};
    body.buf = xrealloc(NULL, 1);
    body.buf[0] = 0;
    body.cap = 1;

    const char *method = rq->method;
    bool has_body = rq->body || rq->read_cb || rq->parts;
    if (!method)
        method = has_body ? "POST" : "GET";
    snprintf(out->what, sizeof(out->what), "%s %.140s", method, rq->path);

    CURL *h = curl_easy_init();
    if (!h)
        abort();
    char *url = itest_fmt("%s%s", s->url, rq->path);
    struct curl_slist *hl = NULL;
    curl_mime *mime = NULL;

    if (rq->key) {
        char *v = itest_fmt("Bearer %s", rq->key);
        hl = add_headerf(hl, "Authorization", v);
        free(v);
    }
    if (rq->user_id)
        hl = add_headerf(hl, "X-User-Id", rq->user_id);
    if (rq->request_id)
        hl = add_headerf(hl, "X-Request-Id", rq->request_id);
    if (rq->content_type)
        hl = add_headerf(hl, "Content-Type", rq->content_type);
    else if (!rq->parts)
        hl = add_header(hl, "Content-Type:"); /* curl adds none then */
    for (size_t i = 0; rq->headers && rq->headers[i]; i++)
        hl = add_header(hl, rq->headers[i]);

    if (rq->parts) {
        add_parts(h, &mime, rq);
    } else if (rq->read_cb) {
        curl_easy_setopt(h, CURLOPT_POST, 1L);
        curl_easy_setopt(h, CURLOPT_READFUNCTION, rq->read_cb);
        curl_easy_setopt(h, CURLOPT_READDATA, rq->read_ctx);
        curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, rq->read_len);
        if (rq->read_len < 0)
            hl = add_header(hl, "Transfer-Encoding: chunked");
    } else if (rq->body || !strcmp(method, "POST") || !strcmp(method, "PUT") ||
               !strcmp(method, "PATCH")) {
        /* A body, possibly empty: sent with a Content-Length. */
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, rq->body ? rq->body : "");
        curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE,
                         (curl_off_t)(rq->body ? rq->body_len : 0));
    }
    if (!strcmp(method, "HEAD"))
        curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
    else if (strcmp(method, has_body ? "POST" : "GET"))
        curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);

    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hl);
    curl_easy_setopt(h, CURLOPT_PROXY, ""); /* never a proxy from the env */
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, 10000L);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS,
                     rq->timeout_ms > 0 ? rq->timeout_ms : 60000L);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, body_cb);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &body);
    curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, header_cb);
    curl_easy_setopt(h, CURLOPT_HEADERDATA, out);
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, out->curl_err);

    out->curl_rc = curl_easy_perform(h);
    long status = 0;
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
    out->status = status;
    if (out->curl_rc != CURLE_OK && !out->curl_err[0])
        snprintf(out->curl_err, sizeof(out->curl_err), "%s",
                 curl_easy_strerror(out->curl_rc));
    out->body = body.buf;
    out->len = body.len;
    if (body.len) {
        json_error_t jerr;
        out->json = json_loadb(body.buf, body.len, JSON_DECODE_ANY, &jerr);
    }

    curl_easy_cleanup(h);
    curl_mime_free(mime);
    curl_slist_free_all(hl);
    free(url);
    /* A transfer error after the status line (a reset mid-body) is still
     * a failure the caller must see. */
    if (out->curl_rc != CURLE_OK && out->status)
        fprintf(stderr,
                "harness: %s: got status %ld but the transfer failed: "
                "%s\n",
                out->what, out->status, out->curl_err);
    return out->status;
}

/* ---- ITEST_EXEC_MODE=session: each execution in a session of its own */

/* rq's body (new reference) when the session hook takes rq: a
 * synchronous POST /v1/executions whose body is a JSON object that names
 * no session; else NULL (rq goes as it is). */
static json_t *session_hook_body(const struct itest_req *rq)
{
    static const char path[] = "/v1/executions";
    const char *method = rq->method ? rq->method : rq->body ? "POST" : "GET";
    size_t n = sizeof(path) - 1;
    if (strcmp(method, "POST") || !rq->body || rq->read_cb || rq->parts ||
        !rq->content_type ||
        strncasecmp(rq->content_type, "application/json", 16) ||
        strncmp(rq->path, path, n) || (rq->path[n] && rq->path[n] != '?'))
        return NULL;
    json_error_t err;
    json_t *j = json_loadb(rq->body, rq->body_len, 0, &err);
    json_t *cb = json_object_get(j, "callback_url");
    /* async or a callback: the answer (202) comes before the run, which
     * a DELETE right after it would end. */
    if (!json_is_object(j) || json_object_get(j, "session_id") ||
        json_is_true(json_object_get(j, "async")) ||
        (cb && !json_is_null(cb))) {
        json_decref(j);
        return NULL;
    }
    return j;
}

/* The caller's headers of rq among its extra ones (Authorization,
 * X-User-Id), NULL-terminated: a new array of borrowed strings. */
static const char **caller_headers(const struct itest_req *rq)
{
    size_t n = 0, k = 0;
    while (rq->headers && rq->headers[n])
        n++;
    const char **v = xrealloc(NULL, (n + 1) * sizeof(*v));
    for (size_t i = 0; i < n; i++) {
        const char *h = rq->headers[i];
        if (!strncasecmp(h, "Authorization:", 14) ||
            !strncasecmp(h, "X-User-Id:", 10))
            v[k++] = h;
    }
    v[k] = NULL;
    return v;
}

/* rq's body with "session_id": id added before its closing brace (the rest
 * byte for byte as the test wrote it): a new string.  obj is the body
 * parsed, so the body ends with '}' and blanks. */
static char *with_session_id(const struct itest_req *rq, const json_t *obj,
                             const char *id)
{
    const char *b = rq->body;
    size_t end = rq->body_len;
    while (end && isspace((unsigned char)b[end - 1]))
        end--;
    return itest_fmt("%.*s%s\"session_id\":\"%s\"%.*s", (int)(end - 1), b,
                     json_object_size(obj) ? "," : "", id,
                     (int)(rq->body_len - end + 1), b + end - 1);
}

/* DELETE the hook's session id as the caller of cr; a failure is counted
 * against the server (itest_stop fails then), unless it no longer
 * answers at all (its sessions ended with it). */
static void session_hook_delete(struct itest_server *s,
                                const struct itest_req *cr, const char *id)
{
    struct itest_resp r;
    char *path = itest_fmt("/v1/sessions/%s", id);
    struct itest_req dr = *cr;
    dr.method = "DELETE";
    dr.path = path;
    dr.content_type = NULL;
    dr.body = NULL;
    dr.body_len = 0;
    perform(s, &dr, &r);
    if (r.status != 204) {
        fprintf(stderr,
                "harness: session mode: DELETE %s answered %ld "
                "(want 204): %s%s\n",
                path, r.status, r.body, r.curl_err);
        if (r.status)
            __atomic_add_fetch(&s->session_errors, 1, __ATOMIC_SEQ_CST);
    }
    itest_resp_release(&r);
    free(path);
}

/* ITEST_EXEC_MODE=session: when session_hook_body takes rq, run it in a
 * session of the caller's own made for it, then delete that session.
 * false when rq is not taken (send it as it is): not such a request, or
 * POST /v1/sessions refused the caller (400, 401, 403: no session for
 * this key, user or token).  Any other failure to make the session is
 * the request's answer, so the test sees it. */
static bool session_hook(struct itest_server *s, const struct itest_req *rq,
                         struct itest_resp *out)
{
    json_t *body = session_hook_body(rq);
    if (!body)
        return false;
    const char **hdrs = caller_headers(rq);
    struct itest_req cr = {.method = "POST",
                           .path = "/v1/sessions",
                           .key = rq->key,
                           .user_id = rq->user_id,
                           .content_type = "application/json",
                           .body = "{}",
                           .body_len = 2,
                           .headers = hdrs,
                           .timeout_ms = 30000};
    perform(s, &cr, out);
    const char *sid =
        out->status == 201 ? itest_json_str(out->json, "session_id") : NULL;
    bool taken = true;
    if (!sid) {
        taken =
            !(out->status == 400 || out->status == 401 || out->status == 403);
        fprintf(stderr,
                "harness: session mode: POST /v1/sessions answered "
                "%ld: %s%s; %s\n",
                out->status, out->body, out->curl_err,
                taken ? "that is the answer to POST /v1/executions"
                      : "POST /v1/executions goes without a session");
        snprintf(out->what, sizeof(out->what),
                 "POST /v1/sessions (session mode, for %.100s)", rq->path);
        if (!taken)
            itest_resp_release(out);
        goto done;
    }
    char *id = xstrdup(sid);
    char *text = with_session_id(rq, body, id);
    struct itest_req er = *rq;
    er.body = text;
    er.body_len = strlen(text);
    itest_resp_release(out);
    perform(s, &er, out);
    __atomic_add_fetch(&s->session_calls, 1, __ATOMIC_SEQ_CST);
    const char *echo = itest_json_str(out->json, "session_id");
    if (out->status == 200 && (!echo || strcmp(echo, id))) {
        fprintf(stderr,
                "harness: session mode: the answer does not name "
                "session %s: %s\n",
                id, out->body);
        __atomic_add_fetch(&s->session_errors, 1, __ATOMIC_SEQ_CST);
    }
    session_hook_delete(s, &cr, id);
    free(text);
    free(id);
done:
    free(hdrs);
    json_decref(body);
    return taken;
}

long itest_do(struct itest_server *s, const struct itest_req *rq,
              struct itest_resp *out)
{
    if (itest_exec_session() && session_hook(s, rq, out))
        return out->status;
    return perform(s, rq, out);
}

long itest_request(struct itest_server *s, const char *method, const char *path,
                   const char *key, const char *user_id,
                   const char *content_type, const void *body, size_t len,
                   const char *const *headers, struct itest_resp *out)
{
    struct itest_req rq = {0};
    rq.method = method;
    rq.path = path;
    rq.key = key;
    rq.user_id = user_id;
    rq.content_type = content_type;
    rq.body = body;
    rq.body_len = len;
    rq.headers = headers;
    return itest_do(s, &rq, out);
}

long itest_upload_raw(struct itest_server *s, const char *key,
                      const char *user_id, const char *filename,
                      const char *content_type, const void *data, size_t len,
                      const char *extra_query, struct itest_resp *out)
{
    char *enc = filename ? itest_urlencode(filename, strlen(filename)) : NULL;
    char *path;
    if (enc && extra_query)
        path = itest_fmt("/v1/files?filename=%s&%s", enc, extra_query);
    else if (enc)
        path = itest_fmt("/v1/files?filename=%s", enc);
    else if (extra_query)
        path = itest_fmt("/v1/files?%s", extra_query);
    else
        path = itest_fmt("/v1/files");
    struct itest_req rq = {0};
    rq.method = "POST";
    rq.path = path;
    rq.key = key;
    rq.user_id = user_id;
    rq.content_type = content_type;
    rq.body = data ? data : "";
    rq.body_len = len;
    long st = itest_do(s, &rq, out);
    free(path);
    free(enc);
    return st;
}

long itest_upload_multipart(struct itest_server *s, const char *key,
                            const char *user_id, const char *filename,
                            const void *data, size_t len, const char *ttl,
                            struct itest_resp *out)
{
    struct itest_part parts[2] = {
        {"file", filename ? filename : "", NULL, data, len, NULL},
        {"ttl_hours", NULL, NULL, ttl, ttl ? strlen(ttl) : 0, NULL},
    };
    struct itest_req rq = {0};
    rq.method = "POST";
    rq.path = "/v1/files";
    rq.key = key;
    rq.user_id = user_id;
    rq.parts = parts;
    rq.nparts = ttl ? 2 : 1;
    return itest_do(s, &rq, out);
}

json_t *itest_json_get(const json_t *j, const char *path)
{
    json_t *cur = (json_t *)(uintptr_t)j; /* jansson getters take non-const */
    const char *p = path;
    while (cur && *p) {
        const char *dot = strchr(p, '.');
        size_t n = dot ? (size_t)(dot - p) : strlen(p);
        char key[128];
        if (n >= sizeof(key) || !json_is_object(cur))
            return NULL;
        memcpy(key, p, n);
        key[n] = 0;
        cur = json_object_get(cur, key);
        p += n;
        if (*p == '.')
            p++;
    }
    return cur;
}

bool itest_exec_status_is(struct itest_server *s, const char *user,
                          const char *id, const char *want, char *st,
                          size_t stsz, json_t **result)
{
    char *path = itest_fmt("/v1/executions/%s", id);
    struct itest_resp r;
    itest_request(s, "GET", path, s->admin_key, user, NULL, NULL, 0, NULL, &r);
    const char *got = itest_json_str(r.json, "status");
    snprintf(st, stsz, "%s", got ? got : "?");
    bool ok =
        got && (want ? !strcmp(got, want)
                     : (!strcmp(got, "done") || !strcmp(got, "cancelled")));
    if (ok && result)
        *result = json_incref(json_object_get(r.json, "result"));
    itest_resp_release(&r);
    free(path);
    return ok;
}

bool itest_exec_wait_status(struct itest_server *s, const char *user,
                            const char *id, const char *want, char *st,
                            size_t stsz, json_t **result)
{
    for (int i = 0; i < 400; i++) {
        if (itest_exec_status_is(s, user, id, want, st, stsz, result))
            return true;
        usleep(50 * 1000); /* polling the service's state */
    }
    return false;
}

const char *itest_json_str(const json_t *j, const char *path)
{
    return json_string_value(itest_json_get(j, path));
}

char *itest_json_dup(const json_t *j, const char *path)
{
    const char *v = itest_json_str(j, path);
    return xstrdup(v ? v : "");
}

bool itest_list_has(const char *list, const char *token)
{
    if (!list)
        return false;
    size_t tl = strlen(token);
    const char *p = list;
    while (*p) {
        while (*p == ' ' || *p == '\t' || *p == ',')
            p++;
        const char *e = p;
        while (*e && *e != ',')
            e++;
        const char *t = e;
        while (t > p && (t[-1] == ' ' || t[-1] == '\t'))
            t--;
        if ((size_t)(t - p) == tl && !strncasecmp(p, token, tl))
            return true;
        p = e;
    }
    return false;
}

int itest_listen_local(int *port, int backlog)
{
    struct sockaddr_in a = {.sin_family = AF_INET};
    socklen_t al = sizeof(a);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof(a)) ||
        listen(fd, backlog) || getsockname(fd, (struct sockaddr *)&a, &al)) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    *port = ntohs(a.sin_port);
    return fd;
}

int itest_connect(const struct itest_server *s)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    struct sockaddr_in a;
    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)s->port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&a, sizeof(a))) {
        close(fd);
        return -1;
    }
    return fd;
}

bool itest_send_all(int fd, const void *buf, size_t len)
{
    const char *p = buf;
    while (len) {
        ssize_t w = write(fd, p, len);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return false;
        p += w;
        len -= (size_t)w;
    }
    return true;
}

char *itest_read_request(int fd, int timeout_ms, size_t *len)
{
    enum { MAX = 65536 };
    char *buf = malloc(MAX);
    size_t got = 0, want = SIZE_MAX;
    if (!buf)
        return NULL;
    buf[0] = '\0';
    while (got < MAX - 1 && got < want) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, timeout_ms) != 1)
            break;
        ssize_t n = read(fd, buf + got, MAX - 1 - got);
        if (n <= 0)
            break;
        got += (size_t)n;
        buf[got] = '\0';
        char *end = strstr(buf, "\r\n\r\n");
        char *cl = strcasestr(buf, "\r\nContent-Length:");
        if (end && cl && cl < end)
            want = (size_t)(end + 4 - buf) + strtoul(cl + 17, NULL, 10);
        else if (end)
            want = (size_t)(end + 4 - buf);
    }
    *len = got;
    return buf;
}

/* --------------------------------------------------------------- checks */

static void print_resp(const struct itest_resp *r)
{
    if (!r->status) {
        fprintf(stderr, "  no response: %s\n", r->curl_err);
        return;
    }
    fprintf(stderr, "  got %ld, body (%zu bytes): %.2000s%s\n", r->status,
            r->len, r->body, r->len > 2000 ? "..." : "");
}

bool itest__check_status(const char *file, int line, const struct itest_resp *r,
                         long want)
{
    if (r->status == want && itest_header(r, "X-Request-Id"))
        return true;
    if (r->status == want)
        fprintf(stderr, "%s:%d: %s: status %ld but no X-Request-Id header\n",
                file, line, r->what, want);
    else
        fprintf(stderr, "%s:%d: %s: want status %ld\n", file, line, r->what,
                want);
    print_resp(r);
    return false;
}

bool itest__check_error(const char *file, int line, const struct itest_resp *r,
                        long want_status, const char *want_code)
{
    bool ok = true;
    const char *ct = itest_header(r, "Content-Type");
    const char *code = itest_json_str(r->json, "error.code");
    const char *msg = itest_json_str(r->json, "error.message");
    const char *rid = itest_json_str(r->json, "error.request_id");
    const char *hrid = itest_header(r, "X-Request-Id");
    if (r->status != want_status) {
        fprintf(stderr, "%s:%d: %s: want status %ld (%s)\n", file, line,
                r->what, want_status, want_code);
        ok = false;
    }
    if (!ct || strncasecmp(ct, "application/json", 16)) {
        fprintf(stderr,
                "%s:%d: %s: want Content-Type application/json, got "
                "%s\n",
                file, line, r->what, ct ? ct : "(none)");
        ok = false;
    }
    if (!code || strcmp(code, want_code)) {
        fprintf(stderr, "%s:%d: %s: want error.code \"%s\", got %s\n", file,
                line, r->what, want_code, code ? code : "(none)");
        ok = false;
    }
    if (!msg || !msg[0]) {
        fprintf(stderr, "%s:%d: %s: want a non-empty error.message\n", file,
                line, r->what);
        ok = false;
    }
    if (!hrid || !rid || strcmp(rid, hrid)) {
        fprintf(stderr,
                "%s:%d: %s: want error.request_id equal to the "
                "X-Request-Id header, got %s vs header %s\n",
                file, line, r->what, rid ? rid : "(none)",
                hrid ? hrid : "(none)");
        ok = false;
    }
    if (!ok)
        print_resp(r);
    return ok;
}

static bool file_id_valid(const char *id)
{
    if (!id || strncmp(id, "file_", 5) || strlen(id) != 5 + 26)
        return false;
    for (const char *p = id + 5; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= '2' && *p <= '7')))
            return false;
    return true;
}

bool itest__check_file(const char *file, int line, const json_t *f,
                       const char *filename, const void *data, size_t len)
{
    bool ok = true;
#define BAD(...)                                                               \
    do {                                                                       \
        fprintf(stderr, "%s:%d: File object: ", file, line);                   \
        fprintf(stderr, __VA_ARGS__);                                          \
        fputc('\n', stderr);                                                   \
        ok = false;                                                            \
    } while (0)
    if (!json_is_object(f)) {
        BAD("want a JSON object");
        return false;
    }
    const char *id = itest_json_str(f, "file_id");
    if (!file_id_valid(id))
        BAD("want file_id matching ^file_[a-z2-7]{26}$, got %s",
            id ? id : "(none)");
    const char *name = itest_json_str(f, "filename");
    if (filename && (!name || strcmp(name, filename)))
        BAD("want filename \"%s\", got \"%s\"", filename,
            name ? name : "(none)");
    const json_t *size = itest_json_get(f, "size");
    if (!json_is_integer(size) || json_integer_value(size) != (json_int_t)len)
        BAD("want size %zu, got %lld", len,
            json_is_integer(size) ? (long long)json_integer_value(size) : -1LL);
    char want_sha[65];
    itest_sha256_hex(data, len, want_sha);
    const char *sha = itest_json_str(f, "sha256");
    if (!sha || strcmp(sha, want_sha))
        BAD("want sha256 %s, got %s", want_sha, sha ? sha : "(none)");
    const char *mt = itest_json_str(f, "mime_type");
    const char *ft = itest_json_str(f, "file_type");
    if (!mt || !mt[0] || !ft || !ft[0])
        BAD("want non-empty mime_type and file_type");
    const char *src = itest_json_str(f, "source");
    if (!src || strcmp(src, "upload"))
        BAD("want source \"upload\", got %s", src ? src : "(none)");
    const char *ca = itest_json_str(f, "created_at");
    int64_t created = ca ? itest_parse_time(ca) : -1;
    if (created < 0)
        BAD("want created_at as YYYY-MM-DDTHH:MM:SSZ, got %s",
            ca ? ca : "(none)");
    else if (created > (int64_t)itest_now() + 5 ||
             created < (int64_t)itest_now() - 600)
        BAD("created_at %s is not about now", ca);
    const json_t *ej = itest_json_get(f, "expires_at");
    if (!ej) {
        BAD("want an expires_at member (a time or null)");
    } else if (!json_is_null(ej)) {
        const char *ea = json_string_value(ej);
        int64_t exp = ea ? itest_parse_time(ea) : -1;
        if (exp < 0)
            BAD("want expires_at as YYYY-MM-DDTHH:MM:SSZ or null, got %s",
                ea ? ea : "(not a string)");
        else if (created >= 0 && exp <= created)
            BAD("expires_at %s is not after created_at %s", ea, ca);
    }
#undef BAD
    if (!ok) {
        char *dump = json_dumps(f, JSON_COMPACT);
        fprintf(stderr, "  got: %s\n", dump ? dump : "?");
        free(dump);
    }
    return ok;
}

/* ------------------------------------------------------- data and time */

void itest_sha256_hex(const void *data, size_t len, char out[65])
{
    unsigned char md[32];
    unsigned int mdlen = 0;
    EVP_Digest(data ? data : "", len, md, &mdlen, EVP_sha256(), NULL);
    for (unsigned i = 0; i < 32; i++)
        snprintf(out + 2 * i, 3, "%02x", md[i]);
    out[64] = 0;
}

static uint64_t mix64(uint64_t x)
{
    x += 0x9E3779B97F4A7C15ULL;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
    return x ^ (x >> 31);
}

void itest_pattern_fill(uint32_t seed, uint64_t offset, void *buf, size_t len)
{
    unsigned char *p = buf;
    uint64_t salt = (uint64_t)seed << 40;
    while (len) {
        uint64_t block = offset / 8;
        unsigned shift = (unsigned)(offset % 8);
        uint64_t v = mix64(block ^ salt);
        for (unsigned i = shift; i < 8 && len; i++, len--, offset++)
            *p++ = (unsigned char)(v >> (8 * i));
    }
}

void itest_pattern_sha256(uint32_t seed, uint64_t len, char out[65])
{
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    if (!ctx)
        abort();
    EVP_DigestInit_ex(ctx, EVP_sha256(), NULL);
    unsigned char *buf = xrealloc(NULL, 1 << 16);
    for (uint64_t off = 0; off < len;) {
        size_t n = len - off > (1 << 16) ? (1 << 16) : (size_t)(len - off);
        itest_pattern_fill(seed, off, buf, n);
        EVP_DigestUpdate(ctx, buf, n);
        off += n;
    }
    free(buf);
    unsigned char md[32];
    unsigned int mdlen = 0;
    EVP_DigestFinal_ex(ctx, md, &mdlen);
    EVP_MD_CTX_free(ctx);
    for (unsigned i = 0; i < 32; i++)
        snprintf(out + 2 * i, 3, "%02x", md[i]);
    out[64] = 0;
}

size_t itest_pattern_read(char *buf, size_t size, size_t n, void *ctx)
{
    struct itest_pattern_src *src = ctx;
    uint64_t left = src->total - src->sent;
    size_t want = size * n;
    if (want > left)
        want = (size_t)left;
    itest_pattern_fill(src->seed, src->sent, buf, want);
    src->sent += want;
    return want;
}

static int digits(const char *s, int n)
{
    int v = 0;
    for (int i = 0; i < n; i++)
        v = v * 10 + (s[i] - '0');
    return v;
}

int64_t itest_parse_time(const char *s)
{
    static const char shape[] = "dddd-dd-ddTdd:dd:ddZ";
    if (!s || strlen(s) != sizeof(shape) - 1)
        return -1;
    for (size_t i = 0; shape[i]; i++) {
        if (shape[i] == 'd' ? !isdigit((unsigned char)s[i]) : s[i] != shape[i])
            return -1;
    }
#define NUM(off, n) digits(s + (off), (n))
    struct tm tm;
    memset(&tm, 0, sizeof(tm));
    tm.tm_year = NUM(0, 4) - 1900;
    tm.tm_mon = NUM(5, 2) - 1;
    tm.tm_mday = NUM(8, 2);
    tm.tm_hour = NUM(11, 2);
    tm.tm_min = NUM(14, 2);
    tm.tm_sec = NUM(17, 2);
#undef NUM
    if (tm.tm_mon < 0 || tm.tm_mon > 11 || tm.tm_mday < 1 || tm.tm_mday > 31 ||
        tm.tm_hour > 23 || tm.tm_min > 59 || tm.tm_sec > 60)
        return -1;
    return (int64_t)timegm(&tm);
}

char *itest_urlencode(const char *s, size_t len)
{
    static const char hex[] = "0123456789ABCDEF";
    char *out = xrealloc(NULL, 3 * len + 1);
    size_t o = 0;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (isalnum(c) || c == '-' || c == '.' || c == '_' || c == '~') {
            out[o++] = (char)c;
        } else {
            out[o++] = '%';
            out[o++] = hex[c >> 4];
            out[o++] = hex[c & 15];
        }
    }
    out[o] = 0;
    return out;
}

static int b64_val(unsigned char c)
{
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    return c == '+' ? 62 : c == '/' ? 63 : -1;
}

unsigned char *itest_b64_decode(const char *s, size_t *len)
{
    size_t n = strlen(s), o = 0;
    if (n % 4)
        return NULL;
    unsigned char *out = malloc(n / 4 * 3 + 1);
    for (size_t i = 0; i < n; i += 4) {
        uint32_t v = 0;
        int pad = 0;
        for (int k = 0; k < 4; k++) {
            int d = b64_val((unsigned char)s[i + k]);
            if (s[i + k] == '=' && i + 4 == n && k >= 2) {
                pad++;
                d = 0;
            } else if (d < 0 || pad) {
                free(out);
                return NULL;
            }
            v = v << 6 | (uint32_t)d;
        }
        out[o++] = (unsigned char)(v >> 16);
        if (pad < 2)
            out[o++] = (unsigned char)(v >> 8);
        if (pad < 1)
            out[o++] = (unsigned char)v;
    }
    *len = o;
    return out;
}

bool itest_cli_said(struct itest_server *s, const char *needle)
{
    char *path = itest_fmt("%s/cli.log", s->tmp_dir);
    char *log = itest_read_file(path, NULL);
    bool found = log && strstr(log, needle);
    if (!found)
        fprintf(stderr, "cli.log lacks \"%s\":\n%s\n", needle,
                log ? log : "(unreadable)");
    free(log);
    free(path);
    return found;
}

char *itest__session_new(struct itest_server *s, const char *key,
                         const char *user, int *failed_checks)
{
    struct itest_resp r;
    char *id = NULL;
    itest_request(s, "POST", "/v1/sessions", key, user, "application/json",
                  "{}", 2, NULL, &r);
    if (r.status == 201)
        id = itest_json_dup(r.json, "session_id");
    else
        fprintf(stderr, "POST /v1/sessions as %s: %ld %s\n", user, r.status,
                r.body ? r.body : "");
    itest_resp_release(&r);
    if (id && !id[0]) {
        free(id);
        id = NULL;
    }
    if (!id)
        (*failed_checks)++;
    return id;
}
