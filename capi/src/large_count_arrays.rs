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
use crate::large_count::{ints, too_large, Aint, Count};
use crate::types::{
    MPI_Type_create_darray, MPI_Type_create_hindexed, MPI_Type_create_hindexed_block,
    MPI_Type_create_indexed_block, MPI_Type_create_struct, MPI_Type_create_subarray,
    MPI_Type_indexed,
};

/// Entries per array of a collective on `comm`: the remote group's size on
/// an inter-communicator, the group's otherwise.
fn peers(comm: c_int) -> Res<usize> {
    Ok(match crate::intercoll::target(comm)? {
        crate::intercoll::Target::Inter(ic) => crate::intercoll::remote_size(&ic),
        crate::intercoll::Target::Intra(c) => c.size() as usize,
    })
}

/// Whether this process is `root` of a rooted collective on `comm`
/// (`MPI_ROOT` on an inter-communicator).
fn at_root(comm: c_int, root: c_int) -> Res<bool> {
    Ok(match crate::intercoll::target(comm)? {
        crate::intercoll::Target::Inter(_) => root == crate::intercoll::ROOT,
        crate::intercoll::Target::Intra(c) => i64::from(root) == i64::from(c.rank()),
    })
}

/// Converted arrays (`None`: NULL or not read), or the call's error code.
type Converted = Result<Vec<Option<Vec<c_int>>>, c_int>;

/// The `int` forms of `arrays` (each a pointer and whether its entries are
/// counts or `MPI_Aint` displacements, `n` entries each; `read` false: not
/// read, passed as NULL), or `name`'s error code for the first entry beyond
/// `int`.
fn convert(name: &'static str, comm: c_int, n: usize, read: bool, arrays: &[Arr]) -> Converted {
    let mut out = Vec::with_capacity(arrays.len());
    for a in arrays {
        if !read {
            out.push(None);
            continue;
        }
        let r = match *a {
            Arr::Counts(p, what) => ints(p, n, |v| v).map_err(|v| (what, v)),
            Arr::Displs(p, what) => ints(p, n, |v| v as i64).map_err(|v| (what, v)),
        };
        match r {
            Ok(v) => out.push(v),
            Err((what, v)) => return Err(too_large(name, comm, what, v)),
        }
    }
    Ok(out)
}

