//! Buffers for buffered sends: the process's (`MPI_Buffer_attach`/
//! `detach`) and, MPI-4.1, a communicator's own (`MPI_Comm_attach_buffer`
//! and friends) and a session's (`MPI_Session_attach_buffer` and friends,
//! in `session.rs` over [`session_attach`] and its kin),
//! `MPI_BUFFER_AUTOMATIC` and the flush calls.
//!
//! The pml copies every buffered send's data into memory of its own and
//! only accounts the bytes against one capacity; the user's buffer is
//! never written (MPI lets the library use it or not). So every attached
//! buffer adds its size to that one capacity, and `MPI_BUFFER_AUTOMATIC`
//! (the library allocates as needed) makes it unbounded. A buffered send
//! that fits in all the attached buffers together succeeds whichever
//! communicator it uses: a correct program runs as the standard says;
//! what tmpi does not detect is a send exceeding the space of the one
//! buffer MPI-4.1 would pick for it.
//!
//! Changing the capacity, flushing and detaching wait until the buffered
//! sends in flight completed (the pml's `buffer_detach`), as
//! `MPI_Buffer_detach` always did; the non-blocking flushes do the same
//! and return a completed request.

use std::collections::HashMap;
use std::ffi::{c_int, c_void};
use std::sync::Mutex;

use crate::error::{guard, Error, MpiErrorClass as C, Res};
use crate::ffi::{count as ccount, put};
use crate::request::{Req, St};
use crate::state::{rt, tables, COMM_WORLD};

/// `MPI_BUFFER_AUTOMATIC` (mpi.h): `(void *)-2`.
const AUTOMATIC: usize = usize::MAX - 1;

/// An attached buffer: its address and size as the user gave them.
#[derive(Clone, Copy)]
struct Attached {
    addr: usize,
    size: c_int,
}

impl Attached {
    fn automatic(&self) -> bool {
        self.addr == AUTOMATIC
    }
}

#[derive(Default)]
struct Buffers {
    process: Option<Attached>,
    comms: HashMap<c_int, Attached>,
    sessions: HashMap<c_int, Attached>,
}

impl Buffers {
    /// The pml's capacity for these buffers (`None`: no buffer at all).
    fn capacity(&self) -> Option<usize> {
        let all: Vec<&Attached> = self
            .process
            .iter()
            .chain(self.comms.values())
            .chain(self.sessions.values())
            .collect();
        if all.is_empty() {
            return None;
        }
        if all.iter().any(|a| a.automatic()) {
            return Some(usize::MAX / 2);
        }
        Some(all.iter().map(|a| a.size.max(0) as usize).sum())
    }
}

static BUFFERS: Mutex<Option<Buffers>> = Mutex::new(None);

/// Runs `f` on the buffers; when it changed the capacity, the pml's is
/// replaced (waiting for the buffered sends in flight). `flush`: wait even
/// if nothing changed.
fn with_buffers<T>(flush: bool, f: impl FnOnce(&mut Buffers) -> Res<T>) -> Res<T> {
    let rt = rt()?;
    let mut g = BUFFERS.lock().unwrap_or_else(|p| p.into_inner());
    let b = g.get_or_insert_with(Buffers::default);
    let before = b.capacity();
    let v = f(b)?;
    let after = b.capacity();
    if before != after || flush {
        if before.is_some() {
            rt.pml.buffer_detach()?;
        }
        if let Some(cap) = after {
            rt.pml.buffer_attach(cap)?;
        }
    }
    Ok(v)
}

fn attach(buffer: *mut c_void, size: c_int) -> Res<Attached> {
    let addr = buffer as usize;
    if addr == AUTOMATIC {
        return Ok(Attached { addr, size: 0 });
    }
    ccount(size, C::Arg, "size")?;
    Ok(Attached { addr, size })
}

fn give_back(a: Attached, buffer_addr: *mut c_void, size: *mut c_int) -> Res<()> {
    put(buffer_addr.cast::<usize>(), a.addr, "buffer_addr")?;
    put(size, a.size, "size")
}

fn check_comm(comm: c_int) -> Res<()> {
    tables().comm(comm).map(drop)
}

pub(crate) fn completed_request(request: *mut c_int) -> Res<()> {
    crate::ffi::out_arg(request, "request")?;
    let h = tables().add_req(Req::Done {
        st: St::empty(),
        persist: None,
    });
    put(request, h, "request")
}

#[no_mangle]
pub extern "C" fn MPI_Buffer_attach(buffer: *mut c_void, size: c_int) -> c_int {
    guard("MPI_Buffer_attach", COMM_WORLD, || {
        let a = attach(buffer, size)?;
        with_buffers(false, |b| {
            if b.process.is_some() {
                return Err(Error::new(C::Buffer, "a buffer is already attached"));
            }
            b.process = Some(a);
            Ok(())
        })
    })
}

