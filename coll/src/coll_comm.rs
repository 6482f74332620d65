//! The collective side of a communicator ([`CollComm`], Open MPI's
//! `c_coll`): what coll's components run on (the transport endpoint, this
//! rank and the size, the function table selected for it, the tag space
//! and sequence numbers, `sm`'s segment) and the collective calls,
//! blocking and non-blocking; the per-process state they share
//! ([`CollContext`]: transport, framework, outstanding non-blocking
//! collectives).
//!
//! Communicators themselves (groups, context ids and their agreement,
//! names, attributes, the constructors) are the `tmpi-comm` crate's: a
//! communicator there holds one [`CollComm`] and reaches the collectives
//! through it.
//!
//! Buffers are bytes in native layout. Counts and displacements of the
//! v-variants are in bytes (the caller packs derived datatypes), except
//! reduce_scatter's counts which are elements of its datatype, as in MPI.

use std::any::Any;
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use tmpi_base::mca::Registry;

use crate::algo::{Call, CollKind, Pos};
use crate::component::sm::{Node, NodeColl};
use crate::datatype::Datatype;
use crate::direct::{self, Direct, Scratch};
use crate::framework::{CollFramework, CommShape, FnTable};
use crate::op::Op;
use crate::p2p::{Endpoint, P2p};
use crate::schedule::{Exec, ExtRef, Schedule, Slice};
use crate::tags::TagSpace;
use crate::{CollError, Result};

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Per-process state of the collective layer: transport, framework and
/// the outstanding non-blocking collectives.
pub struct CollContext {
    p2p: Arc<dyn P2p>,
    framework: CollFramework,
    active: Mutex<Vec<Weak<ReqInner>>>,
    /// `active.len()` as of its last change (stored under its lock): the
    /// blocking direct path asks "anything outstanding?" without taking the
    /// lock (a lock and an unlock per small blocking collective otherwise).
    /// Shared with the transport's progress hook (`CollContext::init`).
    active_n: Arc<AtomicUsize>,
}

impl fmt::Debug for CollContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CollContext")
            .field("world_rank", &self.p2p.world_rank())
            .field("framework", &self.framework)
            .finish()
    }
}

impl CollContext {
    /// Opens the coll framework with the parameters of `reg` over `p2p`.
    pub fn init(p2p: Arc<dyn P2p>, reg: &Registry) -> Result<Arc<CollContext>> {
        let framework = CollFramework::open(reg)?;
        let ctx = Arc::new(CollContext {
            p2p,
            framework,
            active: Mutex::new(Vec::new()),
            active_n: Arc::new(AtomicUsize::new(0)),
        });
        // A rank blocked in a point-to-point call keeps its non-blocking
        // collectives moving (the transport's waiting rounds run this while
        // any is outstanding). Weak: the transport outlives no context.
        let weak = Arc::downgrade(&ctx);
        let hooked = ctx.p2p.set_progress_hook(
            Arc::clone(&ctx.active_n),
            Box::new(move || {
                if let Some(c) = weak.upgrade() {
                    c.progress();
                }
            }),
        );
        if !hooked {
            tracing::debug!(target: "coll", "transport runs no progress hook for this context");
        }
        Ok(ctx)
    }

    /// The transport.
    pub fn p2p(&self) -> &Arc<dyn P2p> {
        &self.p2p
    }

    /// Advances every outstanding non-blocking collective of the process;
    /// `true` if any made progress. The transport's waiting rounds call it
    /// too ([`P2p::set_progress_hook`], registered by `init`), so that a
    /// rank waiting on point-to-point traffic still forwards its
    /// collectives.
    pub fn progress(&self) -> bool {
        let reqs: Vec<Arc<ReqInner>> = {
            let mut a = lock(&self.active);
            a.retain(|w| w.upgrade().is_some_and(|r| !r.done.load(Ordering::Acquire)));
            self.active_n.store(a.len(), Ordering::Release);
            a.iter().filter_map(Weak::upgrade).collect()
        };
        let mut any = false;
        for r in reqs {
            if let Ok(mut e) = r.exec.try_lock() {
                let before = e.is_done();
                let _ = e.poll(self.p2p.as_ref(), &r.comm.ep);
                if e.is_done() && !before {
                    r.done.store(true, Ordering::Release);
                    any = true;
                }
            }
        }
        any
    }

    /// One round of progress for a waiting collective: the transport and,
    /// when there are any, the outstanding non-blocking collectives; `true`
    /// if either did something.
    pub(crate) fn progress_all(&self) -> bool {
        let moved = self.p2p.progress();
        (self.may_have_outstanding() && self.progress()) || moved
    }

    /// Whether any non-blocking collective may still be outstanding (a
    /// cheap check before [`CollContext::progress`]).
    fn may_have_outstanding(&self) -> bool {
        self.active_n.load(Ordering::Acquire) != 0
    }

    /// Whether a non-blocking collective is still running: like
    /// [`CollContext::may_have_outstanding`] (one lock when there is none),
    /// but drops the entries of completed or released requests first.
    fn has_running(&self) -> bool {
        if !self.may_have_outstanding() {
            return false;
        }
        let mut a = lock(&self.active);
        a.retain(|w| w.upgrade().is_some_and(|r| !r.done.load(Ordering::Acquire)));
        self.active_n.store(a.len(), Ordering::Release);
        !a.is_empty()
    }

    /// Enters a started non-blocking collective into the active list.
    fn add_active(&self, r: Weak<ReqInner>) {
        let mut a = lock(&self.active);
        a.push(r);
        self.active_n.store(a.len(), Ordering::Release);
    }

    /// Number of outstanding non-blocking collectives (for tests).
    pub fn outstanding(&self) -> usize {
        lock(&self.active)
            .iter()
            .filter(|w| w.upgrade().is_some_and(|r| !r.done.load(Ordering::Acquire)))
            .count()
    }
}

/// An input buffer of a collective: data, or `MPI_IN_PLACE`.
#[derive(Debug, Clone, Copy)]
pub enum Input<'a> {
    /// The data.
    Buf(&'a [u8]),
    /// `MPI_IN_PLACE`: the input is in the receive buffer.
    InPlace,
}

impl<'a> Input<'a> {
    /// The data, `None` for `MPI_IN_PLACE`.
    pub fn data(self) -> Option<&'a [u8]> {
        match self {
            Input::Buf(s) => Some(s),
            Input::InPlace => None,
        }
    }

    /// The data when its length is not `len` (a rank whose own arguments
    /// disagree: [`fit`]).
    fn other_len(self, len: usize) -> Option<&'a [u8]> {
        self.data().filter(|s| s.len() != len)
    }
}

pub(crate) struct CollInner {
    /// What the communicator that owns this state keeps alive while any
    /// handle or request uses it (its context id and attributes: the
    /// `tmpi-comm` crate's); dropped after the transport forgot the
    /// context (`Drop`).
    owner: Option<Box<dyn Any + Send + Sync>>,
    ctx: Arc<CollContext>,
    ep: Endpoint,
    /// This process's rank and the number of ranks.
    rank: u32,
    size: u32,
    /// The members' world ranks, in rank order.
    world: Arc<[u32]>,
    table: FnTable,
    space: TagSpace,
    /// Group rank -> endpoint rank, for views on a parent's context.
    peer_map: Option<Arc<[u32]>>,
    /// Registered with the transport ([`P2p::comm_added`]) by
    /// [`CollComm::new`]: removed again when dropped.
    registered: bool,
    seq: AtomicU32,
    /// Cap on the direct path's size (`CollComm::set_direct_max`).
    direct_cap: AtomicUsize,
    /// Per collective kind, the largest call the selected module runs on
    /// the direct path, 0 when the transport has no blocking small
    /// receive: resolved once (the table and the transport do not change),
    /// not through the module chain on every call.
    direct_max: [usize; CollKind::ALL.len()],
    /// Blocking collectives run on the direct path (`CollComm::direct_calls`).
    direct_calls: AtomicU64,
    /// The `sm` component's state when it won some collectives.
    node: Option<Arc<NodeColl>>,
    /// Per collective kind, the largest blocking call `sm` runs through
    /// the segment (`None`: not sm's).
    node_max: [Option<usize>; CollKind::ALL.len()],
}

impl Drop for CollInner {
    fn drop(&mut self) {
        if self.registered {
            self.ctx.p2p.comm_removed(self.ep.context_id);
        }
        // The owner (the context id's claim) goes after the transport
        // forgot the context.
        drop(self.owner.take());
    }
}

thread_local! {
    /// A sequence number a persistent collective reserved, for the
    /// collective this thread starts now on the communicator whose inner
    /// state is at the address given ([`CollComm::with_reserved_seq`]).
    static RESERVED_SEQ: std::cell::Cell<Option<(usize, u32)>> = const { std::cell::Cell::new(None) };
}

/// The collective state of one communicator (or of a temporary view of
/// one): a cheap handle, clones share it. The communicator (`tmpi-comm`)
/// holds one; requests keep it alive until they are gone.
#[derive(Clone)]
pub struct CollComm {
    inner: Arc<CollInner>,
}

impl fmt::Debug for CollComm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CollComm")
            .field("context_id", &self.inner.ep.context_id)
            .field("rank", &self.rank())
            .field("size", &self.size())
            .field("space", &self.inner.space)
            .finish()
    }
}
/// A non-blocking collective in progress.
#[derive(Clone)]
pub struct CollRequest {
    inner: Arc<ReqInner>,
}

pub(crate) struct ReqInner {
    comm: Arc<CollInner>,
    exec: Mutex<Exec>,
    done: AtomicBool,
}

