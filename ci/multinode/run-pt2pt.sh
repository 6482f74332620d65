#!/bin/bash
# run-pt2pt.sh [MODE...] - the point-to-point suite (tests' p2p-check, every
# case) over btl tcp, launched three ways:
#   tmpirun  4 ranks on one host, btl=self,tcp
#   hydra2   mpiexec.hydra across 2 namespace hosts, 4 ranks, btl=self,sm,tcp
#   hydra4   mpiexec.hydra across 4 namespace hosts, 4 ranks, btl=self,sm,tcp
#   slurm    srun --mpi=pmi2 -n 4 on the single-node cluster, btl=self,tcp
#   ompi2    Open MPI's mpirun (PMIx) across 2 namespace hosts, 4 ranks, btl=self,sm,tcp
#   ompi4    Open MPI's mpirun (PMIx) across 4 namespace hosts, 4 ranks, btl=self,sm,tcp
# (default: all six). Every rank prints its tcp per-peer counters
# (btl_tcp_stats=1) and the pml's route per peer (pml_stats=1: pml_peers);
# check-routes.py asserts for the `order` case that tcp carried cross-host
# peers and never same-host peers (sm did), or, on one host, that tcp
# carried the traffic, and that the pml's routes say the same. Every mode then
# runs coll-check `nodes`: MPI_Comm_split_type(SHARED) must hold exactly the
# ranks of each (namespace) host, and the node communicator's collectives run
# through coll's sm segment while COMM_WORLD, spanning hosts, attaches none.
# Every run has a timeout; hosts and cluster this script started are removed
# on every exit path.
# Env: BINDIR (holds p2p-check, coll-check and tmpirun; default: built with cargo),
# CASES (default: all), KEEP=1, RUN_TIMEOUT (per run, default 120 s).
set -euo pipefail
source "$(dirname "$(readlink -f "$0")")/lib.sh"
mn_init
T0=$SECONDS
MODES=("$@")
[ ${#MODES[@]} -gt 0 ] || MODES=(tmpirun hydra2 hydra4 slurm ompi2 ompi4)
CASES=${CASES:-"order probe cancel truncate zero big many ssend self threads bsend"}
RT=${RUN_TIMEOUT:-120}
MCA_COMMON=(mpi_yield_when_idle 1 btl_tcp_stats 1)

if [ -z "${BINDIR:-}" ]; then
  mn_log "building p2p-check, coll-check and tmpirun"
  (cd "$REPO" && cargo build -q -p tmpi-tests --bin p2p-check -p tmpi-comm --bin coll-check \
    -p tmpi-run --bin tmpirun)
  BINDIR=$(cd "$REPO" && cargo metadata -q --format-version 1 --no-deps \
        | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')/debug
fi
P2P=$BINDIR/p2p-check
COLL=$BINDIR/coll-check
TMPIRUN=$BINDIR/tmpirun
[ -x "$P2P" ] && [ -x "$COLL" ] && [ -x "$TMPIRUN" ] || mn_fail "p2p-check/coll-check/tmpirun missing in $BINDIR"

# run_case MODE CASE: one p2p-check run; checks the OK line (and routes for
# `order`).
run_case() {
  local mode=$1 c=$2 out=$MN_TMP/$1.$2.out rc=0
  case "$mode" in
    tmpirun)
      mn_run "$RT" "$out" "$TMPIRUN" -n 4 --timeout "$RT" --mca btl self,tcp \
        --mca "${MCA_COMMON[0]}" "${MCA_COMMON[1]}" --mca "${MCA_COMMON[2]}" "${MCA_COMMON[3]}" \
        --mca pml_stats 1 "$P2P" "$c" || rc=$? ;;
    hydra2|hydra4)
      local hosts=host1,host2
      [ "$mode" = hydra4 ] && hosts=host1,host2,host3,host4
      mn_hydra "$hosts" 4 "$RT" "$out" -genv TMPI_MCA_btl self,sm,tcp \
        -genv TMPI_MCA_mpi_yield_when_idle 1 -genv TMPI_MCA_btl_tcp_stats 1 -genv TMPI_MCA_pml_stats 1 "$P2P" "$c" || rc=$? ;;
    slurm)
      mn_run "$RT" "$out" env TMPI_MCA_btl=self,tcp TMPI_MCA_mpi_yield_when_idle=1 \
        TMPI_MCA_btl_tcp_stats=1 TMPI_MCA_pml_stats=1 srun --mpi=pmi2 -n 4 -t 3 "$P2P" "$c" || rc=$? ;;
    ompi2|ompi4)
      local hosts=host1,host2
      [ "$mode" = ompi4 ] && hosts=host1,host2,host3,host4
      mn_ompi "$hosts" 4 "$RT" "$out" -x TMPI_MCA_btl=self,sm,tcp \
        -x TMPI_MCA_mpi_yield_when_idle=1 -x TMPI_MCA_btl_tcp_stats=1 -x TMPI_MCA_pml_stats=1 "$P2P" "$c" || rc=$? ;;
  esac
  [ "$rc" = 0 ] || mn_fail "$mode $c: exit status $rc"
  grep -q "p2p-check $c: OK (4 ranks" "$out.stdout" || mn_fail "$mode $c: no OK line"
  if [ "$c" = order ]; then
    local m=local
    case "$mode" in hydra2|ompi2) m=hosts=2 ;; hydra4|ompi4) m=hosts=4 ;; esac
    python3 "$MN_DIR/check-routes.py" "$out" 4 "$m" || mn_fail "$mode $c: routes"
  fi
}

