//! The simulation shared by the split matcher's tests: split matcher + soft NIC model
//! (`tmpi_verbs::soft::tm::TmListModel`, deterministic mode) + reference matcher.
//!
//! The harness plays the pml: it executes the matcher's actions on the model, feeds the
//! model's completions back in CQ order (holding them as long as the test likes), and checks
//! every outcome the matcher commits against the reference matcher fed the same operations in
//! the matcher's commit order, after checking that order is a legal one: posts in program
//! order, messages of one source in arrival order, each operation committed exactly once.
#![allow(dead_code)]

use std::collections::{HashMap, VecDeque};

use tmpi_tm_engine::reference::ReferenceMatcher;
use tmpi_tm_engine::split::{
    NicAction, NicEvent, NicId, NicTag, RecvInfo, SplitConfig, SplitError, SplitEvent, SplitKey,
    SplitMatcher,
};
use tmpi_tm_engine::{Envelope, RecvSpec, SourceSpec, TagSpec};
use tmpi_verbs::soft::tm::{Arrival, TmAction, TmConfig, TmListModel, TmOp, TmRef};
use tmpi_verbs::wire::{Rvh, TagHeader, Tmh, TmhOpcode};
use tmpi_verbs::{WcFlags, WcOpcode, WcStatus, WorkCompletion};

/// splitmix64: small, fast, reproducible.
#[derive(Clone, Debug)]
pub struct Rng(pub u64);

impl Rng {
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.next_u64() % n
        }
    }
    pub fn pct(&mut self, p: u64) -> bool {
        self.below(100) < p
    }
}

/// btl-openib's tag layout: context 16 bits | source 24 bits | tag 24 bits (two's complement,
/// bit 23 set for internal tags).
pub fn pack(env: &Envelope) -> u64 {
    (u64::from(env.context & 0xffff) << 48)
        | (u64::from(env.source & 0x00ff_ffff) << 24)
        | (env.tag as u32 as u64 & 0x00ff_ffff)
}

/// The NIC tag and mask of a receive.
pub fn nic_tag(spec: &RecvSpec) -> NicTag {
    let mut tag = u64::from(spec.context & 0xffff) << 48;
    let mut mask = 0xffffu64 << 48;
    if let SourceSpec::Rank(s) = spec.source {
        tag |= u64::from(s) << 24;
        mask |= 0x00ff_ffff << 24;
    }
    match spec.tag {
        TagSpec::Tag(t) => {
            tag |= t as u32 as u64 & 0x00ff_ffff;
            mask |= 0x00ff_ffff;
        }
        // The internal bit stays in the mask with value 0: ANY_TAG never matches tag < 0.
        TagSpec::Any => mask |= 1 << 23,
    }
    NicTag { tag, mask }
}

const DEL_BIT: u64 = 1 << 62;
/// The buffer id of every tagged buffer (their contents are not checked).
const TAGGED_BUF: u32 = u32::MAX;
const SYNC_WR: u64 = 1 << 61;
const UNTAGGED_BASE: u64 = 1 << 60;

/// One operation of a program.
#[allow(clippy::enum_variant_names)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// Post a receive (the n-th post has handle n); `offload`: the pml says it may go to the
    /// NIC; `len`: its buffer size.
    Post {
        spec: RecvSpec,
        offload: bool,
        len: usize,
    },
    /// A message arrives (the n-th arrival has handle n); `rndv`: a rendezvous request.
    Arrive {
        env: Envelope,
        rndv: bool,
    },
    /// A message arrives through the software path (`software`) whatever its source.
    ArriveVia {
        env: Envelope,
        rndv: bool,
        software: bool,
    },
    Probe(RecvSpec),
    MProbe(RecvSpec),
    /// Cancel the receive of the `n % posts`-th post.
    Cancel(usize),
    /// NIC scheduling: execute the oldest held operation / arrival.
    ReleaseOp,
    ReleaseArrival,
    /// Let the pml poll this many completions.
    Deliver(usize),
    /// Finish the oldest rendezvous read.
    FinishRead,
    /// The pml pulls and posts the actions.
    PullActions,
}

