//! The blocking calls' fast path in the driver: an eager send straight
//! into the peer's BTL direct channel, a receive taken straight from the
//! source's (the core's side is `core/direct.rs`).

use crate::matching::Pattern;
use crate::net::BTL_TAG_PML;
use crate::raw::{RawBuf, RawBufMut};
use crate::request::{ReqId, SendMode, Status};
use crate::PmlError;

use super::Inner;

/// What one look at a direct channel found ([`Inner::recv_direct`]).
enum DirectLook {
    /// The receive's message, taken.
    Taken(Status),
    /// Nothing yet.
    Empty,
    /// Something the direct path does not take for this receive (another
    /// kind of fragment, another tag, a message it cannot deliver), or no
    /// direct path now: looking again cannot help before a polling round.
    Other,
}

impl Inner {
    /// The blocking send's fast path: an eager send with nothing queued
    /// before it goes straight to the transport's direct channel, without
    /// a request or an action (docs/pml.md "Blocking calls and the
    /// lock"): `Some(Ok(status))` sent; `Some(Err(e))` the sender's
    /// bookkeeping is done but the direct channel refused, the fragment
    /// goes through the transport (`Pml::send_eager_transport`); `None`
    /// not such a send, nothing was done.
    ///
    /// # Safety
    /// `buf` is valid for reads and unmodified during the call.
    #[inline(always)]
    pub(super) unsafe fn eager_now(
        &mut self,
        ctx: u32,
        dest: i32,
        tag: i32,
        buf: RawBuf,
        mode: SendMode,
    ) -> Result<Option<Result<Status, crate::core::EagerSend>>, PmlError> {
        if self.tm || !self.pending.is_empty() || self.core.has_actions() {
            return Ok(None);
        }
        let Some(e) = self
            .core
            .eager_direct(&self.limits, ctx, dest, tag, buf.len(), mode)?
        else {
            return Ok(None);
        };
        if let (Some(Some(tx)), true) = (self.direct.get(e.peer as usize), buf.is_contiguous()) {
            // SAFETY: every use of the BTL modules and of their direct
            // handles happens under the pml's lock, held by the caller
            // (DirectSend's contract; a finalized module's handle
            // refuses); `buf` is valid for reads during this call
            // (contract) and contiguous.
            if unsafe { tx.try_send(BTL_TAG_PML, &e.hdr, buf.as_slice()) } {
                return Ok(Some(Ok(e.st)));
            }
        }
        Ok(Some(Err(e)))
    }

    /// The blocking receive's fast path: the next eager message of `src`
    /// (world rank `peer`, `Core::direct_source`) taken straight from its
    /// BTL's direct channel when it is this receive's (`Core::direct_ready`,
    /// `Core::take_direct`): no
    /// request, no matching queue, no polling round. A receiver behind a
    /// faster sender (a stream, a bcast or reduce at 2 ranks) finds its
    /// message there; otherwise it costs one look at the channel.
    /// `posted`: the receive's request once it is posted (a waiting
    /// round), withdrawn from the matcher and released when the message
    /// is taken.
    ///
    /// # Safety
    /// `buf` is valid for writes during the call.
    #[inline(always)]
    unsafe fn recv_direct(
        &mut self,
        peer: u32,
        pat: &Pattern,
        buf: RawBufMut,
        posted: Option<ReqId>,
    ) -> DirectLook {
        if !self.pending.is_empty() || !self.core.direct_ready(peer, usize::from(posted.is_some()))
        {
            return DirectLook::Other;
        }
        let Some(rx) = self.direct_rx.get(peer as usize).and_then(Option::as_ref) else {
            return DirectLook::Other;
        };
        let core = &mut self.core;
        let mut st = None;
        let mut seen = false;
        let mut take = |btl_tag, bytes: &[u8]| {
            seen = true;
            if btl_tag != BTL_TAG_PML {
                return false;
            }
            // SAFETY: `buf` is valid for writes (contract).
            st = unsafe { core.take_direct(peer, pat, buf, posted, bytes) };
            st.is_some()
        };
        // SAFETY: every use of the BTL modules and of their direct handles
        // happens under the pml's lock, held by the caller (DirectRecv's
        // contract; a finalized module's handle offers nothing).
        unsafe { rx.take_head(&mut take) };
        match st {
            Some(st) => {
                if self.core.has_actions() {
                    // Credit owed back to the sender (`Core::consumed`)
                    // goes out now, as after a polling round.
                    self.flush();
                }
                DirectLook::Taken(st)
            }
            None if seen => DirectLook::Other,
            None => DirectLook::Empty,
        }
    }

    /// Up to `looks` looks at the direct channel ([`Inner::recv_direct`]),
    /// stopping at the first that finds anything: the message, or
    /// something else at the head (a rendezvous request, another tag),
    /// which only the full path takes (an 8-byte MPI_Ssend ping-pong spent
    /// 64 looks at its RNDV).
    ///
    /// # Safety
    /// As [`Inner::recv_direct`].
    #[inline(always)]
    pub(super) unsafe fn look_direct(
        &mut self,
        looks: usize,
        peer: u32,
        pat: &Pattern,
        buf: RawBufMut,
        posted: Option<ReqId>,
    ) -> Option<Status> {
        for _ in 0..looks {
            // SAFETY: forwarded contract.
            match unsafe { self.recv_direct(peer, pat, buf, posted) } {
                DirectLook::Taken(s) => return Some(s),
                DirectLook::Empty => {}
                DirectLook::Other => return None,
            }
        }
        None
    }
}
