/*
 * test_session_state.c - what a session keeps from call to call, and what
 * it sends back, through the real daemon (issue 20, items 2, 3 and 12;
 * docs/API.md "Executions in a session", docs/SANDBOX.md "Warm, cold and
 * session runs").
 *
 * What is checked, each as an outcome seen over HTTP:
 *  - a call's input files are staged for that call only: the next call's
 *    /mnt/data, FILES and load_file do not have them, not even through a
 *    path or a descriptor the code kept; a copy the code made is its own;
 *  - a file the user deleted is not readable through a session;
 *  - staged inputs never pile up outside the session's memory limit: four
 *    calls of 40 MiB each under a 128 MiB policy each see only their own
 *    input in the stage, and a call whose inputs total more than the
 *    session's memory limit is 413 before anything is copied;
 *  - the variables listing is the service's, whatever the session's code
 *    does: a repr whose str subclass lies about its length is cut at 500
 *    characters; a listing the code forged (extra keys, names that are
 *    not names, markup, nested objects, 4,000 entries, huge types and
 *    reprs) comes back with the listing's shape and caps only, or, when
 *    its top level is not a listing, as a refusal that repeats none of it;
 *  - a process forked inside a session (in a cell that ends each way a
 *    cell can end, in a child that outlives its cell, in a __repr__ of
 *    the variables call, in a signal handler that runs between calls)
 *    never answers for the session: every later call is answered by the
 *    session's own interpreter with its own output.
 *
 * One server for all cases: policy "standard" with 128 MiB of memory.
 */
#include <unistd.h>

#include "harness.h"

#define CALL_MS 120000
#define MIB (1024 * 1024)

static struct itest_server *srv;

/* ---- helpers ----------------------------------------------------------- */

static char *new_session(const char *user)
{
    return itest_session_new(srv, srv->admin_key, user);
}

static void delete_session(const char *user, const char *sid)
{
    struct itest_resp r;
    char *path = itest_fmt("/v1/sessions/%s", sid);
    itest_request(srv, "DELETE", path, srv->admin_key, user, NULL, NULL, 0,
                  NULL, &r);
    CHECK_STATUS(&r, 204);
    itest_resp_release(&r);
    free(path);
}

/* POST /v1/executions {code, files (a JSON array text or NULL),
 * session_id}. */
static long call(const char *user, const char *sid, const char *code,
                 const char *files, struct itest_resp *r)
{
    json_t *body = json_pack("{s:s, s:s}", "code", code, "session_id", sid);
    if (files)
        json_object_set_new(body, "files", json_loads(files, 0, NULL));
    return itest_exec(srv, srv->admin_key, user, body, CALL_MS, r);
}

/* A call that ran in sid and did not end it; its stdout parsed as JSON
 * (new ref; NULL, and a failed check, when it is not). */
static json_t *call_json(const char *user, const char *sid, const char *code,
                         const char *files)
{
    struct itest_resp r;
    json_t *out = NULL;
    call(user, sid, code, files, &r);
    CHECK_STATUS(&r, 200);
    CHECKF(json_is_true(itest_json_get(r.json, "success")) &&
               json_is_false(itest_json_get(r.json, "session_ended")),
           "the call failed or ended its session: %s", r.body);
    out = json_loads(itest_exec_stdout(&r), 0, NULL);
    CHECKF(out != NULL, "stdout is not JSON: %s", r.body);
    itest_resp_release(&r);
    return out;
}

/* A call whose whole stdout must be want (and which ended nothing). */
static void call_out(const char *user, const char *sid, const char *code,
                     const char *want)
{
    struct itest_resp r;
    call(user, sid, code, NULL, &r);
    CHECK_STATUS(&r, 200);
    CHECKF(json_is_false(itest_json_get(r.json, "session_ended")),
           "the call ended its session: %s", r.body);
    CHECKF(!strcmp(itest_exec_stdout(&r), want),
           "stdout \"%s\", want \"%s\" (%s)", itest_exec_stdout(&r), want,
           r.body);
    itest_resp_release(&r);
}

