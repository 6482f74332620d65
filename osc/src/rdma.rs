//! The rdma component: `MPI_Put` and `MPI_Get` by RDMA write and read into
//! the target's registered window memory (Open MPI's osc/rdma, first
//! step), everything else by an inner [`Pt2pt`] module of the same window.
//!
//! * **Windows served**: `MPI_Win_create` and `MPI_Win_allocate` windows
//!   (not in a shared segment: sm serves those) whose every rank reaches
//!   every other rank of the window through a BTL with RDMA put and get
//!   (btl-openib; not self, sm or tcp). Dynamic windows, and windows that
//!   do not qualify, are served by pt2pt alone: the component's `create`
//!   returns a pt2pt module then.
//! * **Agreement**: creation allgathers, from every rank, whether it
//!   qualifies (all its peers reached by RDMA and its memory registered),
//!   its window size and displacement unit, and its registration keys
//!   ([`RdmaKeys`]). Every rank sees every flag, so all take rdma or all
//!   fall back to pt2pt together (deregistering what they registered).
//! * **Put/get**: checked like pt2pt's (types, rank, target range, access
//!   epoch: the inner module's epoch state), then one blocking RDMA
//!   operation per contiguous run of the target datatype (adjacent runs
//!   merged), from or into the origin buffer when it is contiguous, else
//!   through a packed copy (pack before a put, unpack after a get). Each
//!   operation is complete at the target when the call returns (the
//!   completion of the RC write or read was polled), so no later
//!   synchronisation has anything of it to wait for. A target that is
//!   this process is served by a copy.
//! * **Delegated**: fence, PSCW, lock/unlock, flush, sync, accumulates,
//!   fetch_and_op, compare_and_swap and the request-based operations' epoch
//!   check go to the inner pt2pt module: its messages, its target-side
//!   serving, its semantics. Why mixing RDMA puts with pt2pt's messages is
//!   correct is explained in `docs/osc.md`.
//! * **Free**: the inner module's collective free, then deregistration
//!   (after the barrier in it no peer writes any more).
//!
//! Counters of the RDMA operations issued are logged at free (target
//! `osc`, info level: `--mca osc_base_verbose 50`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tmpi_base::component::{Availability, ComponentDescriptor};
use tmpi_base::mca::{McaError, Registry};
use tmpi_comm::Comm;
use tmpi_pml::{Pml, RdmaKeys};

use crate::epoch::check_rank;
use crate::mem::{pack, unpack};
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

/// Bytes of one rank's creation record: qualifies (1 byte, padded to 8),
/// window size, displacement unit, registration keys.
const REC: usize = 24 + RdmaKeys::BYTES;

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
    puts: AtomicU64,
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
        let ok = reachable && (mem.size == 0 || encoded.is_some());
        let mut rec = [0u8; REC];
        rec[0] = u8::from(ok);
        rec[8..16].copy_from_slice(&(mem.size as u64).to_le_bytes());
        rec[16..24].copy_from_slice(&(mem.disp_unit as u64).to_le_bytes());
        if let Some(b) = &encoded {
            rec[24..].copy_from_slice(b);
        }
        let mut all = vec![0u8; REC * worlds.len()];
        let gathered = comm.allgather(tmpi_coll::Input::Buf(&rec), &mut all);
        let release = |mine: &Option<RdmaKeys>| {
            if let Some(k) = mine {
                pml.rdma_deregister(k);
            }
        };
        if let Err(e) = gathered {
            release(&mine);
            return Err(e.into());
        }
        let recs: Vec<&[u8]> = all.chunks(REC).collect();
        if let Some(r) = recs.iter().position(|c| c[0] != 1) {
            release(&mine);
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
        let mut keys = Vec::with_capacity(recs.len());
        for (r, c) in recs.iter().enumerate() {
            let k = if r == me || peers[r].0 == 0 {
                RdmaKeys::default()
            } else {
                match RdmaKeys::decode(&c[24..]) {
                    Some(k) => k,
                    None => {
                        // Every rank decoded its own keys alike: cannot
                        // differ, but fail loudly rather than guess.
                        release(&mine);
                        return Err(OscError::Comm(format!(
                            "rdma: rank {r}'s registration keys do not decode"
                        )));
                    }
                }
            };
            keys.push(k);
        }
        tracing::debug!(target: "osc", "rdma window: rank {me} of {}, {} bytes registered", worlds.len(), mem.size);
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
            puts: AtomicU64::new(0),
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

    /// `(RDMA writes, RDMA reads, bytes)` issued by this window so far.
    pub fn counters(&self) -> (u64, u64, u64) {
        (
            self.puts.load(Ordering::Relaxed),
            self.gets.load(Ordering::Relaxed),
            self.bytes.load(Ordering::Relaxed),
        )
    }

    fn deregister(&self) {
        let k = self.mine.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(k) = k {
            self.pml.rdma_deregister(&k);
        }
    }
}

impl Drop for Rdma {
    fn drop(&mut self) {
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
        let packed;
        let src = if origin.layout.is_contig(origin.count) {
            origin.ptr
        } else {
            // SAFETY: the caller's contract.
            packed = unsafe { pack(origin.ptr, origin.count, origin.layout) };
            packed.as_ptr()
        };
        let mut pos = 0usize;
        for (at, n) in Self::runs(off, &t) {
            // SAFETY: `src` holds `want` readable bytes (the origin's data,
            // or its packed copy), `pos + n <= want`; the run is inside the
            // target's window (target_offset checked the span).
            unsafe { self.transfer(t.rank, at, src.add(pos) as *mut u8, n, true) }?;
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
        // SAFETY: forwarded.
        unsafe { self.inner.accumulate(origin, t, op) }
    }

    unsafe fn get_accumulate(
        &self,
        origin: Option<Buf<'_>>,
        result: BufMut<'_>,
        target: Target<'_>,
        op: &AccOp,
    ) -> Result<()> {
        // SAFETY: forwarded.
        unsafe { self.inner.get_accumulate(origin, result, target, op) }
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
        // SAFETY: forwarded.
        unsafe {
            self.inner
                .compare_and_swap(origin, compare, result, layout, rank, disp)
        }
    }

    fn fence(&self, assert: u32) -> Result<()> {
        self.inner.fence(assert)
    }
    fn lock(&self, kind: LockType, rank: i32, assert: u32) -> Result<()> {
        self.inner.lock(kind, rank, assert)
    }
    fn unlock(&self, rank: i32) -> Result<()> {
        self.inner.unlock(rank)
    }
    fn lock_all(&self, assert: u32) -> Result<()> {
        self.inner.lock_all(assert)
    }
    fn unlock_all(&self) -> Result<()> {
        self.inner.unlock_all()
    }
    fn flush(&self, rank: Option<i32>) -> Result<()> {
        self.inner.flush(rank)
    }
    fn flush_local(&self, rank: Option<i32>) -> Result<()> {
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
        self.inner.complete()
    }
    fn wait(&self, block: bool) -> Result<bool> {
        self.inner.wait(block)
    }
    fn free(&self) -> Result<()> {
        self.inner.free()?;
        // After the free's barrier no peer accesses this memory any more.
        self.deregister();
        let (p, g, b) = self.counters();
        tracing::info!(target: "osc", "osc rdma window freed: {p} RDMA writes, {g} RDMA reads, {b} bytes");
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
