#!/bin/sh
# meson test: PyTorch's nn.Transformer* state dicts load into cgrad's layers
# with PyTorch's outputs, and cgrad's weights saved under PyTorch's names
# load into PyTorch (strict) with cgrad's outputs (nn/torch_names.h).
# Exits 77 (skipped) when /usr/bin/python3 has no torch or numpy.
set -e
exe=$1; script=$2; out=$3
mkdir -p "$out"
/usr/bin/python3 "$script" make "$out" || exit $?
"$exe" "$out" $(cat "$out/cases")
exec /usr/bin/python3 "$script" check "$out"
