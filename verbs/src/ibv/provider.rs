//! The provider-neutral interface ([`crate::api`]) implemented over libibverbs,
//! so btl-openib is written once for libibverbs and the soft NIC.

use std::ptr;
use std::sync::Arc;

use crate::api::{self, VerbsError};

use super::cq::{CompletionQueue, RawWc};
use super::device::{Context, GidType, LinkLayer, PortState};
use super::error::IbvError;
use super::inline;
use super::loader::Library;
use super::pd::{Access, ProtectionDomain, RawMemoryRegion, Sge};
use super::qp::{QpCaps, QpState, QueuePair};
use super::srq::{post_error, SharedReceiveQueue, TmOp, TmOpKind};
use super::sys::*;

impl From<IbvError> for VerbsError {
    fn from(e: IbvError) -> Self {
        match e {
            IbvError::LibraryNotFound { .. }
            | IbvError::MissingSymbol { .. }
            | IbvError::UnsupportedPlatform => VerbsError::ProviderUnavailable {
                provider: "ibv",
                reason: e.to_string(),
            },
            IbvError::NoSuchDevice(d) => VerbsError::NoSuchDevice(d),
            IbvError::Verb { verb, source } => VerbsError::Verb { verb, source },
            IbvError::Post {
                verb,
                index,
                source,
            } => VerbsError::Post {
                verb,
                index,
                source,
            },
            IbvError::InvalidArgument(s) => VerbsError::InvalidArgument(s),
            IbvError::Poll(s) => VerbsError::Poll(s),
        }
    }
}

/// The libibverbs provider. `IbvProvider::load()` fails with
/// [`VerbsError::ProviderUnavailable`] ("libibverbs not found: ...") on a
/// machine without rdma-core; nothing else in the process is affected.
#[derive(Debug, Clone)]
pub struct IbvProvider {
    lib: Library,
}

impl IbvProvider {
    /// Uses the process-wide libibverbs (see [`Library::load`]).
    pub fn load() -> api::Result<IbvProvider> {
        Ok(IbvProvider {
            lib: Library::load()?,
        })
    }

    /// Uses an explicitly loaded library.
    pub fn with_library(lib: Library) -> IbvProvider {
        IbvProvider { lib }
    }

    /// The library in use.
    pub fn library(&self) -> &Library {
        &self.lib
    }
}

impl api::Provider for IbvProvider {
    type Context = IbvContext;
    type Pd = IbvPd;
    type Mr = IbvMr;
    type Cq = IbvCq;
    type Qp = IbvQp;
    type Srq = IbvSrq;

    fn name(&self) -> &'static str {
        "ibv"
    }

    fn devices(&self) -> api::Result<Vec<api::DeviceInfo>> {
        Ok(super::device::device_names(&self.lib)?
            .into_iter()
            .map(|(name, guid)| api::DeviceInfo {
                name,
                guid,
                explicit_only: false,
            })
            .collect())
    }

    fn open(&self, device: &str) -> api::Result<IbvContext> {
        Ok(IbvContext(Context::open_with(&self.lib, Some(device))?))
    }
}

/// An opened libibverbs device.
#[derive(Debug, Clone)]
pub struct IbvContext(pub Arc<Context>);

fn mtu(v: u32) -> api::Mtu {
    match v {
        1 => api::Mtu::Mtu256,
        2 => api::Mtu::Mtu512,
        4 => api::Mtu::Mtu2048,
        5 => api::Mtu::Mtu4096,
        _ => api::Mtu::Mtu1024,
    }
}

fn nonneg(v: i32) -> u32 {
    v.max(0) as u32
}

impl api::Context<IbvProvider> for IbvContext {
    fn device_name(&self) -> &str {
        self.0.name()
    }

