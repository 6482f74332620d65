//! Collectives on inter-communicators (MPI-4.0 §6.2.2): data goes
//! from one group to the other. Each call is one round of
//! `tmpi_comm::Comm::neighbor_exchange` on the inter-communicator's union
//! (every process of both groups takes part, in the same order as its other
//! collectives, on tags user receives cannot match), after a reduction on
//! the local group for the reducing calls:
//!
//! | call | local step | the union round |
//! |---|---|---|
//! | barrier | | a barrier of the union |
//! | bcast | | the root sends to every remote process |
//! | gather(v) | | every remote process sends its block to the root |
//! | scatter(v) | | the root sends block `r` to remote process `r` |
//! | allgather(v) | | every process sends its block to every remote one |
//! | alltoall(v,w) | | block `r` to remote process `r` |
//! | reduce | reduce to local rank 0 (the group without the root) | rank 0 sends the result to the root |
//! | allreduce | reduce to local rank 0 (both groups) | rank 0 sends the result to every remote process |
//! | reduce_scatter(_block) | reduce to local rank 0 (both groups) | the two ranks 0 swap their results, then scatter(v) on the local group |
//!
//! Every call also runs non-blocking: the round as a request. The local
//! reduction of the reducing calls would be a blocking step (it waits for
//! the group), so their non-blocking forms move the vectors instead and
//! fold them when the request completes ([`nb_reduce`]): every process
//! sends its vector to every remote process that needs it (ireduce: to the
//! root; iallreduce, ireduce_scatter(_block): to all of them, whole, as a
//! process does not know the remote group's counts), and the receiver
//! folds the remote group's vectors in rank order (non-commutative ops
//! combine in rank order), its own segment only for ireduce_scatter.
//!
//! Sends are direct (linear): an inter-communicator's groups are the
//! program's own, usually small; a root sending to many remote processes
//! could forward through a tree of the remote group instead. Inputs are
//! packed, outputs written through the receive type maps ([`VLayout`]), so
//! every datatype works. `MPI_IN_PLACE` has no meaning on an
//! inter-communicator (MPI-4.0 §6.2.3): `MPI_ERR_BUFFER`.

use std::ffi::{c_int, c_void};
use std::sync::Arc;

use tmpi_coll::Input;
use tmpi_comm::Comm;

use crate::coll::{coll_req, pack, red, ty, unpack, VLayout};
use crate::datatype::Dtype;
use crate::error::{Error, MpiErrorClass as C, Res};
use crate::ffi::{array, count as ccount, is_in_place};
use crate::intercomm::Inter;
use crate::neighbor::{exchange_round, uniform};
use crate::request::Finish;
use crate::state::{rt, tables, CommRef};

pub(crate) const ROOT: c_int = -3;
const PROC_NULL: c_int = -2;

/// An inter-communicator as its collectives see it: the local group's
/// intra-communicator and the remote side.
pub(crate) struct Ic {
    h: c_int,
    local: Comm,
    inter: Arc<Inter>,
    /// The request handle's address of a non-blocking call (`None`:
    /// blocking).
    request: Option<*mut c_int>,
}

impl Ic {
    /// The same call, non-blocking: its one round becomes a request written
    /// to `request` (the reducing calls: [`nb_reduce`]).
    pub(crate) fn nonblocking(self, request: *mut c_int) -> Ic {
        Ic {
            request: Some(request),
            ..self
        }
    }
}

/// The communicator of a collective call, looked up once: an
/// intra-communicator (`MPI_COMM_WORLD` and `MPI_COMM_SELF` borrowed
/// without the tables' lock) or an inter-communicator.
pub(crate) enum Target {
    Intra(CommRef),
    Inter(Ic),
}

