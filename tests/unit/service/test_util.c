/*
 * test_util.c - ids, times, durations, sizes, validators, the buffer.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>

#include "service/common/buf.h"
#include "service/common/crypto.h"
#include "service/common/log.h"
#include "service/common/util.h"
#include "test.h"

static void ids_have_shape_and_differ(void)
{
    char a[IPD_ID_MAX], b[IPD_ID_MAX];
    ipd_id_new("file", a);
    ipd_id_new("file", b);
    CHECK_INT(strlen(a), 5 + IPD_ID_RANDOM_CHARS);
    CHECK(ipd_id_valid("file", a));
    CHECK(ipd_id_valid("file", b));
    CHECK(strcmp(a, b) != 0);
    CHECK(!ipd_id_valid("key", a));
    CHECK(!ipd_id_valid("file", "file_"));
    CHECK(!ipd_id_valid("file", "file_aaaaaaaaaaaaaaaaaaaaaaaaa"));   /* 25 */
    CHECK(!ipd_id_valid("file", "file_aaaaaaaaaaaaaaaaaaaaaaaaaaa")); /* 27 */
    CHECK(!ipd_id_valid("file", "file_AAAAAAAAAAAAAAAAAAAAAAAAAA"));
    CHECK(!ipd_id_valid("file", "file_../aaaaaaaaaaaaaaaaaaaaaaa"));
    CHECK(!ipd_id_valid("file", NULL));
}

static void ids_are_random_enough(void)
{
    /* 2000 ids, no repeats, and every base32 digit used somewhere. */
    enum { N = 2000 };
    static char ids[N][IPD_ID_MAX];
    int seen[256] = {0};
    for (int i = 0; i < N; i++) {
        ipd_id_new("x", ids[i]);
        for (const char *p = ids[i] + 2; *p; p++)
            seen[(unsigned char)*p]++;
    }
    for (int i = 1; i < N; i++)
        CHECK(strcmp(ids[i], ids[i - 1]) != 0);
    const char *digits = "abcdefghijklmnopqrstuvwxyz234567";
    for (const char *d = digits; *d; d++)
        CHECK(seen[(unsigned char)*d] > 0);
}

static void time_format_and_parse(void)
{
    char s[IPD_TIME_STR];
    int64_t ms = 0;
    ipd_time_format(1795299000000LL, s);
    CHECK_STR(s, "2026-11-21T22:10:00Z");
    CHECK_INT(ipd_time_parse("2026-11-21T22:10:00Z", &ms), IPD_OK);
    CHECK_INT(ms, 1795299000000LL);
    CHECK_INT(ipd_time_parse("2026-11-21T22:10:00.250Z", &ms), IPD_OK);
    CHECK_INT(ms, 1795299000250LL);
    CHECK(ipd_time_parse("2026-11-21 22:10:00", &ms) != IPD_OK);
    CHECK(ipd_time_parse("2026-11-21T22:10:00+01:00", &ms) != IPD_OK);
}

static void durations(void)
{
    int64_t ms = 0;
    CHECK_INT(ipd_duration_parse("48h", &ms), IPD_OK);
    CHECK_INT(ms, 48LL * 3600 * 1000);
    CHECK_INT(ipd_duration_parse("30m", &ms), IPD_OK);
    CHECK_INT(ms, 30LL * 60 * 1000);
    CHECK_INT(ipd_duration_parse("2s", &ms), IPD_OK);
    CHECK_INT(ms, 2000);
    CHECK_INT(ipd_duration_parse("500ms", &ms), IPD_OK);
    CHECK_INT(ms, 500);
    CHECK_INT(ipd_duration_parse("7d", &ms), IPD_OK);
    CHECK_INT(ms, 7LL * 86400 * 1000);
    CHECK_INT(ipd_duration_parse("90", &ms), IPD_OK);
    CHECK_INT(ms, 90000);
    CHECK_INT(ipd_duration_parse("never", &ms), IPD_OK);
    CHECK(ms == IPD_TIME_NEVER);
    CHECK(ipd_duration_parse("", &ms) != IPD_OK);
    CHECK(ipd_duration_parse("-1s", &ms) != IPD_OK);
    CHECK(ipd_duration_parse("2 s", &ms) != IPD_OK);
    CHECK(ipd_duration_parse("2w", &ms) != IPD_OK);
    CHECK(ipd_duration_parse("h", &ms) != IPD_OK);
    CHECK(ipd_duration_parse("99999999999999999999h", &ms) != IPD_OK);
}

