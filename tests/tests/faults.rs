//! Faults and resource exhaustion across real processes under `tmpirun`
//! (btl self,sm; some over self,tcp): a rank killed with SIGKILL
//! mid-traffic, a tcp connection reset while both ends live, a rank
//! returning from main without finalize (the resource-exhaustion cases are in
//! `exhaustion.rs`). Each case is a `fault-check` run
//! (`src/bin/fault-check.rs`); what each test proves is listed in
//! `docs/reliability.md`.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use tmpi_tests::{serial, tmpirun};

const PROG: &str = env!("CARGO_BIN_EXE_fault-check");
/// Yield when idle: the tests run 2-4 busy ranks on 2 cores.
const BASE: [(&str, &str); 2] = [("btl", "self,sm"), ("mpi_yield_when_idle", "1")];

/// A marker unique to one job, put in the environment of `tmpirun` (and
/// so of every rank and of anything they start).
fn marker() -> String {
    let ns = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!("{}-{ns}", std::process::id())
}

const MARKER_VAR: &str = "TMPI_FAULTS_MARKER";

/// Pids of live (non-zombie) processes whose environment holds the marker.
fn processes_with_marker(m: &str) -> Vec<u32> {
    let needle = format!("{MARKER_VAR}={m}");
    let mut found = Vec::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return found;
    };
    for ent in dir.flatten() {
        let Some(pid) = ent.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(env) = std::fs::read(ent.path().join("environ")) else {
            continue;
        };
        if env.split(|&b| b == 0).any(|kv| kv == needle.as_bytes()) {
            found.push(pid);
        }
    }
    found
}

/// A private `TMPDIR` for one job: its session directory is then out of
/// reach of the stale-session sweep of the other tmpiruns on this machine,
/// so that what removes it can only be the job's own clean-up.
fn private_tmpdir(m: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("tmpi-faults-{m}"));
    std::fs::create_dir_all(&d).expect("private TMPDIR");
    d
}

/// `tmpirun` started with piped output and the marker in its environment.
fn spawn_job(n: u32, timeout_s: u32, m: &str, args: &[&str]) -> Child {
    spawn_job_btl(n, timeout_s, m, "self,sm", args)
}

/// [`spawn_job`] over the BTLs `btl`.
fn spawn_job_btl(n: u32, timeout_s: u32, m: &str, btl: &str, args: &[&str]) -> Child {
    spawn_job_mca(n, timeout_s, m, btl, &[], args)
}

/// [`spawn_job_btl`] with more MCA parameters.
fn spawn_job_mca(
    n: u32,
    timeout_s: u32,
    m: &str,
    btl: &str,
    extra: &[(&str, &str)],
    args: &[&str],
) -> Child {
    let mut c = Command::new(tmpirun());
    c.args(["-n", &n.to_string(), "--timeout", &timeout_s.to_string()]);
    for (k, v) in BASE {
        let v = if k == "btl" { btl } else { v };
        c.args(["--mca", k, v]);
    }
    for (k, v) in extra {
        c.args(["--mca", k, v]);
    }
    c.arg(PROG)
        .args(args)
        .env(MARKER_VAR, m)
        .env("TMPDIR", private_tmpdir(m))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start tmpirun")
}

