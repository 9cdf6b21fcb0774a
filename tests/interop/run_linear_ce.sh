#!/bin/sh
# meson test: the fused linear cross-entropy against PyTorch's
# F.cross_entropy(h @ w.T + b, ...), fp32 and bf16 (issue 37). Exits 77
# (skipped) when /usr/bin/python3 has no torch.
set -e
exe=$1; script=$2; out=$3
mkdir -p "$out"
/usr/bin/python3 "$script" "$out" || exit $?
exec "$exe" "$out/linear_ce.safetensors"
