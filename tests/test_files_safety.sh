#!/usr/bin/env bash
# Never destroy a file that is not ours, never lose a result (issue 25,
# cases 1, 2, 3, 6, 7, 10, 11 and their neighbours; meson suite 'reliability'):
#  - a path written is never a path read (same name, link or inode);
#  - files created beside the checkpoint do not follow links and never
#    truncate a file the run did not make;
#  - closed fds 0-2 are never taken by a file the run opens;
#  - every result written is checked (exit 1 when it cannot be written);
#  - names that are not UTF-8 work and print as valid JSON;
#  - the metrics log holds one consistent history after a resume;
#  - a run that fails or is killed before its first save leaves the old
#    checkpoint and its metrics log as they were (--force replaces the log
#    only with the checkpoint).
#   test_files_safety.sh CHARLM SEQ2SEQ BENCH
set -uo pipefail
charlm=$1
seq2seq=$2
bench=$3
. "$(dirname "$0")/shell_lib.sh" files

zoo_data
cp c.txt c.orig
cp p.tsv p.orig
TINY=(--d 16 --H 2 --layers 1 --d-ff 32 --T 16 --batch-size 4 --threads 1 --eval-every 4)
S2S=(--tokenizer char --d 16 --H 2 --enc-layers 1 --dec-layers 1 --d-ff 32 --max-tokens 200
     --valid-size 20 --test-size 20 --test-limit 2 --threads 1 --eval-every 4)
# refused_intact NAME PATTERN FILE COPY CMD...: CMD exits 1 naming PATTERN, FILE intact
refused_intact() {
  local name=$1 pat=$2 file=$3 copy=$4
  shift 4
  expect "$name" 1 "$pat" "$@"
  intact "$name" "$file" "$copy"
}
"$charlm" train --data c.txt "${TINY[@]}" --steps 4 --out a.st >/dev/null 2>a.log ||
  { echo "charlm training failed: $(tail -1 a.log)" >&2; exit 1; }

# ---- 1. a path written is a path read
# --out an existing directory: named as one, not "pass --force" (which
# could not help)
mkdir -p outdir
expect "charlm --out an existing directory" 1 "'outdir' is a directory; a checkpoint replaces only" \
  "$charlm" train --data c.txt "${TINY[@]}" --steps 2 --out outdir
same="is the same file as"
refused_intact "charlm --out = --data" "$same" c.txt c.orig \
  "$charlm" train --data c.txt "${TINY[@]}" --steps 2 --out c.txt --force
refused_intact "seq2seq --out = --data" "$same" p.tsv p.orig \
  "$seq2seq" train --data p.tsv "${S2S[@]}" --steps 2 --out p.tsv --force
# without --data: the default data is read, so it is not --out (round thirty)
mkdir -p data && cp c.txt data/moby_dick.txt
refused_intact "charlm --out = the default --data" "--data 'data/moby_dick.txt' $same" data/moby_dick.txt c.orig \
  "$charlm" train "${TINY[@]}" --steps 2 --out data/moby_dick.txt --force
refused_intact "charlm --resume, --out = the checkpoint's data" "$same" c.txt c.orig \
  "$charlm" train --resume a.st --steps 6 --out c.txt --force
cp a.st.metrics.jsonl a.log.orig
refused_intact "charlm --data = the run's own metrics log" "$same" a.st.metrics.jsonl a.log.orig \
  "$charlm" train --data a.st.metrics.jsonl "${TINY[@]}" --steps 2 --out a.st --force
# neighbours: a hard link, a symlink, ./ and ../ spellings, a sibling file
ln c.txt hard.txt
refused_intact "--out = a hard link of --data" "$same" c.txt c.orig \
  "$charlm" train --data c.txt "${TINY[@]}" --steps 2 --out hard.txt --force
ln -s c.txt sym.txt
refused_intact "--data = a symlink to --out" "$same" c.txt c.orig \
  "$charlm" train --data sym.txt "${TINY[@]}" --steps 2 --out c.txt --force
mkdir -p sub
refused_intact "--out spelled ./sub/../c.txt" "$same" c.txt c.orig \
  "$charlm" train --data c.txt "${TINY[@]}" --steps 2 --out ./sub/../c.txt --force
cp c.txt q.loss.png && cp c.txt q.png.orig
refused_intact "--data = the loss curve of --out" "$same" q.loss.png q.png.orig \
  "$charlm" train --data q.loss.png "${TINY[@]}" --steps 2 --out q --force
