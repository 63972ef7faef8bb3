/*
 * test_requirement.c - the strict requirement grammar: every accepted
 * form with its parsed fields and canonical string, every refused form
 * with the category of its message, PEP 503 normalization.
 */
#include <stdbool.h>
#include <string.h>

#include "service/common/buf.h"
#include "venv/requirement.h"
#include "test.h"

/* Parse s; expect success with these fields and this canonical form, and
 * expect the canonical form to parse back to the same requirement. */
static void accept_at(int line, const char *s, const char *name,
                      const char *normalized, const char *extras,
                      const char *spec, const char *formatted)
{
    struct ipd_requirement r, again;
    struct ipd_buf why;
    char out[IPD_REQ_FORMAT_MAX];
    ipd_buf_init(&why, 4096);
    enum ipd_err rc = ipd_requirement_parse(s, strlen(s), &r, &why);
    if (rc)
        fprintf(stderr, "line %d: \"%s\" refused: %s\n", line, s, why.buf);
    CHECK_INT(rc, IPD_OK);
    CHECK_STR(r.name, name);
    CHECK_STR(r.normalized, normalized);
    CHECK_STR(r.extras, extras);
    CHECK_STR(r.specifier, spec);
    CHECK_INT(ipd_requirement_format(&r, out, sizeof(out)), IPD_OK);
    CHECK_STR(out, formatted);
    CHECK_INT(ipd_requirement_parse(out, strlen(out), &again, NULL), IPD_OK);
    CHECK_STR(again.name, r.normalized);
    CHECK_STR(again.normalized, r.normalized);
    CHECK_STR(again.extras, r.extras);
    CHECK_STR(again.specifier, r.specifier);
    ipd_buf_release(&why);
}

/* Parse s[0..len); expect IPD_ERR_INVALID, a message containing category,
 * and an emptied struct. */
static void refuse_at(int line, const char *s, size_t len, const char *category)
{
    struct ipd_requirement r;
    struct ipd_buf why;
    ipd_buf_init(&why, 4096);
    memset(&r, 'x', sizeof(r));
    enum ipd_err rc = ipd_requirement_parse(s, len, &r, &why);
    if (rc != IPD_ERR_INVALID || !strstr(why.buf, category)) {
        fprintf(stderr,
                "line %d: \"%.*s\": rc %d, message \"%s\", want \"%s\"\n", line,
                (int)len, s ? s : "", (int)rc, why.buf, category);
        test__failed_checks++;
    }
    CHECK(r.name[0] == '\0' && r.normalized[0] == '\0');
    CHECK(r.extras[0] == '\0' && r.specifier[0] == '\0');
    /* Also without a message buffer. */
    CHECK_INT(ipd_requirement_parse(s, len, &r, NULL), IPD_ERR_INVALID);
    ipd_buf_release(&why);
}

#define ACCEPT(s, name, norm, extras, spec, fmt)                               \
    accept_at(__LINE__, s, name, norm, extras, spec, fmt)
#define REFUSE(s, category) refuse_at(__LINE__, s, strlen(s), category)

static void plain_names(void)
{
    ACCEPT("pandas", "pandas", "pandas", "", "", "pandas");
    ACCEPT("a", "a", "a", "", "", "a");
    ACCEPT("7z", "7z", "7z", "", "", "7z");
    ACCEPT("Scikit_Learn", "Scikit_Learn", "scikit-learn", "", "",
           "scikit-learn");
    ACCEPT("Foo.Bar_baz", "Foo.Bar_baz", "foo-bar-baz", "", "", "foo-bar-baz");
    ACCEPT("zope.interface", "zope.interface", "zope-interface", "", "",
           "zope-interface");
    ACCEPT("a-_.b", "a-_.b", "a-b", "", "", "a-b");
    ACCEPT("beautifulsoup4", "beautifulsoup4", "beautifulsoup4", "", "",
           "beautifulsoup4");
}

