//! One-sided communication (MPI-3.1 chapter 11) over the `tmpi-osc`
//! framework: windows, RMA operations, synchronisation, window attributes,
//! names and error handlers; shared windows (`MPI_Win_allocate_shared`,
//! `MPI_Win_shared_query`) and dynamic ones (`MPI_Win_create_dynamic`,
//! `MPI_Win_attach`, `MPI_Win_detach`). See `docs/osc.md`.
//!
//! Windows have their own handle table here (`MPI_Win` handles from 1;
//! `MPI_WIN_NULL` is 0). Errors of a window call go to the window's error
//! handler (`MPI_ERRORS_ARE_FATAL` unless set), as MPI requires.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::ffi::{c_char, c_int, c_void};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use tmpi_coll::TypeClass;
use tmpi_osc::{AccOp, Buf, BufMut, Layout, LockType, OscError, Target, Window};

use crate::error::{catching, Error, Handler, MpiErrorClass as C, Res};
use crate::ffi::{cstr, get, put, put_cstr, put_ptr};
use crate::state::{rt, tables, type_ref, TypeRef, COMM_WORLD};

const WIN_NULL: c_int = 0;
const PROC_NULL: c_int = -2;

impl From<OscError> for Error {
    fn from(e: OscError) -> Self {
        Error::new(e.class(), e.to_string())
    }
}

/// One window and what the C interface keeps beside it: the values the
/// predefined attributes point to (stable addresses: the entry is boxed
/// in an `Arc`), the error handler and the user attributes.
struct WinEnt {
    win: Window,
    size_val: isize,
    disp_val: c_int,
    flavor_val: c_int,
    model_val: c_int,
    /// The handler's handle and, for a user handler, its function (kept:
    /// MPI lets the handle be freed while the window uses it).
    errhandler: Mutex<(c_int, Option<crate::ErrFn>)>,
    attrs: Mutex<BTreeMap<c_int, usize>>,
    /// The window info hints the program gave (at creation or by
    /// `MPI_Win_set_info`), of the keys MPI defines for windows.
    hints: Mutex<Vec<(String, String)>>,
}

/// The info keys MPI defines for windows, and Open MPI's
/// `acc_single_intrinsic` (osc rdma uses it), with the value each has when
/// the program gave none (`None`: reported only once given).
const WINDOW_HINTS: [(&str, Option<&str>); 7] = [
    ("no_locks", Some("false")),
    ("accumulate_ordering", Some("rar,raw,war,waw")),
    ("accumulate_ops", Some("same_op_no_op")),
    ("same_size", Some("false")),
    ("same_disp_unit", Some("false")),
    ("alloc_shared_noncontig", None),
    ("acc_single_intrinsic", Some("false")),
];

/// What osc's components use of a window's hints.
fn osc_hints(hints: &[(String, String)]) -> tmpi_osc::Hints {
    let on = |key: &str| {
        hints
            .iter()
            .any(|(k, v)| k == key && v.trim().eq_ignore_ascii_case("true"))
    };
    tmpi_osc::Hints {
        acc_single_intrinsic: on("acc_single_intrinsic"),
    }
}

/// The window hints of info `h` (`MPI_INFO_NULL`: none); other keys are
/// ignored, as MPI lets an implementation ignore hints it does not know.
fn window_hints(h: c_int) -> Res<Vec<(String, String)>> {
    let mut out = Vec::new();
    for (k, _) in WINDOW_HINTS {
        if let Some(v) = crate::misc::info_value(h, k)? {
            out.push((k.to_string(), v));
        }
    }
    Ok(out)
}

#[derive(Default)]
struct WinTable {
    next: c_int,
    wins: BTreeMap<c_int, Arc<WinEnt>>,
}

fn wins() -> MutexGuard<'static, WinTable> {
    static T: OnceLock<Mutex<WinTable>> = OnceLock::new();
    T.get_or_init(|| Mutex::new(WinTable::default()))
        .lock()
        .unwrap_or_else(|e| e.into_inner())
}

fn win_of(h: c_int) -> Res<Arc<WinEnt>> {
    wins()
        .wins
        .get(&h)
        .cloned()
        .ok_or_else(|| Error::new(C::Win, format!("invalid window handle {h}")))
}

/// Counts the handles that left the table ([`unregister`]): a thread's
/// cached window ([`LAST_WIN`]) is used only while no handle left since
/// it was looked up, so a freed handle given to a new window never finds
/// the old one.
static UNREGISTERED: AtomicU64 = AtomicU64::new(0);

thread_local! {
    /// The window this thread looked up last: handle, [`UNREGISTERED`]
    /// when it was looked up, and the entry, held.
    static LAST_WIN: RefCell<Option<(c_int, u64, Arc<WinEnt>)>> = const { RefCell::new(None) };
}

