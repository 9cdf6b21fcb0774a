#!/usr/bin/env bash
# Every file a command reads is compared with every file it writes (issue
# 34, the class of finding 1 beyond the trainer's --out; meson suite
# 'reliability'):
#  - standard output, the result of sample, eval, translate and train, is
#    never a file the command reads: `eval --ckpt m.st >> m.st` appended
#    its JSON line to the checkpoint (which then failed to load), `translate
#    < f >> f` its output to its input, `train --data c.txt >> c.txt` a line
#    to the corpus; now one line, exit 1, the file as it was (GNU cat's
#    "input file is output file");
#  - the base a LoRA checkpoint loads counts as read, for sample's result
#    and its --attention picture;
#  - CG_DEBUG is parsed as the other variables are ('no' turned it on);
#  - (round six) standard output is no file a command writes or replaces
#    either: the checkpoint, its loss curve, metrics log and lock, a kept
#    checkpoint, average's output, a picture.
#   test_files_read.sh CHARLM SEQ2SEQ
set -uo pipefail
charlm=$1
seq2seq=$2
. "$(dirname "$0")/shell_lib.sh" files_read

zoo_ckpts
# appended NAME FILE CMD...: CMD with its stdout appended to FILE exits 1
# saying so, and FILE keeps its bytes
appended() {
  local name=$1 file=$2 rc=0
  shift 2
  cp "$file" keep.copy
  timeout 120 "$@" >>"$file" 2>err.txt || rc=$?
  if [ "$rc" -ne 1 ]; then fail "$name: exit status $rc (expected 1): $(tail -c 300 err.txt)"
  elif ! grep -q "standard output is .*, which this command reads" err.txt; then
    fail "$name: message: $(tail -c 300 err.txt)"
  else echo "ok: $name: $(grep -m1 'standard output' err.txt)"; fi
  intact "$name" "$file" keep.copy
}
appended "charlm eval >> its checkpoint" a.st "$charlm" eval --ckpt a.st
appended "charlm sample >> its checkpoint" a.st "$charlm" sample --ckpt a.st --length 5
appended "charlm eval >> its data" c.txt "$charlm" eval --ckpt a.st --data c.txt
appended "charlm eval >> the data its checkpoint records" c.txt "$charlm" eval --ckpt a.st
appended "charlm train >> its data" c.txt "$charlm" train --data c.txt "${TINY[@]}" --steps 2 --out t.st
appended "charlm train --resume >> the checkpoint resumed" a.st "$charlm" train --resume a.st --steps 6 --out r.st
appended "seq2seq translate >> its checkpoint" s.st "$seq2seq" translate --ckpt s.st "the cat 1 sat"
printf 'the cat 1 sat\nthe cat 2 sat\n' >in.txt
appended "seq2seq translate < f >> f" in.txt sh -c '"$1" translate --ckpt s.st <in.txt' sh "$seq2seq"
appended "seq2seq eval >> the data its checkpoint records" p.tsv "$seq2seq" eval --ckpt s.st
appended "seq2seq train >> its data" p.tsv "$seq2seq" train --data p.tsv "${S2S[@]}" --steps 2 --out t2.st
[ -e t.st ] || [ -e t2.st ] || [ -e r.st ] && fail "a refused run wrote a checkpoint"
# a LoRA adapter's base is read too
"$charlm" train --init-from a.st --lora-rank 2 --data c.txt --threads 1 --eval-every 4 --steps 2 \
  --out l.st >/dev/null 2>l.log || fail "lora: $(tail -1 l.log)"
appended "charlm sample >> the base of its adapter" a.st "$charlm" sample --ckpt l.st --length 5
appended "charlm eval >> the base of its adapter" a.st "$charlm" eval --ckpt l.st
cp a.st base.png && cp base.png base.orig
"$charlm" train --init-from base.png --lora-rank 2 --data c.txt --threads 1 --eval-every 4 --steps 2 \
  --out lp.st >/dev/null 2>l.log || fail "lora on base.png: $(tail -1 l.log)"
refused "sample --attention <the adapter's base> --force" "'base.png' is the same file as its base" \
  "$charlm" sample --ckpt lp.st --length 5 --attention base.png --force
intact "sample --attention <the base>" base.png base.orig
# results to a pipe, a new file, or a file no one reads stay fine
"$charlm" eval --ckpt l.st >>res.txt 2>err.txt && "$seq2seq" translate --ckpt s.st <in.txt >>res.txt 2>>err.txt &&
  [ "$(wc -l <res.txt)" = 3 ] && echo "ok: results appended to another file" || fail "appending elsewhere: $(tail -1 err.txt)"
# standard input read as the sentences is not the checkpoint loaded: `translate
# --ckpt s.st <s.st` translated the checkpoint's bytes (thousands of warned
# lines and empty ones, exit 0); a link or /dev/stdin is the same file
expect "seq2seq translate --ckpt f < f" 1 "^seq2seq: error: standard input is --ckpt 's.st', the checkpoint this command loads; give the sentences as arguments or on another standard input (nothing was translated)$" \
  sh -c '"$1" translate --ckpt s.st <s.st' sh "$seq2seq"
[ -s out.txt ] && fail "translate --ckpt f < f printed: $(head -c 100 out.txt)"
ln -sf s.st s.link
expect "seq2seq translate --ckpt /dev/stdin < f" 1 "standard input is --ckpt '/dev/stdin'" \
  sh -c '"$1" translate --ckpt /dev/stdin <s.link' sh "$seq2seq"
