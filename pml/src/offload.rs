//! The split software/hardware matcher behind [`MatchPoint`], used when a
//! btl-openib module with tag matching is active (docs/pml.md, "pml over
//! btl-openib"). The software-only job never builds one.
//!
//! The split matcher is asynchronous: a software match of a receive the NIC
//! also holds waits for its DEL, NIC matches come from the CQ, cancels of
//! offloaded receives settle later. [`MatchPoint`]'s synchronous answers
//! cover what settles at once; the rest comes out of
//! [`SplitMatch::poll_late`] as [`Late`] outcomes, drained by the core under
//! the pml's lock after every input.

use std::collections::VecDeque;

use tmpi_tm_engine::split::{
    NicAction, NicEvent, RecvInfo, SplitConfig, SplitEvent, SplitKey, SplitMatcher, SplitStats,
};
use tmpi_tm_engine::{RecvSpec, SourceSpec, TagSpec};

use crate::matching::{Envelope, MatchError, MatchPoint, MsgId, Pattern, Posted, RecvId};

/// An outcome that did not settle during the call that caused it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Late {
    /// Software matched receive `recv` with the stored message `msg`.
    Matched {
        /// The receive.
        recv: RecvId,
        /// The message's envelope.
        env: Envelope,
        /// The message (its data is in the core's unexpected store).
        msg: MsgId,
    },
    /// The NIC matched `recv`; its bytes were stashed with the input.
    Nic {
        /// The receive.
        recv: RecvId,
    },
    /// The receive was cancelled.
    Cancelled(RecvId),
    /// Posting failed (engine limits).
    PostFailed(RecvId),
    /// An arrival could not be queued (engine limits): the message is lost.
    ArrivalFailed(MsgId),
}

/// [`MatchPoint`] over [`SplitMatcher`].
#[derive(Debug)]
pub struct SplitMatch {
    split: SplitMatcher<RecvId, MsgId>,
    late: VecDeque<Late>,
}

fn spec(p: &Pattern) -> RecvSpec {
    RecvSpec {
        context: p.ctx,
        source: match p.src {
            Some(s) => SourceSpec::Rank(s as u32),
            None => SourceSpec::Any,
        },
        tag: match p.tag {
            Some(t) => TagSpec::Tag(t),
            None => TagSpec::Any,
        },
    }
}

fn merr(e: impl std::fmt::Display) -> MatchError {
    MatchError(e.to_string())
}

/// The NIC tag and mask of a receive pattern, `None` when it cannot be
/// offloaded (a wildcard source, or a context/tag outside the 64-bit
/// layout; the context [`crate::tag::MAX_CONTEXT`] is reserved
/// for messages whose envelope does not pack).
pub fn nic_tag(p: &Pattern) -> Option<(u64, u64)> {
    use crate::tag::{Matcher, Source, TagSel, MAX_CONTEXT};
    let src = p.src?;
    if p.ctx >= MAX_CONTEXT || src < 0 {
        return None;
    }
    let sel = match p.tag {
        Some(t) => TagSel::Tag(t),
        None => TagSel::Any,
    };
    let m = Matcher::new(p.ctx, Source::Rank(src as u32), sel).ok()?;
    Some((m.recv_tag, m.mask))
}

/// The tag a message with envelope `env` travels under: its packed
/// envelope, or (when it does not pack) one in the reserved context that no
/// NIC entry matches, so software matches it from the pml header.
pub fn msg_tag(env: Envelope) -> u64 {
    use crate::tag::{pack, MAX_CONTEXT};
    match pack(env) {
        Ok(t) if env.context < MAX_CONTEXT => t,
        _ => pack(Envelope::new(MAX_CONTEXT, 0, 0)).unwrap_or(u64::MAX),
    }
}

impl SplitMatch {
    /// A split matcher for a NIC with `max_num_tags` entries and `max_ops`
    /// outstanding list operations; receives of at least `tm_thresh` bytes
    /// may be offloaded.
    pub fn new(max_num_tags: u32, max_ops: u32, tm_thresh: usize) -> Result<Self, MatchError> {
        let split = SplitMatcher::new(SplitConfig {
            max_num_tags,
            max_ops,
            tm_thresh,
            ..SplitConfig::default()
        })
        .map_err(merr)?;
        Ok(SplitMatch {
            split,
            late: VecDeque::new(),
        })
    }

