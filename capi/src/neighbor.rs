//! Neighbourhood collectives (`MPI_Neighbor_*`, `MPI_Ineighbor_*`) on
//! Cartesian, graph and distributed-graph communicators: the blocks are
//! packed as the v/w collectives pack theirs ([`VLayout`]) and exchanged in
//! one round of `tmpi_coll::Comm::neighbor_exchange`, on the
//! communicator's collective tags. Blocks of `MPI_PROC_NULL` neighbours
//! (off the edge of a non-periodic grid) are neither sent nor written.

use std::ffi::{c_int, c_void};
use std::sync::Arc;

use crate::coll::{coll_req, comm_of, ty, VLayout};
use crate::datatype::Dtype;
use crate::error::{guard, Error, MpiErrorClass as C, Res};
use crate::ffi::{array, count as ccount, is_in_place};
use crate::topo::{neighborhood, Neighborhood};

/// Counts as passed, with the blocks of absent neighbours set to 0.
fn present(counts: &[c_int], has: impl Fn(usize) -> bool) -> Vec<c_int> {
    counts
        .iter()
        .enumerate()
        .map(|(i, &c)| if has(i) { c } else { 0 })
        .collect()
}

/// `n` blocks of `count` items of `t`, block `i` at `i * count` extents.
fn uniform(n: usize, count: c_int, t: &Arc<Dtype>, has: impl Fn(usize) -> bool) -> Res<VLayout> {
    let c = ccount(count, C::Count, "count")?;
    let counts = present(&vec![count; n], has);
    let types = vec![Arc::clone(t); n];
    VLayout::new(&counts, &types, |i, t| {
        isize::try_from(i * c)
            .ok()
            .and_then(|x| x.checked_mul(t.extent()))
            .ok_or_else(|| Error::new(C::Count, "block offset overflows"))
    })
}

/// The v-form: `counts[i]` items of `t` at `displs[i]` extents.
fn varied(
    n: usize,
    counts: *const c_int,
    displs: *const c_int,
    t: &Arc<Dtype>,
    has: impl Fn(usize) -> bool,
) -> Res<VLayout> {
    let cs = present(&array(counts, n, "counts")?, has);
    let ds = array(displs, n, "displs")?;
    let types = vec![Arc::clone(t); n];
    VLayout::new(&cs, &types, |i, t| {
        isize::try_from(ds[i])
            .ok()
            .and_then(|d| d.checked_mul(t.extent()))
            .ok_or_else(|| Error::new(C::Arg, "displs[i] x extent overflows"))
    })
}

/// The w-form: `counts[i]` items of `types[i]` at byte `displs[i]`.
fn typed(
    n: usize,
    counts: *const c_int,
    displs: *const isize,
    types: *const c_int,
    has: impl Fn(usize) -> bool,
) -> Res<VLayout> {
    let cs = present(&array(counts, n, "counts")?, has);
    let ds = array(displs, n, "displs")?;
    let ts = array(types, n, "types")?
        .into_iter()
        .map(ty)
        .collect::<Res<Vec<_>>>()?;
    VLayout::new(&cs, &ts, |i, _| Ok(ds[i]))
}

