/*
 * test_files.c - the files API: both upload forms, file types, get,
 * content headers, delete, listing and paging, TTLs and expiry, size
 * limits, quotas, and the configuration precedence that sets them.
 */
#include "harness.h"

#include <ctype.h>
#include <fcntl.h>
#include <unistd.h>

static const unsigned char png_1x1[] = {
    0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0x00, 0x00, 0x00, 0x0d,
    0x49, 0x48, 0x44, 0x52, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01,
    0x08, 0x02, 0x00, 0x00, 0x00, 0x90, 0x77, 0x53, 0xde, 0x00, 0x00, 0x00,
    0x0c, 0x49, 0x44, 0x41, 0x54, 0x78, 0x9c, 0x63, 0xf8, 0xcf, 0xc0, 0x00,
    0x00, 0x03, 0x01, 0x01, 0x00, 0xc9, 0xfe, 0x92, 0xef, 0x00, 0x00, 0x00,
    0x00, 0x49, 0x45, 0x4e, 0x44, 0xae, 0x42, 0x60, 0x82};

static const char csv[] = "name,qty,price\nwidget,3,9.99\ngadget,5,19.50\n"
                          "doohickey,12,0.75\n";

#define HOUR 3600
#define DEFAULT_TTL (48 * HOUR)

/* Start a server with extra args and a key of tenant "acme" (*key, free). */
static struct itest_server *start_keyed(const char *const *args, char **key)
{
    struct itest_opts o = {.args = args};
    struct itest_server *s = itest_start(&o);
    *key = NULL;
    if (s && !itest_create_key(s, "acme", false, key, NULL)) {
        test__failed_checks++;
        return s;
    }
    return s;
}

/* expires_at - created_at of a File object; -1 when either is missing,
 * -2 when expires_at is null. */
static int64_t ttl_of(const json_t *f)
{
    const json_t *e = itest_json_get(f, "expires_at");
    if (json_is_null(e))
        return -2;
    const char *ca = itest_json_str(f, "created_at");
    const char *ea = json_string_value(e);
    if (!ca || !ea)
        return -1;
    int64_t c = itest_parse_time(ca), x = itest_parse_time(ea);
    return c < 0 || x < 0 ? -1 : x - c;
}

/* GET /v1/files?<query> into r. */
static long list(struct itest_server *s, const char *key, const char *user,
                 const char *query, struct itest_resp *r)
{
    char *path =
        query ? itest_fmt("/v1/files?%s", query) : itest_fmt("/v1/files");
    long st = itest_request(s, "GET", path, key, user, NULL, NULL, 0, NULL, r);
    free(path);
    return st;
}

static long get_file(struct itest_server *s, const char *key, const char *user,
                     const char *id, const char *suffix, const char *method,
                     struct itest_resp *r)
{
    char *path = itest_fmt("/v1/files/%s%s", id, suffix);
    long st = itest_request(s, method, path, key, user, NULL, NULL, 0, NULL, r);
    free(path);
    return st;
}

static bool attr_char(unsigned char c)
{
    return isalnum(c) || (c && strchr("!#$&+-.^_`|~", c));
}

/* Check the download headers for a stored file f with these bytes. */
static void check_content(struct itest_server *s, const char *key,
                          const char *user, const json_t *f, const void *data,
                          size_t len)
{
    const char *id = itest_json_str(f, "file_id");
    REQUIRE(id);
    struct itest_resp r;
    get_file(s, key, user, id, "/content", "GET", &r);
    CHECK_STATUS(&r, 200);
    CHECKF(r.len == len && !memcmp(r.body, data, len),
           "content of %s: %zu bytes, want %zu bytes as uploaded", id, r.len,
           len);
    CHECK_STR(itest_header(&r, "Content-Type"), itest_json_str(f, "mime_type"));
    char *cl = itest_fmt("%zu", len);
    CHECK_STR(itest_header(&r, "Content-Length"), cl);
    free(cl);
    char *etag = itest_fmt("\"%s\"", itest_json_str(f, "sha256"));
    CHECK_STR(itest_header(&r, "ETag"), etag);
    free(etag);

    const char *cd = itest_header(&r, "Content-Disposition");
    const char *name = itest_json_str(f, "filename");
    CHECKF(cd && !strncasecmp(cd, "attachment;", 11),
           "Content-Disposition \"%s\": want it to start with attachment;",
           cd ? cd : "(none)");
    const char *star = cd ? strstr(cd, "filename*=UTF-8''") : NULL;
    CHECKF(star, "Content-Disposition \"%s\": no filename*=UTF-8''",
           cd ? cd : "(none)");
    if (star && name) {
        /* The encoded name decodes to the stored name and uses nothing but
         * RFC 5987 attr-chars and %XX. */
        const char *p = star + strlen("filename*=UTF-8''");
        char dec[1024];
        size_t n = 0;
        bool clean = true;
        while (*p && *p != ';' && *p != ' ' && n < sizeof(dec) - 1) {
            if (*p == '%' && isxdigit((unsigned char)p[1]) &&
                isxdigit((unsigned char)p[2])) {
                char hex[3] = {p[1], p[2], 0};
                dec[n++] = (char)strtol(hex, NULL, 16);
                p += 3;
            } else {
                clean = clean && attr_char((unsigned char)*p);
                dec[n++] = *p++;
            }
        }
        dec[n] = 0;
        CHECKF(clean, "filename* in \"%s\" has characters outside attr-char",
               cd);
        CHECKF(!strcmp(dec, name),
               "filename* in \"%s\" decodes to \"%s\", "
               "want \"%s\"",
               cd, dec, name);
    }
    for (const char *p = cd; p && *p; p++)
        CHECKF((unsigned char)*p >= 0x20 && (unsigned char)*p < 0x7f,
               "Content-Disposition has raw byte 0x%02x",
               (unsigned)(unsigned char)*p);
    /* A plain filename="..." fallback must be one well-formed quoted
     * string: a stray quote would let the name inject parameters. */
    const char *plain = cd ? strstr(cd, "filename=\"") : NULL;
    if (plain) {
        const char *q = plain + strlen("filename=\"");
        while (*q && *q != '"') {
            if (*q == '\\' && q[1])
                q++;
            q++;
        }
        const char *after = *q ? q + 1 : q;
        while (*after == ' ')
            after++;
        CHECKF(*q == '"' && (*after == ';' || !*after),
               "Content-Disposition \"%s\": the filename=\"...\" "
               "fallback is not one quoted string",
               cd);
    }
    itest_resp_release(&r);
}

