/*
 * filetype.c - the pure parts of filetype.h: libmagic's MIME type and the
 * filename reduced to a category, filename sanitising and the
 * Content-Disposition header.  No libmagic here (filetype_magic.c has it),
 * so all of this is unit-tested without the magic database.
 *
 * Categories (CONTRACT.md "file_type"), and what puts a file in each:
 *
 *   csv        text + .csv, or libmagic text/csv
 *   tsv        text + .tsv/.tab
 *   json       text + .json, or libmagic application/json
 *   jsonl      text + .jsonl/.ndjson, or libmagic application/x-ndjson
 *   xml        text + .xml, or libmagic text/xml, application/xml, *+xml
 *   yaml       text + .yaml/.yml (libmagic has no YAML test)
 *   markdown   text + .md/.markdown (libmagic has no Markdown test)
 *   python     text + .py, or libmagic text/x-script.python
 *   html       text + .html/.htm, or libmagic text/html
 *   notebook   text + .ipynb (Jupyter notebooks are JSON)
 *   text       any other text, and the empty file
 *   pdf        application/pdf
 *   image      image/..., whatever the name
 *   audio      audio/..., application/ogg
 *   video      video/...
 *   excel      OOXML/ODF/legacy spreadsheets; zip + .xlsx; OLE2 + .xls
 *   word       OOXML/ODF/legacy documents; zip + .docx; OLE2 + .doc
 *   powerpoint OOXML/ODF/legacy slides; zip + .pptx; OLE2 + .ppt
 *   parquet    application/vnd.apache.parquet (filetype_magic.c turns
 *              libmagic's octet-stream into that when the file starts and
 *              ends with "PAR1")
 *   archive    zip, gzip, tar, bzip2, xz, 7z, rar, zstd, ... (a zip named
 *              .xlsx/.docx/.pptx is refined as above instead)
 *   database   SQLite
 *   binary     everything else, ELF executables included
 *
 * The one rule that matters for safety: the content decides the family and
 * the extension only picks a member of that family.  Text named .png is
 * "text"; an ELF named .png or .csv is "binary"; bytes libmagic calls
 * application/octet-stream stay "binary" whatever the name.
 *
 * The MIME type follows the same rule: libmagic's answer, unless the
 * extension chose the category, in which case it is that category's usual
 * type (text/plain + .csv = text/csv).  Two libmagic-only spellings are
 * normalised: text/x-script.python is text/x-python; parameters
 * ("; charset=") are dropped and everything is lowercased.
 *
 * The empty file (libmagic: application/x-empty or inode/x-empty) is
 * "text", text/plain: it is valid as any text format, so a text extension
 * still refines it (an empty .csv is csv), but it is never called binary
 * or an image.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../service/common/util.h"
#include "filetype.h"

#define OCTET_STREAM "application/octet-stream"
#define EXT_MAX 16 /* longest extension we look at, NUL included */

/* Which MIME family the content is in; the extension refines within it. */
enum family {
    FAM_TEXT,  /* any text: refined by text extensions */
    FAM_ZIP,   /* plain zip: refined by OOXML extensions */
    FAM_OLE,   /* OLE2 compound file: refined by legacy Office extensions */
    FAM_OTHER, /* decided by the MIME type alone */
};

struct ext_rule {
    const char *ext;  /* lowercase, without the dot */
    const char *type; /* category */
    const char *mime; /* the MIME type that goes with it */
};

/* Extensions that refine text content. */
static const struct ext_rule text_exts[] = {
    {"csv", "csv", "text/csv"},
    {"tsv", "tsv", "text/tab-separated-values"},
    {"tab", "tsv", "text/tab-separated-values"},
    {"json", "json", "application/json"},
    {"jsonl", "jsonl", "application/x-ndjson"},
    {"ndjson", "jsonl", "application/x-ndjson"},
    {"xml", "xml", "text/xml"},
    {"yaml", "yaml", "application/yaml"},
    {"yml", "yaml", "application/yaml"},
    {"md", "markdown", "text/markdown"},
    {"markdown", "markdown", "text/markdown"},
    {"py", "python", "text/x-python"},
    {"html", "html", "text/html"},
    {"htm", "html", "text/html"},
    {"ipynb", "notebook", "application/x-ipynb+json"},
};

/* Extensions that refine a plain zip (OOXML is a zip; libmagic names it
 * only when the entries come in the order it expects). */
static const struct ext_rule zip_exts[] = {
    {"xlsx", "excel",
     "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"},
    {"docx", "word",
     "application/vnd.openxmlformats-officedocument.wordprocessingml.document"},
    {"pptx", "powerpoint",
     "application/"
     "vnd.openxmlformats-officedocument.presentationml.presentation"},
};

