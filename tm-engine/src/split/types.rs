//! The split matcher's vocabulary: configuration, the NIC-list operations it asks for
//! ([`NicAction`]), the NIC completions fed back ([`NicEvent`]), its outcomes ([`SplitEvent`]),
//! counters and errors.

use std::fmt;

use crate::engine::EngineConfig;
use crate::types::{EngineError, Envelope};

/// Policy and capacities of a [`crate::split::SplitMatcher`] (MCA parameters of the pml,
/// `btl_openib_tm_*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SplitConfig {
    /// Offload at all (`false`: the split matcher is the software engine with its counters).
    pub offload: bool,
    /// The NIC's `max_num_tags`: handles live at once (ADDs queued or posted, entries in the
    /// list, handles awaiting completions). Past it receives stay in software.
    pub max_num_tags: u32,
    /// The NIC's `max_ops`: list operations outstanding (posted, completion not yet fed back).
    /// Beyond it operations wait in the action queue.
    pub max_ops: u32,
    /// Receives whose buffer is smaller than this stay in software (UCX `UCX_TM_THRESH`,
    /// default 1024: below it the ADD/DEL traffic costs more than matching in software).
    pub tm_thresh: usize,
    /// Receives smaller than this (and at least `tm_thresh`) get a pre-registered bounce
    /// buffer instead of the user buffer; non-contiguous receives up to it too (UCX
    /// `UCX_TM_MAX_BB_SIZE`, default 1024: with the default threshold no bounce buffer).
    pub max_bb_size: usize,
    /// Report the unexpected count with a `TAG_SYNC` at the latest after this many unexpected
    /// messages processed without any list operation (at most 2^14: the NIC's counter has 16
    /// bits, reference §4).
    pub sync_interval: u32,
    /// Limits of the software engine inside.
    pub engine: EngineConfig,
}

impl Default for SplitConfig {
    fn default() -> Self {
        SplitConfig {
            offload: true,
            max_num_tags: 1024,
            max_ops: 64,
            tm_thresh: 1024,
            max_bb_size: 1024,
            sync_interval: 1 << 14,
            engine: EngineConfig::default(),
        }
    }
}

/// The NIC form of a receive, computed by the pml with btl-openib's tag packing: messages with
/// `msg_tag & mask == tag & mask` are the ones the receive matches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NicTag {
    /// The packed tag.
    pub tag: u64,
    /// The mask (wildcards cleared).
    pub mask: u64,
}

/// What the pml knows about a receive besides its envelope.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecvInfo {
    /// Buffer size in bytes.
    pub len: usize,
    /// The buffer is one contiguous range (it can be registered and given to the NIC).
    pub contiguous: bool,
    /// The receive's NIC tag, or `None` when it cannot be offloaded: the tag does not pack, or
    /// some message it can match may come through another path than the NIC's tagged path
    /// (a peer on self/sm/tcp). The pml decides this; a `Some` for such a receive stays
    /// correct (the message is matched in software after a DEL) but costs a round trip.
    pub nic: Option<NicTag>,
}

impl RecvInfo {
    /// A receive that stays in software.
    pub const fn software(len: usize) -> Self {
        RecvInfo {
            len,
            contiguous: true,
            nic: None,
        }
    }

    /// A contiguous receive that may be offloaded with this tag and mask.
    pub const fn offloadable(len: usize, tag: u64, mask: u64) -> Self {
        RecvInfo {
            len,
            contiguous: true,
            nic: Some(NicTag { tag, mask }),
        }
    }
}

/// Names an offloaded receive towards the NIC (the btl's `recv_id`). Below 2^56. A value is
/// reused only after every completion of the receive it named has been fed back.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NicId(pub u64);

impl NicId {
    pub(crate) fn new(index: u32, generation: u32) -> Self {
        NicId((u64::from(generation & 0x00ff_ffff) << 32) | u64::from(index))
    }
    pub(crate) fn index(self) -> u32 {
        self.0 as u32
    }
    pub(crate) fn generation(self) -> u32 {
        (self.0 >> 32) as u32
    }
}

impl fmt::Display for NicId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "nic#{}.{}", self.index(), self.generation())
    }
}

/// Names a receive given to [`crate::split::SplitMatcher::post_recv`], for cancel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SplitKey {
    pub(crate) index: u32,
    pub(crate) generation: u32,
}

impl SplitKey {
    /// The key as one `u64` (for callers that keep it in an integer field).
    pub const fn to_u64(self) -> u64 {
        ((self.generation as u64) << 32) | self.index as u64
    }

