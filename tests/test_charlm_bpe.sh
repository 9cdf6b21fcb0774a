#!/usr/bin/env bash
# charlm with BPE subwords (issue 15):
#   - bad flag combinations are refused: --vocab-size without --tokenizer bpe
#     or below 261, an unknown tokenizer (exit 2); --tokenizer on --resume
#     (exit 1, the checkpoint keeps its tokenizer);
#   - a --vocab-size too small for the text's characters is refused (exit 1);
#   - a bpe run of a few steps on a small text: the tokenizer is saved in the
#     checkpoint; sample (prompt encoded, text streamed), sample --attention
#     and eval read it from there; eval and the final JSON line give bits per
#     character; resume is bit-exact;
#   - a LoRA run on a bpe base merged (charlm merge): the base's tokenizer
#     kept, so eval reads the merged checkpoint without the base;
#   - a damaged tokenizer.spm tensor is refused with one line and exit 1.
# Skipped (exit 77) when the build lacks SentencePiece.
#   test_charlm_bpe.sh CHARLM CKPT_WRITER
set -uo pipefail
charlm=$1
tool=$2
. "$(dirname "$0")/shell_lib.sh" lmbpe
# a small text of many short lines, with some characters beyond ASCII
for i in $(seq 1 400); do
  echo "Line $i: the whale swam past the ship, and Ishmael watched the grey sea."
  echo "Über die Wellen — $i € later — the crew sang of Nantucket and of home."
done >text.txt
small=(--data text.txt --d 32 --H 2 --layers 1 --d-ff 64 --T 32 --batch-size 4 --threads 2
       --eval-every 3)

expect "--vocab-size without bpe" 2 "needs --tokenizer bpe" \
  "$charlm" train "${small[@]}" --vocab-size 500 --out x.st
expect "--vocab-size 260" 2 "at least 261" \
  "$charlm" train "${small[@]}" --tokenizer bpe --vocab-size 260 --out x.st
expect "--tokenizer word" 2 "choose char or bpe" \
  "$charlm" train "${small[@]}" --tokenizer word --out x.st

train_ok "bpe train" '"tokenizer": "bpe"' \
  "$charlm" train "${small[@]}" --tokenizer bpe --vocab-size 400 --steps 6 --out b.st
expect "--vocab-size too small for the text" 1 "at least 30[0-9] ids" \
  "$charlm" train "${small[@]}" --tokenizer bpe --vocab-size 300 --out x.st
[ "$("$tool" getmeta b.st tokenizer)" = bpe ] || fail "the checkpoint does not say tokenizer bpe"
"$tool" getmeta b.st vocab >/dev/null 2>&1 && fail "a bpe checkpoint has a char vocab"

# sample: the prompt as given, then the streamed text; greedy is repeatable
prompt='Über the whale'
if "$charlm" sample --ckpt b.st --prompt "$prompt" --length 20 --temperature 0 >s1.txt 2>s.err &&
   "$charlm" sample --ckpt b.st --prompt "$prompt" --length 20 --temperature 0 >s2.txt 2>/dev/null &&
   [ "$(head -c ${#prompt} s1.txt)" = "$(printf '%s' "$prompt" | head -c ${#prompt})" ] &&
   cmp -s s1.txt s2.txt && grep -q "20 tokens in" s.err; then
  echo "ok: bpe sample: $(head -c 80 s1.txt | tr '\n' ' ')"
else
  fail "bpe sample: $(tail -c 300 s.err)"
fi
if "$charlm" sample --ckpt b.st --prompt "$prompt" --length 0 >s0.txt 2>/dev/null &&
   [ "$(cat s0.txt)" = "$prompt" ]; then
  echo "ok: bpe sample of no tokens prints the prompt"
else
  fail "bpe sample --length 0: '$(cat s0.txt)'"
fi
"$charlm" sample --ckpt b.st --length 10 --attention att.png >/dev/null 2>a.err &&
  [ -s att.png ] && echo "ok: bpe attention picture" || fail "bpe attention: $(tail -1 a.err)"
if "$charlm" eval --ckpt b.st >e.out 2>e.err && grep -q '"bits_per_char": [0-9]' e.out &&
   grep -q '"tokenizer": "bpe"' e.out; then
  echo "ok: bpe eval: $(cat e.out)"
else
  fail "bpe eval: $(tail -c 300 e.err)"
fi

