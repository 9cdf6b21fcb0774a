#!/bin/sh
# meson test: a module with buffers saved by cgrad loads into the same
# PyTorch module with load_state_dict(strict=True), and PyTorch's state dict
# loads back strictly. Exits 77 (skipped) when /usr/bin/python3 has no torch.
set -e
exe=$1; script=$2; out=$3
mkdir -p "$out"
"$exe" write "$out"
/usr/bin/python3 "$script" "$out" || exit $?
exec "$exe" read "$out"
