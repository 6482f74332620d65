# lib.sh - helpers shared by the ci/multinode driver scripts (sourced).
# Provides: MN_DIR, REPO, mn_log, mn_fail, mn_netns_up N, mn_slurm_up,
# mn_cleanup (registered with trap by mn_init), mn_run TIMEOUT OUT CMD...,
# mn_hydra and mn_ompi (a job across namespace hosts).
MN_DIR=$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")
REPO=$(cd "$MN_DIR/../.." && pwd)
MN_STARTED_NETNS=0
MN_STARTED_SLURM=0
MN_TMP=""
export SLURM_CONF=${SLURM_CONF:-/tmp/tmpi-slurm/etc/slurm.conf}

mn_log()  { echo "[$(date +%H:%M:%S)] $*"; }
mn_fail() { echo "FAIL: $*" >&2; exit 1; }

# Tears down only what this script brought up (KEEP=1: tear down nothing).
mn_cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  if [ "${KEEP:-0}" != 1 ]; then
    if [ "$MN_STARTED_NETNS" = 1 ]; then
      FORCE=1 bash "$MN_DIR/netns-down.sh" >/dev/null 2>&1 || echo "netns-down failed" >&2
    fi
    if [ "$MN_STARTED_SLURM" = 1 ]; then
      bash "$MN_DIR/slurm-down.sh" >/dev/null 2>&1 || echo "slurm-down failed" >&2
    fi
  fi
  [ -n "$MN_TMP" ] && rm -rf "$MN_TMP"
  exit "$rc"
}

mn_init() {
  [ "$(id -u)" = 0 ] || mn_fail "needs root (network namespaces, slurm daemons)"
  MN_TMP=$(mktemp -d /tmp/tmpi-multinode.XXXXXX)
  trap mn_cleanup EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
}

# mn_netns_up N: N namespace hosts (idempotent); remembers to remove them.
mn_netns_up() {
  local n=$1 i have=1
  for i in $(seq "$n"); do [ -e "/run/netns/host$i" ] || have=0; done
  if [ "$have" = 0 ]; then MN_STARTED_NETNS=1; fi
  bash "$MN_DIR/netns-up.sh" "$n" >"$MN_TMP/netns-up.log" 2>&1 \
    || { cat "$MN_TMP/netns-up.log" >&2; mn_fail "netns-up.sh $n"; }
}

# mn_slurm_up: the single-node cluster (idempotent); remembers to stop it.
mn_slurm_up() {
  if ! { [ -s /tmp/tmpi-slurm/run/slurmctld.pid ] && kill -0 "$(cat /tmp/tmpi-slurm/run/slurmctld.pid)" 2>/dev/null; }; then
    MN_STARTED_SLURM=1
  fi
  timeout 600 bash "$MN_DIR/slurm-up.sh" >"$MN_TMP/slurm-up.log" 2>&1 \
    || { cat "$MN_TMP/slurm-up.log" >&2; mn_fail "slurm-up.sh"; }
}

# mn_run SECONDS OUTFILE CMD...: runs CMD with a hard timeout (TERM, then
# KILL 5 s later), output to OUTFILE and to the log; returns CMD's status
# (124 = timed out).
mn_run() {
  local t=$1 out=$2; shift 2
  mn_log "run: $*"
  local rc=0
  # stdout and stderr apart, then joined (stdout first): in one file the
  # launcher's two streams (Hydra forwards both) interleave mid-line.
  timeout -k 5 "$t" "$@" >"$out.stdout" 2>"$out.stderr" || rc=$?
  cat "$out.stdout" "$out.stderr" >"$out"
  sed 's/^/    | /' "$out"
  [ "$rc" = 124 ] && echo "    (timed out after ${t}s)"
  return "$rc"
}

# mn_hydra HOSTS N SECONDS OUTFILE PROG ARGS...: mpiexec.hydra started on the
# first host, launching through nsexec (the ssh stand-in) on HOSTS.
mn_hydra() {
  local hosts=$1 n=$2 t=$3 out=$4; shift 4
  local first=${hosts%%,*}
  mn_run "$t" "$out" "$MN_DIR/nsexec" "$first" \
    "mpiexec.hydra -launcher ssh -launcher-exec $MN_DIR/nsexec -hosts $hosts -n $n $*"
}

# mn_ompi HOSTS N SECONDS OUTFILE PROG ARGS...: Open MPI's mpirun (ORTE,
# serving PMIx to tmpi's ranks) started on the first host, its daemons
# started on HOSTS through nsexec (plm_rsh_agent, the ssh stand-in); N ranks
# in blocks of N/hosts per host. Runs as root (--allow-run-as-root), with
# mpirun's own --timeout inside mn_run's.
mn_ompi() {
  local hosts=$1 n=$2 t=$3 out=$4; shift 4
  local first=${hosts%%,*} nh per hl="" h
  nh=$(echo "$hosts" | tr ',' '\n' | wc -l)
  per=$(( (n + nh - 1) / nh ))
  for h in ${hosts//,/ }; do hl="$hl${hl:+,}$h:$per"; done
  command -v mpirun.openmpi >/dev/null || mn_fail "mpirun.openmpi missing (apt-get install openmpi-bin)"
  mn_run "$t" "$out" "$MN_DIR/nsexec" "$first" \
    "mpirun.openmpi --allow-run-as-root --oversubscribe --mca plm_rsh_agent $MN_DIR/nsexec --host $hl -n $n --timeout $t $*"
}
