//! One btl-openib module: one active port of one RDMA device.
//!
//! # Resources
//! - one PD, one extended CQ (sends, RDMA reads, receives and — with tag
//!   matching — every TM completion), one SRQ: a TM-SRQ when tag matching is
//!   on, a basic SRQ otherwise;
//! - one RC QP per peer rank, attached to the SRQ (so the eager messages and
//!   RTS of one peer arrive through one ordered path, DESIGN.md §3
//!   invariant 8);
//! - a slab of untagged receive buffers (`srq_max` slots of
//!   `eager_limit + 32` bytes; `srq_size` posted at start, the posted count
//!   doubles up to `srq_max` whenever fewer than a quarter remain posted
//!   after a progress call), and a slab of `send_queue` send bounce buffers;
//! - a [`RegCache`] for user buffers (rendezvous sends, RDMA read targets,
//!   tagged receive buffers).
//!
//! # Flow control
//! Every untagged buffer is reposted as soon as the message in it was
//! consumed (the [`RecvFrag`] dropped), and the pool grows under load, so a
//! sender finds a buffer; RNR retries (`btl_openib_rnr_retry`, infinite by
//! default) are the last resort when a receiver stops polling. Sends are
//! bounded by `send_queue` outstanding signalled work requests per module
//! (which also bounds the CQ): beyond, a send returns
//! [`OpenibError::Busy`] and the caller retries after progress. The CQ is
//! sized for `srq_max + send_queue + 2·tags + ops` completions, more than
//! can be outstanding at once, so it cannot overrun.
//!
//! # Messages (TMH/RVH layouts in `tmpi_verbs::wire`)
//! - eager: `TMH(EAGER, app_ctx, tag) | payload`, one RC send;
//! - rendezvous request (RTS): `TMH(RNDV) | RVH(va, rkey, len) | inline`;
//!   the sender keeps the region registered (pinned in the cache) until the
//!   FIN arrives;
//! - FIN: `TMH(FIN) | RVH` of the request, sent by the receiver's NIC (TM
//!   match) or by [`Module::send_fin`] (software match). A FIN whose RVH
//!   length is [`FIN_ERROR_LEN`] reports that the receiver failed to read:
//!   the send fails instead of waiting forever;
//! - generic fragment: `TMH(NO_TAG) | bytes` (the pml's own headers), never
//!   matched by a NIC.
//!
//! # wr_id encoding
//! The top 8 bits say what a completion belongs to (`K_*`), the low 56 bits
//! a slot, a table key or the caller's receive id (which must therefore be
//! below 2^56).

use std::collections::HashMap;
use std::sync::Arc;

use tmpi_verbs::wire::{Rvh, TagHeader, Tmh, TmhOpcode, RVH_LEN, TMH_LEN};
use tmpi_verbs::{
    AccessFlags, AtomicCap, CompletionQueue, Context, CqInitAttr, Destination, Gid, GidType,
    LinkLayer, MemoryRegion, Mtu, OpsWr, PortAttr, PortState, ProtectionDomain, Provider, QpCap,
    QpInitAttr, QpInitTransition, QpRtrTransition, QpRtsTransition, QpState, QueuePair, RecvWr,
    SendFlags, SendOpcode, SendWr, SharedReceiveQueue, SrqAttr, SrqTmAttr, TmCaps, TmInfo, WcFlags,
    WcOpcode, WcStatus, WorkCompletion,
};

use crate::addr::ModuleAddr;
use crate::buf::{parse_fin, parse_header, RecvFrag, Slab};
use crate::config::OpenibConfig;
use crate::error::{OpenibError, Result};
use crate::rcache::{RcacheStats, Reg, RegCache};

/// RVH length of a FIN that reports a failed rendezvous read.
pub const FIN_ERROR_LEN: u32 = u32::MAX;
/// Largest rendezvous message (the RVH length is 32 bits; `u32::MAX` is
/// reserved for [`FIN_ERROR_LEN`]).
pub const MAX_RNDV_LEN: usize = (u32::MAX - 1) as usize;
/// Largest receive id of [`Module::tm_post_recv`].
pub const MAX_RECV_ID: u64 = (1 << 56) - 1;

const K_RECV: u64 = 1;
const K_SEND: u64 = 2;
const K_GET: u64 = 3;
const K_TM_ADD: u64 = 4;
const K_TM_DEL: u64 = 5;
const K_TM_SYNC: u64 = 6;
const K_TAGGED: u64 = 7;
const LOW: u64 = MAX_RECV_ID;

/// How often progress queries the QP state of peers with pending
/// rendezvous sends (see `Module::check_rendezvous_peers`).
const QP_STATE_CHECK: std::time::Duration = std::time::Duration::from_millis(100);

