/*
 * test_mongo_faults.c - MongoDB dies under load and comes back.
 *
 * The test starts its own MongoDB wire server ($IPD_TEST_MONGO_SCRIPT start
 * on a private state dir): killing the fixture's server would break the
 * other MongoDB tests running in parallel.  An interpd on it (MongoDB +
 * GridFS, serverSelectionTimeoutMS=1000 so an outage costs a second per
 * request) takes uploads, downloads and listings from several threads; the
 * database is SIGKILLed in the middle.  Every request must get 201/200 or
 * 503 unavailable with Retry-After (never another status, a crash or a
 * hang: each request is bounded), /healthz stays 200 and /readyz turns 503.
 * Then the database restarts (same port, same data): /readyz is 200 again
 * within a bounded poll, the uploads refused with 503 are retried and all
 * succeed, and the store holds exactly the acknowledged files: every
 * GridFS file has its metadata, every record downloads with its sha256,
 * no chunks without a file.
 *
 * fast_failure: with --mongo-timeout 2s and no timeouts in the URI, the
 * database is SIGKILLed: /healthz answers within a second while uploads
 * are in flight, each of them gets 503 within 5 s, /readyz answers 503 at
 * once; keys the store vouched for lately still authenticate (the key
 * cache: the admin's /metrics works, a listing fails only at the store),
 * a key revoked before the outage stays refused, and past the cache's
 * lifetime no key authenticates (503).  After the restart all works and
 * the revoked key is 401.
 *
 * lock_left_by_outage: the connection to MongoDB runs through a proxy in
 * this process that lets the first insert into quota_locks through, and
 * with its reply cuts every connection and refuses new ones until told
 * to let them through again: an upload then holds its quota lock when the
 * database "goes away" and cannot release it.  Once the database is back
 * (/readyz 200), the same user's next upload must succeed at once (the
 * store releases the locks it lost track of), not wait out the lock's
 * TTL with 503s.
 */
#include "harness.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <unistd.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>

#define NTHREADS 4
#define MAX_UPLOADS 60       /* per thread; the default quota is 100 */
#define REQ_TIMEOUT_MS 20000 /* a request that takes longer is a hang */
#define OK_BEFORE_KILL (3 * NTHREADS)
#define REFUSED_AFTER_KILL (2 * NTHREADS)

/* ---- the private MongoDB server ---- */

static char *mongo_state; /* owned: its state dir while it may run */

static int mongo_script(const char *cmd)
{
    const char *script = getenv("IPD_TEST_MONGO_SCRIPT");
    if (!script || !script[0]) {
        fprintf(stderr, "IPD_TEST_MONGO_SCRIPT is not set: run through "
                        "ctest (it points to tests/support/mongo-server.sh)\n");
        return -1;
    }
    const char *const argv[] = {script, cmd, mongo_state, NULL};
    /* Never the external MONGODB_URI: this test must be able to kill and
     * restart its server. */
    static const char *const unset[] = {"MONGODB_URI", NULL};
    int code = itest_run(argv, unset, 180000);
    if (code)
        fprintf(stderr, "`%s %s %s` exited %d\n", script, cmd, mongo_state,
                code);
    return code;
}

static void mongo_stop_at_exit(void)
{
    if (!mongo_state)
        return;
    fprintf(stderr, "stopping the private MongoDB server (%s)\n", mongo_state);
    mongo_script("stop");
    free(mongo_state);
    mongo_state = NULL;
}

/* Start the private server; its URI (new, with query appended when not
 * NULL) or NULL after saying why. */
static char *mongo_private_start(const char *query)
{
    const char *base = getenv("TMPDIR");
    char *dir = itest_fmt("%s/interpd-mongo-faults-XXXXXX",
                          base && base[0] ? base : "/tmp");
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        free(dir);
        return NULL;
    }
    mongo_state = dir;
    atexit(mongo_stop_at_exit);
    if (mongo_script("start"))
        return NULL;
    char *kind_path = itest_fmt("%s/kind", dir);
    char *kind = itest_read_file(kind_path, NULL);
    free(kind_path);
    bool external = kind && !strncmp(kind, "external", 8);
    free(kind);
    if (external) {
        fprintf(stderr, "the MongoDB script gave an external server: this "
                        "test needs one it can kill\n");
        return NULL;
    }
    char *uri_path = itest_fmt("%s/uri", dir);
    size_t len;
    char *base_uri = itest_read_file(uri_path, &len);
    free(uri_path);
    if (!base_uri || !len) {
        fprintf(stderr, "the MongoDB script wrote no uri in %s\n", dir);
        free(base_uri);
        return NULL;
    }
    while (len && (base_uri[len - 1] == '\n' || base_uri[len - 1] == ' '))
        base_uri[--len] = 0;
    char *uri = itest_mongo_uri_with_db(base_uri, "interpd_faults", query);
    free(base_uri);
    return uri;
}

/* Stop the private server; its state goes unless a check failed since
 * mark (then it is kept for a look). */
