//! `sm`: small blocking collectives through a shared-memory segment of the
//! communicator's ranks (all on one node), in one step each: every rank
//! that contributes data copies it into its own area of the segment and
//! raises its flag; every rank that needs data waits for the flags it
//! needs and reads the areas. No messages, no matching, no tags.
//!
//! Covered (blocking, data of at most `coll_sm_max` bytes, 8 KiB on 2
//! ranks; the alltoall limit is on the whole send vector): barrier, bcast,
//! reduce, allreduce, allgather, alltoall; from 3 ranks also bcast of any
//! size (pipelined in `coll_sm_max` chunks) and allreduce of any size with
//! an op that commutes (per chunk, each rank folds its share of the
//! elements and the shares are gathered). Allgather and alltoall above the
//! limit read every block straight from the other ranks' memory
//! (`process_vm_readv`, [`Node::single_copy`]). Everything else, every
//! non-blocking collective and larger calls go to the next provider
//! (tuned): the module's schedules are its underlying module's, and so
//! are its direct limits.
//!
//! Protocol (per communicator and ring; `s` = the op's number in its
//! ring, the same on every rank because MPI makes every rank call the
//! same collectives in the same order, and the size decision depends only
//! on what every rank passes):
//! - the segment has three rings of slots (128 small ones for barrier and
//!   data up to [`SMALL_DATA`] bytes, [`STREAM_SLOTS`] packed ones for
//!   bcast and reduce up to [`STREAM_DATA`] bytes, [`SLOTS`] of
//!   `coll_sm_max` bytes), each slot one area per rank (flag, length,
//!   data), each ring one `done` word per rank; op `s` uses slot
//!   `s % slots`;
//! - a rank writes its area of the slot for op `s` only once every rank's
//!   `done` is at least `s - slots` (nobody still reads what op
//!   `s - slots` left there), then stores its flag `= s` (release; the
//!   flag's low `CALL_BITS` bits carry the number of the rank's
//!   collective call, which a reader checks);
//! - a reader waits for the flag to reach `s` (acquire), reads, and
//!   stores its own `done = s` (release) at the end of the op.
//!
//! Flags only grow, so a barrier (flag without data) never needs to wait
//! for its slot. Reductions combine in rank order, right to left
//! (`x0 op (x1 op (... op x_{p-1}))`), identical on every rank
//! (allreduce) and correct for non-commutative ops.
//!
//! The segment is attached on the first call of a kind sm won, whatever its
//! size (collectively, by `CollComm`): rank 0 creates it, tells the others its
//! name over the next provider's bcast, and everyone agrees (allreduce)
//! before using it; when any rank fails, every rank keeps the component out
//! of that communicator.
//!
//! Calls that differ across ranks (an erroneous program) may put ranks on
//! different rings, or some on the segment and some on messages, where
//! they would wait for each other forever. So every call is announced in
//! the rank's call line ([`Node::announce`]), every op's flag
//! carries its call's number, and a rank that reads an op of another call,
//! or that waited long and finds evidence in the call line of the rank it
//! waits for, fails and marks the segment broken (docs/coll.md, "Calls
//! that take different paths").

mod calls;

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use tmpi_base::component::{Availability, ComponentDescriptor};
use tmpi_base::mca::{Level, McaError, ParamSpec, Registry};
use tmpi_smsc::huge::HugeSources;

use crate::algo::{Call, CollKind, Pos};
use crate::coll_comm::CollContext;
use crate::cost_choice::{CostChoice, Way};
use crate::datatype::Datatype;
use crate::framework::{CollComponent, CollModule, CommShape, Underlying};
use crate::op::Op;
use crate::schedule::Schedule;
use crate::shm::Segment;
use crate::{CollError, Result};

use calls::{CALL_BITS, CALL_MASK, CHECK_POLLS};

/// Default priority: above tuned (30), below self (75).
pub const PRIORITY: i64 = 40;

/// Default `coll_sm_max`.
pub const MAX_DEFAULT: u64 = 64 * 1024;

/// Upper bound of `coll_sm_max` (per rank and slot: the segment is
/// `SLOTS` x ranks x this).
pub const MAX_CAP: u64 = 1 << 20;

/// Slots of the large ring (calls above [`SMALL_DATA`] bytes in flight
/// before a fast rank waits for the slowest).
pub const SLOTS: u64 = 8;

/// Largest large ring (bytes): `coll_sm_max` shrinks on communicators
/// where [`SLOTS`] x ranks x it would exceed this (64 KiB up to 32 ranks).
pub const SEGMENT_BUDGET: usize = 16 << 20;

/// Largest call through the segment on 2 ranks: above it the pml's
/// single-copy rendezvous (one copy, no step to save) is as fast or faster
/// than copying in and out, and much faster when the host's two cores are
/// far apart. From 3 ranks the segment's one step wins at 64 KiB
/// (docs/coll.md "Why these limits"; figures in docs/journal/).
pub const PAIR_COPY_MAX: usize = 8 * 1024;

/// Default of `coll_sm_splice_max_ranks`: single copy through pipes pays
/// at 2 ranks; at 4 and 8 ranks on a 2-core host, where the ranks' copies
/// share the cores, it was within the noise or slower (docs/coll.md "Spliced single copy"): to be
/// measured with a core per rank before it goes further.
pub const SPLICE_MAX_RANKS: i64 = 2;

/// Default of `coll_sm_huge_after`: a source's whole 2 MiB ranges go onto
/// huge pages the fourth time a call publishes them. Collapsing copies the
/// range once, and every later read of the range saves the readers the
/// pinning of 511 small pages per 2 MiB: a buffer used a few times is
/// never touched, one used in a loop pays back within a few calls (docs/coll.md "Huge pages
/// under reused sources").
pub const HUGE_AFTER: i64 = 4;

/// Capacity of an idle pipe of single copy: one page. Every pipe's
/// capacity counts against the user's pipe budget (64 MiB for all the
/// user's processes by default; past it every new pipe of the user, ours
/// or not, gets two pages), so pipes grow only for the call that uses them.
const PIPE_IDLE: usize = 4096;

/// Largest capacity a pipe grows to (the default
/// `/proc/sys/fs/pipe-max-size`); the rest of a larger block goes by
/// `process_vm_readv`.
const PIPE_MAX: usize = 1 << 20;

/// Smallest part of a block that goes through a pipe: growing the pipe
/// and shrinking it back costs a fixed amount per call, a small part of
/// what splicing saves from this size on.
const SPLICE_MIN: usize = 128 * 1024;

/// Per communicator with pipes: whether this rank, as a reader, wants its
/// blocks spliced, from what each way has cost it lately, and what each
/// other rank last said it wants. Splicing is not always the cheaper way:
/// with the host's two cores far apart every page reference the sender
/// takes and the reader drops crosses between them, and pages never
/// written (the kernel's zero page) take `vmsplice`'s slow path. The costs
/// ([`CostChoice`]: pipes first, the first figure of each way dropped
/// since the first call through pipes pays for growing them and for cold
/// pages) are, for pipes, this rank's own `vmsplice` plus
/// its pipe reads (the exchange is symmetric), for `process_vm_readv` its
/// reads of parts of at least [`SPLICE_MIN`]. A reader publishes its wish
/// in its own word of the exchange's op (the `sent` word at its own
/// index, which no pipe uses); a sender follows what each reader said in
/// the previous call.
#[derive(Debug)]
struct SpliceChoice {
    ways: CostChoice,
    /// Indexed by rank: that rank wants blocks spliced to it.
    peer_wants: Vec<AtomicBool>,
    /// Testing (`coll_sm_splice_cost_test`): pipe costs read this many
    /// times what they measured; 0 = as measured.
    pipe_factor: u32,
}

impl SpliceChoice {
    fn new(p: u32, pipe_factor: u32) -> Self {
        SpliceChoice {
            ways: CostChoice::default(),
            peer_wants: (0..p).map(|_| AtomicBool::new(true)).collect(),
            pipe_factor,
        }
    }

    /// This call's wish as a reader (for the next call): whether blocks
    /// should come through pipes.
    fn wish(&self) -> bool {
        let (way, changed) = self.ways.pick();
        if let Some(cheaper) = changed {
            tracing::debug!(
                target: "coll_sm",
                "single copy to this rank now {} (pipes {:.0} ns/KiB, process_vm_readv {:.0})",
                if cheaper == Way::First { "through pipes" } else { "by process_vm_readv" },
                self.ways.cost(Way::First).unwrap_or(0.0),
                self.ways.cost(Way::Second).unwrap_or(0.0),
            );
        }
        way == Way::First
    }

