#!/usr/bin/env bash
# seq2seq translate's other modes, fairseq-generate's --sampling
# (--sampling-topk, --sampling-topp, --temperature; back-translation's
# decoding) and --score-reference, on a small model trained here:
#   1. one line out per line in; the same --seed gives the same lines, another
#      seed others; a sentence's draws come from its own generator, seeded
#      by --seed and its place among the lines translated, so other lines
#      before it do not change its translation; sampling differs from the
#      greedy output, --temperature 0 and --sampling-topk 1
#      are the greedy output
#   2. refusals, one line on stderr, nothing on stdout, exit 2: --nbest
#      above --sampling's --beam, the sampling flags without it, --sampling-topp 0
#      (the draws themselves are checked against recomputed logits in
#      test_seq2seq's test_sample_decode)
#   3. --score-reference FILE: the references given the n-best lists' texts
#      score what --nbest printed for them, best and second best; a
#      reference too long or not UTF-8 is warned about and has no H line; a
#      file of another length, a missing file, and --beam, --nbest or
#      --sampling beside it are refused
#   4. --buffer-size N: 1, 7 and 71 lines at a time give the lines, H numbers
#      and messages of one buffer (greedy, sampling, n-best; a bad line
#      among them); with 1, each line's translation comes out before the
#      next line is written (through a FIFO); refused with --score-reference
#   5. --sampling --beam 4 --nbest 4: four draws a sentence, best first by
#      --score-reference's score of their texts; the first draw is --sampling's
#      one translation; --beam 4 alone prints the best; --temperature 0:
#      every draw is the greedy output
#
#   test_translate_modes.sh SEQ2SEQ
set -euo pipefail
seq2seq=$1
. "$(dirname "$0")/shell_lib.sh" translate_modes
zoo_data
"$seq2seq" train --data p.tsv --tokenizer char --d 32 --H 2 --enc-layers 1 --dec-layers 1 --d-ff 64 \
  --max-tokens 300 --valid-size 20 --test-size 20 --test-limit 0 --threads 1 --steps 600 --factor 2 \
  --warmup 30 --out s.st >/dev/null 2>s.log || fail "seq2seq train: $(tail -1 s.log)"
sed -n '1,40p' p.tsv | cut -f1 >src.txt
trl() { "$seq2seq" translate --ckpt s.st --threads 1 "$@" <src.txt 2>tr.log || fail "translate $*: $(tail -1 tr.log)"; }

# ---- 1.
trl >greedy.txt
trl --sampling --seed 5 >a.txt
trl --sampling --seed 5 >b.txt
trl --sampling --seed 6 >c.txt
trl --sampling --temperature 0 >t0.txt
trl --sampling --sampling-topk 1 --seed 9 >k1.txt
trl --sampling --sampling-topk 3 --sampling-topp 0.9 --temperature 0.7 >kp.txt
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
for bad in "--sampling --beam 2 --nbest 3" "--temperature 0.5" "--seed 3" \
  "--sampling-topk 5" "--sampling --sampling-topp 0" "--sampling --sampling-topp 1.5" \
  "--sampling --temperature -1"; do
  rc=0
  # shellcheck disable=SC2086
  "$seq2seq" translate --ckpt s.st $bad 'the cat 3 sat' >out.txt 2>err.txt || rc=$?
  [ "$rc" = 2 ] && [ ! -s out.txt ] && [ "$(wc -l <err.txt)" = 1 ] &&
    echo "ok: $bad: $(cat err.txt)" || fail "$bad: exit $rc, $(cat err.txt out.txt)"
done

# ---- 3.
sed -n '100,105p' p.tsv | cut -f1 >s6.txt
"$seq2seq" translate --ckpt s.st --threads 1 --beam 4 --nbest 2 <s6.txt >nb.txt 2>nb.log ||
  fail "--nbest 2: $(tail -1 nb.log)"
awk -F'\t' 'NR % 2 == 1 {print $3}' nb.txt >best.txt
awk -F'\t' 'NR % 2 == 0 {print $3}' nb.txt >second.txt
cat s6.txt s6.txt >s12.txt
cat best.txt second.txt >refs.txt
"$seq2seq" translate --ckpt s.st --threads 1 --score-reference refs.txt <s12.txt >sr.txt 2>sr.log ||
  fail "--score-reference: $(tail -1 sr.log)"
