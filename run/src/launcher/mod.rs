//! The `tmpirun` launcher: starts the ranks of one job on this machine with
//! the built-in PMI server, forwards their I/O and signals, and ends the job
//! as a whole.
//!
//! # Rank environment
//! Each rank inherits `tmpirun`'s environment, minus variables of an outer
//! launcher that would confuse the PMI client (`PMI_JOBID`, `PMI_PORT`,
//! `PMI_ID`, `PMI_SPAWNED`, `PMI_HOSTNAME`), plus the `-x` variables, plus:
//! `PMI_FD`, `PMI_RANK`, `PMI_SIZE` (as under Hydra; `PMI_JOBID` is not set,
//! so clients speak PMI-1 unless told otherwise), `TMPI_JOB_ID` (the job id,
//! also the PMI kvsname), `TMPI_SESSION_DIR`, `TMPI_CMDLINE_MCA` (all
//! `--mca` pairs, see [`tmpi_base::mca::encode_cmdline`]; removed when there
//! are none) and `TMPI_LAUNCH_OVERSUBSCRIBED=1` when the ranks outnumber the
//! CPUs available to `tmpirun` ([`std::thread::available_parallelism`],
//! which honours the affinity mask and cgroup quotas); `mpi_yield_when_idle
//! = auto` resolves from it.
//!
//! # Processes
//! Every rank is the leader of its own process group, so signals reach the
//! processes it starts too. Ranks get `PR_SET_PDEATHSIG = SIGKILL`: they die
//! if `tmpirun` is killed (precisely: when the thread that called [`run`]
//! ends). Standard input goes to one rank (rank 0 by default; not forwarded
//! when standard input is a terminal of which `tmpirun` is in the
//! background); the others read `/dev/null`. Standard output and error are
//! forwarded line by line (see [`output`]).
//!
//! # How a job ends
//! * **Success**: every rank exited with status 0, and none of them had
//!   initialized PMI without finalizing it. A program that never spoke PMI
//!   (e.g. `sh -c 'exit 0'`) and exits 0 is a success, as under Hydra.
//! * **Failure** — the first of these ends the job: a rank exits non-zero,
//!   is killed by a signal, calls PMI `abort`, exits 0 after PMI `init`
//!   without `finalize`, or closes its PMI connection without `finalize`
//!   and does not exit within [`SETTLE`]. `tmpirun` prints one line naming
//!   the rank, its pid and what happened, sends SIGTERM to every rank's
//!   process group, SIGKILL after the grace period, and exits with: the
//!   rank's exit status; 128+N for signal N; the abort code for an abort
//!   (taken modulo 256, and 1 if that is 0, because an abort must fail the
//!   job); 1 for a missing finalize; 127/126 when the program cannot be
//!   found/executed.
//! * **Timeout** (`--timeout`): a message and exit status 124.
//! * **Signals**: SIGINT, SIGTERM and SIGHUP received by `tmpirun` are
//!   forwarded to every rank's process group and end the job with 128+N; a
//!   second one sends SIGKILL at once. SIGUSR1/SIGUSR2 are only forwarded.
//!   SIGTSTP (Ctrl-Z) is forwarded and then stops `tmpirun` itself;
//!   SIGCONT is forwarded (a `--timeout` keeps counting while stopped).
//!
//! To tell an exit-0-without-finalize from a late `finalize` event, the
//! launcher waits (at most [`SETTLE`]) for the rank's PMI connection to close
//! before judging an exit; normally this takes microseconds.
//!
//! When all ranks have exited, members left in their process groups
//! (background children of a rank) are sent SIGKILL, so nothing of the job
//! survives it. With [`LaunchConfig::adopt_orphans`] (the default) the
//! launcher is a child subreaper, so processes that left a rank's process
//! group (`setsid`, double-fork daemons) are adopted once orphaned, get the
//! same signals as the ranks, and are killed at the end too; a descendant
//! whose parent is still alive when the job ends and that left its group is
//! not found (a limitation without cgroups). Then the session directory and leftover shared-memory
//! segments are removed ([`crate::session`]). On a SIGKILL of `tmpirun`
//! itself the ranks die with it, and its clean-up guard removes the same
//! files once the last of them is gone ([`guard`]; each rank holds one more
//! descriptor, the guard's pipe, for that).

pub mod args;
pub mod binding;
pub mod guard;
pub mod handoff;
mod job;
pub mod output;
pub mod sys;

