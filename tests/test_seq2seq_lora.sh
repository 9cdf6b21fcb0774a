#!/usr/bin/env bash
# seq2seq train --init-from BASE --lora-rank R: LoRA adapters on the
# translator (PEFT's behaviour; the loading shared with charlm's,
# models/train/finetune.h):
#   1. the checkpoint holds only the adapters of the encoder's and the
#      decoder's attention (self and cross) and feed-forward Linears, as
#      PEFT names them, and their optimizer state: small, no tokenizer of
#      its own, adapter_config and init_from recorded; only the adapters
#      train (trainable_params); --lora-targets matches as PEFT's
#      target_modules (cross_attn.q_proj: the cross-attention's alone)
#   2. every command that reads a checkpoint loads BASE with the adapters:
#      translate (cached as recomputed; scores not the base's), eval (the
#      run's own final chrF), attention, and the installed library
#      (cg_zoo_load: examples/zoo_translate.c gives translate's lines); --stop-at then --resume gives the
#      bytes of the run uninterrupted, dropout in the adapters too
#   3. a moved BASE: refused without --base, found with it (translate,
#      eval, attention, --resume); another base of the same shape, a base
#      of another shape and an adapter as the base are refused, naming why
#   4. seq2seq merge (PEFT's merge_and_unload): a full weights-only
#      checkpoint of the base's parameters with the adapters merged in,
#      the run's config, step and record, the base's tokenizer, "merged";
#      it translates and evaluates as the adapters did (scores within float
#      rounding) with the base gone; the adapters' average by default, their
#      trained weights with --no-ema; --resume refuses it; refused: a full
#      checkpoint, --out naming the adapter or its base (recorded or
#      --base), an existing --out, standard output the base; its JSON line,
#      its line on standard error, "merged" the adapter's identity; a full
#      disk for its line: exit 1 with the reason
#   5. refusals, one line: an adapter as --init-from, LoRA flags without
#      --init-from or --lora-rank, --no-ema with --lora-rank, --base
#      without --resume (exit 2), --base with a full checkpoint, averaging
#      an adapter (exit 1)
#   BASE is never written.
#   test_seq2seq_lora.sh SEQ2SEQ ZOO_TRANSLATE
set -uo pipefail
seq2seq=$1
zoo_translate=$2
. "$(dirname "$0")/shell_lib.sh" seq2seq_lora
zoo_data
awk -F'\t' '{print $2 "\t" $1}' p.tsv >q.tsv # the pairs turned round
S=(--threads 1 --max-tokens 200 --valid-size 20 --test-size 20 --test-limit 2)
M=(--tokenizer char --d 16 --H 4 --enc-layers 1 --dec-layers 1 --d-ff 32 --max-len 64)
"$seq2seq" train --data p.tsv "${M[@]}" --steps 30 --ema-decay 0.9 "${S[@]}" --out b.st >/dev/null 2>b.err ||
  fail "base: $(tail -1 b.err)"
cp b.st b.copy
base_size=$(stat -c %s b.st)

# ---- 1.
L=(--data q.tsv --init-from b.st --lora-rank 2 --lr 1e-2 --steps 20 --eval-every 10 "${S[@]}")
"$seq2seq" train "${L[@]}" --out l.st >l.out 2>l.err || fail "lora: $(tail -1 l.err)"
json_ok "lora: JSON line" l.out
names=$(st_py l.st <<'PY'
print('\n'.join(sorted(load(sys.argv[1])[0])))
PY
)
adapters=$(grep -c '^base_model\.model\..*\.lora_[AB]\.weight$' <<<"$names")
others=$(grep -v '^base_model\.model\.\|^optim\..*\.lora_[AB]\.weight\.' <<<"$names")
# 1 encoder layer (self_attn 4, ff 2) + 1 decoder layer (self_attn 4, cross_attn 4, ff 2): 16 adapters
[ "$adapters" = 32 ] && [ -z "$others" ] &&
  grep -qx 'base_model.model.decoder.layers.0.cross_attn.q_proj.lora_A.weight' <<<"$names" &&
  grep -qx 'base_model.model.encoder.layers.0.ff.fc2.lora_B.weight' <<<"$names" &&
  echo "ok: lora: 16 adapters (encoder, decoder self and cross attention, feed-forward), nothing else" ||
  fail "lora: tensors: $adapters adapter tensors, others: $others"
