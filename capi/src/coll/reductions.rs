//! The reductions, blocking and non-blocking: reduce, allreduce, scan,
//! exscan, reduce_scatter(_block).

use std::ffi::{c_int, c_void};

use tmpi_coll::{CollRequest, Datatype as Elem, Input, Op};
use tmpi_comm::Comm;

use super::{
    coll_req, direct, direct_mut, fast, fast_input, fast_root, input, input_vector, intra,
    not_aliased, pack, red, reduction, root_of, ty, unpack, unpack_into,
};
use crate::error::{MpiErrorClass as C, Res};
use crate::ffi::{count as ccount, is_in_place};
use crate::intercoll::{self, Ic};
use crate::request::Finish;

blocking_and_nonblocking!(MPI_Reduce, MPI_Ireduce => reduce;
    (sendbuf: *const c_void, recvbuf: *mut c_void, count: c_int, dtype: c_int, op: c_int,
     root: c_int, comm: c_int) on comm);

#[allow(clippy::too_many_arguments)]
fn reduce(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: c_int,
    dtype: c_int,
    op: c_int,
    root: c_int,
    comm: c_int,
    request: Option<*mut c_int>,
) -> Res<()> {
    if request.is_none() {
        if let (Some((c, t, len)), Some(o)) =
            (fast(comm, dtype, count), crate::state::predefined_op(op))
        {
            if let (Some(e), Some(r)) = (t.t.reduce_elem(), fast_root(root, c)) {
                let input = fast_input(sendbuf, len)?;
                let out = if c.comm.rank() == r {
                    not_aliased(sendbuf, recvbuf, count)?;
                    Some(crate::ffi::bytes_mut(recvbuf.cast(), len)?)
                } else {
                    None
                };
                c.comm.reduce(input, out, e, &o, r)?;
                return Ok(());
            }
        }
    }
    let inter = |ic: &Ic| intercoll::reduce(ic, sendbuf, recvbuf, count, dtype, op, root);
    let Some(c) = intra(comm, request, inter)? else {
        return Ok(());
    };
    let r = root_of(root, &c)?;
    let is_root = c.rank() == r;
    // The non-blocking form checks the buffers before its other arguments,
    // the blocking form after.
    if is_root && request.is_some() {
        not_aliased(sendbuf, recvbuf, count)?;
    }
    let (n, t, e, o) = reduction(count, "count", dtype, op)?;
    if let Some(request) = request {
        let req = c.ireduce(input_vector(sendbuf, recvbuf, n, &t), e, &o, r)?;
        let fin = if is_root {
            unpack_into(recvbuf, n, &t)
        } else {
            Finish::Nothing
        };
        return coll_req(request, comm, req, fin);
    }
    if is_root {
        not_aliased(sendbuf, recvbuf, count)?;
    }
    if t.is_contig() {
        let input = if is_in_place(sendbuf) {
            Input::InPlace
        } else {
            Input::Buf(direct(sendbuf, n, &t)?.unwrap_or_default())
        };
        let out = if is_root {
            direct_mut(recvbuf, n, &t)?
        } else {
            None
        };
        c.reduce(input, out, e, &o, r)?;
        return Ok(());
    }
    let send = (!is_in_place(sendbuf)).then(|| pack(sendbuf, n, &t));
    let mut out = if is_root {
        pack(recvbuf, n, &t)
    } else {
        Vec::new()
    };
    c.reduce(input(&send), is_root.then_some(&mut out[..]), e, &o, r)?;
    if is_root {
        unpack(recvbuf, n, &t, &out);
    }
    Ok(())
}

/// A reduction whose result every rank gets: the whole one (allreduce),
/// or the prefix up to itself (scan) or up to its predecessor (exscan).
#[derive(Clone, Copy, PartialEq, Eq)]
enum ToEveryRank {
    Allreduce,
    Scan,
    Exscan,
}

impl ToEveryRank {
    fn run(self, c: &Comm, send: Input<'_>, recv: &mut [u8], e: Elem, o: &Op) -> Res<()> {
        match self {
            ToEveryRank::Allreduce => c.allreduce(send, recv, e, o)?,
            ToEveryRank::Scan => c.scan(send, recv, e, o)?,
            ToEveryRank::Exscan => c.exscan(send, recv, e, o)?,
        }
        Ok(())
    }

    fn start(self, c: &Comm, send: Vec<u8>, e: Elem, o: &Op) -> Res<CollRequest> {
        Ok(match self {
            ToEveryRank::Allreduce => c.iallreduce(send, e, o)?,
            ToEveryRank::Scan => c.iscan(send, e, o)?,
            ToEveryRank::Exscan => c.iexscan(send, e, o)?,
        })
    }
}

blocking_and_nonblocking!(MPI_Allreduce, MPI_Iallreduce => to_every_rank[ToEveryRank::Allreduce];
    (sendbuf: *const c_void, recvbuf: *mut c_void, count: c_int, dtype: c_int, op: c_int,
     comm: c_int) on comm);
blocking_and_nonblocking!(MPI_Scan, MPI_Iscan => to_every_rank[ToEveryRank::Scan];
    (sendbuf: *const c_void, recvbuf: *mut c_void, count: c_int, dtype: c_int, op: c_int,
     comm: c_int) on comm);
blocking_and_nonblocking!(MPI_Exscan, MPI_Iexscan => to_every_rank[ToEveryRank::Exscan];
    (sendbuf: *const c_void, recvbuf: *mut c_void, count: c_int, dtype: c_int, op: c_int,
     comm: c_int) on comm);

