//! Hardware tag matching as an optional capability of a BTL module
//! ([`crate::BtlModule::tag_offload`]), in the way UCX's transport layer
//! exposes tag operations beside its plain ones.
//!
//! The split is mechanism below, policy above:
//! - **The module** (btl-openib over a TM-SRQ) owns the NIC's list and the
//!   buffers it scatters into: it posts and removes tagged receives,
//!   carries the caller's unexpected count on every list operation, keeps
//!   the tagged-buffer bookkeeping (bounce buffers, a receive's own buffer,
//!   what arrived in one completion or two), and turns the NIC's
//!   completions into [`TagEvent`]s in completion order (= the NIC's
//!   matching order).
//! - **The caller** (the pml with the split matcher of tm-engine) decides
//!   which receives go to the NIC and when, what a tag means (the match
//!   header's envelope packed into 64 bits), and what the bytes of a
//!   matched message are (pml fragments).
//!
//! The contract of one tagged receive ([`TagOffload::post_recv`]): exactly
//! one of
//! - `Matched { data: Some(..) }` (everything arrived with the match),
//! - `Matched { data: None }` then `Data` (mlx5's two completions: an eager
//!   message longer than one packet, a rendezvous the NIC reads, or a
//!   rendezvous software must finish),
//! - `Deleted` after [`TagOffload::del`] (`DelConsumed` first when the DEL
//!   lost the race to a match: the match settles the receive),
//! - `Failed` (a completion error before any match).
//!
//! Messages no list entry matched come up as `Unexpected`, with `counted`
//! set when the NIC counted them in its unexpected counter; list operations
//! carry the caller's count of such messages it has fully processed
//! (reference `tag-matching.md` §4).

use crate::{BtlError, RemoteRegion};

/// The size of a module's NIC list, as created (not the device maximum).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TagCaps {
    /// Tagged receives the list holds at once.
    pub max_tags: u32,
    /// List operations (ADD, DEL, SYNC) outstanding at once.
    pub max_ops: u32,
}

/// A rendezvous request that software must finish: read `len` bytes from
/// the sender's `region` ([`crate::BtlModule::get`]), then answer with
/// [`TagOffload::send_fin`] for `token` (also when the read failed or the
/// receive was truncated: `ok == false` fails the send).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TagRndv {
    /// The request's 64-bit tag.
    pub tag: u64,
    /// The sender's registered data.
    pub region: RemoteRegion,
    /// Bytes to read.
    pub len: u64,
    /// Names the request in [`TagOffload::send_fin`].
    pub token: u64,
}

/// A tagged message as software receives it.
#[derive(Debug, PartialEq, Eq)]
pub enum TagMsg {
    /// An eager message: the header and payload given to
    /// [`TagOffload::send_tagged`], one after the other.
    Eager(Vec<u8>),
    /// A rendezvous request from [`TagOffload::send_rndv`].
    Rndv(TagRndv),
    /// A tagged message the module could not make sense of (dropped; it
    /// still counts when `counted`).
    Invalid(String),
}

/// What a matched receive got: with its match, or with the data
/// completion that follows it.
#[derive(Debug, PartialEq, Eq)]
pub enum TagData {
    /// The message, as software must take it (copied out of a bounce
    /// buffer, or a rendezvous request software must finish).
    Msg(TagMsg),
    /// The NIC read a rendezvous of this many bytes straight into the
    /// receive's own buffer and answered the sender: nothing left to do.
    Read(usize),
    /// An eager message landed in the receive's own buffer: its payload
    /// (the `payload` of [`TagOffload::send_tagged`], `len` bytes) is at
    /// the start of that buffer, where the receive wants it, and every
    /// byte of the buffer past it holds what it held before the receive
    /// was posted; `header` is the sender's `hdr`. Nothing was copied
    /// besides the header.
    Placed {
        /// The sender's header.
        header: Vec<u8>,
        /// Payload bytes at the start of the receive's buffer.
        len: usize,
    },
}

/// One event of a tag-offloading module, in the NIC's completion order.
#[derive(Debug, PartialEq, Eq)]
pub enum TagEvent {
    /// A tagged message no list entry took (or any tagged message on a
    /// module without a list). `counted`: the NIC counted it as unexpected,
    /// so the caller's count must include it once it is processed.
    Unexpected {
        /// Sender's world rank.
        peer: u32,
        /// Counted by the NIC.
        counted: bool,
        /// The message.
        msg: TagMsg,
    },
    /// An ADD executed; `sync_req`: the counts differed (the NIC stopped
    /// matching until a list operation carries the right count).
    Added {
        /// The receive's list id.
        id: u64,
        /// The NIC asked for a sync.
        sync_req: bool,
    },
    /// The NIC matched receive `id` (its owner `recv`) with a message of
    /// `tag` from `peer` (the source the receive was posted for). `data`:
    /// the message when it arrived with the match, `None` when a `Data`
    /// event follows, an error when what arrived is unusable.
    Matched {
        /// The receive's list id.
        id: u64,
        /// The owner's value given to [`TagOffload::post_recv`].
        recv: u64,
        /// Sender's world rank.
        peer: u32,
        /// The message's tag.
        tag: u64,
        /// What arrived with the match.
        data: Option<Result<TagData, String>>,
    },
    /// The data of a `Matched { data: None }` receive, or why it failed.
    Data {
        /// The receive's list id.
        id: u64,
        /// The owner's value.
        recv: u64,
        /// Sender's world rank.
        peer: u32,
        /// What landed.
        result: Result<TagData, String>,
    },
    /// A DEL removed receive `id`: its buffer is the caller's again.
    Deleted {
        /// The receive's list id.
        id: u64,
    },
    /// A DEL lost the race to a match; the match settles the receive.
    DelConsumed {
        /// The receive's list id.
        id: u64,
    },
    /// A SYNC executed.
    Synced,
    /// A tagged receive failed before any match.
    Failed {
        /// The receive's list id.
        id: u64,
        /// The owner's value.
        recv: u64,
        /// Why.
        error: String,
    },
    /// A rendezvous request of [`TagOffload::send_rndv`] ended: the
    /// receiver read the data (`ok`), or reported failure / the
    /// connection broke.
    RndvSent {
        /// The caller's id of the send.
        id: u64,
        /// The receiver read the data.
        ok: bool,
    },
    /// A message to `peer` was lost after its send had completed (a
    /// completion error on an eager send): no request can report it.
    Lost {
        /// The peer.
        peer: u32,
        /// Why.
        error: String,
    },
}

