//! The protocol core of the pml: requests, per-peer ordering, matching and
//! the eager / rendezvous state machines. No I/O: inputs are method calls
//! (a user operation, a fragment that arrived, a get that finished, an
//! action that was carried out) and outputs are [`Action`]s the driver
//! (`crate::pml`) hands to the BTLs. The few synchronous questions the core
//! asks a transport (limits, memory registration) go through [`Wire`].
//!
//! # Protocols (see `hdr` for the wire format)
//! * **eager**: payload ≤ the peer BTL's eager payload limit and not a
//!   synchronous send: one MATCH fragment; the send completes when the BTL
//!   took the data.
//! * **rendezvous**: RNDV with the envelope, length, sender request id and,
//!   when the BTL can `get`, the registered region. The receiver matches,
//!   pulls `min(len, buffer)` bytes with `get` and answers FIN; the send
//!   completes at FIN. Without `get` (or when the get fails) the receiver
//!   answers ACK(want) and the sender pipelines FRAGs of at most the BTL's
//!   max send size; the send completes when the last FRAG was handed over.
//! * **synchronous** sends always use the rendezvous: FIN or ACK can only
//!   come after the match.
//! * Per (peer, context) sequence numbers: MATCH and RNDV fragments are
//!   matched strictly in sequence; one ahead of its turn is stored until its
//!   predecessors have been matched.
//!
//! # Memory
//! Requests refer to user buffers by raw pointer. The *public* pml entry
//! points that take buffers are `unsafe` with the contract "valid and not
//! otherwise accessed until the request completes"; this module only
//! dereferences them through `crate::raw`.

use std::collections::HashMap;

use rustc_hash::FxHashMap;

use tmpi_base::error::MpiErrorClass;

use crate::comm::CommRecord;
use crate::hdr::{
    AckHdr, CreditHdr, FinHdr, FragHdr, HdrError, Header, MatchHdr, RndvHdr, FLAG_INLINE,
    FLAG_REGION, FLAG_SYNC,
};
use tmpi_tm_engine::split::{NicAction, NicEvent, NicTag, RecvInfo};

use crate::matching::{Envelope, MatchError, MatchPoint, MsgId, Pattern, Posted};
use crate::offload::Late;
use crate::raw::{RawBuf, RawBufMut};
use crate::region::Region;
use crate::request::{ReqId, SendMode, Status, BSEND_OVERHEAD, PROC_NULL};
use crate::transport::{NicData, TmInput};
use crate::PmlError;

/// What a BTL can do for one peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Largest payload sent eagerly (after the pml header).
    pub eager: usize,
    /// Largest data payload of one FRAG.
    pub max_send: usize,
    /// Whether the BTL can `get` from a registered region of the peer.
    pub get: bool,
}

/// Synchronous services the core needs from the transport.
pub trait Wire {
    /// Limits of the BTL that reaches `peer`.
    fn limits(&self, peer: u32) -> Limits;
    /// Registers `buf` (this process's memory) so that `peer` can get from
    /// it; returns the region description to put into the RNDV, or `None`
    /// when registration is not possible (the pipelined path is used).
    fn register(&mut self, peer: u32, buf: RawBuf) -> Option<Region>;
    /// Releases a registration made by [`Wire::register`].
    fn deregister(&mut self, peer: u32, region: &[u8]);
}

/// A blocking send that [`Core::eager_direct`] prepared: the destination's
/// world rank, the encoded match header (the payload follows it in the
/// fragment) and the status the send completes with.
#[derive(Debug, Clone, Copy)]
pub(crate) struct EagerSend {
    pub(crate) peer: u32,
    pub(crate) hdr: [u8; crate::hdr::MATCH_LEN],
    pub(crate) st: Status,
}

/// An encoded pml header: inline up to [`HDR_INLINE`] bytes (every
/// fixed-size header, and a RNDV with a BTL's 24-byte region: no
/// allocation), on the heap beyond.
#[derive(Debug, Clone)]
pub enum HdrBuf {
    /// Up to [`HDR_INLINE`] bytes.
    Inline([u8; HDR_INLINE], u8),
    /// Anything longer.
    Heap(Vec<u8>),
}

/// Header bytes [`HdrBuf`] keeps inline.
pub const HDR_INLINE: usize = 64;

impl HdrBuf {
    fn from(b: &[u8]) -> Self {
        if b.len() <= HDR_INLINE {
            let mut a = [0u8; HDR_INLINE];
            a[..b.len()].copy_from_slice(b);
            HdrBuf::Inline(a, b.len() as u8)
        } else {
            HdrBuf::Heap(b.to_vec())
        }
    }

    /// A rendezvous request, encoded in place when it fits.
    fn rndv(h: &RndvHdr<'_>) -> Self {
        let n = h.encoded_len();
        if n <= HDR_INLINE {
            let mut a = [0u8; HDR_INLINE];
            h.encode_into(&mut a[..n]);
            HdrBuf::Inline(a, n as u8)
        } else {
            HdrBuf::Heap(h.encode())
        }
    }
    /// The header bytes.
    pub fn as_slice(&self) -> &[u8] {
        match self {
            HdrBuf::Inline(a, n) => &a[..*n as usize],
            HdrBuf::Heap(v) => v,
        }
    }
}

/// Output of the core, carried out by the driver in order.
#[derive(Debug)]
pub enum Action {
    /// Send `hdr` followed by `data` to `peer`; then, if `done` is set, call
    /// [`Core::send_done`] with it.
    Send {
        /// World rank of the destination.
        peer: u32,
        /// Encoded pml header.
        hdr: HdrBuf,
        /// Payload following the header (may be empty).
        data: RawBuf,
        /// Request to advance once the BTL has taken the data.
        done: Option<ReqId>,
    },
    /// Pull `dst.len()` bytes described by `region` from `peer` into `dst`,
    /// then call [`Core::get_done`] with `rreq`.
    Get {
        /// World rank owning the region.
        peer: u32,
        /// Region description from the RNDV.
        region: Region,
        /// Destination (the receive buffer's prefix).
        dst: RawBufMut,
        /// The receive request.
        rreq: ReqId,
    },
}

/// Counters reported when `pml_stats` is on.
#[derive(Debug, Default, Clone, Copy)]
pub struct Stats {
    /// Eager messages sent.
    pub eager_sent: u64,
    /// Rendezvous messages sent.
    pub rndv_sent: u64,
    /// Of those, synchronous sends within the eager limit carried whole in
    /// their RNDV (`FLAG_INLINE`: no get, answered with FIN on match).
    pub sync_inline: u64,
    /// Rendezvous completed with a get.
    pub rndv_get: u64,
    /// Rendezvous completed with pipelined fragments.
    pub rndv_pipelined: u64,
    /// Rendezvous whose data the NIC read itself into the receive buffer
    /// (matched by the NIC; it also sent the FIN).
    pub rndv_nic_read: u64,
    /// Messages that arrived before their receive was posted.
    pub unexpected: u64,
    /// Fragments that arrived ahead of their sequence turn.
    pub out_of_order: u64,
    /// Fragments dropped as malformed or unknown.
    pub dropped: u64,
    /// Eager-sized sends switched to rendezvous because the peer's window
    /// of unexpected-message credit was full (`pml_ob1_unexpected_limit`).
    pub credit_rndv: u64,
    /// CREDIT fragments sent back to senders.
    pub credits_sent: u64,
    /// Credit requests sent (a sender found its peer's window full).
    pub credit_requests: u64,
    /// Eager messages a blocking receive took straight from the BTL's
    /// direct channel (`Core::take_direct`: no request, no queue).
    pub direct_recv: u64,
}

/// Fixed charge per eager (MATCH) fragment against
/// `pml_ob1_unexpected_limit`, on top of its payload: covers what an
/// unexpected message costs the receiver besides its payload (queue entry,
/// hash map slot, allocation; measured ~171 B for an eager and 333-430 B
/// for a rendezvous message, docs/reliability.md).
pub const CREDIT_OVERHEAD: usize = 512;

/// Eager payloads up to this size are never switched to rendezvous when the
/// window is full: a rendezvous header costs the receiver as much as such a
/// message (they are still charged).
pub const CREDIT_SWITCH_MIN: usize = 256;

/// Default of `pml_ob1_unexpected_limit` (bytes per sending peer).
pub const DEFAULT_UNEXPECTED_LIMIT: usize = 4 << 20;

/// The charge of a MATCH with `payload` bytes or (`None`) of a RNDV (0:
/// its payload stays at the sender; RNDV headers are never held back).
fn charge_of(payload: Option<usize>) -> u64 {
    match payload {
        Some(n) => (n + CREDIT_OVERHEAD) as u64,
        None => 0,
    }
}

#[derive(Debug)]
enum Unexp {
    Eager {
        peer: u32,
        data: Payload,
    },
    /// A synchronous send carried whole in its RNDV ([`FLAG_INLINE`]):
    /// delivered like eager data, then answered with FIN to `sreq`.
    Sync {
        peer: u32,
        sreq: u64,
        data: Payload,
    },
    Rndv {
        peer: u32,
        flags: u8,
        len: u64,
        sreq: u64,
        region: Region,
    },
}

/// Bytes kept inline in an unexpected eager message.
const PAYLOAD_INLINE: usize = 48;

/// The data of an unexpected eager message: inline up to
/// [`PAYLOAD_INLINE`] bytes, on the heap beyond. A sender that runs ahead
/// of its receiver makes most small messages unexpected; an allocation and
/// a free each (plus SipHash on the table, now FxHash) were a visible part
/// of an 8-byte stream's receive cost (docs/pml.md).
#[derive(Debug)]
enum Payload {
    Inline(u8, [u8; PAYLOAD_INLINE]),
    Heap(Vec<u8>),
}

