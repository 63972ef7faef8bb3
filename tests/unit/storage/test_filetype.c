/*
 * test_filetype.c - storage/filetype.h: the pure classification table,
 * filename sanitising, Content-Disposition, and detection with the real
 * libmagic database on files written here byte by byte.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sqlite3.h>

#include "storage/filetype.h"
#include "test.h"

/* ---- classify ---------------------------------------------------------- */

struct classify_case {
    const char *magic;
    const char *filename;
    const char *mime; /* want */
    const char *type; /* want */
};

static const struct classify_case classify_cases[] = {
    /* The extension refines text. */
    {"text/plain", "sales.csv", "text/csv", "csv"},
    {"text/csv", "sales.csv", "text/csv", "csv"},
    {"text/csv", "noext", "text/csv", "csv"},
    {"application/json", "odd.csv", "text/csv", "csv"},
    {"text/plain", "SALES.CSV", "text/csv", "csv"},
    {"text/plain", "x.tsv", "text/tab-separated-values", "tsv"},
    {"text/csv", "x.tsv", "text/tab-separated-values", "tsv"},
    {"text/plain", "x.json", "application/json", "json"},
    {"application/json", "x.json", "application/json", "json"},
    {"application/json", "x", "application/json", "json"},
    {"application/x-ndjson", "x.json", "application/json", "json"},
    {"application/x-ndjson", "x", "application/x-ndjson", "jsonl"},
    {"application/json", "x.jsonl", "application/x-ndjson", "jsonl"},
    {"text/plain", "x.ndjson", "application/x-ndjson", "jsonl"},
    {"text/xml", "x", "text/xml", "xml"},
    {"text/plain", "x.xml", "text/xml", "xml"},
    {"application/rdf+xml", "x", "application/rdf+xml", "xml"},
    {"text/plain", "x.yaml", "application/yaml", "yaml"},
    {"text/plain", "x.yml", "application/yaml", "yaml"},
    {"text/plain", "README.md", "text/markdown", "markdown"},
    {"text/plain", "x.py", "text/x-python", "python"},
    {"text/x-script.python", "x.py", "text/x-python", "python"},
    {"text/x-script.python", "script", "text/x-python", "python"},
    {"text/x-script.python", "notes.txt", "text/x-python", "python"},
    {"text/html", "x", "text/html", "html"},
    {"text/plain", "x.htm", "text/html", "html"},
    {"application/json", "nb.ipynb", "application/x-ipynb+json", "notebook"},
    {"text/plain", "notes.txt", "text/plain", "text"},
    {"text/plain", NULL, "text/plain", "text"},
    {"text/plain", "", "text/plain", "text"},
    {"text/x-c", "main.c", "text/x-c", "text"},
    {"text/plain; charset=us-ascii", "a.txt", "text/plain", "text"},
    {"TEXT/PGP", "key.asc", "text/pgp", "text"},
    {"message/rfc822", "mail.eml", "message/rfc822", "text"},
    {"application/javascript", "x.js", "application/javascript", "text"},
    /* Only the last component's extension counts; dotfiles have none. */
    {"text/plain", "dir.csv/notes", "text/plain", "text"},
    {"text/plain", ".csv", "text/plain", "text"},
    {"text/plain", "a.b.csv", "text/csv", "csv"},
    {"text/plain", "x.", "text/plain", "text"},
    /* Text never becomes an image or a workbook because of its name. */
    {"text/plain", "evil.png", "text/plain", "text"},
    {"text/plain", "x.xlsx", "text/plain", "text"},
    {"text/csv", "x.parquet", "text/csv", "csv"},
    /* Images, whatever the name. */
    {"image/png", "x.png", "image/png", "image"},
    {"image/png", "x.csv", "image/png", "image"},
    {"image/svg+xml", "x.xml", "image/svg+xml", "image"},
    {"image/jpeg", NULL, "image/jpeg", "image"},
    /* Binary content stays binary. */
    {"application/x-executable", "evil.png", "application/x-executable",
     "binary"},
    {"application/x-pie-executable", "evil.csv", "application/x-pie-executable",
     "binary"},
    {"application/x-sharedlib", "evil.py", "application/x-sharedlib", "binary"},
    {"application/octet-stream", "x.csv", "application/octet-stream", "binary"},
    {"application/octet-stream", "x.png", "application/octet-stream", "binary"},
    {"application/octet-stream", "x.xlsx", "application/octet-stream",
     "binary"},
    {"application/octet-stream", "x.parquet", "application/octet-stream",
     "binary"},
    {"application/x-dosexec", "x.exe", "application/x-dosexec", "binary"},
    {"font/sfnt", "x.ttf", "font/sfnt", "binary"},
    {NULL, "x.csv", "application/octet-stream", "binary"},
    {"", "x.csv", "application/octet-stream", "binary"},
    {"garbage", "x.csv", "application/octet-stream", "binary"},
    /* Office. */
    {"application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
     "x.xlsx",
     "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
     "excel"},
    {"application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
     "x.zip",
     "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
     "excel"},
    {"application/zip", "x.xlsx",
     "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
     "excel"},
    {"application/zip", "x.docx",
     "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
     "word"},
    {"application/zip", "x.pptx",
     "application/vnd.openxmlformats-officedocument.presentationml."
     "presentation",
     "powerpoint"},
    {"application/vnd.ms-excel", "x.xls", "application/vnd.ms-excel", "excel"},
    {"application/x-ole-storage", "x.xls", "application/vnd.ms-excel", "excel"},
    {"application/CDFV2", "x.xls", "application/vnd.ms-excel", "excel"},
    {"application/CDFV2", "x.doc", "application/msword", "word"},
    {"application/x-ole-storage", "x.bin", "application/x-ole-storage",
     "binary"},
    {"application/msword", "x.doc", "application/msword", "word"},
    {"application/vnd.oasis.opendocument.spreadsheet", "x.ods",
     "application/vnd.oasis.opendocument.spreadsheet", "excel"},
    /* Archives: a zip is refined only to an OOXML format. */
    {"application/zip", "x.zip", "application/zip", "archive"},
    {"application/zip", "x.csv", "application/zip", "archive"},
    {"application/zip", NULL, "application/zip", "archive"},
    {"application/gzip", "x.xlsx", "application/gzip", "archive"},
    {"application/x-tar", "x.tar", "application/x-tar", "archive"},
    {"application/x-bzip2", "x.bz2", "application/x-bzip2", "archive"},
    {"application/x-xz", "x.xz", "application/x-xz", "archive"},
    {"application/x-7z-compressed", "x.7z", "application/x-7z-compressed",
     "archive"},
    {"application/zstd", "x.zst", "application/zstd", "archive"},
    /* The rest. */
    {"application/pdf", "x.pdf", "application/pdf", "pdf"},
    {"application/pdf", "x.csv", "application/pdf", "pdf"},
    {"audio/mpeg", "x.mp3", "audio/mpeg", "audio"},
    {"audio/x-wav", "x.csv", "audio/x-wav", "audio"},
    {"application/ogg", "x.ogg", "application/ogg", "audio"},
    {"video/mp4", "x.mp4", "video/mp4", "video"},
    {"application/vnd.sqlite3", "x.db", "application/vnd.sqlite3", "database"},
    {"application/x-sqlite3", "x.csv", "application/x-sqlite3", "database"},
    {"application/vnd.apache.parquet", "x.parquet",
     "application/vnd.apache.parquet", "parquet"},
    /* The empty file is text, and text extensions still refine it. */
    {"application/x-empty", "empty", "text/plain", "text"},
    {"inode/x-empty", "empty.csv", "text/csv", "csv"},
    {"application/x-empty", "empty.png", "text/plain", "text"},
    {"application/x-empty", "empty.xlsx", "text/plain", "text"},
};

