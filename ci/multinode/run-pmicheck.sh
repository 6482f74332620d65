#!/bin/bash
# run-pmicheck.sh - proves the multi-host test infrastructure with
# tmpi-pmicheck (PMI wire-up + modex check, exit 0 on success):
#   1. Slurm: `srun --mpi=pmi2 -n 4` on the single-node cluster: PMI-2
#      (PMI_JOBID set), 4 ranks, all on one node id; then `srun --mpi=pmix
#      -n 4` (Debian's Slurm 22.05 has the pmix_v4 plugin): the same over
#      tmpi's PMIx client, and an abort with code 7 ends the step with 7.
#   2. Hydra across 2 namespace hosts, 4 ranks: 2 distinct node ids with
#      2 ranks each, and each rank's hostname is its namespace host's.
#   3. Open MPI's mpirun across 2 namespace hosts, 4 ranks: the same, with
#      every rank on PMIx (tmpi's client over libpmix); then MPMD
#      (`a : b`) with pmix.appnum per part, and a rank exiting without
#      finalize failing the job.
# Every run is under a timeout; what this script starts is stopped on
# every exit path. Needs root. Env: BIN (a tmpi-pmicheck binary; default:
# built with cargo), KEEP=1 (leave hosts and cluster up), SKIP_SLURM=1,
# SKIP_HYDRA=1, SKIP_OMPI=1.
set -euo pipefail
source "$(dirname "$(readlink -f "$0")")/lib.sh"
mn_init
T0=$SECONDS

