/*
 * test_async_results.c - asynchronous results are kept on disk, not in
 * the server's memory: holding many results with large inline files
 * leaves the server's RSS flat, every result still comes back intact,
 * each tenant's held results are bounded in bytes (429 for that tenant
 * only), and the files go when their ttl passes and at a restart.
 */
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"

#define FILES_PER_RUN 16
#define FILE_SIZE (512 * 1024)
#define WARMUP_RUNS 2
#define HELD_RUNS 16

/* Writes FILES_PER_RUN files of FILE_SIZE bytes, each from its own seed
 * (the run's seed and the file's index), so the test can tell one result
 * from another.  store_outputs false: they come back inline only. */
static json_t *run_body(int seed, int files)
{
    char *code =
        itest_fmt("import random\n"
                  "for i in range(%d):\n"
                  "    b = random.Random(%d * 1000 + i).randbytes(%d)\n"
                  "    open('f%%02d.bin' %% i, 'wb').write(b)\n"
                  "print('seed', %d)\n",
                  files, seed, FILE_SIZE, seed);
    json_t *body = json_pack("{s:s, s:b, s:b}", "code", code, "async", 1,
                             "store_outputs", 0);
    free(code);
    return body;
}

/* The server's resident set, in KiB, from /proc (-1 when unreadable). */
static long long rss_kib(const struct itest_server *s)
{
    char path[64], line[256];
    long long kib = -1;
    snprintf(path, sizeof(path), "/proc/%d/status", (int)s->pid);
    FILE *f = fopen(path, "r");
    while (f && fgets(line, sizeof(line), f))
        if (!strncmp(line, "VmRSS:", 6))
            kib = atoll(line + 6);
    if (f)
        fclose(f);
    return kib;
}

static char *submit(struct itest_server *s, const char *key, json_t *body,
                    long want, struct itest_resp *keep)
{
    struct itest_resp r;
    itest_exec(s, key, "u1", body, 60000, &r);
    CHECKF(r.status == want, "submit: want %ld, got %ld: %s", want, r.status,
           r.body);
    char *id = r.status == 202 ? itest_json_dup(r.json, "execution_id") : NULL;
    if (keep)
        *keep = r;
    else
        itest_resp_release(&r);
    return id;
}

/* Poll (bounded) until id is done; its GET answer (release it). */
static bool wait_done(struct itest_server *s, const char *key, const char *id,
                      struct itest_resp *out)
{
    char *path = itest_fmt("/v1/executions/%s", id);
    bool done = false;
    /* Bounded poll: the API offers no other way to wait. */
    for (int i = 0; i < 2400 && !done; i++) {
        itest_request(s, "GET", path, key, "u1", NULL, NULL, 0, NULL, out);
        const char *st = itest_json_str(out->json, "status");
        done = out->status == 200 && st && !strcmp(st, "done");
        if (!done) {
            CHECKF(out->status == 200, "GET %s: %ld %s", id, out->status,
                   out->body);
            bool bad = out->status != 200;
            itest_resp_release(out);
            if (bad)
                break;
            usleep(50 * 1000);
        }
    }
    free(path);
    return done;
}

/* The result in r is seed's, whole: every file back inline, each the
 * bytes its sha256 and size say. */
static void check_intact(const struct itest_resp *r, int seed, int files)
{
    json_t *res = itest_json_get(r->json, "result");
    char want[32];
    snprintf(want, sizeof(want), "seed %d\n", seed);
    CHECKF(json_is_true(itest_json_get(res, "success")), "run %d failed", seed);
    CHECK_STR(itest_json_str(res, "stdout"), want);
    json_t *gen = itest_json_get(res, "generated_files");
    CHECK_INT(json_array_size(gen), files);
    size_t i;
    json_t *f;
    json_array_foreach(gen, i, f)
    {
        const char *b64 = itest_json_str(f, "data_base64");
        size_t len = 0;
        unsigned char *bytes = b64 ? itest_b64_decode(b64, &len) : NULL;
        CHECKF(bytes && len == FILE_SIZE, "run %d file %zu: %zu bytes inline",
               seed, i, bytes ? len : 0);
        if (bytes) {
            char sha[65];
            itest_sha256_hex(bytes, len, sha);
            CHECK_STR(itest_json_str(f, "sha256"), sha);
        }
        free(bytes);
    }
}