static void mongo_private_end(int mark)
{
    int stop_code = mongo_state ? mongo_script("stop") : 0;
    CHECK_INT(stop_code, 0);
    if (mongo_state && test__failed_checks == mark)
        itest_rm_rf(mongo_state);
    else if (mongo_state)
        fprintf(stderr, "keeping the private MongoDB state in %s\n",
                mongo_state);
    free(mongo_state);
    mongo_state = NULL;
}

/* ---- a MongoDB proxy that cuts the connections on cue ---- */

#define CUT_MAX_CONNS 64

struct cutproxy {
    int lfd;
    int port;
    struct sockaddr_in up;
    pthread_t acceptor;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool armed; /* cut after the reply to the next lock insert */
    bool cut;   /* refusing: new connections are closed at once */
    bool stop;
    int32_t watch; /* request id of the lock insert seen (0: none) */
    int ncuts;     /* how often it cut */
    int nconns;    /* connections being relayed */
    struct conn *conns[CUT_MAX_CONNS];
};

/* One relayed connection: two relays, the last one out frees it. */
struct conn {
    struct cutproxy *p;
    int client, server;
    int refs;
    int slot;
};

struct relay {
    struct conn *c;
    bool c2s; /* client to server */
};

static bool read_full(int fd, void *buf, size_t len)
{
    size_t got = 0;
    while (got < len) {
        ssize_t n = read(fd, (char *)buf + got, len - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return false;
        got += (size_t)n;
    }
    return true;
}

static int32_t le32(const unsigned char *b)
{
    return (int32_t)((uint32_t)b[0] | (uint32_t)b[1] << 8 |
                     (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24);
}

/* An OP_MSG whose section 0 command is {insert: "quota_locks", ...}:
 * header (16), flags (4), kind 0 (1), document length (4), then the
 * element: type 2 (string), "insert\0", length (4), "quota_locks\0". */
static bool is_lock_insert(const unsigned char *m, size_t len)
{
    static const char key[] = "\x02insert";  /* and its NUL */
    static const char val[] = "quota_locks"; /* and its NUL */
    const unsigned char *e = m + 25;
    if (len < 25 + sizeof(key) + 4 + sizeof(val) || le32(m + 12) != 2013 ||
        m[20] != 0)
        return false;
    return !memcmp(e, key, sizeof(key)) &&
           !memcmp(e + sizeof(key) + 4, val, sizeof(val));
}

/* Called with p->mu held. */
static void cut_all(struct cutproxy *p)
{
    for (int i = 0; i < CUT_MAX_CONNS; i++) {
        if (!p->conns[i])
            continue;
        shutdown(p->conns[i]->client, SHUT_RDWR);
        shutdown(p->conns[i]->server, SHUT_RDWR);
    }
}

static void note_message(const struct relay *r, const unsigned char *m,
                         size_t n)
{
    struct cutproxy *p = r->c->p;
    pthread_mutex_lock(&p->mu);
    if (r->c2s && p->armed && !p->watch && is_lock_insert(m, n)) {
        p->watch = le32(m + 4);
    } else if (!r->c2s && p->watch && le32(m + 8) == p->watch) {
        p->armed = false;
        p->watch = 0;
        p->cut = true;
        p->ncuts++;
        cut_all(p);
    }
    pthread_mutex_unlock(&p->mu);
}

static void conn_put(struct conn *c)
{
    struct cutproxy *p = c->p;
    pthread_mutex_lock(&p->mu);
    shutdown(c->client, SHUT_RDWR);
    shutdown(c->server, SHUT_RDWR);
    if (--c->refs == 0) {
        p->conns[c->slot] = NULL;
        p->nconns--;
        close(c->client);
        close(c->server);
        free(c);
        pthread_cond_broadcast(&p->cv);
    }
    pthread_mutex_unlock(&p->mu);
}

/* Relay whole messages one way until EOF or a cut. */
static void *relay_main(void *arg)
{
    struct relay *r = arg;
    int from = r->c2s ? r->c->client : r->c->server;
    int to = r->c2s ? r->c->server : r->c->client;
    unsigned char *m = NULL;
    for (;;) {
        unsigned char hdr[4];
        if (!read_full(from, hdr, 4))
            break;
        int32_t len = le32(hdr);
        if (len < 16 || len > 48 << 20)
            break;
        unsigned char *bigger = realloc(m, (size_t)len);
        if (!bigger)
            break;
        m = bigger;
        memcpy(m, hdr, 4);
        if (!read_full(from, m + 4, (size_t)len - 4))
            break;
        /* The reply that triggers the cut still reaches the client. */
        if (!itest_send_all(to, m, (size_t)len))
            break;
        note_message(r, m, (size_t)len);
    }
    free(m);
    conn_put(r->c);
    free(r);
    return NULL;
}

static bool relay_start(struct conn *c, bool c2s)
{
    struct relay *r = calloc(1, sizeof(*r));
    pthread_t t;
    if (!r)
        return false;
    r->c = c;
    r->c2s = c2s;
    if (pthread_create(&t, NULL, relay_main, r)) {
        free(r);
        return false;
    }
    pthread_detach(t);
    return true;
}

/* Relay one accepted client, or close it at once while cut. */
static void proxy_take(struct cutproxy *p, int client)
{
    pthread_mutex_lock(&p->mu);
    int slot = -1;
    for (int i = 0; i < CUT_MAX_CONNS && slot < 0; i++)
        if (!p->conns[i])
            slot = i;
    bool refuse = p->cut || p->stop || slot < 0;
    pthread_mutex_unlock(&p->mu);
    int server = refuse ? -1 : socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (server < 0 ||
        connect(server, (const struct sockaddr *)&p->up, sizeof(p->up))) {
        if (server >= 0)
            close(server);
        close(client);
        return;
    }
    struct conn *c = calloc(1, sizeof(*c));
    if (!c)
        abort();
    *c = (struct conn){
        .p = p, .client = client, .server = server, .refs = 2, .slot = slot};
    pthread_mutex_lock(&p->mu);
    p->conns[slot] = c;
    p->nconns++;
    pthread_mutex_unlock(&p->mu);
    if (!relay_start(c, true) || !relay_start(c, false))
        abort();
}

static void *proxy_accept_main(void *arg)
{
    struct cutproxy *p = arg;
    for (;;) {
        int fd = accept4(p->lfd, NULL, NULL, SOCK_CLOEXEC);
        pthread_mutex_lock(&p->mu);
        bool stop = p->stop;
        pthread_mutex_unlock(&p->mu);
        if (stop) {
            if (fd >= 0)
                close(fd);
            break;
        }
        if (fd < 0)
            continue;
        proxy_take(p, fd);
    }
    return NULL;
}

/* A proxy to the server of uri (mongodb://127.0.0.1:PORT/...) on a port
 * of its own; false after saying why. */
static bool proxy_start(struct cutproxy *p, const char *uri)
{
    memset(p, 0, sizeof(*p));
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    unsigned port = 0;
    if (sscanf(uri, "mongodb://127.0.0.1:%u/", &port) != 1 || !port ||
        port > 65535) {
        fprintf(stderr, "proxy: cannot take the port from %s\n", uri);
        return false;
    }
    p->up.sin_family = AF_INET;
    p->up.sin_port = htons((uint16_t)port);
    p->up.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t alen = sizeof(a);
    p->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (p->lfd < 0 || bind(p->lfd, (struct sockaddr *)&a, sizeof(a)) ||
        listen(p->lfd, 64) ||
        getsockname(p->lfd, (struct sockaddr *)&a, &alen)) {
        perror("proxy: listen");
        return false;
    }
    p->port = ntohs(a.sin_port);
    if (pthread_create(&p->acceptor, NULL, proxy_accept_main, p))
        abort();
    return true;
}

static void proxy_set(struct cutproxy *p, bool armed, bool cut)
{
    pthread_mutex_lock(&p->mu);
    p->armed = armed;
    p->cut = cut;
    pthread_mutex_unlock(&p->mu);
}

static int proxy_cuts(struct cutproxy *p)
{
    pthread_mutex_lock(&p->mu);
    int n = p->ncuts;
    pthread_mutex_unlock(&p->mu);
    return n;
}

/* Stop accepting, cut what runs and wait for the relays to end. */
static void proxy_stop(struct cutproxy *p)
{
    pthread_mutex_lock(&p->mu);
    p->stop = true;
    cut_all(p);
    pthread_mutex_unlock(&p->mu);
    shutdown(p->lfd, SHUT_RDWR);
    pthread_join(p->acceptor, NULL);
    close(p->lfd);
    pthread_mutex_lock(&p->mu);
    while (p->nconns > 0)
        pthread_cond_wait(&p->cv, &p->mu);
    pthread_mutex_unlock(&p->mu);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv);
}

/* ---- the load ---- */

struct upload {
    uint32_t seed;
    size_t len;
    char user[8];
    char id[48];  /* set once a 201 came */
    bool refused; /* the first try got 503 */
};

struct shared {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    size_t ok_uploads;         /* 201s so far */
    size_t refused_after_kill; /* 503s since killed was set */
    bool killed;
    bool stop;
};

struct worker {
    struct itest_server *s;
    const char *key;
    struct shared *sh;
    int idx;
    struct upload up[MAX_UPLOADS]; /* OUT */
    size_t nup;                    /* OUT */
    size_t n201, n200, n503, ncut; /* OUT: outcomes */
    size_t n503_before_kill;       /* OUT */
    size_t nbad;                   /* OUT: anything else */
    char bad[2048];                /* OUT: the first few, described */
};

static void note_bad(struct worker *w, const struct itest_resp *r,
                     const char *why)
{
    size_t used = strlen(w->bad);
    if (w->nbad++ < 4 && used < sizeof(w->bad) - 1)
        snprintf(w->bad + used, sizeof(w->bad) - used,
                 "  thread %d: %s: %s; status %ld, curl: %s, body: %.200s\n",
                 w->idx, r->what, why, r->status,
                 r->curl_rc ? r->curl_err : "ok", r->body);
}

/* Classify one answer; true when it was a 503 (counted). */
static bool outcome(struct worker *w, const struct itest_resp *r, long want_ok)
{
    if (r->status == want_ok && r->curl_rc == CURLE_OK)
        return false;
    if (r->status == 200 && want_ok == 200 && r->curl_rc != CURLE_OK) {
        /* A download cut off mid-body when the database went away: the
         * client sees the failed transfer, never a wrong body. */
        w->ncut++;
        return false;
    }
    if (r->status == 503) {
        const char *code = itest_json_str(r->json, "error.code");
        const char *ra = itest_header(r, "Retry-After");
        if (!code || strcmp(code, "unavailable"))
            note_bad(w, r, "503 without error.code \"unavailable\"");
        else if (!ra || strtol(ra, NULL, 10) <= 0)
            note_bad(w, r, "503 without a positive Retry-After");
        pthread_mutex_lock(&w->sh->mu);
        bool killed = w->sh->killed;
        if (killed)
            w->sh->refused_after_kill++;
        pthread_cond_broadcast(&w->sh->cv);
        pthread_mutex_unlock(&w->sh->mu);
        if (killed)
            w->n503++;
        else
            w->n503_before_kill++;
        return true;
    }
    note_bad(w, r, r->status ? "want 201/200 or 503" : "no answer");
    return false;
}

static long upload(struct itest_server *s, const char *key, struct upload *u,
                   struct itest_resp *r)
{
    unsigned char *data = malloc(u->len);
    if (!data)
        abort();
    itest_pattern_fill(u->seed, 0, data, u->len);
    char name[32];
    snprintf(name, sizeof(name), "f%u.bin", (unsigned)u->seed);
    char *path = itest_fmt("/v1/files?filename=%s", name);
    struct itest_req rq = {0};
    rq.path = path;
    rq.key = key;
    rq.user_id = u->user;
    rq.content_type = "application/octet-stream";
    rq.body = data;
    rq.body_len = u->len;
    rq.timeout_ms = REQ_TIMEOUT_MS;
    long st = itest_do(s, &rq, r);
    free(path);
    free(data);
    return st;
}

static bool sha_matches(const char *hex, const struct upload *u)
{
    char want[65];
    itest_pattern_sha256(u->seed, u->len, want);
    return hex && !strcmp(hex, want);
}

static void do_get(struct worker *w, const char *path, struct itest_resp *r)
{
    struct itest_req rq = {0};
    rq.path = path;
    rq.key = w->key;
    rq.user_id = w->up[0].user;
    rq.timeout_ms = REQ_TIMEOUT_MS;
    itest_do(w->s, &rq, r);
}

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    struct shared *sh = w->sh;
    for (size_t i = 0; i < MAX_UPLOADS; i++) {
        pthread_mutex_lock(&sh->mu);
        bool stop = sh->stop;
        pthread_mutex_unlock(&sh->mu);
        if (stop)
            break;
        struct upload *u = &w->up[w->nup++];
        u->seed = (uint32_t)(w->idx * 1000 + (int)i);
        /* 1 KiB .. 600 KiB: several uploads span GridFS chunks (255 KiB). */
        u->len = 1024 + ((size_t)u->seed * 104729u) % (600 * 1024);
        snprintf(u->user, sizeof(u->user), "u%d", w->idx);
        struct itest_resp r;
        upload(w->s, w->key, u, &r);
        if (outcome(w, &r, 201)) {
            u->refused = true;
        } else if (r.status == 201) {
            const char *id = itest_json_str(r.json, "file_id");
            snprintf(u->id, sizeof(u->id), "%s", id ? id : "");
            if (!id || !sha_matches(itest_json_str(r.json, "sha256"), u))
                note_bad(w, &r, "201 without an id or with a wrong sha256");
            w->n201++;
            pthread_mutex_lock(&sh->mu);
            sh->ok_uploads++;
            pthread_cond_broadcast(&sh->cv);
            pthread_mutex_unlock(&sh->mu);
        }
        itest_resp_release(&r);

        /* Read back an earlier upload of this thread, and list. */
        const struct upload *old = NULL;
        for (size_t k = i / 2; k < w->nup && !old; k++)
            if (w->up[k].id[0])
                old = &w->up[k];
        if (old) {
            char *p = itest_fmt("/v1/files/%s/content", old->id);
            do_get(w, p, &r);
            free(p);
            if (!outcome(w, &r, 200) && r.status == 200 &&
                r.curl_rc == CURLE_OK) {
                char sha[65];
                itest_sha256_hex(r.body, r.len, sha);
                if (!sha_matches(sha, old))
                    note_bad(w, &r, "200 with the wrong bytes");
                w->n200++;
            }
            itest_resp_release(&r);
        }
        do_get(w, "/v1/files?limit=5", &r);
        if (!outcome(w, &r, 200) && r.status == 200)
            w->n200++;
        itest_resp_release(&r);
    }
    return NULL;
}

