//! The software matching engine: posted and unexpected queues behind one call interface.

use crate::posted::Posted;
use crate::types::{
    ArriveOutcome, CancelOutcome, EngineError, Envelope, PostOutcome, PostSeq, RecvKey, RecvSpec,
};
use crate::unexpected::Unexpected;

/// Limits and preallocation of an [`Engine`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EngineConfig {
    /// Most receives queued at once; past it [`Engine::post_recv`] fails with
    /// [`EngineError::PostedQueueFull`]. At most `u32::MAX - 1`.
    pub max_posted: usize,
    /// Most unexpected messages queued at once; past it [`Engine::arrive`] fails with
    /// [`EngineError::UnexpectedQueueFull`] (the pml then stops pulling from its BTLs or
    /// aborts). At most `u32::MAX - 1`.
    pub max_unexpected: usize,
    /// Slots (and hash bins) allocated up front for each queue, so that depths below it never
    /// allocate.
    pub initial_capacity: usize,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            max_posted: (u32::MAX - 1) as usize,
            max_unexpected: (u32::MAX - 1) as usize,
            initial_capacity: 64,
        }
    }
}

/// Counters and depths, for `MPI_T`-style statistics and the pml's verbose output.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Receives queued now.
    pub posted_depth: usize,
    /// Unexpected messages queued now.
    pub unexpected_depth: usize,
    /// Highest posted depth seen.
    pub posted_high_water: usize,
    /// Highest unexpected depth seen.
    pub unexpected_high_water: usize,
    /// Receives posted (matched at once or queued).
    pub recvs_posted: u64,
    /// Receives that matched an unexpected message when posted.
    pub recvs_matched_unexpected: u64,
    /// Messages that arrived.
    pub msgs_arrived: u64,
    /// Messages that matched a posted receive on arrival.
    pub msgs_matched_posted: u64,
    /// Probes (plain and matched).
    pub probes: u64,
    /// Probes that found a message.
    pub probe_hits: u64,
    /// Matched probes that removed a message.
    pub mprobe_hits: u64,
    /// Cancels that removed a receive.
    pub cancels_removed: u64,
    /// Cancels that found the receive gone.
    pub cancels_not_found: u64,
}

/// Bytes of engine memory per queued entry, for the documentation and `tmpi_info`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Footprint {
    /// Slab slot of a posted receive.
    pub posted_slot: usize,
    /// Slab slot of an unexpected message.
    pub unexpected_slot: usize,
    /// One hash bin (key, head, tail; without the table's control byte and spare capacity).
    pub bin: usize,
}

/// The matching engine. `R` is the caller's receive handle, `M` its payload handle for an
/// unexpected message; both are opaque to the engine and copied in and out (use an index or a
/// `u64`). See the crate documentation for the matching rules and costs.
///
/// Not thread-safe by design (`&mut self` everywhere): the pml calls it under its matching lock.
#[derive(Debug)]
pub struct Engine<R, M> {
    posted: Posted<R>,
    unexpected: Unexpected<M>,
    next_seq: PostSeq,
    config: EngineConfig,
    stats: Stats,
}

impl<R: Copy, M: Copy> Default for Engine<R, M> {
    fn default() -> Self {
        Self::new()
    }
}

impl<R: Copy, M: Copy> Engine<R, M> {
    /// An engine with the default configuration.
    pub fn new() -> Self {
        Self::with_config(EngineConfig::default()).expect("default configuration is valid")
    }

    /// An engine with explicit limits.
    pub fn with_config(config: EngineConfig) -> Result<Self, EngineError> {
        let max = (u32::MAX - 1) as usize;
        if config.max_posted > max || config.max_unexpected > max {
            return Err(EngineError::InvalidConfig(
                "queue limits must be at most u32::MAX - 1",
            ));
        }
        if config.initial_capacity > config.max_posted.max(config.max_unexpected) {
            return Err(EngineError::InvalidConfig(
                "initial capacity larger than both queue limits",
            ));
        }
        tracing::debug!(?config, "tm-engine: new matching engine");
        Ok(Engine {
            posted: Posted::with_capacity(config.initial_capacity.min(config.max_posted)),
            unexpected: Unexpected::with_capacity(
                config.initial_capacity.min(config.max_unexpected),
            ),
            next_seq: 0,
            config,
            stats: Stats::default(),
        })
    }

