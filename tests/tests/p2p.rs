//! Point-to-point semantics across real processes under `tmpirun`, over
//! btl=self,sm with 2 to 4 ranks. Each case is a `p2p-check` run (see
//! `src/bin/p2p-check.rs`); the ranks verify their own results.

use tmpi_tests::{assert_ok, run, serial};

const PROG: &str = env!("CARGO_BIN_EXE_p2p-check");
/// Yield when idle: tests run 2-4 busy ranks on 2 cores.
const BASE: [(&str, &str); 2] = [("btl", "self,sm"), ("mpi_yield_when_idle", "1")];

fn case(n: u32, name: &str, extra: &[(&str, &str)]) -> String {
    let _g = serial();
    let mut mca: Vec<(&str, &str)> = BASE.to_vec();
    mca.extend_from_slice(extra);
    let out = run(n, 180, &mca, PROG, &[name]);
    assert_ok(&out, &format!("p2p-check {name}: OK"));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn ordering_with_wildcards_2_ranks() {
    case(2, "order", &[]);
}

#[test]
fn ordering_with_wildcards_3_ranks_pipelined() {
    case(3, "order", &[("btl_sm_single_copy", "none")]);
}

#[test]
fn ordering_with_wildcards_4_ranks() {
    case(4, "order", &[]);
}

#[test]
fn probe_then_receive_and_mprobe() {
    case(2, "probe", &[]);
}

#[test]
fn cancel_receive() {
    case(3, "cancel", &[]);
}

#[test]
fn blocking_receive_straight_from_the_fast_box() {
    let out = case(2, "direct", &[]);
    assert!(out.contains("replies taken from the fast box"), "{out}");
}

#[test]
fn truncation() {
    case(2, "truncate", &[]);
}

#[test]
fn zero_byte_messages() {
    case(3, "zero", &[]);
}

#[test]
fn big_messages_single_copy() {
    let out = case(2, "big", &[]);
    // Rank 0's counters: the large messages were pulled with CMA gets
    // (unless the kernel forbids CMA here, in which case sm falls back).
    assert!(
        !out.contains(" rndv_get=0 ") || !out.contains(" rndv_pipelined=0 "),
        "no rendezvous happened: {out}"
    );
}

#[test]
fn big_messages_without_single_copy() {
    let out = case(2, "big", &[("btl_sm_single_copy", "none")]);
    assert!(out.contains(" rndv_get=0 "), "a get was used: {out}");
    assert!(!out.contains(" rndv_pipelined=0 "), "not pipelined: {out}");
}

#[test]
fn big_messages_small_eager_limit() {
    case(2, "big", &[("pml_eager_limit", "512")]);
}

#[test]
fn ten_thousand_outstanding_requests() {
    case(2, "many", &[]);
}

#[test]
fn synchronous_send() {
    case(2, "ssend", &[]);
}

#[test]
fn self_sends() {
    case(2, "self", &[]);
}

#[test]
fn thread_multiple() {
    case(2, "threads", &[]);
}

#[test]
fn buffered_send() {
    case(2, "bsend", &[]);
}

#[test]
fn singleton_without_launcher() {
    let _g = serial();
    let out = std::process::Command::new(PROG)
        .arg("self")
        .env_remove("PMI_FD")
        .output()
        .expect("run p2p-check");
    assert_ok(&out, "p2p-check self: OK (1 ranks");
}

#[test]
fn a_panicking_rank_ends_the_job() {
    let _g = serial();
    let t0 = std::time::Instant::now();
    let out = run(3, 60, &BASE, PROG, &["panic"]);
    let se = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "job succeeded: {se}");
    assert_ne!(
        out.status.code(),
        Some(124),
        "job hung until the timeout: {se}"
    );
    assert!(se.contains("deliberate"), "{se}");
    assert!(
        t0.elapsed() < std::time::Duration::from_secs(30),
        "took {:?}",
        t0.elapsed()
    );
}

#[test]
fn a_selection_that_reaches_no_peer_says_so_in_plain_words() {
    let _g = serial();
    let out = run(
        2,
        60,
        &[("btl", "self"), ("mpi_yield_when_idle", "1")],
        PROG,
        &["ordering"],
    );
    let se = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "job succeeded: {se}");
    assert!(
        se.contains(
            "no BTL reaches rank 1 from rank 0 (btl selection: self; modules opened: self)"
        ),
        "{se}"
    );
    assert!(!se.contains("Include("), "a Rust debug form in: {se}");
}
