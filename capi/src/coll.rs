//! Collectives over tmpi-coll. Buffers of non-contiguous types are packed
//! before and unpacked after; reductions need a type made of one
//! predefined element type.
//!
//! Each `MPI_<x>` and its non-blocking `MPI_I<x>` are one function, declared
//! as both entry points from one parameter list (`blocking_and_nonblocking!`):
//! the argument checks, the buffer and datatype handling and the
//! inter-communicator branch are the same code for both; the last step
//! differs, a blocking call that reads and writes the caller's buffers
//! (in place where the types allow) or a request that writes the receive
//! buffer at completion. Where the two forms check their arguments in a
//! different order, each keeps its own: `request.is_none()` marks a step of
//! the blocking form only, `request.is_some()` one of the non-blocking form.
//!
//! By job: `rooted` (bcast, gather(v), scatter(v)), `exchange` (barrier,
//! allgather(v), alltoall(v, w)), `reductions` (reduce, allreduce, scan,
//! exscan, reduce_scatter(_block)); `vlayout`, the blocks of the v and w
//! forms' buffers (`VLayout`). This file: what they share.

use std::ffi::{c_int, c_void};
use std::sync::Arc;

use tmpi_coll::{Datatype as Elem, Input, Op};
use tmpi_comm::Comm;

use crate::datatype::Dtype;
use crate::error::{Error, MpiErrorClass as C, Res};
use crate::ffi::{count as ccount, gather_blocks, is_in_place, put, scatter_blocks};
use crate::intercoll::{Ic, Target};
use crate::request::{Finish, Req};
use crate::state::{tables, CommRef, FastComm, FastType};

/// `MPI_<x>` and `MPI_I<x>` from one parameter list (the non-blocking entry
/// point takes `request` after it): both run `$body` with the parameters
/// (after `$pre`, when given) and then `None` (blocking) or
/// `Some(request)`, inside [`crate::error::guard`] on the communicator
/// `$comm`. A macro because the two `extern "C"` signatures can only be
/// written out, not derived by a function.
macro_rules! blocking_and_nonblocking {
    ($blocking:ident, $nonblocking:ident => $body:ident $([$($pre:expr),*])?;
     ($($arg:ident: $ty:ty),* $(,)?) on $comm:ident) => {
        #[allow(clippy::too_many_arguments)]
        #[no_mangle]
        pub extern "C" fn $blocking($($arg: $ty),*) -> c_int {
            $crate::error::guard(stringify!($blocking), $comm, || {
                $body($($($pre,)*)? $($arg,)* None)
            })
        }

        #[allow(clippy::too_many_arguments)]
        #[no_mangle]
        pub extern "C" fn $nonblocking($($arg: $ty,)* request: *mut c_int) -> c_int {
            $crate::error::guard(stringify!($nonblocking), $comm, || {
                $body($($($pre,)*)? $($arg,)* Some(request))
            })
        }
    };
}
pub(crate) use blocking_and_nonblocking;

mod exchange;
mod reductions;
mod rooted;
mod vlayout;

pub use exchange::*;
pub use reductions::*;
pub use rooted::*;
pub(crate) use vlayout::VLayout;

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

/// The byte length of `n` items of `t` when `t` is contiguous (`None`:
/// pack them).
fn contiguous_len(n: usize, t: &Dtype) -> Res<Option<usize>> {
    if !t.is_contig() {
        return Ok(None);
    }
    n.checked_mul(t.size)
        .map(Some)
        .ok_or_else(|| Error::new(C::Count, "count x datatype size overflows"))
}

/// The user's `n` items of a contiguous `t` as bytes, read in place
/// (`None` for other types: pack them).
fn direct<'a>(buf: *const c_void, n: usize, t: &Dtype) -> Res<Option<&'a [u8]>> {
    contiguous_len(n, t)?
        .map(|len| crate::ffi::bytes(buf.cast(), len))
        .transpose()
}

