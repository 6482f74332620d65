//! Test support (cargo feature `reference`): the reference matcher, the program/step vocabulary
//! of differential tests, and proptest strategies generating programs.
//!
//! The reference matcher is written to be obviously right, not fast: two `Vec`s in posting and
//! arrival order, scanned from the front, exactly as the MPI rules read. Any other matcher (the
//! [`Engine`], the split SW/HW matcher) implements [`Matcher`] and is run against it step by step
//! with [`diff`].
//!
//! Handles in programs are ordinals: the n-th `Post` step of a program posts receive handle `n`,
//! the n-th `Arrive` step delivers payload handle `n`. Outcomes therefore compare across
//! matchers whatever keys they use internally.

use proptest::prelude::*;

use crate::types::{
    ArriveOutcome, CancelOutcome, ContextId, Envelope, PostOutcome, Rank, RecvSpec, SourceSpec,
    Tag, TagSpec,
};
use crate::Engine;

/// The plain matcher: lists scanned in order.
#[derive(Debug, Clone)]
pub struct ReferenceMatcher<R, M> {
    /// Queued receives in posting order, with the key they were given.
    posted: Vec<(u64, RecvSpec, R)>,
    /// Queued messages in arrival order.
    unexpected: Vec<(Envelope, M)>,
    next_key: u64,
}

impl<R: Copy, M: Copy> Default for ReferenceMatcher<R, M> {
    fn default() -> Self {
        Self::new()
    }
}

impl<R: Copy, M: Copy> ReferenceMatcher<R, M> {
    /// Empty queues.
    pub fn new() -> Self {
        ReferenceMatcher {
            posted: Vec::new(),
            unexpected: Vec::new(),
            next_key: 0,
        }
    }

    /// Post: the first (earliest-arrived) matching unexpected message, removed; else queue the
    /// receive last and return its key.
    pub fn post_recv(&mut self, spec: RecvSpec, recv: R) -> Result<(Envelope, M), u64> {
        if let Some(i) = self.unexpected.iter().position(|(e, _)| spec.matches(e)) {
            return Ok(self.unexpected.remove(i));
        }
        let key = self.next_key;
        self.next_key += 1;
        self.posted.push((key, spec, recv));
        Err(key)
    }

    /// Arrival: the first (earliest-posted) matching receive, removed; else queue the message
    /// last.
    pub fn arrive(&mut self, env: Envelope, msg: M) -> Option<R> {
        if let Some(i) = self.posted.iter().position(|(_, s, _)| s.matches(&env)) {
            return Some(self.posted.remove(i).2);
        }
        self.unexpected.push((env, msg));
        None
    }

    /// The first matching unexpected message, left in place.
    pub fn probe(&self, spec: &RecvSpec) -> Option<(Envelope, M)> {
        self.unexpected
            .iter()
            .find(|(e, _)| spec.matches(e))
            .copied()
    }

    /// The first matching unexpected message, removed.
    pub fn mprobe(&mut self, spec: &RecvSpec) -> Option<(Envelope, M)> {
        let i = self.unexpected.iter().position(|(e, _)| spec.matches(e))?;
        Some(self.unexpected.remove(i))
    }

    /// Remove the receive with this key if it is still queued.
    pub fn cancel(&mut self, key: u64) -> Option<R> {
        let i = self.posted.iter().position(|(k, _, _)| *k == key)?;
        Some(self.posted.remove(i).2)
    }

    /// Queued receives in posting order.
    pub fn posted(&self) -> impl Iterator<Item = (&RecvSpec, &R)> {
        self.posted.iter().map(|(_, s, r)| (s, r))
    }

    /// Queued messages in arrival order.
    pub fn unexpected(&self) -> &[(Envelope, M)] {
        &self.unexpected
    }
}

/// One operation of a test program.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// Post a receive; its handle is the number of `Post` steps before it.
    Post(RecvSpec),
    /// A message arrives; its payload handle is the number of `Arrive` steps before it.
    Arrive(Envelope),
    /// Probe without removing.
    Probe(RecvSpec),
    /// Matched probe (removes).
    MProbe(RecvSpec),
    /// Cancel the receive of the `n % posts_so_far`-th `Post` step (whatever became of it);
    /// a no-op when nothing was posted yet.
    Cancel(usize),
}

/// What a step did, in matcher-independent terms.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The receive matched the unexpected message with this payload handle and envelope.
    PostMatched(Envelope, u64),
    /// The receive was queued.
    Posted,
    /// The message matched the receive with this handle.
    ArriveMatched(u64),
    /// The message was queued as unexpected.
    Unexpected,
    /// What the probe saw.
    Probe(Option<(Envelope, u64)>),
    /// What the matched probe removed.
    MProbe(Option<(Envelope, u64)>),
    /// `Some(handle)` when the cancel removed that receive, `None` when it was gone.
    Cancel(Option<u64>),
    /// A cancel step before any post.
    Nothing,
}

