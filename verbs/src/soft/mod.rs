//! The soft NIC: a software RDMA device named `tmsoft0` with hardware
//! tag-matching semantics (reference/tag-matching.md §6), across processes of
//! one host.
//!
//! # Opt-in
//! [`SoftProvider`] lists `tmsoft0` with [`DeviceInfo::explicit_only`] set:
//! btl-openib must use it only when `btl_openib_if_include` names it, never
//! in place of a real device.
//!
//! # How it works
//! - **Progress**: the device of a process runs inside that process's verbs
//!   calls. Posting pushes records towards the peer; every
//!   [`CompletionQueue::poll`] (and [`SoftContext::progress`]) drains this
//!   device's receive rings, serves incoming RDMA requests, runs the TM-SRQs
//!   and retries queued records. A process that waits for a peer must poll.
//! - **Addressing**: each opened device is an *instance* (pid, instance
//!   number); its single port (Ethernet link layer, like RoCE) has one GID
//!   that encodes both: `fe80::7473:<instance>:<pid>`. A QP is addressed by
//!   that GID plus its QP number ([`Destination::Gid`]); LIDs are not
//!   supported (`EINVAL`).
//! - **RC transport**: every QP owns a receive ring in a shared-memory
//!   segment `/dev/shm/tmpi-soft.<pid>.<instance>.<qpn>` (mode 0600), created
//!   with the QP. The peer maps it in its INIT->RTR transition and marks it
//!   attached; the owner then unlinks the name (so nothing is left behind
//!   once both sides connected; a QP destroyed earlier unlinks it too).
//!   Sends are copied into the ring at post time (the send completion means
//!   "in the peer's ring"); a full ring queues the record (flow control); a
//!   receiver without a posted buffer leaves the record in the ring (RNR,
//!   retried forever). Sends are limited to half the ring
//!   (`btl_openib_tmsoft_ring_size`; larger ones are refused at post time)
//!   and, like RDMA, to the port's `max_msg_sz`
//!   (`btl_openib_tmsoft_max_msg_sz`, 1 GiB; longer ones complete with
//!   `LocLenErr`).
//! - **Limits like mlx5**: `max_qp_wr` (`btl_openib_tmsoft_max_qp_wr`)
//!   bounds every QP's send queue; a TM-SRQ is refused (`EINVAL`) when
//!   its hidden command QP would not fit (`roundup_pow2(4 * max_ops) >
//!   max_qp_wr`), when `max_num_tags`/`max_ops` exceed `tm_caps`, or when
//!   it is created with fewer than 33 untagged buffers (`max_wr`, UCX's
//!   rule). The port's `active_mtu` is `btl_openib_tmsoft_mtu` (1024).
//! - **RDMA**: request records validated *at the target* (rkey, PD, access
//!   flags of region and QP, bounds) and served with
//!   `process_vm_readv`/`process_vm_writev`; a violation completes with
//!   `RemAccessErr` at the requester and touches no memory (see
//!   [`engine`](self) docs). Opening the device calls
//!   `prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY)` so peers of the same user
//!   may do so under Yama.
//! - **Tag matching**: a TM-SRQ is a [`tm::TmListModel`] plus data
//!   movement, with mlx5's completion forms (see [`tm`]). Its deterministic
//!   mode is reachable through [`SoftSrq::hold_ops`],
//!   [`SoftSrq::hold_arrivals`], [`SoftSrq::hold_data`],
//!   [`SoftSrq::release_op`], [`SoftSrq::release_arrival`],
//!   [`SoftSrq::release_data`].
//! - **Errors**: a CQ that overflows reports [`VerbsError::CqOverrun`] on
//!   every later poll. Bad local keys complete with `LocProtErr`.
//!   Unlike hardware, a QP that saw a remote access error stays usable.

pub mod config;
mod engine;
mod mem;
mod shm;
pub mod tm;

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use crate::api::*;
pub use config::{Inject, SoftConfig, DEFAULT_MAX_QP_WR};
pub use engine::TM_MIN_UNTAGGED;
use engine::{CqState, Engine, QpEntry, SrqKind};
use mem::{AtomicOp, MrEntry};
use tm::{Handle, TmOp};

