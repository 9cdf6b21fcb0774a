#!/usr/bin/env bash
# examples/ddp.c, a user's own model trained data-parallel on libcgrad-dist
# (meson suite 'models'):
#   1. one process trains and saves, its loss falls;
#   2. with MPI and mpirun: 2 ranks (each half of every global batch, the
#      gradients averaged by the reducer during backward) end with the
#      parameters of one process within 1e-5 (relative to each tensor's
#      largest value: ckpt_writer close), and so does the blocking average
#      (--blocking); without them only 1. runs.
#   test_example_ddp.sh EXAMPLE_DDP CKPT_WRITER [MPIRUN]
set -uo pipefail
ex=$(realpath "$1")
tool=$(realpath "$2")
mpirun=${3:-}
. "$(dirname "$0")/shell_lib.sh" example_ddp
TOL=1e-5
steps=(--steps 60)
"$ex" "${steps[@]}" --out one.st >one.out 2>one.err || fail "1 process: $(tail -3 one.err)"
first=$(awk '/^step/ {print $4; exit}' one.out)
last=$(awk '/^step/ {l = $4} END {print l}' one.out)
awk -v a="$first" -v b="$last" 'BEGIN {exit !(b < a)}' ||
  fail "1 process: the loss did not fall ($first to $last): $(cat one.out)"
[ -s one.st ] || fail "1 process: no one.st"
if [ -n "$mpirun" ]; then
  for mode in reducer blocking; do
    flag=()
    [ $mode = blocking ] && flag=(--blocking)
    "$mpirun" --allow-run-as-root --oversubscribe -np 2 -x OMP_NUM_THREADS=1 \
      -x CG_DIST_TIMEOUT=120 "$ex" "${steps[@]}" "${flag[@]}" --out two_$mode.st \
      >two_$mode.out 2>two_$mode.err || fail "2 ranks ($mode): $(tail -3 two_$mode.err)"
    grep -q '(2 rank(s))' two_$mode.out || fail "2 ranks ($mode): not 2 ranks: $(cat two_$mode.out)"
    if r=$("$tool" close two_$mode.st one.st $TOL 2>&1); then
      echo "ok: 2 ranks ($mode) vs 1 process: $r"
    else
      fail "2 ranks ($mode) vs 1 process: $r"
    fi
  done
else
  echo "no MPI or no mpirun: one process only"
fi
finish