/// A step's outcome and the queue depths after it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Record {
    /// What happened.
    pub outcome: Outcome,
    /// Receives queued after the step.
    pub posted: usize,
    /// Messages queued after the step.
    pub unexpected: usize,
}

/// The result of posting through a [`Matcher`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PostResult<K> {
    /// Matched this unexpected message.
    Matched(Envelope, u64),
    /// Queued under this key.
    Posted(K),
}

/// The interface a matcher offers to differential tests (handles are `u64` ordinals).
pub trait Matcher {
    /// How the matcher names a queued receive.
    type Key: Copy + std::fmt::Debug;
    /// Post a receive.
    fn post(&mut self, spec: RecvSpec, recv: u64) -> PostResult<Self::Key>;
    /// Deliver a message; the receive it matched, if any.
    fn arrive(&mut self, env: Envelope, msg: u64) -> Option<u64>;
    /// Probe.
    fn probe(&mut self, spec: &RecvSpec) -> Option<(Envelope, u64)>;
    /// Matched probe.
    fn mprobe(&mut self, spec: &RecvSpec) -> Option<(Envelope, u64)>;
    /// Cancel; the handle if the receive was removed.
    fn cancel(&mut self, key: Self::Key) -> Option<u64>;
    /// (posted, unexpected) depths.
    fn depths(&self) -> (usize, usize);
}

impl Matcher for ReferenceMatcher<u64, u64> {
    type Key = u64;
    fn post(&mut self, spec: RecvSpec, recv: u64) -> PostResult<u64> {
        match self.post_recv(spec, recv) {
            Ok((e, m)) => PostResult::Matched(e, m),
            Err(k) => PostResult::Posted(k),
        }
    }
    fn arrive(&mut self, env: Envelope, msg: u64) -> Option<u64> {
        ReferenceMatcher::arrive(self, env, msg)
    }
    fn probe(&mut self, spec: &RecvSpec) -> Option<(Envelope, u64)> {
        ReferenceMatcher::probe(self, spec)
    }
    fn mprobe(&mut self, spec: &RecvSpec) -> Option<(Envelope, u64)> {
        ReferenceMatcher::mprobe(self, spec)
    }
    fn cancel(&mut self, key: u64) -> Option<u64> {
        ReferenceMatcher::cancel(self, key)
    }
    fn depths(&self) -> (usize, usize) {
        (self.posted.len(), self.unexpected.len())
    }
}

impl Matcher for Engine<u64, u64> {
    type Key = crate::RecvKey;
    fn post(&mut self, spec: RecvSpec, recv: u64) -> PostResult<crate::RecvKey> {
        match self.post_recv(spec, recv).expect("default limits") {
            PostOutcome::Matched { envelope, msg } => PostResult::Matched(envelope, msg),
            PostOutcome::Posted { key, .. } => PostResult::Posted(key),
        }
    }
    fn arrive(&mut self, env: Envelope, msg: u64) -> Option<u64> {
        match Engine::arrive(self, env, msg).expect("default limits") {
            ArriveOutcome::Matched { recv, .. } => Some(recv),
            ArriveOutcome::Unexpected => None,
        }
    }
    fn probe(&mut self, spec: &RecvSpec) -> Option<(Envelope, u64)> {
        // The read-only peek (which scans while wildcard indexing is off) must agree with the
        // indexed probe.
        let peeked = Engine::peek_unexpected(self, spec);
        let probed = Engine::probe(self, spec);
        assert_eq!(
            peeked, probed,
            "peek_unexpected and probe disagree for {spec}"
        );
        probed
    }
    fn mprobe(&mut self, spec: &RecvSpec) -> Option<(Envelope, u64)> {
        Engine::mprobe(self, spec)
    }
    fn cancel(&mut self, key: crate::RecvKey) -> Option<u64> {
        match Engine::cancel(self, key) {
            CancelOutcome::Removed(r) => Some(r),
            CancelOutcome::NotFound => None,
        }
    }
    fn depths(&self) -> (usize, usize) {
        (self.posted_len(), self.unexpected_len())
    }
}

/// Runs a program through one matcher, step by step, keeping the ordinal ↔ key bookkeeping.
#[derive(Debug)]
pub struct Runner<X: Matcher> {
    /// The matcher under test.
    pub matcher: X,
    /// Key of each `Post` step's receive (`None` when it matched at once).
    keys: Vec<Option<X::Key>>,
    arrivals: u64,
}

impl<X: Matcher> Runner<X> {
    /// A runner around a fresh matcher.
    pub fn new(matcher: X) -> Self {
        Runner {
            matcher,
            keys: Vec::new(),
            arrivals: 0,
        }
    }

