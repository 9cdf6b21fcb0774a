#!/usr/bin/env bash
# train --keep-best and --patience (meson suite 'models'): fairseq's
# checkpoint_best and early stopping, in both programs (models/train/trainer.c).
#   1. a charlm run whose validation loss turns up: the best step and loss of
#      its JSON line and the step it stops at are those its metrics log's
#      evaluations give (the first lowest loss; the first evaluation after
#      which --patience evaluations in a row were no lower); the best
#      checkpoint is a training checkpoint of that step holding the weights a
#      run stopped there saved; the run ends as at its last step (saved,
#      evaluated, "early_stopped": true)
#   2. stopped (--stop-at) and resumed, the run stops at the same step with
#      byte-identical final and best checkpoints; the flags come back from
#      the checkpoint; resumed past its best step, a run that finds no lower
#      loss still names the best checkpoint the stopped run saved
#      --no-keep-best turns it off on --resume (the last of the two wins)
#   3. seq2seq: the best checkpoint is its JSON line's best step, and it
#      translates; stopped and resumed, the final evaluation's flags
#      (--test-limit, --beam, --length-penalty, --examples) are the run's
#      unless given again
#      --eval-bleu N --best-metric chrf: the best evaluation and the early
#      stop are the highest chrF's in the metrics log, the logged scores
#      eval's of the best checkpoint, exact over a resume; refusals (a
#      history that lost a score among them)
#   4. without the flags: no best checkpoint and no best_* fields (nor
#      max_minutes_reached); --patience alone: the best step and loss, no
#      best checkpoint; a best evaluation at step 0 (never saved) names no
#      best checkpoint, not even an earlier run's file of that name
#   5. refusals, one line, nothing written: an existing best checkpoint
#      without --force (replaced with it), --init-from or --data naming the
#      best checkpoint the run writes, --resume of the best checkpoint into
#      the run that writes it (--force too); --patience -1 is a usage error (2).
#      --init-from a best checkpoint into another run is fine.
#   test_keep_best.sh CHARLM SEQ2SEQ
set -uo pipefail
charlm=$1
seq2seq=$2
. "$(dirname "$0")/shell_lib.sh" keep_best
zoo_data
# lr 0.1 on this text: the validation loss falls to step 12, then rises
RUN=(--data c.txt --d 16 --H 2 --layers 1 --d-ff 32 --T 16 --batch-size 4 --threads 1
  --eval-every 2 --steps 40 --lr 0.1)

# A safetensors file's metadata value, or its tensors' bytes (a digest).
meta() {
  st_py "$@" <<'EOF'
import hashlib
t, m = load(sys.argv[1])
if sys.argv[2] == 'tensors':
    print(hashlib.sha256(b''.join(k.encode() + t[k][2] for k in sorted(t) if not k.startswith('optim.'))).hexdigest())
else:
    print(m.get(sys.argv[2], ''))
EOF
}
# The best step, its loss and the step --patience P stops at, from a
# metrics log's evaluation lines: "BEST LOSS STOP" (STOP: none).
from_log() {
  python3 - "$1" "$2" <<'EOF'
import json, sys
ev = [json.loads(l) for l in open(sys.argv[1])]
ev = [(e['step'], e['val_loss']) for e in ev if 'val_loss' in e]
p, best, stop = int(sys.argv[2]), None, 'none'
for i, (s, v) in enumerate(ev):
    if best is None or v < ev[best][1]:
        best = i
    if p > 0 and i - best >= p and stop == 'none':
        stop = s
print(ev[best][0], '%.6f' % ev[best][1], stop)
EOF
}
field() { python3 -c 'import json,sys; v=json.loads(open(sys.argv[1]).read().splitlines()[-1]).get(sys.argv[2]); print("%.6f" % v if isinstance(v, float) else v)' "$1" "$2"; }

