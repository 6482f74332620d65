//! Resource exhaustion across real processes under `tmpirun`: an eager
//! (and rendezvous) flood into a rank that does not receive, with its peak
//! RSS checked against the bound of `docs/reliability.md`; 100 000
//! outstanding requests; more receives than the soft NIC's tag list holds.
//! The first two are `fault-check` runs (`src/bin/fault-check.rs`), the
//! last a `p2p-check` run.

use tmpi_tests::{assert_ok, run, serial};

const PROG: &str = env!("CARGO_BIN_EXE_fault-check");
/// Yield when idle: the tests run 2 busy ranks on 2 cores.
const BASE: [(&str, &str); 2] = [("btl", "self,sm"), ("mpi_yield_when_idle", "1")];

/// Rank 0 floods rank 1 (which only waits for a final message) with
/// 2000 unexpected 64 KiB rendezvous messages, then 200 000 unexpected
/// 8-byte eager ones; rank 1 checks its peak RSS growth against the bounds
/// of docs/reliability.md, then receives and checks everything in order.
#[test]
fn eager_flood_into_a_rank_that_does_not_receive() {
    let _g = serial();
    let out = run(2, 240, &BASE, PROG, &["flood", "200000"]);
    assert_ok(&out, "fault-check flood: OK");
    let so = String::from_utf8_lossy(&out.stdout);
    for l in so.lines().filter(|l| l.contains("flood")) {
        eprintln!("faults: {l}");
    }
}

/// 100 000 receives posted at once, matched by 100 000 non-blocking sends
/// outstanding at once: all complete with the right payloads.
#[test]
fn hundred_thousand_outstanding_requests() {
    let _g = serial();
    let out = run(2, 240, &BASE, PROG, &["outstanding", "100000"]);
    assert_ok(&out, "fault-check outstanding: OK");
    let so = String::from_utf8_lossy(&out.stdout);
    for l in so.lines().filter(|l| l.contains("outstanding")) {
        eprintln!("faults: {l}");
    }
}

/// 10 000 receives posted at once (each waiting for its own tag, the sends
/// come in reverse tag order) against a soft NIC tag list of 8 entries with
/// tag matching on: the list is full almost all the time, the receives
/// that do not fit stay in software, and every one completes with its own
/// payload (`p2p-check many`). The pml counters show both kinds of match.
/// (`openib_soft::tm_on_tight_nic_list_and_stale_sync_reading` runs the
/// order/cancel/big cases against a 4-entry list.)
#[test]
fn more_receives_than_the_nic_tag_list_holds() {
    let _g = serial();
    let m = [
        ("btl", "self,openib"),
        ("btl_openib_if_include", "tmsoft0"),
        ("btl_openib_tm_enable", "1"),
        ("btl_openib_tmsoft_max_num_tags", "8"),
        ("pml_tm_thresh", "0"),
        ("pml_stats", "1"),
        ("mpi_yield_when_idle", "1"),
    ];
    let out = run(2, 60, &m, env!("CARGO_BIN_EXE_p2p-check"), &["many"]);
    assert_ok(&out, "p2p-check many: OK");
    let se = String::from_utf8_lossy(&out.stderr);
    for r in 0..2 {
        let line = se
            .lines()
            .find(|l| l.starts_with(&format!("pml_stats rank={r} ")))
            .unwrap_or_else(|| panic!("no pml_stats line of rank {r}:\n{se}"));
        eprintln!("exhaustion: {line}");
        let f = |k: &str| -> u64 {
            line.split_whitespace()
                .find_map(|w| w.strip_prefix(&format!("{k}=")))
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| panic!("no {k} in {line}"))
        };
        assert!(f("offloaded") > 0, "nothing went to the NIC: {line}");
        assert!(f("sw_matches") > 0, "nothing matched in software: {line}");
        assert!(
            f("nic_matches") + f("sw_matches") >= 10_000,
            "fewer matches than receives: {line}"
        );
    }
}
