//! btl-tcp inside the pml (issue 7): the point-to-point suite
//! (`src/bin/p2p-check.rs`) with `--mca btl self,tcp` on one node (every
//! message between two ranks crosses a loopback TCP connection, self-sends
//! go through btl-self), the BTL that carried each peer (`pml_peers` line),
//! and a peer that dies mid-traffic.

use tmpi_tests::{assert_ok, run, serial};

const PROG: &str = env!("CARGO_BIN_EXE_p2p-check");

fn tcp_mca() -> Vec<(&'static str, &'static str)> {
    vec![("btl", "self,tcp"), ("mpi_yield_when_idle", "1")]
}

fn case(n: u32, name: &str, extra: &[(&str, &str)]) -> (String, String) {
    let _g = serial();
    let mut m = tcp_mca();
    m.extend_from_slice(extra);
    let out = run(n, 60, &m, PROG, &[name]);
    assert_ok(&out, &format!("p2p-check {name}: OK"));
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A field of rank 0's pml counters printed by p2p-check.
fn stat(out: &str, field: &str) -> u64 {
    let at = out
        .find(&format!("{field}: "))
        .unwrap_or_else(|| panic!("no {field} in {out}"));
    out[at + field.len() + 2..]
        .split(|c: char| !c.is_ascii_digit())
        .next()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("bad {field} in {out}"))
}

#[test]
fn tcp_ordering_with_wildcards_2_and_4_ranks() {
    case(2, "order", &[]);
    case(4, "order", &[]);
}

#[test]
fn tcp_probe_cancel_truncate_zero() {
    for c in ["probe", "cancel", "truncate", "zero"] {
        case(2, c, &[]);
    }
    case(4, "cancel", &[]);
    case(4, "probe", &[]);
}

#[test]
fn tcp_rendezvous_is_pipelined() {
    // tcp has no RDMA get: every rendezvous takes the send/pipeline path.
    for extra in [&[][..], &[("pml_eager_limit", "512")][..]] {
        let (out, _) = case(2, "big", extra);
        assert!(stat(&out, "rndv_pipelined") > 0, "not pipelined: {out}");
        assert_eq!(stat(&out, "rndv_get"), 0, "RDMA get over tcp: {out}");
    }
    case(4, "big", &[]);
}

#[test]
fn tcp_ssend_bsend_self_many_threads() {
    for c in ["ssend", "bsend", "self", "many", "threads"] {
        case(2, c, &[]);
    }
}
