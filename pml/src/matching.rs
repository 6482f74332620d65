//! The one place where the pml matches: posted receives against arrived
//! envelopes. Everything goes through [`MatchPoint`], a small interface
//! so that the split software/hardware matcher (issue 6) can replace the
//! software one at this call site without touching the protocol.
//!
//! Semantics (MPI-3.1 §3.5): receives are matched in posting order, a
//! sender's messages in sequence order (the caller delivers envelopes of one
//! (context, source) in sequence order, see `core`); `ANY_TAG` never
//! matches a negative (internal, collective) tag.

use tmpi_tm_engine::split::SplitStats;
use tmpi_tm_engine::{
    ArriveOutcome, CancelOutcome, Engine, PostOutcome, RecvKey, RecvSpec, SourceSpec, TagSpec,
};

/// The envelope of an arrived message: tm-engine's (context id, the
/// sender's rank in the communicator, tag), one type from the wire header
/// to the matcher and the NIC's tag.
pub use tmpi_tm_engine::Envelope;

/// What a receive (or probe) accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pattern {
    /// Communicator context id.
    pub ctx: u32,
    /// `None` = any source.
    pub src: Option<i32>,
    /// `None` = any non-negative tag.
    pub tag: Option<i32>,
}

impl Pattern {
    /// Whether `env` satisfies this pattern.
    pub fn accepts(&self, env: &Envelope) -> bool {
        self.ctx == env.context
            && self.src.is_none_or(|s| s == env.source as i32)
            && match self.tag {
                Some(t) => t == env.tag,
                None => env.tag >= 0,
            }
    }
}

/// Opaque id of a posted receive (the pml's request id).
pub type RecvId = u64;
/// Opaque id of an unexpected message (the pml's message id).
pub type MsgId = u64;

/// Result of posting a receive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Posted {
    /// An unexpected message matched at once (the receive is not queued).
    Matched(Envelope, MsgId),
    /// Queued; the token names it for [`MatchPoint::cancel`].
    Queued(u64),
}

/// Matching failed for lack of resources (queue limits).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("matching: {0}")]
pub struct MatchError(pub String);

/// The matching interface used by the protocol core.
pub trait MatchPoint {
    /// Posts receive `id`. If an unexpected message matches, it is removed
    /// and returned (the receive is then *not* posted).
    fn post_recv(&mut self, pat: Pattern, id: RecvId) -> Result<Posted, MatchError>;
    /// A message arrived (in per-sender order). If a posted receive matches
    /// it, that receive is removed and returned; otherwise the message is
    /// kept as unexpected under `msg`.
    fn arrive(&mut self, env: Envelope, msg: MsgId) -> Result<Option<RecvId>, MatchError>;
    /// The first unexpected message matching `pat`, left in place.
    fn probe(&mut self, pat: Pattern) -> Option<(Envelope, MsgId)>;
    /// Like [`MatchPoint::probe`] but removes the message (MPI_Mprobe).
    fn mprobe(&mut self, pat: Pattern) -> Option<(Envelope, MsgId)>;
    /// Removes the queued receive named by `token`; `false` if it is no
    /// longer queued (matched).
    fn cancel(&mut self, token: u64) -> bool;
    /// The fast path's match (the pml's direct receive): a message with
    /// `env`, next in its sender's order, is offered to the blocking receive
    /// `pat` while the matcher holds no other receive and nothing
    /// unexpected (the caller checked [`MatchPoint::depth`]). `token`: the
    /// receive's, if it is queued here. `true`: the receive takes it; a
    /// queued receive is removed, and it counts as a match where the
    /// matcher counts. `false`: nothing changed (the message goes the
    /// regular way).
    fn match_direct(&mut self, pat: &Pattern, token: Option<u64>, env: &Envelope) -> bool {
        pat.accepts(env) && token.is_none_or(|t| self.cancel(t))
    }
    /// Number of posted receives and of unexpected messages.
    fn depth(&self) -> (usize, usize);
    /// The matching counters of the `pml_stats` line (the split matcher's
    /// fields; a software-only matcher reports its software counts and
    /// zero for the NIC fields).
    fn counters(&self) -> SplitStats {
        SplitStats::default()
    }
    /// Queue depths and their high-water marks (the engine's counters;
    /// the default knows only the current depths).
    fn queue_stats(&self) -> tmpi_tm_engine::Stats {
        let (p, u) = self.depth();
        tmpi_tm_engine::Stats {
            posted_depth: p,
            unexpected_depth: u,
            posted_high_water: p,
            unexpected_high_water: u,
            ..Default::default()
        }
    }
    /// The split matcher, when this is one (the offload path).
    fn as_split(&mut self) -> Option<&mut crate::offload::SplitMatch> {
        None
    }
}

