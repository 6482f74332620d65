//! The PMIx reference library (`libpmix.so.2`, OpenPMIx 4.x), loaded at run
//! time with `dlopen` so that tmpi builds and runs where it is not
//! installed: the only `unsafe` of the PMIx client.
//!
//! Exposes a handful of safe calls ([`Pmix`]) over the C client API of
//! `pmix.h`: init, put/commit, fence with data collection, get, abort,
//! finalize. The structures below transcribe `pmix_common.h` of PMIx 4.2
//! (x86-64 layout; the sizes are checked at compile time against what the
//! C compiler gives for the installed headers: `pmix_proc_t` 260 bytes,
//! `pmix_value_t` 32, `pmix_info_t` 552).
//!
//! PMIx keeps one client per process, so the library and the "initialized"
//! state are process-wide: [`abort_job`] reaches them from code that cannot
//! reach the [`super::PmiClient`] (the C interface's `MPI_Abort`).

use std::ffi::{c_char, c_int, CStr, CString};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

/// The SONAME of OpenPMIx 2.x to 5.x (Debian 12: package `libpmix2`, 4.2).
pub const DEFAULT_LIBRARY: &str = "libpmix.so.2";

/// Environment variable naming another library to load (a path or a
/// SONAME); tests point it at a missing name to check the message given
/// when libpmix is absent.
pub const LIBRARY_ENV: &str = "TMPI_PMIX_LIBRARY";

const PMIX_MAX_NSLEN: usize = 255;
const PMIX_MAX_KEYLEN: usize = 511;

/// `PMIX_SUCCESS`.
const PMIX_SUCCESS: c_int = 0;
/// `PMIX_ERR_NOT_FOUND`.
pub(crate) const PMIX_ERR_NOT_FOUND: c_int = -46;
/// `PMIX_ERR_PROC_ENTRY_NOT_FOUND` (deprecated, still returned by some servers).
const PMIX_ERR_PROC_ENTRY_NOT_FOUND: c_int = -17;
/// `PMIX_RANK_WILDCARD`: job-level information.
pub(crate) const RANK_WILDCARD: u32 = u32::MAX - 1;

// pmix_data_type_t values.
const PMIX_BOOL: u16 = 1;
const PMIX_STRING: u16 = 3;
const PMIX_SIZE: u16 = 4;
const PMIX_INT: u16 = 6;
const PMIX_INT32: u16 = 9;
const PMIX_UINT16: u16 = 13;
const PMIX_UINT32: u16 = 14;
const PMIX_PROC_RANK: u16 = 40;

/// `PMIX_GLOBAL`: share with every process of the job.
const PMIX_SCOPE_GLOBAL: u8 = 3;

