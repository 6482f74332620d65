//! Receive in place: where a handler wants a fragment's payload written,
//! for modules that read fragments from a byte stream (tcp) and can put
//! the bytes straight into the destination instead of copying them out of
//! a receive buffer afterwards.

/// Most bytes of a fragment's start a handler may keep as its header
/// ([`Placement::head`]); a module offers at least `min(len, PLACE_HEAD_MAX)`
/// bytes of the fragment to [`crate::BtlRecvHandler::place`].
pub const PLACE_HEAD_MAX: usize = 64;

/// The answer of [`crate::BtlRecvHandler::place`]: the fragment's first
/// [`Placement::head`] bytes are the upper layer's header (handed back to
/// [`crate::BtlRecvHandler::on_placed`]); bytes `head..len` of the fragment
/// go to `dst..dst + len - head`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Placement {
    head: usize,
    dst: *mut u8,
    len: usize,
}

impl Placement {
    /// Bytes `head..head + len` of the fragment go to `dst`.
    ///
    /// # Safety
    /// `dst..dst + len` must be valid for writes, and not read or written
    /// by anyone else, until the module's current `progress` call returns
    /// (the module asks again before it writes in a later call).
    pub unsafe fn new(head: usize, dst: *mut u8, len: usize) -> Placement {
        Placement { head, dst, len }
    }

    /// Bytes of the fragment's start that are its header (not placed).
    pub fn head(&self) -> usize {
        self.head
    }

    /// Bytes placed (`fragment length - head`).
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether nothing is placed.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The destination (valid as [`Placement::new`] promised).
    pub fn dst(&self) -> *mut u8 {
        self.dst
    }
}
