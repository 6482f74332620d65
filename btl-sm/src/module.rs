//! The sm module: wire-up, send paths, progress, single-copy get.
//!
//! # Paths and ordering
//! A fragment to a local peer goes through either the **fast box** this
//! process owns in the peer's segment (fragments up to `btl_sm_fbox_max`
//! bytes) or a **fragment** from this process's own pool pushed on the
//! peer's **FIFO**. To keep per-peer FIFO order across the two paths
//! without sequence numbers, a sender switches paths only when the other
//! one is empty: the fast box is used only while no FIFO fragment to that
//! peer is outstanding (each comes back to the sender's own FIFO after the
//! receiver's handler returned), and the FIFO only once the fast box is
//! drained (the receiver advances its tail after the handler returned).
//! Hence at any time only one path holds undelivered fragments of a pair.
//!
//! # Flow control and memory
//! All memory is the fixed segment: `btl_sm_fifo_size` bytes of fragments
//! per process plus one fast box per local peer. When the pool is empty,
//! the fast box full, or the other path not yet drained, `send` returns
//! [`BtlError::WouldBlock`] and nothing is sent; fragments return to the
//! pool when receivers progress. No allocation per message. With more than
//! one peer, one destination may hold at most half of each fragment class,
//! so a stalled receiver cannot starve the traffic to the others.
//!
//! # Cooperative copy of large messages
//! `register_region` of at least `btl_sm_coop_min` bytes takes a
//! [`CoopSlot`] of this process's segment and names it in the key
//! ([`coop_key`]: pid, slot + 1, generation). A receiver's whole-region
//! `get` arms the slot (destination, chunking) and copies chunks with
//! `process_vm_readv` while this process's `progress` claims other chunks
//! and writes them with `process_vm_writev`; the receiver returns once all
//! chunks are done and the ones the sender failed to write are re-read.
//! Ordering: the receiver closes the slot before `get` returns, hence
//! before the pml's FIN; the sender deregisters (frees the slot, next
//! generation) only after that FIN, so a slot is never reused while a
//! receiver may touch it. A slot deregistered while still armed (a failed
//! request) is quarantined until its receiver closes it. See docs/pml.md.
//!
//! # Segment lifetime
//! Created at init (`/dev/shm/tmpi-sm.<job_id>.<rank>`, `O_CREAT|O_EXCL`,
//! 0600), published through the modex, mapped by each local peer in
//! `add_procs`, which increments the attach counter in its header. The
//! owner unlinks its file as soon as the counter reaches the number of
//! other local processes: checked at the end of `add_procs` and in every
//! `progress` call (so no second fence is needed). `finalize` (or drop)
//! unlinks it if that never happened; `tmpirun` removes leftovers of a
//! crashed job.
//!
//! # Dead peers
//! Shared memory does not break when a peer dies, so the module watches its
//! attached peers' processes ([`crate::liveness`]). `take_failed_peers`
//! (which the pml calls every so many polling rounds, also while a call
//! waits) looks at most every [`LIVENESS_EVERY`]: a peer whose process has
//! exited without having marked its segment finalized (`finalize` marks
//! it before unmapping) is reported once, at the look after the one that
//! saw it gone, so that what it wrote before dying has been polled. The
//! pml then fails every request that waits on it, as for a broken tcp
//! connection.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use tmpi_base::identity::ProcessInfo;
use tmpi_base::modex::Modex;
use tmpi_btl::{
    BtlError, BtlFlags, BtlModule, BtlRecvHandler, DirectRecv, DirectSend, RemoteRegion,
};

use crate::config::{SingleCopy, SmConfig};
use std::sync::atomic::Ordering;
use tmpi_smsc::cma;

use crate::direct::{PeerRx, PeerTx};
use crate::liveness::PeerWatch;
use crate::segment::{coop_phase, Class, CoopSlot, Segment, COOP_SLOTS};
use crate::shm::{self, Fbox, FragHdr, Resolve};
use tmpi_smsc::huge::HugeSources;

/// Modex key of the segment address.
pub const MODEX_KEY: &str = "btl.sm.seg";

/// Records per fast box per progress call.
const FBOX_BUDGET: usize = 64;
/// Records per fast box per progress call of a blocked receiver
/// (`progress_waiting`): one, so that a stream's messages meet their
/// receives instead of being drained into the unexpected queue in bursts
/// (docs/pml.md, "The small-message fast path").
const FBOX_BUDGET_WAITING: usize = 1;

/// Chunks the sender writes per progress call (cooperative copy).
const COOP_BUDGET: usize = 2;

/// Pause iterations a receiver spins waiting for the sender's last chunk
/// before it yields at each further check.
const COOP_SPINS: u64 = 1 << 14;

/// Smallest chunk of a cooperative copy: each chunk is one CMA call of
/// either side, whose fixed cost (a system call and page pinning) smaller
/// chunks no longer repay, so a 32 KiB message is the smallest cut in two.
const COOP_MIN_CHUNK: u64 = 16 * 1024;

/// Most chunks of one cooperative copy (bits of the failed mask).
const COOP_MAX_CHUNKS: u64 = 64;

/// Region key: `pid` in the low 32 bits, cooperative slot + 1 in bits
/// 32..40 (0: plain key, no slot), its generation in bits 40..64.
pub fn coop_key(pid: u32, slot: Option<usize>, generation: u32) -> u64 {
    match slot {
        None => pid as u64,
        Some(s) => {
            pid as u64
                | (((s as u64 + 1) & 0xff) << 32)
                | ((generation as u64 & ((1 << coop_phase::GEN_BITS) - 1)) << 40)
        }
    }
}

/// Inverse of [`coop_key`]: `(pid, slot, generation)`; the slot is not
/// range-checked here.
pub fn split_key(key: u64) -> (u32, Option<usize>, u32) {
    let pid = key as u32;
    let s = ((key >> 32) & 0xff) as usize;
    let generation = (key >> 40) as u32;
    (pid, s.checked_sub(1), generation)
}

