//! The one-sided traffic generator (`src/bin/stress-rma.rs`) under
//! `tmpirun`: short runs pass their own checks (every rank's windows
//! against the model, gets, counters, compare-and-swap races, range
//! errors) over btl self,sm (1 and 3 ranks) and self,tcp (4 ranks),
//! exercising every synchronisation mode and operation kind; one seed
//! always gives the same plan; and the checks do fail when a put's data is
//! corrupted or a rank stops inside an epoch. `ci/stress.sh` runs it over
//! every transport (the `rma-*` runs, docs/stress.md).

use tmpi_tests::{assert_ok, run, serial};

const PROG: &str = env!("CARGO_BIN_EXE_stress-rma");

fn mca(btl: &str) -> [(&str, &str); 2] {
    [("btl", btl), ("mpi_yield_when_idle", "1")]
}

/// The OK line's "operations N bytes B".
fn volume(stdout: &str) -> String {
    let ok = stdout
        .lines()
        .find(|l| l.starts_with("stress-rma: OK"))
        .unwrap_or_else(|| panic!("no OK line: {stdout}"));
    let i = ok.find("operations ").expect("operations field");
    let j = ok[i..].find(" time").expect("time field");
    ok[i..i + j].to_string()
}

fn short(n: u32, btl: &str, epochs: &str) {
    let _g = serial();
    let out = run(
        n,
        120,
        &mca(btl),
        PROG,
        &["--epochs", epochs, "--stall-seconds", "30"],
    );
    assert_ok(&out, "stress-rma: OK");
    let so = String::from_utf8_lossy(&out.stdout);
    assert!(so.contains("windows 3 (Vec,Shared,Allocated)"), "{so}");
    // Every kind of operation and synchronisation was planned (and so
    // checked) at least once.
    for f in [
        "puts 0,",
        "put-flush-gets 0,",
        "gets 0,",
        "accumulates 0,",
        "fetch-ops 0,",
        "compare-and-swaps 0,",
        "zero-length 0,",
        "out-of-range 0;",
        "fence 0,",
        "lock 0,",
        "lock_all 0,",
        "pscw 0;",
        "flushes 0",
    ] {
        assert!(!so.contains(f), "nothing of {f:?}: {so}");
    }
}

#[test]
fn short_rma_stress_3_ranks_over_sm() {
    short(3, "self,sm", "40");
}

#[test]
fn short_rma_stress_1_rank() {
    short(1, "self,sm", "40");
}

#[test]
fn short_rma_stress_4_ranks_over_tcp() {
    short(4, "self,tcp", "25");
}

#[test]
fn one_seed_one_plan() {
    let _g = serial();
    let args = ["--seed", "4242", "--epochs", "8"];
    let a = run(2, 120, &mca("self,sm"), PROG, &args);
    assert_ok(&a, "stress-rma: OK seed 4242 ");
    let b = run(2, 120, &mca("self,sm"), PROG, &args);
    assert_ok(&b, "stress-rma: OK seed 4242 ");
    assert_eq!(
        volume(&String::from_utf8_lossy(&a.stdout)),
        volume(&String::from_utf8_lossy(&b.stdout))
    );
}

/// The generator's self-test: a corrupted put must fail the target's
/// check naming seed, epoch, origin, target and offset; a rank stopping
/// inside epoch 0 must make the watchdog name the epoch.
#[test]
fn corrupted_put_and_stalled_rank_are_caught() {
    for (inject, expect) in [
        (
            "corrupt",
            &["MISMATCH after epoch 0 window", "by origin 1 to target"][..],
        ),
        ("stall", &["no progress for 3 s (hang) while epoch 0"][..]),
    ] {
        let _g = serial();
        let out = run(
            3,
            60,
            &mca("self,sm"),
            PROG,
            &[
                "--seed",
                "5",
                "--epochs",
                "3",
                "--stall-seconds",
                "3",
                "--inject",
                inject,
            ],
        );
        let se = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{inject}: job succeeded: {se}");
        assert!(
            se.contains("stress-rma FAILED (seed 5") && expect.iter().all(|e| se.contains(e)),
            "{inject}: expected all of {expect:?}: {se}"
        );
    }
}
