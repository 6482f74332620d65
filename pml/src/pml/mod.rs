//! The driver: one [`Core`] and the transport behind one lock, progress,
//! waiting, init and finalize.
//!
//! # Locking (MPI_THREAD_MULTIPLE)
//! All request and matching state and the BTL modules sit in one
//! `Mutex<Inner>`: every entry point takes it once, does its work (start an
//! operation, poll the BTLs, carry out the resulting actions) and releases
//! it. A thread waiting on a request releases the lock between progress
//! rounds so other threads can start operations and progress for everyone.
//! The single-thread cost is one uncontended lock/unlock pair per call
//! (see `docs/pml.md`).
//!
//! The driver's files, by job:
//! * `inner`: the state behind the lock ([`Inner`]) and its progress: one
//!   polling round, carrying out the core's actions with back-pressure,
//!   failed peers, the offload path's inputs.
//! * `direct`: the blocking calls' fast path over a BTL's direct channel.
//! * `hooks`: other layers' work that waiting calls keep moving, and what a
//!   waiting loop does between rounds.
//! * `send_recv`: the point-to-point entry points (isend, irecv, blocking
//!   send and receive).
//! * `completion`: test, wait and their any/some/all forms, cancel, free.
//! * `probe`: probe, improbe, mprobe, imrecv.
//! * `bsend`: the buffered-send buffer (attach, detach).
//! * `rdma`: RDMA put/get for one-sided windows (registration, transfers).
//! * `stats`: the counters and the `pml_stats`/`pml_peers` lines.
//! * `finalize`: finalize and abandon.

mod bsend;
mod completion;
mod direct;
mod finalize;
mod hooks;
mod inner;
mod probe;
mod rdma;
mod send_recv;
mod stats;

use std::sync::{Mutex, MutexGuard};

use tmpi_base::error::MpiErrorClass;

use crate::comm::CommRecord;
use crate::core::Core;
use crate::matching::EngineMatcher;
use crate::request::Status;
use crate::transport::Transport;
use crate::PmlError;

use hooks::ProgressHook;
pub(crate) use inner::Inner;
pub use rdma::{RdmaAtomic, RdmaKeys, RdmaToken};

/// Options for [`Pml::init`]: what the layer above gives the pml. Every
/// other setting comes from MCA parameters.
#[derive(Clone, Default)]
pub struct InitOptions {
    /// Install the rank-tagged tracing subscriber (ignored if one exists).
    pub logging: bool,
    /// The BTL components this build links, in preference order (the top
    /// layer's list; the `btl` selection parameter picks among them).
    pub btls: Vec<&'static dyn tmpi_btl::BtlComponent>,
}

impl std::fmt::Debug for InitOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.btls.iter().map(|c| c.name()).collect();
        f.debug_struct("InitOptions")
            .field("logging", &self.logging)
            .field("btls", &names)
            .finish()
    }
}

/// The point-to-point layer of one process.
pub struct Pml {
    inner: Mutex<Inner>,
    me: u32,
    size: u32,
    yield_when_idle: bool,
    /// The caller promised that no two threads call into this pml at the
    /// same time (MPI_THREAD_SINGLE, FUNNELED or SERIALIZED): blocking
    /// receives keep the lock between polling rounds ([`Pml::set_serial_calls`]).
    serial: std::sync::atomic::AtomicBool,
    stats: bool,
    rt: Mutex<Option<crate::init::Runtime>>,
    /// Node label of every world rank; empty when unknown (a pml over an
    /// explicit transport: one node).
    node_of: Vec<u32>,
    /// Another layer's work that waiting calls keep moving
    /// ([`Pml::set_progress_hook`]): the first hook, read without a lock
    /// in every waiting round.
    hook: std::sync::OnceLock<ProgressHook>,
    /// Hooks registered after the first (a second coll context over this
    /// pml: tests, embedders); `more_hooks` tells whether there are any.
    more: Mutex<Vec<std::sync::Arc<ProgressHook>>>,
    more_hooks: std::sync::atomic::AtomicBool,
}

impl std::fmt::Debug for Pml {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pml")
            .field("rank", &self.me)
            .field("size", &self.size)
            .finish()
    }
}

impl Pml {
    /// Initialises MPI point-to-point for this process (see
    /// `crate::init` for the sequence): wire-up through PMI (singleton
    /// without a launcher), BTL selection, COMM_WORLD and COMM_SELF.
    pub fn init(opts: InitOptions) -> Result<Pml, PmlError> {
        let s = crate::init::start(opts)?;
        let mut pml = Pml::from_parts(s.core, s.net, s.yield_when_idle, s.stats, Some(s.rt));
        pml.node_of = s.node_of;
        Ok(pml)
    }

