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
