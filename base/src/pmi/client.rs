//! The PMI client: PMI-1 and PMI-2 over the launcher's socket, or a
//! singleton job of one when there is no launcher.
//!
//! The client is strictly lockstep (one request in flight, every method takes
//! `&mut self`), writes each message with one `write`, keeps PMI-1 lines
//! within 1024 bytes and sends the `init` line alone and exactly as Slurm
//! expects (`reference/pmi.md` §6).

use std::collections::HashMap;
use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;

use base64::Engine as _;

use super::fd::{adopt_pmi_fd, clear_live_fd, set_live_fd};
use super::mapping::parse_process_mapping;
use super::pmix_sys::{Pmix, Value as PmixValue, RANK_WILDCARD};
use super::wire::{
    encode_abort_text, format_v1_line, format_v2_frame, parse_v1_line, parse_v2_frame, Message,
    WireError, ABORT_TEXT_KEY, KEYLEN_MAX, KVSNAME_MAX, V1_MAX_LINE, V2_MAX_BODY, VALLEN_MAX,
};
use crate::identity::{sanitize_job_id, ProcessInfo};

/// `PMIX_MAX_KEYLEN` + 1 (the limit counts a NUL, as PMI's do).
const PMIX_KEYLEN_MAX: usize = 512;
/// Values the client puts through PMIx in one piece (the PMIx limit is
/// memory; this keeps a modex value in one key).
const PMIX_VALLEN_MAX: usize = 1 << 20;

/// Longest PMI-1 response line the client buffers.
const MAX_V1_RESPONSE: usize = 64 * 1024;

/// The largest job the client accepts from a launcher (2^24 = 16 777 216
/// ranks, beyond any machine built so far). A server that claims more is
/// refused: the client allocates per-rank tables (node map, host names) of
/// the job's size, and a corrupt or hostile `size=4000000000` would
/// otherwise ask for tens of gigabytes (fuzz finding, docs/fuzzing.md).
pub const MAX_JOB_SIZE: u32 = 1 << 24;

/// `rank` and `size` from a launcher, checked: a job of 1 to
/// [`MAX_JOB_SIZE`] ranks and a rank inside it.
fn check_job(rank: u32, size: u32) -> Result<(), String> {
    if size == 0 || size > MAX_JOB_SIZE {
        return Err(format!("job size {size} outside 1..={MAX_JOB_SIZE}"));
    }
    if rank >= size {
        return Err(format!("rank {rank} not below the job size {size}"));
    }
    Ok(())
}

/// Errors of the PMI client.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PmiError {
    /// An environment variable has an unusable value or is missing.
    #[error("PMI environment: {var}={value:?}: {reason}")]
    Env {
        /// The variable.
        var: &'static str,
        /// Its value (empty when missing).
        value: String,
        /// What is wrong.
        reason: String,
    },
    /// The PMI descriptor could not be adopted.
    #[error("PMI_FD: {0}")]
    Fd(String),
    /// Reading or writing the PMI socket failed.
    #[error("PMI I/O during {during}: {source}")]
    Io {
        /// The command being exchanged.
        during: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The server closed the connection.
    #[error("PMI server closed the connection during {during}")]
    Closed {
        /// The command being exchanged.
        during: String,
    },
    /// A message could not be encoded or decoded.
    #[error("PMI message during {during}: {source}")]
    Wire {
        /// The command being exchanged.
        during: String,
        /// The codec error.
        #[source]
        source: WireError,
    },
    /// The server answered something unexpected.
    #[error("PMI protocol error during {during}: {detail}")]
    Protocol {
        /// The command being exchanged.
        during: String,
        /// What was wrong.
        detail: String,
    },
    /// The server reported failure (`rc != 0`).
    #[error("PMI {cmd} failed with rc={rc}{}", msg.as_ref().map(|m| format!(": {m}")).unwrap_or_default())]
    Rc {
        /// The command.
        cmd: String,
        /// The server's return code.
        rc: i32,
        /// The server's `msg`/`errmsg`.
        msg: Option<String>,
    },
    /// A key the PMI servers cannot store.
    #[error("PMI key {key:?}: {reason}")]
    InvalidKey {
        /// The key.
        key: String,
        /// Why.
        reason: String,
    },
    /// A value the PMI servers cannot store (forbidden character or too long).
    #[error("PMI value for key {key:?}: {reason}")]
    InvalidValue {
        /// The key.
        key: String,
        /// Why.
        reason: String,
    },
    /// The client was used after `finalize`.
    #[error("PMI client used after finalize")]
    Finalized,
    /// A PMIx call failed; `message` is the runtime's text for `status`.
    #[error("{call} failed: {message} (PMIx status {status})")]
    Pmix {
        /// The PMIx function.
        call: &'static str,
        /// PMIx's status code.
        status: i32,
        /// PMIx's description of it (`PMIx_Error_string`).
        message: String,
    },
    /// A PMIx server started this process but the PMIx library cannot be
    /// loaded.
    #[error("started by a PMIx launcher ({var} is set) but {reason}; install the PMIx library (Debian: apt-get install libpmix2), or start the program with tmpirun, Hydra's mpiexec or srun --mpi=pmi2")]
    PmixUnavailable {
        /// The variable that named the PMIx launcher.
        var: &'static str,
        /// What went wrong loading libpmix.
        reason: String,
    },
}

impl From<super::pmix_sys::CallError> for PmiError {
    fn from(e: super::pmix_sys::CallError) -> Self {
        PmiError::Pmix {
            call: e.call,
            status: e.status,
            message: e.text,
        }
    }
}

/// Which protocol a client speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PmiVersion {
    /// PMI-1.1 "simple" line protocol.
    V1,
    /// PMI-2.0 length-prefixed protocol.
    V2,
    /// No launcher: a job of one, with a KVS inside the process.
    Singleton,
    /// PMIx through the reference library (`libpmix.so.2`): Open MPI's
    /// `mpirun`, PRRTE's `prterun`, Slurm's `srun --mpi=pmix`.
    Pmix,
}

/// How to connect, normally derived from the environment by
/// [`PmiClient::connect_from_env`]; tests fill it themselves.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConnectOptions {
    /// `PMI_RANK`: required by PMI-1 (the protocol cannot tell the rank),
    /// sent as `pmirank` by PMI-2 when `pmi_id` is unset.
    pub rank: Option<u32>,
    /// `PMI_SIZE`: required by PMI-1.
    pub size: Option<u32>,
    /// `PMI_JOBID` (Slurm): sent as `pmijobid` in the PMI-2 `fullinit`.
    pub jobid: Option<String>,
    /// `PMI_ID`: sent as `pmirank` by PMI-2 in preference to `rank`.
    pub pmi_id: Option<u32>,
}

