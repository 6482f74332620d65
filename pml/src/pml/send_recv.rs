//! The point-to-point entry points: non-blocking send and receive, the
//! blocking send (with its eager-only form) and the blocking receive, each
//! taking the fast path over a direct channel when it can.

use std::sync::MutexGuard;

use tmpi_base::error::MpiErrorClass;

use crate::matching::Pattern;
use crate::net::BTL_TAG_PML;
use crate::raw::{RawBuf, RawBufMut};
use crate::request::{ReqId, SendMode, Status};
use crate::transport::TxError;
use crate::PmlError;

use super::{check_recv_tag, check_send_tag, Inner, Pml};

/// Looks at the source's direct channel per polling round of a blocking
/// receive (`Pml::recv_blocking`).
const DIRECT_LOOKS: usize = 8;

/// Looks at the source's direct channel before a blocking receive of a
/// message it can carry is posted (`Pml::recv_blocking`): a short spin,
/// about one small message's round trip.
const PRE_POST_LOOKS: usize = 64;

/// Polling rounds a blocking eager send spends waiting for room in the
/// peer's fast box before it takes the FIFO path (`send_eager_transport`).
const DIRECT_RETRY_ROUNDS: usize = 32;

impl Pml {
    /// Starts a send.
    ///
    /// # Safety
    /// `buf` must be valid for reads and not modified until the request
    /// completes (buffered sends: only during the call).
    pub unsafe fn isend(
        &self,
        ctx: u32,
        dest: i32,
        tag: i32,
        buf: RawBuf,
        mode: SendMode,
    ) -> Result<ReqId, PmlError> {
        check_send_tag(tag)?;
        if mode == SendMode::Buffered {
            self.make_bsend_room(buf.len());
        }
        let mut g = self.lock();
        // An eager message whose fragment goes out at once (the blocking
        // send's path) makes a request born complete: no queued action,
        // no transport round. A windowed stream of small isends (the
        // message-rate pattern) spent most of its time in that round.
        // SAFETY: forwarded contract (`buf` is read during the call).
        match unsafe { g.eager_now(ctx, dest, tag, buf, mode) }? {
            Some(Ok(st)) => Ok(g.core.done_request(st)),
            Some(Err(e)) => {
                // The direct handle refused it (the fast box is full, or
                // FIFO fragments are out): queued as `isend` would queue
                // it, and handed to the transport now.
                let id = g.core.queue_direct(&e, buf);
                g.flush();
                Ok(id)
            }
            // SAFETY: forwarded contract.
            None => unsafe { g.start_send(ctx, dest, tag, buf, mode) },
        }
    }

    /// Posts a receive.
    ///
    /// # Safety
    /// `buf` must be valid for writes and not accessed otherwise until the
    /// request completes.
    pub unsafe fn irecv(
        &self,
        ctx: u32,
        src: i32,
        tag: i32,
        buf: RawBufMut,
    ) -> Result<ReqId, PmlError> {
        check_recv_tag(tag)?;
        let mut g = self.lock();
        // SAFETY: forwarded contract.
        let id = unsafe { g.post_recv(ctx, src, tag, buf) }?;
        g.flush();
        if g.tm {
            // Post the receive's ADD now (in pull order), not at the next
            // progress: the NIC should hold it before its message arrives.
            g.tm_progress();
        }
        Ok(id)
    }

    /// Blocking send (`MPI_Send` and friends): starts the send, and when it
    /// completes at once (eager) returns under the same lock acquisition;
    /// otherwise waits like [`Pml::wait`].
    ///
    /// # Safety
    /// `buf` must be valid for reads and unmodified during the call.
    pub unsafe fn send_blocking(
        &self,
        ctx: u32,
        dest: i32,
        tag: i32,
        buf: RawBuf,
        mode: SendMode,
    ) -> Result<Status, PmlError> {
        check_send_tag(tag)?;
        if mode == SendMode::Buffered {
            self.make_bsend_room(buf.len());
        }
        let mut g = self.lock();
        // SAFETY: forwarded contract.
        match unsafe { g.eager_now(ctx, dest, tag, buf, mode) }? {
            Some(Ok(st)) => Ok(st),
            // SAFETY: forwarded contract.
            Some(Err(e)) => unsafe { self.send_eager_transport(g, e, buf) },
            // SAFETY: forwarded contract.
            None => unsafe { self.send_started(g, ctx, dest, tag, buf, mode) },
        }
    }

