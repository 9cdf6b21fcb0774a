#!/usr/bin/env bash
# Builds the libFuzzer targets of fuzz/ with clang (ASan + UBSan, in
# build-fuzz/) and runs each for SECONDS (default 60).
#   scripts/fuzz.sh [SECONDS] [TARGET...]   targets: safetensors checkpoint corpus pairs cli
#                                            train_state seq2seq_checkpoint metrics_log
# Seeds come from fuzz/corpus/<target>/ (read only), a dictionary from
# fuzz/<target>.dict when there is one; new inputs go to
# build-fuzz/fuzz-work/<target>/, crash reproducers to
# build-fuzz/fuzz-crashes/<target>/ (copy one to fuzz/crashes/<target>/ to
# make it a regression test of `meson test --suite fuzz`). Prints one line
# per target (executions, coverage) and exits 1 if any target failed.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-60}
[ $# -gt 0 ] && shift
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(safetensors checkpoint corpus pairs cli train_state seq2seq_checkpoint metrics_log)
command -v clang >/dev/null || { echo "fuzz.sh: clang not found (apt-get install clang libclang-rt-14-dev)" >&2; exit 1; }
if [ ! -d build-fuzz ]; then
  CC=clang CXX=clang++ meson setup build-fuzz -Dfuzz=true -Db_sanitize=address,undefined -Db_lundef=false \
    -Dbuildtype=debugoptimized -Dtests=disabled >/dev/null
fi
ninja -C build-fuzz "${targets[@]/#/fuzz/fuzz_}" >/dev/null
status=0
for t in "${targets[@]}"; do
  work=build-fuzz/fuzz-work/$t crashes=build-fuzz/fuzz-crashes/$t log=build-fuzz/fuzz-$t.log
  mkdir -p "$work" "$crashes"
  dict=()
  [ -f "fuzz/$t.dict" ] && dict=(-dict="fuzz/$t.dict")
  if OMP_NUM_THREADS=1 ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
     UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
     "build-fuzz/fuzz/fuzz_$t" -max_total_time="$secs" -timeout=20 -rss_limit_mb=2048 \
       -print_final_stats=1 -artifact_prefix="$crashes/" "${dict[@]}" "$work" "fuzz/corpus/$t" >"$log" 2>&1; then
    result=ok
  else
    result="FAILED (see $log; reproducer in $crashes/)"
    status=1
  fi
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | cut -d' ' -f2)
  ft=$(grep -o 'ft: [0-9]*' "$log" | tail -1 | cut -d' ' -f2)
  printf 'fuzz %-12s %s s: %s execs, cov %s, ft %s: %s\n' "$t" "$secs" "${execs:-?}" "${cov:-?}" \
    "${ft:-?}" "$result"
done
exit $status
