//! Plain data types of the verbs interface: attributes, work requests,
//! completions. They mirror libibverbs closely (names in each doc) so the
//! libibverbs provider converts field by field, and the soft NIC produces the
//! same values.

use std::fmt;

macro_rules! flags {
    ($(#[$m:meta])* $name:ident : $t:ty { $($(#[$fm:meta])* $f:ident = $v:expr;)* }) => {
        $(#[$m])*
        #[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
        pub struct $name(pub $t);
        impl $name {
            $($(#[$fm])* pub const $f: $name = $name($v);)*
            /// No flag set.
            pub const fn empty() -> Self { $name(0) }
            /// True when every flag of `other` is set in `self`.
            pub const fn contains(self, other: Self) -> bool { self.0 & other.0 == other.0 }
            /// Raw bits.
            pub const fn bits(self) -> $t { self.0 }
        }
        impl std::ops::BitOr for $name {
            type Output = Self;
            fn bitor(self, o: Self) -> Self { $name(self.0 | o.0) }
        }
        impl std::ops::BitOrAssign for $name {
            fn bitor_assign(&mut self, o: Self) { self.0 |= o.0 }
        }
        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                let mut first = true;
                write!(f, "{}(", stringify!($name))?;
                $(if self.0 & $v != 0 && self.contains($name($v)) {
                    if !first { write!(f, "|")?; }
                    first = false;
                    write!(f, "{}", stringify!($f))?;
                })*
                let _ = first;
                write!(f, ")")
            }
        }
    };
}

flags! {
    /// Memory access rights (`enum ibv_access_flags`, same bit values).
    AccessFlags: u32 {
        /// `IBV_ACCESS_LOCAL_WRITE`: the NIC may write (receives, RDMA read targets).
        LOCAL_WRITE = 1;
        /// `IBV_ACCESS_REMOTE_WRITE`.
        REMOTE_WRITE = 2;
        /// `IBV_ACCESS_REMOTE_READ`.
        REMOTE_READ = 4;
        /// `IBV_ACCESS_REMOTE_ATOMIC`.
        REMOTE_ATOMIC = 8;
    }
}

flags! {
    /// Send flags (`enum ibv_send_flags`, same bit values).
    SendFlags: u32 {
        /// `IBV_SEND_FENCE`.
        FENCE = 1;
        /// `IBV_SEND_SIGNALED`: generate a completion on success.
        SIGNALED = 2;
        /// `IBV_SEND_SOLICITED`.
        SOLICITED = 4;
        /// `IBV_SEND_INLINE`: data copied at post time, lkey ignored.
        INLINE = 8;
    }
}

flags! {
    /// Completion flags (`enum ibv_wc_flags`, same bit values).
    WcFlags: u32 {
        /// `IBV_WC_GRH`.
        GRH = 1;
        /// `IBV_WC_WITH_IMM`.
        WITH_IMM = 2;
        /// `IBV_WC_TM_SYNC_REQ`: the NIC's and software's unexpected counts differ.
        TM_SYNC_REQ = 1 << 4;
        /// `IBV_WC_TM_MATCH`: the message matched a tagged buffer.
        TM_MATCH = 1 << 5;
        /// `IBV_WC_TM_DATA_VALID`: the data of a matched message is in place.
        TM_DATA_VALID = 1 << 6;
    }
}

flags! {
    /// Flags of a tag-list operation (`enum ibv_ops_flags`, same bit values).
    OpsFlags: u32 {
        /// `IBV_OPS_SIGNALED`: generate a completion for this operation.
        SIGNALED = 1;
        /// `IBV_OPS_TM_SYNC`: the operation carries `unexpected_cnt`.
        TM_SYNC = 2;
    }
}

/// A 128-bit GID.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Gid(pub [u8; 16]);

impl fmt::Debug for Gid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, c) in self.0.chunks(2).enumerate() {
            if i > 0 {
                write!(f, ":")?;
            }
            write!(f, "{:02x}{:02x}", c[0], c[1])?;
        }
        Ok(())
    }
}

impl Gid {
    /// True when all bytes are zero (an unused GID table slot).
    pub fn is_zero(&self) -> bool {
        self.0 == [0; 16]
    }
}

