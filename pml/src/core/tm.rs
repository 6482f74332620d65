//! The offload path's input (a BTL with a NIC tag list): the split
//! matcher's receives, NIC matches and their data, late outcomes.

use super::*;

impl Core {
    pub(super) fn post_split(
        &mut self,
        pat: Pattern,
        id: ReqId,
        len: usize,
        contiguous: bool,
    ) -> Result<Posted, MatchError> {
        let world = pat.src.and_then(|s| {
            let c = self.comms.get(pat.ctx as usize)?.as_ref()?;
            c.world.get(usize::try_from(s).ok()?).copied()
        });
        let nic = match world {
            Some(w) if self.tm_peers.get(w as usize).copied().unwrap_or(false) => {
                crate::offload::nic_tag(&pat).map(|(tag, mask)| NicTag { tag, mask })
            }
            _ => None,
        };
        // A typed (non-contiguous) buffer is never posted to the NIC as is:
        // a bounce buffer when small, else the receive stays in software.
        let info = RecvInfo {
            len,
            contiguous,
            nic,
        };
        match self.matcher.as_split() {
            Some(sm) => sm.post(pat, id.0, info),
            None => self.matcher.post_recv(pat, id.0),
        }
    }

    /// An input of the offload path (in CQ order), then every outcome that
    /// settled.
    pub fn on_tm_input(&mut self, wire: &mut dyn Wire, input: TmInput) {
        // Tagged fragments also reach a process without the offload path
        // (its peer has tag matching, it has not): plain arrivals then.
        if !self.tm && !matches!(input, TmInput::Frag { .. }) {
            return;
        }
        match input {
            TmInput::Frag {
                peer,
                from_nic,
                bytes,
            } => match Header::parse(&bytes) {
                Ok(h @ (Header::Match(..) | Header::Rndv(..)))
                    if (peer as usize) < self.peers.len() =>
                {
                    self.on_match_from(wire, peer, h, from_nic)
                }
                _ => {
                    self.stats.dropped += 1;
                    tracing::error!(target: "pml_ob1", peer, "malformed tagged fragment dropped");
                    if from_nic {
                        // The NIC counted it as unexpected: so must the
                        // split matcher, or the counts never agree again.
                        self.count_dropped_nic_unexpected();
                    }
                }
            },
            TmInput::Nic(ev) => self.nic_event(ev),
            TmInput::Matched {
                recv,
                id,
                peer,
                envelope,
                frag,
            } => {
                self.nic_bytes.insert(recv, Ok((peer, frag)));
                self.nic_event(NicEvent::Matched {
                    id,
                    envelope,
                    complete: true,
                });
            }
            TmInput::NicPending { recv, id, envelope } => {
                self.nic_pending.insert(
                    recv,
                    NicPendingState {
                        env: envelope,
                        reported: false,
                        done: None,
                    },
                );
                self.nic_event(NicEvent::Matched {
                    id,
                    envelope,
                    complete: false,
                });
            }
            TmInput::NicData { recv, id, result } => {
                match self.nic_pending.get_mut(&recv) {
                    Some(r) => r.done = Some(result),
                    None => {
                        tracing::error!(target: "pml_ob1", recv, "NIC data for a receive without a pending match")
                    }
                }
                self.nic_event(NicEvent::DataDone { id });
                self.finish_nic_pending(wire, recv);
            }
            TmInput::SendDone { sreq, ok } => {
                let f = FinHdr {
                    sreq,
                    status: if ok { 0 } else { MpiErrorClass::Other as i32 },
                };
                self.on_fin(wire, f);
            }
            TmInput::Failed { recv, id, error } => {
                self.nic_bytes.insert(recv, Err(error));
                self.nic_event(NicEvent::Matched {
                    id,
                    envelope: tmpi_tm_engine::Envelope::new(0, 0, 0),
                    complete: true,
                });
            }
        }
        self.drain_late(wire);
    }

    /// Feeds a dropped NIC-unexpected message to the split matcher under
    /// an envelope no receive can name (context `u32::MAX`, tag
    /// `i32::MIN`), then takes it out again, so its unexpected count stays
    /// equal to the NIC's.
    pub(super) fn count_dropped_nic_unexpected(&mut self) {
        let env = Envelope::new(u32::MAX, 0, i32::MIN);
        let msg = self.next_msg;
        self.next_msg += 1;
        if let Some(sm) = self.matcher.as_split() {
            if sm.nic_unexpected(env, msg).is_ok() {
                let pat = Pattern {
                    ctx: env.context,
                    src: Some(0),
                    tag: Some(env.tag),
                };
                // While a DEL is pending the entry waits; harmless.
                let _ = sm.mprobe(pat);
            }
        }
    }

    pub(super) fn nic_event(&mut self, ev: NicEvent) {
        if let Some(sm) = self.matcher.as_split() {
            if let Err(e) = sm.nic_event(ev) {
                tracing::error!(target: "pml_ob1", ?ev, "NIC event not accepted: {e}");
            }
        }
    }

    /// The next NIC-list operation to execute, in order.
    pub fn poll_nic_action(&mut self) -> Option<NicAction<u64>> {
        if !self.tm {
            return None;
        }
        self.matcher.as_split()?.poll_action()
    }