impl Payload {
    fn new(d: &[u8]) -> Payload {
        if d.len() <= PAYLOAD_INLINE {
            let mut b = [0u8; PAYLOAD_INLINE];
            b[..d.len()].copy_from_slice(d);
            Payload::Inline(d.len() as u8, b)
        } else {
            Payload::Heap(d.to_vec())
        }
    }
    fn as_slice(&self) -> &[u8] {
        match self {
            Payload::Inline(n, b) => &b[..*n as usize],
            Payload::Heap(v) => v,
        }
    }
    fn len(&self) -> usize {
        self.as_slice().len()
    }
}

impl Unexp {
    fn len(&self) -> usize {
        match self {
            Unexp::Eager { data, .. } | Unexp::Sync { data, .. } => data.len(),
            Unexp::Rndv { len, .. } => *len as usize,
        }
    }
}

#[derive(Debug)]
enum RecvPhase {
    /// Posted in the matcher under `token` (`None`: handed a message by
    /// mrecv, never queued).
    Posted { token: Option<u64> },
    /// Pulling with a get; FIN goes to `sreq` at `peer` afterwards.
    Pulling { peer: u32, sreq: u64 },
    /// Waiting for `want` bytes of FRAGs.
    Frags { want: usize, got: usize },
}

#[derive(Debug)]
enum SendPhase {
    /// An eager fragment or the last FRAG is queued.
    Queued,
    /// RNDV sent; waiting for FIN or ACK.
    Rndv {
        peer: u32,
        region: Option<Region>,
        sync: bool,
    },
}

#[derive(Debug)]
enum ReqState {
    Free,
    Send {
        buf: RawBuf,
        phase: SendPhase,
        /// Owned copy of the data for a buffered send (kept alive until
        /// done; `buf` points into it).
        _owned: Option<Vec<u8>>,
    },
    Recv {
        buf: RawBufMut,
        phase: RecvPhase,
    },
    Done,
}

#[derive(Debug)]
struct Slot {
    gen: u32,
    state: ReqState,
    status: Status,
    /// Freed by the user (MPI_Request_free) or internal (bsend): release on
    /// completion instead of waiting for a test.
    detached: bool,
    /// Bytes charged against the bsend buffer.
    bsend_bytes: usize,
    /// A receive's (context, world source; `None`: MPI_ANY_SOURCE), for
    /// failing it when that peer dies ([`Core::peer_failed`]).
    dep: Option<(u32, Option<u32>)>,
}

#[derive(Debug, Default)]
struct PeerState {
    /// Next sequence number to send, per context id.
    send_seq: Vec<u32>,
    /// Next sequence number expected, per context id.
    recv_seq: Vec<u32>,
    /// Fragments ahead of their turn: (ctx, seq) -> bytes.
    ahead: HashMap<(u32, u32), Vec<u8>>,
    /// Sender side: charge sent to this peer and not yet returned.
    credit_out: u64,
    /// Receiver side: charge of consumed messages not yet returned.
    credit_owed: u64,
    /// Sender side: a credit request is under way (answered by the next
    /// CREDIT).
    credit_asked: bool,
    /// Receiver side: the peer found its window full: return at the next
    /// consumption, whatever the batch size.
    credit_wanted: bool,
}

/// Whether an eager send of `charge` with `out` outstanding would pass
/// `limit`. With nothing outstanding a send always fits (a message whose
/// charge alone exceeds the limit still goes eager).
fn credit_full(out: u64, charge: u64, limit: u64) -> bool {
    out > 0 && out + charge > limit
}

fn seq_slot(v: &mut Vec<u32>, ctx: u32) -> &mut u32 {
    let i = ctx as usize;
    if v.len() <= i {
        v.resize(i + 1, 0);
    }
    &mut v[i]
}

/// The protocol state of one process.
pub struct Core {
    me: u32,
    comms: Vec<Option<CommRecord>>,
    peers: Vec<PeerState>,
    slots: Vec<Slot>,
    free: Vec<u32>,
    live: usize,
    unexp: FxHashMap<MsgId, Unexp>,
    next_msg: MsgId,
    matcher: Box<dyn MatchPoint + Send>,
    actions: Vec<Action>,
    bsend_cap: Option<usize>,
    bsend_used: usize,
    stats: Stats,
    /// `pml_ob1_unexpected_limit` in bytes (0 = unbounded, no flow
    /// control).
    credit_limit: u64,
    /// The offload path is on (the matcher is a split matcher).
    tm: bool,
    /// Per world rank: reached through the tag-matching NIC.
    tm_peers: Vec<bool>,
    /// Per world rank: declared dead by its BTL ([`Core::peer_failed`]);
    /// empty until the first failure (one test per receive posted).
    dead: Vec<bool>,
    /// Fragments the NIC placed for a receive (or its failure), until the
    /// split matcher reports the match.
    nic_bytes: HashMap<u64, Result<(u32, Vec<u8>), String>>,
    /// Receives matched by the NIC to a rendezvous request, the NIC reading
    /// into their buffer: envelope, whether the split matcher reported the
    /// match, and the read's outcome once known.
    nic_pending: HashMap<u64, NicPendingState>,
    /// Typed (non-contiguous) receives reading a rendezvous request of a
    /// tag-matching NIC peer, which cannot be pipelined: the get lands in
    /// this contiguous buffer, unpacked on success (by receive id).
    typed_get: HashMap<u64, Vec<u8>>,
}

#[derive(Debug)]
struct NicPendingState {
    env: tmpi_tm_engine::Envelope,
    reported: bool,
    done: Option<Result<NicData, String>>,
}

impl std::fmt::Debug for Core {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Core")
            .field("me", &self.me)
            .field("live_requests", &self.live)
            .field("unexpected", &self.unexp.len())
            .field("stats", &self.stats)
            .finish()
    }
}

impl Core {
    /// A core for world rank `me` of `size` processes, matching with
    /// `matcher`.
    pub fn new(me: u32, size: u32, matcher: Box<dyn MatchPoint + Send>) -> Self {
        Core {
            me,
            comms: Vec::new(),
            peers: (0..size).map(|_| PeerState::default()).collect(),
            dead: Vec::new(),
            slots: Vec::new(),
            free: Vec::new(),
            live: 0,
            unexp: FxHashMap::default(),
            next_msg: 1,
            matcher,
            actions: Vec::new(),
            bsend_cap: None,
            bsend_used: 0,
            stats: Stats::default(),
            credit_limit: DEFAULT_UNEXPECTED_LIMIT as u64,
            tm: false,
            tm_peers: Vec::new(),
            nic_bytes: HashMap::new(),
            nic_pending: HashMap::new(),
            typed_get: HashMap::new(),
        }
    }

    /// The buffer of receive `id` while it waits for a match (for an ADD
    /// that posts the user's buffer to the NIC).
    pub fn recv_buffer(&mut self, id: ReqId) -> Option<RawBufMut> {
        match self.slot(id)?.state {
            // A typed buffer is not one piece of memory the NIC could use.
            ReqState::Recv { buf, .. } if buf.is_contiguous() => Some(buf),
            _ => None,
        }
    }

    /// World rank of the source receive `id` names (`None`: any source, or
    /// not a receive).
    pub fn recv_peer(&self, id: ReqId) -> Option<u32> {
        let s = self.slots.get(id.index())?;
        if s.gen != id.gen() || !matches!(s.state, ReqState::Recv { .. }) {
            return None;
        }
        s.dep?.1
    }

    /// Turns the offload path on: `peers[r]` says whether world rank `r`
    /// is reached through the tag-matching NIC. The matcher must be a
    /// [`crate::offload::SplitMatch`] (otherwise nothing changes).
    pub fn set_tm_peers(&mut self, peers: Vec<bool>) {
        self.tm = self.matcher.as_split().is_some();
        self.tm_peers = peers;
    }

    /// Sets `pml_ob1_unexpected_limit`: the bytes (payload + a fixed
    /// [`CREDIT_OVERHEAD`] per message) of eager fragments this process
    /// lets be outstanding at each peer until that peer consumed them (past
    /// it, eager-sized sends go as rendezvous), and, as a receiver, the
    /// batch size (half of it) of the credit it returns. 0 = no window.
    /// Should be the same on every rank; set before any traffic.
    pub fn set_unexpected_limit(&mut self, bytes: u64) {
        self.credit_limit = bytes;
    }

    /// The `pml_ob1_unexpected_limit` in force.
    pub fn unexpected_limit(&self) -> u64 {
        self.credit_limit
    }

    /// Whether an eager send of `len` bytes to `peer` must go as a
    /// rendezvous instead: flow control is on, the payload is larger than
    /// [`CREDIT_SWITCH_MIN`] and its charge does not fit in the peer's
    /// window. Asks the peer for its credit when so. Nothing is ever held
    /// back: MPI's progress rule requires that a started send can be
    /// matched by a receive or probe the peer posts, whatever earlier
    /// messages it has not received (docs/pml.md).
    fn credit_switch(&mut self, peer: u32, len: usize) -> bool {
        if len <= CREDIT_SWITCH_MIN || !self.credit_may_switch(peer, len) {
            return false;
        }
        self.stats.credit_rndv += 1;
        self.ask_credit(peer);
        true
    }

    /// Whether [`Core::credit_switch`] could turn an eager send of `len`
    /// bytes to `peer` into a rendezvous (without its side effects).
    fn credit_may_switch(&self, peer: u32, len: usize) -> bool {
        if self.credit_limit == 0 || peer == self.me {
            return false;
        }
        self.peers
            .get(peer as usize)
            .is_some_and(|ps| credit_full(ps.credit_out, charge_of(Some(len)), self.credit_limit))
    }

