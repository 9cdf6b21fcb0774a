#!/usr/bin/env bash
# The translator's real recipe against PyTorch on the same batches (issue
# 37): build/tools/bench --model seq2seq --preset real writes the batches it
# takes (--dump-batches), tools/real_peer.py runs PyTorch's step on them;
# R alternating rounds of cgrad and PyTorch, fp32 then bf16 (PyTorch's
# autocast), then the medians and their ratio. Needs /usr/bin/python3 with
# torch and ../shared/reference (or CG_REFERENCE=dir). Run on an idle machine
# from the repository root after building:
#   scripts/bench_real.sh [threads [rounds [steps]]]
set -euo pipefail
usage="usage: scripts/bench_real.sh [THREADS [ROUNDS [STEPS]]]"
case "${1:-}" in -h | --help) echo "$usage"; exit 0 ;; esac
[ $# -le 3 ] || { echo "bench_real: three arguments at most ($usage)" >&2; exit 2; }
threads=${1:-2}
rounds=${2:-3}
steps=${3:-40}
# checked before anything runs (a bad ROUNDS once ran the dump's steps, then failed)
for v in "THREADS $threads" "ROUNDS $rounds" "STEPS $steps"; do
  [[ ${v#* } =~ ^[1-9][0-9]{0,5}$ ]] ||
    { echo "bench_real: ${v%% *} '${v#* }' is not a whole number above 0 ($usage)" >&2; exit 2; }
done
# no more threads than CPUs: bench uses at most as many (and says so on
# stderr), the PyTorch peer as many as it is told, so the two sides ran
# with different counts and PyTorch's oversubscribed the CPUs
cpus=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)
[ "$threads" -le "$cpus" ] ||
  { echo "bench_real: THREADS $threads is more than the $cpus CPUs this process may use: bench would run $cpus threads, PyTorch $threads ($usage)" >&2; exit 2; }
# the tree's build, tools/ and its neighbour shared/, whatever the current directory
root=$(cd "$(dirname "$0")/.." && pwd)
bench=$root/build/tools/bench
ref=${CG_REFERENCE:-$root/../shared/reference}
[ -x "$bench" ] || { echo "bench_real: build first (ninja -C build)" >&2; exit 1; }
[ -f "$ref/models.py" ] || { echo "bench_real: no $ref/models.py (set CG_REFERENCE)" >&2; exit 1; }
/usr/bin/python3 -c 'import torch' 2>/dev/null ||
  { echo "bench_real: /usr/bin/python3 has no torch (apt-get install python3-torch)" >&2; exit 1; }
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
grep -m1 "model name" /proc/cpuinfo
"$bench" --model seq2seq --preset real --steps "$steps" --warmup 5 --threads "$threads" \
  --dump-batches "$dir/b.st" >/dev/null
for r in $(seq "$rounds"); do
  for prec in fp32 bf16; do
    amp=off
    [ "$prec" = bf16 ] && amp=bf16
    "$bench" --model seq2seq --preset real --steps "$steps" --warmup 5 --threads "$threads" \
      --precision "$prec" | sed "s/^{/{\"who\": \"cgrad\", /" >>"$dir/r.jsonl"
    /usr/bin/python3 "$root/tools/real_peer.py" "$dir/b.st" --threads "$threads" --amp "$amp" \
      --reference "$ref" | sed "s/^{/{\"who\": \"torch\", /" >>"$dir/r.jsonl"
  done
done
/usr/bin/python3 - "$dir/r.jsonl" <<'PY'
import json, statistics, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
for prec in ("fp32", "bf16"):
    got = {w: [r["tokens_per_s"] for r in rows if r["who"] == w and r["precision"] == prec]
           for w in ("cgrad", "torch")}
    c, t = statistics.median(got["cgrad"]), statistics.median(got["torch"])
    pairs = ", ".join(f"{a / b:.2f}" for a, b in zip(got["cgrad"], got["torch"]))
    print(f"{prec}: PyTorch {t:,.0f}, cgrad {c:,.0f} target tokens/s: {c / t:.2f}x ({pairs})")
PY