/// The soft device's name.
pub const DEVICE_NAME: &str = "tmsoft0";

/// Vendor id reported by the soft device (not a real PCI vendor).
pub const SOFT_VENDOR_ID: u32 = 0x7473;

static NEXT_INSTANCE: AtomicU32 = AtomicU32::new(1);

/// The soft NIC provider.
#[derive(Debug, Clone)]
pub struct SoftProvider {
    cfg: SoftConfig,
}

impl SoftProvider {
    /// A provider whose devices use `cfg`.
    pub fn new(cfg: SoftConfig) -> Result<Self> {
        cfg.validate()?;
        Ok(SoftProvider { cfg })
    }
    /// A provider configured from the MCA parameters of the process
    /// ([`SoftConfig::from_mca`]).
    pub fn from_mca() -> Result<Self> {
        Self::new(SoftConfig::from_mca()?)
    }
    /// The configuration.
    pub fn config(&self) -> &SoftConfig {
        &self.cfg
    }
}

/// The GID of device instance (`pid`, `instance`).
pub fn soft_gid(pid: u32, instance: u32) -> Gid {
    let mut g = [0u8; 16];
    g[0] = 0xfe;
    g[1] = 0x80;
    g[8] = b't';
    g[9] = b's';
    g[10..12].copy_from_slice(&(instance as u16).to_be_bytes());
    g[12..16].copy_from_slice(&pid.to_be_bytes());
    Gid(g)
}

/// Decodes a soft GID into (pid, instance); `None` for any other GID.
pub fn decode_soft_gid(gid: &Gid) -> Option<(u32, u32)> {
    let g = gid.0;
    if g[0] != 0xfe || g[1] != 0x80 || g[2..8] != [0; 6] || g[8] != b't' || g[9] != b's' {
        return None;
    }
    let instance = u32::from(u16::from_be_bytes([g[10], g[11]]));
    let pid = u32::from_be_bytes([g[12], g[13], g[14], g[15]]);
    Some((pid, instance))
}

impl Provider for SoftProvider {
    type Context = SoftContext;
    type Pd = SoftPd;
    type Mr = SoftMr;
    type Cq = SoftCq;
    type Qp = SoftQp;
    type Srq = SoftSrq;

    fn name(&self) -> &'static str {
        "soft"
    }

    fn devices(&self) -> Result<Vec<DeviceInfo>> {
        Ok(vec![DeviceInfo {
            name: DEVICE_NAME.into(),
            guid: 0x7473_6f66_7400_0001,
            explicit_only: true,
        }])
    }

    fn open(&self, device: &str) -> Result<SoftContext> {
        if device != DEVICE_NAME {
            return Err(VerbsError::NoSuchDevice(device.into()));
        }
        shm::allow_peers();
        shm::sweep_stale();
        let pid = std::process::id();
        let instance = NEXT_INSTANCE.fetch_add(1, Ordering::Relaxed) & 0xffff;
        tracing::debug!(target: "verbs", pid, instance, "soft: device opened");
        Ok(SoftContext {
            inner: Arc::new(Ctx {
                pid,
                instance,
                engine: Mutex::new(Engine::new(pid, instance, self.cfg)),
            }),
        })
    }
}

#[derive(Debug)]
struct Ctx {
    pid: u32,
    instance: u32,
    engine: Mutex<Engine>,
}

impl Ctx {
    fn lock(&self) -> MutexGuard<'_, Engine> {
        // A panic elsewhere must not make every later call panic.
        self.engine.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// An opened soft device.
#[derive(Debug, Clone)]
pub struct SoftContext {
    inner: Arc<Ctx>,
}

impl SoftContext {
    /// Runs the device once (what every CQ poll does): useful for a process
    /// that must serve RDMA requests without polling a CQ.
    pub fn progress(&self) {
        self.inner.lock().progress();
    }
    /// This instance's GID.
    pub fn gid(&self) -> Gid {
        soft_gid(self.inner.pid, self.inner.instance)
    }
}

impl Context<SoftProvider> for SoftContext {
    fn device_name(&self) -> &str {
        DEVICE_NAME
    }

