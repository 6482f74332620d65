//! The pt2pt component: one-sided operations as active messages over the
//! pml (Open MPI's osc/pt2pt, MPICH's CH3 RMA).
//!
//! * A window duplicates its communicator: its context carries only this
//!   window's messages. Creation exchanges every rank's window size and
//!   displacement unit, so the origin checks target ranges before sending.
//! * Each operation is one request message to the target ([`TAG_REQ`]),
//!   with the target datatype's block list and the packed origin data; a
//!   get-like operation first posts the receive of its reply (a tag of its
//!   sequence number). The origin's data is copied into the message, so
//!   origin buffers are free when the call returns. Small puts and
//!   accumulates wait in a per-target batch that goes out with the next
//!   other request to that target (one message: a put and its flush
//!   travel together), at [`BATCH_BYTES`], or at free.
//! * The target applies requests from the pml's progress: a hook the pml
//!   runs in every waiting round of a blocking call (and coll in its
//!   waits), registered once per process while windows exist. One thread
//!   serves a window at a time, requests in arrival order: the pml keeps
//!   each origin's messages in order, so a reply to an origin's flush,
//!   unlock or complete request tells it every earlier operation was
//!   applied, and accumulates from one origin are applied in issue order.
//!   Applying one request is atomic with respect to every other one.
//! * Passive target: the target runs a lock (shared count, exclusive
//!   holder, FIFO queue of waiting requests); a lock request is answered
//!   when granted. `MPI_MODE_NOCHECK` skips the lock messages.
//! * Fence: each rank flushes the targets it wrote to, then a barrier on
//!   the window's context (point-to-point, so targets keep serving).
//! * PSCW: `post` sends a notice to each origin; `start` waits for them;
//!   `complete` sends a complete request to each target; `wait` serves
//!   until every origin's complete was applied.
//! * Threads: each awaited reply has a ticket in issue order. A
//!   synchronisation call (flush, flush_local, unlock, fence, complete,
//!   and `MPI_Rget`'s local completion) covers the replies to its targets
//!   issued before it: it completes those no thread waits for yet and then
//!   waits until every other covered one was completed (unpacked) by the
//!   thread that took it. A target's "written" mark is cleared together
//!   with sending its flush request, so a flush that finds no mark finds
//!   the other thread's flush reply among those it waits for.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};

use tmpi_base::component::{Availability, ComponentDescriptor};
use tmpi_base::mca::{McaError, Registry};
use tmpi_comm::Comm;
use tmpi_pml::raw::{RawBuf, RawBufMut};
use tmpi_pml::{Pml, ReqId, SendMode, ANY_SOURCE};

use crate::apply;
use crate::epoch::{check_rank, Epochs};
use crate::mem::{pack, regions, unpack, WinMem};
use crate::wire::{
    batch_items, batch_push, reply_tag, Kind, Req, BATCH, TAG_BARRIER, TAG_INFO, TAG_POST, TAG_REQ,
};
use crate::{
    assert, AccOp, Buf, BufMut, Component, Layout, LockType, Memory, Module, OscError, Result,
    Target,
};

/// The component.
pub struct Pt2ptComponent;

/// Default priority: below sm's.
const PRIORITY: i64 = 10;

fn register_params(reg: &Registry) -> std::result::Result<(), McaError> {
    reg.register_priority("osc", "pt2pt", PRIORITY)?;
    Ok(())
}

/// The component's description (`tmpi_info`, the `osc` selection list).
pub static DESCRIPTOR: ComponentDescriptor = ComponentDescriptor {
    framework: "osc",
    name: "pt2pt",
    priority: PRIORITY as i32,
    description: "one-sided operations as messages over the pml, served by the target's progress (any window, any transport)",
    register_params,
    probe: || Availability::Available,
};

impl Component for Pt2ptComponent {
    fn name(&self) -> &'static str {
        "pt2pt"
    }
    fn accepts(&self, _comm: &Comm, _shared_segment: bool) -> bool {
        // Works over every transport and any memory: the fallback of the
        // other components.
        true
    }
    fn create(&self, pml: &Arc<Pml>, comm: &Comm, mem: &Memory) -> Result<Box<dyn Module>> {
        Ok(Box::new(Pt2pt::new(pml, comm, mem)?))
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Number of live windows: the progress hook's "has work" counter.
fn live() -> &'static Arc<AtomicUsize> {
    static LIVE: OnceLock<Arc<AtomicUsize>> = OnceLock::new();
    LIVE.get_or_init(|| Arc::new(AtomicUsize::new(0)))
}

/// The windows the hook serves.
fn windows() -> &'static Mutex<Vec<Weak<Shared>>> {
    static W: OnceLock<Mutex<Vec<Weak<Shared>>>> = OnceLock::new();
    W.get_or_init(|| Mutex::new(Vec::new()))
}

/// Registers the serving hook with `pml` once.
fn hook(pml: &Pml) {
    static HOOKED: OnceLock<Mutex<Vec<usize>>> = OnceLock::new();
    let key = pml as *const Pml as usize;
    let mut h = lock(HOOKED.get_or_init(|| Mutex::new(Vec::new())));
    if !h.contains(&key) {
        h.push(key);
        pml.set_progress_hook(Arc::clone(live()), Box::new(serve_all));
    }
}

/// Serves every live window (the progress hook).
fn serve_all() {
    let list: Vec<Arc<Shared>> = lock(windows()).iter().filter_map(Weak::upgrade).collect();
    for w in list {
        w.serve();
    }
}