    /// Records a pipe-way sample: this rank's splicing and reading.
    fn pipe_sample(&self, splice: (f64, usize), read: (f64, usize)) {
        if splice.1 == 0 || read.1 == 0 {
            return;
        }
        let f = if self.pipe_factor > 0 {
            f64::from(self.pipe_factor)
        } else {
            1.0
        };
        let per_kib = (splice.0 / splice.1 as f64 + read.0 / read.1 as f64) * 1024.0 * f;
        self.ways.sample(Way::First, per_kib, 1024);
    }

    /// Records a `process_vm_readv` sample.
    fn cma_sample(&self, read: (f64, usize)) {
        self.ways.sample(Way::Second, read.0, read.1);
    }
}

/// Single copy's pipes, indexed by rank (`None` at this rank's index):
/// `to[r]` the write end of this rank's pipe to `r`, `from[r]` the read
/// end of `r`'s pipe to this rank, taken from `r`'s fd table.
#[derive(Debug)]
struct Pipes {
    to: Vec<Option<std::os::fd::OwnedFd>>,
    from: Vec<Option<std::os::fd::OwnedFd>>,
}

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
            "Largest blocking bcast/reduce/allreduce/allgather (block) /alltoall (whole send \
             vector) in bytes that goes through the communicator's shared-memory segment \
             (on 2 ranks at most 8 KiB); the segment takes about 8 x ranks x this bytes \
             of /dev/shm, at most 16 MiB (the limit shrinks on large communicators); 0 = \
             sm takes no communicator",
        )
        .level(Level::TunerAll)
}

fn single_copy_spec() -> ParamSpec {
    ParamSpec::new("coll", "sm", "single_copy")
        .help(
            "Blocking allgather (block) and alltoall (whole send vector) above coll_sm_max \
             read every block straight from the other ranks' buffers with one \
             process_vm_readv each (cross-memory attach) instead of going over messages; \
             probed once per communicator, messages when it fails",
        )
        .level(Level::TunerAll)
}

fn splice_spec() -> ParamSpec {
    ParamSpec::new("coll", "sm", "splice_max_ranks")
        .help(
            "On communicators of 2 up to this many ranks (default 2), single copy (coll_sm_single_copy) \
             moves each block through a pipe per pair of ranks instead: the sender \
             vmsplices it (page references, no copy) and the receiver reads it out, about \
             three quarters of process_vm_readv's cost; parts under 128 KiB and the part \
             of a block beyond 1 MiB go by process_vm_readv. Set up once per communicator with the \
             single-copy probe (pidfd_getfd), process_vm_readv alone when that fails; \
             0 = never",
        )
        .level(Level::TunerAll)
}

fn huge_after_spec() -> ParamSpec {
    ParamSpec::new("coll", "sm", "huge_after")
        .help(
            "Single copy (coll_sm_single_copy): once a rank's source has covered the same whole \
             2 MiB ranges in this many calls, those ranges are put on transparent huge pages \
             (madvise MADV_COLLAPSE, once each; contents unchanged, only ranges whose pages \
             are all in memory), so the other ranks' process_vm_readv pins one page per \
             2 MiB instead of 512; 0 = never",
        )
        .level(Level::TunerAll)
}

fn splice_cost_test_spec() -> ParamSpec {
    ParamSpec::new("coll", "sm", "splice_cost_test")
        .help(
            "Testing only: single copy through pipes counts its measured cost this many \
             times (a rank then asks for process_vm_readv instead, but for a sample every \
             16 calls); 0 = as measured",
        )
        .level(Level::DevAll)
}

fn probe_fail_spec() -> ParamSpec {
    ParamSpec::new("coll", "sm", "single_copy_fail_test")
        .help(
            "Testing only: the communicator rank whose single-copy probe reports a failed \
             read (every rank must then keep those calls on messages); -1 = none",
        )
        .level(Level::DevAll)
}

