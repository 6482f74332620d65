//! tmpi-coll: the collective framework, communicators and groups.
//!
//! The public surface is what callers need: [`Comm`] (communicators:
//! dup, split, split_type, create, create_group, free, compare, names,
//! attributes, and their collective calls, blocking and non-blocking
//! through [`CollRequest`]), [`Group`], [`CollContext`] and [`Universe`]
//! (the process-wide state), the element types and reduction operations
//! ([`Datatype`], [`Op`], [`UserOp`]), the point-to-point trait coll runs
//! on ([`P2p`]) with its pml implementation ([`PmlP2p`]), and for tests
//! the in-process transport [`sim`] and the [`selftest`] programs.
//!
//! Inside (private modules): communicators (`comm`), groups (`group`),
//! context ids agreed collectively (`cid`), the framework with its
//! components and per-communicator selection (`framework`, `component`:
//! `basic`, `tuned`, `sm`, `self`), the shared-memory segment of `sm`
//! (`shm`), the algorithm library (`algo`) and the one engine that runs
//! every collective (`schedule`), reduction kernels and element types
//! (`op`, `datatype`).
//!
//! See `docs/coll.md` for the design, the decision table and the limits.

#![warn(missing_docs)]

mod algo;
mod cid;
mod comm;
mod component;
mod cost_choice;
mod datatype;
mod direct;
mod error;
mod framework;
mod group;
mod op;
mod p2p;
mod pml_adapter;
mod pool;
mod reduce_copy;
mod schedule;
pub mod selftest;
mod shm;
pub mod sim;
mod tags;

pub use algo::{Call, CollKind, Pos};
pub use comm::{
    CollContext, CollRequest, Comm, DupStep, Input, InterContext, PendingDup, SplitType,
};
pub use datatype::Datatype;
pub use error::{CollError, Result};
pub use group::{Compare, Group};
pub use op::{Op, UserOp};
pub use p2p::{Endpoint, P2p, SharedBytes};
pub use pml_adapter::PmlP2p;

pub use comm::Universe;
pub use datatype::TypeClass;

/// The blocking collectives `sm` runs on its segment.
pub use component::sm::KINDS as SM_KINDS;
/// The algorithms `tuned` offers for `kind` (`coll_tuned_<kind>_algorithm`
/// values 1..=n; 0 lets it choose).
pub use component::tuned::algorithms as tuned_algorithms;
/// Reductions whose root copied alone since the process started
/// (diagnostics: `coll-check`).
pub use reduce_copy::calls_alone as reduce_copy_calls_alone;

use tmpi_base::component::ComponentRegistry;
use tmpi_base::mca::Registry;

/// The provider of this crate (for `tmpi_info` and MPI initialisation):
/// adds the coll components and registers the framework's parameters.
pub fn register(
    reg: &Registry,
    comps: &mut ComponentRegistry,
) -> Result<(), tmpi_base::error::Error> {
    for d in framework::descriptors() {
        comps.add(d)?;
    }
    register_selection(reg)?;
    reg.register_verbose("coll", "base")?;
    cid::register_params(reg)?;
    Ok(())
}

/// Registers the selection list `coll` (one spec for the provider and
/// [`CollFramework::open`](framework::CollFramework::open)).
pub(crate) fn register_selection(
    reg: &Registry,
) -> Result<tmpi_base::mca::Param<tmpi_base::mca::SelectionList>, tmpi_base::mca::McaError> {
    reg.register_selection(
        "coll",
        "Collective components to use (`basic,tuned,sm,self` or `^sm`); \
         priorities decide among the allowed ones",
    )
}

/// [`register`] and every component's parameters, for a process that opens
/// coll after its pml (the pml reports the names nobody registered, so
/// `--mca coll_sm_max ...` must be known by then): the C API and the Rust
/// API's `tmpi::init`.
pub fn register_all_params(reg: &Registry) -> Result<(), tmpi_base::error::Error> {
    let mut comps = ComponentRegistry::new();
    register(reg, &mut comps)?;
    comps.register_params(reg)?;
    Ok(())
}
