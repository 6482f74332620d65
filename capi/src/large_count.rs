//! MPI-4.0's large-count entry points (`MPI_X_c`): the same calls with
//! `MPI_Count` counts (and `MPI_Aint` displacements in the v-forms), so
//! that programs written against them build and run.
//!
//! What they cover: the queries (`MPI_Get_count_c`, `MPI_Get_elements_c`,
//! `MPI_Type_size_c`, `MPI_Type_get_(true_)extent_c`) answer over the whole
//! `MPI_Count` range. Point-to-point calls and `MPI_Bcast_c`/`MPI_Ibcast_c`
//! take any count: one beyond `int` is sent as one item of a contiguous
//! type of that many items, made for the call ([`WideType`]; the type
//! signature is the same, so either side may use either form). The other
//! communication calls and `MPI_Type_contiguous_c` run the `int` call when
//! every count (and displacement) fits an `int`, and fail with
//! `MPI_ERR_COUNT` naming the count when one does not (docs/capi.md,
//! "Large counts").

use std::ffi::{c_int, c_void};

use crate::coll::{
    MPI_Allgather, MPI_Allreduce, MPI_Alltoall, MPI_Alltoallv, MPI_Bcast, MPI_Exscan, MPI_Gather,
    MPI_Iallgather, MPI_Iallreduce, MPI_Ialltoall, MPI_Ibcast, MPI_Iexscan, MPI_Igather,
    MPI_Ireduce, MPI_Ireduce_scatter_block, MPI_Iscan, MPI_Iscatter, MPI_Reduce,
    MPI_Reduce_scatter_block, MPI_Scan, MPI_Scatter,
};
use crate::comm_buffer::{
    MPI_Buffer_attach, MPI_Buffer_detach, MPI_Comm_attach_buffer, MPI_Comm_detach_buffer,
};
use crate::datatype::{combiner, Builder};
use crate::error::{guard, Error, MpiErrorClass as C, Res};
use crate::misc::MPI_Reduce_local;
use crate::neighbor::{
    MPI_Ineighbor_allgather, MPI_Ineighbor_alltoall, MPI_Neighbor_allgather, MPI_Neighbor_alltoall,
};
use crate::p2p::{
    MPI_Bsend, MPI_Bsend_init, MPI_Ibsend, MPI_Imrecv, MPI_Irecv, MPI_Irsend, MPI_Isend,
    MPI_Isendrecv, MPI_Isendrecv_replace, MPI_Issend, MPI_Mrecv, MPI_Recv, MPI_Recv_init,
    MPI_Rsend, MPI_Rsend_init, MPI_Send, MPI_Send_init, MPI_Sendrecv, MPI_Sendrecv_replace,
    MPI_Ssend, MPI_Ssend_init, MPI_Status_set_elements_x,
};
use crate::request::MpiStatus;
use crate::state::tables;
use crate::types::{
    MPI_Pack, MPI_Pack_size, MPI_Type_contiguous, MPI_Type_create_hvector, MPI_Type_create_resized,
    MPI_Type_get_extent_x, MPI_Type_get_true_extent_x, MPI_Type_size_x, MPI_Type_vector,
    MPI_Unpack,
};

/// `MPI_Count` (mpi.h: `long long`).
pub(crate) type Count = i64;
/// `MPI_Aint` (mpi.h: `intptr_t`).
pub(crate) type Aint = isize;

/// The call's `MPI_ERR_COUNT` for a count or displacement beyond `int`,
/// through `comm`'s error handler.
#[cold]
pub(crate) fn too_large(name: &'static str, comm: c_int, what: &str, v: i64) -> c_int {
    guard(name, comm, || {
        Err(Error::new(
            C::Count,
            format!("{what} {v} is beyond INT_MAX: tmpi's {name} takes int-sized counts only"),
        ))
    })
}

/// A scalar `MPI_Count` (or a list of them) as `int`, or return the
/// call's error code ([`too_large`]).
macro_rules! int_or_return {
    ($name:expr, $comm:expr, $($v:ident),+) => {$(
        let Ok($v) = c_int::try_from($v) else {
            return too_large($name, $comm, stringify!($v), $v);
        };
    )+};
}
pub(crate) use int_or_return;

/// What an `int` call that returned `rc` wrote to `v`, written on to the
/// `MPI_Count` at `out` when it succeeded (errors through `comm`'s
/// handler); its code otherwise.
fn put_count(name: &'static str, comm: c_int, rc: c_int, out: *mut Count, v: c_int) -> c_int {
    if rc != 0 {
        return rc;
    }
    guard(name, comm, || crate::ffi::put(out, Count::from(v), "size"))
}

/// `fn NAME_c(...)` that converts its `MPI_Count` arguments `$cnt` to
/// `int` and runs `$f` with every argument in order.
macro_rules! by_int {
    ($c:ident => $f:ident, $comm:expr, [$($cnt:ident),+], ($($arg:ident : $ty:ty),* $(,)?)) => {
        #[doc = concat!("`", stringify!($f), "` with `MPI_Count` counts (module docs).")]
        #[no_mangle]
        pub extern "C" fn $c($($arg: $ty),*) -> c_int {
            int_or_return!(stringify!($c), $comm, $($cnt),+);
            $f($($arg),*)
        }
    };
}

