//! Collectives as schedules: rounds of sends and receives followed by local
//! steps (copies, reductions), built by an algorithm for one rank and run
//! by one engine ([`Exec`]). A blocking collective is start + wait; a
//! non-blocking one is start + progress until done.
//!
//! Semantics of a round: all its sends and receives are started together
//! (a send takes the bytes the buffer holds when it starts: buffers are
//! shared with the transport while sends are in flight, and a write to a
//! buffer that is still shared copies it first, so sends need no copy);
//! when every one of them has completed, the round's local steps run in
//! order, then the next round starts. A receive may reduce straight into
//! its target. Schedules own their buffers, so a non-blocking collective
//! never borrows user memory; the caller copies the result out at the end.
//!
//! Blocking collectives may instead lend the caller's memory to their
//! schedule ([`ExtRef`], [`Schedule::ext`]): the input is read in place (no
//! copy unless the algorithm writes into it: it is copied into an owned
//! buffer on the first write) and the output buffer is written in place
//! (receives go straight into it, reductions combine into it), so the
//! result needs no copy out either. Only [`crate::CollComm`]'s blocking path
//! builds such schedules; it holds the borrows for the whole run and drains
//! every transport request before returning, also on error.

use std::ops::Range;
use std::sync::Arc;

use crate::datatype::Datatype;
use crate::op::Op;
use crate::p2p::{Done, Endpoint, P2p, P2pHandle, SharedBytes, SMALL_SEND};
use crate::{CollError, Result};
use tmpi_base::error::MpiErrorClass;

/// Index of a buffer of a [`Schedule`].
pub type BufId = usize;

/// Caller memory lent to the schedule of a blocking collective: read-only
/// (the input) or writable (the output). Built from borrows by the crate's
/// blocking path only, which keeps the borrow alive until the schedule and
/// every transport request on the memory are gone.
#[derive(Debug, Clone, Copy)]
pub struct ExtRef {
    ptr: *mut u8,
    len: usize,
    writable: bool,
}

// SAFETY: an `ExtRef` is only a pointer/length pair; it is created from a
// borrow by `CollComm`'s blocking path and used on that caller's thread while
// the borrow lasts (`CollComm::start` refuses calls carrying one), so moving or
// sharing the value itself between threads creates no access.
unsafe impl Send for ExtRef {}
// SAFETY: as for `Send`.
unsafe impl Sync for ExtRef {}

impl ExtRef {
    /// The caller's input, read in place.
    pub(crate) fn read(s: &[u8]) -> Self {
        ExtRef {
            ptr: s.as_ptr() as *mut u8,
            len: s.len(),
            writable: false,
        }
    }

    /// The caller's output, written in place.
    pub(crate) fn write(s: &mut [u8]) -> Self {
        ExtRef {
            ptr: s.as_mut_ptr(),
            len: s.len(),
            writable: true,
        }
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// A byte range of a schedule buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slice {
    /// The buffer.
    pub buf: BufId,
    /// First byte.
    pub off: usize,
    /// Length in bytes.
    pub len: usize,
}

impl Slice {
    /// `len` bytes of `buf` from `off`.
    pub fn new(buf: BufId, off: usize, len: usize) -> Self {
        Slice { buf, off, len }
    }

    fn range(&self) -> Range<usize> {
        self.off..self.off + self.len
    }
}

/// What a receive does with the bytes that arrive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecvMode {
    /// Store them in the target.
    Store,
    /// `target = incoming op target` (the sender holds lower ranks' data).
    ReduceLeft,
    /// `target = target op incoming` (the sender holds higher ranks' data).
    ReduceRight,
}

/// A communication step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CommOp {
    /// Send the bytes of `src` to communicator rank `peer`.
    Send {
        /// Destination rank.
        peer: u32,
        /// What to send.
        src: Slice,
    },
    /// Receive exactly `dst.len` bytes from `peer`.
    Recv {
        /// Source rank.
        peer: u32,
        /// Where the bytes go.
        dst: Slice,
        /// Store or combine.
        mode: RecvMode,
    },
}

/// A local step run after a round's communication completed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LocalOp {
    /// Copy `src` to `dst` (same length; ranges may be in one buffer but must not overlap).
    Copy {
        /// From.
        src: Slice,
        /// To.
        dst: Slice,
    },
    /// `dst = src op dst` when `src_left`, else `dst = dst op src`.
    Reduce {
        /// Operand.
        src: Slice,
        /// Operand and result.
        dst: Slice,
        /// Whether `src` is the left operand.
        src_left: bool,
    },
}

/// One round.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Round {
    /// Started together.
    pub comm: Vec<CommOp>,
    /// Run in order once every `comm` step completed.
    pub local: Vec<LocalOp>,
}