    /// An eager send of `len` bytes to `peer` went out: its charge is
    /// outstanding until the peer returns it.
    fn charge_eager(&mut self, peer: u32, len: usize) {
        if self.credit_limit == 0 || peer == self.me {
            return;
        }
        if let Some(ps) = self.peers.get_mut(peer as usize) {
            ps.credit_out += charge_of(Some(len));
        }
    }

    /// A send to `peer` found the window full: ask the receiver to return
    /// what it owes now instead of at its next batch (one request under
    /// way at a time), so a sender whose peer consumed everything goes
    /// back to eager at once.
    fn ask_credit(&mut self, peer: u32) {
        let ps = &mut self.peers[peer as usize];
        if ps.credit_asked {
            return;
        }
        ps.credit_asked = true;
        self.stats.credit_requests += 1;
        self.actions.push(Action::Send {
            peer,
            hdr: HdrBuf::from(
                &CreditHdr {
                    bytes: 0,
                    request: true,
                }
                .encode(),
            ),
            data: RawBuf::empty(),
            done: None,
        });
    }

    fn return_credit(&mut self, peer: u32) {
        let ps = &mut self.peers[peer as usize];
        let bytes = std::mem::take(&mut ps.credit_owed);
        ps.credit_wanted = false;
        self.stats.credits_sent += 1;
        self.actions.push(Action::Send {
            peer,
            hdr: HdrBuf::from(
                &CreditHdr {
                    bytes,
                    request: false,
                }
                .encode(),
            ),
            data: RawBuf::empty(),
            done: None,
        });
    }

    /// The receiver consumed a message of `charge` from `peer` (matched on
    /// arrival, taken from the unexpected queue, matched by the NIC, or
    /// dropped): owes it back, returned in batches of half the limit.
    fn consumed(&mut self, peer: u32, charge: u64) {
        if self.credit_limit == 0 || peer == self.me || charge == 0 {
            return;
        }
        let Some(ps) = self.peers.get_mut(peer as usize) else {
            return;
        };
        ps.credit_owed += charge;
        if ps.credit_wanted || ps.credit_owed >= self.credit_limit / 2 {
            self.return_credit(peer);
        }
    }

    fn on_credit(&mut self, peer: u32, c: CreditHdr) {
        if c.request {
            let ps = &mut self.peers[peer as usize];
            if ps.credit_owed > 0 {
                self.return_credit(peer);
            } else {
                ps.credit_wanted = true;
            }
            return;
        }
        let ps = &mut self.peers[peer as usize];
        ps.credit_asked = false;
        if c.bytes > ps.credit_out {
            self.stats.dropped += 1;
            tracing::error!(target: "pml_ob1", peer, bytes = c.bytes, out = ps.credit_out,
                "CREDIT returns more than was sent; clamped");
        }
        ps.credit_out = ps.credit_out.saturating_sub(c.bytes);
    }

    /// This process's world rank.
    pub fn me(&self) -> u32 {
        self.me
    }

    /// Counters.
    pub fn stats(&self) -> Stats {
        self.stats
    }

    /// The matcher's counters (the fields of the `pml_stats` line).
    pub fn match_counters(&self) -> tmpi_tm_engine::split::SplitStats {
        self.matcher.counters()
    }

    /// The matcher's queue depths and high-water marks.
    pub fn queue_stats(&self) -> tmpi_tm_engine::Stats {
        self.matcher.queue_stats()
    }

    /// Requests not yet released.
    pub fn live_requests(&self) -> usize {
        self.live
    }

    /// Adds a communicator record; its context id must be unused.
    pub fn add_comm(&mut self, c: CommRecord) -> Result<(), PmlError> {
        let i = c.ctx as usize;
        if self.comms.len() <= i {
            self.comms.resize_with(i + 1, || None);
        }
        if self.comms[i].is_some() {
            return Err(PmlError::Arg(format!(
                "context id {} already in use",
                c.ctx
            )));
        }
        if c.world.iter().any(|&w| w as usize >= self.peers.len()) {
            return Err(PmlError::Arg(
                "communicator names a rank outside the job".into(),
            ));
        }
        self.comms[i] = Some(c);
        Ok(())
    }

    /// Removes the communicator with context id `ctx` (MPI_Comm_free) and
    /// resets its sequence numbers, so the id can be reused once every
    /// member removed it and no traffic on it is in flight (the context id
    /// allocator of coll guarantees this by agreeing on ids collectively).
    pub fn remove_comm(&mut self, ctx: u32) -> Result<(), PmlError> {
        let Some(slot) = self.comms.get_mut(ctx as usize).filter(|c| c.is_some()) else {
            return Err(PmlError::Comm(ctx));
        };
        *slot = None;
        for p in &mut self.peers {
            if let Some(s) = p.send_seq.get_mut(ctx as usize) {
                *s = 0;
            }
            if let Some(s) = p.recv_seq.get_mut(ctx as usize) {
                *s = 0;
            }
            p.ahead.retain(|(c, _), _| *c != ctx);
        }
        Ok(())
    }

    /// The communicator with context id `ctx`.
    pub fn comm(&self, ctx: u32) -> Result<&CommRecord, PmlError> {
        // Not `ok_or`: the error would be built and dropped on every call
        // (`PmlError` has a destructor), see `CommRecord::world_rank`.
        match self.comms.get(ctx as usize) {
            Some(Some(c)) => Ok(c),
            _ => Err(PmlError::Comm(ctx)),
        }
    }

    /// Takes the actions produced so far.
    pub fn take_actions(&mut self, out: &mut Vec<Action>) {
        out.append(&mut self.actions);
    }

    /// Whether actions are waiting.
    #[inline]
    pub fn has_actions(&self) -> bool {
        !self.actions.is_empty()
    }

    // ----- request slots -------------------------------------------------

    fn alloc(&mut self, state: ReqState) -> ReqId {
        self.live += 1;
        let idx = match self.free.pop() {
            Some(i) => i,
            None => {
                self.slots.push(Slot {
                    gen: 0,
                    state: ReqState::Free,
                    status: Status::empty(),
                    detached: false,
                    bsend_bytes: 0,
                    dep: None,
                });
                (self.slots.len() - 1) as u32
            }
        };
        let s = &mut self.slots[idx as usize];
        s.state = state;
        s.status = Status::empty();
        s.detached = false;
        s.bsend_bytes = 0;
        s.dep = None;
        ReqId::new(idx, s.gen)
    }

    fn slot(&mut self, id: ReqId) -> Option<&mut Slot> {
        let s = self.slots.get_mut(id.index())?;
        if s.gen != id.gen() || matches!(s.state, ReqState::Free) {
            return None;
        }
        Some(s)
    }

    fn release(&mut self, id: ReqId) {
        let bs;
        {
            let s = &mut self.slots[id.index()];
            s.state = ReqState::Free;
            s.gen = s.gen.wrapping_add(1);
            bs = s.bsend_bytes;
            s.bsend_bytes = 0;
        }
        self.bsend_used -= bs;
        self.free.push(id.index() as u32);
        self.live -= 1;
    }

    fn complete(&mut self, id: ReqId, status: Status) {
        let detached = {
            let s = &mut self.slots[id.index()];
            s.state = ReqState::Done;
            s.status = status;
            s.detached
        };
        if detached {
            self.release(id);
        }
    }

    /// A completed request's status, releasing the request; `Ok(None)` while
    /// it is still in progress.
    pub fn test(&mut self, id: ReqId) -> Result<Option<Status>, PmlError> {
        let Some(s) = self.slot(id) else {
            return Err(PmlError::Request);
        };
        if s.detached {
            return Err(PmlError::Request);
        }
        if let ReqState::Done = s.state {
            let st = s.status;
            self.release(id);
            Ok(Some(st))
        } else {
            Ok(None)
        }
    }

    /// Waiting loops' check (cheaper than [`Core::test`]: no `Result` with
    /// a heap-owning error to build and drop each round): the status of a
    /// completed request, which is released; `Err(())` for an id that is
    /// not a live, attached request (the caller reports
    /// [`PmlError::Request`], as `test` would).
    #[inline]
    pub(crate) fn take_done(&mut self, id: ReqId) -> Result<Option<Status>, ()> {
        let Some(s) = self.slots.get(id.index()) else {
            return Err(());
        };
        if s.gen != id.gen() || s.detached || matches!(s.state, ReqState::Free) {
            return Err(());
        }
        if !matches!(s.state, ReqState::Done) {
            return Ok(None);
        }
        let st = s.status;
        self.release(id);
        Ok(Some(st))
    }

    /// Whether `id` has completed, without releasing it.
    pub fn is_done(&mut self, id: ReqId) -> Result<bool, PmlError> {
        let Some(s) = self.slot(id) else {
            return Err(PmlError::Request);
        };
        Ok(matches!(s.state, ReqState::Done))
    }

    /// `MPI_Request_free`: the request completes on its own and is released
    /// then (the caller must not use the id again).
    pub fn free_request(&mut self, id: ReqId) -> Result<(), PmlError> {
        let Some(s) = self.slot(id) else {
            return Err(PmlError::Request);
        };
        if s.detached {
            return Err(PmlError::Request);
        }
        s.detached = true;
        if let ReqState::Done = s.state {
            self.release(id);
        }
        Ok(())
    }

    // ----- sends ---------------------------------------------------------

    fn next_send_seq(&mut self, peer: u32, ctx: u32) -> u32 {
        let s = seq_slot(&mut self.peers[peer as usize].send_seq, ctx);
        let v = *s;
        *s = v.wrapping_add(1);
        v
    }