/* Upload len bytes of data as filename for user: its id (free()). */
static char *upload(const char *user, const char *filename, const void *data,
                    size_t len)
{
    struct itest_resp r;
    itest_upload_raw(srv, srv->admin_key, user, filename, NULL, data, len, NULL,
                     &r);
    CHECK_STATUS(&r, 201);
    char *id = itest_json_dup(r.json, "file_id");
    itest_resp_release(&r);
    return id;
}

/* The JSON string array of j at key as "a,b,c" (free()). */
static char *joined(const json_t *j, const char *key)
{
    json_t *a = json_object_get(j, key), *v;
    size_t i;
    char *out = itest_fmt("%s", json_is_array(a) ? "" : "(no array)");
    json_array_foreach(a, i, v)
    {
        char *next = itest_fmt("%s%s%s", out, i ? "," : "",
                               json_is_string(v) ? json_string_value(v)
                                                 : "(not a string)");
        free(out);
        out = next;
    }
    return out;
}

#define CHECK_LIST(j, key, want)                                               \
    do {                                                                       \
        char *got__ = joined((j), (key));                                      \
        CHECKF(!strcmp(got__, (want)), "%s: [%s], want [%s]", (key), got__,    \
               (want));                                                        \
        free(got__);                                                           \
    } while (0)

static void start_server(void)
{
    /* 40 MiB inputs come from GridFS in one read each: no 2 s socket
     * timeout on a loaded machine. */
    const char *args[] = {"--exec-slots",
                          "2",
                          "--ready-check-interval",
                          "never",
                          "--mongo-timeout",
                          "30s",
                          NULL};
    struct itest_opts o = {.args = args,
                           .config = "policy.standard.memory = 128M\n"};
    srv = itest_start(&o);
    REQUIRE(srv);
}

static void stop_server(void)
{
    REQUIRE(srv);
    itest_stop(srv);
    srv = NULL;
}

/* ---- item 2: inputs are the call's ------------------------------------- */

static void get_variables(const char *user, const char *sid,
                          struct itest_resp *r);

/* The repr of variable name in a variables call now (a copy, free()). */
static char *repr_now(const char *user, const char *sid, const char *name)
{
    struct itest_resp r;
    json_t *e;
    size_t i;
    char *out = NULL;
    get_variables(user, sid, &r);
    CHECK_STATUS(&r, 200);
    json_array_foreach(itest_json_get(r.json, "variables"), i, e)
    {
        if (!strcmp(itest_json_str(e, "name") ? itest_json_str(e, "name") : "",
                    name))
            out = itest_json_dup(e, "repr");
    }
    CHECKF(out != NULL, "no variable %s: %s", name, r.body);
    itest_resp_release(&r);
    return out ? out : itest_fmt("(none)");
}

static const char prelude_py[] = "import os, json, shutil, sys, time\n";