static void upload_raw(void)
{
    char *key;
    struct itest_server *s = start_keyed(NULL, &key);
    REQUIRE(s && key);
    static const char text[] = "hello, world\nsecond line\n";
    size_t len = strlen(text);
    struct itest_resp r;
    itest_upload_raw(s, key, "u1", "notes.txt", "text/plain", text, len, NULL,
                     &r);
    CHECK_STATUS(&r, 201);
    CHECK_FILE(r.json, "notes.txt", text, len);
    CHECK_STR(itest_json_str(r.json, "file_type"), "text");
    CHECKF(ttl_of(r.json) == DEFAULT_TTL,
           "expires_at - created_at = %lld, "
           "want 48 h",
           (long long)ttl_of(r.json));
    json_t *up = json_incref(r.json);
    itest_resp_release(&r);

    /* GET answers the same object. */
    get_file(s, key, "u1", itest_json_str(up, "file_id"), "", "GET", &r);
    CHECK_STATUS(&r, 200);
    CHECKF(json_equal(r.json, up),
           "GET %s differs from the upload answer: "
           "%s",
           itest_json_str(up, "file_id"), r.body);
    itest_resp_release(&r);
    check_content(s, key, "u1", up, text, len);

    /* No Content-Type at all is a raw upload too. */
    itest_upload_raw(s, key, "u1", "blob.bin", NULL, "\x01\x02\x03", 3, NULL,
                     &r);
    CHECK_STATUS(&r, 201);
    CHECK_FILE(r.json, "blob.bin", "\x01\x02\x03", 3);
    itest_resp_release(&r);
    json_decref(up);
    free(key);
    itest_stop(s);
}

static void upload_multipart(void)
{
    char *key;
    struct itest_server *s = start_keyed(NULL, &key);
    REQUIRE(s && key);
    struct itest_resp r;
    itest_upload_multipart(s, key, "u1", "data.csv", csv, strlen(csv), NULL,
                           &r);
    CHECK_STATUS(&r, 201);
    CHECK_FILE(r.json, "data.csv", csv, strlen(csv));
    CHECK_STR(itest_json_str(r.json, "file_type"), "csv");
    CHECK_STR(itest_json_str(r.json, "mime_type"), "text/csv");
    CHECKF(ttl_of(r.json) == DEFAULT_TTL, "ttl %lld",
           (long long)ttl_of(r.json));
    if (r.json)
        check_content(s, key, "u1", r.json, csv, strlen(csv));
    itest_resp_release(&r);

    /* A `filename` part overrides the file part's name, before or after. */
    for (int order = 0; order < 2; order++) {
        struct itest_part file = {"file", "ignored.bin", "text/csv",
                                  csv,    strlen(csv),   NULL};
        struct itest_part name = {"filename",    NULL, NULL,
                                  "renamed.csv", 11,   NULL};
        struct itest_part parts[2];
        parts[0] = order ? name : file;
        parts[1] = order ? file : name;
        struct itest_req rq = {0};
        rq.path = "/v1/files";
        rq.key = key;
        rq.user_id = "u1";
        rq.parts = parts;
        rq.nparts = 2;
        itest_do(s, &rq, &r);
        CHECK_STATUS(&r, 201);
        CHECK_FILE(r.json, "renamed.csv", csv, strlen(csv));
        CHECK_STR(itest_json_str(r.json, "file_type"), "csv");
        itest_resp_release(&r);
    }

    /* Binary content survives multipart byte for byte. */
    unsigned char bin[4096];
    itest_pattern_fill(7, 0, bin, sizeof(bin));
    itest_upload_multipart(s, key, "u1", "random.bin", bin, sizeof(bin), NULL,
                           &r);
    CHECK_STATUS(&r, 201);
    CHECK_FILE(r.json, "random.bin", bin, sizeof(bin));
    if (r.json)
        check_content(s, key, "u1", r.json, bin, sizeof(bin));
    itest_resp_release(&r);
    free(key);
    itest_stop(s);
}

