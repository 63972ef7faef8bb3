/*
 * test_data_stack.c - the data stack a chat bot's code imports (issue 26,
 * item 1; scripts/install-deps.sh and docker/Dockerfile install it from
 * Debian): each module imports and works in a sandboxed run with no
 * package index reachable, GET /v1/packages lists its distribution as
 * installed, and POST /v1/packages answers already_installed for it (the
 * allowlist and the import-name map agree with what is there), so nothing
 * tries pip.
 *
 * A distribution Debian installs without metadata (python3-opencv: cv2
 * and no .dist-info) counts as installed all the same, with its module's
 * version, in the listing and for the "already installed?" decision,
 * before the venv exists and after (venv_check.py --provided); and so
 * does every allowlisted distribution whose import name imports under
 * /usr/bin/python3 -I, checked for the whole allowlist.  A placeholder
 * version in the metadata (mpmath's 0.0.0) is listed as its module's.
 */
#include <stdio.h>
#include <string.h>

#include "harness.h"

/* The module, the distribution (allowlist name) that provides it, and a
 * line that uses it. */
static const struct {
    const char *module, *dist, *use;
} stack[] = {
    {"seaborn", "seaborn", "seaborn.barplot(x=[1, 2], y=[3, 4])"},
    {"sklearn", "scikit-learn",
     "sklearn.linear_model.LinearRegression().fit([[0], [1]], [0, 1])"},
    {"statsmodels", "statsmodels",
     "statsmodels.api.OLS([1.0, 2.0, 3.1], [[1, 0], [1, 1], [1, 2]]).fit()"},
    {"plotly", "plotly", "plotly.graph_objects.Figure().to_json()"},
    {"networkx", "networkx", "networkx.path_graph(4).number_of_edges()"},
    {"xlsxwriter", "xlsxwriter", "xlsxwriter.Workbook('/tmp/a.xlsx').close()"},
    {"tabulate", "tabulate", "tabulate.tabulate([[1, 2]])"},
    {"bs4", "beautifulsoup4", "bs4.BeautifulSoup('<p>x</p>', 'html.parser')"},
    {"docx", "python-docx", "docx.Document().add_paragraph('x')"},
    {"reportlab", "reportlab", "reportlab.pdfgen.canvas.Canvas('/tmp/a.pdf')"},
    {"skimage", "scikit-image", "skimage.filters.sobel(numpy.zeros((4, 4)))"},
    {"cv2", "opencv-python-headless" /* Debian's build: no dist-info */,
     "cv2.cvtColor(numpy.zeros((4, 4, 3), 'uint8'), cv2.COLOR_BGR2GRAY)"},
    {"xarray", "xarray", "xarray.DataArray([1, 2]).sum()"},
    {"pypdf", "pypdf", "pypdf.PdfWriter()"},
    {"sympy", "sympy", "sympy.solve(sympy.Symbol('x') ** 2 - 4)"},
};

#define N_STACK (sizeof(stack) / sizeof(stack[0]))

static struct itest_server *srv;

static void start(void)
{
    /* No package index: an install attempt would fail. */
    const char *args[] = {"--pip-index-url", "http://127.0.0.1:9/simple/",
                          NULL};
    struct itest_opts o = {.args = args};
    srv = itest_start(&o);
    REQUIRE(srv);
}

/* One run imports and uses every module (a fresh user's first cell). */
static void every_module_imports_and_works(void)
{
    char code[8192];
    size_t n = 0;
    n += (size_t)snprintf(code + n, sizeof(code) - n,
                          "import numpy\nimport matplotlib\n"
                          "matplotlib.use('Agg')\n"
                          "import sklearn.linear_model, statsmodels.api, "
                          "plotly.graph_objects, reportlab.pdfgen.canvas, "
                          "skimage.filters\n");
    for (size_t i = 0; i < N_STACK; i++)
        n += (size_t)snprintf(code + n, sizeof(code) - n,
                              "import %s\n%s\nprint('ok %s')\n",
                              stack[i].module, stack[i].use, stack[i].module);
    REQUIRE(n < sizeof(code));
    struct itest_resp r;
    long st = itest_exec(srv, srv->admin_key, "u1",
                         json_pack("{s:s, s:i}", "code", code, "timeout", 120),
                         150000, &r);
    CHECK_INT(st, 200);
    CHECKF(json_is_null(itest_json_get(r.json, "error")), "error: %s",
           itest_exec_stderr(&r));
    const char *out = itest_exec_stdout(&r);
    for (size_t i = 0; i < N_STACK; i++) {
        char want[64];
        snprintf(want, sizeof(want), "ok %s\n", stack[i].module);
        CHECKF(strstr(out, want) != NULL, "%s did not work: %s",
               stack[i].module, itest_exec_stderr(&r));
    }
    itest_resp_release(&r);
}