# ---------------------------------------------------------------- 1. charlm
"$charlm" train "${RUN[@]}" --keep-best --patience 2 --out m.st >m.json 2>m.log || fail "charlm: $(tail -1 m.log)"
json_ok "charlm --keep-best --patience 2: JSON line" m.json
read -r best loss stop <<<"$(from_log m.st.metrics.jsonl 2)"
got="$(field m.json best_step) $(field m.json best_val_loss) $(field m.json step)"
[ "$got" = "$best $loss $stop" ] && [ "$stop" != none ] && [ "$stop" -lt 40 ] &&
  echo "ok: best step, its loss and the early stop are the metrics log's: $got" ||
  fail "JSON best/loss/stop '$got', the metrics log's '$best $loss $stop'"
[ "$(field m.json early_stopped)" = True ] && [ "$(field m.json best_checkpoint)" = m.st.best.safetensors ] &&
  grep -q '"val_bpc"' m.json && grep -q "stopping early at step $stop: 2 evaluation(s)" m.log &&
  echo "ok: ends as at its last step: evaluated, early_stopped, the best checkpoint named" ||
  fail "the early end: $(tail -1 m.json) $(grep early m.log)"
[ "$(meta m.st step)" = "$stop" ] && [ "$(meta m.st.best.safetensors step)" = "$best" ] &&
  [ -n "$(meta m.st.best.safetensors train)" ] &&
  echo "ok: the checkpoint is at step $stop, the best one a training checkpoint at step $best" ||
  fail "steps: checkpoint $(meta m.st step), best $(meta m.st.best.safetensors step)"
"$charlm" train "${RUN[@]}" --stop-at "$best" --out at.st >/dev/null 2>at.log || fail "stop-at: $(tail -1 at.log)"
[ "$(meta at.st tensors)" = "$(meta m.st.best.safetensors tensors)" ] &&
  echo "ok: the best checkpoint holds the weights of step $best" ||
  fail "the best checkpoint's weights are not those of step $best"
"$charlm" eval --ckpt m.st.best.safetensors --data c.txt >/dev/null 2>e.log &&
  echo "ok: eval reads the best checkpoint" || fail "eval of the best: $(tail -1 e.log)"

# ---------------------------------------------------------------- 2. resume
"$charlm" train "${RUN[@]}" --keep-best --patience 2 --stop-at 9 --out r.st >/dev/null 2>r.log ||
  fail "stop-at 9: $(tail -1 r.log)"
"$charlm" train --resume r.st >r.json 2>r2.log || fail "resume: $(tail -1 r2.log)"
[ "$(field r.json step) $(field r.json best_step) $(field r.json early_stopped)" = "$stop $best True" ] &&
  cmp -s r.st m.st && cmp -s r.st.best.safetensors m.st.best.safetensors &&
  echo "ok: stopped at 9 and resumed: the same stop, the same final and best checkpoints, byte for byte" ||
  fail "resumed: $(tail -1 r.json)"
# a resumed run that finds no lower loss than the stopped run's best keeps
# naming the best checkpoint that run saved (its step comes back from the
# checkpoint's history)
"$charlm" train "${RUN[@]}" --keep-best --stop-at $((best + 2)) --out rb.st >/dev/null 2>rb.log ||
  fail "stop-at $((best + 2)): $(tail -1 rb.log)"
"$charlm" train --resume rb.st --stop-at $((best + 4)) >rb.json 2>rb.log || fail "resume rb.st: $(tail -1 rb.log)"
[ "$(field rb.json best_step) $(field rb.json best_checkpoint)" = "$best rb.st.best.safetensors" ] &&
  echo "ok: resumed past its best step: the best checkpoint of step $best still named" ||
  fail "resumed past the best step: $(tail -1 rb.json)"

