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

/* What `keys SUBCOMMAND ...` asked for, checked before the store is
 * opened. */
struct keys_args {
    const char *tenant; /* create, rotate-secret */
    const char *policy; /* create */
    bool admin;         /* create */
    const char *key_id; /* revoke */
};

/* One option a subcommand takes: "--name VALUE" / "--name=VALUE" into
 * *value, or the bare flag "--name" into *flag. */
struct keys_opt {
    const char *name;
    const char **value;
    bool *flag;
};

#define TENANT_CHARS "use 1-64 characters of A-Z a-z 0-9 _ . -"

/* args[*i] as one of opts; false after a message (every failure is a
 * usage error, exit 2). */
static bool keys_opt_take(const char *cmd, const struct keys_opt *opts,
                          const char **args, size_t n, size_t *i)
{
    const char *arg = args[*i] + 2;
    size_t len = strcspn(arg, "=");
    for (const struct keys_opt *o = opts; o->name; o++) {
        if (strlen(o->name) != len || strncmp(o->name, arg, len) != 0)
            continue;
        if (o->flag && arg[len] == '=') {
            fprintf(stderr, "interpd keys %s: option --%s takes no value\n",
                    cmd, o->name);
            return false;
        }
        if (o->flag) {
            *o->flag = true;
        } else if (arg[len] == '=') {
            *o->value = arg + len + 1;
        } else if (*i + 1 < n && strncmp(args[*i + 1], "--", 2) != 0) {
            *o->value = args[++*i];
        } else {
            fprintf(stderr, "interpd keys %s: option --%s needs a value\n", cmd,
                    o->name);
            return false;
        }
        return true;
    }
    fprintf(stderr, "interpd keys %s: unknown option \"%.*s\"%s\n", cmd,
            (int)len + 2, args[*i],
            !strcmp(cmd, "list") ? " (keys list takes none; it always "
                                   "prints JSON)"
                                 : "");
    return false;
}

/* The options and up to npos positional words of one subcommand; false
 * after a message. */
static bool keys_parse(const char *cmd, const struct keys_opt *opts,
                       const char **args, size_t n, const char **pos,
                       size_t npos)
{
    size_t got = 0;
    for (size_t i = 0; i < n; i++) {
        if (!strncmp(args[i], "--", 2) && args[i][2]) {
            if (!keys_opt_take(cmd, opts, args, n, &i))
                return false;
        } else if (got < npos) {
            pos[got++] = args[i];
        } else {
            fprintf(stderr, "interpd keys %s: unexpected argument \"%s\"\n",
                    cmd, args[i]);
            return false;
        }
    }
    return true;
}

/* --tenant NAME given and valid; false after a message. */
static bool tenant_ok(const char *cmd, const char *tenant)
{
    if (!tenant) {
        fprintf(stderr, "interpd keys %s: --tenant NAME is required (%s)\n",
                cmd, TENANT_CHARS);
        return false;
    }
    if (!ipd_tenant_valid(tenant)) {
        fprintf(stderr, "interpd keys %s: invalid tenant \"%s\": %s\n", cmd,
                tenant, TENANT_CHARS);
        return false;
    }
    return true;
}

/* args (after "keys") into *ka, every option and value checked: 0, or
 * the exit status (2) after a message. */
