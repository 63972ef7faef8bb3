#!/usr/bin/env bash
# The whole test suite, the way CI runs it:
#   1. gcc, -Werror, every ctest label;
#   2. clang with AddressSanitizer + UndefinedBehaviorSanitizer
#      (-fno-sanitize-recover=all, leak checking on), every label again.
# Exits non-zero on the first failing stage.
set -euo pipefail
cd "$(dirname "$0")/.."

jobs=$(nproc)
export CTEST_OUTPUT_ON_FAILURE=1

stage() { printf '\n==== %s ====\n' "$*"; }

stage "gcc -Werror build"
CC=gcc scripts/build.sh build-ci -DIPD_WERROR=ON
stage "tests (gcc)"
ctest --test-dir build-ci --output-on-failure -j"$jobs"

stage "clang ASan+UBSan build"
CC=clang scripts/build.sh build-asan -DIPD_WERROR=ON -DIPD_SANITIZE=ON \
  -DCMAKE_BUILD_TYPE=Debug
stage "tests (ASan+UBSan)"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:detect_stack_use_after_return=1 \
UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --test-dir build-asan --output-on-failure -j"$jobs"

stage "all stages passed"