/// A divergence or an illegal commit.
pub type Fail = String;

pub struct Sim {
    pub split: SplitMatcher<u64, u64>,
    pub nic: TmListModel<u32, Vec<u8>>,
    pub nic_sources: Vec<bool>,
    reference: ReferenceMatcher<u64, u64>,
    ref_keys: HashMap<u64, u64>,
    handles: HashMap<u64, u32>,
    cq: VecDeque<(WorkCompletion, TmRef)>,
    scattered: HashMap<u32, Vec<u8>>,
    reads: VecDeque<u64>,
    next_untagged: u32,
    pub specs: Vec<RecvSpec>,
    keys: Vec<SplitKey>,
    pub msgs: Vec<Envelope>,
    next_post_commit: u64,
    arrival_committed: Vec<bool>,
    /// Messages not consumed yet, per source.
    waiting: HashMap<u32, std::collections::BTreeSet<u64>>,
    cancel_pending: HashMap<u64, u32>,
    nic_msg: Option<u64>,
    /// Tagged buffers whose match completion came without the data: their
    /// next completion is the data's (mlx5's two-completion forms).
    data_pending: std::collections::HashSet<u64>,
    pub trace: Vec<String>,
    pub tracing: bool,
    pub max_live_seen: u32,
    /// Every outcome committed, in order.
    pub events: Vec<SplitEvent<u64, u64>>,
    /// Every action posted on the NIC, in order.
    pub actions: Vec<NicAction<u64>>,
    /// ADD completions that carried `SYNC_REQ`.
    pub sync_reqs: u64,
    /// DEL completions with `TM_ERR`.
    pub tm_errs: u64,
}

impl Sim {
    pub fn new(split_cfg: SplitConfig, nic_cfg: TmConfig, nic_sources: Vec<bool>) -> Self {
        let mut nic = TmListModel::new(nic_cfg);
        nic.hold_ops(true);
        nic.hold_arrivals(true);
        let mut s = Sim {
            split: SplitMatcher::new(split_cfg).expect("valid config"),
            nic,
            nic_sources,
            reference: ReferenceMatcher::new(),
            ref_keys: HashMap::new(),
            handles: HashMap::new(),
            cq: VecDeque::new(),
            scattered: HashMap::new(),
            reads: VecDeque::new(),
            next_untagged: 0,
            specs: Vec::new(),
            keys: Vec::new(),
            msgs: Vec::new(),
            next_post_commit: 0,
            arrival_committed: Vec::new(),
            waiting: HashMap::new(),
            cancel_pending: HashMap::new(),
            nic_msg: None,
            data_pending: std::collections::HashSet::new(),
            trace: Vec::new(),
            tracing: false,
            max_live_seen: 0,
            events: Vec::new(),
            actions: Vec::new(),
            sync_reqs: 0,
            tm_errs: 0,
        };
        for _ in 0..64 {
            s.post_untagged();
        }
        s
    }

    fn post_untagged(&mut self) {
        let b = self.next_untagged;
        self.next_untagged += 1;
        self.nic
            .post_untagged(UNTAGGED_BASE + u64::from(b), b, 4096)
            .expect("untagged buffer");
    }

    fn log(&mut self, s: impl FnOnce() -> String) {
        if self.tracing {
            self.trace.push(s());
        }
    }

