/*
 * test_packages.c - package installs through the real server against the
 * test suite's own package index (tests/support/pkg-index.py serving the
 * ipdtest-* wheels of tests/support/make-wheels.py): POST and GET
 * /v1/packages, what the allowlist refuses, dependencies off the list,
 * broken and sdist-only packages, packages and automatic installs in
 * executions, concurrent installs, a SIGKILL mid-install, an execution
 * running across a generation switch, and the age rebuild.
 *
 * Slow steps of pip are paused with the index's gate (GATE/<file>.hold
 * holds a download half-way and creates GATE/<file>.reached), never with
 * sleeps.  The same gate holds an execution on its generation: the code
 * downloads a gated file from the index (a key with the networked policy
 * reaches 127.0.0.1) and reports, in the download's query string, which
 * generation it runs on.
 *
 * The support scripts are found through $IPD_TEST_SUPPORT_DIR, else next
 * to this source file (tests/support).  /usr/bin/python3 runs them.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <regex.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"

#define PY "/usr/bin/python3"
#define BIG_WHEEL "ipdtest_big-1.0-py3-none-any.whl"
/* A file the executions download through the gate.  Named like a
 * distribution so that the index serves it whatever its rules for other
 * files; no test asks pip for a project "ipdsync". */
#define SYNC_FILE "ipdsync-1.0.tar.gz"
#define SYNC_SIZE (64 * 1024)
#define INSTALL_TIMEOUT_MS 240000L
#define EXEC_TIMEOUT_MS 240000L

/* ---- the package index ------------------------------------------------- */

static struct {
    bool tried, ok;
    char *work;                 /* temp dir holding everything below */
    char *wheels;               /* the index's --dir */
    char *gate;                 /* its --gate-dir */
    char *log;                  /* its --log */
    char *allow, *deps, *names; /* the lists given to interpd */
    char index_url[96];
    int port;
    pid_t pid;
} ix;

static int scale(void)
{
    const char *e = getenv("ITEST_TIMEOUT_SCALE");
    int n = e ? atoi(e) : 1;
    return n > 0 ? n : 1;
}

static void pause_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) && errno == EINTR)
        ;
}

static char *support_path(const char *name)
{
    const char *env = getenv("IPD_TEST_SUPPORT_DIR");
    if (env && *env)
        return itest_fmt("%s/%s", env, name);
    /* CMake compiles this file by its absolute path. */
    char *dir = strdup(__FILE__);
    char *slash = dir ? strrchr(dir, '/') : NULL;
    char *p;
    if (slash) {
        *slash = '\0';
        p = itest_fmt("%s/../support/%s", dir, name);
    } else {
        p = itest_fmt("../support/%s", name);
    }
    free(dir);
    return p;
}

static bool write_text(const char *path, const void *data, size_t len)
{
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "cannot write %s: %s\n", path, strerror(errno));
        return false;
    }
    bool ok = fwrite(data, 1, len, f) == len;
    ok = (fclose(f) == 0) && ok;
    if (!ok)
        fprintf(stderr, "cannot write %s\n", path);
    return ok;
}

static bool exists(const char *path)
{
    struct stat st;
    return lstat(path, &st) == 0;
}

static void index_stop(void)
{
    if (ix.pid > 0) {
        int st = 0;
        kill(ix.pid, SIGTERM);
        bool gone = false;
        for (int i = 0; i < 500 * scale() && !gone; i++) {
            pid_t w = waitpid(ix.pid, &st, WNOHANG);
            if (w == ix.pid || (w < 0 && errno == ECHILD))
                gone = true;
            else
                pause_ms(20);
        }
        if (!gone) {
            fprintf(stderr, "pkg-index.py did not stop on SIGTERM; killing "
                            "it\n");
            kill(ix.pid, SIGKILL);
            waitpid(ix.pid, &st, 0);
        }
        ix.pid = 0;
    }
}

static void at_exit(void)
{
    index_stop();
    if (!ix.work)
        return;
    if (test__failed_checks == 0)
        itest_rm_rf(ix.work);
    else
        fprintf(stderr,
                "test_packages: keeping the index dir %s (index log: "
                "%s)\n",
                ix.work, ix.log);
}

/* Build the wheels, write the lists, start the index.  Once; true when it
 * is up. */
static bool index_setup(void)
{
    if (ix.tried)
        return ix.ok;
    ix.tried = true;
    atexit(at_exit);
    const char *base = getenv("TMPDIR");
    ix.work = itest_fmt("%s/ipd-pkgtest-XXXXXX", base && *base ? base : "/tmp");
    if (!mkdtemp(ix.work)) {
        fprintf(stderr, "mkdtemp %s: %s\n", ix.work, strerror(errno));
        free(ix.work);
        ix.work = NULL;
        return false;
    }
    ix.wheels = itest_fmt("%s/wheels", ix.work);
    ix.gate = itest_fmt("%s/gate", ix.work);
    ix.log = itest_fmt("%s/index.log", ix.work);
    ix.allow = itest_fmt("%s/allowlist.txt", ix.work);
    ix.deps = itest_fmt("%s/allowed-deps.txt", ix.work);
    ix.names = itest_fmt("%s/import-names.txt", ix.work);
    if (mkdir(ix.gate, 0755)) {
        fprintf(stderr, "mkdir %s: %s\n", ix.gate, strerror(errno));
        return false;
    }

    char *mk = support_path("make-wheels.py");
    const char *argv[] = {PY, mk, ix.wheels, NULL};
    int rc = itest_run(argv, NULL, 120000 * scale());
    free(mk);
    if (rc != 0) {
        fprintf(stderr, "make-wheels.py exited %d\n", rc);
        return false;
    }
    char *big = itest_fmt("%s/%s", ix.wheels, BIG_WHEEL);
    bool have_big = exists(big);
    free(big);
    if (!have_big) {
        fprintf(stderr, "make-wheels.py made no %s\n", BIG_WHEEL);
        return false;
    }
    char *sync = itest_fmt("%s/%s", ix.wheels, SYNC_FILE);
    char *bytes = malloc(SYNC_SIZE);
    itest_pattern_fill(7, 0, bytes, SYNC_SIZE);
    bool ok = write_text(sync, bytes, SYNC_SIZE);
    free(bytes);
    free(sync);

    static const char allow[] = "# test allowlist\n"
                                "ipdtest-alpha\nipdtest-withdep\n"
                                "ipdtest-baddep\nipdtest-broken\n"
                                "ipdtest-mapped\nipdtest-big\n"
                                "ipdtest-sdistonly\nipdtest-evil\n"
                                "ipdtest-tamper\n";
    static const char deps[] = "ipdtest-dep\n";
    static const char names[] = "ipdmapped ipdtest-mapped\n";
    ok = ok && write_text(ix.allow, allow, strlen(allow)) &&
         write_text(ix.deps, deps, strlen(deps)) &&
         write_text(ix.names, names, strlen(names));
    if (!ok)
        return false;

    char *script = support_path("pkg-index.py");
    char *port_file = itest_fmt("%s/index.port", ix.work);
    char *out_file = itest_fmt("%s/index.out", ix.work);
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid == 0) {
        /* Never outlive the test program. */
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        if (getppid() != parent)
            _exit(1);
        int fd = open(out_file, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        int nul = open("/dev/null", O_RDONLY);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
        }
        if (nul >= 0)
            dup2(nul, 0);
        execl(PY, PY, script, "--dir", ix.wheels, "--port", "0", "--port-file",
              port_file, "--log", ix.log, "--gate-dir", ix.gate, (char *)NULL);
        dprintf(2, "execl %s: %s\n", PY, strerror(errno));
        _exit(127);
    }
    free(script);
    if (pid < 0) {
        perror("fork");
        free(port_file);
        free(out_file);
        return false;
    }
    ix.pid = pid;
    /* The index writes the port file atomically once it listens. */
    double deadline = itest_now() + 30.0 * scale();
    while (!ix.port && itest_now() < deadline) {
        char *text = itest_read_file(port_file, NULL);
        if (text) {
            ix.port = atoi(text);
            free(text);
            break;
        }
        int st;
        if (waitpid(pid, &st, WNOHANG) == pid) {
            ix.pid = 0;
            fprintf(stderr, "pkg-index.py exited at start (status %d)\n", st);
            break;
        }
        pause_ms(20);
    }
    if (!ix.port) {
        char *out = itest_read_file(out_file, NULL);
        fprintf(stderr, "pkg-index.py did not come up; its output:\n%s\n",
                out ? out : "(none)");
        free(out);
    }
    free(port_file);
    free(out_file);
    if (!ix.port)
        return false;
    snprintf(ix.index_url, sizeof(ix.index_url), "http://127.0.0.1:%d/simple/",
             ix.port);
    ix.ok = true;
    return true;
}

/* ---- gates -----------------------------------------------------------------
 */

static char *gate_path(const char *file, const char *suffix)
{
    return itest_fmt("%s/%s%s", ix.gate, file, suffix);
}

static void gate_arm(const char *file)
{
    char *reached = gate_path(file, ".reached");
    char *hold = gate_path(file, ".hold");
    unlink(reached);
    write_text(hold, "", 0);
    free(reached);
    free(hold);
}

static void gate_open(const char *file)
{
    char *hold = gate_path(file, ".hold");
    unlink(hold);
    free(hold);
}

/* Poll (bounded) until the download of file is held; false when the
 * deadline passes or *gave_up turns true (the client finished first). */
static bool gate_wait(const char *file, int timeout_ms, const int *gave_up)
{
    char *reached = gate_path(file, ".reached");
    double deadline = itest_now() + (double)timeout_ms * scale() / 1000.0;
    bool ok = false;
    while (!(ok = exists(reached)) && itest_now() < deadline &&
           !(gave_up && __atomic_load_n(gave_up, __ATOMIC_SEQ_CST)))
        pause_ms(20);
    free(reached);
    return ok;
}

/* The generation of s whose record's created_at is at; new string or
 * NULL. */
static char *gen_created_at(struct itest_server *s, const char *at)
{
    char *root = itest_fmt("%s-venv", s->data_dir);
    DIR *d = opendir(root);
    struct dirent *e;
    char *gen = NULL;
    while (d && !gen && (e = readdir(d)) != NULL) {
        if (strncmp(e->d_name, "gen-", 4))
            continue;
        char *rec = itest_fmt("%s/%s/.interpd.json", root, e->d_name);
        json_t *j = json_load_file(rec, 0, NULL);
        json_t *c = json_object_get(j, "created_at");
        char num[32];
        snprintf(num, sizeof(num), "%" JSON_INTEGER_FORMAT,
                 json_integer_value(c));
        if (json_is_integer(c) && !strcmp(num, at))
            gen = strdup(e->d_name);
        json_decref(j);
        free(rec);
    }
    if (d)
        closedir(d);
    free(root);
    return gen;
}

/* The generation named in the last gated download's query string
 * (?gen=<created_at>), from the index log; new string, NULL when there
 * is none or no generation has that record. */
static char *gen_from_index_log(struct itest_server *s)
{
    char *log = itest_read_file(ix.log, NULL);
    const char *needle = "/files/" SYNC_FILE "?gen=";
    char *last = NULL;
    for (char *p = log ? strstr(log, needle) : NULL; p;
         p = strstr(p + 1, needle))
        last = p;
    char *gen = NULL;
    if (last) {
        last += strlen(needle);
        char *at = strndup(last, strcspn(last, " \n"));
        gen = at ? gen_created_at(s, at) : NULL;
        free(at);
    }
    free(log);
    return gen;
}

