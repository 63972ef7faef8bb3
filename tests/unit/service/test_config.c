/*
 * test_config.c - option sources and their precedence.
 */
#include <unistd.h>

#include "service/config.h"
#include "service/common/util.h"
#include "test.h"

static char *write_file(const char *text)
{
    char *path = ipd_xstrdup("/tmp/ipd-config-XXXXXX");
    int fd = mkstemp(path);
    if (fd < 0)
        return path;
    ssize_t n = write(fd, text, strlen(text));
    (void)n;
    close(fd);
    return path;
}

static void defaults(void)
{
    struct ipd_config c;
    ipd_config_init(&c);
    CHECK_STR(c.listen, "127.0.0.1:8080");
    CHECK_INT(c.file_ttl_ms, 48LL * 3600 * 1000);
    CHECK_INT(c.max_file_size, 50LL * 1024 * 1024);
    CHECK_INT(c.quota_files, 100);
    CHECK_INT(c.quota_bytes, 1024LL * 1024 * 1024);
    CHECK(c.mongo_uri == NULL);
    CHECK_INT(c.ready_fd, -1);
    ipd_config_release(&c);
}

static void precedence_flag_env_file(void)
{
    struct ipd_config c;
    struct ipd_buf err;
    char *path = write_file("# comment\n"
                            "file-ttl = 1h\n"
                            "max_file_size = \"2M\"\n"
                            "quota-files = 7\n"
                            "\n"
                            "listen = 127.0.0.1:9000\n");
    const char *argv[] = {"--config", path, "--file-ttl", "2s",
                          "--listen=0.0.0.0:1"};
    ipd_config_init(&c);
    ipd_buf_init(&err, 1024);
    setenv("INTERPD_FILE_TTL", "5m", 1);
    setenv("INTERPD_QUOTA_FILES", "9", 1);
    CHECK_INT(ipd_config_load(&c, 5, argv, NULL, NULL, &err), IPD_OK);
    CHECK_STR(err.buf, "");
    CHECK_INT(c.file_ttl_ms, 2000);              /* flag over env */
    CHECK_INT(c.quota_files, 9);                 /* env over file */
    CHECK_INT(c.max_file_size, 2 * 1024 * 1024); /* file over default */
    CHECK_STR(c.listen, "0.0.0.0:1");            /* --name=value */
    unsetenv("INTERPD_FILE_TTL");
    unsetenv("INTERPD_QUOTA_FILES");
    unlink(path);
    free(path);
    ipd_buf_release(&err);
    ipd_config_release(&c);
}

static void errors_are_reported(void)
{
    struct ipd_config c;
    struct ipd_buf err;
    const char *bad_value[] = {"--file-ttl", "soon"};
    const char *unknown[] = {"--no-such-option", "1"};
    const char *missing[] = {"--listen"};
    const char *positional[] = {"extra"};
    const char *zero_ttl[] = {"--file-ttl", "0s"};
    ipd_buf_init(&err, 1024);

    ipd_config_init(&c);
    CHECK_INT(ipd_config_load(&c, 2, bad_value, NULL, NULL, &err),
              IPD_ERR_INVALID);
    CHECK(strstr(err.buf, "file-ttl") != NULL);
    ipd_config_release(&c);

    ipd_buf_reset(&err);
    ipd_config_init(&c);
    CHECK_INT(ipd_config_load(&c, 2, unknown, NULL, NULL, &err),
              IPD_ERR_INVALID);
    CHECK(strstr(err.buf, "no-such-option") != NULL);
    ipd_config_release(&c);

    ipd_buf_reset(&err);
    ipd_config_init(&c);
    CHECK_INT(ipd_config_load(&c, 1, missing, NULL, NULL, &err),
              IPD_ERR_INVALID);
    ipd_config_release(&c);

    ipd_buf_reset(&err);
    ipd_config_init(&c);
    CHECK_INT(ipd_config_load(&c, 1, positional, NULL, NULL, &err),
              IPD_ERR_INVALID);
    ipd_config_release(&c);

    ipd_buf_reset(&err);
    ipd_config_init(&c);
    CHECK_INT(ipd_config_load(&c, 2, zero_ttl, NULL, NULL, &err),
              IPD_ERR_INVALID);
    ipd_config_release(&c);

    ipd_buf_reset(&err);
    ipd_config_init(&c);
    char *path = write_file("just words\n");
    const char *with_file[] = {"--config", path};
    CHECK_INT(ipd_config_load(&c, 2, with_file, NULL, NULL, &err),
              IPD_ERR_INVALID);
    CHECK(strstr(err.buf, ":1:") != NULL);
    unlink(path);
    free(path);
    ipd_config_release(&c);
    ipd_buf_release(&err);
}

