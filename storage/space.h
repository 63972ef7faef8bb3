/*
 * space.h - free space on the data dir's filesystem, and a reserve that
 * keeps deletes working on a full disk.
 *
 * A full disk must never lock a user out of freeing space: a DELETE is a
 * SQLite transaction, and in WAL mode it appends frames to meta.db-wal,
 * which can need new blocks.  So the store keeps a reserve: a file
 * (<dir>/.space-reserve, reserve_bytes allocated with posix_fallocate)
 * that nothing else may use.  When a delete fails with IPD_ERR_NO_SPACE
 * the caller releases the reserve and tries again; the reserve is put back
 * (ipd_space_refill) once the filesystem has room for it twice over, and
 * writes that add data are refused (ipd_space_check_write) while it is
 * out, so uploads cannot eat the room deletes need.
 *
 * Thread-safety: every function may be called from any thread.
 */
#ifndef IPD_SPACE_H
#define IPD_SPACE_H

#include <stdbool.h>
#include <stdint.h>

#include "../service/common/ipd.h"

struct ipd_space;

/*
 * Watch dir's filesystem and lay the reserve (reserve_bytes, 0: none) in
 * it.  A reserve that does not fit now is not an error: it is laid later
 * by ipd_space_refill.  *out is new; free with ipd_space_free (which
 * leaves the reserve file in place for the next start).  IPD_ERR_IO when
 * dir cannot be opened.
 */
enum ipd_err ipd_space_open(const char *dir, int64_t reserve_bytes,
                            struct ipd_space **out);
void ipd_space_free(struct ipd_space *s); /* NULL is fine */

/* The filesystem's free bytes (what an unprivileged writer could still
 * use, the reserve not counted) and its size.  [out] both. */
enum ipd_err ipd_space_stat(struct ipd_space *s, int64_t *free_bytes,
                            int64_t *total_bytes);

/* Give the reserve back to the filesystem.  true when there was one (a
 * retry can then succeed), false when it was already out. */
bool ipd_space_release(struct ipd_space *s);

/* Lay the reserve again when it is out and the filesystem has at least
 * twice its size free.  Whether it is in place afterwards. */
bool ipd_space_refill(struct ipd_space *s);

/* For a write that adds data: IPD_OK while the reserve is in place (or
 * could be laid again now), IPD_ERR_NO_SPACE while it is out. */
enum ipd_err ipd_space_check_write(struct ipd_space *s);

/* The configured reserve size and whether it is in place now. */
int64_t ipd_space_reserve_size(const struct ipd_space *s);
bool ipd_space_reserved(struct ipd_space *s);

#endif