fn wr(kind: u64, low: u64) -> u64 {
    (kind << 56) | (low & LOW)
}

/// Which operation an [`Event::Failed`] concerns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// An eager send, generic fragment or FIN.
    Send,
    /// A rendezvous send (RTS delivery, or the receiver's read).
    Rndv,
    /// An RDMA read issued by [`Module::get`].
    Get,
    /// A tagged receive buffer posted with TAG_ADD.
    TaggedRecv,
}

/// Tag-matching completions (the offload interface's events).
#[derive(Debug)]
pub enum TmEvent {
    /// A TAG_ADD executed; `sync_req`: the NIC's and software's unexpected
    /// counts differ — match the unexpected messages already delivered, then
    /// call [`Module::tm_sync`].
    Added {
        /// The receive.
        recv_id: u64,
        /// `IBV_WC_TM_SYNC_REQ`.
        sync_req: bool,
    },
    /// A message matched the tagged buffer (the NIC's first completion of
    /// it, in matching order). `complete`: a single-packet eager message is
    /// in place and the receive is done; otherwise [`TmEvent::DataValid`],
    /// [`TmEvent::RndvIncomplete`] (with `after_match`) or an
    /// [`Event::Failed`] follows.
    Matched {
        /// The receive.
        recv_id: u64,
        /// Sender's world rank when the completion names its QP, else
        /// `u32::MAX` (mlx5's first completion of a multi-packet message is
        /// a no-packet CQE whose QP number is not documented: take the
        /// sender from the tag).
        peer: u32,
        /// The message's TMH tag.
        tag: u64,
        /// The message's app_ctx.
        app_ctx: u32,
        /// Bytes in the buffer (single-packet eager: payload length).
        byte_len: u32,
        /// Data valid with the match.
        complete: bool,
    },
    /// The data of a [`TmEvent::Matched`] `{ complete: false }` receive is in
    /// its buffer: the rest of an eager message (`byte_len` bytes of
    /// payload), or a rendezvous the NIC read (`byte_len` bytes) and
    /// answered with a FIN. The receive is done.
    DataValid {
        /// The receive.
        recv_id: u64,
        /// Bytes placed.
        byte_len: u32,
    },
    /// The tagged buffer was smaller than the rendezvous: the tag was
    /// consumed, software must finish (e.g. report truncation, or
    /// [`Module::get`] part of it, then [`Module::send_fin`]).
    RndvIncomplete {
        /// The receive.
        recv_id: u64,
        /// The request's TMH (from the match completion).
        tmh: Tmh,
        /// The request's RVH (read back from the buffer).
        rvh: Option<Rvh>,
        /// A [`TmEvent::Matched`] `{ complete: false }` came first.
        after_match: bool,
    },
    /// A TAG_DEL removed the buffer: it is the caller's again.
    Deleted {
        /// The receive.
        recv_id: u64,
    },
    /// A TAG_DEL lost the race (`IBV_WC_TM_ERR`): the buffer was matched;
    /// its match completion settles the receive.
    DelConsumed {
        /// The receive.
        recv_id: u64,
    },
    /// A TAG_SYNC executed.
    Synced,
}

/// What [`Module::progress`] reports.
#[derive(Debug)]
pub enum Event {
    /// An untagged message (see [`RecvFrag`]).
    Recv(RecvFrag),
    /// A rendezvous send finished: its FIN arrived and the buffer was
    /// released.
    RndvDone {
        /// The caller's id of the send.
        id: u64,
        /// The peer.
        peer: u32,
    },
    /// An RDMA read of [`Module::get`] finished.
    GetDone {
        /// The caller's id.
        id: u64,
        /// The peer.
        peer: u32,
    },
    /// An operation failed; `error` says why (also logged).
    Failed {
        /// The caller's id (receive id for [`Op::TaggedRecv`]).
        id: u64,
        /// The peer (`u32::MAX` when unknown).
        peer: u32,
        /// The operation.
        op: Op,
        /// Why.
        error: OpenibError,
    },
    /// A tag-matching completion.
    Tm(TmEvent),
}

/// Counters of a module.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ModuleStats {
    /// Untagged buffers currently posted.
    pub recv_posted: u32,
    /// Current posting target (grows up to `srq_max`).
    pub recv_target: u32,
    /// Times the posted pool was grown.
    pub recv_grows: u32,
    /// Untagged messages received.
    pub recv_msgs: u64,
    /// Unexpected (unmatched tagged) messages counted for TM sync.
    pub unexpected: u32,
    /// Signalled send work requests outstanding.
    pub send_outstanding: u32,
    /// Registration cache.
    pub rcache: RcacheStats,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PeerState {
    Init,
    Connected,
    Failed,
}

