/*
 * test_data_stack.c - the data stack a chat bot's code imports (issue 26,
 * item 1; scripts/install-deps.sh and docker/Dockerfile install it from
 * Debian): each module imports and works in a sandboxed run with no
 * package index reachable, GET /v1/packages lists its distribution as
 * installed, and POST /v1/packages answers already_installed for it (the
 * allowlist and the import-name map agree with what is there), so nothing
 * tries pip.
 */
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
    {"cv2", NULL /* Debian's build has no dist-info: not listed */,
     "cv2.cvtColor(numpy.zeros((4, 4, 3), 'uint8'), cv2.COLOR_BGR2GRAY)"},
    {"xarray", "xarray", "xarray.DataArray([1, 2]).sum()"},
    {"pypdf", "pypdf", "pypdf.PdfWriter()"},
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

/* GET /v1/packages lists each distribution as installed. */
static void listed_as_installed(void)
{
    struct itest_resp r;
    itest_request(srv, "GET", "/v1/packages", srv->admin_key, "u1", NULL, NULL,
                  0, NULL, &r);
    CHECK_STATUS(&r, 200);
    json_t *inst = itest_json_get(r.json, "installed");
    for (size_t i = 0; i < N_STACK; i++) {
        if (!stack[i].dist)
            continue;
        bool found = false;
        size_t k;
        json_t *e;
        json_array_foreach(inst, k, e)
        {
            const char *name = json_string_value(json_object_get(e, "name"));
            found = found || (name && !strcmp(name, stack[i].dist));
        }
        CHECKF(found, "%s is not listed as installed", stack[i].dist);
    }
    itest_resp_release(&r);
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
    CHECK_INT(json_array_size(itest_json_get(r.json, "results")), N_STACK - 1);
    itest_resp_release(&r);
}

static void stop(void)
{
    itest_stop(srv);
}

TEST_MAIN(T(start), T(every_module_imports_and_works), T(listed_as_installed),
          T(requested_already_installed), T(stop))
