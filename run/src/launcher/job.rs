//! The job's event loop: spawn, watch, end, clean up.

use std::io::{self, Read};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver, TryRecvError};
use std::time::{Duration, Instant};

use super::guard::Guard;
use super::output::{write_out, LineForwarder, Stream};
use super::sys::{self, ChildSetup, WakePipe};
use super::{
    binding, BindTo, JobEnd, JobOutcome, LaunchConfig, LaunchError, RankFailure, StdinTarget,
    SETTLE,
};
use crate::pmi_server::{PmiEvent, PmiServer, ServerConfig};
use crate::session::Session;

/// Variables of an outer launcher that must not reach the ranks.
const STRIPPED_ENV: &[&str] = &[
    "PMI_JOBID",
    "PMI_PORT",
    "PMI_ID",
    "PMI_SPAWNED",
    "PMI_HOSTNAME",
];

/// How long output is still drained after the last rank exited.
const DRAIN: Duration = Duration::from_secs(1);
/// How long exits are awaited after SIGKILL before giving up.
const AFTER_KILL: Duration = Duration::from_secs(3);
/// Safety-net rescan of children even without SIGCHLD.
const RESCAN: Duration = Duration::from_millis(500);
/// How long a rank's non-zero exit waits before it is judged the cause of
/// the job's end: a peer killed by a signal is often the real cause, and
/// its survivors can notice (a reset connection) and exit before the
/// killed process has become a zombie that `reap` can see.
const CAUSE_GRACE: Duration = Duration::from_millis(100);

const SIGNALS: &[libc::c_int] = &[
    libc::SIGCHLD,
    libc::SIGINT,
    libc::SIGTERM,
    libc::SIGHUP,
    libc::SIGUSR1,
    libc::SIGUSR2,
    libc::SIGTSTP,
    libc::SIGCONT,
];

#[derive(Debug)]
struct Rank {
    rank: u32,
    pid: u32,
    child: Option<Child>,
    status: Option<ExitStatus>,
    exited_at: Option<Instant>,
    pmi_initialized: bool,
    pmi_finalized: bool,
    aborted: Option<(i32, Option<String>)>,
    /// `(finalized, active)` of the PMI disconnect, once seen.
    disconnected: Option<(bool, bool)>,
    disconnected_at: Option<Instant>,
    /// The exit has been judged (success or failure).
    settled: bool,
}

impl Rank {
    fn running(&self) -> bool {
        self.child.is_some()
    }
}

struct Pipe {
    rank: u32,
    stream: Stream,
    fd: Option<std::process::ChildStdout>,
    fd_err: Option<std::process::ChildStderr>,
    fwd: LineForwarder,
}

impl Pipe {
    fn raw(&self) -> Option<RawFd> {
        self.fd
            .as_ref()
            .map(|f| f.as_raw_fd())
            .or_else(|| self.fd_err.as_ref().map(|f| f.as_raw_fd()))
    }

    fn close(&mut self) {
        self.fd = None;
        self.fd_err = None;
    }

    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match (&mut self.fd, &mut self.fd_err) {
            (Some(f), _) => f.read(buf),
            (_, Some(f)) => f.read(buf),
            _ => Ok(0),
        }
    }
}

struct Ending {
    end: JobEnd,
    code: u8,
    kill_at: Instant,
    killed: bool,
}

struct Job<'a> {
    cfg: &'a LaunchConfig,
    ranks: Vec<Rank>,
    pipes: Vec<Pipe>,
    out_warned: [bool; 2],
    ending: Option<Ending>,
    deadline: Option<Instant>,
    all_exited_at: Option<Instant>,
    /// The clean-up guard, not a process of the job (never signalled with
    /// it, reaped by [`Guard::dismiss`]).
    guard: Option<Guard>,
}

fn exit_code_of(status: ExitStatus) -> (RankFailure, u8) {
    if let Some(sig) = status.signal() {
        (RankFailure::Signaled(sig), (128 + sig).clamp(0, 255) as u8)
    } else {
        let c = status.code().unwrap_or(1);
        (RankFailure::Exited(c), (c & 0xff) as u8)
    }
}