/// A schedule for one rank: buffers, rounds, the reduction (if any) and
/// which buffer holds the result.
#[derive(Debug, Clone, Default)]
pub struct Schedule {
    /// Buffers owned by the schedule (shared with the transport while a
    /// send from them is in flight; write through [`Arc::make_mut`]). A
    /// buffer added by [`Schedule::zeros`] stays empty until first used
    /// (see `lens`).
    pub bufs: Vec<Arc<Vec<u8>>>,
    /// Length of every buffer. A buffer shorter than its length is a zeroed
    /// one not allocated yet: a message that fills it whole becomes the
    /// buffer without the allocation and zeroing of `len` bytes (the
    /// receive side of a bcast, of linear gathers and reduces).
    pub lens: Vec<usize>,
    /// Per buffer: added by [`Schedule::scratch`] (every byte is written
    /// before it is read, so it is allocated without zeroing).
    pub scratch: Vec<bool>,
    /// Rounds in order.
    pub rounds: Vec<Round>,
    /// Element type of reductions.
    pub dtype: Option<Datatype>,
    /// The reduction op, for schedules that reduce.
    pub op: Option<Op>,
    /// The buffer returned to the caller at the end.
    pub result: Option<BufId>,
    /// Per buffer: caller memory lent by a blocking call (its `bufs` entry
    /// stays empty), see [`ExtRef`].
    pub ext: Vec<Option<ExtRef>>,
}

impl Schedule {
    /// An empty schedule.
    pub fn new() -> Self {
        Self::default()
    }

    /// A schedule whose reductions use `op` on `dtype`.
    pub fn reducing(dtype: Datatype, op: Op) -> Self {
        Schedule {
            dtype: Some(dtype),
            op: Some(op),
            ..Self::default()
        }
    }

    /// Adds a buffer and returns its id.
    pub fn buf(&mut self, data: Vec<u8>) -> BufId {
        self.lens.push(data.len());
        self.scratch.push(false);
        self.ext.push(None);
        self.bufs.push(Arc::new(data));
        self.bufs.len() - 1
    }

    /// Adds a buffer shared with the caller (no copy: the first write to it
    /// copies it if the caller still holds it, see [`Arc::make_mut`]).
    pub fn shared(&mut self, data: &Arc<Vec<u8>>) -> BufId {
        self.lens.push(data.len());
        self.scratch.push(false);
        self.ext.push(None);
        self.bufs.push(Arc::clone(data));
        self.bufs.len() - 1
    }

    /// Adds a zeroed buffer of `len` bytes (allocated when first used).
    pub fn zeros(&mut self, len: usize) -> BufId {
        self.lens.push(len);
        self.scratch.push(false);
        self.ext.push(None);
        self.bufs.push(Arc::default());
        self.bufs.len() - 1
    }

    /// Adds caller memory (see [`ExtRef`]): read in place, and for a
    /// writable one written in place; a read-only one is copied into an
    /// owned buffer on the first write.
    pub fn ext(&mut self, e: ExtRef) -> BufId {
        let b = self.zeros(e.len);
        self.ext[b] = Some(e);
        b
    }

    /// Whether buffer `b` is writable caller memory.
    pub fn is_ext_out(&self, b: BufId) -> bool {
        matches!(self.ext.get(b), Some(Some(e)) if e.writable)
    }

    /// The bytes of buffer `b` (empty for a lazy buffer not allocated yet).
    fn bytes(&self, b: BufId) -> &[u8] {
        match self.ext[b] {
            // SAFETY: an `ExtRef` covers `len` bytes of a live borrow held by
            // the blocking caller for the whole run (see `ExtRef`); nothing
            // writes them through another path while this shared view lives
            // (the engine writes only through `bytes_mut`, which needs `&mut
            // self`, and the transport writes only into regions of a round
            // whose requests are pending, which the engine does not read).
            Some(e) => unsafe { std::slice::from_raw_parts(e.ptr, e.len) },
            None => self.bufs[b].as_slice(),
        }
    }

    /// Buffer `b` for writing: allocated if lazy, copied if a send still
    /// shares it (owned) or if it is read-only caller memory.
    fn bytes_mut(&mut self, b: BufId) -> &mut [u8] {
        self.materialize(b);
        match self.ext[b] {
            Some(e) if e.writable => {
                // SAFETY: a writable `ExtRef` is the caller's `&mut` borrow,
                // held for the whole run; the engine writes only after the
                // round's requests completed (no transport access pending on
                // these bytes), and the returned borrow of `self` prevents
                // another view through the schedule meanwhile.
                unsafe { std::slice::from_raw_parts_mut(e.ptr, e.len) }
            }
            Some(_) => {
                let v = crate::pool::copy_of(self.bytes(b));
                self.ext[b] = None;
                self.bufs[b] = Arc::new(v);
                Arc::make_mut(&mut self.bufs[b]).as_mut_slice()
            }
            None => Arc::make_mut(&mut self.bufs[b]).as_mut_slice(),
        }
    }

