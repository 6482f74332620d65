#!/usr/bin/env bash
# Runs every test of tmpi: formatting and lints, the unit, property and
# multi-process integration tests of every crate, under tmpirun and Hydra.
# This is the README's test command; .ci/run calls it.
set -euo pipefail
cd "$(dirname "$0")/.."

bash ci/install-deps.sh

# Tests that need an outside launcher (Hydra) fail instead of skipping here.
export TMPI_TEST_REQUIRE_HYDRA=1
export CARGO_TERM_COLOR=never

# Each stage's wall time, printed when the next one starts and at the end,
# so a CI log shows where the time goes.
stage_name=""
stage_start=$SECONDS
stage() {
    if [ -n "$stage_name" ]; then
        echo "-- $stage_name: $((SECONDS - stage_start)) s"
    fi
    stage_name="$1"
    stage_start=$SECONDS
    echo "== $1"
}

stage "rustfmt"
cargo fmt --all -- --check
stage "clippy"
cargo clippy --workspace --all-targets --quiet -- -D warnings
stage "build"
cargo build --workspace --all-targets --quiet
stage "tests"
cargo test --workspace --no-fail-fast

stage "MPICH's test suite: its unchanged C programs against libmpi and mpicc (ci/mpich, docs/capi.md)"
bash ci/mpich/run.sh

stage "mpi4py's test suite: the mpi4py sdist built against the install, its suite at 1, 2 and 3 ranks (ci/mpi4py, docs/capi.md)"
bash ci/mpi4py/run.sh

stage "stress: randomized traffic over every transport the pml can use (docs/stress.md)"
bash ci/stress.sh --short --rxe

stage "AArch64: the workspace cross-built, libmpi's PMPI entries and C programs under qemu-user (ci/aarch64.sh)"
bash ci/aarch64.sh

stage "security checks (segments, session directory, PMI socket, leftovers)"
SECURITY_NO_BUILD=1 bash ci/security-checks.sh

stage "fuzz: every cargo-fuzz target for a few seconds from its seeds (docs/fuzzing.md)"
FUZZ_SECONDS=5 bash ci/fuzz.sh

stage "real verbs over soft-RoCE (qemu VM with rdma_rxe)"
bash ci/rxe/run-verbs-tests.sh

stage "btl-openib over real verbs on soft-RoCE (openib_pingpong in the rxe VM)"
bash btl-openib/ci/run-rxe.sh

stage "pt2pt suite over btl-openib on real verbs (p2p-check on rxe in the VM)"
bash ci/rxe/run-pt2pt-rxe.sh

stage "multi-host: PMI wire-up under Slurm (srun --mpi=pmi2), Hydra and Open MPI's mpirun (PMIx) across namespace hosts"
timeout 300 bash ci/multinode/run-pmicheck.sh

stage "multi-host: pt2pt suite over btl tcp (tmpirun self,tcp; Hydra and Open MPI's mpirun, 2 and 4 hosts, self,sm,tcp; srun)"
timeout 900 bash ci/multinode/run-pt2pt.sh
stage "done"
echo "-- all stages: $SECONDS s"