struct Peer<P: Provider> {
    qp: P::Qp,
    state: PeerState,
    /// Peer's TM `max_rndv_hdr_size` (0 = software matching there).
    rndv_hdr: u32,
    /// Peer's port `max_msg_sz` (0 until connected).
    max_msg_sz: u32,
}

#[derive(Debug, Clone, Copy)]
enum SendWhat {
    Eager,
    Frag,
    Fin,
    Rts,
}

#[derive(Debug, Clone, Copy)]
struct SendSlot {
    id: u64,
    peer: u32,
    what: SendWhat,
}

type RndvKey = (u32, u64, u32);

struct RndvSend<P: Provider> {
    id: u64,
    /// The pinned source buffer (`None` only for fault-injected requests).
    _reg: Option<Reg<P>>,
}

struct GetOp<P: Provider> {
    id: u64,
    peer: u32,
    chunks_left: u32,
    failed: Option<WcStatus>,
    /// "RDMA read", "RDMA write" or "atomic" (for the error message).
    what: &'static str,
    /// The registration of the local buffer, pinned until the completion;
    /// `None` for a write from a send-buffer slot.
    _reg: Option<Reg<P>>,
    /// The send-buffer slot a small write reads, given back at its
    /// completion.
    slot: Option<u32>,
}

struct Tagged<P: Provider> {
    reg: Reg<P>,
    /// The tag information of the first completion with MATCH.
    matched: Option<TmInfo>,
    /// That completion said RNDV_INCOMPLETE: software finishes the
    /// rendezvous once DATA_VALID arrives.
    sw_rndv: bool,
}

/// One port of one device, generic over the verbs provider.
pub struct Module<P: Provider> {
    // Field order = drop order: QPs first, then the SRQ, buffers, CQ, PD.
    /// One QP per rank; this rank's slot, when the device has atomics, is
    /// the initiating half of the loopback pair ([`Module::atomic`] on
    /// this process's own memory).
    peers: Vec<Option<Peer<P>>>,
    /// The responding half of the loopback pair.
    loop_target: Option<P::Qp>,
    srq: P::Srq,
    recv_mr: P::Mr,
    send_mr: P::Mr,
    rcache: RegCache<P>,
    rndv: HashMap<RndvKey, RndvSend<P>>,
    /// When the QPs of peers with pending rendezvous sends were last
    /// queried ([`QP_STATE_CHECK`]).
    last_qp_check: std::time::Instant,
    gets: HashMap<u64, GetOp<P>>,
    tagged: HashMap<u64, Tagged<P>>,
    cq: P::Cq,
    pd: P::Pd,
    ctx: P::Context,
    recv_slab: Arc<Slab>,
    send_slab: Arc<Slab>,
    recv_free: Vec<u32>,
    send_free: Vec<u32>,
    send_slots: Vec<Option<SendSlot>>,
    qp_rank: HashMap<u32, u32>,
    cfg: OpenibConfig,
    device: String,
    port: u8,
    port_attr: PortAttr,
    gid: Gid,
    gid_index: u8,
    psn: u32,
    me: u32,
    /// Responder resources of our QPs (`max_dest_rd_atomic`): the device's
    /// `max_qp_rd_atom`, at most 16.
    rd_atom: u8,
    /// Initiator depth of our QPs (`max_rd_atomic`): the device's
    /// `max_qp_init_rd_atom`, at most 16 (a larger value fails RTR->RTS).
    init_rd_atom: u8,
    /// The device has atomics (`atomic_cap` not `None`, responder
    /// resources for them) and QPs and windows grant `REMOTE_ATOMIC`.
    atomics: bool,
    max_chunk: u64,
    tm: Option<TmCaps>,
    tm_ops_out: u32,
    tm_max_ops: u32,
    sw_unexpected: u32,
    next_get: u64,
    stats: ModuleStats,
    wcs: Vec<WorkCompletion>,
    returned: Vec<u32>,
}

/// An RC QP of the module in the INIT state: completions on `cq`,
/// receives from `srq`, `send_wr` send-queue entries, one SGE per request,
/// `access` granted to peers.
fn rc_qp<P: Provider>(
    pd: &P::Pd,
    cq: &P::Cq,
    srq: &P::Srq,
    send_wr: u32,
    port: u8,
    access: AccessFlags,
) -> Result<P::Qp> {
    let qp = pd.create_qp(&QpInitAttr {
        send_cq: cq,
        recv_cq: cq,
        srq: Some(srq),
        cap: QpCap {
            max_send_wr: send_wr,
            max_recv_wr: 1,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        },
        sq_sig_all: false,
    })?;
    qp.modify_to_init(&QpInitTransition {
        port,
        pkey_index: 0,
        access,
    })?;
    Ok(qp)
}

