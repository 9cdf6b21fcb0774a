#!/bin/sh
# meson test: safetensors files PyTorch writes in bf16, f16, int64, int32 and
# bool load in cgrad with the values PyTorch reads. Exits 77 (skipped) when
# /usr/bin/python3 has no torch.
set -e
exe=$1; script=$2; out=$3
mkdir -p "$out"
/usr/bin/python3 "$script" "$out" || exit $?
exec "$exe" "$out"
