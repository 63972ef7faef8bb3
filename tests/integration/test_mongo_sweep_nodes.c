/*
 * test_mongo_sweep_nodes.c - two interpd nodes on one MongoDB database and
 * its GridFS bucket run POST /v1/admin/cleanup at the same moment: both
 * answer 200, together they delete each expired file exactly once (the
 * sums of deleted_files and freed_bytes are those of the expired files),
 * live files stay, and the shared store is left consistent with nothing
 * half-deleted.  Runs on the fixture's MongoDB whatever ITEST_BACKEND
 * says (this file is about MongoDB only).
 */
#include "harness.h"
#include "nodes.h"

#include <pthread.h>

#define EXPIRING 80
#define LIVE 4
#define UPLOADERS 4

/* ---- uploads from several threads, through both nodes ----------------- */

struct uploader {
    pthread_t tid;
    struct nodes *n;
    const char *key;
    int index;
    int ok;              /* OUT: 201s */
    int64_t last_expiry; /* OUT: latest expires_at seen, seconds */
    long bad_status;     /* OUT: the first non-201 status, 0 if none */
};

static void *upload_some(void *arg)
{
    struct uploader *u = arg;
    for (int i = u->index; i < EXPIRING; i += UPLOADERS) {
        struct itest_server *s = i % 2 ? u->n->b : u->n->a;
        char name[32], body[32];
        struct itest_resp r;
        snprintf(name, sizeof(name), "exp-%d.txt", i);
        snprintf(body, sizeof(body), "expiring file %03d\n", i); /* 18 B */
        /* ttl_hours only shortens the TTL: about a second. */
        long st = itest_upload_raw(s, u->key, "u1", name, "text/plain", body,
                                   strlen(body), "ttl_hours=0.0003", &r);
        if (st == 201) {
            u->ok++;
            int64_t e = itest_parse_time(itest_json_str(r.json, "expires_at"));
            if (e > u->last_expiry)
                u->last_expiry = e;
        } else if (!u->bad_status) {
            u->bad_status = st;
        }
        itest_resp_release(&r);
    }
    return NULL;
}

/* ---- the concurrent cleanups ------------------------------------------ */

struct cleaner {
    pthread_t tid;
    struct itest_server *s;
    const char *admin_key;
    pthread_barrier_t *start;
    long status;               /* OUT */
    json_int_t deleted, freed; /* OUT */
    bool shape_ok;             /* OUT: the contract's four integers */
    char body[512];            /* OUT: for failure messages */
};

static void *cleanup_now(void *arg)
{
    struct cleaner *c = arg;
    struct itest_resp r;
    /* Both requests leave together, so the two sweeps overlap. */
    pthread_barrier_wait(c->start);
    c->status = itest_request(c->s, "POST", "/v1/admin/cleanup", c->admin_key,
                              NULL, NULL, NULL, 0, NULL, &r);
    c->deleted = json_integer_value(itest_json_get(r.json, "deleted_files"));
    c->freed = json_integer_value(itest_json_get(r.json, "freed_bytes"));
    c->shape_ok = json_is_integer(itest_json_get(r.json, "deleted_files")) &&
                  json_is_integer(itest_json_get(r.json, "freed_bytes")) &&
                  json_is_integer(itest_json_get(r.json, "orphans_removed")) &&
                  json_is_integer(itest_json_get(r.json, "duration_ms"));
    snprintf(c->body, sizeof(c->body), "%s", r.body);
    itest_resp_release(&r);
    return NULL;
}

/* Both nodes sweep at once; returns the summed deleted_files and
 * freed_bytes through the out parameters. */
