//! # tmpi-osc: one-sided communication (MPI RMA)
//!
//! The osc framework in Open MPI's sense: a window (`MPI_Win_create`,
//! `MPI_Win_allocate`) is served by one module, made by the component of
//! highest priority that accepts the window's communicator. Components:
//!
//! * [`pt2pt`] (priority 10): active messages over the pml, as Open MPI's
//!   osc/pt2pt and MPICH's CH3 RMA. Every operation is a message to the
//!   target on the window's own context; the target applies it from the
//!   pml's progress (a hook run in every waiting round, and in coll's), so
//!   it works over every transport (self, sm, tcp, openib).
//!
//! The framework owns what every component shares: the datatype layout an
//! operation names ([`Layout`]), the accumulate ops ([`AccOp`]), window
//! attributes, and the errors ([`OscError`], each with its MPI class).
//! See `docs/osc.md`.

use std::sync::{Arc, Mutex};

use tmpi_base::error::MpiErrorClass;
use tmpi_coll::{Comm, Datatype, Op};
use tmpi_pml::Pml;

pub(crate) mod mem;
pub mod pt2pt;
pub(crate) mod wire;

/// An error of a one-sided call, with its MPI error class.
#[derive(Debug, thiserror::Error)]
pub enum OscError {
    /// The call does not fit the window's synchronisation state (an
    /// operation outside an access epoch, unlock without lock, ...).
    #[error("{0}")]
    Sync(String),
    /// The target region lies outside the target's window.
    #[error("{0}")]
    Range(String),
    /// A rank outside the window's group.
    #[error("{0}")]
    Rank(String),
    /// Origin and target datatypes do not match.
    #[error("{0}")]
    Type(String),
    /// The op cannot be used here (a user op, or an op for another type).
    #[error("{0}")]
    Op(String),
    /// A bad argument (lock type, size, displacement unit, ...).
    #[error("{0}")]
    Arg(String),
    /// Communication failed underneath.
    #[error("{0}")]
    Comm(String),
}

impl OscError {
    /// The MPI error class.
    pub fn class(&self) -> MpiErrorClass {
        match self {
            OscError::Sync(_) => MpiErrorClass::RmaSync,
            OscError::Range(_) => MpiErrorClass::RmaRange,
            OscError::Rank(_) => MpiErrorClass::Rank,
            OscError::Type(_) => MpiErrorClass::Type,
            OscError::Op(_) => MpiErrorClass::Op,
            OscError::Arg(_) => MpiErrorClass::Arg,
            OscError::Comm(_) => MpiErrorClass::Other,
        }
    }
}

impl From<tmpi_pml::PmlError> for OscError {
    fn from(e: tmpi_pml::PmlError) -> Self {
        OscError::Comm(format!("one-sided transfer failed: {e}"))
    }
}

impl From<tmpi_coll::CollError> for OscError {
    fn from(e: tmpi_coll::CollError) -> Self {
        OscError::Comm(format!("window communicator: {e}"))
    }
}

/// Result of the osc calls.
pub type Result<T> = std::result::Result<T, OscError>;

/// The memory layout of one item of a datatype: its byte blocks (offset,
/// length, in type-map order), extent and data size, and the single
/// predefined element type accumulates reduce it as (packed form for the
/// pair types), when it has one; or, for the C types Rust has no
/// arithmetic for, the kind of [`WideKernel`] that reduces it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    pub blocks: Vec<(isize, usize)>,
    pub extent: isize,
    pub size: usize,
    pub elem: Option<Datatype>,
    pub wide: Option<u8>,
}

/// Reductions on the C types Rust has no arithmetic for (`long double`,
/// the complex types, `MPI_LONG_DOUBLE_INT`), whose kernels are C code of
/// the C API: `(kind, op, input, inout)` computes `inout = input op inout`
/// over the packed items in `inout` (empty buffers: whether the op applies
/// to the kind) and returns `false` when it does not apply.
pub type WideKernel = fn(u8, &Op, &[u8], &mut [u8]) -> bool;

static WIDE: std::sync::OnceLock<WideKernel> = std::sync::OnceLock::new();

/// Installs the [`WideKernel`] (the C API does, before its first window).
pub fn set_wide_kernel(k: WideKernel) {
    let _ = WIDE.set(k);
}