/* ---- the servers ------------------------------------------------------------
 */

struct srv_opts {
    const char *args[32];
    struct itest_opts o;
};

static void make_opts(struct srv_opts *so, const char *const *extra)
{
    size_t k = 0;
    memset(so, 0, sizeof(*so));
    const char *base[] = {"--allowlist", ix.allow, "--allowed-deps", ix.deps,
                          "--import-names", ix.names, "--pip-index-url",
                          ix.index_url, "--pip-timeout", "120s",
                          /* pip and networked runs reach the index on
                           * 127.0.0.1 through the egress proxy */
                          "--fetch-allow", "127.0.0.1/32"};
    for (size_t i = 0; i < sizeof(base) / sizeof(base[0]); i++)
        so->args[k++] = base[i];
    for (size_t i = 0; extra && extra[i]; i++)
        so->args[k++] = extra[i];
    so->args[k] = NULL;
    so->o.args = so->args;
}

/* A server started on first use and shared by several cases. */
struct shared_server {
    struct srv_opts opts;
    struct itest_server *s;
    bool tried;
};

/* The server most cases share (auto-install on), and the one of the
 * concurrency, SIGKILL and generation-switch cases. */
static struct shared_server main_shared, gen_shared;

static struct itest_server *shared_server(struct shared_server *sh)
{
    if (sh->tried)
        return sh->s;
    sh->tried = true;
    if (!index_setup())
        return NULL;
    make_opts(&sh->opts, NULL);
    /* The main server's data dir sits under a 0700 parent, like a clone
     * under /root: pip writes generations there through the sandbox. */
    sh->opts.o.private_parent = sh == &main_shared;
    sh->s = itest_start(&sh->opts.o);
    return sh->s;
}

static struct itest_server *main_server(void)
{
    return shared_server(&main_shared);
}

static struct itest_server *gen_server(void)
{
    return shared_server(&gen_shared);
}

/* A key of the networked policy (its code reaches the index on
 * 127.0.0.1); new string or NULL. */
static char *networked_key(struct itest_server *s)
{
    char *out = NULL;
    int code = itest_cli(s, &out, "keys", "create", "--data-dir", s->data_dir,
                         "--tenant", "t", "--policy", "networked", NULL);
    json_error_t jerr;
    json_t *j = out ? json_loads(out, 0, &jerr) : NULL;
    char *key = NULL;
    if (code == 0 && itest_json_str(j, "key"))
        key = itest_json_dup(j, "key");
    else
        fprintf(stderr, "keys create --policy networked: exit %d, stdout %s\n",
                code, out ? out : "(none)");
    json_decref(j);
    free(out);
    return key;
}

/* ---- requests
 * ---------------------------------------------------------------- */

/* POST /v1/packages with the raw body, as key (NULL: the admin key). */
static long post_raw_as(struct itest_server *s, const char *key,
                        const char *body, struct itest_resp *r)
{
    struct itest_req rq = {.method = "POST",
                           .path = "/v1/packages",
                           .key = key ? key : s->admin_key,
                           .content_type = "application/json",
                           .body = body,
                           .body_len = strlen(body),
                           .timeout_ms = INSTALL_TIMEOUT_MS * scale()};
    return itest_do(s, &rq, r);
}

static long post_raw(struct itest_server *s, const char *body,
                     struct itest_resp *r)
{
    return post_raw_as(s, NULL, body, r);
}

/* POST /v1/packages {"packages": list} (list stolen) as key (NULL: the
 * admin key). */
static long post_packages_as(struct itest_server *s, const char *key,
                             json_t *list, struct itest_resp *r)
{
    json_t *body = json_pack("{s:o}", "packages", list);
    if (!body)
        abort();
    char *text = json_dumps(body, JSON_COMPACT);
    json_decref(body);
    long st = post_raw_as(s, key, text, r);
    free(text);
    return st;
}

static long post_packages(struct itest_server *s, json_t *list,
                          struct itest_resp *r)
{
    return post_packages_as(s, NULL, list, r);
}

static long install(struct itest_server *s, const char *req,
                    struct itest_resp *r)
{
    return post_packages(s, json_pack("[s]", req), r);
}

static json_t *result_at(const struct itest_resp *r, size_t i)
{
    return json_array_get(json_object_get(r->json, "results"), i);
}

/* results[i] is {"package": pkg, "status": status, "version": version
 * (NULL: don't care)} and, for the statuses that are refusals, has a
 * message containing msg_part (NULL: any non-empty message). */
static bool check_result(const char *file, int line, const struct itest_resp *r,
                         size_t i, const char *pkg, const char *status,
                         const char *version, const char *msg_part)
{
    json_t *res = result_at(r, i);
    const char *p = json_string_value(json_object_get(res, "package"));
    const char *st = json_string_value(json_object_get(res, "status"));
    const char *ver = json_string_value(json_object_get(res, "version"));
    const char *msg = json_string_value(json_object_get(res, "message"));
    bool refusal = strcmp(status, "installed") != 0 &&
                   strcmp(status, "already_installed") != 0;
    bool ok = r->status == 200 && res && p && !strcmp(p, pkg) && st &&
              !strcmp(st, status) &&
              (!version || (ver && !strcmp(ver, version))) &&
              (!refusal || (msg && *msg)) &&
              (!msg_part || (msg && strstr(msg, msg_part)));
    if (!ok)
        fprintf(stderr,
                "%s:%d: %s: results[%zu]: want package \"%s\" status \"%s\""
                "%s%s%s%s%s; got status %ld: %s\n",
                file, line, r->what, i, pkg, status, version ? " version " : "",
                version ? version : "", refusal ? " with a message" : "",
                msg_part ? " containing " : "", msg_part ? msg_part : "",
                r->status, r->body);
    return ok;
}

#define CHECK_RESULT(r, i, pkg, status, version, msg_part)                     \
    ITEST__FAIL_IF(check_result(__FILE__, __LINE__, (r), (i), (pkg), (status), \
                                (version), (msg_part)))

/* POST one requirement and check the single result. */
#define CHECK_INSTALL(s, req, status, version, msg_part)                       \
    do {                                                                       \
        struct itest_resp ci__r;                                               \
        install((s), (req), &ci__r);                                           \
        CHECK_RESULT(&ci__r, 0, (req), (status), (version), (msg_part));       \
        itest_resp_release(&ci__r);                                            \
    } while (0)

static long run_code(struct itest_server *s, const char *key, const char *code,
                     struct itest_resp *r)
{
    return itest_exec(s, key ? key : s->admin_key, "u1",
                      json_pack("{s:s, s:i}", "code", code, "timeout", 120),
                      EXEC_TIMEOUT_MS * scale(), r);
}

/* An execution's status is 200, success is as wanted and stdout is want
 * (NULL: any). */
static bool check_exec(const char *file, int line, const struct itest_resp *r,
                       bool success, const char *want_stdout)
{
    json_t *ok = itest_json_get(r->json, "success");
    const char *out = itest_json_str(r->json, "stdout");
    bool good = r->status == 200 && json_is_boolean(ok) &&
                json_is_true(ok) == success &&
                (!want_stdout || (out && !strcmp(out, want_stdout)));
    if (!good)
        fprintf(stderr,
                "%s:%d: %s: want 200 with success %s%s%s; got %ld (%s): "
                "%s\n",
                file, line, r->what, success ? "true" : "false",
                want_stdout ? " and stdout " : "",
                want_stdout ? want_stdout : "", r->status,
                r->curl_rc ? r->curl_err : "", r->body);
    return good;
}

#define CHECK_EXEC(r, success, want_stdout)                                    \
    ITEST__FAIL_IF(                                                            \
        check_exec(__FILE__, __LINE__, (r), (success), (want_stdout)))

static json_t *get_packages(struct itest_server *s)
{
    struct itest_resp r;
    itest_request(s, "GET", "/v1/packages", s->admin_key, NULL, NULL, NULL, 0,
                  NULL, &r);
    json_t *j = NULL;
    if (r.status == 200 && json_is_object(r.json))
        j = json_incref(r.json);
    else
        fprintf(stderr, "GET /v1/packages: %ld %s\n", r.status, r.body);
    itest_resp_release(&r);
    return j;
}

/* The installed version of name in a GET /v1/packages answer, or NULL. */
static const char *installed_version(const json_t *st, const char *name)
{
    size_t i;
    json_t *item;
    json_array_foreach(json_object_get(st, "installed"), i, item)
    {
        const char *n = json_string_value(json_object_get(item, "name"));
        if (n && !strcmp(n, name))
            return json_string_value(json_object_get(item, "version"));
    }
    return NULL;
}

/* current's target under the server's venv root, or "" when none. */
static void current_gen(struct itest_server *s, char *out, size_t size)
{
    char *link = itest_fmt("%s-venv/current", s->data_dir);
    ssize_t n = readlink(link, out, size - 1);
    out[n > 0 ? n : 0] = '\0';
    free(link);
}

static bool gen_exists(struct itest_server *s, const char *gen)
{
    char *p = itest_fmt("%s-venv/%s", s->data_dir, gen);
    bool e = exists(p);
    free(p);
    return e;
}

/* Count the gen-* and other transient entries (trash-*, current.tmp-*)
 * of the venv root; their names go to list. */
static void venv_entries(struct itest_server *s, int *ngen, int *nstray,
                         char *list, size_t size)
{
    char *root = itest_fmt("%s-venv", s->data_dir);
    DIR *d = opendir(root);
    struct dirent *e;
    *ngen = *nstray = 0;
    list[0] = '\0';
    while (d && (e = readdir(d)) != NULL) {
        if (!strncmp(e->d_name, "gen-", 4))
            (*ngen)++;
        else if (!strncmp(e->d_name, "trash-", 6) ||
                 !strncmp(e->d_name, "current.tmp", 11))
            (*nstray)++;
        else
            continue;
        size_t l = strlen(list);
        snprintf(list + l, size - l, "%s ", e->d_name);
    }
    if (d)
        closedir(d);
    free(root);
}

/* ---- requests in the background ---------------------------------------------
 */

struct bg {
    struct itest_server *s;
    const char *key;   /* exec or install: the key; NULL: admin */
    const char *code;  /* exec: the code */
    const char *pkg;   /* POST /v1/packages of this one requirement */
    json_t *exec_body; /* exec with this body instead (stolen) */
    struct itest_resp r;
    int done;
    pthread_t t;
    bool started;
};

static void *bg_main(void *arg)
{
    struct bg *b = arg;
    if (b->pkg)
        post_packages_as(b->s, b->key, json_pack("[s]", b->pkg), &b->r);
    else if (b->exec_body)
        itest_exec(b->s, b->key ? b->key : b->s->admin_key, "u1", b->exec_body,
                   EXEC_TIMEOUT_MS * scale(), &b->r);
    else
        run_code(b->s, b->key, b->code, &b->r);
    __atomic_store_n(&b->done, 1, __ATOMIC_SEQ_CST);
    return NULL;
}

static void bg_start(struct bg *b)
{
    b->started = pthread_create(&b->t, NULL, bg_main, b) == 0;
    if (!b->started) {
        fprintf(stderr, "pthread_create failed\n");
        abort();
    }
}

