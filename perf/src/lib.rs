//! # tmpi-perf: benchmarks of tmpi's matching engine
//!
//! * [`list::ListMatcher`]: the comparison point, organised like Open MPI's ob1 (linear lists).
//! * [`workload`]: the four workloads (`specific`, `unexpected`, `any_source10`, `any_tag10`),
//!   shared by the criterion benches (`cargo bench -p tmpi-perf`) and the `matchbench` binary.
//! * [`measure`]: alternating, median-of-samples timing used by `matchbench`.
//!
//! Results and how to reproduce them: `docs/matching.md`.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod list;
pub mod measure;
pub mod workload;