/// Waits for `child` at most `limit`; kills it and panics when it hangs.
fn wait_bounded(child: &mut Child, limit: Duration, what: &str) -> std::process::ExitStatus {
    let t0 = Instant::now();
    loop {
        if let Some(st) = child.try_wait().expect("try_wait") {
            return st;
        }
        if t0.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what}: tmpirun still running after {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Asserts nothing of the job survived: no process with its marker, no
/// session directory, no shared-memory segment with its job id.
fn assert_no_leftovers(m: &str, job: &str, session_dir: &str) {
    // Processes killed by SIGKILL may need a moment to be reaped by the
    // kernel after tmpirun saw them exit; they are never waited on longer.
    let t0 = Instant::now();
    let mut left = processes_with_marker(m);
    while !left.is_empty() && t0.elapsed() < Duration::from_secs(2) {
        std::thread::sleep(Duration::from_millis(20));
        left = processes_with_marker(m);
    }
    assert!(left.is_empty(), "processes of the job remain: {left:?}");
    assert!(
        job.starts_with("tmpi-") && job.len() > 10,
        "bad job id {job:?}"
    );
    assert!(
        !session_dir.is_empty() && !Path::new(session_dir).exists(),
        "session directory {session_dir:?} left behind"
    );
    let segs: Vec<String> = std::fs::read_dir("/dev/shm")
        .map(|d| {
            d.flatten()
                .filter_map(|e| e.file_name().into_string().ok())
                .filter(|n| n.contains(job))
                .collect()
        })
        .unwrap_or_default();
    assert!(segs.is_empty(), "segments of {job} left: {segs:?}");
    let _ = std::fs::remove_dir(private_tmpdir(m));
}

/// A `fault-check traffic` job whose ranks all announced their traffic.
struct Traffic {
    child: Child,
    err_t: std::thread::JoinHandle<String>,
    out_t: std::thread::JoinHandle<()>,
    /// Rank -> pid.
    pids: BTreeMap<u32, u32>,
    job: String,
    dir: String,
}

/// Reads a job's stderr to the end on one thread and passes its stdout
/// lines through a channel on another, so that waiting for a line is
/// bounded (`recv_timeout`).
fn read_output(
    child: &mut Child,
) -> (
    std::thread::JoinHandle<String>,
    std::thread::JoinHandle<()>,
    mpsc::Receiver<String>,
) {
    let mut err = child.stderr.take().unwrap();
    let err_t = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let out = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel::<String>();
    let out_t = std::thread::spawn(move || {
        for l in BufReader::new(out).lines().map_while(Result::ok) {
            let _ = tx.send(l);
        }
    });
    (err_t, out_t, rx)
}

impl Traffic {
    /// Reads the job's output until its `n` ranks said they are running
    /// (kills the job and panics with its stderr after `wait`).
    fn until_running(mut child: Child, n: u32, wait: Duration) -> Traffic {
        let (err_t, out_t, rx) = read_output(&mut child);
        let mut pids = BTreeMap::new();
        let (mut job, mut dir) = (String::new(), String::new());
        let deadline = Instant::now() + wait;
        while pids.len() < n as usize {
            let left = deadline.saturating_duration_since(Instant::now());
            let Ok(l) = rx.recv_timeout(left) else {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "traffic did not start on all ranks ({pids:?}); stderr:\n{}",
                    err_t.join().unwrap()
                );
            };
            let w: Vec<&str> = l.split_whitespace().collect();
            match w.as_slice() {
                ["fault-check:", "rank", r, "pid", p, "running"] => {
                    pids.insert(r.parse::<u32>().unwrap(), p.parse::<u32>().unwrap());
                }
                ["fault-check:", "job", j, d] => {
                    job = j.to_string();
                    dir = d.to_string();
                }
                _ => {}
            }
        }
        Traffic {
            child,
            err_t,
            out_t,
            pids,
            job,
            dir,
        }
    }

    /// Waits at most `limit` for tmpirun to exit: its status, the time from
    /// this call, its stderr, the job id and the session directory.
    fn end(
        mut self,
        limit: Duration,
        what: &str,
    ) -> (std::process::ExitStatus, Duration, String, String, String) {
        let t0 = Instant::now();
        let status = wait_bounded(&mut self.child, limit, what);
        let took = t0.elapsed();
        let se = self.err_t.join().unwrap();
        self.out_t.join().unwrap();
        (status, took, se, self.job, self.dir)
    }
}

/// A rank killed with SIGKILL while all four exchange eager and rendezvous
/// traffic: tmpirun exits non-zero (137) within 5 s, names the rank, and
/// leaves no process, no segment and no session directory.
#[test]
fn sigkill_mid_traffic_ends_job_and_cleans_up() {
    sigkill_mid_traffic("self,sm");
}

/// The same over `--mca btl self,tcp`: the killed rank's TCP connections
/// are reset under the peers' traffic (that the peers' pending requests
/// fail is `tcp.rs::peer_abort_fails_pending_receives`); the job ends the
/// same way.
#[test]
fn sigkill_mid_traffic_over_tcp_ends_job_and_cleans_up() {
    sigkill_mid_traffic("self,tcp");
}

fn sigkill_mid_traffic(btl: &str) {
    let _g = serial();
    let m = marker();
    let child = spawn_job_btl(4, 120, &m, btl, &["traffic"]);
    let t = Traffic::until_running(child, 4, Duration::from_secs(90));
    let victim = t.pids[&2];
    assert!(
        processes_with_marker(&m).contains(&victim),
        "the marker scan does not see rank 2 (pid {victim})"
    );
    assert!(
        Path::new(&t.dir).is_dir(),
        "session dir {:?} not there",
        t.dir
    );
    let st = Command::new("sh")
        .arg("-c")
        .arg(format!("kill -9 {victim}"))
        .status()
        .expect("run kill");
    assert!(st.success(), "kill -9 {victim} failed");
    let (status, took, se, job, dir) = t.end(Duration::from_secs(15), "after SIGKILL");
    eprintln!("faults: {btl}: SIGKILL of rank 2 to tmpirun exit: {took:?}");
    assert_eq!(status.code(), Some(137), "exit status; stderr:\n{se}");
    assert!(
        se.contains(&format!("rank 2 (pid {victim}) was killed by SIGKILL")),
        "stderr does not name the dead rank:\n{se}"
    );
    // Far below the job's --timeout, not a speed target (a busy machine
    // must not fail it): the fault handling ended the job, not the timeout.
    assert!(
        took < Duration::from_secs(30),
        "tmpirun took {took:?} to end the job"
    );
    assert_no_leftovers(&m, &job, &dir);
}

/// Fragments rank 0 sends to rank 1 before it resets their connection
/// (`btl_tcp_inject_reset`): well after every rank announced its traffic
/// (iteration 40 of the ring, about 60 fragments).
const RESET_AFTER: &str = "400";

/// A tcp connection reset with both ends alive, over `--mca btl self,tcp`:
/// rank 0 aborts its connection to rank 1 with an RST after 400 fragments
/// (`btl_tcp_inject_reset=400`, `btl_tcp_inject_reset_rank=0`) mid-traffic.
/// Both ends log one ERROR line naming the other rank and the cause, their
/// requests fail with `MPI_ERR_OTHER` (`fault-check` then exits 1), the job
/// ends with status 1 within 5 s of the traffic being under way, tmpirun
/// names rank 0 or 1, and nothing of the job remains.
#[test]
fn tcp_reset_with_peer_alive_ends_job_and_cleans_up() {
    tcp_reset_mid_traffic(2);
}

/// The same with 3 ranks: rank 2, not part of the reset, is ended with the
/// job (its peers' connections close under it) and nothing hangs.
#[test]
fn tcp_reset_with_peer_alive_three_ranks() {
    tcp_reset_mid_traffic(3);
}

fn tcp_reset_mid_traffic(n: u32) {
    let _g = serial();
    let m = marker();
    let child = spawn_job_mca(
        n,
        60,
        &m,
        "self,tcp",
        &[
            ("btl_tcp_inject_reset", RESET_AFTER),
            ("btl_tcp_inject_reset_rank", "0"),
        ],
        &["traffic"],
    );
    let t = Traffic::until_running(child, n, Duration::from_secs(60));
    let pids = t.pids.clone();
    let (status, took, se, job, dir) = t.end(Duration::from_secs(30), "after the reset");
    eprintln!("faults: tcp reset, {n} ranks: traffic under way to tmpirun exit: {took:?}");
    assert_ne!(
        status.code(),
        Some(124),
        "the job hung until --timeout:\n{se}"
    );
    assert_eq!(status.code(), Some(1), "exit status; stderr:\n{se}");
    // Far below the job's --timeout (see above), not a speed target.
    assert!(
        took < Duration::from_secs(30),
        "tmpirun took {took:?}:\n{se}"
    );
    // The injecting end: one line naming rank 1 and the injected reset.
    let line_of = |who: u32, peer: u32| -> Vec<&str> {
        let head = format!("[rank {who}] btl_tcp: ERROR connection to rank {peer} (");
        se.lines().filter(|l| l.starts_with(&head)).collect()
    };
    let l0 = line_of(0, 1);
    assert_eq!(l0.len(), 1, "rank 0's line about rank 1:\n{se}");
    assert!(
        l0[0].contains(&format!(
            "failed: connection reset by this process (fault injection \
             btl_tcp_inject_reset={RESET_AFTER}"
        )),
        "{}",
        l0[0]
    );
    // The reset end: rank 1 saw the RST (not an orderly EOF) from rank 0.
    let l1 = line_of(1, 0);
    assert_eq!(l1.len(), 1, "rank 1's line about rank 0:\n{se}");
    assert!(l1[0].contains("reset by peer"), "{}", l1[0]);
    // The requests failed with an MPI error, and tmpirun names the rank
    // that exited because of it.
    let named: Vec<u32> = (0..2)
        .filter(|r| {
            se.contains(&format!(
                "tmpirun: rank {r} (pid {}) exited with status 1",
                pids[r]
            ))
        })
        .collect();
    assert_eq!(named.len(), 1, "tmpirun names rank 0 or 1:\n{se}");
    assert!(
        se.contains(&format!(
            "fault-check traffic: rank {} FAILED: MPI_ERR_OTHER",
            named[0]
        )),
        "rank {}'s request did not fail with MPI_ERR_OTHER:\n{se}",
        named[0]
    );
    assert!(!se.contains("panicked"), "{se}");
    assert_no_leftovers(&m, &job, &dir);
}

/// A rank that returns from main without finalizing while the others are
/// blocked in a receive from it: the job ends with status 1 and a message
/// naming it; nothing hangs or remains.
#[test]
fn return_without_finalize_ends_job() {
    let _g = serial();
    let m = marker();
    let t0 = Instant::now();
    let mut child = spawn_job(4, 60, &m, &["nofinalize"]);
    let status = wait_bounded(&mut child, Duration::from_secs(75), "nofinalize");
    let took = t0.elapsed();
    let mut so = String::new();
    let mut se = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut so)
        .unwrap();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut se)
        .unwrap();
    eprintln!("faults: job with a rank returning without finalize ended in {took:?}");
    assert!(
        so.contains("rank 1 returns from main without finalize"),
        "rank 1 did not get there:\n{so}\n{se}"
    );
    assert_ne!(
        status.code(),
        Some(124),
        "the job hung until --timeout:\n{se}"
    );
    assert_eq!(status.code(), Some(1), "exit status:\n{so}\n{se}");
    assert!(
        se.contains("rank 1 (pid") && se.contains("without finalizing"),
        "no message naming rank 1:\n{se}"
    );
    assert!(
        !so.contains("UNEXPECTED") && !so.contains("fault-check nofinalize: OK"),
        "a peer's receive completed:\n{so}"
    );
    assert!(took < Duration::from_secs(30), "took {took:?}");
    assert!(
        processes_with_marker(&m).is_empty(),
        "processes of the job remain"
    );
    let _ = std::fs::remove_dir(private_tmpdir(&m));
}

