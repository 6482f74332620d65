#!/usr/bin/env bash
# Builds rsmpi (crate `mpi` 0.8 from crates.io) against a tmpi install
# prefix and runs its example programs (copied unchanged into examples/)
# under the shipped mpirun with 2 and 4 ranks. Needs libclang-dev (bindgen).
#
#   bash capi/tests/rsmpi/run.sh [PREFIX]
# PROBE=mpicc (default: MPICC=$PREFIX/bin/mpicc) or PROBE=pkgconfig
# (MPI_PKG_CONFIG=$PREFIX/lib/pkgconfig/tmpi.pc).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
PREFIX=${1:-${PREFIX:-/tmp/tmpi-rsmpi-prefix}}
PROBE=${PROBE:-mpicc}
(cd "$root" && cargo xtask install --debug --prefix "$PREFIX")
# rsmpi's build script does not notice a changed MPI: one target dir per probe.
export CARGO_TARGET_DIR=${RSMPI_TARGET_DIR:-/tmp/tmpi-rsmpi-target-$PROBE}
case $PROBE in
mpicc) export MPICC="$PREFIX/bin/mpicc" ;;
pkgconfig) export MPI_PKG_CONFIG="$PREFIX/lib/pkgconfig/tmpi.pc" ;;
*) echo "PROBE must be mpicc or pkgconfig" >&2; exit 2 ;;
esac
(cd "$here" && cargo build --examples)
# rsmpi links with -L/-l only (no rpath): point the loader at the prefix.
export LD_LIBRARY_PATH="$PREFIX/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fail=0
for src in "$here"/examples/*.rs; do
    e=$(basename "$src" .rs)
    for n in 2 4; do
        if out=$(timeout 120 "$PREFIX/bin/mpirun" -n $n --timeout 90 "$CARGO_TARGET_DIR/debug/examples/$e" 2>&1); then
            echo "ok   $e ($n ranks)"
        else
            echo "FAIL $e ($n ranks):"; echo "$out" | tail -20; fail=1
        fi
    done
done
exit $fail
