//! The PMI server with real rank processes: `tmpi-pmicheck` started four
//! times with `PMI_FD`/`PMI_RANK`/`PMI_SIZE`, the way `tmpirun` starts ranks.
//! Every test has a deadline after which the children are killed and the
//! test fails.

use std::io::Read;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use command_fds::{CommandFdExt, FdMapping};
use tmpi_base::pmi::encode_process_mapping;
use tmpi_run::pmi_server::{PmiEvent, PmiServer, ServerConfig, ServerHandle};

const DEADLINE: Duration = Duration::from_secs(60);
const CHILD_PMI_FD: i32 = 3;

struct Job {
    handle: ServerHandle,
    events: Receiver<PmiEvent>,
    children: Vec<Child>,
}

fn start_job(size: u32, args: &[&str], env: &[(&str, &str)]) -> Job {
    let cfg = ServerConfig {
        size,
        kvsname: format!("tmpi-procs-{}", std::process::id()),
        process_mapping: encode_process_mapping(&vec![0; size as usize]),
        appnum: 0,
        job_attrs: Vec::new(),
    };
    let (server, fds) = PmiServer::new(cfg.clone()).expect("server");
    let (handle, events) = server.spawn().expect("spawn server");
    let mut children = Vec::new();
    for (rank, fd) in fds.into_iter().enumerate() {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_tmpi-pmicheck"));
        cmd.args(args)
            .env_remove("PMI_JOBID")
            .env_remove("PMI_PORT")
            .env_remove("PMI_ID")
            .env_remove("TMPI_PMI_VERSION")
            .envs(cfg.rank_env(rank as u32, CHILD_PMI_FD))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for (k, v) in env {
            cmd.env(k, v);
        }
        cmd.fd_mappings(vec![FdMapping {
            parent_fd: fd,
            child_fd: CHILD_PMI_FD,
        }])
        .unwrap();
        children.push(cmd.spawn().expect("spawn tmpi-pmicheck"));
        // Dropping `cmd` closes the parent's copy of the child end.
    }
    Job {
        handle,
        events,
        children,
    }
}

struct Done {
    status: ExitStatus,
    stdout: String,
    stderr: String,
}

