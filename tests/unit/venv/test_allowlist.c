/*
 * test_allowlist.c - loading the allow list, deps list and import map;
 * lookups by any spelling; load errors naming the file and line; the
 * default data files in venv/data.
 */
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "service/common/buf.h"
#include "venv/allowlist.h"
#include "venv/requirement.h"
#include "test.h"

static char tmpdir[64];
static int tmp_seq;

/* Write len bytes to a new file in the test's directory; path is out. */
static void write_file(const void *data, size_t len, char path[128])
{
    snprintf(path, 128, "%s/f%d", tmpdir, tmp_seq++);
    FILE *f = fopen(path, "wb");
    if (!f) {
        perror(path);
        abort();
    }
    if (len && fwrite(data, 1, len, f) != len)
        abort();
    fclose(f);
}

static void write_str(const char *s, char path[128])
{
    write_file(s, strlen(s), path);
}

/* Load from strings (deps and imports may be NULL); returns rc, leaves
 * the message in err. */
static enum ipd_err load_strs(const char *allow, const char *deps,
                              const char *imports, struct ipd_allowlist **al,
                              struct ipd_buf *err)
{
    char a[128], d[128], m[128];
    write_str(allow, a);
    if (deps)
        write_str(deps, d);
    if (imports)
        write_str(imports, m);
    return ipd_allowlist_load(a, deps ? d : NULL, imports ? m : NULL, al, err);
}

/* Expect a load failure with rc and a message containing both parts. */
static void load_fails_at(int line, const char *allow, const char *deps,
                          const char *imports, enum ipd_err want,
                          const char *part1, const char *part2)
{
    struct ipd_allowlist *al = (struct ipd_allowlist *)&al;
    struct ipd_buf err;
    ipd_buf_init(&err, 4096);
    enum ipd_err rc = load_strs(allow, deps, imports, &al, &err);
    if (rc != want || !strstr(err.buf, part1) || !strstr(err.buf, part2)) {
        fprintf(stderr, "line %d: rc %d (want %d), message \"%s\"\n", line,
                (int)rc, (int)want, err.buf);
        test__failed_checks++;
    }
    CHECK(al == NULL);
    ipd_allowlist_free(al);
    ipd_buf_release(&err);
}

#define LOAD_FAILS(allow, deps, imports, want, p1, p2)                         \
    load_fails_at(__LINE__, allow, deps, imports, want, p1, p2)

static void names_are_normalized_sorted_unique(void)
{
    struct ipd_allowlist *al = NULL;
    struct ipd_buf err;
    ipd_buf_init(&err, 4096);
    CHECK_INT(load_strs("# the list\n"
                        "numpy\n"
                        "\n"
                        "   \t\n"
                        "  Pandas  # trailing comment\r\n"
                        "Scikit_Learn\n"
                        "numpy\n"
                        "NumPy\n"
                        "zope.interface",
                        NULL, NULL, &al, &err),
              IPD_OK);
    REQUIRE(al);
    CHECK_STR(err.buf, "");
    CHECK_INT(ipd_allowlist_count(al), 4);
    CHECK_STR(ipd_allowlist_name(al, 0), "numpy");
    CHECK_STR(ipd_allowlist_name(al, 1), "pandas");
    CHECK_STR(ipd_allowlist_name(al, 2), "scikit-learn");
    CHECK_STR(ipd_allowlist_name(al, 3), "zope-interface");
    CHECK(ipd_allowlist_name(al, 4) == NULL);
    CHECK(ipd_allowlist_name(al, (size_t)-1) == NULL);

    CHECK(ipd_allowlist_allows(al, "numpy"));
    CHECK(ipd_allowlist_allows(al, "NumPy"));
    CHECK(ipd_allowlist_allows(al, "scikit-learn"));
    CHECK(ipd_allowlist_allows(al, "scikit.learn"));
    CHECK(ipd_allowlist_allows(al, "SCIKIT__LEARN"));
    CHECK(ipd_allowlist_allows(al, "Zope_Interface"));
    CHECK(!ipd_allowlist_allows(al, "scipy"));
    CHECK(!ipd_allowlist_allows(al, "numpy2"));
    CHECK(!ipd_allowlist_allows(al, "nump"));
    CHECK(!ipd_allowlist_allows(al, ""));
    CHECK(!ipd_allowlist_allows(al, NULL));
    CHECK(!ipd_allowlist_allows(al, "-numpy"));
    CHECK(!ipd_allowlist_allows(al, "numpy "));
    CHECK(!ipd_allowlist_allows(al, "numpy==1.0"));
    CHECK(!ipd_allowlist_allows(al, "numpy\n"));
    /* Without a deps list, dependencies are exactly the allowed names. */
    CHECK(ipd_allowlist_allows_dep(al, "Pandas"));
    CHECK(!ipd_allowlist_allows_dep(al, "six"));
    ipd_allowlist_free(al);
    ipd_buf_release(&err);
}

