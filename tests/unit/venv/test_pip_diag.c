/*
 * test_pip_diag.c - the classification of pip's failures over real pip
 * 23.0.1 stderr captured into tests/unit/venv/pip-output/ (how each was
 * made is in pip-output/README), and the messages made of them.
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test.h"
#include "venv/pip_diag.h"

/* The fixture's text (new, free it), found next to this source file. */
static char *fixture(const char *name, size_t *len)
{
    char path[4096];
    const char *src = __FILE__;
    const char *slash = strrchr(src, '/');
    int dl = slash ? (int)(slash - src) : 1;
    snprintf(path, sizeof(path), "%.*s/pip-output/%s", dl, slash ? src : ".",
             name);
    FILE *f = fopen(path, "rb");
    char *buf = NULL;
    *len = 0;
    if (!f) {
        fprintf(stderr, "cannot open %s\n", path);
        return NULL;
    }
    buf = malloc(1 << 16);
    if (buf)
        *len = fread(buf, 1, (1 << 16) - 1, f);
    fclose(f);
    if (buf)
        buf[*len] = '\0';
    return buf;
}

static const struct ipd_pip_where at_index = {.index_url =
                                                  "http://127.0.0.1:1/simple/"};

/* Diagnose the fixture; expect kind, and each non-NULL field. */
static void diag_at(int line, const char *name, enum ipd_pip_failure kind,
                    const char *requirement, const char *parent,
                    const char *detail, const char *msg_part,
                    const struct ipd_pip_where *w)
{
    size_t len;
    char *text = fixture(name, &len);
    struct ipd_pip_diag d;
    char msg[480];
    CHECK(text != NULL);
    if (!text)
        return;
    ipd_pip_diagnose(text, len, &d);
    ipd_pip_describe(&d, w ? w : &at_index, msg, sizeof(msg));
    if ((int)d.kind != (int)kind || (msg_part && !strstr(msg, msg_part)))
        fprintf(stderr, "line %d: %s: kind %d (want %d), message: %s\n", line,
                name, (int)d.kind, (int)kind, msg);
    CHECK_INT(d.kind, kind);
    if (requirement)
        CHECK_STR(d.requirement, requirement);
    if (parent)
        CHECK_STR(d.parent, parent);
    if (detail)
        CHECK_STR(d.detail, detail);
    if (msg_part)
        CHECK(strstr(msg, msg_part) != NULL);
    free(text);
}

#define DIAG(...) diag_at(__LINE__, __VA_ARGS__)

static void unreachable(void)
{
    /* 127.0.0.1:1 (closed), pip's own 5 retries and our 1. */
    DIAG("refused_retries5.txt", IPD_PIP_UNREACHABLE, "ipdtest-alpha", "",
         "connection refused",
         "the package index is unreachable: http://127.0.0.1:1/simple/ "
         "(connection refused)",
         NULL);
    DIAG("refused.txt", IPD_PIP_UNREACHABLE, "ipdtest-alpha", "",
         "connection refused", "unreachable", NULL);
    /* pip's default index in a network namespace with no network. */
    struct ipd_pip_where pypi = {0};
    DIAG("offline.txt", IPD_PIP_UNREACHABLE, "ipdtest-alpha", "",
         "name resolution failed",
         "unreachable: pypi.org (pip's default index) (name resolution "
         "failed)",
         &pypi);
    /* Through the egress proxy: pip is silent about its 403 and 502;
     * the executor's note of the proxy's reason comes first. */
    DIAG("egress_refused.txt", IPD_PIP_UNREACHABLE, "ipdtest-alpha==1.0", "",
         "its address is refused by the SSRF guard: allow it with "
         "--fetch-allow",
         "the package index is unreachable: http://127.0.0.1:1/simple/ "
         "(its address is refused by the SSRF guard",
         NULL);
    DIAG("egress_failed.txt", IPD_PIP_UNREACHABLE, "ipdtest-alpha==1.0", "",
         "connection refused",
         "the package index is unreachable: http://127.0.0.1:1/simple/ "
         "(connection refused)",
         NULL);
    /* A port that accepts and never answers. */
    DIAG("hang.txt", IPD_PIP_UNREACHABLE, NULL, NULL, "timed out",
         "unreachable", NULL);
}

static void no_version(void)
{
    DIAG("noversion.txt", IPD_PIP_NO_VERSION, "ipdtest-alpha==9.9", "",
         "1.0, 2.0",
         "no such version: ipdtest-alpha==9.9; "
         "http://127.0.0.1:1/simple/ has 1.0, 2.0",
         NULL);
    struct ipd_pip_where folder = {.no_index = true, .find_links = true};
    DIAG("noindex_noversion.txt", IPD_PIP_NO_VERSION, "ipdtest-alpha==2.0", "",
         "1.0", "the wheel folder (--pip-find-links) has 1.0", &folder);
}

