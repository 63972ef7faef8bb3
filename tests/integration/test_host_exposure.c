/*
 * test_host_exposure.c - what the host shows (issue 13, items 8 and 9).
 *
 * data_dir_is_the_services_alone: after uploads, keys, a synchronous and
 * an asynchronous execution (with an input file and a generated file),
 * every entry of the data dir is owned by the service's uid and grants
 * group and other nothing (meta.db, -wal and -shm included), and nothing
 * of a run is staged there.
 *
 * run_sees_no_host_path: a run reads /proc/self/mountinfo, mounts and
 * mountstats; no line names the data dir, the venv dir, the test's temp
 * dir, the checkout (the prelude's source) or the execution's id.
 *
 * venv_run_sees_no_host_path: the same for runs on an installed venv
 * generation (ipdtest-alpha from tests/support/make-wheels.py, installed
 * offline with --pip-find-links and --pip-no-index), before and after a
 * restart (the current generation is then copied at start, which the
 * log says before any run).
 */
#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"

/* Walk path (lstat, no symlink followed); count and print each entry
 * whose mode grants group or other anything or whose owner is not us. */
static int walk_modes(const char *path, int depth)
{
    struct stat st;
    int bad = 0;
    DIR *d;
    struct dirent *e;

    if (lstat(path, &st) != 0) {
        fprintf(stderr, "walk: %s: %s\n", path, strerror(errno));
        return 1;
    }
    /* Excluded: a symlink's own mode is always 0777 and the kernel never
     * checks it; what it names is walked (or not in the data dir). */
    if (!S_ISLNK(st.st_mode) &&
        ((st.st_mode & 077) != 0 || st.st_uid != geteuid())) {
        fprintf(stderr, "walk: %s: mode %04o owner %u (want 0 for group "
                        "and other, owner %u)\n",
                path, (unsigned)(st.st_mode & 07777), (unsigned)st.st_uid,
                (unsigned)geteuid());
        bad++;
    }
    if (!S_ISDIR(st.st_mode) || depth > 16)
        return bad;
    d = opendir(path);
    if (!d)
        return bad + 1;
    while ((e = readdir(d)) != NULL) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        char *child = itest_fmt("%s/%s", path, e->d_name);
        bad += walk_modes(child, depth + 1);
        free(child);
    }
    closedir(d);
    return bad;
}

/* Poll GET /v1/executions/{id} (bounded) until done; the result or NULL. */
static json_t *wait_done(struct itest_server *s, const char *id)
{
    char *path = itest_fmt("/v1/executions/%s", id);
    struct timespec gap = {0, 50 * 1000 * 1000};
    json_t *result = NULL;
    double deadline = itest_now() + 60;
    while (!result && itest_now() < deadline) {
        struct itest_resp r;
        itest_request(s, "GET", path, s->admin_key, "u1", NULL, NULL, 0,
                      NULL, &r);
        const char *st = itest_json_str(r.json, "status");
        if (r.status == 200 && st && !strcmp(st, "done"))
            result = json_incref(itest_json_get(r.json, "result"));
        bool gone = r.status != 200;
        itest_resp_release(&r);
        if (gone)
            break;
        if (!result)
            nanosleep(&gap, NULL); /* the pace of the poll */
    }
    free(path);
    return result;
}

/* Upload a small text file as u1; its id (free()). */
static char *upload(struct itest_server *s, const char *name)
{
    struct itest_resp r;
    itest_upload_raw(s, s->admin_key, "u1", name, "text/plain", "in put",
                     6, NULL, &r);
    CHECK_STATUS(&r, 201);
    char *id = itest_json_dup(r.json, "file_id");
    itest_resp_release(&r);
    return id;
}

/* Run code as u1 with file id: synchronously, or async (202, then the
 * polled result).  The result (new reference) or NULL. */
static json_t *run(struct itest_server *s, const char *code,
                   const char *file_id, bool async)
{
    struct itest_resp r;
    json_t *res = NULL;
    itest_exec(s, s->admin_key, "u1",
               json_pack("{s:s, s:[s], s:b}", "code", code, "files",
                         file_id, "async", async),
               0, &r);
    CHECK_STATUS(&r, async ? 202 : 200);
    if (!async && r.status == 200)
        res = json_incref(r.json);
    char *id = async ? itest_json_dup(r.json, "execution_id") : NULL;
    itest_resp_release(&r);
    if (id && id[0])
        res = wait_done(s, id);
    CHECKF(res, "no result");
    free(id);
    return res;
}

