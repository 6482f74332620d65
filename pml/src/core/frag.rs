//! Incoming fragments: per-peer sequence order, then the match point for
//! MATCH/RNDV; ACK, FRAG and FIN of the rendezvous protocols.

use super::*;

impl Core {
    /// A fragment arrived from world rank `peer`. Malformed fragments are
    /// counted, logged and dropped (the error is returned for tests).
    pub fn on_frag(
        &mut self,
        wire: &mut dyn Wire,
        peer: u32,
        bytes: &[u8],
    ) -> Result<(), HdrError> {
        if peer as usize >= self.peers.len() {
            self.stats.dropped += 1;
            return Err(HdrError::Invalid {
                kind: "common",
                what: "fragment from a rank outside the job",
            });
        }
        // An eager message in its turn (the common case) skips the general
        // header enum and the reorder check after it.
        if let Some((m, data)) = crate::hdr::parse_match(bytes) {
            let ps = &mut self.peers[peer as usize];
            if ps.ahead.is_empty() {
                let exp = seq_slot(&mut ps.recv_seq, m.ctx);
                if m.seq == *exp {
                    *exp = exp.wrapping_add(1);
                    self.on_eager(peer, m, data);
                    return Ok(());
                }
            }
        }
        let h = match Header::parse(bytes) {
            Ok(h) => h,
            Err(e) => {
                self.stats.dropped += 1;
                tracing::error!(target: "pml_ob1", peer, "dropping fragment: {e}");
                return Err(e);
            }
        };
        match h {
            Header::Match(m, _) | Header::Rndv(RndvHdr { m, .. }) => {
                let exp = seq_slot(&mut self.peers[peer as usize].recv_seq, m.ctx);
                if m.seq != *exp {
                    // Ahead of its turn (sequence numbers wrap; anything not
                    // equal waits for its predecessors).
                    self.stats.out_of_order += 1;
                    self.peers[peer as usize]
                        .ahead
                        .insert((m.ctx, m.seq), bytes.to_vec());
                    return Ok(());
                }
                *exp = exp.wrapping_add(1);
                self.on_match(wire, peer, h);
                // Drain successors that were waiting.
                loop {
                    let ps = &mut self.peers[peer as usize];
                    if ps.ahead.is_empty() {
                        break;
                    }
                    let exp = seq_slot(&mut ps.recv_seq, m.ctx);
                    let Some(b) = ps.ahead.remove(&(m.ctx, *exp)) else {
                        break;
                    };
                    *exp = exp.wrapping_add(1);
                    // Stored bytes parsed before; parse cannot fail now.
                    if let Ok(h) = Header::parse(&b) {
                        self.on_match(wire, peer, h);
                    }
                }
                Ok(())
            }
            Header::Ack(a) => {
                self.on_ack(wire, peer, a);
                Ok(())
            }
            Header::Frag(f, data) => {
                self.on_data(f, data);
                Ok(())
            }
            Header::Fin(f) => {
                self.on_fin(wire, f);
                Ok(())
            }
            Header::Credit(c) => {
                self.on_credit(peer, c);
                Ok(())
            }
            Header::Bye => {
                self.byes.push(peer);
                Ok(())
            }
        }
    }

    /// [`Core::on_match_from`] for a MATCH fragment that arrived in its
    /// turn through a BTL (not from the NIC), without the header enum. It
    /// repeats that function's eager arm on purpose: calling it with a
    /// rebuilt `Header::Match` instead costs every small message the enum's
    /// construction and dispatch.
    pub(super) fn on_eager(&mut self, peer: u32, m: MatchHdr, data: &[u8]) {
        let env = m.envelope();
        let msg = self.next_msg;
        self.next_msg += 1;
        match self.matcher.arrive(env, msg) {
            Ok(Some(rid)) => {
                self.consumed(peer, charge_of(Some(data.len())));
                self.deliver_eager(ReqId(rid), env, data);
            }
            Ok(None) => {
                self.stats.unexpected += 1;
                self.unexp.insert(
                    msg,
                    Unexp::Eager {
                        peer,
                        data: Payload::new(data),
                    },
                );
            }
            Err(e) => {
                self.stats.dropped += 1;
                tracing::error!(target: "pml_ob1", peer, "message lost: {e}");
                self.consumed(peer, charge_of(Some(data.len())));
            }
        }
    }