static void bg_join(struct bg *b)
{
    if (b->started)
        pthread_join(b->t, NULL);
    b->started = false;
}

/* Code that imports ipdtest_alpha, names its generation (its record's
 * created_at: a run sees no host path, so not the generation's name;
 * gen_from_index_log maps it back) in the query of a
 * download held by the gate, and after it prints
 * "<VERSION at start> <hello() after>\nmeta <dist-info version>\n". */
static char *held_code(void)
{
    return itest_fmt(
        "import ipdtest_alpha, urllib.request, importlib.metadata\n"
        "import json\n"
        "gen = str(json.load(open('/opt/venv/.interpd.json'))['created_at'])\n"
        "v = ipdtest_alpha.VERSION\n"
        "urllib.request.urlopen('http://127.0.0.1:%d/files/%s?gen=' + gen,\n"
        "                       timeout=200).read()\n"
        "import ipdtest_alpha as a2\n"
        "print(v, a2.hello())\n"
        "print('meta', importlib.metadata.version('ipdtest-alpha'))\n",
        ix.port, SYNC_FILE);
}

/* ---- 1. install, again, list
 * --------------------------------------------------- */

static void install_and_list(void)
{
    struct itest_server *s = main_server();
    struct itest_resp r;
    REQUIRE(s);
    install(s, "ipdtest-alpha==1.0", &r);
    CHECK_STATUS(&r, 200);
    CHECK_RESULT(&r, 0, "ipdtest-alpha==1.0", "installed", "1.0", NULL);
    CHECK(json_array_size(json_object_get(r.json, "results")) == 1);
    itest_resp_release(&r);
    char cur[256];
    current_gen(s, cur, sizeof(cur));
    CHECKF(!strncmp(cur, "gen-", 4), "current -> \"%s\"", cur);

    install(s, "ipdtest-alpha==1.0", &r);
    CHECK_RESULT(&r, 0, "ipdtest-alpha==1.0", "already_installed", "1.0", NULL);
    itest_resp_release(&r);
    char cur2[256];
    current_gen(s, cur2, sizeof(cur2));
    CHECKF(!strcmp(cur, cur2), "already_installed switched %s -> %s", cur,
           cur2);

    json_t *st = get_packages(s);
    REQUIRE(st);
    static const char *const allowed[] = {
        "ipdtest-alpha",     "ipdtest-baddep", "ipdtest-big",
        "ipdtest-broken",    "ipdtest-evil",   "ipdtest-mapped",
        "ipdtest-sdistonly", "ipdtest-tamper", "ipdtest-withdep"};
    const size_t n_allowed = sizeof(allowed) / sizeof(allowed[0]);
    json_t *al = json_object_get(st, "allowed");
    bool same = json_array_size(al) == n_allowed;
    for (size_t i = 0; same && i < n_allowed; i++) {
        const char *a = json_string_value(json_array_get(al, i));
        same = a && !strcmp(a, allowed[i]);
    }
    char *dump = json_dumps(st, JSON_COMPACT);
    CHECKF(same, "allowed is not the sorted test allowlist: %s", dump);
    const char *ver = installed_version(st, "ipdtest-alpha");
    CHECKF(ver && !strcmp(ver, "1.0"), "installed lacks ipdtest-alpha 1.0: %s",
           dump);
    CHECKF(!installed_version(st, "ipdtest-dep"), "ipdtest-dep listed: %s",
           dump);
    const char *pv = itest_json_str(st, "venv.python_version");
    int maj = 0, min = 0, pat = -1;
    CHECKF(pv && sscanf(pv, "%d.%d.%d", &maj, &min, &pat) == 3 && maj == 3 &&
               pat >= 0,
           "venv.python_version: %s", dump);
    const char *ca = itest_json_str(st, "venv.created_at");
    const char *ra = itest_json_str(st, "venv.rebuild_at");
    int64_t tc = ca ? itest_parse_time(ca) : -1;
    int64_t tr = ra ? itest_parse_time(ra) : -1;
    CHECKF(tc > 0 && tr > 0, "created_at/rebuild_at: %s", dump);
    /* The default venv-max-age is 7 days. */
    CHECKF(tr - tc == 7 * 24 * 3600, "rebuild_at - created_at = %lld s",
           (long long)(tr - tc));
    CHECKF((double)tc > itest_now() - 3600 && (double)tc <= itest_now() + 5,
           "created_at %s is not about now", ca ? ca : "(none)");
    /* The operator's details are not in the contract's object. */
    CHECKF(!itest_json_get(st, "venv.path") &&
               !itest_json_get(st, "venv.generation"),
           "venv has admin fields: %s", dump);
    free(dump);
    json_decref(st);
}

/* ---- 2. refusals
 * -------------------------------------------------------------- */

static void not_allowed_and_invalid(void)
{
    struct itest_server *s = main_server();
    struct itest_resp r;
    REQUIRE(s);
    char long_name[102];
    memset(long_name, 'a', 101);
    long_name[101] = '\0';
    static const struct {
        const char *req, *phrase;
    } bad[] = {
        {"x @ https://e.com/x.whl", "URLs"},
        {"https://e.com/x.whl", "URLs"},
        {"./pkg", "paths"},
        {"/tmp/x.whl", "paths"},
        {"-e .", "options"},
        {"--index-url=http://evil", "options"},
        {"ipdtest-alpha; python_version>'3'", "environment markers"},
        {" ipdtest-alpha", "leading or trailing whitespace"},
        {"ipdtest-alpha\t", "control character"},
        {"ipdtest-alpha$(id)", "shell metacharacters"},
        {"a|b", "shell metacharacters"},
        {NULL, "the package name"}, /* the 101-character name */
        {"", "the requirement is empty"},
    };
    size_t nbad = sizeof(bad) / sizeof(bad[0]);
    char cur[256], cur2[256];
    current_gen(s, cur, sizeof(cur));

    json_t *list = json_pack("[s]", "pandas");
    for (size_t i = 0; i < nbad; i++)
        json_array_append_new(list,
                              json_string(bad[i].req ? bad[i].req : long_name));
    post_packages(s, list, &r);
    CHECK_STATUS(&r, 200);
    CHECK_INT(json_array_size(json_object_get(r.json, "results")), nbad + 1);
    CHECK_RESULT(&r, 0, "pandas", "not_allowed", NULL, "pandas");
    for (size_t i = 0; i < nbad; i++) {
        CHECK_RESULT(&r, i + 1, bad[i].req ? bad[i].req : long_name, "invalid",
                     NULL, bad[i].phrase);
        CHECK(json_is_null(json_object_get(result_at(&r, i + 1), "version")));
    }
    itest_resp_release(&r);

    /* A not-allowed name in the usual spelling variants. */
    CHECK_INSTALL(s, "ipdtest-dep", "not_allowed", NULL, "ipdtest-dep");
    CHECK_INSTALL(s, "IPDTEST_Forbidden==1.0", "not_allowed", NULL,
                  "ipdtest-forbidden");

    /* Not {"packages": [strings]}: 400, nothing queued. */
    static const char *const bodies[] = {
        "{\"packages\": \"ipdtest-alpha\"}",
        "{\"packages\": {\"ipdtest-alpha\": 1}}",
        "{\"packages\": [1]}",
        "{\"packages\": [\"ipdtest-alpha\", null]}",
        "{\"packages\": []}",
        "{}",
        "[\"ipdtest-alpha\"]",
        "\"ipdtest-alpha\"",
        "{\"package\": [\"ipdtest-alpha\"]}",
    };
    for (size_t i = 0; i < sizeof(bodies) / sizeof(bodies[0]); i++) {
        post_raw(s, bodies[i], &r);
        CHECK_ERROR(&r, 400, "invalid_request");
        if (r.status != 400)
            fprintf(stderr, "  (body was %s)\n", bodies[i]);
        itest_resp_release(&r);
    }
    post_raw(s, "{\"packages\": [", &r);
    CHECK_ERROR(&r, 400, "invalid_json");
    itest_resp_release(&r);
    /* 33 requirements: over the cap. */
    json_t *many = json_array();
    for (int i = 0; i < 33; i++)
        json_array_append_new(many, json_string("ipdtest-alpha"));
    post_packages(s, many, &r);
    CHECK_ERROR(&r, 400, "invalid_request");
    itest_resp_release(&r);
    /* Without a key: 401. */
    struct itest_req rq = {.method = "POST",
                           .path = "/v1/packages",
                           .content_type = "application/json",
                           .body = "{\"packages\":[\"ipdtest-alpha\"]}"};
    rq.body_len = strlen(rq.body);
    itest_do(s, &rq, &r);
    CHECK_ERROR(&r, 401, "unauthorized");
    itest_resp_release(&r);

    current_gen(s, cur2, sizeof(cur2));
    CHECKF(!strcmp(cur, cur2), "refusals switched current %s -> %s", cur, cur2);
}

/* ---- 3. dependencies
 * ------------------------------------------------------------ */

static void dependency_not_allowed(void)
{
    struct itest_server *s = main_server();
    struct itest_resp r;
    char cur[256], cur2[256];
    REQUIRE(s);
    current_gen(s, cur, sizeof(cur));
    CHECK_INSTALL(s, "ipdtest-baddep", "not_allowed", NULL,
                  "ipdtest-forbidden");
    current_gen(s, cur2, sizeof(cur2));
    CHECKF(!strcmp(cur, cur2), "a refused install switched current %s -> %s",
           cur, cur2);

    /* Not installed: the import fails (the automatic install is refused
     * the same way). */
    run_code(s, NULL, "import ipdtest_baddep\nprint('imported')\n", &r);
    CHECK_EXEC(&r, false, "");
    CHECK_STR(itest_json_str(r.json, "error.type"), "ModuleNotFoundError");
    CHECK(json_is_null(itest_json_get(r.json, "auto_installed")));
    json_t *ip = itest_json_get(r.json, "installed_packages");
    for (size_t i = 0; i < json_array_size(ip); i++) {
        const char *st =
            json_string_value(json_object_get(json_array_get(ip, i), "status"));
        CHECKF(st && strcmp(st, "installed"), "installed_packages: %s", r.body);
    }
    itest_resp_release(&r);
    current_gen(s, cur2, sizeof(cur2));
    CHECKF(!strcmp(cur, cur2), "current switched %s -> %s", cur, cur2);
    json_t *st = get_packages(s);
    CHECK(st && !installed_version(st, "ipdtest-baddep") &&
          !installed_version(st, "ipdtest-forbidden"));
    json_decref(st);

    /* An allowed dependency comes along. */
    CHECK_INSTALL(s, "ipdtest-withdep", "installed", "1.0", NULL);
    run_code(s, NULL,
             "import ipdtest_withdep\nprint(ipdtest_withdep.hello())\n", &r);
    CHECK_EXEC(&r, true, "withdep 1.0 + dep 1.0\n");
    itest_resp_release(&r);
    st = get_packages(s);
    const char *dv = st ? installed_version(st, "ipdtest-dep") : NULL;
    CHECKF(dv && !strcmp(dv, "1.0"), "ipdtest-dep not listed as 1.0");
    json_decref(st);
}

/* ---- 4. a package that does not import
 * -------------------------------------------- */