static void command_args_pass_through(void)
{
    struct ipd_config c;
    struct ipd_buf err;
    const char **rest = NULL;
    size_t n = 0;
    const char *argv[] = {"create",     "--tenant", "bot",
                          "--data-dir", "/tmp/x",   "--admin"};
    ipd_config_init(&c);
    ipd_buf_init(&err, 1024);
    CHECK_INT(ipd_config_load(&c, 6, argv, &rest, &n, &err), IPD_OK);
    CHECK_STR(c.data_dir, "/tmp/x");
    REQUIRE(n == 4);
    CHECK_STR(rest[0], "create");
    CHECK_STR(rest[1], "--tenant");
    CHECK_STR(rest[2], "bot");
    CHECK_STR(rest[3], "--admin");
    free((void *)rest);
    ipd_buf_release(&err);
    ipd_config_release(&c);
}

static void never_ttl_and_redaction(void)
{
    struct ipd_config c;
    struct ipd_buf err;
    const char *argv[] = {"--file-ttl", "never", "--mongo-uri",
                          "mongodb://app:s3cret@db.example:27017/interpd"};
    ipd_config_init(&c);
    ipd_buf_init(&err, 1024);
    CHECK_INT(ipd_config_load(&c, 4, argv, NULL, NULL, &err), IPD_OK);
    CHECK(c.file_ttl_ms == IPD_TIME_NEVER);

    char *printed = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&printed, &len);
    ipd_config_print(&c, f);
    fclose(f);
    CHECK(strstr(printed, "s3cret") == NULL);
    CHECK(strstr(printed, "mongodb://app:****@db.example:27017/interpd") !=
          NULL);
    CHECK(strstr(printed, "file-ttl = never (flag)") != NULL);
    free(printed);

    char *r = ipd_redact_uri("mongodb://db.example/x");
    CHECK_STR(r, "mongodb://db.example/x");
    free(r);
    ipd_buf_release(&err);
    ipd_config_release(&c);
}

/* Execution policies: built-ins, operator changes and new ones from the
 * file and flags, bad settings refused with the line's name. */