/// `count` items of datatype `dtype` as one item of a committed contiguous
/// type made for one call. The handle leaves the handle table when this
/// drops, after the call returns; an operation still in flight (a
/// non-blocking call's request) holds the type itself, as it does for a
/// type the user frees meanwhile.
struct WideType(c_int);

impl WideType {
    fn new(dtype: c_int, count: Count) -> Res<WideType> {
        let n = usize::try_from(count)
            .map_err(|_| Error::new(C::Count, format!("count {count} is negative")))?;
        let t = tables().comm_type(dtype)?;
        let mut b = Builder::new();
        // A contiguous run of `n` items of a type that fills its extent is
        // one typemap block, however large `n` is.
        b.place(&t, 0, n)?;
        let mut wide = b.finish(combiner::CONTIGUOUS, vec![], vec![], vec![dtype], false);
        wide.committed = true;
        wide.name = format!("{count} items of datatype {dtype}");
        Ok(WideType(tables().add_type(wide)))
    }
}

impl Drop for WideType {
    fn drop(&mut self) {
        tables().types.remove(&self.0);
    }
}

/// `fn NAME_c(...)` that runs `$f` with every argument in order, each
/// count `$cnt` of datatype `$ty` that does not fit an `int` replaced by one
/// item of a [`WideType`].
macro_rules! by_wide {
    ($c:ident => $f:ident, $comm:expr, [$($cnt:ident : $ty:ident),+], ($($arg:ident : $argty:ty),* $(,)?)) => {
        #[doc = concat!("`", stringify!($f), "` with `MPI_Count` counts of any size (module docs).")]
        #[no_mangle]
        pub extern "C" fn $c($($arg: $argty),*) -> c_int {
            $(
                // `_held` keeps a wide type's handle until `$f` has returned.
                let ($cnt, $ty, _held) = match c_int::try_from($cnt) {
                    Ok(n) => (n, $ty, None),
                    Err(_) => match WideType::new($ty, $cnt) {
                        Ok(w) => (1, w.0, Some(w)),
                        Err(e) => return guard(stringify!($c), $comm, || Err(e)),
                    },
                };
            )+
            $f($($arg),*)
        }
    };
}

macro_rules! sends {
    ($($c:ident => $f:ident),*) => {$(
        by_wide!($c => $f, comm, [count: dtype], (
            buf: *const c_void, count: Count, dtype: c_int, dest: c_int, tag: c_int, comm: c_int,
        ));
    )*};
}
sends!(MPI_Send_c => MPI_Send, MPI_Ssend_c => MPI_Ssend, MPI_Rsend_c => MPI_Rsend,
       MPI_Bsend_c => MPI_Bsend);

macro_rules! isends {
    ($($c:ident => $f:ident),*) => {$(
        by_wide!($c => $f, comm, [count: dtype], (
            buf: *const c_void, count: Count, dtype: c_int, dest: c_int, tag: c_int, comm: c_int,
            request: *mut c_int,
        ));
    )*};
}
isends!(MPI_Isend_c => MPI_Isend, MPI_Issend_c => MPI_Issend, MPI_Irsend_c => MPI_Irsend,
        MPI_Ibsend_c => MPI_Ibsend);

by_wide!(MPI_Recv_c => MPI_Recv, comm, [count: dtype], (
    buf: *mut c_void, count: Count, dtype: c_int, source: c_int, tag: c_int, comm: c_int,
    status: *mut MpiStatus,
));
by_wide!(MPI_Irecv_c => MPI_Irecv, comm, [count: dtype], (
    buf: *mut c_void, count: Count, dtype: c_int, source: c_int, tag: c_int, comm: c_int,
    request: *mut c_int,
));
by_wide!(MPI_Sendrecv_c => MPI_Sendrecv, comm, [sendcount: sendtype, recvcount: recvtype], (
    sendbuf: *const c_void, sendcount: Count, sendtype: c_int, dest: c_int, sendtag: c_int,
    recvbuf: *mut c_void, recvcount: Count, recvtype: c_int, source: c_int, recvtag: c_int,
    comm: c_int, status: *mut MpiStatus,
));
by_wide!(MPI_Bcast_c => MPI_Bcast, comm, [count: dtype], (
    buf: *mut c_void, count: Count, dtype: c_int, root: c_int, comm: c_int,
));
by_wide!(MPI_Ibcast_c => MPI_Ibcast, comm, [count: dtype], (
    buf: *mut c_void, count: Count, dtype: c_int, root: c_int, comm: c_int, request: *mut c_int,
));
by_int!(MPI_Reduce_c => MPI_Reduce, comm, [count], (
    sendbuf: *const c_void, recvbuf: *mut c_void, count: Count, dtype: c_int, op: c_int,
    root: c_int, comm: c_int,
));
by_int!(MPI_Allreduce_c => MPI_Allreduce, comm, [count], (
    sendbuf: *const c_void, recvbuf: *mut c_void, count: Count, dtype: c_int, op: c_int,
    comm: c_int,
));
by_int!(MPI_Iallreduce_c => MPI_Iallreduce, comm, [count], (
    sendbuf: *const c_void, recvbuf: *mut c_void, count: Count, dtype: c_int, op: c_int,
    comm: c_int, request: *mut c_int,
));
by_int!(MPI_Gather_c => MPI_Gather, comm, [sendcount, recvcount], (
    sendbuf: *const c_void, sendcount: Count, sendtype: c_int, recvbuf: *mut c_void,
    recvcount: Count, recvtype: c_int, root: c_int, comm: c_int,
));
by_int!(MPI_Scatter_c => MPI_Scatter, comm, [sendcount, recvcount], (
    sendbuf: *const c_void, sendcount: Count, sendtype: c_int, recvbuf: *mut c_void,
    recvcount: Count, recvtype: c_int, root: c_int, comm: c_int,
));
by_int!(MPI_Allgather_c => MPI_Allgather, comm, [sendcount, recvcount], (
    sendbuf: *const c_void, sendcount: Count, sendtype: c_int, recvbuf: *mut c_void,
    recvcount: Count, recvtype: c_int, comm: c_int,
));
by_int!(MPI_Alltoall_c => MPI_Alltoall, comm, [sendcount, recvcount], (
    sendbuf: *const c_void, sendcount: Count, sendtype: c_int, recvbuf: *mut c_void,
    recvcount: Count, recvtype: c_int, comm: c_int,
));

