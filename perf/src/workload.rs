//! The matching workloads, defined once for criterion and for `matchbench`.
//!
//! Each workload builds a background of `depth` queued entries on context 0 that the measured
//! traffic never matches, then measures **post+match pairs**: one receive posted and one
//! message arrived that match each other (in either order).
//!
//! | workload | background (`depth` entries) | one measured pair (iteration `i`) |
//! |---|---|---|
//! | `specific` | receives (src 0, tag 1 000 000 + k) | post (src 0, tag 0), then (src 0, tag 0) arrives and matches it |
//! | `unexpected` | messages (src 0, tag 1 000 000 + k) | (src 0, tag 0) arrives unexpected, then post (src 0, tag 0) takes it |
//! | `any_source10` | as `specific`, but every 10th is (ANY_SOURCE, tag 1 000 000 + k) | as `specific`, but every 10th posted receive is (ANY_SOURCE, tag 0) |
//! | `any_tag10` | as `specific`, but every 10th is (src 1, ANY_TAG) | as `specific`, but every 10th posted receive is (src 0, ANY_TAG) |
//!
//! In the list matcher the measured receive or message lands behind the whole background of its
//! peer's list (or the wildcard list), so a search scans `depth` entries (0.9 `depth` for
//! `any_tag10`, whose wildcard background sits on peer 1).

use std::fmt;
use std::str::FromStr;

use tmpi_tm_engine::{ArriveOutcome, Engine, Envelope, PostOutcome, RecvSpec, SourceSpec, TagSpec};

use crate::list::ListMatcher;

/// Tags of the background entries start here.
pub const BACKGROUND_TAG: i32 = 1_000_000;

/// The four workloads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Workload {
    /// Exact receives behind `depth` non-matching exact receives.
    Specific,
    /// The message behind `depth` unexpected ones.
    Unexpected,
    /// 10% ANY_SOURCE receives.
    AnySource10,
    /// 10% ANY_TAG receives.
    AnyTag10,
}

impl Workload {
    /// All, in table order.
    pub const ALL: [Workload; 4] = [
        Workload::Specific,
        Workload::Unexpected,
        Workload::AnySource10,
        Workload::AnyTag10,
    ];

    /// The name used in tables and CSV.
    pub fn name(self) -> &'static str {
        match self {
            Workload::Specific => "specific",
            Workload::Unexpected => "unexpected",
            Workload::AnySource10 => "any_source10",
            Workload::AnyTag10 => "any_tag10",
        }
    }
}

impl fmt::Display for Workload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A name that is not a workload or matcher.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown {what} {name:?} (known: {known})")]
pub struct UnknownName {
    /// "workload" or "matcher".
    pub what: &'static str,
    /// What was given.
    pub name: String,
    /// The accepted names.
    pub known: &'static str,
}

impl FromStr for Workload {
    type Err = UnknownName;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Workload::ALL
            .into_iter()
            .find(|w| w.name() == s)
            .ok_or_else(|| UnknownName {
                what: "workload",
                name: s.to_string(),
                known: "specific, unexpected, any_source10, any_tag10",
            })
    }
}

/// The two operations a workload needs, with `u64` handles.
pub trait BenchMatcher {
    /// Name in tables and CSV.
    const NAME: &'static str;
    /// Post; the payload handle of the unexpected message it took, if any.
    fn post(&mut self, spec: RecvSpec, recv: u64) -> Option<u64>;
    /// Arrive; the receive handle it matched, if any.
    fn arrive(&mut self, env: Envelope, msg: u64) -> Option<u64>;
}