# resume is bit-exact with the tokenizer kept; a tokenizer flag is refused
"$charlm" train "${small[@]}" --tokenizer bpe --vocab-size 400 --steps 6 --stop-at 3 \
  --out r.st >/dev/null 2>r.err || fail "bpe --stop-at: $(tail -1 r.err)"
expect "bpe resume with --tokenizer" 2 "drop --tokenizer" \
  "$charlm" train --resume r.st --tokenizer char
if "$charlm" train --resume r.st >/dev/null 2>r.err && "$tool" same b.st r.st >/dev/null 2>&1
then
  echo "ok: bpe resume is bit-exact"
else
  fail "bpe resume differs from the straight run: $(tail -c 300 r.err)"
fi

# merge of a LoRA run on a BPE base: the merged checkpoint holds the base's
# tokenizer ("tokenizer": "bpe" and the tokenizer.spm bytes), so eval reads
# it with the base gone and gives the adapters' val_loss
lo=(--init-from b.st --data text.txt --lora-rank 2 --steps 3 --eval-every 3 --threads 1 --precision fp32)
"$charlm" train "${lo[@]}" --out bl.st >/dev/null 2>bl.err && "$charlm" eval --ckpt bl.st >bl.out 2>bl.err &&
  "$charlm" merge --out bm.st bl.st >/dev/null 2>bm.err || fail "bpe lora merge: $(tail -1 bl.err) $(tail -1 bm.err)"
mv b.st b.away
"$charlm" eval --ckpt bm.st >bm.out 2>bm.err || fail "bpe merged eval without its base: $(tail -1 bm.err)"
mv b.away b.st
merged=$(st_py bm.st b.st bm.out bl.out <<'PY'
t, m = load(sys.argv[1])
u, _ = load(sys.argv[2])
v = [json.loads(open(p).read().splitlines()[-1])['val_loss'] for p in sys.argv[3:5]]
print(m.get('tokenizer'), t.get('tokenizer.spm') == u['tokenizer.spm'], abs(v[0] - v[1]) < 1e-4)
PY
)
[ "$merged" = "bpe True True" ] && echo "ok: bpe merge: the base's tokenizer kept; eval without the base gives the adapters' val_loss" ||
  fail "bpe merge: '$merged' $(cat bm.out bl.out)"

# a damaged tokenizer
cp b.st d.st
"$tool" flipbyte d.st tokenizer.spm || fail "cannot damage d.st"
expect "damaged tokenizer.spm (sample)" 1 "tokenizer" "$charlm" sample --ckpt d.st --length 5
[ "$(wc -l <err.txt)" -eq 1 ] || fail "damaged tokenizer: more than one line: $(cat err.txt)"
expect "damaged tokenizer.spm (eval)" 1 "tokenizer" "$charlm" eval --ckpt d.st
expect "damaged tokenizer.spm (resume)" 1 "tokenizer" "$charlm" train --resume d.st --steps 9

# the train split in tokens, not characters, is what must be longer than a
# window: 900 "ab" merge into few long pieces, the 200 characters after
# them (the validation split) hardly at all, so the train split is the
# shorter in tokens; --T of its length is refused, one less trains
python3 -c 'import random
r = random.Random(1)
print("ab" * 900 + "".join(r.choice("cdefghijklmnopqrstuvwxyz ") for _ in range(199)))' >ab.txt
abm=(--data ab.txt --tokenizer bpe --vocab-size 270 --d 16 --H 2 --layers 1 --d-ff 32 --batch-size 4
     --threads 1 --steps 1)
"$charlm" train "${abm[@]}" --T 1000 --out x.st >/dev/null 2>err.txt
read -r ntr nva < <(sed -n 's/.*give train\/val splits of \([0-9]*\)\/\([0-9]*\),.*/\1 \2/p' err.txt)
if [ -n "${ntr:-}" ] && [ "$ntr" -lt "$nva" ]; then
  expect "a train split of --T tokens" 1 "train/val splits of $ntr/$nva, but windows of $ntr+1" \
    "$charlm" train "${abm[@]}" --T "$ntr" --out x.st
  train_ok "a train split of --T + 1 tokens" '"step": 1' "$charlm" train "${abm[@]}" --T $((ntr - 1)) --out x.st
else
  fail "ab.txt: not a train split shorter in tokens than the validation split: $(cat err.txt)"
fi
finish
