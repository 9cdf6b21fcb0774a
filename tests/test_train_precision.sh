#!/usr/bin/env bash
# `charlm train --precision bf16` (meson suite 'reliability'):
#   1. resume is bit-identical in bf16: 40 steps in one run == 20 steps
#      (--stop-at), then --resume to 40 (parameters and optimizer state);
#   2. the checkpoint keeps the precision: the resumed run and `eval` use
#      bf16 (the JSON lines say so; eval's loss is the trainer's final one);
#      a bf16 run differs from an fp32 one;
#   3. --precision on resume is refused like the other recipe flags, and a
#      bad value is a bad command line (exit 2).
#   test_train_precision.sh CHARLM CKPT_WRITER
set -euo pipefail
charlm=$1
tool=$2
dir=$(mktemp -d "${TMPDIR:-/tmp}/cg_precision.XXXXXX")
trap 'rm -rf "$dir"' EXIT
cd "$dir"
fail() { echo "test_train_precision: $*" >&2; exit 1; }
field() { tail -1 "$2" | sed -n "s/.*\"$1\": \"\{0,1\}\([^,\"}]*\).*/\1/p"; }
words=(the a whale sea ship captain ahab white call me ishmael some years ago never mind how long)
for ((i = 0; i < 300; i++)); do
  printf '%s ' "${words[$(((i * 7 + i / 3) % ${#words[@]}))]}" "${words[$(((i * 5 + 3) % ${#words[@]}))]}"
  ((i % 6 == 5)) && printf '\n'
done >tiny.txt
model=(--data tiny.txt --d 16 --H 2 --layers 1 --d-ff 32 --T 16 --batch-size 4 --threads 1
       --eval-every 10 --seed 3)

# 1. bf16 resume bit-identity
"$charlm" train "${model[@]}" --precision bf16 --steps 40 --out full.st >full.json 2>full.log ||
  fail "bf16 training failed: $(tail -1 full.log)"
grep -q 'precision bf16' full.log || fail "no precision on the start-up line: $(head -3 full.log)"
[ "$(field precision full.json)" = bf16 ] || fail "JSON line without \"precision\": \"bf16\": $(cat full.json)"
"$charlm" train "${model[@]}" --precision bf16 --steps 40 --stop-at 20 --out half.st >/dev/null 2>half.log ||
  fail "bf16 training to step 20 failed: $(tail -1 half.log)"
cp half.st half20.st
"$charlm" train --resume half.st --threads 1 >resume.json 2>resume.log ||
  fail "bf16 resume failed: $(tail -1 resume.log)"
[ "$(field precision resume.json)" = bf16 ] || fail "the resumed run is not bf16: $(cat resume.json)"
"$tool" same full.st half.st || fail "bf16: 40 steps != 20 steps + resume to 40"
echo "bf16 resume: 40 steps == 20 + 20 resumed (bit-identical parameters and optimizer state)"

# 2. bf16 is not fp32; eval uses the checkpoint's precision
"$charlm" train "${model[@]}" --steps 40 --out fp32.st >fp32.json 2>fp32.log ||
  fail "fp32 training failed: $(tail -1 fp32.log)"
[ "$(field precision fp32.json)" = fp32 ] || fail "fp32 run: $(cat fp32.json)"
if "$tool" same full.st fp32.st 2>/dev/null; then fail "a bf16 run equals the fp32 run"; fi
"$charlm" eval --ckpt full.st --threads 1 >eval.json 2>eval.log || fail "eval failed: $(tail -1 eval.log)"
[ "$(field precision eval.json)" = bf16 ] || fail "eval of a bf16 checkpoint is not bf16: $(cat eval.json)"
"$charlm" eval --ckpt fp32.st --threads 1 >eval32.json 2>eval.log || fail "eval failed: $(tail -1 eval.log)"
[ "$(field precision eval32.json)" = fp32 ] || fail "eval of an fp32 checkpoint: $(cat eval32.json)"
[ "$(field val_loss eval.json)" = "$(field val_loss full.json)" ] ||
  fail "eval of the bf16 checkpoint: val_loss $(field val_loss eval.json), training's $(field val_loss full.json)"
echo "bf16 differs from fp32; eval of the bf16 checkpoint gives its training loss $(field val_loss eval.json)"

# 3. refused on resume, bad values
rc=0
"$charlm" train --resume half20.st --precision fp32 --threads 1 --out x.st >/dev/null 2>refuse.log || rc=$?
[ "$rc" -eq 1 ] && grep -q 'drop --precision' refuse.log ||
  fail "--precision fp32 on resume of a bf16 checkpoint: exit $rc: $(cat refuse.log)"
[ ! -e x.st ] || fail "a refused resume wrote a checkpoint"
rc=0
"$charlm" train "${model[@]}" --precision fp16 --steps 2 --out y.st >/dev/null 2>bad.log || rc=$?
[ "$rc" -eq 2 ] && grep -q -- '--precision' bad.log || fail "--precision fp16: exit $rc: $(cat bad.log)"
echo "refused: $(tail -1 refuse.log)"
