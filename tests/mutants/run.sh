#!/usr/bin/env bash
# The mutation check (tests/mutants/README.md): plant each curated bug of
# tests/mutants/*.patch, one at a time, in a scratch copy of the tree,
# build what its tests need, run the tests its header names, and count it
# killed when they fail.  Exits non-zero when any mutant survives, when a
# mutant does not apply or does not build (a stale mutant is a broken
# check, not a pass), or when the baseline fails.
#
#   tests/mutants/run.sh [--no-baseline] [--jobs N] [--dir DIR]
#                        [--shards K] [NAME...]
#
#   NAME...        only these mutants (file names without .patch)
#   --no-baseline  do not first run every named test on the unmutated
#                  tree (CI: its gcc stage ran the whole suite on the
#                  same tree just before)
#   --dir DIR      scratch directory (default build-mutants; its src/ is
#                  the copy, its build/ the build; kept between runs so
#                  builds stay incremental)
#   --shards K     split the mutants into K shards (round robin), each run
#                  by this script at once in a scratch directory of its own
#                  (DIR-1 .. DIR-K, each its own copy, build and MongoDB);
#                  a mutant's tests mostly wait (timeouts, server starts),
#                  so shards share the cores well.  Each shard's log is
#                  DIR-k/run.log, printed when all have ended.
#
# Each mutant's header (lines before the diff):
#   # property: what the planted bug breaks
#   # class: which class of the list in README.md it belongs to
#   # tests: a ctest -R regex; these tests must fail with the bug
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"

jobs=$(nproc)
baseline=1
dir=build-mutants
shards=1
names=()
while [ $# -gt 0 ]; do
  case "$1" in
    --no-baseline) baseline=0 ;;
    --jobs) jobs=$2; shift ;;
    --dir) dir=$2; shift ;;
    --shards) shards=$2; shift ;;
    -h|--help) sed -n '2,31p' "$0"; exit 0 ;;
    -*) echo "mutants: unknown option $1" >&2; exit 2 ;;
    *) names+=("$1") ;;
  esac
  shift
done

mdir=tests/mutants
if [ ${#names[@]} -eq 0 ]; then
  for p in "$mdir"/*.patch; do names+=("$(basename "$p" .patch)"); done
fi
[ ${#names[@]} -gt 0 ] || { echo "mutants: no mutant in $mdir" >&2; exit 2; }

header() { # header FILE KEY: the value of "# KEY:" before the diff
  sed -n "/^diff --git/q; s/^# $2: *//p" "$1" | head -n 1
}

for n in "${names[@]}"; do
  p="$mdir/$n.patch"
  [ -f "$p" ] || { echo "mutants: no $p" >&2; exit 2; }
  for k in property class tests; do
    [ -n "$(header "$p" $k)" ] || { echo "mutants: $p has no '# $k:' line" >&2; exit 2; }
  done
done

case $shards in
  '' | *[!0-9]* | 0) echo "mutants: --shards wants a count" >&2; exit 2 ;;