/// Chunk size and count for a cooperative copy of `len` bytes with a
/// preferred chunk of `min_chunk` (4 KiB multiple >= 16 KiB): at most
/// `COOP_MAX_CHUNKS` chunks, each a 4 KiB multiple of at least
/// `COOP_MIN_CHUNK`, and at least two chunks when `len` is above that
/// (a message below twice `min_chunk` is cut in halves rather than left
/// to one side).
pub fn coop_chunking(len: u64, min_chunk: u64) -> (u64, u64) {
    let up4k = |x: u64| x.div_ceil(4096) * 4096;
    let per = up4k(len.div_ceil(COOP_MAX_CHUNKS));
    let half = up4k(len.div_ceil(2));
    let chunk = per.max(min_chunk.min(half)).max(COOP_MIN_CHUNK);
    (chunk, len.div_ceil(chunk))
}

/// The receiver's copy loop on an armed slot: claims and reads chunks,
/// waits for the sender's claimed chunks, re-reads the failed ones.
/// Returns (chunks read, chunks re-read); an error only after no sender
/// write into `dst` can still be under way (or the sender is gone).
#[allow(clippy::too_many_arguments)]
fn coop_copy(
    slot: &CoopSlot,
    peer: u32,
    pid: u32,
    probe_addr: u64,
    start: u64,
    chunk: u64,
    n: u64,
    dst: &mut [u8],
) -> std::io::Result<(u64, u64)> {
    let len = dst.len() as u64;
    let range = |k: u64| {
        let off = k * chunk;
        (off as usize, (off + chunk).min(len) as usize)
    };
    let mut read = 0u64;
    let mut err = None;
    // Chunks claimed by anyone; each claimed chunk bumps `done` once
    // finished (copied, or failed by the sender).
    let mut claimed = n;
    loop {
        let k = slot.next.fetch_add(1, Ordering::AcqRel) as u64;
        if k >= n {
            break;
        }
        let (a, b) = range(k);
        let r = cma::read(pid, start + a as u64, &mut dst[a..b]);
        slot.done.fetch_add(1, Ordering::AcqRel);
        read += 1;
        if let Err(e) = r {
            // Stop further claims; the ones taken before still finish.
            let p = slot.next.swap(1 << 30, Ordering::AcqRel) as u64;
            claimed = p.min(n);
            err = Some(e);
            break;
        }
    }
    // Wait for the sender's last chunks: no write into `dst` may be under
    // way when we return.
    let mut spins = 0u64;
    while (slot.done.load(Ordering::Acquire) as u64) < claimed {
        // Spin through the sender's usual chunk time, then yield (the
        // sender may need this core: more ranks than cores).
        spins = spins.wrapping_add(1);
        if spins > COOP_SPINS {
            std::thread::yield_now();
        } else {
            std::hint::spin_loop();
        }
        if spins.is_multiple_of(1024) {
            if let Err(e) = cma::probe(pid, probe_addr) {
                if e.raw_os_error() == Some(libc::ESRCH) {
                    tracing::warn!(target: "btl_sm", "rank {peer} is gone during a cooperative copy");
                    return Err(e);
                }
            }
        }
    }
    if let Some(e) = err {
        return Err(e);
    }
    let mut failed = slot.failed.load(Ordering::Acquire);
    let mut reread = 0u64;
    while failed != 0 {
        let k = failed.trailing_zeros() as u64;
        failed &= failed - 1;
        if k >= n {
            continue;
        }
        let (a, b) = range(k);
        cma::read(pid, start + a as u64, &mut dst[a..b])?;
        reread += 1;
    }
    Ok((read, reread))
}

/// The sender's side of one of its slots.
#[derive(Debug, Clone, Copy, Default)]
struct CoopLocal {
    addr: u64,
    len: u64,
    generation: u32,
}

/// Counters of one module.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct SmStats {
    /// Fragments sent through fast boxes.
    pub fbox_sends: u64,
    /// Fragments sent through FIFOs.
    pub fifo_sends: u64,
    /// Sends refused with `WouldBlock`.
    pub would_block: u64,
    /// Fragments delivered to the handler.
    pub delivered: u64,
    /// Own fragments that came back.
    pub returned: u64,
    /// Most own fragments outstanding at once.
    pub max_outstanding: u64,
    /// Regions registered with a cooperative-copy slot.
    pub coop_regs: u64,
    /// Regions of at least `btl_sm_coop_min` bytes registered with a plain
    /// key because no slot was free.
    pub coop_exhausted: u64,
    /// Gets done as cooperative copies (receiver).
    pub coop_gets: u64,
    /// Whole-region gets of regions with a cooperative slot read alone
    /// because the thread asked to copy alone ([`tmpi_smsc::CopyAlone`]).
    pub coop_declined: u64,
    /// Chunks this process read as a receiver of cooperative copies.
    pub coop_chunks_read: u64,
    /// Chunks this process wrote as a sender (helping).
    pub coop_chunks_written: u64,
    /// Chunks this process failed to write as a sender.
    pub coop_chunks_failed: u64,
    /// Chunks a receiver re-read because the sender failed them.
    pub coop_rereads: u64,
    /// Whole-region gets read plain because the sender was not waiting in
    /// idle progress rounds (it would not have helped soon).
    pub coop_owner_busy: u64,
}

/// The `/dev/shm` path of `rank`'s segment in job `job_id`.
pub fn segment_path(job_id: &str, rank: u32) -> PathBuf {
    PathBuf::from(format!("/dev/shm/tmpi-sm.{job_id}.{rank}"))
}

struct Segs<'a> {
    me: usize,
    own: &'a Segment,
    peers: &'a [Option<Segment>],
}

impl Resolve for Segs<'_> {
    fn frag(&self, r: i64) -> Option<*mut FragHdr> {
        let (l, off) = shm::unrel(r);
        let seg = if l == self.me {
            self.own
        } else {
            self.peers.get(l)?.as_ref()?
        };
        seg.frag_at(off).map(|(p, _, _)| p)
    }
}

