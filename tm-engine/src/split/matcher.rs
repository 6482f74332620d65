//! The split matcher's state machine (see the module documentation for the policy and the
//! invariants each step keeps).

use std::collections::VecDeque;

use crate::engine::Engine;
use crate::split::overlap::SoftIndex;
use crate::split::types::{
    NicAction, NicBuffer, NicEvent, NicId, NicTag, RecvInfo, SplitConfig, SplitError, SplitEvent,
    SplitKey, SplitStats,
};
use crate::types::{
    ArriveOutcome, CancelOutcome, EngineError, Envelope, PostOutcome, RecvKey, RecvSpec, SourceSpec,
};

/// The NIC side of an offloaded receive (its shadow entry).
#[derive(Debug, Clone, Copy)]
struct Shadow<M> {
    tag: NicTag,
    buffer: NicBuffer,
    /// The ADD was pulled by the pml (before: retractable without the NIC).
    handed_out: bool,
    /// The ADD's completion has not been fed back yet.
    add_pending: bool,
    /// The entry is in the NIC list as far as software knows (not matched, not deleted).
    in_list: bool,
    /// A DEL is queued (pulled or not).
    del_queued: bool,
    /// The queued DEL was pulled.
    del_handed: bool,
    /// Cancel requested: answered when the DEL settles.
    cancel: bool,
    /// A software match waiting for the DEL: the message it would take.
    pending_msg: Option<(Envelope, M, bool)>,
    /// The NIC matched a rendezvous whose data completion has not come yet.
    data_pending: bool,
}

#[derive(Debug, Clone, Copy)]
enum Place<M> {
    /// Posted while inputs wait: not in the engine yet.
    Deferred,
    /// In the engine only.
    Software,
    /// In the engine (until matched) and in the NIC list (or on its way).
    Nic(Shadow<M>),
}

#[derive(Debug, Clone, Copy)]
struct Rec<R, M> {
    generation: u32,
    live: bool,
    recv: Option<R>,
    spec: RecvSpec,
    info: RecvInfo,
    /// The engine's key while the receive is queued there.
    key: Option<RecvKey>,
    place: Place<M>,
    /// A cancel was asked for (its one outcome event is pending or delivered).
    cancel_asked: bool,
}

#[derive(Debug, Clone, Copy)]
enum Queued {
    Add(u32, u32),
    Del(u32, u32),
    Sync,
}

#[derive(Debug, Clone, Copy)]
enum Input<R, M> {
    Post(u32),
    Arrive(Envelope, M, bool),
    Cancel(SplitKey, R),
}

/// The split software/hardware matcher: the software [`Engine`] plus the shadow list of the
/// receives the NIC holds, in quinn-proto style (inputs are method calls, outputs are pulled
/// with [`SplitMatcher::poll_event`] and [`SplitMatcher::poll_action`]). No I/O, no threads:
/// `&mut self` on every call is the critical section covering both lists; the pml holds its
/// matching lock across each call **and** across pulling actions and posting them to the NIC
/// (so that list operations reach the NIC in the order they were pulled).
///
/// `R` is the caller's receive handle, `M` its message (fragment) handle.
#[derive(Debug)]
pub struct SplitMatcher<R, M> {
    config: SplitConfig,
    engine: Engine<u32, M>,
    recs: Vec<Rec<R, M>>,
    free: Vec<u32>,
    soft: SoftIndex,
    actions: VecDeque<Queued>,
    events: VecDeque<SplitEvent<R, M>>,
    deferred: VecDeque<Input<R, M>>,
    /// The receive whose DEL the inputs wait for.
    stall: Option<u32>,
    /// 1 while the stalled message was counted by the NIC and its DEL is not pulled yet.
    stall_excl: u32,
    /// Handles reserved (ADD queued or posted, until every completion came back).
    live_nic: u32,
    /// Operations pulled whose completion has not been fed back.
    ops_outstanding: u32,
    /// NIC-unexpected messages processed (wrapping; the NIC compares the low 16 bits).
    sw_cnt: u32,
    /// The count carried by the last operation pulled.
    carried: u32,
    sync_queued: bool,
    /// `TAG_SYNC`s pulled whose completion has not come back.
    syncs_in_flight: u32,
    stats: SplitStats,
}

