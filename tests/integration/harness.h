/*
 * harness.h - the integration-test harness: runs the real interpd binary
 * ($INTERPD_BIN) on an ephemeral port in a fresh data dir and talks to it
 * over HTTP with libcurl.
 *
 * A test program includes this header (it pulls in tests/unit/test.h for
 * CHECK/REQUIRE/TEST_MAIN) and typically does:
 *
 *     struct itest_server *s = itest_start(NULL);
 *     REQUIRE(s);
 *     struct itest_resp r;
 *     itest_request(s, "GET", "/healthz", NULL, NULL, NULL, NULL, 0, NULL, &r);
 *     CHECK_STATUS(&r, 200);
 *     itest_resp_release(&r);
 *     itest_stop(s);
 *
 * itest_start/itest_stop are macros that remember the failure count of the
 * running test: when the test failed, itest_stop prints the server log's tail
 * and keeps the temp dir (its path is printed); otherwise the dir is removed.
 * itest_stop also fails the test when the server does not exit 0 on
 * SIGTERM.  A server left running (a REQUIRE returned early) is killed at
 * exit, its log printed and its dir kept.
 *
 * Every check macro below prints what was expected and what came back (the
 * request line, the status and the body).
 *
 * Environment: INTERPD_BIN (set by ctest) is the binary under test.
 * ITEST_BACKEND selects the stores every server gets: "sqlite" (the default:
 * SQLite metadata and blobs on the local disk) or "mongo" (MongoDB metadata
 * and GridFS blobs on the server of the ctest fixture `mongo`, whose URI is
 * in $IPD_TEST_MONGO_STATE/uri; each itest_start gets a fresh database,
 * dropped by itest_stop when the test passed, kept and named otherwise).
 * The same test code then checks either backend: itest_stray_files and
 * itest_store_consistent look at the disk or at GridFS.
 * ITEST_SERVER_WRAPPER runs the server under a tool ("valgrind -q
 * --error-exitcode=99"); ITEST_TIMEOUT_SCALE=N stretches every bounded
 * wait of the harness N times.  Inherited INTERPD_* variables never reach
 * the server.
 * ITEST_EXEC_MODE=warm|cold gives every server `--exec-mode MODE`, before
 * the test's own arguments (a test's --exec-mode comes later and wins) and
 * unless the test's config text sets exec-mode.  A server started warm
 * (by either) is waited for (bounded, 60 s) until GET /readyz says
 * "execution_mode": "warm", so the test measures warm runs; when it never
 * does, it did not start (itest_opts.no_warm_wait skips the wait).
 * ITEST_EXEC_MODE=session starts servers as warm does, and runs every
 * synchronous POST /v1/executions of the test in a session of its own
 * (itest_do, through which every request goes): the harness first POSTs
 * /v1/sessions as the same caller (the request's key and user id, and
 * any Authorization or X-User-Id among its extra headers), adds
 * "session_id" to the body (the rest of it byte for byte), sends it, and
 * DELETEs the session, so each execution still starts from a fresh
 * interpreter but runs through the session path (a session's zygote and
 * host uid, one parked child, its calls).  Passed through unchanged: any
 * other request, a body that is not a JSON object or already has
 * "session_id", "async": true or a "callback_url", and a caller that
 * POST /v1/sessions refuses with 400, 401 or 403 (a networked policy, no
 * or a bad key, a token without the scope).  Any other failure to make
 * the session is the answer the test gets (its `what` says so).  A
 * DELETE that fails, or a 200 that does not name its session, fails the
 * test at itest_stop, as does a live session left on the server then.
 *
 * Thread-safety: itest_do/itest_request and the helpers that do not take a
 * server's lifecycle (start, stop, restart, kill) may run from many threads
 * at once on the same server.  Start and stop servers from the main thread.
 * The CHECK macros are not thread-safe: check results on the main thread.
 */
#ifndef IPD_ITEST_HARNESS_H
#define IPD_ITEST_HARNESS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <curl/curl.h>
#include <jansson.h>

#ifndef ITEST_NO_TEST_H
#include "proc_count.h" /* test_count_uids */
#include "test.h"
#endif