/* Extensions that refine an OLE2 compound file libmagic could not name. */
static const struct ext_rule ole_exts[] = {
    {"xls", "excel", "application/vnd.ms-excel"},
    {"doc", "word", "application/msword"},
    {"ppt", "powerpoint", "application/vnd.ms-powerpoint"},
};

struct mime_rule {
    const char *mime; /* exact, lowercase */
    const char *type;
};

/* Content that is text although its type is not under text/. */
static const char *const text_like[] = {
    "application/json",
    "application/x-ndjson",
    "application/xml",
    "application/javascript",
    "application/yaml",
    "application/x-yaml",
    "application/x-wine-extension-ini",
    "application/x-setupscript",
};

/* Specific text types libmagic recognises by content. */
static const struct mime_rule text_mimes[] = {
    {"text/csv", "csv"},
    {"application/json", "json"},
    {"application/x-ndjson", "jsonl"},
    {"text/xml", "xml"},
    {"application/xml", "xml"},
    {"text/html", "html"},
    {"text/x-python", "python"},
    {"text/markdown", "markdown"},
    {"application/yaml", "yaml"},
    {"application/x-yaml", "yaml"},
    {"text/yaml", "yaml"},
    {"text/tab-separated-values", "tsv"},
};

/* Non-text types that decide the category alone. */
static const struct mime_rule other_mimes[] = {
    {"application/pdf", "pdf"},
    {"application/ogg", "audio"},
    {"application/vnd.sqlite3", "database"},
    {"application/x-sqlite3", "database"},
    {"application/vnd.apache.parquet", "parquet"},
    {"application/x-parquet", "parquet"},
    {"application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
     "excel"},
    {"application/vnd.ms-excel", "excel"},
    {"application/vnd.oasis.opendocument.spreadsheet", "excel"},
    {"application/vnd.oasis.opendocument.spreadsheet-template", "excel"},
    {"application/vnd.sun.xml.calc", "excel"},
    {"application/vnd.openxmlformats-officedocument.wordprocessingml.document",
     "word"},
    {"application/msword", "word"},
    {"application/vnd.oasis.opendocument.text", "word"},
    {"application/vnd.sun.xml.writer", "word"},
    {"application/vnd.openxmlformats-officedocument.presentationml."
     "presentation",
     "powerpoint"},
    {"application/vnd.ms-powerpoint", "powerpoint"},
    {"application/vnd.oasis.opendocument.presentation", "powerpoint"},
    {"application/vnd.sun.xml.impress", "powerpoint"},
    {"application/gzip", "archive"},
    {"application/x-gzip", "archive"},
    {"application/x-tar", "archive"},
    {"application/x-gtar", "archive"},
    {"application/x-ustar", "archive"},
    {"application/x-bzip", "archive"},
    {"application/x-bzip2", "archive"},
    {"application/x-xz", "archive"},
    {"application/x-7z-compressed", "archive"},
    {"application/x-rar", "archive"},
    {"application/vnd.rar", "archive"},
    {"application/x-rar-compressed", "archive"},
    {"application/zstd", "archive"},
    {"application/x-zstd", "archive"},
    {"application/x-lzip", "archive"},
    {"application/x-lzma", "archive"},
    {"application/x-lz4", "archive"},
    {"application/x-compress", "archive"},
    {"application/x-cpio", "archive"},
    {"application/x-archive", "archive"},
    {"application/java-archive", "archive"},
    {"application/x-lzh-compressed", "archive"},
    {"application/x-lha", "archive"},
    {"application/x-arj", "archive"},
    {"application/vnd.ms-cab-compressed", "archive"},
};

static const char *const zip_mimes[] = {"application/zip", "application/x-zip"};

/* OLE2 containers libmagic did not look inside (or could not name). */
static const char *const ole_mimes[] = {
    "application/x-ole-storage",
    "application/cdfv2",
    "application/x-cdf",
    "application/vnd.ms-office",
};

static bool in_list(const char *s, const char *const *list, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(s, list[i]) == 0)
            return true;
    return false;
}

static bool has_prefix(const char *s, const char *prefix)
{
    return strncmp(s, prefix, strlen(prefix)) == 0;
}

