#!/usr/bin/env bash
# bench/stream.sh - issue 22's benchmark: a streamed print(1) (Server-Sent
# Events, Accept: text/event-stream) against a synchronous one, on one warm
# interpd, one run, contestants interleaved (driver: bench/stream.py):
#
#   1. ROUNDS rounds of one print(1) of each, shuffled per round: the time
#      to the response head (the first byte) of both, to the first stdout
#      event and the result event of the stream, to the whole sync answer.
#      The issue's target: the stream's first byte within 1 ms of sync's.
#   2. print(1) executions/s and p50 latency, 8 streaming clients against
#      8 synchronous clients (keep-alive connections, every stream read to
#      its end), DURATION seconds each, REPS times, the order alternating.
#
# The server is started as bench/warm.sh starts its warm one: --exec-mode
# warm, --exec-queue 64 (8 clients never see 429) and
# --policy.standard.tenant-running 100% (the driver is one tenant, the
# admin key, so it may use every slot); its own --sandbox-uid range, from
# 302000, apart from warm.sh's and cells.sh's.
#
# Usage: bench/stream.sh [ROUNDS=50] [DURATION=5] [REPS=3]
#   INTERPD=path/to/interpd picks the build (default build-bench/interpd).
# Output also goes to $(dirname $INTERPD)/stream-results.txt.
source "$(dirname "$0")/lib.sh"

ROUNDS=${1:-50}
DURATION=${2:-5}
REPS=${3:-3}
OUT=$(dirname "$INTERPD")/stream-results.txt

bench_setup stream
chmod 711 "$WORK"   # mktemp -d makes it 0700; the sandbox uid must search it
exec > >(tee "$OUT") 2>&1
echo "# interpd issue 22 benchmark (streaming), $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
echo "# $INTERPD, commit $(git -C "$BENCH_ROOT" rev-parse --short HEAD 2>/dev/null)$(git -C "$BENCH_ROOT" diff --quiet HEAD 2>/dev/null || echo ' (dirty tree)')"
echo "# nproc $(nproc); $(lscpu | awk -F: '/Model name/ {gsub(/^ +/, "", $2); print $2}'); kernel $(uname -r); $(free -g | awk '/Mem:/ {print $2 " GiB RAM"}')"
echo "# load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
SERVER_NAME=warm start_server --exec-queue 64 \
    --policy.standard.tenant-running 100% --sandbox-uid 302000 \
    --exec-mode warm
# A warm server answers cold until its zygotes are ready: wait for them.
wait_modes "interpd warm=$PORT:$KEY"
"$PY" -B "$BENCH_ROOT/bench/stream.py" "$ROUNDS" "$DURATION" "$REPS" \
    "$PORT" "$KEY"
echo "# load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