/// The [`Target`] of handle `h`.
pub(crate) fn target(h: c_int) -> Res<Target> {
    if let Some(c) = rt().ok().and_then(|rt| rt.fast.comm(h)) {
        return Ok(Target::Intra(CommRef::Fast(&c.comm)));
    }
    let t = tables();
    let e = t.comm(h)?;
    Ok(match &e.inter {
        Some(i) => Target::Inter(Ic {
            h,
            local: e.comm.clone(),
            inter: Arc::clone(i),
            request: None,
        }),
        None => Target::Intra(CommRef::Table(e.comm.clone())),
    })
}

fn no_in_place(bufs: &[*const c_void]) -> Res<()> {
    if bufs.iter().any(|&b| is_in_place(b)) {
        return Err(Error::new(
            C::Buffer,
            "MPI_IN_PLACE is not allowed in a collective on an inter-communicator",
        ));
    }
    Ok(())
}

/// The user's `n` items of `t` at `buf`, packed.
fn packed(buf: *const c_void, n: usize, t: &Dtype) -> Res<Vec<u8>> {
    if n > 0 && t.size > 0 && buf.is_null() {
        return Err(Error::new(
            C::Buffer,
            "buffer is NULL with a non-zero count",
        ));
    }
    Ok(pack(buf, n, t))
}

/// A block of a round: `(union rank, byte offset, byte length)`.
type Block = (u32, usize, usize);

/// Where this process stands in a rooted call.
enum Side {
    /// `MPI_ROOT`: the root, in the root's group.
    Root,
    /// `MPI_PROC_NULL`: another process of the root's group (takes no part
    /// in the data movement).
    Idle,
    /// A process of the other group; the root is this remote rank.
    Remote(u32),
}

fn side(root: c_int, ic: &Ic) -> Res<Side> {
    match root {
        ROOT => Ok(Side::Root),
        PROC_NULL => Ok(Side::Idle),
        r if r >= 0 && (r as u32) < ic.inter.remote.size() => Ok(Side::Remote(r as u32)),
        r => Err(Error::new(
            C::Root,
            format!(
                "root {r} is neither MPI_ROOT, MPI_PROC_NULL nor a rank of the remote group of {}",
                ic.inter.remote.size()
            ),
        )),
    }
}

/// One round on the union: `data[off..off + len]` to every `(peer, off,
/// len)` of `sends`, and block `b` of `recv` from every `(peer, b)` of
/// `recvs` (union ranks), written into the caller's `buf`.
fn round(
    ic: &Ic,
    data: Vec<u8>,
    sends: &[Block],
    recv: Option<(&VLayout, *mut c_void)>,
    recvs: &[(u32, usize)],
) -> Res<()> {
    let union = &ic.inter.union;
    exchange_round(union, ic.h, data, sends, recv, recvs, ic.request)
}

/// A round in which this process moves no data (`MPI_PROC_NULL` roots).
fn idle(ic: &Ic) -> Res<()> {
    round(ic, Vec::new(), &[], None, &[])
}

/// A round that sends `data` to remote rank `r`.
fn to_remote(ic: &Ic, data: Vec<u8>, r: u32) -> Res<()> {
    let n = data.len();
    round(ic, data, &[(ic.inter.remote_u(r), 0, n)], None, &[])
}

/// One block of `count` items of datatype `dtype`.
fn one_block(count: c_int, dtype: c_int) -> Res<VLayout> {
    uniform(1, count, &ty(dtype)?, |_| true)
}

/// A round that receives the one block of `l` from remote rank `r`.
fn from_remote(ic: &Ic, l: &VLayout, buf: *mut c_void, r: u32) -> Res<()> {
    round(
        ic,
        Vec::new(),
        &[],
        Some((l, buf)),
        &[(ic.inter.remote_u(r), 0)],
    )
}

