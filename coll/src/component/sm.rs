//! `sm`: small blocking collectives through a shared-memory segment of the
//! communicator's ranks (all on one node), in one step each: every rank
//! that contributes data copies it into its own area of the segment and
//! raises its flag; every rank that needs data waits for the flags it
//! needs and reads the areas. No messages, no matching, no tags.
//!
//! Covered (blocking, data of at most `coll_sm_max` bytes; the alltoall
//! limit is on the whole send vector): barrier, bcast, reduce, allreduce,
//! allgather, alltoall. Everything else, every non-blocking collective and
//! larger calls go to the next provider (tuned): the module's schedules
//! are its underlying module's.
//!
//! Protocol (per communicator; `s` = the op's number, the same on every
//! rank because MPI makes every rank call the same collectives in the same
//! order, and the size decision depends only on what every rank passes):
//! - the segment has [`SLOTS`] slots, each with one area per rank (flag,
//!   length, data) and one `done` word per rank; op `s` uses slot
//!   `s % SLOTS`;
//! - a rank writes its area of slot `k` for op `s` only once every rank's
//!   `done` is at least `s - SLOTS` (nobody still reads what op
//!   `s - SLOTS` left there), then stores its flag `= s` (release);
//! - a reader waits for the flag to reach `s` (acquire), reads, and
//!   stores its own `done = s` (release) at the end of the op.
//!
//! Flags only grow, so a barrier (flag without data) never needs to wait
//! for its slot. Reductions combine in rank order, right to left
//! (`x0 op (x1 op (... op x_{p-1}))`), identical on every rank
//! (allreduce) and correct for non-commutative ops.
//!
//! The segment is attached on first use (collectively, by `Comm`): rank 0
//! creates it, tells the others its name over the next provider's bcast,
//! and everyone agrees (allreduce) before using it; when any rank fails,
//! every rank keeps the component out of that communicator.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use tmpi_base::component::{Availability, ComponentDescriptor};
use tmpi_base::mca::{Level, McaError, ParamSpec, Registry};

use crate::algo::{Call, CollKind, Pos};
use crate::comm::CollContext;
use crate::datatype::Datatype;
use crate::framework::{CollComponent, CollModule, CommShape, Underlying};
use crate::op::Op;
use crate::schedule::Schedule;
use crate::shm::Segment;
use crate::{CollError, Result};

/// Default priority: above tuned (30), below self (75).
pub const PRIORITY: i64 = 40;

/// Default `coll_sm_max`.
pub const MAX_DEFAULT: u64 = 8192;

/// Upper bound of `coll_sm_max` (per rank and slot: the segment is
/// `SLOTS` x ranks x this).
pub const MAX_CAP: u64 = 1 << 20;

/// Slots (ops in flight before a fast rank waits for the slowest).
pub const SLOTS: u64 = 8;

/// Cache-line distance between the words different ranks write (two
/// lines: the adjacent-line prefetcher pairs lines).
const LINE: usize = 128;
/// Data offset in an area: flag (8), length (8), then the data, 16-byte
/// aligned and in the flag's cache line for small payloads.
const DATA: usize = 16;
const MAGIC: u64 = 0x746d_7069_2d63_736d;

fn max_spec() -> ParamSpec {
    ParamSpec::new("coll", "sm", "max")
        .help(
            "Largest blocking barrier/bcast/reduce/allreduce/allgather (block) /alltoall \
             (whole send vector) in bytes that goes through the communicator's shared-memory \
             segment; the segment takes 8 x ranks x this (rounded up) bytes of /dev/shm",
        )
        .level(Level::TunerAll)
}

fn register_params(reg: &Registry) -> Result<(), McaError> {
    reg.register_priority("coll", "sm", PRIORITY)?;
    reg.register_size(max_spec(), MAX_DEFAULT)?;
    reg.register_verbose("coll", "sm")?;
    Ok(())
}

fn probe() -> Availability {
    if Path::new("/dev/shm").is_dir() {
        Availability::Available
    } else {
        Availability::Unavailable("/dev/shm is missing".into())
    }
}