macro_rules! folds {
    ($($c:ident => $f:ident),*) => {$(
        by_int!($c => $f, comm, [count], (
            sendbuf: *const c_void, recvbuf: *mut c_void, count: Count, dtype: c_int, op: c_int,
            comm: c_int,
        ));
    )*};
}
folds!(MPI_Scan_c => MPI_Scan, MPI_Exscan_c => MPI_Exscan,
       MPI_Reduce_scatter_block_c => MPI_Reduce_scatter_block);
by_int!(MPI_Ireduce_c => MPI_Ireduce, comm, [count], (
    sendbuf: *const c_void, recvbuf: *mut c_void, count: Count, dtype: c_int, op: c_int,
    root: c_int, comm: c_int, request: *mut c_int,
));
by_int!(MPI_Reduce_local_c => MPI_Reduce_local, crate::state::COMM_WORLD, [count], (
    inbuf: *const c_void, inoutbuf: *mut c_void, count: Count, dtype: c_int, op: c_int,
));

macro_rules! rooted_nb {
    ($($c:ident => $f:ident),*) => {$(
        by_int!($c => $f, comm, [sendcount, recvcount], (
            sendbuf: *const c_void, sendcount: Count, sendtype: c_int, recvbuf: *mut c_void,
            recvcount: Count, recvtype: c_int, root: c_int, comm: c_int, request: *mut c_int,
        ));
    )*};
}
rooted_nb!(MPI_Igather_c => MPI_Igather, MPI_Iscatter_c => MPI_Iscatter);

macro_rules! exchanges_nb {
    ($($c:ident => $f:ident),*) => {$(
        by_int!($c => $f, comm, [sendcount, recvcount], (
            sendbuf: *const c_void, sendcount: Count, sendtype: c_int, recvbuf: *mut c_void,
            recvcount: Count, recvtype: c_int, comm: c_int, request: *mut c_int,
        ));
    )*};
}
exchanges_nb!(MPI_Iallgather_c => MPI_Iallgather, MPI_Ialltoall_c => MPI_Ialltoall);

by_int!(MPI_Type_vector_c => MPI_Type_vector, crate::state::COMM_WORLD,
    [count, blocklength, stride], (
    count: Count, blocklength: Count, stride: Count, oldtype: c_int, newtype: *mut c_int,
));
/// `MPI_Type_create_hvector` with `MPI_Count` arguments (the stride, in
/// bytes, as an `MPI_Aint`).
#[no_mangle]
pub extern "C" fn MPI_Type_create_hvector_c(
    count: Count,
    blocklength: Count,
    stride: Count,
    oldtype: c_int,
    newtype: *mut c_int,
) -> c_int {
    let name = "MPI_Type_create_hvector_c";
    let world = crate::state::COMM_WORLD;
    let Ok(count) = c_int::try_from(count) else {
        return too_large(name, world, "count", count);
    };
    let Ok(blocklength) = c_int::try_from(blocklength) else {
        return too_large(name, world, "blocklength", blocklength);
    };
    let Ok(stride) = Aint::try_from(stride) else {
        return too_large(name, world, "stride", stride);
    };
    MPI_Type_create_hvector(count, blocklength, stride, oldtype, newtype)
}

/// The `n` entries of a C array as `int`s (`None`: a NULL array, passed on
/// as NULL), or the first that does not fit.
pub(crate) fn ints<T: Copy>(
    p: *const T,
    n: usize,
    wide: impl Fn(T) -> i64,
) -> Result<Option<Vec<c_int>>, i64> {
    if p.is_null() {
        return Ok(None);
    }
    // SAFETY: non-null; the caller passes an array of `n` entries (one
    // per process of the group the call addresses, or per block of a
    // type constructor), the MPI contract of the call.
    let s = unsafe { std::slice::from_raw_parts(p, n) };
    s.iter()
        .map(|&v| c_int::try_from(wide(v)).map_err(|_| wide(v)))
        .collect::<Result<Vec<c_int>, i64>>()
        .map(Some)
}

