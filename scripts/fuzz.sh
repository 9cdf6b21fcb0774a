#!/usr/bin/env bash
# Builds the libFuzzer targets of fuzz/ with clang (ASan + UBSan, in
# build-fuzz/) and runs each for SECONDS (default 60), as many at a time as
# there are cores (each target runs on one thread).
#   scripts/fuzz.sh [SECONDS] [TARGET...]   targets: safetensors checkpoint corpus pairs cli
#                                            train_state seq2seq_checkpoint metrics_log spm
#                                            env lora
# Seeds come from fuzz/corpus/<target>/ (read only), a dictionary from
# fuzz/<target>.dict when there is one; new inputs go to
# build-fuzz/fuzz-work/<target>/, crash reproducers to
# build-fuzz/fuzz-crashes/<target>/ (copy one to fuzz/crashes/<target>/ to
# make it a regression test of `meson test --suite fuzz`). Prints one line
# per target (executions, coverage), in the order given, and exits 1 if any
# target failed.
set -euo pipefail
cd "$(dirname "$0")/.."
all=(safetensors checkpoint corpus pairs cli train_state seq2seq_checkpoint metrics_log spm env lora)
case "${1:-}" in -h | --help) echo "usage: scripts/fuzz.sh [SECONDS [TARGET...]] (targets: ${all[*]})"; exit 0 ;; esac
secs=${1:-60}
[ $# -gt 0 ] && shift
if ! [[ $secs =~ ^[1-9][0-9]*$ ]]; then
  echo "fuzz.sh: SECONDS must be a whole number of seconds above 0, not '$secs'" >&2
  exit 2
fi
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=("${all[@]}")
for t in "${targets[@]}"; do # before the build: ninja would name fuzz/fuzz_$t
  [[ " ${all[*]} " == *" $t "* ]] || { echo "fuzz.sh: unknown target '$t' (targets: ${all[*]})" >&2; exit 2; }
done
command -v clang >/dev/null || { echo "fuzz.sh: clang not found (apt-get install clang libclang-rt-14-dev)" >&2; exit 1; }
# build.ninja, not the directory: a `meson setup` that failed or was
# interrupted leaves one without it
if [ ! -f build-fuzz/build.ninja ]; then
  CC=clang CXX=clang++ meson setup build-fuzz -Dfuzz=true -Db_sanitize=address,undefined -Db_lundef=false \
    -Dbuildtype=debugoptimized -Dtests=disabled >/dev/null
fi
ninja -C build-fuzz "${targets[@]/#/fuzz/fuzz_}" >/dev/null

# one target: its log in build-fuzz/fuzz-<t>.log, its result line in
# build-fuzz/fuzz-<t>.result
run_target() {
  local t=$1 work=build-fuzz/fuzz-work/$1 crashes=build-fuzz/fuzz-crashes/$1 log=build-fuzz/fuzz-$1.log
  local result=ok dict=()
  mkdir -p "$work" "$crashes"
  [ -f "fuzz/$t.dict" ] && dict=(-dict="fuzz/$t.dict")
  if ! OMP_NUM_THREADS=1 ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
     UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
     "build-fuzz/fuzz/fuzz_$t" -max_total_time="$secs" -timeout=20 -rss_limit_mb=2048 \
       -print_final_stats=1 -artifact_prefix="$crashes/" "${dict[@]}" "$work" "fuzz/corpus/$t" >"$log" 2>&1; then
    result="FAILED (see $log; reproducer in $crashes/)"
  fi
  local execs cov ft
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | cut -d' ' -f2 || true)
  ft=$(grep -o 'ft: [0-9]*' "$log" | tail -1 | cut -d' ' -f2 || true)
  printf 'fuzz %-12s %s s: %s execs, cov %s, ft %s: %s\n' "$t" "$secs" "${execs:-?}" "${cov:-?}" \
    "${ft:-?}" "$result" >"build-fuzz/fuzz-$t.result"
}

jobs_max=$(nproc 2>/dev/null || echo 1)
for t in "${targets[@]}"; do
  rm -f "build-fuzz/fuzz-$t.result"
  while [ "$(jobs -rp | wc -l)" -ge "$jobs_max" ]; do wait -n || true; done
  run_target "$t" &
done
wait
status=0
for t in "${targets[@]}"; do
  r="build-fuzz/fuzz-$t.result"
  if [ -f "$r" ]; then cat "$r"; else echo "fuzz $t: no result (see build-fuzz/fuzz-$t.log)"; fi
  grep -q ': ok$' "$r" 2>/dev/null || status=1
done
exit $status