static void sizes(void)
{
    int64_t b = 0;
    CHECK_INT(ipd_size_parse("50M", &b), IPD_OK);
    CHECK_INT(b, 50LL * 1024 * 1024);
    CHECK_INT(ipd_size_parse("1G", &b), IPD_OK);
    CHECK_INT(b, 1024LL * 1024 * 1024);
    CHECK_INT(ipd_size_parse("64KiB", &b), IPD_OK);
    CHECK_INT(b, 64 * 1024);
    CHECK_INT(ipd_size_parse("100", &b), IPD_OK);
    CHECK_INT(b, 100);
    CHECK(ipd_size_parse("1.5M", &b) != IPD_OK);
    CHECK(ipd_size_parse("M", &b) != IPD_OK);
    CHECK(ipd_size_parse("9999999999T", &b) != IPD_OK);
}

static void ints(void)
{
    int64_t v = 0;
    CHECK_INT(ipd_int_parse("42", 1, 100, &v), IPD_OK);
    CHECK_INT(v, 42);
    CHECK(ipd_int_parse("0", 1, 100, &v) != IPD_OK);
    CHECK(ipd_int_parse("101", 1, 100, &v) != IPD_OK);
    CHECK(ipd_int_parse("4x", 1, 100, &v) != IPD_OK);
    CHECK(ipd_int_parse(" 4", 1, 100, &v) != IPD_OK);
    CHECK(ipd_int_parse("", 1, 100, &v) != IPD_OK);
}

static void user_ids_and_tenants(void)
{
    char long_id[200];
    CHECK(ipd_user_id_valid("u1"));
    CHECK(ipd_user_id_valid("alice@example.com"));
    CHECK(ipd_user_id_valid("discord:1234-5_6.7"));
    CHECK(!ipd_user_id_valid(""));
    CHECK(!ipd_user_id_valid("bad user"));
    CHECK(!ipd_user_id_valid("a/b"));
    CHECK(!ipd_user_id_valid("\xc3\xa4"));
    memset(long_id, 'a', sizeof(long_id));
    long_id[128] = '\0';
    CHECK(ipd_user_id_valid(long_id));
    long_id[128] = 'a';
    long_id[129] = '\0';
    CHECK(!ipd_user_id_valid(long_id));
    CHECK(ipd_tenant_valid("bot-1.prod_x"));
    CHECK(!ipd_tenant_valid("bot@x"));
}

static void utf8(void)
{
    CHECK(ipd_utf8_valid("plain", 5));
    CHECK(ipd_utf8_valid("\xc3\xa4", 2));
    CHECK(ipd_utf8_valid("\xe2\x80\xae", 3));
    CHECK(ipd_utf8_valid("\xf0\x9f\x98\x80", 4));
    CHECK(!ipd_utf8_valid("\xc3", 1));             /* truncated */
    CHECK(!ipd_utf8_valid("\xc0\xaf", 2));         /* overlong '/' */
    CHECK(!ipd_utf8_valid("\xed\xa0\x80", 3));     /* surrogate */
    CHECK(!ipd_utf8_valid("\xf4\x90\x80\x80", 4)); /* > U+10FFFF */
    CHECK(!ipd_utf8_valid("\xff", 1));
}

/* Lossy copies for messages people read: bad bytes and NUL become U+FFFD,
 * a full destination cuts on a character boundary. */
static void utf8_lossy(void)
{
    char out[16];
    CHECK(ipd_utf8_lossy(out, sizeof(out), "ok", 2) == 2);
    CHECK_STR(out, "ok");
    ipd_utf8_lossy(out, sizeof(out),
                   "a\xff"
                   "b",
                   3);
    CHECK_STR(out, "a\xef\xbf\xbd"
                   "b");
    ipd_utf8_lossy(out, sizeof(out), "\xc3", 1); /* truncated character */
    CHECK_STR(out, "\xef\xbf\xbd");
    ipd_utf8_lossy(out, sizeof(out), "a\0b", 3);
    CHECK_STR(out, "a\xef\xbf\xbd"
                   "b");
    /* 15 bytes of room: 7 two-byte characters fit, the 8th does not. */
    CHECK(ipd_utf8_lossy(out, sizeof(out),
                         "\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9"
                         "\xc3\xa9\xc3\xa9",
                         16) == 14);
    CHECK(ipd_utf8_valid(out, strlen(out)));
    /* A replacement that does not fit is left out whole. */
    CHECK(ipd_utf8_lossy(out, 4, "ab\xff", 3) == 2);
    CHECK_STR(out, "ab");
    CHECK(ipd_utf8_lossy(out, 1, "abc", 3) == 0);
    CHECK_STR(out, "");
}