static bool has_suffix(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

static char ascii_lower(char c)
{
    return c >= 'A' && c <= 'Z' ? (char)(c - 'A' + 'a') : c;
}

static bool is_ascii_space(unsigned char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' ||
           c == '\r';
}

/* Copy at most n-1 bytes and always NUL-terminate (strncpy is banned, and
 * truncates without the NUL). */
static void copy_str(char *dst, size_t n, const char *src)
{
    size_t len = strlen(src);
    if (len >= n)
        len = n - 1;
    memcpy(dst, src, len);
    dst[len] = '\0';
}

/* libmagic's answer as a bare lowercase type/subtype; a missing, empty or
 * oversized answer is application/octet-stream. */
static void normalize_mime(const char *in, char out[IPD_MIME_MAX])
{
    size_t n = 0;
    if (!in)
        in = "";
    while (in[n] && in[n] != ';' && !is_ascii_space((unsigned char)in[n]))
        n++;
    if (n == 0 || n >= IPD_MIME_MAX || !memchr(in, '/', n))
        n = 0;
    for (size_t i = 0; i < n; i++)
        out[i] = ascii_lower(in[i]);
    out[n] = '\0';
    if (n == 0)
        copy_str(out, IPD_MIME_MAX, OCTET_STREAM);
    else if (strcmp(out, "text/x-script.python") == 0)
        copy_str(out, IPD_MIME_MAX, "text/x-python");
}

/* The lowercase extension of the last path component of filename, or ""
 * when there is none: no dot, a leading dot only (".bashrc"), or longer
 * than any extension we know. */
static void extension(const char *filename, char out[EXT_MAX])
{
    const char *base = filename, *dot = NULL;
    size_t i = 0;
    for (const char *p = filename; p && *p; p++) {
        if (*p == '/' || *p == '\\') {
            base = p + 1;
            dot = NULL;
        } else if (*p == '.') {
            dot = p;
        }
    }
    if (dot && dot != base && strlen(dot + 1) < EXT_MAX)
        for (const char *p = dot + 1; *p; p++)
            out[i++] = ascii_lower(*p);
    out[i] = '\0';
}

static const struct ext_rule *find_ext(const struct ext_rule *rules, size_t n,
                                       const char *ext)
{
    if (!ext[0])
        return NULL;
    for (size_t i = 0; i < n; i++)
        if (strcmp(rules[i].ext, ext) == 0)
            return &rules[i];
    return NULL;
}

static const char *find_mime(const struct mime_rule *rules, size_t n,
                             const char *mime)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(rules[i].mime, mime) == 0)
            return rules[i].type;
    return NULL;
}

static enum family family_of(const char *mime)
{
    if (has_prefix(mime, "text/") || has_prefix(mime, "message/"))
        return FAM_TEXT;
    if (in_list(mime, text_like, IPD_ARRAY_LEN(text_like)))
        return FAM_TEXT;
    /* RDF, KML, TTML...; SVG (image/svg+xml) never gets here: the caller
     * sorts out image/... first. */
    if (has_prefix(mime, "application/") && has_suffix(mime, "+xml"))
        return FAM_TEXT;
    if (in_list(mime, zip_mimes, IPD_ARRAY_LEN(zip_mimes)))
        return FAM_ZIP;
    if (in_list(mime, ole_mimes, IPD_ARRAY_LEN(ole_mimes)))
        return FAM_OLE;
    return FAM_OTHER;
}

/* Text: the extension picks the format; without a known one, libmagic's
 * specific answer does; otherwise it is plain "text".  *mime and *type are
 * borrowed (static or magic). */
static void classify_text(const char *magic, const char *ext, const char **mime,
                          const char **type)
{
    const struct ext_rule *r =
        find_ext(text_exts, IPD_ARRAY_LEN(text_exts), ext);
    const char *t = NULL;
    if (r) {
        *mime = r->mime;
        *type = r->type;
    } else {
        t = find_mime(text_mimes, IPD_ARRAY_LEN(text_mimes), magic);
        if (!t && has_suffix(magic, "+xml"))
            t = "xml";
        *mime = magic;
        *type = t ? t : "text";
    }
}

void ipd_filetype_classify(const char *magic_mime, const char *filename,
                           char mime[IPD_MIME_MAX],
                           char file_type[IPD_FILE_TYPE_MAX])
{
    char magic[IPD_MIME_MAX];
    char ext[EXT_MAX];
    const struct ext_rule *r = NULL;
    const char *m = magic, *t = NULL;

    normalize_mime(magic_mime, magic);
    extension(filename, ext);

    if (strcmp(magic, "application/x-empty") == 0 ||
        strcmp(magic, "inode/x-empty") == 0)
        copy_str(magic, sizeof(magic), "text/plain");

    /* Media first: image/svg+xml is an image, not XML. */
    if (has_prefix(magic, "image/"))
        t = "image";
    else if (has_prefix(magic, "audio/"))
        t = "audio";
    else if (has_prefix(magic, "video/"))
        t = "video";
    if (t)
        goto out;

    switch (family_of(magic)) {
    case FAM_TEXT: classify_text(magic, ext, &m, &t); break;
    case FAM_ZIP:
        r = find_ext(zip_exts, IPD_ARRAY_LEN(zip_exts), ext);
        t = r ? r->type : "archive";
        break;
    case FAM_OLE:
        r = find_ext(ole_exts, IPD_ARRAY_LEN(ole_exts), ext);
        t = r ? r->type : "binary";
        break;
    case FAM_OTHER:
        t = find_mime(other_mimes, IPD_ARRAY_LEN(other_mimes), magic);
        if (!t)
            t = "binary";
        break;
    }
    if (r)
        m = r->mime;

out:
    copy_str(mime, IPD_MIME_MAX, m);
    copy_str(file_type, IPD_FILE_TYPE_MAX, t);
}

