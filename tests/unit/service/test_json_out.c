/*
 * test_json_out.c - the direct JSON writer: what it writes parses back
 * (with jansson) to exactly the input, whatever the characters.
 */
#include <jansson.h>

#include "service/common/json_out.h"
#include "storage/meta.h"
#include "test.h"

static void check_roundtrip(const char *s)
{
    struct ipd_buf b;
    json_error_t err;
    ipd_buf_init(&b, IPD_BUF_UNLIMITED);
    CHECK_INT(ipd_jw_str(&b, s), IPD_OK);
    json_t *j = json_loadb(b.buf, b.len, JSON_DECODE_ANY, &err);
    CHECK(j != NULL);
    if (j)
        CHECK_STR(json_string_value(j), s);
    json_decref(j);
    ipd_buf_release(&b);
}

static void strings_roundtrip(void)
{
    check_roundtrip("");
    check_roundtrip("plain.csv");
    check_roundtrip("quote\" back\\slash");
    check_roundtrip("ctl\x01\x1f\x7f\n\r\t end");
    check_roundtrip("r\xc3\xa9sum\xc3\xa9 \xe2\x80\xae bidi \xf0\x9f\x98\x80");
    check_roundtrip("sep\xe2\x80\xa8line\xe2\x80\xa9para");
}

static void separators_are_escaped(void)
{
    struct ipd_buf b;
    ipd_buf_init(&b, IPD_BUF_UNLIMITED);
    CHECK_INT(ipd_jw_str(&b, "a\xe2\x80\xa8"
                             "b<"),
              IPD_OK);
    CHECK_STR(b.buf, "\"a\\u2028b<\"");
    ipd_buf_release(&b);
}

static void file_object(void)
{
    struct ipd_file_meta f;
    struct ipd_buf b;
    json_error_t err;
    memset(&f, 0, sizeof(f));
    snprintf(f.file_id, sizeof(f.file_id), "file_abc");
    snprintf(f.filename, sizeof(f.filename), "a\"b.csv");
    f.size = 1024;
    snprintf(f.mime_type, sizeof(f.mime_type), "text/csv");
    snprintf(f.file_type, sizeof(f.file_type), "csv");
    snprintf(f.sha256, sizeof(f.sha256), "00ff");
    snprintf(f.source, sizeof(f.source), "upload");
    f.created_at_ms = 1795299000000LL;
    f.expires_at_ms = IPD_TIME_NEVER;
    ipd_buf_init(&b, IPD_BUF_UNLIMITED);
    CHECK_INT(ipd_jw_file(&b, &f), IPD_OK);
    json_t *j = json_loadb(b.buf, b.len, 0, &err);
    REQUIRE(j != NULL);
    CHECK_STR(json_string_value(json_object_get(j, "file_id")), "file_abc");
    CHECK_STR(json_string_value(json_object_get(j, "filename")), "a\"b.csv");
    CHECK_INT(json_integer_value(json_object_get(j, "size")), 1024);
    CHECK_STR(json_string_value(json_object_get(j, "mime_type")), "text/csv");
    CHECK_STR(json_string_value(json_object_get(j, "file_type")), "csv");
    CHECK_STR(json_string_value(json_object_get(j, "sha256")), "00ff");
    CHECK_STR(json_string_value(json_object_get(j, "source")), "upload");
    CHECK_STR(json_string_value(json_object_get(j, "created_at")),
              "2026-11-21T22:10:00Z");
    CHECK(json_is_null(json_object_get(j, "expires_at")));
    CHECK_INT(json_object_size(j), 9);
    json_decref(j);
    ipd_buf_release(&b);
}

TEST_MAIN(T(strings_roundtrip), T(separators_are_escaped), T(file_object))
