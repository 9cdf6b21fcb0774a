#!/usr/bin/env bash
# seq2seq with BPE subwords and the --max-minutes budget (issue 15):
#   - --vocab-size without --tokenizer bpe, or below 261, is refused (exit 2);
#   - --max-minutes ends a run that --steps would not end: it evaluates,
#     saves and prints the final JSON line, and the checkpoint loads;
#   - a bpe run of a few steps: the tokenizer is saved in the checkpoint and
#     read back by translate / eval / attention (decode(encode(text)) == text
#     through attention --target), resume is bit-exact, and a damaged
#     tokenizer.spm tensor is refused with one line and exit 1.
# The bpe part is skipped (exit 77) when the build lacks SentencePiece.
#   test_seq2seq_bpe.sh SEQ2SEQ CKPT_WRITER DATA
set -uo pipefail
seq2seq=$1
tool=$2
data=$3
. "$(dirname "$0")/shell_lib.sh" bpe
small=(--data "$data" --valid-size 20 --test-size 20 --test-limit 3 --examples 0 --d 32 --H 2
       --enc-layers 1 --dec-layers 1 --d-ff 64 --max-tokens 800 --threads 2 --eval-every 3)

expect "--vocab-size without bpe" 2 "needs --tokenizer bpe" \
  "$seq2seq" train "${small[@]}" --tokenizer char --vocab-size 500 --out x.st
expect "--vocab-size 260" 2 "at least 261" \
  "$seq2seq" train "${small[@]}" --tokenizer bpe --vocab-size 260 --out x.st
expect "--tokenizer word" 2 "choose char or bpe" \
  "$seq2seq" train "${small[@]}" --tokenizer word --out x.st
expect "--max-minutes 0" 2 "max-minutes" \
  "$seq2seq" train "${small[@]}" --max-minutes 0 --out x.st

# --max-minutes: 10^9 steps would never end; the budget (0.6 s) does, and
# the run ends as at its last step: evaluated there (no other evaluation
# is due before); the progress lines' ETA is the budget's end, not 10^9
# steps
if timeout 120 "$seq2seq" train "${small[@]}" --steps 1000000000 --max-minutes 0.01 \
     --eval-every 100000000 --log-every 10 --out mm.st >mm.out 2>mm.err; then
  line=$(tail -1 mm.out)
  if printf '%s' "$line" | grep -q '"max_minutes_reached": true' &&
     printf '%s' "$line" | grep -q '"val_bpc": [0-9]' &&
     grep -q 'max-minutes 0.01 reached at step' mm.err && [ -f mm.st ] &&
     "$seq2seq" eval --ckpt mm.st --test-limit 2 >/dev/null 2>&1 &&
     at=$(sed -n 's/.*max-minutes 0.01 reached at step \([0-9]*\).*/\1/p' mm.err) &&
     grep -q "^{\"step\": $at, \"train_loss\": [0-9.]*, \"val_loss\": " mm.st.metrics.jsonl &&
     grep -q ' ETA ' mm.err && ! grep ' ETA ' mm.err | grep -qv ' ETA 0m0[01]s$'; then
    echo "ok: --max-minutes: $line"
  else
    fail "--max-minutes: $line / $(tail -c 300 mm.err)"
  fi
else
  fail "--max-minutes: exit status $?: $(tail -c 300 mm.err)"
fi

# BPE
train_ok "bpe train" '"tokenizer": "bpe", "vocab": 400' \
  "$seq2seq" train "${small[@]}" --tokenizer bpe --vocab-size 400 --steps 6 --out b.st
[ "$("$tool" getmeta b.st tokenizer)" = bpe ] || fail "the checkpoint does not say tokenizer bpe"
"$tool" getmeta b.st vocab >/dev/null 2>&1 && fail "a bpe checkpoint has a char vocab"