/* One running (or stopped) interpd serve process. */
struct itest_server {
    pid_t pid;       /* 0 once reaped */
    int exit_status; /* wait status once reaped */
    int port;
    char url[64];       /* "http://127.0.0.1:PORT" */
    char *tmp_dir;      /* owned: the test's temp dir */
    char *data_dir;     /* owned: tmp_dir/data, the server's --data-dir */
    char *log_path;     /* owned: tmp_dir/server.log (stdout and stderr) */
    char *admin_key;    /* owned: contents of data_dir/admin.key, no newline;
                         * NULL with itest_opts.no_admin_key */
    char *mongo_uri;    /* owned: its --mongo-uri (with --blob-store gridfs),
                         * NULL on SQLite + local disk */
    bool drop_db;       /* the harness made the database: itest_stop drops
                         * it when the test passed */
    bool warm;          /* started with --exec-mode warm (ITEST_EXEC_MODE or
                         * the test's own flag or config) */
    bool no_admin_key;  /* from itest_opts */
    int session_errors; /* ITEST_EXEC_MODE=session: the hook's failures
                         * (atomic; itest_stop fails when not 0) */
    int session_calls;  /* ... and the executions it ran in sessions */
    int fail_mark;      /* failed-check count when the test started it */
    struct itest_server *next; /* registry of live servers */
};

/* How to start a server.  Every pointer is borrowed for the call. */
struct itest_opts {
    const char *const *args; /* extra `serve` arguments, NULL-terminated */
    const char *const *env;  /* extra "NAME=value" entries, NULL-terminated;
                              * inherited INTERPD_* variables are dropped */
    const char *config;      /* when set: written to tmp_dir/interpd.conf and
                              * passed as --config */
    const char *mongo_uri;   /* when set: MongoDB + GridFS at this URI,
                              * whatever ITEST_BACKEND says; the caller owns
                              * the database (never dropped by the harness) */
    bool no_admin_key;       /* don't require data_dir/admin.key: a server on
                              * a database that already has keys writes
                              * none */
    bool relative_data_dir;  /* run the server in tmp_dir with --data-dir
                              * ./data (data_dir stays absolute) */
    bool private_parent;     /* tmp_dir 0700, like /root (else 0711) */
    bool no_warm_wait;       /* started warm: don't wait until it serves
                              * warm (a zygote that is meant to fail) */
};

#define itest_start(opts) itest__start((opts), test__failed_checks)
#define itest_stop(s)                                                          \
    do {                                                                       \
        if (!itest__stop((s), test__failed_checks))                            \
            test__failed_checks++;                                             \
    } while (0)

/* Start a server; NULL (after printing why and the log) when it did not come
 * up.  The result is freed by itest_stop. */
struct itest_server *itest__start(const struct itest_opts *opts, int fail_mark);
/* SIGTERM the server (unless it already exited), wait for it (bounded) and
 * free s.  Returns false when it did not exit 0 or was killed.  NULL is
 * fine (returns true). */
bool itest__stop(struct itest_server *s, int failed_now);
/* Stop s (it must exit 0) and start it again on the same data dir with new
 * opts.  On failure returns false and s is no longer running. */
bool itest_restart(struct itest_server *s, const struct itest_opts *opts);
/* Send sig to the server process. */
void itest_signal(struct itest_server *s, int sig);
/* Wait up to timeout_ms for the server to exit; true with *status (a wait
 * status) when it did, false when it still runs. */
bool itest_wait_exit(struct itest_server *s, int timeout_ms, int *status);
/* Wait up to timeout_ms until no signal is pending for the server process
 * (so a signal just sent has been delivered to its handler). */
bool itest_wait_signal_delivered(struct itest_server *s, int sig,
                                 int timeout_ms);
/* Print the last `lines` lines of the server log to stderr. */
void itest_print_log_tail(const struct itest_server *s, int lines);
/* The whole server log, NUL-terminated; free() it.  NULL when unreadable. */
char *itest_read_log(const struct itest_server *s);
/* Poll the log (bounded by timeout_ms) for a line containing every one of
 * the NULL-terminated needles.  No event says "the log line is written"
 * (servers often log after sending the response), hence the poll. */
