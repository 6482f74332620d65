//! Completion queues: extended CQs (`ibv_create_cq_ex`, polled with
//! `start_poll`/`next_poll`/`end_poll`, with tag-matching info) and a legacy
//! fallback (`ibv_create_cq` + `ibv_poll_cq`) for providers without
//! `create_cq_ex`.

use std::ptr::NonNull;
use std::sync::{Arc, Mutex};

use super::device::Context;
use super::error::{IbvError, Result};
use super::inline;
use super::sys::*;

/// Completion status (`ibv_wc_status`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum WcStatus {
    /// `IBV_WC_SUCCESS`
    Success,
    /// `IBV_WC_LOC_LEN_ERR`: receive buffer too small.
    LocalLength,
    /// `IBV_WC_LOC_QP_OP_ERR`
    LocalQpOperation,
    /// `IBV_WC_LOC_PROT_ERR`: bad lkey / local protection.
    LocalProtection,
    /// `IBV_WC_WR_FLUSH_ERR`: the QP went to the error state.
    WrFlush,
    /// `IBV_WC_LOC_ACCESS_ERR`
    LocalAccess,
    /// `IBV_WC_REM_INV_REQ_ERR`
    RemoteInvalidRequest,
    /// `IBV_WC_REM_ACCESS_ERR`: bad rkey or rights on the peer.
    RemoteAccess,
    /// `IBV_WC_REM_OP_ERR`
    RemoteOperation,
    /// `IBV_WC_RETRY_EXC_ERR`: transport retries exhausted (peer gone).
    RetryExceeded,
    /// `IBV_WC_RNR_RETRY_EXC_ERR`: receiver had no buffer.
    RnrRetryExceeded,
    /// `IBV_WC_FATAL_ERR`
    Fatal,
    /// `IBV_WC_GENERAL_ERR`
    General,
    /// `IBV_WC_TM_ERR`: a TAG_DEL lost against the NIC consuming the entry, or
    /// another tag-list error.
    TmError,
    /// `IBV_WC_TM_RNDV_INCOMPLETE`: matched rendezvous whose buffer was too
    /// small; software finishes the transfer.
    TmRndvIncomplete,
    /// Any other status value.
    Other(u32),
}

impl WcStatus {
    fn from_raw(s: u32) -> WcStatus {
        match s {
            IBV_WC_SUCCESS => WcStatus::Success,
            IBV_WC_LOC_LEN_ERR => WcStatus::LocalLength,
            IBV_WC_LOC_QP_OP_ERR => WcStatus::LocalQpOperation,
            IBV_WC_LOC_PROT_ERR => WcStatus::LocalProtection,
            IBV_WC_WR_FLUSH_ERR => WcStatus::WrFlush,
            IBV_WC_LOC_ACCESS_ERR => WcStatus::LocalAccess,
            IBV_WC_REM_INV_REQ_ERR => WcStatus::RemoteInvalidRequest,
            IBV_WC_REM_ACCESS_ERR => WcStatus::RemoteAccess,
            IBV_WC_REM_OP_ERR => WcStatus::RemoteOperation,
            IBV_WC_RETRY_EXC_ERR => WcStatus::RetryExceeded,
            IBV_WC_RNR_RETRY_EXC_ERR => WcStatus::RnrRetryExceeded,
            IBV_WC_FATAL_ERR => WcStatus::Fatal,
            IBV_WC_GENERAL_ERR => WcStatus::General,
            IBV_WC_TM_ERR => WcStatus::TmError,
            IBV_WC_TM_RNDV_INCOMPLETE => WcStatus::TmRndvIncomplete,
            o => WcStatus::Other(o),
        }
    }
}

/// Tag and application context of a matched tagged message (`ibv_wc_tm_info`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TmInfo {
    /// The TMH tag.
    pub tag: u64,
    /// The TMH `app_ctx`.
    pub priv_: u32,
}