    /// Buffer `a` to read and a distinct buffer `b` to write.
    fn pair(&mut self, a: BufId, b: BufId) -> (&[u8], &mut [u8]) {
        debug_assert_ne!(a, b);
        self.materialize(a);
        // Make `b` writable first (this may copy it), then view `a`.
        let (ap, al) = {
            let x = self.bytes(a);
            (x.as_ptr(), x.len())
        };
        let w = self.bytes_mut(b);
        // SAFETY: `a` and `b` are distinct buffers: distinct owned
        // allocations (`b` is unique after `bytes_mut`: `Arc::make_mut`), or
        // caller memory of distinct arguments (the blocking path never lends
        // one region as both input and output: `MPI_IN_PLACE` copies the
        // input). `a`'s bytes are not moved by making `b` writable (only
        // `b`'s entry changes), and nothing writes them while both views
        // live.
        let r = unsafe { std::slice::from_raw_parts(ap, al) };
        (r, w)
    }

    /// Adds a buffer of `len` bytes every byte of which the schedule writes
    /// (receives, copies) before reading it or returning it: like
    /// [`Schedule::zeros`], but allocated without zeroing (a reused pooled
    /// buffer keeps old bytes until they are overwritten).
    pub fn scratch(&mut self, len: usize) -> BufId {
        let b = self.zeros(len);
        self.scratch[b] = true;
        b
    }

    /// [`Schedule::scratch`] if the blocks `(offset, length)` cover
    /// `0..len` exactly (no gap, no overlap), else [`Schedule::zeros`]
    /// (bytes outside the blocks stay zero).
    pub fn out_buf(&mut self, len: usize, blocks: impl Iterator<Item = (usize, usize)>) -> BufId {
        let mut v: Vec<(usize, usize)> = blocks.filter(|b| b.1 > 0).collect();
        v.sort_unstable();
        let mut end = 0;
        let tiles = v.iter().all(|&(o, l)| {
            let ok = o == end;
            end = o + l;
            ok
        }) && end == len;
        if tiles {
            self.scratch(len)
        } else {
            self.zeros(len)
        }
    }

    /// Allocates buffer `b` (zeroed) if it is still a lazy one.
    fn materialize(&mut self, b: BufId) {
        if self.ext[b].is_none() && self.bufs[b].len() != self.lens[b] {
            let len = self.lens[b];
            let v = if self.scratch.get(b).copied().unwrap_or(false) {
                crate::pool::filled(len)
            } else {
                crate::pool::zeroed(len)
            };
            self.bufs[b] = Arc::new(v);
        }
    }

    /// Length of buffer `b`.
    pub fn len_of(&self, b: BufId) -> usize {
        self.lens[b]
    }

    /// The whole of buffer `b`.
    pub fn all(&self, b: BufId) -> Slice {
        Slice::new(b, 0, self.lens[b])
    }

    fn cur(&mut self) -> &mut Round {
        if self.rounds.is_empty() {
            self.rounds.push(Round::default());
        }
        self.rounds.last_mut().expect("a round exists")
    }

    /// Ends the current round (no-op when it is empty).
    pub fn next_round(&mut self) {
        match self.rounds.last() {
            Some(r) if r.comm.is_empty() && r.local.is_empty() => {}
            _ => self.rounds.push(Round::default()),
        }
    }

    /// Starts a round if the current one already has local steps (a send
    /// added after a local step must wait for it).
    fn comm_slot(&mut self) -> &mut Round {
        if self.rounds.last().is_some_and(|r| !r.local.is_empty()) {
            self.rounds.push(Round::default());
        }
        self.cur()
    }

    /// Sends `src` to `peer` (zero-length sends are kept: they synchronise).
    pub fn send(&mut self, peer: u32, src: Slice) {
        self.comm_slot().comm.push(CommOp::Send { peer, src });
    }

    /// Receives into `dst` from `peer`.
    pub fn recv(&mut self, peer: u32, dst: Slice) {
        self.comm_slot().comm.push(CommOp::Recv {
            peer,
            dst,
            mode: RecvMode::Store,
        });
    }

    /// Receives from `peer` and combines into `dst`; `incoming_left` when the
    /// peer's data comes from lower ranks than `dst`'s.
    pub fn recv_reduce(&mut self, peer: u32, dst: Slice, incoming_left: bool) {
        let mode = if incoming_left {
            RecvMode::ReduceLeft
        } else {
            RecvMode::ReduceRight
        };
        self.comm_slot().comm.push(CommOp::Recv { peer, dst, mode });
    }

    /// Copies `src` to `dst` after the current round's communication.
    pub fn copy(&mut self, src: Slice, dst: Slice) {
        if src.len > 0 {
            self.cur().local.push(LocalOp::Copy { src, dst });
        }
    }

    /// Combines `src` into `dst` after the current round's communication.
    pub fn reduce(&mut self, src: Slice, dst: Slice, src_left: bool) {
        if src.len > 0 {
            self.cur()
                .local
                .push(LocalOp::Reduce { src, dst, src_left });
        }
    }

