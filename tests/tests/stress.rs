//! The randomized traffic generator (`src/bin/stress.rs`) under `tmpirun`
//! over btl self,sm: a short run with 3 ranks passes its own checks
//! (checksums, exactly-once, non-overtaking, end-of-run counts,
//! collective results), one seed always gives the same traffic, and the
//! checks do fail when a message is lost, duplicated or corrupted.
//! `ci/stress.sh` runs it over every transport (docs/stress.md).

use tmpi_tests::{assert_ok, run, serial};

const PROG: &str = env!("CARGO_BIN_EXE_stress");
const BASE: [(&str, &str); 2] = [("btl", "self,sm"), ("mpi_yield_when_idle", "1")];

/// "messages N bytes B" of the OK line.
fn volume(stdout: &str) -> String {
    let ok = stdout
        .lines()
        .find(|l| l.starts_with("stress: OK"))
        .unwrap_or_else(|| panic!("no OK line: {stdout}"));
    let i = ok.find("messages ").expect("messages field");
    let j = ok[i..].find(" time").expect("time field");
    ok[i..i + j].to_string()
}

#[test]
fn short_stress_3_ranks_over_sm() {
    let _g = serial();
    let out = run(
        3,
        120,
        &BASE,
        PROG,
        &["--epochs", "5", "--msgs", "300", "--stall-seconds", "30"],
    );
    assert_ok(&out, "stress: OK");
    let so = String::from_utf8_lossy(&out.stdout);
    // Every feature was exercised at least once (the counters are sums
    // over the ranks of what their checks accepted).
    for f in [
        "wildcard receives 0,",
        "probes 0,",
        "mprobes 0,",
        "ssends 0,",
        "collectives 0;",
    ] {
        assert!(!so.contains(f), "nothing of {f:?}: {so}");
    }
    assert!(!volume(&so).starts_with("messages 0 "), "{so}");
}

#[test]
fn one_seed_one_traffic() {
    let _g = serial();
    let args = ["--seed", "4242", "--epochs", "2", "--msgs", "150"];
    let a = run(2, 120, &BASE, PROG, &args);
    assert_ok(&a, "stress: OK seed 4242 ");
    let b = run(2, 120, &BASE, PROG, &args);
    assert_ok(&b, "stress: OK seed 4242 ");
    assert_eq!(
        volume(&String::from_utf8_lossy(&a.stdout)),
        volume(&String::from_utf8_lossy(&b.stdout))
    );
}

/// The generator's self-test: a fault injected on purpose must fail the
/// job with the matching diagnosis.
#[test]
fn lost_duplicated_and_corrupted_messages_are_caught() {
    for (inject, expect) in [
        ("drop", &["no progress for 3 s (lost message or hang)"][..]),
        (
            "dup",
            &["DUPLICATE", "left over", "no message of this epoch"][..],
        ),
        ("corrupt", &["CHECKSUM mismatch"][..]),
    ] {
        let _g = serial();
        let out = run(
            3,
            60,
            &BASE,
            PROG,
            &[
                "--seed",
                "5",
                "--epochs",
                "2",
                "--msgs",
                "200",
                "--stall-seconds",
                "3",
                "--inject",
                inject,
            ],
        );
        let se = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{inject}: job succeeded: {se}");
        assert!(
            se.contains("stress FAILED (seed 5") && expect.iter().any(|e| se.contains(e)),
            "{inject}: expected one of {expect:?}: {se}"
        );
    }
}

/// Finding 4 of docs/journal/stress-soaks.md (fixed): over btl openib on
/// tmsoft0 with the registration cache off (`btl_openib_rcache_max_entries=0`,
/// the default), this seed made an RDMA read of a rendezvous fail
/// with `RemAccessErr`, then the job hung.
#[test]
fn openib_soft_rcache_off_rendezvous_reads_stay_valid() {
    let _g = serial();
    let mca = [
        ("btl", "self,openib"),
        ("btl_openib_if_include", "tmsoft0"),
        ("btl_openib_tm_enable", "1"),
        ("btl_openib_rcache_max_entries", "0"),
        ("mpi_yield_when_idle", "1"),
    ];
    let out = run(
        3,
        120,
        &mca,
        PROG,
        &[
            "--seed",
            "2478024960",
            "--epochs",
            "3",
            "--msgs",
            "2000",
            "--rndv-permille",
            "10",
            "--big-permille",
            "1",
            "--stall-seconds",
            "20",
        ],
    );
    let se = String::from_utf8_lossy(&out.stderr);
    assert!(!se.contains("RemAccessErr"), "{se}");
    assert_ok(&out, "stress: OK seed 2478024960 ");
}

/// The minimal form of finding 4: two rendezvous sends of one buffer at
/// once; the first FIN must not unpin the buffer the second still exports.
#[test]
fn openib_soft_two_sends_of_one_buffer() {
    let _g = serial();
    let prog = env!("CARGO_BIN_EXE_same-buffer-sends");
    for rc in ["0", "256"] {
        let mca = [
            ("btl", "self,openib"),
            ("btl_openib_if_include", "tmsoft0"),
            ("btl_openib_rcache_max_entries", rc),
            ("mpi_yield_when_idle", "1"),
        ];
        let out = run(2, 60, &mca, prog, &[]);
        assert_ok(&out, "same-buffer-sends: OK");
    }
}