    /// The configuration in force.
    pub fn config(&self) -> &EngineConfig {
        &self.config
    }

    /// Post a receive. If an unexpected message matches (the earliest-arrived one that does),
    /// it is removed and returned, and the receive is not queued; otherwise the receive is queued
    /// behind every earlier receive. Either way the receive takes the next posting sequence
    /// number. Fails only when the posted queue is at its limit (the receive is then not
    /// posted and no sequence number is used).
    #[inline]
    pub fn post_recv(&mut self, spec: RecvSpec, recv: R) -> Result<PostOutcome<M>, EngineError> {
        if let Some(idx) = self.unexpected.find(&spec) {
            let (envelope, msg) = self.unexpected.remove(idx);
            self.next_seq += 1;
            self.stats.recvs_posted += 1;
            self.stats.recvs_matched_unexpected += 1;
            return Ok(PostOutcome::Matched { envelope, msg });
        }
        if self.posted.len() >= self.config.max_posted {
            tracing::warn!(limit = self.config.max_posted, %spec, "tm-engine: posted queue full");
            return Err(EngineError::PostedQueueFull {
                limit: self.config.max_posted,
            });
        }
        let seq = self.next_seq;
        self.next_seq += 1;
        let key = self.posted.push(&spec, recv, seq);
        self.stats.recvs_posted += 1;
        if self.posted.len() > self.stats.posted_high_water {
            self.stats.posted_high_water = self.posted.len();
        }
        Ok(PostOutcome::Posted { key, seq })
    }

    /// A message arrives (the caller guarantees per-source order within a context). The
    /// earliest-posted receive that matches it is removed and returned; if none does, the
    /// message is queued as unexpected with its payload handle `msg`. Fails only when no receive
    /// matches and the unexpected queue is at its limit (the message is then not queued).
    #[inline]
    pub fn arrive(&mut self, env: Envelope, msg: M) -> Result<ArriveOutcome<R>, EngineError> {
        let hit = match self.posted.take_exact_only(&env) {
            Some(hit) => hit,
            None => self.posted.find(&env).map(|idx| self.posted.remove(idx)),
        };
        if let Some((recv, key, seq)) = hit {
            self.stats.msgs_arrived += 1;
            self.stats.msgs_matched_posted += 1;
            return Ok(ArriveOutcome::Matched { recv, key, seq });
        }
        if self.unexpected.len() >= self.config.max_unexpected {
            tracing::warn!(
                limit = self.config.max_unexpected,
                ?env,
                "tm-engine: unexpected queue full"
            );
            return Err(EngineError::UnexpectedQueueFull {
                limit: self.config.max_unexpected,
            });
        }
        self.unexpected.push(env, msg);
        self.stats.msgs_arrived += 1;
        if self.unexpected.len() > self.stats.unexpected_high_water {
            self.stats.unexpected_high_water = self.unexpected.len();
        }
        Ok(ArriveOutcome::Unexpected)
    }

    /// The unexpected message a receive of `spec` would match now, left in place
    /// (`MPI_Iprobe`). Takes `&mut self` only to count the probe.
    pub fn probe(&mut self, spec: &RecvSpec) -> Option<(Envelope, M)> {
        self.stats.probes += 1;
        let idx = self.unexpected.find(spec)?;
        self.stats.probe_hits += 1;
        let s = self.unexpected.slot(idx);
        Some((s.env, s.msg))
    }

    /// Like [`Engine::probe`] without counting it and without changing anything (for `&self`
    /// callers such as diagnostics). A wildcard spec costs O(unexpected depth) while wildcard
    /// indexing is off (see the crate docs), O(1) otherwise.
    pub fn peek_unexpected(&self, spec: &RecvSpec) -> Option<(Envelope, M)> {
        let s = self.unexpected.slot(self.unexpected.peek(spec)?);
        Some((s.env, s.msg))
    }