/// `MPI_Alltoallv` with `MPI_Count` counts and `MPI_Aint` displacements.
#[no_mangle]
pub extern "C" fn MPI_Alltoallv_c(
    sendbuf: *const c_void,
    sendcounts: *const Count,
    sdispls: *const Aint,
    sendtype: c_int,
    recvbuf: *mut c_void,
    recvcounts: *const Count,
    rdispls: *const Aint,
    recvtype: c_int,
    comm: c_int,
) -> c_int {
    let name = "MPI_Alltoallv_c";
    // One entry per process of the remote group on an inter-communicator.
    let n = match crate::intercoll::target(comm) {
        Ok(crate::intercoll::Target::Inter(ic)) => crate::intercoll::remote_size(&ic),
        Ok(crate::intercoll::Target::Intra(c)) => c.size() as usize,
        Err(e) => return guard(name, comm, || Err(e)),
    };
    let counts = |p: *const Count, what| ints(p, n, |v| v).map_err(|v| (what, v));
    let displs = |p: *const Aint, what| ints(p, n, |v| v as i64).map_err(|v| (what, v));
    let converted = counts(sendcounts, "sendcounts entry").and_then(|sc| {
        Ok((
            sc,
            displs(sdispls, "sdispls entry")?,
            counts(recvcounts, "recvcounts entry")?,
            displs(rdispls, "rdispls entry")?,
        ))
    });
    let (sc, sd, rc, rd) = match converted {
        Ok(v) => v,
        Err((what, v)) => return too_large(name, comm, what, v),
    };
    let ptr = |v: &Option<Vec<c_int>>| v.as_ref().map_or(std::ptr::null(), |v| v.as_ptr());
    MPI_Alltoallv(
        sendbuf,
        ptr(&sc),
        ptr(&sd),
        sendtype,
        recvbuf,
        ptr(&rc),
        ptr(&rd),
        recvtype,
        comm,
    )
}

by_int!(MPI_Type_contiguous_c => MPI_Type_contiguous, crate::state::COMM_WORLD, [count], (
    count: Count, oldtype: c_int, newtype: *mut c_int,
));

/// `MPI_Type_size_x` (the same arguments).
#[no_mangle]
pub extern "C" fn MPI_Type_size_c(dtype: c_int, size: *mut Count) -> c_int {
    MPI_Type_size_x(dtype, size)
}

/// `MPI_Type_get_extent_x` (the same arguments).
#[no_mangle]
pub extern "C" fn MPI_Type_get_extent_c(dtype: c_int, lb: *mut Count, extent: *mut Count) -> c_int {
    MPI_Type_get_extent_x(dtype, lb, extent)
}

/// `MPI_Type_get_true_extent_x` (the same arguments).
#[no_mangle]
pub extern "C" fn MPI_Type_get_true_extent_c(
    dtype: c_int,
    lb: *mut Count,
    extent: *mut Count,
) -> c_int {
    MPI_Type_get_true_extent_x(dtype, lb, extent)
}

