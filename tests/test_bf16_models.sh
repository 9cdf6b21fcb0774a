#!/usr/bin/env bash
# bf16 training steps of both zoo models (meson suite 'core'):
#   1. the emulated bf16 kernel (CG_BF16_EMULATE=1, what a CPU without
#      AVX512_BF16 runs) gives the same final loss, bit for bit, as the
#      AVX512_BF16 kernel;
#   2. 1 and 2 threads give the same bits in bf16;
#   3. bf16 really differs from fp32, by a little.
#   test_bf16_models.sh BENCH
set -euo pipefail
bench=$1
fail() { echo "test_bf16_models: $*" >&2; exit 1; }
field() { sed -n "s/.*\"$1\": \"\{0,1\}\([^,\"}]*\).*/\1/p"; }
for model in charlm seq2seq; do
  small=(--model "$model" --preset tiny --T 16 --d 32 --steps 3 --warmup 0)
  run() { "$bench" "${small[@]}" "$@" 2>&1 | tail -1; }
  native=$(run --precision bf16 --threads 2)
  [ "$(field precision <<<"$native")" = bf16 ] || fail "$model: no bf16 precision in: $native"
  emulated=$(CG_BF16_EMULATE=1 run --precision bf16 --threads 2)
  [ "$(field gemm_path <<<"$emulated")" = bf16-emulated ] ||
    fail "$model: CG_BF16_EMULATE=1 did not select the emulation: $emulated"
  one=$(run --precision bf16 --threads 1)
  fp32=$(run --precision fp32 --threads 2)
  l16=$(field final_loss <<<"$native")
  [ -n "$l16" ] || fail "$model: no final_loss in: $native"
  [ "$(field final_loss <<<"$emulated")" = "$l16" ] ||
    fail "$model: emulated bf16 loss $(field final_loss <<<"$emulated") != native $l16"
  [ "$(field final_loss <<<"$one")" = "$l16" ] ||
    fail "$model: bf16 loss with 1 thread $(field final_loss <<<"$one") != 2 threads $l16"
  l32=$(field final_loss <<<"$fp32")
  awk -v a="$l16" -v b="$l32" 'BEGIN { d = a - b; if (d < 0) d = -d;
      exit !(d > 0 && d < 1e-2 * (b < 0 ? -b : b)) }' ||
    fail "$model: bf16 loss $l16 vs fp32 $l32: expected a small nonzero difference"
  echo "$model: bf16 $l16 (native = emulated = 1 thread), fp32 $l32"
done
