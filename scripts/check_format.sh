#!/usr/bin/env bash
# Checks that C sources follow .clang-format (clang-format --dry-run
# --Werror): every tracked *.c, *.h and *.cc, or the files given.
#   scripts/check_format.sh [FILE...]     exit 0: formatted; 1: the files that are not
#   scripts/check_format.sh --fix [FILE...]   rewrite them in place instead
# Needs clang-format (apt-get install clang-format).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
fix=0
if [ "${1:-}" = "--fix" ]; then fix=1; shift; fi
command -v clang-format >/dev/null ||
  { echo "check_format: clang-format not found (apt-get install clang-format)" >&2; exit 2; }
if [ $# -gt 0 ]; then files=("$@"); else
  mapfile -t files < <(git ls-files '*.c' '*.h' '*.cc')
fi
if [ $fix = 1 ]; then
  clang-format -i --style=file "${files[@]}"
  exit 0
fi
bad=()
for f in "${files[@]}"; do
  clang-format --dry-run --Werror --style=file "$f" >/dev/null 2>&1 || bad+=("$f")
done
if [ ${#bad[@]} -gt 0 ]; then
  printf 'check_format: not formatted (scripts/check_format.sh --fix FILE shows the fix):\n' >&2
  printf '  %s\n' "${bad[@]}" >&2
  exit 1
fi
echo "check_format: ${#files[@]} files formatted"
