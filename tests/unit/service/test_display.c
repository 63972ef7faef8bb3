/*
 * test_display.c - service/exec/display.h, the display channel's parser,
 * on its own.  Every check is tried with input built to pass all the
 * others: the read bound (a cut file's partial line), the key set, the
 * types, each MIME type's own length against its own budget (text/plain
 * cut, text/html whole or not at all, image/png by its decoded size), the
 * PNG signature and the whole PNG (every chunk's length, type and CRC,
 * IHDR first, IEND last, nothing after), strict base64, the bundle count
 * and the per-bundle cost, and the total across bundles.
 */
#include <jansson.h>

#include "service/common/buf.h"
#include "service/exec/display.h"
#include "test.h"

#define COST IPD_DISPLAY_ENTRY_COST
#define BIG (INT64_C(1) << 30)

/* ---- building input --------------------------------------------------- */

/* CRC-32, table-driven (display.c computes it bit by bit). */
static uint32_t crc(const unsigned char *p, size_t n)
{
    static uint32_t t[256];
    uint32_t c = 0xffffffffu;
    if (!t[1])
        for (uint32_t i = 0; i < 256; i++) {
            uint32_t v = i;
            for (int k = 0; k < 8; k++)
                v = v & 1 ? 0xedb88320u ^ (v >> 1) : v >> 1;
            t[i] = v;
        }
    for (size_t i = 0; i < n; i++)
        c = t[(c ^ p[i]) & 0xff] ^ (c >> 8);
    return c ^ 0xffffffffu;
}

static void put32(struct ipd_buf *b, uint32_t v)
{
    unsigned char x[4] = {(unsigned char)(v >> 24), (unsigned char)(v >> 16),
                          (unsigned char)(v >> 8), (unsigned char)v};
    ipd_buf_add(b, x, 4);
}

/* One chunk: length, type, data, CRC of type and data. */
static void chunk(struct ipd_buf *b, const char *type, const void *data,
                  size_t n)
{
    size_t at;
    put32(b, (uint32_t)n);
    at = b->len;
    ipd_buf_add(b, type, 4);
    ipd_buf_add(b, data, n);
    put32(b, crc((const unsigned char *)b->buf + at, n + 4));
}

/* A well-formed PNG of idat_len bytes of IDAT (a 1x1 image's header; the
 * parser checks structure, not pixels) into b. */
static void png(struct ipd_buf *b, size_t idat_len)
{
    static const unsigned char ihdr[13] = {0, 0, 0, 1, 0, 0, 0, 1, 8, 6};
    unsigned char idat[4096];
    IPD_ASSERT(idat_len <= sizeof(idat));
    for (size_t i = 0; i < idat_len; i++)
        idat[i] = (unsigned char)(i * 7 + 3);
    ipd_buf_init(b, IPD_BUF_UNLIMITED);
    ipd_buf_add(b, "\x89PNG\r\n\x1a\n", 8);
    chunk(b, "IHDR", ihdr, sizeof(ihdr));
    chunk(b, "IDAT", idat, idat_len);
    chunk(b, "IEND", "", 0);
}

static char *b64(const unsigned char *d, size_t n)
{
    static const char a[] =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    char *o = malloc((n + 2) / 3 * 4 + 1), *p = o;
    IPD_ASSERT(o);
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)d[i] << 16 |
                     (i + 1 < n ? (uint32_t)d[i + 1] << 8 : 0) |
                     (i + 2 < n ? d[i + 2] : 0);
        *p++ = a[v >> 18 & 63];
        *p++ = a[v >> 12 & 63];
        *p++ = i + 1 < n ? a[v >> 6 & 63] : '=';
        *p++ = i + 2 < n ? a[v & 63] : '=';
    }
    *p = 0;
    return o;
}

/* The base64 of a well-formed PNG with idat_len bytes of IDAT; its
 * decoded size in *size. */
static char *png64(size_t idat_len, size_t *size)
{
    struct ipd_buf b;
    png(&b, idat_len);
    char *s = b64((unsigned char *)b.buf, b.len);
    if (size)
        *size = b.len;
    ipd_buf_release(&b);
    return s;
}