/// Chooses the GID of a port: the configured index, else on Ethernet a
/// RoCE v2 entry, IPv4-mapped (`::ffff:a.b.c.d`) preferred, else any RoCE v2
/// entry, else the first entry; on InfiniBand index 0.
pub fn choose_gid(
    table: &[tmpi_verbs::GidEntry],
    port: u8,
    link: LinkLayer,
    forced: Option<u32>,
) -> Result<(Gid, u8)> {
    let mine: Vec<_> = table.iter().filter(|e| e.port == port).collect();
    if let Some(ix) = forced {
        return mine
            .iter()
            .find(|e| e.index == ix)
            .map(|e| (e.gid, e.index as u8))
            .ok_or_else(|| {
                OpenibError::Config(format!(
                    "btl_openib_gid_index={ix}: port {port} has no valid GID at that index"
                ))
            });
    }
    if link != LinkLayer::Ethernet {
        return Ok(mine
            .iter()
            .find(|e| e.index == 0)
            .map(|e| (e.gid, 0))
            .unwrap_or_default());
    }
    let v4 = |g: &Gid| g.0[..10] == [0; 10] && g.0[10..12] == [0xff, 0xff];
    let pick = mine
        .iter()
        .filter(|e| e.gid_type == GidType::RoceV2 && index_ok(e.index))
        .max_by_key(|e| (v4(&e.gid), std::cmp::Reverse(e.index)))
        .or_else(|| mine.iter().find(|e| index_ok(e.index)));
    pick.map(|e| (e.gid, e.index as u8)).ok_or_else(|| {
        OpenibError::Unavailable(format!("port {port} has no usable GID (RoCE needs one)"))
    })
}

fn index_ok(i: u32) -> bool {
    i <= u32::from(u8::MAX)
}

fn rd_atom(v: u32) -> u8 {
    v.clamp(1, 16) as u8
}