/// What the target side and the hook share.
struct Shared {
    pml: Arc<Pml>,
    ctx: u32,
    rank: i32,
    mem: WinMem,
    serving: Mutex<()>,
    target: Mutex<TargetState>,
    freed: AtomicBool,
}

#[derive(Default)]
struct TargetState {
    exclusive: Option<i32>,
    shared: usize,
    /// Lock requests waiting: (origin, exclusive, reply sequence).
    queue: VecDeque<(i32, bool, u32)>,
    /// Replies in flight (the buffer lives until the send completes).
    replies: Vec<(ReqId, Vec<u8>)>,
    /// PSCW complete requests applied and not yet consumed by a wait.
    completes: usize,
    /// The first refused put or accumulate of each origin since its last
    /// flush or unlock, encoded by [`OscError::encode`] for the reply that
    /// carries it back (a refused get-like request answers with a short
    /// reply instead).
    errors: BTreeMap<i32, Vec<u8>>,
}

/// Bytes of a flush or unlock reply: empty, or an error the target found
/// in an earlier request of the origin ([`OscError::encode`]).
const ERR_REPLY: usize = 256;

/// Operations (request sends and awaited replies) one window keeps in
/// flight before the origin completes the older half.
const MAX_OPS: usize = 4096;
/// Bytes of request messages and reply buffers one window keeps in flight
/// before the origin completes the older half.
const MAX_BYTES: usize = 64 << 20;

/// Where a reply goes: (address, count, layout) of the user's result.
type Out = (usize, usize, Layout);

/// An operation whose reply the origin waits for.
struct Pending {
    target: i32,
    /// Its place in issue order (see [`OriginState::inflight`]).
    ticket: u64,
    id: ReqId,
    buf: Vec<u8>,
    out: Option<Out>,
}

#[derive(Default)]
struct OriginState {
    seq: u32,
    /// The open epochs.
    ep: Epochs,
    /// Targets written since their last remote completion.
    dirty: BTreeSet<i32>,
    /// Awaited replies no thread has taken yet.
    pending: Vec<Pending>,
    /// ticket -> target of the replies a thread took out of `pending` and
    /// is waiting for; the entry goes when the result is unpacked. A
    /// synchronisation call covers every reply issued before it: it takes
    /// and completes those still in `pending`, then waits until none of
    /// them is left here (another thread completes it), so a second
    /// thread's flush never returns before a result it covers is written.
    inflight: BTreeMap<u64, i32>,
    /// The ticket of the next awaited reply.
    next_ticket: u64,
    sends: Vec<(ReqId, Vec<u8>)>,
    /// Bytes of `pending`'s buffers and `sends`' messages (recounted when
    /// either shrinks).
    held: usize,
    /// Per target, small puts and accumulates not sent yet, batched
    /// ([`crate::wire::batch_push`]); sent with the next request to that
    /// target (a flush, unlock or complete request is one), when
    /// [`BATCH_BYTES`] is reached, or before a larger request.
    batches: BTreeMap<i32, Vec<u8>>,
}

/// Largest request that joins a batch: 2 KiB of data with a header of up
/// to 14 blocks (36 + 16 per block bytes).
const BATCH_ITEM: usize = 2048 + 256;

/// A batch is sent once it holds this many bytes (Open MPI's osc pt2pt
/// buffers 8 KiB per target likewise).
const BATCH_BYTES: usize = 8192;

/// The module of one window.
pub struct Pt2pt {
    sh: Arc<Shared>,
    size: i32,
    /// A dynamic window: targets are absolute addresses that only the
    /// target can check.
    dynamic: bool,
    /// (size in bytes, displacement unit) of every rank's window.
    peers: Vec<(u64, u64)>,
    origin: Mutex<OriginState>,
    comm: Mutex<Option<Comm>>,
}

impl Pt2pt {
    pub(crate) fn new(pml: &Arc<Pml>, comm: &Comm, mem: &Memory) -> Result<Pt2pt> {
        let dup = comm.dup()?;
        let ctx = dup.context_id();
        let rank = dup.rank() as i32;
        let size = dup.size() as i32;
        let sh = Arc::new(Shared {
            pml: Arc::clone(pml),
            ctx,
            rank,
            mem: WinMem {
                base: mem.base,
                size: mem.size,
                attached: mem.attached.clone(),
            },
            serving: Mutex::new(()),
            target: Mutex::new(TargetState::default()),
            freed: AtomicBool::new(false),
        });
        // Every rank's size and displacement unit.
        let mine: Vec<u8> = [mem.size as u64, mem.disp_unit as u64]
            .iter()
            .flat_map(|x| x.to_ne_bytes())
            .collect();
        let mut bufs = vec![[0u8; 16]; size as usize];
        let mut ids = Vec::new();
        for (r, b) in bufs.iter_mut().enumerate() {
            if r as i32 != rank {
                // SAFETY: `b` lives until the wait below.
                ids.push(unsafe { pml.irecv(ctx, r as i32, TAG_INFO, RawBufMut::from_slice(b)) }?);
            }
        }
        for r in 0..size {
            if r != rank {
                // SAFETY: `mine` lives until the wait below.
                ids.push(unsafe {
                    pml.isend(
                        ctx,
                        r,
                        TAG_INFO,
                        RawBuf::from_slice(&mine),
                        SendMode::Standard,
                    )
                }?);
            }
        }
        for id in ids {
            wait(pml, id)?;
        }
        bufs[rank as usize].copy_from_slice(&mine);
        let peers = bufs
            .iter()
            .map(|b| {
                let w = |i: usize| {
                    u64::from_ne_bytes(b[i * 8..i * 8 + 8].try_into().unwrap_or_default())
                };
                (w(0), w(1))
            })
            .collect();
        lock(windows()).push(Arc::downgrade(&sh));
        live().fetch_add(1, Ordering::AcqRel);
        hook(pml);
        tracing::debug!(target: "osc", "pt2pt window on context {ctx}: rank {rank} of {size}, {} bytes", mem.size);
        Ok(Pt2pt {
            sh,
            size,
            dynamic: mem.is_dynamic(),
            peers,
            origin: Mutex::new(OriginState::default()),
            comm: Mutex::new(Some(dup)),
        })
    }

