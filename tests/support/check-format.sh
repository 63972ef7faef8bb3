#!/usr/bin/env bash
# check-format.sh SRC_ROOT: every C source and header of the project is as
# clang-format (the .clang-format at the root) lays it out
# (`clang-format --dry-run -Werror`).  Fails, naming the first lines that
# differ, when one is not; fails too when clang-format is missing
# (scripts/install-deps.sh installs it): never a silent pass.
# To fix a file: clang-format -i FILE.
set -euo pipefail
root=${1:?usage: check-format.sh SRC_ROOT}
cd "$root"
if ! command -v clang-format >/dev/null; then
  echo "check-format: clang-format is not installed (scripts/install-deps.sh)" >&2
  exit 1
fi
mapfile -d '' files < <(find api service storage venv scheduler tests bench examples \
  \( -name '*.c' -o -name '*.h' \) -not -path 'tests/fuzz/corpus/*' -print0 2>/dev/null | sort -z)
[ ${#files[@]} -gt 0 ] || { echo "check-format: no C source under $root" >&2; exit 1; }
if ! clang-format --dry-run -Werror "${files[@]}" 2>"${TMPDIR:-/tmp}/check-format.$$"; then
  grep -m 20 'error:' "${TMPDIR:-/tmp}/check-format.$$" >&2 || true
  n=$(grep -c 'error:' "${TMPDIR:-/tmp}/check-format.$$" || true)
  rm -f "${TMPDIR:-/tmp}/check-format.$$"
  echo "check-format: $n place(s) differ from clang-format's layout; run clang-format -i on the files named" >&2
  exit 1
fi
rm -f "${TMPDIR:-/tmp}/check-format.$$"
echo "check-format: ${#files[@]} files as clang-format lays them out"
