/*
 * test_disk_full.c - the data dir's disk fills up.
 *
 * The data dir is a 32 MiB tmpfs mounted by the test (root only; unmounted
 * on every path, at exit too).  On SQLite + local disk: uploads fill it
 * until one gets 507 quota_exceeded naming the full disk (never 500), and
 * nothing of that upload stays; the disk is then filled to the last byte
 * and a DELETE still answers 204 (the delete reserve) and frees space;
 * /readyz names the low space below --min-free-space and is ready again
 * after deletes; admin status shows the free bytes; uploads work again.
 * While the reserve is out (not laid: the disk has less than twice its
 * size free) every write that adds data is refused though it would fit,
 * on both backends: an upload and URL ingest 507, a generated file not
 * stored ("no_space"), an asynchronous execution 507; all are accepted
 * again once the reserve is back (reserve_gate).
 * On MongoDB + GridFS the bytes live on the database server's disk, so
 * only readiness and status about the data dir's disk are checked there.
 */
#include "harness.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#define FS_SIZE "32m"
#define FILE_BYTES (3u << 20)
#define MAX_UPLOADS 20

static char *mnt; /* owned: the tmpfs mount point while mounted */

/* Unmount the tmpfs and remove what start_on put beside it. */
static void unmount_at_exit(void)
{
    if (!mnt)
        return;
    char *venv = itest_fmt("%s-venv", mnt);
    itest_rm_rf(venv);
    free(venv);
    char *wheels = itest_fmt("%s-wheels", mnt);
    rmdir(wheels);
    free(wheels);
    if (umount2(mnt, MNT_DETACH))
        fprintf(stderr, "umount %s: %s\n", mnt, strerror(errno));
    rmdir(mnt);
    free(mnt);
    mnt = NULL;
}

/* A fresh tmpfs of FS_SIZE; its path (borrowed from mnt) or NULL. */
static const char *mount_small_fs(void)
{
    const char *base = getenv("TMPDIR");
    char *dir = itest_fmt("%s/interpd-diskfull-XXXXXX",
                          base && base[0] ? base : "/tmp");
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        free(dir);
        return NULL;
    }
    if (mount("tmpfs", dir, "tmpfs", 0, "size=" FS_SIZE ",mode=0711")) {
        fprintf(stderr, "mount tmpfs on %s: %s (this test needs root)\n", dir,
                strerror(errno));
        rmdir(dir);
        free(dir);
        return NULL;
    }
    mnt = dir;
    atexit(unmount_at_exit);
    return mnt;
}

static long get(struct itest_server *s, const char *path, const char *key,
                struct itest_resp *r)
{
    return itest_request(s, "GET", path, key, key ? "u1" : NULL, NULL, NULL, 0,
                         NULL, r);
}

static long upload(struct itest_server *s, const char *key, uint32_t seed,
                   struct itest_resp *r)
{
    unsigned char *data = malloc(FILE_BYTES);
    if (!data)
        abort();
    itest_pattern_fill(seed, 0, data, FILE_BYTES);
    char *path = itest_fmt("/v1/files?filename=f%u.bin", (unsigned)seed);
    long st =
        itest_request(s, "POST", path, key, "u1", "application/octet-stream",
                      data, FILE_BYTES, NULL, r);
    free(path);
    free(data);
    return st;
}

/* Poll /readyz (bounded) until its answer is want; the last answer in r
 * (release it).  Readiness has no event to wait on. */
static bool readyz_until(struct itest_server *s, long want,
                         struct itest_resp *r, double seconds)
{
    double until = itest_now() + seconds;
    for (;;) {
        get(s, "/readyz", NULL, r);
        if (r->status == want || itest_now() > until)
            return r->status == want;
        itest_resp_release(r);
        itest_sleep_until(itest_now() + 0.2);
    }
}

static json_t *status_disk(struct itest_server *s, const char *admin,
                           struct itest_resp *r)
{
    get(s, "/v1/admin/status", admin, r);
    CHECK_STATUS(r, 200);
    return itest_json_get(r->json, "disk");
}

static long long jint(const json_t *j, const char *path)
{
    const json_t *v = itest_json_get(j, path);
    return json_is_integer(v) ? (long long)json_integer_value(v) : -1;
}

/* Fill the filesystem to its last byte with a file of the test's own. */
static char *fill_to_the_brim(const char *dir)
{
    char *path = itest_fmt("%s/filler", dir);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    static char block[64 * 1024];
    if (fd < 0) {
        perror(path);
        free(path);
        return NULL;
    }
    memset(block, 'x', sizeof(block));
    size_t len = sizeof(block);
    while (len) {
        ssize_t n = write(fd, block, len);
        if (n < 0 && errno == ENOSPC && len > 1)
            len /= 2; /* down to the last bytes */
        else if (n < 0 && errno == ENOSPC)
            break;
        else if (n < 0 && errno != EINTR)
            break;
    }
    close(fd);
    return path;
}