static void test_classify_table(void)
{
    for (size_t i = 0; i < IPD_ARRAY_LEN(classify_cases); i++) {
        const struct classify_case *c = &classify_cases[i];
        char mime[IPD_MIME_MAX], type[IPD_FILE_TYPE_MAX];
        memset(mime, 'x', sizeof(mime));
        memset(type, 'x', sizeof(type));
        ipd_filetype_classify(c->magic, c->filename, mime, type);
        if (strcmp(mime, c->mime) != 0 || strcmp(type, c->type) != 0) {
            fprintf(stderr, "case %zu (%s, %s): got %s %s, want %s %s\n", i,
                    c->magic ? c->magic : "NULL",
                    c->filename ? c->filename : "NULL", mime, type, c->mime,
                    c->type);
            CHECK(0);
        }
    }
}

static void test_classify_long_inputs(void)
{
    char mime[IPD_MIME_MAX], type[IPD_FILE_TYPE_MAX];
    char longmime[300], longname[400];

    /* A MIME type that would not fit is not trusted, not truncated. */
    memset(longmime, 'a', sizeof(longmime) - 1);
    memcpy(longmime, "text/", 5);
    longmime[sizeof(longmime) - 1] = '\0';
    ipd_filetype_classify(longmime, "x.csv", mime, type);
    CHECK_STR(mime, "application/octet-stream");
    CHECK_STR(type, "binary");

    /* An absurd extension is no extension. */
    memset(longname, 'b', sizeof(longname) - 1);
    longname[0] = 'a';
    longname[1] = '.';
    longname[sizeof(longname) - 1] = '\0';
    ipd_filetype_classify("text/plain", longname, mime, type);
    CHECK_STR(mime, "text/plain");
    CHECK_STR(type, "text");
}

/* ---- sanitize ---------------------------------------------------------- */

static enum ipd_err san(const char *s, size_t n, char out[IPD_FILENAME_MAX])
{
    return ipd_filename_sanitize(s, n, out);
}

static enum ipd_err sans(const char *s, char out[IPD_FILENAME_MAX])
{
    return ipd_filename_sanitize(s, strlen(s), out);
}

static void test_sanitize_keeps_plain_names(void)
{
    char out[IPD_FILENAME_MAX];
    CHECK_INT(sans("report.csv", out), IPD_OK);
    CHECK_STR(out, "report.csv");
    CHECK_INT(sans("my data (final) v2.xlsx", out), IPD_OK);
    CHECK_STR(out, "my data (final) v2.xlsx");
    CHECK_INT(sans("...", out), IPD_OK);
    CHECK_STR(out, "...");
    CHECK_INT(sans(".bashrc", out), IPD_OK);
    CHECK_STR(out, ".bashrc");
    /* Non-ASCII, including 4-byte sequences. */
    CHECK_INT(sans("r\xC3\xA9sum\xC3\xA9 \xF0\x9F\x93\x8A.pdf", out), IPD_OK);
    CHECK_STR(out, "r\xC3\xA9sum\xC3\xA9 \xF0\x9F\x93\x8A.pdf");
}

static void test_sanitize_strips_paths(void)
{
    char out[IPD_FILENAME_MAX];
    CHECK_INT(sans("../../etc/passwd", out), IPD_OK);
    CHECK_STR(out, "passwd");
    CHECK_INT(sans("C:\\Users\\bob\\data.csv", out), IPD_OK);
    CHECK_STR(out, "data.csv");
    CHECK_INT(sans("a/b\\c/d.txt", out), IPD_OK);
    CHECK_STR(out, "d.txt");
    CHECK_INT(sans("/abs/x", out), IPD_OK);
    CHECK_STR(out, "x");
    CHECK_INT(sans("dir/", out), IPD_ERR_INVALID);
    CHECK_INT(sans("dir/..", out), IPD_ERR_INVALID);
    CHECK_INT(sans("dir\\.", out), IPD_ERR_INVALID);
    CHECK_INT(sans("dir/ .. ", out), IPD_ERR_INVALID);
}

