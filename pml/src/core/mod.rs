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
    encode_bye, AckHdr, CreditHdr, FinHdr, FragHdr, HdrError, Header, MatchHdr, RndvHdr,
    FLAG_INLINE, FLAG_REGION, FLAG_SYNC,
};
use tmpi_tm_engine::split::{NicAction, NicEvent, NicTag, RecvInfo};

use crate::matching::{Envelope, MatchError, MatchPoint, MsgId, Pattern, Posted};
use crate::offload::Late;
use crate::raw::{RawBuf, RawBufMut};
use crate::region::Region;
use crate::request::{ReqId, SendMode, Status, BSEND_OVERHEAD, PROC_NULL};
use crate::transport::{NicData, NicFrag, TmInput};
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
    /// Eager messages (and inline synchronous ones) a tag-matching NIC
    /// matched into the receive's own buffer, where the module left the
    /// payload in place: completed without copying it.
    pub nic_in_place: u64,
}

impl std::fmt::Display for Stats {
    /// `key=value` pairs in field order, the form of the `pml_stats` lines.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let Stats {
            eager_sent,
            rndv_sent,
            sync_inline,
            rndv_get,
            rndv_pipelined,
            rndv_nic_read,
            unexpected,
            out_of_order,
            dropped,
            credit_rndv,
            credits_sent,
            credit_requests,
            direct_recv,
            nic_in_place,
        } = self;
        write!(
            f,
            "eager_sent={eager_sent} rndv_sent={rndv_sent} sync_inline={sync_inline} \
             rndv_get={rndv_get} rndv_pipelined={rndv_pipelined} rndv_nic_read={rndv_nic_read} \
             unexpected={unexpected} out_of_order={out_of_order} dropped={dropped} \
             credit_rndv={credit_rndv} credits_sent={credits_sent} \
             credit_requests={credit_requests} direct_recv={direct_recv} \
             nic_in_place={nic_in_place}"
        )
    }
}

/// Fixed charge per eager (MATCH) fragment against
/// `pml_ob1_unexpected_limit`, on top of its payload: covers what an
/// unexpected message costs the receiver besides its payload (queue entry,
/// hash map slot, allocation), with room to spare for a rendezvous message's
/// larger record (docs/reliability.md).
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
    /// Per world rank: sent BYE (it is finalizing; [`Core::apply_byes`]);
    /// empty until the first.
    gone: Vec<bool>,
    /// Ranks whose BYE arrived, applied after the NIC inputs of the round.
    byes: Vec<u32>,
    /// `pml_ob1_bye_all_max` ([`Core::say_bye`]).
    bye_all_max: u64,
    /// Fragments the NIC placed for a receive (or its failure), until the
    /// split matcher reports the match.
    nic_bytes: HashMap<u64, Result<(u32, NicFrag), String>>,
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
            gone: Vec::new(),
            byes: Vec::new(),
            bye_all_max: 0,
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
}

mod bye;
mod direct;
mod frag;
mod recv;
mod send;
mod tm;