impl<P: Provider> Module<P> {
    /// Opens `device:port` for a job of `size` ranks in which this process
    /// is `me`: creates the resources and one QP (in INIT) per other rank.
    /// An inactive port, or a RoCE port without GID, is
    /// [`OpenibError::Unavailable`].
    pub fn open(
        provider: &P,
        device: &str,
        port: u8,
        cfg: &OpenibConfig,
        me: u32,
        size: u32,
    ) -> Result<Self> {
        cfg.validate()?;
        if me >= size {
            return Err(OpenibError::InvalidArgument(format!(
                "rank {me} in a job of {size}"
            )));
        }
        let ctx = provider.open(device)?;
        let dattr = ctx.query_device_ex()?;
        let port_attr = ctx.query_port(port)?;
        if port_attr.state != PortState::Active {
            return Err(OpenibError::Unavailable(format!(
                "{device}:{port} is not active ({:?})",
                port_attr.state
            )));
        }
        let (gid, gid_index) = choose_gid(
            &ctx.query_gid_table()?,
            port,
            port_attr.link_layer,
            cfg.gid_index,
        )?;
        let caps = dattr.tm_caps;
        let want_tm = match cfg.tm_enable {
            tmpi_base::mca::Tristate::Auto => caps.supported(),
            tmpi_base::mca::Tristate::On => {
                if !caps.supported() {
                    tracing::warn!(target: "btl_openib",
                        "btl_openib_tm_enable=1 but {device} has no hardware tag matching (max_num_tags={}); falling back to software matching",
                        caps.max_num_tags);
                }
                caps.supported()
            }
            tmpi_base::mca::Tristate::Off => false,
        };
        let pd = ctx.alloc_pd()?;
        let tm_tags = cfg.tm_max_tags.min(caps.max_num_tags);
        let tm_ops = tm_list_ops(tm_tags, caps.max_ops, dattr.max_qp_wr);
        let npeers = size.saturating_sub(1);
        // Up to 3 completions per posted tag (UCX's rule: match, data, and
        // the ADD's own), one per list operation, one per untagged buffer.
        let cqe =
            cfg.srq_max + cfg.send_queue + if want_tm { 3 * tm_tags + tm_ops } else { 0 } + 64;
        let cqe = cqe.min(dattr.max_cqe.max(1));
        let mut cq = ctx.create_cq_ex(&CqInitAttr {
            cqe,
            with_tm_info: want_tm,
        });
        let mut tm = want_tm;
        if want_tm && cq.as_ref().is_err_and(|e| e.is_unsupported()) {
            tracing::warn!(target: "btl_openib", "{device}: CQ with TM info unsupported; software matching");
            tm = false;
            cq = ctx.create_cq_ex(&CqInitAttr {
                cqe,
                with_tm_info: false,
            });
        }
        let cq = cq?;
        let mut srq_max = cfg.srq_max.min(dattr.max_srq_wr.max(16));
        if tm {
            // mlx5 and UCX keep at least 33 untagged buffers on a TM-SRQ.
            srq_max = srq_max.max(TM_MIN_UNTAGGED);
        }
        let mut srq = None;
        if tm {
            match pd.create_srq_ex(
                &SrqAttr {
                    max_wr: srq_max,
                    max_sge: 1,
                    tm: Some(SrqTmAttr {
                        max_num_tags: tm_tags,
                        max_ops: tm_ops,
                    }),
                },
                Some(&cq),
            ) {
                Ok(s) => srq = Some(s),
                Err(e) => {
                    tracing::warn!(target: "btl_openib", "{device}: creating the TM-SRQ failed ({e}); software matching");
                    tm = false;
                }
            }
        }
        let srq = match srq {
            Some(s) => s,
            None => pd.create_srq_ex(
                &SrqAttr {
                    max_wr: srq_max,
                    max_sge: 1,
                    tm: None,
                },
                None,
            )?,
        };
        // Room for TMH+RVH and for an upper-layer header of up to 64 bytes in
        // front of an eager-limit payload (generic fragments).
        let slot = cfg.eager_limit + TMH_LEN + RVH_LEN + 64;
        if slot as u64 > u64::from(port_attr.max_msg_sz) {
            return Err(OpenibError::Config(format!(
                "btl_openib_eager_limit={} needs {slot}-byte messages, more than {device}:{port} carries ({})",
                cfg.eager_limit, port_attr.max_msg_sz
            )));
        }
        let recv_slab = Slab::new(slot, srq_max)?;
        // SAFETY: the slab lives at least as long as the region (the module
        // holds an `Arc` and drops `recv_mr` first, see the field order).
        let recv_mr = unsafe {
            pd.reg_mr(
                recv_slab.base(),
                recv_slab.bytes(),
                AccessFlags::LOCAL_WRITE,
            )
        }?;
        let send_slab = Slab::new(slot, cfg.send_queue)?;
        // SAFETY: as above.
        let send_mr =
            unsafe { pd.reg_mr(send_slab.base(), send_slab.bytes(), AccessFlags::empty()) }?;
        let rd = rd_atom(dattr.max_qp_rd_atom);
        let init_rd = rd_atom(dattr.max_qp_init_rd_atom);
        let atomics = dattr.atomic_cap != AtomicCap::None && rd > 0;
        let mut qp_access =
            AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ | AccessFlags::REMOTE_WRITE;
        if atomics {
            qp_access |= AccessFlags::REMOTE_ATOMIC;
        }
        let mut peers = Vec::with_capacity(size as usize);
        let mut qp_rank = HashMap::new();
        for r in 0..size {
            if r == me {
                peers.push(None);
                continue;
            }
            // REMOTE_WRITE and REMOTE_ATOMIC: one-sided windows
            // (`register_window`); memory regions still decide what a peer
            // may write.
            let send_wr = cfg.send_queue.min(dattr.max_qp_wr.max(1));
            let qp = rc_qp::<P>(&pd, &cq, &srq, send_wr, port, qp_access)?;
            qp_rank.insert(qp.qp_num(), r);
            peers.push(Some(Peer {
                qp,
                state: PeerState::Init,
                rndv_hdr: 0,
                max_msg_sz: 0,
            }));
        }
        let psn = initial_psn(me);
        let max_chunk = u64::from(port_attr.max_msg_sz.max(4096)).min(1 << 30);
        let mut m = Module {
            peers,
            loop_target: None,
            srq,
            recv_mr,
            send_mr,
            rcache: RegCache::new(cfg.rcache_max_entries, cfg.rcache_max_bytes),
            rndv: HashMap::new(),
            last_qp_check: std::time::Instant::now(),
            gets: HashMap::new(),
            tagged: HashMap::new(),
            cq,
            pd,
            ctx,
            recv_free: (0..srq_max).rev().collect(),
            send_free: (0..cfg.send_queue).rev().collect(),
            send_slots: vec![None; cfg.send_queue as usize],
            recv_slab,
            send_slab,
            qp_rank,
            cfg: OpenibConfig {
                srq_max,
                ..cfg.clone()
            },
            device: device.to_owned(),
            port,
            port_attr,
            gid,
            gid_index,
            psn,
            me,
            rd_atom: rd,
            init_rd_atom: init_rd,
            atomics,
            max_chunk,
            // What the TM-SRQ was created with, not the device's maximum:
            // the NIC refuses ADDs past the created list (ENOMEM).
            tm: tm.then_some(TmCaps {
                max_num_tags: tm_tags,
                max_ops: tm_ops,
                ..caps
            }),
            tm_ops_out: 0,
            tm_max_ops: tm_ops,
            sw_unexpected: 0,
            next_get: 0,
            stats: ModuleStats {
                recv_target: if tm {
                    cfg.srq_size.clamp(TM_MIN_UNTAGGED, srq_max)
                } else {
                    cfg.srq_size.min(srq_max)
                },
                ..Default::default()
            },
            wcs: vec![WorkCompletion::default(); 64],
            returned: Vec::new(),
        };
        m.replenish()?;
        if atomics {
            if let Err(e) = m.open_loopback(dattr.max_qp_wr) {
                tracing::warn!(target: "btl_openib",
                    "{device}: connecting the loopback QPs failed ({e}); no NIC atomics on this module");
                m.atomics = false;
            }
        }
        tracing::info!(target: "btl_openib",
            "module {device}:{port}: {:?} link, MTU {}, GID index {gid_index}, tag matching {}, {npeers} peers",
            port_attr.link_layer, port_attr.active_mtu.bytes(),
            if tm { "offloaded" } else { "in software" });
        Ok(m)
    }