static void file_types(void)
{
    char *key;
    struct itest_server *s = start_keyed(NULL, &key);
    REQUIRE(s && key);
    size_t elf_len = 0;
    char *elf = itest_read_file("/bin/true", &elf_len);
    REQUIRE(elf && elf_len > 4 &&
            !memcmp(elf,
                    "\x7f"
                    "ELF",
                    4));
    static const char json[] = "{\"name\": \"x\", \"values\": [1, 2, 3]}\n";
    static const char text[] = "Dear team,\nthe numbers look fine.\n";
    struct {
        const char *name;
        const void *data;
        size_t len;
        const char *type;
        const char *mime; /* NULL: don't check */
    } cases[] = {
        {"data.csv", csv, strlen(csv), "csv", "text/csv"},
        {"x.png", png_1x1, sizeof(png_1x1), "image", "image/png"},
        {"evil.png", elf, elf_len, "binary", NULL},
        {"d.json", json, strlen(json), "json", NULL},
        {"letter.txt", text, strlen(text), "text", NULL},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        for (int form = 0; form < 2; form++) {
            struct itest_resp r;
            if (form)
                itest_upload_multipart(s, key, "u1", cases[i].name,
                                       cases[i].data, cases[i].len, NULL, &r);
            else
                itest_upload_raw(s, key, "u1", cases[i].name,
                                 "application/octet-stream", cases[i].data,
                                 cases[i].len, NULL, &r);
            CHECK_STATUS(&r, 201);
            CHECK_FILE(r.json, cases[i].name, cases[i].data, cases[i].len);
            const char *ft = itest_json_str(r.json, "file_type");
            CHECKF(ft && !strcmp(ft, cases[i].type),
                   "%s (%s): file_type %s, want %s", cases[i].name,
                   form ? "multipart" : "raw", ft ? ft : "(none)",
                   cases[i].type);
            const char *mt = itest_json_str(r.json, "mime_type");
            if (cases[i].mime)
                CHECKF(mt && !strcmp(mt, cases[i].mime),
                       "%s: mime_type %s, want %s", cases[i].name,
                       mt ? mt : "(none)", cases[i].mime);
            if (!strcmp(cases[i].type, "binary"))
                CHECKF(mt && strncmp(mt, "image/", 6),
                       "ELF named .png got mime_type %s", mt ? mt : "(none)");
            itest_resp_release(&r);
        }
    }
    free(elf);
    free(key);
    itest_stop(s);
}

static void special_names_download(void)
{
    char *key;
    struct itest_server *s = start_keyed(NULL, &key);
    REQUIRE(s && key);
    const char *names[] = {"report 2024.csv", "na\"me;x=1.txt",
                           ("gr\xc3\xbc\xc3\x9f"
                            "e.txt"),
                           "100%.txt", "comma,semi;quote'.txt"};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        struct itest_resp r;
        itest_upload_raw(s, key, "u1", names[i], "text/plain", "x\n", 2, NULL,
                         &r);
        CHECK_STATUS(&r, 201);
        CHECK_FILE(r.json, names[i], "x\n", 2);
        if (r.json)
            check_content(s, key, "u1", r.json, "x\n", 2);
        itest_resp_release(&r);
    }
    free(key);
    itest_stop(s);
}

static void delete_file(void)
{
    char *key;
    struct itest_server *s = start_keyed(NULL, &key);
    REQUIRE(s && key);
    struct itest_resp r;
    itest_upload_raw(s, key, "u1", "gone.txt", "text/plain", "bye\n", 4, NULL,
                     &r);
    REQUIRE_STATUS(&r, 201);
    char *id = itest_json_dup(r.json, "file_id");
    itest_resp_release(&r);
    itest_upload_raw(s, key, "u1", "stays.txt", "text/plain", "hi\n", 3, NULL,
                     &r);
    CHECK_STATUS(&r, 201);
    char *other = itest_json_dup(r.json, "file_id");
    itest_resp_release(&r);

    get_file(s, key, "u1", id, "", "DELETE", &r);
    CHECK_STATUS(&r, 204);
    CHECKF(r.len == 0, "204 with a body: %s", r.body);
    itest_resp_release(&r);
    get_file(s, key, "u1", id, "", "GET", &r);
    CHECK_ERROR(&r, 404, "not_found");
    itest_resp_release(&r);
    get_file(s, key, "u1", id, "/content", "GET", &r);
    CHECK_ERROR(&r, 404, "not_found");
    itest_resp_release(&r);
    get_file(s, key, "u1", id, "", "DELETE", &r);
    CHECK_ERROR(&r, 404, "not_found");
    itest_resp_release(&r);

    list(s, key, "u1", NULL, &r);
    CHECK_STATUS(&r, 200);
    json_t *files = itest_json_get(r.json, "files");
    CHECKF(json_array_size(files) == 1 &&
               !strcmp(itest_json_str(json_array_get(files, 0), "file_id")
                           ? itest_json_str(json_array_get(files, 0), "file_id")
                           : "",
                       other),
           "after the delete, want only %s listed: %s", other, r.body);
    itest_resp_release(&r);

    /* Its bytes are gone from disk: one blob left at most. */
    CHECKF(itest_wait_strays_at_most(s, 1, ITEST_CLEANUP_WAIT_MS),
           "the deleted file's bytes stay on disk");

    /* Identical bytes twice are two files; deleting one keeps the other. */
    itest_upload_raw(s, key, "u1", "twin1.txt", "text/plain", "twin\n", 5, NULL,
                     &r);
    CHECK_STATUS(&r, 201);
    char *t1 = itest_json_dup(r.json, "file_id");
    itest_resp_release(&r);
    itest_upload_raw(s, key, "u1", "twin2.txt", "text/plain", "twin\n", 5, NULL,
                     &r);
    CHECK_STATUS(&r, 201);
    char *t2 = itest_json_dup(r.json, "file_id");
    itest_resp_release(&r);
    CHECKF(strcmp(t1, t2), "two uploads got the same id %s", t1);
    get_file(s, key, "u1", t1, "", "DELETE", &r);
    CHECK_STATUS(&r, 204);
    itest_resp_release(&r);
    get_file(s, key, "u1", t2, "/content", "GET", &r);
    CHECK_STATUS(&r, 200);
    CHECKF(r.len == 5 && !memcmp(r.body, "twin\n", 5),
           "the twin's content after deleting the other: %s", r.body);
    itest_resp_release(&r);
    free(t1);
    free(t2);
    free(id);
    free(other);
    free(key);
    itest_stop(s);
}

