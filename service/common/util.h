/*
 * util.h - ids, time, durations and sizes, small string checks.
 */
#ifndef IPD_UTIL_H
#define IPD_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <time.h>

#include <dirent.h>

#include "ipd.h"

/* "never" for expiry times: compares after every real time. */
#define IPD_TIME_NEVER INT64_MAX

/* Ids: "<prefix>_" + 26 lowercase base32 characters of 128 random bits. */
#define IPD_ID_RANDOM_CHARS 26
#define IPD_ID_MAX 48 /* buffer size for any id, NUL included */

/* Write a new random id with the given prefix ("file", "key") into out.
 * Random bits come from getrandom(); aborts if the kernel has none. */
void ipd_id_new(const char *prefix, char out[IPD_ID_MAX]);
/* True when s has the shape of an id with that prefix. */
bool ipd_id_valid(const char *prefix, const char *s);

/* Fill buf with n random bytes (getrandom; aborts on failure). */
void ipd_random_bytes(void *buf, size_t n);

/* Wall clock, milliseconds since the epoch. */
int64_t ipd_now_ms(void);
/* Monotonic clock, milliseconds. */
int64_t ipd_mono_ms(void);
/* The absolute time ms from now on clock (CLOCK_REALTIME for a default
 * condition variable, CLOCK_MONOTONIC for one set to it), as the
 * timespec pthread_cond_timedwait and friends take. */
struct timespec ipd_deadline_after(clockid_t clock, int64_t ms);

/* RFC 3339 UTC with second precision, "2026-11-21T22:10:00Z". */
#define IPD_TIME_STR 32
void ipd_time_format(int64_t ms, char out[IPD_TIME_STR]);
/* Parse what ipd_time_format writes (and fractional seconds). */
enum ipd_err ipd_time_parse(const char *s, int64_t *ms);

/* Durations: "48h", "30m", "2s", "1d", "500ms", a bare number of seconds,
 * or "never" (IPD_TIME_NEVER).  Result in milliseconds. */
enum ipd_err ipd_duration_parse(const char *s, int64_t *ms);
/* Sizes: "50M", "1G", "512K", "100" bytes; binary multiples (MiB). */
enum ipd_err ipd_size_parse(const char *s, int64_t *bytes);
/* Strict decimal integer in [min, max]. */
enum ipd_err ipd_int_parse(const char *s, int64_t min, int64_t max,
                           int64_t *out);

/* X-User-Id: 1-128 characters of [A-Za-z0-9_.@:-]. */
bool ipd_user_id_valid(const char *s);
/* Tenant names: 1-64 characters of [A-Za-z0-9_.-]. */
bool ipd_tenant_valid(const char *s);
/* True when s[0..len) is well-formed UTF-8 (no overlongs, no surrogates). */
bool ipd_utf8_valid(const char *s, size_t len);
/* Length (1-4) of the well-formed UTF-8 character at s[0..len), 0 when
 * s[0] starts none (or len is 0). */
size_t ipd_utf8_char(const char *s, size_t len);
/* src[0..len) into dst as well-formed UTF-8 for people and JSON: every
 * byte that starts no well-formed character, and NUL, becomes U+FFFD;
 * when dst (dstsz > 0 bytes) is full the copy stops on a character
 * boundary.  Always NUL-terminated; returns the bytes written. */
size_t ipd_utf8_lossy(char *dst, size_t dstsz, const char *src, size_t len);

/* The value of one hex digit (either case), or -1: percent-decoding's
 * (api/router.c's path segments, service/fetch/filename.c's names). */
int ipd_hex_value(char c);

/* Lowercase hex of n bytes into out (2n+1 bytes, NUL-terminated). */
void ipd_hex(const void *data, size_t n, char *out);

/* The listen option, HOST:PORT, as a socket address: HOST a numeric IPv4
 * address, "[IPv6]", "localhost", or "*" / empty for every address;
 * PORT 0..65535.  *v6: an IPv6 address.  IPD_ERR_INVALID otherwise. */
enum ipd_err ipd_listen_parse(const char *s, struct sockaddr_storage *ss,
                              socklen_t *len, bool *v6);

/* Copy in (from its offset) to out until EOF, kernel-side with
 * copy_file_range where possible (sharing extents on reflink
 * filesystems), else read/write.  *copied: bytes copied. */
enum ipd_err ipd_copy_fd(int in, int out, int64_t *copied);

/* rm -rf of name below dirfd: never follows a symlink, at most
 * IPD_REMOVE_TREE_DEPTH levels deep.  0, or -1 when something stayed
 * (errno of the last failure). */
#define IPD_REMOVE_TREE_DEPTH 128
int ipd_remove_tree_at(int dirfd, const char *name);

/* readdir without "." and "..": the next entry, NULL at the end (or on
 * an error, errno set as readdir sets it). */
struct dirent *ipd_readdir(DIR *d);

/* Close *fd when it is open and set it to -1.  Allocates nothing: safe
 * in a forked child. */
void ipd_close_fd(int *fd);

/* A directory stream on fd, which it takes: closed when no stream can be
 * made on it.  NULL, errno set, on a failure or when fd < 0 (errno as the
 * call that gave fd set it).  Free the stream with closedir. */
DIR *ipd_fdopendir(int fd);

/* Write all of data[0..len) to fd, retrying short writes and EINTR.
 * IPD_ERR_IO on a failure, errno set (ENOSPC for a write that wrote
 * nothing).  Allocates nothing: safe in a forked child. */
enum ipd_err ipd_write_all(int fd, const void *data, size_t len);

/* A URI with its password replaced by "****".  New string, free(). */
char *ipd_redact_uri(const char *uri);

#endif