# --no-keep-best turns off the --keep-best a resumed checkpoint keeps (as
# argparse's BooleanOptionalAction: the last of the two wins)
"$charlm" train "${RUN[@]}" --keep-best --stop-at 6 --out nb.st >/dev/null 2>nb.log || fail "stop-at 6: $(tail -1 nb.log)"
was=$(meta nb.st.best.safetensors step)
"$charlm" train --resume nb.st --no-keep-best --stop-at 20 >nb.json 2>nb.log || fail "--no-keep-best: $(tail -1 nb.log)"
"$charlm" train --resume nb.st --stop-at 30 >nb2.json 2>nb.log || fail "resumed again: $(tail -1 nb.log)"
[ "$(field nb.json best_checkpoint) $(field nb2.json best_checkpoint)" = "None None" ] &&
  [ "$(meta nb.st.best.safetensors step)" = "$was" ] && [ "$(meta nb.st step)" = 30 ] &&
  echo "ok: --no-keep-best on --resume: the best checkpoint of step $was left as it was, the flag kept" ||
  fail "--no-keep-best: best $(meta nb.st.best.safetensors step) (was $was): $(tail -1 nb.json) $(tail -1 nb2.json)"
"$charlm" train "${RUN[@]}" --steps 4 --no-keep-best --keep-best --out nk.st >nk.json 2>nk.log &&
  [ "$(field nk.json best_checkpoint)" = nk.st.best.safetensors ] &&
  "$charlm" train "${RUN[@]}" --steps 4 --keep-best --no-keep-best --out kn.st >kn.json 2>nk.log &&
  [ "$(field kn.json best_checkpoint)" = None ] && [ ! -e kn.st.best.safetensors ] &&
  echo "ok: --keep-best and --no-keep-best: the last wins" ||
  fail "the last of --keep-best and --no-keep-best: $(tail -1 nk.json) $(tail -1 kn.json) $(tail -1 nk.log)"

# ---------------------------------------------------------------- 3. seq2seq
"$seq2seq" train --data p.tsv --tokenizer char --d 16 --H 2 --enc-layers 1 --dec-layers 1 --d-ff 32 \
  --max-tokens 200 --valid-size 20 --test-size 20 --test-limit 2 --threads 1 --eval-every 3 \
  --steps 9 --keep-best --out q.st >q.json 2>q.log || fail "seq2seq: $(tail -1 q.log)"
read -r qbest _ _ <<<"$(from_log q.st.metrics.jsonl 0)"
# the evaluation lines' epoch is a count, as the JSON line's "epochs" (was 1.00)
python3 -c 'import json,sys; e=[json.loads(l) for l in open(sys.argv[1])]; e=[x["epoch"] for x in e if "val_loss" in x]; sys.exit(not e or not all(type(x) is int for x in e))' q.st.metrics.jsonl &&
  echo "ok: seq2seq's metrics log: epoch an integer" ||
  fail "seq2seq's metrics log: epoch $(grep -o '"epoch": [^,}]*' q.st.metrics.jsonl | head -1)"
[ -n "$qbest" ] && [ "$(field q.json best_step)" = "$qbest" ] && [ "$(meta q.st.best.safetensors step)" = "$qbest" ] &&
  echo "ok: seq2seq --keep-best: the best checkpoint is step $qbest's" ||
  fail "seq2seq: JSON best $(field q.json best_step), log $qbest, file $(meta q.st.best.safetensors step)"
[ "$("$seq2seq" translate --ckpt q.st.best.safetensors 'the cat 3 sat' 2>t.log | wc -l)" = 1 ] &&
  echo "ok: seq2seq translates with the best checkpoint" || fail "translate: $(tail -1 t.log)"
# 3b. the final evaluation's flags come back from the checkpoint too: stopped
# and resumed, the run decodes what the uninterrupted one did (it decoded
# the default 1000 test pairs with beam 4), unless they are given again
S2R=(--data p.tsv --tokenizer char --d 16 --H 2 --enc-layers 1 --dec-layers 1 --d-ff 32
  --max-tokens 200 --valid-size 20 --test-size 20 --threads 1 --eval-every 3 --steps 9)