/// Runs `f` on window `h`: the operations' and flushes' lookup. The
/// thread's cached entry when it is still current (no lock, no reference
/// count: an `MPI_Put` + `MPI_Win_flush` spent four atomic read-modify-
/// writes of the table's mutex and the entry's count per call on
/// [`win_of`]); else the table's, which then becomes the cached one.
///
/// Safe against `MPI_Win_free`: the cache holds its own reference, which
/// stays while `f` runs (the cache is borrowed meanwhile; a call nested in
/// `f`, as an error handler's, looks up through the table), so an entry a
/// racing free removes stays valid memory (its window refuses what a freed
/// window refuses) until this thread looks up another window. A window
/// freed by this thread leaves its cache at once ([`unregister`]); another
/// thread's cache keeps a freed window's memory until that thread's next
/// window call.
fn with_win<T>(h: c_int, f: impl FnOnce(&WinEnt) -> Res<T>) -> Res<T> {
    let now = UNREGISTERED.load(Ordering::Acquire);
    let mut f = Some(f);
    let cached = LAST_WIN.try_with(|c| {
        // Borrowed already: a call nested in another window call.
        let mut slot = c.try_borrow_mut().ok()?;
        if !matches!(&*slot, Some((ch, at, _)) if *ch == h && *at == now) {
            match win_of(h) {
                Ok(e) => *slot = Some((h, now, e)),
                Err(e) => return Some(Err(e)),
            }
        }
        let (_, _, e) = slot.as_ref()?;
        Some(f.take()?(e))
    });
    if let Ok(Some(r)) = cached {
        return r;
    }
    // No cache (a nested call, or the thread's storage is being torn down).
    let e = win_of(h)?;
    match f.take() {
        Some(f) => f(&e),
        None => Err(Error::new(C::Intern, "window call ran twice")),
    }
}

/// Removes handle `h` from the table (`MPI_Win_free`), and from this
/// thread's cache.
fn unregister(h: c_int) {
    {
        let mut t = wins();
        t.wins.remove(&h);
        UNREGISTERED.fetch_add(1, Ordering::AcqRel);
    }
    let _ = LAST_WIN.try_with(|c| {
        if let Ok(mut slot) = c.try_borrow_mut() {
            if matches!(&*slot, Some((ch, _, _)) if *ch == h) {
                *slot = None;
            }
        }
    });
}

/// Runs the body of window call `name`; errors go to `win`'s handler
/// (world's when `win` is not a window).
pub(crate) fn guard_win(name: &'static str, win: c_int, f: impl FnOnce() -> Res<()>) -> c_int {
    let r = crate::state::callable(name).and_then(|()| catching(f));
    match r {
        Ok(()) => 0,
        Err(e) => raise_win(name, win, e),
    }
}

fn raise_win(name: &str, win: c_int, e: Error) -> c_int {
    let Ok(w) = win_of(win) else {
        return crate::error::raise(name, COMM_WORLD, e);
    };
    let code = e.code.unwrap_or(e.class as c_int);
    tracing::debug!(target: "capi", "{name}: {} ({})", e.msg, e.class.name());
    let (h, f) = *w.errhandler.lock().unwrap_or_else(|p| p.into_inner());
    let handler = match (h, f) {
        (crate::error::ERRORS_RETURN, _) => Handler::Return,
        (_, Some(f)) => Handler::User(f),
        _ => Handler::Fatal,
    };
    match handler {
        Handler::Return => {}
        Handler::Fatal => crate::error::fatal(name, &e),
        Handler::User(f) => crate::ffi::call_errhandler(f, win, code),
    }
    code
}

/// Committed datatype `h`, whose [`Dtype::osc_layout`] an operation
/// borrows (a predefined one without the tables' lock).
fn dtype(h: c_int) -> Res<TypeRef> {
    type_ref(h)
}

/// Committed datatypes `a` and `b` (an operation's origin and target
/// types); `a`'s error first.
fn dtypes(a: c_int, b: c_int) -> Res<(TypeRef, TypeRef)> {
    Ok((type_ref(a)?, type_ref(b)?))
}

/// The layouts of `a` and `b` when both are predefined (the common case,
/// read without a lock, a reference count or an error path); `None`: the
/// caller resolves them with [`dtypes`], which reports any error.
#[inline]
fn fast_layouts(a: c_int, b: c_int) -> Option<(&'static Layout, &'static Layout)> {
    let fast = &rt().ok()?.fast;
    Some((fast.dtype(a)?.t.osc_layout(), fast.dtype(b)?.t.osc_layout()))
}

fn count(n: c_int, what: &str) -> Res<usize> {
    usize::try_from(n).map_err(|_| Error::new(C::Count, format!("{what} {n} is negative")))
}

fn acc_op(h: c_int) -> Res<AccOp> {
    match h {
        13 => Ok(AccOp::Replace),
        14 => Ok(AccOp::NoOp),
        _ => crate::state::predefined_op(h)
            .map(AccOp::Reduce)
            .ok_or_else(|| {
                Error::new(
                    C::Op,
                    format!("op {h} cannot accumulate: one-sided accumulates take predefined ops, MPI_REPLACE or MPI_NO_OP"),
                )
            }),
    }
}

fn register(win: Window, hints: Vec<(String, String)>) -> c_int {
    let flavor = match win.flavor() {
        tmpi_osc::Flavor::Create => 1,
        tmpi_osc::Flavor::Allocate => 2,
        tmpi_osc::Flavor::Dynamic => 3,
        tmpi_osc::Flavor::Shared => 4,
    };
    let e = Arc::new(WinEnt {
        size_val: win.size() as isize,
        disp_val: win.disp_unit() as c_int,
        flavor_val: flavor,
        model_val: 2, // MPI_WIN_UNIFIED: one copy of the memory
        errhandler: Mutex::new((crate::error::ERRORS_ARE_FATAL, None)),
        attrs: Mutex::new(BTreeMap::new()),
        hints: Mutex::new(hints),
        win,
    });
    let mut t = wins();
    t.next = t.next.max(1);
    while t.wins.contains_key(&t.next) {
        t.next = t.next.wrapping_add(1).max(1);
    }
    let h = t.next;
    t.next = t.next.wrapping_add(1).max(1);
    t.wins.insert(h, e);
    h
}

