//! The soft NIC's engine: the state of one opened device and the code that
//! moves data. It runs inside the owning process's verbs calls: posting
//! pushes records into the peer's ring, and every CQ poll calls
//! [`Engine::progress`], which drains this device's rings, serves RDMA
//! requests, runs the TM-SRQ models and flushes queued records.
//!
//! # Limits (at the requester)
//! An RDMA read or write, or a send, longer than the port's `max_msg_sz`
//! completes at once with `LocLenErr` and moves nothing; the TM-SRQ model
//! applies the same bound to the NIC's own rendezvous reads.
//!
//! # RDMA validation (at the target)
//! An RDMA read or write travels as a request record to the target QP; the
//! *target's* engine checks the rkey (exists, same PD as the QP, access flag
//! granted on the region and on the QP, range inside the region) and only
//! then moves the bytes with `process_vm_readv`/`process_vm_writev` against
//! the requester's pid (whose local buffers the requester validated against
//! its lkeys at post time). A failed check answers `RemAccessErr` and touches
//! no memory. The requester's completion arrives with the response. Both
//! sides must therefore be polling, as with any progress-driven soft device.
//!
//! # Atomics (at the target)
//! An atomic travels as an `ATOMIC_REQ` record; the target's engine checks
//! responder resources, the rkey (`REMOTE_ATOMIC`) and alignment, then
//! executes it on its own memory under the device lock
//! ([`MrTable::serve_atomic`]: an `IBV_ATOMIC_HCA` model, atomic only among
//! this device's atomics) and answers with the old value, which the
//! requester writes into its 8-byte local buffer just before the completion.

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use super::config::SoftConfig;
use super::mem::{AtomicOp, MrTable};
use super::shm::{self, kind, RecHdr, Segment, FLAG_ACK, FLAG_IMM, FLAG_REFUSE};
use super::tm::{Arrival, TmAction, TmConfig, TmListModel, TmRef};
use crate::api::{
    AccessFlags, QpState, Sge, SrqAttr, VerbsError, WcFlags, WcOpcode, WcStatus, WorkCompletion,
};

pub(crate) type Model = TmListModel<Vec<Sge>, Vec<u8>>;

/// Most records of a peer's stalled request stream held outside the ring.
const STASH_MAX: usize = 1024;

/// How often a waiting QP checks that its peer process still exists.
const LIVENESS_PERIOD: Duration = Duration::from_millis(50);

#[derive(Debug)]
pub(crate) struct CqState {
    pub cap: u32,
    pub q: VecDeque<(WorkCompletion, Option<(u32, TmRef)>)>,
    pub overrun: bool,
}

#[derive(Debug)]
enum Outstanding {
    /// A SEND, complete when the receiver acknowledges it (as an RC send
    /// completes at the ACK, not when it leaves: the send queue entry stays
    /// taken meanwhile, through RNR waits too).
    Send {
        wr_id: u64,
        signaled: bool,
    },
    Rdma {
        wr_id: u64,
        opcode: WcOpcode,
        signaled: bool,
        len: u32,
    },
    TmRndv {
        srq: u32,
        id: u64,
    },
    /// An atomic: the old value goes into `dst` (8 bytes, LOCAL_WRITE,
    /// checked at post time) when the response arrives.
    Atomic {
        wr_id: u64,
        opcode: WcOpcode,
        signaled: bool,
        dst: Vec<Sge>,
    },
}

#[derive(Debug)]
pub(crate) struct QpEntry {
    pub pd: u32,
    pub send_cq: u32,
    pub recv_cq: u32,
    pub srq: Option<u32>,
    pub state: QpState,
    pub access: AccessFlags,
    pub sq_sig_all: bool,
    pub max_send_wr: u32,
    pub max_recv_wr: u32,
    /// RDMA reads/atomics the peer may have outstanding to us (INIT->RTR).
    pub max_dest_rd_atomic: u8,
    pub inbound: Segment,
    pub outbound: Option<Segment>,
    /// Peer (pid, instance, qpn) once connected.
    pub remote: Option<(u32, u32, u32)>,
    pub rq: VecDeque<(u64, Vec<Sge>)>,
    /// Records waiting for room in the peer's ring, with the send completion
    /// to report once pushed.
    pending: VecDeque<(RecHdr, Vec<u8>, Option<WorkCompletion>)>,
    outstanding: HashMap<u64, Outstanding>,
    next_req: u64,
    /// When the peer's liveness was last checked.
    last_liveness: Option<Instant>,
    /// The peer's request stream stalled by RNR (see [`Engine::drain`]).
    stash: VecDeque<(RecHdr, Vec<u8>)>,
}

impl QpEntry {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        pd: u32,
        send_cq: u32,
        recv_cq: u32,
        srq: Option<u32>,
        sq_sig_all: bool,
        max_send_wr: u32,
        max_recv_wr: u32,
        inbound: Segment,
    ) -> Self {
        QpEntry {
            pd,
            send_cq,
            recv_cq,
            srq,
            state: QpState::Reset,
            access: AccessFlags::empty(),
            sq_sig_all,
            max_send_wr,
            max_recv_wr,
            max_dest_rd_atomic: 0,
            inbound,
            outbound: None,
            remote: None,
            rq: VecDeque::new(),
            pending: VecDeque::new(),
            outstanding: HashMap::new(),
            next_req: 1,
            last_liveness: None,
            stash: VecDeque::new(),
        }
    }
}

#[derive(Debug)]
pub(crate) enum SrqKind {
    Basic {
        q: VecDeque<(u64, Vec<Sge>)>,
        max_wr: u32,
    },
    Tm {
        model: Box<Model>,
        cq: u32,
    },
}

#[derive(Debug)]
pub(crate) struct SrqEntry {
    pub pd: u32,
    pub kind: SrqKind,
}

/// The device state, behind the context's mutex.
#[derive(Debug)]
pub(crate) struct Engine {
    pub pid: u32,
    pub instance: u32,
    pub cfg: SoftConfig,
    next_id: u32,
    key_salt: u32,
    pub mrs: MrTable,
    pub cqs: HashMap<u32, CqState>,
    pub qps: HashMap<u32, QpEntry>,
    pub srqs: HashMap<u32, SrqEntry>,
    /// A failed scatter of a TM-SRQ, reported on the completion that follows.
    scatter_errors: HashMap<u32, WcStatus>,
    /// Requests of the kind [`SoftConfig::inject`] names posted so far.
    inject_seen: u64,
}