static void data_dir_is_the_services_alone(void)
{
    struct itest_server *s = itest_start(NULL);
    char *key = NULL, *key_id = NULL;
    REQUIRE(s);
    REQUIRE(itest_create_key(s, "t1", false, &key, &key_id));
    char *id = upload(s, "in.txt");
    char *code = itest_fmt("print(load_file('%s'))\n"
                           "open('/mnt/output/out.txt', 'w').write('made')\n",
                           id);
    for (int async = 0; async < 2; async++) {
        json_t *res = run(s, code, id, async);
        CHECK_STR(json_string_value(json_object_get(res, "stdout")),
                  "in put\n");
        CHECKF(json_array_size(json_object_get(res, "generated_files")) == 1,
               "generated_files of run %d", async);
        json_decref(res);
    }
    CHECKF(walk_modes(s->data_dir, 0) == 0, "the data dir %s is not the "
           "service's alone (see above)", s->data_dir);
    /* The venv dir, beside it, is the service's too (its generations are
     * the sandbox's; they are handed to runs as open trees). */
    char *venv = itest_fmt("%s-venv", s->data_dir);
    struct stat st;
    CHECK(stat(venv, &st) == 0 && (st.st_mode & 07777) == 0700 &&
          st.st_uid == geteuid());
    char *exec = itest_fmt("%s/exec", s->data_dir);
    CHECK(lstat(exec, &st) != 0 && errno == ENOENT);
    free(exec);
    free(venv);
    free(code);
    free(id);
    free(key);
    free(key_id);
    itest_stop(s);
}

/* The first needle found in text, or NULL. */
static const char *leak(const char *text, const char *const *needles)
{
    for (size_t i = 0; needles[i]; i++)
        if (needles[i][0] && strstr(text, needles[i]))
            return needles[i];
    return NULL;
}

#define MOUNTS_CODE                                                      \
    "import sys\n"                                                      \
    "for f in ('mountinfo', 'mounts', 'mountstats'):\n"                  \
    "    print(open('/proc/self/' + f).read())\n"                        \
    "import os; print(os.getcwd(), sys.executable, sys.path)\n"

/* A sync and an async run of code (reading file_id): stdout has want and
 * no line names a host path (the data dir, the venv dir, the temp dirs,
 * the checkout) or the execution's id.  other: one more such path. */
static void runs_see_no_host_path(struct itest_server *s, const char *code,
                                  const char *file_id, const char *want,
                                  const char *other)
{
    char *venv = itest_fmt("%s-venv", s->data_dir);
    for (int async = 0; async < 2; async++) {
        json_t *res = run(s, code, file_id, async);
        const char *out = json_string_value(json_object_get(res, "stdout"));
        const char *exec_id =
            json_string_value(json_object_get(res, "execution_id"));
        CHECKF(out && strstr(out, "/mnt/data"), "stdout: %s",
               out ? out : "(none)");
        CHECKF(out && strstr(out, want), "want %s in stdout: %s", want,
               out ? out : "(none)");
        const char *needles[] = {s->data_dir, venv, s->tmp_dir,
                                 ITEST_SOURCE_DIR, exec_id ? exec_id : "",
                                 other ? other : "", NULL};
        const char *found = out ? leak(out, needles) : NULL;
        CHECKF(!found, "run %d sees %s:\n%s", async, found, out);
        json_decref(res);
    }
    free(venv);
}

static void run_sees_no_host_path(void)
{
    struct itest_server *s = itest_start(NULL);
    REQUIRE(s);
    char *id = upload(s, "in.txt");
    runs_see_no_host_path(s, MOUNTS_CODE, id, "/mnt/output", NULL);
    free(id);
    itest_stop(s);
}

/* tests/support (through $IPD_TEST_SUPPORT_DIR, else next to this file). */
static char *support_path(const char *name)
{
    const char *env = getenv("IPD_TEST_SUPPORT_DIR");
    if (env && *env)
        return itest_fmt("%s/%s", env, name);
    return itest_fmt("%s/tests/support/%s", ITEST_SOURCE_DIR, name);
}