bool itest_wait_log_line(const struct itest_server *s, int timeout_ms, ...);
/* Poll GET /v1/admin/status (bounded by timeout_ms) until the scheduled
 * job `name` has finished a run ("jobs.<name>.runs" >= 1).  Start-up
 * work (the venv job runs at start and may start a sandbox) is over
 * then.  false at the timeout, or when there is no such job. */
bool itest_wait_job_ran(struct itest_server *s, const char *name,
                        int timeout_ms);
/* Poll GET /v1/admin/status (bounded by timeout_ms) until the integer at
 * path (as itest_json_get) equals want. */
bool itest_wait_status_int(struct itest_server *s, const char *path,
                           long long want, int timeout_ms);

/* Poll GET /readyz (bounded by timeout_ms) until it answers 200 with
 * "execution_mode" equal to mode ("warm", "mixed", "starting", "cold"). */
bool itest_wait_exec_mode(struct itest_server *s, const char *mode,
                          int timeout_ms);
/* True when ITEST_EXEC_MODE=warm or session: the servers run warm unless
 * a test says otherwise (any value but "warm", "cold", "session" or unset
 * stops the program loudly). */
bool itest_exec_warm(void);
/* True when ITEST_EXEC_MODE=session: executions run in sessions (above). */
bool itest_exec_session(void);
/* "warm" or "cold" (the servers' --exec-mode), for messages and for a
 * test's own --exec-mode. */
const char *itest_exec_mode_name(void);

/* ---- HTTP ---- */

struct itest_header {
    char *name;  /* owned */
    char *value; /* owned, leading and trailing blanks removed */
};

/* A response.  Release with itest_resp_release. */
struct itest_resp {
    long status; /* 0 when no response came (see curl_rc) */
    CURLcode curl_rc;
    char curl_err[CURL_ERROR_SIZE];
    struct itest_header *headers; /* of the final response, in order */
    size_t nheaders;
    char *body; /* owned, NUL-terminated, never NULL */
    size_t len;
    json_t *json;   /* new reference; NULL unless the body is JSON */
    char what[160]; /* "METHOD /path" for messages */
};

/* One multipart part: a file part when filename is set (may be ""), else a
 * plain field. */
struct itest_pattern_src;
struct itest_part {
    const char *name;
    const char *filename;
    const char *type; /* part Content-Type or NULL */
    const void *data;
    size_t len;
    struct itest_pattern_src *stream; /* when set: the part's bytes are
                                       * generated from it, data unused */
};

/* A request.  Zero-initialise and fill what you need. */
struct itest_req {
    const char *method;       /* NULL: GET, or POST when a body is given */
    const char *path;         /* "/v1/files?limit=10", sent as is */
    const char *key;          /* "Authorization: Bearer KEY"; NULL: none */
    const char *user_id;      /* "X-User-Id"; NULL: none */
    const char *content_type; /* NULL: no Content-Type at all */
    const void *body;         /* raw body (may contain NUL) */
    size_t body_len;
    curl_read_callback read_cb; /* streamed body instead of body */
    void *read_ctx;
    curl_off_t read_len; /* with read_cb: the length, or -1 = chunked */
    const struct itest_part *parts; /* multipart/form-data instead */
    size_t nparts;
    const char *const *headers; /* extra "Name: value", NULL-terminated */
    const char *request_id;     /* X-Request-Id to send */
    long timeout_ms;            /* whole transfer; 0: 60 s */
};

/* Send rq to s.  Always fills *out (release it); returns out->status, 0 when
 * no HTTP response came back (out->curl_rc says why). */
long itest_do(struct itest_server *s, const struct itest_req *rq,
              struct itest_resp *out);
/* Shorthand for itest_do.  body may be NULL; headers NULL-terminated or
 * NULL. */
long itest_request(struct itest_server *s, const char *method, const char *path,
                   const char *key, const char *user_id,
                   const char *content_type, const void *body, size_t len,
                   const char *const *headers, struct itest_resp *out);
