//! The start-up of tmpi's runtime, one path for both front ends: the Rust
//! API ([`crate::init`]) and the C API (`MPI_Init`, `MPI_Init_thread` of
//! `tmpi-capi`) bring the runtime up with [`start`] and open the
//! collective framework over it with [`open_coll`].
//!
//! [`start`] registers the MCA parameters, then starts the pml with the
//! BTLs this build links (`tmpi_components::btls`). The order is the
//! point: when the pml starts it warns about every parameter set (on the
//! command line, in the environment, in a file) that no component
//! registered, so every name the process will read must be known by then:
//! the front end's own (the C API's `mpi_*`), then the coll framework's and
//! its components' (`coll`, `coll_tuned_<op>_algorithm`, ...), although
//! coll opens only after the pml, and the osc framework's (`osc`,
//! `osc_sm_priority`, ...), read when a window is made.
//!
//! What stays with each front end: its once-per-process guard and its
//! error, its own parameters and what it does with them, the thread level
//! (the C API tells the pml whether calls are serialised), when coll opens
//! (the C API at init, for `MPI_COMM_WORLD` and `MPI_COMM_SELF`; the Rust
//! API on the first call that needs it) and its handle tables.

use std::sync::Arc;

use tmpi_base::mca::Registry;
use tmpi_coll::PmlP2p;
use tmpi_comm::CommContext;
use tmpi_comm::Universe;
use tmpi_pml::{InitOptions, Pml};

use crate::error::Error;

/// Starts the runtime of this process: runs `register` on the process's
/// parameter registry (the front end's own parameters), registers coll's,
/// then wires up the pml through the launcher's PMI (a singleton job of
/// one without a launcher) with this build's BTLs. Errors keep their MPI
/// class; an error of `register` is returned as it is. Call it once per
/// process (the caller guards that).
pub fn start<E: From<Error>>(
    register: impl FnOnce(&Registry) -> Result<(), E>,
) -> Result<Arc<Pml>, E> {
    let reg = tmpi_base::mca::registry();
    register(reg)?;
    tmpi_comm::register_all_params(reg).map_err(|e| Error::new(e.class(), e.to_string()))?;
    tmpi_osc::register_all_params(reg).map_err(|e| Error::new(e.class(), e.to_string()))?;
    let pml = Pml::init(InitOptions {
        logging: true,
        btls: tmpi_components::btls(),
    })
    .map_err(Error::from)?;
    Ok(Arc::new(pml))
}

/// Opens the coll framework over a pml that [`start`] started:
/// `MPI_COMM_WORLD` and `MPI_COMM_SELF` and the context their
/// communicators share, with the components the `coll` parameters select.
/// Nodes come from the pml (the launcher's process mapping), so
/// `split_type(SHARED)` and coll's sm component follow them.
pub fn open_coll(pml: &Arc<Pml>) -> Result<Universe, Error> {
    let p2p = PmlP2p::new(Arc::clone(pml));
    Ok(CommContext::init(
        Arc::new(p2p),
        tmpi_base::mca::registry(),
    )?)
}
