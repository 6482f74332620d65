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

use std::collections::VecDeque;
use std::sync::{Mutex, MutexGuard};

use tmpi_base::error::MpiErrorClass;

use crate::comm::CommRecord;
use crate::core::{Action, Core, Limits, Stats, Wire};
use crate::matching::{EngineMatcher, Envelope, MsgId, Pattern};
use crate::net::BTL_TAG_PML;
use crate::raw::{RawBuf, RawBufMut};
use crate::region::Region;
use crate::request::{MessageId, ReqId, SendMode, Status};
use crate::transport::{Transport, TxError};
use crate::PmlError;

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

pub(crate) struct Inner {
    pub(crate) core: Core,
    pub(crate) net: Box<dyn Transport>,
    pub(crate) limits: Vec<Limits>,
    /// Deregistrations requested while the transport was busy polling.
    dereg: Vec<(u32, Region)>,
    /// Actions a BTL could not take yet (resource busy), in order.
    pending: VecDeque<Action>,
    scratch: Vec<Action>,
    /// Messages taken by improbe: id -> envelope.
    mprobed: std::collections::HashMap<MsgId, Envelope>,
    /// The offload path is on (a btl-openib module with tag matching).
    tm: bool,
    /// Tagged-path inputs are possible (some openib module): polled.
    tm_in: bool,
    tm_inputs: Vec<crate::transport::TmInput>,
    /// Progress rounds so far (failed peers are collected every
    /// [`FAILED_POLL`]th).
    rounds: u32,
    /// Per world rank: the carrying BTL's direct channel
    /// (`Transport::direct_send`), used by the blocking-send fast path.
    direct: Vec<Option<std::sync::Arc<dyn tmpi_btl::DirectSend>>>,
    /// Per world rank: the carrying BTL's direct receive channel
    /// (`Transport::direct_recv`), used by the blocking-receive fast path.
    direct_rx: Vec<Option<std::sync::Arc<dyn tmpi_btl::DirectRecv>>>,
    /// Transfers that failed on each peer's broken connection
    /// ([`Inner::log_broken`]).
    broken: std::collections::HashMap<u32, u64>,
}

impl Inner {
    /// Counts a transfer with `peer` that failed because its connection
    /// broke; `true` for the first, which the caller logs with its cause.
    /// The later ones are logged only as a count, when it reaches 10, 100,
    /// 1000, ... (a large message has many fragments, each of which fails
    /// the same way).
    fn first_broken(&mut self, peer: u32) -> bool {
        let n = self.broken.entry(peer).or_insert(0);
        *n += 1;
        let n = *n;
        if n >= 10 && 10u64.pow(n.ilog10()) == n {
            tracing::error!(target: "pml_ob1", peer, "{n} transfers with rank {peer} have failed on its broken connection so far");
        }
        n == 1
    }
}

/// Looks at the source's direct channel per polling round of a blocking
/// receive (`Pml::recv_blocking`).
const DIRECT_LOOKS: usize = 8;

/// Looks at the source's direct channel before a blocking receive of a
/// message it can carry is posted (`Pml::recv_blocking`): a short spin,
/// about one small message's round trip.
const PRE_POST_LOOKS: usize = 64;

/// Polling rounds a blocking eager send spends waiting for room in the
/// peer's fast box before it takes the FIFO path (`send_eager_transport`).
const DIRECT_RETRY_ROUNDS: usize = 32;

/// See [`Inner::progress`]: progress rounds per collection of failed peers.
const FAILED_POLL: u32 = 64;

/// [`Wire`] over the transport and the per-peer limits table.
struct NetWire<'a> {
    net: &'a mut dyn Transport,
    limits: &'a [Limits],
}

impl Wire for NetWire<'_> {
    fn limits(&self, peer: u32) -> Limits {
        self.limits[peer as usize]
    }
    fn register(&mut self, peer: u32, buf: RawBuf) -> Option<Region> {
        self.net.register(peer, buf)
    }
    fn deregister(&mut self, peer: u32, region: &[u8]) {
        self.net.deregister(peer, region)
    }
}

/// [`Wire`] used while the transport delivers fragments (it is borrowed):
/// deregistrations are deferred, registration is never needed there.
struct DeferWire<'a> {
    limits: &'a [Limits],
    dereg: &'a mut Vec<(u32, Region)>,
}

impl Wire for DeferWire<'_> {
    fn limits(&self, peer: u32) -> Limits {
        self.limits[peer as usize]
    }
    fn register(&mut self, _peer: u32, _buf: RawBuf) -> Option<Region> {
        None
    }
    fn deregister(&mut self, peer: u32, region: &[u8]) {
        self.dereg.push((peer, Region::new(region)));
    }
}

/// What one look at a direct channel found ([`Inner::recv_direct`]).
enum DirectLook {
    /// The receive's message, taken.
    Taken(Status),
    /// Nothing yet.
    Empty,
    /// Something the direct path does not take for this receive (another
    /// kind of fragment, another tag, a message it cannot deliver), or no
    /// direct path now: looking again cannot help before a polling round.
    Other,
}

impl Inner {
    pub(crate) fn new(core: Core, net: Box<dyn Transport>) -> Self {
        let n = net.size();
        let limits = (0..n).map(|p| net.limits(p)).collect();
        let tm = net.tm_caps().is_some();
        let tm_in = net.tm_inputs();
        let direct = (0..n).map(|p| net.direct_send(p)).collect();
        let direct_rx = (0..n).map(|p| net.direct_recv(p)).collect();
        Inner {
            direct,
            direct_rx,
            broken: std::collections::HashMap::new(),
            tm,
            tm_in,
            tm_inputs: Vec::new(),
            rounds: 0,
            core,
            net,
            limits,
            dereg: Vec::new(),
            pending: VecDeque::new(),
            scratch: Vec::new(),
            mprobed: std::collections::HashMap::new(),
        }
    }

    /// Polls the transport once and carries out everything that results.
    /// Returns the number of events (fragments + actions) handled.
    pub(crate) fn progress(&mut self) -> usize {
        self.progress_with(false)
    }

    /// [`Inner::progress`] for a caller blocked on one message (a blocking
    /// receive): the transports hand over fewer of the fragments already
    /// waiting (`Transport::progress_waiting`).
    pub(crate) fn progress_waiting(&mut self) -> usize {
        self.progress_with(true)
    }

