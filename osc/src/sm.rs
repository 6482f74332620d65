//! The sm component: one-sided operations as loads and stores in a shared
//! segment (Open MPI's osc/sm), for windows whose ranks' memory lies in one
//! segment mapped by every rank (`MPI_Win_allocate_shared`, and
//! `MPI_Win_allocate` when the ranks share a node).
//!
//! * Put and get copy between the origin's buffer and the target's part of
//!   the segment, at the origin, at once: an operation is complete when
//!   its call returns, and no target ever has to enter MPI for it.
//! * Accumulates, get_accumulate, fetch_and_op and compare_and_swap are
//!   applied by the origin (the reduction code pt2pt's targets use) while
//!   it holds the target's accumulate lock, a word in the segment's header:
//!   they are atomic with respect to each other, whatever the datatype, and
//!   one origin's are applied in the order issued.
//! * Passive target: a fair reader-writer ticket lock per target in the
//!   header (as osc/sm's): `MPI_Win_lock` takes a ticket and waits for its
//!   turn; unlock and flush are memory fences, operations being complete.
//! * Fence: a memory fence and a barrier on the window's communicator.
//! * PSCW: `post` sets its bit in each origin's post bitmap; `start` waits
//!   for the bits of its targets and clears them; `complete` adds one to
//!   each target's count of completes; `wait` waits until the count covers
//!   its group.
//!
//! Waiting (a lock, the accumulate lock, a post, the completes) spins with
//! yields and runs the pml's progress and its hooks now and then: the rank
//! keeps serving its pt2pt windows and point-to-point traffic, and notices
//! a failed peer as the pml does (the launcher then ends the job).