/// What a GID table entry is (`enum ibv_gid_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GidType {
    /// InfiniBand / RoCE v1 GID (`IBV_GID_TYPE_IB`).
    Ib,
    /// RoCE v1.
    RoceV1,
    /// RoCE v2 (UDP/IP encapsulated): use these for routable RoCE.
    RoceV2,
}

/// One GID table entry (`struct ibv_gid_entry`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GidEntry {
    /// The GID.
    pub gid: Gid,
    /// Index in the port's table (the `sgid_index` of an address vector).
    pub index: u32,
    /// Port number.
    pub port: u8,
    /// Entry type.
    pub gid_type: GidType,
}

/// Tag-matching capabilities (`struct ibv_tm_caps`). A device without
/// hardware tag matching reports `max_num_tags == 0` (rxe, siw, most NICs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TmCaps {
    /// Largest rendezvous request (TMH|RVH|data) the NIC handles.
    pub max_rndv_hdr_size: u32,
    /// Tag list capacity; 0 = no tag matching.
    pub max_num_tags: u32,
    /// `IBV_TM_CAP_RC`: tag matching on RC QPs.
    pub rc: bool,
    /// Maximum outstanding tag-list operations.
    pub max_ops: u32,
    /// SGEs per tagged buffer.
    pub max_sge: u32,
}

impl TmCaps {
    /// True when the device can do tag matching on RC QPs.
    pub fn supported(&self) -> bool {
        self.max_num_tags > 0 && self.rc
    }
}

/// Atomicity guarantee of a device's atomic operations (`enum ibv_atomic_cap`).
///
/// `Hca` (what mlx5 and rxe report, and the soft NIC): an atomic is atomic
/// only with respect to other atomics through the *same* device; CPU loads,
/// stores and atomic instructions, and RDMA writes, on the same location are
/// not ordered or excluded against it. Users of this API must therefore never
/// mix CPU atomics (or plain CPU stores, or RDMA writes) with NIC atomics on
/// one 8-byte location while NIC atomics on it may be in flight; a location
/// updated with NIC atomics is updated *only* with NIC atomics (the owner
/// included, through a loopback QP).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AtomicCap {
    /// `IBV_ATOMIC_NONE`: no atomic operations.
    #[default]
    None,
    /// `IBV_ATOMIC_HCA`: atomic among the operations of this device only.
    Hca,
    /// `IBV_ATOMIC_GLOB`: atomic also with respect to CPUs and other devices.
    Glob,
}

/// Device attributes (`struct ibv_device_attr_ex`, the fields tmpi uses).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DeviceAttr {
    /// Firmware version string.
    pub fw_ver: String,
    /// Node GUID.
    pub node_guid: u64,
    /// Vendor id.
    pub vendor_id: u32,
    /// Vendor part id.
    pub vendor_part_id: u32,
    /// Largest registrable region.
    pub max_mr_size: u64,
    /// Maximum QPs.
    pub max_qp: u32,
    /// Maximum work requests per queue.
    pub max_qp_wr: u32,
    /// Maximum SGEs per work request.
    pub max_sge: u32,
    /// Maximum CQs.
    pub max_cq: u32,
    /// Maximum entries per CQ.
    pub max_cqe: u32,
    /// Maximum MRs.
    pub max_mr: u32,
    /// Maximum PDs.
    pub max_pd: u32,
    /// Maximum outstanding RDMA reads/atomics per QP as target
    /// (`max_dest_rd_atomic` at INIT->RTR may not exceed it).
    pub max_qp_rd_atom: u32,
    /// Maximum outstanding RDMA reads/atomics per QP as initiator
    /// (`max_rd_atomic` at RTR->RTS may not exceed it).
    pub max_qp_init_rd_atom: u32,
    /// Atomicity of `IBV_WR_ATOMIC_*` (`atomic_cap`).
    pub atomic_cap: AtomicCap,
    /// Maximum SRQs.
    pub max_srq: u32,
    /// Maximum work requests per SRQ.
    pub max_srq_wr: u32,
    /// Maximum SGEs per SRQ work request.
    pub max_srq_sge: u32,
    /// Number of physical ports.
    pub phys_port_cnt: u8,
    /// Tag-matching capabilities (`tm_caps`).
    pub tm_caps: TmCaps,
}

/// Port state (`enum ibv_port_state`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PortState {
    /// `IBV_PORT_DOWN`.
    Down,
    /// `IBV_PORT_INIT`.
    Init,
    /// `IBV_PORT_ARMED`.
    Armed,
    /// `IBV_PORT_ACTIVE`: usable.
    Active,
    /// Any other value.
    Other(u32),
}