static long long status_int(struct itest_server *s, const char *path)
{
    struct itest_resp r;
    itest_request(s, "GET", "/v1/admin/status", s->admin_key, NULL, NULL, NULL,
                  0, NULL, &r);
    CHECK_STATUS(&r, 200);
    long long v = json_integer_value(itest_json_get(r.json, path));
    itest_resp_release(&r);
    return v;
}

/* Regular files in the server's results directory. */
static int result_files(const struct itest_server *s, bool check_mode)
{
    char *dir = itest_fmt("%s/results", s->data_dir);
    DIR *d = opendir(dir);
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        n++;
        struct stat st;
        char *p = itest_fmt("%s/%s", dir, e->d_name);
        if (check_mode && !stat(p, &st))
            CHECKF((st.st_mode & 0777) == 0600, "%s: mode %o", p,
                   (unsigned)(st.st_mode & 0777));
        free(p);
    }
    if (d)
        closedir(d);
    free(dir);
    return n;
}

/* Many results with large inline files held at once: the server's RSS
 * stays far below what they weigh, and each comes back whole. */
static void rss_flat(void)
{
    const char *args[] = {"--inline-image-max",
                          "1M",
                          "--result-ttl",
                          "1h",
                          "--async-results-max-bytes",
                          "-1",
                          NULL};
    struct itest_opts o = {.args = args};
    /* Under AddressSanitizer freed memory waits in a quarantine (256 MiB
     * by default) before it is reused: RSS would measure that, not what
     * the server holds.  A small quarantine keeps the check meaningful
     * (the server inherits our environment). */
    const char *asan = getenv("ASAN_OPTIONS");
    if (asan) {
        char *opts =
            itest_fmt("%s%squarantine_size_mb=4", asan, asan[0] ? ":" : "");
        setenv("ASAN_OPTIONS", opts, 1);
        free(opts);
    }
    struct itest_server *s = itest_start(&o);
    REQUIRE(s);
    const char *key = s->admin_key;
    struct itest_resp r;
    char *ids[WARMUP_RUNS + HELD_RUNS] = {0};

    /* The first runs and reads size the server's own buffers. */
    for (int i = 0; i < WARMUP_RUNS; i++)
        ids[i] = submit(s, key, run_body(i, FILES_PER_RUN), 202, NULL);
    for (int i = 0; i < WARMUP_RUNS; i++) {
        REQUIRE(ids[i] && wait_done(s, key, ids[i], &r));
        check_intact(&r, i, FILES_PER_RUN);
        itest_resp_release(&r);
    }
    long long before = rss_kib(s);
    long long held_before = status_int(s, "executions.async_results.bytes");

    for (int i = WARMUP_RUNS; i < WARMUP_RUNS + HELD_RUNS; i++)
        ids[i] = submit(s, key, run_body(i, FILES_PER_RUN), 202, NULL);
    for (int i = WARMUP_RUNS; i < WARMUP_RUNS + HELD_RUNS; i++) {
        REQUIRE(ids[i] && wait_done(s, key, ids[i], &r));
        itest_resp_release(&r);
    }
    long long held =
        status_int(s, "executions.async_results.bytes") - held_before;
    long long after_runs = rss_kib(s);
    /* Read back, every one intact. */
    for (int i = 0; i < WARMUP_RUNS + HELD_RUNS; i++) {
        REQUIRE(wait_done(s, key, ids[i], &r));
        check_intact(&r, i, FILES_PER_RUN);
        itest_resp_release(&r);
    }
    long long after_reads = rss_kib(s);
    long long grew =
        (after_runs > after_reads ? after_runs : after_reads) - before;
    printf("held %lld KiB of results; RSS %lld KiB before, %lld after the "
           "runs, %lld after the reads\n",
           held / 1024, before, after_runs, after_reads);
    CHECKF(before > 0 && after_runs > 0 && after_reads > 0, "no VmRSS");
    CHECKF(held >= (long long)HELD_RUNS * FILES_PER_RUN * FILE_SIZE * 4 / 3,
           "held only %lld bytes", held);
    CHECKF(grew * 1024 < held / 4,
           "RSS grew by %lld KiB while %lld KiB of results were held", grew,
           held / 1024);
    CHECK_INT(status_int(s, "executions.async_results.held"),
              WARMUP_RUNS + HELD_RUNS);
    CHECK_INT(result_files(s, true), WARMUP_RUNS + HELD_RUNS);

    /* A restart forgets them, files included. */
    REQUIRE(itest_restart(s, &o));
    CHECK_INT(result_files(s, false), 0);
    char *path = itest_fmt("/v1/executions/%s", ids[0]);
    itest_request(s, "GET", path, s->admin_key, "u1", NULL, NULL, 0, NULL, &r);
    CHECK_ERROR(&r, 404, "not_found");
    itest_resp_release(&r);
    free(path);
    for (int i = 0; i < WARMUP_RUNS + HELD_RUNS; i++)
        free(ids[i]);
    itest_stop(s);
}

