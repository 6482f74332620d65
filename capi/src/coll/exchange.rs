//! The collectives in which every rank sends to every other, blocking and
//! non-blocking: barrier, allgather(v), alltoall(v, w).

use std::ffi::{c_int, c_void};

use tmpi_coll::{CollRequest, Input};
use tmpi_comm::Comm;

use super::{
    block_at, coll_req, direct, direct_mut, displ_at, input, intra, not_aliased, not_aliased_at,
    own_block, own_or_sent, pack, sent, ty, unpack, unpack_into, VLayout,
};
use crate::error::{guard, MpiErrorClass as C, Res};
use crate::ffi::{count as ccount, is_in_place};
use crate::intercoll::{self, Blocks, Ic};
use crate::request::Finish;

#[no_mangle]
pub extern "C" fn MPI_Barrier(comm: c_int) -> c_int {
    guard("MPI_Barrier", comm, || barrier(comm, None))
}

#[no_mangle]
pub extern "C" fn MPI_Ibarrier(comm: c_int, request: *mut c_int) -> c_int {
    guard("MPI_Ibarrier", comm, || barrier(comm, Some(request)))
}

fn barrier(comm: c_int, request: Option<*mut c_int>) -> Res<()> {
    let Some(c) = intra(comm, request, intercoll::barrier)? else {
        return Ok(());
    };
    match request {
        None => Ok(c.barrier()?),
        Some(request) => coll_req(request, comm, c.ibarrier()?, Finish::Nothing),
    }
}

/// Allgather or alltoall: `sendcount` items of `sendtype` to every rank
/// (allgather) or per rank (alltoall), `recvcount` items of `recvtype` from
/// each.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Exchange {
    Allgather,
    Alltoall,
}

impl Exchange {
    /// The blocks of `sendcount` items in a send buffer of `p` ranks.
    fn send_blocks(self, p: usize) -> usize {
        match self {
            Exchange::Allgather => 1,
            Exchange::Alltoall => p,
        }
    }

    fn run(self, c: &Comm, send: Input<'_>, recv: &mut [u8]) -> Res<()> {
        match self {
            Exchange::Allgather => c.allgather(send, recv)?,
            Exchange::Alltoall => c.alltoall(send, recv)?,
        }
        Ok(())
    }

    fn start(self, c: &Comm, send: Vec<u8>) -> Res<CollRequest> {
        Ok(match self {
            Exchange::Allgather => c.iallgather(send)?,
            Exchange::Alltoall => c.ialltoall(send)?,
        })
    }
}

blocking_and_nonblocking!(MPI_Allgather, MPI_Iallgather => exchange[Exchange::Allgather];
    (sendbuf: *const c_void, sendcount: c_int, sendtype: c_int, recvbuf: *mut c_void,
     recvcount: c_int, recvtype: c_int, comm: c_int) on comm);
blocking_and_nonblocking!(MPI_Alltoall, MPI_Ialltoall => exchange[Exchange::Alltoall];
    (sendbuf: *const c_void, sendcount: c_int, sendtype: c_int, recvbuf: *mut c_void,
     recvcount: c_int, recvtype: c_int, comm: c_int) on comm);

