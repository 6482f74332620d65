//! `tmpirun` end to end with real processes: exit status propagation,
//! killed ranks, timeout, output tagging, `-x`, stdin, signals, session and
//! shared-memory cleanup, PMI finalize checks, and a real PMI job.
//!
//! Every test runs `tmpirun` with its own `TMPDIR`, so it can check that no
//! session directory is left, and under a watchdog: a `tmpirun` still
//! running after [`LIMIT`] is killed and the test fails.

use std::io::{Read, Write};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

const TMPIRUN: &str = env!("CARGO_BIN_EXE_tmpirun");
const PMICHECK: &str = env!("CARGO_BIN_EXE_tmpi-pmicheck");
/// Hard limit for one `tmpirun` in these tests.
const LIMIT: Duration = Duration::from_secs(60);

struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        let d = std::env::temp_dir().join(format!("tmpirun-test-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(d.join("tmp")).unwrap();
        std::fs::create_dir_all(d.join("pids")).unwrap();
        Scratch(d)
    }
    fn tmp(&self) -> PathBuf {
        self.0.join("tmp")
    }
    fn pids(&self) -> PathBuf {
        self.0.join("pids")
    }
    /// Asserts that no session directory is left in our TMPDIR.
    fn assert_no_session(&self) {
        let left: Vec<_> = std::fs::read_dir(self.tmp())
            .unwrap()
            .flatten()
            .map(|e| e.file_name())
            .collect();
        assert!(left.is_empty(), "left behind in TMPDIR: {left:?}");
    }
    /// Pids written by ranks as `<pids>/<name>` files.
    fn read_pids(&self) -> Vec<u32> {
        let mut v = Vec::new();
        for e in std::fs::read_dir(self.pids()).unwrap().flatten() {
            let s = std::fs::read_to_string(e.path()).unwrap();
            for w in s.split_whitespace() {
                v.push(w.parse().unwrap());
            }
        }
        v
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Whether `pid` is a live (non-zombie) process.
fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(s) => {
            // state is the field after the parenthesised command name.
            let state = s
                .rsplit_once(')')
                .map(|(_, r)| r.trim_start())
                .unwrap_or("");
            !state.starts_with('Z') && !state.starts_with('X')
        }
        Err(_) => false,
    }
}

fn assert_all_gone(pids: &[u32]) {
    // Orphans are reaped by init asynchronously; allow a moment.
    let t = Instant::now();
    while pids.iter().any(|&p| alive(p)) && t.elapsed() < Duration::from_secs(2) {
        std::thread::sleep(Duration::from_millis(20));
    }
    let left: Vec<u32> = pids.iter().copied().filter(|&p| alive(p)).collect();
    assert!(left.is_empty(), "processes left behind: {left:?}");
}

struct Out {
    status: ExitStatus,
    stdout: String,
    stderr: String,
    elapsed: Duration,
}

impl Out {
    fn code(&self) -> i32 {
        self.status
            .code()
            .unwrap_or_else(|| panic!("tmpirun died of a signal: {:?}", self.status))
    }
}

fn tmpirun(s: &Scratch, args: &[&str]) -> Command {
    let mut c = Command::new(TMPIRUN);
    c.args(args)
        .env("TMPDIR", s.tmp())
        .env("D", s.pids())
        .env_remove("MPIEXEC_TIMEOUT")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    c
}

