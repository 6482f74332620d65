//! Partitioned point-to-point communication (MPI-4.0 chapter 4):
//! `MPI_Psend_init`, `MPI_Precv_init`, `MPI_Pready(_range, _list)`,
//! `MPI_Parrived`.
//!
//! A partitioned request is a persistent request (`Req::Inactive` between
//! rounds, `Req::Part` while active) whose `Persist` carries a [`Part`]:
//! `MPI_Start` starts a round. The buffer travels as one message of
//! `partitions × count` items on the ordinary point-to-point path, with
//! the user's (peer, tag, communicator) envelope:
//!
//! * the receive side posts that one receive at `MPI_Start`;
//! * the send side marks partitions ready (`MPI_Pready*`, from any thread)
//!   and starts the send when the round's last partition is marked.
//!
//! `MPI_Parrived` reports a partition arrived once the whole message did
//! (it tests the receive); on an inactive request it says true, as the
//! round's data, if any, is there. `MPI_Wait`/`MPI_Test` and the other
//! completion calls complete a round like a persistent request's. The
//! send or receive runs under a hidden request handle kept in the
//! [`Part`]'s round, behind its own lock: `MPI_Pready` and `MPI_Parrived`
//! from other threads never touch the partitioned request's own table
//! entry, which a waiting thread takes out while it tests it.
//!
//! Matching: a partitioned send matches the partitioned receive of the
//! same envelope as an ordinary send would; MPI-4.0 §4.2 makes mixing
//! partitioned and other messages on one envelope erroneous, and tmpi does
//! not tell them apart (docs/capi.md "Partitioned communication").

use std::collections::BTreeMap;
use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use tmpi_pml::{SendMode, ANY_SOURCE, ANY_TAG};

use crate::error::{guard, Error, MpiErrorClass as C, Res};
use crate::ffi::{out_arg, put};
use crate::request::{test_handle, Persist, Req, St, Tested};
use crate::state::{tables, COMM_WORLD};

/// `MPI_Count` (mpi.h: `long long`).
type Count = i64;

/// What a partitioned request sends or receives, and its current round.
#[derive(Debug)]
pub(crate) struct Part {
    send: bool,
    partitions: usize,
    /// The request's handle (for [`forget`]).
    handle: AtomicI32,
    buf: usize,
    /// Items of `dtype` in the whole buffer: partitions × count.
    count: c_int,
    /// The datatype handle the request holds (released with the request).
    dtype: c_int,
    peer: c_int,
    tag: c_int,
    comm: c_int,
    round: Mutex<Round>,
}

/// One round, from `MPI_Start` to completion.
#[derive(Debug, Default)]
struct Round {
    active: bool,
    /// Send side: the partitions marked ready.
    ready: Vec<bool>,
    /// Send side: partitions not marked yet.
    left: usize,
    /// The hidden handle of the started send or receive.
    inner: Option<c_int>,
    /// Its status once complete (or the error that ended it).
    done: Option<St>,
}

impl Part {
    fn round(&self) -> MutexGuard<'_, Round> {
        self.round.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Partitioned requests by handle, from init to `MPI_Request_free`:
/// `MPI_Pready*` and `MPI_Parrived` find their [`Part`] here.
static PARTS: Mutex<BTreeMap<c_int, Arc<Part>>> = Mutex::new(BTreeMap::new());

fn parts() -> MutexGuard<'static, BTreeMap<c_int, Arc<Part>>> {
    PARTS.lock().unwrap_or_else(|p| p.into_inner())
}

fn lookup(h: c_int) -> Option<Arc<Part>> {
    parts().get(&h).cloned()
}

/// Drops a freed request's entry.
pub(crate) fn forget(part: &Arc<Part>) {
    let h = part.handle.load(Ordering::Relaxed);
    let mut g = parts();
    if g.get(&h).is_some_and(|p| Arc::ptr_eq(p, part)) {
        g.remove(&h);
    }
}

/// `MPI_ERR_REQUEST` for a handle that is no partitioned request.
fn not_partitioned(h: c_int, what: &str) -> Error {
    let known = tables().reqs.get(&h).is_some();
    Error::new(
        C::Request,
        if known {
            format!("request {h} is not a partitioned {what}")
        } else {
            format!("invalid request handle {h}")
        },
    )
}