static char *str(size_t n, char c)
{
    char *o = malloc(n + 1);
    IPD_ASSERT(o);
    memset(o, c, n);
    o[n] = 0;
    return o;
}

/* One line of JSON text for obj (stolen), with "\n". */
static char *line(json_t *obj)
{
    char *t = json_dumps(obj, JSON_COMPACT | JSON_ENCODE_ANY);
    size_t n = strlen(t) + 2;
    char *o = malloc(n);
    IPD_ASSERT(o);
    snprintf(o, n, "%s\n", t);
    free(t);
    json_decref(obj);
    return o;
}

/* ---- parsing ---------------------------------------------------------- */

struct got {
    json_t *list;
    bool truncated;
};

static void parse(const char *text, bool over, int64_t text_max,
                  int64_t png_max, struct got *g)
{
    g->list = ipd_display_parse(text, strlen(text), over, text_max, png_max,
                                &g->truncated);
}

/* The parse of text is exactly want (JSON), with display_truncated trunc. */
static void expect(const char *what, const char *text, bool over,
                   int64_t text_max, int64_t png_max, json_t *want, bool trunc)
{
    struct got g;
    parse(text, over, text_max, png_max, &g);
    char *gs = json_dumps(g.list, JSON_COMPACT);
    char *ws = json_dumps(want, JSON_COMPACT);
    CHECKF(json_equal(g.list, want), "%s: got %.300s, want %.300s", what, gs,
           ws);
    CHECKF(g.truncated == trunc, "%s: truncated %d, want %d", what,
           (int)g.truncated, (int)trunc);
    free(gs);
    free(ws);
    json_decref(g.list);
    json_decref(want);
}

/* One-line input: the line obj (stolen); the expected list want (stolen). */
static void expect1(const char *what, json_t *obj, int64_t text_max,
                    int64_t png_max, json_t *want, bool trunc)
{
    char *t = line(obj);
    expect(what, t, false, text_max, png_max, want, trunc);
    free(t);
}

#define J(...) json_pack(__VA_ARGS__)

/* The control: a bundle with every MIME type, each well within its
 * budget, comes back whole and untruncated. */
static void whole_bundle(void)
{
    char *p = png64(40, NULL);
    expect1("all three",
            J("{s:s, s:s, s:s}", "text/plain", "a", "text/html", "<b>a</b>",
              "image/png", p),
            BIG, BIG,
            J("[{s:s, s:s, s:s}]", "text/plain", "a", "text/html", "<b>a</b>",
              "image/png", p),
            false);
    expect1("truncated: false",
            J("{s:s, s:b}", "text/plain", "a", "truncated", 0), BIG, BIG,
            J("[{s:s}]", "text/plain", "a"), false);
    expect("empty", "", false, BIG, BIG, json_array(), false);
    expect("empty lines", "\n\n", false, BIG, BIG, json_array(), false);
    free(p);
}

/* The read bound: a file cut at the bound loses its partial last line and
 * says so; a whole last line stays. */
static void read_bound(void)
{
    const char *two = "{\"text/plain\":\"a\"}\n{\"text/plain\":\"b\"}";
    expect("cut: partial line out", two, true, BIG, BIG,
           J("[{s:s}]", "text/plain", "a"), true);
    expect("not cut: a last line without newline", two, false, BIG, BIG,
           J("[{s:s}, {s:s}]", "text/plain", "a", "text/plain", "b"), false);
    expect("cut after a newline", "{\"text/plain\":\"a\"}\n", true, BIG, BIG,
           J("[{s:s}]", "text/plain", "a"), true);
    /* The length given is the bound: bytes past it are never read. */
    struct got g;
    const char *t = "{\"text/plain\":\"a\"}\n{\"text/plain\":\"b\"}\n";
    g.list = ipd_display_parse(t, 19, false, BIG, BIG, &g.truncated);
    CHECK_INT(json_array_size(g.list), 1);
    json_decref(g.list);
}

