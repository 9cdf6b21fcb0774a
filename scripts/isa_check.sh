#!/usr/bin/env bash
# The code paths of CPUs other than this one, under QEMU's user-mode
# emulation (TCG: AVX, AVX2, FMA3 and F16C, no AVX-512): chosen Check suites
# and the tiny presets' final_loss pins on
#   haswell  AVX2 + FMA (Zen 2 and 3's paths: BLIS's haswell context, the
#            avx2 clones, bf16's AVX2 emulation)
#   nehalem  SSE4.2, no AVX (the default clones, BLIS's own kernels; bf16
#            is refused, by bench and by charlm train with exit 1)
#   scripts/isa_check.sh [BUILD [BUILD_REL]]
# BUILD (default build) holds the test suites, BUILD_REL (default
# build-rel, a release build: meson setup build-rel --buildtype=release)
# tools/bench. ISA_CPUS (default "haswell nehalem") and ISA_SUITES (default
# "test_bf16 test_nnkernels test_matmul") choose what runs, ISA_THREADS
# (default "1 2") the pins' thread counts; ISA_PINS=0 skips the pins. About 20-25 minutes on 2 loaded cores (docs/robustness.md, round
# sixteen). Installs qemu-user with apt-get when qemu-x86_64 is missing.
set -euo pipefail
usage="usage: scripts/isa_check.sh [BUILD [BUILD_REL]]"
case "${1:-}" in
  -h | --help) echo "$usage"; exit 0 ;;
  -*) echo "isa_check.sh: unknown option '$1' ($usage)" >&2; exit 2 ;;
esac
[ $# -le 2 ] || { echo "isa_check.sh: two arguments at most ($usage)" >&2; exit 2; }
cd "$(dirname "$0")/.."
build=${1:-build} rel=${2:-build-rel}
cpus=${ISA_CPUS:-haswell nehalem}
suites=${ISA_SUITES:-test_bf16 test_nnkernels test_matmul}
for d in "$build" "$rel"; do
  [ -f "$d/build.ninja" ] || { echo "isa_check.sh: '$d' is not a meson build directory" >&2; exit 2; }
done
# A build for one CPU (-march=native, -mavx512f, ... in c_args or cpp_args)
# may use its instructions anywhere, the default clones and BLIS's calls
# included: under QEMU every suite and bench would die of SIGILL
for d in "$build" "$rel"; do
  [ -f "$d/meson-info/intro-buildoptions.json" ] || continue
  isa=$(python3 - "$d/meson-info/intro-buildoptions.json" <<'PY'
import json, re, sys
for o in json.load(open(sys.argv[1])):
    if o.get("name") in ("c_args", "cpp_args"):
        for a in o.get("value") or []:
            if (a.startswith("-march=") and a not in ("-march=x86-64", "-march=x86-64-v2")) or \
               re.match(r"-m(avx|fma|f16c|bmi|amx|sse4\.?[12]?a?$)", a):
                print(a, o["name"])
                sys.exit()
PY
  )
  [ -z "$isa" ] || {
    echo "isa_check.sh: '$d' is compiled with ${isa% *} (${isa#* }): its code may use this CPU's instructions anywhere, and the emulated CPUs lack them; check a build without it" >&2
    exit 2
  }
done
if ! command -v qemu-x86_64 >/dev/null; then
  if [ "$(id -u)" = 0 ]; then apt-get install -y qemu-user; else sudo apt-get install -y qemu-user; fi
fi
ninja -C "$build" $(for s in $suites; do printf 'tests/%s ' "$s"; done) >/dev/null
ninja -C "$rel" tools/bench >/dev/null

# QEMU's model of each CPU; Haswell's features TCG lacks are taken off
# (each would print a warning on every start)
qemu_cpu() {
  case "$1" in
    haswell) echo "Haswell,-pcid,-x2apic,-tsc-deadline,-hle,-invpcid,-rtm" ;;
    nehalem) echo "Nehalem" ;;
    *) echo "isa_check.sh: unknown CPU '$1' in ISA_CPUS (haswell, nehalem)" >&2; exit 2 ;;
  esac
}
# GOMP_SPINCOUNT set: otherwise the programs start themselves again
# (cg_omp_short_spin's exec of /proc/self/exe), natively, out of QEMU
run() {
  local cpu=$1
  shift
  env CK_FORK=no OMP_NUM_THREADS=2 GOMP_SPINCOUNT=10000 qemu-x86_64 -cpu "$(qemu_cpu "$cpu")" "$@"
}