/* Wait (bounded) until pred holds under sh->mu: the workers signal every
 * answer, so this waits on events, not on time. */
static bool wait_for(struct shared *sh, bool (*pred)(const struct shared *),
                     int timeout_s)
{
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += timeout_s;
    pthread_mutex_lock(&sh->mu);
    while (!pred(sh)) {
        if (pthread_cond_timedwait(&sh->cv, &sh->mu, &until) == ETIMEDOUT)
            break;
    }
    bool ok = pred(sh);
    pthread_mutex_unlock(&sh->mu);
    return ok;
}

static bool enough_ok(const struct shared *sh)
{
    return sh->ok_uploads >= OK_BEFORE_KILL;
}

static bool enough_refused(const struct shared *sh)
{
    return sh->refused_after_kill >= REFUSED_AFTER_KILL;
}

static long simple_get(struct itest_server *s, const char *path,
                       struct itest_resp *r)
{
    struct itest_req rq = {0};
    rq.path = path;
    rq.timeout_ms = REQ_TIMEOUT_MS;
    return itest_do(s, &rq, r);
}

/* Poll /readyz until 200 (true) or secs have passed.  No event says
 * when the server noticed the database is back: poll, bounded. */
static bool wait_ready(struct itest_server *s, double secs)
{
    struct itest_resp r;
    bool ready = false;
    double deadline = itest_now() + secs;
    while (!ready && itest_now() < deadline) {
        simple_get(s, "/readyz", &r);
        ready = r.status == 200;
        itest_resp_release(&r);
        if (!ready)
            itest_sleep_until(itest_now() + 0.1);
    }
    return ready;
}

