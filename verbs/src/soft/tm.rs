//! The deterministic, I/O-free core of the soft NIC's tag matching
//! (reference/tag-matching.md §3, §4, §6), in quinn-proto style: inputs are
//! method calls ([`TmListModel::post_op`], [`TmListModel::post_untagged`],
//! [`TmListModel::message_arrived`], [`TmListModel::rndv_finished`],
//! [`TmListModel::completion_polled`]), outputs are pulled with
//! [`TmListModel::poll_action`]. The soft device's TM-SRQ is this model plus
//! the data movement; tests and tm-engine's differential test drive it
//! directly, without processes.
//!
//! # Semantics
//! - **List**: append-ordered; a message matches the first entry with
//!   `msg.tag & entry.mask == entry.tag & entry.mask` (tags are stored
//!   masked). Capacity `max_num_tags` *handles*: a handle is taken when the
//!   ADD is posted and freed only when the entry has left the list (matched
//!   or deleted) **and** every completion naming it has been polled
//!   (reported through [`TmListModel::completion_polled`]). Posting an ADD
//!   with no free handle fails with [`TmPostError::ListFull`] (`ENOMEM`).
//! - **Operation window**: at most `max_ops` operations outstanding; an
//!   operation is outstanding from posting until a completion of it or of a
//!   later operation has been polled (send-queue semantics: signal
//!   regularly). Otherwise [`TmPostError::TooManyOps`] (`ENOMEM`).
//! - **Counters**: `hw_cnt` (16 bits, wrapping) counts tagged messages
//!   (EAGER, RNDV) delivered unexpected. `sw_cnt` is the full `u32` set by
//!   every operation flagged `TM_SYNC`; the NIC compares only its low 16
//!   bits with `hw_cnt`. [`SyncMode::Global`] (default): while they differ
//!   no message is matched at all (it goes unexpected and counts).
//!   [`SyncMode::StaleEntries`]: only entries added while the counts
//!   differed are skipped, until an operation brings the counts together.
//! - **ADD** never fails for a stale count. ADD and DEL completions carry
//!   `TM_SYNC_REQ` when `u32::from(hw_cnt) != phase`, `phase` being the last
//!   count software passed with `TM_SYNC` when that entry's ADD was posted
//!   (mlx5's rule, rdma-core `qp.c`/`cq.c`: so past 65 535 every ADD/DEL
//!   completion carries it spuriously). Only signaled ADDs complete. **DEL**
//!   of an entry no longer in the list completes with `TM_ERR` (always,
//!   signaled or not). **SYNC** only updates `sw_cnt`; its completion never
//!   carries `TM_SYNC_REQ`.
//! - **Asynchronous**: nothing is executed inside [`TmListModel::post_op`];
//!   operations run at a later [`TmListModel::poll_action`].
//! - **Messages** (mlx5's CQE forms, rdma-core `providers/mlx5/cq.c`,
//!   `handle_tag_matching`): a *matched EAGER* message whose wire length
//!   (TMH + payload) fits the path MTU ([`TmNicParams::mtu`]) gives one
//!   `TM_RECV` with `MATCH|DATA_VALID`, the payload (after the TMH) scattered
//!   into the tagged buffer (too long -> status `LocLenErr`, truncated). A
//!   longer one gives two: first a *no-packet* `TM_RECV` with `MATCH` only
//!   (tag info present, `byte_len` 0, `qp_num`/`src_qp` 0: the QP of such a
//!   CQE is undocumented), then, later, `TM_RECV` with `DATA_VALID` only
//!   (no tag info, `byte_len` = payload, the QP numbers, `LocLenErr` if
//!   truncated); the payload is scattered just before the second.
//!   A *matched RNDV* (RVH len <= tagged buffer) gives the same no-packet
//!   `MATCH` CQE, then [`TmAction::RdmaRead`]; when the shell reports the
//!   read with [`TmListModel::rndv_finished`]: [`TmAction::SendFin`] to the
//!   sender and `TM_RECV` `DATA_VALID` (byte_len = RVH len, no tag info); a
//!   failed read gives that CQE with the read's status, `qp_num` 0 and no
//!   FIN. RVH len > [`TmNicParams::max_msg_sz`]: no read, the second CQE has
//!   status `LocLenErr`, no FIN. A *software rendezvous* (RVH len > tagged
//!   buffer: the tag is consumed, TMH+RVH are scattered) takes one of
//!   mlx5's three forms ([`SwRndvForm`]; by default each occurrence takes
//!   the next one): `Single` = one CQE `MATCH|DATA_VALID` with status
//!   `TmRndvIncomplete`; `MatchFirst` = `MATCH` with `TmRndvIncomplete`
//!   (tag not released), later `DATA_VALID` with `Success`; `Cancel` = the
//!   no-packet `MATCH` CQE, later a CQE with opcode `Recv` (not `TmRecv`),
//!   `MATCH|DATA_VALID`, status `TmRndvIncomplete`, no tag info. The wr_id
//!   of every tagged CQE is the entry's `recv_wr_id`; the tag info is only
//!   on a CQE with `MATCH` whose opcode is `TmRecv`. An RNDV request longer
//!   than `max_rndv_hdr_size` is not matched (delivered unexpected).
//!   Unmatched EAGER/RNDV -> whole message into the next untagged buffer,
//!   `TM_RECV` without `MATCH`/`DATA_VALID`, `hw_cnt += 1`; it carries
//!   `TM_SYNC_REQ` when (tagged messages delivered unexpected, 32-bit
//!   wrapping) minus (the last count software passed) exceeds `0x3fff`.
//!   NO_TAG, FIN and messages without a valid TMH -> untagged buffer,
//!   `TM_NO_TAG`, not counted. A message needing an untagged buffer when
//!   none is posted waits at the head of the arrival queue (RNR) and is
//!   re-matched when retried.
//! - **Second CQEs are delayed**: the second CQE of a two-CQE form is
//!   released only after the first was polled (reported through
//!   [`TmListModel::completion_polled`]) and only once every queued
//!   operation and arrival has executed, so it never comes out of the same
//!   CQ poll as the first and later matches and unexpected messages may
//!   come before it. [`TmListModel::hold_data`] keeps them until
//!   [`TmListModel::release_data`]. A handle stays taken until its last CQE
//!   was polled.
//! - **Order**: inputs execute in the order they were given (operations
//!   FIFO, arrivals FIFO, interleaved by input order); completions come out
//!   in execution order, so match and unexpected completions follow matching
//!   order.
//! - **Deterministic mode**: [`TmListModel::hold_ops`] /
//!   [`TmListModel::hold_arrivals`] keep inputs queued until the test calls
//!   [`TmListModel::release_op`] / [`TmListModel::release_arrival`], which
//!   reproduces every race of §4 exactly; [`TmListModel::hold_data`] /
//!   [`TmListModel::release_data`] do the same for second CQEs.
//! - **Link and NIC properties** ([`TmNicParams`]: MTU, `max_msg_sz`,
//!   software-rendezvous form) default to mlx5's ([`TmListModel::new`]);
//!   [`TmListModel::with_params`] takes others.