/// The component descriptor.
pub static DESCRIPTOR: ComponentDescriptor = ComponentDescriptor {
    framework: "coll",
    name: "sm",
    priority: PRIORITY as i32,
    description: "small blocking collectives through a shared-memory segment of the node's ranks",
    register_params,
    probe,
};

/// The opened component.
#[derive(Debug)]
pub struct Sm {
    priority: i64,
    max: usize,
}

impl Sm {
    /// Opens the component with its parameters from `reg`.
    pub fn open(reg: &Registry) -> Result<Self> {
        register_params(reg)?;
        let priority = reg.register_priority("coll", "sm", PRIORITY)?.value();
        let max = reg
            .register_size(max_spec(), MAX_DEFAULT)?
            .value()
            .min(MAX_CAP) as usize;
        Ok(Sm { priority, max })
    }
}

impl CollComponent for Sm {
    fn descriptor(&self) -> &'static ComponentDescriptor {
        &DESCRIPTOR
    }

    fn comm_query(&self, shape: &CommShape) -> Result<Option<(i64, Arc<dyn CollModule>)>> {
        if shape.size() < 2 || !shape.single_node() || !shape.shared_memory || self.max == 0 {
            return Ok(None);
        }
        let module = SmModule {
            node: Arc::new(NodeColl {
                max: self.max,
                size: shape.size(),
                rank: shape.rank,
                state: OnceLock::new(),
            }),
        };
        Ok(Some((self.priority, Arc::new(module))))
    }
}

/// sm's module: the communicator's (lazily attached) segment; schedules
/// come from the next provider.
#[derive(Debug)]
pub struct SmModule {
    node: Arc<NodeColl>,
}

const KINDS: [CollKind; 6] = [
    CollKind::Barrier,
    CollKind::Bcast,
    CollKind::Reduce,
    CollKind::Allreduce,
    CollKind::Allgather,
    CollKind::Alltoall,
];

impl CollModule for SmModule {
    fn component(&self) -> &'static str {
        "sm"
    }

    fn provides(&self, kind: CollKind) -> bool {
        KINDS.contains(&kind)
    }

    fn build(&self, call: &Call, pos: Pos, under: Underlying<'_>) -> Result<Schedule> {
        under.build(call, pos)
    }

    fn algorithm(&self, _call: &Call, _pos: Pos) -> &'static str {
        "shared-memory segment (blocking, small), else the next provider"
    }

    fn node_coll(&self) -> Option<Arc<NodeColl>> {
        Some(Arc::clone(&self.node))
    }
}

/// One communicator's shared-memory state: the limit and, once attached,
/// the segment.
#[derive(Debug)]
pub struct NodeColl {
    max: usize,
    size: u32,
    rank: u32,
    /// `Some(None)`: attaching failed on some rank, never used.
    state: OnceLock<Option<Node>>,
}

impl NodeColl {
    /// Largest blocking `kind` call (bytes: the block for allgather, the
    /// whole send vector for alltoall) that goes through the segment;
    /// `None` for the collectives it leaves to the next provider.
    pub fn limit(&self, kind: CollKind) -> Option<usize> {
        match kind {
            CollKind::Barrier => Some(0),
            CollKind::Bcast
            | CollKind::Reduce
            | CollKind::Allreduce
            | CollKind::Allgather
            | CollKind::Alltoall => Some(self.max),
            _ => None,
        }
    }

    /// The attached segment, `None` before attaching.
    pub fn attached(&self) -> Option<&Option<Node>> {
        self.state.get()
    }

    /// Segment bytes for this communicator.
    fn bytes(&self) -> usize {
        Node::layout(self.size, self.max).total
    }

