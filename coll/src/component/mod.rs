//! The coll components: `basic`, `tuned` and `self`.

pub mod basic;
pub mod self_;
pub mod tuned;
