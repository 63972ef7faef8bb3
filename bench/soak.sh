#!/usr/bin/env bash
# bench/soak.sh - issue 20, item 11: the server's RSS under a long mixed load.
#
# Starts the built interpd on its defaults (SQLite and local blobs in a
# fresh data dir, warm execution mode) with URL ingest of loopback allowed
# (--fetch-allow 127.0.0.1/32: the driver serves the ingested file itself),
# --exec-queue 64 and --policy.standard.tenant-running 100% (one tenant,
# the admin key, whose users are the 16 clients: the usual bot deployment,
# as in bench/warm.sh), waits until /readyz says warm, then runs
# bench/soak.py: CLIENTS clients mixing uploads, lists, downloads, deletes,
# executions and URL ingests for SECONDS while it samples the server's RSS,
# smaps_rollup, threads, malloc arenas and magic.mgc mappings every SAMPLE
# seconds.  It prints RSS per minute, the
# max and the spread after STEADY_AFTER seconds; step-*.txt (smaps diffs of
# every rise of 2 MiB or more between two samples), samples.tsv and the
# server log are copied to build-bench/soak-<time>/.
#
# Usage: bench/soak.sh [SECONDS=360] [CLIENTS=16] [SAMPLE=2]
#                      [STEADY_AFTER=180] [extra interpd serve options...]
#   INTERPD=path/to/interpd picks the build (default build-bench/interpd).
source "$(dirname "$0")/lib.sh"

SECONDS_=${1:-360}
CLIENTS=${2:-16}
SAMPLE=${3:-2}
STEADY_AFTER=${4:-180}
shift $(($# < 4 ? $# : 4))
OUT=$(dirname "$INTERPD")/soak-$(date -u +%Y%m%dT%H%M%S)
mkdir -p "$OUT"

bench_setup soak
chmod 711 "$WORK"   # mktemp -d makes it 0700; the sandbox uid must search it
exec > >(tee "$OUT/soak.txt") 2>&1
echo "# interpd soak (issue 20 item 11), $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
echo "# $INTERPD, commit $(git -C "$BENCH_ROOT" rev-parse --short HEAD 2>/dev/null)$(git -C "$BENCH_ROOT" diff --quiet HEAD 2>/dev/null || echo ' (dirty tree)')"
echo "# nproc $(nproc); kernel $(uname -r); $(ldd --version | head -1)"
echo "# load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
start_server --log-level info --fetch-allow 127.0.0.1/32 --exec-queue 64 \
    --policy.standard.tenant-running 100% --sandbox-uid 310000 "$@"
for _ in $(seq 600); do
    mode=$(curl -s "$BASE/readyz" |
        "$PY" -c 'import json,sys; print(json.load(sys.stdin).get("execution_mode", ""))' 2>/dev/null || true)
    [ "$mode" = warm ] && break
    "$PY" -c 'import select; select.select([], [], [], 0.1)'
done
echo "# execution_mode ${mode:-unknown}; VmRSS at start $(proc_kib "$SERVER_PID" VmRSS) KiB"
echo "# server log so far:"
grep -v " access " "$WORK/server.log" | sed 's/^/#   /'
rc=0
"$PY" -B "$BENCH_ROOT/bench/soak.py" "$OUT" 127.0.0.1 "$PORT" "$KEY" \
    "$SERVER_PID" "$SECONDS_" "$CLIENTS" "$SAMPLE" "$STEADY_AFTER" "$WORK/server.log" || rc=$?
echo "# load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
cp "$WORK/server.log" "$OUT/server.log"
echo "# results in $OUT"
exit $rc