/// The shared-memory BTL module.
pub struct SmModule {
    cfg: SmConfig,
    me: u32,
    me_local: usize,
    local_world: Vec<u32>,
    world_local: Vec<Option<usize>>,
    own: Option<Segment>,
    own_path: PathBuf,
    unlinked: bool,
    peers: Vec<Option<Segment>>,
    free_eager: Vec<usize>,
    free_max: Vec<usize>,
    /// Per local peer: the fast box, the hint of its `tail` and the own
    /// FIFO fragments outstanding to it, shared with the pml's
    /// [`DirectSend`] handles (`crate::direct`).
    tx: Vec<Arc<PeerTx>>,
    /// Per attached peer: (world rank, address and size of the fast box it
    /// writes in our segment), the list `poll` walks every round.
    rx: Vec<(u32, usize, usize, usize)>,
    /// Per local rank: the same fast boxes for [`DirectRecv`] handles.
    rx_direct: Vec<Arc<PeerRx>>,
    /// Most fragments of each class one destination may hold.
    share: [u32; 2],
    get_enabled: bool,
    expected_attach: u32,
    stats: SmStats,
    pool_size: usize,
    /// Free cooperative slots of our segment (stack of indices).
    coop_free: Vec<u8>,
    /// Registered slots (the ones `progress` looks at); empty: no cost.
    coop_live: Vec<u8>,
    /// Deregistered while a receiver still had them armed: freed once it
    /// closes them.
    coop_quarantine: Vec<u8>,
    /// Per slot: our region and generation.
    coop_local: Vec<CoopLocal>,
    /// Per local peer: whether we still help it (off after a failed write).
    coop_help: Vec<bool>,
    /// What our live slots' `owner_waiting` last showed (idle rounds).
    coop_waiting_shown: bool,
    /// This process's id, read once: `getpid` is a system call, and each
    /// rendezvous send registers a region keyed by it.
    pid: u32,
    /// Reused sources onto huge pages (`btl_sm_huge_after`).
    huge: HugeSources,
    /// Per local peer: its process, once attached (module docs, "Dead
    /// peers").
    watch: Vec<Option<PeerWatch>>,
    /// Per local peer: 0 alive, 1 seen gone, 2 reported.
    gone: Vec<u8>,
    /// When `take_failed_peers` last looked.
    last_look: std::time::Instant,
}

/// Least time between two looks at the peers' processes (one `poll`
/// system call): a death is noticed within about twice this.
pub const LIVENESS_EVERY: std::time::Duration = std::time::Duration::from_millis(20);

impl std::fmt::Debug for SmModule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SmModule")
            .field("me", &self.me)
            .field("segment", &self.own_path)
            .field("unlinked", &self.unlinked)
            .field("get_enabled", &self.get_enabled)
            .field("stats", &self.stats)
            .finish()
    }
}

impl SmModule {
    /// Creates this process's segment and publishes it under
    /// [`MODEX_KEY`]. `Ok(None)` when no other process shares the node.
    pub fn open(
        info: &ProcessInfo,
        modex: &mut dyn Modex,
        cfg: SmConfig,
    ) -> Result<Option<SmModule>, BtlError> {
        cfg.validate().map_err(BtlError::Config)?;
        let local_world = info.local_peers();
        if local_world.len() < 2 {
            return Ok(None);
        }
        if !Path::new("/dev/shm").is_dir() {
            return Err(BtlError::Unavailable("/dev/shm is missing".into()));
        }
        let me_local = local_world
            .iter()
            .position(|&r| r == info.rank)
            .ok_or_else(|| BtlError::Config("this rank is not among its node's ranks".into()))?;
        let mut world_local = vec![None; info.size as usize];
        for (l, &w) in local_world.iter().enumerate() {
            if let Some(slot) = world_local.get_mut(w as usize) {
                *slot = Some(l);
            }
        }
        if cfg.single_copy != SingleCopy::None {
            cma::allow_ptracer_any();
        }
        let layout = cfg.layout(local_world.len() as u32);
        let nlocal = local_world.len();
        let path = segment_path(&info.job_id, info.rank);
        let own = Segment::create(&path, layout, me_local as u32, cma::probe_addr())?;
        let tx: Vec<Arc<PeerTx>> = (0..local_world.len()).map(|_| Arc::default()).collect();
        let rx_direct = tx
            .iter()
            .map(|t| Arc::new(PeerRx::new(Arc::clone(t))))
            .collect();
        let mut m = SmModule {
            cfg,
            me: info.rank,
            me_local,
            world_local,
            own_path: path.clone(),
            unlinked: false,
            peers: (0..local_world.len()).map(|_| None).collect(),
            free_eager: (0..layout.n_eager as usize)
                .rev()
                .map(|i| layout.frag(Class::Eager, i))
                .collect(),
            free_max: (0..layout.n_max as usize)
                .rev()
                .map(|i| layout.frag(Class::Max, i))
                .collect(),
            tx,
            rx: Vec::new(),
            rx_direct,
            share: if local_world.len() > 2 {
                [(layout.n_eager / 2).max(1), (layout.n_max / 2).max(1)]
            } else {
                [layout.n_eager, layout.n_max]
            },
            get_enabled: cfg.single_copy != SingleCopy::None,
            expected_attach: local_world.len() as u32 - 1,
            local_world,
            own: Some(own),
            stats: SmStats::default(),
            pool_size: (layout.n_eager + layout.n_max) as usize,
            coop_free: (0..COOP_SLOTS as u8).rev().collect(),
            coop_live: Vec::with_capacity(COOP_SLOTS),
            coop_quarantine: Vec::with_capacity(COOP_SLOTS),
            coop_local: vec![CoopLocal::default(); COOP_SLOTS],
            coop_help: vec![true; nlocal],
            coop_waiting_shown: false,
            pid: std::process::id(),
            huge: HugeSources::new(cfg.huge_after, "btl_sm"),
            watch: (0..nlocal).map(|_| None).collect(),
            gone: vec![0; nlocal],
            last_look: std::time::Instant::now(),
        };
        let value = format!("v1:{}", path.display());
        if let Err(e) = modex.put(MODEX_KEY, value.as_bytes()) {
            m.unlink();
            return Err(e.into());
        }
        tracing::debug!(target: "btl_sm", segment = %path.display(), bytes = layout.total(),
            local = m.local_world.len(), "segment created");
        Ok(Some(m))
    }

    /// Path of this process's segment file.
    pub fn segment_path(&self) -> &Path {
        &self.own_path
    }

    /// Whether the segment file was unlinked (all peers attached).
    pub fn segment_unlinked(&self) -> bool {
        self.unlinked
    }

    /// Whether `get` (CMA single copy) is in use.
    pub fn single_copy_enabled(&self) -> bool {
        self.get_enabled
    }

    /// Counters.
    pub fn stats(&self) -> SmStats {
        SmStats {
            fbox_sends: self.tx.iter().map(|t| t.sends()).sum(),
            delivered: self.stats.delivered + self.rx_direct.iter().map(|r| r.takes()).sum::<u64>(),
            ..self.stats
        }
    }

