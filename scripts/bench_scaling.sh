#!/usr/bin/env bash
# Step time and peak RSS of charlm tiny against sequence length (to 4096),
# step time against width, and KV-cache vs full-recompute sampling speed of
# charlm base (issues #5 and #13). Run on an idle machine from the repository root after
# building: scripts/bench_scaling.sh [threads]
set -euo pipefail
usage="usage: scripts/bench_scaling.sh [THREADS]"
case "${1:-}" in -h | --help) echo "$usage"; exit 0 ;; esac
[ $# -le 1 ] || { echo "bench_scaling: one argument at most ($usage)" >&2; exit 2; }
threads=${1:-2}
[[ $threads =~ ^[1-9][0-9]{0,3}$ ]] ||
  { echo "bench_scaling: THREADS '$threads' is not a whole number above 0 ($usage)" >&2; exit 2; }
# the tree's build, whatever the current directory
root=$(cd "$(dirname "$0")/.." && pwd)
bench=$root/build/tools/bench
charlm=$root/build/models/charlm/charlm
[ -x "$bench" ] && [ -x "$charlm" ] || { echo "bench_scaling: build first (ninja -C build)" >&2; exit 1; }
field() { sed -n "s/.*\"$1\": \([0-9.e+-]*\).*/\1/p"; }

echo "charlm tiny (d 128), $threads threads: step time and peak RSS against T"
echo "(B 12 up to T 1024, then the same 12,288 tokens per step: B 6 at 2048, B 3 at 4096)"
echo "| T | B | step ms | CPU ms | tokens/s | MFU | peak RSS MB |"
echo "| --- | --- | --- | --- | --- | --- | --- |"
for TB in "64 12" "128 12" "256 12" "512 12" "1024 12" "2048 6" "4096 3"; do
  set -- $TB
  T=$1 B=$2
  steps=20; [ "$T" -ge 512 ] && steps=4
  j=$("$bench" --model charlm --preset tiny --threads "$threads" --steps $steps --warmup 1 --T "$T" --batch-size "$B")
  echo "| $T | $B | $(echo "$j" | field step_ms_median) | $(echo "$j" | field cpu_ms_median) | $(echo "$j" | field tokens_per_s) | $(echo "$j" | field mfu) | $(echo "$j" | field peak_rss_mb) |"
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
# an fp32 checkpoint: sample decodes in its precision unless --precision says (bf16 below)
"$charlm" train --preset base --steps 1 --eval-every 1 --threads "$threads" --precision fp32 \
    --out "$tmp/base.safetensors" >/dev/null 2>&1
for mode in cache no-cache bf16; do
  extra=""; [ "$mode" = no-cache ] && extra="--no-cache"
  [ "$mode" = bf16 ] && extra="--precision bf16"   # packed bf16 weights, cached
  "$charlm" sample --ckpt "$tmp/base.safetensors" --prompt "C" --length 255 \
      --seed 1 --threads "$threads" $extra 2>&1 >/dev/null | grep characters/s
done
