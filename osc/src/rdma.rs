//! The rdma component: `MPI_Put` and `MPI_Get` by RDMA write and read into
//! the target's registered window memory, accumulates by RDMA under the
//! target's accumulate lock taken by NIC atomics and window locks by NIC
//! atomics (Open MPI's osc/rdma), fence and PSCW by an inner [`Pt2pt`]
//! module of the same window.
//!
//! * **Windows served**: `MPI_Win_create` and `MPI_Win_allocate` windows
//!   (not in a shared segment: sm serves those) whose every rank reaches
//!   every other rank of the window through a BTL with RDMA put and get
//!   (btl-openib; not self, sm or tcp). Dynamic windows, and windows that
//!   do not qualify, are served by pt2pt alone: the component's `create`
//!   returns a pt2pt module then.
//! * **Agreement**: creation allgathers, from every rank, whether it
//!   qualifies (all its peers reached by RDMA and its memory registered),
//!   whether NIC atomics reach every rank (itself included) and its state
//!   region is registered, its window size and displacement unit, and its
//!   registration keys ([`RdmaKeys`]) of window and state. Every rank sees
//!   every flag, so all take rdma or all fall back to pt2pt together
//!   (deregistering what they registered), and all send accumulates by
//!   the NIC or all by pt2pt.
//! * **Put/get**: checked like pt2pt's (types, rank, target range, access
//!   epoch: the inner module's epoch state), then one blocking RDMA
//!   operation per contiguous run of the target datatype (adjacent runs
//!   merged), from or into the origin buffer when it is contiguous, else
//!   through a packed copy (pack before a put, unpack after a get). A put
//!   of up to [`IN_FLIGHT_MAX`] bytes to another process is copied and its
//!   writes left in flight until the synchronisation that covers the
//!   target ([`Rdma::complete_puts`]); every other operation is complete
//!   at the target when the call returns (the completion of the RC write
//!   or read was polled). A target that is this process is served by a
//!   copy.
//! * **Accumulates** (accumulate, get_accumulate, fetch_and_op,
//!   compare_and_swap): checked like pt2pt's, then [`Rdma::locked_rmw`]:
//!   the target's accumulate lock (word 0 of its state region) taken by
//!   NIC compare-swap, the target's runs read by RDMA, combined locally,
//!   written back by RDMA, the lock released by NIC fetch-add. The lock
//!   word is only ever touched by NIC atomics, this process's own too
//!   (through the NIC's loopback): with `IBV_ATOMIC_HCA` a CPU atomic is
//!   not atomic with the NIC's (docs/verbs.md "Atomic operations").
//! * **Window locks**: `MPI_Win_lock`/`lock_all` by NIC atomics on word 1
//!   of the target's state region ([`Rdma::win_lock`]); the inner module
//!   keeps the epoch's bookkeeping (called with `MPI_MODE_NOCHECK`: no
//!   lock messages).
//! * **Delegated**: fence, PSCW, flush, sync and the request-based
//!   operations' epoch check go to the inner pt2pt module: its messages,
//!   its target-side serving, its semantics; accumulates and window locks
//!   too when some rank lacks NIC atomics. Why mixing RDMA with pt2pt's
//!   messages is correct is explained in `docs/osc.md`.
//! * **Free**: the inner module's collective free, then deregistration
//!   (after the barrier in it no peer writes any more).
//!
//! Counters of the RDMA operations issued are logged at free (target
//! `osc`, info level: `--mca osc_base_verbose 50`).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tmpi_base::component::{Availability, ComponentDescriptor};
use tmpi_base::mca::{McaError, Registry};
use tmpi_coll::{Datatype, Op};
use tmpi_comm::Comm;
use tmpi_pml::{Pml, RdmaAtomic, RdmaKeys, RdmaToken};

use crate::apply;
use crate::assert::NOCHECK;
use crate::epoch::check_rank;
use crate::mem::{bytes, bytes_mut, pack, unpack};
use crate::pt2pt::Pt2pt;
use crate::{
    AccOp, Buf, BufMut, Component, Layout, LockType, Memory, Module, OscError, Result, Target,
};

/// The component.
pub struct RdmaComponent;

/// Default priority: between sm's (20) and pt2pt's (10).
const PRIORITY: i64 = 15;

fn register_params(reg: &Registry) -> std::result::Result<(), McaError> {
    reg.register_priority("osc", "rdma", PRIORITY)?;
    Ok(())
}

/// The component's description (`tmpi_info`, the `osc` selection list).
pub static DESCRIPTOR: ComponentDescriptor = ComponentDescriptor {
    framework: "osc",
    name: "rdma",
    priority: PRIORITY as i32,
    description:
        "put and get by RDMA write/read into the target's registered window (btl-openib), \
                  everything else by pt2pt; windows whose peers are all reached over RDMA",
    register_params,
    probe: || Availability::Available,
};

impl Component for RdmaComponent {
    fn name(&self) -> &'static str {
        "rdma"
    }
    fn accepts(&self, _comm: &Comm, shared_segment: bool) -> bool {
        // Whether the peers are reached over RDMA is known per process
        // only; `create` agrees on it (and falls back to pt2pt together).
        !shared_segment
    }
    fn create(&self, pml: &Arc<Pml>, comm: &Comm, mem: &Memory) -> Result<Box<dyn Module>> {
        let inner = Pt2pt::new(pml, comm, mem)?;
        if mem.is_dynamic() {
            return Ok(Box::new(inner));
        }
        match Rdma::new(pml, comm, mem, inner)? {
            Ok(m) => Ok(Box::new(m)),
            Err(inner) => Ok(Box::new(inner)),
        }
    }
}