/// The partitioned request `h` of the right side (`send`).
fn part_of(h: c_int, part: Option<Arc<Part>>, send: bool) -> Res<Arc<Part>> {
    let what = if send { "send" } else { "receive" };
    match part {
        Some(p) if p.send == send => Ok(p),
        Some(_) => Err(Error::new(
            C::Request,
            format!(
                "request {h} is a partitioned {}, not a {what}",
                if send { "receive" } else { "send" }
            ),
        )),
        None => Err(not_partitioned(h, what)),
    }
}

/// Partition `i` of `n` as an index.
fn partition(i: c_int, n: usize) -> Res<usize> {
    usize::try_from(i)
        .ok()
        .filter(|&i| i < n)
        .ok_or_else(|| Error::new(C::Arg, format!("partition {i} is not in 0..{n}")))
}

/// `MPI_Psend_init` / `MPI_Precv_init`.
#[allow(clippy::too_many_arguments)]
fn init(
    name: &'static str,
    send: bool,
    buf: *const c_void,
    partitions: c_int,
    count: Count,
    dtype: c_int,
    peer: c_int,
    tag: c_int,
    comm: c_int,
    request: *mut c_int,
) -> c_int {
    guard(name, comm, || {
        out_arg(request, "request")?;
        let parts_n = usize::try_from(partitions)
            .ok()
            .filter(|&n| n >= 1)
            .ok_or_else(|| Error::new(C::Arg, format!("partitions = {partitions} is below 1")))?;
        if count < 0 {
            return Err(Error::new(C::Count, format!("count = {count} is negative")));
        }
        let total = Count::from(partitions)
            .checked_mul(count)
            .and_then(|t| c_int::try_from(t).ok())
            .ok_or_else(|| {
                Error::new(
                    C::Count,
                    format!(
                        "{partitions} partitions of {count} items are beyond INT_MAX items: \
                         tmpi sends a partitioned buffer as one message of int-counted items"
                    ),
                )
            })?;
        if peer == ANY_SOURCE {
            return Err(Error::new(
                C::Rank,
                "MPI_ANY_SOURCE is not allowed in partitioned communication",
            ));
        }
        if tag == ANY_TAG {
            return Err(Error::new(
                C::Tag,
                "MPI_ANY_TAG is not allowed in partitioned communication",
            ));
        }
        crate::p2p::check_args(buf, total as usize, dtype, peer, tag, comm, !send)?;
        let held = tables().hold_type(dtype);
        let part = Arc::new(Part {
            send,
            partitions: parts_n,
            handle: AtomicI32::new(0),
            buf: buf as usize,
            count: total,
            dtype: held,
            peer,
            tag,
            comm,
            round: Mutex::new(Round::default()),
        });
        let p = Persist {
            send: send.then_some(SendMode::Standard),
            buf: buf as usize,
            count: total as usize,
            dtype: held,
            peer,
            tag,
            comm,
            coll: None,
            part: Some(Arc::clone(&part)),
        };
        let h = tables().add_req(Req::Inactive(Arc::new(p)));
        part.handle.store(h, Ordering::Relaxed);
        parts().insert(h, part);
        put(request, h, "request")
    })
}

#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub extern "C" fn MPI_Psend_init(
    buf: *const c_void,
    partitions: c_int,
    count: Count,
    dtype: c_int,
    dest: c_int,
    tag: c_int,
    comm: c_int,
    _info: c_int,
    request: *mut c_int,
) -> c_int {
    init(
        "MPI_Psend_init",
        true,
        buf,
        partitions,
        count,
        dtype,
        dest,
        tag,
        comm,
        request,
    )
}

#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub extern "C" fn MPI_Precv_init(
    buf: *mut c_void,
    partitions: c_int,
    count: Count,
    dtype: c_int,
    source: c_int,
    tag: c_int,
    comm: c_int,
    _info: c_int,
    request: *mut c_int,
) -> c_int {
    init(
        "MPI_Precv_init",
        false,
        buf.cast_const(),
        partitions,
        count,
        dtype,
        source,
        tag,
        comm,
        request,
    )
}

/// `MPI_Start` of an inactive partitioned request: a new round; the
/// receive side posts its receive.
pub(crate) fn start(part: &Part) -> Res<()> {
    let mut r = part.round();
    if r.active {
        return Err(Error::new(
            C::Request,
            "the partitioned request is already active",
        ));
    }
    let inner = if part.send {
        None
    } else {
        let q = crate::p2p::start_recv(
            part.buf as *mut c_void,
            part.count,
            part.dtype,
            part.peer,
            part.tag,
            part.comm,
            None,
        )?;
        Some(tables().add_req(q))
    };
    let n = if part.send { part.partitions } else { 0 };
    *r = Round {
        active: true,
        ready: vec![false; n],
        left: n,
        inner,
        done: None,
    };
    Ok(())
}