    /// The unexpected message a receive of `spec` would match now, removed (`MPI_Improbe`):
    /// the caller owns the payload handle from now on (`MPI_Mrecv` needs no engine call).
    /// Does not take a posting sequence number: a matched probe is not a receive.
    pub fn mprobe(&mut self, spec: &RecvSpec) -> Option<(Envelope, M)> {
        self.stats.probes += 1;
        let idx = self.unexpected.find(spec)?;
        self.stats.probe_hits += 1;
        self.stats.mprobe_hits += 1;
        Some(self.unexpected.remove(idx))
    }

    /// Cancel a posted receive: removed if still queued, otherwise [`CancelOutcome::NotFound`]
    /// (it matched, or was cancelled, before; the caller's request then completes or completed
    /// normally).
    pub fn cancel(&mut self, key: RecvKey) -> CancelOutcome<R> {
        match self.posted.lookup(key) {
            Some(idx) => {
                let (recv, _, _) = self.posted.remove(idx);
                self.stats.cancels_removed += 1;
                CancelOutcome::Removed(recv)
            }
            None => {
                self.stats.cancels_not_found += 1;
                CancelOutcome::NotFound
            }
        }
    }

    /// Is the receive named by `key` still queued? If so, its handle and posting sequence.
    pub fn posted_recv(&self, key: RecvKey) -> Option<(R, PostSeq)> {
        let s = self.posted.slot(self.posted.lookup(key)?);
        Some((s.recv, s.seq))
    }

    /// The receive an arrival of `env` would match now, left in place (for the split matcher:
    /// "could an earlier software-held receive match this envelope?" is
    /// `peek_posted(env).is_some_and(|(_, _, seq)| seq < hw_seq)`).
    pub fn peek_posted(&self, env: &Envelope) -> Option<(RecvKey, R, PostSeq)> {
        let idx = self.posted.find(env)?;
        let s = self.posted.slot(idx);
        Some((
            RecvKey {
                index: idx,
                generation: s.generation,
            },
            s.recv,
            s.seq,
        ))
    }

    /// The sequence number the next posted receive will take.
    pub fn next_post_seq(&self) -> PostSeq {
        self.next_seq
    }

    /// Receives queued now.
    pub fn posted_len(&self) -> usize {
        self.posted.len()
    }

    /// Receives queued now per class, indexed by [`crate::WildClass`] as `usize`.
    pub fn posted_per_class(&self) -> [usize; 4] {
        self.posted.per_class()
    }

    /// Unexpected messages queued now.
    pub fn unexpected_len(&self) -> usize {
        self.unexpected.len()
    }

    /// Are the unexpected queue's wildcard indexes maintained right now? (Off until a wildcard
    /// receive or probe meets a non-empty unexpected queue, and again whenever it drains.)
    pub fn unexpected_wildcard_indexed(&self) -> bool {
        self.unexpected.wild_indexed()
    }

    /// Counters and depths.
    pub fn stats(&self) -> Stats {
        Stats {
            posted_depth: self.posted.len(),
            unexpected_depth: self.unexpected.len(),
            ..self.stats
        }
    }

    /// Handles of the queued receives in posting order, with their sequence numbers
    /// (O(n log n); diagnostics and tests).
    pub fn posted_snapshot(&self) -> Vec<(PostSeq, R)> {
        self.posted.snapshot()
    }

    /// Memory per queued entry for these `R` and `M`.
    pub fn footprint() -> Footprint {
        Footprint {
            posted_slot: std::mem::size_of::<crate::posted::RecvSlot<R>>(),
            unexpected_slot: std::mem::size_of::<crate::unexpected::MsgSlot<M>>(),
            bin: std::mem::size_of::<(crate::bins::BinKey, crate::bins::List)>(),
        }
    }

    /// Slab slots allocated (posted, unexpected) and hash bins in use (posted, unexpected):
    /// the memory actually held, for statistics.
    pub fn allocation(&self) -> ([usize; 2], [usize; 2]) {
        (
            [
                self.posted.slots_allocated(),
                self.unexpected.slots_allocated(),
            ],
            [self.posted.bins(), self.unexpected.bins()],
        )
    }
}
