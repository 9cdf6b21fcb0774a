#!/usr/bin/env bash
# Where a training step's time goes: perf's samples over bench's timed steps
# only (start-up and warm-up left out), by group of functions, and the share
# outside the matrix kernels (issue 32's third AMX target: at most 35% of a
# bf16 seq2seq base step). Run from the repository root after building, on
# an idle machine:
#   scripts/step_profile.sh [BENCH ARGS...]
# (default: --model seq2seq --preset base --precision bf16 --threads 1
# --steps 20 --warmup 3). Prints a table, then one JSON line: bench's own
# line's model, preset, precision, threads and step_ms_median, the samples
# counted, in_kernels and outside_kernels (fractions of the samples), and
# each group's fraction with its largest functions. Needs perf (apt-get
# install linux-perf) and permission to sample (root, or
# kernel.perf_event_paranoid <= 1). CG_BENCH=path takes another bench
# binary (a frame-pointer build, a baseline).
#
# The window is bench's timed_from_s .. timed_to_s (CLOCK_MONOTONIC, perf
# record -k CLOCK_MONOTONIC stamps its samples on the same clock). perf
# samples running threads only: at 2 threads a thread spinning at a barrier
# counts (group "threads"), a sleeping one does not, so the 1-thread
# figures are the ones to compare across builds.
set -euo pipefail
case "${1:-}" in -h | --help)
  echo "usage: scripts/step_profile.sh [BENCH ARGS...]"
  sed -n '2,21p' "$0" | sed 's/^# \{0,1\}//'
  exit 0 ;;
esac
bench=${CG_BENCH:-$(cd "$(dirname "$0")/.." && pwd)/build/tools/bench}
fail() { echo "step_profile: $*" >&2; exit 1; }
command -v perf >/dev/null || fail "needs perf (apt-get install linux-perf)"
[ -x "$bench" ] || fail "no $bench (build first: ninja -C build, or set CG_BENCH)"
args=("$@")
[ ${#args[@]} -gt 0 ] ||
  args=(--model seq2seq --preset base --precision bf16 --threads 1 --steps 20 --warmup 3)
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
if ! perf record -q -k CLOCK_MONOTONIC -F 999 -o "$dir/perf.data" -- "$bench" "${args[@]}" \
  >"$dir/bench.json" 2>"$dir/bench.err"; then
  cat "$dir/bench.err" >&2
  fail "the run failed (bench's or perf's message above; perf needs permission to sample)"
fi
window=$(python3 -c '
import json, sys
try:
    r = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
    print("%.6f,%.6f" % (r["timed_from_s"], r["timed_to_s"]))
except (ValueError, IndexError, KeyError, TypeError):
    sys.exit(1)' "$dir/bench.json") ||
  fail "bench printed no result line with timed_from_s and timed_to_s (an older bench?)"
perf report -i "$dir/perf.data" --time "$window" --no-children --sort dso,sym --stdio -q -n -g none \
  --percent-limit 0 >"$dir/report.txt" 2>/dev/null ||
  fail "perf report failed"
python3 - "$dir/bench.json" "$dir/report.txt" <<'PY'
import json, re, sys

bench = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
cpu = {}
for raw in open("/proc/cpuinfo"):
    k, _, v = raw.partition(":")
    k = k.strip()
    if k in ("model name", "cpu family", "model") and k not in cpu:
        cpu[k] = v.strip()
    if raw.strip() == "":
        break
# first match wins: packing before kernels (BLIS's bli_spackm_*), rounding
# before attention (attention's own rounding passes are rounding)
GROUPS = [
    ("os", None),  # [k] symbols, matched below
    ("packing", r"pack"),
    ("matrix kernels",
     r"^(kernel_(amx|native|native_in_place|emulated)|block_(avx2|wide)|tile_avx(2|512)|tiles_mul|cg_amx_emu_|bli_.*(asm|ukr|ker))"),
    ("rounding to bf16", r"round|cvt.*bf16"),
    ("attention rows", r"attn|attention|softmax|dsoft|^exp_sum|scale_mask"),
    ("norms", r"norm|xhat|^add_rows"),
    ("loss", r"loss|lce|logsumexp|cross_entropy|label_smooth|^row_exp_sum"),
    ("optimizer", r"update_chunk|adam|sgd|clip"),
    ("gemm driver", r"panel_times_rows|rows_times_block|gemm|matrix_mul|^matmul|store_tile"),
    # libgomp's waits and the chunk runner's own samples (core/shares.h)
    ("threads", r"gomp|^omp_|do_spin|do_wait|futex|shares_run|barrier"),
    ("memory", r"^__mem(set|cpy|move)|alloc|^_?free|^cfree"),
    ("elementwise", r"^seg_|act|gelu|relu|dropout|colsum|^ew_|split_k_add|^cg_k_|add|mul"),
    ("other", r""),
]
line = re.compile(r"^\s*[0-9.]+%\s+([0-9]+)\s+(\S+)\s+\[(.)\]\s+(.*?)\s*$")
share = {g: 0 for g, _ in GROUPS}
funcs = {g: {} for g, _ in GROUPS}
for raw in open(sys.argv[2]):
    m = line.match(raw)
    if not m:
        continue
    n, dso, kind, sym = int(m.group(1)), m.group(2), m.group(3), m.group(4)  # n: samples
    if sym.startswith("0x"):  # no symbol (a stripped library): its name
        sym = dso
    name = sym.split(".")[0] if not sym.startswith("__") else sym
    for g, rx in GROUPS:
        if (g == "os" and kind == "k") or (rx is not None and g != "os" and kind != "k"
                                            and re.search(rx, name)):
            share[g] += n
            funcs[g][sym] = funcs[g].get(sym, 0) + n  # a static in many files: one name
            break
total = sum(share.values())
if total <= 0:
    sys.exit("step_profile: no samples in the timed window")
for g in share:  # fractions of the window's samples
    share[g] /= total
inside = share["matrix kernels"]
print("%-18s %7s  %s" % ("group", "share", "largest functions"))
for g, _ in sorted(GROUPS, key=lambda x: -share[x[0]]):
    if share[g] == 0:
        continue
    top = sorted(((n, f) for f, n in funcs[g].items()), reverse=True)[:3]
    print("%-18s %6.1f%%  %s" % (g, 100 * share[g],
                                 ", ".join("%s %.1f" % (s, 100 * p / total) for p, s in top)))
print("outside the matrix kernels: %.1f%% of the timed steps' %d samples (%s, family %s model %s)"
      % (100 * (1 - inside), total, cpu.get("model name"), cpu.get("cpu family"), cpu.get("model")))
out = {"cpu": cpu.get("model name"), "cpu_family": cpu.get("cpu family"), "cpu_model": cpu.get("model")}
out.update({k: bench.get(k) for k in ("model", "preset", "precision", "threads", "step_ms_median")})
out.update({
    "samples": int(total),
    "in_kernels": round(inside, 4),
    "outside_kernels": round(1 - inside, 4),
    "groups": {g: {"share": round(share[g], 4),
                   "top": [[s, round(p / total, 4)] for p, s in sorted(((n, f) for f, n in funcs[g].items()), reverse=True)[:3]]}
               for g, _ in sorted(GROUPS, key=lambda x: -share[x[0]]) if share[g] > 0},
})
print(json.dumps(out))
PY