use std::ffi::OsString;
use std::time::Duration;

pub use args::{parse_args, ArgError, Invocation, USAGE};

/// Default time between SIGTERM and SIGKILL when the job ends.
pub const DEFAULT_KILL_GRACE: Duration = Duration::from_secs(2);

/// Longest wait for a rank's PMI connection to close after it exited (and
/// for its exit after its connection closed without finalize).
pub const SETTLE: Duration = Duration::from_secs(1);

/// How ranks are bound to CPUs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BindTo {
    /// No binding (default).
    None,
    /// Rank r on core r, in blocks when ranks outnumber cores (see
    /// [`binding`]).
    Core,
}

/// Which rank receives `tmpirun`'s standard input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StdinTarget {
    /// This rank; the others get `/dev/null`.
    Rank(u32),
    /// Nobody: all ranks get `/dev/null`.
    None,
}

/// One `-x` option.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnvSpec {
    /// Variable name.
    pub name: String,
    /// `Some(v)` for `-x NAME=v`; `None` for `-x NAME`, which exports
    /// `tmpirun`'s own value (a warning if it has none).
    pub value: Option<OsString>,
}

/// Everything that defines one job.
#[derive(Debug, Clone, PartialEq)]
pub struct LaunchConfig {
    /// Number of ranks, at least 1.
    pub nprocs: u32,
    /// The program (looked up in `PATH` like a shell would).
    pub program: OsString,
    /// Its arguments.
    pub args: Vec<OsString>,
    /// `--mca` pairs in command-line order.
    pub mca: Vec<(String, String)>,
    /// `-x` variables in command-line order.
    pub env: Vec<EnvSpec>,
    /// `--tag-output`.
    pub tag_output: bool,
    /// `--timeout` (or `MPIEXEC_TIMEOUT`).
    pub timeout: Option<Duration>,
    /// `--bind-to`.
    pub bind: BindTo,
    /// Time between SIGTERM and SIGKILL.
    pub kill_grace: Duration,
    /// Where standard input goes.
    pub stdin: StdinTarget,
    /// `--verbose`.
    pub verbose: bool,
    /// Become a child subreaper so that processes which escape a rank's
    /// process group (`setsid`, daemons) are adopted and ended with the job
    /// (default `true`). Every child of the calling process that is not a
    /// rank is then treated as part of the job: turn this off when calling
    /// [`run`] from a process that has children of its own.
    pub adopt_orphans: bool,
    /// Working directory of the ranks of the first program (`-wdir`);
    /// `None`: tmpirun's own.
    pub wdir: Option<std::path::PathBuf>,
    /// `--report-bindings`: print each rank's CPU binding on stderr.
    pub report_bindings: bool,
    /// `--output-filename DIR`: each rank's standard output and error go to
    /// `DIR/1/rank.<R>/stdout` and `.../stderr` (Open MPI's layout) instead
    /// of tmpirun's.
    pub output_dir: Option<std::path::PathBuf>,
    /// MPMD (`tmpirun -n 1 ./a : -n 2 ./b`): the programs after the first,
    /// each with its own ranks, arguments, `--mca`, `-x` and `-wdir`.
    /// Ranks are numbered in order: `nprocs` counts every part, the
    /// first part has `nprocs` minus the others' ranks. Each rank gets its
    /// part's index in `TMPI_APPNUM` (MPI's `MPI_APPNUM`).
    pub apps: Vec<AppContext>,
    /// Start the clean-up guard ([`guard`]): a second copy of the running
    /// executable that removes the job's files if the launcher is killed
    /// with SIGKILL. The executable must call [`guard::main_if_guard`]
    /// first thing in `main`, as `tmpirun` does; so this is `true` for
    /// `tmpirun`'s command line ([`parse_args`]) and `false` in
    /// [`LaunchConfig::new`].
    pub cleanup_guard: bool,
}

impl LaunchConfig {
    /// A configuration with defaults for everything but the essentials.
    pub fn new(nprocs: u32, program: impl Into<OsString>) -> Self {
        LaunchConfig {
            nprocs,
            program: program.into(),
            args: Vec::new(),
            mca: Vec::new(),
            env: Vec::new(),
            tag_output: false,
            timeout: None,
            bind: BindTo::None,
            kill_grace: DEFAULT_KILL_GRACE,
            stdin: StdinTarget::Rank(0),
            verbose: false,
            adopt_orphans: true,
            cleanup_guard: false,
            wdir: None,
            report_bindings: false,
            output_dir: None,
            apps: Vec::new(),
        }
    }