static void test_sanitize_controls(void)
{
    char out[IPD_FILENAME_MAX];
    /* NUL is a control: it becomes '_' rather than cutting the name. */
    CHECK_INT(san("evil.png\0.csv", 13, out), IPD_OK);
    CHECK_STR(out, "evil.png_.csv");
    CHECK_INT(san("\0", 1, out), IPD_OK);
    CHECK_STR(out, "_");
    CHECK_INT(sans("a\tb\x01"
                   "c\x1F"
                   "d\x7F"
                   "e",
                   out),
              IPD_OK);
    CHECK_STR(out, "a_b_c_d_e");
    CHECK_INT(sans("line1\nline2.txt", out), IPD_OK);
    CHECK_STR(out, "line1_line2.txt");
    /* C1 controls (U+0080..U+009F): two bytes become one '_'. */
    CHECK_INT(sans("a\xC2\x80"
                   "b\xC2\x85"
                   "c\xC2\x9F"
                   "d",
                   out),
              IPD_OK);
    CHECK_STR(out, "a_b_c_d");
    /* U+00A0 and U+00C0 are not controls. */
    CHECK_INT(sans("a\xC2\xA0"
                   "b\xC3\x80",
                   out),
              IPD_OK);
    CHECK_STR(out, "a\xC2\xA0"
                   "b\xC3\x80");
}

static void test_sanitize_keeps_bidi(void)
{
    char out[IPD_FILENAME_MAX];
    /* U+202E RIGHT-TO-LEFT OVERRIDE: stored as given, neutralised when
     * rendered in Content-Disposition. */
    CHECK_INT(sans("\xE2\x80\xAEgnp.exe", out), IPD_OK);
    CHECK_STR(out, "\xE2\x80\xAEgnp.exe");
    CHECK_INT(sans("a\xE2\x81\xA6"
                   "b\xE2\x81\xA9"
                   "c\xE2\x80\x8F",
                   out),
              IPD_OK);
    CHECK_STR(out, "a\xE2\x81\xA6"
                   "b\xE2\x81\xA9"
                   "c\xE2\x80\x8F");
}

static void test_sanitize_whitespace(void)
{
    char out[IPD_FILENAME_MAX];
    CHECK_INT(sans("  report.csv \r\n", out), IPD_OK);
    CHECK_STR(out, "report.csv");
    CHECK_INT(sans("dir/ name .txt\t", out), IPD_OK);
    CHECK_STR(out, "name .txt");
    CHECK_INT(sans("", out), IPD_ERR_INVALID);
    CHECK_INT(sans("   \t\r\n", out), IPD_ERR_INVALID);
    CHECK_INT(sans(".", out), IPD_ERR_INVALID);
    CHECK_INT(sans("..", out), IPD_ERR_INVALID);
    CHECK_INT(sans(" .. ", out), IPD_ERR_INVALID);
    CHECK_INT(san(NULL, 0, out), IPD_ERR_INVALID);
}

static void test_sanitize_rejects_bad_utf8(void)
{
    char out[IPD_FILENAME_MAX];
    CHECK_INT(sans("\xFF.csv", out), IPD_ERR_INVALID);
    CHECK_INT(sans("a\xC3", out), IPD_ERR_INVALID); /* truncated */
    CHECK_INT(sans("\xC0\xAF"
                   "etc",
                   out),
              IPD_ERR_INVALID);                                /* overlong / */
    CHECK_INT(sans("\xED\xA0\x80", out), IPD_ERR_INVALID);     /* surrogate */
    CHECK_INT(sans("\xF4\x90\x80\x80", out), IPD_ERR_INVALID); /* > 10FFFF */
    /* Invalid anywhere counts, even in a discarded directory part. */
    CHECK_INT(sans("\xFF/ok.csv", out), IPD_ERR_INVALID);
}

static void test_sanitize_length(void)
{
    char out[IPD_FILENAME_MAX];
    char name[600];

    memset(name, 'a', sizeof(name));
    CHECK_INT(san(name, 255, out), IPD_OK);
    CHECK_INT(strlen(out), 255);
    CHECK_INT(san(name, 256, out), IPD_ERR_TOO_LARGE);
    CHECK_INT(san(name, sizeof(name), out), IPD_ERR_TOO_LARGE);

    /* The limit applies to what is kept. */
    memset(name, 'a', 300);
    name[10] = '/';
    CHECK_INT(san(name, 266, out), IPD_OK);
    CHECK_INT(strlen(out), 255);
    memset(name, ' ', 300);
    memset(name + 100, 'b', 200);
    CHECK_INT(san(name, 300, out), IPD_OK);
    CHECK_INT(strlen(out), 200);

    /* 128 C1 controls: 256 bytes in, 128 out. */
    for (size_t i = 0; i < 128; i++) {
        name[2 * i] = '\xC2';
        name[2 * i + 1] = '\x80';
    }
    CHECK_INT(san(name, 256, out), IPD_OK);
    CHECK_INT(strlen(out), 128);

    /* Multibyte characters count in bytes: 86 x 3 = 258. */
    for (size_t i = 0; i < 86; i++)
        memcpy(name + 3 * i, "\xE2\x82\xAC", 3);
    CHECK_INT(san(name, 255, out), IPD_OK);
    CHECK_INT(san(name, 258, out), IPD_ERR_TOO_LARGE);
}

/* ---- Content-Disposition ----------------------------------------------- */

/* Only printable ASCII may reach a header. */
static int header_safe(const char *s)
{
    for (; *s; s++)
        if ((unsigned char)*s < 0x20 || (unsigned char)*s > 0x7E)
            return 0;
    return 1;
}