/// Runs the wide kernel; `false` without one or when the op does not apply.
pub(crate) fn wide_apply(kind: u8, op: &Op, input: &[u8], inout: &mut [u8]) -> bool {
    WIDE.get().is_some_and(|k| k(kind, op, input, inout))
}

impl Layout {
    /// `n` contiguous bytes (`MPI_BYTE`-like, no reduction type).
    pub fn bytes(n: usize) -> Layout {
        Layout {
            blocks: if n == 0 { vec![] } else { vec![(0, n)] },
            extent: n as isize,
            size: n,
            elem: None,
            wide: None,
        }
    }

    /// One predefined element type, contiguous.
    pub fn elem(e: Datatype) -> Layout {
        Layout {
            elem: Some(e),
            ..Layout::bytes(e.size())
        }
    }

    /// Bytes of data in `count` items.
    pub fn packed_len(&self, count: usize) -> Result<usize> {
        self.size
            .checked_mul(count)
            .ok_or_else(|| OscError::Arg(format!("{count} items of {} bytes overflow", self.size)))
    }

    /// The lowest and one-past-highest byte `count` items touch, relative
    /// to their start (`None` when they touch none).
    pub fn span(&self, count: usize) -> Option<(i128, i128)> {
        if count == 0 || self.blocks.is_empty() {
            return None;
        }
        let lo = self.blocks.iter().map(|b| b.0 as i128).min()?;
        let hi = self
            .blocks
            .iter()
            .map(|b| b.0 as i128 + b.1 as i128)
            .max()?;
        let last = (count as i128 - 1) * self.extent as i128;
        Some((lo.min(lo + last), hi.max(hi + last)))
    }

    /// Whether `count` items are one block starting at 0.
    pub fn is_contig(&self, count: usize) -> bool {
        count == 0
            || self.blocks.is_empty()
            || (self.blocks.len() == 1
                && self.blocks[0].0 == 0
                && (count == 1 || self.extent == self.blocks[0].1 as isize))
    }
}

/// The op of an accumulate: a predefined reduction, `MPI_REPLACE` or
/// `MPI_NO_OP`.
#[derive(Debug, Clone)]
pub enum AccOp {
    Reduce(Op),
    Replace,
    NoOp,
}

impl AccOp {
    /// The MPI name.
    pub fn name(&self) -> &str {
        match self {
            AccOp::Reduce(o) => o.name(),
            AccOp::Replace => "MPI_REPLACE",
            AccOp::NoOp => "MPI_NO_OP",
        }
    }

    /// `Ok` if the op may accumulate on items of `l` (user ops never: MPI
    /// allows only predefined ones).
    pub fn check(&self, l: &Layout) -> Result<()> {
        match self {
            AccOp::Reduce(Op::User(_)) => Err(OscError::Op(
                "user-defined ops cannot be used in one-sided accumulates (MPI allows predefined ops only)"
                    .into(),
            )),
            AccOp::Reduce(o) => match (l.elem, l.wide) {
                (_, Some(k)) if wide_apply(k, o, &[], &mut []) => Ok(()),
                (Some(e), None) if o.applies_to(e) => Ok(()),
                (Some(e), None) => Err(OscError::Op(format!(
                    "{} does not apply to {}",
                    o.name(),
                    e.name()
                ))),
                _ => Err(OscError::Op(format!(
                    "{} does not apply to this datatype (it needs one predefined type the op is defined on)",
                    o.name()
                ))),
            },
            AccOp::Replace | AccOp::NoOp => Ok(()),
        }
    }
}

/// `MPI_LOCK_EXCLUSIVE` or `MPI_LOCK_SHARED`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LockType {
    Exclusive,
    Shared,
}

/// How the window's memory came to be (`MPI_WIN_CREATE_FLAVOR`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flavor {
    Create,
    Allocate,
}

/// User memory an operation reads at the origin: `count` items of
/// `layout` at `ptr`.
#[derive(Debug, Clone, Copy)]
pub struct Buf<'a> {
    pub ptr: *const u8,
    pub count: usize,
    pub layout: &'a Layout,
}

/// User memory an operation writes at the origin (a get's result).
#[derive(Debug, Clone, Copy)]
pub struct BufMut<'a> {
    pub ptr: *mut u8,
    pub count: usize,
    pub layout: &'a Layout,
}