use std::collections::{HashMap, VecDeque};

use crate::api::wire::{Rvh, TagHeader, Tmh, TmhOpcode, TMH_LEN};
use crate::api::{TmInfo, WcFlags, WcOpcode, WcStatus, WorkCompletion};

/// Unexpected CQEs carry `TM_SYNC_REQ` once software's count lags by more
/// than this (rdma-core `providers/mlx5/mlx5.h`: `MLX5_TM_MAX_SYNC_DIFF`).
pub const MAX_SYNC_DIFF: u32 = 0x3fff;

/// Which reading of "no matching while the counts differ" the NIC follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SyncMode {
    /// No message is matched while `sw_cnt != hw_cnt` (UCX's reading; safe).
    #[default]
    Global,
    /// Only entries added while the counts differed are skipped.
    StaleEntries,
}

impl std::str::FromStr for SyncMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "global" => Ok(SyncMode::Global),
            "stale" => Ok(SyncMode::StaleEntries),
            other => Err(format!("sync mode {other:?}: expected global or stale")),
        }
    }
}

/// How the NIC reports a matched rendezvous it leaves to software (RVH len
/// larger than the tagged buffer). mlx5 has three CQE forms (rdma-core
/// `providers/mlx5/cq.c`, `handle_tag_matching`); software must handle all.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SwRndvForm {
    /// Each occurrence takes the next form: `Single`, `MatchFirst`,
    /// `Cancel`, `Single`, ... (so every run sees all three).
    #[default]
    Rotate,
    /// `CONSUMED_MSG_SW_RDNV`: one CQE `MATCH|DATA_VALID`, status
    /// `TmRndvIncomplete`.
    Single,
    /// `CONSUMED_SW_RDNV` then `EXPECTED`: `MATCH` with `TmRndvIncomplete`
    /// (tag not released), later `DATA_VALID` with `Success`.
    MatchFirst,
    /// `CONSUMED` then `MSG_COMPLETION_CANCELED`: a no-packet `MATCH` CQE,
    /// later a `Recv`-opcode CQE `MATCH|DATA_VALID` with `TmRndvIncomplete`.
    Cancel,
}

impl std::str::FromStr for SwRndvForm {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "rotate" => Ok(SwRndvForm::Rotate),
            "single" => Ok(SwRndvForm::Single),
            "match_first" => Ok(SwRndvForm::MatchFirst),
            "cancel" => Ok(SwRndvForm::Cancel),
            other => Err(format!(
                "software rendezvous form {other:?}: expected rotate, single, match_first or cancel"
            )),
        }
    }
}

/// Capacities and behaviour of one TM-SRQ.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TmConfig {
    /// Tag list capacity (handles).
    pub max_num_tags: u32,
    /// Outstanding list operations.
    pub max_ops: u32,
    /// Largest rendezvous request handled by the NIC.
    pub max_rndv_hdr_size: u32,
    /// Untagged buffers the SRQ can hold.
    pub max_untagged: u32,
    /// Counter synchronisation reading.
    pub sync_mode: SyncMode,
}

impl Default for TmConfig {
    fn default() -> Self {
        TmConfig {
            max_num_tags: 1024,
            max_ops: 64,
            max_rndv_hdr_size: 64,
            max_untagged: 4096,
            sync_mode: SyncMode::Global,
        }
    }
}

/// Properties of the link and the NIC that shape the completions (the
/// defaults are mlx5's; [`TmListModel::new`] uses them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TmNicParams {
    /// Path MTU in bytes: a matched eager message longer than this (TMH
    /// included) takes two CQEs.
    pub mtu: u32,
    /// The port's `max_msg_sz`: the longest RDMA read the NIC issues.
    pub max_msg_sz: u32,
    /// How a software rendezvous is reported.
    pub sw_rndv_form: SwRndvForm,
}

impl Default for TmNicParams {
    fn default() -> Self {
        TmNicParams {
            mtu: 1024,
            max_msg_sz: 1 << 30,
            sw_rndv_form: SwRndvForm::Rotate,
        }
    }
}