fn register_params(reg: &Registry) -> Result<(), McaError> {
    reg.register_priority("coll", "sm", PRIORITY)?;
    reg.register_size(max_spec(), MAX_DEFAULT)?;
    reg.register_bool(single_copy_spec(), true)?;
    reg.register_int(probe_fail_spec(), -1)?;
    reg.register_int(splice_spec(), SPLICE_MAX_RANKS)?;
    reg.register_int(huge_after_spec(), HUGE_AFTER)?;
    reg.register_int(splice_cost_test_spec(), 0)?;
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
    single_copy: bool,
    probe_fail: i64,
    splice_max_ranks: i64,
    splice_cost_test: u32,
    /// Reused sources onto huge pages (`coll_sm_huge_after`), for every
    /// communicator of this process: the same buffer serves many.
    huge: Arc<HugeSources>,
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
        let single_copy = reg.register_bool(single_copy_spec(), true)?.value();
        let probe_fail = reg.register_int(probe_fail_spec(), -1)?.value();
        let splice_max_ranks = reg.register_int(splice_spec(), SPLICE_MAX_RANKS)?.value();
        let huge_after = reg.register_int(huge_after_spec(), HUGE_AFTER)?.value();
        let splice_cost_test = reg.register_int(splice_cost_test_spec(), 0)?.value();
        let splice_cost_test = u32::try_from(splice_cost_test.max(0)).unwrap_or(u32::MAX);
        let huge_after = u32::try_from(huge_after.max(0)).unwrap_or(u32::MAX);
        Ok(Sm {
            priority,
            max,
            single_copy,
            probe_fail,
            splice_max_ranks,
            splice_cost_test,
            huge: Arc::new(HugeSources::new(huge_after, "coll_sm")),
        })
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
        let budget = SEGMENT_BUDGET / (SLOTS as usize * shape.size() as usize);
        let mut max = self.max.min(budget / LINE * LINE);
        if shape.size() == 2 {
            max = max.min(PAIR_COPY_MAX);
        }
        if max == 0 {
            // More than 16 Ki ranks: no room for the large ring.
            return Ok(None);
        }
        let module = SmModule {
            node: Arc::new(NodeColl {
                max,
                single_copy: self.single_copy,
                probe_fail: self.probe_fail == i64::from(shape.rank),
                // (its probe publishes 16 + 8 x size bytes in a small slot)
                splice: i64::from(shape.size()) <= self.splice_max_ranks
                    && 16 + 8 * shape.size() as usize <= SMALL_DATA,
                size: shape.size(),
                rank: shape.rank,
                world: Arc::clone(&shape.world),
                splice_cost_test: self.splice_cost_test,
                huge: Arc::clone(&self.huge),
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

/// The collectives sm provides (their blocking calls within its limits
/// go through the segment).
pub const KINDS: [CollKind; 6] = [
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

    fn passes_messages_down(&self) -> bool {
        true
    }
}

/// The path of a new segment: `/dev/shm/tmpi-coll.<pid>.<job id>.<n>`
/// under a launcher that names the job (`TMPI_JOB_ID`, set by `tmpirun`),
/// so that the job's clean-up finds it when the job ends before every rank
/// attached it (rank 0 unlinks it only then); `/dev/shm/tmpi-coll.<pid>.<n>`
/// otherwise. A job id with characters other than `[A-Za-z0-9_-]` or longer
/// than 64 is not used. The pid comes first in both forms, so that
/// [`tmpi_base::shm_sweep::sweep_dead_creators`] finds either.
fn segment_path(pid: u32, job: Option<&str>, n: u64) -> String {
    match job {
        Some(j)
            if !j.is_empty()
                && j.len() <= 64
                && j.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_') =>
        {
            format!("/dev/shm/tmpi-coll.{pid}.{j}.{n}")
        }
        _ => format!("/dev/shm/tmpi-coll.{pid}.{n}"),
    }
}

/// One communicator's shared-memory state: the limit and, once attached,
/// the segment.
#[derive(Debug)]
pub struct NodeColl {
    max: usize,
    single_copy: bool,
    /// `coll_sm_single_copy_fail_test` names this rank.
    probe_fail: bool,
    /// Single copy through pipes (`coll_sm_splice_max_ranks`).
    splice: bool,
    size: u32,
    rank: u32,
    /// World rank of every member (asking the pml whether one finalized).
    world: Arc<[u32]>,
    /// `coll_sm_splice_cost_test`.
    splice_cost_test: u32,
    /// The component's reused-source tracker (`coll_sm_huge_after`).
    huge: Arc<HugeSources>,
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
            // From 3 ranks bcast of any size, pipelined in chunks. Alltoall
            // is not pipelined: in pieces through the segment it lost to
            // the messages when the host's cores are far apart, by far more
            // than it won with them close.
            // From 3 ranks also allreduce above the limit, in chunks (only
            // for ops that commute: `CollComm::allreduce` checks).
            CollKind::Bcast | CollKind::Allreduce if self.size > 2 => Some(usize::MAX),
            // Above the limit by single copy (`Node::single_copy`).
            CollKind::Allgather | CollKind::Alltoall if self.single_copy => Some(usize::MAX),
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
        Node::rings(self.size, self.max).3
    }

    /// Rank 0's part of attaching: creates the segment at a fresh path.
    pub fn create(&self) -> std::result::Result<(Node, String), String> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        static SWEEP: std::sync::Once = std::sync::Once::new();
        SWEEP.call_once(|| {
            for name in tmpi_base::shm_sweep::sweep_dead_creators("tmpi-coll.") {
                tracing::info!(target: "coll_sm", segment = %name, "removed the stale segment of a dead process");
            }
        });
        let path = segment_path(
            std::process::id(),
            std::env::var("TMPI_JOB_ID").ok().as_deref(),
            NEXT.fetch_add(1, Ordering::Relaxed),
        );
        let seg = Segment::create(Path::new(&path), self.bytes())
            .map_err(|e| format!("create {path}: {e}"))?;
        let node = Node::new(seg, self);
        node.seg
            .atomic(8)
            .store(u64::from(self.size), Ordering::Relaxed);
        node.seg
            .atomic(16)
            .store(self.max as u64, Ordering::Relaxed);
        node.seg
            .atomic(24)
            .store(self.copy_word(), Ordering::Relaxed);
        node.seg.atomic(0).store(MAGIC, Ordering::Release);
        Ok((node, path))
    }

    /// The single-copy settings as the header holds them: bit 0
    /// `coll_sm_single_copy`, bit 1 through pipes.
    fn copy_word(&self) -> u64 {
        u64::from(self.single_copy) | (u64::from(self.splice) << 1)
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
            && seg.atomic(16).load(Ordering::Relaxed) == self.max as u64
            && seg.atomic(24).load(Ordering::Relaxed) == self.copy_word();
        if !ok {
            return Err(format!(
                "{path}: header does not match this communicator (coll_sm_max, \
                 coll_sm_single_copy and coll_sm_splice_max_ranks must be the same on \
                 every rank)"
            ));
        }
        Ok(Node::new(seg, self))
    }

    /// Records the outcome of attaching (the same on every rank).
    pub fn set(&self, node: Option<Node>) -> Option<&Node> {
        let _ = self.state.set(node);
        self.state.get().and_then(Option::as_ref)
    }
}

/// One ring of slots: `slots` slots of one area per rank, `stride` bytes
/// each, and a `done` word per rank.
#[derive(Debug)]
struct Ring {
    slots: u64,
    stride: usize,
    /// Areas laid out rank by rank (rank `r`'s area of slot `k` at
    /// `(r * slots + k) * stride`), else slot by slot (`(k * p + r) * stride`).
    by_rank: bool,
    base: usize,
    done: usize,
    /// Ops of this ring started by this rank.
    seq: AtomicU64,
    /// Smallest `done` of all ranks as last read.
    min_done: AtomicU64,
}

impl Ring {
    /// A ring whose areas start on their own cache-line pair, slot by
    /// slot (every rank's area of one slot side by side).
    fn new(slots: u64, data: usize, done: usize, base: usize) -> Ring {
        Ring::laid_out(
            slots,
            (DATA + data).div_ceil(LINE) * LINE,
            false,
            done,
            base,
        )
    }

    /// A ring of [`STREAM_AREA`]-byte areas laid out rank by rank: one
    /// rank's areas of consecutive slots share cache lines.
    fn packed(slots: u64, done: usize, base: usize) -> Ring {
        Ring::laid_out(slots, STREAM_AREA, true, done, base)
    }

    fn laid_out(slots: u64, stride: usize, by_rank: bool, done: usize, base: usize) -> Ring {
        Ring {
            slots,
            stride,
            by_rank,
            base,
            done,
            seq: AtomicU64::new(0),
            min_done: AtomicU64::new(0),
        }
    }

    fn bytes(&self, p: u32) -> usize {
        self.slots as usize * p as usize * self.stride
    }
}

/// An attached segment and this rank's position in its protocol: a ring
/// of many small slots (data up to [`SMALL_DATA`] bytes, barrier) so that
/// a rank may run [`SMALL_SLOTS`] small calls ahead of the slowest one (a
/// bcast root or a reduce leaf need not wait for it), a stream ring of
/// [`STREAM_SLOTS`] packed slots for bcast and reduce up to
/// [`STREAM_DATA`] bytes, and a ring of [`SLOTS`] slots of `coll_sm_max`
/// bytes.
#[derive(Debug)]
pub struct Node {
    seg: Segment,
    p: u32,
    me: u32,
    /// World rank of every member.
    world: Arc<[u32]>,
    max: usize,
    stream: Ring,
    small: Ring,
    large: Ring,
    /// Whether single copy may be tried (`coll_sm_single_copy`).
    single_copy: bool,
    /// This rank's probe reports a failure (testing).
    probe_fail: bool,
    /// Whether the single-copy probe also sets up pipes.
    splice: bool,
    /// The pipes to and from every other rank when the probe set them up
    /// on every rank ([`Node::single_copy`]).
    pipes: OnceLock<Option<Pipes>>,
    /// Bytes this rank read out of pipes (diagnostics, tests).
    piped: AtomicU64,
    /// Pipes or `process_vm_readv`, per call (set up with the pipes).
    choice: OnceLock<SpliceChoice>,
    /// `coll_sm_splice_cost_test`.
    splice_cost_test: u32,
    /// Reused sources onto huge pages (`coll_sm_huge_after`).
    huge: Arc<HugeSources>,
    /// Every rank's pid when single copy works between all of them
    /// (probed on first use), `None` when not.
    cma: OnceLock<Option<Vec<u32>>>,
    /// Collective calls this rank announced (`Node::announce`).
    call: AtomicU64,
    /// Set while a wait may end by following another route
    /// ([`Node::wait_or_diverge`]).
    follow: AtomicBool,
    /// 1 + the other ranks' length of this call when their call took
    /// another ring than this rank's and this rank follows them
    /// ([`Node::wait_or_diverge`]); 0: none.
    diverged: AtomicU64,
}

/// The way a call goes ([`Node::route`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Route {
    Messages,
    Stream,
    Small,
    Large,
    SingleCopy,
}

/// Data bytes of a small slot (its area is 256 bytes).
pub const SMALL_DATA: usize = 256 - DATA;

/// Slots of the small ring.
pub const SMALL_SLOTS: u64 = 128;

/// Bytes of a stream-ring area: two per 64-byte cache line.
const STREAM_AREA: usize = 32;

/// Data bytes of a stream-ring area (bcast and reduce up to this size).
pub const STREAM_DATA: usize = STREAM_AREA - DATA;

/// Slots of the stream ring.
pub const STREAM_SLOTS: u64 = 512;

impl Node {
    /// The rings of a segment for `p` ranks and `max` bytes, and its size.
    fn rings(p: u32, max: usize) -> (Ring, Ring, Ring, usize) {
        let pu = p as usize;
        let small_done = LINE;
        let large_done = LINE * (1 + pu);
        let stream_done = LINE * (1 + 2 * pu);
        let stream = Ring::packed(STREAM_SLOTS, stream_done, Node::call_lines(p) + LINE * pu);
        let small_base = stream.base + stream.bytes(p);
        let small = Ring::new(SMALL_SLOTS, SMALL_DATA, small_done, small_base);
        let large_base = small.base + small.bytes(p);
        let large = Ring::new(SLOTS, max, large_done, large_base);
        let total = large.base + large.bytes(p);
        (stream, small, large, total)
    }

    /// Offset of the call lines, one per rank, after the `done` words
    /// (`Node::call_word`).
    fn call_lines(p: u32) -> usize {
        LINE * (1 + 3 * p as usize)
    }

    fn new(seg: Segment, nc: &NodeColl) -> Node {
        let (stream, small, large, _) = Node::rings(nc.size, nc.max);
        // Each rank's pid, for the others' waits (`Node::look_for_mismatch`).
        seg.atomic(Node::pid_word(nc.size, nc.rank))
            .store(u64::from(std::process::id()), Ordering::Release);
        Node {
            seg,
            p: nc.size,
            me: nc.rank,
            world: Arc::clone(&nc.world),
            max: nc.max,
            stream,
            small,
            large,
            single_copy: nc.single_copy,
            probe_fail: nc.probe_fail,
            splice: nc.splice,
            pipes: OnceLock::new(),
            piped: AtomicU64::new(0),
            choice: OnceLock::new(),
            splice_cost_test: nc.splice_cost_test,
            huge: Arc::clone(&nc.huge),
            cma: OnceLock::new(),
            call: AtomicU64::new(0),
            follow: AtomicBool::new(false),
            diverged: AtomicU64::new(0),
        }
    }

    /// Collectives this rank ran through the segment.
    pub fn calls(&self) -> u64 {
        self.stream.seq.load(Ordering::Relaxed)
            + self.small.seq.load(Ordering::Relaxed)
            + self.large.seq.load(Ordering::Relaxed)
    }

    /// Largest data per call.
    pub fn max(&self) -> usize {
        self.max
    }

    /// The ring of an op of `n` data bytes (per area); `stream`: an op of
    /// a stream of rooted calls ([`Node::begin_stream`]).
    fn ring_of(n: usize, stream: bool) -> Route {
        if stream && n <= STREAM_DATA {
            Route::Stream
        } else if n <= SMALL_DATA {
            Route::Small
        } else {
            Route::Large
        }
    }

    /// Starts the next op of `n` data bytes (per area): its ring and slot.
    fn begin(&self, n: usize) -> Step<'_> {
        self.begin_route(Node::ring_of(n, false))
    }

    fn begin_route(&self, route: Route) -> Step<'_> {
        self.begin_on(match route {
            Route::Stream => &self.stream,
            Route::Small => &self.small,
            _ => &self.large,
        })
    }

    /// [`Node::begin`] for a call of a stream of rooted calls (bcast,
    /// reduce): up to [`STREAM_DATA`] bytes on the stream ring, whose
    /// packed areas let a reader that runs behind the writer take two
    /// calls per cache-line transfer. Calls in which every rank waits for
    /// every other (barrier, allreduce, allgather) keep their areas on
    /// lines of their own: packed, a writer's next call pulls back the line
    /// the others are still reading (docs/coll.md "Stream ring").
    fn begin_stream(&self, n: usize) -> Step<'_> {
        self.begin_route(Node::ring_of(n, true))
    }

    fn begin_on<'a>(&'a self, ring: &'a Ring) -> Step<'a> {
        let s = ring.seq.load(Ordering::Relaxed) + 1;
        ring.seq.store(s, Ordering::Relaxed);
        Step {
            node: self,
            ring,
            s,
            k: (s % ring.slots) as usize,
        }
    }

    /// Spins until `pending` (the first rank this rank still waits for)
    /// is `None`, driving the pml and the process's outstanding
    /// non-blocking collectives every few polls (a peer may be waiting for
    /// them before it comes to this call) and yielding the core when
    /// neither had anything to do and ranks yield when idle. Every
    /// [`CHECK_POLLS`] polls it looks for evidence that the rank it waits
    /// for made another call ([`Node::look_for_mismatch`]): the error then,
    /// instead of waiting forever.
    fn wait(&self, ctx: &CollContext, mut pending: impl FnMut() -> Option<u32>) -> Result<()> {
        let mut polls = 0u32;
        while let Some(r) = pending() {
            polls = polls.wrapping_add(1);
            if polls.is_multiple_of(32) {
                if polls.is_multiple_of(CHECK_POLLS) {
                    self.look_for_mismatch(r, &mut pending)?;
                    self.look_for_finalized(ctx, r, &mut pending)?;
                }
                if !ctx.progress_all() {
                    ctx.p2p().idle();
                }
            }
        }
        Ok(())
    }

    /// `MPI_Barrier`: every rank raises its flag and waits for all flags.
    pub fn barrier(&self, ctx: &CollContext) -> Result<()> {
        let st = self.begin(0);
        st.raise_flag(st.area(self.me));
        st.wait_all(ctx)?;
        st.finish();
        Ok(())
    }

    /// `MPI_Bcast` of `buf` from `root`: one op up to [`Node::max`] bytes,
    /// above that the root's length in a small op, then a pipeline of
    /// `max`-byte chunks through the large ring (the root runs up to
    /// [`SLOTS`] chunks ahead of the slowest reader).
    pub fn bcast(&self, ctx: &CollContext, buf: &mut [u8], root: u32) -> Result<()> {
        if buf.len() <= self.max {
            return self.bcast_small(ctx, buf, root);
        }
        // The root's length first (a small op the root does not wait in):
        // a rank whose length differs follows the root's chunks without
        // copying, so no rank waits for chunks another never starts.
        let st = self.begin(8);
        let total = if self.me == root {
            st.claim(ctx)?;
            st.publish(&(buf.len() as u64).to_ne_bytes());
            buf.len()
        } else {
            if let Some(theirs) = self.wait_or_diverge(|| st.wait_flag(ctx, root))? {
                // The root's call went another route (a short vector on
                // the stream ring): follow it instead.
                st.undo(false);
                return self.bcast_follow(ctx, root, theirs, buf.len());
            }
            read_len(st.data(root, 8))
        };
        st.finish();
        if total != buf.len() {
            self.skip_chunks(ctx, root, total)?;
            return Err(CollError::Truncate {
                peer: root,
                got: total,
                expected: buf.len(),
            });
        }
        let mut r = Ok(());
        for chunk in buf.chunks_mut(self.max) {
            // After a length error keep the op sequence in step with the
            // other ranks, but do not copy any more.
            let one = self.bcast_one(ctx, chunk, root);
            if r.is_ok() {
                r = one;
            }
        }
        r
    }

    /// Follows the root's chunks of a bcast of `total` bytes (above
    /// [`Node::max`]) without copying: this rank's length differs.
    fn skip_chunks(&self, ctx: &CollContext, root: u32, total: usize) -> Result<()> {
        let mut left = total;
        while left > 0 {
            // The root's chunks go where `bcast_one` puts them: a last
            // chunk within the stream ring's areas goes there.
            let c = left.min(self.max);
            let st = self.begin_stream(c);
            st.wait_flag(ctx, root)?;
            st.finish();
            left -= c;
        }
        Ok(())
    }

    /// A bcast of up to [`Node::max`] bytes: one op. A non-root whose
    /// length sends it on another ring than the root's (the stream ring
    /// holds up to [`STREAM_DATA`] bytes, a root above the limit starts
    /// with its length on the small ring) finds the root's call described
    /// in its call line while it waits ([`Node::evidence`]) and follows the
    /// root's route instead, so the rings stay in step and only this call
    /// fails (`MPI_ERR_TRUNCATE`).
    fn bcast_small(&self, ctx: &CollContext, buf: &mut [u8], root: u32) -> Result<()> {
        if self.me == root {
            return self.bcast_one(ctx, buf, root);
        }
        let st = self.begin_stream(buf.len());
        if !st.flag_is_up(root) {
            // Only a wait can end on evidence of another route.
            if let Some(theirs) = self.wait_or_diverge(|| st.wait_flag(ctx, root))? {
                st.undo(false);
                return self.bcast_follow(ctx, root, theirs, buf.len());
            }
        }
        if st.len_of(root) != buf.len() {
            return self.bcast_other_len(ctx, st, root, buf.len());
        }
        buf.copy_from_slice(st.data(root, buf.len()));
        st.finish();
        Ok(())
    }

    /// A non-root's bcast op whose root published another length: a
    /// length op on the small ring starts a root's vector above the limit
    /// (a non-root's own bcast of 8 bytes goes on the stream ring, so this
    /// is never its data), whose chunks this rank follows; else the call's
    /// `MPI_ERR_TRUNCATE`.
    #[cold]
    fn bcast_other_len(
        &self,
        ctx: &CollContext,
        st: Step<'_>,
        root: u32,
        mine: usize,
    ) -> Result<()> {
        let got = st.len_of(root);
        if got == 8
            && st.ring.slots == SMALL_SLOTS
            && self.bytes_of_call(root).is_some_and(|b| b > self.max)
        {
            let total = read_len(st.data(root, 8));
            st.finish();
            self.skip_chunks(ctx, root, total)?;
            return Err(CollError::Truncate {
                peer: root,
                got: total,
                expected: mine,
            });
        }
        st.finish();
        Err(CollError::Truncate {
            peer: root,
            got,
            expected: mine,
        })
    }

    /// The rest of a bcast whose root took another route than this
    /// rank's length would (`theirs`: the root's call): its length op and
    /// chunks, or its one op, without copying; fails with
    /// `MPI_ERR_TRUNCATE`.
    #[cold]
    fn bcast_follow(&self, ctx: &CollContext, root: u32, theirs: usize, mine: usize) -> Result<()> {
        let got = if theirs > self.max {
            let st = self.begin(8);
            st.wait_flag(ctx, root)?;
            let total = read_len(st.data(root, 8));
            st.finish();
            self.skip_chunks(ctx, root, total)?;
            total
        } else {
            let st = self.begin_stream(theirs);
            st.wait_flag(ctx, root)?;
            let got = st.len_of(root);
            st.finish();
            got
        };
        Err(CollError::Truncate {
            peer: root,
            got,
            expected: mine,
        })
    }

    fn bcast_one(&self, ctx: &CollContext, buf: &mut [u8], root: u32) -> Result<()> {
        let st = self.begin_stream(buf.len());
        if self.me == root {
            st.claim(ctx)?;
            st.publish(buf);
            st.finish();
            return Ok(());
        }
        st.wait_flag(ctx, root)?;
        let r = st.expect_len(root, buf.len()).map(|()| {
            buf.copy_from_slice(st.data(root, buf.len()));
        });
        st.finish();
        r
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
        let n = own.map_or_else(|| recv.as_ref().map_or(0, |r| r.len()), <[u8]>::len);
        let st = self.begin_stream(n);
        st.claim(ctx)?;
        let r = match (own, recv) {
            (Some(x), recv) => {
                st.publish(x);
                match recv {
                    Some(out) if self.me == root => {
                        if let Some(theirs) = self.root_waits(ctx, &st)? {
                            st.undo(true);
                            return self.reduce_follow(ctx, theirs, n);
                        }
                        st.fold(out, dtype, op)
                    }
                    _ => Ok(()),
                }
            }
            (None, Some(out)) => {
                st.publish(out);
                if let Some(theirs) = self.root_waits(ctx, &st)? {
                    st.undo(true);
                    return self.reduce_follow(ctx, theirs, n);
                }
                st.fold(out, dtype, op)
            }
            (None, None) => Err(CollError::Buffer("reduce: no input".into())),
        };
        st.finish();
        r
    }

    /// The reduce root's wait for every rank's input; `Some(bytes)` when
    /// the other ranks' vectors (`bytes` each) took another ring than the
    /// root's ([`Node::evidence`]): the root then follows them
    /// ([`Node::reduce_follow`]).
    fn root_waits(&self, ctx: &CollContext, st: &Step<'_>) -> Result<Option<usize>> {
        if (0..self.p).all(|r| r == self.me || st.flag_is_up(r)) {
            return Ok(None);
        }
        self.wait_or_diverge(|| st.wait_all(ctx))
    }

    /// The rest of a reduce at a root whose length sent it on another ring
    /// than the other ranks' (`theirs`: their length): their op, without
    /// folding; fails with `MPI_ERR_TRUNCATE`.
    #[cold]
    fn reduce_follow(&self, ctx: &CollContext, theirs: usize, mine: usize) -> Result<()> {
        let st = self.begin_stream(theirs);
        st.wait_all(ctx)?;
        let peer = (0..self.p).find(|&r| r != self.me).unwrap_or(0);
        let got = st.len_of(peer);
        st.finish();
        Err(CollError::Truncate {
            peer,
            got,
            expected: mine,
        })
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
        if recv.len() > self.max {
            return self.allreduce_chunked(ctx, own, recv, dtype, op);
        }
        let st = self.begin(recv.len());
        st.claim(ctx)?;
        st.publish(own.unwrap_or(recv));
        st.wait_all(ctx)?;
        let r = st.fold(recv, dtype, op);
        st.finish();
        r
    }

    /// Allreduce of a vector above [`Node::max`] (from 3 ranks, ops that
    /// commute: shares split the elements): after one small op comparing
    /// the ranks' lengths, per chunk
    /// of at most `max` bytes (whole elements), two ops. In the first every
    /// rank publishes its chunk and folds its own share (1/p of the
    /// elements) of all p chunks, in rank order; in the second it publishes
    /// that share and copies everyone's shares out. Each rank reads the
    /// vector about twice instead of p times (the flat fold), in 2 steps per
    /// chunk instead of 2(p-1) message rounds.
    fn allreduce_chunked(
        &self,
        ctx: &CollContext,
        own: Option<&[u8]>,
        recv: &mut [u8],
        dtype: Datatype,
        op: &Op,
    ) -> Result<()> {
        // Every rank's length first (one small op): on a mismatch every
        // rank sees it and returns before any chunk, so none waits for
        // chunks another never starts.
        let st = self.begin(8);
        st.claim(ctx)?;
        st.publish(&(recv.len() as u64).to_ne_bytes());
        st.wait_all(ctx)?;
        let differs = (0..self.p)
            .filter(|&r| r != self.me)
            .map(|r| (r, read_len(st.data(r, 8))))
            .find(|&(_, n)| n != recv.len());
        st.finish();
        if let Some((peer, got)) = differs {
            return Err(CollError::Truncate {
                peer,
                got,
                expected: recv.len(),
            });
        }
        let e = dtype.size().max(1);
        let chunk = (self.max / e).max(1) * e;
        let p = self.p as usize;
        let share = |c: usize, r: usize| {
            let m = c / e;
            (r * m / p * e, (r + 1) * m / p * e)
        };
        let chunks: Vec<(usize, usize)> = (0..recv.len())
            .step_by(chunk)
            .map(|off| (off, chunk.min(recv.len() - off)))
            .collect();
        let me = self.me as usize;
        let mut res = Ok(());
        // Batches of SLOTS / 2 chunks: all their first ops are published
        // before this rank waits for any, then all their second ops, so a
        // rank that finds a peer behind waits once per batch, not per chunk
        // (with more ranks than cores every such wait is a trip through the
        // scheduler). After a length error keep the op sequence in step
        // with the other ranks, but do not fold or copy any more.
        for batch in chunks.chunks(SLOTS as usize / 2) {
            // Op one: chunks in, this rank's share folded into `recv`.
            let steps = batch
                .iter()
                .map(|&(off, c)| {
                    let st = self.begin(c);
                    st.claim(ctx)?;
                    st.publish(&own.unwrap_or(recv)[off..off + c]);
                    Ok(st)
                })
                .collect::<Result<Vec<Step<'_>>>>()?;
            for (st, &(off, c)) in steps.into_iter().zip(batch) {
                let (lo, hi) = share(c, me);
                st.wait_all(ctx)?;
                if res.is_ok() {
                    res = st.fold_range(&mut recv[off + lo..off + hi], lo, c, dtype, op);
                }
                st.finish();
            }
            // Op two: shares out. Its ring is chosen by the chunk length,
            // the same on every rank (the shares may differ by one element).
            let steps = batch
                .iter()
                .map(|&(off, c)| {
                    let (lo, hi) = share(c, me);
                    let st = self.begin(c);
                    st.claim(ctx)?;
                    st.publish(&recv[off + lo..off + hi]);
                    Ok(st)
                })
                .collect::<Result<Vec<Step<'_>>>>()?;
            for (st, &(off, c)) in steps.into_iter().zip(batch) {
                st.wait_all(ctx)?;
                if res.is_ok() {
                    res = (0..self.p).filter(|&r| r != self.me).try_for_each(|r| {
                        let (a, b) = share(c, r as usize);
                        st.expect_len(r, b - a)?;
                        recv[off + a..off + b].copy_from_slice(st.data(r, b - a));
                        Ok(())
                    });
                }
                st.finish();
            }
        }
        res
    }

    /// `MPI_Allgather` of one block each into `recv` (p blocks); `own`
    /// `None`: in place (this rank's block is already in `recv`).
    pub fn allgather(&self, ctx: &CollContext, own: Option<&[u8]>, recv: &mut [u8]) -> Result<()> {
        let p = self.p as usize;
        let b = recv.len() / p;
        let me = self.me as usize;
        let st = self.begin(b);
        st.claim(ctx)?;
        match own {
            Some(x) => {
                st.publish(x);
                recv[me * b..(me + 1) * b].copy_from_slice(x);
            }
            None => st.publish(&recv[me * b..(me + 1) * b]),
        }
        st.wait_all(ctx)?;
        let r = (0..self.p).filter(|&r| r != self.me).try_for_each(|r| {
            st.expect_len(r, b)?;
            let i = r as usize;
            recv[i * b..(i + 1) * b].copy_from_slice(st.data(r, b));
            Ok(())
        });
        st.finish();
        r
    }

    /// `MPI_Alltoall`: `send` p blocks (`None`: in place, they are in
    /// `recv`), block `r` of every rank's vector lands in `recv`'s block
    /// of that rank; the vector is at most [`Node::max`] bytes. Only the
    /// blocks for the other ranks go through the segment (at their offsets
    /// in the area); this rank's own block is copied straight across (in
    /// place it is already there).
    pub fn alltoall(&self, ctx: &CollContext, send: Option<&[u8]>, recv: &mut [u8]) -> Result<()> {
        let p = self.p as usize;
        let n = recv.len();
        let b = n / p;
        let me = self.me as usize;
        let st = self.begin(n);
        st.claim(ctx)?;
        let a = st.area(self.me);
        let vector: &[u8] = send.unwrap_or(recv);
        for r in (0..p).filter(|&r| r != me) {
            self.seg
                .write(a + DATA + r * b, &vector[r * b..(r + 1) * b]);
        }
        if let Some(x) = send {
            recv[me * b..(me + 1) * b].copy_from_slice(&x[me * b..(me + 1) * b]);
        }
        st.raise(a, n);
        st.wait_all(ctx)?;
        let r = (0..self.p).filter(|&r| r != self.me).try_for_each(|r| {
            st.expect_len(r, n)?;
            let i = r as usize;
            recv[i * b..(i + 1) * b].copy_from_slice(&st.data(r, n)[me * b..(me + 1) * b]);
            Ok(())
        });
        st.finish();
        r
    }
}

