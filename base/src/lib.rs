//! tmpi-base: MCA parameters, component registry, errors, process identity,
//! logging, and the PMI client with the modex built on it.

pub mod component;
pub mod error;
pub mod identity;
pub mod log;
pub mod mca;
pub mod modex;
pub mod pmi;
pub mod shm_sweep;