static void specifiers(void)
{
    ACCEPT("pandas==2.0.3", "pandas", "pandas", "", "==2.0.3", "pandas==2.0.3");
    ACCEPT("pandas>=2.0,<3", "pandas", "pandas", "", ">=2.0,<3",
           "pandas>=2.0,<3");
    ACCEPT("scipy<=1.11.4", "scipy", "scipy", "", "<=1.11.4", "scipy<=1.11.4");
    ACCEPT("scipy>1", "scipy", "scipy", "", ">1", "scipy>1");
    ACCEPT("numpy!=1.25.0", "numpy", "numpy", "", "!=1.25.0", "numpy!=1.25.0");
    ACCEPT("numpy~=1.24", "numpy", "numpy", "", "~=1.24", "numpy~=1.24");
    ACCEPT("numpy~=1.24.0", "numpy", "numpy", "", "~=1.24.0", "numpy~=1.24.0");
    ACCEPT("numpy>=1.20,!=1.21.*,<2", "numpy", "numpy", "",
           ">=1.20,!=1.21.*,<2", "numpy>=1.20,!=1.21.*,<2");
    ACCEPT("Django>=4.2.0.0.1", "Django", "django", "", ">=4.2.0.0.1",
           "django>=4.2.0.0.1");
    ACCEPT("x==007", "x", "x", "", "==007", "x==007");
}

static void wildcards(void)
{
    ACCEPT("numpy==1.2.*", "numpy", "numpy", "", "==1.2.*", "numpy==1.2.*");
    ACCEPT("numpy!=1.*", "numpy", "numpy", "", "!=1.*", "numpy!=1.*");
    REFUSE("numpy>=1.2.*", "wildcard");
    REFUSE("numpy<1.*", "wildcard");
    REFUSE("numpy~=1.2.*", "wildcard");
    REFUSE("numpy==1.*.2", "version '1.*.2' is not valid");
    REFUSE("numpy==1.0rc1.*", "version '1.0rc1.*' is not valid");
    REFUSE("numpy==.*", "version '.*' is not valid");
}

static void pre_post_dev(void)
{
    ACCEPT("foo==1.2.3rc1", "foo", "foo", "", "==1.2.3rc1", "foo==1.2.3rc1");
    ACCEPT("foo==1.0a1", "foo", "foo", "", "==1.0a1", "foo==1.0a1");
    ACCEPT("foo>=1.0b2", "foo", "foo", "", ">=1.0b2", "foo>=1.0b2");
    ACCEPT("foo==2.0.post1", "foo", "foo", "", "==2.0.post1", "foo==2.0.post1");
    ACCEPT("foo==1.0.dev3", "foo", "foo", "", "==1.0.dev3", "foo==1.0.dev3");
    ACCEPT("foo==1.0rc1.post2.dev3", "foo", "foo", "", "==1.0rc1.post2.dev3",
           "foo==1.0rc1.post2.dev3");
    ACCEPT("foo~=2.0.post1", "foo", "foo", "", "~=2.0.post1", "foo~=2.0.post1");
}

static void bad_versions(void)
{
    const char *bad[] = {
        "pandas>=v2",          "pandas==1.0RC1",      "pandas==1.0+cpu",
        "pandas==1.0-1",       "pandas==.1",          "pandas==1.",
        "pandas==1..2",        "pandas==1.0rc",       "pandas==1.0.post",
        "pandas==1.0-post1",   "pandas==1.0.dev",     "pandas==1.0dev1",
        "pandas==1.0alpha1",   "pandas==1.0c1",       "pandas==1.0a1b2",
        "pandas==1.0.dev1rc1", "pandas==1!2.0",       "pandas==latest",
        "pandas>=1.0_1",       "pandas==1.0.post1a1",
    };
    for (size_t i = 0; i < IPD_ARRAY_LEN(bad); i++)
        refuse_at(__LINE__, bad[i], strlen(bad[i]), "is not valid; use digits");
    REFUSE("pandas>=", "missing version after '>='");
    REFUSE("pandas>=,<2", "missing version after '>='");
    REFUSE("pandas== ", "leading or trailing whitespace");
    REFUSE("pandas~=1", "~= needs");
    REFUSE("pandas~=1.post1", "~= needs");
}

