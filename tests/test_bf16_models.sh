#!/usr/bin/env bash
# bf16 training steps of both zoo models (meson suite 'core'):
#   1. the emulated bf16 kernel (CG_BF16_EMULATE=1, what a CPU without
#      AVX512_BF16 runs) gives the same final loss, bit for bit, as the
#      AVX512_BF16 kernel (CG_BF16_AMX=0 keeps an AMX CPU on it);
#   2. 1 and 2 threads give the same bits in bf16, on AMX too (the unit's
#      where the CPU has it; emulated, CG_AMX_EMULATE=1, wherever the CPU
#      has AVX512_BF16);
#   3. bf16 really differs from fp32, by a little, and AMX (other roundings)
#      from AVX512_BF16 by less;
#   4. each result line's timed window (timed_from_s, timed_to_s: a
#      profiler's, scripts/step_profile.sh) holds the timed steps.
#   test_bf16_models.sh BENCH
set -euo pipefail
bench=$1
fail() { echo "test_bf16_models: $*" >&2; exit 1; }
field() { sed -n "s/.*\"$1\": \"\{0,1\}\([^,\"}]*\).*/\1/p"; }
# the window of 3 timed steps: it holds the two longest, so at least two
# medians long
window_ok() {
  awk -v a="$(field timed_from_s <<<"$1")" -v b="$(field timed_to_s <<<"$1")" \
      -v m="$(field step_ms_median <<<"$1")" \
      'BEGIN { exit !(a > 0 && b - a >= 2 * m / 1000 * 0.999) }' ||
    fail "$2: no timed window of 3 steps in: $1"
}
for model in charlm seq2seq; do
  small=(--model "$model" --preset tiny --T 16 --d 32 --steps 3 --warmup 0)
  run() { "$bench" "${small[@]}" "$@" 2>&1 | tail -1; }
  # the unit's, where the CPU has AMX; elsewhere CG_BF16_AMX=0 changes
  # nothing, and this run is the native one too
  auto=$(run --precision bf16 --threads 2)
  if [ "$(field gemm_path <<<"$auto")" = bf16-amx ]; then
    native=$(CG_BF16_AMX=0 run --precision bf16 --threads 2)
  else
    native=$auto
  fi
  [ "$(field precision <<<"$native")" = bf16 ] || fail "$model: no bf16 precision in: $native"
  [ "$(field gemm_path <<<"$native")" != bf16-amx ] ||
    fail "$model: CG_BF16_AMX=0 did not turn AMX off: $native"
  # a CPU without AVX512_BF16 runs the emulation already: CG_BF16_EMULATE=1
  # would repeat the run
  if [ "$(field gemm_path <<<"$native")" = bf16-emulated ]; then
    emulated=$native
  else
    emulated=$(CG_BF16_EMULATE=1 run --precision bf16 --threads 2)
  fi
  [ "$(field gemm_path <<<"$emulated")" = bf16-emulated ] ||
    fail "$model: CG_BF16_EMULATE=1 did not select the emulation: $emulated"
  one=$(CG_BF16_AMX=0 run --precision bf16 --threads 1)
  fp32=$(run --precision fp32 --threads 2)
  for line in "$native" "$emulated" "$one" "$fp32"; do window_ok "$line" "$model"; done
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
  # AMX (other roundings): 1 and 2 threads equal, near AVX512_BF16's loss;
  # on the unit where the CPU has it, and with its tiles emulated
  # (CG_AMX_EMULATE=1) on any CPU with AVX512_BF16
  amx_check() { # NAME PATH TWO [ENV...]: TWO the 2-thread line, or "" to run it
    local name=$1 path=$2 two=$3 one la
    shift 3
    [ -n "$two" ] || two=$(env "$@" "$bench" "${small[@]}" --precision bf16 --threads 2 2>&1 | tail -1)
    [ "$(field gemm_path <<<"$two")" = "$path" ] || fail "$model: $name: not on $path: $two"
    one=$(env "$@" "$bench" "${small[@]}" --precision bf16 --threads 1 2>&1 | tail -1)
    la=$(field final_loss <<<"$two")
    [ "$(field final_loss <<<"$one")" = "$la" ] ||
      fail "$model: $name bf16 loss with 1 thread $(field final_loss <<<"$one") != 2 threads $la"
    awk -v a="$la" -v b="$l16" -v c="$l32" 'BEGIN { d = a - b; if (d < 0) d = -d;
        e = c - b; if (e < 0) e = -e; exit !(d < 1e-2 * (b < 0 ? -b : b) && d <= 4 * e) }' ||
      fail "$model: $name bf16 loss $la vs AVX512_BF16 $l16 (fp32 $l32): too far apart"
    echo "$model: $name bf16 $la (1 thread = 2 threads)"
  }
  [ "$(field gemm_path <<<"$auto")" != bf16-amx ] || amx_check AMX bf16-amx "$auto"
  [ "$(field gemm_path <<<"$native")" != bf16 ] ||
    amx_check "emulated AMX" bf16-amx-emulated "" CG_AMX_EMULATE=1 CG_BF16_AMX=1
  [ "$(field gemm_path <<<"$native")" != bf16-emulated ] || l16="$l16 (the CPU's bf16 is the emulation)"
  echo "$model: bf16 $l16 (native = emulated = 1 thread), fp32 $l32"
done
