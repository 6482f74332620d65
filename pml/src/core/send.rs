//! Send requests: isend in every mode, the eager, rendezvous and
//! pipelined sender sides, buffered sends, failures of peers.

use super::*;

impl Core {
    pub(super) fn next_send_seq(&mut self, peer: u32, ctx: u32) -> u32 {
        let s = seq_slot(&mut self.peers[peer as usize].send_seq, ctx);
        let v = *s;
        *s = v.wrapping_add(1);
        v
    }

    /// Starts a send of `buf` to rank `dest` of communicator `ctx`.
    ///
    /// # Safety
    /// `buf` must stay valid for reads and unmodified until the request
    /// completes (for [`SendMode::Buffered`] only during this call).
    pub unsafe fn isend(
        &mut self,
        wire: &mut dyn Wire,
        ctx: u32,
        dest: i32,
        tag: i32,
        buf: RawBuf,
        mode: SendMode,
    ) -> Result<ReqId, PmlError> {
        let comm = self.comm(ctx)?;
        let src = comm.rank;
        if dest == PROC_NULL {
            let id = self.alloc(ReqState::Done);
            self.slots[id.index()].status = Status::proc_null();
            return Ok(id);
        }
        let peer = comm.world_rank(dest)?;
        if self.dead.get(peer as usize).copied().unwrap_or(false) || self.peer_gone(peer) {
            // A send to a dead rank, or to one that said BYE (it posts no
            // receive any more), fails at once (docs/pml.md).
            let id = self.alloc(ReqState::Done);
            self.slots[id.index()].status = Status {
                error: MpiErrorClass::Other,
                ..Status::empty()
            };
            return Ok(id);
        }
        let (buf, owned, bsend_bytes) = if mode == SendMode::Buffered {
            let need = buf.len() + BSEND_OVERHEAD;
            let cap = self
                .bsend_cap
                .ok_or_else(|| PmlError::Buffer("MPI_Bsend without an attached buffer".into()))?;
            if self.bsend_used + need > cap {
                return Err(PmlError::Buffer(format!(
                    "attached buffer too small: {} of {} bytes in use, {} needed",
                    self.bsend_used, cap, need
                )));
            }
            // SAFETY contract of this function: `buf` is valid for reads now.
            let v = unsafe { buf.to_vec() };
            let b = RawBuf::from_slice(&v);
            (b, Some(v), need)
        } else {
            (buf, None, 0)
        };
        let lim = wire.limits(peer);
        let seq = self.next_send_seq(peer, ctx);
        let m = MatchHdr { ctx, src, tag, seq };
        let eager = mode != SendMode::Synchronous
            && buf.len() <= lim.eager
            && !self.credit_switch(peer, buf.len());
        // A synchronous send within the eager limit carries its data in the
        // RNDV (answered with FIN once matched): no registration, no read.
        // Not to a tag-matching NIC peer, whose RNDV becomes a NIC
        // rendezvous request.
        let sync_inline = mode == SendMode::Synchronous
            && buf.len() <= lim.eager
            // the longer header still fits the BTL's largest fragment
            && buf.len() + crate::hdr::RNDV_LEN <= lim.max_send + crate::hdr::FRAG_LEN
            && !(self.tm && self.tm_peers.get(peer as usize).copied().unwrap_or(false))
            && !self.credit_switch(peer, buf.len());
        let id = self.alloc(ReqState::Send {
            buf,
            phase: SendPhase::Queued,
            _owned: owned,
        });
        {
            let s = &mut self.slots[id.index()];
            s.bsend_bytes = bsend_bytes;
            s.status = Status {
                source: dest,
                tag,
                count: buf.len(),
                ..Status::empty()
            };
            if bsend_bytes > 0 {
                s.detached = true;
            }
        }
        self.bsend_used += bsend_bytes;
        if eager {
            self.stats.eager_sent += 1;
            self.charge_eager(peer, buf.len());
            self.actions.push(Action::Send {
                peer,
                hdr: HdrBuf::from(&m.encode()),
                data: buf,
                done: Some(id),
            });
        } else if sync_inline {
            self.stats.rndv_sent += 1;
            self.stats.sync_inline += 1;
            self.charge_eager(peer, buf.len());
            let hdr = HdrBuf::rndv(&RndvHdr {
                m,
                flags: FLAG_SYNC | FLAG_INLINE,
                len: buf.len() as u64,
                sreq: id.0,
                region: &[],
                data: &[],
            });
            if let ReqState::Send { phase, .. } = &mut self.slots[id.index()].state {
                *phase = SendPhase::Rndv {
                    peer,
                    region: None,
                    sync: true,
                };
            }
            // The data follows the header in the same fragment; the request
            // completes on FIN, not when the transport took the data.
            self.actions.push(Action::Send {
                peer,
                hdr,
                data: buf,
                done: None,
            });
        } else {
            self.stats.rndv_sent += 1;
            // A typed (non-contiguous) buffer cannot be read remotely:
            // it goes as pipelined fragments, packed one at a time.
            let region = if lim.get && !buf.is_empty() && buf.is_contiguous() {
                wire.register(peer, buf)
            } else {
                None
            };
            let mut flags = 0;
            if mode == SendMode::Synchronous {
                flags |= FLAG_SYNC;
            }
            if region.is_some() {
                flags |= FLAG_REGION;
            }
            let hdr = HdrBuf::rndv(&RndvHdr {
                m,
                flags,
                len: buf.len() as u64,
                sreq: id.0,
                region: region.as_deref().unwrap_or(&[]),
                data: &[],
            });
            if let ReqState::Send { phase, .. } = &mut self.slots[id.index()].state {
                *phase = SendPhase::Rndv {
                    peer,
                    region,
                    sync: mode == SendMode::Synchronous,
                };
            }
            self.actions.push(Action::Send {
                peer,
                hdr,
                data: RawBuf::empty(),
                done: None,
            });
        }
        if bsend_bytes > 0 {
            // The internal request (detached) owns the copy and completes on
            // its own; the caller gets a request that is complete already
            // (a buffered send completes locally).
            let st = self.slots[id.index()].status;
            let user = self.alloc(ReqState::Done);
            self.slots[user.index()].status = st;
            return Ok(user);
        }
        Ok(id)
    }

