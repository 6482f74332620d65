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
        .find(&format!(" {field}="))
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

/// Rank 0's `btl_tcp stats` line (stderr, `btl_tcp_stats=1`): the count
/// of fragments received in place.
fn placed(stderr: &str) -> u64 {
    let line = stderr
        .lines()
        .find(|l| l.starts_with("[rank 0 ") && l.contains("btl_tcp stats:"))
        .unwrap_or_else(|| panic!("no btl_tcp stats line of rank 0 in {stderr}"));
    let at = line
        .find(" fragments received in place")
        .unwrap_or_else(|| panic!("no in-place count in {line}"));
    line[..at]
        .rsplit(|c: char| !c.is_ascii_digit())
        .next()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("bad in-place count in {line}"))
}

#[test]
fn tcp_large_messages_around_fragment_boundaries_in_place_and_not() {
    // Receive in place (default), with small fragments (many per message,
    // so that every boundary case occurs), and with it off: the same bytes.
    let small = [("btl_tcp_max_send_size", "65600"), ("btl_tcp_stats", "1")];
    let chunk = (65_600 - 24).to_string();
    let _g = serial();
    for (n, extra, in_place) in [
        (4, &small[..], true),
        (3, &[("btl_tcp_stats", "1")][..], true),
        (
            2,
            &[
                ("btl_tcp_max_send_size", "65600"),
                ("btl_tcp_stats", "1"),
                ("btl_tcp_place_min", "0"),
            ][..],
            false,
        ),
    ] {
        let mut m = tcp_mca();
        m.extend_from_slice(extra);
        let big = extra.iter().all(|(k, _)| *k != "btl_tcp_max_send_size");
        // The default btl_tcp_max_send_size (512 KiB + 64) minus the pml's
        // FRAG header (24 bytes).
        let chunk = if big {
            (512 * 1024 + 64 - 24).to_string()
        } else {
            chunk.clone()
        };
        let out = run(n, 120, &m, PROG, &["frag_edges", &chunk]);
        assert_ok(&out, "p2p-check frag_edges: OK");
        let err = String::from_utf8_lossy(&out.stderr);
        let k = placed(&err);
        assert_eq!(k > 0, in_place, "{n} ranks {extra:?}: {k} placed\n{err}");
    }
}

#[test]
fn tcp_ssend_bsend_self_many_threads() {
    for c in ["ssend", "bsend", "self", "many", "threads"] {
        case(2, c, &[]);
    }
}

/// The `pml_peers` lines (stderr, `pml_stats=1`): per rank, BTL name →
/// peers it carried.
fn pml_peers(stderr: &str, n: u32) -> Vec<std::collections::HashMap<String, Vec<u32>>> {
    let mut per_rank = vec![None; n as usize];
    for line in stderr.lines().filter(|l| l.starts_with("pml_peers ")) {
        let mut fields = line["pml_peers ".len()..].split(' ');
        let rank: usize = fields
            .next()
            .and_then(|f| f.strip_prefix("rank="))
            .and_then(|r| r.parse().ok())
            .unwrap_or_else(|| panic!("bad line {line:?}"));
        let mut m = std::collections::HashMap::new();
        for f in fields {
            let (k, v) = f
                .split_once("=[")
                .unwrap_or_else(|| panic!("bad field {f:?} in {line:?}"));
            let v = v.strip_suffix(']').expect("]");
            let peers: Vec<u32> = v
                .split(',')
                .filter(|s| !s.is_empty())
                .map(|s| s.parse().expect("peer"))
                .collect();
            m.insert(k.to_string(), peers);
        }
        assert!(per_rank[rank].is_none(), "two lines for rank {rank}");
        per_rank[rank] = Some(m);
    }
    per_rank
        .into_iter()
        .enumerate()
        .map(|(r, m)| m.unwrap_or_else(|| panic!("no pml_peers line of rank {r}:\n{stderr}")))
        .collect()
}

