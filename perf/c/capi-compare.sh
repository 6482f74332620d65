#!/usr/bin/env bash
# The C benchmarks (p2pbench.c, collbench.c) built with tmpi's shipped
# mpicc and with Debian's mpicc.openmpi and mpicc.mpich, run alternately
# ROUNDS times (default 3), 2 ranks bound to cores; prints per-size medians
# and tmpi's ratio against each.
#
#   bash perf/c/capi-compare.sh [ROUNDS]      (PREFIX=... to reuse an install)
set -euo pipefail
cd "$(dirname "$0")/../.."
ROUNDS=${1:-3}
OUT=${OUT:-$(mktemp -d /tmp/tmpi-capi-compare.XXXXXX)}
PREFIX=${PREFIX:-$OUT/prefix}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
if [ -z "${REPORT_ONLY:-}" ]; then
[ -x "$PREFIX/bin/mpicc" ] || cargo xtask install --prefix "$PREFIX" >&2
for b in p2pbench collbench; do
    "$PREFIX/bin/mpicc" -O2 -o "$OUT/$b-tmpi" "perf/c/$b.c"
    mpicc.openmpi -O2 -o "$OUT/$b-ompi" "perf/c/$b.c"
    mpicc.mpich -O2 -o "$OUT/$b-mpich" "perf/c/$b.c"
done
. perf/scripts/rt.sh   # RT=1: real-time jobs (sets RTW)
run() { # impl prog args... > csv
    local impl=$1; shift
    case $impl in
    ompi) "${RTW[@]}" timeout 600 mpirun.openmpi -np 2 --bind-to core --mca pml ob1 --mca btl vader,self "$OUT/$1-ompi" "${@:2}" ;;
    mpich) "${RTW[@]}" timeout 600 mpiexec.mpich -n 2 -bind-to core "$OUT/$1-mpich" "${@:2}" ;;
    tmpi) "${RTW[@]}" "$PREFIX/bin/mpirun" -n 2 --bind-to core --timeout 600 "$OUT/$1-tmpi" "${@:2}" ;;
    esac
}
for r in $(seq 1 "$ROUNDS"); do
    for impl in ompi mpich tmpi; do
        echo "round $r: $impl" >&2
        run $impl p2pbench pingpong --csv | grep -E '^[0-9]+,' | sed 's/^/pingpong,/' >"$OUT/$impl.$r.csv"
        run $impl p2pbench bw --csv | grep -E '^[0-9]+,' | sed 's/^/bw,/' >>"$OUT/$impl.$r.csv"
        run $impl collbench --csv | grep -E '^[a-z]+,' >>"$OUT/$impl.$r.csv"
    done
done
fi   # REPORT_ONLY=1 OUT=dir: tables from an earlier run's CSV files
med() { cat "$OUT/$1."*.csv | sort -t, -k1,1 -k2,2n -k3,3g | awk -F, '{ k = $1 "," $2; v[k] = v[k] " " $3; n[k]++ }
    END { for (k in v) { split(substr(v[k], 2), a, " "); print k, a[int((n[k] + 1) / 2)] } }' | sort; }
for i in ompi mpich tmpi; do med $i >"$OUT/$i.med"; done
printf "%-22s %11s %11s %11s %9s %9s\n" "bench,bytes" "Open MPI" MPICH tmpi "t/ompi" "t/mpich"
join "$OUT/ompi.med" "$OUT/mpich.med" | join - "$OUT/tmpi.med" |
    awk '{ printf "%-22s %11.3f %11.3f %11.3f %9.2f %9.2f\n", $1, $2, $3, $4, ($2 > 0 ? $4 / $2 : 0), ($3 > 0 ? $4 / $3 : 0) }'
echo "(pingpong and collectives: microseconds, lower is better; bw: MB/s, higher is better)"