    /// Apply every committed outcome to the reference and compare.
    fn commit(&mut self) -> Result<(), Fail> {
        while let Some(ev) = self.split.poll_event() {
            self.log(|| format!("  event {ev:?}"));
            self.events.push(ev.clone());
            match ev {
                SplitEvent::Posted { recv, .. } => {
                    self.check_post_order(recv)?;
                    match self.reference.post_recv(self.specs[recv as usize], recv) {
                        Err(k) => {
                            self.ref_keys.insert(recv, k);
                        }
                        Ok(m) => {
                            return Err(format!("recv {recv} queued, reference matched {m:?}"))
                        }
                    }
                }
                SplitEvent::Matched {
                    recv,
                    envelope,
                    msg,
                    at_post: true,
                } => {
                    self.check_post_order(recv)?;
                    self.check_order(&self.specs[recv as usize].clone(), msg, true)?;
                    match self.reference.post_recv(self.specs[recv as usize], recv) {
                        Ok((e, m)) if e == envelope && m == msg => {}
                        other => {
                            return Err(format!(
                                "recv {recv} matched msg {msg} at post, reference {other:?}"
                            ))
                        }
                    }
                }
                SplitEvent::Matched {
                    recv,
                    envelope,
                    msg,
                    at_post: false,
                } => {
                    if envelope != self.msgs[msg as usize] {
                        return Err(format!("msg {msg} reported with envelope {envelope:?}"));
                    }
                    self.check_arrival(msg)?;
                    self.check_order(&self.specs[recv as usize].clone(), msg, true)?;
                    match self.reference.arrive(envelope, msg) {
                        Some(r) if r == recv => {}
                        other => {
                            return Err(format!(
                                "msg {msg} matched recv {recv} in software, reference {other:?}"
                            ))
                        }
                    }
                }
                SplitEvent::NicMatched { recv, envelope, .. } => {
                    let msg = self
                        .nic_msg
                        .take()
                        .ok_or("NicMatched without a NIC match")?;
                    if envelope != self.msgs[msg as usize] {
                        return Err(format!("NIC msg {msg} reported as {envelope:?}"));
                    }
                    self.check_arrival(msg)?;
                    self.check_order(&self.specs[recv as usize].clone(), msg, true)?;
                    match self.reference.arrive(envelope, msg) {
                        Some(r) if r == recv => {}
                        other => {
                            return Err(format!(
                                "msg {msg} matched recv {recv} by the NIC, reference {other:?}"
                            ))
                        }
                    }
                }
                SplitEvent::NicDataDone { .. } => {}
                SplitEvent::Unexpected { envelope, msg } => {
                    self.check_arrival(msg)?;
                    if let Some(r) = self.reference.arrive(envelope, msg) {
                        return Err(format!("msg {msg} unexpected, reference matched recv {r}"));
                    }
                }
                SplitEvent::Cancelled { recv } => {
                    self.take_cancel(recv)?;
                    let k = self.ref_keys.get(&recv).copied();
                    match k.and_then(|k| self.reference.cancel(k)) {
                        Some(r) if r == recv => {}
                        other => return Err(format!("recv {recv} cancelled, reference {other:?}")),
                    }
                }
                SplitEvent::CancelFailed { recv } => {
                    self.take_cancel(recv)?;
                    let k = self.ref_keys.get(&recv).copied();
                    if let Some(r) = k.and_then(|k| self.reference.cancel(k)) {
                        return Err(format!(
                            "cancel of recv {recv} failed, reference removed {r}"
                        ));
                    }
                }
                other => return Err(format!("unexpected event {other:?}")),
            }
        }
        Ok(())
    }

    fn check_post_order(&mut self, recv: u64) -> Result<(), Fail> {
        if recv != self.next_post_commit {
            return Err(format!(
                "post {recv} committed out of program order (next {})",
                self.next_post_commit
            ));
        }
        self.next_post_commit += 1;
        Ok(())
    }

    fn check_arrival(&mut self, msg: u64) -> Result<(), Fail> {
        if std::mem::replace(&mut self.arrival_committed[msg as usize], true) {
            return Err(format!("msg {msg} committed twice"));
        }
        Ok(())
    }

