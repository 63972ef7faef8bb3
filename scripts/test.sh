#!/usr/bin/env bash
# The whole test suite, the way CI runs it.  Every test runs at least once;
# the sanitizers see every C code path.  The split (this machine kind has
# 2 cores and the suite is CPU-bound, mostly Python inside the sandbox, so
# running the same matrix twice cost more than the 60 minutes CI has):
#   1. gcc, -Werror: the build (every target, tests included), then the
#      tests that do not depend on how interpd is compiled (label "tree":
#      format, layering, docs, the Docker files, the README's commands on
#      fresh copies, the Python prelude and zygote tests) and the MongoDB
#      x warm and MongoDB x session variants of the integration tests
#      (label "gcc": their backend code and their mode code each run
#      under the sanitizers in stage 2);
#   2. clang with AddressSanitizer + UndefinedBehaviorSanitizer
#      (-fno-sanitize-recover=all, leak checking on): everything else:
#      unit/, sandbox/, fuzz-smoke/, the installed copy, and the
#      integration tests on SQLite (cold, warm, session) and on MongoDB
#      (cold);
#   3. the mutation check (tests/mutants/run.sh): every curated mutant of
#      a security or integrity property must be killed by its tests; in
#      two shards at once (it mostly waits), without a baseline of its
#      own: stages 1 and 2 ran every test on the same tree;
#   4. libFuzzer (clang, ASan+UBSan, -DIPD_FUZZ=ON): fuzz_request for 60 s
#      and the other harnesses for 10 s each (scripts/fuzz.sh; new inputs
#      and findings stay in build-fuzz/fuzz/), beside stage 3 (its log is
#      build-ci/mutants.log, printed at its end).
# Exits non-zero on the first failing stage (3 and 4 both run to their
# end, then either failing fails the run).  Each stage's time is printed
# when it ends, and all of them at the end.
set -euo pipefail
cd "$(dirname "$0")/.."

jobs=$(nproc)
export CTEST_OUTPUT_ON_FAILURE=1

times=()
stage_name=""
stage_t0=$SECONDS
stage_end() {
  if [ -n "$stage_name" ]; then
    times+=("$(printf '%5d s  %s' $((SECONDS - stage_t0)) "$stage_name")")
    printf '==== %s: %d s ====\n' "$stage_name" $((SECONDS - stage_t0))
  fi
}
stage() {
  stage_end
  stage_name=$*
  stage_t0=$SECONDS
  printf '\n==== %s ====\n' "$*"
}

# Stage 1's tests and stage 2's, as ctest label selections (the labels
# are set in tests/CMakeLists.txt): the two partition the suite.
gcc_select=(-L '^(tree|gcc)$')
asan_select=(-LE '^(tree|gcc)$')

stage "gcc -Werror build"
# Release, as the Docker image is built: its -O3 inlining finds warnings
# (-Wformat-truncation) that RelWithDebInfo's -O2 does not, and the tests
# then run the optimisation level users deploy.
CC=gcc scripts/build.sh build-ci -DIPD_WERROR=ON -DCMAKE_BUILD_TYPE=Release
# Every test is in one of the two selections (a new variant or label
# that neither names would otherwise never run).
names() { ctest --test-dir build-ci -N "$@" | sed -n 's/^ *Test *#[0-9]*: //p'; }
missing=$(names | sort | comm -23 - <({ names "${gcc_select[@]}"
  names "${asan_select[@]}"; } | sort -u))
if [ -n "$missing" ]; then
  printf 'test.sh: tests neither stage runs:\n%s\n' "$missing" >&2
  exit 1
fi
stage "tests (gcc): tree checks, MongoDB warm and session variants"
ctest --test-dir build-ci --output-on-failure -j"$jobs" "${gcc_select[@]}"

stage "clang ASan+UBSan build"
CC=clang scripts/build.sh build-asan -DIPD_WERROR=ON -DIPD_SANITIZE=ON \
  -DCMAKE_BUILD_TYPE=Debug
stage "tests (ASan+UBSan): unit, sandbox, fuzz-smoke, installed, integration on SQLite (all modes) and MongoDB (cold)"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:detect_stack_use_after_return=1 \
UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --test-dir build-asan --output-on-failure -j"$jobs" "${asan_select[@]}"

# The mutation check mostly waits (timeouts, session lives, server
# starts), so it runs in two shards at once, each its own scratch tree,
# and the libFuzzer stage runs beside it.  Not beside stage 2: under that
# load the sanitizer stage's timing checks failed (a 2-core host at a load
# average of 6) and it finished no sooner, the suite being CPU-bound.
# Its output is printed when it ends.  A mutant's tests only count it
# killed when they fail, so the load can hide a survivor, never make one.
stage "mutation check, with the libFuzzer build and fuzzing beside it"
mkdir -p build-ci
# A process group of its own (setsid: a background job of this script is
# not a group leader, so it execs in place and $! is the group), so that
# a failure below stops the shards and their tests with it.
setsid tests/mutants/run.sh --no-baseline --jobs "$jobs" --shards 2 \
  >build-ci/mutants.log 2>&1 &
mutants_pid=$!
trap 'kill -- "-$mutants_pid" 2>/dev/null || true' EXIT
fuzz_ok=1
# Only the harnesses are built: ipdcore with coverage instrumentation is
# what they need, and the tests above already ran on the same code.
if ! (
  set -e
  CC=clang cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=Debug -DIPD_WERROR=ON \
    -DIPD_SANITIZE=ON -DIPD_FUZZ=ON >/dev/null
  cmake --build build-fuzz -j"$jobs" --target fuzz_request fuzz_filename \
    fuzz_cursor fuzz_duration fuzz_requirement fuzz_content_disposition \
    fuzz_display fuzz_varlist fuzz_calls
  printf '\n==== fuzzing (bounded) ====\n'
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    scripts/fuzz.sh build-fuzz 60 request
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    scripts/fuzz.sh build-fuzz 10 filename cursor duration requirement \
    content_disposition display varlist calls
); then
  fuzz_ok=0
fi
printf '\n==== libFuzzer done after %d s; waiting for the mutation check ====\n' \
  $((SECONDS - stage_t0))
mutants_ok=1
wait "$mutants_pid" || mutants_ok=0
trap - EXIT
cat build-ci/mutants.log
if [ "$fuzz_ok" = 0 ] || [ "$mutants_ok" = 0 ]; then
  printf '\n==== failed:%s%s ====\n' \
    "$([ "$fuzz_ok" = 0 ] && echo ' libFuzzer')" \
    "$([ "$mutants_ok" = 0 ] && echo ' the mutation check')"
  exit 1
fi

stage_end
printf '\n==== all stages passed in %d s ====\n' "$SECONDS"
printf '%s\n' "${times[@]}"