# q, k, v, o: 2x16 + 16x2 each (12 of them); fc1 and fc2: 2x16 + 32x2, 2x32 + 16x2 (2 each)
grep -q '"trainable_params": 1152' l.out && echo "ok: lora: only the adapters train (1152 values)" ||
  fail "lora: trainable_params: $(tail -1 l.out)"
record=$(st_py l.st <<'PY'
import os
t, m = load(sys.argv[1])
a, o = json.loads(m['adapter_config']), json.loads(m['init_from'])
print(a['r'], a['lora_alpha'], os.path.basename(o['path']), o['step'], o['size'],
      'tokenizer' in m or 'vocab' in m)
PY
)
[ "$record" = "2 4 b.st 30 $base_size False" ] && [ "$(stat -c %s l.st)" -lt $((base_size / 2)) ] &&
  grep -q "(fine-tuning LoRA adapters)" l.err &&
  echo "ok: lora: records its base and adapter_config, no tokenizer, $(stat -c %s l.st) bytes against $base_size" ||
  fail "lora: record '$record', $(stat -c %s l.st) bytes"
# PEFT's suffix match: the cross-attention's q and v alone
"$seq2seq" train "${L[@]}" --lora-targets cross_attn.q_proj,cross_attn.v_proj --stop-at 0 --out x2.st \
  >/dev/null 2>x2.err || fail "cross-attention targets: $(tail -1 x2.err)"
got=$(st_py x2.st <<'PY'
print(' '.join(sorted(k for k in load(sys.argv[1])[0] if k.startswith('base_model.'))))
PY
)
want="base_model.model.decoder.layers.0.cross_attn.q_proj.lora_A.weight base_model.model.decoder.layers.0.cross_attn.q_proj.lora_B.weight base_model.model.decoder.layers.0.cross_attn.v_proj.lora_A.weight base_model.model.decoder.layers.0.cross_attn.v_proj.lora_B.weight"
[ "$got" = "$want" ] && echo "ok: lora: --lora-targets cross_attn.q_proj,cross_attn.v_proj: those two alone" ||
  fail "lora: cross-attention targets: $got"
intact "lora: training" b.st b.copy

# ---- 2.
cut -f1 q.tsv | sed -n '1,6p' >src.txt
cut -f2 q.tsv | sed -n '1,6p' >ref.txt
"$seq2seq" translate --ckpt l.st --beam 3 <src.txt >c.out 2>c.err &&
  "$seq2seq" translate --ckpt l.st --beam 3 --no-cache <src.txt >n.out 2>/dev/null &&
  cmp -s c.out n.out && [ "$(wc -l <c.out)" = 6 ] &&
  echo "ok: lora: translate, cached as recomputed" || fail "lora: translate: $(tail -1 c.err)"
"$seq2seq" translate --ckpt l.st --score-reference ref.txt <src.txt >l.sc 2>/dev/null &&
  "$seq2seq" translate --ckpt b.st --score-reference ref.txt <src.txt >b.sc 2>/dev/null &&
  [ "$(wc -l <l.sc)" = 6 ] && ! cmp -s l.sc b.sc &&
  echo "ok: lora: the adapters change the references' scores" ||
  fail "lora: scores with the adapters: $(head -1 l.sc) against the base's $(head -1 b.sc)"
mapfile -t srcs <src.txt
"$seq2seq" translate --ckpt l.st --beam 3 "${srcs[@]}" >a.out 2>/dev/null &&
  "$zoo_translate" --ckpt l.st --beam 3 "${srcs[@]}" >z.out 2>z.err && cmp -s z.out a.out &&
  echo "ok: lora: the library (cg_zoo_load) loads base + adapters: translate's lines" ||
  fail "lora: zoo_translate: $(tail -1 z.err) $(diff z.out a.out | head -3)"
# an eval line without its clock ("decode_s": the seconds decoding took)
no_clock() { sed 's/"decode_s": [0-9.]*//' "$1"; }
chrf_run=$(sed -n 's/.*"chrf_beam": \([0-9.]*\),.*/\1/p' l.out)
"$seq2seq" eval --ckpt l.st --beam 4 --test-limit 2 >e.out 2>e.err || fail "lora: eval: $(tail -1 e.err)"
chrf_eval=$(sed -n 's/.*"chrf": \([0-9.]*\),.*/\1/p' e.out)
[ -n "$chrf_run" ] && [ "$chrf_eval" = "$chrf_run" ] &&
  echo "ok: lora: eval gives the run's final chrF $chrf_eval" ||
  fail "lora: eval chrF '$chrf_eval' against the run's '$chrf_run'"