    /// The part of an MPMD job that `rank` belongs to: its index (the
    /// `MPI_APPNUM`), program, arguments, `--mca` pairs (the first part's
    /// then its own), `-x` variables and working directory.
    pub fn app_of(&self, rank: u32) -> AppView<'_> {
        let first = self.nprocs - self.apps.iter().map(|a| a.nprocs).sum::<u32>();
        let mut start = first;
        if rank >= first {
            for (i, a) in self.apps.iter().enumerate() {
                if rank < start + a.nprocs {
                    return AppView {
                        appnum: i as u32 + 1,
                        program: &a.program,
                        args: &a.args,
                        mca: &a.mca,
                        env: &a.env,
                        wdir: a.wdir.as_deref(),
                    };
                }
                start += a.nprocs;
            }
        }
        AppView {
            appnum: 0,
            program: &self.program,
            args: &self.args,
            mca: &self.mca,
            env: &self.env,
            wdir: self.wdir.as_deref(),
        }
    }
}

/// One program of an MPMD command line after the first.
#[derive(Debug, Clone, PartialEq)]
pub struct AppContext {
    /// Its ranks.
    pub nprocs: u32,
    /// The program.
    pub program: OsString,
    /// Its arguments.
    pub args: Vec<OsString>,
    /// Its `--mca` pairs.
    pub mca: Vec<(String, String)>,
    /// Its `-x` variables.
    pub env: Vec<EnvSpec>,
    /// Its `-wdir`.
    pub wdir: Option<std::path::PathBuf>,
}

/// What [`LaunchConfig::app_of`] returns.
#[derive(Debug, Clone, Copy)]
pub struct AppView<'a> {
    /// The part's index (0 for the first program).
    pub appnum: u32,
    /// The program.
    pub program: &'a OsString,
    /// Its arguments.
    pub args: &'a [OsString],
    /// Its `--mca` pairs.
    pub mca: &'a [(String, String)],
    /// Its `-x` variables.
    pub env: &'a [EnvSpec],
    /// Its working directory.
    pub wdir: Option<&'a std::path::Path>,
}

/// What went wrong with one rank.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RankFailure {
    /// Exited with a non-zero status.
    Exited(i32),
    /// Killed by a signal.
    Signaled(i32),
    /// Called PMI abort.
    Aborted {
        /// The code it gave.
        code: i32,
        /// Its message.
        message: Option<String>,
    },
    /// Exited with status 0 after PMI init without finalize.
    ExitWithoutFinalize,
    /// Closed its PMI connection without finalize and kept running.
    PmiClosedWithoutFinalize,
    /// Could not be started.
    StartFailed(String),
}

/// How the job ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JobEnd {
    /// All ranks succeeded.
    Success,
    /// A rank failed first.
    RankFailed {
        /// The rank.
        rank: u32,
        /// Its pid (0 if it never started).
        pid: u32,
        /// What happened.
        failure: RankFailure,
    },
    /// `--timeout` expired.
    TimedOut(Duration),
    /// `tmpirun` received this signal.
    Signaled(i32),
}

/// The result of [`run`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobOutcome {
    /// How the job ended.
    pub end: JobEnd,
    /// The status `tmpirun` exits with.
    pub exit_code: u8,
    /// The job id that was used.
    pub job_id: String,
}

/// Errors that prevent a job from being set up.
#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    /// The session could not be created.
    #[error(transparent)]
    Session(#[from] crate::session::SessionError),
    /// The PMI server could not be started.
    #[error("cannot start the PMI server: {0}")]
    Pmi(#[source] std::io::Error),
    /// Signal handling, pipes or polling failed.
    #[error("{what}: {source}")]
    Os {
        /// What was being done.
        what: &'static str,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// Invalid configuration (e.g. zero ranks).
    #[error("invalid job configuration: {0}")]
    Config(String),
}

/// Runs one job to its end (see the module docs for the semantics). Prints
/// the ranks' output and the launcher's messages on this process's stdout
/// and stderr. Installs signal handlers for the duration of the call, so
/// only one job may run at a time in a process.
pub fn run(cfg: &LaunchConfig) -> Result<JobOutcome, LaunchError> {
    job::run(cfg)
}