static void policies(void)
{
    struct ipd_config c;
    struct ipd_buf err;
    ipd_buf_init(&err, 1024);
    ipd_config_init(&c);
    const struct ipd_exec_policy *st = ipd_config_policy(&c, NULL);
    REQUIRE(st);
    CHECK_STR(st->name, "standard");
    CHECK_INT(st->timeout_ms, 60000);
    CHECK_INT(st->max_timeout_ms, 300000);
    CHECK_INT(st->output_bytes, 100 * 1024);
    CHECK(!st->network);
    CHECK(ipd_config_policy(&c, "networked")->network);
    CHECK(ipd_config_policy(&c, "tiny") == NULL);
    CHECK(ipd_policy_within(ipd_config_policy(&c, "strict"), st));
    CHECK(ipd_policy_within(st, ipd_config_policy(&c, "networked")));
    CHECK(!ipd_policy_within(ipd_config_policy(&c, "networked"), st));
    CHECK(!ipd_policy_within(NULL, st));

    char *path = write_file("policy.tiny.memory = 64M\n"
                            "policy.tiny.timeout = 2s\n"
                            "policy.tiny.max_timeout = 3s\n"
                            "policy.standard.output-limit = 50K\n");
    const char *argv[] = {"--config",
                          path,
                          "--policy.tiny.network=yes",
                          "--policy.tiny.processes",
                          "8",
                          "--policy.tiny.cpus=0.25"};
    CHECK_INT(st->cpu_millis, 1000); /* one core unless set */
    CHECK_INT(ipd_config_load(&c, 6, argv, NULL, NULL, &err), IPD_OK);
    const struct ipd_exec_policy *t = ipd_config_policy(&c, "tiny");
    REQUIRE(t);
    CHECK_INT(t->memory_bytes, 64LL << 20);
    CHECK_INT(t->timeout_ms, 2000);
    CHECK_INT(t->max_timeout_ms, 3000);
    CHECK_INT(t->max_processes, 8);
    CHECK_INT(t->cpu_millis, 250);
    CHECK(t->network);
    /* Unset fields come from standard as it was when tiny was made. */
    CHECK_INT(t->tmp_bytes, 256LL << 20);
    CHECK_INT(ipd_config_policy(&c, "standard")->output_bytes, 50 * 1024);
    CHECK(!ipd_policy_within(t, ipd_config_policy(&c, "standard")));
    unlink(path);
    free(path);
    ipd_config_release(&c);

    static const char *const bad[][2] = {
        {"--policy.tiny.colour=red", "unknown policy field"},
        {"--policy.Tiny.memory=1G", "bad policy option"},
        {"--policy..memory=1G", "bad policy option"},
        {"--policy.tiny=1", "bad policy option"},
        {"--policy.tiny.memory=1K", "invalid value"},
        {"--policy.tiny.network=maybe", "invalid value"},
        {"--policy.tiny.timeout=never", "invalid value"},
        {"--policy.tiny.timeout=10m", "longer than its max-timeout"},
        {"--policy.tiny.cpus=0", "invalid value"},
        {"--policy.tiny.cpus=1.0005", "invalid value"},
        {"--policy.tiny.cpus=.5", "invalid value"},
        {"--policy.tiny.cpus=2000", "invalid value"},
        {"--policy.tiny.cpus=1e3", "invalid value"},
    };
    for (size_t i = 0; i < IPD_ARRAY_LEN(bad); i++) {
        ipd_config_init(&c);
        ipd_buf_reset(&err);
        const char *one[] = {bad[i][0]};
        CHECK_INT(ipd_config_load(&c, 1, one, NULL, NULL, &err),
                  IPD_ERR_INVALID);
        if (!strstr(err.buf, bad[i][1]))
            fprintf(stderr, "%s: got \"%s\"\n", bad[i][0], err.buf);
        CHECK(strstr(err.buf, bad[i][1]) != NULL);
        ipd_config_release(&c);
    }
    ipd_buf_release(&err);
}

/* Timeouts and delays added to clock readings refuse "never" (they would
 * wrap); intervals and ages accept it.  Regression for a review finding:
 * fetch-timeout never made every fetch time out at once. */
static void never_only_where_it_means_something(void)
{
    static const char *const refused[] = {
        "--fetch-timeout=never",
        "--fetch-connect-timeout=never",
        "--pip-timeout=never",
        "--callback-retry-delay=never",
        "--fetch-timeout=2d",
        /* a deadline added to the clock: never wrapped, closing every
         * connection at once */
        "--request-header-timeout=never",
        "--request-body-timeout=never",
        "--request-body-timeout=2d",
    };
    static const char *const accepted[] = {
        "--venv-check-interval=never",
        "--venv-max-age=never",
        "--sweep-interval=never",
        "--reconcile-interval=never",
    };
    struct ipd_config c;
    struct ipd_buf err;
    ipd_buf_init(&err, 4096);
    for (size_t i = 0; i < IPD_ARRAY_LEN(refused); i++) {
        ipd_config_init(&c);
        ipd_buf_reset(&err);
        const char *one[] = {refused[i]};
        CHECK_INT(ipd_config_load(&c, 1, one, NULL, NULL, &err),
                  IPD_ERR_INVALID);
        CHECK(strstr(err.buf, "at most 1d") != NULL);
        ipd_config_release(&c);
    }
    for (size_t i = 0; i < IPD_ARRAY_LEN(accepted); i++) {
        ipd_config_init(&c);
        ipd_buf_reset(&err);
        const char *one[] = {accepted[i]};
        CHECK_INT(ipd_config_load(&c, 1, one, NULL, NULL, &err), IPD_OK);
        ipd_config_release(&c);
    }
    ipd_buf_release(&err);
}