/// Waits for `child` with the watchdog; collects its output.
fn finish(mut child: Child, start: Instant) -> Out {
    let mut so = child.stdout.take().unwrap();
    let mut se = child.stderr.take().unwrap();
    let t1 = std::thread::spawn(move || {
        let mut s = String::new();
        so.read_to_string(&mut s).unwrap();
        s
    });
    let t2 = std::thread::spawn(move || {
        let mut s = String::new();
        se.read_to_string(&mut s).unwrap();
        s
    });
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if start.elapsed() > LIMIT {
            let _ = child.kill();
            let _ = child.wait();
            panic!("tmpirun did not finish within {LIMIT:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let elapsed = start.elapsed();
    Out {
        status,
        stdout: t1.join().unwrap(),
        stderr: t2.join().unwrap(),
        elapsed,
    }
}

/// Runs tmpirun with `args`. The tests bound `elapsed` far below what the
/// alternative would take (a rank sleeping 60 s, a hung job), never as a
/// speed target: a busy machine must not fail them.
fn run(s: &Scratch, args: &[&str]) -> Out {
    let start = Instant::now();
    let child = tmpirun(s, args).spawn().unwrap();
    finish(child, start)
}

#[test]
fn all_ranks_exit_3() {
    let s = Scratch::new("exit3");
    let o = run(&s, &["-n", "3", "sh", "-c", "exit 3"]);
    assert_eq!(o.code(), 3, "stderr: {}", o.stderr);
    assert!(o.elapsed < Duration::from_secs(30), "took {:?}", o.elapsed);
    assert!(o.stderr.contains("exited with status 3"), "{}", o.stderr);
    s.assert_no_session();
}

#[test]
fn one_failing_rank_ends_the_others() {
    let s = Scratch::new("onefails");
    // Every rank records its pid and starts a background grandchild; rank 1
    // fails once all have started, the others would sleep for a minute.
    let script = r#"
        sleep 60 & echo $! > "$D/bg.$PMI_RANK"
        echo $$ > "$D/rank.$PMI_RANK"
        if [ "$PMI_RANK" = 1 ]; then
            while [ ! -s "$D/rank.0" ] || [ ! -s "$D/rank.2" ]; do sleep 0.02; done
            exit 3
        fi
        exec sleep 60
    "#;
    let o = run(&s, &["-n", "3", "sh", "-c", script]);
    assert_eq!(o.code(), 3, "stderr: {}", o.stderr);
    assert!(o.elapsed < Duration::from_secs(30), "took {:?}", o.elapsed);
    let line = o
        .stderr
        .lines()
        .find(|l| l.contains("rank 1 (pid "))
        .unwrap_or_else(|| panic!("no line naming rank 1: {}", o.stderr));
    assert!(line.contains("exited with status 3"), "{line}");
    assert!(line.contains("terminating the job"), "{line}");
    let pids = s.read_pids();
    assert_eq!(pids.len(), 6, "pids: {pids:?}");
    assert_all_gone(&pids);
    s.assert_no_session();
}

#[test]
fn plain_success_without_pmi() {
    let s = Scratch::new("ok");
    let o = run(&s, &["-n", "4", "sh", "-c", "exit 0"]);
    assert_eq!(o.code(), 0, "stderr: {}", o.stderr);
    assert_eq!(o.stderr, "");
    s.assert_no_session();
}

#[test]
fn sigkilled_rank_ends_the_job() {
    let s = Scratch::new("sigkill");
    let script = r#"
        echo $$ > "$D/rank.$PMI_RANK"
        if [ "$PMI_RANK" = 2 ]; then
            while [ ! -s "$D/rank.0" ] || [ ! -s "$D/rank.1" ]; do sleep 0.02; done
            kill -KILL $$
        fi
        exec sleep 60
    "#;
    let o = run(&s, &["-n", "3", "sh", "-c", script]);
    assert_eq!(o.code(), 128 + 9, "stderr: {}", o.stderr);
    assert!(o.elapsed < Duration::from_secs(30), "took {:?}", o.elapsed);
    assert!(
        o.stderr.contains("rank 2 (pid ") && o.stderr.contains("killed by SIGKILL"),
        "{}",
        o.stderr
    );
    assert_all_gone(&s.read_pids());
    s.assert_no_session();
}

#[test]
fn rank_ignoring_sigterm_is_killed_after_grace() {
    let s = Scratch::new("grace");
    let script = r#"
        trap '' TERM
        echo $$ > "$D/rank.$PMI_RANK"
        if [ "$PMI_RANK" = 0 ]; then
            while [ ! -s "$D/rank.1" ]; do sleep 0.02; done
            exit 5
        fi
        while :; do sleep 0.1; done
    "#;
    let o = run(&s, &["-n", "2", "--kill-grace", "0.5", "sh", "-c", script]);
    assert_eq!(o.code(), 5, "stderr: {}", o.stderr);
    assert!(o.elapsed < Duration::from_secs(30), "took {:?}", o.elapsed);
    assert_all_gone(&s.read_pids());
    s.assert_no_session();
}

#[test]
fn timeout_ends_a_hung_job_with_124() {
    let s = Scratch::new("timeout");
    let o = run(
        &s,
        &[
            "-n",
            "2",
            "--timeout",
            "1",
            "sh",
            "-c",
            r#"echo $$ > "$D/r.$PMI_RANK"; exec sleep 60"#,
        ],
    );
    assert_eq!(o.code(), 124, "stderr: {}", o.stderr);
    assert!(o.stderr.contains("timed out after 1 s"), "{}", o.stderr);
    assert!(
        o.elapsed >= Duration::from_secs(1) && o.elapsed < Duration::from_secs(30),
        "took {:?}",
        o.elapsed
    );
    assert_all_gone(&s.read_pids());
    s.assert_no_session();
}

#[test]
fn tagged_output() {
    let s = Scratch::new("tag");
    let o = run(
        &s,
        &[
            "-n",
            "3",
            "--tag-output",
            "sh",
            "-c",
            r#"echo "out $PMI_RANK"; echo "err $PMI_RANK" >&2; printf 'partial'"#,
        ],
    );
    assert_eq!(o.code(), 0, "stderr: {}", o.stderr);
    for r in 0..3 {
        assert!(
            o.stdout
                .lines()
                .any(|l| l == format!("[1,{r}]<stdout>:out {r}")),
            "stdout: {}",
            o.stdout
        );
        assert!(
            o.stdout
                .lines()
                .any(|l| l == format!("[1,{r}]<stdout>:partial")),
            "stdout: {}",
            o.stdout
        );
        assert!(
            o.stderr
                .lines()
                .any(|l| l == format!("[1,{r}]<stderr>:err {r}")),
            "stderr: {}",
            o.stderr
        );
    }
    assert_eq!(o.stdout.lines().count(), 6);

    // Untagged: lines pass through unchanged and whole.
    let o = run(
        &s,
        &["-n", "2", "sh", "-c", r#"echo "line from $PMI_RANK""#],
    );
    let mut lines: Vec<&str> = o.stdout.lines().collect();
    lines.sort();
    assert_eq!(lines, vec!["line from 0", "line from 1"]);
    s.assert_no_session();
}

#[test]
fn environment_of_the_ranks() {
    let s = Scratch::new("env");
    let script = r#"
        echo "FOO=$FOO BAZ=$BAZ EMPTY=[$EMPTY] SIZE=$PMI_SIZE RANK=$PMI_RANK"
        echo "FD=${PMI_FD:-none} JOBID=${PMI_JOBID:-unset} PORT=${PMI_PORT:-unset}"
        echo "JOB=$TMPI_JOB_ID"
        echo "MCA=$TMPI_CMDLINE_MCA"
        echo "SESSION=$TMPI_SESSION_DIR"
        echo "OVERSUB=${TMPI_LAUNCH_OVERSUBSCRIBED:-unset}"
        [ -d "$TMPI_SESSION_DIR" ] && stat -c 'MODE=%a' "$TMPI_SESSION_DIR"
    "#;
    let start = Instant::now();
    let child = tmpirun(
        &s,
        &[
            "-n",
            "2",
            "-x",
            "FOO=bar baz",
            "-x",
            "BAZ",
            "-x",
            "EMPTY=",
            "--mca",
            "btl",
            "self,sm",
            "--mca",
            "pml_eager_limit",
            "4k",
            "--stdin",
            "none",
            "sh",
            "-c",
            script,
        ],
    )
    .env("BAZ", "from-parent")
    .env("PMI_JOBID", "outer.0")
    .env("PMI_PORT", "host:1")
    .env("TMPI_LAUNCH_OVERSUBSCRIBED", "1")
    .spawn()
    .unwrap();
    let o = finish(child, start);
    assert_eq!(o.code(), 0, "stderr: {}", o.stderr);
    for r in 0..2 {
        let want = format!("FOO=bar baz BAZ=from-parent EMPTY=[] SIZE=2 RANK={r}");
        assert!(o.stdout.contains(&want), "{want} not in {}", o.stdout);
    }
    assert!(!o.stdout.contains("FD=none"), "{}", o.stdout);
    assert!(o.stdout.contains("JOBID=unset PORT=unset"), "{}", o.stdout);
    let job: Vec<&str> = o
        .stdout
        .lines()
        .filter_map(|l| l.strip_prefix("JOB="))
        .collect();
    assert_eq!(job.len(), 2);
    assert_eq!(job[0], job[1], "one job id for all ranks");
    assert!(job[0].starts_with("tmpi-"));
    assert!(job[0]
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'));
    let mca = tmpi_base::mca::encode_cmdline(&[
        ("btl".into(), "self,sm".into()),
        ("pml_eager_limit".into(), "4k".into()),
    ]);
    assert!(o.stdout.contains(&format!("MCA={mca}\n")), "{}", o.stdout);
    let session = o
        .stdout
        .lines()
        .find_map(|l| l.strip_prefix("SESSION="))
        .unwrap();
    assert!(Path::new(session).starts_with(s.tmp()), "{session}");
    assert!(session.ends_with(job[0]), "{session}");
    assert!(o.stdout.contains("MODE=700"), "{}", o.stdout);
    // 2 ranks oversubscribe only a machine with fewer than 2 CPUs; the
    // inherited variable must not leak through otherwise.
    let ncpus = std::thread::available_parallelism().unwrap().get();
    let want = if ncpus < 2 {
        "OVERSUB=1"
    } else {
        "OVERSUB=unset"
    };
    assert!(o.stdout.contains(want), "{want}: {}", o.stdout);
    s.assert_no_session();
}

#[test]
fn oversubscription_is_announced() {
    let s = Scratch::new("oversub");
    let ncpus = std::thread::available_parallelism().unwrap().get();
    let n = (ncpus + 1).to_string();
    let o = run(
        &s,
        &[
            "-n",
            &n,
            "sh",
            "-c",
            r#"echo "${TMPI_LAUNCH_OVERSUBSCRIBED:-unset}""#,
        ],
    );
    assert_eq!(o.code(), 0, "stderr: {}", o.stderr);
    assert_eq!(o.stdout.lines().filter(|l| *l == "1").count(), ncpus + 1);
}

#[test]
fn x_of_a_reserved_variable_is_refused() {
    let s = Scratch::new("xres");
    let o = run(&s, &["-n", "1", "-x", "PMI_RANK=7", "true"]);
    assert_eq!(o.code(), 2);
    assert!(o.stderr.contains("PMI_RANK"), "{}", o.stderr);
}

#[test]
fn stdin_goes_to_rank_0_only() {
    let s = Scratch::new("stdin");
    let start = Instant::now();
    let mut child = tmpirun(
        &s,
        &[
            "-n",
            "3",
            "sh",
            "-c",
            r#"n=$(wc -l); echo "rank $PMI_RANK read $n lines""#,
        ],
    )
    .stdin(Stdio::piped())
    .spawn()
    .unwrap();
    {
        let mut i = child.stdin.take().unwrap();
        i.write_all(b"one\ntwo\nthree\n").unwrap();
    }
    let o = finish(child, start);
    assert_eq!(o.code(), 0, "stderr: {}", o.stderr);
    assert!(o.stdout.contains("rank 0 read 3 lines"), "{}", o.stdout);
    assert!(o.stdout.contains("rank 1 read 0 lines"), "{}", o.stdout);
    assert!(o.stdout.contains("rank 2 read 0 lines"), "{}", o.stdout);

    // --stdin picks another rank.
    let start = Instant::now();
    let mut child = tmpirun(
        &s,
        &[
            "-n",
            "3",
            "--stdin",
            "2",
            "sh",
            "-c",
            r#"n=$(wc -l); echo "rank $PMI_RANK read $n lines""#,
        ],
    )
    .stdin(Stdio::piped())
    .spawn()
    .unwrap();
    child.stdin.take().unwrap().write_all(b"a\nb\n").unwrap();
    let o = finish(child, start);
    assert_eq!(o.code(), 0, "stderr: {}", o.stderr);
    assert!(o.stdout.contains("rank 0 read 0 lines"), "{}", o.stdout);
    assert!(o.stdout.contains("rank 2 read 2 lines"), "{}", o.stdout);
}

#[test]
fn session_dir_and_leftover_segments_are_removed() {
    let s = Scratch::new("shm");
    if !Path::new("/dev/shm").is_dir() {
        eprintln!("no /dev/shm; skipped");
        return;
    }
    // Each rank leaves a segment and a session file; rank 1 then fails.
    let script = r#"
        echo "$TMPI_JOB_ID" > "$D/job"
        : > "/dev/shm/tmpi-sm.$TMPI_JOB_ID.$PMI_RANK"
        mkdir -p "$TMPI_SESSION_DIR/sub" && : > "$TMPI_SESSION_DIR/sub/f.$PMI_RANK"
        [ "$1" = fail ] && [ "$PMI_RANK" = 1 ] && exit 9
        exit 0
    "#;
    for how in ["ok", "fail"] {
        let o = run(&s, &["-n", "2", "sh", "-c", script, "sh", how]);
        let want = if how == "ok" { 0 } else { 9 };
        assert_eq!(o.code(), want, "stderr: {}", o.stderr);
        let job = std::fs::read_to_string(s.pids().join("job")).unwrap();
        let job = job.trim();
        let left: Vec<_> = std::fs::read_dir("/dev/shm")
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().contains(job))
            .map(|e| e.file_name())
            .collect();
        assert!(left.is_empty(), "segments left: {left:?}");
        s.assert_no_session();
    }
}

#[test]
fn sigterm_to_tmpirun_is_forwarded_and_ends_the_job() {
    let s = Scratch::new("sigterm");
    let script = r#"
        trap 'echo "rank $PMI_RANK got TERM"; exit 0' TERM
        echo $$ > "$D/r.$PMI_RANK"
        while :; do sleep 0.05; done
    "#;
    let start = Instant::now();
    let child = tmpirun(&s, &["-n", "2", "sh", "-c", script])
        .spawn()
        .unwrap();
    let pid = child.id();
    let t = Instant::now();
    while s.read_pids().len() < 2 {
        assert!(t.elapsed() < Duration::from_secs(20), "ranks did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    let ranks = s.read_pids();
    // SAFETY-free: signal via the kill utility.
    let st = Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .unwrap();
    assert!(st.success());
    let o = finish(child, start);
    assert_eq!(o.code(), 128 + 15, "stderr: {}", o.stderr);
    assert!(o.stderr.contains("received SIGTERM"), "{}", o.stderr);
    assert!(o.stdout.contains("rank 0 got TERM"), "{}", o.stdout);
    assert!(o.stdout.contains("rank 1 got TERM"), "{}", o.stdout);
    assert_all_gone(&ranks);
    s.assert_no_session();
}

#[test]
fn ranks_die_with_a_sigkilled_tmpirun() {
    let s = Scratch::new("pdeath");
    let start = Instant::now();
    let child = tmpirun(
        &s,
        &[
            "-n",
            "2",
            "sh",
            "-c",
            r#"echo $$ > "$D/r.$PMI_RANK"; exec sleep 60"#,
        ],
    )
    .spawn()
    .unwrap();
    let t = Instant::now();
    while s.read_pids().len() < 2 {
        assert!(t.elapsed() < Duration::from_secs(20), "ranks did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    let ranks = s.read_pids();
    let st = Command::new("kill")
        .args(["-KILL", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(st.success());
    let o = finish(child, start);
    assert_eq!(o.status.signal(), Some(9));
    assert_all_gone(&ranks);
    // The session directory of a SIGKILLed tmpirun is swept by the next one.
    let _ = run(&s, &["-n", "1", "true"]);
    s.assert_no_session();
}

#[test]
fn missing_program_and_bad_options() {
    let s = Scratch::new("bad");
    let o = run(&s, &["-n", "2", "/nonexistent/tmpi-no-such-program"]);
    assert_eq!(o.code(), 127, "stderr: {}", o.stderr);
    assert!(
        o.stderr.contains("rank 0 could not be started"),
        "{}",
        o.stderr
    );
    s.assert_no_session();

    for args in [
        &["--bogus", "-n", "1", "true"][..],
        &["-n", "0", "true"],
        &["-n", "2"],
        &["true"],
        &["-n", "1", "--bind-to", "socket", "true"],
        &["-n", "1", "--timeout", "soon", "true"],
    ] {
        let o = run(&s, args);
        assert_eq!(o.code(), 2, "{args:?}: {}", o.stderr);
        assert!(o.stderr.starts_with("tmpirun: "), "{}", o.stderr);
    }
    let o = run(&s, &["--help"]);
    assert_eq!(o.code(), 0);
    assert!(o.stdout.contains("usage: tmpirun -n N"));
    // `-np` alias and `--` separator.
    let o = run(&s, &["-np", "2", "--", "sh", "-c", "echo $PMI_SIZE"]);
    assert_eq!(o.code(), 0, "stderr: {}", o.stderr);
    assert_eq!(o.stdout, "2\n2\n");
}

#[test]
fn bind_to_core() {
    use tmpi_run::launcher::{binding, sys};
    let s = Scratch::new("bind");
    let allowed = sys::allowed_cpus().unwrap().cpus();
    let cores = binding::cores(&allowed, Path::new("/sys/devices/system/cpu"));
    // One rank more than cores: the ranks outnumber them and are bound in
    // blocks (ranks 0 and 1 share the first core, the last rank gets the
    // last core).
    let n = cores.len() as u32 + 1;
    let ns = n.to_string();
    let o = run(
        &s,
        &[
            "-n",
            &ns,
            "--bind-to",
            "core",
            "sh",
            "-c",
            r#"echo "$PMI_RANK $(grep Cpus_allowed_list /proc/self/status | cut -f2)""#,
        ],
    );
    assert_eq!(o.code(), 0, "stderr: {}", o.stderr);
    for r in 0..n {
        let want = binding::cpus_for_rank(&cores, r, n);
        let line = o
            .stdout
            .lines()
            .find(|l| l.starts_with(&format!("{r} ")))
            .unwrap();
        let got = binding::parse_cpu_list(line.split_once(' ').unwrap().1).unwrap();
        assert_eq!(got, want, "rank {r}: {line}");
        let expected_core = match r {
            0 | 1 => 0,
            r => r as usize - 1,
        };
        assert_eq!(got, cores[expected_core], "rank {r}: {line}");
    }
    // Without binding the ranks keep tmpirun's mask.
    let o = run(
        &s,
        &[
            "-n",
            "1",
            "sh",
            "-c",
            "grep Cpus_allowed_list /proc/self/status | cut -f2",
        ],
    );
    assert_eq!(binding::parse_cpu_list(o.stdout.trim()).unwrap(), allowed);
}

const PY_INIT_ONLY: &str = r#"
import os
fd = int(os.environ["PMI_FD"])
os.write(fd, b"cmd=init pmi_version=1 pmi_subversion=1\n")
os.read(fd, 1024)
"#;

const PY_INIT_FINALIZE: &str = r#"
import os
fd = int(os.environ["PMI_FD"])
os.write(fd, b"cmd=init pmi_version=1 pmi_subversion=1\n")
os.read(fd, 1024)
os.write(fd, b"cmd=finalize\n")
os.read(fd, 1024)
"#;

fn python() -> Option<&'static str> {
    ["/usr/bin/python3", "python3"].into_iter().find(|p| {
        Command::new(p)
            .arg("-c")
            .arg("pass")
            .status()
            .is_ok_and(|s| s.success())
    })
}

#[test]
fn exit_zero_without_pmi_finalize_fails_the_job() {
    let Some(py) = python() else {
        eprintln!("no python3; skipped");
        return;
    };
    let s = Scratch::new("nofinal");
    let o = run(&s, &["-n", "2", py, "-c", PY_INIT_ONLY]);
    assert_eq!(o.code(), 1, "stderr: {}", o.stderr);
    assert!(
        o.stderr
            .contains("exited with status 0 without finalizing PMI"),
        "{}",
        o.stderr
    );
    let o = run(&s, &["-n", "2", py, "-c", PY_INIT_FINALIZE]);
    assert_eq!(o.code(), 0, "stderr: {}", o.stderr);
    s.assert_no_session();
}

#[test]
fn pmicheck_job_succeeds() {
    let s = Scratch::new("pmicheck");
    let o = run(&s, &["-n", "4", PMICHECK]);
    assert_eq!(o.code(), 0, "stdout: {}\nstderr: {}", o.stdout, o.stderr);
    s.assert_no_session();
}

#[test]
fn pmicheck_exit_without_finalize_fails() {
    let s = Scratch::new("pmicheck-nofin");
    let o = run(
        &s,
        &["-n", "3", PMICHECK, "--exit-without-finalize", "--quiet"],
    );
    assert_eq!(o.code(), 1, "stdout: {}\nstderr: {}", o.stdout, o.stderr);
    assert!(o.stderr.contains("without finalizing PMI"), "{}", o.stderr);
    s.assert_no_session();
}

#[test]
fn pmi_abort_ends_the_job_with_its_code() {
    let s = Scratch::new("abort");
    let pids = s.pids();
    let o = run(
        &s,
        &[
            "-n",
            "3",
            PMICHECK,
            "--abort",
            "7",
            "--abort-rank",
            "1",
            "--quiet",
            "--pid-dir",
            pids.to_str().unwrap(),
        ],
    );
    assert_eq!(o.code(), 7, "stdout: {}\nstderr: {}", o.stdout, o.stderr);
    assert!(
        o.stderr.contains("rank 1 (pid ") && o.stderr.contains("called abort with code 7"),
        "{}",
        o.stderr
    );
    assert!(o.elapsed < Duration::from_secs(10), "took {:?}", o.elapsed);
    assert_all_gone(&s.read_pids());
    s.assert_no_session();
}

/// The message of a PMI abort reaches the user as the rank wrote it,
/// spaces, `;`, `=`, `%`, underscores and all, although a PMI-1 value
/// cannot hold a space (the client sends it encoded, tmpirun decodes it).
#[test]
fn pmi_abort_message_arrives_intact() {
    let s = Scratch::new("abortmsg");
    let text = "rank 1 gives up: 50% done; MPI_ERR_OTHER = bad input";
    let o = run(
        &s,
        &[
            "-n",
            "2",
            PMICHECK,
            "--abort",
            "9",
            "--abort-rank",
            "1",
            "--abort-message",
            text,
            "--quiet",
        ],
    );
    assert_eq!(o.code(), 9, "stderr: {}", o.stderr);
    assert!(
        o.stderr
            .lines()
            .any(|l| l.starts_with("tmpirun: rank 1 (pid ")
                && l.ends_with(&format!(
                    "called abort with code 9: {text}; terminating the job"
                ))),
        "{}",
        o.stderr
    );
    s.assert_no_session();
}

const PY_INIT_CLOSE_SLEEP: &str = r#"
import os, time
fd = int(os.environ["PMI_FD"])
os.write(fd, b"cmd=init pmi_version=1 pmi_subversion=1\n")
os.read(fd, 1024)
os.close(fd)
open(os.environ["D"] + "/r." + os.environ["PMI_RANK"], "w").write(str(os.getpid()))
time.sleep(60)
"#;

#[test]
fn closing_pmi_without_finalize_fails_a_running_job() {
    let Some(py) = python() else {
        eprintln!("no python3; skipped");
        return;
    };
    let s = Scratch::new("pmiclose");
    let o = run(&s, &["-n", "2", py, "-c", PY_INIT_CLOSE_SLEEP]);
    assert_eq!(o.code(), 1, "stderr: {}", o.stderr);
    assert!(
        o.stderr
            .contains("closed its PMI connection without finalizing; terminating the job"),
        "{}",
        o.stderr
    );
    assert!(o.elapsed < Duration::from_secs(10), "took {:?}", o.elapsed);
    assert_all_gone(&s.read_pids());
    s.assert_no_session();
}

const PY_ABORT_0: &str = r#"
import os, time
fd = int(os.environ["PMI_FD"])
os.write(fd, b"cmd=init pmi_version=1 pmi_subversion=1\n")
os.read(fd, 1024)
if os.environ["PMI_RANK"] == "1":
    os.write(fd, b"cmd=abort exitcode=0 message=bye\n")
time.sleep(60)
"#;

#[test]
fn abort_with_code_0_still_fails_the_job() {
    let Some(py) = python() else {
        eprintln!("no python3; skipped");
        return;
    };
    let s = Scratch::new("abort0");
    let o = run(&s, &["-n", "3", py, "-c", PY_ABORT_0]);
    assert_eq!(o.code(), 1, "stderr: {}", o.stderr);
    assert!(
        o.stderr.contains("rank 1 (pid ") && o.stderr.contains("called abort with code 0: bye"),
        "{}",
        o.stderr
    );
    assert!(o.elapsed < Duration::from_secs(10), "took {:?}", o.elapsed);
    s.assert_no_session();
}

#[test]
fn many_ranks_heavy_output_lines_stay_whole() {
    let s = Scratch::new("heavy");
    // 16 ranks, each 2000 lines of 200 bytes, on stdout and stderr.
    let script = r#"
        pad=$(printf '%0180d' 0)
        i=0
        while [ $i -lt 2000 ]; do
            echo "r$PMI_RANK l$i $pad"
            i=$((i+1))
        done
        echo "r$PMI_RANK done" >&2
    "#;
    let o = run(&s, &["-n", "16", "--tag-output", "sh", "-c", script]);
    assert_eq!(o.code(), 0, "stderr: {}", o.stderr);
    let pad = "0".repeat(180);
    let mut next = [0u32; 16];
    for line in o.stdout.lines() {
        let (tag, body) = line.split_once(':').expect(line);
        let r: usize = tag
            .strip_prefix("[1,")
            .and_then(|t| t.strip_suffix("]<stdout>"))
            .expect(line)
            .parse()
            .unwrap();
        assert_eq!(
            body,
            format!("r{r} l{} {pad}", next[r]),
            "line out of order or mixed"
        );
        next[r] += 1;
    }
    assert_eq!(next, [2000; 16]);
    for r in 0..16 {
        assert!(o.stderr.contains(&format!("[1,{r}]<stderr>:r{r} done\n")));
    }
    s.assert_no_session();
}

#[test]
fn sigtstp_and_sigcont_are_forwarded() {
    let s = Scratch::new("tstp");
    let start = Instant::now();
    let child = tmpirun(
        &s,
        &[
            "-n",
            "2",
            "sh",
            "-c",
            r#"echo $$ > "$D/r.$PMI_RANK"; exec sleep 60"#,
        ],
    )
    .spawn()
    .unwrap();
    let t = Instant::now();
    while s.read_pids().len() < 2 {
        assert!(t.elapsed() < Duration::from_secs(20), "ranks did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    let ranks = s.read_pids();
    let state = |pid: u32| {
        let st = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        st.rsplit_once(')')
            .map(|(_, r)| r.trim_start().chars().next().unwrap_or('?'))
            .unwrap_or('?')
    };
    let wait_for = |want: char, pids: &[u32]| {
        let t = Instant::now();
        while !pids.iter().all(|&p| state(p) == want) {
            assert!(
                t.elapsed() < Duration::from_secs(10),
                "states: {:?}, want {want}",
                pids.iter().map(|&p| state(p)).collect::<Vec<_>>()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    let tmpirun_pid = child.id();
    let kill = |sig: &str, pid: u32| {
        assert!(Command::new("kill")
            .args([sig, &pid.to_string()])
            .status()
            .unwrap()
            .success())
    };
    kill("-TSTP", tmpirun_pid);
    wait_for('T', &ranks);
    wait_for('T', &[tmpirun_pid]);
    kill("-CONT", tmpirun_pid);
    wait_for('S', &ranks);
    kill("-INT", tmpirun_pid);
    let o = finish(child, start);
    assert_eq!(o.code(), 130, "stderr: {}", o.stderr);
    assert_all_gone(&ranks);
    s.assert_no_session();
}

/// CPU time (user + system, in clock ticks) used so far by `pid`.
fn cpu_ticks(pid: u32) -> u64 {
    let st = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let rest = st.rsplit_once(')').unwrap().1;
    let f: Vec<&str> = rest.split_whitespace().collect();
    // Fields after the command: state is [0], utime [11], stime [12].
    f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap()
}

#[test]
fn launcher_does_not_spin_while_waiting() {
    let s = Scratch::new("spin");
    // After the timeout the ranks ignore SIGTERM for the 2 s grace period;
    // then a finalized PMI rank that keeps running: neither may make
    // tmpirun busy-wait.
    let start = Instant::now();
    let child = tmpirun(
        &s,
        &[
            "-n",
            "2",
            "--timeout",
            "0.3",
            "--kill-grace",
            "2",
            "sh",
            "-c",
            "trap '' TERM; while :; do sleep 0.1; done",
        ],
    )
    .spawn()
    .unwrap();
    std::thread::sleep(Duration::from_millis(1800));
    let ticks = cpu_ticks(child.id());
    let o = finish(child, start);
    assert_eq!(o.code(), 124, "stderr: {}", o.stderr);
    // 1.8 s of wall time; a busy loop would use well over 100 ticks.
    assert!(ticks < 40, "tmpirun used {ticks} ticks while waiting");
    s.assert_no_session();
}

#[test]
fn processes_escaping_the_process_group_are_ended_with_the_job() {
    let s = Scratch::new("escape");
    // Each rank starts a process in a new session (out of its process
    // group), waits until it runs, and exits 0: the orphan must not survive
    // the job.
    let script = r#"
        setsid sh -c 'echo $$ > "$D/daemon.$PMI_RANK"; exec sleep 60' < /dev/null > /dev/null 2>&1 &
        while [ ! -s "$D/daemon.$PMI_RANK" ]; do sleep 0.02; done
        exit 0
    "#;
    let o = run(&s, &["-n", "2", "sh", "-c", script]);
    assert_eq!(o.code(), 0, "stderr: {}", o.stderr);
    let pids = s.read_pids();
    assert_eq!(pids.len(), 2, "{pids:?}");
    assert_all_gone(&pids);
    s.assert_no_session();
}

/// MPMD: `a : b` runs both programs in one job, ranks numbered in order;
/// each part has its own -n, -x and --mca (the first part's --mca applies
/// to all) and sees its index in TMPI_APPNUM (MPI_APPNUM); PMI spans the
/// parts.
#[test]
fn mpmd_parts_have_their_own_ranks_environment_and_appnum() {
    let s = Scratch::new("mpmd");
    let line = r#"echo "$0 rank=$PMI_RANK size=$PMI_SIZE app=$TMPI_APPNUM A=${A:-} B=${B:-} MCA=$TMPI_CMDLINE_MCA""#;
    let o = run(
        &s,
        &[
            "-n",
            "2",
            "-x",
            "A=1",
            "--mca",
            "pml_stats",
            "0",
            "sh",
            "-c",
            line,
            "first",
            ":",
            "-n",
            "1",
            "-x",
            "B=2",
            "--mca",
            "btl",
            "self",
            "sh",
            "-c",
            line,
            "second",
        ],
    );
    assert_eq!(o.code(), 0, "stderr: {}", o.stderr);
    let mut lines: Vec<&str> = o.stdout.lines().collect();
    lines.sort();
    let first_mca = tmpi_base::mca::encode_cmdline(&[("pml_stats".into(), "0".into())]);
    let second_mca = tmpi_base::mca::encode_cmdline(&[
        ("pml_stats".into(), "0".into()),
        ("btl".into(), "self".into()),
    ]);
    assert_eq!(
        lines,
        vec![
            format!("first rank=0 size=3 app=0 A=1 B= MCA={first_mca}"),
            format!("first rank=1 size=3 app=0 A=1 B= MCA={first_mca}"),
            format!("second rank=2 size=3 app=1 A= B=2 MCA={second_mca}"),
        ],
        "{}",
        o.stdout
    );
    // One PMI job across the parts: every rank reads every other's values.
    let o = run(&s, &["-n", "1", PMICHECK, ":", "-n", "2", PMICHECK]);
    assert_eq!(o.code(), 0, "stdout: {}\nstderr: {}", o.stdout, o.stderr);
    assert!(
        o.stdout.contains("rank 2: ok (3 peers verified)"),
        "{}",
        o.stdout
    );
    // A failing part ends the whole job.
    let o = run(
        &s,
        &[
            "-n", "1", "sleep", "30", ":", "-n", "1", "sh", "-c", "exit 5",
        ],
    );
    assert_eq!(o.code(), 5, "stderr: {}", o.stderr);
    assert!(o.elapsed < Duration::from_secs(20), "{:?}", o.elapsed);
    // Empty parts are refused.
    for args in [
        &["-n", "1", "true", ":"][..],
        &[":", "-n", "1", "true"],
        &["-n", "1", "true", ":", "-n", "1"],
    ] {
        let o = run(&s, args);
        assert_eq!(o.code(), 2, "{args:?}: {}", o.stderr);
    }
    s.assert_no_session();
}

/// -wdir/--wdir: the ranks start in that directory (per MPMD part).
#[test]
fn working_directory_of_the_ranks() {
    let s = Scratch::new("wdir");
    let a = s.pids();
    let b = s.tmp();
    let (a_s, b_s) = (a.to_str().unwrap(), b.to_str().unwrap());
    let o = run(
        &s,
        &[
            "-wdir", a_s, "-n", "1", "pwd", ":", "--wdir", b_s, "-n", "1", "pwd",
        ],
    );
    assert_eq!(o.code(), 0, "stderr: {}", o.stderr);
    let mut got: Vec<&str> = o.stdout.lines().collect();
    got.sort();
    let mut want = vec![a_s, b_s];
    want.sort();
    assert_eq!(got, want);
    let o = run(&s, &["-wdir", "/nonexistent/tmpi-dir", "-n", "1", "pwd"]);
    assert_ne!(o.code(), 0, "{}", o.stdout);
}

/// --report-bindings: one line per rank on stderr, naming its CPUs when
/// bound.
#[test]
fn report_bindings() {
    let s = Scratch::new("report-bindings");
    let o = run(&s, &["--report-bindings", "-n", "2", "true"]);
    assert_eq!(o.code(), 0, "stderr: {}", o.stderr);
    assert!(
        o.stderr.contains("rank 0 not bound") && o.stderr.contains("rank 1 not bound"),
        "{}",
        o.stderr
    );
    let o = run(
        &s,
        &["--report-bindings", "--bind-to", "core", "-n", "2", "true"],
    );
    assert_eq!(o.code(), 0, "stderr: {}", o.stderr);
    assert!(
        o.stderr.contains("rank 0 bound to CPU") && o.stderr.contains("rank 1 bound to CPU"),
        "{}",
        o.stderr
    );
}

/// Without Open MPI's mpirun to hand them to (`TMPIRUN_OMPI_MPIRUN=none`),
/// multi-host options are refused with a message that names the launchers
/// to use instead and how.
#[test]
fn multi_host_options_say_which_launcher_to_use() {
    let s = Scratch::new("multihost");
    let run = |s: &Scratch, args: &[&str]| {
        let start = Instant::now();
        let child = tmpirun(s, args)
            .env("TMPIRUN_OMPI_MPIRUN", "none")
            .spawn()
            .unwrap();
        finish(child, start)
    };
    for args in [
        &["--host", "a,b", "-n", "2", "true"][..],
        &["-H", "a,b", "-n", "2", "true"],
        &["--hostfile", "hosts", "-n", "2", "true"],
        &["-machinefile", "hosts", "-n", "2", "true"],
        &["-N", "2", "true"],
        &["--npernode", "2", "true"],
        &["--map-by", "node", "-n", "2", "true"],
    ] {
        let o = run(&s, args);
        assert_eq!(o.code(), 2, "{args:?}: {}", o.stderr);
        assert!(
            o.stderr.contains(args[0])
                && o.stderr.contains("this machine only")
                && o.stderr.contains("mpirun.openmpi --host a,b -n 4 ./prog")
                && o.stderr.contains("mpiexec.hydra -hosts a,b -n 4 ./prog")
                && o.stderr.contains("srun --mpi=pmi2"),
            "{args:?}: {}",
            o.stderr
        );
    }
}

/// --output-filename DIR: each rank's output in DIR/1/rank.R/stdout and
/// stderr, none on tmpirun's own streams.
#[test]
fn output_filename_writes_per_rank_files() {
    let s = Scratch::new("output-filename");
    let dir = s.0.join("out");
    let d = dir.to_str().unwrap();
    let o = run(
        &s,
        &[
            "--output-filename",
            d,
            "-n",
            "3",
            "sh",
            "-c",
            "echo out $PMI_RANK; echo err $PMI_RANK >&2",
        ],
    );
    assert_eq!(o.code(), 0, "stderr: {}", o.stderr);
    assert_eq!(o.stdout, "");
    for r in 0..3 {
        let read = |f: &str| std::fs::read_to_string(dir.join(format!("1/rank.{r}/{f}"))).unwrap();
        assert_eq!(read("stdout"), format!("out {r}\n"));
        assert_eq!(read("stderr"), format!("err {r}\n"));
    }
    // A directory that cannot be made: the job fails to start, saying why.
    let o = run(
        &s,
        &["--output-filename", "/proc/tmpi-no", "-n", "1", "true"],
    );
    assert_ne!(o.code(), 0);
    assert!(
        o.stderr.contains("--output-filename /proc/tmpi-no"),
        "{}",
        o.stderr
    );
    s.assert_no_session();
}

/// With Open MPI's mpirun available, a multi-host command line is handed
/// to it, translated: first to a stand-in that records its arguments, then
/// to the real mpirun.openmpi (one host named twice: its ranks run over
/// PMIx and find each other).
#[test]
fn multi_host_jobs_are_handed_to_open_mpi() {
    let s = Scratch::new("handoff");
    let fake = s.0.join("fake-mpirun");
    let log = s.0.join("args");
    std::fs::write(
        &fake,
        format!(
            "#!/bin/sh\nprintf '%s\\n' \"$@\" > {}\nexit 7\n",
            log.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&fake, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let start = Instant::now();
    let child = tmpirun(
        &s,
        &[
            "--host",
            "a,b",
            "-n",
            "2",
            "--mca",
            "btl",
            "self,tcp",
            "--timeout",
            "9",
            "prog",
            "arg",
            ":",
            "-N",
            "1",
            "prog2",
        ],
    )
    .env("TMPIRUN_OMPI_MPIRUN", &fake)
    .spawn()
    .unwrap();
    let o = finish(child, start);
    assert_eq!(o.code(), 7, "mpirun's status is tmpirun's: {}", o.stderr);
    assert!(o.stderr.contains("handing the job to"), "{}", o.stderr);
    let got = std::fs::read_to_string(&log).unwrap();
    let got: Vec<&str> = got
        .lines()
        .filter(|a| *a != "--allow-run-as-root")
        .collect();
    assert_eq!(
        got,
        [
            "--oversubscribe",
            "--host",
            "a,b",
            "-n",
            "2",
            "-x",
            "TMPI_MCA_btl=self,tcp",
            "--timeout",
            "9",
            "prog",
            "arg",
            ":",
            "--npernode",
            "1",
            "prog2",
        ]
    );
    // The real thing (ci/install-deps.sh installs openmpi-bin).
    let real = tmpi_run::launcher::handoff::find_runtime()
        .expect("mpirun.openmpi on PATH (ci/install-deps.sh installs openmpi-bin)");
    let start = Instant::now();
    let child = tmpirun(&s, &["--host", "localhost:2", "-n", "2", PMICHECK])
        .env("TMPIRUN_OMPI_MPIRUN", &real)
        .spawn()
        .unwrap();
    let o = finish(child, start);
    assert_eq!(o.code(), 0, "stdout: {}\nstderr: {}", o.stdout, o.stderr);
    assert_eq!(o.stdout.matches("version=Pmix").count(), 2, "{}", o.stdout);
    assert!(
        o.stdout.contains("rank 1: ok (2 peers verified)"),
        "{}",
        o.stdout
    );
}
