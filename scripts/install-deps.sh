#!/usr/bin/env bash
# Install what interpd needs to build, run and test, from Debian 12's
# packages and, for the tests, npm.  Idempotent; uses sudo when not root.
#   scripts/install-deps.sh            everything (README command 2, CI)
#   scripts/install-deps.sh --service  only what building and running the
#                                      service needs (README command 1)
set -euo pipefail

# Building and running the service (check-docker.py reads this list: its
# -dev packages for the image's build stage, its python3-* for the
# runtime stage).
packages=(
  build-essential cmake pkg-config
  libmicrohttpd-dev libjansson-dev libmagic-dev libmagic-mgc libsqlite3-dev
  libcurl4-openssl-dev libssl-dev libseccomp-dev libmongoc-dev libbson-dev
  python3 python3-venv python3-numpy python3-pandas python3-matplotlib
  python3-scipy python3-openpyxl python3-pil python3-yaml
  # the data stack a chat bot's code imports (issue 26; DEPLOYMENT.md,
  # "The data stack"): importable with no package index, listed by
  # GET /v1/packages.  Not wordcloud: Debian's pulls texlive-fonts-extra
  # (485 MiB) for one font.
  python3-seaborn python3-sklearn python3-statsmodels python3-plotly
  python3-networkx python3-xlsxwriter python3-tabulate python3-bs4
  python3-docx python3-reportlab python3-skimage python3-opencv
  python3-xarray python3-pypdf python3-sympy
  curl   # README's "Try it"
)
# The test suite and the benchmarks besides.
test_packages=(
  clang clang-format libclang-rt-14-dev
  python3-ipykernel python3-jupyter-client   # bench/warm.sh, baseline C
  python3-pip   # ctest clients/python pip-installs clients/python (offline)
  python3-discord   # ctest clients/discord: examples/discord_bot.py's discord.py
  wrk nodejs rsync   # rsync: tests/mutants/run.sh
  chromium   # ctest clients/console drives it with playwright-core
)
case "${1:-}" in
  --service) service_only=true ;;
  "") service_only=false ;;
  *) echo "usage: $0 [--service]" >&2; exit 2 ;;
esac
if ! $service_only; then
  packages+=("${test_packages[@]}")
  # npm comes with NodeSource's nodejs (which conflicts with Debian's
  # npm); with Debian's nodejs it is a package of its own.
  if ! command -v npm >/dev/null 2>&1; then packages+=(npm); fi
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages present"
else
  echo "install-deps: installing ${missing[*]}"
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

$service_only && exit 0

# The npm packages of the tests, each folder pinned by its package.json and
# package-lock.json: the OpenAPI linter (ctest unit/openapi_lint), the
# EventSource client (ctest clients/sse) and the MCP SDK's client (ctest
# clients/mcp).  A folder is skipped when the
# installed version is already the pinned one.
npm_pinned() { # FOLDER PACKAGE FILE-IN-NODE_MODULES
  local dir want have
  dir="$(cd "$(dirname "$0")/.." && pwd)/$1"
  want="$(sed -n "s|.*\"$2\": *\"\([^\"]*\)\".*|\1|p" "$dir/package.json")"
  have="$(sed -n '/^ *"version":/{s/^ *"version": *"\([^"]*\)".*/\1/p;q}' \
    "$dir/node_modules/$2/package.json" 2>/dev/null || true)"
  if [ -n "$want" ] && [ "$have" = "$want" ] && [ -e "$dir/node_modules/$3" ]; then
    echo "install-deps: $2 $have present"
  else
    echo "install-deps: npm ci in $dir ($2 $want)"
    npm ci --prefix "$dir" --no-audit --no-fund --loglevel=error
  fi
}
npm_pinned tests/support/openapi @redocly/cli .bin/redocly
npm_pinned tests/support/sse eventsource eventsource/dist/index.js
npm_pinned tests/support/mcp @modelcontextprotocol/sdk \
  @modelcontextprotocol/sdk/dist/esm/client/streamableHttp.js
# The web console's bundler and editor (scripts/build-console.sh; ctest
# unit/console_bundle rebuilds the committed bundle and compares), and the
# browser driver of ctest clients/console.
npm_pinned clients/console esbuild .bin/esbuild
npm_pinned tests/support/console playwright-core playwright-core/index.mjs
