//! One-sided communication (MPI RMA) for Rust: a window of `T` elements on
//! every rank of a communicator, served by the `osc` framework (the
//! component the C API's `MPI_Win_create` gets).
//!
//! Safety without `unsafe` at the call site comes from who owns the
//! memory:
//! - the window's memory is a `Vec<T>` moved into the window
//!   ([`Comm::window`]), or memory the window allocates
//!   ([`Comm::allocate_window`], [`Comm::shared_window`] for a part of a
//!   shared segment; no direct loads or stores), given back by
//!   [`Window::into_vec`] after the collective free, when no operation
//!   can touch it any more;
//! - a put or accumulate copies its origin data before it returns;
//! - a get (or a fetching atomic) writes into a buffer the window keeps,
//!   named by a [`Ticket`]; [`Window::take`] hands it over only once a
//!   synchronisation that completes it (a fence, an unlock or flush of its
//!   target, an unlock_all or flush of all) has run on this rank, and
//!   refuses (`MPI_ERR_RMA_SYNC`) before: the buffer cannot be read while
//!   the operation may still write it.
//!
//! Synchronisation: fence, passive target (lock/unlock, lock_all,
//! flush, flush_local) and PSCW (post/start/complete/wait/test).
//! Epoch rules are MPI's: an operation outside an access epoch, a flush
//! outside a passive-target epoch, an unlock without lock are errors of
//! class `MPI_ERR_RMA_SYNC`, never a hang.

use std::marker::PhantomData;
use std::sync::Mutex;

use tmpi_osc::{AccOp, Buf, BufMut, Layout, LockType, OscError, Target};
use tmpi_pml::MpiErrorClass;

use crate::comm::Comm;
use crate::datatype::Equivalence;
use crate::error::Error;

impl From<OscError> for Error {
    fn from(e: OscError) -> Self {
        Error::new(e.class(), e.to_string())
    }
}

/// How a passive-target lock shares the target's window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lock {
    /// `MPI_LOCK_EXCLUSIVE`.
    Exclusive,
    /// `MPI_LOCK_SHARED`.
    Shared,
}

/// The result of a get or a fetching atomic, held by its window until a
/// synchronisation completed it ([`Window::take`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use = "a ticket is the only way to the result"]
pub struct Ticket(usize);

/// A window of `len` elements of `T` on this rank (`MPI_Win_create` over
/// a vector the window owns, `MPI_Win_allocate` or
/// `MPI_Win_allocate_shared`), addressed by element offsets.
pub struct Window<T: Equivalence> {
    win: tmpi_osc::Window,
    /// The exposed memory.
    mem: Memory<T>,
    results: Mutex<Results<T>>,
    freed: bool,
    _t: PhantomData<T>,
}

/// The result buffers of gets, by ticket, and the synchronisations that
/// complete them.
struct Results<T> {
    /// Buffer, target and the completion counts when it was issued;
    /// `None` once taken.
    slots: Vec<Option<Pending<T>>>,
    /// Synchronisations that complete every operation (fence, flush of
    /// all, unlock_all).
    all: u64,
    /// Per target: unlocks and flushes of it.
    per_target: std::collections::HashMap<i32, u64>,
}

/// Where a window's memory lives.
enum Memory<T> {
    /// `MPI_Win_create`: the vector moved in at creation, out at
    /// [`Window::into_vec`].
    Vec(Vec<T>),
    /// `MPI_Win_allocate` or `MPI_Win_allocate_shared`: `len` elements
    /// the osc window owns (its allocation, or this rank's part of the
    /// shared segment it maps), released when it is dropped.
    Osc { len: usize },
}

struct Pending<T> {
    buf: Box<[T]>,
    target: i32,
    all: u64,
    mine: u64,
}

impl<T> Results<T> {
    fn target_count(&self, t: i32) -> u64 {
        self.per_target.get(&t).copied().unwrap_or(0)
    }
}

impl<T: Equivalence> std::fmt::Debug for Window<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Window")
            .field("rank", &self.win.rank())
            .field("len", &self.len())
            .finish()
    }
}