#[test]
fn pml_peers_self_tcp_uses_tcp_for_every_other_rank() {
    let (_, err) = case(3, "order", &[("pml_stats", "1")]);
    for (r, m) in pml_peers(&err, 3).iter().enumerate() {
        let others: Vec<u32> = (0..3).filter(|&p| p != r as u32).collect();
        assert_eq!(m["self"], [r as u32], "rank {r}: {m:?}");
        assert_eq!(m["tcp"], others, "rank {r}: {m:?}");
        assert!(
            m["sm"].is_empty() && m["openib"].is_empty(),
            "rank {r}: {m:?}"
        );
    }
}

#[test]
fn pml_peers_default_on_one_node_uses_sm_not_tcp() {
    let _g = serial();
    let out = run(
        3,
        60,
        &[
            ("btl", "self,sm,tcp"),
            ("pml_stats", "1"),
            ("mpi_yield_when_idle", "1"),
        ],
        PROG,
        &["order"],
    );
    assert_ok(&out, "p2p-check order: OK");
    let err = String::from_utf8_lossy(&out.stderr);
    for (r, m) in pml_peers(&err, 3).iter().enumerate() {
        let others: Vec<u32> = (0..3).filter(|&p| p != r as u32).collect();
        assert_eq!(m["self"], [r as u32], "rank {r}: {m:?}");
        assert_eq!(m["sm"], others, "rank {r}: {m:?}");
        assert!(m["tcp"].is_empty(), "rank {r}: {m:?}");
    }
}

/// Rank 2 aborts mid-traffic (a rendezvous send to rank 1 under way) while
/// ranks 0 and 1 wait for a message from it with an MPI_ANY_SOURCE receive
/// and a rendezvous send to rank 2 pending: all three fail with
/// MPI_ERR_OTHER (the pml's ERROR line names the failed rank); an
/// MPI_ANY_SOURCE receive and a send to rank 2 issued afterwards fail at
/// once; tmpirun ends the job non-zero (rank 2's SIGABRT), well before its
/// --timeout.
#[test]
fn peer_abort_fails_pending_receives() {
    let _g = serial();
    let prog = env!("CARGO_BIN_EXE_tcp-peer-fail");
    let out = std::process::Command::new(tmpi_tests::tmpirun())
        .args(["-n", "3", "--timeout", "40", "--kill-grace", "10"])
        .args([
            "--mca",
            "btl",
            "self,tcp",
            "--mca",
            "mpi_yield_when_idle",
            "1",
        ])
        .arg(prog)
        .output()
        .expect("start tmpirun");
    let so = String::from_utf8_lossy(&out.stdout);
    let se = String::from_utf8_lossy(&out.stderr);
    eprintln!("--- stdout\n{so}\n--- stderr\n{se}");
    assert!(
        so.contains("tcp-peer-fail: rank 2 aborts"),
        "rank 2 did not get there"
    );
    for r in [0, 1] {
        let l = so
            .lines()
            .find(|l| {
                l.starts_with(&format!(
                    "tcp-peer-fail: rank {r}: receive from rank 2 failed:"
                ))
            })
            .unwrap_or_else(|| panic!("rank {r}'s receive did not fail"));
        assert!(l.contains("class Other"), "rank {r}: {l}");
        for what in [
            "pending any-source receive failed:",
            "rendezvous send to rank 2 failed:",
            "any-source receive failed:",
            "later send to rank 2 failed:",
        ] {
            assert!(
                so.contains(&format!("tcp-peer-fail: rank {r}: {what}")),
                "rank {r}: no {what:?}"
            );
        }
    }
    assert!(!so.contains("UNEXPECTED"), "a request completed");
    assert!(se.contains("rank 2 failed"), "no pml error line");
    assert!(!out.status.success(), "job exit {:?}", out.status);
    assert_ne!(out.status.code(), Some(124), "the job hung until --timeout");
}
