//! Receive requests: posting, probes, cancel, and delivering a matched
//! message (eager copy, or the rendezvous pull: get, or ACK and fragments).

use super::*;

impl Core {
    pub(super) fn pattern(&self, ctx: u32, src: i32, tag: i32) -> Result<Pattern, PmlError> {
        let comm = self.comm(ctx)?;
        let src = if src == crate::request::ANY_SOURCE {
            None
        } else {
            comm.world_rank(src)?;
            Some(src)
        };
        let tag = if tag == crate::request::ANY_TAG {
            None
        } else {
            Some(tag)
        };
        Ok(Pattern { ctx, src, tag })
    }

    /// Posts a receive into `buf`.
    ///
    /// # Safety
    /// `buf` must stay valid for writes and not be accessed otherwise until
    /// the request completes.
    pub unsafe fn irecv(
        &mut self,
        wire: &mut dyn Wire,
        ctx: u32,
        src: i32,
        tag: i32,
        buf: RawBufMut,
    ) -> Result<ReqId, PmlError> {
        if src == PROC_NULL {
            self.comm(ctx)?;
            let id = self.alloc(ReqState::Done);
            self.slots[id.index()].status = Status::proc_null();
            return Ok(id);
        }
        let pat = self.pattern(ctx, src, tag)?;
        let id = self.alloc(ReqState::Recv {
            buf,
            phase: RecvPhase::Posted { token: None },
        });
        let wsrc = match pat.src {
            Some(r) => Some(self.comm(ctx)?.world_rank(r)?),
            None => None,
        };
        self.slots[id.index()].dep = Some((ctx, wsrc));
        if !self.dead.is_empty() && self.depends_on_dead(ctx, wsrc) {
            let st = Status {
                error: MpiErrorClass::Other,
                ..Status::empty()
            };
            self.complete(id, st);
            return Ok(id);
        }
        let posted = if self.tm {
            self.post_split(pat, id, buf.len(), buf.is_contiguous())
        } else {
            self.matcher.post_recv(pat, id.0)
        };
        match posted {
            Ok(Posted::Matched(env, msg)) => self.deliver_unexpected(wire, id, env, msg),
            Ok(Posted::Queued(tok)) => {
                if let ReqState::Recv { phase, .. } = &mut self.slots[id.index()].state {
                    *phase = RecvPhase::Posted { token: Some(tok) };
                }
                // No message of the source was waiting, and it said BYE:
                // none will come (core/bye.rs).
                if self.waits_on_gone(ctx, wsrc) && self.withdraw(tok, id) {
                    let st = Status {
                        error: MpiErrorClass::Other,
                        ..Status::empty()
                    };
                    self.complete(id, st);
                }
            }
            Err(e) => {
                self.release(id);
                return Err(PmlError::NoMem(e.to_string()));
            }
        }
        Ok(id)
    }

    /// `MPI_Iprobe`: the status of the first matching unexpected message.
    pub fn iprobe(&mut self, ctx: u32, src: i32, tag: i32) -> Result<Option<Status>, PmlError> {
        if src == PROC_NULL {
            self.comm(ctx)?;
            return Ok(Some(Status::proc_null()));
        }
        let pat = self.pattern(ctx, src, tag)?;
        Ok(self.matcher.probe(pat).map(|(env, msg)| Status {
            source: env.source as i32,
            tag: env.tag,
            count: self.unexp.get(&msg).map_or(0, Unexp::len),
            ..Status::empty()
        }))
    }

    /// `MPI_Improbe`: removes the first matching unexpected message from
    /// matching and returns a handle for [`Core::imrecv`].
    pub fn improbe(
        &mut self,
        ctx: u32,
        src: i32,
        tag: i32,
    ) -> Result<Option<(MsgId, Envelope, Status)>, PmlError> {
        if src == PROC_NULL {
            return Err(PmlError::Arg(
                "mprobe from MPI_PROC_NULL: use MPI_MESSAGE_NO_PROC semantics in the caller".into(),
            ));
        }
        let pat = self.pattern(ctx, src, tag)?;
        Ok(self.matcher.mprobe(pat).map(|(env, msg)| {
            let st = Status {
                source: env.source as i32,
                tag: env.tag,
                count: self.unexp.get(&msg).map_or(0, Unexp::len),
                ..Status::empty()
            };
            (msg, env, st)
        }))
    }