    /// The driver carried out an [`Action::Send`] whose `done` was `id`.
    pub fn send_done(&mut self, id: ReqId) {
        let Some(s) = self.slot(id) else { return };
        if let ReqState::Send {
            phase: SendPhase::Queued,
            ..
        } = s.state
        {
            let st = s.status;
            self.complete(id, st);
        }
    }

    /// The driver could not carry out the [`Action::Send`] whose `done`
    /// was `id` (the connection is broken): the send fails with `class`.
    pub fn send_failed(&mut self, id: ReqId, class: MpiErrorClass) {
        let Some(s) = self.slot(id) else { return };
        if let ReqState::Send {
            phase: SendPhase::Queued,
            ..
        } = s.state
        {
            let st = Status {
                error: class,
                ..s.status
            };
            self.complete(id, st);
        }
    }

    /// Whether a receive on `ctx` from world rank `src` (`None`: any
    /// source) waits on a dead peer: its source, or for MPI_ANY_SOURCE any
    /// member of the communicator (docs/pml.md, peer failure).
    pub(super) fn depends_on_dead(&self, ctx: u32, src: Option<u32>) -> bool {
        match src {
            Some(w) => self.dead.get(w as usize).copied().unwrap_or(false),
            None => self.comm(ctx).is_ok_and(|c| {
                c.world
                    .iter()
                    .any(|&w| self.dead.get(w as usize).copied().unwrap_or(false))
            }),
        }
    }

    /// World rank `peer` is dead (its BTL lost the connection): every
    /// request that waits on it completes with `class`: receives naming it,
    /// MPI_ANY_SOURCE receives on communicators that contain it, receives
    /// of a message it was still sending, rendezvous sends to it. Later
    /// receives of the same kind fail at once. Returns how many failed.
    pub fn peer_failed(&mut self, peer: u32, class: MpiErrorClass) -> usize {
        if peer as usize >= self.peers.len() {
            return 0;
        }
        if self.dead.is_empty() {
            self.dead = vec![false; self.peers.len()];
        }
        self.dead[peer as usize] = true;
        let mut n = 0;
        for idx in 0..self.slots.len() {
            let s = &self.slots[idx];
            let id = ReqId::new(idx as u32, s.gen);
            let fail = match (&s.state, s.dep) {
                (
                    ReqState::Send {
                        phase: SendPhase::Rndv { peer: p, .. },
                        ..
                    },
                    _,
                ) => *p == peer,
                (
                    ReqState::Recv {
                        phase: RecvPhase::Posted { token: Some(tok) },
                        ..
                    },
                    Some((ctx, src)),
                ) => {
                    let tok = *tok;
                    self.depends_on_dead(ctx, src) && self.withdraw(tok, id)
                }
                (
                    ReqState::Recv {
                        phase: RecvPhase::Frags { .. } | RecvPhase::Pulling { .. },
                        ..
                    },
                    Some((ctx, src)),
                ) => {
                    let from = src.or_else(|| {
                        self.comm(ctx)
                            .ok()
                            .and_then(|c| c.world_rank(s.status.source).ok())
                    });
                    from == Some(peer)
                }
                _ => false,
            };
            if fail {
                let st = Status {
                    error: class,
                    ..self.slots[idx].status
                };
                self.complete(id, st);
                n += 1;
            }
        }
        n
    }

    /// Attaches a buffer of `cap` bytes for buffered sends.
    pub fn buffer_attach(&mut self, cap: usize) -> Result<(), PmlError> {
        if self.bsend_cap.is_some() {
            return Err(PmlError::Buffer("a buffer is already attached".into()));
        }
        self.bsend_cap = Some(cap);
        Ok(())
    }

    /// Whether a buffered send of `len` bytes has room in the attached
    /// buffer now, or waiting cannot give it room (no buffer attached,
    /// nothing in use): `false` only when completions may free enough.
    pub fn bsend_room_or_hopeless(&self, len: usize) -> bool {
        match self.bsend_cap {
            None => true,
            Some(cap) => {
                self.bsend_used == 0
                    || self.bsend_used + len + BSEND_OVERHEAD <= cap
                    || len + BSEND_OVERHEAD > cap
            }
        }
    }

    /// Bytes of the attached buffer in use (0 once every buffered send
    /// completed); `None` when no buffer is attached.
    pub fn buffer_in_use(&self) -> Option<usize> {
        self.bsend_cap.map(|_| self.bsend_used)
    }

    /// Detaches the buffer; the caller waited until [`Core::buffer_in_use`]
    /// is zero. Returns its size.
    pub fn buffer_detach(&mut self) -> Result<usize, PmlError> {
        let cap = self
            .bsend_cap
            .take()
            .ok_or_else(|| PmlError::Buffer("no buffer attached".into()))?;
        Ok(cap)
    }
}