"$seq2seq" translate --ckpt s.st "the cat 1 sat" <s.st >out.txt 2>err.txt && [ "$(wc -l <out.txt)" = 1 ] &&
  echo "ok: sentences as arguments: stdin is not read" || fail "arguments with stdin the checkpoint: $(tail -1 err.txt)"

# ---- round six: standard output is no file a command writes or replaces
# either (`train --force >> m.st`: the result line went to the old m.st,
# which the new checkpoint replaced; it was lost). One line, exit 1, before
# any work: the file as it was.
# written NAME FILE PATTERN CMD...: CMD with its stdout appended to FILE
written() {
  local name=$1 file=$2 pat=$3 rc=0
  shift 3
  [ -e "$file" ] && cp "$file" keep.copy || : >keep.copy
  timeout 120 "$@" >>"$file" 2>err.txt || rc=$?
  if [ "$rc" -ne 1 ]; then fail "$name: exit status $rc (expected 1): $(tail -c 300 err.txt)"
  elif ! grep -q "^[a-z0-9_]*: error: \(--attention: \)\?standard output is '$pat', .*; send the output elsewhere (nothing was written)$" err.txt ||
       [ "$(wc -l <err.txt)" -ne 1 ]; then
    fail "$name: message: $(tail -c 300 err.txt)"
  else echo "ok: $name: $(cat err.txt)"; fi
  intact "$name" "$file" keep.copy
}
"$charlm" train --data c.txt "${TINY[@]}" --steps 4 --keep-last 2 --out m.st >/dev/null 2>m.log ||
  fail "training m.st: $(tail -1 m.log)"
T2=(--data c.txt "${TINY[@]}" --steps 2)
written "charlm train --force >> its checkpoint" m.st "m.st" "$charlm" train "${T2[@]}" --out m.st --force
written "charlm train --force >> its metrics log" m.st.metrics.jsonl "m.st.metrics.jsonl" \
  "$charlm" train "${T2[@]}" --out m.st --force
written "charlm train --force >> its loss curve" m.st.loss.png "m.st.loss.png" \
  "$charlm" train "${T2[@]}" --out m.st --force
written "charlm train >> its lock" m.st.cgrad-lock "m.st.cgrad-lock" "$charlm" train "${T2[@]}" --out m.st --force
# (--resume m.st >> m.st: a file read, section one's message)
written "charlm train --keep-last >> a kept checkpoint it removes" m.st.step00000004.safetensors \
  "m.st.step00000004.safetensors" "$charlm" train --resume m.st --steps 8 --keep-last 1
# a new checkpoint: `>>` makes the file; it is named as standard output,
# not as an existing checkpoint to --force over
written "charlm train >> its new checkpoint" n.st "n.st" "$charlm" train "${T2[@]}" --out n.st
[ -s n.st ] && fail "n.st was written"
written "seq2seq train --force >> its checkpoint" s.st "s.st" \
  "$seq2seq" train --data p.tsv "${S2S[@]}" --steps 2 --out s.st --force
"$charlm" average --out avg.st a.st a.st >/dev/null 2>err.txt || fail "average: $(tail -1 err.txt)"
written "charlm average --force >> its output" avg.st "avg.st" "$charlm" average --out avg.st --force a.st a.st
"$charlm" sample --ckpt a.st --length 4 --attention pic.png >/dev/null 2>err.txt || fail "sample: $(tail -1 err.txt)"
written "charlm sample --attention --force >> the picture" pic.png "pic.png" \
  "$charlm" sample --ckpt a.st --length 4 --attention pic.png --force
"$seq2seq" attention --ckpt s.st --text "the cat" --out att >/dev/null 2>err.txt || fail "attention: $(tail -1 err.txt)"
written "seq2seq attention --force >> a picture" att/cross.png "att/cross.png" \
  "$seq2seq" attention --ckpt s.st --text "the cat" --out att --force
# --out DIR/ (docs/zoo.md's spelling) for a directory not made yet: made,
# as without the slash ('att//cross.png' was checked in a directory 'att/'
# whose parent 'att' did not exist yet)
if "$seq2seq" attention --ckpt s.st --text "the cat" --out att_new/ >out.txt 2>err.txt &&
  [ -s att_new/cross.png ]; then echo "ok: attention --out att_new/ makes the directory"
else fail "attention --out att_new/: $(tail -1 err.txt)"; fi
# and every missing directory of a deeper one, as mkdir -p
if "$seq2seq" attention --ckpt s.st --text "the cat" --out att_deep/a/b >out.txt 2>err.txt &&
  [ -s att_deep/a/b/cross.png ]; then echo "ok: attention --out att_deep/a/b makes every directory"
else fail "attention --out att_deep/a/b: $(tail -1 err.txt)"; fi

# ---- CG_DEBUG: a switch like the others
expect "CG_DEBUG=maybe" 2 "environment variable CG_DEBUG: expected true or false, got 'maybe'" \
  env CG_DEBUG=maybe "$charlm" eval --ckpt a.st
for v in 0 1 false yes ''; do
  env CG_DEBUG="$v" "$charlm" eval --ckpt a.st >/dev/null 2>err.txt && echo "ok: CG_DEBUG='$v' accepted" ||
    fail "CG_DEBUG='$v': $(tail -1 err.txt)"
done
finish