impl Comm {
    /// `MPI_Win_create` over `mem` (collective): every rank exposes its
    /// vector, of any length (0 included); element `i` of rank `r`'s
    /// vector is offset `i` at target `r`.
    pub fn window<T: Equivalence>(&self, mut mem: Vec<T>) -> Result<Window<T>, Error> {
        let c = self.coll()?;
        let size = std::mem::size_of_val(mem.as_slice());
        let base = mem.as_mut_ptr() as usize;
        let unit = std::mem::size_of::<T>().max(1);
        let win = tmpi_osc::Window::create(self.pml_handle(), &c, Some(base), size, unit)?;
        Ok(Window::over(win, Memory::Vec(mem)))
    }

    /// `MPI_Win_allocate_shared` of `len` zeroed elements on this rank
    /// (collective; every rank of the communicator must run on one node,
    /// `MPI_ERR_RMA_SHARED` otherwise): the ranks' parts lie in one
    /// shared-memory segment. Addressed like any window, by element
    /// offsets; [`Window::into_vec`] copies this rank's part out.
    pub fn shared_window<T: Equivalence>(&self, len: usize) -> Result<Window<T>, Error> {
        let c = self.coll()?;
        let size = window_bytes::<T>(len)?;
        let unit = std::mem::size_of::<T>().max(1);
        let win = tmpi_osc::Window::allocate_shared(self.pml_handle(), &c, size, unit)?;
        Ok(Window::over(win, Memory::Osc { len }))
    }

    /// `MPI_Win_allocate` of `len` zeroed elements on this rank
    /// (collective): memory the window owns, addressed like any window;
    /// [`Window::into_vec`] copies it out.
    pub fn allocate_window<T: Equivalence>(&self, len: usize) -> Result<Window<T>, Error> {
        let c = self.coll()?;
        let size = window_bytes::<T>(len)?;
        let unit = std::mem::size_of::<T>().max(1);
        let win = tmpi_osc::Window::create(self.pml_handle(), &c, None, size, unit)?;
        Ok(Window::over(win, Memory::Osc { len }))
    }
}

/// Bytes of `len` elements of `T` (`MPI_ERR_SIZE` on overflow).
fn window_bytes<T>(len: usize) -> Result<usize, Error> {
    len.checked_mul(std::mem::size_of::<T>()).ok_or_else(|| {
        Error::new(
            MpiErrorClass::Size,
            format!("a window of {len} elements overflows"),
        )
    })
}

/// The layout of `T` as osc reduces it: elements of `T::ELEMENT`
/// (`Datatype::Byte` for opaque types), and how many make one `T`.
fn layout<T: Equivalence>() -> (Layout, usize) {
    let e = T::ELEMENT;
    let per = std::mem::size_of::<T>() / e.size().max(1);
    (Layout::elem(e), per)
}

fn lock_type(l: Lock) -> LockType {
    match l {
        Lock::Exclusive => LockType::Exclusive,
        Lock::Shared => LockType::Shared,
    }
}

fn disp(offset: usize) -> Result<isize, Error> {
    isize::try_from(offset).map_err(|_| {
        Error::new(
            MpiErrorClass::RmaRange,
            format!("offset {offset} is too large"),
        )
    })
}

/// `count` items of `layout` from element `offset` at `rank`.
fn target_at(rank: i32, offset: usize, count: usize, layout: &Layout) -> Result<Target<'_>, Error> {
    Ok(Target {
        rank,
        disp: disp(offset)?,
        count,
        layout,
    })
}

/// `count` items of `layout` at `data`, read by the operation.
fn origin<'a, T>(data: &[T], count: usize, layout: &'a Layout) -> Buf<'a> {
    Buf {
        ptr: data.as_ptr().cast(),
        count,
        layout,
    }
}

/// A predefined reduction, or `MPI_REPLACE` for `None`.
fn acc_op(op: Option<&tmpi_coll::Op>) -> AccOp {
    op.map_or(AccOp::Replace, |o| AccOp::Reduce(o.clone()))
}

impl<T: Equivalence> Window<T> {
    fn over(win: tmpi_osc::Window, mem: Memory<T>) -> Window<T> {
        Window {
            win,
            mem,
            results: Mutex::new(Results {
                slots: Vec::new(),
                all: 0,
                per_target: std::collections::HashMap::new(),
            }),
            freed: false,
            _t: PhantomData,
        }
    }

    /// This rank's number of elements.
    pub fn len(&self) -> usize {
        match &self.mem {
            Memory::Vec(v) => v.len(),
            Memory::Osc { len } => *len,
        }
    }