/// As [`direct`], writable: collectives write contiguous receive buffers
/// in place instead of through a packed copy.
fn direct_mut<'a>(buf: *mut c_void, n: usize, t: &Dtype) -> Res<Option<&'a mut [u8]>> {
    contiguous_len(n, t)?
        .map(|len| crate::ffi::bytes_mut(buf.cast(), len))
        .transpose()
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

/// The intra-communicator a collective call runs on; `None` once `inter`
/// ran the call on an inter-communicator (as a request written to
/// `request` when that is given, [`Ic::nonblocking`]).
fn intra(
    comm: c_int,
    request: Option<*mut c_int>,
    inter: impl FnOnce(&Ic) -> Res<()>,
) -> Res<Option<CommRef>> {
    match crate::intercoll::target(comm)? {
        Target::Intra(c) => Ok(Some(c)),
        Target::Inter(ic) => {
            let ic = match request {
                Some(request) => ic.nonblocking(request),
                None => ic,
            };
            inter(&ic)?;
            Ok(None)
        }
    }
}

/// The `sendcount` items of `sendtype` at `sendbuf`, packed (the count
/// checked first).
fn packed_send(sendbuf: *const c_void, sendcount: c_int, sendtype: c_int) -> Res<Vec<u8>> {
    Ok(pack(
        sendbuf,
        ccount(sendcount, C::Count, "sendcount")?,
        &*ty(sendtype)?,
    ))
}

/// A send buffer packed ([`packed_send`]), or `None` for `MPI_IN_PLACE`.
fn sent(sendbuf: *const c_void, sendcount: c_int, sendtype: c_int) -> Res<Option<Vec<u8>>> {
    if is_in_place(sendbuf) {
        return Ok(None);
    }
    packed_send(sendbuf, sendcount, sendtype).map(Some)
}

/// The input of a blocking call from [`sent`].
fn input(send: &Option<Vec<u8>>) -> Input<'_> {
    match send {
        Some(s) => Input::Buf(s),
        None => Input::InPlace,
    }
}

/// The input vector of a reduction, packed: `n` items of `t` at `sendbuf`,
/// or at `recvbuf` under `MPI_IN_PLACE`.
fn input_vector(sendbuf: *const c_void, recvbuf: *mut c_void, n: usize, t: &Dtype) -> Vec<u8> {
    if is_in_place(sendbuf) {
        pack(recvbuf, n, t)
    } else {
        pack(sendbuf, n, t)
    }
}

/// Block `me` of `p` blocks of `n` items of `t` at `buf`, packed (the
/// input of a rank whose send side is `MPI_IN_PLACE`).
fn own_block(buf: *const c_void, n: usize, p: usize, t: &Dtype, me: usize) -> Vec<u8> {
    let all = pack(buf, n * p, t);
    let blk = t.size * n;
    all[me * blk..(me + 1) * blk].to_vec()
}

/// The input of a non-blocking gatherv or allgatherv: block `me` of the
/// receive layout `l` under `MPI_IN_PLACE`, else the send buffer packed.
fn own_or_sent(
    l: &VLayout,
    recvbuf: *mut c_void,
    me: usize,
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: c_int,
) -> Res<Vec<u8>> {
    if is_in_place(sendbuf) {
        l.block(recvbuf, me)
    } else {
        packed_send(sendbuf, sendcount, sendtype)
    }
}

/// The finish of a non-blocking call: its result unpacked into `n` items
/// of `t` at `buf`.
fn unpack_into(buf: *mut c_void, n: usize, t: &Arc<Dtype>) -> Finish {
    Finish::Unpack {
        dst: buf as usize,
        count: n,
        t: Arc::clone(t),
    }
}

/// A reduction's arguments: its `count` (checked as `what`), its datatype,
/// and the element type and op ([`red`]).
fn reduction(
    count: c_int,
    what: &str,
    dtype: c_int,
    op: c_int,
) -> Res<(usize, crate::state::TypeRef, Elem, Op)> {
    let n = ccount(count, C::Count, what)?;
    let t = crate::state::type_ref(dtype)?;
    let (e, o) = red(&t, op, dtype)?;
    Ok((n, t, e, o))
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

pub(crate) fn coll_req(
    request: *mut c_int,
    comm: c_int,
    req: tmpi_coll::CollRequest,
    finish: Finish,
) -> Res<()> {
    crate::state::COLL_ACTIVE.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let h = tables().add_req(Req::Coll {
        req,
        finish: Box::new(finish),
        comm,
        persist: None,
    });
    put(request, h, "request")
}
