#!/usr/bin/env bash
# One-sided latency and bandwidth: perf/c/rmabench.c (put/get + flush,
# put + fence, a window of puts, fetch-and-op) built unchanged against
# tmpi, Open MPI and MPICH, run alternately ROUNDS times each (default 5),
# 2 ranks bound to the two cores; per mode and size the medians and tmpi's
# ratio against Open MPI (latency: below 1.0 is faster; put-bw: above 1.0
# is faster).
#
#   bash perf/scripts/rmabench.sh [ROUNDS]
#   MAX=65536 bash perf/scripts/rmabench.sh 3
#   CALLGRIND=1 bash perf/scripts/rmabench.sh    # instructions per call
#   BASE=<prefix of another tmpi> bash perf/scripts/rmabench.sh
#
# NET=tcp runs tmpi and Open MPI over TCP on loopback with their
# active-message components (btl self,tcp and osc pt2pt each: otherwise a
# one-node MPI_Win_allocate window is shared memory whatever the BTL);
# MPICH gets MPIR_CVAR_CH3_NOLOCAL but keeps its shared-memory window on
# one node, so its column is not over TCP. TMPI_ARGS adds
# options to tmpi's mpiexec (e.g. "--mca btl self,openib --mca
# btl_openib_if_include tmsoft0" for osc rdma on the soft NIC: shape only,
# the soft NIC is the CPU); RMABENCH_ARGS adds options to every rmabench
# (e.g. "--info acc_single_intrinsic=true --modes fop").
#
# BASE adds that build of tmpi (say, before a change) to the alternation
# and prints a second table: its medians beside PREFIX's, ratio = PREFIX /
# BASE. OMPI_ARGS adds options to Open MPI's mpirun: Open MPI 4.1 serves
# an MPI_Win_allocate window on one node by osc rdma (priority 101), not
# osc sm (100); OMPI_ARGS="--mca osc sm" measures osc sm.
#
# CALLGRIND=1 instead runs each library once under valgrind's callgrind
# (put-flush, get-flush and fop at 8 bytes, 1 100 iterations each) and
# prints the origin's instructions per call of MPI_Put, MPI_Get,
# MPI_Fetch_and_op and MPI_Win_flush (inclusive: everything the call
# runs), independent of the machine's load. The callgrind files stay in
# the output directory for callgrind_annotate.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROUNDS=${1:-5}
MAX=${MAX:-1048576}
OUT=${OUT:-$(mktemp -d /tmp/tmpi-rmabench.XXXXXX)}
PREFIX=${PREFIX:-$PWD/target/msgrate-prefix}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

command -v mpicc.openmpi >/dev/null && command -v mpicc.mpich >/dev/null || bash ci/install-deps.sh
mkdir -p "$OUT"
[ -x "$PREFIX/bin/mpicc" ] || cargo xtask install --release --prefix "$PREFIX" >/dev/null
"$PREFIX/bin/mpicc" -O2 -Wall -o "$OUT/rmabench-tmpi" perf/c/rmabench.c
mpicc.openmpi -O2 -Wall -o "$OUT/rmabench-ompi" perf/c/rmabench.c
mpicc.mpich -O2 -Wall -Wno-stringop-overflow -o "$OUT/rmabench-mpich" perf/c/rmabench.c
impls="ompi mpich tmpi"
if [ -n "${BASE:-}" ]; then
    "$BASE/bin/mpicc" -O2 -Wall -o "$OUT/rmabench-base" perf/c/rmabench.c
    impls="$impls base"
fi

if [ "${CALLGRIND:-0}" = 1 ]; then
    iters=1000
    for impl in tmpi ompi mpich; do
        rm -f "$OUT"/cg.$impl.*
        case $impl in
        ompi) # shellcheck disable=SC2206
            l=(mpirun.openmpi -np 2 --bind-to core --mca pml ob1 --mca btl vader,self ${OMPI_ARGS:-}) ;;
        mpich) l=(mpiexec.mpich -n 2 -bind-to core) ;;
        tmpi) l=("$PREFIX/bin/mpiexec" -n 2 --bind-to core --timeout 900) ;;
        esac
        timeout 900 "${l[@]}" valgrind --tool=callgrind --callgrind-out-file="$OUT/cg.$impl.%p" \
            "$OUT/rmabench-$impl" --min 8 --max 8 --iters $iters --modes put-flush,get-flush,fop \
            >/dev/null 2>&1 || echo "$impl failed under callgrind" >&2
        echo "== $impl: origin's instructions per call (8 B; MPI_Win_flush: after each of the others)"
        for f in "$OUT"/cg.$impl.*; do
            # The cost of main's calls (inclusive, with their count), not the
            # callee's own entry: with inlining, callgrind_annotate splits a
            # function's entry by source file.
            callgrind_annotate --inclusive=yes --tree=calling --threshold=100 "$f" 2>/dev/null |
                awk '/\*  .*:main / { p = 1; next } /^$/ { p = 0 } p' |
                grep -E ':P?MPI_(Put|Get|Fetch_and_op|Win_flush) \(' |
                sed -E 's/^ *([0-9,]+).*:(P?MPI_[A-Za-z_]+) \(([0-9,]+)x\).*/\1 \2 \3/' |
                awk '{ gsub(",", "", $1); gsub(",", "", $3); printf "  %-17s %6.0f\n", $2, $1 / $3 }' ||
                true # the target's file has none
        done
    done
    echo "callgrind files in $OUT"
    exit 0
