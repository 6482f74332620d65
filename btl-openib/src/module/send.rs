//! What a module sends and reads: eager messages and generic fragments
//! (copied into registered send buffers), rendezvous requests and their
//! FINs, RDMA reads, and memory registration through the cache.

use super::*;

impl<P: Provider> Module<P> {
    /// Copies `parts` into a send buffer and posts it to `rank`.
    pub(super) fn post_copy(
        &mut self,
        rank: u32,
        parts: &[&[u8]],
        slot_info: SendSlot,
    ) -> Result<()> {
        self.peer(rank)?;
        if self.stats.send_outstanding >= self.cfg.send_queue {
            return Err(OpenibError::Busy);
        }
        let Some(slot) = self.send_free.pop() else {
            return Err(OpenibError::Busy);
        };
        let len = match self.send_slab.fill(slot, parts) {
            Ok(l) => l,
            Err(e) => {
                self.send_free.push(slot);
                return Err(e);
            }
        };
        let sge = [tmpi_verbs::Sge {
            addr: self.send_slab.slot_addr(slot),
            length: len as u32,
            lkey: self.send_mr.lkey(),
        }];
        let qp = &self.peer(rank)?.qp;
        // SAFETY: the SGE lies in `send_mr`, registered on this PD; the slot
        // is owned by this send until its completion returns it to
        // `send_free` (nothing writes it meanwhile).
        let r = unsafe {
            qp.post_send(&SendWr {
                wr_id: wr(K_SEND, u64::from(slot)),
                sg_list: &sge,
                opcode: SendOpcode::Send,
                flags: SendFlags::SIGNALED,
            })
        };
        match r {
            Ok(()) => {
                self.send_slots[slot as usize] = Some(slot_info);
                self.stats.send_outstanding += 1;
                Ok(())
            }
            Err(e) => {
                self.send_free.push(slot);
                Err(post_error(e))
            }
        }
    }

    /// Sends an eager message `TMH(EAGER, app_ctx, tag) | data` (copied
    /// before returning). `id` names the send in a later
    /// [`Event::Failed`]. [`OpenibError::Busy`]: retry after progress.
    pub fn send_eager(
        &mut self,
        rank: u32,
        tag: u64,
        app_ctx: u32,
        data: &[u8],
        id: u64,
    ) -> Result<()> {
        self.send_eager_hdr(rank, tag, app_ctx, &[], data, id)
    }

    /// Sends an eager message `TMH(EAGER, app_ctx, tag) | hdr | data`, as
    /// [`Module::send_eager`]: the caller's header and payload are copied
    /// once each, straight into the registered send buffer (no joining
    /// first). `hdr` + `data` are at most the eager limit.
    pub fn send_eager_hdr(
        &mut self,
        rank: u32,
        tag: u64,
        app_ctx: u32,
        hdr: &[u8],
        data: &[u8],
        id: u64,
    ) -> Result<()> {
        let len = hdr.len() + data.len();
        if len > self.cfg.eager_limit {
            return Err(OpenibError::TooLarge {
                len,
                limit: self.cfg.eager_limit,
            });
        }
        let tmh = Tmh {
            opcode: TmhOpcode::Eager,
            app_ctx,
            tag,
        }
        .to_bytes();
        self.post_copy(
            rank,
            &[&tmh, hdr, data],
            SendSlot {
                id,
                peer: rank,
                what: SendWhat::Eager,
            },
        )
    }

    /// Sends a generic fragment `TMH(NO_TAG) | hdr | data` (copied before
    /// returning): the pml's own protocol traffic, never matched by a NIC.
    /// `btl_tag` travels in the TMH's app_ctx and comes back as
    /// `RecvFrag::tmh.app_ctx`.
    pub fn send_frag(
        &mut self,
        rank: u32,
        btl_tag: u8,
        hdr: &[u8],
        data: &[u8],
        id: u64,
    ) -> Result<()> {
        let len = hdr.len() + data.len();
        if len > self.max_frag() {
            return Err(OpenibError::TooLarge {
                len,
                limit: self.max_frag(),
            });
        }
        let tmh = Tmh {
            opcode: TmhOpcode::NoTag,
            app_ctx: u32::from(btl_tag),
            tag: 0,
        }
        .to_bytes();
        self.post_copy(
            rank,
            &[&tmh, hdr, data],
            SendSlot {
                id,
                peer: rank,
                what: SendWhat::Frag,
            },
        )
    }

