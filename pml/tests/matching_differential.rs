//! The pml's software matcher (`EngineMatcher`: the tm-engine plus the
//! one-entry "lone receive" slot) against the plain reference matcher of
//! MPI's rules, on random programs of posts, arrivals, probes, matched
//! probes and cancels: every step must have the same outcome and leave the
//! same queue depths.

use proptest::prelude::*;
use tmpi_pml::matching::{EngineMatcher, Envelope, MatchPoint, Pattern, Posted};
use tmpi_tm_engine::reference::{
    diff, program_strategy, Matcher, PostResult, ReferenceMatcher, Shape,
};
use tmpi_tm_engine::{Envelope as EEnvelope, RecvSpec, SourceSpec, TagSpec};

/// `EngineMatcher` seen through the differential-test interface (with the
/// receive handle of each cancel token, which `MatchPoint::cancel` does not
/// give back).
struct Pml(EngineMatcher, std::collections::HashMap<u64, u64>);

fn pattern(s: &RecvSpec) -> Pattern {
    Pattern {
        ctx: s.context,
        src: match s.source {
            SourceSpec::Any => None,
            SourceSpec::Rank(r) => Some(r as i32),
        },
        tag: match s.tag {
            TagSpec::Any => None,
            TagSpec::Tag(t) => Some(t),
        },
    }
}

impl Matcher for Pml {
    type Key = u64;
    fn post(&mut self, spec: RecvSpec, recv: u64) -> PostResult<u64> {
        match self
            .0
            .post_recv(pattern(&spec), recv)
            .expect("default limits")
        {
            Posted::Matched(e, m) => PostResult::Matched(e, m),
            Posted::Queued(t) => {
                self.1.insert(t, recv);
                PostResult::Posted(t)
            }
        }
    }
    fn arrive(&mut self, env: EEnvelope, msg: u64) -> Option<u64> {
        self.0.arrive(env, msg).expect("default limits")
    }
    fn probe(&mut self, spec: &RecvSpec) -> Option<(EEnvelope, u64)> {
        self.0.probe(pattern(spec))
    }
    fn mprobe(&mut self, spec: &RecvSpec) -> Option<(EEnvelope, u64)> {
        self.0.mprobe(pattern(spec))
    }
    fn cancel(&mut self, key: u64) -> Option<u64> {
        if self.0.cancel(key) {
            self.1.get(&key).copied()
        } else {
            None
        }
    }
    fn depths(&self) -> (usize, usize) {
        self.0.depth()
    }
}

fn check(shape: Shape, cases: u32) {
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig {
        cases,
        ..ProptestConfig::default()
    });
    runner
        .run(&program_strategy(shape), |program| {
            let got = diff(
                &program,
                Pml(EngineMatcher::new(), Default::default()),
                ReferenceMatcher::<u64, u64>::new(),
            );
            prop_assert!(got.is_ok(), "{:?}", got.err());
            Ok(())
        })
        .unwrap();
}

/// Default programs (up to 64 steps over 2 contexts, 3 sources, 3 tags).
#[test]
fn engine_matcher_agrees_with_the_reference() {
    check(Shape::default(), 3000);
}

/// Short programs, one source and few tags: the queues are often empty, so
/// most receives take the lone slot and most arrivals meet it (wildcards,
/// internal tags, cancels of the slot and of engine receives behind it).
#[test]
fn lone_receive_slot_keeps_mpi_order() {
    check(
        Shape {
            contexts: 1,
            sources: 2,
            tags: 2,
            max_len: 12,
            any_source_pct: 30,
            any_tag_pct: 30,
        },
        5000,
    );
}

/// The posted high-water mark counts the lone slot with the engine's
/// queue (MPI_T `pml_posted_high_water`).
#[test]
fn posted_high_water_counts_the_lone_slot() {
    let mut m = EngineMatcher::new();
    for (i, tag) in (100..105).enumerate() {
        let p = Pattern {
            ctx: 0,
            src: Some(0),
            tag: Some(tag),
        };
        assert!(matches!(m.post_recv(p, i as u64), Ok(Posted::Queued(_))));
    }
    assert_eq!(m.depth(), (5, 0));
    for (i, tag) in (100..105).enumerate() {
        let e = Envelope::new(0, 0, tag);
        assert_eq!(m.arrive(e, i as u64), Ok(Some(i as u64)));
    }
    let s = m.queue_stats();
    assert_eq!((s.posted_depth, s.posted_high_water), (0, 5));
    assert_eq!(
        (s.recvs_posted, s.msgs_arrived, s.msgs_matched_posted),
        (5, 5, 5)
    );
}