/* Each call sees its own files only; the code's own copy stays. */
static void inputs_last_one_call(void)
{
    const char *u = "in1";
    REQUIRE(srv);
    char *a = upload(u, "a.txt", "alpha", 5);
    char *b = upload(u, "b.txt", "beta", 4);
    char *sid = new_session(u);
    REQUIRE(a && b && sid);
    char *fa = itest_fmt("[\"%s\"]", a), *fb = itest_fmt("[\"%s\"]", b);
    char *ab = itest_fmt("a.txt,%s", a), *bb = itest_fmt("b.txt,%s", b);

    char *code = itest_fmt(
        "%sp = FILES['a.txt']\nshutil.copy(p, '/tmp/copy.txt')\n"
        "class Probe:\n    def __repr__(self):\n"
        "        return ','.join(os.listdir('/mnt/data')) or 'empty'\n"
        "probe = Probe()\n"
        "print(json.dumps({'read': open(p).read(),\n"
        "  'data': sorted(os.listdir('/mnt/data')), 'files': sorted(FILES)}))",
        prelude_py);
    json_t *j = call_json(u, sid, code, fa);
    CHECK_STR(itest_json_str(j, "read"), "alpha");
    CHECK_LIST(j, "data", a);
    CHECK_LIST(j, "files", ab);
    json_decref(j);
    free(code);
    /* Between calls (the variables call runs the code's __repr__s), the
     * stage holds nothing. */
    char *seen = repr_now(u, sid, "probe");
    CHECKF(!strcmp(seen, "empty"), "/mnt/data between calls: %s", seen);
    free(seen);

    j = call_json(u, sid,
                  "print(json.dumps({'old': os.path.exists(p),\n"
                  "  'data': sorted(os.listdir('/mnt/data')),\n"
                  "  'files': sorted(FILES), 'b': load_file('b.txt')}))",
                  fb);
    CHECKF(json_is_false(json_object_get(j, "old")),
           "the earlier call's input is still at its path");
    CHECK_LIST(j, "data", b);
    CHECK_LIST(j, "files", bb);
    CHECK_STR(itest_json_str(j, "b"), "beta");
    json_decref(j);

    j = call_json(u, sid,
                  "try:\n    load_file('a.txt')\n    lf = 'loaded'\n"
                  "except Exception as e:\n    lf = type(e).__name__\n"
                  "print(json.dumps({'data': os.listdir('/mnt/data'),\n"
                  "  'files': sorted(FILES), 'lf': lf,\n"
                  "  'copy': open('/tmp/copy.txt').read(),\n"
                  "  'job': sorted(os.listdir('/mnt/job'))}))",
                  NULL);
    CHECK_LIST(j, "data", "");
    CHECK_LIST(j, "files", "");
    CHECK_STR(itest_json_str(j, "lf"), "FileNotFoundError");
    CHECK_STR(itest_json_str(j, "copy"), "alpha");
    /* display.json: the stage's, written once, the image budget */
    CHECK_LIST(j, "job", "code.py,display.json,files.json");
    json_decref(j);
    delete_session(u, sid);
    free(fa);
    free(fb);
    free(ab);
    free(bb);
    free(a);
    free(b);
    free(sid);
}

/* A deleted file is gone from the session too: neither its path nor a
 * descriptor the code kept open reads it. */
static void deleted_input_unreadable(void)
{
    const char *u = "in2";
    struct itest_resp r;
    REQUIRE(srv);
    char *a = upload(u, "secret.txt", "top secret", 10);
    char *sid = new_session(u);
    REQUIRE(a && sid);
    char *fa = itest_fmt("[\"%s\"]", a);
    char *code = itest_fmt("%sp = FILES['secret.txt']\nh = open(p, 'rb')\n"
                           "class Peek:\n    def __repr__(self):\n"
                           "        h.seek(0)\n"
                           "        return h.read().decode() or 'nothing'\n"
                           "peek = Peek()\n"
                           "print(json.dumps({'read': h.read().decode()}))",
                           prelude_py);
    json_t *j = call_json(u, sid, code, fa);
    CHECK_STR(itest_json_str(j, "read"), "top secret");
    json_decref(j);
    free(code);

    char *path = itest_fmt("/v1/files/%s", a);
    itest_request(srv, "DELETE", path, srv->admin_key, u, NULL, NULL, 0, NULL,
                  &r);
    CHECK_STATUS(&r, 204);
    itest_resp_release(&r);
    free(path);
    /* Between calls, through the descriptor the code kept: nothing. */
    char *seen = repr_now(u, sid, "peek");
    CHECKF(!strcmp(seen, "nothing"), "the kept descriptor read: %s", seen);
    free(seen);

    j = call_json(u, sid,
                  "h.seek(0)\n"
                  "print(json.dumps({'fd': h.read().decode(),\n"
                  "  'path': os.path.exists(p),\n"
                  "  'data': os.listdir('/mnt/data')}))",
                  NULL);
    CHECK_STR(itest_json_str(j, "fd"), "");
    CHECKF(json_is_false(json_object_get(j, "path")),
           "the deleted file is still at its path");
    CHECK_LIST(j, "data", "");
    json_decref(j);
    /* Naming it again is 404, as for any deleted file. */
    call(u, sid, "print('ran')", fa, &r);
    CHECK_ERROR(&r, 404, "not_found");
    itest_resp_release(&r);
    delete_session(u, sid);
    free(fa);
    free(a);
    free(sid);
}

/* The job's own files (code.py, variables.json, up to the request's
 * 8 MiB) are the call's too: a descriptor kept on them reads nothing at
 * the next call, so no call can pin them in the service's memory. */