    /// Whether this rank exposes no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// This process's rank in the window's group.
    pub fn rank(&self) -> i32 {
        self.win.rank() as i32
    }

    /// `MPI_Put` of `data` to elements `offset..offset + data.len()` of
    /// `target` (the data is copied before this returns).
    pub fn put(&self, data: &[T], target: i32, offset: usize) -> Result<(), Error> {
        let (l, per) = layout::<T>();
        let n = data.len() * per;
        let tgt = target_at(target, offset, n, &l)?;
        // SAFETY: `data` is readable for `n` elements of the layout during
        // the call, and the module copies it before returning (puts do).
        unsafe { self.win.module().put(origin(data, n, &l), tgt) }?;
        Ok(())
    }

    /// `MPI_Accumulate` of `data` into `target`'s elements from `offset`
    /// with a predefined `op` (`None`: `MPI_REPLACE`).
    pub fn accumulate(
        &self,
        data: &[T],
        target: i32,
        offset: usize,
        op: Option<&tmpi_coll::Op>,
    ) -> Result<(), Error> {
        let (l, per) = layout::<T>();
        let n = data.len() * per;
        let tgt = target_at(target, offset, n, &l)?;
        // SAFETY: as for `put`: read during the call, copied.
        unsafe { (self.win.module()).accumulate(origin(data, n, &l), tgt, &acc_op(op)) }?;
        Ok(())
    }

    fn results(&self) -> std::sync::MutexGuard<'_, Results<T>> {
        self.results.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A zeroed result buffer of `len` elements for an operation on
    /// `target`, kept under a new ticket; its address for the module to
    /// write.
    fn result_buffer(&self, len: usize, target: i32) -> (Ticket, *mut u8) {
        // SAFETY: `T: Equivalence` admits every bit pattern, zeroes included.
        let mut buf: Box<[T]> = (0..len)
            .map(|_| unsafe { std::mem::zeroed::<T>() })
            .collect();
        let p = buf.as_mut_ptr().cast::<u8>();
        let mut r = self.results();
        let (all, mine) = (r.all, r.target_count(target));
        r.slots.push(Some(Pending {
            buf,
            target,
            all,
            mine,
        }));
        (Ticket(r.slots.len() - 1), p)
    }

    /// `t` once its operation started (`r`); its buffer forgotten when the
    /// operation failed to start.
    fn started(&self, t: Ticket, r: tmpi_osc::Result<()>) -> Result<Ticket, Error> {
        if let Err(e) = r {
            let mut g = self.results();
            if t.0 + 1 == g.slots.len() {
                g.slots.pop();
            }
            return Err(e.into());
        }
        Ok(t)
    }

    /// Counts a synchronisation that completed the operations on `target`
    /// (`None`: on every target).
    fn completed(&self, target: Option<i32>) {
        let mut r = self.results();
        match target {
            None => r.all += 1,
            Some(t) => *r.per_target.entry(t).or_default() += 1,
        }
    }

    /// `MPI_Get` of `len` elements from `offset` at `target`: the result
    /// is [`Window::take`]n after the fence, unlock or flush that
    /// completes it.
    pub fn get(&self, target: i32, offset: usize, len: usize) -> Result<Ticket, Error> {
        let (l, per) = layout::<T>();
        let n = len * per;
        let tgt = target_at(target, offset, n, &l)?;
        let (ticket, p) = self.result_buffer(len, target);
        let result = BufMut {
            ptr: p,
            count: n,
            layout: &l,
        };
        // SAFETY: the buffer is owned by `self.results` until taken, and
        // `take` hands it out only after a completing synchronisation; it
        // lives (boxed, unmoved) until the window is freed otherwise.
        let r = unsafe { self.win.module().get(result, tgt) };
        self.started(ticket, r)
    }

    /// `MPI_Fetch_and_op`: combines `value` into element `offset` of
    /// `target` with `op` (`None`: replace) and fetches the element's
    /// previous value, [`Window::take`]n as one element.
    pub fn fetch_and_op(
        &self,
        value: T,
        target: i32,
        offset: usize,
        op: Option<&tmpi_coll::Op>,
    ) -> Result<Ticket, Error> {
        let (l, per) = layout::<T>();
        let tgt = target_at(target, offset, per, &l)?;
        let (ticket, p) = self.result_buffer(1, target);
        let v = [value];
        let result = BufMut {
            ptr: p,
            count: per,
            layout: &l,
        };
        // SAFETY: origin read during the call; the result buffer as in `get`.
        let r = unsafe {
            self.win
                .module()
                .get_accumulate(Some(origin(&v, per, &l)), result, tgt, &acc_op(op))
        };
        self.started(ticket, r)
    }

