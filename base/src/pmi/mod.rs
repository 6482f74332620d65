//! PMI client (PMI-1 "simple" and PMI-2 wire protocols) and the modex on it.
//!
//! * [`PmiClient`]: connects to the launcher named by the environment
//!   (`PMI_FD`), or runs as a singleton job of one; put/fence/get, job
//!   attributes, abort, finalize, and [`PmiClient::process_info`].
//! * [`PmiModex`]: the [`crate::modex::Modex`] over a client (binary values
//!   of any length, encoded and split).
//! * [`wire`]: the PMI-1/PMI-2 codecs, shared with the server in `tmpi-run`.
//! * [`mapping`]: the `PMI_process_mapping` decoder and encoder.
//! * PMIx: [`PmiClient`] also speaks PMIx through the reference library
//!   (`libpmix.so.2`, loaded at run time) when a PMIx server started the
//!   process (Open MPI's `mpirun`, `srun --mpi=pmix`); `pmix_sys` holds
//!   its FFI.
//!
//! `reference/pmi.md` describes the protocols and the peers' quirks.

mod client;
mod fd;
pub use fd::abort_fd;
pub mod mapping;
mod modex;
mod pmix_sys;
pub use pmix_sys::{
    abort_job as pmix_abort, is_live as pmix_live, LIBRARY_ENV as PMIX_LIBRARY_ENV,
};
pub mod wire;

pub use client::{
    hostname, job_appnum, register_client, ConnectOptions, PmiClient, PmiError, PmiVersion,
    CLIENT_CHOICES, CLIENT_ENV, ENV_VARS, MAX_JOB_SIZE,
};
pub use mapping::{encode_process_mapping, parse_process_mapping, MappingError};
pub use modex::{PmiModex, MODEX_KEY_MAX};
pub use wire::{
    decode_abort_text, encode_abort_text, format_v1_line, format_v2_frame, parse_v1_line,
    parse_v2_frame, Message, WireError, ABORT_TEXT_KEY,
};
