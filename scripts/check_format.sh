#!/usr/bin/env bash
# Checks that C sources follow .clang-format (clang-format --dry-run
# --Werror): every tracked *.c, *.h and *.cc, or the files given.
#   scripts/check_format.sh [FILE...]     exit 0: formatted; 1: the files that are not; 2: a file
#                                          unreadable or not a C source
#   scripts/check_format.sh --fix [FILE...]   rewrite them in place instead
# Needs clang-format (apt-get install clang-format).
set -euo pipefail
case "${1:-}" in -h | --help) echo "usage: scripts/check_format.sh [--fix] [FILE...]"; exit 0 ;; esac
root=$(cd "$(dirname "$0")/.." && pwd)
fix=0
if [ "${1:-}" = "--fix" ]; then fix=1; shift; fi
command -v clang-format >/dev/null ||
  { echo "check_format: clang-format not found (apt-get install clang-format)" >&2; exit 2; }
# the files given are the caller's (relative to its directory); the tree's
# tracked sources are the root's, and there must be some (a copy of the
# tree without .git once checked no file and passed)
# clang-format takes any file for C: a shell script given to --fix came
# back reflowed, without its execute bit
files=()
for f in "$@"; do
  case $f in
    *.c | *.h | *.cc) ;;
    *) echo "check_format: $f is not a C source (.c, .h or .cc)" >&2; exit 2 ;;
  esac
  case $f in /*) files+=("$f") ;; *) files+=("$PWD/$f") ;; esac
done
cd "$root"
if [ $# -eq 0 ]; then
  mapfile -t files < <(git ls-files '*.c' '*.h' '*.cc' 2>/dev/null || true)
  [ ${#files[@]} -gt 0 ] ||
    { echo "check_format: $root is not a git checkout: name the files to check" >&2; exit 2; }
fi
if [ $fix = 1 ]; then
  clang-format -i --style=file "${files[@]}"
  exit 0
fi
for f in "${files[@]}"; do
  [ -f "$f" ] && [ -r "$f" ] || { echo "check_format: cannot read $f" >&2; exit 2; }
done
# one clang-format for all the files (one a file took 30 s, nearly all of it
# start-up): the files not formatted are those its diagnostics name
bad=()
if ! out=$(clang-format --dry-run --Werror --style=file "${files[@]}" 2>&1 >/dev/null); then
  mapfile -t bad < <(sed -n 's/^\(.*\):[0-9]*:[0-9]*: error: code should be clang-formatted.*/\1/p' <<<"$out" | sort -u)
  # a failure that names no file (an unreadable one, a bad .clang-format): its message
  [ ${#bad[@]} -gt 0 ] || { printf 'check_format: clang-format failed: %s\n' "$(head -3 <<<"$out")" >&2; exit 1; }
fi
if [ ${#bad[@]} -gt 0 ]; then
  printf 'check_format: not formatted (scripts/check_format.sh --fix FILE shows the fix):\n' >&2
  printf '  %s\n' "${bad[@]}" >&2
  exit 1
fi
echo "check_format: ${#files[@]} files formatted"