static void deps_only_names(void)
{
    struct ipd_allowlist *al = NULL;
    CHECK_INT(load_strs("pandas\nnumpy\n", "six\nPython_DateUtil\nnumpy\n",
                        NULL, &al, NULL),
              IPD_OK);
    REQUIRE(al);
    CHECK_INT(ipd_allowlist_count(al), 2);
    CHECK(ipd_allowlist_allows(al, "pandas"));
    CHECK(!ipd_allowlist_allows(al, "six"));
    CHECK(!ipd_allowlist_allows(al, "python-dateutil"));
    CHECK(ipd_allowlist_allows_dep(al, "six"));
    CHECK(ipd_allowlist_allows_dep(al, "python.dateutil"));
    CHECK(ipd_allowlist_allows_dep(al, "pandas"));
    CHECK(ipd_allowlist_allows_dep(al, "numpy"));
    CHECK(!ipd_allowlist_allows_dep(al, "evil"));
    CHECK(!ipd_allowlist_allows_dep(al, "six/.."));
    CHECK(!ipd_allowlist_allows_dep(al, NULL));
    ipd_allowlist_free(al);
}

static void empty_lists(void)
{
    struct ipd_allowlist *al = NULL;
    char out[IPD_REQ_NAME_MAX + 1];
    CHECK_INT(load_strs("# nothing allowed\n\n", "", "", &al, NULL), IPD_OK);
    REQUIRE(al);
    CHECK_INT(ipd_allowlist_count(al), 0);
    CHECK(ipd_allowlist_name(al, 0) == NULL);
    CHECK(!ipd_allowlist_allows(al, "numpy"));
    CHECK(!ipd_allowlist_allows_dep(al, "numpy"));
    CHECK_STR(ipd_allowlist_dist_for_import(al, "numpy", out), "numpy");
    ipd_allowlist_free(al);
    ipd_allowlist_free(NULL);
}

