//! The coll components: `basic`, `tuned`, `sm` and `self`.

pub mod basic;
pub mod self_;
pub mod sm;
pub mod tuned;
