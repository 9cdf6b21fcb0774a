#!/usr/bin/env bash
# The exit codes of every program and command (round six; README "Errors and
# exit codes"): 2 for a bad command line (an unknown flag, a missing or
# malformed value, a value out of range, flags that contradict each other,
# a malformed CG_ variable), 1 for bad input or a failure (a file missing or
# damaged, a value that only a file's contents refute), each with one line
# on stderr, "PROG: error: ...". Meson suite 'reliability'.
#  1. the sweep: every flag that a command's --help names, given a value no
#     flag takes ("x"; text flags a byte that is not UTF-8; a switch a
#     value), is exit 2 with one line naming it. A new flag is swept as soon
#     as its help line exists; a flag whose value is a path is the table's.
#     CG_SWEEP=0 leaves it out (tests/meson.build: under a sanitizer).
#  2. the table: one row per refusal that needs more than a bad word (a
#     range, two flags together, a path, a file's contents), with its code
#     and the start of its message;
#  3. a reader of the output that went away (`| head`, a closed pipe):
#     one line "PROG: error: cannot write the output: Broken pipe", exit 1,
#     a stream of output stopped at its next write (SIGPIPE ended them).
#   test_exit_codes.sh CHARLM SEQ2SEQ BENCH DECODE_BENCH SGEMM_BENCH
set -uo pipefail
charlm=$1
seq2seq=$2
bench=$3
decode_bench=$4
sgemm_bench=$5
. "$(dirname "$0")/shell_lib.sh" exit_codes

zoo_ckpts
TR="--data c.txt ${TINY[*]} --steps 2 --out o.st"
S2="--data p.tsv ${S2S[*]} --steps 2 --out o.st"
BE="--steps 1 --warmup 0 --threads 1"
DB="--d 32 --d-ff 64 --layers 1 --vocab 16 --runs 1"
# one_line NAME PROG: the last command's stderr is one line "PROG: error: ..."
one_line() {
  [ "$(wc -l <err.txt)" -eq 1 ] && grep -q "^$2: error: " err.txt ||
    fail "$1: stderr is not one line '$2: error: ...': $(head -c 300 err.txt)"
}

# ---- 1. the sweep
# paths: the table's (a missing file is exit 1; --out may be written)
paths=" --data --ckpt --out --resume --init-from --base --extra-data --attention --dump-batches --prompt-file --score-reference "
texts=" --prompt --text --target " # any UTF-8 text is a value
sweep() {                          # PROG-VAR PROG BASE-ARGS: every flag of PROG's --help
  local exe=$1 name=$2 base=$3 flag rc n=0
  shift 3
  local help
  help=$("${!exe}" "$@" --help 2>&1) || fail "$name --help: exit $?"
  for flag in $(grep -o -- '--[a-zA-Z][a-zA-Z0-9-]*' <<<"$help" | sort -u); do
    [[ $paths == *" $flag "* ]] && continue
    local v=x
    [[ $texts == *" $flag "* ]] && v=$'\xff'
    rc=0
    # shellcheck disable=SC2086 # base: words
    timeout 120 "${!exe}" "$@" $base "$flag=$v" ${POS:+"$POS"} >out.txt 2>err.txt </dev/null || rc=$?
    if [ "$rc" -ne 2 ]; then
      fail "$name $flag=x: exit $rc (expected 2): $(head -c 300 err.txt)"
    elif ! grep -q -- "$flag" err.txt; then
      fail "$name $flag=x: the message does not name the flag: $(head -c 300 err.txt)"
    else
      one_line "$name $flag=x" "${name%% *}"
      n=$((n + 1))
    fi
  done
  echo "ok: $name: $n flags swept"
}
if [ "${CG_SWEEP:-1}" = 1 ]; then
  POS= sweep charlm "charlm train" "$TR" train
  POS= sweep charlm "charlm sample" "--ckpt a.st --length 5" sample
  POS= sweep charlm "charlm eval" "--ckpt a.st" eval
  POS= sweep charlm "charlm average" "--out avg.st" average
  POS= sweep charlm "charlm merge" "--out mg.st" merge
  POS= sweep seq2seq "seq2seq train" "$S2" train
  POS="the cat" sweep seq2seq "seq2seq translate" "--ckpt s.st" translate
  POS= sweep seq2seq "seq2seq eval" "--ckpt s.st --test-limit 2" eval
  POS= sweep seq2seq "seq2seq attention" "--ckpt s.st --text the --out att" attention
  POS= sweep seq2seq "seq2seq average" "--out avg.st" average
  POS= sweep seq2seq "seq2seq merge" "--out mg.st" merge
  POS= sweep bench "bench" "$BE"
  POS= sweep decode_bench "decode_bench" "$DB"