"$seq2seq" attention --ckpt l.st --text "die katze 5 sass" --out att >/dev/null 2>a.err &&
  [ -s att/cross.png ] && echo "ok: lora: attention draws its heatmaps" ||
  fail "lora: attention: $(tail -1 a.err)"
D=("${L[@]}" --lora-dropout 0.2 --lora-alpha 8 --dropout 0.1)
"$seq2seq" train "${D[@]}" --out d.st >/dev/null 2>d.err &&
  "$seq2seq" train "${D[@]}" --stop-at 10 --out r.st >/dev/null 2>r.err &&
  "$seq2seq" train --resume r.st --threads 1 >/dev/null 2>r2.err && cmp -s d.st r.st &&
  echo "ok: lora: --stop-at 10 then --resume: the bytes of the run uninterrupted (adapter dropout 0.2)" ||
  fail "lora resume: $(tail -1 d.err) $(tail -1 r.err) $(tail -1 r2.err) $(cmp d.st r.st)"

# ---- 3.
"$seq2seq" train "${D[@]}" --stop-at 10 --out r2.st >/dev/null 2>&1 || fail "r2.st"
mkdir -p moved && cp b.st moved/b.st && mv b.st b.away
refused "lora: the base moved" "needs its base: .*pass --base FILE if it moved" \
  "$seq2seq" translate --ckpt l.st --beam 3 "die katze 5 sass"
"$seq2seq" translate --ckpt l.st --base moved/b.st --beam 3 <src.txt >m.out 2>m.err && cmp -s m.out c.out &&
  "$seq2seq" eval --ckpt l.st --base moved/b.st --beam 4 --test-limit 2 >me.out 2>/dev/null &&
  [ "$(no_clock me.out)" = "$(no_clock e.out)" ] &&
  "$seq2seq" attention --ckpt l.st --base moved/b.st --text "die katze" --out att2 >/dev/null 2>&1 &&
  "$zoo_translate" --ckpt l.st --base moved/b.st --beam 3 "${srcs[@]}" >zm.out 2>/dev/null &&
  cmp -s zm.out a.out &&
  echo "ok: lora: --base finds a moved base (translate, eval, attention, cg_zoo_load_base)" ||
  fail "lora: --base: $(tail -1 m.err) $(diff <(no_clock me.out) <(no_clock e.out))"
refused "lora: --resume, the base moved" "needs its base" "$seq2seq" train --resume r2.st --threads 1
"$seq2seq" train --resume r2.st --base moved/b.st --threads 1 >/dev/null 2>r3.err && cmp -s r2.st d.st &&
  echo "ok: lora: --resume --base: the run uninterrupted's bytes" || fail "lora: --resume --base: $(tail -1 r3.err)"
mv b.away b.st
"$seq2seq" train --data p.tsv "${M[@]}" --steps 2 "${S[@]}" --out other.st >/dev/null 2>&1 || fail "other base"
refused "lora: another base of the same shape" "'other.st' is not the base checkpoint of adapter 'l.st'" \
  "$seq2seq" translate --ckpt l.st --base other.st "die katze"
"$seq2seq" train --data p.tsv "${M[@]}" --dec-layers 2 --steps 2 "${S[@]}" --out deep.st >/dev/null 2>&1 ||
  fail "deep base"
refused "lora: a base of another shape" "dec_layers is 2 in one and 1 in the other" \
  "$seq2seq" eval --ckpt l.st --base deep.st
refused "lora: an adapter as the base" "is itself an adapter checkpoint" \
  "$seq2seq" translate --ckpt l.st --base d.st "die katze"
intact "lora: loading" b.st b.copy