/// One array argument of a `_c` call.
#[derive(Clone, Copy)]
enum Arr {
    Counts(*const Count, &'static str),
    Displs(*const Aint, &'static str),
}

fn ptr(v: &Option<Vec<c_int>>) -> *const c_int {
    v.as_ref().map_or(std::ptr::null(), |v| v.as_ptr())
}

/// The number of entries, or the call's error code through `comm`'s
/// handler.
fn entries(
    name: &'static str,
    comm: c_int,
    f: impl FnOnce() -> Res<usize>,
) -> Result<usize, c_int> {
    f().map_err(|e| guard(name, comm, || Err(e)))
}

macro_rules! try_c {
    ($e:expr) => {
        match $e {
            Ok(v) => v,
            Err(rc) => return rc,
        }
    };
}

/// `MPI_Gatherv_c` and `MPI_Igatherv_c` (`request` for the latter).
#[allow(clippy::too_many_arguments)]
fn gatherv_c(
    name: &'static str,
    sendbuf: *const c_void,
    sendcount: Count,
    sendtype: c_int,
    recvbuf: *mut c_void,
    recvcounts: *const Count,
    displs: *const Aint,
    recvtype: c_int,
    root: c_int,
    comm: c_int,
    request: Option<*mut c_int>,
) -> c_int {
    let Ok(sendcount) = c_int::try_from(sendcount) else {
        return too_large(name, comm, "sendcount", sendcount);
    };
    let n = try_c!(entries(name, comm, || peers(comm)));
    let read = try_c!(entries(name, comm, || at_root(comm, root).map(usize::from))) == 1;
    let a = try_c!(convert(
        name,
        comm,
        n,
        read,
        &[
            Arr::Counts(recvcounts, "recvcounts entry"),
            Arr::Displs(displs, "displs entry")
        ],
    ));
    match request {
        None => MPI_Gatherv(
            sendbuf,
            sendcount,
            sendtype,
            recvbuf,
            ptr(&a[0]),
            ptr(&a[1]),
            recvtype,
            root,
            comm,
        ),
        Some(r) => MPI_Igatherv(
            sendbuf,
            sendcount,
            sendtype,
            recvbuf,
            ptr(&a[0]),
            ptr(&a[1]),
            recvtype,
            root,
            comm,
            r,
        ),
    }
}

/// `MPI_Gatherv` with `MPI_Count` counts and `MPI_Aint` displacements.
#[no_mangle]
pub extern "C" fn MPI_Gatherv_c(
    sendbuf: *const c_void,
    sendcount: Count,
    sendtype: c_int,
    recvbuf: *mut c_void,
    recvcounts: *const Count,
    displs: *const Aint,
    recvtype: c_int,
    root: c_int,
    comm: c_int,
) -> c_int {
    gatherv_c(
        "MPI_Gatherv_c",
        sendbuf,
        sendcount,
        sendtype,
        recvbuf,
        recvcounts,
        displs,
        recvtype,
        root,
        comm,
        None,
    )
}

/// `MPI_Igatherv` with `MPI_Count` counts and `MPI_Aint` displacements.
#[no_mangle]
pub extern "C" fn MPI_Igatherv_c(
    sendbuf: *const c_void,
    sendcount: Count,
    sendtype: c_int,
    recvbuf: *mut c_void,
    recvcounts: *const Count,
    displs: *const Aint,
    recvtype: c_int,
    root: c_int,
    comm: c_int,
    request: *mut c_int,
) -> c_int {
    gatherv_c(
        "MPI_Igatherv_c",
        sendbuf,
        sendcount,
        sendtype,
        recvbuf,
        recvcounts,
        displs,
        recvtype,
        root,
        comm,
        Some(request),
    )
}

/// `MPI_Scatterv_c` and `MPI_Iscatterv_c`.
#[allow(clippy::too_many_arguments)]
fn scatterv_c(
    name: &'static str,
    sendbuf: *const c_void,
    sendcounts: *const Count,
    displs: *const Aint,
    sendtype: c_int,
    recvbuf: *mut c_void,
    recvcount: Count,
    recvtype: c_int,
    root: c_int,
    comm: c_int,
    request: Option<*mut c_int>,
) -> c_int {
    let Ok(recvcount) = c_int::try_from(recvcount) else {
        return too_large(name, comm, "recvcount", recvcount);
    };
    let n = try_c!(entries(name, comm, || peers(comm)));
    let read = try_c!(entries(name, comm, || at_root(comm, root).map(usize::from))) == 1;
    let a = try_c!(convert(
        name,
        comm,
        n,
        read,
        &[
            Arr::Counts(sendcounts, "sendcounts entry"),
            Arr::Displs(displs, "displs entry")
        ],
    ));
    match request {
        None => MPI_Scatterv(
            sendbuf,
            ptr(&a[0]),
            ptr(&a[1]),
            sendtype,
            recvbuf,
            recvcount,
            recvtype,
            root,
            comm,
        ),
        Some(r) => MPI_Iscatterv(
            sendbuf,
            ptr(&a[0]),
            ptr(&a[1]),
            sendtype,
            recvbuf,
            recvcount,
            recvtype,
            root,
            comm,
            r,
        ),
    }
}

/// `MPI_Scatterv` with `MPI_Count` counts and `MPI_Aint` displacements.
#[no_mangle]
pub extern "C" fn MPI_Scatterv_c(
    sendbuf: *const c_void,
    sendcounts: *const Count,
    displs: *const Aint,
    sendtype: c_int,
    recvbuf: *mut c_void,
    recvcount: Count,
    recvtype: c_int,
    root: c_int,
    comm: c_int,
) -> c_int {
    scatterv_c(
        "MPI_Scatterv_c",
        sendbuf,
        sendcounts,
        displs,
        sendtype,
        recvbuf,
        recvcount,
        recvtype,
        root,
        comm,
        None,
    )
}

/// `MPI_Iscatterv` with `MPI_Count` counts and `MPI_Aint` displacements.
#[no_mangle]
pub extern "C" fn MPI_Iscatterv_c(
    sendbuf: *const c_void,
    sendcounts: *const Count,
    displs: *const Aint,
    sendtype: c_int,
    recvbuf: *mut c_void,
    recvcount: Count,
    recvtype: c_int,
    root: c_int,
    comm: c_int,
    request: *mut c_int,
) -> c_int {
    scatterv_c(
        "MPI_Iscatterv_c",
        sendbuf,
        sendcounts,
        displs,
        sendtype,
        recvbuf,
        recvcount,
        recvtype,
        root,
        comm,
        Some(request),
    )
}

/// `MPI_Allgatherv_c` and `MPI_Iallgatherv_c`.
#[allow(clippy::too_many_arguments)]
fn allgatherv_c(
    name: &'static str,
    sendbuf: *const c_void,
    sendcount: Count,
    sendtype: c_int,
    recvbuf: *mut c_void,
    recvcounts: *const Count,
    displs: *const Aint,
    recvtype: c_int,
    comm: c_int,
    request: Option<*mut c_int>,
) -> c_int {
    let Ok(sendcount) = c_int::try_from(sendcount) else {
        return too_large(name, comm, "sendcount", sendcount);
    };
    let n = try_c!(entries(name, comm, || peers(comm)));
    let a = try_c!(convert(
        name,
        comm,
        n,
        true,
        &[
            Arr::Counts(recvcounts, "recvcounts entry"),
            Arr::Displs(displs, "displs entry")
        ],
    ));
    match request {
        None => MPI_Allgatherv(
            sendbuf,
            sendcount,
            sendtype,
            recvbuf,
            ptr(&a[0]),
            ptr(&a[1]),
            recvtype,
            comm,
        ),
        Some(r) => MPI_Iallgatherv(
            sendbuf,
            sendcount,
            sendtype,
            recvbuf,
            ptr(&a[0]),
            ptr(&a[1]),
            recvtype,
            comm,
            r,
        ),
    }
}

/// `MPI_Allgatherv` with `MPI_Count` counts and `MPI_Aint` displacements.
#[no_mangle]
pub extern "C" fn MPI_Allgatherv_c(
    sendbuf: *const c_void,
    sendcount: Count,
    sendtype: c_int,
    recvbuf: *mut c_void,
    recvcounts: *const Count,
    displs: *const Aint,
    recvtype: c_int,
    comm: c_int,
) -> c_int {
    allgatherv_c(
        "MPI_Allgatherv_c",
        sendbuf,
        sendcount,
        sendtype,
        recvbuf,
        recvcounts,
        displs,
        recvtype,
        comm,
        None,
    )
}

/// `MPI_Iallgatherv` with `MPI_Count` counts and `MPI_Aint` displacements.
#[no_mangle]
pub extern "C" fn MPI_Iallgatherv_c(
    sendbuf: *const c_void,
    sendcount: Count,
    sendtype: c_int,
    recvbuf: *mut c_void,
    recvcounts: *const Count,
    displs: *const Aint,
    recvtype: c_int,
    comm: c_int,
    request: *mut c_int,
) -> c_int {
    allgatherv_c(
        "MPI_Iallgatherv_c",
        sendbuf,
        sendcount,
        sendtype,
        recvbuf,
        recvcounts,
        displs,
        recvtype,
        comm,
        Some(request),
    )
}

/// `MPI_Ialltoallv` with `MPI_Count` counts and `MPI_Aint` displacements.
#[no_mangle]
pub extern "C" fn MPI_Ialltoallv_c(
    sendbuf: *const c_void,
    sendcounts: *const Count,
    sdispls: *const Aint,
    sendtype: c_int,
    recvbuf: *mut c_void,
    recvcounts: *const Count,
    rdispls: *const Aint,
    recvtype: c_int,
    comm: c_int,
    request: *mut c_int,
) -> c_int {
    let name = "MPI_Ialltoallv_c";
    let n = try_c!(entries(name, comm, || peers(comm)));
    let a = try_c!(convert(
        name,
        comm,
        n,
        true,
        &[
            Arr::Counts(sendcounts, "sendcounts entry"),
            Arr::Displs(sdispls, "sdispls entry"),
            Arr::Counts(recvcounts, "recvcounts entry"),
            Arr::Displs(rdispls, "rdispls entry"),
        ],
    ));
    MPI_Ialltoallv(
        sendbuf,
        ptr(&a[0]),
        ptr(&a[1]),
        sendtype,
        recvbuf,
        ptr(&a[2]),
        ptr(&a[3]),
        recvtype,
        comm,
        request,
    )
}

/// `MPI_Alltoallw_c` and `MPI_Ialltoallw_c`.
#[allow(clippy::too_many_arguments)]
fn alltoallw_c(
    name: &'static str,
    sendbuf: *const c_void,
    sendcounts: *const Count,
    sdispls: *const Aint,
    sendtypes: *const c_int,
    recvbuf: *mut c_void,
    recvcounts: *const Count,
    rdispls: *const Aint,
    recvtypes: *const c_int,
    comm: c_int,
    request: Option<*mut c_int>,
) -> c_int {
    let n = try_c!(entries(name, comm, || peers(comm)));
    let a = try_c!(convert(
        name,
        comm,
        n,
        true,
        &[
            Arr::Counts(sendcounts, "sendcounts entry"),
            Arr::Displs(sdispls, "sdispls entry"),
            Arr::Counts(recvcounts, "recvcounts entry"),
            Arr::Displs(rdispls, "rdispls entry"),
        ],
    ));
    let (sc, sd, rc, rd) = (ptr(&a[0]), ptr(&a[1]), ptr(&a[2]), ptr(&a[3]));
    match request {
        None => MPI_Alltoallw(sendbuf, sc, sd, sendtypes, recvbuf, rc, rd, recvtypes, comm),
        Some(r) => MPI_Ialltoallw(
            sendbuf, sc, sd, sendtypes, recvbuf, rc, rd, recvtypes, comm, r,
        ),
    }
}

/// `MPI_Alltoallw` with `MPI_Count` counts and `MPI_Aint` displacements.
#[no_mangle]
pub extern "C" fn MPI_Alltoallw_c(
    sendbuf: *const c_void,
    sendcounts: *const Count,
    sdispls: *const Aint,
    sendtypes: *const c_int,
    recvbuf: *mut c_void,
    recvcounts: *const Count,
    rdispls: *const Aint,
    recvtypes: *const c_int,
    comm: c_int,
) -> c_int {
    alltoallw_c(
        "MPI_Alltoallw_c",
        sendbuf,
        sendcounts,
        sdispls,
        sendtypes,
        recvbuf,
        recvcounts,
        rdispls,
        recvtypes,
        comm,
        None,
    )
}

/// `MPI_Ialltoallw` with `MPI_Count` counts and `MPI_Aint` displacements.
#[no_mangle]
pub extern "C" fn MPI_Ialltoallw_c(
    sendbuf: *const c_void,
    sendcounts: *const Count,
    sdispls: *const Aint,
    sendtypes: *const c_int,
    recvbuf: *mut c_void,
    recvcounts: *const Count,
    rdispls: *const Aint,
    recvtypes: *const c_int,
    comm: c_int,
    request: *mut c_int,
) -> c_int {
    alltoallw_c(
        "MPI_Ialltoallw_c",
        sendbuf,
        sendcounts,
        sdispls,
        sendtypes,
        recvbuf,
        recvcounts,
        rdispls,
        recvtypes,
        comm,
        Some(request),
    )
}

/// `MPI_Reduce_scatter_c` and `MPI_Ireduce_scatter_c`: one count per
/// process of the local group.
#[allow(clippy::too_many_arguments)]
fn reduce_scatter_c(
    name: &'static str,
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    recvcounts: *const Count,
    datatype: c_int,
    op: c_int,
    comm: c_int,
    request: Option<*mut c_int>,
) -> c_int {
    let mut size: c_int = 0;
    let rc = crate::comm::MPI_Comm_size(comm, &mut size);
    if rc != 0 {
        return rc;
    }
    let a = try_c!(convert(
        name,
        comm,
        size as usize,
        true,
        &[Arr::Counts(recvcounts, "recvcounts entry")],
    ));
    match request {
        None => MPI_Reduce_scatter(sendbuf, recvbuf, ptr(&a[0]), datatype, op, comm),
        Some(r) => MPI_Ireduce_scatter(sendbuf, recvbuf, ptr(&a[0]), datatype, op, comm, r),
    }
}

/// `MPI_Reduce_scatter` with `MPI_Count` counts.
#[no_mangle]
pub extern "C" fn MPI_Reduce_scatter_c(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    recvcounts: *const Count,
    datatype: c_int,
    op: c_int,
    comm: c_int,
) -> c_int {
    reduce_scatter_c(
        "MPI_Reduce_scatter_c",
        sendbuf,
        recvbuf,
        recvcounts,
        datatype,
        op,
        comm,
        None,
    )
}

/// `MPI_Ireduce_scatter` with `MPI_Count` counts.
#[no_mangle]
pub extern "C" fn MPI_Ireduce_scatter_c(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    recvcounts: *const Count,
    datatype: c_int,
    op: c_int,
    comm: c_int,
    request: *mut c_int,
) -> c_int {
    reduce_scatter_c(
        "MPI_Ireduce_scatter_c",
        sendbuf,
        recvbuf,
        recvcounts,
        datatype,
        op,
        comm,
        Some(request),
    )
}

// ---------------------------------------------------------------- datatype constructors

const WORLD: c_int = crate::state::COMM_WORLD;

/// The `count` of a type constructor as `usize` entries and `int`, or the
/// call's error code.
fn type_count(name: &'static str, count: Count) -> Result<(usize, c_int), c_int> {
    match c_int::try_from(count) {
        Ok(c) if c >= 0 => Ok((c as usize, c)),
        // A negative count: the int call reports it.
        Ok(c) => Ok((0, c)),
        Err(_) => Err(too_large(name, WORLD, "count", count)),
    }
}

/// `MPI_Count` displacements (in bytes) as `MPI_Aint`s (the same width on
/// every platform tmpi builds for).
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

/// `MPI_Type_indexed` with `MPI_Count` arguments.
#[no_mangle]
pub extern "C" fn MPI_Type_indexed_c(
    count: Count,
    blocklengths: *const Count,
    displacements: *const Count,
    oldtype: c_int,
    newtype: *mut c_int,
) -> c_int {
    let name = "MPI_Type_indexed_c";
    let (n, c) = try_c!(type_count(name, count));
    let a = try_c!(convert(
        name,
        WORLD,
        n,
        true,
        &[
            Arr::Counts(blocklengths, "blocklengths entry"),
            Arr::Counts(displacements, "displacements entry"),
        ],
    ));
    MPI_Type_indexed(c, ptr(&a[0]), ptr(&a[1]), oldtype, newtype)
}

/// `MPI_Type_create_hindexed` with `MPI_Count` arguments.
#[no_mangle]
pub extern "C" fn MPI_Type_create_hindexed_c(
    count: Count,
    blocklengths: *const Count,
    displacements: *const Count,
    oldtype: c_int,
    newtype: *mut c_int,
) -> c_int {
    let name = "MPI_Type_create_hindexed_c";
    let (n, c) = try_c!(type_count(name, count));
    let a = try_c!(convert(
        name,
        WORLD,
        n,
        true,
        &[Arr::Counts(blocklengths, "blocklengths entry")]
    ));
    let d = aints(displacements, n);
    MPI_Type_create_hindexed(c, ptr(&a[0]), aptr(&d), oldtype, newtype)
}

/// `MPI_Type_create_indexed_block` with `MPI_Count` arguments.
#[no_mangle]
pub extern "C" fn MPI_Type_create_indexed_block_c(
    count: Count,
    blocklength: Count,
    displacements: *const Count,
    oldtype: c_int,
    newtype: *mut c_int,
) -> c_int {
    let name = "MPI_Type_create_indexed_block_c";
    let (n, c) = try_c!(type_count(name, count));
    let Ok(blocklength) = c_int::try_from(blocklength) else {
        return too_large(name, WORLD, "blocklength", blocklength);
    };
    let a = try_c!(convert(
        name,
        WORLD,
        n,
        true,
        &[Arr::Counts(displacements, "displacements entry")]
    ));
    MPI_Type_create_indexed_block(c, blocklength, ptr(&a[0]), oldtype, newtype)
}

/// `MPI_Type_create_hindexed_block` with `MPI_Count` arguments.
#[no_mangle]
pub extern "C" fn MPI_Type_create_hindexed_block_c(
    count: Count,
    blocklength: Count,
    displacements: *const Count,
    oldtype: c_int,
    newtype: *mut c_int,
) -> c_int {
    let name = "MPI_Type_create_hindexed_block_c";
    let (n, c) = try_c!(type_count(name, count));
    let Ok(blocklength) = c_int::try_from(blocklength) else {
        return too_large(name, WORLD, "blocklength", blocklength);
    };
    let d = aints(displacements, n);
    MPI_Type_create_hindexed_block(c, blocklength, aptr(&d), oldtype, newtype)
}

/// `MPI_Type_create_struct` with `MPI_Count` arguments.
#[no_mangle]
pub extern "C" fn MPI_Type_create_struct_c(
    count: Count,
    blocklengths: *const Count,
    displacements: *const Count,
    types: *const c_int,
    newtype: *mut c_int,
) -> c_int {
    let name = "MPI_Type_create_struct_c";
    let (n, c) = try_c!(type_count(name, count));
    let a = try_c!(convert(
        name,
        WORLD,
        n,
        true,
        &[Arr::Counts(blocklengths, "blocklengths entry")]
    ));
    let d = aints(displacements, n);
    MPI_Type_create_struct(c, ptr(&a[0]), aptr(&d), types, newtype)
}

/// `MPI_Type_create_subarray` with `MPI_Count` sizes and starts.
#[no_mangle]
pub extern "C" fn MPI_Type_create_subarray_c(
    ndims: c_int,
    sizes: *const Count,
    subsizes: *const Count,
    starts: *const Count,
    order: c_int,
    oldtype: c_int,
    newtype: *mut c_int,
) -> c_int {
    let name = "MPI_Type_create_subarray_c";
    let n = usize::try_from(ndims).unwrap_or(0);
    let a = try_c!(convert(
        name,
        WORLD,
        n,
        true,
        &[
            Arr::Counts(sizes, "sizes entry"),
            Arr::Counts(subsizes, "subsizes entry"),
            Arr::Counts(starts, "starts entry"),
        ],
    ));
    MPI_Type_create_subarray(
        ndims,
        ptr(&a[0]),
        ptr(&a[1]),
        ptr(&a[2]),
        order,
        oldtype,
        newtype,
    )
}

/// `MPI_Type_create_darray` with `MPI_Count` global sizes.
#[no_mangle]
pub extern "C" fn MPI_Type_create_darray_c(
    size: c_int,
    rank: c_int,
    ndims: c_int,
    gsizes: *const Count,
    distribs: *const c_int,
    dargs: *const c_int,
    psizes: *const c_int,
    order: c_int,
    oldtype: c_int,
    newtype: *mut c_int,
) -> c_int {
    let name = "MPI_Type_create_darray_c";
    let n = usize::try_from(ndims).unwrap_or(0);
    let a = try_c!(convert(
        name,
        WORLD,
        n,
        true,
        &[Arr::Counts(gsizes, "gsizes entry")]
    ));
    MPI_Type_create_darray(
        size,
        rank,
        ndims,
        ptr(&a[0]),
        distribs,
        dargs,
        psizes,
        order,
        oldtype,
        newtype,
    )
}