    /// Fragments in this process's pool (fixed at init).
    pub fn pool_size(&self) -> usize {
        self.pool_size
    }

    /// Fragments of the pool currently free.
    pub fn free_fragments(&self) -> usize {
        self.free_eager.len() + self.free_max.len()
    }

    /// Bytes of this process's segment.
    pub fn segment_bytes(&self) -> usize {
        self.own.as_ref().map_or(0, |s| s.layout().total())
    }

    fn unlink(&mut self) {
        if !self.unlinked {
            self.unlinked = true;
            if let Err(e) = std::fs::remove_file(&self.own_path) {
                tracing::warn!(target: "btl_sm", "unlink {}: {e}", self.own_path.display());
            } else {
                tracing::debug!(target: "btl_sm", "unlinked {}", self.own_path.display());
            }
        }
    }

    /// Unlinks the segment file if every other local process attached
    /// (progress does this too); returns whether it is unlinked. Useful
    /// right after a post-wire-up fence.
    pub fn poll_unlink(&mut self) -> bool {
        self.maybe_unlink();
        self.unlinked
    }

    fn maybe_unlink(&mut self) {
        if !self.unlinked {
            if let Some(own) = &self.own {
                if own.attached() >= self.expected_attach {
                    self.unlink();
                }
            }
        }
    }

    fn local_of(&self, peer: u32) -> Result<usize, BtlError> {
        match self.world_local.get(peer as usize).copied().flatten() {
            Some(l) if self.peers[l].is_some() => Ok(l),
            _ => Err(BtlError::Unreachable(peer)),
        }
    }

    fn attach_peer(&mut self, peer: u32, l: usize, modex: &mut dyn Modex) -> Result<(), BtlError> {
        let v = modex.get(peer, MODEX_KEY)?;
        let proto = |reason: String| BtlError::Protocol { peer, reason };
        let s =
            std::str::from_utf8(&v).map_err(|_| proto("segment address is not UTF-8".into()))?;
        let path = s
            .strip_prefix("v1:")
            .ok_or_else(|| proto(format!("unknown segment address {s:?}")))?;
        if !path.starts_with("/dev/shm/tmpi-sm.") || path.contains("/../") {
            return Err(proto(format!("unexpected segment path {path:?}")));
        }
        let seg = Segment::attach(Path::new(path))?;
        if seg.owner_local as usize != l || (seg.layout().slots as usize) < self.local_world.len() {
            return Err(proto(format!(
                "segment of local rank {} with {} slots, expected local rank {l} and {} slots",
                seg.owner_local,
                seg.layout().slots,
                self.local_world.len()
            )));
        }
        if self.cfg.single_copy != SingleCopy::None {
            if let Err(e) = cma::probe(seg.pid, seg.probe_addr) {
                if self.cfg.single_copy == SingleCopy::Cma {
                    return Err(BtlError::GetDenied { peer, source: e });
                }
                if self.get_enabled {
                    tracing::info!(target: "btl_sm",
                        "CMA to rank {peer} not permitted ({e}); large messages are copied \
                         through the segment");
                }
                self.get_enabled = false;
            }
        }
        seg.mark_attached();
        tracing::debug!(target: "btl_sm", peer, path, "attached");
        if let Some((fbox, size)) = seg.fbox_raw(self.me_local) {
            self.tx[l].attach(fbox, size, self.cfg.fbox_max.min(Fbox::max_record(size)));
        }
        if let Some((fbox, size)) = self.own.as_ref().and_then(|o| o.fbox_raw(l)) {
            self.rx.push((peer, fbox as usize, size, l));
            self.rx_direct[l].attach(fbox, size);
        }
        self.watch[l] = Some(PeerWatch::new(seg.pid));
        self.peers[l] = Some(seg);
        Ok(())
    }

    fn send_fifo(
        &mut self,
        l: usize,
        tag: u8,
        header: &[u8],
        payload: &[u8],
    ) -> Result<(), BtlError> {
        let len = header.len() + payload.len();
        let own = self.own.as_ref().ok_or(BtlError::Finalized)?;
        let eager_cap = own.layout().eager_cap as usize;
        let [he, hm] = self.tx[l].held();
        let eager_ok = len <= eager_cap && he < self.share[0];
        let max_ok = hm < self.share[1];
        let off = eager_ok
            .then(|| self.free_eager.pop())
            .flatten()
            .or_else(|| max_ok.then(|| self.free_max.pop()).flatten());
        let Some(off) = off else {
            self.stats.would_block += 1;
            return Err(BtlError::WouldBlock);
        };
        let (ptr, class, _) = own.frag_at(off).expect("pool offsets are fragment slots");
        // SAFETY: `off` came from our free list: a slot of our own segment
        // in no FIFO, with capacity >= len (eager only when len fits).
        unsafe { shm::fill_frag(ptr, tag, l as u32, header, payload) };
        let r = shm::rel(self.me_local, off);
        let segs = Segs {
            me: self.me_local,
            own,
            peers: &self.peers,
        };
        let peer_seg = self.peers[l].as_ref().expect("checked reachable");
        // SAFETY: `r` is our fragment, in no FIFO; `segs` resolves every
        // mapped segment's fragments; the peer's FIFO lives in its mapping.
        let ok = unsafe { peer_seg.fifo().push(r, &segs) };
        if !ok {
            match class {
                Class::Eager => self.free_eager.push(off),
                Class::Max => self.free_max.push(off),
            }
            return Err(BtlError::Protocol {
                peer: self.local_world[l],
                reason: "FIFO tail is corrupt".into(),
            });
        }
        self.tx[l].held_add(class as usize);
        self.stats.fifo_sends += 1;
        let out = (self.pool_size - self.free_fragments()) as u64;
        self.stats.max_outstanding = self.stats.max_outstanding.max(out);
        Ok(())
    }

    fn check_send(&self, peer: u32, len: usize) -> Result<usize, BtlError> {
        if self.own.is_none() {
            return Err(BtlError::Finalized);
        }
        let l = self.local_of(peer)?;
        if len > self.cfg.max_send_size {
            return Err(BtlError::TooLarge {
                len,
                max: self.cfg.max_send_size,
            });
        }
        Ok(l)
    }