fn describe(f: &RankFailure) -> String {
    match f {
        RankFailure::Exited(c) => format!("exited with status {c}"),
        RankFailure::Signaled(s) => format!("was killed by {}", sys::signal_name(*s)),
        RankFailure::Aborted { code, message } => match message {
            Some(m) if !m.is_empty() => format!("called abort with code {code}: {m}"),
            _ => format!("called abort with code {code}"),
        },
        RankFailure::ExitWithoutFinalize => "exited with status 0 without finalizing PMI".into(),
        RankFailure::PmiClosedWithoutFinalize => {
            "closed its PMI connection without finalizing".into()
        }
        RankFailure::StartFailed(e) => format!("could not be started: {e}"),
    }
}

fn eprint_line(msg: &str) {
    use std::io::Write;
    let mut e = io::stderr().lock();
    let _ = writeln!(e, "tmpirun: {msg}");
    let _ = e.flush();
}

pub(super) fn run(cfg: &LaunchConfig) -> Result<JobOutcome, LaunchError> {
    if cfg.nprocs == 0 {
        return Err(LaunchError::Config(
            "the job needs at least one rank".into(),
        ));
    }
    sys::raise_nofile_limit();
    crate::session::sweep_stale(
        &crate::session::tmp_base(),
        Path::new(crate::session::SHM_DIR),
    );

    let wake = WakePipe::new(SIGNALS).map_err(|source| LaunchError::Os {
        what: "cannot set up signal handling",
        source,
    })?;
    if cfg.adopt_orphans {
        if let Err(e) = sys::set_child_subreaper() {
            tracing::debug!(target: "tmpirun", "cannot become a child subreaper: {e}");
        }
    }
    let mut session = Session::create()?;
    let job_id = session.job_id().to_string();
    let guard = if cfg.cleanup_guard {
        match Guard::spawn(session.dir(), &job_id) {
            Ok(g) => Some(g),
            Err(e) => {
                tracing::warn!(target: "tmpirun", "cannot start the clean-up guard ({e}); if tmpirun is killed, the next tmpirun removes this job's files");
                None
            }
        }
    } else {
        None
    };
    tracing::debug!(target: "tmpirun", "job {job_id}: {} ranks of {:?}", cfg.nprocs, cfg.program);

    let server_cfg = ServerConfig {
        size: cfg.nprocs,
        kvsname: job_id.clone(),
        process_mapping: format!("(vector,(0,1,{}))", cfg.nprocs),
        appnum: 0,
        job_attrs: Vec::new(),
    };
    let (server, child_ends) = PmiServer::new(server_cfg.clone()).map_err(LaunchError::Pmi)?;
    let (handle, pmi_rx) = server.spawn().map_err(LaunchError::Pmi)?;

    // Forward PMI events into the poll loop.
    let (ev_tx, ev_rx) = mpsc::channel::<PmiEvent>();
    let waker = wake.waker().map_err(|source| LaunchError::Os {
        what: "cannot duplicate the wake-up pipe",
        source,
    })?;
    let fwd = std::thread::Builder::new()
        .name("tmpirun-pmi-events".into())
        .spawn(move || {
            for ev in pmi_rx {
                if ev_tx.send(ev).is_err() {
                    break;
                }
                sys::wake(&waker);
            }
        })
        .map_err(|source| LaunchError::Os {
            what: "cannot start a thread",
            source,
        })?;

    let mut job = Job {
        cfg,
        ranks: Vec::new(),
        pipes: Vec::new(),
        out_warned: [false; 2],
        ending: None,
        deadline: cfg.timeout.map(|t| Instant::now() + t),
        all_exited_at: None,
        guard,
    };
    job.spawn_all(&server_cfg, child_ends, session.dir(), &job_id);
    let result = job.event_loop(&wake, &ev_rx);
    if let Err(e) = &result {
        // Nothing may outlive a launcher that lost track of its job.
        eprint_line(&format!("internal error ({e}); killing the job"));
        job.signal_all(libc::SIGKILL);
    }

    handle.shutdown();
    let _ = fwd.join();
    let removed = session.cleanup();
    if removed > 0 {
        tracing::info!(target: "tmpirun", "removed {removed} leftover shared-memory segment(s)");
    }
    if let Some(g) = job.guard.take() {
        g.dismiss();
    }
    drop(wake);
    let (end, code) = result.map_err(|source| LaunchError::Os {
        what: "event loop failed",
        source,
    })?;
    Ok(JobOutcome {
        end,
        exit_code: code,
        job_id,
    })
}