"$seq2seq" train "${S2R[@]}" --test-limit 3 --beam 2 --length-penalty 0.5 --examples 1 --stop-at 4 \
  --out qr.st >/dev/null 2>qr.log || fail "seq2seq --stop-at 4: $(tail -1 qr.log)"
cp qr.st qr4.st
"$seq2seq" train --resume qr.st >qr.json 2>qr.log || fail "seq2seq resume: $(tail -1 qr.log)"
[ "$(field qr.json test_pairs) $(field qr.json beam) $(grep -c '^SRC ' qr.json)" = "3 2 1" ] &&
  grep -q 'greedy, then beam 2' qr.log &&
  echo "ok: seq2seq --resume keeps --test-limit, --beam, --length-penalty and --examples" ||
  fail "seq2seq resume: test_pairs $(field qr.json test_pairs), beam $(field qr.json beam), $(grep -c '^SRC ' qr.json) examples"
"$seq2seq" train --resume qr4.st --test-limit 1 --beam 1 >qr.json 2>qr.log ||
  fail "seq2seq resume with --test-limit: $(tail -1 qr.log)"
[ "$(field qr.json test_pairs) $(field qr.json beam)" = "1 1" ] &&
  echo "ok: given again to --resume, they are this run's" ||
  fail "given to --resume: test_pairs $(field qr.json test_pairs), beam $(field qr.json beam)"

# 3c. --eval-bleu N --best-metric chrf (fairseq's --eval-bleu with
# --best-checkpoint-metric --maximize-best-checkpoint-metric): each
# evaluation decodes N validation pairs; the best is the highest chrF (the
# first of equal ones), patience counts evaluations without a higher one;
# the logged scores are those eval gives for that checkpoint on those pairs
S2B=(--data p.tsv --tokenizer char --d 16 --H 2 --enc-layers 1 --dec-layers 1 --d-ff 32
  --max-tokens 200 --valid-size 20 --test-size 20 --test-limit 2 --threads 1 --eval-every 3
  --steps 30 --factor 2 --eval-bleu 10 --best-metric chrf --keep-best --patience 2)
"$seq2seq" train "${S2B[@]}" --out qb.st >qb.json 2>qb.log || fail "--best-metric chrf: $(tail -1 qb.log)"
read -r bstep bchrf bstop <<<"$(python3 - qb.st.metrics.jsonl <<'EOF'
import json, sys
ev = [json.loads(l) for l in open(sys.argv[1])]
ev = [(e['step'], e['val_chrf']) for e in ev if 'val_chrf' in e]
best, stop = None, 'none'
for i, (s, v) in enumerate(ev):
    if best is None or v > ev[best][1]:
        best = i
    if i - best >= 2 and stop == 'none':
        stop = s
print(ev[best][0], '%.6f' % ev[best][1], stop)
EOF
)"
[ -n "$bstep" ] && [ "$(field qb.json best_step) $(field qb.json best_chrf) $(field qb.json best_metric)" = "$bstep $bchrf chrf" ] &&
  [ "$(meta qb.st.best.safetensors step)" = "$bstep" ] && [ "$(field qb.json step)" = "$bstop" ] &&
  grep -q "without a chrf above" qb.log &&
  echo "ok: --best-metric chrf: best step $bstep (chrF $bchrf) and the stop at $bstop are the metrics log's" ||
  fail "--best-metric chrf: JSON $(tail -1 qb.json); log: best $bstep $bchrf stop $bstop"
"$seq2seq" eval --ckpt qb.st.best.safetensors --split valid --test-limit 10 >qe.json 2>qe.log ||
  fail "eval of the best: $(tail -1 qe.log)"