    /// A blocking standard send of `buf` that goes out only if it goes
    /// eager at once: `Ok(None)` (nothing was done) when it would not
    /// (above the eager limit, the peer's credit window full, actions
    /// queued, the offload path). Such a send never waits for the
    /// receiver to match it, so two ranks may both send this way before
    /// they receive from each other (the collectives' exchanges).
    ///
    /// # Safety
    /// As [`Pml::send_blocking`].
    pub unsafe fn send_eager(
        &self,
        ctx: u32,
        dest: i32,
        tag: i32,
        buf: RawBuf,
    ) -> Result<Option<Status>, PmlError> {
        check_send_tag(tag)?;
        let mut g = self.lock();
        // SAFETY: forwarded contract.
        match unsafe { g.eager_now(ctx, dest, tag, buf, SendMode::Standard) }? {
            Some(Ok(st)) => Ok(Some(st)),
            // SAFETY: forwarded contract.
            Some(Err(e)) => unsafe { self.send_eager_transport(g, e, buf) }.map(Some),
            None => Ok(None),
        }
    }

    /// [`Pml::send_blocking`]'s eager fragment when the direct handle
    /// refused it: through the transport, queued when the BTL is busy.
    /// Out of line, as the next function: the fast path stays small.
    ///
    /// # Safety
    /// As [`Pml::send_blocking`].
    #[cold]
    #[inline(never)]
    unsafe fn send_eager_transport(
        &self,
        mut g: MutexGuard<'_, Inner>,
        e: crate::core::EagerSend,
        buf: RawBuf,
    ) -> Result<Status, PmlError> {
        let (peer, st) = (e.peer, e.st);
        if let (Some(Some(tx)), true) = (g.direct.get(peer as usize).cloned(), buf.is_contiguous())
        {
            // The fast box was full, or FIFO fragments to the peer are
            // still out (only a polling round takes their return): poll a
            // few rounds and try it again before taking the FIFO path,
            // after which every later send would wait for the FIFO
            // fragments to come back too. Not for a fragment the fast box
            // never takes (above `btl_sm_fbox_max`).
            let rounds = if e.hdr.len() + buf.len() <= tx.max_fragment() {
                DIRECT_RETRY_ROUNDS
            } else {
                0
            };
            for _ in 0..rounds {
                // Oversubscribed, the receiver may need this core.
                self.idle_locked();
                g.progress();
                if !g.pending.is_empty() || g.core.has_actions() {
                    break;
                }
                // SAFETY: as in `send_blocking` (lock held, `buf` valid
                // and contiguous).
                if unsafe { tx.try_send(BTL_TAG_PML, &e.hdr, buf.as_slice()) } {
                    return Ok(st);
                }
            }
        }
        let net = &mut *g.net;
        // SAFETY: `buf` is valid for reads during this call (contract); a
        // typed buffer packs its bytes here.
        let sent = unsafe { buf.with_bytes(|b| net.send(peer, &e.hdr, b)) };
        match sent {
            Ok(()) => Ok(st),
            Err(TxError::Busy) => {
                let id = g.core.queue_direct(&e, buf);
                g.flush();
                if let Some(s) = g.core.take_done(id).map_err(|()| PmlError::Request)? {
                    return Ok(s);
                }
                drop(g);
                self.wait(id)
            }
            // As `Inner::exec` for a queued send.
            Err(TxError::Fatal(e)) => {
                tracing::error!(target: "pml_ob1", peer, "send failed: {e}");
                Ok(st)
            }
            Err(TxError::Broken(e)) => {
                if g.first_broken(peer) {
                    tracing::error!(target: "pml_ob1", peer, "send to rank {peer} failed, connection broken: {e}");
                }
                Ok(Status {
                    error: MpiErrorClass::Other,
                    ..st
                })
            }
        }
    }