#[allow(clippy::too_many_arguments)]
fn exchange(
    kind: Exchange,
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: c_int,
    recvbuf: *mut c_void,
    recvcount: c_int,
    recvtype: c_int,
    comm: c_int,
    request: Option<*mut c_int>,
) -> Res<()> {
    // The blocking form checks the buffers first, on any communicator.
    if request.is_none() {
        not_aliased(sendbuf, recvbuf, sendcount)?;
    }
    let inter = |ic: &Ic| match kind {
        Exchange::Alltoall => {
            let (sl, rl) =
                intercoll::alltoall_layouts(ic, sendcount, sendtype, recvcount, recvtype)?;
            intercoll::alltoall(ic, sendbuf, &sl, recvbuf, &rl)
        }
        Exchange::Allgather => {
            let recv = Blocks::Uniform(recvcount, recvtype);
            intercoll::allgather(ic, sendbuf, sendcount, sendtype, recvbuf, recv)
        }
    };
    let Some(c) = intra(comm, request, inter)? else {
        return Ok(());
    };
    if request.is_some() {
        match kind {
            Exchange::Allgather => {
                let off = block_at(c.rank(), recvcount, recvtype)?;
                not_aliased_at(sendbuf, recvbuf, off, sendcount)?;
            }
            Exchange::Alltoall => not_aliased(sendbuf, recvbuf, sendcount)?,
        }
    }
    let p = c.size() as usize;
    let rn = ccount(recvcount, C::Count, "recvcount")?;
    let rt = crate::state::type_ref(recvtype)?;
    let send_n =
        || -> Res<usize> { Ok(ccount(sendcount, C::Count, "sendcount")? * kind.send_blocks(p)) };
    if let Some(request) = request {
        let send = match (is_in_place(sendbuf), kind) {
            (true, Exchange::Allgather) => own_block(recvbuf, rn, p, &rt, c.rank() as usize),
            (true, Exchange::Alltoall) => pack(recvbuf, rn * p, &rt),
            (false, _) => pack(sendbuf, send_n()?, &*ty(sendtype)?),
        };
        let req = kind.start(&c, send)?;
        return coll_req(request, comm, req, unpack_into(recvbuf, rn * p, &rt));
    }
    if kind == Exchange::Allgather {
        let off = (c.rank() as isize)
            .wrapping_mul(recvcount as isize)
            .wrapping_mul(rt.extent());
        not_aliased_at(sendbuf, recvbuf, off, sendcount)?;
    }
    if let Some(out) = direct_mut(recvbuf, rn * p, &rt)? {
        if is_in_place(sendbuf) {
            return kind.run(&c, Input::InPlace, out);
        }
        let sn = send_n()?;
        let st = crate::state::type_ref(sendtype)?;
        return match direct(sendbuf, sn, &st)? {
            Some(s) => kind.run(&c, Input::Buf(s), out),
            None => kind.run(&c, Input::Buf(&pack(sendbuf, sn, &st)), out),
        };
    }
    let mut out = pack(recvbuf, rn * p, &rt);
    if is_in_place(sendbuf) {
        kind.run(&c, Input::InPlace, &mut out)?;
    } else {
        let s = pack(sendbuf, send_n()?, &*ty(sendtype)?);
        kind.run(&c, Input::Buf(&s), &mut out)?;
    }
    unpack(recvbuf, rn * p, &rt, &out);
    Ok(())
}

blocking_and_nonblocking!(MPI_Allgatherv, MPI_Iallgatherv => allgatherv;
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
    let recv = Blocks::V(recvcounts, displs, recvtype);
    let inter = |ic: &Ic| intercoll::allgather(ic, sendbuf, sendcount, sendtype, recvbuf, recv);
    let Some(c) = intra(comm, request, inter)? else {
        return Ok(());
    };
    let off = displ_at(displs, c.rank(), recvtype)?;
    not_aliased_at(sendbuf, recvbuf, off, sendcount)?;
    let p = c.size() as usize;
    let l = VLayout::v(recvcounts, displs, p, &ty(recvtype)?)?;
    if let Some(request) = request {
        let s = own_or_sent(&l, recvbuf, c.rank() as usize, sendbuf, sendcount, sendtype)?;
        let req = c.iallgatherv(s, l.end, &l.counts, &l.displs)?;
        return coll_req(request, comm, req, l.finish(recvbuf));
    }
    let s = sent(sendbuf, sendcount, sendtype)?;
    let mut out = l.out(recvbuf)?;
    c.allgatherv(input(&s), out.bytes(), &l.counts, &l.displs)?;
    out.done(&l, recvbuf);
    Ok(())
}

blocking_and_nonblocking!(MPI_Alltoallv, MPI_Ialltoallv => alltoallv;
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
    let send = |p| VLayout::v(sendcounts, sdispls, p, &ty(sendtype)?);
    let recv = |p| VLayout::v(recvcounts, rdispls, p, &ty(recvtype)?);
    alltoall_vw(false, sendbuf, send, recvbuf, recv, comm, request)
}

