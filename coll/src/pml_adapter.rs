//! [`P2p`] over the real point-to-point layer ([`tmpi_pml::Pml`]).
//!
//! The pml works on raw buffer views that must stay valid until the
//! request completes; this adapter owns every buffer it hands over in a
//! table keyed by request id and gives it back (receives, truncated to the
//! received length) when `test` reports completion; for `irecv_into` it
//! keeps a reference to the caller's buffer instead. Besides
//! `Exec::start_round` (the in-place receive's region pointer), this module
//! is the only `unsafe` code of the crate.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use tmpi_pml::raw::{RawBuf, RawBufMut};
use tmpi_pml::{CommRecord, MpiErrorClass, Pml, ReqId, SendMode};

use crate::p2p::{Done, Endpoint, P2p, P2pHandle, SharedBytes, SMALL_SEND};
use crate::{CollError, Result};

enum Held {
    Send(Vec<u8>),
    Shared(SharedBytes),
    Recv(Vec<u8>),
    /// A receive into the caller's region (`irecv_into`): keeps the
    /// region's allocation alive; its length.
    RecvInto(Arc<Vec<u8>>, usize),
    /// A send from memory the caller keeps alive (`isend_raw`).
    Raw,
}

/// The pml as coll's transport.
pub struct PmlP2p {
    pml: Arc<Pml>,
    held: Mutex<HashMap<u64, Held>>,
}

impl std::fmt::Debug for PmlP2p {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PmlP2p").field("pml", &self.pml).finish()
    }
}

fn pml_err(e: tmpi_pml::PmlError) -> CollError {
    CollError::P2p {
        class: e.class(),
        message: e.to_string(),
    }
}

impl PmlP2p {
    /// Wraps `pml`. Nodes (for `split_type(SHARED)` and the `sm`
    /// component) are the pml's: the launcher's process mapping.
    pub fn new(pml: Arc<Pml>) -> Self {
        PmlP2p {
            pml,
            held: Mutex::new(HashMap::new()),
        }
    }

    /// The pml.
    pub fn pml(&self) -> &Arc<Pml> {
        &self.pml
    }

    fn held(&self) -> MutexGuard<'_, HashMap<u64, Held>> {
        self.held.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Drop for PmlP2p {
    fn drop(&mut self) {
        // Requests still in the pml may reference these buffers: never free
        // memory the pml might still write (leak instead; this only happens
        // when a job is torn down with collectives outstanding).
        let held = std::mem::take(&mut *self.held());
        if !held.is_empty() {
            tracing::warn!(target: "coll_base", "{} transport buffers still in flight at teardown", held.len());
            std::mem::forget(held);
        }
    }
}

impl P2p for PmlP2p {
    fn world_rank(&self) -> u32 {
        self.pml.rank()
    }

    fn world_size(&self) -> u32 {
        self.pml.size()
    }

    fn node_of(&self, world_rank: u32) -> u32 {
        self.pml.node_of(world_rank)
    }

    fn isend(&self, ep: &Endpoint, dest: u32, tag: i32, data: Vec<u8>) -> Result<P2pHandle> {
        let raw = RawBuf::from_slice(&data);
        // SAFETY: `data`'s heap buffer is moved (not reallocated) into
        // `held` below and stays there, unmodified, until `test` sees the
        // request complete; on teardown it is leaked, never freed early.
        let id = unsafe {
            self.pml
                .isend(ep.context_id, dest as i32, tag, raw, SendMode::Standard)
        }
        .map_err(pml_err)?;
        self.held().insert(id.0, Held::Send(data));
        Ok(P2pHandle(id.0))
    }

    fn isend_shared(
        &self,
        ep: &Endpoint,
        dest: u32,
        tag: i32,
        data: SharedBytes,
    ) -> Result<P2pHandle> {
        let raw = RawBuf::from_slice(data.as_slice());
        // SAFETY: `data` holds a reference to the buffer, kept in `held`
        // until `test` sees the request complete (leaked on teardown), so
        // the memory stays allocated; it is not modified meanwhile because
        // the schedule writes only through `Arc::make_mut`, which copies a
        // buffer that is shared (as it is while we hold `data`).
        let id = unsafe {
            self.pml
                .isend(ep.context_id, dest as i32, tag, raw, SendMode::Standard)
        }
        .map_err(pml_err)?;
        self.held().insert(id.0, Held::Shared(data));
        Ok(P2pHandle(id.0))
    }