    /// `MPI_Get_accumulate`: combines `data` into `target`'s elements from
    /// `offset` with a predefined `op` (`None`: `MPI_REPLACE`) and fetches
    /// their previous values, [`Window::take`]n as `data.len()` elements.
    /// The elements are read and combined as one atomic step with respect
    /// to other accumulates.
    pub fn get_accumulate(
        &self,
        data: &[T],
        target: i32,
        offset: usize,
        op: Option<&tmpi_coll::Op>,
    ) -> Result<Ticket, Error> {
        let (l, per) = layout::<T>();
        let n = data.len() * per;
        let tgt = target_at(target, offset, n, &l)?;
        let (ticket, p) = self.result_buffer(data.len(), target);
        let result = BufMut {
            ptr: p,
            count: n,
            layout: &l,
        };
        // SAFETY: origin read during the call; the result buffer as in `get`.
        let r = unsafe {
            self.win
                .module()
                .get_accumulate(Some(origin(data, n, &l)), result, tgt, &acc_op(op))
        };
        self.started(ticket, r)
    }

    /// `MPI_Compare_and_swap`: element `offset` of `target` becomes
    /// `value` if it equals `compare`; its previous value is
    /// [`Window::take`]n as one element. `T` must be one predefined
    /// integer or byte element (`MPI_ERR_TYPE` otherwise).
    pub fn compare_and_swap(
        &self,
        value: T,
        compare: T,
        target: i32,
        offset: usize,
    ) -> Result<Ticket, Error> {
        let (l, per) = layout::<T>();
        if per != 1 {
            return Err(Error::new(
                MpiErrorClass::Type,
                "compare-and-swap needs a type of one predefined element",
            ));
        }
        let at = disp(offset)?;
        let (ticket, p) = self.result_buffer(1, target);
        let (v, c) = ([value], [compare]);
        // SAFETY: `v` and `c` are read during the call; the result buffer
        // as in `get`.
        let r = unsafe {
            self.win.module().compare_and_swap(
                v.as_ptr().cast(),
                c.as_ptr().cast(),
                p,
                &l,
                target,
                at,
            )
        };
        self.started(ticket, r)
    }

    /// The result of a get or fetching atomic, once a synchronisation
    /// that completes it has run on this rank (a fence, an unlock or flush
    /// of its target, unlock_all, a flush of all): `MPI_ERR_RMA_SYNC`
    /// before, `MPI_ERR_ARG` for a ticket taken already or of another
    /// window.
    pub fn take(&self, t: Ticket) -> Result<Vec<T>, Error> {
        let mut r = self.results();
        let (all, mine) = match r.slots.get(t.0) {
            Some(Some(p)) => (r.all > p.all, r.target_count(p.target) > p.mine),
            _ => {
                return Err(Error::new(
                    MpiErrorClass::Arg,
                    format!("ticket {} was taken already or is not of this window", t.0),
                ))
            }
        };
        if !all && !mine {
            return Err(Error::new(
                MpiErrorClass::RmaSync,
                "the operation is not complete yet: fence, unlock or flush its target first",
            ));
        }
        let p = r.slots[t.0].take().map(|p| p.buf);
        Ok(p.map(<[T]>::into_vec).unwrap_or_default())
    }

    /// `MPI_Win_fence` (collective): ends the epoch's operations
    /// everywhere and starts the next.
    pub fn fence(&self) -> Result<(), Error> {
        self.win.module().fence(0)?;
        self.completed(None);
        Ok(())
    }

    /// `MPI_Win_lock` on `target`.
    pub fn lock(&self, kind: Lock, target: i32) -> Result<(), Error> {
        Ok(self.win.module().lock(lock_type(kind), target, 0)?)
    }

    /// `MPI_Win_unlock` on `target`: its operations are complete there.
    pub fn unlock(&self, target: i32) -> Result<(), Error> {
        self.win.module().unlock(target)?;
        self.completed(Some(target));
        Ok(())
    }

