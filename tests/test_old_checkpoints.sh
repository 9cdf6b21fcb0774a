#!/usr/bin/env bash
# Checkpoints kept from earlier builds (meson suite 'models'; the files and
# how they were made: tests/fixtures/old_ckpts/make.sh):
#   1. d6e90db's charlm (2026-11-23, the first, flat training state): it
#      samples and evaluates as d6e90db did and --init-from starts a run
#      from it; --resume, which cannot continue that layout, says so in one
#      line naming the earlier build (it said '"grad_accum" is missing', as
#      of a damaged file); the same for a seq2seq state of that layout
#   2. 18959d4's charlm (2026-11-27), its LoRA adapter (the base moved:
#      --base) and a BPE charlm: the same samples, and --resume continues
#      each as 18959d4 continued it
#   test_old_checkpoints.sh CHARLM SEQ2SEQ FIXTURES
set -uo pipefail
charlm=$1
seq2seq=$2
fx=$3
. "$(dirname "$0")/shell_lib.sh" old_ckpts
cp "$fx"/*.st "$fx"/c.txt .
mkdir -p base
cp "$fx"/lm_char.st base/lm_char.st

# CMD's standard output is the bytes of file want
same_text() {
  local name=$1 want=$2
  shift 2
  expect "$name" 0 "" "$@"
  if cmp -s out.txt "$want"; then
    echo "ok: $name: the earlier build's text"
  else
    fail "$name: '$(cat out.txt)', the earlier build '$(cat "$want")'"
  fi
}
# exactly one line on stderr
one_line() {
  [ "$(wc -l <err.txt)" -eq 1 ] || fail "$1: $(wc -l <err.txt) lines on stderr: $(cat err.txt)"
}

echo "== 1. d6e90db's charlm: the flat training state"
same_text "sample d6e90db" "$fx/lm_d6e90db.sample" \
  "$charlm" sample --ckpt lm_d6e90db.st --length 40 --seed 3 --threads 1
expect "eval d6e90db" 0 "" "$charlm" eval --ckpt lm_d6e90db.st --data c.txt --threads 1
same_json "eval d6e90db" "$fx/lm_d6e90db.eval" out.txt 2e-4
cp lm_d6e90db.st r.st
refused "resume d6e90db" "r.st' was written by an earlier cgrad (2026-11-23 or before" \
  "$charlm" train --resume r.st --data c.txt --steps 12 --threads 1
one_line "resume d6e90db"
grep -q "sample, eval, average and train --init-from read it" err.txt ||
  fail "resume d6e90db: the message does not say what still reads it: $(cat err.txt)"
cmp -s r.st lm_d6e90db.st || fail "resume d6e90db: the checkpoint was changed"
train_ok "--init-from d6e90db" '"step": 4' \
  "$charlm" train --init-from lm_d6e90db.st --data c.txt --steps 4 --T 16 --batch-size 4 \
  --threads 1 --eval-every 2 --out ft.st
# seq2seq's flat state of that time (its keys; d6e90db's seq2seq had only
# 128-wide presets, too large to keep), over a small checkpoint of today
zoo_ckpts
# a seq2seq state of before "pad_to_multiple" and "max_len_tokens" (its
# --max-len counted characters; no padding): resumed
cp s.st s0.st
st_meta s0.st "del t['model']['pad_to_multiple'], t['model']['max_len_tokens']" ||
  fail "could not write the state without pad_to_multiple"
train_ok "seq2seq resume without pad_to_multiple and max_len_tokens" '"step": 8' \
  "$seq2seq" train --resume s0.st --data p.tsv --steps 8 --threads 1
st_meta s.st 't = {
    "data": "p.tsv", "dropout_counter": "0", "dropout_seed": "11400714819323198484",
    "elapsed": 0.2, "epoch": 1, "factor": 0.25, "max_len": 256, "max_tokens": 200, "pos": 4,
    "preset": "tiny", "recent": [3.2, 3.1], "seed": "1", "steps": 4, "test_size": 20,
    "valid_size": 20, "warmup": 400,
    "history": {"dense_acc": {"loss": "0", "n": 0, "step": 0}, "dense_every": 10,
                "dense_loss": [], "dense_step": [], "step": [4], "train": [3.2], "val": [3.1]}}' ||
  fail "could not write the flat seq2seq state"
refused "seq2seq resume, flat state" "s.st' was written by an earlier cgrad (2026-11-23 or before" \
  "$seq2seq" train --resume s.st --data p.tsv --steps 8 --threads 1
one_line "seq2seq resume, flat state"
grep -q "translate, eval and average read it" err.txt ||
  fail "seq2seq resume, flat state: the message does not say what still reads it: $(cat err.txt)"
expect "seq2seq translate, flat state" 0 "" "$seq2seq" translate --ckpt s.st --threads 1 "the cat 7 sat"

echo "== 2. 18959d4's charlm, LoRA adapter and BPE charlm"
same_text "sample 18959d4 char" "$fx/lm_char.sample" \
  "$charlm" sample --ckpt lm_char.st --length 40 --seed 3 --threads 1
same_text "sample 18959d4 lora" "$fx/lm_lora.sample" \
  "$charlm" sample --ckpt lm_lora.st --base base/lm_char.st --length 40 --seed 3 --threads 1
rc=0
"$charlm" sample --ckpt lm_bpe.st --length 40 --seed 3 --threads 1 >out.txt 2>err.txt || rc=$?
skip_if_no_bpe "$rc" err.txt
cmp -s out.txt "$fx/lm_bpe.sample" && echo "ok: sample 18959d4 bpe: the earlier build's text" ||
  fail "sample 18959d4 bpe: exit $rc, '$(cat out.txt)', the earlier build '$(cat "$fx/lm_bpe.sample")'"
# --resume: the losses of 18959d4's own resumed runs
for m in lm_char lm_lora lm_bpe; do
  data=c.txt extra=()
  [ $m = lm_bpe ] && data=text.txt
  [ $m = lm_lora ] && extra=(--base base/lm_char.st)
  if [ $m = lm_bpe ]; then
    for i in $(seq 1 400); do
      echo "Line $i: the whale swam past the ship, and Ishmael watched the grey sea."
      echo "Über die Wellen — $i € later — the crew sang of Nantucket and of home."
    done >text.txt
  fi
  train_ok "resume 18959d4 $m" '"step": 12' \
    "$charlm" train --resume $m.st "${extra[@]}" --data $data --steps 12 --threads 1
  same_json "resume 18959d4 $m" "$fx/$m.resumed" b.out 2e-3 tokens_per_s elapsed_s init_from
done
finish