impl<R: Copy, M: Copy> SplitMatcher<R, M> {
    /// A split matcher with this configuration.
    pub fn new(config: SplitConfig) -> Result<Self, SplitError> {
        if config.sync_interval == 0 || config.sync_interval > 1 << 14 {
            return Err(SplitError::InvalidConfig(
                "sync_interval must be in 1..=16384",
            ));
        }
        if config.offload && (config.max_num_tags == 0 || config.max_ops == 0) {
            return Err(SplitError::InvalidConfig(
                "offload needs max_num_tags > 0 and max_ops > 0",
            ));
        }
        if config.max_num_tags > 1 << 30 {
            return Err(SplitError::InvalidConfig("max_num_tags above 2^30"));
        }
        let engine = Engine::with_config(config.engine)?;
        tracing::debug!(?config, "tm-engine: new split matcher");
        Ok(SplitMatcher {
            config,
            engine,
            recs: Vec::new(),
            free: Vec::new(),
            soft: SoftIndex::default(),
            actions: VecDeque::new(),
            events: VecDeque::new(),
            deferred: VecDeque::new(),
            stall: None,
            stall_excl: 0,
            live_nic: 0,
            ops_outstanding: 0,
            sw_cnt: 0,
            carried: 0,
            sync_queued: false,
            syncs_in_flight: 0,
            stats: SplitStats::default(),
        })
    }

    /// The configuration in force.
    pub fn config(&self) -> &SplitConfig {
        &self.config
    }

    /// Counters.
    pub fn stats(&self) -> SplitStats {
        self.stats
    }

    /// The software engine inside (depths, its own counters).
    pub fn engine(&self) -> &Engine<u32, M> {
        &self.engine
    }

    /// Inputs wait for a DEL (software matched a message to a receive the NIC holds).
    pub fn is_stalled(&self) -> bool {
        self.stall.is_some() || !self.deferred.is_empty()
    }

    /// NIC handles reserved now (ADDs queued or posted, entries, handles awaiting completions).
    pub fn live_nic(&self) -> u32 {
        self.live_nic
    }

    /// List operations pulled whose completion has not been fed back.
    pub fn outstanding_ops(&self) -> u32 {
        self.ops_outstanding
    }

    /// Software's unexpected count (wrapping).
    pub fn unexpected_count(&self) -> u32 {
        self.sw_cnt
    }

    /// Receives queued now (software and offloaded).
    pub fn posted_len(&self) -> usize {
        self.engine.posted_len()
    }

    /// Unexpected messages queued now.
    pub fn unexpected_len(&self) -> usize {
        self.engine.unexpected_len()
    }

    /// The counters of the software engine underneath (queue depths and
    /// their high-water marks, software and offloaded receives alike).
    pub fn engine_stats(&self) -> crate::Stats {
        self.engine.stats()
    }

    /// Software-only receives queued now (counted only while offload is on).
    pub fn software_only_len(&self) -> usize {
        self.soft.len()
    }

    /// Handles of the queued receives in posting order, each with `true` when the NIC holds
    /// it (O(n log n); diagnostics and tests).
    pub fn posted_recvs(&self) -> Vec<(R, bool)> {
        self.engine
            .posted_snapshot()
            .into_iter()
            .filter_map(|(_, idx)| {
                let r = &self.recs[idx as usize];
                Some((r.recv?, matches!(r.place, Place::Nic(_))))
            })
            .collect()
    }

    /// Nothing pending towards the NIC and no input waiting: no queued action, no operation
    /// outstanding, no deferred input.
    pub fn is_quiescent(&self) -> bool {
        self.actions.is_empty() && self.ops_outstanding == 0 && !self.is_stalled()
    }

    /// The next outcome, in linearisation order.
    pub fn poll_event(&mut self) -> Option<SplitEvent<R, M>> {
        self.events.pop_front()
    }

    // ---- inputs ----

    /// Post a receive. Its outcome comes as an event: [`SplitEvent::Matched`] with `at_post`,
    /// or [`SplitEvent::Posted`] (then later a match or cancel event). While inputs wait for a
    /// DEL the post is queued behind them (its events come when they are processed). Fails at
    /// once only when the engine refuses a receive processed now.
    pub fn post_recv(
        &mut self,
        spec: RecvSpec,
        recv: R,
        info: RecvInfo,
    ) -> Result<SplitKey, SplitError> {
        let idx = self.alloc(spec, recv, info);
        let key = SplitKey {
            index: idx,
            generation: self.recs[idx as usize].generation,
        };
        if self.is_stalled() {
            self.deferred.push_back(Input::Post(idx));
            return Ok(key);
        }
        if let Err(e) = self.do_post(idx) {
            self.release(idx);
            return Err(e.into());
        }
        Ok(key)
    }

