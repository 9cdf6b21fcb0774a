#!/usr/bin/env bash
# seq2seq translate --sampling (fairseq-generate's --sampling,
# --sampling-topk, --sampling-topp, --temperature; back-translation's
# decoding), on a small model trained here:
#   1. one line out per line in; the same --seed gives the same lines, another
#      seed others; a sentence's draws come from its own generator, seeded
#      by --seed and its line number, so other lines before it do not change
#      its translation; sampling
#      differs from the greedy output, --temperature 0 and --sampling-topk 1
#      are the greedy output
#   2. refusals, one line on stderr, nothing on stdout, exit 2: --beam or
#      --nbest with --sampling, the sampling flags without it, --sampling-topp 0
# The draws themselves are checked against recomputed logits in
# test_seq2seq's test_sample_decode.
#
#   test_sampling.sh SEQ2SEQ
set -euo pipefail
seq2seq=$1
. "$(dirname "$0")/shell_lib.sh" sampling
zoo_data
"$seq2seq" train --data p.tsv --tokenizer char --d 32 --H 2 --enc-layers 1 --dec-layers 1 --d-ff 64 \
  --max-tokens 300 --valid-size 20 --test-size 20 --test-limit 0 --threads 1 --steps 60 --factor 2 \
  --warmup 30 --out s.st >/dev/null 2>s.log || fail "seq2seq train: $(tail -1 s.log)"
sed -n '1,40p' p.tsv | cut -f1 >src.txt
tr() { "$seq2seq" translate --ckpt s.st --threads 1 "$@" <src.txt 2>tr.log || fail "translate $*: $(tail -1 tr.log)"; }

# ---- 1.
tr >greedy.txt
tr --sampling --seed 5 >a.txt
tr --sampling --seed 5 >b.txt
tr --sampling --seed 6 >c.txt
tr --sampling --temperature 0 >t0.txt
tr --sampling --sampling-topk 1 --seed 9 >k1.txt
tr --sampling --sampling-topk 3 --sampling-topp 0.9 --temperature 0.7 >kp.txt
[ "$(wc -l <a.txt) $(wc -l <kp.txt)" = "40 40" ] && echo "ok: one line out per line in" ||
  fail "lines: $(wc -l <a.txt) and $(wc -l <kp.txt) for 40"
cmp -s a.txt b.txt && echo "ok: --seed 5 twice: the same lines" || fail "--seed 5 twice differs"
! cmp -s a.txt c.txt && echo "ok: --seed 6: other lines" || fail "--seed 6 gives --seed 5's lines"
! cmp -s a.txt greedy.txt && echo "ok: sampling differs from the greedy output" ||
  fail "sampling gives the greedy output"
cmp -s t0.txt greedy.txt && cmp -s k1.txt greedy.txt &&
  echo "ok: --temperature 0 and --sampling-topk 1: the greedy output" ||
  fail "--temperature 0 or --sampling-topk 1 is not greedy: $(diff t0.txt greedy.txt | head -3) $(diff k1.txt greedy.txt | head -3)"
# line 11 after ten other lines (reversed): the translation it has in the file
sed -n '1,10p' src.txt | rev >pre.txt
cat pre.txt <(sed -n '11p' src.txt) | "$seq2seq" translate --ckpt s.st --threads 1 --sampling --seed 5 \
  2>/dev/null | sed -n '11p' >alone.txt
[ "$(cat alone.txt)" = "$(sed -n '11p' a.txt)" ] &&
  echo "ok: a sentence's draws do not depend on the sentences before it" ||
  fail "line 11: $(cat alone.txt) after other lines, $(sed -n '11p' a.txt) in the file"

# ---- 2.
for bad in "--sampling --beam 2" "--sampling --beam 2 --nbest 2" "--temperature 0.5" "--seed 3" \
  "--sampling-topk 5" "--sampling --sampling-topp 0" "--sampling --sampling-topp 1.5" \
  "--sampling --temperature -1"; do
  rc=0
  # shellcheck disable=SC2086
  "$seq2seq" translate --ckpt s.st $bad 'the cat 3 sat' >out.txt 2>err.txt || rc=$?
  [ "$rc" = 2 ] && [ ! -s out.txt ] && [ "$(wc -l <err.txt)" = 1 ] &&
    echo "ok: $bad: $(cat err.txt)" || fail "$bad: exit $rc, $(cat err.txt out.txt)"
done
finish
