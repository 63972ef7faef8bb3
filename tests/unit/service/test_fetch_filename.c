/*
 * test_fetch_filename.c - service/fetch/filename.c, the name a fetched
 * body suggests: the Content-Disposition parser (filename.h) and the URL
 * path's last segment (fetch_internal.h).  Pure: no network, no libcurl.
 */
#include "service/fetch/fetch_internal.h"
#include "service/fetch/filename.h"
#include "test.h"

static void content_disposition(void)
{
    static const struct {
        const char *header;
        enum ipd_err rc;
        const char *want;
    } cases[] = {
        {"attachment; filename=\"a.txt\"", IPD_OK, "a.txt"},
        {"attachment; filename=a.txt", IPD_OK, "a.txt"},
        {"attachment;filename=a.txt  ; size=3", IPD_OK, "a.txt"},
        {"ATTACHMENT; FILENAME=\"A.TXT\"", IPD_OK, "A.TXT"},
        {"inline; filename=\"quo\\\"te\\\\d.txt\"", IPD_OK, "quo\"te\\d.txt"},
        {"attachment; filename=\"semi;colon.txt\"", IPD_OK, "semi;colon.txt"},
        {"attachment; filename=\"fallback.txt\"; "
         "filename*=UTF-8''r%C3%A9sum%C3%A9.pdf",
         IPD_OK, "r\xc3\xa9sum\xc3\xa9.pdf"},
        {"attachment; filename*=utf-8'en'%E2%82%AC%20rates.txt; "
         "filename=\"EUR rates.txt\"",
         IPD_OK, "\xe2\x82\xac rates.txt"},
        {"attachment; filename*=iso-8859-1''%E9t%E9.txt", IPD_OK,
         "\xc3\xa9t\xc3\xa9.txt"},
        /* Bad filename*: fall back to filename. */
        {"attachment; filename*=UTF-8''bad%ZZ; filename=ok.txt", IPD_OK,
         "ok.txt"},
        {"attachment; filename*=UTF-8''nul%00.txt; filename=ok.txt", IPD_OK,
         "ok.txt"},
        {"attachment; filename*=UTF-8''%FF%FE; filename=ok.txt", IPD_OK,
         "ok.txt"},
        {"attachment; filename*=KOI8-R''%C1; filename=ok.txt", IPD_OK,
         "ok.txt"},
        {"attachment; filename*=noquotes; filename=ok.txt", IPD_OK, "ok.txt"},
        {"attachment; filename*=UTF-8''bad%ZZ", IPD_ERR_INVALID, ""},
        {"filename=bare.txt", IPD_OK, "bare.txt"},
        {"attachment; filename=../../etc/passwd", IPD_OK, "../../etc/passwd"},
        {"attachment", IPD_ERR_NOT_FOUND, ""},
        {"", IPD_ERR_NOT_FOUND, ""},
        {"attachment; filename=\"\"", IPD_ERR_NOT_FOUND, ""},
        {"attachment; name=\"field\"", IPD_ERR_NOT_FOUND, ""},
        {"attachment; filenamex=a.txt", IPD_ERR_NOT_FOUND, ""},
        {"attachment; filename=\"unterminated", IPD_ERR_INVALID, ""},
        {"attachment; junk; =x; filename=after-junk.txt", IPD_OK,
         "after-junk.txt"},
        {"attachment; filename=first.txt; filename=second.txt", IPD_OK,
         "first.txt"},
    };
    char out[64];
    for (size_t i = 0; i < IPD_ARRAY_LEN(cases); i++) {
        enum ipd_err rc =
            ipd_content_disposition_filename(cases[i].header, out, sizeof(out));
        if (rc != cases[i].rc || strcmp(out, cases[i].want) != 0) {
            fprintf(stderr, "  [%s]: rc=%d out=\"%s\", want %d \"%s\"\n",
                    cases[i].header, rc, out, cases[i].rc, cases[i].want);
            test__failed_checks++;
        }
    }
    /* Too long for out. */
    char small[6];
    CHECK_INT(ipd_content_disposition_filename("a; filename=abcdef", small,
                                               sizeof(small)),
              IPD_ERR_TOO_LARGE);
    CHECK_INT(ipd_content_disposition_filename("a; filename=abcde", small,
                                               sizeof(small)),
              IPD_OK);
    CHECK_STR(small, "abcde");
    CHECK_INT(
        ipd_content_disposition_filename(
            "a; filename*=UTF-8''%C3%A9%C3%A9%C3%A9", small, sizeof(small)),
        IPD_ERR_TOO_LARGE);
    CHECK_INT(ipd_content_disposition_filename(NULL, small, sizeof(small)),
              IPD_ERR_NOT_FOUND);
}