/// Link layer of a port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkLayer {
    /// InfiniBand: address peers by LID.
    Infiniband,
    /// Ethernet (RoCE): address peers by GID.
    Ethernet,
    /// Unspecified (treated as InfiniBand by libibverbs).
    Unspecified,
}

/// Path MTU (`enum ibv_mtu`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Mtu {
    /// 256 bytes.
    Mtu256 = 1,
    /// 512 bytes.
    Mtu512 = 2,
    /// 1024 bytes.
    Mtu1024 = 3,
    /// 2048 bytes.
    Mtu2048 = 4,
    /// 4096 bytes.
    Mtu4096 = 5,
}

impl Mtu {
    /// Size in bytes.
    pub fn bytes(self) -> u32 {
        128 << (self as u32)
    }
}

/// Port attributes (`struct ibv_port_attr`, the fields tmpi uses).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PortAttr {
    /// Port state.
    pub state: PortState,
    /// Largest MTU.
    pub max_mtu: Mtu,
    /// Active MTU.
    pub active_mtu: Mtu,
    /// Base LID (InfiniBand).
    pub lid: u16,
    /// Subnet manager LID.
    pub sm_lid: u16,
    /// Link layer.
    pub link_layer: LinkLayer,
    /// GID table length.
    pub gid_tbl_len: u32,
    /// Largest message.
    pub max_msg_sz: u32,
}

/// Attributes of an extended CQ (`ibv_create_cq_ex`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CqInitAttr {
    /// Minimum number of entries.
    pub cqe: u32,
    /// Ask for `IBV_WC_EX_WITH_TM_INFO` (needed on a TM-SRQ's CQ). A provider
    /// without TM may refuse it with an "unsupported" error.
    pub with_tm_info: bool,
}

/// QP capacities (`struct ibv_qp_cap`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpCap {
    /// Send queue depth.
    pub max_send_wr: u32,
    /// Receive queue depth (ignored with an SRQ).
    pub max_recv_wr: u32,
    /// SGEs per send.
    pub max_send_sge: u32,
    /// SGEs per receive.
    pub max_recv_sge: u32,
    /// Inline data bytes.
    pub max_inline_data: u32,
}

impl Default for QpCap {
    fn default() -> Self {
        QpCap {
            max_send_wr: 128,
            max_recv_wr: 128,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        }
    }
}

/// QP states (`enum ibv_qp_state`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QpState {
    /// Created, not yet initialised.
    Reset,
    /// `IBV_QPS_INIT`: receives may be posted.
    Init,
    /// `IBV_QPS_RTR`: ready to receive.
    Rtr,
    /// `IBV_QPS_RTS`: ready to send.
    Rts,
    /// `IBV_QPS_ERR`: outstanding and new work requests complete with a
    /// flush error.
    Error,
}

/// RESET -> INIT attributes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpInitTransition {
    /// Port number (1-based).
    pub port: u8,
    /// P_Key index.
    pub pkey_index: u16,
    /// Rights granted to the remote side (`qp_access_flags`).
    pub access: AccessFlags,
}

/// How to reach the remote port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Destination {
    /// InfiniBand: by LID.
    Lid(u16),
    /// RoCE (v2 when the source GID is a RoCE v2 entry) or routed IB: by GID.
    Gid {
        /// Remote GID.
        dgid: Gid,
        /// Local GID table index to send from.
        sgid_index: u8,
        /// IP TTL / hop limit.
        hop_limit: u8,
        /// Traffic class.
        traffic_class: u8,
        /// Flow label.
        flow_label: u32,
    },
}

/// INIT -> RTR attributes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpRtrTransition {
    /// Remote QP number (exchanged out of band, e.g. through the modex).
    pub dest_qp_num: u32,
    /// Remote address.
    pub dest: Destination,
    /// Service level.
    pub sl: u8,
    /// Local port.
    pub port: u8,
    /// Path MTU.
    pub path_mtu: Mtu,
    /// Expected first PSN from the remote side (its `sq_psn`).
    pub rq_psn: u32,
    /// RDMA reads/atomics the remote side may have outstanding to us.
    pub max_dest_rd_atomic: u8,
    /// RNR NAK timer code.
    pub min_rnr_timer: u8,
}

