/*
 * main.c - the interpd command line: serve, keys, version.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "common/log.h"
#include "serve.h"

static void usage(FILE *out)
{
    fprintf(
        out,
        "usage: interpd COMMAND [options]\n\n"
        "commands:\n"
        "  serve                      run the HTTP service\n"
        "  keys create --tenant NAME [--admin] [--policy NAME]\n"
        "                             create an API key (printed once);\n"
        "                             --policy: strict, standard (the "
        "default),\n"
        "                             networked or a policy.NAME of the "
        "config\n"
        "  keys list                  list keys (never the keys "
        "themselves)\n"
        "  keys revoke KEY_ID         revoke a key\n"
        "  keys rotate-secret --tenant NAME\n"
        "                             new callback signing secret for "
        "the tenant\n"
        "                             (the old one also signs for "
        "--callback-secret-grace)\n"
        "  cleanup                    delete expired files now (for cron);\n"
        "                             prints the sweep as JSON\n"
        "  status                     print the running server's admin "
        "status\n"
        "                             (at --listen, with DATA-DIR/admin.key"
        " or\n"
        "                             INTERPD_ADMIN_KEY)\n"
        "  version, --version         print the version\n"
        "  help, --help, -h           print this help (no command: the "
        "same on\n"
        "                             stderr, exit 2)\n\n"
        "options (also `name = value` in --config FILE and, all but "
        "--policy.*,\nINTERPD_<NAME> in the environment; flags win over "
        "environment, environment\nover file, file over the defaults in "
        "[brackets]):\n");
    ipd_config_usage(out);
}

int main(int argc, char **argv)
{
    struct ipd_config cfg;
    struct ipd_buf err;
    const char **rest = NULL;
    size_t nrest = 0;
    int code = 2;

    if (argc < 2 || !strcmp(argv[1], "help") || !strcmp(argv[1], "--help") ||
        !strcmp(argv[1], "-h")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "version") || !strcmp(argv[1], "--version")) {
        printf("interpd %s\n", IPD_VERSION);
        return 0;
    }
    const char *cmd = argv[1];
    bool serve = !strcmp(cmd, "serve");
    bool cleanup = !strcmp(cmd, "cleanup");
    bool status = !strcmp(cmd, "status");
    if (!serve && !cleanup && !status && strcmp(cmd, "keys") != 0) {
        fprintf(stderr, "interpd: unknown command \"%s\"\n\n", cmd);
        usage(stderr);
        return 2;
    }
    ipd_config_init(&cfg);
    ipd_buf_init(&err, 4096);
    if (ipd_config_load(&cfg, argc - 2, (const char *const *)argv + 2,
                        serve || cleanup || status ? NULL : &rest, &nrest,
                        &err)) {
        fprintf(stderr, "interpd %s: %s\n", cmd, err.buf);
        goto out;
    }
    if (ipd_log_set_level(cfg.log_level)) {
        fprintf(stderr,
                "interpd %s: log-level \"%s\" is not one of debug, "
                "info, warn, error\n",
                cmd, cfg.log_level);
        goto out;
    }
    if (serve)
        code = ipd_serve(&cfg);
    else if (cleanup)
        code = ipd_cli_cleanup(&cfg);
    else if (status)
        code = ipd_cli_status(&cfg);
    else
        code = ipd_cli_keys(&cfg, rest, nrest);
out:
    free((void *)rest);
    ipd_buf_release(&err);
    ipd_config_release(&cfg);
    return code;
}
