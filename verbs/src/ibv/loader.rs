//! Loads `libibverbs.so.1` at run time (`dlopen`), so tmpi binaries start on
//! machines without rdma-core; only opening a device then fails, with
//! [`IbvError::LibraryNotFound`].
//!
//! Only the exported functions are resolved here; the `static inline` verbs of
//! `verbs.h` are transcribed in `inline.rs`.

use std::ffi::{c_char, c_int, c_uint, c_void};
use std::sync::{Arc, OnceLock};

use super::error::{IbvError, Result};
use super::sys::*;

/// Default library name (the SONAME rdma-core has shipped since 2016).
pub const DEFAULT_LIBRARY: &str = "libibverbs.so.1";

/// Environment variable that overrides the library loaded by [`Library::load`]
/// (a path or a SONAME). Tests point it at a missing name to check the
/// "libibverbs not found" path on machines where rdma-core is installed.
pub const LIBRARY_ENV: &str = "TMPI_VERBS_LIBIBVERBS";

macro_rules! symbols {
    (
        required { $($name:ident = $sym:literal : fn($($arg:ty),*) -> $ret:ty;)* }
        optional { $($oname:ident = $osym:literal : fn($($oarg:ty),*) -> $oret:ty;)* }
    ) => {
        /// Function pointers resolved from the loaded library.
        pub(crate) struct Fns {
            $(pub(crate) $name: unsafe extern "C" fn($($arg),*) -> $ret,)*
            $(pub(crate) $oname: Option<unsafe extern "C" fn($($oarg),*) -> $oret>,)*
        }

        impl Fns {
            /// Resolves every symbol of `lib`.
            ///
            /// # Safety
            /// `lib` must be libibverbs, so that the symbols have the declared types.
            unsafe fn resolve(lib: &libloading::Library, name: &str) -> Result<Self> {
                Ok(Fns {
                    $($name: {
                        // SAFETY: the caller guarantees `lib` is libibverbs, whose
                        // exported symbol has exactly this C signature (verbs.h).
                        let s = unsafe { lib.get::<unsafe extern "C" fn($($arg),*) -> $ret>(concat!($sym, "\0").as_bytes()) };
                        *s.map_err(|e| IbvError::MissingSymbol {
                            name: name.to_string(),
                            symbol: $sym,
                            reason: e.to_string(),
                        })?
                    },)*
                    $($oname: {
                        // SAFETY: as above; the symbol is optional (newer rdma-core only).
                        let s = unsafe { lib.get::<unsafe extern "C" fn($($oarg),*) -> $oret>(concat!($osym, "\0").as_bytes()) };
                        s.ok().map(|s| *s)
                    },)*
                })
            }
        }
    };
}

