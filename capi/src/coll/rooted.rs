//! The rooted collectives, blocking and non-blocking: bcast, gather(v),
//! scatter(v).

use std::ffi::{c_int, c_void};

use tmpi_coll::Input;

use super::{
    block_at, coll_req, direct_mut, displ_at, fast, fast_root, input, intra, not_aliased_at,
    own_block, own_or_sent, pack, packed_send, root_of, sent, ty, unpack, unpack_into, VLayout,
};
use crate::error::{MpiErrorClass as C, Res};
use crate::ffi::{count as ccount, is_in_place};
use crate::intercoll::{self, Blocks, Ic};
use crate::request::Finish;

blocking_and_nonblocking!(MPI_Bcast, MPI_Ibcast => bcast;
    (buf: *mut c_void, count: c_int, dtype: c_int, root: c_int, comm: c_int) on comm);

fn bcast(
    buf: *mut c_void,
    count: c_int,
    dtype: c_int,
    root: c_int,
    comm: c_int,
    request: Option<*mut c_int>,
) -> Res<()> {
    if request.is_none() {
        if let Some((c, _, len)) = fast(comm, dtype, count) {
            if let Some(r) = fast_root(root, c) {
                c.comm.bcast(crate::ffi::bytes_mut(buf.cast(), len)?, r)?;
                return Ok(());
            }
        }
    }
    let inter = |ic: &Ic| intercoll::bcast(ic, buf, count, dtype, root);
    let Some(c) = intra(comm, request, inter)? else {
        return Ok(());
    };
    let r = root_of(root, &c)?;
    let n = ccount(count, C::Count, "count")?;
    let t = crate::state::type_ref(dtype)?;
    if let Some(request) = request {
        let req = c.ibcast(pack(buf, n, &t), r)?;
        return coll_req(request, comm, req, unpack_into(buf, n, &t));
    }
    if let Some(b) = direct_mut(buf, n, &t)? {
        c.bcast(b, r)?;
        return Ok(());
    }
    let mut v = pack(buf, n, &t);
    c.bcast(&mut v, r)?;
    unpack(buf, n, &t, &v);
    Ok(())
}

blocking_and_nonblocking!(MPI_Gather, MPI_Igather => gather;
    (sendbuf: *const c_void, sendcount: c_int, sendtype: c_int, recvbuf: *mut c_void,
     recvcount: c_int, recvtype: c_int, root: c_int, comm: c_int) on comm);

#[allow(clippy::too_many_arguments)]
fn gather(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: c_int,
    recvbuf: *mut c_void,
    recvcount: c_int,
    recvtype: c_int,
    root: c_int,
    comm: c_int,
    request: Option<*mut c_int>,
) -> Res<()> {
    let recv = Blocks::Uniform(recvcount, recvtype);
    let inter = |ic: &Ic| intercoll::gather(ic, sendbuf, sendcount, sendtype, recvbuf, recv, root);
    let Some(c) = intra(comm, request, inter)? else {
        return Ok(());
    };
    let r = root_of(root, &c)?;
    if c.rank() != r {
        let s = packed_send(sendbuf, sendcount, sendtype)?;
        return match request {
            None => Ok(c.gather(Input::Buf(&s), None, r)?),
            Some(request) => coll_req(request, comm, c.igather(s, r)?, Finish::Nothing),
        };
    }
    let off = block_at(r, recvcount, recvtype)?;
    not_aliased_at(sendbuf, recvbuf, off, sendcount)?;
    let p = c.size() as usize;
    let rn = ccount(recvcount, C::Count, "recvcount")?;
    let rt = ty(recvtype)?;
    if let Some(request) = request {
        let send = if is_in_place(sendbuf) {
            own_block(recvbuf, rn, p, &rt, r as usize)
        } else {
            packed_send(sendbuf, sendcount, sendtype)?
        };
        let req = c.igather(send, r)?;
        return coll_req(request, comm, req, unpack_into(recvbuf, rn * p, &rt));
    }
    let mut out = pack(recvbuf, rn * p, &rt);
    let s = sent(sendbuf, sendcount, sendtype)?;
    c.gather(input(&s), Some(&mut out), r)?;
    unpack(recvbuf, rn * p, &rt, &out);
    Ok(())
}