#[repr(C)]
#[derive(Clone, Copy)]
struct PmixProc {
    nspace: [c_char; PMIX_MAX_NSLEN + 1],
    rank: u32,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct ByteObject {
    bytes: *mut c_char,
    size: usize,
}

/// The union of `pmix_value_t`: only the members tmpi reads; `_pad` gives it
/// the C union's size (its largest member, `pmix_envar_t`, is 24 bytes).
#[repr(C)]
#[derive(Clone, Copy)]
union ValueData {
    flag: bool,
    string: *mut c_char,
    size: usize,
    integer: c_int,
    int32: i32,
    uint16: u16,
    uint32: u32,
    rank: u32,
    bo: ByteObject,
    _pad: [u64; 3],
}

#[repr(C)]
struct PmixValue {
    type_: u16,
    data: ValueData,
}

#[repr(C)]
struct PmixInfo {
    key: [c_char; PMIX_MAX_KEYLEN + 1],
    flags: u32,
    value: PmixValue,
}

const _: () = assert!(std::mem::size_of::<PmixProc>() == 260);
const _: () = assert!(std::mem::size_of::<PmixValue>() == 32);
const _: () = assert!(std::mem::size_of::<PmixInfo>() == 552);

type Status = c_int;

struct Fns {
    init: unsafe extern "C" fn(*mut PmixProc, *mut PmixInfo, usize) -> Status,
    finalize: unsafe extern "C" fn(*const PmixInfo, usize) -> Status,
    abort: unsafe extern "C" fn(c_int, *const c_char, *mut PmixProc, usize) -> Status,
    put: unsafe extern "C" fn(u8, *const c_char, *mut PmixValue) -> Status,
    commit: unsafe extern "C" fn() -> Status,
    fence: unsafe extern "C" fn(*const PmixProc, usize, *const PmixInfo, usize) -> Status,
    get: unsafe extern "C" fn(
        *const PmixProc,
        *const c_char,
        *const PmixInfo,
        usize,
        *mut *mut PmixValue,
    ) -> Status,
    error_string: unsafe extern "C" fn(Status) -> *const c_char,
    value_destruct: unsafe extern "C" fn(*mut PmixValue),
}

struct Lib {
    fns: Fns,
    name: String,
    _lib: libloading::Library,
}

/// Libraries loaded so far, by name (normally just `libpmix.so.2`); a
/// loaded library stays loaded for the life of the process.
static LOADED: Mutex<Vec<(String, Result<&'static Lib, String>)>> = Mutex::new(Vec::new());
/// The library of the live PMIx session, between a successful `PMIx_Init`
/// and `PMIx_Finalize`.
static ACTIVE: Mutex<Option<&'static Lib>> = Mutex::new(None);
/// Whether a session is live ([`ACTIVE`] set), readable without the lock.
static LIVE: AtomicBool = AtomicBool::new(false);

fn open(name: &str) -> Result<Lib, String> {
    // SAFETY: loading libpmix runs its ELF constructors, which initialise
    // only the library's own state.
    let lib = unsafe { libloading::Library::new(name) }.map_err(|e| e.to_string())?;
    macro_rules! sym {
        ($s:literal) => {{
            // SAFETY: `lib` was loaded under a libpmix name, and the field
            // this initialises declares the C signature of this symbol in
            // pmix.h (PMIx 4.x; unchanged since 2.0 for these calls).
            let f = unsafe { lib.get(concat!($s, "\0").as_bytes()) }
                .map_err(|e| format!("{name} lacks {}: {e}", $s))?;
            *f
        }};
    }
    let fns = Fns {
        init: sym!("PMIx_Init"),
        finalize: sym!("PMIx_Finalize"),
        abort: sym!("PMIx_Abort"),
        put: sym!("PMIx_Put"),
        commit: sym!("PMIx_Commit"),
        fence: sym!("PMIx_Fence"),
        get: sym!("PMIx_Get"),
        error_string: sym!("PMIx_Error_string"),
        value_destruct: sym!("PMIx_Value_destruct"),
    };
    Ok(Lib {
        fns,
        name: name.to_string(),
        _lib: lib,
    })
}

/// Loads libpmix from `name` (a SONAME or a path), once per name.
fn lib(name: &str) -> Result<&'static Lib, String> {
    let mut loaded = LOADED.lock().unwrap_or_else(|p| p.into_inner());
    if let Some((_, r)) = loaded.iter().find(|(n, _)| n == name) {
        return r.clone();
    }
    let r = open(name)
        .map(|l| &*Box::leak(Box::new(l)))
        .map_err(|e| format!("cannot load {name}: {e}"));
    if r.is_ok() {
        tracing::debug!(target: "pmi", "loaded {name}");
    }
    loaded.push((name.to_string(), r.clone()));
    r
}

/// A PMIx call that failed: the call, PMIx's status code and its text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CallError {
    pub(crate) call: &'static str,
    pub(crate) status: i32,
    pub(crate) text: String,
}

fn status_text(l: &Lib, status: Status) -> String {
    // SAFETY: PMIx_Error_string accepts any status and returns a pointer to
    // a static NUL-terminated string (or NULL, handled).
    let p = unsafe { (l.fns.error_string)(status) };
    if p.is_null() {
        return format!("status {status}");
    }
    // SAFETY: non-NULL, NUL-terminated, static (see above).
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

fn check(l: &Lib, call: &'static str, status: Status) -> Result<(), CallError> {
    if status == PMIX_SUCCESS {
        Ok(())
    } else {
        Err(CallError {
            call,
            status,
            text: status_text(l, status),
        })
    }
}

fn cstring(call: &'static str, s: &str) -> Result<CString, CallError> {
    CString::new(s).map_err(|_| CallError {
        call,
        status: -27,
        text: format!("{s:?} contains a NUL byte"),
    })
}

/// A `pmix_info_t` holding the boolean attribute `key` = true.
fn flag_info(key: &[u8]) -> PmixInfo {
    let mut info = PmixInfo {
        key: [0; PMIX_MAX_KEYLEN + 1],
        flags: 0,
        value: PmixValue {
            type_: PMIX_BOOL,
            data: ValueData { flag: true },
        },
    };
    for (d, s) in info.key.iter_mut().zip(key) {
        *d = *s as c_char;
    }
    info
}

/// A value read with [`Pmix::get`], in the types tmpi uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Value {
    Str(String),
    Bytes(Vec<u8>),
    Uint(u64),
    Int(i64),
    Bool(bool),
    /// Another PMIx data type (its code).
    Other(u16),
}