impl fmt::Debug for CollRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CollRequest")
            .field("context_id", &self.inner.comm.ep.context_id)
            .field("done", &self.inner.done.load(Ordering::Relaxed))
            .finish()
    }
}
impl CollRequest {
    /// Advances the collective; `Ok(true)` once it completed (`MPI_Test`).
    pub fn test(&self) -> Result<bool> {
        let p2p = self.inner.comm.ctx.p2p.as_ref();
        p2p.progress();
        let mut e = lock(&self.inner.exec);
        let done = e.poll(p2p, &self.inner.comm.ep)?;
        if done {
            self.inner.done.store(true, Ordering::Release);
        }
        Ok(done)
    }

    /// Waits for completion and returns the result buffer (empty for ranks
    /// without a result). Progresses the process's other collectives while
    /// waiting and yields the processor when nothing happens.
    pub fn wait(self) -> Result<Vec<u8>> {
        let ctx = Arc::clone(&self.inner.comm.ctx);
        let p2p = ctx.p2p.as_ref();
        let tests_progress = p2p.test_progresses();
        loop {
            {
                let mut e = lock(&self.inner.exec);
                if e.poll(p2p, &self.inner.comm.ep)? {
                    self.inner.done.store(true, Ordering::Release);
                    return Ok(e.take_result());
                }
            }
            // One transport progress per round: the tests of `poll` already
            // progressed when the transport's tests do.
            let mut any = ctx.progress();
            if !tests_progress {
                any |= p2p.progress();
            }
            if !any {
                p2p.idle();
            }
        }
    }
}

/// A result buffer given back to [`crate::pool`] when dropped.
struct Pooled(Vec<u8>);

impl std::ops::Deref for Pooled {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.0
    }
}

impl Drop for Pooled {
    fn drop(&mut self) {
        crate::pool::give(std::mem::take(&mut self.0));
    }
}

fn root_ok(root: u32, size: u32) -> Result<()> {
    if root >= size {
        return Err(CollError::Root {
            root: i64::from(root),
            size,
        });
    }
    Ok(())
}

fn check_v(what: &str, counts: &[usize], displs: &[usize], size: u32, len: usize) -> Result<()> {
    if counts.len() != size as usize || displs.len() != size as usize {
        return Err(CollError::Count(format!(
            "{what}: {} counts and {} displacements for {size} ranks",
            counts.len(),
            displs.len()
        )));
    }
    for (i, (&c, &d)) in counts.iter().zip(displs).enumerate() {
        let outside = match d.checked_add(c) {
            None => true,
            Some(end) => end > len,
        };
        if outside {
            return Err(CollError::Buffer(format!(
                "{what}: block {i} ({c} bytes at {d}) lies outside the {len}-byte buffer"
            )));
        }
    }
    Ok(())
}

fn reduction_ok(dtype: Datatype, op: &Op, bytes: usize) -> Result<()> {
    op.check(dtype)?;
    dtype.count_of(bytes)?;
    Ok(())
}

fn same_len(what: &str, a: usize, b: usize) -> Result<()> {
    if a != b {
        return Err(CollError::Count(format!(
            "{what}: send buffer of {a} bytes, receive buffer of {b}"
        )));
    }
    Ok(())
}

/// This rank's own block `s` cut or zero-padded to the `want` bytes its
/// receive side says, and the count error to return: for a rank whose send
/// and receive arguments disagree. It still takes part in the collective
/// with the fitted block (see [`late`]).
fn fit(what: &str, s: &[u8], want: usize) -> (Vec<u8>, CollError) {
    let mut v = vec![0u8; want];
    let n = s.len().min(want);
    v[..n].copy_from_slice(&s[..n]);
    let e = CollError::Count(format!(
        "{what}: send buffer of {} bytes, receive buffer of {want}",
        s.len()
    ));
    (v, e)
}

/// The result of a collective this rank took part in although its own
/// arguments were inconsistent ([`fit`]): the call's own error if it
/// failed, else `e`. Returning at once instead would leave the other ranks
/// waiting for this one's messages and this rank's sequence of calls one
/// behind theirs, so that its next collective would meet their messages
/// of this one.
fn late(r: Result<()>, e: CollError) -> Result<()> {
    r.and(Err(e))
}

fn copy_regions(dst: &mut [u8], src: &[u8], counts: &[usize], displs: &[usize]) {
    for (&c, &d) in counts.iter().zip(displs) {
        dst[d..d + c].copy_from_slice(&src[d..d + c]);
    }
}

impl CollComm {
    /// The collective state of a communicator of the processes `world`
    /// (world ranks in rank order, this process among them) on context id
    /// `cid`, with the components the framework selects for it. With
    /// `register` the context is registered with the transport
    /// ([`P2p::comm_added`]) and removed again when the state is dropped
    /// (`MPI_COMM_WORLD` and `MPI_COMM_SELF` exist in the transport from
    /// its start). `owner` lives as long as the state (the last handle and
    /// the last request) and is dropped after the transport forgot the
    /// context; on an error it is dropped before this returns.
    pub fn new(
        ctx: &Arc<CollContext>,
        world: Arc<[u32]>,
        cid: u32,
        register: bool,
        owner: Option<Box<dyn Any + Send + Sync>>,
    ) -> Result<CollComm> {
        Self::build(ctx, world, cid, TagSpace::Coll, None, register, owner)
    }

    /// A temporary view of this communicator for the members `world` (world
    /// ranks, a subset of this communicator's, in the view's rank order):
    /// on this communicator's context, its collectives numbered in tag
    /// space `space` (a context-id agreement's own, so that they never meet
    /// this communicator's collectives), without a shared-memory segment.
    /// `owner` as in [`CollComm::new`].
    pub fn view(
        &self,
        world: Arc<[u32]>,
        space: TagSpace,
        owner: Option<Box<dyn Any + Send + Sync>>,
    ) -> Result<CollComm> {
        let cid = self.context_id();
        Self::build(&self.inner.ctx, world, cid, space, Some(self), false, owner)
    }

    fn build(
        ctx: &Arc<CollContext>,
        world: Arc<[u32]>,
        cid: u32,
        space: TagSpace,
        view_of: Option<&CollComm>,
        register: bool,
        owner: Option<Box<dyn Any + Send + Sync>>,
    ) -> Result<CollComm> {
        let me = ctx.p2p.world_rank();
        let rank_of = |list: &[u32], w: u32| list.iter().position(|&p| p == w).map(|i| i as u32);
        let rank = rank_of(&world, me).ok_or_else(|| {
            CollError::Intern("building a communicator this process is not in".into())
        })?;
        let size = world.len() as u32;
        let (ep, peer_map) = match view_of {
            None => (
                Endpoint {
                    context_id: cid,
                    rank,
                    world: Arc::clone(&world),
                },
                None,
            ),
            Some(parent) => {
                let map: Vec<u32> = world
                    .iter()
                    .map(|&w| rank_of(&parent.inner.world, w))
                    .collect::<Option<_>>()
                    .ok_or_else(|| {
                        CollError::Group("group is not a subset of the communicator's group".into())
                    })?;
                (parent.inner.ep.clone(), Some(Arc::from(map)))
            }
        };
        let shape = CommShape {
            rank,
            world: Arc::clone(&world),
            nodes: world.iter().map(|&w| ctx.p2p.node_of(w)).collect(),
            shared_memory: ctx.p2p.shares_memory(),
        };
        let table = ctx.framework.select(&shape)?;
        let recv_small = ctx.p2p.has_recv_small();
        let direct_max = CollKind::ALL.map(|k| if recv_small { table.direct_max(k) } else { 0 });
        // A view lives for one agreement: no shared-memory segment for it.
        let node_of =
            CollKind::ALL.map(|k| view_of.is_none().then(|| table.node_coll(k)).flatten());
        let node_max = CollKind::ALL.map(|k| node_of[k.index()].as_ref().and_then(|n| n.limit(k)));
        let node = node_of.into_iter().flatten().next();
        if register {
            ctx.p2p.comm_added(&ep)?;
        }
        tracing::debug!(target: "coll_base", "communicator cid {cid} rank {rank}/{size} barrier by {:?}", table.providers(CollKind::Barrier));
        Ok(CollComm {
            inner: Arc::new(CollInner {
                owner,
                ctx: Arc::clone(ctx),
                ep,
                rank,
                size,
                world,
                table,
                space,
                peer_map,
                registered: register,
                seq: AtomicU32::new(0),
                direct_cap: AtomicUsize::new(usize::MAX),
                direct_max,
                direct_calls: AtomicU64::new(0),
                node,
                node_max,
            }),
        })
    }

    /// This process's rank.
    pub fn rank(&self) -> u32 {
        self.inner.rank
    }

    /// Number of ranks.
    pub fn size(&self) -> u32 {
        self.inner.size
    }

    /// The context id.
    pub fn context_id(&self) -> u32 {
        self.inner.ep.context_id
    }

    /// The tag space its collectives are numbered in (a view's own, or
    /// [`TagSpace::Coll`]).
    pub fn tag_space(&self) -> TagSpace {
        self.inner.space
    }

    /// How the transport addresses this communicator.
    pub fn endpoint(&self) -> &Endpoint {
        &self.inner.ep
    }

    /// The per-process context.
    pub fn context(&self) -> &Arc<CollContext> {
        &self.inner.ctx
    }

    /// The function table chosen for this communicator.
    pub fn table(&self) -> &FnTable {
        &self.inner.table
    }

    /// Whether `self` and `other` are handles of one state.
    pub fn same(&self, other: &CollComm) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    fn pos(&self) -> Pos {
        Pos {
            rank: self.rank(),
            size: self.size(),
        }
    }

    // ---------------------------------------------------------------- neighbourhood