blocking_and_nonblocking!(MPI_Gatherv, MPI_Igatherv => gatherv;
    (sendbuf: *const c_void, sendcount: c_int, sendtype: c_int, recvbuf: *mut c_void,
     recvcounts: *const c_int, displs: *const c_int, recvtype: c_int, root: c_int,
     comm: c_int) on comm);

#[allow(clippy::too_many_arguments)]
fn gatherv(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: c_int,
    recvbuf: *mut c_void,
    recvcounts: *const c_int,
    displs: *const c_int,
    recvtype: c_int,
    root: c_int,
    comm: c_int,
    request: Option<*mut c_int>,
) -> Res<()> {
    let recv = Blocks::V(recvcounts, displs, recvtype);
    let inter = |ic: &Ic| intercoll::gather(ic, sendbuf, sendcount, sendtype, recvbuf, recv, root);
    let Some(c) = intra(comm, request, inter)? else {
        return Ok(());
    };
    let r = root_of(root, &c)?;
    let is_root = c.rank() == r;
    if is_root {
        not_aliased_at(sendbuf, recvbuf, displ_at(displs, r, recvtype)?, sendcount)?;
    }
    let p = c.size() as usize;
    let Some(request) = request else {
        // The blocking form reads its input first, MPI_IN_PLACE at any rank.
        let s = sent(sendbuf, sendcount, sendtype)?;
        if !is_root {
            c.gatherv(input(&s), None, r)?;
            return Ok(());
        }
        let l = VLayout::v(recvcounts, displs, p, &ty(recvtype)?)?;
        let mut out = l.out(recvbuf)?;
        c.gatherv(input(&s), Some((out.bytes(), &l.counts, &l.displs)), r)?;
        out.done(&l, recvbuf);
        return Ok(());
    };
    if !is_root {
        let s = packed_send(sendbuf, sendcount, sendtype)?;
        let req = c.igatherv(s, None, r)?;
        return coll_req(request, comm, req, Finish::Nothing);
    }
    let l = VLayout::v(recvcounts, displs, p, &ty(recvtype)?)?;
    let s = own_or_sent(&l, recvbuf, r as usize, sendbuf, sendcount, sendtype)?;
    let req = c.igatherv(s, Some((l.end, &l.counts, &l.displs)), r)?;
    coll_req(request, comm, req, l.finish(recvbuf))
}

blocking_and_nonblocking!(MPI_Scatter, MPI_Iscatter => scatter;
    (sendbuf: *const c_void, sendcount: c_int, sendtype: c_int, recvbuf: *mut c_void,
     recvcount: c_int, recvtype: c_int, root: c_int, comm: c_int) on comm);

#[allow(clippy::too_many_arguments)]
fn scatter(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: c_int,
    recvbuf: *mut c_void,
    recvcount: c_int,
    recvtype: c_int,
    root: c_int,
    comm: c_int,
    request: Option<*mut c_int>,
) -> Res<()> {
    let send = Blocks::Uniform(sendcount, sendtype);
    let inter = |ic: &Ic| intercoll::scatter(ic, sendbuf, send, recvbuf, recvcount, recvtype, root);
    let Some(c) = intra(comm, request, inter)? else {
        return Ok(());
    };
    let r = root_of(root, &c)?;
    let is_root = c.rank() == r;
    if is_root {
        let off = block_at(r, sendcount, sendtype)?;
        not_aliased_at(recvbuf, sendbuf, off, recvcount)?;
    }
    let p = c.size() as usize;
    // At the root under MPI_IN_PLACE, recvcount and recvtype are ignored
    // (MPI-4.0 6.6).
    let in_place = is_root && is_in_place(recvbuf);
    let Some(request) = request else {
        let send = if is_root {
            let sn = ccount(sendcount, C::Count, "sendcount")?;
            Some(pack(sendbuf, sn * p, &*ty(sendtype)?))
        } else {
            None
        };
        if in_place {
            let blk = send.as_ref().map_or(0, |s| s.len() / p.max(1));
            let mut tmp = vec![0u8; blk];
            c.scatter(send.as_deref(), Some(&mut tmp), r)?;
            return Ok(());
        }
        let rn = ccount(recvcount, C::Count, "recvcount")?;
        let rt = ty(recvtype)?;
        let mut out = vec![0u8; rt.size * rn];
        c.scatter(send.as_deref(), Some(&mut out), r)?;
        unpack(recvbuf, rn, &rt, &out);
        return Ok(());
    };
    // The non-blocking form looks at the receive side before the root's
    // send side.
    let root_send = || -> Res<(Vec<u8>, usize)> {
        let st = ty(sendtype)?;
        let sn = ccount(sendcount, C::Count, "sendcount")?;
        Ok((pack(sendbuf, sn * p, &st), st.size * sn))
    };
    if in_place {
        let (send, block) = root_send()?;
        let req = c.iscatter(send, block, r)?;
        return coll_req(request, comm, req, Finish::Nothing);
    }
    let rn = ccount(recvcount, C::Count, "recvcount")?;
    let rt = ty(recvtype)?;
    let (send, block) = if is_root {
        root_send()?
    } else {
        (Vec::new(), rt.size * rn)
    };
    let req = c.iscatter(send, block, r)?;
    coll_req(request, comm, req, unpack_into(recvbuf, rn, &rt))
}

