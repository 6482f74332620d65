//! The provider-neutral verbs interface.
//!
//! # Design
//! One family trait, [`Provider`], names the concrete object types of a
//! provider (libibverbs in [`crate::ibv`], the soft NIC in [`crate::soft`]);
//! the object traits ([`Context`], [`ProtectionDomain`], [`MemoryRegion`],
//! [`CompletionQueue`], [`QueuePair`], [`SharedReceiveQueue`]) carry the verbs.
//! btl-openib is written once, generic over `P: Provider`, and monomorphised
//! for each provider (no dynamic dispatch on the hot path).
//!
//! # Ownership (rust-ibverbs style)
//! Every object keeps its parent alive (an `Arc` to the parent's inner
//! state): a QP keeps its PD, CQs and SRQ alive, a PD keeps its context, so
//! objects may be dropped in any order. Objects are cheap to clone handles
//! only where documented; otherwise they are unique. `Drop` never panics: a
//! failed destroy is logged (target `verbs`) and leaked.
//!
//! # Safety contract of posting
//! Posting a buffer hands it to the NIC, which reads or writes it after the
//! call returns. Posting functions are therefore `unsafe`: the caller
//! promises that every SGE lies inside a live memory region registered on the
//! same PD with its lkey, and that the memory is neither freed nor accessed
//! (written, for buffers the NIC reads; read or written, for buffers the NIC
//! writes) until the completion that returns it has been polled — for a
//! rendezvous *send*, until the FIN arrived (the remote NIC reads the buffer
//! after the send completion).
//!
//! # Addressing
//! A QP is reached by (port GID or LID, QP number), exchanged out of band
//! (the modex). `PortAttr::link_layer == Ethernet` -> use [`Destination::Gid`]
//! with a RoCE v2 GID table entry; InfiniBand -> [`Destination::Lid`].

pub mod buffer;
pub mod error;
pub mod types;
pub mod wire;

pub use buffer::RegisteredBuffer;
pub use error::{Result, VerbsError};
pub use types::*;

/// A verbs provider: a family of object types plus device discovery.
pub trait Provider: Send + Sync + Sized + 'static {
    /// Opened device.
    type Context: Context<Self>;
    /// Protection domain.
    type Pd: ProtectionDomain<Self>;
    /// Registered memory region.
    type Mr: MemoryRegion;
    /// Extended completion queue.
    type Cq: CompletionQueue;
    /// Reliable-connected queue pair.
    type Qp: QueuePair;
    /// Shared receive queue (basic or tag matching).
    type Srq: SharedReceiveQueue;

    /// Short provider name (`"ibv"`, `"soft"`).
    fn name(&self) -> &'static str;
    /// Lists the devices (`ibv_get_device_list`).
    fn devices(&self) -> Result<Vec<DeviceInfo>>;
    /// Opens a device by name (`ibv_open_device`).
    fn open(&self, device: &str) -> Result<Self::Context>;
}

/// An opened device (`struct ibv_context`).
pub trait Context<P: Provider>: Send + Sync {
    /// The device's name.
    fn device_name(&self) -> &str;
    /// `ibv_query_device_ex`, including `tm_caps`.
    fn query_device_ex(&self) -> Result<DeviceAttr>;
    /// `ibv_query_port` (ports are 1-based).
    fn query_port(&self, port: u8) -> Result<PortAttr>;
    /// `ibv_query_gid_table`: the valid entries of every port.
    fn query_gid_table(&self) -> Result<Vec<GidEntry>>;
    /// `ibv_alloc_pd`.
    fn alloc_pd(&self) -> Result<P::Pd>;
    /// `ibv_create_cq_ex` (polled with start/next/end_poll by the provider).
    fn create_cq_ex(&self, attr: &CqInitAttr) -> Result<P::Cq>;
}

/// QP creation attributes (`ibv_create_qp` for `IBV_QPT_RC`).
pub struct QpInitAttr<'a, P: Provider> {
    /// CQ of send-side completions (sends, RDMA read/write).
    pub send_cq: &'a P::Cq,
    /// CQ of receive completions (receive queue or basic SRQ).
    pub recv_cq: &'a P::Cq,
    /// Attach to this SRQ instead of having a receive queue. With a TM-SRQ,
    /// the QP's incoming tagged messages are matched by the SRQ and its
    /// receive-side completions go to the SRQ's CQ.
    pub srq: Option<&'a P::Srq>,
    /// Capacities.
    pub cap: QpCap,
    /// Signal every send (`sq_sig_all`).
    pub sq_sig_all: bool,
}