static void unknown_ids(void)
{
    char *key;
    struct itest_server *s = start_keyed(NULL, &key);
    REQUIRE(s && key);
    const char *ids[] = {"file_aaaaaaaaaaaaaaaaaaaaaaaaaa",
                         "nope",
                         "file_AAAAAAAAAAAAAAAAAAAAAAAAAA",
                         "file_",
                         "key_aaaaaaaaaaaaaaaaaaaaaaaaaa",
                         "..%2F..%2Fmeta.db",
                         "%2E%2E",
                         "file_aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"};
    for (size_t i = 0; i < sizeof(ids) / sizeof(ids[0]); i++) {
        struct itest_resp r;
        get_file(s, key, "u1", ids[i], "", "GET", &r);
        CHECK_ERROR(&r, 404, "not_found");
        itest_resp_release(&r);
        get_file(s, key, "u1", ids[i], "/content", "GET", &r);
        CHECK_ERROR(&r, 404, "not_found");
        itest_resp_release(&r);
        get_file(s, key, "u1", ids[i], "", "DELETE", &r);
        CHECK_ERROR(&r, 404, "not_found");
        itest_resp_release(&r);
    }
    free(key);
    itest_stop(s);
}

/* Upload n small distinct files; ids (new strings) into ids[]. */
static void upload_n(struct itest_server *s, const char *key, size_t n,
                     size_t first, char **ids)
{
    for (size_t i = 0; i < n; i++) {
        char name[32], body[32];
        snprintf(name, sizeof(name), "f%03zu.txt", first + i);
        snprintf(body, sizeof(body), "file %zu\n", first + i);
        struct itest_resp r;
        itest_upload_raw(s, key, "u1", name, "text/plain", body, strlen(body),
                         NULL, &r);
        CHECK_STATUS(&r, 201);
        ids[i] = itest_json_dup(r.json, "file_id");
        itest_resp_release(&r);
    }
}

/* Page through the list with limit; every id in ids[0..n) seen once, in
 * newest-first order of created_at.  Returns the number of pages. */
static size_t page_all(struct itest_server *s, const char *key, int limit,
                       char **ids, size_t n)
{
    size_t *seen = calloc(n, sizeof(*seen));
    char *cursor = NULL;
    size_t pages = 0, total = 0;
    int64_t last_created = INT64_MAX;
    for (;;) {
        char *q = cursor ? itest_fmt("limit=%d&cursor=%s", limit, cursor)
                         : itest_fmt("limit=%d", limit);
        struct itest_resp r;
        list(s, key, "u1", q, &r);
        free(q);
        free(cursor);
        cursor = NULL;
        CHECK_STATUS(&r, 200);
        json_t *files = itest_json_get(r.json, "files");
        const json_t *next = itest_json_get(r.json, "next_cursor");
        CHECKF(json_is_array(files) &&
                   (json_is_null(next) || json_is_string(next)),
               "list page: %s", r.body);
        CHECKF(json_array_size(files) <= (size_t)limit,
               "page of %zu files with limit=%d", json_array_size(files),
               limit);
        size_t i;
        json_t *f;
        json_array_foreach(files, i, f)
        {
            const char *id = itest_json_str(f, "file_id");
            bool known = false;
            for (size_t k = 0; id && k < n; k++) {
                if (!strcmp(ids[k], id)) {
                    seen[k]++;
                    known = true;
                }
            }
            CHECKF(known, "listed unknown file %s", id ? id : "(no id)");
            const char *ca = itest_json_str(f, "created_at");
            int64_t c = ca ? itest_parse_time(ca) : -1;
            CHECKF(c >= 0 && c <= last_created,
                   "not newest first: created_at %s after an older one",
                   ca ? ca : "(none)");
            last_created = c;
            total++;
        }
        pages++;
        if (json_is_string(next))
            cursor = itest_urlencode(json_string_value(next),
                                     strlen(json_string_value(next)));
        bool more = cursor && json_array_size(files) > 0 && pages < 1000;
        itest_resp_release(&r);
        if (!more)
            break;
    }
    free(cursor);
    CHECKF(total == n, "paging with limit=%d visited %zu files, want %zu",
           limit, total, n);
    for (size_t k = 0; k < n; k++)
        CHECKF(seen[k] == 1, "file %s listed %zu times", ids[k], seen[k]);
    free(seen);
    return pages;
}

