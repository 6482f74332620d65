//! # The split software/hardware matcher
//!
//! [`SplitMatcher`] decides which posted receives the NIC's tag list may hold, keeps the
//! shadow list of those receives, and settles every race of `reference/tag-matching.md` §4.
//! It performs no I/O: the pml feeds it receive posts, arrivals and NIC completions and
//! executes the [`NicAction`]s it asks for against btl-openib's TM interface (quinn-proto
//! style: events in, actions out). Full design: `docs/split-matcher.md`.
//!
//! ## How the pml drives it (all under one lock)
//! 1. Poll the CQ and feed every completion in order: unexpected tagged messages with
//!    [`SplitMatcher::nic_unexpected`], list-operation and match completions with
//!    [`SplitMatcher::nic_event`]; other paths' messages with [`SplitMatcher::arrive`].
//! 2. Post receives with [`SplitMatcher::post_recv`], cancel with [`SplitMatcher::cancel`].
//! 3. Pull [`SplitMatcher::poll_action`] until `None` and post each operation (ADD/DEL/SYNC,
//!    signaled, `IBV_OPS_TM_SYNC` with the action's `unexpected_cnt`). A refused post is
//!    reported at once with `NicEvent::*Refused`, before pulling the next action.
//! 4. Pull [`SplitMatcher::poll_event`] until `None` and complete requests.
//!
//! ## Invariants (DESIGN.md §3) and the rule that keeps each
//! * **Every receive is queued in the software engine** from its post until it matches or is
//!   cancelled, offloaded or not, at its posting position. Software matching is therefore
//!   always complete and in order; the NIC list is an accelerator holding a subset.
//! * **Prefix (inv. 3)**: a receive is offloaded only when no earlier software-only receive
//!   overlaps it (some envelope matches both; a per-class count index answers this).
//!   Software-only receives are never moved to the NIC later, and ADDs reach the NIC in
//!   posting order, so for every envelope the NIC holds a prefix of the posting order.
//!   Wildcard-source receives, receives below `tm_thresh`, non-contiguous receives above
//!   `max_bb_size` and receives the pml marks non-offloadable stay in software.
//! * **Unexpected before ADD (inv. 4)**: a post searches the unexpected queue first (the
//!   engine does); completions still in the CQ are covered by the count: software counts a
//!   NIC-unexpected message only once it holds it (matched or queued), every operation
//!   carries that count (filled when the action is pulled), and the NIC matches nothing while
//!   its count differs, so a message that overtook software cannot be matched by the NIC to a
//!   receive posted after it.
//! * **Software match of an offloaded receive** removes it from the NIC first: the DEL is
//!   queued and every later input (post, arrival, cancel; probes answer `Busy`) waits until it
//!   settles. `Deleted`: the match completes. `DelConsumed` (TM_ERR): the NIC's message took
//!   the receive (its match completion came first) and the waiting message is matched again,
//!   as arriving after it. An ADD not yet pulled is simply withdrawn.
//! * **Cancel (inv. 5)**: DEL; `Deleted` → cancelled, `DelConsumed` → the match stands, the
//!   cancel fails. Never both, never neither.
//! * **Handles (inv. 5)**: a [`NicId`] is reused only after its ADD completion, its match or
//!   DEL completion, and (rendezvous) its data completion have all been fed back.
//! * **Capacity (inv. 6)**: handles reserved never exceed `max_num_tags`; operations
//!   outstanding never exceed `max_ops` (beyond, actions wait in order). A receive that finds
//!   no handle stays in software and, by the prefix rule, so do later overlapping ones.
//! * **Sync**: a `TAG_SYNC` goes out at the latest after `sync_interval` (≤ 2^14) unexpected
//!   messages without any operation, and as soon as useful while the NIC holds entries.

mod matcher;
mod overlap;
mod types;

pub use matcher::SplitMatcher;
pub use types::{
    NicAction, NicBuffer, NicEvent, NicId, NicTag, RecvInfo, SplitConfig, SplitError, SplitEvent,
    SplitKey, SplitStats,
};