static void both_clean(struct nodes *n, const char *admin_key,
                       json_int_t *deleted, json_int_t *freed)
{
    pthread_barrier_t start;
    struct cleaner c[2];
    pthread_barrier_init(&start, NULL, 2);
    for (int i = 0; i < 2; i++) {
        c[i] = (struct cleaner){
            .s = i ? n->b : n->a, .admin_key = admin_key, .start = &start};
        CHECK_INT(pthread_create(&c[i].tid, NULL, cleanup_now, &c[i]), 0);
    }
    *deleted = *freed = 0;
    for (int i = 0; i < 2; i++) {
        pthread_join(c[i].tid, NULL);
        CHECKF(c[i].status == 200, "node %c: cleanup answered %ld: %s",
               i ? 'B' : 'A', c[i].status, c[i].body);
        CHECKF(c[i].shape_ok, "node %c: cleanup JSON: %s", i ? 'B' : 'A',
               c[i].body);
        *deleted += c[i].deleted;
        *freed += c[i].freed;
        fprintf(stderr, "node %c: %s\n", i ? 'B' : 'A', c[i].body);
    }
    pthread_barrier_destroy(&start);
}

static void concurrent_cleanups_delete_once(void)
{
    int mark = test__failed_checks;
    struct nodes n;
    bool up = nodes_start(&n);
    CHECKF(up, "two nodes on one database did not start");
    if (!up || !n.a->admin_key) {
        nodes_stop(&n, mark);
        return;
    }
    char *key = NULL;
    CHECK(itest_create_key(n.a, "acme", false, &key, NULL));
    if (!key) {
        nodes_stop(&n, mark);
        return;
    }

    /* Live files (the default TTL, 48 h), one through each node... */
    struct itest_resp r;
    for (int i = 0; i < LIVE; i++) {
        char name[32];
        snprintf(name, sizeof(name), "live-%d.txt", i);
        itest_upload_raw(i % 2 ? n.b : n.a, key, "u1", name, "text/plain",
                         "live\n", 5, NULL, &r);
        CHECK_STATUS(&r, 201);
        itest_resp_release(&r);
    }
    /* ...and files that expire in about a second, through both. */
    struct uploader u[UPLOADERS];
    int64_t last_expiry = 0;
    int uploaded = 0;
    for (int i = 0; i < UPLOADERS; i++) {
        u[i] = (struct uploader){.n = &n, .key = key, .index = i};
        CHECK_INT(pthread_create(&u[i].tid, NULL, upload_some, &u[i]), 0);
    }
    for (int i = 0; i < UPLOADERS; i++) {
        pthread_join(u[i].tid, NULL);
        CHECKF(!u[i].bad_status, "an upload answered %ld", u[i].bad_status);
        uploaded += u[i].ok;
        if (u[i].last_expiry > last_expiry)
            last_expiry = u[i].last_expiry;
    }
    CHECK_INT(uploaded, EXPIRING);
    /* The wait is the thing under test: past the files' expiry. */
    itest_sleep_until((double)last_expiry + 1.1);

    json_int_t deleted = 0, freed = 0;
    both_clean(&n, n.a->admin_key, &deleted, &freed);
    CHECKF(deleted == EXPIRING,
           "the two sweeps deleted %lld files together, want %d (each "
           "expired file exactly once)",
           (long long)deleted, EXPIRING);
    CHECK_INT(freed, (json_int_t)EXPIRING * 18);

    /* Again at once: nothing is left, and neither node errs. */
    both_clean(&n, n.a->admin_key, &deleted, &freed);
    CHECK_INT(deleted, 0);
    CHECK_INT(freed, 0);

    /* The live files are all there, through either node. */
    struct itest_server *both[2] = {n.a, n.b};
    for (int i = 0; i < 2; i++) {
        itest_request(both[i], "GET", "/v1/files?limit=100", key, "u1", NULL,
                      NULL, 0, NULL, &r);
        CHECK_STATUS(&r, 200);
        CHECK_INT(json_array_size(itest_json_get(r.json, "files")), LIVE);
        itest_resp_release(&r);
    }
    /* The shared store: exactly the live files, bytes and records
     * agreeing, nothing half-deleted. */
    size_t nrec = 0;
    CHECK(itest_store_consistent(n.a, &nrec));
    CHECK_INT(nrec, LIVE);
    char **strays = NULL;
    size_t ns = itest_stray_files(n.a, &strays);
    CHECKF(ns == LIVE, "the store holds %zu entries, want %d", ns, LIVE);
    if (ns != LIVE)
        itest_print_strays(n.a);
    itest_strv_free(strays);

    free(key);
    nodes_stop(&n, mark);
}

TEST_MAIN(T(concurrent_cleanups_delete_once))