fn sum_len(sges: &[Sge]) -> u64 {
    sges.iter().map(|s| u64::from(s.length)).sum()
}

impl Engine {
    pub(crate) fn new(pid: u32, instance: u32, cfg: SoftConfig) -> Self {
        Engine {
            pid,
            instance,
            cfg,
            next_id: 1,
            key_salt: (pid.wrapping_mul(2_654_435_761) ^ instance) & 0xff,
            mrs: MrTable::default(),
            cqs: HashMap::new(),
            qps: HashMap::new(),
            srqs: HashMap::new(),
            scatter_errors: HashMap::new(),
            inject_seen: 0,
        }
    }

    /// Whether this request (`read` or send) is the one fault injection
    /// fails (`btl_openib_tmsoft_inject_error`).
    fn inject_now(&mut self, read: bool) -> bool {
        let Some(i) = self.cfg.inject else {
            return false;
        };
        if i.read != read {
            return false;
        }
        self.inject_seen += 1;
        if self.inject_seen == i.n {
            tracing::warn!(target: "verbs", read, n = i.n, "soft: injected completion error");
            true
        } else {
            false
        }
    }

    pub(crate) fn alloc_id(&mut self) -> u32 {
        let id = self.next_id;
        self.next_id += 1;
        id
    }

    /// A fresh memory key: counter in the high bits, a per-device salt in the
    /// low byte, so keys of different devices rarely collide.
    pub(crate) fn alloc_key(&mut self) -> u32 {
        (self.alloc_id() << 8) | self.key_salt
    }

    // ---- completions -----------------------------------------------------------

    pub(crate) fn push_cq(&mut self, cq: u32, wc: WorkCompletion, tm: Option<(u32, TmRef)>) {
        let Some(c) = self.cqs.get_mut(&cq) else {
            tracing::warn!(target: "verbs", cq, "soft: completion for a destroyed CQ dropped");
            return;
        };
        if c.q.len() >= c.cap as usize {
            if !c.overrun {
                tracing::error!(target: "verbs", cq, cap = c.cap, "soft: CQ overrun");
            }
            c.overrun = true;
            return;
        }
        c.q.push_back((wc, tm));
    }

    /// Pops completions of `cq` into `out`, after running the device.
    pub(crate) fn poll_cq(
        &mut self,
        cq: u32,
        out: &mut [WorkCompletion],
    ) -> Result<usize, VerbsError> {
        self.progress();
        let c = self
            .cqs
            .get_mut(&cq)
            .ok_or_else(|| VerbsError::verb("ibv_poll_cq", libc::EINVAL))?;
        if c.overrun {
            return Err(VerbsError::CqOverrun { capacity: c.cap });
        }
        let mut n = 0;
        let mut refs = Vec::new();
        while n < out.len() {
            let Some((wc, tm)) = c.q.pop_front() else {
                break;
            };
            out[n] = wc;
            n += 1;
            if let Some(r) = tm {
                refs.push(r);
            }
        }
        for (srq, r) in refs {
            if let Some(SrqEntry {
                kind: SrqKind::Tm { model, .. },
                ..
            }) = self.srqs.get_mut(&srq)
            {
                model.completion_polled(r);
            }
        }
        Ok(n)
    }

    // ---- sending ---------------------------------------------------------------

    /// Queues a record towards the peer of `qpn`, reporting `wc` on the send
    /// CQ once it is in the peer's ring.
    fn send_record(&mut self, qpn: u32, hdr: RecHdr, payload: Vec<u8>, wc: Option<WorkCompletion>) {
        let Some(qp) = self.qps.get_mut(&qpn) else {
            return;
        };
        qp.pending.push_back((hdr, payload, wc));
        self.flush(qpn);
    }

    /// Pushes queued records into the peer's ring while there is room.
    fn flush(&mut self, qpn: u32) -> bool {
        let mut done = Vec::new();
        let mut did = false;
        if let Some(qp) = self.qps.get_mut(&qpn) {
            let Some(out) = &qp.outbound else {
                return false;
            };
            while let Some((hdr, payload, _)) = qp.pending.front() {
                if !out.push(*hdr, &[payload]) {
                    break;
                }
                let (_, _, wc) = qp.pending.pop_front().expect("front exists");
                did = true;
                if let Some(wc) = wc {
                    done.push((qp.send_cq, wc));
                }
            }
        }
        for (cq, wc) in done {
            self.push_cq(cq, wc, None);
        }
        did
    }

    /// `ibv_post_send` of a SEND or SEND_WITH_IMM.
    pub(crate) fn post_send_msg(
        &mut self,
        qpn: u32,
        wr_id: u64,
        sges: &[Sge],
        imm: Option<u32>,
        signaled: bool,
        inline: Option<Vec<u8>>,
    ) -> Result<(), VerbsError> {
        if self.flushed_at_post(qpn, wr_id, WcOpcode::Send) {
            return Ok(());
        }
        let qp = self.qp_for_send(qpn)?;
        let (pd, cq, sig_all) = (qp.pd, qp.send_cq, qp.sq_sig_all);
        let max = qp.outbound.as_ref().map(|o| o.max_payload()).unwrap_or(0);
        let wc = WorkCompletion {
            wr_id,
            opcode: WcOpcode::Send,
            qp_num: qpn,
            ..Default::default()
        };
        let gathered = match inline {
            Some(d) => Ok(d),
            None => self.mrs.gather(pd, sges),
        };
        let data = match gathered {
            Ok(d) => d,
            Err(status) => {
                self.fail_at_post(qpn, cq, WorkCompletion { status, ..wc });
                return Ok(());
            }
        };
        if data.len() as u64 > u64::from(self.cfg.max_msg_sz) {
            let wc = WorkCompletion {
                status: WcStatus::LocLenErr,
                ..wc
            };
            self.fail_at_post(qpn, cq, wc);
            return Ok(());
        }
        if data.len() > max {
            return Err(VerbsError::InvalidArgument(format!(
                "message of {} bytes exceeds the soft NIC's ring capacity {max} (half of btl_openib_tmsoft_ring_size)",
                data.len()
            )));
        }
        if self.inject_now(false) {
            // As after exhausted retries: an error completion (reported
            // even when unsignaled), nothing delivered.
            let wc = WorkCompletion {
                status: WcStatus::RetryExcErr,
                ..wc
            };
            self.fail_at_post(qpn, cq, wc);
            return Ok(());
        }
        let out = Outstanding::Send {
            wr_id,
            signaled: signaled || sig_all,
        };
        let Some(req_id) = self.track(qpn, out) else {
            return Ok(());
        };
        let hdr = RecHdr {
            kind: kind::SEND,
            req_id,
            len: data.len() as u64,
            imm: imm.unwrap_or(0),
            flags: FLAG_ACK | if imm.is_some() { FLAG_IMM } else { 0 },
            ..Default::default()
        };
        self.send_record(qpn, hdr, data, None);
        Ok(())
    }

