//! tmpi-comm: communicators, groups and context ids.
//!
//! A communicator ([`Comm`]) is its group ([`Group`]), its context id
//! (agreed collectively over the parent, never colliding among the live
//! communicators of a process, reused after free: `cid`), its name and
//! attributes, and the collective state coll selected for it
//! ([`tmpi_coll::CollComm`], Open MPI's `c_coll`), through which every
//! collective call goes. The constructors (dup, idup, split, split_type,
//! create, create_group, the parts of inter-communicator construction:
//! [`InterContext`], [`Comm::bridge_union`]) and free live here; the
//! context-id agreement's allreduces are the one place they call
//! collectives. [`CommContext`] and [`Universe`] are the process-wide
//! state (`MPI_COMM_WORLD`, `MPI_COMM_SELF`, keyvals); [`selftest`] holds
//! the programs `coll-check` and the tests run.
//!
//! As Open MPI's `ompi/communicator` and `ompi/group`, this crate sits
//! above the collective framework (`tmpi-coll`), which knows nothing of
//! groups or context ids. See `docs/comm.md`.

#![warn(missing_docs)]

mod cid;
mod comm;
mod group;
pub mod selftest;

pub use comm::{
    Comm, CommContext, CopyFn, DeleteFn, DupStep, InterContext, PendingDup, SplitType, Universe,
    FIRST_KEYVAL,
};
pub use group::{Compare, Group};

use tmpi_base::component::ComponentRegistry;
use tmpi_base::mca::Registry;

/// The provider of this crate (for `tmpi_info` and MPI initialisation):
/// coll's provider ([`tmpi_coll::register`]) and the parameters of the
/// communicators (the context-id space, `coll_base_max_context_id`).
pub fn register(
    reg: &Registry,
    comps: &mut ComponentRegistry,
) -> Result<(), tmpi_base::error::Error> {
    tmpi_coll::register(reg, comps)?;
    cid::register_params(reg)?;
    Ok(())
}

/// [`register`] and every coll component's parameters, for a process that
/// opens its communicators after its pml (the pml reports the names
/// nobody registered): the C API and the Rust API's `tmpi::init`.
pub fn register_all_params(reg: &Registry) -> Result<(), tmpi_base::error::Error> {
    let mut comps = ComponentRegistry::new();
    register(reg, &mut comps)?;
    comps.register_params(reg)?;
    Ok(())
}