    fn query_device_ex(&self) -> Result<DeviceAttr> {
        let cfg = self.inner.lock().cfg;
        Ok(DeviceAttr {
            fw_ver: format!("tmpi-soft {}", env!("CARGO_PKG_VERSION")),
            node_guid: 0x7473_6f66_7400_0000 | u64::from(self.inner.instance),
            vendor_id: SOFT_VENDOR_ID,
            vendor_part_id: 1,
            max_mr_size: u64::MAX,
            max_qp: 1 << 20,
            max_qp_wr: cfg.max_qp_wr,
            max_sge: 16,
            max_cq: 1 << 16,
            max_cqe: 1 << 22,
            max_mr: 1 << 20,
            max_pd: 1 << 16,
            max_qp_rd_atom: 16,
            max_qp_init_rd_atom: 16,
            // As mlx5 (kernel `get_atomic_caps`) and rxe: atomic only among
            // this device's atomics (see `mem::MrTable::serve_atomic`).
            atomic_cap: AtomicCap::Hca,
            max_srq: 1 << 16,
            max_srq_wr: 1 << 20,
            max_srq_sge: 16,
            phys_port_cnt: 1,
            tm_caps: TmCaps {
                max_rndv_hdr_size: cfg.max_rndv_hdr_size,
                max_num_tags: cfg.max_num_tags,
                rc: cfg.max_num_tags > 0,
                max_ops: cfg.max_ops,
                max_sge: 1,
            },
        })
    }

    fn query_port(&self, port: u8) -> Result<PortAttr> {
        if port != 1 {
            return Err(VerbsError::verb("ibv_query_port", libc::EINVAL));
        }
        let cfg = self.inner.lock().cfg;
        Ok(PortAttr {
            state: PortState::Active,
            max_mtu: Mtu::Mtu4096,
            active_mtu: cfg.mtu,
            lid: 0,
            sm_lid: 0,
            link_layer: LinkLayer::Ethernet,
            gid_tbl_len: 1,
            max_msg_sz: cfg.max_msg_sz,
        })
    }

    fn query_gid_table(&self) -> Result<Vec<GidEntry>> {
        Ok(vec![GidEntry {
            gid: self.gid(),
            index: 0,
            port: 1,
            gid_type: GidType::RoceV2,
        }])
    }

    fn alloc_pd(&self) -> Result<SoftPd> {
        let id = self.inner.lock().alloc_id();
        Ok(SoftPd {
            inner: Arc::new(PdInner {
                ctx: self.inner.clone(),
                id,
            }),
        })
    }

    fn create_cq_ex(&self, attr: &CqInitAttr) -> Result<SoftCq> {
        if attr.cqe == 0 || attr.cqe > 1 << 22 {
            return Err(VerbsError::verb("ibv_create_cq_ex", libc::EINVAL));
        }
        let mut e = self.inner.lock();
        let id = e.alloc_id();
        e.cqs.insert(
            id,
            CqState {
                cap: attr.cqe,
                q: Default::default(),
                overrun: false,
            },
        );
        Ok(SoftCq {
            inner: Arc::new(CqInner {
                ctx: self.inner.clone(),
                id,
                cap: attr.cqe,
            }),
        })
    }
}

#[derive(Debug)]
struct PdInner {
    ctx: Arc<Ctx>,
    id: u32,
}

/// A soft protection domain.
#[derive(Debug, Clone)]
pub struct SoftPd {
    inner: Arc<PdInner>,
}

impl ProtectionDomain<SoftProvider> for SoftPd {
    unsafe fn reg_mr(&self, addr: *mut u8, len: usize, access: AccessFlags) -> Result<SoftMr> {
        if addr.is_null() && len > 0 {
            return Err(VerbsError::verb("ibv_reg_mr", libc::EINVAL));
        }
        if (addr as u64).checked_add(len as u64).is_none() {
            return Err(VerbsError::verb("ibv_reg_mr", libc::EINVAL));
        }
        let remote_modify = access.contains(AccessFlags::REMOTE_WRITE)
            || access.contains(AccessFlags::REMOTE_ATOMIC);
        if remote_modify && !access.contains(AccessFlags::LOCAL_WRITE) {
            // As in libibverbs (ibv_reg_mr.3): remote write or remote atomic
            // requires local write.
            return Err(VerbsError::verb("ibv_reg_mr", libc::EINVAL));
        }
        let mut e = self.inner.ctx.lock();
        let key = e.alloc_key();
        e.mrs.insert(
            key,
            MrEntry {
                pd: self.inner.id,
                addr: addr as u64,
                len: len as u64,
                access,
            },
        );
        Ok(SoftMr {
            pd: self.inner.clone(),
            key,
            addr: addr as u64,
            len,
            access,
        })
    }