# final_loss of the tiny presets (docs/performance.md; the same on AVX-512,
# Zen 3 and Zen 4)
pin() {
  case "$1 $2" in
    "charlm fp32") echo 4.20525837 ;;
    "seq2seq fp32") echo 4.56257582 ;;
    "charlm bf16") echo 4.20522547 ;;
    "seq2seq bf16") echo 4.56254387 ;;
  esac
}

fail=0
for cpu in $cpus; do
  qemu_cpu "$cpu" >/dev/null
  for s in $suites; do
    start=$SECONDS
    if out=$(run "$cpu" "$build/tests/$s" 2>&1); then
      echo "$cpu $s: ok ($((SECONDS - start)) s)"
    else
      echo "$cpu $s: FAILED"
      echo "$out" | grep -v "^Running suite" | tail -20
      fail=1
    fi
  done
  # the zoo's refusal of bf16 where the CPU has neither AVX512_BF16 nor AVX2
  # and FMA: a failure (exit 1), not a usage error (2), and nothing written
  if [ "$cpu" = nehalem ]; then
    dir=$(mktemp -d)
    printf 'call me ishmael. some years ago, never mind how long. %.0s' {1..40} >"$dir/t.txt"
    rc=0
    out=$(run "$cpu" "$rel/models/charlm/charlm" train --data "$dir/t.txt" --precision bf16 \
      --steps 1 --out "$dir/x.st" 2>&1) || rc=$?
    if [ "$rc" = 1 ] && echo "$out" | grep -q "^charlm: error: --precision: bf16 needs a CPU with" &&
      [ ! -e "$dir/x.st" ]; then
      echo "$cpu charlm train --precision bf16: refused (exit 1)"
    else
      echo "$cpu charlm train --precision bf16: FAILED: exit $rc: $out" | tail -3
      fail=1
    fi
    rm -rf "$dir"
  fi
  [ "${ISA_PINS:-1}" = 0 ] && continue
  # the path the CPU model takes, and the pins (or bf16's refusal without AVX2)
  for model in charlm seq2seq; do
    for p in fp32 bf16; do
      want_path=$([ "$cpu" = haswell ] && echo haswell || echo default)
      [ "$p" = bf16 ] && want_path=bf16-emulated
      for t in ${ISA_THREADS:-1 2}; do
        out=$(run "$cpu" "$rel/tools/bench" --model "$model" --preset tiny --steps 3 --warmup 1 \
          --precision "$p" --threads "$t" 2>&1) || true
        if [ "$cpu" = nehalem ] && [ "$p" = bf16 ]; then
          if echo "$out" | grep -q "AVX2 and FMA"; then
            echo "$cpu $model $p $t: refused, as it should be"
          else
            echo "$cpu $model $p $t: FAILED, not refused: $out" | tail -3
            fail=1
          fi
          continue
        fi
        path=$(echo "$out" | sed -n 's/.*"gemm_path": "\([^"]*\)".*/\1/p')
        loss=$(echo "$out" | sed -n 's/.*"final_loss": \([0-9.]*\).*/\1/p')
        if [ "$path" = "$want_path" ] && [ "$loss" = "$(pin "$model" "$p")" ]; then
          echo "$cpu $model $p $t: $loss ($path)"
        else
          echo "$cpu $model $p $t: FAILED: path '$path' (want $want_path), final_loss '$loss'" \
            "(want $(pin "$model" "$p"))"
          echo "$out" | tail -3
          fail=1
        fi
      done
    done
  done
done
exit "$fail"