/* The callback secret's grace: 24h by default, 0s to 30d. */
static void callback_secret_grace(void)
{
    static const char *const cases[][2] = {
        {"--callback-secret-grace=never", NULL},
        {"--callback-secret-grace=31d", NULL},
        {"--callback-secret-grace=30d", "2592000000"},
        {"--callback-secret-grace=0s", "0"},
    };
    struct ipd_config c;
    struct ipd_buf err;
    ipd_buf_init(&err, 4096);
    ipd_config_init(&c);
    CHECK_INT(ipd_config_load(&c, 0, NULL, NULL, NULL, &err), IPD_OK);
    CHECK_INT(c.callback_secret_grace_ms, 86400000);
    ipd_config_release(&c);
    for (size_t i = 0; i < IPD_ARRAY_LEN(cases); i++) {
        ipd_config_init(&c);
        ipd_buf_reset(&err);
        const char *one[] = {cases[i][0]};
        enum ipd_err rc = ipd_config_load(&c, 1, one, NULL, NULL, &err);
        if (cases[i][1]) {
            CHECK_INT(rc, IPD_OK);
            CHECK_INT(c.callback_secret_grace_ms,
                      strtoll(cases[i][1], NULL, 10));
        } else {
            CHECK_INT(rc, IPD_ERR_INVALID);
            CHECK(strstr(err.buf, "callback-secret-grace must be 0s to 30d"));
        }
        ipd_config_release(&c);
    }
    ipd_buf_release(&err);
}

/* The tenant-* policy fields (fairness between tenants): "N" a count,
 * "N%" of the pool (stored negated), "0" no bound; anything else, a
 * negative count, 0% or more than 100% is refused. */
static void policy_shares(void)
{
    struct ipd_config c;
    struct ipd_buf err;
    ipd_buf_init(&err, 1024);
    ipd_config_init(&c);
    const struct ipd_exec_policy *st = ipd_config_policy(&c, NULL);
    REQUIRE(st);
    CHECK_INT(st->tenant_running, -50);
    CHECK_INT(st->tenant_queued, -50);
    CHECK_INT(st->tenant_results, -10);
    CHECK_INT(st->tenant_fetches, -50);
    CHECK_INT(st->tenant_callbacks, -10);
    CHECK_INT(st->tenant_installs, -25);
    const char *argv[] = {"--policy.standard.tenant-running=3",
                          "--policy.standard.tenant-queued=0",
                          "--policy.standard.tenant-async-results=100%",
                          "--policy.standard.tenant-fetches=1%",
                          "--policy.standard.tenant-callbacks=1048576",
                          "--policy.tiny.tenant-installs=7"};
    CHECK_INT(ipd_config_load(&c, 6, argv, NULL, NULL, &err), IPD_OK);
    CHECK_STR(err.buf, "");
    st = ipd_config_policy(&c, "standard");
    const struct ipd_exec_policy *t = ipd_config_policy(&c, "tiny");
    REQUIRE(st && t);
    CHECK_INT(st->tenant_running, 3);
    CHECK_INT(st->tenant_queued, 0);
    CHECK_INT(st->tenant_results, -100);
    CHECK_INT(st->tenant_fetches, -1);
    CHECK_INT(st->tenant_callbacks, 1 << 20);
    CHECK_INT(t->tenant_installs, 7);
    ipd_config_release(&c);

    static const char *const bad[] = {
        "-1",
        "-5%",
        "0%",
        "101%",
        "1000%",
        "%",
        "",
        "abc",
        "5x",
        "5%%",
        "x%",
        "1.5",
        "1.5%",
        "1048577",
        "99999999999999999999",
        "99999999999999999999%",
        "12345678901234567890123%",
    };
    for (size_t i = 0; i < IPD_ARRAY_LEN(bad); i++) {
        char arg[96];
        int n = snprintf(arg, sizeof(arg),
                         "--policy.standard.tenant-installs=%s", bad[i]);
        REQUIRE(n > 0 && (size_t)n < sizeof(arg));
        const char *one[] = {arg};
        ipd_config_init(&c);
        ipd_buf_reset(&err);
        CHECK_INT(ipd_config_load(&c, 1, one, NULL, NULL, &err),
                  IPD_ERR_INVALID);
        if (!strstr(err.buf, "invalid value"))
            fprintf(stderr, "%s: got \"%s\"\n", arg, err.buf);
        CHECK(strstr(err.buf, "invalid value") != NULL);
        /* The default stands. */
        CHECK_INT(ipd_config_policy(&c, NULL)->tenant_installs, -25);
        ipd_config_release(&c);
    }
    ipd_buf_release(&err);
}