    /// `ibv_post_send` of an RDMA read or write.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn post_rdma(
        &mut self,
        qpn: u32,
        wr_id: u64,
        sges: &[Sge],
        remote_addr: u64,
        rkey: u32,
        read: bool,
        signaled: bool,
    ) -> Result<(), VerbsError> {
        let opcode = if read {
            WcOpcode::RdmaRead
        } else {
            WcOpcode::RdmaWrite
        };
        if self.flushed_at_post(qpn, wr_id, opcode) {
            return Ok(());
        }
        let qp = self.qp_for_send(qpn)?;
        let (pd, cq, sig_all) = (qp.pd, qp.send_cq, qp.sq_sig_all);
        let need = if read {
            AccessFlags::LOCAL_WRITE
        } else {
            AccessFlags::empty()
        };
        if let Err(status) = self.mrs.check(pd, sges, need) {
            let wc = WorkCompletion {
                wr_id,
                status,
                opcode,
                qp_num: qpn,
                ..Default::default()
            };
            self.fail_at_post(qpn, cq, wc);
            return Ok(());
        }
        let len = sum_len(sges);
        if len > u64::from(self.cfg.max_msg_sz) {
            // Longer than the port's max_msg_sz: fails locally.
            let wc = WorkCompletion {
                wr_id,
                status: WcStatus::LocLenErr,
                opcode,
                qp_num: qpn,
                ..Default::default()
            };
            self.fail_at_post(qpn, cq, wc);
            return Ok(());
        }
        let out = Outstanding::Rdma {
            wr_id,
            opcode,
            signaled: signaled || sig_all,
            len: len as u32,
        };
        self.rdma_request(qpn, sges, remote_addr, rkey, len, read, out);
        Ok(())
    }

    /// `ibv_post_send` of an atomic. The local buffer must be exactly 8
    /// bytes (`EINVAL` otherwise, as rdma-core's rxe `validate_send_wr`) in a
    /// region with LOCAL_WRITE (`LocProtErr` completion otherwise). The
    /// remote checks happen at the target (`on_atomic_req`).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn post_atomic(
        &mut self,
        qpn: u32,
        wr_id: u64,
        sges: &[Sge],
        remote_addr: u64,
        rkey: u32,
        op: AtomicOp,
        signaled: bool,
    ) -> Result<(), VerbsError> {
        if sum_len(sges) != 8 {
            return Err(VerbsError::post("ibv_post_send", 0, libc::EINVAL));
        }
        let opcode = match op {
            AtomicOp::FetchAdd(_) => WcOpcode::FetchAdd,
            AtomicOp::CmpSwap(..) => WcOpcode::CompSwap,
        };
        if self.flushed_at_post(qpn, wr_id, opcode) {
            return Ok(());
        }
        let qp = self.qp_for_send(qpn)?;
        let (pd, cq, sig_all) = (qp.pd, qp.send_cq, qp.sq_sig_all);
        if let Err(status) = self.mrs.check(pd, sges, AccessFlags::LOCAL_WRITE) {
            let wc = WorkCompletion {
                wr_id,
                status,
                opcode,
                qp_num: qpn,
                ..Default::default()
            };
            self.fail_at_post(qpn, cq, wc);
            return Ok(());
        }
        let out = Outstanding::Atomic {
            wr_id,
            opcode,
            signaled: signaled || sig_all,
            dst: sges.to_vec(),
        };
        let Some(req_id) = self.track(qpn, out) else {
            return Ok(());
        };
        let (code, a, b) = match op {
            AtomicOp::FetchAdd(add) => (1u64, add, 0),
            AtomicOp::CmpSwap(compare, swap) => (2u64, compare, swap),
        };
        let mut payload = Vec::with_capacity(24);
        for w in [code, a, b] {
            payload.extend_from_slice(&w.to_ne_bytes());
        }
        let hdr = RecHdr {
            kind: kind::ATOMIC_REQ,
            req_id,
            addr: remote_addr,
            len: 8,
            rkey,
            ..Default::default()
        };
        self.send_record(qpn, hdr, payload, None);
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    fn rdma_request(
        &mut self,
        qpn: u32,
        sges: &[Sge],
        remote_addr: u64,
        rkey: u32,
        len: u64,
        read: bool,
        out: Outstanding,
    ) {
        let Some(req_id) = self.track(qpn, out) else {
            return;
        };
        // An injected failure travels with the request: the target refuses
        // it as for a bad rkey (no memory moves) and both QPs fail, as with
        // a real remote access error.
        let refuse = read && self.inject_now(true);
        let mut payload = Vec::with_capacity(sges.len() * 16);
        for s in sges {
            payload.extend_from_slice(&s.addr.to_ne_bytes());
            payload.extend_from_slice(&u64::from(s.length).to_ne_bytes());
        }
        let hdr = RecHdr {
            kind: if read {
                kind::READ_REQ
            } else {
                kind::WRITE_REQ
            },
            req_id,
            addr: remote_addr,
            len,
            rkey,
            flags: if refuse { FLAG_REFUSE } else { 0 },
            ..Default::default()
        };
        self.send_record(qpn, hdr, payload, None);
    }

    /// Records `out` as outstanding on `qpn` under a fresh request id, which
    /// its response will carry (`None`: no such QP).
    fn track(&mut self, qpn: u32, out: Outstanding) -> Option<u64> {
        let qp = self.qps.get_mut(&qpn)?;
        let req_id = qp.next_req;
        qp.next_req += 1;
        qp.outstanding.insert(req_id, out);
        Some(req_id)
    }

    fn qp_for_send(&self, qpn: u32) -> Result<&QpEntry, VerbsError> {
        let qp = self
            .qps
            .get(&qpn)
            .ok_or_else(|| VerbsError::post("ibv_post_send", 0, libc::EINVAL))?;
        if qp.state != QpState::Rts {
            return Err(VerbsError::post("ibv_post_send", 0, libc::EINVAL));
        }
        // Every work request of the send queue stays outstanding until it
        // completes (sends until acknowledged); the TM-SRQ's own
        // rendezvous reads through this QP do not use its queue.
        if qp.outstanding.len() as u32 >= qp.max_send_wr
            && qp
                .outstanding
                .values()
                .filter(|o| !matches!(o, Outstanding::TmRndv { .. }))
                .count() as u32
                >= qp.max_send_wr
        {
            return Err(VerbsError::post("ibv_post_send", 0, libc::ENOMEM));
        }
        Ok(qp)
    }

    pub(crate) fn post_recv(
        &mut self,
        qpn: u32,
        wr_id: u64,
        sges: &[Sge],
    ) -> Result<(), VerbsError> {
        let qp = self
            .qps
            .get_mut(&qpn)
            .ok_or_else(|| VerbsError::post("ibv_post_recv", 0, libc::EINVAL))?;
        if qp.srq.is_some() || qp.state == QpState::Reset {
            return Err(VerbsError::post("ibv_post_recv", 0, libc::EINVAL));
        }
        if qp.rq.len() as u32 >= qp.max_recv_wr {
            return Err(VerbsError::post("ibv_post_recv", 0, libc::ENOMEM));
        }
        qp.rq.push_back((wr_id, sges.to_vec()));
        if qp.state == QpState::Error {
            self.flush_errors(qpn);
        }
        Ok(())
    }

    /// Destroys a QP: its ring segments are unmapped (ours unlinked), and
    /// rendezvous reads the TM-SRQ issued through it fail with `WrFlushErr`
    /// so their tagged buffers are settled.
    pub(crate) fn destroy_qp(&mut self, qpn: u32) {
        let Some(mut qp) = self.qps.remove(&qpn) else {
            return;
        };
        for (_, o) in qp.outstanding.drain() {
            if let Outstanding::TmRndv { srq, id } = o {
                if let Some(SrqEntry {
                    kind: SrqKind::Tm { model, .. },
                    ..
                }) = self.srqs.get_mut(&srq)
                {
                    model.rndv_finished(id, WcStatus::WrFlushErr);
                }
            }
        }
    }

    /// Completes every queued receive and send of an errored QP with
    /// `WrFlushErr`, outstanding requests in the order they were posted;
    /// rendezvous reads the TM-SRQ issued through it settle their tagged
    /// buffers with the same status. Responses it still owes its peer (for
    /// requests it executed before the error) stay queued and go out: a
    /// responder answers what it did, the NAK that failed the QP included.
    pub(crate) fn flush_errors(&mut self, qpn: u32) {
        let Some(qp) = self.qps.get_mut(&qpn) else {
            return;
        };
        let mut out = Vec::new();
        for (wr_id, _) in qp.rq.drain(..) {
            out.push((
                qp.recv_cq,
                WorkCompletion {
                    wr_id,
                    status: WcStatus::WrFlushErr,
                    opcode: WcOpcode::Recv,
                    qp_num: qpn,
                    ..Default::default()
                },
            ));
        }
        let mut outstanding: Vec<(u64, Outstanding)> = qp.outstanding.drain().collect();
        outstanding.sort_unstable_by_key(|(req, _)| *req);
        let mut rndv = Vec::new();
        for (_, o) in outstanding {
            match o {
                Outstanding::Send { wr_id, .. } => out.push((
                    qp.send_cq,
                    WorkCompletion {
                        wr_id,
                        status: WcStatus::WrFlushErr,
                        opcode: WcOpcode::Send,
                        qp_num: qpn,
                        ..Default::default()
                    },
                )),
                Outstanding::Rdma { wr_id, opcode, .. }
                | Outstanding::Atomic { wr_id, opcode, .. } => out.push((
                    qp.send_cq,
                    WorkCompletion {
                        wr_id,
                        status: WcStatus::WrFlushErr,
                        opcode,
                        qp_num: qpn,
                        ..Default::default()
                    },
                )),
                Outstanding::TmRndv { srq, id } => rndv.push((srq, id)),
            }
        }
        let mut kept = VecDeque::new();
        for (hdr, payload, wc) in qp.pending.drain(..) {
            if hdr.kind == kind::RESP {
                kept.push_back((hdr, payload, wc));
            } else if let Some(wc) = wc {
                out.push((
                    qp.send_cq,
                    WorkCompletion {
                        status: WcStatus::WrFlushErr,
                        ..wc
                    },
                ));
            }
        }
        qp.pending = kept;
        for (cq, wc) in out {
            self.push_cq(cq, wc, None);
        }
        for (srq, id) in rndv {
            if let Some(SrqEntry {
                kind: SrqKind::Tm { model, .. },
                ..
            }) = self.srqs.get_mut(&srq)
            {
                model.rndv_finished(id, WcStatus::WrFlushErr);
            }
        }
    }

    /// Moves `qpn` to the error state after a work request of it completed
    /// in error, as an RC QP does on hardware and on rxe (the requester on a
    /// NAK or a local error: `rxe_comp.c` `COMPST_ERROR` -> `rxe_qp_error`;
    /// the responder after answering a class C NAK, remote access or
    /// invalid request: `rxe_resp.c` `do_class_ac_error` -> `RESPST_ERROR`).
    /// Its queued work flushes ([`Engine::flush_errors`]), it serves no more
    /// of its peer's requests, and work posted later completes at once with
    /// `WrFlushErr` ([`Engine::flushed_at_post`]). `close_inbound` also
    /// tells the peer nothing will answer it any more, so the peer's
    /// outstanding work fails as after exhausted retries (a requester that
    /// failed; a responder leaves that to the NAK it sent).
    fn enter_error(&mut self, qpn: u32, close_inbound: bool) {
        let Some(qp) = self.qps.get_mut(&qpn) else {
            return;
        };
        if qp.state == QpState::Error {
            return;
        }
        qp.state = QpState::Error;
        if close_inbound {
            qp.inbound.mark_closed();
        }
        tracing::debug!(target: "verbs", qpn, "soft: a work request failed; QP to error");
        self.flush_errors(qpn);
    }

    /// Pushes `wc` (an error found at post time) and moves the QP to error.
    fn fail_at_post(&mut self, qpn: u32, cq: u32, wc: WorkCompletion) {
        self.push_cq(cq, wc, None);
        self.enter_error(qpn, true);
    }

    /// A work request posted to a QP in the error state is accepted and
    /// completes at once with `WrFlushErr`, signaled or not (as a NIC
    /// flushes its send queue; mlx5 and rxe accept the post). True when so.
    fn flushed_at_post(&mut self, qpn: u32, wr_id: u64, opcode: WcOpcode) -> bool {
        let Some(qp) = self.qps.get(&qpn) else {
            return false;
        };
        if qp.state != QpState::Error {
            return false;
        }
        let wc = WorkCompletion {
            wr_id,
            status: WcStatus::WrFlushErr,
            opcode,
            qp_num: qpn,
            ..Default::default()
        };
        let cq = qp.send_cq;
        self.push_cq(cq, wc, None);
        true
    }

    // ---- receiving ---------------------------------------------------------------

    /// Runs the device until nothing moves (bounded).
    pub(crate) fn progress(&mut self) {
        for _ in 0..64 {
            let mut did = false;
            let qpns: Vec<u32> = self.qps.keys().copied().collect();
            for qpn in &qpns {
                did |= self.flush(*qpn);
                did |= self.drain(*qpn);
            }
            let srqs: Vec<u32> = self.srqs.keys().copied().collect();
            for s in srqs {
                did |= self.run_tm(s);
            }
            for qpn in &qpns {
                if let Some(qp) = self.qps.get_mut(qpn) {
                    if qp.inbound.attached_peer().is_some() {
                        qp.inbound.unlink();
                    }
                }
                self.check_peer(*qpn);
            }
            if !did {
                break;
            }
        }
    }

    /// A QP waiting on its peer (queued records, outstanding RDMA) checks
    /// every [`LIVENESS_PERIOD`] that the peer process still exists and has
    /// not destroyed its QP; if not,
    /// its work completes with `RetryExcErr` (what an RC transport reports
    /// after exhausting retries) and the QP moves to the error state.
    fn check_peer(&mut self, qpn: u32) {
        let Some(qp) = self.qps.get_mut(&qpn) else {
            return;
        };
        let Some((pid, _, _)) = qp.remote else {
            return;
        };
        if qp.state == QpState::Error || (qp.pending.is_empty() && qp.outstanding.is_empty()) {
            return;
        }
        let now = Instant::now();
        if qp.last_liveness.is_some_and(|t| now - t < LIVENESS_PERIOD) {
            return;
        }
        qp.last_liveness = Some(now);
        let peer_closed = qp.outbound.as_ref().is_some_and(|o| o.closed());
        if !peer_closed && shm::process_alive(pid) {
            return;
        }
        tracing::warn!(target: "verbs", qpn, pid, peer_closed, "soft: peer QP or process is gone; QP to error");
        qp.state = QpState::Error;
        let send_cq = qp.send_cq;
        let mut out = Vec::new();
        let mut rndv = Vec::new();
        for (_, _, wc) in qp.pending.drain(..) {
            if let Some(wc) = wc {
                out.push(WorkCompletion {
                    status: WcStatus::RetryExcErr,
                    ..wc
                });
            }
        }
        let mut outstanding: Vec<(u64, Outstanding)> = qp.outstanding.drain().collect();
        outstanding.sort_unstable_by_key(|(req, _)| *req);
        for (_, o) in outstanding {
            match o {
                Outstanding::Send { wr_id, .. } => out.push(WorkCompletion {
                    wr_id,
                    status: WcStatus::RetryExcErr,
                    opcode: WcOpcode::Send,
                    qp_num: qpn,
                    ..Default::default()
                }),
                Outstanding::Rdma { wr_id, opcode, .. }
                | Outstanding::Atomic { wr_id, opcode, .. } => out.push(WorkCompletion {
                    wr_id,
                    status: WcStatus::RetryExcErr,
                    opcode,
                    qp_num: qpn,
                    ..Default::default()
                }),
                Outstanding::TmRndv { srq, id } => rndv.push((srq, id)),
            }
        }
        for wc in out {
            self.push_cq(send_cq, wc, None);
        }
        for (srq, id) in rndv {
            if let Some(SrqEntry {
                kind: SrqKind::Tm { model, .. },
                ..
            }) = self.srqs.get_mut(&srq)
            {
                model.rndv_finished(id, WcStatus::RetryExcErr);
            }
        }
        self.flush_errors(qpn);
    }

    /// Handles the records of `qpn`'s ring.
    ///
    /// The ring carries two streams of the peer, as an RC QP does: its
    /// requests (SEND, RDMA requests), executed in order, and its responses
    /// to our requests. A SEND without a receive buffer (RNR) stalls the
    /// request stream only: it and later requests move to the QP's stash
    /// (at most [`STASH_MAX`], then the ring itself backs up), while
    /// responses keep flowing, so our RDMA reads finish even while the peer's
    /// sends wait for buffers.
    fn drain(&mut self, qpn: u32) -> bool {
        let mut did = self.drain_stash(qpn);
        loop {
            let Some(qp) = self.qps.get(&qpn) else {
                return did;
            };
            if !matches!(qp.state, QpState::Rtr | QpState::Rts) {
                return did;
            }
            let stalled = !qp.stash.is_empty();
            if stalled && qp.stash.len() >= STASH_MAX {
                return did;
            }
            let Some((rec, payload)) = qp.inbound.peek() else {
                return did;
            };
            qp.inbound.advance(&rec);
            did = true;
            match rec.kind {
                kind::RESP => self.on_resp(qpn, &rec, &payload),
                kind::SEND | kind::WRITE_REQ | kind::READ_REQ | kind::ATOMIC_REQ if stalled => {
                    if let Some(qp) = self.qps.get_mut(&qpn) {
                        qp.stash.push_back((rec, payload));
                    }
                }
                kind::SEND => {
                    if let Err(payload) = self.on_send(qpn, &rec, payload) {
                        if let Some(qp) = self.qps.get_mut(&qpn) {
                            qp.stash.push_back((rec, payload));
                        }
                    }
                }
                kind::WRITE_REQ | kind::READ_REQ => self.on_rdma_req(qpn, &rec, &payload),
                kind::ATOMIC_REQ => self.on_atomic_req(qpn, &rec, &payload),
                other => {
                    tracing::error!(target: "verbs", kind = other, "soft: unknown record dropped");
                }
            }
        }
    }

    /// Retries the stalled request stream of `qpn` in order.
    fn drain_stash(&mut self, qpn: u32) -> bool {
        let mut did = false;
        loop {
            let Some(qp) = self.qps.get_mut(&qpn) else {
                return did;
            };
            if !matches!(qp.state, QpState::Rtr | QpState::Rts) {
                return did;
            }
            let Some((rec, payload)) = qp.stash.pop_front() else {
                return did;
            };
            if rec.kind == kind::SEND {
                if let Err(payload) = self.on_send(qpn, &rec, payload) {
                    if let Some(qp) = self.qps.get_mut(&qpn) {
                        qp.stash.push_front((rec, payload));
                    }
                    return did;
                }
            } else if rec.kind == kind::ATOMIC_REQ {
                self.on_atomic_req(qpn, &rec, &payload);
            } else {
                self.on_rdma_req(qpn, &rec, &payload);
            }
            did = true;
        }
    }

    /// Delivers a SEND; gives the payload back when no receive buffer is
    /// available (RNR). A delivered SEND of a peer's work request is
    /// acknowledged, which completes it at the sender; a receive-side
    /// error fails both ends, as on hardware (the receive completes with
    /// the error, the sender gets the NAK: `RemInvReqErr` for a message
    /// longer than the buffer, `RemOpErr` otherwise; both QPs go to the
    /// error state).
    fn on_send(&mut self, qpn: u32, rec: &RecHdr, payload: Vec<u8>) -> Result<(), Vec<u8>> {
        let qp = &self.qps[&qpn];
        let (pd, recv_cq, srq) = (qp.pd, qp.recv_cq, qp.srq);
        let src_qp = qp.remote.map(|r| r.2).unwrap_or(0);
        let imm = (rec.flags & FLAG_IMM != 0).then_some(rec.imm);
        let buf = match srq {
            Some(s) => match self.srqs.get_mut(&s).map(|e| &mut e.kind) {
                Some(SrqKind::Tm { model, .. }) => {
                    model.message_arrived(Arrival {
                        qp_num: qpn,
                        src_qp,
                        message: payload,
                    });
                    self.ack_send(qpn, rec, WcStatus::Success);
                    return Ok(());
                }
                Some(SrqKind::Basic { q, .. }) => q.pop_front(),
                None => None,
            },
            None => self.qps.get_mut(&qpn).and_then(|q| q.rq.pop_front()),
        };
        let Some((wr_id, sges)) = buf else {
            return Err(payload);
        };
        let status = match self.mrs.scatter(pd, &sges, &payload) {
            Ok(()) => WcStatus::Success,
            Err(s) => s,
        };
        let wc = WorkCompletion {
            wr_id,
            status,
            opcode: WcOpcode::Recv,
            flags: if imm.is_some() {
                WcFlags::WITH_IMM
            } else {
                WcFlags::empty()
            },
            byte_len: payload.len() as u32,
            qp_num: qpn,
            src_qp,
            imm_data: imm,
            ..Default::default()
        };
        self.push_cq(recv_cq, wc, None);
        let ack = match status {
            WcStatus::Success => WcStatus::Success,
            WcStatus::LocLenErr => WcStatus::RemInvReqErr,
            _ => WcStatus::RemOpErr,
        };
        self.ack_send(qpn, rec, ack);
        if status != WcStatus::Success {
            // Also when the sender wanted no acknowledgement (a NIC FIN).
            self.enter_error(qpn, false);
        }
        Ok(())
    }

    /// Acknowledges a delivered SEND that wants it ([`FLAG_ACK`]).
    fn ack_send(&mut self, qpn: u32, rec: &RecHdr, status: WcStatus) {
        if rec.flags & FLAG_ACK == 0 {
            return;
        }
        self.respond(qpn, rec.req_id, status, Vec::new());
    }

    /// Answers request `req_id` of the peer with `status` (and `data`: an
    /// atomic's old value); a failed one (a NAK) moves this QP, the
    /// responder, to the error state after the answer is queued, as rxe's
    /// class C errors do.
    fn respond(&mut self, qpn: u32, req_id: u64, status: WcStatus, data: Vec<u8>) {
        let resp = RecHdr {
            kind: kind::RESP,
            req_id,
            status: status_code(status),
            ..Default::default()
        };
        self.send_record(qpn, resp, data, None);
        if status != WcStatus::Success {
            self.enter_error(qpn, false);
        }
    }

    /// Serves an RDMA request as the target: validate, then move the bytes.
    fn on_rdma_req(&mut self, qpn: u32, rec: &RecHdr, payload: &[u8]) {
        let read = rec.kind == kind::READ_REQ;
        let qp = &self.qps[&qpn];
        let peer_pid = qp.remote.map(|r| r.0);
        let iov: Vec<(u64, u64)> = payload
            .chunks_exact(16)
            .map(|c| {
                let mut a = [0u8; 8];
                let mut l = [0u8; 8];
                a.copy_from_slice(&c[..8]);
                l.copy_from_slice(&c[8..]);
                (u64::from_ne_bytes(a), u64::from_ne_bytes(l))
            })
            .collect();
        let status = if rec.flags & FLAG_REFUSE != 0 {
            WcStatus::RemAccessErr
        } else {
            self.mrs.serve_rdma(
                qp.pd, qp.access, rec.rkey, rec.addr, rec.len, read, peer_pid, &iov,
            )
        };
        self.respond(qpn, rec.req_id, status, Vec::new());
    }

    /// Serves an atomic request as the target: responder resources, then
    /// the rkey checks and the read-modify-write (`MrTable::serve_atomic`);
    /// the response carries the old value.
    fn on_atomic_req(&mut self, qpn: u32, rec: &RecHdr, payload: &[u8]) {
        let qp = &self.qps[&qpn];
        let word = |i: usize| {
            let mut b = [0u8; 8];
            if let Some(c) = payload.get(i * 8..i * 8 + 8) {
                b.copy_from_slice(c);
            }
            u64::from_ne_bytes(b)
        };
        let op = match word(0) {
            1 => Some(AtomicOp::FetchAdd(word(1))),
            2 => Some(AtomicOp::CmpSwap(word(1), word(2))),
            _ => None,
        };
        let result = match op {
            // No responder resources for atomics (max_dest_rd_atomic 0): an
            // Invalid Request NAK, as rxe's RESPST_ERR_TOO_MANY_RDMA_ATM_REQ.
            _ if qp.max_dest_rd_atomic == 0 => Err(WcStatus::RemInvReqErr),
            None => Err(WcStatus::RemInvReqErr),
            Some(op) => self
                .mrs
                .serve_atomic(qp.pd, qp.access, rec.rkey, rec.addr, op),
        };
        let (status, data) = match result {
            Ok(old) => (WcStatus::Success, old.to_ne_bytes().to_vec()),
            Err(s) => (s, Vec::new()),
        };
        self.respond(qpn, rec.req_id, status, data);
    }

    fn on_resp(&mut self, qpn: u32, rec: &RecHdr, payload: &[u8]) {
        let Some(qp) = self.qps.get_mut(&qpn) else {
            return;
        };
        let (send_cq, pd) = (qp.send_cq, qp.pd);
        let status = status_from_code(rec.status);
        let mut failed = status != WcStatus::Success;
        match qp.outstanding.remove(&rec.req_id) {
            Some(Outstanding::Send { wr_id, signaled }) => {
                if signaled || status != WcStatus::Success {
                    let wc = WorkCompletion {
                        wr_id,
                        status,
                        opcode: WcOpcode::Send,
                        qp_num: qpn,
                        ..Default::default()
                    };
                    self.push_cq(send_cq, wc, None);
                }
            }
            Some(Outstanding::Rdma {
                wr_id,
                opcode,
                signaled,
                len,
            }) => {
                if signaled || status != WcStatus::Success {
                    let wc = WorkCompletion {
                        wr_id,
                        status,
                        opcode,
                        byte_len: if opcode == WcOpcode::RdmaRead { len } else { 0 },
                        qp_num: qpn,
                        ..Default::default()
                    };
                    self.push_cq(send_cq, wc, None);
                }
            }
            Some(Outstanding::Atomic {
                wr_id,
                opcode,
                signaled,
                dst,
            }) => {
                let mut status = status;
                if status == WcStatus::Success {
                    // The old value, host order, lands in the local buffer
                    // only now: it is valid once the completion is polled.
                    let old = payload.get(..8).unwrap_or(&[]);
                    status = if old.len() == 8 {
                        match self.mrs.scatter(pd, &dst, old) {
                            Ok(()) => WcStatus::Success,
                            Err(s) => s,
                        }
                    } else {
                        WcStatus::GeneralErr
                    };
                    failed = status != WcStatus::Success;
                }
                if signaled || status != WcStatus::Success {
                    let wc = WorkCompletion {
                        wr_id,
                        status,
                        opcode,
                        byte_len: if status == WcStatus::Success { 8 } else { 0 },
                        qp_num: qpn,
                        ..Default::default()
                    };
                    self.push_cq(send_cq, wc, None);
                }
            }
            Some(Outstanding::TmRndv { srq, id }) => {
                if let Some(SrqEntry {
                    kind: SrqKind::Tm { model, .. },
                    ..
                }) = self.srqs.get_mut(&srq)
                {
                    model.rndv_finished(id, status);
                }
            }
            None => {
                tracing::warn!(target: "verbs", req = rec.req_id, "soft: response to unknown request");
                return;
            }
        }
        if failed {
            self.enter_error(qpn, true);
        }
    }

    /// Executes the actions of a TM-SRQ's model.
    fn run_tm(&mut self, srq: u32) -> bool {
        let mut did = false;
        loop {
            let Some(SrqEntry {
                pd,
                kind: SrqKind::Tm { model, cq },
            }) = self.srqs.get_mut(&srq)
            else {
                return did;
            };
            let (pd, cq) = (*pd, *cq);
            let Some(action) = model.poll_action() else {
                return did;
            };
            did = true;
            match action {
                TmAction::Scatter {
                    buffer,
                    message,
                    offset,
                    len,
                } => {
                    if let Err(status) =
                        self.mrs
                            .scatter(pd, &buffer, &message[offset..offset + len])
                    {
                        // The completion that follows reports the failure.
                        self.pending_scatter_error(srq, status);
                    }
                }
                TmAction::Complete { mut wc, tm_ref } => {
                    if let Some(s) = self.take_scatter_error(srq) {
                        wc.status = s;
                    }
                    self.push_cq(cq, wc, Some((srq, tm_ref)));
                }
                TmAction::RdmaRead {
                    id,
                    qp_num,
                    buffer,
                    rvh,
                } => {
                    let ok = self.qps.get(&qp_num).is_some_and(|q| q.outbound.is_some())
                        && self
                            .mrs
                            .check(pd, &buffer, AccessFlags::LOCAL_WRITE)
                            .is_ok();
                    if !ok {
                        if let Some(SrqEntry {
                            kind: SrqKind::Tm { model, .. },
                            ..
                        }) = self.srqs.get_mut(&srq)
                        {
                            model.rndv_finished(id, WcStatus::LocProtErr);
                        }
                        continue;
                    }
                    // Read exactly rvh.len bytes into the front of the buffer.
                    let mut left = u64::from(rvh.len);
                    let mut sges = Vec::new();
                    for s in &buffer {
                        if left == 0 {
                            break;
                        }
                        let n = left.min(u64::from(s.length));
                        sges.push(Sge {
                            length: n as u32,
                            ..*s
                        });
                        left -= n;
                    }
                    self.rdma_request(
                        qp_num,
                        &sges,
                        rvh.va,
                        rvh.rkey,
                        u64::from(rvh.len),
                        true,
                        Outstanding::TmRndv { srq, id },
                    );
                }
                TmAction::SendFin { qp_num, header } => {
                    let mut b = vec![0u8; header.header_len()];
                    if header.emit(&mut b).is_ok() {
                        let hdr = RecHdr {
                            kind: kind::SEND,
                            len: b.len() as u64,
                            ..Default::default()
                        };
                        self.send_record(qp_num, hdr, b, None);
                    }
                }
            }
        }
    }

    fn pending_scatter_error(&mut self, srq: u32, status: WcStatus) {
        self.scatter_errors.insert(srq, status);
    }

    fn take_scatter_error(&mut self, srq: u32) -> Option<WcStatus> {
        self.scatter_errors.remove(&srq)
    }

    // ---- SRQ ---------------------------------------------------------------------

    pub(crate) fn create_srq(
        &mut self,
        pd: u32,
        attr: &SrqAttr,
        cq: Option<u32>,
    ) -> Result<u32, VerbsError> {
        let kind = match attr.tm {
            None => SrqKind::Basic {
                q: VecDeque::new(),
                max_wr: attr.max_wr,
            },
            Some(tm) => {
                let cq = cq.ok_or_else(|| {
                    VerbsError::InvalidArgument("a TM-SRQ needs a completion queue".into())
                })?;
                if self.cfg.max_num_tags == 0 {
                    return Err(VerbsError::verb("ibv_create_srq_ex", libc::EOPNOTSUPP));
                }
                self.check_tm_srq(attr)?;
                let cfg = TmConfig {
                    max_num_tags: tm.max_num_tags,
                    max_ops: tm.max_ops,
                    max_rndv_hdr_size: self.cfg.max_rndv_hdr_size,
                    max_untagged: attr.max_wr,
                    sync_mode: self.cfg.sync_mode,
                };
                SrqKind::Tm {
                    model: Box::new(TmListModel::with_params(cfg, self.cfg.nic_params())),
                    cq,
                }
            }
        };
        let id = self.alloc_id();
        self.srqs.insert(id, SrqEntry { pd, kind });
        Ok(id)
    }

    /// The limits mlx5 puts on a TM-SRQ (`EINVAL` otherwise): the requested
    /// capacities within `tm_caps`; the hidden command QP, created with
    /// `max_send_wr = max_ops` and 4 basic blocks per work request
    /// (rdma-core `providers/mlx5/verbs.c`: `create_cmd_qp`,
    /// `mlx5_calc_sq_size`), within `max_qp_wr`; at least
    /// [`TM_MIN_UNTAGGED`] untagged buffers (UCX's rule).
    fn check_tm_srq(&self, attr: &SrqAttr) -> Result<(), VerbsError> {
        let Some(tm) = attr.tm else {
            return Ok(());
        };
        let einval = |why: &str| {
            tracing::debug!(target: "verbs", why, max_ops = tm.max_ops, max_num_tags = tm.max_num_tags, max_wr = attr.max_wr, "soft: TM-SRQ refused");
            Err(VerbsError::verb("ibv_create_srq_ex", libc::EINVAL))
        };
        if tm.max_num_tags == 0 || tm.max_num_tags > self.cfg.max_num_tags {
            return einval("max_num_tags outside tm_caps");
        }
        if tm.max_ops == 0 || tm.max_ops > self.cfg.max_ops {
            return einval("max_ops outside tm_caps");
        }
        if cmd_qp_wqebbs(tm.max_ops) > u64::from(self.cfg.max_qp_wr) {
            return einval("command QP larger than max_qp_wr");
        }
        if attr.max_wr < TM_MIN_UNTAGGED {
            return einval("fewer than 33 untagged buffers");
        }
        Ok(())
    }

    pub(crate) fn post_srq_recv(
        &mut self,
        srq: u32,
        wr_id: u64,
        sges: &[Sge],
    ) -> Result<(), VerbsError> {
        let e = self
            .srqs
            .get_mut(&srq)
            .ok_or_else(|| VerbsError::post("ibv_post_srq_recv", 0, libc::EINVAL))?;
        match &mut e.kind {
            SrqKind::Basic { q, max_wr } => {
                if q.len() as u32 >= *max_wr {
                    return Err(VerbsError::post("ibv_post_srq_recv", 0, libc::ENOMEM));
                }
                q.push_back((wr_id, sges.to_vec()));
            }
            SrqKind::Tm { model, .. } => {
                let len = sum_len(sges).min(u64::from(u32::MAX)) as u32;
                model
                    .post_untagged(wr_id, sges.to_vec(), len)
                    .map_err(|e| VerbsError::post("ibv_post_srq_recv", 0, e.errno()))?;
            }
        }
        Ok(())
    }
}