/* The version GET /v1/packages lists for dist in r, or NULL. */
static const char *listed_version(const struct itest_resp *r, const char *dist)
{
    size_t k;
    json_t *e;
    json_array_foreach(itest_json_get(r->json, "installed"), k, e)
    {
        const char *name = json_string_value(json_object_get(e, "name"));
        if (name && !strcmp(name, dist))
            return json_string_value(json_object_get(e, "version"));
    }
    return NULL;
}

/* What /usr/bin/python3 -I prints for code (stdout, trailing newline
 * dropped), as the sandbox's interpreter sees the system.  Free it. */
static char *system_python(const char *code)
{
    char *cmd = itest_fmt("/usr/bin/python3 -I -c \"%s\"", code);
    FILE *p = popen(cmd, "r");
    char *out = itest_fmt("%s", "");
    char line[512];
    while (p && fgets(line, sizeof(line), p)) {
        char *more = itest_fmt("%s%s", out, line);
        free(out);
        out = more;
    }
    CHECKF(p && pclose(p) == 0, "%s failed", cmd);
    free(cmd);
    size_t n = strlen(out);
    if (n && out[n - 1] == '\n')
        out[n - 1] = '\0';
    return out;
}

/* GET /v1/packages lists each distribution as installed; OpenCV with
 * cv2.__version__ as the system's interpreter says it. */
static void listed_as_installed(void)
{
    struct itest_resp r;
    itest_request(srv, "GET", "/v1/packages", srv->admin_key, "u1", NULL, NULL,
                  0, NULL, &r);
    CHECK_STATUS(&r, 200);
    for (size_t i = 0; i < N_STACK; i++)
        CHECKF(listed_version(&r, stack[i].dist),
               "%s is not listed as installed", stack[i].dist);
    char *cv = system_python("import cv2; print(cv2.__version__)");
    const char *listed = listed_version(&r, "opencv-python-headless");
    CHECKF(listed && !strcmp(listed, cv),
           "opencv-python-headless listed as %s, cv2.__version__ is %s",
           listed ? listed : "(nothing)", cv);
    free(cv);
    /* mpmath's egg-info says 0.0.0, a placeholder: its module's version. */
    char *mp = system_python("import mpmath; print(mpmath.__version__)");
    listed = listed_version(&r, "mpmath");
    CHECKF(listed && !strcmp(listed, mp),
           "mpmath listed as %s, its module's "
           "version is %s",
           listed ? listed : "(nothing)", mp);
    free(mp);
    itest_resp_release(&r);
}

/* Every allowlisted distribution whose import name (the import map's,
 * else its own name with '_' for '-') imports under /usr/bin/python3 -I
 * is listed as installed: the class of OpenCV's gap, for the whole
 * allowlist. */
static void every_importable_allowlisted_is_listed(void)
{
    char *code =
        itest_fmt("import importlib, re\n"
                  "norm = lambda n: re.sub(r'[-_.]+', '-', n).lower()\n"
                  "def names(path):\n"
                  "    for line in open(path):\n"
                  "        line = line.split('#')[0].split()\n"
                  "        if line: yield line\n"
                  "mods = {}\n"
                  "for imp, dist in names('%s/venv/data/import-names.txt'):\n"
                  "    mods.setdefault(norm(dist), []).append(imp)\n"
                  "for (dist,) in names('%s/venv/data/allowlist.txt'):\n"
                  "    dist = norm(dist)\n"
                  "    for m in mods.get(dist, [dist.replace('-', '_')]):\n"
                  "        try:\n"
                  "            importlib.import_module(m)\n"
                  "        except Exception:\n"
                  "            continue\n"
                  "        print(dist)\n"
                  "        break\n",
                  ITEST_SOURCE_DIR, ITEST_SOURCE_DIR);
    /* The code goes to the shell between double quotes: none inside. */
    REQUIRE(!strchr(code, '"') && !strchr(code, '$') && !strchr(code, '`'));
    char *dists = system_python(code);
    struct itest_resp r;
    itest_request(srv, "GET", "/v1/packages", srv->admin_key, "u1", NULL, NULL,
                  0, NULL, &r);
    CHECK_STATUS(&r, 200);
    size_t n = 0;
    for (char *d = dists, *nl; *d; d = nl ? nl + 1 : d + strlen(d)) {
        nl = strchr(d, '\n');
        if (nl)
            *nl = '\0';
        CHECKF(listed_version(&r, d),
               "%s is allowlisted and imports under /usr/bin/python3 -I, but "
               "GET /v1/packages does not list it",
               d);
        n++;
    }
    /* The data stack of install-deps.sh: a dozen and more at least. */
    CHECKF(n >= N_STACK, "only %zu allowlisted distributions import", n);
    itest_resp_release(&r);
    free(dists);
    free(code);
}