    pub(super) fn on_match(&mut self, wire: &mut dyn Wire, peer: u32, h: Header<'_>) {
        self.on_match_from(wire, peer, h, false)
    }

    pub(super) fn on_match_from(
        &mut self,
        wire: &mut dyn Wire,
        peer: u32,
        h: Header<'_>,
        from_nic: bool,
    ) {
        let m = match &h {
            Header::Match(m, _) => *m,
            Header::Rndv(r) => r.m,
            _ => return,
        };
        let env = m.envelope();
        let msg = self.next_msg;
        self.next_msg += 1;
        // `as_split` only for NIC-unexpected messages: the software path
        // pays no extra call.
        let arrived = if from_nic {
            match self.matcher.as_split() {
                Some(sm) => sm.nic_unexpected(env, msg),
                None => self.matcher.arrive(env, msg),
            }
        } else {
            self.matcher.arrive(env, msg)
        };
        let charge = match &h {
            Header::Match(_, data) => charge_of(Some(data.len())),
            Header::Rndv(r) if r.flags & FLAG_INLINE != 0 => charge_of(Some(r.data.len())),
            _ => charge_of(None),
        };
        let arrived = match arrived {
            Ok(a) => a,
            Err(e) => {
                self.stats.dropped += 1;
                tracing::error!(target: "pml_ob1", peer, "message lost: {e}");
                self.consumed(peer, charge);
                return;
            }
        };
        if arrived.is_some() {
            self.consumed(peer, charge);
        }
        match (arrived, h) {
            // Matched: deliver straight from the fragment, no copy kept.
            (Some(rid), Header::Match(_, data)) => self.deliver_eager(ReqId(rid), env, data),
            (Some(rid), Header::Rndv(r)) if r.flags & FLAG_INLINE != 0 => {
                self.deliver_sync(ReqId(rid), env, peer, r.sreq, r.data)
            }
            (Some(rid), Header::Rndv(r)) => self.start_rndv(
                wire,
                ReqId(rid),
                env,
                peer,
                r.flags,
                r.len,
                r.sreq,
                Region::new(r.region),
            ),
            (None, Header::Match(_, data)) => {
                self.stats.unexpected += 1;
                self.unexp.insert(
                    msg,
                    Unexp::Eager {
                        peer,
                        data: Payload::new(data),
                    },
                );
            }
            (None, Header::Rndv(r)) if r.flags & FLAG_INLINE != 0 => {
                self.stats.unexpected += 1;
                self.unexp.insert(
                    msg,
                    Unexp::Sync {
                        peer,
                        sreq: r.sreq,
                        data: Payload::new(r.data),
                    },
                );
            }
            (None, Header::Rndv(r)) => {
                self.stats.unexpected += 1;
                self.unexp.insert(
                    msg,
                    Unexp::Rndv {
                        peer,
                        flags: r.flags,
                        len: r.len,
                        sreq: r.sreq,
                        region: Region::new(r.region),
                    },
                );
            }
            _ => {}
        }
    }

    pub(super) fn on_ack(&mut self, wire: &mut dyn Wire, peer: u32, a: AckHdr) {
        let id = ReqId(a.sreq);
        let lim = wire.limits(peer);
        let Some(s) = self.slot(id) else {
            self.stats.dropped += 1;
            tracing::error!(target: "pml_ob1", peer, "ACK for unknown send request");
            return;
        };
        let ReqState::Send {
            buf,
            phase: SendPhase::Rndv { region, .. },
            ..
        } = &mut s.state
        else {
            self.stats.dropped += 1;
            return;
        };
        let buf = *buf;
        let region = region.take();
        if let ReqState::Send { phase, .. } = &mut s.state {
            *phase = SendPhase::Queued;
        }
        if let Some(r) = region {
            wire.deregister(peer, &r);
        }
        let want = (a.want as usize).min(buf.len());
        if want == 0 {
            self.send_done(id);
            return;
        }
        let chunk = lim.max_send.max(1);
        let mut off = 0;
        while off < want {
            let n = chunk.min(want - off);
            let last = off + n == want;
            self.actions.push(Action::Send {
                peer,
                hdr: HdrBuf::from(
                    &FragHdr {
                        rreq: a.rreq,
                        offset: off as u64,
                    }
                    .encode(),
                ),
                data: buf.sub(off, n),
                done: if last { Some(id) } else { None },
            });
            off += n;
        }
    }

