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