    fn query_device_ex(&self) -> api::Result<api::DeviceAttr> {
        let a = self.0.query_device_ex()?;
        Ok(api::DeviceAttr {
            fw_ver: a.fw_ver,
            node_guid: a.node_guid,
            vendor_id: a.vendor_id,
            vendor_part_id: a.vendor_part_id,
            max_mr_size: a.max_mr_size,
            max_qp: nonneg(a.max_qp),
            max_qp_wr: nonneg(a.max_qp_wr),
            max_sge: nonneg(a.max_sge),
            max_cq: nonneg(a.max_cq),
            max_cqe: nonneg(a.max_cqe),
            max_mr: nonneg(a.max_mr),
            max_pd: nonneg(a.max_pd),
            max_qp_rd_atom: nonneg(a.max_qp_rd_atom),
            max_qp_init_rd_atom: nonneg(a.max_qp_init_rd_atom),
            atomic_cap: match a.atomic_cap {
                IBV_ATOMIC_HCA => api::AtomicCap::Hca,
                IBV_ATOMIC_GLOB => api::AtomicCap::Glob,
                _ => api::AtomicCap::None,
            },
            max_srq: nonneg(a.max_srq),
            max_srq_wr: nonneg(a.max_srq_wr),
            max_srq_sge: nonneg(a.max_srq_sge),
            phys_port_cnt: a.phys_port_cnt,
            tm_caps: api::TmCaps {
                max_rndv_hdr_size: a.tm_caps.max_rndv_hdr_size,
                max_num_tags: a.tm_caps.max_num_tags,
                rc: a.tm_caps.flags & IBV_TM_CAP_RC != 0,
                max_ops: a.tm_caps.max_ops,
                max_sge: a.tm_caps.max_sge,
            },
        })
    }

    fn query_port(&self, port: u8) -> api::Result<api::PortAttr> {
        let p = self.0.query_port(port)?;
        Ok(api::PortAttr {
            state: match p.state {
                PortState::Down => api::PortState::Down,
                PortState::Init => api::PortState::Init,
                PortState::Armed => api::PortState::Armed,
                PortState::Active => api::PortState::Active,
                PortState::ActiveDefer => api::PortState::Other(IBV_PORT_ACTIVE_DEFER),
                PortState::Other(s) => api::PortState::Other(s),
            },
            max_mtu: mtu(p.max_mtu),
            active_mtu: mtu(p.active_mtu),
            lid: p.lid,
            sm_lid: p.sm_lid,
            link_layer: match p.link_layer {
                LinkLayer::InfiniBand => api::LinkLayer::Infiniband,
                LinkLayer::Ethernet => api::LinkLayer::Ethernet,
                LinkLayer::Unspecified => api::LinkLayer::Unspecified,
            },
            gid_tbl_len: nonneg(p.gid_tbl_len),
            max_msg_sz: p.max_msg_sz,
        })
    }

    fn query_gid_table(&self) -> api::Result<Vec<api::GidEntry>> {
        let ports = self.0.query_device_ex()?.phys_port_cnt;
        let mut out = Vec::new();
        for port in 1..=ports {
            for e in self.0.gid_table(port)? {
                out.push(api::GidEntry {
                    gid: api::Gid(e.gid.0),
                    index: e.index,
                    port,
                    gid_type: match e.gid_type {
                        GidType::RoceV1 => api::GidType::RoceV1,
                        GidType::RoceV2 => api::GidType::RoceV2,
                        // Legacy libraries without types: IB GIDs.
                        GidType::Ib | GidType::Unknown => api::GidType::Ib,
                    },
                });
            }
        }
        Ok(out)
    }

    fn alloc_pd(&self) -> api::Result<IbvPd> {
        Ok(IbvPd(self.0.alloc_pd()?))
    }

    fn create_cq_ex(&self, attr: &api::CqInitAttr) -> api::Result<IbvCq> {
        Ok(IbvCq(self.0.create_cq(attr.cqe, attr.with_tm_info)?))
    }
}

/// A libibverbs protection domain.
#[derive(Debug, Clone)]
pub struct IbvPd(pub Arc<ProtectionDomain>);

impl api::ProtectionDomain<IbvProvider> for IbvPd {
    unsafe fn reg_mr(
        &self,
        addr: *mut u8,
        len: usize,
        access: api::AccessFlags,
    ) -> api::Result<IbvMr> {
        // SAFETY: the trait's contract is register_raw's contract.
        let mr = unsafe { self.0.register_raw(addr, len, Access(access.bits())) }?;
        Ok(IbvMr { mr, access })
    }

