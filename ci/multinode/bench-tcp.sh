#!/bin/bash
# bench-tcp.sh [ROUNDS] - tmpi over btl tcp beside Open MPI's btl tcp and
# MPICH over TCP, all on loopback on this machine, 2 ranks bound to cores:
#   tmpi      tmpirun --mca btl self,tcp tmpi-bench
#   Open MPI  mpirun.openmpi --mca pml ob1 --mca btl tcp,self --mca btl_tcp_if_include lo
#   MPICH     mpiexec.mpich -genv UCX_TLS tcp,self -genv MPIR_CVAR_NOLOCAL 1
# (perf/c/p2pbench.c for the C MPIs: the same measurement as tmpi-bench).
# Alternates implementations ROUNDS times (default 3), prints per-size
# medians and the ratios tmpi/Open MPI and tmpi/MPICH. Every run is under a
# timeout. Env: BINDIR (release tmpi-bench + tmpirun; default: built with
# cargo --release for those two packages), MAX (largest size, default 4 MiB).
set -euo pipefail
source "$(dirname "$(readlink -f "$0")")/lib.sh"
mn_init
ROUNDS=${1:-3}
MAX=${MAX:-4194304}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
command -v mpicc.openmpi >/dev/null && command -v mpicc.mpich >/dev/null \
  || bash "$REPO/ci/install-deps.sh"
make -s -C "$REPO/perf/c" OUT="$MN_TMP" all
if [ -z "${BINDIR:-}" ]; then
  (cd "$REPO" && cargo build --release -q -p tmpi-perf --bin tmpi-bench -p tmpi-run --bin tmpirun)
  BINDIR=$(cd "$REPO" && cargo metadata -q --format-version 1 --no-deps \
        | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')/release
fi

run() { # impl mode round
  local impl=$1 mode=$2 r=$3 f="$MN_TMP/$1.$2.$3.csv"
  case $impl in
  ompi) timeout -k 5 600 mpirun.openmpi -np 2 --bind-to core --mca pml ob1 --mca btl tcp,self \
          --mca btl_tcp_if_include lo "$MN_TMP/p2pbench-ompi" "$mode" --csv --max "$MAX" >"$f" ;;
  mpich) timeout -k 5 600 mpiexec.mpich -n 2 -bind-to core -genv UCX_TLS tcp,self \
          -genv MPIR_CVAR_NOLOCAL 1 "$MN_TMP/p2pbench-mpich" "$mode" --csv --max "$MAX" >"$f" ;;
  tmpi) timeout -k 5 600 "$BINDIR/tmpirun" -n 2 --bind-to core --timeout 590 --mca btl self,tcp \
          "$BINDIR/tmpi-bench" "$mode" --csv --max "$MAX" >"$f" ;;
  esac
}
for r in $(seq "$ROUNDS"); do
  for mode in pingpong bw; do
    for impl in ompi mpich tmpi; do
      mn_log "round $r: $impl $mode"
      run "$impl" "$mode" "$r" || mn_fail "$impl $mode round $r failed"
    done
  done
done
median() { # impl mode -> "size value" lines, sorted as join(1) wants
  cat "$MN_TMP/$1.$2."*.csv | grep -E '^[0-9]+,' | sort -t, -k1,1n -k2,2g | awk -F, '
    { v[$1] = v[$1] " " $2; n[$1]++ }
    END { for (s in v) { split(substr(v[s], 2), a, " "); print s, a[int((n[s] + 1) / 2)] } }' | sort -k1,1
}
for mode in pingpong bw; do
  for impl in ompi mpich tmpi; do median "$impl" "$mode" >"$MN_TMP/$impl.$mode.med"; done
  unit=$([ "$mode" = pingpong ] && echo "one-way latency, us" || echo "bandwidth, MB/s")
  echo
  echo "== TCP loopback $mode ($unit), medians of $ROUNDS runs"
  printf "%10s %12s %12s %12s %10s %10s\n" size "OMPI tcp" "MPICH tcp" "tmpi tcp" "tmpi/OMPI" "tmpi/MPICH"
  join "$MN_TMP/ompi.$mode.med" "$MN_TMP/mpich.$mode.med" | join - "$MN_TMP/tmpi.$mode.med" |
    awk '{ a = ($2 > 0) ? $4 / $2 : 0; b = ($3 > 0) ? $4 / $3 : 0;
           printf "%10d %12.2f %12.2f %12.2f %10.2f %10.2f\n", $1, $2, $3, $4, a, b }' | sort -n
done