/* After the outage: exactly the acknowledged uploads are listed, each
 * downloads with its bytes, and the store has no orphans. */
static void check_store(struct itest_server *s, const char *key,
                        struct worker *w)
{
    size_t want_total = 0, acked = 0;
    for (int t = 0; t < NTHREADS; t++)
        for (size_t i = 0; i < w[t].nup; i++)
            acked += w[t].up[i].id[0] != 0;
    /* Uploads refused during the outage are undone by the server's
     * background retry once the database is back (the bytes, and the
     * record an insert may have written before its answer was lost); no
     * event says when, so wait for it, bounded (backoff at most 5 s). */
    {
        double until = itest_now() + 20;
        size_t nrec = 0;
        char **v = NULL;
        for (;;) {
            size_t n = itest_stray_files(s, &v);
            itest_strv_free(v);
            bool ok = itest_store_consistent(s, &nrec);
            if ((ok && n == acked && nrec == acked) || itest_now() > until)
                break;
            usleep(200 * 1000);
        }
    }
    for (int t = 0; t < NTHREADS; t++) {
        struct itest_resp r;
        struct itest_req rq = {0};
        rq.path = "/v1/files?limit=100";
        rq.key = key;
        rq.user_id = w[t].up[0].user;
        rq.timeout_ms = REQ_TIMEOUT_MS;
        itest_do(s, &rq, &r);
        CHECK_STATUS(&r, 200);
        json_t *files = itest_json_get(r.json, "files");
        size_t want = 0;
        for (size_t i = 0; i < w[t].nup; i++) {
            const struct upload *u = &w[t].up[i];
            if (!u->id[0])
                continue;
            want++;
            bool listed = false;
            size_t k;
            json_t *f;
            json_array_foreach(files, k, f)
            {
                const char *id = itest_json_str(f, "file_id");
                if (id && !strcmp(id, u->id))
                    listed = true;
            }
            CHECKF(listed, "acknowledged upload %s of %s is not listed", u->id,
                   u->user);
            char *p = itest_fmt("/v1/files/%s/content", u->id);
            struct itest_resp c;
            itest_request(s, "GET", p, key, u->user, NULL, NULL, 0, NULL, &c);
            free(p);
            CHECK_STATUS(&c, 200);
            char sha[65];
            itest_sha256_hex(c.body, c.len, sha);
            CHECKF(sha_matches(sha, u),
                   "%s of %s: %zu bytes with sha256 %s, want %zu bytes of "
                   "seed %u",
                   u->id, u->user, c.len, sha, u->len, (unsigned)u->seed);
            itest_resp_release(&c);
        }
        /* Nothing refused with 503 was stored after all. */
        CHECKF(json_array_size(files) == want,
               "%s: %zu files listed, want the %zu acknowledged ones: %.1000s",
               w[t].up[0].user, json_array_size(files), want, r.body);
        want_total += want;
        itest_resp_release(&r);
    }
    char **strays = NULL;
    size_t n = 0;
    size_t nrec = 0;
    /* An upload whose insert failed in the outage left bytes that the
     * blob store's retry thread removes once the database is back (its
     * backoff reaches 5 s while every attempt fails at once): bounded. */
    (void)itest_wait_strays_at_most(s, want_total, 20000);
    bool consistent = itest_store_consistent(s, &nrec);
    CHECKF(consistent, "the store has orphans or half-written uploads after "
                       "the outage (see above)");
    CHECKF(nrec == want_total, "%zu metadata records, want %zu", nrec,
           want_total);
    n = itest_stray_files(s, &strays);
    CHECKF(n == want_total, "GridFS holds %zu entries, want %zu files", n,
           want_total);
    if (n != want_total)
        itest_print_strays(s);
    itest_strv_free(strays);
}