    /// Execute one step.
    pub fn step(&mut self, step: &Step) -> Record {
        let outcome = match *step {
            Step::Post(spec) => {
                let h = self.keys.len() as u64;
                match self.matcher.post(spec, h) {
                    PostResult::Matched(e, m) => {
                        self.keys.push(None);
                        Outcome::PostMatched(e, m)
                    }
                    PostResult::Posted(k) => {
                        self.keys.push(Some(k));
                        Outcome::Posted
                    }
                }
            }
            Step::Arrive(env) => {
                let m = self.arrivals;
                self.arrivals += 1;
                match self.matcher.arrive(env, m) {
                    Some(r) => Outcome::ArriveMatched(r),
                    None => Outcome::Unexpected,
                }
            }
            Step::Probe(spec) => Outcome::Probe(self.matcher.probe(&spec)),
            Step::MProbe(spec) => Outcome::MProbe(self.matcher.mprobe(&spec)),
            Step::Cancel(n) => {
                if self.keys.is_empty() {
                    Outcome::Nothing
                } else {
                    match self.keys[n % self.keys.len()] {
                        Some(k) => Outcome::Cancel(self.matcher.cancel(k)),
                        None => Outcome::Cancel(None),
                    }
                }
            }
        };
        let (posted, unexpected) = self.matcher.depths();
        Record {
            outcome,
            posted,
            unexpected,
        }
    }

    /// Execute a whole program, returning every record.
    pub fn run(&mut self, program: &[Step]) -> Vec<Record> {
        program.iter().map(|s| self.step(s)).collect()
    }
}

/// The first step at which two matchers disagreed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Divergence {
    /// Index of the step.
    pub index: usize,
    /// The step.
    pub step: Step,
    /// What the first matcher (the one under test) did.
    pub got: Record,
    /// What the second (the reference) did.
    pub expected: Record,
}

impl std::fmt::Display for Divergence {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "step {} ({:?}): got {:?}, reference {:?}",
            self.index, self.step, self.got, self.expected
        )
    }
}

/// Run `program` through both matchers in lockstep; the first divergence, if any.
pub fn diff<A: Matcher, B: Matcher>(program: &[Step], a: A, b: B) -> Result<(), Box<Divergence>> {
    let mut ra = Runner::new(a);
    let mut rb = Runner::new(b);
    for (index, step) in program.iter().enumerate() {
        let got = ra.step(step);
        let expected = rb.step(step);
        if got != expected {
            return Err(Box::new(Divergence {
                index,
                step: *step,
                got,
                expected,
            }));
        }
    }
    Ok(())
}

/// The space random programs are drawn from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shape {
    /// Context ids `0..contexts`.
    pub contexts: ContextId,
    /// Source ranks `0..sources`.
    pub sources: Rank,
    /// Application tags `0..tags`; internal tags -1 and -2 are drawn too.
    pub tags: Tag,
    /// Program length range upper bound (exclusive).
    pub max_len: usize,
    /// Percent of receive specs (and probes) with ANY_SOURCE.
    pub any_source_pct: u32,
    /// Percent with ANY_TAG.
    pub any_tag_pct: u32,
}

impl Default for Shape {
    fn default() -> Self {
        Shape {
            contexts: 2,
            sources: 3,
            tags: 3,
            max_len: 64,
            any_source_pct: 25,
            any_tag_pct: 25,
        }
    }
}

fn tag_strategy(tags: Tag) -> impl Strategy<Value = Tag> {
    prop_oneof![6 => 0..tags.max(1), 1 => -2..0i32]
}

/// Random receive specs of a shape.
pub fn spec_strategy(shape: Shape) -> impl Strategy<Value = RecvSpec> {
    (
        0..shape.contexts.max(1),
        0..shape.sources.max(1),
        tag_strategy(shape.tags),
        0..100u32,
        0..100u32,
    )
        .prop_map(move |(c, s, t, ps, pt)| RecvSpec {
            context: c,
            source: if ps < shape.any_source_pct {
                SourceSpec::Any
            } else {
                SourceSpec::Rank(s)
            },
            tag: if pt < shape.any_tag_pct {
                TagSpec::Any
            } else {
                TagSpec::Tag(t)
            },
        })
}

/// Random envelopes of a shape.
pub fn envelope_strategy(shape: Shape) -> impl Strategy<Value = Envelope> {
    (
        0..shape.contexts.max(1),
        0..shape.sources.max(1),
        tag_strategy(shape.tags),
    )
        .prop_map(|(c, s, t)| Envelope::new(c, s, t))
}

/// Random steps: arrivals and posts dominate; probes, matched probes and cancels mixed in.
pub fn step_strategy(shape: Shape) -> impl Strategy<Value = Step> {
    prop_oneof![
        35 => spec_strategy(shape).prop_map(Step::Post),
        35 => envelope_strategy(shape).prop_map(Step::Arrive),
        8 => spec_strategy(shape).prop_map(Step::Probe),
        7 => spec_strategy(shape).prop_map(Step::MProbe),
        10 => any::<usize>().prop_map(Step::Cancel),
    ]
}

/// Random programs of a shape.
pub fn program_strategy(shape: Shape) -> impl Strategy<Value = Vec<Step>> {
    proptest::collection::vec(step_strategy(shape), 0..shape.max_len.max(1))
}
