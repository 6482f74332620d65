//! Whether a peer process still runs: the sm BTL's only way to learn that a
//! peer died, since shared memory, unlike a socket, does not break when its
//! other side goes away.
//!
//! A [`PeerWatch`] holds a pidfd of the peer (`pidfd_open`, Linux 5.3+),
//! which becomes readable when the process exits and cannot be fooled by a
//! reused pid. Where pidfds are unavailable it falls back to `kill(pid, 0)`
//! (a reused pid then looks alive: a death goes unnoticed, never the
//! reverse).

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// Watches one peer process.
#[derive(Debug)]
pub struct PeerWatch {
    pid: u32,
    fd: Option<OwnedFd>,
}

impl PeerWatch {
    /// Starts watching process `pid`.
    pub fn new(pid: u32) -> PeerWatch {
        let Ok(p) = libc::pid_t::try_from(pid) else {
            return PeerWatch { pid, fd: None };
        };
        // SAFETY: pidfd_open takes a pid and flags and returns a new
        // descriptor or -1; the descriptor is owned by nothing else.
        let fd = unsafe {
            let r = libc::syscall(libc::SYS_pidfd_open, p, 0);
            (r >= 0).then(|| OwnedFd::from_raw_fd(r as libc::c_int))
        };
        PeerWatch { pid, fd }
    }

    /// Whether the process has exited (or been killed).
    pub fn exited(&self) -> bool {
        match &self.fd {
            Some(fd) => {
                let mut p = libc::pollfd {
                    fd: fd.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                };
                // SAFETY: one valid pollfd, no waiting.
                let r = unsafe { libc::poll(&mut p, 1, 0) };
                r == 1 && p.revents & libc::POLLIN != 0
            }
            None => {
                let Ok(p) = libc::pid_t::try_from(self.pid) else {
                    return false;
                };
                // SAFETY: signal 0 only checks that the process exists.
                let r = unsafe { libc::kill(p, 0) };
                r != 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_child_is_seen_alive_then_dead() {
        let mut child = std::process::Command::new("sleep")
            .arg("60")
            .spawn()
            .expect("start sleep");
        let w = PeerWatch::new(child.id());
        assert!(!w.exited());
        child.kill().unwrap();
        // Exited once killed, reaped or not.
        let t0 = std::time::Instant::now();
        while !w.exited() {
            assert!(t0.elapsed().as_secs() < 30, "death not seen");
            std::thread::yield_now();
        }
        child.wait().unwrap();
        assert!(w.exited());
        assert!(!PeerWatch::new(std::process::id()).exited());
    }
}
