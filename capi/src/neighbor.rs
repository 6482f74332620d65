//! Neighbourhood collectives (`MPI_Neighbor_*`, `MPI_Ineighbor_*`) on
//! Cartesian, graph and distributed-graph communicators: the blocks are
//! packed as the v/w collectives pack theirs ([`VLayout`]) and exchanged in
//! one round of `tmpi_comm::Comm::neighbor_exchange`, on the
//! communicator's collective tags. Blocks of `MPI_PROC_NULL` neighbours
//! (off the edge of a non-periodic grid) are neither sent nor written.

use std::ffi::{c_int, c_void};
use std::sync::Arc;

use tmpi_comm::Comm;

use crate::coll::{blocking_and_nonblocking, coll_req, comm_of, ty, VLayout};
use crate::datatype::Dtype;
use crate::error::{Error, MpiErrorClass as C, Res};
use crate::ffi::{array, count as ccount, is_in_place};
use crate::request::Finish;
use crate::topo::{neighborhood, Neighborhood};

/// `n` blocks of `count` items of `t`, block `i` at `i * count` extents;
/// the blocks `keep` rejects counted as empty.
pub(crate) fn uniform(
    n: usize,
    count: c_int,
    t: &Arc<Dtype>,
    keep: impl Fn(usize) -> bool,
) -> Res<VLayout> {
    let c = ccount(count, C::Count, "count")?;
    let counts: Vec<c_int> = (0..n).map(|i| if keep(i) { count } else { 0 }).collect();
    let types = vec![Arc::clone(t); n];
    VLayout::new(&counts, &types, |i, t| {
        isize::try_from(i * c)
            .ok()
            .and_then(|x| x.checked_mul(t.extent()))
            .ok_or_else(|| Error::new(C::Count, "block offset overflows"))
    })
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
    recv: &VLayout,
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
    let recvs: Vec<(u32, usize)> = nb.recvs.iter().map(|&(i, peer)| (peer, i)).collect();
    let recv = Some((recv, recvbuf));
    exchange_round(&c, comm, data, &sends, recv, &recvs, request)
}

/// One round of `neighbor_exchange` on `c` (the communicator `comm`):
/// `data[off..off + len]` to every `(peer, off, len)` of `sends`, and
/// block `b` of the layout of `recv` from every `(peer, b)` of `recvs`,
/// written into the caller's buffer through that layout (`recv` `None`:
/// nothing received). Blocking, or started as a request written to
/// `request` that writes the blocks at completion.
pub(crate) fn exchange_round(
    c: &Comm,
    comm: c_int,
    data: Vec<u8>,
    sends: &[(u32, usize, usize)],
    recv: Option<(&VLayout, *mut c_void)>,
    recvs: &[(u32, usize)],
    request: Option<*mut c_int>,
) -> Res<()> {
    let (len, blocks): (usize, Vec<(u32, usize, usize)>) = match recv {
        Some((l, _)) => (
            l.end,
            recvs
                .iter()
                .map(|&(p, b)| (p, l.displs[b], l.counts[b]))
                .collect(),
        ),
        None => (0, Vec::new()),
    };
    // An empty receive layout writes nothing, now or at completion.
    let recv = recv.filter(|(l, _)| l.end > 0);
    if let Some(request) = request {
        let req = c.ineighbor_exchange(data, sends, len, &blocks)?;
        let finish = match recv {
            Some((l, buf)) => l.clone().finish(buf),
            None => Finish::Nothing,
        };
        return coll_req(request, comm, req, finish);
    }
    let got = c.neighbor_exchange(data, sends, len, &blocks)?;
    if let Some((l, buf)) = recv {
        let mut out = l.out(buf)?;
        let bytes = out.bytes();
        for &(_, off, n) in &blocks {
            bytes[off..off + n].copy_from_slice(&got[off..off + n]);
        }
        out.done(l, buf);
    }
    Ok(())
}

/// The body of every neighbourhood collective: the layouts from the
/// topology's neighbourhood, then [`exchange`] (`one`: allgather's single
/// send block).
fn run(
    comm: c_int,
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    one: bool,
    layouts: impl FnOnce(&Neighborhood) -> Res<(VLayout, VLayout)>,
    request: Option<*mut c_int>,
) -> Res<()> {
    let nb = neighborhood(comm)?;
    let (send, recv) = layouts(&nb)?;
    exchange(comm, &nb, sendbuf, &send, one, recvbuf, &recv, request)
}

blocking_and_nonblocking!(MPI_Neighbor_allgather, MPI_Ineighbor_allgather => allgather;
    (sendbuf: *const c_void, sendcount: c_int, sendtype: c_int, recvbuf: *mut c_void,
     recvcount: c_int, recvtype: c_int, comm: c_int) on comm);

#[allow(clippy::too_many_arguments)]
fn allgather(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: c_int,
    recvbuf: *mut c_void,
    recvcount: c_int,
    recvtype: c_int,
    comm: c_int,
    request: Option<*mut c_int>,
) -> Res<()> {
    let layouts = |nb: &Neighborhood| {
        let send = uniform(1, sendcount, &ty(sendtype)?, |_| true)?;
        let recv = uniform(nb.indegree, recvcount, &ty(recvtype)?, |i| nb.receives(i))?;
        Ok((send, recv))
    };
    run(comm, sendbuf, recvbuf, true, layouts, request)
}

