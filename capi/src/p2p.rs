//! Point-to-point: sends in every mode, receives, persistent requests,
//! probe/mprobe, the wait/test families, cancel, buffers, status queries.

use std::ffi::{c_int, c_void};
use std::sync::Arc;

use tmpi_pml::raw::{RawBuf, RawBufMut};
use tmpi_pml::{SendMode, ANY_SOURCE, ANY_TAG, PROC_NULL, TAG_UB};

use crate::datatype::{total_size, Dtype};
use crate::env::param_check;
use crate::error::{guard, Error, MpiErrorClass as C, Res};
use crate::ffi::{count as ccount, get, put, put_array};
use crate::request::{
    put_status, status_bytes, status_err, test_handle, wait_handle, MpiStatus, Persist, Req, St,
    Stage, Tested,
};
use crate::state::{rt, tables, Rt, TypeRef, COMM_WORLD};

struct Target {
    ctx: u32,
    t: TypeRef,
}

/// The context id and datatype of a point-to-point call, its rank and tag
/// checked. MPI_COMM_WORLD/SELF with a predefined datatype are read from
/// the copy made at MPI_Init without the tables' lock or reference counting
/// (`state::FastHandles`); anything else from the tables. Contiguous sends
/// and receives take [`resolve_fast`] before this.
fn resolve(
    comm: c_int,
    dtype: c_int,
    peer: c_int,
    tag: c_int,
    count: usize,
    recv: bool,
) -> Res<Target> {
    let fast = rt()
        .ok()
        .and_then(|rt| Some((rt.fast.comm(comm)?, rt.fast.dtype(dtype)?)));
    let (size, ctx, ty) = match fast {
        Some((c, t)) => (c.size, c.ctx, TypeRef::Fast(&t.t)),
        None => {
            let t = tables();
            let ce = t.comm(comm)?;
            let ty = t.comm_type(dtype)?;
            let (size, ctx) = ce.p2p_target();
            (size, ctx, TypeRef::Table(ty))
        }
    };
    if param_check() {
        if !rank_ok(peer, size, recv) {
            return Err(Error::new(
                C::Rank,
                format!("rank {peer} is not in 0..{size} of the communicator"),
            ));
        }
        if !tag_ok(tag, recv) {
            return Err(Error::new(
                C::Tag,
                format!("tag {tag} is outside 0..=MPI_TAG_UB ({TAG_UB})"),
            ));
        }
    }
    total_size(&ty, count)?;
    Ok(Target { ctx, t: ty })
}

/// The checks of `MPI_Send_init`/`MPI_Recv_init` (`recv`) on their
/// arguments: communicator, datatype, rank, tag, count and buffer.
pub(crate) fn check_args(
    buf: *const c_void,
    count: usize,
    dtype: c_int,
    peer: c_int,
    tag: c_int,
    comm: c_int,
    recv: bool,
) -> Res<()> {
    let tg = resolve(comm, dtype, peer, tag, count, recv)?;
    check_buf(buf, count, &tg.t)
}

/// A valid peer rank for a communicator of `size` ranks.
fn rank_ok(peer: c_int, size: c_int, recv: bool) -> bool {
    (0..size).contains(&peer) || peer == PROC_NULL || (recv && peer == ANY_SOURCE)
}

/// A valid tag (the wildcard only for receives).
fn tag_ok(tag: c_int, recv: bool) -> bool {
    (0..=TAG_UB).contains(&tag) || (recv && tag == ANY_TAG)
}

/// The message path of the blocking and non-blocking sends and receives:
/// [`resolve`] and [`check_buf`] for MPI_COMM_WORLD/SELF with a predefined
/// contiguous datatype, inlined into the caller: the runtime, the context
/// id and the message's bytes, or `None` for anything else or a call that
/// would fail a check (the general path then reports the error). It
/// exists beside `resolve` because the general path (count conversion,
/// `Target`, `check_buf`, the layout checks) cost an 8-byte MPI_Send ~130
/// instructions more (797 vs 925, callgrind).
#[inline]
fn resolve_fast(
    buf: *const c_void,
    comm: c_int,
    dtype: c_int,
    peer: c_int,
    tag: c_int,
    count: c_int,
    recv: bool,
) -> Option<(&'static Rt, u32, usize)> {
    let (rt, c, _, bytes) = crate::state::fast_call(comm, dtype, count)?;
    if !rank_ok(peer, c.size, recv)
        || !tag_ok(tag, recv)
        || ((buf.is_null() || crate::ffi::is_in_place(buf)) && bytes > 0)
    {
        return None;
    }
    Some((rt, c.ctx, bytes))
}

fn check_buf(buf: *const c_void, count: usize, t: &Dtype) -> Res<()> {
    if crate::ffi::is_in_place(buf) && count > 0 && t.size > 0 {
        // An address no process can read or write (it crashed the send).
        return Err(Error::new(
            C::Buffer,
            "MPI_IN_PLACE is not a point-to-point buffer",
        ));
    }
    if param_check() && buf.is_null() && count > 0 && t.size > 0 && t.true_lb >= 0 && t.lb == 0 {
        return Err(Error::new(
            C::Buffer,
            "buffer is NULL with a non-zero count",
        ));
    }
    Ok(())
}

/// The convertor of `n` items of `t` (a non-contiguous type): the pml
/// packs each outgoing fragment from, and unpacks each arriving one into,
/// the user layout through it.
fn convertor(t: &Arc<Dtype>, n: usize) -> Res<tmpi_pml::convertor::Convertor> {
    tmpi_pml::convertor::Convertor::new(Arc::clone(t) as _, n)
        .map_err(|e| Error::new(C::Count, e.to_string()))
}

/// Starts a send; returns the request record. Inlined into its callers:
/// a call of eight arguments returning a request record cost ~35
/// instructions of a non-blocking send's ~290 in this layer.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
pub(crate) fn start_send(
    buf: *const c_void,
    count: c_int,
    dtype: c_int,
    dest: c_int,
    tag: c_int,
    comm: c_int,
    mode: SendMode,
    persist: Option<Arc<Persist>>,
) -> Res<Req> {
    if let Some((rt, ctx, bytes)) = resolve_fast(buf, comm, dtype, dest, tag, count, false) {
        let raw = RawBuf::from_raw(buf.cast(), bytes);
        // SAFETY: `raw` is the caller's `count` elements of a predefined
        // contiguous type at `buf`, which MPI forbids touching until the
        // request completes.
        let id = unsafe { rt.pml.isend(ctx, dest, tag, raw, mode) }?;
        return Ok(Req::Pml {
            id,
            stage: Stage::Direct,
            persist,
            comm,
        });
    }
    let n = ccount(count, C::Count, "count")?;
    let tg = resolve(comm, dtype, dest, tag, n, false)?;
    check_buf(buf, n, &tg.t)?;
    let rt = rt()?;
    let (raw, stage) = if tg.t.is_contig() {
        (RawBuf::from_raw(buf.cast(), tg.t.size * n), Stage::Direct)
    } else if crate::env::pack_per_fragment() {
        let c = Box::new(convertor(&tg.t, n)?);
        (RawBuf::typed(buf.cast(), &c), Stage::Typed(c))
    } else {
        let mut v = Vec::with_capacity(tg.t.size * n);
        crate::ffi::gather_blocks(buf.cast(), n, tg.t.extent(), &tg.t.blocks, &mut v);
        (RawBuf::from_slice(&v), Stage::Send(v))
    };
    // SAFETY: `raw` addresses the caller's buffer (MPI forbids touching it
    // until the request completes) or the staging vector, which moves into
    // the request record (its heap buffer does not move) and lives until
    // the request completes.
    let id = unsafe { rt.pml.isend(tg.ctx, dest, tag, raw, mode) }?;
    Ok(Req::Pml {
        id,
        stage,
        persist,
        comm,
    })
}