    /// Back from [`SplitKey::to_u64`]; a value that never came from this matcher names no
    /// receive ([`crate::split::SplitMatcher::cancel`] returns `false`).
    pub const fn from_u64(v: u64) -> Self {
        SplitKey {
            index: v as u32,
            generation: (v >> 32) as u32,
        }
    }
}

/// Which buffer an offloaded receive hands to the NIC.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NicBuffer {
    /// The user buffer (registered by the btl's cache); the NIC writes the data in place.
    User,
    /// A pre-registered bounce buffer of at least the receive's length from the pml's pool;
    /// the pml copies (unpacks) into the user buffer when the receive matches, and returns
    /// the bounce buffer to its pool when the receive ends.
    Bounce,
}

/// A NIC-list operation the pml executes against btl-openib (`ibv_post_srq_ops`), in the
/// order pulled, signaled, with `IBV_OPS_TM_SYNC` and `unexpected_cnt` (low 16 bits count).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NicAction<R> {
    /// `TAG_ADD` the receive `recv`'s buffer with this tag and mask, naming it `id`.
    Add {
        /// The receive's NIC name (`recv_id` / `wr_id`).
        id: NicId,
        /// The caller's receive handle.
        recv: R,
        /// Tag and mask.
        tag: NicTag,
        /// Buffer length to post.
        len: usize,
        /// Which buffer.
        buffer: NicBuffer,
        /// Software's unexpected count to carry.
        unexpected_cnt: u32,
    },
    /// `TAG_DEL` the entry of `id`.
    Del {
        /// The receive's NIC name.
        id: NicId,
        /// Software's unexpected count to carry.
        unexpected_cnt: u32,
    },
    /// `TAG_SYNC`: report the count only.
    Sync {
        /// Software's unexpected count to carry.
        unexpected_cnt: u32,
    },
}

/// A NIC completion (or a refused post) the pml feeds back, in CQ order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NicEvent {
    /// `IBV_WC_TM_ADD` of `id`; `sync_req`: `IBV_WC_TM_SYNC_REQ` was set.
    Added {
        /// The receive.
        id: NicId,
        /// The NIC asks for the count.
        sync_req: bool,
    },
    /// `IBV_WC_TM_RECV` with `MATCH` into `id`'s buffer; `complete`: `DATA_VALID` too (eager,
    /// or `RNDV_INCOMPLETE` which ends the NIC's part); otherwise [`NicEvent::DataDone`]
    /// follows.
    Matched {
        /// The receive.
        id: NicId,
        /// The message's envelope (unpacked from the TMH tag).
        envelope: Envelope,
        /// Nothing more will come for this match.
        complete: bool,
    },
    /// `DATA_VALID` of a rendezvous the NIC read into `id`'s buffer.
    DataDone {
        /// The receive.
        id: NicId,
    },
    /// `IBV_WC_TM_DEL` success: the entry is gone, its buffer is the caller's again.
    Deleted {
        /// The receive.
        id: NicId,
    },
    /// `IBV_WC_TM_DEL` with `IBV_WC_TM_ERR`: the NIC had consumed the entry (its match
    /// completion came before this one).
    DelConsumed {
        /// The receive.
        id: NicId,
    },
    /// `IBV_WC_TM_SYNC`.
    Synced,
    /// The post of a pulled [`NicAction::Add`] was refused (`ENOMEM`, or not executed because
    /// an earlier operation of the same chain failed). Report it before pulling the next
    /// action: the receive is then kept in software.
    AddRefused {
        /// The receive.
        id: NicId,
    },
    /// The post of a pulled [`NicAction::Del`] was refused: it is queued again.
    DelRefused {
        /// The receive.
        id: NicId,
    },
    /// The post of a pulled [`NicAction::Sync`] was refused: it is queued again.
    SyncRefused,
}

