#!/bin/sh
# Open MPI's launcher agent for scripts/netns_hosts.sh (plm_rsh_agent): run
# where Open MPI would run `ssh HOST CMD`. HOST is cgns-hI; CMD runs in
# network namespace cgns_hI, in a UTS namespace of its own with hostname
# cgns-hI. Refuses any other host name.
set -eu
host=$1
shift
case $host in
cgns-h[0-9]) ns=$(echo "$host" | tr - _) ;;
*) echo "netns_agent: '$host' is not a test host (cgns-hI)" >&2; exit 255 ;;
esac
# Open MPI passes the remote command as words for a remote shell to join.
exec ip netns exec "$ns" unshare --uts sh -c 'hostname "$0"; eval "$1"' "$host" "$*"