static void list_and_paging(void)
{
    char *key;
    struct itest_server *s = start_keyed(NULL, &key);
    REQUIRE(s && key);
    struct itest_resp r;
    list(s, key, "u1", NULL, &r);
    CHECK_STATUS(&r, 200);
    CHECKF(json_array_size(itest_json_get(r.json, "files")) == 0 &&
               json_is_null(itest_json_get(r.json, "next_cursor")),
           "empty list: %s", r.body);
    itest_resp_release(&r);

    char *ids[55] = {0};
    upload_n(s, key, 25, 0, ids);
    CHECK_INT(page_all(s, key, 10, ids, 25), 3);
    CHECK_INT(page_all(s, key, 25, ids, 25), 1);
    CHECK_INT(page_all(s, key, 1, ids, 25), 25);

    /* The newest file comes first.  Uploads in the same millisecond may
     * come in either order, so compare creation times, not ids. */
    get_file(s, key, "u1", ids[24], "", "GET", &r);
    char *newest = itest_json_dup(r.json, "created_at");
    itest_resp_release(&r);
    list(s, key, "u1", "limit=1", &r);
    CHECK_STATUS(&r, 200);
    const char *first = itest_json_str(
        json_array_get(itest_json_get(r.json, "files"), 0), "created_at");
    CHECKF(first && !strcmp(first, newest),
           "first listed was created %s, the newest file %s",
           first ? first : "(none)", newest);
    itest_resp_release(&r);
    free(newest);

    /* Default limit 50. */
    upload_n(s, key, 30, 25, ids + 25);
    list(s, key, "u1", NULL, &r);
    CHECK_STATUS(&r, 200);
    CHECKF(json_array_size(itest_json_get(r.json, "files")) == 50 &&
               json_is_string(itest_json_get(r.json, "next_cursor")),
           "default page has %zu files (want 50) and next_cursor %s",
           json_array_size(itest_json_get(r.json, "files")),
           json_is_string(itest_json_get(r.json, "next_cursor")) ? "set"
                                                                 : "unset");
    itest_resp_release(&r);
    CHECK_INT(page_all(s, key, 1000, ids, 55), 1);
    CHECK_INT(page_all(s, key, 50, ids, 55), 2);

    /* Other users see nothing. */
    list(s, key, "u2", NULL, &r);
    CHECK_STATUS(&r, 200);
    CHECK_INT(json_array_size(itest_json_get(r.json, "files")), 0);
    itest_resp_release(&r);
    for (size_t i = 0; i < 55; i++)
        free(ids[i]);
    free(key);
    itest_stop(s);
}

/* Fetch one page after cursor (NULL: the first); appends the ids to seen
 * and returns the next cursor (new, percent-encoded) or NULL. */
static char *fetch_page(struct itest_server *s, const char *key,
                        const char *cursor, int limit, char **seen,
                        size_t *nseen, size_t cap)
{
    char *q = cursor ? itest_fmt("limit=%d&cursor=%s", limit, cursor)
                     : itest_fmt("limit=%d", limit);
    struct itest_resp r;
    list(s, key, "u1", q, &r);
    free(q);
    CHECK_STATUS(&r, 200);
    size_t i;
    json_t *f;
    json_array_foreach(itest_json_get(r.json, "files"), i, f)
    {
        if (*nseen < cap)
            seen[(*nseen)++] = itest_json_dup(f, "file_id");
    }
    const char *next = itest_json_str(r.json, "next_cursor");
    char *out = next ? itest_urlencode(next, strlen(next)) : NULL;
    itest_resp_release(&r);
    return out;
}

/* A cursor stays valid while files are added and deleted: the walk sees
 * every surviving old file once and none of the new ones. */
static void paging_while_changing(void)
{
    char *key;
    struct itest_server *s = start_keyed(NULL, &key);
    REQUIRE(s && key);
    char *ids[25] = {0}, *fresh[3] = {0}, *seen[64] = {0};
    size_t nseen = 0;
    upload_n(s, key, 25, 0, ids);
    char *cursor = fetch_page(s, key, NULL, 10, seen, &nseen, 64);
    CHECKF(cursor && nseen == 10, "first page: %zu files, cursor %s", nseen,
           cursor ? cursor : "(null)");
    upload_n(s, key, 3, 100, fresh);
    struct itest_resp r;
    get_file(s, key, "u1", ids[2] ? ids[2] : "", "", "DELETE", &r);
    CHECK_STATUS(&r, 204);
    itest_resp_release(&r);
    for (int guard = 0; cursor && guard < 10; guard++) {
        char *next = fetch_page(s, key, cursor, 10, seen, &nseen, 64);
        free(cursor);
        cursor = next;
    }
    free(cursor);
    CHECKF(nseen == 24, "the walk saw %zu files, want 24 (25 - 1 deleted)",
           nseen);
    for (size_t k = 0; k < 25; k++) {
        size_t hits = 0;
        for (size_t i = 0; i < nseen; i++)
            hits += ids[k] && !strcmp(seen[i], ids[k]);
        CHECKF(hits == (k == 2 ? 0u : 1u), "old file %zu seen %zu times", k,
               hits);
    }
    for (size_t k = 0; k < 3; k++)
        for (size_t i = 0; i < nseen; i++)
            CHECKF(!fresh[k] || strcmp(seen[i], fresh[k]),
                   "a file added during the walk showed up after the cursor");
    for (size_t i = 0; i < 64; i++)
        free(seen[i]);
    for (size_t i = 0; i < 25; i++)
        free(ids[i]);
    for (size_t i = 0; i < 3; i++)
        free(fresh[i]);
    free(key);
    itest_stop(s);
}

static void list_bad_params(void)
{
    char *key;
    struct itest_server *s = start_keyed(NULL, &key);
    REQUIRE(s && key);
    const char *bad[] = {"limit=0",        "limit=1001",
                         "limit=-1",       "limit=abc",
                         "limit=10x",      "limit=",
                         "limit=1e3",      "limit=99999999999999999999",
                         "cursor=garbage", "cursor=%01%02",
                         "cursor=%00%01",  "limit=5&cursor=xyz"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct itest_resp r;
        list(s, key, "u1", bad[i], &r);
        CHECK_ERROR(&r, 400, "invalid_request");
        itest_resp_release(&r);
    }
    const char *good[] = {"limit=1", "limit=1000", "limit=50"};
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        struct itest_resp r;
        list(s, key, "u1", good[i], &r);
        CHECK_STATUS(&r, 200);
        itest_resp_release(&r);
    }
    free(key);
    itest_stop(s);
}

