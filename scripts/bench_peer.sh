#!/usr/bin/env bash
# Training speed against PyTorch, fp32 and bf16 (issue #12): for each preset,
# R rounds of four runs back to back -- PyTorch fp32, ours fp32, PyTorch's
# bf16 autocast, ours bf16 -- then a markdown table of the medians and the
# ratios, and under it each side's resident set before any model (a peak
# RSS is its whole process's: PyTorch's includes python3 with torch
# imported, about 230 MB). The presets are torch_peer.py's: charlm tiny,
# base, gpt2; seq2seq tiny, base, paper (seq2seq real: scripts/bench_real.sh);
# and "charlm-llama tiny|base|gpt2": LLaMA's block at those shapes (bench
# --arch llama against tools/llama_peer.py).
# Needs /usr/bin/python3 with torch (apt-get install python3-torch) and
# ../shared/bench/torch_peer.py (or CG_PEER=path). Run on an idle machine
# from the repository root after building:
#   scripts/bench_peer.sh [threads [rounds [presets...]]]
# e.g. scripts/bench_peer.sh 2 2 "charlm tiny" "seq2seq base"
# (the six presets of issue 32: add "seq2seq paper" "charlm gpt2", which run
# bf16 only, 5 steps after 2)
set -euo pipefail
# Numbers read and written in the C locale's form: under a locale with a
# decimal comma (LC_ALL=de_DE.UTF-8) mawk read the medians' 7.5 as 7 and
# wrote the ratios as 100,00x.
export LC_ALL=C
usage="usage: scripts/bench_peer.sh [THREADS [ROUNDS [\"MODEL PRESET\"...]]]"
case "${1:-}" in -h | --help) echo "$usage"; exit 0 ;; esac
threads=${1:-2}
rounds=${2:-2}
# checked before anything runs (a bad value once started the first run)
[[ $threads =~ ^[1-9][0-9]{0,3}$ ]] || { echo "bench_peer: THREADS '$threads' is not a whole number above 0 ($usage)" >&2; exit 2; }
[[ $rounds =~ ^[1-9][0-9]{0,3}$ ]] || { echo "bench_peer: ROUNDS '$rounds' is not a whole number above 0 ($usage)" >&2; exit 2; }
# no more threads than CPUs: bench uses at most as many (and says so on
# stderr), the PyTorch peer as many as it is told, so the two sides ran
# with different counts and PyTorch's oversubscribed the CPUs
cpus=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)
[ "$threads" -le "$cpus" ] ||
  { echo "bench_peer: THREADS $threads is more than the $cpus CPUs this process may use: bench would run $cpus threads, PyTorch $threads ($usage)" >&2; exit 2; }
shift $(($# > 2 ? 2 : $#))
presets=("$@")
[ ${#presets[@]} -gt 0 ] || presets=("charlm tiny" "seq2seq tiny" "charlm base" "seq2seq base")
# the presets both sides have (torch_peer.py's), checked before any run: a
# preset the peer lacks once failed only when its turn came, after hours
# of the others' runs
for p in "${presets[@]}"; do
  case $p in
    "charlm tiny" | "charlm base" | "charlm gpt2" | "seq2seq tiny" | "seq2seq base" | "seq2seq paper") ;;
    "charlm-llama tiny" | "charlm-llama base" | "charlm-llama gpt2") ;;
    "seq2seq real")
      echo "bench_peer: 'seq2seq real' is timed against PyTorch on the same batches by scripts/bench_real.sh ($usage)" >&2
      exit 2 ;;
    *)
      echo "bench_peer: '$p' is not \"MODEL PRESET\" of both sides (charlm or charlm-llama tiny, base or gpt2; seq2seq tiny, base or paper) ($usage)" >&2
      exit 2 ;;
  esac
done
# the tree's build and its neighbour shared/, whatever the current directory
root=$(cd "$(dirname "$0")/.." && pwd)
bench=$root/build/tools/bench
peer=${CG_PEER:-$root/../shared/bench/torch_peer.py}
[ -x "$bench" ] || { echo "bench_peer: build first (ninja -C build)" >&2; exit 1; }
[ -f "$peer" ] || { echo "bench_peer: $peer not found (set CG_PEER)" >&2; exit 1; }
/usr/bin/python3 -c 'import torch' 2>/dev/null ||
  { echo "bench_peer: /usr/bin/python3 has no torch (apt-get install python3-torch)" >&2; exit 1; }
