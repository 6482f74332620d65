//! Errors of the collective framework, each mapped to an MPI error class.

use tmpi_base::error::MpiErrorClass;

/// Result type of this crate.
pub type Result<T, E = CollError> = std::result::Result<T, E>;

/// Everything that can go wrong in a collective, a communicator or group
/// operation. [`CollError::class`] gives the MPI error class.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CollError {
    /// A rank argument is outside the communicator or group.
    #[error("MPI_ERR_RANK: rank {rank} is not in 0..{size}")]
    Rank {
        /// The rank given.
        rank: i64,
        /// Size of the communicator or group.
        size: u32,
    },
    /// A root argument is outside the communicator.
    #[error("MPI_ERR_ROOT: root {root} is not in 0..{size}")]
    Root {
        /// The root given.
        root: i64,
        /// Size of the communicator.
        size: u32,
    },
    /// A count or buffer length is inconsistent with the datatype or the other arguments.
    #[error("MPI_ERR_COUNT: {0}")]
    Count(String),
    /// A buffer is too small for what the call has to store.
    #[error("MPI_ERR_BUFFER: {0}")]
    Buffer(String),
    /// The operation is not defined on the datatype (MPI-3.1 §5.9.2).
    #[error("MPI_ERR_OP: {op} is not defined on {dtype}")]
    OpType {
        /// Operation name.
        op: String,
        /// Datatype name.
        dtype: &'static str,
    },
    /// A datatype cannot be used here.
    #[error("MPI_ERR_TYPE: {0}")]
    Type(String),
    /// A message of a collective had another length than this rank expects:
    /// the ranks called the collective with different arguments.
    #[error("MPI_ERR_TRUNCATE: collective message from rank {peer}: {got} bytes where {expected} were expected (mismatched counts across ranks?)")]
    Truncate {
        /// Communicator rank that sent it.
        peer: u32,
        /// Bytes received.
        got: usize,
        /// Bytes expected.
        expected: usize,
    },
    /// The ranks made different collective calls (another operation, root
    /// or length at the same point), found by a rank that would otherwise
    /// wait forever; also every later call through the shared-memory
    /// segment of that communicator, whose rings are then out of step.
    #[error("MPI_ERR_OTHER: collective calls differ across ranks: {0}")]
    Mismatch(String),
    /// Invalid group argument (not a subset, duplicate ranks, ...).
    #[error("MPI_ERR_GROUP: {0}")]
    Group(String),
    /// Invalid communicator argument or state.
    #[error("MPI_ERR_COMM: {0}")]
    Comm(String),
    /// Invalid attribute key.
    #[error("MPI_ERR_KEYVAL: {0}")]
    Keyval(String),
    /// Any other invalid argument.
    #[error("MPI_ERR_ARG: {0}")]
    Arg(String),
    /// No context id is free on every member of the parent communicator.
    #[error("MPI_ERR_OTHER: no free context id (all {limit} ids in use on some process)")]
    NoContextId {
        /// Size of the context id space.
        limit: u32,
    },
    /// After component selection, some collective has no provider.
    #[error("MPI_ERR_OTHER: no coll component provides {function} for this communicator (selection list coll={selection})")]
    NoProvider {
        /// The collective missing (`"allreduce"`).
        function: &'static str,
        /// The selection list in force.
        selection: String,
    },
    /// The point-to-point layer reported an error.
    #[error("{}: point-to-point: {message}", class.name())]
    P2p {
        /// Its class.
        class: MpiErrorClass,
        /// Its message.
        message: String,
    },
    /// A rank this call waits for in shared memory is no longer running.
    #[error(
        "MPI_ERR_OTHER: rank {rank} (process {pid}) ended while this collective call waited for it"
    )]
    PeerGone {
        /// The rank in the communicator.
        rank: u32,
        /// Its process.
        pid: u32,
    },
    /// A rank this collective call waits for called `MPI_Finalize`.
    #[error(
        "MPI_ERR_OTHER: rank {rank} called MPI_Finalize while this collective call waited for it"
    )]
    PeerFinalized {
        /// The rank in the communicator.
        rank: u32,
    },
    /// A component or MCA configuration problem.
    #[error("{0}")]
    Config(String),
    /// An internal invariant failed (a bug).
    #[error("MPI_ERR_INTERN: {0}")]
    Intern(String),
}

impl CollError {
    /// The MPI error class reported for this error.
    pub fn class(&self) -> MpiErrorClass {
        match self {
            CollError::Rank { .. } => MpiErrorClass::Rank,
            CollError::Root { .. } => MpiErrorClass::Root,
            CollError::Count(_) => MpiErrorClass::Count,
            CollError::Buffer(_) => MpiErrorClass::Buffer,
            CollError::OpType { .. } => MpiErrorClass::Op,
            CollError::Type(_) => MpiErrorClass::Type,
            CollError::Truncate { .. } => MpiErrorClass::Truncate,
            CollError::Group(_) => MpiErrorClass::Group,
            CollError::Comm(_) => MpiErrorClass::Comm,
            CollError::Keyval(_) => MpiErrorClass::Keyval,
            CollError::Arg(_) => MpiErrorClass::Arg,
            CollError::NoContextId { .. } | CollError::NoProvider { .. } => MpiErrorClass::Other,
            CollError::P2p { class, .. } => *class,
            CollError::Config(_)
            | CollError::Mismatch(_)
            | CollError::PeerGone { .. }
            | CollError::PeerFinalized { .. } => MpiErrorClass::Other,
            CollError::Intern(_) => MpiErrorClass::Intern,
        }
    }
}

impl From<tmpi_base::mca::McaError> for CollError {
    fn from(e: tmpi_base::mca::McaError) -> Self {
        CollError::Config(e.to_string())
    }
}

impl From<tmpi_base::error::Error> for CollError {
    fn from(e: tmpi_base::error::Error) -> Self {
        match e.class() {
            MpiErrorClass::Arg => CollError::Arg(e.to_string()),
            _ => CollError::Config(e.to_string()),
        }
    }
}
