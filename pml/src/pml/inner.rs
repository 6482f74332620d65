//! The state behind the pml's lock ([`Inner`]) and its progress: one
//! polling round of the transports, the core's actions carried out in order
//! with back-pressure, peers found dead, the offload path's inputs under the
//! lock.

use std::collections::VecDeque;

use tmpi_base::error::MpiErrorClass;

use crate::core::{Action, Core, Limits, Wire};
use crate::matching::{Envelope, MsgId};
use crate::raw::{RawBuf, RawBufMut};
use crate::region::Region;
use crate::request::{ReqId, SendMode};
use crate::transport::{Deliver, Transport, TxError};
use crate::PmlError;

pub(crate) struct Inner {
    pub(crate) core: Core,
    pub(crate) net: Box<dyn Transport>,
    pub(crate) limits: Vec<Limits>,
    /// Deregistrations requested while the transport was busy polling.
    dereg: Vec<(u32, Region)>,
    /// Actions a BTL could not take yet (resource busy), in order.
    pub(super) pending: VecDeque<Action>,
    scratch: Vec<Action>,
    /// Messages taken by improbe: id -> envelope.
    pub(super) mprobed: std::collections::HashMap<MsgId, Envelope>,
    /// The offload path is on (a btl-openib module with tag matching).
    pub(super) tm: bool,
    /// Tagged-path inputs are possible (some openib module): polled.
    tm_in: bool,
    tm_inputs: Vec<crate::transport::TmInput>,
    /// Progress rounds so far (failed peers are collected every
    /// [`FAILED_POLL`]th).
    rounds: u32,
    /// Per world rank: the carrying BTL's direct channel
    /// (`Transport::direct_send`), used by the blocking-send fast path.
    pub(super) direct: Vec<Option<std::sync::Arc<dyn tmpi_btl::DirectSend>>>,
    /// Per world rank: the carrying BTL's direct receive channel
    /// (`Transport::direct_recv`), used by the blocking-receive fast path.
    pub(super) direct_rx: Vec<Option<std::sync::Arc<dyn tmpi_btl::DirectRecv>>>,
    /// Transfers that failed on each peer's broken connection
    /// ([`Inner::first_broken`]).
    broken: std::collections::HashMap<u32, u64>,
}

impl Inner {
    /// Counts a transfer with `peer` that failed because its connection
    /// broke; `true` for the first, which the caller logs with its cause.
    /// The later ones are logged only as a count, when it reaches 10, 100,
    /// 1000, ... (a large message has many fragments, each of which fails
    /// the same way).
    pub(super) fn first_broken(&mut self, peer: u32) -> bool {
        let n = self.broken.entry(peer).or_insert(0);
        *n += 1;
        let n = *n;
        if n >= 10 && 10u64.pow(n.ilog10()) == n {
            tracing::error!(target: "pml_ob1", peer, "{n} transfers with rank {peer} have failed on its broken connection so far");
        }
        n == 1
    }
}

/// See [`Inner::progress`]: progress rounds per collection of failed peers.
const FAILED_POLL: u32 = 64;

/// [`Wire`] over the transport and the per-peer limits table.
pub(super) struct NetWire<'a> {
    pub(super) net: &'a mut dyn Transport,
    pub(super) limits: &'a [Limits],
}

impl Wire for NetWire<'_> {
    fn limits(&self, peer: u32) -> Limits {
        self.limits[peer as usize]
    }
    fn register(&mut self, peer: u32, buf: RawBuf) -> Option<Region> {
        self.net.register(peer, buf)
    }
    fn deregister(&mut self, peer: u32, region: &[u8]) {
        self.net.deregister(peer, region)
    }
}

/// [`Wire`] used while the transport delivers fragments (it is borrowed):
/// deregistrations are deferred, registration is never needed there.
struct DeferWire<'a> {
    limits: &'a [Limits],
    dereg: &'a mut Vec<(u32, Region)>,
}

