//! Request ids, statuses, send modes and the MPI constants of the pml.

use tmpi_base::error::MpiErrorClass;

/// `MPI_PROC_NULL` (Open MPI's value; tm-engine fixes `ANY_SOURCE` to -1).
pub const PROC_NULL: i32 = -2;
/// `MPI_ANY_SOURCE` (same value as `tmpi_tm_engine::MPI_ANY_SOURCE`).
pub const ANY_SOURCE: i32 = -1;
/// `MPI_ANY_TAG` (same value as `tmpi_tm_engine::MPI_ANY_TAG`).
pub const ANY_TAG: i32 = -1;
/// Largest user tag (`MPI_TAG_UB`); tags above are refused.
pub const TAG_UB: i32 = (1 << 30) - 1;
/// Bytes of bookkeeping charged per buffered send against the attached
/// buffer (`MPI_BSEND_OVERHEAD`).
pub const BSEND_OVERHEAD: usize = 96;

/// Identifies one request inside a [`crate::Pml`]: slot index in the low
/// 32 bits, slot generation in the high 32 bits, so a stale id is detected
/// instead of aliasing a newer request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ReqId(pub u64);

impl ReqId {
    pub(crate) fn new(index: u32, gen: u32) -> Self {
        ReqId(((gen as u64) << 32) | index as u64)
    }
    pub(crate) fn index(self) -> usize {
        (self.0 & 0xffff_ffff) as usize
    }
    pub(crate) fn gen(self) -> u32 {
        (self.0 >> 32) as u32
    }
}

/// Identifies a message removed from matching by a matched probe
/// (`MPI_Message`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MessageId(pub u64);

/// `MPI_Status`: what a completed operation reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Status {
    /// Source rank in the communicator (`PROC_NULL` for a receive from it).
    pub source: i32,
    /// Tag of the message (`ANY_TAG` for a receive from `PROC_NULL`).
    pub tag: i32,
    /// Bytes received (for a truncated receive: the bytes written, i.e. the
    /// buffer size); for a probe: the message's full length.
    pub count: usize,
    /// `Success`, or the error of this operation (`Truncate` ...).
    pub error: MpiErrorClass,
    /// Whether the operation was cancelled.
    pub cancelled: bool,
}

impl Status {
    /// An empty status (MPI's "empty status": any source/tag, count 0).
    pub fn empty() -> Self {
        Status {
            source: ANY_SOURCE,
            tag: ANY_TAG,
            count: 0,
            error: MpiErrorClass::Success,
            cancelled: false,
        }
    }
    /// The status of a receive from `PROC_NULL`.
    pub fn proc_null() -> Self {
        Status {
            source: PROC_NULL,
            ..Status::empty()
        }
    }
}

/// MPI send modes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendMode {
    /// `MPI_Send`: eager up to the BTL's limit, rendezvous beyond.
    Standard,
    /// `MPI_Ssend`: completes only once the receiver matched. Always uses the
    /// rendezvous handshake (completion at the receiver's FIN or ACK).
    Synchronous,
    /// `MPI_Rsend`: the caller asserts a receive is posted; handled as
    /// standard (allowed by MPI-3.1 §3.4).
    Ready,
    /// `MPI_Bsend`: the data is copied at once into space accounted against
    /// the attached buffer; the call completes locally.
    Buffered,
}