static void run_outage(const char *uri)
{
    struct itest_opts o = {.mongo_uri = uri};
    struct itest_server *s = itest_start(&o);
    REQUIRE(s);
    char *key = NULL;
    REQUIRE(itest_create_key(s, "acme", false, &key, NULL));

    struct shared sh;
    memset(&sh, 0, sizeof(sh));
    pthread_mutex_init(&sh.mu, NULL);
    pthread_cond_init(&sh.cv, NULL);
    struct worker *w = calloc(NTHREADS, sizeof(*w));
    REQUIRE(w);
    pthread_t th[NTHREADS];
    for (int t = 0; t < NTHREADS; t++) {
        w[t].s = s;
        w[t].key = key;
        w[t].sh = &sh;
        w[t].idx = t;
        if (pthread_create(&th[t], NULL, worker_main, &w[t]))
            abort();
    }

    CHECKF(wait_for(&sh, enough_ok, 60),
           "fewer than %d uploads succeeded "
           "within 60 s with the database up",
           OK_BEFORE_KILL);
    /* Mark first: a 503 from here on may be the kill's doing. */
    pthread_mutex_lock(&sh.mu);
    sh.killed = true;
    size_t ok_at_kill = sh.ok_uploads;
    pthread_mutex_unlock(&sh.mu);
    CHECK_INT(mongo_script("kill"), 0);
    CHECKF(wait_for(&sh, enough_refused, 60),
           "fewer than %d requests were refused with 503 within 60 s of "
           "killing the database",
           REFUSED_AFTER_KILL);

    /* Liveness stays, readiness goes: the server still runs. */
    struct itest_resp r;
    simple_get(s, "/healthz", &r);
    CHECK_STATUS(&r, 200);
    itest_resp_release(&r);
    simple_get(s, "/readyz", &r);
    CHECK_STATUS(&r, 503);
    itest_resp_release(&r);
    int st;
    CHECKF(!itest_wait_exit(s, 0, &st),
           "the server exited during the "
           "outage (wait status 0x%x)",
           (unsigned)st);

    pthread_mutex_lock(&sh.mu);
    sh.stop = true;
    pthread_mutex_unlock(&sh.mu);
    for (int t = 0; t < NTHREADS; t++)
        pthread_join(th[t], NULL);

    size_t n201 = 0, n200 = 0, n503 = 0, ncut = 0, early = 0;
    for (int t = 0; t < NTHREADS; t++) {
        n201 += w[t].n201;
        n200 += w[t].n200;
        n503 += w[t].n503;
        ncut += w[t].ncut;
        early += w[t].n503_before_kill;
        CHECKF(w[t].nbad == 0,
               "thread %d: %zu requests answered neither "
               "201/200 nor 503 unavailable:\n%s",
               t, w[t].nbad, w[t].bad);
    }
    printf("     %zu uploads ok (%zu before the kill), %zu reads/lists ok, "
           "%zu refused with 503, %zu downloads cut off\n",
           n201, ok_at_kill, n200, n503, ncut);
    CHECKF(early == 0, "%zu requests got 503 while the database was up", early);

    /* The database comes back on the same port with the same data; the
     * server notices by itself.  No event says so: poll, bounded. */
    CHECK_INT(mongo_script("restart"), 0);
    CHECKF(wait_ready(s, 30),
           "/readyz not 200 within 30 s of the database's restart");

    /* Every upload refused during the outage succeeds now. */
    for (int t = 0; t < NTHREADS; t++) {
        for (size_t i = 0; i < w[t].nup; i++) {
            struct upload *u = &w[t].up[i];
            if (u->id[0])
                continue;
            upload(s, key, u, &r);
            CHECK_STATUS(&r, 201);
            const char *id = itest_json_str(r.json, "file_id");
            CHECKF(sha_matches(itest_json_str(r.json, "sha256"), u),
                   "retried upload: wrong sha256: %s", r.body);
            snprintf(u->id, sizeof(u->id), "%s", id ? id : "");
            itest_resp_release(&r);
        }
    }
    check_store(s, key, w);

    pthread_mutex_destroy(&sh.mu);
    pthread_cond_destroy(&sh.cv);
    free(w);
    free(key);
    itest_stop(s);
}

