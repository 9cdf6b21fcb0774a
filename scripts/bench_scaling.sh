#!/usr/bin/env bash
# Step time of charlm tiny against sequence length and against width, and
# KV-cache vs full-recompute sampling speed of charlm base (issue #5's
# scaling report). Run on an idle machine from the repository root after
# building: scripts/bench_scaling.sh [threads]
set -euo pipefail
threads=${1:-2}
bench=build/models/bench
charlm=build/models/charlm
[ -x "$bench" ] && [ -x "$charlm" ] || { echo "bench_scaling: build first (ninja -C build)" >&2; exit 1; }
field() { sed -n "s/.*\"$1\": \([0-9.e+-]*\).*/\1/p"; }

echo "charlm tiny (d 128, B 12), $threads threads: step time against T"
echo "| T | step ms | tokens/s | MFU |"
echo "| --- | --- | --- | --- |"
for T in 64 128 256 512 1024; do
  steps=20; [ "$T" -ge 512 ] && steps=6
  j=$("$bench" --model charlm --preset tiny --threads "$threads" --steps $steps --warmup 2 --T "$T")
  echo "| $T | $(echo "$j" | field step_ms_median) | $(echo "$j" | field tokens_per_s) | $(echo "$j" | field mfu) |"
done

echo
echo "charlm tiny (T 64, B 12, 4 layers, d_ff 4d, heads of 32), $threads threads: step time against width"
echo "| d | params | step ms | tokens/s | MFU |"
echo "| --- | --- | --- | --- | --- |"
for d in 64 128 256 384 512; do
  j=$("$bench" --model charlm --preset tiny --threads "$threads" --steps 20 --warmup 3 --d "$d")
  echo "| $d | $(echo "$j" | field params) | $(echo "$j" | field step_ms_median) | $(echo "$j" | field tokens_per_s) | $(echo "$j" | field mfu) |"
done

echo
echo "charlm base sampling, 255 new characters after a 1-character prompt (they fill the"
echo "256-character window without sliding), $threads threads (untrained weights: speed only)"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$charlm" train --preset base --steps 1 --eval-every 1 --threads "$threads" --out "$tmp/base.safetensors" >/dev/null 2>&1
for mode in cache no-cache; do
  extra=""; [ "$mode" = no-cache ] && extra="--no-cache"
  "$charlm" sample --ckpt "$tmp/base.safetensors" --prompt "C" --length 255 \
      --seed 1 --threads "$threads" $extra 2>&1 >/dev/null | grep characters/s
done
