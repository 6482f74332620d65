//! One process's shared segment: the file in `/dev/shm`, its mapping, its
//! header and layout.
//!
//! ```text
//! offset 0        header (one page): magic, version, owner, pid, layout,
//!                 attach counter, ready flag, CMA probe address
//! PAGE            cooperative-copy slots (COOP_SLOTS x 128 B, two pages):
//!                 the owner's large send regions that a receiver may arm
//! 3*PAGE          receive FIFO control block (128 B)
//! 3*PAGE+128      fast boxes, one per sending local rank: ctl (128 B) + ring
//! ...             eager fragment slots: 64 B header + eager capacity
//! ...             max fragment slots:   64 B header + max capacity
//! ```
//! The FIFO and fast boxes of a segment are *received into* by its owner;
//! the fragment slots are the owner's *send* pool. The layout is written in
//! the header, so peers with other parameters still read it correctly.
//! Everything below 4 GiB (relative pointers carry 32-bit offsets).

use std::fs::{File, OpenOptions};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use memmap2::MmapMut;
use tmpi_btl::BtlError;

use crate::shm::{Fbox, Fifo, FragHdr, FBOX_CTL, FBOX_MIN_SIZE, FIFO_CTL, FRAG_HDR};

const MAGIC: u64 = u64::from_le_bytes(*b"TMPISM01");
const VERSION: u32 = 2;
const PAGE: usize = 4096;

/// Cooperative-copy slots per segment (the slot index travels in 8 bits of
/// the region key, as index + 1).
pub const COOP_SLOTS: usize = 64;
/// Bytes of one [`CoopSlot`].
pub const COOP_SLOT_BYTES: usize = 128;
/// Start of the FIFO control block: header page + slot table.
const HDR_AREA: usize = PAGE + COOP_SLOTS * COOP_SLOT_BYTES;

/// One cooperative-copy slot in its owner's (the sender's) segment.
///
/// `state` is `generation << 3 | phase`. The owner moves it FREE -> OWNED
/// (register, new generation); the receiver OWNED -> ARMING (compare-
/// exchange with the generation of its key) -> ARMED (after writing the
/// other fields, release) -> CLOSED (after its last access); the owner
/// CLOSED/OWNED -> FREE (deregister). Both claim chunks with `next` and
/// count finished ones in `done`; a chunk the owner could not write has
/// its bit in `failed`. Zeroed file memory is a FREE slot of generation 0.
#[repr(C, align(128))]
#[derive(Debug)]
pub struct CoopSlot {
    /// Generation and phase.
    pub state: AtomicU64,
    /// Receiver's destination address (receiver writes while ARMING).
    pub dst: AtomicU64,
    /// Bytes to copy.
    pub len: AtomicU64,
    /// Chunk size.
    pub chunk: AtomicU64,
    /// Number of chunks (<= 64).
    pub nchunks: AtomicU32,
    /// Receiver's local rank (the owner writes to that peer's process).
    pub reader: AtomicU32,
    /// Written by the owner only: [`coop_phase::waiting`] of the slot's
    /// generation while the owner sits in idle progress rounds (it would
    /// help at once), 0 while it has other work. A receiver arms the slot
    /// only when its owner waits; else one plain read is cheaper.
    pub owner_waiting: AtomicU64,
    _pad0: [u64; 2],
    /// Next chunk to claim (`fetch_add`).
    pub next: AtomicU32,
    /// Chunks finished (copied, or failed by the owner).
    pub done: AtomicU32,
    /// Chunks the owner failed to write (bit per chunk).
    pub failed: AtomicU64,
    _pad1: [u64; 6],
}

const _: () = assert!(std::mem::size_of::<CoopSlot>() == COOP_SLOT_BYTES);