static bool write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    bool ok = f && fputs(text, f) >= 0;
    if (f && fclose(f))
        ok = false;
    CHECKF(ok, "cannot write %s: %s", path, strerror(errno));
    return ok;
}

/* The test packages in work/wheels and the lists naming ipdtest-alpha. */
static bool packages_setup(const char *work)
{
    char *wheels = itest_fmt("%s/wheels", work);
    char *mk = support_path("make-wheels.py");
    const char *argv[] = {"/usr/bin/python3", mk, wheels, NULL};
    int rc = itest_run(argv, NULL, 120000);
    CHECKF(rc == 0, "make-wheels.py exited %d", rc);
    char *allow = itest_fmt("%s/allowlist.txt", work);
    char *empty = itest_fmt("%s/empty.txt", work);
    bool ok = rc == 0 && write_text(allow, "ipdtest-alpha\n") &&
              write_text(empty, "");
    free(allow);
    free(empty);
    free(mk);
    free(wheels);
    return ok;
}

/* How many times the server log has needle. */
static int log_count(const struct itest_server *s, const char *needle)
{
    char *log = itest_read_log(s);
    int n = 0;
    for (const char *p = log ? strstr(log, needle) : NULL; p;
         p = strstr(p + 1, needle))
        n++;
    free(log);
    return n;
}

static void venv_run_sees_no_host_path(void)
{
    const char *base = getenv("TMPDIR");
    char *work = itest_fmt("%s/ipd-hostexp-XXXXXX", base && *base ? base
                                                                   : "/tmp");
    REQUIRE(mkdtemp(work));
    REQUIRE(packages_setup(work));
    char *wheels = itest_fmt("%s/wheels", work);
    char *allow = itest_fmt("%s/allowlist.txt", work);
    char *empty = itest_fmt("%s/empty.txt", work);
    /* (--fetch-allow: pip's runs may reach 127.0.0.1 once they get a
     * network namespace of their own; offline here anyway) */
    const char *args[] = {"--allowlist",      allow,   "--allowed-deps",
                          empty,              "--import-names", empty,
                          "--pip-find-links", wheels,  "--pip-no-index",
                          "1",                "--fetch-allow", "127.0.0.1/32",
                          NULL};
    struct itest_opts o = {.args = args};
    struct itest_server *s = itest_start(&o);
    REQUIRE(s);
    struct itest_resp r;
    itest_request(s, "POST", "/v1/packages", s->admin_key, NULL,
                  "application/json", "{\"packages\": [\"ipdtest-alpha\"]}",
                  strlen("{\"packages\": [\"ipdtest-alpha\"]}"), NULL, &r);
    CHECK_STATUS(&r, 200);
    const char *st = json_string_value(json_object_get(
        json_array_get(json_object_get(r.json, "results"), 0), "status"));
    CHECKF(st && !strcmp(st, "installed"), "install: %s",
           r.body ? r.body : "(no body)");
    itest_resp_release(&r);
    char *id = upload(s, "in.txt");
    const char *code = "import ipdtest_alpha; print(ipdtest_alpha.hello())\n"
                       MOUNTS_CODE;
    runs_see_no_host_path(s, code, id, "alpha 2.0", work);
    /* Restarted: the current generation is copied at start, before the
     * server answers (the log is appended to across the restart). */
    int copies = log_count(s, "copied into a private tmpfs for runs");
    CHECKF(copies >= 1, "%d copies logged at the install", copies);
    CHECK(itest_restart(s, &o));
    CHECKF(log_count(s, "copied into a private tmpfs for runs") == copies + 1,
           "no copy logged at the restart");
    runs_see_no_host_path(s, code, id, "alpha 2.0", work);
    free(id);
    itest_stop(s);
    if (test__failed_checks == 0)
        itest_rm_rf(work);
    free(wheels);
    free(allow);
    free(empty);
    free(work);
}

TEST_MAIN(T(data_dir_is_the_services_alone), T(run_sees_no_host_path),
          T(venv_run_sees_no_host_path))
