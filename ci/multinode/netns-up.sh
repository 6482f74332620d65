#!/bin/bash
# netns-up.sh [N] - N fake "hosts" on one machine: host1..hostN (default 2).
# Each host has
#   * its own network namespace /run/netns/host<i>: lo + eth0 (veth into
#     bridge mnbr0 in the root namespace), address 10.77.0.<i>/24
#   * its own persistent UTS namespace (hostname host<i>)
#   * its own persistent IPC namespace and its own tmpfs, mounted on
#     /dev/shm by nsexec (shared memory does NOT leak between "hosts";
#     the PID namespace is still shared)
#   * /etc/netns/host<i>/hosts (ip netns exec bind-mounts it over /etc/hosts)
# The root namespace gets 10.77.0.254 ("gw") on the bridge. Idempotent; a
# second run with a larger N adds hosts. Needs root.
# Run something on a host:  ci/multinode/nsexec host2 'hostname; ip addr'
# Remove everything:        ci/multinode/netns-down.sh
set -euo pipefail
N=${1:-${N:-2}}
case "$N" in ''|*[!0-9]*) echo "usage: netns-up.sh [N]  (1 <= N <= 253)" >&2; exit 2;; esac
[ "$N" -ge 1 ] && [ "$N" -le 253 ] || { echo "netns-up.sh: N must be 1..253" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "netns-up.sh: needs root" >&2; exit 1; }
HERE=$(dirname "$(readlink -f "$0")")
BR=mnbr0
NSDIR=/run/multinode-ns
NET=10.77.0

if ! { command -v ping && command -v ip && command -v nsenter && command -v unshare; } >/dev/null; then
  apt-get -o DPkg::Lock::Timeout=600 update -q >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -q \
      --no-install-recommends iproute2 iputils-ping util-linux >/dev/null
fi

ip link show "$BR" >/dev/null 2>&1 || ip link add "$BR" type bridge
ip addr replace "$NET.254/24" dev "$BR"
ip link set "$BR" up

mkdir -p "$NSDIR/shm"
hosts="127.0.0.1 localhost
$NET.254 gw"
for i in $(seq "$N"); do hosts+=$'\n'"$NET.$i host$i"; done

for i in $(seq "$N"); do
  h=host$i; v=mnv$i
  [ -e "/run/netns/$h" ] || ip netns add "$h"
  if ! ip link show "$v" >/dev/null 2>&1; then
    ip -n "$h" link del eth0 2>/dev/null || true
    ip link add "$v" type veth peer name "${v}p"
    ip link set "${v}p" netns "$h"
    ip -n "$h" link set "${v}p" name eth0
  fi
  ip link set "$v" master "$BR" up
  ip -n "$h" link set lo up
  ip -n "$h" addr replace "$NET.$i/24" dev eth0
  ip -n "$h" link set eth0 up
  mkdir -p "/etc/netns/$h"
  printf '%s\n' "$hosts" > "/etc/netns/$h/hosts"
  # persistent UTS + IPC namespaces, bind-mounted on files under $NSDIR
  if ! mountpoint -q "$NSDIR/$h.uts"; then
    touch "$NSDIR/$h.uts" "$NSDIR/$h.ipc"
    mountpoint -q "$NSDIR/$h.ipc" && umount "$NSDIR/$h.ipc"
    unshare --uts="$NSDIR/$h.uts" --ipc="$NSDIR/$h.ipc" hostname "$h"
  fi
  mkdir -p "$NSDIR/shm/$h"
  mountpoint -q "$NSDIR/shm/$h" || mount -t tmpfs -o mode=1777 "shm-$h" "$NSDIR/shm/$h"
done
# every host's /etc/hosts lists all hosts (also those of an earlier, larger run)
for d in /etc/netns/host*; do
  [ -d "$d" ] || continue
  printf '%s\n' "$hosts" > "$d/hosts"
done

# smoke test: every host reaches every other host over the bridge
for i in $(seq "$N"); do for j in $(seq "$N"); do
  ip netns exec "host$i" ping -c1 -W2 -q "$NET.$j" >/dev/null \
    || { echo "host$i -> host$j ping FAILED" >&2; exit 1; }
done; done
for i in $(seq "$N"); do
  echo "host$i: $("$HERE"/nsexec host$i 'echo $(hostname) $(ip -4 -o addr show eth0 | awk "{print \$4}")')"
done
echo "up: $N hosts. Stop with $HERE/netns-down.sh"