#[no_mangle]
pub extern "C" fn MPI_Buffer_detach(buffer_addr: *mut c_void, size: *mut c_int) -> c_int {
    guard("MPI_Buffer_detach", COMM_WORLD, || {
        let a = with_buffers(true, |b| {
            b.process
                .take()
                .ok_or_else(|| Error::new(C::Buffer, "no buffer attached"))
        })?;
        give_back(a, buffer_addr, size)
    })
}

#[no_mangle]
pub extern "C" fn MPI_Buffer_flush() -> c_int {
    guard("MPI_Buffer_flush", COMM_WORLD, || {
        with_buffers(true, |_| Ok(()))
    })
}

#[no_mangle]
pub extern "C" fn MPI_Buffer_iflush(request: *mut c_int) -> c_int {
    guard("MPI_Buffer_iflush", COMM_WORLD, || {
        with_buffers(true, |_| Ok(()))?;
        completed_request(request)
    })
}

#[no_mangle]
pub extern "C" fn MPI_Comm_attach_buffer(comm: c_int, buffer: *mut c_void, size: c_int) -> c_int {
    guard("MPI_Comm_attach_buffer", comm, || {
        check_comm(comm)?;
        let a = attach(buffer, size)?;
        with_buffers(false, |b| {
            if b.comms.contains_key(&comm) {
                return Err(Error::new(
                    C::Buffer,
                    "the communicator has a buffer attached already",
                ));
            }
            b.comms.insert(comm, a);
            Ok(())
        })
    })
}

#[no_mangle]
pub extern "C" fn MPI_Comm_detach_buffer(
    comm: c_int,
    buffer_addr: *mut c_void,
    size: *mut c_int,
) -> c_int {
    guard("MPI_Comm_detach_buffer", comm, || {
        check_comm(comm)?;
        let a = with_buffers(true, |b| {
            b.comms
                .remove(&comm)
                .ok_or_else(|| Error::new(C::Buffer, "the communicator has no buffer attached"))
        })?;
        give_back(a, buffer_addr, size)
    })
}

/// `MPI_Comm_free` of `comm`: its buffer, if any, is detached (its size
/// no longer counts; a later communicator may get the same handle).
pub(crate) fn forget(comm: c_int) -> Res<()> {
    let attached = BUFFERS
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .as_ref()
        .is_some_and(|b| b.comms.contains_key(&comm));
    if attached {
        with_buffers(false, |b| {
            b.comms.remove(&comm);
            Ok(())
        })?;
    }
    Ok(())
}

#[no_mangle]
pub extern "C" fn MPI_Comm_flush_buffer(comm: c_int) -> c_int {
    guard("MPI_Comm_flush_buffer", comm, || {
        check_comm(comm)?;
        with_buffers(true, |_| Ok(()))
    })
}

#[no_mangle]
pub extern "C" fn MPI_Comm_iflush_buffer(comm: c_int, request: *mut c_int) -> c_int {
    guard("MPI_Comm_iflush_buffer", comm, || {
        check_comm(comm)?;
        with_buffers(true, |_| Ok(()))?;
        completed_request(request)
    })
}

/// `MPI_Session_attach_buffer` of an open `session`.
pub(crate) fn session_attach(session: c_int, buffer: *mut c_void, size: c_int) -> Res<()> {
    let a = attach(buffer, size)?;
    with_buffers(false, |b| {
        if b.sessions.contains_key(&session) {
            return Err(Error::new(
                C::Buffer,
                "the session has a buffer attached already",
            ));
        }
        b.sessions.insert(session, a);
        Ok(())
    })
}

/// `MPI_Session_detach_buffer` of an open `session`.
pub(crate) fn session_detach(
    session: c_int,
    buffer_addr: *mut c_void,
    size: *mut c_int,
) -> Res<()> {
    let a = with_buffers(true, |b| {
        b.sessions
            .remove(&session)
            .ok_or_else(|| Error::new(C::Buffer, "the session has no buffer attached"))
    })?;
    give_back(a, buffer_addr, size)
}

/// Waits for the buffered sends in flight (the flush calls).
pub(crate) fn flush() -> Res<()> {
    with_buffers(true, |_| Ok(()))
}

/// `MPI_Session_finalize` of `session`: its buffer, if any, is detached.
pub(crate) fn forget_session(session: c_int) -> Res<()> {
    let attached = BUFFERS
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .as_ref()
        .is_some_and(|b| b.sessions.contains_key(&session));
    if attached {
        with_buffers(false, |b| {
            b.sessions.remove(&session);
            Ok(())
        })?;
    }
    Ok(())
}