/* The edges the table above leaves out. */
static void content_disposition_edges(void)
{
    static const struct {
        const char *header;
        enum ipd_err rc;
        const char *want;
    } cases[] = {
        {"  filename = \"spaced.txt\" ", IPD_OK, "spaced.txt"},
        {"attachment; filename=a b.txt \t ", IPD_OK, "a b.txt"},
        {"attachment; filename=\"a\\", IPD_ERR_INVALID, ""},
        {"attachment; filename*=UTF-8''", IPD_ERR_NOT_FOUND, ""},
        {"attachment; filename*=UTF-8''; filename=x", IPD_OK, "x"},
        {"attachment; filename*=\"UTF-8''quoted%20ext.txt\"", IPD_OK,
         "quoted ext.txt"},
        {"attachment; filename*=UTF-8'en'%41%42", IPD_OK, "AB"},
        {"attachment; filename*=UTF-8''%c3%a9", IPD_OK, "\xc3\xa9"},
        {"attachment; filename=\"x\"; filename*=UTF-8''%E2%82", IPD_OK, "x"},
        {"attachment; filename*=UTF-8''a%2", IPD_ERR_INVALID, ""},
    };
    char out[64];
    for (size_t i = 0; i < IPD_ARRAY_LEN(cases); i++) {
        enum ipd_err rc =
            ipd_content_disposition_filename(cases[i].header, out, sizeof(out));
        if (rc != cases[i].rc || strcmp(out, cases[i].want) != 0) {
            fprintf(stderr, "  [%s]: rc=%d out=\"%s\", want %d \"%s\"\n",
                    cases[i].header, rc, out, cases[i].rc, cases[i].want);
            test__failed_checks++;
        }
    }
    /* No room at all; a header over 16 KiB is refused whole. */
    out[0] = 'x';
    CHECK_INT(ipd_content_disposition_filename("a; filename=b", out, 0),
              IPD_ERR_TOO_LARGE);
    CHECK_INT(out[0], 'x');
    size_t big = 16 * 1024;
    char *h = malloc(big + 2);
    REQUIRE(h);
    memcpy(h, "a; filename=b;", 14);
    memset(h + 14, ' ', big - 14);
    h[big] = 0;
    CHECK_INT(ipd_content_disposition_filename(h, out, sizeof(out)), IPD_OK);
    CHECK_STR(out, "b");
    h[big] = ' ';
    h[big + 1] = 0;
    CHECK_INT(ipd_content_disposition_filename(h, out, sizeof(out)),
              IPD_ERR_TOO_LARGE);
    CHECK_STR(out, "");
    free(h);
}

static void path_filename(void)
{
    static const struct {
        const char *path;
        const char *want; /* NULL: no name */
    } cases[] = {
        {"/dir/na%20me.csv", "na me.csv"},
        {"/report.pdf", "report.pdf"},
        {"noslash.txt", "noslash.txt"},
        {"/%c3%A9t%C3%a9", "\xc3\xa9t\xc3\xa9"},
        {"/100%", "100%"},
        {"/a%2", "a%2"},
        {"/%zz", "%zz"},
        {"/a%2Fb", "a/b"}, /* raw: the caller sanitises */
        {"/", NULL},
        {"", NULL},
        {"/dir/", NULL},
        {"/nul%00.txt", NULL},
    };
    for (size_t i = 0; i < IPD_ARRAY_LEN(cases); i++) {
        char *got = ipd__fetch_path_filename(cases[i].path);
        if (cases[i].want ? !got || strcmp(got, cases[i].want) != 0 : !!got) {
            fprintf(stderr, "  [%s]: \"%s\", want \"%s\"\n", cases[i].path,
                    got ? got : "(null)",
                    cases[i].want ? cases[i].want : "(null)");
            test__failed_checks++;
        }
        free(got);
    }
    /* A segment of IPD__FETCH_FILENAME_MAX bytes is a name; one more is
     * none. */
    char *p = malloc(IPD__FETCH_FILENAME_MAX + 3);
    REQUIRE(p);
    p[0] = '/';
    memset(p + 1, 'n', IPD__FETCH_FILENAME_MAX + 1);
    p[IPD__FETCH_FILENAME_MAX + 1] = 0;
    char *got = ipd__fetch_path_filename(p);
    CHECK(got && strlen(got) == IPD__FETCH_FILENAME_MAX);
    free(got);
    p[IPD__FETCH_FILENAME_MAX + 1] = 'n';
    p[IPD__FETCH_FILENAME_MAX + 2] = 0;
    CHECK(ipd__fetch_path_filename(p) == NULL);
    free(p);
}

TEST_MAIN(T(content_disposition), T(content_disposition_edges),
          T(path_filename))