/// The environment variables [`PmiClient::connect_from_env`] reads.
pub const ENV_VARS: &[&str] = &[
    "PMI_FD",
    "PMI_PORT",
    "PMI_RANK",
    "PMI_SIZE",
    "PMI_JOBID",
    "PMI_ID",
    "TMPI_PMI_VERSION",
    "PMIX_NAMESPACE",
    "PMIX_RANK",
    "OMPI_COMM_WORLD_SIZE",
    CLIENT_ENV,
];

/// The MCA parameter `pmi_client` (`auto`, `pmi1`, `pmi2`, `pmix`,
/// `singleton`) as an environment variable; `tmpirun --mca pmi_client X`
/// and the parameter files set it too.
pub const CLIENT_ENV: &str = "TMPI_MCA_pmi_client";

/// The values of the `pmi_client` parameter.
pub const CLIENT_CHOICES: &[&str] = &["auto", "pmi1", "pmi2", "pmix", "singleton"];

/// The transport: the inherited socketpair end, or TCP for `PMI_PORT`.
enum Stream {
    Unix(UnixStream),
    Tcp(TcpStream),
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Stream::Unix(s) => s.read(buf),
            Stream::Tcp(s) => s.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            Stream::Unix(s) => s.write(buf),
            Stream::Tcp(s) => s.write(buf),
        }
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

struct Conn {
    stream: Stream,
    /// Received bytes not yet consumed (the server never sends unsolicited
    /// data, but a read may return more than one reply's bytes after init).
    buf: Vec<u8>,
}

impl Drop for Conn {
    fn drop(&mut self) {
        if let Stream::Unix(s) = &self.stream {
            clear_live_fd(s.as_raw_fd());
        }
    }
}

impl Conn {
    fn io_err(during: &str, source: std::io::Error) -> PmiError {
        PmiError::Io {
            during: during.to_string(),
            source,
        }
    }

    fn write_msg(&mut self, bytes: &[u8], during: &str) -> Result<(), PmiError> {
        tracing::trace!(target: "pmi", "client -> {:?}", String::from_utf8_lossy(bytes));
        // One write per message: a Unix stream socket takes a message of this
        // size whole; write_all only loops on a (never seen) short write.
        self.stream
            .write_all(bytes)
            .map_err(|e| Self::io_err(during, e))
    }

    fn fill(&mut self, during: &str) -> Result<(), PmiError> {
        let mut chunk = [0u8; 4096];
        loop {
            match self.stream.read(&mut chunk) {
                Ok(0) => {
                    return Err(PmiError::Closed {
                        during: during.to_string(),
                    })
                }
                Ok(n) => {
                    self.buf.extend_from_slice(&chunk[..n]);
                    return Ok(());
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => return Err(Self::io_err(during, e)),
            }
        }
    }

    fn read_v1(&mut self, during: &str) -> Result<Message, PmiError> {
        loop {
            if let Some(nl) = self.buf.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = self.buf.drain(..=nl).collect();
                tracing::trace!(target: "pmi", "client <- {:?}", String::from_utf8_lossy(&line));
                return parse_v1_line(&line).map_err(|source| PmiError::Wire {
                    during: during.to_string(),
                    source,
                });
            }
            if self.buf.len() > MAX_V1_RESPONSE {
                return Err(PmiError::Protocol {
                    during: during.to_string(),
                    detail: "response line too long".into(),
                });
            }
            self.fill(during)?;
        }
    }

    fn read_v2(&mut self, during: &str) -> Result<Message, PmiError> {
        loop {
            match parse_v2_frame(&self.buf, V2_MAX_BODY) {
                Ok(Some((msg, used))) => {
                    tracing::trace!(target: "pmi", "client <- {:?}", String::from_utf8_lossy(&self.buf[..used]));
                    self.buf.drain(..used);
                    return Ok(msg);
                }
                Ok(None) => self.fill(during)?,
                Err(source) => {
                    return Err(PmiError::Wire {
                        during: during.to_string(),
                        source,
                    })
                }
            }
        }
    }
}

/// A connection to the job's PMI server (or a singleton stand-in).
pub struct PmiClient {
    conn: Option<Conn>,
    version: PmiVersion,
    rank: u32,
    size: u32,
    appnum: i32,
    kvsname: String,
    keylen_max: usize,
    vallen_max: usize,
    /// The singleton's KVS.
    local: HashMap<String, String>,
    /// The PMIx session (`PmiVersion::Pmix`).
    pmix: Option<Pmix>,
    finalized: bool,
    info: Option<ProcessInfo>,
}

impl std::fmt::Debug for PmiClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PmiClient")
            .field("version", &self.version)
            .field("rank", &self.rank)
            .field("size", &self.size)
            .field("kvsname", &self.kvsname)
            .finish_non_exhaustive()
    }
}

fn env_u32(var: &'static str, value: Option<String>) -> Result<Option<u32>, PmiError> {
    match value {
        None => Ok(None),
        Some(v) => v
            .trim()
            .parse::<u32>()
            .map(Some)
            .map_err(|_| PmiError::Env {
                var,
                value: v,
                reason: "not a non-negative integer".into(),
            }),
    }
}

fn check_rc(msg: &Message, during: &str) -> Result<(), PmiError> {
    match msg.rc() {
        Ok(0) => Ok(()),
        Ok(rc) => Err(PmiError::Rc {
            cmd: during.to_string(),
            rc,
            msg: msg
                .get("msg")
                .or_else(|| msg.get("errmsg"))
                .map(str::to_string),
        }),
        Err(raw) => Err(PmiError::Protocol {
            during: during.to_string(),
            detail: format!("rc={raw:?} is not a number"),
        }),
    }
}

fn expect_cmd(msg: &Message, cmd: &str, during: &str) -> Result<(), PmiError> {
    if msg.cmd == cmd {
        Ok(())
    } else {
        Err(PmiError::Protocol {
            during: during.to_string(),
            detail: format!("expected {cmd}, got {msg:?}"),
        })
    }
}

fn field<'m>(msg: &'m Message, key: &str, during: &str) -> Result<&'m str, PmiError> {
    msg.get(key).ok_or_else(|| PmiError::Protocol {
        during: during.to_string(),
        detail: format!("no {key} in {msg:?}"),
    })
}

fn field_num<T: std::str::FromStr>(msg: &Message, key: &str, during: &str) -> Result<T, PmiError> {
    let v = field(msg, key, during)?;
    v.trim().parse::<T>().map_err(|_| PmiError::Protocol {
        during: during.to_string(),
        detail: format!("{key}={v:?} is not a number"),
    })
}

/// This host's name (from the kernel's UTS namespace), `localhost` if unknown.
pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok().filter(|h| !h.is_empty()))
        .unwrap_or_else(|| "localhost".to_string())
}