    /// A message arrived through a path other than the NIC's tagged path (self, sm, tcp, or
    /// an untagged openib message): not counted towards the NIC's unexpected count.
    pub fn arrive(&mut self, env: Envelope, msg: M) -> Result<(), SplitError> {
        self.input_arrival(env, msg, false)
    }

    /// A tagged message the NIC delivered unexpected (`IBV_WC_TM_RECV` without `MATCH`), fed
    /// in CQ order. Counted in the software unexpected count once it is matched or queued.
    pub fn nic_unexpected(&mut self, env: Envelope, msg: M) -> Result<(), SplitError> {
        self.input_arrival(env, msg, true)
    }

    fn input_arrival(&mut self, env: Envelope, msg: M, from_nic: bool) -> Result<(), SplitError> {
        if self.is_stalled() {
            self.deferred.push_back(Input::Arrive(env, msg, from_nic));
            return Ok(());
        }
        self.do_arrive(env, msg, from_nic)?;
        Ok(())
    }

    /// Ask to cancel a receive. Returns `false` (and nothing happens) when the key names no
    /// live receive (it ended before) or a cancel of it was asked already (its one outcome
    /// event is or will be delivered); otherwise exactly one [`SplitEvent::Cancelled`] or
    /// [`SplitEvent::CancelFailed`] follows (at once for a software receive, after the DEL for
    /// an offloaded one).
    pub fn cancel(&mut self, key: SplitKey) -> bool {
        let Some(rec) = self.recs.get(key.index as usize) else {
            return false;
        };
        if !rec.live || rec.generation != key.generation || rec.cancel_asked {
            return false;
        }
        let Some(recv) = rec.recv else { return false };
        self.recs[key.index as usize].cancel_asked = true;
        if self.is_stalled() {
            self.deferred.push_back(Input::Cancel(key, recv));
            return true;
        }
        self.do_cancel(key, recv);
        true
    }

    /// `MPI_Iprobe`: the unexpected message a receive of `spec` would match now, left queued.
    /// [`SplitError::Busy`] while inputs wait for a DEL.
    pub fn probe(&mut self, spec: &RecvSpec) -> Result<Option<(Envelope, M)>, SplitError> {
        if self.is_stalled() {
            return Err(SplitError::Busy);
        }
        Ok(self.engine.probe(spec))
    }

    /// `MPI_Improbe`: like [`SplitMatcher::probe`], the message removed.
    pub fn mprobe(&mut self, spec: &RecvSpec) -> Result<Option<(Envelope, M)>, SplitError> {
        if self.is_stalled() {
            return Err(SplitError::Busy);
        }
        Ok(self.engine.mprobe(spec))
    }

    // ---- NIC side ----

    /// The next list operation to post, with the count to carry. `None` when nothing is
    /// queued or `max_ops` operations are outstanding (pull again after feeding completions).
    pub fn poll_action(&mut self) -> Option<NicAction<R>> {
        while self.ops_outstanding < self.config.max_ops {
            let Some(q) = self.actions.pop_front() else {
                // Withdrawn entries may have hidden an empty queue from the sync policy.
                self.consider_sync(false);
                if self.actions.is_empty() {
                    return None;
                }
                continue;
            };
            match q {
                Queued::Add(idx, gen) => {
                    let cnt = self.sw_cnt.wrapping_sub(self.stall_excl);
                    let Some(rec) = self.live_rec_mut(idx, gen) else {
                        continue;
                    };
                    let recv = rec.recv;
                    let len = rec.info.len;
                    let Place::Nic(st) = &mut rec.place else {
                        continue;
                    };
                    if st.handed_out {
                        continue;
                    }
                    st.handed_out = true;
                    st.add_pending = true;
                    let (tag, buffer) = (st.tag, st.buffer);
                    let Some(recv) = recv else { continue };
                    self.ops_outstanding += 1;
                    self.carried = cnt;
                    return Some(NicAction::Add {
                        id: NicId::new(idx, gen),
                        recv,
                        tag,
                        len,
                        buffer,
                        unexpected_cnt: cnt,
                    });
                }
                Queued::Del(idx, gen) => {
                    // The stall's own DEL too carries the count without the stalled message:
                    // whether a NIC applies a new count and a removal atomically is not
                    // documented, so matching resumes only with the SYNC (or the next
                    // operation) that follows the DEL's completion.
                    let cnt = self.sw_cnt.wrapping_sub(self.stall_excl);
                    let Some(rec) = self.live_rec_mut(idx, gen) else {
                        continue;
                    };
                    let Place::Nic(st) = &mut rec.place else {
                        continue;
                    };
                    if !st.del_queued || st.del_handed {
                        continue;
                    }
                    st.del_handed = true;
                    self.ops_outstanding += 1;
                    self.carried = cnt;
                    return Some(NicAction::Del {
                        id: NicId::new(idx, gen),
                        unexpected_cnt: cnt,
                    });
                }
                Queued::Sync => {
                    if !self.sync_queued {
                        continue;
                    }
                    self.sync_queued = false;
                    self.syncs_in_flight += 1;
                    self.stats.syncs += 1;
                    self.ops_outstanding += 1;
                    let cnt = self.sw_cnt.wrapping_sub(self.stall_excl);
                    self.carried = cnt;
                    return Some(NicAction::Sync {
                        unexpected_cnt: cnt,
                    });
                }
            }
        }
        None
    }

