#!/bin/sh
# meson test example_gru_torch: examples/gru.c and its PyTorch twin
# examples/gru.py start from the same weights (gru.c draws them from
# PyTorch's generator, in nn.Embedding, nn.GRU, nn.Linear's order) and take
# the same windows of the text, so the losses of their first STEPS steps
# (AdamW, gradient clipping) must agree: at most TOL apart, relative.
# Exits 77 (skipped) when /usr/bin/python3 has no torch.
#   run_gru.sh EXAMPLE GRU_PY STEPS TOL
set -eu
exe=$1; py=$2; steps=$3; tol=$4
/usr/bin/python3 -c "import torch" 2>/dev/null || { echo "no torch in /usr/bin/python3: skipped"; exit 77; }
dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT
OMP_NUM_THREADS=1 "$exe" --steps "$steps" >"$dir/c.out" || { echo "FAIL: $exe"; cat "$dir/c.out"; exit 1; }
(cd "$dir" && OMP_NUM_THREADS=1 /usr/bin/python3 "$py" --steps "$steps" >py.out) ||
  { echo "FAIL: $py"; exit 1; }
grep '^step' "$dir/c.out" >"$dir/c.steps"; grep '^step' "$dir/py.out" >"$dir/py.steps"
paste "$dir/c.steps" "$dir/py.steps" | awk -v n="$steps" -v tol="$tol" '
  { if ($2 != $6) { print "FAIL: step " $2 " against step " $6; bad = 1; exit }
    d = $4 - $8; d = d < 0 ? -d : d; r = d / ($8 < 0 ? -$8 : $8)
    if (r > worst) { worst = r; at = $2 }
    rows++ }
  END { if (bad) exit 1
        if (rows != n) { print "FAIL: " rows " steps compared, expected " n; exit 1 }
        printf "%d steps: worst relative difference %.2g at step %d (tolerance %g)\n", rows, worst, at, tol
        if (worst > tol) { print "FAIL: the losses differ"; exit 1 } }'
