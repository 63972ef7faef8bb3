#!/usr/bin/env bash
# The whole test suite, the way CI runs it:
#   1. gcc, -Werror, every ctest label;
#   2. clang with AddressSanitizer + UndefinedBehaviorSanitizer
#      (-fno-sanitize-recover=all, leak checking on), every label again;
#   3. the mutation check (tests/mutants/run.sh): every curated mutant of
#      a security or integrity property must be killed by its tests; the
#      gcc stage ran the whole suite on the same tree, so it is the
#      baseline;
#   4. libFuzzer (clang, ASan+UBSan, -DIPD_FUZZ=ON): fuzz_request for 60 s
#      and the other harnesses for 10 s each (scripts/fuzz.sh; new inputs
#      and findings stay in build-fuzz/fuzz/), run beside stage 3, which
#      mostly waits (its log is build-ci/mutants.log, printed at its end).
# Exits non-zero on the first failing stage (3 and 4 both run to their
# end, then either failing fails the run).  Each stage's time is
# printed when it ends, and all of them at the end.
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

# The mutation check mostly waits (its tests sleep through timeouts,
# session lives and server starts: 7 min of CPU in 19 min here when its
# mutants ran one after another), so it runs in two shards at once, each
# its own scratch tree, and the libFuzzer stage runs beside it instead of
# after it.  Its output is
# printed when it ends.  A mutant's tests only count it killed when they
# fail, so the load can hide a survivor, never make one.
stage "mutation check, with the libFuzzer build and fuzzing beside it"
mkdir -p build-ci
tests/mutants/run.sh --no-baseline --jobs "$jobs" --shards 2 \
  >build-ci/mutants.log 2>&1 &
mutants_pid=$!
fuzz_ok=1
# Only the harnesses are built: ipdcore with coverage instrumentation is
# what they need, and the tests above already ran on the same code.
if ! (
  set -e
  CC=clang cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=Debug -DIPD_WERROR=ON \
    -DIPD_SANITIZE=ON -DIPD_FUZZ=ON >/dev/null
  cmake --build build-fuzz -j"$jobs" --target fuzz_request fuzz_filename \
    fuzz_cursor fuzz_duration fuzz_requirement fuzz_content_disposition \
    fuzz_display fuzz_varlist
  printf '\n==== fuzzing (bounded) ====\n'
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    scripts/fuzz.sh build-fuzz 60 request
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    scripts/fuzz.sh build-fuzz 10 filename cursor duration requirement \
    content_disposition display varlist
); then
  fuzz_ok=0
fi
printf '\n==== libFuzzer done after %d s; waiting for the mutation check ====\n' \
  $((SECONDS - stage_t0))
mutants_ok=1
wait "$mutants_pid" || mutants_ok=0
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