    /// `MPI_Imrecv`: receives the message taken by [`Core::improbe`].
    ///
    /// # Safety
    /// As [`Core::irecv`].
    pub unsafe fn imrecv(
        &mut self,
        wire: &mut dyn Wire,
        msg: MsgId,
        env: Envelope,
        buf: RawBufMut,
    ) -> Result<ReqId, PmlError> {
        if !self.unexp.contains_key(&msg) {
            return Err(PmlError::Arg("unknown or already received message".into()));
        }
        let id = self.alloc(ReqState::Recv {
            buf,
            phase: RecvPhase::Posted { token: None },
        });
        self.deliver_unexpected(wire, id, env, msg);
        Ok(id)
    }

    /// `MPI_Cancel`. Receives not yet matched are cancelled; sends are never
    /// cancelled (MPI allows a cancel to fail). Returns whether it worked.
    pub fn cancel(&mut self, id: ReqId) -> Result<bool, PmlError> {
        let Some(s) = self.slot(id) else {
            return Err(PmlError::Request);
        };
        if let ReqState::Recv {
            phase: RecvPhase::Posted { token: Some(tok) },
            ..
        } = s.state
        {
            let done = match self.matcher.as_split() {
                Some(sm) if self.tm => sm.cancel_recv(tok, id.0),
                _ => self.matcher.cancel(tok),
            };
            if done {
                let st = Status {
                    cancelled: true,
                    ..Status::empty()
                };
                self.complete(id, st);
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// After a cancel that did not settle at once: `None` while the receive
    /// is still posted (its cancel pending at the NIC), else whether it
    /// ended cancelled.
    pub fn cancel_outcome(&mut self, id: ReqId) -> Result<Option<bool>, PmlError> {
        let Some(s) = self.slot(id) else {
            return Err(PmlError::Request);
        };
        Ok(match s.state {
            ReqState::Recv {
                phase: RecvPhase::Posted { token: Some(_) },
                ..
            } => None,
            ReqState::Done => Some(s.status.cancelled),
            _ => Some(false),
        })
    }

    pub(super) fn deliver_unexpected(
        &mut self,
        wire: &mut dyn Wire,
        id: ReqId,
        env: Envelope,
        msg: MsgId,
    ) {
        match self.unexp.remove(&msg) {
            Some(Unexp::Eager { peer, data }) => {
                self.consumed(peer, charge_of(Some(data.len())));
                self.deliver_eager(id, env, data.as_slice())
            }
            Some(Unexp::Sync { peer, sreq, data }) => {
                self.consumed(peer, charge_of(Some(data.len())));
                self.deliver_sync(id, env, peer, sreq, data.as_slice())
            }
            Some(Unexp::Rndv {
                peer,
                flags,
                len,
                sreq,
                region,
            }) => self.start_rndv(wire, id, env, peer, flags, len, sreq, region),
            None => {
                tracing::error!(target: "pml_ob1", msg, "matched message has no stored data");
                self.complete(
                    id,
                    Status {
                        error: MpiErrorClass::Intern,
                        ..Status::empty()
                    },
                );
            }
        }
    }

    /// A synchronous send's inline data ([`FLAG_INLINE`]): delivered as
    /// eager data (truncation included), then FIN tells the sender.
    pub(super) fn deliver_sync(
        &mut self,
        id: ReqId,
        env: Envelope,
        peer: u32,
        sreq: u64,
        data: &[u8],
    ) {
        self.fin(peer, sreq, 0);
        self.deliver_eager(id, env, data);
    }

    pub(super) fn deliver_eager(&mut self, id: ReqId, env: Envelope, data: &[u8]) {
        let ReqState::Recv { buf, .. } = self.slots[id.index()].state else {
            return;
        };
        let n = data.len().min(buf.len());
        // SAFETY: `buf` is the receive buffer, valid for writes until this
        // request completes (contract of `irecv`); `n <= buf.len()`.
        unsafe { buf.write_at(0, &data[..n]) };
        let st = Status {
            source: env.source as i32,
            tag: env.tag,
            count: n,
            error: if data.len() > buf.len() {
                MpiErrorClass::Truncate
            } else {
                MpiErrorClass::Success
            },
            cancelled: false,
        };
        self.complete(id, st);
    }

    /// Completes receive `id` with the `n` bytes a tag-matching NIC placed
    /// at the start of its own buffer (the module put back every byte
    /// past them): nothing to copy.
    pub(super) fn delivered_in_place(&mut self, id: ReqId, env: Envelope, n: usize) {
        let ReqState::Recv { buf, .. } = self.slots[id.index()].state else {
            return;
        };
        self.stats.nic_in_place += 1;
        // The NIC cannot write past the buffer it was given (a longer
        // message would have failed at the NIC): `n <= buf.len()`.
        let st = Status {
            source: env.source as i32,
            tag: env.tag,
            count: n.min(buf.len()),
            error: if n > buf.len() {
                MpiErrorClass::Truncate
            } else {
                MpiErrorClass::Success
            },
            cancelled: false,
        };
        self.complete(id, st);
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn start_rndv(
        &mut self,
        wire: &mut dyn Wire,
        id: ReqId,
        env: Envelope,
        peer: u32,
        flags: u8,
        len: u64,
        sreq: u64,
        region: Region,
    ) {
        let ReqState::Recv { buf, .. } = self.slots[id.index()].state else {
            return;
        };
        let want = (len.min(buf.len() as u64)) as usize;
        let st = Status {
            source: env.source as i32,
            tag: env.tag,
            count: want,
            error: if len > buf.len() as u64 {
                MpiErrorClass::Truncate
            } else {
                MpiErrorClass::Success
            },
            cancelled: false,
        };
        self.slots[id.index()].status = st;
        if want == 0 {
            self.fin(peer, sreq, 0);
            self.complete(id, st);
            return;
        }
        // A typed receive buffer takes fragments (unpacked one at a time),
        // never a get into its memory; except from a tag-matching NIC peer,
        // whose rendezvous request may not be pipelined: read into a
        // contiguous temporary, unpacked when the get is done.
        let nic_peer = self.tm && self.tm_peers.get(peer as usize).copied().unwrap_or(false);
        if flags & FLAG_REGION != 0 && wire.limits(peer).get && (buf.is_contiguous() || nic_peer) {
            if let ReqState::Recv { phase, .. } = &mut self.slots[id.index()].state {
                *phase = RecvPhase::Pulling { peer, sreq };
            }
            let dst = if buf.is_contiguous() {
                buf.prefix(want)
            } else {
                let v = self.typed_get.entry(id.0).or_default();
                *v = vec![0u8; want];
                RawBufMut::from_slice(v)
            };
            self.actions.push(Action::Get {
                peer,
                region,
                dst,
                rreq: id,
            });
        } else {
            self.ack(id, peer, sreq, want);
        }
    }

    pub(super) fn ack(&mut self, id: ReqId, peer: u32, sreq: u64, want: usize) {
        if let ReqState::Recv { phase, .. } = &mut self.slots[id.index()].state {
            *phase = RecvPhase::Frags { want, got: 0 };
        }
        self.stats.rndv_pipelined += 1;
        let hdr = AckHdr {
            sreq,
            rreq: id.0,
            want: want as u64,
        };
        self.actions.push(Action::Send {
            peer,
            hdr: HdrBuf::from(&hdr.encode()),
            data: RawBuf::empty(),
            done: None,
        });
    }

    pub(super) fn fin(&mut self, peer: u32, sreq: u64, status: i32) {
        self.actions.push(Action::Send {
            peer,
            hdr: HdrBuf::from(&FinHdr { sreq, status }.encode()),
            data: RawBuf::empty(),
            done: None,
        });
    }

    /// The driver finished an [`Action::Get`] (`ok == false`: it failed and
    /// the pipelined protocol takes over).
    pub fn get_done(&mut self, rreq: ReqId, ok: bool) {
        let staged = self.typed_get.remove(&rreq.0);
        let Some(s) = self.slot(rreq) else { return };
        let ReqState::Recv {
            buf,
            phase: RecvPhase::Pulling { peer, sreq },
            ..
        } = s.state
        else {
            return;
        };
        let st = s.status;
        if let (true, Some(v)) = (ok, staged) {
            // SAFETY: the receive is pulling (not complete), so its typed
            // buffer is valid and ours (irecv contract); `v` is not part of
            // it.
            unsafe { buf.write_at(0, &v) };
        }
        if ok {
            self.stats.rndv_get += 1;
            self.fin(peer, sreq, 0);
            self.complete(rreq, st);
        } else {
            tracing::debug!(target: "pml_ob1", peer, "get failed; falling back to pipelined fragments");
            self.ack(rreq, peer, sreq, st.count);
        }
    }

    /// The get of receive `rreq` failed for good (broken connection): the
    /// receive fails with `class`; the sender is not told (it cannot be
    /// reached), the application's error handling ends the job.
    pub fn get_failed(&mut self, rreq: ReqId, class: MpiErrorClass) {
        let Some(s) = self.slot(rreq) else { return };
        let ReqState::Recv {
            phase: RecvPhase::Pulling { .. },
            ..
        } = s.state
        else {
            return;
        };
        let st = Status {
            error: class,
            ..s.status
        };
        self.complete(rreq, st);
    }
}