/// Tag-matching operations of a module ([`crate::BtlModule::tag_offload`]).
///
/// A module that can carry tagged traffic offers this even without a NIC
/// list ([`TagOffload::caps`] is then `None`): its peers may send it tagged
/// messages, which come up as `Unexpected` events.
pub trait TagOffload {
    /// The NIC list as created, `None` when this module has none (then the
    /// list operations fail with [`BtlError::Unsupported`]).
    fn caps(&self) -> Option<TagCaps>;

    /// Largest tagged eager message, and the size of the module's bounce
    /// buffers: a receive whose buffer is smaller is posted with a bounce
    /// buffer.
    fn tagged_limit(&self) -> usize;

    /// Sends one tagged eager message `hdr | payload` under `tag`, both
    /// copied once, before returning, into the module's registered send
    /// memory (the caller need not join them first). A receive that takes
    /// it in its own buffer gets `payload` at the start of that buffer and
    /// `hdr` in its event ([`TagData::Placed`]); everywhere else the
    /// message comes up whole ([`TagMsg::Eager`]). `hdr` is at most
    /// 65 535 bytes; `hdr` + `payload` at most [`TagOffload::tagged_limit`].
    /// [`BtlError::WouldBlock`]: no resources now, retry after progress.
    fn send_tagged(
        &mut self,
        peer: u32,
        tag: u64,
        hdr: &[u8],
        payload: &[u8],
    ) -> Result<(), BtlError>;

    /// Sends a rendezvous request under `tag` for `len` bytes at `buf`
    /// (registered by the module until the request ends); the receiver's
    /// NIC reads the data when it matches, software otherwise.
    /// `TagEvent::RndvSent { id }` follows. [`BtlError::WouldBlock`]: retry
    /// after progress; any other error (a message longer than the NIC reads,
    /// an id the module cannot carry): the module cannot send this one as
    /// a rendezvous request (send it another way).
    ///
    /// # Safety
    /// `buf..buf+len` must stay valid and unmodified until the
    /// `RndvSent` event for `id`.
    unsafe fn send_rndv(
        &mut self,
        peer: u32,
        tag: u64,
        buf: *const u8,
        len: usize,
        id: u64,
    ) -> Result<(), BtlError>;

    /// Answers a rendezvous request software matched ([`TagRndv::token`]):
    /// `ok` after a successful read, `false` to fail the sender's request.
    /// `None`: `token` names no open request from `peer` on this module.
    fn send_fin(&mut self, peer: u32, token: u64, ok: bool) -> Option<Result<(), BtlError>>;

    /// Appends a tagged receive for messages with
    /// `msg_tag & mask == tag` from world rank `source` (`ADD`), carrying
    /// the caller's unexpected count. `id` (unique among posted receives,
    /// below 2^56) names it in events and [`TagOffload::del`]; `recv` is
    /// given back with its match. `user`: the receive's own buffer, used
    /// when it holds [`TagOffload::tagged_limit`] bytes (an eager message's
    /// payload and a NIC-read rendezvous then land in place, only the
    /// message's bytes of the buffer change), else a bounce buffer is used.
    /// [`BtlError::WouldBlock`]: list or operations full (keep the receive
    /// in software).
    ///
    /// # Safety
    /// `user` must stay valid, and must not be accessed by anyone else,
    /// until the receive ended (see the module documentation).
    #[allow(clippy::too_many_arguments)]
    unsafe fn post_recv(
        &mut self,
        id: u64,
        recv: u64,
        source: u32,
        tag: u64,
        mask: u64,
        user: Option<(*mut u8, usize)>,
        unexpected_cnt: u32,
    ) -> Result<(), BtlError>;

    /// Removes receive `id` from the list (`DEL`), carrying the count:
    /// `Deleted` or `DelConsumed` follows.
    fn del(&mut self, id: u64, unexpected_cnt: u32) -> Result<(), BtlError>;

    /// Reports the caller's unexpected count (`SYNC`): `Synced` follows.
    fn sync(&mut self, unexpected_cnt: u32) -> Result<(), BtlError>;

    /// Appends the events seen since the last call, in completion order.
    fn take_events(&mut self, out: &mut Vec<TagEvent>);
}
