#!/usr/bin/env bash
# bench/warm_ab.sh - bench/warm.sh's run for two builds side by side:
# servers of BASE and NEW, warm and cold, all started before the first
# round, measured in one run with every contestant interleaved request by
# request (bench/warm.py), next to warm.sh's baselines.  For a change
# that must not regress (issue 21: the restructuring).
#
# Usage: bench/warm_ab.sh BASE_INTERPD NEW_INTERPD [ROUNDS=20] [PER_ROUND=5]
#          [DURATION=5] [REPS=3]
#   e.g. git worktree add /tmp/base REV && (cd /tmp/base &&
#        scripts/build.sh build-bench -DCMAKE_BUILD_TYPE=Release)
#        bench/warm_ab.sh /tmp/base/build-bench/interpd build-bench/interpd
# Each binary reads the prelude of its own source tree.  AB_OPTS: more
# serve options for every server (e.g. a --warm-modules list).
BASE_BIN=${1:?usage: bench/warm_ab.sh BASE_INTERPD NEW_INTERPD [ROUNDS PER_ROUND DURATION REPS]}
NEW_BIN=${2:?usage: bench/warm_ab.sh BASE_INTERPD NEW_INTERPD [ROUNDS PER_ROUND DURATION REPS]}
shift 2
INTERPD=$NEW_BIN
source "$(dirname "$0")/lib.sh"
ROUNDS=${1:-20}
PER_ROUND=${2:-5}
DURATION=${3:-5}
REPS=${4:-3}
bench_setup warmab
chmod 711 "$WORK"
servers=()
i=0
for spec in "base-warm:$BASE_BIN:warm" "new-warm:$NEW_BIN:warm" \
  "base-cold:$BASE_BIN:cold" "new-cold:$NEW_BIN:cold"; do
  IFS=: read -r label bin mode <<<"$spec"
  INTERPD=$bin SERVER_NAME=$label start_server --exec-queue 64 \
    --policy.standard.tenant-running 100% \
    --sandbox-uid $((310000 + 1000 * i)) --exec-mode "$mode" $AB_OPTS
  servers+=("interpd $label=$PORT:$KEY")
  i=$((i + 1))
done
# Wait for each server's mode (warm: its zygotes ready).
wait_modes "${servers[@]}"
echo "# load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
PATH=/usr/bin:/bin:$PATH "$PY" -B "$BENCH_ROOT/bench/warm.py" "$WORK" \
  "$ROUNDS" "$PER_ROUND" "$DURATION" "$REPS" "${servers[@]}"
echo "# load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