/// The software matcher of `tmpi-tm-engine` behind [`MatchPoint`].
///
/// With one more rule of its own, the **lone receive**: a receive posted
/// while the engine holds no receive and no unexpected message waits in a
/// one-entry slot instead of the engine's queues, and an arriving envelope
/// is compared with it before the engine is asked. That is MPI's order:
/// the slot's receive is older than every receive queued in the engine
/// after it (they go to the engine while the slot is taken), and nothing
/// unexpected could have matched it when it was posted. A ping-pong, a
/// stream of blocking receives and the small collectives post receives one
/// at a time into empty queues: each skips the engine's bins on posting and
/// on arrival, a quarter of a small receive's work (docs/pml.md).
#[derive(Debug, Default)]
pub struct EngineMatcher {
    engine: Engine<RecvId, MsgId>,
    /// The lone receive: pattern and receive id.
    lone: Option<(Pattern, RecvId)>,
    /// Counters of the lone slot, added to the engine's in the statistics;
    /// `lone_posts` is also the generation in the slot's cancel tokens.
    lone_posts: u64,
    lone_matches: u64,
    lone_cancels: u64,
    /// Highest posted depth counting the slot (the engine's own mark does
    /// not see it).
    lone_high_water: usize,
}

/// Slab index of the lone slot's cancel tokens (`RecvKey::to_u64` layout:
/// generation << 32 | index): the engine never has this many slots, so a
/// token of the slot names no engine receive.
const LONE_INDEX: u64 = u32::MAX as u64;

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

impl EngineMatcher {
    /// A matcher over a default-configured engine.
    pub fn new() -> Self {
        Self::default()
    }
    /// The cancel token of the receive in the lone slot (its generation is
    /// the number of slot posts, unchanged while the slot is taken).
    fn lone_token(&self) -> u64 {
        (u64::from(self.lone_posts as u32) << 32) | LONE_INDEX
    }

    /// The engine's counters, with the lone slot's receives counted as
    /// the engine would have counted them.
    pub fn stats(&self) -> tmpi_tm_engine::Stats {
        let mut s = self.engine.stats();
        let lone = usize::from(self.lone.is_some());
        s.posted_depth += lone;
        s.posted_high_water = s.posted_high_water.max(self.lone_high_water);
        s.recvs_posted += self.lone_posts;
        s.msgs_arrived += self.lone_matches;
        s.msgs_matched_posted += self.lone_matches;
        s.cancels_removed += self.lone_cancels;
        s
    }
}

