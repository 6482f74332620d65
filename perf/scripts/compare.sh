#!/usr/bin/env bash
# Runs tmpi-bench and the C reference benchmark (perf/c/p2pbench.c) built
# with Open MPI and MPICH, alternately, ROUNDS times each (default 3), on
# this machine, and prints per-size medians and tmpi's ratios against Open
# MPI: 8-byte latency (target <= 0.9x) and 1-4 MiB bandwidth (>= 1.1x).
#
#   bash perf/scripts/compare.sh [ROUNDS]
#
# Launch lines are those of reference/peers.md (2 ranks bound to cores).
set -euo pipefail
cd "$(dirname "$0")/../.."
ROUNDS=${1:-3}
OUT=${OUT:-$(mktemp -d /tmp/tmpi-compare.XXXXXX)}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

command -v mpicc.openmpi >/dev/null && command -v mpicc.mpich >/dev/null || bash ci/install-deps.sh
mkdir -p "$OUT"
make -s -C perf/c OUT="$OUT" all
cargo build --release --quiet -p tmpi-perf --bin tmpi-bench -p tmpi-run --bin tmpirun
TD=${CARGO_TARGET_DIR:-target}/release

. perf/scripts/rt.sh   # RT=1: real-time jobs (sets RTW)
run() { # impl mode round
    local impl=$1 mode=$2 r=$3 f="$OUT/$1.$2.$3.csv"
    case $impl in
    ompi) "${RTW[@]}" timeout 600 mpirun.openmpi -np 2 --bind-to core --mca pml ob1 --mca btl vader,self \
        "$OUT/p2pbench-ompi" "$mode" --csv >"$f" ;;
    mpich) "${RTW[@]}" timeout 600 mpiexec.mpich -n 2 -bind-to core "$OUT/p2pbench-mpich" "$mode" --csv >"$f" ;;
    tmpi) "${RTW[@]}" "$TD/tmpirun" -n 2 --bind-to core --timeout 600 "$TD/tmpi-bench" "$mode" --csv >"$f" ;;
    esac
}

for r in $(seq 1 "$ROUNDS"); do
    for mode in pingpong bw; do
        for impl in ompi mpich tmpi; do
            echo "round $r: $impl $mode" >&2
            run "$impl" "$mode" "$r"
        done
    done
done

# Median per (impl, mode, size) over the rounds.
median() { # impl mode -> "size value" lines
    cat "$OUT/$1.$2."*.csv | grep -E '^[0-9]+,' | sort -t, -k1,1n -k2,2g | awk -F, '
        { v[$1] = v[$1] " " $2; n[$1]++ }
        END { for (s in v) { split(substr(v[s], 2), a, " "); m = a[int((n[s] + 1) / 2)];
              print s, m } }' | sort -n
}
for mode in pingpong bw; do
    for impl in ompi mpich tmpi; do median "$impl" "$mode" >"$OUT/$impl.$mode.med"; done
    unit=$([ "$mode" = pingpong ] && echo "latency us" || echo "MB/s")
    echo
    echo "== $mode ($unit), medians of $ROUNDS runs; ratio = tmpi / Open MPI"
    printf "%10s %12s %12s %12s %10s\n" size "Open MPI" MPICH tmpi ratio
    join "$OUT/ompi.$mode.med" "$OUT/mpich.$mode.med" | join - "$OUT/tmpi.$mode.med" |
        awk '{ r = ($2 > 0) ? $4 / $2 : 0; printf "%10d %12.3f %12.3f %12.3f %10.2f\n", $1, $2, $3, $4, r }'
done
echo
lat8=$(join "$OUT/ompi.pingpong.med" "$OUT/tmpi.pingpong.med" | awk '$1 == 8 { printf "%.2f", $3 / $2 }')
bw=$(join "$OUT/ompi.bw.med" "$OUT/tmpi.bw.med" |
    awk '$1 >= 1048576 && $1 <= 4194304 { s += $3 / $2; n++ } END { if (n) printf "%.2f", s / n }')
echo "8-byte latency: tmpi / Open MPI = ${lat8}x (target <= 0.9x)"
echo "1-4 MiB bandwidth: tmpi / Open MPI = ${bw}x (mean ratio, target >= 1.1x)"
echo "raw results in $OUT"
