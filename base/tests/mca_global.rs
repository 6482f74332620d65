//! The process-wide registry (`mca::registry`, `mca::init`,
//! `mca::check_unknown`) reading the real process environment. Each case
//! re-runs this test binary as a child with a controlled environment, so
//! the parent's environment is never mutated.

use std::path::PathBuf;
use std::process::Command;

use tmpi_base::mca::{self, encode_cmdline, ParamSpec, CMDLINE_ENV};

const ROLE: &str = "TMPI_TEST_GLOBAL_ROLE";

/// Runs in the child: prints what the global registry resolved. Ignored in
/// normal runs: only the parent test starts it (with `--ignored`).
#[test]
#[ignore = "helper run in a child process by global_registry_reads_the_process_environment"]
fn child() {
    let role = std::env::var(ROLE).expect("started by the parent test");
    match mca::init() {
        Ok(reg) => {
            let p = reg
                .register_size(ParamSpec::new("btl", "sm", "fifo_size"), 4096)
                .unwrap();
            let q = reg
                .register_int(ParamSpec::new("btl", "sm", "priority"), 1)
                .unwrap();
            println!("fifo_size={} source={}", p.value(), p.source().kind());
            println!("priority={} source={}", q.value(), q.source().kind());
            println!("yield={}", mca::yield_when_idle(reg).unwrap());
            assert!(std::ptr::eq(reg, mca::registry()));
            let unknown = mca::check_unknown();
            println!("unknown={}", unknown.len());
        }
        Err(e) => println!("init error: {e}"),
    }
    println!("role={role}");
}

fn scratch(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("tmpi-mca-global-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn run_child(home: &PathBuf, prefix: &PathBuf, vars: &[(&str, &str)]) -> (String, String) {
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "child",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env_clear()
        .env(ROLE, "child")
        .env("HOME", home)
        .env("TMPI_PREFIX", prefix)
        .envs(vars.iter().copied())
        .output()
        .unwrap();
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn global_registry_reads_the_process_environment() {
    let home = scratch("home");
    let prefix = scratch("prefix");
    std::fs::create_dir_all(home.join(".tmpi")).unwrap();
    std::fs::create_dir_all(prefix.join("etc")).unwrap();
    std::fs::write(home.join(".tmpi/mca-params.conf"), "btl_sm_priority = 9\n").unwrap();
    std::fs::write(
        prefix.join("etc/tmpi-mca-params.conf"),
        "btl_sm_priority = 3\nbtl_sm_fifo_size = 1K\n",
    )
    .unwrap();
    let cmd = encode_cmdline(&[("btl_sm_fifo_size".into(), "2M".into())]);
    let (out, err) = run_child(
        &home,
        &prefix,
        &[
            (CMDLINE_ENV, &cmd),
            ("TMPI_MCA_btl_sm_fifo_size", "8K"),
            ("TMPI_MCA_btl_sm_prio", "5"),
            ("TMPI_LAUNCH_OVERSUBSCRIBED", "1"),
        ],
    );
    assert!(
        out.contains("role=child"),
        "child did not run: {out}\n{err}"
    );
    assert!(out.contains("fifo_size=2097152 source=cmdline"), "{out}");
    assert!(out.contains("priority=9 source=user-file"), "{out}");
    assert!(out.contains("yield=true"), "{out}");
    assert!(out.contains("unknown=1"), "{out}");
    assert!(
        err.contains("btl_sm_prio") && err.contains("did you mean btl_sm_priority"),
        "{err}"
    );

    // A malformed user file makes init() fail, naming file and line.
    std::fs::write(home.join(".tmpi/mca-params.conf"), "\n\nbroken\n").unwrap();
    let (out, _) = run_child(&home, &prefix, &[]);
    assert!(out.contains("init error:"), "{out}");
    assert!(out.contains("mca-params.conf:3:"), "{out}");

    let _ = std::fs::remove_dir_all(home);
    let _ = std::fs::remove_dir_all(prefix);
}