/// Waits for every child until the deadline; kills all and panics past it.
fn wait_all(children: &mut [Child]) -> Vec<Done> {
    let deadline = Instant::now() + DEADLINE;
    let mut statuses: Vec<Option<ExitStatus>> = vec![None; children.len()];
    while statuses.iter().any(Option::is_none) {
        for (c, s) in children.iter_mut().zip(statuses.iter_mut()) {
            if s.is_none() {
                *s = c.try_wait().expect("try_wait");
            }
        }
        if Instant::now() > deadline {
            for c in children.iter_mut() {
                let _ = c.kill();
                let _ = c.wait();
            }
            panic!("ranks still running after {DEADLINE:?}: {statuses:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    children
        .iter_mut()
        .zip(statuses)
        .map(|(c, s)| {
            let mut stdout = String::new();
            let mut stderr = String::new();
            c.stdout
                .take()
                .unwrap()
                .read_to_string(&mut stdout)
                .unwrap();
            c.stderr
                .take()
                .unwrap()
                .read_to_string(&mut stderr)
                .unwrap();
            Done {
                status: s.unwrap(),
                stdout,
                stderr,
            }
        })
        .collect()
}

/// Drains events until the server thread ends (all connections closed).
fn all_events(rx: &Receiver<PmiEvent>) -> Vec<PmiEvent> {
    let deadline = Instant::now() + DEADLINE;
    let mut got = Vec::new();
    loop {
        match rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok(e) => got.push(e),
            Err(RecvTimeoutError::Disconnected) => return got,
            Err(RecvTimeoutError::Timeout) => panic!("server did not finish; events {got:?}"),
        }
    }
}

fn successful_job(env: &[(&str, &str)], expect_version: &str) {
    let mut job = start_job(4, &["--long-len", "7000"], env);
    let done = wait_all(&mut job.children);
    for (r, d) in done.iter().enumerate() {
        assert!(
            d.status.success(),
            "rank {r}: {:?}\n{}\n{}",
            d.status,
            d.stdout,
            d.stderr
        );
        assert!(
            d.stdout
                .contains(&format!("rank {r}: ok (4 peers verified)")),
            "{}",
            d.stdout
        );
        assert!(
            d.stdout.contains(&format!("version={expect_version}")),
            "{}",
            d.stdout
        );
        assert!(d.stdout.contains("node=0 "), "{}", d.stdout);
        assert!(d.stdout.contains(&format!("local={r}/4")), "{}", d.stdout);
    }
    let ev = all_events(&job.events);
    for r in 0..4 {
        assert!(ev.contains(&PmiEvent::Initialized { rank: r }), "{ev:?}");
        assert!(ev.contains(&PmiEvent::Finalized { rank: r }), "{ev:?}");
        assert!(
            ev.contains(&PmiEvent::Disconnected {
                rank: r,
                finalized: true,
                active: true
            }),
            "{ev:?}"
        );
    }
    job.handle.shutdown();
}

#[test]
fn four_processes_pmi1() {
    successful_job(&[], "V1");
}

#[test]
fn four_processes_pmi2() {
    successful_job(&[("TMPI_PMI_VERSION", "2")], "V2");
}

#[test]
fn four_processes_pmi2_selected_by_pmi_jobid() {
    successful_job(&[("PMI_JOBID", "1234.0")], "V2");
}

#[test]
fn abort_reaches_the_server_and_no_rank_hangs() {
    let mut job = start_job(4, &["--abort", "7", "--abort-rank", "2", "--quiet"], &[]);
    let done = wait_all(&mut job.children);
    assert_eq!(done[2].status.code(), Some(7), "{}", done[2].stderr);
    // The others were waiting in a fence the aborting rank never entered:
    // the server fails that fence, so they end with an error, not a hang.
    for r in [0, 1, 3] {
        assert_eq!(
            done[r].status.code(),
            Some(1),
            "rank {r}: {}",
            done[r].stderr
        );
    }
    let ev = all_events(&job.events);
    let aborts: Vec<_> = ev
        .iter()
        .filter(|e| matches!(e, PmiEvent::Abort { .. }))
        .collect();
    assert_eq!(
        aborts,
        vec![&PmiEvent::Abort {
            rank: 2,
            code: 7,
            message: Some("tmpi-pmicheck --abort".into())
        }],
        "{ev:?}"
    );
    assert!(
        !ev.iter().any(|e| matches!(e, PmiEvent::Finalized { .. })),
        "{ev:?}"
    );
    job.handle.shutdown();
}

#[test]
fn exit_without_finalize_is_reported_as_active_disconnect() {
    let mut job = start_job(
        4,
        &["--exit-without-finalize", "--quiet"],
        &[("TMPI_PMI_VERSION", "2")],
    );
    let done = wait_all(&mut job.children);
    for d in &done {
        assert!(d.status.success(), "{}", d.stderr);
    }
    let ev = all_events(&job.events);
    for r in 0..4 {
        assert!(
            ev.contains(&PmiEvent::Disconnected {
                rank: r,
                finalized: false,
                active: true
            }),
            "{ev:?}"
        );
    }
    job.handle.shutdown();
}

#[test]
fn rank_without_pmi_use_is_an_idle_disconnect() {
    // A rank that exits before speaking PMI (bad usage -> exit 2).
    let mut job = start_job(1, &["--no-such-option"], &[]);
    let done = wait_all(&mut job.children);
    assert_eq!(done[0].status.code(), Some(2));
    let ev = all_events(&job.events);
    assert_eq!(
        ev,
        vec![PmiEvent::Disconnected {
            rank: 0,
            finalized: false,
            active: false
        }]
    );
    job.handle.shutdown();
}

fn run_alone(env: &[(&str, &str)]) -> std::process::Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_tmpi-pmicheck"));
    for v in [
        "PMI_FD",
        "PMI_PORT",
        "PMI_RANK",
        "PMI_SIZE",
        "PMI_JOBID",
        "PMI_ID",
        "TMPI_PMI_VERSION",
    ] {
        cmd.env_remove(v);
    }
    cmd.envs(env.iter().copied()).stdin(Stdio::null());
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + DEADLINE;
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("tmpi-pmicheck did not finish");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

#[test]
fn singleton_start_without_launcher() {
    let out = run_alone(&[]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("rank 0/1: "), "{stdout}");
    assert!(stdout.contains("version=Singleton"), "{stdout}");
    assert!(stdout.contains("rank 0: ok (1 peers verified)"), "{stdout}");
}

#[test]
fn bad_pmi_environment_fails_with_a_message() {
    for env in [
        &[
            ("PMI_FD", "not-a-number"),
            ("PMI_RANK", "0"),
            ("PMI_SIZE", "1"),
        ][..],
        &[("PMI_FD", "987"), ("PMI_RANK", "0"), ("PMI_SIZE", "1")],
        &[("PMI_PORT", "localhost:1"), ("PMI_ID", "0")],
        &[("TMPI_PMI_VERSION", "7")],
    ] {
        let out = run_alone(env);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{env:?}: {stderr}");
        assert!(
            stderr.contains("tmpi-pmicheck: connect: "),
            "{env:?}: {stderr}"
        );
    }
}