/// Bytes of one rank's creation record: qualifies (1 byte), has NIC
/// atomics to every rank and its state registered (1 byte), gave
/// `acc_single_intrinsic` (1 byte), window base 8-byte aligned (1 byte;
/// the four padded to 8), window size, displacement unit, the window's registration keys, the
/// state's registration keys.
const REC: usize = 24 + 2 * RdmaKeys::BYTES;

/// Bytes of a rank's state region: word 0 is its accumulate lock.
const STATE_WORDS: usize = 8;

/// The accumulate lock's byte offset in the state region.
const ACC_LOCK: u64 = 0;

/// The window lock's byte offset in the state region: the number of
/// shared holders in the low 32 bits, [`EXCLUSIVE`] while an exclusive
/// holder has it.
const WIN_LOCK: u64 = 8;

/// The window lock's exclusive bit.
const EXCLUSIVE: u64 = 1 << 32;

/// RDMA writes a window keeps in flight before a put waits for them.
const MAX_IN_FLIGHT: usize = 64;

/// Largest put whose data is copied and whose RDMA writes are left in
/// flight; larger puts write from the origin buffer and wait.
const IN_FLIGHT_MAX: usize = 8192;

/// An RDMA write of a put, started and not yet known complete.
struct InFlight {
    target: i32,
    token: RdmaToken,
    /// The copy of the origin's data the write reads, kept until the
    /// write completes.
    _packed: Option<Arc<Vec<u8>>>,
}

/// The module of one window.
pub struct Rdma {
    inner: Pt2pt,
    pml: Arc<Pml>,
    rank: i32,
    size: i32,
    /// Base address of this rank's window (a target that is this process).
    base: usize,
    /// World rank of each window rank.
    worlds: Vec<u32>,
    /// (size in bytes, displacement unit) of every rank's window.
    peers: Vec<(u64, u64)>,
    /// Every rank's registration keys (this rank's: empty).
    keys: Vec<RdmaKeys>,
    /// This rank's registration, until free.
    mine: Mutex<Option<RdmaKeys>>,
    /// Accumulates, fetch_and_op and compare_and_swap go through NIC
    /// atomics (every rank agreed); otherwise through the inner pt2pt.
    nic_acc: bool,
    /// Every rank gave `acc_single_intrinsic` (and `nic_acc`): a
    /// single-element 8-byte accumulate-class operation on an aligned
    /// word is NIC atomics on it, without the accumulate lock.
    single: bool,
    /// Whether each rank's window base is 8-byte aligned.
    aligned: Vec<bool>,
    /// Every rank's state registration (this rank's too: its own
    /// accumulate lock is taken through the NIC's loopback); empty
    /// without `nic_acc`.
    state_keys: Vec<RdmaKeys>,
    /// This rank's state registration, until free.
    state_mine: Mutex<Option<RdmaKeys>>,
    /// Window locks this rank holds by NIC atomics (`MPI_Win_lock`
    /// without `MPI_MODE_NOCHECK` on a `nic_acc` window), per target.
    held: Mutex<HashMap<i32, LockType>>,
    /// `MPI_Win_lock_all` holds a shared lock on every rank.
    held_all: Mutex<bool>,
    /// Window locks taken by NIC atomics so far (lock_all: one per rank).
    win_locks: AtomicU64,
    /// Serialises this process's read-modify-writes on targets it holds
    /// exclusively (they skip the accumulate lock, but two threads of
    /// this process may still race).
    exclusive_rmw: Mutex<()>,
    /// Read-modify-writes done under an exclusive window lock, without
    /// the accumulate lock.
    exclusive_rmws: AtomicU64,
    /// Puts' RDMA writes in flight, completed by the synchronisation that
    /// covers their target (flush, unlock, fence, complete, free); the
    /// lock is held while waiting, so a second thread's flush returns only
    /// after the writes it covers completed.
    in_flight: Mutex<Vec<InFlight>>,
    /// This rank's state region (the accumulate lock), written only by
    /// NIC atomics and never read here: kept alive while registered
    /// (until free or drop), freed after.
    _state: Box<[AtomicU64; STATE_WORDS]>,
    puts: AtomicU64,
    atomics: AtomicU64,
    /// Accumulate-class operations done as single NIC atomics (or a
    /// compare-swap loop) under `single`.
    intrinsic_ops: AtomicU64,
    gets: AtomicU64,
    bytes: AtomicU64,
}

