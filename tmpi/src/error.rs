//! The error type of the Rust API.

use tmpi_pml::{MpiErrorClass, PmlError};

use crate::request::Status;

/// An MPI error: its class, a message, and for completed operations that
/// failed (truncation) the status.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{}: {message}", class.name())]
pub struct Error {
    class: MpiErrorClass,
    message: String,
    status: Option<Status>,
}

impl Error {
    /// A new error.
    pub fn new(class: MpiErrorClass, message: impl Into<String>) -> Self {
        Error {
            class,
            message: message.into(),
            status: None,
        }
    }
    /// The MPI error class.
    pub fn class(&self) -> MpiErrorClass {
        self.class
    }
    /// The status of the failed operation, when it completed (truncation).
    pub fn status(&self) -> Option<&Status> {
        self.status.as_ref()
    }
    pub(crate) fn with_status(mut self, s: Status) -> Self {
        self.status = Some(s);
        self
    }
}

impl From<PmlError> for Error {
    fn from(e: PmlError) -> Self {
        Error::new(e.class(), e.to_string())
    }
}

/// Turns a completed pml status into the API's result.
pub(crate) fn check(s: tmpi_pml::Status) -> Result<Status, Error> {
    let st = Status::from(s);
    if s.error != MpiErrorClass::Success {
        let msg = match s.error {
            MpiErrorClass::Truncate => format!(
                "message from rank {} tag {} longer than the receive buffer ({} bytes written)",
                s.source, s.tag, s.count
            ),
            c => c.message().to_string(),
        };
        return Err(Error::new(s.error, msg).with_status(st));
    }
    Ok(st)
}
