//! The modex: processes publish their addresses (shared-memory segment
//! names, QP numbers, TCP ports) under keys, wait for everyone at a fence,
//! then read their peers' values.
//!
//! Components program against the [`Modex`] trait; the PMI-backed
//! implementation lives with the PMI client (see [`crate::pmi`]), and tests
//! may supply their own.

/// Errors of the modex.
#[derive(Debug, thiserror::Error)]
pub enum ModexError {
    /// The peer never published the key (or published it after the fence).
    #[error("modex: rank {rank} published no value under key {key:?}")]
    NotFound { rank: u32, key: String },
    /// The key is not usable (empty, too long, or contains reserved characters).
    #[error("modex: invalid key {key:?}: {reason}")]
    InvalidKey { key: String, reason: String },
    /// A stored value could not be decoded (corrupt or foreign data).
    #[error("modex: value of key {key:?} from rank {rank} is malformed: {reason}")]
    Malformed {
        rank: u32,
        key: String,
        reason: String,
    },
    /// The transport underneath (PMI) failed.
    #[error("modex: {0}")]
    Transport(String),
}

/// Publish/fence/read exchange of binary values between the processes of a job.
///
/// Keys are short ASCII names chosen by components (`"btl.sm.seg"`); the
/// implementation namespaces them per rank. Values are arbitrary bytes of any
/// length: implementations encode and split them as their transport needs.
pub trait Modex {
    /// Publishes `value` under `key` for this process. Visible to peers after
    /// the next [`Modex::fence`].
    fn put(&mut self, key: &str, value: &[u8]) -> Result<(), ModexError>;
    /// Collective over the whole job: returns once every process has fenced,
    /// after which every value put before the fence is readable.
    fn fence(&mut self) -> Result<(), ModexError>;
    /// Reads the value that `rank` published under `key`.
    fn get(&mut self, rank: u32, key: &str) -> Result<Vec<u8>, ModexError>;
}
