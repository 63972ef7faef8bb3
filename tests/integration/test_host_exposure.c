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
 *
 * venv_stage_max_too_small: --venv-stage-max 1M, below the generation:
 * runs import the package from the generation bound by its host path, and
 * its warning is logged once, not once per run.
 *
 * venv_stage_max_zero: no copy is made or logged, runs work on the host
 * path; the start-up warning says so.
 *
 * venv_dir_own_filesystem: --venv-dir is the root of a tmpfs of its own
 * (mounted by the test, which runs as root): the start-up log says so, no
 * copy is made, runs see the generation as /gen-... and no host path.
 */
#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <sys/mount.h>
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
        fprintf(stderr,
                "walk: %s: mode %04o owner %u (want 0 for group "
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
        itest_request(s, "GET", path, s->admin_key, "u1", NULL, NULL, 0, NULL,
                      &r);
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
    itest_upload_raw(s, s->admin_key, "u1", name, "text/plain", "in put", 6,
                     NULL, &r);
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
               json_pack("{s:s, s:[s], s:b}", "code", code, "files", file_id,
                         "async", async),
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
    CHECKF(walk_modes(s->data_dir, 0) == 0,
           "the data dir %s is not the "
           "service's alone (see above)",
           s->data_dir);
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

#define MOUNTS_CODE                                                            \
    "import sys\n"                                                             \
    "for f in ('mountinfo', 'mounts', 'mountstats'):\n"                        \
    "    print(open('/proc/self/' + f).read())\n"                              \
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
        const char *needles[] = {s->data_dir,
                                 venv,
                                 s->tmp_dir,
                                 ITEST_SOURCE_DIR,
                                 exec_id ? exec_id : "",
                                 other ? other : "",
                                 NULL};
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

/* A server's test packages: work/wheels and the lists, and its `serve`
 * arguments (the offline install, then whatever a test adds at n). */
struct venv_env {
    char *work, *wheels, *allow, *empty; /* owned */
    const char *args[24];                /* NULL-terminated */
    size_t n;                            /* args used */
    struct itest_opts o;
};

static bool venv_env_setup(struct venv_env *v)
{
    const char *base = getenv("TMPDIR");
    memset(v, 0, sizeof *v);
    v->work = itest_fmt("%s/ipd-hostexp-XXXXXX", base && *base ? base : "/tmp");
    if (!mkdtemp(v->work)) {
        CHECKF(false, "mkdtemp %s: %s", v->work, strerror(errno));
        free(v->work);
        v->work = NULL;
        return false;
    }
    v->wheels = itest_fmt("%s/wheels", v->work);
    v->allow = itest_fmt("%s/allowlist.txt", v->work);
    v->empty = itest_fmt("%s/empty.txt", v->work);
    /* (--fetch-allow: pip's runs may reach 127.0.0.1 once they get a
     * network namespace of their own; offline here anyway) */
    const char *args[] = {
        "--allowlist",    v->allow, "--allowed-deps",   v->empty,
        "--import-names", v->empty, "--pip-find-links", v->wheels,
        "--pip-no-index", "1",      "--fetch-allow",    "127.0.0.1/32"};
    for (v->n = 0; v->n < sizeof args / sizeof args[0]; v->n++)
        v->args[v->n] = args[v->n];
    v->o.args = v->args;
    return packages_setup(v->work);
}

/* Free v; its work dir goes when the test passed (else kept to look at). */
static void venv_env_done(struct venv_env *v)
{
    if (v->work && test__failed_checks == 0)
        itest_rm_rf(v->work);
    free(v->wheels);
    free(v->allow);
    free(v->empty);
    free(v->work);
}

/* Install ipdtest-alpha (POST /v1/packages): a new current generation. */
static bool install_alpha(struct itest_server *s)
{
    const char *body = "{\"packages\": [\"ipdtest-alpha\"]}";
    struct itest_resp r;
    itest_request(s, "POST", "/v1/packages", s->admin_key, NULL,
                  "application/json", body, strlen(body), NULL, &r);
    CHECK_STATUS(&r, 200);
    const char *st = json_string_value(json_object_get(
        json_array_get(json_object_get(r.json, "results"), 0), "status"));
    bool ok = r.status == 200 && st && !strcmp(st, "installed");
    CHECKF(ok, "install: %s", r.body ? r.body : "(no body)");
    itest_resp_release(&r);
    return ok;
}

#define ALPHA_CODE                                                             \
    "import ipdtest_alpha; print(ipdtest_alpha.hello())\n" MOUNTS_CODE

#define COPIED "copied into a private tmpfs for runs"
#define BOUND "bind it by its host path"

static void venv_run_sees_no_host_path(void)
{
    struct venv_env v;
    if (!venv_env_setup(&v))
        goto out;
    struct itest_server *s = itest_start(&v.o);
    REQUIRE(s);
    install_alpha(s);
    char *id = upload(s, "in.txt");
    runs_see_no_host_path(s, ALPHA_CODE, id, "alpha 2.0", v.work);
    /* Restarted: the current generation is copied at start, before the
     * server answers (the log is appended to across the restart). */
    int copies = log_count(s, COPIED);
    CHECKF(copies >= 1, "%d copies logged at the install", copies);
    CHECK(itest_restart(s, &v.o));
    CHECKF(log_count(s, COPIED) == copies + 1, "no copy logged at the restart");
    runs_see_no_host_path(s, ALPHA_CODE, id, "alpha 2.0", v.work);
    free(id);
    itest_stop(s);
out:
    venv_env_done(&v);
}

/* A sync and an async run import ipdtest_alpha and see the generation
 * bound by its host path (DATA-DIR-venv/gen-... in mountinfo; the part of
 * it below the root of its filesystem, whichever that is).  The name
 * (gen-...) of the generation the runs saw (free()), or NULL. */
static char *runs_see_host_path(struct itest_server *s, const char *file_id)
{
    char *gen = NULL;
    for (int async = 0; async < 2; async++) {
        json_t *res = run(s, ALPHA_CODE, file_id, async);
        const char *out = json_string_value(json_object_get(res, "stdout"));
        const char *at = out ? strstr(out, "/data-venv/gen-") : NULL;
        CHECKF(out && strstr(out, "alpha 2.0"), "run %d: stdout: %s", async,
               out ? out : "(none)");
        CHECKF(at, "run %d does not see the generation's host path:\n%s", async,
               out ? out : "(none)");
        if (at && !gen)
            gen = itest_fmt("%.*s", (int)strcspn(at + 11, " \n"), at + 11);
        json_decref(res);
    }
    return gen;
}

/* --venv-stage-max below the generation's size (a venv with pip is some
 * MB): no copy, runs work on the generation bound by its host path, and
 * the warning says so once for the generation, not once per run. */
static void venv_stage_max_too_small(void)
{
    struct venv_env v;
    if (!venv_env_setup(&v))
        goto out;
    v.args[v.n++] = "--venv-stage-max";
    v.args[v.n++] = "1M";
    struct itest_server *s = itest_start(&v.o);
    REQUIRE(s);
    install_alpha(s);
    char *id = upload(s, "in.txt");
    char *gen = runs_see_host_path(s, id);
    /* Once for the generation the runs used, not once per run (an
     * earlier generation, made before the install's, has its own). */
    char *warned = itest_fmt("%s " BOUND, gen ? gen : "gen-?");
    CHECK(itest_wait_log_line(s, 5000, warned, "larger than venv-stage-max",
                              "1048576 bytes", NULL));
    CHECKF(log_count(s, warned) == 1, "%d warnings \"%s\", want 1",
           log_count(s, warned), warned);
    free(warned);
    free(gen);
    CHECKF(log_count(s, COPIED) == 0, "a copy is logged");
    free(id);
    itest_stop(s);
out:
    venv_env_done(&v);
}

/* --venv-stage-max 0: the operator's choice, warned about at start; no
 * copy is tried (none logged, no per-generation warning), runs work. */
static void venv_stage_max_zero(void)
{
    struct venv_env v;
    if (!venv_env_setup(&v))
        goto out;
    v.args[v.n++] = "--venv-stage-max";
    v.args[v.n++] = "0";
    struct itest_server *s = itest_start(&v.o);
    REQUIRE(s);
    CHECKF(log_count(s, "venv-stage-max is 0: runs on a generation see its "
                        "host path") == 1,
           "no start-up warning");
    install_alpha(s);
    char *id = upload(s, "in.txt");
    free(runs_see_host_path(s, id));
    CHECKF(log_count(s, COPIED) == 0, "a copy is logged");
    CHECKF(log_count(s, BOUND) == 0, "a per-generation warning is logged");
    free(id);
    itest_stop(s);
out:
    venv_env_done(&v);
}

/* The server on venv dir dir, the root of its own filesystem: said at
 * start, no copy, runs see the generation as /gen-... only. */
static void own_fs_runs(struct venv_env *v, const char *dir)
{
    v->args[v->n++] = "--venv-dir";
    v->args[v->n++] = dir;
    struct itest_server *s = itest_start(&v->o);
    REQUIRE(s);
    char *said = itest_fmt("venv: %s is the root of its own filesystem", dir);
    CHECKF(log_count(s, said) == 1, "no start-up line: %s", said);
    install_alpha(s);
    char *id = upload(s, "in.txt");
    /* " /gen-": mountinfo's root field of the generation's bind (a copy
     * would show /venv); dir, below v->work, is a needle too. */
    runs_see_no_host_path(s, ALPHA_CODE, id, " /gen-", v->work);
    CHECKF(log_count(s, COPIED) == 0, "a copy is logged");
    CHECKF(log_count(s, BOUND) == 0, "a per-generation warning is logged");
    free(id);
    free(said);
    itest_stop(s);
}

/* --venv-dir the root of a tmpfs of its own (mounted here, on a fresh
 * directory; unmounted whatever happened). */
static void venv_dir_own_filesystem(void)
{
    struct venv_env v;
    char *dir = NULL;
    bool mounted = false;
    if (!venv_env_setup(&v))
        goto out;
    dir = itest_fmt("%s/venvfs", v.work);
    mounted = mkdir(dir, 0700) == 0 &&
              mount("ipdtest-venv", dir, "tmpfs", MS_NOSUID | MS_NODEV,
                    "mode=0700,size=512m") == 0;
    CHECKF(mounted, "cannot mount a tmpfs on %s: %s", dir, strerror(errno));
    if (mounted)
        own_fs_runs(&v, dir);
    if (mounted && umount2(dir, MNT_DETACH) != 0)
        CHECKF(false, "umount %s: %s", dir, strerror(errno));
out:
    free(dir);
    venv_env_done(&v);
}

TEST_MAIN(T(data_dir_is_the_services_alone), T(run_sees_no_host_path),
          T(venv_run_sees_no_host_path), T(venv_stage_max_too_small),
          T(venv_stage_max_zero), T(venv_dir_own_filesystem))