blocking_and_nonblocking!(MPI_Alltoallw, MPI_Ialltoallw => alltoallw;
    (sendbuf: *const c_void, sendcounts: *const c_int, sdispls: *const c_int,
     sendtypes: *const c_int, recvbuf: *mut c_void, recvcounts: *const c_int,
     rdispls: *const c_int, recvtypes: *const c_int, comm: c_int) on comm);

/// The displacements are bytes; the types any, per peer.
#[allow(clippy::too_many_arguments)]
fn alltoallw(
    sendbuf: *const c_void,
    sendcounts: *const c_int,
    sdispls: *const c_int,
    sendtypes: *const c_int,
    recvbuf: *mut c_void,
    recvcounts: *const c_int,
    rdispls: *const c_int,
    recvtypes: *const c_int,
    comm: c_int,
    request: Option<*mut c_int>,
) -> Res<()> {
    let send = |p| VLayout::w(sendcounts, sdispls, sendtypes, p, sendbuf);
    let recv = |p| VLayout::w(recvcounts, rdispls, recvtypes, p, recvbuf);
    alltoall_vw(true, sendbuf, send, recvbuf, recv, comm, request)
}

/// 1 when an all-to-all moves data (the aliasing check's count): two
/// empty buffers may well share an address (mpi4py passes one for every
/// empty buffer).
fn moves(send: &Option<VLayout>, recv: &VLayout) -> c_int {
    c_int::from(send.as_ref().is_some_and(|s| s.end > 0) && recv.end > 0)
}

/// Alltoallv (`w` false) or alltoallw, their layouts given per number of
/// peers: the remote group's on an inter-communicator, `MPI_IN_PLACE`'s
/// none (the receive layout on both sides).
fn alltoall_vw(
    w: bool,
    sendbuf: *const c_void,
    send_layout: impl Fn(usize) -> Res<VLayout>,
    recvbuf: *mut c_void,
    recv_layout: impl Fn(usize) -> Res<VLayout>,
    comm: c_int,
    request: Option<*mut c_int>,
) -> Res<()> {
    let inter = |ic: &Ic| {
        let p = intercoll::remote_size(ic);
        let (sl, rl) = (send_layout(p)?, recv_layout(p)?);
        intercoll::alltoall(ic, sendbuf, &sl, recvbuf, &rl)
    };
    let Some(c) = intra(comm, request, inter)? else {
        return Ok(());
    };
    let p = c.size() as usize;
    let recv = recv_layout(p)?;
    let send = if is_in_place(sendbuf) {
        None
    } else {
        Some(send_layout(p)?)
    };
    not_aliased(sendbuf, recvbuf, moves(&send, &recv))?;
    let (rc, rd) = (&recv.counts[..], &recv.displs[..]);
    if let Some(request) = request {
        let (s, sc, sd) = match &send {
            None => (recv.read(recvbuf)?.into_owned(), rc, rd),
            Some(l) => (l.read(sendbuf)?.into_owned(), &l.counts[..], &l.displs[..]),
        };
        let r = (recv.end, rc, rd);
        let req = if w {
            c.ialltoallw(s, sc, sd, r)?
        } else {
            c.ialltoallv(s, sc, sd, r)?
        };
        return coll_req(request, comm, req, recv.finish(recvbuf));
    }
    let mut out = recv.out(recvbuf)?;
    let inb = match &send {
        Some(sl) => Some(sl.read(sendbuf)?),
        None => None,
    };
    let (input, sc, sd) = match (&inb, &send) {
        (Some(b), Some(sl)) => (Input::Buf(b), &sl.counts[..], &sl.displs[..]),
        _ => (Input::InPlace, rc, rd),
    };
    if w {
        c.alltoallw(input, sc, sd, out.bytes(), rc, rd)?;
    } else {
        c.alltoallv(input, sc, sd, out.bytes(), rc, rd)?;
    }
    out.done(&recv, recvbuf);
    Ok(())
}