    /// Rank 0's part of attaching: creates the segment at a fresh path.
    pub fn create(&self) -> std::result::Result<(Node, String), String> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let path = format!(
            "/dev/shm/tmpi-coll.{}.{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let seg = Segment::create(Path::new(&path), self.bytes())
            .map_err(|e| format!("create {path}: {e}"))?;
        let node = Node::new(seg, self.size, self.rank, self.max);
        node.seg
            .atomic(8)
            .store(u64::from(self.size), Ordering::Relaxed);
        node.seg
            .atomic(16)
            .store(self.max as u64, Ordering::Relaxed);
        node.seg.atomic(0).store(MAGIC, Ordering::Release);
        Ok((node, path))
    }

    /// The other ranks' part: opens what rank 0 created and checks it.
    pub fn open(&self, path: &str) -> std::result::Result<Node, String> {
        if !path.starts_with("/dev/shm/tmpi-coll.") || path.contains("/../") {
            return Err(format!("refusing segment path {path:?}"));
        }
        let seg = Segment::open(Path::new(path), self.bytes())
            .map_err(|e| format!("open {path}: {e}"))?;
        let ok = seg.atomic(0).load(Ordering::Acquire) == MAGIC
            && seg.atomic(8).load(Ordering::Relaxed) == u64::from(self.size)
            && seg.atomic(16).load(Ordering::Relaxed) == self.max as u64;
        if !ok {
            return Err(format!("{path}: header does not match this communicator"));
        }
        Ok(Node::new(seg, self.size, self.rank, self.max))
    }

    /// Records the outcome of attaching (the same on every rank).
    pub fn set(&self, node: Option<Node>) -> Option<&Node> {
        let _ = self.state.set(node);
        self.state.get().and_then(Option::as_ref)
    }
}

struct Layout {
    base: usize,
    stride: usize,
    total: usize,
}

/// An attached segment and this rank's position in its protocol.
#[derive(Debug)]
pub struct Node {
    seg: Segment,
    p: u32,
    me: u32,
    max: usize,
    base: usize,
    stride: usize,
    /// Ops started on this communicator through the segment.
    seq: AtomicU64,
    /// Smallest `done` of all ranks as last read.
    min_done: AtomicU64,
}

impl Node {
    fn layout(p: u32, max: usize) -> Layout {
        let p = p as usize;
        let base = LINE * (1 + p);
        let stride = (DATA + max).div_ceil(LINE) * LINE;
        Layout {
            base,
            stride,
            total: base + SLOTS as usize * p * stride,
        }
    }

    fn new(seg: Segment, p: u32, me: u32, max: usize) -> Node {
        let l = Node::layout(p, max);
        Node {
            seg,
            p,
            me,
            max,
            base: l.base,
            stride: l.stride,
            seq: AtomicU64::new(0),
            min_done: AtomicU64::new(0),
        }
    }

    fn done(&self, r: u32) -> &AtomicU64 {
        self.seg.atomic(LINE * (1 + r as usize))
    }

    fn area(&self, k: usize, r: u32) -> usize {
        self.base + (k * self.p as usize + r as usize) * self.stride
    }

    fn flag(&self, k: usize, r: u32) -> &AtomicU64 {
        self.seg.atomic(self.area(k, r))
    }

    fn len_of(&self, k: usize, r: u32) -> usize {
        self.seg.atomic(self.area(k, r) + 8).load(Ordering::Relaxed) as usize
    }

    /// Rank `r`'s data of slot `k`, `n` bytes.
    ///
    /// Only after `r`'s flag for the current op was seen: the protocol
    /// keeps `r` from rewriting it until this rank stored its `done`.
    fn data(&self, k: usize, r: u32, n: usize) -> &[u8] {
        // SAFETY: `r` rewrites its area of slot `k` only after every
        // rank's `done` reached the op that is using it now, and this
        // rank stores its `done` only after it stopped reading (the
        // borrow ends before `finish`).
        unsafe { self.seg.slice(self.area(k, r) + DATA, n) }
    }

    /// Collectives this rank ran through the segment.
    pub fn calls(&self) -> u64 {
        self.seq.load(Ordering::Relaxed)
    }

    /// Largest data per call.
    pub fn max(&self) -> usize {
        self.max
    }

    fn next(&self) -> (u64, usize) {
        let s = self.seq.load(Ordering::Relaxed) + 1;
        self.seq.store(s, Ordering::Relaxed);
        (s, (s % SLOTS) as usize)
    }