    fn create_qp(&self, attr: &QpInitAttr<'_, SoftProvider>) -> Result<SoftQp> {
        let same = |c: &Arc<Ctx>| Arc::ptr_eq(c, &self.inner.ctx);
        if !same(&attr.send_cq.inner.ctx) || !same(&attr.recv_cq.inner.ctx) {
            return Err(VerbsError::verb("ibv_create_qp", libc::EINVAL));
        }
        if let Some(s) = attr.srq {
            if !same(&s.inner.pd.ctx) {
                return Err(VerbsError::verb("ibv_create_qp", libc::EINVAL));
            }
        }
        let mut e = self.inner.ctx.lock();
        if attr.cap.max_send_wr == 0 || attr.cap.max_send_wr > e.cfg.max_qp_wr {
            return Err(VerbsError::verb("ibv_create_qp", libc::EINVAL));
        }
        let qpn = e.alloc_id() & 0x00ff_ffff;
        let seg =
            shm::Segment::create(e.pid, e.instance, qpn, e.cfg.ring_size).map_err(|source| {
                VerbsError::Verb {
                    verb: "ibv_create_qp",
                    source,
                }
            })?;
        e.qps.insert(
            qpn,
            QpEntry::new(
                self.inner.id,
                attr.send_cq.inner.id,
                attr.recv_cq.inner.id,
                attr.srq.map(|s| s.inner.id),
                attr.sq_sig_all,
                attr.cap.max_send_wr,
                attr.cap.max_recv_wr,
                seg,
            ),
        );
        tracing::debug!(target: "verbs", qpn, "soft: QP created");
        Ok(SoftQp {
            pd: self.inner.clone(),
            _send_cq: attr.send_cq.inner.clone(),
            _recv_cq: attr.recv_cq.inner.clone(),
            _srq: attr.srq.map(|s| s.inner.clone()),
            qpn,
        })
    }

    fn create_srq_ex(&self, attr: &SrqAttr, cq: Option<&SoftCq>) -> Result<SoftSrq> {
        if attr.max_wr == 0 || attr.max_sge == 0 {
            return Err(VerbsError::verb("ibv_create_srq_ex", libc::EINVAL));
        }
        if let Some(c) = cq {
            if !Arc::ptr_eq(&c.inner.ctx, &self.inner.ctx) {
                return Err(VerbsError::verb("ibv_create_srq_ex", libc::EINVAL));
            }
        }
        let id = self
            .inner
            .ctx
            .lock()
            .create_srq(self.inner.id, attr, cq.map(|c| c.inner.id))?;
        Ok(SoftSrq {
            inner: Arc::new(SrqInner {
                pd: self.inner.clone(),
                _cq: cq.map(|c| c.inner.clone()),
                id,
                tm: attr.tm,
            }),
        })
    }
}

/// A soft memory region. Dropping it deregisters it.
#[derive(Debug)]
pub struct SoftMr {
    pd: Arc<PdInner>,
    key: u32,
    addr: u64,
    len: usize,
    access: AccessFlags,
}

impl MemoryRegion for SoftMr {
    fn addr(&self) -> u64 {
        self.addr
    }
    fn len(&self) -> usize {
        self.len
    }
    fn lkey(&self) -> u32 {
        self.key
    }
    fn rkey(&self) -> u32 {
        self.key
    }
    fn access(&self) -> AccessFlags {
        self.access
    }
}

impl Drop for SoftMr {
    fn drop(&mut self) {
        self.pd.ctx.lock().mrs.remove(self.key);
    }
}

#[derive(Debug)]
struct CqInner {
    ctx: Arc<Ctx>,
    id: u32,
    cap: u32,
}

impl Drop for CqInner {
    fn drop(&mut self) {
        self.ctx.lock().cqs.remove(&self.id);
    }
}

/// A soft completion queue. Polling drives the device.
#[derive(Debug, Clone)]
pub struct SoftCq {
    inner: Arc<CqInner>,
}

impl CompletionQueue for SoftCq {
    fn poll(&self, out: &mut [WorkCompletion]) -> Result<usize> {
        self.inner.ctx.lock().poll_cq(self.inner.id, out)
    }
    fn capacity(&self) -> u32 {
        self.inner.cap
    }
}

#[derive(Debug)]
struct SrqInner {
    pd: Arc<PdInner>,
    _cq: Option<Arc<CqInner>>,
    id: u32,
    tm: Option<SrqTmAttr>,
}

impl Drop for SrqInner {
    fn drop(&mut self) {
        self.pd.ctx.lock().srqs.remove(&self.id);
    }
}

/// A soft SRQ (basic or TM).
#[derive(Debug, Clone)]
pub struct SoftSrq {
    inner: Arc<SrqInner>,
}

/// A snapshot of a TM-SRQ's state, for tests and `tmpi_info`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TmSnapshot {
    /// NIC unexpected counter.
    pub hw_cnt: u16,
    /// Last software count.
    pub sw_cnt: u16,
    /// Entries (handle, masked tag, mask) in list order.
    pub entries: Vec<(Handle, u64, u64)>,
    /// Operations posted, not executed.
    pub queued_ops: usize,
    /// Messages arrived, not executed.
    pub queued_arrivals: usize,
}

