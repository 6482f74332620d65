//! Helpers of tmpi's multi-process integration tests: find (or build)
//! `tmpirun` and run a program under it with a timeout; and [`check`], the
//! helpers the check programs (`src/bin/`) share.

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

/// What the check programs run by the tests (`src/bin/*.rs`) share: their
/// result type, failure messages and output lines.
pub mod check {
    use std::io::Write;

    /// A check's outcome; `Err` is the message printed before the program
    /// exits non-zero.
    pub type R = Result<(), String>;

    /// An MPI error as a check failure message.
    pub fn e(x: tmpi::Error) -> String {
        x.to_string()
    }

    /// Prints `line` to stdout and flushes it at once (tmpirun tags and
    /// forwards lines; a rank killed later must not lose what it said).
    pub fn say(line: &str) {
        let mut o = std::io::stdout().lock();
        let _ = writeln!(o, "{line}");
        let _ = o.flush();
    }

    /// A field of `/proc/self/status` in bytes (`VmHWM`, `VmRSS`).
    pub fn status_bytes(field: &str) -> Result<u64, String> {
        let s = std::fs::read_to_string("/proc/self/status").map_err(|x| x.to_string())?;
        s.lines()
            .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
            .and_then(|v| v.trim().strip_suffix("kB")?.trim().parse::<u64>().ok())
            .map(|kb| kb * 1024)
            .ok_or_else(|| format!("no {field} in /proc/self/status"))
    }
}

/// Returns `Err(format!(...))` from the enclosing function (a check
/// returning [`check::R`]) when the condition is false.
#[macro_export]
macro_rules! ensure {
    ($c:expr, $($f:tt)*) => {
        if !$c {
            return Err(format!($($f)*));
        }
    };
}