/* The key set: only the three MIME keys come out; any other key, or the
 * prelude's truncated mark, marks the list truncated. */
static void key_set(void)
{
    expect1("unknown key",
            J("{s:s, s:s}", "text/plain", "a", "application/javascript",
              "alert(1)"),
            BIG, BIG, J("[{s:s}]", "text/plain", "a"), true);
    expect1("nested unknown key",
            J("{s:s, s:{s:s}}", "text/plain", "a", "x", "text/html", "<i>"),
            BIG, BIG, J("[{s:s}]", "text/plain", "a"), true);
    expect1("truncated: true",
            J("{s:s, s:b}", "text/plain", "a", "truncated", 1), BIG, BIG,
            J("[{s:s}]", "text/plain", "a"), true);
    expect1("truncated of another type",
            J("{s:s, s:s}", "text/plain", "a", "truncated", "no"), BIG, BIG,
            J("[{s:s}]", "text/plain", "a"), true);
    expect1("the prelude's full-file line", J("{s:b}", "truncated", 1), BIG,
            BIG, json_array(), true);
}

/* The types: a line that is no object, a text/plain that is no string
 * (the bundle out), a text/html or image/png that is no string (that key
 * out). */
static void types(void)
{
    static const char *const not_objects[] = {
        "[{\"text/plain\":\"a\"}]\n",
        "\"text/plain\"\n",
        "42\n",
        "null\n",
        "{\"text/plain\":\"a\"\n",
        "{\"text/plain\":\"a\"}}\n",
        "{\"text/plain\":\"\\u0000\"}\n",
    };
    for (size_t i = 0; i < IPD_ARRAY_LEN(not_objects); i++)
        expect(not_objects[i], not_objects[i], false, BIG, BIG, json_array(),
               true);
    expect1("plain a number", J("{s:i}", "text/plain", 1), BIG, BIG,
            json_array(), true);
    expect1("plain null", J("{s:n}", "text/plain"), BIG, BIG, json_array(),
            true);
    expect1("plain an array", J("{s:[s]}", "text/plain", "a"), BIG, BIG,
            json_array(), true);
    expect1("no plain", J("{s:s}", "text/html", "<b>"), BIG, BIG, json_array(),
            true);
    expect1("html an object", J("{s:s, s:{}}", "text/plain", "a", "text/html"),
            BIG, BIG, J("[{s:s}]", "text/plain", "a"), true);
    expect1("png a number", J("{s:s, s:i}", "text/plain", "a", "image/png", 7),
            BIG, BIG, J("[{s:s}]", "text/plain", "a"), true);
    /* A good line after bad ones still comes back. */
    expect("bad then good", "nope\n{\"text/plain\":\"ok\"}\n", false, BIG, BIG,
           J("[{s:s}]", "text/plain", "ok"), true);
}

/* text/plain against its own length: cut to what is left, at a character
 * boundary. */
static void plain_length(void)
{
    char *s = str(100, 'p');
    expect1("plain fits exactly", J("{s:s}", "text/plain", s), COST + 100, BIG,
            J("[{s:s}]", "text/plain", s), false);
    expect1("plain one over", J("{s:s}", "text/plain", s), COST + 99, BIG,
            J("[{s:s%}]", "text/plain", s, (size_t)99), true);
    free(s);
    /* "é" is two bytes: a cut in its middle moves before it. */
    expect1("cut at a character", J("{s:s}", "text/plain", "a\xc3\xa9"),
            COST + 2, BIG, J("[{s:s}]", "text/plain", "a"), true);
}

/* text/html against its own length, not text/plain's: whole or not at
 * all, from what text/plain left. */