    #[inline(always)]
    fn progress_with(&mut self, waiting: bool) -> usize {
        let mut n = self.flush();
        let Inner {
            core,
            net,
            limits,
            dereg,
            ..
        } = self;
        let mut w = DeferWire { limits, dereg };
        let mut deliver = |peer, bytes: &[u8]| {
            let _ = core.on_frag(&mut w, peer, bytes);
        };
        n += if waiting {
            net.progress_waiting(&mut deliver)
        } else {
            net.progress(&mut deliver)
        };
        // Failed peers are collected once in FAILED_POLL rounds: asking
        // every module every round (virtual calls, an empty `Vec`) is a
        // visible share of a small ping-pong's waiting loop; a failure is
        // still noticed within microseconds.
        self.rounds = self.rounds.wrapping_add(1);
        if self.rounds.is_multiple_of(FAILED_POLL) {
            n += self.collect_failed();
        }
        if self.tm_in {
            n += self.tm_progress();
        }
        // After the round's NIC inputs: a BYE must not overtake a tagged
        // message its sender sent before it (core/bye.rs).
        if self.core.has_byes() {
            n += self.apply_byes();
        }
        if !self.dereg.is_empty() {
            // Drained in place: the list keeps its capacity (no allocation
            // per rendezvous).
            for (peer, r) in self.dereg.drain(..) {
                self.net.deregister(peer, &r);
            }
        }
        n + self.flush()
    }

    /// The blocking send's fast path: an eager send with nothing queued
    /// before it goes straight to the transport's direct channel, without
    /// a request or an action (docs/pml.md "Blocking calls and the
    /// lock"): `Some(Ok(status))` sent; `Some(Err(e))` the sender's
    /// bookkeeping is done but the direct channel refused, the fragment
    /// goes through the transport (`Pml::send_eager_transport`); `None`
    /// not such a send, nothing was done.
    ///
    /// # Safety
    /// `buf` is valid for reads and unmodified during the call.
    #[inline(always)]
    unsafe fn eager_now(
        &mut self,
        ctx: u32,
        dest: i32,
        tag: i32,
        buf: RawBuf,
        mode: SendMode,
    ) -> Result<Option<Result<Status, crate::core::EagerSend>>, PmlError> {
        if self.tm || !self.pending.is_empty() || self.core.has_actions() {
            return Ok(None);
        }
        let Some(e) = self
            .core
            .eager_direct(&self.limits, ctx, dest, tag, buf.len(), mode)?
        else {
            return Ok(None);
        };
        if let (Some(Some(tx)), true) = (self.direct.get(e.peer as usize), buf.is_contiguous()) {
            // SAFETY: every use of the BTL modules and of their direct
            // handles happens under the pml's lock, held by the caller
            // (DirectSend's contract; a finalized module's handle
            // refuses); `buf` is valid for reads during this call
            // (contract) and contiguous.
            if unsafe { tx.try_send(BTL_TAG_PML, &e.hdr, buf.as_slice()) } {
                return Ok(Some(Ok(e.st)));
            }
        }
        Ok(Some(Err(e)))
    }

    /// The blocking receive's fast path: the next eager message of `src`
    /// (world rank `peer`, `Core::direct_source`) taken straight from its
    /// BTL's direct channel when it is this receive's (`Core::direct_ready`,
    /// `Core::take_direct`): no
    /// request, no matching queue, no polling round. A receiver behind a
    /// faster sender (a stream, a bcast or reduce at 2 ranks) finds its
    /// message there; otherwise it costs one look at the channel.
    /// `posted`: the receive's request once it is posted (a waiting
    /// round), withdrawn from the matcher and released when the message
    /// is taken.
    ///
    /// # Safety
    /// `buf` is valid for writes during the call.
    #[inline(always)]
    unsafe fn recv_direct(
        &mut self,
        peer: u32,
        pat: &Pattern,
        buf: RawBufMut,
        posted: Option<ReqId>,
    ) -> DirectLook {
        if !self.pending.is_empty() || !self.core.direct_ready(peer, usize::from(posted.is_some()))
        {
            return DirectLook::Other;
        }
        let Some(rx) = self.direct_rx.get(peer as usize).and_then(Option::as_ref) else {
            return DirectLook::Other;
        };
        let core = &mut self.core;
        let mut st = None;
        let mut seen = false;
        let mut take = |btl_tag, bytes: &[u8]| {
            seen = true;
            if btl_tag != BTL_TAG_PML {
                return false;
            }
            // SAFETY: `buf` is valid for writes (contract).
            st = unsafe { core.take_direct(peer, pat, buf, posted, bytes) };
            st.is_some()
        };
        // SAFETY: every use of the BTL modules and of their direct handles
        // happens under the pml's lock, held by the caller (DirectRecv's
        // contract; a finalized module's handle offers nothing).
        unsafe { rx.take_head(&mut take) };
        match st {
            Some(st) => {
                if self.core.has_actions() {
                    // Credit owed back to the sender (`Core::consumed`)
                    // goes out now, as after a polling round.
                    self.flush();
                }
                DirectLook::Taken(st)
            }
            None if seen => DirectLook::Other,
            None => DirectLook::Empty,
        }
    }

    /// Up to `looks` looks at the direct channel ([`Inner::recv_direct`]),
    /// stopping at the first that finds anything: the message, or
    /// something else at the head (a rendezvous request, another tag),
    /// which only the full path takes (an 8-byte MPI_Ssend ping-pong spent
    /// 64 looks at its RNDV).
    ///
    /// # Safety
    /// As [`Inner::recv_direct`].
    #[inline(always)]
    unsafe fn look_direct(
        &mut self,
        looks: usize,
        peer: u32,
        pat: &Pattern,
        buf: RawBufMut,
        posted: Option<ReqId>,
    ) -> Option<Status> {
        for _ in 0..looks {
            // SAFETY: forwarded contract.
            match unsafe { self.recv_direct(peer, pat, buf, posted) } {
                DirectLook::Taken(s) => return Some(s),
                DirectLook::Empty => {}
                DirectLook::Other => return None,
            }
        }
        None
    }