/* A share of a pool of some capacity: a count as it is, a percentage
 * rounded down but at least 1, 0 no bound. */
static void policy_share_of_pool(void)
{
    CHECK_INT(ipd_policy_share(0, 17), 0);
    CHECK_INT(ipd_policy_share(3, 2), 3); /* the pool bounds it anyway */
    CHECK_INT(ipd_policy_share(-50, 2), 1);
    CHECK_INT(ipd_policy_share(-50, 1), 1); /* at least 1 */
    CHECK_INT(ipd_policy_share(-25, 17), 4);
    CHECK_INT(ipd_policy_share(-10, 10000), 1000);
    CHECK_INT(ipd_policy_share(-100, 68), 68);
    CHECK_INT(ipd_policy_share(-1, 0), 1);
    CHECK_INT(ipd_policy_share(INT64_MAX, 4), 0xFFFFFF);
}

/* exec-mode and the session options: defaults, and what is refused. */
static void warm_and_sessions(void)
{
    static const char *const refused[] = {
        "--exec-mode=hot",        "--exec-mode=",
        "--warm-recycle-runs=-1", "--warm-recycle-after=8d",
        "--max-sessions=-1",      "--max-sessions=1001",
        "--sessions-per-user=0",  "--session-idle-timeout=never",
        "--session-max-life=31d", "--session-reap-interval=2h",
    };
    struct ipd_config c;
    struct ipd_buf err;

    ipd_buf_init(&err, 4096);
    ipd_config_init(&c);
    CHECK_INT(ipd_config_load(&c, 0, NULL, NULL, NULL, &err), IPD_OK);
    CHECK_STR(c.exec_mode, "warm");
    CHECK_STR(c.warm_modules, "numpy,pandas,matplotlib");
    CHECK_INT(c.warm_recycle_runs, 1000);
    CHECK_INT(c.warm_recycle_ms, 3600 * 1000);
    CHECK_INT(c.max_sessions, 8);
    CHECK_INT(c.sessions_per_user, 3);
    CHECK_INT(c.session_idle_ms, 20 * 60 * 1000);
    CHECK_INT(c.session_max_life_ms, 8LL * 3600 * 1000);
    ipd_config_release(&c);
    for (size_t i = 0; i < IPD_ARRAY_LEN(refused); i++) {
        ipd_config_init(&c);
        ipd_buf_reset(&err);
        const char *one[] = {refused[i]};
        if (ipd_config_load(&c, 1, one, NULL, NULL, &err) != IPD_ERR_INVALID)
            fprintf(stderr, "accepted: %s\n", refused[i]);
        CHECK_INT(ipd_config_load(&c, 1, one, NULL, NULL, &err),
                  IPD_ERR_INVALID);
        ipd_config_release(&c);
    }
    ipd_config_init(&c);
    const char *ok[] = {"--exec-mode=cold", "--max-sessions=0"};
    CHECK_INT(ipd_config_load(&c, 2, ok, NULL, NULL, &err), IPD_OK);
    CHECK_STR(c.exec_mode, "cold");
    CHECK_INT(c.max_sessions, 0);
    ipd_config_release(&c);
    ipd_buf_release(&err);
}

