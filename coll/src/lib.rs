//! tmpi-coll: the collective framework, communicators and groups.
//!
//! * [`comm`]: communicators (dup, split, split_type, create, create_group,
//!   free, compare, names, attributes) and their collective calls,
//!   blocking and non-blocking ([`comm::CollRequest`]);
//! * [`group`]: process groups;
//! * [`cid`]: context ids agreed collectively;
//! * [`framework`]: components, per-communicator modules, selection;
//! * [`component`]: `basic`, `tuned`, `sm`, `self`;
//! * [`shm`]: the shared-memory segment of `sm`;
//! * [`algo`]: the algorithm library (schedule builders);
//! * [`schedule`]: the one engine running every collective;
//! * [`op`], [`datatype`]: reduction kernels and element types;
//! * [`p2p`]: the small point-to-point trait coll needs; [`sim`] an
//!   in-process implementation for tests, [`pml_adapter`] the real one.
//!
//! See `docs/coll.md` for the design, the decision table and the limits.

#![warn(missing_docs)]

pub mod algo;
pub mod cid;
pub mod comm;
pub mod component;
pub mod cost_choice;
pub mod datatype;
pub mod direct;
mod error;
pub mod framework;
pub mod group;
pub mod op;
pub mod p2p;
pub mod pml_adapter;
pub mod pool;
pub mod reduce_copy;
pub mod schedule;
pub mod selftest;
pub mod shm;
pub mod sim;
pub mod tags;

pub use algo::{Call, CollKind};
pub use comm::{
    CollContext, CollRequest, Comm, DupStep, Input, InterContext, PendingDup, SplitType,
};
pub use datatype::Datatype;
pub use error::{CollError, Result};
pub use group::{Compare, Group};
pub use op::{Op, UserOp};
pub use p2p::{Endpoint, P2p, SharedBytes};

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
