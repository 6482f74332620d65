//! The error type of the Rust API.

use tmpi_pml::{MpiErrorClass, PmlError};

use crate::request::Status;

/// An MPI error: its class, a message, and for completed operations that
/// failed (truncation) the status.
///
/// Shown as `MPI_ERR_<CLASS>: message` (the class once, also when the
/// message of a lower layer starts with it). `Debug` shows the same words,
/// so that a `main` returning `Result<(), tmpi::Error>` prints a plain
/// line, not the struct.
#[derive(Clone)]
pub struct Error {
    class: MpiErrorClass,
    message: String,
    status: Option<Status>,
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let name = self.class.name();
        if self
            .message
            .strip_prefix(name)
            .is_some_and(|rest| rest.starts_with(": "))
        {
            f.write_str(&self.message)
        } else {
            write!(f, "{name}: {}", self.message)
        }
    }
}

impl std::fmt::Debug for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(self, f)
    }
}

impl std::error::Error for Error {}

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
    /// What went wrong, without the class (which `Display` puts first).
    pub fn message(&self) -> &str {
        &self.message
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_class_is_named_once_in_plain_words() {
        let e = Error::new(MpiErrorClass::Other, "MPI_ERR_OTHER: rank 1 ended");
        assert_eq!(e.to_string(), "MPI_ERR_OTHER: rank 1 ended");
        assert_eq!(format!("{e:?}"), "MPI_ERR_OTHER: rank 1 ended");
        let e = Error::new(MpiErrorClass::Other, "rank 1 ended");
        assert_eq!(e.to_string(), "MPI_ERR_OTHER: rank 1 ended");
        let e = Error::new(MpiErrorClass::Other, "MPI_ERR_OTHERWISE");
        assert_eq!(e.to_string(), "MPI_ERR_OTHER: MPI_ERR_OTHERWISE");
    }
}
