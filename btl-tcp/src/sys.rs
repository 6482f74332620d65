//! The system calls std does not offer: a vectored socket write with
//! `MSG_NOSIGNAL`, so that writing to a peer that vanished returns `EPIPE`
//! instead of killing a process that did not ignore `SIGPIPE` (C programs
//! linked with libmpi); a vectored read into a handler's placement (raw
//! memory of the upper layer, receive in place) and the buffer after it;
//! `SO_LINGER` for fault injection.

use std::io;
use std::os::fd::AsRawFd;

use tmpi_btl::Placement;

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

/// Reads with one `readv` into `p`'s bytes `from..` (receive in place)
/// and, after them, into `spill` (the start of the next fragments, so
/// that finishing a placed fragment costs no extra call). Returns the byte
/// count (0: end of stream); `WouldBlock` when nothing is there.
///
/// Panics if `from > p.len()`.
pub fn read_into_placement(
    sock: &impl AsRawFd,
    p: &Placement,
    from: usize,
    spill: &mut [u8],
) -> io::Result<usize> {
    assert!(
        from <= p.len(),
        "placement offset {from} beyond {}",
        p.len()
    );
    let iov = [
        libc::iovec {
            // SAFETY: `from <= p.len()` (asserted), so the pointer stays
            // within (or one past) the placement's range.
            iov_base: unsafe { p.dst().add(from) }.cast::<libc::c_void>(),
            iov_len: p.len() - from,
        },
        libc::iovec {
            iov_base: spill.as_mut_ptr().cast::<libc::c_void>(),
            iov_len: spill.len(),
        },
    ];
    loop {
        // SAFETY: the first iovec lies within the placement, valid for
        // writes and not otherwise accessed during this progress call
        // (`Placement::new`'s contract, given by the handler that was
        // asked just before); the second is `spill`, borrowed mutably for
        // the call. The kernel writes at most their lengths.
        let r = unsafe { libc::readv(sock.as_raw_fd(), iov.as_ptr(), iov.len() as libc::c_int) };
        if r >= 0 {
            return Ok(r as usize);
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// Copies `src` to `p`'s bytes `from..from + src.len()` (the part of a
/// placed fragment read before its placement was known).
///
/// Panics if the range exceeds the placement.
pub fn copy_into_placement(p: &Placement, from: usize, src: &[u8]) {
    assert!(
        from <= p.len() && src.len() <= p.len() - from,
        "{} bytes at {from} exceed the placement of {}",
        src.len(),
        p.len()
    );
    // SAFETY: the range lies within the placement (asserted), valid for
    // writes and not otherwise accessed during this progress call
    // (`Placement::new`'s contract); `src` is module memory, so the two do
    // not overlap.
    unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), p.dst().add(from), src.len()) };
}

/// Sets `SO_SNDBUF` to `snd` and `SO_RCVBUF` to `rcv` bytes, each unless
/// 0 (the kernel then keeps sizing the buffer itself). The kernel doubles
/// the value for its bookkeeping and caps it at `net.core.wmem_max` /
/// `rmem_max`.
pub fn set_buffer_sizes(sock: &impl AsRawFd, snd: usize, rcv: usize) -> io::Result<()> {
    for (opt, v) in [(libc::SO_SNDBUF, snd), (libc::SO_RCVBUF, rcv)] {
        if v == 0 {
            continue;
        }
        let v = libc::c_int::try_from(v)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "buffer size too large"))?;
        // SAFETY: `v` is a live, initialized int and the length passed is
        // its size; the kernel only reads it.
        let r = unsafe {
            libc::setsockopt(
                sock.as_raw_fd(),
                libc::SOL_SOCKET,
                opt,
                (&v as *const libc::c_int).cast::<libc::c_void>(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        if r != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
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

    fn sockopt(sock: &impl AsRawFd, opt: libc::c_int) -> usize {
        let mut v: libc::c_int = 0;
        let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
        // SAFETY: `v` and `len` are live and sized for an int option.
        let r = unsafe {
            libc::getsockopt(
                sock.as_raw_fd(),
                libc::SOL_SOCKET,
                opt,
                (&mut v as *mut libc::c_int).cast::<libc::c_void>(),
                &mut len,
            )
        };
        assert_eq!(r, 0, "{}", io::Error::last_os_error());
        v as usize
    }

    #[test]
    fn buffer_sizes_are_set_and_zero_keeps_the_default() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let c = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let before = (sockopt(&c, libc::SO_SNDBUF), sockopt(&c, libc::SO_RCVBUF));
        set_buffer_sizes(&c, 0, 0).unwrap();
        assert_eq!(
            (sockopt(&c, libc::SO_SNDBUF), sockopt(&c, libc::SO_RCVBUF)),
            before
        );
        // Small enough to be under any wmem_max/rmem_max; the kernel
        // reports twice the value (its bookkeeping share included).
        set_buffer_sizes(&c, 48 * 1024, 40 * 1024).unwrap();
        assert_eq!(sockopt(&c, libc::SO_SNDBUF), 2 * 48 * 1024);
        assert_eq!(sockopt(&c, libc::SO_RCVBUF), 2 * 40 * 1024);
    }

    #[test]
    fn read_into_placement_then_spill() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let c = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (s, _) = l.accept().unwrap();
        assert_eq!(send_vectored(&c, &[b"abcdefgh"]).unwrap(), 8);
        let mut dst = [0u8; 6];
        // SAFETY: `dst` outlives the placement's uses below and nothing
        // else touches it meanwhile.
        let p = unsafe { Placement::new(0, dst.as_mut_ptr(), dst.len()) };
        copy_into_placement(&p, 0, b"A");
        let mut spill = [0u8; 16];
        let mut got = 0;
        while got < 8 {
            match read_into_placement(&s, &p, 1 + got.min(5), &mut spill[got.saturating_sub(5)..]) {
                Ok(n) => got += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => panic!("{e}"),
            }
        }
        assert_eq!(&dst, b"Aabcde");
        assert_eq!(&spill[..3], b"fgh");
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