static void html_length(void)
{
    char *h = str(50, 'h');
    /* A short plain and an html one byte over what is left: html out. */
    expect1("html over, plain short",
            J("{s:s, s:s}", "text/plain", "p", "text/html", h), COST + 1 + 49,
            BIG, J("[{s:s}]", "text/plain", "p"), true);
    /* The same html exactly fits. */
    expect1("html exactly fits",
            J("{s:s, s:s}", "text/plain", "p", "text/html", h), COST + 1 + 50,
            BIG, J("[{s:s, s:s}]", "text/plain", "p", "text/html", h), false);
    /* A long plain (that fits) and a short html that fits what is left:
     * kept, although plain alone is longer than what html has left. */
    char *p = str(200, 'p');
    expect1("plain long, html short",
            J("{s:s, s:s}", "text/plain", p, "text/html", "<b>"),
            COST + 200 + 3, BIG,
            J("[{s:s, s:s}]", "text/plain", p, "text/html", "<b>"), false);
    /* html is text: the image budget does not hold it. */
    expect1("html not against the image budget",
            J("{s:s, s:s}", "text/plain", "p", "text/html", h), BIG, 0,
            J("[{s:s, s:s}]", "text/plain", "p", "text/html", h), false);
    free(p);
    free(h);
}

/* image/png against its own decoded size and the image budget only. */
static void png_length(void)
{
    size_t n1, n2;
    char *a = png64(300, &n1), *b = png64(500, &n2);
    json_t *two = J("[{s:s, s:s}, {s:s, s:s}]", "text/plain", "a", "image/png",
                    a, "text/plain", "b", "image/png", b);
    char *t1 = line(J("{s:s, s:s}", "text/plain", "a", "image/png", a));
    char *t2 = line(J("{s:s, s:s}", "text/plain", "b", "image/png", b));
    size_t bn = strlen(t1) + strlen(t2) + 1;
    char *both = malloc(bn);
    IPD_ASSERT(both);
    snprintf(both, bn, "%s%s", t1, t2);
    /* The budget is decoded bytes (base64 is a third longer). */
    expect1("png exactly its decoded size",
            J("{s:s, s:s}", "text/plain", "a", "image/png", a), BIG,
            (int64_t)n1, J("[{s:s, s:s}]", "text/plain", "a", "image/png", a),
            false);
    expect1("png one byte over",
            J("{s:s, s:s}", "text/plain", "a", "image/png", a), BIG,
            (int64_t)n1 - 1, J("[{s:s}]", "text/plain", "a"), true);
    expect("two pngs exactly", both, false, BIG, (int64_t)(n1 + n2),
           json_incref(two), false);
    expect("two pngs, one byte short", both, false, BIG, (int64_t)(n1 + n2 - 1),
           J("[{s:s, s:s}, {s:s}]", "text/plain", "a", "image/png", a,
             "text/plain", "b"),
           true);
    /* The image is not text: a text budget far smaller than the image. */
    expect("pngs not against the text budget", both, false, 2 * COST + 2, BIG,
           json_incref(two), false);
    expect1("no images at all",
            J("{s:s, s:s}", "text/plain", "a", "image/png", a), BIG, 0,
            J("[{s:s}]", "text/plain", "a"), true);
    json_decref(two);
    free(both);
    free(t1);
    free(t2);
    free(a);
    free(b);
}

/* A damaged PNG in the bundle of a line otherwise fine: image out,
 * truncated. */
static void expect_png_refused(const char *what, const char *b64text)
{
    expect1(what, J("{s:s, s:s}", "text/plain", "a", "image/png", b64text), BIG,
            BIG, J("[{s:s}]", "text/plain", "a"), true);
}

static void expect_bytes_refused(const char *what, const unsigned char *d,
                                 size_t n)
{
    char *s = b64(d, n);
    CHECKF(!ipd_display_png_ok(d, n), "%s: taken for a PNG", what);
    expect_png_refused(what, s);
    free(s);
}

/* The PNG signature, and the whole PNG after it: every byte is checked,
 * not only the first ones. */
