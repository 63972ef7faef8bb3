/*
 * test_varlist.c - ipd_varlist_parse (service/exec/varlist.h), the
 * service's reading of a session's variables listing.  Each check is
 * tried on input built to pass every check but that one: the good
 * listing below, changed in one place.
 */
#include <jansson.h>

#include "service/exec/varlist.h"
#include "test.h"

/* A listing that passes every check: two entries, sorted. */
#define GOOD_ENTRIES                                                           \
    "{\"name\":\"a\",\"type\":\"int\",\"repr\":\"1\"},"                        \
    "{\"name\":\"b_2\",\"type\":\"str\",\"repr\":\"'x'\"}"
static const char good[] =
    "{\"variables\":[" GOOD_ENTRIES "],\"truncated\":false}";

static json_t *parse_ok(const char *text)
{
    json_t *out = NULL;
    enum ipd_err rc = ipd_varlist_parse(text, strlen(text), &out);
    CHECK_INT(rc, IPD_OK);
    if (rc)
        fprintf(stderr, "  refused: %.200s\n", text);
    return out;
}

static void refused(const char *text)
{
    json_t *out = (json_t *)1;
    enum ipd_err rc = ipd_varlist_parse(text, strlen(text), &out);
    CHECK_INT(rc, IPD_ERR_INVALID);
    CHECK(out == NULL);
    if (rc != IPD_ERR_INVALID)
        fprintf(stderr, "  accepted: %.200s\n", text);
    json_decref(rc ? NULL : out);
}

static size_t n_vars(const json_t *doc)
{
    return json_array_size(json_object_get(doc, "variables"));
}

static bool truncated(const json_t *doc)
{
    return json_is_true(json_object_get(doc, "truncated"));
}

/* The entries' names, comma-separated (static buffer). */
static const char *names(const json_t *doc)
{
    static char buf[4096];
    json_t *e;
    size_t i, at = 0;
    buf[0] = '\0';
    json_array_foreach(json_object_get(doc, "variables"), i, e)
    {
        const char *n = json_string_value(json_object_get(e, "name"));
        at += (size_t)snprintf(buf + at, sizeof(buf) - at, "%s%s", i ? "," : "",
                               n ? n : "(null)");
        if (at >= sizeof(buf))
            break;
    }
    return buf;
}

/* One entry between the two good ones ("a" < X < "b_2"): the listing
 * keeps a and b_2 and says truncated when X is left out. */
static json_t *with_entry(const char *entry)
{
    char *text = NULL;
    size_t n = strlen(entry) + 256;
    text = malloc(n);
    snprintf(text, n,
             "{\"variables\":[{\"name\":\"a\",\"type\":\"int\",\"repr\":"
             "\"1\"},%s,{\"name\":\"b_2\",\"type\":\"str\",\"repr\":\"'x'\"}"
             "],\"truncated\":false}",
             entry);
    json_t *out = parse_ok(text);
    free(text);
    return out;
}

static void left_out(const char *entry)
{
    json_t *doc = with_entry(entry);
    CHECK_STR(names(doc), "a,b_2");
    CHECK(truncated(doc));
    json_decref(doc);
}

static void good_listing_passes(void)
{
    json_t *doc = parse_ok(good);
    REQUIRE(doc);
    CHECK_INT(json_object_size(doc), 2);
    CHECK_STR(names(doc), "a,b_2");
    CHECK(json_is_false(json_object_get(doc, "truncated")));
    json_t *e = json_array_get(json_object_get(doc, "variables"), 1);
    CHECK_INT(json_object_size(e), 3);
    CHECK_STR(json_string_value(json_object_get(e, "type")), "str");
    CHECK_STR(json_string_value(json_object_get(e, "repr")), "'x'");
    json_decref(doc);
    /* A good middle entry is kept. */
    doc = with_entry("{\"name\":\"aa\",\"type\":\"t\",\"repr\":\"\"}");
    CHECK_STR(names(doc), "a,aa,b_2");
    CHECK(!truncated(doc));
    json_decref(doc);
    /* Non-ASCII letters are names too. */
    doc = with_entry("{\"name\":\"a\xc3\xa9\",\"type\":\"t\",\"repr\":\"\"}");
    CHECK_STR(names(doc), "a,a\xc3\xa9,b_2");
    json_decref(doc);
}

