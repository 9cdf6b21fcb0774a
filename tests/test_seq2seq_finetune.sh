#!/usr/bin/env bash
# seq2seq train --init-from BASE (fairseq's --restore-file with
# --reset-optimizer, --reset-dataloader and --reset-lr-scheduler):
#   1. a new run from BASE's weights: at step 0 its checkpoint holds the
#      moving average BASE's run kept (the default), or with --no-ema its
#      trained weights, bit for bit; BASE's shape and tokenizer, recorded
#      as "init_from" (BASE's path, size, checksum, step); the run on other
#      data (the pairs turned round) trains, translates with and without
#      the cache alike, and --stop-at then --resume gives the bytes of the
#      run uninterrupted; --dropout, --label-smoothing and --word-dropout
#      are the new run's when given; BASE is never written; data with
#      characters outside BASE's vocabulary trains, a warning counting them
#   2. refusals, one line: flags that contradict BASE (--d, --max-len,
#      --tokenizer, --pos-enc: exit 1, naming them), a charlm checkpoint
#      or a missing file as BASE (exit 1), --init-from with --resume and
#      --no-ema without --init-from (exit 2)
#   test_seq2seq_finetune.sh SEQ2SEQ CHARLM
set -uo pipefail
seq2seq=$1
charlm=$2
. "$(dirname "$0")/shell_lib.sh" seq2seq_finetune
zoo_data
S=(--threads 1 --max-tokens 200 --valid-size 20 --test-size 20 --test-limit 2)
"$seq2seq" train --data p.tsv --tokenizer char --d 16 --H 4 --enc-layers 1 --dec-layers 1 --d-ff 32 \
  --max-len 64 --steps 30 --ema-decay 0.9 "${S[@]}" --out b.st >/dev/null 2>b.err ||
  fail "base: $(tail -1 b.err)"
cp b.st b.copy
awk -F'\t' '{print $2 "\t" $1}' p.tsv >q.tsv # the pairs turned round

# ---- 1.
# same_weights A B PREFIX: every parameter of A is B's PREFIX+name, bytes and all
same_weights() {
  st_py "$@" <<'PY'
a, b, pre = load(sys.argv[1])[0], load(sys.argv[2])[0], sys.argv[3]
names = [k for k in a if not k.startswith(('ema.', 'optim.'))]
print(len(names) > 10 and all(a[k] == b[pre + k] for k in names))
PY
}
"$seq2seq" train --data q.tsv --init-from b.st --stop-at 0 "${S[@]}" --out f0.st >/dev/null 2>f0.err &&
  [ "$(same_weights f0.st b.st ema.)" = True ] &&
  echo "ok: --init-from: step 0 holds the base's moving average" ||
  fail "--init-from at step 0: $(same_weights f0.st b.st ema.) $(tail -1 f0.err)"
"$seq2seq" train --data q.tsv --init-from b.st --no-ema --stop-at 0 "${S[@]}" --out n0.st >/dev/null 2>&1 &&
  [ "$(same_weights n0.st b.st '')" = True ] &&
  echo "ok: --init-from --no-ema: step 0 holds the base's trained weights" ||
  fail "--no-ema at step 0: $(same_weights n0.st b.st '')"
F=(--data q.tsv --init-from b.st --steps 20 --eval-every 10 --dropout 0.1 --label-smoothing 0.2
  --word-dropout 0.05 "${S[@]}")
