#!/usr/bin/env bash
# seq2seq score (meson suite 'models'): a translation file scored against
# its reference, as `fairseq-score --sys HYP --ref REF` and `sacrebleu REF
# -i HYP -m bleu chrf` do, in one JSON line.
#   1. 400 real pairs (tests/data/en_de_sample.tsv: the German side against
#      a perturbed copy: words dropped, swapped, replaced, sentences cut,
#      empty lines): bleu and chrf equal shared/reference/metrics.py's
#      corpus_bleu and corpus_chrf bit for bit, and the details (the four
#      precisions, bp, ratio, hyp_len, ref_len, the sentence count) the
#      sacreBLEU definitions computed here from the reference's own 13a
#      tokens and n-gram counts; the signatures; the same line from --hyp
#      and from standard input (no --hyp, --hyp -; --ref - for the
#      references); `translate | score` (a 4-step model) gives the line of
#      translate's output file
#   2. edge corpora, each against the reference: empty hypothesis lines, no
#      4-gram in common ('exp' smoothing), hypotheses shorter than their
#      references (BP < 1), no n-gram of some order, every hypothesis empty,
#      not one token in common (metrics.h: not sacreBLEU's early 0), Unicode
#      whitespace (U+00A0, U+3000, U+2009, U+0085, U+1680, \x1c, a tab;
#      U+200B is not whitespace), CRLF line ends and a last line without
#      "\n" (the scores of the plain file), --hyp naming --ref's file
#      (scored, with a warning)
#   3. every refusal, one line on stderr and nothing on stdout: exit 2 for
#      the command line (no --ref, an unknown flag, an argument, --ref -
#      without --hyp FILE, standard input a terminal), exit 1 for the inputs (missing, a
#      directory, empty, a line not UTF-8 named by its number, a NUL byte,
#      past CG_MAX_INPUT_MB, the line counts apart naming both, standard
#      output appended to an input, which stays intact, a closed stdout)
# The comparisons need /usr/bin/python3 and the reference; without them
# the refusals run and the test is skipped (77).
#   test_score.sh SEQ2SEQ METRICS_PY SAMPLE_TSV
set -uo pipefail
seq2seq=$1
metrics_py=$2
sample=$3
. "$(dirname "$0")/shell_lib.sh" score

# refuse NAME RC PATTERN CMD...: CMD exits RC with one line on stderr
# matching PATTERN and prints nothing on stdout
refuse() {
  local name=$1
  expect "$@"
  [ "$(wc -l <err.txt)" -eq 1 ] || fail "$name: not one line on stderr: $(head -c 300 err.txt)"
  [ -s out.txt ] && fail "$name: printed: $(head -c 200 out.txt)"
  return 0
}

