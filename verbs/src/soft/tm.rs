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
//!   (EAGER, RNDV) delivered unexpected. `sw_cnt` is set by every operation
//!   flagged `TM_SYNC`. [`SyncMode::Global`] (default): while
//!   `sw_cnt != hw_cnt` no message is matched at all (it goes unexpected and
//!   counts). [`SyncMode::StaleEntries`]: only entries added while the counts
//!   differed are skipped, until an operation brings the counts together.
//! - **ADD** never fails for a stale count: its completion carries
//!   `TM_SYNC_REQ` when the counts differ after it executed (only signaled
//!   ADDs complete). **DEL** of an entry no longer in the list completes
//!   with `TM_ERR` (always, signaled or not). **SYNC** only updates `sw_cnt`.
//! - **Messages**: EAGER matched -> one `TM_RECV` with `MATCH|DATA_VALID`,
//!   payload (after the TMH) scattered into the tagged buffer (too long ->
//!   status `LocLenErr`, truncated). RNDV matched -> `TM_RECV` with `MATCH`,
//!   then [`TmAction::RdmaRead`]; when the shell reports the read with
//!   [`TmListModel::rndv_finished`]: [`TmAction::SendFin`] to the sender,
//!   then `TM_RECV` with `DATA_VALID` (byte_len = RVH len). RNDV whose RVH
//!   len exceeds the tagged buffer -> the tag is consumed, TMH+RVH are
//!   scattered, status `TmRndvIncomplete` with `MATCH`. An RNDV request longer
//!   than `max_rndv_hdr_size` is not matched (delivered unexpected).
//!   Unmatched EAGER/RNDV -> whole message into the next untagged buffer,
//!   `TM_RECV` without flags, `hw_cnt += 1`. NO_TAG, FIN and messages
//!   without a valid TMH -> untagged buffer, `TM_NO_TAG`, not counted. A
//!   message needing an untagged buffer when none is posted waits at the
//!   head of the arrival queue (RNR) and is re-matched when retried.
//! - **Order**: inputs execute in the order they were given (operations
//!   FIFO, arrivals FIFO, interleaved by input order); completions come out
//!   in execution order, so match and unexpected completions follow matching
//!   order.
//! - **Deterministic mode**: [`TmListModel::hold_ops`] /
//!   [`TmListModel::hold_arrivals`] keep inputs queued until the test calls
//!   [`TmListModel::release_op`] / [`TmListModel::release_arrival`], which
//!   reproduces every race of §4 exactly.

use std::collections::{HashMap, VecDeque};

use crate::api::wire::{Rvh, TagHeader, Tmh, TmhOpcode, TMH_LEN};
use crate::api::{TmInfo, WcFlags, WcOpcode, WcStatus, WorkCompletion};

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
    sync: Option<u16>,
    op: TmOp<B>,
}

#[derive(Debug)]
struct Rndv {
    handle: Handle,
    recv_wr_id: u64,
    qp_num: u32,
    src_qp: u32,
    tmh: Tmh,
    rvh: Rvh,
}

/// The tag-matching state machine of one TM-SRQ. `B` describes a buffer
/// (the soft device uses address + lkey), `M` holds a message's bytes.
#[derive(Debug)]
pub struct TmListModel<B, M> {
    cfg: TmConfig,
    hw_cnt: u16,
    sw_cnt: u16,
    list: Vec<Entry<B>>,
    /// Reference count per handle; 0 = free.
    refs: Vec<u32>,
    free: VecDeque<Handle>,
    ops: VecDeque<QueuedOp<B>>,
    arrivals: VecDeque<(u64, Arrival<M>)>,
    untagged: VecDeque<(u64, B, u32)>,
    out: VecDeque<TmAction<B, M>>,
    rndv: HashMap<u64, Rndv>,
    next_rndv: u64,
    hold_ops: bool,
    hold_arrivals: bool,
    next_seq: u64,
    ops_posted: u64,
    ops_retired: u64,
    matched: u64,
    unexpected: u64,
}

