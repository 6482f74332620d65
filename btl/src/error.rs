//! The error type of the BTL framework.

use tmpi_base::modex::ModexError;

/// Errors of BTL operations. Transport-neutral: every BTL maps its own
/// failures onto these.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BtlError {
    /// Out of resources for now (full FIFO, no free fragment, flow control):
    /// nothing happened; retry after a progress call.
    #[error("BTL resources exhausted for now; retry after progress")]
    WouldBlock,
    /// The component cannot run in this process (init only).
    #[error("BTL component unavailable: {0}")]
    Unavailable(String),
    /// The peer was not added to (or is not reachable by) this module.
    #[error("peer {0} is not reachable by this BTL")]
    Unreachable(u32),
    /// The fragment exceeds the module's maximum send size.
    #[error("fragment of {len} bytes exceeds the BTL's maximum of {max}")]
    TooLarge {
        /// Requested bytes.
        len: usize,
        /// Module maximum.
        max: usize,
    },
    /// A get/put outside the remote region.
    #[error(
        "access of {len} bytes at offset {offset} is outside the region of {region_len} bytes"
    )]
    OutOfBounds {
        /// Offset within the region.
        offset: u64,
        /// Bytes requested.
        len: usize,
        /// Length of the region.
        region_len: u64,
    },
    /// The region descriptor is malformed, stale, or belongs to another
    /// process than the peer named.
    #[error("invalid remote region: {0}")]
    BadRegion(String),
    /// The operating system refused the single-copy access (e.g. `EPERM`
    /// from `process_vm_readv` under Yama ptrace restrictions). The caller
    /// should fall back to a copy protocol.
    #[error("single-copy access to peer {peer} denied: {source}")]
    GetDenied {
        /// Peer world rank.
        peer: u32,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The module does not implement this operation.
    #[error("operation {0} not supported by this BTL")]
    Unsupported(&'static str),
    /// An operating-system call failed.
    #[error("{op}: {source}")]
    Io {
        /// What was attempted (`"mmap /dev/shm/tmpi-sm.j.0"`).
        op: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// Address exchange failed.
    #[error(transparent)]
    Modex(#[from] ModexError),
    /// A configuration value is invalid.
    #[error("invalid BTL configuration: {0}")]
    Config(String),
    /// A peer's shared data is inconsistent (wrong magic, corrupt header).
    #[error("protocol error with peer {peer}: {reason}")]
    Protocol {
        /// Peer world rank.
        peer: u32,
        /// What is wrong.
        reason: String,
    },
    /// The module was finalized.
    #[error("BTL module already finalized")]
    Finalized,
}

impl BtlError {
    /// Whether the operation should simply be retried later.
    pub fn is_retryable(&self) -> bool {
        matches!(self, BtlError::WouldBlock)
    }

    /// Shorthand for [`BtlError::Io`].
    pub fn io(op: impl Into<String>, source: std::io::Error) -> BtlError {
        BtlError::Io {
            op: op.into(),
            source,
        }
    }
}