/* The document: bounded, JSON, an object of exactly its two keys. */
static void document_checks(void)
{
    refused("");
    refused("not json");
    refused("[]");
    refused("\"variables\"");
    refused("{\"variables\":[" GOOD_ENTRIES "],\"truncated\":false");
    refused("{\"variables\":[" GOOD_ENTRIES "]}"); /* no truncated */
    refused("{\"truncated\":false}");              /* no variables */
    refused("{\"variables\":[" GOOD_ENTRIES "],\"truncated\":false,"
            "\"extra\":1}");
    refused("{\"variables\":{},\"truncated\":false}");
    refused("{\"variables\":[" GOOD_ENTRIES "],\"truncated\":\"no\"}");
    refused("{\"variables\":[" GOOD_ENTRIES "],\"truncated\":0}");
    refused("{\"variables\":[],\"variables\":[],\"truncated\":false}");
    /* Over the size bound, however well formed. */
    size_t n = IPD_VARLIST_FILE_MAX + 1;
    char *big = malloc(n + 1);
    REQUIRE(big);
    memset(big, ' ', n);
    memcpy(big, good, strlen(good));
    big[n] = '\0';
    json_t *out = (json_t *)1;
    CHECK_INT(ipd_varlist_parse(big, n, &out), IPD_ERR_INVALID);
    CHECK(out == NULL);
    /* ... and exactly at it: fine. */
    CHECK_INT(ipd_varlist_parse(big, n - 1, &out), IPD_OK);
    json_decref(out);
    free(big);
    out = (json_t *)1;
    CHECK_INT(ipd_varlist_parse(NULL, 0, &out), IPD_ERR_INVALID);
    CHECK(out == NULL);
}

/* An entry: an object of exactly name, type, repr, all strings. */
static void entry_shape_checks(void)
{
    left_out("\"aa\"");
    left_out("null");
    left_out("[\"aa\",\"t\",\"r\"]");
    left_out("{\"name\":\"aa\",\"type\":\"t\"}");
    left_out("{\"name\":\"aa\",\"repr\":\"r\"}");
    left_out("{\"type\":\"t\",\"repr\":\"r\"}");
    left_out("{\"name\":\"aa\",\"type\":\"t\",\"repr\":\"r\",\"html\":\"x\"}");
    left_out("{\"name\":1,\"type\":\"t\",\"repr\":\"r\"}");
    left_out("{\"name\":\"aa\",\"type\":[\"t\"],\"repr\":\"r\"}");
    left_out("{\"name\":\"aa\",\"type\":\"t\",\"repr\":{\"a\":\"<b>\"}}");
    left_out("{\"name\":\"aa\",\"type\":null,\"repr\":\"r\"}");
    left_out("{\"name\":\"aa\",\"type\":\"t\",\"repr\":true}");
    /* A duplicate key in an entry refuses the document. */
    refused("{\"variables\":[{\"name\":\"a\",\"name\":\"b\",\"type\":\"t\","
            "\"repr\":\"r\"}],\"truncated\":false}");
}

/* A name: an identifier, 1 to 256 bytes, ascending. */
static void name_checks(void)
{
    char entry[600], name[300];
    left_out("{\"name\":\"\",\"type\":\"t\",\"repr\":\"r\"}");
    left_out("{\"name\":\"a b\",\"type\":\"t\",\"repr\":\"r\"}");
    left_out("{\"name\":\"a<b>\",\"type\":\"t\",\"repr\":\"r\"}");
    left_out("{\"name\":\"a\\\"\",\"type\":\"t\",\"repr\":\"r\"}");
    left_out("{\"name\":\"a\\n\",\"type\":\"t\",\"repr\":\"r\"}");
    left_out("{\"name\":\"a-b\",\"type\":\"t\",\"repr\":\"r\"}");
    left_out("{\"name\":\"a.b\",\"type\":\"t\",\"repr\":\"r\"}");
    /* Sorted and unique: "a" again, and one before "a". */
    left_out("{\"name\":\"a\",\"type\":\"t\",\"repr\":\"again\"}");
    refused("{\"variables\":[{\"name\":\"a\",\"name\":\"a\"}],"
            "\"truncated\":false}");
    json_t *doc = parse_ok("{\"variables\":[{\"name\":\"b\",\"type\":\"t\","
                           "\"repr\":\"r\"},{\"name\":\"a\",\"type\":\"t\","
                           "\"repr\":\"r\"}],\"truncated\":false}");
    CHECK_STR(names(doc), "b");
    CHECK(truncated(doc));
    json_decref(doc);
    /* A leading digit. */
    doc = parse_ok("{\"variables\":[{\"name\":\"9a\",\"type\":\"t\","
                   "\"repr\":\"r\"}],\"truncated\":false}");
    CHECK_STR(names(doc), "");
    CHECK(truncated(doc));
    json_decref(doc);
    /* 256 bytes: kept; 257: left out (never cut). */
    memset(name, 'a', 257);
    name[256] = '\0';
    snprintf(entry, sizeof(entry),
             "{\"name\":\"%s\",\"type\":\"t\",\"repr\":\"r\"}", name);
    doc = with_entry(entry);
    CHECK_INT(n_vars(doc), 3);
    CHECK(!truncated(doc));
    json_decref(doc);
    name[256] = 'a';
    name[257] = '\0';
    snprintf(entry, sizeof(entry),
             "{\"name\":\"%s\",\"type\":\"t\",\"repr\":\"r\"}", name);
    left_out(entry);
}