static void check_cd(const char *name, const char *want)
{
    char *cd = ipd_content_disposition(name);
    CHECK_STR(cd, want);
    CHECK(header_safe(cd));
    free(cd);
}

static void test_content_disposition(void)
{
    check_cd("report.csv", "attachment; filename=\"report.csv\"; "
                           "filename*=UTF-8''report.csv");
    check_cd("r\xC3\xA9sum\xC3\xA9 2024.pdf",
             "attachment; filename=\"r_sum_ 2024.pdf\"; "
             "filename*=UTF-8''r%C3%A9sum%C3%A9%202024.pdf");
    check_cd("a\"b\\c%d.txt", "attachment; filename=\"a_b_c_d.txt\"; "
                              "filename*=UTF-8''a%22b%5Cc%25d.txt");
    check_cd("a\r\nb\x7F", "attachment; filename=\"a__b_\"; "
                           "filename*=UTF-8''a%0D%0Ab%7F");
    /* The bidi override is inert in both forms. */
    check_cd("\xE2\x80\xAEgnp.exe", "attachment; filename=\"_gnp.exe\"; "
                                    "filename*=UTF-8''%E2%80%AEgnp.exe");
    check_cd("\xF0\x9F\x93\x8A",
             "attachment; filename=\"_\"; filename*=UTF-8''%F0%9F%93%8A");
    /* attr-char stays, everything else is encoded. */
    check_cd("!#$&+-.^_`|~Az09", "attachment; filename=\"!#$&+-.^_`|~Az09\"; "
                                 "filename*=UTF-8''!#$&+-.^_`|~Az09");
    check_cd("()'*,;=/:?@[]{}<> ",
             "attachment; filename=\"()'*,;=/:?@[]{}<> \"; "
             "filename*=UTF-8''%28%29%27%2A%2C%3B%3D%2F%3A%3F%40%5B%5D%7B%7D"
             "%3C%3E%20");
    check_cd("", "attachment; filename=\"\"; filename*=UTF-8''");
}

static void test_content_disposition_long(void)
{
    char name[IPD_FILENAME_MAX];
    char *cd = NULL;
    /* The worst case: every byte encoded. */
    for (size_t i = 0; i < 85; i++)
        memcpy(name + 3 * i, "\xE2\x80\xAE", 3);
    name[255] = '\0';
    cd = ipd_content_disposition(name);
    CHECK(header_safe(cd));
    CHECK_INT(strlen(cd),
              strlen("attachment; filename=\"\"; filename*=UTF-8''") + 85 +
                  255 * 3);
    free(cd);
}

/* ---- detect on real bytes ---------------------------------------------- */

static char tmpdir[256];

static void make_tmpdir(void)
{
    const char *base = getenv("TMPDIR");
    if (tmpdir[0])
        return;
    snprintf(tmpdir, sizeof(tmpdir), "%s/ipd_ft_XXXXXX",
             base && base[0] ? base : "/tmp");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        exit(1);
    }
}

static void path_of(const char *name, char path[512])
{
    make_tmpdir();
    snprintf(path, 512, "%s/%s", tmpdir, name);
}

static int write_file(const char *name, const void *data, size_t len)
{
    char path[512];
    int fd;
    path_of(name, path);
    fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0)
        return -1;
    if (len && write(fd, data, len) != (ssize_t)len) {
        close(fd);
        return -1;
    }
    close(fd);
    return 0;
}

static int write_str(const char *name, const char *s)
{
    return write_file(name, s, strlen(s));
}

static struct ipd_filetype *ft_shared;

/* Detect the file written as `name`, reporting it to the caller as
 * `shown` (the user-facing name). */
static void detect_as(const char *name, const char *shown,
                      char mime[IPD_MIME_MAX], char type[IPD_FILE_TYPE_MAX])
{
    char path[512];
    int fd;
    enum ipd_err rc;
    path_of(name, path);
    mime[0] = type[0] = '\0';
    fd = open(path, O_RDONLY | O_CLOEXEC);
    REQUIRE(fd >= 0);
    rc = ipd_filetype_detect(ft_shared, fd, shown, mime, type);
    CHECK_INT(rc, IPD_OK);
    close(fd);
}

#define EXPECT(name, want_mime, want_type)                                     \
    do {                                                                       \
        char m_[IPD_MIME_MAX], t_[IPD_FILE_TYPE_MAX];                          \
        detect_as((name), (name), m_, t_);                                     \
        CHECK_STR(m_, (want_mime));                                            \
        CHECK_STR(t_, (want_type));                                            \
    } while (0)

static const unsigned char png_1x1[] = {
    0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A, 0x00, 0x00, 0x00, 0x0D,
    0x49, 0x48, 0x44, 0x52, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01,
    0x08, 0x06, 0x00, 0x00, 0x00, 0x1F, 0x15, 0xC4, 0x89, 0x00, 0x00, 0x00,
    0x0A, 0x49, 0x44, 0x41, 0x54, 0x78, 0x9C, 0x63, 0x00, 0x01, 0x00, 0x00,
    0x05, 0x00, 0x01, 0x0D, 0x0A, 0x2D, 0xB4, 0x00, 0x00, 0x00, 0x00, 0x49,
    0x45, 0x4E, 0x44, 0xAE, 0x42, 0x60, 0x82,
};

/* gzip of "hello\n" (gzip -n). */
static const unsigned char gzip_hello[] = {
    0x1F, 0x8B, 0x08, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x03, 0xCB, 0x48, 0xCD, 0xC9, 0xC9, 0xE7, 0x02, 0x00,
    0x20, 0x30, 0x3A, 0x36, 0x06, 0x00, 0x00, 0x00,
};

static uint32_t crc32_of(const void *data, size_t n)
{
    const unsigned char *p = data;
    uint32_t crc = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i++) {
        crc ^= p[i];
        for (int k = 0; k < 8; k++)
            crc = (crc >> 1) ^ (0xEDB88320u & (0u - (crc & 1u)));
    }
    return ~crc;
}