    /// Drains the split matcher's events; returns the receive matched at
    /// once with `want` (a receive's immediate match, or the receive an
    /// arrival `msg` matched), queueing everything else as [`Late`].
    fn drain(&mut self, want_recv: Option<RecvId>, want_msg: Option<MsgId>) -> Option<Late> {
        let mut hit = None;
        while let Some(ev) = self.split.poll_event() {
            let l = match ev {
                SplitEvent::Matched {
                    recv,
                    envelope,
                    msg,
                    ..
                } => Late::Matched {
                    recv,
                    env: envelope,
                    msg,
                },
                SplitEvent::NicMatched { recv, .. } => Late::Nic { recv },
                SplitEvent::Cancelled { recv } => Late::Cancelled(recv),
                SplitEvent::PostFailed { recv, error } => {
                    tracing::error!(target: "pml_ob1", recv, "posting failed: {error}");
                    Late::PostFailed(recv)
                }
                SplitEvent::ArrivalFailed { msg, error } => {
                    tracing::error!(target: "pml_ob1", msg, "arrival lost: {error}");
                    Late::ArrivalFailed(msg)
                }
                SplitEvent::Posted { .. }
                | SplitEvent::Unexpected { .. }
                | SplitEvent::CancelFailed { .. }
                | SplitEvent::NicDataDone { .. } => continue,
            };
            let is_hit = hit.is_none()
                && match l {
                    Late::Matched { recv, msg, .. } => {
                        want_recv == Some(recv) || want_msg == Some(msg)
                    }
                    Late::Cancelled(recv) => want_recv == Some(recv),
                    _ => false,
                };
            if is_hit {
                hit = Some(l);
            } else {
                self.late.push_back(l);
            }
        }
        hit
    }

    /// A tagged message the NIC did not match (in CQ order).
    pub fn nic_unexpected(
        &mut self,
        env: Envelope,
        msg: MsgId,
    ) -> Result<Option<RecvId>, MatchError> {
        self.split.nic_unexpected(env, msg).map_err(merr)?;
        Ok(match self.drain(None, Some(msg)) {
            Some(Late::Matched { recv, .. }) => Some(recv),
            _ => None,
        })
    }

    /// A NIC completion (in CQ order).
    pub fn nic_event(&mut self, ev: NicEvent) -> Result<(), MatchError> {
        let r = self.split.nic_event(ev).map_err(merr);
        if let Some(l) = self.drain(None, None) {
            self.late.push_back(l);
        }
        r
    }

    /// The next NIC-list operation to execute (in order), if any.
    pub fn poll_action(&mut self) -> Option<NicAction<RecvId>> {
        self.split.poll_action()
    }

    /// Posts with the size and NIC tag the split policy needs.
    pub fn post(&mut self, pat: Pattern, id: RecvId, info: RecvInfo) -> Result<Posted, MatchError> {
        let key = self.split.post_recv(spec(&pat), id, info).map_err(merr)?;
        Ok(match self.drain(Some(id), None) {
            Some(Late::Matched { env, msg, .. }) => Posted::Matched(env, msg),
            _ => Posted::Queued(key.to_u64()),
        })
    }

    /// The next late outcome.
    pub fn poll_late(&mut self) -> Option<Late> {
        self.late.pop_front()
    }
}

impl MatchPoint for SplitMatch {
    fn post_recv(&mut self, pat: Pattern, id: RecvId) -> Result<Posted, MatchError> {
        self.post(pat, id, RecvInfo::software(0))
    }
    fn arrive(&mut self, env: Envelope, msg: MsgId) -> Result<Option<RecvId>, MatchError> {
        self.split.arrive(env, msg).map_err(merr)?;
        Ok(match self.drain(None, Some(msg)) {
            Some(Late::Matched { recv, .. }) => Some(recv),
            _ => None,
        })
    }
    fn probe(&mut self, pat: Pattern) -> Option<(Envelope, MsgId)> {
        // Busy (a DEL pending): "nothing yet"; the caller progresses.
        self.split.probe(&spec(&pat)).ok().flatten()
    }
    fn mprobe(&mut self, pat: Pattern) -> Option<(Envelope, MsgId)> {
        self.split.mprobe(&spec(&pat)).ok().flatten()
    }
    fn cancel(&mut self, token: u64) -> bool {
        // Without the receive id (not used by the core, which calls
        // `cancel_recv`): settled at once or not.
        self.split.cancel(SplitKey::from_u64(token)) && self.drain_cancel(None)
    }
    fn depth(&self) -> (usize, usize) {
        (self.split.posted_len(), self.split.unexpected_len())
    }
    fn counters(&self) -> SplitStats {
        self.split.stats()
    }
    fn queue_stats(&self) -> tmpi_tm_engine::Stats {
        self.split.engine_stats()
    }
    fn as_split(&mut self) -> Option<&mut SplitMatch> {
        Some(self)
    }
}