# run_nodes MODE: coll-check nodes (split_type(SHARED) per host, sm on the
# node communicator) with every rank's OK line.
run_nodes() {
  local mode=$1 out=$MN_TMP/$1.nodes.out rc=0 hosts=1
  case "$mode" in
    tmpirun)
      mn_run "$RT" "$out" "$TMPIRUN" -n 4 --timeout "$RT" --mca btl self,sm \
        --mca mpi_yield_when_idle 1 "$COLL" nodes 1 || rc=$? ;;
    hydra2|hydra4)
      local hl=host1,host2
      hosts=2
      [ "$mode" = hydra4 ] && hl=host1,host2,host3,host4 && hosts=4
      mn_hydra "$hl" 4 "$RT" "$out" -genv TMPI_MCA_btl self,sm,tcp \
        -genv TMPI_MCA_mpi_yield_when_idle 1 "$COLL" nodes $hosts || rc=$? ;;
    slurm)
      mn_run "$RT" "$out" env TMPI_MCA_btl=self,sm TMPI_MCA_mpi_yield_when_idle=1 \
        srun --mpi=pmi2 -n 4 -t 3 "$COLL" nodes 1 || rc=$? ;;
    ompi2|ompi4)
      local hl=host1,host2
      hosts=2
      [ "$mode" = ompi4 ] && hl=host1,host2,host3,host4 && hosts=4
      mn_ompi "$hl" 4 "$RT" "$out" -x TMPI_MCA_btl=self,sm,tcp \
        -x TMPI_MCA_mpi_yield_when_idle=1 "$COLL" nodes $hosts || rc=$? ;;
  esac
  [ "$rc" = 0 ] || mn_fail "$mode nodes: exit status $rc"
  local ok
  ok=$(grep -c "coll-check nodes: OK ($hosts hosts" "$out.stdout" || true)
  [ "$ok" = 4 ] || mn_fail "$mode nodes: $ok of 4 ranks OK"
  mn_log "$mode: coll-check nodes OK ($hosts hosts)"
}

for mode in "${MODES[@]}"; do
  case "$mode" in
    tmpirun) ;;
    hydra2) command -v mpiexec.hydra >/dev/null || mn_fail "mpiexec.hydra missing"; mn_netns_up 2 ;;
    hydra4) command -v mpiexec.hydra >/dev/null || mn_fail "mpiexec.hydra missing"; mn_netns_up 4 ;;
    slurm) mn_slurm_up ;;
    ompi2) mn_netns_up 2 ;;
    ompi4) mn_netns_up 4 ;;
    *) mn_fail "unknown mode $mode (tmpirun hydra2 hydra4 slurm ompi2 ompi4)" ;;
  esac
  mn_log "== $mode: p2p-check over tcp"
  t=$SECONDS
  for c in $CASES; do run_case "$mode" "$c"; done
  run_nodes "$mode"
  mn_log "$mode: all cases OK in $((SECONDS - t))s"
done
mn_log "run-pt2pt: ${MODES[*]}: all passed in $((SECONDS - T0))s"