python3 - qe.json qb.st.metrics.jsonl "$bstep" <<'EOF' &&
import json, sys
e = json.loads(open(sys.argv[1]).read().splitlines()[-1])
log = [json.loads(l) for l in open(sys.argv[2])]
at = [x for x in log if x.get('step') == int(sys.argv[3]) and 'val_chrf' in x][0]
assert abs(e['chrf'] - at['val_chrf']) < 0.006 and abs(e['bleu'] - at['val_bleu']) < 0.006, (e, at)
EOF
  echo "ok: the logged BLEU and chrF are eval's of that checkpoint on those 10 pairs" ||
  fail "the logged scores are not eval's: $(tail -1 qe.json)"
"$seq2seq" train "${S2B[@]}" --stop-at 7 --out qs.st >/dev/null 2>qs.log || fail "stop-at 7: $(tail -1 qs.log)"
cp qs.st qs7.st
"$seq2seq" train --resume qs.st >qs.json 2>qs.log || fail "resume: $(tail -1 qs.log)"
cmp -s qs.st qb.st && cmp -s qs.st.best.safetensors qb.st.best.safetensors &&
  echo "ok: --best-metric chrf stopped and resumed: the same final and best checkpoints" ||
  fail "--best-metric resumed: $(tail -1 qs.json)"
expect "--best-metric bleu alone" 2 "--best-metric bleu needs --eval-bleu" \
  "$seq2seq" train --data p.tsv --best-metric bleu --steps 2 --out x.st
expect "--best-metric foo" 2 "'foo' is not one of loss, bleu, chrf" \
  "$seq2seq" train --data p.tsv --eval-bleu 5 --best-metric foo --steps 2 --out x.st
expect "--resume with --best-metric" 2 "drop --best-metric" \
  "$seq2seq" train --resume qs.st --best-metric loss
# a history that lost an evaluation's score (every evaluation of a run with
# --best-metric has one) would choose another best and count --patience
# otherwise, silently: refused, naming the file and the evaluation
st_meta qs7.st 'del t["history"]["score"]' qd.st
expect "a history without its scores" 1 "'qd.st': its history has no chrf of the evaluation at step 3" \
  "$seq2seq" train --resume qd.st
st_meta qs7.st 't["history"]["score"][1] = None' qd.st
expect "a history without a score" 1 "'qd.st': its history has no chrf of the evaluation at step 6" \
  "$seq2seq" train --resume qd.st
[ ! -e qd.st.best.safetensors ] || fail "a refused resume wrote qd.st.best.safetensors"
[ ! -e x.st ] || fail "a refused run wrote x.st"

# 3d. --eval-bleu-beam K (fairseq's --eval-bleu-args '{"beam": K}'): the
# logged scores are eval's with --beam K and --length-penalty (here 58 and
# 31 chrF apart from greedy's); the flag is the checkpoint's, a checkpoint
# from before it decodes greedily, and alone it is refused
S2E=(--data p.tsv --tokenizer char --d 32 --H 2 --enc-layers 1 --dec-layers 1 --d-ff 64
  --max-tokens 300 --valid-size 20 --test-size 20 --test-limit 2 --threads 1 --factor 2
  --warmup 30 --eval-bleu 20 --eval-every 40 --steps 80 --length-penalty 0.6)
"$seq2seq" train "${S2E[@]}" --eval-bleu-beam 3 --out eb.st >eb.json 2>eb.log ||
  fail "--eval-bleu-beam 3: $(tail -1 eb.log)"
"$seq2seq" eval --ckpt eb.st --split valid --test-limit 20 --beam 3 --length-penalty 0.6 >ebe.json 2>&1 &&
  "$seq2seq" eval --ckpt eb.st --split valid --test-limit 20 >ebg.json 2>&1 ||
  fail "eval of eb.st: $(tail -1 ebe.json) $(tail -1 ebg.json)"
