//! The PMI-1/PMI-2 server that `tmpirun` embeds (`reference/pmi.md` §7).
//!
//! One `AF_UNIX` socketpair per rank: the launcher passes the child end as
//! `PMI_FD` and the server keeps the other. The server runs on its own thread
//! (one `mio` poll over all connections) and reports what happens through a
//! channel of [`PmiEvent`]s; the launcher decides what a failure means.
//!
//! Semantics (where the reference leaves a choice):
//! * PMI-1 or PMI-2 is chosen per message from its first bytes (`cmd=`/`mcmd=`
//!   means PMI-1) and the reply uses the same framing; ranks may mix.
//! * Every reply carries `rc`; PMI-2 replies copy `thrid`.
//! * Puts become visible to `get` at the next completed barrier/fence (puts
//!   from all ranks are committed in arrival order; a later put of a key
//!   overwrites). Keys must be 1..=63 bytes and not start with `PMI_`; values
//!   at most 1023 bytes; violations get `rc=1` rather than truncation.
//! * PMI-1 `get` also answers job attributes (`PMI_process_mapping`,
//!   `universeSize` and [`ServerConfig::job_attrs`]); not found is `rc=1
//!   found=FALSE`. PMI-2 `kvs-get` not found is `found=FALSE rc=0`.
//! * A barrier completes when all `size` ranks entered. If a rank that has
//!   not entered exits, finalizes or aborts, the waiting ranks get `rc=1`
//!   instead of hanging.
//! * Node attributes (`info-putnodeattr`/`info-getnodeattr`) are shared by
//!   ranks with the same node label in the process mapping (all ranks when
//!   the mapping is empty or invalid); `wait=TRUE` holds the reply until a
//!   local rank puts the key.
//! * Unknown commands get an error reply (`rc=1`) plus a
//!   [`PmiEvent::ProtocolError`]; so do malformed messages whose framing is
//!   intact. Broken framing (line over 4096 bytes, bad PMI-2 length, body
//!   over 64 KiB) closes the connection. `spawn` is answered `rc=1`.
//! * `abort` (PMI-1 `exitcode=`/`message=`, PMI-2 `isworld=`/`msg=` or
//!   `exitcode=`/`message=`) gets no reply; the exit code defaults to 1 when
//!   absent or not a number.

mod core;

use std::io::{self, ErrorKind, Read, Write};
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream as StdUnixStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;

use mio::net::UnixStream;
use mio::{Events, Interest, Poll, Token, Waker};

use self::core::Core;

/// What the server serves: one job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerConfig {
    /// Number of ranks (connections); must be at least 1.
    pub size: u32,
    /// The job's KVS name (PMI-1 `kvsname`, PMI-2 `jobid`): non-empty, at
    /// most 255 bytes, no space, `;`, `=` or control characters.
    pub kvsname: String,
    /// `PMI_process_mapping` value, e.g. `(vector,(0,1,4))` for 4 ranks on
    /// one node (see `tmpi_base::pmi::encode_process_mapping`). Empty means
    /// unknown; a string of 1024 bytes or more is not served (like Hydra).
    pub process_mapping: String,
    /// Application number reported to the ranks (0 for the first app).
    pub appnum: i32,
    /// Extra job attributes, served by PMI-2 `info-getjobattr` and PMI-1
    /// `get`; they override the built-in ones of the same name.
    pub job_attrs: Vec<(String, String)>,
}

impl ServerConfig {
    /// The PMI environment of `rank` whose end of the socketpair is
    /// descriptor `child_fd` in the child: `PMI_FD`, `PMI_RANK`, `PMI_SIZE`.
    ///
    /// `PMI_JOBID` is deliberately not set: tmpi clients take it as the sign
    /// of Slurm and then speak PMI-2 (either protocol works with this
    /// server; `TMPI_PMI_VERSION` forces one).
    pub fn rank_env(&self, rank: u32, child_fd: i32) -> Vec<(&'static str, String)> {
        vec![
            ("PMI_FD", child_fd.to_string()),
            ("PMI_RANK", rank.to_string()),
            ("PMI_SIZE", self.size.to_string()),
        ]
    }
}