static void png_whole(void)
{
    struct ipd_buf g, x;
    png(&g, 2000);
    unsigned char *d = (unsigned char *)g.buf;
    size_t n = g.len;
    CHECK(ipd_display_png_ok(d, n));

    d[0] ^= 1;
    expect_bytes_refused("signature", d, n);
    d[0] ^= 1;
    d[8 + 8 + 13 + 4 + 8 + 1000] ^= 0x10; /* the middle of IDAT */
    expect_bytes_refused("a flipped byte mid-IDAT", d, n);
    d[8 + 8 + 13 + 4 + 8 + 1000] ^= 0x10;
    d[n - 1] ^= 1; /* IEND's CRC: the very last byte */
    expect_bytes_refused("the last byte", d, n);
    d[n - 1] ^= 1;
    expect_bytes_refused("no IEND", d, n - 12);
    expect_bytes_refused("cut mid-chunk", d, n - 100);
    expect_bytes_refused("the signature alone", d, 8);

    ipd_buf_init(&x, IPD_BUF_UNLIMITED);
    ipd_buf_add(&x, d, n);
    ipd_buf_add(&x, "\0", 1);
    expect_bytes_refused("a byte after IEND", (unsigned char *)x.buf, x.len);
    ipd_buf_release(&x);

    /* IHDR first, and of 13 bytes. */
    ipd_buf_init(&x, IPD_BUF_UNLIMITED);
    ipd_buf_add(&x, d, 8);
    chunk(&x, "IDAT", "abc", 3);
    chunk(&x, "IHDR", d + 16, 13);
    chunk(&x, "IEND", "", 0);
    expect_bytes_refused("IHDR not first", (unsigned char *)x.buf, x.len);
    ipd_buf_reset(&x);
    ipd_buf_add(&x, d, 8);
    chunk(&x, "IHDR", d + 16, 12);
    chunk(&x, "IEND", "", 0);
    expect_bytes_refused("IHDR of 12 bytes", (unsigned char *)x.buf, x.len);
    ipd_buf_reset(&x);
    ipd_buf_add(&x, d, 8 + 25);
    chunk(&x, "ID4T", "abc", 3);
    chunk(&x, "IEND", "", 0);
    expect_bytes_refused("a chunk type with a digit", (unsigned char *)x.buf,
                         x.len);
    ipd_buf_reset(&x);
    ipd_buf_add(&x, d, 8 + 25);
    chunk(&x, "IEND", "x", 1);
    expect_bytes_refused("IEND with data", (unsigned char *)x.buf, x.len);
    ipd_buf_reset(&x);
    /* A length that points past the end (and one past 2^31). */
    ipd_buf_add(&x, d, 8 + 25);
    put32(&x, 0x7ffffff0u);
    ipd_buf_add(&x, "IDATxxxxxxxx", 12);
    chunk(&x, "IEND", "", 0);
    expect_bytes_refused("a chunk longer than the data", (unsigned char *)x.buf,
                         x.len);
    ipd_buf_reset(&x);
    ipd_buf_add(&x, d, 8 + 25);
    put32(&x, 0xfffffff4u);
    ipd_buf_add(&x, "IDATxxxxxxxx", 12);
    chunk(&x, "IEND", "", 0);
    expect_bytes_refused("a chunk length over 2^31", (unsigned char *)x.buf,
                         x.len);
    ipd_buf_release(&x);
    ipd_buf_release(&g);
}

/* Strict base64 of the whole text: one bad character anywhere, even the
 * last, refuses the image. */