/* Log lines show control characters and stray bytes as \xNN. */
static void log_escape(void)
{
    char out[64];
    size_t n =
        ipd_log_escape(out, sizeof(out), "a\nb\x1b[1m\xff\xc3\xa9\x7f", 11);
    out[n] = '\0';
    CHECK_STR(out, "a\\x0ab\\x1b[1m\\xff\xc3\xa9\\x7f");
    n = ipd_log_escape(out, 5, "\n\n", 2); /* the second escape does not fit */
    out[n] = '\0';
    CHECK_STR(out, "\\x0a");
}

static void sha256_and_hmac(void)
{
    char hex[IPD_SHA256_HEX];
    ipd_sha256_hex("abc", 3, hex);
    CHECK_STR(
        hex,
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    struct ipd_sha256 *h = ipd_sha256_new();
    ipd_sha256_update(h, "a", 1);
    ipd_sha256_update(h, "bc", 2);
    ipd_sha256_final(h, hex);
    ipd_sha256_free(h);
    CHECK_STR(
        hex,
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    /* RFC 4231 test case 2. */
    ipd_hmac_sha256_hex("Jefe", 4, "what do ya want for nothing?", 28, hex);
    CHECK_STR(
        hex,
        "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
    CHECK(ipd_ct_equal("abcd", "abcd", 4));
    CHECK(!ipd_ct_equal("abcd", "abce", 4));
}

static void buffer(void)
{
    struct ipd_buf b;
    ipd_buf_init(&b, 10);
    CHECK_STR(b.buf, "");
    CHECK_INT(ipd_buf_adds(&b, "hello"), IPD_OK);
    CHECK_INT(ipd_buf_addf(&b, "%d", 1234), IPD_OK);
    CHECK_STR(b.buf, "hello1234");
    CHECK_INT(ipd_buf_adds(&b, "xy"), IPD_ERR_TOO_LARGE);
    CHECK_STR(b.buf, "hello1234"); /* unchanged on failure */
    CHECK_INT(ipd_buf_addch(&b, '!'), IPD_OK);
    CHECK_INT(b.len, 10);
    size_t len = 0;
    char *s = ipd_buf_detach(&b, &len);
    CHECK_STR(s, "hello1234!");
    CHECK_INT(len, 10);
    CHECK_STR(b.buf, "");
    free(s);
    s = ipd_buf_detach(&b, NULL); /* empty detach is a fresh "" */
    CHECK_STR(s, "");
    free(s);
    ipd_buf_add(&b, "a\0b", 3);
    CHECK_INT(b.len, 3);
    ipd_buf_release(&b);
}

/* ipd_fdopendir takes the descriptor: the stream closes it, and a
 * descriptor no stream can be made on is closed at once. */
static void fdopendir_takes_the_fd(void)
{
    int fd = open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR *d = ipd_fdopendir(fd);
    CHECK(d != NULL);
    CHECK(ipd_readdir(d) != NULL);
    closedir(d);
    CHECK(fcntl(fd, F_GETFD) == -1 && errno == EBADF);

    fd = open("/dev/null", O_RDONLY | O_CLOEXEC); /* not a directory */
    errno = 0;
    CHECK(ipd_fdopendir(fd) == NULL);
    CHECK_INT(errno, ENOTDIR);
    CHECK(fcntl(fd, F_GETFD) == -1 && errno == EBADF);

    errno = ENOENT; /* as an open that failed left it */
    CHECK(ipd_fdopendir(-1) == NULL);
    CHECK_INT(errno, ENOENT);
}

TEST_MAIN(T(ids_have_shape_and_differ), T(ids_are_random_enough),
          T(time_format_and_parse), T(durations), T(sizes), T(ints),
          T(user_ids_and_tenants), T(utf8), T(utf8_lossy), T(log_escape),
          T(sha256_and_hmac), T(buffer), T(fdopendir_takes_the_fd))
