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

use std::sync::atomic::{fence, AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use tmpi_base::component::{Availability, ComponentDescriptor};
use tmpi_base::mca::{McaError, Registry};
use tmpi_comm::Comm;
use tmpi_pml::Pml;

use crate::epoch::{check_rank, Epochs};
use crate::mem::{bytes, bytes_mut, pack, unpack, View, WinMem};
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
    /// What of `ep` the operations' hot path reads.
    open: PassiveOpen,
    /// The window's own communicator (fence's and free's barriers).
    comm: Mutex<Option<Comm>>,
}

/// A target region: `count` items of `blocks` every `extent` bytes from
/// `offset` in the target's part; the blocks are the target layout's,
/// borrowed, or for contiguous target items the one block `one`.
struct Region<'a> {
    /// One block from `offset` (contiguous target items).
    contig: bool,
    offset: i128,
    count: u64,
    extent: i128,
    one: Option<(isize, usize)>,
    blocks: &'a [(isize, usize)],
}

impl Region<'_> {
    fn blocks(&self) -> &[(isize, usize)] {
        if self.contig {
            self.one.as_slice()
        } else {
            self.blocks
        }
    }

    /// The region of contiguous target items (`None`: no bytes).
    fn one(&self) -> Option<(i128, u64)> {
        self.one.map(|(_, l)| (self.offset, l as u64))
    }

    fn iter(&self) -> impl Iterator<Item = (i128, u64)> + '_ {
        let (start, extent, blocks) = (self.offset, self.extent, self.blocks());
        (0..self.count).flat_map(move |i| {
            blocks
                .iter()
                .map(move |&(o, l)| (start + i as i128 * extent + o as i128, l as u64))
        })
    }
}

/// The largest accumulate-family operation on contiguous data that is
/// applied through buffers on the stack (fetch_and_op, small
/// accumulates); larger ones pack into the heap.
const SMALL_ACC: usize = 64;

/// Which passive-target epochs are open at this process, readable
/// without [`Sm::ep`]'s lock: an operation or flush towards a rank these
/// cover needs no other check (no fence epoch is open then, so there is
/// no fence state to record). Written under that lock whenever its
/// `locks` or `lock_all` change, so that a read by the thread that
/// opened the epoch, or by any thread the user ordered after it, sees it.
struct PassiveOpen {
    all: AtomicBool,
    rank: Box<[AtomicBool]>,
}

impl PassiveOpen {
    fn new(size: i32) -> PassiveOpen {
        PassiveOpen {
            all: AtomicBool::new(false),
            rank: (0..size).map(|_| AtomicBool::new(false)).collect(),
        }
    }