esac
if [ "$shards" -gt 1 ]; then
  t0=$SECONDS
  pids=()
  for k in $(seq 1 "$shards"); do
    part=()
    for i in "${!names[@]}"; do
      [ $((i % shards + 1)) = "$k" ] && part+=("${names[$i]}")
    done
    [ ${#part[@]} -gt 0 ] || continue
    flags=(--jobs "$jobs" --dir "$dir-$k")
    [ $baseline = 1 ] || flags+=(--no-baseline)
    mkdir -p "$dir-$k"
    "$0" "${flags[@]}" "${part[@]}" >"$dir-$k/run.log" 2>&1 &
    pids+=("$k:$!")
  done
  failed=()
  for kp in "${pids[@]}"; do
    wait "${kp#*:}" || failed+=("${kp%%:*}")
  done
  for kp in "${pids[@]}"; do
    printf '\n---- shard %s (%s-%s/run.log) ----\n' "${kp%%:*}" "$dir" "${kp%%:*}"
    cat "$dir-${kp%%:*}/run.log"
  done
  killed=$(for kp in "${pids[@]}"; do cat "$dir-${kp%%:*}/run.log"; done |
    sed -n 's/^mutants: \([0-9]*\) of [0-9]* killed.*/\1/p' |
    awk '{s += $1} END {print s + 0}')
  echo "mutants: $killed of ${#names[@]} killed in $shards shards;" \
    "$((SECONDS - t0)) s in all"
  if [ ${#failed[@]} -gt 0 ]; then
    echo "mutants: shard(s) ${failed[*]} failed (see above)" >&2
    exit 1
  fi
  exit 0
fi

mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
src=$dir/src
bld=$dir/build
t0=$SECONDS

# ---- the scratch copy: tracked and untracked (not ignored) files of the
# working tree.  rsync --checksum rewrites only files whose content
# differs, so an incremental build rebuilds exactly what changed (a file
# a mutant touched was reverted with a newer mtime than its object).
mkdir -p "$src"
git ls-files -z -co --exclude-standard | grep -zv '^tests/mutants/' | sort -z \
  >"$dir/files"
rsync -rlc --from0 --files-from="$dir/files" ./ "$src/"
if [ ! -d "$src/.git" ]; then
  git -C "$src" init -q
else # files gone from the tree go from the copy
  git -C "$src" ls-files -z | sort -z | comm -z -23 - "$dir/files" |
    (cd "$src" && xargs -0r rm -f --)
fi
git -C "$src" add -A
git -C "$src" -c user.name=mutants -c user.email=mutants@interpd.invalid \
  commit -q --allow-empty -m base
git -C "$src" reset -q --hard
# The npm packages of the tests (ignored by git; scripts/install-deps.sh
# puts them in the checkout): the copy uses the checkout's, so a test that
# needs one runs, rather than failing for want of it and counting as a
# kill.  Again after each mutant's clean, which removes the links.
link_npm() {
  local nm
  for nm in tests/support/*/node_modules; do
    [ -d "$nm" ] && ln -sfn "$PWD/$nm" "$src/$nm"
  done
  return 0
}
link_npm

echo "mutants: configure and build in $bld"
cmake -S "$src" -B "$bld" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$bld" --target help | sed -n 's/^\.\.\. \([^ ]*\).*/\1/p' \
  >"$dir/targets"

# The names of the tests a regex names.  ctest -N lists the MongoDB
# fixture's own mongo/start and mongo/stop too: never those (they would
# start a second server in this run's state dir).
tests_of() {
  ctest --test-dir "$bld" -R "$1" -N | sed -n 's/^ *Test *#[0-9]*: //p' |
    grep -v '^mongo/' || true
}
# The build targets of the tests a regex names, by ctest's naming
# (tests/CMakeLists.txt: unit/X is unit_X, integration*/X is itest_X,
# sandbox/X[_warm|_session] is sandbox_X, fuzz-smoke/X is fuzz_smoke_X),
# kept when the build knows them, plus interpd, which every integration
# test starts.
targets_of() {
  tests_of "$1" |
    sed -E -e 's#^unit/#unit_#' -e 's#^integration[^/]*/#itest_#' \
      -e 's#^sandbox/(.*)_(warm|session)$#sandbox_\1#' -e 's#^sandbox/#sandbox_#' \
      -e 's#^fuzz-smoke/#fuzz_smoke_#' |
    { cat; echo interpd; } | sort -u | grep -Fxf "$dir/targets" | paste -sd' '
}

# Every mutant's tests, as one flat regex of exact names (ctest's regex
# engine allows few groups, so the mutants' own regexes cannot simply be
# joined), and their targets, built once before the first mutant.
for n in "${names[@]}"; do header "$mdir/$n.patch" tests; done | sort -u |
  while IFS= read -r re; do tests_of "$re"; done | sort -u >"$dir/tests"
all_re=$(sed 's/.*/^&$/' "$dir/tests" | paste -sd'|')
[ -n "$all_re" ] || { echo "mutants: the mutants name no test" >&2; exit 2; }
# shellcheck disable=SC2046
cmake --build "$bld" -j"$jobs" --target $(targets_of "$all_re") >"$dir/build.log" 2>&1 ||
  { echo "mutants: the unmutated tree does not build; see $dir/build.log" >&2; exit 1; }
echo "mutants: built in $((SECONDS - t0)) s"

# MongoDB for the tests that need it: one server for the whole run (the
# ctest fixture would start and stop one per mutant).
mongo_state=$bld/mongo-server
mongo_started=0
stop_mongo() {
  if [ $mongo_started = 1 ]; then
    "$src/tests/support/mongo-server.sh" stop "$mongo_state" >/dev/null 2>&1 || true
  fi
}
trap stop_mongo EXIT
if grep -q mongo "$dir/tests"; then
  "$src/tests/support/mongo-server.sh" start "$mongo_state" >/dev/null
  mongo_started=1
fi

log=$dir/log
mkdir -p "$log"
run_tests() { # run_tests REGEX LOGFILE [--stop-on-failure]
  local re=$1 out=$2
  shift 2
  ctest --test-dir "$bld" -R "$re" -E '^mongo/' -FS mongo -FC mongo \
    -j"$jobs" --output-on-failure "$@" >"$out" 2>&1
}

if [ $baseline = 1 ]; then
  tb=$SECONDS
  if ! run_tests "$all_re" "$log/baseline.log"; then
    echo "mutants: the baseline fails (the unmutated tree); see $log/baseline.log" >&2
    grep -E '^\s*[0-9]+ - ' "$log/baseline.log" >&2 || true
    exit 1
  fi
  echo "mutants: baseline passed in $((SECONDS - tb)) s"
fi

killed=0
survived=()
broken=()
printf '%-34s %-9s %5s  %s\n' mutant result secs "failing tests (of those named)"
for n in "${names[@]}"; do
  p=$mdir/$n.patch
  re=$(header "$p" tests)
  tm=$SECONDS
  status=""
  detail=""
  if ! git -C "$src" apply --whitespace=nowarn "$root/$p" 2>"$log/$n.log"; then
    status=NO-APPLY
  elif [ -z "$(tests_of "$re")" ]; then
    status=NO-TESTS
  # shellcheck disable=SC2046
  elif ! cmake --build "$bld" -j"$jobs" --target $(targets_of "$re") \
      >>"$log/$n.log" 2>&1; then
    status=NO-BUILD
  elif IPD_TEST_STOP_ON_FAIL=1 run_tests "$re" "$log/$n.tests.log" \
      --stop-on-failure; then
    status=SURVIVED
  else
    status=killed
    detail=$(grep -v '(Not Run)' "$log/$n.tests.log" |
      sed -nE 's/^[[:space:]]+[0-9]+ - ([^ ]+) .*/\1/p' |
      paste -sd' ')
    [ -n "$detail" ] || detail="(ctest failed; see $log/$n.tests.log)"
  fi
  git -C "$src" checkout -q -- . && git -C "$src" clean -qfd
  link_npm
  case $status in
    killed) killed=$((killed + 1)) ;;
    SURVIVED) survived+=("$n") ;;
    *) broken+=("$n:$status") ;;
  esac
  printf '%-34s %-9s %5d  %s\n' "$n" "$status" $((SECONDS - tm)) "$detail"
done

total=${#names[@]}
echo "mutants: $killed of $total killed (score $((100 * killed / total))%)," \
  "${#survived[@]} survived, ${#broken[@]} broken; $((SECONDS - t0)) s in all"
if [ ${#survived[@]} -gt 0 ] || [ ${#broken[@]} -gt 0 ]; then
  [ ${#survived[@]} -eq 0 ] || echo "mutants: SURVIVED: ${survived[*]}" >&2
  [ ${#broken[@]} -eq 0 ] || echo "mutants: BROKEN (fix the patch): ${broken[*]}" >&2
  exit 1
fi