impl Rdma {
    /// The module, or `Err(inner)` when some rank does not qualify (every
    /// rank decides alike). Collective over `comm`.
    fn new(
        pml: &Arc<Pml>,
        comm: &Comm,
        mem: &Memory,
        inner: Pt2pt,
    ) -> Result<std::result::Result<Rdma, Pt2pt>> {
        let worlds: Vec<u32> = comm.group().world_ranks().to_vec();
        let me = comm.rank() as usize;
        let others: Vec<u32> = worlds
            .iter()
            .enumerate()
            .filter(|&(r, _)| r != me)
            .map(|(_, &w)| w)
            .collect();
        let reachable = !others.is_empty() && others.iter().all(|&w| pml.rdma_reachable(w));
        let mut why = String::new();
        let mut mine = None;
        if reachable && mem.size > 0 {
            // SAFETY: the window's memory stays allocated until the module
            // is freed or dropped, which deregisters it first (the Window
            // drops its module before the memory it owns).
            match unsafe { pml.rdma_register(mem.base as *mut u8, mem.size, &others) } {
                Ok(k) if k.is_empty() => why = "no module registered the window".into(),
                Ok(k) => mine = Some(k),
                Err(e) => why = e.to_string(),
            }
        } else if others.is_empty() {
            why = "a window of one rank: nothing to reach by RDMA".into();
        } else if !reachable {
            why = "a peer is not reached through a BTL with RDMA put and get".into();
        }
        // The accumulate lock: NIC atomics must reach every rank, this
        // one included (its own lock is taken through the NIC as well).
        let state: Box<[AtomicU64; STATE_WORDS]> = Box::default();
        let mut state_mine = None;
        if reachable && worlds.iter().all(|&w| pml.rdma_atomics(w)) {
            // SAFETY: `state` is owned by the module, which deregisters it
            // (free or drop) before the box is dropped; its words are
            // atomics, so the NIC writing them is interior mutation that
            // this process never reads.
            match unsafe { pml.rdma_register(state[0].as_ptr().cast(), STATE_WORDS * 8, &others) } {
                Ok(k) if !k.is_empty() => state_mine = Some(k),
                Ok(k) => pml.rdma_deregister(&k),
                Err(e) => {
                    tracing::debug!(target: "osc", "osc rdma: registering the accumulate lock failed: {e}")
                }
            }
        }
        let encoded = match &mine {
            Some(k) => match k.encode() {
                Some(b) => Some(b),
                None => {
                    why = "the window is registered with too many modules".into();
                    None
                }
            },
            None => None,
        };
        let state_encoded = state_mine.as_ref().and_then(|k| k.encode());
        let ok = reachable && (mem.size == 0 || encoded.is_some());
        let mut rec = [0u8; REC];
        rec[0] = u8::from(ok);
        rec[1] = u8::from(state_encoded.is_some());
        rec[2] = u8::from(mem.hints.acc_single_intrinsic);
        rec[3] = u8::from(mem.base.is_multiple_of(8));
        rec[8..16].copy_from_slice(&(mem.size as u64).to_le_bytes());
        rec[16..24].copy_from_slice(&(mem.disp_unit as u64).to_le_bytes());
        if let Some(b) = &encoded {
            rec[24..24 + RdmaKeys::BYTES].copy_from_slice(b);
        }
        if let Some(b) = &state_encoded {
            rec[24 + RdmaKeys::BYTES..].copy_from_slice(b);
        }
        let mut all = vec![0u8; REC * worlds.len()];
        let gathered = comm.allgather(tmpi_coll::Input::Buf(&rec), &mut all);
        let release = |keys: &[&Option<RdmaKeys>]| {
            for k in keys.iter().copied().flatten() {
                pml.rdma_deregister(k);
            }
        };
        if let Err(e) = gathered {
            release(&[&mine, &state_mine]);
            return Err(e.into());
        }
        let recs: Vec<&[u8]> = all.chunks(REC).collect();
        if let Some(r) = recs.iter().position(|c| c[0] != 1) {
            release(&[&mine, &state_mine]);
            if r == me {
                tracing::info!(target: "osc", "osc rdma: this rank does not qualify ({why}); the window goes to pt2pt");
            } else {
                tracing::info!(target: "osc", "osc rdma: rank {r} does not qualify; the window goes to pt2pt");
            }
            return Ok(Err(inner));
        }
        let word =
            |c: &[u8], at: usize| u64::from_le_bytes(c[at..at + 8].try_into().unwrap_or_default());
        let peers: Vec<(u64, u64)> = recs.iter().map(|c| (word(c, 8), word(c, 16))).collect();
        let undecodable = |r: usize| {
            // Every rank decoded its own keys alike: cannot differ, but
            // fail loudly rather than guess.
            OscError::Comm(format!("rdma: rank {r}'s registration keys do not decode"))
        };
        let mut keys = Vec::with_capacity(recs.len());
        for (r, c) in recs.iter().enumerate() {
            // This rank's own keys too: its own window is reached by NIC
            // atomics through the loopback (single-element operations).
            let k = if peers[r].0 == 0 {
                RdmaKeys::default()
            } else {
                match RdmaKeys::decode(&c[24..24 + RdmaKeys::BYTES]) {
                    Some(k) => k,
                    None => {
                        release(&[&mine, &state_mine]);
                        return Err(undecodable(r));
                    }
                }
            };
            keys.push(k);
        }
        let nic_acc = recs.iter().all(|c| c[1] == 1);
        let single = nic_acc && recs.iter().all(|c| c[2] == 1);
        let aligned = recs.iter().map(|c| c[3] == 1).collect();
        let mut state_keys = Vec::new();
        if nic_acc {
            for (r, c) in recs.iter().enumerate() {
                match RdmaKeys::decode(&c[24 + RdmaKeys::BYTES..]) {
                    Some(k) => state_keys.push(k),
                    None => {
                        release(&[&mine, &state_mine]);
                        return Err(undecodable(r));
                    }
                }
            }
        } else {
            release(&[&state_mine]);
            state_mine = None;
            if rec[1] == 1 || me == 0 {
                tracing::info!(target: "osc", "osc rdma: not every rank has NIC atomics to every rank; accumulates go by pt2pt messages");
            }
        }
        tracing::debug!(target: "osc", "rdma window: rank {me} of {}, {} bytes registered, accumulates by {}",
            worlds.len(), mem.size,
            if single { "single NIC atomics where they fit (acc_single_intrinsic), else under the accumulate lock" }
            else if nic_acc { "RDMA under the accumulate lock" } else { "pt2pt" });
        Ok(Ok(Rdma {
            inner,
            pml: Arc::clone(pml),
            rank: me as i32,
            size: worlds.len() as i32,
            base: mem.base,
            worlds,
            peers,
            keys,
            mine: Mutex::new(mine),
            nic_acc,
            single,
            aligned,
            state_keys,
            state_mine: Mutex::new(state_mine),
            held: Mutex::new(HashMap::new()),
            held_all: Mutex::new(false),
            win_locks: AtomicU64::new(0),
            exclusive_rmw: Mutex::new(()),
            exclusive_rmws: AtomicU64::new(0),
            in_flight: Mutex::new(Vec::new()),
            _state: state,
            puts: AtomicU64::new(0),
            atomics: AtomicU64::new(0),
            intrinsic_ops: AtomicU64::new(0),
            gets: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
        }))
    }

