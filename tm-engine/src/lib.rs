//! # tmpi-tm-engine: MPI tag matching in software
//!
//! A deterministic matching engine with no I/O and no threads: the pml (and later the split
//! software/hardware matcher) calls it under its matching lock. It keeps two queues, the
//! *posted receives* and the *unexpected messages*, and answers four questions:
//! [`Engine::post_recv`], [`Engine::arrive`], [`Engine::probe`] / [`Engine::mprobe`], and
//! [`Engine::cancel`].
//!
//! ```
//! use tmpi_tm_engine::{ArriveOutcome, Engine, Envelope, PostOutcome, RecvSpec};
//!
//! // Receive handles and payload handles are the caller's (here: request and fragment ids).
//! let mut engine: Engine<u32, u64> = Engine::new();
//! let spec = RecvSpec::from_mpi(/* context */ 4, /* MPI_ANY_SOURCE */ -1, /* tag */ 7)?;
//! let PostOutcome::Posted { key, .. } = engine.post_recv(spec, /* request */ 1)? else {
//!     unreachable!("nothing has arrived yet")
//! };
//! // A message from rank 3 arrives and completes request 1.
//! match engine.arrive(Envelope::new(4, 3, 7), /* fragment */ 99)? {
//!     ArriveOutcome::Matched { recv, .. } => assert_eq!(recv, 1),
//!     ArriveOutcome::Unexpected => unreachable!(),
//! }
//! // The receive is gone: cancelling it now reports so.
//! assert!(matches!(engine.cancel(key), tmpi_tm_engine::CancelOutcome::NotFound));
//! # Ok::<(), tmpi_tm_engine::EngineError>(())
//! ```
//!
//! ## Matching rules (MPI 4.0 §3.5, "Semantics of point-to-point communication")
//! 1. A receive spec `(context, source | ANY_SOURCE, tag | ANY_TAG)` matches an envelope
//!    `(context, source, tag)` when the contexts are equal, the source is equal or the spec says
//!    any, and the tag is equal or the spec says any **and the message's tag is >= 0**. Negative
//!    tags are internal (collectives): only a receive naming the exact tag gets them.
//! 2. **Receives match in posting order**: an arriving message takes the earliest-posted queued
//!    receive that matches it.
//! 3. **Messages from one source match in arrival order**: the caller delivers envelopes of one
//!    (context, source) in send order (the pml's per-peer sequence numbers), and a receive takes
//!    the earliest-arrived queued message that matches it.
//! 4. **ANY_SOURCE takes the earliest arrival across sources**: a wildcard-source receive takes
//!    the queued message that arrived first among all sources (arrival order at this engine is
//!    the fairness order; MPI leaves it open, this is what Open MPI's ob1 does as well).
//! 5. A posted receive that finds a matching unexpected message is never queued. A queued
//!    receive is removed by exactly one of: a matching arrival, [`Engine::cancel`].
//! 6. [`Engine::probe`] never removes anything; [`Engine::mprobe`] removes the message the same
//!    receive would have matched, without taking a posting sequence number.
//!
//! ## Costs
//! * Every receive gets a posting sequence number ([`PostSeq`]). Queued receives sit in one of
//!   four indexes by class ([`WildClass`]: exact, any-tag, any-source, any-both), each a hash map
//!   from (context, source?, tag?) to a FIFO list in posting order. An arrival looks at the head
//!   of at most four lists (one per non-empty class; wildcard-tag classes are skipped for
//!   negative tags) and takes the smallest sequence number. **O(1) expected for every arrival**,
//!   whatever the depth and the mix of wildcards: one hash operation (find and unlink together)
//!   when no wildcard receive is queued, otherwise at most 4 look-ups plus the unlink.
//! * Every unexpected message is queued on an arrival-ordered list and on its exact
//!   (context, source, tag) list: one hash operation to queue it, one to remove it. Posting an
//!   exact receive, or probing for one, is one hash look-up.
//! * For wildcard receives and probes the unexpected queue keeps three more indexes (any-tag
//!   by (context, source), any-source by (context, tag), any-both by context; the any-tag ones
//!   hold only tags >= 0), each a FIFO in arrival order, so a wildcard receive takes the head of
//!   one list: **one hash look-up, O(1)**. These indexes are *lazy*: off while the queue has
//!   seen only exact receives, built by one walk of the arrival list (O(queued)) the first time a
//!   wildcard receive or probe meets a non-empty queue, then maintained (up to 4 hash operations
//!   per message queued or removed) until the queue drains, when they switch off for free. Each
//!   message is indexed at most once in its life, so the build is **amortised O(1) per
//!   message**; the one wildcard receive that triggers it pays O(queued) once.
//! * Cancel is O(1) (the key names the slab slot; a generation count detects stale keys).
//! * No allocation per operation in steady state: receives and messages live in slabs with free
//!   lists; hash bins are removed when their list empties and the tables keep their capacity.
//!   Slabs grow to the highest depth seen and are not shrunk.
//! * Memory per queued entry with `R = M = u64` (see [`Engine::footprint`]): 48 bytes per
//!   receive slot, 64 bytes per unexpected slot, plus one 20-byte hash bin (+1 control byte,
//!   table load factor <= 7/8) per distinct non-empty list, shared by all entries on it.
//!
//! ## Handles
//! `R` (receive) and `M` (message payload) are the caller's opaque `Copy` handles, typically a
//! request index and a fragment index. [`RecvKey`] names a queued receive for [`Engine::cancel`].
//!
//! ## For the split matcher
//! [`Engine::peek_posted`] answers "which queued receive (and which posting sequence) would this
//! envelope match?", [`Engine::cancel`] removes a specific receive, and the posting sequence of
//! each receive is returned by [`Engine::post_recv`].
//!
//! ## Test support
//! With the cargo feature `reference`, [`reference`] exposes a plain reference matcher (lists
//! scanned in order, written as the MPI rules read), the program/step vocabulary of the
//! differential tests and proptest strategies that generate programs, for other crates' tests.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod bins;
mod engine;
mod posted;
mod types;
mod unexpected;

#[cfg(any(test, feature = "reference"))]
pub mod reference;
pub mod split;

#[cfg(test)]
mod tests;

pub use engine::{Engine, EngineConfig, Footprint, Stats};
pub use types::{
    ArriveOutcome, CancelOutcome, ContextId, EngineError, Envelope, PostOutcome, PostSeq, Rank,
    RecvKey, RecvSpec, SourceSpec, Tag, TagSpec, WildClass, MPI_ANY_SOURCE, MPI_ANY_TAG,
};