/// The target side of an operation: displacement (in the target's
/// displacement units), count and layout of the target datatype.
#[derive(Debug, Clone, Copy)]
pub struct Target<'a> {
    pub rank: i32,
    pub disp: isize,
    pub count: usize,
    pub layout: &'a Layout,
}

/// `MPI_MODE_NOCHECK` and friends (accepted; pt2pt uses none of them but
/// NOCHECK, which skips the lock messages).
pub mod assert {
    pub const NOCHECK: u32 = 1024;
    pub const NOSTORE: u32 = 2048;
    pub const NOPUT: u32 = 4096;
    pub const NOPRECEDE: u32 = 8192;
    pub const NOSUCCEED: u32 = 16384;
}

/// What a component's module does for one window. Calls that take origin
/// memory are `unsafe`: the memory must stay valid as MPI requires (until
/// the operation completes at the origin: the end of the call for puts and
/// accumulates, which copy it, the next completing synchronisation for
/// results).
pub trait Module: Send + Sync {
    /// The component's name.
    fn component(&self) -> &'static str;
    /// `MPI_Put`.
    ///
    /// # Safety
    /// `origin` must be readable for its items during the call.
    unsafe fn put(&self, origin: Buf<'_>, target: Target<'_>) -> Result<()>;
    /// `MPI_Get`.
    ///
    /// # Safety
    /// `result` must stay writable and otherwise untouched until the
    /// operation completes (flush, unlock, fence, complete).
    unsafe fn get(&self, result: BufMut<'_>, target: Target<'_>) -> Result<()>;
    /// `MPI_Accumulate`.
    ///
    /// # Safety
    /// As [`Module::put`].
    unsafe fn accumulate(&self, origin: Buf<'_>, target: Target<'_>, op: &AccOp) -> Result<()>;
    /// `MPI_Get_accumulate` (`MPI_Fetch_and_op` with one item); `origin`
    /// is ignored for `MPI_NO_OP`.
    ///
    /// # Safety
    /// As [`Module::put`] for `origin`, [`Module::get`] for `result`.
    unsafe fn get_accumulate(
        &self,
        origin: Option<Buf<'_>>,
        result: BufMut<'_>,
        target: Target<'_>,
        op: &AccOp,
    ) -> Result<()>;
    /// `MPI_Compare_and_swap` of one element of `layout`.
    ///
    /// # Safety
    /// `origin` and `compare` readable during the call, `result` as in
    /// [`Module::get`], each one element of `layout`.
    unsafe fn compare_and_swap(
        &self,
        origin: *const u8,
        compare: *const u8,
        result: *mut u8,
        layout: &Layout,
        rank: i32,
        disp: isize,
    ) -> Result<()>;
    /// `MPI_Win_fence`.
    fn fence(&self, assert: u32) -> Result<()>;
    /// `MPI_Win_lock`.
    fn lock(&self, kind: LockType, rank: i32, assert: u32) -> Result<()>;
    /// `MPI_Win_unlock`.
    fn unlock(&self, rank: i32) -> Result<()>;
    /// `MPI_Win_lock_all`.
    fn lock_all(&self, assert: u32) -> Result<()>;
    /// `MPI_Win_unlock_all`.
    fn unlock_all(&self) -> Result<()>;
    /// `MPI_Win_flush` (`None`: `MPI_Win_flush_all`).
    fn flush(&self, rank: Option<i32>) -> Result<()>;
    /// `MPI_Win_flush_local` (`None`: `_all`).
    fn flush_local(&self, rank: Option<i32>) -> Result<()>;
    /// `MPI_Win_sync`.
    fn sync(&self) -> Result<()>;
    /// `Ok` when a passive-target epoch (a lock on `rank`, or lock_all)
    /// is open: the request-based operations need one.
    fn passive_epoch(&self, rank: i32) -> Result<()>;
    /// `MPI_Win_post` to the window ranks `group`.
    fn post(&self, group: &[i32], assert: u32) -> Result<()>;
    /// `MPI_Win_start` towards the window ranks `group`.
    fn start(&self, group: &[i32], assert: u32) -> Result<()>;
    /// `MPI_Win_complete`.
    fn complete(&self) -> Result<()>;
    /// `MPI_Win_wait` (`block = false`: `MPI_Win_test`, whether it ended).
    fn wait(&self, block: bool) -> Result<bool>;
    /// `MPI_Win_free`'s collective part (every epoch must be closed).
    fn free(&self) -> Result<()>;
}