    /// MPI non-overtaking, checked whenever a receive (or a probe) of `spec` takes message
    /// `msg`: no earlier message of the same source that `spec` matches may still be waiting
    /// (not yet committed, or queued unexpected).
    fn check_order(&mut self, spec: &RecvSpec, msg: u64, consume: bool) -> Result<(), Fail> {
        let src = self.msgs[msg as usize].source;
        let waiting = self.waiting.entry(src).or_default();
        for a in waiting.range(..msg) {
            let env = self.msgs[*a as usize];
            if spec.matches(&env) {
                return Err(format!(
                    "{spec} took msg {msg} while earlier msg {a} of source {src} waits"
                ));
            }
        }
        if consume {
            waiting.remove(&msg);
        }
        Ok(())
    }

    fn take_cancel(&mut self, recv: u64) -> Result<(), Fail> {
        match self.cancel_pending.get_mut(&recv) {
            Some(n) if *n > 0 => {
                *n -= 1;
                Ok(())
            }
            _ => Err(format!("cancel outcome for recv {recv} never cancelled")),
        }
    }

    /// Post the split matcher's actions on the model (a refusal is a capacity bug).
    pub fn pull_actions(&mut self) -> Result<(), Fail> {
        while let Some(a) = self.split.poll_action() {
            self.log(|| format!("  action {a:?}"));
            self.actions.push(a);
            let r = match a {
                NicAction::Add {
                    id,
                    tag,
                    unexpected_cnt,
                    ..
                } => self
                    .nic
                    .post_op(
                        id.0,
                        TmOp::Add {
                            recv_wr_id: id.0,
                            buffer: TAGGED_BUF,
                            len: 4096,
                            tag: tag.tag,
                            mask: tag.mask,
                        },
                        true,
                        Some(unexpected_cnt),
                    )
                    .map(|h| {
                        self.handles.insert(id.0, h);
                    }),
                NicAction::Del { id, unexpected_cnt } => {
                    let h = *self.handles.get(&id.0).ok_or("DEL of an id never added")?;
                    self.nic
                        .post_op(
                            id.0 | DEL_BIT,
                            TmOp::Del { handle: h },
                            true,
                            Some(unexpected_cnt),
                        )
                        .map(|_| ())
                }
                NicAction::Sync { unexpected_cnt } => self
                    .nic
                    .post_op(SYNC_WR, TmOp::Sync, true, Some(unexpected_cnt))
                    .map(|_| ()),
            };
            r.map_err(|e| format!("NIC refused {a:?}: {e}"))?;
            self.max_live_seen = self.max_live_seen.max(self.split.live_nic());
            if self.split.live_nic() > self.split.config().max_num_tags {
                return Err("live handles above max_num_tags".into());
            }
        }
        Ok(())
    }

    /// Move the model's outputs into the CQ (and the read queue).
    fn collect(&mut self) {
        while let Some(a) = self.nic.poll_action() {
            match a {
                TmAction::Scatter {
                    buffer, message, ..
                } => {
                    if buffer != TAGGED_BUF {
                        self.scattered.insert(buffer, message);
                    }
                }
                TmAction::Complete { wc, tm_ref } => self.cq.push_back((wc, tm_ref)),
                TmAction::RdmaRead { id, .. } => self.reads.push_back(id),
                TmAction::SendFin { .. } => {}
            }
        }
    }

    pub fn release_op(&mut self) {
        if self.nic.release_op() {
            self.log(|| "  nic: op executed".into());
        }
        self.collect();
    }

    pub fn release_arrival(&mut self) {
        if self.nic.release_arrival() {
            self.log(|| "  nic: arrival executed".into());
        }
        self.collect();
    }

    pub fn finish_read(&mut self) {
        if let Some(id) = self.reads.pop_front() {
            self.nic.rndv_finished(id, WcStatus::Success);
            self.collect();
        }
    }