cp a.st a.st.orig
refused_intact "--resume X --data X" "$same" a.st a.st.orig \
  "$charlm" train --resume a.st --data a.st --steps 6
cp a.st ck.png && cp a.st ck.orig
refused_intact "sample --attention = --ckpt" "$same" ck.png ck.orig \
  "$charlm" sample --ckpt ck.png --length 4 --attention ck.png
"$seq2seq" train --data p.tsv "${S2S[@]}" --steps 2 --out s.st >/dev/null 2>s.log ||
  { echo "seq2seq training failed: $(tail -1 s.log)" >&2; exit 1; }
mkdir -p att && cp s.st att/cross.png && cp s.st s.orig
refused_intact "seq2seq attention --out DIR holding --ckpt" "$same" att/cross.png s.orig \
  "$seq2seq" attention --ckpt att/cross.png --text "the cat" --out att --force
# a name through a symlinked directory
ln -s . here
refused_intact "--out through a symlinked directory" "$same" c.txt c.orig \
  "$charlm" train --data c.txt "${TINY[@]}" --steps 2 --out here/c.txt --force

# ---- 2. files beside the checkpoint: no links followed, nothing truncated
for lock in m.st.lock m.st.cgrad-lock; do # the old lock name, and today's
  rm -f m.st*
  ln -s c.txt $lock
  "$charlm" train --data c.txt "${TINY[@]}" --steps 2 --out m.st >/dev/null 2>err.txt
  intact "a lock-file symlink ($lock) to the corpus" c.txt c.orig
done
rm -f m.st*
ln c.txt m.st.cgrad-lock
"$charlm" train --data c.txt "${TINY[@]}" --steps 2 --out m.st >/dev/null 2>err.txt
intact "a lock file hard-linked to the corpus" c.txt c.orig
rm -f m.st*
ln -s c.txt m.st.metrics.jsonl
"$charlm" train --data c.txt "${TINY[@]}" --steps 2 --out m.st --force >/dev/null 2>err.txt
intact "a metrics-log symlink to the corpus (--force)" c.txt c.orig
rm -f m.st*
ln -s c.txt m.st.loss.png
"$charlm" train --data c.txt "${TINY[@]}" --steps 2 --out m.st --force >/dev/null 2>err.txt
intact "a loss-curve symlink to the corpus (--force)" c.txt c.orig
rm -f m.st*
ln c.txt m.st.metrics.jsonl
"$charlm" train --data c.txt "${TINY[@]}" --steps 2 --out m.st --force >/dev/null 2>err.txt
intact "a metrics log hard-linked to the corpus (--force)" c.txt c.orig
# the files beside a new checkpoint are replaced only with --force, as it is
rm -f n.st*
printf 'my notes\n' >n.st.metrics.jsonl && cp n.st.metrics.jsonl nlog.orig
refused_intact "an existing metrics log, no --force" "'n.st.metrics.jsonl' exists" n.st.metrics.jsonl nlog.orig \
  "$charlm" train --data c.txt "${TINY[@]}" --steps 2 --out n.st
rm -f n.st*
printf 'my picture\n' >n.st.loss.png && cp n.st.loss.png npng.orig
refused_intact "an existing loss curve, no --force" "'n.st.loss.png' exists" n.st.loss.png npng.orig \
  "$seq2seq" train --data p.tsv "${S2S[@]}" --steps 2 --out n.st
[ ! -e n.st ] || fail "a refused run wrote n.st"
printf 'my notes\n' >n.st.metrics.jsonl
"$charlm" train --data c.txt "${TINY[@]}" --steps 2 --out n.st --force >/dev/null 2>err.txt ||
  fail "--force over the files beside n.st: $(tail -1 err.txt)"
