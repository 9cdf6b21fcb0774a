#!/bin/sh
# meson test: cgrad's public ops against PyTorch on random cases (strided,
# broadcast, size-0 and 0-d inputs, every dtype, special values; forward
# and gradients). Exits 77 (skipped) when /usr/bin/python3 has no torch.
set -e
# (a fourth argument: the file the script writes, op_cases.safetensors
# unless given)
exe=$1; script=$2; out=$3; file=${4:-op_cases.safetensors}
mkdir -p "$out"
/usr/bin/python3 "$script" "$out" || exit $?
exec "$exe" "$out/$file"