/// A list handle (index into the handle pool).
pub type Handle = u32;

/// Why a post was refused (all map to `ENOMEM` or `EINVAL`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TmPostError {
    /// No free handle: `max_num_tags` entries live (`ENOMEM`).
    #[error("tag list full")]
    ListFull,
    /// `max_ops` operations outstanding (`ENOMEM`).
    #[error("too many outstanding list operations")]
    TooManyOps,
    /// DEL of a handle that is not live (`EINVAL`).
    #[error("invalid handle {0}")]
    BadHandle(Handle),
    /// Untagged queue full (`ENOMEM`).
    #[error("untagged receive queue full")]
    UntaggedFull,
}

impl TmPostError {
    /// The errno a verbs provider reports for this refusal.
    pub fn errno(self) -> i32 {
        match self {
            TmPostError::BadHandle(_) => libc::EINVAL,
            _ => libc::ENOMEM,
        }
    }
}

/// A list operation as posted.
#[derive(Debug, Clone)]
pub enum TmOp<B> {
    /// Append a tagged buffer of `len` bytes.
    Add {
        /// Identifier of the buffer's `TM_RECV` completions.
        recv_wr_id: u64,
        /// The shell's buffer descriptor.
        buffer: B,
        /// Buffer length.
        len: u32,
        /// Tag.
        tag: u64,
        /// Mask.
        mask: u64,
    },
    /// Remove an entry.
    Del {
        /// Its handle.
        handle: Handle,
    },
    /// Report the count only.
    Sync,
}

/// What the completion of an action refers to, for
/// [`TmListModel::completion_polled`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TmRef {
    /// Handle named by the completion.
    pub handle: Option<Handle>,
    /// Operation index (list-operation completions).
    pub op_index: Option<u64>,
    /// The delayed second CQE this (first) CQE's polling allows out.
    unlocks: Option<u64>,
}

impl TmRef {
    fn handle(h: Handle) -> Self {
        TmRef {
            handle: Some(h),
            ..TmRef::default()
        }
    }
}

/// An output of the model, pulled with [`TmListModel::poll_action`].
#[derive(Debug)]
pub enum TmAction<B, M> {
    /// Copy `message[offset..offset + len]` to the start of `buffer`; the
    /// completion reporting it follows immediately.
    Scatter {
        /// Destination.
        buffer: B,
        /// Source message.
        message: M,
        /// First byte to copy.
        offset: usize,
        /// Bytes to copy.
        len: usize,
    },
    /// Push `wc` onto the SRQ's CQ; report `tm_ref` through
    /// [`TmListModel::completion_polled`] when software polls it.
    Complete {
        /// The completion.
        wc: WorkCompletion,
        /// What it refers to.
        tm_ref: TmRef,
    },
    /// Read `rvh` from the sender (through local QP `qp_num`) into `buffer`,
    /// then call [`TmListModel::rndv_finished`] with `id`.
    RdmaRead {
        /// Identifier for `rndv_finished`.
        id: u64,
        /// Local QP the request arrived on.
        qp_num: u32,
        /// Destination (the tagged buffer).
        buffer: B,
        /// What to read.
        rvh: Rvh,
    },
    /// Send a FIN (TMH with opcode FIN + RVH) to the sender through local QP
    /// `qp_num`.
    SendFin {
        /// Local QP.
        qp_num: u32,
        /// The FIN headers.
        header: TagHeader,
    },
}

/// An incoming message.
#[derive(Debug, Clone)]
pub struct Arrival<M> {
    /// Local QP it arrived on.
    pub qp_num: u32,
    /// Sender's QP number.
    pub src_qp: u32,
    /// The whole message, headers included.
    pub message: M,
}

#[derive(Debug)]
struct Entry<B> {
    handle: Handle,
    tag: u64,
    mask: u64,
    recv_wr_id: u64,
    buffer: B,
    len: u32,
    eligible: bool,
}

#[derive(Debug)]
struct QueuedOp<B> {
    seq: u64,
    index: u64,
    handle: Handle,
    wr_id: u64,
    signaled: bool,
    sync: Option<u32>,
    op: TmOp<B>,
}

#[derive(Debug)]
struct Rndv {
    /// The delayed CQE that reports the read.
    key: u64,
    recv_wr_id: u64,
    qp_num: u32,
    src_qp: u32,
    tmh: Tmh,
    rvh: Rvh,
}

/// A scatter that waits for its (delayed) completion.
#[derive(Debug)]
struct PendingScatter<B, M> {
    buffer: B,
    message: M,
    offset: usize,
    len: usize,
}

/// The second CQE of a two-CQE form.
#[derive(Debug)]
struct Deferred<B, M> {
    key: u64,
    handle: Handle,
    /// The first CQE was polled.
    first_polled: bool,
    /// Known once the data has landed (at once for eager, after the read for
    /// a NIC rendezvous).
    data: Option<(Option<PendingScatter<B, M>>, WorkCompletion)>,
}

impl<B, M> Deferred<B, M> {
    fn ready(&self) -> bool {
        self.first_polled && self.data.is_some()
    }
}