/// Starts a receive (inlined into its callers, as [`start_send`]).
#[inline(always)]
pub(crate) fn start_recv(
    buf: *mut c_void,
    count: c_int,
    dtype: c_int,
    src: c_int,
    tag: c_int,
    comm: c_int,
    persist: Option<Arc<Persist>>,
) -> Res<Req> {
    if let Some((rt, ctx, bytes)) = resolve_fast(buf, comm, dtype, src, tag, count, true) {
        let raw = RawBufMut::from_raw(buf.cast(), bytes);
        // SAFETY: `raw` is the caller's `count` elements of a predefined
        // contiguous type at `buf`, which MPI forbids touching until the
        // request completes.
        let id = unsafe { rt.pml.irecv(ctx, src, tag, raw) }?;
        return Ok(Req::Pml {
            id,
            stage: Stage::Direct,
            persist,
            comm,
        });
    }
    let n = ccount(count, C::Count, "count")?;
    let tg = resolve(comm, dtype, src, tag, n, true)?;
    check_buf(buf, n, &tg.t)?;
    let rt = rt()?;
    let len = tg.t.size * n;
    let (raw, stage) = if tg.t.is_contig() {
        (RawBufMut::from_raw(buf.cast(), len), Stage::Direct)
    } else if crate::env::pack_per_fragment() {
        let c = Box::new(convertor(&tg.t, n)?);
        (RawBufMut::typed(buf.cast(), &c), Stage::Typed(c))
    } else {
        let mut v = vec![0u8; len];
        let raw = RawBufMut::from_slice(&mut v);
        (
            raw,
            Stage::Recv(Box::new(crate::request::RecvStage {
                buf: v,
                dst: buf as usize,
                count: n,
                t: Arc::clone(&tg.t),
            })),
        )
    };
    // SAFETY: as for sends; the staging vector's heap buffer is owned by the
    // request record and not accessed until the pml reports completion.
    let id = unsafe { rt.pml.irecv(tg.ctx, src, tag, raw) }?;
    Ok(Req::Pml {
        id,
        stage,
        persist,
        comm,
    })
}

/// MPI_Send / MPI_Ssend / MPI_Rsend / MPI_Bsend. A contiguous type in
/// standard, synchronous or ready mode goes through the pml's blocking
/// send, whose fast path hands a small eager message to the transport
/// without a request slot (what the Rust API's `Comm::send` uses);
/// buffered mode and derived types start a request and wait for it.
#[allow(clippy::too_many_arguments)]
fn send_blocking(
    buf: *const c_void,
    count: c_int,
    dtype: c_int,
    dest: c_int,
    tag: c_int,
    comm: c_int,
    mode: SendMode,
    what: &str,
) -> Res<()> {
    if mode != SendMode::Buffered {
        if let Some((rt, ctx, bytes)) = resolve_fast(buf, comm, dtype, dest, tag, count, false) {
            let raw = RawBuf::from_raw(buf.cast(), bytes);
            // SAFETY: `raw` is the caller's `count` elements of a predefined
            // contiguous type at `buf`, given to this call until it returns;
            // the pml's blocking send returns only once the data was handed
            // over or copied.
            let r = unsafe { rt.pml.send_blocking(ctx, dest, tag, raw, mode) };
            // The status itself is not wanted: only its error class.
            if matches!(&r, Ok(s) if s.error == C::Success) {
                return Ok(());
            }
            return send_outcome(r, what);
        }
    }
    send_general(buf, count, dtype, dest, tag, comm, mode, what)
}

/// A blocking send's error (out of line: the fast path above stays small).
#[cold]
#[inline(never)]
fn send_outcome(r: Result<tmpi_pml::Status, tmpi_pml::PmlError>, what: &str) -> Res<()> {
    status_err(&St::from(r?), what)
}

/// [`send_blocking`] for what `resolve_fast` does not take: other
/// communicators and types, buffered mode, and every call that fails a
/// check (reported here).
#[cold]
#[inline(never)]
#[allow(clippy::too_many_arguments)]
fn send_general(
    buf: *const c_void,
    count: c_int,
    dtype: c_int,
    dest: c_int,
    tag: c_int,
    comm: c_int,
    mode: SendMode,
    what: &str,
) -> Res<()> {
    let n = ccount(count, C::Count, "count")?;
    let tg = resolve(comm, dtype, dest, tag, n, false)?;
    check_buf(buf, n, &tg.t)?;
    if !tg.t.is_contig() || mode == SendMode::Buffered {
        let r = start_send(buf, count, dtype, dest, tag, comm, mode, None)?;
        return blocking(r, std::ptr::null_mut(), what);
    }
    let rt = rt()?;
    let raw = RawBuf::from_raw(buf.cast(), tg.t.size * n);
    // SAFETY: MPI gives the call the buffer (`count` elements of a
    // contiguous type at `buf`) until it returns, and the pml's blocking
    // send returns only once the data was handed over or copied.
    let s = unsafe { rt.pml.send_blocking(tg.ctx, dest, tag, raw, mode) }?;
    status_err(&St::from(s), what)
}

/// Completes a just-started operation of a blocking call without going
/// through the request table (the fast path of MPI_Send / MPI_Recv).
fn blocking(r: Req, status: *mut MpiStatus, what: &str) -> Res<()> {
    let st = match r {
        Req::Pml { id, stage, .. } => {
            let rt = rt()?;
            let st = loop {
                if let Some(s) = rt.pml.test(id)? {
                    break St::from(s);
                }
                crate::request::idle();
            };
            if let Stage::Recv(r) = &stage {
                let crate::request::RecvStage { buf, dst, count, t } = &**r;
                let n = st.bytes.min(buf.len());
                crate::ffi::scatter_blocks(
                    *dst as *mut u8,
                    *count,
                    t.extent(),
                    &t.blocks,
                    &buf[..n],
                );
            }
            drop(stage);
            st
        }
        other => {
            let h = tables().add_req(other);
            wait_handle(h)?.0
        }
    };
    put_status(status, st)?;
    status_err(&st, what)
}