    /// Feed a NIC completion (in CQ order) or a refused post.
    pub fn nic_event(&mut self, ev: NicEvent) -> Result<(), SplitError> {
        match ev {
            NicEvent::Added { id, sync_req } => {
                let idx = self.nic_rec(id, "Added")?;
                let st = self.shadow(idx, id)?;
                if !st.add_pending {
                    return Err(SplitError::Protocol {
                        id,
                        what: "ADD completion without an ADD outstanding",
                    });
                }
                st.add_pending = false;
                self.op_done();
                if sync_req {
                    tracing::debug!(%id, sw_cnt = self.sw_cnt, "tm-engine: NIC asks for a sync");
                }
                self.consider_sync(sync_req);
                self.maybe_free(idx);
            }
            NicEvent::Matched {
                id,
                envelope,
                complete,
            } => {
                let idx = self.nic_rec(id, "Matched")?;
                let spec = self.recs[idx as usize].spec;
                let key = self.recs[idx as usize].key;
                let recv = self.recs[idx as usize].recv;
                let st = self.shadow(idx, id)?;
                if !st.in_list || !st.handed_out {
                    return Err(SplitError::Protocol {
                        id,
                        what: "match of an entry not in the NIC list",
                    });
                }
                if !spec.matches(&envelope) {
                    return Err(SplitError::Protocol {
                        id,
                        what: "the NIC matched an envelope the receive cannot match",
                    });
                }
                st.in_list = false;
                st.data_pending = !complete;
                // A DEL not pulled yet has nothing left to do.
                let del_unpulled = st.del_queued && !st.del_handed;
                if del_unpulled {
                    st.del_queued = false;
                }
                if let Some(k) = key {
                    match self.engine.cancel(k) {
                        CancelOutcome::Removed(_) => {}
                        CancelOutcome::NotFound => {
                            return Err(SplitError::Protocol {
                                id,
                                what: "shadow entry lost its software receive",
                            })
                        }
                    }
                    self.recs[idx as usize].key = None;
                }
                self.stats.nic_matches += 1;
                if let Some(recv) = recv {
                    self.events.push_back(SplitEvent::NicMatched {
                        recv,
                        envelope,
                        complete,
                    });
                }
                if del_unpulled {
                    self.settle_lost(idx)?;
                }
                self.maybe_free(idx);
                self.drain()?;
            }
            NicEvent::DataDone { id } => {
                let idx = self.nic_rec(id, "DataDone")?;
                let recv = self.recs[idx as usize].recv;
                let st = self.shadow(idx, id)?;
                if !st.data_pending {
                    return Err(SplitError::Protocol {
                        id,
                        what: "data completion without a rendezvous in progress",
                    });
                }
                st.data_pending = false;
                if let Some(recv) = recv {
                    self.events.push_back(SplitEvent::NicDataDone { recv });
                }
                self.maybe_free(idx);
            }
            NicEvent::Deleted { id } => {
                let idx = self.nic_rec(id, "Deleted")?;
                let st = self.shadow(idx, id)?;
                if !st.del_handed || !st.in_list {
                    return Err(SplitError::Protocol {
                        id,
                        what: "DEL completion without a DEL of a listed entry",
                    });
                }
                st.del_handed = false;
                st.del_queued = false;
                st.in_list = false;
                let pending = st.pending_msg.take();
                let cancel = std::mem::take(&mut st.cancel);
                self.op_done();
                let rec = &mut self.recs[idx as usize];
                let recv = rec.recv;
                if let Some((envelope, msg, _)) = pending {
                    if self.stall == Some(idx) {
                        self.stall = None;
                        self.stall_excl = 0;
                    }
                    self.stats.sw_matches += 1;
                    if let Some(recv) = recv {
                        self.events.push_back(SplitEvent::Matched {
                            recv,
                            envelope,
                            msg,
                            at_post: false,
                        });
                        if cancel {
                            self.events.push_back(SplitEvent::CancelFailed { recv });
                        }
                    }
                } else if let Some(k) = rec.key.take() {
                    // Cancel: the receive leaves software too.
                    if !matches!(self.engine.cancel(k), CancelOutcome::Removed(_)) {
                        return Err(SplitError::Protocol {
                            id,
                            what: "shadow entry lost its software receive",
                        });
                    }
                    if let Some(recv) = recv {
                        self.events.push_back(SplitEvent::Cancelled { recv });
                    }
                }
                self.maybe_free(idx);
                self.consider_sync(false);
                self.drain()?;
            }
            NicEvent::DelConsumed { id } => {
                let idx = self.nic_rec(id, "DelConsumed")?;
                let st = self.shadow(idx, id)?;
                if !st.del_handed {
                    return Err(SplitError::Protocol {
                        id,
                        what: "TM_ERR without a DEL outstanding",
                    });
                }
                if st.in_list {
                    return Err(SplitError::Protocol {
                        id,
                        what: "TM_ERR before the match completion",
                    });
                }
                st.del_handed = false;
                st.del_queued = false;
                self.op_done();
                self.stats.del_lost += 1;
                tracing::debug!(%id, "tm-engine: DEL lost the race to a NIC match");
                self.settle_lost(idx)?;
                self.maybe_free(idx);
                self.consider_sync(false);
                self.drain()?;
            }
            NicEvent::Synced => {
                if self.syncs_in_flight == 0 {
                    return Err(SplitError::UnexpectedSync);
                }
                self.syncs_in_flight -= 1;
                self.op_done();
                self.consider_sync(false);
            }
            NicEvent::AddRefused { id } => {
                let idx = self.nic_rec(id, "AddRefused")?;
                let st = self.shadow(idx, id)?;
                if !st.handed_out || !st.add_pending || st.del_queued {
                    return Err(SplitError::Protocol {
                        id,
                        what: "refusal of an ADD not just pulled",
                    });
                }
                self.op_done();
                tracing::warn!(%id, "tm-engine: ADD refused, receive kept in software");
                self.demote(idx);
                // Every ADD queued behind it stays in software too: the NIC then still holds
                // a prefix of posting order (only receives posted before this one).
                let queued: Vec<Queued> = self.actions.iter().copied().collect();
                for q in queued {
                    if let Queued::Add(i, g) = q {
                        if let Some(rec) = self.live_rec_mut(i, g) {
                            if matches!(rec.place, Place::Nic(st) if !st.handed_out) {
                                self.demote(i);
                            }
                        }
                    }
                }
            }
            NicEvent::DelRefused { id } => {
                let idx = self.nic_rec(id, "DelRefused")?;
                let st = self.shadow(idx, id)?;
                if !st.del_handed {
                    return Err(SplitError::Protocol {
                        id,
                        what: "refusal of a DEL not outstanding",
                    });
                }
                st.del_handed = false;
                let counted = matches!(st.pending_msg, Some((_, _, true)));
                if self.stall == Some(idx) && counted {
                    self.stall_excl = 1;
                }
                self.op_done();
                let gen = self.recs[idx as usize].generation;
                self.actions.push_front(Queued::Del(idx, gen));
            }
            NicEvent::SyncRefused => {
                if self.syncs_in_flight == 0 {
                    return Err(SplitError::UnexpectedSync);
                }
                self.syncs_in_flight -= 1;
                self.stats.syncs -= 1;
                self.op_done();
                self.sync_queued = true;
                self.actions.push_front(Queued::Sync);
            }
        }
        Ok(())
    }

