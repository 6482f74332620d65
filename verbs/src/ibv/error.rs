//! The error type of the libibverbs provider.

use std::io;

/// Everything that can go wrong in the libibverbs layer.
///
/// Failures of a verb carry the OS error (`errno` or the verb's return code)
/// as their [`std::error::Error::source`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum IbvError {
    /// `libibverbs.so.1` (or the library named by `TMPI_VERBS_LIBIBVERBS`)
    /// could not be loaded: rdma-core is not installed.
    #[error("libibverbs not found: cannot load {name}: {reason}")]
    LibraryNotFound {
        /// The library name passed to the dynamic loader.
        name: String,
        /// The dynamic loader's message.
        reason: String,
    },
    /// The library loaded but lacks a symbol tmpi needs (too old a rdma-core).
    #[error("libibverbs {name} lacks symbol {symbol} (rdma-core too old?): {reason}")]
    MissingSymbol {
        /// The library name.
        name: String,
        /// The missing symbol.
        symbol: &'static str,
        /// The dynamic loader's message.
        reason: String,
    },
    /// The bindings were generated for x86_64 Linux; other targets cannot use them.
    #[error("the libibverbs provider is only built for x86_64 Linux")]
    UnsupportedPlatform,
    /// No RDMA device of that name.
    #[error("RDMA device {0:?} not found")]
    NoSuchDevice(String),
    /// A verb failed; `source` is the OS error it reported.
    #[error("{verb} failed: {source}")]
    Verb {
        /// The libibverbs call, e.g. `ibv_create_qp`.
        verb: &'static str,
        /// The OS error (errno or returned code).
        #[source]
        source: io::Error,
    },
    /// Posting a chain of work requests failed at the request with index `index`
    /// (requests before it were posted, the rest were not).
    #[error("{verb} failed at work request {index}: {source}")]
    Post {
        /// `ibv_post_send`, `ibv_post_recv`, `ibv_post_srq_recv` or `ibv_post_srq_ops`.
        verb: &'static str,
        /// Index in the submitted slice of the first request not posted.
        index: usize,
        /// The OS error returned by the provider.
        #[source]
        source: io::Error,
    },
    /// An argument was rejected before reaching libibverbs.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// The completion queue reported an error while polling.
    #[error("polling the completion queue failed: {0}")]
    Poll(#[source] io::Error),
}

impl IbvError {
    /// The OS error number behind this error, if there is one.
    pub fn os_error(&self) -> Option<i32> {
        match self {
            IbvError::Verb { source, .. }
            | IbvError::Post { source, .. }
            | IbvError::Poll(source) => source.raw_os_error(),
            _ => None,
        }
    }

    /// True when the provider reported that the operation is not supported
    /// (`EOPNOTSUPP`, `ENOSYS` or `EPROTONOSUPPORT`), e.g. tag matching on rxe.
    pub fn is_unsupported(&self) -> bool {
        matches!(
            self.os_error(),
            Some(libc::EOPNOTSUPP) | Some(libc::ENOSYS) | Some(libc::EPROTONOSUPPORT)
        )
    }

    /// True when libibverbs itself is missing.
    pub fn is_library_missing(&self) -> bool {
        matches!(self, IbvError::LibraryNotFound { .. })
    }

    /// A failed verb whose error number is in `errno` (for calls returning NULL / -1).
    pub(crate) fn errno(verb: &'static str) -> Self {
        let source = io::Error::last_os_error();
        // A provider that fails without setting errno must not look like success.
        let source = match source.raw_os_error() {
            Some(0) | None => io::Error::from_raw_os_error(libc::EIO),
            _ => source,
        };
        IbvError::Verb { verb, source }
    }

    /// A failed verb that returned its error number (rdma-core's `int` verbs).
    pub(crate) fn code(verb: &'static str, rc: i32) -> Self {
        // Some verbs return -1 and set errno, others return the positive errno.
        let source = if rc < 0 {
            let e = io::Error::last_os_error();
            match e.raw_os_error() {
                Some(0) | None => io::Error::from_raw_os_error(libc::EIO),
                _ => e,
            }
        } else {
            io::Error::from_raw_os_error(rc)
        };
        IbvError::Verb { verb, source }
    }
}

/// Result alias of the libibverbs provider.
pub type Result<T, E = IbvError> = std::result::Result<T, E>;