    /// The byte offset of the target region in the target's window,
    /// checked against it.
    fn target_offset(&self, t: &Target<'_>) -> Result<i64> {
        check_rank(t.rank, self.size)?;
        let (wsize, unit) = self.peers[t.rank as usize];
        crate::target_offset(t, wsize, unit, false)
    }

    /// The contiguous runs (target byte offset, length) of the target
    /// datatype's items from `off`, in type-map order, adjacent runs
    /// merged.
    /// `off` may be negative (a displacement below a type's lower bound);
    /// the runs themselves lie in the window (the caller checked the span).
    fn runs(off: i64, t: &Target<'_>) -> Vec<(u64, usize)> {
        let l = t.layout;
        let mut out: Vec<(u64, usize)> = Vec::new();
        if l.is_contig(t.count) {
            let n = l.size * t.count;
            if n > 0 {
                out.push((off.max(0) as u64, n));
            }
            return out;
        }
        for i in 0..t.count {
            for &(o, n) in &l.blocks {
                if n == 0 {
                    continue;
                }
                let at = (off as i128 + i as i128 * l.extent as i128 + o as i128).max(0) as u64;
                match out.last_mut() {
                    Some((s, len)) if *s + *len as u64 == at => *len += n,
                    _ => out.push((at, n)),
                }
            }
        }
        out
    }

    /// One transfer of `len` bytes at byte `at` of rank `rank`'s window.
    ///
    /// # Safety
    /// `buf..buf+len` readable (put) or writable and not otherwise
    /// accessed (get) during the call; `at..at+len` inside the window.
    unsafe fn transfer(
        &self,
        rank: i32,
        at: u64,
        buf: *mut u8,
        len: usize,
        put: bool,
    ) -> Result<()> {
        if rank == self.rank {
            let w = (self.base + at as usize) as *mut u8;
            // SAFETY: `at..at+len` lies in this rank's window (checked by
            // the caller), `buf..buf+len` is the caller's; they may overlap
            // (a put from the window into itself), hence `copy`.
            unsafe {
                if put {
                    std::ptr::copy(buf as *const u8, w, len);
                } else {
                    std::ptr::copy(w as *const u8, buf, len);
                }
            }
            return Ok(());
        }
        let world = self.worlds[rank as usize];
        let keys = &self.keys[rank as usize];
        // SAFETY: forwarded from this function's contract.
        unsafe {
            if put {
                self.pml.rdma_put(world, keys, at, buf, len)?;
            } else {
                self.pml.rdma_get(world, keys, at, buf, len)?;
            }
        }
        let c = if put { &self.puts } else { &self.gets };
        c.fetch_add(1, Ordering::Relaxed);
        self.bytes.fetch_add(len as u64, Ordering::Relaxed);
        Ok(())
    }

    /// Starts the RDMA write of `len` bytes at `src` to byte `at` of rank
    /// `rank`'s window (another process), to be completed by
    /// [`Rdma::complete_puts`]; `packed` is the copy `src` points into.
    ///
    /// # Safety
    /// `src..src+len` lies in `packed` (kept alive by the in-flight entry
    /// until the write completes); `at..at+len` inside the window.
    unsafe fn start_put(
        &self,
        rank: i32,
        at: u64,
        src: *const u8,
        len: usize,
        packed: Option<Arc<Vec<u8>>>,
    ) -> Result<()> {
        let full = lock_of(&self.in_flight).len() >= MAX_IN_FLIGHT;
        if full {
            self.complete_puts(None)?;
        }
        let world = self.worlds[rank as usize];
        let keys = &self.keys[rank as usize];
        // SAFETY: forwarded from this function's contract.
        let token = unsafe { self.pml.rdma_put_start(world, keys, at, src, len) }?;
        lock_of(&self.in_flight).push(InFlight {
            target: rank,
            token,
            _packed: packed,
        });
        self.puts.fetch_add(1, Ordering::Relaxed);
        self.bytes.fetch_add(len as u64, Ordering::Relaxed);
        Ok(())
    }

    /// Waits for the puts' RDMA writes in flight to `rank` (every target:
    /// `None`); the first failure.
    fn complete_puts(&self, rank: Option<i32>) -> Result<()> {
        let mut all = lock_of(&self.in_flight);
        if all.is_empty() {
            return Ok(());
        }
        let (done, keep): (Vec<InFlight>, Vec<InFlight>) = std::mem::take(&mut *all)
            .into_iter()
            .partition(|p| rank.is_none_or(|r| p.target == r));
        *all = keep;
        let tokens: Vec<RdmaToken> = done.iter().map(|p| p.token).collect();
        // Waited for with the list locked: another thread's flush of the
        // same target returns only after these completed.
        let res = self.pml.rdma_wait(&tokens);
        drop(done);
        drop(all);
        Ok(res?)
    }

    /// `(RDMA writes, RDMA reads, NIC atomics, single-element operations
    /// done by NIC atomics alone, bytes)` issued by this window so far.
    pub fn counters(&self) -> (u64, u64, u64, u64, u64) {
        (
            self.puts.load(Ordering::Relaxed),
            self.gets.load(Ordering::Relaxed),
            self.atomics.load(Ordering::Relaxed),
            self.intrinsic_ops.load(Ordering::Relaxed),
            self.bytes.load(Ordering::Relaxed),
        )
    }

