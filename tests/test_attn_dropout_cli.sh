#!/usr/bin/env bash
# --attention-dropout P in both programs (fairseq's --attention-dropout,
# nanoGPT's attn_dropout; the op itself: test_attn_dropout):
#   1. charlm: the config records attn_dropout; the training differs from a
#      run without it; --stop-at then --resume writes the bytes of the run
#      uninterrupted; --resume with the flag is refused; --init-from takes
#      the base's unless the flag is given; an adapter run over that base
#      resumes bit for bit too
#   2. seq2seq: the same record and resume
#   3. refusals: out of [0, 1], one line, exit 2
#   test_attn_dropout_cli.sh CHARLM SEQ2SEQ
set -uo pipefail
charlm=$1
seq2seq=$2
. "$(dirname "$0")/shell_lib.sh" attn_dropout_cli
zoo_data
last() { tail -1 "$1" | cut -d, -f1-3; }

# ---- 1.
LM=(--data c.txt --d 16 --H 2 --layers 2 --d-ff 32 --T 16 --batch-size 4 --threads 1 --eval-every 10
  --steps 20 --dropout 0.1)
"$charlm" train "${LM[@]}" --attention-dropout 0.2 --out full.st >full.out 2>full.err ||
  fail "charlm train --attention-dropout 0.2: $(tail -1 full.err)"
"$charlm" train "${LM[@]}" --out none.st >none.out 2>none.err || fail "charlm train: $(tail -1 none.err)"
[ "$(cfg_key full.st attn_dropout)" = 0.2 ] && [ "$(cfg_key none.st attn_dropout)" = 0 ] &&
  echo "ok: the config records attn_dropout (0.2, and 0 without the flag)" ||
  fail "attn_dropout: $(cfg_key full.st attn_dropout) and $(cfg_key none.st attn_dropout)"
[ "$(last full.out)" != "$(last none.out)" ] && echo "ok: attention dropout changes the training" ||
  fail "the same run with and without attention dropout: $(last full.out)"
"$charlm" train "${LM[@]}" --attention-dropout 0.2 --stop-at 10 --out half.st >/dev/null 2>half.err ||
  fail "--stop-at 10: $(tail -1 half.err)"
"$charlm" train --resume half.st --threads 1 >/dev/null 2>res.err || fail "--resume: $(tail -1 res.err)"
cmp -s full.st half.st && echo "ok: --stop-at 10 then --resume: the bytes of the uninterrupted run" ||
  fail "--resume under attention dropout differs from the run uninterrupted"
expect "charlm --resume --attention-dropout" 2 "drop --attention-dropout" \
  "$charlm" train --resume half.st --attention-dropout 0.5
"$charlm" train --data c.txt --init-from full.st --steps 5 --threads 1 --out ft.st >/dev/null 2>ft.err ||
  fail "--init-from: $(tail -1 ft.err)"
"$charlm" train --data c.txt --init-from full.st --steps 5 --threads 1 --attention-dropout 0.05 \
  --out ft2.st >/dev/null 2>ft2.err || fail "--init-from --attention-dropout: $(tail -1 ft2.err)"
[ "$(cfg_key ft.st attn_dropout)" = 0.2 ] && [ "$(cfg_key ft2.st attn_dropout)" = 0.05 ] &&
  echo "ok: --init-from keeps the base's attention dropout, or takes the flag's" ||
  fail "--init-from: $(cfg_key ft.st attn_dropout), $(cfg_key ft2.st attn_dropout)"
LO=(--data c.txt --init-from full.st --lora-rank 2 --steps 10 --eval-every 5 --threads 1)
"$charlm" train "${LO[@]}" --out ad.st >/dev/null 2>ad.err || fail "LoRA: $(tail -1 ad.err)"
"$charlm" train "${LO[@]}" --stop-at 5 --out ad2.st >/dev/null 2>ad2.err || fail "LoRA --stop-at: $(tail -1 ad2.err)"
"$charlm" train --resume ad2.st --threads 1 >/dev/null 2>ad3.err || fail "LoRA --resume: $(tail -1 ad3.err)"
cmp -s ad.st ad2.st && echo "ok: LoRA over a base with attention dropout: --resume is bit-identical" ||
  fail "LoRA --resume differs under the base's attention dropout"

# ---- 2.
S2=(--data p.tsv --tokenizer char --d 16 --H 2 --enc-layers 1 --dec-layers 1 --d-ff 32 --max-tokens 200
  --valid-size 20 --test-size 20 --test-limit 2 --threads 1 --eval-every 10 --steps 20 --attention-dropout 0.1)
"$seq2seq" train "${S2[@]}" --out s.st >/dev/null 2>s.err || fail "seq2seq train: $(tail -1 s.err)"
"$seq2seq" train "${S2[@]}" --stop-at 10 --out s2.st >/dev/null 2>s2.err || fail "seq2seq --stop-at: $(tail -1 s2.err)"
"$seq2seq" train --resume s2.st --threads 1 >/dev/null 2>s3.err || fail "seq2seq --resume: $(tail -1 s3.err)"
[ "$(cfg_key s.st attn_dropout)" = 0.1 ] && cmp -s s.st s2.st &&
  echo "ok: seq2seq records attn_dropout 0.1 and resumes bit for bit" ||
  fail "seq2seq: attn_dropout $(cfg_key s.st attn_dropout), resume $(cmp s.st s2.st)"

# ---- 3.
expect "charlm --attention-dropout 1.5" 2 "--attention-dropout: 1.5 is out of range \[0, 1\]" \
  "$charlm" train --data c.txt --attention-dropout 1.5
expect "seq2seq --attention-dropout -0.1" 2 "--attention-dropout: -0.1 is out of range \[0, 1\]" \
  "$seq2seq" train --data p.tsv --attention-dropout -0.1
finish