/// Whether call number `a` comes before `b` (both modulo 2^[`CALL_BITS`],
/// less than half that apart).
fn before(a: u64, b: u64) -> bool {
    let d = b.wrapping_sub(a) & CALL_MASK;
    d != 0 && d < 1 << (CALL_BITS - 1)
}

/// A length (or address, pid) published as 8 bytes.
fn read_len(d: &[u8]) -> usize {
    u64::from_ne_bytes(d.try_into().unwrap_or([0xff; 8])) as usize
}

/// Two words published in one small op (pid and address, address and
/// length).
fn two_words(a: u64, b: u64) -> [u8; 16] {
    let mut d = [0u8; 16];
    d[..8].copy_from_slice(&a.to_ne_bytes());
    d[8..].copy_from_slice(&b.to_ne_bytes());
    d
}

/// The words of [`two_words`].
fn read_two_words(d: &[u8]) -> (u64, u64) {
    (read_len(&d[..8]) as u64, read_len(&d[8..16]) as u64)
}

impl Node {
    /// Every rank's pid when blocks may be read straight from the other
    /// ranks' memory with cross-memory attach (`process_vm_readv`), `None`
    /// when not (`coll_sm_single_copy` off, or some rank could not read
    /// some other). Decided on the first call that asks (a collective step
    /// of every rank, two small ops): every rank publishes its pid and the
    /// address of the single-copy probe word (`tmpi_smsc::cma::probe_addr`),
    /// reads that word from every other rank (`cma::probe`), then
    /// publishes whether all reads gave the right value; single copy is
    /// used only when every rank says so.
    ///
    /// Fails only when the ranks' calls differ (`Node::wait`); the probe
    /// runs again on the next call then (which fails as well: the segment
    /// is marked broken).
    pub fn single_copy(&self, ctx: &CollContext) -> Result<Option<&[u32]>> {
        if !self.single_copy {
            return Ok(None);
        }
        if self.cma.get().is_none() {
            let pids = self.probe_cma(ctx)?;
            let _ = self.cma.set(pids);
        }
        Ok(self.cma.get().and_then(Option::as_deref))
    }

