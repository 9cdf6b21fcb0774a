#!/usr/bin/env bash
# The zoo's models as library models (issue 33; meson suite 'models'): the
# examples written on the installed API (libcgrad-zoo, models/zoo/zoo.h)
# print, byte for byte, what the programs print:
#   1. examples/zoo_generate.c = `charlm sample` with the same flags (the
#      defaults; a prompt, top-k, temperature and seed; greedy; top-p; past
#      max_len, where the window slides), char and BPE checkpoints;
#   2. examples/zoo_translate.c = `seq2seq translate` (greedy and beam 4)
#      on a few sentences, one with characters the vocabulary lacks;
#   3. a checkpoint of the other model, a missing file: one line, exit 1;
#   1b. a gated feed-forward: a swiglu charlm generates, a geglu seq2seq
#      translates, as the programs do;
#   4. bf16-trained checkpoints (train's --precision auto on a native bf16
#      CPU): the examples decode in cg_zoo_precision, as the programs do.
#   test_zoo_lib.sh CHARLM SEQ2SEQ ZOO_GENERATE ZOO_TRANSLATE
set -uo pipefail
charlm=$1
seq2seq=$2
gen=$3
tr=$4
. "$(dirname "$0")/shell_lib.sh" zoo_lib
# fp32 checkpoints here, bf16 ones below (4.)
zoo_ckpts --precision fp32 # a.st (charlm), s.st (seq2seq) and the flags TINY
TINY+=(--precision fp32)
# a text with newlines: the default prompt (a newline) is in its vocabulary
# (a prompt character outside it is read as a substitute, which
# zoo_generate prints and `charlm sample` does not)
fold -w 60 -s c.txt >t.txt
"$charlm" train --data t.txt "${TINY[@]}" --steps 40 --out a.st --force >/dev/null 2>a.log ||
  { echo "charlm training failed: $(tail -1 a.log)" >&2; exit 1; }

# same NAME CMD1... -- CMD2...: both succeed with the same stdout
same() {
  local name=$1 a=() rc1=0 rc2=0
  shift
  while [ "$1" != "--" ]; do a+=("$1"); shift; done
  shift
  timeout 120 "${a[@]}" >one.out 2>one.err || rc1=$?
  timeout 120 "$@" >two.out 2>two.err || rc2=$?
  if [ $rc1 -ne 0 ] || [ $rc2 -ne 0 ]; then
    fail "$name: exit $rc1 / $rc2: $(tail -c 300 one.err) / $(tail -c 300 two.err)"
  elif ! cmp -s one.out two.out; then
    fail "$name: different output: $(diff one.out two.out | head -c 400)"
  elif [ ! -s one.out ]; then
    fail "$name: no output"
  else
    echo "ok: $name: $(wc -c <one.out) bytes, $(head -c 60 one.out | tr '\n' '|')"
  fi
}

for flags in "" "--prompt|the whale |--length|200|--top-k|5|--temperature|0.8|--seed|7" \
             "--prompt|call me|--length|100|--temperature|0" \
             "--length|50|--top-p|0.9|--seed|3"; do
  IFS='|' read -r -a f <<<"$flags"
  same "generate ${flags:-(defaults)}" "$charlm" sample --ckpt a.st --threads 1 "${f[@]}" -- \
    "$gen" --ckpt a.st "${f[@]}"
done

# a BPE checkpoint (skipped without SentencePiece)
rc=0
"$charlm" train --data t.txt "${TINY[@]}" --tokenizer bpe --vocab-size 300 --steps 10 \
  --out b.st >/dev/null 2>b.err || rc=$?
if [ $rc -eq 1 ] && grep -q unavailable b.err; then
  echo "skip: BPE: $(tail -1 b.err)"
elif [ $rc -ne 0 ]; then
  fail "bpe training: exit $rc: $(tail -c 300 b.err)"
else
  for flags in "--prompt|the sea|--length|60|--top-k|8|--seed|2" "--length|40|--temperature|0"; do
    IFS='|' read -r -a f <<<"$flags"
    same "generate bpe $flags" "$charlm" sample --ckpt b.st --threads 1 "${f[@]}" -- \
      "$gen" --ckpt b.st "${f[@]}"
  done
