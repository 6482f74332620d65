//! The large-count forms (`MPI_X_c`) of the calls that take arrays of
//! counts and displacements: the v- and w-collectives and the datatype
//! constructors. As the other `_c` forms of [`crate::large_count`] that
//! run the `int` call, each converts its `MPI_Count`/`MPI_Aint` arrays to
//! the `int` call's arrays when every entry fits, and fails with
//! `MPI_ERR_COUNT` naming the first entry that does not. Arrays MPI calls
//! significant at the root only are read at the root only (elsewhere they
//! may be anything, NULL included).

use std::ffi::{c_int, c_void};

use crate::coll::{
    MPI_Allgatherv, MPI_Alltoallw, MPI_Gatherv, MPI_Iallgatherv, MPI_Ialltoallv, MPI_Ialltoallw,
    MPI_Igatherv, MPI_Ireduce_scatter, MPI_Iscatterv, MPI_Reduce_scatter, MPI_Scatterv,
};
use crate::error::{guard, Res};
use crate::large_count::{int_or_return, ints, too_large, Aint, Count};
use crate::neighbor::{
    MPI_Ineighbor_allgatherv, MPI_Ineighbor_alltoallv, MPI_Ineighbor_alltoallw,
    MPI_Neighbor_allgatherv, MPI_Neighbor_alltoallv, MPI_Neighbor_alltoallw,
};
use crate::pcoll::{
    at_root, indegree, local, outdegree, peers, unless_in_place, MPI_Allgatherv_init,
    MPI_Alltoallv_init, MPI_Alltoallw_init, MPI_Gatherv_init, MPI_Neighbor_allgatherv_init,
    MPI_Neighbor_alltoallv_init, MPI_Neighbor_alltoallw_init, MPI_Reduce_scatter_init,
    MPI_Scatterv_init,
};
use crate::types::{
    MPI_Type_create_darray, MPI_Type_create_hindexed, MPI_Type_create_hindexed_block,
    MPI_Type_create_indexed_block, MPI_Type_create_struct, MPI_Type_create_subarray,
    MPI_Type_indexed,
};