/// The persistent collectives' `MPI_Count` forms (MPI-4.0 §6.13), by
/// [`by_int`] on their `int` forms.
macro_rules! pinit_c {
    ($($c:ident => $f:ident [$($cnt:ident),+] on $comm:ident ($($arg:ident : $ty:ty),* $(,)?);)*) => {$(
        by_int!($c => $f, $comm, [$($cnt),+], ($($arg: $ty,)* info: c_int, request: *mut c_int));
    )*};
}
use crate::pcoll::{
    MPI_Allgather_init, MPI_Allreduce_init, MPI_Alltoall_init, MPI_Bcast_init, MPI_Exscan_init,
    MPI_Gather_init, MPI_Neighbor_allgather_init, MPI_Neighbor_alltoall_init, MPI_Reduce_init,
    MPI_Reduce_scatter_block_init, MPI_Scan_init, MPI_Scatter_init,
};
pinit_c! {
    MPI_Bcast_init_c => MPI_Bcast_init [count] on comm
        (buf: *mut c_void, count: Count, dtype: c_int, root: c_int, comm: c_int);
    MPI_Reduce_init_c => MPI_Reduce_init [count] on comm
        (sendbuf: *const c_void, recvbuf: *mut c_void, count: Count, dtype: c_int, op: c_int,
         root: c_int, comm: c_int);
    MPI_Allreduce_init_c => MPI_Allreduce_init [count] on comm
        (sendbuf: *const c_void, recvbuf: *mut c_void, count: Count, dtype: c_int, op: c_int,
         comm: c_int);
    MPI_Scan_init_c => MPI_Scan_init [count] on comm
        (sendbuf: *const c_void, recvbuf: *mut c_void, count: Count, dtype: c_int, op: c_int,
         comm: c_int);
    MPI_Exscan_init_c => MPI_Exscan_init [count] on comm
        (sendbuf: *const c_void, recvbuf: *mut c_void, count: Count, dtype: c_int, op: c_int,
         comm: c_int);
    MPI_Reduce_scatter_block_init_c => MPI_Reduce_scatter_block_init [recvcount] on comm
        (sendbuf: *const c_void, recvbuf: *mut c_void, recvcount: Count, dtype: c_int, op: c_int,
         comm: c_int);
    MPI_Gather_init_c => MPI_Gather_init [sendcount, recvcount] on comm
        (sendbuf: *const c_void, sendcount: Count, sendtype: c_int, recvbuf: *mut c_void,
         recvcount: Count, recvtype: c_int, root: c_int, comm: c_int);
    MPI_Scatter_init_c => MPI_Scatter_init [sendcount, recvcount] on comm
        (sendbuf: *const c_void, sendcount: Count, sendtype: c_int, recvbuf: *mut c_void,
         recvcount: Count, recvtype: c_int, root: c_int, comm: c_int);
    MPI_Allgather_init_c => MPI_Allgather_init [sendcount, recvcount] on comm
        (sendbuf: *const c_void, sendcount: Count, sendtype: c_int, recvbuf: *mut c_void,
         recvcount: Count, recvtype: c_int, comm: c_int);
    MPI_Alltoall_init_c => MPI_Alltoall_init [sendcount, recvcount] on comm
        (sendbuf: *const c_void, sendcount: Count, sendtype: c_int, recvbuf: *mut c_void,
         recvcount: Count, recvtype: c_int, comm: c_int);
    MPI_Neighbor_allgather_init_c => MPI_Neighbor_allgather_init [sendcount, recvcount] on comm
        (sendbuf: *const c_void, sendcount: Count, sendtype: c_int, recvbuf: *mut c_void,
         recvcount: Count, recvtype: c_int, comm: c_int);
    MPI_Neighbor_alltoall_init_c => MPI_Neighbor_alltoall_init [sendcount, recvcount] on comm
        (sendbuf: *const c_void, sendcount: Count, sendtype: c_int, recvbuf: *mut c_void,
         recvcount: Count, recvtype: c_int, comm: c_int);
}

// ---------------------------------------------------------------- more point-to-point

macro_rules! send_inits {
    ($($c:ident => $f:ident),*) => {$(
        // Persistent: the request names its datatype at every MPI_Start, so
        // no call-long wide type; int-sized counts only.
        by_int!($c => $f, comm, [count], (
            buf: *const c_void, count: Count, dtype: c_int, dest: c_int, tag: c_int, comm: c_int,
            request: *mut c_int,
        ));
    )*};
}
send_inits!(MPI_Send_init_c => MPI_Send_init, MPI_Bsend_init_c => MPI_Bsend_init,
            MPI_Ssend_init_c => MPI_Ssend_init, MPI_Rsend_init_c => MPI_Rsend_init);
by_int!(MPI_Recv_init_c => MPI_Recv_init, comm, [count], (
    buf: *mut c_void, count: Count, dtype: c_int, source: c_int, tag: c_int, comm: c_int,
    request: *mut c_int,
));
by_wide!(MPI_Mrecv_c => MPI_Mrecv, crate::state::COMM_WORLD, [count: dtype], (
    buf: *mut c_void, count: Count, dtype: c_int, message: *mut c_int, status: *mut MpiStatus,
));
by_wide!(MPI_Imrecv_c => MPI_Imrecv, crate::state::COMM_WORLD, [count: dtype], (
    buf: *mut c_void, count: Count, dtype: c_int, message: *mut c_int, request: *mut c_int,
));
by_wide!(MPI_Sendrecv_replace_c => MPI_Sendrecv_replace, comm, [count: dtype], (
    buf: *mut c_void, count: Count, dtype: c_int, dest: c_int, sendtag: c_int, source: c_int,
    recvtag: c_int, comm: c_int, status: *mut MpiStatus,
));
by_wide!(MPI_Isendrecv_c => MPI_Isendrecv, comm, [sendcount: sendtype, recvcount: recvtype], (
    sendbuf: *const c_void, sendcount: Count, sendtype: c_int, dest: c_int, sendtag: c_int,
    recvbuf: *mut c_void, recvcount: Count, recvtype: c_int, source: c_int, recvtag: c_int,
    comm: c_int, request: *mut c_int,
));
by_wide!(MPI_Isendrecv_replace_c => MPI_Isendrecv_replace, comm, [count: dtype], (
    buf: *mut c_void, count: Count, dtype: c_int, dest: c_int, sendtag: c_int, source: c_int,
    recvtag: c_int, comm: c_int, request: *mut c_int,
));

/// `MPI_Status_set_elements_x` (the same arguments).
#[no_mangle]
pub extern "C" fn MPI_Status_set_elements_c(
    status: *mut MpiStatus,
    dtype: c_int,
    count: Count,
) -> c_int {
    MPI_Status_set_elements_x(status, dtype, count)
}

// ---------------------------------------------------------------- more collectives