    /// Whether a passive-target epoch covers rank `r` (`false` for ranks
    /// out of range: the locked path reports them).
    fn covers(&self, r: i32) -> bool {
        usize::try_from(r)
            .ok()
            .and_then(|r| self.rank.get(r))
            .is_some_and(|b| self.all.load(Ordering::Acquire) || b.load(Ordering::Acquire))
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
            open: PassiveOpen::new(size),
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
    fn region<'a>(&self, t: &Target<'a>) -> Result<Region<'a>> {
        check_rank(t.rank, self.size)?;
        let p = self.seg.parts[t.rank as usize];
        let offset = crate::target_offset(t, p.size as u64, p.disp_unit as u64, false)? as i128;
        self.operation(t.rank)?;
        Ok(if t.layout.is_contig(t.count) {
            let n = t.layout.packed_len(t.count)?;
            Region {
                contig: true,
                offset,
                count: 1,
                extent: n as i128,
                one: (n != 0).then_some((0, n)),
                blocks: &[],
            }
        } else {
            Region {
                contig: false,
                offset,
                count: t.count as u64,
                extent: t.layout.extent as i128,
                one: None,
                blocks: &t.layout.blocks,
            }
        })
    }

    /// An operation towards rank `r` (in range) is issued: the epoch
    /// check, without the lock when a passive-target epoch covers `r`.
    fn operation(&self, r: i32) -> Result<()> {
        if self.open.covers(r) {
            return Ok(());
        }
        lock(&self.ep).operation(r)
    }

    /// The operations' fast path: where in the target's part the data of
    /// an operation on `t` goes, `(offset, bytes)`, when the target items
    /// and the origin's (`count` items of `other`) are each one block of
    /// the same positive length, the region lies in the target's part and
    /// a passive-target epoch covers the target. `None`: the general path
    /// (which also reports every error; none is possible here).
    #[inline(always)]
    fn fast(&self, t: &Target<'_>, other: &Layout, count: usize) -> Option<(usize, usize)> {
        let p = self.seg.parts.get(usize::try_from(t.rank).ok()?)?;
        let n = t.layout.size.checked_mul(t.count)?;
        if n == 0
            || other.size.checked_mul(count)? != n
            || !t.layout.is_contig(t.count)
            || !other.is_contig(count)
            || !self.open.covers(t.rank)
        {
            return None;
        }
        let off = usize::try_from(t.disp.checked_mul(isize::try_from(p.disp_unit).ok()?)?).ok()?;
        (off.checked_add(n)? <= p.size).then_some((off, n))
    }

    /// Records in [`Sm::open`] whether `e` (locked by the caller, just
    /// changed) has lock_all open, and a lock on `rank` if given.
    fn publish(&self, e: &Epochs, rank: Option<i32>) {
        self.open.all.store(e.lock_all.is_some(), Ordering::Release);
        if let Some(r) = rank {
            if let Some(b) = self.open.rank.get(r as usize) {
                b.store(e.locks.contains_key(&r), Ordering::Release);
            }
        }
    }

    /// Applies `op` with `data` (the packed origin, empty for
    /// `MPI_NO_OP`) to the `n` contiguous bytes at `offset` in rank `r`'s
    /// part, `n` at most [`SMALL_ACC`], holding `r`'s accumulate lock;
    /// the old contents. Checks and errors as [`apply::accumulate`]'s.
    fn acc_small(
        &self,
        r: i32,
        offset: i128,
        n: usize,
        op: &AccOp,
        layout: &Layout,
        data: &[u8],
    ) -> Result<[u8; SMALL_ACC]> {
        let one = (n > 0).then_some((offset, n as u64));
        self.part(r).view().check(one.into_iter())?;
        // Checked: a region of n > 0 bytes starts at an offset >= 0 inside
        // the part; with n = 0 nothing is touched.
        self.acc_at(r, usize::try_from(offset).unwrap_or(0), n, op, layout, data)
    }

    /// [`Sm::acc_small`] for the region `off..off + n` that [`Sm::fast`]
    /// or `acc_small` checked (so no range check): applies `op` with `data` under rank
    /// `r`'s accumulate lock; the old contents.
    #[inline]
    fn acc_at(
        &self,
        r: i32,
        off: usize,
        n: usize,
        op: &AccOp,
        layout: &Layout,
        data: &[u8],
    ) -> Result<[u8; SMALL_ACC]> {
        let part = self.part(r);
        let view = part.view();
        let mut old = [0u8; SMALL_ACC];
        let Some(old_n) = old.get_mut(..n) else {
            return Err(OscError::Type(format!(
                "{n} bytes are more than an accumulate on the stack holds"
            )));
        };
        self.with_acc_lock(r, || -> Result<()> {
            view.copy_out(off as i128, old_n);
            if matches!(op, AccOp::NoOp) {
                return Ok(());
            }
            let mut new = [0u8; SMALL_ACC];
            let new = &mut new[..n];
            new.copy_from_slice(old_n);
            apply::combine(op, layout.elem, layout.wide, data, new)?;
            view.copy_in(off, new);
            Ok(())
        })?;
        Ok(old)
    }

    /// Runs `f` holding rank `r`'s accumulate lock.
    fn with_acc_lock<R>(&self, r: i32, f: impl FnOnce() -> R) -> R {
        let acc = self.seg.acc_lock(r as usize);
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
        if let Some((off, n)) = self.fast(&t, origin.layout, origin.count) {
            let part = self.part(t.rank);
            let view = part.view();
            if view.holds(off, n) {
                // SAFETY: the caller's contract: `n` contiguous bytes.
                view.copy_in(off, unsafe { bytes(origin.ptr, n) });
                return Ok(());
            }
        }
        let want = crate::matched_len("origin", origin.layout, origin.count, &t)?;
        let reg = self.region(&t)?;
        let part = self.part(t.rank);
        let view: View<'_> = part.view();
        if reg.contig && origin.layout.is_contig(origin.count) {
            let one = reg.one();
            view.check(one.into_iter())?;
            // SAFETY: the caller's contract: `want` contiguous bytes.
            view.scatter(one.into_iter(), unsafe { bytes(origin.ptr, want) });
            return Ok(());
        }
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
        if let Some((off, n)) = self.fast(&t, result.layout, result.count) {
            let part = self.part(t.rank);
            let view = part.view();
            if view.holds(off, n) {
                // SAFETY: the caller's contract: `n` contiguous writable
                // bytes.
                view.copy_out(off as i128, unsafe { bytes_mut(result.ptr, n) });
                return Ok(());
            }
        }
        let want = crate::matched_len("origin buffer", result.layout, result.count, &t)?;
        let reg = self.region(&t)?;
        let part = self.part(t.rank);
        let view = part.view();
        if reg.contig {
            view.check(reg.one().into_iter())?;
        } else {
            view.check(reg.iter())?;
        }
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
        if let Some((off, n)) = self.fast(&t, origin.layout, origin.count) {
            if n <= SMALL_ACC {
                // As in `get_accumulate`'s fast path.
                if !crate::acc_plain(Some(&origin), &t, op, n) {
                    crate::acc_check(Some(&origin), &t, op)?;
                }
                // SAFETY: the caller's contract: `n` contiguous bytes.
                let data = unsafe { bytes(origin.ptr, n) };
                return self.acc_at(t.rank, off, n, op, t.layout, data).map(|_| ());
            }
        }
        if t.layout.packed_len(t.count)? == 0 && origin.layout.packed_len(origin.count)? == 0 {
            // No data (a zero count, or a type of size 0): nothing to do.
            check_rank(t.rank, self.size)?;
            return lock(&self.ep).access(t.rank);
        }
        crate::acc_check(Some(&origin), &t, op)?;
        let reg = self.region(&t)?;
        let n = t.layout.packed_len(t.count)?;
        if reg.contig && n <= SMALL_ACC && origin.layout.is_contig(origin.count) {
            // SAFETY: the caller's contract: `n` contiguous bytes (the
            // origin holds as many as the target, `acc_check` says).
            let data = unsafe { bytes(origin.ptr, n) };
            return self
                .acc_small(t.rank, reg.offset, n, op, t.layout, data)
                .map(|_| ());
        }
        let packed;
        let data = if origin.layout.is_contig(origin.count) {
            // SAFETY: the caller's contract: `n` contiguous bytes (the
            // origin holds as many as the target, `acc_check` says).
            unsafe { bytes(origin.ptr, n) }
        } else {
            // SAFETY: the caller's contract.
            packed = unsafe { pack(origin.ptr, origin.count, origin.layout) };
            &packed[..]
        };
        let part = self.part(t.rank);
        self.with_acc_lock(t.rank, || {
            apply::accumulate_in_place(
                &part.view(),
                || reg.iter(),
                op,
                t.layout.elem,
                t.layout.wide,
                data,
            )
        })
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
        if let Some((off, n)) = self.fast(&t, result.layout, result.count) {
            if n <= SMALL_ACC
                && (result.layout.elem, result.layout.wide) == (t.layout.elem, t.layout.wide)
                && origin.is_none_or(|o| o.layout.is_contig(o.count))
            {
                // Range and epoch are right: only the op and the origin's
                // type can be wrong, which the general path checks first
                // as well.
                if !crate::acc_plain(origin.as_ref(), &t, op, n) {
                    crate::acc_check(origin.as_ref(), &t, op)?;
                }
                let data = match origin {
                    // SAFETY: the caller's contract: `n` contiguous bytes
                    // (the origin holds as many as the target, `acc_check`
                    // says).
                    Some(o) => unsafe { bytes(o.ptr, n) },
                    None => &[],
                };
                let old = self.acc_at(t.rank, off, n, op, t.layout, data)?;
                // SAFETY: the caller's contract: `n` contiguous writable
                // bytes at `result`.
                unsafe { bytes_mut(result.ptr, n) }.copy_from_slice(&old[..n]);
                return Ok(());
            }
        }
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
        if reg.contig
            && want <= SMALL_ACC
            && result.layout.is_contig(result.count)
            && origin.is_none_or(|o| o.layout.is_contig(o.count))
        {
            let data = match origin {
                // SAFETY: the caller's contract: `want` contiguous bytes
                // (the origin holds as many as the target, `acc_check`
                // says).
                Some(o) => unsafe { bytes(o.ptr, want) },
                None => &[],
            };
            let old = self.acc_small(t.rank, reg.offset, want, op, t.layout, data)?;
            // SAFETY: the caller's contract.
            unsafe { Self::deliver(result, &old[..want]) };
            return Ok(());
        }
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

    unsafe fn fetch_and_op(
        &self,
        origin: *const u8,
        result: *mut u8,
        layout: &Layout,
        target: (i32, isize),
        op: &AccOp,
    ) -> Result<()> {
        let (rank, disp) = target;
        let t = Target {
            rank,
            disp,
            count: 1,
            layout,
        };
        // One element of one type at each side: only the target's range
        // and epoch, and whether the op applies, are left to check.
        if layout.size <= SMALL_ACC && op.plain_on(layout) {
            if let Some((off, n)) = self.fast(&t, layout, 1) {
                let data = match op {
                    AccOp::NoOp => &[],
                    // SAFETY: the caller's contract: one element (`n`
                    // contiguous bytes, `fast` says) at `origin`.
                    _ => unsafe { bytes(origin, n) },
                };
                let old = self.acc_at(rank, off, n, op, layout, data)?;
                // SAFETY: the caller's contract: one writable element at
                // `result`.
                unsafe { bytes_mut(result, n) }.copy_from_slice(&old[..n]);
                return Ok(());
            }
        }
        let o = Buf {
            ptr: origin,
            count: 1,
            layout,
        };
        let r = BufMut {
            ptr: result,
            count: 1,
            layout,
        };
        // SAFETY: the caller's contract.
        unsafe { self.get_accumulate(Some(o), r, t, op) }
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
        let mut e = lock(&self.ep);
        e.locks.insert(rank, (kind, nocheck));
        self.publish(&e, Some(rank));
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
        let mut e = lock(&self.ep);
        e.locks.remove(&rank);
        self.publish(&e, Some(rank));
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
        let mut e = lock(&self.ep);
        e.lock_all = Some(nocheck);
        self.publish(&e, None);
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
        let mut e = lock(&self.ep);
        e.lock_all = None;
        self.publish(&e, None);
        Ok(())
    }

    fn flush(&self, rank: Option<i32>) -> Result<()> {
        if !rank.is_some_and(|r| self.open.covers(r)) {
            lock(&self.ep).flush_check(rank, self.size)?;
        }
        // Operations completed when issued; order them before what follows.
        fence(Ordering::SeqCst);
        Ok(())
    }

    fn flush_local(&self, rank: Option<i32>) -> Result<()> {
        if !rank.is_some_and(|r| self.open.covers(r)) {
            lock(&self.ep).flush_local_check(rank, self.size)?;
        }
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
        if self.open.covers(rank) {
            return Ok(());
        }
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