/// One neighbourhood exchange: `send` blocks to the out-neighbours (`one`:
/// block 0 to every one of them, allgather), `recv` blocks from the
/// in-neighbours; blocking, or a request written to `request`.
#[allow(clippy::too_many_arguments)]
fn exchange(
    comm: c_int,
    nb: &Neighborhood,
    sendbuf: *const c_void,
    send: &VLayout,
    one: bool,
    recvbuf: *mut c_void,
    recv: VLayout,
    request: Option<*mut c_int>,
) -> Res<()> {
    if is_in_place(sendbuf) || is_in_place(recvbuf) {
        return Err(Error::new(
            C::Buffer,
            "MPI_IN_PLACE is not allowed in a neighbourhood collective",
        ));
    }
    let c = comm_of(comm)?;
    let data = send.read(sendbuf)?.into_owned();
    let sends: Vec<(u32, usize, usize)> = nb
        .sends
        .iter()
        .map(|&(j, peer)| {
            let b = if one { 0 } else { j };
            (peer, send.displs[b], send.counts[b])
        })
        .collect();
    let recvs: Vec<(u32, usize, usize)> = nb
        .recvs
        .iter()
        .map(|&(i, peer)| (peer, recv.displs[i], recv.counts[i]))
        .collect();
    match request {
        Some(request) => {
            let req = c.ineighbor_exchange(data, &sends, recv.end, &recvs)?;
            coll_req(request, comm, req, recv.finish(recvbuf))
        }
        None => {
            let got = c.neighbor_exchange(data, &sends, recv.end, &recvs)?;
            let mut out = recv.out(recvbuf)?;
            let bytes = out.bytes();
            for &(_, off, len) in &recvs {
                bytes[off..off + len].copy_from_slice(&got[off..off + len]);
            }
            out.done(&recv, recvbuf);
            Ok(())
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn allgather(
    name: &'static str,
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: c_int,
    recvbuf: *mut c_void,
    recv: impl FnOnce(&Neighborhood) -> Res<VLayout>,
    comm: c_int,
    request: Option<*mut c_int>,
) -> c_int {
    guard(name, comm, || {
        let nb = neighborhood(comm)?;
        let send = uniform(1, sendcount, &ty(sendtype)?, |_| true)?;
        let recv = recv(&nb)?;
        exchange(comm, &nb, sendbuf, &send, true, recvbuf, recv, request)
    })
}

#[allow(clippy::too_many_arguments)]
fn alltoall(
    name: &'static str,
    sendbuf: *const c_void,
    send: impl FnOnce(&Neighborhood) -> Res<VLayout>,
    recvbuf: *mut c_void,
    recv: impl FnOnce(&Neighborhood) -> Res<VLayout>,
    comm: c_int,
    request: Option<*mut c_int>,
) -> c_int {
    guard(name, comm, || {
        let nb = neighborhood(comm)?;
        let send = send(&nb)?;
        let recv = recv(&nb)?;
        exchange(comm, &nb, sendbuf, &send, false, recvbuf, recv, request)
    })
}

#[no_mangle]
pub extern "C" fn MPI_Neighbor_allgather(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: c_int,
    recvbuf: *mut c_void,
    recvcount: c_int,
    recvtype: c_int,
    comm: c_int,
) -> c_int {
    let recv =
        |nb: &Neighborhood| uniform(nb.indegree, recvcount, &ty(recvtype)?, |i| nb.receives(i));
    allgather(
        "MPI_Neighbor_allgather",
        sendbuf,
        sendcount,
        sendtype,
        recvbuf,
        recv,
        comm,
        None,
    )
}

#[no_mangle]
pub extern "C" fn MPI_Ineighbor_allgather(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: c_int,
    recvbuf: *mut c_void,
    recvcount: c_int,
    recvtype: c_int,
    comm: c_int,
    request: *mut c_int,
) -> c_int {
    let recv =
        |nb: &Neighborhood| uniform(nb.indegree, recvcount, &ty(recvtype)?, |i| nb.receives(i));
    let r = Some(request);
    allgather(
        "MPI_Ineighbor_allgather",
        sendbuf,
        sendcount,
        sendtype,
        recvbuf,
        recv,
        comm,
        r,
    )
}

#[allow(clippy::too_many_arguments)]
#[no_mangle]
pub extern "C" fn MPI_Neighbor_allgatherv(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: c_int,
    recvbuf: *mut c_void,
    recvcounts: *const c_int,
    displs: *const c_int,
    recvtype: c_int,
    comm: c_int,
) -> c_int {
    let recv = |nb: &Neighborhood| {
        varied(nb.indegree, recvcounts, displs, &ty(recvtype)?, |i| {
            nb.receives(i)
        })
    };
    allgather(
        "MPI_Neighbor_allgatherv",
        sendbuf,
        sendcount,
        sendtype,
        recvbuf,
        recv,
        comm,
        None,
    )
}

#[allow(clippy::too_many_arguments)]
#[no_mangle]
pub extern "C" fn MPI_Ineighbor_allgatherv(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: c_int,
    recvbuf: *mut c_void,
    recvcounts: *const c_int,
    displs: *const c_int,
    recvtype: c_int,
    comm: c_int,
    request: *mut c_int,
) -> c_int {
    let recv = |nb: &Neighborhood| {
        varied(nb.indegree, recvcounts, displs, &ty(recvtype)?, |i| {
            nb.receives(i)
        })
    };
    let r = Some(request);
    allgather(
        "MPI_Ineighbor_allgatherv",
        sendbuf,
        sendcount,
        sendtype,
        recvbuf,
        recv,
        comm,
        r,
    )
}

#[no_mangle]
pub extern "C" fn MPI_Neighbor_alltoall(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: c_int,
    recvbuf: *mut c_void,
    recvcount: c_int,
    recvtype: c_int,
    comm: c_int,
) -> c_int {
    let send = |nb: &Neighborhood| {
        uniform(nb.outdegree, sendcount, &ty(sendtype)?, |j| {
            nb.sends_block(j)
        })
    };
    let recv =
        |nb: &Neighborhood| uniform(nb.indegree, recvcount, &ty(recvtype)?, |i| nb.receives(i));
    alltoall(
        "MPI_Neighbor_alltoall",
        sendbuf,
        send,
        recvbuf,
        recv,
        comm,
        None,
    )
}

#[no_mangle]
pub extern "C" fn MPI_Ineighbor_alltoall(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: c_int,
    recvbuf: *mut c_void,
    recvcount: c_int,
    recvtype: c_int,
    comm: c_int,
    request: *mut c_int,
) -> c_int {
    let send = |nb: &Neighborhood| {
        uniform(nb.outdegree, sendcount, &ty(sendtype)?, |j| {
            nb.sends_block(j)
        })
    };
    let recv =
        |nb: &Neighborhood| uniform(nb.indegree, recvcount, &ty(recvtype)?, |i| nb.receives(i));
    alltoall(
        "MPI_Ineighbor_alltoall",
        sendbuf,
        send,
        recvbuf,
        recv,
        comm,
        Some(request),
    )
}

#[allow(clippy::too_many_arguments)]
#[no_mangle]
pub extern "C" fn MPI_Neighbor_alltoallv(
    sendbuf: *const c_void,
    sendcounts: *const c_int,
    sdispls: *const c_int,
    sendtype: c_int,
    recvbuf: *mut c_void,
    recvcounts: *const c_int,
    rdispls: *const c_int,
    recvtype: c_int,
    comm: c_int,
) -> c_int {
    let send = |nb: &Neighborhood| {
        varied(nb.outdegree, sendcounts, sdispls, &ty(sendtype)?, |j| {
            nb.sends_block(j)
        })
    };
    let recv = |nb: &Neighborhood| {
        varied(nb.indegree, recvcounts, rdispls, &ty(recvtype)?, |i| {
            nb.receives(i)
        })
    };
    alltoall(
        "MPI_Neighbor_alltoallv",
        sendbuf,
        send,
        recvbuf,
        recv,
        comm,
        None,
    )
}

#[allow(clippy::too_many_arguments)]
#[no_mangle]
pub extern "C" fn MPI_Ineighbor_alltoallv(
    sendbuf: *const c_void,
    sendcounts: *const c_int,
    sdispls: *const c_int,
    sendtype: c_int,
    recvbuf: *mut c_void,
    recvcounts: *const c_int,
    rdispls: *const c_int,
    recvtype: c_int,
    comm: c_int,
    request: *mut c_int,
) -> c_int {
    let send = |nb: &Neighborhood| {
        varied(nb.outdegree, sendcounts, sdispls, &ty(sendtype)?, |j| {
            nb.sends_block(j)
        })
    };
    let recv = |nb: &Neighborhood| {
        varied(nb.indegree, recvcounts, rdispls, &ty(recvtype)?, |i| {
            nb.receives(i)
        })
    };
    alltoall(
        "MPI_Ineighbor_alltoallv",
        sendbuf,
        send,
        recvbuf,
        recv,
        comm,
        Some(request),
    )
}

#[allow(clippy::too_many_arguments)]
#[no_mangle]
pub extern "C" fn MPI_Neighbor_alltoallw(
    sendbuf: *const c_void,
    sendcounts: *const c_int,
    sdispls: *const isize,
    sendtypes: *const c_int,
    recvbuf: *mut c_void,
    recvcounts: *const c_int,
    rdispls: *const isize,
    recvtypes: *const c_int,
    comm: c_int,
) -> c_int {
    let send = |nb: &Neighborhood| {
        typed(nb.outdegree, sendcounts, sdispls, sendtypes, |j| {
            nb.sends_block(j)
        })
    };
    let recv = |nb: &Neighborhood| {
        typed(nb.indegree, recvcounts, rdispls, recvtypes, |i| {
            nb.receives(i)
        })
    };
    alltoall(
        "MPI_Neighbor_alltoallw",
        sendbuf,
        send,
        recvbuf,
        recv,
        comm,
        None,
    )
}

#[allow(clippy::too_many_arguments)]
#[no_mangle]
pub extern "C" fn MPI_Ineighbor_alltoallw(
    sendbuf: *const c_void,
    sendcounts: *const c_int,
    sdispls: *const isize,
    sendtypes: *const c_int,
    recvbuf: *mut c_void,
    recvcounts: *const c_int,
    rdispls: *const isize,
    recvtypes: *const c_int,
    comm: c_int,
    request: *mut c_int,
) -> c_int {
    let send = |nb: &Neighborhood| {
        typed(nb.outdegree, sendcounts, sdispls, sendtypes, |j| {
            nb.sends_block(j)
        })
    };
    let recv = |nb: &Neighborhood| {
        typed(nb.indegree, recvcounts, rdispls, recvtypes, |i| {
            nb.receives(i)
        })
    };
    alltoall(
        "MPI_Ineighbor_alltoallw",
        sendbuf,
        send,
        recvbuf,
        recv,
        comm,
        Some(request),
    )
}