static void operators(void)
{
    REFUSE("pandas=2.0", "unknown version operator '='");
    REFUSE("pandas===2.0", "unknown version operator '==='");
    REFUSE("pandas=>2.0", "unknown version operator '=>'");
    REFUSE("pandas<>2", "unknown version operator '<>'");
    REFUSE("pandas~2", "unknown version operator '~'");
    REFUSE("pandas!2", "unknown version operator '!'");
    REFUSE("pandas 2.0", "missing version operator before '2'");
    REFUSE("pandas>=1,2", "missing version operator before '2'");
    REFUSE("pandas>=1.0,", "missing version specifier");
    REFUSE("pandas>=1.0 ,", "missing version specifier");
    REFUSE("pandas>=1.0<2", "separate version specifiers with commas");
    REFUSE("pandas>=1.0 <2", "separate version specifiers with commas");
    REFUSE("pandas>=1.0!=1.5", "separate version specifiers with commas");
    REFUSE("pandas>=1.0,,<2", "missing version operator before ','");
}

static void extras(void)
{
    ACCEPT("requests[socks]", "requests", "requests", "socks", "",
           "requests[socks]");
    ACCEPT("pandas[Excel,Performance_Extra]>=2", "pandas", "pandas",
           "excel,performance-extra", ">=2",
           "pandas[excel,performance-extra]>=2");
    ACCEPT("Pandas[plot] >= 2.0, < 3", "Pandas", "pandas", "plot", ">=2.0,<3",
           "pandas[plot]>=2.0,<3");
    REFUSE("pandas[]", "extras must be");
    REFUSE("pandas[excel", "extras must be");
    REFUSE("pandas[excel,]", "extras must be");
    REFUSE("pandas[,excel]", "extras must be");
    REFUSE("pandas[-x]", "extras must be");
    REFUSE("pandas[x-]", "extras must be");
    REFUSE("pandas[a=b]", "extras must be");
    REFUSE("pandas[ excel]", "spaces are only allowed");
    REFUSE("pandas[excel ]", "spaces are only allowed");
    REFUSE("pandas[excel, plot]", "spaces are only allowed");
    REFUSE("pandas [excel]", "spaces are only allowed");
    REFUSE("pandas[a][b]", "unexpected character '['");
    REFUSE("pandas[a]b", "unexpected character 'b'");
}

static void whitespace(void)
{
    ACCEPT("pandas >=2.0", "pandas", "pandas", "", ">=2.0", "pandas>=2.0");
    ACCEPT("pandas>= 2.0", "pandas", "pandas", "", ">=2.0", "pandas>=2.0");
    ACCEPT("pandas >= 2.0, < 3", "pandas", "pandas", "", ">=2.0,<3",
           "pandas>=2.0,<3");
    ACCEPT("pandas>=2.0 ,<3", "pandas", "pandas", "", ">=2.0,<3",
           "pandas>=2.0,<3");
    ACCEPT("pandas >= 2.0 , < 3", "pandas", "pandas", "", ">=2.0,<3",
           "pandas>=2.0,<3");
    REFUSE(" pandas", "leading or trailing whitespace");
    REFUSE("pandas ", "leading or trailing whitespace");
    REFUSE(" ", "leading or trailing whitespace");
    REFUSE("pandas  >=2", "use at most one space");
    REFUSE("pandas>=2,  <3", "use at most one space");
    REFUSE("pan das", "spaces are only allowed");
    REFUSE("pandas numpy", "spaces are only allowed");
    REFUSE("pandas > = 2", "unknown version operator '> ='");
    REFUSE("pandas>= =2", "unknown version operator '>= ='");
    REFUSE("pandas\t>=2", "control character");
    REFUSE("\tpandas", "control character");
    REFUSE("pandas\n", "control character");
    REFUSE("pan\ndas", "control character");
    REFUSE("pandas\r\n", "control character");
    REFUSE("pandas\v", "control character");
    REFUSE("pandas\x7f", "control character");
    refuse_at(__LINE__, "pandas\0os", 9, "control character");
    refuse_at(__LINE__, "\0", 1, "control character");
}

static void options(void)
{
    REFUSE("-e .", "options");
    REFUSE("-e git+https://github.com/x/y", "options");
    REFUSE("--index-url https://evil.example/simple", "options");
    REFUSE("--extra-index-url=https://evil.example", "options");
    REFUSE("-r requirements.txt", "options");
    REFUSE("-i", "options");
    REFUSE("--pre", "options");
    REFUSE("-", "options");
}

static void urls(void)
{
    REFUSE("pkg @ https://example.com/pkg-1.0.whl", "URLs");
    REFUSE("pkg@https://example.com/pkg.tar.gz", "URLs");
    REFUSE("https://example.com/x.tar.gz", "URLs");
    REFUSE("git+https://github.com/x/y", "URLs");
    REFUSE("pkg @ file:///tmp/pkg", "URLs");
    REFUSE("file:pkg", "URLs");
    REFUSE("pkg@1.0", "URLs");
    REFUSE("C:pkg", "URLs");
}