    unsafe fn isend_raw(
        &self,
        ep: &Endpoint,
        dest: u32,
        tag: i32,
        data: *const u8,
        len: usize,
    ) -> Result<P2pHandle> {
        let raw = RawBuf::from_raw(data, len);
        // SAFETY: the caller guarantees the bytes stay valid and unmodified
        // until `test` reports the request complete (`P2p::isend_raw`).
        let id = unsafe {
            self.pml
                .isend(ep.context_id, dest as i32, tag, raw, SendMode::Standard)
        }
        .map_err(pml_err)?;
        self.held().insert(id.0, Held::Raw);
        Ok(P2pHandle(id.0))
    }

    fn send_small(&self, ep: &Endpoint, dest: u32, tag: i32, data: &[u8]) -> Result<bool> {
        if data.len() > SMALL_SEND {
            return Ok(false);
        }
        self.send_blocking(ep, dest, tag, data)
    }

    fn send_blocking(&self, ep: &Endpoint, dest: u32, tag: i32, data: &[u8]) -> Result<bool> {
        let raw = RawBuf::from_slice(data);
        // SAFETY: `data` is borrowed, valid and unmodified for the whole
        // call, and `send_blocking` returns only once the pml no longer
        // needs it (a small message is eager: copied to the transport, or
        // queued with a copy when the transport is busy, and the call waits
        // for that queued send without needing the receiver; a larger one
        // may wait for the receiver's match and copy).
        let st = unsafe {
            self.pml
                .send_blocking(ep.context_id, dest as i32, tag, raw, SendMode::Standard)
        }
        .map_err(pml_err)?;
        if st.error != MpiErrorClass::Success {
            return Err(CollError::P2p {
                class: st.error,
                message: format!("collective message to rank {dest}: {}", st.error.name()),
            });
        }
        Ok(true)
    }

    fn send_eager(&self, ep: &Endpoint, dest: u32, tag: i32, data: &[u8]) -> Result<bool> {
        let raw = RawBuf::from_slice(data);
        // SAFETY: `data` is borrowed, valid and unmodified for the whole
        // call; an eager send returns once the pml no longer needs it.
        let st = unsafe { self.pml.send_eager(ep.context_id, dest as i32, tag, raw) }
            .map_err(pml_err)?;
        match st {
            None => Ok(false),
            Some(st) if st.error == MpiErrorClass::Success => Ok(true),
            Some(st) => Err(CollError::P2p {
                class: st.error,
                message: format!("collective message to rank {dest}: {}", st.error.name()),
            }),
        }
    }

    fn has_recv_small(&self) -> bool {
        true
    }

    fn shares_memory(&self) -> bool {
        true
    }

    fn recv_small(
        &self,
        ep: &Endpoint,
        source: u32,
        tag: i32,
        buf: &mut [u8],
    ) -> Result<Option<usize>> {
        let raw = RawBufMut::from_raw(buf.as_mut_ptr(), buf.len());
        // SAFETY: `buf` is borrowed mutably for the whole call, and
        // `recv_blocking` returns only once the request completed (the pml
        // no longer writes through the view).
        let st = unsafe {
            self.pml
                .recv_blocking(ep.context_id, source as i32, tag, raw)
        }
        .map_err(pml_err)?;
        if st.error != MpiErrorClass::Success {
            return Err(CollError::P2p {
                class: st.error,
                message: format!("collective message from rank {source}: {}", st.error.name()),
            });
        }
        if st.count > buf.len() {
            return Err(CollError::Intern(format!(
                "pml reported {} bytes received into a {}-byte buffer",
                st.count,
                buf.len()
            )));
        }
        Ok(Some(st.count))
    }

    fn irecv(&self, ep: &Endpoint, source: u32, tag: i32, max_len: usize) -> Result<P2pHandle> {
        // Not zeroed (a large receive would otherwise pay a memset of the
        // whole buffer per message): the pml writes the bytes, and `test`
        // exposes only the `count` bytes it reports as received.
        // From the pool: a fresh allocation of a large size would be
        // page-faulted in by the kernel on every message (see `crate::pool`).
        let mut buf: Vec<u8> = crate::pool::take(max_len);
        debug_assert!(buf.capacity() >= max_len);
        let raw = RawBufMut::from_raw(buf.as_mut_ptr(), max_len);
        // SAFETY: as for isend: the allocation (capacity `max_len`) lives in
        // `held`, untouched by anyone else, until the pml reports the
        // receive complete; the pml only writes through the raw view.
        let id =
            unsafe { self.pml.irecv(ep.context_id, source as i32, tag, raw) }.map_err(pml_err)?;
        self.held().insert(id.0, Held::Recv(buf));
        Ok(P2pHandle(id.0))
    }

