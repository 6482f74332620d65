//! # tmpi-capi: the MPI-3.1 C interface of tmpi
//!
//! Builds `libmpi.so` / `libmpi.a` with the C symbols declared in
//! `include/mpi.h`. Handles are integers (MPICH style): each kind lives in
//! a table of `state`; conversions `*_c2f`/`*_f2c` are the identity.
//!
//! Layout:
//! * `ffi`: every dereference of a C pointer (validated helpers);
//! * `error`: error classes, handlers and the guard around each entry
//!   point (argument checks, `catch_unwind` → `MPI_ERR_INTERN`);
//! * `state`: the runtime (pml, coll) and the handle tables;
//! * `env`, `p2p`, `request`, `datatype`, `types`, `coll`, `comm`, `misc`,
//!   `osc` (one-sided, over `tmpi-osc`), `partitioned` (MPI-4.0
//!   partitioned point-to-point): the MPI chapters; `session`
//!   (MPI-4.0 sessions), `status_calls` and `comm_buffer` (MPI-4.1 status,
//!   request, error-class and buffer calls); `stubs`: functions present only so that programs
//!   link (they fail with `MPI_ERR_UNSUPPORTED_OPERATION`).
//!
//! See `docs/capi.md`.
#![allow(non_snake_case)]
#![allow(clippy::missing_safety_doc)]

use std::ffi::{c_int, c_void};

pub mod coll;
pub mod comm;
pub mod comm_buffer;
pub(crate) mod datatype;
pub mod env;
pub(crate) mod error;
pub(crate) mod ffi;
pub mod fortran_types;
pub mod greq;
pub(crate) mod intercoll;
pub mod intercomm;
pub mod large_count;
pub mod large_count_arrays;
pub mod misc;
pub mod mpit;
pub mod neighbor;
pub mod osc;
pub mod p2p;
pub mod partitioned;
pub mod pcoll;
pub mod pmpi;
pub(crate) mod req_table;
pub mod request;
pub mod session;
pub(crate) mod state;
pub mod status_calls;
pub mod stubs;
pub mod topo;
pub mod type_attr;
pub mod types;
pub(crate) mod user_op;
pub(crate) mod wide_ops;

/// `MPI_User_function`.
pub type UserFn = unsafe extern "C" fn(*mut c_void, *mut c_void, *mut c_int, *mut c_int);
/// `MPI_User_function_c` (MPI-4.0: the length as an `MPI_Count`).
pub type UserFnC = unsafe extern "C" fn(*mut c_void, *mut c_void, *mut i64, *mut c_int);

/// A user reduction function as registered: by `MPI_Op_create` or
/// `MPI_Op_create_c`.
#[derive(Clone, Copy)]
pub(crate) enum UserOpFn {
    Int(UserFn),
    Large(UserFnC),
}
/// `MPI_Comm_errhandler_function` (called with two arguments).
pub type ErrFn = unsafe extern "C" fn(*mut c_int, *mut c_int);
/// `MPI_Comm_copy_attr_function`.
pub type CopyAttrFn =
    unsafe extern "C" fn(c_int, c_int, *mut c_void, *mut c_void, *mut c_void, *mut c_int) -> c_int;
/// `MPI_Comm_delete_attr_function`.
pub type DeleteAttrFn = unsafe extern "C" fn(c_int, c_int, *mut c_void, *mut c_void) -> c_int;
/// `MPI_Grequest_query_function`.
pub type GreqQueryFn = unsafe extern "C" fn(*mut c_void, *mut request::MpiStatus) -> c_int;
/// `MPI_Grequest_free_function`.
pub type GreqFreeFn = unsafe extern "C" fn(*mut c_void) -> c_int;
/// `MPI_Grequest_cancel_function`.
pub type GreqCancelFn = unsafe extern "C" fn(*mut c_void, c_int) -> c_int;