    /// Starts a send of `buf` to rank `dest` of communicator `ctx`.
    ///
    /// # Safety
    /// `buf` must stay valid for reads and unmodified until the request
    /// completes (for [`SendMode::Buffered`] only during this call).
    pub unsafe fn isend(
        &mut self,
        wire: &mut dyn Wire,
        ctx: u32,
        dest: i32,
        tag: i32,
        buf: RawBuf,
        mode: SendMode,
    ) -> Result<ReqId, PmlError> {
        let comm = self.comm(ctx)?;
        let src = comm.rank;
        if dest == PROC_NULL {
            let id = self.alloc(ReqState::Done);
            self.slots[id.index()].status = Status::proc_null();
            return Ok(id);
        }
        let peer = comm.world_rank(dest)?;
        if self.dead.get(peer as usize).copied().unwrap_or(false) {
            // A send to a dead rank fails at once (docs/pml.md).
            let id = self.alloc(ReqState::Done);
            self.slots[id.index()].status = Status {
                error: MpiErrorClass::Other,
                ..Status::empty()
            };
            return Ok(id);
        }
        let (buf, owned, bsend_bytes) = if mode == SendMode::Buffered {
            let need = buf.len() + BSEND_OVERHEAD;
            let cap = self
                .bsend_cap
                .ok_or_else(|| PmlError::Buffer("MPI_Bsend without an attached buffer".into()))?;
            if self.bsend_used + need > cap {
                return Err(PmlError::Buffer(format!(
                    "attached buffer too small: {} of {} bytes in use, {} needed",
                    self.bsend_used, cap, need
                )));
            }
            // SAFETY contract of this function: `buf` is valid for reads now.
            let v = unsafe { buf.to_vec() };
            let b = RawBuf::from_slice(&v);
            (b, Some(v), need)
        } else {
            (buf, None, 0)
        };
        let lim = wire.limits(peer);
        let seq = self.next_send_seq(peer, ctx);
        let m = MatchHdr { ctx, src, tag, seq };
        let eager = mode != SendMode::Synchronous
            && buf.len() <= lim.eager
            && !self.credit_switch(peer, buf.len());
        // A synchronous send within the eager limit carries its data in the
        // RNDV (answered with FIN once matched): no registration, no read.
        // Not to a tag-matching NIC peer, whose RNDV becomes a NIC
        // rendezvous request.
        let sync_inline = mode == SendMode::Synchronous
            && buf.len() <= lim.eager
            // the longer header still fits the BTL's largest fragment
            && buf.len() + crate::hdr::RNDV_LEN <= lim.max_send + crate::hdr::FRAG_LEN
            && !(self.tm && self.tm_peers.get(peer as usize).copied().unwrap_or(false))
            && !self.credit_switch(peer, buf.len());
        let id = self.alloc(ReqState::Send {
            buf,
            phase: SendPhase::Queued,
            _owned: owned,
        });
        {
            let s = &mut self.slots[id.index()];
            s.bsend_bytes = bsend_bytes;
            s.status = Status {
                source: dest,
                tag,
                count: buf.len(),
                ..Status::empty()
            };
            if bsend_bytes > 0 {
                s.detached = true;
            }
        }
        self.bsend_used += bsend_bytes;
        if eager {
            self.stats.eager_sent += 1;
            self.charge_eager(peer, buf.len());
            self.actions.push(Action::Send {
                peer,
                hdr: HdrBuf::from(&m.encode()),
                data: buf,
                done: Some(id),
            });
        } else if sync_inline {
            self.stats.rndv_sent += 1;
            self.stats.sync_inline += 1;
            self.charge_eager(peer, buf.len());
            let hdr = HdrBuf::rndv(&RndvHdr {
                m,
                flags: FLAG_SYNC | FLAG_INLINE,
                len: buf.len() as u64,
                sreq: id.0,
                region: &[],
                data: &[],
            });
            if let ReqState::Send { phase, .. } = &mut self.slots[id.index()].state {
                *phase = SendPhase::Rndv {
                    peer,
                    region: None,
                    sync: true,
                };
            }
            // The data follows the header in the same fragment; the request
            // completes on FIN, not when the transport took the data.
            self.actions.push(Action::Send {
                peer,
                hdr,
                data: buf,
                done: None,
            });
        } else {
            self.stats.rndv_sent += 1;
            // A typed (non-contiguous) buffer cannot be read remotely:
            // it goes as pipelined fragments, packed one at a time.
            let region = if lim.get && !buf.is_empty() && buf.is_contiguous() {
                wire.register(peer, buf)
            } else {
                None
            };
            let mut flags = 0;
            if mode == SendMode::Synchronous {
                flags |= FLAG_SYNC;
            }
            if region.is_some() {
                flags |= FLAG_REGION;
            }
            let hdr = HdrBuf::rndv(&RndvHdr {
                m,
                flags,
                len: buf.len() as u64,
                sreq: id.0,
                region: region.as_deref().unwrap_or(&[]),
                data: &[],
            });
            if let ReqState::Send { phase, .. } = &mut self.slots[id.index()].state {
                *phase = SendPhase::Rndv {
                    peer,
                    region,
                    sync: mode == SendMode::Synchronous,
                };
            }
            self.actions.push(Action::Send {
                peer,
                hdr,
                data: RawBuf::empty(),
                done: None,
            });
        }
        if bsend_bytes > 0 {
            // The internal request (detached) owns the copy and completes on
            // its own; the caller gets a request that is complete already
            // (a buffered send completes locally).
            let st = self.slots[id.index()].status;
            let user = self.alloc(ReqState::Done);
            self.slots[user.index()].status = st;
            return Ok(user);
        }
        Ok(id)
    }

    /// Blocking-send fast path (`Pml::send_blocking`): for a standard or
    /// ready send that goes eager to a live peer (within the eager limit,
    /// and for more than [`CREDIT_SWITCH_MIN`] bytes only while the
    /// peer's credit window has room: otherwise `isend` decides), does the sender's bookkeeping of [`Core::isend`]
    /// (sequence number, statistics, flow-control charge) without a
    /// request or an action, and returns the peer, the match header and
    /// the status the send completes with; the caller hands the fragment
    /// to the transport at once (nothing may be queued before it). `None`:
    /// not such a send (nothing was done; use `isend`). Errors as `isend`.
    #[inline(always)]
    pub(crate) fn eager_direct(
        &mut self,
        limits: &[Limits],
        ctx: u32,
        dest: i32,
        tag: i32,
        len: usize,
        mode: SendMode,
    ) -> Result<Option<EagerSend>, PmlError> {
        if !matches!(mode, SendMode::Standard | SendMode::Ready) || dest == PROC_NULL {
            return Ok(None);
        }
        let comm = self.comm(ctx)?;
        let src = comm.rank;
        let peer = comm.world_rank(dest)?;
        let over = match limits.get(peer as usize) {
            Some(l) => len > l.eager,
            None => true,
        };
        if over
            || self.dead.get(peer as usize).copied().unwrap_or(false)
            || (len > CREDIT_SWITCH_MIN && self.credit_may_switch(peer, len))
        {
            return Ok(None);
        }
        let seq = self.next_send_seq(peer, ctx);
        self.stats.eager_sent += 1;
        self.charge_eager(peer, len);
        Ok(Some(EagerSend {
            peer,
            hdr: MatchHdr { ctx, src, tag, seq }.encode(),
            st: Status {
                source: dest,
                tag,
                count: len,
                ..Status::empty()
            },
        }))
    }

    /// A request already complete with `st` ([`Core::eager_direct`]'s
    /// send started by `isend` whose fragment went out at once).
    pub(crate) fn done_request(&mut self, st: Status) -> ReqId {
        let id = self.alloc(ReqState::Done);
        self.slots[id.index()].status = st;
        id
    }

    /// The transport refused [`Core::eager_direct`]'s fragment for now: it
    /// becomes a send request queued as `isend` would have queued it.
    pub(crate) fn queue_direct(&mut self, e: &EagerSend, buf: RawBuf) -> ReqId {
        let EagerSend { peer, st, .. } = *e;
        let hdr = HdrBuf::from(&e.hdr);
        let id = self.alloc(ReqState::Send {
            buf,
            phase: SendPhase::Queued,
            _owned: None,
        });
        self.slots[id.index()].status = st;
        self.actions.push(Action::Send {
            peer,
            hdr,
            data: buf,
            done: Some(id),
        });
        id
    }

    /// The driver carried out an [`Action::Send`] whose `done` was `id`.
    pub fn send_done(&mut self, id: ReqId) {
        let Some(s) = self.slot(id) else { return };
        if let ReqState::Send {
            phase: SendPhase::Queued,
            ..
        } = s.state
        {
            let st = s.status;
            self.complete(id, st);
        }
    }

    /// The driver could not carry out the [`Action::Send`] whose `done`
    /// was `id` (the connection is broken): the send fails with `class`.
    pub fn send_failed(&mut self, id: ReqId, class: MpiErrorClass) {
        let Some(s) = self.slot(id) else { return };
        if let ReqState::Send {
            phase: SendPhase::Queued,
            ..
        } = s.state
        {
            let st = Status {
                error: class,
                ..s.status
            };
            self.complete(id, st);
        }
    }

    /// Whether a receive on `ctx` from world rank `src` (`None`: any
    /// source) waits on a dead peer: its source, or for MPI_ANY_SOURCE any
    /// member of the communicator (docs/pml.md, peer failure).
    fn depends_on_dead(&self, ctx: u32, src: Option<u32>) -> bool {
        match src {
            Some(w) => self.dead.get(w as usize).copied().unwrap_or(false),
            None => self.comm(ctx).is_ok_and(|c| {
                c.world
                    .iter()
                    .any(|&w| self.dead.get(w as usize).copied().unwrap_or(false))
            }),
        }
    }