fi

# shellcheck disable=SC2206
RB=(${RMABENCH_ARGS:-})
# shellcheck disable=SC2206
TA=(${TMPI_ARGS:-})
OMPI_BTL=vader,self
MPICH_ENV=()
if [ "${NET:-sm}" = tcp ]; then
    OMPI_BTL="tcp,self --mca osc pt2pt"
    MPICH_ENV=(-genv MPIR_CVAR_CH3_NOLOCAL 1)
    TA=(--mca btl self,tcp --mca osc pt2pt "${TA[@]}")
fi
run() { # impl round
    local f="$OUT/$1.$2.csv" a=(--max "$MAX" --csv "${RB[@]}")
    case $1 in
    ompi) # shellcheck disable=SC2086
        timeout 900 mpirun.openmpi -np 2 --bind-to core --mca pml ob1 --mca btl $OMPI_BTL ${OMPI_ARGS:-} \
        "$OUT/rmabench-ompi" "${a[@]}" >"$f" ;;
    mpich) timeout 900 mpiexec.mpich -n 2 -bind-to core "${MPICH_ENV[@]}" "$OUT/rmabench-mpich" "${a[@]}" >"$f" ;;
    tmpi) "$PREFIX/bin/mpiexec" -n 2 --bind-to core --timeout 900 "${TA[@]}" "$OUT/rmabench-tmpi" "${a[@]}" >"$f" ;;
    base) "$BASE/bin/mpiexec" -n 2 --bind-to core --timeout 900 "${TA[@]}" "$OUT/rmabench-base" "${a[@]}" >"$f" ;;
    esac
}
for r in $(seq 1 "$ROUNDS"); do
    for impl in $impls; do
        echo "round $r: $impl" >&2
        run "$impl" "$r" || echo "round $r: $impl failed" >&2
    done
done
median() { # impl -> "mode,size value" lines
    cat "$OUT/$1."*.csv | grep -E '^[a-z-]+,[0-9]+,' | sort -t, -k1,1 -k2,2n -k3,3g | awk -F, '
        { k = $1 "," $2; v[k] = v[k] " " $3; n[k]++ }
        END { for (k in v) { split(substr(v[k], 2), a, " "); print k, a[int((n[k] + 1) / 2)] } }' |
        LC_ALL=C sort
}
for impl in $impls; do median "$impl" >"$OUT/$impl.med"; done
echo "== one-sided (latency us, put-bw MB/s), medians of $ROUNDS runs; ratio = tmpi / Open MPI"
printf "%-10s %10s %12s %12s %12s %8s\n" mode size "Open MPI" MPICH tmpi ratio
LC_ALL=C join "$OUT/ompi.med" "$OUT/mpich.med" | LC_ALL=C join - "$OUT/tmpi.med" | tr ',' ' ' |
    sort -k1,1 -k2,2n | awk '{ r = ($3 > 0) ? $5 / $3 : 0; printf "%-10s %10d %12.3f %12.3f %12.3f %8.2f\n", $1, $2, $3, $4, $5, r }'
if [ -n "${BASE:-}" ]; then
    echo "== tmpi ($PREFIX) beside tmpi ($BASE), medians of $ROUNDS runs; ratio = PREFIX / BASE"
    printf "%-10s %10s %12s %12s %8s\n" mode size base tmpi ratio
    LC_ALL=C join "$OUT/base.med" "$OUT/tmpi.med" | tr ',' ' ' | sort -k1,1 -k2,2n |
        awk '{ r = ($3 > 0) ? $4 / $3 : 0; printf "%-10s %10d %12.3f %12.3f %8.2f\n", $1, $2, $3, $4, r }'
fi
echo "raw results in $OUT"
