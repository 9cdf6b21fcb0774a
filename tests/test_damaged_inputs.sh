#!/usr/bin/env bash
# Damaged checkpoints and hostile inputs (issue 16; meson suite 'reliability').
# Each case must end with exit status 1 and one clear message, within a time
# limit (no crash, no hang, no silent success).
#   test_damaged_inputs.sh CHARLM SEQ2SEQ CKPT_WRITER BENCH
set -uo pipefail
charlm=$1
seq2seq=$2
tool=$3
bench=$4
. "$(dirname "$0")/shell_lib.sh" damaged
# edit_train FILE SED: rewrite the "train" metadata of FILE with sed
edit_train() {
  local j
  j=$("$tool" getmeta "$1" train) || { fail "no train metadata in $1"; return; }
  "$tool" setmeta "$1" train "$(printf '%s' "$j" | sed -e "$2")" || fail "cannot edit $1"
}

for ((i = 0; i < 60; i++)); do printf 'the cat %d sat\tdie katze %d sass\n' $i $i; done >p.tsv
s2s=(--tokenizer char --data p.tsv --steps 6 --valid-size 5 --test-size 5 --test-limit 0 --max-tokens 200
     --threads 1 --eval-every 100)
"$seq2seq" train "${s2s[@]}" --stop-at 3 --out s.st >/dev/null 2>s.log ||
  { echo "seq2seq training failed: $(tail -1 s.log)" >&2; exit 1; }

# seq2seq: "epoch": 0 with a pos below the batch count (was a SEGV)
cp s.st e0.st && edit_train e0.st 's/"epoch":1,/"epoch":0,/'
refused "seq2seq epoch 0" "bad trainer position" "$seq2seq" train --resume e0.st --threads 1
# seq2seq: "epoch": 1e15 (was 10^15 shuffles)
cp s.st e15.st && edit_train e15.st 's/"epoch":1,/"epoch":1e15,/'
refused "seq2seq epoch 1e15" "bad trainer position" "$seq2seq" train --resume e15.st --threads 1
# seq2seq: a seed past 32 bits (numpy's RandomState orders the data)
cp s.st sd.st && edit_train sd.st 's/"seed":"1"/"seed":"4294967296"/'
refused "seq2seq seed 2^32" "its seed 4294967296 is out of range \[0, 4294967295\]" \
  "$seq2seq" train --resume sd.st --steps 8 --threads 1
# a training state that is not JSON: damaged, not absent (it said "holds
# no training state")
cp s.st tj.st && "$tool" setmeta tj.st train '{"steps": 6,'
refused "seq2seq damaged training state" "its training state is damaged" "$seq2seq" train --resume tj.st --threads 1
# seq2seq: the config's max_len below the recipe's (it trained until a
# long pair came, then failed)
cp s.st ml.st
cfg=$("$tool" getmeta ml.st config | sed -e 's/"max_len": [0-9]*/"max_len": 3/')
"$tool" setmeta ml.st config "$cfg"
refused "seq2seq max_len edited" "config's max_len 3 is not its training state's" "$seq2seq" train --resume ml.st --threads 1
# seq2seq: an unknown extra tensor, on resume and on translate
cp s.st extra.st && "$tool" addtensor extra.st encoder.layers.7.ff.fc1.weight
refused "seq2seq extra tensor (resume)" "not a parameter" "$seq2seq" train --resume extra.st --threads 1
refused "seq2seq extra tensor (translate)" "not a parameter" "$seq2seq" translate --ckpt extra.st hello
# seq2seq: config says 0 encoder layers while the file holds them
cp s.st l0.st
cfg=$("$tool" getmeta l0.st config | sed -e 's/"enc_layers": [0-9]*/"enc_layers": 0/')
"$tool" setmeta l0.st config "$cfg"
refused "seq2seq 0 layers" "not a parameter" "$seq2seq" translate --ckpt l0.st hello
# a decoder of 0 layers is no model (it never reads the source)
cp s.st d0.st
cfg=$("$tool" getmeta d0.st config | sed -e 's/"dec_layers": [0-9]*/"dec_layers": 0/')
"$tool" setmeta d0.st config "$cfg"
refused "seq2seq 0 decoder layers" "dec_layers must be >= 1 (got 0)" "$seq2seq" translate --ckpt d0.st hello

# charlm: the same two model damages
words=(the a whale sea ship captain ahab white call me ishmael some years ago)
for ((i = 0; i < 300; i++)); do printf '%s ' "${words[$(((i * 7 + i / 3) % ${#words[@]}))]}"; done >tiny.txt
lm=(--data tiny.txt --d 16 --H 2 --layers 1 --d-ff 32 --T 16 --batch-size 4 --threads 1 --eval-every 10)
"$charlm" train "${lm[@]}" --steps 4 --out c.st >/dev/null 2>c.log ||
  { echo "charlm training failed: $(tail -1 c.log)" >&2; exit 1; }
cp c.st cextra.st && "$tool" addtensor cextra.st blocks.3.ln1.weight
refused "charlm extra tensor (sample)" "not a parameter" "$charlm" sample --ckpt cextra.st --length 5
refused "charlm extra tensor (resume)" "not a parameter" "$charlm" train --resume cextra.st --steps 8 --threads 1
cp c.st cl0.st
cfg=$("$tool" getmeta cl0.st config | sed -e 's/"layers": [0-9]*/"layers": 0/')
"$tool" setmeta cl0.st config "$cfg"
refused "charlm 0 layers" "not a parameter" "$charlm" sample --ckpt cl0.st --length 5

