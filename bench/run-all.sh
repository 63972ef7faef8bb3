#!/usr/bin/env bash
# bench/run-all.sh - run every benchmark of issue 2 by hand (never part of
# the test suite).  Builds build-bench/interpd (Release) first unless
# NO_BUILD=1.  Each benchmark starts and stops its own server with a temp
# data dir under build-bench/bench-tmp (same disk as /work) and cleans up.
#
# Usage: bench/run-all.sh            (output also saved to build-bench/bench-results.txt)
set -uo pipefail
cd "$(dirname "$0")/.."

if [ -z "${NO_BUILD:-}" ]; then
    cmake -S . -B build-bench -DCMAKE_BUILD_TYPE=Release >/dev/null &&
        cmake --build build-bench -j2 --target interpd bench_meta_latency >/dev/null ||
        { echo "build failed" >&2; exit 1; }
fi

OUT=build-bench/bench-results.txt
{
    echo "# interpd benchmarks, $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
    echo "# commit $(git rev-parse --short HEAD 2>/dev/null)$(git diff --quiet 2>/dev/null || echo ' (dirty tree)')"
    echo "# nproc $(nproc); $(lscpu | awk -F: '/Model name/ {gsub(/^ +/, "", $2); print $2}')"
    free -h | sed 's/^/# /'
    df -h build-bench | sed 's/^/# /'
    status=0
    for b in upload_throughput upload_rss list_latency meta_latency blob_throughput exec_latency warm cells stream calls; do
        echo
        echo "## $b (load average before: $(cut -d' ' -f1-3 /proc/loadavg))"
        bench/$b.sh || { echo "## $b FAILED (exit $?)"; status=1; }
    done
    echo
    echo "# load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
    exit $status
} 2>&1 | tee "$OUT"
exit "${PIPESTATUS[0]}"