    /// Tries the fast box; `Ok(false)` when it cannot be used now.
    fn try_fbox(&mut self, l: usize, tag: u8, header: &[u8], payload: &[u8]) -> bool {
        // SAFETY: `&mut self`: no other send of this module (nor of its
        // direct handles, which the pml serializes with the module's calls)
        // is in progress; the peer's segment is mapped while `tx[l]` is
        // attached.
        unsafe { self.tx[l].try_write(tag, header, payload) }
    }

    /// A free cooperative slot (recovering quarantined ones that their
    /// receiver closed meanwhile).
    fn coop_take(&mut self) -> Option<usize> {
        if self.coop_free.is_empty() && !self.coop_quarantine.is_empty() {
            let own = self.own.as_ref()?;
            let local = &self.coop_local;
            let free = &mut self.coop_free;
            self.coop_quarantine.retain(|&s| {
                let g = local[s as usize].generation;
                let st = own
                    .coop_slot(s as usize)
                    .map(|c| c.state.load(Ordering::Acquire));
                if st == Some(coop_phase::state(g, coop_phase::CLOSED)) {
                    free.push(s);
                    false
                } else {
                    true
                }
            });
        }
        self.coop_free.pop().map(usize::from)
    }

    /// Sender side of the cooperative copy: writes up to [`COOP_BUDGET`]
    /// chunks of armed slots into their receivers' buffers.
    fn coop_help(&mut self) {
        let Some(own) = self.own.as_ref() else { return };
        let mut budget = COOP_BUDGET;
        for &s in &self.coop_live {
            let loc = self.coop_local[s as usize];
            let Some(slot) = own.coop_slot(s as usize) else {
                continue;
            };
            if slot.state.load(Ordering::Acquire)
                != coop_phase::state(loc.generation, coop_phase::ARMED)
            {
                continue;
            }
            // Armed with our generation: the receiver's fields are visible
            // (release store of ARMED after writing them).
            let reader = slot.reader.load(Ordering::Relaxed) as usize;
            let pid = match self.peers.get(reader) {
                Some(Some(seg)) if reader != self.me_local => seg.pid,
                _ => 0,
            };
            let help = self.coop_help.get(reader).copied().unwrap_or(false);
            if !help {
                continue;
            }
            let n = (slot.nchunks.load(Ordering::Relaxed) as u64).min(COOP_MAX_CHUNKS);
            let chunk = slot.chunk.load(Ordering::Relaxed);
            let dst = slot.dst.load(Ordering::Relaxed);
            while budget > 0 {
                let k = slot.next.fetch_add(1, Ordering::AcqRel) as u64;
                if k >= n {
                    break;
                }
                budget -= 1;
                let off = k.saturating_mul(chunk);
                let end = off.saturating_add(chunk).min(loc.len);
                let r = if off >= end {
                    Ok(())
                } else if self.cfg.coop_fail_test || pid == 0 {
                    Err(std::io::Error::from_raw_os_error(libc::EFAULT))
                } else {
                    // SAFETY: `loc` is a region registered by our caller
                    // and not yet deregistered (it is in `coop_live`):
                    // readable for `loc.len` bytes; `off < end <= len`.
                    let src = unsafe {
                        std::slice::from_raw_parts(
                            (loc.addr + off) as usize as *const u8,
                            (end - off) as usize,
                        )
                    };
                    cma::write(pid, dst.wrapping_add(off), src)
                };
                match r {
                    Ok(()) => self.stats.coop_chunks_written += 1,
                    Err(e) => {
                        slot.failed.fetch_or(1 << k, Ordering::AcqRel);
                        self.stats.coop_chunks_failed += 1;
                        if !self.cfg.coop_fail_test {
                            tracing::info!(target: "btl_sm",
                                "cooperative write to local rank {reader} failed ({e}); \
                                 no more help to it");
                            if let Some(h) = self.coop_help.get_mut(reader) {
                                *h = false;
                            }
                        }
                    }
                }
                slot.done.fetch_add(1, Ordering::AcqRel);
                if self.coop_help.get(reader) != Some(&true) {
                    break;
                }
            }
            if budget == 0 {
                break;
            }
        }
    }

    /// Shows every live slot's receiver whether we wait in idle progress
    /// rounds (`owner_waiting`); stores only on a change.
    fn coop_show_waiting(&mut self, waiting: bool) {
        if self.coop_waiting_shown == waiting {
            return;
        }
        self.coop_waiting_shown = waiting;
        let Some(own) = self.own.as_ref() else { return };
        for &s in &self.coop_live {
            if let Some(slot) = own.coop_slot(s as usize) {
                let g = self.coop_local[s as usize].generation;
                let v = if waiting { coop_phase::waiting(g) } else { 0 };
                slot.owner_waiting.store(v, Ordering::Release);
            }
        }
    }

    /// Receiver side: arms `slot` (generation `generation`) of `peer`'s
    /// segment and copies the whole region into `dst` with the sender's
    /// help. `Ok(false)`: the slot could not be armed (plain path).
    fn coop_get(
        &mut self,
        peer: u32,
        l: usize,
        s: usize,
        generation: u32,
        start: u64,
        dst: &mut [u8],
    ) -> Result<bool, BtlError> {
        let seg = self.peers[l].as_ref().expect("checked reachable");
        let Some(slot) = seg.coop_slot(s) else {
            return Err(BtlError::BadRegion(format!(
                "cooperative slot {s} of rank {peer} out of range"
            )));
        };
        let (pid, probe_addr) = (seg.pid, seg.probe_addr);
        let len = dst.len() as u64;
        let (chunk, n) = coop_chunking(len, self.cfg.coop_chunk as u64);
        if n < 2 {
            return Ok(false);
        }
        // A sender with work of its own would not help soon: chunks would
        // only add CMA calls, each with its fixed cost (a 2-rank exchange,
        // where both sides read at once, got slower).
        if slot.owner_waiting.load(Ordering::Acquire) != coop_phase::waiting(generation) {
            self.stats.coop_owner_busy += 1;
            return Ok(false);
        }
        if slot
            .state
            .compare_exchange(
                coop_phase::state(generation, coop_phase::OWNED),
                coop_phase::state(generation, coop_phase::ARMING),
                Ordering::AcqRel,
                Ordering::Acquire,
            )
            .is_err()
        {
            return Ok(false);
        }
        slot.dst
            .store(dst.as_mut_ptr() as usize as u64, Ordering::Relaxed);
        slot.len.store(len, Ordering::Relaxed);
        slot.chunk.store(chunk, Ordering::Relaxed);
        slot.nchunks.store(n as u32, Ordering::Relaxed);
        slot.reader.store(self.me_local as u32, Ordering::Relaxed);
        slot.next.store(0, Ordering::Relaxed);
        slot.done.store(0, Ordering::Relaxed);
        slot.failed.store(0, Ordering::Relaxed);
        slot.state.store(
            coop_phase::state(generation, coop_phase::ARMED),
            Ordering::Release,
        );
        let r = coop_copy(slot, peer, pid, probe_addr, start, chunk, n, dst);
        // Last access: the sender may free the slot once our FIN arrives.
        slot.state.store(
            coop_phase::state(generation, coop_phase::CLOSED),
            Ordering::Release,
        );
        let (read, reread) = r.map_err(|e| self.cma_error(peer, e))?;
        self.stats.coop_gets += 1;
        self.stats.coop_chunks_read += read;
        self.stats.coop_rereads += reread;
        Ok(true)
    }