static void not_found(void)
{
    DIAG("noproject.txt", IPD_PIP_NOT_FOUND, "ipdtest-nosuch", "", "",
         "no such project", NULL);
    /* An sdist refused by --only-binary looks the same to pip's output;
     * the caller asks the index (ipd_pip_index_versions). */
    DIAG("sdistonly.txt", IPD_PIP_NOT_FOUND, "ipdtest-sdistonly", "", "",
         "source distributions are not built here", NULL);
    struct ipd_pip_where folder = {.no_index = true, .find_links = true};
    DIAG("nodeps_version.txt", IPD_PIP_NOT_FOUND, "ipdtest-dep",
         "ipdtest-withdep", "",
         "ipdtest-dep (a dependency of ipdtest-withdep): the wheel folder",
         &folder);
}

static void build_failed(void)
{
    DIAG("tamper.txt", IPD_PIP_BUILD_FAILED, "", "",
         "ipdtest-tamper: failing on purpose after tampering",
         "building from source failed: ipdtest-tamper: failing on purpose",
         NULL);
}

static void build_refused_message(void)
{
    struct ipd_pip_diag d;
    char msg[480], v[64];
    const char out[] = "ipdtest-sdistonly (1.0)\nAvailable versions: 1.0\n";
    CHECK(ipd_pip_index_versions(out, strlen(out), v, sizeof(v)));
    CHECK_STR(v, "1.0");
    CHECK(!ipd_pip_index_versions("", 0, v, sizeof(v)));
    memset(&d, 0, sizeof(d));
    d.kind = IPD_PIP_BUILD_REFUSED;
    snprintf(d.project, sizeof(d.project), "ipdtest-sdistonly");
    snprintf(d.detail, sizeof(d.detail), "%s", v);
    ipd_pip_describe(&d, &at_index, msg, sizeof(msg));
    CHECK(strstr(msg, "build refused: ipdtest-sdistonly has only source "
                      "distributions") != NULL);
    CHECK(strstr(msg, "--pip-allow-sdist 0") != NULL);
}

static void odd_inputs(void)
{
    struct ipd_pip_diag d;
    char msg[64];
    ipd_pip_diagnose("", 0, &d);
    CHECK_INT(d.kind, IPD_PIP_OTHER);
    CHECK_STR(d.detail, "pip failed without a message");
    const char junk[] = "ERROR: bad \x01\xff thing\nmore";
    ipd_pip_diagnose(junk, strlen(junk), &d);
    CHECK_INT(d.kind, IPD_PIP_OTHER);
    CHECK_STR(d.detail, "ERROR: bad ?? thing");
    /* A truncated "not satisfied" line, no versions note. */
    const char cut[] = "ERROR: Could not find a version that satisfies the "
                       "requirement abc";
    ipd_pip_diagnose(cut, strlen(cut), &d);
    CHECK_INT(d.kind, IPD_PIP_NOT_FOUND);
    CHECK_STR(d.project, "abc");
    /* Hundreds of versions: the newest end is kept. */
    char big[8192];
    size_t k = (size_t)snprintf(big, sizeof(big),
                                "ERROR: Could not find a "
                                "version that satisfies the requirement "
                                "x==9 (from versions: ");
    for (int i = 0; i < 400; i++)
        k += (size_t)snprintf(big + k, sizeof(big) - k, "%s1.%d", i ? ", " : "",
                              i);
    k += (size_t)snprintf(big + k, sizeof(big) - k, ")\n");
    ipd_pip_diagnose(big, k, &d);
    CHECK_INT(d.kind, IPD_PIP_NO_VERSION);
    CHECK(!strncmp(d.detail, "..., ", 5));
    CHECK(strstr(d.detail, "1.399") != NULL);
    /* The message fits whatever it is given, and credentials never show. */
    struct ipd_pip_where secret = {
        .index_url = "https://user:tok3n@pkgs.example/simple/"};
    char m2[480];
    d.kind = IPD_PIP_UNREACHABLE;
    snprintf(d.detail, sizeof(d.detail), "connection refused");
    ipd_pip_describe(&d, &secret, m2, sizeof(m2));
    CHECK(strstr(m2, "tok3n") == NULL);
    CHECK(strstr(m2, "https://pkgs.example/simple/") != NULL);
    ipd_pip_describe(&d, &secret, msg, sizeof(msg));
    CHECK(strlen(msg) < sizeof(msg));
}

TEST_MAIN(T(unreachable), T(no_version), T(not_found), T(build_failed),
          T(build_refused_message), T(odd_inputs))