/// The variable that says a PMIx server started this process
/// (`PMIX_NAMESPACE`, else `PMIX_RANK`), with its value.
fn pmix_launcher(env: &impl Fn(&str) -> Option<String>) -> Option<(&'static str, String)> {
    env("PMIX_NAMESPACE")
        .filter(|v| !v.is_empty())
        .map(|v| ("PMIX_NAMESPACE", v))
        .or_else(|| {
            env("PMIX_RANK")
                .filter(|v| !v.is_empty())
                .map(|v| ("PMIX_RANK", v))
        })
}

/// Whether the launcher says the job has one process (Open MPI's
/// `OMPI_COMM_WORLD_SIZE=1`, Slurm's `SLURM_STEP_NUM_TASKS=1`).
fn one_process_job(env: &impl Fn(&str) -> Option<String>) -> bool {
    let one = |var| env(var).as_deref().map(str::trim) == Some("1");
    one("OMPI_COMM_WORLD_SIZE") || one("SLURM_STEP_NUM_TASKS")
}

/// A launcher tmpi cannot talk to, recognised by what it sets instead of
/// `PMI_FD`/`PMI_PORT` or PMIx's variables: Open MPI before PMIx (ORTE
/// of Open MPI 1.x) sets only `OMPI_COMM_WORLD_SIZE`. Each process would
/// otherwise run as a job of its own, every one rank 0 of 1, and the
/// program would compute the wrong thing without a word; so the start
/// fails, saying why. A one-process job is a singleton anyway and runs.
fn foreign_launcher(env: &impl Fn(&str) -> Option<String>) -> Result<(), PmiError> {
    if one_process_job(env) {
        return Ok(());
    }
    let Some(value) = env("OMPI_COMM_WORLD_SIZE") else {
        return Ok(());
    };
    Err(PmiError::Env {
        var: "OMPI_COMM_WORLD_SIZE",
        value,
        reason: "started by an Open MPI launcher that serves neither PMI nor PMIx to tmpi \
                 (no PMI_FD, PMI_PORT or PMIX_NAMESPACE); each process would run alone as a \
                 job of one. Start it with tmpirun (tmpi's mpirun), Hydra's mpiexec, \
                 an Open MPI 4 or later mpirun, or srun --mpi=pmix or --mpi=pmi2"
            .into(),
    })
}

/// Registers (idempotently) the MCA parameter `pmi_client`.
pub fn register_client(
    reg: &crate::mca::Registry,
) -> Result<crate::mca::Param<String>, crate::mca::McaError> {
    reg.register_enum(
        crate::mca::ParamSpec::new("pmi", "", "client")
            .help(
                "How a process learns its job: auto (PMI_FD/PMI_PORT: PMI-1 or PMI-2; \
                 PMIX_NAMESPACE: PMIx through libpmix.so.2; neither: a job of one), \
                 or forced: pmi1, pmi2, pmix, singleton",
            )
            .level(crate::mca::Level::UserDetail),
        CLIENT_CHOICES,
        "auto",
    )
}

/// The application number the launcher gave the last client connected in
/// this process (−1 before, and when the launcher has none, as Slurm).
static JOB_APPNUM: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(-1);

/// This process's application number (its program's index in an MPMD job)
/// as the launcher told the PMI or PMIx client (PMI-1 `get_appnum`, PMI-2
/// `fullinit`, PMIx `pmix.appnum`); `None` before a client connected or
/// when the launcher gives none. For code that cannot reach the client (the
/// C interface's `MPI_APPNUM`).
pub fn job_appnum() -> Option<i32> {
    let n = JOB_APPNUM.load(std::sync::atomic::Ordering::Relaxed);
    (n >= 0).then_some(n)
}

/// The `pmi_client` choice.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Choice {
    Auto,
    Pmi1,
    Pmi2,
    Pmix,
    Singleton,
}

fn parse_choice(var: &'static str, text: &str) -> Result<Choice, PmiError> {
    match text.trim().to_ascii_lowercase().as_str() {
        "" | "auto" => Ok(Choice::Auto),
        "pmi1" => Ok(Choice::Pmi1),
        "pmi2" => Ok(Choice::Pmi2),
        "pmix" => Ok(Choice::Pmix),
        "singleton" => Ok(Choice::Singleton),
        _ => Err(PmiError::Env {
            var,
            value: text.to_string(),
            reason: format!("must be one of {}", CLIENT_CHOICES.join(", ")),
        }),
    }
}

impl PmiClient {
    /// Connects to the launcher named by the environment.
    ///
    /// * `PMI_FD` set: adopt that socket (made close-on-exec). The protocol
    ///   is PMI-2 when `TMPI_PMI_VERSION=2`, PMI-1 when `TMPI_PMI_VERSION=1`;
    ///   otherwise PMI-2 when `PMI_JOBID` is set (Slurm `--mpi=pmi2` sets it,
    ///   and a Slurm node fixes one version for all its tasks) and PMI-1
    ///   everywhere else (Hydra, tmpirun).
    /// * `PMI_PORT` set without `PMI_FD` (Hydra `-pmi-port`): TCP to that
    ///   `host:port`, identified by `PMI_ID` (required), same protocol choice.
    /// * neither, and `PMIX_NAMESPACE` or `PMIX_RANK` set: PMIx through
    ///   `libpmix.so.2` (an error naming the library and what else to do
    ///   when it cannot be loaded, unless the launcher says the job has one
    ///   process).
    /// * none of these: a singleton job of one (rank 0, size 1), unless
    ///   Open MPI's `OMPI_COMM_WORLD_SIZE` says otherwise: then an error.
    /// * The MCA parameter `pmi_client` (`pmi1`, `pmi2`, `pmix`,
    ///   `singleton`) overrides the choice.
    ///
    /// The descriptor can be adopted once per process; a second call errs.
    pub fn connect_from_env() -> Result<PmiClient, PmiError> {
        let choice = register_client(crate::mca::registry())
            .map_err(|e| PmiError::Env {
                var: CLIENT_ENV,
                value: String::new(),
                reason: e.to_string(),
            })?
            .value();
        let choice = parse_choice(CLIENT_ENV, &choice)?;
        Self::connect_choice(&|k| std::env::var(k).ok(), choice)
    }

    /// [`PmiClient::connect_from_env`] with the variables looked up through
    /// `env` (for tests and embedding).
    /// The `pmi_client` parameter is read from `env` as
    /// [`CLIENT_ENV`] only.
    pub fn connect_with_env(env: impl Fn(&str) -> Option<String>) -> Result<PmiClient, PmiError> {
        let choice = match env(CLIENT_ENV) {
            Some(text) => parse_choice(CLIENT_ENV, &text)?,
            None => Choice::Auto,
        };
        Self::connect_choice(&env, choice)
    }