static void broken_package_fails(void)
{
    struct itest_server *s = main_server();
    struct itest_resp r;
    char cur[256], cur2[256];
    REQUIRE(s);
    current_gen(s, cur, sizeof(cur));
    CHECK_INSTALL(s, "ipdtest-broken", "failed", NULL, "deliberately broken");
    current_gen(s, cur2, sizeof(cur2));
    CHECKF(!strcmp(cur, cur2), "a failed install switched current %s -> %s",
           cur, cur2);
    json_t *st = get_packages(s);
    CHECK(st && !installed_version(st, "ipdtest-broken"));
    json_decref(st);
    /* What was there still works. */
    run_code(s, NULL,
             "import ipdtest_alpha\nprint(ipdtest_alpha.hello())\n"
             "import importlib.util\n"
             "print(importlib.util.find_spec('ipdtest_broken'))\n",
             &r);
    CHECK_EXEC(&r, true, "alpha 1.0\nNone\n");
    itest_resp_release(&r);
}

/* ---- 5. no wheel
 * -------------------------------------------------------------------- */

static void sdist_only_fails(void)
{
    struct itest_server *s = main_server();
    char cur[256], cur2[256];
    REQUIRE(s);
    current_gen(s, cur, sizeof(cur));
    CHECK_INSTALL(s, "ipdtest-sdistonly", "failed", NULL,
                  "build refused: ipdtest-sdistonly has only source "
                  "distributions");
    current_gen(s, cur2, sizeof(cur2));
    CHECKF(!strcmp(cur, cur2), "a failed install switched current %s -> %s",
           cur, cur2);
    /* --only-binary: the sdist was not even downloaded. */
    char *log = itest_read_file(ix.log, NULL);
    CHECKF(log && !strstr(log, "/files/ipdtest_sdistonly"),
           "the sdist was downloaded (index log %s)", ix.log);
    free(log);
}

/* ---- 6. import after install
 * ----------------------------------------------------------- */

static void import_after_install(void)
{
    struct itest_server *s = main_server();
    struct itest_resp r;
    REQUIRE(s);
    /* (installed by install_and_list; a no-op then) */
    CHECK_INSTALL(s, "ipdtest-alpha==1.0", "already_installed", "1.0", NULL);
    run_code(s, NULL, "import ipdtest_alpha; print(ipdtest_alpha.hello())", &r);
    CHECK_EXEC(&r, true, "alpha 1.0\n");
    CHECK(json_array_size(itest_json_get(r.json, "installed_packages")) == 0);
    CHECK(json_number_value(itest_json_get(r.json, "install_time")) == 0);
    itest_resp_release(&r);
}

/* ---- 7. packages of an execution
 * ------------------------------------------------------- */

static void execution_packages(void)
{
    struct itest_server *s = main_server();
    struct itest_resp r;
    REQUIRE(s);
    itest_exec(s, s->admin_key, "u1",
               json_pack("{s:s, s:[s]}", "code",
                         "import ipdtest_alpha; print(ipdtest_alpha.hello())",
                         "packages", "ipdtest-alpha==2.0"),
               EXEC_TIMEOUT_MS * scale(), &r);
    CHECK_EXEC(&r, true, "alpha 2.0\n");
    json_t *ip = itest_json_get(r.json, "installed_packages");
    CHECKF(json_array_size(ip) == 1, "installed_packages: %s", r.body);
    json_t *one = json_array_get(ip, 0);
    CHECK_STR(json_string_value(json_object_get(one, "package")),
              "ipdtest-alpha==2.0");
    CHECK_STR(json_string_value(json_object_get(one, "status")), "installed");
    CHECK_STR(json_string_value(json_object_get(one, "version")), "2.0");
    double it = json_number_value(itest_json_get(r.json, "install_time"));
    CHECKF(it > 0, "install_time %g", it);
    itest_resp_release(&r);

    /* Requested packages are checked before anything runs: 400. */
    static const char *const refused[] = {"pandas", "x @ http://e",
                                          "ipdtest-dep", "-e ."};
    for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
        itest_exec(s, s->admin_key, "u1",
                   json_pack("{s:s, s:[s]}", "code", "print('ran')", "packages",
                             refused[i]),
                   EXEC_TIMEOUT_MS * scale(), &r);
        CHECK_ERROR(&r, 400, "invalid_request");
        if (r.status != 400)
            fprintf(stderr, "  (packages [\"%s\"])\n", refused[i]);
        itest_resp_release(&r);
    }
    json_t *st = get_packages(s);
    const char *v = st ? installed_version(st, "ipdtest-alpha") : NULL;
    CHECKF(v && !strcmp(v, "2.0"), "ipdtest-alpha is %s, want 2.0",
           v ? v : "(none)");
    json_decref(st);
}

/* ---- 8. automatic installs
 * --------------------------------------------------------------- */

static void auto_install(void)
{
    struct itest_server *s = main_server();
    struct itest_resp r;
    REQUIRE(s);
    run_code(s, NULL, "import ipdmapped; print(ipdmapped.__name__)", &r);
    CHECK_EXEC(&r, true, "ipdmapped\n");
    CHECK_STR(itest_json_str(r.json, "auto_installed"), "ipdtest-mapped");
    json_t *ip = itest_json_get(r.json, "installed_packages");
    json_t *one = json_array_get(ip, 0);
    CHECKF(json_array_size(ip) == 1, "installed_packages: %s", r.body);
    CHECK_STR(json_string_value(json_object_get(one, "package")),
              "ipdtest-mapped");
    CHECK_STR(json_string_value(json_object_get(one, "status")), "installed");
    CHECK(json_number_value(itest_json_get(r.json, "install_time")) > 0);
    itest_resp_release(&r);
    /* Installed for good: the next run needs no install. */
    run_code(s, NULL, "import ipdmapped; print(ipdmapped.hello())", &r);
    CHECK_EXEC(&r, true, "mapped 1.0\n");
    CHECK(json_is_null(itest_json_get(r.json, "auto_installed")));
    itest_resp_release(&r);
}

static void auto_install_off(void)
{
    struct srv_opts so;
    const char *extra[] = {"--auto-install", "0", NULL};
    REQUIRE(index_setup());
    make_opts(&so, extra);
    struct itest_server *s = itest_start(&so.o);
    struct itest_resp r;
    REQUIRE(s);
    json_t *st = get_packages(s);
    CHECK(st && json_is_null(itest_json_get(st, "venv.created_at")));
    json_decref(st);
    run_code(s, NULL, "import ipdmapped; print(ipdmapped.__name__)", &r);
    CHECK_EXEC(&r, false, "");
    CHECK_STR(itest_json_str(r.json, "error.type"), "ModuleNotFoundError");
    CHECK(json_is_null(itest_json_get(r.json, "auto_installed")));
    CHECK(json_array_size(itest_json_get(r.json, "installed_packages")) == 0);
    itest_resp_release(&r);
    char cur[256];
    current_gen(s, cur, sizeof(cur));
    CHECKF(!cur[0], "a venv appeared: current -> %s", cur);
    itest_stop(s);
}

/* ---- 9. concurrent installs
 * ----------------------------------------------------------------- */

static void concurrent_installs(void)
{
    struct itest_server *s = gen_server();
    struct itest_resp r;
    REQUIRE(s);
    /* A fresh server: the first install also makes the venv (seconds),
     * so the others arrive while it runs.  One more goes through an
     * execution's packages (another thread of the server). */
    struct bg a = {.s = s, .pkg = "ipdtest-withdep"};
    struct bg b = {.s = s, .pkg = "ipdtest-alpha==1.0"};
    struct bg c = {.s = s,
                   .exec_body =
                       json_pack("{s:s, s:[s]}", "code",
                                 "import ipdmapped; print(ipdmapped.hello())",
                                 "packages", "ipdtest-mapped")};
    bg_start(&a);
    bg_start(&b);
    bg_start(&c);
    bg_join(&a);
    bg_join(&b);
    bg_join(&c);
    CHECK_RESULT(&a.r, 0, "ipdtest-withdep", "installed", "1.0", NULL);
    CHECK_RESULT(&b.r, 0, "ipdtest-alpha==1.0", "installed", "1.0", NULL);
    CHECK_EXEC(&c.r, true, "mapped 1.0\n");
    CHECK_STR(
        itest_json_str(
            json_array_get(itest_json_get(c.r.json, "installed_packages"), 0),
            "status"),
        "installed");
    itest_resp_release(&a.r);
    itest_resp_release(&b.r);
    itest_resp_release(&c.r);
    /* No install lost another's package. */
    run_code(s, NULL,
             "import ipdtest_withdep, ipdtest_alpha, ipdmapped\n"
             "print(ipdtest_withdep.hello(), ipdtest_alpha.hello(), "
             "ipdmapped.hello(), sep=' | ')\n",
             &r);
    CHECK_EXEC(&r, true, "withdep 1.0 + dep 1.0 | alpha 1.0 | mapped 1.0\n");
    itest_resp_release(&r);
    json_t *st = get_packages(s);
    static const char *const want[] = {"ipdtest-withdep", "ipdtest-dep",
                                       "ipdtest-alpha", "ipdtest-mapped"};
    for (size_t i = 0; st && i < 4; i++) {
        const char *v = installed_version(st, want[i]);
        CHECKF(v && !strcmp(v, "1.0"), "%s not listed as 1.0", want[i]);
    }
    CHECK(st);
    json_decref(st);
}

/* ---- 10. SIGKILL during an install
 * -------------------------------------------------------- */

static void sigkill_during_install(void)
{
    struct itest_server *s = gen_server();
    struct itest_resp r;
    char cur[256], cur2[256];
    int status = 0;
    REQUIRE(s);
    install(s, "ipdtest-alpha==1.0", &r);
    const char *st0 =
        json_string_value(json_object_get(result_at(&r, 0), "status"));
    CHECKF(st0 &&
               (!strcmp(st0, "installed") || !strcmp(st0, "already_installed")),
           "alpha==1.0: %s", r.body);
    itest_resp_release(&r);
    current_gen(s, cur, sizeof(cur));
    REQUIRE(cur[0]);

    gate_arm(BIG_WHEEL);
    struct bg b = {.s = s, .pkg = "ipdtest-big"};
    bg_start(&b);
    bool held = gate_wait(BIG_WHEEL, 120000, &b.done);
    CHECKF(held, "the download of %s never reached the gate", BIG_WHEEL);
    if (held) {
        itest_signal(s, SIGKILL);
        CHECK(itest_wait_exit(s, 10000, &status));
        CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
    }
    gate_open(BIG_WHEEL);
    bg_join(&b);
    /* The client saw the connection drop, not an answer. */
    CHECKF(!held || b.r.status == 0, "the install answered %ld: %s", b.r.status,
           b.r.body);
    itest_resp_release(&b.r);
    if (!held)
        return;

    /* A restarted server removes the leftover generation and keeps
     * current. */
    gen_shared.s = NULL; /* until it is up again */
    REQUIRE(itest_restart(s, &gen_shared.opts.o));
    gen_shared.s = s;
    int ngen, nstray;
    char names[1024];
    venv_entries(s, &ngen, &nstray, names, sizeof(names));
    CHECKF(ngen == 1 && nstray == 0,
           "want exactly one generation after the restart, got: %s", names);
    current_gen(s, cur2, sizeof(cur2));
    CHECKF(!strcmp(cur, cur2), "current %s -> %s", cur, cur2);
    CHECK(gen_exists(s, cur));

    run_code(s, NULL, "import ipdtest_alpha; print(ipdtest_alpha.hello())", &r);
    CHECK_EXEC(&r, true, "alpha 1.0\n");
    itest_resp_release(&r);
    run_code(s, NULL,
             "import importlib.util\n"
             "print(importlib.util.find_spec('ipdtest_big'))\n",
             &r);
    CHECK_EXEC(&r, true, "None\n");
    itest_resp_release(&r);
    json_t *pk = get_packages(s);
    CHECK(pk && !installed_version(pk, "ipdtest-big"));
    CHECK(pk && installed_version(pk, "ipdtest-alpha"));
    json_decref(pk);
}