    /// A neighbourhood collective (`MPI_Neighbor_*` and `MPI_Ineighbor_*`,
    /// after the C layer packed the blocks and listed the neighbours): one
    /// round in which this rank sends `send[off..off + len]` to `peer` for
    /// every `(peer, off, len)` of `sends` and receives `len` bytes from
    /// `peer` into bytes `off..off + len` of a result of `recv_len` bytes
    /// for every entry of `recvs` (bytes no block covers stay zero).
    /// Blocks between one pair of ranks match in the order both sides list
    /// them (the transport does not overtake), which is how the caller
    /// pairs repeated neighbours. Every rank of the communicator calls it,
    /// in the same order as its other collectives (it takes the next
    /// collective tag, which user receives cannot match).
    pub fn ineighbor_exchange(
        &self,
        send: Vec<u8>,
        sends: &[(u32, usize, usize)],
        recv_len: usize,
        recvs: &[(u32, usize, usize)],
    ) -> Result<CollRequest> {
        let exec = self.neighbor_exec(send, sends, recv_len, recvs)?;
        let req = CollRequest {
            inner: Arc::new(ReqInner {
                comm: Arc::clone(&self.inner),
                exec: Mutex::new(exec),
                done: AtomicBool::new(false),
            }),
        };
        self.inner.ctx.add_active(Arc::downgrade(&req.inner));
        Ok(req)
    }

    /// [`CollComm::ineighbor_exchange`], blocking: returns the result buffer.
    pub fn neighbor_exchange(
        &self,
        send: Vec<u8>,
        sends: &[(u32, usize, usize)],
        recv_len: usize,
        recvs: &[(u32, usize, usize)],
    ) -> Result<Vec<u8>> {
        let mut exec = self.neighbor_exec(send, sends, recv_len, recvs)?;
        self.drive(&mut exec)?;
        Ok(exec.take_result())
    }

    fn neighbor_exec(
        &self,
        send: Vec<u8>,
        sends: &[(u32, usize, usize)],
        recv_len: usize,
        recvs: &[(u32, usize, usize)],
    ) -> Result<Exec> {
        let p = self.size();
        let peer_ok = |who: &str, peer: u32, off: usize, len: usize, total: usize| {
            if peer >= p {
                return Err(CollError::Arg(format!(
                    "neighbour {peer} {who} is not a rank of a communicator of {p}"
                )));
            }
            if off.checked_add(len).is_none_or(|end| end > total) {
                return Err(CollError::Buffer(format!(
                    "block of {len} bytes at {off} {who} neighbour {peer} outside {total} bytes"
                )));
            }
            Ok(())
        };
        for &(peer, off, len) in sends {
            peer_ok("(to)", peer, off, len, send.len())?;
        }
        for &(peer, off, len) in recvs {
            peer_ok("(from)", peer, off, len, recv_len)?;
        }
        let mut s = Schedule::new();
        let input = s.buf(send);
        let out = s.out_buf(recv_len, recvs.iter().map(|&(_, off, len)| (off, len)));
        // Receives first, in the listed order, then the sends: all in one
        // round, started together.
        for &(peer, off, len) in recvs {
            s.recv(peer, Slice::new(out, off, len));
        }
        for &(peer, off, len) in sends {
            s.send(peer, Slice::new(input, off, len));
        }
        s.result = Some(out);
        s.validate()?;
        let seq = self.next_seq();
        let tag = self.inner.space.tag(seq);
        tracing::trace!(target: "coll_base", "neighbour exchange #{seq} on cid {}: {} sends, {} receives", self.context_id(), sends.len(), recvs.len());
        Exec::new(s, tag, self.inner.peer_map.clone())
    }

    // ---------------------------------------------------------------- persistent collectives

    /// Takes this communicator's next collective sequence number for a
    /// persistent collective initialised now (`MPI_<coll>_init`, called by
    /// every rank in the same order): each start of it runs on that
    /// number's tags ([`CollComm::with_reserved_seq`]), so starts match by the
    /// order of the inits, as MPI-4.0 §6.13 says, whatever order the ranks
    /// start them in. Successive starts of one request reuse the tags:
    /// a rank starts it again only after its previous start completed
    /// there, so between two ranks the messages of one start precede those
    /// of the next (the transport does not overtake).
    pub fn reserve_seq(&self) -> u32 {
        self.inner.seq.fetch_add(1, Ordering::Relaxed)
    }

    /// Runs `f`, whose non-blocking collective on this communicator takes
    /// the reserved `seq` ([`CollComm::reserve_seq`]) instead of the next
    /// number, and is not announced on `sm`'s segment (whose order is the
    /// order of the calls, which persistent starts need not follow).
    pub fn with_reserved_seq<R>(&self, seq: u32, f: impl FnOnce() -> R) -> R {
        let key = Arc::as_ptr(&self.inner) as usize;
        RESERVED_SEQ.with(|r| r.set(Some((key, seq))));
        let out = f();
        RESERVED_SEQ.with(|r| r.set(None));
        out
    }

    /// The sequence number [`CollComm::with_reserved_seq`] reserved for this
    /// communicator's collective starting now on this thread, if any;
    /// `take` uses it up.
    fn reserved_seq(&self, take: bool) -> Option<u32> {
        let key = Arc::as_ptr(&self.inner) as usize;
        RESERVED_SEQ.with(|r| match r.get() {
            Some((k, seq)) if k == key => {
                if take {
                    r.set(None);
                }
                Some(seq)
            }
            _ => None,
        })
    }

    /// The sequence number (tag) of the collective starting now: a
    /// reserved one, else the communicator's next.
    fn next_seq(&self) -> u32 {
        self.reserved_seq(true)
            .unwrap_or_else(|| self.inner.seq.fetch_add(1, Ordering::Relaxed))
    }

    // ---------------------------------------------------------------- engine

    /// Starts `call` as a non-blocking collective. The call must be valid
    /// (the typed methods check their arguments before they get here).
    pub fn start(&self, call: Call) -> Result<CollRequest> {
        self.start_late(call, None)
    }

    /// [`CollComm::start`]; with `late`, for a rank whose own arguments
    /// disagree ([`fit`]): it takes part, and its request fails with `late`
    /// once complete (its result is not delivered).
    fn start_late(&self, call: Call, late: Option<CollError>) -> Result<CollRequest> {
        if self.reserved_seq(false).is_none() {
            self.announce_nonblocking(&call)?;
        }
        let req = self.start_inner(&call, late)?;
        self.inner.ctx.add_active(Arc::downgrade(&req.inner));
        Ok(req)
    }

    /// Caps the size (bytes) up to which this communicator's blocking
    /// barrier, bcast, reduce, allreduce, allgather and alltoall (block
    /// size) run as direct algorithms
    /// (below the module's own limit, `coll_tuned_direct_max`); 0 makes
    /// them build schedules. For tests and measurements: both paths send
    /// the same messages, so ranks may differ in this setting.
    pub fn set_direct_max(&self, bytes: usize) {
        self.inner.direct_cap.store(bytes, Ordering::Relaxed);
    }

    /// Number of blocking collectives of this communicator that ran as
    /// direct algorithms (for tests and diagnostics).
    pub fn direct_calls(&self) -> u64 {
        self.inner.direct_calls.load(Ordering::Relaxed)
    }