/// A round that sends `data` to one union rank and receives `len` bytes
/// from one, into a buffer of its own (`None`: no send, no receive).
fn raw_round(ic: &Ic, send: Option<(Vec<u8>, u32)>, recv: Option<(u32, usize)>) -> Res<Vec<u8>> {
    let (data, sends) = match send {
        Some((d, p)) => {
            let n = d.len();
            (d, vec![(p, 0, n)])
        }
        None => (Vec::new(), Vec::new()),
    };
    let (len, recvs) = match recv {
        Some((p, n)) => (n, vec![(p, 0, n)]),
        None => (0, Vec::new()),
    };
    Ok(ic
        .inter
        .union
        .neighbor_exchange(data, &sends, len, &recvs)?)
}

/// Every block of `l` to the remote process of the same rank (`one`: block
/// 0 to every remote process).
fn to_remotes(ic: &Ic, l: &VLayout, buf: *const c_void, one: bool) -> Res<(Vec<u8>, Vec<Block>)> {
    let data = l.read(buf)?.into_owned();
    let sends = ic
        .inter
        .remotes()
        .enumerate()
        .map(|(r, p)| {
            let b = if one { 0 } else { r };
            (p, l.displs[b], l.counts[b])
        })
        .collect();
    Ok((data, sends))
}

/// A round that sends [`to_remotes`] and receives nothing.
fn send_to_remotes(ic: &Ic, l: &VLayout, buf: *const c_void, one: bool) -> Res<()> {
    let (data, sends) = to_remotes(ic, l, buf, one)?;
    round(ic, data, &sends, None, &[])
}

/// Block `r` of a receive layout from remote process `r`.
fn from_remotes(ic: &Ic) -> Vec<(u32, usize)> {
    ic.inter
        .remotes()
        .enumerate()
        .map(|(r, p)| (p, r))
        .collect()
}

/// The local group's reduction of `n` items of `t` at `sendbuf`, at local
/// rank 0 (`None` elsewhere).
fn local_reduce(
    ic: &Ic,
    sendbuf: *const c_void,
    n: usize,
    t: &Arc<Dtype>,
    op: c_int,
    dtype: c_int,
) -> Res<Option<Vec<u8>>> {
    let (e, o) = red(t, op, dtype)?;
    let send = packed(sendbuf, n, t)?;
    if ic.local.rank() == 0 {
        let mut out = vec![0u8; send.len()];
        ic.local
            .reduce(Input::Buf(&send), Some(&mut out), e, &o, 0)?;
        Ok(Some(out))
    } else {
        ic.local.reduce(Input::Buf(&send), None, e, &o, 0)?;
        Ok(None)
    }
}

pub(crate) fn barrier(ic: &Ic) -> Res<()> {
    match ic.request {
        Some(request) => {
            let req = ic.inter.union.ibarrier()?;
            coll_req(request, ic.h, req, Finish::Nothing)
        }
        None => Ok(ic.inter.union.barrier()?),
    }
}

pub(crate) fn bcast(ic: &Ic, buf: *mut c_void, count: c_int, dtype: c_int, root: c_int) -> Res<()> {
    no_in_place(&[buf])?;
    match side(root, ic)? {
        Side::Root => send_to_remotes(ic, &one_block(count, dtype)?, buf, true),
        Side::Idle => idle(ic),
        Side::Remote(r) => from_remote(ic, &one_block(count, dtype)?, buf, r),
    }
}

/// The root's receive layout of gather and gatherv.
pub(crate) enum Blocks {
    /// `count` items of `type` per remote process.
    Uniform(c_int, c_int),
    /// `counts[r]` items of `type` at `displs[r]` extents.
    V(*const c_int, *const c_int, c_int),
}

impl Blocks {
    fn layout(&self, p: usize) -> Res<VLayout> {
        match *self {
            Blocks::Uniform(count, t) => uniform(p, count, &ty(t)?, |_| true),
            Blocks::V(counts, displs, t) => VLayout::v(counts, displs, p, &ty(t)?),
        }
    }
}