/// What window creation over `comm` needs: its communicator (an
/// intracommunicator) and the pml.
fn window_comm(comm: c_int) -> Res<(tmpi_comm::Comm, Arc<tmpi_pml::Pml>)> {
    if crate::intercomm::is_inter(comm) {
        return Err(Error::new(
            C::Comm,
            "windows over intercommunicators are not supported",
        ));
    }
    let c = tables().comm(comm)?.comm.clone();
    let pml = Arc::clone(&rt()?.pml);
    tmpi_osc::set_wide_kernel(crate::wide_ops::osc_kernel);
    Ok((c, pml))
}

/// A window's size and displacement unit, checked.
fn size_unit(size: isize, disp_unit: c_int) -> Res<(usize, usize)> {
    let size = usize::try_from(size)
        .map_err(|_| Error::new(C::Size, format!("window size {size} is negative")))?;
    let unit = usize::try_from(disp_unit)
        .ok()
        .filter(|&u| u > 0)
        .ok_or_else(|| Error::new(C::Disp, format!("disp_unit {disp_unit} is not positive")))?;
    Ok((size, unit))
}

fn create(
    comm: c_int,
    base: Option<usize>,
    size: isize,
    disp_unit: c_int,
    hints: &[(String, String)],
) -> Res<Window> {
    let (c, pml) = window_comm(comm)?;
    let (size, unit) = size_unit(size, disp_unit)?;
    Ok(Window::create_with_hints(
        &pml,
        &c,
        base,
        size,
        unit,
        osc_hints(hints),
    )?)
}

#[no_mangle]
pub extern "C" fn MPI_Win_create(
    base: *mut c_void,
    size: isize,
    disp_unit: c_int,
    info: c_int,
    comm: c_int,
    win: *mut c_int,
) -> c_int {
    crate::error::guard("MPI_Win_create", comm, || {
        let hints = window_hints(info)?;
        if win.is_null() {
            return Err(Error::new(C::Arg, "win is NULL"));
        }
        if base.is_null() && size > 0 {
            return Err(Error::new(
                C::Arg,
                "base is NULL for a window of positive size",
            ));
        }
        let w = create(comm, Some(base as usize), size, disp_unit, &hints)?;
        put(win, register(w, hints), "win")
    })
}

#[no_mangle]
pub extern "C" fn MPI_Win_allocate(
    size: isize,
    disp_unit: c_int,
    info: c_int,
    comm: c_int,
    baseptr: *mut c_void,
    win: *mut c_int,
) -> c_int {
    crate::error::guard("MPI_Win_allocate", comm, || {
        let hints = window_hints(info)?;
        if win.is_null() || baseptr.is_null() {
            return Err(Error::new(C::Arg, "win or baseptr is NULL"));
        }
        let w = create(comm, None, size, disp_unit, &hints)?;
        let base = w.base();
        put_ptr(baseptr, base)?;
        put(win, register(w, hints), "win")
    })
}

/// `MPI_Win_allocate_shared`: the info key `alloc_shared_noncontig` is
/// accepted and ignored (the parts are contiguous, each 64-byte aligned).
#[no_mangle]
pub extern "C" fn MPI_Win_allocate_shared(
    size: isize,
    disp_unit: c_int,
    info: c_int,
    comm: c_int,
    baseptr: *mut c_void,
    win: *mut c_int,
) -> c_int {
    crate::error::guard("MPI_Win_allocate_shared", comm, || {
        let hints = window_hints(info)?;
        if win.is_null() || baseptr.is_null() {
            return Err(Error::new(C::Arg, "win or baseptr is NULL"));
        }
        let (c, pml) = window_comm(comm)?;
        let (size, unit) = size_unit(size, disp_unit)?;
        let w = Window::allocate_shared(&pml, &c, size, unit)?;
        put_ptr(baseptr, w.base())?;
        put(win, register(w, hints), "win")
    })
}

#[no_mangle]
pub extern "C" fn MPI_Win_shared_query(
    win: c_int,
    rank: c_int,
    size: *mut isize,
    disp_unit: *mut c_int,
    baseptr: *mut c_void,
) -> c_int {
    guard_win("MPI_Win_shared_query", win, || {
        let w = win_of(win)?;
        let part = w.win.shared_query((rank != PROC_NULL).then_some(rank))?;
        if size.is_null() || disp_unit.is_null() || baseptr.is_null() {
            return Err(Error::new(C::Arg, "size, disp_unit or baseptr is NULL"));
        }
        put(size, part.size as isize, "size")?;
        put(disp_unit, part.disp_unit as c_int, "disp_unit")?;
        put_ptr(baseptr, part.base)
    })
}

#[no_mangle]
pub extern "C" fn MPI_Win_create_dynamic(info: c_int, comm: c_int, win: *mut c_int) -> c_int {
    crate::error::guard("MPI_Win_create_dynamic", comm, || {
        let hints = window_hints(info)?;
        if win.is_null() {
            return Err(Error::new(C::Arg, "win is NULL"));
        }
        let (c, pml) = window_comm(comm)?;
        let w = Window::create_dynamic(&pml, &c)?;
        put(win, register(w, hints), "win")
    })
}

#[no_mangle]
pub extern "C" fn MPI_Win_attach(win: c_int, base: *mut c_void, size: isize) -> c_int {
    guard_win("MPI_Win_attach", win, || {
        let w = win_of(win)?;
        let size = usize::try_from(size)
            .map_err(|_| Error::new(C::Size, format!("size {size} is negative")))?;
        if base.is_null() && size > 0 {
            return Err(Error::new(
                C::Arg,
                "base is NULL for a region of positive size",
            ));
        }
        // The user keeps the region valid until MPI_Win_detach or
        // MPI_Win_free (MPI's contract); tmpi-osc checks every access
        // against the attached regions.
        Ok(w.win.attach(base as usize, size)?)
    })
}