    // ---- internals ----

    fn alloc(&mut self, spec: RecvSpec, recv: R, info: RecvInfo) -> u32 {
        let rec = |generation| Rec {
            generation,
            live: true,
            recv: Some(recv),
            spec,
            info,
            key: None,
            place: Place::Deferred,
            cancel_asked: false,
        };
        match self.free.pop() {
            Some(i) => {
                let r = &mut self.recs[i as usize];
                let generation = r.generation.wrapping_add(1) & 0x00ff_ffff;
                *r = rec(generation);
                i
            }
            None => {
                self.recs.push(rec(0));
                (self.recs.len() - 1) as u32
            }
        }
    }

    fn release(&mut self, idx: u32) {
        let r = &mut self.recs[idx as usize];
        r.live = false;
        r.recv = None;
        r.key = None;
        r.place = Place::Deferred;
        self.free.push(idx);
    }

    fn live_rec_mut(&mut self, idx: u32, gen: u32) -> Option<&mut Rec<R, M>> {
        self.recs
            .get_mut(idx as usize)
            .filter(|r| r.live && r.generation == gen)
    }

    fn nic_rec(&self, id: NicId, event: &'static str) -> Result<u32, SplitError> {
        let idx = id.index();
        match self.recs.get(idx as usize) {
            Some(r)
                if r.live
                    && r.generation == id.generation()
                    && matches!(r.place, Place::Nic(_)) =>
            {
                Ok(idx)
            }
            _ => Err(SplitError::UnknownNicId { id, event }),
        }
    }

