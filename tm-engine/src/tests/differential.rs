//! Differential property test: the engine against the reference matcher, step by step.
//!
//! Case count: `TMPI_SOAK_CASES` (default 100 000). Soak: `TMPI_SOAK_CASES=10000000 cargo test
//! -p tmpi-tm-engine --release differential -- --nocapture`.

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

use crate::reference::{diff, program_strategy, ReferenceMatcher, Shape};
use crate::Engine;

fn cases() -> u32 {
    std::env::var("TMPI_SOAK_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000)
}

fn run_shape(shape: Shape, cases: u32) {
    let mut runner = TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    });
    runner
        .run(&program_strategy(shape), |program| {
            if let Err(d) = diff(
                &program,
                Engine::<u64, u64>::new(),
                ReferenceMatcher::<u64, u64>::new(),
            ) {
                return Err(TestCaseError::fail(d.to_string()));
            }
            Ok(())
        })
        .unwrap();
}

#[test]
fn differential_default_shape() {
    run_shape(Shape::default(), cases());
}

/// Longer programs over more sources and contexts: deeper queues, more wildcard interplay.
#[test]
fn differential_deep_shape() {
    run_shape(
        Shape {
            contexts: 3,
            sources: 5,
            tags: 4,
            max_len: 400,
            any_source_pct: 15,
            any_tag_pct: 15,
        },
        (cases() / 10).max(1),
    );
}

/// Only wildcards and internal tags in a tiny space: every receive competes with every other.
#[test]
fn differential_wildcard_heavy_shape() {
    run_shape(
        Shape {
            contexts: 1,
            sources: 2,
            tags: 2,
            max_len: 64,
            any_source_pct: 60,
            any_tag_pct: 60,
        },
        (cases() / 4).max(1),
    );
}

/// The same programs with ids mapped onto extreme values (rank u32::MAX, tags i32::MIN and
/// i32::MAX, context u32::MAX): no value may be mistaken for a wildcard or a sentinel.
#[test]
fn differential_extreme_values() {
    use crate::reference::Step;
    use crate::{Envelope, RecvSpec, SourceSpec, TagSpec};

    const CTX: [u32; 2] = [u32::MAX, 0];
    const SRC: [u32; 3] = [u32::MAX, 0, u32::MAX - 1];
    fn tag(t: i32) -> i32 {
        match t {
            -2 => i32::MIN,
            -1 => -1,
            0 => 0,
            1 => i32::MAX,
            _ => t,
        }
    }
    fn spec(s: RecvSpec) -> RecvSpec {
        RecvSpec {
            context: CTX[s.context as usize],
            source: match s.source {
                SourceSpec::Any => SourceSpec::Any,
                SourceSpec::Rank(r) => SourceSpec::Rank(SRC[r as usize]),
            },
            tag: match s.tag {
                TagSpec::Any => TagSpec::Any,
                TagSpec::Tag(t) => TagSpec::Tag(tag(t)),
            },
        }
    }
    let shape = Shape::default();
    let strategy = program_strategy(shape).prop_map(|p| {
        p.into_iter()
            .map(|s| match s {
                Step::Post(x) => Step::Post(spec(x)),
                Step::Probe(x) => Step::Probe(spec(x)),
                Step::MProbe(x) => Step::MProbe(spec(x)),
                Step::Arrive(e) => Step::Arrive(Envelope::new(
                    CTX[e.context as usize],
                    SRC[e.source as usize],
                    tag(e.tag),
                )),
                c @ Step::Cancel(_) => c,
            })
            .collect::<Vec<_>>()
    });
    let mut runner = TestRunner::new(Config {
        cases: (cases() / 10).max(1),
        failure_persistence: None,
        ..Config::default()
    });
    runner
        .run(&strategy, |program| {
            diff(
                &program,
                Engine::<u64, u64>::new(),
                ReferenceMatcher::<u64, u64>::new(),
            )
            .map_err(|d| TestCaseError::fail(d.to_string()))
        })
        .unwrap();
}