/// A component: decides whether it can serve a window and makes its module.
pub trait Component: Send + Sync {
    fn name(&self) -> &'static str;
    /// The priority for this window, `None` if the component cannot serve it.
    fn priority(&self, comm: &Comm) -> Option<i32>;
    /// Makes the module (collective over `comm`).
    fn create(&self, pml: &Arc<Pml>, comm: &Comm, mem: &Memory) -> Result<Box<dyn Module>>;
}

/// The components this build has.
pub fn components() -> Vec<Box<dyn Component>> {
    vec![Box::new(pt2pt::Pt2ptComponent)]
}

/// A window's local memory: base address and size in bytes, with its
/// displacement unit.
#[derive(Debug, Clone, Copy)]
pub struct Memory {
    pub base: usize,
    pub size: usize,
    pub disp_unit: usize,
}

/// One window: its module, memory, flavor and the group it spans.
pub struct Window {
    module: Box<dyn Module>,
    mem: Memory,
    flavor: Flavor,
    group: tmpi_coll::Group,
    rank: u32,
    name: Mutex<String>,
    /// The memory of an `MPI_Win_allocate` window (8-byte words, freed
    /// with the window).
    _owned: Option<Vec<u64>>,
}

impl std::fmt::Debug for Window {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Window")
            .field("component", &self.module.component())
            .field("size", &self.mem.size)
            .finish()
    }
}

impl Window {
    /// `MPI_Win_create` over user memory (`base`, `size` bytes), or
    /// `MPI_Win_allocate` when `base` is `None` (the window owns `size`
    /// bytes, zeroed). Collective over `comm`.
    pub fn create(
        pml: &Arc<Pml>,
        comm: &Comm,
        base: Option<usize>,
        size: usize,
        disp_unit: usize,
    ) -> Result<Window> {
        if disp_unit == 0 {
            return Err(OscError::Arg("disp_unit must be positive".into()));
        }
        let (owned, base, flavor) = match base {
            Some(b) => (None, b, Flavor::Create),
            None => {
                let mut v = vec![0u64; size.div_ceil(8).max(1)];
                let b = v.as_mut_ptr() as usize;
                (Some(v), b, Flavor::Allocate)
            }
        };
        let mem = Memory {
            base,
            size,
            disp_unit,
        };
        let comps = components();
        let chosen = comps
            .iter()
            .filter_map(|c| c.priority(comm).map(|p| (p, c)))
            .max_by_key(|(p, _)| *p)
            .map(|(_, c)| c)
            .ok_or_else(|| OscError::Comm("no osc component can serve this window".into()))?;
        tracing::debug!(target: "osc", "window of {size} bytes served by component {}", chosen.name());
        let module = chosen.create(pml, comm, &mem)?;
        Ok(Window {
            module,
            mem,
            flavor,
            group: comm.group(),
            rank: comm.rank(),
            name: Mutex::new(String::new()),
            _owned: owned,
        })
    }

    /// The module serving the window.
    pub fn module(&self) -> &dyn Module {
        &*self.module
    }
    /// `MPI_WIN_BASE`.
    pub fn base(&self) -> usize {
        self.mem.base
    }
    /// `MPI_WIN_SIZE`.
    pub fn size(&self) -> usize {
        self.mem.size
    }
    /// `MPI_WIN_DISP_UNIT`.
    pub fn disp_unit(&self) -> usize {
        self.mem.disp_unit
    }
    /// `MPI_WIN_CREATE_FLAVOR`.
    pub fn flavor(&self) -> Flavor {
        self.flavor
    }
    /// `MPI_Win_get_group`.
    pub fn group(&self) -> tmpi_coll::Group {
        self.group.clone()
    }
    /// This process's rank in the window.
    pub fn rank(&self) -> u32 {
        self.rank
    }
    /// `MPI_Win_set_name`.
    pub fn set_name(&self, n: &str) {
        *self.name.lock().unwrap_or_else(|e| e.into_inner()) = n.to_owned();
    }
    /// `MPI_Win_get_name`.
    pub fn name(&self) -> String {
        self.name.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
    /// `MPI_Win_free`'s collective part: afterwards nothing reaches the
    /// window any more, and dropping it releases an allocated window's
    /// memory. On an error (an epoch still open) the window stays usable.
    pub fn free(&self) -> Result<()> {
        self.module.free()
    }
}
