//! Progress: the receive pool kept full, the completion queue polled,
//! and every completion (receives, sends, reads, list operations, tagged
//! receives) turned into [`Event`]s; a completion error fails its peer.

use super::*;

impl<P: Provider> Module<P> {
    /// Reposts returned buffers and grows the posted pool when it runs low.
    pub(super) fn replenish(&mut self) -> Result<()> {
        self.recv_slab.take_returned(&mut self.returned);
        self.recv_free.append(&mut self.returned);
        let s = &mut self.stats;
        if s.recv_posted < s.recv_target / 4 && s.recv_target < self.cfg.srq_max {
            s.recv_target = (s.recv_target * 2).min(self.cfg.srq_max);
            s.recv_grows += 1;
            tracing::debug!(target: "btl_openib", target = s.recv_target, "receive pool grown");
        }
        while self.stats.recv_posted < self.stats.recv_target {
            let Some(slot) = self.recv_free.pop() else {
                break;
            };
            let sge = [tmpi_verbs::Sge {
                addr: self.recv_slab.slot_addr(slot),
                length: self.recv_slab.slot_size() as u32,
                lkey: self.recv_mr.lkey(),
            }];
            // SAFETY: the SGE lies in `recv_mr` (LOCAL_WRITE, this PD); the
            // slot belongs to the NIC until its completion is polled, and
            // nothing reads or writes it meanwhile (it is in no free list and
            // lent to no frag).
            let r = unsafe {
                self.srq.post_srq_recv(&RecvWr {
                    wr_id: wr(K_RECV, u64::from(slot)),
                    sg_list: &sge,
                })
            };
            if let Err(e) = r {
                self.recv_free.push(slot);
                if e.is_full() {
                    break;
                }
                return Err(e.into());
            }
            self.stats.recv_posted += 1;
        }
        Ok(())
    }

    /// Polls the CQ once (up to 256 completions), reposts receive buffers,
    /// trims the registration cache, and appends what happened to `out`.
    /// Returns the number of completions processed.
    ///
    /// Errors are fatal for the module (CQ overrun, SRQ post failure);
    /// failures of individual operations come as [`Event::Failed`].
    pub fn progress(&mut self, out: &mut Vec<Event>) -> Result<usize> {
        self.replenish()?;
        let mut total = 0;
        let mut wcs = std::mem::take(&mut self.wcs);
        while total < 256 {
            let n = match self.cq.poll(&mut wcs) {
                Ok(n) => n,
                Err(e) => {
                    tracing::error!(target: "btl_openib", device = %self.device, "completion queue failed: {e}");
                    self.wcs = wcs;
                    return Err(e.into());
                }
            };
            for wc in &wcs[..n] {
                self.completion(wc, out);
            }
            total += n;
            if n < wcs.len() {
                break;
            }
        }
        self.wcs = wcs;
        self.replenish()?;
        self.rcache.trim();
        if !self.rndv.is_empty() {
            self.check_rendezvous_peers(out);
        }
        Ok(total)
    }

    /// A rendezvous send waits for the receiver's FIN. When the receiver's
    /// NIC failed to read our memory (a remote access error: a bad key, a
    /// region gone), the NAK moved our QP to the error state as well as the
    /// receiver's, so no FIN can come, and no completion tells us (hardware
    /// reports the responder's error as an asynchronous event only). So
    /// every [`QP_STATE_CHECK`] the QPs of peers with rendezvous sends
    /// pending are queried; one in the error state fails its peer, and with
    /// it those sends.
    fn check_rendezvous_peers(&mut self, out: &mut Vec<Event>) {
        let now = std::time::Instant::now();
        if now.duration_since(self.last_qp_check) < QP_STATE_CHECK {
            return;
        }
        self.last_qp_check = now;
        let mut ranks: Vec<u32> = self.rndv.keys().map(|k| k.0).collect();
        ranks.sort_unstable();
        ranks.dedup();
        for rank in ranks {
            let broken = matches!(self.peers.get(rank as usize),
                Some(Some(p)) if p.state != PeerState::Failed && p.qp.state() == QpState::Error);
            if broken {
                self.fail_peer(rank, WcStatus::WrFlushErr, out);
            }
        }
    }

    pub(super) fn recv_slab_slots(&self) -> u32 {
        (self.recv_slab.bytes() / self.recv_slab.slot_size()) as u32
    }

    pub(super) fn rank_of(&self, qpn: u32) -> u32 {
        self.qp_rank.get(&qpn).copied().unwrap_or(u32::MAX)
    }

