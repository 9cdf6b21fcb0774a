#!/bin/sh
# meson test: PyTorch's default initialisation (nn.Linear, nn.Embedding,
# nn.LayerNorm, nn.MultiheadAttention, the Transformer layers) from
# cg_mt19937 equals what torch.manual_seed gives. Exits 77 (skipped) when
# /usr/bin/python3 has no torch.
set -e
exe=$1; script=$2; out=$3
mkdir -p "$out"
/usr/bin/python3 "$script" "$out" || exit $?
exec "$exe" "$out"