blocking_and_nonblocking!(MPI_Neighbor_allgatherv, MPI_Ineighbor_allgatherv => allgatherv;
    (sendbuf: *const c_void, sendcount: c_int, sendtype: c_int, recvbuf: *mut c_void,
     recvcounts: *const c_int, displs: *const c_int, recvtype: c_int, comm: c_int) on comm);

#[allow(clippy::too_many_arguments)]
fn allgatherv(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: c_int,
    recvbuf: *mut c_void,
    recvcounts: *const c_int,
    displs: *const c_int,
    recvtype: c_int,
    comm: c_int,
    request: Option<*mut c_int>,
) -> Res<()> {
    let layouts = |nb: &Neighborhood| {
        let send = uniform(1, sendcount, &ty(sendtype)?, |_| true)?;
        let t = ty(recvtype)?;
        let recv = VLayout::v_where(recvcounts, displs, nb.indegree, &t, |i| nb.receives(i))?;
        Ok((send, recv))
    };
    run(comm, sendbuf, recvbuf, true, layouts, request)
}

blocking_and_nonblocking!(MPI_Neighbor_alltoall, MPI_Ineighbor_alltoall => alltoall;
    (sendbuf: *const c_void, sendcount: c_int, sendtype: c_int, recvbuf: *mut c_void,
     recvcount: c_int, recvtype: c_int, comm: c_int) on comm);

#[allow(clippy::too_many_arguments)]
fn alltoall(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: c_int,
    recvbuf: *mut c_void,
    recvcount: c_int,
    recvtype: c_int,
    comm: c_int,
    request: Option<*mut c_int>,
) -> Res<()> {
    let layouts = |nb: &Neighborhood| {
        let send = uniform(nb.outdegree, sendcount, &ty(sendtype)?, |j| {
            nb.sends_block(j)
        })?;
        let recv = uniform(nb.indegree, recvcount, &ty(recvtype)?, |i| nb.receives(i))?;
        Ok((send, recv))
    };
    run(comm, sendbuf, recvbuf, false, layouts, request)
}

blocking_and_nonblocking!(MPI_Neighbor_alltoallv, MPI_Ineighbor_alltoallv => alltoallv;
    (sendbuf: *const c_void, sendcounts: *const c_int, sdispls: *const c_int, sendtype: c_int,
     recvbuf: *mut c_void, recvcounts: *const c_int, rdispls: *const c_int, recvtype: c_int,
     comm: c_int) on comm);

#[allow(clippy::too_many_arguments)]
fn alltoallv(
    sendbuf: *const c_void,
    sendcounts: *const c_int,
    sdispls: *const c_int,
    sendtype: c_int,
    recvbuf: *mut c_void,
    recvcounts: *const c_int,
    rdispls: *const c_int,
    recvtype: c_int,
    comm: c_int,
    request: Option<*mut c_int>,
) -> Res<()> {
    let layouts = |nb: &Neighborhood| {
        let (st, rt) = (ty(sendtype)?, ty(recvtype)?);
        let send = VLayout::v_where(sendcounts, sdispls, nb.outdegree, &st, |j| {
            nb.sends_block(j)
        })?;
        let recv = VLayout::v_where(recvcounts, rdispls, nb.indegree, &rt, |i| nb.receives(i))?;
        Ok((send, recv))
    };
    run(comm, sendbuf, recvbuf, false, layouts, request)
}

blocking_and_nonblocking!(MPI_Neighbor_alltoallw, MPI_Ineighbor_alltoallw => alltoallw;
    (sendbuf: *const c_void, sendcounts: *const c_int, sdispls: *const isize,
     sendtypes: *const c_int, recvbuf: *mut c_void, recvcounts: *const c_int,
     rdispls: *const isize, recvtypes: *const c_int, comm: c_int) on comm);

#[allow(clippy::too_many_arguments)]
fn alltoallw(
    sendbuf: *const c_void,
    sendcounts: *const c_int,
    sdispls: *const isize,
    sendtypes: *const c_int,
    recvbuf: *mut c_void,
    recvcounts: *const c_int,
    rdispls: *const isize,
    recvtypes: *const c_int,
    comm: c_int,
    request: Option<*mut c_int>,
) -> Res<()> {
    let layouts = |nb: &Neighborhood| {
        let sd = array(sdispls, nb.outdegree, "sdispls")?;
        let rd = array(rdispls, nb.indegree, "rdispls")?;
        let send = VLayout::w_where(sendcounts, &sd, sendtypes, |j| nb.sends_block(j), sendbuf)?;
        let recv = VLayout::w_where(recvcounts, &rd, recvtypes, |i| nb.receives(i), recvbuf)?;
        Ok((send, recv))
    };
    run(comm, sendbuf, recvbuf, false, layouts, request)
}
