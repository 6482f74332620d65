//! Reliable-connected queue pairs: creation, the RESET→INIT→RTR→RTS
//! transitions (GID-routed for RoCE, LID-routed for InfiniBand), and posting.

use std::ptr::{self, NonNull};
use std::sync::{Arc, Mutex};

use super::cq::CompletionQueue;
use super::device::{Gid, LinkLayer};
use super::error::{IbvError, Result};
use super::inline;
use super::pd::{Access, ProtectionDomain, Sge};
use super::srq::{build_recv_chain, link, post_error, RecvRequest, SharedReceiveQueue};
use super::sys::*;

/// Requested (and, after creation, granted) queue sizes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpCaps {
    /// Send queue depth.
    pub max_send_wr: u32,
    /// Receive queue depth (ignored with an SRQ).
    pub max_recv_wr: u32,
    /// SGEs per send.
    pub max_send_sge: u32,
    /// SGEs per receive.
    pub max_recv_sge: u32,
    /// Largest inline send.
    pub max_inline_data: u32,
}

impl Default for QpCaps {
    fn default() -> Self {
        QpCaps {
            max_send_wr: 64,
            max_recv_wr: 64,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        }
    }
}

/// What a peer needs to connect to a QP (exchanged through the modex).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpEndpoint {
    /// QP number.
    pub qpn: u32,
    /// Initial packet sequence number of the QP's send queue.
    pub psn: u32,
    /// Port LID (InfiniBand).
    pub lid: u16,
    /// GID (RoCE, or IB across subnets).
    pub gid: Gid,
}

impl QpEndpoint {
    /// Encoded size of [`QpEndpoint::to_bytes`].
    pub const WIRE_LEN: usize = 26;

    /// Fixed little-endian encoding: qpn u32, psn u32, lid u16, gid 16 bytes.
    pub fn to_bytes(&self) -> [u8; Self::WIRE_LEN] {
        let mut b = [0u8; Self::WIRE_LEN];
        b[0..4].copy_from_slice(&self.qpn.to_le_bytes());
        b[4..8].copy_from_slice(&self.psn.to_le_bytes());
        b[8..10].copy_from_slice(&self.lid.to_le_bytes());
        b[10..26].copy_from_slice(&self.gid.0);
        b
    }

    /// Decodes [`QpEndpoint::to_bytes`].
    pub fn from_bytes(b: &[u8]) -> Result<QpEndpoint> {
        if b.len() != Self::WIRE_LEN {
            return Err(IbvError::InvalidArgument(format!(
                "QP endpoint is {} bytes, expected {}",
                b.len(),
                Self::WIRE_LEN
            )));
        }
        let mut gid = [0u8; 16];
        gid.copy_from_slice(&b[10..26]);
        Ok(QpEndpoint {
            qpn: u32::from_le_bytes([b[0], b[1], b[2], b[3]]),
            psn: u32::from_le_bytes([b[4], b[5], b[6], b[7]]) & 0x00ff_ffff,
            lid: u16::from_le_bytes([b[8], b[9]]),
            gid: Gid(gid),
        })
    }
}

/// Path and transport parameters of a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectParams {
    /// Local port (1-based).
    pub port: u8,
    /// `Some(index)`: route by GID (required on RoCE) with this local GID index.
    /// `None`: route by LID (InfiniBand within a subnet).
    pub gid_index: Option<u8>,
    /// Path MTU (`IBV_MTU_*`); usually the port's active MTU.
    pub mtu: u32,
    /// Our send PSN (24 bits), advertised in our [`QpEndpoint`].
    pub psn: u32,
    /// Local ACK timeout exponent (4.096 µs × 2^timeout).
    pub timeout: u8,
    /// Transport retries.
    pub retry_cnt: u8,
    /// RNR retries (7 = infinite).
    pub rnr_retry: u8,
    /// Minimum RNR NAK timer code.
    pub min_rnr_timer: u8,
    /// Outstanding RDMA reads/atomics this QP initiates / accepts.
    pub max_rd_atomic: u8,
    /// Service level.
    pub sl: u8,
    /// GRH hop limit.
    pub hop_limit: u8,
    /// GRH traffic class.
    pub traffic_class: u8,
}