#[no_mangle]
pub extern "C" fn MPI_Win_detach(win: c_int, base: *const c_void) -> c_int {
    guard_win("MPI_Win_detach", win, || {
        Ok(win_of(win)?.win.detach(base as usize)?)
    })
}

#[no_mangle]
pub extern "C" fn MPI_Win_free(win: *mut c_int) -> c_int {
    let h = if win.is_null() {
        WIN_NULL
    } else {
        handle_at(win)
    };
    guard_win("MPI_Win_free", h, || {
        let e = win_of(get(win, "win")?)?;
        e.win.free()?;
        // User attributes: delete callbacks, as for communicators.
        let attrs = std::mem::take(&mut *e.attrs.lock().unwrap_or_else(|p| p.into_inner()));
        unregister(h);
        for (k, v) in attrs {
            let kv = tables().keyvals.get(&k).copied();
            if let Some(kv) = kv {
                crate::comm::delete_callback(&kv, h, k, v)?;
            }
        }
        put(win, WIN_NULL, "win")
    })
}

/// The handle `p` points to (validated read; `WIN_NULL` when unreadable).
fn handle_at(p: *const c_int) -> c_int {
    get(p, "win").unwrap_or(WIN_NULL)
}

// ---------------------------------------------------------------- operations

/// The target of an operation on `w`; `None` for `MPI_PROC_NULL`.
fn target<'a>(rank: c_int, disp: isize, count: usize, layout: &'a Layout) -> Option<Target<'a>> {
    (rank != PROC_NULL).then_some(Target {
        rank,
        disp,
        count,
        layout,
    })
}

#[allow(clippy::too_many_arguments)]
fn put_op(
    origin_addr: *const c_void,
    origin_count: c_int,
    origin_datatype: c_int,
    target_rank: c_int,
    target_disp: isize,
    target_count: c_int,
    target_datatype: c_int,
    w: &WinEnt,
) -> Res<()> {
    let held;
    let (ol, tl) = match fast_layouts(origin_datatype, target_datatype) {
        Some(l) => l,
        None => {
            held = dtypes(origin_datatype, target_datatype)?;
            (held.0.osc_layout(), held.1.osc_layout())
        }
    };
    let (oc, tc) = (
        count(origin_count, "origin_count")?,
        count(target_count, "target_count")?,
    );
    let Some(t) = target(target_rank, target_disp, tc, tl) else {
        return Ok(());
    };
    let o = Buf {
        ptr: origin_addr.cast(),
        count: oc,
        layout: ol,
    };
    // SAFETY: MPI's contract: the origin buffer holds `origin_count`
    // items of its datatype (read during the call: the data is copied).
    Ok(unsafe { w.win.module().put(o, t) }?)
}

#[no_mangle]
pub extern "C" fn MPI_Put(
    origin_addr: *const c_void,
    origin_count: c_int,
    origin_datatype: c_int,
    target_rank: c_int,
    target_disp: isize,
    target_count: c_int,
    target_datatype: c_int,
    win: c_int,
) -> c_int {
    guard_win("MPI_Put", win, || {
        with_win(win, |w| {
            put_op(
                origin_addr,
                origin_count,
                origin_datatype,
                target_rank,
                target_disp,
                target_count,
                target_datatype,
                w,
            )
        })
    })
}

#[allow(clippy::too_many_arguments)]
fn get_op(
    origin_addr: *mut c_void,
    origin_count: c_int,
    origin_datatype: c_int,
    target_rank: c_int,
    target_disp: isize,
    target_count: c_int,
    target_datatype: c_int,
    w: &WinEnt,
) -> Res<()> {
    let held;
    let (ol, tl) = match fast_layouts(origin_datatype, target_datatype) {
        Some(l) => l,
        None => {
            held = dtypes(origin_datatype, target_datatype)?;
            (held.0.osc_layout(), held.1.osc_layout())
        }
    };
    let (oc, tc) = (
        count(origin_count, "origin_count")?,
        count(target_count, "target_count")?,
    );
    let Some(t) = target(target_rank, target_disp, tc, tl) else {
        return Ok(());
    };
    let r = BufMut {
        ptr: origin_addr.cast(),
        count: oc,
        layout: ol,
    };
    // SAFETY: MPI's contract: the origin buffer stays valid and
    // untouched until the epoch or flush that completes the get.
    Ok(unsafe { w.win.module().get(r, t) }?)
}

#[no_mangle]
pub extern "C" fn MPI_Get(
    origin_addr: *mut c_void,
    origin_count: c_int,
    origin_datatype: c_int,
    target_rank: c_int,
    target_disp: isize,
    target_count: c_int,
    target_datatype: c_int,
    win: c_int,
) -> c_int {
    guard_win("MPI_Get", win, || {
        with_win(win, |w| {
            get_op(
                origin_addr,
                origin_count,
                origin_datatype,
                target_rank,
                target_disp,
                target_count,
                target_datatype,
                w,
            )
        })
    })
}

#[allow(clippy::too_many_arguments)]
fn accumulate_op(
    origin_addr: *const c_void,
    origin_count: c_int,
    origin_datatype: c_int,
    target_rank: c_int,
    target_disp: isize,
    target_count: c_int,
    target_datatype: c_int,
    op: c_int,
    w: &WinEnt,
) -> Res<()> {
    let held;
    let (ol, tl) = match fast_layouts(origin_datatype, target_datatype) {
        Some(l) => l,
        None => {
            held = dtypes(origin_datatype, target_datatype)?;
            (held.0.osc_layout(), held.1.osc_layout())
        }
    };
    let (oc, tc) = (
        count(origin_count, "origin_count")?,
        count(target_count, "target_count")?,
    );
    let op = acc_op(op)?;
    let Some(t) = target(target_rank, target_disp, tc, tl) else {
        return Ok(());
    };
    let o = Buf {
        ptr: origin_addr.cast(),
        count: oc,
        layout: ol,
    };
    // SAFETY: as in MPI_Put.
    Ok(unsafe { w.win.module().accumulate(o, t, &op) }?)
}