    fn cma_error(&mut self, peer: u32, e: std::io::Error) -> BtlError {
        match e.raw_os_error() {
            Some(libc::EPERM) => {
                self.get_enabled = false;
                tracing::info!(target: "btl_sm", "CMA from rank {peer} denied ({e}); disabling single copy");
                BtlError::GetDenied { peer, source: e }
            }
            Some(libc::EFAULT) => {
                BtlError::BadRegion(format!("address range not mapped in rank {peer}"))
            }
            Some(libc::ESRCH) => BtlError::Protocol {
                peer,
                reason: "peer process is gone".into(),
            },
            _ => BtlError::io(format!("process_vm_readv from rank {peer}"), e),
        }
    }

    fn fbox_drained(&self, l: usize) -> bool {
        self.peers[l]
            .as_ref()
            .and_then(|s| s.fbox(self.me_local))
            .is_none_or(|fb| fb.drained())
    }
}

impl SmModule {
    /// One polling round: cooperative copies, up to `fbox_budget` records
    /// of each peer's fast box, then up to `poll_budget` FIFO fragments.
    /// Inlined into `progress` / `progress_waiting`: one call frame less
    /// per polling round (~20 instructions of an idle round).
    #[inline(always)]
    fn poll(&mut self, handler: &mut dyn BtlRecvHandler, fbox_budget: usize) -> usize {
        let Some(own) = self.own.as_ref() else {
            return 0;
        };
        let mut n = 0usize;
        for &(world, addr, size, l) in &self.rx {
            // SAFETY: `addr` is the fast box of `size` bytes that this peer
            // writes in our own segment (`Segment::fbox_raw` at attach),
            // mapped while `own` is (checked above); we are its only
            // reader.
            let fb = unsafe { Fbox::at(addr as *mut u8, size) };
            match fb.read(fbox_budget, &mut |tag, b| {
                handler.on_fragment(world, tag, b)
            }) {
                Ok(k) => {
                    if k > 0 {
                        self.tx[l].heard();
                    }
                    n += k
                }
                Err(pos) => {
                    tracing::error!(target: "btl_sm", "corrupt fast-box record from rank {world} at {pos}")
                }
            }
        }
        // The common idle round finds the FIFO empty (a fragment pushed
        // after this check is seen next round).
        if !own.fifo().looks_empty() {
            n += self.poll_fifo(handler);
        }
        self.stats.delivered += n as u64;
        // Help our receivers only in a round that brought nothing, and
        // tell them whether we wait: a fragment may start work of our own
        // (a rendezvous header whose read we do first, as in an exchange
        // where both sides send), and a receiver whose sender is busy
        // reads plain, in one piece.
        if !self.coop_live.is_empty() {
            self.coop_show_waiting(n == 0);
            if n == 0 {
                self.coop_help();
            }
        }
        self.maybe_unlink();
        n
    }

    /// Up to `poll_budget` fragments of this process's FIFO: peers'
    /// fragments to `handler` (and back to their owners), our own returned
    /// fragments to the free lists. Returns the number delivered.
    fn poll_fifo(&mut self, handler: &mut dyn BtlRecvHandler) -> usize {
        let Some(own) = self.own.as_ref() else {
            return 0;
        };
        let fifo = own.fifo();
        let mut n = 0usize;
        let segs = Segs {
            me: self.me_local,
            own,
            peers: &self.peers,
        };
        let mut returned = 0u64;
        for _ in 0..self.cfg.poll_budget {
            // SAFETY: this process is the only consumer of its FIFO (the
            // module is not Sync and progress takes &mut self).
            let Some(r) = (unsafe { fifo.pop(&segs) }) else {
                break;
            };
            let (l, off) = shm::unrel(r);
            if l == self.me_local {
                let Some((ptr, class, cap)) = own.frag_at(off) else {
                    continue;
                };
                // SAFETY: our fragment came back: popped, stable.
                if let Ok((_, dst, _)) = unsafe { shm::frag_data(ptr, cap) } {
                    if let Some(t) = self.tx.get(dst as usize) {
                        t.held_sub(class as usize);
                    }
                }
                match class {
                    Class::Eager => self.free_eager.push(off),
                    Class::Max => self.free_max.push(off),
                }
                returned += 1;
                continue;
            }
            let Some(seg) = self.peers.get(l).and_then(|s| s.as_ref()) else {
                tracing::error!(target: "btl_sm", "fragment from unknown local rank {l}");
                continue;
            };
            let Some((ptr, _, cap)) = seg.frag_at(off) else {
                continue;
            };
            let world = self.local_world[l];
            // SAFETY: popped from our FIFO: the sender wrote it before the
            // push and does not touch it until we push it back below.
            match unsafe { shm::frag_data(ptr, cap) } {
                Ok((tag, _, data)) => {
                    handler.on_fragment(world, tag, data);
                    n += 1;
                }
                Err(len) => tracing::error!(target: "btl_sm",
                    "fragment of {len} bytes from rank {world} exceeds its slot of {cap}"),
            }
            // SAFETY: we own the popped fragment until this push returns it
            // to its owner's FIFO.
            if !unsafe { seg.fifo().push(r, &segs) } {
                tracing::error!(target: "btl_sm", "cannot return a fragment to rank {world}");
            }
        }
        self.stats.returned += returned;
        n
    }
}

impl BtlModule for SmModule {
    fn name(&self) -> &str {
        "sm"
    }