jsonl_ok "--force replaces the files beside the checkpoint" n.st.metrics.jsonl
printf 'GEM\n  remote: https://rubygems.org/\n' >Gemfile.lock && cp Gemfile.lock gem.orig
"$charlm" train --data c.txt "${TINY[@]}" --steps 2 --out Gemfile >/dev/null 2>err.txt
intact "--out Gemfile beside an unrelated Gemfile.lock" Gemfile.lock gem.orig
# the lock of a resumed run
rm -f r.st* && "$charlm" train --data c.txt "${TINY[@]}" --steps 2 --out r.st >/dev/null 2>&1
for f in r.st.*lock*; do rm -f "$f"; ln -s c.txt "$f"; done
"$charlm" train --resume r.st --steps 4 >/dev/null 2>err.txt
intact "a lock symlink on --resume" c.txt c.orig
# files named like a writer's leftovers but not ours are not removed
printf 'mine\n' >k.st.tmp.notes
"$charlm" train --data c.txt "${TINY[@]}" --steps 2 --out k.st >/dev/null 2>&1
[ -e k.st.tmp.notes ] && echo "ok: k.st.tmp.notes kept" || fail "k.st.tmp.notes was removed"
# seq2seq writes the same sibling files
rm -f t.st*
ln -s p.tsv t.st.cgrad-lock
"$seq2seq" train --data p.tsv "${S2S[@]}" --steps 2 --out t.st >/dev/null 2>err.txt
intact "seq2seq: a lock-file symlink to the pairs" p.tsv p.orig

# ---- 3. closed standard streams
rm -f w.st*
rc=0
"$charlm" train --data c.txt "${TINY[@]}" --steps 4 --log-every 1 --out w.st >&- 2>&- || rc=$?
jsonl_ok "stdout and stderr closed: metrics log" w.st.metrics.jsonl
if grep -q '{' w.st*lock* 2>/dev/null; then fail "stdout closed: the lock file got the JSON line"; else echo "ok: lock file clean"; fi
[ "$rc" -eq 1 ] && echo "ok: train >&- exits 1 (its result is lost)" || fail "train >&- 2>&-: exit $rc (expected 1)"
rm -f w.st*
"$charlm" train --data c.txt "${TINY[@]}" --steps 4 --log-every 1 --out w.st 2>&- >w.out
jsonl_ok "stderr closed: metrics log" w.st.metrics.jsonl
rm -f w.st*
rc=0
"$charlm" train --data c.txt "${TINY[@]}" --steps 4 --log-every 1 --out w.st >&- 2>w.err || rc=$?
if grep -q '{' w.st*lock* 2>/dev/null; then fail "stdout closed: the lock file got the JSON line"; else echo "ok: lock file clean"; fi
[ "$rc" -eq 1 ] && grep -q "cannot write" w.err && echo "ok: train >&-: $(tail -1 w.err)" ||
  fail "train >&-: exit $rc: $(tail -1 w.err)"
expect "translate <&- (stdin closed)" 1 "read error" sh -c 'exec "$@" <&-' sh "$seq2seq" translate --ckpt s.st

# ---- 7. every result written is checked
expect "charlm eval > /dev/full" 1 "cannot write" sh -c 'exec "$@" >/dev/full' sh "$charlm" eval --ckpt a.st
expect "charlm eval >&-" 1 "cannot write" sh -c 'exec "$@" >&-' sh "$charlm" eval --ckpt a.st
expect "seq2seq translate > /dev/full" 1 "cannot write" sh -c 'exec "$@" >/dev/full' sh "$seq2seq" translate --ckpt s.st "the cat"
expect "seq2seq translate (stdin) > /dev/full" 1 "cannot write" sh -c 'echo "the cat" | "$@" >/dev/full' sh "$seq2seq" translate --ckpt s.st
expect "seq2seq eval > /dev/full" 1 "cannot write" sh -c 'exec "$@" >/dev/full' sh "$seq2seq" eval --ckpt s.st --test-limit 1 --threads 1
refused "charlm train > /dev/full" "cannot write the output" sh -c 'exec "$@" >/dev/full' sh "$charlm" train --data c.txt "${TINY[@]}" --steps 2 --out f.st --force
refused "seq2seq train > /dev/full" "cannot write the output" sh -c 'exec "$@" >/dev/full' sh "$seq2seq" train --data p.tsv "${S2S[@]}" --steps 2 --out f2.st --force
refused "charlm sample > /dev/full" "cannot write the output" sh -c 'exec "$@" >/dev/full' sh "$charlm" sample --ckpt a.st --length 5
expect "bench > /dev/full" 1 "cannot write" sh -c 'exec "$@" >/dev/full' sh "$bench" --model charlm --preset tiny --steps 1 --warmup 0 --threads 1
expect "charlm --help > /dev/full" 1 "cannot write" sh -c 'exec "$@" >/dev/full' sh "$charlm" train --help