python3 - nb.txt sr.txt <<'PY' && echo "ok: --score-reference of the n-best texts: --nbest's scores" ||
import sys
nb = [l.rstrip('\n').split('\t') for l in open(sys.argv[1])]
sr = [l.rstrip('\n').split('\t') for l in open(sys.argv[2])]
assert len(nb) == 12 and len(sr) == 12, (len(nb), len(sr))
want = nb[0::2] + nb[1::2]  # the best of each sentence, then the second
for i, (w, g) in enumerate(zip(want, sr)):
    assert g[0] == 'H-%d' % i and g[2] == w[2], (i, g, w)
    assert abs(float(g[1]) - float(w[1])) <= 2e-6, (i, g, w)
PY
  fail "--score-reference: $(head -3 sr.txt) against $(head -3 nb.txt)"
# a reference of 300 characters (the model takes 256) and one not UTF-8
{ sed -n '1p' best.txt; head -c 300 /dev/zero | tr '\0' a; echo; printf 'die \xff katze\n'; } >bad.txt
sed -n '1,3p' s6.txt >s3.txt
"$seq2seq" translate --ckpt s.st --threads 1 --score-reference bad.txt <s3.txt >sb.txt 2>sb.log ||
  fail "--score-reference of bad references: $(tail -1 sb.log)"
[ "$(cut -f1 sb.txt)" = H-0 ] && grep -q 'reference 2 has 300 tokens; the model takes at most 255' sb.log &&
  grep -q 'reference 3 is not valid UTF-8 (byte 5)' sb.log &&
  echo "ok: references too long or not UTF-8: warned, no H line" ||
  fail "bad references: $(cat sb.txt sb.log)"
head -2 refs.txt >r2.txt
for bad in "--score-reference r2.txt" "--score-reference nope.txt"; do
  rc=0
  # shellcheck disable=SC2086
  "$seq2seq" translate --ckpt s.st $bad <s3.txt >out.txt 2>err.txt || rc=$?
  [ "$rc" = 1 ] && [ ! -s out.txt ] && [ "$(wc -l <err.txt)" = 1 ] &&
    echo "ok: $bad: $(cat err.txt)" || fail "$bad: exit $rc, $(cat err.txt out.txt)"
done
for bad in "--beam 2" "--beam 2 --nbest 1" "--sampling"; do
  rc=0
  # shellcheck disable=SC2086
  "$seq2seq" translate --ckpt s.st --score-reference refs.txt $bad <s3.txt >out.txt 2>err.txt || rc=$?
  [ "$rc" = 2 ] && [ ! -s out.txt ] && grep -q 'decoding nothing: drop --beam, --nbest and --sampling' err.txt &&
    echo "ok: --score-reference $bad: refused" || fail "--score-reference $bad: exit $rc, $(cat err.txt out.txt)"
done

# ---- 4. --buffer-size: standard input a buffer at a time, the output the same
sed -n '1,60p' p.tsv | cut -f1 >s60.txt
printf 'die \xff katze\n' >>s60.txt # line 61: not UTF-8
sed -n '61,70p' p.tsv | cut -f1 >>s60.txt
for mode in "" "--sampling --seed 3" "--beam 2 --nbest 2" "--sampling --beam 3 --nbest 2"; do
  # shellcheck disable=SC2086
  "$seq2seq" translate --ckpt s.st --threads 1 $mode <s60.txt >all.txt 2>all.log ||
    fail "translate $mode: $(tail -1 all.log)"
  for b in 1 7 71; do
    # shellcheck disable=SC2086
    "$seq2seq" translate --ckpt s.st --threads 1 $mode --buffer-size $b <s60.txt >buf.txt 2>buf.log ||
      fail "translate $mode --buffer-size $b: $(tail -1 buf.log)"
    cmp -s all.txt buf.txt && cmp -s all.log buf.log || fail "translate $mode --buffer-size $b: other output or messages: $(diff all.txt buf.txt | head -3) $(diff all.log buf.log | head -3)"
  done
done
[ "$(wc -l <all.txt)" = 140 ] && grep -q 'warning: line 61 is not valid UTF-8' all.log && grep -q '1 of 71 lines not translated' all.log &&
  echo "ok: --buffer-size 1, 7 and 71: the same lines, H numbers and messages as one buffer (greedy, sampling, n-best, sampled n-best)" ||
  fail "--buffer-size: $(wc -l <all.txt) lines, $(cat all.log)"