    fn pml(&self) -> &Pml {
        &self.sh.pml
    }

    /// An operation towards `target` that another component carries out
    /// (osc rdma's puts and gets): checks that an access epoch covers it
    /// and records that the fence's epoch has operations, as
    /// [`Pt2pt::issue`] does for pt2pt's own.
    pub(crate) fn access_op(&self, target: i32) -> Result<()> {
        self.check_rank(target)?;
        lock(&self.origin).ep.operation(target)
    }

    fn check_rank(&self, r: i32) -> Result<()> {
        check_rank(r, self.size)
    }

    /// The byte offset of the target region, checked against the target's
    /// window.
    fn target_offset(&self, t: &Target<'_>) -> Result<i64> {
        self.check_rank(t.rank)?;
        let (wsize, unit) = self.peers[t.rank as usize];
        crate::target_offset(t, wsize, unit, self.dynamic)
    }

    fn target_req(&self, kind: Kind, t: &Target<'_>) -> Result<Req> {
        let offset = self.target_offset(t)?;
        // Contiguous items travel as one block: the target then walks one
        // region, not one per item (a million MPI_CHARs).
        let (count, extent, blocks) = if t.layout.is_contig(t.count) {
            let n = t.layout.packed_len(t.count)?;
            let b = if n == 0 { vec![] } else { vec![(0, n as u64)] };
            (1, n as i64, b)
        } else {
            (
                t.count as u64,
                t.layout.extent as i64,
                t.layout
                    .blocks
                    .iter()
                    .map(|&(o, l)| (o as i64, l as u64))
                    .collect(),
            )
        };
        Ok(Req {
            kind,
            op: None,
            elem: t.layout.elem,
            wide: t.layout.wide,
            lock: 0,
            seq: 0,
            offset,
            count,
            extent,
            blocks,
        })
    }

    /// Sends request `req` with `data` to `target`; with `reply`, first
    /// posts the receive of a reply of that many bytes (unpacked into
    /// `out`, if any, when it completes). `epoch`: check the access epoch.
    fn issue(
        &self,
        target: i32,
        req: Req,
        data: &[&[u8]],
        reply: Option<(usize, Option<Out>)>,
        epoch: bool,
    ) -> Result<()> {
        self.issue_with(target, req, data, reply, epoch, |_| true)
    }

    /// A control request (no data, no epoch check) sent only when `cond`,
    /// run under the origin lock, says so.
    fn issue_if(
        &self,
        target: i32,
        req: Req,
        reply: Option<(usize, Option<Out>)>,
        cond: impl FnOnce(&mut OriginState) -> bool,
    ) -> Result<()> {
        self.issue_with(target, req, &[], reply, false, cond)
    }