# ---- 6. names that are not UTF-8
bad=$'\xff\xfe.txt'
cp c.txt "$bad"
rm -f u.st*
train_u() { "$charlm" train --data "$bad" "${TINY[@]}" --steps 4 --out u.st "$@" >u.out 2>u.err; }
if train_u && [ -s u.st ]; then echo "ok: --data with a non-UTF-8 name trains and saves"; else
  fail "--data non-UTF-8: exit $?: $(tail -1 u.err)"; fi
json_ok "--data non-UTF-8: final line" u.out
"$charlm" train --resume u.st --steps 6 >u2.out 2>u.err &&
  echo "ok: resume of a run on a non-UTF-8 data name" || fail "resume (non-UTF-8 data name): $(tail -1 u.err)"
"$charlm" eval --ckpt u.st >u3.out 2>u.err && echo "ok: eval finds the non-UTF-8 data name" ||
  fail "eval (non-UTF-8 data name): $(tail -1 u.err)"
badout=$'\xffm.st'
if "$charlm" train --data c.txt "${TINY[@]}" --steps 2 --out "$badout" >u4.out 2>u.err; then
  json_ok "--out non-UTF-8: final line" u4.out
  python3 -c '
import json, os, sys
line = open(sys.argv[1], "rb").read().splitlines()[-1]
assert os.fsencode(json.loads(line)["checkpoint"]) == b"\xffm.st"' u4.out 2>/dev/null &&
    echo "ok: the escaped name decodes to its bytes" || fail "--out non-UTF-8: escape is lossy: $(tail -1 u4.out)"
else
  fail "--out non-UTF-8: $(tail -1 u.err)"
fi
"$seq2seq" train --data p.tsv "${S2S[@]}" --steps 2 --out $'\xfes.st' >u5.out 2>u.err &&
  json_ok "seq2seq --out non-UTF-8" u5.out || fail "seq2seq --out non-UTF-8: $(tail -1 u.err)"
cp p.tsv $'\xfep.tsv'
"$seq2seq" train --data $'\xfep.tsv' "${S2S[@]}" --steps 2 --out u6.st >u6.out 2>u.err &&
  json_ok "seq2seq --data non-UTF-8" u6.out || fail "seq2seq --data non-UTF-8: $(tail -1 u.err)"
"$seq2seq" eval --ckpt u6.st --test-limit 1 >u7.out 2>u.err && jsonl_ok "seq2seq eval, data non-UTF-8" u7.out ||
  fail "seq2seq eval (non-UTF-8 data name): $(tail -1 u.err)"

# ---- 10. resume after a kill: one history, steps never go back
rm -f h.st*
"$charlm" train --data c.txt "${TINY[@]}" --steps 8 --log-every 1 --stop-at 4 --out h.st >/dev/null 2>&1
cp h.st h4.st
"$charlm" train --resume h.st --log-every 1 >/dev/null 2>&1
cp h4.st h.st # as if killed after logging step 8 but before saving it
"$charlm" train --resume h.st --log-every 1 >/dev/null 2>h.err || fail "resume after the kill: $(tail -1 h.err)"
history_ok() { # NAME FILE: parses; "loss" lines and "val_loss" lines each have increasing steps
  if python3 -c '
import json, sys
last = {}
for l in open(sys.argv[1], "rb").read().split(b"\n")[:-1]:
    j = json.loads(l)
    k = "val" if "val_loss" in j else "train"
    assert j["step"] > last.get(k, -1), (k, j["step"], last)
    last[k] = j["step"]
assert last["train"] == 8, last' "$2" 2>h.py; then
    echo "ok: $1: one history"
  else
    fail "$1: $(tail -1 h.py)"
  fi
}
history_ok "metrics log after a kill and resume" h.st.metrics.jsonl
grep -q "^charlm: warning: the metrics log 'h.st.metrics.jsonl' keeps its history up to step 4; 5 line(s) after it (a killed run's) or damaged were dropped" h.err &&
  echo "ok: the killed run's lines dropped, counted in a warning" || fail "no warning of the dropped lines: $(cat h.err)"