    /// Number of messages this rank sends (for tests and tracing).
    pub fn sends(&self) -> usize {
        self.rounds
            .iter()
            .flat_map(|r| &r.comm)
            .filter(|c| matches!(c, CommOp::Send { .. }))
            .count()
    }

    /// Checks every slice against its buffer, so that a faulty algorithm is
    /// an internal error instead of a panic.
    pub fn validate(&self) -> Result<()> {
        let ok = |s: &Slice| {
            s.buf < self.bufs.len()
                && s.off
                    .checked_add(s.len)
                    .is_some_and(|e| e <= self.lens[s.buf])
        };
        if self.lens.len() != self.bufs.len()
            || self.ext.len() != self.bufs.len()
            || self
                .bufs
                .iter()
                .zip(&self.lens)
                .any(|(b, &l)| !b.is_empty() && b.len() != l)
        {
            return Err(CollError::Intern("buffer lengths out of step".into()));
        }
        for (i, r) in self.rounds.iter().enumerate() {
            for c in &r.comm {
                let (s, reduces) = match c {
                    CommOp::Send { src, .. } => (src, false),
                    CommOp::Recv { dst, mode, .. } => (dst, *mode != RecvMode::Store),
                };
                if !ok(s) || (reduces && self.op.is_none()) {
                    return Err(CollError::Intern(format!("round {i}: bad step {c:?}")));
                }
            }
            for l in &r.local {
                let (a, b, reduces) = match l {
                    LocalOp::Copy { src, dst } => (src, dst, false),
                    LocalOp::Reduce { src, dst, .. } => (src, dst, true),
                };
                if !ok(a) || !ok(b) || a.len != b.len || (reduces && self.op.is_none()) {
                    return Err(CollError::Intern(format!("round {i}: bad step {l:?}")));
                }
                if a.buf == b.buf && a.off < b.off + b.len && b.off < a.off + a.len {
                    return Err(CollError::Intern(format!("round {i}: overlapping {l:?}")));
                }
            }
        }
        if let Some(r) = self.result {
            if r >= self.bufs.len() {
                return Err(CollError::Intern("result buffer out of range".into()));
            }
        }
        Ok(())
    }
}

struct Pending {
    h: P2pHandle,
    recv: Option<(u32, Slice, RecvMode)>,
}

/// Runs a [`Schedule`] over a transport: the one engine behind blocking and
/// non-blocking collectives.
pub struct Exec {
    sched: Schedule,
    round: usize,
    started: bool,
    pending: Vec<Pending>,
    /// Completed transport requests of the current round, applied once the
    /// whole round completed: by then no send shares a buffer any more, so
    /// storing or reducing into it needs no copy-on-write.
    arrived: Vec<(Pending, Done)>,
    tag: i32,
    peer_map: Option<Arc<[u32]>>,
    failed: Option<CollError>,
    /// The first message whose length differed from what this rank expects
    /// ([`is_length_mismatch`]): the schedule still runs to its end, so that
    /// its sends reach the ranks waiting for them, and fails with it then.
    mismatch: Option<CollError>,
    /// The error of a call this rank takes part in although its own
    /// arguments disagree ([`Exec::fail_at_end`]).
    late: Option<CollError>,
    /// Rounds whose messages are all small run with blocking receives
    /// ([`Exec::set_small_blocking`]).
    small_blocking: bool,
}

impl Drop for Exec {
    /// Large buffers no transport request still shares go back to the pool.
    fn drop(&mut self) {
        for b in self.sched.bufs.drain(..) {
            if let Ok(v) = Arc::try_unwrap(b) {
                crate::pool::give(v);
            }
        }
    }
}

impl Exec {
    /// Prepares `sched` to run with message tag `tag`. With `peer_map`, the
    /// schedule's ranks are translated through it before they reach the
    /// transport (a group view on its parent's context).
    pub fn new(sched: Schedule, tag: i32, peer_map: Option<Arc<[u32]>>) -> Result<Self> {
        sched.validate()?;
        Ok(Exec {
            sched,
            round: 0,
            started: false,
            pending: Vec::new(),
            arrived: Vec::new(),
            tag,
            peer_map,
            failed: None,
            mismatch: None,
            late: None,
            small_blocking: false,
        })
    }

    fn wire(&self, peer: u32) -> Result<u32> {
        match &self.peer_map {
            None => Ok(peer),
            Some(m) => m
                .get(peer as usize)
                .copied()
                .ok_or_else(|| CollError::Intern(format!("schedule peer {peer} outside the view"))),
        }
    }

    /// Lets rounds whose sends and receives are all small (at most
    /// [`SMALL_SEND`] bytes) run synchronously: the sends go out (eager,
    /// [`P2p::send_small`]), then each receive blocks in the transport
    /// ([`P2p::recv_small`]) and is applied at once: no request, no
    /// receive buffer, no polling of the schedule. For a blocking
    /// collective while no non-blocking one is outstanding on the context
    /// (a blocking receive would stop progressing those). No deadlock is
    /// added: every send of the round is out before the first receive
    /// blocks, and the round could not end before these messages arrived
    /// anyway.
    pub fn set_small_blocking(&mut self, on: bool) {
        self.small_blocking = on;
    }

