#!/bin/sh
# Data-parallel equivalence across hosts (meson suite 'dist'): test_dist on
# 2 and on 4 network-namespace hosts x 1 rank (scripts/netns_hosts.sh: Open
# MPI over TCP on veth pairs, launched through `ip netns exec`) must match
# one process within test_dist's bounds. Skipped (77) when not root or when
# ip, mpirun or unshare are missing.
#   test_dist_netns.sh NETNS_HOSTS_SH TEST_DIST
set -u
netns=$1
test_dist=$2
[ "$(id -u)" = 0 ] || { echo "skip: needs root (network namespaces)"; exit 77; }
for t in ip mpirun unshare flock timeout; do
    command -v $t >/dev/null 2>&1 || { echo "skip: '$t' not found"; exit 77; }
done
ip netns list >/dev/null 2>&1 || { echo "skip: 'ip netns' does not work here"; exit 77; }
out=$(mktemp "${TMPDIR:-/tmp}/cg_dist_netns.XXXXXX")
trap 'rm -f "$out"' EXIT
failures=0
for hosts in 2 4; do
    CK_FORK=no OMP_NUM_THREADS=1 CG_DIST_TIMEOUT=60 \
        "$netns" -n $hosts --timeout 100 mpirun -np $hosts \
        -x CK_FORK -x OMP_NUM_THREADS -x CG_DIST_TIMEOUT -x LSAN_OPTIONS "$test_dist" >"$out" 2>&1
    rc=$?
    cat "$out"
    if [ $rc -ne 0 ]; then
        echo "FAIL: $hosts hosts: exit status $rc"; failures=$((failures + 1))
    # Every rank runs the suite and their lines may interleave (a rank's
    # "Running suite(s):" without its newline before rank 0's line): no ^.
    elif ! grep -q "test_dist: $hosts rank(s), built with MPI" "$out" ||
         ! grep -q "charlm: $hosts ranks vs 1 rank" "$out" ||
         ! grep -q "100%: Checks" "$out"; then
        echo "FAIL: $hosts hosts: test_dist did not run $hosts ranks to the end"
        failures=$((failures + 1))
    fi
done
[ $failures -eq 0 ]