    /// The pml polls `n` completions.
    pub fn deliver(&mut self, n: usize) -> Result<(), Fail> {
        for _ in 0..n {
            let Some((wc, tm_ref)) = self.cq.pop_front() else {
                break;
            };
            self.nic.completion_polled(tm_ref);
            self.log(|| {
                format!(
                    "  cq {:?} {:?} wr {:#x} flags {:?}",
                    wc.opcode, wc.status, wc.wr_id, wc.flags
                )
            });
            if wc.opcode == WcOpcode::TmAdd && wc.flags.contains(WcFlags::TM_SYNC_REQ) {
                self.sync_reqs += 1;
            }
            let r = match wc.opcode {
                WcOpcode::TmAdd => self.split.nic_event(NicEvent::Added {
                    id: NicId(wc.wr_id),
                    sync_req: wc.flags.contains(WcFlags::TM_SYNC_REQ),
                }),
                WcOpcode::TmDel => {
                    let id = NicId(wc.wr_id & !DEL_BIT);
                    match wc.status {
                        WcStatus::Success => self.split.nic_event(NicEvent::Deleted { id }),
                        WcStatus::TmErr => {
                            self.tm_errs += 1;
                            self.split.nic_event(NicEvent::DelConsumed { id })
                        }
                        s => return Err(format!("DEL status {s:?}")),
                    }
                }
                WcOpcode::TmSync => self.split.nic_event(NicEvent::Synced),
                // The second completion of a two-completion match (DATA_VALID, or the
                // cancelled-rendezvous form whose opcode reads as a plain receive): the tag
                // information of the first one stands.
                WcOpcode::TmRecv | WcOpcode::Recv if self.data_pending.remove(&wc.wr_id) => {
                    self.split.nic_event(NicEvent::DataDone {
                        id: NicId(wc.wr_id),
                    })
                }
                WcOpcode::TmRecv if wc.flags.contains(WcFlags::TM_MATCH) => {
                    let info = wc.tm_info.ok_or("match without tm_info")?;
                    let msg = u64::from(info.priv_);
                    self.nic_msg = Some(msg);
                    let complete = wc.flags.contains(WcFlags::TM_DATA_VALID);
                    if !complete {
                        self.data_pending.insert(wc.wr_id);
                    }
                    self.split.nic_event(NicEvent::Matched {
                        id: NicId(wc.wr_id),
                        envelope: self.msgs[msg as usize],
                        complete,
                    })
                }
                WcOpcode::TmRecv => {
                    let b = (wc.wr_id - UNTAGGED_BASE) as u32;
                    let bytes = self.scattered.remove(&b).ok_or("unexpected without data")?;
                    let tmh = Tmh::parse(&bytes).map_err(|e| e.to_string())?;
                    let msg = u64::from(tmh.app_ctx);
                    self.post_untagged();
                    self.split.nic_unexpected(self.msgs[msg as usize], msg)
                }
                other => return Err(format!("completion {other:?}")),
            };
            r.map_err(|e: SplitError| format!("split matcher error: {e}"))?;
            self.commit()?;
            if self.nic_msg.is_some() {
                return Err("NIC match without its event".into());
            }
        }
        Ok(())
    }

    pub fn cq_len(&self) -> usize {
        self.cq.len()
    }

