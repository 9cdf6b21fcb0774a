#!/usr/bin/env bash
# One run of the translator's recipe ablation (issue 38; docs/zoo.md "The
# translator's recipe at 15 minutes"): train NAME with SEED for STEPS steps and
# the given train flags, keeping the last 5 evaluation checkpoints; average
# them; then score the last and the averaged checkpoint on the validation and
# the test split (beam 4). Each score is one JSON line appended to
# OUTDIR/results.jsonl; scripts/recipe_table.py makes the table from them.
#   scripts/recipe_run.sh OUTDIR NAME SEED STEPS [train flags...]
# e.g. scripts/recipe_run.sh runs default_s1 1 11000
#      scripts/recipe_run.sh runs d01_s2 2 11000 --dropout 0.1
# One thread a run (1 and 2 threads give the same bits), so two runs can go
# side by side on 2 cores. SEQ2SEQ names the binary (default
# build/models/seq2seq/seq2seq), DATA the pairs (default data/en_de_ding.tsv),
# EVAL_EVERY the evaluation interval (default 500).
set -euo pipefail
usage="usage: scripts/recipe_run.sh OUTDIR NAME SEED STEPS [train flags...]"
case "${1:-}" in -h | --help) echo "$usage"; sed -n 2,16p "$0" | sed 's/^# \{0,1\}//'; exit 0 ;; esac
[ $# -ge 4 ] || { echo "$usage (--help: more)" >&2; exit 2; }
out=$1 name=$2 seed=$3 steps=$4
shift 4
case $name in */* | '' | .*) echo "recipe_run: NAME '$name' must be a plain file name" >&2; exit 2 ;; esac
# checked here, before OUTDIR and the logs are made (train would refuse them later)
[[ $seed =~ ^[0-9]+$ ]] || { echo "recipe_run: SEED '$seed' is not a whole number" >&2; exit 2; }
[[ $steps =~ ^[1-9][0-9]*$ ]] || { echo "recipe_run: STEPS '$steps' is not a whole number above 0" >&2; exit 2; }
root=$(cd "$(dirname "$0")/.." && pwd)
s2s=${SEQ2SEQ:-$root/build/models/seq2seq/seq2seq}
data=${DATA:-$root/data/en_de_ding.tsv}
[ -x "$s2s" ] || { echo "recipe_run: $s2s not built (ninja -C build)" >&2; exit 1; }
[ -f "$data" ] || { echo "recipe_run: no data file '$data' (scripts/prepare_data.sh)" >&2; exit 1; }
data=$(cd "$(dirname "$data")" && pwd)/$(basename "$data") # the runs start in OUTDIR
mkdir -p "$out"
cd "$out"
# The programs' stderr goes to NAME.err; a step that fails says why here too.
failed() {
  local rc=$?
  echo "recipe_run: $1 failed (exit $rc): $(tail -n 1 "$name.err") (all of it: $out/$name.err)" >&2
  exit $rc
}
# NAME's files are replaced (--force below), its kept checkpoints too: one
# of an earlier run with more steps or another EVAL_EVERY would otherwise
# sort among the last 5 and be averaged with this run's
stale=("$name".step*.safetensors)
if [ -e "${stale[0]}" ]; then
  echo "recipe_run: removing ${#stale[@]} kept checkpoints of an earlier run of $name in $out" >&2
  rm -f -- "${stale[@]}"
fi
"$s2s" train --data "$data" --out "$name.safetensors" --force --steps "$steps" \
  --eval-every "${EVAL_EVERY:-500}" --keep-last 5 --test-limit 0 --threads 1 --seed "$seed" "$@" \
  >"$name.log" 2>"$name.err" || failed "train"
kept=("$name".step*.safetensors) # in step order: --keep-last pads the step to 8 digits
[ -e "${kept[0]}" ] || { echo "recipe_run: train wrote no $out/$name.step*.safetensors (STEPS below EVAL_EVERY?)" >&2; exit 1; }
((${#kept[@]} <= 5)) || kept=("${kept[@]: -5}")
"$s2s" average --force --out "$name.avg.safetensors" "${kept[@]}" >>"$name.err" 2>&1 || failed "average"
# one results.jsonl line: json.dumps escapes every character a flag, the
# name or the path may hold; eval's own line must parse as it is
result_line() {
  python3 -c 'import json, sys
ck, run, seed, flags, split, e = sys.argv[1:]
print(json.dumps({"ckpt": ck, "run": run, "seed": int(seed), "flags": flags, "split": split,
                  "eval": json.loads(e)}))' "$@"
}
for ck in "$name" "$name.avg"; do
  for split in valid test; do
    e=$("$s2s" eval --ckpt "$ck.safetensors" --split "$split" --beam 4 --threads 1 2>>"$name.err") ||
      failed "eval of $ck on $split"
    line=$(result_line "$ck" "$name" "$seed" "$*" "$split" "$e") ||
      { echo "recipe_run: eval of $ck on $split printed no JSON line: $e" >&2; exit 1; }
    echo "$line" >>results.jsonl
  done
done
