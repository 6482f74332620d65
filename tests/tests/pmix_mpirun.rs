//! tmpi programs under Open MPI's `mpirun` (Debian 12: Open MPI 4.1, whose
//! ORTE serves PMIx 4.2 through libpmix): the ranks find each other through
//! tmpi's PMIx client. The PMI check (`tmpi-pmicheck`: identity, modex of
//! short and long values, a key never put) and the point-to-point checks
//! (`p2p-check`) over sm and tcp with 2 and 4 ranks; a rank that dies, a
//! rank that exits without finalize, and a missing libpmix end the job
//! with a non-zero status and a message instead of hanging.
//!
//! Needs Open MPI's mpirun (`ci/install-deps.sh` installs openmpi-bin):
//! `mpirun.openmpi` on PATH, or `$TMPI_TEST_OMPI_MPIRUN`.

use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use tmpi_tests::serial;

const P2P: &str = env!("CARGO_BIN_EXE_p2p-check");

/// Open MPI's mpirun: `$TMPI_TEST_OMPI_MPIRUN`, else `mpirun.openmpi`
/// (Debian's name, beside the `mpirun` alternative).
fn ompi_mpirun() -> PathBuf {
    if let Some(p) = std::env::var_os("TMPI_TEST_OMPI_MPIRUN") {
        return PathBuf::from(p);
    }
    let p = PathBuf::from("mpirun.openmpi");
    let ok = Command::new(&p).arg("--version").output().is_ok_and(|o| {
        let v = String::from_utf8_lossy(&o.stdout);
        v.contains("Open MPI") || v.contains("OpenRTE")
    });
    assert!(
        ok,
        "Open MPI's mpirun.openmpi is not on PATH: ci/install-deps.sh installs openmpi-bin \
         (or set TMPI_TEST_OMPI_MPIRUN)"
    );
    p
}

/// `tmpi-pmicheck` of the tmpi-run crate, built if the workspace build did
/// not build it.
fn pmicheck() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().unwrap().parent().unwrap().to_path_buf();
    let p = dir.join("tmpi-pmicheck");
    if !p.exists() {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let mut c = Command::new(cargo);
        c.args(["build", "-q", "-p", "tmpi-run", "--bin", "tmpi-pmicheck"]);
        if dir.file_name().is_some_and(|n| n == "release") {
            c.arg("--release");
        }
        assert!(c.status().unwrap().success(), "building tmpi-pmicheck");
    }
    p
}

/// Runs `prog args` under `mpirun -n n` with the environment `env` exported
/// to the ranks; mpirun's own `--timeout` ends a stuck job, and the test
/// kills mpirun itself 30 s later.
fn mpirun(n: u32, env: &[(&str, &str)], prog: &std::path::Path, args: &[&str]) -> Output {
    let secs = 120;
    let mut c = Command::new(ompi_mpirun());
    // Root in CI containers; 2 cores for up to 4 ranks.
    c.args(["--allow-run-as-root", "--oversubscribe"]).args([
        "-n",
        &n.to_string(),
        "--timeout",
        &secs.to_string(),
    ]);
    for (k, v) in env {
        c.arg("-x").arg(format!("{k}={v}"));
    }
    c.arg(prog)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = c.spawn().expect("start mpirun");
    let deadline = Instant::now() + Duration::from_secs(secs + 30);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let o = child.wait_with_output().unwrap();
            panic!(
                "mpirun -n {n} {} hung; stderr:\n{}",
                prog.display(),
                String::from_utf8_lossy(&o.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    child.wait_with_output().unwrap()
}

fn text(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

fn assert_ok(o: &Output, expect: &str) -> String {
    let (so, se) = text(o);
    assert!(
        o.status.success() && so.contains(expect),
        "job failed ({:?})\n--- stdout\n{so}\n--- stderr\n{se}",
        o.status
    );
    so
}

const YIELD: (&str, &str) = ("TMPI_MCA_mpi_yield_when_idle", "1");

#[test]
fn pmi_check_under_open_mpi_mpirun() {
    let _g = serial();
    for n in [1, 2, 4] {
        let o = mpirun(n, &[], &pmicheck(), &["--long-len", "100000"]);
        let so = assert_ok(&o, &format!("rank 0: ok ({n} peers verified)"));
        for r in 0..n {
            // Every rank came through PMIx, knows the job and its node.
            assert!(
                so.contains(&format!("rank {r}/{n}: ")),
                "rank {r} missing:\n{so}"
            );
            assert!(
                so.contains(&format!("local={r}/{n} ")),
                "local ranks on one host:\n{so}"
            );
        }
        assert_eq!(so.matches("version=Pmix").count(), n as usize, "{so}");
    }
}

#[test]
fn p2p_over_sm_under_open_mpi_mpirun() {
    let _g = serial();
    for (n, case) in [(2, "order"), (2, "big"), (4, "order"), (3, "cancel")] {
        let o = mpirun(
            n,
            &[("TMPI_MCA_btl", "self,sm"), YIELD],
            P2P.as_ref(),
            &[case],
        );
        assert_ok(&o, &format!("p2p-check {case}: OK ({n} ranks"));
    }
}

#[test]
fn p2p_over_tcp_under_open_mpi_mpirun() {
    let _g = serial();
    for (n, case) in [(2, "order"), (2, "big"), (4, "many")] {
        let o = mpirun(
            n,
            &[("TMPI_MCA_btl", "self,tcp"), YIELD],
            P2P.as_ref(),
            &[case],
        );
        assert_ok(&o, &format!("p2p-check {case}: OK ({n} ranks"));
    }
}

/// A rank that dies (panics) while the others wait for it: mpirun ends
/// the job with a non-zero status.
#[test]
fn a_rank_that_dies_ends_the_job() {
    let _g = serial();
    let o = mpirun(
        3,
        &[("TMPI_MCA_btl", "self,sm"), YIELD],
        P2P.as_ref(),
        &["panic"],
    );
    let (so, se) = text(&o);
    assert!(!o.status.success(), "exit 0\n{so}\n{se}");
    assert!(se.contains("deliberate"), "{se}");
}

/// A rank that exits with status 0 without finalizing is a failure to the
/// runtime (it called PMIx_Init).
#[test]
fn exit_without_finalize_is_a_failure() {
    let _g = serial();
    let o = mpirun(2, &[], &pmicheck(), &["--exit-without-finalize"]);
    let (so, se) = text(&o);
    assert!(!o.status.success(), "exit 0\n{so}\n{se}");
    assert!(so.contains("exiting without finalize"), "{so}");
}

/// Without libpmix every rank stops at start-up saying why and what to do.
#[test]
fn missing_libpmix_is_a_clear_error() {
    let _g = serial();
    let o = mpirun(
        2,
        &[("TMPI_PMIX_LIBRARY", "libpmix-missing.so.0")],
        &pmicheck(),
        &[],
    );
    let (so, se) = text(&o);
    assert!(!o.status.success(), "exit 0\n{so}\n{se}");
    assert!(
        se.contains("started by a PMIx launcher")
            && se.contains("libpmix-missing.so.0")
            && se.contains("libpmix2"),
        "{se}"
    );
}