/// The tag-matching state machine of one TM-SRQ. `B` describes a buffer
/// (the soft device uses address + lkey), `M` holds a message's bytes.
#[derive(Debug)]
pub struct TmListModel<B, M> {
    cfg: TmConfig,
    params: TmNicParams,
    hw_cnt: u16,
    /// The last count applied by an executed operation (full width).
    sw_cnt: u32,
    /// The last count passed with `TM_SYNC` at post time (mlx5's `unexp_out`).
    sw_posted: u32,
    list: Vec<Entry<B>>,
    /// Reference count per handle; 0 = free.
    refs: Vec<u32>,
    /// Per handle: `sw_posted` when its ADD was posted (mlx5's `phase_cnt`).
    phase: Vec<u32>,
    free: VecDeque<Handle>,
    ops: VecDeque<QueuedOp<B>>,
    arrivals: VecDeque<(u64, Arrival<M>)>,
    untagged: VecDeque<(u64, B, u32)>,
    out: VecDeque<TmAction<B, M>>,
    rndv: HashMap<u64, Rndv>,
    next_rndv: u64,
    deferred: VecDeque<Deferred<B, M>>,
    next_deferred: u64,
    sw_rndv_seen: u64,
    hold_ops: bool,
    hold_arrivals: bool,
    hold_data: bool,
    next_seq: u64,
    ops_posted: u64,
    ops_retired: u64,
    matched: u64,
    unexpected: u64,
}

impl<B, M: AsRef<[u8]>> TmListModel<B, M> {
    /// A new, empty TM-SRQ model with mlx5's link and NIC properties
    /// ([`TmNicParams::default`]).
    pub fn new(cfg: TmConfig) -> Self {
        Self::with_params(cfg, TmNicParams::default())
    }

    /// A new, empty TM-SRQ model.
    pub fn with_params(cfg: TmConfig, params: TmNicParams) -> Self {
        TmListModel {
            cfg,
            params,
            hw_cnt: 0,
            sw_cnt: 0,
            sw_posted: 0,
            list: Vec::new(),
            refs: vec![0; cfg.max_num_tags as usize],
            phase: vec![0; cfg.max_num_tags as usize],
            free: (0..cfg.max_num_tags).collect(),
            ops: VecDeque::new(),
            arrivals: VecDeque::new(),
            untagged: VecDeque::new(),
            out: VecDeque::new(),
            rndv: HashMap::new(),
            next_rndv: 1,
            deferred: VecDeque::new(),
            next_deferred: 1,
            sw_rndv_seen: 0,
            hold_ops: false,
            hold_arrivals: false,
            hold_data: false,
            next_seq: 0,
            ops_posted: 0,
            ops_retired: 0,
            matched: 0,
            unexpected: 0,
        }
    }

    /// The configuration.
    pub fn config(&self) -> &TmConfig {
        &self.cfg
    }

    /// The link and NIC properties.
    pub fn params(&self) -> &TmNicParams {
        &self.params
    }

    /// Posts a list operation; it executes at a later
    /// [`TmListModel::poll_action`], never here. `sync` is the count carried
    /// with `TM_SYNC` (kept whole; the NIC compares its low 16 bits).
    /// Returns the handle for an ADD (the handle named for a DEL, 0 for a
    /// SYNC).
    pub fn post_op(
        &mut self,
        wr_id: u64,
        op: TmOp<B>,
        signaled: bool,
        sync: Option<u32>,
    ) -> Result<Handle, TmPostError> {
        if self.ops_posted - self.ops_retired >= u64::from(self.cfg.max_ops) {
            return Err(TmPostError::TooManyOps);
        }
        let handle = match &op {
            TmOp::Add { .. } => {
                let h = self.free.pop_front().ok_or(TmPostError::ListFull)?;
                self.refs[h as usize] = 1; // the entry's own reference
                h
            }
            TmOp::Del { handle } => {
                let h = *handle;
                match self.refs.get(h as usize) {
                    Some(r) if *r > 0 => {}
                    _ => return Err(TmPostError::BadHandle(h)),
                }
                self.refs[h as usize] += 1; // the queued DEL's reference
                h
            }
            TmOp::Sync => 0,
        };
        if let Some(c) = sync {
            self.sw_posted = c;
        }
        if matches!(op, TmOp::Add { .. }) {
            self.phase[handle as usize] = self.sw_posted;
        }
        let index = self.ops_posted;
        self.ops_posted += 1;
        let seq = self.seq();
        self.ops.push_back(QueuedOp {
            seq,
            index,
            handle,
            wr_id,
            signaled,
            sync,
            op,
        });
        tracing::trace!(target: "verbs", index, handle, "tm: op posted");
        Ok(handle)
    }

    /// Posts an untagged buffer (`ibv_post_srq_recv`).
    pub fn post_untagged(&mut self, wr_id: u64, buffer: B, len: u32) -> Result<(), TmPostError> {
        if self.untagged.len() >= self.cfg.max_untagged as usize {
            return Err(TmPostError::UntaggedFull);
        }
        self.untagged.push_back((wr_id, buffer, len));
        Ok(())
    }

    /// A message arrived from the wire.
    pub fn message_arrived(&mut self, arrival: Arrival<M>) {
        let seq = self.seq();
        self.arrivals.push_back((seq, arrival));
    }

    /// The shell finished (or failed) the RDMA read of rendezvous `id`.
    /// Success -> FIN to the sender, then (delayed) `DATA_VALID`; failure ->
    /// that completion carries `status` and `qp_num` 0, and no FIN is sent.
    pub fn rndv_finished(&mut self, id: u64, status: WcStatus) {
        let Some(r) = self.rndv.remove(&id) else {
            tracing::warn!(target: "verbs", id, "tm: rndv_finished for unknown read");
            return;
        };
        let ok = status == WcStatus::Success;
        if ok {
            self.out.push_back(TmAction::SendFin {
                qp_num: r.qp_num,
                header: TagHeader {
                    tmh: Tmh {
                        opcode: TmhOpcode::Fin,
                        ..r.tmh
                    },
                    rvh: Some(r.rvh),
                },
            });
        }
        let (qp_num, src_qp) = if ok { (r.qp_num, r.src_qp) } else { (0, 0) };
        let wc = WorkCompletion {
            wr_id: r.recv_wr_id,
            status,
            opcode: WcOpcode::TmRecv,
            flags: WcFlags::TM_DATA_VALID,
            byte_len: if ok { r.rvh.len } else { 0 },
            qp_num,
            src_qp,
            ..Default::default()
        };
        self.fill_deferred(r.key, None, wc);
    }

