//! Shared receive queues: basic SRQs and tag-matching SRQs
//! (`ibv_create_srq_ex` with `IBV_SRQT_TM`, `ibv_post_srq_ops`).

use std::ptr::{self, NonNull};
use std::sync::Arc;

use super::cq::CompletionQueue;
use super::error::{IbvError, Result};
use super::inline;
use super::pd::{ProtectionDomain, Sge};
use super::sys::*;

/// A receive work request: the buffers one incoming message may fill.
#[derive(Debug, Clone, Copy)]
pub struct RecvRequest<'a> {
    /// Returned in the completion.
    pub wr_id: u64,
    /// Scatter list (registered memory, `LOCAL_WRITE`).
    pub sges: &'a [Sge],
}

/// Operation on the NIC's tag list (`ibv_ops_wr` opcodes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TmOpKind {
    /// `IBV_WR_TAG_ADD`: append a tagged buffer. A message matches when
    /// `msg_tag & mask == tag` (store `tag` already masked).
    Add {
        /// wr_id of the receive completion(s) this buffer produces.
        recv_wr_id: u64,
        /// The buffer (providers take one SGE per tagged buffer).
        sge: Sge,
        /// Tag to match (already masked).
        tag: u64,
        /// Mask of significant tag bits.
        mask: u64,
    },
    /// `IBV_WR_TAG_DEL`: remove the entry `handle`. Completes with
    /// `WcStatus::TmError` if the NIC consumed it meanwhile.
    Del {
        /// Handle returned by the ADD.
        handle: u32,
    },
    /// `IBV_WR_TAG_SYNC`: report the software unexpected count only.
    Sync,
}

/// One tag-list operation for [`SharedReceiveQueue::post_ops`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TmOp {
    /// wr_id of the operation's own completion (`TmAdd`/`TmDel`/`TmSync`).
    pub wr_id: u64,
    /// What to do.
    pub kind: TmOpKind,
    /// `IBV_OPS_SIGNALED`: ask for a completion of this operation.
    pub signaled: bool,
    /// `Some(n)` sets `IBV_OPS_TM_SYNC` and reports software's count of
    /// processed unexpected messages. Mandatory for `Sync`.
    pub unexpected_cnt: Option<u32>,
    /// Output: the entry handle the provider assigned (valid after a successful `Add`).
    pub handle: u32,
}

/// A shared receive queue. Keeps its PD (and, for TM, its CQ) alive.
pub struct SharedReceiveQueue {
    pd: Arc<ProtectionDomain>,
    cq: Option<Arc<CompletionQueue>>,
    pub(crate) srq: NonNull<ibv_srq>,
    tm: Option<(u32, u32)>,
}

// SAFETY: libibverbs SRQs are thread-safe (posting takes the provider's lock).
unsafe impl Send for SharedReceiveQueue {}
// SAFETY: as above.
unsafe impl Sync for SharedReceiveQueue {}

impl std::fmt::Debug for SharedReceiveQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedReceiveQueue")
            .field("tm", &self.tm)
            .finish()
    }
}

impl ProtectionDomain {
    /// A basic SRQ (`ibv_create_srq_ex` with only a PD, i.e. `ibv_create_srq`).
    pub fn create_srq(
        self: &Arc<Self>,
        max_wr: u32,
        max_sge: u32,
    ) -> Result<Arc<SharedReceiveQueue>> {
        let mut attr = ibv_srq_init_attr_ex {
            attr: ibv_srq_attr {
                max_wr,
                max_sge,
                srq_limit: 0,
            },
            comp_mask: IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_TYPE,
            srq_type: IBV_SRQT_BASIC,
            pd: self.pd.as_ptr(),
            ..Default::default()
        };
        // SAFETY: live context and PD; attr is a local.
        let srq =
            unsafe { inline::create_srq_ex(self.ctx.lib(), self.ctx.ctx.as_ptr(), &mut attr) };
        let srq = NonNull::new(srq).ok_or_else(|| IbvError::errno("ibv_create_srq_ex"))?;
        Ok(Arc::new(SharedReceiveQueue {
            pd: self.clone(),
            cq: None,
            srq,
            tm: None,
        }))
    }