/// Rank 0 killed with SIGKILL while it waits in init for rank 1 (which
/// sleeps before initializing): its btl-sm segment
/// `/dev/shm/tmpi-sm.<job>.0` is still linked (a segment is unlinked only
/// when every peer attached), so only `tmpirun`'s cleanup can remove it.
/// The job ends (137, rank 0 named), the sleeping rank 1 is ended too, and
/// neither the segment nor the session directory nor a process remains.
#[test]
fn sigkill_before_peers_attached_removes_the_segment() {
    let _g = serial();
    let m = marker();
    let mut child = spawn_job(2, 60, &m, &["lateinit"]);
    let (err_t, out_t, rx) = read_output(&mut child);
    let (mut pid0, mut job, mut dir) = (0u32, String::new(), String::new());
    let deadline = Instant::now() + Duration::from_secs(30);
    while pid0 == 0 {
        let left = deadline.saturating_duration_since(Instant::now());
        let Ok(l) = rx.recv_timeout(left) else {
            let _ = child.kill();
            let _ = child.wait();
            panic!("rank 0 did not start; stderr:\n{}", err_t.join().unwrap());
        };
        let w: Vec<&str> = l.split_whitespace().collect();
        if let ["fault-check:", "early", "rank", "0", "pid", p, "job", j, d] = w.as_slice() {
            pid0 = p.parse().unwrap();
            job = j.to_string();
            dir = d.to_string();
        }
    }
    let seg = format!("/dev/shm/tmpi-sm.{job}.0");
    let t0 = Instant::now();
    while !Path::new(&seg).exists() {
        if t0.elapsed() > Duration::from_secs(20) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{seg} never appeared");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(Path::new(&dir).is_dir(), "session dir {dir:?} not there");
    let st = Command::new("sh")
        .arg("-c")
        .arg(format!("kill -9 {pid0}"))
        .status()
        .expect("run kill");
    let t1 = Instant::now();
    assert!(st.success(), "kill -9 {pid0} failed");
    let status = wait_bounded(&mut child, Duration::from_secs(15), "after SIGKILL");
    let took = t1.elapsed();
    let se = err_t.join().unwrap();
    out_t.join().unwrap();
    eprintln!("faults: SIGKILL of rank 0 in init to tmpirun exit: {took:?}");
    assert_eq!(status.code(), Some(137), "exit status; stderr:\n{se}");
    assert!(
        se.contains(&format!("rank 0 (pid {pid0}) was killed by SIGKILL")),
        "stderr does not name the dead rank:\n{se}"
    );
    // Far below the job's --timeout, not a speed target.
    assert!(took < Duration::from_secs(30), "took {took:?}");
    assert!(!Path::new(&seg).exists(), "{seg} left behind");
    assert_no_leftovers(&m, &job, &dir);
}

/// A completion error on the soft NIC `tmsoft0` (`--mca btl self,openib`,
/// fault injection `btl_openib_tmsoft_inject_error=read:1`): the
/// receiver's rendezvous read fails, its receive fails with
/// `MPI_ERR_OTHER` (`openib-fault` prints it and exits 3), the job ends
/// with status 3 well before its timeout and no process of it remains.
/// (`openib_soft.rs` checks the same with TM on and the eager-send case.)
#[test]
fn soft_nic_completion_error_ends_the_job_cleanly() {
    let _g = serial();
    let m = marker();
    let t0 = Instant::now();
    let mut child = Command::new(tmpirun())
        .args(["-n", "2", "--timeout", "60"])
        .args(["--mca", "btl", "self,openib"])
        .args(["--mca", "btl_openib_if_include", "tmsoft0"])
        .args(["--mca", "btl_openib_tm_enable", "0"])
        .args(["--mca", "btl_openib_tmsoft_inject_error", "read:1"])
        .args(["--mca", "mpi_yield_when_idle", "1"])
        .arg(env!("CARGO_BIN_EXE_openib-fault"))
        .args(["1048576", "100"])
        .env(MARKER_VAR, &m)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start tmpirun");
    let status = wait_bounded(&mut child, Duration::from_secs(75), "completion error");
    let took = t0.elapsed();
    let mut so = String::new();
    let mut se = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut so)
        .unwrap();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut se)
        .unwrap();
    eprintln!("faults: job with an injected completion error ended in {took:?}");
    assert!(
        so.contains("rank 1 recv error class=MPI_ERR_OTHER"),
        "the receive did not fail:\n{so}\n{se}"
    );
    assert!(!so.contains("recv ok"), "{so}\n{se}");
    assert!(se.contains("injected completion error"), "{se}");
    assert_eq!(status.code(), Some(3), "exit status:\n{so}\n{se}");
    assert!(took < Duration::from_secs(30), "took {took:?}");
    let t1 = Instant::now();
    let mut left = processes_with_marker(&m);
    while !left.is_empty() && t1.elapsed() < Duration::from_secs(2) {
        std::thread::sleep(Duration::from_millis(20));
        left = processes_with_marker(&m);
    }
    assert!(left.is_empty(), "processes of the job remain: {left:?}");
    let _ = std::fs::remove_dir(private_tmpdir(&m));
}