# a line in, its translation out, before the next line is written (a
# translate waiting for the end of its input would time out the read)
"$seq2seq" translate --ckpt s.st --threads 1 'the cat 1 sat' 'the cat 2 sat' >exp12.txt 2>/dev/null
# (two FIFOs, not a coprocess: bash unsets a coprocess's TR_PID and closes
# its descriptors as soon as it has ended, which under load came before the
# wait for it, and set -u ended the test on "TR_PID: unbound variable")
mkfifo to_tr from_tr
"$seq2seq" translate --ckpt s.st --threads 1 --buffer-size 1 <to_tr >from_tr 2>co.log &
tr_pid=$!
exec {to}>to_tr {from}<from_tr # the order the program opens them in
got=
for k in 1 2; do
  echo "the cat $k sat" >&"$to"
  IFS= read -r -t 120 line <&"$from" || break
  got="$got|$line"
done
exec {to}>&-
wait "$tr_pid" || fail "translate --buffer-size 1 on a pipe: $(cat co.log)"
exec {from}<&-
[ "$got" = "|$(sed -n 1p exp12.txt)|$(sed -n 2p exp12.txt)" ] &&
  echo "ok: --buffer-size 1: each line's translation printed before the next line is read" ||
  fail "--buffer-size 1 interactively: '$got'"
rc=0
"$seq2seq" translate --ckpt s.st --score-reference refs.txt --buffer-size 2 <s12.txt >out.txt 2>err.txt || rc=$?
[ "$rc" = 2 ] && grep -q 'drop --buffer-size' err.txt && echo "ok: --score-reference --buffer-size: refused" ||
  fail "--score-reference --buffer-size: exit $rc, $(cat err.txt)"

# ---- 5. --sampling --beam N: N draws a sentence, ranked by --nbest's score
trl --sampling --seed 5 --beam 4 --nbest 4 >sn.txt
trl --sampling --seed 5 --beam 4 >sbest.txt
trl --sampling --seed 5 --temperature 0 --beam 3 --nbest 3 >st0.txt
cut -f3 sn.txt >sn_ref.txt
cut -f1 sn.txt | while read -r h; do sed -n "$((${h#H-} + 1))p" src.txt; done >sn_src.txt
"$seq2seq" translate --ckpt s.st --threads 1 --score-reference sn_ref.txt <sn_src.txt >sn_sr.txt 2>sn.log ||
  fail "--score-reference of the draws: $(tail -1 sn.log)"
python3 - sn.txt sn_sr.txt a.txt sbest.txt st0.txt greedy.txt <<'PY' &&
import sys
rows = lambda f: [l.rstrip('\n').split('\t') for l in open(f)]
lines = lambda f: [l.rstrip('\n') for l in open(f)]
sn, sr, one, best, t0, greedy = rows(sys.argv[1]), rows(sys.argv[2]), lines(sys.argv[3]), \
    lines(sys.argv[4]), rows(sys.argv[5]), lines(sys.argv[6])
assert len(sn) == 160 and len(sr) == 160 and len(t0) == 120, (len(sn), len(sr), len(t0))
for i in range(40):
    h = sn[4 * i:4 * i + 4]
    assert all(r[0] == 'H-%d' % i for r in h), (i, h)
    sc = [float(r[1]) for r in h]
    assert sc == sorted(sc, reverse=True), (i, sc)
    assert one[i] in [r[2] for r in h], (i, one[i], h)  # the first draw
    assert best[i] == h[0][2], (i, best[i], h[0])
    assert all(r[2] == greedy[i] for r in t0[3 * i:3 * i + 3]), (i, t0[3 * i:3 * i + 3])
for k, (w, g) in enumerate(zip(sn, sr)):
    assert g[2] == w[2] and abs(float(g[1]) - float(w[1])) <= 2e-6, (k, w, g)
assert len(set(r[2] for r in sn)) > 40, 'the draws never differ'
PY
  echo "ok: --sampling --beam 4 --nbest 4: four draws each, best first by their --score-reference scores; the first draw is --sampling's; --beam 4 prints the best; --temperature 0: the greedy output" ||
  fail "--sampling --beam 4 --nbest 4: $(head -4 sn.txt) $(head -4 sn_sr.txt)"
finish
