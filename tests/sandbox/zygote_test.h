/*
 * zygote_test.h - a zygote for sandbox tests (sandbox.h, "Warm runs"):
 * service/exec/python/zygote.py run in its own thread from the source
 * tree's prelude directory, and parked children with a job/ and data/
 * stage.  Needs root (detached stages).  The machinery (struct zt,
 * zt_start, zt_run, zt_stop) lives in sandbox_test.h, whose warm mode
 * runs the escape suite through it.
 */
#ifndef IPD_ZYGOTE_TEST_H
#define IPD_ZYGOTE_TEST_H

#include "sandbox_test.h"

#endif