    /// Carries out the split matcher's outcomes that settled late.
    pub fn drain_late(&mut self, wire: &mut dyn Wire) {
        if !self.tm {
            return;
        }
        loop {
            let Some(l) = self.matcher.as_split().and_then(|sm| sm.poll_late()) else {
                return;
            };
            match l {
                Late::Matched { recv, env, msg } => {
                    self.deliver_unexpected(wire, ReqId(recv), env, msg)
                }
                Late::Nic { recv } => self.nic_matched(wire, ReqId(recv)),
                Late::Cancelled(recv) => self.complete(
                    ReqId(recv),
                    Status {
                        cancelled: true,
                        ..Status::empty()
                    },
                ),
                Late::PostFailed(recv) => self.complete(
                    ReqId(recv),
                    Status {
                        error: MpiErrorClass::NoMem,
                        ..Status::empty()
                    },
                ),
                Late::ArrivalFailed(msg) => {
                    self.stats.dropped += 1;
                    // Rendezvous headers carry no charge (charge_of(None)).
                    if let Some(Unexp::Eager { peer, data } | Unexp::Sync { peer, data, .. }) =
                        self.unexp.remove(&msg)
                    {
                        self.consumed(peer, charge_of(Some(data.len())));
                    }
                }
            }
        }
    }

    /// Finishes receive `recv`, matched by the NIC with its data coming
    /// later, once the split matcher reported the match and the data are
    /// in: a rendezvous the NIC read completes it; an eager fragment or a
    /// rendezvous request software must finish goes the way of a
    /// one-completion match.
    pub(super) fn finish_nic_pending(&mut self, wire: &mut dyn Wire, recv: u64) {
        let ready = self
            .nic_pending
            .get(&recv)
            .is_some_and(|r| r.reported && r.done.is_some());
        if !ready {
            return;
        }
        let Some(r) = self.nic_pending.remove(&recv) else {
            return;
        };
        let st = match r.done {
            Some(Ok(NicData::Read(n))) => {
                self.stats.rndv_nic_read += 1;
                Status {
                    source: r.env.source as i32,
                    tag: r.env.tag,
                    count: n,
                    error: MpiErrorClass::Success,
                    cancelled: false,
                }
            }
            Some(Ok(NicData::Frag { peer, frag })) => {
                self.nic_bytes.insert(recv, Ok((peer, frag)));
                self.deliver_nic_bytes(wire, ReqId(recv));
                return;
            }
            Some(Err(e)) => {
                tracing::error!(target: "pml_ob1", "offloaded receive failed at the NIC: {e}; the receive fails");
                Status {
                    error: MpiErrorClass::Other,
                    ..Status::empty()
                }
            }
            None => return,
        };
        self.complete(ReqId(recv), st);
    }

    /// The NIC matched receive `id`: the fragment is in `nic_bytes`, or its
    /// data are still coming (`nic_pending`).
    pub(super) fn nic_matched(&mut self, wire: &mut dyn Wire, id: ReqId) {
        if let Some(r) = self.nic_pending.get_mut(&id.0) {
            r.reported = true;
            self.finish_nic_pending(wire, id.0);
            return;
        }
        self.deliver_nic_bytes(wire, id);
    }

    /// Completes or continues receive `id` with the fragment the NIC placed
    /// for it (`nic_bytes`).
    pub(super) fn deliver_nic_bytes(&mut self, wire: &mut dyn Wire, id: ReqId) {
        let failed = |e: MpiErrorClass| Status {
            error: e,
            ..Status::empty()
        };
        let (peer, frag) = match self.nic_bytes.remove(&id.0) {
            Some(Ok(f)) => f,
            Some(Err(e)) => {
                tracing::error!(target: "pml_ob1", "receive failed at the NIC: {e}");
                self.complete(id, failed(MpiErrorClass::Other));
                return;
            }
            None => {
                tracing::error!(target: "pml_ob1", "NIC match without its data");
                self.complete(id, failed(MpiErrorClass::Intern));
                return;
            }
        };
        // The payload is either in the fragment (copied into the receive's
        // buffer below) or already at the start of that buffer.
        let (hdr, placed) = match &frag {
            NicFrag::Bytes(bytes) => (Header::parse(bytes), None),
            NicFrag::Placed { header, len } => (Header::parse_placed(header, *len), Some(*len)),
        };
        match hdr {
            Ok(Header::Match(m, data)) => {
                let n = placed.unwrap_or(data.len());
                self.consumed(peer, charge_of(Some(n)));
                let env = m.envelope();
                match placed {
                    Some(n) => self.delivered_in_place(id, env, n),
                    None => self.deliver_eager(id, env, data),
                }
            }
            Ok(Header::Rndv(r)) => {
                let env = r.m.envelope();
                if r.flags & FLAG_INLINE != 0 {
                    match placed {
                        Some(n) => {
                            self.fin(peer, r.sreq, 0);
                            self.delivered_in_place(id, env, n)
                        }
                        None => self.deliver_sync(id, env, peer, r.sreq, r.data),
                    }
                    return;
                }
                self.start_rndv(
                    wire,
                    id,
                    env,
                    peer,
                    r.flags,
                    r.len,
                    r.sreq,
                    Region::new(r.region),
                )
            }
            _ => {
                self.stats.dropped += 1;
                tracing::error!(target: "pml_ob1", peer, "NIC-matched fragment malformed");
                self.complete(id, failed(MpiErrorClass::Intern));
            }
        }
    }
}