/* A tenant whose held results reach --async-results-max-bytes gets 429
 * for its next asynchronous submit, other tenants do not, and it may
 * submit again once its results expire (their files gone with them). */
static void tenant_bound(void)
{
    const char *args[] = {"--async-results-max-bytes", "1M", "--result-ttl",
                          "3s", NULL};
    struct itest_opts o = {.args = args};
    struct itest_server *s = itest_start(&o);
    REQUIRE(s);
    char *acme = NULL, *beta = NULL;
    struct itest_resp r;
    REQUIRE(itest_create_key(s, "acme", false, &acme, NULL));
    REQUIRE(itest_create_key(s, "beta", false, &beta, NULL));

    char *id = submit(s, acme, run_body(1, 2), 202, NULL);
    REQUIRE(id && wait_done(s, acme, id, &r));
    check_intact(&r, 1, 2);
    itest_resp_release(&r);
    CHECK_INT(result_files(s, true), 1);

    submit(s, acme, run_body(2, 1), 429, &r);
    CHECK_ERROR(&r, 429, "too_many_requests");
    CHECK(itest_header(&r, "Retry-After") != NULL);
    const char *msg = itest_json_str(r.json, "error.message");
    CHECKF(msg && strstr(msg, "tenant"), "message: %s", msg ? msg : "");
    itest_resp_release(&r);
    /* Another tenant goes on; synchronous runs are not held. */
    char *other = submit(s, beta, run_body(3, 1), 202, NULL);
    REQUIRE(other && wait_done(s, beta, other, &r));
    check_intact(&r, 3, 1);
    itest_resp_release(&r);
    itest_exec(s, acme, "u1", json_pack("{s:s}", "code", "print(1)"), 60000,
               &r);
    CHECK_STATUS(&r, 200);
    itest_resp_release(&r);

    /* Past the ttl the pruner removes the files by itself, and acme may
     * submit again.  Bounded poll: no event says a file was removed. */
    int left = -1;
    for (int i = 0; i < 200 && left != 0; i++) {
        left = result_files(s, false);
        if (left)
            usleep(50 * 1000);
    }
    CHECK_INT(left, 0);
    char *again = submit(s, acme, run_body(4, 1), 202, NULL);
    CHECK(again != NULL);
    free(again);
    free(other);
    free(id);
    free(acme);
    free(beta);
    itest_stop(s);
}

TEST_MAIN(T(rss_flat), T(tenant_bound))