static void job_files_not_kept(void)
{
    const char *u = "in4";
    struct itest_resp r;
    REQUIRE(srv);
    char *sid = new_session(u);
    REQUIRE(sid);
    json_t *body =
        json_pack("{s:s, s:s, s:{s:s}}", "session_id", sid, "code",
                  "import json\nhv = open('/mnt/job/variables.json')\n"
                  "hc = open('/mnt/job/code.py')\nprint(len(big))",
                  "variables", "big", "0123456789abcdef0123456789abcdef");
    itest_exec(srv, srv->admin_key, u, body, CALL_MS, &r);
    CHECK_STATUS(&r, 200);
    CHECK_STR(itest_exec_stdout(&r), "32\n");
    itest_resp_release(&r);
    json_t *j = call_json(u, sid,
                          "hv.seek(0)\nhc.seek(0)\n"
                          "print(json.dumps({'v': len(hv.read()),\n"
                          "  'c': len(hc.read())}))",
                          NULL);
    CHECK_INT(json_integer_value(json_object_get(j, "v")), 0);
    CHECK_INT(json_integer_value(json_object_get(j, "c")), 0);
    json_decref(j);
    delete_session(u, sid);
    free(sid);
}

/* 128 MiB policy: 4 calls with 40 MiB each, each sees one input in the
 * stage; all four in one call are 413; the session goes on. */
static void staged_inputs_bounded(void)
{
    const char *u = "in3";
    struct itest_resp r;
    size_t len = 40 * MIB;
    char *data = malloc(len);
    char *ids[4];
    REQUIRE(srv && data);
    for (int i = 0; i < 4; i++) {
        char name[16];
        memset(data, 'a' + i, len);
        snprintf(name, sizeof(name), "big%d.txt", i);
        ids[i] = upload(u, name, data, len);
        REQUIRE(ids[i] && ids[i][0]);
    }
    free(data);
    char *sid = new_session(u);
    REQUIRE(sid);
    for (int i = 0; i < 4; i++) {
        char *files = itest_fmt("[\"%s\"]", ids[i]);
        json_t *j =
            call_json(u, sid,
                      "import os, json\nst = os.statvfs('/mnt/data')\n"
                      "print(json.dumps({'used': (st.f_blocks - st.f_bfree) * "
                      "st.f_frsize,\n  'n': len(os.listdir('/mnt/data'))}))",
                      files);
        long long used = json_integer_value(json_object_get(j, "used"));
        long long n = json_integer_value(json_object_get(j, "n"));
        CHECKF(n == 1 && used >= 40LL * MIB && used < 48LL * MIB,
               "call %d: %lld inputs staged, %lld bytes in the stage "
               "(want 1, 40-48 MiB)",
               i + 1, n, used);
        json_decref(j);
        free(files);
    }
    char *all = itest_fmt("[\"%s\", \"%s\", \"%s\", \"%s\"]", ids[0], ids[1],
                          ids[2], ids[3]);
    call(u, sid, "print('ran')", all, &r);
    CHECK_ERROR(&r, 413, "payload_too_large");
    const char *msg = itest_json_str(r.json, "error.message");
    CHECKF(msg && strstr(msg, "memory") && strstr(msg, "134217728"),
           "the refusal does not name the limit: %s", r.body);
    itest_resp_release(&r);
    call_out(u, sid, "print('still here')", "still here\n");
    delete_session(u, sid);
    free(all);
    for (int i = 0; i < 4; i++)
        free(ids[i]);
    free(sid);
}

/* ---- item 3: the variables listing ------------------------------------- */

/* GET .../variables (its response in r). */
static void get_variables(const char *user, const char *sid,
                          struct itest_resp *r)
{
    char *path = itest_fmt("/v1/sessions/%s/variables", sid);
    itest_request(srv, "GET", path, srv->admin_key, user, NULL, NULL, 0, NULL,
                  r);
    free(path);
}

/* UTF-8 characters of s. */
static size_t chars(const char *s)
{
    size_t n = 0;
    for (; s && *s; s++)
        n += ((unsigned char)*s & 0xc0) != 0x80;
    return n;
}

/* The listing's shape, whatever the session wrote: exactly variables and
 * truncated; each entry exactly name, type, repr, strings, names made of
 * [A-Za-z0-9_] (these tests use ASCII), sorted; caps. */