/// A protection domain (`struct ibv_pd`).
pub trait ProtectionDomain<P: Provider>: Send + Sync {
    /// `ibv_reg_mr`.
    ///
    /// # Safety
    /// `addr..addr+len` must stay valid (allocated, not unmapped) for the
    /// whole life of the returned region; the device may read it when
    /// `REMOTE_READ` is granted and write it when `LOCAL_WRITE` /
    /// `REMOTE_WRITE` is granted, at any time while the region lives and the
    /// key is known to a peer.
    unsafe fn reg_mr(&self, addr: *mut u8, len: usize, access: AccessFlags) -> Result<P::Mr>;
    /// `ibv_create_qp` of an RC QP, in state RESET.
    fn create_qp(&self, attr: &QpInitAttr<'_, P>) -> Result<P::Qp>;
    /// `ibv_create_srq_ex`: basic (`tm == None`, completions go to the
    /// attached QPs' recv CQs) or tag matching (`IBV_SRQT_TM`; all its
    /// completions — list operations, matched, unexpected, NO_TAG — go to
    /// `cq`, which must exist for a TM-SRQ).
    fn create_srq_ex(&self, attr: &SrqAttr, cq: Option<&P::Cq>) -> Result<P::Srq>;
}

/// A registered memory region (`struct ibv_mr`).
pub trait MemoryRegion: Send + Sync {
    /// Start address.
    fn addr(&self) -> u64;
    /// Length in bytes.
    fn len(&self) -> usize;
    /// True for a zero-length region.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Local key (for SGEs).
    fn lkey(&self) -> u32;
    /// Remote key (for peers' RDMA and the RVH).
    fn rkey(&self) -> u32;
    /// Access rights.
    fn access(&self) -> AccessFlags;
    /// An SGE covering `offset..offset+len` of the region.
    fn sge(&self, offset: usize, len: u32) -> Sge {
        Sge {
            addr: self.addr() + offset as u64,
            length: len,
            lkey: self.lkey(),
        }
    }
}

/// An extended completion queue (`struct ibv_cq_ex`).
pub trait CompletionQueue: Send + Sync {
    /// Polls up to `out.len()` completions (one `start_poll`/`next_poll`*/
    /// `end_poll` cycle); returns how many were written. Completions come out
    /// in the order the device produced them. On the soft NIC, polling also
    /// drives the device (see [`crate::soft`]).
    ///
    /// Errors: [`VerbsError::CqOverrun`] once completions were lost.
    fn poll(&self, out: &mut [WorkCompletion]) -> Result<usize>;
    /// Capacity the CQ was created with.
    fn capacity(&self) -> u32;
}

/// A reliable-connected queue pair (`struct ibv_qp`).
pub trait QueuePair: Send + Sync {
    /// The QP number, to send to the peer.
    fn qp_num(&self) -> u32;
    /// The state the device reports (`ibv_query_qp` on libibverbs, a system
    /// call there): it includes transitions the NIC made on its own, e.g. to
    /// `Error` after a work request failed at either end of the connection.
    fn state(&self) -> QpState;
    /// RESET -> INIT.
    fn modify_to_init(&self, attr: &QpInitTransition) -> Result<()>;
    /// INIT -> RTR: connects to the remote QP.
    fn modify_to_rtr(&self, attr: &QpRtrTransition) -> Result<()>;
    /// RTR -> RTS.
    fn modify_to_rts(&self, attr: &QpRtsTransition) -> Result<()>;
    /// Any state -> ERROR: outstanding work requests complete with
    /// `WrFlushErr`.
    fn modify_to_error(&self) -> Result<()>;
    /// `ibv_post_send` of one work request.
    ///
    /// # Safety
    /// See the module's safety contract: the SGEs' memory belongs to the NIC
    /// until the completion (or, for a rendezvous send, the FIN) arrives.
    unsafe fn post_send(&self, wr: &SendWr<'_>) -> Result<()>;
    /// `ibv_post_recv` of one work request (QPs without SRQ).
    ///
    /// # Safety
    /// As for [`QueuePair::post_send`]; the NIC writes the buffers.
    unsafe fn post_recv(&self, wr: &RecvWr<'_>) -> Result<()>;
}

/// A shared receive queue, basic or tag matching (`struct ibv_srq`).
pub trait SharedReceiveQueue: Send + Sync {
    /// SRQ number.
    fn srq_num(&self) -> u32;
    /// The TM capacities when this is a TM-SRQ.
    fn tm(&self) -> Option<SrqTmAttr>;
    /// `ibv_post_srq_recv` of one untagged buffer.
    ///
    /// # Safety
    /// As for [`QueuePair::post_recv`].
    unsafe fn post_srq_recv(&self, wr: &RecvWr<'_>) -> Result<()>;
    /// `ibv_post_srq_ops`: executes `ops` in order; ADDs get their handle
    /// written into [`OpsWr::handle`]. Stops at the first failing operation
    /// ([`VerbsError::Post`] with its index; `ENOMEM` = list full or
    /// `max_ops` operations outstanding, `EINVAL` = bad handle/SGE,
    /// `EOPNOTSUPP` = not a TM-SRQ).
    ///
    /// An operation occupies one of `max_ops` slots from posting until a
    /// completion of it, or of a later operation, has been polled: signal
    /// regularly.
    ///
    /// # Safety
    /// For ADD: as for [`QueuePair::post_recv`]; the buffer belongs to the
    /// NIC until its `TM_RECV` completion (with `DATA_VALID`, or an error) or
    /// the successful `TM_DEL` completion was polled.
    unsafe fn post_srq_ops(&self, ops: &mut [OpsWr<'_>]) -> Result<()>;
}