    fn create_qp(&self, attr: &api::QpInitAttr<'_, IbvProvider>) -> api::Result<IbvQp> {
        let c = attr.cap;
        let qp = self.0.create_rc_qp_with(
            &attr.send_cq.0,
            &attr.recv_cq.0,
            attr.srq.map(|s| &s.0),
            QpCaps {
                max_send_wr: c.max_send_wr,
                max_recv_wr: c.max_recv_wr,
                max_send_sge: c.max_send_sge,
                max_recv_sge: c.max_recv_sge,
                max_inline_data: c.max_inline_data,
            },
            attr.sq_sig_all,
        )?;
        Ok(IbvQp(qp))
    }

    fn create_srq_ex(&self, attr: &api::SrqAttr, cq: Option<&IbvCq>) -> api::Result<IbvSrq> {
        let srq = match attr.tm {
            None => self.0.create_srq(attr.max_wr, attr.max_sge)?,
            Some(tm) => {
                let cq = cq.ok_or_else(|| {
                    VerbsError::InvalidArgument("a TM-SRQ needs a completion queue".into())
                })?;
                self.0.create_tm_srq(
                    &cq.0,
                    attr.max_wr,
                    attr.max_sge,
                    tm.max_num_tags,
                    tm.max_ops,
                )?
            }
        };
        Ok(IbvSrq(srq))
    }
}

/// A libibverbs memory region over caller-owned memory.
#[derive(Debug)]
pub struct IbvMr {
    mr: RawMemoryRegion,
    access: api::AccessFlags,
}

impl api::MemoryRegion for IbvMr {
    fn addr(&self) -> u64 {
        self.mr.addr()
    }
    fn len(&self) -> usize {
        self.mr.len()
    }
    fn lkey(&self) -> u32 {
        self.mr.lkey()
    }
    fn rkey(&self) -> u32 {
        self.mr.rkey()
    }
    fn access(&self) -> api::AccessFlags {
        self.access
    }
}

/// A libibverbs extended completion queue.
#[derive(Debug, Clone)]
pub struct IbvCq(pub Arc<CompletionQueue>);

fn wc_status(s: u32) -> api::WcStatus {
    use api::WcStatus as S;
    match s {
        IBV_WC_SUCCESS => S::Success,
        IBV_WC_LOC_LEN_ERR => S::LocLenErr,
        IBV_WC_LOC_QP_OP_ERR => S::LocQpOpErr,
        IBV_WC_LOC_PROT_ERR => S::LocProtErr,
        IBV_WC_WR_FLUSH_ERR => S::WrFlushErr,
        IBV_WC_REM_INV_REQ_ERR => S::RemInvReqErr,
        IBV_WC_REM_ACCESS_ERR => S::RemAccessErr,
        IBV_WC_REM_OP_ERR => S::RemOpErr,
        IBV_WC_RETRY_EXC_ERR => S::RetryExcErr,
        IBV_WC_RNR_RETRY_EXC_ERR => S::RnrRetryExcErr,
        IBV_WC_GENERAL_ERR => S::GeneralErr,
        IBV_WC_TM_ERR => S::TmErr,
        IBV_WC_TM_RNDV_INCOMPLETE => S::TmRndvIncomplete,
        o => S::Other(o),
    }
}

fn wc_opcode(o: u32) -> api::WcOpcode {
    use api::WcOpcode as O;
    match o {
        IBV_WC_SEND => O::Send,
        IBV_WC_RDMA_WRITE => O::RdmaWrite,
        IBV_WC_RDMA_READ => O::RdmaRead,
        IBV_WC_COMP_SWAP => O::CompSwap,
        IBV_WC_FETCH_ADD => O::FetchAdd,
        IBV_WC_RECV => O::Recv,
        IBV_WC_RECV_RDMA_WITH_IMM => O::RecvRdmaWithImm,
        IBV_WC_TM_ADD => O::TmAdd,
        IBV_WC_TM_DEL => O::TmDel,
        IBV_WC_TM_SYNC => O::TmSync,
        IBV_WC_TM_RECV => O::TmRecv,
        IBV_WC_TM_NO_TAG => O::TmNoTag,
        o => O::Other(o),
    }
}

