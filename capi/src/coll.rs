//! Collectives over tmpi-coll. Buffers of non-contiguous types are packed
//! before and unpacked after; reductions need a type made of one
//! predefined element type.

use std::ffi::{c_int, c_void};
use std::sync::Arc;

use tmpi_coll::{Comm, Datatype as Elem, Input, Op};

use crate::datatype::Dtype;
use crate::error::{guard, Error, MpiErrorClass as C, Res};
use crate::ffi::{count as ccount, gather_blocks, is_in_place, put, scatter_blocks};
use crate::request::{Finish, Req};
use crate::state::{tables, FastComm, FastType};

/// The communicator of a collective call: an inter-communicator is an
/// error (collectives on them are not implemented).
pub(crate) fn comm_of(h: c_int) -> Res<Comm> {
    let t = tables();
    let e = t.comm(h)?;
    if e.inter.is_some() {
        return Err(crate::intercomm::not_on_inter());
    }
    Ok(e.comm.clone())
}

pub(crate) fn ty(h: c_int) -> Res<Arc<Dtype>> {
    tables().comm_type(h)
}

pub(crate) fn pack(buf: *const c_void, n: usize, t: &Dtype) -> Vec<u8> {
    let mut v = Vec::with_capacity(t.size * n);
    gather_blocks(buf.cast(), n, t.extent(), &t.blocks, &mut v);
    v
}

pub(crate) fn unpack(buf: *mut c_void, n: usize, t: &Dtype, data: &[u8]) {
    scatter_blocks(buf.cast(), n, t.extent(), &t.blocks, data);
}

/// The user's `n` items of a contiguous `t` as bytes, read in place
/// (`None` for other types: pack them).
fn direct<'a>(buf: *const c_void, n: usize, t: &Dtype) -> Res<Option<&'a [u8]>> {
    if !t.is_contig() {
        return Ok(None);
    }
    let len = n
        .checked_mul(t.size)
        .ok_or_else(|| Error::new(C::Count, "count x datatype size overflows"))?;
    crate::ffi::bytes(buf.cast(), len).map(Some)
}

/// As [`direct`], writable: collectives write contiguous receive buffers
/// in place instead of through a packed copy.
fn direct_mut<'a>(buf: *mut c_void, n: usize, t: &Dtype) -> Res<Option<&'a mut [u8]>> {
    if !t.is_contig() {
        return Ok(None);
    }
    let len = n
        .checked_mul(t.size)
        .ok_or_else(|| Error::new(C::Count, "count x datatype size overflows"))?;
    crate::ffi::bytes_mut(buf.cast(), len).map(Some)
}

/// [`crate::state::fast_call`] for the collectives: the communicator, the
/// datatype and the byte length. Saves ~90 of the ~250 instructions the C
/// layer of an 8-byte MPI_Bcast cost (callgrind).
#[inline]
fn fast(
    comm: c_int,
    dtype: c_int,
    count: c_int,
) -> Option<(&'static FastComm, &'static FastType, usize)> {
    crate::state::fast_call(comm, dtype, count).map(|(_, c, t, len)| (c, t, len))
}

/// A reduction's input on the fast path: `MPI_IN_PLACE`, or the user's
/// `len` contiguous bytes at `sendbuf`.
fn fast_input<'a>(sendbuf: *const c_void, len: usize) -> Res<Input<'a>> {
    if is_in_place(sendbuf) {
        return Ok(Input::InPlace);
    }
    crate::ffi::bytes(sendbuf.cast(), len).map(Input::Buf)
}

/// `root` when it is a rank of `c` (`None`: the general path reports it).
#[inline]
fn fast_root(root: c_int, c: &FastComm) -> Option<u32> {
    (0..c.size).contains(&root).then_some(root as u32)
}

fn root_of(root: c_int, c: &Comm) -> Res<u32> {
    u32::try_from(root)
        .ok()
        .filter(|&r| r < c.size())
        .ok_or_else(|| Error::new(C::Root, format!("root {root} is not in 0..{}", c.size())))
}

/// The element type and op of a reduction over `t` (handle `dtype`): a
/// predefined op needs a type made of one predefined element type; a user
/// op takes any type, bound to this call ([`crate::user_op::bind`]).
pub(crate) fn red(t: &Dtype, op: c_int, dtype: c_int) -> Res<(Elem, Op)> {
    if let Some(o) = crate::state::predefined_op(op) {
        if t.reduce_elem().is_none() {
            if let Some(bound) = crate::wide_ops::bind(&o, t) {
                return bound;
            }
        }
        let e = t.reduce_elem().ok_or_else(|| {
            Error::new(
                C::Type,
                format!(
                    "{} needs a datatype made of one predefined type ({} is not)",
                    o.name(),
                    t.name
                ),
            )
        })?;
        return Ok((e, o));
    }
    let (f, commute) = tables().user_op(op)?;
    crate::user_op::bind(f, commute, dtype, t)
}

#[no_mangle]
pub extern "C" fn MPI_Barrier(comm: c_int) -> c_int {
    guard("MPI_Barrier", comm, || {
        match crate::intercoll::target(comm)? {
            crate::intercoll::Target::Inter(ic) => crate::intercoll::barrier(&ic),
            crate::intercoll::Target::Intra(c) => Ok(c.barrier()?),
        }
    })
}

