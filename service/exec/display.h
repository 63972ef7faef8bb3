/*
 * display.h - the display channel's parser: the lines the prelude appended
 * to .interpd/display.jsonl (display(obj) and a bare last expression),
 * which the run's code could have rewritten, turned into the result's
 * "display" list.  Pure: bytes in, JSON out; no files, no executor
 * (result.c reads the file, bounded, and calls it), so it is unit-tested
 * and fuzzed on its own (tests/unit/service/test_display.c,
 * tests/fuzz/fuzz_display.c).
 *
 * What passes, line by line (each line is parsed on its own; a line that
 * is no JSON object is left out):
 *   - a bundle is an object with a string "text/plain"; it may also have
 *     a string "text/html", a string "image/png" and "truncated": true (the
 *     prelude cut something); any other key, or one of these of another
 *     type, is left out;
 *   - "text/plain" is cut (at a character boundary) to what is left of
 *     the text budget; "text/html" that does not fit whole is left out;
 *     each bundle also costs IPD_DISPLAY_ENTRY_COST of it;
 *   - "image/png" is strict base64 (padded, no whitespace, zero unused
 *     bits) of a whole, well-formed PNG: the signature, then chunks whose
 *     lengths fit and whose CRCs match, IHDR first, IEND last, nothing
 *     after; its decoded bytes within the image budget;
 *   - at most IPD_DISPLAY_ENTRIES_MAX bundles.
 * Whatever is cut or left out sets *truncated, as does a file cut at the
 * read bound (whose partial last line is left out).
 *
 * Thread-safety: none needed; no state.
 */
#ifndef IPD_EXEC_DISPLAY_H
#define IPD_EXEC_DISPLAY_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define IPD_DISPLAY_FILE_MAX (8 * 1024 * 1024 + 4096) /* display.jsonl read */
#define IPD_DISPLAY_ENTRIES_MAX 1000                  /* bundles in display */
#define IPD_DISPLAY_ENTRY_COST 32 /* text budget charged per bundle */

/*
 * The display list of text[0..len), the first bytes of display.jsonl.
 * @param over      the file was longer than len (cut at the read bound)
 * @param text_max  bytes of text/plain and text/html together
 * @param png_max   decoded bytes of image/png together (0: no images)
 * @param truncated [out] something was cut or left out
 * @return a new reference to an array of bundles (never NULL).
 */
json_t *ipd_display_parse(const char *text, size_t len, bool over,
                          int64_t text_max, int64_t png_max, bool *truncated);

/* The same, one bundle at a time (a streamed run's display events, as
 * each is shown: service/exec/result.c): what is left of the budgets. */
struct ipd_display_budget {
    int64_t text_left; /* bytes of text/plain and text/html */
    int64_t png_left;  /* decoded bytes of image/png */
    size_t entries;
    bool truncated; /* something was cut or left out */
};
void ipd_display_budget_init(struct ipd_display_budget *b, int64_t text_max,
                             int64_t png_max);
/* The checked bundle of line (borrowed: a parsed line), charged to b;
 * NULL when it is left out. */
json_t *ipd_display_bundle(json_t *line, struct ipd_display_budget *b);

/* Whether data[0..len) is a well-formed PNG as ipd_display_parse requires
 * (exported for tests). */
bool ipd_display_png_ok(const unsigned char *data, size_t len);

#endif
