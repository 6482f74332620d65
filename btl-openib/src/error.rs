//! The error type of btl-openib.

use tmpi_verbs::wire::WireError;
use tmpi_verbs::{VerbsError, WcStatus};

/// Everything that can go wrong in btl-openib.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OpenibError {
    /// The component cannot run here (no libibverbs, no device, no active
    /// port); the reason is one line for `tmpi_info` and the log.
    #[error("btl openib unavailable: {0}")]
    Unavailable(String),
    /// A parameter value is invalid or inconsistent.
    #[error("btl openib configuration: {0}")]
    Config(String),
    /// A verbs call failed.
    #[error(transparent)]
    Verbs(#[from] VerbsError),
    /// The modex failed or a peer's address is malformed.
    #[error(transparent)]
    Modex(#[from] tmpi_base::modex::ModexError),
    /// The peer is not reachable through this module.
    #[error("rank {0} is not reachable through this openib module")]
    Unreachable(u32),
    /// Out of send resources right now (send buffers or send queue): retry
    /// after progress.
    #[error("openib send resources exhausted; retry after progress")]
    Busy,
    /// The message is larger than this path allows.
    #[error("message of {len} bytes exceeds the limit of {limit} bytes")]
    TooLarge {
        /// Requested length.
        len: usize,
        /// The limit.
        limit: usize,
    },
    /// A received header is malformed.
    #[error("malformed message from the wire: {0}")]
    Wire(#[from] WireError),
    /// Tag matching is not active on this module.
    #[error("hardware tag matching is not enabled on this module")]
    NoTagMatching,
    /// A rendezvous with the same (peer, tag, app_ctx) is already waiting
    /// for its FIN.
    #[error(
        "rendezvous to rank {peer} with tag {tag:#x} and app_ctx {app_ctx} already outstanding"
    )]
    DuplicateRendezvous {
        /// Peer rank.
        peer: u32,
        /// TMH tag.
        tag: u64,
        /// TMH app_ctx.
        app_ctx: u32,
    },
    /// An operation completed with an error status (see the log line for the
    /// work request).
    #[error("{what} to/from rank {peer} failed with completion status {status:?}")]
    Completion {
        /// What failed (`"eager send"`, `"rendezvous read"`, ...).
        what: &'static str,
        /// Peer rank (`u32::MAX` when unknown).
        peer: u32,
        /// The completion status.
        status: WcStatus,
    },
    /// The connection to the peer is broken (an earlier completion error put
    /// its QP in the error state).
    #[error("connection to rank {0} is broken")]
    PeerFailed(u32),
    /// An argument was rejected.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
}

impl OpenibError {
    /// The MPI error class this error maps to (`MPI_ERR_OTHER` for
    /// resource and transport failures, `MPI_ERR_ARG`/`MPI_ERR_TAG` for
    /// arguments).
    pub fn mpi_class(&self) -> tmpi_base::error::MpiErrorClass {
        use tmpi_base::error::MpiErrorClass as C;
        match self {
            OpenibError::InvalidArgument(_) | OpenibError::Config(_) => C::Arg,
            OpenibError::TooLarge { .. } => C::Truncate,
            // A message longer than the posted (tagged) buffer.
            OpenibError::Completion {
                status: WcStatus::LocLenErr,
                ..
            } => C::Truncate,
            _ => C::Other,
        }
    }
}

/// Result alias of btl-openib.
pub type Result<T, E = OpenibError> = std::result::Result<T, E>;