impl Wire for DeferWire<'_> {
    fn limits(&self, peer: u32) -> Limits {
        self.limits[peer as usize]
    }
    fn register(&mut self, _peer: u32, _buf: RawBuf) -> Option<Region> {
        None
    }
    fn deregister(&mut self, peer: u32, region: &[u8]) {
        self.dereg.push((peer, Region::new(region)));
    }
}

/// What the transport received goes to the core.
struct CoreDeliver<'a, 'b> {
    core: &'a mut Core,
    w: DeferWire<'b>,
}

impl Deliver for CoreDeliver<'_, '_> {
    #[inline(always)]
    fn frag(&mut self, peer: u32, bytes: &[u8]) {
        let _ = self.core.on_frag(&mut self.w, peer, bytes);
    }
    fn place(&mut self, _peer: u32, start: &[u8], len: usize) -> Option<tmpi_btl::Placement> {
        self.core.place_frag(start, len)
    }
    fn placed(&mut self, _peer: u32, head: &[u8], len: usize) {
        self.core.placed_frag(head, len);
    }
}

impl Inner {
    pub(crate) fn new(core: Core, net: Box<dyn Transport>) -> Self {
        let n = net.size();
        let limits = (0..n).map(|p| net.limits(p)).collect();
        let tm = net.tm_caps().is_some();
        let tm_in = net.tm_inputs();
        let direct = (0..n).map(|p| net.direct_send(p)).collect();
        let direct_rx = (0..n).map(|p| net.direct_recv(p)).collect();
        Inner {
            direct,
            direct_rx,
            broken: std::collections::HashMap::new(),
            tm,
            tm_in,
            tm_inputs: Vec::new(),
            rounds: 0,
            core,
            net,
            limits,
            dereg: Vec::new(),
            pending: VecDeque::new(),
            scratch: Vec::new(),
            mprobed: std::collections::HashMap::new(),
        }
    }

    /// Polls the transport once and carries out everything that results.
    /// Returns the number of events (fragments + actions) handled.
    pub(crate) fn progress(&mut self) -> usize {
        self.progress_with(false)
    }

    /// [`Inner::progress`] for a caller blocked on one message (a blocking
    /// receive): the transports hand over fewer of the fragments already
    /// waiting (`Transport::progress_waiting`).
    pub(crate) fn progress_waiting(&mut self) -> usize {
        self.progress_with(true)
    }

    #[inline(always)]
    fn progress_with(&mut self, waiting: bool) -> usize {
        let mut n = self.flush();
        let Inner {
            core,
            net,
            limits,
            dereg,
            ..
        } = self;
        let mut deliver = CoreDeliver {
            core,
            w: DeferWire { limits, dereg },
        };
        n += if waiting {
            net.progress_waiting(&mut deliver)
        } else {
            net.progress(&mut deliver)
        };
        // Failed peers are collected once in FAILED_POLL rounds: asking
        // every module every round (virtual calls, an empty `Vec`) is a
        // visible share of a small ping-pong's waiting loop; a failure is
        // still noticed within microseconds.
        self.rounds = self.rounds.wrapping_add(1);
        if self.rounds.is_multiple_of(FAILED_POLL) {
            n += self.collect_failed();
        }
        if self.tm_in {
            n += self.tm_progress();
        }
        // After the round's NIC inputs: a BYE must not overtake a tagged
        // message its sender sent before it (core/bye.rs).
        if self.core.has_byes() {
            n += self.apply_byes();
        }
        if !self.dereg.is_empty() {
            // Drained in place: the list keeps its capacity (no allocation
            // per rendezvous).
            for (peer, r) in self.dereg.drain(..) {
                self.net.deregister(peer, &r);
            }
        }
        n + self.flush()
    }