/// An outcome, pulled with [`crate::split::SplitMatcher::poll_event`], in the matcher's
/// linearisation order (the order a plain matcher fed the same operations would produce them).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SplitEvent<R, M> {
    /// The receive is queued; `offloaded`: it went (or is going) to the NIC.
    Posted {
        /// The receive.
        recv: R,
        /// Held by the NIC too.
        offloaded: bool,
    },
    /// The receive matched a message held by software: `at_post` — an unexpected message when
    /// it was posted; otherwise the message arrived (or came up unexpected from the NIC) after
    /// it. The data is in the pml's fragment `msg`; an offloaded receive is out of the NIC
    /// already (the buffer is the caller's).
    Matched {
        /// The receive.
        recv: R,
        /// The message's envelope.
        envelope: Envelope,
        /// The caller's message handle.
        msg: M,
        /// Matched when posted.
        at_post: bool,
    },
    /// The NIC matched a message into the receive's buffer. `complete`: nothing more comes;
    /// otherwise [`SplitEvent::NicDataDone`] follows.
    NicMatched {
        /// The receive.
        recv: R,
        /// The message's envelope.
        envelope: Envelope,
        /// Data in place (eager) or NIC part done.
        complete: bool,
    },
    /// The NIC finished the rendezvous read of a [`SplitEvent::NicMatched`] receive.
    NicDataDone {
        /// The receive.
        recv: R,
    },
    /// The message matched no receive and is queued as unexpected.
    Unexpected {
        /// Its envelope.
        envelope: Envelope,
        /// The caller's message handle.
        msg: M,
    },
    /// The receive was cancelled (removed from software, and from the NIC if it was there).
    Cancelled {
        /// The receive.
        recv: R,
    },
    /// The cancel came too late: the receive matched (its match event is or was delivered).
    CancelFailed {
        /// The receive.
        recv: R,
    },
    /// A post deferred behind a pending DEL could not be queued (engine limit): the request
    /// fails with this error.
    PostFailed {
        /// The receive.
        recv: R,
        /// Why.
        error: EngineError,
    },
    /// An arrival deferred behind a pending DEL could not be queued (unexpected queue full).
    ArrivalFailed {
        /// The message.
        msg: M,
        /// Why.
        error: EngineError,
    },
}

/// Counters of a split matcher (printed by the pml as
/// `pml_stats rank=R offloaded=N nic_matches=N sw_matches=N unexpected=N syncs=N del_lost=N
/// fallbacks=N`: that is this type's `Display` after `rank=R`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SplitStats {
    /// Receives handed to the NIC (ADD queued).
    pub offloaded: u64,
    /// Messages the NIC matched into an offloaded receive.
    pub nic_matches: u64,
    /// Matches made in software (receive posted on an unexpected message, arrival on a
    /// software receive, unexpected NIC message on an offloaded receive after its DEL).
    pub sw_matches: u64,
    /// Messages queued as unexpected in software.
    pub unexpected: u64,
    /// `TAG_SYNC` operations issued.
    pub syncs: u64,
    /// DELs that lost the race to a NIC match (`TM_ERR`).
    pub del_lost: u64,
    /// Receives the pml allowed to offload that stayed in software: prefix rule, capacity, a
    /// refused ADD.
    pub fallbacks: u64,
    /// Offloaded receives matched in software before their ADD was pulled (no DEL needed).
    pub retracted: u64,
    /// Times inputs had to wait for a DEL (software match of a receive in the NIC).
    pub stalls: u64,
    /// Messages that came up unexpected from the NIC (the software count, not wrapped).
    pub nic_unexpected: u64,
}

impl fmt::Display for SplitStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "offloaded={} nic_matches={} sw_matches={} unexpected={} syncs={} del_lost={} fallbacks={}",
            self.offloaded,
            self.nic_matches,
            self.sw_matches,
            self.unexpected,
            self.syncs,
            self.del_lost,
            self.fallbacks
        )
    }
}

/// Errors of the split matcher: bad input, never a panic.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SplitError {
    /// The software engine refused (queue limit, invalid configuration).
    #[error(transparent)]
    Engine(#[from] EngineError),
    /// A configuration value out of range.
    #[error("invalid split matcher configuration: {0}")]
    InvalidConfig(&'static str),
    /// A NIC event named a receive that is not offloaded (stale or foreign id).
    #[error("NIC event {event} for unknown receive {id}")]
    UnknownNicId {
        /// The id.
        id: NicId,
        /// The event kind.
        event: &'static str,
    },
    /// A NIC event that contradicts the receive's state (e.g. a second match, a match of an
    /// envelope the receive cannot match): the NIC or the pml broke the protocol.
    #[error("NIC protocol violation on {id}: {what}")]
    Protocol {
        /// The receive.
        id: NicId,
        /// What was wrong.
        what: &'static str,
    },
    /// A `Synced` or `SyncRefused` event without an outstanding sync.
    #[error("sync completion without a sync outstanding")]
    UnexpectedSync,
    /// A probe while inputs wait for a DEL: progress the NIC and probe again (`MPI_Iprobe` may
    /// answer "nothing yet").
    #[error("matching waits for a NIC DEL; progress and retry")]
    Busy,
}