struct zip_entry {
    const char *name;
    const char *data;
};

static void put16(unsigned char **p, uint32_t v)
{
    (*p)[0] = (unsigned char)(v & 0xFF);
    (*p)[1] = (unsigned char)((v >> 8) & 0xFF);
    *p += 2;
}

static void put32(unsigned char **p, uint32_t v)
{
    put16(p, v & 0xFFFF);
    put16(p, v >> 16);
}

static void put_bytes(unsigned char **p, const void *d, size_t n)
{
    memcpy(*p, d, n);
    *p += n;
}

/* A zip with stored (uncompressed) entries, in order.  Returns its length
 * in out (at least 4096 bytes). */
static size_t build_zip(const struct zip_entry *e, size_t n, unsigned char *out)
{
    unsigned char *p = out;
    uint32_t offsets[16];
    unsigned char *cd_start;
    for (size_t i = 0; i < n; i++) {
        uint32_t len = (uint32_t)strlen(e[i].data);
        uint32_t nlen = (uint32_t)strlen(e[i].name);
        offsets[i] = (uint32_t)(p - out);
        put32(&p, 0x04034b50);
        put16(&p, 20);   /* version needed */
        put16(&p, 0);    /* flags */
        put16(&p, 0);    /* stored */
        put16(&p, 0);    /* time */
        put16(&p, 0x21); /* date: 1980-01-01 */
        put32(&p, crc32_of(e[i].data, len));
        put32(&p, len);
        put32(&p, len);
        put16(&p, nlen);
        put16(&p, 0);
        put_bytes(&p, e[i].name, nlen);
        put_bytes(&p, e[i].data, len);
    }
    cd_start = p;
    for (size_t i = 0; i < n; i++) {
        uint32_t len = (uint32_t)strlen(e[i].data);
        uint32_t nlen = (uint32_t)strlen(e[i].name);
        put32(&p, 0x02014b50);
        put16(&p, 20);
        put16(&p, 20);
        put16(&p, 0);
        put16(&p, 0);
        put16(&p, 0);
        put16(&p, 0x21);
        put32(&p, crc32_of(e[i].data, len));
        put32(&p, len);
        put32(&p, len);
        put16(&p, nlen);
        put16(&p, 0); /* extra */
        put16(&p, 0); /* comment */
        put16(&p, 0); /* disk */
        put16(&p, 0); /* internal attrs */
        put32(&p, 0); /* external attrs */
        put32(&p, offsets[i]);
        put_bytes(&p, e[i].name, nlen);
    }
    put32(&p, 0x06054b50);
    put16(&p, 0);
    put16(&p, 0);
    put16(&p, (uint32_t)n);
    put16(&p, (uint32_t)n);
    put32(&p, (uint32_t)(p - cd_start - 12));
    put32(&p, (uint32_t)(cd_start - out));
    put16(&p, 0);
    return (size_t)(p - out);
}

#define CT_XML                                                                 \
    "<?xml version=\"1.0\" encoding=\"UTF-8\"?><Types "                        \
    "xmlns=\"http://schemas.openxmlformats.org/package/2006/content-types\">"  \
    "<Default Extension=\"xml\" ContentType=\"application/xml\"/></Types>"
#define RELS_XML                                                               \
    "<?xml version=\"1.0\"?><Relationships xmlns=\"http://schemas."            \
    "openxmlformats.org/package/2006/relationships\"/>"
#define WB_XML "<?xml version=\"1.0\"?><workbook/>"

static int write_zip(const char *name, const struct zip_entry *e, size_t n)
{
    unsigned char buf[8192];
    size_t len = build_zip(e, n, buf);
    return write_file(name, buf, len);
}

static void test_detect_text_formats(void)
{
    char big[4096];
    REQUIRE(write_str("sales.csv", "region,units,price\nnorth,10,2.5\n"
                                   "south,7,3.0\neast,3,1.25\n") == 0);
    EXPECT("sales.csv", "text/csv", "csv");
    REQUIRE(write_str("data.tsv",
                      "region\tunits\tprice\nnorth\t10\t2.5\nsouth\t7\t3\n") ==
            0);
    EXPECT("data.tsv", "text/tab-separated-values", "tsv");
    REQUIRE(write_str("obj.json", "{\"a\": 1, \"b\": [true, null, \"x\"]}\n") ==
            0);
    EXPECT("obj.json", "application/json", "json");
    REQUIRE(write_str("rows.jsonl", "{\"a\": 1}\n{\"a\": 2}\n{\"a\": 3}\n") ==
            0);
    EXPECT("rows.jsonl", "application/x-ndjson", "jsonl");
    REQUIRE(write_str("script.py", "#!/usr/bin/env python3\nimport sys\n\n"
                                   "def main():\n    print(sys.argv)\n\n"
                                   "main()\n") == 0);
    EXPECT("script.py", "text/x-python", "python");
    REQUIRE(write_str("README.md", "# Title\n\nSome *emphasis* and a "
                                   "[link](http://x).\n\n- one\n- two\n") == 0);
    EXPECT("README.md", "text/markdown", "markdown");
    REQUIRE(write_str("conf.yaml",
                      "name: demo\nitems:\n  - a\n  - b\nnested:\n  k: v\n") ==
            0);
    EXPECT("conf.yaml", "application/yaml", "yaml");
    REQUIRE(write_str("notes.txt", "Just some notes.\nNothing special.\n") ==
            0);
    EXPECT("notes.txt", "text/plain", "text");
    REQUIRE(write_str("noext", "Just some notes.\nNothing special.\n") == 0);
    EXPECT("noext", "text/plain", "text");
    REQUIRE(write_str("doc.xml",
                      "<?xml version=\"1.0\"?>\n<root><a>1</a></root>\n") == 0);
    EXPECT("doc.xml", "text/xml", "xml");
    /* Text named like an image is still text. */
    REQUIRE(write_str("fake.png", "this is not a picture\n") == 0);
    EXPECT("fake.png", "text/plain", "text");

    /* Over the 1 MiB sample: libmagic sees a cut-off JSON document and
     * says text; the extension still makes it json. */
    REQUIRE(write_str("big.json", "[\n") == 0);
    {
        char path[512];
        int fd;
        path_of("big.json", path);
        fd = open(path, O_WRONLY | O_APPEND | O_CLOEXEC);
        REQUIRE(fd >= 0);
        memset(big, ' ', sizeof(big));
        memcpy(big, "{\"k\": 12345},", 13);
        big[sizeof(big) - 1] = '\n';
        for (int i = 0; i < 600; i++)
            REQUIRE(write(fd, big, sizeof(big)) == (ssize_t)sizeof(big));
        REQUIRE(write(fd, "{}]\n", 4) == 4);
        close(fd);
    }
    EXPECT("big.json", "application/json", "json");
}

