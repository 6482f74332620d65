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