    fn issue_with(
        &self,
        target: i32,
        mut req: Req,
        data: &[&[u8]],
        reply: Option<(usize, Option<Out>)>,
        epoch: bool,
        cond: impl FnOnce(&mut OriginState) -> bool,
    ) -> Result<()> {
        self.check_rank(target)?;
        let pml = self.pml();
        let mut o = lock(&self.origin);
        if epoch {
            o.ep.operation(target)?;
        }
        if !cond(&mut o) {
            return Ok(());
        }
        o.seq = o.seq.wrapping_add(1);
        req.seq = o.seq;
        let waits = reply.is_none() && matches!(req.kind, Kind::Put | Kind::Acc);
        if let Some((len, out)) = reply {
            let mut buf = vec![0u8; len];
            // SAFETY: `buf`'s heap block stays where it is (the Vec moves
            // into `pending`, its storage does not) until the receive
            // completes in `wait_pending`.
            let id = unsafe {
                pml.irecv(
                    self.sh.ctx,
                    target,
                    reply_tag(req.seq),
                    RawBufMut::from_slice(&mut buf),
                )
            }?;
            o.held += len;
            let ticket = o.next_ticket;
            o.next_ticket += 1;
            o.pending.push(Pending {
                target,
                ticket,
                id,
                buf,
                out,
            });
        }
        let msg = req.encode(data);
        // Small puts and accumulates wait in the target's batch; any other
        // request goes out at once, with the batch in front of it (in the
        // same message when it is small), so the target applies the
        // requests in issue order and a synchronisation request finds the
        // operations before it applied.
        let batch = o.batches.remove(&target).unwrap_or_default();
        if msg.len() <= BATCH_ITEM && (waits || !batch.is_empty()) {
            let mut batch = batch;
            batch_push(&mut batch, &msg);
            if waits && batch.len() < BATCH_BYTES {
                o.batches.insert(target, batch);
            } else {
                Self::send_req(pml, &mut o, self.sh.ctx, target, batch)?;
            }
        } else {
            if !batch.is_empty() {
                Self::send_req(pml, &mut o, self.sh.ctx, target, batch)?;
            }
            Self::send_req(pml, &mut o, self.sh.ctx, target, msg)?;
        }
        if matches!(req.kind, Kind::Put | Kind::Acc | Kind::GetAcc | Kind::Cas) {
            o.dirty.insert(target);
        }
        // Reap the completed sends now and then.
        if o.sends.len() >= 256 {
            let mut keep = Vec::new();
            for (id, m) in std::mem::take(&mut o.sends) {
                match pml.is_done(id) {
                    Ok(true) => {
                        wait(pml, id)?;
                    }
                    _ => keep.push((id, m)),
                }
            }
            o.sends = keep;
            o.held = o.pending.iter().map(|p| p.buf.len()).sum::<usize>()
                + o.sends.iter().map(|s| s.1.len()).sum::<usize>();
        }
        // Bound what one epoch keeps in flight (MPICH's rma/manyget issues
        // 100 000 gets of 128 KiB in one fence epoch): past the limits the
        // oldest half completes before the call returns, which MPI allows.
        if o.pending.len() + o.sends.len() > MAX_OPS || o.held > MAX_BYTES {
            let ns = o.sends.len().div_ceil(2);
            let np = o.pending.len().div_ceil(2);
            let sends: Vec<_> = o.sends.drain(..ns).collect();
            let pending: Vec<_> = o.pending.drain(..np).collect();
            o.inflight
                .extend(pending.iter().map(|p| (p.ticket, p.target)));
            o.held = o.pending.iter().map(|p| p.buf.len()).sum::<usize>()
                + o.sends.iter().map(|s| s.1.len()).sum::<usize>();
            drop(o);
            self.complete(sends, pending)?;
        }
        Ok(())
    }

    /// Sends `msg` (a request or a batch) to `target`; kept in `o.sends`
    /// until the send completes.
    fn send_req(pml: &Pml, o: &mut OriginState, ctx: u32, target: i32, msg: Vec<u8>) -> Result<()> {
        // SAFETY: `msg`'s heap block stays where it is (the Vec moves into
        // `sends`, its storage does not) until the send completes.
        let id = unsafe {
            pml.isend(
                ctx,
                target,
                TAG_REQ,
                RawBuf::from_slice(&msg),
                SendMode::Standard,
            )
        }?;
        o.held += msg.len();
        o.sends.push((id, msg));
        Ok(())
    }

    /// Sends every target's batch (before the window is freed: a program
    /// may free it with puts no synchronisation sent).
    fn send_batches(&self) -> Result<()> {
        let pml = self.pml();
        let mut o = lock(&self.origin);
        for (t, b) in std::mem::take(&mut o.batches) {
            Self::send_req(pml, &mut o, self.sh.ctx, t, b)?;
        }
        Ok(())
    }

    /// Waits for `sends` and for the replies `pending`, unpacking results.
    fn complete(&self, sends: Vec<(ReqId, Vec<u8>)>, pending: Vec<Pending>) -> Result<()> {
        let mut first = Ok(());
        for (id, _msg) in sends {
            if let Err(e) = wait(self.pml(), id) {
                first = first.and(Err(e));
            }
        }
        for p in pending {
            let ticket = p.ticket;
            let r = self.complete_one(p);
            // After the unpack: a thread waiting for this result in
            // `wait_pending` sees it written once the entry is gone.
            lock(&self.origin).inflight.remove(&ticket);
            if let Err(e) = r {
                first = first.and(Err(e));
            }
        }
        first
    }

    /// Waits for one reply and unpacks its result.
    fn complete_one(&self, p: Pending) -> Result<()> {
        let n = wait(self.pml(), p.id)?;
        if p.out.is_some() && n < p.buf.len() {
            // A refused get-like request answers short (a full result has
            // exactly the bytes asked for).
            return Err(OscError::Range(format!(
                "rank {} refused the operation: its target region is not in memory the target exposes \
                 (outside its window, or not attached to its dynamic window)",
                p.target
            )));
        }
        let data = &p.buf[..n.min(p.buf.len())];
        match &p.out {
            None if n > 0 => Err(OscError::decode(data, p.target)),
            None => Ok(()),
            Some((addr, count, layout)) => {
                // SAFETY: the user's result buffer stays valid until the
                // operation completes (the contract of `Module::get`),
                // which is now.
                unsafe { unpack(*addr as *mut u8, *count, layout, data) };
                Ok(())
            }
        }
    }