impl BenchMatcher for Engine<u64, u64> {
    const NAME: &'static str = "tm-engine";
    #[inline]
    fn post(&mut self, spec: RecvSpec, recv: u64) -> Option<u64> {
        match self.post_recv(spec, recv) {
            Ok(PostOutcome::Matched { msg, .. }) => Some(msg),
            Ok(PostOutcome::Posted { .. }) => None,
            Err(e) => panic!("benchmark exceeded engine limits: {e}"),
        }
    }
    #[inline]
    fn arrive(&mut self, env: Envelope, msg: u64) -> Option<u64> {
        match Engine::arrive(self, env, msg) {
            Ok(ArriveOutcome::Matched { recv, .. }) => Some(recv),
            Ok(ArriveOutcome::Unexpected) => None,
            Err(e) => panic!("benchmark exceeded engine limits: {e}"),
        }
    }
}

impl BenchMatcher for ListMatcher<u64, u64> {
    const NAME: &'static str = "list";
    #[inline]
    fn post(&mut self, spec: RecvSpec, recv: u64) -> Option<u64> {
        self.post_recv(spec, recv).ok().map(|(_, m)| m)
    }
    #[inline]
    fn arrive(&mut self, env: Envelope, msg: u64) -> Option<u64> {
        ListMatcher::arrive(self, env, msg)
    }
}

const CTX: u32 = 0;

fn background_spec(w: Workload, k: usize) -> RecvSpec {
    let tag = BACKGROUND_TAG + k as i32;
    let wild = k % 10 == 9;
    match w {
        Workload::AnySource10 if wild => RecvSpec {
            context: CTX,
            source: SourceSpec::Any,
            tag: TagSpec::Tag(tag),
        },
        Workload::AnyTag10 if wild => RecvSpec {
            context: CTX,
            source: SourceSpec::Rank(1),
            tag: TagSpec::Any,
        },
        _ => RecvSpec::exact(CTX, 0, tag),
    }
}

fn measured_spec(w: Workload, i: u64) -> RecvSpec {
    let wild = i % 10 == 9;
    match w {
        Workload::AnySource10 if wild => RecvSpec {
            context: CTX,
            source: SourceSpec::Any,
            tag: TagSpec::Tag(0),
        },
        Workload::AnyTag10 if wild => RecvSpec {
            context: CTX,
            source: SourceSpec::Rank(0),
            tag: TagSpec::Any,
        },
        _ => RecvSpec::exact(CTX, 0, 0),
    }
}

/// Queue the background of `depth` entries (handles `u64::MAX - k`, never returned by a pair).
pub fn setup<X: BenchMatcher>(m: &mut X, w: Workload, depth: usize) {
    for k in 0..depth {
        let h = u64::MAX - k as u64;
        match w {
            Workload::Unexpected => {
                let env = Envelope::new(CTX, 0, BACKGROUND_TAG + k as i32);
                let r = m.arrive(env, h);
                assert!(r.is_none(), "background message matched");
            }
            _ => {
                let r = m.post(background_spec(w, k), h);
                assert!(r.is_none(), "background receive matched");
            }
        }
    }
}

/// One measured post+match pair; returns the handle that matched (equal to `i` when the
/// matcher is right).
#[inline]
pub fn pair<X: BenchMatcher>(m: &mut X, w: Workload, i: u64) -> u64 {
    let env = Envelope::new(CTX, 0, 0);
    match w {
        Workload::Unexpected => {
            let a = m.arrive(env, i);
            debug_assert!(a.is_none());
            m.post(RecvSpec::exact(CTX, 0, 0), i).unwrap_or(u64::MAX)
        }
        _ => {
            let p = m.post(measured_spec(w, i), i);
            debug_assert!(p.is_none());
            m.arrive(env, i).unwrap_or(u64::MAX)
        }
    }
}

/// Build a matcher at `depth` and check that pairs match what they must (a benchmark of a
/// wrong matcher is worthless): panics with the workload named otherwise.
pub fn prepared<X: BenchMatcher>(mut m: X, w: Workload, depth: usize) -> X {
    setup(&mut m, w, depth);
    for i in 0..20 {
        let got = pair(&mut m, w, i);
        assert_eq!(
            got,
            i,
            "{} {w} depth {depth}: pair {i} matched {got}",
            X::NAME
        );
    }
    m
}