impl MatchPoint for EngineMatcher {
    fn post_recv(&mut self, pat: Pattern, id: RecvId) -> Result<Posted, MatchError> {
        if self.lone.is_none() && self.engine.posted_len() == 0 && self.engine.unexpected_len() == 0
        {
            self.lone = Some((pat, id));
            self.lone_posts += 1;
            self.lone_high_water = self.lone_high_water.max(1);
            return Ok(Posted::Queued(self.lone_token()));
        }
        match self.engine.post_recv(spec(&pat), id) {
            Ok(PostOutcome::Matched { envelope, msg }) => Ok(Posted::Matched(envelope, msg)),
            Ok(PostOutcome::Posted { key, .. }) => {
                if self.lone.is_some() {
                    let d = self.engine.posted_len() + 1;
                    self.lone_high_water = self.lone_high_water.max(d);
                }
                Ok(Posted::Queued(key.to_u64()))
            }
            Err(e) => Err(MatchError(e.to_string())),
        }
    }
    fn arrive(&mut self, env: Envelope, msg: MsgId) -> Result<Option<RecvId>, MatchError> {
        if let Some((pat, id)) = self.lone {
            if pat.accepts(&env) {
                self.lone = None;
                self.lone_matches += 1;
                return Ok(Some(id));
            }
        }
        match self.engine.arrive(env, msg) {
            Ok(ArriveOutcome::Matched { recv, .. }) => Ok(Some(recv)),
            Ok(ArriveOutcome::Unexpected) => Ok(None),
            Err(e) => Err(MatchError(e.to_string())),
        }
    }
    fn probe(&mut self, pat: Pattern) -> Option<(Envelope, MsgId)> {
        self.engine.probe(&spec(&pat))
    }
    fn mprobe(&mut self, pat: Pattern) -> Option<(Envelope, MsgId)> {
        self.engine.mprobe(&spec(&pat))
    }
    fn cancel(&mut self, token: u64) -> bool {
        if self.lone.is_some() && token == self.lone_token() {
            self.lone = None;
            self.lone_cancels += 1;
            return true;
        }
        matches!(
            self.engine.cancel(RecvKey::from_u64(token)),
            CancelOutcome::Removed(_)
        )
    }
    fn match_direct(&mut self, pat: &Pattern, token: Option<u64>, env: &Envelope) -> bool {
        if !pat.accepts(env) {
            return false;
        }
        let Some(token) = token else {
            return true;
        };
        if self.lone.is_some() && token == self.lone_token() {
            self.lone = None;
            self.lone_matches += 1;
            return true;
        }
        self.cancel(token)
    }
    fn depth(&self) -> (usize, usize) {
        (
            self.engine.posted_len() + usize::from(self.lone.is_some()),
            self.engine.unexpected_len(),
        )
    }
    fn queue_stats(&self) -> tmpi_tm_engine::Stats {
        self.stats()
    }
    fn counters(&self) -> SplitStats {
        let s = self.stats();
        // Same definitions as the split matcher's: a software match is a
        // receive posted on an unexpected message or an arrival on a queued
        // receive; `unexpected` counts messages queued as unexpected.
        SplitStats {
            sw_matches: s.recvs_matched_unexpected + s.msgs_matched_posted,
            unexpected: s.msgs_arrived.saturating_sub(s.msgs_matched_posted),
            ..SplitStats::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(src: i32, tag: i32) -> Envelope {
        Envelope::new(0, src as u32, tag)
    }

    #[test]
    fn posting_order_and_wildcards() {
        let mut m = EngineMatcher::new();
        let any = Pattern {
            ctx: 0,
            src: None,
            tag: None,
        };
        let spec = Pattern {
            ctx: 0,
            src: Some(1),
            tag: Some(5),
        };
        assert!(matches!(m.post_recv(any, 1), Ok(Posted::Queued(_))));
        assert!(matches!(m.post_recv(spec, 2), Ok(Posted::Queued(_))));
        assert_eq!(m.arrive(env(1, 5), 10), Ok(Some(1)));
        assert_eq!(m.arrive(env(1, 5), 11), Ok(Some(2)));
        // Negative tags never match ANY_TAG.
        let Ok(Posted::Queued(tok)) = m.post_recv(any, 3) else {
            panic!("expected queued")
        };
        assert_eq!(m.arrive(env(1, -3), 12), Ok(None));
        assert_eq!(m.probe(any), None);
        let internal = Pattern {
            ctx: 0,
            src: None,
            tag: Some(-3),
        };
        assert_eq!(m.probe(internal), Some((env(1, -3), 12)));
        assert!(m.cancel(tok));
        assert!(!m.cancel(tok));
        // Another context does not match.
        let other = Pattern {
            ctx: 1,
            src: None,
            tag: Some(-3),
        };
        assert!(matches!(m.post_recv(other, 4), Ok(Posted::Queued(_))));
        assert_eq!(m.depth(), (1, 1));
        assert_eq!(m.mprobe(internal), Some((env(1, -3), 12)));
        assert_eq!(m.depth(), (1, 0));
        // Two arrivals matched queued receives, one was queued unexpected.
        let c = m.counters();
        assert_eq!((c.sw_matches, c.unexpected, c.nic_matches), (2, 1, 0));
    }
}