    /// The outcome of the single-copy probe, `None` before it ran.
    pub fn single_copy_state(&self) -> Option<bool> {
        self.cma.get().map(Option::is_some)
    }

    /// Whether single copy goes through pipes, `None` before the probe.
    pub fn single_copy_piped(&self) -> Option<bool> {
        self.pipes.get().map(Option::is_some)
    }

    /// Huge-page ranges the component collapsed (`coll_sm_huge_after`).
    pub fn huge_ranges(&self) -> u64 {
        self.huge.collapsed()
    }

    /// Bytes this rank received through pipes.
    pub fn piped_bytes(&self) -> u64 {
        self.piped.load(Ordering::Relaxed)
    }

    #[cold]
    fn probe_cma(&self, ctx: &CollContext) -> Result<Option<Vec<u32>>> {
        use std::os::fd::AsRawFd;
        tmpi_smsc::cma::allow_ptracer_any();
        let p = self.p as usize;
        // With pipes: one to every other rank, its read end's number
        // published in the rank's word (u64::MAX: none).
        let mine: Vec<Option<tmpi_smsc::splice::Pipe>> = (0..self.p)
            .map(|r| {
                if !self.splice || r == self.me {
                    return None;
                }
                tmpi_smsc::splice::Pipe::new(PIPE_IDLE)
                    .inspect_err(|e| {
                        tracing::info!(target: "coll_sm", "pipe to rank {r}: {e}");
                    })
                    .ok()
            })
            .collect();
        let mut hello =
            two_words(u64::from(std::process::id()), tmpi_smsc::cma::probe_addr()).to_vec();
        if self.splice {
            for pipe in &mine {
                let fd = pipe
                    .as_ref()
                    .map_or(u64::MAX, |x| x.read.as_raw_fd() as u64);
                hello.extend_from_slice(&fd.to_ne_bytes());
            }
        }
        let st = self.begin(hello.len());
        st.claim(ctx)?;
        st.publish(&hello);
        st.wait_all(ctx)?;
        let mut pids = vec![std::process::id(); p];
        let mut ok = !self.probe_fail;
        let mut piped = self.splice && mine.iter().filter(|x| x.is_some()).count() == p - 1;
        let mut from: Vec<Option<std::os::fd::OwnedFd>> = (0..p).map(|_| None).collect();
        for r in (0..self.p).filter(|&r| r != self.me) {
            let d = st.data(r, hello.len());
            let (pid, addr) = read_two_words(d);
            let pid = pid as u32;
            pids[r as usize] = pid;
            if let Err(e) = tmpi_smsc::cma::probe(pid, addr) {
                tracing::info!(target: "coll_sm", "single copy from rank {r} (pid {pid}) fails: {e}");
                ok = false;
            }
            if piped {
                let at = 16 + 8 * self.me as usize;
                let fd = read_len(&d[at..at + 8]) as u64;
                let taken = i32::try_from(fd)
                    .map_err(|_| std::io::Error::other("no pipe"))
                    .and_then(|fd| tmpi_smsc::splice::take_fd(pid, fd));
                match taken {
                    Ok(fd) => from[r as usize] = Some(fd),
                    Err(e) => {
                        tracing::info!(target: "coll_sm", "pipe from rank {r} (pid {pid}): {e}");
                        piped = false;
                    }
                }
            }
        }
        st.finish();
        // Bit 0: every read worked; bit 1: every pipe is in place.
        let st = self.begin(1);
        st.claim(ctx)?;
        st.publish(&[u8::from(ok) | (u8::from(ok && piped) << 1)]);
        st.wait_all(ctx)?;
        let others = || (0..self.p).filter(|&r| r != self.me);
        let all = ok && others().all(|r| st.data(r, 1)[0] & 1 == 1);
        let all_piped = all && piped && others().all(|r| st.data(r, 1)[0] & 2 == 2);
        st.finish();
        // Every rank took its read ends before it published: this rank's
        // copies close with `mine`.
        if all_piped {
            let to = mine.into_iter().map(|x| x.map(|x| x.write)).collect();
            let _ = self.pipes.set(Some(Pipes { to, from }));
            let _ = self
                .choice
                .set(SpliceChoice::new(self.p, self.splice_cost_test));
        } else {
            let _ = self.pipes.set(None);
        }
        tracing::debug!(
            target: "coll_sm",
            "single copy {}",
            match (all, all_piped) {
                (true, true) => "through pipes",
                (true, false) => "on",
                _ => "off",
            }
        );
        Ok(all.then_some(pids))
    }