/* Raw upload: POST /v1/files?filename=<percent-encoded name>[&extra_query]
 * with the bytes as body.  filename NULL: no filename parameter. */
long itest_upload_raw(struct itest_server *s, const char *key,
                      const char *user_id, const char *filename,
                      const char *content_type, const void *data, size_t len,
                      const char *extra_query, struct itest_resp *out);
/* Multipart upload of one `file` part, plus a ttl_hours field when ttl is
 * not NULL. */
long itest_upload_multipart(struct itest_server *s, const char *key,
                            const char *user_id, const char *filename,
                            const void *data, size_t len, const char *ttl,
                            struct itest_resp *out);
void itest_resp_release(struct itest_resp *r);
/* POST /v1/executions with body (steals it; a NULL body, i.e. a json_pack
 * mistake in the test, aborts) as user with key; the transfer is bounded
 * by timeout_ms (0: 120 s). */
long itest_exec(struct itest_server *s, const char *key, const char *user,
                json_t *body, long timeout_ms, struct itest_resp *out);
/* GET /v1/executions/{id} as user (admin key): true when its status is
 * want, or over (done or cancelled) when want is NULL.  The status goes
 * into st; when true, the execution's "result" (null for a synchronous
 * one) into *result when result is not NULL (json_decref it). */
bool itest_exec_status_is(struct itest_server *s, const char *user,
                          const char *id, const char *want, char *st,
                          size_t stsz, json_t **result);
/* itest_exec_status_is, polled every 50 ms until it holds (at most 20 s). */
bool itest_exec_wait_status(struct itest_server *s, const char *user,
                            const char *id, const char *want, char *st,
                            size_t stsz, json_t **result);
/* The result's stdout / stderr, "" when absent (borrowed from r). */
const char *itest_exec_stdout(const struct itest_resp *r);
const char *itest_exec_stderr(const struct itest_resp *r);
/* First header with that name (case-insensitive); NULL when absent.
 * Borrowed from r. */
const char *itest_header(const struct itest_resp *r, const char *name);
/* The string at a dotted path ("error.code") of r->json or NULL. */
const char *itest_json_str(const json_t *j, const char *path);
/* A copy of the string at a dotted path, "" when there is none: free(). */
char *itest_json_dup(const json_t *j, const char *path);
/* The value at a dotted path, borrowed, or NULL. */
json_t *itest_json_get(const json_t *j, const char *path);
/* True when list (a comma-separated header value) contains token,
 * case-insensitively. */
bool itest_list_has(const char *list, const char *token);

/* Open a plain TCP connection to the server; -1 on failure. */
int itest_connect(const struct itest_server *s);
/* A TCP socket on 127.0.0.1 listening with backlog (never accepted by the
 * harness); its port in *port.  -1 on failure. */
int itest_listen_local(int *port, int backlog);
/* Write all of buf; false on error. */
bool itest_send_all(int fd, const void *buf, size_t len);
/* Read one HTTP/1.1 request from fd (the head, and a body of its
 * Content-Length), waiting at most timeout_ms for each read.  A new
 * NUL-terminated string of what came (at most 64 KiB; cut short at EOF or
 * a silent client), its length in *len; NULL when out of memory. */
char *itest_read_request(int fd, int timeout_ms, size_t *len);

/* ---- Checks (print expected vs. received) ---- */

bool itest__check_status(const char *file, int line, const struct itest_resp *r,
                         long want);
bool itest__check_error(const char *file, int line, const struct itest_resp *r,
                        long want_status, const char *want_code);
bool itest__check_file(const char *file, int line, const json_t *f,
                       const char *filename, const void *data, size_t len);

#define ITEST__FAIL_IF(expr)                                                   \
    do {                                                                       \
        if (!(expr))                                                           \
            test__failed_checks++;                                             \
    } while (0)
#define ITEST__RETURN_IF(expr)                                                 \
    do {                                                                       \
        if (!(expr)) {                                                         \
            test__failed_checks++;                                             \
            return;                                                            \
        }                                                                      \
    } while (0)