    /// Spins until `ready`, driving the pml and the process's outstanding
    /// non-blocking collectives every few polls (a peer may be waiting for
    /// them before it comes to this call) and yielding the core when
    /// neither had anything to do and ranks yield when idle.
    fn wait(&self, ctx: &CollContext, mut ready: impl FnMut() -> bool) {
        let mut polls = 0u32;
        while !ready() {
            polls += 1;
            if polls % 32 == 0 && !ctx.progress_all() {
                ctx.p2p().idle();
            }
        }
    }

    /// Waits until this rank may rewrite its area in op `s`'s slot.
    fn claim(&self, ctx: &CollContext, s: u64) {
        let Some(need) = s.checked_sub(SLOTS) else {
            return;
        };
        if self.min_done.load(Ordering::Relaxed) >= need {
            return;
        }
        self.wait(ctx, || {
            let m = (0..self.p)
                .map(|r| self.done(r).load(Ordering::Acquire))
                .min()
                .unwrap_or(0);
            self.min_done.store(m, Ordering::Relaxed);
            m >= need
        });
    }

    fn publish(&self, k: usize, s: u64, data: &[u8]) {
        let a = self.area(k, self.me);
        self.seg.write(a + DATA, data);
        self.seg
            .atomic(a + 8)
            .store(data.len() as u64, Ordering::Relaxed);
        self.flag(k, self.me).store(s, Ordering::Release);
    }

    fn wait_flag(&self, ctx: &CollContext, k: usize, r: u32, s: u64) {
        let f = self.flag(k, r);
        if f.load(Ordering::Acquire) < s {
            self.wait(ctx, || f.load(Ordering::Acquire) >= s);
        }
    }

    fn wait_all(&self, ctx: &CollContext, k: usize, s: u64) {
        for r in 0..self.p {
            if r != self.me {
                self.wait_flag(ctx, k, r, s);
            }
        }
    }

    fn finish(&self, s: u64) {
        self.done(self.me).store(s, Ordering::Release);
    }

    fn expect_len(&self, k: usize, r: u32, expected: usize) -> Result<()> {
        let got = self.len_of(k, r);
        if got != expected {
            return Err(CollError::Truncate {
                peer: r,
                got,
                expected,
            });
        }
        Ok(())
    }

    /// `MPI_Barrier`: every rank raises its flag and waits for all flags.
    pub fn barrier(&self, ctx: &CollContext) -> Result<()> {
        let (s, k) = self.next();
        self.flag(k, self.me).store(s, Ordering::Release);
        self.wait_all(ctx, k, s);
        self.finish(s);
        Ok(())
    }

    /// `MPI_Bcast` of `buf` (at most [`Node::max`] bytes) from `root`.
    pub fn bcast(&self, ctx: &CollContext, buf: &mut [u8], root: u32) -> Result<()> {
        let (s, k) = self.next();
        if self.me == root {
            self.claim(ctx, s);
            self.publish(k, s, buf);
            self.finish(s);
            return Ok(());
        }
        self.wait_flag(ctx, k, root, s);
        let r = self.expect_len(k, root, buf.len()).map(|()| {
            buf.copy_from_slice(self.data(k, root, buf.len()));
        });
        self.finish(s);
        r
    }

    /// `out = x0 op (x1 op (... op x_{p-1}))` over slot `k`'s areas.
    fn fold(&self, k: usize, out: &mut [u8], dtype: Datatype, op: &Op) -> Result<()> {
        let n = out.len();
        for r in 0..self.p {
            self.expect_len(k, r, n)?;
        }
        out.copy_from_slice(self.data(k, self.p - 1, n));
        for r in (0..self.p - 1).rev() {
            op.apply(dtype, self.data(k, r, n), out)?;
        }
        Ok(())
    }

