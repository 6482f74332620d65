//! A shared-memory segment of one communicator's ranks on one node, for
//! the `sm` coll component (`component::sm`): one rank creates the file
//! in `/dev/shm` (`O_CREAT|O_EXCL`, mode 0600, its pages reserved with
//! `posix_fallocate` so that a full `/dev/shm` is an error at creation and
//! not a `SIGBUS` at first touch), the others open it, and the creator
//! unlinks it once every rank has it mapped.
//!
//! This module holds the component's unsafe code: the mapping and the raw
//! accesses into it. Other processes read and write the segment
//! concurrently, so nothing here hands out Rust references to plain data
//! except [`Segment::slice`], whose caller vouches (by the component's
//! protocol) that no one writes those bytes meanwhile.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::ptr::NonNull;
use std::sync::atomic::AtomicU64;

/// A mapped segment.
#[derive(Debug)]
pub struct Segment {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is process-wide memory that stays valid until drop;
// every access goes through atomics or explicit copies whose ordering the
// component's protocol establishes (flags written with release, read with
// acquire), so sharing the handle between threads adds nothing the other
// processes do not already do.
unsafe impl Send for Segment {}
// SAFETY: as for `Send`.
unsafe impl Sync for Segment {}

impl Segment {
    /// Creates the file at `path` (it must not exist), reserves `len` bytes
    /// and maps it. The file is removed again when anything fails.
    pub fn create(path: &Path, len: usize) -> io::Result<Segment> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path)?;
        let seg = reserve(&file, len).and_then(|()| map(&file, len));
        if seg.is_err() {
            let _ = std::fs::remove_file(path);
        }
        seg
    }

    /// Opens and maps the segment another rank created at `path`, which
    /// must be exactly `len` bytes long.
    pub fn open(path: &Path, len: usize) -> io::Result<Segment> {
        let file = OpenOptions::new().read(true).write(true).open(path)?;
        let size = file.metadata()?.len();
        if size != len as u64 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{} is {size} bytes, expected {len}", path.display()),
            ));
        }
        map(&file, len)
    }

    fn check(&self, off: usize, n: usize) {
        assert!(
            off.checked_add(n).is_some_and(|end| end <= self.len),
            "segment access {off}+{n} beyond {} bytes",
            self.len
        );
    }

    /// The 8-byte atomic at `off` (a multiple of 8).
    pub fn atomic(&self, off: usize) -> &AtomicU64 {
        self.check(off, 8);
        assert_eq!(off % 8, 0, "unaligned segment atomic at {off}");
        // SAFETY: in bounds and 8-byte aligned (the mapping is page
        // aligned), valid for the segment's lifetime, which the returned
        // reference borrows; `AtomicU64` tolerates concurrent access from
        // other processes.
        unsafe { &*self.ptr.as_ptr().add(off).cast::<AtomicU64>() }
    }

    /// Copies `data` to `off`.
    pub fn write(&self, off: usize, data: &[u8]) {
        self.check(off, data.len());
        // SAFETY: in bounds; `data` is process-private memory, so the two
        // ranges do not overlap. Readers in other processes only look at
        // these bytes after the release store of the flag that follows.
        unsafe {
            std::ptr::copy_nonoverlapping(data.as_ptr(), self.ptr.as_ptr().add(off), data.len())
        }
    }

    /// Copies `out.len()` bytes from `off` into `out` (tests).
    #[cfg(test)]
    pub fn read(&self, off: usize, out: &mut [u8]) {
        self.check(off, out.len());
        // SAFETY: in bounds, non-overlapping (as in `write`); the caller
        // read the writer's flag with acquire before.
        unsafe {
            std::ptr::copy_nonoverlapping(self.ptr.as_ptr().add(off), out.as_mut_ptr(), out.len())
        }
    }

    /// The `n` bytes at `off` as a slice.
    ///
    /// # Safety
    /// No process may write these bytes while the slice lives (the `sm`
    /// protocol: a rank rewrites its area only after every rank reported
    /// the op that last used it done).
    pub unsafe fn slice(&self, off: usize, n: usize) -> &[u8] {
        self.check(off, n);
        // SAFETY: in bounds and valid for the borrow of `self`; the caller
        // guarantees no concurrent writer.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr().add(off), n) }
    }
}

impl Drop for Segment {
    fn drop(&mut self) {
        // SAFETY: `ptr`/`len` are exactly what mmap returned; every
        // reference into the mapping borrows `self`, so none outlives this.
        unsafe {
            libc::munmap(self.ptr.as_ptr().cast(), self.len);
        }
    }
}

fn reserve(file: &File, len: usize) -> io::Result<()> {
    let len_off = libc::off_t::try_from(len)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "segment too large"))?;
    // SAFETY: plain system call on an open descriptor; no memory is passed.
    let rc = unsafe { libc::posix_fallocate(file.as_raw_fd(), 0, len_off) };
    match rc {
        0 => Ok(()),
        // File systems without fallocate: size the file instead (a full
        // file system then shows at first touch, as with any tmpfs user).
        libc::EOPNOTSUPP | libc::EINVAL => file.set_len(len as u64),
        e => Err(io::Error::from_raw_os_error(e)),
    }
}

fn map(file: &File, len: usize) -> io::Result<Segment> {
    if len == 0 {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "empty segment"));
    }
    // SAFETY: a fresh shared mapping of an open file of at least `len`
    // bytes; the kernel picks the address. The descriptor may be closed
    // afterwards (the mapping keeps the file).
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            file.as_raw_fd(),
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    let ptr = NonNull::new(p.cast::<u8>()).ok_or_else(|| io::Error::other("mmap returned null"))?;
    Ok(Segment { ptr, len })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering;

    #[test]
    fn two_mappings_see_each_other_and_open_checks_size() {
        let path = std::env::temp_dir().join(format!("tmpi-coll-shm-test.{}", std::process::id()));
        let a = Segment::create(&path, 4096).unwrap();
        assert!(
            Segment::create(&path, 4096).is_err(),
            "create must not reuse a file"
        );
        assert!(
            Segment::open(&path, 8192).is_err(),
            "size mismatch must be refused"
        );
        let b = Segment::open(&path, 4096).unwrap();
        std::fs::remove_file(&path).unwrap();
        a.write(64, b"hello");
        a.atomic(8).store(7, Ordering::Release);
        assert_eq!(b.atomic(8).load(Ordering::Acquire), 7);
        let mut out = [0u8; 5];
        b.read(64, &mut out);
        assert_eq!(&out, b"hello");
        // SAFETY: nothing writes the segment while the slice lives.
        assert_eq!(unsafe { b.slice(64, 5) }, b"hello");
    }

    #[test]
    #[should_panic(expected = "beyond")]
    fn out_of_bounds_access_panics_instead_of_corrupting() {
        let path = std::env::temp_dir().join(format!("tmpi-coll-shm-oob.{}", std::process::id()));
        let a = Segment::create(&path, 4096).unwrap();
        std::fs::remove_file(&path).unwrap();
        a.write(4090, &[0u8; 16]);
    }
}