/// Translates libibverbs `IBV_WC_*` flag bits to the interface's flags by
/// name (the interface uses the same bit values, checked by the tests; bits the
/// interface does not name, e.g. `IBV_WC_IP_CSUM_OK`, are dropped).
fn wc_flags(f: u32) -> api::WcFlags {
    let mut out = api::WcFlags::empty();
    for (bit, flag) in [
        (IBV_WC_GRH, api::WcFlags::GRH),
        (IBV_WC_WITH_IMM, api::WcFlags::WITH_IMM),
        (IBV_WC_TM_SYNC_REQ, api::WcFlags::TM_SYNC_REQ),
        (IBV_WC_TM_MATCH, api::WcFlags::TM_MATCH),
        (IBV_WC_TM_DATA_VALID, api::WcFlags::TM_DATA_VALID),
    ] {
        if f & bit != 0 {
            out |= flag;
        }
    }
    out
}

pub(crate) fn work_completion(w: RawWc) -> api::WorkCompletion {
    api::WorkCompletion {
        wr_id: w.wr_id,
        status: wc_status(w.status),
        opcode: wc_opcode(w.opcode),
        flags: wc_flags(w.flags),
        byte_len: w.byte_len,
        qp_num: w.qp_num,
        src_qp: 0,
        imm_data: w.imm,
        tm_info: w.tm_info.map(|t| api::TmInfo {
            tag: t.tag,
            priv_: t.priv_,
        }),
        vendor_err: w.vendor_err,
    }
}

impl api::CompletionQueue for IbvCq {
    fn poll(&self, out: &mut [api::WorkCompletion]) -> api::Result<usize> {
        let mut i = 0;
        self.0.poll_raw(out.len(), |w| {
            out[i] = work_completion(w);
            i += 1;
        })?;
        Ok(i)
    }

    fn capacity(&self) -> u32 {
        self.0.capacity()
    }
}

/// Copies interface SGEs into libibverbs layout (on the stack for ≤ 8).
fn with_sges<T>(sg: &[api::Sge], f: impl FnOnce(&[Sge]) -> T) -> T {
    let conv = |s: &api::Sge| Sge {
        addr: s.addr,
        length: s.length,
        lkey: s.lkey,
    };
    if sg.len() <= 8 {
        let mut buf = [Sge {
            addr: 0,
            length: 0,
            lkey: 0,
        }; 8];
        for (d, s) in buf.iter_mut().zip(sg) {
            *d = conv(s);
        }
        f(&buf[..sg.len()])
    } else {
        let v: Vec<Sge> = sg.iter().map(conv).collect();
        f(&v)
    }
}

/// A libibverbs RC queue pair.
#[derive(Debug)]
pub struct IbvQp(pub QueuePair);

impl api::QueuePair for IbvQp {
    fn qp_num(&self) -> u32 {
        self.0.qpn()
    }

    fn state(&self) -> api::QpState {
        // The device's view, not the wrapper's: a QP the NIC moved to the
        // error state reads as such (a failed query falls back to the last
        // state this wrapper set).
        let s = self.0.query_state().unwrap_or_else(|_| self.0.state());
        match s {
            QpState::Reset => api::QpState::Reset,
            QpState::Init => api::QpState::Init,
            QpState::Rtr => api::QpState::Rtr,
            QpState::Rts => api::QpState::Rts,
            QpState::Error => api::QpState::Error,
        }
    }

    fn modify_to_init(&self, t: &api::QpInitTransition) -> api::Result<()> {
        let mut a = ibv_qp_attr {
            qp_state: IBV_QPS_INIT,
            pkey_index: t.pkey_index,
            port_num: t.port,
            qp_access_flags: t.access.bits(),
            ..Default::default()
        };
        Ok(self.0.modify(
            Some(QpState::Reset),
            &mut a,
            IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS,
            QpState::Init,
        )?)
    }

