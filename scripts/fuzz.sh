#!/usr/bin/env bash
# Run libFuzzer harnesses for a bounded time each.
#   scripts/fuzz.sh BUILD_DIR SECONDS [NAME...]
# BUILD_DIR is a clang build configured with -DIPD_FUZZ=ON (and usually
# -DIPD_SANITIZE=ON); NAME is a harness (tests/fuzz/fuzz_NAME.c), all of
# them by default.  Each run works on BUILD_DIR/fuzz/NAME/corpus: the
# checked-in seeds plus what earlier runs there found (new inputs stay
# there, never in the source tree).  Crash, timeout and leak inputs go to
# BUILD_DIR/fuzz/NAME/, the log to BUILD_DIR/fuzz/NAME/log.  Exits
# non-zero when any harness found something; once it is fixed, add the
# input to tests/fuzz/corpus/NAME/ with its regression test.
set -euo pipefail
cd "$(dirname "$0")/.."
build=$1
secs=$2
shift 2
names=("$@")
if [ ${#names[@]} -eq 0 ]; then
  for f in tests/fuzz/fuzz_*.c; do
    n=${f#tests/fuzz/fuzz_}
    names+=("${n%.c}")
  done
fi

failed=0
for name in "${names[@]}"; do
  bin="$build/tests/fuzz_$name"
  work="$build/fuzz/$name"
  if [ ! -x "$bin" ]; then
    echo "fuzz: $bin is missing (configure with -DIPD_FUZZ=ON)" >&2
    exit 2
  fi
  mkdir -p "$work/corpus"
  cp "tests/fuzz/corpus/$name"/* "$work/corpus/"
  args=(-max_total_time="$secs" -timeout=10 -rss_limit_mb=2048
        -print_final_stats=1 -artifact_prefix="$work/")
  [ -f "tests/fuzz/$name.dict" ] && args+=(-dict="tests/fuzz/$name.dict")
  printf 'fuzz %-20s %4ss ... ' "$name" "$secs"
  if "$bin" "${args[@]}" "$work/corpus" >"$work/log" 2>&1; then
    grep -a '^stat::number_of_executed_units' "$work/log" |
      sed 's/.*: */ok, runs: /'
  else
    echo "FAILED (log: $work/log)"
    grep -av '^20[0-9-]*T' "$work/log" | tail -60
    ls "$work"/crash-* "$work"/timeout-* "$work"/leak-* "$work"/oom-* \
      2>/dev/null || true
    failed=1
  fi
done
exit $failed