impl Default for ConnectParams {
    fn default() -> Self {
        ConnectParams {
            port: 1,
            gid_index: None,
            mtu: IBV_MTU_1024,
            psn: 0,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            min_rnr_timer: 12,
            max_rd_atomic: 1,
            sl: 0,
            hop_limit: 64,
            traffic_class: 0,
        }
    }
}

/// QP state (`ibv_qp_state`) as tracked by the wrapper.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QpState {
    /// Fresh QP.
    Reset,
    /// Initialised: receives may be posted.
    Init,
    /// Ready to receive.
    Rtr,
    /// Ready to send.
    Rts,
    /// Error state (after a failed completion; everything flushes).
    Error,
}

/// Kind of a send work request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendOp {
    /// `IBV_WR_SEND`. A send carrying a TMH (tag-matching header) as its
    /// first 16 bytes is how a sender talks to a receiver's TM SRQ.
    Send,
    /// `IBV_WR_SEND_WITH_IMM`.
    SendWithImm(u32),
    /// `IBV_WR_RDMA_WRITE` into the peer's region.
    RdmaWrite {
        /// Peer virtual address.
        remote_addr: u64,
        /// Peer region's rkey.
        rkey: u32,
    },
    /// `IBV_WR_RDMA_READ` from the peer's region into the local SGEs.
    RdmaRead {
        /// Peer virtual address.
        remote_addr: u64,
        /// Peer region's rkey.
        rkey: u32,
    },
}

/// A send work request.
#[derive(Debug, Clone, Copy)]
pub struct SendRequest<'a> {
    /// Returned in the completion.
    pub wr_id: u64,
    /// What to do.
    pub op: SendOp,
    /// Gather list (local registered memory; with `inline`, any memory).
    pub sges: &'a [Sge],
    /// `IBV_SEND_SIGNALED`: produce a completion on success.
    pub signaled: bool,
    /// `IBV_SEND_INLINE`: copy the data into the WQE (≤ `max_inline_data`).
    pub inline: bool,
}

/// A reliable-connected queue pair. Keeps its PD, CQs and SRQ alive.
pub struct QueuePair {
    pd: Arc<ProtectionDomain>,
    _send_cq: Arc<CompletionQueue>,
    _recv_cq: Arc<CompletionQueue>,
    srq: Option<Arc<SharedReceiveQueue>>,
    pub(crate) qp: NonNull<ibv_qp>,
    qpn: u32,
    caps: QpCaps,
    /// Serialises state transitions and records the current state.
    state: Mutex<QpState>,
}

// SAFETY: libibverbs QPs are thread-safe; state changes are serialised by `state`.
unsafe impl Send for QueuePair {}
// SAFETY: as above (posting takes the provider's lock).
unsafe impl Sync for QueuePair {}

impl std::fmt::Debug for QueuePair {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QueuePair")
            .field("qpn", &self.qpn)
            .field("state", &self.state())
            .field("srq", &self.srq.is_some())
            .finish()
    }
}

impl ProtectionDomain {
    /// `ibv_create_qp` for an RC QP. With `srq`, receives come from the SRQ
    /// (a TM SRQ makes this QP a tag-matching QP).
    pub fn create_rc_qp(
        self: &Arc<Self>,
        send_cq: &Arc<CompletionQueue>,
        recv_cq: &Arc<CompletionQueue>,
        srq: Option<&Arc<SharedReceiveQueue>>,
        caps: QpCaps,
    ) -> Result<QueuePair> {
        self.create_rc_qp_with(send_cq, recv_cq, srq, caps, false)
    }