/// gather and gatherv: the root's blocks are `recv`.
pub(crate) fn gather(
    ic: &Ic,
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: c_int,
    recvbuf: *mut c_void,
    recv: Blocks,
    root: c_int,
) -> Res<()> {
    no_in_place(&[sendbuf, recvbuf])?;
    match side(root, ic)? {
        Side::Root => {
            let l = recv.layout(ic.inter.remote.size() as usize)?;
            round(ic, Vec::new(), &[], Some((&l, recvbuf)), &from_remotes(ic))
        }
        Side::Idle => idle(ic),
        Side::Remote(r) => {
            let t = ty(sendtype)?;
            let data = packed(sendbuf, ccount(sendcount, C::Count, "sendcount")?, &t)?;
            to_remote(ic, data, r)
        }
    }
}

/// scatter and scatterv: the root's blocks are `send`.
pub(crate) fn scatter(
    ic: &Ic,
    sendbuf: *const c_void,
    send: Blocks,
    recvbuf: *mut c_void,
    recvcount: c_int,
    recvtype: c_int,
    root: c_int,
) -> Res<()> {
    no_in_place(&[sendbuf, recvbuf])?;
    match side(root, ic)? {
        Side::Root => {
            let l = send.layout(ic.inter.remote.size() as usize)?;
            send_to_remotes(ic, &l, sendbuf, false)
        }
        Side::Idle => idle(ic),
        Side::Remote(r) => from_remote(ic, &one_block(recvcount, recvtype)?, recvbuf, r),
    }
}

/// allgather and allgatherv: this process's `sendcount` items to every
/// remote process, block `r` of `recv` from remote process `r`.
pub(crate) fn allgather(
    ic: &Ic,
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: c_int,
    recvbuf: *mut c_void,
    recv: Blocks,
) -> Res<()> {
    no_in_place(&[sendbuf, recvbuf])?;
    let (data, sends) = to_remotes(ic, &one_block(sendcount, sendtype)?, sendbuf, true)?;
    let l = recv.layout(ic.inter.remote.size() as usize)?;
    round(ic, data, &sends, Some((&l, recvbuf)), &from_remotes(ic))
}

/// alltoall, alltoallv and alltoallw: block `r` of `send` to remote process
/// `r`, block `r` of `recv` from it.
pub(crate) fn alltoall(
    ic: &Ic,
    sendbuf: *const c_void,
    send: &VLayout,
    recvbuf: *mut c_void,
    recv: &VLayout,
) -> Res<()> {
    no_in_place(&[sendbuf, recvbuf])?;
    let (data, sends) = to_remotes(ic, send, sendbuf, false)?;
    round(ic, data, &sends, Some((recv, recvbuf)), &from_remotes(ic))
}

/// The layouts of alltoall: `count` items per remote process.
pub(crate) fn alltoall_layouts(
    ic: &Ic,
    sendcount: c_int,
    sendtype: c_int,
    recvcount: c_int,
    recvtype: c_int,
) -> Res<(VLayout, VLayout)> {
    let p = ic.inter.remote.size() as usize;
    Ok((
        uniform(p, sendcount, &ty(sendtype)?, |_| true)?,
        uniform(p, recvcount, &ty(recvtype)?, |_| true)?,
    ))
}

/// The number of processes in the remote group (the length of the count,
/// displacement and type arrays of the v/w forms).
pub(crate) fn remote_size(ic: &Ic) -> usize {
    ic.inter.remote.size() as usize
}

#[allow(clippy::too_many_arguments)]
pub(crate) fn reduce(
    ic: &Ic,
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: c_int,
    dtype: c_int,
    op: c_int,
    root: c_int,
) -> Res<()> {
    if let Some(request) = ic.request {
        let what = NbReduce::Rooted(root);
        return nb_reduce(ic, what, sendbuf, recvbuf, count, dtype, op, request);
    }
    no_in_place(&[sendbuf, recvbuf])?;
    let t = ty(dtype)?;
    match side(root, ic)? {
        Side::Root => {
            let l = uniform(1, count, &t, |_| true)?;
            from_remote(ic, &l, recvbuf, 0)
        }
        Side::Idle => idle(ic),
        Side::Remote(r) => {
            let n = ccount(count, C::Count, "count")?;
            match local_reduce(ic, sendbuf, n, &t, op, dtype)? {
                Some(v) => to_remote(ic, v, r),
                None => idle(ic),
            }
        }
    }
}