    fn connect_choice(
        env: &impl Fn(&str) -> Option<String>,
        choice: Choice,
    ) -> Result<PmiClient, PmiError> {
        match choice {
            Choice::Singleton => return Ok(Self::singleton()),
            Choice::Pmix => {
                let var = pmix_launcher(env).map_or(CLIENT_ENV, |(v, _)| v);
                return Self::connect_pmix(env, var);
            }
            _ => {}
        }
        let forced = match env("TMPI_PMI_VERSION").as_deref().map(str::trim) {
            _ if choice == Choice::Pmi1 => Some(PmiVersion::V1),
            _ if choice == Choice::Pmi2 => Some(PmiVersion::V2),
            None | Some("") => None,
            Some("1") => Some(PmiVersion::V1),
            Some("2") => Some(PmiVersion::V2),
            Some(other) => {
                return Err(PmiError::Env {
                    var: "TMPI_PMI_VERSION",
                    value: other.to_string(),
                    reason: "must be 1 or 2".into(),
                })
            }
        };
        let opts = ConnectOptions {
            rank: env_u32("PMI_RANK", env("PMI_RANK"))?,
            size: env_u32("PMI_SIZE", env("PMI_SIZE"))?,
            jobid: env("PMI_JOBID").filter(|j| !j.is_empty()),
            pmi_id: env_u32("PMI_ID", env("PMI_ID"))?,
        };
        let default_version = if opts.jobid.is_some() {
            PmiVersion::V2
        } else {
            PmiVersion::V1
        };
        let Some(fd) = env("PMI_FD") else {
            if let Some(port) = env("PMI_PORT") {
                return Self::connect_port(&port, forced.unwrap_or(default_version), opts);
            }
            if let Some((var, value)) = pmix_launcher(env) {
                if choice == Choice::Auto {
                    return match Self::connect_pmix(env, var) {
                        Err(PmiError::PmixUnavailable { reason, .. }) if one_process_job(env) => {
                            tracing::debug!(target: "pmi", "{var}={value} but {reason}: a one-process job runs as a singleton");
                            Ok(Self::singleton())
                        }
                        r => r,
                    };
                }
            }
            foreign_launcher(env)?;
            tracing::debug!(target: "pmi", "no PMI_FD: running as a singleton");
            return Ok(Self::singleton());
        };
        let fd_num = fd.trim().parse::<i32>().map_err(|_| PmiError::Env {
            var: "PMI_FD",
            value: fd.clone(),
            reason: "not a descriptor number".into(),
        })?;
        let version = forced.unwrap_or(default_version);
        let stream = adopt_pmi_fd(fd_num).map_err(|e| PmiError::Fd(e.to_string()))?;
        set_live_fd(stream.as_raw_fd());
        Self::connect(stream, version, &opts)
    }

    /// PMIx: loads the PMIx library ([`super::pmix_sys::LIBRARY_ENV`] or
    /// `libpmix.so.2`) and calls `PMIx_Init`; `var` names what asked for
    /// PMIx (for the message when the library is missing).
    fn connect_pmix(
        env: &impl Fn(&str) -> Option<String>,
        var: &'static str,
    ) -> Result<PmiClient, PmiError> {
        use super::pmix_sys::{InitError, DEFAULT_LIBRARY, LIBRARY_ENV};
        let library = env(LIBRARY_ENV)
            .filter(|l| !l.is_empty())
            .unwrap_or_else(|| DEFAULT_LIBRARY.to_string());
        let pmix = Pmix::init(&library).map_err(|e| match e {
            InitError::Library(reason) => PmiError::PmixUnavailable { var, reason },
            InitError::Call(c) => c.into(),
        })?;
        let mut c = Self::singleton();
        c.version = PmiVersion::Pmix;
        c.rank = pmix.rank();
        c.kvsname = pmix.nspace().to_string();
        c.keylen_max = PMIX_KEYLEN_MAX;
        c.vallen_max = PMIX_VALLEN_MAX;
        c.pmix = Some(pmix);
        let size = c.pmix_u32(RANK_WILDCARD, "pmix.job.size")?;
        if let Err(detail) = check_job(c.rank, size) {
            return Err(PmiError::Protocol {
                during: "PMIx_Init".into(),
                detail,
            });
        }
        c.size = size;
        c.appnum = c
            .pmix_get(c.rank, "pmix.appnum")?
            .and_then(|v| v.as_u64())
            .and_then(|n| i32::try_from(n).ok())
            .unwrap_or(0);
        tracing::debug!(target: "pmi", "connected: PMIx rank {} of {} in {}", c.rank, c.size, c.kvsname);
        JOB_APPNUM.store(c.appnum, std::sync::atomic::Ordering::Relaxed);
        Ok(c)
    }

    fn pmix(&self) -> Result<&Pmix, PmiError> {
        if self.finalized {
            return Err(PmiError::Finalized);
        }
        self.pmix.as_ref().ok_or(PmiError::Finalized)
    }

    fn pmix_get(&self, rank: u32, key: &str) -> Result<Option<PmixValue>, PmiError> {
        Ok(self.pmix()?.get(rank, key)?)
    }

    /// A PMIx key that must exist and be a number.
    fn pmix_u32(&self, rank: u32, key: &str) -> Result<u32, PmiError> {
        let v = self.pmix_get(rank, key)?;
        v.as_ref()
            .and_then(PmixValue::as_u64)
            .and_then(|n| u32::try_from(n).ok())
            .ok_or_else(|| PmiError::Protocol {
                during: format!("PMIx_Get {key}"),
                detail: match v {
                    None => "the server has no such key".to_string(),
                    Some(v) => format!("not a number: {v:?}"),
                },
            })
    }

    /// Hydra's `-pmi-port` mode: TCP to `host:port`, identified by `PMI_ID`.
    /// PMI-1 first sends `cmd=initack pmiid=<id>` and learns size and rank
    /// from the three `cmd=set` lines of the answer (MPICH simple PMI);
    /// PMI-2 sends `fullinit pmirank=<id>` after its init line.
    fn connect_port(
        port: &str,
        version: PmiVersion,
        mut opts: ConnectOptions,
    ) -> Result<PmiClient, PmiError> {
        let id = opts.pmi_id.ok_or_else(|| PmiError::Env {
            var: "PMI_ID",
            value: String::new(),
            reason: "required with PMI_PORT".into(),
        })?;
        let during = format!("connect to PMI_PORT={port}");
        let tcp = TcpStream::connect(port.trim()).map_err(|source| PmiError::Io {
            during: during.clone(),
            source,
        })?;
        // Lockstep small messages: no Nagle delay.
        tcp.set_nodelay(true)
            .map_err(|source| PmiError::Io { during, source })?;
        let mut conn = Conn {
            stream: Stream::Tcp(tcp),
            buf: Vec::new(),
        };
        if version == PmiVersion::V1 {
            let during = "initack";
            conn.write_msg(format!("cmd=initack pmiid={id}\n").as_bytes(), during)?;
            let ack = conn.read_v1(during)?;
            check_rc(&ack, during)?;
            expect_cmd(&ack, "initack", during)?;
            for _ in 0..3 {
                let set = conn.read_v1(during)?;
                expect_cmd(&set, "set", during)?;
                if let Some(v) = set.get("size") {
                    opts.size = Some(field_num(&set, "size", during)?);
                    tracing::trace!(target: "pmi", "initack: size={v}");
                }
                if set.get("rank").is_some() {
                    opts.rank = Some(field_num(&set, "rank", during)?);
                }
            }
        }
        Self::connect_conn(conn, version, &opts)
    }