static void import_mapping(void)
{
    struct ipd_allowlist *al = NULL;
    char out[IPD_REQ_NAME_MAX + 1];
    CHECK_INT(load_strs("scikit-learn\npillow\npyyaml\n", NULL,
                        "# import  distribution\n"
                        "sklearn scikit-learn\n"
                        "PIL\tPillow\n"
                        "  yaml   PyYAML   # comment\n"
                        "PIL pillow\n" /* the same answer twice is fine */
                        "skimage scikit_image\r\n",
                        &al, NULL),
              IPD_OK);
    REQUIRE(al);
    CHECK_STR(ipd_allowlist_dist_for_import(al, "sklearn", out),
              "scikit-learn");
    CHECK_STR(ipd_allowlist_dist_for_import(al, "sklearn.linear_model", out),
              "scikit-learn");
    CHECK_STR(ipd_allowlist_dist_for_import(al, "PIL", out), "pillow");
    CHECK_STR(ipd_allowlist_dist_for_import(al, "PIL.Image", out), "pillow");
    CHECK_STR(ipd_allowlist_dist_for_import(al, "yaml", out), "pyyaml");
    CHECK_STR(ipd_allowlist_dist_for_import(al, "skimage", out),
              "scikit-image");
    /* Import names are case-sensitive: "pil" is not PIL. */
    CHECK_STR(ipd_allowlist_dist_for_import(al, "pil", out), "pil");
    /* Unmapped names stand for themselves, normalized. */
    CHECK_STR(ipd_allowlist_dist_for_import(al, "numpy", out), "numpy");
    CHECK_STR(ipd_allowlist_dist_for_import(al, "Foo_Bar", out), "foo-bar");
    CHECK_STR(ipd_allowlist_dist_for_import(al, "tqdm.auto", out), "tqdm");
    CHECK(ipd_allowlist_dist_for_import(al, "_ctypes", out) == NULL);
    CHECK(ipd_allowlist_dist_for_import(al, "__future__", out) == NULL);
    CHECK(ipd_allowlist_dist_for_import(al, "9lives", out) == NULL);
    CHECK(ipd_allowlist_dist_for_import(al, "", out) == NULL);
    CHECK(ipd_allowlist_dist_for_import(al, ".relative", out) == NULL);
    CHECK(ipd_allowlist_dist_for_import(al, "a-b", out) == NULL);
    CHECK(ipd_allowlist_dist_for_import(al, "a b", out) == NULL);
    CHECK(ipd_allowlist_dist_for_import(al, "p\xc3\xa4ndas", out) == NULL);
    CHECK(ipd_allowlist_dist_for_import(al, NULL, out) == NULL);
    {
        char longname[IPD_REQ_NAME_MAX + 2];
        memset(longname, 'm', sizeof(longname) - 1);
        longname[IPD_REQ_NAME_MAX + 1] = '\0';
        CHECK(ipd_allowlist_dist_for_import(al, longname, out) == NULL);
        longname[IPD_REQ_NAME_MAX] = '\0';
        CHECK_STR(ipd_allowlist_dist_for_import(al, longname, out), longname);
    }
    /* The caller then checks the answer against the list. */
    CHECK(ipd_allowlist_allows(
        al, ipd_allowlist_dist_for_import(al, "sklearn", out)));
    CHECK(!ipd_allowlist_allows(
        al, ipd_allowlist_dist_for_import(al, "numpy", out)));
    /* The map itself, by import name (venv.c's --provided for the import
     * check): each entry once, the distribution normalized. */
    {
        static const char *const want[][2] = {{"PIL", "pillow"},
                                              {"skimage", "scikit-image"},
                                              {"sklearn", "scikit-learn"},
                                              {"yaml", "pyyaml"}};
        const char *dist = "";
        CHECK_INT(ipd_allowlist_import_count(al), 4);
        for (size_t i = 0; i < 4; i++) {
            CHECK_STR(ipd_allowlist_import_at(al, i, &dist), want[i][0]);
            CHECK_STR(dist, want[i][1]);
        }
        CHECK(ipd_allowlist_import_at(al, 4, &dist) == NULL);
        CHECK(dist == NULL);
    }
    ipd_allowlist_free(al);
}