    fn shadow(&mut self, idx: u32, id: NicId) -> Result<&mut Shadow<M>, SplitError> {
        match &mut self.recs[idx as usize].place {
            Place::Nic(st) => Ok(st),
            _ => Err(SplitError::UnknownNicId {
                id,
                event: "shadow",
            }),
        }
    }

    fn op_done(&mut self) {
        self.ops_outstanding = self.ops_outstanding.saturating_sub(1);
    }

    /// An offloaded receive whose ADD never reached the NIC goes back to software (it is still
    /// in the engine at its posting position).
    fn demote(&mut self, idx: u32) {
        let rec = &mut self.recs[idx as usize];
        rec.place = Place::Software;
        let spec = rec.spec;
        self.live_nic -= 1;
        self.stats.fallbacks += 1;
        self.soft.add(&spec);
    }

    /// Is this receive offloadable by policy (before the prefix rule and capacity)?
    fn candidate(&self, spec: &RecvSpec, info: &RecvInfo) -> Option<(NicTag, NicBuffer)> {
        if !self.config.offload {
            return None;
        }
        let tag = info.nic?;
        if spec.source == SourceSpec::Any {
            return None;
        }
        if info.len < self.config.tm_thresh {
            return None;
        }
        let bounce = info.len < self.config.max_bb_size;
        if !info.contiguous && info.len > self.config.max_bb_size {
            return None;
        }
        let buffer = if bounce || !info.contiguous {
            NicBuffer::Bounce
        } else {
            NicBuffer::User
        };
        Some((tag, buffer))
    }

    fn do_post(&mut self, idx: u32) -> Result<(), EngineError> {
        let (spec, info, recv) = {
            let r = &self.recs[idx as usize];
            (r.spec, r.info, r.recv)
        };
        let Some(recv) = recv else { return Ok(()) };
        match self.engine.post_recv(spec, idx)? {
            PostOutcome::Matched { envelope, msg } => {
                self.stats.sw_matches += 1;
                self.events.push_back(SplitEvent::Matched {
                    recv,
                    envelope,
                    msg,
                    at_post: true,
                });
                self.release(idx);
            }
            PostOutcome::Posted { key, .. } => {
                self.recs[idx as usize].key = Some(key);
                let offload = match self.candidate(&spec, &info) {
                    None => None,
                    Some(c) => {
                        // Prefix rule: no earlier software-only receive may match an envelope
                        // this one matches; capacity: a handle must be free.
                        if self.soft.overlaps(&spec) || self.live_nic >= self.config.max_num_tags {
                            self.stats.fallbacks += 1;
                            None
                        } else {
                            Some(c)
                        }
                    }
                };
                match offload {
                    Some((tag, buffer)) => {
                        let gen = self.recs[idx as usize].generation;
                        self.recs[idx as usize].place = Place::Nic(Shadow {
                            tag,
                            buffer,
                            handed_out: false,
                            add_pending: false,
                            in_list: true,
                            del_queued: false,
                            del_handed: false,
                            cancel: false,
                            pending_msg: None,
                            data_pending: false,
                        });
                        self.live_nic += 1;
                        self.stats.offloaded += 1;
                        self.actions.push_back(Queued::Add(idx, gen));
                    }
                    None => {
                        self.recs[idx as usize].place = Place::Software;
                        if self.config.offload {
                            self.soft.add(&spec);
                        }
                    }
                }
                self.events.push_back(SplitEvent::Posted {
                    recv,
                    offloaded: offload.is_some(),
                });
            }
        }
        Ok(())
    }

