//! # tmpi-osc: one-sided communication (MPI RMA)
//!
//! The osc framework in Open MPI's sense: a window (`MPI_Win_create`,
//! `MPI_Win_allocate`, `MPI_Win_allocate_shared`, `MPI_Win_create_dynamic`)
//! is served by one module, made by the component of highest priority that
//! accepts the window's communicator. The framework provides the memory:
//! the user's, its own, a shared segment of the node's ranks (`shm.rs`), or
//! the regions attached to a dynamic window. Components:
//!
//! * [`sm`] (priority 20): windows whose ranks' memory lies in one shared
//!   segment (`MPI_Win_allocate_shared`, and `MPI_Win_allocate` when every
//!   rank is on this node), as Open MPI's osc/sm: the origin loads and
//!   stores in the target's part, applies accumulates under the target's
//!   lock in the segment's header, and synchronises through that header;
//!   no target progress is needed.
//! * [`rdma`] (priority 15): `MPI_Win_create` and `MPI_Win_allocate`
//!   windows whose ranks all reach each other through a BTL with RDMA put
//!   and get (btl-openib): `MPI_Put` and `MPI_Get` are RDMA writes and
//!   reads into the target's registered memory, without the target's
//!   progress; everything else goes to an inner pt2pt module of the same
//!   window. Windows that do not qualify fall back to pt2pt on every rank
//!   together.
//! * [`pt2pt`] (priority 10): active messages over the pml, as Open MPI's
//!   osc/pt2pt and MPICH's CH3 RMA. Every operation is a message to the
//!   target on the window's own context; the target applies it from the
//!   pml's progress (a hook run in every waiting round, and in coll's), so
//!   it works over every transport (self, sm, tcp, openib) and any window.
//!
//! The selection list `osc` and the parameters `osc_<name>_priority` choose
//! among them, as in the other frameworks.
//!
//! The framework owns what every component shares: the datatype layout an
//! operation names ([`Layout`]), the accumulate ops ([`AccOp`]), window
//! attributes, and the errors ([`OscError`], each with its MPI class).
//! See `docs/osc.md`.

use std::sync::{Arc, Mutex};

use tmpi_base::component::{ComponentDescriptor, ComponentRegistry};
use tmpi_base::error::{Error, MpiErrorClass};
use tmpi_base::mca::{McaError, Param, Registry, SelectionList};
use tmpi_coll::{Datatype, Op};
use tmpi_comm::Comm;
use tmpi_pml::Pml;