#[no_mangle]
pub extern "C" fn MPI_Accumulate(
    origin_addr: *const c_void,
    origin_count: c_int,
    origin_datatype: c_int,
    target_rank: c_int,
    target_disp: isize,
    target_count: c_int,
    target_datatype: c_int,
    op: c_int,
    win: c_int,
) -> c_int {
    guard_win("MPI_Accumulate", win, || {
        with_win(win, |w| {
            accumulate_op(
                origin_addr,
                origin_count,
                origin_datatype,
                target_rank,
                target_disp,
                target_count,
                target_datatype,
                op,
                w,
            )
        })
    })
}

#[allow(clippy::too_many_arguments)]
fn get_accumulate_op(
    origin_addr: *const c_void,
    origin_count: c_int,
    origin_datatype: c_int,
    result_addr: *mut c_void,
    result_count: c_int,
    result_datatype: c_int,
    target_rank: c_int,
    target_disp: isize,
    target_count: c_int,
    target_datatype: c_int,
    op: c_int,
    w: &WinEnt,
) -> Res<()> {
    let op = acc_op(op)?;
    let noop = matches!(op, AccOp::NoOp);
    // With MPI_NO_OP the origin arguments are ignored (may be NULL/0).
    let ot = if noop {
        None
    } else {
        Some(dtype(origin_datatype)?)
    };
    let (rest, tt) = dtypes(result_datatype, target_datatype)?;
    let (ol, rl, tl) = (
        ot.as_ref().map(|t| t.osc_layout()),
        rest.osc_layout(),
        tt.osc_layout(),
    );
    let oc = if noop {
        0
    } else {
        count(origin_count, "origin_count")?
    };
    let (rc, tc) = (
        count(result_count, "result_count")?,
        count(target_count, "target_count")?,
    );
    let Some(t) = target(target_rank, target_disp, tc, tl) else {
        return Ok(());
    };
    let o = ol.map(|l| Buf {
        ptr: origin_addr.cast(),
        count: oc,
        layout: l,
    });
    let r = BufMut {
        ptr: result_addr.cast(),
        count: rc,
        layout: rl,
    };
    // SAFETY: as in MPI_Put (origin) and MPI_Get (result).
    Ok(unsafe { w.win.module().get_accumulate(o, r, t, &op) }?)
}

#[no_mangle]
pub extern "C" fn MPI_Get_accumulate(
    origin_addr: *const c_void,
    origin_count: c_int,
    origin_datatype: c_int,
    result_addr: *mut c_void,
    result_count: c_int,
    result_datatype: c_int,
    target_rank: c_int,
    target_disp: isize,
    target_count: c_int,
    target_datatype: c_int,
    op: c_int,
    win: c_int,
) -> c_int {
    guard_win("MPI_Get_accumulate", win, || {
        with_win(win, |w| {
            get_accumulate_op(
                origin_addr,
                origin_count,
                origin_datatype,
                result_addr,
                result_count,
                result_datatype,
                target_rank,
                target_disp,
                target_count,
                target_datatype,
                op,
                w,
            )
        })
    })
}

#[no_mangle]
pub extern "C" fn MPI_Fetch_and_op(
    origin_addr: *const c_void,
    result_addr: *mut c_void,
    datatype: c_int,
    target_rank: c_int,
    target_disp: isize,
    op: c_int,
    win: c_int,
) -> c_int {
    guard_win("MPI_Fetch_and_op", win, || {
        with_win(win, |w| {
            // A predefined type (the usual case) without a reference.
            let t = dtype(datatype)?;
            if !t.predefined {
                return Err(Error::new(
                    C::Type,
                    format!(
                        "MPI_Fetch_and_op on {}: it takes a predefined datatype",
                        t.name
                    ),
                ));
            }
            let op = acc_op(op)?;
            if target_rank == PROC_NULL {
                return Ok(());
            }
            // SAFETY: as in MPI_Get_accumulate, one element each.
            Ok(unsafe {
                w.win.module().fetch_and_op(
                    origin_addr.cast(),
                    result_addr.cast(),
                    t.osc_layout(),
                    (target_rank, target_disp),
                    &op,
                )
            }?)
        })
    })
}

#[no_mangle]
pub extern "C" fn MPI_Compare_and_swap(
    origin_addr: *const c_void,
    compare_addr: *const c_void,
    result_addr: *mut c_void,
    datatype: c_int,
    target_rank: c_int,
    target_disp: isize,
    win: c_int,
) -> c_int {
    guard_win("MPI_Compare_and_swap", win, || {
        with_win(win, |w| {
            // MPI: a predefined C integer, logical, byte (or multi-language
            // integer) type.
            let t = dtype(datatype)?;
            let class = t.reduce_elem().map(|e| e.class());
            if !t.predefined
                || !matches!(
                    class,
                    Some(TypeClass::Integer | TypeClass::Logical | TypeClass::Byte)
                )
            {
                return Err(Error::new(
                C::Type,
                format!("MPI_Compare_and_swap on {}: it takes a predefined integer, logical or byte type", t.name),
            ));
            }
            if target_rank == PROC_NULL {
                return Ok(());
            }
            if origin_addr.is_null() || compare_addr.is_null() || result_addr.is_null() {
                return Err(Error::new(
                    C::Buffer,
                    "origin, compare or result buffer is NULL",
                ));
            }
            // SAFETY: MPI's contract: one element of `datatype` at each
            // buffer; the result stays valid until the operation completes.
            Ok(unsafe {
                w.win.module().compare_and_swap(
                    origin_addr.cast(),
                    compare_addr.cast(),
                    result_addr.cast(),
                    t.osc_layout(),
                    target_rank,
                    target_disp,
                )
            }?)
        })
    })
}

