//! The vocabulary of matching: envelopes, receive specifications, handles, errors.

use std::fmt;

/// A communicator's context id (the pml allocates them; point-to-point and collective traffic of
/// one communicator may use different ids).
pub type ContextId = u32;

/// A process rank within the communicator the context id belongs to.
pub type Rank = u32;

/// A message tag. Tags `>= 0` are the application's; negative tags are internal (collectives,
/// one-sided emulation, ...). [`TagSpec::Any`] matches only tags `>= 0`.
pub type Tag = i32;

/// MPI's `MPI_ANY_SOURCE` value as the C and Rust front ends pass it (Open MPI and MPICH agree
/// on -1 for the C constant's value only by accident; tmpi fixes it to -1).
pub const MPI_ANY_SOURCE: i32 = -1;

/// MPI's `MPI_ANY_TAG` value as the front ends pass it. Internal tags are therefore `< -1` when
/// they go through [`RecvSpec::from_mpi`]; the engine itself accepts any `i32` in
/// [`TagSpec::Tag`].
pub const MPI_ANY_TAG: i32 = -1;

/// What a message carries for matching: the match header without its sequence number (the pml
/// restores per-source order before it hands envelopes to the engine).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Envelope {
    /// Context id of the communicator.
    pub context: ContextId,
    /// Rank of the sender in that communicator.
    pub source: Rank,
    /// The tag (any `i32`; negative tags are internal).
    pub tag: Tag,
}

impl Envelope {
    /// A new envelope.
    pub const fn new(context: ContextId, source: Rank, tag: Tag) -> Self {
        Envelope {
            context,
            source,
            tag,
        }
    }
}

/// The source half of a receive specification.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SourceSpec {
    /// `MPI_ANY_SOURCE`: any sender on the context.
    Any,
    /// Exactly this rank.
    Rank(Rank),
}

/// The tag half of a receive specification.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TagSpec {
    /// `MPI_ANY_TAG`: any tag `>= 0`. Internal (negative) tags are never matched by a wildcard.
    Any,
    /// Exactly this tag (negative values allowed: internal receives name their tag).
    Tag(Tag),
}

/// What a receive (or a probe) asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RecvSpec {
    /// Context id; never a wildcard.
    pub context: ContextId,
    /// Source rank or any.
    pub source: SourceSpec,
    /// Tag or any.
    pub tag: TagSpec,
}

impl RecvSpec {
    /// A fully specified receive.
    pub const fn exact(context: ContextId, source: Rank, tag: Tag) -> Self {
        RecvSpec {
            context,
            source: SourceSpec::Rank(source),
            tag: TagSpec::Tag(tag),
        }
    }

    /// A receive from MPI-style integers: `source == MPI_ANY_SOURCE` (-1) and `tag ==
    /// MPI_ANY_TAG` (-1) are the wildcards, any other negative source is an error, any other
    /// negative tag is an internal tag matched exactly.
    pub fn from_mpi(context: ContextId, source: i32, tag: i32) -> Result<Self, EngineError> {
        let source = match source {
            MPI_ANY_SOURCE => SourceSpec::Any,
            s if s < 0 => return Err(EngineError::InvalidSource(s)),
            s => SourceSpec::Rank(s as Rank),
        };
        let tag = if tag == MPI_ANY_TAG {
            TagSpec::Any
        } else {
            TagSpec::Tag(tag)
        };
        Ok(RecvSpec {
            context,
            source,
            tag,
        })
    }

    /// Does this specification match the envelope? (The MPI rule, stated once: same context;
    /// same source unless any; same tag, or any tag when the message's tag is `>= 0`.)
    #[inline]
    pub fn matches(&self, env: &Envelope) -> bool {
        self.context == env.context
            && match self.source {
                SourceSpec::Any => true,
                SourceSpec::Rank(r) => r == env.source,
            }
            && match self.tag {
                TagSpec::Any => env.tag >= 0,
                TagSpec::Tag(t) => t == env.tag,
            }
    }