/* ---- 11. an execution across a generation switch
 * --------------------------------------------- */

static void execution_across_switch(void)
{
    struct itest_server *s = gen_server();
    struct itest_resp r;
    char old[256], now[256];
    REQUIRE(s);
    char *key = networked_key(s);
    REQUIRE(key);
    install(s, "ipdtest-alpha==1.0", &r);
    const char *st0 =
        json_string_value(json_object_get(result_at(&r, 0), "status"));
    CHECKF(st0 &&
               (!strcmp(st0, "installed") || !strcmp(st0, "already_installed")),
           "alpha==1.0: %s", r.body);
    itest_resp_release(&r);

    gate_arm(SYNC_FILE);
    char *code = held_code();
    struct bg e = {.s = s, .key = key, .code = code};
    bg_start(&e);
    bool held = gate_wait(SYNC_FILE, 60000, &e.done);
    CHECKF(held, "the execution never reached the gate");
    current_gen(s, old, sizeof(old));
    char *gen = gen_from_index_log(s);
    CHECKF(gen && !strcmp(gen, old), "the execution runs on %s, current is %s",
           gen ? gen : "(?)", old);
    free(gen);
    if (held) {
        install(s, "ipdtest-alpha==2.0", &r);
        CHECK_RESULT(&r, 0, "ipdtest-alpha==2.0", "installed", "2.0", NULL);
        itest_resp_release(&r);
        current_gen(s, now, sizeof(now));
        CHECKF(strcmp(now, old) != 0, "current did not switch from %s", old);
        /* Held by the running execution: not collected. */
        CHECKF(gen_exists(s, old),
               "%s was removed under a running "
               "execution",
               old);
    }
    gate_open(SYNC_FILE);
    bg_join(&e);
    CHECK_EXEC(&e.r, true, "1.0 alpha 1.0\nmeta 1.0\n");
    itest_resp_release(&e.r);
    free(code);

    run_code(s, key, "import ipdtest_alpha; print(ipdtest_alpha.hello())", &r);
    CHECK_EXEC(&r, true, "alpha 2.0\n");
    itest_resp_release(&r);
    /* A request with nothing to install touches no generation; the next
     * install that runs pip collects the ones nobody holds now (the old
     * one, and 2.0's once 1.0 is current again: an admin key may). */
    CHECK_INSTALL(s, "ipdtest-alpha==2.0", "already_installed", "2.0", NULL);
    CHECKF(gen_exists(s, old), "%s went with nothing installed", old);
    CHECK_INSTALL(s, "ipdtest-alpha==1.0", "installed", "1.0", NULL);
    CHECKF(!gen_exists(s, old), "%s is still there", old);
    int ngen, nstray;
    char names[1024];
    venv_entries(s, &ngen, &nstray, names, sizeof(names));
    CHECKF(ngen == 1 && nstray == 0, "generations left: %s", names);
    free(key);
}

/* ---- 12. the age rebuild
 * ------------------------------------------------------------------- */

static void rebuild_switches(void)
{
    struct srv_opts so;
    const char *extra[] = {"--venv-max-age", "4s", "--venv-check-interval",
                           "1s", NULL};
    REQUIRE(index_setup());
    make_opts(&so, extra);
    struct itest_server *s = itest_start(&so.o);
    struct itest_resp r;
    REQUIRE(s);
    char *key = networked_key(s);
    if (!key) {
        CHECK(key);
        itest_stop(s);
        return;
    }
    install(s, "ipdtest-alpha==1.0", &r);
    const char *st0 =
        json_string_value(json_object_get(result_at(&r, 0), "status"));
    /* (a rebuild may have switched meanwhile: it installs the same) */
    CHECKF(st0 &&
               (!strcmp(st0, "installed") || !strcmp(st0, "already_installed")),
           "alpha==1.0: %s", r.body);
    itest_resp_release(&r);

    gate_arm(SYNC_FILE);
    char *code = held_code();
    struct bg e = {.s = s, .key = key, .code = code};
    bg_start(&e);
    bool held = gate_wait(SYNC_FILE, 60000, &e.done);
    CHECKF(held, "the execution never reached the gate");
    char *gen = gen_from_index_log(s);
    CHECKF(gen && !strncmp(gen, "gen-", 4), "the execution's generation: %s",
           gen ? gen : "(?)");
    json_t *st = get_packages(s);
    char *created0 = st ? itest_json_dup(st, "venv.created_at") : NULL;
    json_decref(st);
    CHECKF(created0 && *created0, "no venv.created_at");
    char *created1 = NULL;
    /* A switch after this point replaced the execution's generation. */
    double deadline = itest_now() + 90.0 * scale();
    while (held && created0 && itest_now() < deadline) {
        st = get_packages(s);
        const char *c = st ? itest_json_str(st, "venv.created_at") : NULL;
        if (c && strcmp(c, created0)) {
            created1 = strdup(c);
            json_decref(st);
            break;
        }
        json_decref(st);
        pause_ms(200);
    }
    CHECKF(created1, "venv.created_at stayed %s (no rebuild)",
           created0 ? created0 : "(none)");
    char cur[256];
    current_gen(s, cur, sizeof(cur));
    if (gen && created1) {
        CHECKF(strcmp(cur, gen) != 0, "current is still %s", gen);
        CHECKF(gen_exists(s, gen), "%s was removed under a running execution",
               gen);
    }
    gate_open(SYNC_FILE);
    bg_join(&e);
    CHECK_EXEC(&e.r, true, "1.0 alpha 1.0\nmeta 1.0\n");
    itest_resp_release(&e.r);
    free(code);

    /* The rebuilt generation has the requirements again. */
    run_code(s, NULL,
             "import ipdtest_alpha, importlib.metadata\n"
             "print(ipdtest_alpha.hello(), "
             "importlib.metadata.version('ipdtest-alpha'))\n",
             &r);
    CHECK_EXEC(&r, true, "alpha 1.0 1.0\n");
    itest_resp_release(&r);
    st = get_packages(s);
    const char *v = st ? installed_version(st, "ipdtest-alpha") : NULL;
    CHECKF(v && !strcmp(v, "1.0"), "after the rebuild ipdtest-alpha is %s",
           v ? v : "(none)");
    json_decref(st);
    /* Released: the age check collects it (bounded poll; it runs every
     * second). */
    deadline = itest_now() + 60.0 * scale();
    while (gen && gen_exists(s, gen) && itest_now() < deadline)
        pause_ms(100);
    CHECKF(gen && !gen_exists(s, gen), "%s was never collected",
           gen ? gen : "(?)");
    free(gen);
    free(created0);
    free(created1);
    free(key);
    itest_stop(s);
}

/* SIGTERM with one install running past the shutdown timeout and one
 * queued: the running one finishes, the queued one is answered 503 without
 * running pip, and the server exits 0 (queued installs must not hold
 * shutdown for minutes). */
static void sigterm_with_queued_install(void)
{
    struct srv_opts so;
    const char *extra[] = {"--shutdown-timeout", "1s", NULL};
    REQUIRE(index_setup());
    make_opts(&so, extra);
    struct itest_server *s = itest_start(&so.o);
    REQUIRE(s);
    gate_arm(BIG_WHEEL);
    struct bg a = {.s = s, .pkg = "ipdtest-big"};
    bg_start(&a);
    bool held = gate_wait(BIG_WHEEL, 120000, &a.done);
    CHECKF(held, "the download of %s never reached the gate", BIG_WHEEL);
    struct bg b = {.s = s, .pkg = "ipdtest-alpha==2.0"};
    bg_start(&b);
    /* Bounded wait until the second install sits in the queue (the first
     * is held at the gate, so running stays 1). */
    bool queued = held &&
                  itest_wait_status_int(s, "installs.queued", 1, 30000) &&
                  itest_wait_status_int(s, "installs.running", 1, 1000);
    CHECKF(queued, "the second install never showed as queued");
    itest_signal(s, SIGTERM);
    /* Past the 1 s for in-flight requests the workers are stopped: from
     * then on the queued install is cancelled when the installer gets to
     * it.  Only then does the running one go on. */
    CHECK(itest_wait_log_line(s, 30000, "still running after", NULL));
    gate_open(BIG_WHEEL);
    bg_join(&a);
    bg_join(&b);
    CHECKF(a.r.status == 200, "the running install answered %ld: %s",
           a.r.status, a.r.body);
    CHECK_ERROR(&b.r, 503, "unavailable");
    itest_resp_release(&a.r);
    itest_resp_release(&b.r);
    int status = 0;
    CHECK(itest_wait_exit(s, 60000, &status));
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    itest_stop(s);
}

/* Fairness between tenants (issue 13 item 10): with the default share
 * (policy tenant-installs 25% of the 1 + 16 places: 4), tenant A, whose
 * first install is held at the index's gate, has 1 running and 3 waiting;
 * its fifth is refused at once with 429 and Retry-After while tenant B's
 * install is accepted (it waits in the queue A may not fill) and succeeds
 * once the gate opens.  Before the shares, A's fifth was queued too (the
 * queue has 16 places), so the 429 check fails on a server without them. */
static void install_share_per_tenant(void)
{
    struct srv_opts so;
    const char *extra[] = {"--fetch-allow", "127.0.0.1/32", NULL};
    char *ka = NULL, *kb = NULL, *ida = NULL, *idb = NULL;
    struct itest_resp r;
    REQUIRE(index_setup());
    make_opts(&so, extra);
    struct itest_server *s = itest_start(&so.o);
    REQUIRE(s);
    REQUIRE(itest_create_key(s, "tenant-a", false, &ka, &ida) &&
            itest_create_key(s, "tenant-b", false, &kb, &idb));
    gate_arm(BIG_WHEEL);
    struct bg a[4] = {{.s = s, .key = ka, .pkg = "ipdtest-big"}};
    for (int i = 1; i < 4; i++)
        a[i] = (struct bg){.s = s, .key = ka, .pkg = "ipdtest-alpha==1.0"};
    struct bg b = {.s = s, .key = kb, .pkg = "ipdtest-mapped"};
    bg_start(&a[0]);
    bool held = gate_wait(BIG_WHEEL, 120000, &a[0].done);
    CHECKF(held, "the download of %s never reached the gate", BIG_WHEEL);
    for (int i = 1; i < 4; i++)
        bg_start(&a[i]);
    /* Bounded wait: A's share is held (pip's 30 s read timeout runs
     * while the gate holds the download; the steps below take less). */
    CHECK(held && itest_wait_status_int(s, "installs.queued", 3, 20000) &&
          itest_wait_status_int(s, "installs.running", 1, 1000));
    struct itest_req rq = {.method = "POST",
                           .path = "/v1/packages",
                           .key = ka,
                           .content_type = "application/json",
                           .body = "{\"packages\": [\"ipdtest-alpha\"]}",
                           .timeout_ms = 10000};
    rq.body_len = strlen(rq.body);
    itest_do(s, &rq, &r);
    CHECK_ERROR(&r, 429, "too_many_requests");
    const char *ra = itest_header(&r, "Retry-After");
    CHECKF(ra && !strcmp(ra, "1"), "Retry-After %s", ra ? ra : "(none)");
    const char *msg = itest_json_str(r.json, "error.message");
    CHECKF(msg && strstr(msg, "tenant-installs"), "message %s",
           msg ? msg : "(none)");
    itest_resp_release(&r);
    bg_start(&b); /* accepted: it waits behind A's four */
    CHECK(itest_wait_status_int(s, "installs.queued", 4, 20000));
    gate_open(BIG_WHEEL);
    for (int i = 0; i < 4; i++) {
        bg_join(&a[i]);
        CHECKF(a[i].r.status == 200, "A's install %d: %ld %s", i, a[i].r.status,
               a[i].r.body ? a[i].r.body : "");
        itest_resp_release(&a[i].r);
    }
    bg_join(&b);
    CHECK_RESULT(&b.r, 0, "ipdtest-mapped", "installed", "1.0", NULL);
    itest_resp_release(&b.r);
    itest_stop(s);
    free(ka);
    free(kb);
    free(ida);
    free(idb);
}

