#!/usr/bin/env bash
# bench/cells.sh - issue 26, item 4: the cells a chat bot writes after a
# user uploads a CSV (bench/cells/NN-name.py: pandas, numpy, PIL, openpyxl,
# matplotlib, scipy, sympy, seaborn, scikit-learn, statsmodels, plotly, an
# Excel and a JSON upload, a failing cell, a long print), timed in one run,
# contestants interleaved (driver: bench/cells.py):
#
#   warm      interpd --exec-mode warm $WARM_OPTS, one execution per cell
#   cold      a second interpd, --exec-mode cold $COLD_OPTS
#   session   one session on the warm server, every cell a call in it
#   Jupyter   a Jupyter kernel (Debian's python3-ipykernel, jupyter_client;
#             no sandbox, no HTTP) with a load_file shim over the same files
#
# plus interpd warm print(1) in the same rounds: the issue's budget for a
# cell is warm print(1) p50 + 1.5 x the kernel's p50 of that cell.
# Both servers run with --policy.standard.tenant-running 100% (the driver is
# one tenant, as in bench/warm.sh) and without file quotas (every run stores
# its charts, workbooks and HTML: rounds x cells files for one user).
#
# Usage: bench/cells.sh [ROUNDS=10] [WARMUP=3]
#   WARMUP untimed rounds of every cell on every contestant (they also let
#   an adaptive warm set adapt), then ROUNDS timed rounds.
#   WARM_OPTS='--warm-adapt-runs 20' adds interpd serve options to the warm
#   server (COLD_OPTS to the cold one); CELLS=09,10 runs only the cells whose
#   names start so; INTERPD=path/to/interpd picks the build (default
#   build-bench/interpd).
# Output also goes to $(dirname $INTERPD)/cells-results.txt.
source "$(dirname "$0")/lib.sh"

ROUNDS=${1:-10}
WARMUP=${2:-3}
WARM_OPTS=${WARM_OPTS:-}
COLD_OPTS=${COLD_OPTS:-}
OUT=$(dirname "$INTERPD")/cells-results.txt

"$PY" -c 'import jupyter_client, ipykernel, pandas, matplotlib, PIL, openpyxl, scipy, sympy, seaborn, sklearn, statsmodels, plotly' 2>/dev/null ||
    die "needs python3-jupyter-client, -ipykernel and the data stack (-pandas, -matplotlib, -pil, -openpyxl, -scipy, -sympy, -seaborn, -sklearn, -statsmodels, -plotly)"

bench_setup cells
chmod 711 "$WORK"   # mktemp -d makes it 0700; the sandbox uid must search it
exec > >(tee "$OUT") 2>&1
echo "# interpd issue 26 cell set, $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
echo "# $INTERPD, commit $(git -C "$BENCH_ROOT" rev-parse --short HEAD 2>/dev/null)$(git -C "$BENCH_ROOT" diff --quiet HEAD 2>/dev/null || echo ' (dirty tree)')"
echo "# nproc $(nproc); $(lscpu | awk -F: '/Model name/ {gsub(/^ +/, "", $2); print $2}'); kernel $(uname -r); $(free -g | awk '/Mem:/ {print $2 " GiB RAM"}')"
echo "# load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
common=(--exec-queue 64 --policy.standard.tenant-running 100%
    --quota-files -1 --quota-bytes -1)
read -ra wopts <<<"$WARM_OPTS"
read -ra copts <<<"$COLD_OPTS"
SERVER_NAME=warm start_server "${common[@]}" --sandbox-uid 300000 \
    --exec-mode warm "${wopts[@]}"
warm="warm=$PORT:$KEY"
SERVER_NAME=cold start_server "${common[@]}" --sandbox-uid 301000 \
    --exec-mode cold "${copts[@]}"
cold="cold=$PORT:$KEY"
# A warm server answers cold until its zygotes are ready: wait for them.
wait_modes "interpd $warm" "interpd $cold"
# PATH: the kernel and anything the driver starts by name get Debian's
# python, not the pyenv shim first on PATH.
PATH=/usr/bin:/bin:$PATH "$PY" -B "$BENCH_ROOT/bench/cells.py" "$WORK" \
    "$ROUNDS" "$WARMUP" "$warm" "$cold"
echo "# load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
