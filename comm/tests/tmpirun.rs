//! `coll-check` as separate processes under `tmpirun` (timeout enforced by
//! tmpirun's `--timeout` and by this test's wait).

use std::path::PathBuf;
use std::process::Command;

const PROG: &str = env!("CARGO_BIN_EXE_coll-check");

/// `tmpirun` next to this test's profile directory, built if missing.
fn tmpirun() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    let dir = exe
        .parent()
        .and_then(|d| d.parent())
        .expect("target/<profile>")
        .to_path_buf();
    let p = dir.join("tmpirun");
    if !p.exists() {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let st = Command::new(cargo)
            .args(["build", "-q", "-p", "tmpi-run", "--bin", "tmpirun"])
            .status()
            .expect("cargo build tmpirun");
        assert!(st.success());
    }
    p
}

/// Runs `coll-check check` on `n` processes with `mca` parameters and
/// checks how sm's single copy moved the large blocks.
fn run(n: u32, mca: &[(&str, &str)], want: &str) {
    let mut args = vec![
        "-n".to_string(),
        n.to_string(),
        "--timeout".into(),
        "120".into(),
        "--mca".into(),
        "mpi_yield_when_idle".into(),
        "1".into(),
    ];
    for (k, v) in mca {
        args.extend(["--mca".to_string(), k.to_string(), v.to_string()]);
    }
    args.extend([PROG.to_string(), "check".into()]);
    let out = Command::new(tmpirun())
        .args(&args)
        .output()
        .expect("start tmpirun");
    let so = String::from_utf8_lossy(&out.stdout);
    let se = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && so.contains("coll-check check: OK"),
        "job failed ({:?})\n--- stdout\n{so}\n--- stderr\n{se}",
        out.status
    );
    assert!(
        so.contains(&format!("(sm single copy: {want})")),
        "single copy not {want}\n--- stdout\n{so}\n--- stderr\n{se}"
    );
}

#[test]
fn coll_check_one_process() {
    run(1, &[], "unused");
}

/// From 2 processes the large allgather/alltoall calls read the other
/// processes' buffers (sm's single copy): up to `coll_sm_splice_max_ranks`
/// ranks (default 2) through a pipe per pair (vmsplice, the read ends
/// taken with pidfd_getfd), else with process_vm_readv.
#[test]
fn coll_check_two_three_and_four_processes() {
    run(2, &[], "on through pipes");
    run(3, &[("coll_sm_splice_max_ranks", "3")], "on through pipes");
    run(4, &[], "on");
}

/// Blocking reduces of 64 KiB between 2 processes (btl-sm, whose
/// cooperative copy the root may decline, `tmpi_coll::reduce_copy`): every
/// result exact, and both ways taken (each way's first figure is dropped,
/// so calls 0-1 copy with the sender's help and calls 2-3 alone; later
/// calls follow the timings, the other way once every 128).
#[test]
fn reduces_copy_with_the_senders_help_or_alone_with_exact_results() {
    let out = Command::new(tmpirun())
        .args(["-n", "2", "--timeout", "120", PROG, "reduce-copy", "40"])
        .output()
        .expect("start tmpirun");
    let so = String::from_utf8_lossy(&out.stdout);
    let se = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "job failed ({:?})\n{so}\n{se}",
        out.status
    );
    let alone: u64 = so
        .split("coll-check reduce-copy: OK (40 calls, ")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .and_then(|a| a.parse().ok())
        .unwrap_or_else(|| panic!("no result line\n{so}\n{se}"));
    assert!((2..=38).contains(&alone), "{alone} of 40 calls alone\n{so}");
}