/* type and repr: cut to their caps in characters, "..." at the end. */
static void cap_checks(void)
{
    size_t n = 600 * 3 + 256;
    char *entry = malloc(n), *s = malloc(601 * 3);
    REQUIRE(entry && s);
    for (size_t max = IPD_VARLIST_REPR_MAX; max <= IPD_VARLIST_REPR_MAX + 1;
         max++) {
        for (size_t i = 0; i < max; i++)
            memcpy(s + 2 * i, "\xc3\xa9", 2); /* 2 bytes, 1 character */
        s[2 * max] = '\0';
        snprintf(entry, n, "{\"name\":\"aa\",\"type\":\"t\",\"repr\":\"%s\"}",
                 s);
        json_t *doc = with_entry(entry);
        json_t *e = json_array_get(json_object_get(doc, "variables"), 1);
        const char *r = json_string_value(json_object_get(e, "repr"));
        REQUIRE(r);
        if (max == IPD_VARLIST_REPR_MAX) {
            CHECK_STR(r, s); /* at the cap: as it was */
        } else {
            CHECK_INT(strlen(r), (IPD_VARLIST_REPR_MAX - 3) * 2 + 3);
            CHECK(!strcmp(r + strlen(r) - 3, "..."));
        }
        CHECK(!truncated(doc));
        json_decref(doc);
    }
    for (size_t max = IPD_VARLIST_TYPE_MAX; max <= IPD_VARLIST_TYPE_MAX + 1;
         max++) {
        memset(s, 'T', max);
        s[max] = '\0';
        snprintf(entry, n, "{\"name\":\"aa\",\"type\":\"%s\",\"repr\":\"r\"}",
                 s);
        json_t *doc = with_entry(entry);
        json_t *e = json_array_get(json_object_get(doc, "variables"), 1);
        const char *t = json_string_value(json_object_get(e, "type"));
        REQUIRE(t);
        CHECK_INT(strlen(t), IPD_VARLIST_TYPE_MAX);
        if (max > IPD_VARLIST_TYPE_MAX)
            CHECK(!strcmp(t + strlen(t) - 3, "..."));
        json_decref(doc);
    }
    free(entry);
    free(s);
}

/* At most IPD_VARLIST_COUNT_MAX entries; truncated is the service's. */
static void count_and_truncated_checks(void)
{
    for (size_t count = IPD_VARLIST_COUNT_MAX;
         count <= IPD_VARLIST_COUNT_MAX + 1; count++) {
        size_t n = count * 64 + 64, at = 0;
        char *text = malloc(n);
        REQUIRE(text);
        at += (size_t)snprintf(text + at, n - at, "{\"variables\":[");
        for (size_t i = 0; i < count; i++)
            at += (size_t)snprintf(text + at, n - at,
                                   "%s{\"name\":\"v%05zu\",\"type\":\"int\","
                                   "\"repr\":\"%zu\"}",
                                   i ? "," : "", i, i);
        snprintf(text + at, n - at, "],\"truncated\":false}");
        json_t *doc = parse_ok(text);
        CHECK_INT(n_vars(doc), IPD_VARLIST_COUNT_MAX);
        CHECK(truncated(doc) == (count > IPD_VARLIST_COUNT_MAX));
        json_decref(doc);
        free(text);
    }
    /* The document's own true is kept; its false never hides a cut. */
    json_t *doc =
        parse_ok("{\"variables\":[" GOOD_ENTRIES "],\"truncated\":true}");
    CHECK(truncated(doc));
    CHECK_INT(n_vars(doc), 2);
    json_decref(doc);
}

TEST_MAIN(T(good_listing_passes), T(document_checks), T(entry_shape_checks),
          T(name_checks), T(cap_checks), T(count_and_truncated_checks))