#[allow(clippy::too_many_arguments)]
fn to_every_rank(
    kind: ToEveryRank,
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: c_int,
    dtype: c_int,
    op: c_int,
    comm: c_int,
    request: Option<*mut c_int>,
) -> Res<()> {
    // The blocking form checks the buffers first, on any communicator.
    if request.is_none() {
        not_aliased(sendbuf, recvbuf, count)?;
        if let (Some((c, t, len)), Some(o)) =
            (fast(comm, dtype, count), crate::state::predefined_op(op))
        {
            if let Some(e) = t.t.reduce_elem() {
                let out = crate::ffi::bytes_mut(recvbuf.cast(), len)?;
                let input = fast_input(sendbuf, len)?;
                return kind.run(&c.comm, input, out, e, &o);
            }
        }
    }
    let inter = |ic: &Ic| match kind {
        ToEveryRank::Allreduce => intercoll::allreduce(ic, sendbuf, recvbuf, count, dtype, op),
        _ => Err(crate::intercomm::not_on_inter()),
    };
    let Some(c) = intra(comm, request, inter)? else {
        return Ok(());
    };
    if request.is_some() {
        not_aliased(sendbuf, recvbuf, count)?;
    }
    let (n, t, e, o) = reduction(count, "count", dtype, op)?;
    if let Some(request) = request {
        let req = kind.start(&c, input_vector(sendbuf, recvbuf, n, &t), e, &o)?;
        return coll_req(request, comm, req, unpack_into(recvbuf, n, &t));
    }
    if let Some(out) = direct_mut(recvbuf, n, &t)? {
        let input = if is_in_place(sendbuf) {
            Input::InPlace
        } else {
            Input::Buf(direct(sendbuf, n, &t)?.unwrap_or_default())
        };
        return kind.run(&c, input, out, e, &o);
    }
    let send = (!is_in_place(sendbuf)).then(|| pack(sendbuf, n, &t));
    let mut out = pack(recvbuf, n, &t);
    kind.run(&c, input(&send), &mut out, e, &o)?;
    unpack(recvbuf, n, &t, &out);
    Ok(())
}

blocking_and_nonblocking!(MPI_Reduce_scatter_block, MPI_Ireduce_scatter_block
    => reduce_scatter_block;
    (sendbuf: *const c_void, recvbuf: *mut c_void, recvcount: c_int, dtype: c_int, op: c_int,
     comm: c_int) on comm);

#[allow(clippy::too_many_arguments)]
fn reduce_scatter_block(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    recvcount: c_int,
    dtype: c_int,
    op: c_int,
    comm: c_int,
    request: Option<*mut c_int>,
) -> Res<()> {
    // The blocking form checks the buffers first, on any communicator.
    if request.is_none() {
        not_aliased(sendbuf, recvbuf, recvcount)?;
    }
    let inter = |ic: &Ic| {
        let counts = intercoll::block_counts(ic, recvcount)?;
        intercoll::reduce_scatter(ic, sendbuf, recvbuf, counts, dtype, op)
    };
    let Some(c) = intra(comm, request, inter)? else {
        return Ok(());
    };
    if request.is_some() {
        not_aliased(sendbuf, recvbuf, recvcount)?;
    }
    let (n, t, e, o) = reduction(recvcount, "recvcount", dtype, op)?;
    let p = c.size() as usize;
    let send = input_vector(sendbuf, recvbuf, n * p, &t);
    if let Some(request) = request {
        let req = c.ireduce_scatter_block(send, e, &o)?;
        return coll_req(request, comm, req, unpack_into(recvbuf, n, &t));
    }
    let mut out = vec![0u8; t.size * n];
    c.reduce_scatter_block(Input::Buf(&send), &mut out, e, &o)?;
    unpack(recvbuf, n, &t, &out);
    Ok(())
}

blocking_and_nonblocking!(MPI_Reduce_scatter, MPI_Ireduce_scatter => reduce_scatter;
    (sendbuf: *const c_void, recvbuf: *mut c_void, recvcounts: *const c_int, dtype: c_int,
     op: c_int, comm: c_int) on comm);

#[allow(clippy::too_many_arguments)]
fn reduce_scatter(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    recvcounts: *const c_int,
    dtype: c_int,
    op: c_int,
    comm: c_int,
    request: Option<*mut c_int>,
) -> Res<()> {
    let inter = |ic: &Ic| {
        let counts = intercoll::local_counts(ic, recvcounts)?;
        intercoll::reduce_scatter(ic, sendbuf, recvbuf, counts, dtype, op)
    };
    let Some(c) = intra(comm, request, inter)? else {
        return Ok(());
    };
    let p = c.size() as usize;
    let t = ty(dtype)?;
    let (e, o) = red(&t, op, dtype)?;
    let counts: Vec<usize> = crate::ffi::array(recvcounts, p, "recvcounts")?
        .into_iter()
        .map(|x| ccount(x, C::Count, "recvcounts[i]"))
        .collect::<Res<_>>()?;
    let total: usize = counts.iter().sum();
    not_aliased(sendbuf, recvbuf, c_int::from(total > 0))?;
    let mine = counts[c.rank() as usize];
    let send = input_vector(sendbuf, recvbuf, total, &t);
    if let Some(request) = request {
        let req = c.ireduce_scatter(send, &counts, e, &o)?;
        return coll_req(request, comm, req, unpack_into(recvbuf, mine, &t));
    }
    let mut out = vec![0u8; t.size * mine];
    c.reduce_scatter(Input::Buf(&send), &mut out, &counts, e, &o)?;
    unpack(recvbuf, mine, &t, &out);
    Ok(())
}