impl SoftSrq {
    fn with_model<R>(&self, f: impl FnOnce(&mut engine::Model) -> R) -> Option<R> {
        let mut e = self.inner.pd.ctx.lock();
        match e.srqs.get_mut(&self.inner.id).map(|s| &mut s.kind) {
            Some(SrqKind::Tm { model, .. }) => Some(f(model)),
            _ => None,
        }
    }

    /// Deterministic mode: hold (or free) list operations in the NIC until
    /// [`SoftSrq::release_op`]. No-op on a basic SRQ.
    pub fn hold_ops(&self, hold: bool) {
        self.with_model(|m| m.hold_ops(hold));
    }
    /// Deterministic mode: hold (or free) arriving messages (they are taken
    /// from the rings but not matched) until [`SoftSrq::release_arrival`].
    pub fn hold_arrivals(&self, hold: bool) {
        self.with_model(|m| m.hold_arrivals(hold));
    }
    /// Executes the oldest held list operation; false if none.
    pub fn release_op(&self) -> bool {
        self.with_model(|m| m.release_op()).unwrap_or(false)
    }
    /// Executes the oldest held arrival; false if none (drive the device
    /// first with a poll so that arrived messages reach the queue).
    pub fn release_arrival(&self) -> bool {
        self.inner.pd.ctx.lock().progress();
        self.with_model(|m| m.release_arrival()).unwrap_or(false)
    }
    /// Deterministic mode: hold (or free) the delayed second CQEs of the
    /// two-CQE forms (multi-packet eager, NIC rendezvous, two of the
    /// software-rendezvous forms) until [`SoftSrq::release_data`]. Without
    /// it they come out at the first poll after the first CQE was polled,
    /// behind whatever else that poll produces.
    pub fn hold_data(&self, hold: bool) {
        self.with_model(|m| m.hold_data(hold));
    }
    /// Releases the oldest held second CQE whose first CQE was polled and
    /// whose data has landed; false if none.
    pub fn release_data(&self) -> bool {
        self.inner.pd.ctx.lock().progress();
        self.with_model(|m| m.release_data()).unwrap_or(false)
    }
    /// Second CQEs not released yet.
    pub fn deferred_data(&self) -> usize {
        self.with_model(|m| m.deferred_data()).unwrap_or(0)
    }
    /// The TM state, or `None` for a basic SRQ.
    pub fn tm_snapshot(&self) -> Option<TmSnapshot> {
        self.with_model(|m| TmSnapshot {
            hw_cnt: m.hw_count(),
            sw_cnt: m.sw_count(),
            entries: m.entries(),
            queued_ops: m.queued_ops(),
            queued_arrivals: m.queued_arrivals(),
        })
    }
}