    /// `MPI_Win_lock_all` (shared locks on every rank).
    pub fn lock_all(&self) -> Result<(), Error> {
        Ok(self.win.module().lock_all(0)?)
    }

    /// `MPI_Win_unlock_all`.
    pub fn unlock_all(&self) -> Result<(), Error> {
        self.win.module().unlock_all()?;
        self.completed(None);
        Ok(())
    }

    /// `MPI_Win_flush` on `target` (`None`: every target,
    /// `MPI_Win_flush_all`) inside a passive-target epoch.
    pub fn flush(&self, target: Option<i32>) -> Result<(), Error> {
        self.win.module().flush(target)?;
        self.completed(target);
        Ok(())
    }

    /// `MPI_Win_flush_local` on `target` (`None`: every target,
    /// `MPI_Win_flush_local_all`) inside a passive-target epoch: the
    /// operations are complete at this rank (results of gets arrived, origin
    /// data may be reused), not necessarily at the target.
    pub fn flush_local(&self, target: Option<i32>) -> Result<(), Error> {
        self.win.module().flush_local(target)?;
        self.completed(target);
        Ok(())
    }

    /// `MPI_Win_post`: exposes this rank's window to the window ranks
    /// `origins` until [`Window::wait`] (or a [`Window::test`] that says
    /// it ended).
    pub fn post(&self, origins: &[i32]) -> Result<(), Error> {
        Ok(self.win.module().post(origins, 0)?)
    }

    /// `MPI_Win_start`: an access epoch towards the window ranks
    /// `targets` (waits until each of them posted).
    pub fn start(&self, targets: &[i32]) -> Result<(), Error> {
        Ok(self.win.module().start(targets, 0)?)
    }

    /// `MPI_Win_complete`: ends the access epoch of [`Window::start`]; its
    /// operations are complete here (results may be taken).
    pub fn complete(&self) -> Result<(), Error> {
        self.win.module().complete()?;
        self.completed(None);
        Ok(())
    }

    /// `MPI_Win_wait`: ends the exposure epoch of [`Window::post`] once
    /// every origin of its group completed; their operations are applied.
    pub fn wait(&self) -> Result<(), Error> {
        self.win.module().wait(true)?;
        Ok(())
    }

    /// `MPI_Win_test`: whether the exposure epoch of [`Window::post`]
    /// ended (it did if `true`, as after [`Window::wait`]).
    pub fn test(&self) -> Result<bool, Error> {
        Ok(self.win.module().wait(false)?)
    }

    /// Frees the window (collective, every epoch closed) and gives back
    /// this rank's memory with what the other ranks wrote into it (memory
    /// the window allocated, a shared window's part included, is copied
    /// out).
    pub fn into_vec(mut self) -> Result<Vec<T>, Error> {
        self.win.free()?;
        self.freed = true;
        if let Memory::Osc { len } = self.mem {
            return Ok(self.osc_memory_copy(len));
        }
        match &mut self.mem {
            Memory::Vec(v) => Ok(std::mem::take(v)),
            Memory::Osc { .. } => Ok(Vec::new()),
        }
    }

    /// A copy of the `len` elements of memory the osc window owns, after
    /// the collective free.
    fn osc_memory_copy(&self, len: usize) -> Vec<T> {
        let mut out: Vec<T> = Vec::with_capacity(len);
        let n = len * std::mem::size_of::<T>();
        if n == 0 {
            return out;
        }
        // SAFETY: the window's memory is `n` bytes at its base, allocated or
        // mapped until `self.win` is dropped; after the collective free no
        // operation writes it, and the facade gives no process direct
        // stores into it. Bytes are copied (the base need not be aligned
        // for `T`) into the vector's capacity of `len` elements, which are
        // then initialised (`T: Equivalence` admits every bit pattern).
        unsafe {
            std::ptr::copy_nonoverlapping(
                self.win.base() as *const u8,
                out.as_mut_ptr().cast::<u8>(),
                n,
            );
            out.set_len(len);
        }
        out
    }
}

impl<T: Equivalence> Drop for Window<T> {
    /// Frees the window if [`Window::into_vec`] did not: collective, as
    /// `MPI_Win_free` (every rank drops its window); an error is logged.
    fn drop(&mut self) {
        if !self.freed {
            if let Err(e) = self.win.free() {
                tracing::warn!(target: "osc", "freeing a window on drop: {e}");
            }
        }
    }
}