static void ttl_hours(void)
{
    char *key;
    struct itest_server *s = start_keyed(NULL, &key);
    REQUIRE(s && key);
    struct {
        const char *ttl;
        int64_t want; /* seconds, 0: 400 invalid_request */
    } cases[] = {
        {"1", HOUR},
        {"24", 24 * HOUR},
        {"48", DEFAULT_TTL},
        {"1000", DEFAULT_TTL},
        {"0", 0},
        {"-1", 0},
        {"abc", 0},
        {"", 0},
        {"1h", 0},
        {"1.5", 5400},
        {"nan", 0},
        {"-0.5", 0},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        for (int form = 0; form < 2; form++) {
            struct itest_resp r;
            if (form) {
                itest_upload_multipart(s, key, "u1", "t.txt", "t\n", 2,
                                       cases[i].ttl, &r);
            } else {
                char *q = itest_fmt("ttl_hours=%s", cases[i].ttl);
                itest_upload_raw(s, key, "u1", "t.txt", "text/plain", "t\n", 2,
                                 q, &r);
                free(q);
            }
            if (!cases[i].want) {
                CHECK_ERROR(&r, 400, "invalid_request");
            } else {
                CHECK_STATUS(&r, 201);
                CHECKF(ttl_of(r.json) == cases[i].want,
                       "ttl_hours=%s (%s): expires_at - created_at = %lld, "
                       "want %lld",
                       cases[i].ttl, form ? "multipart" : "query",
                       (long long)ttl_of(r.json), (long long)cases[i].want);
            }
            itest_resp_release(&r);
        }
    }
    /* The ttl field may come before the file part. */
    struct itest_part parts[] = {{"ttl_hours", NULL, NULL, "2", 1, NULL},
                                 {"file", "t.txt", NULL, "t\n", 2, NULL}};
    struct itest_req rq = {0};
    rq.path = "/v1/files";
    rq.key = key;
    rq.user_id = "u1";
    rq.parts = parts;
    rq.nparts = 2;
    struct itest_resp r;
    itest_do(s, &rq, &r);
    CHECK_STATUS(&r, 201);
    CHECKF(ttl_of(r.json) == 2 * HOUR, "ttl field first: ttl %lld",
           (long long)ttl_of(r.json));
    itest_resp_release(&r);
    free(key);
    itest_stop(s);
}

static void ttl_never(void)
{
    static const char *const args[] = {"--file-ttl", "never", NULL};
    char *key;
    struct itest_server *s = start_keyed(args, &key);
    REQUIRE(s && key);
    struct itest_resp r;
    itest_upload_raw(s, key, "u1", "forever.txt", "text/plain", "x", 1, NULL,
                     &r);
    CHECK_STATUS(&r, 201);
    CHECK_FILE(r.json, "forever.txt", "x", 1);
    CHECKF(json_is_null(itest_json_get(r.json, "expires_at")),
           "expires_at with --file-ttl never: %s", r.body);
    itest_resp_release(&r);
    /* ttl_hours still shortens it. */
    itest_upload_raw(s, key, "u1", "short.txt", "text/plain", "x", 1,
                     "ttl_hours=5", &r);
    CHECK_STATUS(&r, 201);
    CHECKF(ttl_of(r.json) == 5 * HOUR, "ttl_hours=5 with ttl never: %s",
           r.body);
    itest_resp_release(&r);
    list(s, key, "u1", NULL, &r);
    CHECK_STATUS(&r, 200);
    CHECK_INT(json_array_size(itest_json_get(r.json, "files")), 2);
    itest_resp_release(&r);
    free(key);
    itest_stop(s);
}

static void expiry(void)
{
    static const char *const args[] = {"--file-ttl", "2s", "--quota-files", "1",
                                       NULL};
    char *key;
    struct itest_server *s = start_keyed(args, &key);
    REQUIRE(s && key);
    struct itest_resp r;
    itest_upload_raw(s, key, "u1", "brief.txt", "text/plain", "short-lived\n",
                     12, NULL, &r);
    REQUIRE_STATUS(&r, 201);
    CHECKF(ttl_of(r.json) == 2, "expires_at - created_at = %lld, want 2",
           (long long)ttl_of(r.json));
    char *id = itest_json_dup(r.json, "file_id");
    const char *ea = itest_json_str(r.json, "expires_at");
    int64_t expires = itest_parse_time(ea ? ea : "");
    itest_resp_release(&r);
    REQUIRE(expires > 0);

    list(s, key, "u1", NULL, &r);
    CHECK_STATUS(&r, 200);
    CHECK_INT(json_array_size(itest_json_get(r.json, "files")), 1);
    itest_resp_release(&r);
    get_file(s, key, "u1", id, "", "GET", &r);
    CHECK_STATUS(&r, 200);
    itest_resp_release(&r);
    /* It counts in the quota while alive. */
    itest_upload_raw(s, key, "u1", "second.txt", "text/plain", "x", 1, NULL,
                     &r);
    CHECK_ERROR(&r, 507, "quota_exceeded");
    itest_resp_release(&r);

    /* expires_at has whole seconds; the real expiry is within the second
     * after it.  Waiting for it is the thing under test. */
    itest_sleep_until((double)expires + 1.2);

    get_file(s, key, "u1", id, "", "GET", &r);
    CHECK_ERROR(&r, 404, "not_found");
    itest_resp_release(&r);
    get_file(s, key, "u1", id, "/content", "GET", &r);
    CHECK_ERROR(&r, 404, "not_found");
    itest_resp_release(&r);
    get_file(s, key, "u1", id, "", "DELETE", &r);
    CHECK_ERROR(&r, 404, "not_found");
    itest_resp_release(&r);
    list(s, key, "u1", NULL, &r);
    CHECK_STATUS(&r, 200);
    CHECKF(json_array_size(itest_json_get(r.json, "files")) == 0,
           "expired file still listed: %s", r.body);
    itest_resp_release(&r);
    /* And it no longer counts in the quota. */
    itest_upload_raw(s, key, "u1", "third.txt", "text/plain", "x", 1, NULL, &r);
    CHECK_STATUS(&r, 201);
    itest_resp_release(&r);
    free(id);
    free(key);
    itest_stop(s);
}