impl Job<'_> {
    fn spawn_all(
        &mut self,
        server_cfg: &ServerConfig,
        child_ends: Vec<OwnedFd>,
        session_dir: &Path,
        job_id: &str,
    ) {
        let cfg = self.cfg;
        let ncpus = std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1);
        let oversubscribed = cfg.nprocs as usize > ncpus;
        let cores = match cfg.bind {
            BindTo::None => Vec::new(),
            BindTo::Core => {
                let allowed = sys::allowed_cpus().map(|s| s.cpus()).unwrap_or_default();
                let c = binding::cores(&allowed, Path::new("/sys/devices/system/cpu"));
                if c.is_empty() {
                    eprint_line("warning: no CPUs found for --bind-to core; not binding");
                } else if c.len() < cfg.nprocs as usize {
                    eprint_line(&format!(
                        "warning: {} ranks on {} cores: ranks share cores",
                        cfg.nprocs,
                        c.len()
                    ));
                }
                c
            }
        };
        let stdin_rank = match cfg.stdin {
            StdinTarget::Rank(r) if !sys::stdin_is_background_tty() => Some(r),
            StdinTarget::Rank(_) => {
                tracing::info!(target: "tmpirun", "stdin is a terminal in the background: not forwarded");
                None
            }
            StdinTarget::None => None,
        };
        let parent_pid = std::process::id();

        for (rank, end) in (0u32..).zip(child_ends) {
            if self.ending.is_some() {
                break; // an earlier rank failed already; `end` is dropped
            }
            let app = cfg.app_of(rank);
            let mca = tmpi_base::mca::encode_cmdline(app.mca);
            let mut cmd = Command::new(app.program);
            cmd.args(app.args);
            if let Some(dir) = app.wdir {
                cmd.current_dir(dir);
            }
            for k in STRIPPED_ENV {
                cmd.env_remove(k);
            }
            cmd.env("TMPI_APPNUM", app.appnum.to_string());
            for spec in app.env {
                match &spec.value {
                    Some(v) => {
                        cmd.env(&spec.name, v);
                    }
                    None => {
                        if std::env::var_os(&spec.name).is_none() && rank == 0 {
                            eprint_line(&format!(
                                "warning: -x {}: not set in tmpirun's environment",
                                spec.name
                            ));
                        }
                    }
                }
            }
            for (k, v) in server_cfg.rank_env(rank, end.as_raw_fd()) {
                cmd.env(k, v);
            }
            cmd.env("TMPI_JOB_ID", job_id);
            cmd.env("TMPI_SESSION_DIR", session_dir);
            if mca.is_empty() {
                cmd.env_remove(tmpi_base::mca::CMDLINE_ENV);
            } else {
                cmd.env(tmpi_base::mca::CMDLINE_ENV, &mca);
            }
            if oversubscribed {
                cmd.env(tmpi_base::mca::OVERSUBSCRIBED_ENV, "1");
            } else {
                cmd.env_remove(tmpi_base::mca::OVERSUBSCRIBED_ENV);
            }
            let wants_stdin = stdin_rank == Some(rank);
            cmd.stdin(if wants_stdin {
                Stdio::piped()
            } else {
                Stdio::null()
            });
            match &cfg.output_dir {
                None => {
                    cmd.stdout(Stdio::piped());
                    cmd.stderr(Stdio::piped());
                }
                Some(dir) => match output_files(dir, rank) {
                    Ok((o, e)) => {
                        cmd.stdout(o);
                        cmd.stderr(e);
                    }
                    Err(e) => {
                        drop(end);
                        let what = format!("--output-filename {}: {e}", dir.display());
                        self.fail(rank, 0, RankFailure::StartFailed(what), 1);
                        continue;
                    }
                },
            }
            let cpus =
                (!cores.is_empty()).then(|| binding::cpus_for_rank(&cores, rank, cfg.nprocs));
            if cfg.report_bindings {
                let host = tmpi_base::pmi::hostname();
                eprint_line(&match &cpus {
                    Some(c) => format!(
                        "[{host}] rank {rank} bound to CPU {}",
                        c.iter()
                            .map(|c| c.to_string())
                            .collect::<Vec<_>>()
                            .join(",")
                    ),
                    None => format!("[{host}] rank {rank} not bound"),
                });
            }
            let cpus = cpus.map(sys::CpuSet::from_cpus);
            sys::prepare_child(
                &mut cmd,
                ChildSetup {
                    keep_fd: Some(end.as_raw_fd()),
                    watch_fd: self.guard.as_ref().map(Guard::watch_fd),
                    cpus,
                    parent_pid,
                },
            );
            match cmd.spawn() {
                Ok(mut child) => {
                    drop(end);
                    let pid = child.id();
                    tracing::debug!(target: "tmpirun", "rank {rank}: pid {pid}");
                    if let Some(stdin) = child.stdin.take() {
                        forward_stdin(stdin);
                    }
                    if let Some(o) = child.stdout.take() {
                        let _ = sys::set_nonblocking(o.as_raw_fd());
                        self.pipes.push(Pipe {
                            rank,
                            stream: Stream::Stdout,
                            fd: Some(o),
                            fd_err: None,
                            fwd: LineForwarder::new(rank, Stream::Stdout, cfg.tag_output),
                        });
                    }
                    if let Some(e) = child.stderr.take() {
                        let _ = sys::set_nonblocking(e.as_raw_fd());
                        self.pipes.push(Pipe {
                            rank,
                            stream: Stream::Stderr,
                            fd: None,
                            fd_err: Some(e),
                            fwd: LineForwarder::new(rank, Stream::Stderr, cfg.tag_output),
                        });
                    }
                    self.ranks.push(Rank {
                        rank,
                        pid,
                        child: Some(child),
                        status: None,
                        exited_at: None,
                        pmi_initialized: false,
                        pmi_finalized: false,
                        aborted: None,
                        disconnected: None,
                        disconnected_at: None,
                        settled: false,
                    });
                }
                Err(e) => {
                    drop(end);
                    let code = match e.kind() {
                        io::ErrorKind::NotFound => 127,
                        io::ErrorKind::PermissionDenied => 126,
                        _ => 1,
                    };
                    let what = format!("{}: {e}", app.program.to_string_lossy());
                    self.fail(rank, 0, RankFailure::StartFailed(what), code);
                }
            }
        }
    }

    /// Starts ending the job because of `end` (first cause wins).
    fn begin_end(&mut self, end: JobEnd, code: u8, msg: &str, sig: libc::c_int) {
        if self.ending.is_some() {
            return;
        }
        eprint_line(msg);
        self.ending = Some(Ending {
            end,
            code,
            kill_at: Instant::now() + self.cfg.kill_grace,
            killed: false,
        });
        self.signal_all(sig);
    }

    fn fail(&mut self, rank: u32, pid: u32, failure: RankFailure, code: u8) {
        let msg = if pid == 0 {
            format!("rank {rank} {}; terminating the job", describe(&failure))
        } else {
            format!(
                "rank {rank} (pid {pid}) {}; terminating the job",
                describe(&failure)
            )
        };
        self.begin_end(
            JobEnd::RankFailed { rank, pid, failure },
            code,
            &msg,
            libc::SIGTERM,
        );
    }

    fn signal_all(&self, sig: libc::c_int) {
        for r in &self.ranks {
            // Reaped ranks too: their group may still hold their children.
            if let Err(e) = sys::kill_group(r.pid, sig) {
                tracing::warn!(target: "tmpirun", "cannot signal rank {} (pid {}): {e}", r.rank, r.pid);
            }
        }
        if self.cfg.adopt_orphans {
            // Adopted orphans that left their rank's process group.
            let guard = self.guard.as_ref().map(Guard::pid);
            for pid in sys::children_of_self() {
                if self.ranks.iter().any(|r| r.pid == pid && r.running()) || guard == Some(pid) {
                    continue;
                }
                tracing::debug!(target: "tmpirun", "signal {sig} to adopted process {pid}");
                let _ = sys::kill_pid(pid, sig);
            }
        }
    }

    fn reap(&mut self) {
        let now = Instant::now();
        for r in &mut self.ranks {
            let Some(child) = r.child.as_mut() else {
                continue;
            };
            match child.try_wait() {
                Ok(Some(st)) => {
                    tracing::debug!(target: "tmpirun", "rank {} (pid {}) ended: {st}", r.rank, r.pid);
                    r.status = Some(st);
                    r.exited_at = Some(now);
                    r.child = None;
                }
                Ok(None) => {}
                Err(e) => {
                    tracing::warn!(target: "tmpirun", "waiting for rank {} failed: {e}", r.rank);
                }
            }
        }
        if self.cfg.adopt_orphans {
            let keep: Vec<u32> = self
                .ranks
                .iter()
                .filter(|r| r.running())
                .map(|r| r.pid)
                .chain(self.guard.as_ref().map(Guard::pid))
                .collect();
            sys::reap_orphans(&keep);
        }
    }

    fn on_pmi(&mut self, ev: PmiEvent) {
        let now = Instant::now();
        match ev {
            PmiEvent::Initialized { rank } => {
                if let Some(r) = self.ranks.get_mut(rank as usize) {
                    r.pmi_initialized = true;
                }
            }
            PmiEvent::Finalized { rank } => {
                if let Some(r) = self.ranks.get_mut(rank as usize) {
                    r.pmi_finalized = true;
                }
            }
            PmiEvent::Abort {
                rank,
                code,
                message,
            } => {
                if let Some(r) = self.ranks.get_mut(rank as usize) {
                    r.aborted = Some((code, message.clone()));
                    let pid = r.pid;
                    r.settled = true;
                    let mut c = (code & 0xff) as u8;
                    if c == 0 {
                        c = 1;
                    }
                    self.fail(rank, pid, RankFailure::Aborted { code, message }, c);
                }
            }
            PmiEvent::Disconnected {
                rank,
                finalized,
                active,
            } => {
                if let Some(r) = self.ranks.get_mut(rank as usize) {
                    r.disconnected = Some((finalized, active));
                    r.disconnected_at = Some(now);
                    if finalized {
                        r.pmi_finalized = true;
                    }
                    if active {
                        r.pmi_initialized = true;
                    }
                }
            }
            PmiEvent::ProtocolError { rank, detail } => {
                tracing::debug!(target: "tmpirun", "rank {rank}: PMI protocol error: {detail}");
            }
        }
    }

    /// Judges exits whose PMI state is known (or waited for long enough).
    fn settle(&mut self, server_alive: bool) {
        let now = Instant::now();
        let mut failures = Vec::new();
        for r in &mut self.ranks {
            if r.settled {
                continue;
            }
            match (r.status, r.exited_at) {
                (Some(st), Some(at)) => {
                    // Once the job is ending, exits are not judged, so
                    // there is nothing to wait for.
                    // A rank killed by a signal has nothing more to
                    // say through PMI: it is settled at once, so that a
                    // killed rank is named as the cause rather than a
                    // peer that failed because of it.
                    let signaled = st.signal().is_some();
                    let graced = st.success() || now.duration_since(at) >= CAUSE_GRACE;
                    let pmi_known = signaled
                        || self.ending.is_some()
                        || now.duration_since(at) >= SETTLE
                        || (graced && (r.disconnected.is_some() || !server_alive));
                    if !pmi_known {
                        continue;
                    }
                    r.settled = true;
                    if self.ending.is_some() {
                        continue; // a consequence of the job ending, not a cause
                    }
                    if st.success() {
                        if r.pmi_initialized && !r.pmi_finalized {
                            failures.push((r.rank, r.pid, RankFailure::ExitWithoutFinalize, 1u8));
                        }
                    } else {
                        let (f, c) = exit_code_of(st);
                        failures.push((r.rank, r.pid, f, c));
                    }
                }
                _ => {
                    // Still running: a PMI connection closed without
                    // finalize is a failure unless the exit follows soon.
                    if let (Some((false, true)), Some(at)) = (r.disconnected, r.disconnected_at) {
                        if now.duration_since(at) >= SETTLE && self.ending.is_none() {
                            r.settled = true;
                            failures.push((
                                r.rank,
                                r.pid,
                                RankFailure::PmiClosedWithoutFinalize,
                                1,
                            ));
                        }
                    }
                }
            }
        }
        // Deaths by signal first (stable otherwise): when a killed rank
        // and a peer that gave up on it are reaped in one scan, the
        // killed one is the cause.
        failures.sort_by_key(|(_, _, f, _)| !matches!(f, RankFailure::Signaled(_)));
        for (rank, pid, f, c) in failures {
            self.fail(rank, pid, f, c);
        }
    }

    fn next_wakeup(&self) -> Instant {
        let now = Instant::now();
        let mut t = now + RESCAN;
        if let (Some(d), None) = (self.deadline, &self.ending) {
            t = t.min(d);
        }
        if let Some(e) = &self.ending {
            if !e.killed {
                t = t.min(e.kill_at);
            }
        }
        for r in &self.ranks {
            if !r.settled {
                if let Some(at) = r.exited_at {
                    t = t.min(at + SETTLE);
                    if now < at + CAUSE_GRACE {
                        t = t.min(at + CAUSE_GRACE);
                    }
                }
                // Only a running rank that closed PMI without finalize is
                // judged later (see `settle`).
                if let (Some((false, true)), Some(at), true, None) =
                    (r.disconnected, r.disconnected_at, r.running(), &self.ending)
                {
                    t = t.min(at + SETTLE);
                }
            }
        }
        if let Some(at) = self.all_exited_at {
            t = t.min(at + DRAIN);
        }
        t
    }

    fn read_pipe(&mut self, i: usize, buf: &mut [u8]) {
        // Bounded, so that one chatty rank cannot starve the others.
        for _ in 0..16 {
            let p = &mut self.pipes[i];
            match p.read(buf) {
                Ok(0) => {
                    let rest = p.fwd.finish();
                    let stream = p.stream;
                    p.close();
                    self.write(stream, &rest);
                    return;
                }
                Ok(n) => {
                    let out = p.fwd.feed(&buf[..n]);
                    let stream = p.stream;
                    self.write(stream, &out);
                    if n < buf.len() {
                        return;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) => {
                    tracing::debug!(target: "tmpirun", "output of rank {}: {e}", p.rank);
                    let rest = p.fwd.finish();
                    let stream = p.stream;
                    p.close();
                    self.write(stream, &rest);
                    return;
                }
            }
        }
    }

    fn write(&mut self, stream: Stream, bytes: &[u8]) {
        let i = match stream {
            Stream::Stdout => 0,
            Stream::Stderr => 1,
        };
        write_out(stream, bytes, &mut self.out_warned[i]);
    }

    fn on_signal(&mut self, sig: libc::c_int) {
        match sig {
            libc::SIGCHLD => {}
            libc::SIGTSTP => {
                // Stop the ranks, then ourselves (as the default action
                // would); SIGCONT resumes us and is forwarded below.
                tracing::info!(target: "tmpirun", "stopping the job");
                self.signal_all(libc::SIGTSTP);
                sys::stop_self();
            }
            libc::SIGUSR1 | libc::SIGUSR2 | libc::SIGCONT => {
                tracing::info!(target: "tmpirun", "forwarding {}", sys::signal_name(sig));
                self.signal_all(sig);
            }
            libc::SIGINT | libc::SIGTERM | libc::SIGHUP => {
                if let Some(e) = &mut self.ending {
                    if !e.killed {
                        eprint_line(&format!(
                            "received {} again; killing the job",
                            sys::signal_name(sig)
                        ));
                        e.kill_at = Instant::now();
                    }
                    return;
                }
                let msg = format!(
                    "received {}; forwarding it to the ranks and terminating the job",
                    sys::signal_name(sig)
                );
                self.begin_end(JobEnd::Signaled(sig), (128 + sig) as u8, &msg, sig);
            }
            _ => {}
        }
    }

    fn event_loop(
        &mut self,
        wake: &WakePipe,
        events: &Receiver<PmiEvent>,
    ) -> io::Result<(JobEnd, u8)> {
        let mut buf = vec![0u8; 64 * 1024];
        let mut server_alive = true;
        let mut kill_given_up = false;
        loop {
            // Gather what happened.
            loop {
                match events.try_recv() {
                    Ok(ev) => self.on_pmi(ev),
                    Err(TryRecvError::Empty) => break,
                    Err(TryRecvError::Disconnected) => {
                        server_alive = false;
                        break;
                    }
                }
            }
            self.reap();
            self.settle(server_alive);
            let now = Instant::now();

            if self.ending.is_none() {
                if let Some(d) = self.deadline {
                    if now >= d {
                        let t = self.cfg.timeout.unwrap_or_default();
                        let running: Vec<String> = self
                            .ranks
                            .iter()
                            .filter(|r| r.running())
                            .map(|r| r.rank.to_string())
                            .collect();
                        let msg = format!(
                            "job timed out after {} s (ranks still running: {}); terminating the job",
                            t.as_secs_f64(),
                            if running.is_empty() { "none".into() } else { running.join(",") }
                        );
                        self.begin_end(JobEnd::TimedOut(t), 124, &msg, libc::SIGTERM);
                    }
                }
            }
            let (kill_now, give_up) = match &self.ending {
                Some(e) => (
                    !e.killed && now >= e.kill_at,
                    e.killed && now >= e.kill_at + AFTER_KILL && !kill_given_up,
                ),
                None => (false, false),
            };
            if kill_now {
                if let Some(e) = &mut self.ending {
                    e.killed = true;
                }
                let still: Vec<u32> = self
                    .ranks
                    .iter()
                    .filter(|r| r.running())
                    .map(|r| r.rank)
                    .collect();
                if !still.is_empty() {
                    let list: Vec<String> = still.iter().map(u32::to_string).collect();
                    tracing::info!(target: "tmpirun", "sending SIGKILL to ranks {}", list.join(", "));
                }
                self.signal_all(libc::SIGKILL);
            }
            if give_up {
                kill_given_up = true;
                for r in self.ranks.iter().filter(|r| r.running()) {
                    eprint_line(&format!(
                        "rank {} (pid {}) did not exit after SIGKILL; giving up on it",
                        r.rank, r.pid
                    ));
                }
            }

            let all_exited = self.ranks.iter().all(|r| !r.running()) || kill_given_up;
            let all_settled = self.ranks.iter().all(|r| r.settled || r.running());
            if all_exited && all_settled && self.all_exited_at.is_none() {
                self.all_exited_at = Some(now);
                // Nothing of the job may outlive it.
                self.signal_all(libc::SIGKILL);
                if let Some(e) = &mut self.ending {
                    e.killed = true;
                }
            }
            let open: Vec<usize> = (0..self.pipes.len())
                .filter(|&i| self.pipes[i].raw().is_some())
                .collect();
            if let Some(at) = self.all_exited_at {
                if open.is_empty() || now >= at + DRAIN {
                    break;
                }
            }

            // Wait.
            let mut fds = vec![wake.read_fd()];
            fds.extend(open.iter().filter_map(|&i| self.pipes[i].raw()));
            let timeout = self.next_wakeup().saturating_duration_since(Instant::now());
            let ready = sys::poll_readable(&fds, Some(timeout))?;
            if ready[0].readable {
                for sig in wake.drain() {
                    if sig != 0 {
                        self.on_signal(sig as libc::c_int);
                    }
                }
            }
            for (k, &i) in open.iter().enumerate() {
                if ready[k + 1].readable {
                    self.read_pipe(i, &mut buf);
                }
            }
        }
        // Flush partial lines of pipes still open (held by stray processes).
        for i in 0..self.pipes.len() {
            if self.pipes[i].raw().is_some() {
                let rest = self.pipes[i].fwd.finish();
                let stream = self.pipes[i].stream;
                self.pipes[i].close();
                self.write(stream, &rest);
            }
        }
        Ok(match self.ending.take() {
            Some(e) => (e.end, e.code),
            None => (JobEnd::Success, 0),
        })
    }
}

/// Copies our standard input to the rank's on a detached thread; ends at
/// EOF (closing the rank's stdin) or when the rank stops reading.
fn forward_stdin(mut to: ChildStdin) {
    let r = std::thread::Builder::new()
        .name("tmpirun-stdin".into())
        .spawn(move || {
            let mut from = io::stdin().lock();
            if let Err(e) = io::copy(&mut from, &mut to) {
                tracing::debug!(target: "tmpirun", "stdin forwarding ended: {e}");
            }
        });
    if let Err(e) = r {
        tracing::warn!(target: "tmpirun", "cannot forward stdin: {e}");
    }
}

/// `DIR/1/rank.R/{stdout,stderr}` for `--output-filename DIR` (Open MPI's
/// layout; `1` is the job), created or truncated.
fn output_files(dir: &std::path::Path, rank: u32) -> io::Result<(std::fs::File, std::fs::File)> {
    let d = dir.join("1").join(format!("rank.{rank}"));
    std::fs::create_dir_all(&d)?;
    Ok((
        std::fs::File::create(d.join("stdout"))?,
        std::fs::File::create(d.join("stderr"))?,
    ))
}
