#!/usr/bin/env bash
# train --ema-decay (meson suite 'models'): fairseq's --ema-decay and
# --ema-start-update in both programs (models/train/trainer.c), and the
# commands that read such a checkpoint (models/train/checkpoint.h
# cg_ckpt_weights).
#   1. every evaluation checkpoint of a charlm run holds "ema.<p>" for each
#      trainable parameter, and each step's average is torch.lerp's update
#      of the step before's towards that step's weights, recomputed here
#      bit for bit in float32 (a copy before update N of
#      --ema-start-update N, as fairseq's num_updates < N); its
#      metadata "ema.decay" and "ema.updates"; --ema-update-freq 1 is the
#      default bit for bit, and with 3 the average moves at updates 3 and
#      6 only (fairseq's ema_update_freq); stopped mid-period and resumed,
#      the uninterrupted run's bytes; the metrics log's evaluation lines say
#      "ema": true (a run without an average's do not), and an older log
#      without it is kept on --resume
#   2. eval, sample and --init-from use the average: the same numbers and
#      text as a file whose parameters are the averages; --no-ema the
#      trained weights (a file without them; --init-from's too); eval's
#      "ema"; the training's final validation loss is eval's
#   3. stopped (--stop-at) and resumed, the checkpoint's tensors, averages
#      included, are the uninterrupted run's bytes; --ema-decay given to
#      --resume is refused (the checkpoint fixes it), and so is an average
#      that is not the run's (another decay, more updates than steps, an
#      average in a run without --ema-decay); eval refuses more updates
#      than steps too
#   4. average: each file's average is what is averaged ("ema": true in
#      "averaged"), --no-ema its trained weights ("ema": false); the output
#      keeps no average
#   5. LoRA: the adapters' average, used by sample unless --no-ema
#   6. seq2seq: translate and eval use the average, --no-ema the trained
#      weights; a resumed run's bytes are the uninterrupted run's
#   7. refusals: --ema-start-update without --ema-decay and a decay outside
#      [0, 1] are usage errors (2); an average missing a tensor is refused
#      naming the file and the tensor (--no-ema still reads the weights), and
#      so are the averages without their metadata (by average and
#      --init-from too, whose --no-ema read the weights)
#      train --help's --ema-decay names only commands its program has
#   8. a disk that the metrics log fills before the first save (a tmpfs;
#      skipped where mount is refused): the room kept back for the
#      checkpoint counts the average, so the run stops and saves it
#   test_ema_zoo.sh CHARLM SEQ2SEQ
set -uo pipefail
charlm=$1
seq2seq=$2
. "$(dirname "$0")/shell_lib.sh" ema_zoo
zoo_data
TINY=(--data c.txt --d 16 --H 2 --layers 1 --d-ff 32 --T 16 --batch-size 4 --threads 1 --lr 0.02)
EMA=(--ema-decay 0.7 --ema-start-update 2)

# FILE's tensors' bytes (a digest), optimizer state left out unless "all".
digest() {
  st_py "$@" <<'EOF'
import hashlib
t, m = load(sys.argv[1])
keep = lambda k: len(sys.argv) > 2 or not k.startswith('optim.')
print(hashlib.sha256(b''.join(k.encode() + t[k][2] for k in sorted(t) if keep(k))).hexdigest())
EOF
}
# A copy OUT of FILE whose parameters are its averages ("use") or stay the
# trained ones ("trained"), without the averages or their metadata.
strip_avg() {
  st_py "$@" <<'EOF'
import json, struct
t, m = load(sys.argv[1])
use = sys.argv[3] == 'use'
out = {k: (t['ema.' + k] if use and 'ema.' + k in t else v) for k, v in t.items() if not k.startswith('ema.')}
save(sys.argv[2], out, {k: v for k, v in m.items() if not k.startswith('ema.')})
EOF
}
# FILE A and FILE B have the same tensors (digest's second argument: C).
same_tensors() {
  local a b
  a=$(digest "$1" ${3:-}) && b=$(digest "$2" ${3:-}) && [ -n "$a" ] && [ "$a" = "$b" ]
}
field() { python3 -c 'import json,sys; v=json.loads(open(sys.argv[1]).read().splitlines()[-1]).get(sys.argv[2]); print("%.6f" % v if isinstance(v, float) else v)' "$1" "$2"; }

