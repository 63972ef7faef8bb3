/*
 * serve.h - the service's lifecycle and the command-line commands.
 */
#ifndef IPD_SERVE_H
#define IPD_SERVE_H

#include "../storage/meta.h"
#include "config.h"

/* `interpd serve`: open the stores, listen, wait for SIGTERM/SIGINT, shut
 * down gracefully.  Returns the process exit code. */
int ipd_serve(struct ipd_config *cfg);

/* `interpd keys create|list|revoke ...`; args are what follows "keys".
 * Returns the process exit code. */
int ipd_cli_keys(struct ipd_config *cfg, const char **args, size_t nargs);

/* Create the data dir (0700) and open the metadata store the config
 * names.  *out is new; ipd_meta_free it. */
enum ipd_err ipd_open_meta(const struct ipd_config *cfg,
                           struct ipd_meta **out);

#endif