pub(crate) fn allreduce(
    ic: &Ic,
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: c_int,
    dtype: c_int,
    op: c_int,
) -> Res<()> {
    if let Some(request) = ic.request {
        let what = NbReduce::All;
        return nb_reduce(ic, what, sendbuf, recvbuf, count, dtype, op, request);
    }
    no_in_place(&[sendbuf, recvbuf])?;
    let t = ty(dtype)?;
    let n = ccount(count, C::Count, "count")?;
    let (data, sends) = match local_reduce(ic, sendbuf, n, &t, op, dtype)? {
        Some(v) => {
            let len = v.len();
            let s = ic.inter.remotes().map(|p| (p, 0, len)).collect();
            (v, s)
        }
        None => (Vec::new(), Vec::new()),
    };
    let l = uniform(1, count, &t, |_| true)?;
    round(
        ic,
        data,
        &sends,
        Some((&l, recvbuf)),
        &[(ic.inter.remote_u(0), 0)],
    )
}

/// reduce_scatter and reduce_scatter_block: the remote group's reduction
/// of `counts.sum()` items, scattered over the local group, `counts[i]`
/// items to local rank `i` (MPI-4.0 §6.10.1: both groups reduce vectors of
/// the same length).
pub(crate) fn reduce_scatter(
    ic: &Ic,
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    counts: Vec<usize>,
    dtype: c_int,
    op: c_int,
) -> Res<()> {
    if let Some(request) = ic.request {
        let what = NbReduce::Scatter(counts);
        return nb_reduce(ic, what, sendbuf, recvbuf, 0, dtype, op, request);
    }
    no_in_place(&[sendbuf, recvbuf])?;
    let t = ty(dtype)?;
    let total: usize = counts.iter().sum();
    let mine = local_reduce(ic, sendbuf, total, &t, op, dtype)?;
    let leader = ic.inter.remote_u(0);
    let got = match mine {
        Some(v) => raw_round(ic, Some((v, leader)), Some((leader, total * t.size)))?,
        None => raw_round(ic, None, None)?,
    };
    let me = ic.local.rank() as usize;
    let mut out = vec![0u8; counts[me] * t.size];
    let bytes: Vec<usize> = counts.iter().map(|&c| c * t.size).collect();
    let displs: Vec<usize> = bytes
        .iter()
        .scan(0, |at, &b| {
            let d = *at;
            *at += b;
            Some(d)
        })
        .collect();
    let send = (me == 0).then_some((&got[..], &bytes[..], &displs[..]));
    ic.local.scatterv(send, Some(&mut out), 0)?;
    if counts[me] > 0 && recvbuf.is_null() {
        return Err(Error::new(
            C::Buffer,
            "buffer is NULL with a non-zero count",
        ));
    }
    unpack(recvbuf, counts[me], &t, &out);
    Ok(())
}

/// The per-process counts of reduce_scatter: `recvcounts` over the local
/// group.
pub(crate) fn local_counts(ic: &Ic, recvcounts: *const c_int) -> Res<Vec<usize>> {
    array(recvcounts, ic.local.size() as usize, "recvcounts")?
        .into_iter()
        .map(|c| ccount(c, C::Count, "recvcounts[i]"))
        .collect()
}

/// The counts of reduce_scatter_block: `recvcount` per local process.
pub(crate) fn block_counts(ic: &Ic, recvcount: c_int) -> Res<Vec<usize>> {
    let c = ccount(recvcount, C::Count, "recvcount")?;
    Ok(vec![c; ic.local.size() as usize])
}