    /// Waits for the replies of the operations to `targets` (all when
    /// `None`) issued before the call, by any thread, and for every
    /// request send, unpacking results. Replies no thread waits for yet
    /// are completed here; those another thread took are waited for until
    /// that thread has unpacked them.
    fn wait_pending(&self, targets: Option<&[i32]>) -> Result<()> {
        // Every window moves here, even when nothing of this one is
        // outstanding: a program spinning on flush or sync of one window
        // (mpi4py.util.sync) must still answer requests for its others.
        serve_all();
        let covers = |t: i32| targets.is_none_or(|ts| ts.contains(&t));
        let (mine, sends, horizon) = {
            let mut o = lock(&self.origin);
            let (mine, rest): (Vec<Pending>, Vec<Pending>) = std::mem::take(&mut o.pending)
                .into_iter()
                .partition(|p| covers(p.target));
            o.pending = rest;
            o.inflight.extend(mine.iter().map(|p| (p.ticket, p.target)));
            let sends = std::mem::take(&mut o.sends);
            o.held = o.pending.iter().map(|p| p.buf.len()).sum();
            (mine, sends, o.next_ticket)
        };
        let done = self.complete(sends, mine);
        // The covered replies other threads are completing.
        loop {
            let busy = lock(&self.origin)
                .inflight
                .range(..horizon)
                .any(|(_, &t)| covers(t));
            if !busy {
                break;
            }
            // The other thread waits in the pml; this one keeps the
            // process's windows served meanwhile.
            let moved = self.pml().progress();
            serve_all();
            if moved == 0 {
                std::thread::yield_now();
            }
        }
        done
    }

    /// Remote completion at `targets`: a flush request to each one written
    /// to (its reply follows every earlier request), then every reply.
    ///
    /// A target's mark and its flush request go together under the origin
    /// lock: a thread that finds a target unmarked finds the flush request
    /// of the thread that cleared the mark among the replies it waits for
    /// (and that reply follows every request issued before it).
    fn flush_targets(&self, targets: &[i32]) -> Result<()> {
        for &t in targets {
            self.issue_if(
                t,
                Req::control(Kind::Flush, 0, 0),
                Some((ERR_REPLY, None)),
                |o| o.dirty.remove(&t),
            )?;
        }
        self.wait_pending(Some(targets))
    }

    /// A dissemination barrier over the window's context: waiting in the
    /// pml keeps this rank serving requests.
    fn barrier(&self) -> Result<()> {
        let pml = self.pml();
        let (me, n) = (self.sh.rank, self.size);
        let mut k = 0;
        while (1 << k) < n {
            let d = 1 << k;
            let to = (me + d) % n;
            let from = (me - d + n) % n;
            let mut b = [0u8; 1];
            // SAFETY: `b` outlives the wait below.
            let r = unsafe {
                pml.irecv(
                    self.sh.ctx,
                    from,
                    TAG_BARRIER + k,
                    RawBufMut::from_slice(&mut b),
                )
            }?;
            // SAFETY: an empty buffer.
            let s = unsafe {
                pml.isend(
                    self.sh.ctx,
                    to,
                    TAG_BARRIER + k,
                    RawBuf::empty(),
                    SendMode::Standard,
                )
            }?;
            wait(pml, s)?;
            wait(pml, r)?;
            k += 1;
        }
        Ok(())
    }

    fn all_ranks(&self) -> Vec<i32> {
        (0..self.size).collect()
    }
}

/// Waits for a pml request; its byte count, or the error it ended with.
fn wait(pml: &Pml, id: ReqId) -> Result<usize> {
    let st = pml.wait(id)?;
    if let Some(c) = tmpi_pml::status_error(&st) {
        return Err(OscError::Comm(format!(
            "one-sided transfer ended with {}",
            c.name()
        )));
    }
    Ok(st.count)
}

impl Shared {
    /// Applies the requests that arrived for this window (any thread; one
    /// at a time).
    fn serve(&self) {
        if self.freed.load(Ordering::Acquire) {
            return;
        }
        let Ok(_one) = self.serving.try_lock() else {
            return;
        };
        self.reap_replies();
        let mut served = 0usize;
        loop {
            // An origin can keep this loop busy for long: the replies sent
            // meanwhile are released as they complete, not at the end.
            served += 1;
            if served.is_multiple_of(64) {
                self.reap_replies();
            }
            let (msg, st) = match self.pml.improbe(self.ctx, ANY_SOURCE, TAG_REQ) {
                Ok(Some(m)) => m,
                Ok(None) => break,
                Err(e) => {
                    tracing::warn!(target: "osc", "serving window on context {}: probe failed: {e}", self.ctx);
                    break;
                }
            };
            let mut buf = vec![0u8; st.count];
            // SAFETY: `buf` lives until the wait right after.
            let got = unsafe { self.pml.imrecv(msg, RawBufMut::from_slice(&mut buf)) }
                .map_err(OscError::from)
                .and_then(|id| wait(&self.pml, id));
            match got {
                Ok(_) => {
                    if let Err(e) = self.apply(st.source, &buf) {
                        // The origin learns of a refused request (a short
                        // reply, or the verdict of its next flush).
                        tracing::debug!(target: "osc", "request from rank {} on context {} refused: {e}", st.source, self.ctx);
                    }
                }
                Err(e) => {
                    tracing::warn!(target: "osc", "receiving a request on context {} failed: {e}", self.ctx);
                }
            }
        }
    }

    /// Releases the replies whose sends completed.
    fn reap_replies(&self) {
        let mut t = lock(&self.target);
        let pml = &self.pml;
        t.replies
            .retain(|(id, _)| matches!(pml.test(*id), Ok(None)));
    }

    fn reply(&self, to: i32, seq: u32, data: Vec<u8>) -> Result<()> {
        // SAFETY: `data` is kept in `replies` until the send completes.
        let id = unsafe {
            self.pml.isend(
                self.ctx,
                to,
                reply_tag(seq),
                RawBuf::from_slice(&data),
                SendMode::Standard,
            )
        }?;
        lock(&self.target).replies.push((id, data));
        Ok(())
    }