/* After a rejected upload, nothing of it is on disk. */
static void check_no_strays(struct itest_server *s, const char *what)
{
    char **v;
    size_t n = itest_stray_files(s, &v);
    itest_strv_free(v);
    if (n) {
        fprintf(stderr, "after %s:\n", what);
        itest_print_strays(s);
    }
    CHECKF(n == 0, "%s left %zu files on disk", what, n);
}

static void size_limit(void)
{
    static const char *const args[] = {"--max-file-size", "1M", NULL};
    char *key;
    struct itest_server *s = start_keyed(args, &key);
    REQUIRE(s && key);
    const size_t limit = 1024 * 1024;
    unsigned char *big = malloc(limit + 1);
    REQUIRE(big);
    itest_pattern_fill(3, 0, big, limit + 1);
    struct itest_resp r;

    /* Raw with Content-Length. */
    itest_upload_raw(s, key, "u1", "big.bin", "application/octet-stream", big,
                     limit + 1, NULL, &r);
    CHECK_ERROR(&r, 413, "payload_too_large");
    itest_resp_release(&r);
    check_no_strays(s, "a raw upload over the limit");

    /* Raw, chunked: the server learns the size only while reading. */
    struct itest_pattern_src src = {3, limit + 1, 0};
    struct itest_req rq = {0};
    rq.path = "/v1/files?filename=big.bin";
    rq.key = key;
    rq.user_id = "u1";
    rq.content_type = "application/octet-stream";
    rq.read_cb = itest_pattern_read;
    rq.read_ctx = &src;
    rq.read_len = -1;
    itest_do(s, &rq, &r);
    CHECK_ERROR(&r, 413, "payload_too_large");
    itest_resp_release(&r);
    check_no_strays(s, "a chunked upload over the limit");

    /* Multipart. */
    itest_upload_multipart(s, key, "u1", "big.bin", big, limit + 1, NULL, &r);
    CHECK_ERROR(&r, 413, "payload_too_large");
    itest_resp_release(&r);
    check_no_strays(s, "a multipart upload over the limit");

    list(s, key, "u1", NULL, &r);
    CHECK_STATUS(&r, 200);
    CHECK_INT(json_array_size(itest_json_get(r.json, "files")), 0);
    itest_resp_release(&r);

    /* Exactly the limit is fine, in every form. */
    itest_upload_raw(s, key, "u1", "max.bin", "application/octet-stream", big,
                     limit, NULL, &r);
    CHECK_STATUS(&r, 201);
    CHECK_FILE(r.json, "max.bin", big, limit);
    itest_resp_release(&r);
    src.total = limit;
    src.sent = 0;
    itest_do(s, &rq, &r);
    CHECK_STATUS(&r, 201);
    CHECK_FILE(r.json, "big.bin", big, limit);
    itest_resp_release(&r);
    itest_upload_multipart(s, key, "u1", "max.bin", big, limit, NULL, &r);
    CHECK_STATUS(&r, 201);
    CHECK_FILE(r.json, "max.bin", big, limit);
    itest_resp_release(&r);
    free(big);
    free(key);
    itest_stop(s);
}

static void quota_files(void)
{
    static const char *const args[] = {"--quota-files", "3", NULL};
    char *key;
    struct itest_server *s = start_keyed(args, &key);
    REQUIRE(s && key);
    char *ids[3] = {0};
    upload_n(s, key, 3, 0, ids);
    struct itest_resp r;
    itest_upload_raw(s, key, "u1", "four.txt", "text/plain", "4", 1, NULL, &r);
    CHECK_ERROR(&r, 507, "quota_exceeded");
    itest_resp_release(&r);
    itest_upload_multipart(s, key, "u1", "four.txt", "4", 1, NULL, &r);
    CHECK_ERROR(&r, 507, "quota_exceeded");
    itest_resp_release(&r);
    list(s, key, "u1", NULL, &r);
    CHECK_INT(json_array_size(itest_json_get(r.json, "files")), 3);
    itest_resp_release(&r);
    CHECKF(itest_wait_strays_at_most(s, 3, ITEST_CLEANUP_WAIT_MS),
           "rejected uploads left bytes on disk");

    /* The quota is per user. */
    itest_upload_raw(s, key, "u2", "other.txt", "text/plain", "o", 1, NULL, &r);
    CHECK_STATUS(&r, 201);
    itest_resp_release(&r);

    /* Deleting frees a slot. */
    get_file(s, key, "u1", ids[1] ? ids[1] : "", "", "DELETE", &r);
    CHECK_STATUS(&r, 204);
    itest_resp_release(&r);
    itest_upload_raw(s, key, "u1", "four.txt", "text/plain", "4", 1, NULL, &r);
    CHECK_STATUS(&r, 201);
    itest_resp_release(&r);
    itest_upload_raw(s, key, "u1", "five.txt", "text/plain", "5", 1, NULL, &r);
    CHECK_ERROR(&r, 507, "quota_exceeded");
    itest_resp_release(&r);
    for (size_t i = 0; i < 3; i++)
        free(ids[i]);
    free(key);
    itest_stop(s);
}