/* r's status is want, and it carries an X-Request-Id (every response
 * does). */
#define CHECK_STATUS(r, want)                                                  \
    ITEST__FAIL_IF(itest__check_status(__FILE__, __LINE__, (r), (want)))
#define REQUIRE_STATUS(r, want)                                                \
    ITEST__RETURN_IF(itest__check_status(__FILE__, __LINE__, (r), (want)))
/* r is an error of CONTRACT.md: status, JSON {"error":{"code","message",
 * "request_id"}} with request_id equal to the X-Request-Id header. */
#define CHECK_ERROR(r, status, code)                                           \
    ITEST__FAIL_IF(                                                            \
        itest__check_error(__FILE__, __LINE__, (r), (status), (code)))
/* f is a File object for an upload of data[0..len) named filename (NULL:
 * don't check the name): id shape, size, sha256, source, timestamps. */
#define CHECK_FILE(f, filename, data, len)                                     \
    ITEST__FAIL_IF(                                                            \
        itest__check_file(__FILE__, __LINE__, (f), (filename), (data), (len)))
/* CHECKF: tests/unit/test.h. */

/* ---- Keys and the CLI ---- */

/* Run `$INTERPD_BIN args...` (NULL-terminated) with the server's filtered
 * environment; stdout goes to *out (new, NUL-terminated; may be NULL),
 * stderr to tmp_dir/cli.log.  Returns the exit code, -1 when it did not
 * exit normally within 30 s. */
int itest_cli(struct itest_server *s, char **out, ...);
/* itest_cli with the working directory cwd (a relative --data-dir, or
 * the default ./interpd-data, counts from there). */
int itest_cli_in(struct itest_server *s, const char *cwd, char **out, ...);
/* `keys create --tenant tenant [--admin]`: the plain key and key id (new
 * strings, free()).  false (after printing why) on any failure. */
bool itest_create_key(struct itest_server *s, const char *tenant, bool admin,
                      char **key, char **key_id);
/* `keys create --tenant tenant --policy policy`, with the server's
 * config file when it was started with one (where a test's policies
 * are): the plain key (new string, free()), or NULL after printing
 * why. */
char *itest_create_policy_key(struct itest_server *s, const char *tenant,
                              const char *policy);

/* Run argv (argv[0] a path) with the test's environment minus the
 * variables named in unset (NULL-terminated; may be NULL); its output goes
 * to the test's stdout/stderr.  The exit code; -1 when it did not exit
 * normally within timeout_ms (it is killed then). */
int itest_run(const char *const *argv, const char *const *unset,
              int timeout_ms);
/* Remove path recursively; 0 on success. */
int itest_rm_rf(const char *path);

/* ---- Backends ---- */

/* True when ITEST_BACKEND=mongo (any other value but "sqlite" or unset
 * stops the program loudly). */
bool itest_backend_mongo(void);
/* "sqlite" or "mongo", for messages. */
const char *itest_backend_name(void);
/* The fixture's MongoDB URI with database db (NULL: a fresh unique name)
 * and query appended ("serverSelectionTimeoutMS=1000" or NULL).  New
 * string (free()); NULL after saying why when there is no fixture. */
char *itest_mongo_fixture_uri(const char *db, const char *query);
/* base (a mongodb:// URI) with its database replaced by db (NULL: a fresh
 * name) and query appended (or NULL).  New string. */
char *itest_mongo_uri_with_db(const char *base, const char *db,
                              const char *query);
/* How many collections the database of uri has (0: none, so it does not
 * exist); -1 (after saying why) when MongoDB can't be asked. */
long itest_mongo_collection_count(const char *uri);
/* Drop the database of uri; false (after saying why) on failure. */
bool itest_mongo_drop(const char *uri);

/* ---- What is stored: disk or GridFS ---- */

/* Every regular file under dir, recursively, as paths relative to dir.
 * *out is a new NULL-terminated array; free with itest_strv_free. */