/* The length of the C1 control (U+0080..U+009F, encoded C2 80..C2 9F) at
 * s[0..n), or 0 when there is none. */
static size_t c1_len(const unsigned char *s, size_t n)
{
    return n >= 2 && s[0] == 0xC2 && s[1] >= 0x80 && s[1] <= 0x9F ? 2 : 0;
}

enum ipd_err ipd_filename_sanitize(const char *name, size_t name_len,
                                   char out[IPD_FILENAME_MAX])
{
    enum ipd_err rc = IPD_OK;
    const unsigned char *s = (const unsigned char *)name;
    size_t start = 0, end = name_len, o = 0;
    char tmp[IPD_FILENAME_MAX];

    out[0] = '\0';
    if (!name || !ipd_utf8_valid(name, name_len)) {
        rc = IPD_ERR_INVALID;
        goto out;
    }
    /* Only the last component: a client's path never reaches the disk or
     * another user's listing.  '/' and '\\' never occur inside a UTF-8
     * multibyte sequence, so scanning bytes is safe. */
    for (size_t i = 0; i < name_len; i++)
        if (s[i] == '/' || s[i] == '\\')
            start = i + 1;
    /* Trim before replacing controls, so "report.csv\r\n" (a pasted name)
     * becomes "report.csv" rather than "report.csv__". */
    while (start < end && is_ascii_space(s[start]))
        start++;
    while (end > start && is_ascii_space(s[end - 1]))
        end--;
    /* Controls become '_': a NUL would cut the name short in every C API
     * and header downstream ("evil.png\0.csv"), and C0/C1 controls can
     * break logs and terminals.  Count output bytes before writing. */
    for (size_t i = start; i < end;) {
        size_t c1 = c1_len(s + i, end - i);
        char c = (char)s[i];
        if (c1) {
            c = '_';
            i += c1;
        } else {
            if (s[i] < 0x20 || s[i] == 0x7F)
                c = '_';
            i++;
        }
        if (o >= IPD_FILENAME_MAX - 1) {
            rc = IPD_ERR_TOO_LARGE;
            goto out;
        }
        tmp[o++] = c;
    }
    tmp[o] = '\0';
    if (o == 0 || strcmp(tmp, ".") == 0 || strcmp(tmp, "..") == 0) {
        rc = IPD_ERR_INVALID;
        goto out;
    }
    memcpy(out, tmp, o + 1);

out:
    return rc;
}

/* RFC 5987 attr-char: ALPHA / DIGIT / "!#$&+-.^_`|~". */
static bool is_attr_char(unsigned char c)
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
           (c >= '0' && c <= '9') || (c && strchr("!#$&+-.^_`|~", c));
}

char *ipd_content_disposition(const char *filename)
{
    static const char hex[] = "0123456789ABCDEF";
    static const char head[] = "attachment; filename=\"";
    static const char mid[] = "\"; filename*=UTF-8''";
    const unsigned char *s = (const unsigned char *)filename;
    size_t n, o = 0;
    char *out = NULL;

    IPD_ASSERT(filename);
    n = strlen(filename);
    IPD_ASSERT(n < SIZE_MAX / 8);
    /* Fallback at most n bytes, the encoded form at most 3n. */
    out = ipd_xmalloc(sizeof(head) + sizeof(mid) + 4 * n + 1);

    memcpy(out + o, head, sizeof(head) - 1);
    o += sizeof(head) - 1;
    /* One '_' per non-ASCII character (continuation bytes add nothing), so
     * the fallback has the name's shape.  '%' goes too: some clients
     * percent-decode the plain filename parameter. */
    for (size_t i = 0; i < n; i++) {
        unsigned char c = s[i];
        if (c >= 0x80 && c <= 0xBF)
            continue;
        if (c >= 0x80 || c < 0x20 || c == 0x7F || c == '"' || c == '\\' ||
            c == '%')
            c = '_';
        out[o++] = (char)c;
    }
    memcpy(out + o, mid, sizeof(mid) - 1);
    o += sizeof(mid) - 1;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = s[i];
        if (is_attr_char(c)) {
            out[o++] = (char)c;
        } else {
            out[o++] = '%';
            out[o++] = hex[c >> 4];
            out[o++] = hex[c & 0x0F];
        }
    }
    out[o] = '\0';
    return out;
}