    /// Which of the four receive classes this specification belongs to.
    #[inline]
    pub fn class(&self) -> WildClass {
        match (self.source, self.tag) {
            (SourceSpec::Rank(_), TagSpec::Tag(_)) => WildClass::Exact,
            (SourceSpec::Rank(_), TagSpec::Any) => WildClass::AnyTag,
            (SourceSpec::Any, TagSpec::Tag(_)) => WildClass::AnySource,
            (SourceSpec::Any, TagSpec::Any) => WildClass::AnyBoth,
        }
    }
}

impl fmt::Display for RecvSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ctx {} src ", self.context)?;
        match self.source {
            SourceSpec::Any => write!(f, "ANY")?,
            SourceSpec::Rank(r) => write!(f, "{r}")?,
        }
        match self.tag {
            TagSpec::Any => write!(f, " tag ANY"),
            TagSpec::Tag(t) => write!(f, " tag {t}"),
        }
    }
}

/// The four kinds of receive specification; each has its own index in the engine.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WildClass {
    /// Source and tag given.
    Exact = 0,
    /// Source given, any tag.
    AnyTag = 1,
    /// Any source, tag given.
    AnySource = 2,
    /// Any source and any tag.
    AnyBoth = 3,
}

/// Names a posted receive inside one engine: returned by [`crate::Engine::post_recv`], given
/// back to cancel it. A key whose receive has matched or been cancelled is stale: every
/// operation reports the receive as gone (slot reuse is detected by a generation count).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RecvKey {
    pub(crate) index: u32,
    pub(crate) generation: u32,
}

impl RecvKey {
    /// The key as one `u64` (for callers that store it in a plain integer field).
    pub const fn to_u64(self) -> u64 {
        ((self.generation as u64) << 32) | self.index as u64
    }

    /// Back from [`RecvKey::to_u64`]. Any value is accepted; a value that never came from this
    /// engine names no receive and is reported as gone.
    pub const fn from_u64(v: u64) -> Self {
        RecvKey {
            index: v as u32,
            generation: (v >> 32) as u32,
        }
    }
}

/// A position in the posting order of one engine (starts at 0, +1 per posted receive, including
/// receives that matched an unexpected message at once). Strictly increasing, never reused.
pub type PostSeq = u64;

/// The outcome of [`crate::Engine::post_recv`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PostOutcome<M> {
    /// The receive matched this unexpected message, which is removed from the unexpected queue.
    /// The receive was never queued.
    Matched {
        /// The message's envelope (source and tag for the status).
        envelope: Envelope,
        /// The caller's payload handle given at arrival.
        msg: M,
    },
    /// Nothing matched; the receive is queued.
    Posted {
        /// Names the receive for cancel and the split matcher.
        key: RecvKey,
        /// Its position in the posting order.
        seq: PostSeq,
    },
}

/// The outcome of [`crate::Engine::arrive`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ArriveOutcome<R> {
    /// The message matched this posted receive, which is removed from the posted queue.
    Matched {
        /// The caller's receive handle given when posting.
        recv: R,
        /// The (now stale) key of the receive.
        key: RecvKey,
        /// Its posting sequence number.
        seq: PostSeq,
    },
    /// No receive matched; the message is queued as unexpected with its payload handle.
    Unexpected,
}

/// The outcome of [`crate::Engine::cancel`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CancelOutcome<R> {
    /// The receive was still posted and is now removed; here is its handle.
    Removed(R),
    /// The key names no posted receive: it matched already, was cancelled already, or never
    /// came from this engine.
    NotFound,
}

/// Errors the engine reports instead of panicking.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EngineError {
    /// The posted-receive queue is at its configured limit.
    #[error("posted receive queue full ({limit} receives)")]
    PostedQueueFull {
        /// The configured limit.
        limit: usize,
    },
    /// The unexpected-message queue is at its configured limit.
    #[error("unexpected message queue full ({limit} messages)")]
    UnexpectedQueueFull {
        /// The configured limit.
        limit: usize,
    },
    /// A negative source rank that is not `MPI_ANY_SOURCE`.
    #[error("invalid source rank {0}")]
    InvalidSource(i32),
    /// A configuration value out of range.
    #[error("invalid engine configuration: {0}")]
    InvalidConfig(&'static str),
}