field() { sed -n "s/.*\"$1\": \"\{0,1\}\([^,\"}]*\).*/\1/p"; }
median() { sort -g | awk '{ a[NR] = $1 } END { if (NR) print (NR % 2 ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2) }'; }
log=$(mktemp)
trap 'rm -f "$log"' EXIT
for p in "${presets[@]}"; do
  set -- $p
  model=$1 preset=$2
  steps=60 warmup=10 runs=(torch-fp32 ours-fp32 torch-bf16 ours-bf16)
  [ "$preset" = base ] && steps=20 warmup=5
  # the large presets (paper, gpt2): seconds a step, so 5 steps after 2,
  # and bf16 only (their targets are bf16's; PyTorch's fp32 step of gpt2
  # takes about 20 s here)
  case $preset in paper | gpt2) steps=5 warmup=2 runs=(torch-bf16 ours-bf16) ;; esac
  args=(--model "$model" --preset "$preset" --threads "$threads" --steps $steps --warmup $warmup)
  ours=(--model "$model" --preset "$preset" --threads "$threads" --steps $steps --warmup $warmup)
  theirs=("$peer" "${args[@]}")
  if [ "$model" = charlm-llama ]; then # LLaMA's block: bench's --arch, its own peer
    ours=(--model charlm --arch llama --preset "$preset" --threads "$threads" --steps $steps --warmup $warmup)
    theirs=("$root/tools/llama_peer.py" --preset "$preset" --threads "$threads" --steps $steps --warmup $warmup)
  fi
  for ((r = 0; r < rounds; r++)); do
    for run in "${runs[@]}"; do
      case $run in
        torch-fp32) j=$(/usr/bin/python3 "${theirs[@]}") ;;
        torch-bf16) j=$(/usr/bin/python3 "${theirs[@]}" --amp bf16) ;;
        ours-fp32) j=$("$bench" "${ours[@]}" --precision fp32) ;;
        ours-bf16) j=$("$bench" "${ours[@]}" --precision bf16) ;;
      esac
      echo "$model $preset $run $(field tokens_per_s <<<"$j") $(field peak_rss_mb <<<"$j") $(field rss_mb_start <<<"$j")" >>"$log"
      echo "$model $preset $run: $j" >&2
    done
  done
done
echo "| preset | PyTorch fp32 | PyTorch bf16 | cgrad fp32 | cgrad bf16 | bf16: cgrad / PyTorch | cgrad bf16 / fp32 | peak RSS MB, PyTorch bf16 / cgrad bf16 / cgrad fp32 |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- |"
for p in "${presets[@]}"; do
  set -- $p
  m() { awk -v a="$1" -v b="$2" -v r="$3" -v c="$4" '$1 == a && $2 == b && $3 == r { print $c }' "$log" | median; }
  tf=$(m "$1" "$2" torch-fp32 4) tb=$(m "$1" "$2" torch-bf16 4)
  of=$(m "$1" "$2" ours-fp32 4) ob=$(m "$1" "$2" ours-bf16 4)
  rt=$(m "$1" "$2" torch-bf16 5) rb=$(m "$1" "$2" ours-bf16 5) rf=$(m "$1" "$2" ours-fp32 5)
  # a column with no runs (the large presets' fp32) prints "-"
  awk -v p="$1 $2" -v tf="$tf" -v tb="$tb" -v of="$of" -v ob="$ob" -v rt="$rt" -v rb="$rb" -v rf="$rf" \
    'function n(x) { return x == "" ? "-" : sprintf("%.0f", x) }
     function r(a, b) { return a == "" || b == "" ? "-" : sprintf("%.2fx", a / b) }
     BEGIN { printf "| %s | %s | %s | %s | %s | %s | %s | %s / %s / %s |\n",
             p, n(tf), n(tb), n(of), n(ob), r(ob, tb), r(ob, of), n(rt), n(rb), n(rf) }'
done
# each peak RSS above is its whole process's: PyTorch's holds python3 with
# torch imported before any model, cgrad's its program and libraries
torch_start=$(/usr/bin/python3 -c 'import resource, sys, torch
torch.set_num_threads(int(sys.argv[1]))
print("%.1f" % (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024))' "$threads")
ours_start=$(awk '$3 ~ /^ours/ && $6 != "" { print $6 }' "$log" | median)
echo
echo "Peak RSS is each process's, its start included: PyTorch's ${torch_start} MB (python3 with torch imported, no model), cgrad's ${ours_start:--} MB (bench's rss_mb_start)."
