//! Pipes that carry page references instead of copies: a sender
//! `vmsplice(2)`s its buffer into a pipe (the kernel takes references to
//! the pages, no copy) and the receiver `read(2)`s the bytes out of the
//! pipe (one copy). On this kernel that costs about three quarters of a
//! `process_vm_readv` of the same bytes (docs/coll.md "Spliced single
//! copy"). The receiver gets the pipe's read end from the sender's fd
//! table with `pidfd_getfd(2)`, which the same ptrace permission as
//! cross-memory attach allows (`cma::allow_ptracer_any`).
//!
//! The bytes the receiver reads are whatever the pages hold when it reads
//! them: the sender must leave them alone until the receiver drained
//! them, which the caller's protocol guarantees.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// The two ends of a non-blocking pipe, close-on-exec.
#[derive(Debug)]
pub struct Pipe {
    pub read: OwnedFd,
    pub write: OwnedFd,
    /// Its capacity in bytes after [`Pipe::new`] set it.
    pub capacity: usize,
}

impl Pipe {
    /// A pipe of `capacity` bytes (see [`resize`]). Every pipe's
    /// capacity counts against its user's pipe budget
    /// (`/proc/sys/fs/pipe-user-pages-soft`, 64 MiB by default, for all
    /// the user's processes together; past it the user's new pipes get two
    /// pages), so pipes that idle should be small.
    pub fn new(capacity: usize) -> io::Result<Pipe> {
        let mut fds = [0 as libc::c_int; 2];
        // SAFETY: `fds` is a writable array of two ints, as pipe2 wants.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_NONBLOCK | libc::O_CLOEXEC) } != 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: pipe2 succeeded: both fds are open and owned by nobody
        // else.
        let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        let capacity = resize(&write, capacity)?;
        Ok(Pipe {
            read,
            write,
            capacity,
        })
    }
}

/// Sets the capacity of the pipe of `fd` to at least `bytes`
/// (`F_SETPIPE_SZ`: rounded up to a power of two number of pages, at most
/// `/proc/sys/fs/pipe-max-size` and within the user's pipe budget, else
/// `EPERM`; smaller than what the pipe holds, `EBUSY`). Returns it.
pub fn resize(fd: &OwnedFd, bytes: usize) -> io::Result<usize> {
    let want =
        libc::c_int::try_from(bytes).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: fcntl on an fd we own with an integer argument.
    let got = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETPIPE_SZ, want) };
    if got < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(got as usize)
}

/// A duplicate of file descriptor `fd` of process `pid`
/// (`pidfd_open` + `pidfd_getfd`, Linux 5.6), close-on-exec.
pub fn take_fd(pid: u32, fd: RawFd) -> io::Result<OwnedFd> {
    // SAFETY: pidfd_open takes a pid and flags; no memory is passed.
    let pidfd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
    if pidfd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the syscall returned a new fd that nobody else owns.
    let pidfd = unsafe { OwnedFd::from_raw_fd(pidfd as RawFd) };
    // SAFETY: pidfd_getfd takes two fds and flags; no memory is passed.
    let got = unsafe { libc::syscall(libc::SYS_pidfd_getfd, pidfd.as_raw_fd(), fd, 0) };
    if got < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: as above, a new fd (the kernel sets close-on-exec on it).
    Ok(unsafe { OwnedFd::from_raw_fd(got as RawFd) })
}

/// Splices up to `len` bytes of this process's memory at `addr` into the
/// pipe's write end, as many as fit without blocking; returns how many.
/// A bad address is `EFAULT`.
pub fn give(write: &OwnedFd, addr: u64, len: usize) -> io::Result<usize> {
    let mut done = 0usize;
    while done < len {
        let iov = libc::iovec {
            iov_base: (addr as usize + done) as *mut libc::c_void,
            iov_len: len - done,
        };
        // SAFETY: the kernel only reads the iovec and takes references to
        // the pages it describes (bad addresses yield EFAULT); nothing in
        // this process is written.
        let n = unsafe { libc::vmsplice(write.as_raw_fd(), &iov, 1, libc::SPLICE_F_NONBLOCK) };
        if n < 0 {
            let e = io::Error::last_os_error();
            match e.kind() {
                io::ErrorKind::Interrupted => continue,
                io::ErrorKind::WouldBlock => break,
                _ => return Err(e),
            }
        }
        if n == 0 {
            break;
        }
        done += n as usize;
    }
    Ok(done)
}

/// Reads exactly `dst.len()` bytes out of the pipe's read end; bytes the
/// sender spliced before it said so are there, so an empty pipe is an
/// error (`WouldBlock`), not a wait.
pub fn take(read: &OwnedFd, dst: &mut [u8]) -> io::Result<()> {
    let mut done = 0usize;
    while done < dst.len() {
        // SAFETY: the destination is the unread tail of `dst`, which we
        // borrow mutably.
        let n = unsafe {
            libc::read(
                read.as_raw_fd(),
                dst.as_mut_ptr().add(done) as *mut libc::c_void,
                dst.len() - done,
            )
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if n == 0 {
            return Err(io::Error::from(io::ErrorKind::UnexpectedEof));
        }
        done += n as usize;
    }
    Ok(())
}

/// Reads and drops `n` bytes (a receiver that cannot use them keeps the
/// pipe in step with the sender).
pub fn discard(read: &OwnedFd, mut n: usize) -> io::Result<()> {
    let mut scratch = vec![0u8; n.min(64 * 1024)];
    while n > 0 {
        let k = n.min(scratch.len());
        take(read, &mut scratch[..k])?;
        n -= k;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splice_through_a_pipe_taken_from_our_own_fd_table() {
        let pipe = Pipe::new(4096).unwrap();
        assert_eq!(pipe.capacity, 4096);
        assert_eq!(resize(&pipe.write, 1 << 20).unwrap(), 1 << 20);
        let read = take_fd(std::process::id(), pipe.read.as_raw_fd()).unwrap();
        let src: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
        let n = give(&pipe.write, src.as_ptr() as u64, src.len()).unwrap();
        assert_eq!(n, src.len());
        let mut dst = vec![0u8; 200_000];
        take(&read, &mut dst).unwrap();
        assert_eq!(dst[..], src[..200_000]);
        discard(&read, 100_000).unwrap();
        // empty now: a read is an error, not a wait
        let e = take(&read, &mut dst[..1]).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::WouldBlock);
        // more than fits: as much as fits, then the rest is the caller's
        let big = vec![7u8; 3 << 20];
        let n = give(&pipe.write, big.as_ptr() as u64, big.len()).unwrap();
        // (one page reference per slot: an unaligned buffer fills the
        // pipe a little short of its capacity)
        assert!(n > (1 << 20) - 4096 && n <= 1 << 20, "{n}");
        // a pipe that holds bytes cannot shrink below them
        let e = resize(&pipe.write, 4096).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EBUSY));
        discard(&read, n).unwrap();
        assert_eq!(resize(&pipe.read, 4096).unwrap(), 4096);
        // errors
        assert!(give(&pipe.write, 8, 4096).is_err());
        assert!(take_fd(0x3fff_fff0, 0).is_err());
        assert!(take_fd(std::process::id(), 100_000).is_err());
    }
}