    /// Software polled a completion that carried `r`: releases the handle
    /// reference, retires operation slots and lets a delayed second CQE out.
    pub fn completion_polled(&mut self, r: TmRef) {
        if let Some(h) = r.handle {
            self.unref(h);
        }
        if let Some(i) = r.op_index {
            self.ops_retired = self.ops_retired.max(i + 1);
        }
        if let Some(k) = r.unlocks {
            if let Some(d) = self.deferred.iter_mut().find(|d| d.key == k) {
                d.first_polled = true;
            }
        }
    }

    /// Executes whatever is not held and returns the next output.
    pub fn poll_action(&mut self) -> Option<TmAction<B, M>> {
        if self.out.is_empty() {
            self.progress();
        }
        self.out.pop_front()
    }

    /// Holds (`true`) or frees list operations. Held operations stay queued
    /// until [`TmListModel::release_op`].
    pub fn hold_ops(&mut self, hold: bool) {
        self.hold_ops = hold;
    }

    /// Holds (`true`) or frees arriving messages until
    /// [`TmListModel::release_arrival`].
    pub fn hold_arrivals(&mut self, hold: bool) {
        self.hold_arrivals = hold;
    }

    /// Holds (`true`) or frees delayed second CQEs (the `DATA_VALID` half
    /// of a two-CQE form) until [`TmListModel::release_data`].
    pub fn hold_data(&mut self, hold: bool) {
        self.hold_data = hold;
    }

    /// Executes the oldest queued operation; false when none is queued.
    pub fn release_op(&mut self) -> bool {
        match self.ops.pop_front() {
            Some(op) => {
                self.execute_op(op);
                true
            }
            None => false,
        }
    }

    /// Executes the oldest queued arrival; false when none is queued or it
    /// needs an untagged buffer that is not there (it stays queued).
    pub fn release_arrival(&mut self) -> bool {
        self.execute_arrival()
    }

    /// Releases the oldest delayed second CQE whose first CQE was polled
    /// and whose data has landed; false when there is none.
    pub fn release_data(&mut self) -> bool {
        let Some(pos) = self.deferred.iter().position(Deferred::ready) else {
            return false;
        };
        let d = self.deferred.remove(pos).expect("position is valid");
        self.emit_deferred(d);
        true
    }

    /// The NIC's unexpected counter.
    pub fn hw_count(&self) -> u16 {
        self.hw_cnt
    }
    /// The last count software reported, as the NIC compares it (16 bits).
    pub fn sw_count(&self) -> u16 {
        self.sw_cnt as u16
    }
    /// The last count software reported, whole.
    pub fn sw_count_full(&self) -> u32 {
        self.sw_cnt
    }
    /// True while (global mode) matching is suspended.
    pub fn matching_suspended(&self) -> bool {
        self.cfg.sync_mode == SyncMode::Global && self.counts_differ()
    }
    /// Entries in the list, in order: (handle, masked tag, mask).
    pub fn entries(&self) -> Vec<(Handle, u64, u64)> {
        self.list
            .iter()
            .map(|e| (e.handle, e.tag, e.mask))
            .collect()
    }
    /// Live handles (entries plus handles awaiting completions).
    pub fn live_handles(&self) -> usize {
        self.refs.iter().filter(|r| **r > 0).count()
    }
    /// Queued (not executed) operations.
    pub fn queued_ops(&self) -> usize {
        self.ops.len()
    }
    /// Outstanding operations (window occupancy).
    pub fn outstanding_ops(&self) -> u64 {
        self.ops_posted - self.ops_retired
    }
    /// Queued (not executed) arrivals.
    pub fn queued_arrivals(&self) -> usize {
        self.arrivals.len()
    }
    /// Second CQEs not released yet (first CQE unpolled, data in flight, or
    /// held).
    pub fn deferred_data(&self) -> usize {
        self.deferred.len()
    }
    /// Untagged buffers posted and unused.
    pub fn untagged_available(&self) -> usize {
        self.untagged.len()
    }
    /// Rendezvous reads in flight.
    pub fn rndv_in_flight(&self) -> usize {
        self.rndv.len()
    }
    /// Messages matched by the list so far.
    pub fn matched_total(&self) -> u64 {
        self.matched
    }
    /// Tagged messages delivered unexpected so far (not wrapped).
    pub fn unexpected_total(&self) -> u64 {
        self.unexpected
    }

    fn seq(&mut self) -> u64 {
        let s = self.next_seq;
        self.next_seq += 1;
        s
    }

    fn counts_differ(&self) -> bool {
        self.hw_cnt != self.sw_cnt as u16
    }

    fn unref(&mut self, h: Handle) {
        let r = &mut self.refs[h as usize];
        if *r == 0 {
            tracing::warn!(target: "verbs", h, "tm: handle released twice");
            return;
        }
        *r -= 1;
        if *r == 0 {
            self.free.push_back(h);
        }
    }

    fn progress(&mut self) {
        self.run_inputs();
        if !self.hold_data {
            while self.release_data() {}
        }
    }