static void test_detect_empty(void)
{
    REQUIRE(write_file("empty.bin", "", 0) == 0);
    EXPECT("empty.bin", "text/plain", "text");
    REQUIRE(write_file("empty.csv", "", 0) == 0);
    EXPECT("empty.csv", "text/csv", "csv");
}

static void test_detect_binary_formats(void)
{
    static const char pdf[] = "%PDF-1.4\n%\xE2\xE3\xCF\xD3\n1 0 obj\n<< >>\n"
                              "endobj\ntrailer\n<< >>\n%%EOF\n";
    REQUIRE(write_file("pic.png", png_1x1, sizeof(png_1x1)) == 0);
    EXPECT("pic.png", "image/png", "image");
    /* An image named .csv is still an image. */
    REQUIRE(write_file("pic.csv", png_1x1, sizeof(png_1x1)) == 0);
    EXPECT("pic.csv", "image/png", "image");
    REQUIRE(write_file("doc.pdf", pdf, sizeof(pdf) - 1) == 0);
    EXPECT("doc.pdf", "application/pdf", "pdf");
    REQUIRE(write_file("x.gz", gzip_hello, sizeof(gzip_hello)) == 0);
    EXPECT("x.gz", "application/gzip", "archive");
    /* A gzip is never a workbook. */
    REQUIRE(write_file("gz.xlsx", gzip_hello, sizeof(gzip_hello)) == 0);
    EXPECT("gz.xlsx", "application/gzip", "archive");
    /* Random-looking bytes are binary whatever the name. */
    {
        unsigned char junk[512];
        for (size_t i = 0; i < sizeof(junk); i++)
            junk[i] = (unsigned char)((i * 131u + 7u) ^ (i >> 3));
        junk[0] = 0x00;
        junk[1] = 0xFE;
        REQUIRE(write_file("junk.csv", junk, sizeof(junk)) == 0);
        EXPECT("junk.csv", "application/octet-stream", "binary");
        REQUIRE(write_file("junk.parquet", junk, sizeof(junk)) == 0);
        EXPECT("junk.parquet", "application/octet-stream", "binary");
    }
}

static void test_detect_elf_named_png(void)
{
    unsigned char head[1024];
    ssize_t n;
    int fd = open("/bin/true", O_RDONLY | O_CLOEXEC);
    REQUIRE(fd >= 0);
    n = read(fd, head, sizeof(head));
    close(fd);
    REQUIRE(n == (ssize_t)sizeof(head));
    REQUIRE(write_file("evil.png", head, sizeof(head)) == 0);
    {
        char m[IPD_MIME_MAX], t[IPD_FILE_TYPE_MAX];
        detect_as("evil.png", "evil.png", m, t);
        CHECK_STR(t, "binary");
        CHECK(strncmp(m, "application/x-", 14) == 0);
        CHECK(strncmp(m, "image/", 6) != 0);
        detect_as("evil.png", "evil.csv", m, t);
        CHECK_STR(t, "binary");
        detect_as("evil.png", "evil.py", m, t);
        CHECK_STR(t, "binary");
    }
}

static void test_detect_zip_and_office(void)
{
    /* The order Excel writes: libmagic 5.44 finds xl/ in the third or
     * fourth entry and names the workbook. */
    static const struct zip_entry xlsx[] = {
        {"[Content_Types].xml", CT_XML},
        {"_rels/.rels", RELS_XML},
        {"xl/workbook.xml", WB_XML},
    };
    /* An order libmagic's OOXML test does not follow (xl/ second): it says
     * application/zip, and the extension refines that to excel. */
    static const struct zip_entry xlsx2[] = {
        {"[Content_Types].xml", CT_XML},
        {"xl/workbook.xml", WB_XML},
        {"_rels/.rels", RELS_XML},
        {"docProps/app.xml", "<Properties/>"},
    };
    static const struct zip_entry plain[] = {
        {"a.txt", "hello\n"},
        {"b/c.csv", "a,b\n1,2\n"},
    };
    const char *sheet =
        "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet";

    REQUIRE(write_zip("book.xlsx", xlsx, IPD_ARRAY_LEN(xlsx)) == 0);
    EXPECT("book.xlsx", sheet, "excel");
    /* libmagic recognises the workbook whatever its name. */
    REQUIRE(write_zip("book.bin", xlsx, IPD_ARRAY_LEN(xlsx)) == 0);
    EXPECT("book.bin", sheet, "excel");
    REQUIRE(write_zip("book2.xlsx", xlsx2, IPD_ARRAY_LEN(xlsx2)) == 0);
    EXPECT("book2.xlsx", sheet, "excel");
    {
        char m[IPD_MIME_MAX], t[IPD_FILE_TYPE_MAX];
        detect_as("book2.xlsx", "book2.zip", m, t);
        CHECK_STR(m, "application/zip");
        CHECK_STR(t, "archive");
    }
    REQUIRE(write_zip("files.zip", plain, IPD_ARRAY_LEN(plain)) == 0);
    EXPECT("files.zip", "application/zip", "archive");
    /* A zip named .csv stays an archive. */
    REQUIRE(write_zip("files.csv", plain, IPD_ARRAY_LEN(plain)) == 0);
    EXPECT("files.csv", "application/zip", "archive");
}

