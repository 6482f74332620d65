//! The one system call std does not offer: a vectored socket write with
//! `MSG_NOSIGNAL`, so that writing to a peer that vanished returns `EPIPE`
//! instead of killing a process that did not ignore `SIGPIPE` (C programs
//! linked with libmpi).

use std::io;
use std::os::fd::AsRawFd;

/// Writes as much of `bufs` (in order) as the socket takes now; returns the
/// byte count. `WouldBlock` when nothing could be written.
pub fn send_vectored(sock: &impl AsRawFd, bufs: &[&[u8]]) -> io::Result<usize> {
    let mut iov: [libc::iovec; 4] = [libc::iovec {
        iov_base: std::ptr::null_mut(),
        iov_len: 0,
    }; 4];
    let mut n = 0;
    for b in bufs.iter().filter(|b| !b.is_empty()).take(iov.len()) {
        iov[n] = libc::iovec {
            iov_base: b.as_ptr() as *mut libc::c_void,
            iov_len: b.len(),
        };
        n += 1;
    }
    if n == 0 {
        return Ok(0);
    }
    // SAFETY: zeroed msghdr is a valid "no name, no control" header.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = iov.as_mut_ptr();
    msg.msg_iovlen = n as _;
    loop {
        // SAFETY: `msg` points at `n` iovecs describing live, readable
        // slices borrowed for the duration of the call; the kernel only
        // reads them.
        let r = unsafe {
            libc::sendmsg(
                sock.as_raw_fd(),
                &msg,
                libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT,
            )
        };
        if r >= 0 {
            return Ok(r as usize);
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// Sets `SO_LINGER` {on, 0 s}: the next `close` of the socket aborts the
/// connection with a reset (RST) instead of an orderly FIN, discarding
/// unsent data (fault injection, `btl_tcp_inject_reset`).
pub fn set_linger_zero(sock: &impl AsRawFd) -> io::Result<()> {
    let l = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: `l` is a live, initialized `linger` and the length passed is
    // its size; the kernel only reads it.
    let r = unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&l as *const libc::linger).cast::<libc::c_void>(),
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    #[test]
    fn vectored_write_and_epipe() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let c = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (mut s, _) = l.accept().unwrap();
        assert_eq!(send_vectored(&c, &[b"ab", b"", b"cde"]).unwrap(), 5);
        let mut got = [0u8; 5];
        s.read_exact(&mut got).unwrap();
        assert_eq!(&got, b"abcde");
        drop(s);
        // The peer is gone: eventually EPIPE/ECONNRESET, never a signal.
        let mut err = None;
        for _ in 0..100 {
            match send_vectored(&c, &[&[0u8; 4096]]) {
                Ok(_) => std::thread::sleep(std::time::Duration::from_millis(5)),
                Err(e) => {
                    err = Some(e);
                    break;
                }
            }
        }
        let e = err.expect("writes to a closed peer must fail");
        assert!(
            matches!(
                e.kind(),
                io::ErrorKind::BrokenPipe | io::ErrorKind::ConnectionReset
            ),
            "{e}"
        );
    }

    #[test]
    fn linger_zero_close_resets_the_peer() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let c = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (mut s, _) = l.accept().unwrap();
        assert_eq!(send_vectored(&c, &[b"xyz"]).unwrap(), 3);
        let mut got = [0u8; 3];
        s.read_exact(&mut got).unwrap();
        set_linger_zero(&c).unwrap();
        drop(c);
        // An orderly close would read as EOF (Ok(0)); a reset is an error.
        let mut b = [0u8; 16];
        let e = s.read(&mut b).expect_err("read after a reset must fail");
        assert_eq!(e.kind(), io::ErrorKind::ConnectionReset, "{e}");
    }
}