python3 - ebe.json ebg.json eb.st.metrics.jsonl <<'EOF' &&
import json, sys
e, g = (json.loads(open(f).read().splitlines()[-1]) for f in sys.argv[1:3])
at = [x for x in map(json.loads, open(sys.argv[3])) if 'val_chrf' in x][-1]
assert at['step'] == 80 and e['beam'] == 3, (at, e)
assert abs(e['chrf'] - at['val_chrf']) < 0.006 and abs(e['bleu'] - at['val_bleu']) < 0.006, (e, at)
assert abs(g['chrf'] - at['val_chrf']) > 1, (g, at)  # not greedy's
EOF
  echo "ok: --eval-bleu-beam 3: the logged BLEU and chrF are eval --beam 3's, not greedy's" ||
  fail "--eval-bleu-beam 3: $(tail -1 ebe.json) greedy $(tail -1 ebg.json) log $(grep val_chrf eb.st.metrics.jsonl | tail -1)"
"$seq2seq" train "${S2E[@]}" --eval-bleu-beam 3 --stop-at 40 --out ebs.st >/dev/null 2>ebs.log ||
  fail "--eval-bleu-beam --stop-at 40: $(tail -1 ebs.log)"
cp ebs.st ebs40.st
"$seq2seq" train --resume ebs.st >/dev/null 2>ebs.log || fail "--eval-bleu-beam resumed: $(tail -1 ebs.log)"
cmp -s ebs.st eb.st &&
  [ "$(grep val_chrf ebs.st.metrics.jsonl | tail -1)" = "$(grep val_chrf eb.st.metrics.jsonl | tail -1)" ] &&
  echo "ok: --eval-bleu-beam comes back with --resume: the same checkpoint and logged scores" ||
  fail "--eval-bleu-beam resumed: $(grep val_chrf ebs.st.metrics.jsonl | tail -1)"
# a checkpoint from before the flag: greedy, as it was trained
st_meta ebs40.st 'del t["options"]["eval_bleu_beam"]' ebo.st
"$seq2seq" train --resume ebo.st >/dev/null 2>ebo.log || fail "resume without eval_bleu_beam: $(tail -1 ebo.log)"
python3 - ebg.json ebo.st.metrics.jsonl <<'EOF' &&
import json, sys
g = json.loads(open(sys.argv[1]).read().splitlines()[-1])
at = [x for x in map(json.loads, open(sys.argv[2])) if 'val_chrf' in x][-1]
assert at['step'] == 80 and abs(g['chrf'] - at['val_chrf']) < 0.006, (g, at)
EOF
  echo "ok: a checkpoint without eval_bleu_beam resumes decoding greedily" ||
  fail "resume without eval_bleu_beam: $(grep val_chrf ebo.st.metrics.jsonl | tail -1) greedy $(tail -1 ebg.json)"
expect "--eval-bleu-beam alone" 2 "--eval-bleu-beam is the beam of --eval-bleu N's decoding" \
  "$seq2seq" train --data p.tsv --eval-bleu-beam 3 --steps 2 --out x.st
expect "--eval-bleu-beam 0" 2 "--eval-bleu-beam: 0 is out of range" \
  "$seq2seq" train --data p.tsv --eval-bleu 5 --eval-bleu-beam 0 --steps 2 --out x.st
expect "--resume with --eval-bleu-beam" 2 "drop --eval-bleu-beam" \
  "$seq2seq" train --resume ebs40.st --eval-bleu-beam 2
[ ! -e x.st ] || fail "a refused run wrote x.st"

# ---------------------------------------------------------------- 4. off
"$charlm" train "${RUN[@]}" --steps 8 --out n.st >n.json 2>n.log || fail "no flags: $(tail -1 n.log)"
[ ! -e n.st.best.safetensors ] && ! grep -q 'best_\|early_stopped\|max_minutes_reached' n.json &&
  echo "ok: without --keep-best, --patience and --max-minutes: no best checkpoint, no best or flag fields" ||
  fail "without the flags: $(ls n.st*) $(tail -1 n.json)"