    /// Starts a send request (`Core::isend` over the transport) and carries
    /// out what it produced.
    ///
    /// # Safety
    /// As [`Core::isend`].
    pub(super) unsafe fn start_send(
        &mut self,
        ctx: u32,
        dest: i32,
        tag: i32,
        buf: RawBuf,
        mode: SendMode,
    ) -> Result<ReqId, PmlError> {
        let mut w = NetWire {
            net: &mut *self.net,
            limits: &self.limits,
        };
        // SAFETY: forwarded contract.
        let id = unsafe { self.core.isend(&mut w, ctx, dest, tag, buf, mode) }?;
        self.flush();
        Ok(id)
    }

    /// Posts a receive (`Core::irecv` over the transport).
    ///
    /// # Safety
    /// As [`Core::irecv`].
    pub(super) unsafe fn post_recv(
        &mut self,
        ctx: u32,
        src: i32,
        tag: i32,
        buf: RawBufMut,
    ) -> Result<ReqId, PmlError> {
        let mut w = NetWire {
            net: &mut *self.net,
            limits: &self.limits,
        };
        // SAFETY: forwarded contract.
        unsafe { self.core.irecv(&mut w, ctx, src, tag, buf) }
    }

    /// Fails the requests that depend on peers the transports found dead
    /// since the last call; returns their number. Out of line: most rounds
    /// do not call it (an empty `Vec` and its loop would cost every polling
    /// round inline).
    #[cold]
    #[inline(never)]
    fn collect_failed(&mut self) -> usize {
        let failed = self.net.take_failed();
        let n = failed.len();
        for (peer, why) in failed {
            let k = self.core.peer_failed(peer, MpiErrorClass::Other);
            tracing::error!(target: "pml_ob1", peer,
                "rank {peer} failed ({why}): {k} pending request(s) depending on it fail with MPI_ERR_OTHER");
        }
        n
    }

    /// Applies the BYEs that arrived: fails what waits on peers that are
    /// finalizing; returns how many peers. Out of line: rare.
    #[cold]
    #[inline(never)]
    fn apply_byes(&mut self) -> usize {
        let done = self.core.apply_byes();
        for &(peer, k) in &done {
            if k > 0 {
                tracing::warn!(target: "pml_ob1", peer,
                    "rank {peer} called MPI_Finalize: {k} pending request(s) waiting on it fail with MPI_ERR_OTHER");
            } else {
                tracing::debug!(target: "pml_ob1", peer, "rank {peer} called MPI_Finalize");
            }
        }
        done.len()
    }

    /// Queues a BYE to the peers that should get one (core/bye.rs) and
    /// hands everything to the BTLs.
    pub(super) fn say_bye(&mut self) {
        let Inner { core, net, .. } = self;
        let n = core.say_bye(&|p| matches!(net.peer_btl(p), Some("self" | "sm")));
        tracing::debug!(target: "pml_ob1", "finalize: BYE to {n} peer(s)");
    }

    /// The offload path, under the pml's lock: NIC inputs in CQ order into
    /// the split matcher, its late outcomes, then its NIC-list operations
    /// in pull order (a refusal goes back before the next pull).
    pub(super) fn tm_progress(&mut self) -> usize {
        let Inner {
            core,
            net,
            limits,
            dereg,
            tm_inputs,
            ..
        } = self;
        let mut w = DeferWire { limits, dereg };
        net.tm_take(tm_inputs);
        let n = tm_inputs.len();
        for i in tm_inputs.drain(..) {
            core.on_tm_input(&mut w, i);
        }
        core.drain_late(&mut w);
        while let Some(a) = core.poll_nic_action() {
            let (user, peer) = match a {
                tmpi_tm_engine::split::NicAction::Add { recv, buffer, .. } => (
                    match buffer {
                        tmpi_tm_engine::split::NicBuffer::User => core.recv_buffer(ReqId(recv)),
                        tmpi_tm_engine::split::NicBuffer::Bounce => None,
                    },
                    core.recv_peer(ReqId(recv)),
                ),
                _ => (None, None),
            };
            if let Some(refused) = net.tm_exec(a, user, peer) {
                core.on_tm_input(&mut w, crate::transport::TmInput::Nic(refused));
            }
        }
        n
    }

