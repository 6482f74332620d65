//! Resource exhaustion across real processes under `tmpirun`: an eager
//! (and rendezvous) flood into a rank that does not receive, bounded by
//! `pml_ob1_unexpected_limit` (held messages and peak RSS checked against
//! the bound of `docs/reliability.md`); 100 000 outstanding requests; more
//! receives than the soft NIC's tag list holds. The floods are
//! `flood-check` runs (`src/bin/flood-check.rs`), the outstanding requests
//! a `fault-check` run, the last a `p2p-check` run.

use tmpi_tests::{assert_ok, run, serial};

const PROG: &str = env!("CARGO_BIN_EXE_fault-check");
/// Yield when idle: the tests run 2 busy ranks on 2 cores.
const BASE: [(&str, &str); 2] = [("btl", "self,sm"), ("mpi_yield_when_idle", "1")];

const FLOOD: &str = env!("CARGO_BIN_EXE_flood-check");

/// Runs `flood-check RNDV EAGER8 EAGER4K LIMIT` over `self,sm` with `mca`
/// added, checks its OK line and prints its figures.
fn flood(mca: &[(&str, &str)], counts: [&str; 3], limit: u64) {
    let mut m = BASE.to_vec();
    m.extend_from_slice(mca);
    let l = limit.to_string();
    let out = run(2, 240, &m, FLOOD, &[counts[0], counts[1], counts[2], &l]);
    assert_ok(&out, "flood-check: OK");
    let so = String::from_utf8_lossy(&out.stdout);
    for l in so.lines().filter(|l| l.contains("phase")) {
        eprintln!("exhaustion: {l}");
    }
}

/// Rank 0 floods rank 1, which posts no receive, with 500 unexpected
/// 64 KiB rendezvous messages, then 200 000 unexpected 8-byte and 10 000
/// 4 KiB eager messages, as non-blocking sends outstanding at once
/// (`flood-check`). Every message and the END after each phase arrive
/// (nothing is held back: MPI's progress rule); under the default
/// `pml_ob1_unexpected_limit` (4 MiB) the 4 KiB eager messages rank 1
/// holds charge at most 4 MiB (payload + 512 B each) and the rest went as
/// rendezvous (payload left at the sender); rank 1's peak RSS growth per
/// phase stays under 8 MiB + 512 B per message + the eager payload it may
/// hold; then every message is received in order and checked.
#[test]
fn eager_flood_into_a_rank_that_does_not_receive() {
    let _g = serial();
    flood(&[], ["500", "200000", "10000"], 4 << 20);
}

/// The bound is a parameter: `pml_ob1_unexpected_limit=64K` keeps at most
/// 14 of the 4 KiB messages eager at rank 1; `0` restores the unbounded
/// behaviour (every eager-sized message goes eager, none switches).
#[test]
fn unexpected_limit_is_a_parameter_and_zero_is_unbounded() {
    let _g = serial();
    flood(
        &[("pml_ob1_unexpected_limit", "64K")],
        ["300", "20000", "2000"],
        64 << 10,
    );
    flood(
        &[("pml_ob1_unexpected_limit", "0")],
        ["300", "20000", "2000"],
        0,
    );
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
