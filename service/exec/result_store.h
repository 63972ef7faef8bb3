/*
 * result_store.h - the store of asynchronous execution results on disk
 * (the ipd_results_* API; result.c builds the result object itself).
 *
 * A done asynchronous result is written once, as the JSON text GET
 * /v1/executions/{id} and the callback send, to
 * <data-dir>/results/<execution_id>.json (0600, in a 0700 directory),
 * and read back from there at each GET and each callback attempt: the
 * service holds no copy of it in memory, however many results are kept
 * or however large their inline files are.  The pool's table (pool.c)
 * keeps only the index.
 *
 * Results are per node and do not survive a restart (as the table): the
 * directory is emptied when the store opens, which removes what a crash
 * or a stop left behind.  One serving process per data dir (as exec/).
 *
 * Thread-safety: every function may be called from any thread; files of
 * different ids are independent, and one id is written once.
 */
#ifndef IPD_EXEC_RESULT_STORE_H
#define IPD_EXEC_RESULT_STORE_H

#include <stdint.h>

#include <jansson.h>

#include "../common/ipd.h"
#include "../common/util.h"

struct ipd_results;

/* Make (or empty) <data_dir>/results.  *out is new: ipd_results_free. */
enum ipd_err ipd_results_open(const char *data_dir, struct ipd_results **out);
/* Remove every result file and free rs (NULL is fine). */
void ipd_results_free(struct ipd_results *rs);

/* Write result (borrowed) as the file of id, compact, ASCII-only (as
 * replies are written), streamed from the value without a text copy in
 * memory.  IPD_OK with its size in *bytes; otherwise nothing of it stays
 * (IPD_ERR_IO: the disk refused; logged). */
enum ipd_err ipd_results_write(struct ipd_results *rs, const char *id,
                               const json_t *result, int64_t *bytes);
/* Open the file of id for reading: *fd (the caller closes it) and its
 * size in *len.  IPD_ERR_NOT_FOUND when it is gone. */
enum ipd_err ipd_results_open_file(struct ipd_results *rs, const char *id,
                                   int *fd, int64_t *len);
/* The file of id's path (for a callback's delivery thread): new string,
 * free(). */
char *ipd_results_path(struct ipd_results *rs, const char *id);
/* Remove the file of id (gone already is fine). */
void ipd_results_remove(struct ipd_results *rs, const char *id);

#endif