    /// Run one program operation.
    pub fn op(&mut self, op: Op) -> Result<(), Fail> {
        self.log(|| format!("{op:?}"));
        match op {
            Op::Post { spec, offload, len } => {
                let recv = self.specs.len() as u64;
                self.specs.push(spec);
                let info = if offload {
                    let t = nic_tag(&spec);
                    RecvInfo::offloadable(len, t.tag, t.mask)
                } else {
                    RecvInfo::software(len)
                };
                let key = self
                    .split
                    .post_recv(spec, recv, info)
                    .map_err(|e| format!("post failed: {e}"))?;
                self.keys.push(key);
            }
            Op::Arrive { env, rndv } | Op::ArriveVia { env, rndv, .. } => {
                let software = matches!(op, Op::ArriveVia { software: true, .. });
                let msg = self.msgs.len() as u64;
                self.msgs.push(env);
                self.arrival_committed.push(false);
                self.waiting.entry(env.source).or_default().insert(msg);
                if self.nic_sources[env.source as usize] && !software {
                    let tmh = Tmh {
                        opcode: if rndv {
                            TmhOpcode::Rndv
                        } else {
                            TmhOpcode::Eager
                        },
                        app_ctx: msg as u32,
                        tag: pack(&env),
                    };
                    let bytes = if rndv {
                        let h = TagHeader {
                            tmh,
                            // Every fourth request is longer than the tagged buffer: the NIC
                            // hands it to software in one of mlx5's three forms.
                            rvh: Some(Rvh {
                                va: 0x1000,
                                rkey: 7,
                                len: if msg % 4 == 3 { 8192 } else { 512 },
                            }),
                        };
                        let mut b = vec![0u8; h.header_len()];
                        h.emit(&mut b).map_err(|e| e.to_string())?;
                        b
                    } else {
                        // Every third eager message spans two packets of the model's 1 KiB
                        // MTU: a match completion first, the data completion later.
                        let mut b = tmh.to_bytes().to_vec();
                        b.resize(b.len() + if msg % 3 == 2 { 1500 } else { 8 }, 0xab);
                        b
                    };
                    self.nic.message_arrived(Arrival {
                        qp_num: 1 + env.source,
                        src_qp: 100 + env.source,
                        message: bytes,
                    });
                } else {
                    self.split
                        .arrive(env, msg)
                        .map_err(|e| format!("arrive failed: {e}"))?;
                }
            }
            Op::Probe(spec) | Op::MProbe(spec) => {
                let m = matches!(op, Op::MProbe(_));
                let got = loop {
                    let r = if m {
                        self.split.mprobe(&spec)
                    } else {
                        self.split.probe(&spec)
                    };
                    match r {
                        Ok(x) => break x,
                        Err(SplitError::Busy) => self.unstall()?,
                        Err(e) => return Err(format!("probe: {e}")),
                    }
                };
                let want = if m {
                    self.reference.mprobe(&spec)
                } else {
                    self.reference.probe(&spec)
                };
                if got != want {
                    return Err(format!("{op:?}: got {got:?}, reference {want:?}"));
                }
                if let Some((_, msg)) = got {
                    self.check_order(&spec, msg, m)?;
                }
            }
            Op::Cancel(n) => {
                if !self.keys.is_empty() {
                    let recv = (n % self.keys.len()) as u64;
                    if self.split.cancel(self.keys[recv as usize]) {
                        *self.cancel_pending.entry(recv).or_insert(0) += 1;
                    } else if self.cancel_pending.get(&recv).is_some_and(|n| *n > 0) {
                        // A cancel of it is in progress: its one outcome is still to come.
                    } else {
                        // Ended before (or its cancel was answered): the reference must agree
                        // it is not queued.
                        let k = self.ref_keys.get(&recv).copied();
                        if let Some(r) = k.and_then(|k| self.reference.cancel(k)) {
                            return Err(format!(
                                "cancel of ended recv {recv}: reference removed {r}"
                            ));
                        }
                        if (recv) >= self.next_post_commit {
                            return Err(format!(
                                "recv {recv} reported ended before its post committed"
                            ));
                        }
                    }
                }
            }
            Op::ReleaseOp => self.release_op(),
            Op::ReleaseArrival => self.release_arrival(),
            Op::Deliver(n) => self.deliver(n)?,
            Op::FinishRead => self.finish_read(),
            Op::PullActions => self.pull_actions()?,
        }
        self.commit()
    }

    /// Progress the NIC until the matcher no longer waits for a DEL (what a pml does when a
    /// probe answers `Busy`).
    pub fn unstall(&mut self) -> Result<(), Fail> {
        for _ in 0..100_000 {
            if !self.split.is_stalled() {
                return Ok(());
            }
            self.pull_actions()?;
            self.release_op();
            if self.cq.is_empty() {
                self.release_arrival();
                self.finish_read();
            }
            self.deliver(1)?;
        }
        Err("matcher stays stalled".into())
    }

