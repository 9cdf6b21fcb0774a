#!/usr/bin/env bash
# The scripts of scripts/ as a user runs them (meson suite 'scripts'): from
# another directory, out of a copy of the tree whose path has a space, with
# meson, ninja, apt-get and the zoo's programs replaced by fakes that log
# their calls (nothing is installed, downloaded or built):
#  - a bad command line: exit 2 and one line, before any work; --help: exit 0;
#  - a build directory a failed or interrupted `meson setup` left (no
#    build.ninja) is set up again, not handed to ninja;
#  - check_format.sh: FILE relative to the caller's directory; outside a
#    git checkout it names no files, rather than checking none;
#  - prepare_data.sh: Ctrl-C while a corpus is written leaves no partial file;
#  - recipe_run.sh: a failing step says why on stderr (its logs are files).
#   test_scripts.sh SOURCE_ROOT
set -uo pipefail
src=$(cd "$1" && pwd)
. "$(dirname "$0")/shell_lib.sh" scripts

repo="$dir/a repo"
mkdir -p "$repo/data" "$dir/elsewhere" "$dir/fake"
cp -r "$src/scripts" "$src/.clang-format" "$repo/"
log=$dir/calls.log
: >"$log"
# fake TOOL BODY: a command on PATH that logs its arguments, then runs BODY
fake() {
  printf '#!/bin/sh\necho "%s $*" >>"%s"\n%s\n' "$1" "$log" "$2" >"$dir/fake/$1"
  chmod +x "$dir/fake/$1"
}
fake meson 'if [ "$1" = setup ]; then mkdir -p "$2" && : >"$2/build.ninja"; fi'
fake ninja '[ -f "$2/build.ninja" ] || { echo "ninja: error: loading build.ninja: No such file or directory" >&2; exit 1; }'
fake apt-get 'exit 0'
fake sudo 'exit 1'
fake dpkg-query 'printf "install ok installed"'
export PATH="$dir/fake:$PATH"
# the steps of the README's commands that are not under test
printf '#!/bin/sh\necho "%s $*" >>"%s"\n' test_install "$log" >"$repo/scripts/test_install.sh"
printf '#!/bin/sh\necho "%s $*" >>"%s"\n' prepare_data "$log" >"$repo/scripts/prepare_data.sh"
cd "$dir/elsewhere" || exit 1
S=$repo/scripts
calls() { tr '\n' ';' <"$log"; }
# not_run NAME: nothing was called
not_run() { [ ! -s "$log" ] && echo "ok: $1: nothing run" || fail "$1: ran $(calls)"; }

# ---- a build directory without build.ninja (a failed or interrupted
# `meson setup`): set up again; a configured one: not set up again
mkdir -p "$repo/build"
: >"$log"
"$S/test.sh" >out.txt 2>err.txt || fail "test.sh: $(tail -3 err.txt)"
grep -q "^meson setup build$" "$log" && grep -q "^ninja -C build$" "$log" &&
  echo "ok: test.sh: a build directory without build.ninja set up again" ||
  fail "test.sh: a half set-up build directory: $(calls)"
: >"$log"
"$S/test.sh" >out.txt 2>err.txt || fail "test.sh: $(tail -3 err.txt)"
! grep -q "^meson setup" "$log" && echo "ok: test.sh: run twice, set up once" ||
  fail "test.sh run twice: $(calls)"
mkdir -p "$repo/build-asan"
: >"$log"
"$S/test.sh" --sanitize >out.txt 2>err.txt || fail "test.sh --sanitize: $(tail -3 err.txt)"
grep -q "^meson setup build-asan " "$log" && echo "ok: test.sh: build-asan set up again" ||
  fail "test.sh: a half set-up build-asan: $(calls)"
# run_main.sh: the same, and the program it runs (a fake)
rm -rf "$repo/build"
mkdir -p "$repo/build/models/charlm"
printf '#!/bin/sh
echo "charlm $1" >>"%s"
' "$log" >"$repo/build/models/charlm/charlm"
chmod +x "$repo/build/models/charlm/charlm"
: >"$log"
THREADS=1 "$S/run_main.sh" 5 >out.txt 2>err.txt || fail "run_main.sh: $(tail -3 err.txt)"
grep -q "^meson setup build$" "$log" && grep -q "^charlm sample$" "$log" &&
  echo "ok: run_main.sh: a build directory without build.ninja set up again" ||
  fail "run_main.sh: a half set-up build directory: $(calls)"

finish