# ---- 11. a torn last line
rm -f g.st*
"$charlm" train --data c.txt "${TINY[@]}" --steps 8 --log-every 1 --stop-at 4 --out g.st >/dev/null 2>&1
truncate -s -7 g.st.metrics.jsonl
"$charlm" train --resume g.st --log-every 1 >/dev/null 2>g.err || fail "resume of a torn log: $(tail -1 g.err)"
history_ok "a torn metrics log after resume" g.st.metrics.jsonl
# neighbours: garbage and NUL bytes in the log, the log missing, a symlinked log
rm -f g.st*
"$charlm" train --data c.txt "${TINY[@]}" --steps 8 --log-every 1 --stop-at 4 --out g.st >/dev/null 2>&1
printf 'garbage\0\xff\n{"step": 1e999}\n[1]\n{"step": "x"}\n' >>g.st.metrics.jsonl
"$charlm" train --resume g.st --log-every 1 >/dev/null 2>g.err || fail "resume of a damaged log: $(tail -1 g.err)"
history_ok "a damaged metrics log after resume" g.st.metrics.jsonl
rm -f g.st*
"$charlm" train --data c.txt "${TINY[@]}" --steps 8 --log-every 1 --stop-at 4 --out g.st >/dev/null 2>&1
rm g.st.metrics.jsonl
"$charlm" train --resume g.st --log-every 1 >/dev/null 2>g.err || fail "resume without a log: $(tail -1 g.err)"
jsonl_ok "a missing metrics log on resume" g.st.metrics.jsonl
rm -f g.st*
"$charlm" train --data c.txt "${TINY[@]}" --steps 8 --log-every 1 --stop-at 4 --out g.st >/dev/null 2>&1
rm g.st.metrics.jsonl && ln -s c.txt g.st.metrics.jsonl
"$charlm" train --resume g.st --log-every 1 >/dev/null 2>g.err
intact "a metrics-log symlink to the corpus on resume" c.txt c.orig

# ---- 12. --force replaces the metrics log with the checkpoint, not before:
# a run that cannot save, or is killed before its first save, leaves both
rm -f f.st*
"$charlm" train --data c.txt "${TINY[@]}" --steps 8 --log-every 1 --out f.st >/dev/null 2>&1
cp f.st f.orig && cp f.st.metrics.jsonl flog.orig
rc=0
(ulimit -f 20; exec "$charlm" train --data c.txt "${TINY[@]}" --steps 4 --out f.st --force) \
  >/dev/null 2>f.err || rc=$?
[ "$rc" -eq 1 ] && grep -q "could not save the checkpoint" f.err ||
  fail "--force under ulimit -f 20: exit $rc: $(tail -1 f.err)"
intact "--force, the save failed: the checkpoint" f.st f.orig
intact "--force, the save failed: its metrics log" f.st.metrics.jsonl flog.orig
"$charlm" train --data c.txt "${TINY[@]}" --steps 100000000 --eval-every 100000000 --out f.st \
  --force >/dev/null 2>f.err &
pid=$!
for ((w = 0; w < 100; w++)); do grep -q "step 0:" f.err && break; sleep 0.1; done
sleep 0.3
kill -KILL $pid
wait $pid 2>/dev/null
intact "--force, killed before its first save: the checkpoint" f.st f.orig
intact "--force, killed before its first save: its metrics log" f.st.metrics.jsonl flog.orig
# --resume continues that log (the killed run's temporary log removed)
"$charlm" train --resume f.st --steps 12 --log-every 1 >/dev/null 2>f.err || fail "resume: $(tail -1 f.err)"
if head -c "$(wc -c <flog.orig)" f.st.metrics.jsonl | cmp -s - flog.orig &&
   [ "$(grep -c '"loss_avg"' f.st.metrics.jsonl)" -eq 12 ]; then
  echo "ok: --resume continues the kept metrics log to step 12"
else
  fail "--resume after the killed --force run: $(head -c 300 f.st.metrics.jsonl)"
fi
ls f.st*.tmp.* >/dev/null 2>&1 && fail "left $(ls f.st*.tmp.*)" || echo "ok: no temporary file left"
# A killed run's temporary files under this run's own pid (a container's
# program has the same pid at every start): a leftover metrics log no
# longer fails every later run ("File exists"), a leftover link is neither
# followed nor truncated through; both are removed once the lock is held
rm -f q.st*
sh -c 'printf "old\n" >q.st.metrics.jsonl.tmp.$$; exec "$@"' sh \
  "$charlm" train --data c.txt "${TINY[@]}" --steps 4 --out q.st >/dev/null 2>err.txt &&
  echo "ok: a dead run's metrics log under this pid" ||
  fail "a dead run's metrics log under this pid: $(tail -1 err.txt)"
