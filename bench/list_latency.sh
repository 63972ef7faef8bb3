#!/usr/bin/env bash
# bench/list_latency.sh - issue 2, benchmark 3.
#
# Latency of GET /v1/files (default limit 50) for a user with 1,000 files:
# wrk, 50 connections, 2 threads, 10 s, --latency, headers set by a Lua
# script. Baseline in the same run: GET /healthz (no auth, no DB), same
# settings. Target: p99 < 10 ms.
#
# Usage: bench/list_latency.sh [FILES] [DURATION]   (default 1000 10s)
source "$(dirname "$0")/lib.sh"

FILES=${1:-1000}
DURATION=${2:-10s}
WRK_ARGS=(-t2 -c50 -d"$DURATION" --latency)
bench_setup list_latency
start_server --quota-files -1 --quota-bytes -1
USER_ID=lister

# --- populate: small raw uploads, 8 in parallel ----------------------------
t0=$(date +%s%N)
seq 1 "$FILES" | xargs -P 8 -I{} curl -sS -o /dev/null -w '%{http_code}\n' \
    -H "Authorization: Bearer $KEY" -H "X-User-Id: $USER_ID" \
    -H "Content-Type: application/octet-stream" \
    --data-binary "small file {} for the list benchmark" \
    "$BASE/v1/files?filename=f{}.txt" >"$WORK/codes"
t1=$(date +%s%N)
created=$(grep -c '^201$' "$WORK/codes" || true)
echo "# populated $created/$FILES files in $(awk -v n=$((t1 - t0)) 'BEGIN {printf "%.1f", n / 1e9}') s"
[ "$created" = "$FILES" ] || { sort "$WORK/codes" | uniq -c; die "populate failed"; }

# Sanity: the request the benchmark makes really lists 50 files.
n=$(curl -sS -H "Authorization: Bearer $KEY" -H "X-User-Id: $USER_ID" "$BASE/v1/files" |
    $PY -c 'import json,sys; d=json.load(sys.stdin); print(len(d["files"]), "next_cursor" if d["next_cursor"] else "no-cursor")')
echo "# GET /v1/files returns: $n"

cat >"$WORK/auth.lua" <<LUA
wrk.method = "GET"
wrk.headers["Authorization"] = "Bearer $KEY"
wrk.headers["X-User-Id"] = "$USER_ID"
LUA

# to_ms VALUE: wrk prints 812.00us / 1.23ms / 1.02s / 2.00m
to_ms() {
    awk -v v="$1" 'BEGIN {
        if (v ~ /us$/) { sub(/us$/, "", v); printf "%.3f", v / 1000 }
        else if (v ~ /ms$/) { sub(/ms$/, "", v); printf "%.3f", v }
        else if (v ~ /m$/) { sub(/m$/, "", v); printf "%.3f", v * 60000 }
        else if (v ~ /s$/) { sub(/s$/, "", v); printf "%.3f", v * 1000 }
        else print "nan" }'
}
# run_wrk NAME URL [wrk args...]: sets NAME_p50/_p90/_p99/_rps, prints wrk output.
run_wrk() {
    local name=$1 url=$2; shift 2
    local out="$WORK/wrk.$name.txt"
    wrk "${WRK_ARGS[@]}" "$@" "$url" >"$out"
    sed 's/^/#   /' "$out"
    local p50 p90 p99 rps
    p50=$(awk '$1 == "50%" {print $2}' "$out")
    p90=$(awk '$1 == "90%" {print $2}' "$out")
    p99=$(awk '$1 == "99%" {print $2}' "$out")
    rps=$(awk '$1 == "Requests/sec:" {print $2}' "$out")
    printf -v "${name}_p50" '%s' "$(to_ms "$p50")"
    printf -v "${name}_p90" '%s' "$(to_ms "$p90")"
    printf -v "${name}_p99" '%s' "$(to_ms "$p99")"
    printf -v "${name}_rps" '%s' "$rps"
    if grep -qE 'Non-2xx|Socket errors' "$out"; then
        echo "# WARNING ($name): $(grep -E 'Non-2xx|Socket errors' "$out" | tr '\n' ' ')"
    fi
}

cpu_ticks() { awk '{print $14 + $15}' "/proc/$SERVER_PID/stat"; }
TCK=$(getconf CLK_TCK)

echo "# wrk GET /healthz (baseline)"
run_wrk health "$BASE/healthz"
echo "# wrk GET /v1/files"
c0=$(cpu_ticks)
run_wrk list "$BASE/v1/files" -s "$WORK/auth.lua"
c1=$(cpu_ticks)
LIST_CPU=$(awk -v c=$((c1 - c0)) -v t="$TCK" 'BEGIN {printf "%.1f", c / t}')

# Diagnostic (not the target): one connection, so no queueing; this is
# roughly the service time of one request.
echo "# wrk GET /v1/files, 1 connection (diagnostic)"
WRK_ARGS=(-t1 -c1 -d5s --latency)
run_wrk single "$BASE/v1/files" -s "$WORK/auth.lua"

RATIO=$(awk -v a="$list_p99" -v b="$health_p99" 'BEGIN {printf "%.1f", a / b}')
MET=$(awk -v p="$list_p99" 'BEGIN {print (p < 10) ? "met" : "NOT met"}')
DB=$(du -k "$WORK/data/meta.db" | cut -f1)
echo "list_latency: $FILES files, wrk -t2 -c50 -d$DURATION --latency, meta.db ${DB} KiB"
echo "list_latency: GET /v1/files  p50 ${list_p50} ms  p90 ${list_p90} ms  p99 ${list_p99} ms  ${list_rps} req/s  (server CPU during run ${LIST_CPU} s)"
echo "list_latency: GET /healthz   p50 ${health_p50} ms  p90 ${health_p90} ms  p99 ${health_p99} ms  ${health_rps} req/s"
echo "list_latency: diagnostic, 1 connection: GET /v1/files p50 ${single_p50} ms  p99 ${single_p99} ms  ${single_rps} req/s"
echo "list_latency: p99 ratio list/healthz ${RATIO}"
echo "list_latency: p99 ${list_p99} ms (target < 10 ms: $MET)"