/// RTR -> RTS attributes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpRtsTransition {
    /// First PSN we send.
    pub sq_psn: u32,
    /// Local ACK timeout code.
    pub timeout: u8,
    /// Transport retries.
    pub retry_cnt: u8,
    /// RNR retries (7 = infinite).
    pub rnr_retry: u8,
    /// RDMA reads/atomics we may have outstanding.
    pub max_rd_atomic: u8,
}

/// One scatter/gather element (`struct ibv_sge`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Sge {
    /// Start address (inside a region registered on the same PD).
    pub addr: u64,
    /// Length in bytes.
    pub length: u32,
    /// Local key of that region.
    pub lkey: u32,
}

/// What a send work request does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendOpcode {
    /// `IBV_WR_SEND`. A *tagged* send (eager, rendezvous request, FIN,
    /// NO_TAG) is an ordinary send whose first bytes are the TMH (and RVH),
    /// see [`crate::wire`]: only the receiver needs TM hardware.
    Send,
    /// `IBV_WR_SEND_WITH_IMM`.
    SendWithImm(u32),
    /// `IBV_WR_RDMA_WRITE` to `remote_addr` of the region with `rkey`.
    RdmaWrite {
        /// Remote address.
        remote_addr: u64,
        /// Remote key.
        rkey: u32,
    },
    /// `IBV_WR_RDMA_READ` from `remote_addr` of the region with `rkey`.
    RdmaRead {
        /// Remote address.
        remote_addr: u64,
        /// Remote key.
        rkey: u32,
    },
    /// `IBV_WR_ATOMIC_FETCH_AND_ADD`: adds `add` (modulo 2^64) to the
    /// 64-bit value at `remote_addr` and writes the value before the add into
    /// the work request's local buffer: exactly 8 bytes (one SGE of length 8
    /// with `LOCAL_WRITE`). `remote_addr` must be 8-byte aligned and the region
    /// must grant `REMOTE_ATOMIC` (see docs/verbs.md "Atomic operations").
    AtomicFetchAdd {
        /// Remote address (8-byte aligned).
        remote_addr: u64,
        /// Remote key.
        rkey: u32,
        /// Value added.
        add: u64,
    },
    /// `IBV_WR_ATOMIC_CMP_AND_SWP`: if the 64-bit value at `remote_addr`
    /// equals `compare`, replaces it with `swap`; the value found is written
    /// into the local 8-byte buffer either way (success = old == compare).
    AtomicCmpSwap {
        /// Remote address (8-byte aligned).
        remote_addr: u64,
        /// Remote key.
        rkey: u32,
        /// Expected value.
        compare: u64,
        /// New value.
        swap: u64,
    },
}

impl SendOpcode {
    /// True for the two atomic operations.
    pub fn is_atomic(&self) -> bool {
        matches!(
            self,
            SendOpcode::AtomicFetchAdd { .. } | SendOpcode::AtomicCmpSwap { .. }
        )
    }
}

/// A send-queue work request (`struct ibv_send_wr`).
#[derive(Debug, Clone, Copy)]
pub struct SendWr<'a> {
    /// Caller's identifier, returned in the completion.
    pub wr_id: u64,
    /// Local buffers (gathered for sends and writes, scattered for reads;
    /// for atomics one 8-byte buffer that receives the old value).
    pub sg_list: &'a [Sge],
    /// Operation.
    pub opcode: SendOpcode,
    /// Flags.
    pub flags: SendFlags,
}

/// A receive work request (`struct ibv_recv_wr`).
#[derive(Debug, Clone, Copy)]
pub struct RecvWr<'a> {
    /// Caller's identifier.
    pub wr_id: u64,
    /// Buffers to scatter the message into.
    pub sg_list: &'a [Sge],
}

/// Tag-list operation kind (`enum ibv_ops_wr_opcode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpsOpcode {
    /// `IBV_WR_TAG_ADD`: append a tagged buffer; the handle is returned in
    /// [`OpsWr::handle`].
    TagAdd,
    /// `IBV_WR_TAG_DEL`: remove the entry named by [`OpsWr::handle`].
    TagDel,
    /// `IBV_WR_TAG_SYNC`: only report `unexpected_cnt`.
    TagSync,
}