/* Asking for them installs nothing: each is already_installed (the
 * allowlist names them, and what is there meets the request). */
static void requested_already_installed(void)
{
    json_t *pk = json_array();
    for (size_t i = 0; i < N_STACK; i++)
        if (stack[i].dist)
            json_array_append_new(pk, json_string(stack[i].dist));
    json_t *body = json_pack("{s:o}", "packages", pk);
    char *text = json_dumps(body, 0);
    json_decref(body);
    struct itest_resp r;
    itest_request(srv, "POST", "/v1/packages", srv->admin_key, "u1",
                  "application/json", text, strlen(text), NULL, &r);
    free(text);
    CHECK_STATUS(&r, 200);
    size_t k;
    json_t *e;
    json_array_foreach(itest_json_get(r.json, "results"), k, e)
    {
        const char *st = json_string_value(json_object_get(e, "status"));
        CHECKF(st && !strcmp(st, "already_installed"), "%s: %s (%s)",
               json_string_value(json_object_get(e, "package")), st ? st : "?",
               json_string_value(json_object_get(e, "message")));
    }
    CHECK_INT(json_array_size(itest_json_get(r.json, "results")), N_STACK);
    itest_resp_release(&r);
}

/* "packages" of an execution: OpenCV is there already, no pip (there is
 * no index: pip would fail). */
static void execution_packages_already_installed(void)
{
    struct itest_resp r;
    long st = itest_exec(srv, srv->admin_key, "u1",
                         json_pack("{s:s, s:[s]}", "code",
                                   "import cv2\nprint(cv2.__version__)",
                                   "packages", "opencv-python-headless"),
                         150000, &r);
    CHECK_INT(st, 200);
    CHECKF(json_is_null(itest_json_get(r.json, "error")), "%s", r.body);
    json_t *p = json_array_get(itest_json_get(r.json, "installed_packages"), 0);
    CHECK_STR(json_string_value(json_object_get(p, "status")),
              "already_installed");
    char *cv =
        itest_fmt("%s\n", json_string_value(json_object_get(p, "version")));
    CHECK_STR(itest_exec_stdout(&r), cv);
    free(cv);
    itest_resp_release(&r);
}

/* With another package that needs pip, OpenCV is still answered from what
 * is installed and never handed to pip (which, with no index, fails the
 * other one only).  That install made the venv: its listing has OpenCV
 * too. */
static void with_another_only_that_goes_to_pip(void)
{
    struct itest_resp r;
    const char *missing = NULL;
    itest_request(srv, "GET", "/v1/packages", srv->admin_key, "u1", NULL, NULL,
                  0, NULL, &r);
    CHECK_STATUS(&r, 200);
    size_t k;
    json_t *e;
    json_array_foreach(itest_json_get(r.json, "allowed"), k, e)
    {
        if (!missing && !listed_version(&r, json_string_value(e)))
            missing = json_string_value(e);
    }
    REQUIRE(missing); /* an allowlisted distribution that is not there */
    json_t *body =
        json_pack("{s:[s, s]}", "packages", "opencv-python-headless", missing);
    itest_resp_release(&r);
    char *text = json_dumps(body, 0);
    json_decref(body);
    itest_request(srv, "POST", "/v1/packages", srv->admin_key, "u1",
                  "application/json", text, strlen(text), NULL, &r);
    free(text);
    CHECK_STATUS(&r, 200);
    json_t *res = itest_json_get(r.json, "results");
    CHECK_STR(itest_json_str(json_array_get(res, 0), "status"),
              "already_installed");
    CHECK_STR(itest_json_str(json_array_get(res, 1), "status"), "failed");
    itest_resp_release(&r);

    itest_request(srv, "GET", "/v1/packages", srv->admin_key, "u1", NULL, NULL,
                  0, NULL, &r);
    CHECK_STATUS(&r, 200);
    CHECKF(itest_json_str(r.json, "venv.created_at"), "no venv: %s", r.body);
    itest_resp_release(&r);
    listed_as_installed();
}

static void stop(void)
{
    itest_stop(srv);
}

TEST_MAIN(T(start), T(every_module_imports_and_works), T(listed_as_installed),
          T(every_importable_allowlisted_is_listed),
          T(requested_already_installed),
          T(execution_packages_already_installed),
          T(with_another_only_that_goes_to_pip), T(stop))