macro_rules! folds_nb {
    ($($c:ident => $f:ident),*) => {$(
        by_int!($c => $f, comm, [count], (
            sendbuf: *const c_void, recvbuf: *mut c_void, count: Count, dtype: c_int, op: c_int,
            comm: c_int, request: *mut c_int,
        ));
    )*};
}
folds_nb!(MPI_Iscan_c => MPI_Iscan, MPI_Iexscan_c => MPI_Iexscan,
          MPI_Ireduce_scatter_block_c => MPI_Ireduce_scatter_block);

macro_rules! exchanges {
    ($($c:ident => $f:ident),*) => {$(
        by_int!($c => $f, comm, [sendcount, recvcount], (
            sendbuf: *const c_void, sendcount: Count, sendtype: c_int, recvbuf: *mut c_void,
            recvcount: Count, recvtype: c_int, comm: c_int,
        ));
    )*};
}
exchanges!(MPI_Neighbor_allgather_c => MPI_Neighbor_allgather,
           MPI_Neighbor_alltoall_c => MPI_Neighbor_alltoall);
exchanges_nb!(MPI_Ineighbor_allgather_c => MPI_Ineighbor_allgather,
              MPI_Ineighbor_alltoall_c => MPI_Ineighbor_alltoall);

// ---------------------------------------------------------------- datatypes and packing

/// `MPI_Type_create_resized` with `MPI_Count` bounds.
#[no_mangle]
pub extern "C" fn MPI_Type_create_resized_c(
    oldtype: c_int,
    lb: Count,
    extent: Count,
    newtype: *mut c_int,
) -> c_int {
    let world = crate::state::COMM_WORLD;
    let Ok(lb) = Aint::try_from(lb) else {
        return too_large("MPI_Type_create_resized_c", world, "lb", lb);
    };
    let Ok(extent) = Aint::try_from(extent) else {
        return too_large("MPI_Type_create_resized_c", world, "extent", extent);
    };
    MPI_Type_create_resized(oldtype, lb, extent, newtype)
}

/// An `MPI_Count` position in and out of an `int` call: `Err` with the
/// call's error code when the position does not fit.
fn with_int_position(
    name: &'static str,
    comm: c_int,
    position: *mut Count,
    f: impl FnOnce(*mut c_int) -> c_int,
) -> c_int {
    let p = match crate::ffi::get(position as *const Count, "position") {
        Ok(p) => p,
        Err(e) => return guard(name, comm, || Err(e)),
    };
    let Ok(mut pos) = c_int::try_from(p) else {
        return too_large(name, comm, "position", p);
    };
    let rc = f(&mut pos);
    if rc == 0 {
        // SAFETY: `position` was read above, so it is a valid pointer to
        // an `MPI_Count` the caller lets this call update.
        unsafe { *position = Count::from(pos) };
    }
    rc
}

/// `MPI_Pack` with `MPI_Count` sizes and position.
#[no_mangle]
pub extern "C" fn MPI_Pack_c(
    inbuf: *const c_void,
    incount: Count,
    datatype: c_int,
    outbuf: *mut c_void,
    outsize: Count,
    position: *mut Count,
    comm: c_int,
) -> c_int {
    let name = "MPI_Pack_c";
    int_or_return!(name, comm, incount, outsize);
    with_int_position(name, comm, position, |pos| {
        MPI_Pack(inbuf, incount, datatype, outbuf, outsize, pos, comm)
    })
}

/// `MPI_Unpack` with `MPI_Count` sizes and position.
#[no_mangle]
pub extern "C" fn MPI_Unpack_c(
    inbuf: *const c_void,
    insize: Count,
    position: *mut Count,
    outbuf: *mut c_void,
    outcount: Count,
    datatype: c_int,
    comm: c_int,
) -> c_int {
    let name = "MPI_Unpack_c";
    int_or_return!(name, comm, insize, outcount);
    with_int_position(name, comm, position, |pos| {
        MPI_Unpack(inbuf, insize, pos, outbuf, outcount, datatype, comm)
    })
}

/// `MPI_Pack_size` with an `MPI_Count` count and size.
#[no_mangle]
pub extern "C" fn MPI_Pack_size_c(
    incount: Count,
    datatype: c_int,
    comm: c_int,
    size: *mut Count,
) -> c_int {
    int_or_return!("MPI_Pack_size_c", comm, incount);
    let mut s: c_int = 0;
    let rc = MPI_Pack_size(incount, datatype, comm, &mut s);
    put_count("MPI_Pack_size_c", comm, rc, size, s)
}

// ---------------------------------------------------------------- buffered mode

/// `MPI_Buffer_attach` with an `MPI_Count` size.
#[no_mangle]
pub extern "C" fn MPI_Buffer_attach_c(buffer: *mut c_void, size: Count) -> c_int {
    let Ok(size) = c_int::try_from(size) else {
        return too_large(
            "MPI_Buffer_attach_c",
            crate::state::COMM_WORLD,
            "size",
            size,
        );
    };
    MPI_Buffer_attach(buffer, size)
}