/* With --pip-allow-sdist 1 the operator lets pip build source
 * distributions; the build runs in the sandbox like pip itself. */
static void sdist_allowed(void)
{
    struct srv_opts so;
    const char *extra[] = {"--pip-allow-sdist", "1", NULL};
    REQUIRE(index_setup());
    make_opts(&so, extra);
    struct itest_server *s = itest_start(&so.o);
    struct itest_resp r;
    REQUIRE(s);
    CHECK_INSTALL(s, "ipdtest-sdistonly", "installed", "1.0", NULL);
    run_code(s, NULL,
             "import importlib.metadata as m\n"
             "print(m.version('ipdtest-sdistonly'))\n",
             &r);
    CHECK_EXEC(&r, true, "1.0\n");
    itest_resp_release(&r);
    itest_stop(s);
}

/* Build code of an allowed sdist runs in the sandbox with the new
 * generation writable.  It must reach neither the host (a planted symlink
 * where the service writes the generation's record) nor the generation
 * executions use (writing through hard links of the clone), nor stall
 * executions (.inuse replaced by a fifo).  Regression for a review
 * finding. */
static void sdist_build_stays_in_its_generation(void)
{
    struct srv_opts so;
    const char *extra[] = {"--pip-allow-sdist", "1", NULL};
    struct itest_resp r;
    REQUIRE(index_setup());
    (void)unlink("/tmp/ipdtest-evil-written");
    make_opts(&so, extra);
    struct itest_server *s = itest_start(&so.o);
    REQUIRE(s);
    CHECK_INSTALL(s, "ipdtest-alpha==1.0", "installed", "1.0", NULL);
    CHECK_INSTALL(s, "ipdtest-tamper", "failed", NULL, "failing on purpose");
    run_code(s, NULL,
             "import ipdtest_alpha\n"
             "print(hasattr(ipdtest_alpha, 'TAMPERED'))\n",
             &r);
    CHECK_EXEC(&r, true, "False\n");
    itest_resp_release(&r);
    CHECK_INSTALL(s, "ipdtest-evil", "installed", "1.0", NULL);
    CHECKF(access("/tmp/ipdtest-evil-written", F_OK) != 0,
           "the service wrote through a symlink the build planted");
    run_code(s, NULL, "import ipdtest_evil, ipdtest_alpha\nprint('ok')\n", &r);
    CHECK_EXEC(&r, true, "ok\n");
    itest_resp_release(&r);
    itest_stop(s);
}

/* A rebuild that fails (the index is gone) keeps the old generation,
 * executions keep working on it, and the admin status says why. */
static void rebuild_failure_keeps_current(void)
{
    struct srv_opts so, bad;
    struct itest_resp r;
    REQUIRE(index_setup());
    make_opts(&so, NULL);
    struct itest_server *s = itest_start(&so.o);
    REQUIRE(s);
    install(s, "ipdtest-alpha==1.0", &r);
    CHECK_RESULT(&r, 0, "ipdtest-alpha==1.0", "installed", "1.0", NULL);
    itest_resp_release(&r);
    char cur0[256], cur1[256];
    current_gen(s, cur0, sizeof(cur0));

    /* Nothing listens on port 1: every pip run of the rebuild fails. */
    const char *extra[] = {"--pip-index-url",
                           "http://127.0.0.1:1/simple/",
                           "--venv-max-age",
                           "2s",
                           "--venv-check-interval",
                           "1s",
                           NULL};
    make_opts(&bad, extra);
    REQUIRE(itest_restart(s, &bad.o));
    char *why = NULL;
    double deadline = itest_now() + 120.0 * scale();
    while (!why && itest_now() < deadline) {
        itest_request(s, "GET", "/v1/admin/status", s->admin_key, NULL, NULL,
                      NULL, 0, NULL, &r);
        const char *e = itest_json_str(r.json, "venv.last_rebuild_error");
        if (e)
            why = strdup(e);
        itest_resp_release(&r);
        if (!why)
            pause_ms(200);
    }
    CHECKF(why != NULL, "no rebuild error reported");
    current_gen(s, cur1, sizeof(cur1));
    CHECKF(!strcmp(cur0, cur1), "current moved from %s to %s", cur0, cur1);
    run_code(s, NULL, "import ipdtest_alpha\nprint(ipdtest_alpha.hello())\n",
             &r);
    CHECK_EXEC(&r, true, "alpha 1.0\n");
    itest_resp_release(&r);
    free(why);
    itest_stop(s);
}

/* ---- 13. pip's failures named, offline hosts, remembered failures ----------
 */

/* How many requests for project's index page the test index answered. */
static int index_hits(const char *project)
{
    char *log = itest_read_file(ix.log, NULL);
    char *needle = itest_fmt("GET /simple/%s/ ", project);
    int n = 0;
    for (char *p = log ? strstr(log, needle) : NULL; p;
         p = strstr(p + 1, needle))
        n++;
    free(needle);
    free(log);
    return n;
}

/* Nothing listens on 127.0.0.1:1: the install fails, soon, and says the
 * index is unreachable (not pip's "No matching distribution found"). */
static void index_unreachable_named(void)
{
    struct srv_opts so;
    struct itest_resp r;
    const char *extra[] = {"--pip-index-url", "http://127.0.0.1:1/simple/",
                           NULL};
    REQUIRE(index_setup());
    make_opts(&so, extra);
    struct itest_server *s = itest_start(&so.o);
    REQUIRE(s);
    /* The venv itself first, so the timing below is pip's alone. */
    install(s, "ipdtest-alpha==1.0", &r);
    itest_resp_release(&r);
    double t0 = itest_now();
    install(s, "ipdtest-alpha==1.0", &r);
    fprintf(stderr,
            "index_unreachable_named: the failed install took "
            "%.1f s\n",
            itest_now() - t0);
    CHECK_RESULT(&r, 0, "ipdtest-alpha==1.0", "failed", NULL,
                 "the package index is unreachable: "
                 "http://127.0.0.1:1/simple/ (connection refused)");
    itest_resp_release(&r);
    itest_stop(s);
}

/* --pip-no-index with a wheel folder: installs with the index URL
 * pointing at the suite's own index, which sees no request for the
 * projects installed (pip never asks it, and runs without network); a
 * missing version names the folder's versions. */
static void offline_wheel_folder(void)
{
    struct srv_opts so;
    struct itest_resp r;
    const char *extra[] = {"--pip-index-url",
                           ix.index_url,
                           "--pip-no-index",
                           "1",
                           "--pip-find-links",
                           ix.wheels,
                           NULL};
    REQUIRE(index_setup());
    extra[5] = ix.wheels;
    int hits = index_hits("ipdtest-mapped") + index_hits("ipdtest-alpha");
    /* The sandbox (another uid) binds the folder: every directory above
     * it must be searchable (mkdtemp made ours 0700). */
    CHECK(chmod(ix.work, 0711) == 0);
    make_opts(&so, extra);
    struct itest_server *s = itest_start(&so.o);
    REQUIRE(s);
    install(s, "ipdtest-mapped", &r); /* makes the venv */
    CHECK_RESULT(&r, 0, "ipdtest-mapped", "installed", "1.0", NULL);
    itest_resp_release(&r);
    double t0 = itest_now();
    install(s, "ipdtest-alpha==1.0", &r);
    fprintf(stderr, "offline_wheel_folder: the install took %.1f s\n",
            itest_now() - t0);
    CHECK_RESULT(&r, 0, "ipdtest-alpha==1.0", "installed", "1.0", NULL);
    itest_resp_release(&r);
    CHECK_INSTALL(s, "ipdtest-alpha==9.9", "failed", NULL,
                  "no such version: ipdtest-alpha==9.9; the wheel folder "
                  "(--pip-find-links) has 1.0, 2.0");
    struct itest_resp e;
    run_code(s, NULL, "import ipdtest_alpha; print(ipdtest_alpha.hello())", &e);
    CHECK_EXEC(&e, true, "alpha 1.0\n");
    itest_resp_release(&e);
    int after = index_hits("ipdtest-mapped") + index_hits("ipdtest-alpha");
    CHECKF(after == hits,
           "pip asked the index with --pip-no-index (%d -> %d requests; "
           "index log %s)",
           hits, after, ix.log);
    itest_stop(s);
}

/* A version the index does not have: the message says so and lists the
 * ones it has. */
static void no_such_version_named(void)
{
    struct itest_server *s = main_server();
    REQUIRE(s);
    CHECK_INSTALL(s, "ipdtest-alpha==9.9", "failed", NULL,
                  "no such version: ipdtest-alpha==9.9");
    CHECK_INSTALL(s, "ipdtest-alpha>=3", "failed", NULL, "has 1.0, 2.0");
}

/* The automatic install of ipdtest_sdistonly fails (build refused); an
 * execution run soon after with the same import gets the same failure
 * without pip (no request reaches the index); a successful install of
 * something else switches the generation and ends that; and with a short
 * --auto-install-retry-after it is tried again once the time is up. */