static int keys_args_check(const struct ipd_config *cfg, const char **args,
                           size_t n, struct keys_args *ka)
{
    const char *cmd = args[0];
    const struct keys_opt create[] = {{"tenant", &ka->tenant, NULL},
                                      {"policy", &ka->policy, NULL},
                                      {"admin", NULL, &ka->admin},
                                      {NULL, NULL, NULL}};
    const struct keys_opt tenant_only[] = {{"tenant", &ka->tenant, NULL},
                                           {NULL, NULL, NULL}};
    const struct keys_opt none[] = {{NULL, NULL, NULL}};
    ka->policy = "standard";
    if (!strcmp(cmd, "create")) {
        if (!keys_parse(cmd, create, args + 1, n - 1, NULL, 0) ||
            !tenant_ok(cmd, ka->tenant))
            return 2;
        if (!ipd_config_policy(cfg, ka->policy)) {
            fprintf(stderr,
                    "interpd keys create: unknown policy \"%s\" (the "
                    "built-in strict, standard, networked, or one "
                    "set with policy.NAME.FIELD in the config)\n",
                    ka->policy);
            return 2;
        }
    } else if (!strcmp(cmd, "list")) {
        if (!keys_parse(cmd, none, args + 1, n - 1, NULL, 0))
            return 2;
    } else if (!strcmp(cmd, "revoke")) {
        if (!keys_parse(cmd, none, args + 1, n - 1, &ka->key_id, 1))
            return 2;
        if (!ka->key_id) {
            fprintf(stderr, "interpd keys revoke: KEY_ID is required (see "
                            "`interpd keys list`)\n");
            return 2;
        }
    } else if (!strcmp(cmd, "rotate-secret")) {
        if (!keys_parse(cmd, tenant_only, args + 1, n - 1, NULL, 0) ||
            !tenant_ok(cmd, ka->tenant))
            return 2;
    } else {
        fprintf(stderr,
                "interpd keys: unknown command \"%s\" (create, "
                "list, revoke, rotate-secret)\n",
                cmd);
        return 2;
    }
    return 0;
}

static int keys_create(struct ipd_meta *m, const struct keys_args *ka)
{
    char plain[IPD_KEY_PLAIN_MAX];
    struct ipd_key k;
    char created[IPD_TIME_STR];

    enum ipd_err rc =
        ipd_keys_create(m, ka->tenant, ka->admin, ka->policy, plain, &k);
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
            arr, json_pack("{s:s, s:s, s:b, s:s, s:o, s:o, s:s, s:o}", "key_id",
                           k->key_id, "tenant", k->tenant, "admin", k->admin,
                           "policy", k->policy, "created_at",
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

static int keys_revoke(struct ipd_meta *m, const char *key_id)
{
    enum ipd_err rc = ipd_meta_key_revoke(m, key_id, ipd_now_ms());
    if (rc == IPD_ERR_NOT_FOUND) {
        fprintf(stderr, "interpd keys revoke: no key %s\n", key_id);
        return 1;
    }
    if (rc) {
        fprintf(stderr, "interpd keys revoke: %s\n", ipd_err_name(rc));
        return 1;
    }
    fprintf(stderr, "revoked %s\n", key_id);
    return 0;
}

/* A new callback signing secret for every key of the tenant; the previous
 * one keeps signing (a second v1=) for --callback-secret-grace. */
static int keys_rotate_secret(const struct ipd_config *cfg, struct ipd_meta *m,
                              const char *tenant)
{
    char secret[IPD_SHA256_HEX];
    int64_t now = ipd_now_ms();
    enum ipd_err rc = ipd_keys_rotate_secret(m, tenant, now, secret);
    if (rc == IPD_ERR_NOT_FOUND) {
        fprintf(stderr,
                "interpd keys rotate-secret: tenant %s has no "
                "keys\n",
                tenant);
        return 1;
    }
    if (rc == IPD_ERR_CONFLICT) {
        fprintf(stderr,
                "interpd keys rotate-secret: the secret of %s "
                "changed meanwhile (another rotation?); see `keys "
                "list`\n",
                tenant);
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
    struct keys_args ka = {0};
    int code = 2;
    if (!nargs) {
        fprintf(stderr, "usage: interpd keys create --tenant NAME [--admin] "
                        "[--policy NAME] | list | "
                        "revoke KEY_ID | rotate-secret --tenant NAME\n");
        return 2;
    }
    /* Every argument first: a usage error opens nothing. */
    code = keys_args_check(cfg, args, nargs, &ka);
    if (code)
        return code;
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
    if (!strcmp(args[0], "create"))
        code = keys_create(st.meta, &ka);
    else if (!strcmp(args[0], "list"))
        code = keys_list(st.meta);
    else if (!strcmp(args[0], "revoke"))
        code = keys_revoke(st.meta, ka.key_id);
    else
        code = keys_rotate_secret(cfg, st.meta, ka.tenant);
    ipd_stores_close(&st);
    return code;
}