/// What completed, for a completion whose opcode is valid (success, or
/// `TmRndvIncomplete`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum WcOp {
    /// A send (any send opcode) completed.
    Send,
    /// An RDMA write completed.
    RdmaWrite,
    /// An RDMA read completed (data is in the local buffer).
    RdmaRead,
    /// An atomic compare-and-swap completed (old value in the local buffer).
    CompSwap,
    /// An atomic fetch-and-add completed (old value in the local buffer).
    FetchAdd,
    /// A receive completed.
    Recv {
        /// Bytes received.
        byte_len: u32,
        /// Immediate data, if the message carried some.
        imm: Option<u32>,
    },
    /// A `TAG_ADD` completed.
    TmAdd {
        /// `IBV_WC_TM_SYNC_REQ`: the NIC asks software to resynchronise.
        sync_req: bool,
    },
    /// A `TAG_DEL` completed.
    TmDel {
        /// `IBV_WC_TM_SYNC_REQ`.
        sync_req: bool,
    },
    /// A `TAG_SYNC` completed.
    TmSync {
        /// `IBV_WC_TM_SYNC_REQ`.
        sync_req: bool,
    },
    /// A tagged message arrived (`IBV_WC_TM_RECV`): matched, data landed, or
    /// unexpected (neither flag).
    TmRecv {
        /// Bytes received.
        byte_len: u32,
        /// `IBV_WC_TM_MATCH`
        matched: bool,
        /// `IBV_WC_TM_DATA_VALID`
        data_valid: bool,
        /// `IBV_WC_TM_SYNC_REQ`
        sync_req: bool,
        /// Tag and app_ctx (present with MATCH on a CQ created with TM info).
        info: Option<TmInfo>,
    },
    /// A NO_TAG message arrived in an untagged buffer.
    TmNoTag {
        /// Bytes received.
        byte_len: u32,
    },
    /// Another opcode (atomics, bind, ...).
    Other {
        /// Raw `ibv_wc_opcode`.
        opcode: u32,
    },
}

/// One work completion.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Completion {
    /// The work request id given at posting (for TM receives: `recv_wr_id`).
    pub wr_id: u64,
    /// Status.
    pub status: WcStatus,
    /// Local QP number (0 if the CQ cannot report it).
    pub qp_num: u32,
    /// Vendor error syndrome (meaningful on error).
    pub vendor_err: u32,
    /// What completed; `None` when the status is an error (the opcode is then undefined).
    pub op: Option<WcOp>,
}

impl Completion {
    /// True for `WcStatus::Success`.
    pub fn is_ok(&self) -> bool {
        self.status == WcStatus::Success
    }
}

enum Kind {
    Ex(NonNull<ibv_cq_ex>),
    Legacy(NonNull<ibv_cq>),
}

/// A completion queue. Keeps its [`Context`] alive.
pub struct CompletionQueue {
    ctx: Arc<Context>,
    kind: Kind,
    wc_flags: u64,
    /// Drain several completions per `start_poll`/`end_poll` with `next_poll`.
    /// Only on providers known to implement `next_poll` returning `ENOENT`
    /// correctly (see [`next_poll_is_safe`]); otherwise one completion per cycle.
    batch: bool,
    /// Serialises polling: one start/next/end sequence at a time.
    poll_lock: Mutex<()>,
}

// SAFETY: polling is serialised by poll_lock; other uses go through
// thread-safe libibverbs calls.
unsafe impl Send for CompletionQueue {}
// SAFETY: as above.
unsafe impl Sync for CompletionQueue {}

impl std::fmt::Debug for CompletionQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CompletionQueue")
            .field("extended", &matches!(self.kind, Kind::Ex(_)))
            .field("tm_info", &self.has_tm_info())
            .finish()
    }
}

impl Context {
    /// Creates a CQ of at least `cqe` entries. With `tm_info`, the CQ reports
    /// tag-matching info (`IBV_WC_EX_WITH_TM_INFO`); that requires
    /// `ibv_create_cq_ex` and fails where unsupported. Without it, a provider
    /// lacking `create_cq_ex` gets a legacy CQ.
    pub fn create_cq(self: &Arc<Self>, cqe: u32, tm_info: bool) -> Result<Arc<CompletionQueue>> {
        if cqe == 0 {
            return Err(IbvError::InvalidArgument(
                "CQ needs at least one entry".into(),
            ));
        }
        let mut wc_flags =
            u64::from(IBV_WC_EX_WITH_BYTE_LEN | IBV_WC_EX_WITH_IMM | IBV_WC_EX_WITH_QP_NUM);
        if tm_info {
            wc_flags |= u64::from(IBV_WC_EX_WITH_TM_INFO);
        }
        let mut attr = ibv_cq_init_attr_ex {
            cqe,
            wc_flags,
            ..Default::default()
        };
        // SAFETY: live context, attr is a local.
        let cq = unsafe { inline::create_cq_ex(self.ctx.as_ptr(), &mut attr) };
        if let Some(cq) = NonNull::new(cq) {
            return Ok(Arc::new(CompletionQueue {
                ctx: self.clone(),
                kind: Kind::Ex(cq),
                wc_flags,
                batch: next_poll_is_safe(self.name()),
                poll_lock: Mutex::new(()),
            }));
        }
        let err = IbvError::errno("ibv_create_cq_ex");
        if tm_info || !err.is_unsupported() {
            return Err(err);
        }
        tracing::debug!(target: "verbs", "provider lacks create_cq_ex; using ibv_create_cq");
        let n =
            i32::try_from(cqe).map_err(|_| IbvError::InvalidArgument("cqe too large".into()))?;
        // SAFETY: live context; no channel, vector 0.
        let cq = unsafe {
            (self.lib().fns.create_cq)(
                self.ctx.as_ptr(),
                n,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                0,
            )
        };
        let cq = NonNull::new(cq).ok_or_else(|| IbvError::errno("ibv_create_cq"))?;
        Ok(Arc::new(CompletionQueue {
            ctx: self.clone(),
            kind: Kind::Legacy(cq),
            wc_flags: 0,
            batch: false,
            poll_lock: Mutex::new(()),
        }))
    }
}