impl Value {
    /// The value as an unsigned number, if it is one.
    pub(crate) fn as_u64(&self) -> Option<u64> {
        match self {
            Value::Uint(n) => Some(*n),
            Value::Int(n) => u64::try_from(*n).ok(),
            Value::Str(s) => s.trim().parse().ok(),
            _ => None,
        }
    }
}

/// The initialized PMIx client of this process.
pub(crate) struct Pmix {
    lib: &'static Lib,
    me: PmixProc,
    nspace: String,
    rank: u32,
}

impl std::fmt::Debug for Pmix {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pmix")
            .field("library", &self.lib.name)
            .field("nspace", &self.nspace)
            .field("rank", &self.rank)
            .finish()
    }
}

/// Why [`Pmix::init`] failed.
#[derive(Debug)]
pub(crate) enum InitError {
    /// The library could not be loaded (message from the loader).
    Library(String),
    /// `PMIx_Init` failed.
    Call(CallError),
}

impl Pmix {
    /// Loads libpmix from `library` (once per process) and calls
    /// `PMIx_Init`, which connects to the PMIx server named by the
    /// environment (`PMIX_SERVER_URI*`, `PMIX_NAMESPACE`, `PMIX_RANK`).
    pub(crate) fn init(library: &str) -> Result<Pmix, InitError> {
        let l = lib(library).map_err(InitError::Library)?;
        let mut me = PmixProc {
            nspace: [0; PMIX_MAX_NSLEN + 1],
            rank: 0,
        };
        // SAFETY: `me` is a writable pmix_proc_t (layout checked above);
        // no info array (NULL, 0) is allowed by the API.
        let st = unsafe { (l.fns.init)(&mut me, std::ptr::null_mut(), 0) };
        check(l, "PMIx_Init", st).map_err(InitError::Call)?;
        *ACTIVE.lock().unwrap_or_else(|p| p.into_inner()) = Some(l);
        LIVE.store(true, Ordering::Release);
        // PMIx_Init wrote a NUL-terminated namespace of at most 255 bytes;
        // force the terminator anyway.
        me.nspace[PMIX_MAX_NSLEN] = 0;
        // SAFETY: the array is NUL-terminated (just ensured) and lives as
        // long as `me`.
        let nspace = unsafe { CStr::from_ptr(me.nspace.as_ptr()) }
            .to_string_lossy()
            .into_owned();
        Ok(Pmix {
            lib: l,
            rank: me.rank,
            me,
            nspace,
        })
    }

    pub(crate) fn nspace(&self) -> &str {
        &self.nspace
    }

    pub(crate) fn rank(&self) -> u32 {
        self.rank
    }

    /// `PMIx_Put` of a string with global scope (seen by every process of
    /// the job after the next commit and fence).
    pub(crate) fn put(&self, key: &str, value: &str) -> Result<(), CallError> {
        let k = cstring("PMIx_Put", key)?;
        let v = cstring("PMIx_Put", value)?;
        let mut val = PmixValue {
            type_: PMIX_STRING,
            data: ValueData {
                string: v.as_ptr().cast_mut(),
            },
        };
        // SAFETY: key and value are NUL-terminated and outlive the call;
        // PMIx_Put copies the value (it does not keep or free our pointer).
        let st = unsafe { (self.lib.fns.put)(PMIX_SCOPE_GLOBAL, k.as_ptr(), &mut val) };
        check(self.lib, "PMIx_Put", st)
    }

    /// `PMIx_Commit` then `PMIx_Fence` over the whole namespace with
    /// `PMIX_COLLECT_DATA`: returns when every process has fenced, with
    /// every process's committed values delivered here.
    pub(crate) fn commit_fence(&self) -> Result<(), CallError> {
        // SAFETY: no arguments; valid between init and finalize.
        let st = unsafe { (self.lib.fns.commit)() };
        check(self.lib, "PMIx_Commit", st)?;
        let mut all = self.me;
        all.rank = RANK_WILDCARD;
        let info = flag_info(b"pmix.collect");
        // SAFETY: one pmix_proc_t (the whole namespace) and one pmix_info_t
        // (PMIX_COLLECT_DATA = true), both valid for the call; PMIx_Fence
        // does not keep the pointers.
        let st = unsafe { (self.lib.fns.fence)(&all, 1, &info, 1) };
        check(self.lib, "PMIx_Fence", st)
    }

