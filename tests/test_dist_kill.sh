#!/usr/bin/env bash
# A rank that dies (meson suite 'dist'): `charlm train` on 2 network-namespace
# hosts (scripts/netns_hosts.sh), rank 1 killed with SIGKILL while training:
#   - the job ends within WATCHDOG seconds (Open MPI's launcher ends the other
#     ranks at once; the dist watchdog, CG_DIST_TIMEOUT, bounds a rank left
#     waiting in a collective), exit status non-zero, with a line naming
#     rank 1;
#   - the last checkpoint is intact: `--resume` continues from it (in one
#     process: another rank count) for 5 more steps.
# Skipped (77) when not root or ip, mpirun or unshare are missing. Flags
# after CHARLM go to the training run (e.g. --zero 1: the checkpoint is
# gathered from the ranks' shards; the resume, in one process, is not ZeRO).
#   test_dist_kill.sh NETNS_HOSTS_SH CHARLM [TRAIN FLAGS...]
set -u
netns=$(realpath "$1")
charlm=$(realpath "$2")
shift 2
extra="$*"
WATCHDOG=20
[ "$(id -u)" = 0 ] || { echo "skip: needs root (network namespaces)"; exit 77; }
for t in ip mpirun unshare flock timeout; do
  command -v $t >/dev/null 2>&1 || { echo "skip: '$t' not found"; exit 77; }
done
dir=$(mktemp -d "${TMPDIR:-/tmp}/cg_dist_kill.XXXXXX")
trap 'rm -rf "$dir"' EXIT
cd "$dir" || exit 1
fail() { echo "FAIL: $*"; cat k.log 2>/dev/null | tail -20; exit 1; }
words=(the a whale sea ship captain ahab white call me ishmael some years ago never mind how long)
for ((i = 0; i < 300; i++)); do
  printf '%s ' "${words[$(((i * 7 + i / 3) % ${#words[@]}))]}" "${words[$(((i * 5 + 3) % ${#words[@]}))]}"
  ((i % 6 == 5)) && printf '\n'
done >tiny.txt
cat >run.sh <<EOS
#!/usr/bin/env bash
# in host 0: start the job, wait for its first checkpoint, kill rank 1
\$CG_NETNS_MPIRUN -np 2 -x CG_DIST_TIMEOUT=$WATCHDOG -x OMP_NUM_THREADS=1 \
  "$charlm" train --data "$dir/tiny.txt" --d 16 --H 2 --layers 1 --d-ff 32 --T 16 \
  --batch-size 4 --threads 1 --eval-every 20 --seed 3 --steps 1000000 $extra \
  --out "$dir/k.st" >"$dir/k.json" 2>"$dir/k.log" &
mp=\$!
for ((w = 0; w < 600; w++)); do [ -s "$dir/k.st" ] && break; sleep 0.1; done
[ -s "$dir/k.st" ] || { echo "no checkpoint after 60 s" >"$dir/result"; exit 1; }
sleep 0.5
victim=
for p in \$(ip netns pids cgns_h1); do
  [ "\$(cat /proc/\$p/comm 2>/dev/null)" = charlm ] && victim=\$p
done
[ -n "\$victim" ] || { echo "rank 1 not found" >"$dir/result"; exit 1; }
t0=\$(date +%s%N)
kill -KILL "\$victim"
wait \$mp
rc=\$?
t1=\$(date +%s%N)
echo "\$rc \$(((t1 - t0) / 1000000))" >"$dir/result"
EOS
chmod +x run.sh
# Open MPI's launcher itself (mpirun 4.1) sometimes dies of SIGSEGV while it
# handles the killed rank (seen about 1 run in 5 on a loaded machine): then
# nobody is left to name the rank. That is the launcher's bug, not a hang or
# a damaged checkpoint; it is said, and the run is tried again, up to five
# times (two crashes in a row were seen once, on a loaded machine; three,
# once, with a CI run and a training run sharing the 2 cores, 2026-12-04).
for attempt in 1 2 3 4 5; do
  # the first try's checkpoint and the files beside it (loss curve, metrics
  # log: a fresh run without --force refuses them, round five)
  rm -f result k.st k.st.* k.json k.log
  "$netns" -n 2 --timeout 150 exec ./run.sh || true
  read -r rc ms <result || fail "no result: $(cat result 2>/dev/null)"
  [ "$rc" = 139 ] && [ $attempt -lt 5 ] && ! grep -q "rank 1" k.log || break
  echo "note: mpirun crashed (SIGSEGV) handling the killed rank; trying again"
done
echo "job ended ${ms} ms after rank 1 was killed, exit status $rc"
[ "$rc" != 0 ] || fail "the job exited 0 after a rank was killed"
[ "$ms" -le $((WATCHDOG * 1000)) ] || fail "the job took ${ms} ms to end (watchdog ${WATCHDOG} s)"
grep -E "rank 1 .*(exited on signal 9|Killed)|rank 1\b" k.log | head -1 | grep -q . ||
  fail "no line names rank 1"
echo "named: $(grep -E 'rank 1' k.log | head -1)"
ls k.st.tmp* 2>/dev/null && fail "temporary checkpoint files were left"
timeout 120 "$charlm" train --resume k.st --stop-at 1000000 --steps 1000000 --threads 1 \
  --max-minutes 0.02 >r.json 2>r.log || fail "--resume failed: $(tail -3 r.log)"
grep -q '"step"' r.json || fail "--resume gave no summary: $(cat r.json)"
echo "resumed: $(head -c 200 r.json)"
