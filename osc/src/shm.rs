//! The shared segment of an `MPI_Win_allocate_shared` window: one file in
//! `/dev/shm` per window, created by the window's rank 0 (`O_CREAT|O_EXCL`,
//! mode 0600, its pages reserved with `posix_fallocate` so that a full
//! `/dev/shm` is an error at creation, not a `SIGBUS` at the user's first
//! store), opened and mapped by the other ranks, and unlinked by rank 0 as
//! soon as every rank has it mapped (`Window::allocate_shared`): the file
//! never outlives the window's creation, and a job killed during creation
//! leaves a name that `tmpirun`'s clean-up (the job id in the name) and
//! [`tmpi_base::shm_sweep::sweep_dead_creators`] (the pid first) remove.
//!
//! This module holds the unsafe code of shared windows: the mapping and its
//! removal. The memory itself is handed to the user as a raw address (the
//! window's base; `MPI_Win_shared_query`'s pointers) and to pt2pt's target
//! side, which reaches it through `mem::WinMem` like any window's memory.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};

/// Where segment names start (after `/dev/shm/`): the pid follows.
pub(crate) const PREFIX: &str = "tmpi-osc.";

/// The path of a new segment: `/dev/shm/tmpi-osc.<pid>.<job id>.<n>` under
/// a launcher that names the job (`TMPI_JOB_ID`, set by `tmpirun`, whose
/// clean-up removes every `tmpi-` file with its job id as a dot-separated
/// part), `/dev/shm/tmpi-osc.<pid>.<n>` otherwise (a job id of other
/// characters than `[A-Za-z0-9_-]` or longer than 64 is not used).
pub(crate) fn segment_path(pid: u32, job: Option<&str>, n: u64) -> String {
    match job {
        Some(j)
            if !j.is_empty()
                && j.len() <= 64
                && j.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_') =>
        {
            format!("/dev/shm/{PREFIX}{pid}.{j}.{n}")
        }
        _ => format!("/dev/shm/{PREFIX}{pid}.{n}"),
    }
}

/// A fresh segment path for this process.
pub(crate) fn new_path() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    static SWEEP: std::sync::Once = std::sync::Once::new();
    SWEEP.call_once(|| {
        for name in tmpi_base::shm_sweep::sweep_dead_creators(PREFIX) {
            tracing::info!(target: "osc", segment = %name, "removed the stale window segment of a dead process");
        }
    });
    segment_path(
        std::process::id(),
        std::env::var("TMPI_JOB_ID").ok().as_deref(),
        NEXT.fetch_add(1, Ordering::Relaxed),
    )
}

/// A mapped window segment (unmapped on drop).
#[derive(Debug)]
pub(crate) struct Segment {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is process-wide memory valid until drop; this type
// hands out only its address, never references, so moving or sharing the
// handle between threads adds nothing the other processes mapping the
// segment do not already do.
unsafe impl Send for Segment {}
// SAFETY: as for `Send`.
unsafe impl Sync for Segment {}

impl Segment {
    /// Creates the file at `path` (it must not exist), reserves `len` bytes
    /// (zeroed) and maps it. The file is removed again when anything fails.
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

    /// Opens and maps the segment rank 0 created at `path`, which must be a
    /// window segment exactly `len` bytes long.
    pub fn open(path: &str, len: usize) -> io::Result<Segment> {
        let ok = path
            .strip_prefix("/dev/shm/")
            .is_some_and(|n| n.starts_with(PREFIX) && !n.contains('/'));
        if !ok {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("refusing segment path {path:?}"),
            ));
        }
        let file = OpenOptions::new().read(true).write(true).open(path)?;
        let size = file.metadata()?.len();
        if size != len as u64 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{path} is {size} bytes, expected {len}"),
            ));
        }
        map(&file, len)
    }

    /// The address of the first byte.
    pub fn base(&self) -> usize {
        self.ptr.as_ptr() as usize
    }

    /// Bytes mapped.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.len
    }
}

impl Drop for Segment {
    fn drop(&mut self) {
        // SAFETY: `ptr`/`len` are exactly what mmap returned. The window
        // owning the segment is dropped only after `MPI_Win_free`'s
        // collective part, so no request is applied to it any more; the
        // user's own pointers into it are dead by MPI's rules once the
        // window is freed.
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

/// Where each rank's part starts in a contiguous segment: rank after rank,
/// each part at a multiple of [`ALIGN`]; the segment's length (at least
/// one alignment unit: a window of only empty parts still has a base).
pub(crate) fn layout(sizes: &[usize]) -> Option<(Vec<usize>, usize)> {
    let mut offs = Vec::with_capacity(sizes.len());
    let mut at = 0usize;
    for &s in sizes {
        offs.push(at);
        at = at.checked_add(s)?.checked_next_multiple_of(ALIGN)?;
    }
    Some((offs, at.max(ALIGN)))
}

/// Alignment of each rank's part: a cache line, so that ranks storing to
/// their own parts do not share lines (and any C type is aligned).
pub(crate) const ALIGN: usize = 64;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_are_aligned_and_in_rank_order() {
        let (offs, len) = layout(&[10, 0, 64, 1]).unwrap();
        assert_eq!(offs, vec![0, 64, 64, 128]);
        assert_eq!(len, 192);
        assert_eq!(layout(&[0, 0]).unwrap(), (vec![0, 0], 64));
        assert!(layout(&[usize::MAX, 1]).is_none());
    }

    #[test]
    fn names_carry_pid_and_job_id() {
        assert_eq!(
            segment_path(7, Some("tmpi-12-00ab"), 3),
            "/dev/shm/tmpi-osc.7.tmpi-12-00ab.3"
        );
        assert_eq!(segment_path(7, Some("a.b"), 3), "/dev/shm/tmpi-osc.7.3");
        assert_eq!(segment_path(7, None, 0), "/dev/shm/tmpi-osc.7.0");
    }

    #[test]
    fn two_mappings_share_memory_and_open_checks_path_and_size() {
        let path = segment_path(std::process::id(), Some("shmtest"), 999_999);
        let a = Segment::create(Path::new(&path), 4096).unwrap();
        assert!(Segment::create(Path::new(&path), 4096).is_err());
        assert!(Segment::open(&path, 8192).is_err(), "size mismatch");
        assert!(Segment::open("/tmp/tmpi-osc.1.0", 4096).is_err(), "path");
        let b = Segment::open(&path, 4096).unwrap();
        std::fs::remove_file(&path).unwrap();
        assert_eq!(a.len(), 4096);
        let pa = a.base() as *mut u64;
        let pb = b.base() as *const u64;
        // SAFETY: both mappings are 4096 bytes of one file, page aligned;
        // this test is their only user.
        unsafe {
            assert_eq!(pb.add(3).read_volatile(), 0, "zeroed");
            pa.add(3).write_volatile(0x1234);
            assert_eq!(pb.add(3).read_volatile(), 0x1234);
        }
    }
}