/// Files of a job whose name holds `needle`, in `/dev/shm`.
fn shm_files_with(needle: &str) -> Vec<String> {
    std::fs::read_dir("/dev/shm")
        .map(|d| {
            d.flatten()
                .filter_map(|e| e.file_name().into_string().ok())
                .filter(|n| n.contains(needle))
                .collect()
        })
        .unwrap_or_default()
}

/// Waits for a bounded time until a line of `rx` parses with `f`; kills
/// the job and panics with its stderr otherwise.
fn wait_line<T>(
    child: &mut Child,
    rx: &mpsc::Receiver<String>,
    err_t: std::thread::JoinHandle<String>,
    f: impl Fn(&[&str]) -> Option<T>,
) -> (T, std::thread::JoinHandle<String>) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let Ok(l) = rx.recv_timeout(left) else {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "the expected line never came; stderr:\n{}",
                err_t.join().unwrap()
            );
        };
        let w: Vec<&str> = l.split_whitespace().collect();
        if let Some(t) = f(&w) {
            return (t, err_t);
        }
    }
}

/// Waits (bounded) until `cond` holds; kills the job and panics otherwise.
fn wait_until(child: &mut Child, what: &str, cond: impl Fn() -> bool) {
    let t0 = Instant::now();
    while !cond() {
        if t0.elapsed() > Duration::from_secs(30) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what} never happened");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// coll sm's segment of a job whose rank dies before every rank attached
/// it (`fault-check collearly`: rank 0 and 1 in their first allreduce, the
/// last rank 60 s late; rank 0 is killed with SIGKILL): the job's clean-up
/// knows the segment and removes it, with everything else of the job.
#[test]
fn coll_segment_is_removed_when_the_job_ends_before_all_ranks_attached() {
    let _g = serial();
    let m = marker();
    let mut child = spawn_job(3, 60, &m, &["collearly"]);
    let (err_t, out_t, rx) = read_output(&mut child);
    let ((pid0, job, dir), err_t) = wait_line(&mut child, &rx, err_t, |w| match w {
        ["fault-check:", "coll", "rank", "0", "pid", p, "job", j, d] => {
            Some((p.parse::<u32>().unwrap(), j.to_string(), d.to_string()))
        }
        _ => None,
    });
    let coll = format!("tmpi-coll.{pid0}.");
    wait_until(&mut child, "coll sm's segment of rank 0", || {
        !shm_files_with(&coll).is_empty()
    });
    let st = Command::new("kill")
        .args(["-9", &pid0.to_string()])
        .status()
        .expect("run kill");
    assert!(st.success(), "kill -9 {pid0} failed");
    let status = wait_bounded(&mut child, Duration::from_secs(15), "after SIGKILL");
    let se = err_t.join().unwrap();
    out_t.join().unwrap();
    assert_eq!(status.code(), Some(137), "exit status; stderr:\n{se}");
    let left = shm_files_with(&coll);
    assert!(left.is_empty(), "coll sm's segment left behind: {left:?}");
    assert_no_leftovers(&m, &job, &dir);
}

/// Kills `tmpirun` itself with SIGKILL and waits until the job is gone:
/// its ranks die with it, and what they and tmpirun created on disk is
/// removed once the last of them is gone, without a later tmpirun.
fn kill_tmpirun_and_check_nothing_is_left(mut child: Child, m: &str, job: &str, dir: &str) {
    let tmpirun_pid = child.id();
    let st = Command::new("kill")
        .args(["-9", &tmpirun_pid.to_string()])
        .status()
        .expect("run kill");
    assert!(st.success(), "kill -9 {tmpirun_pid} failed");
    let _ = wait_bounded(&mut child, Duration::from_secs(15), "tmpirun after SIGKILL");
    // Not a measurement: a bound so that a leftover fails the test rather
    // than hanging it.
    let t0 = Instant::now();
    while (!processes_with_marker(m).is_empty()
        || Path::new(dir).exists()
        || !shm_files_with(job).is_empty())
        && t0.elapsed() < Duration::from_secs(30)
    {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_no_leftovers(m, job, dir);
}

/// `tmpirun` killed with SIGKILL while its ranks are in init, rank 0's
/// btl-sm segment in `/dev/shm` and rank 1 not yet attached
/// (`fault-check lateinit`): the ranks end, and the session directory and
/// the segment are removed.
#[test]
fn sigkill_of_tmpirun_during_init_leaves_nothing() {
    let _g = serial();
    let m = marker();
    let mut child = spawn_job(2, 60, &m, &["lateinit"]);
    let (err_t, out_t, rx) = read_output(&mut child);
    let ((job, dir), err_t) = wait_line(&mut child, &rx, err_t, |w| match w {
        ["fault-check:", "early", "rank", "0", "pid", _, "job", j, d] => {
            Some((j.to_string(), d.to_string()))
        }
        _ => None,
    });
    let seg = format!("/dev/shm/tmpi-sm.{job}.0");
    wait_until(&mut child, "rank 0's segment", || Path::new(&seg).exists());
    kill_tmpirun_and_check_nothing_is_left(child, &m, &job, &dir);
    let _ = err_t.join();
    let _ = out_t.join();
}

/// `tmpirun` killed with SIGKILL while its two ranks exchange traffic
/// (`fault-check traffic`): the ranks end, and the session directory is
/// removed.
#[test]
fn sigkill_of_tmpirun_mid_run_leaves_nothing() {
    let _g = serial();
    let m = marker();
    let child = spawn_job(2, 60, &m, &["traffic"]);
    let t = Traffic::until_running(child, 2, Duration::from_secs(60));
    assert!(
        Path::new(&t.dir).is_dir(),
        "session dir {:?} not there",
        t.dir
    );
    let (job, dir) = (t.job.clone(), t.dir.clone());
    let Traffic {
        child,
        err_t,
        out_t,
        ..
    } = t;
    kill_tmpirun_and_check_nothing_is_left(child, &m, &job, &dir);
    let _ = err_t.join();
    let _ = out_t.join();
}

/// A tcp connection broken in the middle of large messages (`fault-check
/// bigsend`: 16 MiB messages from rank 0 to rank 1; rank 0 resets the
/// connection after 300 fragments, `btl_tcp_inject_reset`): every fragment
/// still queued for rank 1 fails, but rank 0's pml logs the broken
/// connection once with its cause and then only counts (at 10, 100, ...),
/// not one line per fragment; the job ends with status 1.
#[test]
fn broken_connection_under_a_large_message_is_logged_once() {
    let _g = serial();
    let m = marker();
    let mut child = spawn_job_mca(
        2,
        60,
        &m,
        "self,tcp",
        &[
            ("btl_tcp_inject_reset", "300"),
            ("btl_tcp_inject_reset_rank", "0"),
        ],
        &["bigsend"],
    );
    let (err_t, out_t, _rx) = read_output(&mut child);
    let status = wait_bounded(&mut child, Duration::from_secs(90), "bigsend");
    let se = err_t.join().unwrap();
    out_t.join().unwrap();
    assert_eq!(status.code(), Some(1), "exit status; stderr:\n{se}");
    let pml0: Vec<&str> = se
        .lines()
        .filter(|l| l.starts_with("[rank 0] pml_ob1: ERROR"))
        .collect();
    let first: Vec<&&str> = pml0
        .iter()
        .filter(|l| l.contains("send to rank 1 failed, connection broken: "))
        .collect();
    assert_eq!(first.len(), 1, "rank 0's pml lines:\n{}", pml0.join("\n"));
    assert!(
        first[0].contains("btl_tcp_inject_reset=300"),
        "the cause is missing: {}",
        first[0]
    );
    // The rest are counts at powers of ten: a handful however many
    // fragments were queued.
    assert!(
        pml0.len() <= 4
            && pml0.iter().all(|l| l.contains("send to rank 1 failed")
                || l.contains("transfers with rank 1 have failed on its broken connection so far")),
        "rank 0's pml lines:\n{}",
        pml0.join("\n")
    );
    let _ = std::fs::remove_dir(private_tmpdir(&m));
}

/// Rank 1 of `fault-check peerdeath` (or `peerdeath-coll`) runs under a
/// shell that outlives it: tmpirun keeps the job (and rank 1's PMI
/// connection) up after rank 1's process died, as a launcher that does not
/// end a job on a rank's death would, so only the library can free rank 0.
fn peer_death(btl: &str, case: &str) {
    let (status, so, se) = run_with_dying_rank_1(btl, case);
    assert_ne!(
        status.code(),
        Some(124),
        "{case} over {btl} hung:\n{so}\n{se}"
    );
    assert!(so.contains("fault-check: rank 1 dies now"), "{so}\n{se}");
    assert!(
        so.contains("fault-check: rank 0 receive from rank 1: failed: MPI_ERR_OTHER"),
        "{so}\n{se}"
    );
    assert!(
        so.contains("fault-check: rank 0 allreduce: failed: MPI_ERR_OTHER"),
        "{so}\n{se}"
    );
    assert_eq!(status.code(), Some(3), "{so}\n{se}");
}

/// Runs `fault-check CASE` on 2 ranks over `btl`, rank 1 under a shell
/// that outlives it (see [`peer_death`]); returns the job's status, stdout
/// and stderr once it ended, after checking that none of its processes
/// remain.
fn run_with_dying_rank_1(btl: &str, case: &str) -> (std::process::ExitStatus, String, String) {
    let _g = serial();
    let m = marker();
    let script = r#"if [ "$PMI_RANK" = 1 ]; then "$@"; sleep 300; else exec "$@"; fi"#;
    let mut c = Command::new(tmpirun());
    c.args(["-n", "2", "--timeout", "60"]);
    for (k, v) in BASE {
        let v = if k == "btl" { btl } else { v };
        c.args(["--mca", k, v]);
    }
    let child = c
        .args(["sh", "-c", script, "sh", PROG, case])
        .env(MARKER_VAR, &m)
        .env("TMPDIR", private_tmpdir(&m))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start tmpirun");
    // The job's own --timeout (60 s) is the hang detector; this bound only
    // keeps the test from waiting past it.
    let mut child = child;
    let (err_t, out_t, rx) = read_output(&mut child);
    let status = wait_bounded(&mut child, Duration::from_secs(90), case);
    let se = err_t.join().unwrap();
    out_t.join().unwrap();
    let so: Vec<String> = rx.try_iter().collect();
    let t0 = Instant::now();
    while !processes_with_marker(&m).is_empty() && t0.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        processes_with_marker(&m).is_empty(),
        "processes of the job remain"
    );
    let _ = std::fs::remove_dir(private_tmpdir(&m));
    (status, so.join("\n"), se)
}

/// A rank that dies (SIGKILL) while its peer waits in a receive from it,
/// over sm: shared memory does not break, so btl-sm watches its peers'
/// processes and reports the dead one to the pml, which fails the receive
/// and every later call that needs the dead rank (here an allreduce) with
/// `MPI_ERR_OTHER`; nothing waits forever. (Before: the job hung until its
/// timeout.)
#[test]
fn a_dead_peer_fails_the_calls_waiting_for_it_over_sm() {
    peer_death("self,sm", "peerdeath");
}

/// The same when coll sm's segment was attached before the death (a first
/// allreduce of both ranks): the allreduce through the segment fails too,
/// naming the dead rank, instead of waiting for its flag forever.
#[test]
fn a_dead_peer_fails_a_shared_memory_collective() {
    peer_death("self,sm", "peerdeath-coll");
}

/// Over tcp the dead rank's connection breaks; the same calls fail.
#[test]
fn a_dead_peer_fails_the_calls_waiting_for_it_over_tcp() {
    peer_death("self,tcp", "peerdeath");
}

/// A rank that dies inside RMA epochs (`fault-check rmadeath`): it held a
/// shared lock on its peer's window, and its peer holds an exclusive lock on
/// its window with a put to flush. The flush, the unlock and a fence of the
/// survivor end (the flush and the fence failing with `MPI_ERR_OTHER`), over
/// sm and tcp: nothing waits forever for the dead target's replies.
#[test]
fn a_rank_dying_inside_an_rma_epoch_fails_its_peers_rma_calls() {
    for btl in ["self,sm", "self,tcp"] {
        let (status, so, se) = run_with_dying_rank_1(btl, "rmadeath");
        assert_ne!(
            status.code(),
            Some(124),
            "rmadeath over {btl} hung:\n{so}\n{se}"
        );
        assert!(
            so.contains("fault-check: rank 0 first epoch on rank 1: flushed"),
            "{so}\n{se}"
        );
        assert!(
            so.contains("fault-check: rank 1 dies now, inside a lock epoch"),
            "{so}\n{se}"
        );
        for call in ["flush", "fence"] {
            assert!(
                so.contains(&format!(
                    "fault-check: rank 0 {call} towards the dead rank: failed: MPI_ERR_OTHER"
                )),
                "{call} over {btl}:\n{so}\n{se}"
            );
        }
        assert!(
            so.contains("fault-check: rank 0 unlock towards the dead rank:"),
            "{so}\n{se}"
        );
        assert_eq!(status.code(), Some(3), "over {btl}:\n{so}\n{se}");
    }
}

/// `tmpirun` killed with SIGKILL while each rank has a background child
/// (`sh -c 'sleep 300 & exec fault-check traffic'`): the ranks die with
/// `tmpirun`, but their children do not get that signal and hold the clean-up
/// guard's pipe. The guard sees `tmpirun` gone, ends the processes that
/// carry the job's `TMPI_JOB_ID`, and removes the job's files; nothing of the
/// job remains.
#[test]
fn sigkill_of_tmpirun_ends_the_ranks_children_and_leaves_nothing() {
    let _g = serial();
    let m = marker();
    let mut c = Command::new(tmpirun());
    c.args(["-n", "2", "--timeout", "120"]);
    for (k, v) in BASE {
        c.args(["--mca", k, v]);
    }
    let child = c
        .args(["sh", "-c", r#"sleep 300 & exec "$0" traffic"#, PROG])
        .env(MARKER_VAR, &m)
        .env("TMPDIR", private_tmpdir(&m))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start tmpirun");
    let t = Traffic::until_running(child, 2, Duration::from_secs(60));
    let (job, dir) = (t.job.clone(), t.dir.clone());
    let Traffic {
        child,
        err_t,
        out_t,
        ..
    } = t;
    kill_tmpirun_and_check_nothing_is_left(child, &m, &job, &dir);
    let _ = err_t.join();
    let _ = out_t.join();
}

/// Calls aimed at a rank that sits in `MPI_Finalize` (issue 42): a
/// receive naming it with no message of it fails instead of waiting
/// forever, the message it sent before finalizing still arrives, an
/// `MPI_ANY_SOURCE` receive fails only when no live member is left (a live
/// one still satisfies it), and an allreduce fails on every other rank --
/// in messages (`finalized`: its first call, when coll sm's segment is
/// attached) and on the attached segment (`finalized-coll`), over sm and
/// tcp. Every rank exits 0 and the job ends long before its timeout.
#[test]
fn calls_waiting_on_a_finalized_rank_fail() {
    let _g = serial();
    for (case, btl, n) in [
        ("finalized", "self,sm", 2),
        ("finalized", "self,sm", 4),
        ("finalized", "self,tcp", 4),
        ("finalized-coll", "self,sm", 3),
        ("finalized-coll", "self,tcp", 3),
    ] {
        let m = marker();
        let what = format!("{case} over {btl} with {n} ranks");
        let t0 = Instant::now();
        let mut child = spawn_job_btl(n, 60, &m, btl, &[case]);
        let (mut so, mut se) = (String::new(), String::new());
        let (mut out, mut err) = (child.stdout.take().unwrap(), child.stderr.take().unwrap());
        let reader = std::thread::spawn(move || {
            let mut s = String::new();
            err.read_to_string(&mut s).unwrap();
            s
        });
        out.read_to_string(&mut so).unwrap();
        let status = wait_bounded(&mut child, Duration::from_secs(75), &what);
        se.push_str(&reader.join().unwrap());
        eprintln!("faults: {what}: ended in {:?}", t0.elapsed());
        assert_eq!(status.code(), Some(0), "{what}: exit status\n{so}\n{se}");
        assert!(!so.contains("FAILED"), "{what}:\n{so}\n{se}");
        let ok = so
            .lines()
            .filter(|l| l.ends_with(')') && l.contains(": ok ("))
            .count();
        assert_eq!(
            ok,
            4 + (n as usize - 2),
            "{what}: checks passed\n{so}\n{se}"
        );
        if case == "finalized-coll" {
            assert!(
                so.contains("rank 0 called MPI_Finalize while this collective call waited"),
                "{what}: the segment's wait did not name the finalized rank\n{so}"
            );
        }
        let _ = std::fs::remove_dir(private_tmpdir(&m));
    }
}