    /// Receive in place: where the payload of the fragment of `len` bytes
    /// starting with `start` belongs, when it is a FRAG of a receive that
    /// takes pipelined fragments into a contiguous buffer and the payload
    /// lies within the bytes it wants; `None` otherwise (the fragment then
    /// comes whole through [`Core::on_frag`], which reports what is wrong
    /// with it). Asked again before each later write: a receive completed
    /// or withdrawn meanwhile answers `None`.
    pub fn place_frag(&mut self, start: &[u8], len: usize) -> Option<tmpi_btl::Placement> {
        let Ok(Header::Frag(f, _)) = Header::parse(start) else {
            return None;
        };
        let n = len.checked_sub(crate::hdr::FRAG_LEN)?;
        let s = self.slot(ReqId(f.rreq))?;
        let ReqState::Recv {
            buf,
            phase: RecvPhase::Frags { want, .. },
        } = &s.state
        else {
            return None;
        };
        let off = usize::try_from(f.offset).ok()?;
        if !buf.is_contiguous() || off > *want || n > *want - off {
            return None;
        }
        // SAFETY: `off + n <= want <= buf.len()` (checked above), so the
        // range lies within the receive buffer, which stays valid for
        // writes and untouched by the application until the request
        // completes (irecv contract); the request is incomplete now and
        // only this module's progress call writes it (asked again in later
        // calls, when a completion in between answers `None`).
        Some(unsafe { tmpi_btl::Placement::new(crate::hdr::FRAG_LEN, buf.ptr().add(off), n) })
    }

    /// The FRAG whose payload was placed ([`Core::place_frag`]) arrived
    /// whole: `head` is its header, `len` the fragment's length.
    pub fn placed_frag(&mut self, head: &[u8], len: usize) {
        let Ok(Header::Frag(f, _)) = Header::parse(head) else {
            self.stats.dropped += 1;
            return;
        };
        self.frag_arrived(f, len.saturating_sub(crate::hdr::FRAG_LEN), None);
    }

    pub(super) fn on_data(&mut self, f: FragHdr, data: &[u8]) {
        self.frag_arrived(f, data.len(), Some(data));
    }

    /// A FRAG of `n` payload bytes: `data` to copy into the receive buffer,
    /// or `None` when they were placed there already.
    fn frag_arrived(&mut self, f: FragHdr, n: usize, data: Option<&[u8]>) {
        let id = ReqId(f.rreq);
        let Some(s) = self.slot(id) else {
            self.stats.dropped += 1;
            tracing::error!(target: "pml_ob1", "FRAG for unknown receive request");
            return;
        };
        let ReqState::Recv {
            buf,
            phase: RecvPhase::Frags { want, got },
        } = &mut s.state
        else {
            self.stats.dropped += 1;
            return;
        };
        let off = f.offset as usize;
        if off > *want || n > *want - off {
            self.stats.dropped += 1;
            tracing::error!(target: "pml_ob1", off, len = n, "FRAG outside the receive buffer");
            return;
        }
        if let Some(data) = data {
            // SAFETY: receive buffer valid for writes until completion
            // (irecv contract); `off + n <= want <= buf.len()` checked above.
            unsafe { buf.write_at(off, data) };
        }
        *got += n;
        if *got >= *want {
            let st = s.status;
            self.complete(id, st);
        }
    }

    pub(super) fn on_fin(&mut self, wire: &mut dyn Wire, f: FinHdr) {
        let id = ReqId(f.sreq);
        let Some(s) = self.slot(id) else {
            self.stats.dropped += 1;
            tracing::error!(target: "pml_ob1", "FIN for unknown send request");
            return;
        };
        let ReqState::Send {
            phase: SendPhase::Rndv { peer, region, sync },
            ..
        } = &mut s.state
        else {
            self.stats.dropped += 1;
            return;
        };
        let _ = sync;
        let peer = *peer;
        let region = region.take();
        let mut st = s.status;
        if f.status != 0 {
            // The receiver could not take the data (error FIN).
            st.error = MpiErrorClass::Other;
        }
        if let Some(r) = region {
            wire.deregister(peer, &r);
        }
        self.complete(id, st);
    }
}
