#!/bin/sh
# meson tests example_NAME_torch: a C example and its PyTorch twin
# (examples/NAME.c and NAME.py) start from the same weights (the C side
# draws them from PyTorch's generator, cg_mt19937, in the order of the
# twin's constructors) and take the same batches, so the losses of their
# first STEPS steps (AdamW, gradient clipping) must agree: at most TOL
# apart, relative. Both get --steps STEPS and ARGS (a path among them
# absolute: the twin runs in a directory of its own) and print
# `step N loss X` lines.
# Exits 77 (skipped) when /usr/bin/python3 has no torch.
#   run_twin.sh EXAMPLE TWIN_PY STEPS TOL [ARGS...]
set -eu
exe=$1; py=$2; steps=$3; tol=$4
shift 4
/usr/bin/python3 -c "import torch" 2>/dev/null || { echo "no torch in /usr/bin/python3: skipped"; exit 77; }
dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT
OMP_NUM_THREADS=1 "$exe" --steps "$steps" "$@" >"$dir/c.out" || { echo "FAIL: $exe"; cat "$dir/c.out"; exit 1; }
(cd "$dir" && OMP_NUM_THREADS=1 /usr/bin/python3 "$py" --steps "$steps" "$@" >py.out) ||
  { echo "FAIL: $py"; exit 1; }
grep '^step' "$dir/c.out" >"$dir/c.steps"; grep '^step' "$dir/py.out" >"$dir/py.steps"
paste "$dir/c.steps" "$dir/py.steps" | awk -v n="$steps" -v tol="$tol" '
  { if ($2 != $6) { print "FAIL: step " $2 " against step " $6; bad = 1; exit }
    d = $4 - $8; d = d < 0 ? -d : d; r = d / ($8 < 0 ? -$8 : $8)
    if (rows == 0 || r > worst) { worst = r; at = $2 }
    rows++ }
  END { if (bad) exit 1
        if (rows != n) { print "FAIL: " rows " steps compared, expected " n; exit 1 }
        printf "%d steps: worst relative difference %.2g at step %d (tolerance %g)\n", rows, worst, at, tol
        if (worst > tol) { print "FAIL: the losses differ"; exit 1 } }'