# --temperature 1e-40 is greedy decoding (it sampled the last characters)
"$charlm" sample --ckpt c.st --prompt "the " --length 40 --temperature 0 >g0.txt 2>/dev/null
"$charlm" sample --ckpt c.st --prompt "the " --length 40 --temperature 1e-40 >g1.txt 2>/dev/null
[ -s g0.txt ] && cmp -s g0.txt g1.txt && echo "ok: --temperature 1e-40 == greedy" ||
  fail "--temperature 1e-40 differs from greedy: '$(head -c 60 g1.txt)' vs '$(head -c 60 g0.txt)'"
# every JSON line parses: NaN is null (charlm eval of a model that gives NaN
# from finite but huge weights -- a NaN weight is refused at load --, bench
# with fewer than 10 steps printed "rss_mb_step10": nan)
cp c.st nan.st && "$tool" setval nan.st ln_f.weight 3e38 && "$tool" setval nan.st ln_f.bias -3e38
"$charlm" eval --ckpt nan.st --data tiny.txt >eval.json 2>/dev/null
json_ok "charlm eval of a NaN model" eval.json
grep -q '"val_loss": null' eval.json || fail "charlm eval: val_loss is not null: $(cat eval.json)"
"$bench" --model charlm --preset tiny --steps 3 --warmup 1 --threads 1 >bench.json 2>/dev/null
json_ok "bench --steps 3" bench.json
# hostile data: /dev/zero (was read until memory ran out), a directory, a
# pair file of empty sides (trained, then every save failed)
refused "charlm --data /dev/zero" "NUL byte at offset 0" "$charlm" train "${lm[@]}" --data /dev/zero --steps 2 --out z.st
refused "seq2seq --data /dev/zero" "NUL byte at offset 0" "$seq2seq" train "${s2s[@]}" --data /dev/zero --out z2.st
refused "charlm --data DIR" "is a directory" "$charlm" train "${lm[@]}" --data . --steps 2 --out z.st
for ((i = 0; i < 60; i++)); do printf '\t\n'; done >empty.tsv
refused "seq2seq empty sides" "empty source" "$seq2seq" train "${s2s[@]}" --data empty.tsv --out e.st
[ ! -e e.st ] || fail "seq2seq empty sides: a checkpoint was written"
# --max-len 3 said "within 1 characters"
refused "seq2seq --max-len 3" "fits --max-len 3 (both sides at most 1 character," "$seq2seq" train "${s2s[@]}" --max-len 3 --out m.st
# bench's errors were 5 lines (the whole usage) and did not name the bad value
rc=0
"$bench" --steps 12x >out.txt 2>err.txt || rc=$?
if [ "$rc" -ne 2 ] || [ "$(wc -l <err.txt)" -ne 1 ] || ! grep -q -- "--steps: '12x' is not an integer" err.txt; then
  fail "bench --steps 12x: exit $rc, stderr: $(cat err.txt)"
else
  echo "ok: bench --steps 12x: $(cat err.txt)"
fi
# seq2seq warns about characters outside its vocabulary (it mapped them silently)
timeout 60 "$seq2seq" translate --ckpt s.st $'the c\xc3\xb6t' >/dev/null 2>err.txt
grep -q "1 character(s) of sentence 1 are not in the vocabulary (first U+00F6" err.txt &&
  echo "ok: seq2seq unknown characters: $(tail -1 err.txt)" ||
  fail "seq2seq unknown characters: no warning: $(tail -c 300 err.txt)"
# translate: read errors are errors, not the end of input
refused "translate < DIR" "read error" sh -c '"$1" translate --ckpt s.st < .' sh "$seq2seq"
refused "translate < /dev/zero" "NUL byte" sh -c '"$1" translate --ckpt s.st < /dev/zero' sh "$seq2seq"
# the data a checkpoint was trained on (absolute path, size, XXH3): resume
# and eval refuse another file, naming the difference; a moved copy named
# by --data is the same data
sed 's/whale/whalf/' tiny.txt >edited.txt
head -c 1000 tiny.txt >short.txt
cp tiny.txt moved.txt
refused "charlm resume, edited data" "same size.*different checksum" "$charlm" train --resume c.st --data edited.txt --steps 6 --threads 1 --out r1.st
refused "charlm eval, edited data" "different checksum" "$charlm" eval --ckpt c.st --data edited.txt
refused "charlm eval, another file" "short.txt' is not the data this checkpoint was trained on" "$charlm" eval --ckpt c.st --data short.txt
timeout 60 "$charlm" train --resume c.st --data moved.txt --steps 6 --threads 1 --out r2.st >/dev/null 2>err.txt &&
  timeout 60 "$charlm" eval --ckpt c.st --data moved.txt >/dev/null 2>>err.txt &&
  echo "ok: charlm resume and eval of a moved copy" || fail "charlm moved copy refused: $(tail -c 300 err.txt)"
sed 's/katze 1 /katze 9 /' p.tsv >p2.tsv
refused "seq2seq resume, other data" "p2.tsv' is not the data this checkpoint" "$seq2seq" train --resume s.st --data p2.tsv --threads 1 --out r3.st
refused "seq2seq eval, other data" "different checksum" "$seq2seq" eval --ckpt s.st --data p2.tsv --test-limit 1 --threads 1

# a corpus above the input limit (CG_MAX_INPUT_MB)
head -c 2000000 /dev/zero | tr '\0' 'a' >big.txt
refused "charlm input limit" "larger than 1.0 MB, the input limit set by CG_MAX_INPUT_MB" env CG_MAX_INPUT_MB=1 "$charlm" train "${lm[@]}" --data big.txt --steps 2 --out z.st

finish