    fn do_arrive(&mut self, env: Envelope, msg: M, from_nic: bool) -> Result<(), EngineError> {
        self.arrive_counted(env, msg, from_nic, from_nic)
    }

    /// `from_nic`: count it now; `counted`: the NIC counted it (now or when it first came up).
    fn arrive_counted(
        &mut self,
        env: Envelope,
        msg: M,
        from_nic: bool,
        counted: bool,
    ) -> Result<(), EngineError> {
        let out = self.engine.arrive(env, msg);
        if from_nic {
            // Counted once software holds it (matched or queued), never before: an operation
            // carrying the count lets the NIC match again.
            self.sw_cnt = self.sw_cnt.wrapping_add(1);
            self.stats.nic_unexpected += 1;
        }
        match out {
            Err(e) => {
                if from_nic {
                    // Not held by software: not counted.
                    self.sw_cnt = self.sw_cnt.wrapping_sub(1);
                    self.stats.nic_unexpected -= 1;
                }
                return Err(e);
            }
            Ok(ArriveOutcome::Unexpected) => {
                self.stats.unexpected += 1;
                self.events
                    .push_back(SplitEvent::Unexpected { envelope: env, msg });
            }
            Ok(ArriveOutcome::Matched { recv: idx, .. }) => self.sw_matched(idx, env, msg, counted),
        }
        if from_nic {
            self.consider_sync(false);
        }
        Ok(())
    }

    /// Software matched `msg` to the receive of record `idx` (already out of the engine).
    fn sw_matched(&mut self, idx: u32, envelope: Envelope, msg: M, counted: bool) {
        let gen = self.recs[idx as usize].generation;
        let rec = &mut self.recs[idx as usize];
        rec.key = None;
        let recv = rec.recv;
        let spec = rec.spec;
        match &mut rec.place {
            Place::Nic(st) if st.handed_out => {
                // The NIC may hold the entry: DEL it before the receive completes; every
                // input waits until the DEL settles.
                st.pending_msg = Some((envelope, msg, counted));
                if !st.del_queued {
                    st.del_queued = true;
                    self.actions.push_back(Queued::Del(idx, gen));
                }
                self.stall = Some(idx);
                // Until the DEL is pulled, operations must not carry a count that includes
                // this message: the NIC would resume matching while its fate is open.
                self.stall_excl = u32::from(counted);
                self.stats.stalls += 1;
                tracing::debug!(id = %NicId::new(idx, gen), "tm-engine: software match of an offloaded receive, DEL first");
            }
            Place::Nic(_) => {
                // The ADD was never pulled: forget it (the queued action is skipped).
                self.live_nic -= 1;
                self.stats.retracted += 1;
                self.stats.sw_matches += 1;
                if let Some(recv) = recv {
                    self.events.push_back(SplitEvent::Matched {
                        recv,
                        envelope,
                        msg,
                        at_post: false,
                    });
                }
                self.release(idx);
            }
            Place::Software | Place::Deferred => {
                if self.config.offload {
                    self.soft.remove(&spec);
                }
                self.stats.sw_matches += 1;
                if let Some(recv) = recv {
                    self.events.push_back(SplitEvent::Matched {
                        recv,
                        envelope,
                        msg,
                        at_post: false,
                    });
                }
                self.release(idx);
            }
        }
    }