static void markers(void)
{
    REFUSE("pandas; python_version<'3.8'", "environment markers");
    REFUSE("pandas;os_name==\"posix\"", "environment markers");
    REFUSE("pandas;rm -rf x", "environment markers");
    REFUSE(";", "environment markers");
}

static void paths(void)
{
    REFUSE("./x", "paths");
    REFUSE("/x", "paths");
    REFUSE("x/y", "paths");
    REFUSE("..", "paths");
    REFUSE(".", "paths");
    REFUSE(".hidden", "paths");
    REFUSE("~/pkg", "paths");
    REFUSE("x.whl", "paths");
    REFUSE("pkg-1.0-py3-none-any.WHL", "paths");
    REFUSE("pkg.tar.gz", "paths");
    REFUSE("Pkg-1.0.ZIP", "paths");
    REFUSE("pkg.tgz", "paths");
    REFUSE("pkg.egg", "paths");
    REFUSE("pkg.whl==1.0", "paths");
    REFUSE("pandas>=1.0/2", "paths");
}

static void shell_metacharacters(void)
{
    const char *bad[] = {
        "$(reboot)",   "pandas`id`", "pandas|sh",
        "pandas&",     "pandas&&x",  "pandas(1)",
        "pandas{1}",   "pandas'",    "pandas\"",
        "pandas\\x",   "pandas?",    "pan*das",
        "pandas==*",   "*",          "pandas>=$V",
        "pandas[a$b]", "pandas==1*", "pandas>1 && echo",
    };
    for (size_t i = 0; i < IPD_ARRAY_LEN(bad); i++)
        refuse_at(__LINE__, bad[i], strlen(bad[i]), "shell metacharacters");
}

static void names(void)
{
    char s[IPD_REQ_MAX + 2];
    REFUSE("_pandas", "the package name '_pandas' is not valid");
    REFUSE("pandas-", "the package name 'pandas-' is not valid");
    REFUSE("pandas.", "the package name 'pandas.' is not valid");
    REFUSE("pandas_>=1", "the package name 'pandas_' is not valid");
    REFUSE("==1.0", "the package name is missing");
    REFUSE(">=1.0", "the package name is missing");
    REFUSE("[x]", "the package name is missing");
    REFUSE("pandas,numpy", "unexpected ','");
    REFUSE("pandas#egg", "unexpected character '#'");
    REFUSE("pandas]", "unexpected character ']'");
    REFUSE("pandas+", "unexpected character '+'");
    REFUSE("pandas%20", "unexpected character '%'");

    /* Names: exactly 100 characters pass, 101 don't. */
    memset(s, 'a', IPD_REQ_NAME_MAX);
    s[IPD_REQ_NAME_MAX] = '\0';
    ACCEPT(s, s, s, "", "", s);
    s[IPD_REQ_NAME_MAX] = 'b';
    s[IPD_REQ_NAME_MAX + 1] = '\0';
    REFUSE(s, "the package name is longer than 100 characters");
}

static void lengths(void)
{
    char s[IPD_REQ_MAX + 2], want[IPD_REQ_MAX + 2];
    char name[IPD_REQ_NAME_MAX + 1];
    /* 100-character name + "==" + a 98-character version = 200 bytes. */
    memset(s, 'a', IPD_REQ_NAME_MAX);
    memcpy(s + IPD_REQ_NAME_MAX, "==11", 4);
    for (size_t i = IPD_REQ_NAME_MAX + 4; i < IPD_REQ_MAX; i += 2)
        memcpy(s + i, ".1", 2);
    s[IPD_REQ_MAX] = '\0';
    CHECK_INT(strlen(s), IPD_REQ_MAX);
    memcpy(want, s + IPD_REQ_NAME_MAX, IPD_REQ_MAX - IPD_REQ_NAME_MAX + 1);
    memset(name, 'a', IPD_REQ_NAME_MAX);
    name[IPD_REQ_NAME_MAX] = '\0';
    accept_at(__LINE__, s, name, name, "", want, s);
    s[IPD_REQ_MAX] = '1';
    s[IPD_REQ_MAX + 1] = '\0';
    REFUSE(s, "the requirement is longer than 200 bytes");
    REFUSE("", "the requirement is empty");
    refuse_at(__LINE__, NULL, 0, "the requirement is empty");
    refuse_at(__LINE__, "pandas", 0, "the requirement is empty");
    /* len, not the NUL, decides: a prefix of a longer string. */
    {
        struct ipd_requirement r;
        CHECK_INT(ipd_requirement_parse("numpy==1.0 junk", 10, &r, NULL),
                  IPD_OK);
        CHECK_STR(r.specifier, "==1.0");
    }
}