impl SharedReceiveQueue for SoftSrq {
    fn srq_num(&self) -> u32 {
        self.inner.id
    }
    fn tm(&self) -> Option<SrqTmAttr> {
        self.inner.tm
    }
    unsafe fn post_srq_recv(&self, wr: &RecvWr<'_>) -> Result<()> {
        self.inner
            .pd
            .ctx
            .lock()
            .post_srq_recv(self.inner.id, wr.wr_id, wr.sg_list)
    }
    unsafe fn post_srq_ops(&self, ops: &mut [OpsWr<'_>]) -> Result<()> {
        const VERB: &str = "ibv_post_srq_ops";
        if self.inner.tm.is_none() {
            return Err(VerbsError::post(VERB, 0, libc::EOPNOTSUPP));
        }
        let mut e = self.inner.pd.ctx.lock();
        let Some(SrqKind::Tm { model, .. }) = e.srqs.get_mut(&self.inner.id).map(|s| &mut s.kind)
        else {
            return Err(VerbsError::post(VERB, 0, libc::EOPNOTSUPP));
        };
        for (i, op) in ops.iter_mut().enumerate() {
            let tm_op = match op.opcode {
                OpsOpcode::TagAdd => {
                    if op.sg_list.len() != 1 {
                        return Err(VerbsError::post(VERB, i, libc::EINVAL));
                    }
                    TmOp::Add {
                        recv_wr_id: op.recv_wr_id,
                        buffer: op.sg_list.to_vec(),
                        len: op.sg_list[0].length,
                        tag: op.tag,
                        mask: op.mask,
                    }
                }
                OpsOpcode::TagDel => TmOp::Del { handle: op.handle },
                OpsOpcode::TagSync => TmOp::Sync,
            };
            let sync = op
                .flags
                .contains(OpsFlags::TM_SYNC)
                .then_some(op.unexpected_cnt);
            let signaled = op.flags.contains(OpsFlags::SIGNALED);
            match model.post_op(op.wr_id, tm_op, signaled, sync) {
                Ok(h) => {
                    if op.opcode == OpsOpcode::TagAdd {
                        op.handle = h;
                    }
                }
                Err(err) => return Err(VerbsError::post(VERB, i, err.errno())),
            }
        }
        Ok(())
    }
}

/// A soft RC queue pair.
#[derive(Debug)]
pub struct SoftQp {
    pd: Arc<PdInner>,
    _send_cq: Arc<CqInner>,
    _recv_cq: Arc<CqInner>,
    _srq: Option<Arc<SrqInner>>,
    qpn: u32,
}

impl Drop for SoftQp {
    fn drop(&mut self) {
        // Dropping the entry unmaps both rings and unlinks ours.
        self.pd.ctx.lock().destroy_qp(self.qpn);
    }
}

impl SoftQp {
    fn modify(&self, f: impl FnOnce(&mut Engine, u32) -> Result<()>) -> Result<()> {
        let mut e = self.pd.ctx.lock();
        f(&mut e, self.qpn)
    }
}

fn bad_state() -> VerbsError {
    VerbsError::verb("ibv_modify_qp", libc::EINVAL)
}

impl QueuePair for SoftQp {
    fn qp_num(&self) -> u32 {
        self.qpn
    }

    fn state(&self) -> QpState {
        self.pd
            .ctx
            .lock()
            .qps
            .get(&self.qpn)
            .map(|q| q.state)
            .unwrap_or(QpState::Error)
    }

    fn modify_to_init(&self, attr: &QpInitTransition) -> Result<()> {
        self.modify(|e, qpn| {
            let qp = e.qps.get_mut(&qpn).ok_or_else(bad_state)?;
            if qp.state != QpState::Reset || attr.port != 1 {
                return Err(bad_state());
            }
            qp.access = attr.access;
            qp.state = QpState::Init;
            Ok(())
        })
    }