    fn modify_to_rtr(&self, t: &api::QpRtrTransition) -> api::Result<()> {
        let mut a = ibv_qp_attr {
            qp_state: IBV_QPS_RTR,
            path_mtu: t.path_mtu as u32,
            dest_qp_num: t.dest_qp_num,
            rq_psn: t.rq_psn & 0x00ff_ffff,
            max_dest_rd_atomic: t.max_dest_rd_atomic,
            min_rnr_timer: t.min_rnr_timer,
            ..Default::default()
        };
        a.ah_attr.sl = t.sl;
        a.ah_attr.port_num = t.port;
        match t.dest {
            api::Destination::Lid(lid) => a.ah_attr.dlid = lid,
            api::Destination::Gid {
                dgid,
                sgid_index,
                hop_limit,
                traffic_class,
                flow_label,
            } => {
                a.ah_attr.is_global = 1;
                a.ah_attr.grh = ibv_global_route {
                    dgid: ibv_gid { raw: dgid.0 },
                    flow_label,
                    sgid_index,
                    hop_limit,
                    traffic_class,
                };
            }
        }
        Ok(self.0.modify(
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
        )?)
    }

    fn modify_to_rts(&self, t: &api::QpRtsTransition) -> api::Result<()> {
        let mut a = ibv_qp_attr {
            qp_state: IBV_QPS_RTS,
            timeout: t.timeout,
            retry_cnt: t.retry_cnt,
            rnr_retry: t.rnr_retry,
            sq_psn: t.sq_psn & 0x00ff_ffff,
            max_rd_atomic: t.max_rd_atomic,
            ..Default::default()
        };
        Ok(self.0.modify(
            Some(QpState::Rtr),
            &mut a,
            IBV_QP_STATE
                | IBV_QP_TIMEOUT
                | IBV_QP_RETRY_CNT
                | IBV_QP_RNR_RETRY
                | IBV_QP_SQ_PSN
                | IBV_QP_MAX_QP_RD_ATOMIC,
            QpState::Rts,
        )?)
    }

    fn modify_to_error(&self) -> api::Result<()> {
        Ok(self.0.to_error()?)
    }

    unsafe fn post_send(&self, wr: &api::SendWr<'_>) -> api::Result<()> {
        with_sges(wr.sg_list, |sges| {
            let mut w = ibv_send_wr {
                wr_id: wr.wr_id,
                next: ptr::null_mut(),
                sg_list: sges.as_ptr().cast::<ibv_sge>().cast_mut(),
                num_sge: i32::try_from(sges.len())
                    .map_err(|_| VerbsError::InvalidArgument("too many SGEs".into()))?,
                // api::SendFlags has the IBV_SEND_* bit values.
                send_flags: wr.flags.bits(),
                ..Default::default()
            };
            match wr.opcode {
                api::SendOpcode::Send => w.opcode = IBV_WR_SEND,
                api::SendOpcode::SendWithImm(imm) => {
                    w.opcode = IBV_WR_SEND_WITH_IMM;
                    w.__bindgen_anon_1.imm_data = imm.to_be();
                }
                api::SendOpcode::RdmaWrite { remote_addr, rkey } => {
                    w.opcode = IBV_WR_RDMA_WRITE;
                    w.wr.rdma.remote_addr = remote_addr;
                    w.wr.rdma.rkey = rkey;
                }
                api::SendOpcode::RdmaRead { remote_addr, rkey } => {
                    w.opcode = IBV_WR_RDMA_READ;
                    w.wr.rdma.remote_addr = remote_addr;
                    w.wr.rdma.rkey = rkey;
                }
                // `wr.atomic` of `struct ibv_send_wr` (libibverbs/verbs.h):
                // remote_addr, compare_add, swap, rkey; operands in host
                // order (the provider converts them for the wire).
                api::SendOpcode::AtomicFetchAdd {
                    remote_addr,
                    rkey,
                    add,
                } => {
                    w.opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
                    w.wr.atomic.remote_addr = remote_addr;
                    w.wr.atomic.compare_add = add;
                    w.wr.atomic.swap = 0;
                    w.wr.atomic.rkey = rkey;
                }
                api::SendOpcode::AtomicCmpSwap {
                    remote_addr,
                    rkey,
                    compare,
                    swap,
                } => {
                    w.opcode = IBV_WR_ATOMIC_CMP_AND_SWP;
                    w.wr.atomic.remote_addr = remote_addr;
                    w.wr.atomic.compare_add = compare;
                    w.wr.atomic.swap = swap;
                    w.wr.atomic.rkey = rkey;
                }
            }
            let mut bad = ptr::null_mut();
            // SAFETY: live QP; w and its SGE array live until return; buffer
            // validity is the caller's contract.
            let rc = unsafe { inline::post_send(self.0.qp.as_ptr(), &mut w, &mut bad) };
            if rc != 0 {
                return Err(post_error("ibv_post_send", rc, std::slice::from_ref(&w), bad).into());
            }
            Ok(())
        })
    }