# ---- 4.
close_scores() { # close_scores A B: two --score-reference outputs within 1e-4
  python3 -c '
import sys
a = [float(l.split("\t")[1]) for l in open(sys.argv[1])]
b = [float(l.split("\t")[1]) for l in open(sys.argv[2])]
sys.exit(0 if len(a) == len(b) == 6 and all(abs(x - y) <= 1e-4 * max(1, abs(y)) for x, y in zip(a, b)) else 1)
' "$1" "$2"
}
"$seq2seq" merge --out mg.st l.st >mg.out 2>mg.err || fail "merge: $(tail -1 mg.err)"
json_ok "merge: JSON line" mg.out
grep -q '"adapters": 16, "params": 5968}' mg.out || fail "merge: $(cat mg.out)"
# the whole line (the checkpoint written, the adapter merged), one line on
# standard error, and no note of an average: l.st's run kept none
[ "$(cat mg.out)" = '{"checkpoint": "mg.st", "merged": "l.st", "adapters": 16, "params": 5968}' ] &&
  [ "$(cat mg.err)" = "seq2seq: 16 adapters of 'l.st' merged into its base, written to 'mg.st'" ] &&
  echo "ok: merge: its JSON line, one line on standard error, no note of an average" ||
  fail "merge: the line '$(cat mg.out)', standard error '$(cat mg.err)'"
rec=$(st_py mg.st l.st b.st <<'PY'
import os
t, m = load(sys.argv[1])
_, a = load(sys.argv[2])
tb, b = load(sys.argv[3])
base_params = sorted(k for k in tb if not k.startswith(('optim.', 'ema.')))
print(sorted(t) == base_params, m['config'] == a['config'], m['step'] == a['step'],
      m['train'] == a['train'], m['vocab'] == b['vocab'],
      os.path.basename(json.loads(m['merged'])['adapter']['path']),
      os.path.basename(json.loads(m['init_from'])['path']),
      all(v[0] == 'F32' for v in t.values()))
PY
)
[ "$rec" = "True True True True True l.st b.st True" ] &&
  echo "ok: merge: the base's parameters (F32), the run's config, step and record, the base's vocabulary" ||
  fail "merge: record '$rec'"
# "merged" is the adapter's identity (its absolute path, size and step: 20),
# not its base's (30 steps, another size)
adapter_rec=$(st_py mg.st l.st <<'PY'
import os
_, m = load(sys.argv[1])
r = json.loads(m['merged'])['adapter']
print(r['path'] == os.path.abspath(sys.argv[2]), r['size'] == str(os.path.getsize(sys.argv[2])), r['step'])
PY
)
[ "$adapter_rec" = "True True 20" ] && echo "ok: merge: \"merged\" records the adapter (path, size, step 20)" ||
  fail "merge: \"merged\": '$adapter_rec' $(st_py mg.st <<<"print(load(sys.argv[1])[1]['merged'])")"
mv b.st b.away
"$seq2seq" translate --ckpt mg.st --beam 3 <src.txt >mg.tr 2>mg.terr && cmp -s mg.tr c.out &&
  "$seq2seq" translate --ckpt mg.st --score-reference ref.txt <src.txt >mg.sc 2>/dev/null &&
  close_scores mg.sc l.sc && echo "ok: merge: without the base, the adapters' translations and scores (within 1e-4)" ||
  fail "merge: translate: $(tail -1 mg.terr) $(head -2 mg.sc) against $(head -2 l.sc)"
"$seq2seq" eval --ckpt mg.st --beam 4 --test-limit 2 >mge.out 2>/dev/null &&
  [ "$(sed -n 's/.*"chrf": \([0-9.]*\),.*/\1/p' mge.out)" = "$chrf_run" ] &&
  echo "ok: merge: eval gives the run's chrF" || fail "merge: eval $(cat mge.out)"
refused "merge: --resume" "LoRA adapters merged into their base" "$seq2seq" train --resume mg.st
refused "merge: the base moved" "needs its base" "$seq2seq" merge --out mg2.st l.st
"$seq2seq" merge --out mg2.st --base moved/b.st l.st >/dev/null 2>&1 && cmp -s mg.st mg2.st &&
  echo "ok: merge --base: the same bytes" || fail "merge --base"
# --out naming the --base given: refused before anything is read, as an input
refused "merge: --out its --base" "--out 'moved/b.st' is the same file as the checkpoint 'moved/b.st' it merges" \
  "$seq2seq" merge --force --out moved/b.st --base moved/b.st l.st
intact "merge: --out its --base" moved/b.st b.copy
mv b.away b.st
refused "merge: a full checkpoint" "'b.st' is a full checkpoint (it holds every weight): merge takes" \
  "$seq2seq" merge --out x.st b.st
refused "merge: --out the base" "is the same file as '.*b.st', the base of adapter 'l.st'" \
  "$seq2seq" merge --force --out b.st l.st
refused "merge: --out the adapter" "the same file as the checkpoint 'l.st' it merges" \
  "$seq2seq" merge --force --out l.st l.st