/* The venv lives beside the small disk (mnt-venv), not on it. */
static struct itest_server *start_on(const char *data_dir, char **admin)
{
    char *venv = itest_fmt("%s-venv", mnt);
    char *wheels = itest_fmt("%s-wheels", mnt);
    mkdir(wheels, 0755);
    const char *args[] = {"--data-dir",
                          data_dir,
                          "--venv-dir",
                          venv,
                          "--pip-no-index",
                          "1",
                          "--pip-find-links",
                          wheels,
                          "--min-free-space",
                          "8M",
                          "--disk-reserve",
                          "2M",
                          "--max-file-size",
                          "8M",
                          "--quota-bytes",
                          "1G",
                          "--quota-files",
                          "1000",
                          "--fetch-allow",
                          "127.0.0.1/32",
                          NULL};
    struct itest_opts o = {.args = args, .no_admin_key = true};
    struct itest_server *s = itest_start(&o);
    free(venv);
    free(wheels);
    if (!s)
        return NULL;
    char *kp = itest_fmt("%s/admin.key", data_dir);
    size_t len = 0;
    *admin = itest_read_file(kp, &len);
    free(kp);
    while (*admin && len && ((*admin)[len - 1] == '\n'))
        (*admin)[--len] = 0;
    return s;
}

static size_t temporary_uploads(const char *data_dir)
{
    char **v = NULL;
    char *tmp = itest_fmt("%s/blobs/tmp", data_dir);
    size_t n = itest_list_files(tmp, &v);
    for (size_t i = 0; v && v[i]; i++)
        fprintf(stderr, "left behind: blobs/tmp/%s\n", v[i]);
    itest_strv_free(v);
    free(tmp);
    return n;
}

/* Shrink the test's filler (on the small disk) until the data dir's
 * filesystem has at least want bytes free, and less than want + 1 MiB. */
static void free_about(const char *filler, int64_t want)
{
    struct stat st;
    struct statvfs v;
    int64_t size;
    if (stat(filler, &st))
        abort();
    size = st.st_size;
    for (;;) {
        if (statvfs(filler, &v))
            abort();
        if ((int64_t)v.f_bavail * (int64_t)v.f_frsize >= want)
            return;
        if (size < 64 * 1024)
            abort();
        size -= 64 * 1024;
        if (truncate(filler, size))
            abort();
    }
}

/* Every write path that adds data to the data dir, with the delete
 * reserve out (ok false: each refused, though the write would fit on the
 * disk) or in place (ok true: each accepted).  The paths: an upload, URL
 * ingest, a generated file, an asynchronous execution's result. */
/* The venv is written by installs, and it usually lives beside the data
 * dir: POST /v1/packages and an execution's packages are writes too.
 * polars is allowlisted and not in the base interpreter; with the reserve
 * in place pip runs (--pip-no-index on an empty folder: it finds nothing,
 * at once), with it out nothing runs. */
static void package_paths(struct itest_server *s, const char *admin, bool ok)
{
    struct itest_resp r;
    const char *what = ok ? "reserve in place" : "reserve out";
    static const char body[] = "{\"packages\": [\"polars\"]}";
    itest_request(s, "POST", "/v1/packages", admin, "u1", "application/json",
                  body, sizeof(body) - 1, NULL, &r);
    const char *msg = itest_json_str(r.json, "error.message");
    CHECKF(ok ? r.status != 507
              : r.status == 507 && msg && strstr(msg, "out of storage space"),
           "%s: POST /v1/packages: %ld %s", what, r.status, r.body);
    itest_resp_release(&r);

    itest_exec(
        s, admin, "u1",
        json_pack("{s:s, s:[s]}", "code", "print(1)", "packages", "polars"),
        120000, &r);
    CHECK_STATUS(&r, 200);
    json_t *p = json_array_get(itest_json_get(r.json, "installed_packages"), 0);
    const char *pmsg = itest_json_str(p, "message");
    bool spaced = pmsg && strstr(pmsg, "out of storage space");
    CHECKF(p && spaced == !ok, "%s: an execution's packages: %s", what, r.body);
    itest_resp_release(&r);
}

