//! The list baseline must be a correct matcher (a benchmark against a wrong one proves
//! nothing), and every workload must match what it claims at every depth.

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use tmpi_perf::list::ListMatcher;
use tmpi_perf::workload::{pair, prepared, setup, Workload};
use tmpi_tm_engine::reference::{
    diff, program_strategy, Matcher, PostResult, ReferenceMatcher, Shape,
};
use tmpi_tm_engine::{Engine, Envelope, RecvSpec};

struct List(ListMatcher<u64, u64>);

impl Matcher for List {
    type Key = u64;
    fn post(&mut self, spec: RecvSpec, recv: u64) -> PostResult<u64> {
        match self.0.post_recv(spec, recv) {
            Ok((e, m)) => PostResult::Matched(e, m),
            Err(k) => PostResult::Posted(k),
        }
    }
    fn arrive(&mut self, env: Envelope, msg: u64) -> Option<u64> {
        self.0.arrive(env, msg)
    }
    fn probe(&mut self, spec: &RecvSpec) -> Option<(Envelope, u64)> {
        self.0.probe(spec)
    }
    fn mprobe(&mut self, spec: &RecvSpec) -> Option<(Envelope, u64)> {
        self.0.mprobe(spec)
    }
    fn cancel(&mut self, key: u64) -> Option<u64> {
        self.0.cancel(key)
    }
    fn depths(&self) -> (usize, usize) {
        self.0.depths()
    }
}

#[test]
fn list_baseline_agrees_with_the_reference() {
    let cases = std::env::var("TMPI_SOAK_CASES")
        .ok()
        .and_then(|v| v.parse::<u32>().ok())
        .map_or(10_000, |n| (n / 10).max(1));
    let mut runner = TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    });
    runner
        .run(&program_strategy(Shape::default()), |program| {
            diff(
                &program,
                List(ListMatcher::new()),
                ReferenceMatcher::<u64, u64>::new(),
            )
            .map_err(|d| TestCaseError::fail(d.to_string()))
        })
        .unwrap();
}

#[test]
fn workloads_match_what_they_claim() {
    for w in Workload::ALL {
        for depth in [0, 1, 9, 10, 16, 257] {
            // prepared() runs 20 pairs and asserts each matched its own receive/message.
            let mut e = prepared(Engine::<u64, u64>::new(), w, depth);
            let mut l = prepared(ListMatcher::<u64, u64>::new(), w, depth);
            // The background stays queued and untouched.
            let bg_posted = if w == Workload::Unexpected { 0 } else { depth };
            let bg_unexp = if w == Workload::Unexpected { depth } else { 0 };
            assert_eq!(
                (e.posted_len(), e.unexpected_len()),
                (bg_posted, bg_unexp),
                "{w} {depth}"
            );
            assert_eq!(l.depths(), (bg_posted, bg_unexp), "{w} {depth}");
            for i in 100..130 {
                assert_eq!(pair(&mut e, w, i), i);
                assert_eq!(pair(&mut l, w, i), i);
            }
        }
    }
}

#[test]
fn wildcard_workloads_really_post_wildcards() {
    let mut e = Engine::<u64, u64>::new();
    setup(&mut e, Workload::AnySource10, 100);
    // Classes: exact, any-tag, any-source, any-both.
    assert_eq!(e.posted_per_class(), [90, 0, 10, 0]);
    let mut e = Engine::<u64, u64>::new();
    setup(&mut e, Workload::AnyTag10, 100);
    assert_eq!(e.posted_per_class(), [90, 10, 0, 0]);
    // And the measured traffic: iteration 9 posts a wildcard, which stays queued until the
    // arrival; check through the engine's counters by posting without the arrival.
    let mut e = Engine::<u64, u64>::new();
    for i in 0..10 {
        assert_eq!(pair(&mut e, Workload::AnyTag10, i), i);
    }
    assert_eq!(e.stats().msgs_matched_posted, 10);
}