static void load_errors(void)
{
    LOAD_FAILS("numpy\npandas\nbad name\n", NULL, NULL, IPD_ERR_INVALID,
               ":3: ", "one package name per line");
    LOAD_FAILS("numpy\n-e x\n", NULL, NULL, IPD_ERR_INVALID,
               ":2: ", "one package name per line");
    LOAD_FAILS("numpy\n-e\n", NULL, NULL, IPD_ERR_INVALID,
               ":2: ", "'-e' is not a valid package name");
    LOAD_FAILS("numpy\nhttps://evil.example/x\n", NULL, NULL, IPD_ERR_INVALID,
               ":2: ", "not a valid package name");
    LOAD_FAILS("numpy==1.0\n", NULL, NULL, IPD_ERR_INVALID,
               ":1: ", "'numpy==1.0' is not a valid package name");
    LOAD_FAILS("\n\n# x\np\xc3\xa4ndas\n", NULL, NULL, IPD_ERR_INVALID,
               ":4: ", "not a valid package name");
    LOAD_FAILS("numpy_\n", NULL, NULL, IPD_ERR_INVALID,
               ":1: ", "not a valid package name");
    LOAD_FAILS("numpy\n", "six\nsix;x\n", NULL, IPD_ERR_INVALID,
               ":2: ", "not a valid package name");
    LOAD_FAILS("numpy\n", NULL, "sklearn\n", IPD_ERR_INVALID,
               ":1: ", "expected `import_name distribution`");
    LOAD_FAILS("numpy\n", NULL, "a b c\n", IPD_ERR_INVALID,
               ":1: ", "expected `import_name distribution`");
    LOAD_FAILS("numpy\n", NULL, "ok ok\n9x numpy\n", IPD_ERR_INVALID,
               ":2: ", "'9x' is not a Python identifier");
    LOAD_FAILS("numpy\n", NULL, "a.b numpy\n", IPD_ERR_INVALID,
               ":1: ", "not a Python identifier");
    LOAD_FAILS("numpy\n", NULL, "x bad/name\n", IPD_ERR_INVALID,
               ":1: ", "not a valid package name");
    LOAD_FAILS("numpy\n", NULL, "PIL pillow\nyaml pyyaml\nPIL other\n",
               IPD_ERR_INVALID, ":3: ", "'PIL' is already mapped on line 1");
    {
        char *long_name = malloc(IPD_REQ_NAME_MAX + 3);
        memset(long_name, 'a', IPD_REQ_NAME_MAX + 1);
        long_name[IPD_REQ_NAME_MAX + 1] = '\n';
        long_name[IPD_REQ_NAME_MAX + 2] = '\0';
        LOAD_FAILS(long_name, NULL, NULL, IPD_ERR_INVALID,
                   ":1: ", "at most 100 characters");
        free(long_name);
    }
}

static void file_errors(void)
{
    struct ipd_allowlist *al = (struct ipd_allowlist *)&al;
    struct ipd_buf err;
    char path[128], missing[128];
    ipd_buf_init(&err, 4096);
    snprintf(missing, sizeof(missing), "%s/does-not-exist", tmpdir);
    CHECK_INT(ipd_allowlist_load(missing, NULL, NULL, &al, &err), IPD_ERR_IO);
    CHECK(al == NULL);
    CHECK(strstr(err.buf, missing) != NULL);

    /* A missing deps or import file is an error too, not "no list". */
    write_str("numpy\n", path);
    ipd_buf_reset(&err);
    CHECK_INT(ipd_allowlist_load(path, missing, NULL, &al, &err), IPD_ERR_IO);
    CHECK(al == NULL);
    CHECK(strstr(err.buf, missing) != NULL);
    ipd_buf_reset(&err);
    CHECK_INT(ipd_allowlist_load(path, NULL, missing, &al, &err), IPD_ERR_IO);
    CHECK(al == NULL);

    /* A directory can be opened but not read. */
    ipd_buf_reset(&err);
    CHECK_INT(ipd_allowlist_load(tmpdir, NULL, NULL, &al, &err), IPD_ERR_IO);
    CHECK(al == NULL);
    CHECK(strstr(err.buf, tmpdir) != NULL);

    /* A NUL byte would silently cut a line short. */
    write_file("numpy\n\0evil\n", 12, path);
    ipd_buf_reset(&err);
    CHECK_INT(ipd_allowlist_load(path, NULL, NULL, &al, &err), IPD_ERR_INVALID);
    CHECK(strstr(err.buf, "NUL") != NULL);
    CHECK(al == NULL);

    /* No message buffer: still fails cleanly. */
    CHECK_INT(ipd_allowlist_load(missing, NULL, NULL, &al, NULL), IPD_ERR_IO);
    CHECK(al == NULL);
    ipd_buf_release(&err);
}