size_t itest_list_files(const char *dir, char ***out);
/* Everything the server's stores hold besides metadata: on SQLite, the
 * regular files under the data dir other than admin.key and meta.db*; on
 * MongoDB, also "gridfs:<id>" for each fs.files document and
 * "gridfs-orphan-chunks:<files_id>" for chunks without an fs.files
 * document (an unfinished or abandoned upload).  So "at most N strays"
 * means: the bytes of at most N files and nothing half-written, on either
 * backend.  On a database error the count includes an entry
 * "mongo-error:..." (never a silent 0). */
size_t itest_stray_files(const struct itest_server *s, char ***out);
/* The bytes of one entry of itest_stray_files (a data-dir path or a
 * "gridfs:<id>" file); new buffer, NULL when unreadable. */
char *itest_read_stored(const struct itest_server *s, const char *entry,
                        size_t *len);
/* Poll (bounded by timeout_ms) until itest_stray_files finds at most max
 * files; true when it did.  For cleanups that no event announces. */
/* The bound for a cleanup the service does after its answer: generous,
 * since a poll passes as soon as it is clean (an ASan build deleting a
 * 60 MiB upload's GridFS chunks on a loaded 2-core CI host once took more
 * than the 5 s these checks had). */
#define ITEST_CLEANUP_WAIT_MS 60000
bool itest_wait_strays_at_most(const struct itest_server *s, size_t max,
                               int timeout_ms);
void itest_strv_free(char **v);
/* Print the stray files, for a failure message. */
void itest_print_strays(const struct itest_server *s);
/* Compare the blobs with the metadata: every blob (blobs/xx/<id> file or
 * fs.files document) has a metadata record, every record has its blob with
 * the recorded size (GridFS: all its chunks), and nothing is half-written
 * (blobs/tmp files, chunks without fs.files).  Prints each problem; true
 * when there is none.  *nrecords (may be NULL) gets the number of
 * metadata records, expired ones included. */
bool itest_store_consistent(const struct itest_server *s, size_t *nrecords);
/* The whole file (new, NUL-terminated, *len set when len non-NULL). */
char *itest_read_file(const char *path, size_t *len);

/* ---- Data, hashes, time ---- */

/* Lowercase hex SHA-256 of data into out[65]. */
void itest_sha256_hex(const void *data, size_t len, char out[65]);
/* Deterministic pseudo-random bytes: byte i of stream `seed`. */
void itest_pattern_fill(uint32_t seed, uint64_t offset, void *buf, size_t len);
/* The SHA-256 of the first len bytes of stream seed, hex. */
void itest_pattern_sha256(uint32_t seed, uint64_t len, char out[65]);

/* A curl read callback streaming stream `seed`, total bytes. */
struct itest_pattern_src {
    uint32_t seed;
    uint64_t total;
    uint64_t sent;
};
size_t itest_pattern_read(char *buf, size_t size, size_t n, void *ctx);

/* Seconds since the epoch of "YYYY-MM-DDTHH:MM:SSZ" (exactly that form);
 * -1 otherwise. */
int64_t itest_parse_time(const char *s);
/* Sleep until the wall clock reaches t (seconds since the epoch). */
void itest_sleep_until(double t);
/* Wall clock, seconds since the epoch. */
double itest_now(void);
/* Percent-encode s (everything but unreserved characters): new string. */
char *itest_urlencode(const char *s, size_t len);
/* snprintf into a new string. */
char *itest_fmt(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Standard base64 (no whitespace, '=' only as the last one or two
 * characters) decoded into a new buffer (free()); NULL when invalid. */
unsigned char *itest_b64_decode(const char *s, size_t *len);

/* The CLI's stderr (tmp_dir/cli.log, see itest_cli) holds needle; prints
 * the log when it does not. */
bool itest_cli_said(struct itest_server *s, const char *needle);

/* POST /v1/sessions as (key, user) with an empty body: the new session's
 * id (free it), or NULL (the answer printed, and a failed check in the
 * calling test). */
char *itest__session_new(struct itest_server *s, const char *key,
                         const char *user, int *failed_checks);
#define itest_session_new(s, key, user)                                        \
    itest__session_new((s), (key), (user), &test__failed_checks)

#endif
