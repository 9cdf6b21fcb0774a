#!/bin/sh
# meson test: export checkpoints with cgrad, load them in PyTorch, compare logits.
# Exits 77 (skipped) when /usr/bin/python3 has no torch.
set -e
exe=$1; script=$2; out=$3
mkdir -p "$out"
"$exe" "$out"
exec /usr/bin/python3 "$script" "$out"
