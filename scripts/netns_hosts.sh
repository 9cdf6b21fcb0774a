#!/bin/sh
# Several "hosts" on this machine: network namespaces on a private bridge,
# with Open MPI's TCP transport between them (docs/scaling.md).
#
#   scripts/netns_hosts.sh [options] mpirun MPIRUN-ARGS...   set up, run mpirun from host 0, tear down
#   scripts/netns_hosts.sh [options] exec CMD...             set up, run CMD in host 0, tear down
#                                                           ($CG_NETNS_MPIRUN holds the mpirun prefix)
#   scripts/netns_hosts.sh down                              remove everything a (killed) run left
#
# Options:
#   -n HOSTS       number of hosts, 2 to 4 (default 2)
#   --rate R       netem rate on every host's link, e.g. 1gbit, 10gbit (default: none)
#   --delay D      netem one-way delay on every host's egress, e.g. 1ms (default: none;
#                  needs sch_netem: a kernel without it refuses --delay and
#                  limits --rate with tbf instead)
#   --timeout S    the whole command is killed after S seconds (default 600)
#
# Layout: namespace cgns_sw holds a bridge; hosts cgns_h0..cgns_h3 each hold
# one end of a veth pair (named cgeth0) with address 10.213.7.(1+i)/24, the
# other end sits on the bridge. No namespace has a default route and the
# bridge is not in the root namespace, so no packet can reach any other
# network: the only addresses ever used are those of the test hosts and
# loopback. Each host also gets its own UTS namespace (hostname cgns-hI)
# when its processes start, so Open MPI sees distinct nodes (separate
# session directories, no shared-memory transport between hosts).
#
# mpirun runs in host 0 with
#   --hostfile (cgns-h0 .. cgns-hN-1, 1 slot each unless CG_NETNS_SLOTS)
#   --mca plm_rsh_agent scripts/netns_agent.sh  (ip netns exec in place of ssh)
#   --mca btl tcp,self  --mca btl_tcp_if_include cgeth0  --mca oob_tcp_if_include cgeth0
#   --mca oob_tcp_keepalive_time 5 --mca oob_tcp_keepalive_intvl 1 --mca oob_tcp_keepalive_probes 3
#   --allow-run-as-root
# so ranks on different hosts talk over TCP on the veths only.
#
# Teardown always runs (trap on EXIT, INT, TERM): every process left in a
# test namespace is killed, then the namespaces (and with them the veths and
# the bridge) are deleted. Running it twice, or after a killed run, is safe:
# set-up first removes what an earlier run left. A lock (flock) keeps two
# runs on one machine from sharing the namespaces. Needs root, ip, tc (for
# --rate/--delay), unshare, hostname, timeout and flock.
set -eu

PREFIX=cgns
SUBNET=10.213.7
HERE=$(cd "$(dirname "$0")" && pwd)
AGENT=$HERE/netns_agent.sh
LOCK=/run/lock/cgrad-netns.lock
[ -d /run/lock ] || LOCK=/tmp/cgrad-netns-lock

die() { echo "netns_hosts: $*" >&2; exit 2; }

teardown() {
    [ -n "${CHILD:-}" ] && kill -TERM "$CHILD" 2>/dev/null || true
    for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep "^${PREFIX}_" || true); do
        pids=$(ip netns pids "$ns" 2>/dev/null || true)
        [ -n "$pids" ] && kill -KILL $pids 2>/dev/null || true
        ip netns del "$ns" 2>/dev/null || true
    done
    # (under the lock: no other run is using them)
    rm -rf /tmp/cgrad-netns.* 2>/dev/null || true
}

