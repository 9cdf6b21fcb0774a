#!/usr/bin/env bash
# The README's one command for a fresh Debian machine: install the build
# dependencies, fetch the corpora, build, train the character LM briefly and
# print a sample.
#   scripts/run_main.sh [STEPS]      (default 300 training steps)
# THREADS (default: all cores) sets the kernel threads.
set -euo pipefail
cd "$(dirname "$0")/.."
steps=${1:-300}
scripts/setup.sh
scripts/prepare_data.sh
[ -d build ] || meson setup build
ninja -C build
threads=${THREADS:-$(nproc)}
# --force: a rerun trains afresh over the checkpoint of the last run
build/models/charlm train --preset tiny --steps "$steps" --seed 1 --threads "$threads" \
    --out out/charlm.safetensors --force
echo "--- sample ---"
build/models/charlm sample --ckpt out/charlm.safetensors --prompt "Call me" --length 300 \
    --top-k 5 --seed 1 --threads "$threads"
echo "--- loss curve: out/charlm.loss.png ---"