/// Phases of [`CoopSlot::state`].
pub mod coop_phase {
    /// Not registered.
    pub const FREE: u64 = 0;
    /// Registered by the owner, not (yet) used by a receiver.
    pub const OWNED: u64 = 1;
    /// A receiver is writing the copy parameters.
    pub const ARMING: u64 = 2;
    /// Copy in progress: both sides may claim chunks.
    pub const ARMED: u64 = 3;
    /// The receiver finished (no further access until a new generation).
    pub const CLOSED: u64 = 4;
    /// Generations are kept to this many bits (the key's width).
    pub const GEN_BITS: u32 = 24;
    /// `state` value of `generation` in `phase`.
    pub const fn state(generation: u32, phase: u64) -> u64 {
        ((generation as u64 & ((1 << GEN_BITS) - 1)) << 3) | phase
    }
    /// `owner_waiting` value while the owner of `generation` waits (never
    /// 0, never equal for two generations within [`GEN_BITS`]).
    pub const fn waiting(generation: u32) -> u64 {
        (1 << 63) | state(generation, 0)
    }
}

/// Fragment size class.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    /// Eager-size fragments.
    Eager = 0,
    /// Max-send-size fragments.
    Max = 1,
}

/// Where everything is in a segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    /// Fast-box slots (= local processes).
    pub slots: u32,
    /// Ring bytes per fast box (power of two).
    pub fbox_size: u32,
    /// Number of eager fragments.
    pub n_eager: u32,
    /// Data bytes per eager fragment.
    pub eager_cap: u32,
    /// Number of max fragments.
    pub n_max: u32,
    /// Data bytes per max fragment.
    pub max_cap: u32,
}

fn round64(x: usize) -> usize {
    x.div_ceil(64) * 64
}

impl Layout {
    /// Offset of the FIFO control block.
    pub fn fifo(&self) -> usize {
        HDR_AREA
    }
    fn fbox_stride(&self) -> usize {
        round64(FBOX_CTL + self.fbox_size as usize)
    }
    /// Offset of the fast box written by local rank `sender`.
    pub fn fbox(&self, sender: usize) -> usize {
        HDR_AREA + FIFO_CTL + sender * self.fbox_stride()
    }
    fn eager_start(&self) -> usize {
        self.fbox(self.slots as usize)
    }
    fn eager_stride(&self) -> usize {
        FRAG_HDR + round64(self.eager_cap as usize)
    }
    fn max_start(&self) -> usize {
        self.eager_start() + self.n_eager as usize * self.eager_stride()
    }
    fn max_stride(&self) -> usize {
        FRAG_HDR + round64(self.max_cap as usize)
    }
    /// Bytes of the whole segment (page multiple).
    pub fn total(&self) -> usize {
        (self.max_start() + self.n_max as usize * self.max_stride()).div_ceil(PAGE) * PAGE
    }
    /// Offset of fragment `i` of `class`.
    pub fn frag(&self, class: Class, i: usize) -> usize {
        match class {
            Class::Eager => self.eager_start() + i * self.eager_stride(),
            Class::Max => self.max_start() + i * self.max_stride(),
        }
    }
    /// Class and data capacity of the fragment slot starting at `off`;
    /// `None` if `off` is not the start of a slot.
    pub fn classify(&self, off: usize) -> Option<(Class, usize)> {
        let (e0, m0) = (self.eager_start(), self.max_start());
        if off >= e0 && off < m0 && (off - e0).is_multiple_of(self.eager_stride()) {
            return Some((Class::Eager, self.eager_cap as usize));
        }
        let end = m0 + self.n_max as usize * self.max_stride();
        if off >= m0 && off < end && (off - m0).is_multiple_of(self.max_stride()) {
            return Some((Class::Max, self.max_cap as usize));
        }
        None
    }
    /// Checks that the layout is usable (sizes, alignment, < 4 GiB).
    pub fn validate(&self) -> Result<(), String> {
        if self.slots == 0 || self.slots > 4096 {
            return Err(format!("{} local processes", self.slots));
        }
        if !self.fbox_size.is_power_of_two() || (self.fbox_size as usize) < FBOX_MIN_SIZE {
            return Err(format!(
                "fast box size {} is not a power of two >= {FBOX_MIN_SIZE}",
                self.fbox_size
            ));
        }
        if self.n_eager == 0 || self.n_max == 0 || self.eager_cap == 0 || self.max_cap == 0 {
            return Err("empty fragment pool".into());
        }
        let total = (self.slots as u128) * (FBOX_CTL as u128 + self.fbox_size as u128)
            + self.n_eager as u128 * (FRAG_HDR as u128 + self.eager_cap as u128 + 64)
            + self.n_max as u128 * (FRAG_HDR as u128 + self.max_cap as u128 + 64)
            + (HDR_AREA + PAGE) as u128;
        if total >= 1 << 32 {
            return Err(format!("segment of {total} bytes exceeds 4 GiB"));
        }
        Ok(())
    }
}