    /// A tag-matching SRQ (`IBV_SRQT_TM`) whose list holds up to
    /// `max_num_tags` entries with at most `max_ops` outstanding operations;
    /// tag-list completions go to `cq` (create it with `tm_info`). Fails with
    /// an unsupported error (see [`IbvError::is_unsupported`]) on devices
    /// without TM; never falls back to a basic SRQ.
    pub fn create_tm_srq(
        self: &Arc<Self>,
        cq: &Arc<CompletionQueue>,
        max_wr: u32,
        max_sge: u32,
        max_num_tags: u32,
        max_ops: u32,
    ) -> Result<Arc<SharedReceiveQueue>> {
        if max_num_tags == 0 || max_ops == 0 {
            return Err(IbvError::InvalidArgument(
                "a TM SRQ needs max_num_tags > 0 and max_ops > 0".into(),
            ));
        }
        if !Arc::ptr_eq(cq.context(), &self.ctx) {
            return Err(IbvError::InvalidArgument(
                "CQ and PD belong to different devices".into(),
            ));
        }
        let mut attr = ibv_srq_init_attr_ex {
            attr: ibv_srq_attr {
                max_wr,
                max_sge,
                srq_limit: 0,
            },
            comp_mask: IBV_SRQ_INIT_ATTR_TYPE
                | IBV_SRQ_INIT_ATTR_PD
                | IBV_SRQ_INIT_ATTR_CQ
                | IBV_SRQ_INIT_ATTR_TM,
            srq_type: IBV_SRQT_TM,
            pd: self.pd.as_ptr(),
            cq: cq.as_cq(),
            tm_cap: ibv_tm_cap {
                max_num_tags,
                max_ops,
            },
            ..Default::default()
        };
        // SAFETY: live context, PD and CQ; attr is a local.
        let srq =
            unsafe { inline::create_srq_ex(self.ctx.lib(), self.ctx.ctx.as_ptr(), &mut attr) };
        let srq =
            NonNull::new(srq).ok_or_else(|| IbvError::errno("ibv_create_srq_ex(IBV_SRQT_TM)"))?;
        tracing::debug!(target: "verbs", max_num_tags, max_ops, "created TM SRQ");
        Ok(Arc::new(SharedReceiveQueue {
            pd: self.clone(),
            cq: Some(cq.clone()),
            srq,
            tm: Some((max_num_tags, max_ops)),
        }))
    }
}

impl SharedReceiveQueue {
    /// True for a tag-matching SRQ.
    pub fn is_tm(&self) -> bool {
        self.tm.is_some()
    }

    /// `(max_num_tags, max_ops)` of a TM SRQ as requested at creation.
    pub fn tm_caps(&self) -> Option<(u32, u32)> {
        self.tm
    }

    /// `ibv_get_srq_num` (XRC/TM SRQs; `EOPNOTSUPP` on providers without it).
    pub fn srq_num(&self) -> Result<u32> {
        let mut n = 0u32;
        // SAFETY: live SRQ; n is a local.
        let rc = unsafe { inline::get_srq_num(self.srq.as_ptr(), &mut n) };
        if rc != 0 {
            return Err(IbvError::code("ibv_get_srq_num", rc));
        }
        Ok(n)
    }

    /// The protection domain.
    pub fn pd(&self) -> &Arc<ProtectionDomain> {
        &self.pd
    }

    /// The CQ of a TM SRQ.
    pub fn cq(&self) -> Option<&Arc<CompletionQueue>> {
        self.cq.as_ref()
    }

    /// `ibv_query_srq`: (max_wr, max_sge, srq_limit) as the provider set them.
    pub fn query(&self) -> Result<(u32, u32, u32)> {
        let mut a = ibv_srq_attr::default();
        // SAFETY: live SRQ; a is a local.
        let rc = unsafe { (self.pd.ctx.lib().fns.query_srq)(self.srq.as_ptr(), &mut a) };
        if rc != 0 {
            return Err(IbvError::code("ibv_query_srq", rc));
        }
        Ok((a.max_wr, a.max_sge, a.srq_limit))
    }