static void non_ascii(void)
{
    REFUSE("p\xc3\xa4ndas", "non-ASCII");
    REFUSE("pandas\xe2\x80\x8b", "non-ASCII"); /* zero-width space */
    REFUSE("pandas\xc2\xa0>=1", "non-ASCII");  /* no-break space */
    REFUSE("\xff", "non-ASCII");
    REFUSE("\xd0\xb0pandas", "non-ASCII"); /* Cyrillic a */
}

static void check_order(void)
{
    /* When several rules break, the message names the likeliest intent. */
    REFUSE("--index-url=https://x", "options");
    REFUSE("pkg @ https://x; os_name=='nt'", "URLs");
    REFUSE("pkg; $(x)", "environment markers");
    REFUSE("./pkg.whl", "paths");
    REFUSE("x/$(y)", "paths");
}

static void format_limits(void)
{
    struct ipd_requirement r;
    char small[8];
    CHECK_INT(ipd_requirement_parse("pandas>=2.0", 11, &r, NULL), IPD_OK);
    CHECK_INT(ipd_requirement_format(&r, small, sizeof(small)),
              IPD_ERR_TOO_LARGE);
    CHECK_STR(small, "");
    CHECK_INT(ipd_requirement_format(&r, small, 0), IPD_ERR_TOO_LARGE);
    char exact[12];
    CHECK_INT(ipd_requirement_format(&r, exact, sizeof(exact)), IPD_OK);
    CHECK_STR(exact, "pandas>=2.0");
}

static void normalize(void)
{
    char out[IPD_REQ_NAME_MAX + 1];
    ipd_package_name_normalize("Foo.Bar_baz", out, sizeof(out));
    CHECK_STR(out, "foo-bar-baz");
    ipd_package_name_normalize("A__B", out, sizeof(out));
    CHECK_STR(out, "a-b");
    ipd_package_name_normalize("a-_-.b", out, sizeof(out));
    CHECK_STR(out, "a-b");
    ipd_package_name_normalize("PyYAML", out, sizeof(out));
    CHECK_STR(out, "pyyaml");
    ipd_package_name_normalize("python_dateutil", out, sizeof(out));
    CHECK_STR(out, "python-dateutil");
    ipd_package_name_normalize("", out, sizeof(out));
    CHECK_STR(out, "");
    /* No validation: separators at the ends stay (as one '-'). */
    ipd_package_name_normalize("__x..", out, sizeof(out));
    CHECK_STR(out, "-x-");
    ipd_package_name_normalize("abcdef", out, 4);
    CHECK_STR(out, "abc");
    ipd_package_name_normalize("abc", out, 1);
    CHECK_STR(out, "");
}

static void name_valid(void)
{
    char s[IPD_REQ_NAME_MAX + 2];
    CHECK(ipd_package_name_valid("numpy"));
    CHECK(ipd_package_name_valid("a"));
    CHECK(ipd_package_name_valid("Foo.Bar_baz-2"));
    CHECK(!ipd_package_name_valid(""));
    CHECK(!ipd_package_name_valid(NULL));
    CHECK(!ipd_package_name_valid("-a"));
    CHECK(!ipd_package_name_valid("a_"));
    CHECK(!ipd_package_name_valid("a b"));
    CHECK(!ipd_package_name_valid("a/b"));
    CHECK(!ipd_package_name_valid("p\xc3\xa4ndas"));
    memset(s, 'x', IPD_REQ_NAME_MAX);
    s[IPD_REQ_NAME_MAX] = '\0';
    CHECK(ipd_package_name_valid(s));
    s[IPD_REQ_NAME_MAX] = 'x';
    s[IPD_REQ_NAME_MAX + 1] = '\0';
    CHECK(!ipd_package_name_valid(s));
}