    unsafe fn post_recv(&self, wr: &api::RecvWr<'_>) -> api::Result<()> {
        with_sges(wr.sg_list, |sges| {
            let req = super::srq::RecvRequest {
                wr_id: wr.wr_id,
                sges,
            };
            // SAFETY: the trait's contract.
            Ok(unsafe { self.0.post_recv(std::slice::from_ref(&req)) }?)
        })
    }
}

/// A libibverbs shared receive queue (basic or tag matching).
#[derive(Debug, Clone)]
pub struct IbvSrq(pub Arc<SharedReceiveQueue>);

impl api::SharedReceiveQueue for IbvSrq {
    fn srq_num(&self) -> u32 {
        self.0.srq_num().unwrap_or(0)
    }

    fn tm(&self) -> Option<api::SrqTmAttr> {
        self.0
            .tm_caps()
            .map(|(max_num_tags, max_ops)| api::SrqTmAttr {
                max_num_tags,
                max_ops,
            })
    }

    unsafe fn post_srq_recv(&self, wr: &api::RecvWr<'_>) -> api::Result<()> {
        with_sges(wr.sg_list, |sges| {
            let req = super::srq::RecvRequest {
                wr_id: wr.wr_id,
                sges,
            };
            // SAFETY: the trait's contract.
            Ok(unsafe { self.0.post_recv(std::slice::from_ref(&req)) }?)
        })
    }