    /// `ibv_post_srq_recv`: posts untagged receive buffers (on a TM SRQ they
    /// take unexpected and NO_TAG messages).
    ///
    /// # Safety
    /// Every SGE must lie in a registered region with `LOCAL_WRITE` that
    /// stays registered, and whose memory nobody else reads or writes, until
    /// the receive's completion has been polled (or the SRQ is destroyed).
    pub unsafe fn post_recv(&self, reqs: &[RecvRequest<'_>]) -> Result<()> {
        if reqs.is_empty() {
            return Ok(());
        }
        let mut wrs = build_recv_chain(reqs)?;
        let mut bad: *mut ibv_recv_wr = ptr::null_mut();
        // SAFETY: live SRQ; the chain and its SGE arrays live until return
        // (providers copy them into WQEs); buffer validity is the caller's contract.
        let rc = unsafe { inline::post_srq_recv(self.srq.as_ptr(), wrs.as_mut_ptr(), &mut bad) };
        if rc != 0 {
            return Err(post_error("ibv_post_srq_recv", rc, &wrs, bad));
        }
        Ok(())
    }

    /// `ibv_post_srq_ops`: posts a chain of tag-list operations; on success
    /// each `Add` gets its `handle`.
    ///
    /// # Safety
    /// For every `Add`, the SGE must lie in a registered region with
    /// `LOCAL_WRITE` that stays registered and untouched until the entry is
    /// settled (its receive completion, or a successful `Del`).
    pub unsafe fn post_ops(&self, ops: &mut [TmOp]) -> Result<()> {
        if self.tm.is_none() {
            return Err(IbvError::InvalidArgument("post_ops on a non-TM SRQ".into()));
        }
        if ops.is_empty() {
            return Ok(());
        }
        // SAFETY: live TM SRQ; buffer validity is the caller's contract.
        unsafe { submit_ops(self.srq.as_ptr(), ops) }
    }
}

/// Marshals `ops` into an `ibv_ops_wr` chain, posts it with
/// `ibv_post_srq_ops` and writes the handles of the ADDs that were posted.
///
/// # Safety
/// `srq` must be a live SRQ; the ADD buffers obey [`SharedReceiveQueue::post_ops`]'s contract.
pub(crate) unsafe fn submit_ops(srq: *mut ibv_srq, ops: &mut [TmOp]) -> Result<()> {
    let mut sges: Vec<ibv_sge> = Vec::with_capacity(ops.len());
    for op in ops.iter() {
        if matches!(op.kind, TmOpKind::Sync) && op.unexpected_cnt.is_none() {
            return Err(IbvError::InvalidArgument(
                "TAG_SYNC needs unexpected_cnt".into(),
            ));
        }
        if let TmOpKind::Add { sge, .. } = op.kind {
            sges.push(sge.into());
        }
    }
    let mut wrs: Vec<ibv_ops_wr> = Vec::with_capacity(ops.len());
    let mut s = 0;
    for op in ops.iter() {
        let mut w = ibv_ops_wr {
            wr_id: op.wr_id,
            ..Default::default()
        };
        let mut flags = 0;
        if op.signaled {
            flags |= IBV_OPS_SIGNALED;
        }
        if let Some(n) = op.unexpected_cnt {
            flags |= IBV_OPS_TM_SYNC;
            w.tm.unexpected_cnt = n;
        }
        w.flags = flags as i32;
        match op.kind {
            TmOpKind::Add {
                recv_wr_id,
                tag,
                mask,
                ..
            } => {
                w.opcode = IBV_WR_TAG_ADD;
                w.tm.add.recv_wr_id = recv_wr_id;
                // Element s of `sges`, which is not resized any more.
                w.tm.add.sg_list = sges.as_mut_ptr().wrapping_add(s);
                w.tm.add.num_sge = 1;
                w.tm.add.tag = tag;
                w.tm.add.mask = mask;
                s += 1;
            }
            TmOpKind::Del { handle } => {
                w.opcode = IBV_WR_TAG_DEL;
                w.tm.handle = handle;
            }
            TmOpKind::Sync => w.opcode = IBV_WR_TAG_SYNC,
        }
        wrs.push(w);
    }
    link(&mut wrs, |w, n| w.next = n);
    let mut bad: *mut ibv_ops_wr = ptr::null_mut();
    // SAFETY: live TM SRQ; the chain and SGEs live until return; buffer
    // validity is the caller's contract.
    let rc = unsafe { inline::post_srq_ops(srq, wrs.as_mut_ptr(), &mut bad) };
    let done = if rc == 0 {
        wrs.len()
    } else {
        index_of(&wrs, bad)
    };
    for (op, w) in ops.iter_mut().zip(&wrs).take(done) {
        if matches!(op.kind, TmOpKind::Add { .. }) {
            op.handle = w.tm.handle;
        }
    }
    if rc != 0 {
        return Err(post_error("ibv_post_srq_ops", rc, &wrs, bad));
    }
    Ok(())
}

impl Drop for SharedReceiveQueue {
    fn drop(&mut self) {
        // SAFETY: live SRQ; QPs attached to it hold Arcs to it and are gone.
        let rc = unsafe { (self.pd.ctx.lib().fns.destroy_srq)(self.srq.as_ptr()) };
        if rc != 0 {
            tracing::warn!(target: "verbs", rc, "ibv_destroy_srq failed");
        }
    }
}

/// Links `v[i].next = &v[i+1]`, last one NULL.
pub(crate) fn link<T>(v: &mut [T], mut set: impl FnMut(&mut T, *mut T)) {
    let base = v.as_mut_ptr();
    let n = v.len();
    for (i, w) in v.iter_mut().enumerate() {
        let next = if i + 1 < n {
            base.wrapping_add(i + 1)
        } else {
            ptr::null_mut()
        };
        set(w, next);
    }
}

/// Index of `bad` within `v` (v.len() if it is not an element).
pub(crate) fn index_of<T>(v: &[T], bad: *mut T) -> usize {
    v.iter().position(|w| ptr::eq(w, bad)).unwrap_or(v.len())
}

pub(crate) fn post_error<T>(verb: &'static str, rc: i32, v: &[T], bad: *mut T) -> IbvError {
    let source = if rc < 0 {
        std::io::Error::from_raw_os_error(-rc)
    } else {
        std::io::Error::from_raw_os_error(rc)
    };
    IbvError::Post {
        verb,
        index: index_of(v, bad).min(v.len().saturating_sub(1)),
        source,
    }
}

pub(crate) fn build_recv_chain(reqs: &[RecvRequest<'_>]) -> Result<Vec<ibv_recv_wr>> {
    let mut wrs = Vec::with_capacity(reqs.len());
    for r in reqs {
        wrs.push(ibv_recv_wr {
            wr_id: r.wr_id,
            next: ptr::null_mut(),
            // Sge is #[repr(C)] with ibv_sge's layout (checked in pd.rs); the
            // provider reads the list during the call only.
            sg_list: r.sges.as_ptr().cast::<ibv_sge>().cast_mut(),
            num_sge: i32::try_from(r.sges.len())
                .map_err(|_| IbvError::InvalidArgument("too many SGEs".into()))?,
        });
    }
    link(&mut wrs, |w, n| w.next = n);
    Ok(wrs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::c_int;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Mutex;

    /// What the fake provider saw: (wr_id, opcode, flags, unexpected_cnt,
    /// handle, recv_wr_id, sge, num_sge, tag, mask).
    type Seen = (u64, u32, i32, u32, u32, u64, Option<Sge>, i32, u64, u64);
    static SEEN: Mutex<Vec<Seen>> = Mutex::new(Vec::new());
    /// Index at which the fake fails with ENOMEM (usize::MAX: never).
    static FAIL_AT: AtomicUsize = AtomicUsize::new(usize::MAX);

    /// A provider's post_srq_ops: records the chain, assigns handles 100+i
    /// to ADDs, fails with ENOMEM at FAIL_AT like mlx5 does when full.
    unsafe extern "C" fn fake_post_srq_ops(
        _srq: *mut ibv_srq,
        mut op: *mut ibv_ops_wr,
        bad: *mut *mut ibv_ops_wr,
    ) -> c_int {
        let mut seen = SEEN.lock().unwrap();
        let mut i = 0;
        while !op.is_null() {
            if i == FAIL_AT.load(Ordering::SeqCst) {
                // SAFETY: bad is the caller's out-parameter.
                unsafe { *bad = op };
                return libc::ENOMEM;
            }
            // SAFETY: op walks the caller's chain.
            let w = unsafe { &mut *op };
            let sge = (w.opcode == IBV_WR_TAG_ADD && w.tm.add.num_sge == 1).then(|| {
                // SAFETY: an ADD's sg_list has num_sge elements.
                let s = unsafe { *w.tm.add.sg_list };
                Sge {
                    addr: s.addr,
                    length: s.length,
                    lkey: s.lkey,
                }
            });
            seen.push((
                w.wr_id,
                w.opcode,
                w.flags,
                w.tm.unexpected_cnt,
                w.tm.handle,
                w.tm.add.recv_wr_id,
                sge,
                w.tm.add.num_sge,
                w.tm.add.tag,
                w.tm.add.mask,
            ));
            if w.opcode == IBV_WR_TAG_ADD {
                w.tm.handle = 100 + i as u32;
            }
            op = w.next;
            i += 1;
        }
        0
    }

    fn add(wr_id: u64, tag: u64, signaled: bool, sync: Option<u32>) -> TmOp {
        TmOp {
            wr_id,
            kind: TmOpKind::Add {
                recv_wr_id: wr_id + 1000,
                sge: Sge {
                    addr: 0x1000 * wr_id,
                    length: 64,
                    lkey: 7,
                },
                tag,
                mask: !0xff,
            },
            signaled,
            unexpected_cnt: sync,
            handle: 0,
        }
    }

    /// The ibv_ops_wr chain carries every field, flag and SGE; handles come
    /// back for ADDs; a failure names the first unposted op and keeps the
    /// handles of those before it. (TM hardware is absent in CI; this checks
    /// the marshalling against a provider op installed in a fake context.)
    #[test]
    fn ops_chain_marshalling_and_partial_failure() {
        let mut v: Box<verbs_context> = Box::default();
        v.context.abi_compat = usize::MAX as *mut _;
        v.sz = std::mem::size_of::<verbs_context>();
        v.post_srq_ops = Some(fake_post_srq_ops);
        let mut srq = ibv_srq {
            context: &mut v.context,
            ..Default::default()
        };
        let mut ops = [
            add(1, 0xab00, true, None),
            TmOp {
                wr_id: 2,
                kind: TmOpKind::Del { handle: 77 },
                signaled: false,
                unexpected_cnt: Some(5),
                handle: 0,
            },
            add(3, 0xcd00, false, Some(6)),
            TmOp {
                wr_id: 4,
                kind: TmOpKind::Sync,
                signaled: true,
                unexpected_cnt: Some(65535),
                handle: 0,
            },
        ];
        FAIL_AT.store(usize::MAX, Ordering::SeqCst);
        SEEN.lock().unwrap().clear();
        // SAFETY: fake SRQ/context are live locals; no real buffers involved.
        unsafe { submit_ops(&mut srq, &mut ops) }.unwrap();
        let seen = SEEN.lock().unwrap().clone();
        let sig = IBV_OPS_SIGNALED as i32;
        let sync = IBV_OPS_TM_SYNC as i32;
        let sge1 = Some(Sge {
            addr: 0x1000,
            length: 64,
            lkey: 7,
        });
        let sge3 = Some(Sge {
            addr: 0x3000,
            length: 64,
            lkey: 7,
        });
        assert_eq!(seen.len(), 4);
        assert_eq!(
            seen[0],
            (1, IBV_WR_TAG_ADD, sig, 0, 0, 1001, sge1, 1, 0xab00, !0xff)
        );
        assert_eq!(
            (seen[1].0, seen[1].1, seen[1].2, seen[1].3, seen[1].4),
            (2, IBV_WR_TAG_DEL, sync, 5, 77)
        );
        assert_eq!(
            seen[2],
            (3, IBV_WR_TAG_ADD, sync, 6, 0, 1003, sge3, 1, 0xcd00, !0xff)
        );
        assert_eq!(
            (seen[3].0, seen[3].1, seen[3].2, seen[3].3),
            (4, IBV_WR_TAG_SYNC, sig | sync, 65535)
        );
        assert_eq!(ops[0].handle, 100);
        assert_eq!(ops[2].handle, 102);
        assert_eq!(
            ops[1].handle, 0,
            "DEL keeps its input handle field untouched"
        );

        // The provider refuses the third op (list full): ops 0 and 1 were posted.
        let mut ops2 = [
            add(5, 1, true, None),
            add(6, 2, true, None),
            add(7, 3, true, None),
        ];
        FAIL_AT.store(2, Ordering::SeqCst);
        SEEN.lock().unwrap().clear();
        // SAFETY: as above.
        let e = unsafe { submit_ops(&mut srq, &mut ops2) }.unwrap_err();
        assert!(matches!(e, IbvError::Post { index: 2, .. }), "{e:?}");
        assert_eq!(e.os_error(), Some(libc::ENOMEM));
        assert_eq!(
            (ops2[0].handle, ops2[1].handle, ops2[2].handle),
            (100, 101, 0)
        );

        // A SYNC without a count is refused before reaching the provider.
        FAIL_AT.store(usize::MAX, Ordering::SeqCst);
        SEEN.lock().unwrap().clear();
        let mut bad_sync = [TmOp {
            wr_id: 9,
            kind: TmOpKind::Sync,
            signaled: true,
            unexpected_cnt: None,
            handle: 0,
        }];
        // SAFETY: as above.
        let e = unsafe { submit_ops(&mut srq, &mut bad_sync) }.unwrap_err();
        assert!(matches!(e, IbvError::InvalidArgument(_)), "{e:?}");
        assert!(SEEN.lock().unwrap().is_empty());
    }
}