/// A tag-list operation (`struct ibv_ops_wr`).
#[derive(Debug, Clone, Copy)]
pub struct OpsWr<'a> {
    /// Identifier of the operation's own completion (`TM_ADD`/`TM_DEL`/`TM_SYNC`).
    pub wr_id: u64,
    /// Operation.
    pub opcode: OpsOpcode,
    /// `SIGNALED` and/or `TM_SYNC`.
    pub flags: OpsFlags,
    /// Software's count of processed unexpected messages (used with `TM_SYNC`;
    /// compared modulo 2^16).
    pub unexpected_cnt: u32,
    /// DEL: the entry to remove. ADD: written by the provider on success.
    pub handle: u32,
    /// ADD: identifier of the tagged buffer's completions (`TM_RECV`).
    pub recv_wr_id: u64,
    /// ADD: the tagged buffer (providers may accept only one SGE, see
    /// [`TmCaps::max_sge`]).
    pub sg_list: &'a [Sge],
    /// ADD: tag, compared as `msg.tag & mask == tag & mask`.
    pub tag: u64,
    /// ADD: mask.
    pub mask: u64,
}

impl<'a> OpsWr<'a> {
    /// An ADD of `sg_list` for `tag`/`mask`.
    pub fn add(wr_id: u64, recv_wr_id: u64, sg_list: &'a [Sge], tag: u64, mask: u64) -> Self {
        OpsWr {
            wr_id,
            opcode: OpsOpcode::TagAdd,
            flags: OpsFlags::SIGNALED,
            unexpected_cnt: 0,
            handle: 0,
            recv_wr_id,
            sg_list,
            tag,
            mask,
        }
    }
    /// A DEL of `handle`.
    pub fn del(wr_id: u64, handle: u32) -> Self {
        OpsWr {
            wr_id,
            opcode: OpsOpcode::TagDel,
            flags: OpsFlags::SIGNALED,
            unexpected_cnt: 0,
            handle,
            recv_wr_id: 0,
            sg_list: &[],
            tag: 0,
            mask: 0,
        }
    }
    /// A SYNC reporting `unexpected_cnt`.
    pub fn sync(wr_id: u64, unexpected_cnt: u32) -> Self {
        OpsWr {
            wr_id,
            opcode: OpsOpcode::TagSync,
            flags: OpsFlags::SIGNALED | OpsFlags::TM_SYNC,
            unexpected_cnt,
            handle: 0,
            recv_wr_id: 0,
            sg_list: &[],
            tag: 0,
            mask: 0,
        }
    }
    /// Sets `TM_SYNC` and the count it carries.
    pub fn with_sync(mut self, unexpected_cnt: u32) -> Self {
        self.flags |= OpsFlags::TM_SYNC;
        self.unexpected_cnt = unexpected_cnt;
        self
    }
    /// Replaces the flags.
    pub fn with_flags(mut self, flags: OpsFlags) -> Self {
        self.flags = flags;
        self
    }
}

/// SRQ attributes (`ibv_create_srq_ex`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SrqAttr {
    /// Untagged receive buffers the SRQ can hold.
    pub max_wr: u32,
    /// SGEs per receive.
    pub max_sge: u32,
    /// Tag matching (`IBV_SRQT_TM`) when `Some`.
    pub tm: Option<SrqTmAttr>,
}

/// TM part of the SRQ attributes (`tm_cap`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SrqTmAttr {
    /// Tag list capacity (≤ the device's `max_num_tags`).
    pub max_num_tags: u32,
    /// Outstanding list operations (≤ the device's `max_ops`).
    pub max_ops: u32,
}