impl<B, M: AsRef<[u8]>> TmListModel<B, M> {
    /// A new, empty TM-SRQ model.
    pub fn new(cfg: TmConfig) -> Self {
        TmListModel {
            cfg,
            hw_cnt: 0,
            sw_cnt: 0,
            list: Vec::new(),
            refs: vec![0; cfg.max_num_tags as usize],
            free: (0..cfg.max_num_tags).collect(),
            ops: VecDeque::new(),
            arrivals: VecDeque::new(),
            untagged: VecDeque::new(),
            out: VecDeque::new(),
            rndv: HashMap::new(),
            next_rndv: 1,
            hold_ops: false,
            hold_arrivals: false,
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

    /// Posts a list operation. `sync` is the count carried with `TM_SYNC`
    /// (taken modulo 2^16). Returns the handle for an ADD (the handle named
    /// for a DEL, 0 for a SYNC).
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
        let index = self.ops_posted;
        self.ops_posted += 1;
        let seq = self.seq();
        self.ops.push_back(QueuedOp {
            seq,
            index,
            handle,
            wr_id,
            signaled,
            sync: sync.map(|c| c as u16),
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
    /// Success -> FIN to the sender, then `DATA_VALID`; failure -> the data
    /// completion carries `status` and no FIN is sent.
    pub fn rndv_finished(&mut self, id: u64, status: WcStatus) {
        let Some(r) = self.rndv.remove(&id) else {
            tracing::warn!(target: "verbs", id, "tm: rndv_finished for unknown read");
            return;
        };
        if status == WcStatus::Success {
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
        self.refs[r.handle as usize] += 1;
        self.out.push_back(TmAction::Complete {
            wc: WorkCompletion {
                wr_id: r.recv_wr_id,
                status,
                opcode: WcOpcode::TmRecv,
                flags: WcFlags::TM_DATA_VALID,
                byte_len: r.rvh.len,
                qp_num: r.qp_num,
                src_qp: r.src_qp,
                ..Default::default()
            },
            tm_ref: TmRef {
                handle: Some(r.handle),
                op_index: None,
            },
        });
        // The read's in-flight reference.
        self.unref(r.handle);
    }

    /// Software polled a completion that carried `r`: releases the handle
    /// reference and retires operation slots.
    pub fn completion_polled(&mut self, r: TmRef) {
        if let Some(h) = r.handle {
            self.unref(h);
        }
        if let Some(i) = r.op_index {
            self.ops_retired = self.ops_retired.max(i + 1);
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

    /// The NIC's unexpected counter.
    pub fn hw_count(&self) -> u16 {
        self.hw_cnt
    }
    /// The last count software reported.
    pub fn sw_count(&self) -> u16 {
        self.sw_cnt
    }
    /// True while (global mode) matching is suspended.
    pub fn matching_suspended(&self) -> bool {
        self.cfg.sync_mode == SyncMode::Global && self.hw_cnt != self.sw_cnt
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

    fn apply_sync(&mut self, sync: Option<u16>) {
        if let Some(c) = sync {
            self.sw_cnt = c;
            if self.sw_cnt == self.hw_cnt {
                for e in &mut self.list {
                    e.eligible = true;
                }
            }
        }
    }

    fn op_completion(
        &mut self,
        q: &QueuedOp<B>,
        opcode: WcOpcode,
        status: WcStatus,
        flags: WcFlags,
        handle: Option<Handle>,
    ) {
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
            },
        });
    }

    fn execute_op(&mut self, mut q: QueuedOp<B>) {
        self.apply_sync(q.sync);
        let stale = self.hw_cnt != self.sw_cnt;
        let sync_flag = if stale {
            WcFlags::TM_SYNC_REQ
        } else {
            WcFlags::empty()
        };
        match std::mem::replace(&mut q.op, TmOp::Sync) {
            TmOp::Add {
                recv_wr_id,
                buffer,
                len,
                tag,
                mask,
            } => {
                let handle = q.handle;
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
                    self.op_completion(
                        &q,
                        WcOpcode::TmAdd,
                        WcStatus::Success,
                        sync_flag,
                        Some(handle),
                    );
                }
            }
            TmOp::Del { handle } => {
                if let Some(pos) = self.list.iter().position(|e| e.handle == handle) {
                    self.list.remove(pos);
                    tracing::trace!(target: "verbs", handle, "tm: DEL");
                    if q.signaled {
                        self.op_completion(
                            &q,
                            WcOpcode::TmDel,
                            WcStatus::Success,
                            sync_flag,
                            Some(handle),
                        );
                    }
                    self.unref(handle); // the entry's reference
                } else {
                    tracing::trace!(target: "verbs", handle, "tm: DEL of consumed entry -> TM_ERR");
                    self.op_completion(
                        &q,
                        WcOpcode::TmDel,
                        WcStatus::TmErr,
                        sync_flag,
                        Some(handle),
                    );
                }
                self.unref(handle); // the queued DEL's reference
            }
            TmOp::Sync => {
                if q.signaled {
                    self.op_completion(&q, WcOpcode::TmSync, WcStatus::Success, sync_flag, None);
                }
            }
        }
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
        if let Some(h) = tagged {
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
            self.hw_cnt = self.hw_cnt.wrapping_add(1);
            self.unexpected += 1;
            if self.hw_cnt.wrapping_sub(self.sw_cnt) == 1 << 14 {
                // Software must TAG_SYNC at least every 2^14 unexpected
                // messages (§4); past 2^15 the comparison becomes ambiguous.
                tracing::warn!(target: "verbs", hw_cnt = self.hw_cnt, sw_cnt = self.sw_cnt, "tm: 2^14 unexpected messages without a sync");
            }
            tracing::trace!(target: "verbs", hw_cnt = self.hw_cnt, tag = h.tmh.tag, "tm: unexpected");
            self.deliver_untagged(a, WcOpcode::TmRecv);
            true
        } else {
            if self.untagged.is_empty() {
                return false;
            }
            let (_, a) = self.arrivals.pop_front().expect("front checked");
            self.deliver_untagged(a, WcOpcode::TmNoTag);
            true
        }
    }

    fn find_match(&self, tag: u64) -> Option<usize> {
        match self.cfg.sync_mode {
            SyncMode::Global if self.hw_cnt != self.sw_cnt => None,
            SyncMode::Global => self.list.iter().position(|e| tag & e.mask == e.tag),
            SyncMode::StaleEntries => self
                .list
                .iter()
                .position(|e| e.eligible && tag & e.mask == e.tag),
        }
    }

    fn deliver_untagged(&mut self, a: Arrival<M>, opcode: WcOpcode) {
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
        let total = a.message.as_ref().len();
        tracing::trace!(target: "verbs", handle = e.handle, tag = h.tmh.tag, "tm: match");
        let wc = WorkCompletion {
            wr_id: e.recv_wr_id,
            opcode: WcOpcode::TmRecv,
            qp_num: a.qp_num,
            src_qp: a.src_qp,
            tm_info: Some(info),
            ..Default::default()
        };
        // The entry's reference moves to the match completion.
        let tm_ref = TmRef {
            handle: Some(e.handle),
            op_index: None,
        };
        match (h.tmh.opcode, h.rvh) {
            (TmhOpcode::Rndv, Some(rvh)) if rvh.len > e.len => {
                let n = h.header_len().min(e.len as usize);
                self.out.push_back(TmAction::Scatter {
                    buffer: e.buffer,
                    message: a.message,
                    offset: 0,
                    len: n,
                });
                self.out.push_back(TmAction::Complete {
                    wc: WorkCompletion {
                        status: WcStatus::TmRndvIncomplete,
                        flags: WcFlags::TM_MATCH,
                        byte_len: n as u32,
                        ..wc
                    },
                    tm_ref,
                });
            }
            (TmhOpcode::Rndv, Some(rvh)) => {
                self.out.push_back(TmAction::Complete {
                    wc: WorkCompletion {
                        flags: WcFlags::TM_MATCH,
                        ..wc
                    },
                    tm_ref,
                });
                // The read in flight holds its own reference.
                self.refs[e.handle as usize] += 1;
                let id = self.next_rndv;
                self.next_rndv += 1;
                self.rndv.insert(
                    id,
                    Rndv {
                        handle: e.handle,
                        recv_wr_id: e.recv_wr_id,
                        qp_num: a.qp_num,
                        src_qp: a.src_qp,
                        tmh: h.tmh,
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
            _ => {
                let payload = total.saturating_sub(TMH_LEN);
                let n = payload.min(e.len as usize);
                let status = if payload > e.len as usize {
                    WcStatus::LocLenErr
                } else {
                    WcStatus::Success
                };
                self.out.push_back(TmAction::Scatter {
                    buffer: e.buffer,
                    message: a.message,
                    offset: TMH_LEN,
                    len: n,
                });
                self.out.push_back(TmAction::Complete {
                    wc: WorkCompletion {
                        status,
                        flags: WcFlags::TM_MATCH | WcFlags::TM_DATA_VALID,
                        byte_len: n as u32,
                        ..wc
                    },
                    tm_ref,
                });
            }
        }
    }
}
