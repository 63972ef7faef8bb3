/*
 * cli_keys.c - `interpd keys create|list|revoke`, straight on the
 * metadata store (safe while the server runs: the store is shared).
 */
#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "common/json_out.h"
#include "keys.h"
#include "common/log.h"
#include "serve.h"
#include "common/util.h"

static void print_json(json_t *j)
{
    char *s = json_dumps(j, JSON_INDENT(2));
    if (s)
        puts(s);
    free(s);
    json_decref(j);
}

static int keys_create(const struct ipd_config *cfg, struct ipd_meta *m,
                       const char **args, size_t n)
{
    const char *tenant = NULL, *policy = "standard";
    bool admin = false;
    char plain[IPD_KEY_PLAIN_MAX];
    struct ipd_key k;
    char created[IPD_TIME_STR];

    for (size_t i = 0; i < n; i++) {
        if (!strcmp(args[i], "--admin"))
            admin = true;
        else if (!strcmp(args[i], "--tenant") && i + 1 < n)
            tenant = args[++i];
        else if (!strncmp(args[i], "--tenant=", 9))
            tenant = args[i] + 9;
        else if (!strcmp(args[i], "--policy") && i + 1 < n)
            policy = args[++i];
        else if (!strncmp(args[i], "--policy=", 9))
            policy = args[i] + 9;
        else {
            fprintf(stderr, "interpd keys create: unexpected \"%s\"\n",
                    args[i]);
            return 2;
        }
    }
    if (!tenant || !ipd_tenant_valid(tenant)) {
        fprintf(stderr, "interpd keys create: --tenant NAME is required "
                        "(1-64 characters of [A-Za-z0-9_.-])\n");
        return 2;
    }
    if (!ipd_config_policy(cfg, policy)) {
        fprintf(stderr, "interpd keys create: unknown policy \"%s\" (the "
                        "built-in strict, standard, networked, or one set "
                        "with policy.NAME.FIELD in the config)\n", policy);
        return 2;
    }
    enum ipd_err rc = ipd_keys_create(m, tenant, admin, policy, plain, &k);
    if (rc) {
        fprintf(stderr, "interpd keys create: %s\n", ipd_err_name(rc));
        return 1;
    }
    ipd_time_format(k.created_at_ms, created);
    /* The tenant's callback signing secret comes with the key: whoever
     * hands out the key configures the bot that verifies callbacks. */
    print_json(json_pack("{s:s, s:s, s:b, s:s, s:s, s:s, s:s}", "key_id",
                         k.key_id, "tenant", k.tenant, "admin", k.admin,
                         "policy", k.policy, "created_at", created, "key",
                         plain, "secret", k.secret));
    memset(plain, 0, sizeof(plain));
    return 0;
}

static int keys_list(struct ipd_meta *m)
{
    struct ipd_key_list l = {0};
    enum ipd_err rc = ipd_meta_key_list(m, &l);
    if (rc) {
        fprintf(stderr, "interpd keys list: %s\n", ipd_err_name(rc));
        return 1;
    }
    json_t *arr = json_array();
    for (size_t i = 0; i < l.n; i++) {
        const struct ipd_key *k = &l.items[i];
        /* A key never revoked has revoked_at_ms 0. */
        int64_t revoked = k->revoked_at_ms ? k->revoked_at_ms : IPD_TIME_NEVER;
        json_array_append_new(
            arr, json_pack("{s:s, s:s, s:b, s:s, s:o, s:o, s:s, s:o}",
                           "key_id", k->key_id, "tenant", k->tenant, "admin",
                           k->admin, "policy", k->policy, "created_at",
                           ipd_json_time(k->created_at_ms), "revoked_at",
                           ipd_json_time(revoked), "secret", k->secret,
                           "secret_rotated_at",
                           ipd_json_time(k->secret_rotated_at_ms
                                             ? k->secret_rotated_at_ms
                                             : IPD_TIME_NEVER)));
    }
    ipd_key_list_release(&l);
    print_json(arr);
    return 0;
}