    /// Whether the current round qualifies for [`Exec::set_small_blocking`].
    fn small_round(&self, p2p: &dyn P2p) -> bool {
        let round = &self.sched.rounds[self.round];
        self.small_blocking
            && p2p.has_recv_small()
            && round.comm.iter().any(|c| matches!(c, CommOp::Recv { .. }))
            && round.comm.iter().all(|c| match c {
                CommOp::Send { src, .. } => src.len <= SMALL_SEND,
                CommOp::Recv { dst, .. } => dst.len <= SMALL_SEND,
            })
    }

    /// Runs the current round's communication synchronously (see
    /// [`Exec::set_small_blocking`]).
    fn run_small_round(&mut self, p2p: &dyn P2p, ep: &Endpoint) -> Result<()> {
        let n = self.sched.rounds[self.round].comm.len();
        for i in 0..n {
            if let CommOp::Send { peer, src } = self.sched.rounds[self.round].comm[i] {
                self.sched.materialize(src.buf);
                let bytes = self.sched.bytes(src.buf).get(src.range()).ok_or_else(|| {
                    CollError::Intern(format!("send outside its buffer: {src:?}"))
                })?;
                let bytes = if self.mismatch.is_some() { &[] } else { bytes };
                if !p2p.send_small(ep, self.wire(peer)?, self.tag, bytes)? {
                    return Err(CollError::Intern(
                        "transport with recv_small refused a small send".into(),
                    ));
                }
            }
        }
        let mut tmp = [0u8; SMALL_SEND];
        for i in 0..n {
            if let CommOp::Recv { peer, dst, mode } = self.sched.rounds[self.round].comm[i] {
                let got = match p2p.recv_small(ep, self.wire(peer)?, self.tag, &mut tmp[..dst.len])
                {
                    Ok(got) => {
                        got.ok_or_else(|| CollError::Intern("transport without recv_small".into()))?
                    }
                    Err(e) => {
                        self.tolerate(e)?;
                        continue;
                    }
                };
                if got != dst.len {
                    self.tolerate(CollError::Truncate {
                        peer,
                        got,
                        expected: dst.len,
                    })?;
                    continue;
                }
                self.apply_data(dst, mode, &tmp[..got])?;
            }
        }
        Ok(())
    }

    /// Whether every round completed.
    pub fn is_done(&self) -> bool {
        self.round >= self.sched.rounds.len()
    }