    /// A pml over an explicit transport (tests, embedding).
    pub fn with_transport(
        me: u32,
        net: Box<dyn Transport>,
        yield_when_idle: bool,
    ) -> Result<Pml, PmlError> {
        let size = net.size();
        let mut core = Core::new(me, size, Box::new(EngineMatcher::new()));
        core.add_comm(CommRecord::world(me, size))?;
        core.add_comm(CommRecord::self_comm(me))?;
        Ok(Pml::from_parts(core, net, yield_when_idle, false, None))
    }

    fn from_parts(
        core: Core,
        net: Box<dyn Transport>,
        yield_when_idle: bool,
        stats: bool,
        rt: Option<crate::init::Runtime>,
    ) -> Pml {
        let me = core.me();
        let size = net.size();
        Pml {
            inner: Mutex::new(Inner::new(core, net)),
            me,
            size,
            yield_when_idle,
            serial: std::sync::atomic::AtomicBool::new(false),
            stats,
            rt: Mutex::new(rt),
            node_of: Vec::new(),
            hook: std::sync::OnceLock::new(),
            more: Mutex::new(Vec::new()),
            more_hooks: std::sync::atomic::AtomicBool::new(false),
        }
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, Inner> {
        lock_plain(&self.inner)
    }

    /// World rank of this process.
    pub fn rank(&self) -> u32 {
        self.me
    }

    /// Number of processes in the job.
    pub fn size(&self) -> u32 {
        self.size
    }

    /// Node label of world rank `rank`: ranks with equal labels run on one
    /// host (from the launcher's process mapping). A pml over an explicit
    /// transport ([`Pml::with_transport`]) puts every rank on node 0.
    pub fn node_of(&self, rank: u32) -> u32 {
        self.node_of.get(rank as usize).copied().unwrap_or(0)
    }

    /// Declares whether calls into this pml are serialized by the caller
    /// (MPI_THREAD_SINGLE, FUNNELED or SERIALIZED; the C API sets it from
    /// the thread level MPI_Init_thread provided). When they are, a blocking
    /// receive holds the pml's lock from its first poll to its return
    /// instead of releasing and taking it again every round: no other
    /// thread can want it, and the two atomic operations per round delayed
    /// noticing the peer's message (docs/pml.md). With MPI_THREAD_MULTIPLE
    /// (the default, and the Rust API's level) the lock is released between
    /// rounds so other threads make progress.
    pub fn set_serial_calls(&self, serial: bool) {
        self.serial
            .store(serial, std::sync::atomic::Ordering::Relaxed);
    }

    /// Whether waiting loops yield the processor between polls.
    pub fn yields_when_idle(&self) -> bool {
        self.yield_when_idle
    }

    /// Adds a communicator (used by coll when it creates one).
    pub fn add_comm(&self, c: CommRecord) -> Result<(), PmlError> {
        self.lock().core.add_comm(c)
    }

    /// Removes a communicator (the protocol core's `remove_comm`).
    pub fn remove_comm(&self, ctx: u32) -> Result<(), PmlError> {
        self.lock().core.remove_comm(ctx)
    }

    /// Rank and size of this process in communicator `ctx`.
    pub fn comm_rank_size(&self, ctx: u32) -> Result<(i32, i32), PmlError> {
        let g = self.lock();
        let c = g.core.comm(ctx)?;
        Ok((c.rank, c.size()))
    }

    /// Sets `pml_ob1_unexpected_limit` (bytes per peer, 0 = unbounded; see
    /// `Core::set_unexpected_limit`). For a pml built with
    /// [`Pml::with_transport`] (tests); [`Pml::init`] reads the parameter.
    pub fn set_unexpected_limit(&self, bytes: u64) {
        let mut g = self.lock();
        g.core.set_unexpected_limit(bytes);
        g.flush();
    }
}

impl Drop for Pml {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.abandon();
            return;
        }
        if let Err(e) = self.finalize() {
            tracing::error!(target: "pml_ob1", "finalize: {e}");
        }
    }
}

fn check_send_tag(tag: i32) -> Result<(), PmlError> {
    // Negative tags are internal (collectives) and allowed below the user
    // API; only the wildcard is refused for sends.
    if tag == crate::request::ANY_TAG {
        return Err(PmlError::Tag(tag));
    }
    Ok(())
}

fn check_recv_tag(tag: i32) -> Result<(), PmlError> {
    if tag > crate::request::TAG_UB {
        return Err(PmlError::Tag(tag));
    }
    Ok(())
}

/// Maps a completed status to the error MPI's wait would return.
pub fn status_error(s: &Status) -> Option<MpiErrorClass> {
    (s.error != MpiErrorClass::Success).then_some(s.error)
}

/// Locks a mutex, taking the data of a poisoned one: a panic under one of
/// the pml's locks (a bug) must not turn every later call into a second
/// panic; the state is still the best information there is.
fn lock_plain<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
