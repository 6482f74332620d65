#!/usr/bin/env bash
# Small-message rate on shared memory: perf/c/msgrate.c (windowed
# MPI_Isend/MPI_Irecv, window 64) built unchanged against tmpi, Open MPI
# and MPICH, run alternately ROUNDS times each (default 5) with 2 ranks
# bound to the two cores (and PAIRS pairs when PAIRS > 1: 2*PAIRS ranks,
# not bound), per-size medians and tmpi's ratio against Open MPI
# (messages per second: above 1.0 is faster).
#
#   bash perf/scripts/msgrate.sh [ROUNDS]
#   CALLGRIND=1 bash perf/scripts/msgrate.sh   # instructions per call
#
# CALLGRIND=1 instead runs each library once under valgrind's callgrind at
# 8 bytes (1 000 windows) and prints the instructions per message of each
# MPI call on the sending and the receiving rank, counted at main's call
# sites (inclusive): where a message's cost is, independent of the
# machine's load.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROUNDS=${1:-5}
PAIRS=${PAIRS:-1}
OUT=${OUT:-$(mktemp -d /tmp/tmpi-msgrate.XXXXXX)}
PREFIX=${PREFIX:-$PWD/target/msgrate-prefix}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

command -v mpicc.openmpi >/dev/null && command -v mpicc.mpich >/dev/null || bash ci/install-deps.sh
mkdir -p "$OUT"
[ -x "$PREFIX/bin/mpicc" ] || cargo xtask install --release --prefix "$PREFIX" >/dev/null
"$PREFIX/bin/mpicc" -O2 -Wall -o "$OUT/msgrate-tmpi" perf/c/msgrate.c
mpicc.openmpi -O2 -Wall -o "$OUT/msgrate-ompi" perf/c/msgrate.c
mpicc.mpich -O2 -Wall -Wno-stringop-overflow -o "$OUT/msgrate-mpich" perf/c/msgrate.c

n=$((2 * PAIRS))
bind=(--bind-to core)
[ "$n" -gt 2 ] && bind=(--bind-to none)
launch() { # impl -> command prefix
    case $1 in
    ompi) echo "mpirun.openmpi -np $n ${bind[*]} --mca pml ob1 --mca btl vader,self" ;;
    mpich) echo "mpiexec.mpich -n $n -bind-to ${bind[1]}" ;;
    tmpi) echo "$PREFIX/bin/mpiexec -n $n ${bind[*]} --timeout 600" ;;
    esac
}

if [ "${CALLGRIND:-0}" = 1 ]; then
    for impl in tmpi ompi mpich; do
        rm -f "$OUT"/cg.*
        # shellcheck disable=SC2046
        timeout 900 $(launch $impl) valgrind --tool=callgrind --callgrind-out-file="$OUT/cg.%p" \
            "$OUT/msgrate-$impl" --min 8 --max 8 --iters 1000 >/dev/null 2>&1
        msgs=$((1100 * 64))
        echo "== $impl: instructions per message (8 B, window 64, $msgs messages per rank)"
        for f in "$OUT"/cg.*; do
            # The cost of main's calls (inclusive), not the callee's own
            # entry: with inlining, callgrind_annotate splits a function's
            # entry by source file and undercounts it (as rmabench.sh).
            # Per message: MPI_Waitall's cost is spread over the window.
            callgrind_annotate --inclusive=yes --tree=calling --threshold=100 "$f" 2>/dev/null |
                awk '/\*  .*:main / { p = 1; next } /^$/ { p = 0 } p' |
                grep -E ':P?MPI_(Isend|Irecv|Waitall) \(' |
                sed -E 's/^ *([0-9,]+).*:(P?MPI_[A-Za-z_]+) \(([0-9,]+)x\).*/\1 \2 \3/' |
                awk -v m=$msgs '{ gsub(",", "", $1); printf "  %-13s %6.0f\n", $2, $1 / m }' || true
            echo "  --"
        done
    done
    exit 0
fi

for r in $(seq 1 "$ROUNDS"); do
    for impl in ompi mpich tmpi; do
        echo "round $r: $impl" >&2
        # shellcheck disable=SC2046
        timeout 600 $(launch $impl) "$OUT/msgrate-$impl" --max 8192 --csv >"$OUT/$impl.$r.csv"
    done
done
median() { # impl -> "size value" lines
    cat "$OUT/$1."*.csv | grep -E '^[0-9]+,' | sort -t, -k1,1n -k2,2g | awk -F, '
        { v[$1] = v[$1] " " $2; n[$1]++ }
        END { for (s in v) { split(substr(v[s], 2), a, " "); print s, a[int((n[s] + 1) / 2)] } }' | sort -n
}
for impl in ompi mpich tmpi; do median "$impl" >"$OUT/$impl.med"; done
echo "== message rate (messages/s, $PAIRS pair(s)), medians of $ROUNDS runs; ratio = tmpi / Open MPI"
printf "%10s %12s %12s %12s %8s\n" size "Open MPI" MPICH tmpi ratio
join "$OUT/ompi.med" "$OUT/mpich.med" | join - "$OUT/tmpi.med" |
    awk '{ r = ($2 > 0) ? $4 / $2 : 0; printf "%10d %12.0f %12.0f %12.0f %8.2f\n", $1, $2, $3, $4, r }'
echo "raw results in $OUT"