// ---------------------------------------------------------------- request-based operations

/// The request of an `MPI_R*` operation on `win` to `rank`: the operation
/// `op` is started inside a passive-target epoch (MPI allows these calls
/// nowhere else), then completed locally (a get's result has arrived), so
/// the request handed out is already complete. Completing before return is
/// what a nonblocking call may always do; it costs the overlap of one
/// round trip for gets.
fn request_op(
    win: c_int,
    rank: c_int,
    request: *mut c_int,
    local: bool,
    op: impl FnOnce(&WinEnt) -> Res<()>,
) -> Res<()> {
    if request.is_null() {
        return Err(Error::new(C::Request, "request is NULL"));
    }
    let w = win_of(win)?;
    if rank != PROC_NULL {
        w.win.module().passive_epoch(rank)?;
        op(&w)?;
        if local {
            w.win.module().flush_local(Some(rank))?;
        }
    }
    let h = tables().add_req(crate::request::Req::Done {
        st: crate::request::St::empty(),
        persist: None,
    });
    put(request, h, "request")
}

#[no_mangle]
pub extern "C" fn MPI_Rput(
    origin_addr: *const c_void,
    origin_count: c_int,
    origin_datatype: c_int,
    target_rank: c_int,
    target_disp: isize,
    target_count: c_int,
    target_datatype: c_int,
    win: c_int,
    request: *mut c_int,
) -> c_int {
    guard_win("MPI_Rput", win, || {
        request_op(win, target_rank, request, false, |w| {
            put_op(
                origin_addr,
                origin_count,
                origin_datatype,
                target_rank,
                target_disp,
                target_count,
                target_datatype,
                w,
            )
        })
    })
}

#[no_mangle]
pub extern "C" fn MPI_Rget(
    origin_addr: *mut c_void,
    origin_count: c_int,
    origin_datatype: c_int,
    target_rank: c_int,
    target_disp: isize,
    target_count: c_int,
    target_datatype: c_int,
    win: c_int,
    request: *mut c_int,
) -> c_int {
    guard_win("MPI_Rget", win, || {
        request_op(win, target_rank, request, true, |w| {
            get_op(
                origin_addr,
                origin_count,
                origin_datatype,
                target_rank,
                target_disp,
                target_count,
                target_datatype,
                w,
            )
        })
    })
}

#[no_mangle]
pub extern "C" fn MPI_Raccumulate(
    origin_addr: *const c_void,
    origin_count: c_int,
    origin_datatype: c_int,
    target_rank: c_int,
    target_disp: isize,
    target_count: c_int,
    target_datatype: c_int,
    op: c_int,
    win: c_int,
    request: *mut c_int,
) -> c_int {
    guard_win("MPI_Raccumulate", win, || {
        request_op(win, target_rank, request, false, |w| {
            accumulate_op(
                origin_addr,
                origin_count,
                origin_datatype,
                target_rank,
                target_disp,
                target_count,
                target_datatype,
                op,
                w,
            )
        })
    })
}

#[no_mangle]
pub extern "C" fn MPI_Rget_accumulate(
    origin_addr: *const c_void,
    origin_count: c_int,
    origin_datatype: c_int,
    result_addr: *mut c_void,
    result_count: c_int,
    result_datatype: c_int,
    target_rank: c_int,
    target_disp: isize,
    target_count: c_int,
    target_datatype: c_int,
    op: c_int,
    win: c_int,
    request: *mut c_int,
) -> c_int {
    guard_win("MPI_Rget_accumulate", win, || {
        request_op(win, target_rank, request, true, |w| {
            get_accumulate_op(
                origin_addr,
                origin_count,
                origin_datatype,
                result_addr,
                result_count,
                result_datatype,
                target_rank,
                target_disp,
                target_count,
                target_datatype,
                op,
                w,
            )
        })
    })
}

// ---------------------------------------------------------------- synchronisation

fn lock_type(t: c_int) -> Res<LockType> {
    match t {
        234 => Ok(LockType::Exclusive),
        235 => Ok(LockType::Shared),
        _ => Err(Error::new(
            C::Arg,
            format!("lock type {t} is neither MPI_LOCK_EXCLUSIVE nor MPI_LOCK_SHARED"),
        )),
    }
}

/// Window ranks of the members of group `g`.
fn window_ranks(w: &WinEnt, g: c_int) -> Res<Vec<i32>> {
    let group = tables().group(g)?;
    let wg = w.win.group();
    group
        .world_ranks()
        .iter()
        .map(|&p| {
            wg.rank_of(p).map(|r| r as i32).ok_or_else(|| {
                Error::new(
                    C::Group,
                    format!("process {p} of the group is not in the window"),
                )
            })
        })
        .collect()
}

#[no_mangle]
pub extern "C" fn MPI_Win_fence(assert: c_int, win: c_int) -> c_int {
    guard_win("MPI_Win_fence", win, || {
        Ok(win_of(win)?.win.module().fence(assert as u32)?)
    })
}

