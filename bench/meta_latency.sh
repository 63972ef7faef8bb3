#!/usr/bin/env bash
# bench/meta_latency.sh - issue 3: per-operation latency of the metadata
# stores (insert with quota, get, list 50 of 1,000, delete), SQLite and
# MongoDB in the same run, with the ratio of the medians.  The MongoDB
# server comes from tests/support/mongo-server.sh ($MONGODB_URI, mongod, or
# FerretDB).
#
# Usage: bench/meta_latency.sh [N]   (default N=300 operations of each kind)
source "$(dirname "$0")/lib.sh"
N=${1:-300}
BIN=$BENCH_ROOT/build-bench/bench/bench_meta_latency
[ -x "$BIN" ] || die "$BIN not built (bench/run-all.sh builds it)"
bench_setup meta_latency
MSTATE="$WORK/mongo"
"$BENCH_ROOT/tests/support/mongo-server.sh" start "$MSTATE" >&2
trap '"$BENCH_ROOT/tests/support/mongo-server.sh" stop "$MSTATE" >/dev/null 2>&1; bench_cleanup' EXIT
echo "# mongodb: $(cat "$MSTATE/kind") at $(cat "$MSTATE/uri")"
"$BIN" "$WORK" "$(cat "$MSTATE/uri")bench_meta_$$" "$N"