/// Tests the round's send or receive once; its status once complete.
fn poll(r: &mut Round) -> Option<St> {
    if r.done.is_none() {
        let h = r.inner?;
        let st = match test_handle(h) {
            Ok(Tested::Pending) => return None,
            Ok(Tested::Complete(st, _)) => st,
            Ok(Tested::Inactive) => St::empty(),
            Err(e) => {
                let mut st = St::empty();
                st.error = e.class;
                st
            }
        };
        r.inner = None;
        r.done = Some(st);
    }
    r.done
}

/// Tests an active partitioned request (`Req::Part`): its status once the
/// round is complete, which makes the request inactive.
pub(crate) fn complete(p: &Persist) -> Option<St> {
    let Some(part) = &p.part else {
        let mut st = St::empty();
        st.error = C::Intern;
        return Some(st);
    };
    let mut r = part.round();
    let st = poll(&mut r)?;
    r.active = false;
    r.done = None;
    Some(st)
}

/// Marks the partitions `which` gives (from the partition count) ready in
/// the active round of send request `request`; the last one starts the
/// send. Nothing is marked if any is out of range or already ready.
fn mark(name: &'static str, request: c_int, which: impl FnOnce(usize) -> Res<Vec<usize>>) -> c_int {
    let part = lookup(request);
    let comm = part.as_ref().map_or(COMM_WORLD, |p| p.comm);
    guard(name, comm, || {
        let part = part_of(request, part, true)?;
        let list = which(part.partitions)?;
        let mut r = part.round();
        if !r.active {
            return Err(Error::new(
                C::Request,
                format!("partitioned send {request} is not active (MPI_Start starts a round)"),
            ));
        }
        let mut seen = vec![false; part.partitions];
        for &i in &list {
            if r.ready[i] || seen[i] {
                return Err(Error::new(
                    C::Arg,
                    format!("partition {i} is already ready in this round"),
                ));
            }
            seen[i] = true;
        }
        for &i in &list {
            r.ready[i] = true;
        }
        r.left -= list.len();
        if r.left == 0 && r.inner.is_none() && r.done.is_none() {
            match crate::p2p::start_send(
                part.buf as *const c_void,
                part.count,
                part.dtype,
                part.peer,
                part.tag,
                part.comm,
                SendMode::Standard,
                None,
            ) {
                Ok(q) => r.inner = Some(tables().add_req(q)),
                Err(e) => {
                    // The round ends with the error (its wait reports it).
                    let mut st = St::empty();
                    st.error = e.class;
                    r.done = Some(st);
                    return Err(e);
                }
            }
        }
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn MPI_Pready(partition_: c_int, request: c_int) -> c_int {
    mark("MPI_Pready", request, |n| {
        Ok(vec![partition(partition_, n)?])
    })
}

#[no_mangle]
pub extern "C" fn MPI_Pready_range(low: c_int, high: c_int, request: c_int) -> c_int {
    mark("MPI_Pready_range", request, |n| {
        let (lo, hi) = (partition(low, n)?, partition(high, n)?);
        if lo > hi {
            return Err(Error::new(
                C::Arg,
                format!("partition_low {low} is above partition_high {high}"),
            ));
        }
        Ok((lo..=hi).collect())
    })
}

#[no_mangle]
pub extern "C" fn MPI_Pready_list(
    length: c_int,
    partitions: *const c_int,
    request: c_int,
) -> c_int {
    mark("MPI_Pready_list", request, |n| {
        let len = crate::ffi::count(length, C::Arg, "length")?;
        crate::ffi::array(partitions, len, "array_of_partitions")?
            .into_iter()
            .map(|i| partition(i, n))
            .collect()
    })
}

#[no_mangle]
pub extern "C" fn MPI_Parrived(request: c_int, partition_: c_int, flag: *mut c_int) -> c_int {
    let part = lookup(request);
    let comm = part.as_ref().map_or(COMM_WORLD, |p| p.comm);
    guard("MPI_Parrived", comm, || {
        out_arg(flag, "flag")?;
        let part = part_of(request, part, false)?;
        partition(partition_, part.partitions)?;
        let mut r = part.round();
        let arrived = !r.active || poll(&mut r).is_some();
        put(flag, c_int::from(arrived), "flag")
    })
}
