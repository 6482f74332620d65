//! The Rust API's collectives and communicator creation across real
//! processes under `tmpirun` (btl self,sm; coll with its defaults, sm
//! included): `api-coll-check` (see `src/bin/api-coll-check.rs`) checks
//! its results on every rank.

use tmpi_tests::{assert_ok, run, serial};

const PROG: &str = env!("CARGO_BIN_EXE_api-coll-check");
const MCA: [(&str, &str); 2] = [("btl", "self,sm"), ("mpi_yield_when_idle", "1")];

fn ranks(n: u32) {
    let _g = serial();
    let out = run(n, 240, &MCA, PROG, &[]);
    assert_ok(&out, &format!("api-coll-check: OK ({n} ranks)"));
}

#[test]
fn one_rank() {
    ranks(1);
}

#[test]
fn two_ranks() {
    ranks(2);
}

#[test]
fn three_ranks() {
    ranks(3);
}

#[test]
fn four_ranks() {
    ranks(4);
}