    fn do_cancel(&mut self, key: SplitKey, recv: R) {
        let idx = key.index;
        let Some(rec) = self.live_rec_mut(idx, key.generation) else {
            self.events.push_back(SplitEvent::CancelFailed { recv });
            return;
        };
        let spec = rec.spec;
        let ekey = rec.key;
        match &mut rec.place {
            Place::Nic(st) => {
                if ekey.is_none() || !st.in_list {
                    // Matched already (by the NIC, or by software waiting for its DEL).
                    if st.pending_msg.is_some() {
                        st.cancel = true;
                    } else {
                        self.events.push_back(SplitEvent::CancelFailed { recv });
                    }
                    return;
                }
                if !st.handed_out {
                    if let Some(k) = ekey {
                        self.engine.cancel(k);
                    }
                    self.live_nic -= 1;
                    self.release(idx);
                    self.events.push_back(SplitEvent::Cancelled { recv });
                    return;
                }
                st.cancel = true;
                if !st.del_queued {
                    st.del_queued = true;
                    self.actions.push_back(Queued::Del(idx, key.generation));
                }
            }
            Place::Software | Place::Deferred => {
                let removed = ekey
                    .is_some_and(|k| matches!(self.engine.cancel(k), CancelOutcome::Removed(_)));
                if removed {
                    if self.config.offload {
                        self.soft.remove(&spec);
                    }
                    self.release(idx);
                    self.events.push_back(SplitEvent::Cancelled { recv });
                } else {
                    self.events.push_back(SplitEvent::CancelFailed { recv });
                }
            }
        }
    }

    /// The NIC consumed the entry before its DEL: a waiting cancel fails, a waiting software
    /// match gives its message back to matching (it arrives now, after the NIC's message).
    fn settle_lost(&mut self, idx: u32) -> Result<(), SplitError> {
        let recv = self.recs[idx as usize].recv;
        let Place::Nic(st) = &mut self.recs[idx as usize].place else {
            return Ok(());
        };
        let cancel = std::mem::take(&mut st.cancel);
        let pending = st.pending_msg.take();
        if cancel {
            if let Some(recv) = recv {
                self.events.push_back(SplitEvent::CancelFailed { recv });
            }
        }
        if let Some((env, msg, counted)) = pending {
            if self.stall == Some(idx) {
                self.stall = None;
                self.stall_excl = 0;
            }
            // Already counted when it first came up.
            if let Err(error) = self.arrive_counted(env, msg, false, counted) {
                self.events
                    .push_back(SplitEvent::ArrivalFailed { msg, error });
            }
        }
        Ok(())
    }

    fn maybe_free(&mut self, idx: u32) {
        let rec = &self.recs[idx as usize];
        if !rec.live || rec.key.is_some() {
            return;
        }
        if let Place::Nic(st) = &rec.place {
            if st.add_pending
                || st.in_list
                || st.del_queued
                || st.data_pending
                || st.pending_msg.is_some()
                || st.cancel
                || !st.handed_out
            {
                return;
            }
            self.live_nic -= 1;
            self.release(idx);
        }
    }

    /// Sync policy: every operation carries the count; a `TAG_SYNC` goes out when
    /// (a) `sync_interval` unexpected messages were processed since the count last went out,
    /// or (b) the NIC may be suspended (count not carried yet, or it asked) while it holds
    /// entries, and no operation is queued that would carry the count anyway.
    fn consider_sync(&mut self, asked: bool) {
        if self.sync_queued || !self.config.offload {
            return;
        }
        let lag = self.sw_cnt.wrapping_sub(self.carried);
        if lag == 0 {
            return;
        }
        let must = lag >= self.config.sync_interval;
        let useful =
            (self.live_nic > 0 || asked) && self.syncs_in_flight == 0 && self.actions.is_empty();
        if must || useful {
            self.sync_queued = true;
            self.actions.push_back(Queued::Sync);
        }
    }

    /// Process deferred inputs while nothing waits for a DEL.
    fn drain(&mut self) -> Result<(), SplitError> {
        while self.stall.is_none() {
            let Some(input) = self.deferred.pop_front() else {
                break;
            };
            match input {
                Input::Post(idx) => {
                    if let Err(error) = self.do_post(idx) {
                        if let Some(recv) = self.recs[idx as usize].recv {
                            self.events
                                .push_back(SplitEvent::PostFailed { recv, error });
                        }
                        self.release(idx);
                    }
                }
                Input::Arrive(env, msg, from_nic) => {
                    if let Err(error) = self.do_arrive(env, msg, from_nic) {
                        self.events
                            .push_back(SplitEvent::ArrivalFailed { msg, error });
                    }
                }
                Input::Cancel(key, recv) => self.do_cancel(key, recv),
            }
        }
        Ok(())
    }
}