# ---------------------------------------------------------------- 1. the averages
"$charlm" train "${TINY[@]}" "${EMA[@]}" --steps 6 --eval-every 1 --keep-last 6 --out m.st \
  >m.json 2>m.log || fail "charlm: $(tail -1 m.log)"
json_ok "charlm --ema-decay: JSON line" m.json
[ "$(field m.json ema_decay)" = 0.700000 ] && grep -q "val loss [0-9.]* (EMA)" m.log &&
  echo "ok: the JSON line names the decay, the evaluations say (EMA)" ||
  fail "no ema_decay or (EMA): $(tail -1 m.json) $(grep 'val loss' m.log | tail -1)"
if st_py m.st.step0000000{1,2,3,4,5,6}.safetensors <<'EOF'; then
import array
def f32(x):
    return struct.unpack('f', struct.pack('f', x))[0]
w = f32(1.0 - 0.7)  # the update's weight, (float)(1 - decay): below 0.5
prev = None
for s, path in enumerate(sys.argv[1:], 1):
    t, m = load(path)
    assert m['ema.updates'] == str(s) and float(m['ema.decay']) == 0.7, (path, m.get('ema.updates'))
    avg = {k[4:]: array.array('f', v[2]) for k, v in t.items() if k.startswith('ema.')}
    params = {k for k in t if not k.startswith(('ema.', 'optim.')) and k != 'tokenizer.spm'}
    assert set(avg) == params, (path, sorted(set(avg) ^ params)[:3])
    for k, a in avg.items():
        p = array.array('f', t[k][2])
        if s < 2:  # --ema-start-update 2: fairseq's decay 0 while the updates (this one too) are < 2
            want = p
        else:
            want = [f32(q + f32(w * f32(x - q))) for q, x in zip(prev[k], p)]
        assert list(a) == list(want), (path, k)
    prev = avg
print('ok: 6 steps of averages over %d parameters, bit for bit' % len(avg))
EOF
  :
else
  fail "the averages are not lerp's updates of the weights"
fi

# --ema-update-freq F (fairseq's ema_update_freq): every Fth update moves
# the average, the others leave it; the copies of --ema-start-update N are
# the moves whose update (fairseq's num_updates) is below N
"$charlm" train "${TINY[@]}" "${EMA[@]}" --ema-update-freq 1 --steps 6 --eval-every 1 --out m1.st \
  >/dev/null 2>m1.log || fail "--ema-update-freq 1: $(tail -1 m1.log)"
same_tensors m1.st m.st all && echo "ok: --ema-update-freq 1 is the default, bit for bit" ||
  fail "--ema-update-freq 1 differs from the default"
FREQ=(--ema-decay 0.7 --ema-start-update 5 --ema-update-freq 3)
"$charlm" train "${TINY[@]}" "${FREQ[@]}" --steps 8 --eval-every 1 --keep-last 8 --out f.st \
  >f.json 2>f.log || fail "--ema-update-freq 3: $(tail -1 f.log)"
if st_py f.st.step0000000{1,2,3,4,5,6,7,8}.safetensors <<'EOF'; then
import array
def f32(x):
    return struct.unpack('f', struct.pack('f', x))[0]