    /// Starts a send request (`Core::isend` over the transport) and carries
    /// out what it produced.
    ///
    /// # Safety
    /// As [`Core::isend`].
    unsafe fn start_send(
        &mut self,
        ctx: u32,
        dest: i32,
        tag: i32,
        buf: RawBuf,
        mode: SendMode,
    ) -> Result<ReqId, PmlError> {
        let mut w = NetWire {
            net: &mut *self.net,
            limits: &self.limits,
        };
        // SAFETY: forwarded contract.
        let id = unsafe { self.core.isend(&mut w, ctx, dest, tag, buf, mode) }?;
        self.flush();
        Ok(id)
    }

    /// Posts a receive (`Core::irecv` over the transport).
    ///
    /// # Safety
    /// As [`Core::irecv`].
    unsafe fn post_recv(
        &mut self,
        ctx: u32,
        src: i32,
        tag: i32,
        buf: RawBufMut,
    ) -> Result<ReqId, PmlError> {
        let mut w = NetWire {
            net: &mut *self.net,
            limits: &self.limits,
        };
        // SAFETY: forwarded contract.
        unsafe { self.core.irecv(&mut w, ctx, src, tag, buf) }
    }

    /// Fails the requests that depend on peers the transports found dead
    /// since the last call; returns their number. Out of line: most rounds
    /// do not call it (an empty `Vec` and its loop would cost every polling
    /// round inline).
    #[cold]
    #[inline(never)]
    fn collect_failed(&mut self) -> usize {
        let failed = self.net.take_failed();
        let n = failed.len();
        for (peer, why) in failed {
            let k = self.core.peer_failed(peer, MpiErrorClass::Other);
            tracing::error!(target: "pml_ob1", peer,
                "rank {peer} failed ({why}): {k} pending request(s) depending on it fail with MPI_ERR_OTHER");
        }
        n
    }

    /// Applies the BYEs that arrived: fails what waits on peers that are
    /// finalizing; returns how many peers. Out of line: rare.
    #[cold]
    #[inline(never)]
    fn apply_byes(&mut self) -> usize {
        let done = self.core.apply_byes();
        for &(peer, k) in &done {
            if k > 0 {
                tracing::warn!(target: "pml_ob1", peer,
                    "rank {peer} called MPI_Finalize: {k} pending request(s) waiting on it fail with MPI_ERR_OTHER");
            } else {
                tracing::debug!(target: "pml_ob1", peer, "rank {peer} called MPI_Finalize");
            }
        }
        done.len()
    }

    /// Queues a BYE to the peers that should get one (core/bye.rs) and
    /// hands everything to the BTLs.
    fn say_bye(&mut self) {
        let Inner { core, net, .. } = self;
        let n = core.say_bye(&|p| matches!(net.peer_btl(p), Some("self" | "sm")));
        tracing::debug!(target: "pml_ob1", "finalize: BYE to {n} peer(s)");
    }

    /// The offload path, under the pml's lock: NIC inputs in CQ order into
    /// the split matcher, its late outcomes, then its NIC-list operations
    /// in pull order (a refusal goes back before the next pull).
    fn tm_progress(&mut self) -> usize {
        let Inner {
            core,
            net,
            limits,
            dereg,
            tm_inputs,
            ..
        } = self;
        let mut w = DeferWire { limits, dereg };
        net.tm_take(tm_inputs);
        let n = tm_inputs.len();
        for i in tm_inputs.drain(..) {
            core.on_tm_input(&mut w, i);
        }
        core.drain_late(&mut w);
        while let Some(a) = core.poll_nic_action() {
            let (user, peer) = match a {
                tmpi_tm_engine::split::NicAction::Add { recv, buffer, .. } => (
                    match buffer {
                        tmpi_tm_engine::split::NicBuffer::User => core.recv_buffer(ReqId(recv)),
                        tmpi_tm_engine::split::NicBuffer::Bounce => None,
                    },
                    core.recv_peer(ReqId(recv)),
                ),
                _ => (None, None),
            };
            if let Some(refused) = net.tm_exec(a, user, peer) {
                core.on_tm_input(&mut w, crate::transport::TmInput::Nic(refused));
            }
        }
        n
    }

    /// Carries out one action; gives it back when the BTL is busy.
    fn exec(&mut self, a: Action) -> Result<(), Action> {
        match a {
            Action::Send {
                peer,
                hdr,
                data,
                done,
            } => {
                // SAFETY: `data` belongs to a send request that is not
                // complete (it completes only below, after the BTL took the
                // bytes), so its buffer is valid (isend contract). A typed
                // buffer packs this fragment's bytes only.
                let net = &mut self.net;
                let sent = unsafe { data.with_bytes(|b| net.send(peer, hdr.as_slice(), b)) };
                match sent {
                    Ok(()) => {
                        if let Some(id) = done {
                            self.core.send_done(id);
                        }
                        Ok(())
                    }
                    Err(TxError::Busy) => Err(Action::Send {
                        peer,
                        hdr,
                        data,
                        done,
                    }),
                    Err(TxError::Fatal(e)) => {
                        tracing::error!(target: "pml_ob1", peer, "send failed: {e}");
                        if let Some(id) = done {
                            self.core.send_done(id);
                        }
                        Ok(())
                    }
                    Err(TxError::Broken(e)) => {
                        if self.first_broken(peer) {
                            tracing::error!(target: "pml_ob1", peer, "send to rank {peer} failed, connection broken: {e}");
                        }
                        if let Some(id) = done {
                            self.core.send_failed(id, MpiErrorClass::Other);
                        }
                        Ok(())
                    }
                }
            }
            Action::Get {
                peer,
                region,
                dst,
                rreq,
            } => {
                match self.net.get(peer, &region, dst) {
                    Ok(()) => self.core.get_done(rreq, true),
                    Err(TxError::Busy) => {
                        return Err(Action::Get {
                            peer,
                            region,
                            dst,
                            rreq,
                        })
                    }
                    Err(TxError::Broken(e)) => {
                        if self.first_broken(peer) {
                            tracing::error!(target: "pml_ob1", peer, "RDMA read from rank {peer} failed, connection broken: {e}; the receive fails");
                        }
                        self.core.get_failed(rreq, MpiErrorClass::Other);
                    }
                    Err(e) => {
                        tracing::debug!(target: "pml_ob1", peer, "get failed: {e:?}");
                        self.core.get_done(rreq, false);
                    }
                }
                Ok(())
            }
        }
    }