    /// The address to publish in the modex.
    pub fn address(&self) -> ModuleAddr {
        ModuleAddr {
            device: self.device.clone(),
            port: self.port,
            link: self.port_attr.link_layer,
            mtu: self.port_attr.active_mtu,
            lid: self.port_attr.lid,
            gid: self.gid,
            psn: self.psn,
            tm_rndv_hdr: self.tm.map_or(0, |c| c.max_rndv_hdr_size),
            max_msg_sz: self.port_attr.max_msg_sz,
            qpns: self
                .peers
                .iter()
                .map(|p| p.as_ref().map_or(0, |p| p.qp.qp_num()))
                .collect(),
        }
    }

    /// Connects the QP of `rank` to the peer module `remote` (its QP for
    /// our rank). Fails with [`OpenibError::Unreachable`] when the link
    /// layers differ or the peer has no QP for us.
    pub fn connect(&mut self, rank: u32, remote: &ModuleAddr) -> Result<()> {
        let me = self.me;
        let local_link = self.port_attr.link_layer;
        if (remote.link == LinkLayer::Ethernet) != (local_link == LinkLayer::Ethernet) {
            return Err(OpenibError::Unreachable(rank));
        }
        let dest_qp = remote.qpns.get(me as usize).copied().unwrap_or(0);
        if dest_qp == 0 || rank == me {
            return Err(OpenibError::Unreachable(rank));
        }
        let Some(Some(peer)) = self.peers.get(rank as usize) else {
            return Err(OpenibError::Unreachable(rank));
        };
        let mtu = self.bring_up(&peer.qp, dest_qp, remote)?;
        let Some(Some(peer)) = self.peers.get_mut(rank as usize) else {
            return Err(OpenibError::Unreachable(rank));
        };
        peer.state = PeerState::Connected;
        peer.rndv_hdr = remote.tm_rndv_hdr;
        peer.max_msg_sz = remote.max_msg_sz;
        tracing::debug!(target: "btl_openib", rank, qpn = peer.qp.qp_num(), dest_qp, ?mtu, "connected");
        Ok(())
    }

    /// Moves `qp` through RTR (to `dest_qp` of the module `remote`) and
    /// RTS; the path MTU chosen.
    fn bring_up(&self, qp: &P::Qp, dest_qp: u32, remote: &ModuleAddr) -> Result<Mtu> {
        let dest = if self.port_attr.link_layer == LinkLayer::Ethernet {
            Destination::Gid {
                dgid: remote.gid,
                sgid_index: self.gid_index,
                hop_limit: 64,
                traffic_class: 0,
                flow_label: 0,
            }
        } else {
            Destination::Lid(remote.lid)
        };
        let mtu: Mtu = self.port_attr.active_mtu.min(remote.mtu);
        qp.modify_to_rtr(&QpRtrTransition {
            dest_qp_num: dest_qp,
            dest,
            sl: 0,
            port: self.port,
            path_mtu: mtu,
            rq_psn: remote.psn,
            max_dest_rd_atomic: self.rd_atom,
            min_rnr_timer: 12,
        })?;
        qp.modify_to_rts(&QpRtsTransition {
            sq_psn: self.psn,
            timeout: self.cfg.timeout,
            retry_cnt: self.cfg.retry_count,
            rnr_retry: self.cfg.rnr_retry,
            max_rd_atomic: self.init_rd_atom,
        })?;
        Ok(mtu)
    }