static void auto_install_failure_remembered(void)
{
    struct srv_opts so;
    struct itest_resp r;
    const char *code = "import ipdtest_sdistonly\n";
    REQUIRE(index_setup());
    make_opts(&so, NULL);
    struct itest_server *s = itest_start(&so.o);
    REQUIRE(s);
    int h0 = index_hits("ipdtest-sdistonly");
    run_code(s, NULL, code, &r);
    CHECK_EXEC(&r, false, "");
    json_t *one =
        json_array_get(itest_json_get(r.json, "installed_packages"), 0);
    const char *msg1 = json_string_value(json_object_get(one, "message"));
    CHECK_STR(json_string_value(json_object_get(one, "status")), "failed");
    CHECKF(msg1 && strstr(msg1, "build refused"), "message: %s", r.body);
    char *first = msg1 ? strdup(msg1) : NULL;
    itest_resp_release(&r);
    int h1 = index_hits("ipdtest-sdistonly");
    CHECKF(h1 > h0, "pip never asked the index (%d -> %d)", h0, h1);

    run_code(s, NULL, code, &r);
    CHECK_EXEC(&r, false, "");
    one = json_array_get(itest_json_get(r.json, "installed_packages"), 0);
    CHECK_STR(json_string_value(json_object_get(one, "status")), "failed");
    CHECK_STR(json_string_value(json_object_get(one, "message")), first);
    itest_resp_release(&r);
    CHECKF(index_hits("ipdtest-sdistonly") == h1,
           "the second execution ran pip again (%d -> %d requests)", h1,
           index_hits("ipdtest-sdistonly"));
    CHECK(itest_wait_log_line(s, 5000,
                              "not installing ipdtest-sdistonly "
                              "again",
                              NULL));

    /* A new generation: tried again. */
    CHECK_INSTALL(s, "ipdtest-alpha==1.0", "installed", "1.0", NULL);
    run_code(s, NULL, code, &r);
    CHECK_EXEC(&r, false, "");
    itest_resp_release(&r);
    int h2 = index_hits("ipdtest-sdistonly");
    CHECKF(h2 > h1, "not retried on the new generation (%d -> %d)", h1, h2);

    /* Remembered for 2 s only: a bounded poll until pip runs again. */
    const char *extra[] = {"--auto-install-retry-after", "2s", NULL};
    struct srv_opts short_opts;
    make_opts(&short_opts, extra);
    REQUIRE(itest_restart(s, &short_opts.o));
    run_code(s, NULL, code, &r);
    itest_resp_release(&r);
    int h3 = index_hits("ipdtest-sdistonly"), h4 = h3;
    double deadline = itest_now() + 60.0 * scale();
    while (h4 == h3 && itest_now() < deadline) {
        pause_ms(500);
        run_code(s, NULL, code, &r);
        itest_resp_release(&r);
        h4 = index_hits("ipdtest-sdistonly");
    }
    CHECKF(h4 > h3, "never retried after --auto-install-retry-after 2s");
    free(first);
    itest_stop(s);
}

/* An automatic install counts against the execution's timeout: with the
 * wheel's download held, pip is stopped when the execution's time is
 * spent and the execution answers then (it used to wait for pip, whose
 * own bound is --pip-timeout), and that is not remembered as the
 * package's failure. */
static void auto_install_within_timeout(void)
{
    struct srv_opts so;
    const char *wheel = "ipdtest_withdep-1.0-py3-none-any.whl";
    REQUIRE(index_setup());
    make_opts(&so, NULL);
    struct itest_server *s = itest_start(&so.o);
    REQUIRE(s);
    /* The venv exists (creating it takes seconds of its own). */
    CHECK_INSTALL(s, "ipdtest-alpha==1.0", "installed", "1.0", NULL);
    gate_arm(wheel);
    struct bg e = {.s = s,
                   .exec_body = json_pack("{s:s, s:i}", "code",
                                          "import ipdtest_withdep\n"
                                          "print('ran')\n",
                                          "timeout", 12)};
    bg_start(&e);
    bool held = gate_wait(wheel, 120000, &e.done);
    CHECKF(held, "the auto-install never reached the gate");
    /* The gate stays shut: pip would wait for the wheel for its own
     * timeout (--pip-timeout, minutes).  The execution answers once its
     * 12 s are spent, the install cut short with it.  (12, not 3: on a
     * loaded 2-core VM pip alone took over 3 s to reach the download, and
     * was stopped before the gate.) */
    bg_join(&e);
    CHECK_STATUS(&e.r, 200);
    json_t *one =
        json_array_get(itest_json_get(e.r.json, "installed_packages"), 0);
    const char *msg = json_string_value(json_object_get(one, "message"));
    CHECK_STR(json_string_value(json_object_get(one, "status")), "failed");
    CHECKF(msg && strstr(msg, "within the execution's timeout"),
           "the install was not cut at the execution's timeout: %s", e.r.body);
    CHECKF(!itest_json_str(e.r.json, "auto_installed"),
           "auto_installed set: %s", e.r.body);
    itest_resp_release(&e.r);
    gate_open(wheel);

    /* Running out of the execution's time is not the package's failure:
     * the next execution, with time enough, installs it and runs. */
    struct bg f = {.s = s,
                   .exec_body = json_pack("{s:s, s:i}", "code",
                                          "import ipdtest_withdep\n"
                                          "print('ran')\n",
                                          "timeout", 120)};
    bg_start(&f);
    bg_join(&f);
    CHECK_STATUS(&f.r, 200);
    CHECK_STR(itest_json_str(f.r.json, "auto_installed"), "ipdtest-withdep");
    CHECK_STR(itest_json_str(f.r.json, "stdout"), "ran\n");
    itest_resp_release(&f.r);
    itest_stop(s);
}

/* ---- 14. a relative --venv-dir ------------------------------------------- */

/* --venv-dir ./venv with the server started in tmp_dir (and --data-dir
 * ./data): made absolute at start (the config line shows it), a package
 * installs into tmp_dir/venv, nothing beside the data dir, and an
 * execution imports it without installing it again, also after a
 * restart. */
static void relative_venv_dir(void)
{
    struct srv_opts so;
    struct itest_resp r;
    struct stat st;
    const char *extra[] = {"--venv-dir", "./venv", NULL};
    REQUIRE(index_setup());
    make_opts(&so, extra);
    so.o.relative_data_dir = true;
    struct itest_server *s = itest_start(&so.o);
    REQUIRE(s);
    char *venv = itest_fmt("%s/venv", s->tmp_dir);
    char *line = itest_fmt("venv-dir = %s (flag)", venv);
    CHECK(itest_wait_log_line(s, 5000, line, NULL));
    CHECK_INSTALL(s, "ipdtest-alpha==2.0", "installed", "2.0", NULL);
    run_code(s, NULL, "import ipdtest_alpha; print(ipdtest_alpha.hello())", &r);
    CHECK_EXEC(&r, true, "alpha 2.0\n");
    CHECKF(json_array_size(itest_json_get(r.json, "installed_packages")) == 0,
           "installed again for the run: %s", r.body);
    itest_resp_release(&r);
    char *current = itest_fmt("%s/current", venv);
    CHECKF(lstat(current, &st) == 0 && S_ISLNK(st.st_mode), "no %s", current);
    char *beside = itest_fmt("%s-venv", s->data_dir);
    CHECKF(lstat(beside, &st) != 0, "%s exists", beside);
    REQUIRE(itest_restart(s, &so.o));
    run_code(s, NULL, "import ipdtest_alpha; print(ipdtest_alpha.hello())", &r);
    CHECK_EXEC(&r, true, "alpha 2.0\n");
    CHECKF(json_array_size(itest_json_get(r.json, "installed_packages")) == 0,
           "installed again after the restart: %s", r.body);
    itest_resp_release(&r);
    free(beside);
    free(current);
    free(line);
    free(venv);
    itest_stop(s);
}

/* ---- teardown
 * ------------------------------------------------------------------------------
 */

/* ---- version changes need an admin key (hardening item 14) --------------- */

/* POST /v1/packages with key. */
static long install_as(struct itest_server *s, const char *key, const char *req,
                       struct itest_resp *r)
{
    char *body = itest_fmt("{\"packages\": [\"%s\"]}", req);
    struct itest_req rq = {.method = "POST",
                           .path = "/v1/packages",
                           .key = key,
                           .content_type = "application/json",
                           .body = body,
                           .body_len = strlen(body),
                           .timeout_ms = INSTALL_TIMEOUT_MS * scale()};
    long st = itest_do(s, &rq, r);
    free(body);
    return st;
}

/* One tenant pinning pkg==1.0 downgraded what every tenant imports.  A
 * non-admin key may install what is not installed yet; changing the
 * version of something installed, asked for or pulled in, is 403 (an
 * execution's packages: a failed install, the code runs on the old one);
 * an admin key may. */
static void version_change_needs_admin(void)
{
    struct itest_server *s = main_server();
    struct itest_resp r;
    char *key = NULL, cur[256], after[256];
    REQUIRE(s);
    install(s, "ipdtest-alpha==1.0", &r); /* admin: whatever was there */
    CHECK_STATUS(&r, 200);
    itest_resp_release(&r);
    REQUIRE(itest_create_key(s, "tenant-b", false, &key, NULL));
    current_gen(s, cur, sizeof(cur));

    install_as(s, key, "ipdtest-alpha==2.0", &r);
    CHECK_ERROR(&r, 403, "forbidden");
    const char *msg = itest_json_str(r.json, "error.message");
    CHECKF(msg && strstr(msg, "ipdtest-alpha (1.0 to 2.0)") &&
               strstr(msg, "admin key"),
           "the refusal does not say what and why: %s", r.body);
    itest_resp_release(&r);
    current_gen(s, after, sizeof(after));
    CHECKF(!strcmp(cur, after), "a refused change switched %s -> %s", cur,
           after);

    install_as(s, key, "ipdtest-alpha==1.0", &r); /* no change: fine */
    CHECK_STATUS(&r, 200);
    CHECK_RESULT(&r, 0, "ipdtest-alpha==1.0", "already_installed", "1.0", NULL);
    itest_resp_release(&r);

    json_t *body = json_pack("{s:s, s:[s]}", "code",
                             "import ipdtest_alpha\n"
                             "print(ipdtest_alpha.VERSION)\n",
                             "packages", "ipdtest-alpha==2.0");
    itest_exec(s, key, "u1", body, INSTALL_TIMEOUT_MS * scale(), &r);
    CHECK_STATUS(&r, 200);
    CHECK_STR(itest_exec_stdout(&r), "1.0\n");
    CHECK_STR(
        itest_json_str(
            json_array_get(itest_json_get(r.json, "installed_packages"), 0),
            "status"),
        "failed");
    itest_resp_release(&r);

    install(s, "ipdtest-alpha==2.0", &r); /* the admin key may */
    CHECK_STATUS(&r, 200);
    CHECK_RESULT(&r, 0, "ipdtest-alpha==2.0", "installed", "2.0", NULL);
    itest_resp_release(&r);
    install(s, "ipdtest-alpha==1.0", &r); /* as the other cases expect */
    CHECK_STATUS(&r, 200);
    itest_resp_release(&r);
    free(key);
}

/* ---- requests that install nothing
 * ------------------------------------------- */

/* The warm slots of the admin status as "restarts/generation " per slot:
 * a recycled zygote counts a restart and a new generation names its own
 * dir.  New string. */
static char *slots_sig(struct itest_server *s)
{
    struct itest_resp r;
    char buf[512] = "";
    size_t i;
    json_t *slot;
    itest_request(s, "GET", "/v1/admin/status", s->admin_key, NULL, NULL, NULL,
                  0, NULL, &r);
    json_array_foreach(itest_json_get(r.json, "execution_mode.slots"), i, slot)
    {
        size_t l = strlen(buf);
        const char *g = itest_json_str(slot, "generation");
        snprintf(
            buf + l, sizeof(buf) - l, "%lld/%s ",
            (long long)json_integer_value(json_object_get(slot, "restarts")),
            g ? g : "?");
    }
    CHECKF(r.status == 200 && buf[0], "admin status: %ld %s", r.status, r.body);
    itest_resp_release(&r);
    return strdup(buf);
}

/* POST /v1/executions as admin with packages [pkg] and code printing ok;
 * the run must succeed, and say pkg was already_installed. */