macro_rules! send_fn {
    ($name:ident, $iname:ident, $initname:ident, $mode:expr) => {
        #[no_mangle]
        pub extern "C" fn $name(
            buf: *const c_void,
            count: c_int,
            dtype: c_int,
            dest: c_int,
            tag: c_int,
            comm: c_int,
        ) -> c_int {
            guard(stringify!($name), comm, || {
                send_blocking(buf, count, dtype, dest, tag, comm, $mode, stringify!($name))
            })
        }
        #[no_mangle]
        pub extern "C" fn $iname(
            buf: *const c_void,
            count: c_int,
            dtype: c_int,
            dest: c_int,
            tag: c_int,
            comm: c_int,
            request: *mut c_int,
        ) -> c_int {
            guard(stringify!($iname), comm, || {
                let r = start_send(buf, count, dtype, dest, tag, comm, $mode, None)?;
                let h = tables().add_req(r);
                put(request, h, "request")
            })
        }
        #[no_mangle]
        pub extern "C" fn $initname(
            buf: *const c_void,
            count: c_int,
            dtype: c_int,
            dest: c_int,
            tag: c_int,
            comm: c_int,
            request: *mut c_int,
        ) -> c_int {
            guard(stringify!($initname), comm, || {
                let n = ccount(count, C::Count, "count")?;
                let tg = resolve(comm, dtype, dest, tag, n, false)?;
                check_buf(buf, n, &tg.t)?;
                let p = Persist {
                    send: Some($mode),
                    buf: buf as usize,
                    count: n,
                    dtype: tables().hold_type(dtype),
                    peer: dest,
                    tag,
                    comm,
                    coll: None,
                    part: None,
                };
                let h = tables().add_req(Req::Inactive(Arc::new(p)));
                put(request, h, "request")
            })
        }
    };
}

send_fn!(MPI_Send, MPI_Isend, MPI_Send_init, SendMode::Standard);
send_fn!(MPI_Ssend, MPI_Issend, MPI_Ssend_init, SendMode::Synchronous);
send_fn!(MPI_Rsend, MPI_Irsend, MPI_Rsend_init, SendMode::Ready);
send_fn!(MPI_Bsend, MPI_Ibsend, MPI_Bsend_init, SendMode::Buffered);

#[no_mangle]
pub extern "C" fn MPI_Recv(
    buf: *mut c_void,
    count: c_int,
    dtype: c_int,
    source: c_int,
    tag: c_int,
    comm: c_int,
    status: *mut MpiStatus,
) -> c_int {
    guard("MPI_Recv", comm, || {
        if let Some((rt, ctx, bytes)) = resolve_fast(buf, comm, dtype, source, tag, count, true) {
            let raw = RawBufMut::from_raw(buf.cast(), bytes);
            // SAFETY: `raw` is the caller's `count` elements of a predefined
            // contiguous type at `buf`, given to this call until it returns;
            // the pml's blocking receive returns only once the message was
            // written.
            let s = unsafe { rt.pml.recv_blocking(ctx, source, tag, raw) }?;
            let st = St::from(s);
            put_status(status, st)?;
            return status_err(&st, "MPI_Recv");
        }
        recv_general(buf, count, dtype, source, tag, comm, status)
    })
}

/// MPI_Recv for what `resolve_fast` does not take: other communicators
/// and types, and every call that fails a check (reported here). Out of
/// line: the fast path stays small.
#[cold]
#[inline(never)]
fn recv_general(
    buf: *mut c_void,
    count: c_int,
    dtype: c_int,
    source: c_int,
    tag: c_int,
    comm: c_int,
    status: *mut MpiStatus,
) -> Res<()> {
    let n = ccount(count, C::Count, "count")?;
    let tg = resolve(comm, dtype, source, tag, n, true)?;
    check_buf(buf, n, &tg.t)?;
    if !tg.t.is_contig() {
        let r = start_recv(buf, count, dtype, source, tag, comm, None)?;
        return blocking(r, status, "MPI_Recv");
    }
    let rt = rt()?;
    let raw = RawBufMut::from_raw(buf.cast(), tg.t.size * n);
    // SAFETY: MPI gives the call the buffer (`count` elements of a
    // contiguous type at `buf`) until it returns, and the pml's blocking
    // receive returns only once the message was written.
    let s = unsafe { rt.pml.recv_blocking(tg.ctx, source, tag, raw) }?;
    let st = St::from(s);
    put_status(status, st)?;
    status_err(&st, "MPI_Recv")
}

#[no_mangle]
pub extern "C" fn MPI_Irecv(
    buf: *mut c_void,
    count: c_int,
    dtype: c_int,
    source: c_int,
    tag: c_int,
    comm: c_int,
    request: *mut c_int,
) -> c_int {
    guard("MPI_Irecv", comm, || {
        let r = start_recv(buf, count, dtype, source, tag, comm, None)?;
        let h = tables().add_req(r);
        put(request, h, "request")
    })
}

#[no_mangle]
pub extern "C" fn MPI_Recv_init(
    buf: *mut c_void,
    count: c_int,
    dtype: c_int,
    source: c_int,
    tag: c_int,
    comm: c_int,
    request: *mut c_int,
) -> c_int {
    guard("MPI_Recv_init", comm, || {
        let n = ccount(count, C::Count, "count")?;
        let tg = resolve(comm, dtype, source, tag, n, true)?;
        check_buf(buf, n, &tg.t)?;
        let p = Persist {
            send: None,
            buf: buf as usize,
            count: n,
            dtype: tables().hold_type(dtype),
            peer: source,
            tag,
            comm,
            coll: None,
            part: None,
        };
        let h = tables().add_req(Req::Inactive(Arc::new(p)));
        put(request, h, "request")
    })
}

fn start_one(h: c_int) -> Res<()> {
    let p = {
        let t = tables();
        match t.reqs.get(&h) {
            Some(Req::Inactive(p)) => p.clone(),
            Some(_) => {
                return Err(Error::new(
                    C::Request,
                    format!("request {h} is already active or not persistent"),
                ))
            }
            None => {
                return Err(Error::new(
                    C::Request,
                    format!("invalid request handle {h}"),
                ))
            }
        }
    };
    if let Some(part) = p.part.clone() {
        crate::partitioned::start(&part)?;
        tables().reqs.insert(h, Req::Part(p));
        return Ok(());
    }
    if let Some(c) = &p.coll {
        let r = match c.start()? {
            Req::Coll {
                req, finish, comm, ..
            } => Req::Coll {
                req,
                finish,
                comm,
                persist: Some(p.clone()),
            },
            other => other,
        };
        tables().reqs.insert(h, r);
        return Ok(());
    }
    let cnt = p.count as c_int;
    let r = match p.send {
        Some(mode) => start_send(
            p.buf as *const c_void,
            cnt,
            p.dtype,
            p.peer,
            p.tag,
            p.comm,
            mode,
            Some(p.clone()),
        )?,
        None => start_recv(
            p.buf as *mut c_void,
            cnt,
            p.dtype,
            p.peer,
            p.tag,
            p.comm,
            Some(p.clone()),
        )?,
    };
    tables().reqs.insert(h, r);
    Ok(())
}

#[no_mangle]
pub extern "C" fn MPI_Start(request: *mut c_int) -> c_int {
    guard("MPI_Start", COMM_WORLD, || {
        start_one(get(request, "request")?)
    })
}

#[no_mangle]
pub extern "C" fn MPI_Startall(count: c_int, requests: *mut c_int) -> c_int {
    guard("MPI_Startall", COMM_WORLD, || {
        let n = ccount(count, C::Count, "count")?;
        for h in crate::ffi::array(requests, n, "array_of_requests")? {
            start_one(h)?;
        }
        Ok(())
    })
}

#[allow(clippy::too_many_arguments)]
#[no_mangle]
pub extern "C" fn MPI_Sendrecv(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: c_int,
    dest: c_int,
    sendtag: c_int,
    recvbuf: *mut c_void,
    recvcount: c_int,
    recvtype: c_int,
    source: c_int,
    recvtag: c_int,
    comm: c_int,
    status: *mut MpiStatus,
) -> c_int {
    guard("MPI_Sendrecv", comm, || {
        let (s, rh) = start_both(
            (sendbuf, sendcount, sendtype, dest, sendtag),
            (recvbuf, recvcount, recvtype, source, recvtag),
            comm,
        )?;
        let sh = tables().add_req(s);
        let (sst, _) = wait_handle(sh)?;
        let (rst, _) = wait_handle(rh)?;
        status_err(&sst, "MPI_Sendrecv (send)")?;
        put_status(status, rst)?;
        status_err(&rst, "MPI_Sendrecv (receive)")
    })
}