    /// Applies one request from `src`; a refused put or accumulate is
    /// kept for the reply to the origin's next flush or unlock.
    fn apply(&self, src: i32, m: &[u8]) -> Result<()> {
        if m.first() == Some(&BATCH) {
            // Each request of a batch as if it had come alone; the first
            // error is the batch's.
            let mut first = Ok(());
            for item in batch_items(m) {
                let res = item.and_then(|r| self.apply_one(src, r));
                first = first.and(res);
            }
            return first;
        }
        self.apply_one(src, m)
    }

    /// Applies one request from `src` (see [`Shared::apply`]).
    fn apply_one(&self, src: i32, m: &[u8]) -> Result<()> {
        let (r, data) = Req::decode(m).inspect_err(|e| {
            tracing::warn!(target: "osc", "undecodable request from rank {src} on context {}: {e}", self.ctx)
        })?;
        let res = self.apply_req(src, &r, data);
        if let Err(e) = &res {
            if matches!(r.kind, Kind::Put | Kind::Acc) {
                lock(&self.target)
                    .errors
                    .entry(src)
                    .or_insert_with(|| e.encode(ERR_REPLY));
            }
        }
        res
    }

    /// The reply to a flush or unlock: the first error kept for `src`.
    fn verdict(&self, src: i32) -> Vec<u8> {
        lock(&self.target).errors.remove(&src).unwrap_or_default()
    }

    fn apply_req(&self, src: i32, r: &Req, data: &[u8]) -> Result<()> {
        // A dynamic window's attached regions stay locked (no detach)
        // until the request is applied.
        let mem = self.mem.view();
        let regs = || regions(r.offset as i128, r.count, r.extent as i128, &r.blocks);
        match r.kind {
            Kind::Put => {
                let n = mem.check(regs())?;
                if n != data.len() {
                    return Err(OscError::Type(format!(
                        "put of {} bytes into {n}",
                        data.len()
                    )));
                }
                mem.scatter(regs(), data);
            }
            Kind::Get => {
                let n = mem.check(regs());
                let mut out = Vec::with_capacity(*n.as_ref().unwrap_or(&0));
                if n.is_ok() {
                    mem.gather(regs(), &mut out);
                }
                self.reply(src, r.seq, out)?;
                n?;
            }
            Kind::Acc => {
                let op =
                    r.op.as_ref()
                        .ok_or_else(|| OscError::Op("accumulate without op".into()))?;
                apply::accumulate_in_place(&mem, regs, op, r.elem, r.wide, data)?;
            }
            Kind::GetAcc => {
                let (old, res) = apply::accumulate(&mem, regs, r.op.as_ref(), r.elem, r.wide, data);
                self.reply(src, r.seq, old)?;
                res?;
            }
            Kind::Cas => {
                let (old, res) = apply::compare_and_swap(&mem, regs, data);
                self.reply(src, r.seq, old)?;
                res?;
            }
            Kind::Lock => {
                let excl = r.lock == 1;
                let grant = {
                    let mut t = lock(&self.target);
                    let free =
                        t.exclusive.is_none() && t.queue.is_empty() && (!excl || t.shared == 0);
                    if free {
                        if excl {
                            t.exclusive = Some(src);
                        } else {
                            t.shared += 1;
                        }
                    } else {
                        t.queue.push_back((src, excl, r.seq));
                    }
                    free
                };
                if grant {
                    self.reply(src, r.seq, Vec::new())?;
                }
            }
            Kind::Unlock => {
                let granted = {
                    let mut t = lock(&self.target);
                    if t.exclusive == Some(src) {
                        t.exclusive = None;
                    } else if t.shared > 0 {
                        t.shared -= 1;
                    } else {
                        tracing::warn!(target: "osc", "unlock from rank {src} that holds no lock");
                    }
                    let mut g = Vec::new();
                    while let Some(&(o, excl, seq)) = t.queue.front() {
                        if t.exclusive.is_some() || (excl && t.shared > 0) {
                            break;
                        }
                        t.queue.pop_front();
                        if excl {
                            t.exclusive = Some(o);
                        } else {
                            t.shared += 1;
                        }
                        g.push((o, seq));
                    }
                    g
                };
                self.reply(src, r.seq, self.verdict(src))?;
                for (o, seq) in granted {
                    self.reply(o, seq, Vec::new())?;
                }
            }
            Kind::Flush => self.reply(src, r.seq, self.verdict(src))?,
            Kind::Complete => lock(&self.target).completes += 1,
        }
        Ok(())
    }
}