    /// The byte offset of the target word when `t` may be done by NIC
    /// atomics alone: every rank gave `acc_single_intrinsic`, the target
    /// is one 8-byte element of a predefined type (no gaps, no lower
    /// bound) at an 8-byte-aligned address of the target's memory.
    fn intrinsic_word(&self, off: i64, t: &Target<'_>) -> Option<u64> {
        let l = t.layout;
        let one_word = t.count == 1
            && l.size == 8
            && l.elem.is_some()
            && l.wide.is_none()
            && l.blocks.as_slice() == [(0, 8)];
        (self.single
            && one_word
            && off >= 0
            && off % 8 == 0
            && self.aligned[t.rank as usize]
            && !self.keys[t.rank as usize].is_empty())
        .then_some(off as u64)
    }

    /// One NIC atomic on byte `at` of rank `r`'s registration among
    /// `keys` (its window's, [`Rdma::keys`], or its state region's,
    /// [`Rdma::state_keys`]); the value found.
    fn nic_atomic(&self, keys: &[RdmaKeys], r: i32, at: u64, op: RdmaAtomic) -> Result<u64> {
        let found = self
            .pml
            .rdma_atomic(self.worlds[r as usize], &keys[r as usize], at, op)?;
        self.atomics.fetch_add(1, Ordering::Relaxed);
        Ok(found)
    }

    /// One NIC atomic on word `at` of rank `r`'s window; the value found.
    fn word_atomic(&self, r: i32, at: u64, op: RdmaAtomic) -> Result<u64> {
        self.nic_atomic(&self.keys, r, at, op)
    }

    /// A single-element accumulate-class operation (`op` with the 8 bytes
    /// `data`) on word `at` of rank `r`'s window by NIC atomics alone (see
    /// [`Rdma::intrinsic_word`]): `MPI_SUM` on an 8-byte integer is one
    /// fetch-add, `MPI_NO_OP` a fetch-add of 0, every other op a
    /// compare-swap loop (read by a fetch-add of 0, combine locally, swap
    /// if unchanged, else again with the value found). The old value.
    fn intrinsic(
        &self,
        r: i32,
        at: u64,
        op: &AccOp,
        elem: Option<Datatype>,
        data: &[u8],
    ) -> Result<[u8; 8]> {
        self.intrinsic_ops.fetch_add(1, Ordering::Relaxed);
        let word = |b: &[u8]| -> Result<u64> {
            <[u8; 8]>::try_from(b).map(u64::from_ne_bytes).map_err(|_| {
                OscError::Type(format!(
                    "{} bytes where one 8-byte element was expected",
                    b.len()
                ))
            })
        };
        let old = match op {
            AccOp::NoOp => self.word_atomic(r, at, RdmaAtomic::FetchAdd(0))?,
            AccOp::Reduce(Op::Sum) if matches!(elem, Some(Datatype::I64 | Datatype::U64)) => {
                self.word_atomic(r, at, RdmaAtomic::FetchAdd(word(data)?))?
            }
            _ => {
                let mut cur = self.word_atomic(r, at, RdmaAtomic::FetchAdd(0))?;
                loop {
                    let mut new = cur.to_ne_bytes();
                    apply::combine(op, elem, None, data, &mut new)?;
                    let swap = u64::from_ne_bytes(new);
                    let found =
                        self.word_atomic(r, at, RdmaAtomic::CmpSwap { compare: cur, swap })?;
                    if found == cur {
                        break cur;
                    }
                    cur = found;
                }
            }
        };
        Ok(old.to_ne_bytes())
    }

    fn deregister(&self) {
        for m in [&self.mine, &self.state_mine] {
            let k = lock_of(m).take();
            if let Some(k) = k {
                self.pml.rdma_deregister(&k);
            }
        }
    }

    /// One NIC atomic on word `at` of rank `r`'s state region; the value
    /// found.
    fn state_atomic(&self, r: i32, at: u64, op: RdmaAtomic) -> Result<u64> {
        self.nic_atomic(&self.state_keys, r, at, op)
    }

    /// Takes rank `r`'s accumulate lock: a NIC compare-swap of 0 to this
    /// rank + 1, repeated until it finds 0 (each attempt is a round trip
    /// that also makes this process's progress, which a soft NIC needs to
    /// serve the holder's release). Threads of one rank exclude each other
    /// as well: the word is not 0 while any of them holds it.
    fn acc_lock(&self, r: i32) -> Result<()> {
        let mine = self.rank as u64 + 1;
        loop {
            let op = RdmaAtomic::CmpSwap {
                compare: 0,
                swap: mine,
            };
            if self.state_atomic(r, ACC_LOCK, op)? == 0 {
                return Ok(());
            }
            std::thread::yield_now();
        }
    }

    /// Releases rank `r`'s accumulate lock (a NIC fetch-add taking this
    /// rank's mark away: the word is only ever changed by NIC atomics).
    fn acc_unlock(&self, r: i32) -> Result<()> {
        let mine = self.rank as u64 + 1;
        let found = self.state_atomic(r, ACC_LOCK, RdmaAtomic::FetchAdd(mine.wrapping_neg()))?;
        if found != mine {
            return Err(OscError::Comm(format!(
                "rank {r}'s accumulate lock held {found} while this rank (mark {mine}) released it"
            )));
        }
        Ok(())
    }