    fn modify_to_rtr(&self, attr: &QpRtrTransition) -> Result<()> {
        let Destination::Gid { dgid, .. } = attr.dest else {
            return Err(bad_state());
        };
        let (pid, instance) = decode_soft_gid(&dgid).ok_or_else(bad_state)?;
        self.modify(|e, qpn| {
            let (my_pid, my_inst) = (e.pid, e.instance);
            let qp = e.qps.get_mut(&qpn).ok_or_else(bad_state)?;
            if qp.state != QpState::Init || attr.port != 1 {
                return Err(bad_state());
            }
            let seg = shm::Segment::open(pid, instance, attr.dest_qp_num).map_err(|source| {
                VerbsError::Verb {
                    verb: "ibv_modify_qp",
                    source,
                }
            })?;
            seg.claim(my_pid, my_inst, qpn).map_err(|source| VerbsError::Verb {
                verb: "ibv_modify_qp",
                source,
            })?;
            qp.outbound = Some(seg);
            qp.remote = Some((pid, instance, attr.dest_qp_num));
            qp.max_dest_rd_atomic = attr.max_dest_rd_atomic;
            qp.state = QpState::Rtr;
            tracing::debug!(target: "verbs", qpn, pid, instance, dest = attr.dest_qp_num, "soft: QP connected");
            Ok(())
        })
    }

    fn modify_to_rts(&self, _attr: &QpRtsTransition) -> Result<()> {
        self.modify(|e, qpn| {
            let qp = e.qps.get_mut(&qpn).ok_or_else(bad_state)?;
            if qp.state != QpState::Rtr {
                return Err(bad_state());
            }
            qp.state = QpState::Rts;
            Ok(())
        })
    }

    fn modify_to_error(&self) -> Result<()> {
        self.modify(|e, qpn| {
            let qp = e.qps.get_mut(&qpn).ok_or_else(bad_state)?;
            qp.state = QpState::Error;
            // The peer's requests to this QP will never be answered: its
            // outstanding work fails as after exhausted RC retries (the
            // peer's liveness check sees the ring closed).
            qp.inbound.mark_closed();
            e.flush_errors(qpn);
            Ok(())
        })
    }

    unsafe fn post_send(&self, wr: &SendWr<'_>) -> Result<()> {
        let signaled = wr.flags.contains(SendFlags::SIGNALED);
        let inline = match wr.opcode {
            SendOpcode::Send | SendOpcode::SendWithImm(_)
                if wr.flags.contains(SendFlags::INLINE) =>
            {
                // SAFETY: this function's contract: the SGEs describe
                // readable memory; inline data need not be registered.
                Some(unsafe { mem::gather_unregistered(wr.sg_list) })
            }
            _ => None,
        };
        let mut e = self.pd.ctx.lock();
        match wr.opcode {
            SendOpcode::Send => {
                e.post_send_msg(self.qpn, wr.wr_id, wr.sg_list, None, signaled, inline)
            }
            SendOpcode::SendWithImm(imm) => {
                e.post_send_msg(self.qpn, wr.wr_id, wr.sg_list, Some(imm), signaled, inline)
            }
            SendOpcode::RdmaWrite { remote_addr, rkey } => e.post_rdma(
                self.qpn,
                wr.wr_id,
                wr.sg_list,
                remote_addr,
                rkey,
                false,
                signaled,
            ),
            SendOpcode::RdmaRead { remote_addr, rkey } => e.post_rdma(
                self.qpn,
                wr.wr_id,
                wr.sg_list,
                remote_addr,
                rkey,
                true,
                signaled,
            ),
            SendOpcode::AtomicFetchAdd {
                remote_addr,
                rkey,
                add,
            } => e.post_atomic(
                self.qpn,
                wr.wr_id,
                wr.sg_list,
                remote_addr,
                rkey,
                AtomicOp::FetchAdd(add),
                signaled,
            ),
            SendOpcode::AtomicCmpSwap {
                remote_addr,
                rkey,
                compare,
                swap,
            } => e.post_atomic(
                self.qpn,
                wr.wr_id,
                wr.sg_list,
                remote_addr,
                rkey,
                AtomicOp::CmpSwap(compare, swap),
                signaled,
            ),
        }
    }

    unsafe fn post_recv(&self, wr: &RecvWr<'_>) -> Result<()> {
        self.pd.ctx.lock().post_recv(self.qpn, wr.wr_id, wr.sg_list)
    }
}
