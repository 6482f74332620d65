//! The fast path: a blocking send written straight into the peer's BTL
//! channel, and a blocking receive that takes the next fragment of its
//! source from the BTL, matched through the one match point
//! (`MatchPoint::match_direct`) when the queues are empty.

use super::*;

impl Core {
    /// Blocking-send fast path (`Pml::send_blocking`): for a standard or
    /// ready send that goes eager to a live peer (within the eager limit,
    /// and for more than [`CREDIT_SWITCH_MIN`] bytes only while the
    /// peer's credit window has room: otherwise `isend` decides), does the sender's bookkeeping of [`Core::isend`]
    /// (sequence number, statistics, flow-control charge) without a
    /// request or an action, and returns the peer, the match header and
    /// the status the send completes with; the caller hands the fragment
    /// to the transport at once (nothing may be queued before it). `None`:
    /// not such a send (nothing was done; use `isend`). Errors as `isend`.
    #[inline(always)]
    pub(crate) fn eager_direct(
        &mut self,
        limits: &[Limits],
        ctx: u32,
        dest: i32,
        tag: i32,
        len: usize,
        mode: SendMode,
    ) -> Result<Option<EagerSend>, PmlError> {
        if !matches!(mode, SendMode::Standard | SendMode::Ready) || dest == PROC_NULL {
            return Ok(None);
        }
        let comm = self.comm(ctx)?;
        let src = comm.rank;
        let peer = comm.world_rank(dest)?;
        let over = match limits.get(peer as usize) {
            Some(l) => len > l.eager,
            None => true,
        };
        if over
            || self.dead.get(peer as usize).copied().unwrap_or(false)
            || self.peer_gone(peer)
            || (len > CREDIT_SWITCH_MIN && self.credit_may_switch(peer, len))
        {
            return Ok(None);
        }
        let seq = self.next_send_seq(peer, ctx);
        self.stats.eager_sent += 1;
        self.charge_eager(peer, len);
        Ok(Some(EagerSend {
            peer,
            hdr: MatchHdr { ctx, src, tag, seq }.encode(),
            st: Status {
                source: dest,
                tag,
                count: len,
                ..Status::empty()
            },
        }))
    }

    /// A request already complete with `st` ([`Core::eager_direct`]'s
    /// send started by `isend` whose fragment went out at once).
    pub(crate) fn done_request(&mut self, st: Status) -> ReqId {
        let id = self.alloc(ReqState::Done);
        self.slots[id.index()].status = st;
        id
    }

    /// The transport refused [`Core::eager_direct`]'s fragment for now: it
    /// becomes a send request queued as `isend` would have queued it.
    pub(crate) fn queue_direct(&mut self, e: &EagerSend, buf: RawBuf) -> ReqId {
        let EagerSend { peer, st, .. } = *e;
        let hdr = HdrBuf::from(&e.hdr);
        let id = self.alloc(ReqState::Send {
            buf,
            phase: SendPhase::Queued,
            _owned: None,
        });
        self.slots[id.index()].status = st;
        self.actions.push(Action::Send {
            peer,
            hdr,
            data: buf,
            done: Some(id),
        });
        id
    }

    /// The world rank whose next eager message a blocking receive from
    /// `(ctx, src)` may take straight from the BTL ([`Core::take_direct`]):
    /// only a named source on the software matcher. Fixed for the whole
    /// receive (the communicator cannot go away under a call on it).
    /// `None`: the regular path.
    pub(crate) fn direct_source(&self, ctx: u32, src: i32) -> Option<u32> {
        if src < 0 || self.tm {
            return None;
        }
        self.comm(ctx).ok()?.world_rank(src).ok()
    }

    /// Whether the next message of `peer` (from [`Core::direct_source`])
    /// may be taken now: the peer is alive with nothing held out of
    /// order, no message is queued anywhere and `posted` receives are
    /// posted (0 before the receive posts its own, 1 after: then it is
    /// the only one). So the next message from the peer in its turn is
    /// the first one this receive could match, and no other receive
    /// wants it.
    #[inline(always)]
    pub(crate) fn direct_ready(&self, peer: u32, posted: usize) -> bool {
        self.peers
            .get(peer as usize)
            .is_some_and(|ps| ps.ahead.is_empty())
            && !self.dead.get(peer as usize).copied().unwrap_or(false)
            && !self.peer_gone(peer)
            && self.matcher.depth() == (posted, 0)
    }

    /// Takes fragment `bytes` from `peer` ([`Core::direct_ready`] said yes)
    /// for the blocking receive `pat` (a named source) into `buf` if it is
    /// that receive's message: an eager MATCH in its sequence turn that the
    /// pattern accepts and `buf` holds. `posted`: the receive's request,
    /// if it is posted; it is withdrawn from the matcher and released.
    /// Then the message is delivered as `on_frag` would have matched it
    /// to the receive, and its status returned; `None` (nothing changed)
    /// otherwise.
    ///
    /// # Safety
    /// `buf` is valid for writes (the receive's buffer, contract of
    /// `irecv`).
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    pub(crate) unsafe fn take_direct(
        &mut self,
        peer: u32,
        pat: &Pattern,
        buf: RawBufMut,
        posted: Option<ReqId>,
        bytes: &[u8],
    ) -> Option<Status> {
        let (m, data) = crate::hdr::parse_match(bytes)?;
        if data.len() > buf.len() {
            return None;
        }
        if *seq_slot(&mut self.peers[peer as usize].recv_seq, m.ctx) != m.seq {
            return None;
        }
        let token = match posted {
            Some(id) => {
                let s = self.slots.get(id.index())?;
                let ReqState::Recv {
                    phase: RecvPhase::Posted { token: Some(tok) },
                    ..
                } = s.state
                else {
                    return None;
                };
                if s.gen != id.gen() {
                    return None;
                }
                Some(tok)
            }
            None => None,
        };
        // The one match point decides, as for every other arrival.
        if !self.matcher.match_direct(pat, token, &m.envelope()) {
            return None;
        }
        if let Some(id) = posted {
            self.release(id);
        }
        let exp = seq_slot(&mut self.peers[peer as usize].recv_seq, m.ctx);
        *exp = exp.wrapping_add(1);
        self.stats.direct_recv += 1;
        self.consumed(peer, charge_of(Some(data.len())));
        // SAFETY: `buf` is valid for writes (contract); `data` fits it
        // (checked above).
        unsafe { buf.write_at(0, data) };
        Some(Status {
            source: m.src,
            tag: m.tag,
            count: data.len(),
            error: MpiErrorClass::Success,
            cancelled: false,
        })
    }
}