    /// World rank `peer` is dead (its BTL lost the connection): every
    /// request that waits on it completes with `class`: receives naming it,
    /// MPI_ANY_SOURCE receives on communicators that contain it, receives
    /// of a message it was still sending, rendezvous sends to it. Later
    /// receives of the same kind fail at once. Returns how many failed.
    pub fn peer_failed(&mut self, peer: u32, class: MpiErrorClass) -> usize {
        if peer as usize >= self.peers.len() {
            return 0;
        }
        if self.dead.is_empty() {
            self.dead = vec![false; self.peers.len()];
        }
        self.dead[peer as usize] = true;
        let mut n = 0;
        for idx in 0..self.slots.len() {
            let s = &self.slots[idx];
            let id = ReqId::new(idx as u32, s.gen);
            let fail = match (&s.state, s.dep) {
                (
                    ReqState::Send {
                        phase: SendPhase::Rndv { peer: p, .. },
                        ..
                    },
                    _,
                ) => *p == peer,
                (
                    ReqState::Recv {
                        phase: RecvPhase::Posted { token: Some(tok) },
                        ..
                    },
                    Some((ctx, src)),
                ) => {
                    let tok = *tok;
                    self.depends_on_dead(ctx, src)
                        && match self.matcher.as_split() {
                            Some(sm) if self.tm => sm.cancel_recv(tok, id.0),
                            _ => self.matcher.cancel(tok),
                        }
                }
                (
                    ReqState::Recv {
                        phase: RecvPhase::Frags { .. } | RecvPhase::Pulling { .. },
                        ..
                    },
                    Some((ctx, src)),
                ) => {
                    let from = src.or_else(|| {
                        self.comm(ctx)
                            .ok()
                            .and_then(|c| c.world_rank(s.status.source).ok())
                    });
                    from == Some(peer)
                }
                _ => false,
            };
            if fail {
                let st = Status {
                    error: class,
                    ..self.slots[idx].status
                };
                self.complete(id, st);
                n += 1;
            }
        }
        n
    }

    /// Attaches a buffer of `cap` bytes for buffered sends.
    pub fn buffer_attach(&mut self, cap: usize) -> Result<(), PmlError> {
        if self.bsend_cap.is_some() {
            return Err(PmlError::Buffer("a buffer is already attached".into()));
        }
        self.bsend_cap = Some(cap);
        Ok(())
    }

    /// Bytes of the attached buffer in use (0 once every buffered send
    /// completed); `None` when no buffer is attached.
    pub fn buffer_in_use(&self) -> Option<usize> {
        self.bsend_cap.map(|_| self.bsend_used)
    }

    /// Detaches the buffer; the caller waited until [`Core::buffer_in_use`]
    /// is zero. Returns its size.
    pub fn buffer_detach(&mut self) -> Result<usize, PmlError> {
        let cap = self
            .bsend_cap
            .take()
            .ok_or_else(|| PmlError::Buffer("no buffer attached".into()))?;
        Ok(cap)
    }

    // ----- receives ------------------------------------------------------

    fn pattern(&self, ctx: u32, src: i32, tag: i32) -> Result<Pattern, PmlError> {
        let comm = self.comm(ctx)?;
        let src = if src == crate::request::ANY_SOURCE {
            None
        } else {
            comm.world_rank(src)?;
            Some(src)
        };
        let tag = if tag == crate::request::ANY_TAG {
            None
        } else {
            Some(tag)
        };
        Ok(Pattern { ctx, src, tag })
    }

    /// The world rank whose next eager message a blocking receive from
    /// `(ctx, src)` may take straight from the BTL ([`Core::take_direct`]):
    /// only a named source on the software matcher. Fixed for the whole
    /// receive (the communicator cannot go away under a call on it).
    /// `None`: the regular path.
    pub(crate) fn direct_source(&self, ctx: u32, src: i32) -> Option<u32> {
        if src < 0 || self.tm {
            return None;
        }
        self.comm(ctx).ok()?.world_rank(src).ok()
    }

    /// Whether the next message of `peer` (from [`Core::direct_source`])
    /// may be taken now: the peer is alive with nothing held out of
    /// order, no message is queued anywhere and `posted` receives are
    /// posted (0 before the receive posts its own, 1 after: then it is
    /// the only one). So the next message from the peer in its turn is
    /// the first one this receive could match, and no other receive
    /// wants it.
    #[inline(always)]
    pub(crate) fn direct_ready(&self, peer: u32, posted: usize) -> bool {
        self.peers
            .get(peer as usize)
            .is_some_and(|ps| ps.ahead.is_empty())
            && !self.dead.get(peer as usize).copied().unwrap_or(false)
            && self.matcher.depth() == (posted, 0)
    }

    /// Takes fragment `bytes` from `peer` ([`Core::direct_ready`] said yes)
    /// for the blocking receive `pat` (a named source) into `buf` if it is
    /// that receive's message: an eager MATCH in its sequence turn that the
    /// pattern accepts and `buf` holds. `posted`: the receive's request,
    /// if it is posted; it is withdrawn from the matcher and released.
    /// Then the message is delivered as `on_frag` would have matched it
    /// to the receive, and its status returned; `None` (nothing changed)
    /// otherwise.
    ///
    /// # Safety
    /// `buf` is valid for writes (the receive's buffer, contract of
    /// `irecv`).
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    pub(crate) unsafe fn take_direct(
        &mut self,
        peer: u32,
        pat: &Pattern,
        buf: RawBufMut,
        posted: Option<ReqId>,
        bytes: &[u8],
    ) -> Option<Status> {
        let (m, data) = crate::hdr::parse_match(bytes)?;
        let env = Envelope {
            ctx: m.ctx,
            src: m.src,
            tag: m.tag,
        };
        if !pat.accepts(&env) || data.len() > buf.len() {
            return None;
        }
        if *seq_slot(&mut self.peers[peer as usize].recv_seq, m.ctx) != m.seq {
            return None;
        }
        if let Some(id) = posted {
            let s = self.slots.get(id.index())?;
            let ReqState::Recv {
                phase: RecvPhase::Posted { token: Some(tok) },
                ..
            } = s.state
            else {
                return None;
            };
            if s.gen != id.gen() || !self.matcher.withdraw(tok) {
                return None;
            }
            self.release(id);
        }
        let exp = seq_slot(&mut self.peers[peer as usize].recv_seq, m.ctx);
        *exp = exp.wrapping_add(1);
        self.stats.direct_recv += 1;
        self.consumed(peer, charge_of(Some(data.len())));
        // SAFETY: `buf` is valid for writes (contract); `data` fits it
        // (checked above).
        unsafe { buf.write_at(0, data) };
        Some(Status {
            source: m.src,
            tag: m.tag,
            count: data.len(),
            error: MpiErrorClass::Success,
            cancelled: false,
        })
    }

    /// Posts a receive into `buf`.
    ///
    /// # Safety
    /// `buf` must stay valid for writes and not be accessed otherwise until
    /// the request completes.
    pub unsafe fn irecv(
        &mut self,
        wire: &mut dyn Wire,
        ctx: u32,
        src: i32,
        tag: i32,
        buf: RawBufMut,
    ) -> Result<ReqId, PmlError> {
        if src == PROC_NULL {
            self.comm(ctx)?;
            let id = self.alloc(ReqState::Done);
            self.slots[id.index()].status = Status::proc_null();
            return Ok(id);
        }
        let pat = self.pattern(ctx, src, tag)?;
        let id = self.alloc(ReqState::Recv {
            buf,
            phase: RecvPhase::Posted { token: None },
        });
        let wsrc = match pat.src {
            Some(r) => Some(self.comm(ctx)?.world_rank(r)?),
            None => None,
        };
        self.slots[id.index()].dep = Some((ctx, wsrc));
        if !self.dead.is_empty() && self.depends_on_dead(ctx, wsrc) {
            let st = Status {
                error: MpiErrorClass::Other,
                ..Status::empty()
            };
            self.complete(id, st);
            return Ok(id);
        }
        let posted = if self.tm {
            self.post_split(pat, id, buf.len(), buf.is_contiguous())
        } else {
            self.matcher.post_recv(pat, id.0)
        };
        match posted {
            Ok(Posted::Matched(env, msg)) => self.deliver_unexpected(wire, id, env, msg),
            Ok(Posted::Queued(tok)) => {
                if let ReqState::Recv { phase, .. } = &mut self.slots[id.index()].state {
                    *phase = RecvPhase::Posted { token: Some(tok) };
                }
            }
            Err(e) => {
                self.release(id);
                return Err(PmlError::NoMem(e.to_string()));
            }
        }
        Ok(id)
    }

    /// `MPI_Iprobe`: the status of the first matching unexpected message.
    pub fn iprobe(&mut self, ctx: u32, src: i32, tag: i32) -> Result<Option<Status>, PmlError> {
        if src == PROC_NULL {
            self.comm(ctx)?;
            return Ok(Some(Status::proc_null()));
        }
        let pat = self.pattern(ctx, src, tag)?;
        Ok(self.matcher.probe(pat).map(|(env, msg)| Status {
            source: env.src,
            tag: env.tag,
            count: self.unexp.get(&msg).map_or(0, Unexp::len),
            ..Status::empty()
        }))
    }