impl SplitMatch {
    /// Cancels receive `recv` queued under `token`: `true` when it settled
    /// as cancelled at once; otherwise its outcome comes late
    /// ([`Late::Cancelled`], or the receive completes normally when the NIC
    /// won the race).
    pub fn cancel_recv(&mut self, token: u64, recv: RecvId) -> bool {
        self.split.cancel(SplitKey::from_u64(token)) && self.drain_cancel(Some(recv))
    }

    fn drain_cancel(&mut self, recv: Option<RecvId>) -> bool {
        match self.drain(recv, None) {
            Some(Late::Cancelled(_)) => true,
            Some(l) => {
                self.late.push_back(l);
                false
            }
            None => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tag::{unpack, Matcher, Source, TagSel, MAX_CONTEXT};

    fn pat(ctx: u32, src: Option<i32>, tag: Option<i32>) -> Pattern {
        Pattern { ctx, src, tag }
    }

    #[test]
    fn nic_tags_of_receives_and_messages() {
        // A named receive matches exactly its message's tag.
        let (t, m) = nic_tag(&pat(3, Some(2), Some(9))).unwrap();
        let env = Envelope::new(3, 2, 9);
        assert_eq!(msg_tag(env) & m, t & m);
        let other = Envelope { tag: 10, ..env };
        assert_ne!(msg_tag(other) & m, t & m);
        // ANY_TAG takes user tags, not internal (negative) ones.
        let (t, m) = nic_tag(&pat(3, Some(2), None)).unwrap();
        assert_eq!(msg_tag(other) & m, t & m);
        let internal = Envelope { tag: -5, ..env };
        assert_ne!(msg_tag(internal) & m, t & m);
        // ANY_SOURCE, the reserved context and tags outside the layout stay
        // in software.
        assert_eq!(nic_tag(&pat(3, None, Some(9))), None);
        assert_eq!(nic_tag(&pat(MAX_CONTEXT, Some(1), Some(9))), None);
        assert_eq!(nic_tag(&pat(3, Some(1), Some(i32::MAX))), None);
    }

    #[test]
    fn unpackable_messages_use_the_reserved_context() {
        let big = Envelope::new(1 << 20, 1, 4);
        assert_eq!(unpack(msg_tag(big)).context, MAX_CONTEXT);
        let bad_tag = Envelope::new(1, 1, i32::MAX);
        assert_eq!(unpack(msg_tag(bad_tag)).context, MAX_CONTEXT);
        // No offloadable receive matches them, even with ANY_TAG.
        let any = Matcher::new(MAX_CONTEXT - 1, Source::Rank(0), TagSel::Any).unwrap();
        assert!(!any.matches(msg_tag(big)));
    }

    #[test]
    fn software_only_split_matches_and_cancels_at_once() {
        let mut m = SplitMatch::new(8, 4, 1024).unwrap();
        let p = pat(0, Some(1), Some(5));
        let env = Envelope::new(0, 1, 5);
        // Unexpected first, then the receive matches it at post.
        assert_eq!(m.arrive(env, 10), Ok(None));
        assert_eq!(m.post_recv(p, 1), Ok(Posted::Matched(env, 10)));
        // A queued receive takes the next arrival.
        let Ok(Posted::Queued(tok)) = m.post_recv(p, 2) else {
            panic!("expected queued")
        };
        assert_eq!(m.arrive(env, 11), Ok(Some(2)));
        // Cancel of a software receive settles at once.
        let Ok(Posted::Queued(tok3)) = m.post_recv(p, 3) else {
            panic!("expected queued")
        };
        assert!(m.cancel_recv(tok3, 3));
        assert!(!m.cancel_recv(tok, 2), "already matched");
        assert_eq!(m.poll_late(), None);
        let c = m.counters();
        assert_eq!((c.sw_matches, c.nic_matches, c.offloaded), (2, 0, 0));
        assert!(m.poll_action().is_none(), "no NIC work without offload");
    }
}