w = f32(1.0 - 0.7)
prev = None
for s, path in enumerate(sys.argv[1:], 1):
    t, m = load(path)
    assert m['ema.updates'] == str(s // 3), (path, m.get('ema.updates'))
    assert json.loads(m['train'])['options']['ema_update_freq'] == 3, path
    avg = {k[4:]: array.array('f', v[2]) for k, v in t.items() if k.startswith('ema.')}
    for k, a in avg.items():
        p = array.array('f', t[k][2])
        if s % 3:  # no move: the average stays (the first weights before update 3)
            want = prev[k] if prev else list(a)
        elif s < 5:  # update 3, below --ema-start-update 5: a copy
            want = p
        else:  # update 6: lerp
            want = [f32(q + f32(w * f32(x - q))) for q, x in zip(prev[k], p)]
        assert list(a) == list(want), (path, k)
    assert s != 3 or prev is None or any(list(prev[k]) != list(avg[k]) for k in avg), 'update 3 moved nothing'
    prev = avg
print('ok: --ema-update-freq 3: the average moves at updates 3 (a copy) and 6 (lerp) only, bit for bit')
EOF
  :
else
  fail "--ema-update-freq 3: the averages are not fairseq's"
fi
[ "$(field f.json ema_update_freq)" = 3 ] || fail "the JSON line lacks ema_update_freq: $(tail -1 f.json)"
# stopped mid-period (update 4: one update since the average's last) and
# resumed: the uninterrupted run's bytes, the average's included
"$charlm" train "${TINY[@]}" "${FREQ[@]}" --steps 8 --eval-every 4 --out fr.st --stop-at 4 >/dev/null 2>fr.log ||
  fail "--ema-update-freq 3, stopped: $(tail -1 fr.log)"
cp fr.st fr4.st
"$charlm" train --resume fr.st >/dev/null 2>fr2.log || fail "--ema-update-freq 3, resumed: $(tail -1 fr2.log)"
"$charlm" train "${TINY[@]}" "${FREQ[@]}" --steps 8 --eval-every 4 --out fu.st >/dev/null 2>fu.log ||
  fail "--ema-update-freq 3, uninterrupted: $(tail -1 fu.log)"
same_tensors fr.st fu.st all &&
  echo "ok: --ema-update-freq 3 resumed mid-period (step 4): the uninterrupted run's bytes" ||
  fail "--ema-update-freq 3: a resumed run's tensors differ from the uninterrupted run's"
expect "--resume with --ema-update-freq" 2 "drop --ema-update-freq" "$charlm" train --resume fr4.st --ema-update-freq 2
# the updates since the average's last move are the checkpoint's: one that
# is not below the run's --ema-update-freq is refused naming it
st_meta fr4.st "t['ema_since'] = 3" fbad.st
refused "--resume, ema_since 3 with --ema-update-freq 3" "^charlm: error: 'fbad.st': training state: \"ema_since\" = 3 is not below" \
  "$charlm" train --resume fbad.st

# ---------------------------------------------------------------- 1c. the metrics log
# each evaluation line of a run with an average says so ("ema": true, as
# the console's "(EMA)"); its training lines and a run without one do not
jsonl_ok "the metrics log" m.st.metrics.jsonl
if python3 - m.st.metrics.jsonl <<'EOF'; then
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
ev = [l for l in lines if 'val_loss' in l]
assert len(ev) == 7 and all(l.get('ema') is True for l in ev), ev
assert all('ema' not in l for l in lines if 'val_loss' not in l), lines
EOF
  echo "ok: the metrics log marks the evaluations of the average (\"ema\": true)"
else
  fail "the metrics log does not mark the average's evaluations: $(grep val_loss m.st.metrics.jsonl | head -2)"
fi

# ---------------------------------------------------------------- 2. what reads it
strip_avg m.st use.st use
strip_avg m.st trained.st trained
"$charlm" eval --ckpt m.st >e.json 2>e.log || fail "eval: $(tail -1 e.log)"
"$charlm" eval --ckpt use.st >eu.json 2>/dev/null || fail "eval of the averages' file"
"$charlm" eval --ckpt m.st --no-ema >en.json 2>en.log || fail "eval --no-ema: $(tail -1 en.log)"
"$charlm" eval --ckpt trained.st >et.json 2>/dev/null || fail "eval of the trained weights' file"
[ "$(field e.json val_loss)" = "$(field eu.json val_loss)" ] &&
  [ "$(field e.json val_loss)" = "$(field m.json val_loss)" ] &&
  [ "$(field e.json ema)" = True ] && [ "$(field eu.json ema)" = None ] &&
  grep -q "using the weights' moving average (EMA, decay 0.7, 6 updates); --no-ema" e.log &&
  echo "ok: eval judges the average: $(field e.json val_loss), as training's last evaluation" ||
  fail "eval $(tail -1 e.json), of the averages $(tail -1 eu.json), training's $(field m.json val_loss)"
[ "$(field en.json val_loss)" = "$(field et.json val_loss)" ] && [ "$(field en.json ema)" = False ] &&
  [ "$(field en.json val_loss)" != "$(field e.json val_loss)" ] && ! grep -q "moving average" en.log &&
  echo "ok: --no-ema judges the trained weights: $(field en.json val_loss)" ||
  fail "eval --no-ema $(tail -1 en.json), of the trained weights $(tail -1 et.json)"
SAMPLE=(--length 40 --seed 3 --threads 1)
"$charlm" sample --ckpt m.st "${SAMPLE[@]}" >s.txt 2>/dev/null || fail "sample"
"$charlm" sample --ckpt use.st "${SAMPLE[@]}" >su.txt 2>/dev/null || fail "sample of the averages"
"$charlm" sample --ckpt m.st --no-ema "${SAMPLE[@]}" >sn.txt 2>/dev/null || fail "sample --no-ema"
"$charlm" sample --ckpt trained.st "${SAMPLE[@]}" >st.txt 2>/dev/null || fail "sample of the trained"
cmp -s s.txt su.txt && cmp -s sn.txt st.txt &&
  echo "ok: sample draws from the average, --no-ema from the trained weights" ||
  fail "sample's text is not the average's (or --no-ema's not the trained weights')"
"$charlm" train "${TINY[@]}" --init-from m.st --steps 4 --stop-at 0 --out i.st >/dev/null 2>i.log ||
  fail "--init-from: $(tail -1 i.log)"
same_tensors i.st use.st && grep -q "using the weights' moving average" i.log &&
  echo "ok: --init-from starts from the average" ||
  fail "--init-from's weights are not the average: $(tail -2 i.log)"
"$charlm" train "${TINY[@]}" --init-from m.st --no-ema --steps 4 --stop-at 0 --out in.st >/dev/null 2>in.log ||
  fail "--init-from --no-ema: $(tail -1 in.log)"
same_tensors in.st trained.st && ! grep -q "moving average" in.log &&
  echo "ok: --init-from --no-ema starts from the trained weights" ||
  fail "--init-from --no-ema's weights are not the trained ones: $(tail -2 in.log)"

# ---------------------------------------------------------------- 3. resume
"$charlm" train "${TINY[@]}" "${EMA[@]}" --steps 6 --eval-every 2 --out r.st --stop-at 3 >/dev/null 2>r.log ||
  fail "stopped run: $(tail -1 r.log)"
cp r.st r3.st # at step 3
# a log written before the evaluations said "ema" (an older build's) is
# kept on --resume, the new lines after it
python3 -c '
import json, sys
ls = [json.loads(l) for l in open(sys.argv[1])]
open(sys.argv[1], "w").writelines(json.dumps({k: v for k, v in l.items() if k != "ema"}) + "\n" for l in ls)' r.st.metrics.jsonl
cp r.st.metrics.jsonl r3.metrics.jsonl
"$charlm" train --resume r.st >/dev/null 2>r2.log || fail "resumed run: $(tail -1 r2.log)"
jsonl_ok "the resumed run's metrics log" r.st.metrics.jsonl
n3=$(wc -l <r3.metrics.jsonl)
cmp -s r3.metrics.jsonl <(head -n "$n3" r.st.metrics.jsonl) &&
  [ "$(grep -c '"ema": true' r.st.metrics.jsonl)" = 2 ] && ! grep -q '"ema"' r3.metrics.jsonl &&
  [ "$(grep -c val_loss r.st.metrics.jsonl)" = $(($(grep -c val_loss r3.metrics.jsonl) + 2)) ] &&
  echo "ok: --resume keeps an older metrics log's lines (no \"ema\"), the new evaluations marked" ||
  fail "the resumed metrics log: $(cat r.st.metrics.jsonl)"
"$charlm" train "${TINY[@]}" "${EMA[@]}" --steps 6 --eval-every 2 --out u.st >/dev/null 2>u.log ||
  fail "uninterrupted run: $(tail -1 u.log)"
same_tensors r.st u.st all &&
  echo "ok: resumed at step 3, the tensors (averages, optimizer) are the uninterrupted run's bytes" ||
  fail "a resumed run's tensors differ from the uninterrupted run's"
expect "--resume with --ema-decay" 2 "drop --ema-decay" "$charlm" train --resume r.st --ema-decay 0.5 --steps 8
# the average a resumed checkpoint keeps is its run's: another decay than
# the run's --ema-decay, more updates than steps, or an average in a run
# without --ema-decay (which would drop it) are refused naming the file
"$charlm" train "${TINY[@]}" --steps 6 --eval-every 2 --out rn.st --stop-at 3 >/dev/null 2>&1 ||
  fail "the run without an average"
! grep -q '"ema"' rn.st.metrics.jsonl && grep -q val_loss rn.st.metrics.jsonl ||
  fail "a run without an average marks its metrics log: $(head -2 rn.st.metrics.jsonl)"
# the average never touches the training: its weights and optimizer state
# are those of the run without --ema-decay, bit for bit (bf16 where the CPU
# has it: the packed weights follow each evaluation's swaps)
st_py r3.st rn.st <<'EOF2' && echo "ok: --ema-decay leaves the trained weights and optimizer bit for bit" ||
t, _ = load(sys.argv[1])
u, _ = load(sys.argv[2])
assert {k: v for k, v in t.items() if not k.startswith('ema.')} == u
EOF2
  fail "--ema-decay changed the training"
st_meta r3.st "m['ema.decay'] = '0.5'" rd.st
st_meta r3.st "m['ema.updates'] = '4'" ru.st
st_py rn.st r3.st rp.st <<'EOF2'
t, m = load(sys.argv[1])
a, am = load(sys.argv[2])
t.update({k: v for k, v in a.items() if k.startswith('ema.')})
m.update({k: v for k, v in am.items() if k.startswith('ema.')})
save(sys.argv[3], t, m)
EOF2
refused "--resume, another decay" "^charlm: error: 'rd.st': its average's 'ema.decay' = 0.5 is not its run's --ema-decay 0.7" \
  "$charlm" train --resume rd.st
refused "eval, more updates than steps" "^charlm: error: checkpoint 'ru.st': .*'ema.updates' = 4 is more than its 3 steps" \
  "$charlm" eval --ckpt ru.st
refused "--resume, more updates than steps" "^charlm: error: 'ru.st': .*'ema.updates' = 4 is more than its 3 steps" \
  "$charlm" train --resume ru.st
refused "--resume, an average in a run without one" "^charlm: error: 'rp.st' keeps a weights' average (ema\.\*) but its run has no --ema-decay" \
  "$charlm" train --resume rp.st

# ---------------------------------------------------------------- 4. average
# average [--no-ema] of the kept checkpoints of steps 3 and 6 into OUT:
# the mean of their averages ("ema": true), with --no-ema of their trained
# weights ("ema": false), bit for bit; OUT keeps no average
average_of() {
  local out=$1 what=${2:-averages}
  "$charlm" average ${2:+--no-ema} --out "$out" m.st.step00000003.safetensors \
    m.st.step00000006.safetensors >/dev/null 2>a.log || fail "average ${2:-}: $(tail -1 a.log)"
  if st_py "$out" m.st.step00000003.safetensors m.st.step00000006.safetensors "$what" <<'EOF'; then
import array
t, m = load(sys.argv[1])
a, _ = load(sys.argv[2])
b, _ = load(sys.argv[3])
ema = sys.argv[4] == 'averages'
pre = 'ema.' if ema else ''
assert not any(k.startswith('ema.') for k in t) and not any(k.startswith('ema.') for k in m)
files = json.loads(m['averaged'])['files']
assert [f.get('ema') for f in files] == [ema, ema], files
for k, v in t.items():
    if k == 'tokenizer.spm':
        continue
    x, y = array.array('f', a[pre + k][2]), array.array('f', b[pre + k][2])
    want = array.array('f', [(p + q) / 2 for p, q in zip(x, y)])
    assert array.array('f', v[2]) == want, k
print('ok: average %smeans the files\' %s (%d tensors, "ema": %s); it keeps none'
      % ('' if ema else '--no-ema ', sys.argv[4], len(t), str(ema).lower()))
EOF
    :
  else
    fail "average ${2:-} did not mean the files' $what"
  fi
}
average_of avg.st
average_of avgn.st "trained weights"

# ---------------------------------------------------------------- 5. LoRA
"$charlm" train "${TINY[@]}" --init-from trained.st --lora-rank 2 --lr 0.3 --ema-decay 0.9 --steps 6 \
  --eval-every 3 --out l.st >l.json 2>l.log || fail "LoRA run: $(tail -1 l.log)"
st_py l.st <<'EOF' && echo "ok: the adapter checkpoint keeps the adapters' averages" || fail "LoRA averages"
t, m = load(sys.argv[1])
ema = sorted(k for k in t if k.startswith('ema.'))
assert len(ema) == sum(k.startswith('base_model.') for k in t) and all('lora_' in k for k in ema), ema[:3]
assert m['ema.updates'] == '6', m.get('ema.updates')
EOF
"$charlm" eval --ckpt l.st >le.json 2>le.log || fail "LoRA eval: $(tail -1 le.log)"
"$charlm" eval --ckpt l.st --no-ema >ln.json 2>/dev/null || fail "LoRA eval --no-ema"
grep -q "'l.st': using the weights' moving average" le.log && [ "$(field le.json ema)" = True ] &&
  [ "$(field le.json val_loss)" = "$(field l.json val_loss)" ] &&
  [ "$(field le.json val_loss)" != "$(field ln.json val_loss)" ] &&
  echo "ok: a LoRA checkpoint is judged with its adapters' average, as trained; --no-ema not" ||
  fail "LoRA eval: $(tail -1 le.json) --no-ema $(tail -1 ln.json) training's $(field l.json val_loss)"
"$charlm" sample --ckpt l.st "${SAMPLE[@]}" >/dev/null 2>&1 || fail "LoRA sample"

# ---------------------------------------------------------------- 6. seq2seq
S2S=(--data p.tsv --tokenizer char --d 16 --H 2 --enc-layers 1 --dec-layers 1 --d-ff 32 --max-tokens 200
  --valid-size 20 --test-size 20 --test-limit 2 --threads 1 --eval-every 3 --ema-decay 0.8 --factor 2)
"$seq2seq" train "${S2S[@]}" --steps 6 --out t.st >t.json 2>t.log || fail "seq2seq: $(tail -1 t.log)"
[ "$(field t.json ema_decay)" = 0.800000 ] || fail "seq2seq's JSON line: $(tail -1 t.json)"
strip_avg t.st tu.st use
strip_avg t.st tt.st trained
for s in 'the cat 5 sat' 'the cat 17 sat'; do echo "$s"; done >src.txt
"$seq2seq" translate --ckpt t.st <src.txt >tr.txt 2>tr.log || fail "translate: $(tail -1 tr.log)"
"$seq2seq" translate --ckpt tu.st <src.txt >tru.txt 2>/dev/null || fail "translate of the averages"
"$seq2seq" translate --ckpt t.st --no-ema --beam 2 <src.txt >trn.txt 2>/dev/null || fail "translate --no-ema"
"$seq2seq" translate --ckpt tt.st --beam 2 <src.txt >trt.txt 2>/dev/null || fail "translate, trained"
cmp -s tr.txt tru.txt && cmp -s trn.txt trt.txt && grep -q "moving average (EMA, decay 0.8" tr.log &&
  echo "ok: translate uses the average, --no-ema the trained weights" ||
  fail "translate: $(cat tr.txt tru.txt trn.txt trt.txt | tr '\n' '|')"
"$seq2seq" eval --ckpt t.st --test-limit 2 >te.json 2>/dev/null || fail "seq2seq eval"
"$seq2seq" eval --ckpt t.st --test-limit 2 --no-ema >ten.json 2>/dev/null || fail "seq2seq eval --no-ema"
[ "$(field te.json ema)" = True ] && [ "$(field ten.json ema)" = False ] &&
  echo "ok: seq2seq eval says which weights it judged" || fail "eval: $(tail -1 te.json) $(tail -1 ten.json)"
"$seq2seq" train "${S2S[@]}" --steps 6 --out tr.st --stop-at 4 >/dev/null 2>/dev/null || fail "seq2seq stopped"
"$seq2seq" train --resume tr.st >/dev/null 2>tr2.log || fail "seq2seq resumed: $(tail -1 tr2.log)"
same_tensors tr.st t.st all &&
  echo "ok: seq2seq resumed at step 4: the uninterrupted run's bytes" || fail "seq2seq resume differs"

# ---------------------------------------------------------------- 7. refusals
expect "--ema-start-update alone" 2 "--ema-start-update needs --ema-decay" \
  "$charlm" train "${TINY[@]}" --ema-start-update 3 --steps 2 --out x.st
expect "--ema-decay 1.5" 2 "ema-decay" "$charlm" train "${TINY[@]}" --ema-decay 1.5 --steps 2 --out x.st
expect "--ema-decay -0.1" 2 "ema-decay" "$charlm" train "${TINY[@]}" --ema-decay -0.1 --steps 2 --out x.st
[ ! -e x.st ] || fail "a refused run wrote x.st"
st_py m.st bad.st <<'EOF'
t, m = load(sys.argv[1])
drop = sorted(k for k in t if k.startswith('ema.'))[0]
save(sys.argv[2], {k: v for k, v in t.items() if k != drop}, m)
EOF
refused "an average missing a tensor" "checkpoint 'bad.st': its weights' average: .*ema\." \
  "$charlm" eval --ckpt bad.st
[ "$(grep -c . err.txt)" = 1 ] || fail "not one line: $(cat err.txt)"
"$charlm" eval --ckpt bad.st --no-ema >/dev/null 2>&1 && echo "ok: --no-ema reads its trained weights" ||
  fail "--no-ema on a file whose average is damaged"
# the averages' tensors without their metadata ("ema.updates", which says
# that a file keeps an average): a damaged file, not one to read as the
# trained weights; --no-ema still reads them
st_meta m.st "del m['ema.decay'], m['ema.updates']" nometa.st
st_meta m.st "del m['ema.updates']" halfmeta.st
for f in nometa halfmeta; do
  refused "$f: eval" "^charlm: error: checkpoint '$f.st': .*no metadata 'ema.updates'" "$charlm" eval --ckpt $f.st
  [ "$(grep -c . err.txt)" = 1 ] || fail "$f: not one line: $(cat err.txt)"
  rm -f nm.st
  refused "$f: average" "'$f.st'.*'ema.updates'" "$charlm" average --out nm.st m.st $f.st
  [ ! -e nm.st ] || fail "$f: average wrote nm.st"
  "$charlm" eval --ckpt $f.st --no-ema >/dev/null 2>&1 || fail "$f: --no-ema does not read it"
  rm -f nm.st
  "$charlm" average --no-ema --out nm.st m.st $f.st >/dev/null 2>&1 || fail "$f: average --no-ema does not read it"
  refused "$f: --init-from" "'$f.st'.*'ema.updates'" "$charlm" train "${TINY[@]}" --init-from $f.st --steps 2 --out x.st
  "$charlm" train "${TINY[@]}" --init-from $f.st --no-ema --steps 2 --stop-at 0 --out nx.st >/dev/null 2>&1 ||
    fail "$f: --init-from --no-ema does not read it"
  rm -f nx.st nx.st.* x.st
done
# train --help's --ema-decay names only commands and flags its program has
# (charlm has no translate, seq2seq no sample nor --init-from), and every
# command of either that reads a checkpoint takes --no-ema (average too;
# train's with --init-from)
for prog in "$charlm" "$seq2seq"; do
  name=$(basename "$prog")
  help=$("$prog" train --help)
  para=$(sed -n '/--ema-decay D/,/--ema-start-update/p' <<<"$help" | tr '\n' ' ')
  for cmd in sample translate eval attention average; do
    if grep -qw "$cmd" <<<"$para" && ! "$prog" "$cmd" --help >/dev/null 2>&1; then
      fail "$name train --help's --ema-decay names '$cmd', which $name does not have"
    fi
    if "$prog" "$cmd" --help >/dev/null 2>&1 &&
      ! grep -q -- "--no-ema" <<<"$("$prog" "$cmd" --help)"; then
      fail "$name $cmd takes no --no-ema"
    fi
  done
  grep -q -- "^  --ema-update-freq N" <<<"$help" || fail "$name train --help has no --ema-update-freq"
  if grep -q -- "^  --init-from" <<<"$help" && ! grep -q -- "^  --no-ema" <<<"$help"; then
    fail "$name train --help: --init-from without --no-ema"
  fi
  if grep -q -- "--init-from" <<<"$para" && ! grep -q -- "^  --init-from" <<<"$help"; then
    fail "$name train --help's --ema-decay names --init-from, which $name train does not take"
  fi
done
echo "ok: train --help's --ema-decay names what each program has"

# ---------------------------------------------------------------- 8. a full disk
# A run that has saved nothing yet keeps back the room of its first
# checkpoint (models/train/trainer.c first_reserve); the averages make it
# 4 bytes a trainable weight larger (140 KB here): a filler leaves the
# metrics log about 8 KB beyond the room of a checkpoint (size.st's).
BIG=(--data c.txt --d 64 --H 2 --layers 1 --d-ff 128 --T 16 --batch-size 2 --threads 1 --ema-decay 0.9)
mkdir full
trap 'end_children; umount "$dir/full" 2>/dev/null; rm -rf "$dir"' EXIT
if mount -t tmpfs -o size=1m tmpfs full 2>/dev/null; then
  "$charlm" train "${BIG[@]}" --steps 1 --out size.st >/dev/null 2>&1 || fail "the full disk's model"
  avail=$(df -B1 --output=avail full | tail -1)
  head -c $((avail - $(wc -c <size.st) - 65536 - 8000)) /dev/zero >full/filler
  rc=0
  timeout 300 "$charlm" train "${BIG[@]}" --eval-every 1000000 --steps 1000000 --log-every 1 \
    --out full/k.st >out.txt 2>err.txt || rc=$?
  if [ $rc -eq 1 ] && grep -q "^charlm: error: cannot write the metrics log: No space left on device.*stopped at step [0-9]* and saved the checkpoint 'full/k.st'" err.txt &&
    "$charlm" eval --ckpt full/k.st 2>/dev/null | grep -q '"ema": true'; then
    echo "ok: a full disk before the first save, with the averages: $(tail -1 err.txt)"
  else
    fail "a full disk before the first save, with the averages: exit $rc: $(tail -c 300 err.txt)"
  fi
  umount full
else
  echo "skip: a full disk (cannot mount a tmpfs here)"
fi
finish
