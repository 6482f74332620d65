//! tmpi-verbs: a safe verbs layer with two providers behind one interface.
//!
//! - [`api`]: the provider-neutral interface ([`Provider`] and the object
//!   traits), plain types, [`VerbsError`], and the TM wire headers
//!   ([`wire`]).
//! - [`ibv`]: the libibverbs provider (loaded at run time).
//! - [`soft`]: the soft NIC `tmsoft0`, a software RDMA device with hardware
//!   tag-matching semantics across processes of one host, and its
//!   deterministic tag-matching core [`soft::tm::TmListModel`].
//!
//! Logging goes through `tracing` with target `verbs`.

pub mod api;
pub mod ibv;
pub mod soft;

pub use api::wire;
pub use api::*;