    /// Carries out one action; gives it back when the BTL is busy.
    fn exec(&mut self, a: Action) -> Result<(), Action> {
        match a {
            Action::Send {
                peer,
                hdr,
                data,
                done,
            } => {
                // SAFETY: `data` belongs to a send request that is not
                // complete (it completes only below, after the BTL took the
                // bytes), so its buffer is valid (isend contract). A typed
                // buffer packs this fragment's bytes only.
                let net = &mut self.net;
                let sent = unsafe { data.with_bytes(|b| net.send(peer, hdr.as_slice(), b)) };
                match sent {
                    Ok(()) => {
                        if let Some(id) = done {
                            self.core.send_done(id);
                        }
                        Ok(())
                    }
                    Err(TxError::Busy) => Err(Action::Send {
                        peer,
                        hdr,
                        data,
                        done,
                    }),
                    Err(TxError::Fatal(e)) => {
                        tracing::error!(target: "pml_ob1", peer, "send failed: {e}");
                        if let Some(id) = done {
                            self.core.send_done(id);
                        }
                        Ok(())
                    }
                    Err(TxError::Broken(e)) => {
                        if self.first_broken(peer) {
                            tracing::error!(target: "pml_ob1", peer, "send to rank {peer} failed, connection broken: {e}");
                        }
                        if let Some(id) = done {
                            self.core.send_failed(id, MpiErrorClass::Other);
                        }
                        Ok(())
                    }
                }
            }
            Action::Get {
                peer,
                region,
                dst,
                rreq,
            } => {
                match self.net.get(peer, &region, dst) {
                    Ok(()) => self.core.get_done(rreq, true),
                    Err(TxError::Busy) => {
                        return Err(Action::Get {
                            peer,
                            region,
                            dst,
                            rreq,
                        })
                    }
                    Err(TxError::Broken(e)) => {
                        if self.first_broken(peer) {
                            tracing::error!(target: "pml_ob1", peer, "RDMA read from rank {peer} failed, connection broken: {e}; the receive fails");
                        }
                        self.core.get_failed(rreq, MpiErrorClass::Other);
                    }
                    Err(e) => {
                        tracing::debug!(target: "pml_ob1", peer, "get failed: {e:?}");
                        self.core.get_done(rreq, false);
                    }
                }
                Ok(())
            }
        }
    }

    /// Carries out queued actions, in order, until none is left or a BTL
    /// is busy (the refused action and everything after it wait in
    /// `pending` for the next round). Fast path: with nothing pending, the
    /// core's actions run straight from its output vector.
    #[inline]
    pub(crate) fn flush(&mut self) -> usize {
        // Most polling rounds have nothing to carry out: answer that without
        // the call (two flushes per round are a visible share of an idle
        // round).
        if self.pending.is_empty() && !self.core.has_actions() {
            return 0;
        }
        self.flush_queued()
    }

    #[inline(never)]
    fn flush_queued(&mut self) -> usize {
        let mut done = 0;
        while let Some(a) = self.pending.pop_front() {
            if let Err(a) = self.exec(a) {
                self.pending.push_front(a);
                return done;
            }
            done += 1;
            if self.core.has_actions() {
                let mut s = std::mem::take(&mut self.scratch);
                self.core.take_actions(&mut s);
                self.pending.extend(s.drain(..));
                self.scratch = s;
            }
        }
        while self.core.has_actions() {
            let mut s = std::mem::take(&mut self.scratch);
            self.core.take_actions(&mut s);
            let mut it = s.drain(..);
            while let Some(a) = it.next() {
                if let Err(a) = self.exec(a) {
                    // Keep the order: the refused action, the rest of this
                    // batch; actions the core produced meanwhile follow at
                    // the next round (they are still in the core).
                    self.pending.push_back(a);
                    self.pending.extend(it);
                    self.scratch = s;
                    return done;
                }
                done += 1;
            }
            drop(it);
            self.scratch = s;
        }
        done
    }
}