    unsafe fn irecv_into(
        &self,
        ep: &Endpoint,
        source: u32,
        tag: i32,
        keep: Arc<Vec<u8>>,
        dst: *mut u8,
        max_len: usize,
    ) -> Result<P2pHandle> {
        let raw = RawBufMut::from_raw(dst, max_len);
        // SAFETY: the caller guarantees `dst..dst + max_len` is writable,
        // inside `keep`'s allocation and untouched by anyone else until the
        // request completes; `keep` stays in `held` until `test` sees the
        // completion (leaked on teardown), so the memory outlives the
        // pml's writes.
        let id =
            unsafe { self.pml.irecv(ep.context_id, source as i32, tag, raw) }.map_err(pml_err)?;
        self.held().insert(id.0, Held::RecvInto(keep, max_len));
        Ok(P2pHandle(id.0))
    }

    fn test(&self, h: P2pHandle) -> Result<Option<Done>> {
        let Some(st) = self.pml.test(ReqId(h.0)).map_err(pml_err)? else {
            return Ok(None);
        };
        let held = self.held().remove(&h.0);
        if st.error != MpiErrorClass::Success {
            return Err(CollError::P2p {
                class: st.error,
                message: format!(
                    "collective message from rank {}: {}",
                    st.source,
                    st.error.name()
                ),
            });
        }
        match held {
            Some(Held::Send(buf)) => {
                // The pml is done with it: now it may be freed.
                drop(buf);
                Ok(Some(Done::Sent))
            }
            Some(Held::Raw) => Ok(Some(Done::Sent)),
            Some(Held::Shared(data)) => {
                // The pml is done with it: the schedule may write again.
                drop(data);
                Ok(Some(Done::Sent))
            }
            Some(Held::Recv(mut b)) => {
                if st.count > b.capacity() {
                    return Err(CollError::Intern(format!(
                        "pml reported {} bytes received into a {}-byte buffer",
                        st.count,
                        b.capacity()
                    )));
                }
                // SAFETY: the pml completed the receive without error and
                // wrote its `count <= capacity` bytes at the start of the
                // allocation.
                unsafe { b.set_len(st.count) };
                Ok(Some(Done::Received(b)))
            }
            Some(Held::RecvInto(keep, max_len)) => {
                // The pml is done writing: the caller may use the region.
                drop(keep);
                if st.count > max_len {
                    return Err(CollError::Intern(format!(
                        "pml reported {} bytes received into a {max_len}-byte region",
                        st.count
                    )));
                }
                Ok(Some(Done::ReceivedInPlace(st.count)))
            }
            None => Err(CollError::Intern(format!("unknown pml request {}", h.0))),
        }
    }

    fn progress(&self) -> bool {
        self.pml.progress() > 0
    }

    fn test_progresses(&self) -> bool {
        // `Pml::test` polls the BTLs when the request is not complete yet.
        true
    }

    fn set_progress_hook(
        &self,
        pending: Arc<std::sync::atomic::AtomicUsize>,
        run: Box<dyn Fn() + Send + Sync>,
    ) -> bool {
        self.pml.set_progress_hook(pending, run)
    }

    fn idle(&self) {
        // The pml's hooks run here as in its own waiting rounds: a rank
        // waiting in a blocking collective still serves the one-sided
        // requests aimed at it (osc's pt2pt component registers a hook).
        self.pml.run_progress_hooks();
        // No `spin_loop` hint when spinning: as in the pml's own waiting
        // loop, the `pause` it emits delays noticing the peer's message.
        if self.pml.yields_when_idle() {
            std::thread::yield_now();
        }
    }

    fn peer_finalized(&self, w: u32) -> bool {
        self.pml.peer_gone(w)
    }

    fn comm_added(&self, ep: &Endpoint) -> Result<()> {
        self.pml
            .add_comm(CommRecord {
                ctx: ep.context_id,
                rank: ep.rank as i32,
                world: ep.world.to_vec(),
            })
            .map_err(pml_err)
    }

    fn comm_removed(&self, context_id: u32) {
        if let Err(e) = self.pml.remove_comm(context_id) {
            tracing::warn!(target: "coll_base", "pml remove_comm({context_id}): {e}");
        }
    }
}