/// MPI-4.0: the send and the receive of `MPI_Sendrecv` started, one
/// request for both (`Req::Pair`): complete once both are, with the
/// receive's status. Cancelling it does nothing (sends are not cancelled).
#[no_mangle]
pub extern "C" fn MPI_Isendrecv(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: c_int,
    dest: c_int,
    sendtag: c_int,
    recvbuf: *mut c_void,
    recvcount: c_int,
    recvtype: c_int,
    source: c_int,
    recvtag: c_int,
    comm: c_int,
    request: *mut c_int,
) -> c_int {
    guard("MPI_Isendrecv", comm, || {
        if request.is_null() {
            return Err(Error::new(C::Arg, "request is NULL"));
        }
        let (s, rh) = start_both(
            (sendbuf, sendcount, sendtype, dest, sendtag),
            (recvbuf, recvcount, recvtype, source, recvtag),
            comm,
        )?;
        pair(request, s, rh, Vec::new(), comm)
    })
}

/// MPI-4.0: `MPI_Sendrecv_replace` started: the outgoing data is packed
/// first (kept with the request until the send completes), then the
/// receive lands in `buf`.
#[no_mangle]
pub extern "C" fn MPI_Isendrecv_replace(
    buf: *mut c_void,
    count: c_int,
    dtype: c_int,
    dest: c_int,
    sendtag: c_int,
    source: c_int,
    recvtag: c_int,
    comm: c_int,
    request: *mut c_int,
) -> c_int {
    guard("MPI_Isendrecv_replace", comm, || {
        if request.is_null() {
            return Err(Error::new(C::Arg, "request is NULL"));
        }
        let (v, len) = pack_outgoing(buf, count, dtype)?;
        // The pml reads `v`'s heap block, which moving the Vec into the
        // request does not move.
        let (s, rh) = start_both(
            (v.as_ptr().cast(), len, BYTE, dest, sendtag),
            (buf, count, dtype, source, recvtag),
            comm,
        )?;
        pair(request, s, rh, v, comm)
    })
}

/// `MPI_BYTE`'s handle.
const BYTE: c_int = 4;

/// One half of a sendrecv: buffer, count, datatype, peer, tag.
type Side<P> = (P, c_int, c_int, c_int, c_int);

/// Starts a sendrecv's receive (registered, under the returned handle),
/// then its send (returned unregistered); the receive is cancelled and
/// dropped when the send cannot start.
fn start_both(
    send: Side<*const c_void>,
    recv: Side<*mut c_void>,
    comm: c_int,
) -> Res<(Req, c_int)> {
    let r = start_recv(recv.0, recv.1, recv.2, recv.3, recv.4, comm, None)?;
    let rh = tables().add_req(r);
    match start_send(
        send.0,
        send.1,
        send.2,
        send.3,
        send.4,
        comm,
        SendMode::Standard,
        None,
    ) {
        Ok(s) => Ok((s, rh)),
        Err(e) => {
            cancel_and_drop(rh);
            Err(e)
        }
    }
}

/// `count` items of `dtype` at `buf` packed, and their length as a count
/// of bytes (the outgoing half of a sendrecv_replace).
fn pack_outgoing(buf: *const c_void, count: c_int, dtype: c_int) -> Res<(Vec<u8>, c_int)> {
    let n = ccount(count, C::Count, "count")?;
    let t = tables().comm_type(dtype)?;
    let mut v = Vec::with_capacity(t.size * n);
    crate::ffi::gather_blocks(buf as *const u8, n, t.extent(), &t.blocks, &mut v);
    let len = c_int::try_from(v.len()).map_err(|_| Error::new(C::Count, "message too large"))?;
    Ok((v, len))
}

/// Registers the send `s` and the receive under handle `rh` as one
/// request and writes its handle.
fn pair(request: *mut c_int, s: Req, rh: c_int, keep: Vec<u8>, comm: c_int) -> Res<()> {
    let mut t = tables();
    let sh = t.add_req(s);
    let h = t.add_req(Req::Pair(Box::new(crate::request::Pair {
        halves: [
            crate::request::Half::Running(sh),
            crate::request::Half::Running(rh),
        ],
        keep,
        comm,
    })));
    drop(t);
    put(request, h, "request")
}

fn cancel_and_drop(h: c_int) {
    if let Ok(rt) = rt() {
        let r = tables().reqs.remove(&h);
        if let Some(Req::Pml { id, stage, .. }) = r {
            let _ = rt.pml.cancel(id);
            let _ = rt.pml.wait(id);
            drop(stage);
        }
    }
}

#[allow(clippy::too_many_arguments)]
#[no_mangle]
pub extern "C" fn MPI_Sendrecv_replace(
    buf: *mut c_void,
    count: c_int,
    dtype: c_int,
    dest: c_int,
    sendtag: c_int,
    source: c_int,
    recvtag: c_int,
    comm: c_int,
    status: *mut MpiStatus,
) -> c_int {
    guard("MPI_Sendrecv_replace", comm, || {
        // Pack the outgoing data first, then receive in place.
        let (v, len) = pack_outgoing(buf, count, dtype)?;
        let (s, rh) = start_both(
            (v.as_ptr().cast(), len, BYTE, dest, sendtag),
            (buf, count, dtype, source, recvtag),
            comm,
        )?;
        let sh = tables().add_req(s);
        let (sst, _) = wait_handle(sh)?;
        drop(v);
        let (rst, _) = wait_handle(rh)?;
        status_err(&sst, "MPI_Sendrecv_replace (send)")?;
        put_status(status, rst)?;
        status_err(&rst, "MPI_Sendrecv_replace (receive)")
    })
}

// ---------------------------------------------------------------- completion

fn req_comm(h: c_int) -> c_int {
    tables().reqs.get(&h).map_or(COMM_WORLD, Req::comm)
}

/// After a failed wait or test: when the request completed and is gone
/// (a generalized request whose query or free callback failed), the
/// caller's handle becomes `MPI_REQUEST_NULL` instead of dangling.
fn null_if_freed(request: *mut c_int, h: c_int) {
    if h != 0 && tables().reqs.get(&h).is_none() {
        let _ = put(request, 0, "request");
    }
}

#[no_mangle]
pub extern "C" fn MPI_Wait(request: *mut c_int, status: *mut MpiStatus) -> c_int {
    let comm = if request.is_null() {
        COMM_WORLD
    } else {
        req_comm(get(request, "request").unwrap_or(0))
    };
    guard("MPI_Wait", comm, || {
        let h = get(request, "request")?;
        let (st, freed) = wait_handle(h).inspect_err(|_| null_if_freed(request, h))?;
        if freed {
            put(request, 0, "request")?;
        }
        put_status(status, st)?;
        status_err(&st, "MPI_Wait")
    })
}