/// The segment header (start of the first page).
#[repr(C)]
struct Header {
    magic: u64,
    version: u32,
    owner_local: u32,
    pid: u32,
    slots: u32,
    fbox_size: u32,
    n_eager: u32,
    eager_cap: u32,
    n_max: u32,
    max_cap: u32,
    /// 1 once the owner finalized (set before it unmaps; peers tell a
    /// normal exit from a death by it).
    finalized: AtomicU32,
    probe_addr: u64,
    /// Peers that mapped this segment.
    attached: AtomicU32,
    /// 1 once the header and FIFO are initialised (release).
    ready: AtomicU32,
}

const _: () = assert!(std::mem::size_of::<Header>() <= PAGE);

/// A mapped segment (own or a peer's).
#[derive(Debug)]
pub struct Segment {
    map: MmapMut,
    path: PathBuf,
    layout: Layout,
    /// Owner's pid.
    pub pid: u32,
    /// Owner's CMA probe address.
    pub probe_addr: u64,
    /// Owner's local index.
    pub owner_local: u32,
}

impl Segment {
    /// Creates the segment file (`O_CREAT|O_EXCL`, mode 0600), sizes and
    /// maps it, and initialises header and FIFO.
    pub fn create(
        path: &Path,
        layout: Layout,
        owner_local: u32,
        probe_addr: u64,
    ) -> Result<Segment, BtlError> {
        layout.validate().map_err(BtlError::Config)?;
        let io = |what: &str, e| BtlError::io(format!("{what} {}", path.display()), e);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path)
            .map_err(|e| io("create", e))?;
        let seg = (|| {
            file.set_len(layout.total() as u64)
                .map_err(|e| io("size", e))?;
            let map = map(&file).map_err(|e| io("mmap", e))?;
            let mut seg = Segment {
                map,
                path: path.to_path_buf(),
                layout,
                pid: std::process::id(),
                probe_addr,
                owner_local,
            };
            seg.init_header();
            Ok(seg)
        })();
        if seg.is_err() {
            let _ = std::fs::remove_file(path);
        }
        seg
    }

    fn init_header(&mut self) {
        let l = self.layout;
        let h = Header {
            magic: MAGIC,
            version: VERSION,
            owner_local: self.owner_local,
            pid: self.pid,
            slots: l.slots,
            fbox_size: l.fbox_size,
            n_eager: l.n_eager,
            eager_cap: l.eager_cap,
            n_max: l.n_max,
            max_cap: l.max_cap,
            finalized: AtomicU32::new(0),
            probe_addr: self.probe_addr,
            attached: AtomicU32::new(0),
            ready: AtomicU32::new(0),
        };
        // SAFETY: the mapping is at least one page, page-aligned, and no
        // other process knows the file yet (it is published later through
        // the modex), so this write is exclusive.
        unsafe { (self.map.as_mut_ptr() as *mut Header).write(h) };
        self.fifo().init();
        self.header().ready.store(1, Ordering::Release);
    }

    /// Maps a peer's segment and checks its header.
    pub fn attach(path: &Path) -> Result<Segment, BtlError> {
        let io = |what: &str, e| BtlError::io(format!("{what} {}", path.display()), e);
        let file: File = OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .map_err(|e| io("open", e))?;
        let len = file.metadata().map_err(|e| io("stat", e))?.len() as usize;
        let bad = |r: String| {
            BtlError::io(
                format!("attach {}", path.display()),
                std::io::Error::new(std::io::ErrorKind::InvalidData, r),
            )
        };
        if len < PAGE {
            return Err(bad(format!("segment of {len} bytes is too small")));
        }
        let map = map(&file).map_err(|e| io("mmap", e))?;
        // SAFETY: at least one page, page-aligned; the owner initialised the
        // header before publishing the name (ready is checked below before
        // any other field is trusted); fields are plain integers.
        let h = unsafe { &*(map.as_ptr() as *const Header) };
        if h.ready.load(Ordering::Acquire) != 1 || h.magic != MAGIC || h.version != VERSION {
            return Err(bad(
                "not an initialised tmpi sm segment of this version".into()
            ));
        }
        let layout = Layout {
            slots: h.slots,
            fbox_size: h.fbox_size,
            n_eager: h.n_eager,
            eager_cap: h.eager_cap,
            n_max: h.n_max,
            max_cap: h.max_cap,
        };
        layout.validate().map_err(bad)?;
        if layout.total() > len {
            return Err(bad(format!(
                "layout needs {} bytes, file has {len}",
                layout.total()
            )));
        }
        Ok(Segment {
            pid: h.pid,
            probe_addr: h.probe_addr,
            owner_local: h.owner_local,
            map,
            path: path.to_path_buf(),
            layout,
        })
    }

    fn header(&self) -> &Header {
        // SAFETY: header initialised (create) or checked (attach); the
        // atomics are only used atomically, other fields are immutable.
        unsafe { &*(self.map.as_ptr() as *const Header) }
    }

    /// Counts one more peer that attached (called by the peer).
    pub fn mark_attached(&self) -> u32 {
        self.header().attached.fetch_add(1, Ordering::AcqRel) + 1
    }

    /// Marks the owner finalized ([`Segment::finalized`]).
    pub fn mark_finalized(&self) {
        self.header().finalized.store(1, Ordering::Release);
    }

    /// Whether the owner finalized (it may exit from then on).
    pub fn finalized(&self) -> bool {
        self.header().finalized.load(Ordering::Acquire) == 1
    }

    /// Peers that attached so far.
    pub fn attached(&self) -> u32 {
        self.header().attached.load(Ordering::Acquire)
    }

    /// The layout.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// File path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Base address of the mapping.
    pub fn base(&self) -> usize {
        self.map.as_ptr() as usize
    }

    /// The segment's FIFO.
    pub fn fifo(&self) -> Fifo<'_> {
        // SAFETY: `layout.fifo()` is 64-aligned and inside the validated
        // mapping, which lives as long as `self`; initialised by the owner
        // before `ready`.
        unsafe { Fifo::at((self.base() + self.layout.fifo()) as *mut u8) }
    }

    /// Address and ring size of the fast box written by local rank
    /// `sender` (`None` out of range), for [`Fbox::at`] by a holder that
    /// knows the mapping outlives its use (btl-sm's direct sends).
    pub fn fbox_raw(&self, sender: usize) -> Option<(*mut u8, usize)> {
        if sender >= self.layout.slots as usize {
            return None;
        }
        Some((
            (self.base() + self.layout.fbox(sender)) as *mut u8,
            self.layout.fbox_size as usize,
        ))
    }

    /// The fast box written by local rank `sender` (`None` out of range).
    pub fn fbox(&self, sender: usize) -> Option<Fbox<'_>> {
        if sender >= self.layout.slots as usize {
            return None;
        }
        // SAFETY: slot in range, 64-aligned, inside the validated mapping
        // that outlives the view; zero-initialised by file creation; only
        // `sender` writes and only the owner reads (protocol).
        Some(unsafe {
            Fbox::at(
                (self.base() + self.layout.fbox(sender)) as *mut u8,
                self.layout.fbox_size as usize,
            )
        })
    }

    /// Cooperative-copy slot `i` of this segment (`None` out of range).
    pub fn coop_slot(&self, i: usize) -> Option<&CoopSlot> {
        if i >= COOP_SLOTS {
            return None;
        }
        // SAFETY: slot `i` lies in the slot table between the header page
        // and the FIFO, inside the mapping (`total() >= HDR_AREA`), aligned
        // to 128 (page-aligned base + PAGE + i * 128); all its fields are
        // atomics or padding, for which zeroed file memory is a valid
        // value; the reference lives no longer than the mapping (`&self`).
        Some(unsafe { &*((self.base() + PAGE + i * COOP_SLOT_BYTES) as *const CoopSlot) })
    }

    /// Address of the fragment slot at `off`, with its class and capacity.
    pub fn frag_at(&self, off: usize) -> Option<(*mut FragHdr, Class, usize)> {
        let (c, cap) = self.layout.classify(off)?;
        Some(((self.base() + off) as *mut FragHdr, c, cap))
    }
}