symbols! {
    required {
        get_device_list = "ibv_get_device_list": fn(*mut c_int) -> *mut *mut ibv_device;
        free_device_list = "ibv_free_device_list": fn(*mut *mut ibv_device) -> ();
        get_device_name = "ibv_get_device_name": fn(*mut ibv_device) -> *const c_char;
        get_device_guid = "ibv_get_device_guid": fn(*mut ibv_device) -> u64;
        open_device = "ibv_open_device": fn(*mut ibv_device) -> *mut ibv_context;
        close_device = "ibv_close_device": fn(*mut ibv_context) -> c_int;
        query_device = "ibv_query_device": fn(*mut ibv_context, *mut ibv_device_attr) -> c_int;
        query_port = "ibv_query_port": fn(*mut ibv_context, u8, *mut _compat_ibv_port_attr) -> c_int;
        query_gid = "ibv_query_gid": fn(*mut ibv_context, u8, c_int, *mut ibv_gid) -> c_int;
        alloc_pd = "ibv_alloc_pd": fn(*mut ibv_context) -> *mut ibv_pd;
        dealloc_pd = "ibv_dealloc_pd": fn(*mut ibv_pd) -> c_int;
        reg_mr = "ibv_reg_mr": fn(*mut ibv_pd, *mut c_void, usize, c_int) -> *mut ibv_mr;
        dereg_mr = "ibv_dereg_mr": fn(*mut ibv_mr) -> c_int;
        create_cq = "ibv_create_cq": fn(*mut ibv_context, c_int, *mut c_void, *mut ibv_comp_channel, c_int) -> *mut ibv_cq;
        destroy_cq = "ibv_destroy_cq": fn(*mut ibv_cq) -> c_int;
        create_srq = "ibv_create_srq": fn(*mut ibv_pd, *mut ibv_srq_init_attr) -> *mut ibv_srq;
        destroy_srq = "ibv_destroy_srq": fn(*mut ibv_srq) -> c_int;
        query_srq = "ibv_query_srq": fn(*mut ibv_srq, *mut ibv_srq_attr) -> c_int;
        create_qp = "ibv_create_qp": fn(*mut ibv_pd, *mut ibv_qp_init_attr) -> *mut ibv_qp;
        modify_qp = "ibv_modify_qp": fn(*mut ibv_qp, *mut ibv_qp_attr, c_int) -> c_int;
        query_qp = "ibv_query_qp": fn(*mut ibv_qp, *mut ibv_qp_attr, c_int, *mut ibv_qp_init_attr) -> c_int;
        destroy_qp = "ibv_destroy_qp": fn(*mut ibv_qp) -> c_int;
    }
    optional {
        reg_mr_iova2 = "ibv_reg_mr_iova2": fn(*mut ibv_pd, *mut c_void, usize, u64, c_uint) -> *mut ibv_mr;
        query_gid_ex = "_ibv_query_gid_ex": fn(*mut ibv_context, u32, u32, *mut ibv_gid_entry, u32, usize) -> c_int;
    }
}

/// The loaded library and its functions. Kept alive by every object created
/// through it (the function pointers are valid only while it is loaded).
pub(crate) struct Lib {
    pub(crate) fns: Fns,
    pub(crate) name: String,
    _lib: libloading::Library,
}

/// A handle on a loaded libibverbs. Cheap to clone.
#[derive(Clone)]
pub struct Library(pub(crate) Arc<Lib>);

impl std::fmt::Debug for Library {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Library")
            .field("name", &self.0.name)
            .finish()
    }
}

static DEFAULT: OnceLock<std::result::Result<Library, (String, String)>> = OnceLock::new();

impl Library {
    /// The process-wide libibverbs: `$TMPI_VERBS_LIBIBVERBS` if set, else
    /// `libibverbs.so.1`. Loaded once; a failure is remembered.
    pub fn load() -> Result<Library> {
        let r = DEFAULT.get_or_init(|| {
            let name = std::env::var(LIBRARY_ENV).unwrap_or_else(|_| DEFAULT_LIBRARY.to_string());
            Library::open(&name).map_err(|e| match e {
                IbvError::LibraryNotFound { name, reason } => (name, reason),
                other => (name, other.to_string()),
            })
        });
        match r {
            Ok(l) => Ok(l.clone()),
            Err((name, reason)) => Err(IbvError::LibraryNotFound {
                name: name.clone(),
                reason: reason.clone(),
            }),
        }
    }

    /// Loads libibverbs from `name` (a SONAME or a path), independent of the
    /// process-wide instance.
    pub fn open(name: &str) -> Result<Library> {
        if !cfg!(all(target_os = "linux", target_arch = "x86_64")) {
            return Err(IbvError::UnsupportedPlatform);
        }
        // SAFETY: loading libibverbs runs its ELF constructors, which only
        // initialise its own state; no Rust invariants are involved.
        let lib =
            unsafe { libloading::Library::new(name) }.map_err(|e| IbvError::LibraryNotFound {
                name: name.to_string(),
                reason: e.to_string(),
            })?;
        // SAFETY: `lib` was loaded under a libibverbs name; Fns::resolve
        // declares the signatures of rdma-core's exported verbs.
        let fns = unsafe { Fns::resolve(&lib, name) }?;
        tracing::debug!(target: "verbs", library = name, "loaded libibverbs");
        Ok(Library(Arc::new(Lib {
            fns,
            name: name.to_string(),
            _lib: lib,
        })))
    }

    /// The name the library was loaded under.
    pub fn name(&self) -> &str {
        &self.0.name
    }
}
