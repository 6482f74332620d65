//! tmpi-pml: MPI point-to-point (the ob1 design of Open MPI) over the BTLs.
//!
//! * `hdr`: wire headers (parsed forms + checked decoder, fuzzable).
//! * [`tag`]: the match header on a tag-matching NIC (the envelope packed
//!   into the NIC's 64-bit tag, wildcard masks).
//! * [`matching`]: the single matching call site ([`matching::MatchPoint`])
//!   over `tmpi-tm-engine`.
//! * `core`: the protocol state machine, I/O-free, in files by job as
//!   ob1 has them: send requests, receive requests, incoming fragments, the
//!   offload path's input, the fast path.
//! * `comm`: communicator records (context id + rank table).
//! * [`Pml`] (module `pml`, files by job): the driver: BTL selection per
//!   peer, progress, waiting, the lock, init and finalize.
//! * `net`: the transport over the BTL modules the top layer gives the pml
//!   (`InitOptions::btls`), through the `tmpi-btl` interface only; a
//!   module's NIC tag list is its optional `TagOffload` capability, whose
//!   events `tm_input` turns into the offload path's inputs.
//!
//! `docs/pml.md` describes the protocols and why they are built so;
//! measurements are in `docs/report/` and `docs/journal/`.

mod comm;
pub mod convertor;
mod core;
mod hdr;
mod init;
pub mod matching;
mod net;
mod offload;
mod pml;
pub mod raw;
mod region;
mod request;
pub mod tag;
mod tm_input;
pub mod transport;

pub use crate::core::{Limits, Stats};
pub use comm::{CommRecord, CTX_FIRST_FREE, CTX_SELF, CTX_WORLD};
pub use init::{params, register, PmlParams};
pub use pml::{status_error, InitOptions, Pml, RdmaAtomic, RdmaKeys, RdmaToken};
pub use request::{
    MessageId, ReqId, SendMode, Status, ANY_SOURCE, ANY_TAG, BSEND_OVERHEAD, PROC_NULL, TAG_UB,
};
pub use tmpi_base::error::MpiErrorClass;

/// Errors of the pml; each maps to an MPI error class ([`PmlError::class`]).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PmlError {
    /// No communicator with this context id.
    #[error("invalid communicator (context id {0})")]
    Comm(u32),
    /// Rank outside the communicator.
    #[error("invalid rank {0}")]
    Rank(i32),
    /// Tag outside `0..=TAG_UB` (or a wildcard where none is allowed).
    #[error("invalid tag {0}")]
    Tag(i32),
    /// Unknown, stale or already released request.
    #[error("invalid request")]
    Request,
    /// Bad buffered-send buffer state.
    #[error("buffer: {0}")]
    Buffer(String),
    /// Bad argument.
    #[error("invalid argument: {0}")]
    Arg(String),
    /// Out of resources.
    #[error("out of resources: {0}")]
    NoMem(String),
    /// A received message was longer than the buffer.
    #[error("message truncated: {0} bytes written")]
    Truncate(usize),
    /// Transport failure.
    #[error("transport: {0}")]
    Transport(String),
    /// Start-up or shut-down failure in the layers below.
    #[error(transparent)]
    Base(#[from] tmpi_base::error::Error),
    /// The operation is not supported by this implementation.
    #[error("unsupported: {0}")]
    Unsupported(String),
}

impl PmlError {
    /// The MPI error class.
    pub fn class(&self) -> MpiErrorClass {
        match self {
            PmlError::Comm(_) => MpiErrorClass::Comm,
            PmlError::Rank(_) => MpiErrorClass::Rank,
            PmlError::Tag(_) => MpiErrorClass::Tag,
            PmlError::Request => MpiErrorClass::Request,
            PmlError::Buffer(_) => MpiErrorClass::Buffer,
            PmlError::Arg(_) => MpiErrorClass::Arg,
            PmlError::NoMem(_) => MpiErrorClass::NoMem,
            PmlError::Truncate(_) => MpiErrorClass::Truncate,
            PmlError::Transport(_) => MpiErrorClass::Other,
            PmlError::Base(e) => e.class(),
            PmlError::Unsupported(_) => MpiErrorClass::UnsupportedOperation,
        }
    }
}