#[no_mangle]
pub extern "C" fn MPI_Win_lock(lock: c_int, rank: c_int, assert: c_int, win: c_int) -> c_int {
    guard_win("MPI_Win_lock", win, || {
        let w = win_of(win)?;
        let k = lock_type(lock)?;
        if rank == PROC_NULL {
            return Ok(());
        }
        Ok(w.win.module().lock(k, rank, assert as u32)?)
    })
}

#[no_mangle]
pub extern "C" fn MPI_Win_unlock(rank: c_int, win: c_int) -> c_int {
    guard_win("MPI_Win_unlock", win, || {
        let w = win_of(win)?;
        if rank == PROC_NULL {
            return Ok(());
        }
        Ok(w.win.module().unlock(rank)?)
    })
}

#[no_mangle]
pub extern "C" fn MPI_Win_lock_all(assert: c_int, win: c_int) -> c_int {
    guard_win("MPI_Win_lock_all", win, || {
        Ok(win_of(win)?.win.module().lock_all(assert as u32)?)
    })
}

#[no_mangle]
pub extern "C" fn MPI_Win_unlock_all(win: c_int) -> c_int {
    guard_win("MPI_Win_unlock_all", win, || {
        Ok(win_of(win)?.win.module().unlock_all()?)
    })
}

#[no_mangle]
pub extern "C" fn MPI_Win_flush(rank: c_int, win: c_int) -> c_int {
    guard_win("MPI_Win_flush", win, || {
        with_win(win, |w| {
            if rank == PROC_NULL {
                return Ok(());
            }
            Ok(w.win.module().flush(Some(rank))?)
        })
    })
}

#[no_mangle]
pub extern "C" fn MPI_Win_flush_all(win: c_int) -> c_int {
    guard_win("MPI_Win_flush_all", win, || {
        with_win(win, |w| Ok(w.win.module().flush(None)?))
    })
}

#[no_mangle]
pub extern "C" fn MPI_Win_flush_local(rank: c_int, win: c_int) -> c_int {
    guard_win("MPI_Win_flush_local", win, || {
        with_win(win, |w| {
            if rank == PROC_NULL {
                return Ok(());
            }
            Ok(w.win.module().flush_local(Some(rank))?)
        })
    })
}

#[no_mangle]
pub extern "C" fn MPI_Win_flush_local_all(win: c_int) -> c_int {
    guard_win("MPI_Win_flush_local_all", win, || {
        with_win(win, |w| Ok(w.win.module().flush_local(None)?))
    })
}

#[no_mangle]
pub extern "C" fn MPI_Win_sync(win: c_int) -> c_int {
    guard_win("MPI_Win_sync", win, || {
        Ok(win_of(win)?.win.module().sync()?)
    })
}

#[no_mangle]
pub extern "C" fn MPI_Win_post(group: c_int, assert: c_int, win: c_int) -> c_int {
    guard_win("MPI_Win_post", win, || {
        let w = win_of(win)?;
        let g = window_ranks(&w, group)?;
        Ok(w.win.module().post(&g, assert as u32)?)
    })
}

#[no_mangle]
pub extern "C" fn MPI_Win_start(group: c_int, assert: c_int, win: c_int) -> c_int {
    guard_win("MPI_Win_start", win, || {
        let w = win_of(win)?;
        let g = window_ranks(&w, group)?;
        Ok(w.win.module().start(&g, assert as u32)?)
    })
}

#[no_mangle]
pub extern "C" fn MPI_Win_complete(win: c_int) -> c_int {
    guard_win("MPI_Win_complete", win, || {
        Ok(win_of(win)?.win.module().complete()?)
    })
}