    /// Executes queued operations and arrivals in input order.
    fn run_inputs(&mut self) {
        loop {
            let op_seq = if self.hold_ops {
                None
            } else {
                self.ops.front().map(|o| o.seq)
            };
            let arr_seq = if self.hold_arrivals {
                None
            } else {
                self.arrivals.front().map(|a| a.0)
            };
            match (op_seq, arr_seq) {
                (None, None) => return,
                (Some(o), Some(a)) if a < o => {
                    if !self.execute_arrival() {
                        // Blocked (no untagged buffer): operations may still run.
                        if let Some(op) = self.ops.pop_front() {
                            self.execute_op(op);
                        } else {
                            return;
                        }
                    }
                }
                (Some(_), _) => {
                    if let Some(op) = self.ops.pop_front() {
                        self.execute_op(op);
                    }
                }
                (None, Some(_)) => {
                    if !self.execute_arrival() {
                        return;
                    }
                }
            }
        }
    }

    fn apply_sync(&mut self, sync: Option<u32>) {
        if let Some(c) = sync {
            self.sw_cnt = c;
            if !self.counts_differ() {
                for e in &mut self.list {
                    e.eligible = true;
                }
            }
        }
    }

    /// mlx5: an ADD/DEL completion asks for a sync when the CQE's 16-bit
    /// hardware count differs from the entry's (int) phase count.
    fn list_sync_flag(&self, handle: Handle) -> WcFlags {
        if u32::from(self.hw_cnt) != self.phase[handle as usize] {
            WcFlags::TM_SYNC_REQ
        } else {
            WcFlags::empty()
        }
    }

    fn op_completion(
        &mut self,
        q: &QueuedOp<B>,
        opcode: WcOpcode,
        status: WcStatus,
        handle: Option<Handle>,
    ) {
        let flags = handle.map_or(WcFlags::empty(), |h| self.list_sync_flag(h));
        if let Some(h) = handle {
            self.refs[h as usize] += 1;
        }
        self.out.push_back(TmAction::Complete {
            wc: WorkCompletion {
                wr_id: q.wr_id,
                status,
                opcode,
                flags,
                ..Default::default()
            },
            tm_ref: TmRef {
                handle,
                op_index: Some(q.index),
                unlocks: None,
            },
        });
    }

    fn execute_op(&mut self, mut q: QueuedOp<B>) {
        self.apply_sync(q.sync);
        match std::mem::replace(&mut q.op, TmOp::Sync) {
            TmOp::Add {
                recv_wr_id,
                buffer,
                len,
                tag,
                mask,
            } => {
                let handle = q.handle;
                let stale = self.counts_differ();
                self.list.push(Entry {
                    handle,
                    tag: tag & mask,
                    mask,
                    recv_wr_id,
                    buffer,
                    len,
                    eligible: !stale,
                });
                tracing::trace!(target: "verbs", handle, tag, mask, stale, "tm: ADD");
                if q.signaled {
                    self.op_completion(&q, WcOpcode::TmAdd, WcStatus::Success, Some(handle));
                }
            }
            TmOp::Del { handle } => self.execute_del(&q, handle),
            TmOp::Sync => {
                if q.signaled {
                    self.op_completion(&q, WcOpcode::TmSync, WcStatus::Success, None);
                }
            }
        }
    }

    fn execute_del(&mut self, q: &QueuedOp<B>, handle: Handle) {
        if let Some(pos) = self.list.iter().position(|e| e.handle == handle) {
            self.list.remove(pos);
            tracing::trace!(target: "verbs", handle, "tm: DEL");
            if q.signaled {
                self.op_completion(q, WcOpcode::TmDel, WcStatus::Success, Some(handle));
            }
            self.unref(handle); // the entry's reference
        } else {
            tracing::trace!(target: "verbs", handle, "tm: DEL of consumed entry -> TM_ERR");
            self.op_completion(q, WcOpcode::TmDel, WcStatus::TmErr, Some(handle));
        }
        self.unref(handle); // the queued DEL's reference
    }

    fn execute_arrival(&mut self) -> bool {
        let Some((_, a)) = self.arrivals.front() else {
            return false;
        };
        let bytes = a.message.as_ref();
        let total = bytes.len();
        let header = TagHeader::parse(bytes);
        let tagged = match &header {
            Ok(h) if h.tmh.opcode.is_tagged() => Some(*h),
            Ok(_) => None,
            Err(e) => {
                tracing::warn!(target: "verbs", error = %e, "tm: message without valid TMH delivered as NO_TAG");
                None
            }
        };
        let Some(h) = tagged else {
            if self.untagged.is_empty() {
                return false;
            }
            let (_, a) = self.arrivals.pop_front().expect("front checked");
            self.deliver_untagged(a, WcOpcode::TmNoTag, WcFlags::empty());
            return true;
        };
        let rndv_too_big =
            h.tmh.opcode == TmhOpcode::Rndv && total > self.cfg.max_rndv_hdr_size as usize;
        let pos = if rndv_too_big {
            None
        } else {
            self.find_match(h.tmh.tag)
        };
        if let Some(pos) = pos {
            let (_, a) = self.arrivals.pop_front().expect("front checked");
            let e = self.list.remove(pos);
            self.matched += 1;
            self.deliver_matched(a, e, h);
            return true;
        }
        // Unexpected: needs an untagged buffer.
        if self.untagged.is_empty() {
            return false;
        }
        let (_, a) = self.arrivals.pop_front().expect("front checked");
        self.deliver_unexpected(a, h);
        true
    }