    /// A client for a process started without a launcher: rank 0 of 1, a
    /// KVS inside the process, job id `singleton-<pid>-<nanoseconds>`.
    pub fn singleton() -> PmiClient {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        PmiClient {
            conn: None,
            version: PmiVersion::Singleton,
            rank: 0,
            size: 1,
            appnum: 0,
            kvsname: format!("singleton-{}-{nanos}", std::process::id()),
            keylen_max: KEYLEN_MAX,
            vallen_max: VALLEN_MAX,
            local: HashMap::new(),
            pmix: None,
            finalized: false,
            info: None,
        }
    }

    /// Performs the PMI handshake over `stream` with protocol `version`
    /// (`V1` or `V2`; `Singleton` ignores the stream).
    pub fn connect(
        stream: UnixStream,
        version: PmiVersion,
        opts: &ConnectOptions,
    ) -> Result<PmiClient, PmiError> {
        let conn = Conn {
            stream: Stream::Unix(stream),
            buf: Vec::new(),
        };
        Self::connect_conn(conn, version, opts)
    }

    fn connect_conn(
        conn: Conn,
        version: PmiVersion,
        opts: &ConnectOptions,
    ) -> Result<PmiClient, PmiError> {
        let mut conn = Some(conn);
        let mut c = Self::singleton();
        c.version = version;
        c.kvsname.clear();
        match version {
            PmiVersion::Singleton => return Ok(Self::singleton()),
            PmiVersion::Pmix => {
                return Err(PmiError::Protocol {
                    during: "connect".into(),
                    detail: "PMIx does not run over a PMI socket; use connect_from_env".into(),
                })
            }
            PmiVersion::V1 => {
                let rank = opts.rank.ok_or_else(|| PmiError::Env {
                    var: "PMI_RANK",
                    value: String::new(),
                    reason: "required with PMI_FD (PMI-1)".into(),
                })?;
                let size = opts.size.ok_or_else(|| PmiError::Env {
                    var: "PMI_SIZE",
                    value: String::new(),
                    reason: "required with PMI_FD (PMI-1)".into(),
                })?;
                if let Err(reason) = check_job(rank, size) {
                    return Err(PmiError::Env {
                        var: "PMI_SIZE",
                        value: size.to_string(),
                        reason: format!("{reason} (PMI_RANK={rank})"),
                    });
                }
                c.rank = rank;
                c.size = size;
                c.conn = conn.take();
                c.init_line(1, 1)?;
                c.handshake_v1()?;
            }
            PmiVersion::V2 => {
                c.conn = conn.take();
                c.init_line(2, 0)?;
                c.handshake_v2(opts)?;
            }
        }
        tracing::debug!(target: "pmi", "connected: {:?} rank {} of {} in {}", c.version, c.rank, c.size, c.kvsname);
        JOB_APPNUM.store(c.appnum, std::sync::atomic::Ordering::Relaxed);
        Ok(c)
    }

    fn conn(&mut self) -> Result<&mut Conn, PmiError> {
        if self.finalized {
            return Err(PmiError::Finalized);
        }
        self.conn.as_mut().ok_or(PmiError::Finalized)
    }

    /// The exact init line, alone in its write (Slurm `sscanf`s one read).
    fn init_line(&mut self, v: u32, sub: u32) -> Result<(), PmiError> {
        let during = "init";
        let line = format!("cmd=init pmi_version={v} pmi_subversion={sub}\n");
        let conn = self.conn()?;
        conn.write_msg(line.as_bytes(), during)?;
        let resp = conn.read_v1(during)?;
        check_rc(&resp, during)?;
        expect_cmd(&resp, "response_to_init", during)?;
        if let Some(got) = resp.get("pmi_version") {
            if got.trim() != v.to_string() {
                return Err(PmiError::Protocol {
                    during: during.into(),
                    detail: format!("asked for PMI version {v}, server answered {got}"),
                });
            }
        }
        Ok(())
    }

    fn v1(&mut self, req: Message, expect: &str) -> Result<Message, PmiError> {
        let during = req.cmd.clone();
        let line = format_v1_line(&req).map_err(|source| PmiError::Wire {
            during: during.clone(),
            source,
        })?;
        if line.len() > V1_MAX_LINE {
            return Err(PmiError::Protocol {
                during,
                detail: format!("line of {} bytes exceeds {V1_MAX_LINE}", line.len()),
            });
        }
        let conn = self.conn()?;
        conn.write_msg(&line, &during)?;
        let resp = conn.read_v1(&during)?;
        check_rc(&resp, &during)?;
        expect_cmd(&resp, expect, &during)?;
        Ok(resp)
    }

    /// Sends a PMI-1 request and returns the response without checking `rc`.
    fn v1_raw(&mut self, req: Message, expect: &str) -> Result<Message, PmiError> {
        let during = req.cmd.clone();
        let line = format_v1_line(&req).map_err(|source| PmiError::Wire {
            during: during.clone(),
            source,
        })?;
        if line.len() > V1_MAX_LINE {
            return Err(PmiError::Protocol {
                during,
                detail: format!("line of {} bytes exceeds {V1_MAX_LINE}", line.len()),
            });
        }
        let conn = self.conn()?;
        conn.write_msg(&line, &during)?;
        let resp = conn.read_v1(&during)?;
        if resp.cmd != expect {
            check_rc(&resp, &during)?;
            expect_cmd(&resp, expect, &during)?;
        }
        Ok(resp)
    }

    fn v2(&mut self, req: Message) -> Result<Message, PmiError> {
        let during = req.cmd.clone();
        let expect = format!("{}-response", req.cmd);
        let frame = format_v2_frame(&req).map_err(|source| PmiError::Wire {
            during: during.clone(),
            source,
        })?;
        let conn = self.conn()?;
        conn.write_msg(&frame, &during)?;
        let resp = conn.read_v2(&during)?;
        check_rc(&resp, &during)?;
        expect_cmd(&resp, &expect, &during)?;
        Ok(resp)
    }