    /// Creates and connects the loopback pair: two QPs of this module
    /// connected to each other (what works on every provider, rxe and the
    /// soft NIC included), the first in this rank's peer slot. Atomics on
    /// this process's own window memory go through it, so that they are
    /// atomic with the peers' (`IBV_ATOMIC_HCA`: atomic among the
    /// device's own atomics only).
    fn open_loopback(&mut self, max_qp_wr: u32) -> Result<()> {
        let access = AccessFlags::LOCAL_WRITE
            | AccessFlags::REMOTE_READ
            | AccessFlags::REMOTE_WRITE
            | AccessFlags::REMOTE_ATOMIC;
        let send_wr = self.cfg.send_queue.min(max_qp_wr.max(1));
        let make = |m: &Self| rc_qp::<P>(&m.pd, &m.cq, &m.srq, send_wr, m.port, access);
        let (a, b) = (make(self)?, make(self)?);
        let own = self.address();
        self.bring_up(&a, b.qp_num(), &own)?;
        self.bring_up(&b, a.qp_num(), &own)?;
        let me = self.me;
        self.qp_rank.insert(a.qp_num(), me);
        self.qp_rank.insert(b.qp_num(), me);
        tracing::debug!(target: "btl_openib", qpn = a.qp_num(), dest_qp = b.qp_num(), "loopback connected");
        if let Some(slot) = self.peers.get_mut(me as usize) {
            *slot = Some(Peer {
                qp: a,
                state: PeerState::Connected,
                rndv_hdr: 0,
                max_msg_sz: self.port_attr.max_msg_sz,
            });
        }
        self.loop_target = Some(b);
        Ok(())
    }

    /// Whether [`Module::atomic`] works (to peers and to this process).
    pub fn atomics(&self) -> bool {
        self.atomics
    }

    /// Whether `rank` is connected (and not failed).
    pub fn reachable(&self, rank: u32) -> bool {
        rank != self.me
            && matches!(self.peers.get(rank as usize), Some(Some(p)) if p.state == PeerState::Connected)
    }

    /// Device name.
    pub fn device(&self) -> &str {
        &self.device
    }
    /// Port number.
    pub fn port(&self) -> u8 {
        self.port
    }
    /// Largest eager payload.
    pub fn eager_limit(&self) -> usize {
        self.cfg.eager_limit
    }
    /// Largest RDMA read or write ([`Module::get`], [`Module::put`]) that
    /// fits an idle send queue: its chunks of the port's `max_msg_sz` take
    /// at most half the queue's entries.
    pub fn max_rdma_len(&self) -> usize {
        let chunks = u64::from((self.cfg.send_queue / 2).max(1));
        (self.max_chunk * chunks).min(1 << 30) as usize
    }
    /// Largest generic fragment (`hdr + data` of [`Module::send_frag`]).
    pub fn max_frag(&self) -> usize {
        self.send_slab.slot_size().min(self.recv_slab.slot_size()) - TMH_LEN
    }
    /// Largest inline data of an RTS to `rank` (bounded by the peer's
    /// `max_rndv_hdr_size` when it offloads tag matching, so its NIC can
    /// match the request).
    pub fn max_rts_inline(&self, rank: u32) -> usize {
        match self.peers.get(rank as usize) {
            Some(Some(p)) if p.rndv_hdr > 0 => {
                (p.rndv_hdr as usize).saturating_sub(TMH_LEN + RVH_LEN)
            }
            _ => self.cfg.eager_limit,
        }
    }
    /// The tag-matching capabilities in use (`None` = software matching).
    pub fn tm_caps(&self) -> Option<TmCaps> {
        self.tm
    }
    /// Counters.
    pub fn stats(&self) -> ModuleStats {
        ModuleStats {
            unexpected: self.sw_unexpected,
            rcache: self.rcache.stats(),
            ..self.stats
        }
    }
    /// The shared receive queue (diagnostics, and the soft NIC's
    /// deterministic hold/release controls in tests).
    pub fn srq(&self) -> &P::Srq {
        &self.srq
    }
    /// The device context (e.g. to query it).
    pub fn context(&self) -> &P::Context {
        &self.ctx
    }

    /// The connection to `rank` for sends and RDMA (not this rank: its
    /// slot is the loopback, for atomics only, [`Module::atomic_peer`]).
    fn peer(&self, rank: u32) -> Result<&Peer<P>> {
        if rank == self.me {
            return Err(OpenibError::Unreachable(rank));
        }
        self.atomic_peer(rank)
    }