static void check_listing_shape(const json_t *doc)
{
    json_t *vars = json_object_get(doc, "variables"), *e;
    size_t i;
    const char *prev = "";
    CHECKF(json_object_size(doc) == 2 && json_is_array(vars) &&
               json_is_boolean(json_object_get(doc, "truncated")),
           "not the listing's shape (%zu keys)", json_object_size(doc));
    CHECKF(json_array_size(vars) <= 1000, "%zu entries", json_array_size(vars));
    json_array_foreach(vars, i, e)
    {
        const char *n = itest_json_str(e, "name");
        const char *t = itest_json_str(e, "type");
        const char *rp = itest_json_str(e, "repr");
        bool ok = json_object_size(e) == 3 && n && t && rp && n[0] &&
                  strlen(n) <= 256 && strcmp(n, prev) > 0 &&
                  strspn(n, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTU"
                            "VWXYZ0123456789_") == strlen(n) &&
                  chars(t) <= 256 && chars(rp) <= 500;
        CHECKF(ok,
               "entry %zu is not a listing entry within its caps "
               "(name %.40s, type %zu, repr %zu characters)",
               i, n ? n : "(none)", chars(t), chars(rp));
        if (!ok)
            break;
        prev = n;
    }
}

/* The entry named name in a listing, or NULL. */
static json_t *entry_named(const json_t *doc, const char *name)
{
    json_t *e;
    size_t i;
    json_array_foreach(json_object_get(doc, "variables"), i, e)
    {
        const char *n = itest_json_str(e, "name");
        if (n && !strcmp(n, name))
            return e;
    }
    return NULL;
}

/* A repr that is a str subclass whose __len__ says 1 is still cut. */
static void repr_subclass_is_cut(void)
{
    const char *u = "var1";
    struct itest_resp r;
    REQUIRE(srv);
    char *sid = new_session(u);
    REQUIRE(sid);
    call_out(u, sid,
             "class S(str):\n    def __len__(self):\n        return 1\n"
             "class Big:\n    def __repr__(self):\n"
             "        return S('x' * 200000)\n"
             "big = Big()\nsmall = 3\n",
             "");
    get_variables(u, sid, &r);
    CHECK_STATUS(&r, 200);
    check_listing_shape(r.json);
    const char *rp = itest_json_str(entry_named(r.json, "big"), "repr");
    CHECKF(rp && chars(rp) == 500 && !strcmp(rp + 497, "..."),
           "big's repr has %zu characters (want 500, ending in ...)",
           chars(rp));
    CHECK_STR(itest_json_str(entry_named(r.json, "small"), "repr"), "3");
    CHECKF(r.len < 64 * 1024, "the listing is %zu bytes", r.len);
    itest_resp_release(&r);
    delete_session(u, sid);
    free(sid);
}

/* The code replaces the prelude's writer of the listing (it runs in the
 * same interpreter) with one that writes doc_py, a Python expression. */
static void forge_listing(const char *user, const char *sid, const char *doc_py)
{
    char *code = itest_fmt(
        "import sys, json, os\n"
        "def _forged(ns):\n"
        "    d = '/mnt/output/.interpd'\n"
        "    os.makedirs(d, exist_ok=True)\n"
        "    with open(d + '/variables.json', 'w') as f:\n"
        "        f.write(json.dumps(%s))\n"
        "sys.modules['_interpd_prelude']._write_variables = _forged\n",
        doc_py);
    call_out(user, sid, code, "");
    free(code);
}