    /// Takes rank `r`'s window lock by NIC atomics: exclusive by
    /// compare-swap of 0 to [`EXCLUSIVE`], repeated until it finds 0;
    /// shared by fetch-add of 1, given back (fetch-add of -1) and tried
    /// again while it finds the exclusive bit set (Open MPI's osc/rdma
    /// protocol).
    fn win_lock(&self, kind: LockType, r: i32) -> Result<()> {
        loop {
            let got = match kind {
                LockType::Exclusive => {
                    let op = RdmaAtomic::CmpSwap {
                        compare: 0,
                        swap: EXCLUSIVE,
                    };
                    self.state_atomic(r, WIN_LOCK, op)? == 0
                }
                LockType::Shared => {
                    let found = self.state_atomic(r, WIN_LOCK, RdmaAtomic::FetchAdd(1))?;
                    if found & EXCLUSIVE != 0 {
                        self.state_atomic(r, WIN_LOCK, RdmaAtomic::FetchAdd(1u64.wrapping_neg()))?;
                        false
                    } else {
                        true
                    }
                }
            };
            if got {
                self.win_locks.fetch_add(1, Ordering::Relaxed);
                return Ok(());
            }
            std::thread::yield_now();
        }
    }

    /// Releases rank `r`'s window lock of `kind` this rank holds; the
    /// value found must show it held.
    fn win_unlock(&self, kind: LockType, r: i32) -> Result<()> {
        let (take, mask) = match kind {
            LockType::Exclusive => (EXCLUSIVE, EXCLUSIVE),
            LockType::Shared => (1, EXCLUSIVE - 1),
        };
        let found = self.state_atomic(r, WIN_LOCK, RdmaAtomic::FetchAdd(take.wrapping_neg()))?;
        if found & mask == 0 {
            return Err(OscError::Comm(format!(
                "rank {r}'s window lock word was {found:#x} when this rank released its {kind:?} lock"
            )));
        }
        Ok(())
    }

    /// A read-modify-write of the target region `t` (runs from byte
    /// `off`, `want` bytes of data) under the target's accumulate lock:
    /// its bytes read by RDMA, combined with the packed origin `data` by
    /// `op` (with `compare`: replaced by `data` if they equal `compare`),
    /// written back by RDMA unless unchanged by definition (`MPI_NO_OP`,
    /// a failed compare); the old bytes. Every accumulate-class operation
    /// on the window goes this way, so they are atomic with respect to
    /// each other element by element (and as a whole, per target).
    ///
    /// Inside an exclusive window lock this rank took by NIC atomics, no
    /// other process may access the target's window (MPI: an exclusive
    /// lock excludes every other lock, shared and lock_all included, and
    /// active-target epochs may not overlap passive ones), so the
    /// accumulate lock is skipped (two NIC round trips fewer, as Open
    /// MPI's osc/rdma); a local mutex keeps this process's threads apart.
    fn locked_rmw(
        &self,
        off: i64,
        t: &Target<'_>,
        op: &AccOp,
        data: &[u8],
        want: usize,
        compare: Option<&[u8]>,
    ) -> Result<Vec<u8>> {
        let runs = Self::runs(off, t);
        let exclusive = lock_of(&self.held).get(&t.rank) == Some(&LockType::Exclusive);
        let _local = if exclusive {
            self.exclusive_rmws.fetch_add(1, Ordering::Relaxed);
            Some(lock_of(&self.exclusive_rmw))
        } else {
            self.acc_lock(t.rank)?;
            None
        };
        let done = (|| -> Result<Vec<u8>> {
            let mut old = vec![0u8; want];
            let mut pos = 0usize;
            for &(at, n) in &runs {
                // SAFETY: `old` holds `want` bytes, `pos + n <= want` (the
                // runs cover the target's data); the run is inside the
                // target's window (target_offset checked the span).
                unsafe { self.transfer(t.rank, at, old.as_mut_ptr().add(pos), n, false) }?;
                pos += n;
            }
            let new = match (compare, op) {
                (Some(c), _) => (old == c).then(|| data.to_vec()),
                (None, AccOp::NoOp) => None,
                (None, _) => {
                    let mut new = old.clone();
                    apply::combine(op, t.layout.elem, t.layout.wide, data, &mut new)?;
                    Some(new)
                }
            };
            if let Some(new) = new {
                let mut pos = 0usize;
                for &(at, n) in &runs {
                    // SAFETY: as above; an RDMA write only reads `new`.
                    unsafe {
                        self.transfer(t.rank, at, new.as_ptr().add(pos) as *mut u8, n, true)
                    }?;
                    pos += n;
                }
            }
            Ok(old)
        })();
        let unlocked = if exclusive {
            Ok(())
        } else {
            self.acc_unlock(t.rank)
        };
        let old = done?;
        unlocked?;
        Ok(old)
    }
}

/// A mutex's guard, also after a thread panicked holding it (the data
/// is plain bookkeeping, valid either way).
fn lock_of<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Drop for Rdma {
    fn drop(&mut self) {
        // Writes still in flight read memory the window is about to give
        // back (an error path: MPI_Win_free completes them).
        let _ = self.complete_puts(None);
        // A window dropped without MPI_Win_free (an error path): no peer
        // may write its memory once it is gone.
        self.deregister();
    }
}