    fn handshake_v1(&mut self) -> Result<(), PmiError> {
        let m = self.v1(Message::new("get_maxes"), "maxes")?;
        let kvsname_max: usize = field_num(&m, "kvsname_max", "get_maxes")?;
        self.keylen_max = field_num(&m, "keylen_max", "get_maxes")?;
        self.vallen_max = field_num(&m, "vallen_max", "get_maxes")?;
        if self.keylen_max < 16 || self.vallen_max < 64 || kvsname_max < 2 {
            return Err(PmiError::Protocol {
                during: "get_maxes".into(),
                detail: format!(
                    "limits too small: keylen_max={} vallen_max={}",
                    self.keylen_max, self.vallen_max
                ),
            });
        }
        let m = self.v1(Message::new("get_appnum"), "appnum")?;
        self.appnum = field_num(&m, "appnum", "get_appnum")?;
        let m = self.v1(Message::new("get_my_kvsname"), "my_kvsname")?;
        self.kvsname = field(&m, "kvsname", "get_my_kvsname")?.to_string();
        if self.kvsname.is_empty() || self.kvsname.len() >= kvsname_max.max(KVSNAME_MAX) {
            return Err(PmiError::Protocol {
                during: "get_my_kvsname".into(),
                detail: "unusable kvsname".into(),
            });
        }
        Ok(())
    }

    fn handshake_v2(&mut self, opts: &ConnectOptions) -> Result<(), PmiError> {
        let mut req = Message::new("fullinit");
        if let Some(j) = &opts.jobid {
            req.push("pmijobid", j);
        }
        let pmirank = opts.pmi_id.or(opts.rank).ok_or_else(|| PmiError::Env {
            var: "PMI_RANK",
            value: String::new(),
            reason: "PMI-2 needs PMI_ID or PMI_RANK for fullinit".into(),
        })?;
        req.push("pmirank", pmirank);
        req.push("threaded", "FALSE");
        let m = self.v2(req)?;
        self.rank = field_num(&m, "rank", "fullinit")?;
        self.size = field_num(&m, "size", "fullinit")?;
        if let Err(detail) = check_job(self.rank, self.size) {
            return Err(PmiError::Protocol {
                during: "fullinit".into(),
                detail,
            });
        }
        self.appnum = m
            .get("appnum")
            .and_then(|a| a.trim().parse().ok())
            .unwrap_or(-1);
        let m = self.v2(Message::new("job-getid"))?;
        self.kvsname = field(&m, "jobid", "job-getid")?.to_string();
        if self.kvsname.is_empty() {
            return Err(PmiError::Protocol {
                during: "job-getid".into(),
                detail: "empty jobid".into(),
            });
        }
        // PMI-2 has no get_maxes; PMI2_MAX_VALLEN / PMI2_MAX_KEYLEN are 1024 / 64.
        self.vallen_max = VALLEN_MAX;
        self.keylen_max = KEYLEN_MAX;
        Ok(())
    }

    /// The protocol in use.
    pub fn version(&self) -> PmiVersion {
        self.version
    }
    /// This process's rank.
    pub fn rank(&self) -> u32 {
        self.rank
    }
    /// Number of processes in the job.
    pub fn size(&self) -> u32 {
        self.size
    }
    /// Application number (0 under Hydra and tmpirun, −1 under Slurm).
    pub fn appnum(&self) -> i32 {
        self.appnum
    }
    /// The job's KVS name (PMI-2: the job id), opaque.
    pub fn kvsname(&self) -> &str {
        &self.kvsname
    }
    /// The server's `keylen_max` (counts a NUL: keys have at most one less).
    pub fn keylen_max(&self) -> usize {
        self.keylen_max
    }
    /// The server's `vallen_max` (counts a NUL: values have at most one less).
    pub fn vallen_max(&self) -> usize {
        self.vallen_max
    }

    /// Checks that `key` can be stored: 1..keylen_max bytes of printable
    /// ASCII other than space, `=`, `;`, `\`, and not starting with `PMI_`.
    pub fn check_key(&self, key: &str) -> Result<(), PmiError> {
        let bad = |reason: &str| {
            Err(PmiError::InvalidKey {
                key: key.to_string(),
                reason: reason.to_string(),
            })
        };
        if key.is_empty() {
            return bad("empty");
        }
        if key.len() >= self.keylen_max {
            return bad(&format!("longer than {} bytes", self.keylen_max - 1));
        }
        if key.starts_with("PMI_") {
            return bad("the PMI_ prefix is reserved");
        }
        if let Some(c) = key
            .chars()
            .find(|&c| !c.is_ascii_graphic() || matches!(c, '=' | ';' | '\\'))
        {
            return bad(&format!("contains {c:?}"));
        }
        Ok(())
    }

    /// The longest value [`PmiClient::put`] accepts under `key`: `vallen_max
    /// − 1`, and for PMI-1 also what keeps the whole `put` line within 1024
    /// bytes (Slurm reads one command per 1024-byte read).
    pub fn value_budget(&self, key: &str) -> usize {
        let by_server = self.vallen_max.saturating_sub(1);
        match self.version {
            PmiVersion::V1 => {
                let overhead =
                    "cmd=put kvsname= key= value=\n".len() + self.kvsname.len() + key.len();
                by_server.min(V1_MAX_LINE.saturating_sub(overhead))
            }
            _ => by_server,
        }
    }

    /// Stores `value` under `key` in the job's KVS; peers see it after the
    /// next [`PmiClient::fence`].
    ///
    /// Values are text without control characters, spaces and `;`, whatever
    /// the protocol (PMI-1 cannot carry spaces, PMI-2 cannot carry `;`;
    /// refusing both everywhere keeps code portable between launchers), and
    /// not longer than [`PmiClient::value_budget`]. Encode binary data first
    /// (the [`super::PmiModex`] does).
    pub fn put(&mut self, key: &str, value: &str) -> Result<(), PmiError> {
        self.check_key(key)?;
        let bad = |reason: String| {
            Err(PmiError::InvalidValue {
                key: key.to_string(),
                reason,
            })
        };
        if let Some(c) = value
            .chars()
            .find(|&c| c.is_control() || c == ' ' || c == ';')
        {
            return bad(format!("contains {c:?}"));
        }
        let budget = self.value_budget(key);
        if value.len() > budget {
            return bad(format!(
                "{} bytes exceed the limit of {budget}",
                value.len()
            ));
        }
        match self.version {
            PmiVersion::Singleton => {
                if self.finalized {
                    return Err(PmiError::Finalized);
                }
                self.local.insert(key.to_string(), value.to_string());
                Ok(())
            }
            PmiVersion::V1 => {
                let req = Message::new("put")
                    .with("kvsname", &self.kvsname)
                    .with("key", key)
                    .with("value", value);
                self.v1(req, "put_result").map(drop)
            }
            PmiVersion::V2 => self
                .v2(Message::new("kvs-put")
                    .with("key", key)
                    .with("value", value))
                .map(drop),
            PmiVersion::Pmix => Ok(self.pmix()?.put(key, value)?),
        }
    }