static void forged_listing_is_checked(void)
{
    const char *u = "var2";
    struct itest_resp r;
    REQUIRE(srv);
    char *sid = new_session(u);
    REQUIRE(sid);
    /* Top level other than the listing's: refused, nothing repeated. */
    forge_listing(u, sid,
                  "{'variables': [], 'truncated': False, "
                  "'admin': '<script>x</script>'}");
    get_variables(u, sid, &r);
    CHECK_ERROR(&r, 500, "internal_error");
    CHECKF(!strstr(r.body, "script"), "repeated: %s", r.body);
    itest_resp_release(&r);
    forge_listing(u, sid, "{'variables': {'a': 1}, 'truncated': False}");
    get_variables(u, sid, &r);
    CHECK_ERROR(&r, 500, "internal_error");
    itest_resp_release(&r);
    forge_listing(u, sid, "{'variables': [], 'truncated': 'no'}");
    get_variables(u, sid, &r);
    CHECK_ERROR(&r, 500, "internal_error");
    itest_resp_release(&r);

    /* Entries: only the good ones, capped, truncated set by the service. */
    forge_listing(
        u, sid,
        "{'variables': [\n"
        "  {'name': 'a_ok', 'type': 'int', 'repr': '1'},\n"
        "  {'name': 'b_extra', 'type': 'int', 'repr': '1', "
        "'html': '<b>x</b>'},\n"
        "  {'name': 7, 'type': 'int', 'repr': '7'},\n"
        "  {'name': '<b>bold</b>', 'type': 'int', 'repr': '1'},\n"
        "  {'name': 'c_nested', 'type': 'int', 'repr': {'a': '<i>'}},\n"
        "  {'name': 'd_big', 'type': 'T' * 100000, 'repr': 'r' * 200000},\n"
        "  {'name': 'e' * 300, 'type': 'int', 'repr': '1'},\n"
        "  {'name': 'f_type', 'type': ['list'], 'repr': '1'},\n"
        "  {'name': 'a_ok', 'type': 'int', 'repr': 'again'},\n"
        "  'just a string', None, 12,\n"
        "  {'name': 'g_ok', 'type': 'str', 'repr': \"'<u>'\"}]\n"
        "  + [{'name': 'v%05d' % i, 'type': 'int', 'repr': str(i)}\n"
        "     for i in range(4000)],\n"
        " 'truncated': False}");
    get_variables(u, sid, &r);
    CHECK_STATUS(&r, 200);
    check_listing_shape(r.json);
    CHECKF(json_is_true(itest_json_get(r.json, "truncated")),
           "truncated is not true");
    CHECK_INT(json_array_size(itest_json_get(r.json, "variables")), 1000);
    CHECK_STR(itest_json_str(entry_named(r.json, "a_ok"), "repr"), "1");
    CHECK_STR(itest_json_str(entry_named(r.json, "g_ok"), "repr"), "'<u>'");
    json_t *big = entry_named(r.json, "d_big");
    CHECKF(big && chars(itest_json_str(big, "type")) == 256 &&
               chars(itest_json_str(big, "repr")) == 500,
           "d_big not capped");
    CHECKF(!entry_named(r.json, "b_extra") &&
               !entry_named(r.json, "c_nested") &&
               !entry_named(r.json, "f_type") && !strstr(r.body, "<b>") &&
               !strstr(r.body, "<i>") && !strstr(r.body, "html") &&
               !strstr(r.body, "again"),
           "a bad entry came back: %.300s", r.body);
    itest_resp_release(&r);
    call_out(u, sid, "print('after')", "after\n");
    delete_session(u, sid);
    free(sid);
}

/* ---- item 12: processes forked inside a session ------------------------ */

/* A fork whose child body is child_py (one indented line at least); the
 * parent waits for it and prints its wait status. */
static void fork_case(const char *u, const char *sid, const char *child_py,
                      int want_status)
{
    char *code = itest_fmt("pid = os.fork()\n"
                           "if pid == 0:\n%s"
                           "else:\n"
                           "    _, st = os.waitpid(pid, 0)\n"
                           "    print(st, os.getpid() == PID)\n",
                           child_py);
    char *want = itest_fmt("%d True\n", want_status);
    call_out(u, sid, code, want);
    free(code);
    free(want);
}

/* Call n of a session whose interpreter is PID: answered by it, alone. */
static void still_itself(const char *u, const char *sid, int n)
{
    const char *code = "n += 1\nprint(n, os.getpid() == PID)";
    char *want = itest_fmt("%d True\n", n);
    call_out(u, sid, code, want);
    free(want);
}

/* A child forked in a cell ends with it whichever way the cell ends (it
 * falls off the end, raises, sys.exit, os._exit; or it outlives the cell
 * and ends in a later one); the session answers every call itself. */