/// Something the launcher may need to act on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PmiEvent {
    /// The rank sent `init` (PMI-1) or `fullinit` (PMI-2) successfully.
    Initialized {
        /// The rank (= connection index).
        rank: u32,
    },
    /// The rank sent `finalize` (and got its acknowledgement queued).
    Finalized {
        /// The rank.
        rank: u32,
    },
    /// The rank asked to abort the job.
    Abort {
        /// The rank.
        rank: u32,
        /// Exit code the job should end with (1 if the rank gave none).
        code: i32,
        /// The rank's message, if any.
        message: Option<String>,
    },
    /// The rank's connection closed.
    Disconnected {
        /// The rank.
        rank: u32,
        /// It had sent `finalize` first (normal end).
        finalized: bool,
        /// It had sent at least one command; `active && !finalized` is a
        /// failure of the job, `!active` is a process that never used PMI.
        active: bool,
    },
    /// The rank sent something the server could not serve.
    ProtocolError {
        /// The rank.
        rank: u32,
        /// Human-readable description.
        detail: String,
    },
}

/// A PMI server for one job, not yet running.
pub struct PmiServer {
    core: Core,
    /// Server ends by rank; `None` once closed.
    conns: Vec<Option<UnixStream>>,
}

impl std::fmt::Debug for PmiServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PmiServer")
            .field("ranks", &self.conns.len())
            .finish()
    }
}

/// Handle of a running server; dropping it shuts the server down too.
#[derive(Debug)]
pub struct ServerHandle {
    stop: Arc<AtomicBool>,
    waker: Arc<Waker>,
    thread: Option<JoinHandle<()>>,
}

const WAKER: Token = Token(usize::MAX);

fn invalid(msg: String) -> io::Error {
    io::Error::new(ErrorKind::InvalidInput, msg)
}

impl PmiServer {
    /// One socketpair per rank; returns the server and the child ends
    /// (index = rank) that the launcher passes as `PMI_FD` (the launcher
    /// clears `CLOEXEC` in the child and closes them in the parent after
    /// spawning). Both ends are created `CLOEXEC`.
    ///
    /// Errors: `InvalidInput` for a bad configuration, or the OS error of
    /// `socketpair`.
    pub fn new(cfg: ServerConfig) -> io::Result<(PmiServer, Vec<OwnedFd>)> {
        if cfg.size == 0 {
            return Err(invalid("PMI server: job size must be at least 1".into()));
        }
        if cfg.kvsname.is_empty()
            || cfg.kvsname.len() >= tmpi_base::pmi::wire::KVSNAME_MAX
            || cfg
                .kvsname
                .chars()
                .any(|c| c == ' ' || c == ';' || c == '=' || c.is_control())
        {
            return Err(invalid(format!(
                "PMI server: unusable kvsname {:?}",
                cfg.kvsname
            )));
        }
        for (k, v) in &cfg.job_attrs {
            let bad_key = k.is_empty()
                || k.chars()
                    .any(|c| c == ' ' || c == ';' || c == '=' || c.is_control());
            let bad_val =
                v.chars().any(|c| c == ' ' || c == ';' || c.is_control()) || v.len() >= 1024;
            if bad_key || bad_val {
                return Err(invalid(format!(
                    "PMI server: unusable job attribute {k:?}={v:?}"
                )));
            }
        }
        let mut conns = Vec::with_capacity(cfg.size as usize);
        let mut child_ends = Vec::with_capacity(cfg.size as usize);
        for _ in 0..cfg.size {
            // std creates both ends with SOCK_CLOEXEC.
            let (ours, theirs) = StdUnixStream::pair()?;
            ours.set_nonblocking(true)?;
            conns.push(Some(UnixStream::from_std(ours)));
            child_ends.push(OwnedFd::from(theirs));
        }
        let core = Core::new(&cfg);
        tracing::debug!(target: "pmi", "server: job {} with {} ranks", cfg.kvsname, cfg.size);
        Ok((PmiServer { core, conns }, child_ends))
    }