static void test_detect_sqlite(void)
{
    char path[512];
    sqlite3 *db = NULL;
    path_of("app.db", path);
    REQUIRE(sqlite3_open(path, &db) == SQLITE_OK);
    CHECK(sqlite3_exec(db, "CREATE TABLE t(x); INSERT INTO t VALUES (1);", NULL,
                       NULL, NULL) == SQLITE_OK);
    sqlite3_close(db);
    EXPECT("app.db", "application/vnd.sqlite3", "database");
    {
        char m[IPD_MIME_MAX], t[IPD_FILE_TYPE_MAX];
        detect_as("app.db", "app.csv", m, t);
        CHECK_STR(t, "database");
    }
}

static void test_detect_parquet(void)
{
    /* Header magic, a (meaningless) footer, its length, footer magic. */
    static const unsigned char pq[] = {
        'P',  'A',  'R',  '1',  0x15, 0x04, 0x15, 0x00, 0x15, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x03, 0x00, 0x00, 0x00, 'P',  'A',  'R',  '1',
    };
    REQUIRE(write_file("t.parquet", pq, sizeof(pq)) == 0);
    EXPECT("t.parquet", "application/vnd.apache.parquet", "parquet");
    /* The extension is not needed: the content says it. */
    REQUIRE(write_file("t.bin", pq, sizeof(pq)) == 0);
    EXPECT("t.bin", "application/vnd.apache.parquet", "parquet");
    /* Header magic alone is not enough. */
    REQUIRE(write_file("half.parquet", pq, sizeof(pq) - 1) == 0);
    {
        char m[IPD_MIME_MAX], t[IPD_FILE_TYPE_MAX];
        detect_as("half.parquet", "half.parquet", m, t);
        CHECK(strcmp(t, "parquet") != 0);
    }
}

static void test_detect_keeps_offset(void)
{
    char path[512], m[IPD_MIME_MAX], t[IPD_FILE_TYPE_MAX];
    int fd;
    REQUIRE(write_str("off.csv", "a,b\n1,2\n3,4\n") == 0);
    path_of("off.csv", path);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    REQUIRE(fd >= 0);
    CHECK(lseek(fd, 5, SEEK_SET) == 5);
    CHECK_INT(ipd_filetype_detect(ft_shared, fd, "off.csv", m, t), IPD_OK);
    CHECK_STR(t, "csv");
    CHECK_INT(lseek(fd, 0, SEEK_CUR), 5);
    /* And it did not close it. */
    CHECK(fcntl(fd, F_GETFD) >= 0);
    close(fd);
}

static void test_detect_bad_fd(void)
{
    char m[IPD_MIME_MAX], t[IPD_FILE_TYPE_MAX];
    int p[2];
    CHECK_INT(ipd_filetype_detect(ft_shared, -1, "x.csv", m, t), IPD_ERR_IO);
    /* A pipe cannot be pread. */
    REQUIRE(pipe(p) == 0);
    CHECK_INT(ipd_filetype_detect(ft_shared, p[0], "x.csv", m, t), IPD_ERR_IO);
    close(p[0]);
    close(p[1]);
}

/* ---- threads ----------------------------------------------------------- */

#define N_THREADS 16
#define N_ROUNDS 25

static const struct {
    const char *name;
    const char *type;
} thread_files[] = {
    {"sales.csv", "csv"},   {"pic.png", "image"},   {"obj.json", "json"},
    {"evil.png", "binary"}, {"book.xlsx", "excel"}, {"script.py", "python"},
};

static void *thread_main(void *arg)
{
    size_t *bad = arg;
    for (int r = 0; r < N_ROUNDS; r++) {
        for (size_t i = 0; i < IPD_ARRAY_LEN(thread_files); i++) {
            char path[512], m[IPD_MIME_MAX], t[IPD_FILE_TYPE_MAX];
            int fd;
            path_of(thread_files[i].name, path);
            fd = open(path, O_RDONLY | O_CLOEXEC);
            if (fd < 0 ||
                ipd_filetype_detect(ft_shared, fd, thread_files[i].name, m,
                                    t) != IPD_OK ||
                strcmp(t, thread_files[i].type) != 0)
                (*bad)++;
            if (fd >= 0)
                close(fd);
        }
    }
    return NULL;
}

/* More threads than pooled handles: some wait, all get the same answers. */
static void test_detect_threads(void)
{
    pthread_t th[N_THREADS];
    size_t bad[N_THREADS] = {0};
    for (size_t i = 0; i < N_THREADS; i++)
        REQUIRE(pthread_create(&th[i], NULL, thread_main, &bad[i]) == 0);
    for (size_t i = 0; i < N_THREADS; i++) {
        pthread_join(th[i], NULL);
        CHECK_INT(bad[i], 0);
    }
}

/* Mappings of a compiled magic database (a path ending in ".mgc") in
 * this process. */
static size_t mgc_mappings(void)
{
    char line[1024];
    size_t n = 0;
    FILE *f = fopen("/proc/self/maps", "r");
    CHECK(f != NULL);
    if (!f)
        return 0;
    while (fgets(line, sizeof(line), f)) {
        size_t len = strcspn(line, "\n");
        if (len >= 4 && memcmp(line + len - 4, ".mgc", 4) == 0)
            n++;
    }
    fclose(f);
    return n;
}

/* One handle per online CPU, at least 2 and at most 8 (the pool's size). */
static size_t pool_size_want(void)
{
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    return cpus < 2 ? 2 : cpus > 8 ? 8 : (size_t)cpus;
}

