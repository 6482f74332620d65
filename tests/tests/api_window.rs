//! The Rust API's one-sided windows across real processes under `tmpirun`
//! (btl self,sm and self,tcp): `api-window-check` (see
//! `src/bin/api-window-check.rs`) checks its results on every rank.

use tmpi_tests::{assert_ok, run, serial};

const PROG: &str = env!("CARGO_BIN_EXE_api-window-check");

fn ranks(n: u32, btl: &str) {
    let _g = serial();
    let mca = [("btl", btl), ("mpi_yield_when_idle", "1")];
    let out = run(n, 240, &mca, PROG, &[]);
    assert_ok(&out, &format!("api-window-check: OK ({n} ranks)"));
}

#[test]
fn one_rank() {
    ranks(1, "self,sm");
}

#[test]
fn three_ranks_sm() {
    ranks(3, "self,sm");
}

#[test]
fn four_ranks_tcp() {
    ranks(4, "self,tcp");
}