static void message_appends(void)
{
    /* The message is appended, so a caller can prefix its own context. */
    struct ipd_requirement r;
    struct ipd_buf why;
    ipd_buf_init(&why, 4096);
    ipd_buf_adds(&why, "packages[2]: ");
    CHECK_INT(ipd_requirement_parse("-e .", 4, &r, &why), IPD_ERR_INVALID);
    CHECK(!strncmp(why.buf, "packages[2]: options", 20));
    ipd_buf_release(&why);
}

/* ipd_requirement_met: what pip would call "already satisfied", decided
 * only where that is certain (else false: pip decides). */
static void met(void)
{
    static const struct {
        const char *req, *ver;
        bool met;
    } c[] = {
        {"numpy", "1.24.2", true},
        {"numpy>=1.20", "1.24.2", true},
        {"numpy>=1.24.2", "1.24.2", true},
        {"numpy>=1.24.3", "1.24.2", false},
        {"numpy>1.24.2", "1.24.2", false},
        {"numpy>1.24", "1.24.2", true},
        {"numpy<1.24.2", "1.24.2", false},
        {"numpy<2", "1.24.2", true},
        {"numpy<=1.24.2", "1.24.2", true},
        {"numpy<=1.24", "1.24.2", false},
        {"numpy==1.24.2", "1.24.2", true},
        {"numpy==1.24", "1.24.0", true}, /* zero-padded */
        {"numpy==1.24.0.0", "1.24", true},
        {"numpy==1.24", "1.24.2", false},
        {"numpy!=1.24.2", "1.24.2", false},
        {"numpy!=1.24", "1.24.2", true},
        {"numpy==1.*", "1.24.2", true},
        {"numpy==1.24.*", "1.24.2", true},
        {"numpy==1.25.*", "1.24.2", false},
        {"numpy==1.2.*", "1.24.2", false}, /* segments, not text */
        {"numpy!=1.24.*", "1.24.2", false},
        {"numpy!=2.*", "1.24.2", true},
        {"numpy==2.*", "2", true},
        {"numpy~=1.20", "1.24.2", true},
        {"numpy~=1.24.3", "1.24.2", false},
        {"numpy~=1.24.0", "1.24.2", true},
        {"numpy~=1.23.0", "1.24.2", false},
        {"numpy~=2.0", "1.24.2", false},
        {"numpy>=1.20,<2", "1.24.2", true},
        {"numpy>=1.20,<1.24", "1.24.2", false},
        {"numpy>=1.20,!=1.24.2", "1.24.2", false},
        {"numpy>=1.10", "1.9", false}, /* numbers, not text */
        {"numpy>=1.9", "1.10", true},
        /* what pip decides: extras, non-release versions */
        {"pandas[excel]>=1", "1.5.3", false},
        {"numpy>=1.0", "1.24.2rc1", false},
        {"numpy>=1.0", "1.24.2.post1", false},
        {"numpy>=1.0", "1.24.2+dfsg", false},
        {"numpy>=1.0", "1!1.0", false},
        {"numpy", "1.24.2+dfsg", false},
        {"numpy==1.0rc1", "1.0", false},
        {"numpy>=1.0", "", false},
        {"numpy>=1.0", "1..2", false},
        {"numpy>=1.0", "1.2.", false},
        {"numpy>=1.0", ".1", false},
        {"numpy>=1.0", "1.2.3.4.5.6.7.8.9", false},
        {"numpy>=1.0", "12345678901", false},
        {"not a requirement", "1.0", false},
    };
    for (size_t i = 0; i < sizeof(c) / sizeof(c[0]); i++) {
        bool got = ipd_requirement_met(c[i].req, c[i].ver);
        if (got != c[i].met) {
            fprintf(stderr, "met(\"%s\", \"%s\") = %d, want %d\n", c[i].req,
                    c[i].ver, got, c[i].met);
            test__failed_checks++;
        }
    }
}

TEST_MAIN(T(met), T(plain_names), T(specifiers), T(wildcards), T(pre_post_dev),
          T(bad_versions), T(operators), T(extras), T(whitespace), T(options),
          T(urls), T(markers), T(paths), T(shell_metacharacters), T(names),
          T(lengths), T(non_ascii), T(check_order), T(format_limits),
          T(normalize), T(name_valid), T(message_appends))