    /// The connection to `rank` for atomics: this rank's own memory
    /// through the loopback pair.
    fn atomic_peer(&self, rank: u32) -> Result<&Peer<P>> {
        match self.peers.get(rank as usize) {
            Some(Some(p)) => match p.state {
                PeerState::Connected => Ok(p),
                PeerState::Failed => Err(OpenibError::PeerFailed(rank)),
                PeerState::Init => Err(OpenibError::Unreachable(rank)),
            },
            _ => Err(OpenibError::Unreachable(rank)),
        }
    }
}

mod progress;
mod send;
mod tm_list;

/// Untagged receive buffers a TM-SRQ keeps posted at least (mlx5 and UCX:
/// `UCT_IB_MLX5_XRQ_MIN_UWQ_POST`).
pub const TM_MIN_UNTAGGED: u32 = 33;

/// The `max_ops` to create a TM-SRQ with: what a list of `tags` entries
/// needs (UCX: `2 * tags + 2`, an ADD and a DEL per entry in flight), no more
/// than the device reports, and no more than mlx5's command QP can hold. That
/// QP is created with `max_send_wr = max_ops` and each of its work requests
/// takes 4 send-queue basic blocks (rdma-core `providers/mlx5/verbs.c`:
/// `create_cmd_qp`, `mlx5_calc_sq_size`), so creation fails with EINVAL once
/// `roundup_pow2(4 * max_ops)` exceeds the device's send-queue size
/// (`max_qp_wr`), which is also what the device reports as `max_ops`.
pub fn tm_list_ops(tags: u32, dev_max_ops: u32, max_qp_wr: u32) -> u32 {
    let want = tags.saturating_mul(2).saturating_add(2);
    let sq_room = if max_qp_wr == 0 {
        u32::MAX
    } else {
        // The largest power of two not above max_qp_wr, in basic blocks.
        (1u32 << (31 - max_qp_wr.leading_zeros())) / 4
    };
    want.min(dev_max_ops).min(sq_room).max(1)
}

/// Reads the RVH the NIC left in a too-small tagged buffer.
fn read_rvh<P: Provider>(reg: &Reg<P>) -> Option<Rvh> {
    if reg.len() < (TMH_LEN + RVH_LEN) as u64 {
        return None;
    }
    let bytes = crate::buf::read_user(reg.addr(), TMH_LEN + RVH_LEN);
    TagHeader::parse(&bytes).ok().and_then(|h| h.rvh)
}

/// A 24-bit initial PSN, different per process and start.
fn initial_psn(me: u32) -> u32 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    (t ^ std::process::id().rotate_left(8) ^ me.rotate_left(16)) & 0x00ff_ffff
}

#[cfg(test)]
mod tests {
    use super::*;
    use tmpi_verbs::GidEntry;

    fn e(index: u32, port: u8, gid_type: GidType, v4: bool) -> GidEntry {
        let mut g = [0u8; 16];
        if v4 {
            g[10] = 0xff;
            g[11] = 0xff;
            g[12..].copy_from_slice(&[10, 0, 0, index as u8]);
        } else {
            g[0] = 0xfe;
            g[1] = 0x80;
            g[15] = index as u8;
        }
        GidEntry {
            gid: Gid(g),
            index,
            port,
            gid_type,
        }
    }

    #[test]
    fn gid_choice() {
        use GidType::*;
        let t = vec![
            e(0, 1, RoceV1, false),
            e(1, 1, RoceV2, false),
            e(2, 1, RoceV1, true),
            e(3, 1, RoceV2, true),
            e(4, 1, RoceV2, true),
            e(0, 2, RoceV2, true),
        ];
        let eth = LinkLayer::Ethernet;
        // RoCE v2 + IPv4-mapped, lowest index among equals.
        assert_eq!(choose_gid(&t, 1, eth, None).unwrap().1, 3);
        // Without an IPv4-mapped v2 entry: the v2 link-local one.
        assert_eq!(choose_gid(&t[..3], 1, eth, None).unwrap().1, 1);
        // Without any v2 entry: the first entry.
        assert_eq!(choose_gid(&t[..1], 1, eth, None).unwrap().1, 0);
        // Port filter.
        assert_eq!(choose_gid(&t, 2, eth, None).unwrap().1, 0);
        // Override, and a missing override index is a config error.
        assert_eq!(choose_gid(&t, 1, eth, Some(2)).unwrap().1, 2);
        assert!(matches!(
            choose_gid(&t, 1, eth, Some(9)),
            Err(OpenibError::Config(_))
        ));
        // RoCE without any GID: unusable port.
        assert!(matches!(
            choose_gid(&[], 1, eth, None),
            Err(OpenibError::Unavailable(_))
        ));
        // InfiniBand: index 0 (LID addressing).
        assert_eq!(choose_gid(&t, 1, LinkLayer::Infiniband, None).unwrap().1, 0);
    }
}