impl Module for Pt2pt {
    fn component(&self) -> &'static str {
        "pt2pt"
    }

    unsafe fn put(&self, origin: Buf<'_>, t: Target<'_>) -> Result<()> {
        crate::matched_len("origin", origin.layout, origin.count, &t)?;
        let req = self.target_req(Kind::Put, &t)?;
        // SAFETY: the caller's contract.
        let data = unsafe { pack(origin.ptr, origin.count, origin.layout) };
        self.issue(t.rank, req, &[&data], None, true)
    }

    unsafe fn get(&self, result: BufMut<'_>, t: Target<'_>) -> Result<()> {
        let want = crate::matched_len("origin buffer", result.layout, result.count, &t)?;
        let req = self.target_req(Kind::Get, &t)?;
        let out = (result.ptr as usize, result.count, result.layout.clone());
        self.issue(t.rank, req, &[], Some((want, Some(out))), true)
    }

    unsafe fn accumulate(&self, origin: Buf<'_>, t: Target<'_>, op: &AccOp) -> Result<()> {
        if t.layout.packed_len(t.count)? == 0 && origin.layout.packed_len(origin.count)? == 0 {
            // No data (a zero count, or a type of size 0): nothing to do.
            self.check_rank(t.rank)?;
            return lock(&self.origin).ep.access(t.rank);
        }
        crate::acc_check(Some(&origin), &t, op)?;
        let mut req = self.target_req(Kind::Acc, &t)?;
        req.op = Some(op.clone());
        // SAFETY: the caller's contract.
        let data = unsafe { pack(origin.ptr, origin.count, origin.layout) };
        self.issue(t.rank, req, &[&data], None, true)
    }

    unsafe fn get_accumulate(
        &self,
        origin: Option<Buf<'_>>,
        result: BufMut<'_>,
        t: Target<'_>,
        op: &AccOp,
    ) -> Result<()> {
        let origin = if matches!(op, AccOp::NoOp) {
            None
        } else {
            origin
        };
        let empty = |b: Option<&Buf<'_>>| -> Result<bool> {
            Ok(b.map_or(Ok(0), |b| b.layout.packed_len(b.count))? == 0)
        };
        if t.layout.packed_len(t.count)? == 0
            && result.layout.packed_len(result.count)? == 0
            && empty(origin.as_ref())?
        {
            // No data: nothing to do.
            self.check_rank(t.rank)?;
            return lock(&self.origin).ep.access(t.rank);
        }
        crate::acc_check(origin.as_ref(), &t, op)?;
        let want = t.layout.packed_len(t.count)?;
        if result.layout.packed_len(result.count)? != want {
            return Err(OscError::Type(format!(
                "the result buffer holds {} bytes of data, the target datatype {want}",
                result.layout.packed_len(result.count)?
            )));
        }
        if (result.layout.elem, result.layout.wide) != (t.layout.elem, t.layout.wide) {
            return Err(OscError::Type(
                "result and target datatypes are built of different predefined types".into(),
            ));
        }
        let mut req = self.target_req(Kind::GetAcc, &t)?;
        req.op = Some(op.clone());
        let data = match origin {
            // SAFETY: the caller's contract.
            Some(o) => unsafe { pack(o.ptr, o.count, o.layout) },
            None => Vec::new(),
        };
        let out = (result.ptr as usize, result.count, result.layout.clone());
        self.issue(t.rank, req, &[&data], Some((want, Some(out))), true)
    }

    unsafe fn compare_and_swap(
        &self,
        origin: *const u8,
        compare: *const u8,
        result: *mut u8,
        layout: &Layout,
        rank: i32,
        disp: isize,
    ) -> Result<()> {
        let t = crate::cas_target(layout, rank, disp)?;
        let req = self.target_req(Kind::Cas, &t)?;
        // SAFETY: the caller's contract: one element at each.
        let (a, b) = unsafe { (pack(origin, 1, layout), pack(compare, 1, layout)) };
        let out = (result as usize, 1, layout.clone());
        self.issue(rank, req, &[&a, &b], Some((layout.size, Some(out))), true)
    }

    fn fence(&self, a: u32) -> Result<()> {
        lock(&self.origin).ep.fence_check()?;
        // An operation a target refused (a dynamic window's target region
        // not attached) fails this fence, after the barrier: the other
        // ranks must not wait for this one.
        let flushed = self.flush_targets(&self.all_ranks());
        self.barrier()?;
        lock(&self.origin).ep.fence_done(a);
        flushed
    }

    fn lock(&self, kind: LockType, rank: i32, a: u32) -> Result<()> {
        self.check_rank(rank)?;
        lock(&self.origin).ep.lock_check(rank)?;
        let nocheck = a & assert::NOCHECK != 0;
        if !nocheck {
            let l = if kind == LockType::Exclusive { 1 } else { 2 };
            self.issue(
                rank,
                Req::control(Kind::Lock, 0, l),
                &[],
                Some((0, None)),
                false,
            )?;
            self.wait_pending(Some(&[rank]))?;
        }
        lock(&self.origin).ep.locks.insert(rank, (kind, nocheck));
        Ok(())
    }

    fn unlock(&self, rank: i32) -> Result<()> {
        self.check_rank(rank)?;
        let nocheck = lock(&self.origin).ep.unlock_check(rank)?;
        // A refused operation fails the unlock, which still ends the epoch.
        let done = if nocheck {
            self.flush_targets(&[rank])
        } else {
            self.issue_if(
                rank,
                Req::control(Kind::Unlock, 0, 0),
                Some((ERR_REPLY, None)),
                |o| {
                    o.dirty.remove(&rank);
                    true
                },
            )?;
            self.wait_pending(Some(&[rank]))
        };
        lock(&self.origin).ep.locks.remove(&rank);
        done
    }

    fn lock_all(&self, a: u32) -> Result<()> {
        lock(&self.origin).ep.lock_all_check()?;
        let nocheck = a & assert::NOCHECK != 0;
        if !nocheck {
            for r in 0..self.size {
                self.issue(
                    r,
                    Req::control(Kind::Lock, 0, 2),
                    &[],
                    Some((0, None)),
                    false,
                )?;
            }
            self.wait_pending(None)?;
        }
        lock(&self.origin).ep.lock_all = Some(nocheck);
        Ok(())
    }

    fn unlock_all(&self) -> Result<()> {
        let nocheck = lock(&self.origin).ep.unlock_all_check()?;
        // As in `unlock`: a refused operation fails the call, which still
        // ends the epoch.
        let done = if nocheck {
            self.flush_targets(&self.all_ranks())
        } else {
            for r in 0..self.size {
                self.issue_if(
                    r,
                    Req::control(Kind::Unlock, 0, 0),
                    Some((ERR_REPLY, None)),
                    |o| {
                        o.dirty.remove(&r);
                        true
                    },
                )?;
            }
            self.wait_pending(None)
        };
        lock(&self.origin).ep.lock_all = None;
        done
    }

    fn flush(&self, rank: Option<i32>) -> Result<()> {
        let targets = lock(&self.origin).ep.flush_targets(rank, self.size)?;
        self.flush_targets(&targets)
    }

    fn flush_local(&self, rank: Option<i32>) -> Result<()> {
        lock(&self.origin).ep.flush_local_check(rank, self.size)?;
        // Origin buffers of puts and accumulates are copied at the call;
        // local completion is the results of gets arriving.
        match rank {
            Some(r) => self.wait_pending(Some(&[r])),
            None => self.wait_pending(None),
        }
    }

    fn sync(&self) -> Result<()> {
        // One memory: the public and private copies are the same (the
        // unified model); order this process's accesses and serve what
        // arrived.
        std::sync::atomic::fence(Ordering::SeqCst);
        self.pml().progress();
        serve_all();
        Ok(())
    }

    fn passive_epoch(&self, rank: i32) -> Result<()> {
        self.check_rank(rank)?;
        lock(&self.origin).ep.passive(rank)
    }

    fn post(&self, group: &[i32], a: u32) -> Result<()> {
        for &r in group {
            self.check_rank(r)?;
        }
        lock(&self.origin).ep.post_begin(group)?;
        if a & assert::NOCHECK == 0 {
            let pml = self.pml();
            let mut ids = Vec::new();
            for &r in group {
                // SAFETY: an empty buffer.
                ids.push(unsafe {
                    pml.isend(
                        self.sh.ctx,
                        r,
                        TAG_POST,
                        RawBuf::empty(),
                        SendMode::Standard,
                    )
                }?);
            }
            lock(&self.origin)
                .sends
                .extend(ids.into_iter().map(|i| (i, Vec::new())));
        }
        Ok(())
    }

    fn start(&self, group: &[i32], a: u32) -> Result<()> {
        for &r in group {
            self.check_rank(r)?;
        }
        lock(&self.origin).ep.start_check()?;
        if a & assert::NOCHECK == 0 {
            let pml = self.pml();
            let mut bufs = vec![[0u8; 1]; group.len()];
            let mut ids = Vec::new();
            for (b, &r) in bufs.iter_mut().zip(group) {
                // SAFETY: `bufs` outlives the waits below.
                ids.push(unsafe { pml.irecv(self.sh.ctx, r, TAG_POST, RawBufMut::from_slice(b)) }?);
            }
            for id in ids {
                wait(pml, id)?;
            }
        }
        lock(&self.origin).ep.start = Some(group.to_vec());
        Ok(())
    }

    fn complete(&self) -> Result<()> {
        let group = lock(&self.origin).ep.complete_group()?;
        // Only the target knows whether a dynamic window's operations hit
        // attached memory: a flush brings its verdict back. A refused
        // operation fails the call, which still ends the epoch (the
        // targets' waits must end).
        let flushed = if self.dynamic {
            self.flush_targets(&group)
        } else {
            Ok(())
        };
        for &r in &group {
            self.issue_if(r, Req::control(Kind::Complete, 0, 0), None, |o| {
                o.dirty.remove(&r);
                true
            })?;
        }
        let done = self.wait_pending(Some(&group));
        lock(&self.origin).ep.start = None;
        flushed.and(done)
    }

    fn wait(&self, block: bool) -> Result<bool> {
        let n = lock(&self.origin).ep.wait_count()?;
        loop {
            serve_all();
            {
                let mut t = lock(&self.sh.target);
                if t.completes >= n {
                    t.completes -= n;
                    drop(t);
                    lock(&self.origin).ep.post = None;
                    return Ok(true);
                }
            }
            if !block {
                self.pml().progress();
                serve_all();
                let t = lock(&self.sh.target);
                if t.completes < n {
                    return Ok(false);
                }
                continue;
            }
            if self.pml().progress() == 0 {
                std::thread::yield_now();
            }
        }
    }

    fn free(&self) -> Result<()> {
        lock(&self.origin).ep.free_check()?;
        self.send_batches()?;
        self.wait_pending(None)?;
        self.barrier()?;
        self.sh.freed.store(true, Ordering::Release);
        // Wait until no thread serves the window any more, then drop it
        // from the hook's list.
        drop(lock(&self.sh.serving));
        {
            let mut w = lock(windows());
            let me = Arc::as_ptr(&self.sh);
            w.retain(|x| x.upgrade().is_some_and(|s| Arc::as_ptr(&s) != me));
        }
        live().fetch_sub(1, Ordering::AcqRel);
        let replies = std::mem::take(&mut lock(&self.sh.target).replies);
        for (id, _buf) in replies {
            wait(self.pml(), id)?;
        }
        if let Some(c) = lock(&self.comm).take() {
            c.free()?;
        }
        Ok(())
    }
}