    /// Largest rendezvous request to `rank`: the RVH's 32-bit length, and,
    /// towards a peer whose NIC reads it (tag matching there), the largest
    /// message of either port (`max_msg_sz`; 1 GiB on mlx5). UCX caps its
    /// hardware rendezvous the same way.
    pub fn max_rndv_len(&self, rank: u32) -> Result<usize> {
        let p = self.peer(rank)?;
        let mut limit = MAX_RNDV_LEN;
        if p.rndv_hdr > 0 {
            let msg = self.port_attr.max_msg_sz.min(p.max_msg_sz);
            limit = limit.min(msg as usize);
        }
        Ok(limit)
    }

    /// Sends a rendezvous request for `len` bytes at `buf`:
    /// `TMH(RNDV, app_ctx, tag) | RVH | inline`. The buffer is registered
    /// (cache) and stays pinned until the FIN arrives
    /// ([`Event::RndvDone`]) or the send fails ([`Event::Failed`] with
    /// [`Op::Rndv`]). `(rank, tag, app_ctx)` must be unique among this
    /// module's outstanding rendezvous sends (a per-peer sequence number in
    /// `app_ctx` gives that).
    ///
    /// # Safety
    /// `buf..buf+len` must stay valid and unmodified until that event was
    /// returned by [`Module::progress`]: the peer reads it remotely.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn send_rndv(
        &mut self,
        rank: u32,
        tag: u64,
        app_ctx: u32,
        buf: *const u8,
        len: usize,
        inline: &[u8],
        id: u64,
    ) -> Result<()> {
        let limit = self.max_rndv_len(rank)?;
        if len == 0 || len > limit {
            return Err(OpenibError::TooLarge { len, limit });
        }
        if inline.len() > self.max_rts_inline(rank) {
            return Err(OpenibError::TooLarge {
                len: inline.len(),
                limit: self.max_rts_inline(rank),
            });
        }
        let key = (rank, tag, app_ctx);
        if self.rndv.contains_key(&key) {
            return Err(OpenibError::DuplicateRendezvous {
                peer: rank,
                tag,
                app_ctx,
            });
        }
        // SAFETY: forwarded from this function's contract (valid until the
        // FIN or failure, when the pin is released).
        let reg = unsafe {
            self.rcache
                .register(&self.pd, buf, len, AccessFlags::REMOTE_READ)
        }?;
        let hdr = TagHeader {
            tmh: Tmh {
                opcode: TmhOpcode::Rndv,
                app_ctx,
                tag,
            },
            rvh: Some(Rvh {
                va: reg.addr(),
                rkey: reg.rkey(),
                len: len as u32,
            }),
        };
        let mut h = [0u8; TMH_LEN + RVH_LEN];
        hdr.emit(&mut h)?;
        self.post_copy(
            rank,
            &[&h, inline],
            SendSlot {
                id,
                peer: rank,
                what: SendWhat::Rts,
            },
        )?;
        self.rndv.insert(
            key,
            RndvSend {
                id,
                _reg: Some(reg),
            },
        );
        Ok(())
    }

    /// Fault injection for tests (smoltcp's fault-injector idea): sends an
    /// RTS with the caller's RVH as is (e.g. a wrong rkey) and waits for its
    /// FIN like [`Module::send_rndv`], without registering anything.
    #[doc(hidden)]
    pub fn inject_rts(
        &mut self,
        rank: u32,
        tag: u64,
        app_ctx: u32,
        rvh: Rvh,
        id: u64,
    ) -> Result<()> {
        let key = (rank, tag, app_ctx);
        if self.rndv.contains_key(&key) {
            return Err(OpenibError::DuplicateRendezvous {
                peer: rank,
                tag,
                app_ctx,
            });
        }
        let hdr = TagHeader {
            tmh: Tmh {
                opcode: TmhOpcode::Rndv,
                app_ctx,
                tag,
            },
            rvh: Some(rvh),
        };
        let mut h = [0u8; TMH_LEN + RVH_LEN];
        hdr.emit(&mut h)?;
        self.post_copy(
            rank,
            &[&h],
            SendSlot {
                id,
                peer: rank,
                what: SendWhat::Rts,
            },
        )?;
        self.rndv.insert(key, RndvSend { id, _reg: None });
        Ok(())
    }

    /// Sends the FIN of a rendezvous request matched in software (after the
    /// [`Module::get`] of its data): `TMH(FIN) | RVH`, echoing the request.
    pub fn send_fin(&mut self, rank: u32, tmh: Tmh, rvh: Rvh) -> Result<()> {
        self.send_fin_inner(rank, tmh, rvh, 0)
    }

    /// Tells the sender of a rendezvous request that this side could not
    /// read its data: its send fails instead of waiting for a FIN.
    pub fn send_fin_error(&mut self, rank: u32, tmh: Tmh, rvh: Rvh) -> Result<()> {
        self.send_fin_inner(
            rank,
            tmh,
            Rvh {
                len: FIN_ERROR_LEN,
                ..rvh
            },
            0,
        )
    }

    pub(super) fn send_fin_inner(&mut self, rank: u32, tmh: Tmh, rvh: Rvh, id: u64) -> Result<()> {
        let h = TagHeader {
            tmh: Tmh {
                opcode: TmhOpcode::Fin,
                ..tmh
            },
            rvh: Some(rvh),
        };
        let mut b = [0u8; TMH_LEN + RVH_LEN];
        h.emit(&mut b)?;
        self.post_copy(
            rank,
            &[&b],
            SendSlot {
                id,
                peer: rank,
                what: SendWhat::Fin,
            },
        )
    }

    /// Reads `len` bytes of the peer's region `rvh` (from offset 0) into
    /// `dst` by RDMA read (split into chunks of the port's largest message).
    /// [`Event::GetDone`] or [`Event::Failed`] with [`Op::Get`] follows.
    ///
    /// # Safety
    /// `dst..dst+len` must stay valid and must not be accessed until that
    /// event was returned by [`Module::progress`] (the NIC writes it).
    pub unsafe fn get(
        &mut self,
        rank: u32,
        dst: *mut u8,
        len: usize,
        rvh: Rvh,
        id: u64,
    ) -> Result<()> {
        // SAFETY: forwarded from this function's contract.
        unsafe { self.rdma(rank, dst, len, rvh, id, false) }
    }

    /// Writes `len` bytes at `src` to the peer's region `rvh` (from offset
    /// 0; registered with REMOTE_WRITE) by RDMA write, split like
    /// [`Module::get`]. [`Event::GetDone`] (a put's completion too: the
    /// data is in the target's memory) or [`Event::Failed`] with
    /// [`Op::Get`] follows.
    ///
    /// # Safety
    /// `src..src+len` must stay valid and unmodified until that event was
    /// returned by [`Module::progress`] (the NIC reads it).
    pub unsafe fn put(
        &mut self,
        rank: u32,
        src: *const u8,
        len: usize,
        rvh: Rvh,
        id: u64,
    ) -> Result<()> {
        // SAFETY: forwarded; the NIC only reads `src` for a write.
        unsafe { self.rdma(rank, src as *mut u8, len, rvh, id, true) }
    }

    /// RDMA read into (`write == false`) or RDMA write from `buf`.
    ///
    /// # Safety
    /// See [`Module::get`] and [`Module::put`].
    unsafe fn rdma(
        &mut self,
        rank: u32,
        buf: *mut u8,
        len: usize,
        rvh: Rvh,
        id: u64,
        write: bool,
    ) -> Result<()> {
        let what = if write { "put" } else { "get" };
        self.peer(rank)?;
        if len == 0 || len as u64 > u64::from(rvh.len) || rvh.len == FIN_ERROR_LEN {
            return Err(OpenibError::InvalidArgument(format!(
                "{what} of {len} bytes with a region of {} bytes",
                rvh.len
            )));
        }
        let chunks = (len as u64).div_ceil(self.max_chunk) as u32;
        if self.stats.send_outstanding + chunks > self.cfg.send_queue {
            return Err(OpenibError::Busy);
        }
        if write && chunks == 1 && len <= self.send_slab.slot_size() {
            if let Some(slot) = self.send_free.pop() {
                // SAFETY: forwarded from this function's contract.
                return unsafe { self.write_from_slot(rank, slot, buf, len, rvh, id) };
            }
        }
        // The NIC writes the local buffer of a read and only reads that of
        // a write (which may be read-only memory).
        let access = if write {
            AccessFlags::empty()
        } else {
            AccessFlags::LOCAL_WRITE
        };
        // SAFETY: forwarded from this function's contract.
        let reg = unsafe { self.rcache.register(&self.pd, buf, len, access) }?;
        let key = self.next_get;
        self.next_get = (self.next_get + 1) & LOW;
        let qp = &self.peer(rank)?.qp;
        let mut posted = 0u32;
        let mut off = 0u64;
        let mut err = None;
        while off < len as u64 {
            let n = (len as u64 - off).min(self.max_chunk);
            let sge = [reg.sge(off, n as u32)?];
            let (remote_addr, rkey) = (rvh.va + off, rvh.rkey);
            let opcode = if write {
                SendOpcode::RdmaWrite { remote_addr, rkey }
            } else {
                SendOpcode::RdmaRead { remote_addr, rkey }
            };
            // SAFETY: the SGE lies in a region registered on this PD (with
            // LOCAL_WRITE for a read), kept pinned by `GetOp::_reg` until
            // the last chunk's completion; the caller keeps the memory
            // valid.
            let r = unsafe {
                qp.post_send(&SendWr {
                    wr_id: wr(K_GET, key),
                    sg_list: &sge,
                    opcode,
                    flags: SendFlags::SIGNALED,
                })
            };
            if let Err(e) = r {
                err = Some(e);
                break;
            }
            posted += 1;
            off += n;
        }
        if posted == 0 {
            return Err(err.map_or(OpenibError::Busy, post_error));
        }
        self.stats.send_outstanding += posted;
        self.gets.insert(
            key,
            GetOp {
                id,
                peer: rank,
                chunks_left: posted,
                // A partially posted read fails once the posted part is done.
                failed: err.map(|_| WcStatus::LocQpOpErr),
                what: if write { "RDMA write" } else { "RDMA read" },
                _reg: Some(reg),
                slot: None,
            },
        );
        Ok(())
    }

    /// One NIC atomic (`op`) on the 8 bytes at `va` of the peer's region
    /// with `rkey` (this rank: through the loopback pair); the old value
    /// lands in `dst`. [`Event::GetDone`] or [`Event::Failed`] with
    /// [`Op::Get`] follows, as for [`Module::get`].
    ///
    /// # Safety
    /// `dst..dst+8` must stay valid and untouched until that event was
    /// returned by [`Module::progress`] (the NIC writes it).
    pub unsafe fn atomic(
        &mut self,
        rank: u32,
        dst: *mut u8,
        va: u64,
        rkey: u32,
        op: tmpi_btl::AtomicOp,
        id: u64,
    ) -> Result<()> {
        if !self.atomics {
            return Err(OpenibError::InvalidArgument(format!(
                "{} has no atomics",
                self.device
            )));
        }
        self.atomic_peer(rank)?;
        if self.stats.send_outstanding + 1 > self.cfg.send_queue {
            return Err(OpenibError::Busy);
        }
        // SAFETY: forwarded from this function's contract.
        let reg = unsafe {
            self.rcache
                .register(&self.pd, dst, 8, AccessFlags::LOCAL_WRITE)
        }?;
        let opcode = match op {
            tmpi_btl::AtomicOp::FetchAdd(add) => SendOpcode::AtomicFetchAdd {
                remote_addr: va,
                rkey,
                add,
            },
            tmpi_btl::AtomicOp::CmpSwap { compare, swap } => SendOpcode::AtomicCmpSwap {
                remote_addr: va,
                rkey,
                compare,
                swap,
            },
        };
        let sge = [reg.sge(0, 8)?];
        let op = GetOp {
            id,
            peer: rank,
            chunks_left: 1,
            failed: None,
            what: "atomic",
            _reg: Some(reg),
            slot: None,
        };
        // SAFETY: the SGE lies in a region registered on this PD with
        // LOCAL_WRITE, kept pinned by `GetOp::_reg` until the completion;
        // the caller keeps the memory valid.
        unsafe { self.post_tracked(rank, true, &sge, opcode, op) }
    }

    /// A small RDMA write (one chunk) copied into send-buffer slot `slot`
    /// first: no registration of the caller's buffer (none to pay for, none
    /// left in the cache to go stale once a temporary buffer is freed), and
    /// the buffer is free again when this returns. The slot goes back at
    /// the completion ([`Event::GetDone`] or [`Event::Failed`] as for
    /// [`Module::put`]).
    ///
    /// # Safety
    /// `buf..buf+len` readable during the call; `slot` taken from
    /// `send_free`, `len` at most a slot.
    unsafe fn write_from_slot(
        &mut self,
        rank: u32,
        slot: u32,
        buf: *const u8,
        len: usize,
        rvh: Rvh,
        id: u64,
    ) -> Result<()> {
        // SAFETY: the caller's contract.
        let data = unsafe { std::slice::from_raw_parts(buf, len) };
        if let Err(e) = self.send_slab.fill(slot, &[data]) {
            self.send_free.push(slot);
            return Err(e);
        }
        let sge = [tmpi_verbs::Sge {
            addr: self.send_slab.slot_addr(slot),
            length: len as u32,
            lkey: self.send_mr.lkey(),
        }];
        let opcode = SendOpcode::RdmaWrite {
            remote_addr: rvh.va,
            rkey: rvh.rkey,
        };
        let op = GetOp {
            id,
            peer: rank,
            chunks_left: 1,
            failed: None,
            what: "RDMA write",
            _reg: None,
            slot: Some(slot),
        };
        // SAFETY: the SGE lies in `send_mr`, registered on this PD; the
        // slot is owned by this write until its completion returns it to
        // `send_free`.
        let posted = unsafe { self.post_tracked(rank, false, &sge, opcode, op) };
        if posted.is_err() {
            self.send_free.push(slot);
        }
        posted
    }

    /// Posts one signalled RDMA or atomic work request to `rank`
    /// (`loopback`: this rank too, through the loopback pair) and tracks
    /// it as `op` until its completion (`Event::GetDone` or `Failed`).
    ///
    /// # Safety
    /// `sge` lies in a region registered on this PD (with `LOCAL_WRITE`
    /// where the NIC writes it), kept valid until the completion (`op`'s
    /// registration or slot keeps it).
    unsafe fn post_tracked(
        &mut self,
        rank: u32,
        loopback: bool,
        sge: &[tmpi_verbs::Sge],
        opcode: SendOpcode,
        op: GetOp<P>,
    ) -> Result<()> {
        let key = self.next_get;
        let peer = if loopback {
            self.atomic_peer(rank)?
        } else {
            self.peer(rank)?
        };
        // SAFETY: the caller's contract.
        unsafe {
            peer.qp.post_send(&SendWr {
                wr_id: wr(K_GET, key),
                sg_list: sge,
                opcode,
                flags: SendFlags::SIGNALED,
            })
        }
        .map_err(post_error)?;
        self.next_get = (key + 1) & LOW;
        self.stats.send_outstanding += 1;
        self.gets.insert(key, op);
        Ok(())
    }

    /// Registers a user buffer through the cache (e.g. for
    /// [`Module::tm_post_recv`]).
    ///
    /// # Safety
    /// See [`RegCache::register`].
    pub unsafe fn register(
        &mut self,
        buf: *const u8,
        len: usize,
        access: AccessFlags,
    ) -> Result<Reg<P>> {
        // SAFETY: forwarded.
        unsafe { self.rcache.register(&self.pd, buf, len, access) }
    }

    /// Drops cached registrations overlapping `buf..buf+len` (call before
    /// freeing memory that may have been registered).
    pub fn invalidate(&mut self, buf: *const u8, len: usize) {
        self.rcache.invalidate(buf, len);
    }
}

/// A failed post as the module's error: a full send queue is
/// [`OpenibError::Busy`] (retry after progress).
fn post_error(e: tmpi_verbs::VerbsError) -> OpenibError {
    if e.is_full() {
        OpenibError::Busy
    } else {
        e.into()
    }
}