/// Completion status (`enum ibv_wc_status`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WcStatus {
    /// `IBV_WC_SUCCESS`.
    #[default]
    Success,
    /// `IBV_WC_LOC_LEN_ERR`: the message did not fit the receive buffer.
    LocLenErr,
    /// `IBV_WC_LOC_QP_OP_ERR`.
    LocQpOpErr,
    /// `IBV_WC_LOC_PROT_ERR`: bad lkey or local buffer outside its region.
    LocProtErr,
    /// `IBV_WC_WR_FLUSH_ERR`: flushed because the QP is in error.
    WrFlushErr,
    /// `IBV_WC_REM_INV_REQ_ERR`.
    RemInvReqErr,
    /// `IBV_WC_REM_ACCESS_ERR`: bad rkey, out of bounds, or access not granted.
    RemAccessErr,
    /// `IBV_WC_REM_OP_ERR`.
    RemOpErr,
    /// `IBV_WC_RETRY_EXC_ERR`: the peer vanished.
    RetryExcErr,
    /// `IBV_WC_RNR_RETRY_EXC_ERR`.
    RnrRetryExcErr,
    /// `IBV_WC_GENERAL_ERR`.
    GeneralErr,
    /// `IBV_WC_TM_ERR`: e.g. DEL of an entry the NIC already consumed.
    TmErr,
    /// `IBV_WC_TM_RNDV_INCOMPLETE`: the tagged buffer was smaller than the
    /// rendezvous; TMH+RVH are in the buffer and software finishes the transfer.
    TmRndvIncomplete,
    /// Any other status (raw value).
    Other(u32),
}

/// Completion opcode (`enum ibv_wc_opcode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WcOpcode {
    /// `IBV_WC_SEND`.
    #[default]
    Send,
    /// `IBV_WC_RDMA_WRITE`.
    RdmaWrite,
    /// `IBV_WC_RDMA_READ`.
    RdmaRead,
    /// `IBV_WC_COMP_SWAP`: an `AtomicCmpSwap` finished; the old value is in
    /// the local buffer.
    CompSwap,
    /// `IBV_WC_FETCH_ADD`: an `AtomicFetchAdd` finished; the old value is in
    /// the local buffer.
    FetchAdd,
    /// `IBV_WC_RECV`.
    Recv,
    /// `IBV_WC_RECV_RDMA_WITH_IMM`.
    RecvRdmaWithImm,
    /// `IBV_WC_TM_ADD`.
    TmAdd,
    /// `IBV_WC_TM_DEL`.
    TmDel,
    /// `IBV_WC_TM_SYNC`.
    TmSync,
    /// `IBV_WC_TM_RECV`: a tagged message (matched, or unexpected).
    TmRecv,
    /// `IBV_WC_TM_NO_TAG`: a NO_TAG-class message (NO_TAG, FIN) in an untagged buffer.
    TmNoTag,
    /// Any other opcode (raw value).
    Other(u32),
}

/// `ibv_wc_read_tm_info`: the TMH's tag and app_ctx (`priv`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TmInfo {
    /// The message's tag.
    pub tag: u64,
    /// The message's app_ctx.
    pub priv_: u32,
}

/// One completion, as read with `ibv_start_poll`/`ibv_next_poll` and the
/// `ibv_wc_read_*` accessors. Fields a provider cannot report are zero/None.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct WorkCompletion {
    /// The work request's (or tagged buffer's `recv_wr_id`) identifier.
    pub wr_id: u64,
    /// Status.
    pub status: WcStatus,
    /// Opcode (valid also on error for the soft NIC; libibverbs leaves it
    /// undefined on error except for TM opcodes).
    pub opcode: WcOpcode,
    /// Flags.
    pub flags: WcFlags,
    /// Bytes received (receives), read (RDMA read data), 8 (atomics), or 0.
    pub byte_len: u32,
    /// Local QP number.
    pub qp_num: u32,
    /// Remote QP number (receives).
    pub src_qp: u32,
    /// Immediate data.
    pub imm_data: Option<u32>,
    /// `ibv_wc_read_tm_info` (present with `TM_MATCH`).
    pub tm_info: Option<TmInfo>,
    /// Vendor error code.
    pub vendor_err: u32,
}