# ---- the corpora (any python3 writes them)
python3 - "$sample" <<'EOF' || fail "the corpora could not be written"
import random, sys
refs = [l.rstrip("\n").split("\t")[1] for l in open(sys.argv[1], encoding="utf-8")]
assert len(refs) == 400, len(refs)
rng = random.Random(7)
words = [w for r in refs for w in r.split()]
def perturb(r):
    w, k = r.split(), rng.randrange(9)
    if k == 0 or len(w) < 3:
        return r
    if k == 1:
        del w[rng.randrange(len(w))]
    elif k == 2:
        i = rng.randrange(len(w) - 1)
        w[i], w[i + 1] = w[i + 1], w[i]
    elif k == 3:
        w[rng.randrange(len(w))] = rng.choice(words)
    elif k == 4:
        w = w[:len(w) // 2]
    elif k == 5:
        return ""
    elif k == 6:
        w += rng.sample(words, 2)
    elif k == 7:
        w = [x.lower() for x in w]
    else:
        return r.rstrip(".!?")
    return " ".join(w)
hyps = [perturb(r) for r in refs]
def put(name, lines, end="\n", last=True):
    with open(name, "w", encoding="utf-8", newline="") as f:
        f.write(end.join(lines) + (end if last else ""))
put("r.txt", refs)
put("h.txt", hyps)
# edge corpora (the first 40 references)
r40 = refs[:40]
put("r40.txt", r40)
put("empty_lines.txt", [h if i % 3 else "" for i, h in enumerate(hyps[:40])])
# the words reversed: every word matches, no 4-gram (these 40)
put("reversed.txt", [" ".join(r.split()[::-1]) for r in r40])
put("short.txt", [" ".join(r.split()[:max(1, len(r.split()) * 2 // 3)]) for r in r40])
# three words, punctuation left out: three 13a tokens, no 4-grams: BLEU 0
put("three.txt", [" ".join("".join(c for c in w if c.isalnum()) for w in r.split()[:3]) for r in r40])
put("all_empty.txt", [""] * 40)
put("nomatch.txt", ["qq%d rr%d ss%d tt%d uu%d" % ((i,) * 5) for i in range(40)])
ws = ["\u00a0", "\u3000", "\u2009", "\u0085", "\u1680", "\x1c", "\t", "  "]
put("ws_ref.txt", r40)
put("ws_hyp.txt", [r.replace(" ", ws[i % len(ws)]) + ("\u200b" if i % 5 == 0 else "") for i, r in enumerate(r40)])
put("crlf_ref.txt", r40, end="\r\n")
put("nolast_hyp.txt", hyps[:40], last=False)
put("plain_hyp.txt", hyps[:40])
EOF

# ---- checks against the reference
have_ref=0
if [ -x /usr/bin/python3 ] && [ -f "$metrics_py" ]; then have_ref=1; fi
cat >check.py <<'EOF'
# check.py METRICS_PY REF HYP JSON [EXPR...]: the JSON line of score on REF
# and HYP against metrics.py; each EXPR must hold (names: j the line, m and
# t the matches and totals per order)
import importlib.util, json, math, sys
spec = importlib.util.spec_from_file_location("metrics", sys.argv[1])
M = importlib.util.module_from_spec(spec)
spec.loader.exec_module(M)
def lines(path):  # as score reads them: "\n" ends a line, "\r"s before it dropped
    parts = open(path, "rb").read().split(b"\n")
    if parts[-1] == b"":
        parts.pop()
    return [p.rstrip(b"\r").decode("utf-8") for p in parts]
refs, hyps = lines(sys.argv[2]), lines(sys.argv[3])
j = json.loads(open(sys.argv[4], "rb").read().splitlines()[-1])
# BLEU's statistics from the reference's tokens and counts, then sacreBLEU's
# compute_bleu (2.x, smooth 'exp'), the same order of operations
m, t, hl, rl = [0] * 4, [0] * 4, 0, 0
for h, r in zip(hyps, refs):
    ht, rt = M.tokenize_13a(h), M.tokenize_13a(r)
    hl, rl = hl + len(ht), rl + len(rt)
    for n in range(1, 5):
        hc, rc = M._ngrams(ht, n), M._ngrams(rt, n)
        m[n - 1] += sum(min(c, rc[g]) for g, c in hc.items())
        t[n - 1] += max(0, len(ht) - n + 1)
bp = 1.0 if hl >= rl else (math.exp(1 - rl / hl) if hl > 0 else 0.0)
p, k = [0.0] * 4, 1
for n in range(4 if hl else 0):
    if t[n] == 0:
        break
    if m[n] == 0:
        k *= 2
        p[n] = 100.0 / (k * t[n])
    else:
        p[n] = 100.0 * m[n] / t[n]
want = {
    "bleu": M.corpus_bleu(hyps, refs), "chrf": M.corpus_chrf(hyps, refs),
    "precisions": p, "bp": bp, "ratio": hl / rl if rl else 0, "hyp_len": hl, "ref_len": rl,
    "sentences": len(refs),
    "bleu_signature": "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|impl:cgrad|compat:sacrebleu-2.x",
    "chrf_signature": "nrefs:1|case:mixed|eff:yes|nc:6|nw:0|space:no|impl:cgrad|compat:sacrebleu-2.x",
}
bad = [f"{key}: {j.get(key)!r}, expected {v!r}" for key, v in want.items() if j.get(key) != v]
bad += [f"unexpected key {key}" for key in j if key not in want]
bad += [f"does not hold: {e}" for e in sys.argv[5:] if not eval(e)]
if bad:
    print("; ".join(bad))
    sys.exit(1)
print(f"bleu {j['bleu']:.2f} chrf {j['chrf']:.2f} p {'/'.join(f'{x:.1f}' for x in p)} "
      f"bp {bp:.3f} ratio {j['ratio']:.3f} {hl}/{rl} tokens, {len(refs)} lines")
EOF
# scored NAME REF HYP [EXPR...]: score --ref REF --hyp HYP succeeds with one
# JSON line that check.py holds to the reference (EXPRs too)
scored() {
  local name=$1 ref=$2 hyp=$3 rc=0
  shift 3
  timeout 120 "$seq2seq" score --ref "$ref" --hyp "$hyp" >"$name.json" 2>"$name.err" || rc=$?
  if [ "$rc" -ne 0 ]; then
    fail "$name: exit $rc: $(head -c 300 "$name.err")"
  elif [ "$(wc -l <"$name.json")" -ne 1 ]; then
    fail "$name: not one line: $(head -c 300 "$name.json")"
  elif [ "$have_ref" = 1 ]; then
    if /usr/bin/python3 check.py "$metrics_py" "$ref" "$hyp" "$name.json" "$@" >"$name.chk" 2>&1; then
      echo "ok: $name: $(cat "$name.chk")"
    else fail "$name: $(tail -c 600 "$name.chk")"; fi
  else
    json_ok "$name" "$name.json"
  fi
}

# ---- 1. 400 real pairs
scored "400 perturbed pairs" r.txt h.txt "0 < j['bleu'] < 100" "j['bp'] < 1" "'' in hyps"
rc=0
"$seq2seq" score --ref r.txt <h.txt >stdin.json 2>stdin.err || rc=$?
[ "$rc" -eq 0 ] && cmp -s stdin.json "400 perturbed pairs.json" && [ ! -s stdin.err ] &&
  echo "ok: the hypotheses on standard input: the same line" ||
  fail "the hypotheses on standard input: exit $rc, $(head -c 300 stdin.err) $(diff stdin.json "400 perturbed pairs.json")"
# shellcheck disable=SC2002 # a pipe on standard input, not a file
cat h.txt | "$seq2seq" score --ref r.txt >pipe.json 2>&1 && cmp -s pipe.json stdin.json &&
  echo "ok: the hypotheses from a pipe: the same line" || fail "the hypotheses from a pipe: $(head -c 300 pipe.json)"
jsonl_ok "the line parses" stdin.json
"$seq2seq" score --ref r.txt --hyp - <h.txt >dash.json 2>&1 && cmp -s dash.json stdin.json &&
  echo "ok: --hyp -: standard input" || fail "--hyp -: $(head -c 300 dash.json)"
"$seq2seq" score --ref - --hyp h.txt <r.txt >dash.json 2>&1 && cmp -s dash.json stdin.json &&
  echo "ok: --ref -: the references on standard input" || fail "--ref -: $(head -c 300 dash.json)"
# translate's output piped in: the line of its file (a tiny model, 4 steps)
zoo_data
"$seq2seq" train --data p.tsv --tokenizer char --d 16 --H 2 --enc-layers 1 --dec-layers 1 --d-ff 32 \
  --max-tokens 200 --valid-size 20 --test-size 20 --test-limit 2 --threads 1 --steps 4 --out s.st \
  >/dev/null 2>s.log || fail "seq2seq train: $(tail -1 s.log)"
head -30 p.tsv | cut -f1 >src.txt
head -30 p.tsv | cut -f2 >ref.txt
"$seq2seq" translate --ckpt s.st --threads 1 <src.txt >tr.txt 2>tr.log || fail "translate: $(tail -1 tr.log)"
scored "translate's output" ref.txt tr.txt "len(hyps) == 30"
"$seq2seq" translate --ckpt s.st --threads 1 <src.txt 2>/dev/null | "$seq2seq" score --ref ref.txt >piped.json 2>&1 &&
  cmp -s piped.json "translate's output.json" && echo "ok: translate | score: the line of its file" ||
  fail "translate | score: $(head -c 300 piped.json)"

# ---- 2. edge corpora
scored "empty hypothesis lines" r40.txt empty_lines.txt "hyps.count('') >= 13"
scored "no 4-gram in common: exp smoothing" r40.txt reversed.txt "m[3] == 0 and m[2] > 0" \
  "j['precisions'][3] == 100 / (2 * t[3])" "m[0] == t[0]" "j['bleu'] > 0"
scored "hypotheses shorter: BP < 1" r40.txt short.txt "0 < j['bp'] < 1" "j['ratio'] < 1"
scored "no 4-grams: BLEU 0" r40.txt three.txt "t[3] == 0 and j['bleu'] == 0" "j['precisions'][2] > 0"
scored "every hypothesis empty" r40.txt all_empty.txt "j['bleu'] == 0 and j['chrf'] == 0" "j['bp'] == 0" \
  "j['hyp_len'] == 0"
scored "not one token in common (exp-smoothed, not sacreBLEU's early 0)" r40.txt nomatch.txt \
  "sum(m) == 0 and j['bleu'] > 0"
scored "Unicode whitespace" ws_ref.txt ws_hyp.txt "j['chrf'] < 100" "j['hyp_len'] > j['ref_len'] - 10"
scored "CRLF references" crlf_ref.txt plain_hyp.txt
scored "a last line without newline" r40.txt nolast_hyp.txt "len(hyps) == 40"
scored "the plain files" r40.txt plain_hyp.txt
for f in "CRLF references" "a last line without newline"; do
  cmp -s "$f.json" "the plain files.json" && echo "ok: $f: the plain files' line" ||
    fail "$f: not the plain files' line: $(cat "$f.json")"
done
scored "the references as hypotheses" r40.txt r40.txt "abs(j['bleu'] - 100) < 1e-9 and j['chrf'] == 100"
grep -q "warning: --hyp 'r40.txt' is --ref's file" "the references as hypotheses.err" &&
  echo "ok: --hyp is --ref's file: $(head -1 "the references as hypotheses.err")" ||
  fail "--hyp is --ref's file: no warning: $(cat "the references as hypotheses.err")"
ln -s r40.txt link.txt
"$seq2seq" score --ref link.txt <r40.txt >/dev/null 2>err.txt && grep -q "warning: standard input (the hypotheses) is --ref's file" err.txt &&
  echo "ok: standard input is --ref's file (a link): $(head -1 err.txt)" ||
  fail "standard input is --ref's file: $(cat err.txt)"

# ---- 3. refusals
refuse "no --ref" 2 "^seq2seq: error: score needs --ref FILE" "$seq2seq" score --hyp h.txt
refuse "--ref - without --hyp" 2 "^seq2seq: error: --ref - and the hypotheses cannot both be standard input: give --hyp FILE$" \
  "$seq2seq" score --ref - <r.txt
refuse "--ref - --hyp -" 2 "^seq2seq: error: --ref - and the hypotheses cannot both be standard input" \
  "$seq2seq" score --ref - --hyp - <r.txt
refuse "--ref - empty" 1 "^seq2seq: error: standard input (the references) is empty$" \
  "$seq2seq" score --ref - --hyp h.txt </dev/null
refuse "an unknown flag" 2 "^seq2seq: error: .*--sys" "$seq2seq" score --ref r.txt --sys h.txt
refuse "an argument" 2 "^seq2seq: error: .*unexpected argument 'h.txt'" "$seq2seq" score --ref r.txt h.txt
refuse "--ref missing" 1 "^seq2seq: error: --ref: cannot open 'nope.txt': No such file or directory$" \
  "$seq2seq" score --ref nope.txt --hyp h.txt
refuse "--hyp missing" 1 "^seq2seq: error: --hyp: cannot open 'nope.txt'" "$seq2seq" score --ref r.txt --hyp nope.txt
mkdir adir
refuse "--ref a directory" 1 "^seq2seq: error: --ref: 'adir' is a directory, not a file$" \
  "$seq2seq" score --ref adir --hyp h.txt
refuse "--hyp a directory" 1 "^seq2seq: error: --hyp: 'adir' is a directory" "$seq2seq" score --ref r.txt --hyp adir
refuse "standard input a directory" 1 "^seq2seq: error: standard input (the hypotheses) is a directory" \
  "$seq2seq" score --ref r.txt <adir
: >empty.txt
refuse "--ref empty" 1 "^seq2seq: error: --ref: 'empty.txt' is empty$" "$seq2seq" score --ref empty.txt --hyp h.txt
refuse "--hyp empty" 1 "^seq2seq: error: --hyp: 'empty.txt' is empty$" "$seq2seq" score --ref r.txt --hyp empty.txt
refuse "standard input empty" 1 "^seq2seq: error: standard input (the hypotheses) is empty$" \
  "$seq2seq" score --ref r.txt </dev/null
refuse "standard input closed" 1 "^seq2seq: error: cannot read standard input (the hypotheses): Bad file descriptor$" \
  "$seq2seq" score --ref r.txt <&-
printf 'ein Satz\nzwei S\xe4tze\ndrei\n' >latin1.txt
printf 'a\nb\nc\n' >abc.txt
refuse "--hyp not UTF-8" 1 "^seq2seq: error: --hyp 'latin1.txt': line 2 is not valid UTF-8 (bad byte 0xe4 at byte 7)$" \
  "$seq2seq" score --ref abc.txt --hyp latin1.txt
refuse "--ref not UTF-8" 1 "^seq2seq: error: --ref 'latin1.txt': line 2 is not valid UTF-8" \
  "$seq2seq" score --ref latin1.txt --hyp abc.txt
refuse "standard input not UTF-8" 1 "^seq2seq: error: standard input (the hypotheses): line 2 is not valid UTF-8" \
  "$seq2seq" score --ref abc.txt <latin1.txt
printf 'a\nb\x00c\nd\n' >nul.txt
refuse "a NUL byte" 1 "^seq2seq: error: --hyp: 'nul.txt' holds a NUL byte at offset 3: not a text file$" \
  "$seq2seq" score --ref abc.txt --hyp nul.txt
head -c 1500000 /dev/zero | tr '\0' 'a' >big.txt
refuse "past CG_MAX_INPUT_MB" 1 "^seq2seq: error: --ref: 'big.txt' is larger than 1.0 MB, the input limit set by CG_MAX_INPUT_MB$" \
  env CG_MAX_INPUT_MB=1 "$seq2seq" score --ref big.txt --hyp abc.txt
head -3 r.txt >r3.txt
refuse "fewer hypotheses" 1 "^seq2seq: error: --hyp 'abc.txt' has 3 lines and --ref 'r40.txt' 40: one hypothesis per reference line (nothing was scored)$" \
  "$seq2seq" score --ref r40.txt --hyp abc.txt
refuse "more hypotheses" 1 "^seq2seq: error: standard input (the hypotheses) has 40 lines and --ref 'abc.txt' 3" \
  "$seq2seq" score --ref abc.txt <r40.txt
printf 'a\nb\nc\n\n' >abc4.txt # an empty fourth line is a line
refuse "an empty last line counts" 1 "has 4 lines and --ref 'abc.txt' 3" "$seq2seq" score --ref abc.txt --hyp abc4.txt
for f in r3.txt h.txt; do
  cp "$f" keep.copy
  rc=0
  timeout 60 "$seq2seq" score --ref r3.txt --hyp h.txt >>"$f" 2>err.txt || rc=$?
  [ "$rc" -eq 1 ] && grep -q "^seq2seq: error: standard output is --[a-z]* '$f', which this command reads" err.txt &&
    echo "ok: score >> $f: $(cat err.txt)" || fail "score >> $f: exit $rc: $(cat err.txt)"
  intact "score >> $f" "$f" keep.copy
done
cp h.txt keep.copy
rc=0
timeout 60 "$seq2seq" score --ref r.txt <h.txt >>h.txt 2>err.txt || rc=$?
[ "$rc" -eq 1 ] && grep -q "^seq2seq: error: standard output is standard input '/dev/stdin', which this command reads" err.txt &&
  echo "ok: score < h >> h: $(cat err.txt)" || fail "score < h >> h: exit $rc: $(cat err.txt)"
intact "score < h >> h" h.txt keep.copy
rc=0
"$seq2seq" score --ref r.txt --hyp h.txt >&- 2>err.txt || rc=$?
[ "$rc" -eq 1 ] && grep -q "^seq2seq: error: cannot write the output" err.txt && [ "$(wc -l <err.txt)" -eq 1 ] &&
  echo "ok: a closed stdout: $(cat err.txt)" || fail "a closed stdout: exit $rc: $(cat err.txt)"
# standard input a terminal, no --hyp: refused at once, not waited on
if python3 -c 'import os; os.openpty()' 2>/dev/null; then
  rc=0
  timeout 30 python3 - "$seq2seq" >tty.txt 2>&1 <<'EOF' || rc=$?
import os, subprocess, sys
master, slave = os.openpty()
for args in (["--ref", "r.txt"], ["--ref", "-", "--hyp", "h.txt"]):
    p = subprocess.run([sys.argv[1], "score"] + args, stdin=slave, capture_output=True, timeout=10)
    sys.stdout.write("%d|%s" % (p.returncode, p.stderr.decode(errors="replace")))
EOF
  [ "$rc" -eq 0 ] && [ "$(wc -l <tty.txt)" -eq 2 ] &&
    grep -q "^2|seq2seq: error: standard input (the hypotheses) is a terminal: give --hyp FILE, or pipe them in$" tty.txt &&
    grep -q "^2|seq2seq: error: standard input (the references) is a terminal: give --ref FILE, or pipe them in$" tty.txt &&
    echo "ok: standard input a terminal: $(tr '\n' ' ' <tty.txt)" || fail "standard input a terminal: $rc $(cat tty.txt)"
else
  echo "note: no pseudo-terminal here: the terminal case is left out"
fi
grep -q "^  score " <("$seq2seq" --help) && "$seq2seq" score --help | grep -q "^usage: seq2seq score --ref FILE" &&
  "$seq2seq" help score | grep -q "^usage: seq2seq score" && echo "ok: the help lists score; score --help" ||
  fail "the help: $("$seq2seq" --help | grep score)"

if [ "$have_ref" = 0 ] && [ "$failures" -eq 0 ]; then
  echo "skip: no /usr/bin/python3 or no $metrics_py: the scores were not compared"
  exit 77
fi
finish