impl CompletionQueue {
    /// True when the CQ reports TM info (created with `tm_info`).
    pub fn has_tm_info(&self) -> bool {
        self.wc_flags & u64::from(IBV_WC_EX_WITH_TM_INFO) != 0
    }

    /// The device context.
    pub fn context(&self) -> &Arc<Context> {
        &self.ctx
    }

    /// Number of entries the provider allocated (≥ the requested `cqe`).
    pub fn capacity(&self) -> u32 {
        // SAFETY: live CQ; `cqe` is set at creation (or resize, which tmpi never does).
        let cqe = unsafe { (*self.as_cq()).cqe };
        cqe.max(0) as u32
    }

    pub(crate) fn as_cq(&self) -> *mut ibv_cq {
        match self.kind {
            Kind::Ex(c) => inline::cq_ex_to_cq(c.as_ptr()),
            Kind::Legacy(c) => c.as_ptr(),
        }
    }

    /// Polls up to `max` completions, appending them to `out`; returns how
    /// many were added (0 when the CQ is empty).
    pub fn poll(&self, out: &mut Vec<Completion>, max: usize) -> Result<usize> {
        self.poll_raw(max, |w| out.push(w.to_completion()))
    }

    /// Polls up to `max` completions, handing each to `f` in CQ order.
    pub(crate) fn poll_raw(&self, max: usize, mut f: impl FnMut(RawWc)) -> Result<usize> {
        if max == 0 {
            return Ok(0);
        }
        let _g = self.poll_lock.lock().unwrap_or_else(|e| e.into_inner());
        match self.kind {
            // SAFETY: cq is live; polling serialised by poll_lock.
            Kind::Ex(cq) => unsafe { self.poll_ex(cq.as_ptr(), max, &mut f) },
            // SAFETY: as above.
            Kind::Legacy(cq) => unsafe { self.poll_legacy(cq.as_ptr(), max, &mut f) },
        }
    }

    /// # Safety
    /// `cq` live, polling serialised.
    unsafe fn poll_ex(
        &self,
        cq: *mut ibv_cq_ex,
        max: usize,
        f: &mut dyn FnMut(RawWc),
    ) -> Result<usize> {
        // SAFETY: the provider fills these function pointers at creation.
        let (start, next, end) = unsafe { ((*cq).start_poll, (*cq).next_poll, (*cq).end_poll) };
        let (Some(start), Some(next), Some(end)) = (start, next, end) else {
            return Err(IbvError::Poll(std::io::Error::from_raw_os_error(
                libc::EOPNOTSUPP,
            )));
        };
        let mut attr = ibv_poll_cq_attr::default();
        // SAFETY: ibv_start_poll(cq, &attr).
        let rc = unsafe { start(cq, &mut attr) };
        if rc == libc::ENOENT {
            return Ok(0);
        }
        if rc != 0 {
            return Err(IbvError::Poll(std::io::Error::from_raw_os_error(rc)));
        }
        let mut n = 0;
        let mut result = Ok(());
        if !self.batch {
            // One completion per start/end cycle: never calls next_poll.
            loop {
                // SAFETY: start_poll succeeded, a completion is current.
                f(unsafe { self.read_current(cq) });
                n += 1;
                // SAFETY: ibv_end_poll after a successful start_poll.
                unsafe { end(cq) };
                if n == max {
                    return Ok(n);
                }
                // SAFETY: ibv_start_poll(cq, &attr).
                let rc = unsafe { start(cq, &mut attr) };
                if rc == libc::ENOENT {
                    return Ok(n);
                }
                if rc != 0 {
                    return Err(IbvError::Poll(std::io::Error::from_raw_os_error(rc)));
                }
            }
        }
        loop {
            // SAFETY: a current completion exists between a successful
            // start/next_poll and the following next/end_poll.
            f(unsafe { self.read_current(cq) });
            n += 1;
            if n == max {
                break;
            }
            // SAFETY: ibv_next_poll(cq).
            let rc = unsafe { next(cq) };
            if rc == libc::ENOENT {
                break;
            }
            if rc != 0 {
                result = Err(IbvError::Poll(std::io::Error::from_raw_os_error(rc)));
                break;
            }
        }
        // SAFETY: ibv_end_poll(cq) after a successful start_poll.
        unsafe { end(cq) };
        result.map(|()| n)
    }