# the checkpoint's tokenizer: translate, eval, and decode(encode(text)) == text
n=$(printf 'The house is small.\nI like tea.\n' | "$seq2seq" translate --ckpt b.st 2>/dev/null | wc -l)
[ "$n" -eq 2 ] && echo "ok: bpe translate: 2 lines" || fail "bpe translate: $n lines"
if "$seq2seq" eval --ckpt b.st --test-limit 3 --beam 2 >e.out 2>e.err &&
   grep -q '"chrf": [0-9]' e.out; then
  echo "ok: bpe eval: $(cat e.out)"
else
  fail "bpe eval: $(tail -c 300 e.err)"
fi
# decoding tuned on the validation split (issue 38): eval --split valid
if "$seq2seq" eval --ckpt b.st --split valid --test-limit 3 --beam 2 --length-penalty 1.2 \
     >v.out 2>v.err && grep -q '"split": "valid", "valid_pairs": 3' v.out &&
   grep -q '"length_penalty": 1.2' v.out; then
  echo "ok: eval --split valid: $(cat v.out)"
else
  fail "eval --split valid: $(cat v.out) $(tail -c 300 v.err)"
fi
expect "eval --split train" 2 "--split: 'train' is not one of test, valid" \
  "$seq2seq" eval --ckpt b.st --split train
text='Schöne Grüße aus Köln — 5 € für Ähren!'
expect "bpe attention round trip" 0 "translation: $text" \
  "$seq2seq" attention --ckpt b.st --text "The house." --target "$text" --out att
for f in encoder_self decoder_self cross; do
  [ -s "att/$f.png" ] || fail "attention: no att/$f.png"
done

# resume is bit-exact with the tokenizer kept
"$seq2seq" train "${small[@]}" --tokenizer bpe --vocab-size 400 --steps 6 --stop-at 3 \
  --out r.st >/dev/null 2>r.err || fail "bpe --stop-at: $(tail -1 r.err)"
if "$seq2seq" train --resume r.st >/dev/null 2>r.err && "$tool" same b.st r.st >/dev/null 2>&1
then
  echo "ok: bpe resume is bit-exact"
else
  fail "bpe resume differs from the straight run: $(tail -c 300 r.err)"
fi
expect "bpe resume with --vocab-size" 2 "drop --vocab-size" \
  "$seq2seq" train --resume r.st --vocab-size 500

# --max-len counts BPE pieces, not characters (round sixteen): at --max-len 110
# the sample's 360 training pairs all fit in pieces, 11 of them are longer in
# characters; a checkpoint without "max_len_tokens" (written before) resumes
# with the character count it was trained with
"$seq2seq" train "${small[@]}" --tokenizer bpe --vocab-size 400 --max-len 110 --steps 4 \
  --stop-at 2 --out ml.st >/dev/null 2>ml.err || fail "--max-len 110: $(tail -1 ml.err)"
grep -q "^train 360 pairs" ml.err && echo "ok: --max-len counts pieces: $(grep '^train [0-9]' ml.err)" ||
  fail "--max-len 110 dropped pairs by characters: $(grep '^train [0-9]' ml.err)"
cp ml.st ml_old.st
"$tool" setmeta ml_old.st train "$("$tool" getmeta ml.st train | sed 's/,"max_len_tokens":true//')" ||
  fail "cannot rewrite ml_old.st"
"$seq2seq" train --resume ml_old.st >/dev/null 2>ml.err || fail "old resume: $(tail -1 ml.err)"
grep -q "^train 349 pairs" ml.err && echo "ok: an older checkpoint keeps its count" ||
  fail "an older checkpoint resumed with another training set: $(grep '^train [0-9]' ml.err)"

# a damaged tokenizer
cp b.st d.st
"$tool" flipbyte d.st tokenizer.spm || fail "cannot damage d.st"
expect "damaged tokenizer.spm (translate)" 1 "tokenizer" \
  "$seq2seq" translate --ckpt d.st "The house."
[ "$(grep -c "^seq2seq" err.txt)" -eq 1 ] || fail "damaged tokenizer: more than one line: $(cat err.txt)"
expect "damaged tokenizer.spm (resume)" 1 "tokenizer" "$seq2seq" train --resume d.st --steps 9

finish