use std::sync::atomic::{fence, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use tmpi_base::component::{Availability, ComponentDescriptor};
use tmpi_base::mca::{McaError, Registry};
use tmpi_comm::Comm;
use tmpi_pml::Pml;

use crate::epoch::{check_rank, Epochs};
use crate::mem::{bytes, bytes_mut, pack, regions, unpack, View, WinMem};
use crate::shm::WindowSegment;
use crate::{
    apply, assert, AccOp, Buf, BufMut, Component, Layout, LockType, Memory, Module, OscError,
    Result, Target,
};

/// The component.
pub struct SmComponent;

/// Default priority: above pt2pt's (10), so that shared-segment windows
/// are served by loads and stores.
const PRIORITY: i64 = 20;

fn register_params(reg: &Registry) -> std::result::Result<(), McaError> {
    reg.register_priority("osc", "sm", PRIORITY)?;
    Ok(())
}

/// The component's description (`tmpi_info`, the `osc` selection list).
pub static DESCRIPTOR: ComponentDescriptor = ComponentDescriptor {
    framework: "osc",
    name: "sm",
    priority: PRIORITY as i32,
    description: "one-sided operations as loads and stores in a shared segment of the node's ranks (MPI_Win_allocate_shared, MPI_Win_allocate on one node)",
    register_params,
    probe: || Availability::Available,
};

impl Component for SmComponent {
    fn name(&self) -> &'static str {
        "sm"
    }
    fn accepts(&self, _comm: &Comm, shared_segment: bool) -> bool {
        shared_segment
    }
    fn create(&self, pml: &Arc<Pml>, comm: &Comm, mem: &Memory) -> Result<Box<dyn Module>> {
        let seg = mem.segment.clone().ok_or_else(|| {
            OscError::Comm("osc sm: the window's memory is not in a shared segment".into())
        })?;
        Ok(Box::new(Sm::new(pml, comm, seg)?))
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The module of one window.
pub struct Sm {
    pml: Arc<Pml>,
    seg: Arc<WindowSegment>,
    rank: i32,
    size: i32,
    ep: Mutex<Epochs>,
    /// The window's own communicator (fence's and free's barriers).
    comm: Mutex<Option<Comm>>,
}

/// A target region: `count` items of `blocks` every `extent` bytes from
/// `offset` in the target's part.
struct Region {
    /// One block from `offset` (contiguous target items).
    contig: bool,
    offset: i128,
    count: u64,
    extent: i128,
    blocks: Vec<(i64, u64)>,
}

impl Region {
    fn iter(&self) -> impl Iterator<Item = (i128, u64)> + '_ {
        regions(self.offset, self.count, self.extent, &self.blocks)
    }
}

impl Sm {
    fn new(pml: &Arc<Pml>, comm: &Comm, seg: Arc<WindowSegment>) -> Result<Sm> {
        let dup = comm.dup()?;
        let (rank, size) = (dup.rank() as i32, dup.size() as i32);
        if seg.parts.len() != size as usize {
            return Err(OscError::Comm(format!(
                "osc sm: the segment has {} parts for {size} ranks",
                seg.parts.len()
            )));
        }
        tracing::debug!(target: "osc", "sm window on context {}: rank {rank} of {size}", dup.context_id());
        Ok(Sm {
            pml: Arc::clone(pml),
            seg,
            rank,
            size,
            ep: Mutex::new(Epochs::default()),
            comm: Mutex::new(Some(dup)),
        })
    }

    /// Rank `r`'s part of the segment, as window memory.
    fn part(&self, r: i32) -> WinMem {
        let p = self.seg.parts[r as usize];
        WinMem {
            base: p.base,
            size: p.size,
            attached: None,
        }
    }

    /// Waits until `ready()`, spinning a little, then yielding; runs the
    /// pml's progress and hooks every so often (other windows and
    /// point-to-point traffic keep moving; a failed peer is noticed).
    fn spin(&self, mut ready: impl FnMut() -> bool) {
        let mut n = 0u32;
        while !ready() {
            n = n.wrapping_add(1);
            if n.is_multiple_of(64) {
                self.pml.progress();
                self.pml.run_progress_hooks();
            }
            if n < 32 {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
    }

    /// Checks `t` (rank, range in the target's part, access epoch) and
    /// returns its region.
    fn region(&self, t: &Target<'_>) -> Result<Region> {
        check_rank(t.rank, self.size)?;
        let p = self.seg.parts[t.rank as usize];
        let offset = crate::target_offset(t, p.size as u64, p.disp_unit as u64, false)? as i128;
        lock(&self.ep).operation(t.rank)?;
        Ok(if t.layout.is_contig(t.count) {
            let n = t.layout.packed_len(t.count)? as u64;
            Region {
                contig: true,
                offset,
                count: 1,
                extent: n as i128,
                blocks: if n == 0 { vec![] } else { vec![(0, n)] },
            }
        } else {
            Region {
                contig: false,
                offset,
                count: t.count as u64,
                extent: t.layout.extent as i128,
                blocks: t
                    .layout
                    .blocks
                    .iter()
                    .map(|&(o, l)| (o as i64, l as u64))
                    .collect(),
            }
        })
    }

    /// Runs `f` holding rank `r`'s accumulate lock.
    fn with_acc_lock<R>(&self, r: i32, f: impl FnOnce() -> R) -> R {
        let acc = self.seg.ctl(r as usize).acc;
        let take = || {
            acc.compare_exchange(0, 1, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
        };
        if !take() {
            self.spin(take);
        }
        struct Release<'a>(&'a std::sync::atomic::AtomicU32);
        impl Drop for Release<'_> {
            fn drop(&mut self) {
                self.0.store(0, Ordering::Release);
            }
        }
        let _held = Release(acc);
        f()
    }

    fn lock_exclusive(&self, r: i32) {
        let c = self.seg.ctl(r as usize);
        let me = c.ticket.fetch_add(1, Ordering::AcqRel);
        if c.write.load(Ordering::Acquire) != me {
            self.spin(|| c.write.load(Ordering::Acquire) == me);
        }
    }

    fn unlock_exclusive(&self, r: i32) {
        let c = self.seg.ctl(r as usize);
        fence(Ordering::SeqCst);
        c.write.fetch_add(1, Ordering::Release);
        c.read.fetch_add(1, Ordering::Release);
    }

    fn lock_shared(&self, r: i32) {
        let c = self.seg.ctl(r as usize);
        let me = c.ticket.fetch_add(1, Ordering::AcqRel);
        if c.read.load(Ordering::Acquire) != me {
            self.spin(|| c.read.load(Ordering::Acquire) == me);
        }
        // The next reader in line may join.
        c.read.fetch_add(1, Ordering::AcqRel);
    }

    fn unlock_shared(&self, r: i32) {
        let c = self.seg.ctl(r as usize);
        fence(Ordering::SeqCst);
        c.write.fetch_add(1, Ordering::Release);
    }

    fn barrier(&self) -> Result<()> {
        fence(Ordering::SeqCst);
        if let Some(c) = lock(&self.comm).as_ref() {
            c.barrier()?;
        }
        fence(Ordering::SeqCst);
        Ok(())
    }

    /// The old contents of an accumulate-family operation go to `result`.
    ///
    /// # Safety
    /// As [`Module::get`] for `result`.
    unsafe fn deliver(result: BufMut<'_>, old: &[u8]) {
        // SAFETY: the caller's contract.
        unsafe { unpack(result.ptr, result.count, result.layout, old) };
    }
}

impl Module for Sm {
    fn component(&self) -> &'static str {
        "sm"
    }

    unsafe fn put(&self, origin: Buf<'_>, t: Target<'_>) -> Result<()> {
        let want = t.layout.packed_len(t.count)?;
        let have = origin.layout.packed_len(origin.count)?;
        if want != have {
            return Err(OscError::Type(format!(
                "the origin holds {have} bytes of data, the target datatype {want}"
            )));
        }
        let reg = self.region(&t)?;
        let part = self.part(t.rank);
        let view: View<'_> = part.view();
        view.check(reg.iter())?;
        if origin.layout.is_contig(origin.count) {
            // SAFETY: the caller's contract: `want` contiguous bytes.
            view.scatter(reg.iter(), unsafe { bytes(origin.ptr, want) });
        } else {
            // SAFETY: the caller's contract.
            let data = unsafe { pack(origin.ptr, origin.count, origin.layout) };
            view.scatter(reg.iter(), &data);
        }
        Ok(())
    }

    unsafe fn get(&self, result: BufMut<'_>, t: Target<'_>) -> Result<()> {
        let want = t.layout.packed_len(t.count)?;
        let have = result.layout.packed_len(result.count)?;
        if want != have {
            return Err(OscError::Type(format!(
                "the origin buffer holds {have} bytes of data, the target datatype {want}"
            )));
        }
        let reg = self.region(&t)?;
        let part = self.part(t.rank);
        let view = part.view();
        view.check(reg.iter())?;
        if reg.contig && result.layout.is_contig(result.count) {
            // SAFETY: the caller's contract: `want` contiguous writable bytes.
            view.copy_out(reg.offset, unsafe { bytes_mut(result.ptr, want) });
        } else {
            let mut data = Vec::with_capacity(want);
            view.gather(reg.iter(), &mut data);
            // SAFETY: the caller's contract.
            unsafe { unpack(result.ptr, result.count, result.layout, &data) };
        }
        Ok(())
    }

    unsafe fn accumulate(&self, origin: Buf<'_>, t: Target<'_>, op: &AccOp) -> Result<()> {
        if t.layout.packed_len(t.count)? == 0 && origin.layout.packed_len(origin.count)? == 0 {
            // No data (a zero count, or a type of size 0): nothing to do.
            check_rank(t.rank, self.size)?;
            return lock(&self.ep).access(t.rank);
        }
        crate::acc_check(Some(&origin), &t, op)?;
        let reg = self.region(&t)?;
        // SAFETY: the caller's contract.
        let data = unsafe { pack(origin.ptr, origin.count, origin.layout) };
        let part = self.part(t.rank);
        let (_, res) = self.with_acc_lock(t.rank, || {
            apply::accumulate(
                &part.view(),
                || reg.iter(),
                Some(op),
                t.layout.elem,
                t.layout.wide,
                &data,
            )
        });
        res
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
            check_rank(t.rank, self.size)?;
            return lock(&self.ep).access(t.rank);
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
        let reg = self.region(&t)?;
        let data = match origin {
            // SAFETY: the caller's contract.
            Some(o) => unsafe { pack(o.ptr, o.count, o.layout) },
            None => Vec::new(),
        };
        let part = self.part(t.rank);
        let (old, res) = self.with_acc_lock(t.rank, || {
            apply::accumulate(
                &part.view(),
                || reg.iter(),
                Some(op),
                t.layout.elem,
                t.layout.wide,
                &data,
            )
        });
        res?;
        // SAFETY: the caller's contract.
        unsafe { Self::deliver(result, &old) };
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
        if layout.elem.is_none() || !layout.is_contig(1) {
            return Err(OscError::Type(
                "MPI_Compare_and_swap needs a predefined datatype".into(),
            ));
        }
        let t = Target {
            rank,
            disp,
            count: 1,
            layout,
        };
        let reg = self.region(&t)?;
        // SAFETY: the caller's contract: one element at each.
        let mut data = unsafe { pack(origin, 1, layout) };
        // SAFETY: as above.
        data.extend_from_slice(&unsafe { pack(compare, 1, layout) });
        let part = self.part(rank);
        let (old, res) = self.with_acc_lock(rank, || {
            apply::compare_and_swap(&part.view(), || reg.iter(), &data)
        });
        res?;
        let out = BufMut {
            ptr: result,
            count: 1,
            layout,
        };
        // SAFETY: the caller's contract: one writable element at `result`.
        unsafe { Self::deliver(out, &old) };
        Ok(())
    }

    fn fence(&self, a: u32) -> Result<()> {
        lock(&self.ep).fence_check()?;
        // Operations are complete when issued: the barrier orders every
        // rank's stores before every rank's next epoch.
        self.barrier()?;
        lock(&self.ep).fence_done(a);
        Ok(())
    }

    fn lock(&self, kind: LockType, rank: i32, a: u32) -> Result<()> {
        check_rank(rank, self.size)?;
        lock(&self.ep).lock_check(rank)?;
        let nocheck = a & assert::NOCHECK != 0;
        if !nocheck {
            match kind {
                LockType::Exclusive => self.lock_exclusive(rank),
                LockType::Shared => self.lock_shared(rank),
            }
        }
        fence(Ordering::SeqCst);
        lock(&self.ep).locks.insert(rank, (kind, nocheck));
        Ok(())
    }

    fn unlock(&self, rank: i32) -> Result<()> {
        check_rank(rank, self.size)?;
        let (kind, nocheck) = {
            let e = lock(&self.ep);
            let nocheck = e.unlock_check(rank)?;
            (e.locks[&rank].0, nocheck)
        };
        fence(Ordering::SeqCst);
        if !nocheck {
            match kind {
                LockType::Exclusive => self.unlock_exclusive(rank),
                LockType::Shared => self.unlock_shared(rank),
            }
        }
        lock(&self.ep).locks.remove(&rank);
        Ok(())
    }

    fn lock_all(&self, a: u32) -> Result<()> {
        lock(&self.ep).lock_all_check()?;
        let nocheck = a & assert::NOCHECK != 0;
        if !nocheck {
            for r in 0..self.size {
                self.lock_shared(r);
            }
        }
        fence(Ordering::SeqCst);
        lock(&self.ep).lock_all = Some(nocheck);
        Ok(())
    }

    fn unlock_all(&self) -> Result<()> {
        let nocheck = lock(&self.ep).unlock_all_check()?;
        fence(Ordering::SeqCst);
        if !nocheck {
            for r in 0..self.size {
                self.unlock_shared(r);
            }
        }
        lock(&self.ep).lock_all = None;
        Ok(())
    }

    fn flush(&self, rank: Option<i32>) -> Result<()> {
        lock(&self.ep).flush_targets(rank, self.size)?;
        // Operations completed when issued; order them before what follows.
        fence(Ordering::SeqCst);
        Ok(())
    }

    fn flush_local(&self, rank: Option<i32>) -> Result<()> {
        lock(&self.ep).flush_local_check(rank, self.size)?;
        fence(Ordering::SeqCst);
        Ok(())
    }

    fn sync(&self) -> Result<()> {
        // The unified model: one memory; order this process's accesses, and
        // let the pml and its hooks (other windows) move, as pt2pt's sync
        // does, for programs that poll with it.
        fence(Ordering::SeqCst);
        self.pml.run_progress_hooks();
        Ok(())
    }

    fn passive_epoch(&self, rank: i32) -> Result<()> {
        check_rank(rank, self.size)?;
        lock(&self.ep).passive(rank)
    }

    fn post(&self, group: &[i32], a: u32) -> Result<()> {
        for &r in group {
            check_rank(r, self.size)?;
        }
        lock(&self.ep).post_begin(group)?;
        // This rank's stores before the post reach the origins' accesses.
        fence(Ordering::SeqCst);
        if a & assert::NOCHECK == 0 {
            for &o in group {
                let (w, bit) = self.seg.post_word(o as usize, self.rank as usize);
                w.fetch_or(bit, Ordering::Release);
            }
        }
        Ok(())
    }

    fn start(&self, group: &[i32], a: u32) -> Result<()> {
        for &r in group {
            check_rank(r, self.size)?;
        }
        lock(&self.ep).start_check()?;
        if a & assert::NOCHECK == 0 {
            for &t in group {
                let (w, bit) = self.seg.post_word(self.rank as usize, t as usize);
                self.spin(|| w.load(Ordering::Acquire) & bit != 0);
                w.fetch_and(!bit, Ordering::AcqRel);
            }
        }
        fence(Ordering::SeqCst);
        lock(&self.ep).start = Some(group.to_vec());
        Ok(())
    }

    fn complete(&self) -> Result<()> {
        let group = lock(&self.ep).complete_group()?;
        fence(Ordering::SeqCst);
        for &t in &group {
            self.seg
                .ctl(t as usize)
                .completes
                .fetch_add(1, Ordering::Release);
        }
        lock(&self.ep).start = None;
        Ok(())
    }

    fn wait(&self, block: bool) -> Result<bool> {
        let n = lock(&self.ep).wait_count()?;
        let n = u32::try_from(n).unwrap_or(u32::MAX);
        let c = self.seg.ctl(self.rank as usize).completes;
        let done = || c.load(Ordering::Acquire) >= n;
        if !done() {
            if !block {
                self.pml.progress();
                self.pml.run_progress_hooks();
                if !done() {
                    return Ok(false);
                }
            } else {
                self.spin(done);
            }
        }
        c.fetch_sub(n, Ordering::AcqRel);
        fence(Ordering::SeqCst);
        lock(&self.ep).post = None;
        Ok(true)
    }

    fn free(&self) -> Result<()> {
        lock(&self.ep).free_check()?;
        // Every rank's operations are complete; after the barrier nobody
        // touches another rank's part any more.
        self.barrier()?;
        if let Some(c) = lock(&self.comm).take() {
            c.free()?;
        }
        Ok(())
    }
}