    fn deliver_unexpected(&mut self, a: Arrival<M>, h: TagHeader) {
        self.hw_cnt = self.hw_cnt.wrapping_add(1);
        self.unexpected += 1;
        if self.hw_cnt.wrapping_sub(self.sw_cnt as u16) == 1 << 14 {
            // Software must TAG_SYNC at least every 2^14 unexpected
            // messages (§4); past 2^15 the comparison becomes ambiguous.
            tracing::warn!(target: "verbs", hw_cnt = self.hw_cnt, sw_cnt = self.sw_cnt, "tm: 2^14 unexpected messages without a sync");
        }
        // mlx5 (`cq.c`): `unexp_in - unexp_out > MLX5_TM_MAX_SYNC_DIFF`.
        let lag = (self.unexpected as u32).wrapping_sub(self.sw_posted);
        let flags = if lag > MAX_SYNC_DIFF {
            WcFlags::TM_SYNC_REQ
        } else {
            WcFlags::empty()
        };
        tracing::trace!(target: "verbs", hw_cnt = self.hw_cnt, tag = h.tmh.tag, "tm: unexpected");
        self.deliver_untagged(a, WcOpcode::TmRecv, flags);
    }

    fn find_match(&self, tag: u64) -> Option<usize> {
        match self.cfg.sync_mode {
            SyncMode::Global if self.counts_differ() => None,
            SyncMode::Global => self.list.iter().position(|e| tag & e.mask == e.tag),
            SyncMode::StaleEntries => self
                .list
                .iter()
                .position(|e| e.eligible && tag & e.mask == e.tag),
        }
    }

    fn deliver_untagged(&mut self, a: Arrival<M>, opcode: WcOpcode, flags: WcFlags) {
        let (wr_id, buffer, len) = self.untagged.pop_front().expect("checked non-empty");
        let total = a.message.as_ref().len();
        let n = total.min(len as usize);
        let status = if total > len as usize {
            WcStatus::LocLenErr
        } else {
            WcStatus::Success
        };
        self.out.push_back(TmAction::Scatter {
            buffer,
            message: a.message,
            offset: 0,
            len: n,
        });
        self.out.push_back(TmAction::Complete {
            wc: WorkCompletion {
                wr_id,
                status,
                opcode,
                flags,
                byte_len: n as u32,
                qp_num: a.qp_num,
                src_qp: a.src_qp,
                ..Default::default()
            },
            tm_ref: TmRef::default(),
        });
    }

    fn deliver_matched(&mut self, a: Arrival<M>, e: Entry<B>, h: TagHeader) {
        let info = TmInfo {
            tag: h.tmh.tag,
            priv_: h.tmh.app_ctx,
        };
        tracing::trace!(target: "verbs", handle = e.handle, tag = h.tmh.tag, "tm: match");
        match (h.tmh.opcode, h.rvh) {
            (TmhOpcode::Rndv, Some(rvh)) if rvh.len > e.len => self.deliver_sw_rndv(a, e, h, info),
            (TmhOpcode::Rndv, Some(rvh)) => self.deliver_nic_rndv(a, e, h.tmh, rvh, info),
            _ => self.deliver_eager(a, e, info),
        }
    }

    /// A tagged CQE of entry `e` for a message that arrived as `a`.
    fn tagged_wc(e: &Entry<B>, a: &Arrival<M>) -> WorkCompletion {
        WorkCompletion {
            wr_id: e.recv_wr_id,
            opcode: WcOpcode::TmRecv,
            qp_num: a.qp_num,
            src_qp: a.src_qp,
            ..Default::default()
        }
    }

    /// mlx5's `CONSUMED` CQE: `MATCH` only, no data, and (undocumented, so
    /// modelled as useless) no QP number.
    fn no_packet_wc(e: &Entry<B>, info: TmInfo) -> WorkCompletion {
        WorkCompletion {
            wr_id: e.recv_wr_id,
            opcode: WcOpcode::TmRecv,
            flags: WcFlags::TM_MATCH,
            tm_info: Some(info),
            ..Default::default()
        }
    }

    fn complete(&mut self, wc: WorkCompletion, tm_ref: TmRef) {
        self.out.push_back(TmAction::Complete { wc, tm_ref });
    }

    /// Pushes the first CQE of a two-CQE form (it carries the entry's
    /// reference) and reserves the second, which takes a reference of its
    /// own. Returns the second's key.
    fn first_of_two(&mut self, handle: Handle, wc: WorkCompletion) -> u64 {
        let key = self.next_deferred;
        self.next_deferred += 1;
        self.refs[handle as usize] += 1;
        self.deferred.push_back(Deferred {
            key,
            handle,
            first_polled: false,
            data: None,
        });
        self.complete(
            wc,
            TmRef {
                unlocks: Some(key),
                ..TmRef::handle(handle)
            },
        );
        key
    }

    fn fill_deferred(
        &mut self,
        key: u64,
        scatter: Option<PendingScatter<B, M>>,
        wc: WorkCompletion,
    ) {
        match self.deferred.iter_mut().find(|d| d.key == key) {
            Some(d) => d.data = Some((scatter, wc)),
            None => tracing::error!(target: "verbs", key, "tm: data for an unknown second CQE"),
        }
    }

    fn emit_deferred(&mut self, d: Deferred<B, M>) {
        let Some((scatter, wc)) = d.data else {
            return;
        };
        if let Some(s) = scatter {
            self.out.push_back(TmAction::Scatter {
                buffer: s.buffer,
                message: s.message,
                offset: s.offset,
                len: s.len,
            });
        }
        self.complete(wc, TmRef::handle(d.handle));
    }

