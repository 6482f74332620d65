//! Errors, error handlers and the guard every C entry point runs in.

use std::ffi::c_int;
use std::panic::{catch_unwind, AssertUnwindSafe};

pub(crate) use tmpi_base::error::MpiErrorClass;
use MpiErrorClass as C;

/// An MPI error: its class and a message naming what was wrong.
#[derive(Debug, Clone)]
pub(crate) struct Error {
    pub(crate) class: MpiErrorClass,
    /// A user error code (MPI_Add_error_code) instead of the class, if set.
    pub(crate) code: Option<c_int>,
    pub(crate) msg: String,
}

pub(crate) type Res<T> = Result<T, Error>;

impl Error {
    pub(crate) fn new(class: MpiErrorClass, msg: impl Into<String>) -> Self {
        Error {
            class,
            code: None,
            msg: msg.into(),
        }
    }
    /// The failure of a user callback (attribute copy or delete, a
    /// generalized request's): the call returns the callback's own code
    /// when it is an error class or code MPI knows (a user class from
    /// `MPI_Add_error_class` included), else `MPI_ERR_OTHER`.
    pub(crate) fn callback(rc: c_int, msg: impl Into<String>) -> Self {
        let known = class_of(rc).is_some() && rc != 0;
        Error {
            class: MpiErrorClass::from_raw(rc)
                .filter(|_| known)
                .unwrap_or(MpiErrorClass::Other),
            code: known.then_some(rc),
            msg: msg.into(),
        }
    }
    fn code(&self) -> c_int {
        self.code.unwrap_or(self.class as c_int)
    }
}

impl From<tmpi_pml::PmlError> for Error {
    fn from(e: tmpi_pml::PmlError) -> Self {
        Error::new(e.class(), e.to_string())
    }
}

impl From<tmpi_coll::CollError> for Error {
    fn from(e: tmpi_coll::CollError) -> Self {
        Error::new(e.class(), e.to_string())
    }
}

/// The runtime's start-up errors (`tmpi::runtime`): their class and
/// message as they are.
impl From<tmpi::Error> for Error {
    fn from(e: tmpi::Error) -> Self {
        Error::new(e.class(), e.message())
    }
}

/// `MPI_ERRORS_ARE_FATAL`.
pub(crate) const ERRORS_ARE_FATAL: c_int = 1;
/// `MPI_ERRORS_RETURN`.
pub(crate) const ERRORS_RETURN: c_int = 2;
/// `MPI_ERRORS_ABORT` (MPI-4.0): aborts the processes of the
/// communicator; tmpi's `MPI_Abort` ends the whole job, so it acts as
/// `MPI_ERRORS_ARE_FATAL`.
pub(crate) const ERRORS_ABORT: c_int = 3;

/// Runs the body of the MPI call `name` whose errors are reported on
/// communicator `comm` (`MPI_COMM_WORLD` when the call has none): catches
/// panics (`MPI_ERR_INTERN`), invokes the communicator's error handler and
/// returns the error code.
pub(crate) fn guard(name: &'static str, comm: c_int, f: impl FnOnce() -> Res<()>) -> c_int {
    if let Err(e) = crate::state::callable(name) {
        return raise(name, comm, e);
    }
    match catching(f) {
        Ok(()) => 0,
        Err(e) => raise(name, comm, e),
    }
}

/// Runs `f`, turning a panic into `MPI_ERR_INTERN` with its message.
pub(crate) fn catching(f: impl FnOnce() -> Res<()>) -> Res<()> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(p) => {
            let what = p
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| p.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".into());
            Err(Error::new(
                C::Intern,
                format!("internal error (panic): {what}"),
            ))
        }
    }
}

/// Like [`guard`] for calls that return a value instead of an error code
/// (`MPI_Wtime`, `*_c2f`): a panic gives `fallback`.
pub(crate) fn guard_value<T>(fallback: T, f: impl FnOnce() -> T) -> T {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or(fallback)
}

/// Handles error `e` of call `name` on `comm` and returns its code.
pub(crate) fn raise(name: &str, comm: c_int, e: Error) -> c_int {
    let code = e.code();
    tracing::debug!(target: "capi", "{name}: {} ({})", e.msg, e.class.name());
    let handler = crate::state::errhandler_of(comm);
    match handler {
        Handler::Return => {}
        Handler::Fatal => fatal(name, &e),
        Handler::User(f) => {
            crate::ffi::call_errhandler(f, comm, code);
        }
    }
    code
}

/// What an error handler does.
#[derive(Clone, Copy)]
pub(crate) enum Handler {
    Fatal,
    Return,
    User(crate::ErrFn),
}

/// `MPI_ERRORS_ARE_FATAL`: ends the job through the launcher.
pub(crate) fn fatal(name: &str, e: &Error) -> ! {
    let rank = crate::state::world_rank();
    let msg = format!(
        "{name}: {} ({}: {}) on rank {rank}; MPI_ERRORS_ARE_FATAL: the job is aborted",
        e.msg,
        e.class.name(),
        e.class.message()
    );
    crate::env::abort_job(1, &msg)
}

/// The class of an error code (user codes map to their class).
pub(crate) fn class_of(code: c_int) -> Option<c_int> {
    if MpiErrorClass::from_raw(code).is_some() {
        return Some(code);
    }
    crate::state::user_code_class(code)
}

/// The text of an error code.
pub(crate) fn string_of(code: c_int) -> Option<String> {
    if let Some(s) = crate::state::user_code_string(code) {
        return Some(s);
    }
    MpiErrorClass::from_raw(code).map(|c| format!("{}: {}", c.name(), c.message()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panic_becomes_mpi_err_intern() {
        let e = catching(|| panic!("boom {}", 42)).unwrap_err();
        assert_eq!(e.class, C::Intern);
        assert!(e.msg.contains("boom 42"), "{}", e.msg);
        assert!(catching(|| Ok(())).is_ok());
        let e = catching(|| Err(Error::new(C::Rank, "r"))).unwrap_err();
        assert_eq!(e.class, C::Rank);
    }
}
