//! The module's tag-matching list operations, beneath the BTL interface's
//! tag capability ([`TagOffload`], implemented in `tag_offload.rs`).
//!
//! btl-openib provides the **mechanism** (UCX's uct layer): posting and
//! removing tagged receive buffers, synchronising the unexpected counter, and
//! reporting the TM completions as [`TmEvent`]s from
//! [`Module::progress`]. The **policy** — which receives may go to the NIC
//! (prefix rule, wildcards, size thresholds), the shadow list, when to sync —
//! lives in tm-engine/pml (UCX's ucp layer), see
//! `shared/reference/tag-matching.md` §4.
//!
//! # Contract
//! - Tags: 64-bit values whose meaning is the caller's (the pml packs its
//!   match envelope and wildcard masks).
//! - **Unexpected counter**: every tagged message the NIC did not match
//!   comes up as an [`Event::Recv`](crate::Event::Recv) frag with
//!   `unexpected == true`. Every list operation carries the count of
//!   unexpected messages **the caller has taken into its software queue**
//!   (`unexpected_cnt`, `IBV_OPS_TM_SYNC`; the NIC compares the low 16
//!   bits). The module does not supply its own count: a message handed out
//!   but whose fate is still open in the caller (the split matcher defers a
//!   message behind a pending DEL) must not be counted yet, or the NIC would
//!   resume matching too early and give a later message the receive an
//!   earlier one should get (reference §4; found by the split matcher's
//!   differential test). With `tmpi_tm_engine::split`, pass the
//!   `unexpected_cnt` of the `NicAction` being executed.
//!   [`Module::tm_unexpected_count`] is the module's count of messages
//!   handed out, for diagnostics and simple callers that process every
//!   event before each operation (then both counts agree).
//! - `Added { sync_req: true }`: the NIC stopped matching because the counts
//!   differed when the ADD executed; after processing the events call
//!   [`Module::tm_sync`].
//! - A receive posted with [`Module::tm_post_recv`] ends with exactly one
//!   of: `Matched { complete: true }`; `Matched { complete: false }` then
//!   `DataValid`, `RndvIncomplete { after_match: true }` or `Event::Failed`;
//!   `RndvIncomplete { after_match: false }`; `Deleted`; or `Event::Failed`
//!   with `Op::TaggedRecv`. `Matched` comes in matching order (serialised
//!   with unexpected messages), its data may come much later: an eager
//!   message longer than one packet and a NIC-read rendezvous both take two
//!   completions on mlx5. Whether a `complete: false` match is an eager
//!   message or a rendezvous is the caller's to know (the sender's app_ctx).
//!   `DelConsumed` means the DEL lost the race and the match completion
//!   settles the receive. The NIC handle is reused only after the receive
//!   ended.
//! - A failed NIC-issued rendezvous read sends no FIN: the caller tells the
//!   sender ([`Module::send_fin_error`]), taking the sender from
//!   the tag, not from the completion.
//! - `max_ops` operations may be outstanding; beyond, operations return
//!   [`OpenibError::Busy`] (retry after progress). A full tag list is also
//!   `Busy`: keep the receive in software.
//! - When software matches an unexpected message to a receive that is also
//!   in the NIC list, DEL it first ([`Module::tm_del`]) and complete it
//!   only after `Deleted` (or handle `DelConsumed`).
//! - An unexpected rendezvous request (frag of kind `Rndv`) is finished in
//!   software: [`Module::get`], then [`Module::send_fin`] (or
//!   [`Module::send_fin_error`] when the read failed).

use tmpi_verbs::{AccessFlags, Provider};

use crate::error::{OpenibError, Result};
use crate::module::Module;
#[allow(unused_imports)]
use crate::module::TmEvent;
#[allow(unused_imports)]
use tmpi_btl::TagOffload;

/// Handle of a tagged buffer in the NIC's list (for [`Module::tm_del`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TmHandle {
    /// The provider's handle.
    pub handle: u32,
    /// The caller's receive id.
    pub recv_id: u64,
}

/// Hardware tag-matching operations of a module whose SRQ is a TM-SRQ
/// (without tag matching every one fails with
/// [`OpenibError::NoTagMatching`]).
impl<P: Provider> Module<P> {
    /// Appends a tagged buffer (`TAG_ADD`): messages with
    /// `msg_tag & mask == tag & mask` land in `buf..buf+len` (eager: the
    /// payload without the TMH; rendezvous: the NIC reads the sender's data
    /// there and sends the FIN). `recv_id` (below 2^56, unique among posted
    /// receives) names the receive in its events. `unexpected_cnt`: the
    /// caller's software unexpected count (module contract).
    ///
    /// # Safety
    /// `buf..buf+len` must stay valid and must not be accessed until the
    /// receive ended (see the module contract): the NIC writes it.
    pub unsafe fn tm_post_recv(
        &mut self,
        buf: *mut u8,
        len: usize,
        tag: u64,
        mask: u64,
        recv_id: u64,
        unexpected_cnt: u32,
    ) -> Result<TmHandle> {
        self.tm_check(1)?;
        let len32 = u32::try_from(len)
            .map_err(|_| OpenibError::InvalidArgument(format!("tagged buffer of {len} bytes")))?;
        // SAFETY: forwarded from this function's contract; the registration
        // stays pinned until the receive ends.
        let reg = unsafe { self.register(buf, len, AccessFlags::LOCAL_WRITE) }?;
        let handle = self.tm_add(reg, 0, len32, tag, mask, recv_id, unexpected_cnt)?;
        Ok(TmHandle { handle, recv_id })
    }

    /// Removes a tagged buffer (`TAG_DEL`), carrying `unexpected_cnt`:
    /// `Deleted` or `DelConsumed` follows.
    pub fn tm_del(&mut self, h: TmHandle, unexpected_cnt: u32) -> Result<()> {
        self.tm_del_inner(h.handle, h.recv_id, unexpected_cnt)
    }

    /// Reports the software unexpected count `unexpected_cnt` (`TAG_SYNC`):
    /// `Synced` follows.
    pub fn tm_sync(&mut self, unexpected_cnt: u32) -> Result<()> {
        self.tm_sync_inner(unexpected_cnt)
    }

    /// The unexpected messages the module handed out so far (wrapping;
    /// diagnostics: list operations carry the caller's count).
    pub fn tm_unexpected_count(&self) -> u32 {
        self.tm_unexpected()
    }
}