#[no_mangle]
pub extern "C" fn MPI_Bcast(
    buf: *mut c_void,
    count: c_int,
    dtype: c_int,
    root: c_int,
    comm: c_int,
) -> c_int {
    guard("MPI_Bcast", comm, || {
        if let Some((c, _, len)) = fast(comm, dtype, count) {
            if let Some(r) = fast_root(root, c) {
                c.comm.bcast(crate::ffi::bytes_mut(buf.cast(), len)?, r)?;
                return Ok(());
            }
        }
        let c = match crate::intercoll::target(comm)? {
            crate::intercoll::Target::Inter(ic) => {
                return crate::intercoll::bcast(&ic, buf, count, dtype, root);
            }
            crate::intercoll::Target::Intra(c) => c,
        };
        let r = root_of(root, &c)?;
        let n = ccount(count, C::Count, "count")?;
        let t = crate::state::type_ref(dtype)?;
        if let Some(b) = direct_mut(buf, n, &t)? {
            c.bcast(b, r)?;
            return Ok(());
        }
        let mut v = pack(buf, n, &t);
        c.bcast(&mut v, r)?;
        unpack(buf, n, &t, &v);
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn MPI_Reduce(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: c_int,
    dtype: c_int,
    op: c_int,
    root: c_int,
    comm: c_int,
) -> c_int {
    guard("MPI_Reduce", comm, || {
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
        let c = match crate::intercoll::target(comm)? {
            crate::intercoll::Target::Inter(ic) => {
                return crate::intercoll::reduce(&ic, sendbuf, recvbuf, count, dtype, op, root);
            }
            crate::intercoll::Target::Intra(c) => c,
        };
        let r = root_of(root, &c)?;
        let n = ccount(count, C::Count, "count")?;
        let t = crate::state::type_ref(dtype)?;
        let (e, o) = red(&t, op, dtype)?;
        let is_root = c.rank() == r;
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
        let send = if is_in_place(sendbuf) {
            None
        } else {
            Some(pack(sendbuf, n, &t))
        };
        let mut out = if is_root {
            pack(recvbuf, n, &t)
        } else {
            Vec::new()
        };
        let input = match &send {
            Some(s) => Input::Buf(s),
            None => Input::InPlace,
        };
        c.reduce(input, if is_root { Some(&mut out) } else { None }, e, &o, r)?;
        if is_root {
            unpack(recvbuf, n, &t, &out);
        }
        Ok(())
    })
}

/// `MPI_ERR_BUFFER` when a collective's send and receive buffers are the
/// same address for a non-empty call: MPI forbids aliasing them
/// (`MPI_IN_PLACE` is the way), and a collective that read its input while
/// writing its output there would give garbage. A local check, as MPICH's
/// (its errors/coll/noalias): the other ranks do not learn of it.
/// NULL is `MPI_BOTTOM` (or an empty buffer): two of them say nothing of
/// where the data lies (absolute-address datatypes place it).
pub(crate) fn not_aliased(send: *const c_void, recv: *const c_void, count: c_int) -> Res<()> {
    if count > 0 && std::ptr::eq(send, recv) && !is_in_place(send) && !send.is_null() {
        return Err(Error::new(
            C::Buffer,
            "the send and receive buffers are the same (MPI_IN_PLACE is the way to reuse one)",
        ));
    }
    Ok(())
}

/// [`not_aliased`], and the same against `recv + off` bytes: the input is
/// the very place where this rank's own block of the output goes (MPICH's
/// errors/coll/noalias2: an allgather from `&buf[rank]` into `buf`).
/// Every rank whose call names such buffers finds it, so no rank is left
/// waiting in a collective the others returned from.
pub(crate) fn not_aliased_at(
    send: *const c_void,
    recv: *const c_void,
    off: isize,
    count: c_int,
) -> Res<()> {
    not_aliased(send, recv, count)?;
    if is_in_place(recv) {
        return Ok(());
    }
    not_aliased(send, recv.cast::<u8>().wrapping_offset(off).cast(), count)
}

/// Byte offset of block `i` of `count` items of datatype `dtype`.
fn block_at(i: u32, count: c_int, dtype: c_int) -> Res<isize> {
    Ok((i as isize)
        .wrapping_mul(count as isize)
        .wrapping_mul(ty(dtype)?.extent()))
}

/// Byte offset of displacement `displs[i]` (in extents of `dtype`).
fn displ_at(displs: *const c_int, i: u32, dtype: c_int) -> Res<isize> {
    let d = crate::ffi::array(displs, i as usize + 1, "displs")?[i as usize];
    Ok((d as isize).wrapping_mul(ty(dtype)?.extent()))
}

macro_rules! allred {
    ($name:ident, $m:ident) => {
        #[no_mangle]
        pub extern "C" fn $name(
            sendbuf: *const c_void,
            recvbuf: *mut c_void,
            count: c_int,
            dtype: c_int,
            op: c_int,
            comm: c_int,
        ) -> c_int {
            guard(stringify!($name), comm, || {
                not_aliased(sendbuf, recvbuf, count)?;
                if let (Some((c, t, len)), Some(o)) =
                    (fast(comm, dtype, count), crate::state::predefined_op(op))
                {
                    if let Some(e) = t.t.reduce_elem() {
                        let out = crate::ffi::bytes_mut(recvbuf.cast(), len)?;
                        let input = fast_input(sendbuf, len)?;
                        c.comm.$m(input, out, e, &o)?;
                        return Ok(());
                    }
                }
                let c = match crate::intercoll::target(comm)? {
                    crate::intercoll::Target::Inter(ic) if stringify!($m) == "allreduce" => {
                        return crate::intercoll::allreduce(
                            &ic, sendbuf, recvbuf, count, dtype, op,
                        );
                    }
                    crate::intercoll::Target::Inter(_) => {
                        return Err(crate::intercomm::not_on_inter())
                    }
                    crate::intercoll::Target::Intra(c) => c,
                };
                let n = ccount(count, C::Count, "count")?;
                let t = crate::state::type_ref(dtype)?;
                let (e, o) = red(&t, op, dtype)?;
                if let Some(out) = direct_mut(recvbuf, n, &t)? {
                    let input = if is_in_place(sendbuf) {
                        Input::InPlace
                    } else {
                        Input::Buf(direct(sendbuf, n, &t)?.unwrap_or_default())
                    };
                    c.$m(input, out, e, &o)?;
                    return Ok(());
                }
                let send = if is_in_place(sendbuf) {
                    None
                } else {
                    Some(pack(sendbuf, n, &t))
                };
                let mut out = pack(recvbuf, n, &t);
                let input = match &send {
                    Some(s) => Input::Buf(s),
                    None => Input::InPlace,
                };
                c.$m(input, &mut out, e, &o)?;
                unpack(recvbuf, n, &t, &out);
                Ok(())
            })
        }
    };
}
allred!(MPI_Allreduce, allreduce);
allred!(MPI_Scan, scan);
allred!(MPI_Exscan, exscan);

#[no_mangle]
pub extern "C" fn MPI_Reduce_scatter_block(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    recvcount: c_int,
    dtype: c_int,
    op: c_int,
    comm: c_int,
) -> c_int {
    guard("MPI_Reduce_scatter_block", comm, || {
        not_aliased(sendbuf, recvbuf, recvcount)?;
        let c = match crate::intercoll::target(comm)? {
            crate::intercoll::Target::Inter(ic) => {
                let counts = crate::intercoll::block_counts(&ic, recvcount)?;
                return crate::intercoll::reduce_scatter(&ic, sendbuf, recvbuf, &counts, dtype, op);
            }
            crate::intercoll::Target::Intra(c) => c,
        };
        let n = ccount(recvcount, C::Count, "recvcount")?;
        let t = ty(dtype)?;
        let (e, o) = red(&t, op, dtype)?;
        let p = c.size() as usize;
        let send = if is_in_place(sendbuf) {
            pack(recvbuf, n * p, &t)
        } else {
            pack(sendbuf, n * p, &t)
        };
        let mut out = vec![0u8; t.size * n];
        c.reduce_scatter_block(Input::Buf(&send), &mut out, e, &o)?;
        unpack(recvbuf, n, &t, &out);
        Ok(())
    })
}

#[allow(clippy::too_many_arguments)]
#[no_mangle]
pub extern "C" fn MPI_Gather(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: c_int,
    recvbuf: *mut c_void,
    recvcount: c_int,
    recvtype: c_int,
    root: c_int,
    comm: c_int,
) -> c_int {
    guard("MPI_Gather", comm, || {
        let c = match crate::intercoll::target(comm)? {
            crate::intercoll::Target::Inter(ic) => {
                let recv = crate::intercoll::Blocks::Uniform(recvcount, recvtype);
                return crate::intercoll::gather(
                    &ic, sendbuf, sendcount, sendtype, recvbuf, recv, root,
                );
            }
            crate::intercoll::Target::Intra(c) => c,
        };
        let r = root_of(root, &c)?;
        if c.rank() == r {
            not_aliased_at(
                sendbuf,
                recvbuf,
                block_at(r, recvcount, recvtype)?,
                sendcount,
            )?;
        }
        let is_root = c.rank() == r;
        let p = c.size() as usize;
        if is_root {
            not_aliased(sendbuf, recvbuf, sendcount)?;
            let rn = ccount(recvcount, C::Count, "recvcount")?;
            let rt = ty(recvtype)?;
            let mut out = pack(recvbuf, rn * p, &rt);
            if is_in_place(sendbuf) {
                c.gather(Input::InPlace, Some(&mut out), r)?;
            } else {
                let s = pack(
                    sendbuf,
                    ccount(sendcount, C::Count, "sendcount")?,
                    &*ty(sendtype)?,
                );
                c.gather(Input::Buf(&s), Some(&mut out), r)?;
            }
            unpack(recvbuf, rn * p, &rt, &out);
        } else {
            let s = pack(
                sendbuf,
                ccount(sendcount, C::Count, "sendcount")?,
                &*ty(sendtype)?,
            );
            c.gather(Input::Buf(&s), None, r)?;
        }
        Ok(())
    })
}

#[allow(clippy::too_many_arguments)]
#[no_mangle]
pub extern "C" fn MPI_Scatter(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: c_int,
    recvbuf: *mut c_void,
    recvcount: c_int,
    recvtype: c_int,
    root: c_int,
    comm: c_int,
) -> c_int {
    guard("MPI_Scatter", comm, || {
        let c = match crate::intercoll::target(comm)? {
            crate::intercoll::Target::Inter(ic) => {
                let send = crate::intercoll::Blocks::Uniform(sendcount, sendtype);
                return crate::intercoll::scatter(
                    &ic, sendbuf, send, recvbuf, recvcount, recvtype, root,
                );
            }
            crate::intercoll::Target::Intra(c) => c,
        };
        let r = root_of(root, &c)?;
        if c.rank() == r {
            not_aliased_at(
                recvbuf,
                sendbuf,
                block_at(r, sendcount, sendtype)?,
                recvcount,
            )?;
        }
        let is_root = c.rank() == r;
        let p = c.size() as usize;
        if is_root {
            not_aliased(sendbuf, recvbuf, recvcount)?;
        }
        let send = if is_root {
            Some(pack(
                sendbuf,
                ccount(sendcount, C::Count, "sendcount")? * p,
                &*ty(sendtype)?,
            ))
        } else {
            None
        };
        if is_root && is_in_place(recvbuf) {
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
        Ok(())
    })
}

macro_rules! allx {
    ($name:ident, $m:ident) => {
        #[allow(clippy::too_many_arguments)]
        #[no_mangle]
        pub extern "C" fn $name(
            sendbuf: *const c_void,
            sendcount: c_int,
            sendtype: c_int,
            recvbuf: *mut c_void,
            recvcount: c_int,
            recvtype: c_int,
            comm: c_int,
        ) -> c_int {
            guard(stringify!($name), comm, || {
                not_aliased(sendbuf, recvbuf, sendcount)?;
                let c = match crate::intercoll::target(comm)? {
                    crate::intercoll::Target::Inter(ic) => {
                        if stringify!($m) == "alltoall" {
                            let (sl, rl) = crate::intercoll::alltoall_layouts(
                                &ic, sendcount, sendtype, recvcount, recvtype,
                            )?;
                            return crate::intercoll::alltoall(&ic, sendbuf, &sl, recvbuf, &rl);
                        }
                        let recv = crate::intercoll::Blocks::Uniform(recvcount, recvtype);
                        return crate::intercoll::allgather(
                            &ic, sendbuf, sendcount, sendtype, recvbuf, recv,
                        );
                    }
                    crate::intercoll::Target::Intra(c) => c,
                };
                let p = c.size() as usize;
                let rn = ccount(recvcount, C::Count, "recvcount")?;
                let rt = crate::state::type_ref(recvtype)?;
                if stringify!($m) == "allgather" {
                    let off = (c.rank() as isize)
                        .wrapping_mul(recvcount as isize)
                        .wrapping_mul(rt.extent());
                    not_aliased_at(sendbuf, recvbuf, off, sendcount)?;
                }
                if let Some(out) = direct_mut(recvbuf, rn * p, &rt)? {
                    if is_in_place(sendbuf) {
                        c.$m(Input::InPlace, out)?;
                        return Ok(());
                    }
                    let mult = if stringify!($m) == "alltoall" { p } else { 1 };
                    let sn = ccount(sendcount, C::Count, "sendcount")? * mult;
                    let st = crate::state::type_ref(sendtype)?;
                    if let Some(s) = direct(sendbuf, sn, &st)? {
                        c.$m(Input::Buf(s), out)?;
                    } else {
                        c.$m(Input::Buf(&pack(sendbuf, sn, &st)), out)?;
                    }
                    return Ok(());
                }
                let mut out = pack(recvbuf, rn * p, &rt);
                if is_in_place(sendbuf) {
                    c.$m(Input::InPlace, &mut out)?;
                } else {
                    let mult = if stringify!($m) == "alltoall" { p } else { 1 };
                    let s = pack(
                        sendbuf,
                        ccount(sendcount, C::Count, "sendcount")? * mult,
                        &*ty(sendtype)?,
                    );
                    c.$m(Input::Buf(&s), &mut out)?;
                }
                unpack(recvbuf, rn * p, &rt, &out);
                Ok(())
            })
        }
    };
}
allx!(MPI_Allgather, allgather);
allx!(MPI_Alltoall, alltoall);

/// The blocks of a v/w collective's buffer as tmpi-coll sees them: byte
/// counts and displacements into a buffer of `end` bytes. That buffer is
/// the caller's own when every block's type is contiguous; else a staged
/// copy with the blocks packed back to back (`staged`: per block its byte
/// offset in the caller's buffer, its items and their type), read from and
/// written back to the caller's buffer by the type maps, so bytes between
/// and inside the blocks that the types do not name stay untouched.
#[derive(Debug, Clone)]
pub(crate) struct VLayout {
    pub(crate) counts: Vec<usize>,
    pub(crate) displs: Vec<usize>,
    pub(crate) end: usize,
    staged: Option<Vec<(isize, usize, Arc<Dtype>)>>,
}

impl VLayout {
    /// Per peer `counts[i]` items of the type `types(i)` at byte offset
    /// `offsets(i)` of the caller's buffer.
    pub(crate) fn new(
        counts: &[c_int],
        types: &[Arc<Dtype>],
        offsets: impl Fn(usize, &Dtype) -> Res<isize>,
    ) -> Res<VLayout> {
        VLayout::new_at(counts, types, offsets, false)
    }

    /// [`VLayout::new`]; `bottom`: the buffer is `MPI_BOTTOM` (NULL), the
    /// offsets absolute addresses, so the blocks are staged whatever their
    /// types (the caller's memory is not one slice from NULL).
    fn new_at(
        counts: &[c_int],
        types: &[Arc<Dtype>],
        offsets: impl Fn(usize, &Dtype) -> Res<isize>,
        bottom: bool,
    ) -> Res<VLayout> {
        let p = counts.len();
        let contig = !bottom && types.iter().all(|t| t.is_contig());
        let mut cb = Vec::with_capacity(p);
        let mut db = Vec::with_capacity(p);
        let mut blocks = Vec::with_capacity(p);
        let mut end = 0usize;
        for i in 0..p {
            let t = &types[i];
            let n = ccount(counts[i], C::Count, "counts[i]")?;
            let c = n
                .checked_mul(t.size)
                .ok_or_else(|| Error::new(C::Count, "counts[i] x datatype size overflows"))?;
            let off = offsets(i, t)?;
            if contig {
                let d = usize::try_from(off)
                    .map_err(|_| Error::new(C::Arg, format!("displacement {off} < 0")))?;
                end = end.max(d + c);
                db.push(d);
            } else {
                db.push(end);
                end += c;
                blocks.push((off, n, Arc::clone(t)));
            }
            cb.push(c);
        }
        Ok(VLayout {
            counts: cb,
            displs: db,
            end,
            staged: (!contig).then_some(blocks),
        })
    }

    /// The v-forms: `counts[i]` items of `t` at `displs[i]` extents.
    pub(crate) fn v(
        counts: *const c_int,
        displs: *const c_int,
        p: usize,
        t: &Arc<Dtype>,
    ) -> Res<VLayout> {
        VLayout::v_where(counts, displs, p, t, |_| true)
    }

    /// [`VLayout::v`] with the blocks `keep` rejects counted as empty
    /// (neither read nor written: a neighbourhood collective's
    /// `MPI_PROC_NULL` neighbours).
    pub(crate) fn v_where(
        counts: *const c_int,
        displs: *const c_int,
        p: usize,
        t: &Arc<Dtype>,
        keep: impl Fn(usize) -> bool,
    ) -> Res<VLayout> {
        let cs = kept(crate::ffi::array(counts, p, "counts")?, keep);
        let ds = crate::ffi::array(displs, p, "displs")?;
        let ts = vec![Arc::clone(t); p];
        VLayout::new(&cs, &ts, |i, t| {
            isize::try_from(ds[i])
                .ok()
                .and_then(|d| d.checked_mul(t.extent()))
                .ok_or_else(|| Error::new(C::Arg, "displs[i] x extent overflows"))
        })
    }

    /// The w-forms: `counts[i]` items of `types[i]` at byte `displs[i]` of
    /// `buf` (only whether it is `MPI_BOTTOM` matters here).
    pub(crate) fn w(
        counts: *const c_int,
        displs: *const c_int,
        types: *const c_int,
        p: usize,
        buf: *const c_void,
    ) -> Res<VLayout> {
        let ds = crate::ffi::array(displs, p, "displs")?;
        let ds: Vec<isize> = ds.into_iter().map(|d| d as isize).collect();
        VLayout::w_where(counts, &ds, types, |_| true, buf)
    }

    /// [`VLayout::w`] on byte displacements already read (one per block),
    /// with the blocks `keep` rejects counted as empty ([`VLayout::v_where`]).
    pub(crate) fn w_where(
        counts: *const c_int,
        displs: &[isize],
        types: *const c_int,
        keep: impl Fn(usize) -> bool,
        buf: *const c_void,
    ) -> Res<VLayout> {
        let p = displs.len();
        let cs = kept(crate::ffi::array(counts, p, "counts")?, keep);
        let ts = crate::ffi::array(types, p, "types")?
            .into_iter()
            .map(ty)
            .collect::<Res<Vec<_>>>()?;
        VLayout::new_at(&cs, &ts, |i, _| Ok(displs[i]), buf.is_null())
    }

    /// The buffer as tmpi-coll sees it: the caller's bytes, or a staged copy.
    pub(crate) fn read<'a>(&self, buf: *const c_void) -> Res<std::borrow::Cow<'a, [u8]>> {
        match &self.staged {
            None => crate::ffi::bytes(buf.cast(), self.end).map(std::borrow::Cow::Borrowed),
            Some(blocks) => {
                let mut v = Vec::with_capacity(self.end);
                for (off, n, t) in blocks {
                    v.extend_from_slice(&pack(
                        buf.cast::<u8>().wrapping_offset(*off).cast(),
                        *n,
                        t,
                    ));
                }
                Ok(std::borrow::Cow::Owned(v))
            }
        }
    }

    /// Block `i` as tmpi-coll sees it, copied.
    fn block(&self, buf: *const c_void, i: usize) -> Res<Vec<u8>> {
        let (d, c) = (self.displs[i], self.counts[i]);
        match &self.staged {
            None => block_copy(buf, d, c),
            Some(blocks) => {
                let (off, n, t) = &blocks[i];
                Ok(pack(buf.cast::<u8>().wrapping_offset(*off).cast(), *n, t))
            }
        }
    }

    /// A receive buffer for a blocking call: the caller's own, or a staged
    /// copy of it (blocks the call does not write keep their bytes).
    pub(crate) fn out<'a>(&self, buf: *mut c_void) -> Res<VOut<'a>> {
        match &self.staged {
            None => crate::ffi::bytes_mut(buf.cast(), self.end).map(VOut::Direct),
            Some(_) => Ok(VOut::Staged(self.read(buf)?.into_owned())),
        }
    }

    /// Writes staged `data` (the whole buffer as tmpi-coll saw it) back
    /// into the caller's blocks.
    pub(crate) fn write_back(&self, buf: *mut c_void, data: &[u8]) {
        if let Some(blocks) = &self.staged {
            for (i, (off, n, t)) in blocks.iter().enumerate() {
                let d = self.displs[i];
                unpack(
                    buf.cast::<u8>().wrapping_offset(*off).cast(),
                    *n,
                    t,
                    &data[d..d + self.counts[i]],
                );
            }
        }
    }

    /// How a non-blocking call's result reaches the caller's buffer.
    pub(crate) fn finish(self, buf: *mut c_void) -> Finish {
        if self.staged.is_some() {
            Finish::Blocks {
                dst: buf as usize,
                layout: self,
            }
        } else {
            regions(buf, self.counts, self.displs)
        }
    }
}

/// `counts` with the blocks `keep` rejects set to 0.
fn kept(mut counts: Vec<c_int>, keep: impl Fn(usize) -> bool) -> Vec<c_int> {
    for (i, c) in counts.iter_mut().enumerate() {
        if !keep(i) {
            *c = 0;
        }
    }
    counts
}

/// A blocking v/w call's receive buffer ([`VLayout::out`]).
pub(crate) enum VOut<'a> {
    Direct(&'a mut [u8]),
    Staged(Vec<u8>),
}

impl VOut<'_> {
    pub(crate) fn bytes(&mut self) -> &mut [u8] {
        match self {
            VOut::Direct(b) => b,
            VOut::Staged(v) => v,
        }
    }

    /// Writes a staged buffer back into the caller's blocks.
    pub(crate) fn done(self, layout: &VLayout, buf: *mut c_void) {
        if let VOut::Staged(v) = self {
            layout.write_back(buf, &v);
        }
    }
}

#[allow(clippy::too_many_arguments)]
#[no_mangle]
pub extern "C" fn MPI_Gatherv(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: c_int,
    recvbuf: *mut c_void,
    recvcounts: *const c_int,
    displs: *const c_int,
    recvtype: c_int,
    root: c_int,
    comm: c_int,
) -> c_int {
    guard("MPI_Gatherv", comm, || {
        let c = match crate::intercoll::target(comm)? {
            crate::intercoll::Target::Inter(ic) => {
                let recv = crate::intercoll::Blocks::V(recvcounts, displs, recvtype);
                return crate::intercoll::gather(
                    &ic, sendbuf, sendcount, sendtype, recvbuf, recv, root,
                );
            }
            crate::intercoll::Target::Intra(c) => c,
        };
        let r = root_of(root, &c)?;
        if c.rank() == r {
            not_aliased_at(sendbuf, recvbuf, displ_at(displs, r, recvtype)?, sendcount)?;
        }
        let p = c.size() as usize;
        let s = if is_in_place(sendbuf) {
            None
        } else {
            Some(pack(
                sendbuf,
                ccount(sendcount, C::Count, "sendcount")?,
                &*ty(sendtype)?,
            ))
        };
        let input = match &s {
            Some(s) => Input::Buf(s),
            None => Input::InPlace,
        };
        if c.rank() == r {
            let l = VLayout::v(recvcounts, displs, p, &ty(recvtype)?)?;
            let mut out = l.out(recvbuf)?;
            c.gatherv(input, Some((out.bytes(), &l.counts, &l.displs)), r)?;
            out.done(&l, recvbuf);
        } else {
            c.gatherv(input, None, r)?;
        }
        Ok(())
    })
}

#[allow(clippy::too_many_arguments)]
#[no_mangle]
pub extern "C" fn MPI_Scatterv(
    sendbuf: *const c_void,
    sendcounts: *const c_int,
    displs: *const c_int,
    sendtype: c_int,
    recvbuf: *mut c_void,
    recvcount: c_int,
    recvtype: c_int,
    root: c_int,
    comm: c_int,
) -> c_int {
    guard("MPI_Scatterv", comm, || {
        let c = match crate::intercoll::target(comm)? {
            crate::intercoll::Target::Inter(ic) => {
                let send = crate::intercoll::Blocks::V(sendcounts, displs, sendtype);
                return crate::intercoll::scatter(
                    &ic, sendbuf, send, recvbuf, recvcount, recvtype, root,
                );
            }
            crate::intercoll::Target::Intra(c) => c,
        };
        let r = root_of(root, &c)?;
        if c.rank() == r {
            not_aliased_at(recvbuf, sendbuf, displ_at(displs, r, sendtype)?, recvcount)?;
        }
        let p = c.size() as usize;
        if c.rank() == r && is_in_place(recvbuf) {
            // recvcount and recvtype are ignored (MPI-4.0 6.6).
            let l = VLayout::v(sendcounts, displs, p, &ty(sendtype)?)?;
            let inb = l.read(sendbuf)?;
            c.scatterv(Some((&inb, &l.counts, &l.displs)), None, r)?;
            return Ok(());
        }
        let rt = ty(recvtype)?;
        let rn = ccount(recvcount, C::Count, "recvcount")?;
        let mut out = vec![0u8; rt.size * rn];
        if c.rank() == r {
            let l = VLayout::v(sendcounts, displs, p, &ty(sendtype)?)?;
            let inb = l.read(sendbuf)?;
            c.scatterv(Some((&inb, &l.counts, &l.displs)), Some(&mut out), r)?;
        } else {
            c.scatterv(None, Some(&mut out), r)?;
        }
        unpack(recvbuf, rn, &rt, &out);
        Ok(())
    })
}

#[allow(clippy::too_many_arguments)]
#[no_mangle]
pub extern "C" fn MPI_Allgatherv(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: c_int,
    recvbuf: *mut c_void,
    recvcounts: *const c_int,
    displs: *const c_int,
    recvtype: c_int,
    comm: c_int,
) -> c_int {
    guard("MPI_Allgatherv", comm, || {
        let c = match crate::intercoll::target(comm)? {
            crate::intercoll::Target::Inter(ic) => {
                let recv = crate::intercoll::Blocks::V(recvcounts, displs, recvtype);
                return crate::intercoll::allgather(
                    &ic, sendbuf, sendcount, sendtype, recvbuf, recv,
                );
            }
            crate::intercoll::Target::Intra(c) => c,
        };
        not_aliased_at(
            sendbuf,
            recvbuf,
            displ_at(displs, c.rank(), recvtype)?,
            sendcount,
        )?;
        let p = c.size() as usize;
        let l = VLayout::v(recvcounts, displs, p, &ty(recvtype)?)?;
        let s = if is_in_place(sendbuf) {
            None
        } else {
            Some(pack(
                sendbuf,
                ccount(sendcount, C::Count, "sendcount")?,
                &*ty(sendtype)?,
            ))
        };
        let input = match &s {
            Some(s) => Input::Buf(s),
            None => Input::InPlace,
        };
        let mut out = l.out(recvbuf)?;
        c.allgatherv(input, out.bytes(), &l.counts, &l.displs)?;
        out.done(&l, recvbuf);
        Ok(())
    })
}

/// 1 when an all-to-all moves data (the aliasing check's count): two
/// empty buffers may well share an address (mpi4py passes one for every
/// empty buffer).
fn moves(send: &Option<VLayout>, recv: &VLayout) -> c_int {
    c_int::from(send.as_ref().is_some_and(|s| s.end > 0) && recv.end > 0)
}

/// Shared body of blocking MPI_Alltoallv/w once the layouts are known
/// (`send = None`: MPI_IN_PLACE, the receive layout on both sides).
fn alltoall_vw(
    c: &Comm,
    w: bool,
    sendbuf: *const c_void,
    send: Option<VLayout>,
    recvbuf: *mut c_void,
    rl: &VLayout,
) -> Res<()> {
    let mut out = rl.out(recvbuf)?;
    let (rc, rd) = (&rl.counts[..], &rl.displs[..]);
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
    out.done(rl, recvbuf);
    Ok(())
}

#[allow(clippy::too_many_arguments)]
#[no_mangle]
pub extern "C" fn MPI_Alltoallv(
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
    guard("MPI_Alltoallv", comm, || {
        let c = match crate::intercoll::target(comm)? {
            crate::intercoll::Target::Inter(ic) => {
                let p = crate::intercoll::remote_size(&ic);
                let sl = VLayout::v(sendcounts, sdispls, p, &ty(sendtype)?)?;
                let rl = VLayout::v(recvcounts, rdispls, p, &ty(recvtype)?)?;
                return crate::intercoll::alltoall(&ic, sendbuf, &sl, recvbuf, &rl);
            }
            crate::intercoll::Target::Intra(c) => c,
        };
        let p = c.size() as usize;
        let rl = VLayout::v(recvcounts, rdispls, p, &ty(recvtype)?)?;
        let send = if is_in_place(sendbuf) {
            None
        } else {
            Some(VLayout::v(sendcounts, sdispls, p, &ty(sendtype)?)?)
        };
        not_aliased(sendbuf, recvbuf, moves(&send, &rl))?;
        alltoall_vw(&c, false, sendbuf, send, recvbuf, &rl)
    })
}

// ---------------------------------------------------------------- non-blocking

pub(crate) fn coll_req(
    request: *mut c_int,
    comm: c_int,
    req: tmpi_coll::CollRequest,
    finish: Finish,
) -> Res<()> {
    crate::state::COLL_ACTIVE.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let h = tables().add_req(Req::Coll {
        req,
        finish,
        comm,
        persist: None,
    });
    put(request, h, "request")
}

#[no_mangle]
pub extern "C" fn MPI_Ibarrier(comm: c_int, request: *mut c_int) -> c_int {
    guard("MPI_Ibarrier", comm, || {
        match crate::intercoll::target(comm)? {
            crate::intercoll::Target::Inter(ic) => {
                crate::intercoll::barrier(&ic.nonblocking(request))
            }
            crate::intercoll::Target::Intra(c) => {
                coll_req(request, comm, c.ibarrier()?, Finish::Nothing)
            }
        }
    })
}

#[no_mangle]
pub extern "C" fn MPI_Ibcast(
    buf: *mut c_void,
    count: c_int,
    dtype: c_int,
    root: c_int,
    comm: c_int,
    request: *mut c_int,
) -> c_int {
    guard("MPI_Ibcast", comm, || {
        let c = match crate::intercoll::target(comm)? {
            crate::intercoll::Target::Inter(ic) => {
                let ic = ic.nonblocking(request);
                return crate::intercoll::bcast(&ic, buf, count, dtype, root);
            }
            crate::intercoll::Target::Intra(c) => c,
        };
        let r = root_of(root, &c)?;
        let n = ccount(count, C::Count, "count")?;
        let t = ty(dtype)?;
        let req = c.ibcast(pack(buf, n, &t), r)?;
        coll_req(
            request,
            comm,
            req,
            Finish::Unpack {
                dst: buf as usize,
                count: n,
                t,
            },
        )
    })
}

#[no_mangle]
pub extern "C" fn MPI_Iallreduce(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: c_int,
    dtype: c_int,
    op: c_int,
    comm: c_int,
    request: *mut c_int,
) -> c_int {
    guard("MPI_Iallreduce", comm, || {
        let c = match crate::intercoll::target(comm)? {
            crate::intercoll::Target::Inter(ic) => {
                let what = crate::intercoll::NbReduce::All;
                return crate::intercoll::nb_reduce(
                    &ic, what, sendbuf, recvbuf, count, dtype, op, request,
                );
            }
            crate::intercoll::Target::Intra(c) => c,
        };
        not_aliased(sendbuf, recvbuf, count)?;
        let n = ccount(count, C::Count, "count")?;
        let t = ty(dtype)?;
        let (e, o) = red(&t, op, dtype)?;
        let send = if is_in_place(sendbuf) {
            pack(recvbuf, n, &t)
        } else {
            pack(sendbuf, n, &t)
        };
        let req = c.iallreduce(send, e, &o)?;
        coll_req(
            request,
            comm,
            req,
            Finish::Unpack {
                dst: recvbuf as usize,
                count: n,
                t,
            },
        )
    })
}

#[allow(clippy::too_many_arguments)]
#[no_mangle]
pub extern "C" fn MPI_Ireduce(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: c_int,
    dtype: c_int,
    op: c_int,
    root: c_int,
    comm: c_int,
    request: *mut c_int,
) -> c_int {
    guard("MPI_Ireduce", comm, || {
        let c = match crate::intercoll::target(comm)? {
            crate::intercoll::Target::Inter(ic) => {
                let what = crate::intercoll::NbReduce::Rooted(root);
                return crate::intercoll::nb_reduce(
                    &ic, what, sendbuf, recvbuf, count, dtype, op, request,
                );
            }
            crate::intercoll::Target::Intra(c) => c,
        };
        let r = root_of(root, &c)?;
        if c.rank() == r {
            not_aliased(sendbuf, recvbuf, count)?;
        }
        let n = ccount(count, C::Count, "count")?;
        let t = ty(dtype)?;
        let (e, o) = red(&t, op, dtype)?;
        let send = if is_in_place(sendbuf) {
            pack(recvbuf, n, &t)
        } else {
            pack(sendbuf, n, &t)
        };
        let req = c.ireduce(send, e, &o, r)?;
        let fin = if c.rank() == r {
            Finish::Unpack {
                dst: recvbuf as usize,
                count: n,
                t,
            }
        } else {
            Finish::Nothing
        };
        coll_req(request, comm, req, fin)
    })
}

#[allow(clippy::too_many_arguments)]
#[no_mangle]
pub extern "C" fn MPI_Iallgather(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: c_int,
    recvbuf: *mut c_void,
    recvcount: c_int,
    recvtype: c_int,
    comm: c_int,
    request: *mut c_int,
) -> c_int {
    guard("MPI_Iallgather", comm, || {
        let c = match crate::intercoll::target(comm)? {
            crate::intercoll::Target::Inter(ic) => {
                let ic = ic.nonblocking(request);
                let recv = crate::intercoll::Blocks::Uniform(recvcount, recvtype);
                return crate::intercoll::allgather(
                    &ic, sendbuf, sendcount, sendtype, recvbuf, recv,
                );
            }
            crate::intercoll::Target::Intra(c) => c,
        };
        not_aliased_at(
            sendbuf,
            recvbuf,
            block_at(c.rank(), recvcount, recvtype)?,
            sendcount,
        )?;
        let p = c.size() as usize;
        let rn = ccount(recvcount, C::Count, "recvcount")?;
        let rt = ty(recvtype)?;
        let send = if is_in_place(sendbuf) {
            let all = pack(recvbuf, rn * p, &rt);
            let blk = rt.size * rn;
            let me = c.rank() as usize;
            all[me * blk..(me + 1) * blk].to_vec()
        } else {
            pack(
                sendbuf,
                ccount(sendcount, C::Count, "sendcount")?,
                &*ty(sendtype)?,
            )
        };
        let req = c.iallgather(send)?;
        coll_req(
            request,
            comm,
            req,
            Finish::Unpack {
                dst: recvbuf as usize,
                count: rn * p,
                t: rt,
            },
        )
    })
}

#[allow(clippy::too_many_arguments)]
#[no_mangle]
pub extern "C" fn MPI_Ialltoall(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: c_int,
    recvbuf: *mut c_void,
    recvcount: c_int,
    recvtype: c_int,
    comm: c_int,
    request: *mut c_int,
) -> c_int {
    guard("MPI_Ialltoall", comm, || {
        let c = match crate::intercoll::target(comm)? {
            crate::intercoll::Target::Inter(ic) => {
                let ic = ic.nonblocking(request);
                let (sl, rl) = crate::intercoll::alltoall_layouts(
                    &ic, sendcount, sendtype, recvcount, recvtype,
                )?;
                return crate::intercoll::alltoall(&ic, sendbuf, &sl, recvbuf, &rl);
            }
            crate::intercoll::Target::Intra(c) => c,
        };
        not_aliased(sendbuf, recvbuf, sendcount)?;
        let p = c.size() as usize;
        let rn = ccount(recvcount, C::Count, "recvcount")?;
        let rt = ty(recvtype)?;
        let send = if is_in_place(sendbuf) {
            pack(recvbuf, rn * p, &rt)
        } else {
            pack(
                sendbuf,
                ccount(sendcount, C::Count, "sendcount")? * p,
                &*ty(sendtype)?,
            )
        };
        let req = c.ialltoall(send)?;
        coll_req(
            request,
            comm,
            req,
            Finish::Unpack {
                dst: recvbuf as usize,
                count: rn * p,
                t: rt,
            },
        )
    })
}

#[no_mangle]
pub extern "C" fn MPI_Reduce_scatter(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    recvcounts: *const c_int,
    dtype: c_int,
    op: c_int,
    comm: c_int,
) -> c_int {
    guard("MPI_Reduce_scatter", comm, || {
        let c = match crate::intercoll::target(comm)? {
            crate::intercoll::Target::Inter(ic) => {
                let counts = crate::intercoll::local_counts(&ic, recvcounts)?;
                return crate::intercoll::reduce_scatter(&ic, sendbuf, recvbuf, &counts, dtype, op);
            }
            crate::intercoll::Target::Intra(c) => c,
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
        let send = if is_in_place(sendbuf) {
            pack(recvbuf, total, &t)
        } else {
            pack(sendbuf, total, &t)
        };
        let mut out = vec![0u8; t.size * mine];
        c.reduce_scatter(Input::Buf(&send), &mut out, &counts, e, &o)?;
        unpack(recvbuf, mine, &t, &out);
        Ok(())
    })
}

#[allow(clippy::too_many_arguments)]
#[no_mangle]
pub extern "C" fn MPI_Igather(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: c_int,
    recvbuf: *mut c_void,
    recvcount: c_int,
    recvtype: c_int,
    root: c_int,
    comm: c_int,
    request: *mut c_int,
) -> c_int {
    guard("MPI_Igather", comm, || {
        let c = match crate::intercoll::target(comm)? {
            crate::intercoll::Target::Inter(ic) => {
                let ic = ic.nonblocking(request);
                let recv = crate::intercoll::Blocks::Uniform(recvcount, recvtype);
                return crate::intercoll::gather(
                    &ic, sendbuf, sendcount, sendtype, recvbuf, recv, root,
                );
            }
            crate::intercoll::Target::Intra(c) => c,
        };
        let r = root_of(root, &c)?;
        if c.rank() == r {
            not_aliased_at(
                sendbuf,
                recvbuf,
                block_at(r, recvcount, recvtype)?,
                sendcount,
            )?;
        }
        let p = c.size() as usize;
        let is_root = c.rank() == r;
        let (send, fin) = if is_root {
            let rn = ccount(recvcount, C::Count, "recvcount")?;
            let rt = ty(recvtype)?;
            let send = if is_in_place(sendbuf) {
                let all = pack(recvbuf, rn * p, &rt);
                let blk = rt.size * rn;
                all[r as usize * blk..(r as usize + 1) * blk].to_vec()
            } else {
                pack(
                    sendbuf,
                    ccount(sendcount, C::Count, "sendcount")?,
                    &*ty(sendtype)?,
                )
            };
            (
                send,
                Finish::Unpack {
                    dst: recvbuf as usize,
                    count: rn * p,
                    t: rt,
                },
            )
        } else {
            (
                pack(
                    sendbuf,
                    ccount(sendcount, C::Count, "sendcount")?,
                    &*ty(sendtype)?,
                ),
                Finish::Nothing,
            )
        };
        let req = c.igather(send, r)?;
        coll_req(request, comm, req, fin)
    })
}

#[allow(clippy::too_many_arguments)]
#[no_mangle]
pub extern "C" fn MPI_Iscatter(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: c_int,
    recvbuf: *mut c_void,
    recvcount: c_int,
    recvtype: c_int,
    root: c_int,
    comm: c_int,
    request: *mut c_int,
) -> c_int {
    guard("MPI_Iscatter", comm, || {
        let c = match crate::intercoll::target(comm)? {
            crate::intercoll::Target::Inter(ic) => {
                let ic = ic.nonblocking(request);
                let send = crate::intercoll::Blocks::Uniform(sendcount, sendtype);
                return crate::intercoll::scatter(
                    &ic, sendbuf, send, recvbuf, recvcount, recvtype, root,
                );
            }
            crate::intercoll::Target::Intra(c) => c,
        };
        let r = root_of(root, &c)?;
        if c.rank() == r {
            not_aliased_at(
                recvbuf,
                sendbuf,
                block_at(r, sendcount, sendtype)?,
                recvcount,
            )?;
        }
        let p = c.size() as usize;
        let is_root = c.rank() == r;
        if is_root && is_in_place(recvbuf) {
            // recvcount and recvtype are ignored (MPI-4.0 6.6).
            let st = ty(sendtype)?;
            let sn = ccount(sendcount, C::Count, "sendcount")?;
            let req = c.iscatter(pack(sendbuf, sn * p, &st), st.size * sn, r)?;
            return coll_req(request, comm, req, Finish::Nothing);
        }
        let rn = ccount(recvcount, C::Count, "recvcount")?;
        let rt = ty(recvtype)?;
        let (send, block) = if is_root {
            let st = ty(sendtype)?;
            let sn = ccount(sendcount, C::Count, "sendcount")?;
            (pack(sendbuf, sn * p, &st), st.size * sn)
        } else {
            (Vec::new(), rt.size * rn)
        };
        let req = c.iscatter(send, block, r)?;
        let fin = Finish::Unpack {
            dst: recvbuf as usize,
            count: rn,
            t: rt,
        };
        coll_req(request, comm, req, fin)
    })
}

macro_rules! iscan {
    ($name:ident, $m:ident) => {
        #[no_mangle]
        pub extern "C" fn $name(
            sendbuf: *const c_void,
            recvbuf: *mut c_void,
            count: c_int,
            dtype: c_int,
            op: c_int,
            comm: c_int,
            request: *mut c_int,
        ) -> c_int {
            guard(stringify!($name), comm, || {
                let c = comm_of(comm)?;
                not_aliased(sendbuf, recvbuf, count)?;
                let n = ccount(count, C::Count, "count")?;
                let t = ty(dtype)?;
                let (e, o) = red(&t, op, dtype)?;
                let send = if is_in_place(sendbuf) {
                    pack(recvbuf, n, &t)
                } else {
                    pack(sendbuf, n, &t)
                };
                let req = c.$m(send, e, &o)?;
                coll_req(
                    request,
                    comm,
                    req,
                    Finish::Unpack {
                        dst: recvbuf as usize,
                        count: n,
                        t,
                    },
                )
            })
        }
    };
}
iscan!(MPI_Iscan, iscan);
iscan!(MPI_Iexscan, iexscan);

#[no_mangle]
pub extern "C" fn MPI_Ireduce_scatter_block(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    recvcount: c_int,
    dtype: c_int,
    op: c_int,
    comm: c_int,
    request: *mut c_int,
) -> c_int {
    guard("MPI_Ireduce_scatter_block", comm, || {
        let c = match crate::intercoll::target(comm)? {
            crate::intercoll::Target::Inter(ic) => {
                let counts = crate::intercoll::block_counts(&ic, recvcount)?;
                let what = crate::intercoll::NbReduce::Scatter(counts);
                return crate::intercoll::nb_reduce(
                    &ic, what, sendbuf, recvbuf, 0, dtype, op, request,
                );
            }
            crate::intercoll::Target::Intra(c) => c,
        };
        not_aliased(sendbuf, recvbuf, recvcount)?;
        let n = ccount(recvcount, C::Count, "recvcount")?;
        let t = ty(dtype)?;
        let (e, o) = red(&t, op, dtype)?;
        let p = c.size() as usize;
        let send = if is_in_place(sendbuf) {
            pack(recvbuf, n * p, &t)
        } else {
            pack(sendbuf, n * p, &t)
        };
        let req = c.ireduce_scatter_block(send, e, &o)?;
        coll_req(
            request,
            comm,
            req,
            Finish::Unpack {
                dst: recvbuf as usize,
                count: n,
                t,
            },
        )
    })
}

/// Byte counts of MPI_Alltoallw's per-peer (count, type) pairs; the
/// displacements are bytes already. Contiguous types only.
#[allow(clippy::too_many_arguments)]
#[no_mangle]
pub extern "C" fn MPI_Alltoallw(
    sendbuf: *const c_void,
    sendcounts: *const c_int,
    sdispls: *const c_int,
    sendtypes: *const c_int,
    recvbuf: *mut c_void,
    recvcounts: *const c_int,
    rdispls: *const c_int,
    recvtypes: *const c_int,
    comm: c_int,
) -> c_int {
    guard("MPI_Alltoallw", comm, || {
        let c = match crate::intercoll::target(comm)? {
            crate::intercoll::Target::Inter(ic) => {
                let p = crate::intercoll::remote_size(&ic);
                let sl = VLayout::w(sendcounts, sdispls, sendtypes, p, sendbuf)?;
                let rl = VLayout::w(recvcounts, rdispls, recvtypes, p, recvbuf)?;
                return crate::intercoll::alltoall(&ic, sendbuf, &sl, recvbuf, &rl);
            }
            crate::intercoll::Target::Intra(c) => c,
        };
        let p = c.size() as usize;
        let rl = VLayout::w(recvcounts, rdispls, recvtypes, p, recvbuf)?;
        let send = if is_in_place(sendbuf) {
            None
        } else {
            Some(VLayout::w(sendcounts, sdispls, sendtypes, p, sendbuf)?)
        };
        not_aliased(sendbuf, recvbuf, moves(&send, &rl))?;
        alltoall_vw(&c, true, sendbuf, send, recvbuf, &rl)
    })
}

// ---------------------------------------------------------------- non-blocking v-collectives

fn regions(dst: *mut c_void, counts: Vec<usize>, displs: Vec<usize>) -> Finish {
    Finish::Regions {
        dst: dst as usize,
        counts,
        displs,
    }
}

/// A copy of `len` bytes at `base + off` (a block of the caller's buffer).
fn block_copy(base: *const c_void, off: usize, len: usize) -> Res<Vec<u8>> {
    if len == 0 {
        return Ok(Vec::new());
    }
    Ok(crate::ffi::bytes(base.cast::<u8>().wrapping_add(off), len)?.to_vec())
}

#[allow(clippy::too_many_arguments)]
#[no_mangle]
pub extern "C" fn MPI_Igatherv(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: c_int,
    recvbuf: *mut c_void,
    recvcounts: *const c_int,
    displs: *const c_int,
    recvtype: c_int,
    root: c_int,
    comm: c_int,
    request: *mut c_int,
) -> c_int {
    guard("MPI_Igatherv", comm, || {
        let c = match crate::intercoll::target(comm)? {
            crate::intercoll::Target::Inter(ic) => {
                let ic = ic.nonblocking(request);
                let recv = crate::intercoll::Blocks::V(recvcounts, displs, recvtype);
                return crate::intercoll::gather(
                    &ic, sendbuf, sendcount, sendtype, recvbuf, recv, root,
                );
            }
            crate::intercoll::Target::Intra(c) => c,
        };
        let r = root_of(root, &c)?;
        if c.rank() == r {
            not_aliased_at(sendbuf, recvbuf, displ_at(displs, r, recvtype)?, sendcount)?;
        }
        let p = c.size() as usize;
        if c.rank() != r {
            let s = pack(
                sendbuf,
                ccount(sendcount, C::Count, "sendcount")?,
                &*ty(sendtype)?,
            );
            let req = c.igatherv(s, None, r)?;
            return coll_req(request, comm, req, Finish::Nothing);
        }
        let l = VLayout::v(recvcounts, displs, p, &ty(recvtype)?)?;
        let me = r as usize;
        let s = if is_in_place(sendbuf) {
            l.block(recvbuf, me)?
        } else {
            pack(
                sendbuf,
                ccount(sendcount, C::Count, "sendcount")?,
                &*ty(sendtype)?,
            )
        };
        let req = c.igatherv(s, Some((l.end, &l.counts, &l.displs)), r)?;
        coll_req(request, comm, req, l.finish(recvbuf))
    })
}

#[allow(clippy::too_many_arguments)]
#[no_mangle]
pub extern "C" fn MPI_Iscatterv(
    sendbuf: *const c_void,
    sendcounts: *const c_int,
    displs: *const c_int,
    sendtype: c_int,
    recvbuf: *mut c_void,
    recvcount: c_int,
    recvtype: c_int,
    root: c_int,
    comm: c_int,
    request: *mut c_int,
) -> c_int {
    guard("MPI_Iscatterv", comm, || {
        let c = match crate::intercoll::target(comm)? {
            crate::intercoll::Target::Inter(ic) => {
                let ic = ic.nonblocking(request);
                let send = crate::intercoll::Blocks::V(sendcounts, displs, sendtype);
                return crate::intercoll::scatter(
                    &ic, sendbuf, send, recvbuf, recvcount, recvtype, root,
                );
            }
            crate::intercoll::Target::Intra(c) => c,
        };
        let r = root_of(root, &c)?;
        if c.rank() == r {
            not_aliased_at(recvbuf, sendbuf, displ_at(displs, r, sendtype)?, recvcount)?;
        }
        let p = c.size() as usize;
        if c.rank() == r && is_in_place(recvbuf) {
            // recvcount and recvtype are ignored (MPI-4.0 6.6).
            let l = VLayout::v(sendcounts, displs, p, &ty(sendtype)?)?;
            let s = l.read(sendbuf)?.into_owned();
            let mine = l.counts[r as usize];
            let req = c.iscatterv(s, Some((&l.counts, &l.displs)), mine, r)?;
            return coll_req(request, comm, req, Finish::Nothing);
        }
        let rt = ty(recvtype)?;
        let rn = ccount(recvcount, C::Count, "recvcount")?;
        let unpack_fin = |rt: Arc<Dtype>| Finish::Unpack {
            dst: recvbuf as usize,
            count: rn,
            t: rt,
        };
        if c.rank() != r {
            let req = c.iscatterv(Vec::new(), None, rt.size * rn, r)?;
            return coll_req(request, comm, req, unpack_fin(rt));
        }
        let l = VLayout::v(sendcounts, displs, p, &ty(sendtype)?)?;
        let s = l.read(sendbuf)?.into_owned();
        let req = c.iscatterv(s, Some((&l.counts, &l.displs)), rt.size * rn, r)?;
        coll_req(request, comm, req, unpack_fin(rt))
    })
}

#[allow(clippy::too_many_arguments)]
#[no_mangle]
pub extern "C" fn MPI_Iallgatherv(
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
    guard("MPI_Iallgatherv", comm, || {
        let c = match crate::intercoll::target(comm)? {
            crate::intercoll::Target::Inter(ic) => {
                let ic = ic.nonblocking(request);
                let recv = crate::intercoll::Blocks::V(recvcounts, displs, recvtype);
                return crate::intercoll::allgather(
                    &ic, sendbuf, sendcount, sendtype, recvbuf, recv,
                );
            }
            crate::intercoll::Target::Intra(c) => c,
        };
        not_aliased_at(
            sendbuf,
            recvbuf,
            displ_at(displs, c.rank(), recvtype)?,
            sendcount,
        )?;
        let p = c.size() as usize;
        let l = VLayout::v(recvcounts, displs, p, &ty(recvtype)?)?;
        let me = c.rank() as usize;
        let s = if is_in_place(sendbuf) {
            l.block(recvbuf, me)?
        } else {
            pack(
                sendbuf,
                ccount(sendcount, C::Count, "sendcount")?,
                &*ty(sendtype)?,
            )
        };
        let req = c.iallgatherv(s, l.end, &l.counts, &l.displs)?;
        coll_req(request, comm, req, l.finish(recvbuf))
    })
}

/// Shared body of MPI_Ialltoallv/w once the byte layouts are known
/// (`send = None`: MPI_IN_PLACE, the receive buffer and layout on both sides).
#[allow(clippy::too_many_arguments)]
fn ialltoall_vw(
    c: &Comm,
    w: bool,
    sendbuf: *const c_void,
    send: Option<VLayout>,
    recvbuf: *mut c_void,
    recv: VLayout,
    comm: c_int,
    request: *mut c_int,
) -> Res<()> {
    let (s, sc, sd) = match &send {
        None => (recv.read(recvbuf)?.into_owned(), &recv.counts, &recv.displs),
        Some(l) => (l.read(sendbuf)?.into_owned(), &l.counts, &l.displs),
    };
    let r = (recv.end, &recv.counts[..], &recv.displs[..]);
    let req = if w {
        c.ialltoallw(s, sc, sd, r)?
    } else {
        c.ialltoallv(s, sc, sd, r)?
    };
    coll_req(request, comm, req, recv.finish(recvbuf))
}

#[allow(clippy::too_many_arguments)]
#[no_mangle]
pub extern "C" fn MPI_Ialltoallv(
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
    guard("MPI_Ialltoallv", comm, || {
        let c = match crate::intercoll::target(comm)? {
            crate::intercoll::Target::Inter(ic) => {
                let ic = ic.nonblocking(request);
                let p = crate::intercoll::remote_size(&ic);
                let sl = VLayout::v(sendcounts, sdispls, p, &ty(sendtype)?)?;
                let rl = VLayout::v(recvcounts, rdispls, p, &ty(recvtype)?)?;
                return crate::intercoll::alltoall(&ic, sendbuf, &sl, recvbuf, &rl);
            }
            crate::intercoll::Target::Intra(c) => c,
        };
        let p = c.size() as usize;
        let recv = VLayout::v(recvcounts, rdispls, p, &ty(recvtype)?)?;
        let send = if is_in_place(sendbuf) {
            None
        } else {
            Some(VLayout::v(sendcounts, sdispls, p, &ty(sendtype)?)?)
        };
        not_aliased(sendbuf, recvbuf, moves(&send, &recv))?;
        ialltoall_vw(&c, false, sendbuf, send, recvbuf, recv, comm, request)
    })
}

#[allow(clippy::too_many_arguments)]
#[no_mangle]
pub extern "C" fn MPI_Ialltoallw(
    sendbuf: *const c_void,
    sendcounts: *const c_int,
    sdispls: *const c_int,
    sendtypes: *const c_int,
    recvbuf: *mut c_void,
    recvcounts: *const c_int,
    rdispls: *const c_int,
    recvtypes: *const c_int,
    comm: c_int,
    request: *mut c_int,
) -> c_int {
    guard("MPI_Ialltoallw", comm, || {
        let c = match crate::intercoll::target(comm)? {
            crate::intercoll::Target::Inter(ic) => {
                let ic = ic.nonblocking(request);
                let p = crate::intercoll::remote_size(&ic);
                let sl = VLayout::w(sendcounts, sdispls, sendtypes, p, sendbuf)?;
                let rl = VLayout::w(recvcounts, rdispls, recvtypes, p, recvbuf)?;
                return crate::intercoll::alltoall(&ic, sendbuf, &sl, recvbuf, &rl);
            }
            crate::intercoll::Target::Intra(c) => c,
        };
        let p = c.size() as usize;
        let recv = VLayout::w(recvcounts, rdispls, recvtypes, p, recvbuf)?;
        let send = if is_in_place(sendbuf) {
            None
        } else {
            Some(VLayout::w(sendcounts, sdispls, sendtypes, p, sendbuf)?)
        };
        not_aliased(sendbuf, recvbuf, moves(&send, &recv))?;
        ialltoall_vw(&c, true, sendbuf, send, recvbuf, recv, comm, request)
    })
}

#[no_mangle]
pub extern "C" fn MPI_Ireduce_scatter(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    recvcounts: *const c_int,
    dtype: c_int,
    op: c_int,
    comm: c_int,
    request: *mut c_int,
) -> c_int {
    guard("MPI_Ireduce_scatter", comm, || {
        let c = match crate::intercoll::target(comm)? {
            crate::intercoll::Target::Inter(ic) => {
                let counts = crate::intercoll::local_counts(&ic, recvcounts)?;
                let what = crate::intercoll::NbReduce::Scatter(counts);
                return crate::intercoll::nb_reduce(
                    &ic, what, sendbuf, recvbuf, 0, dtype, op, request,
                );
            }
            crate::intercoll::Target::Intra(c) => c,
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
        let send = if is_in_place(sendbuf) {
            pack(recvbuf, total, &t)
        } else {
            pack(sendbuf, total, &t)
        };
        let req = c.ireduce_scatter(send, &counts, e, &o)?;
        coll_req(
            request,
            comm,
            req,
            Finish::Unpack {
                dst: recvbuf as usize,
                count: mine,
                t,
            },
        )
    })
}