    /// Serves on its own thread; events go to the channel. The thread ends
    /// (and the channel disconnects) on [`ServerHandle::shutdown`] or when
    /// every connection has closed.
    pub fn spawn(mut self) -> io::Result<(ServerHandle, Receiver<PmiEvent>)> {
        let poll = Poll::new()?;
        for (i, c) in self.conns.iter_mut().enumerate() {
            if let Some(c) = c {
                poll.registry().register(c, Token(i), Interest::READABLE)?;
            }
        }
        let waker = Arc::new(Waker::new(poll.registry(), WAKER)?);
        let stop = Arc::new(AtomicBool::new(false));
        let (tx, rx) = mpsc::channel();
        let stop2 = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name("tmpi-pmi-server".into())
            .spawn(move || self.run(poll, stop2, tx))?;
        Ok((
            ServerHandle {
                stop,
                waker,
                thread: Some(thread),
            },
            rx,
        ))
    }

    fn run(mut self, mut poll: Poll, stop: Arc<AtomicBool>, tx: Sender<PmiEvent>) {
        let mut events = Events::with_capacity(64);
        let mut writable_interest = vec![false; self.conns.len()];
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            if stop.load(Ordering::Acquire) {
                tracing::debug!(target: "pmi", "server: shutting down");
                break;
            }
            if self.core.conns.iter().all(|c| c.closed) {
                tracing::debug!(target: "pmi", "server: all connections closed");
                break;
            }
            if let Err(e) = poll.poll(&mut events, None) {
                if e.kind() == ErrorKind::Interrupted {
                    continue;
                }
                tracing::error!(target: "pmi", "server: poll failed: {e}");
                break;
            }
            for ev in events.iter() {
                let Token(i) = ev.token();
                if ev.token() == WAKER || i >= self.conns.len() {
                    continue;
                }
                if ev.is_readable() || ev.is_read_closed() || ev.is_error() {
                    self.read_conn(i, &mut buf);
                }
            }
            // Flush replies (also those produced for other ranks, such as a
            // completed barrier) and close what the core closed.
            for i in 0..self.conns.len() {
                self.flush_conn(i, &poll, &mut writable_interest);
            }
            for e in self.core.events.drain(..) {
                let _ = tx.send(e);
            }
        }
    }

    fn read_conn(&mut self, i: usize, buf: &mut [u8]) {
        let rank = i as u32;
        loop {
            if self.core.conns[i].closed {
                return;
            }
            let Some(conn) = self.conns[i].as_mut() else {
                return;
            };
            match conn.read(buf) {
                Ok(0) => {
                    self.core.on_eof(rank);
                    return;
                }
                Ok(n) => self.core.on_data(rank, &buf[..n]),
                Err(e) if e.kind() == ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => {
                    tracing::debug!(target: "pmi", "server: read from rank {rank} failed: {e}");
                    self.core.on_eof(rank);
                    return;
                }
            }
        }
    }

    fn flush_conn(&mut self, i: usize, poll: &Poll, writable: &mut [bool]) {
        let conn = &mut self.core.conns[i];
        let Some(stream) = self.conns[i].as_mut() else {
            return;
        };
        if conn.closed {
            conn.outbuf.clear();
            let _ = poll.registry().deregister(stream);
            // Dropping the stream closes our end.
            self.conns[i] = None;
            writable[i] = false;
            return;
        }
        while !conn.outbuf.is_empty() {
            match stream.write(&conn.outbuf) {
                Ok(0) => break,
                Ok(n) => {
                    conn.outbuf.drain(..n);
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) => {
                    // The peer is gone; the read side will report EOF.
                    tracing::debug!(target: "pmi", "server: write to rank {i} failed: {e}");
                    conn.outbuf.clear();
                    break;
                }
            }
        }
        let want = !conn.outbuf.is_empty();
        if want != writable[i] {
            let interest = if want {
                Interest::READABLE | Interest::WRITABLE
            } else {
                Interest::READABLE
            };
            if poll
                .registry()
                .reregister(stream, Token(i), interest)
                .is_ok()
            {
                writable[i] = want;
            }
        }
    }
}

impl ServerHandle {
    /// Stops the server thread and waits for it; open connections are
    /// closed (ranks still running see EOF on `PMI_FD`).
    pub fn shutdown(mut self) {
        self.stop_and_join();
    }

    fn stop_and_join(&mut self) {
        self.stop.store(true, Ordering::Release);
        let _ = self.waker.wake();
        if let Some(t) = self.thread.take() {
            if t.join().is_err() {
                tracing::error!(target: "pmi", "server: thread panicked");
            }
        }
    }
}

impl Drop for ServerHandle {
    fn drop(&mut self) {
        self.stop_and_join();
    }
}