/// One array argument of a `_c` call: `MPI_Count` counts or `MPI_Aint`
/// displacements, named for the error message.
#[derive(Clone, Copy)]
enum Arr {
    Counts(*const Count, &'static str),
    Displs(*const Aint, &'static str),
}

/// Runs `call` with the `int` forms of `arrays` (each with how many
/// entries the call reads from it: 0 where MPI makes it insignificant, so
/// that it is not touched), or returns `name`'s error code: the entry
/// count could not be found (a bad communicator), or an entry is beyond
/// `int`.
fn with_int_arrays(
    name: &'static str,
    comm: c_int,
    arrays: &[(Arr, Res<usize>)],
    call: impl FnOnce(&[*const c_int]) -> c_int,
) -> c_int {
    let mut held = Vec::with_capacity(arrays.len());
    for (a, n) in arrays {
        let n = match n {
            Ok(n) => *n,
            Err(e) => return guard(name, comm, || Err(e.clone())),
        };
        let r = match *a {
            Arr::Counts(p, what) => ints(p, n, |v| v).map_err(|v| (what, v)),
            Arr::Displs(p, what) => ints(p, n, |v| v as i64).map_err(|v| (what, v)),
        };
        match r {
            Ok(v) => held.push(v),
            Err((what, v)) => return too_large(name, comm, what, v),
        }
    }
    let ptrs: Vec<*const c_int> = held
        .iter()
        .map(|v| v.as_ref().map_or(std::ptr::null(), |v| v.as_ptr()))
        .collect();
    call(&ptrs)
}

/// `extern "C" fn $c(...)`: the `_c` form of `$f` whose array arguments
/// `$arr` (`counts` or `displs`, read for `$n` entries) and scalar counts
/// `$cnt` are converted to `int`.
macro_rules! arrays_c {
    ($c:ident => $f:ident on $comm:ident [$($cnt:ident),*] ($($arg:ident : $ty:ty),* $(,)?)
     arrays [$($arr:ident : $kind:ident($n:expr)),+]) => {
        #[doc = concat!("`", stringify!($f), "` with `MPI_Count` counts and `MPI_Aint` displacements (module docs).")]
        #[no_mangle]
        #[allow(clippy::too_many_arguments)]
        pub extern "C" fn $c($($arg: $ty),*) -> c_int {
            $(int_or_return!(stringify!($c), $comm, $cnt);)*
            with_int_arrays(
                stringify!($c),
                $comm,
                &[$((arrays_c!(@arr $kind, $arr), $n)),+],
                |p| {
                    let mut p = p.iter().copied();
                    $(let $arr = arrays_c!(@ptr $kind, p.next().unwrap_or(std::ptr::null()));)+
                    $f($($arg),*)
                },
            )
        }
    };
    (@arr counts, $a:ident) => { Arr::Counts($a, concat!(stringify!($a), " entry")) };
    (@arr displs, $a:ident) => { Arr::Displs($a, concat!(stringify!($a), " entry")) };
    (@ptr counts, $p:expr) => { $p };
    (@ptr displs, $p:expr) => { $p };
}

// Rooted v-forms: the arrays count at the root only.
arrays_c!(MPI_Gatherv_c => MPI_Gatherv on comm [sendcount] (
    sendbuf: *const c_void, sendcount: Count, sendtype: c_int, recvbuf: *mut c_void,
    recvcounts: *const Count, displs: *const Aint, recvtype: c_int, root: c_int, comm: c_int,
) arrays [recvcounts: counts(at_root(comm, root)), displs: displs(at_root(comm, root))]);
arrays_c!(MPI_Igatherv_c => MPI_Igatherv on comm [sendcount] (
    sendbuf: *const c_void, sendcount: Count, sendtype: c_int, recvbuf: *mut c_void,
    recvcounts: *const Count, displs: *const Aint, recvtype: c_int, root: c_int, comm: c_int,
    request: *mut c_int,
) arrays [recvcounts: counts(at_root(comm, root)), displs: displs(at_root(comm, root))]);
arrays_c!(MPI_Scatterv_c => MPI_Scatterv on comm [recvcount] (
    sendbuf: *const c_void, sendcounts: *const Count, displs: *const Aint, sendtype: c_int,
    recvbuf: *mut c_void, recvcount: Count, recvtype: c_int, root: c_int, comm: c_int,
) arrays [sendcounts: counts(at_root(comm, root)), displs: displs(at_root(comm, root))]);
arrays_c!(MPI_Iscatterv_c => MPI_Iscatterv on comm [recvcount] (
    sendbuf: *const c_void, sendcounts: *const Count, displs: *const Aint, sendtype: c_int,
    recvbuf: *mut c_void, recvcount: Count, recvtype: c_int, root: c_int, comm: c_int,
    request: *mut c_int,
) arrays [sendcounts: counts(at_root(comm, root)), displs: displs(at_root(comm, root))]);

// Every rank's arrays.
arrays_c!(MPI_Allgatherv_c => MPI_Allgatherv on comm [sendcount] (
    sendbuf: *const c_void, sendcount: Count, sendtype: c_int, recvbuf: *mut c_void,
    recvcounts: *const Count, displs: *const Aint, recvtype: c_int, comm: c_int,
) arrays [recvcounts: counts(peers(comm)), displs: displs(peers(comm))]);
arrays_c!(MPI_Iallgatherv_c => MPI_Iallgatherv on comm [sendcount] (
    sendbuf: *const c_void, sendcount: Count, sendtype: c_int, recvbuf: *mut c_void,
    recvcounts: *const Count, displs: *const Aint, recvtype: c_int, comm: c_int,
    request: *mut c_int,
) arrays [recvcounts: counts(peers(comm)), displs: displs(peers(comm))]);
arrays_c!(MPI_Ialltoallv_c => MPI_Ialltoallv on comm [] (
    sendbuf: *const c_void, sendcounts: *const Count, sdispls: *const Aint, sendtype: c_int,
    recvbuf: *mut c_void, recvcounts: *const Count, rdispls: *const Aint, recvtype: c_int,
    comm: c_int, request: *mut c_int,
) arrays [sendcounts: counts(unless_in_place(sendbuf, peers(comm))),
          sdispls: displs(unless_in_place(sendbuf, peers(comm))),
          recvcounts: counts(peers(comm)), rdispls: displs(peers(comm))]);
arrays_c!(MPI_Alltoallw_c => MPI_Alltoallw on comm [] (
    sendbuf: *const c_void, sendcounts: *const Count, sdispls: *const Aint,
    sendtypes: *const c_int, recvbuf: *mut c_void, recvcounts: *const Count,
    rdispls: *const Aint, recvtypes: *const c_int, comm: c_int,
) arrays [sendcounts: counts(unless_in_place(sendbuf, peers(comm))),
          sdispls: displs(unless_in_place(sendbuf, peers(comm))),
          recvcounts: counts(peers(comm)), rdispls: displs(peers(comm))]);
arrays_c!(MPI_Ialltoallw_c => MPI_Ialltoallw on comm [] (
    sendbuf: *const c_void, sendcounts: *const Count, sdispls: *const Aint,
    sendtypes: *const c_int, recvbuf: *mut c_void, recvcounts: *const Count,
    rdispls: *const Aint, recvtypes: *const c_int, comm: c_int, request: *mut c_int,
) arrays [sendcounts: counts(unless_in_place(sendbuf, peers(comm))),
          sdispls: displs(unless_in_place(sendbuf, peers(comm))),
          recvcounts: counts(peers(comm)), rdispls: displs(peers(comm))]);
arrays_c!(MPI_Reduce_scatter_c => MPI_Reduce_scatter on comm [] (
    sendbuf: *const c_void, recvbuf: *mut c_void, recvcounts: *const Count, datatype: c_int,
    op: c_int, comm: c_int,
) arrays [recvcounts: counts(local(comm))]);
arrays_c!(MPI_Ireduce_scatter_c => MPI_Ireduce_scatter on comm [] (
    sendbuf: *const c_void, recvbuf: *mut c_void, recvcounts: *const Count, datatype: c_int,
    op: c_int, comm: c_int, request: *mut c_int,
) arrays [recvcounts: counts(local(comm))]);

// Neighbourhood forms: one entry per in- or out-neighbour.
arrays_c!(MPI_Neighbor_allgatherv_c => MPI_Neighbor_allgatherv on comm [sendcount] (
    sendbuf: *const c_void, sendcount: Count, sendtype: c_int, recvbuf: *mut c_void,
    recvcounts: *const Count, displs: *const Aint, recvtype: c_int, comm: c_int,
) arrays [recvcounts: counts(indegree(comm)), displs: displs(indegree(comm))]);
arrays_c!(MPI_Ineighbor_allgatherv_c => MPI_Ineighbor_allgatherv on comm [sendcount] (
    sendbuf: *const c_void, sendcount: Count, sendtype: c_int, recvbuf: *mut c_void,
    recvcounts: *const Count, displs: *const Aint, recvtype: c_int, comm: c_int,
    request: *mut c_int,
) arrays [recvcounts: counts(indegree(comm)), displs: displs(indegree(comm))]);
arrays_c!(MPI_Neighbor_alltoallv_c => MPI_Neighbor_alltoallv on comm [] (
    sendbuf: *const c_void, sendcounts: *const Count, sdispls: *const Aint, sendtype: c_int,
    recvbuf: *mut c_void, recvcounts: *const Count, rdispls: *const Aint, recvtype: c_int,
    comm: c_int,
) arrays [sendcounts: counts(outdegree(comm)), sdispls: displs(outdegree(comm)),
          recvcounts: counts(indegree(comm)), rdispls: displs(indegree(comm))]);
arrays_c!(MPI_Ineighbor_alltoallv_c => MPI_Ineighbor_alltoallv on comm [] (
    sendbuf: *const c_void, sendcounts: *const Count, sdispls: *const Aint, sendtype: c_int,
    recvbuf: *mut c_void, recvcounts: *const Count, rdispls: *const Aint, recvtype: c_int,
    comm: c_int, request: *mut c_int,
) arrays [sendcounts: counts(outdegree(comm)), sdispls: displs(outdegree(comm)),
          recvcounts: counts(indegree(comm)), rdispls: displs(indegree(comm))]);
// The w-forms' displacements are MPI_Aint in the int call too.
arrays_c!(MPI_Neighbor_alltoallw_c => MPI_Neighbor_alltoallw on comm [] (
    sendbuf: *const c_void, sendcounts: *const Count, sdispls: *const Aint,
    sendtypes: *const c_int, recvbuf: *mut c_void, recvcounts: *const Count,
    rdispls: *const Aint, recvtypes: *const c_int, comm: c_int,
) arrays [sendcounts: counts(outdegree(comm)), recvcounts: counts(indegree(comm))]);
arrays_c!(MPI_Ineighbor_alltoallw_c => MPI_Ineighbor_alltoallw on comm [] (
    sendbuf: *const c_void, sendcounts: *const Count, sdispls: *const Aint,
    sendtypes: *const c_int, recvbuf: *mut c_void, recvcounts: *const Count,
    rdispls: *const Aint, recvtypes: *const c_int, comm: c_int, request: *mut c_int,
) arrays [sendcounts: counts(outdegree(comm)), recvcounts: counts(indegree(comm))]);

// Persistent forms: the int call copies the arrays at init.
arrays_c!(MPI_Gatherv_init_c => MPI_Gatherv_init on comm [sendcount] (
    sendbuf: *const c_void, sendcount: Count, sendtype: c_int, recvbuf: *mut c_void,
    recvcounts: *const Count, displs: *const Aint, recvtype: c_int, root: c_int, comm: c_int,
    info: c_int, request: *mut c_int,
) arrays [recvcounts: counts(at_root(comm, root)), displs: displs(at_root(comm, root))]);
arrays_c!(MPI_Scatterv_init_c => MPI_Scatterv_init on comm [recvcount] (
    sendbuf: *const c_void, sendcounts: *const Count, displs: *const Aint, sendtype: c_int,
    recvbuf: *mut c_void, recvcount: Count, recvtype: c_int, root: c_int, comm: c_int,
    info: c_int, request: *mut c_int,
) arrays [sendcounts: counts(at_root(comm, root)), displs: displs(at_root(comm, root))]);
arrays_c!(MPI_Allgatherv_init_c => MPI_Allgatherv_init on comm [sendcount] (
    sendbuf: *const c_void, sendcount: Count, sendtype: c_int, recvbuf: *mut c_void,
    recvcounts: *const Count, displs: *const Aint, recvtype: c_int, comm: c_int, info: c_int,
    request: *mut c_int,
) arrays [recvcounts: counts(peers(comm)), displs: displs(peers(comm))]);
arrays_c!(MPI_Alltoallv_init_c => MPI_Alltoallv_init on comm [] (
    sendbuf: *const c_void, sendcounts: *const Count, sdispls: *const Aint, sendtype: c_int,
    recvbuf: *mut c_void, recvcounts: *const Count, rdispls: *const Aint, recvtype: c_int,
    comm: c_int, info: c_int, request: *mut c_int,
) arrays [sendcounts: counts(unless_in_place(sendbuf, peers(comm))),
          sdispls: displs(unless_in_place(sendbuf, peers(comm))),
          recvcounts: counts(peers(comm)), rdispls: displs(peers(comm))]);
arrays_c!(MPI_Alltoallw_init_c => MPI_Alltoallw_init on comm [] (
    sendbuf: *const c_void, sendcounts: *const Count, sdispls: *const Aint,
    sendtypes: *const c_int, recvbuf: *mut c_void, recvcounts: *const Count,
    rdispls: *const Aint, recvtypes: *const c_int, comm: c_int, info: c_int,
    request: *mut c_int,
) arrays [sendcounts: counts(unless_in_place(sendbuf, peers(comm))),
          sdispls: displs(unless_in_place(sendbuf, peers(comm))),
          recvcounts: counts(peers(comm)), rdispls: displs(peers(comm))]);
arrays_c!(MPI_Reduce_scatter_init_c => MPI_Reduce_scatter_init on comm [] (
    sendbuf: *const c_void, recvbuf: *mut c_void, recvcounts: *const Count, datatype: c_int,
    op: c_int, comm: c_int, info: c_int, request: *mut c_int,
) arrays [recvcounts: counts(local(comm))]);
arrays_c!(MPI_Neighbor_allgatherv_init_c => MPI_Neighbor_allgatherv_init on comm [sendcount] (
    sendbuf: *const c_void, sendcount: Count, sendtype: c_int, recvbuf: *mut c_void,
    recvcounts: *const Count, displs: *const Aint, recvtype: c_int, comm: c_int, info: c_int,
    request: *mut c_int,
) arrays [recvcounts: counts(indegree(comm)), displs: displs(indegree(comm))]);
arrays_c!(MPI_Neighbor_alltoallv_init_c => MPI_Neighbor_alltoallv_init on comm [] (
    sendbuf: *const c_void, sendcounts: *const Count, sdispls: *const Aint, sendtype: c_int,
    recvbuf: *mut c_void, recvcounts: *const Count, rdispls: *const Aint, recvtype: c_int,
    comm: c_int, info: c_int, request: *mut c_int,
) arrays [sendcounts: counts(outdegree(comm)), sdispls: displs(outdegree(comm)),
          recvcounts: counts(indegree(comm)), rdispls: displs(indegree(comm))]);
arrays_c!(MPI_Neighbor_alltoallw_init_c => MPI_Neighbor_alltoallw_init on comm [] (
    sendbuf: *const c_void, sendcounts: *const Count, sdispls: *const Aint,
    sendtypes: *const c_int, recvbuf: *mut c_void, recvcounts: *const Count,
    rdispls: *const Aint, recvtypes: *const c_int, comm: c_int, info: c_int,
    request: *mut c_int,
) arrays [sendcounts: counts(outdegree(comm)), recvcounts: counts(indegree(comm))]);

// ---------------------------------------------------------------- datatype constructors

const WORLD: c_int = crate::state::COMM_WORLD;

/// The block count of a type constructor as entries to read (a negative
/// count reads none: the int call reports it).
fn blocks(count: c_int) -> Res<usize> {
    Ok(usize::try_from(count).unwrap_or(0))
}

/// `MPI_Count` byte displacements as `MPI_Aint`s (the same width on every
/// platform tmpi builds for); NULL stays NULL.
fn aints(p: *const Count, n: usize) -> Option<Vec<Aint>> {
    if p.is_null() {
        return None;
    }
    // SAFETY: non-null; MPI passes one entry per block (`n`).
    let s = unsafe { std::slice::from_raw_parts(p, n) };
    Some(s.iter().map(|&v| v as Aint).collect())
}

fn aptr(v: &Option<Vec<Aint>>) -> *const Aint {
    v.as_ref().map_or(std::ptr::null(), |v| v.as_ptr())
}

/// `extern "C" fn $c(...)`: a type constructor's `_c` form, as
/// [`arrays_c`] with the errors through `MPI_COMM_WORLD`'s handler.
macro_rules! type_c {
    ($c:ident => $f:ident [$($cnt:ident),*] ($($arg:ident : $ty:ty),* $(,)?)
     arrays [$($arr:ident : $n:expr),*] $(bytes [$($b:ident : $bn:expr),*])?) => {
        #[doc = concat!("`", stringify!($f), "` with `MPI_Count` arguments (module docs).")]
        #[no_mangle]
        pub extern "C" fn $c($($arg: $ty),*) -> c_int {
            $(int_or_return!(stringify!($c), WORLD, $cnt);)*
            $($(let $b = aints($b, usize::try_from($bn).unwrap_or(0));
                let $b = aptr(&$b);)*)?
            with_int_arrays(
                stringify!($c),
                WORLD,
                &[$((Arr::Counts($arr, concat!(stringify!($arr), " entry")), $n)),*],
                |p| {
                    // (unused when the constructor has no count array)
                    #[allow(unused_mut, unused_variables)]
                    let mut p = p.iter().copied();
                    $(let $arr = p.next().unwrap_or(std::ptr::null());)*
                    $f($($arg),*)
                },
            )
        }
    };
}

type_c!(MPI_Type_indexed_c => MPI_Type_indexed [count] (
    count: Count, blocklengths: *const Count, displacements: *const Count, oldtype: c_int,
    newtype: *mut c_int,
) arrays [blocklengths: blocks(count), displacements: blocks(count)]);
type_c!(MPI_Type_create_hindexed_c => MPI_Type_create_hindexed [count] (
    count: Count, blocklengths: *const Count, displacements: *const Count, oldtype: c_int,
    newtype: *mut c_int,
) arrays [blocklengths: blocks(count)] bytes [displacements: count]);
type_c!(MPI_Type_create_indexed_block_c => MPI_Type_create_indexed_block [count, blocklength] (
    count: Count, blocklength: Count, displacements: *const Count, oldtype: c_int,
    newtype: *mut c_int,
) arrays [displacements: blocks(count)]);
type_c!(MPI_Type_create_hindexed_block_c => MPI_Type_create_hindexed_block [count, blocklength] (
    count: Count, blocklength: Count, displacements: *const Count, oldtype: c_int,
    newtype: *mut c_int,
) arrays [] bytes [displacements: count]);
type_c!(MPI_Type_create_struct_c => MPI_Type_create_struct [count] (
    count: Count, blocklengths: *const Count, displacements: *const Count, types: *const c_int,
    newtype: *mut c_int,
) arrays [blocklengths: blocks(count)] bytes [displacements: count]);
type_c!(MPI_Type_create_subarray_c => MPI_Type_create_subarray [] (
    ndims: c_int, sizes: *const Count, subsizes: *const Count, starts: *const Count, order: c_int,
    oldtype: c_int, newtype: *mut c_int,
) arrays [sizes: blocks(ndims), subsizes: blocks(ndims), starts: blocks(ndims)]);
type_c!(MPI_Type_create_darray_c => MPI_Type_create_darray [] (
    size: c_int, rank: c_int, ndims: c_int, gsizes: *const Count, distribs: *const c_int,
    dargs: *const c_int, psizes: *const c_int, order: c_int, oldtype: c_int,
    newtype: *mut c_int,
) arrays [gsizes: blocks(ndims)]);