fn map(file: &File) -> std::io::Result<MmapMut> {
    // SAFETY: the file is a shared-memory segment of this job; other
    // processes modify it concurrently, which is why every access to it
    // goes through the atomics and protocols of `shm` rather than through
    // Rust references to plain data.
    unsafe { MmapMut::map_mut(file) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn layout() -> Layout {
        Layout {
            slots: 3,
            fbox_size: 1024,
            n_eager: 4,
            eager_cap: 4096 + 128,
            n_max: 2,
            max_cap: 32768,
        }
    }

    #[test]
    fn layout_classifies_slots() {
        let l = layout();
        l.validate().unwrap();
        for i in 0..4 {
            assert_eq!(l.classify(l.frag(Class::Eager, i)).unwrap().0, Class::Eager);
        }
        for i in 0..2 {
            assert_eq!(l.classify(l.frag(Class::Max, i)), Some((Class::Max, 32768)));
        }
        assert!(l.classify(l.frag(Class::Max, 2)).is_none());
        assert!(l.classify(l.frag(Class::Eager, 1) + 8).is_none());
        assert!(l.classify(0).is_none());
        assert!(l.total() >= l.frag(Class::Max, 2));
        assert!(Layout {
            fbox_size: 1000,
            ..l
        }
        .validate()
        .is_err());
        assert!(Layout {
            fbox_size: 128,
            ..l
        }
        .validate()
        .is_err());
        assert!(Layout {
            n_max: u32::MAX,
            ..l
        }
        .validate()
        .is_err());
    }

    /// Records are placed on 128-byte line pairs relative to the ring
    /// start: the ring itself must start on one.
    #[test]
    fn fast_box_rings_start_on_a_line_pair() {
        for fbox_size in [256, 4096, 1 << 20] {
            let l = Layout {
                fbox_size,
                ..layout()
            };
            l.validate().unwrap();
            for s in 0..l.slots as usize {
                assert_eq!((l.fbox(s) + FBOX_CTL) % crate::shm::FBOX_REC_ALIGN, 0);
            }
        }
    }

    #[test]
    fn create_is_exclusive_0600_and_attachable() {
        let path = PathBuf::from(format!("/dev/shm/tmpi-sm.unit{}.0", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let seg = Segment::create(&path, layout(), 0, 42).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        assert!(matches!(
            Segment::create(&path, layout(), 0, 42),
            Err(BtlError::Io { .. })
        ));
        let peer = Segment::attach(&path).unwrap();
        assert_eq!(peer.layout(), seg.layout());
        assert_eq!(peer.probe_addr, 42);
        assert_eq!(peer.pid, std::process::id());
        assert_eq!(peer.mark_attached(), 1);
        assert_eq!(seg.attached(), 1);
        // the slot table is shared and starts FREE
        let a = seg.coop_slot(COOP_SLOTS - 1).unwrap();
        assert_eq!(a.state.load(Ordering::Relaxed), coop_phase::FREE);
        a.state
            .store(coop_phase::state(7, coop_phase::OWNED), Ordering::Release);
        let b = peer.coop_slot(COOP_SLOTS - 1).unwrap();
        assert_eq!(b.state.load(Ordering::Acquire), (7 << 3) | 1);
        assert!(peer.coop_slot(COOP_SLOTS).is_none());
        assert!(seg.layout().fifo() >= PAGE + COOP_SLOTS * COOP_SLOT_BYTES);
        std::fs::remove_file(&path).unwrap();
        // garbage is refused
        std::fs::write(&path, vec![7u8; 8192]).unwrap();
        assert!(Segment::attach(&path).is_err());
        std::fs::remove_file(&path).unwrap();
    }
}