    /// [`Pml::send_blocking`] for everything but an eager fragment to
    /// send at once: a send request, completed here or waited for.
    ///
    /// # Safety
    /// As [`Pml::send_blocking`].
    #[cold]
    #[inline(never)]
    unsafe fn send_started(
        &self,
        mut g: MutexGuard<'_, Inner>,
        ctx: u32,
        dest: i32,
        tag: i32,
        buf: RawBuf,
        mode: SendMode,
    ) -> Result<Status, PmlError> {
        // SAFETY: forwarded contract (the buffer outlives this call,
        // which returns only once the request completed).
        let id = unsafe { g.start_send(ctx, dest, tag, buf, mode) }?;
        if let Some(s) = g.core.take_done(id).map_err(|()| PmlError::Request)? {
            return Ok(s);
        }
        drop(g);
        self.wait(id)
    }

    /// Blocking receive (`MPI_Recv`): posts and waits, progressing under
    /// one lock acquisition per round (one in all when the message has
    /// arrived already).
    ///
    /// # Safety
    /// `buf` must be valid for writes and not accessed otherwise during the
    /// call.
    pub unsafe fn recv_blocking(
        &self,
        ctx: u32,
        src: i32,
        tag: i32,
        buf: RawBufMut,
    ) -> Result<Status, PmlError> {
        check_recv_tag(tag)?;
        let mut g = self.lock();
        // The source's direct channel, if any: looked up once, not per round.
        let direct = g
            .core
            .direct_source(ctx, src)
            .filter(|&p| matches!(g.direct_rx.get(p as usize), Some(Some(_))));
        let pat = Pattern {
            ctx,
            src: Some(src),
            tag: (tag != crate::request::ANY_TAG).then_some(tag),
        };
        let mut round_looks = 0;
        if let Some(peer) = direct {
            // A message the direct channel can carry is looked for there a
            // while before the receive is posted: a ping-pong's reply comes
            // within that time, and a receive found this way costs no
            // request, no posting and no withdrawal (the latter on the
            // critical path). Nothing else progresses meanwhile, so nothing
            // can arrive by another path and be passed over.
            let fits = g
                .direct
                .get(peer as usize)
                .and_then(Option::as_ref)
                .is_some_and(|tx| buf.len() + crate::hdr::MATCH_LEN <= tx.max_fragment());
            // Not when ranks share cores (`mpi_yield_when_idle`): the
            // sender may be waiting for this core, and spinning here delays
            // it (small reductions with more ranks than cores slowed
            // threefold with the looks).
            let spin = fits && !self.yield_when_idle;
            let looks = if spin { PRE_POST_LOOKS } else { 1 };
            round_looks = if spin { DIRECT_LOOKS } else { 1 };
            // SAFETY: forwarded contract.
            if let Some(s) = unsafe { g.look_direct(looks, peer, &pat, buf, None) } {
                return Ok(s);
            }
        }
        // SAFETY: forwarded contract (the buffer outlives this call, which
        // returns only once the request completed).
        let id = unsafe { g.post_recv(ctx, src, tag, buf) }?;
        let serial = self.serial.load(std::sync::atomic::Ordering::Relaxed);
        if let Some(s) = g.core.take_done(id).map_err(|()| PmlError::Request)? {
            return Ok(s);
        }
        // One completion check per polling round, after it (the request
        // cannot complete between the check and the next round: in serial
        // mode the lock is held throughout, otherwise it is taken again
        // right before the round).
        loop {
            if let Some(peer) = direct {
                // Several looks at the direct channel per polling round (for
                // a message it can carry): a look costs a few dozen
                // instructions, a round hundreds, and a message that lands
                // during the round takes the full path (on_frag, matching,
                // completion) instead of this one.
                // SAFETY: forwarded contract.
                if let Some(s) = unsafe { g.look_direct(round_looks, peer, &pat, buf, Some(id)) } {
                    return Ok(s);
                }
            }
            g.progress_waiting();
            if let Some(s) = g.core.take_done(id).map_err(|()| PmlError::Request)? {
                return Ok(s);
            }
            if serial && !self.hooks_pending() {
                self.idle_locked();
                continue;
            }
            drop(g);
            self.idle();
            g = self.lock();
        }
    }
}
