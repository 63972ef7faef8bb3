/*
 * test_callbacks.c - the pure parts of service/exec/callbacks.c: the
 * X-Interpd-Signature value (t=, v1= over "<t>.<body>", the previous
 * secret during the grace period only) against HMACs computed by
 * Python's hmac module, and the delivery status object.  Delivery itself
 * is tests/integration/test_async.c's.
 */
#include "service/exec/callbacks.h"
#include "test.h"

#define T0 INT64_C(1800000000000) /* ms; t=1800000000 */
/* /usr/bin/python3: hmac.new(k, b"1800000000." + b'{"a":1}', sha256) */
#define V1_NEW "6096aa106f1d37bc8064e9c92b8a1c462d86518074b048b4ca666e84e3f72568"
#define V1_OLD "603fae72dd497f968d3c5b62b4348c7af27d452ff7b61142264a24c4478a6000"

static void signature(void)
{
    static const char body[] = "{\"a\":1}";
    struct ipd_callback_keys k = {.secret = "new-secret"};
    char sig[IPD_SIGNATURE_MAX];
    ipd_callback_signature(&k, 3600000, T0 + 999, body, strlen(body), sig);
    CHECK_STR(sig, "t=1800000000,v1=" V1_NEW);

    /* Rotated at T0 - 10 s with a 60 s grace: both, the new one first;
     * at the end of the grace, the new one alone. */
    snprintf(k.prev_secret, sizeof(k.prev_secret), "old-secret");
    k.rotated_at_ms = T0 - 10000;
    ipd_callback_signature(&k, 60000, T0, body, strlen(body), sig);
    CHECK_STR(sig, "t=1800000000,v1=" V1_NEW ",v1=" V1_OLD);
    ipd_callback_signature(&k, 10001, T0, body, strlen(body), sig);
    CHECK_STR(sig, "t=1800000000,v1=" V1_NEW ",v1=" V1_OLD);
    ipd_callback_signature(&k, 10000, T0, body, strlen(body), sig);
    CHECK_STR(sig, "t=1800000000,v1=" V1_NEW);
    ipd_callback_signature(&k, 0, T0, body, strlen(body), sig);
    CHECK_STR(sig, "t=1800000000,v1=" V1_NEW);
    /* Never rotated: no second signature whatever the grace. */
    k.rotated_at_ms = 0;
    ipd_callback_signature(&k, INT64_C(1) << 40, T0, body, strlen(body), sig);
    CHECK_STR(sig, "t=1800000000,v1=" V1_NEW);
    /* The body counts to the last byte. */
    ipd_callback_signature(&k, 0, T0, body, strlen(body) - 1, sig);
    CHECK(strcmp(sig, "t=1800000000,v1=" V1_NEW) != 0);
}

static void status_object(void)
{
    struct ipd_callback_status *s = ipd_callback_status_new();
    json_t *j = ipd_callback_status_json(s);
    CHECK_STR(json_string_value(json_object_get(j, "status")), "pending");
    CHECK_INT(json_integer_value(json_object_get(j, "attempts")), 0);
    CHECK(json_is_null(json_object_get(j, "error")));
    CHECK(json_is_null(json_object_get(j, "delivery_id")));
    json_decref(j);

    /* A second holder keeps it alive after the first lets go. */
    struct ipd_callback_status *r = ipd_callback_status_ref(s);
    ipd_callback_status_unref(s);
    ipd_callback_status_fail(r, "callbacks are unavailable");
    j = ipd_callback_status_json(r);
    CHECK_STR(json_string_value(json_object_get(j, "status")), "failed");
    CHECK_STR(json_string_value(json_object_get(j, "error")),
              "callbacks are unavailable");
    json_decref(j);
    ipd_callback_status_unref(r);
    ipd_callback_status_unref(NULL);
    ipd_callback_status_fail(NULL, "nothing happens");
}

TEST_MAIN(T(signature), T(status_object))
