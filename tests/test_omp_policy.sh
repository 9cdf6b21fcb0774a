#!/bin/sh
# meson test: OpenMP's wait policy (issue 33, finding 7). A program that
# calls cg_omp_short_spin first (as charlm, seq2seq and bench do) runs
# with a short spin (GOMP_SPINCOUNT worth about 50 us on this CPU: 1000 to
# 20000 rounds, cg_omp_spin_count) unless the environment
# chose one: the user's OMP_WAIT_POLICY or GOMP_SPINCOUNT is kept, and one
# thread keeps libgomp's default. The arguments survive the re-exec.
#   test_omp_policy.sh OMP_POLICY_EXE CHARLM_EXE
set -u
exe=$1; charlm=$2
fails=0
spin() { grep "GOMP_SPINCOUNT" | tail -n 1 | sed "s/.*= '\(.*\)'/\1/"; }
expect() { # name, wanted spin count, got
    if [ "$3" = "$2" ]; then echo "ok: $1: GOMP_SPINCOUNT $3"
    else echo "FAIL: $1: GOMP_SPINCOUNT '$3', expected '$2'"; fails=$((fails + 1)); fi
}
short() { # name, got: a count of cgrad's short spin (300000 on one CPU: nothing to change)
    if [ "$(nproc)" -le 1 ]; then expect "$1" 300000 "$2"
    elif [ "$2" -ge 1000 ] 2>/dev/null && [ "$2" -le 20000 ]; then echo "ok: $1: GOMP_SPINCOUNT $2"
    else echo "FAIL: $1: GOMP_SPINCOUNT '$2', expected 1000 to 20000"; fails=$((fails + 1)); fi
}
unset OMP_WAIT_POLICY GOMP_SPINCOUNT OMP_DISPLAY_ENV
out=$(OMP_NUM_THREADS=2 "$exe" "a b" "" "c" 2>&1)
args=$(printf '%s\n' "$out" | grep '^\[' | tr '\n' ' ')
if [ "$args" = "[a b] [] [c] " ]; then echo "ok: arguments kept"
else echo "FAIL: arguments after the re-exec: $args"; fails=$((fails + 1)); fi
# /proc/self/cmdline past its first read's 4096 bytes: read whole
long=$(printf '%05000d' 7)
args=$(OMP_NUM_THREADS=2 "$exe" "$long" "d" 2>&1 | grep '^\[' | tr '\n' ' ')
if [ "$args" = "[$long] [d] " ]; then echo "ok: 5000 bytes of arguments kept"
else echo "FAIL: 5000 bytes of arguments after the re-exec: '$(printf '%s' "$args" | cut -c 1-20)...', $(printf '%s' "$args" | wc -c) bytes"; fails=$((fails + 1)); fi
# Another OpenMP runtime (clang's build links LLVM's libomp): GOMP_SPINCOUNT
# means nothing to it, so no re-exec (the environment keeps no count), and
# libgomp's settings below are not there to check.
if ! ldd "$exe" | grep -q 'libgomp\.so'; then
    got=$(printf '%s\n' "$out" | grep '^env GOMP_SPINCOUNT')
    if [ "$got" = "env GOMP_SPINCOUNT unset" ]; then echo "ok: not libgomp: no re-exec"
    else echo "FAIL: not libgomp, yet re-executed: '$got'"; fails=$((fails + 1)); fi
else
    short "default" "$(printf '%s\n' "$out" | spin)"
    expect "OMP_WAIT_POLICY=active (the user's)" 30000000000 \
        "$(OMP_NUM_THREADS=2 OMP_WAIT_POLICY=active "$exe" 2>&1 | spin)"
    expect "GOMP_SPINCOUNT=5000 (the user's)" 5000 \
        "$(OMP_NUM_THREADS=2 GOMP_SPINCOUNT=5000 "$exe" 2>&1 | spin)"
    expect "OMP_WAIT_POLICY=passive (the user's)" 0 \
        "$(OMP_NUM_THREADS=2 OMP_WAIT_POLICY=passive "$exe" 2>&1 | spin)"
    expect "OMP_NUM_THREADS=1" 300000 "$(OMP_NUM_THREADS=1 "$exe" 2>&1 | spin)"
    # charlm itself (through cg_cli_start): libgomp's display of the last start
    short "charlm --help" \
        "$(OMP_NUM_THREADS=2 OMP_DISPLAY_ENV=verbose "$charlm" --help 2>&1 | spin)"
fi
# The thread count under OpenMP's other variables: OMP_PROC_BIND=true binds
# the initial thread to one CPU before main, which cg_num_cpus (its
# affinity) took for the machine: 1 thread, a warning blaming an
# OMP_NUM_THREADS nobody set; OMP_THREAD_LIMIT=1 gives teams of 1 thread
# while cgrad counted 2 (bench's JSON said "threads": 2).
count() { # name, env..., then: wanted "threads T team T cpus C capped K" line
    name=$1; want=$2; shift 2
    got=$(env "$@" "$exe" 2>/dev/null | grep '^threads ')
    if [ "$got" = "$want" ]; then echo "ok: $name: $got"
    else echo "FAIL: $name: '$got', expected '$want'"; fails=$((fails + 1)); fi
}
# cg_set_num_threads: a count set is capped by OMP_THREAD_LIMIT; 0 gives
# back OpenMP's count from before the first set (not the last set's)
sets() { # name, wanted "set 3: ..." line, env...
    name=$1; want=$2; shift 2
    got=$(env "$@" "$exe" 2>/dev/null | grep '^set 3: ')
    if [ "$got" = "$want" ]; then echo "ok: $name: $got"
    else echo "FAIL: $name: '$got', expected '$want'"; fails=$((fails + 1)); fi
}
n=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)
if [ "$n" -ge 2 ]; then
    count "OMP_PROC_BIND=true" "threads 2 team 2 cpus $n capped 0" OMP_NUM_THREADS=2 OMP_PROC_BIND=true
    count "OMP_PROC_BIND=close, OMP_PLACES=cores" "threads 2 team 2 cpus $n capped 0" \
        OMP_NUM_THREADS=2 OMP_PROC_BIND=close OMP_PLACES=cores
    count "OMP_THREAD_LIMIT=1" "threads 1 team 1 cpus $n capped 0" OMP_NUM_THREADS=2 OMP_THREAD_LIMIT=1
    sets "cg_set_num_threads 3, 4, 0" "set 3: threads 3; set 4, then 0: max 2 threads 2" \
        OMP_NUM_THREADS=2
    sets "cg_set_num_threads under OMP_THREAD_LIMIT=1" \
        "set 3: threads 1; set 4, then 0: max 2 threads 1" OMP_NUM_THREADS=2 OMP_THREAD_LIMIT=1
else
    echo "ok: one CPU: the thread counts under OMP_PROC_BIND and OMP_THREAD_LIMIT are not checked"
fi
[ $fails -eq 0 ]
