#!/usr/bin/env bash
# bench/upload_rss.sh - issue 2, benchmark 2.
#
# Peak RSS growth of the server during ten parallel 50 MiB raw uploads:
# VmRSS before the uploads vs VmHWM (the kernel's peak-RSS mark) after.
# Target: growth < 32 MiB.
#
# Usage: bench/upload_rss.sh [PARALLEL]    (default 10)
source "$(dirname "$0")/lib.sh"

P=${1:-10}
SIZE_MIB=50
bench_setup upload_rss

SRC="$WORK/src.bin"
head -c $((SIZE_MIB * 1024 * 1024)) /dev/urandom >"$SRC"
cat "$SRC" >/dev/null

start_server --quota-files -1 --quota-bytes -1 --max-file-size 50M

# One small request first so lazily-initialised state (DB connection,
# libmagic, TLS-free HTTP buffers) is part of the baseline, not the growth.
curl -sS -o /dev/null -H "Authorization: Bearer $KEY" -H "X-User-Id: warm" \
    --data-binary 'hello' "$BASE/v1/files?filename=warm.txt"

RSS0=$(proc_kib "$SERVER_PID" VmRSS)
HWM0=$(proc_kib "$SERVER_PID" VmHWM)
THR0=$(awk '$1 == "Threads:" {print $2}' "/proc/$SERVER_PID/status")

t0=$(date +%s%N)
pids=()
for i in $(seq 1 "$P"); do
    curl -sS -o "$WORK/up.$i.json" -w '%{http_code}\n' \
        -H "Authorization: Bearer $KEY" -H "X-User-Id: rss$i" \
        -H "Content-Type: application/octet-stream" \
        --data-binary @"$SRC" "$BASE/v1/files?filename=big$i.bin" >"$WORK/code.$i" &
    pids+=($!)
done
fail=0
for p in "${pids[@]}"; do wait "$p" || fail=1; done
t1=$(date +%s%N)

RSS1=$(proc_kib "$SERVER_PID" VmRSS)
HWM1=$(proc_kib "$SERVER_PID" VmHWM)
ok=$(cat "$WORK"/code.* | grep -c '^201$' || true)
[ "$ok" = "$P" ] && [ "$fail" = 0 ] || {
    echo "# WARNING: only $ok of $P uploads answered 201:"; cat "$WORK"/code.* | sort | uniq -c
    for i in $(seq 1 "$P"); do head -c 300 "$WORK/up.$i.json"; echo; done
}

mib() { awk -v k="$1" 'BEGIN {printf "%.1f", k / 1024}'; }
GROWTH=$(( HWM1 - RSS0 ))
MET=$(awk -v g="$GROWTH" 'BEGIN {print (g / 1024 < 32) ? "met" : "NOT met"}')
echo "upload_rss: $P parallel uploads of ${SIZE_MIB}MiB, $ok answered 201, wall $(awk -v n=$((t1 - t0)) 'BEGIN {printf "%.2f", n / 1e9}') s, server threads $THR0"
echo "upload_rss: before: VmRSS $(mib "$RSS0") MiB (VmHWM $(mib "$HWM0") MiB)"
echo "upload_rss: after:  VmRSS $(mib "$RSS1") MiB, VmHWM $(mib "$HWM1") MiB"
echo "upload_rss: peak growth (VmHWM after - VmRSS before) $(mib "$GROWTH") MiB (target < 32 MiB: $MET)"