static void database_outage(void)
{
    int mark = test__failed_checks;
    char *uri = mongo_private_start("serverSelectionTimeoutMS=1000");
    CHECKF(uri != NULL, "no private MongoDB server for the fault test");
    if (uri)
        run_outage(uri);
    mongo_private_end(mark);
    free(uri);
}

/* ---- fast failure: liveness, bounded 503s, the key cache ---- */

#define MONGO_TIMEOUT_S 2  /* --mongo-timeout */
#define KEY_CACHE_TTL_S 10 /* --key-cache-ttl */
#define NSTUCK 6           /* uploads in flight while /healthz is asked */
#define HEALTHZ_MAX_S 1.0  /* liveness answers well within this */
#define REFUSE_MAX_S 5.0   /* --mongo-timeout 2s: a 503 within this */

struct timed {
    struct itest_server *s;
    const char *key;
    int idx;
    long status;    /* OUT */
    double secs;    /* OUT */
    char body[256]; /* OUT */
};

static void *timed_upload(void *arg)
{
    struct timed *t = arg;
    struct upload u = {.seed = (uint32_t)(7000 + t->idx), .len = 1 << 20};
    snprintf(u.user, sizeof(u.user), "s%d", t->idx);
    struct itest_resp r;
    double t0 = itest_now();
    upload(t->s, t->key, &u, &r);
    t->secs = itest_now() - t0;
    t->status = r.status;
    snprintf(t->body, sizeof(t->body), "%s", r.body);
    itest_resp_release(&r);
    return NULL;
}