    /// Run everything to quiescence, then check the end state against the reference.
    pub fn finish(&mut self) -> Result<(), Fail> {
        self.settle()?;
        if self.next_post_commit != self.specs.len() as u64 {
            return Err(format!(
                "{} of {} posts committed",
                self.next_post_commit,
                self.specs.len()
            ));
        }
        if let Some(m) = self.arrival_committed.iter().position(|c| !c) {
            return Err(format!("msg {m} never committed"));
        }
        if self.cancel_pending.values().any(|n| *n > 0) {
            return Err(format!(
                "a cancel never answered: {:?}",
                self.cancel_pending
            ));
        }
        let ours: Vec<u64> = self.split.posted_recvs().iter().map(|(r, _)| *r).collect();
        let theirs: Vec<u64> = self.reference.posted().map(|(_, r)| *r).collect();
        if ours != theirs {
            return Err(format!("queued receives {ours:?}, reference {theirs:?}"));
        }
        if self.split.unexpected_len() != self.reference.unexpected().len() {
            return Err("unexpected depths differ".into());
        }
        let nic_held = self.split.posted_recvs().iter().filter(|(_, n)| *n).count();
        if self.nic.entries().len() != nic_held || self.split.live_nic() as usize != nic_held {
            return Err(format!(
                "NIC list {} entries, shadow {}, live handles {}",
                self.nic.entries().len(),
                nic_held,
                self.split.live_nic()
            ));
        }
        if self.nic.live_handles() != nic_held {
            return Err("NIC handles leaked".into());
        }
        // The unexpected queues hold the same messages in the same order per envelope.
        let remaining: Vec<(Envelope, u64)> = self.reference.unexpected().to_vec();
        for (env, _) in remaining {
            self.op(Op::Post {
                spec: RecvSpec::exact(env.context, env.source, env.tag),
                offload: false,
                len: 64,
            })?;
        }
        self.check_prefix()?;
        Ok(())
    }

    /// Release everything until nothing moves.
    pub fn settle(&mut self) -> Result<(), Fail> {
        for _ in 0..1_000_000 {
            self.pull_actions()?;
            self.nic.hold_ops(false);
            self.nic.hold_arrivals(false);
            self.collect();
            self.nic.hold_ops(true);
            self.nic.hold_arrivals(true);
            while !self.reads.is_empty() {
                self.finish_read();
            }
            if self.cq.is_empty()
                && self.nic.queued_ops() == 0
                && self.nic.queued_arrivals() == 0
                && self.split.is_quiescent()
            {
                return Ok(());
            }
            let n = self.cq.len();
            self.deliver(n)?;
        }
        Err("no quiescence".into())
    }

    /// DESIGN §3 inv. 3 over the matcher's own view: for every envelope, the offloaded queued
    /// receives are a prefix of the queued receives that match it.
    pub fn check_prefix(&self) -> Result<(), Fail> {
        let q = self.split.posted_recvs();
        for (i, (a, a_nic)) in q.iter().enumerate() {
            if *a_nic {
                continue;
            }
            let sa = self.specs[*a as usize];
            for (b, b_nic) in &q[i + 1..] {
                if *b_nic && overlap(&sa, &self.specs[*b as usize]) {
                    return Err(format!("offloaded recv {b} behind software recv {a}"));
                }
            }
        }
        Ok(())
    }
}

/// Some envelope matches both.
pub fn overlap(a: &RecvSpec, b: &RecvSpec) -> bool {
    if a.context != b.context {
        return false;
    }
    let src = match (a.source, b.source) {
        (SourceSpec::Rank(x), SourceSpec::Rank(y)) => x == y,
        _ => true,
    };
    let tag = match (a.tag, b.tag) {
        (TagSpec::Tag(x), TagSpec::Tag(y)) => x == y,
        (TagSpec::Tag(x), TagSpec::Any) | (TagSpec::Any, TagSpec::Tag(x)) => x >= 0,
        (TagSpec::Any, TagSpec::Any) => true,
    };
    src && tag
}