    /// [`ProtectionDomain::create_rc_qp`] with `sq_sig_all` (every send signaled).
    pub fn create_rc_qp_with(
        self: &Arc<Self>,
        send_cq: &Arc<CompletionQueue>,
        recv_cq: &Arc<CompletionQueue>,
        srq: Option<&Arc<SharedReceiveQueue>>,
        caps: QpCaps,
        sq_sig_all: bool,
    ) -> Result<QueuePair> {
        for cq in [send_cq, recv_cq] {
            if !Arc::ptr_eq(cq.context(), &self.ctx) {
                return Err(IbvError::InvalidArgument(
                    "CQ and PD belong to different devices".into(),
                ));
            }
        }
        let mut attr = ibv_qp_init_attr {
            send_cq: send_cq.as_cq(),
            recv_cq: recv_cq.as_cq(),
            srq: srq.map_or(ptr::null_mut(), |s| s.srq.as_ptr()),
            cap: ibv_qp_cap {
                max_send_wr: caps.max_send_wr,
                max_recv_wr: if srq.is_some() { 0 } else { caps.max_recv_wr },
                max_send_sge: caps.max_send_sge,
                max_recv_sge: if srq.is_some() { 0 } else { caps.max_recv_sge },
                max_inline_data: caps.max_inline_data,
            },
            qp_type: IBV_QPT_RC,
            sq_sig_all: i32::from(sq_sig_all),
            ..Default::default()
        };
        // SAFETY: live PD and CQs/SRQ; attr is a local the provider updates with granted caps.
        let qp = unsafe { (self.ctx.lib().fns.create_qp)(self.pd.as_ptr(), &mut attr) };
        let qp = NonNull::new(qp).ok_or_else(|| IbvError::errno("ibv_create_qp"))?;
        // SAFETY: live QP.
        let qpn = unsafe { (*qp.as_ptr()).qp_num };
        tracing::debug!(target: "verbs", qpn, "created RC QP");
        Ok(QueuePair {
            pd: self.clone(),
            _send_cq: send_cq.clone(),
            _recv_cq: recv_cq.clone(),
            srq: srq.cloned(),
            qp,
            qpn,
            caps: QpCaps {
                max_send_wr: attr.cap.max_send_wr,
                max_recv_wr: attr.cap.max_recv_wr,
                max_send_sge: attr.cap.max_send_sge,
                max_recv_sge: attr.cap.max_recv_sge,
                max_inline_data: attr.cap.max_inline_data,
            },
            state: Mutex::new(QpState::Reset),
        })
    }
}

impl QueuePair {
    /// QP number.
    pub fn qpn(&self) -> u32 {
        self.qpn
    }

    /// Queue sizes granted by the provider.
    pub fn caps(&self) -> QpCaps {
        self.caps
    }