fi

# a gated feed-forward (--act swiglu; cg_zoo_load reads the act and fc3
# from the checkpoint), and seq2seq's with geglu
"$charlm" train --data t.txt "${TINY[@]}" --act swiglu --steps 10 --out g.st >/dev/null 2>g.err ||
  fail "charlm train --act swiglu: $(tail -c 300 g.err)"
same "generate swiglu" "$charlm" sample --ckpt g.st --threads 1 --length 60 --seed 4 -- \
  "$gen" --ckpt g.st --length 60 --seed 4
"$seq2seq" train --data p.tsv "${S2S[@]}" --precision fp32 --act geglu --steps 10 --out sg.st >/dev/null 2>sg.err ||
  fail "seq2seq train --act geglu: $(tail -c 300 sg.err)"
same "translate geglu" "$seq2seq" translate --ckpt sg.st --threads 1 "the cat 5 sat" -- \
  "$tr" --ckpt sg.st "the cat 5 sat"

sentences=("the cat 5 sat" "the cat 123 sat" "the cat 399 sat" "a dog sat")
same "translate greedy" "$seq2seq" translate --ckpt s.st --threads 1 "${sentences[@]}" -- \
  "$tr" --ckpt s.st "${sentences[@]}"
same "translate beam 4" "$seq2seq" translate --ckpt s.st --threads 1 --beam 4 \
  --length-penalty 0.8 "${sentences[@]}" -- \
  "$tr" --ckpt s.st --beam 4 --length-penalty 0.8 "${sentences[@]}"

# 4. bf16 training (skipped on a CPU with neither AVX512_BF16 nor AVX2)
rc=0
"$charlm" train --data t.txt "${TINY[@]/fp32/bf16}" --steps 40 --out a16.st >/dev/null 2>a16.log ||
  rc=$?
if [ $rc -eq 1 ] && grep -q "needs a CPU" a16.log; then
  echo "skip: bf16: $(tail -1 a16.log)"
elif [ $rc -ne 0 ]; then
  fail "bf16 charlm training: exit $rc: $(tail -c 300 a16.log)"
elif ! "$seq2seq" train --data p.tsv "${S2S[@]}" --steps 40 --precision bf16 --out s16.st \
  >/dev/null 2>s16.log; then
  fail "bf16 seq2seq training: $(tail -c 300 s16.log)"
else
  same "generate bf16 (defaults)" "$charlm" sample --ckpt a16.st --threads 1 -- "$gen" --ckpt a16.st
  same "translate bf16 beam 4" "$seq2seq" translate --ckpt s16.st --threads 1 --beam 4 \
    "${sentences[@]}" -- "$tr" --ckpt s16.st --beam 4 "${sentences[@]}"
fi

expect "generate from a seq2seq checkpoint" 1 "a seq2seq model has no generate" \
  "$gen" --ckpt s.st
expect "translate with a charlm checkpoint" 1 "a charlm model has no translate" \
  "$tr" --ckpt a.st "the cat"
expect "a missing checkpoint" 1 "nothere.st" "$gen" --ckpt nothere.st
# the examples' command lines: an unknown flag or one without its value is
# exit 2 (not translated as a sentence), --help is the usage on stdout, exit 0
expect "translate: an unknown flag" 2 "unknown flag '--bogus'" "$tr" --ckpt s.st --bogus x "the cat"
expect "translate: a flag without its value" 2 "--beam needs a value" "$tr" --ckpt s.st --beam
expect "generate: a stray argument" 2 "extra needs a value (or is unknown)" "$gen" --ckpt a.st extra
for p in "$gen" "$tr"; do
  rc=0
  "$p" --help >out.txt 2>err.txt || rc=$?
  if [ $rc -ne 0 ] || ! grep -q "^usage: " out.txt || [ -s err.txt ]; then
    fail "$(basename "$p") --help: exit $rc, stdout '$(head -c 100 out.txt)', stderr '$(head -c 100 err.txt)'"
  else
    echo "ok: $(basename "$p") --help: $(head -1 out.txt)"
  fi
done
finish