static int keys_revoke(struct ipd_meta *m, const char **args, size_t n)
{
    if (n != 1) {
        fprintf(stderr, "usage: interpd keys revoke KEY_ID\n");
        return 2;
    }
    enum ipd_err rc = ipd_meta_key_revoke(m, args[0], ipd_now_ms());
    if (rc == IPD_ERR_NOT_FOUND) {
        fprintf(stderr, "interpd keys revoke: no key %s\n", args[0]);
        return 1;
    }
    if (rc) {
        fprintf(stderr, "interpd keys revoke: %s\n", ipd_err_name(rc));
        return 1;
    }
    fprintf(stderr, "revoked %s\n", args[0]);
    return 0;
}

/* The tenant NAME of `--tenant NAME` or `--tenant=NAME`, the only
 * argument; NULL (after a message) otherwise. */
static const char *tenant_arg(const char *cmd, const char **args, size_t n)
{
    const char *tenant = NULL;
    if (n == 2 && !strcmp(args[0], "--tenant"))
        tenant = args[1];
    else if (n == 1 && !strncmp(args[0], "--tenant=", 9))
        tenant = args[0] + 9;
    if (!tenant || !ipd_tenant_valid(tenant)) {
        fprintf(stderr, "usage: interpd keys %s --tenant NAME (1-64 "
                        "characters of [A-Za-z0-9_.-])\n", cmd);
        return NULL;
    }
    return tenant;
}

/* A new callback signing secret for every key of the tenant; the previous
 * one keeps signing (a second v1=) for --callback-secret-grace. */
static int keys_rotate_secret(const struct ipd_config *cfg,
                              struct ipd_meta *m, const char **args,
                              size_t n)
{
    char secret[IPD_SHA256_HEX];
    const char *tenant = tenant_arg("rotate-secret", args, n);
    int64_t now = ipd_now_ms();
    if (!tenant)
        return 2;
    enum ipd_err rc = ipd_keys_rotate_secret(m, tenant, now, secret);
    if (rc == IPD_ERR_NOT_FOUND) {
        fprintf(stderr, "interpd keys rotate-secret: tenant %s has no "
                        "keys\n", tenant);
        return 1;
    }
    if (rc == IPD_ERR_CONFLICT) {
        fprintf(stderr, "interpd keys rotate-secret: the secret of %s "
                        "changed meanwhile (another rotation?); see `keys "
                        "list`\n", tenant);
        return 1;
    }
    if (rc) {
        fprintf(stderr, "interpd keys rotate-secret: %s\n", ipd_err_name(rc));
        return 1;
    }
    print_json(json_pack("{s:s, s:s, s:o, s:o}", "tenant", tenant, "secret",
                         secret, "rotated_at", ipd_json_time(now),
                         "previous_valid_until",
                         ipd_json_time(now + cfg->callback_secret_grace_ms)));
    memset(secret, 0, sizeof(secret));
    return 0;
}

int ipd_cli_keys(struct ipd_config *cfg, const char **args, size_t nargs)
{
    struct ipd_stores st;
    struct ipd_meta *m = NULL;
    int code = 2;
    if (!nargs) {
        fprintf(stderr, "usage: interpd keys create --tenant NAME [--admin] "
                        "[--policy NAME] | list | "
                        "revoke KEY_ID | rotate-secret --tenant NAME\n");
        return 2;
    }
    struct ipd_buf why;
    ipd_buf_init(&why, 1024);
    enum ipd_err rc = ipd_stores_open_existing(cfg, false, &st, &why);
    if (rc) {
        code = ipd_cli_no_store("keys", rc, &why);
        ipd_buf_release(&why);
        ipd_stores_close(&st);
        return code;
    }
    ipd_buf_release(&why);
    m = st.meta;
    if (!strcmp(args[0], "create"))
        code = keys_create(cfg, m, args + 1, nargs - 1);
    else if (!strcmp(args[0], "list") && nargs == 1)
        code = keys_list(m);
    else if (!strcmp(args[0], "revoke"))
        code = keys_revoke(m, args + 1, nargs - 1);
    else if (!strcmp(args[0], "rotate-secret"))
        code = keys_rotate_secret(cfg, m, args + 1, nargs - 1);
    else
        fprintf(stderr, "interpd keys: unknown command \"%s\"\n", args[0]);
    ipd_stores_close(&st);
    return code;
}