sh -c 'ln -s c.txt q.st.tmp.$$; ln -s c.txt q.st.tmp.$$.1; ln -s c.txt q.st.loss.png.tmp.$$;
       exec "$@"' sh "$charlm" train --data c.txt "${TINY[@]}" --steps 4 --out q.st --force \
  >/dev/null 2>err.txt || fail "a dead run's links under this pid: $(tail -1 err.txt)"
intact "a dead run's checkpoint temporary (a link) under this pid" c.txt c.orig
[ -f q.st ] && [ ! -L q.st ] && echo "ok: q.st is a file of its own" || fail "q.st is $(ls -l q.st)"
ls q.st*.tmp.* >/dev/null 2>&1 && fail "left $(ls q.st*.tmp.*)" || echo "ok: no temporary file left"
# --out tw and --out tw.safetensors write the same tw.loss.png,
# tw.metrics.jsonl and tw.step*.safetensors: one lock, tw.cgrad-lock, for
# both (each took a lock of its own and both ran, each renaming its log and
# curve over the other's)
rm -f tw*
"$charlm" train --data c.txt "${TINY[@]}" --steps 100000000 --eval-every 100000000 --out tw \
  >/dev/null 2>tw.err &
pid=$!
for ((w = 0; w < 600; w++)); do grep -qs '^[0-9]' tw.cgrad-lock && break; sleep 0.05; done
for out in tw.safetensors tw; do
  refused "--out $out while a run writes --out tw" "being written by another run (pid $pid)" \
    "$charlm" train --data c.txt "${TINY[@]}" --steps 2 --out "$out" --force
done
kill -TERM $pid
wait $pid 2>/dev/null
[ ! -e tw.safetensors ] && echo "ok: tw.safetensors not written" || fail "tw.safetensors written"
# A run's directory moved under it (`mv runs/a runs/b`): its next save
# makes runs/a again and takes the lock there again with a warning, so a
# second run into runs/a is still refused (it was not: both wrote the
# same checkpoint)
rm -rf mvd mvd_old
mkdir mvd
"$charlm" train --data c.txt "${TINY[@]}" --steps 100000000 --eval-every 2 --out mvd/m.st \
  >/dev/null 2>mv.err &
pid=$!
for ((w = 0; w < 600; w++)); do [ -f mvd/m.st ] && break; sleep 0.05; done
# moved between two saves: the run stopped where no temporary file is open
# (a move in the middle of a save fails that save: "cannot name the
# written file"). A save writes an unnamed file (O_TMPFILE) before it
# names it m.st.tmp.PID, so the run's open files are looked at too: a
# directory listing does not show the unnamed one (CI once moved the
# directory in the middle of such a write).
in_save() {
  ls mvd/*.tmp.* >/dev/null 2>&1 ||
    ls -l "/proc/$pid/fd" 2>/dev/null | grep -q -e '/mvd/#' -e '/mvd/[^ ]*\.tmp\.'
}
for ((w = 0; w < 600; w++)); do
  kill -STOP $pid
  in_save || break
  kill -CONT $pid
  sleep 0.01
done
mv mvd mvd_old
kill -CONT $pid
for ((w = 0; w < 600; w++)); do grep -qs 'taken again' mv.err && break; sleep 0.05; done
grep -q "warning: the lock 'mvd/m.st.cgrad-lock' was moved or removed during the run; taken again" \
  mv.err && echo "ok: the moved lock taken again" || fail "moved lock: $(tail -2 mv.err)"
refused "--out into the moved run's directory made again" "being written by another run (pid $pid)" \
  "$charlm" train --data c.txt "${TINY[@]}" --steps 2 --out mvd/m.st --force
kill -TERM $pid
wait $pid 2>/dev/null
[ -f mvd/m.st ] && [ -f mvd_old/m.st ] && echo "ok: saved before and after the move" ||
  fail "after the move: $(ls mvd mvd_old)"
# a --force run that saves replaces both: its log is its own history
"$charlm" train --data c.txt "${TINY[@]}" --steps 4 --log-every 1 --out f.st --force >/dev/null 2>f.err ||
  fail "--force: $(tail -1 f.err)"
[ "$(grep -c '"loss_avg"' f.st.metrics.jsonl)" -eq 4 ] && echo "ok: --force: the new run's log" ||
  fail "--force: the log is not the new run's: $(head -c 300 f.st.metrics.jsonl)"
finish