if [ -z "${BIN:-}" ]; then
  mn_log "building tmpi-pmicheck"
  (cd "$REPO" && cargo build -q -p tmpi-run --bin tmpi-pmicheck)
  BIN=$(cd "$REPO" && cargo metadata -q --format-version 1 --no-deps \
        | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')/debug/tmpi-pmicheck
fi
[ -x "$BIN" ] || mn_fail "no tmpi-pmicheck at $BIN"

# check_ranks OUT N: every rank 0..N-1 printed its identity and "ok";
# prints "rank node host version" lines to stdout.
check_ranks() {
  local out=$1 n=$2 r
  for r in $(seq 0 $((n - 1))); do
    grep -q "^rank $r: ok ($n peers verified)" "$out" || mn_fail "rank $r did not report ok"
  done
  sed -n 's/^rank \([0-9]*\)\/\([0-9]*\): .*version=\([A-Za-z0-9]*\) node=\([0-9]*\) .*host=\([^ ]*\) .*/\1 \4 \5 \3 \2/p' "$out" | sort -n
}

if [ "${SKIP_SLURM:-0}" != 1 ]; then
  mn_log "== Slurm: srun --mpi=pmi2 -n 4"
  mn_slurm_up
  out=$MN_TMP/slurm.out
  mn_run 60 "$out" srun --mpi=pmi2 -n 4 -t 1 "$BIN" || mn_fail "srun exited $?"
  ids=$(check_ranks "$out" 4)
  [ "$(echo "$ids" | wc -l)" = 4 ] || mn_fail "expected 4 identity lines, got: $ids"
  echo "$ids" | awk '$4 != "V2" {exit 1}' || mn_fail "not PMI-2 under srun --mpi=pmi2: $ids"
  [ "$(echo "$ids" | awk '{print $2}' | sort -u | wc -l)" = 1 ] \
    || mn_fail "srun on one node: node ids differ: $ids"
  echo "$ids" | awk '$5 != 4 {exit 1}' || mn_fail "size is not 4: $ids"
  # the job id comes from PMI_JOBID=<job>.<step> (sanitized to <job>_<step>)
  grep -Eq '^rank 0/4: .* job=[0-9]+_[0-9]+ ' "$out" || mn_fail "job id is not Slurm's PMI_JOBID"
  mn_log "Slurm OK: 4 ranks, PMI-2, one node id"
  mn_log "== Slurm: srun --mpi=pmix -n 4"
  out=$MN_TMP/slurm-pmix.out
  mn_run 60 "$out" srun --mpi=pmix -n 4 -t 1 "$BIN" || mn_fail "srun --mpi=pmix exited $?"
  ids=$(check_ranks "$out" 4)
  [ "$(echo "$ids" | wc -l)" = 4 ] || mn_fail "expected 4 identity lines, got: $ids"
  echo "$ids" | awk '$4 != "Pmix" {exit 1}' || mn_fail "not PMIx under srun --mpi=pmix: $ids"
  [ "$(echo "$ids" | awk '{print $2}' | sort -u | wc -l)" = 1 ] \
    || mn_fail "srun on one node: node ids differ: $ids"
  echo "$ids" | awk '$5 != 4 {exit 1}' || mn_fail "size is not 4: $ids"
  rc=0
  mn_run 60 "$out" srun --mpi=pmix -n 3 -t 1 "$BIN" --quiet --abort 7 --abort-rank 1 || rc=$?
  [ "$rc" = 7 ] || mn_fail "abort under srun --mpi=pmix: exit $rc, expected 7"
  mn_log "Slurm OK: 4 ranks over PMIx, one node id; abort ends the step with its code"
fi

if [ "${SKIP_HYDRA:-0}" != 1 ]; then
  mn_log "== Hydra: 2 namespace hosts, 4 ranks"
  command -v mpiexec.hydra >/dev/null || mn_fail "mpiexec.hydra missing (apt-get install mpich)"
  mn_netns_up 2
  out=$MN_TMP/hydra.out
  mn_hydra host1,host2 4 60 "$out" "$BIN" || mn_fail "mpiexec.hydra exited $?"
  ids=$(check_ranks "$out" 4)
  [ "$(echo "$ids" | wc -l)" = 4 ] || mn_fail "expected 4 identity lines, got: $ids"
  [ "$(echo "$ids" | awk '{print $2}' | sort -u | wc -l)" = 2 ] \
    || mn_fail "expected 2 distinct node ids: $ids"
  for node in $(echo "$ids" | awk '{print $2}' | sort -u); do
    [ "$(echo "$ids" | awk -v n="$node" '$2 == n' | wc -l)" = 2 ] \
      || mn_fail "node $node does not hold 2 ranks: $ids"
    [ "$(echo "$ids" | awk -v n="$node" '$2 == n {print $3}' | sort -u | wc -l)" = 1 ] \
      || mn_fail "node $node spans several host names: $ids"
  done
  [ "$(echo "$ids" | awk '{print $3}' | sort -u | tr '\n' ' ')" = "host1 host2 " ] \
    || mn_fail "ranks did not run on host1 and host2: $ids"
  mn_log "Hydra OK: 2 node ids x 2 ranks on host1, host2"
fi
if [ "${SKIP_OMPI:-0}" != 1 ]; then
  mn_log "== Open MPI's mpirun (PMIx): 2 namespace hosts, 4 ranks"
  mn_netns_up 2
  out=$MN_TMP/ompi.out
  mn_ompi host1,host2 4 60 "$out" "$BIN" || mn_fail "mpirun.openmpi exited $?"
  ids=$(check_ranks "$out" 4)
  [ "$(echo "$ids" | wc -l)" = 4 ] || mn_fail "expected 4 identity lines, got: $ids"
  echo "$ids" | awk '$4 != "Pmix" {exit 1}' || mn_fail "not PMIx under Open MPI's mpirun: $ids"
  [ "$(echo "$ids" | awk '{print $2}' | sort -u | wc -l)" = 2 ] \
    || mn_fail "expected 2 distinct node ids: $ids"
  for node in $(echo "$ids" | awk '{print $2}' | sort -u); do
    [ "$(echo "$ids" | awk -v n="$node" '$2 == n' | wc -l)" = 2 ] \
      || mn_fail "node $node does not hold 2 ranks: $ids"
    [ "$(echo "$ids" | awk -v n="$node" '$2 == n {print $3}' | sort -u | wc -l)" = 1 ] \
      || mn_fail "node $node spans several host names: $ids"
  done
  [ "$(echo "$ids" | awk '{print $3}' | sort -u | tr '\n' ' ')" = "host1 host2 " ] \
    || mn_fail "ranks did not run on host1 and host2: $ids"
  # MPMD: each part's ranks see their part's number (pmix.appnum).
  out=$MN_TMP/ompi-mpmd.out
  mn_run 60 "$out" "$MN_DIR/nsexec" host1 \
    "mpirun.openmpi --allow-run-as-root --oversubscribe --mca plm_rsh_agent $MN_DIR/nsexec --host host1:2,host2:2 --timeout 60 -n 2 $BIN : -n 2 $BIN" \
    || mn_fail "MPMD under mpirun.openmpi exited $?"
  check_ranks "$out" 4 >/dev/null
  [ "$(grep -Ec '^rank [01]/4: .* appnum=0$' "$out")" = 2 ] && [ "$(grep -Ec '^rank [23]/4: .* appnum=1$' "$out")" = 2 ] \
    || mn_fail "appnum per MPMD part wrong"
  # A rank exiting without finalize fails the job.
  out=$MN_TMP/ompi-nofin.out
  rc=0
  mn_ompi host1,host2 4 60 "$out" "$BIN" --exit-without-finalize || rc=$?
  [ "$rc" != 0 ] && [ "$rc" != 124 ] || mn_fail "exit without finalize: mpirun exited $rc"
  mn_log "Open MPI OK: PMIx, 2 node ids x 2 ranks on host1, host2; MPMD appnum; exit without finalize fails"
fi
mn_log "run-pmicheck: all passed in $((SECONDS - T0))s"