static void fork_in_cells(void)
{
    const char *u = "fork1";
    int n = 0;
    REQUIRE(srv);
    char *sid = new_session(u);
    REQUIRE(sid);
    call_out(u, sid, "import os, sys\nPID = os.getpid()\nn = 0\n", "");
    fork_case(u, sid, "    x = 'falls off the end'\n", 0);
    still_itself(u, sid, ++n);
    fork_case(u, sid, "    def f():\n        return 1\n    f()\n", 0);
    still_itself(u, sid, ++n);
    fork_case(u, sid, "    raise ValueError('in the child')\n", 1 << 8);
    still_itself(u, sid, ++n);
    fork_case(u, sid, "    sys.exit(5)\n", 5 << 8);
    still_itself(u, sid, ++n);
    fork_case(u, sid, "    os._exit(6)\n", 6 << 8);
    still_itself(u, sid, ++n);
    fork_case(u, sid, "    x = 1\n    x\n", 0); /* a bare last expression */
    still_itself(u, sid, ++n);

    /* A child that outlives its cell: it ends that cell during the next
     * call, which waits for it. */
    call_out(u, sid,
             "r, w = os.pipe()\nkid = os.fork()\n"
             "if kid == 0:\n    os.close(w)\n    os.read(r, 1)\n"
             "    late = 'the earlier cell ends now'\n"
             "else:\n    os.close(r)\n    print('left')\n",
             "left\n");
    call_out(u, sid,
             "os.write(w, b'g')\n_, st = os.waitpid(kid, 0)\n"
             "print(st, os.getpid() == PID)\n",
             "0 True\n");
    still_itself(u, sid, ++n);
    still_itself(u, sid, ++n);
    delete_session(u, sid);
    free(sid);
}

/* The session's interpreter itself exits while a child it forked lives:
 * the call ends the session, cleanly, and the child never answers. */
static void fork_then_parent_exits(void)
{
    const char *u = "fork2";
    struct itest_resp r;
    REQUIRE(srv);
    char *sid = new_session(u);
    REQUIRE(sid);
    call_out(u, sid, "x = 1", "");
    call(u, sid,
         "import os\nr, w = os.pipe()\n"
         "if os.fork() == 0:\n    os.read(r, 1)\nelse:\n    os._exit(3)\n",
         NULL, &r);
    CHECK_STATUS(&r, 200);
    CHECKF(json_is_true(itest_json_get(r.json, "session_ended")) &&
               json_integer_value(itest_json_get(r.json, "exit_code")) == 3,
           "want the session ended with exit code 3: %s", r.body);
    itest_resp_release(&r);
    call(u, sid, "print('again')", NULL, &r);
    CHECK_ERROR(&r, 410, "session_expired");
    itest_resp_release(&r);
    free(sid);
}

/* A __repr__ that forks during the variables call: the listing is the
 * session's, and the child never answers a later call. */
static void fork_in_variables_repr(void)
{
    const char *u = "fork3";
    struct itest_resp r;
    REQUIRE(srv);
    char *sid = new_session(u);
    REQUIRE(sid);
    call_out(u, sid,
             "import os\nPID = os.getpid()\nn = 0\n"
             "class Forky:\n    def __repr__(self):\n"
             "        return 'child' if os.fork() == 0 else 'parent'\n"
             "forky = Forky()\n",
             "");
    for (int round = 0; round < 3; round++) {
        get_variables(u, sid, &r);
        CHECK_STATUS(&r, 200);
        CHECK_STR(itest_json_str(entry_named(r.json, "forky"), "repr"),
                  "parent");
        itest_resp_release(&r);
    }
    for (int i = 1; i <= 4; i++)
        still_itself(u, sid, i);
    delete_session(u, sid);
    free(sid);
}

/* A signal handler that forks (fork_py), run while the session's
 * interpreter is between two calls (back in its loop): the child never
 * takes or answers a call.  A thread of the session's sends the signal
 * once a call is over (result.json written, IN_CELL false), again until
 * the handler ran outside a cell (FORKED); cells print only in the
 * session's own process, so a copy that starts in the prelude's part of
 * a call is silent, and a call taken by a copy answers nothing. */
