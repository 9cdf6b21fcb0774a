#!/usr/bin/env bash
# The README's one command for a fresh Debian machine: install the build
# dependencies, fetch the corpora, build, train the character LM for about a
# minute and print a sample.
#   scripts/run_main.sh [STEPS]      (default 2500 training steps: about 53 s of
#                                     2-thread training on an idle development
#                                     machine, enough for English-looking words)
# THREADS (default: all cores) sets the kernel threads.
set -euo pipefail
usage="usage: scripts/run_main.sh [STEPS]"
case "${1:-}" in -h | --help) echo "$usage (THREADS=N: kernel threads)"; exit 0 ;; esac
# checked before anything is installed, downloaded or built
[ $# -le 1 ] || { echo "run_main.sh: one argument at most ($usage)" >&2; exit 2; }
steps=${1:-2500}
[[ $steps =~ ^[1-9][0-9]{0,8}$ ]] ||
  { echo "run_main.sh: STEPS must be a whole number of steps above 0, not '$steps' ($usage)" >&2; exit 2; }
threads=${THREADS:-$(nproc)}
[[ $threads =~ ^[1-9][0-9]{0,3}$ ]] ||
  { echo "run_main.sh: THREADS must be a whole number above 0, not '$threads'" >&2; exit 2; }
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/prepare_data.sh
# build.ninja, not the directory: a `meson setup` that failed or was
# interrupted leaves one without it, and ninja cannot build there
[ -f build/build.ninja ] || meson setup build
# the program alone (about 40% of the whole build's compiling: the tests,
# examples and tools are scripts/test.sh's); a later `ninja -C build`
# builds the rest
ninja -C build models/charlm/charlm
# --force: a rerun trains afresh over the checkpoint of the last run; the
# precision is the default's (bf16 where the CPU has it natively, else fp32)
build/models/charlm/charlm train --preset tiny --steps "$steps" --seed 1 --threads "$threads" \
    --out out/charlm.safetensors --force
echo "--- sample ---"
build/models/charlm/charlm sample --ckpt out/charlm.safetensors --prompt "Call me" --length 300 \
    --top-k 5 --temperature 0.7 --seed 1 --threads "$threads"
echo "--- loss curve: out/charlm.loss.png ---"
