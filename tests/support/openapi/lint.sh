#!/usr/bin/env bash
# Lint docs/openapi.json with the Redocly CLI pinned in package.json
# (ctest: unit/openapi_lint).  Fails on any error or warning, and fails
# loudly, never skips, when the linter is not installed: run
# scripts/install-deps.sh.  Rules and explained exceptions: redocly.yaml and
# .redocly.lint-ignore.yaml in this folder.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../../.." && pwd)"
redocly="$here/node_modules/.bin/redocly"
want="$(sed -n 's/.*"@redocly\/cli": *"\([^"]*\)".*/\1/p' "$here/package.json")"
if [ ! -x "$redocly" ]; then
  echo "openapi_lint: FAIL: $redocly is missing; run scripts/install-deps.sh" >&2
  exit 1
fi
# No telemetry, no update check: the test must not talk to the network.
export REDOCLY_TELEMETRY=off REDOCLY_SUPPRESS_UPDATE_NOTICE=true NO_COLOR=1
have="$("$redocly" --version)"
if [ "$have" != "$want" ]; then
  echo "openapi_lint: FAIL: installed @redocly/cli is $have, package.json pins $want; run scripts/install-deps.sh" >&2
  exit 1
fi
status=0
out="$(cd "$here" && "$redocly" lint "$root/docs/openapi.json" \
  --config "$here/redocly.yaml" --format stylish --max-problems 1000 2>&1)" || status=$?
printf '%s\n' "$out"
if [ "$status" -ne 0 ]; then
  echo "openapi_lint: FAIL: redocly lint exited $status" >&2
  exit 1
fi
if printf '%s\n' "$out" | grep -Eq '^[[:space:]]*[0-9]+:[0-9]+[[:space:]]+(error|warning)'; then
  echo "openapi_lint: FAIL: warnings left (fix them, or explain them in .redocly.lint-ignore.yaml)" >&2
  exit 1
fi
if ! printf '%s\n' "$out" | grep -q 'Your API description is valid'; then
  echo "openapi_lint: FAIL: redocly did not report the document valid" >&2
  exit 1
fi
echo "openapi_lint: ok (@redocly/cli $have)"
