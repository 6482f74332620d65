//! The PMI client under MPICH's Hydra (`mpiexec.hydra`, Debian package
//! `mpich`): `mpiexec.hydra -n 4 tmpi-pmicheck`.
//!
//! Without Hydra these tests are skipped with a message on stderr, unless
//! `TMPI_TEST_REQUIRE_HYDRA=1`, which makes them fail instead (CI sets it).
//! Every run has a deadline after which the process group is killed and the
//! test fails.

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

const DEADLINE: Duration = Duration::from_secs(90);

/// The Hydra launcher, or `None` (skip) when it is not installed.
fn hydra() -> Option<PathBuf> {
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join("mpiexec.hydra"))
            .find(|p| p.is_file())
    });
    if found.is_none() {
        if std::env::var("TMPI_TEST_REQUIRE_HYDRA").as_deref() == Ok("1") {
            panic!("mpiexec.hydra not found in PATH but TMPI_TEST_REQUIRE_HYDRA=1 (install the Debian package mpich)");
        }
        eprintln!("SKIPPED: mpiexec.hydra not found in PATH (install the Debian package mpich; set TMPI_TEST_REQUIRE_HYDRA=1 to make this a failure)");
    }
    found
}

struct Run {
    status: ExitStatus,
    stdout: String,
    stderr: String,
}

/// Runs `mpiexec.hydra -n 4 [genv] tmpi-pmicheck args`, in its own process
/// group so that a hang can be cleaned up completely.
/// Hydra option selecting its TCP transport (`PMI_PORT`/`PMI_ID`).
const PMI_PORT: (&str, &str) = ("-pmi-port", "");

fn run_hydra(hydra: &PathBuf, genv: &[(&str, &str)], args: &[&str]) -> Run {
    let mut cmd = Command::new(hydra);
    for (k, v) in genv {
        if (*k, *v) == PMI_PORT {
            cmd.arg(k);
            continue;
        }
        cmd.args(["-genv", k, v]);
    }
    cmd.args(["-n", "4"])
        .arg(env!("CARGO_BIN_EXE_tmpi-pmicheck"))
        .args(args)
        .env_remove("PMI_FD")
        .env_remove("PMI_JOBID")
        .env_remove("TMPI_PMI_VERSION")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    let mut child = cmd.spawn().expect("spawn mpiexec.hydra");
    let pgid = child.id();
    // Read the pipes on threads so a chatty job cannot block on a full pipe.
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let t_out = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        s
    });
    let t_err = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let deadline = Instant::now() + DEADLINE;
    let status = loop {
        if let Some(s) = child.try_wait().expect("try_wait") {
            break s;
        }
        if Instant::now() > deadline {
            // Kill the whole group: mpiexec, its proxy and the ranks.
            let _ = Command::new("kill")
                .args(["-KILL", "--", &format!("-{pgid}")])
                .status();
            let _ = child.wait();
            panic!("mpiexec.hydra did not finish within {DEADLINE:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Run {
        status,
        stdout: t_out.join().unwrap(),
        stderr: t_err.join().unwrap(),
    }
}

/// Pids that the ranks wrote with `--pid-dir`.
fn rank_pids(dir: &std::path::Path) -> Vec<u32> {
    (0..4)
        .filter_map(|r| std::fs::read_to_string(dir.join(format!("rank-{r}.pid"))).ok())
        .filter_map(|p| p.trim().parse().ok())
        .collect()
}

/// Whether `pid` still runs (a zombie waiting to be reaped does not count).
fn running(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => false,
        Ok(stat) => {
            // State is the field after the parenthesised command name.
            let state = stat
                .rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().next());
            !matches!(state, Some("Z") | Some("X"))
        }
    }
}

fn check_success(genv: &[(&str, &str)], version: &str) {
    let Some(hydra) = hydra() else { return };
    let r = run_hydra(&hydra, genv, &["--long-len", "5000"]);
    assert!(
        r.status.success(),
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        r.status,
        r.stdout,
        r.stderr
    );
    for rank in 0..4 {
        assert!(
            r.stdout
                .contains(&format!("rank {rank}: ok (4 peers verified)")),
            "rank {rank} did not verify:\n{}\n{}",
            r.stdout,
            r.stderr
        );
        assert!(
            r.stdout.contains(&format!("rank {rank}/4: ")),
            "{}",
            r.stdout
        );
    }
    assert_eq!(
        r.stdout.matches(&format!("version={version}")).count(),
        4,
        "{}",
        r.stdout
    );
    // Hydra runs all four on this host: one node.
    assert_eq!(r.stdout.matches(" node=0 ").count(), 4, "{}", r.stdout);
}

#[test]
fn hydra_pmi1_four_ranks() {
    check_success(&[], "V1");
}

#[test]
fn hydra_pmi2_four_ranks() {
    check_success(&[("TMPI_PMI_VERSION", "2")], "V2");
}

#[test]
fn hydra_pmi_port_mode_pmi1() {
    check_success(&[PMI_PORT], "V1");
}

#[test]
fn hydra_pmi_port_mode_pmi2() {
    check_success(&[PMI_PORT, ("TMPI_PMI_VERSION", "2")], "V2");
}

#[test]
fn hydra_abort_ends_the_job_with_the_code() {
    let Some(hydra) = hydra() else { return };
    let dir = std::env::temp_dir().join(format!("tmpi-hydra-abort-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let dir_arg = dir.to_str().unwrap().to_string();
    let r = run_hydra(
        &hydra,
        &[],
        &["--abort", "7", "--abort-rank", "1", "--pid-dir", &dir_arg],
    );
    assert_eq!(
        r.status.code(),
        Some(7),
        "stdout:\n{}\nstderr:\n{}",
        r.stdout,
        r.stderr
    );
    // (The aborting rank's stderr line is not checked: Hydra may exit before
    // its proxy forwards it.)
    assert!(
        !r.stdout.contains(": ok"),
        "a rank finished despite the abort:\n{}",
        r.stdout
    );
    let pids = rank_pids(&dir);
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(
        pids.len(),
        4,
        "every rank writes its pid before the abort:\n{}",
        r.stdout
    );
    // Hydra kills the ranks as it exits; give the kernel a moment.
    let deadline = Instant::now() + Duration::from_secs(10);
    while pids.iter().any(|&p| running(p)) {
        assert!(
            Instant::now() < deadline,
            "rank processes survive the abort: {pids:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}