static void png_base64(void)
{
    size_t n;
    char *good = png64(2000, &n), *s = strdup(good);
    size_t len = strlen(s);
    expect1("control", J("{s:s, s:s}", "text/plain", "a", "image/png", good),
            BIG, BIG, J("[{s:s, s:s}]", "text/plain", "a", "image/png", good),
            false);
    size_t last = len - 1;
    while (s[last] == '=')
        last--;
    static const char bad[] = {'!', '-', '_', ' ', '\n', '=', '.'};
    size_t at[] = {0, 20, len / 2, last - 1, last};
    for (size_t i = 0; i < IPD_ARRAY_LEN(bad); i++)
        for (size_t k = 0; k < IPD_ARRAY_LEN(at); k++) {
            char was = s[at[k]], what[64];
            s[at[k]] = bad[i];
            snprintf(what, sizeof(what), "'%c' at %zu of %zu", bad[i], at[k],
                     len);
            expect_png_refused(what, s);
            s[at[k]] = was;
        }
    /* Padding: missing, extra, and the unused bits of the last group. */
    s[len - (len - last - 1)] = 0;
    expect_png_refused("padding dropped", s);
    free(s);
    s = malloc(len + 5);
    IPD_ASSERT(s);
    snprintf(s, len + 5, "%s====", good);
    expect_png_refused("padding added", s);
    free(s);
    s = strdup(good);
    CHECK(len - last - 1 >= 1);
    /* The same character value with its lowest (unused) bit set: it
     * decodes to the same bytes, but is not their encoding. */
    {
        static const char a[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnop"
                                "qrstuvwxyz0123456789+/";
        size_t v = (size_t)(strchr(a, s[last]) - a);
        CHECK((v & 1) == 0);
        s[last] = a[v | 1];
    }
    expect_png_refused("non-zero unused bits", s);
    free(s);
    free(good);
}

/* Counts and the per-bundle cost. */
static void counts(void)
{
    struct ipd_buf t;
    struct got g;
    ipd_buf_init(&t, IPD_BUF_UNLIMITED);
    for (int i = 0; i < IPD_DISPLAY_ENTRIES_MAX + 1; i++)
        ipd_buf_add(&t, "{\"text/plain\":\"x\"}\n", 19);
    g.list = ipd_display_parse(t.buf, t.len, false, BIG, BIG, &g.truncated);
    CHECK_INT(json_array_size(g.list), IPD_DISPLAY_ENTRIES_MAX);
    CHECK(g.truncated);
    json_decref(g.list);
    g.list =
        ipd_display_parse(t.buf, t.len - 19, false, BIG, BIG, &g.truncated);
    CHECK_INT(json_array_size(g.list), IPD_DISPLAY_ENTRIES_MAX);
    CHECK(!g.truncated);
    json_decref(g.list);
    ipd_buf_release(&t);

    /* Each bundle costs COST of the text budget, even an empty one. */
    expect1("one byte past the cost", J("{s:s}", "text/plain", "x"), COST + 1,
            BIG, J("[{s:s}]", "text/plain", "x"), false);
    expect1("the cost alone", J("{s:s}", "text/plain", ""), COST, BIG,
            json_array(), true);
    expect("empty bundles cost too",
           "{\"text/plain\":\"\"}\n{\"text/plain\":\"\"}\n"
           "{\"text/plain\":\"\"}\n",
           false, 2 * COST + 1, BIG,
           J("[{s:s}, {s:s}]", "text/plain", "", "text/plain", ""), true);
}

/* The total: text across bundles within one budget; a bundle that finds
 * it spent is left out. */
static void total_size(void)
{
    char *p = str(100, 'p');
    char *l = line(J("{s:s, s:s}", "text/plain", p, "text/html", p));
    size_t tn = 3 * strlen(l) + 1;
    char *t = malloc(tn);
    IPD_ASSERT(t);
    snprintf(t, tn, "%s%s%s", l, l, l);
    /* Two bundles fit exactly; the third is cut to nothing. */
    expect("two of three fit", t, false, 2 * (COST + 200), BIG,
           J("[{s:s, s:s}, {s:s, s:s}]", "text/plain", p, "text/html", p,
             "text/plain", p, "text/html", p),
           true);
    expect("all three fit", t, false, 3 * (COST + 200), BIG,
           J("[{s:s, s:s}, {s:s, s:s}, {s:s, s:s}]", "text/plain", p,
             "text/html", p, "text/plain", p, "text/html", p, "text/plain", p,
             "text/html", p),
           false);
    expect("a budget of nothing", t, false, 0, BIG, json_array(), true);
    free(t);
    free(l);
    free(p);
}

TEST_MAIN(T(whole_bundle), T(read_bound), T(key_set), T(types), T(plain_length),
          T(html_length), T(png_length), T(png_whole), T(png_base64), T(counts),
          T(total_size))