else
  echo "note: the sweep is left out (CG_SWEEP=0)"
fi

# ---- 2. the table: CODE | PROGRAM | ARGUMENTS (words; $TR ... expanded) | the
# start of the message after "PROG: error: " (a grep pattern)
cp a.st full.st
while IFS='|' read -r code prog args pat; do
  code=${code// /} prog=${prog// /} pat=${pat# }
  [ -z "$code" ] || [ "${code:0:1}" = "#" ] && continue
  eval "argv=($args)"
  expect "$prog $args" "$code" "^$prog: error: $pat" "${!prog}" "${argv[@]}"
  one_line "$prog $args" "$prog"
done <<'EOF'
# the command itself
2 | charlm  |                                          | missing command (train, sample, eval, average or merge; try --help)
2 | charlm  | bogus                                    | unknown command 'bogus'
2 | charlm  | help bogus                               | unknown command 'bogus'
2 | seq2seq | help train eval                          | help takes one command
2 | seq2seq | train extra                              | unexpected argument 'extra'
# names and values checked after the parse: still the command line
2 | charlm  | train $TR --preset huge                  | --preset: unknown preset 'huge'
2 | seq2seq | train $S2 --preset huge                  | --preset: unknown preset 'huge'
2 | charlm  | train $TR --preset ti                    | --preset: unknown preset 'ti' (choices: tiny, 
2 | charlm  | train $TR --d 30 --H 4                   | charlm config: d=30 is not divisible by H=4
2 | seq2seq | train $S2 --d 30 --H 4                   | seq2seq config: d=30 is not divisible by H=4
2 | seq2seq | train $S2 --seed 5000000000              | --seed: 5000000000 is out of range
2 | seq2seq | eval --ckpt s.st --split train           | --split: 'train' is not one of test, valid
2 | seq2seq | eval --ckpt s.st --test-limit 0          | --test-limit: 0 is out of range
2 | charlm  | sample --ckpt a.st --prompt $'ab\xffcd'   | --prompt is not valid UTF-8 (bad byte 0xff at offset 2)
2 | seq2seq | attention --ckpt s.st --text $'\xff'      | --text is not valid UTF-8
2 | seq2seq | attention --ckpt s.st --text the --target $'\xfe' | --target is not valid UTF-8
2 | charlm  | sample --ckpt a.st --attention x.jpg     | --attention: x.jpg: unknown picture format
2 | charlm  | sample --ckpt a.st --prompt a --prompt-file a.st | --prompt and --prompt-file both give the prompt
2 | charlm  | train $TR --dropout 1.5                  | --dropout: 1.5 is out of range \[0, 1\]
2 | seq2seq | train $S2 --label-smoothing 1.5          | --label-smoothing: 1.5 is out of range \[0, 1\]
# the decoding limits (fairseq-generate's), each checked once: a value by the
# flag table, two flags by translate's limits, the model's max_len once loaded
2 | seq2seq | translate --ckpt s.st --max-len-a -1 the  | --max-len-a: -1 is out of range \[0, 1e+06\]
2 | seq2seq | translate --ckpt s.st --max-len-a nan the | --max-len-a: 'nan' is not a finite number
2 | seq2seq | translate --ckpt s.st --max-len-b -3 the  | --max-len-b: -3 is out of range
2 | seq2seq | translate --ckpt s.st --max-len-b 2.5 the | --max-len-b: '2.5' is not an integer
2 | seq2seq | translate --ckpt s.st --min-len -1 the    | --min-len: -1 is out of range
2 | seq2seq | eval --ckpt s.st --no-repeat-ngram-size -2 | --no-repeat-ngram-size: -2 is out of range
2 | seq2seq | translate --ckpt s.st --max-len-a 0 --max-len-b 0 the | --max-len-a 0 --max-len-b 0 leave no token to translate
2 | seq2seq | translate --ckpt s.st --max-len-a 0 --max-len-b 3 --min-len 5 the | --min-len 5 is more than the 3 tokens --max-len-b 3 allows with --max-len-a 0
2 | seq2seq | eval --ckpt s.st --max-len-a 0 --max-len-b 3 --min-len 5 | --min-len 5 is more than the 3 tokens
# flags that contradict each other
2 | seq2seq | train $S2 --lr 1e-3 --factor 1           | --lr and --factor both set the learning rate
2 | charlm  | train $TR --resume a.st                  | --resume continues a run with the model and recipe of its checkpoint; drop --d
2 | seq2seq | train --resume s.st --dropout 0.5        | --resume continues a run .*; drop --dropout
2 | charlm  | train --init-from a.st --resume a.st     | --init-from starts a new run
2 | charlm  | train $TR --lora-rank 2                  | --lora-rank needs --init-from
2 | charlm  | train $TR --ema-update-freq 0            | --ema-update-freq: 0 is out of range
2 | charlm  | train $TR --ema-decay 0.9 --ema-update-freq -2 | --ema-update-freq: -2 is out of range
2 | seq2seq | train $S2 --ema-decay 0.9 --ema-update-freq 2.5 | --ema-update-freq: '2.5' is not an integer
2 | charlm  | train $TR --ema-update-freq 2            | --ema-update-freq needs --ema-decay
2 | seq2seq | train $S2 --ema-update-freq 2            | --ema-update-freq needs --ema-decay
2 | charlm  | train $TR --no-ema                       | --no-ema needs --init-from
2 | charlm  | train --init-from a.st --lora-rank 2 --no-ema --steps 2 --out o.st | --no-ema with --lora-rank
2 | charlm  | train $TR --base a.st                    | --base names the base of a LoRA checkpoint
2 | charlm  | train $TR --tokenizer char --vocab-size 300 | --vocab-size needs --tokenizer bpe
2 | seq2seq | attention --ckpt s.st                    | attention needs --text
2 | charlm  | average --out avg.st a.st                | average needs at least 2 checkpoints
2 | seq2seq | average a.st a.st                        | average needs --out
2 | bench   | --model charlm --preset real             | --preset real is the translator's recipe
2 | bench   | --model seq2seq --preset tiny --dump-batches d.st | --dump-batches needs --preset real
2 | bench   | $BE --d 40                               | --d must be a multiple of 32
2 | bench   | $BE --precision fp16                     | --precision: 'fp16' is not one of fp32, bf16
2 | decode_bench | --runs 100                          | --runs: 100 is out of range
2 | decode_bench | --d 12x                             | --d: '12x' is not an integer
2 | decode_bench | extra                               | unexpected argument 'extra'
2 | sgemm_bench | 10x                                  | N: '10x' is not an integer
2 | sgemm_bench | 8 0                                  | RUNS: 0 is out of range
2 | sgemm_bench | 8 1 extra                            | unexpected argument 'extra'
2 | sgemm_bench | --bogus                              | unknown option '--bogus'
# files: missing, of another kind, or refuted by their contents (exit 1)
1 | charlm  | sample --ckpt nope.st                    | checkpoint 'nope.st': No such file
# a newline in a name is a space in the one line (round thirty)
1 | charlm  | sample --ckpt $'no\npe.st'               | checkpoint 'no pe.st': No such file
1 | charlm  | eval --ckpt a.st --data nope.txt         | cannot open 'nope.txt'
1 | charlm  | train --resume nope.st                   | checkpoint 'nope.st': No such file
1 | charlm  | train $TR --data nope.txt                | cannot open 'nope.txt'
1 | charlm  | train $TR --init-from nope.st            | --init-from: checkpoint 'nope.st'
1 | seq2seq | train $S2 --extra-data nope.tsv          | --extra-data: cannot open 'nope.tsv'
1 | seq2seq | translate --ckpt a.st the                | 'a.st' is not a seq2seq checkpoint
1 | seq2seq | translate --ckpt s.st --min-len 300 the  | --min-len 300 is more than the 256 tokens this model takes (its max_len)
1 | seq2seq | eval --ckpt s.st --min-len 300           | --min-len 300 is more than the 256 tokens this model takes
1 | seq2seq | eval --ckpt s.st --data c.txt            | c.txt:1: missing tab
1 | charlm  | eval --ckpt a.st --data p.tsv            | '.*p.tsv' is not the data this checkpoint was trained on
1 | charlm  | sample --ckpt a.st --base full.st        | --base full.st names the base of a LoRA adapter checkpoint, but 'a.st' is a full checkpoint
1 | charlm  | sample --ckpt a.st --top-k 1000          | --top-k 1000 is more than the
1 | charlm  | train --resume a.st --steps 4            | 'a.st' is already at step 4 of 4
1 | charlm  | train --resume a.st --steps 8 --stop-at 4 | --stop-at 4: 'a.st' is already at step 4
1 | charlm  | train $TR --init-from a.st --d 32        | 'a.st' fixes the model's shape .* --d 32 contradicts it
1 | charlm  | train $TR --init-from a.st --lora-rank 2 --lora-targets bogus | --lora-targets: 'bogus' names no Linear of the CharLM (its Linears:
1 | seq2seq | train $S2 --max-len 10                   | p.tsv: no training pair fits --max-len 10
1 | charlm  | average --out avg.st a.st s.st           | 's.st' is not a charlm checkpoint
1 | seq2seq | merge --out mg.st s.st                   | 's.st' is a full checkpoint (it holds every weight): merge takes
2 | charlm  | merge a.st                               | merge needs --out FILE
1 | charlm  | sample --ckpt a.st --attention nodir/x.png | --attention: cannot write 'nodir/x.png': directory 'nodir'
1 | charlm  | train --data c.txt --out a.st            | checkpoint a.st exists
1 | bench   | --model seq2seq --preset real --data nope.tsv | cannot open 'nope.tsv'
EOF
# "PROG help CMD" is "PROG CMD --help" (it printed the program's help)
for pc in "charlm train" "charlm average" "seq2seq translate" "seq2seq attention"; do
  set -- $pc
  a=$("${!1}" help "$2" 2>&1) b=$("${!1}" "$2" --help 2>&1)
  [ -n "$a" ] && [ "$a" = "$b" ] && echo "ok: $pc --help == $1 help $2" ||
    fail "$1 help $2 is not $pc --help: $(printf '%s' "$a" | head -2)"
done
# a malformed CG_ variable is a malformed flag
for p in charlm seq2seq bench; do
  expect "$p: CG_DIST_TIMEOUT=10abc" 2 "^$p: error: environment variable CG_DIST_TIMEOUT: '10abc'" \
    env CG_DIST_TIMEOUT=10abc "${!p}" --help
done

# ---- 3. a reader of the output that went away: one line, "PROG: error:
# cannot write the output: Broken pipe", exit 1 (SIGPIPE ended them, exit
# 141, as it ends `yes | head`; a result lost is exit 1 as on a full disk),
# and a stream of output (sample, translate) stops at once
# gone NAME PROG CMD...: CMD's stdout a pipe whose reader closed before it
# started (SIGPIPE at its default, as a shell leaves it)
gone() {
  local name=$1 prog=$2 rc=0
  shift 2
  python3 -c '
import os, subprocess, sys
r, w = os.pipe()
os.close(r)
p = subprocess.run(sys.argv[1:], stdout=w, stdin=subprocess.DEVNULL, timeout=120)
sys.exit(p.returncode if p.returncode >= 0 else 128 - p.returncode)' "$@" 2>err.txt || rc=$?
  if [ "$rc" -ne 1 ]; then
    fail "$name, its reader gone: exit $rc (expected 1): $(tail -c 300 err.txt)"
  elif [ "$(tail -1 err.txt)" != "$prog: error: cannot write the output: Broken pipe" ] ||
     [ "$(grep -c ': error: ' err.txt)" -ne 1 ]; then
    fail "$name, its reader gone: $(tail -c 300 err.txt)"
  else
    echo "ok: $name, its reader gone: $(tail -1 err.txt)"
  fi
}
gone "charlm sample" charlm "$charlm" sample --ckpt a.st --length 5 --prompt "the "
gone "charlm eval" charlm "$charlm" eval --ckpt a.st
gone "charlm --help" charlm "$charlm" train --help
gone "charlm average" charlm "$charlm" average --out avg2.st a.st a.st
gone "charlm train" charlm "$charlm" train $TR
"$charlm" eval --ckpt o.st >/dev/null 2>err.txt && echo "ok: its checkpoint was saved and loads" ||
  fail "charlm train, its reader gone: no checkpoint: $(tail -1 err.txt)"
gone "seq2seq translate" seq2seq "$seq2seq" translate --ckpt s.st "the cat 1 sat" "the cat 2 sat"
gone "seq2seq translate (a line not translated)" seq2seq "$seq2seq" translate --ckpt s.st "the cat" $'\xff'
gone "seq2seq eval" seq2seq "$seq2seq" eval --ckpt s.st --test-limit 2
gone "seq2seq attention" seq2seq "$seq2seq" attention --ckpt s.st --text "the cat" --out att2
gone "bench" bench "$bench" $BE
gone "decode_bench" decode_bench "$decode_bench" $DB
gone "sgemm_bench" sgemm_bench "$sgemm_bench" 64 1
# `| head`: the sampler and the translator stop at their next write (a
# sample of 10 million characters or 20,000 sentences would run for many
# minutes), nothing drawn after the text
rc=0
timeout 60 "$charlm" sample --ckpt a.st --length 10000000 --prompt "the " --attention h.png 2>err.txt |
  head -c 10 >/dev/null
rc=${PIPESTATUS[0]}
[ "$rc" -eq 1 ] && [ "$(tail -1 err.txt)" = "charlm: error: cannot write the output: Broken pipe" ] &&
  echo "ok: charlm sample | head -c 10: exit 1 at once" || fail "charlm sample | head -c 10: exit $rc: $(tail -c 300 err.txt)"
[ -e h.png ] && fail "charlm sample | head: the picture was drawn after the text was lost"
for ((i = 0; i < 20000; i++)); do echo "the cat $((i % 400)) sat"; done >many.txt
timeout 60 "$seq2seq" translate --ckpt s.st <many.txt 2>err.txt | head -n 1 >/dev/null
rc=${PIPESTATUS[0]}
[ "$rc" -eq 1 ] && [ "$(tail -1 err.txt)" = "seq2seq: error: cannot write the output: Broken pipe" ] &&
  echo "ok: seq2seq translate | head -n 1: exit 1 at once" ||
  fail "seq2seq translate | head -n 1: exit $rc: $(tail -c 300 err.txt)"
finish
