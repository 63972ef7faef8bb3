/*
 * mongo_env.h - the MongoDB server a test uses: the URI the ctest fixture
 * (mongo/start, tests/support/mongo-server.sh) wrote to
 * $IPD_TEST_MONGO_STATE/uri.  Without it the test stops loudly (exit 2):
 * it is never skipped.
 */
#ifndef IPD_MONGO_ENV_H
#define IPD_MONGO_ENV_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "service/common/util.h"

static char mongo_env_base[512];
static char mongo_env_tag[16]; /* random per run: database names */

/* Load the fixture's URI; without it, stop the whole program loudly. */
static void mongo_env_load(const char *prog)
{
    const char *dir = getenv("IPD_TEST_MONGO_STATE");
    char path[512];
    unsigned char raw[4];
    FILE *f;
    size_t n;

    if (!dir || !dir[0]) {
        fprintf(stderr,
                "%s: IPD_TEST_MONGO_STATE is not set: "
                "run through ctest (fixture mongo/start), or set it "
                "to a directory holding a file 'uri'\n",
                prog);
        exit(2);
    }
    snprintf(path, sizeof(path), "%s/uri", dir);
    f = fopen(path, "r");
    if (!f) {
        fprintf(stderr,
                "%s: no MongoDB server: cannot read %s "
                "(did the mongo/start fixture fail?)\n",
                prog, path);
        exit(2);
    }
    n = fread(mongo_env_base, 1, sizeof(mongo_env_base) - 1, f);
    fclose(f);
    mongo_env_base[n] = '\0';
    while (n && (mongo_env_base[n - 1] == '\n' ||
                 mongo_env_base[n - 1] == '\r' || mongo_env_base[n - 1] == ' '))
        mongo_env_base[--n] = '\0';
    if (!n) {
        fprintf(stderr, "%s: %s is empty\n", prog, path);
        exit(2);
    }
    ipd_random_bytes(raw, sizeof(raw));
    ipd_hex(raw, sizeof(raw), mongo_env_tag);
}

/* The fixture's URI with its database (path) replaced by db. */
static void mongo_env_uri(char *out, size_t cap, const char *db)
{
    const char *scheme = strstr(mongo_env_base, "://");
    const char *host = scheme ? scheme + 3 : mongo_env_base;
    const char *slash = strchr(host, '/');
    const char *query = strchr(host, '?');
    size_t hostlen;

    if (slash && (!query || slash < query))
        hostlen = (size_t)(slash - mongo_env_base);
    else
        hostlen =
            query ? (size_t)(query - mongo_env_base) : strlen(mongo_env_base);
    snprintf(out, cap, "%.*s/%s%s", (int)hostlen, mongo_env_base, db,
             query ? query : "");
}

#endif