/// A completion classified for a btl: the typed view of [`WorkCompletion`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Completion {
    /// A send (incl. tagged sends) was delivered.
    Send,
    /// An RDMA write finished.
    RdmaWrite,
    /// An RDMA read finished; the data is in the local buffers.
    RdmaRead,
    /// An atomic compare-and-swap finished; the old value is in the local buffer.
    CompSwap,
    /// An atomic fetch-and-add finished; the old value is in the local buffer.
    FetchAdd,
    /// A plain receive (non-TM SRQ or QP receive queue).
    Recv {
        /// Bytes received.
        byte_len: u32,
    },
    /// A TAG_ADD executed; `sync_req` asks software to resynchronise.
    TagAdded {
        /// `IBV_WC_TM_SYNC_REQ`.
        sync_req: bool,
    },
    /// A TAG_DEL removed its entry.
    TagDeleted,
    /// A TAG_DEL found the entry consumed (`IBV_WC_TM_ERR`): the receive
    /// completes through its match completion, the cancel fails.
    TagDelConsumed,
    /// A TAG_SYNC executed.
    TagSynced,
    /// A message matched a tagged buffer (`MATCH`); `data_valid` says the
    /// data is already there (eager), otherwise a `TagData` follows (rendezvous).
    TagMatched {
        /// TMH tag and app_ctx.
        info: TmInfo,
        /// `DATA_VALID` came with the match.
        data_valid: bool,
        /// Bytes in the tagged buffer.
        byte_len: u32,
    },
    /// The data of an earlier match landed (`DATA_VALID` alone).
    TagData {
        /// Bytes in the tagged buffer.
        byte_len: u32,
    },
    /// The tagged buffer was too small for the rendezvous (status
    /// `IBV_WC_TM_RNDV_INCOMPLETE`): software finishes the transfer. TMH+RVH
    /// are in the buffer once a completion with `DATA_VALID` was seen: mlx5
    /// also reports it as a `MATCH`-only completion followed by a `TagData`
    /// one, or as a plain match followed by a `Recv`-opcode completion with
    /// this status and no tag information (`info` is then zero). Read the
    /// raw flags to tell them apart.
    TagRndvIncomplete {
        /// TMH tag and app_ctx.
        info: TmInfo,
    },
    /// A tagged message that matched nothing: the whole message (headers
    /// included) is in an untagged buffer; counted as unexpected.
    Unexpected {
        /// Bytes in the untagged buffer.
        byte_len: u32,
    },
    /// A NO_TAG-class message (NO_TAG, FIN) in an untagged buffer; not counted.
    NoTag {
        /// Bytes in the untagged buffer.
        byte_len: u32,
    },
    /// A failed work request.
    Error {
        /// The status.
        status: WcStatus,
        /// The opcode.
        opcode: WcOpcode,
    },
}

impl WorkCompletion {
    /// Classifies the completion.
    pub fn kind(&self) -> Completion {
        let f = self.flags;
        match (self.status, self.opcode) {
            (WcStatus::TmErr, WcOpcode::TmDel) => Completion::TagDelConsumed,
            (WcStatus::TmRndvIncomplete, _) => Completion::TagRndvIncomplete {
                info: self.tm_info.unwrap_or_default(),
            },
            (WcStatus::Success, op) => match op {
                WcOpcode::Send => Completion::Send,
                WcOpcode::RdmaWrite => Completion::RdmaWrite,
                WcOpcode::RdmaRead => Completion::RdmaRead,
                WcOpcode::CompSwap => Completion::CompSwap,
                WcOpcode::FetchAdd => Completion::FetchAdd,
                WcOpcode::Recv | WcOpcode::RecvRdmaWithImm => Completion::Recv {
                    byte_len: self.byte_len,
                },
                WcOpcode::TmAdd => Completion::TagAdded {
                    sync_req: f.contains(WcFlags::TM_SYNC_REQ),
                },
                WcOpcode::TmDel => Completion::TagDeleted,
                WcOpcode::TmSync => Completion::TagSynced,
                WcOpcode::TmNoTag => Completion::NoTag {
                    byte_len: self.byte_len,
                },
                WcOpcode::TmRecv if f.contains(WcFlags::TM_MATCH) => Completion::TagMatched {
                    info: self.tm_info.unwrap_or_default(),
                    data_valid: f.contains(WcFlags::TM_DATA_VALID),
                    byte_len: self.byte_len,
                },
                WcOpcode::TmRecv if f.contains(WcFlags::TM_DATA_VALID) => Completion::TagData {
                    byte_len: self.byte_len,
                },
                WcOpcode::TmRecv => Completion::Unexpected {
                    byte_len: self.byte_len,
                },
                WcOpcode::Other(_) => Completion::Error {
                    status: self.status,
                    opcode: op,
                },
            },
            (status, opcode) => Completion::Error { status, opcode },
        }
    }
}

/// A device as listed by [`crate::Provider::devices`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceInfo {
    /// Device name (`mlx5_0`, `rxe0`, `tmsoft0`).
    pub name: String,
    /// Node GUID.
    pub guid: u64,
    /// True for software/test devices that must never be chosen unless
    /// named explicitly (the soft NIC).
    pub explicit_only: bool,
}