static void size_cap(void)
{
    /* Exactly the cap loads; one byte more does not. */
    size_t cap = IPD_ALLOWLIST_FILE_MAX;
    char *big = malloc(cap + 1);
    char path[128];
    struct ipd_allowlist *al = NULL;
    struct ipd_buf err;
    REQUIRE(big);
    ipd_buf_init(&err, 4096);
    for (size_t i = 0; i < cap; i += 2)
        memcpy(big + i, "a\n", 2);
    write_file(big, cap, path);
    CHECK_INT(ipd_allowlist_load(path, NULL, NULL, &al, &err), IPD_OK);
    REQUIRE(al);
    CHECK_INT(ipd_allowlist_count(al), 1);
    ipd_allowlist_free(al);
    al = NULL;
    big[cap] = 'b';
    write_file(big, cap + 1, path);
    CHECK_INT(ipd_allowlist_load(path, NULL, NULL, &al, &err),
              IPD_ERR_TOO_LARGE);
    CHECK(al == NULL);
    CHECK(strstr(err.buf, "larger than 1048576 bytes") != NULL);
    ipd_buf_release(&err);
    free(big);
}

/* The checked-in lists, found from this file's path in the source tree. */
static void data_path(const char *rel, char *out, size_t outsz)
{
    const char *self = __FILE__;
    const char *tail = strstr(self, "tests/unit/venv/");
    int root = tail ? (int)(tail - self) : 0;
    snprintf(out, outsz, "%.*s%s", root, self, rel);
}

static void default_data_files(void)
{
    static const char *const required[] = {
        "numpy",
        "pandas",
        "scipy",
        "scikit-learn",
        "statsmodels",
        "matplotlib",
        "seaborn",
        "plotly",
        "pillow",
        "openpyxl",
        "xlsxwriter",
        "xlrd",
        "sympy",
        "networkx",
        "pyyaml",
        "tabulate",
        "python-dateutil",
        "pytz",
        "beautifulsoup4",
        "lxml",
        "scikit-image",
        "pyarrow",
        "requests",
        "tqdm",
        "joblib",
        "threadpoolctl",
        "patsy",
        "packaging",
        "six",
        "opencv-python-headless",
    };
    static const char *const imports[][2] = {
        {"sklearn", "scikit-learn"},
        {"PIL", "pillow"},
        {"yaml", "pyyaml"},
        {"skimage", "scikit-image"},
        {"dateutil", "python-dateutil"},
        {"bs4", "beautifulsoup4"},
        {"cv2", "opencv-python-headless"},
        {"numpy", "numpy"},
        {"pandas", "pandas"},
    };
    char allow[4096], map[4096], out[IPD_REQ_NAME_MAX + 1];
    struct ipd_allowlist *al = NULL;
    struct ipd_buf err;
    ipd_buf_init(&err, 4096);
    data_path("venv/data/allowlist.txt", allow, sizeof(allow));
    data_path("venv/data/import-names.txt", map, sizeof(map));
    CHECK_INT(ipd_allowlist_load(allow, NULL, map, &al, &err), IPD_OK);
    if (!al)
        fprintf(stderr, "default lists: %s\n", err.buf);
    REQUIRE(al);
    for (size_t i = 0; i < IPD_ARRAY_LEN(required); i++) {
        if (!ipd_allowlist_allows(al, required[i])) {
            fprintf(stderr, "default allowlist lacks %s\n", required[i]);
            test__failed_checks++;
        }
    }
    for (size_t i = 0; i < IPD_ARRAY_LEN(imports); i++)
        CHECK_STR(ipd_allowlist_dist_for_import(al, imports[i][0], out),
                  imports[i][1]);
    /* Every listed name is a requirement the parser accepts as is. */
    for (size_t i = 0; i < ipd_allowlist_count(al); i++) {
        const char *name = ipd_allowlist_name(al, i);
        struct ipd_requirement r;
        CHECK_INT(ipd_requirement_parse(name, strlen(name), &r, NULL), IPD_OK);
        CHECK_STR(r.normalized, name);
        if (i)
            CHECK(strcmp(ipd_allowlist_name(al, i - 1), name) < 0);
    }
    ipd_allowlist_free(al);
    ipd_buf_release(&err);
}