#[no_mangle]
pub extern "C" fn MPI_Win_wait(win: c_int) -> c_int {
    guard_win("MPI_Win_wait", win, || {
        win_of(win)?.win.module().wait(true)?;
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn MPI_Win_test(win: c_int, flag: *mut c_int) -> c_int {
    guard_win("MPI_Win_test", win, || {
        let done = win_of(win)?.win.module().wait(false)?;
        put(flag, done as c_int, "flag")
    })
}

// ---------------------------------------------------------------- attributes, names, info, group

#[no_mangle]
pub extern "C" fn MPI_Win_get_group(win: c_int, group: *mut c_int) -> c_int {
    guard_win("MPI_Win_get_group", win, || {
        let g = win_of(win)?.win.group();
        let h = tables().add_group(g);
        put(group, h, "group")
    })
}

#[no_mangle]
pub extern "C" fn MPI_Win_set_name(win: c_int, name: *const c_char) -> c_int {
    guard_win("MPI_Win_set_name", win, || {
        let w = win_of(win)?;
        let n = cstr(name, "win_name")?;
        w.win.set_name(&n);
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn MPI_Win_get_name(win: c_int, name: *mut c_char, resultlen: *mut c_int) -> c_int {
    guard_win("MPI_Win_get_name", win, || {
        let n = put_cstr(name, 128, &win_of(win)?.win.name())?;
        put(resultlen, n, "resultlen")
    })
}

#[no_mangle]
pub extern "C" fn MPI_Win_set_info(win: c_int, info: c_int) -> c_int {
    // No hint changes what the components do; the ones given are kept
    // and reported back by MPI_Win_get_info (as MPICH does).
    guard_win("MPI_Win_set_info", win, || {
        let w = win_of(win)?;
        let given = window_hints(info)?;
        let mut hints = w.hints.lock().unwrap_or_else(|e| e.into_inner());
        for (k, v) in given {
            match hints.iter_mut().find(|e| e.0 == k) {
                Some(e) => e.1 = v,
                None => hints.push((k, v)),
            }
        }
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn MPI_Win_get_info(win: c_int, info: *mut c_int) -> c_int {
    guard_win("MPI_Win_get_info", win, || {
        let w = win_of(win)?;
        // The keys MPI defines for windows: the value the program gave,
        // else the one the components work under.
        let kv: Vec<(String, String)> = {
            let hints = w.hints.lock().unwrap_or_else(|e| e.into_inner());
            WINDOW_HINTS
                .iter()
                .filter_map(|&(k, default)| {
                    let given = hints.iter().find(|e| e.0 == k).map(|e| e.1.clone());
                    given
                        .or(default.map(str::to_string))
                        .map(|v| (k.to_string(), v))
                })
                .collect()
        };
        let h = tables().add_info(kv);
        put(info, h, "info_used")
    })
}

#[no_mangle]
pub extern "C" fn MPI_Win_create_keyval(
    copy: Option<crate::CopyAttrFn>,
    delete: Option<crate::DeleteAttrFn>,
    keyval: *mut c_int,
    extra: *mut c_void,
) -> c_int {
    crate::comm::create_keyval("MPI_Win_create_keyval", copy, delete, keyval, extra)
}

#[no_mangle]
pub extern "C" fn MPI_Win_free_keyval(keyval: *mut c_int) -> c_int {
    crate::comm::MPI_Comm_free_keyval(keyval)
}

#[no_mangle]
pub extern "C" fn MPI_Win_set_attr(win: c_int, keyval: c_int, value: *mut c_void) -> c_int {
    guard_win("MPI_Win_set_attr", win, || {
        let w = win_of(win)?;
        let kv = tables()
            .keyvals
            .get(&keyval)
            .copied()
            .ok_or_else(|| Error::new(C::Keyval, format!("invalid keyval {keyval}")))?;
        let old = w
            .attrs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&keyval)
            .copied();
        if let Some(v) = old {
            crate::comm::delete_callback(&kv, win, keyval, v)?;
        }
        w.attrs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(keyval, value as usize);
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn MPI_Win_get_attr(
    win: c_int,
    keyval: c_int,
    value: *mut c_void,
    flag: *mut c_int,
) -> c_int {
    guard_win("MPI_Win_get_attr", win, || {
        let w = win_of(win)?;
        // MPI_WIN_BASE is the base itself; the others point to their value.
        let predefined: Option<usize> = match keyval {
            8 => Some(w.win.base()),
            9 => Some(&w.size_val as *const isize as usize),
            10 => Some(&w.disp_val as *const c_int as usize),
            11 => Some(&w.flavor_val as *const c_int as usize),
            12 => Some(&w.model_val as *const c_int as usize),
            _ => None,
        };
        if let Some(v) = predefined {
            put_ptr(value, v)?;
            return put(flag, 1, "flag");
        }
        if !tables().keyvals.contains_key(&keyval) {
            return Err(Error::new(C::Keyval, format!("invalid keyval {keyval}")));
        }
        let v = w
            .attrs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&keyval)
            .copied();
        match v {
            Some(v) => {
                put_ptr(value, v)?;
                put(flag, 1, "flag")
            }
            None => put(flag, 0, "flag"),
        }
    })
}

#[no_mangle]
pub extern "C" fn MPI_Win_delete_attr(win: c_int, keyval: c_int) -> c_int {
    guard_win("MPI_Win_delete_attr", win, || {
        let w = win_of(win)?;
        let old = w
            .attrs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&keyval)
            .copied();
        let kv = tables().keyvals.get(&keyval).copied();
        match (old, kv) {
            (Some(v), Some(kv)) => {
                crate::comm::delete_callback(&kv, win, keyval, v)?;
                w.attrs
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .remove(&keyval);
                Ok(())
            }
            _ => Err(Error::new(
                C::Keyval,
                format!("no attribute for keyval {keyval}"),
            )),
        }
    })
}

// ---------------------------------------------------------------- error handlers

#[no_mangle]
pub extern "C" fn MPI_Win_create_errhandler(
    f: Option<crate::ErrFn>,
    errhandler: *mut c_int,
) -> c_int {
    crate::comm::MPI_Comm_create_errhandler(f, errhandler)
}

#[no_mangle]
pub extern "C" fn MPI_Win_set_errhandler(win: c_int, errhandler: c_int) -> c_int {
    guard_win("MPI_Win_set_errhandler", win, || {
        let w = win_of(win)?;
        let f = tables().errhandlers.get(&errhandler).copied();
        if !((1..=3).contains(&errhandler) || f.is_some()) {
            return Err(Error::new(
                C::Arg,
                format!("invalid errhandler handle {errhandler}"),
            ));
        }
        *w.errhandler.lock().unwrap_or_else(|p| p.into_inner()) = (errhandler, f);
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn MPI_Win_get_errhandler(win: c_int, errhandler: *mut c_int) -> c_int {
    guard_win("MPI_Win_get_errhandler", win, || {
        let h = win_of(win)?
            .errhandler
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .0;
        put(errhandler, h, "errhandler")
    })
}

#[no_mangle]
pub extern "C" fn MPI_Win_call_errhandler(win: c_int, errorcode: c_int) -> c_int {
    guard_win("MPI_Win_call_errhandler", win, || {
        win_of(win)?;
        let class = crate::error::class_of(errorcode)
            .and_then(tmpi_base::error::MpiErrorClass::from_raw)
            .unwrap_or(C::Other);
        let mut e = Error::new(
            class,
            format!("MPI_Win_call_errhandler with error code {errorcode}"),
        );
        e.code = Some(errorcode);
        raise_win("MPI_Win_call_errhandler", win, e);
        Ok(())
    })
}