#[no_mangle]
pub extern "C" fn MPI_Test(request: *mut c_int, flag: *mut c_int, status: *mut MpiStatus) -> c_int {
    let comm = if request.is_null() {
        COMM_WORLD
    } else {
        req_comm(get(request, "request").unwrap_or(0))
    };
    guard("MPI_Test", comm, || {
        let h = get(request, "request")?;
        match test_handle(h).inspect_err(|_| null_if_freed(request, h))? {
            Tested::Pending => put(flag, 0, "flag"),
            Tested::Inactive => {
                put(flag, 1, "flag")?;
                put_status(status, St::empty())
            }
            Tested::Complete(st, freed) => {
                if freed {
                    put(request, 0, "request")?;
                }
                put(flag, 1, "flag")?;
                put_status(status, st)?;
                status_err(&st, "MPI_Test")
            }
        }
    })
}

#[no_mangle]
pub extern "C" fn MPI_Request_get_status(
    request: c_int,
    flag: *mut c_int,
    status: *mut MpiStatus,
) -> c_int {
    guard("MPI_Request_get_status", COMM_WORLD, || {
        // Test (progressing), and keep a completed request alive as a
        // completed one: the wait or test that follows returns the same
        // status and frees it (MPI-4.0 3.7.3; reporting "not yet" forever
        // left a loop on get_status spinning: MPICH's rqstatus).
        use crate::request::Tested;
        match crate::request::test_handle_kept(request)? {
            Tested::Pending => put(flag, 0, "flag"),
            Tested::Inactive => {
                put(flag, 1, "flag")?;
                put_status(status, St::empty())
            }
            Tested::Complete(st, _) => {
                put(flag, 1, "flag")?;
                put_status(status, st)
            }
        }
    })
}

fn statuses_at(p: *mut MpiStatus, i: usize, st: St) -> Res<()> {
    if p.is_null() || p as usize == crate::ffi::STATUS_IGNORE {
        return Ok(());
    }
    put(p.wrapping_add(i), st.to_c(), "array_of_statuses")
}

/// `MPI_Waitall` when every handle is null or a running point-to-point
/// request on the user's memory (no staging to unpack, not persistent):
/// the table is read once for all, each round tests and polls under one
/// pml lock (`Pml::waitall_round`), and the handles are removed once all
/// completed. `None` (nothing done) for any other mix: the general loop
/// takes it.
fn waitall_direct(
    rt: &Rt,
    requests: *mut c_int,
    hs: &mut [c_int],
    statuses: *mut MpiStatus,
) -> Option<Res<()>> {
    let mut ids = Vec::with_capacity(hs.len());
    {
        let t = tables();
        for h in hs.iter() {
            if *h == 0 {
                ids.push(None);
                continue;
            }
            ids.push(match t.reqs.get(h) {
                Some(Req::Pml {
                    id,
                    stage: Stage::Direct,
                    persist: None,
                    ..
                }) => Some(*id),
                _ => return None,
            });
        }
    }
    let mut out = vec![tmpi_pml::Status::empty(); hs.len()];
    let (mut test, mut round) = (true, 0u32);
    loop {
        match rt
            .pml
            .waitall_round(&mut ids, &mut out, test || round % 16 == 0)
        {
            Ok((_, 0)) => break,
            Ok((events, _)) => {
                // Test again after a round that handled something, and
                // every 16th round (another thread may have progressed).
                test = events > 0;
                round = round.wrapping_add(1);
                if events == 0 {
                    crate::request::idle();
                }
            }
            Err(e) => {
                // The pml no longer knows a request: drop the handles of
                // those that completed or failed, report.
                let mut t = tables();
                for (h, id) in hs.iter_mut().zip(&ids) {
                    if *h != 0 && id.is_none() {
                        t.reqs.remove(h);
                        *h = 0;
                    }
                }
                drop(t);
                return Some(put_array(requests, hs, "array_of_requests").and(Err(e.into())));
            }
        }
    }
    {
        let mut t = tables();
        for h in hs.iter_mut() {
            if *h != 0 {
                t.reqs.remove(h);
                *h = 0;
            }
        }
    }
    let mut err = false;
    for (i, s) in out.into_iter().enumerate() {
        let st = St::from(s);
        err |= st.error != C::Success;
        if let Err(e) = statuses_at(statuses, i, st) {
            return Some(Err(e));
        }
    }
    Some(put_array(requests, hs, "array_of_requests").and_then(|()| {
        if err {
            Err(Error::new(
                C::InStatus,
                "MPI_Waitall: a request failed (see the statuses)",
            ))
        } else {
            Ok(())
        }
    }))
}