refused "merge: an existing --out" "'mg.st' exists; pass --force" "$seq2seq" merge --out mg.st l.st
# standard output appended to the base the adapter records (no --base given):
# refused, the base intact, nothing written
refused_quietly "merge: standard output the base" "standard output is the base checkpoint '.*b.st', which this command reads" \
  so.st sh -c 'exec "$@" >>b.st' sh "$seq2seq" merge --out so.st l.st
intact "merge: standard output the base" b.st b.copy
cmp -s b.st b.copy || cp b.copy b.st
# the line lost (a full disk): exit 1 with the reason the write gave (the
# program's last check of standard output knows only "write error")
refused "merge > /dev/full" "cannot write the output: No space left on device" \
  sh -c 'exec "$@" >/dev/full' sh "$seq2seq" merge --out mf.st l.st
expect "merge: no --out" 2 "merge needs --out FILE" "$seq2seq" merge l.st
expect "merge: two adapters" 2 "merge takes one adapter checkpoint (got 2" "$seq2seq" merge --out x.st l.st d.st
# a run that keeps an average of its adapters: merged as its average (a note
# says so), or its trained adapters with --no-ema, each as translate reads it
"$seq2seq" train "${L[@]}" --ema-decay 0.5 --out le.st >/dev/null 2>le.err || fail "ema lora: $(tail -1 le.err)"
"$seq2seq" merge --out me.st le.st >/dev/null 2>me.err && grep -q "moving average" me.err &&
  "$seq2seq" merge --no-ema --out mn.st le.st >/dev/null 2>&1 && ! cmp -s me.st mn.st &&
  "$seq2seq" translate --ckpt le.st --score-reference ref.txt <src.txt >le.sc 2>/dev/null &&
  "$seq2seq" translate --ckpt le.st --no-ema --score-reference ref.txt <src.txt >ln.sc 2>/dev/null &&
  "$seq2seq" translate --ckpt me.st --score-reference ref.txt <src.txt >me.sc 2>/dev/null &&
  "$seq2seq" translate --ckpt mn.st --score-reference ref.txt <src.txt >mn.sc 2>/dev/null &&
  ! cmp -s le.sc ln.sc && close_scores me.sc le.sc && close_scores mn.sc ln.sc &&
  echo "ok: merge: the adapters' average by default, --no-ema their trained weights, each as translate scores them" ||
  fail "merge --no-ema: $(tail -1 me.err) $(head -1 me.sc) $(head -1 le.sc) $(head -1 mn.sc) $(head -1 ln.sc)"
intact "merge" b.st b.copy

# ---- 5.
expect "an adapter as --init-from" 1 "'l.st' is a LoRA adapter checkpoint (of the base" \
  "$seq2seq" train --data q.tsv --init-from l.st "${S[@]}" --out x.st
expect "--lora-rank without --init-from" 2 "--lora-rank needs --init-from" \
  "$seq2seq" train --data q.tsv --lora-rank 2 "${S[@]}" --out x.st
expect "--lora-dropout without --lora-rank" 2 "--lora-dropout needs --lora-rank" \
  "$seq2seq" train --data q.tsv --init-from b.st --lora-dropout 0.1 "${S[@]}" --out x.st
expect "--no-ema with --lora-rank" 2 "--no-ema with --lora-rank" \
  "$seq2seq" train --data q.tsv --init-from b.st --lora-rank 2 --no-ema "${S[@]}" --out x.st
expect "--base without --resume" 2 "--base names the base of a LoRA checkpoint given to --resume" \
  "$seq2seq" train --data q.tsv --init-from b.st --base b.st "${S[@]}" --out x.st
expect "an unknown target" 1 "--lora-targets: 'fc9' names no Linear of the Seq2Seq (its Linears: q_proj, k_proj, v_proj, o_proj, fc1, fc2)" \
  "$seq2seq" train --data q.tsv --init-from b.st --lora-rank 2 --lora-targets fc9 "${S[@]}" --out x.st
expect "--base with a full checkpoint" 1 "'b.st' is a full checkpoint" \
  "$seq2seq" translate --ckpt b.st --base other.st "die katze"
expect "averaging an adapter" 1 "'l.st' is a LoRA adapter checkpoint" \
  "$seq2seq" average --out x.st l.st d.st
[ ! -e x.st ] && echo "ok: nothing written by the refusals" || fail "x.st written"
intact "the refusals" b.st b.copy
finish
