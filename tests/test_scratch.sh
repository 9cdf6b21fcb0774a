#!/bin/bash
# The suites leave nothing behind (testutil.h, cg_test_tmpdir): each case of
# tests/scratch_check.c writes files, a subdirectory and a read-only
# directory in its scratch directory, then passes, fails an assertion, is
# killed (SIGTERM as meson's timeout sends it, SIGKILL) or crashes; in fork
# mode and with CK_FORK=no, $TMPDIR must be empty after each (checked
# fixtures' teardowns do not run after a failure in fork mode: a suite's
# directories were left in /tmp). And no test source names a file in /tmp
# (TMPDIR is honoured).
# usage: test_scratch.sh PATH/TO/scratch_check SOURCE_ROOT
set -uo pipefail
prog=$(realpath "$1")
src=$2
. "$(dirname "$0")/shell_lib.sh" scratch

# TMPDIR ($1) empty within 30 s (the watcher removes it after the process
# ends; a loaded machine starves a nice 19 run for seconds: 5 s was close)
empty_after() {
  local name=$1 t=$2 i
  for i in $(seq 300); do
    [ -z "$(ls -A "$t")" ] && { echo "ok: $name: nothing left"; return; }
    sleep 0.1
  done
  fail "$name: left $(cd "$t" && find . | head -5 | tr '\n' ' ')"
  chmod -R u+w "$t"
}

for fork in yes no; do
  for case in passes fails crashes; do
    t=$dir/t_${fork}_$case
    mkdir "$t"
    rc=0
    CK_FORK=$fork CK_RUN_CASE=$case TMPDIR=$t timeout 60 "$prog" >out.txt 2>&1 || rc=$?
    grep -q "^scratch: $t/cg_scratch_check\." out.txt || fail "$fork/$case: no scratch line in $t: $(cat out.txt)"
    case $case in
      passes) [ "$rc" = 0 ] || fail "$fork/$case: exit $rc: $(cat out.txt)" ;;
      *) [ "$rc" != 0 ] || fail "$fork/$case: exit 0: $(cat out.txt)" ;;
    esac
    empty_after "$fork/$case" "$t"
  done
  for sig in TERM KILL; do
    t=$dir/t_${fork}_$sig
    mkdir "$t"
    # its own process group, as meson starts a test; its own output file
    # (the background job truncates it, maybe after the loop's first read:
    # a shared one still held the previous case's line)
    out=out_${fork}_$sig.txt
    CK_FORK=$fork CK_RUN_CASE=waits TMPDIR=$t setsid "$prog" >"$out" 2>&1 &
    pid=$!
    # up to 60 s, as the other cases' timeout (a loaded machine)
    for i in $(seq 600); do grep -qs waiting "$out" && break; sleep 0.1; done
    grep -qs waiting "$out" || fail "$fork/$sig: did not start: $(cat "$out")"
    kill -"$sig" -- -"$pid" 2>/dev/null || kill -"$sig" "$pid"
    wait "$pid"
    # Check's forked child has a process group of its own: a SIGKILL of the
    # runner's group leaves it running (it ends its test, then the watcher
    # removes the directory); this one would wait for ever
    child=$(sed -n 's/^waiting //p' "$out")
    [ -n "$child" ] && [ "$child" != "$pid" ] && kill -KILL "$child" 2>/dev/null
    empty_after "$fork/SIG$sig" "$t"
  done
done

# no test source names a path in /tmp: their files go in cg_test_tmpdir()
if hits=$(grep -n '"/tmp/' "$src"/tests/*.c "$src"/tests/*.cc); then
  fail "a fixed /tmp path in a test: $hits"
else
  echo "ok: no test names /tmp"
fi
finish