    /// Breaks the connection to `rank` (QP to the error state: its
    /// outstanding work completes with flush errors); pending rendezvous
    /// sends to it fail. For timeouts detected above the module.
    pub fn abort_peer(&mut self, rank: u32, out: &mut Vec<Event>) {
        self.fail_peer(rank, WcStatus::GeneralErr, out);
    }

    pub(super) fn fail_peer(&mut self, rank: u32, status: WcStatus, out: &mut Vec<Event>) {
        let Some(Some(p)) = self.peers.get_mut(rank as usize) else {
            return;
        };
        if p.state == PeerState::Failed {
            return;
        }
        p.state = PeerState::Failed;
        if let Err(e) = p.qp.modify_to_error() {
            tracing::warn!(target: "btl_openib", rank, "moving the QP to the error state failed: {e}");
        }
        tracing::error!(target: "btl_openib", device = %self.device, rank,
            "connection to rank {rank} broken (completion status {status:?}); its pending rendezvous sends fail");
        let keys: Vec<RndvKey> = self.rndv.keys().filter(|k| k.0 == rank).copied().collect();
        for k in keys {
            if let Some(r) = self.rndv.remove(&k) {
                out.push(Event::Failed {
                    id: r.id,
                    peer: rank,
                    op: Op::Rndv,
                    error: OpenibError::Completion {
                        what: "rendezvous send",
                        peer: rank,
                        status,
                    },
                });
            }
        }
    }

    pub(super) fn completion(&mut self, wc: &WorkCompletion, out: &mut Vec<Event>) {
        let kind = wc.wr_id >> 56;
        let low = wc.wr_id & LOW;
        match kind {
            K_RECV => self.recv_completion(wc, low as u32, out),
            K_SEND => self.send_completion(wc, low as u32, out),
            K_GET => self.get_completion(wc, low, out),
            K_TM_ADD | K_TM_DEL | K_TM_SYNC => self.tm_op_completion(wc, kind, low, out),
            K_TAGGED => self.tagged_completion(wc, low, out),
            _ => {
                tracing::error!(target: "btl_openib", wr_id = wc.wr_id, ?wc, "completion with unknown wr_id")
            }
        }
    }

    pub(super) fn recv_completion(&mut self, wc: &WorkCompletion, slot: u32, out: &mut Vec<Event>) {
        if slot >= self.recv_slab_slots() {
            tracing::error!(target: "btl_openib", ?wc, "receive completion for an unknown buffer");
            return;
        }
        self.stats.recv_posted = self.stats.recv_posted.saturating_sub(1);
        if wc.status != WcStatus::Success {
            // Flushed buffers (QP/SRQ in error) or a too-long message.
            if wc.status != WcStatus::WrFlushErr {
                tracing::error!(target: "btl_openib", device = %self.device, status = ?wc.status,
                    rank = self.rank_of(wc.qp_num), "receive completion error; message dropped");
            }
            self.recv_free.push(slot);
            return;
        }
        let unexpected = wc.opcode == WcOpcode::TmRecv;
        if unexpected {
            // Counted whether or not it parses: the NIC counted it.
            self.sw_unexpected = self.sw_unexpected.wrapping_add(1);
        }
        self.stats.recv_msgs += 1;
        let len = wc.byte_len as usize;
        let peer = self.rank_of(wc.qp_num);
        match parse_header(&self.recv_slab, slot, len) {
            Ok(Some(h)) => out.push(Event::Recv(RecvFrag::new(
                &self.recv_slab,
                slot,
                len,
                peer,
                unexpected,
                h,
            ))),
            Ok(None) => {
                let fin = parse_fin(&self.recv_slab, slot, len);
                self.recv_free.push(slot);
                match fin {
                    Ok((tmh, rvh)) => self.fin_arrived(peer, tmh, rvh, out),
                    Err(e) => {
                        tracing::error!(target: "btl_openib", peer, "malformed FIN dropped: {e}")
                    }
                }
            }
            Err(e) => {
                self.recv_free.push(slot);
                tracing::error!(target: "btl_openib", peer, len, "malformed message dropped: {e}");
            }
        }
    }