    /// `MPI_Improbe`: removes the first matching unexpected message from
    /// matching and returns a handle for [`Core::imrecv`].
    pub fn improbe(
        &mut self,
        ctx: u32,
        src: i32,
        tag: i32,
    ) -> Result<Option<(MsgId, Envelope, Status)>, PmlError> {
        if src == PROC_NULL {
            return Err(PmlError::Arg(
                "mprobe from MPI_PROC_NULL: use MPI_MESSAGE_NO_PROC semantics in the caller".into(),
            ));
        }
        let pat = self.pattern(ctx, src, tag)?;
        Ok(self.matcher.mprobe(pat).map(|(env, msg)| {
            let st = Status {
                source: env.src,
                tag: env.tag,
                count: self.unexp.get(&msg).map_or(0, Unexp::len),
                ..Status::empty()
            };
            (msg, env, st)
        }))
    }

    /// `MPI_Imrecv`: receives the message taken by [`Core::improbe`].
    ///
    /// # Safety
    /// As [`Core::irecv`].
    pub unsafe fn imrecv(
        &mut self,
        wire: &mut dyn Wire,
        msg: MsgId,
        env: Envelope,
        buf: RawBufMut,
    ) -> Result<ReqId, PmlError> {
        if !self.unexp.contains_key(&msg) {
            return Err(PmlError::Arg("unknown or already received message".into()));
        }
        let id = self.alloc(ReqState::Recv {
            buf,
            phase: RecvPhase::Posted { token: None },
        });
        self.deliver_unexpected(wire, id, env, msg);
        Ok(id)
    }