static void mapped_imports_are_allowed(void)
{
    /* Each mapping in the default file points at an allowed package:
     * a mapping to something we would refuse is a mistake in the data. */
    char allow[4096], map[4096], out[IPD_REQ_NAME_MAX + 1], line[256];
    struct ipd_allowlist *al = NULL;
    data_path("venv/data/allowlist.txt", allow, sizeof(allow));
    data_path("venv/data/import-names.txt", map, sizeof(map));
    REQUIRE(ipd_allowlist_load(allow, NULL, map, &al, NULL) == IPD_OK);
    FILE *f = fopen(map, "r");
    REQUIRE(f);
    int mappings = 0;
    while (fgets(line, sizeof(line), f)) {
        char import[128];
        if (line[0] == '#' || sscanf(line, "%127s", import) != 1)
            continue;
        const char *dist = ipd_allowlist_dist_for_import(al, import, out);
        if (!dist || !ipd_allowlist_allows(al, dist)) {
            fprintf(stderr, "import %s maps to %s, not allowed\n", import,
                    dist ? dist : "(null)");
            test__failed_checks++;
        }
        mappings++;
    }
    fclose(f);
    CHECK(mappings >= 7);
    ipd_allowlist_free(al);
}

struct reader_arg {
    const struct ipd_allowlist *al;
    int mismatches;
};

static void *reader(void *p)
{
    struct reader_arg *a = p;
    char out[IPD_REQ_NAME_MAX + 1];
    for (int i = 0; i < 20000; i++) {
        bool ok = ipd_allowlist_allows(a->al, "Scikit_Learn") &&
                  !ipd_allowlist_allows(a->al, "evil") &&
                  ipd_allowlist_allows_dep(a->al, "six") &&
                  !strcmp(ipd_allowlist_dist_for_import(a->al, "PIL", out),
                          "pillow") &&
                  !strcmp(ipd_allowlist_name(a->al, 0), "pillow");
        if (!ok)
            a->mismatches++;
    }
    return NULL;
}

static void concurrent_reads(void)
{
    struct ipd_allowlist *al = NULL;
    pthread_t t[4];
    struct reader_arg args[4];
    CHECK_INT(
        load_strs("scikit-learn\npillow\n", "six\n", "PIL pillow\n", &al, NULL),
        IPD_OK);
    REQUIRE(al);
    for (int i = 0; i < 4; i++) {
        args[i].al = al;
        args[i].mismatches = 0;
        CHECK_INT(pthread_create(&t[i], NULL, reader, &args[i]), 0);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(t[i], NULL);
        CHECK_INT(args[i].mismatches, 0);
    }
    ipd_allowlist_free(al);
}

static void setup(void)
{
    snprintf(tmpdir, sizeof(tmpdir), "/tmp/ipd-allowlist-XXXXXX");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        abort();
    }
}

static void teardown(void)
{
    char path[128];
    for (int i = 0; i < tmp_seq; i++) {
        snprintf(path, sizeof(path), "%s/f%d", tmpdir, i);
        unlink(path);
    }
    CHECK_INT(rmdir(tmpdir), 0);
}

TEST_MAIN(T(setup), T(names_are_normalized_sorted_unique), T(deps_only_names),
          T(empty_lists), T(import_mapping), T(load_errors), T(file_errors),
          T(size_cap), T(default_data_files), T(mapped_imports_are_allowed),
          T(concurrent_reads), T(teardown))