/* A switch (--console): alone it means true and never takes the next
 * word; after "=", in the environment and in the file, true/false,
 * yes/no, on/off or 1/0; anything else is refused. */
static void switches(void)
{
    struct ipd_config c;
    struct ipd_buf err;
    const char **rest = NULL;
    size_t n = 0;
    ipd_buf_init(&err, 1024);
    ipd_config_init(&c);
    CHECK_INT(c.console, 0);
    const char *alone[] = {"serve",       "--console", "--listen",
                           "127.0.0.1:1", "--console", "extra"};
    CHECK_INT(ipd_config_load(&c, 6, alone, &rest, &n, &err), IPD_OK);
    CHECK_INT(c.console, 1);
    CHECK_STR(c.listen, "127.0.0.1:1");
    REQUIRE(n == 2); /* "extra" is a word, not --console's value */
    CHECK_STR(rest[1], "extra");
    free((void *)rest);
    ipd_config_release(&c);

    static const char *const values[][2] = {
        {"--console=false", "0"}, {"--console=TRUE", "1"},
        {"--console=no", "0"},    {"--console=on", "1"},
        {"--console=0", "0"},     {"--console=yes", "1"}};
    for (size_t i = 0; i < IPD_ARRAY_LEN(values); i++) {
        const char *one[] = {values[i][0]};
        ipd_config_init(&c);
        CHECK_INT(ipd_config_load(&c, 1, one, NULL, NULL, &err), IPD_OK);
        CHECK_INT(c.console, values[i][1][0] - '0');
        ipd_config_release(&c);
    }

    setenv("INTERPD_CONSOLE", "yes", 1);
    ipd_config_init(&c);
    CHECK_INT(ipd_config_load(&c, 0, NULL, NULL, NULL, &err), IPD_OK);
    CHECK_INT(c.console, 1);
    ipd_config_release(&c);
    setenv("INTERPD_CONSOLE", "maybe", 1);
    ipd_config_init(&c);
    ipd_buf_reset(&err);
    CHECK_INT(ipd_config_load(&c, 0, NULL, NULL, NULL, &err), IPD_ERR_INVALID);
    CHECK(strstr(err.buf, "console") != NULL);
    ipd_config_release(&c);
    unsetenv("INTERPD_CONSOLE");

    char *path = write_file("console = off\n");
    const char *file[] = {"--config", path};
    ipd_config_init(&c);
    ipd_buf_reset(&err);
    CHECK_INT(ipd_config_load(&c, 2, file, NULL, NULL, &err), IPD_OK);
    CHECK_INT(c.console, 0);
    ipd_config_release(&c);
    const char *bad[] = {"--console=2"};
    ipd_config_init(&c);
    CHECK_INT(ipd_config_load(&c, 1, bad, NULL, NULL, &err), IPD_ERR_INVALID);
    ipd_config_release(&c);
    unlink(path);
    free(path);
    ipd_buf_release(&err);
}

TEST_MAIN(T(defaults), T(precedence_flag_env_file), T(errors_are_reported),
          T(command_args_pass_through), T(never_ttl_and_redaction),
          T(never_only_where_it_means_something), T(policies),
          T(callback_secret_grace), T(policy_shares), T(policy_share_of_pool),
          T(warm_and_sessions), T(switches))