    /// Carries out queued actions, in order, until none is left or a BTL
    /// is busy (the refused action and everything after it wait in
    /// `pending` for the next round). Fast path: with nothing pending, the
    /// core's actions run straight from its output vector.
    #[inline]
    pub(crate) fn flush(&mut self) -> usize {
        // Most polling rounds have nothing to carry out: answer that without
        // the call (two flushes per round are a visible share of an idle
        // round).
        if self.pending.is_empty() && !self.core.has_actions() {
            return 0;
        }
        self.flush_queued()
    }

    #[inline(never)]
    fn flush_queued(&mut self) -> usize {
        let mut done = 0;
        while let Some(a) = self.pending.pop_front() {
            if let Err(a) = self.exec(a) {
                self.pending.push_front(a);
                return done;
            }
            done += 1;
            if self.core.has_actions() {
                let mut s = std::mem::take(&mut self.scratch);
                self.core.take_actions(&mut s);
                self.pending.extend(s.drain(..));
                self.scratch = s;
            }
        }
        while self.core.has_actions() {
            let mut s = std::mem::take(&mut self.scratch);
            self.core.take_actions(&mut s);
            let mut it = s.drain(..);
            while let Some(a) = it.next() {
                if let Err(a) = self.exec(a) {
                    // Keep the order: the refused action, the rest of this
                    // batch; actions the core produced meanwhile follow at
                    // the next round (they are still in the core).
                    self.pending.push_back(a);
                    self.pending.extend(it);
                    self.scratch = s;
                    return done;
                }
                done += 1;
            }
            drop(it);
            self.scratch = s;
        }
        done
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

/// Work of a layer above the pml that must advance while a thread waits
/// in a blocking point-to-point call (MPI's progress rule): the coll
/// framework's non-blocking collectives, whose next round a rank blocked
/// in `MPI_Recv` may owe to the very peer it waits for.
struct ProgressHook {
    /// Non-zero while there may be work (read every waiting round).
    pending: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    run: Box<dyn Fn() + Send + Sync>,
}

thread_local! {
    /// This thread is running the progress hook (a blocking call made from
    /// inside it does not run it again).
    static IN_HOOK: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
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

    /// Registers the work that every waiting round of a blocking call
    /// (receive, send, wait, probe, ...) runs while `pending` is non-zero,
    /// with the pml's lock released: `run` may call into the pml. The
    /// process's coll framework registers one per context; every hook
    /// registered runs (the first is checked without a lock, later ones
    /// under a short one). A blocking call made from inside a hook does not
    /// run hooks again. Always `true`.
    pub fn set_progress_hook(
        &self,
        pending: std::sync::Arc<std::sync::atomic::AtomicUsize>,
        run: Box<dyn Fn() + Send + Sync>,
    ) -> bool {
        let mut hook = Some(ProgressHook { pending, run });
        self.hook.get_or_init(|| hook.take().expect("taken once"));
        if let Some(h) = hook {
            lock_plain(&self.more).push(std::sync::Arc::new(h));
            self.more_hooks
                .store(true, std::sync::atomic::Ordering::Release);
        }
        true
    }

    /// The first hook, when it has work.
    #[inline]
    fn hook_pending(&self) -> Option<&ProgressHook> {
        self.hook
            .get()
            .filter(|h| h.pending.load(std::sync::atomic::Ordering::Acquire) != 0)
    }

    /// Whether some hook may have work (the caller then releases the lock
    /// and calls [`Pml::idle`]).
    #[inline]
    fn hooks_pending(&self) -> bool {
        self.hook_pending().is_some() || self.more_hooks.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Runs the progress hooks that have work ([`Pml::set_progress_hook`]),
    /// for a layer whose own waiting loop does not go through the pml's
    /// (coll's blocking collectives poll shared memory and call
    /// [`Pml::progress`]): one-sided requests a rank must serve as a
    /// target then still move while it waits in `MPI_Barrier`. The caller
    /// holds no pml lock; a call from inside a hook does nothing.
    #[inline]
    pub fn run_progress_hooks(&self) {
        if let Some(h) = self.hook_pending() {
            Pml::run_hook(h);
        }
        if self.more_hooks.load(std::sync::atomic::Ordering::Acquire) {
            self.run_more_hooks();
        }
    }

    /// Runs the later hooks that have work (the caller holds no pml lock).
    #[cold]
    #[inline(never)]
    fn run_more_hooks(&self) {
        let busy: Vec<std::sync::Arc<ProgressHook>> = lock_plain(&self.more)
            .iter()
            .filter(|h| h.pending.load(std::sync::atomic::Ordering::Acquire) != 0)
            .cloned()
            .collect();
        for h in &busy {
            Pml::run_hook(h);
        }
    }

    /// Runs the hook (the caller holds no pml lock).
    #[cold]
    #[inline(never)]
    fn run_hook(h: &ProgressHook) {
        if IN_HOOK.with(|c| c.replace(true)) {
            return;
        }
        struct Reset;
        impl Drop for Reset {
            fn drop(&mut self) {
                IN_HOOK.with(|c| c.set(false));
            }
        }
        let _reset = Reset;
        (h.run)();
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

    /// Starts a send.
    ///
    /// # Safety
    /// `buf` must be valid for reads and not modified until the request
    /// completes (buffered sends: only during the call).
    pub unsafe fn isend(
        &self,
        ctx: u32,
        dest: i32,
        tag: i32,
        buf: RawBuf,
        mode: SendMode,
    ) -> Result<ReqId, PmlError> {
        check_send_tag(tag)?;
        let mut g = self.lock();
        // An eager message whose fragment goes out at once (the blocking
        // send's path) makes a request born complete: no queued action,
        // no transport round. A windowed stream of small isends (the
        // message-rate pattern) spent most of its time in that round.
        // SAFETY: forwarded contract (`buf` is read during the call).
        match unsafe { g.eager_now(ctx, dest, tag, buf, mode) }? {
            Some(Ok(st)) => Ok(g.core.done_request(st)),
            Some(Err(e)) => {
                // The direct handle refused it (the fast box is full, or
                // FIFO fragments are out): queued as `isend` would queue
                // it, and handed to the transport now.
                let id = g.core.queue_direct(&e, buf);
                g.flush();
                Ok(id)
            }
            // SAFETY: forwarded contract.
            None => unsafe { g.start_send(ctx, dest, tag, buf, mode) },
        }
    }

    /// Posts a receive.
    ///
    /// # Safety
    /// `buf` must be valid for writes and not accessed otherwise until the
    /// request completes.
    pub unsafe fn irecv(
        &self,
        ctx: u32,
        src: i32,
        tag: i32,
        buf: RawBufMut,
    ) -> Result<ReqId, PmlError> {
        check_recv_tag(tag)?;
        let mut g = self.lock();
        // SAFETY: forwarded contract.
        let id = unsafe { g.post_recv(ctx, src, tag, buf) }?;
        g.flush();
        if g.tm {
            // Post the receive's ADD now (in pull order), not at the next
            // progress: the NIC should hold it before its message arrives.
            g.tm_progress();
        }
        Ok(id)
    }

    /// Blocking send (`MPI_Send` and friends): starts the send, and when it
    /// completes at once (eager) returns under the same lock acquisition;
    /// otherwise waits like [`Pml::wait`].
    ///
    /// # Safety
    /// `buf` must be valid for reads and unmodified during the call.
    pub unsafe fn send_blocking(
        &self,
        ctx: u32,
        dest: i32,
        tag: i32,
        buf: RawBuf,
        mode: SendMode,
    ) -> Result<Status, PmlError> {
        check_send_tag(tag)?;
        let mut g = self.lock();
        // SAFETY: forwarded contract.
        match unsafe { g.eager_now(ctx, dest, tag, buf, mode) }? {
            Some(Ok(st)) => Ok(st),
            // SAFETY: forwarded contract.
            Some(Err(e)) => unsafe { self.send_eager_transport(g, e, buf) },
            // SAFETY: forwarded contract.
            None => unsafe { self.send_started(g, ctx, dest, tag, buf, mode) },
        }
    }

    /// A blocking standard send of `buf` that goes out only if it goes
    /// eager at once: `Ok(None)` (nothing was done) when it would not
    /// (above the eager limit, the peer's credit window full, actions
    /// queued, the offload path). Such a send never waits for the
    /// receiver to match it, so two ranks may both send this way before
    /// they receive from each other (the collectives' exchanges).
    ///
    /// # Safety
    /// As [`Pml::send_blocking`].
    pub unsafe fn send_eager(
        &self,
        ctx: u32,
        dest: i32,
        tag: i32,
        buf: RawBuf,
    ) -> Result<Option<Status>, PmlError> {
        check_send_tag(tag)?;
        let mut g = self.lock();
        // SAFETY: forwarded contract.
        match unsafe { g.eager_now(ctx, dest, tag, buf, SendMode::Standard) }? {
            Some(Ok(st)) => Ok(Some(st)),
            // SAFETY: forwarded contract.
            Some(Err(e)) => unsafe { self.send_eager_transport(g, e, buf) }.map(Some),
            None => Ok(None),
        }
    }

    /// [`Pml::send_blocking`]'s eager fragment when the direct handle
    /// refused it: through the transport, queued when the BTL is busy.
    /// Out of line, as the next function: the fast path stays small.
    ///
    /// # Safety
    /// As [`Pml::send_blocking`].
    #[cold]
    #[inline(never)]
    unsafe fn send_eager_transport(
        &self,
        mut g: MutexGuard<'_, Inner>,
        e: crate::core::EagerSend,
        buf: RawBuf,
    ) -> Result<Status, PmlError> {
        let (peer, st) = (e.peer, e.st);
        if let (Some(Some(tx)), true) = (g.direct.get(peer as usize).cloned(), buf.is_contiguous())
        {
            // The fast box was full, or FIFO fragments to the peer are
            // still out (only a polling round takes their return): poll a
            // few rounds and try it again before taking the FIFO path,
            // after which every later send would wait for the FIFO
            // fragments to come back too. Not for a fragment the fast box
            // never takes (above `btl_sm_fbox_max`).
            let rounds = if e.hdr.len() + buf.len() <= tx.max_fragment() {
                DIRECT_RETRY_ROUNDS
            } else {
                0
            };
            for _ in 0..rounds {
                // Oversubscribed, the receiver may need this core.
                self.idle_locked();
                g.progress();
                if !g.pending.is_empty() || g.core.has_actions() {
                    break;
                }
                // SAFETY: as in `send_blocking` (lock held, `buf` valid
                // and contiguous).
                if unsafe { tx.try_send(BTL_TAG_PML, &e.hdr, buf.as_slice()) } {
                    return Ok(st);
                }
            }
        }
        let net = &mut *g.net;
        // SAFETY: `buf` is valid for reads during this call (contract); a
        // typed buffer packs its bytes here.
        let sent = unsafe { buf.with_bytes(|b| net.send(peer, &e.hdr, b)) };
        match sent {
            Ok(()) => Ok(st),
            Err(TxError::Busy) => {
                let id = g.core.queue_direct(&e, buf);
                g.flush();
                if let Some(s) = g.core.take_done(id).map_err(|()| PmlError::Request)? {
                    return Ok(s);
                }
                drop(g);
                self.wait(id)
            }
            // As `Inner::exec` for a queued send.
            Err(TxError::Fatal(e)) => {
                tracing::error!(target: "pml_ob1", peer, "send failed: {e}");
                Ok(st)
            }
            Err(TxError::Broken(e)) => {
                if g.first_broken(peer) {
                    tracing::error!(target: "pml_ob1", peer, "send to rank {peer} failed, connection broken: {e}");
                }
                Ok(Status {
                    error: MpiErrorClass::Other,
                    ..st
                })
            }
        }
    }

    /// [`Pml::send_blocking`] for everything but an eager fragment to
    /// send at once: a send request, completed here or waited for.
    ///
    /// # Safety
    /// As [`Pml::send_blocking`].
    #[cold]
    #[inline(never)]
    unsafe fn send_started(
        &self,
        mut g: MutexGuard<'_, Inner>,
        ctx: u32,
        dest: i32,
        tag: i32,
        buf: RawBuf,
        mode: SendMode,
    ) -> Result<Status, PmlError> {
        // SAFETY: forwarded contract (the buffer outlives this call,
        // which returns only once the request completed).
        let id = unsafe { g.start_send(ctx, dest, tag, buf, mode) }?;
        if let Some(s) = g.core.take_done(id).map_err(|()| PmlError::Request)? {
            return Ok(s);
        }
        drop(g);
        self.wait(id)
    }

    /// Blocking receive (`MPI_Recv`): posts and waits, progressing under
    /// one lock acquisition per round (one in all when the message has
    /// arrived already).
    ///
    /// # Safety
    /// `buf` must be valid for writes and not accessed otherwise during the
    /// call.
    pub unsafe fn recv_blocking(
        &self,
        ctx: u32,
        src: i32,
        tag: i32,
        buf: RawBufMut,
    ) -> Result<Status, PmlError> {
        check_recv_tag(tag)?;
        let mut g = self.lock();
        // The source's direct channel, if any: looked up once, not per round.
        let direct = g
            .core
            .direct_source(ctx, src)
            .filter(|&p| matches!(g.direct_rx.get(p as usize), Some(Some(_))));
        let pat = Pattern {
            ctx,
            src: Some(src),
            tag: (tag != crate::request::ANY_TAG).then_some(tag),
        };
        let mut round_looks = 0;
        if let Some(peer) = direct {
            // A message the direct channel can carry is looked for there a
            // while before the receive is posted: a ping-pong's reply comes
            // within that time, and a receive found this way costs no
            // request, no posting and no withdrawal (the latter on the
            // critical path). Nothing else progresses meanwhile, so nothing
            // can arrive by another path and be passed over.
            let fits = g
                .direct
                .get(peer as usize)
                .and_then(Option::as_ref)
                .is_some_and(|tx| buf.len() + crate::hdr::MATCH_LEN <= tx.max_fragment());
            // Not when ranks share cores (`mpi_yield_when_idle`): the
            // sender may be waiting for this core, and spinning here delays
            // it (small reductions with more ranks than cores slowed
            // threefold with the looks).
            let spin = fits && !self.yield_when_idle;
            let looks = if spin { PRE_POST_LOOKS } else { 1 };
            round_looks = if spin { DIRECT_LOOKS } else { 1 };
            // SAFETY: forwarded contract.
            if let Some(s) = unsafe { g.look_direct(looks, peer, &pat, buf, None) } {
                return Ok(s);
            }
        }
        // SAFETY: forwarded contract (the buffer outlives this call, which
        // returns only once the request completed).
        let id = unsafe { g.post_recv(ctx, src, tag, buf) }?;
        let serial = self.serial.load(std::sync::atomic::Ordering::Relaxed);
        if let Some(s) = g.core.take_done(id).map_err(|()| PmlError::Request)? {
            return Ok(s);
        }
        // One completion check per polling round, after it (the request
        // cannot complete between the check and the next round: in serial
        // mode the lock is held throughout, otherwise it is taken again
        // right before the round).
        loop {
            if let Some(peer) = direct {
                // Several looks at the direct channel per polling round (for
                // a message it can carry): a look costs a few dozen
                // instructions, a round hundreds, and a message that lands
                // during the round takes the full path (on_frag, matching,
                // completion) instead of this one.
                // SAFETY: forwarded contract.
                if let Some(s) = unsafe { g.look_direct(round_looks, peer, &pat, buf, Some(id)) } {
                    return Ok(s);
                }
            }
            g.progress_waiting();
            if let Some(s) = g.core.take_done(id).map_err(|()| PmlError::Request)? {
                return Ok(s);
            }
            if serial && !self.hooks_pending() {
                self.idle_locked();
                continue;
            }
            drop(g);
            self.idle();
            g = self.lock();
        }
    }

    /// Sets `pml_ob1_unexpected_limit` (bytes per peer, 0 = unbounded; see
    /// `Core::set_unexpected_limit`). For a pml built with
    /// [`Pml::with_transport`] (tests); [`Pml::init`] reads the parameter.
    pub fn set_unexpected_limit(&self, bytes: u64) {
        let mut g = self.lock();
        g.core.set_unexpected_limit(bytes);
        g.flush();
    }

    /// Whether request `id` completed, without releasing it (no progress).
    pub fn is_done(&self, id: ReqId) -> Result<bool, PmlError> {
        self.lock().core.is_done(id)
    }

    /// Polls the BTLs once.
    pub fn progress(&self) -> usize {
        self.lock().progress()
    }

    /// Between two polling rounds of a waiting call (the lock is released).
    /// Spinning rounds carry no `spin_loop` hint: on AMD EPYC the `pause` it
    /// emits is long enough to delay noticing the peer's message in a small
    /// ping-pong (docs/journal/pml-performance.md); ranks that share a core
    /// yield instead (`mpi_yield_when_idle`). First runs the progress hook
    /// when it has work ([`Pml::set_progress_hook`]): the caller holds no
    /// pml lock.
    #[inline]
    fn idle(&self) {
        self.run_progress_hooks();
        self.idle_locked();
    }

    /// [`Pml::idle`] for a caller holding the pml's lock: yields only.
    #[inline]
    fn idle_locked(&self) {
        if self.yield_when_idle {
            std::thread::yield_now();
        }
    }

    /// `MPI_Test`: the status if complete (the request is then released).
    pub fn test(&self, id: ReqId) -> Result<Option<Status>, PmlError> {
        let mut g = self.lock();
        if let Some(s) = g.core.test(id)? {
            return Ok(Some(s));
        }
        g.progress();
        g.core.test(id)
    }

    /// As [`Pml::test`] without polling the transports: for callers that
    /// test many requests per round and progress once for all of them.
    pub fn test_no_progress(&self, id: ReqId) -> Result<Option<Status>, PmlError> {
        self.lock().core.test(id)
    }

    /// `MPI_Wait`.
    pub fn wait(&self, id: ReqId) -> Result<Status, PmlError> {
        // The first round validates `id` (an error for a stale one); later
        // rounds use the cheap check.
        if let Some(s) = self.test(id)? {
            return Ok(s);
        }
        loop {
            self.idle();
            let mut g = self.lock();
            g.progress();
            if let Some(s) = g.core.take_done(id).map_err(|()| PmlError::Request)? {
                return Ok(s);
            }
        }
    }

    /// `MPI_Testany`: the index and status of one completed request (which
    /// is released and its slot set to `None`); `Ok(None)` if none is done.
    /// All-`None` input gives `Some((None, empty))` as MPI's MPI_UNDEFINED.
    pub fn testany(
        &self,
        ids: &mut [Option<ReqId>],
    ) -> Result<Option<(Option<usize>, Status)>, PmlError> {
        if ids.iter().all(Option::is_none) {
            return Ok(Some((None, Status::empty())));
        }
        let mut g = self.lock();
        for round in 0..2 {
            for (i, slot) in ids.iter_mut().enumerate() {
                if let Some(id) = *slot {
                    if let Some(s) = g.core.test(id)? {
                        *slot = None;
                        return Ok(Some((Some(i), s)));
                    }
                }
            }
            if round == 0 {
                g.progress();
            }
        }
        Ok(None)
    }

    /// `MPI_Waitany`.
    pub fn waitany(&self, ids: &mut [Option<ReqId>]) -> Result<(Option<usize>, Status), PmlError> {
        loop {
            if let Some(r) = self.testany(ids)? {
                return Ok(r);
            }
            self.idle();
        }
    }

    /// `MPI_Testsome`: every completed request (released, slot set to
    /// `None`), as (index, status).
    pub fn testsome(&self, ids: &mut [Option<ReqId>]) -> Result<Vec<(usize, Status)>, PmlError> {
        let mut g = self.lock();
        g.progress();
        let mut out = Vec::new();
        for (i, slot) in ids.iter_mut().enumerate() {
            if let Some(id) = *slot {
                if let Some(s) = g.core.test(id)? {
                    *slot = None;
                    out.push((i, s));
                }
            }
        }
        Ok(out)
    }

    /// `MPI_Waitsome`: waits until at least one completes (empty result only
    /// when every slot is `None`).
    pub fn waitsome(&self, ids: &mut [Option<ReqId>]) -> Result<Vec<(usize, Status)>, PmlError> {
        loop {
            if ids.iter().all(Option::is_none) {
                return Ok(Vec::new());
            }
            let r = self.testsome(ids)?;
            if !r.is_empty() {
                return Ok(r);
            }
            self.idle();
        }
    }

    /// `MPI_Testall`: all statuses once every request is complete (then all
    /// are released); `None` (nothing released) otherwise.
    pub fn testall(&self, ids: &mut [Option<ReqId>]) -> Result<Option<Vec<Status>>, PmlError> {
        let mut g = self.lock();
        g.progress();
        for id in ids.iter().flatten() {
            if !g.core.is_done(*id)? {
                return Ok(None);
            }
        }
        let mut out = Vec::with_capacity(ids.len());
        for slot in ids.iter_mut() {
            match slot.take() {
                Some(id) => out.push(g.core.test(id)?.unwrap_or_else(Status::empty)),
                None => out.push(Status::empty()),
            }
        }
        Ok(Some(out))
    }

    /// One round of a caller's `MPI_Waitall` loop, under one lock: when
    /// `test`, tests every pending request of `ids` (a completed one is
    /// released, its status put in `out` at its index and its slot set to
    /// `None`); then, if any is still pending, polls the transports once.
    /// Returns the polling round's events (0 when it did not poll) and the
    /// number still pending. The caller decides when to test again (after
    /// a round that handled something: testing 64 pending requests between
    /// two arrivals was most of a windowed receiver's time) and what to do
    /// between rounds (collectives' progress, yielding).
    pub fn waitall_round(
        &self,
        ids: &mut [Option<ReqId>],
        out: &mut [Status],
        test: bool,
    ) -> Result<(usize, usize), PmlError> {
        let mut g = self.lock();
        let mut left = 0;
        for (i, slot) in ids.iter_mut().enumerate() {
            let Some(id) = *slot else { continue };
            if test {
                if let Some(s) = g.core.test(id)? {
                    if let Some(o) = out.get_mut(i) {
                        *o = s;
                    }
                    *slot = None;
                    continue;
                }
            }
            left += 1;
        }
        let events = if left > 0 { g.progress() } else { 0 };
        Ok((events, left))
    }

    /// `MPI_Waitall`: waits for every request; statuses in input order
    /// (empty statuses for `None` slots).
    pub fn waitall(&self, ids: &mut [Option<ReqId>]) -> Result<Vec<Status>, PmlError> {
        let mut out = vec![Status::empty(); ids.len()];
        let mut left = ids.iter().filter(|s| s.is_some()).count();
        while left > 0 {
            {
                let mut g = self.lock();
                g.progress();
                for (i, slot) in ids.iter_mut().enumerate() {
                    if let Some(id) = *slot {
                        if let Some(s) = g.core.test(id)? {
                            out[i] = s;
                            *slot = None;
                            left -= 1;
                        }
                    }
                }
            }
            if left > 0 {
                self.idle();
            }
        }
        Ok(out)
    }

    /// `MPI_Cancel`: whether the request was cancelled (receives not yet
    /// matched only). The request must still be waited for or tested.
    pub fn cancel(&self, id: ReqId) -> Result<bool, PmlError> {
        let mut g = self.lock();
        let r = g.core.cancel(id)?;
        if r || !g.tm {
            return Ok(r);
        }
        // The offload path: a receive the NIC holds is cancelled by a DEL
        // that settles at the NIC (removed, or lost to a match already
        // made); wait for that so the answer is final.
        loop {
            if let Some(c) = g.core.cancel_outcome(id)? {
                return Ok(c);
            }
            g.progress();
            if let Some(c) = g.core.cancel_outcome(id)? {
                return Ok(c);
            }
            drop(g);
            self.idle();
            g = self.lock();
        }
    }

    /// `MPI_Request_free`.
    pub fn request_free(&self, id: ReqId) -> Result<(), PmlError> {
        self.lock().core.free_request(id)
    }

    /// `MPI_Iprobe`.
    pub fn iprobe(&self, ctx: u32, src: i32, tag: i32) -> Result<Option<Status>, PmlError> {
        check_recv_tag(tag)?;
        let mut g = self.lock();
        if let Some(s) = g.core.iprobe(ctx, src, tag)? {
            return Ok(Some(s));
        }
        g.progress();
        g.core.iprobe(ctx, src, tag)
    }

    /// `MPI_Probe`.
    pub fn probe(&self, ctx: u32, src: i32, tag: i32) -> Result<Status, PmlError> {
        loop {
            if let Some(s) = self.iprobe(ctx, src, tag)? {
                return Ok(s);
            }
            self.idle();
        }
    }

    /// `MPI_Improbe`: a message handle for [`Pml::imrecv`] and its status.
    pub fn improbe(
        &self,
        ctx: u32,
        src: i32,
        tag: i32,
    ) -> Result<Option<(MessageId, Status)>, PmlError> {
        check_recv_tag(tag)?;
        let mut g = self.lock();
        for round in 0..2 {
            if let Some((msg, env, st)) = g.core.improbe(ctx, src, tag)? {
                g.mprobed.insert(msg, env);
                return Ok(Some((MessageId(msg), st)));
            }
            if round == 0 {
                g.progress();
            }
        }
        Ok(None)
    }

    /// `MPI_Mprobe`.
    pub fn mprobe(&self, ctx: u32, src: i32, tag: i32) -> Result<(MessageId, Status), PmlError> {
        loop {
            if let Some(r) = self.improbe(ctx, src, tag)? {
                return Ok(r);
            }
            self.idle();
        }
    }

    /// `MPI_Imrecv`.
    ///
    /// # Safety
    /// As [`Pml::irecv`].
    pub unsafe fn imrecv(&self, msg: MessageId, buf: RawBufMut) -> Result<ReqId, PmlError> {
        let mut g = self.lock();
        let env = g
            .mprobed
            .remove(&msg.0)
            .ok_or_else(|| PmlError::Arg("unknown or already received message".into()))?;
        let Inner {
            core, net, limits, ..
        } = &mut *g;
        let mut w = NetWire {
            net: &mut **net,
            limits,
        };
        // SAFETY: forwarded contract.
        let id = unsafe { core.imrecv(&mut w, msg.0, env, buf) }?;
        g.flush();
        Ok(id)
    }

    /// `MPI_Buffer_attach` of a buffer of `bytes` bytes.
    pub fn buffer_attach(&self, bytes: usize) -> Result<(), PmlError> {
        self.lock().core.buffer_attach(bytes)
    }

    /// `MPI_Buffer_detach`: waits until every buffered send completed, then
    /// detaches and returns the size.
    pub fn buffer_detach(&self) -> Result<usize, PmlError> {
        loop {
            {
                let mut g = self.lock();
                match g.core.buffer_in_use() {
                    None => return Err(PmlError::Buffer("no buffer attached".into())),
                    Some(0) => return g.core.buffer_detach(),
                    Some(_) => {
                        g.progress();
                    }
                }
            }
            self.idle();
        }
    }

    /// Protocol counters.
    pub fn stats(&self) -> Stats {
        self.lock().core.stats()
    }

    /// The matcher's counters (the fields of the `pml_stats` line).
    pub fn match_counters(&self) -> tmpi_tm_engine::split::SplitStats {
        self.lock().core.match_counters()
    }

    /// The matcher's queue depths and their high-water marks.
    pub fn queue_stats(&self) -> tmpi_tm_engine::Stats {
        self.lock().core.queue_stats()
    }

    /// Whether world rank `w` called `MPI_Finalize` (its BYE arrived and
    /// was applied; docs/pml.md, finalize).
    pub fn peer_gone(&self, w: u32) -> bool {
        self.lock().core.peer_gone(w)
    }

    /// Requests not yet released (for leak checks in tests).
    pub fn live_requests(&self) -> usize {
        self.lock().core.live_requests()
    }

    /// Finalize: completes outstanding traffic, fences with every peer so
    /// that nobody still needs this process, and shuts down the BTLs and
    /// PMI. Called by drop if not called explicitly.
    pub fn finalize(&self) -> Result<(), PmlError> {
        let rt = lock_plain(&self.rt).take();
        // Drain actions we still owe (FINs, ACKs, queued eager data), then
        // the BYEs that tell peers nothing more comes from us (once: a
        // second finalize, from drop, has no runtime left).
        let mut bye = rt.is_some();
        loop {
            let mut g = self.lock();
            g.progress();
            if g.pending.is_empty() && !g.core.has_actions() {
                if !bye {
                    break;
                }
                bye = false;
                g.say_bye();
                g.flush();
                continue;
            }
            drop(g);
            self.idle();
        }
        // Printed once: by the first finalize (a second, from drop, has no
        // runtime left).
        if self.stats && rt.is_some() {
            let (s, m) = {
                let g = self.lock();
                (g.core.stats(), g.core.match_counters())
            };
            // One line per rank, exactly this form (docs/pml.md). The
            // three lines go out in one write: stderr is unbuffered and
            // `eprintln!` writes piecewise, so lines of ranks sharing one
            // stream (Hydra forwards them into one) would interleave.
            let text = format!(
                "[rank {me}] pml_ob1 stats: {s}\npml_stats rank={me} {m}\n{}\n",
                self.peers_line(),
                me = self.me
            );
            use std::io::Write as _;
            let _ = std::io::stderr().lock().write_all(text.as_bytes());
        }
        let Some(rt) = rt else { return Ok(()) };
        crate::init::finish(rt, self)
    }

    /// `pml_peers rank=R self=[..] sm=[..] tcp=[..] openib=[..]`: the BTL
    /// that carried each peer (printed with `pml_stats`, docs/pml.md).
    pub fn peers_line(&self) -> String {
        let g = self.lock();
        let mut by: Vec<(String, Vec<u32>)> = ["self", "sm", "tcp", "openib"]
            .iter()
            .map(|n| (n.to_string(), Vec::new()))
            .collect();
        for p in 0..g.net.size() {
            let name = g.net.peer_btl(p).unwrap_or("none");
            match by.iter_mut().find(|(n, _)| n == name) {
                Some((_, v)) => v.push(p),
                None => by.push((name.to_string(), vec![p])),
            }
        }
        let mut line = format!("pml_peers rank={}", self.me);
        for (n, v) in by {
            let v: Vec<String> = v.iter().map(u32::to_string).collect();
            line.push_str(&format!(" {n}=[{}]", v.join(",")));
        }
        line
    }

    /// Gives up without finalizing (a panic is unwinding): no fence, no
    /// PMI finalize, so the launcher sees a rank exit without finalize and
    /// ends the job instead of everyone hanging in the finalize fence.
    pub fn abandon(&self) {
        let rt = lock_plain(&self.rt).take();
        if rt.is_some() {
            tracing::error!(target: "pml_ob1", rank = self.me, "abandoning MPI without finalize");
        }
        self.lock().net.finalize();
        drop(rt);
    }

    /// Progress while `f` (a fence in another layer) runs elsewhere: used by
    /// finalize so that peers still pulling from us get answers.
    pub(crate) fn progress_until(&self, done: &std::sync::atomic::AtomicBool) {
        while !done.load(std::sync::atomic::Ordering::Acquire) {
            self.progress();
            std::thread::yield_now();
        }
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