    /// The direct path for a blocking `kind` call of `bytes` bytes, if it
    /// applies (`crate::direct`): the winning module offers it for this
    /// size, the transport has request-less small sends and blocking
    /// receives, and no non-blocking collective is outstanding on the
    /// context (a blocking receive would stop progressing it). Takes the
    /// communicator's next sequence number (tag), as [`CollComm::exec_for`]
    /// does, so it must be called after the arguments were checked.
    fn direct(&self, kind: CollKind, bytes: usize) -> Option<Direct<'_>> {
        let inner = &*self.inner;
        let max = inner.direct_max[kind.index()].min(inner.direct_cap.load(Ordering::Relaxed));
        if max == 0 || bytes > max || inner.ctx.has_running() {
            return None;
        }
        let seq = inner.seq.fetch_add(1, Ordering::Relaxed);
        // A diagnostic count: a plain add, not a locked read-modify-write
        // (a lost increment from racing threads, which MPI does not allow
        // on one communicator anyway, only skews the statistic).
        let calls = inner.direct_calls.load(Ordering::Relaxed);
        inner.direct_calls.store(calls + 1, Ordering::Relaxed);
        tracing::trace!(target: "coll_base", "{kind} #{seq} on cid {}: direct, {bytes} bytes", inner.ep.context_id);
        Some(Direct {
            p2p: inner.ctx.p2p.as_ref(),
            ep: &inner.ep,
            map: inner.peer_map.as_deref(),
            pos: self.pos(),
            tag: inner.space.tag(seq),
            mismatch: Default::default(),
            mismatched: Default::default(),
        })
    }

    /// Whether `sm`'s shared-memory segment is in use on this
    /// communicator: `None` when sm did not win any collective or no call
    /// attached it yet, else whether attaching succeeded (on every rank).
    pub fn shared_segment(&self) -> Option<bool> {
        self.inner.node.as_ref()?.attached().map(Option::is_some)
    }

    /// Whether `sm` reads large allgather/alltoall blocks straight from
    /// the other ranks' memory on this communicator: `None` before a call
    /// asked (or without a segment), else the outcome of its probe.
    pub fn single_copy(&self) -> Option<bool> {
        self.attached_node().and_then(Node::single_copy_state)
    }

    /// Whether `sm`'s single copy moves blocks through pipes
    /// (`coll_sm_splice_max_ranks`): `None` before its probe ran, else
    /// whether every rank set them up.
    pub fn single_copy_piped(&self) -> Option<bool> {
        self.attached_node().and_then(Node::single_copy_piped)
    }

    /// Bytes this rank received through `sm`'s single-copy pipes on this
    /// communicator (for tests and diagnostics).
    pub fn piped_bytes(&self) -> u64 {
        self.attached_node().map_or(0, Node::piped_bytes)
    }

    /// Whole huge-page ranges of this process's single-copy sources that
    /// `sm` put onto huge pages (`coll_sm_huge_after`), over every
    /// communicator (for tests and diagnostics).
    pub fn huge_source_ranges(&self) -> u64 {
        self.attached_node().map_or(0, Node::huge_ranges)
    }

    /// Blocking collectives of this communicator that ran through `sm`'s
    /// segment (for tests and diagnostics).
    pub fn shared_calls(&self) -> u64 {
        self.attached_node().map_or(0, Node::calls)
    }

    /// `sm`'s segment on this communicator once attached (without
    /// attaching it).
    fn attached_node(&self) -> Option<&Node> {
        self.inner.node.as_deref()?.attached()?.as_ref()
    }

    /// The shared-memory segment for a blocking `kind` call of `bytes`
    /// bytes (the block for allgather, the whole vector for alltoall) from
    /// `root`, if `sm` won `kind` and the call is within its limit
    /// (`any_size` `Some(e)`: calls above `coll_sm_max` too, which sm
    /// splits into chunks of whole `e`-byte elements, as long as one fits;
    /// `None`: within `coll_sm_max`, for allreduce with an op that does not
    /// commute).
    ///
    /// Attaches the segment on the first call of a kind sm won, whatever its
    /// size: a collective step, as every rank makes the same call (ranks
    /// that disagree about the size still agree on attaching). Once
    /// attached, every such call is announced to the other ranks
    /// ([`Node::announce`]), so that a rank left waiting because another
    /// took another path finds out and fails instead of waiting forever;
    /// fails once some rank found that.
    #[inline(always)]
    fn node(
        &self,
        kind: CollKind,
        bytes: usize,
        root: Option<u32>,
        any_size: Option<usize>,
    ) -> Result<Option<(&Node, &CollContext)>> {
        let inner = &*self.inner;
        let (Some(limit), Some(nc)) = (inner.node_max[kind.index()], inner.node.as_deref()) else {
            return Ok(None);
        };
        let node = match nc.attached() {
            Some(n) => n.as_ref(),
            None => self.attach_node(nc)?,
        };
        let Some(node) = node else {
            return Ok(None);
        };
        let on_segment =
            bytes <= limit && (bytes <= node.max() || any_size.is_some_and(|e| e <= node.max()));
        node.announce(kind, bytes, root, on_segment)?;
        if !on_segment {
            return Ok(None);
        }
        tracing::trace!(target: "coll_sm", "{kind} on cid {}: shared memory, {bytes} bytes", inner.ep.context_id);
        Ok(Some((node, &inner.ctx)))
    }

    /// Announces a non-blocking collective of a kind `sm` won on its
    /// attached segment ([`Node::announce_nonblocking`]): a rank waiting
    /// there in a blocking call that another rank made as a non-blocking
    /// one fails instead of waiting forever. Lengths as [`CollComm::node`]
    /// measures them.
    fn announce_nonblocking(&self, call: &Call) -> Result<()> {
        let inner = &*self.inner;
        if inner.node_max[call.kind.index()].is_none() {
            return Ok(());
        }
        let Some(node) = self.attached_node() else {
            return Ok(());
        };
        let (bytes, root) = match call.kind {
            CollKind::Barrier => (0, None),
            CollKind::Bcast => (call.block, Some(call.root)),
            CollKind::Reduce => (call.send_len(), Some(call.root)),
            CollKind::Allgather => (call.block, None),
            CollKind::Alltoall => (call.block * self.size() as usize, None),
            _ => (call.send_len(), None),
        };
        node.announce_nonblocking(call.kind, bytes, root)
    }

    /// Attaches `sm`'s segment (every rank, in the same collective call):
    /// rank 0 creates it and broadcasts its path, the others open it, all
    /// agree (allreduce of "attached", minimum) before anyone uses it, and
    /// rank 0 unlinks the file. Any failure keeps every rank on the
    /// message path for this communicator; a failed message exchange (a
    /// peer died or finalized) also fails the call: a rank that went on to
    /// the agreement would leave others waiting in the broadcast for its
    /// part.
    #[cold]
    fn attach_node<'a>(&self, nc: &'a NodeColl) -> Result<Option<&'a Node>> {
        let cid = self.context_id();
        let mut msg = [0u8; 128];
        let mut created = None;
        if self.rank() == 0 {
            match nc.create() {
                Ok((node, path)) if path.len() + 2 <= msg.len() => {
                    msg[0] = 1;
                    msg[1] = path.len() as u8;
                    msg[2..2 + path.len()].copy_from_slice(path.as_bytes());
                    created = Some((node, path));
                }
                Ok((_, path)) => {
                    let _ = std::fs::remove_file(&path);
                    tracing::warn!(target: "coll_sm", "cid {cid}: segment path {path} too long");
                }
                Err(e) => {
                    tracing::warn!(target: "coll_sm", "cid {cid}: no shared-memory segment ({e}); collectives stay on messages")
                }
            }
        }
        // Rank 0 unlinks the file whatever happens below.
        let (mut node, path) = match created {
            Some((n, p)) => (Some(n), Some(p)),
            None => (None, None),
        };
        match self.bcast_msgs(&mut msg, 0) {
            Err(e) => {
                if let Some(p) = path {
                    let _ = std::fs::remove_file(p);
                }
                nc.set(None);
                tracing::warn!(target: "coll_sm", "cid {cid}: attaching the segment: {e}");
                return Err(e);
            }
            Ok(()) if path.is_none() && msg[0] == 1 => {
                let len = usize::from(msg[1]).min(msg.len() - 2);
                match std::str::from_utf8(&msg[2..2 + len])
                    .map_err(|e| e.to_string())
                    .and_then(|p| nc.open(p))
                {
                    Ok(n) => node = Some(n),
                    Err(e) => {
                        tracing::warn!(target: "coll_sm", "cid {cid}: cannot attach the segment: {e}")
                    }
                }
            }
            Ok(()) => {}
        }
        let mine = [u8::from(node.is_some())];
        let mut all = [0u8];
        let agreed = self.allreduce_msgs(Input::Buf(&mine), &mut all, Datatype::U8, &Op::Min);
        if let Some(p) = path {
            let _ = std::fs::remove_file(p);
        }
        let use_it = matches!(agreed, Ok(())) && all[0] == 1;
        tracing::debug!(target: "coll_sm", "cid {cid}: shared-memory segment {}", if use_it { "attached" } else { "not used" });
        let n = nc.set(if use_it { node } else { None });
        agreed.map(|()| n)
    }

    /// Builds `call`'s schedule and takes the communicator's next sequence
    /// number (tag) for it.
    fn exec_for(&self, call: &Call) -> Result<Exec> {
        let pos = self.pos();
        let sched = self.inner.table.build(call, pos)?;
        let seq = self.next_seq();
        let tag = self.inner.space.tag(seq);
        tracing::trace!(target: "coll_base", "{} #{seq} on cid {} by {}: {} rounds", call.kind, self.context_id(),
            self.inner.table.algorithm(call, pos), sched.rounds.len());
        Exec::new(sched, tag, self.inner.peer_map.clone())
    }

    fn start_inner(&self, call: &Call, late: Option<CollError>) -> Result<CollRequest> {
        if call.ext_send.is_some() || call.ext_out.is_some() {
            return Err(CollError::Intern(
                "a non-blocking collective cannot borrow caller memory".into(),
            ));
        }
        let mut exec = self.exec_for(call)?;
        if let Some(e) = late {
            exec.fail_at_end(e);
        }
        Ok(CollRequest {
            inner: Arc::new(ReqInner {
                comm: Arc::clone(&self.inner),
                exec: Mutex::new(exec),
                done: AtomicBool::new(false),
            }),
        })
    }

    /// [`CollComm::run`] for the blocking calls, whose result is copied out and
    /// dropped: the buffer goes back to [`crate::pool`] afterwards.
    fn run_pooled(&self, call: Call) -> Result<Pooled> {
        self.run(call).map(Pooled)
    }

    /// Runs `call` to completion and returns its result buffer.
    ///
    /// The blocking path: the schedule runs inline on this thread, without
    /// the request `Arc`/`Mutex` of a non-blocking collective and without
    /// entering the context's active list. It takes its sequence number
    /// (hence its tag) at the same point as [`CollComm::start`], so it stays in
    /// step with non-blocking collectives outstanding on the communicator,
    /// which it keeps progressing while it waits.
    pub fn run(&self, call: Call) -> Result<Vec<u8>> {
        if call.ext_send.is_some() || call.ext_out.is_some() {
            return Err(CollError::Intern(
                "CollComm::run with caller memory: use run_borrowing".into(),
            ));
        }
        let mut exec = self.exec_for(&call)?;
        // The schedule shares the call's input: dropping the call first lets
        // the schedule write into it without a copy.
        drop(call);
        self.drive(&mut exec)?;
        Ok(exec.take_result())
    }

    /// The blocking path over the caller's memory: `call`'s schedule reads
    /// `input` in place (instead of a copy in `call.send`) and may take
    /// `out` as its result buffer (an algorithm that does writes the result
    /// there: receives land in it, reductions combine into it). Returns
    /// `None` when the result is in `out`, else the result buffer for the
    /// caller to copy out. With `out` `None` the caller wants no result (a
    /// bcast root, a reduce's non-root): nothing is copied (a bcast root
    /// would otherwise copy its own input into a buffer it then drops). On error every transport request of the
    /// schedule is drained before returning, so no transfer touches the
    /// borrowed memory afterwards.
    fn run_borrowing(
        &self,
        mut call: Call,
        input: Option<&[u8]>,
        out: Option<&mut [u8]>,
    ) -> Result<Option<Pooled>> {
        let wants_result = out.is_some();
        call.ext_send = input.map(ExtRef::read);
        call.ext_out = out.map(ExtRef::write);
        let mut exec = self.exec_for(&call)?;
        drop(call);
        if let Err(e) = self.drive(&mut exec) {
            exec.drain(self.inner.ctx.p2p.as_ref());
            return Err(e);
        }
        if !wants_result || exec.result_in_place() {
            Ok(None)
        } else {
            Ok(Some(Pooled(exec.take_result())))
        }
    }

    /// Runs `exec` to completion on this thread.
    fn drive(&self, exec: &mut Exec) -> Result<()> {
        let ctx = &self.inner.ctx;
        let p2p = ctx.p2p.as_ref();
        let tests_progress = p2p.test_progresses();
        exec.set_small_blocking(!ctx.may_have_outstanding());
        loop {
            if exec.poll(p2p, &self.inner.ep)? {
                return Ok(());
            }
            let mut any = ctx.may_have_outstanding() && ctx.progress();
            if !tests_progress {
                any |= p2p.progress();
            }
            if !any {
                p2p.idle();
            }
        }
    }

    // ---------------------------------------------------------------- call builders

    fn call_bcast(&self, data: Vec<u8>, len: usize, root: u32) -> Result<Call> {
        root_ok(root, self.size())?;
        let mut c = Call::new(CollKind::Bcast);
        c.root = root;
        c.block = len;
        if self.rank() == root {
            c.send = Arc::new(data);
        }
        Ok(c)
    }

    fn call_reduction(
        &self,
        kind: CollKind,
        send: Vec<u8>,
        dtype: Datatype,
        op: &Op,
        root: u32,
    ) -> Result<Call> {
        reduction_ok(dtype, op, send.len())?;
        let mut c = Call::new(kind);
        c.root = root;
        c.dtype = dtype;
        c.op = Some(op.clone());
        c.send = Arc::new(send);
        Ok(c)
    }

    fn call_block(&self, kind: CollKind, send: Vec<u8>, block: usize, root: u32) -> Call {
        let mut c = Call::new(kind);
        c.root = root;
        c.send = Arc::new(send);
        c.block = block;
        c
    }

    // ---------------------------------------------------------------- blocking collectives

    /// `MPI_Barrier`.
    pub fn barrier(&self) -> Result<()> {
        if let Some((n, ctx)) = self.node(CollKind::Barrier, 0, None, Some(1))? {
            return n.barrier(ctx);
        }
        if let Some(d) = self.direct(CollKind::Barrier, 0) {
            return d.finish(direct::barrier(&d));
        }
        self.run(Call::new(CollKind::Barrier)).map(drop)
    }

    /// `MPI_Bcast` of `buf` from `root`. A length that differs from the
    /// root's is reported as `MPI_ERR_TRUNCATE` where detected.
    pub fn bcast(&self, buf: &mut [u8], root: u32) -> Result<()> {
        root_ok(root, self.size())?;
        if let Some((n, ctx)) = self.node(CollKind::Bcast, buf.len(), Some(root), Some(1))? {
            return n.bcast(ctx, buf, root);
        }
        self.bcast_msgs(buf, root)
    }

    /// Bcast on messages (direct or schedule), not through `sm`'s segment.
    fn bcast_msgs(&self, buf: &mut [u8], root: u32) -> Result<()> {
        if let Some(d) = self.direct(CollKind::Bcast, buf.len()) {
            return d.finish(direct::bcast(&d, buf, root));
        }
        let is_root = self.rank() == root;
        let c = self.call_bcast(Vec::new(), buf.len(), root)?;
        // The root sends from `buf` in place; elsewhere the message lands in
        // `buf` (`run_borrowing`).
        if is_root {
            self.run_borrowing(c, Some(buf), None)?;
        } else if let Some(out) = self.run_borrowing(c, None, Some(&mut *buf))? {
            buf.copy_from_slice(&out);
        }
        Ok(())
    }

    /// `MPI_Reduce`: `recv` is needed at the root only; `Input::InPlace` is
    /// allowed at the root only.
    pub fn reduce(
        &self,
        send: Input<'_>,
        recv: Option<&mut [u8]>,
        dtype: Datatype,
        op: &Op,
        root: u32,
    ) -> Result<()> {
        root_ok(root, self.size())?;
        let is_root = self.rank() == root;
        // The input is read in place (`run_borrowing`) unless it is the
        // receive buffer (`MPI_IN_PLACE`: copied, as the result overwrites it).
        let input: Option<&[u8]> = match (send, &recv) {
            (Input::Buf(s), Some(r)) if is_root => {
                same_len("reduce", s.len(), r.len())?;
                Some(s)
            }
            (Input::Buf(s), _) if !is_root => Some(s),
            (Input::InPlace, Some(_)) if is_root => None,
            (Input::InPlace, _) if !is_root => {
                return Err(CollError::Arg(
                    "MPI_IN_PLACE in reduce is for the root only".into(),
                ))
            }
            _ => {
                return Err(CollError::Buffer(
                    "reduce: the root needs a receive buffer".into(),
                ))
            }
        };
        let n = match (input, &recv) {
            (Some(s), _) => s.len(),
            (None, r) => r.as_ref().map_or(0, |r| r.len()),
        };
        reduction_ok(dtype, op, n)?;
        if let Some((node, ctx)) = self.node(CollKind::Reduce, n, Some(root), Some(1))? {
            return node.reduce(ctx, input, recv, dtype, op, root);
        }
        // Large receives copy with the sender's help or alone, whichever
        // has cost this process less lately (`reduce_copy`).
        let timed = crate::reduce_copy::ReduceCopy::start(n);
        if let Some(d) = self.direct(CollKind::Reduce, n) {
            let mut copy = Scratch::new();
            let mut big = direct::Heap::default();
            let inp: &[u8] = match (input, &recv) {
                (Some(s), _) => s,
                (None, r) => {
                    let own = direct::tmp_bytes(&mut copy, &mut big, n);
                    own.copy_from_slice(r.as_deref().unwrap_or_default());
                    own
                }
            };
            let r = d.finish(direct::reduce(&d, inp, recv, dtype, op, root));
            if let (Some(t), true) = (timed, r.is_ok()) {
                t.done();
            }
            return r;
        }
        let data = match (input, &recv) {
            (None, Some(r)) => crate::pool::copy_of(r),
            _ => Vec::new(),
        };
        let c = self.call_reduction(CollKind::Reduce, data, dtype, op, root)?;
        match (is_root, recv) {
            (true, Some(r)) => {
                if let Some(out) = self.run_borrowing(c, input, Some(&mut *r))? {
                    r.copy_from_slice(&out);
                }
            }
            _ => {
                self.run_borrowing(c, input, None)?;
            }
        }
        if let Some(t) = timed {
            t.done();
        }
        Ok(())
    }

    /// `MPI_Allreduce`.
    pub fn allreduce(
        &self,
        send: Input<'_>,
        recv: &mut [u8],
        dtype: Datatype,
        op: &Op,
    ) -> Result<()> {
        // The input is read in place and the result written straight into
        // `recv` where the algorithm allows (`run_borrowing`); in place, the
        // input is a copy of `recv` (it is overwritten while still sent).
        if let Input::Buf(s) = send {
            same_len("allreduce", s.len(), recv.len())?;
        }
        reduction_ok(dtype, op, recv.len())?;
        // Above sm's `max` the segment splits the vector into chunks of
        // whole elements, each rank folding a share: only for ops that
        // commute, as tuned's segmented algorithms.
        let chunks = op.is_commutative().then_some(dtype.size());
        if let Some((n, ctx)) = self.node(CollKind::Allreduce, recv.len(), None, chunks)? {
            let own = send.data();
            return n.allreduce(ctx, own, recv, dtype, op);
        }
        self.allreduce_msgs(send, recv, dtype, op)
    }

    /// Allreduce on messages (direct or schedule), not through `sm`'s
    /// segment; the arguments were checked.
    fn allreduce_msgs(
        &self,
        send: Input<'_>,
        recv: &mut [u8],
        dtype: Datatype,
        op: &Op,
    ) -> Result<()> {
        if let Some(d) = self.direct(CollKind::Allreduce, recv.len()) {
            let mut copy = Scratch::new();
            let inp: &[u8] = match send {
                Input::Buf(s) => s,
                Input::InPlace => {
                    let own = copy.get(recv.len());
                    own.copy_from_slice(recv);
                    own
                }
            };
            return d.finish(direct::allreduce(&d, inp, recv, dtype, op));
        }
        let (data, input) = match send {
            Input::Buf(s) => (Vec::new(), Some(s)),
            Input::InPlace => (crate::pool::copy_of(recv), None),
        };
        let c = self.call_reduction(CollKind::Allreduce, data, dtype, op, 0)?;
        if let Some(out) = self.run_borrowing(c, input, Some(&mut *recv))? {
            recv.copy_from_slice(&out);
        }
        Ok(())
    }

    /// `MPI_Gather`: `recv` (size × block bytes) at the root only;
    /// `Input::InPlace` at the root takes its block from `recv`.
    pub fn gather(&self, send: Input<'_>, recv: Option<&mut [u8]>, root: u32) -> Result<()> {
        root_ok(root, self.size())?;
        let p = self.size() as usize;
        if self.rank() != root {
            let Input::Buf(s) = send else {
                return Err(CollError::Arg(
                    "MPI_IN_PLACE in gather is for the root only".into(),
                ));
            };
            let c = self.call_block(CollKind::Gather, Vec::new(), s.len(), root);
            return self.run_borrowing(c, Some(s), None).map(drop);
        }
        let r = recv
            .ok_or_else(|| CollError::Buffer("gather: the root needs a receive buffer".into()))?;
        if r.len() % p != 0 {
            return Err(CollError::Count(format!(
                "gather: {} bytes is not {p} equal blocks",
                r.len()
            )));
        }
        let b = r.len() / p;
        let (data, input) = match send {
            Input::Buf(s) if s.len() != b => {
                let (own, e) = fit("gather (per block)", s, b);
                return late(self.gather(Input::Buf(&own), Some(r), root), e);
            }
            Input::Buf(s) => (Vec::new(), Some(s)),
            Input::InPlace => (
                crate::pool::copy_of(&r[root as usize * b..(root as usize + 1) * b]),
                None,
            ),
        };
        let c = self.call_block(CollKind::Gather, data, b, root);
        if let Some(out) = self.run_borrowing(c, input, Some(&mut *r))? {
            r.copy_from_slice(&out);
        }
        Ok(())
    }

    /// `MPI_Gatherv`: at the root, `recv` with per-rank byte counts and
    /// displacements; bytes outside the blocks are left untouched.
    pub fn gatherv(
        &self,
        send: Input<'_>,
        recv: Option<(&mut [u8], &[usize], &[usize])>,
        root: u32,
    ) -> Result<()> {
        root_ok(root, self.size())?;
        if self.rank() != root {
            let Input::Buf(s) = send else {
                return Err(CollError::Arg(
                    "MPI_IN_PLACE in gatherv is for the root only".into(),
                ));
            };
            let c = self.call_block(CollKind::Gatherv, crate::pool::copy_of(s), 0, root);
            return self.run(c).map(drop);
        }
        let (r, counts, displs) = recv
            .ok_or_else(|| CollError::Buffer("gatherv: the root needs a receive buffer".into()))?;
        check_v("gatherv", counts, displs, self.size(), r.len())?;
        let me = root as usize;
        let data = match send {
            Input::Buf(s) => crate::pool::copy_of(s),
            Input::InPlace => r[displs[me]..displs[me] + counts[me]].to_vec(),
        };
        let mut c = self.call_block(CollKind::Gatherv, data, 0, root);
        c.counts = counts.to_vec();
        c.displs = displs.to_vec();
        c.recv_len = r.len();
        let out = self.run_pooled(c)?;
        copy_regions(r, &out, counts, displs);
        Ok(())
    }

    /// `MPI_Scatter`: `send` (size × block bytes) at the root; `recv = None`
    /// at the root is `MPI_IN_PLACE` (the root keeps its block in `send`).
    pub fn scatter(
        &self,
        send: Option<&[u8]>,
        mut recv: Option<&mut [u8]>,
        root: u32,
    ) -> Result<()> {
        root_ok(root, self.size())?;
        let p = self.size() as usize;
        if self.rank() != root {
            let r =
                recv.ok_or_else(|| CollError::Buffer("scatter: receive buffer missing".into()))?;
            let out =
                self.run_pooled(self.call_block(CollKind::Scatter, Vec::new(), r.len(), root))?;
            r.copy_from_slice(&out);
            return Ok(());
        }
        let s =
            send.ok_or_else(|| CollError::Buffer("scatter: the root needs a send buffer".into()))?;
        if s.len() % p != 0 {
            return Err(CollError::Count(format!(
                "scatter: {} bytes is not {p} equal blocks",
                s.len()
            )));
        }
        let b = s.len() / p;
        if let Some(r) = recv.as_deref_mut().filter(|r| r.len() != b) {
            let mut own = vec![0u8; b];
            let res = self.scatter(Some(s), Some(&mut own), root);
            let n = b.min(r.len());
            r[..n].copy_from_slice(&own[..n]);
            let e = CollError::Count(format!(
                "scatter (per block): send blocks of {b} bytes, receive buffer of {}",
                r.len()
            ));
            return late(res, e);
        }
        let out =
            self.run_pooled(self.call_block(CollKind::Scatter, crate::pool::copy_of(s), b, root))?;
        if let Some(r) = recv {
            r.copy_from_slice(&out);
        }
        Ok(())
    }

    /// `MPI_Scatterv`: at the root, `send` with per-rank byte counts and
    /// displacements; `recv = None` at the root is `MPI_IN_PLACE`.
    pub fn scatterv(
        &self,
        send: Option<(&[u8], &[usize], &[usize])>,
        mut recv: Option<&mut [u8]>,
        root: u32,
    ) -> Result<()> {
        root_ok(root, self.size())?;
        if self.rank() != root {
            let r =
                recv.ok_or_else(|| CollError::Buffer("scatterv: receive buffer missing".into()))?;
            let out =
                self.run_pooled(self.call_block(CollKind::Scatterv, Vec::new(), r.len(), root))?;
            r.copy_from_slice(&out);
            return Ok(());
        }
        let (s, counts, displs) =
            send.ok_or_else(|| CollError::Buffer("scatterv: the root needs a send buffer".into()))?;
        check_v("scatterv", counts, displs, self.size(), s.len())?;
        let me = root as usize;
        let mut c = self.call_block(
            CollKind::Scatterv,
            crate::pool::copy_of(s),
            counts[me],
            root,
        );
        if let Some(r) = recv.as_deref_mut().filter(|r| r.len() != counts[me]) {
            let mut own = vec![0u8; counts[me]];
            let res = self.scatterv(Some((s, counts, displs)), Some(&mut own), root);
            let n = own.len().min(r.len());
            r[..n].copy_from_slice(&own[..n]);
            let e = CollError::Count(format!(
                "scatterv (root's block): {} bytes to send, receive buffer of {}",
                counts[me],
                r.len()
            ));
            return late(res, e);
        }
        c.scounts = counts.to_vec();
        c.sdispls = displs.to_vec();
        let out = self.run_pooled(c)?;
        if let Some(r) = recv {
            r.copy_from_slice(&out);
        }
        Ok(())
    }

    /// `MPI_Allgather`: `recv` holds size × block bytes; `Input::InPlace`
    /// takes this rank's block from `recv`.
    pub fn allgather(&self, send: Input<'_>, recv: &mut [u8]) -> Result<()> {
        let p = self.size() as usize;
        if !recv.len().is_multiple_of(p) {
            return Err(CollError::Count(format!(
                "allgather: {} bytes is not {p} equal blocks",
                recv.len()
            )));
        }
        let b = recv.len() / p;
        let me = self.rank() as usize;
        if let Some(s) = send.other_len(b) {
            let (own, e) = fit("allgather (per block)", s, b);
            return late(self.allgather(Input::Buf(&own), recv), e);
        }
        if let Some((n, ctx)) = self.node(CollKind::Allgather, b, None, Some(1))? {
            let own = send.data();
            if b <= n.max() {
                return n.allgather(ctx, own, recv);
            }
            if let Some(pids) = n.single_copy(ctx)? {
                return n.allgather_cma(ctx, pids, own, recv);
            }
        }
        // Limit on the block; Bruck (p not a power of two, up to tuned's
        // ring threshold) also needs the whole result in its stack buffer.
        // Ring works in `recv` alone; the others copy an in-place block to
        // the stack.
        let ring = recv.len() > crate::component::tuned::ALLGATHER_RING_ABOVE;
        let fits = ring
            || ((p.is_power_of_two() || recv.len() <= direct::DIRECT_CAP)
                && (matches!(send, Input::Buf(_)) || b <= direct::DIRECT_CAP));
        if let Some(d) = fits.then(|| self.direct(CollKind::Allgather, b)).flatten() {
            if ring {
                let own = send.data();
                return d.finish(direct::allgather_ring(&d, own, recv));
            }
            let mut copy = Scratch::new();
            let own: &[u8] = match send {
                Input::Buf(s) => s,
                Input::InPlace => {
                    let own = copy.get(b);
                    own.copy_from_slice(&recv[me * b..(me + 1) * b]);
                    own
                }
            };
            return d.finish(direct::allgather(&d, own, recv));
        }
        let (data, input) = match send {
            Input::Buf(s) => (Vec::new(), Some(s)),
            Input::InPlace => (crate::pool::copy_of(&recv[me * b..(me + 1) * b]), None),
        };
        let c = self.call_block(CollKind::Allgather, data, b, 0);
        if let Some(out) = self.run_borrowing(c, input, Some(&mut *recv))? {
            recv.copy_from_slice(&out);
        }
        Ok(())
    }

    /// `MPI_Allgatherv` with per-rank byte counts and displacements.
    pub fn allgatherv(
        &self,
        send: Input<'_>,
        recv: &mut [u8],
        counts: &[usize],
        displs: &[usize],
    ) -> Result<()> {
        check_v("allgatherv", counts, displs, self.size(), recv.len())?;
        let me = self.rank() as usize;
        let data = match send {
            Input::Buf(s) if s.len() != counts[me] => {
                let (own, e) = fit("allgatherv (own block)", s, counts[me]);
                return late(self.allgatherv(Input::Buf(&own), recv, counts, displs), e);
            }
            Input::Buf(s) => crate::pool::copy_of(s),
            Input::InPlace => recv[displs[me]..displs[me] + counts[me]].to_vec(),
        };
        let mut c = self.call_block(CollKind::Allgatherv, data, 0, 0);
        c.counts = counts.to_vec();
        c.displs = displs.to_vec();
        c.recv_len = recv.len();
        let out = self.run_pooled(c)?;
        copy_regions(recv, &out, counts, displs);
        Ok(())
    }

    /// `MPI_Alltoall`: both buffers hold size × block bytes.
    pub fn alltoall(&self, send: Input<'_>, recv: &mut [u8]) -> Result<()> {
        let p = self.size() as usize;
        if !recv.len().is_multiple_of(p) {
            return Err(CollError::Count(format!(
                "alltoall: {} bytes is not {p} equal blocks",
                recv.len()
            )));
        }
        if let Some(s) = send.other_len(recv.len()) {
            let (own, e) = fit("alltoall", s, recv.len());
            return late(self.alltoall(Input::Buf(&own), recv), e);
        }
        if let Some((n, ctx)) = self.node(CollKind::Alltoall, recv.len(), None, Some(1))? {
            let own = send.data();
            if recv.len() <= n.max() {
                return n.alltoall(ctx, own, recv);
            }
            if let Some(pids) = n.single_copy(ctx)? {
                return n.alltoall_cma(ctx, pids, own, recv);
            }
        }
        // The limit is on the block; above 256 B the direct path holds one
        // send request per peer on the stack, and in place it copies the
        // whole buffer to its stack.
        let b = recv.len() / p;
        let fits = (b <= crate::p2p::SMALL_SEND || p - 1 <= direct::ALLTOALL_MAX_PENDING)
            && (matches!(send, Input::Buf(_)) || recv.len() <= direct::DIRECT_CAP);
        if fits {
            if let Some(d) = self.direct(CollKind::Alltoall, b) {
                let mut copy = Scratch::new();
                let data: &[u8] = match send {
                    Input::Buf(s) => s,
                    Input::InPlace => {
                        let data = copy.get(recv.len());
                        data.copy_from_slice(recv);
                        data
                    }
                };
                return d.finish(direct::alltoall(&d, data, recv));
            }
        }
        let (data, input) = match send {
            Input::Buf(s) => (Vec::new(), Some(s)),
            // In place: the data to send are a copy (receives overwrite `recv`).
            Input::InPlace => (crate::pool::copy_of(recv), None),
        };
        let c = self.call_block(CollKind::Alltoall, data, recv.len() / p, 0);
        if let Some(out) = self.run_borrowing(c, input, Some(&mut *recv))? {
            recv.copy_from_slice(&out);
        }
        Ok(())
    }

    /// `MPI_Alltoallv` with byte counts and displacements on both sides;
    /// `Input::InPlace` sends from `recv` with the receive layout.
    pub fn alltoallv(
        &self,
        send: Input<'_>,
        scounts: &[usize],
        sdispls: &[usize],
        recv: &mut [u8],
        rcounts: &[usize],
        rdispls: &[usize],
    ) -> Result<()> {
        self.alltoall_vw(
            CollKind::Alltoallv,
            send,
            scounts,
            sdispls,
            recv,
            rcounts,
            rdispls,
        )
    }

    /// `MPI_Alltoallw` after packing: per-peer byte counts and byte
    /// displacements (the caller packs each peer's datatype).
    pub fn alltoallw(
        &self,
        send: Input<'_>,
        scounts: &[usize],
        sdispls: &[usize],
        recv: &mut [u8],
        rcounts: &[usize],
        rdispls: &[usize],
    ) -> Result<()> {
        self.alltoall_vw(
            CollKind::Alltoallw,
            send,
            scounts,
            sdispls,
            recv,
            rcounts,
            rdispls,
        )
    }

    #[allow(clippy::too_many_arguments)]
    fn alltoall_vw(
        &self,
        kind: CollKind,
        send: Input<'_>,
        scounts: &[usize],
        sdispls: &[usize],
        recv: &mut [u8],
        rcounts: &[usize],
        rdispls: &[usize],
    ) -> Result<()> {
        check_v(kind.name(), rcounts, rdispls, self.size(), recv.len())?;
        let (data, sc, sd) = match send {
            Input::Buf(s) => {
                check_v(kind.name(), scounts, sdispls, self.size(), s.len())?;
                (crate::pool::copy_of(s), scounts.to_vec(), sdispls.to_vec())
            }
            Input::InPlace => (
                crate::pool::copy_of(recv),
                rcounts.to_vec(),
                rdispls.to_vec(),
            ),
        };
        let mut c = self.call_block(kind, data, 0, 0);
        c.scounts = sc;
        c.sdispls = sd;
        c.counts = rcounts.to_vec();
        c.displs = rdispls.to_vec();
        c.recv_len = recv.len();
        let out = self.run_pooled(c)?;
        copy_regions(recv, &out, rcounts, rdispls);
        Ok(())
    }

    /// `MPI_Reduce_scatter`: `counts` are elements of `dtype` per rank;
    /// `recv` gets this rank's block. With `Input::InPlace`, `recv` holds
    /// the whole input vector and the block is written at its start.
    pub fn reduce_scatter(
        &self,
        send: Input<'_>,
        recv: &mut [u8],
        counts: &[usize],
        dtype: Datatype,
        op: &Op,
    ) -> Result<()> {
        if counts.len() != self.size() as usize {
            return Err(CollError::Count(format!(
                "reduce_scatter: {} counts for {} ranks",
                counts.len(),
                self.size()
            )));
        }
        let e = dtype.size();
        let bytes: Vec<usize> = counts.iter().map(|c| c * e).collect();
        let total: usize = bytes.iter().sum();
        let mine = bytes[self.rank() as usize];
        let data = match send {
            Input::Buf(s) => {
                same_len("reduce_scatter (whole vector)", s.len(), total)?;
                if recv.len() < mine {
                    return Err(CollError::Buffer(format!(
                        "reduce_scatter: {} bytes for a {mine}-byte block",
                        recv.len()
                    )));
                }
                crate::pool::copy_of(s)
            }
            Input::InPlace => {
                if recv.len() < total {
                    return Err(CollError::Buffer(format!(
                        "reduce_scatter in place: {} bytes for a {total}-byte vector",
                        recv.len()
                    )));
                }
                crate::pool::copy_of(&recv[..total])
            }
        };
        let mut c = self.call_reduction(CollKind::ReduceScatter, data, dtype, op, 0)?;
        c.counts = bytes;
        let out = self.run_pooled(c)?;
        recv[..mine].copy_from_slice(&out);
        Ok(())
    }

    /// `MPI_Reduce_scatter_block`: every rank gets `recv.len()` bytes
    /// (in place: `recv` holds size × block bytes, block at its start).
    pub fn reduce_scatter_block(
        &self,
        send: Input<'_>,
        recv: &mut [u8],
        dtype: Datatype,
        op: &Op,
    ) -> Result<()> {
        let p = self.size() as usize;
        let (data, b) = match send {
            Input::Buf(s) => {
                same_len(
                    "reduce_scatter_block (whole vector)",
                    s.len(),
                    recv.len() * p,
                )?;
                (crate::pool::copy_of(s), recv.len())
            }
            Input::InPlace => {
                if !recv.len().is_multiple_of(p) {
                    return Err(CollError::Count(format!(
                        "reduce_scatter_block: {} bytes is not {p} blocks",
                        recv.len()
                    )));
                }
                (crate::pool::copy_of(recv), recv.len() / p)
            }
        };
        let mut c = self.call_reduction(CollKind::ReduceScatterBlock, data, dtype, op, 0)?;
        dtype.count_of(b)?;
        c.counts = vec![b; p];
        let out = self.run_pooled(c)?;
        recv[..b].copy_from_slice(&out);
        Ok(())
    }

    /// `MPI_Scan` (inclusive prefix reduction in rank order).
    pub fn scan(&self, send: Input<'_>, recv: &mut [u8], dtype: Datatype, op: &Op) -> Result<()> {
        self.scan_kind(CollKind::Scan, send, recv, dtype, op)
    }

    /// `MPI_Exscan`: rank 0's `recv` is left unchanged (undefined in MPI).
    pub fn exscan(&self, send: Input<'_>, recv: &mut [u8], dtype: Datatype, op: &Op) -> Result<()> {
        self.scan_kind(CollKind::Exscan, send, recv, dtype, op)
    }

    fn scan_kind(
        &self,
        kind: CollKind,
        send: Input<'_>,
        recv: &mut [u8],
        dtype: Datatype,
        op: &Op,
    ) -> Result<()> {
        let data = match send {
            Input::Buf(s) => {
                same_len(kind.name(), s.len(), recv.len())?;
                crate::pool::copy_of(s)
            }
            Input::InPlace => crate::pool::copy_of(recv),
        };
        let c = self.call_reduction(kind, data, dtype, op, 0)?;
        let out = self.run_pooled(c)?;
        if !(kind == CollKind::Exscan && self.rank() == 0) {
            recv.copy_from_slice(&out);
        }
        Ok(())
    }

    // ---------------------------------------------------------------- non-blocking

    /// `MPI_Ibarrier`.
    pub fn ibarrier(&self) -> Result<CollRequest> {
        self.start(Call::new(CollKind::Barrier))
    }

    /// `MPI_Ibcast`: the request's result is the broadcast buffer.
    pub fn ibcast(&self, buf: Vec<u8>, root: u32) -> Result<CollRequest> {
        let n = buf.len();
        self.start(self.call_bcast(buf, n, root)?)
    }

    /// `MPI_Ireduce`: the result is the reduction at the root, empty elsewhere.
    pub fn ireduce(
        &self,
        send: Vec<u8>,
        dtype: Datatype,
        op: &Op,
        root: u32,
    ) -> Result<CollRequest> {
        root_ok(root, self.size())?;
        self.start(self.call_reduction(CollKind::Reduce, send, dtype, op, root)?)
    }

    /// `MPI_Iallreduce`.
    pub fn iallreduce(&self, send: Vec<u8>, dtype: Datatype, op: &Op) -> Result<CollRequest> {
        self.start(self.call_reduction(CollKind::Allreduce, send, dtype, op, 0)?)
    }

    /// `MPI_Igather`: every rank sends `send`; the root's result holds size blocks.
    pub fn igather(&self, send: Vec<u8>, root: u32) -> Result<CollRequest> {
        root_ok(root, self.size())?;
        let n = send.len();
        self.start(self.call_block(CollKind::Gather, send, n, root))
    }

    /// `MPI_Iscatter`: the root passes size × `block` bytes (others an empty vector).
    pub fn iscatter(&self, send: Vec<u8>, block: usize, root: u32) -> Result<CollRequest> {
        root_ok(root, self.size())?;
        if self.rank() == root && send.len() != block * self.size() as usize {
            return Err(CollError::Count(format!(
                "iscatter: {} bytes at the root for {} blocks of {block}",
                send.len(),
                self.size()
            )));
        }
        self.start(self.call_block(CollKind::Scatter, send, block, root))
    }

    /// `MPI_Iallgather`.
    pub fn iallgather(&self, send: Vec<u8>) -> Result<CollRequest> {
        let n = send.len();
        self.start(self.call_block(CollKind::Allgather, send, n, 0))
    }

    /// `MPI_Ialltoall`: `send` holds size blocks.
    pub fn ialltoall(&self, send: Vec<u8>) -> Result<CollRequest> {
        let p = self.size() as usize;
        if !send.len().is_multiple_of(p) {
            return Err(CollError::Count(format!(
                "ialltoall: {} bytes is not {p} equal blocks",
                send.len()
            )));
        }
        let b = send.len() / p;
        self.start(self.call_block(CollKind::Alltoall, send, b, 0))
    }

    /// `MPI_Ireduce_scatter_block`: `send` holds size blocks.
    pub fn ireduce_scatter_block(
        &self,
        send: Vec<u8>,
        dtype: Datatype,
        op: &Op,
    ) -> Result<CollRequest> {
        let p = self.size() as usize;
        if !send.len().is_multiple_of(p) {
            return Err(CollError::Count(format!(
                "ireduce_scatter_block: {} bytes is not {p} blocks",
                send.len()
            )));
        }
        let b = send.len() / p;
        dtype.count_of(b)?;
        let mut c = self.call_reduction(CollKind::ReduceScatterBlock, send, dtype, op, 0)?;
        c.counts = vec![b; p];
        self.start(c)
    }

    /// `MPI_Igatherv`: every rank sends `send`; the root passes its
    /// receive layout `(recv_len, counts, displs)` in bytes (`None`
    /// elsewhere). For `MPI_IN_PLACE` the root passes its own block as
    /// `send`. The root's result is `recv_len` bytes with block `i` at
    /// `displs[i]` (bytes outside the blocks are zero: copy back only the
    /// blocks); empty elsewhere.
    pub fn igatherv(
        &self,
        send: Vec<u8>,
        recv: Option<(usize, &[usize], &[usize])>,
        root: u32,
    ) -> Result<CollRequest> {
        root_ok(root, self.size())?;
        if self.rank() != root {
            return self.start(self.call_block(CollKind::Gatherv, send, 0, root));
        }
        let (len, counts, displs) = recv
            .ok_or_else(|| CollError::Buffer("igatherv: the root needs a receive layout".into()))?;
        check_v("igatherv", counts, displs, self.size(), len)?;
        let (send, late) = match counts[root as usize] {
            n if n != send.len() => {
                let (own, e) = fit("igatherv (root's block)", &send, n);
                (own, Some(e))
            }
            _ => (send, None),
        };
        let mut c = self.call_block(CollKind::Gatherv, send, 0, root);
        c.counts = counts.to_vec();
        c.displs = displs.to_vec();
        c.recv_len = len;
        self.start_late(c, late)
    }

    /// `MPI_Iscatterv`: the root passes its whole send buffer with
    /// `Some((counts, displs))` in bytes, the others an empty vector and
    /// `None`; `recv_len` is this rank's block length (at the root it must
    /// equal `counts[root]`). The result is this rank's block.
    pub fn iscatterv(
        &self,
        send: Vec<u8>,
        layout: Option<(&[usize], &[usize])>,
        recv_len: usize,
        root: u32,
    ) -> Result<CollRequest> {
        root_ok(root, self.size())?;
        if self.rank() != root {
            return self.start(self.call_block(CollKind::Scatterv, Vec::new(), recv_len, root));
        }
        let (counts, displs) = layout
            .ok_or_else(|| CollError::Buffer("iscatterv: the root needs a send layout".into()))?;
        check_v("iscatterv", counts, displs, self.size(), send.len())?;
        let me = root as usize;
        let late = same_len("iscatterv (root's block)", counts[me], recv_len).err();
        let mut c = self.call_block(CollKind::Scatterv, send, counts[me], root);
        c.scounts = counts.to_vec();
        c.sdispls = displs.to_vec();
        self.start_late(c, late)
    }

    /// `MPI_Iallgatherv`: `send` is this rank's block (for `MPI_IN_PLACE`
    /// the caller passes its block of the receive buffer); the result is
    /// `recv_len` bytes with block `i` at `displs[i]` (copy back only the
    /// blocks).
    pub fn iallgatherv(
        &self,
        send: Vec<u8>,
        recv_len: usize,
        counts: &[usize],
        displs: &[usize],
    ) -> Result<CollRequest> {
        check_v("iallgatherv", counts, displs, self.size(), recv_len)?;
        let (send, late) = match counts[self.rank() as usize] {
            n if n != send.len() => {
                let (own, e) = fit("iallgatherv (own block)", &send, n);
                (own, Some(e))
            }
            _ => (send, None),
        };
        let mut c = self.call_block(CollKind::Allgatherv, send, 0, 0);
        c.counts = counts.to_vec();
        c.displs = displs.to_vec();
        c.recv_len = recv_len;
        self.start_late(c, late)
    }

    /// `MPI_Ialltoallv` in bytes: `send` with its layout, the receive
    /// layout `(recv_len, rcounts, rdispls)`. The result is `recv_len` bytes
    /// with the block from rank `i` at `rdispls[i]` (copy back only the
    /// blocks). For `MPI_IN_PLACE` pass a copy of the receive buffer with
    /// the receive layout on both sides.
    pub fn ialltoallv(
        &self,
        send: Vec<u8>,
        scounts: &[usize],
        sdispls: &[usize],
        recv: (usize, &[usize], &[usize]),
    ) -> Result<CollRequest> {
        self.ialltoall_vw(CollKind::Alltoallv, send, scounts, sdispls, recv)
    }

    /// `MPI_Ialltoallw` after packing (per-peer byte counts and byte
    /// displacements): as [`CollComm::ialltoallv`].
    pub fn ialltoallw(
        &self,
        send: Vec<u8>,
        scounts: &[usize],
        sdispls: &[usize],
        recv: (usize, &[usize], &[usize]),
    ) -> Result<CollRequest> {
        self.ialltoall_vw(CollKind::Alltoallw, send, scounts, sdispls, recv)
    }

    fn ialltoall_vw(
        &self,
        kind: CollKind,
        send: Vec<u8>,
        scounts: &[usize],
        sdispls: &[usize],
        (recv_len, rcounts, rdispls): (usize, &[usize], &[usize]),
    ) -> Result<CollRequest> {
        check_v(kind.name(), rcounts, rdispls, self.size(), recv_len)?;
        check_v(kind.name(), scounts, sdispls, self.size(), send.len())?;
        let mut c = self.call_block(kind, send, 0, 0);
        c.scounts = scounts.to_vec();
        c.sdispls = sdispls.to_vec();
        c.counts = rcounts.to_vec();
        c.displs = rdispls.to_vec();
        c.recv_len = recv_len;
        self.start(c)
    }

    /// `MPI_Ireduce_scatter`: `send` is the whole vector, `counts` the
    /// elements of `dtype` per rank; the result is this rank's block.
    pub fn ireduce_scatter(
        &self,
        send: Vec<u8>,
        counts: &[usize],
        dtype: Datatype,
        op: &Op,
    ) -> Result<CollRequest> {
        if counts.len() != self.size() as usize {
            return Err(CollError::Count(format!(
                "ireduce_scatter: {} counts for {} ranks",
                counts.len(),
                self.size()
            )));
        }
        let e = dtype.size();
        let bytes: Vec<usize> = counts
            .iter()
            .map(|c| {
                c.checked_mul(e)
                    .ok_or_else(|| CollError::Count("ireduce_scatter: count overflow".into()))
            })
            .collect::<Result<_>>()?;
        let total = bytes
            .iter()
            .try_fold(0usize, |a, b| a.checked_add(*b))
            .ok_or_else(|| CollError::Count("ireduce_scatter: count overflow".into()))?;
        same_len("ireduce_scatter (whole vector)", send.len(), total)?;
        let mut c = self.call_reduction(CollKind::ReduceScatter, send, dtype, op, 0)?;
        c.counts = bytes;
        self.start(c)
    }

    /// `MPI_Iscan`.
    pub fn iscan(&self, send: Vec<u8>, dtype: Datatype, op: &Op) -> Result<CollRequest> {
        self.start(self.call_reduction(CollKind::Scan, send, dtype, op, 0)?)
    }

    /// `MPI_Iexscan` (empty result on rank 0).
    pub fn iexscan(&self, send: Vec<u8>, dtype: Datatype, op: &Op) -> Result<CollRequest> {
        self.start(self.call_reduction(CollKind::Exscan, send, dtype, op, 0)?)
    }
}