# --patience alone: the best step and loss named, no best checkpoint
"$charlm" train "${RUN[@]}" --patience 2 --out pa.st >pa.json 2>pa.log || fail "--patience alone: $(tail -1 pa.log)"
[ "$(field pa.json best_step) $(field pa.json best_val_loss) $(field pa.json step)" = "$best $loss $stop" ] &&
  [ "$(field pa.json best_checkpoint)" = None ] && [ ! -e pa.st.best.safetensors ] &&
  echo "ok: --patience alone: best step $best and its loss named, no best checkpoint" ||
  fail "--patience alone: $(tail -1 pa.json)"
# patience running out at the last step is not an early stop
"$charlm" train "${RUN[@]}" --patience 2 --steps "$stop" --out pl.st >pl.json 2>pl.log ||
  fail "--patience out at the last step: $(tail -1 pl.log)"
[ "$(field pl.json step) $(field pl.json early_stopped)" = "$stop False" ] && ! grep -q 'stopping early' pl.log &&
  echo "ok: --patience running out at the last step ($stop): not an early stop" ||
  fail "--patience out at the last step: $(tail -1 pl.json) $(grep early pl.log)"
# a run whose best evaluation is its first (step 0, never saved: a trained
# model that --lr 10 ruins) names no best checkpoint, not even the file of
# that name an earlier run left (--force let this run write over it)
echo mine >g.st.best.safetensors
"$charlm" train --init-from m.st --data c.txt --threads 1 --eval-every 2 --steps 4 --lr 10 --keep-best \
  --out g.st --force >g.json 2>g.log || fail "--keep-best, best at step 0: $(tail -1 g.log)"
[ "$(field g.json best_step) $(field g.json best_checkpoint)" = "0 None" ] &&
  echo "ok: the best evaluation at step 0 (never saved): no best checkpoint named" ||
  fail "best at step 0: $(tail -1 g.json)"

# ---------------------------------------------------------------- 5. refusals
echo mine >o.st.best.safetensors
cp o.st.best.safetensors mine.copy
refused_quietly "an existing best checkpoint" "'o.st.best.safetensors' exists: the best checkpoint of 'o.st'" \
  o.st "$charlm" train "${RUN[@]}" --steps 4 --keep-best --out o.st
intact "an existing best checkpoint" o.st.best.safetensors mine.copy
refused_quietly "--init-from the best checkpoint it writes" \
  "--init-from 'o.st.best.safetensors' is the same file as 'o.st.best.safetensors', the best checkpoint" \
  o.st "$charlm" train --init-from o.st.best.safetensors --data c.txt --steps 4 --keep-best --out o.st --force
refused_quietly "--data the best checkpoint it writes" "--data 'o.st.best.safetensors' is the same file" \
  o.st "$charlm" train "${RUN[@]}" --data o.st.best.safetensors --steps 4 --keep-best --out o.st --force
intact "refused runs" o.st.best.safetensors mine.copy
"$charlm" train "${RUN[@]}" --steps 4 --keep-best --out o.st --force >/dev/null 2>o.log &&
  [ "$(meta o.st.best.safetensors step)" = 4 ] &&
  echo "ok: --force replaces the best checkpoint" || fail "--force: $(tail -1 o.log)"
rm -f o.st o.st.cgrad-lock o.st.metrics.jsonl  # the --force run's, so that nothing written shows
refused_quietly "--resume the best checkpoint it writes" \
  "--resume 'o.st.best.safetensors' is the same file as 'o.st.best.safetensors', the best checkpoint" \
  o.st "$charlm" train --resume o.st.best.safetensors --steps 8 --keep-best --out o.st --force
"$charlm" train --init-from m.st.best.safetensors --data c.txt --steps 2 --out f.st >/dev/null 2>f.log &&
  echo "ok: --init-from a best checkpoint" || fail "--init-from the best: $(tail -1 f.log)"
expect "--patience -1" 2 "patience" "$charlm" train "${RUN[@]}" --patience -1 --out p.st
finish