    /// Advances as far as possible without blocking; `Ok(true)` once complete.
    /// An error is sticky: later calls return it again.
    pub fn poll(&mut self, p2p: &dyn P2p, ep: &Endpoint) -> Result<bool> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        let r = self.poll_inner(p2p, ep);
        if let Err(e) = &r {
            self.failed = Some(e.clone());
        }
        r
    }

    fn poll_inner(&mut self, p2p: &dyn P2p, ep: &Endpoint) -> Result<bool> {
        while !self.is_done() {
            if !self.started {
                self.start_round(p2p, ep)?;
            }
            let mut i = 0;
            while i < self.pending.len() {
                match p2p.test(self.pending[i].h) {
                    Ok(None) => i += 1,
                    Ok(Some(done)) => {
                        let p = self.pending.swap_remove(i);
                        self.arrived.push((p, done));
                    }
                    Err(e) => {
                        // Completed with an error: the handle is consumed
                        // (`Exec::drain` must not test it again). A message
                        // longer than expected fills the region it had and
                        // the schedule goes on ([`Exec::tolerate`]).
                        self.pending.swap_remove(i);
                        self.tolerate(e)?;
                    }
                }
            }
            if !self.pending.is_empty() {
                return Ok(false);
            }
            for (p, done) in std::mem::take(&mut self.arrived) {
                self.complete(p, done)?;
            }
            self.run_local()?;
            self.round += 1;
            self.started = false;
        }
        match self.late.take().or_else(|| self.mismatch.take()) {
            Some(e) => Err(e),
            None => Ok(true),
        }
    }

    /// Makes the schedule fail with `e` once it ran to its end (before any
    /// length mismatch it finds): for a rank that takes part in a call
    /// although its own arguments disagree. Its messages go out as they
    /// are.
    pub(crate) fn fail_at_end(&mut self, e: CollError) {
        self.late = Some(e);
    }

    /// Keeps a length mismatch ([`is_length_mismatch`]) for the end of the
    /// schedule instead of stopping at it: the ranks that called the
    /// collective with different counts all get through it (the bytes that
    /// fit land, the rest of the region keeps its contents; from the next
    /// round this rank's messages are empty, so the ranks its data would
    /// reach fail too), and every rank used up the call's sequence number,
    /// so the communicator's later collectives stay in step. Any other
    /// error is returned.
    fn tolerate(&mut self, e: CollError) -> Result<()> {
        if !is_length_mismatch(&e) {
            return Err(e);
        }
        tracing::debug!(target: "coll_base", "finishing the collective after: {e}");
        self.mismatch.get_or_insert(e);
        Ok(())
    }

    fn start_round(&mut self, p2p: &dyn P2p, ep: &Endpoint) -> Result<()> {
        self.started = true;
        if self.small_round(p2p) {
            return self.run_small_round(p2p, ep);
        }
        let bases = self.in_place_bases();
        let round = &self.sched.rounds[self.round];
        // Receives first, so that a matching send from the peer finds them posted.
        for c in &round.comm {
            if let CommOp::Recv { peer, dst, mode } = c {
                let base = bases.iter().find(|(b, _)| *b == dst.buf).map(|&(_, p)| p);
                let h = match base {
                    Some(base) if Self::in_place_candidate(&self.sched, dst, *mode) => {
                        let keep = Arc::clone(&self.sched.bufs[dst.buf]);
                        // SAFETY: `base` is the start of buffer `dst.buf`'s
                        // data, taken from the unique `Arc` just before
                        // (`in_place_bases`) or the caller's writable
                        // memory (`ExtRef`, alive until the blocking run
                        // drained its requests), and `dst` lies inside it
                        // (`Schedule::validate`). This round's in-place
                        // receives into that buffer do not overlap, no send
                        // of the round reads it (caller memory: no send
                        // reads an overlapping region), and the engine
                        // touches no buffer's bytes until every request of
                        // the round completed; `keep` keeps an owned
                        // allocation alive (see `P2p::irecv_into`). The
                        // buffer is not reallocated meanwhile: writes go
                        // through `Arc::make_mut` only after the round.
                        unsafe {
                            p2p.irecv_into(
                                ep,
                                self.wire(*peer)?,
                                self.tag,
                                keep,
                                base.add(dst.off),
                                dst.len,
                            )
                        }?
                    }
                    _ => p2p.irecv(ep, self.wire(*peer)?, self.tag, dst.len)?,
                };
                self.pending.push(Pending {
                    h,
                    recv: Some((*peer, *dst, *mode)),
                });
            }
        }
        for i in 0..self.sched.rounds[self.round].comm.len() {
            if let CommOp::Send { src, .. } = self.sched.rounds[self.round].comm[i] {
                self.sched.materialize(src.buf);
            }
        }
        let round = &self.sched.rounds[self.round];
        for c in &round.comm {
            if let CommOp::Send { peer, src } = c {
                if self.mismatch.is_some() {
                    // After a length mismatch this rank's data are not what
                    // the others expect: an empty message instead, so that
                    // the ranks that depend on them fail too (a scatter's
                    // subtree, every rank of an exchange) rather than take
                    // them as good.
                    let wire = self.wire(*peer)?;
                    if !p2p.send_small(ep, wire, self.tag, &[])? {
                        let none = SharedBytes::new(Arc::new(Vec::new()), 0..0)
                            .ok_or_else(|| CollError::Intern("empty send".into()))?;
                        let h = p2p.isend_shared(ep, wire, self.tag, none)?;
                        self.pending.push(Pending { h, recv: None });
                    }
                    continue;
                }
                if src.len <= SMALL_SEND {
                    // Small: sent at once from the bytes, no request to test.
                    let bytes = self.sched.bytes(src.buf).get(src.range()).ok_or_else(|| {
                        CollError::Intern(format!("send outside its buffer: {src:?}"))
                    })?;
                    if p2p.send_small(ep, self.wire(*peer)?, self.tag, bytes)? {
                        continue;
                    }
                }
                if self.sched.ext[src.buf].is_some() {
                    let bytes = self.sched.bytes(src.buf).get(src.range()).ok_or_else(|| {
                        CollError::Intern(format!("send outside its buffer: {src:?}"))
                    })?;
                    // SAFETY: caller memory (`ExtRef`) stays valid until the
                    // blocking run drained every request, also on error
                    // (`CollComm::direct`), and is not written while the
                    // send is pending: the engine writes only after the
                    // round completed, and an in-place receive of the round
                    // never overlaps a region a send of the round reads
                    // (`in_place_bases`).
                    let h = unsafe {
                        p2p.isend_raw(ep, self.wire(*peer)?, self.tag, bytes.as_ptr(), bytes.len())
                    }?;
                    self.pending.push(Pending { h, recv: None });
                    continue;
                }
                let data = SharedBytes::new(Arc::clone(&self.sched.bufs[src.buf]), src.range())
                    .ok_or_else(|| {
                        CollError::Intern(format!("send outside its buffer: {src:?}"))
                    })?;
                let h = p2p.isend_shared(ep, self.wire(*peer)?, self.tag, data)?;
                self.pending.push(Pending { h, recv: None });
            }
        }
        Ok(())
    }

    /// Whether a receive may go straight into its target region: it stores
    /// (no reduction) a non-empty part of a buffer (a whole-buffer message
    /// is taken as the buffer instead, without a copy either).
    fn in_place_candidate(sched: &Schedule, dst: &Slice, mode: RecvMode) -> bool {
        mode == RecvMode::Store
            && dst.len > 0
            && (dst.len < sched.lens[dst.buf] || sched.is_ext_out(dst.buf))
    }

    /// The buffers this round receives into in place, with the start of
    /// their data: those with candidate receives (see
    /// [`Exec::in_place_candidate`]) that no send of the round reads, whose
    /// candidate regions do not overlap and whose `Arc` is not shared (a
    /// shared one would be copied on the next write, losing the bytes).
    fn in_place_bases(&mut self) -> Vec<(BufId, *mut u8)> {
        let round = &self.sched.rounds[self.round];
        let mut regions: Vec<(BufId, usize, usize)> = Vec::new();
        for c in &round.comm {
            if let CommOp::Recv { dst, mode, .. } = c {
                if Self::in_place_candidate(&self.sched, dst, *mode) {
                    regions.push((dst.buf, dst.off, dst.off + dst.len));
                }
            }
        }
        if regions.is_empty() {
            return Vec::new();
        }
        let sent: Vec<Slice> = round
            .comm
            .iter()
            .filter_map(|c| match c {
                CommOp::Send { src, .. } => Some(*src),
                _ => None,
            })
            .collect();
        // Caller memory: whether a send of the round reads a region of `b`
        // that a candidate receive writes (disjoint regions are fine: no
        // copy-on-write can move caller memory).
        let read_while_written = |b: BufId| {
            sent.iter().filter(|x| x.buf == b && x.len > 0).any(|x| {
                regions
                    .iter()
                    .filter(|r| r.0 == b)
                    .any(|r| x.off < r.2 && r.1 < x.off + x.len)
            })
        };
        // Whether any two candidate regions of `b` overlap.
        let overlapping = |b: BufId| {
            let mut v: Vec<(usize, usize)> = regions
                .iter()
                .filter(|r| r.0 == b)
                .map(|r| (r.1, r.2))
                .collect();
            v.sort_unstable();
            v.windows(2).any(|w| w[1].0 < w[0].1)
        };
        let mut bufs: Vec<BufId> = regions.iter().map(|r| r.0).collect();
        bufs.sort_unstable();
        bufs.dedup();
        let mut out = Vec::new();
        for b in bufs {
            if overlapping(b) {
                continue;
            }
            if self.sched.is_ext_out(b) {
                if !read_while_written(b) {
                    out.push((b, self.sched.bytes_mut(b).as_mut_ptr()));
                }
                continue;
            }
            if sent.iter().any(|x| x.buf == b) || self.sched.ext[b].is_some() {
                continue;
            }
            self.sched.materialize(b);
            if let Some(v) = Arc::get_mut(&mut self.sched.bufs[b]) {
                out.push((b, v.as_mut_ptr()));
            }
        }
        out
    }

    fn complete(&mut self, p: Pending, done: Done) -> Result<()> {
        let ((peer, dst, mode), data) = match (p.recv, done) {
            (None, Done::Sent) => return Ok(()),
            (Some((peer, dst, _)), Done::ReceivedInPlace(n)) => {
                // The bytes are already in place.
                if n != dst.len {
                    return self.tolerate(CollError::Truncate {
                        peer,
                        got: n,
                        expected: dst.len,
                    });
                }
                return Ok(());
            }
            (Some(r), Done::Received(data)) => (r, data),
            _ => {
                return Err(CollError::Intern(
                    "transport completed a request as the wrong kind".into(),
                ))
            }
        };
        if data.len() != dst.len {
            // Too short to store or fold: the region keeps its contents.
            return self.tolerate(CollError::Truncate {
                peer,
                got: data.len(),
                expected: dst.len,
            });
        }
        if mode == RecvMode::Store
            && dst.off == 0
            && dst.len == self.sched.lens[dst.buf]
            && !self.sched.is_ext_out(dst.buf)
        {
            // The message is the whole buffer: take it instead of copying
            // (read-only caller memory is replaced, not written).
            self.sched.ext[dst.buf] = None;
            let old = std::mem::replace(&mut self.sched.bufs[dst.buf], Arc::new(data));
            if let Ok(v) = Arc::try_unwrap(old) {
                crate::pool::give(v);
            }
            return Ok(());
        }
        let r = self.apply_data(dst, mode, &data);
        crate::pool::give(data);
        r
    }

    /// Stores or combines received bytes into `dst`.
    fn apply_data(&mut self, dst: Slice, mode: RecvMode, data: &[u8]) -> Result<()> {
        match mode {
            RecvMode::Store => {
                self.sched.bytes_mut(dst.buf)[dst.range()].copy_from_slice(data);
                Ok(())
            }
            RecvMode::ReduceLeft | RecvMode::ReduceRight => {
                let dtype = self
                    .sched
                    .dtype
                    .ok_or_else(|| CollError::Intern("reduce without type".into()))?;
                let op = self
                    .sched
                    .op
                    .clone()
                    .ok_or_else(|| CollError::Intern("reduce without op".into()))?;
                let target = &mut self.sched.bytes_mut(dst.buf)[dst.range()];
                if mode == RecvMode::ReduceLeft {
                    op.apply(dtype, data, target)
                } else {
                    op.apply_rev(dtype, data, target)
                }
            }
        }
    }

    fn run_local(&mut self) -> Result<()> {
        for i in 0..self.sched.rounds[self.round].local.len() {
            let (a, b) = match self.sched.rounds[self.round].local[i] {
                LocalOp::Copy { src, dst } => (src.buf, dst.buf),
                LocalOp::Reduce { src, dst, .. } => (src.buf, dst.buf),
            };
            self.sched.materialize(a);
            self.sched.materialize(b);
        }
        for i in 0..self.sched.rounds[self.round].local.len() {
            let l = self.sched.rounds[self.round].local[i].clone();
            match l {
                LocalOp::Copy { src, dst } => {
                    if src.buf == dst.buf {
                        self.sched
                            .bytes_mut(src.buf)
                            .copy_within(src.range(), dst.off);
                    } else {
                        let (a, b) = self.sched.pair(src.buf, dst.buf);
                        b[dst.range()].copy_from_slice(&a[src.range()]);
                    }
                }
                LocalOp::Reduce { src, dst, src_left } => {
                    let dtype = self
                        .sched
                        .dtype
                        .ok_or_else(|| CollError::Intern("reduce without type".into()))?;
                    let op = self
                        .sched
                        .op
                        .clone()
                        .ok_or_else(|| CollError::Intern("reduce without op".into()))?;
                    if src.buf != dst.buf {
                        let (a, b) = self.sched.pair(src.buf, dst.buf);
                        if src_left {
                            op.apply(dtype, &a[src.range()], &mut b[dst.range()])?;
                        } else {
                            op.apply_rev(dtype, &a[src.range()], &mut b[dst.range()])?;
                        }
                    } else {
                        let mut tmp = self.sched.bytes(src.buf)[src.range()].to_vec();
                        let d = &mut self.sched.bytes_mut(dst.buf)[dst.range()];
                        if src_left {
                            op.apply(dtype, &tmp, d)?;
                        } else {
                            op.apply(dtype, d, &mut tmp)?;
                            d.copy_from_slice(&tmp);
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// Whether the result is already in the caller's output memory (a
    /// writable [`ExtRef`]): then [`Exec::take_result`] has nothing to give.
    pub fn result_in_place(&self) -> bool {
        self.sched.result.is_some_and(|b| self.sched.is_ext_out(b))
    }

    /// Waits until no transport request of this schedule is pending (after
    /// an error, before the caller's memory lent to it may be released):
    /// tests every pending request until it completes, with or without
    /// error. Its peers run the same collective, so the requests of the
    /// current round complete unless a peer died (then the transport reports
    /// an error on them).
    pub fn drain(&mut self, p2p: &dyn P2p) {
        while !self.pending.is_empty() {
            let mut i = 0;
            while i < self.pending.len() {
                match p2p.test(self.pending[i].h) {
                    Ok(None) => i += 1,
                    Ok(Some(_)) | Err(_) => {
                        self.pending.swap_remove(i);
                    }
                }
            }
            if !self.pending.is_empty() {
                if !p2p.test_progresses() {
                    p2p.progress();
                }
                p2p.idle();
            }
        }
        self.arrived.clear();
    }

    /// Takes the result buffer (empty when the schedule has none, or when
    /// it is the caller's output: [`Exec::result_in_place`]).
    pub fn take_result(&mut self) -> Vec<u8> {
        match self.sched.result {
            Some(b) if self.sched.is_ext_out(b) => Vec::new(),
            Some(b) if self.sched.ext[b].is_some() => crate::pool::copy_of(self.sched.bytes(b)),
            Some(b) => {
                self.sched.materialize(b);
                let a = std::mem::take(&mut self.sched.bufs[b]);
                Arc::try_unwrap(a).unwrap_or_else(|a| crate::pool::copy_of(&a))
            }
            None => Vec::new(),
        }
    }
}

/// Whether `e` says a collective's message had another length than this
/// rank expects (the ranks passed different counts): shorter
/// ([`CollError::Truncate`]) or longer (the transport's `MPI_ERR_TRUNCATE`).
pub(crate) fn is_length_mismatch(e: &CollError) -> bool {
    matches!(
        e,
        CollError::Truncate { .. }
            | CollError::P2p {
                class: MpiErrorClass::Truncate,
                ..
            }
    )
}