/*
 * Issue 20 item 11: the pool grew a handle whenever more detections than
 * ever before ran at once, and each handle mapped the 8 MB database again
 * and filled libmagic's caches: a step of about 11 MB of the service's RSS
 * at a random time, hours into a run.  The pool is made whole at
 * ipd_filetype_new, one handle per CPU, and its handles share one mapping
 * of the database: many threads detecting at once (test_detect_threads
 * ran 16 on ft_shared) add no handle and no mapping.
 */
static void test_pool_made_once(void)
{
    struct ipd_filetype *ft = NULL;
    size_t maps0 = mgc_mappings();

    CHECK_INT(ipd_filetype_handles(ft_shared), pool_size_want());
    CHECK_INT(maps0, 1);
    CHECK_INT(ipd_filetype_new(&ft), IPD_OK);
    CHECK_INT(ipd_filetype_handles(ft), pool_size_want());
    /* A pool of its own maps the database once more, and only once. */
    CHECK_INT(mgc_mappings(), maps0 + 1);
    ipd_filetype_free(ft);
    CHECK_INT(mgc_mappings(), maps0);
}

/* A pool under MAGIC=LIST: the detected MIME type of "INTERPDTEST\n" and
 * the mappings of a compiled database its handles added. */
static void pool_with_magic(const char *list, char mime[IPD_MIME_MAX],
                            size_t *maps)
{
    struct ipd_filetype *ft = NULL;
    char t[IPD_FILE_TYPE_MAX];
    size_t maps0 = mgc_mappings();

    mime[0] = '\0';
    *maps = 0;
    REQUIRE(setenv("MAGIC", list, 1) == 0);
    CHECK_INT(ipd_filetype_new(&ft), IPD_OK);
    unsetenv("MAGIC");
    if (!ft)
        return;
    *maps = mgc_mappings() - maps0;
    CHECK_INT(ipd_filetype_detect_buf(ft, "INTERPDTEST\n", 12, NULL, 12, "x",
                                      mime, t),
              IPD_OK);
    ipd_filetype_free(ft);
}

/* The shared mapping keeps libmagic's semantics: a text magic file with
 * entries on the path (only magic_load compiles it) makes every handle load
 * its own, and its entries answer; one with only comments is skipped. */
static void test_pool_text_magic(void)
{
    static const char entry[] = "0 string INTERPDTEST interpd test\n"
                                "!:mime text/x-interpd-test\n";
    static const char comments[] = "# local magic\n\n  # none yet\n";
    char list[1200], p1[512], p2[512], mime[IPD_MIME_MAX];
    size_t maps = 0;

    REQUIRE(write_file("local.magic", entry, strlen(entry)) == 0);
    REQUIRE(write_file("empty.magic", comments, strlen(comments)) == 0);
    path_of("local.magic", p1);
    path_of("empty.magic", p2);

    snprintf(list, sizeof(list), "%s:/usr/share/misc/magic", p1);
    pool_with_magic(list, mime, &maps);
    CHECK_STR(mime, "text/x-interpd-test");
    CHECK_INT(maps, pool_size_want());

    snprintf(list, sizeof(list), "%s:/usr/share/misc/magic", p2);
    pool_with_magic(list, mime, &maps);
    CHECK_STR(mime, "text/plain");
    CHECK_INT(maps, 1);
}

static void test_new_free(void)
{
    struct ipd_filetype *ft = NULL;
    CHECK_INT(ipd_filetype_new(&ft), IPD_OK);
    CHECK(ft != NULL);
    ipd_filetype_free(ft);
    ipd_filetype_free(NULL);
}

static void setup(void)
{
    REQUIRE(ipd_filetype_new(&ft_shared) == IPD_OK);
}

/* Remove the scratch directory (flat: only files). */
static void teardown(void)
{
    static const char *const names[] = {
        "sales.csv",    "data.tsv",  "obj.json",    "rows.jsonl",  "script.py",
        "README.md",    "conf.yaml", "notes.txt",   "noext",       "doc.xml",
        "fake.png",     "big.json",  "empty.bin",   "empty.csv",   "pic.png",
        "pic.csv",      "doc.pdf",   "x.gz",        "gz.xlsx",     "junk.csv",
        "junk.parquet", "evil.png",  "book.xlsx",   "book.bin",    "book2.xlsx",
        "files.zip",    "files.csv", "app.db",      "t.parquet",   "t.bin",
        "half.parquet", "off.csv",   "local.magic", "empty.magic",
    };
    char path[512];
    ipd_filetype_free(ft_shared);
    ft_shared = NULL;
    if (!tmpdir[0])
        return;
    for (size_t i = 0; i < IPD_ARRAY_LEN(names); i++) {
        path_of(names[i], path);
        unlink(path);
    }
    if (rmdir(tmpdir) != 0)
        fprintf(stderr, "rmdir %s: %s\n", tmpdir, strerror(errno));
}

TEST_MAIN(T(test_classify_table), T(test_classify_long_inputs),
          T(test_sanitize_keeps_plain_names), T(test_sanitize_strips_paths),
          T(test_sanitize_controls), T(test_sanitize_keeps_bidi),
          T(test_sanitize_whitespace), T(test_sanitize_rejects_bad_utf8),
          T(test_sanitize_length), T(test_content_disposition),
          T(test_content_disposition_long), T(setup), T(test_new_free),
          T(test_detect_text_formats), T(test_detect_empty),
          T(test_detect_binary_formats), T(test_detect_elf_named_png),
          T(test_detect_zip_and_office), T(test_detect_sqlite),
          T(test_detect_parquet), T(test_detect_keeps_offset),
          T(test_detect_bad_fd), T(test_detect_threads), T(test_pool_made_once),
          T(test_pool_text_magic), T(teardown))