static void write_paths(struct itest_server *s, const char *admin, bool ok)
{
    struct itest_resp r;
    const char *what = ok ? "reserve in place" : "reserve out";
    static const char small[] = "a small file that would fit on the disk\n";
    itest_upload_raw(s, admin, "u1", "small.txt", "text/plain", small,
                     sizeof(small) - 1, NULL, &r);
    CHECKF(r.status == (ok ? 201 : 507), "%s: upload: %s", what, r.body);
    if (!ok)
        CHECK_ERROR(&r, 507, "quota_exceeded");
    itest_resp_release(&r);

    char *url = itest_fmt("%s/healthz", s->url);
    json_t *body = json_pack("{s:s, s:s}", "url", url, "filename", "h.json");
    char *text = json_dumps(body, 0);
    itest_request(s, "POST", "/v1/files", admin, "u1", "application/json", text,
                  strlen(text), NULL, &r);
    CHECKF(r.status == (ok ? 201 : 507), "%s: URL ingest: %s", what, r.body);
    const char *msg = itest_json_str(r.json, "error.message");
    CHECKF(ok || (msg && strstr(msg, "out of storage space")),
           "%s: URL ingest: %s", what, r.body);
    itest_resp_release(&r);
    free(text);
    json_decref(body);
    free(url);

    itest_exec(s, admin, "u1",
               json_pack("{s:s}", "code",
                         "open('/mnt/output/out.txt', 'w').write('x' * 100)"),
               120000, &r);
    CHECK_STATUS(&r, 200);
    json_t *g = json_array_get(itest_json_get(r.json, "generated_files"), 0);
    CHECKF(json_is_boolean(json_object_get(g, "stored")) &&
               json_is_true(json_object_get(g, "stored")) == ok,
           "%s: generated file: %s", what, r.body);
    const char *why = itest_json_str(g, "not_stored_reason");
    const char *gmsg = itest_json_str(g, "message");
    if (!ok)
        CHECKF(why && !strcmp(why, "no_space") && gmsg &&
                   strstr(gmsg, "out of storage space") &&
                   itest_json_str(g, "data_base64"),
               "%s: generated file: %s", what, r.body);
    itest_resp_release(&r);

    itest_exec(s, admin, "u1",
               json_pack("{s:s, s:b}", "code", "print(1)", "async", 1), 60000,
               &r);
    CHECKF(r.status == (ok ? 202 : 507), "%s: async execution: %s", what,
           r.body);
    msg = itest_json_str(r.json, "error.message");
    CHECKF(ok || (msg && strstr(msg, "out of storage space")),
           "%s: async execution: %s", what, r.body);
    itest_resp_release(&r);
    package_paths(s, admin, ok);
}

static void full_disk_sqlite(struct itest_server *s, const char *admin,
                             const char *data_dir)
{
    struct itest_resp r;
    char ids[MAX_UPLOADS][64];
    size_t nids = 0;
    long last = 0;
    for (uint32_t i = 0; i < MAX_UPLOADS; i++) {
        last = upload(s, admin, i + 1, &r);
        if (last != 201) {
            CHECK_STATUS(&r, 507);
            const char *code = itest_json_str(r.json, "error.code");
            const char *msg = itest_json_str(r.json, "error.message");
            CHECKF(code && !strcmp(code, "quota_exceeded"),
                   "full disk: want quota_exceeded: %s", r.body);
            CHECKF(msg && strstr(msg, "out of storage space"),
                   "the 507 does not say the server is out of space: %s",
                   r.body);
            itest_resp_release(&r);
            break;
        }
        snprintf(ids[nids++], sizeof(ids[0]), "%s",
                 itest_json_str(r.json, "file_id"));
        itest_resp_release(&r);
    }
    CHECKF(last == 507,
           "%zu uploads of %u bytes fitted on a %s disk, "
           "never a 507",
           nids, FILE_BYTES, FS_SIZE);
    REQUIRE(nids >= 2);
    CHECKF(temporary_uploads(data_dir) == 0,
           "the refused upload left bytes in blobs/tmp");
    get(s, "/v1/files?limit=100", admin, &r);
    CHECK_STATUS(&r, 200);
    CHECKF(json_array_size(itest_json_get(r.json, "files")) == nids,
           "want exactly the %zu stored files listed: %.500s", nids, r.body);
    itest_resp_release(&r);

    /* Not one byte left: a delete must still work. */
    char *filler = fill_to_the_brim(mnt);
    REQUIRE(filler);
    CHECK(readyz_until(s, 503, &r, 10));
    const char *msg = itest_json_str(r.json, "error.message");
    CHECKF(msg && strstr(msg, "disk space"),
           "/readyz does not name the low disk space: %s", r.body);
    itest_resp_release(&r);
    json_t *d = status_disk(s, admin, &r);
    CHECKF(jint(d, "free_bytes") >= 0 && jint(d, "free_bytes") < (8 << 20),
           "admin status disk: %s", r.body);
    CHECK(json_is_true(itest_json_get(d, "low_space")));
    CHECKF(jint(d, "total_bytes") > (16 << 20), "admin status disk: %s",
           r.body);
    itest_resp_release(&r);
    upload(s, admin, 999, &r);
    CHECK_STATUS(&r, 507);
    itest_resp_release(&r);

    char *p = itest_fmt("/v1/files/%s", ids[0]);
    itest_request(s, "DELETE", p, admin, "u1", NULL, NULL, 0, NULL, &r);
    CHECK_STATUS(&r, 204);
    itest_resp_release(&r);
    get(s, p, admin, &r);
    CHECK_STATUS(&r, 404);
    itest_resp_release(&r);
    free(p);

    /* Space comes back: everything deleted, ready again, uploads work. */
    unlink(filler);
    free(filler);
    for (size_t i = 1; i < nids; i++) {
        p = itest_fmt("/v1/files/%s", ids[i]);
        itest_request(s, "DELETE", p, admin, "u1", NULL, NULL, 0, NULL, &r);
        CHECK_STATUS(&r, 204);
        itest_resp_release(&r);
        free(p);
    }
    CHECK(readyz_until(s, 200, &r, 30));
    itest_resp_release(&r);
    d = status_disk(s, admin, &r);
    CHECKF(json_is_true(itest_json_get(d, "reserve_in_place")) &&
               json_is_false(itest_json_get(d, "low_space")),
           "after the deletes: %s", r.body);
    itest_resp_release(&r);
    upload(s, admin, 1000, &r);
    CHECK_STATUS(&r, 201);
    itest_resp_release(&r);
}