blocking_and_nonblocking!(MPI_Scatterv, MPI_Iscatterv => scatterv;
    (sendbuf: *const c_void, sendcounts: *const c_int, displs: *const c_int, sendtype: c_int,
     recvbuf: *mut c_void, recvcount: c_int, recvtype: c_int, root: c_int, comm: c_int) on comm);

#[allow(clippy::too_many_arguments)]
fn scatterv(
    sendbuf: *const c_void,
    sendcounts: *const c_int,
    displs: *const c_int,
    sendtype: c_int,
    recvbuf: *mut c_void,
    recvcount: c_int,
    recvtype: c_int,
    root: c_int,
    comm: c_int,
    request: Option<*mut c_int>,
) -> Res<()> {
    let send = Blocks::V(sendcounts, displs, sendtype);
    let inter = |ic: &Ic| intercoll::scatter(ic, sendbuf, send, recvbuf, recvcount, recvtype, root);
    let Some(c) = intra(comm, request, inter)? else {
        return Ok(());
    };
    let r = root_of(root, &c)?;
    let is_root = c.rank() == r;
    if is_root {
        let off = displ_at(displs, r, sendtype)?;
        not_aliased_at(recvbuf, sendbuf, off, recvcount)?;
    }
    let p = c.size() as usize;
    let layout = || VLayout::v(sendcounts, displs, p, &ty(sendtype)?);
    if is_root && is_in_place(recvbuf) {
        // recvcount and recvtype are ignored (MPI-4.0 6.6).
        let l = layout()?;
        let inb = l.read(sendbuf)?;
        let Some(request) = request else {
            c.scatterv(Some((&inb, &l.counts, &l.displs)), None, r)?;
            return Ok(());
        };
        let mine = l.counts[r as usize];
        let req = c.iscatterv(inb.into_owned(), Some((&l.counts, &l.displs)), mine, r)?;
        return coll_req(request, comm, req, Finish::Nothing);
    }
    let rt = ty(recvtype)?;
    let rn = ccount(recvcount, C::Count, "recvcount")?;
    let l = if is_root { Some(layout()?) } else { None };
    let inb = match &l {
        Some(l) => Some(l.read(sendbuf)?),
        None => None,
    };
    let Some(request) = request else {
        let mut out = vec![0u8; rt.size * rn];
        let send = l.as_ref().zip(inb.as_deref());
        c.scatterv(
            send.map(|(l, b)| (b, &l.counts[..], &l.displs[..])),
            Some(&mut out),
            r,
        )?;
        unpack(recvbuf, rn, &rt, &out);
        return Ok(());
    };
    let layout = l.as_ref().map(|l| (&l.counts[..], &l.displs[..]));
    let s = inb.map(|b| b.into_owned()).unwrap_or_default();
    let req = c.iscatterv(s, layout, rt.size * rn, r)?;
    coll_req(request, comm, req, unpack_into(recvbuf, rn, &rt))
}