setup() {
    n=$1
    ip netns add ${PREFIX}_sw
    ip -n ${PREFIX}_sw link set lo up
    ip -n ${PREFIX}_sw link add br0 type bridge
    ip -n ${PREFIX}_sw link set br0 up
    i=0
    while [ $i -lt "$n" ]; do
        ns=${PREFIX}_h$i
        ip netns add "$ns"
        ip -n "$ns" link set lo up
        ip -n "$ns" link add cgeth0 type veth peer name port$i netns ${PREFIX}_sw
        ip -n "$ns" addr add $SUBNET.$((i + 1))/24 dev cgeth0
        ip -n "$ns" link set cgeth0 up
        ip -n ${PREFIX}_sw link set port$i master br0
        ip -n ${PREFIX}_sw link set port$i up
        if [ -n "$RATE$DELAY" ]; then
            set --
            [ -n "$RATE" ] && set -- "$@" rate "$RATE"
            [ -n "$DELAY" ] && set -- "$@" delay "$DELAY"
            # A queue deep enough for a rate-limited link (netem's default
            # of 1000 packets drops bursts at 10 Gbit/s). Kernels without
            # sch_netem: the rate alone with a token bucket (tbf).
            if ! ip netns exec "$ns" tc qdisc add dev cgeth0 root netem "$@" limit 100000 \
                2>"$WORK/tc.err"; then
                [ -z "$DELAY" ] && [ -n "$RATE" ] ||
                    die "tc netem failed ($(cat "$WORK/tc.err")): --delay needs sch_netem"
                ip netns exec "$ns" tc qdisc add dev cgeth0 root tbf rate "$RATE" burst 4mb \
                    latency 200ms || die "tc tbf rate $RATE failed"
                [ $i = 0 ] && echo "netns_hosts: no netem in this kernel: --rate $RATE by tbf" >&2
            fi
        fi
        echo "${PREFIX}-h$i slots=${CG_NETNS_SLOTS:-1}" >>"$WORK/hostfile"
        i=$((i + 1))
    done
    # Every host must answer before anything runs on it (when ping exists).
    command -v ping >/dev/null 2>&1 || return 0
    i=1
    while [ $i -lt "$n" ]; do
        ip netns exec ${PREFIX}_h0 ping -c 1 -W 5 $SUBNET.$((i + 1)) >/dev/null ||
            die "host $i does not answer on $SUBNET.$((i + 1))"
        i=$((i + 1))
    done
}

HOSTS=2 RATE= DELAY= TIMEOUT=600
while [ $# -gt 0 ]; do
    case $1 in
    -n | --rate | --delay | --timeout)
        [ $# -ge 2 ] || die "$1 needs a value"
        case $1 in
        -n) HOSTS=$2 ;;
        --rate) RATE=$2 ;;
        --delay) DELAY=$2 ;;
        --timeout) case $2 in '' | *[!0-9]* | 0*) die "--timeout: '$2' is not a whole number of seconds above 0" ;; esac
                   TIMEOUT=$2 ;;
        esac
        shift 2 ;;
    *) break ;;
    esac
done
[ $# -ge 1 ] || die "usage: $0 [-n HOSTS] [--rate R] [--delay D] [--timeout S] mpirun ARGS... | exec CMD... | down"
MODE=$1; shift
[ "$(id -u)" = 0 ] || die "needs root (network namespaces)"
for t in ip unshare hostname timeout flock; do
    command -v $t >/dev/null 2>&1 || die "needs '$t'"
done
case $HOSTS in 2|3|4) ;; *) die "-n: $HOSTS hosts; 2 to 4 are supported" ;; esac

exec 9>"$LOCK"
flock -w "$TIMEOUT" 9 || die "another run holds $LOCK"

case $MODE in
down) teardown; exit 0 ;;
mpirun|exec) ;;
*) die "unknown command '$MODE' (mpirun, exec or down)" ;;
esac

# mpirun's connections to its daemons probed after 5 s of silence, every
# second, 3 times: a host cut off ends the job about 8 s later (Open MPI's
# default, 300 s + 9 x 20 s, left mpirun waiting for the lost daemon long
# after CG_DIST_TIMEOUT had ended the ranks). A daemon that is busy but
# alive answers the probes from its kernel.
KEEPALIVE="--mca oob_tcp_keepalive_time 5 --mca oob_tcp_keepalive_intvl 1 \
 --mca oob_tcp_keepalive_probes 3"
WORK= CHILD=
trap 'teardown' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
teardown
WORK=$(mktemp -d /tmp/cgrad-netns.XXXXXX)
setup "$HOSTS"

CG_NETNS_MPIRUN="mpirun --hostfile $WORK/hostfile --allow-run-as-root \
 --mca plm_rsh_agent $AGENT --mca btl tcp,self --mca btl_tcp_if_include cgeth0 \
 --mca oob_tcp_if_include cgeth0 $KEEPALIVE"
export CG_NETNS_MPIRUN CG_NETNS_HOSTS=$HOSTS

# In the background and waited for, so that INT and TERM run the traps at
# once (a shell defers them until a foreground command ends).
if [ "$MODE" = mpirun ]; then
    # shellcheck disable=SC2086
    timeout -k 5 "$TIMEOUT" ip netns exec ${PREFIX}_h0 unshare --uts sh -c \
        'hostname "$0"; exec "$@"' ${PREFIX}-h0 $CG_NETNS_MPIRUN "$@" &
else
    timeout -k 5 "$TIMEOUT" ip netns exec ${PREFIX}_h0 unshare --uts sh -c \
        'hostname "$0"; exec "$@"' ${PREFIX}-h0 "$@" &
fi
CHILD=$!
set +e
wait $CHILD
rc=$?
CHILD=
[ $rc = 124 ] && echo "netns_hosts: '$*' did not finish within $TIMEOUT s" >&2
exit $rc