    /// # Safety
    /// A completion is current on `cq`.
    unsafe fn read_current(&self, cq: *mut ibv_cq_ex) -> RawWc {
        // SAFETY: caller contract; the reader functions we call were requested
        // in wc_flags at creation (byte_len, imm, qp_num, tm_info) or are
        // always present (opcode, vendor_err, wc_flags).
        unsafe {
            let c = &*cq;
            let read =
                |f: Option<unsafe extern "C" fn(*mut ibv_cq_ex) -> u32>| f.map_or(0, |f| f(cq));
            let qp_num = if self.wc_flags & u64::from(IBV_WC_EX_WITH_QP_NUM) != 0 {
                read(c.read_qp_num)
            } else {
                0
            };
            let opcode = c.read_opcode.map_or(u32::MAX, |f| f(cq));
            let flags = c.read_wc_flags.map_or(0, |f| f(cq));
            let byte_len = read(c.read_byte_len);
            let imm = (flags & IBV_WC_WITH_IMM != 0)
                .then(|| c.read_imm_data.map_or(0, |f| u32::from_be(f(cq))));
            let tm_info = if self.has_tm_info() && flags & IBV_WC_TM_MATCH != 0 {
                c.read_tm_info.map(|f| {
                    let mut i = ibv_wc_tm_info::default();
                    f(cq, &mut i);
                    TmInfo {
                        tag: i.tag,
                        priv_: i.priv_,
                    }
                })
            } else {
                None
            };
            RawWc {
                wr_id: c.wr_id,
                status: c.status,
                opcode,
                flags,
                byte_len,
                qp_num,
                imm,
                tm_info,
                vendor_err: read(c.read_vendor_err),
            }
        }
    }

    /// # Safety
    /// `cq` live, polling serialised.
    unsafe fn poll_legacy(
        &self,
        cq: *mut ibv_cq,
        max: usize,
        f: &mut dyn FnMut(RawWc),
    ) -> Result<usize> {
        let mut wc = [ibv_wc::default(); 16];
        let want = max.min(wc.len()) as i32;
        // SAFETY: wc has room for `want` entries.
        let n = unsafe { inline::poll_cq(cq, want, wc.as_mut_ptr()) };
        if n < 0 {
            return Err(IbvError::Poll(std::io::Error::from_raw_os_error(-n)));
        }
        for w in &wc[..n as usize] {
            f(RawWc {
                wr_id: w.wr_id,
                status: w.status,
                opcode: w.opcode,
                flags: w.wc_flags,
                byte_len: w.byte_len,
                qp_num: w.qp_num,
                imm: (w.wc_flags & IBV_WC_WITH_IMM != 0)
                    // SAFETY: imm_data is the active member when WITH_IMM is set.
                    .then(|| u32::from_be(unsafe { w.__bindgen_anon_1.imm_data })),
                tm_info: None,
                vendor_err: w.vendor_err,
            });
        }
        Ok(n as usize)
    }
}

/// A completion as read from the CQ, raw libibverbs values.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RawWc {
    pub(crate) wr_id: u64,
    pub(crate) status: u32,
    /// `ibv_wc_read_opcode` (meaningful only on success and TM statuses).
    pub(crate) opcode: u32,
    pub(crate) flags: u32,
    pub(crate) byte_len: u32,
    pub(crate) qp_num: u32,
    pub(crate) imm: Option<u32>,
    pub(crate) tm_info: Option<TmInfo>,
    pub(crate) vendor_err: u32,
}