/* GET path with key (and a user); the answer's time into *secs. */
static long timed_get(struct itest_server *s, const char *path, const char *key,
                      struct itest_resp *r, double *secs)
{
    struct itest_req rq = {0};
    rq.path = path;
    rq.key = key;
    rq.user_id = key ? "u1" : NULL;
    rq.timeout_ms = REQ_TIMEOUT_MS;
    double t0 = itest_now();
    long st = itest_do(s, &rq, r);
    if (secs)
        *secs = itest_now() - t0;
    return st;
}

/* A 503 whose message shows the request passed authentication and failed
 * at the store (not "checking the API key"). */
static void check_backend_503(const struct itest_resp *r)
{
    const char *msg = itest_json_str(r->json, "error.message");
    CHECK_STATUS(r, 503);
    CHECKF(msg && !strstr(msg, "API key"),
           "want a 503 from the store, after the key was accepted: %s",
           r->body);
}

static void outage_while_stuck(struct itest_server *s, const char *key)
{
    struct timed t[NSTUCK];
    pthread_t th[NSTUCK];
    for (int i = 0; i < NSTUCK; i++) {
        t[i] = (struct timed){.s = s, .key = key, .idx = i};
        if (pthread_create(&th[i], NULL, timed_upload, &t[i]))
            abort();
    }
    /* Liveness, asked again and again while the uploads are in flight. */
    double worst = 0;
    struct itest_resp r;
    for (int i = 0; i < 5; i++) {
        double secs;
        timed_get(s, "/healthz", NULL, &r, &secs);
        CHECK_STATUS(&r, 200);
        itest_resp_release(&r);
        if (secs > worst)
            worst = secs;
    }
    CHECKF(worst < HEALTHZ_MAX_S,
           "/healthz took %.3f s during the outage "
           "(want < %.1f s)",
           worst, HEALTHZ_MAX_S);
    double slowest = 0;
    for (int i = 0; i < NSTUCK; i++) {
        pthread_join(th[i], NULL);
        if (t[i].secs > slowest)
            slowest = t[i].secs;
        CHECKF(t[i].status == 503,
               "upload %d during the outage: status "
               "%ld: %s",
               i, t[i].status, t[i].body);
        CHECKF(t[i].secs < REFUSE_MAX_S,
               "upload %d got its %ld after "
               "%.2f s (want < %.1f s)",
               i, t[i].status, t[i].secs, REFUSE_MAX_S);
    }
    printf("     during the outage: /healthz at most %.3f s, uploads "
           "refused within %.3f s\n",
           worst, slowest);
    double secs;
    timed_get(s, "/readyz", NULL, &r, &secs);
    CHECK_STATUS(&r, 503);
    CHECKF(secs < HEALTHZ_MAX_S, "/readyz took %.3f s during the outage", secs);
    itest_resp_release(&r);
}

