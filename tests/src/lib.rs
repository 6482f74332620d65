//! Helpers of tmpi's multi-process integration tests: find (or build)
//! `tmpirun` and run a program under it with a timeout.

use std::path::PathBuf;
use std::process::{Command, Output};
use std::sync::{Mutex, MutexGuard, OnceLock};

/// Jobs of one test binary run one at a time: the machine has 2 cores and
/// every rank busy-polls (yielding), so parallel jobs only slow each other.
pub fn serial() -> MutexGuard<'static, ()> {
    static M: Mutex<()> = Mutex::new(());
    M.lock().unwrap_or_else(|p| p.into_inner())
}

/// The target directory of the current test executable
/// (`target/<profile>`).
fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    // target/<profile>/deps/<test-binary>
    exe.parent()
        .and_then(|d| d.parent())
        .map(PathBuf::from)
        .expect("test binary lives in target/<profile>/deps")
}

/// Path of `tmpirun`, building it with cargo if the workspace build did not
/// (running `cargo test -p tmpi-tests` alone).
pub fn tmpirun() -> PathBuf {
    static P: OnceLock<PathBuf> = OnceLock::new();
    P.get_or_init(|| {
        let p = profile_dir().join("tmpirun");
        if !p.exists() {
            let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
            let mut c = Command::new(cargo);
            c.args(["build", "-q", "-p", "tmpi-run", "--bin", "tmpirun"]);
            if profile_dir().file_name().is_some_and(|n| n == "release") {
                c.arg("--release");
            }
            let st = c.status().expect("run cargo to build tmpirun");
            assert!(st.success(), "building tmpirun failed");
        }
        p
    })
    .clone()
}

/// Runs `prog args` under `tmpirun -n n --timeout timeout_s` with the MCA
/// settings `mca` (pairs), and returns its output.
pub fn run(n: u32, timeout_s: u32, mca: &[(&str, &str)], prog: &str, args: &[&str]) -> Output {
    let mut c = Command::new(tmpirun());
    c.arg("-n")
        .arg(n.to_string())
        .arg("--timeout")
        .arg(timeout_s.to_string());
    for (k, v) in mca {
        c.args(["--mca", k, v]);
    }
    c.arg(prog).args(args);
    c.output().expect("start tmpirun")
}

/// Asserts the job succeeded and rank 0 printed `expect`; prints the
/// output on failure.
pub fn assert_ok(out: &Output, expect: &str) {
    let so = String::from_utf8_lossy(&out.stdout);
    let se = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && so.contains(expect),
        "job failed ({:?})\n--- stdout\n{so}\n--- stderr\n{se}",
        out.status
    );
}