    fn add_procs(&mut self, peers: &[u32], modex: &mut dyn Modex) -> Result<Vec<u32>, BtlError> {
        if self.own.is_none() {
            return Err(BtlError::Finalized);
        }
        let mut out = Vec::new();
        for &p in peers {
            let Some(l) = self.world_local.get(p as usize).copied().flatten() else {
                continue;
            };
            if l == self.me_local {
                continue;
            }
            if self.peers[l].is_none() {
                self.attach_peer(p, l, modex)?;
            }
            out.push(p);
        }
        self.maybe_unlink();
        Ok(out)
    }

    fn exclusivity(&self) -> u32 {
        self.cfg.exclusivity
    }
    fn latency(&self) -> u32 {
        1
    }
    fn bandwidth(&self) -> u32 {
        40_000
    }
    fn eager_limit(&self) -> usize {
        self.cfg.eager_limit
    }
    fn max_send_size(&self) -> usize {
        self.cfg.max_send_size
    }
    fn flags(&self) -> BtlFlags {
        let f = BtlFlags::SEND | BtlFlags::SENDI;
        if self.get_enabled {
            f | BtlFlags::GET
        } else {
            f
        }
    }

    fn send(&mut self, peer: u32, tag: u8, header: &[u8], payload: &[u8]) -> Result<(), BtlError> {
        let l = self.check_send(peer, header.len() + payload.len())?;
        if self.try_fbox(l, tag, header, payload) {
            return Ok(());
        }
        if !self.fbox_drained(l) {
            self.stats.would_block += 1;
            return Err(BtlError::WouldBlock);
        }
        self.send_fifo(l, tag, header, payload)
    }

    /// Fast box only: `WouldBlock` if the fragment is larger than
    /// `btl_sm_fbox_max`, the box is full, or FIFO fragments to the peer are
    /// outstanding.
    fn sendi(&mut self, peer: u32, tag: u8, header: &[u8], payload: &[u8]) -> Result<(), BtlError> {
        let l = self.check_send(peer, header.len() + payload.len())?;
        if self.try_fbox(l, tag, header, payload) {
            Ok(())
        } else {
            self.stats.would_block += 1;
            Err(BtlError::WouldBlock)
        }
    }

    /// The fast box or nothing, answered in a register (see the trait).
    fn try_sendi(&mut self, peer: u32, tag: u8, header: &[u8], payload: &[u8]) -> bool {
        let Ok(l) = self.check_send(peer, header.len() + payload.len()) else {
            return false;
        };
        if self.try_fbox(l, tag, header, payload) {
            true
        } else {
            self.stats.would_block += 1;
            false
        }
    }

    /// Key: this process's pid, plus a cooperative slot for regions of at
    /// least `btl_sm_coop_min` bytes while one is free ([`coop_key`]).
    /// Nothing is pinned; peers read with CMA.
    unsafe fn register_region(
        &mut self,
        ptr: *const u8,
        len: usize,
    ) -> Result<RemoteRegion, BtlError> {
        if self.own.is_none() {
            return Err(BtlError::Finalized);
        }
        if !self.get_enabled {
            return Err(BtlError::Unsupported(
                "register_region (single copy disabled)",
            ));
        }
        let addr = ptr as usize as u64;
        if addr.checked_add(len as u64).is_none() {
            return Err(BtlError::BadRegion("address range wraps".into()));
        }
        // Before the peer can read it; a range another reader still pins
        // is refused by the kernel and asked again later.
        self.huge.note(ptr as usize, len);
        let pid = self.pid;
        let mut key = coop_key(pid, None, 0);
        if self.cfg.coop_min > 0 && len >= self.cfg.coop_min {
            // Registering is work: every live slot shows "busy" until the
            // next idle round shows them all waiting, the new one included.
            self.coop_show_waiting(false);
            match self.coop_take() {
                Some(s) => {
                    let loc = &mut self.coop_local[s];
                    loc.generation = (loc.generation + 1) & ((1 << coop_phase::GEN_BITS) - 1);
                    loc.addr = addr;
                    loc.len = len as u64;
                    let g = loc.generation;
                    if let Some(slot) = self.own.as_ref().and_then(|o| o.coop_slot(s)) {
                        slot.owner_waiting.store(0, Ordering::Relaxed);
                        slot.state
                            .store(coop_phase::state(g, coop_phase::OWNED), Ordering::Release);
                    }
                    self.coop_live.push(s as u8);
                    self.stats.coop_regs += 1;
                    key = coop_key(pid, Some(s), g);
                }
                None => self.stats.coop_exhausted += 1,
            }
        }
        Ok(RemoteRegion {
            addr,
            len: len as u64,
            key,
        })
    }