    /// `MPI_Cancel`. Receives not yet matched are cancelled; sends are never
    /// cancelled (MPI allows a cancel to fail). Returns whether it worked.
    pub fn cancel(&mut self, id: ReqId) -> Result<bool, PmlError> {
        let Some(s) = self.slot(id) else {
            return Err(PmlError::Request);
        };
        if let ReqState::Recv {
            phase: RecvPhase::Posted { token: Some(tok) },
            ..
        } = s.state
        {
            let done = match self.matcher.as_split() {
                Some(sm) if self.tm => sm.cancel_recv(tok, id.0),
                _ => self.matcher.cancel(tok),
            };
            if done {
                let st = Status {
                    cancelled: true,
                    ..Status::empty()
                };
                self.complete(id, st);
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// After a cancel that did not settle at once: `None` while the receive
    /// is still posted (its cancel pending at the NIC), else whether it
    /// ended cancelled.
    pub fn cancel_outcome(&mut self, id: ReqId) -> Result<Option<bool>, PmlError> {
        let Some(s) = self.slot(id) else {
            return Err(PmlError::Request);
        };
        Ok(match s.state {
            ReqState::Recv {
                phase: RecvPhase::Posted { token: Some(_) },
                ..
            } => None,
            ReqState::Done => Some(s.status.cancelled),
            _ => Some(false),
        })
    }

    fn deliver_unexpected(&mut self, wire: &mut dyn Wire, id: ReqId, env: Envelope, msg: MsgId) {
        match self.unexp.remove(&msg) {
            Some(Unexp::Eager { peer, data }) => {
                self.consumed(peer, charge_of(Some(data.len())));
                self.deliver_eager(id, env, data.as_slice())
            }
            Some(Unexp::Sync { peer, sreq, data }) => {
                self.consumed(peer, charge_of(Some(data.len())));
                self.deliver_sync(id, env, peer, sreq, data.as_slice())
            }
            Some(Unexp::Rndv {
                peer,
                flags,
                len,
                sreq,
                region,
            }) => self.start_rndv(wire, id, env, peer, flags, len, sreq, region),
            None => {
                tracing::error!(target: "pml_ob1", msg, "matched message has no stored data");
                self.complete(
                    id,
                    Status {
                        error: MpiErrorClass::Intern,
                        ..Status::empty()
                    },
                );
            }
        }
    }

    /// A synchronous send's inline data ([`FLAG_INLINE`]): delivered as
    /// eager data (truncation included), then FIN tells the sender.
    fn deliver_sync(&mut self, id: ReqId, env: Envelope, peer: u32, sreq: u64, data: &[u8]) {
        self.fin(peer, sreq, 0);
        self.deliver_eager(id, env, data);
    }

    fn deliver_eager(&mut self, id: ReqId, env: Envelope, data: &[u8]) {
        let ReqState::Recv { buf, .. } = self.slots[id.index()].state else {
            return;
        };
        let n = data.len().min(buf.len());
        // SAFETY: `buf` is the receive buffer, valid for writes until this
        // request completes (contract of `irecv`); `n <= buf.len()`.
        unsafe { buf.write_at(0, &data[..n]) };
        let st = Status {
            source: env.src,
            tag: env.tag,
            count: n,
            error: if data.len() > buf.len() {
                MpiErrorClass::Truncate
            } else {
                MpiErrorClass::Success
            },
            cancelled: false,
        };
        self.complete(id, st);
    }

    #[allow(clippy::too_many_arguments)]
    fn start_rndv(
        &mut self,
        wire: &mut dyn Wire,
        id: ReqId,
        env: Envelope,
        peer: u32,
        flags: u8,
        len: u64,
        sreq: u64,
        region: Region,
    ) {
        let ReqState::Recv { buf, .. } = self.slots[id.index()].state else {
            return;
        };
        let want = (len.min(buf.len() as u64)) as usize;
        let st = Status {
            source: env.src,
            tag: env.tag,
            count: want,
            error: if len > buf.len() as u64 {
                MpiErrorClass::Truncate
            } else {
                MpiErrorClass::Success
            },
            cancelled: false,
        };
        self.slots[id.index()].status = st;
        if want == 0 {
            self.fin(peer, sreq, 0);
            self.complete(id, st);
            return;
        }
        // A typed receive buffer takes fragments (unpacked one at a time),
        // never a get into its memory; except from a tag-matching NIC peer,
        // whose rendezvous request may not be pipelined: read into a
        // contiguous temporary, unpacked when the get is done.
        let nic_peer = self.tm && self.tm_peers.get(peer as usize).copied().unwrap_or(false);
        if flags & FLAG_REGION != 0 && wire.limits(peer).get && (buf.is_contiguous() || nic_peer) {
            if let ReqState::Recv { phase, .. } = &mut self.slots[id.index()].state {
                *phase = RecvPhase::Pulling { peer, sreq };
            }
            let dst = if buf.is_contiguous() {
                buf.prefix(want)
            } else {
                let v = self.typed_get.entry(id.0).or_default();
                *v = vec![0u8; want];
                RawBufMut::from_slice(v)
            };
            self.actions.push(Action::Get {
                peer,
                region,
                dst,
                rreq: id,
            });
        } else {
            self.ack(id, peer, sreq, want);
        }
    }

    fn ack(&mut self, id: ReqId, peer: u32, sreq: u64, want: usize) {
        if let ReqState::Recv { phase, .. } = &mut self.slots[id.index()].state {
            *phase = RecvPhase::Frags { want, got: 0 };
        }
        self.stats.rndv_pipelined += 1;
        let hdr = AckHdr {
            sreq,
            rreq: id.0,
            want: want as u64,
        };
        self.actions.push(Action::Send {
            peer,
            hdr: HdrBuf::from(&hdr.encode()),
            data: RawBuf::empty(),
            done: None,
        });
    }

    fn fin(&mut self, peer: u32, sreq: u64, status: i32) {
        self.actions.push(Action::Send {
            peer,
            hdr: HdrBuf::from(&FinHdr { sreq, status }.encode()),
            data: RawBuf::empty(),
            done: None,
        });
    }

    /// The driver finished an [`Action::Get`] (`ok == false`: it failed and
    /// the pipelined protocol takes over).
    pub fn get_done(&mut self, rreq: ReqId, ok: bool) {
        let staged = self.typed_get.remove(&rreq.0);
        let Some(s) = self.slot(rreq) else { return };
        let ReqState::Recv {
            buf,
            phase: RecvPhase::Pulling { peer, sreq },
            ..
        } = s.state
        else {
            return;
        };
        let st = s.status;
        if let (true, Some(v)) = (ok, staged) {
            // SAFETY: the receive is pulling (not complete), so its typed
            // buffer is valid and ours (irecv contract); `v` is not part of
            // it.
            unsafe { buf.write_at(0, &v) };
        }
        if ok {
            self.stats.rndv_get += 1;
            self.fin(peer, sreq, 0);
            self.complete(rreq, st);
        } else {
            tracing::debug!(target: "pml_ob1", peer, "get failed; falling back to pipelined fragments");
            self.ack(rreq, peer, sreq, st.count);
        }
    }

    /// The get of receive `rreq` failed for good (broken connection): the
    /// receive fails with `class`; the sender is not told (it cannot be
    /// reached), the application's error handling ends the job.
    pub fn get_failed(&mut self, rreq: ReqId, class: MpiErrorClass) {
        let Some(s) = self.slot(rreq) else { return };
        let ReqState::Recv {
            phase: RecvPhase::Pulling { .. },
            ..
        } = s.state
        else {
            return;
        };
        let st = Status {
            error: class,
            ..s.status
        };
        self.complete(rreq, st);
    }

    // ----- incoming fragments -------------------------------------------

    /// A fragment arrived from world rank `peer`. Malformed fragments are
    /// counted, logged and dropped (the error is returned for tests).
    pub fn on_frag(
        &mut self,
        wire: &mut dyn Wire,
        peer: u32,
        bytes: &[u8],
    ) -> Result<(), HdrError> {
        if peer as usize >= self.peers.len() {
            self.stats.dropped += 1;
            return Err(HdrError::Invalid {
                kind: "common",
                what: "fragment from a rank outside the job",
            });
        }
        // An eager message in its turn (the common case) skips the general
        // header enum and the reorder check after it.
        if let Some((m, data)) = crate::hdr::parse_match(bytes) {
            let ps = &mut self.peers[peer as usize];
            if ps.ahead.is_empty() {
                let exp = seq_slot(&mut ps.recv_seq, m.ctx);
                if m.seq == *exp {
                    *exp = exp.wrapping_add(1);
                    self.on_eager(peer, m, data);
                    return Ok(());
                }
            }
        }
        let h = match Header::parse(bytes) {
            Ok(h) => h,
            Err(e) => {
                self.stats.dropped += 1;
                tracing::error!(target: "pml_ob1", peer, "dropping fragment: {e}");
                return Err(e);
            }
        };
        match h {
            Header::Match(m, _) | Header::Rndv(RndvHdr { m, .. }) => {
                let exp = seq_slot(&mut self.peers[peer as usize].recv_seq, m.ctx);
                if m.seq != *exp {
                    // Ahead of its turn (sequence numbers wrap; anything not
                    // equal waits for its predecessors).
                    self.stats.out_of_order += 1;
                    self.peers[peer as usize]
                        .ahead
                        .insert((m.ctx, m.seq), bytes.to_vec());
                    return Ok(());
                }
                *exp = exp.wrapping_add(1);
                self.on_match(wire, peer, h);
                // Drain successors that were waiting.
                loop {
                    let ps = &mut self.peers[peer as usize];
                    if ps.ahead.is_empty() {
                        break;
                    }
                    let exp = seq_slot(&mut ps.recv_seq, m.ctx);
                    let Some(b) = ps.ahead.remove(&(m.ctx, *exp)) else {
                        break;
                    };
                    *exp = exp.wrapping_add(1);
                    // Stored bytes parsed before; parse cannot fail now.
                    if let Ok(h) = Header::parse(&b) {
                        self.on_match(wire, peer, h);
                    }
                }
                Ok(())
            }
            Header::Ack(a) => {
                self.on_ack(wire, peer, a);
                Ok(())
            }
            Header::Frag(f, data) => {
                self.on_data(f, data);
                Ok(())
            }
            Header::Fin(f) => {
                self.on_fin(wire, f);
                Ok(())
            }
            Header::Credit(c) => {
                self.on_credit(peer, c);
                Ok(())
            }
        }
    }

    /// [`Core::on_match_from`] for a MATCH fragment that arrived in its
    /// turn through a BTL (not from the NIC), without the header enum. It
    /// repeats that function's eager arm on purpose: calling it with a
    /// rebuilt `Header::Match` instead measured 377 instead of 330
    /// instructions per 8-byte message in `on_frag` (callgrind).
    fn on_eager(&mut self, peer: u32, m: MatchHdr, data: &[u8]) {
        let env = Envelope {
            ctx: m.ctx,
            src: m.src,
            tag: m.tag,
        };
        let msg = self.next_msg;
        self.next_msg += 1;
        match self.matcher.arrive(env, msg) {
            Ok(Some(rid)) => {
                self.consumed(peer, charge_of(Some(data.len())));
                self.deliver_eager(ReqId(rid), env, data);
            }
            Ok(None) => {
                self.stats.unexpected += 1;
                self.unexp.insert(
                    msg,
                    Unexp::Eager {
                        peer,
                        data: Payload::new(data),
                    },
                );
            }
            Err(e) => {
                self.stats.dropped += 1;
                tracing::error!(target: "pml_ob1", peer, "message lost: {e}");
                self.consumed(peer, charge_of(Some(data.len())));
            }
        }
    }

    fn on_match(&mut self, wire: &mut dyn Wire, peer: u32, h: Header<'_>) {
        self.on_match_from(wire, peer, h, false)
    }

    fn on_match_from(&mut self, wire: &mut dyn Wire, peer: u32, h: Header<'_>, from_nic: bool) {
        let m = match &h {
            Header::Match(m, _) => *m,
            Header::Rndv(r) => r.m,
            _ => return,
        };
        let env = Envelope {
            ctx: m.ctx,
            src: m.src,
            tag: m.tag,
        };
        let msg = self.next_msg;
        self.next_msg += 1;
        // `as_split` only for NIC-unexpected messages: the software path
        // pays no extra call.
        let arrived = if from_nic {
            match self.matcher.as_split() {
                Some(sm) => sm.nic_unexpected(env, msg),
                None => self.matcher.arrive(env, msg),
            }
        } else {
            self.matcher.arrive(env, msg)
        };
        let charge = match &h {
            Header::Match(_, data) => charge_of(Some(data.len())),
            Header::Rndv(r) if r.flags & FLAG_INLINE != 0 => charge_of(Some(r.data.len())),
            _ => charge_of(None),
        };
        let arrived = match arrived {
            Ok(a) => a,
            Err(e) => {
                self.stats.dropped += 1;
                tracing::error!(target: "pml_ob1", peer, "message lost: {e}");
                self.consumed(peer, charge);
                return;
            }
        };
        if arrived.is_some() {
            self.consumed(peer, charge);
        }
        match (arrived, h) {
            // Matched: deliver straight from the fragment, no copy kept.
            (Some(rid), Header::Match(_, data)) => self.deliver_eager(ReqId(rid), env, data),
            (Some(rid), Header::Rndv(r)) if r.flags & FLAG_INLINE != 0 => {
                self.deliver_sync(ReqId(rid), env, peer, r.sreq, r.data)
            }
            (Some(rid), Header::Rndv(r)) => self.start_rndv(
                wire,
                ReqId(rid),
                env,
                peer,
                r.flags,
                r.len,
                r.sreq,
                Region::new(r.region),
            ),
            (None, Header::Match(_, data)) => {
                self.stats.unexpected += 1;
                self.unexp.insert(
                    msg,
                    Unexp::Eager {
                        peer,
                        data: Payload::new(data),
                    },
                );
            }
            (None, Header::Rndv(r)) if r.flags & FLAG_INLINE != 0 => {
                self.stats.unexpected += 1;
                self.unexp.insert(
                    msg,
                    Unexp::Sync {
                        peer,
                        sreq: r.sreq,
                        data: Payload::new(r.data),
                    },
                );
            }
            (None, Header::Rndv(r)) => {
                self.stats.unexpected += 1;
                self.unexp.insert(
                    msg,
                    Unexp::Rndv {
                        peer,
                        flags: r.flags,
                        len: r.len,
                        sreq: r.sreq,
                        region: Region::new(r.region),
                    },
                );
            }
            _ => {}
        }
    }

    // ----- the offload path (btl-openib with tag matching) ---------------

    fn post_split(
        &mut self,
        pat: Pattern,
        id: ReqId,
        len: usize,
        contiguous: bool,
    ) -> Result<Posted, MatchError> {
        let world = pat.src.and_then(|s| {
            let c = self.comms.get(pat.ctx as usize)?.as_ref()?;
            c.world.get(usize::try_from(s).ok()?).copied()
        });
        let nic = match world {
            Some(w) if self.tm_peers.get(w as usize).copied().unwrap_or(false) => {
                crate::offload::nic_tag(&pat).map(|(tag, mask)| NicTag { tag, mask })
            }
            _ => None,
        };
        // A typed (non-contiguous) buffer is never posted to the NIC as is:
        // a bounce buffer when small, else the receive stays in software.
        let info = RecvInfo {
            len,
            contiguous,
            nic,
        };
        match self.matcher.as_split() {
            Some(sm) => sm.post(pat, id.0, info),
            None => self.matcher.post_recv(pat, id.0),
        }
    }

    /// An input of the offload path (in CQ order), then every outcome that
    /// settled.
    pub fn on_tm_input(&mut self, wire: &mut dyn Wire, input: TmInput) {
        // Tagged fragments also reach a process without the offload path
        // (its peer has tag matching, it has not): plain arrivals then.
        if !self.tm && !matches!(input, TmInput::Frag { .. }) {
            return;
        }
        match input {
            TmInput::Frag {
                peer,
                from_nic,
                bytes,
            } => match Header::parse(&bytes) {
                Ok(h @ (Header::Match(..) | Header::Rndv(..)))
                    if (peer as usize) < self.peers.len() =>
                {
                    self.on_match_from(wire, peer, h, from_nic)
                }
                _ => {
                    self.stats.dropped += 1;
                    tracing::error!(target: "pml_ob1", peer, "malformed tagged fragment dropped");
                    if from_nic {
                        // The NIC counted it as unexpected: so must the
                        // split matcher, or the counts never agree again.
                        self.count_dropped_nic_unexpected();
                    }
                }
            },
            TmInput::Nic(ev) => self.nic_event(ev),
            TmInput::Matched {
                recv,
                id,
                peer,
                envelope,
                bytes,
            } => {
                self.nic_bytes.insert(recv, Ok((peer, bytes)));
                self.nic_event(NicEvent::Matched {
                    id,
                    envelope,
                    complete: true,
                });
            }
            TmInput::NicPending { recv, id, envelope } => {
                self.nic_pending.insert(
                    recv,
                    NicPendingState {
                        env: envelope,
                        reported: false,
                        done: None,
                    },
                );
                self.nic_event(NicEvent::Matched {
                    id,
                    envelope,
                    complete: false,
                });
            }
            TmInput::NicData { recv, id, result } => {
                match self.nic_pending.get_mut(&recv) {
                    Some(r) => r.done = Some(result),
                    None => {
                        tracing::error!(target: "pml_ob1", recv, "NIC data for a receive without a pending match")
                    }
                }
                self.nic_event(NicEvent::DataDone { id });
                self.finish_nic_pending(wire, recv);
            }
            TmInput::SendDone { sreq, ok } => {
                let f = FinHdr {
                    sreq,
                    status: if ok { 0 } else { MpiErrorClass::Other as i32 },
                };
                self.on_fin(wire, f);
            }
            TmInput::Failed { recv, id, error } => {
                self.nic_bytes.insert(recv, Err(error));
                self.nic_event(NicEvent::Matched {
                    id,
                    envelope: tmpi_tm_engine::Envelope::new(0, 0, 0),
                    complete: true,
                });
            }
        }
        self.drain_late(wire);
    }

    /// Feeds a dropped NIC-unexpected message to the split matcher under
    /// an envelope no receive can name (context `u32::MAX`, tag
    /// `i32::MIN`), then takes it out again, so its unexpected count stays
    /// equal to the NIC's.
    fn count_dropped_nic_unexpected(&mut self) {
        let env = Envelope {
            ctx: u32::MAX,
            src: 0,
            tag: i32::MIN,
        };
        let msg = self.next_msg;
        self.next_msg += 1;
        if let Some(sm) = self.matcher.as_split() {
            if sm.nic_unexpected(env, msg).is_ok() {
                let pat = Pattern {
                    ctx: env.ctx,
                    src: Some(0),
                    tag: Some(env.tag),
                };
                // While a DEL is pending the entry waits; harmless.
                let _ = sm.mprobe(pat);
            }
        }
    }

    fn nic_event(&mut self, ev: NicEvent) {
        if let Some(sm) = self.matcher.as_split() {
            if let Err(e) = sm.nic_event(ev) {
                tracing::error!(target: "pml_ob1", ?ev, "NIC event not accepted: {e}");
            }
        }
    }

    /// The next NIC-list operation to execute, in order.
    pub fn poll_nic_action(&mut self) -> Option<NicAction<u64>> {
        if !self.tm {
            return None;
        }
        self.matcher.as_split()?.poll_action()
    }

    /// Carries out the split matcher's outcomes that settled late.
    pub fn drain_late(&mut self, wire: &mut dyn Wire) {
        if !self.tm {
            return;
        }
        loop {
            let Some(l) = self.matcher.as_split().and_then(|sm| sm.poll_late()) else {
                return;
            };
            match l {
                Late::Matched { recv, env, msg } => {
                    self.deliver_unexpected(wire, ReqId(recv), env, msg)
                }
                Late::Nic { recv } => self.nic_matched(wire, ReqId(recv)),
                Late::Cancelled(recv) => self.complete(
                    ReqId(recv),
                    Status {
                        cancelled: true,
                        ..Status::empty()
                    },
                ),
                Late::PostFailed(recv) => self.complete(
                    ReqId(recv),
                    Status {
                        error: MpiErrorClass::NoMem,
                        ..Status::empty()
                    },
                ),
                Late::ArrivalFailed(msg) => {
                    self.stats.dropped += 1;
                    // Rendezvous headers carry no charge (charge_of(None)).
                    if let Some(Unexp::Eager { peer, data } | Unexp::Sync { peer, data, .. }) =
                        self.unexp.remove(&msg)
                    {
                        self.consumed(peer, charge_of(Some(data.len())));
                    }
                }
            }
        }
    }

    /// Finishes receive `recv`, matched by the NIC with its data coming
    /// later, once the split matcher reported the match and the data are
    /// in: a rendezvous the NIC read completes it; an eager fragment or a
    /// rendezvous request software must finish goes the way of a
    /// one-completion match.
    fn finish_nic_pending(&mut self, wire: &mut dyn Wire, recv: u64) {
        let ready = self
            .nic_pending
            .get(&recv)
            .is_some_and(|r| r.reported && r.done.is_some());
        if !ready {
            return;
        }
        let Some(r) = self.nic_pending.remove(&recv) else {
            return;
        };
        let st = match r.done {
            Some(Ok(NicData::Read(n))) => {
                self.stats.rndv_nic_read += 1;
                Status {
                    source: r.env.source as i32,
                    tag: r.env.tag,
                    count: n,
                    error: MpiErrorClass::Success,
                    cancelled: false,
                }
            }
            Some(Ok(NicData::Frag { peer, bytes })) => {
                self.nic_bytes.insert(recv, Ok((peer, bytes)));
                self.deliver_nic_bytes(wire, ReqId(recv));
                return;
            }
            Some(Err(e)) => {
                tracing::error!(target: "pml_ob1", "offloaded receive failed at the NIC: {e}; the receive fails");
                Status {
                    error: MpiErrorClass::Other,
                    ..Status::empty()
                }
            }
            None => return,
        };
        self.complete(ReqId(recv), st);
    }

    /// The NIC matched receive `id`: the fragment is in `nic_bytes`, or its
    /// data are still coming (`nic_pending`).
    fn nic_matched(&mut self, wire: &mut dyn Wire, id: ReqId) {
        if let Some(r) = self.nic_pending.get_mut(&id.0) {
            r.reported = true;
            self.finish_nic_pending(wire, id.0);
            return;
        }
        self.deliver_nic_bytes(wire, id);
    }

    /// Completes or continues receive `id` with the fragment the NIC placed
    /// for it (`nic_bytes`).
    fn deliver_nic_bytes(&mut self, wire: &mut dyn Wire, id: ReqId) {
        let failed = |e: MpiErrorClass| Status {
            error: e,
            ..Status::empty()
        };
        match self.nic_bytes.remove(&id.0) {
            Some(Ok((peer, bytes))) => match Header::parse(&bytes) {
                Ok(Header::Match(m, data)) => {
                    self.consumed(peer, charge_of(Some(data.len())));
                    let env = Envelope {
                        ctx: m.ctx,
                        src: m.src,
                        tag: m.tag,
                    };
                    self.deliver_eager(id, env, data)
                }
                Ok(Header::Rndv(r)) => {
                    let env = Envelope {
                        ctx: r.m.ctx,
                        src: r.m.src,
                        tag: r.m.tag,
                    };
                    if r.flags & FLAG_INLINE != 0 {
                        self.deliver_sync(id, env, peer, r.sreq, r.data);
                        return;
                    }
                    self.start_rndv(
                        wire,
                        id,
                        env,
                        peer,
                        r.flags,
                        r.len,
                        r.sreq,
                        Region::new(r.region),
                    )
                }
                _ => {
                    self.stats.dropped += 1;
                    tracing::error!(target: "pml_ob1", peer, "NIC-matched fragment malformed");
                    self.complete(id, failed(MpiErrorClass::Intern));
                }
            },
            Some(Err(e)) => {
                tracing::error!(target: "pml_ob1", "receive failed at the NIC: {e}");
                self.complete(id, failed(MpiErrorClass::Other));
            }
            None => {
                tracing::error!(target: "pml_ob1", "NIC match without its data");
                self.complete(id, failed(MpiErrorClass::Intern));
            }
        }
    }

    fn on_ack(&mut self, wire: &mut dyn Wire, peer: u32, a: AckHdr) {
        let id = ReqId(a.sreq);
        let lim = wire.limits(peer);
        let Some(s) = self.slot(id) else {
            self.stats.dropped += 1;
            tracing::error!(target: "pml_ob1", peer, "ACK for unknown send request");
            return;
        };
        let ReqState::Send {
            buf,
            phase: SendPhase::Rndv { region, .. },
            ..
        } = &mut s.state
        else {
            self.stats.dropped += 1;
            return;
        };
        let buf = *buf;
        let region = region.take();
        if let ReqState::Send { phase, .. } = &mut s.state {
            *phase = SendPhase::Queued;
        }
        if let Some(r) = region {
            wire.deregister(peer, &r);
        }
        let want = (a.want as usize).min(buf.len());
        if want == 0 {
            self.send_done(id);
            return;
        }
        let chunk = lim.max_send.max(1);
        let mut off = 0;
        while off < want {
            let n = chunk.min(want - off);
            let last = off + n == want;
            self.actions.push(Action::Send {
                peer,
                hdr: HdrBuf::from(
                    &FragHdr {
                        rreq: a.rreq,
                        offset: off as u64,
                    }
                    .encode(),
                ),
                data: buf.sub(off, n),
                done: if last { Some(id) } else { None },
            });
            off += n;
        }
    }

    fn on_data(&mut self, f: FragHdr, data: &[u8]) {
        let id = ReqId(f.rreq);
        let Some(s) = self.slot(id) else {
            self.stats.dropped += 1;
            tracing::error!(target: "pml_ob1", "FRAG for unknown receive request");
            return;
        };
        let ReqState::Recv {
            buf,
            phase: RecvPhase::Frags { want, got },
        } = &mut s.state
        else {
            self.stats.dropped += 1;
            return;
        };
        let off = f.offset as usize;
        if off > *want || data.len() > *want - off {
            self.stats.dropped += 1;
            tracing::error!(target: "pml_ob1", off, len = data.len(), "FRAG outside the receive buffer");
            return;
        }
        // SAFETY: receive buffer valid for writes until completion (irecv
        // contract); `off + data.len() <= want <= buf.len()` checked above.
        unsafe { buf.write_at(off, data) };
        *got += data.len();
        if *got >= *want {
            let st = s.status;
            self.complete(id, st);
        }
    }

    fn on_fin(&mut self, wire: &mut dyn Wire, f: FinHdr) {
        let id = ReqId(f.sreq);
        let Some(s) = self.slot(id) else {
            self.stats.dropped += 1;
            tracing::error!(target: "pml_ob1", "FIN for unknown send request");
            return;
        };
        let ReqState::Send {
            phase: SendPhase::Rndv { peer, region, sync },
            ..
        } = &mut s.state
        else {
            self.stats.dropped += 1;
            return;
        };
        let _ = sync;
        let peer = *peer;
        let region = region.take();
        let mut st = s.status;
        if f.status != 0 {
            // The receiver could not take the data (error FIN).
            st.error = MpiErrorClass::Other;
        }
        if let Some(r) = region {
            wire.deregister(peer, &r);
        }
        self.complete(id, st);
    }
}