/// `MPI_Buffer_detach` with an `MPI_Count` size.
#[no_mangle]
pub extern "C" fn MPI_Buffer_detach_c(buffer_addr: *mut c_void, size: *mut Count) -> c_int {
    let mut s: c_int = 0;
    let rc = MPI_Buffer_detach(buffer_addr, &mut s);
    put_count("MPI_Buffer_detach_c", crate::state::COMM_WORLD, rc, size, s)
}

/// `MPI_Comm_attach_buffer` with an `MPI_Count` size.
#[no_mangle]
pub extern "C" fn MPI_Comm_attach_buffer_c(comm: c_int, buffer: *mut c_void, size: Count) -> c_int {
    int_or_return!("MPI_Comm_attach_buffer_c", comm, size);
    MPI_Comm_attach_buffer(comm, buffer, size)
}

/// `MPI_Comm_detach_buffer` with an `MPI_Count` size.
#[no_mangle]
pub extern "C" fn MPI_Comm_detach_buffer_c(
    comm: c_int,
    buffer_addr: *mut c_void,
    size: *mut Count,
) -> c_int {
    let mut s: c_int = 0;
    let rc = MPI_Comm_detach_buffer(comm, buffer_addr, &mut s);
    put_count("MPI_Comm_detach_buffer_c", comm, rc, size, s)
}

// ---------------------------------------------------------------- one-sided

/// [`too_large`] for a window call: through `win`'s error handler.
#[cold]
fn too_large_win(name: &'static str, win: c_int, what: &str, v: i64) -> c_int {
    crate::osc::guard_win(name, win, || {
        Err(Error::new(
            C::Count,
            format!("{what} {v} is beyond INT_MAX: tmpi's {name} takes int-sized counts only"),
        ))
    })
}

/// [`by_int`] for the window calls (errors through the window's handler).
macro_rules! by_int_win {
    ($c:ident => $f:ident, $win:ident, [$($cnt:ident),+], ($($arg:ident : $ty:ty),* $(,)?)) => {
        #[doc = concat!("`", stringify!($f), "` with `MPI_Count` counts (module docs).")]
        #[no_mangle]
        pub extern "C" fn $c($($arg: $ty),*) -> c_int {
            $(
                let Ok($cnt) = c_int::try_from($cnt) else {
                    return too_large_win(stringify!($c), $win, stringify!($cnt), $cnt);
                };
            )+
            $f($($arg),*)
        }
    };
}
use crate::osc::{
    MPI_Accumulate, MPI_Get, MPI_Get_accumulate, MPI_Put, MPI_Raccumulate, MPI_Rget,
    MPI_Rget_accumulate, MPI_Rput, MPI_Win_allocate, MPI_Win_allocate_shared, MPI_Win_create,
    MPI_Win_shared_query,
};
by_int_win!(MPI_Put_c => MPI_Put, win, [origin_count, target_count], (
    origin_addr: *const c_void, origin_count: Count, origin_datatype: c_int, target_rank: c_int,
    target_disp: Aint, target_count: Count, target_datatype: c_int, win: c_int,
));
by_int_win!(MPI_Get_c => MPI_Get, win, [origin_count, target_count], (
    origin_addr: *mut c_void, origin_count: Count, origin_datatype: c_int, target_rank: c_int,
    target_disp: Aint, target_count: Count, target_datatype: c_int, win: c_int,
));
by_int_win!(MPI_Accumulate_c => MPI_Accumulate, win, [origin_count, target_count], (
    origin_addr: *const c_void, origin_count: Count, origin_datatype: c_int, target_rank: c_int,
    target_disp: Aint, target_count: Count, target_datatype: c_int, op: c_int, win: c_int,
));
by_int_win!(MPI_Get_accumulate_c => MPI_Get_accumulate, win, [origin_count, result_count, target_count], (
    origin_addr: *const c_void, origin_count: Count, origin_datatype: c_int,
    result_addr: *mut c_void, result_count: Count, result_datatype: c_int, target_rank: c_int,
    target_disp: Aint, target_count: Count, target_datatype: c_int, op: c_int, win: c_int,
));
by_int_win!(MPI_Rput_c => MPI_Rput, win, [origin_count, target_count], (
    origin_addr: *const c_void, origin_count: Count, origin_datatype: c_int, target_rank: c_int,
    target_disp: Aint, target_count: Count, target_datatype: c_int, win: c_int,
    request: *mut c_int,
));
by_int_win!(MPI_Rget_c => MPI_Rget, win, [origin_count, target_count], (
    origin_addr: *mut c_void, origin_count: Count, origin_datatype: c_int, target_rank: c_int,
    target_disp: Aint, target_count: Count, target_datatype: c_int, win: c_int,
    request: *mut c_int,
));
by_int_win!(MPI_Raccumulate_c => MPI_Raccumulate, win, [origin_count, target_count], (
    origin_addr: *const c_void, origin_count: Count, origin_datatype: c_int, target_rank: c_int,
    target_disp: Aint, target_count: Count, target_datatype: c_int, op: c_int, win: c_int,
    request: *mut c_int,
));
by_int_win!(MPI_Rget_accumulate_c => MPI_Rget_accumulate, win,
    [origin_count, result_count, target_count], (
    origin_addr: *const c_void, origin_count: Count, origin_datatype: c_int,
    result_addr: *mut c_void, result_count: Count, result_datatype: c_int, target_rank: c_int,
    target_disp: Aint, target_count: Count, target_datatype: c_int, op: c_int, win: c_int,
    request: *mut c_int,
));