pub(crate) mod apply;
pub(crate) mod epoch;
pub(crate) mod mem;
pub mod pt2pt;
pub mod rdma;
pub(crate) mod shm;
pub mod sm;
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
    /// Memory cannot be shared (`MPI_Win_allocate_shared` over ranks of
    /// several nodes, or no shared segment).
    #[error("{0}")]
    Shared(String),
    /// Memory cannot be attached to a dynamic window.
    #[error("{0}")]
    Attach(String),
    /// The window's flavor does not allow the call.
    #[error("{0}")]
    Flavor(String),
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
            OscError::Shared(_) => MpiErrorClass::RmaShared,
            OscError::Attach(_) => MpiErrorClass::RmaAttach,
            OscError::Flavor(_) => MpiErrorClass::RmaFlavor,
        }
    }

    /// The error as a target sends it back to the origin (a code, then
    /// the message), at most `max` bytes.
    pub(crate) fn encode(&self, max: usize) -> Vec<u8> {
        let code = match self {
            OscError::Sync(_) => 1,
            OscError::Range(_) => 2,
            OscError::Rank(_) => 3,
            OscError::Type(_) => 4,
            OscError::Op(_) => 5,
            OscError::Arg(_) => 6,
            OscError::Comm(_) => 7,
            OscError::Shared(_) => 8,
            OscError::Attach(_) => 9,
            OscError::Flavor(_) => 10,
        };
        let msg = self.to_string();
        let mut n = msg.len().min(max.saturating_sub(1));
        while !msg.is_char_boundary(n) {
            n -= 1;
        }
        let mut v = Vec::with_capacity(n + 1);
        v.push(code);
        v.extend_from_slice(&msg.as_bytes()[..n]);
        v
    }

    /// The error of [`OscError::encode`]'s bytes, as the origin reports it.
    pub(crate) fn decode(m: &[u8], target: i32) -> OscError {
        let text = String::from_utf8_lossy(m.get(1..).unwrap_or_default());
        let msg = format!("at target rank {target}: {text}");
        match m.first() {
            Some(1) => OscError::Sync(msg),
            Some(2) => OscError::Range(msg),
            Some(3) => OscError::Rank(msg),
            Some(4) => OscError::Type(msg),
            Some(5) => OscError::Op(msg),
            Some(6) => OscError::Arg(msg),
            Some(8) => OscError::Shared(msg),
            Some(9) => OscError::Attach(msg),
            Some(10) => OscError::Flavor(msg),
            _ => OscError::Comm(msg),
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
    #[inline]
    pub fn packed_len(&self, count: usize) -> Result<usize> {
        self.size
            .checked_mul(count)
            .ok_or_else(|| OscError::Arg(format!("{count} items of {} bytes overflow", self.size)))
    }

    /// The lowest and one-past-highest byte `count` items touch, relative
    /// to their start (`None` when they touch none).
    #[inline]
    pub fn span(&self, count: usize) -> Option<(i128, i128)> {
        if count == 0 || self.blocks.is_empty() {
            return None;
        }
        if let [(0, n)] = self.blocks[..] {
            if count == 1 || self.extent == n as isize {
                // Contiguous items: one run from 0.
                return Some((0, n as i128 * count as i128));
            }
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
    #[inline]
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

    /// Whether [`AccOp::check`] passes for `l` in the usual case (a
    /// predefined op on `l`'s one element type, `MPI_REPLACE`,
    /// `MPI_NO_OP`), decided without building a result; `false` means
    /// "ask [`AccOp::check`]".
    #[inline]
    pub(crate) fn plain_on(&self, l: &Layout) -> bool {
        match self {
            AccOp::Replace | AccOp::NoOp => true,
            AccOp::Reduce(Op::User(_)) => false,
            AccOp::Reduce(o) => matches!((l.elem, l.wide), (Some(e), None) if o.applies_to(e)),
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

/// Whether [`acc_check`] passes, decided without building a result for
/// the usual case (a predefined op on the target's one element type, an
/// origin of that type holding `n` bytes, the target's): a fast path's
/// check. `false` only means "ask [`acc_check`]", which reports the
/// errors and decides the types of the wide kernels.
#[inline]
pub(crate) fn acc_plain(origin: Option<&Buf<'_>>, t: &Target<'_>, op: &AccOp, n: usize) -> bool {
    op.plain_on(t.layout)
        && origin.is_none_or(|o| {
            (o.layout.elem, o.layout.wide) == (t.layout.elem, t.layout.wide)
                && o.layout.size.checked_mul(o.count) == Some(n)
        })
}

/// The bytes of data target `t` describes, which the origin's `count`
/// items of `layout` must hold as well: `MPI_ERR_TYPE` otherwise (`what`
/// names the origin's side in the message: "origin", "origin buffer").
pub(crate) fn matched_len(
    what: &str,
    layout: &Layout,
    count: usize,
    t: &Target<'_>,
) -> Result<usize> {
    let want = t.layout.packed_len(t.count)?;
    let have = layout.packed_len(count)?;
    if want != have {
        return Err(OscError::Type(format!(
            "the {what} holds {have} bytes of data, the target datatype {want}"
        )));
    }
    Ok(want)
}

/// The checks of an accumulate: the op applies, origin and target hold
/// the same amount of data of the same predefined type.
pub(crate) fn acc_check(origin: Option<&Buf<'_>>, t: &Target<'_>, op: &AccOp) -> Result<()> {
    op.check(t.layout)?;
    if let Some(o) = origin {
        if (o.layout.elem, o.layout.wide) != (t.layout.elem, t.layout.wide) {
            return Err(OscError::Type(
                "origin and target datatypes are built of different predefined types".into(),
            ));
        }
        let (have, want) = (o.layout.packed_len(o.count)?, t.layout.packed_len(t.count)?);
        if have != want {
            return Err(OscError::Type(format!(
                "the origin holds {have} bytes of data, the target datatype {want}"
            )));
        }
    }
    Ok(())
}

/// The target of `MPI_Compare_and_swap`: one element of `layout`, which
/// must be a predefined type (contiguous, with an element type).
pub(crate) fn cas_target(layout: &Layout, rank: i32, disp: isize) -> Result<Target<'_>> {
    if layout.elem.is_none() || !layout.is_contig(1) {
        return Err(OscError::Type(
            "MPI_Compare_and_swap needs a predefined datatype".into(),
        ));
    }
    Ok(Target {
        rank,
        disp,
        count: 1,
        layout,
    })
}

/// The byte offset of target region `t` in a target window of `wsize`
/// bytes with displacement unit `unit`, checked against the window (a
/// dynamic window's target checks its attached regions itself).
#[inline]
pub(crate) fn target_offset(t: &Target<'_>, wsize: u64, unit: u64, dynamic: bool) -> Result<i64> {
    let off = t.disp as i128 * unit as i128;
    if let Some((lo, hi)) = t.layout.span(t.count) {
        let limit = if dynamic { i128::MAX } else { wsize as i128 };
        if off + lo < 0 || off + hi > limit {
            return Err(OscError::Range(format!(
                "target bytes {}..{} are outside rank {}'s window of {wsize} bytes",
                off + lo,
                off + hi,
                t.rank
            )));
        }
    }
    i64::try_from(off).map_err(|_| OscError::Range(format!("displacement {} overflows", t.disp)))
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
    Dynamic,
    Shared,
}

/// Window info hints a component may use (MPI lets an implementation
/// ignore any hint).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Hints {
    /// `acc_single_intrinsic` (Open MPI's key): the program promises that
    /// every accumulate-class operation on the window works on one element
    /// of a predefined type, so osc rdma may do an 8-byte one as one NIC
    /// atomic instead of taking the target's accumulate lock.
    pub acc_single_intrinsic: bool,
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
    /// `MPI_Fetch_and_op`: one element of `layout` at `origin` (ignored
    /// for `MPI_NO_OP`) combined by `op` into the target's at `disp`, its
    /// old value to `result`. The default is [`Module::get_accumulate`] of
    /// one item of each.
    ///
    /// # Safety
    /// As [`Module::get_accumulate`], one element at each buffer.
    unsafe fn fetch_and_op(
        &self,
        origin: *const u8,
        result: *mut u8,
        layout: &Layout,
        target: (i32, isize),
        op: &AccOp,
    ) -> Result<()> {
        let (rank, disp) = target;
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
        let t = Target {
            rank,
            disp,
            count: 1,
            layout,
        };
        // SAFETY: the caller's contract.
        unsafe { self.get_accumulate(Some(o), r, t, op) }
    }
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
    /// Whether it can serve a window over `comm` whose memory lies in one
    /// shared segment of all ranks (`shared_segment`) or not (the priority
    /// comes from its `osc_<name>_priority` parameter).
    fn accepts(&self, comm: &Comm, shared_segment: bool) -> bool;
    /// Makes the module (collective over `comm`).
    fn create(&self, pml: &Arc<Pml>, comm: &Comm, mem: &Memory) -> Result<Box<dyn Module>>;
}

/// Descriptors of the osc components, for `tmpi_info` and the selection
/// list.
pub fn descriptors() -> [&'static ComponentDescriptor; 3] {
    [&pt2pt::DESCRIPTOR, &rdma::DESCRIPTOR, &sm::DESCRIPTOR]
}

/// The provider of this crate (for `tmpi_info` and MPI initialisation):
/// adds the osc components and registers the framework's parameters.
pub fn register(reg: &Registry, comps: &mut ComponentRegistry) -> std::result::Result<(), Error> {
    for d in descriptors() {
        comps.add(d)?;
    }
    register_selection(reg)?;
    reg.register_verbose("osc", "base")?;
    Ok(())
}

/// [`register`] and every component's parameters, for a process that opens
/// windows after its pml started (the pml reports the names nobody
/// registered, so `--mca osc_sm_priority ...` must be known by then).
pub fn register_all_params(reg: &Registry) -> std::result::Result<(), Error> {
    let mut comps = ComponentRegistry::new();
    register(reg, &mut comps)?;
    comps.register_params(reg)?;
    Ok(())
}

fn register_selection(reg: &Registry) -> std::result::Result<Param<SelectionList>, McaError> {
    reg.register_selection(
        "osc",
        "One-sided components to use (`sm,pt2pt` or `^sm`); among the allowed ones that \
         accept a window, the highest priority serves it",
    )
}

/// The components the `osc` selection list allows, each with its priority
/// (`osc_<name>_priority`), highest first.
pub fn components() -> Result<Vec<(i64, Box<dyn Component>)>> {
    let mca = |e: &dyn std::fmt::Display| OscError::Arg(format!("osc component selection: {e}"));
    let reg = tmpi_base::mca::registry();
    let sel = register_selection(reg).map_err(|e| mca(&e))?.value();
    let mut comps = ComponentRegistry::new();
    for d in descriptors() {
        comps.add(d).map_err(|e| mca(&e))?;
    }
    comps.register_params(reg).map_err(|e| mca(&e))?;
    let mut out: Vec<(i64, Box<dyn Component>)> = Vec::new();
    for c in comps.candidates("osc", &sel).map_err(|e| mca(&e))? {
        let d = c.component;
        let prio = reg
            .register_priority("osc", d.name, i64::from(d.priority))
            .map_err(|e| mca(&e))?
            .value();
        let comp: Box<dyn Component> = match d.name {
            "pt2pt" => Box::new(pt2pt::Pt2ptComponent),
            "sm" => Box::new(sm::SmComponent),
            "rdma" => Box::new(rdma::RdmaComponent),
            other => return Err(OscError::Arg(format!("unknown osc component {other}"))),
        };
        out.push((prio, comp));
    }
    out.sort_by_key(|c| std::cmp::Reverse(c.0));
    Ok(out)
}

/// The component of highest priority that accepts a window over `comm`
/// (in one shared segment: `shared_segment`).
fn choose(comps: &[(i64, Box<dyn Component>)], comm: &Comm, shared_segment: bool) -> Option<usize> {
    comps
        .iter()
        .position(|(_, c)| c.accepts(comm, shared_segment))
}

/// A window's local memory: base address and size in bytes, with its
/// displacement unit; for a dynamic window (base 0, size 0, unit 1) the
/// regions attached to it, which requests address by absolute address.
#[derive(Debug, Clone)]
pub struct Memory {
    pub base: usize,
    pub size: usize,
    pub disp_unit: usize,
    /// The info hints this rank gave at creation.
    pub hints: Hints,
    pub(crate) attached: Option<Arc<mem::Attached>>,
    /// The shared segment holding every rank's memory, when there is one.
    pub(crate) segment: Option<Arc<shm::WindowSegment>>,
}

impl Memory {
    /// Whether this is a dynamic window's memory.
    pub fn is_dynamic(&self) -> bool {
        self.attached.is_some()
    }

    /// Whether every rank's memory lies in one shared segment (mapped by
    /// every rank).
    pub fn is_shared_segment(&self) -> bool {
        self.segment.is_some()
    }
}

/// What `MPI_Win_shared_query` answers for one rank of a shared window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SharedPart {
    pub base: usize,
    pub size: usize,
    pub disp_unit: usize,
}

/// One window: its module, memory, flavor and the group it spans.
pub struct Window {
    module: Box<dyn Module>,
    mem: Memory,
    flavor: Flavor,
    group: tmpi_comm::Group,
    rank: u32,
    name: Mutex<String>,
    /// The memory of an `MPI_Win_allocate` window (8-byte words, freed
    /// with the window).
    _owned: Option<Vec<u64>>,
    /// A shared window's segment (unmapped with the window and its
    /// module, whichever goes last), for `MPI_Win_shared_query`.
    shared: Option<Arc<shm::WindowSegment>>,
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
        Self::create_with_hints(pml, comm, base, size, disp_unit, Hints::default())
    }

    /// [`Window::create`] with the info hints this rank gave (a component
    /// uses a hint only when every rank gave it).
    pub fn create_with_hints(
        pml: &Arc<Pml>,
        comm: &Comm,
        base: Option<usize>,
        size: usize,
        disp_unit: usize,
        hints: Hints,
    ) -> Result<Window> {
        if disp_unit == 0 {
            return Err(OscError::Arg("disp_unit must be positive".into()));
        }
        let (owned, base, flavor) = match base {
            Some(b) => (None, b, Flavor::Create),
            None => {
                if let Some(w) = Self::allocate_in_segment(pml, comm, size, disp_unit)? {
                    return Ok(w);
                }
                let mut v = vec![0u64; size.div_ceil(8).max(1)];
                let b = v.as_mut_ptr() as usize;
                (Some(v), b, Flavor::Allocate)
            }
        };
        let mem = Memory {
            base,
            size,
            disp_unit,
            hints,
            attached: None,
            segment: None,
        };
        let mut w = Self::with_module(pml, comm, mem, flavor)?;
        w._owned = owned;
        Ok(w)
    }

    /// `MPI_Win_create_dynamic`: a window without memory; each process
    /// attaches and detaches its own regions ([`Window::attach`]), and
    /// operations address them by absolute address (displacement unit 1).
    /// Collective over `comm`.
    pub fn create_dynamic(pml: &Arc<Pml>, comm: &Comm) -> Result<Window> {
        let mem = Memory {
            base: 0,
            size: 0,
            disp_unit: 1,
            hints: Hints::default(),
            attached: Some(Arc::new(mem::Attached::default())),
            segment: None,
        };
        Self::with_module(pml, comm, mem, Flavor::Dynamic)
    }

    /// `MPI_Win_allocate_shared`: `size` bytes of this rank in one shared
    /// segment of all ranks of `comm`, which must share memory (one node:
    /// else [`OscError::Shared`] on every rank, decided without
    /// communicating). The parts lie rank after rank, each aligned to 64
    /// bytes. Collective over `comm`.
    pub fn allocate_shared(
        pml: &Arc<Pml>,
        comm: &Comm,
        size: usize,
        disp_unit: usize,
    ) -> Result<Window> {
        if disp_unit == 0 {
            return Err(OscError::Arg("disp_unit must be positive".into()));
        }
        let worlds = comm.group().world_ranks().clone();
        let nodes: Vec<u32> = worlds.iter().map(|&w| pml.node_of(w)).collect();
        one_node(&nodes)?;
        Self::segment_window(pml, comm, size, disp_unit, Flavor::Shared)
    }

    /// `MPI_Win_allocate`'s memory in a shared segment, when every rank of
    /// `comm` runs on this node and the component that would serve such a
    /// window is sm (the window is then served without the target's
    /// progress); `None` otherwise, and when the segment cannot be made
    /// (the memory then comes from the heap). Every rank decides alike.
    fn allocate_in_segment(
        pml: &Arc<Pml>,
        comm: &Comm,
        size: usize,
        disp_unit: usize,
    ) -> Result<Option<Window>> {
        let worlds = comm.group().world_ranks().clone();
        let nodes: Vec<u32> = worlds.iter().map(|&w| pml.node_of(w)).collect();
        if one_node(&nodes).is_err() {
            return Ok(None);
        }
        let comps = components()?;
        match choose(&comps, comm, true) {
            Some(i) if comps[i].1.name() == "sm" => {}
            _ => return Ok(None),
        }
        match Self::segment_window(pml, comm, size, disp_unit, Flavor::Allocate) {
            Ok(w) => Ok(Some(w)),
            Err(OscError::Shared(why)) => {
                tracing::info!(target: "osc", "MPI_Win_allocate: no shared segment ({why}); the window's memory comes from the heap");
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    /// A window whose ranks' parts of `size` bytes lie in one shared
    /// segment, rank after rank, each aligned to 64 bytes (after the
    /// segment's header). Collective over `comm`, whose ranks share a node.
    fn segment_window(
        pml: &Arc<Pml>,
        comm: &Comm,
        size: usize,
        disp_unit: usize,
        flavor: Flavor,
    ) -> Result<Window> {
        // Every rank's size and unit.
        let mine: Vec<u8> = [size as u64, disp_unit as u64]
            .iter()
            .flat_map(|x| x.to_ne_bytes())
            .collect();
        let mut all = vec![0u8; 16 * comm.size() as usize];
        comm.allgather(tmpi_coll::Input::Buf(&mine), &mut all)?;
        let word = |c: &[u8], i: usize| {
            u64::from_ne_bytes(c[i * 8..i * 8 + 8].try_into().unwrap_or_default()) as usize
        };
        let pairs: Vec<(usize, usize)> = all.chunks(16).map(|c| (word(c, 0), word(c, 1))).collect();
        let sizes: Vec<usize> = pairs.iter().map(|p| p.0).collect();
        let (offs, len) = shm::layout(&sizes).ok_or_else(|| {
            OscError::Shared("the window's parts overflow the address space".into())
        })?;
        let seg = attach_segment(comm, len)?;
        let parts: Vec<SharedPart> = pairs
            .iter()
            .zip(&offs)
            .map(|(&(size, disp_unit), &o)| SharedPart {
                base: seg.base() + o,
                size,
                disp_unit,
            })
            .collect();
        let me = parts[comm.rank() as usize];
        let segment = Arc::new(shm::WindowSegment { seg, parts });
        let mem = Memory {
            base: me.base,
            size: me.size,
            disp_unit: me.disp_unit,
            hints: Hints::default(),
            attached: None,
            segment: Some(Arc::clone(&segment)),
        };
        let mut w = Self::with_module(pml, comm, mem, flavor)?;
        if flavor == Flavor::Shared {
            w.shared = Some(segment);
        }
        Ok(w)
    }

    /// The window over `mem`, served by the component of highest priority.
    fn with_module(pml: &Arc<Pml>, comm: &Comm, mem: Memory, flavor: Flavor) -> Result<Window> {
        let size = mem.size;
        let comps = components()?;
        let chosen = choose(&comps, comm, mem.is_shared_segment())
            .map(|i| &comps[i].1)
            .ok_or_else(|| {
                OscError::Comm(
                    "no osc component can serve this window (the osc selection list allows none that accepts it)"
                        .into(),
                )
            })?;
        let module = chosen.create(pml, comm, &mem)?;
        // The module's component: a component may hand the window to
        // another (rdma to pt2pt when a peer is not reached over RDMA).
        tracing::debug!(target: "osc", "window of {size} bytes served by component {}", module.component());
        Ok(Window {
            module,
            mem,
            flavor,
            group: comm.group(),
            rank: comm.rank(),
            name: Mutex::new(String::new()),
            _owned: None,
            shared: None,
        })
    }

    /// `MPI_Win_shared_query`: rank `rank`'s part of a shared window; for
    /// `None` (`MPI_PROC_NULL`) the part of the first rank with a size
    /// above 0 (rank 0's empty part when every part is empty). An empty
    /// part's base is 0 (`NULL`), as MPICH answers and its test suite
    /// checks: no pointer that looks usable for memory that is not there.
    pub fn shared_query(&self, rank: Option<i32>) -> Result<SharedPart> {
        self.shared_part(rank).map(|p| SharedPart {
            base: if p.size == 0 { 0 } else { p.base },
            ..p
        })
    }

    fn shared_part(&self, rank: Option<i32>) -> Result<SharedPart> {
        let Some(parts) = self.shared.as_ref().map(|s| &s.parts) else {
            return Err(OscError::Flavor(
                "MPI_Win_shared_query needs a window made by MPI_Win_allocate_shared".into(),
            ));
        };
        match rank {
            Some(r) => usize::try_from(r)
                .ok()
                .and_then(|r| parts.get(r))
                .copied()
                .ok_or_else(|| {
                    OscError::Rank(format!(
                        "rank {r} is not in the window's group of {}",
                        parts.len()
                    ))
                }),
            None => Ok(parts
                .iter()
                .find(|p| p.size > 0)
                .or(parts.first())
                .copied()
                .unwrap_or(SharedPart {
                    base: 0,
                    size: 0,
                    disp_unit: 1,
                })),
        }
    }

    /// `MPI_Win_attach`: `len` bytes at `addr` become accessible through
    /// this dynamic window. The caller vouches that they stay valid until
    /// detached (or the window is freed).
    pub fn attach(&self, addr: usize, len: usize) -> Result<()> {
        match &self.mem.attached {
            Some(a) => a.attach(addr, len),
            None => Err(OscError::Flavor(
                "MPI_Win_attach needs a window made by MPI_Win_create_dynamic".into(),
            )),
        }
    }

    /// `MPI_Win_detach` of the region attached at `addr`
    /// ([`OscError::Range`] when none is).
    pub fn detach(&self, addr: usize) -> Result<()> {
        match &self.mem.attached {
            Some(a) => a.detach(addr),
            None => Err(OscError::Flavor(
                "MPI_Win_detach needs a window made by MPI_Win_create_dynamic".into(),
            )),
        }
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
    pub fn group(&self) -> tmpi_comm::Group {
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

/// `Ok` when every rank of a window runs on one node (`nodes`: each
/// rank's node label), as shared windows need.
fn one_node(nodes: &[u32]) -> Result<()> {
    match nodes.iter().position(|&n| n != nodes[0]) {
        None => Ok(()),
        Some(r) => Err(OscError::Shared(format!(
            "MPI_Win_allocate_shared: ranks 0 and {r} of the communicator run on different nodes ({} and {}); \
             a shared window needs every rank on one node (split the communicator with \
             MPI_Comm_split_type(MPI_COMM_TYPE_SHARED) first)",
            nodes[0], nodes[r]
        ))),
    }
}

/// Maps a fresh shared segment of `len` bytes on every rank of `comm`:
/// rank 0 creates it and broadcasts its path, every rank maps it, all
/// agree that everyone did, and rank 0 unlinks the file (whatever the
/// outcome) before anyone uses the memory, so it cannot outlive the job.
fn attach_segment(comm: &Comm, len: usize) -> Result<shm::Segment> {
    let mut msg = [0u8; 256];
    let mut seg = None;
    let mut path = None;
    let mut why = String::new();
    if comm.rank() == 0 {
        let p = shm::new_path();
        match shm::Segment::create(std::path::Path::new(&p), len) {
            Ok(s) if p.len() + 2 <= msg.len() => {
                msg[0] = 1;
                msg[1] = p.len() as u8;
                msg[2..2 + p.len()].copy_from_slice(p.as_bytes());
                seg = Some(s);
                path = Some(p);
            }
            Ok(_) => {
                let _ = std::fs::remove_file(&p);
                why = format!("segment path {p} too long");
            }
            Err(e) => why = format!("cannot create {p} ({len} bytes): {e}"),
        }
    }
    let unlink = |p: &Option<String>| {
        if let Some(p) = p {
            let _ = std::fs::remove_file(p);
        }
    };
    if let Err(e) = comm.bcast(&mut msg, 0) {
        unlink(&path);
        return Err(e.into());
    }
    if comm.rank() != 0 && msg[0] == 1 {
        let n = usize::from(msg[1]).min(msg.len() - 2);
        match std::str::from_utf8(&msg[2..2 + n]) {
            Ok(p) => match shm::Segment::open(p, len) {
                Ok(s) => seg = Some(s),
                Err(e) => why = format!("cannot map {p}: {e}"),
            },
            Err(e) => why = format!("bad segment path: {e}"),
        }
    }
    let mine = [u8::from(seg.is_some())];
    let mut all = [0u8];
    let agreed = comm.allreduce(
        tmpi_coll::Input::Buf(&mine),
        &mut all,
        tmpi_coll::Datatype::U8,
        &tmpi_coll::Op::Min,
    );
    unlink(&path);
    agreed?;
    match seg {
        Some(s) if all[0] == 1 => Ok(s),
        _ => Err(OscError::Shared(if why.is_empty() {
            "MPI_Win_allocate_shared: another rank could not map the window's shared segment".into()
        } else {
            format!("MPI_Win_allocate_shared: {why}")
        })),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shared_windows_need_one_node() {
        assert!(one_node(&[0, 0, 0]).is_ok());
        assert!(one_node(&[3]).is_ok());
        let e = one_node(&[0, 0, 1]).unwrap_err();
        assert_eq!(e.class(), MpiErrorClass::RmaShared);
        assert!(e.to_string().contains("ranks 0 and 2"), "{e}");
    }

    #[test]
    fn span_of_contiguous_items_is_one_run_from_zero() {
        let l = Layout::bytes(8);
        assert_eq!(l.span(0), None);
        assert_eq!(l.span(1), Some((0, 8)));
        assert_eq!(l.span(5), Some((0, 40)));
        assert_eq!(Layout::bytes(0).span(3), None);
        // One block from 0 with a larger extent: a gap between items.
        let gappy = Layout {
            extent: 12,
            ..Layout::bytes(8)
        };
        assert_eq!(gappy.span(1), Some((0, 8)));
        assert_eq!(gappy.span(3), Some((0, 32)));
        // A negative extent reaches below 0.
        let back = Layout {
            extent: -8,
            ..Layout::bytes(8)
        };
        assert_eq!(back.span(3), Some((-16, 8)));
    }

    #[test]
    fn errors_travel_back_with_their_class() {
        let e = OscError::Range("bytes 0x10..0x18 are not attached é".into());
        let m = e.encode(20);
        assert!(m.len() <= 20);
        let d = OscError::decode(&m, 3);
        assert_eq!(d.class(), MpiErrorClass::RmaRange);
        assert!(d.to_string().starts_with("at target rank 3: bytes"), "{d}");
        assert_eq!(OscError::decode(&[], 1).class(), MpiErrorClass::Other);
    }
}