impl RawWc {
    fn to_completion(self) -> Completion {
        let status = WcStatus::from_raw(self.status);
        let op = matches!(status, WcStatus::Success | WcStatus::TmRndvIncomplete).then(|| {
            decode_op(
                self.opcode,
                self.flags,
                self.byte_len,
                self.imm,
                self.tm_info,
            )
        });
        Completion {
            wr_id: self.wr_id,
            status,
            qp_num: self.qp_num,
            vendor_err: self.vendor_err,
            op,
        }
    }
}

/// Whether `ibv_next_poll` may be used on this device.
///
/// rdma-core's rxe provider up to at least v50 (Debian 12 ships 44) advances
/// its consumer index (and unlocks the CQ) when `next_poll` returns `ENOENT`,
/// and again in `end_poll`, which the man page requires after it: the CQ then
/// returns stale entries (rdma-core PRs #1512, #1617). Found by
/// `ibv::tests::provider_traits_on_real_device` on rxe. Batching is therefore
/// enabled only for drivers known to be right (mlx5, the only TM-capable one);
/// everything else polls one completion per `start_poll`/`end_poll` cycle,
/// which is valid on every provider.
fn next_poll_is_safe(device: &str) -> bool {
    let link = format!("/sys/class/infiniband/{device}/device/driver");
    let driver = std::fs::read_link(link)
        .ok()
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()));
    let safe = matches!(driver.as_deref(), Some("mlx5_core"));
    tracing::debug!(target: "verbs", device, ?driver, batch = safe, "extended CQ polling mode");
    safe
}

fn decode_op(
    opcode: u32,
    flags: u32,
    byte_len: u32,
    imm: Option<u32>,
    info: Option<TmInfo>,
) -> WcOp {
    let sync_req = flags & IBV_WC_TM_SYNC_REQ != 0;
    match opcode {
        IBV_WC_SEND => WcOp::Send,
        IBV_WC_RDMA_WRITE => WcOp::RdmaWrite,
        IBV_WC_RDMA_READ => WcOp::RdmaRead,
        IBV_WC_COMP_SWAP => WcOp::CompSwap,
        IBV_WC_FETCH_ADD => WcOp::FetchAdd,
        IBV_WC_RECV | IBV_WC_RECV_RDMA_WITH_IMM => WcOp::Recv { byte_len, imm },
        IBV_WC_TM_ADD => WcOp::TmAdd { sync_req },
        IBV_WC_TM_DEL => WcOp::TmDel { sync_req },
        IBV_WC_TM_SYNC => WcOp::TmSync { sync_req },
        IBV_WC_TM_RECV => WcOp::TmRecv {
            byte_len,
            matched: flags & IBV_WC_TM_MATCH != 0,
            data_valid: flags & IBV_WC_TM_DATA_VALID != 0,
            sync_req,
            info,
        },
        IBV_WC_TM_NO_TAG => WcOp::TmNoTag { byte_len },
        o => WcOp::Other { opcode: o },
    }
}

impl Drop for CompletionQueue {
    fn drop(&mut self) {
        // SAFETY: live CQ; QPs/SRQs using it hold Arcs to it and are gone.
        let rc = unsafe { (self.ctx.lib().fns.destroy_cq)(self.as_cq()) };
        if rc != 0 {
            tracing::warn!(target: "verbs", rc, "ibv_destroy_cq failed");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decode_tm_recv_flags() {
        let info = Some(TmInfo { tag: 7, priv_: 9 });
        let op = decode_op(
            IBV_WC_TM_RECV,
            IBV_WC_TM_MATCH | IBV_WC_TM_DATA_VALID,
            64,
            None,
            info,
        );
        assert_eq!(
            op,
            WcOp::TmRecv {
                byte_len: 64,
                matched: true,
                data_valid: true,
                sync_req: false,
                info
            }
        );
        let unexpected = decode_op(IBV_WC_TM_RECV, 0, 80, None, None);
        assert!(matches!(
            unexpected,
            WcOp::TmRecv {
                matched: false,
                data_valid: false,
                ..
            }
        ));
        assert_eq!(
            decode_op(IBV_WC_TM_ADD, IBV_WC_TM_SYNC_REQ, 0, None, None),
            WcOp::TmAdd { sync_req: true }
        );
        assert_eq!(
            WcStatus::from_raw(IBV_WC_REM_ACCESS_ERR),
            WcStatus::RemoteAccess
        );
        assert_eq!(WcStatus::from_raw(IBV_WC_TM_ERR), WcStatus::TmError);
        assert_eq!(WcStatus::from_raw(999), WcStatus::Other(999));
    }
}