/// `MPI_Win_create` with an `MPI_Aint` displacement unit.
#[no_mangle]
pub extern "C" fn MPI_Win_create_c(
    base: *mut c_void,
    size: Aint,
    disp_unit: Aint,
    info: c_int,
    comm: c_int,
    win: *mut c_int,
) -> c_int {
    let Ok(disp_unit) = c_int::try_from(disp_unit) else {
        return too_large("MPI_Win_create_c", comm, "disp_unit", disp_unit as i64);
    };
    MPI_Win_create(base, size, disp_unit, info, comm, win)
}

/// `MPI_Win_allocate` with an `MPI_Aint` displacement unit.
#[no_mangle]
pub extern "C" fn MPI_Win_allocate_c(
    size: Aint,
    disp_unit: Aint,
    info: c_int,
    comm: c_int,
    baseptr: *mut c_void,
    win: *mut c_int,
) -> c_int {
    let Ok(disp_unit) = c_int::try_from(disp_unit) else {
        return too_large("MPI_Win_allocate_c", comm, "disp_unit", disp_unit as i64);
    };
    MPI_Win_allocate(size, disp_unit, info, comm, baseptr, win)
}

// ---------------------------------------------------------------- datatype decoding

/// `MPI_Type_get_envelope` with `MPI_Count` numbers. tmpi's `_c`
/// constructors build the type of their `int` form, so every type decodes
/// as one made by an `int` constructor: no large counts.
#[no_mangle]
pub extern "C" fn MPI_Type_get_envelope_c(
    datatype: c_int,
    num_integers: *mut Count,
    num_addresses: *mut Count,
    num_large_counts: *mut Count,
    num_datatypes: *mut Count,
    combiner: *mut c_int,
) -> c_int {
    let (mut ni, mut na, mut nd) = (0, 0, 0);
    let rc = crate::types::MPI_Type_get_envelope(datatype, &mut ni, &mut na, &mut nd, combiner);
    if rc != 0 {
        return rc;
    }
    guard("MPI_Type_get_envelope_c", crate::state::COMM_WORLD, || {
        crate::ffi::put(num_integers, Count::from(ni), "num_integers")?;
        crate::ffi::put(num_addresses, Count::from(na), "num_addresses")?;
        crate::ffi::put(num_large_counts, 0, "num_large_counts")?;
        crate::ffi::put(num_datatypes, Count::from(nd), "num_datatypes")
    })
}

/// `MPI_Type_get_contents` with `MPI_Count` maxima (no large counts: see
/// [`MPI_Type_get_envelope_c`]).
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub extern "C" fn MPI_Type_get_contents_c(
    datatype: c_int,
    max_integers: Count,
    max_addresses: Count,
    _max_large_counts: Count,
    max_datatypes: Count,
    array_of_integers: *mut c_int,
    array_of_addresses: *mut Aint,
    _array_of_large_counts: *mut Count,
    array_of_datatypes: *mut c_int,
) -> c_int {
    // Maxima beyond int are as good as INT_MAX: no type has that many.
    let clamp = |v: Count| c_int::try_from(v.max(0)).unwrap_or(c_int::MAX);
    crate::types::MPI_Type_get_contents(
        datatype,
        clamp(max_integers),
        clamp(max_addresses),
        clamp(max_datatypes),
        array_of_integers,
        array_of_addresses,
        array_of_datatypes,
    )
}

/// `MPI_Win_allocate_shared` with an `MPI_Aint` displacement unit.
#[no_mangle]
pub extern "C" fn MPI_Win_allocate_shared_c(
    size: Aint,
    disp_unit: Aint,
    info: c_int,
    comm: c_int,
    baseptr: *mut c_void,
    win: *mut c_int,
) -> c_int {
    let Ok(disp_unit) = c_int::try_from(disp_unit) else {
        return too_large(
            "MPI_Win_allocate_shared_c",
            comm,
            "disp_unit",
            disp_unit as i64,
        );
    };
    MPI_Win_allocate_shared(size, disp_unit, info, comm, baseptr, win)
}

/// `MPI_Win_shared_query` with an `MPI_Aint` displacement unit.
#[no_mangle]
pub extern "C" fn MPI_Win_shared_query_c(
    win: c_int,
    rank: c_int,
    size: *mut Aint,
    disp_unit: *mut Aint,
    baseptr: *mut c_void,
) -> c_int {
    let mut du: c_int = 0;
    let rc = MPI_Win_shared_query(win, rank, size, &mut du, baseptr);
    if rc != 0 {
        return rc;
    }
    crate::osc::guard_win("MPI_Win_shared_query_c", win, || {
        // An int always fits an MPI_Aint (64-bit targets only).
        crate::ffi::put(disp_unit, du as Aint, "disp_unit")
    })
}