static void quota_bytes(void)
{
    static const char *const args[] = {"--quota-bytes", "1K", NULL};
    char *key;
    struct itest_server *s = start_keyed(args, &key);
    REQUIRE(s && key);
    char buf[1024];
    memset(buf, 'q', sizeof(buf));
    struct itest_resp r;
    itest_upload_raw(s, key, "u1", "600.txt", "text/plain", buf, 600, NULL, &r);
    CHECK_STATUS(&r, 201);
    char *id600 = itest_json_dup(r.json, "file_id");
    itest_resp_release(&r);
    itest_upload_raw(s, key, "u1", "500.txt", "text/plain", buf, 500, NULL, &r);
    CHECK_ERROR(&r, 507, "quota_exceeded");
    itest_resp_release(&r);
    itest_upload_multipart(s, key, "u1", "500.txt", buf, 500, NULL, &r);
    CHECK_ERROR(&r, 507, "quota_exceeded");
    itest_resp_release(&r);
    itest_upload_raw(s, key, "u1", "300.txt", "text/plain", buf, 300, NULL, &r);
    CHECK_STATUS(&r, 201);
    itest_resp_release(&r);
    itest_upload_raw(s, key, "u2", "1024.txt", "text/plain", buf, 1024, NULL,
                     &r);
    CHECK_STATUS(&r, 201); /* exactly 1 KiB fits an empty quota */
    itest_resp_release(&r);

    get_file(s, key, "u1", id600, "", "DELETE", &r);
    CHECK_STATUS(&r, 204);
    itest_resp_release(&r);
    itest_upload_raw(s, key, "u1", "600b.txt", "text/plain", buf, 600, NULL,
                     &r);
    CHECK_STATUS(&r, 201);
    itest_resp_release(&r);
    free(id600);
    free(key);
    itest_stop(s);
}

/* Flags > environment > config file > defaults, seen through the TTL. */
static void config_precedence(void)
{
    static const char conf[] = "# interpd test config\n"
                               "\n"
                               "file-ttl = 1h\n"
                               "max-file-size = 1K\n";
    static const char *const env[] = {"INTERPD_FILE_TTL=2h", NULL};
    static const char *const flag[] = {"--file-ttl", "3h", NULL};
    struct {
        struct itest_opts o;
        int64_t ttl;
    } cases[] = {
        {{.config = conf}, 1 * HOUR},
        {{.env = env, .config = conf}, 2 * HOUR},
        {{.args = flag, .env = env, .config = conf}, 3 * HOUR},
        {{.args = flag}, 3 * HOUR},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct itest_server *s = itest_start(&cases[i].o);
        CHECK(s);
        if (!s)
            continue;
        struct itest_resp r;
        itest_upload_raw(s, s->admin_key, "u1", "c.txt", "text/plain", "c", 1,
                         NULL, &r);
        CHECK_STATUS(&r, 201);
        CHECKF(ttl_of(r.json) == cases[i].ttl, "case %zu: ttl %lld, want %lld",
               i, (long long)ttl_of(r.json), (long long)cases[i].ttl);
        itest_resp_release(&r);
        if (cases[i].o.config) {
            /* The file's max-file-size = 1K applies too. */
            char big[2048];
            memset(big, 'b', sizeof(big));
            itest_upload_raw(s, s->admin_key, "u1", "big.txt", "text/plain",
                             big, sizeof(big), NULL, &r);
            CHECK_ERROR(&r, 413, "payload_too_large");
            itest_resp_release(&r);
        }
        itest_stop(s);
    }

    /* The environment alone. */
    static const char *const env_size[] = {"INTERPD_MAX_FILE_SIZE=1K",
                                           "INTERPD_QUOTA_FILES=1", NULL};
    struct itest_opts o = {.env = env_size};
    struct itest_server *s = itest_start(&o);
    REQUIRE(s);
    char big[2048];
    memset(big, 'b', sizeof(big));
    struct itest_resp r;
    itest_upload_raw(s, s->admin_key, "u1", "big.txt", "text/plain", big,
                     sizeof(big), NULL, &r);
    CHECK_ERROR(&r, 413, "payload_too_large");
    itest_resp_release(&r);
    itest_upload_raw(s, s->admin_key, "u1", "one.txt", "text/plain", big, 10,
                     NULL, &r);
    CHECK_STATUS(&r, 201);
    itest_resp_release(&r);
    itest_upload_raw(s, s->admin_key, "u1", "two.txt", "text/plain", big, 10,
                     NULL, &r);
    CHECK_ERROR(&r, 507, "quota_exceeded");
    itest_resp_release(&r);
    itest_stop(s);
}

TEST_MAIN(T(upload_raw), T(upload_multipart), T(file_types),
          T(special_names_download), T(delete_file), T(unknown_ids),
          T(list_and_paging), T(paging_while_changing), T(list_bad_params),
          T(ttl_hours), T(ttl_never), T(expiry), T(size_limit), T(quota_files),
          T(quota_bytes), T(config_precedence))