    /// Frees the region's cooperative slot (next registration: new
    /// generation); a slot a receiver still has armed is quarantined.
    fn deregister_region(&mut self, region: &RemoteRegion) {
        let (pid, slot, generation) = split_key(region.key);
        let Some(s) = slot else { return };
        if pid != self.pid || s >= COOP_SLOTS {
            return;
        }
        let Some(i) = self.coop_live.iter().position(|&x| x as usize == s) else {
            return;
        };
        let loc = self.coop_local[s];
        if loc.generation != generation || loc.addr != region.addr || loc.len != region.len {
            return;
        }
        self.coop_live.swap_remove(i);
        let Some(own) = self.own.as_ref() else { return };
        let Some(slot) = own.coop_slot(s) else { return };
        // OWNED (never armed) or CLOSED: free now. ARMING/ARMED: the
        // receiver is inside its get (the request failed on our side):
        // it closes the slot on its way out.
        let owned = coop_phase::state(generation, coop_phase::OWNED);
        let free = coop_phase::state(generation, coop_phase::FREE);
        let freed = slot
            .state
            .compare_exchange(owned, free, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
            || slot.state.load(Ordering::Acquire)
                == coop_phase::state(generation, coop_phase::CLOSED);
        if freed {
            self.coop_free.push(s as u8);
        } else {
            self.coop_quarantine.push(s as u8);
        }
    }

    fn get(
        &mut self,
        peer: u32,
        region: &RemoteRegion,
        offset: u64,
        dst: &mut [u8],
    ) -> Result<(), BtlError> {
        if self.own.is_none() {
            return Err(BtlError::Finalized);
        }
        let l = self.local_of(peer)?;
        if !self.get_enabled {
            return Err(BtlError::Unsupported("get (single copy disabled)"));
        }
        let pid = self.peers[l].as_ref().map_or(0, |s| s.pid);
        let (key_pid, slot, generation) = split_key(region.key);
        if key_pid != pid || region.key >> 32 != 0 && slot.is_none_or(|s| s >= COOP_SLOTS) {
            return Err(BtlError::BadRegion(format!(
                "region key {:#x} (process {key_pid}) read from rank {peer} (process {pid})",
                region.key
            )));
        }
        let start = region.check_access(offset, dst.len())?;
        if dst.is_empty() {
            return Ok(());
        }
        // Our own read is work: our receivers should not count on help.
        if !self.coop_live.is_empty() {
            self.coop_show_waiting(false);
        }
        // The whole region (what the pml's rendezvous reads): cooperative
        // copy if the key names a slot; pieces and prefixes: plain read.
        // A thread that asked to copy alone ([`tmpi_smsc::copy_alone`]) reads
        // those whole regions alone too.
        if let (Some(s), 0) = (slot, offset) {
            if dst.len() as u64 == region.len {
                if tmpi_smsc::copy_alone::copying_alone() {
                    self.stats.coop_declined += 1;
                } else if self.coop_get(peer, l, s, generation, start, dst)? {
                    return Ok(());
                }
            }
        }
        cma::read(pid, start, dst).map_err(|e| self.cma_error(peer, e))
    }

    fn progress(&mut self, handler: &mut dyn BtlRecvHandler) -> usize {
        self.poll(handler, FBOX_BUDGET)
    }

    fn progress_waiting(&mut self, handler: &mut dyn BtlRecvHandler) -> usize {
        self.poll(handler, FBOX_BUDGET_WAITING)
    }

    /// The fast box the peer writes in our segment, shared with the
    /// module (`crate::direct`).
    fn direct_recv(&self, peer: u32) -> Option<Arc<dyn DirectRecv>> {
        let l = self.local_of(peer).ok()?;
        if l == self.me_local || self.peers[l].is_none() {
            return None;
        }
        Some(Arc::clone(&self.rx_direct[l]) as Arc<dyn DirectRecv>)
    }

    /// The peer's fast box, shared with the module (`crate::direct`).
    fn direct_send(&self, peer: u32) -> Option<Arc<dyn DirectSend>> {
        let l = self.local_of(peer).ok()?;
        if l == self.me_local || self.peers[l].is_none() {
            return None;
        }
        Some(Arc::clone(&self.tx[l]) as Arc<dyn DirectSend>)
    }

    fn take_failed_peers(&mut self) -> Vec<(u32, String)> {
        let now = std::time::Instant::now();
        if now.duration_since(self.last_look) < LIVENESS_EVERY {
            return Vec::new();
        }
        self.last_look = now;
        let mut out = Vec::new();
        for l in 0..self.watch.len() {
            let (Some(w), Some(seg)) = (&self.watch[l], &self.peers[l]) else {
                continue;
            };
            match self.gone[l] {
                0 if w.exited() && !seg.finalized() => self.gone[l] = 1,
                1 => {
                    self.gone[l] = 2;
                    out.push((
                        self.local_world[l],
                        format!("its process {} ended without finalizing", seg.pid),
                    ));
                }
                _ => {}
            }
        }
        out
    }

    fn finalize(&mut self) -> Result<(), BtlError> {
        if let Some(own) = &self.own {
            own.mark_finalized();
        }
        if self.own.is_some() {
            self.unlink();
            // Direct handles still held by the pml refuse from now on.
            self.tx.iter().for_each(|t| t.detach());
            self.rx_direct.iter().for_each(|r| r.detach());
            self.rx.clear();
            self.peers.iter_mut().for_each(|p| *p = None);
            self.own = None;
            tracing::debug!(target: "btl_sm", stats = ?self.stats(), "finalized");
        }
        Ok(())
    }
}

impl Drop for SmModule {
    fn drop(&mut self) {
        let _ = self.finalize();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_round_trip_and_plain_keys_stay_pids() {
        let pid = 4_194_303u32;
        assert_eq!(coop_key(pid, None, 77), pid as u64);
        assert_eq!(split_key(pid as u64), (pid, None, 0));
        for s in [0usize, 1, 31, COOP_SLOTS - 1] {
            for g in [1u32, 2, (1 << coop_phase::GEN_BITS) - 1] {
                let k = coop_key(pid, Some(s), g);
                assert_eq!(split_key(k), (pid, Some(s), g), "slot {s} gen {g}");
                assert_ne!(k, pid as u64);
            }
        }
        // generations wrap to the key's width; distinct slots, distinct keys
        assert_eq!(split_key(coop_key(1, Some(3), 1 << 24)).2, 0);
        assert_ne!(coop_key(1, Some(3), 5), coop_key(1, Some(4), 5));
        assert_ne!(coop_key(1, Some(3), 5), coop_key(1, Some(3), 6));
    }

    #[test]
    fn chunking_bounds() {
        for len in [
            32 << 10,
            (32 << 10) + 1,
            64 << 10,
            128 << 10,
            200 << 10,
            256 << 10,
            1 << 20,
            (1 << 20) + 1,
            3 << 20,
            8 << 20,
            1 << 30,
        ] {
            for min in [16 << 10, 64 << 10, 128 << 10, 1 << 20] {
                let (c, n) = coop_chunking(len, min);
                assert!(
                    c >= COOP_MIN_CHUNK && c % 4096 == 0,
                    "{len} {min}: chunk {c}"
                );
                assert!(c <= min.max(len.div_ceil(64).div_ceil(4096) * 4096));
                assert!(
                    (2..=COOP_MAX_CHUNKS).contains(&n),
                    "{len} {min}: {n} chunks"
                );
                assert!(n * c >= len && (n - 1) * c < len);
            }
        }
        assert_eq!(coop_chunking(1 << 20, 128 << 10), (128 << 10, 8));
        assert_eq!(coop_chunking(128 << 10, 128 << 10), (64 << 10, 2));
        assert_eq!(coop_chunking(100 << 10, 128 << 10).1, 2);
        assert_eq!(coop_chunking(64 << 10, 128 << 10), (32 << 10, 2));
        assert_eq!(coop_chunking(32 << 10, 128 << 10), (16 << 10, 2));
        // at most the smallest chunk: one chunk, the plain read
        assert_eq!(coop_chunking(16 << 10, 128 << 10).1, 1);
    }
}
