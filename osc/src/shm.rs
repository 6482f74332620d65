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
//! The segment starts with a header the sm component synchronises through
//! ([`WindowSegment::ctl`], [`WindowSegment::post_word`]): one control
//! block of a cache line per rank (its passive-target lock, its accumulate
//! lock, its count of PSCW completes), then one bitmap per rank of the
//! targets whose `MPI_Win_post` reached it; the ranks' parts follow.
//!
//! This module holds the unsafe code of shared windows: the mapping, its
//! removal and the atomics of the header. The memory itself is handed to
//! the user as a raw address (the window's base; `MPI_Win_shared_query`'s
//! pointers) and to the components, which reach it through `mem::WinMem`
//! like any window's memory.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

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

    /// The 32-bit atomic word at byte `off` (4-byte aligned, inside the
    /// mapping: a bug of the caller otherwise, which panics).
    pub fn atomic_u32(&self, off: usize) -> &AtomicU32 {
        assert!(
            off.is_multiple_of(4) && off + 4 <= self.len,
            "atomic word {off} of {}",
            self.len
        );
        // SAFETY: `off..off + 4` lies in the mapping (checked), which stays
        // mapped while `self` lives, and is 4-byte aligned (the mapping is
        // page aligned); `AtomicU32` has the layout of `u32`. Every process
        // touches the header words only through atomics, so no non-atomic
        // access races with this one.
        unsafe { &*(self.ptr.as_ptr().add(off) as *const AtomicU32) }
    }

    /// The 64-bit atomic word at byte `off` (8-byte aligned, inside the
    /// mapping), as [`Segment::atomic_u32`].
    pub fn atomic_u64(&self, off: usize) -> &AtomicU64 {
        assert!(
            off.is_multiple_of(8) && off + 8 <= self.len,
            "atomic word {off} of {}",
            self.len
        );
        // SAFETY: as in `atomic_u32`, for 8 aligned bytes.
        unsafe { &*(self.ptr.as_ptr().add(off) as *const AtomicU64) }
    }
}

/// Bytes of one rank's control block in a segment's header (a cache line).
pub(crate) const CTL: usize = 64;

/// Bytes of one rank's post bitmap: a bit per rank, whole cache lines.
fn bitmap_len(n: usize) -> Option<usize> {
    n.div_ceil(64)
        .checked_mul(8)?
        .checked_next_multiple_of(ALIGN)
}

/// Bytes of the header of a segment of `n` ranks (a multiple of [`ALIGN`]).
pub(crate) fn header_len(n: usize) -> Option<usize> {
    n.checked_mul(CTL)?
        .checked_add(n.checked_mul(bitmap_len(n)?)?)
}

/// One rank's control block: the words other ranks synchronise with it
/// through (its accumulate lock, at byte 12, is
/// [`WindowSegment::acc_lock`]).
pub(crate) struct Ctl<'a> {
    /// Passive-target lock: the next ticket to hand out.
    pub ticket: &'a AtomicU32,
    /// The ticket that may take the lock shared next.
    pub read: &'a AtomicU32,
    /// The ticket that may take the lock exclusively next.
    pub write: &'a AtomicU32,
    /// PSCW: completes of origins not yet consumed by a wait.
    pub completes: &'a AtomicU32,
}

/// A window's segment with every rank's part: the memory of an
/// `MPI_Win_allocate_shared` window, or of an `MPI_Win_allocate` window
/// whose ranks share a node, which the sm component serves.
#[derive(Debug)]
pub(crate) struct WindowSegment {
    pub seg: Segment,
    pub parts: Vec<crate::SharedPart>,
}

impl WindowSegment {
    /// Rank `r`'s control block (`r` below the number of parts).
    pub fn ctl(&self, r: usize) -> Ctl<'_> {
        let at = r * CTL;
        Ctl {
            ticket: self.seg.atomic_u32(at),
            read: self.seg.atomic_u32(at + 4),
            write: self.seg.atomic_u32(at + 8),
            completes: self.seg.atomic_u32(at + 16),
        }
    }

    /// Rank `r`'s accumulate lock (0 free, 1 held), the word at byte 12 of
    /// its control block.
    #[inline]
    pub fn acc_lock(&self, r: usize) -> &AtomicU32 {
        self.seg.atomic_u32(r * CTL + 12)
    }

    /// The word of rank `origin`'s post bitmap holding target `t`'s bit,
    /// and the bit.
    pub fn post_word(&self, origin: usize, t: usize) -> (&AtomicU64, u64) {
        let n = self.parts.len();
        let per = bitmap_len(n).unwrap_or(0);
        let at = n * CTL + origin * per + (t / 64) * 8;
        (self.seg.atomic_u64(at), 1 << (t % 64))
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

/// Where each rank's part starts in a contiguous segment: after the header
/// ([`header_len`]), rank after rank, each part at a multiple of
/// [`ALIGN`]; the segment's length (at least one alignment unit past the
/// header: a window of only empty parts still has a base).
pub(crate) fn layout(sizes: &[usize]) -> Option<(Vec<usize>, usize)> {
    let header = header_len(sizes.len())?;
    let mut offs = Vec::with_capacity(sizes.len());
    let mut at = header;
    for &s in sizes {
        offs.push(at);
        at = at.checked_add(s)?.checked_next_multiple_of(ALIGN)?;
    }
    Some((offs, at.max(header + ALIGN)))
}

/// Alignment of each rank's part: a cache line, so that ranks storing to
/// their own parts do not share lines (and any C type is aligned).
pub(crate) const ALIGN: usize = 64;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_are_aligned_and_in_rank_order() {
        // Header: 4 control blocks and 4 bitmaps of one line each.
        let (offs, len) = layout(&[10, 0, 64, 1]).unwrap();
        let h = 8 * 64;
        assert_eq!(header_len(4), Some(h));
        assert_eq!(offs, vec![h, h + 64, h + 64, h + 128]);
        assert_eq!(len, h + 192);
        assert_eq!(layout(&[0, 0]).unwrap(), (vec![256, 256], 320));
        assert!(layout(&[usize::MAX, 1]).is_none());
        // 65 ranks: bitmaps of two words, still one line each.
        assert_eq!(header_len(65), Some(65 * 128));
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