impl Module for Rdma {
    fn component(&self) -> &'static str {
        "rdma"
    }

    unsafe fn put(&self, origin: Buf<'_>, t: Target<'_>) -> Result<()> {
        let want = crate::matched_len("origin", origin.layout, origin.count, &t)?;
        let off = self.target_offset(&t)?;
        self.inner.access_op(t.rank)?;
        if want == 0 {
            return Ok(());
        }
        // A put up to IN_FLIGHT_MAX bytes to another process is copied
        // and its writes left in flight (completed by the synchronisation
        // that covers the target); a larger one, or one to this process,
        // is done before the call returns, from the user's buffer (or its
        // packed copy). Either way the origin buffer is free on return,
        // as the module contract says.
        let in_flight = t.rank != self.rank && want <= IN_FLIGHT_MAX;
        let packed = if in_flight || !origin.layout.is_contig(origin.count) {
            // SAFETY: the caller's contract.
            Some(Arc::new(unsafe {
                pack(origin.ptr, origin.count, origin.layout)
            }))
        } else {
            None
        };
        let src = packed.as_ref().map_or(origin.ptr, |p| p.as_ptr());
        let mut pos = 0usize;
        for (at, n) in Self::runs(off, &t) {
            // SAFETY: `src` holds `want` readable bytes (the origin's data,
            // or its packed copy, which an in-flight entry keeps), `pos + n
            // <= want`; the run is inside the target's window
            // (target_offset checked the span).
            unsafe {
                if in_flight {
                    self.start_put(t.rank, at, src.add(pos), n, packed.clone())?;
                } else {
                    self.transfer(t.rank, at, src.add(pos) as *mut u8, n, true)?;
                }
            }
            pos += n;
        }
        Ok(())
    }

    unsafe fn get(&self, result: BufMut<'_>, t: Target<'_>) -> Result<()> {
        let want = crate::matched_len("origin buffer", result.layout, result.count, &t)?;
        let off = self.target_offset(&t)?;
        self.inner.access_op(t.rank)?;
        if want == 0 {
            return Ok(());
        }
        let direct = result.layout.is_contig(result.count);
        let mut packed = Vec::new();
        let dst = if direct {
            result.ptr
        } else {
            packed = vec![0u8; want];
            packed.as_mut_ptr()
        };
        let mut pos = 0usize;
        for (at, n) in Self::runs(off, &t) {
            // SAFETY: `dst` holds `want` writable bytes (the caller's
            // result buffer, untouched by others until the operation
            // completes, or the packed copy); `pos + n <= want`.
            unsafe { self.transfer(t.rank, at, dst.add(pos), n, false) }?;
            pos += n;
        }
        if !direct {
            // SAFETY: the caller's contract: the result's blocks are
            // writable.
            unsafe { unpack(result.ptr, result.count, result.layout, &packed) };
        }
        Ok(())
    }

    unsafe fn accumulate(&self, origin: Buf<'_>, t: Target<'_>, op: &AccOp) -> Result<()> {
        let no_data =
            t.layout.packed_len(t.count)? == 0 && origin.layout.packed_len(origin.count)? == 0;
        if !self.nic_acc || no_data {
            // SAFETY: forwarded (without data the inner module only checks
            // the epoch).
            return unsafe { self.inner.accumulate(origin, t, op) };
        }
        crate::acc_check(Some(&origin), &t, op)?;
        let off = self.target_offset(&t)?;
        self.inner.access_op(t.rank)?;
        let want = t.layout.packed_len(t.count)?;
        // SAFETY: the caller's contract.
        let data = unsafe { pack(origin.ptr, origin.count, origin.layout) };
        if let Some(at) = self.intrinsic_word(off, &t) {
            return self
                .intrinsic(t.rank, at, op, t.layout.elem, &data)
                .map(|_| ());
        }
        self.locked_rmw(off, &t, op, &data, want, None).map(|_| ())
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
        let want = t.layout.packed_len(t.count)?;
        let have = result.layout.packed_len(result.count)?;
        let no_origin = origin
            .as_ref()
            .map_or(Ok(0), |o| o.layout.packed_len(o.count))?
            == 0;
        if !self.nic_acc || (want == 0 && have == 0 && no_origin) {
            // SAFETY: forwarded.
            return unsafe { self.inner.get_accumulate(origin, result, t, op) };
        }
        crate::acc_check(origin.as_ref(), &t, op)?;
        if have != want {
            return Err(OscError::Type(format!(
                "the result buffer holds {have} bytes of data, the target datatype {want}"
            )));
        }
        if (result.layout.elem, result.layout.wide) != (t.layout.elem, t.layout.wide) {
            return Err(OscError::Type(
                "result and target datatypes are built of different predefined types".into(),
            ));
        }
        let off = self.target_offset(&t)?;
        self.inner.access_op(t.rank)?;
        let data = match origin {
            // SAFETY: the caller's contract.
            Some(o) => unsafe { pack(o.ptr, o.count, o.layout) },
            None => Vec::new(),
        };
        let old = match self.intrinsic_word(off, &t) {
            Some(at) => self
                .intrinsic(t.rank, at, op, t.layout.elem, &data)?
                .to_vec(),
            None => self.locked_rmw(off, &t, op, &data, want, None)?,
        };
        // SAFETY: the caller's contract: the result's blocks are writable.
        unsafe { unpack(result.ptr, result.count, result.layout, &old) };
        Ok(())
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
        if !self.nic_acc {
            // SAFETY: forwarded.
            return unsafe {
                self.inner
                    .compare_and_swap(origin, compare, result, layout, rank, disp)
            };
        }
        let t = crate::cas_target(layout, rank, disp)?;
        let off = self.target_offset(&t)?;
        self.inner.access_op(rank)?;
        let n = layout.size;
        // SAFETY: the caller's contract: one contiguous element at each
        // (checked above: a predefined, contiguous type of `n` bytes).
        let (data, cmp) = unsafe { (bytes(origin, n), bytes(compare, n)) };
        if let Some(at) = self.intrinsic_word(off, &t) {
            // One element of 8 bytes (checked by intrinsic_word).
            let w = |b: &[u8]| u64::from_ne_bytes(b.try_into().unwrap_or_default());
            self.intrinsic_ops.fetch_add(1, Ordering::Relaxed);
            let op = RdmaAtomic::CmpSwap {
                compare: w(cmp),
                swap: w(data),
            };
            let old = self.word_atomic(rank, at, op)?;
            // SAFETY: as below.
            unsafe { bytes_mut(result, n) }.copy_from_slice(&old.to_ne_bytes());
            return Ok(());
        }
        let old = self.locked_rmw(off, &t, &AccOp::Replace, data, n, Some(cmp))?;
        // SAFETY: as above, for the result.
        unsafe { bytes_mut(result, n) }.copy_from_slice(&old);
        Ok(())
    }

    fn fence(&self, assert: u32) -> Result<()> {
        let done = self.complete_puts(None);
        self.inner.fence(assert)?;
        done
    }
    fn lock(&self, kind: LockType, rank: i32, assert: u32) -> Result<()> {
        if !self.nic_acc {
            return self.inner.lock(kind, rank, assert);
        }
        // The inner module checks and records the epoch; NOCHECK: it
        // sends no lock request, the lock is taken here by NIC atomics.
        self.inner.lock(kind, rank, assert | NOCHECK)?;
        if assert & NOCHECK != 0 {
            return Ok(());
        }
        if let Err(e) = self.win_lock(kind, rank) {
            let _ = self.inner.unlock(rank);
            return Err(e);
        }
        lock_of(&self.held).insert(rank, kind);
        Ok(())
    }
    fn unlock(&self, rank: i32) -> Result<()> {
        if !self.nic_acc {
            let written = self.complete_puts(Some(rank));
            return self.inner.unlock(rank).and(written);
        }
        // Completes the epoch's RDMA writes; then the inner module checks
        // the epoch and completes what it carried (atomics and the other
        // RDMA operations were complete when their calls returned).
        let written = self.complete_puts(Some(rank));
        let done = self.inner.unlock(rank).and(written);
        let kind = lock_of(&self.held).remove(&rank);
        let released = kind.map_or(Ok(()), |k| self.win_unlock(k, rank));
        done?;
        released
    }
    fn lock_all(&self, assert: u32) -> Result<()> {
        if !self.nic_acc {
            return self.inner.lock_all(assert);
        }
        self.inner.lock_all(assert | NOCHECK)?;
        if assert & NOCHECK != 0 {
            return Ok(());
        }
        for r in 0..self.size {
            if let Err(e) = self.win_lock(LockType::Shared, r) {
                for t in 0..r {
                    let _ = self.win_unlock(LockType::Shared, t);
                }
                let _ = self.inner.unlock_all();
                return Err(e);
            }
        }
        *lock_of(&self.held_all) = true;
        Ok(())
    }
    fn unlock_all(&self) -> Result<()> {
        let written = self.complete_puts(None);
        if !self.nic_acc {
            return self.inner.unlock_all().and(written);
        }
        let done = self.inner.unlock_all().and(written);
        let held = std::mem::take(&mut *lock_of(&self.held_all));
        let mut released = Ok(());
        if held {
            for r in 0..self.size {
                if let Err(e) = self.win_unlock(LockType::Shared, r) {
                    released = released.and(Err(e));
                }
            }
        }
        done?;
        released
    }
    fn flush(&self, rank: Option<i32>) -> Result<()> {
        let written = self.complete_puts(rank);
        self.inner.flush(rank).and(written)
    }
    fn flush_local(&self, rank: Option<i32>) -> Result<()> {
        // Puts' writes in flight read copies: nothing of the origin's to
        // wait for.
        self.inner.flush_local(rank)
    }
    fn sync(&self) -> Result<()> {
        self.inner.sync()
    }
    fn passive_epoch(&self, rank: i32) -> Result<()> {
        self.inner.passive_epoch(rank)
    }
    fn post(&self, group: &[i32], assert: u32) -> Result<()> {
        self.inner.post(group, assert)
    }
    fn start(&self, group: &[i32], assert: u32) -> Result<()> {
        self.inner.start(group, assert)
    }
    fn complete(&self) -> Result<()> {
        let written = self.complete_puts(None);
        self.inner.complete().and(written)
    }
    fn wait(&self, block: bool) -> Result<bool> {
        self.inner.wait(block)
    }
    fn free(&self) -> Result<()> {
        let written = self.complete_puts(None);
        self.inner.free()?;
        written?;
        // After the free's barrier no peer accesses this memory any more.
        self.deregister();
        let (p, g, a, i, b) = self.counters();
        let l = self.win_locks.load(Ordering::Relaxed);
        let x = self.exclusive_rmws.load(Ordering::Relaxed);
        tracing::info!(target: "osc", "osc rdma window freed: {p} RDMA writes, {g} RDMA reads, {a} NIC atomics, {i} single-element operations by NIC atomics alone, {l} window locks by NIC atomics, {x} accumulate-class operations under an exclusive lock without the accumulate lock, {b} bytes");
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_follow_the_type_map_and_merge_neighbours() {
        let contig = Layout::bytes(8);
        let t = |count, layout| Target {
            rank: 0,
            disp: 0,
            count,
            layout,
        };
        assert_eq!(Rdma::runs(16, &t(3, &contig)), vec![(16, 24)]);
        assert_eq!(Rdma::runs(16, &t(0, &contig)), vec![]);
        // A vector: 2 blocks of 4 bytes, stride 12, extent 16.
        let vec = Layout {
            blocks: vec![(0, 4), (12, 4)],
            extent: 16,
            size: 8,
            elem: None,
            wide: None,
        };
        // Item 0: 0..4, 12..16; item 1: 16..20 (merges with 12..16), 28..32.
        assert_eq!(
            Rdma::runs(100, &t(2, &vec)),
            vec![(100, 4), (112, 8), (128, 4)]
        );
        // Blocks out of order stay in type-map order.
        let back = Layout {
            blocks: vec![(8, 4), (0, 4)],
            extent: 12,
            size: 8,
            elem: None,
            wide: None,
        };
        assert_eq!(Rdma::runs(0, &t(1, &back)), vec![(8, 4), (0, 4)]);
    }
}
