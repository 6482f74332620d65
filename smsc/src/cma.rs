//! Cross-memory attach: `process_vm_readv(2)` wrapper and the ptrace
//! permission set-up, the single-copy mechanism of the sm BTL.

/// Lets any process of this user read our memory with CMA even under Yama
/// `ptrace_scope = 1` (as Open MPI's vader does). Errors are ignored: the
/// kernel may not have Yama, and the probe decides anyway.
pub fn allow_ptracer_any() {
    // SAFETY: prctl with PR_SET_PTRACER only changes this process's Yama
    // attribute; no pointers are passed.
    let _ = unsafe { libc::prctl(libc::PR_SET_PTRACER, libc::PR_SET_PTRACER_ANY, 0, 0, 0) };
}

/// Copies `dst.len()` bytes at address `addr` of process `pid` into `dst`.
/// Loops over partial reads; a read that makes no progress is `EFAULT`.
pub fn read(pid: u32, addr: u64, dst: &mut [u8]) -> std::io::Result<()> {
    let base = dst.as_mut_ptr();
    transfer(dst.len(), |done, left| {
        let local = libc::iovec {
            // SAFETY: `done < dst.len()` (`transfer`'s contract), in bounds.
            iov_base: unsafe { base.add(done) } as *mut libc::c_void,
            iov_len: left,
        };
        let remote = libc::iovec {
            iov_base: (addr as usize + done) as *mut libc::c_void,
            iov_len: left,
        };
        // SAFETY: `local` describes writable memory we exclusively borrow;
        // `remote` is only interpreted by the kernel in the other process
        // (bad addresses yield EFAULT, never touch our memory).
        unsafe { libc::process_vm_readv(pid as libc::pid_t, &local, 1, &remote, 1, 0) }
    })
}

/// Copies `src` to address `addr` of process `pid` (`process_vm_writev`).
/// Loops over partial writes; a write that makes no progress is `EFAULT`.
pub fn write(pid: u32, addr: u64, src: &[u8]) -> std::io::Result<()> {
    let base = src.as_ptr();
    transfer(src.len(), |done, left| {
        let local = libc::iovec {
            // SAFETY: `done < src.len()` (`transfer`'s contract), in bounds.
            iov_base: unsafe { base.add(done) } as *mut libc::c_void,
            iov_len: left,
        };
        let remote = libc::iovec {
            iov_base: (addr as usize + done) as *mut libc::c_void,
            iov_len: left,
        };
        // SAFETY: `local` describes memory we borrow for reading (the
        // kernel only reads it); `remote` is only interpreted by the kernel
        // in the other process (bad addresses yield EFAULT).
        unsafe { libc::process_vm_writev(pid as libc::pid_t, &local, 1, &remote, 1, 0) }
    })
}

/// The partial-transfer loop of [`read`] and [`write`]: calls `step(done,
/// left)` (bytes moved so far, bytes left) until `len` bytes moved,
/// retrying `EINTR`; a step that moves nothing is `EFAULT`.
fn transfer(len: usize, mut step: impl FnMut(usize, usize) -> isize) -> std::io::Result<()> {
    let mut done = 0usize;
    while done < len {
        let n = step(done, len - done);
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if n == 0 {
            return Err(std::io::Error::from_raw_os_error(libc::EFAULT));
        }
        done += n as usize;
    }
    Ok(())
}

/// Whether process `pid` is gone (`kill(pid, 0)` says `ESRCH`).
pub fn gone(pid: u32) -> bool {
    // SAFETY: signal 0 only checks existence and permission; no signal is
    // sent and no memory is passed.
    let r = unsafe { libc::kill(pid as libc::pid_t, 0) };
    r != 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH)
}

/// What this process's peers read to find out whether CMA works.
pub static PROBE: u64 = 0x746d_7069_5f63_6d61; // "tmpi_cma"

/// Address of [`PROBE`].
pub fn probe_addr() -> u64 {
    &PROBE as *const u64 as usize as u64
}

/// Whether CMA from this process to `pid` works: reads its [`PROBE`].
pub fn probe(pid: u32, addr: u64) -> std::io::Result<()> {
    let mut b = [0u8; 8];
    read(pid, addr, &mut b)?;
    if u64::from_ne_bytes(b) != PROBE {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "CMA probe read wrong data",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn read_own_memory_and_errors() {
        let src: Vec<u8> = (0..100_000u32).map(|i| (i % 253) as u8).collect();
        let mut dst = vec![0u8; src.len()];
        read(std::process::id(), src.as_ptr() as u64, &mut dst).unwrap();
        assert_eq!(src, dst);
        probe(std::process::id(), probe_addr()).unwrap();
        let e = read(std::process::id(), 8, &mut dst[..8]).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EFAULT));
        // a pid that cannot exist
        assert!(read(0x3fff_fff0, src.as_ptr() as u64, &mut dst[..8]).is_err());
        assert!(gone(0x3fff_fff0) && !gone(std::process::id()));
        // write into our own memory, then the errors
        let mut dst2 = vec![0u8; src.len()];
        write(std::process::id(), dst2.as_mut_ptr() as u64, &src).unwrap();
        assert_eq!(src, dst2);
        let e = write(std::process::id(), 8, &src[..8]).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EFAULT));
        assert!(write(0x3fff_fff0, dst2.as_mut_ptr() as u64, &src[..8]).is_err());
    }
}