    unsafe fn post_srq_ops(&self, ops: &mut [api::OpsWr<'_>]) -> api::Result<()> {
        if self.0.tm_caps().is_none() {
            return Err(VerbsError::post("ibv_post_srq_ops", 0, libc::EOPNOTSUPP));
        }
        let mut mine = Vec::with_capacity(ops.len());
        for (i, o) in ops.iter().enumerate() {
            let kind = match o.opcode {
                api::OpsOpcode::TagAdd => {
                    let [s] = o.sg_list else {
                        return Err(VerbsError::post("ibv_post_srq_ops", i, libc::EINVAL));
                    };
                    TmOpKind::Add {
                        recv_wr_id: o.recv_wr_id,
                        sge: Sge {
                            addr: s.addr,
                            length: s.length,
                            lkey: s.lkey,
                        },
                        tag: o.tag,
                        mask: o.mask,
                    }
                }
                api::OpsOpcode::TagDel => TmOpKind::Del { handle: o.handle },
                api::OpsOpcode::TagSync => TmOpKind::Sync,
            };
            mine.push(TmOp {
                wr_id: o.wr_id,
                kind,
                signaled: o.flags.contains(api::OpsFlags::SIGNALED),
                unexpected_cnt: o
                    .flags
                    .contains(api::OpsFlags::TM_SYNC)
                    .then_some(o.unexpected_cnt),
                handle: o.handle,
            });
        }
        // SAFETY: the trait's contract.
        let r = unsafe { self.0.post_ops(&mut mine) };
        for (o, m) in ops.iter_mut().zip(&mine) {
            if o.opcode == api::OpsOpcode::TagAdd {
                o.handle = m.handle;
            }
        }
        Ok(r?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_translate_by_name() {
        let f = wc_flags(IBV_WC_TM_MATCH | IBV_WC_TM_DATA_VALID);
        assert!(f.contains(api::WcFlags::TM_MATCH));
        assert!(f.contains(api::WcFlags::TM_DATA_VALID));
        assert!(!f.contains(api::WcFlags::TM_SYNC_REQ));
        assert_eq!(wc_flags(IBV_WC_TM_SYNC_REQ), api::WcFlags::TM_SYNC_REQ);
        assert_eq!(wc_flags(IBV_WC_WITH_IMM), api::WcFlags::WITH_IMM);
        assert_eq!(wc_flags(0), api::WcFlags::empty());
        // The typed completion flags carry libibverbs' own bit values (verbs.h:
        // IBV_WC_TM_SYNC_REQ = 1 << 4, IBV_WC_TM_MATCH = 1 << 5,
        // IBV_WC_TM_DATA_VALID = 1 << 6).
        for (typed, raw) in [
            (api::WcFlags::GRH, IBV_WC_GRH),
            (api::WcFlags::WITH_IMM, IBV_WC_WITH_IMM),
            (api::WcFlags::TM_SYNC_REQ, IBV_WC_TM_SYNC_REQ),
            (api::WcFlags::TM_MATCH, IBV_WC_TM_MATCH),
            (api::WcFlags::TM_DATA_VALID, IBV_WC_TM_DATA_VALID),
        ] {
            assert_eq!(typed.bits(), raw);
            assert_eq!(wc_flags(raw), typed);
        }
        assert_eq!(IBV_WC_TM_SYNC_REQ, 1 << 4);
        assert_eq!(IBV_WC_TM_MATCH, 1 << 5);
        assert_eq!(IBV_WC_TM_DATA_VALID, 1 << 6);
        let all = IBV_WC_GRH
            | IBV_WC_WITH_IMM
            | IBV_WC_IP_CSUM_OK
            | IBV_WC_TM_SYNC_REQ
            | IBV_WC_TM_MATCH
            | IBV_WC_TM_DATA_VALID;
        assert_eq!(wc_flags(all).bits(), all & !IBV_WC_IP_CSUM_OK);
        assert_eq!(wc_opcode(IBV_WC_TM_NO_TAG), api::WcOpcode::TmNoTag);
        assert_eq!(wc_status(IBV_WC_TM_ERR), api::WcStatus::TmErr);
        // The interface's bit values that are passed through unchanged.
        assert_eq!(api::AccessFlags::LOCAL_WRITE.bits(), IBV_ACCESS_LOCAL_WRITE);
        assert_eq!(
            api::AccessFlags::REMOTE_WRITE.bits(),
            IBV_ACCESS_REMOTE_WRITE
        );
        assert_eq!(api::AccessFlags::REMOTE_READ.bits(), IBV_ACCESS_REMOTE_READ);
        assert_eq!(
            api::AccessFlags::REMOTE_ATOMIC.bits(),
            IBV_ACCESS_REMOTE_ATOMIC
        );
        assert_eq!(api::SendFlags::FENCE.bits(), IBV_SEND_FENCE);
        assert_eq!(api::SendFlags::SIGNALED.bits(), IBV_SEND_SIGNALED);
        assert_eq!(api::SendFlags::SOLICITED.bits(), IBV_SEND_SOLICITED);
        assert_eq!(api::SendFlags::INLINE.bits(), IBV_SEND_INLINE);
        assert_eq!(api::Mtu::Mtu4096 as u32, IBV_MTU_4096);
        assert_eq!(api::Mtu::Mtu256 as u32, IBV_MTU_256);
    }

    #[test]
    fn tm_completion_classifies() {
        let w = work_completion(RawWc {
            wr_id: 5,
            status: IBV_WC_SUCCESS,
            opcode: IBV_WC_TM_RECV,
            flags: IBV_WC_TM_MATCH,
            byte_len: 0,
            qp_num: 3,
            imm: None,
            tm_info: Some(super::super::cq::TmInfo { tag: 42, priv_: 7 }),
            vendor_err: 0,
        });
        assert_eq!(
            w.kind(),
            api::Completion::TagMatched {
                info: api::TmInfo { tag: 42, priv_: 7 },
                data_valid: false,
                byte_len: 0
            }
        );
        let del = work_completion(RawWc {
            wr_id: 6,
            status: IBV_WC_TM_ERR,
            opcode: IBV_WC_TM_DEL,
            flags: 0,
            byte_len: 0,
            qp_num: 0,
            imm: None,
            tm_info: None,
            vendor_err: 0,
        });
        assert_eq!(del.kind(), api::Completion::TagDelConsumed);
    }
}