/// Untagged receive buffers a TM-SRQ must be created with, at least (UCX,
/// `src/uct/ib/mlx5/ib_mlx5.h`: `UCT_IB_MLX5_XRQ_MIN_UWQ_POST`; what mlx5
/// hardware does with fewer is not documented).
pub const TM_MIN_UNTAGGED: u32 = 33;

/// Send-queue basic blocks of mlx5's command QP for `max_ops` operations:
/// each work request rounds to 256 bytes = 4 blocks of 64 bytes, the queue to
/// a power of two.
fn cmd_qp_wqebbs(max_ops: u32) -> u64 {
    (u64::from(max_ops) * 4).next_power_of_two()
}

/// Wire code of a completion status in a RESP record.
fn status_code(s: WcStatus) -> u32 {
    match s {
        WcStatus::Success => 0,
        WcStatus::RemAccessErr => 1,
        WcStatus::RemOpErr => 2,
        WcStatus::RemInvReqErr => 4,
        _ => 3,
    }
}

fn status_from_code(c: u32) -> WcStatus {
    match c {
        0 => WcStatus::Success,
        1 => WcStatus::RemAccessErr,
        2 => WcStatus::RemOpErr,
        4 => WcStatus::RemInvReqErr,
        _ => WcStatus::GeneralErr,
    }
}