    /// One exchange by single copy: this rank publishes where its source
    /// is (`src` address, `len` bytes), and for every other rank `r` reads
    /// `want(r)` = (offset in `r`'s source, length) straight from `r`'s
    /// memory into `place(r)` of `recv`; then it waits until every rank has
    /// read its source, which may be reused once this returns. With pipes
    /// ([`Node::single_copy`]) this rank first splices `give(r)` = (offset
    /// in its source, length) of its source into its pipe to each `r`, as
    /// much as the pipe holds, and publishes how much; a reader takes that
    /// from the pipe and the rest of its block from memory. A reader drains
    /// what was spliced for it even when it cannot use it (a length
    /// mismatch), so the pipe stays in step for the next call.
    /// `user_source`: the source is the caller's buffer (counted for huge
    /// pages, `coll_sm_huge_after`), not a copy made for this call.
    #[allow(clippy::too_many_arguments)]
    fn exchange_cma(
        &self,
        ctx: &CollContext,
        pids: &[u32],
        (src, src_len): (u64, usize),
        user_source: bool,
        recv: &mut [u8],
        give: impl Fn(u32) -> (usize, usize),
        want: impl Fn(u32) -> (usize, usize),
        place: impl Fn(u32) -> usize,
    ) -> Result<()> {
        let pipes = self.pipes.get().and_then(Option::as_ref);
        // Before any peer can read it (nothing of it is pinned now); not a
        // copy made for this call alone.
        if user_source {
            self.huge.note(src as usize, src_len);
        }
        let mut hello = two_words(src, src_len as u64).to_vec();
        // Pipes grown for this call, shrunk back once every reader is done.
        let mut grown = Vec::new();
        let choice = self.choice.get().filter(|_| pipes.is_some());
        let mut spliced = (0.0f64, 0usize);
        if let (Some(pipes), Some(choice)) = (pipes, choice) {
            for r in 0..self.p {
                if r == self.me {
                    // This rank's own word: its wish as a reader.
                    let w = choice.wish();
                    hello.extend_from_slice(&u64::from(w).to_ne_bytes());
                    continue;
                }
                let (off, n) = give(r);
                let wanted = choice.peer_wants[r as usize].load(Ordering::Relaxed);
                let sent = match &pipes.to[r as usize] {
                    Some(fd) if n >= SPLICE_MIN && wanted => {
                        let at = src + off as u64;
                        // The pages the part spans, one pipe slot each.
                        let span = (at + n as u64).div_ceil(4096) - at / 4096;
                        let want = (span as usize * 4096).min(PIPE_MAX);
                        match tmpi_smsc::splice::resize(fd, want) {
                            Ok(_) => {
                                grown.push(fd);
                                // A failure (a bad address) splices nothing:
                                // the reader's process_vm_readv reports it.
                                let t = std::time::Instant::now();
                                let k = tmpi_smsc::splice::give(fd, at, n).unwrap_or(0);
                                spliced.0 += t.elapsed().as_nanos() as f64;
                                spliced.1 += k;
                                k
                            }
                            Err(e) => {
                                // Over the user's pipe budget: this block
                                // by process_vm_readv.
                                tracing::debug!(target: "coll_sm", "pipe to rank {r} not grown: {e}");
                                0
                            }
                        }
                    }
                    _ => 0,
                };
                hello.extend_from_slice(&(sent as u64).to_ne_bytes());
            }
        }
        let st = self.begin(hello.len());
        st.claim(ctx)?;
        st.publish(&hello);
        st.wait_all(ctx)?;
        let mut res = Ok(());
        let failed = |message: String| CollError::P2p {
            class: tmpi_base::error::MpiErrorClass::Other,
            message,
        };
        // Time spent reading out of pipes and with process_vm_readv (parts
        // of at least SPLICE_MIN), for the choice between them.
        let mut taken = (0.0f64, 0usize);
        let mut read = (0.0f64, 0usize);
        // Each rank starts with the next one: not all on rank 0's pages.
        for r in (1..self.p).map(|k| (self.me + k) % self.p) {
            let d = st.data(r, hello.len());
            let (addr, len) = read_two_words(d);
            let len = len as usize;
            let (off, n) = want(r);
            let at = place(r);
            let mut piped = 0;
            if let Some(pipes) = pipes {
                if let Some(choice) = choice {
                    // What `r` wants for the next call.
                    let w = 16 + 8 * r as usize;
                    choice.peer_wants[r as usize]
                        .store(read_len(&d[w..w + 8]) != 0, Ordering::Relaxed);
                }
                let w = 16 + 8 * self.me as usize;
                let sent = read_len(&d[w..w + 8]);
                let Some(from) = pipes.from[r as usize].as_ref() else {
                    // Not reached: pipes are kept only with one from every rank.
                    res = res.and(Err(failed(format!("no pipe from rank {r}"))));
                    continue;
                };
                let usable = if len == src_len { sent.min(n) } else { 0 };
                let t = std::time::Instant::now();
                let took = tmpi_smsc::splice::take(from, &mut recv[at..at + usable]);
                if took.is_ok() {
                    taken.0 += t.elapsed().as_nanos() as f64;
                    taken.1 += usable;
                }
                if let Err(e) = took.and_then(|()| tmpi_smsc::splice::discard(from, sent - usable))
                {
                    res = res.and(Err(failed(format!(
                        "reading {sent} bytes from rank {r}'s pipe: {e}"
                    ))));
                    continue;
                }
                piped = usable;
                self.piped.fetch_add(usable as u64, Ordering::Relaxed);
            }
            if len != src_len {
                res = res.and(Err(CollError::Truncate {
                    peer: r,
                    got: len,
                    expected: src_len,
                }));
                continue;
            }
            let t = std::time::Instant::now();
            match tmpi_smsc::cma::read(
                pids[r as usize],
                addr + (off + piped) as u64,
                &mut recv[at + piped..at + n],
            ) {
                Ok(()) if n - piped >= SPLICE_MIN => {
                    read.0 += t.elapsed().as_nanos() as f64;
                    read.1 += n - piped;
                }
                Ok(()) => {}
                Err(e) => {
                    res = res.and(Err(failed(format!(
                        "reading {} bytes from rank {r} (process_vm_readv): {e}",
                        n - piped
                    ))))
                }
            }
        }
        if let Some(choice) = choice {
            choice.pipe_sample(spliced, taken);
            choice.cma_sample(read);
        }
        // Everyone has read this rank's source once every rank finished
        // this op, and drained this rank's pipes.
        let finished = st.finish_all(ctx);
        for fd in grown {
            if let Err(e) = tmpi_smsc::splice::resize(fd, PIPE_IDLE) {
                tracing::debug!(target: "coll_sm", "pipe not shrunk: {e}");
            }
        }
        finished?;
        res
    }

