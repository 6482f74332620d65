//! Bad-argument property test (issue 10): `tests/c/badargs.c`, compiled
//! with the shipped `mpicc`, makes thousands of seeded random calls with
//! invalid arguments under `MPI_ERRORS_RETURN` and checks each returns an
//! error class the MPI standard allows for its invalid arguments (see the
//! program's header comment and `docs/reliability.md`). Several seeds, 1
//! and 3 ranks; the job must end with status 0 (no crash, no hang).
//!
//! Needs `tmpirun` built first: `cargo build -p tmpi-run` (CI does it).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// Lays out an install prefix (as `cargo xtask install`) next to the test
/// binary and compiles `badargs.c` with its `mpicc`; returns (prefix, exe).
fn build() -> (PathBuf, PathBuf) {
    let exe = std::env::current_exe().unwrap();
    let out = exe.parent().unwrap().parent().unwrap().to_path_buf();
    assert!(
        out.join("libmpi.so").exists() && out.join("tmpirun").exists(),
        "libmpi.so or tmpirun missing in {}: run `cargo build -p tmpi-run` first",
        out.display()
    );
    let dir = out.join("capi-badargs");
    let _ = std::fs::remove_dir_all(&dir);
    xtask::layout(&dir, &out, &root()).expect("lay out the install prefix");
    let prog = dir.join("badargs");
    let o = Command::new(dir.join("bin/mpicc"))
        .args(["-std=c99", "-Wall", "-Wextra", "-Werror", "-O1", "-o"])
        .arg(&prog)
        .arg(root().join("capi/tests/c/badargs.c"))
        .output()
        .expect("run mpicc");
    assert!(
        o.status.success(),
        "mpicc badargs.c failed:\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    (dir, prog)
}

fn run(prefix: &Path, prog: &Path, n: u32, seed: u64, calls: u32) -> String {
    let secs = 60;
    let mut child = Command::new(prefix.join("bin/mpirun"))
        .args(["-n", &n.to_string(), "--timeout", &secs.to_string()])
        .arg(prog)
        .args([seed.to_string(), calls.to_string()])
        .env_remove("LD_LIBRARY_PATH")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn mpirun");
    let deadline = Instant::now() + Duration::from_secs(secs + 15);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let o = child.wait_with_output().unwrap();
            panic!(
                "badargs seed {seed} with {n} ranks hung; stderr:\n{}",
                String::from_utf8_lossy(&o.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let o = child.wait_with_output().unwrap();
    let (so, se) = (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    );
    assert_eq!(
        o.status.code(),
        Some(0),
        "badargs seed {seed} with {n} ranks\nstdout:\n{so}\nstderr:\n{se}"
    );
    assert!(so.contains("badargs: OK"), "no OK:\n{so}\n{se}");
    so
}

#[test]
fn invalid_arguments_return_their_error_class() {
    let (prefix, prog) = build();
    for (n, seed) in [(1, 1u64), (3, 2), (2, 3), (1, 4)] {
        let so = run(&prefix, &prog, n, seed, 6000);
        // Every function and every class was exercised.
        let line = so
            .lines()
            .find(|l| l.contains("calls:"))
            .expect("no call counts");
        eprintln!("{line}");
        for f in [
            "MPI_Send ",
            "MPI_Comm_split ",
            "MPI_Type_vector ",
            "MPI_Reduce ",
        ] {
            let k = line.split(f).nth(1).and_then(|r| r.split(' ').next());
            let k: u64 = k.and_then(|k| k.parse().ok()).unwrap_or(0);
            assert!(k > 100, "{f}called {k} times: {line}");
        }
        let classes = so.lines().find(|l| l.contains("classes:")).unwrap();
        eprintln!("{classes}");
        // MPICH numbering: BUFFER 1, COUNT 2, TYPE 3, TAG 4, COMM 5, RANK 6,
        // ROOT 7, OP 9, ARG 12, REQUEST 19.
        for c in [1, 2, 3, 4, 5, 6, 7, 9, 12, 19] {
            assert!(
                classes.contains(&format!(" {c}:")),
                "class {c} never returned: {classes}"
            );
        }
    }
}
