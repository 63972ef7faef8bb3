/*
 * requirement.h - one package requirement a client asks to install
 * ("pandas>=2.0,<3"), checked against a deliberately small grammar before
 * anything reaches pip.
 *
 * The accepted language is a strict subset of PEP 508 / PEP 440:
 *
 *   requirement = name [ "[" extra *( "," extra ) "]" ] [ [SP] specifiers ]
 *   name, extra = ALNUM [ *( ALNUM / "-" / "_" / "." ) ALNUM ]
 *                 (names at most IPD_REQ_NAME_MAX characters)
 *   specifiers  = spec *( [SP] "," [SP] spec )
 *   spec        = op [SP] version
 *   op          = "==" / "!=" / "<=" / ">=" / "<" / ">" / "~="
 *   version     = release [ pre ] [ post ] [ dev ]
 *               / release ".*"            (only after == and !=)
 *   release     = 1*DIGIT *( "." 1*DIGIT )
 *   pre         = ( "a" / "b" / "rc" ) 1*DIGIT
 *   post        = ".post" 1*DIGIT
 *   dev         = ".dev" 1*DIGIT
 *
 * SP is exactly one space (0x20).  Whitespace policy: a single space may
 * stand before the first operator, after any operator and on either side
 * of a comma between specifiers; nowhere else (not in names, not inside
 * [extras], never two in a row, never leading or trailing).  Tabs,
 * newlines, NUL and other control characters are rejected anywhere.
 * "~=" needs at least two release parts (~=1.4).  Versions are lowercase
 * and canonical: no epochs (1!2), no local parts (+cpu), no "v" prefix,
 * no "-" or "_" separators, no "alpha"/"beta"/"c"/"pre" spellings.
 *
 * Everything else is refused with IPD_ERR_INVALID and a message for a
 * person.  The categories are checked in this order, and each message
 * starts with a fixed phrase that tests and clients may rely on:
 *   empty input                  "the requirement is empty"
 *   over IPD_REQ_MAX bytes       "the requirement is longer than"
 *   bytes >= 0x80                "the requirement contains non-ASCII"
 *   NUL, tab, CR, LF, DEL, ...   "the requirement contains a control character"
 *   leading/trailing space       "leading or trailing whitespace"
 *   leading '-' (-e, -r, --index-url, ...)
 *                                "options"
 *   ':' or '@' (name @ url, https://..., git+..., file:...)
 *                                "URLs"
 *   ';'                          "environment markers"
 *   '/', leading '.' or '~', a name ending in an archive suffix (.whl,
 *   .tar.gz, .zip, ...)          "paths"
 *   $ ` | & ( ) { } ' " \ ? and any '*' not preceded by '.'
 *                                "shell metacharacters"
 *   two spaces in a row          "use at most one space"
 *   then the grammar:
 *   a space anywhere else        "spaces are only allowed"
 *   bad or over-long name        "the package name"
 *   bad [extras]                 "extras must be"
 *   no or unknown operator       "missing version operator",
 *                                "unknown version operator"
 *   bad version                  "missing version after", "version '"
 *   ".*" after <, >, <=, >=, ~=  "wildcard"
 *   ~= with a one-part version   "~= needs"
 *   specifiers without commas    "separate version specifiers with commas"
 *   trailing comma               "missing version specifier"
 *   anything else after the name "unexpected"
 *
 * Thread-safety: every function here is pure and reentrant.
 */
#ifndef IPD_REQUIREMENT_H
#define IPD_REQUIREMENT_H

#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

#include "../service/common/buf.h"
#include "../service/common/ipd.h"

#define IPD_REQ_MAX 200      /* longest accepted requirement, bytes */
#define IPD_REQ_NAME_MAX 100 /* longest package name, characters */

struct ipd_requirement {
    char name[IPD_REQ_NAME_MAX + 1];       /* as written ("Scikit_Learn") */
    char normalized[IPD_REQ_NAME_MAX + 1]; /* PEP 503 ("scikit-learn") */
    char extras[IPD_REQ_MAX + 1];          /* normalized, comma-separated, no
                                              brackets ("excel,plot"); "" if none */
    char specifier[IPD_REQ_MAX + 1];       /* canonical, comma-separated, no
                                              spaces (">=2.0,<3"); "" if none */
};

/*
 * Parse s[0..len) (need not be NUL-terminated; a NUL inside is refused).
 * @param out [out] filled on success; zeroed on failure.
 * @param why [out] on IPD_ERR_INVALID, a message for a person is appended
 *            (see the categories above); may be NULL.
 * @return IPD_OK or IPD_ERR_INVALID.
 */
enum ipd_err ipd_requirement_parse(const char *s, size_t len,
                                   struct ipd_requirement *out,
                                   struct ipd_buf *why);

/* Buffer size that always holds ipd_requirement_format's output. */
#define IPD_REQ_FORMAT_MAX (IPD_REQ_MAX + 1)

/*
 * Write the canonical form of a parsed requirement into out:
 * normalized name, "[extras]" when there are any, then the specifier, with
 * no spaces ("scikit-learn[plot]>=1.3,<2").  It starts with a letter or
 * digit and holds only letters, digits and "-.[],=!<>~*", so it is safe
 * to pass to pip as one argv element (never through a shell, where '<'
 * and '>' would redirect).  Parsing it again gives the same normalized,
 * extras and specifier, with name equal to normalized.
 * @return IPD_OK, or IPD_ERR_TOO_LARGE when outsz is too small (out then
 *         holds "" if outsz > 0).
 */
enum ipd_err ipd_requirement_format(const struct ipd_requirement *r, char *out,
                                    size_t outsz);

/*
 * PEP 503 normalization: lowercase, and each run of '-', '_' and '.'
 * becomes one '-' ("Foo.Bar_baz" -> "foo-bar-baz").  Does not validate.
 * Writes at most outsz - 1 bytes plus a NUL (outsz must be > 0);
 * longer results are truncated.
 */
void ipd_package_name_normalize(const char *in, char *out, size_t outsz);

/*
 * True when s is a PEP 508 name (letters, digits, '-', '_', '.'; first
 * and last a letter or digit) of 1 to IPD_REQ_NAME_MAX characters.
 */
bool ipd_package_name_valid(const char *s);

/* The elements of a "packages" list (POST /v1/packages, executions):
 * strings without NUL of at most 4096 bytes.  false with why naming the
 * first bad one; a list that is not an array has nothing to check. */
bool ipd_requirement_list_ok(const json_t *list, char *why, size_t whysz);

/*
 * Whether pip would find requirement canon (one this grammar accepts)
 * already met by an installed version ver ("Requirement already
 * satisfied"), decided only where that is certain: no extras (they may
 * pull in more distributions), and plain release versions ("1.24.2") on
 * both sides, compared as PEP 440 does (zero-padded; "==1.*" a prefix;
 * "~=1.4.2" as ">=1.4.2,==1.4.*").  Anything else (pre, post, dev or
 * local versions, an unparsable ver) is false: let pip decide.  No
 * specifier: any version meets it.
 */
bool ipd_requirement_met(const char *canon, const char *ver);

#endif