static void full_disk(void)
{
    const char *m = mount_small_fs();
    REQUIRE(m);
    char *data_dir = itest_fmt("%s/data", m);
    char *admin = NULL;
    struct itest_server *s = start_on(data_dir, &admin);
    REQUIRE(s);
    REQUIRE(admin);
    struct itest_resp r;
    CHECKF(readyz_until(s, 200, &r, 60), "/readyz not 200 at start: %s",
           r.body);
    itest_resp_release(&r);
    json_t *d = status_disk(s, admin, &r);
    CHECKF(jint(d, "free_bytes") > (8 << 20) &&
               jint(d, "min_free_bytes") == (8 << 20) &&
               jint(d, "reserve_bytes") == (2 << 20) &&
               json_is_true(itest_json_get(d, "reserve_in_place")),
           "admin status disk at start: %s", r.body);
    itest_resp_release(&r);
    if (!itest_backend_mongo()) {
        full_disk_sqlite(s, admin, data_dir);
    } else {
        /* GridFS keeps the bytes on the database server's disk: here only
         * the data dir's readiness and status are checked. */
        printf("     GridFS: uploads do not fill the data dir; checking "
               "readiness and status only\n");
        char *filler = fill_to_the_brim(m);
        REQUIRE(filler);
        CHECK(readyz_until(s, 503, &r, 10));
        const char *msg = itest_json_str(r.json, "error.message");
        CHECKF(msg && strstr(msg, "disk space"), "/readyz: %s", r.body);
        itest_resp_release(&r);
        unlink(filler);
        free(filler);
        CHECK(readyz_until(s, 200, &r, 30));
        itest_resp_release(&r);
    }
    itest_stop(s);
    free(admin);
    free(data_dir);
    unmount_at_exit();
}

/*
 * The gate both ways.  A server started on a disk with less room than its
 * reserve (2 MiB) has no reserve yet: every write that adds data to the
 * data dir is refused though it would fit (1.5 MiB free), on both
 * backends (the data dir's disk is the one deletes need).  With room for
 * the reserve twice over it is laid again and every write is accepted.
 */
static void reserve_gate(void)
{
    const char *m = mount_small_fs();
    REQUIRE(m);
    char *filler = fill_to_the_brim(m);
    REQUIRE(filler);
    free_about(filler, 3 << 19);
    char *data_dir = itest_fmt("%s/data", m);
    char *admin = NULL;
    struct itest_server *s = start_on(data_dir, &admin);
    REQUIRE(s);
    REQUIRE(admin);
    struct itest_resp r;
    json_t *d = status_disk(s, admin, &r);
    CHECKF(json_is_false(itest_json_get(d, "reserve_in_place")) &&
               jint(d, "free_bytes") > (1 << 20) &&
               jint(d, "free_bytes") < (4 << 20),
           "the reserve is in place, or the room is not as planned: %s",
           r.body);
    itest_resp_release(&r);
    write_paths(s, admin, false);
    d = status_disk(s, admin, &r);
    CHECKF(json_is_false(itest_json_get(d, "reserve_in_place")),
           "refused writes laid the reserve: %s", r.body);
    itest_resp_release(&r);

    free_about(filler, 6 << 20);
    write_paths(s, admin, true);
    d = status_disk(s, admin, &r);
    CHECKF(json_is_true(itest_json_get(d, "reserve_in_place")),
           "the reserve is not back: %s", r.body);
    itest_resp_release(&r);
    itest_stop(s);
    free(admin);
    free(data_dir);
    free(filler);
    unmount_at_exit();
}

TEST_MAIN(T(full_disk), T(reserve_gate))
