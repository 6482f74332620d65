//! The error type shared by every provider of the verbs interface.

use std::io;

/// Everything that can go wrong in a verbs call, whatever the provider.
///
/// Failures reported by the operating system or by the provider carry the OS
/// error (`errno`) as their [`std::error::Error::source`]; use
/// [`VerbsError::os_error`] to classify them (e.g. `ENOMEM` from
/// `post_srq_ops` means "tag list full or too many outstanding list
/// operations": keep the receive in software).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum VerbsError {
    /// The provider cannot be used on this machine (e.g. `libibverbs.so.1`
    /// missing, or the soft NIC's shared memory unavailable).
    #[error("verbs provider {provider} unavailable: {reason}")]
    ProviderUnavailable {
        /// Provider name (`"ibv"`, `"soft"`).
        provider: &'static str,
        /// Human-readable reason.
        reason: String,
    },
    /// No device of that name.
    #[error("RDMA device {0:?} not found")]
    NoSuchDevice(String),
    /// A verb failed; `source` is the OS error it reported.
    #[error("{verb} failed: {source}")]
    Verb {
        /// The verb, named like its libibverbs function (`ibv_create_qp`).
        verb: &'static str,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// Posting failed at the work request with index `index` of the submitted
    /// slice (requests before it were posted, the rest were not).
    #[error("{verb} failed at work request {index}: {source}")]
    Post {
        /// `ibv_post_send`, `ibv_post_recv`, `ibv_post_srq_recv`, `ibv_post_srq_ops`.
        verb: &'static str,
        /// Index of the first request not posted.
        index: usize,
        /// The OS error (`ENOMEM`: queue/list full, `EINVAL`: bad request).
        #[source]
        source: io::Error,
    },
    /// An argument was rejected before reaching the device.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// The completion queue overran: completions were lost. The CQ (and the
    /// QPs feeding it) must be considered broken, as with `IBV_EVENT_CQ_ERR`.
    #[error("completion queue overrun (capacity {capacity})")]
    CqOverrun {
        /// Number of entries the CQ was created with.
        capacity: u32,
    },
    /// Polling the completion queue failed.
    #[error("polling the completion queue failed: {0}")]
    Poll(#[source] io::Error),
    /// Any other provider-specific failure.
    #[error("{provider}: {source}")]
    Provider {
        /// Provider name.
        provider: &'static str,
        /// The provider's own error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync + 'static>,
    },
}

impl VerbsError {
    /// A failed verb with an OS error number.
    pub fn verb(verb: &'static str, errno: i32) -> Self {
        VerbsError::Verb {
            verb,
            source: io::Error::from_raw_os_error(errno),
        }
    }

    /// A failed post at index `index` with an OS error number.
    pub fn post(verb: &'static str, index: usize, errno: i32) -> Self {
        VerbsError::Post {
            verb,
            index,
            source: io::Error::from_raw_os_error(errno),
        }
    }

    /// The OS error number behind this error, if any.
    pub fn os_error(&self) -> Option<i32> {
        match self {
            VerbsError::Verb { source, .. }
            | VerbsError::Post { source, .. }
            | VerbsError::Poll(source) => source.raw_os_error(),
            _ => None,
        }
    }

    /// True when the device/provider reported "not supported"
    /// (`EOPNOTSUPP`, `ENOSYS`, `EPROTONOSUPPORT`), e.g. a TM-SRQ on rxe.
    pub fn is_unsupported(&self) -> bool {
        matches!(
            self.os_error(),
            Some(libc::EOPNOTSUPP) | Some(libc::ENOSYS) | Some(libc::EPROTONOSUPPORT)
        )
    }

    /// True for `ENOMEM`: a queue, the tag list or the operation window is
    /// full. Transient: retry after completions were polled.
    pub fn is_full(&self) -> bool {
        self.os_error() == Some(libc::ENOMEM)
    }
}

/// Result alias of the verbs interface.
pub type Result<T, E = VerbsError> = std::result::Result<T, E>;