static void exec_with_present(struct itest_server *s, const char *pkg,
                              const char *mode)
{
    struct itest_resp r;
    json_t *body =
        json_pack("{s:s, s:[s]}", "code", "print('ok')", "packages", pkg);
    itest_exec(s, s->admin_key, "u1", body, EXEC_TIMEOUT_MS * scale(), &r);
    CHECK_EXEC(&r, true, "ok\n");
    json_t *ip =
        json_array_get(itest_json_get(r.json, "installed_packages"), 0);
    CHECKF(!strcmp(itest_json_str(ip, "status") ? itest_json_str(ip, "status")
                                                : "",
                   "already_installed"),
           "execution with packages [%s]: %s", pkg, r.body);
    if (mode)
        CHECK_STR(itest_json_str(r.json, "resources.mode"), mode);
    itest_resp_release(&r);
}

/* Every request that ends without installing anything (all refused, all
 * met already, refused + met, an execution's packages all met) makes no
 * venv generation, recycles no zygote and takes no install lock: on a
 * fresh server no venv is made at all (the numpy>=1.20 + a name
 * off the list made one and restarted both zygotes), and while another
 * install holds the lock such requests are answered all the same. */
static void nothing_to_install(void)
{
    struct itest_resp r;
    struct srv_opts so;
    char cur[256], cur2[256], names[1024];
    int ngen, nstray;
    REQUIRE(index_setup());
    /* The test allowlist plus numpy, which the base interpreter has. */
    char *allow = itest_fmt("%s/allow-numpy.txt", ix.work);
    char *text = itest_read_file(ix.allow, NULL);
    char *more = itest_fmt("%snumpy\n", text ? text : "");
    REQUIRE(write_text(allow, more, strlen(more)));
    free(text);
    free(more);
    const char *extra[] = {"--allowlist", allow, "--exec-mode", "warm", NULL};
    make_opts(&so, extra);
    struct itest_server *s = itest_start(&so.o);
    free(allow);
    REQUIRE(s);
    char *sig0 = slots_sig(s);
    json_t *st = get_packages(s);
    const char *npv = st ? installed_version(st, "numpy") : NULL;
    char *numpy_version = strdup(npv ? npv : "(not listed)");
    json_decref(st);
    CHECKF(npv, "GET /v1/packages lists no numpy before any install");

    post_packages(s, json_pack("[s,s]", "numpy>=1.20", "pandas"), &r);
    CHECK_RESULT(&r, 0, "numpy>=1.20", "already_installed", numpy_version,
                 NULL);
    CHECK_RESULT(&r, 1, "pandas", "not_allowed", NULL, "pandas");
    itest_resp_release(&r);
    post_packages(s, json_pack("[s,s,s]", "numpy~=1.20", "numpy", "bad req!"),
                  &r);
    CHECK_RESULT(&r, 0, "numpy~=1.20", "already_installed", numpy_version,
                 NULL);
    CHECK_RESULT(&r, 1, "numpy", "invalid", NULL, "named twice");
    CHECK_RESULT(&r, 2, "bad req!", "invalid", NULL, NULL);
    itest_resp_release(&r);
    post_packages(s, json_pack("[s,s]", "pandas", "x @ https://e.com/x.whl"),
                  &r);
    CHECK_RESULT(&r, 0, "pandas", "not_allowed", NULL, "pandas");
    CHECK_RESULT(&r, 1, "x @ https://e.com/x.whl", "invalid", NULL, "URLs");
    itest_resp_release(&r);
    post_raw(s, "{\"packages\": []}", &r);
    CHECK_STATUS(&r, 400);
    itest_resp_release(&r);
    exec_with_present(s, "numpy>=1.20,!=1.0", "warm");

    current_gen(s, cur, sizeof(cur));
    venv_entries(s, &ngen, &nstray, names, sizeof(names));
    CHECKF(!cur[0] && ngen == 0 && nstray == 0,
           "nothing was installed, yet the venv root has: current -> \"%s\", "
           "%s",
           cur, names);
    char *sig = slots_sig(s);
    CHECKF(!strcmp(sig0, sig), "the zygotes were recycled: %s-> %s", sig0, sig);
    free(sig);
    free(sig0);

    /* A generation now; then an install that holds the lock at the
     * index's gate, and requests with nothing to install meanwhile. */
    install(s, "ipdtest-alpha==1.0", &r);
    CHECK_RESULT(&r, 0, "ipdtest-alpha==1.0", "installed", "1.0", NULL);
    itest_resp_release(&r);
    CHECK(itest_wait_exec_mode(s, "warm", 120000));
    current_gen(s, cur, sizeof(cur));
    sig0 = slots_sig(s);
    gate_arm(BIG_WHEEL);
    struct bg big = {.s = s, .pkg = "ipdtest-big"};
    bg_start(&big);
    bool held = gate_wait(BIG_WHEEL, 120000, &big.done);
    CHECKF(held, "the download of %s never reached the gate", BIG_WHEEL);
    struct bg met = {.s = s, .pkg = "ipdtest-alpha>=0.5,<2"};
    struct bg ex = {.s = s,
                    .exec_body = json_pack("{s:s, s:[s]}", "code",
                                           "import ipdtest_alpha\nprint('ok')",
                                           "packages", "ipdtest-alpha==1.*")};
    bg_start(&met);
    bg_start(&ex);
    /* They must answer while the gate still holds the other install
     * (which ends only when we open it, or at pip's 30 s read timeout):
     * queued behind it or waiting for its lock, they would answer after
     * it. */
    while (!(__atomic_load_n(&met.done, __ATOMIC_SEQ_CST) &&
             __atomic_load_n(&ex.done, __ATOMIC_SEQ_CST)) &&
           !__atomic_load_n(&big.done, __ATOMIC_SEQ_CST))
        pause_ms(20);
    int big_done = __atomic_load_n(&big.done, __ATOMIC_SEQ_CST);
    CHECKF(!big_done,
           "a request with nothing to install waited for another install "
           "(answered before it: POST /v1/packages %s, execution %s)",
           met.done ? "yes" : "no", ex.done ? "yes" : "no");
    current_gen(s, cur2, sizeof(cur2));
    sig = slots_sig(s);
    CHECKF(!strcmp(cur, cur2) && !strcmp(sig0, sig),
           "current %s -> %s, slots %s-> %s", cur, cur2, sig0, sig);
    free(sig);
    free(sig0);
    gate_open(BIG_WHEEL);
    bg_join(&met);
    bg_join(&ex);
    bg_join(&big);
    CHECK_RESULT(&met.r, 0, "ipdtest-alpha>=0.5,<2", "already_installed", "1.0",
                 NULL);
    CHECK_EXEC(&ex.r, true, "ok\n");
    CHECK_STR(
        itest_json_str(
            json_array_get(itest_json_get(ex.r.json, "installed_packages"), 0),
            "status"),
        "already_installed");
    CHECK_RESULT(&big.r, 0, "ipdtest-big", "installed", "1.0", NULL);
    itest_resp_release(&met.r);
    itest_resp_release(&ex.r);
    itest_resp_release(&big.r);
    free(numpy_version);
    itest_stop(s);
}

static void stop_servers(void)
{
    if (main_shared.s)
        itest_stop(main_shared.s);
    main_shared.s = NULL;
    if (gen_shared.s)
        itest_stop(gen_shared.s);
    gen_shared.s = NULL;
    index_stop();
}

/* Every line of the server's log has the "<time> <level> <text>" shape
 * (the harness's own "==== harness" lines aside); *bad gets the first
 * one that does not, *n the count of lines with a literal "\x0a" (a
 * newline inside a message, escaped rather than logged as lines). */
static size_t log_misfits(const char *log, char *bad, size_t badsz,
                          size_t *escaped_nl)
{
    regex_t re;
    size_t misfits = 0;
    *escaped_nl = 0;
    bad[0] = '\0';
    if (regcomp(&re,
                "^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z "
                "(debug|info|warn|error) [^ ]",
                REG_EXTENDED | REG_NOSUB) != 0) {
        snprintf(bad, badsz, "(the test's regex does not compile)");
        return 1;
    }
    for (const char *l = log; l && *l;) {
        const char *e = strchr(l, '\n');
        size_t n = e ? (size_t)(e - l) : strlen(l);
        char *line = strndup(l, n);
        if (!line)
            abort();
        if (strncmp(line, "==== harness", 12) != 0 &&
            regexec(&re, line, 0, NULL, 0) != 0 && misfits++ == 0)
            snprintf(bad, badsz, "%s", line);
        if (strstr(line, "\\x0a"))
            (*escaped_nl)++;
        free(line);
        l = e ? e + 1 : NULL;
    }
    regfree(&re);
    return misfits;
}

/* Regression (issue 20 item 10): a failed pip install was logged at info
 * with pip's stderr as one line full of "\x0a", and the `config` lines at
 * start had no time and no level.  Now every line the service writes has
 * one shape, a failed install is a warning, and pip's stderr is logged
 * one line per line. */
static void log_lines_one_format(void)
{
    struct srv_opts so;
    REQUIRE(index_setup());
    make_opts(&so, NULL);
    struct itest_server *s = itest_start(&so.o);
    REQUIRE(s);
    CHECK_INSTALL(s, "ipdtest-alpha==9.9", "failed", NULL,
                  "no such version: ipdtest-alpha==9.9");
    CHECK_INSTALL(s, "ipdtest-broken", "failed", NULL, "deliberately broken");
    struct itest_resp r;
    itest_request(s, "GET", "/healthz", NULL, NULL, NULL, NULL, 0, NULL, &r);
    CHECK_STATUS(&r, 200);
    itest_resp_release(&r);
    CHECK(
        itest_wait_log_line(s, 5000, "access method=GET path=/healthz", NULL));
    char *log = itest_read_log(s);
    REQUIRE(log);
    char bad[512];
    size_t nl = 0, misfits = log_misfits(log, bad, sizeof(bad), &nl);
    CHECKF(misfits == 0, "%zu log lines of another shape, the first: %s",
           misfits, bad);
    CHECKF(nl == 0, "%zu log lines carry a newline as \\x0a", nl);
    CHECKF(strstr(log, " info config listen = 127.0.0.1:0 (flag)\n") != NULL,
           "no config line with a time and a level");
    CHECKF(strstr(log, " warn venv: pip install failed: ") != NULL &&
               !strstr(log, " info venv: pip install failed"),
           "a failed install is not a warning");
    CHECKF(strstr(log, " warn venv: pip: ERROR: ") != NULL,
           "pip's stderr is not logged line by line");
    free(log);
    itest_stop(s);
}

TEST_MAIN(T(install_and_list), T(not_allowed_and_invalid),
          T(dependency_not_allowed), T(broken_package_fails),
          T(sdist_only_fails), T(import_after_install), T(execution_packages),
          T(auto_install), T(auto_install_off), T(concurrent_installs),
          T(sigkill_during_install), T(execution_across_switch),
          T(rebuild_switches), T(rebuild_failure_keeps_current),
          T(sdist_allowed), T(sdist_build_stays_in_its_generation),
          T(sigterm_with_queued_install), T(install_share_per_tenant),
          T(index_unreachable_named), T(offline_wheel_folder),
          T(relative_venv_dir), T(no_such_version_named),
          T(auto_install_failure_remembered), T(auto_install_within_timeout),
          T(version_change_needs_admin), T(log_lines_one_format),
          T(nothing_to_install), T(stop_servers))