    /// `PMIx_Get` of `key` published by `rank` (or job information with
    /// [`RANK_WILDCARD`]); `Ok(None)` when PMIx has no such key.
    ///
    /// Looks only in this process's store (`PMIX_OPTIONAL`): job
    /// information arrives with `PMIx_Init`, peers' values with the
    /// collecting fence, so a key missing there does not exist (asking the
    /// server instead makes it wait for a value that may never come, and
    /// fail with a time-out).
    pub(crate) fn get(&self, rank: u32, key: &str) -> Result<Option<Value>, CallError> {
        let k = cstring("PMIx_Get", key)?;
        let mut who = self.me;
        who.rank = rank;
        let mut out: *mut PmixValue = std::ptr::null_mut();
        let info = flag_info(b"pmix.optional");
        // SAFETY: `who`, `k` and `info` (PMIX_OPTIONAL = true) are valid
        // for the call; on success PMIx stores a value it allocated with
        // malloc in `out`.
        let st = unsafe { (self.lib.fns.get)(&who, k.as_ptr(), &info, 1, &mut out) };
        if st == PMIX_ERR_NOT_FOUND || st == PMIX_ERR_PROC_ENTRY_NOT_FOUND {
            return Ok(None);
        }
        check(self.lib, "PMIx_Get", st)?;
        if out.is_null() {
            return Ok(None);
        }
        // SAFETY: `out` points to the pmix_value_t PMIx_Get returned; the
        // union member read is the one its `type_` names; strings are
        // NUL-terminated, byte objects hold `size` bytes at `bytes`.
        let v = unsafe {
            let p = &*out;
            match p.type_ {
                PMIX_STRING if !p.data.string.is_null() => {
                    Value::Str(CStr::from_ptr(p.data.string).to_string_lossy().into_owned())
                }
                PMIX_STRING => Value::Str(String::new()),
                PMIX_BOOL => Value::Bool(p.data.flag),
                PMIX_UINT32 => Value::Uint(u64::from(p.data.uint32)),
                PMIX_PROC_RANK => Value::Uint(u64::from(p.data.rank)),
                PMIX_UINT16 => Value::Uint(u64::from(p.data.uint16)),
                PMIX_SIZE => Value::Uint(p.data.size as u64),
                PMIX_INT => Value::Int(i64::from(p.data.integer)),
                PMIX_INT32 => Value::Int(i64::from(p.data.int32)),
                27 if !p.data.bo.bytes.is_null() => Value::Bytes(
                    std::slice::from_raw_parts(p.data.bo.bytes.cast::<u8>(), p.data.bo.size)
                        .to_vec(),
                ),
                27 => Value::Bytes(Vec::new()),
                t => Value::Other(t),
            }
        };
        // SAFETY: `out` came from PMIx_Get (malloc'ed by libpmix, which
        // uses the C allocator); destruct frees its contents, free the
        // struct itself, exactly as PMIX_VALUE_RELEASE does.
        unsafe {
            (self.lib.fns.value_destruct)(out);
            libc::free(out.cast());
        }
        Ok(Some(v))
    }

    /// `PMIx_Finalize`: ends this process's PMIx session normally.
    pub(crate) fn finalize(&self) -> Result<(), CallError> {
        if ACTIVE
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
            .is_none()
        {
            return Ok(());
        }
        LIVE.store(false, Ordering::Release);
        // SAFETY: no info array; called once per session (ACTIVE guards it).
        let st = unsafe { (self.lib.fns.finalize)(std::ptr::null(), 0) };
        check(self.lib, "PMIx_Finalize", st)
    }
}

/// Asks the PMIx server to end the whole job with `code`, printing `msg`
/// (`PMIx_Abort` on every process of this namespace). Returns `false`
/// without doing anything when no PMIx session is live; otherwise returns
/// once the server acknowledged (the caller then exits).
pub fn abort_job(code: i32, msg: &str) -> bool {
    if !LIVE.load(Ordering::Acquire) {
        return false;
    }
    let Some(l) = *ACTIVE.lock().unwrap_or_else(|p| p.into_inner()) else {
        return false;
    };
    let clean: String = msg.chars().filter(|&c| c != '\0').collect();
    let Ok(m) = CString::new(clean) else {
        return false;
    };
    // SAFETY: a live PMIx session (ACTIVE); `m` is NUL-terminated and
    // outlives the call; NULL procs with 0 entries means "my namespace".
    let st = unsafe { (l.fns.abort)(code, m.as_ptr(), std::ptr::null_mut(), 0) };
    if st != PMIX_SUCCESS {
        tracing::warn!(target: "pmi", "PMIx_Abort failed: {}", status_text(l, st));
    }
    true
}

/// Whether a PMIx session is live in this process.
pub fn is_live() -> bool {
    LIVE.load(Ordering::Acquire)
}