    fn deliver_eager(&mut self, a: Arrival<M>, e: Entry<B>, info: TmInfo) {
        let total = a.message.as_ref().len();
        let payload = total.saturating_sub(TMH_LEN);
        let n = payload.min(e.len as usize);
        let status = if payload > e.len as usize {
            WcStatus::LocLenErr
        } else {
            WcStatus::Success
        };
        let data_wc = WorkCompletion {
            status,
            byte_len: n as u32,
            ..Self::tagged_wc(&e, &a)
        };
        if total <= self.params.mtu as usize {
            // Single packet: mlx5's CONSUMED_MSG.
            self.out.push_back(TmAction::Scatter {
                buffer: e.buffer,
                message: a.message,
                offset: TMH_LEN,
                len: n,
            });
            let wc = WorkCompletion {
                flags: WcFlags::TM_MATCH | WcFlags::TM_DATA_VALID,
                tm_info: Some(info),
                ..data_wc
            };
            self.complete(wc, TmRef::handle(e.handle));
            return;
        }
        // Several packets: CONSUMED at match time, EXPECTED when the last
        // byte has landed.
        let key = self.first_of_two(e.handle, Self::no_packet_wc(&e, info));
        let scatter = PendingScatter {
            buffer: e.buffer,
            message: a.message,
            offset: TMH_LEN,
            len: n,
        };
        let wc = WorkCompletion {
            flags: WcFlags::TM_DATA_VALID,
            ..data_wc
        };
        self.fill_deferred(key, Some(scatter), wc);
    }

    fn deliver_nic_rndv(&mut self, a: Arrival<M>, e: Entry<B>, tmh: Tmh, rvh: Rvh, info: TmInfo) {
        let key = self.first_of_two(e.handle, Self::no_packet_wc(&e, info));
        if rvh.len > self.params.max_msg_sz {
            // Undocumented on mlx5; modelled as the worst case: the receive
            // fails at the NIC, no read, no FIN.
            tracing::debug!(target: "verbs", len = rvh.len, max = self.params.max_msg_sz, "tm: rendezvous longer than max_msg_sz");
            let wc = WorkCompletion {
                wr_id: e.recv_wr_id,
                status: WcStatus::LocLenErr,
                opcode: WcOpcode::TmRecv,
                flags: WcFlags::TM_DATA_VALID,
                ..Default::default()
            };
            self.fill_deferred(key, None, wc);
            return;
        }
        let id = self.next_rndv;
        self.next_rndv += 1;
        self.rndv.insert(
            id,
            Rndv {
                key,
                recv_wr_id: e.recv_wr_id,
                qp_num: a.qp_num,
                src_qp: a.src_qp,
                tmh,
                rvh,
            },
        );
        self.out.push_back(TmAction::RdmaRead {
            id,
            qp_num: a.qp_num,
            buffer: e.buffer,
            rvh,
        });
    }

    fn next_sw_rndv_form(&mut self) -> SwRndvForm {
        let n = self.sw_rndv_seen;
        self.sw_rndv_seen += 1;
        match self.params.sw_rndv_form {
            SwRndvForm::Rotate => [
                SwRndvForm::Single,
                SwRndvForm::MatchFirst,
                SwRndvForm::Cancel,
            ][(n % 3) as usize],
            f => f,
        }
    }

    fn deliver_sw_rndv(&mut self, a: Arrival<M>, e: Entry<B>, h: TagHeader, info: TmInfo) {
        let n = h.header_len().min(e.len as usize);
        let form = self.next_sw_rndv_form();
        tracing::trace!(target: "verbs", handle = e.handle, ?form, "tm: software rendezvous");
        let base = Self::tagged_wc(&e, &a);
        let consumed = Self::no_packet_wc(&e, info);
        let data = WorkCompletion {
            byte_len: n as u32,
            ..base
        };
        let scatter = PendingScatter {
            buffer: e.buffer,
            message: a.message,
            offset: 0,
            len: n,
        };
        match form {
            SwRndvForm::Single | SwRndvForm::Rotate => {
                self.out.push_back(TmAction::Scatter {
                    buffer: scatter.buffer,
                    message: scatter.message,
                    offset: 0,
                    len: n,
                });
                let wc = WorkCompletion {
                    status: WcStatus::TmRndvIncomplete,
                    flags: WcFlags::TM_MATCH | WcFlags::TM_DATA_VALID,
                    tm_info: Some(info),
                    ..data
                };
                self.complete(wc, TmRef::handle(e.handle));
            }
            SwRndvForm::MatchFirst => {
                let first = WorkCompletion {
                    status: WcStatus::TmRndvIncomplete,
                    flags: WcFlags::TM_MATCH,
                    tm_info: Some(info),
                    ..base
                };
                let key = self.first_of_two(e.handle, first);
                let wc = WorkCompletion {
                    flags: WcFlags::TM_DATA_VALID,
                    ..data
                };
                self.fill_deferred(key, Some(scatter), wc);
            }
            SwRndvForm::Cancel => {
                let key = self.first_of_two(e.handle, consumed);
                // rdma-core's `mlx5_cq_read_wc_opcode` has no case for
                // MSG_COMPLETION_CANCELED: it reads as IBV_WC_RECV.
                let wc = WorkCompletion {
                    status: WcStatus::TmRndvIncomplete,
                    opcode: WcOpcode::Recv,
                    flags: WcFlags::TM_MATCH | WcFlags::TM_DATA_VALID,
                    ..data
                };
                self.fill_deferred(key, Some(scatter), wc);
            }
        }
    }
}
