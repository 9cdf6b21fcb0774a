#!/usr/bin/env bash
# The README's one command for a fresh Debian machine: install the build
# dependencies, fetch the corpora, build, train the character LM for about a
# minute and print a sample.
#   scripts/run_main.sh [STEPS]      (default 2500 training steps: about 53 s of
#                                     2-thread training on an idle development
#                                     machine, enough for English-looking words)
# THREADS (default: all cores) sets the kernel threads.
set -euo pipefail
cd "$(dirname "$0")/.."
steps=${1:-2500}
scripts/setup.sh
scripts/prepare_data.sh
# build.ninja, not the directory: a `meson setup` that failed or was
# interrupted leaves one without it, and ninja cannot build there
[ -f build/build.ninja ] || meson setup build
ninja -C build
threads=${THREADS:-$(nproc)}
# --force: a rerun trains afresh over the checkpoint of the last run; the
# precision is the default's (bf16 where the CPU has it natively, else fp32)
build/models/charlm/charlm train --preset tiny --steps "$steps" --seed 1 --threads "$threads" \
    --out out/charlm.safetensors --force
echo "--- sample ---"
build/models/charlm/charlm sample --ckpt out/charlm.safetensors --prompt "Call me" --length 300 \
    --top-k 5 --temperature 0.7 --seed 1 --threads "$threads"
echo "--- loss curve: out/charlm.loss.png ---"
