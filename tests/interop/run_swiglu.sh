#!/bin/sh
# meson tests torch_swiglu, torch_rope and torch_nanogpt: a PyTorch script
# writes its cases into OUT (swiglu.py: a gated feed-forward and a pre-norm
# block with one; rope.py: rotary and grouped-query self-attention;
# nanogpt.py: nanoGPT's GPT), then cgrad's checker reads them
# (check_swiglu, check_rope, check_nanogpt). Exits 77 (skipped) when /usr/bin/python3 has
# no torch or numpy.
#   run_swiglu.sh CHECKER SCRIPT OUT
set -e
exe=$1; script=$2; out=$3
mkdir -p "$out"
/usr/bin/python3 "$script" "$out" || exit $?
exec "$exe" "$out"
