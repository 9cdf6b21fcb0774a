#!/bin/sh
# meson test: a gated feed-forward (SwiGLU, GEGLU) and a pre-norm block with
# one, against PyTorch's hand-written w2(F.silu(w1(x)) * w3(x)), its weights
# loaded by name (tests/interop/swiglu.py). Exits 77 (skipped) when
# /usr/bin/python3 has no torch or numpy.
set -e
exe=$1; script=$2; out=$3
mkdir -p "$out"
/usr/bin/python3 "$script" "$out" || exit $?
exec "$exe" "$out"