    /// Collective over the whole job (PMI-1 `barrier_in`, PMI-2
    /// `kvs-fence`): returns once every rank has fenced; afterwards all
    /// values put before the fence are readable.
    pub fn fence(&mut self) -> Result<(), PmiError> {
        match self.version {
            PmiVersion::Singleton => {
                if self.finalized {
                    return Err(PmiError::Finalized);
                }
                Ok(())
            }
            PmiVersion::V1 => self.v1(Message::new("barrier_in"), "barrier_out").map(drop),
            PmiVersion::V2 => self.v2(Message::new("kvs-fence")).map(drop),
            PmiVersion::Pmix => Ok(self.pmix()?.commit_fence()?),
        }
    }

    /// Reads `key` from the job's KVS; `rank_hint` is the rank that put it,
    /// if known (PMI-2 `srcid`). `Ok(None)` when not found.
    ///
    /// PMI-1 servers spell "not found" as a non-zero `rc` (Hydra −1, Slurm 1)
    /// or `found=FALSE`; both give `None`, so a PMI-1 server error on `get`
    /// is indistinguishable from not-found.
    pub fn get(&mut self, rank_hint: Option<u32>, key: &str) -> Result<Option<String>, PmiError> {
        self.check_key(key)?;
        match self.version {
            PmiVersion::Singleton => {
                if self.finalized {
                    return Err(PmiError::Finalized);
                }
                Ok(self.local.get(key).cloned())
            }
            PmiVersion::V1 => self.get_v1(key),
            PmiVersion::V2 => {
                let srcid = rank_hint.map(i64::from).unwrap_or(-1);
                let req = Message::new("kvs-get")
                    .with("jobid", &self.kvsname)
                    .with("srcid", srcid)
                    .with("key", key);
                let m = self.v2(req)?;
                Self::found_value(&m, "kvs-get")
            }
            PmiVersion::Pmix => {
                let rank = rank_hint.unwrap_or(self.rank);
                match self.pmix_get(rank, key)? {
                    None => Ok(None),
                    Some(PmixValue::Str(v)) => Ok(Some(v)),
                    Some(other) => Err(PmiError::Protocol {
                        during: format!("PMIx_Get {key}"),
                        detail: format!("rank {rank} stored {other:?}, not a string"),
                    }),
                }
            }
        }
    }

    fn get_v1(&mut self, key: &str) -> Result<Option<String>, PmiError> {
        let req = Message::new("get")
            .with("kvsname", &self.kvsname)
            .with("key", key);
        let m = self.v1_raw(req, "get_result")?;
        let rc = m.rc().map_err(|raw| PmiError::Protocol {
            during: "get".into(),
            detail: format!("rc={raw:?}"),
        })?;
        if rc != 0 || m.get_bool("found") == Some(false) {
            tracing::trace!(target: "pmi", "get {key}: not found (rc={rc})");
            return Ok(None);
        }
        Ok(Some(field(&m, "value", "get")?.to_string()))
    }

    fn found_value(m: &Message, during: &str) -> Result<Option<String>, PmiError> {
        match m.get_bool("found") {
            Some(false) => Ok(None),
            Some(true) => Ok(Some(field(m, "value", during)?.to_string())),
            None => match m.get("value") {
                // Lenient: a server that omits `found` but sends a value.
                Some(v) => Ok(Some(v.to_string())),
                None => Ok(None),
            },
        }
    }

    /// Reads a job attribute (`PMI_process_mapping`, `universeSize`, ...):
    /// PMI-2 `info-getjobattr`, PMI-1 `get` (Hydra and Slurm answer job
    /// attributes there). `Ok(None)` when the server does not have it; the
    /// singleton has none.
    pub fn job_attr(&mut self, key: &str) -> Result<Option<String>, PmiError> {
        match self.version {
            PmiVersion::Singleton => {
                if self.finalized {
                    return Err(PmiError::Finalized);
                }
                Ok(None)
            }
            PmiVersion::V1 => self.get_v1(key),
            PmiVersion::V2 => {
                let m = self.v2(Message::new("info-getjobattr").with("key", key))?;
                Self::found_value(&m, "info-getjobattr")
            }
            // PMIx job information: `pmix.*` keys of the whole job.
            PmiVersion::Pmix => Ok(match self.pmix_get(RANK_WILDCARD, key)? {
                None | Some(PmixValue::Other(_)) | Some(PmixValue::Bytes(_)) => None,
                Some(PmixValue::Str(s)) => Some(s),
                Some(PmixValue::Uint(n)) => Some(n.to_string()),
                Some(PmixValue::Int(n)) => Some(n.to_string()),
                Some(PmixValue::Bool(b)) => Some(if b { "TRUE" } else { "FALSE" }.to_string()),
            }),
        }
    }

    /// Sends `abort` to the server (it ends the whole job) and exits this
    /// process with `code` without waiting for a reply; `msg` is printed on
    /// standard error and passed to the server. Over PMI-2 it travels as it
    /// is (`;` and control characters replaced by `_`). A PMI-1 value
    /// cannot hold a space, so there it goes twice: as `message` with
    /// spaces, `;` and control characters replaced by `_` (what other
    /// servers show), and encoded under [`crate::pmi::ABORT_TEXT_KEY`],
    /// which `tmpirun` decodes to the exact text.
    pub fn abort(&mut self, code: i32, msg: &str) -> ! {
        eprintln!(
            "tmpi: rank {} aborting the job with exit code {code}: {msg}",
            self.rank
        );
        tracing::debug!(target: "pmi", "rank {} sends abort with code {code}", self.rank);
        let clean = |keep_spaces: bool, max: usize| -> String {
            msg.chars()
                .map(|c| {
                    if c.is_control() || (c == ' ' && !keep_spaces) || c == ';' {
                        '_'
                    } else {
                        c
                    }
                })
                .take(max)
                .collect()
        };
        let version = self.version;
        if version == PmiVersion::Pmix {
            // PMIx_Abort returns once the server has the request.
            super::pmix_sys::abort_job(code, msg);
            std::process::exit(code)
        }
        if let Ok(conn) = self.conn() {
            let bytes = match version {
                // Hydra 4.0.2 reads only exitcode; newer servers also
                // message; tmpirun the encoded text. The line stays within
                // Slurm's 1024 bytes.
                PmiVersion::V1 => format_v1_line(
                    &Message::new("abort")
                        .with("exitcode", code)
                        .with("message", clean(false, 300))
                        .with(ABORT_TEXT_KEY, encode_abort_text(msg, 600)),
                ),
                // Slurm needs isworld/msg; Hydra HEAD reads exitcode/message.
                _ => format_v2_frame(
                    &Message::new("abort")
                        .with("isworld", "TRUE")
                        .with("exitcode", code)
                        .with("msg", clean(true, 512)),
                ),
            };
            if let Ok(bytes) = bytes {
                let _ = conn.write_msg(&bytes, "abort");
            }
        }
        std::process::exit(code)
    }

