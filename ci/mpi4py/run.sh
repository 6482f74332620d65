#!/usr/bin/env bash
# Runs mpi4py's own test suite (the mpi4py 4.1.2 source distribution from
# the Python package index, unchanged) against tmpi: mpi4py built with the
# installed prefix's mpicc, `python test/main.py` under tmpirun at 1, 2 and
# 3 ranks with spawn tests off (MPI4PY_TEST_SPAWN=0). Every failure, error
# or skip that comes from tmpi must be listed with its reason in
# expected-failures.txt; a crash, a hang (each run has a timeout) or an
# unlisted failure fails the run. Skips that are mpi4py's own choice (an
# optional Python package missing, spawn off) are in not-tmpi-skips.txt.
# docs/capi.md "mpi4py's test suite".
#
#   bash ci/mpi4py/run.sh [PREFIX]     (default: a release install under target/)
#   RANKS="1 2" bash ci/mpi4py/run.sh
#   MPI4PY_PEER=openmpi bash ci/mpi4py/run.sh   (the same suite on Debian's
#                                                Open MPI, for comparison: counts only)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
prefix=${1:-}
version=4.1.2
RANKS=${RANKS:-"1 2 3"}
limit=${MPI4PY_TIMEOUT:-600}
cache=${MPI4PY_CACHE:-/var/tmp/tmpi-mpi4py}
peer=${MPI4PY_PEER:-}
work=$(mktemp -d /tmp/tmpi-mpi4py.XXXXXX)
trap 'rm -rf "$work"' EXIT
python=${PYTHON:-python3}

if [ "$peer" = openmpi ]; then
    mpicc=mpicc.openmpi
    launch() { local n=$1; shift; timeout $((limit + 30)) mpirun.openmpi --oversubscribe --allow-run-as-root \
        --timeout "$limit" -x MPI4PY_TEST_SPAWN -x PYTHONPATH -n "$n" "$@"; }
    header=$(command -v mpicc.openmpi)
elif [ -n "$peer" ]; then
    echo "mpi4py: MPI4PY_PEER=$peer: only openmpi is known" >&2
    exit 2
else
    if [ -z "$prefix" ]; then
        prefix="$root/target/mpi4py-prefix"
        (cd "$root" && cargo xtask install --release --prefix "$prefix" >/dev/null)
    fi
    mpicc="$prefix/bin/mpicc"
    launch() { local n=$1; shift; timeout $((limit + 30)) "$prefix/bin/mpirun" -n "$n" --timeout "$limit" \
        --mca mpi_yield_when_idle 1 "$@"; }
    header="$prefix/include/mpi.h"
fi

# The source distribution, through pip (cached).
mkdir -p "$cache"
sdist="$cache/mpi4py-$version.tar.gz"
if [ ! -f "$sdist" ]; then
    "$python" -m pip download -q --no-deps --no-binary :all: "mpi4py==$version" -d "$cache" ||
        { echo "mpi4py: pip download mpi4py==$version failed (network?)" >&2; exit 1; }
fi

# mpi4py built against this MPI: its configure step test-links every MPI
# function, so a build is kept per header, prefix and Python (the
# extension's rpath names the prefix's lib). -O1: the 10 MB generated C
# file takes minutes at pip's default -O3.
key=$( (echo "$version $peer $prefix"; "$python" -V; "$mpicc" -show 2>/dev/null || true; cat "$header") |
    sha256sum | cut -c1-16)
site="$cache/site-$key"
if [ ! -f "$site/.built" ]; then
    rm -rf "$site"
    echo "mpi4py: building mpi4py $version with $mpicc (a few minutes, once per MPI build)"
    if ! MPICC="$mpicc" CFLAGS="-O1" "$python" -m pip install -q --no-deps --no-binary mpi4py \
        --target "$site" "$sdist" >"$work/build.log" 2>&1; then
        tail -40 "$work/build.log"
        echo "mpi4py: building mpi4py failed" >&2
        exit 1
    fi
    touch "$site/.built"
fi

tar xzf "$sdist" -C "$work" "mpi4py-$version/test"
testdir="$work/mpi4py-$version/test"

# Listed tests marked "[not run]" would hang (one rank fails a call the
# others wait on): main.py's -x leaves them out.
skip_args=()
if [ -z "$peer" ]; then
    while read -r pat; do skip_args+=(-x "$pat"); done < <(
        grep -v '^#' "$here/expected-failures.txt" | grep '  \[not run\]' | sed 's/  .*//')
fi

export MPI4PY_TEST_SPAWN=0 PYTHONPATH="$site"
results=()
for n in $RANKS; do
    start=$SECONDS
    launch "$n" "$python" "$here/runner.py" "$testdir" "$work/res-$n" ${skip_args[@]+"${skip_args[@]}"} </dev/null >"$work/log-$n" 2>&1 && rc=0 || rc=$?
    echo "mpi4py: $n rank(s) took $((SECONDS - start)) s"
    if ! grep -q "^END" "$work/res-$n.0" 2>/dev/null || [ "$rc" -gt 1 ]; then
        tail -60 "$work/log-$n" | sed 's/^/    /'
    fi
    results+=("$n:$rc")
done

if [ -n "$peer" ]; then
    "$python" "$here/check.py" /dev/null "$here/not-tmpi-skips.txt" "$work" "${results[@]}" |
        grep -v "unlisted\|is listed" || true
    exit 0
fi
"$python" "$here/check.py" "$here/expected-failures.txt" "$here/not-tmpi-skips.txt" "$work" "${results[@]}"