/// Folds `blocks` vectors of `block` bytes in `out` (rank order), bytes
/// `seg` of each: `v[0] op (v[1] op (... op v[n-1]))`.
pub(crate) fn fold(
    out: &[u8],
    blocks: usize,
    block: usize,
    seg: std::ops::Range<usize>,
    elem: tmpi_coll::Datatype,
    op: &tmpi_coll::Op,
) -> Res<Vec<u8>> {
    let part = |i: usize| &out[i * block + seg.start..i * block + seg.end];
    let Some(last) = blocks.checked_sub(1) else {
        return Ok(Vec::new());
    };
    let mut acc = part(last).to_vec();
    for i in (0..last).rev() {
        op.apply(elem, part(i), &mut acc)?;
    }
    Ok(acc)
}

/// Which non-blocking reduction [`nb_reduce`] runs.
enum NbReduce {
    /// `MPI_Ireduce` with its root argument.
    Rooted(c_int),
    /// `MPI_Iallreduce`.
    All,
    /// `MPI_Ireduce_scatter(_block)`: the local processes' counts.
    Scatter(Vec<usize>),
}

/// The non-blocking reductions on an inter-communicator: one round moves
/// the packed input vectors (of `count` items, or the counts' sum) to the
/// remote processes that need them; the request's completion folds them
/// ([`crate::request::Finish::Fold`]).
#[allow(clippy::too_many_arguments)]
fn nb_reduce(
    ic: &Ic,
    what: NbReduce,
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: c_int,
    dtype: c_int,
    op: c_int,
    request: *mut c_int,
) -> Res<()> {
    no_in_place(&[sendbuf, recvbuf])?;
    let t = ty(dtype)?;
    let (elem, o) = red(&t, op, dtype)?;
    let n = match &what {
        NbReduce::Scatter(counts) => counts.iter().sum(),
        _ => ccount(count, C::Count, "count")?,
    };
    let block = n * t.size;
    let remotes: Vec<u32> = ic.inter.remotes().collect();
    let nr = remotes.len();
    let fold_into = |seg: std::ops::Range<usize>, count: usize| Finish::Fold {
        dst: recvbuf as usize,
        blocks: nr,
        block,
        seg,
        elem,
        op: o.clone(),
        count,
        t: Arc::clone(&t),
    };
    let all_from_remotes: Vec<Block> = remotes
        .iter()
        .enumerate()
        .map(|(r, &p)| (p, r * block, block))
        .collect();
    // This process's vector to every remote process.
    let to_all = || -> Res<(Vec<u8>, Vec<Block>)> {
        let s = remotes.iter().map(|&p| (p, 0, block)).collect();
        Ok((packed(sendbuf, n, &t)?, s))
    };
    let (data, sends, recv_len, recvs, finish) = match what {
        NbReduce::Rooted(root) => match side(root, ic)? {
            Side::Root => (
                Vec::new(),
                Vec::new(),
                nr * block,
                all_from_remotes,
                fold_into(0..block, n),
            ),
            Side::Idle => (Vec::new(), Vec::new(), 0, Vec::new(), Finish::Nothing),
            Side::Remote(r) => {
                let v = packed(sendbuf, n, &t)?;
                let s = vec![(ic.inter.remote_u(r), 0, block)];
                (v, s, 0, Vec::new(), Finish::Nothing)
            }
        },
        NbReduce::All => {
            let (v, s) = to_all()?;
            (v, s, nr * block, all_from_remotes, fold_into(0..block, n))
        }
        NbReduce::Scatter(counts) => {
            let (v, s) = to_all()?;
            let me = ic.local.rank() as usize;
            let start: usize = counts[..me].iter().sum::<usize>() * t.size;
            let seg = start..start + counts[me] * t.size;
            (
                v,
                s,
                nr * block,
                all_from_remotes,
                fold_into(seg, counts[me]),
            )
        }
    };
    let req = ic
        .inter
        .union
        .ineighbor_exchange(data, &sends, recv_len, &recvs)?;
    coll_req(request, ic.h, req, finish)
}