static void fork_in_handler(const char *u, const char *fork_py)
{
    struct itest_resp r;
    int n = 0;
    bool forked = false;
    REQUIRE(srv);
    char *sid = new_session(u);
    REQUIRE(sid);
    char *code =
        itest_fmt("import ctypes, os, signal, threading, time\n"
                  "PID = os.getpid()\nn = 0\nIN_CELL = False\nFORKED = 0\n"
                  "def _h(*a):\n"
                  "    global FORKED\n"
                  "    if IN_CELL:\n        return\n"
                  "    FORKED += 1\n"
                  "    %s\n"
                  "signal.signal(signal.SIGUSR1, _h)\n"
                  "def _poke():\n"
                  "    p = '/mnt/output/.interpd/result.json'\n"
                  "    for _ in range(40000):\n"
                  "        if FORKED:\n            break\n"
                  "        if not IN_CELL and os.path.exists(p):\n"
                  "            os.kill(PID, signal.SIGUSR1)\n"
                  "        time.sleep(0.0005)\n"
                  "threading.Thread(target=_poke, daemon=True).start()\n",
                  fork_py);
    call_out(u, sid, code, "");
    for (int i = 0; i < 200 && !forked; i++) {
        call(u, sid,
             "IN_CELL = True\nn += 1\nif os.getpid() == PID:\n"
             "    print(n, FORKED > 0)\nIN_CELL = False\n",
             NULL, &r);
        char *yes = itest_fmt("%d True\n", ++n);
        char *no = itest_fmt("%d False\n", n);
        const char *out = itest_exec_stdout(&r);
        forked = !strcmp(out, yes);
        CHECKF(r.status == 200 && (forked || !strcmp(out, no)),
               "call %d: stdout \"%s\" (%s)", n, out, r.body);
        free(yes);
        free(no);
        itest_resp_release(&r);
        if (test__failed_checks)
            break;
    }
    CHECKF(forked, "the handler never ran between calls");
    for (int i = 0; i < 6; i++) {
        char *want = itest_fmt("%d True\n", ++n);
        call_out(u, sid,
                 "IN_CELL = True\nn += 1\nif os.getpid() == PID:\n"
                 "    print(n, True)\nIN_CELL = False\n",
                 want);
        free(want);
    }
    delete_session(u, sid);
    free(code);
    free(sid);
}

static void fork_in_signal_handler(void)
{
    fork_in_handler("fork4", "os.fork()");
}

/* The same with libc's fork (no os.fork hook runs in the child): the
 * session's loop itself must stop the copy. */
static void libc_fork_in_signal_handler(void)
{
    fork_in_handler("fork5", "ctypes.PyDLL(None).fork()");
}

/* A fork in the prelude's own part of a call, after the cell: the code's
 * sys.stdout forks in the flush that ends the call.  The copy goes on
 * from there towards the answer; it must never give it. */
static void fork_in_flush(const char *u, const char *fork_py)
{
    REQUIRE(srv);
    char *sid = new_session(u);
    REQUIRE(sid);
    char *code = itest_fmt("import ctypes, os, sys\nPID = os.getpid()\nn = 0\n"
                           "class Forky:\n"
                           "    def __init__(self, s):\n"
                           "        self.s, self.armed = s, True\n"
                           "    def write(self, t):\n"
                           "        return self.s.write(t)\n"
                           "    def flush(self):\n"
                           "        if self.armed and os.getpid() == PID:\n"
                           "            self.armed = False\n"
                           "            %s\n"
                           "        return self.s.flush()\n"
                           "sys.stdout = Forky(sys.stdout)\n",
                           fork_py);
    call_out(u, sid, code, "");
    for (int i = 1; i <= 4; i++)
        still_itself(u, sid, i);
    delete_session(u, sid);
    free(code);
    free(sid);
}

static void fork_in_flush_os(void)
{
    fork_in_flush("fork6", "os.fork()");
}

static void fork_in_flush_libc(void)
{
    fork_in_flush("fork7", "ctypes.PyDLL(None).fork()");
}

TEST_MAIN(T(start_server), T(inputs_last_one_call), T(deleted_input_unreadable),
          T(job_files_not_kept), T(staged_inputs_bounded),
          T(repr_subclass_is_cut), T(forged_listing_is_checked),
          T(fork_in_cells), T(fork_then_parent_exits),
          T(fork_in_variables_repr), T(fork_in_signal_handler),
          T(libc_fork_in_signal_handler), T(fork_in_flush_os),
          T(fork_in_flush_libc), T(stop_server))