    /// Ends the PMI session: sends `finalize` and waits for the
    /// acknowledgement, after which the launcher treats this process's exit
    /// as normal. Later calls on this client return [`PmiError::Finalized`];
    /// a second `finalize` is a no-op.
    pub fn finalize(&mut self) -> Result<(), PmiError> {
        if self.finalized {
            return Ok(());
        }
        let r = match self.version {
            PmiVersion::Singleton => Ok(()),
            PmiVersion::V1 => self.v1(Message::new("finalize"), "finalize_ack").map(drop),
            PmiVersion::V2 => self.v2(Message::new("finalize")).map(drop),
            PmiVersion::Pmix => match &self.pmix {
                Some(p) => p.finalize().map_err(PmiError::from),
                None => Ok(()),
            },
        };
        self.finalized = true;
        self.pmix = None;
        // Slurm closes the socket after the ack; close ours too.
        self.conn = None;
        r
    }

    /// Where this process sits in the job, computed once and cached.
    ///
    /// Node ids come from the `PMI_process_mapping` job attribute (with the
    /// cyclic wrap-around). When it is missing, empty or undecodable, every
    /// rank publishes its host name and fences, and equal names share a node
    /// (ids numbered in order of first appearance): then this call is
    /// **collective** (all ranks see the same attribute, so all take the
    /// same path). `job_id` is the sanitized kvsname.
    pub fn process_info(&mut self) -> Result<ProcessInfo, PmiError> {
        if let Some(info) = &self.info {
            return Ok(info.clone());
        }
        let host = hostname();
        let job_id = sanitize_job_id(&self.kvsname);
        let info = if self.version == PmiVersion::Singleton {
            ProcessInfo::singleton(job_id, host)
        } else {
            let node_of = match self.mapping()? {
                Some(n) => n,
                None => self.exchange_hostnames(&host)?,
            };
            if self.version == PmiVersion::Pmix {
                self.check_pmix_local_peers(&node_of);
            }
            let node_id = node_of[self.rank as usize];
            let local_rank = node_of[..self.rank as usize]
                .iter()
                .filter(|&&n| n == node_id)
                .count() as u32;
            let local_size = node_of.iter().filter(|&&n| n == node_id).count() as u32;
            ProcessInfo {
                rank: self.rank,
                size: self.size,
                local_rank,
                local_size,
                node_id,
                node_of,
                job_id,
                hostname: host,
            }
        };
        self.info = Some(info.clone());
        Ok(info)
    }

    /// Node ids of every rank. PMIx: each rank's `pmix.nodeid`, else each
    /// rank's `pmix.hname` (equal names share a node). PMI: the
    /// `PMI_process_mapping` job attribute. `None` when the launcher gives
    /// neither (then host names go through the KVS).
    fn mapping(&mut self) -> Result<Option<Vec<u32>>, PmiError> {
        if self.version == PmiVersion::Pmix {
            return self.pmix_mapping();
        }
        let Some(m) = self.job_attr("PMI_process_mapping")? else {
            tracing::debug!(target: "pmi", "no PMI_process_mapping; exchanging host names");
            return Ok(None);
        };
        match parse_process_mapping(&m, self.size) {
            Ok(n) => Ok(Some(n)),
            Err(e) => {
                if !m.trim().is_empty() {
                    tracing::warn!(target: "pmi", "ignoring PMI_process_mapping {m:?}: {e}; exchanging host names");
                }
                Ok(None)
            }
        }
    }

    fn pmix_mapping(&mut self) -> Result<Option<Vec<u32>>, PmiError> {
        let mut node_of = Vec::with_capacity(self.size as usize);
        for r in 0..self.size {
            match self.pmix_get(r, "pmix.nodeid")?.and_then(|v| v.as_u64()) {
                Some(id) => node_of.push(u32::try_from(id).unwrap_or(u32::MAX)),
                None => break,
            }
        }
        if node_of.len() == self.size as usize {
            return Ok(Some(node_of));
        }
        tracing::debug!(target: "pmi", "no pmix.nodeid for every rank; using host names");
        let mut names: Vec<String> = Vec::new();
        node_of.clear();
        for r in 0..self.size {
            let Some(PmixValue::Str(name)) = self.pmix_get(r, "pmix.hname")? else {
                tracing::debug!(target: "pmi", "no pmix.hname for rank {r}; exchanging host names");
                return Ok(None);
            };
            let id = match names.iter().position(|n| *n == name) {
                Some(i) => i,
                None => {
                    names.push(name);
                    names.len() - 1
                }
            };
            node_of.push(id as u32);
        }
        Ok(Some(node_of))
    }

    /// Compares the node map with the server's own list of this node's
    /// ranks (`pmix.lpeers`), warning once when they disagree.
    fn check_pmix_local_peers(&self, node_of: &[u32]) {
        let Ok(Some(PmixValue::Str(peers))) = self.pmix_get(RANK_WILDCARD, "pmix.lpeers") else {
            return;
        };
        let me = node_of[self.rank as usize];
        let ours: Vec<u32> = (0..self.size)
            .filter(|&r| node_of[r as usize] == me)
            .collect();
        let theirs: Vec<u32> = peers
            .split(',')
            .filter_map(|p| p.trim().parse().ok())
            .collect();
        if ours != theirs {
            tracing::warn!(target: "pmi", "PMIx lists ranks {peers} on this node, the node map {ours:?}");
        }
    }

    fn exchange_hostnames(&mut self, host: &str) -> Result<Vec<u32>, PmiError> {
        let enc = base64::engine::general_purpose::URL_SAFE_NO_PAD;
        let mut value = enc.encode(host.as_bytes());
        let key = format!("tmpi-host-{}", self.rank);
        value.truncate(self.value_budget(&key));
        self.put(&key, &value)?;
        self.fence()?;
        // Host names are few (one per node): grow as found.
        let mut names: Vec<String> = Vec::new();
        let mut node_of = Vec::with_capacity(self.size as usize);
        for r in 0..self.size {
            let key = format!("tmpi-host-{r}");
            let v = self.get(Some(r), &key)?.ok_or_else(|| PmiError::Protocol {
                during: "process_info".into(),
                detail: format!("rank {r} published no host name"),
            })?;
            let id = match names.iter().position(|n| *n == v) {
                Some(i) => i,
                None => {
                    names.push(v);
                    names.len() - 1
                }
            };
            node_of.push(id as u32);
        }
        Ok(node_of)
    }
}
