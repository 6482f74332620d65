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

fn run(n: u32) {
    let out = Command::new(tmpirun())
        .args([
            "-n",
            &n.to_string(),
            "--timeout",
            "120",
            "--mca",
            "mpi_yield_when_idle",
            "1",
            PROG,
            "check",
        ])
        .output()
        .expect("start tmpirun");
    let so = String::from_utf8_lossy(&out.stdout);
    let se = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && so.contains("coll-check check: OK"),
        "job failed ({:?})\n--- stdout\n{so}\n--- stderr\n{se}",
        out.status
    );
    // From 2 processes the large allgather/alltoall calls read the other
    // processes' buffers with process_vm_readv (sm's single copy).
    let want = if n > 1 { "on" } else { "unused" };
    assert!(
        so.contains(&format!("(sm single copy: {want})")),
        "single copy not {want}\n--- stdout\n{so}\n--- stderr\n{se}"
    );
}

#[test]
fn coll_check_one_process() {
    run(1);
}

#[test]
fn coll_check_three_and_four_processes() {
    run(3);
    run(4);
}