"$seq2seq" train "${F[@]}" --out f.st >f.out 2>f.err || fail "fine-tune: $(tail -1 f.err)"
origin=$(st_py f.st <<'PY'
import json, os
t, m = load(sys.argv[1])
o = json.loads(m['init_from'])
print(os.path.basename(o['path']), o['step'], m['step'], 'ema.emb.weight' in t)
PY
)
[ "$origin" = "b.st 30 20 False" ] &&
  [ "$(cfg_key f.st d) $(cfg_key f.st max_len) $(cfg_key f.st dropout)" = "16 64 0.1" ] &&
  [ "$(cfg_key f.st label_smoothing) $(cfg_key f.st word_dropout)" = "0.2 0.05" ] &&
  grep -q '"init_from"' f.out && grep -q "(fine-tuning)" f.err &&
  echo "ok: the run records its base (b.st at step 30), its shape, and the new recipe" ||
  fail "fine-tune's record: '$origin' $(cfg_key f.st dropout) $(tail -1 f.out)"
intact "the base" b.st b.copy
"$seq2seq" train "${F[@]}" --stop-at 10 --out h.st >/dev/null 2>&1 &&
  "$seq2seq" train --resume h.st --threads 1 >/dev/null 2>h.err && cmp -s f.st h.st &&
  echo "ok: --stop-at 10 then --resume: the bytes of the fine-tune uninterrupted" ||
  fail "fine-tune resume: $(tail -1 h.err) $(cmp f.st h.st)"
cut -f1 q.tsv | sed -n '1,6p' >src.txt
"$seq2seq" translate --ckpt f.st --beam 3 --threads 1 <src.txt >c.out 2>/dev/null &&
  "$seq2seq" translate --ckpt f.st --beam 3 --threads 1 --no-cache <src.txt >n.out 2>/dev/null &&
  cmp -s c.out n.out && [ "$(wc -l <c.out)" = 6 ] &&
  echo "ok: the fine-tuned model translates, cached as recomputed" || fail "translate the fine-tune"

sed 's/a/§/g' q.tsv >odd.tsv # a character the base's vocabulary lacks
"$seq2seq" train --data odd.tsv --init-from b.st --steps 2 "${S[@]}" --out o.st >/dev/null 2>o.err &&
  grep -q "character(s) of the training pairs are not in the vocabulary (first U+00A7 '§'); they are read as <unk>" o.err &&
  echo "ok: new characters: read as <unk>, the training pairs' counted in a warning" ||
  fail "new characters: $(head -3 o.err)"

# ---- 2.
expect "--d against the base" 1 "'b.st' fixes the model's shape and tokenizer (d=16 H=4 enc_layers=1" \
  "$seq2seq" train --data q.tsv --init-from b.st --d 32 "${S[@]}" --out x.st
expect "--max-len against the base" 1 "'b.st' fixes max_len 64 (its longest sequence); --max-len 100" \
  "$seq2seq" train --data q.tsv --init-from b.st --max-len 100 "${S[@]}" --out x.st
expect "--tokenizer against the base" 1 "--tokenizer bpe contradicts it" \
  "$seq2seq" train --data q.tsv --init-from b.st --tokenizer bpe "${S[@]}" --out x.st
expect "--pos-enc against the base" 1 "--pos-enc rope contradicts it" \
  "$seq2seq" train --data q.tsv --init-from b.st --pos-enc rope "${S[@]}" --out x.st
"$charlm" train --data c.txt --d 16 --H 2 --layers 1 --d-ff 32 --T 16 --steps 2 --threads 1 \
  --out lm.st >/dev/null 2>&1 || fail "charlm base"
expect "a charlm base" 1 "--init-from: 'lm.st' is not a seq2seq checkpoint" \
  "$seq2seq" train --data q.tsv --init-from lm.st "${S[@]}" --out x.st
expect "a missing base" 1 "--init-from: checkpoint 'nope.st'" \
  "$seq2seq" train --data q.tsv --init-from nope.st "${S[@]}" --out x.st
expect "--init-from with --resume" 2 "give one of them" \
  "$seq2seq" train --init-from b.st --resume f.st
expect "--no-ema alone" 2 "--no-ema needs --init-from" \
  "$seq2seq" train --data q.tsv --no-ema "${S[@]}" --out x.st
[ ! -e x.st ] && echo "ok: nothing written by the refusals" || fail "x.st written"
finish