    /// Current state (as driven through this wrapper).
    pub fn state(&self) -> QpState {
        *self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The state the device reports (`ibv_query_qp`): unlike [`QueuePair::state`]
    /// it shows transitions the NIC made on its own, e.g. to `Error` after a
    /// failed work request. `SQD` (never used by tmpi) reads as `Rts`; `SQE`
    /// and unknown values read as `Error`.
    pub fn query_state(&self) -> Result<QpState> {
        let mut a = ibv_qp_attr::default();
        let mut init = ibv_qp_init_attr::default();
        // SAFETY: live QP; a and init are locals.
        let rc = unsafe {
            (self.pd.ctx.lib().fns.query_qp)(
                self.qp.as_ptr(),
                &mut a,
                IBV_QP_STATE as i32,
                &mut init,
            )
        };
        if rc != 0 {
            return Err(IbvError::code("ibv_query_qp", rc));
        }
        let s = match a.qp_state {
            IBV_QPS_RESET => QpState::Reset,
            IBV_QPS_INIT => QpState::Init,
            IBV_QPS_RTR => QpState::Rtr,
            IBV_QPS_RTS | IBV_QPS_SQD => QpState::Rts,
            _ => QpState::Error,
        };
        Ok(s)
    }

    /// Our address for the peer: QPN, PSN, port LID and the GID at
    /// `params.gid_index` (zero GID for LID routing).
    pub fn local_endpoint(&self, params: &ConnectParams) -> Result<QpEndpoint> {
        let ctx = &self.pd.ctx;
        let port = ctx.query_port(params.port)?;
        let gid = match params.gid_index {
            Some(i) => ctx.query_gid(params.port, u32::from(i))?,
            None => Gid::default(),
        };
        Ok(QpEndpoint {
            qpn: self.qpn,
            psn: params.psn & 0x00ff_ffff,
            lid: port.lid,
            gid,
        })
    }

    pub(crate) fn modify(
        &self,
        from: Option<QpState>,
        attr: &mut ibv_qp_attr,
        mask: u32,
        to: QpState,
    ) -> Result<()> {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(want) = from {
            if *state != want {
                return Err(IbvError::InvalidArgument(format!(
                    "QP {} is {:?}; moving to {to:?} needs {want:?}",
                    self.qpn, *state
                )));
            }
        }
        // SAFETY: live QP; attr is valid for the call.
        let rc = unsafe { (self.pd.ctx.lib().fns.modify_qp)(self.qp.as_ptr(), attr, mask as i32) };
        if rc != 0 {
            return Err(IbvError::code(
                match to {
                    QpState::Init => "ibv_modify_qp(INIT)",
                    QpState::Rtr => "ibv_modify_qp(RTR)",
                    QpState::Rts => "ibv_modify_qp(RTS)",
                    QpState::Error => "ibv_modify_qp(ERR)",
                    QpState::Reset => "ibv_modify_qp(RESET)",
                },
                rc,
            ));
        }
        *state = to;
        Ok(())
    }

    /// RESET → INIT on `port`, granting peers `access` (remote read/write/atomic).
    pub fn to_init(&self, port: u8, access: Access) -> Result<()> {
        let mut a = ibv_qp_attr {
            qp_state: IBV_QPS_INIT,
            pkey_index: 0,
            port_num: port,
            qp_access_flags: access.0,
            ..Default::default()
        };
        self.modify(
            Some(QpState::Reset),
            &mut a,
            IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS,
            QpState::Init,
        )
    }

    /// INIT → RTR towards `remote`. Routes by GID when `params.gid_index` is
    /// set (RoCE v2), by LID otherwise (InfiniBand).
    pub fn to_rtr(&self, remote: &QpEndpoint, params: &ConnectParams) -> Result<()> {
        if params.gid_index.is_none() {
            let port = self.pd.ctx.query_port(params.port)?;
            if port.link_layer == LinkLayer::Ethernet {
                return Err(IbvError::InvalidArgument(
                    "RoCE (Ethernet link layer) needs a GID index".into(),
                ));
            }
        }
        let mut a = ibv_qp_attr {
            qp_state: IBV_QPS_RTR,
            path_mtu: params.mtu,
            dest_qp_num: remote.qpn,
            rq_psn: remote.psn & 0x00ff_ffff,
            max_dest_rd_atomic: params.max_rd_atomic,
            min_rnr_timer: params.min_rnr_timer,
            ..Default::default()
        };
        a.ah_attr.dlid = remote.lid;
        a.ah_attr.sl = params.sl;
        a.ah_attr.port_num = params.port;
        if let Some(idx) = params.gid_index {
            a.ah_attr.is_global = 1;
            a.ah_attr.grh.dgid = ibv_gid { raw: remote.gid.0 };
            a.ah_attr.grh.sgid_index = idx;
            a.ah_attr.grh.hop_limit = params.hop_limit;
            a.ah_attr.grh.traffic_class = params.traffic_class;
        }
        self.modify(
            Some(QpState::Init),
            &mut a,
            IBV_QP_STATE
                | IBV_QP_AV
                | IBV_QP_PATH_MTU
                | IBV_QP_DEST_QPN
                | IBV_QP_RQ_PSN
                | IBV_QP_MAX_DEST_RD_ATOMIC
                | IBV_QP_MIN_RNR_TIMER,
            QpState::Rtr,
        )
    }

    /// RTR → RTS.
    pub fn to_rts(&self, params: &ConnectParams) -> Result<()> {
        let mut a = ibv_qp_attr {
            qp_state: IBV_QPS_RTS,
            timeout: params.timeout,
            retry_cnt: params.retry_cnt,
            rnr_retry: params.rnr_retry,
            sq_psn: params.psn & 0x00ff_ffff,
            max_rd_atomic: params.max_rd_atomic,
            ..Default::default()
        };
        self.modify(
            Some(QpState::Rtr),
            &mut a,
            IBV_QP_STATE
                | IBV_QP_TIMEOUT
                | IBV_QP_RETRY_CNT
                | IBV_QP_RNR_RETRY
                | IBV_QP_SQ_PSN
                | IBV_QP_MAX_QP_RD_ATOMIC,
            QpState::Rts,
        )
    }

    /// RESET → INIT → RTR → RTS in one go.
    pub fn connect(
        &self,
        remote: &QpEndpoint,
        params: &ConnectParams,
        access: Access,
    ) -> Result<()> {
        self.to_init(params.port, access)?;
        self.to_rtr(remote, params)?;
        self.to_rts(params)
    }

    /// Moves the QP to the error state (outstanding requests flush).
    pub fn to_error(&self) -> Result<()> {
        let mut a = ibv_qp_attr {
            qp_state: IBV_QPS_ERR,
            ..Default::default()
        };
        self.modify(None, &mut a, IBV_QP_STATE, QpState::Error)
    }

    /// `ibv_post_send`.
    ///
    /// # Safety
    /// Every SGE of a non-inline request must lie in a registered region that
    /// stays registered, and (for RDMA read targets) untouched, until the
    /// request's completion is polled or the QP is destroyed; the caller must
    /// not modify send data before then. Unsignaled requests complete with the
    /// next signaled one.
    pub unsafe fn post_send(&self, reqs: &[SendRequest<'_>]) -> Result<()> {
        if reqs.is_empty() {
            return Ok(());
        }
        let mut wrs: Vec<ibv_send_wr> = Vec::with_capacity(reqs.len());
        for r in reqs {
            let mut w = ibv_send_wr {
                wr_id: r.wr_id,
                sg_list: r.sges.as_ptr().cast::<ibv_sge>().cast_mut(),
                num_sge: i32::try_from(r.sges.len())
                    .map_err(|_| IbvError::InvalidArgument("too many SGEs".into()))?,
                ..Default::default()
            };
            let mut flags = 0;
            if r.signaled {
                flags |= IBV_SEND_SIGNALED;
            }
            if r.inline {
                flags |= IBV_SEND_INLINE;
            }
            w.send_flags = flags;
            match r.op {
                SendOp::Send => w.opcode = IBV_WR_SEND,
                SendOp::SendWithImm(imm) => {
                    w.opcode = IBV_WR_SEND_WITH_IMM;
                    w.__bindgen_anon_1.imm_data = imm.to_be();
                }
                SendOp::RdmaWrite { remote_addr, rkey } => {
                    w.opcode = IBV_WR_RDMA_WRITE;
                    w.wr.rdma.remote_addr = remote_addr;
                    w.wr.rdma.rkey = rkey;
                }
                SendOp::RdmaRead { remote_addr, rkey } => {
                    w.opcode = IBV_WR_RDMA_READ;
                    w.wr.rdma.remote_addr = remote_addr;
                    w.wr.rdma.rkey = rkey;
                }
            }
            wrs.push(w);
        }
        link(&mut wrs, |w, n| w.next = n);
        let mut bad: *mut ibv_send_wr = ptr::null_mut();
        // SAFETY: live QP; chain and SGE arrays live until return; memory
        // validity is the caller's contract.
        let rc = unsafe { inline::post_send(self.qp.as_ptr(), wrs.as_mut_ptr(), &mut bad) };
        if rc != 0 {
            return Err(post_error("ibv_post_send", rc, &wrs, bad));
        }
        Ok(())
    }

    /// Sends the concatenation of `parts` as one message with
    /// `IBV_SEND_INLINE`: the provider copies the bytes into the work request
    /// before returning, so no registered memory and no lifetime contract are
    /// involved (hence safe). The usual way to send a small tagged message:
    /// `parts = [&tmh_bytes, payload]`. Total length ≤ `caps().max_inline_data`.
    pub fn send_inline(&self, wr_id: u64, parts: &[&[u8]], signaled: bool) -> Result<()> {
        let total: usize = parts.iter().map(|p| p.len()).sum();
        if total > self.caps.max_inline_data as usize {
            return Err(IbvError::InvalidArgument(format!(
                "{total} bytes exceed the QP's max_inline_data {}",
                self.caps.max_inline_data
            )));
        }
        if parts.len() > self.caps.max_send_sge.max(1) as usize {
            return Err(IbvError::InvalidArgument(format!(
                "{} parts exceed the QP's max_send_sge {}",
                parts.len(),
                self.caps.max_send_sge
            )));
        }
        let mut sges: Vec<ibv_sge> = parts
            .iter()
            .filter(|p| !p.is_empty())
            .map(|p| ibv_sge {
                addr: p.as_ptr() as u64,
                length: p.len() as u32, // ≤ max_inline_data (u32)
                lkey: 0,
            })
            .collect();
        let mut flags = IBV_SEND_INLINE;
        if signaled {
            flags |= IBV_SEND_SIGNALED;
        }
        let mut w = ibv_send_wr {
            wr_id,
            sg_list: sges.as_mut_ptr(),
            num_sge: sges.len() as i32,
            opcode: IBV_WR_SEND,
            send_flags: flags,
            ..Default::default()
        };
        let mut bad: *mut ibv_send_wr = ptr::null_mut();
        // SAFETY: live QP; with IBV_SEND_INLINE the provider copies the bytes
        // during the call (verbs.h: "the data buffers can be reused
        // immediately after the call returns"); `parts` outlive the call.
        let rc = unsafe { inline::post_send(self.qp.as_ptr(), &mut w, &mut bad) };
        if rc != 0 {
            return Err(post_error(
                "ibv_post_send",
                rc,
                std::slice::from_ref(&w),
                bad,
            ));
        }
        Ok(())
    }

    /// `ibv_post_recv` (QPs without an SRQ).
    ///
    /// # Safety
    /// As [`SharedReceiveQueue::post_recv`].
    pub unsafe fn post_recv(&self, reqs: &[RecvRequest<'_>]) -> Result<()> {
        if self.srq.is_some() {
            return Err(IbvError::InvalidArgument(
                "this QP receives through its SRQ; post there".into(),
            ));
        }
        if reqs.is_empty() {
            return Ok(());
        }
        let mut wrs = build_recv_chain(reqs)?;
        let mut bad: *mut ibv_recv_wr = ptr::null_mut();
        // SAFETY: live QP; chain lives until return; caller's contract for buffers.
        let rc = unsafe { inline::post_recv(self.qp.as_ptr(), wrs.as_mut_ptr(), &mut bad) };
        if rc != 0 {
            return Err(post_error("ibv_post_recv", rc, &wrs, bad));
        }
        Ok(())
    }
}

impl Drop for QueuePair {
    fn drop(&mut self) {
        // SAFETY: live QP, destroyed once; its CQs/SRQ/PD outlive it (Arcs).
        let rc = unsafe { (self.pd.ctx.lib().fns.destroy_qp)(self.qp.as_ptr()) };
        if rc != 0 {
            tracing::warn!(target: "verbs", qpn = self.qpn, rc, "ibv_destroy_qp failed");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoint_roundtrip_and_bad_length() {
        let e = QpEndpoint {
            qpn: 0x11,
            psn: 0x00ab_cdef,
            lid: 7,
            gid: Gid([1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16]),
        };
        assert_eq!(QpEndpoint::from_bytes(&e.to_bytes()).unwrap(), e);
        assert!(matches!(
            QpEndpoint::from_bytes(&[0u8; 5]),
            Err(IbvError::InvalidArgument(_))
        ));
    }
}