    /// `MPI_Allgather` by single copy (blocks above [`Node::max`]): each
    /// rank reads every other rank's block from that rank's memory.
    pub fn allgather_cma(
        &self,
        ctx: &CollContext,
        pids: &[u32],
        own: Option<&[u8]>,
        recv: &mut [u8],
    ) -> Result<()> {
        let b = recv.len() / self.p as usize;
        let me = self.me as usize;
        // In place the others read this rank's block out of `recv` while
        // it writes the other blocks, never the same bytes.
        let src = match own {
            Some(x) => {
                recv[me * b..(me + 1) * b].copy_from_slice(x);
                x.as_ptr() as u64
            }
            None => recv[me * b..].as_ptr() as u64,
        };
        let whole = |_| (0, b);
        self.exchange_cma(ctx, pids, (src, b), true, recv, whole, whole, |r| {
            r as usize * b
        })
    }

    /// `MPI_Alltoall` by single copy (vectors above [`Node::max`]): each
    /// rank reads its block from every other rank's send vector.
    pub fn alltoall_cma(
        &self,
        ctx: &CollContext,
        pids: &[u32],
        send: Option<&[u8]>,
        recv: &mut [u8],
    ) -> Result<()> {
        let n = recv.len();
        let b = n / self.p as usize;
        let me = self.me as usize;
        // In place the vector is copied first: `recv` is overwritten while
        // the others still read it.
        let copy;
        let src = match send {
            Some(x) => x,
            None => {
                copy = recv.to_vec();
                &copy[..]
            }
        };
        recv[me * b..(me + 1) * b].copy_from_slice(&src[me * b..(me + 1) * b]);
        let at = (src.as_ptr() as u64, n);
        self.exchange_cma(
            ctx,
            pids,
            at,
            send.is_some(),
            recv,
            |r| (r as usize * b, b),
            |_| (me * b, b),
            |r| r as usize * b,
        )
    }
}