static void run_fast_failure(const char *uri)
{
    char ttl[16];
    snprintf(ttl, sizeof(ttl), "%ds", KEY_CACHE_TTL_S);
    char mto[16];
    snprintf(mto, sizeof(mto), "%ds", MONGO_TIMEOUT_S);
    const char *args[] = {
        "--mongo-timeout", mto, "--key-cache-ttl", ttl, "--threads", "2", NULL};
    struct itest_opts o = {.mongo_uri = uri, .args = args};
    struct itest_server *s = itest_start(&o);
    REQUIRE(s);
    char *key = NULL, *gone = NULL, *gone_id = NULL;
    REQUIRE(itest_create_key(s, "acme", false, &key, NULL));
    REQUIRE(itest_create_key(s, "gone", false, &gone, &gone_id));
    struct itest_resp r;

    /* Every key used once: the store vouched for each just now. */
    double verified = itest_now();
    timed_get(s, "/v1/files", key, &r, NULL);
    CHECK_STATUS(&r, 200);
    itest_resp_release(&r);
    timed_get(s, "/metrics", s->admin_key, &r, NULL);
    CHECK_STATUS(&r, 200);
    itest_resp_release(&r);
    timed_get(s, "/v1/files", gone, &r, NULL);
    CHECK_STATUS(&r, 200);
    itest_resp_release(&r);
    /* Revoked through the store while it is up: refused at once. */
    CHECK_INT(itest_cli(s, NULL, "keys", "revoke", gone_id, "--data-dir",
                        s->data_dir, NULL),
              0);
    timed_get(s, "/v1/files", gone, &r, NULL);
    CHECK_STATUS(&r, 401);
    itest_resp_release(&r);

    CHECK_INT(mongo_script("kill"), 0);
    /* A recently verified key still authenticates: the admin's /metrics
     * needs no store at all; a user's listing fails only at the store. */
    timed_get(s, "/metrics", s->admin_key, &r, NULL);
    CHECK_STATUS(&r, 200);
    itest_resp_release(&r);
    double secs;
    timed_get(s, "/v1/files", key, &r, &secs);
    check_backend_503(&r);
    CHECKF(secs < REFUSE_MAX_S, "listing took %.2f s to fail", secs);
    itest_resp_release(&r);
    /* The revoked key stays refused through the outage. */
    timed_get(s, "/v1/files", gone, &r, NULL);
    CHECKF(r.status == 401 || r.status == 503,
           "a revoked key during the outage: %ld %s", r.status, r.body);
    itest_resp_release(&r);

    outage_while_stuck(s, key);

    /* Past the cache's lifetime no key authenticates without the store:
     * 503 (retry later), never 200. */
    itest_sleep_until(verified + KEY_CACHE_TTL_S + 1);
    timed_get(s, "/metrics", s->admin_key, &r, NULL);
    CHECK_STATUS(&r, 503);
    itest_resp_release(&r);
    timed_get(s, "/v1/files", key, &r, NULL);
    CHECK_STATUS(&r, 503);
    itest_resp_release(&r);

    /* Back: ready again (poll, bounded), and everything works. */
    CHECK_INT(mongo_script("restart"), 0);
    CHECKF(wait_ready(s, 30),
           "/readyz not 200 within 30 s of the database's restart");
    struct upload u = {.seed = 9999, .len = 4096, .user = "u1"};
    upload(s, key, &u, &r);
    CHECK_STATUS(&r, 201);
    itest_resp_release(&r);
    timed_get(s, "/v1/files", gone, &r, NULL);
    CHECK_STATUS(&r, 401);
    itest_resp_release(&r);
    timed_get(s, "/metrics", s->admin_key, &r, NULL);
    CHECK_STATUS(&r, 200);
    itest_resp_release(&r);
    free(key);
    free(gone);
    free(gone_id);
    itest_stop(s);
}

static void fast_failure(void)
{
    int mark = test__failed_checks;
    /* No timeouts in the URI: --mongo-timeout bounds every operation. */
    char *uri = mongo_private_start(NULL);
    CHECKF(uri != NULL, "no private MongoDB server for the fault test");
    if (uri)
        run_fast_failure(uri);
    mongo_private_end(mark);
    free(uri);
}

/* ---- a quota lock left behind by an outage ---- */

static void run_lock_left(const char *direct)
{
    struct cutproxy p;
    REQUIRE(proxy_start(&p, direct));
    char *uri = itest_fmt("mongodb://127.0.0.1:%d/interpd_lockcut?"
                          "serverSelectionTimeoutMS=1000",
                          p.port);
    const char *args[] = {"--threads", "2", NULL};
    struct itest_opts o = {.mongo_uri = uri, .args = args};
    struct itest_server *s = itest_start(&o);
    char *key = NULL;
    struct itest_resp r;
    if (!s || !itest_create_key(s, "acme", false, &key, NULL)) {
        CHECKF(false, "no server or key behind the proxy");
        goto out;
    }
    /* The upload takes its quota locks; the database goes away with the
     * reply to the first, so the upload cannot release them. */
    proxy_set(&p, true, false);
    struct upload u = {.seed = 4242, .len = 4096, .user = "u1"};
    upload(s, key, &u, &r);
    CHECK_STATUS(&r, 503);
    itest_resp_release(&r);
    CHECK_INT(proxy_cuts(&p), 1);

    /* Back: ready again (poll, bounded). */
    proxy_set(&p, false, false);
    CHECKF(wait_ready(s, 30),
           "/readyz not 200 within 30 s of the database's return");

    /* The same user's upload succeeds now: the locks the outage left are
     * released, not waited for. */
    double t0 = itest_now();
    upload(s, key, &u, &r);
    CHECK_STATUS(&r, 201);
    CHECKF(sha_matches(itest_json_str(r.json, "sha256"), &u),
           "upload after the outage: wrong sha256: %s", r.body);
    itest_resp_release(&r);
    printf("     upload after the outage answered in %.3f s\n",
           itest_now() - t0);
    char *log = itest_read_log(s);
    CHECKF(log && strstr(log, "released the quota lock of acme left by"),
           "the log does not say the tenant's lock was released");
    free(log);
out:
    free(key);
    if (s)
        itest_stop(s);
    proxy_stop(&p);
    free(uri);
}

static void lock_left_by_outage(void)
{
    int mark = test__failed_checks;
    char *uri = mongo_private_start(NULL);
    CHECKF(uri != NULL, "no private MongoDB server for the fault test");
    if (uri)
        run_lock_left(uri);
    mongo_private_end(mark);
    free(uri);
}

TEST_MAIN(T(database_outage), T(fast_failure), T(lock_left_by_outage))
