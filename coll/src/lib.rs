//! tmpi-coll: the collective framework.
//!
//! The public surface is what callers need: [`CollComm`] (the collective
//! state of one communicator, Open MPI's `c_coll`, with the collective
//! calls, blocking and non-blocking through [`CollRequest`]),
//! [`CollContext`] (the process-wide state: transport, framework,
//! outstanding non-blocking collectives), the element types and reduction
//! operations ([`Datatype`], [`Op`], [`UserOp`]), the point-to-point trait
//! coll runs on ([`P2p`]) with its pml implementation ([`PmlP2p`]), and for
//! tests the in-process transport [`sim`].
//!
//! Communicators, groups and context ids are not here: the `tmpi-comm`
//! crate above this one holds them, each communicator with the
//! [`CollComm`] this crate selects for it.
//!
//! Inside (private modules): the collective state (`coll_comm`), the
//! framework with its components and per-communicator selection
//! (`framework`, `component`: `basic`, `tuned`, `sm`, `self`), the
//! shared-memory segment of `sm` (`shm`), the algorithm library (`algo`)
//! and the one engine that runs every collective (`schedule`), reduction
//! kernels and element types (`op`, `datatype`), the internal tag space
//! (`tags`).
//!
//! See `docs/coll.md` for the design, the decision table and the limits.

#![warn(missing_docs)]

mod algo;
mod coll_comm;
mod component;
mod cost_choice;
mod datatype;
mod direct;
mod error;
mod framework;
mod op;
mod p2p;
mod pml_adapter;
mod pool;
mod reduce_copy;
mod schedule;
mod shm;
pub mod sim;
mod tags;

pub use algo::{Call, CollKind, Pos};
pub use coll_comm::{CollComm, CollContext, CollRequest, Input};
pub use datatype::Datatype;
pub use error::{CollError, Result};
pub use op::{Op, UserOp};
pub use p2p::{Done, Endpoint, P2p, P2pHandle, SharedBytes};
pub use pml_adapter::PmlP2p;

pub use datatype::TypeClass;
pub use tags::TagSpace;

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