/// One op in progress: its ring, number and slot.
struct Step<'a> {
    node: &'a Node,
    ring: &'a Ring,
    s: u64,
    k: usize,
}

impl Step<'_> {
    fn area(&self, r: u32) -> usize {
        let slot = if self.ring.by_rank {
            r as usize * self.ring.slots as usize + self.k
        } else {
            self.k * self.node.p as usize + r as usize
        };
        self.ring.base + slot * self.ring.stride
    }

    fn flag(&self, r: u32) -> &AtomicU64 {
        self.node.seg.atomic(self.area(r))
    }

    fn done(&self, r: u32) -> &AtomicU64 {
        self.node.seg.atomic(self.ring.done + LINE * r as usize)
    }

    /// Rank `r`'s data of this op, `n` bytes.
    ///
    /// Only after `r`'s flag for this op was seen: the protocol keeps `r`
    /// from rewriting it until this rank stored its `done`.
    fn data(&self, r: u32, n: usize) -> &[u8] {
        // SAFETY: `r` rewrites its area of this slot only after every
        // rank's `done` reached this op, and this rank stores its `done`
        // (`finish`, which takes `self` by value) only after it stopped
        // reading: the slice borrows `self`.
        unsafe { self.node.seg.slice(self.area(r) + DATA, n) }
    }

    /// Waits until this rank may rewrite its area of the slot (every rank
    /// finished the op that used it last).
    fn claim(&self, ctx: &CollContext) -> Result<()> {
        let Some(need) = self.s.checked_sub(self.ring.slots) else {
            return Ok(());
        };
        if self.ring.min_done.load(Ordering::Relaxed) >= need {
            return Ok(());
        }
        self.node.wait(ctx, || {
            (0..self.node.p).find(|&r| self.done(r).load(Ordering::Acquire) < need)
        })?;
        let m = (0..self.node.p)
            .map(|r| self.done(r).load(Ordering::Acquire))
            .min()
            .unwrap_or(0);
        self.ring.min_done.store(m, Ordering::Relaxed);
        Ok(())
    }

    fn publish(&self, data: &[u8]) {
        let a = self.area(self.node.me);
        self.node.seg.write(a + DATA, data);
        self.raise(a, data.len());
    }

    /// Stores the length word and flag of this rank's area `a` (its
    /// [`Step::area`]) for this op, its data written.
    fn raise(&self, a: usize, n: usize) {
        self.node
            .seg
            .atomic(a + 8)
            .store(n as u64, Ordering::Relaxed);
        self.raise_flag(a);
    }

    /// Stores this rank's flag for this op: the op's number over the
    /// call's (modulo 2^[`CALL_BITS`]), one store. (A second store carrying
    /// the call's number, checked by a second load, made a barrier
    /// measurably slower: the waiting rank can take the line in between.)
    fn raise_flag(&self, a: usize) {
        let call = self.node.call.load(Ordering::Relaxed) & CALL_MASK;
        self.node
            .seg
            .atomic(a)
            .store(self.s << CALL_BITS | call, Ordering::Release);
    }

    /// Waits for rank `r`'s flag of this op, and checks that the op it
    /// raised belongs to the same call as this rank's (ranks whose calls
    /// differ can meet in one slot: a bcast root's next call where the
    /// others wait for its bcast on another ring). Every read of another
    /// rank's area comes after this.
    fn wait_flag(&self, ctx: &CollContext, r: u32) -> Result<()> {
        let f = self.flag(r);
        let need = self.s << CALL_BITS;
        let mut v = f.load(Ordering::Acquire);
        if v < need {
            self.node.wait(ctx, || {
                v = f.load(Ordering::Acquire);
                (v < need).then_some(r)
            })?;
        }
        if v != need | self.node.call.load(Ordering::Relaxed) & CALL_MASK {
            return self.other_call(ctx, r, v);
        }
        Ok(())
    }

    /// [`Step::wait_flag`] found rank `r`'s flag `v` of another call. A
    /// flag of this op's number from an earlier call is one `r` raised and
    /// took back (`Step::undo`): it waits on for the flag of this call;
    /// anything else is the error of calls that differ.
    #[cold]
    fn other_call(&self, ctx: &CollContext, r: u32, mut v: u64) -> Result<()> {
        let f = self.flag(r);
        let need = self.s << CALL_BITS;
        let call = self.node.call.load(Ordering::Relaxed) & CALL_MASK;
        let early = |v: u64| v < need || (v >> CALL_BITS == self.s && before(v & CALL_MASK, call));
        if early(v) {
            self.node.wait(ctx, || {
                v = f.load(Ordering::Acquire);
                early(v).then_some(r)
            })?;
        }
        if v != need | call {
            return Err(self.node.wrong_call(r, v & CALL_MASK));
        }
        Ok(())
    }

    fn wait_all(&self, ctx: &CollContext) -> Result<()> {
        (0..self.node.p)
            .filter(|&r| r != self.node.me)
            .try_for_each(|r| self.wait_flag(ctx, r))
    }

    fn finish(self) {
        self.done(self.node.me).store(self.s, Ordering::Release);
    }

    /// [`Step::finish`], then waits until every rank finished this op.
    fn finish_all(self, ctx: &CollContext) -> Result<()> {
        self.done(self.node.me).store(self.s, Ordering::Release);
        self.node.wait(ctx, || {
            (0..self.node.p).find(|&r| self.done(r).load(Ordering::Acquire) < self.s)
        })
    }

    /// Whether rank `r`'s flag of this op is up (of this call: one load).
    #[inline(always)]
    fn flag_is_up(&self, r: u32) -> bool {
        self.flag(r).load(Ordering::Acquire)
            == self.s << CALL_BITS | self.node.call.load(Ordering::Relaxed) & CALL_MASK
    }

    /// The length rank `r` published for this op (after its flag).
    fn len_of(&self, r: u32) -> usize {
        self.node
            .seg
            .atomic(self.area(r) + 8)
            .load(Ordering::Relaxed) as usize
    }

    /// Gives this op's number back to its ring: the op never happened on
    /// this rank (it found that the other ranks' call took another ring,
    /// [`Node::wait_or_diverge`]), and the ring's next op takes the number
    /// again. `published`: this rank raised its flag; it is cleared, so
    /// that no rank reads it as this rank's flag of that next op. Every
    /// rank that could read the flag's old value finished with it before
    /// this rank claimed the slot.
    fn undo(self, published: bool) {
        if published {
            self.node
                .seg
                .atomic(self.area(self.node.me))
                .store(0, Ordering::Release);
        }
        self.ring.seq.store(self.s - 1, Ordering::Relaxed);
    }

    fn expect_len(&self, r: u32, expected: usize) -> Result<()> {
        let got = self.len_of(r);
        if got != expected {
            return Err(CollError::Truncate {
                peer: r,
                got,
                expected,
            });
        }
        Ok(())
    }

    /// `out = x0 op (x1 op (... op x_{p-1}))` over the op's areas.
    fn fold(&self, out: &mut [u8], dtype: Datatype, op: &Op) -> Result<()> {
        let n = out.len();
        self.fold_range(out, 0, n, dtype, op)
    }

    /// [`Step::fold`] of bytes `from..from + out.len()` of areas holding
    /// `n` bytes each.
    fn fold_range(
        &self,
        out: &mut [u8],
        from: usize,
        n: usize,
        dtype: Datatype,
        op: &Op,
    ) -> Result<()> {
        let p = self.node.p;
        for r in 0..p {
            self.expect_len(r, n)?;
        }
        let to = from + out.len();
        out.copy_from_slice(&self.data(p - 1, n)[from..to]);
        for r in (0..p - 1).rev() {
            op.apply(dtype, &self.data(r, n)[from..to], out)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod path_tests {
    use super::segment_path;

    #[test]
    fn segment_names_carry_the_job_id_when_it_is_safe() {
        assert_eq!(
            segment_path(7, Some("tmpi-12-0123456789abcdef"), 3),
            "/dev/shm/tmpi-coll.7.tmpi-12-0123456789abcdef.3"
        );
        for bad in [
            None,
            Some(""),
            Some("a/../b"),
            Some("a.b"),
            Some(&"x".repeat(65)[..]),
        ] {
            assert_eq!(segment_path(7, bad, 3), "/dev/shm/tmpi-coll.7.3", "{bad:?}");
        }
    }
}