    pub(super) fn fin_arrived(
        &mut self,
        peer: u32,
        tmh: Tmh,
        rvh: Option<Rvh>,
        out: &mut Vec<Event>,
    ) {
        let Some(r) = self.rndv.remove(&(peer, tmh.tag, tmh.app_ctx)) else {
            tracing::error!(target: "btl_openib", peer, tag = tmh.tag, app_ctx = tmh.app_ctx,
                "FIN for no outstanding rendezvous send; ignored");
            return;
        };
        if rvh.is_some_and(|v| v.len == FIN_ERROR_LEN) {
            tracing::error!(target: "btl_openib", peer, tag = tmh.tag, "rank {peer} could not read a rendezvous send; the send fails");
            out.push(Event::Failed {
                id: r.id,
                peer,
                op: Op::Rndv,
                error: OpenibError::Completion {
                    what: "rendezvous read by the receiver",
                    peer,
                    status: WcStatus::RemAccessErr,
                },
            });
        } else {
            out.push(Event::RndvDone { id: r.id, peer });
        }
    }

    pub(super) fn send_completion(&mut self, wc: &WorkCompletion, slot: u32, out: &mut Vec<Event>) {
        let info = self
            .send_slots
            .get_mut(slot as usize)
            .and_then(Option::take);
        if info.is_some() {
            self.stats.send_outstanding = self.stats.send_outstanding.saturating_sub(1);
            self.send_free.push(slot);
        }
        let Some(info) = info else {
            tracing::error!(target: "btl_openib", slot, "send completion for a free slot");
            return;
        };
        if wc.status == WcStatus::Success {
            return;
        }
        let what = match info.what {
            SendWhat::Eager => "eager send",
            SendWhat::Frag => "fragment send",
            SendWhat::Fin => "FIN send",
            SendWhat::Rts => "rendezvous request",
        };
        if wc.status != WcStatus::WrFlushErr {
            tracing::error!(target: "btl_openib", device = %self.device, peer = info.peer,
                status = ?wc.status, vendor_err = wc.vendor_err, "{what} to rank {} failed", info.peer);
        }
        // The RTS's rendezvous fails with the peer (fail_peer reports it).
        if !matches!(info.what, SendWhat::Rts | SendWhat::Fin) {
            out.push(Event::Failed {
                id: info.id,
                peer: info.peer,
                op: Op::Send,
                error: OpenibError::Completion {
                    what,
                    peer: info.peer,
                    status: wc.status,
                },
            });
        }
        self.fail_peer(info.peer, wc.status, out);
    }

    pub(super) fn get_completion(&mut self, wc: &WorkCompletion, key: u64, out: &mut Vec<Event>) {
        self.stats.send_outstanding = self.stats.send_outstanding.saturating_sub(1);
        let Some(g) = self.gets.get_mut(&key) else {
            tracing::error!(target: "btl_openib", key, "RDMA read completion for no read");
            return;
        };
        g.chunks_left -= 1;
        if wc.status != WcStatus::Success && g.failed.is_none() {
            g.failed = Some(wc.status);
        }
        if g.chunks_left > 0 {
            return;
        }
        let Some(g) = self.gets.remove(&key) else {
            return;
        };
        if let Some(slot) = g.slot {
            self.send_free.push(slot);
        }
        match g.failed {
            None => out.push(Event::GetDone {
                id: g.id,
                peer: g.peer,
            }),
            Some(status) => {
                let what = g.what;
                tracing::error!(target: "btl_openib", device = %self.device, peer = g.peer, ?status,
                    "{what} with rank {} failed", g.peer);
                out.push(Event::Failed {
                    id: g.id,
                    peer: g.peer,
                    op: Op::Get,
                    error: OpenibError::Completion {
                        what,
                        peer: g.peer,
                        status,
                    },
                });
                // On hardware any error moves the QP to the error state.
                self.fail_peer(g.peer, status, out);
            }
        }
    }

    pub(super) fn tm_op_completion(
        &mut self,
        wc: &WorkCompletion,
        kind: u64,
        recv_id: u64,
        out: &mut Vec<Event>,
    ) {
        self.tm_ops_out = self.tm_ops_out.saturating_sub(1);
        let ev = match (kind, wc.status) {
            (K_TM_ADD, WcStatus::Success) => TmEvent::Added {
                recv_id,
                sync_req: wc.flags.contains(WcFlags::TM_SYNC_REQ),
            },
            (K_TM_DEL, WcStatus::Success) => {
                self.tagged.remove(&recv_id);
                TmEvent::Deleted { recv_id }
            }
            (K_TM_DEL, WcStatus::TmErr) => TmEvent::DelConsumed { recv_id },
            (K_TM_SYNC, WcStatus::Success) => TmEvent::Synced,
            (_, status) => {
                tracing::error!(target: "btl_openib", device = %self.device, recv_id, ?status,
                    "tag-list operation failed");
                if kind == K_TM_ADD {
                    self.tagged.remove(&recv_id);
                }
                out.push(Event::Failed {
                    id: recv_id,
                    peer: u32::MAX,
                    op: Op::TaggedRecv,
                    error: OpenibError::Completion {
                        what: "tag-list operation",
                        peer: u32::MAX,
                        status,
                    },
                });
                return;
            }
        };
        out.push(Event::Tm(ev));
    }

