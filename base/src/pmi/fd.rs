//! Adopting the inherited `PMI_FD` descriptor: the only `unsafe` of the PMI
//! client.

use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};

/// Set once the descriptor named by `PMI_FD` has been adopted, so that two
/// owners can never close the same descriptor.
static ADOPTED: AtomicBool = AtomicBool::new(false);

/// The descriptor of the adopted PMI connection while the client holds it
/// open (-1 otherwise): [`abort_fd`].
static LIVE_FD: AtomicI32 = AtomicI32::new(-1);

/// Records `fd` as the live PMI connection ([`abort_fd`]).
pub(crate) fn set_live_fd(fd: RawFd) {
    LIVE_FD.store(fd, Ordering::Release);
}

/// Forgets `fd` as the live PMI connection (it is being closed).
pub(crate) fn clear_live_fd(fd: RawFd) {
    let _ = LIVE_FD.compare_exchange(fd, -1, Ordering::AcqRel, Ordering::Acquire);
}

/// The descriptor of this process's PMI connection inherited through
/// `PMI_FD` (not `PMI_FD`'s number: it is moved to a close-on-exec
/// duplicate when adopted) while the PMI client holds it open, for a last
/// `abort` line written from code that cannot reach the client (the C
/// interface's `MPI_Abort`). `None` before init and after finalize.
pub fn abort_fd() -> Option<RawFd> {
    let fd = LIVE_FD.load(Ordering::Acquire);
    (fd >= 0).then_some(fd)
}

/// Why the inherited descriptor cannot be used.
#[derive(Debug, thiserror::Error)]
pub(crate) enum AdoptError {
    #[error("descriptor {0} is not open in this process")]
    NotOpen(RawFd),
    #[error("descriptor {fd} is not a socket (it is {target:?})")]
    NotSocket { fd: RawFd, target: String },
    #[error("the PMI descriptor was already taken by an earlier connect")]
    AlreadyAdopted,
    #[error("duplicating descriptor {fd}: {source}")]
    Dup { fd: RawFd, source: std::io::Error },
}

/// Takes ownership of the socket `fd` inherited from the launcher and
/// returns it as a stream whose descriptor is close-on-exec (a duplicate
/// made with `F_DUPFD_CLOEXEC`; the inherited number is closed), so that
/// programs the rank starts do not inherit the PMI connection.
///
/// At most once per process: a second call fails with `AlreadyAdopted`.
pub(crate) fn adopt_pmi_fd(fd: RawFd) -> Result<UnixStream, AdoptError> {
    if fd < 0 {
        return Err(AdoptError::NotOpen(fd));
    }
    let target =
        std::fs::read_link(format!("/proc/self/fd/{fd}")).map_err(|_| AdoptError::NotOpen(fd))?;
    let target = target.to_string_lossy().into_owned();
    if !target.starts_with("socket:") {
        return Err(AdoptError::NotSocket { fd, target });
    }
    if ADOPTED.swap(true, Ordering::AcqRel) {
        return Err(AdoptError::AlreadyAdopted);
    }
    // SAFETY: `fd` is open in this process and refers to a socket (checked
    // through /proc just above), it was handed to this process by the
    // launcher through PMI_FD for the PMI client's exclusive use, and the
    // ADOPTED flag guarantees that no other OwnedFd in this process is made
    // from it by this module; nothing else in tmpi touches PMI_FD.
    let owned = unsafe { OwnedFd::from_raw_fd(fd) };
    let inherited = UnixStream::from(owned);
    let stream = inherited
        .try_clone()
        .map_err(|source| AdoptError::Dup { fd, source })?;
    drop(inherited);
    Ok(stream)
}