#[no_mangle]
pub extern "C" fn MPI_Waitall(
    count: c_int,
    requests: *mut c_int,
    statuses: *mut MpiStatus,
) -> c_int {
    guard("MPI_Waitall", COMM_WORLD, || {
        let n = ccount(count, C::Count, "count")?;
        let mut hs = crate::ffi::array(requests, n, "array_of_requests")?;
        let rt = crate::state::rt()?;
        if let Some(r) = waitall_direct(rt, requests, &mut hs, statuses) {
            return r;
        }
        let mut done = vec![false; n];
        let mut left = n;
        let mut err = false;
        // A collective's test progresses its schedule: with one among the
        // handles, every round tests every handle.
        let colls = {
            let t = tables();
            hs.iter()
                .any(|h| matches!(t.reqs.get(h), Some(Req::Coll { .. })))
        };
        let mut check = true;
        let mut round = 0u32;
        while left > 0 {
            // One transport poll per round for all the point-to-point
            // requests, and their tests (which only check) only after a
            // poll that handled something: a receiver waiting for a window
            // of 64 messages otherwise spent most of its time re-testing
            // the 64 handles between two arrivals. Every 16th round tests
            // anyway (another thread's progress may have completed them).
            if check || colls || round.is_multiple_of(16) {
                for i in 0..n {
                    if done[i] {
                        continue;
                    }
                    match crate::request::test_handle_with(hs[i], false) {
                        Ok(Tested::Pending) => {}
                        Ok(Tested::Inactive) => {
                            done[i] = true;
                            left -= 1;
                            statuses_at(statuses, i, St::empty())?;
                        }
                        Ok(Tested::Complete(st, freed)) => {
                            done[i] = true;
                            left -= 1;
                            if freed {
                                hs[i] = 0;
                            }
                            err |= st.error != C::Success;
                            statuses_at(statuses, i, st)?;
                        }
                        Err(e) => {
                            put_array(requests, &hs, "array_of_requests")?;
                            return Err(e);
                        }
                    }
                }
            }
            if left > 0 {
                let events = rt.pml.progress();
                check = events > 0;
                round = round.wrapping_add(1);
                if events == 0 {
                    crate::request::idle();
                }
            }
        }
        put_array(requests, &hs, "array_of_requests")?;
        if err {
            return Err(Error::new(
                C::InStatus,
                "MPI_Waitall: a request failed (see the statuses)",
            ));
        }
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn MPI_Testall(
    count: c_int,
    requests: *mut c_int,
    flag: *mut c_int,
    statuses: *mut MpiStatus,
) -> c_int {
    guard("MPI_Testall", COMM_WORLD, || {
        let n = ccount(count, C::Count, "count")?;
        let hs = crate::ffi::array(requests, n, "array_of_requests")?;
        // All-or-nothing: only complete when every request is done. Peek via
        // the pml's progress first, then test each; a completed one cannot
        // be un-completed, so keep it as a Done record until all are done.
        let mut all = true;
        for &h in &hs {
            // A completed one is parked as a completed record under its
            // handle, so a later test returns it again.
            match crate::request::test_handle_kept(h)? {
                Tested::Pending => all = false,
                Tested::Inactive | Tested::Complete(..) => {}
            }
        }
        if !all {
            return put(flag, 0, "flag");
        }
        let mut out = hs.clone();
        let mut err = false;
        for (i, &h) in hs.iter().enumerate() {
            match test_handle(h)? {
                Tested::Complete(st, freed) => {
                    if freed {
                        out[i] = 0;
                    }
                    err |= st.error != C::Success;
                    statuses_at(statuses, i, st)?;
                }
                _ => statuses_at(statuses, i, St::empty())?,
            }
        }
        put_array(requests, &out, "array_of_requests")?;
        put(flag, 1, "flag")?;
        if err {
            return Err(Error::new(
                C::InStatus,
                "MPI_Testall: a request failed (see the statuses)",
            ));
        }
        Ok(())
    })
}

/// One pass of testany; `Some((index or None, status))` when finished.
fn testany_pass(requests: *mut c_int, n: usize) -> Res<Option<(Option<usize>, St)>> {
    let hs = crate::ffi::array(requests, n, "array_of_requests")?;
    let mut active = false;
    for (i, &h) in hs.iter().enumerate() {
        match test_handle(h)? {
            Tested::Pending => active = true,
            Tested::Inactive => {}
            Tested::Complete(st, freed) => {
                if freed {
                    put(requests.wrapping_add(i), 0, "array_of_requests")?;
                }
                return Ok(Some((Some(i), st)));
            }
        }
    }
    if !active {
        return Ok(Some((None, St::empty())));
    }
    Ok(None)
}

const UNDEFINED: c_int = -32766;

#[no_mangle]
pub extern "C" fn MPI_Waitany(
    count: c_int,
    requests: *mut c_int,
    index: *mut c_int,
    status: *mut MpiStatus,
) -> c_int {
    guard("MPI_Waitany", COMM_WORLD, || {
        let n = ccount(count, C::Count, "count")?;
        loop {
            if let Some((i, st)) = testany_pass(requests, n)? {
                put(index, i.map_or(UNDEFINED, |i| i as c_int), "index")?;
                put_status(status, st)?;
                return status_err(&st, "MPI_Waitany");
            }
            crate::request::idle();
        }
    })
}

#[no_mangle]
pub extern "C" fn MPI_Testany(
    count: c_int,
    requests: *mut c_int,
    index: *mut c_int,
    flag: *mut c_int,
    status: *mut MpiStatus,
) -> c_int {
    guard("MPI_Testany", COMM_WORLD, || {
        let n = ccount(count, C::Count, "count")?;
        match testany_pass(requests, n)? {
            Some((i, st)) => {
                put(flag, 1, "flag")?;
                put(index, i.map_or(UNDEFINED, |i| i as c_int), "index")?;
                put_status(status, st)?;
                status_err(&st, "MPI_Testany")
            }
            None => {
                put(flag, 0, "flag")?;
                put(index, UNDEFINED, "index")
            }
        }
    })
}

fn somepass(
    requests: *mut c_int,
    n: usize,
    outcount: *mut c_int,
    indices: *mut c_int,
    statuses: *mut MpiStatus,
) -> Res<Option<c_int>> {
    let hs = crate::ffi::array(requests, n, "array_of_requests")?;
    let mut active = false;
    let mut k = 0usize;
    let mut err = false;
    for (i, &h) in hs.iter().enumerate() {
        match test_handle(h)? {
            Tested::Pending => active = true,
            Tested::Inactive => {}
            Tested::Complete(st, freed) => {
                if freed {
                    put(requests.wrapping_add(i), 0, "array_of_requests")?;
                }
                put(indices.wrapping_add(k), i as c_int, "array_of_indices")?;
                statuses_at(statuses, k, st)?;
                err |= st.error != C::Success;
                k += 1;
            }
        }
    }
    if err {
        // MPI_ERR_IN_STATUS: outcount, the indices and the statuses are
        // valid with it (MPI-4.0 3.7.5); before, outcount was not written.
        put(outcount, k as c_int, "outcount")?;
        return Err(Error::new(
            C::InStatus,
            "a request failed (see the statuses)",
        ));
    }
    if k == 0 && !active {
        return Ok(Some(UNDEFINED));
    }
    Ok((k > 0).then_some(k as c_int))
}

#[no_mangle]
pub extern "C" fn MPI_Waitsome(
    incount: c_int,
    requests: *mut c_int,
    outcount: *mut c_int,
    indices: *mut c_int,
    statuses: *mut MpiStatus,
) -> c_int {
    guard("MPI_Waitsome", COMM_WORLD, || {
        let n = ccount(incount, C::Count, "incount")?;
        loop {
            if let Some(k) = somepass(requests, n, outcount, indices, statuses)? {
                return put(outcount, k, "outcount");
            }
            crate::request::idle();
        }
    })
}

#[no_mangle]
pub extern "C" fn MPI_Testsome(
    incount: c_int,
    requests: *mut c_int,
    outcount: *mut c_int,
    indices: *mut c_int,
    statuses: *mut MpiStatus,
) -> c_int {
    guard("MPI_Testsome", COMM_WORLD, || {
        let n = ccount(incount, C::Count, "incount")?;
        let k = somepass(requests, n, outcount, indices, statuses)?.unwrap_or(0);
        put(outcount, k, "outcount")
    })
}

#[no_mangle]
pub extern "C" fn MPI_Cancel(request: *mut c_int) -> c_int {
    guard("MPI_Cancel", COMM_WORLD, || {
        let h = get(request, "request")?;
        let rt = rt()?;
        // The tables' lock is not held while a generalized request's
        // cancel callback runs: it may call MPI (mpi4py's report of a
        // Python exception calls MPI_Error_string), which would deadlock.
        let found = match tables().reqs.get(&h) {
            Some(Req::Pml { id, .. }) => Ok(Some(*id)),
            Some(Req::Greq(g)) => Err(g.clone()),
            Some(_) => Ok(None),
            None => {
                return Err(Error::new(
                    C::Request,
                    format!("invalid request handle {h}"),
                ))
            }
        };
        match found {
            Ok(Some(id)) => {
                rt.pml.cancel(id)?;
            }
            Ok(None) => {}
            Err(g) => return g.cancel(),
        }
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn MPI_Request_free(request: *mut c_int) -> c_int {
    guard("MPI_Request_free", COMM_WORLD, || {
        let h = get(request, "request")?;
        let rt = rt()?;
        let r = {
            let mut t = tables();
            if let Some(Req::Part(_)) = t.reqs.get(&h) {
                // Its send may not have started yet (partitions not
                // ready): there is nothing to finish in the background.
                return Err(Error::new(
                    C::Request,
                    format!("partitioned request {h} is active: complete it before freeing it"),
                ));
            }
            t.reqs.remove(&h)
        };
        match r {
            None => {
                return Err(Error::new(
                    C::Request,
                    format!("invalid request handle {h}"),
                ))
            }
            Some(Req::Pml {
                id,
                stage: Stage::Direct,
                persist,
                ..
            }) => {
                // The pml reads or writes the user's memory itself: the
                // datatype is no longer needed.
                rt.pml.request_free(id)?;
                if let Some(p) = persist {
                    p.release();
                }
            }
            Some(Req::Inactive(p))
            | Some(Req::Done {
                persist: Some(p), ..
            }) => p.release(),
            Some(r @ (Req::Pml { .. } | Req::Coll { .. } | Req::Greq(_) | Req::Pair(_))) => {
                // Staged data must outlive the operation: let it finish in
                // the background by parking it under a fresh handle that
                // nobody references; it completes on the next waits.
                let mut t = tables();
                let hidden = t.add_req(r);
                t.orphans_push(hidden);
            }
            Some(_) => {}
        }
        put(request, 0, "request")
    })
}

// ---------------------------------------------------------------- probe

fn probe_target(source: c_int, tag: c_int, comm: c_int) -> Res<u32> {
    let t = tables();
    let ce = t.comm(comm)?;
    let (size, ctx) = ce.p2p_target();
    if param_check() {
        if !((0..size).contains(&source) || source == ANY_SOURCE || source == PROC_NULL) {
            return Err(Error::new(
                C::Rank,
                format!("rank {source} is not in 0..{size}"),
            ));
        }
        if !((0..=TAG_UB).contains(&tag) || tag == ANY_TAG) {
            return Err(Error::new(
                C::Tag,
                format!("tag {tag} is outside 0..=MPI_TAG_UB"),
            ));
        }
    }
    Ok(ctx)
}

#[no_mangle]
pub extern "C" fn MPI_Probe(
    source: c_int,
    tag: c_int,
    comm: c_int,
    status: *mut MpiStatus,
) -> c_int {
    guard("MPI_Probe", comm, || {
        let ctx = probe_target(source, tag, comm)?;
        let rt = rt()?;
        loop {
            if let Some(s) = rt.pml.iprobe(ctx, source, tag)? {
                return put_status(status, St::from(s));
            }
            crate::request::idle();
        }
    })
}

#[no_mangle]
pub extern "C" fn MPI_Iprobe(
    source: c_int,
    tag: c_int,
    comm: c_int,
    flag: *mut c_int,
    status: *mut MpiStatus,
) -> c_int {
    guard("MPI_Iprobe", comm, || {
        let ctx = probe_target(source, tag, comm)?;
        let rt = rt()?;
        match rt.pml.iprobe(ctx, source, tag)? {
            Some(s) => {
                put(flag, 1, "flag")?;
                put_status(status, St::from(s))
            }
            None => put(flag, 0, "flag"),
        }
    })
}

const MESSAGE_NO_PROC: c_int = 1;

fn improbe_once(source: c_int, tag: c_int, comm: c_int) -> Res<Option<(c_int, St)>> {
    let ctx = probe_target(source, tag, comm)?;
    if source == PROC_NULL {
        return Ok(Some((
            MESSAGE_NO_PROC,
            St::from(tmpi_pml::Status::proc_null()),
        )));
    }
    let rt = rt()?;
    Ok(rt
        .pml
        .improbe(ctx, source, tag)?
        .map(|(m, s)| (tables().add_message(m), St::from(s))))
}

#[no_mangle]
pub extern "C" fn MPI_Mprobe(
    source: c_int,
    tag: c_int,
    comm: c_int,
    message: *mut c_int,
    status: *mut MpiStatus,
) -> c_int {
    guard("MPI_Mprobe", comm, || loop {
        if let Some((m, st)) = improbe_once(source, tag, comm)? {
            put(message, m, "message")?;
            return put_status(status, st);
        }
        crate::request::idle();
    })
}

#[no_mangle]
pub extern "C" fn MPI_Improbe(
    source: c_int,
    tag: c_int,
    comm: c_int,
    flag: *mut c_int,
    message: *mut c_int,
    status: *mut MpiStatus,
) -> c_int {
    guard("MPI_Improbe", comm, || {
        match improbe_once(source, tag, comm)? {
            Some((m, st)) => {
                put(flag, 1, "flag")?;
                put(message, m, "message")?;
                put_status(status, st)
            }
            None => put(flag, 0, "flag"),
        }
    })
}

fn start_mrecv(buf: *mut c_void, count: c_int, dtype: c_int, message: *mut c_int) -> Res<Req> {
    let mh = get(message, "message")?;
    let n = ccount(count, C::Count, "count")?;
    if mh == MESSAGE_NO_PROC {
        put(message, 0, "message")?;
        return Ok(Req::Done {
            st: St::from(tmpi_pml::Status::proc_null()),
            persist: None,
        });
    }
    let (m, t) = {
        let mut tb = tables();
        let t = tb.comm_type(dtype)?;
        let m = tb
            .messages
            .remove(&mh)
            .ok_or_else(|| Error::new(C::Request, format!("invalid message handle {mh}")))?;
        (m, t)
    };
    put(message, 0, "message")?;
    let rt = rt()?;
    let len = total_size(&t, n)?;
    let (raw, stage) = if t.is_contig() {
        (RawBufMut::from_raw(buf.cast(), len), Stage::Direct)
    } else if crate::env::pack_per_fragment() {
        let c = Box::new(convertor(&t, n)?);
        (RawBufMut::typed(buf.cast(), &c), Stage::Typed(c))
    } else {
        let mut v = vec![0u8; len];
        let raw = RawBufMut::from_slice(&mut v);
        (
            raw,
            Stage::Recv(Box::new(crate::request::RecvStage {
                buf: v,
                dst: buf as usize,
                count: n,
                t: Arc::clone(&t),
            })),
        )
    };
    // SAFETY: as for MPI_Irecv.
    let id = unsafe { rt.pml.imrecv(m, raw) }?;
    Ok(Req::Pml {
        id,
        stage,
        persist: None,
        comm: COMM_WORLD,
    })
}

#[no_mangle]
pub extern "C" fn MPI_Mrecv(
    buf: *mut c_void,
    count: c_int,
    dtype: c_int,
    message: *mut c_int,
    status: *mut MpiStatus,
) -> c_int {
    guard("MPI_Mrecv", COMM_WORLD, || {
        let r = start_mrecv(buf, count, dtype, message)?;
        blocking(r, status, "MPI_Mrecv")
    })
}

#[no_mangle]
pub extern "C" fn MPI_Imrecv(
    buf: *mut c_void,
    count: c_int,
    dtype: c_int,
    message: *mut c_int,
    request: *mut c_int,
) -> c_int {
    guard("MPI_Imrecv", COMM_WORLD, || {
        let r = start_mrecv(buf, count, dtype, message)?;
        let h = tables().add_req(r);
        put(request, h, "request")
    })
}

// ---------------------------------------------------------------- buffers, status

// MPI_Buffer_attach/detach: `comm_buffer`.

#[no_mangle]
pub extern "C" fn MPI_Test_cancelled(status: *const MpiStatus, flag: *mut c_int) -> c_int {
    guard("MPI_Test_cancelled", COMM_WORLD, || {
        let s = get(status, "status")?;
        put(flag, s.count_hi_and_cancelled & 1, "flag")
    })
}

fn elements(s: &MpiStatus, dtype: c_int, whole: bool) -> Res<i64> {
    let t = tables().dtype(dtype)?;
    let bytes = status_bytes(s);
    if t.size == 0 {
        return Ok(0);
    }
    if whole {
        if !bytes.is_multiple_of(t.size as u64) {
            return Ok(UNDEFINED as i64);
        }
        return Ok((bytes / t.size as u64) as i64);
    }
    // Primitive elements: whole items, then the primitives of a partial one
    // in type-map order (a struct of 1 int and 256 chars receiving 20 bytes
    // holds 17 elements).
    let per = t.nprim.max(1) as u64;
    let full = bytes / t.size as u64;
    let mut rest = bytes % t.size as u64;
    let Some(runs) = &t.prims else {
        let prim_size = (t.size as u64 / per).max(1);
        if !rest.is_multiple_of(prim_size) {
            return Ok(UNDEFINED as i64);
        }
        return Ok((full * per + rest / prim_size) as i64);
    };
    let mut n = full * per;
    for &(c, sz) in runs {
        let sz = sz.max(1) as u64;
        let k = (rest / sz).min(c as u64);
        n += k;
        rest -= k * sz;
        if k < c as u64 {
            break;
        }
    }
    if rest != 0 {
        return Ok(UNDEFINED as i64);
    }
    Ok(n as i64)
}

#[no_mangle]
pub extern "C" fn MPI_Get_count(
    status: *const MpiStatus,
    dtype: c_int,
    count: *mut c_int,
) -> c_int {
    guard("MPI_Get_count", COMM_WORLD, || {
        let s = get(status, "status")?;
        let n = elements(&s, dtype, true)?;
        put(count, c_int::try_from(n).unwrap_or(UNDEFINED), "count")
    })
}

#[no_mangle]
pub extern "C" fn MPI_Get_elements(
    status: *const MpiStatus,
    dtype: c_int,
    count: *mut c_int,
) -> c_int {
    guard("MPI_Get_elements", COMM_WORLD, || {
        let s = get(status, "status")?;
        let n = elements(&s, dtype, false)?;
        put(count, c_int::try_from(n).unwrap_or(UNDEFINED), "count")
    })
}

#[no_mangle]
pub extern "C" fn MPI_Get_elements_x(
    status: *const MpiStatus,
    dtype: c_int,
    count: *mut i64,
) -> c_int {
    guard("MPI_Get_elements_x", COMM_WORLD, || {
        let s = get(status, "status")?;
        put(count, elements(&s, dtype, false)?, "count")
    })
}

fn set_elements(status: *mut MpiStatus, dtype: c_int, n: i64) -> Res<()> {
    let t = tables().dtype(dtype)?;
    let mut s = get(status as *const MpiStatus, "status")?;
    let per = t.nprim.max(1) as i64;
    let n = n.max(0);
    let bytes = match &t.prims {
        // Whole items, then the first primitives of the next, in order.
        Some(runs) => {
            let mut b = (n / per) as u64 * t.size as u64;
            let mut left = (n % per) as u64;
            for &(c, sz) in runs {
                let k = left.min(c as u64);
                b += k * sz as u64;
                left -= k;
                if left == 0 {
                    break;
                }
            }
            b
        }
        None => (n * t.size as i64 / per) as u64,
    };
    s.count_lo = (bytes & 0xffff_ffff) as u32 as c_int;
    s.count_hi_and_cancelled = (((bytes >> 32) << 1) as c_int) | (s.count_hi_and_cancelled & 1);
    put(status, s, "status")
}

#[no_mangle]
pub extern "C" fn MPI_Status_set_elements(
    status: *mut MpiStatus,
    dtype: c_int,
    count: c_int,
) -> c_int {
    guard("MPI_Status_set_elements", COMM_WORLD, || {
        set_elements(status, dtype, count as i64)
    })
}

#[no_mangle]
pub extern "C" fn MPI_Status_set_elements_x(
    status: *mut MpiStatus,
    dtype: c_int,
    count: i64,
) -> c_int {
    guard("MPI_Status_set_elements_x", COMM_WORLD, || {
        set_elements(status, dtype, count)
    })
}

#[no_mangle]
pub extern "C" fn MPI_Status_set_cancelled(status: *mut MpiStatus, flag: c_int) -> c_int {
    guard("MPI_Status_set_cancelled", COMM_WORLD, || {
        let mut s = get(status as *const MpiStatus, "status")?;
        s.count_hi_and_cancelled = (s.count_hi_and_cancelled & !1) | c_int::from(flag != 0);
        put(status, s, "status")
    })
}

/// MPI-4.0 `MPI_Get_count` with an `MPI_Count` result (the whole range;
/// `MPI_UNDEFINED` when the bytes are not whole items).
#[no_mangle]
pub extern "C" fn MPI_Get_count_c(
    status: *const MpiStatus,
    dtype: c_int,
    count: *mut i64,
) -> c_int {
    guard("MPI_Get_count_c", COMM_WORLD, || {
        let s = get(status, "status")?;
        put(count, elements(&s, dtype, true)?, "count")
    })
}

/// MPI-4.0 `MPI_Get_elements_x` under its large-count name.
#[no_mangle]
pub extern "C" fn MPI_Get_elements_c(
    status: *const MpiStatus,
    dtype: c_int,
    count: *mut i64,
) -> c_int {
    MPI_Get_elements_x(status, dtype, count)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `MPI_Request_free` of an active persistent send gives back the
    /// datatype its `MPI_Send_init` took hold of, once the send is done:
    /// for a contiguous type (the pml's request reads the user's memory
    /// directly) and a strided one (the data is packed; the freed request
    /// finishes in the background, in the waiting calls' idle rounds). A
    /// singleton job (no launcher), sending to itself.
    #[test]
    fn freeing_an_active_persistent_send_gives_its_datatype_back() {
        const MPI_INT: c_int = 8;
        assert_eq!(
            crate::env::MPI_Init(std::ptr::null_mut(), std::ptr::null_mut()),
            0
        );
        let live_types = || tables().types.len();
        let mut contig = 0;
        let mut strided = 0;
        assert_eq!(
            crate::types::MPI_Type_contiguous(4, MPI_INT, &mut contig),
            0
        );
        assert_eq!(
            crate::types::MPI_Type_vector(4, 1, 2, MPI_INT, &mut strided),
            0
        );
        assert_eq!(crate::types::MPI_Type_commit(&mut contig), 0);
        assert_eq!(crate::types::MPI_Type_commit(&mut strided), 0);
        let before = live_types();
        let out = [7i32; 8];
        let mut inb = [0i32; 8];
        for t in [contig, strided] {
            let mut r = 0;
            let rc = MPI_Send_init(out.as_ptr().cast(), 1, t, 0, 5, COMM_WORLD, &mut r);
            assert_eq!(rc, 0);
            assert_eq!(MPI_Start(&mut r), 0);
            assert_eq!(MPI_Request_free(&mut r), 0);
            assert_eq!(r, 0, "MPI_Request_free sets the handle to MPI_REQUEST_NULL");
            let ignore = std::ptr::null_mut();
            assert_eq!(
                MPI_Recv(
                    inb.as_mut_ptr().cast(),
                    8,
                    MPI_INT,
                    0,
                    5,
                    COMM_WORLD,
                    ignore
                ),
                0
            );
        }
        assert_eq!(inb, [7, 7, 7, 7, 0, 0, 0, 0], "both sends arrived");
        // What a later waiting call does between its polls.
        for _ in 0..1000 {
            crate::request::idle();
        }
        assert_eq!(
            live_types(),
            before,
            "the requests' datatype holds are given back"
        );
        assert_eq!(crate::env::MPI_Finalize(), 0);
    }
}