    /// `MPI_Reduce`: `own` is this rank's input (`None`: in place, it is
    /// in `recv`); `recv` at the root only.
    pub fn reduce(
        &self,
        ctx: &CollContext,
        own: Option<&[u8]>,
        recv: Option<&mut [u8]>,
        dtype: Datatype,
        op: &Op,
        root: u32,
    ) -> Result<()> {
        let (s, k) = self.next();
        self.claim(ctx, s);
        let r = match (own, recv) {
            (Some(x), recv) => {
                self.publish(k, s, x);
                match recv {
                    Some(out) if self.me == root => {
                        self.wait_all(ctx, k, s);
                        self.fold(k, out, dtype, op)
                    }
                    _ => Ok(()),
                }
            }
            (None, Some(out)) => {
                self.publish(k, s, out);
                self.wait_all(ctx, k, s);
                self.fold(k, out, dtype, op)
            }
            (None, None) => Err(CollError::Buffer("reduce: no input".into())),
        };
        self.finish(s);
        r
    }

    /// `MPI_Allreduce` (`own` `None`: in place).
    pub fn allreduce(
        &self,
        ctx: &CollContext,
        own: Option<&[u8]>,
        recv: &mut [u8],
        dtype: Datatype,
        op: &Op,
    ) -> Result<()> {
        let (s, k) = self.next();
        self.claim(ctx, s);
        self.publish(k, s, own.unwrap_or(recv));
        self.wait_all(ctx, k, s);
        let r = self.fold(k, recv, dtype, op);
        self.finish(s);
        r
    }

    /// `MPI_Allgather` of one block each into `recv` (p blocks); `own`
    /// `None`: in place (this rank's block is already in `recv`).
    pub fn allgather(&self, ctx: &CollContext, own: Option<&[u8]>, recv: &mut [u8]) -> Result<()> {
        let p = self.p as usize;
        let b = recv.len() / p;
        let me = self.me as usize;
        let (s, k) = self.next();
        self.claim(ctx, s);
        match own {
            Some(x) => {
                self.publish(k, s, x);
                recv[me * b..(me + 1) * b].copy_from_slice(x);
            }
            None => self.publish(k, s, &recv[me * b..(me + 1) * b]),
        }
        self.wait_all(ctx, k, s);
        let r = (0..self.p).filter(|&r| r != self.me).try_for_each(|r| {
            self.expect_len(k, r, b)?;
            let i = r as usize;
            recv[i * b..(i + 1) * b].copy_from_slice(self.data(k, r, b));
            Ok(())
        });
        self.finish(s);
        r
    }

    /// `MPI_Alltoall`: `send` p blocks (`None`: in place, they are in
    /// `recv`), block `r` of every rank's vector lands in `recv`'s block
    /// of that rank. Only the blocks for the other ranks go through the
    /// segment (at their offsets in the area); this rank's own block is
    /// copied straight across (in place it is already there).
    pub fn alltoall(&self, ctx: &CollContext, send: Option<&[u8]>, recv: &mut [u8]) -> Result<()> {
        let p = self.p as usize;
        let n = recv.len();
        let b = n / p;
        let me = self.me as usize;
        let (s, k) = self.next();
        self.claim(ctx, s);
        let a = self.area(k, self.me) + DATA;
        let vector: &[u8] = send.unwrap_or(recv);
        for r in (0..p).filter(|&r| r != me) {
            self.seg.write(a + r * b, &vector[r * b..(r + 1) * b]);
        }
        if let Some(x) = send {
            recv[me * b..(me + 1) * b].copy_from_slice(&x[me * b..(me + 1) * b]);
        }
        self.seg
            .atomic(a - DATA + 8)
            .store(n as u64, Ordering::Relaxed);
        self.flag(k, self.me).store(s, Ordering::Release);
        self.wait_all(ctx, k, s);
        let r = (0..self.p).filter(|&r| r != self.me).try_for_each(|r| {
            self.expect_len(k, r, n)?;
            let i = r as usize;
            recv[i * b..(i + 1) * b].copy_from_slice(&self.data(k, r, n)[me * b..(me + 1) * b]);
            Ok(())
        });
        self.finish(s);
        r
    }
}