    /// A completion of a tagged buffer. mlx5 reports a match in one of
    /// these forms (rdma-core `providers/mlx5/cq.c`, `handle_tag_matching`
    /// and `mlx5_cq_read_wc_flags`; `Documentation/tag_matching.md`):
    /// - one CQE `MATCH|DATA_VALID`: a single-packet eager message;
    /// - `MATCH`, later `DATA_VALID`: an eager message of several packets,
    ///   or a rendezvous the NIC reads itself;
    /// - software rendezvous (`RNDV_INCOMPLETE`): one CQE
    ///   `MATCH|DATA_VALID`; or `MATCH` with the status and a second CQE
    ///   `DATA_VALID`; or a plain `MATCH` followed by a `MATCH|DATA_VALID`
    ///   CQE with the status (a cancelled NIC rendezvous).
    ///
    /// The tag information is read only from the first CQE with `MATCH`
    /// (later CQEs need not carry it), and the TMH/RVH of a software
    /// rendezvous only once `DATA_VALID` is seen.
    pub(super) fn tagged_completion(
        &mut self,
        wc: &WorkCompletion,
        recv_id: u64,
        out: &mut Vec<Event>,
    ) {
        let peer = self.rank_of(wc.qp_num);
        let has_match = wc.flags.contains(WcFlags::TM_MATCH);
        let valid = wc.flags.contains(WcFlags::TM_DATA_VALID);
        let Some(t) = self.tagged.get_mut(&recv_id) else {
            tracing::error!(target: "btl_openib", recv_id, status = ?wc.status,
                "completion for a tagged buffer that is not posted; ignored");
            return;
        };
        let first = t.matched.is_none();
        if has_match && first {
            t.matched = Some(wc.tm_info.unwrap_or_default());
        }
        let info = t.matched.unwrap_or_default();
        let tmh = Tmh {
            opcode: TmhOpcode::Rndv,
            app_ctx: info.priv_,
            tag: info.tag,
        };
        let matched_event = |complete| {
            Event::Tm(TmEvent::Matched {
                recv_id,
                peer,
                tag: info.tag,
                app_ctx: info.priv_,
                byte_len: wc.byte_len,
                complete,
            })
        };
        match wc.status {
            WcStatus::Success if has_match && valid && first => {
                self.tagged.remove(&recv_id);
                out.push(matched_event(true));
            }
            WcStatus::Success if has_match && first => out.push(matched_event(false)),
            WcStatus::Success if valid && !first => {
                let Some(t) = self.tagged.remove(&recv_id) else {
                    return;
                };
                if t.sw_rndv {
                    let rvh = read_rvh(&t.reg);
                    out.push(Event::Tm(TmEvent::RndvIncomplete {
                        recv_id,
                        tmh,
                        rvh,
                        after_match: true,
                    }));
                } else {
                    out.push(Event::Tm(TmEvent::DataValid {
                        recv_id,
                        byte_len: wc.byte_len,
                    }));
                }
            }
            WcStatus::TmRndvIncomplete if valid => {
                let Some(t) = self.tagged.remove(&recv_id) else {
                    return;
                };
                let rvh = read_rvh(&t.reg);
                out.push(Event::Tm(TmEvent::RndvIncomplete {
                    recv_id,
                    tmh,
                    rvh,
                    after_match: !first,
                }));
            }
            WcStatus::TmRndvIncomplete if has_match && first => {
                // The tag is not released: a DATA_VALID completion follows.
                t.sw_rndv = true;
                out.push(matched_event(false));
            }
            WcStatus::Success | WcStatus::TmRndvIncomplete => {
                tracing::error!(target: "btl_openib", recv_id, status = ?wc.status,
                    has_match, valid, first, "tagged completion out of sequence; ignored");
            }
            status => {
                let t = self.tagged.remove(&recv_id);
                let was_matched = t.is_some_and(|t| t.matched.is_some());
                if status != WcStatus::WrFlushErr {
                    tracing::error!(target: "btl_openib", device = %self.device, recv_id, ?status,
                        was_matched, "offloaded receive failed at the NIC");
                }
                out.push(Event::Failed {
                    id: recv_id,
                    peer: u32::MAX,
                    op: Op::TaggedRecv,
                    error: OpenibError::Completion {
                        what: "offloaded receive",
                        peer: u32::MAX,
                        status,
                    },
                });
            }
        }
    }
}
