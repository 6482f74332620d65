//! The lock-free structures that live in shared memory, and nothing else:
//! the multi-producer single-consumer fragment FIFO, the single-producer
//! single-consumer fast box, and the fragment header. Every `unsafe` block
//! of the crate that touches shared memory is in this module.
//!
//! # FIFO (one per receiving process)
//! An intrusive MPSC queue of fragments, the algorithm of Open MPI's vader
//! BTL (`opal/mca/btl/vader/btl_vader_fifo.h`), itself the classic
//! swap-the-tail queue (Mellor-Crummey/Scott style, cf. D. Vyukov's
//! "intrusive MPSC node-based queue"). Nodes are fragments living in the
//! *sender's* segment; they are named by *relative pointers*
//! `(local_rank << 32) | offset` so every process can resolve them in its
//! own mappings. [`FREE`] is the null value.
//!
//! Invariants:
//! * `tail` is the last node or [`FREE`]; `head` is the first node or
//!   [`FREE`]. Only producers swap `tail`; only the consumer CASes `tail`
//!   back to [`FREE`].
//! * A producer writes `head` only when it swapped [`FREE`] out of `tail`
//!   (the queue was empty); otherwise it links `prev.next`.
//! * A node's `next` is [`FREE`] while it is the tail or not yet linked;
//!   it is written once by the producer that enqueued behind it.
//! * A node is in at most one FIFO at a time; its owner does not reuse it
//!   before it came back (through the owner's FIFO).
//!
//! Push is wait-free (one swap + one store). Pop never blocks: in the
//! window where a producer swapped the tail but has not yet linked the
//! previous node, pop leaves the queue as it was and reports empty; the
//! next call sees the link.
//!
//! # Fast box (one per ordered pair of processes)
//! A byte ring in the *receiver's* segment written by exactly one sender:
//! `head` (bytes written, monotonic) is written only by the sender, `tail`
//! (bytes consumed) only by the receiver. Records are
//! `[len u32 | tag u8 | kind u8 | pad u8 | 0 u8] ++ data`, padded to 8
//! bytes and then by `pad` more 8-byte words (up to the next 128-byte line
//! pair while the ring is at most half full: [`FBOX_REC_ALIGN`] says why);
//! a record never wraps: a `SKIP` record fills the end of the ring instead.
//! The sender publishes a record with a release store of its header word
//! (kind `DATA`/`SKIP`, never 0), after writing its data and a zero word
//! right after it (so the word at the ring position of `head` is always 0
//! or a published header: the ring keeps 8 bytes free for it). The
//! receiver polls the header word at `tail` (one cache line, which holds
//! the start of the data too: a small message costs the receiver one
//! cross-core transfer, not two as with polling `head` first), and frees
//! records with a release store of `tail` after handling them. `head`
//! is the sender's own counter (and `drained`'s); the sender reads `tail`
//! only when its cached copy shows no room (`write_hinted`).

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

use tmpi_btl::bytes::copy_bytes;

/// Null relative pointer.
pub const FREE: i64 = -2;

/// Bytes of a fragment header (one cache line).
pub const FRAG_HDR: usize = 64;

/// Bytes of a fast-box record header.
pub const FBOX_REC_HDR: usize = 8;

/// While the ring is at most half full, a fast-box record of at most this
/// many bytes is padded so that the next one starts on a multiple of it: an aligned
/// pair of cache lines, the unit x86 cores prefetch together (the spatial
/// prefetcher). Packed to 8 bytes, a 36-byte record (an 8-byte MPI message
/// with its match header) shared a line pair with its neighbours: the
/// receiver spinning on the next header pulled back the pair the sender
/// was writing, and the sender's zero word after the record landed in it
/// too. In a C model of the ring 128-byte records were clearly faster than
/// packed and 64-byte ones, close to a one-line flag alone. Past half full the records are packed
/// (the header says how much padding follows the data), so a stream of
/// small messages still finds room in a small ring.
pub const FBOX_REC_ALIGN: usize = 128;

/// Smallest ring size: two line pairs (padding to a pair never passes the
/// end of a ring whose size is a multiple of the pair).
pub const FBOX_MIN_SIZE: usize = 2 * FBOX_REC_ALIGN;

/// No record (yet) at this position.
const KIND_EMPTY: u8 = 0;
const KIND_DATA: u8 = 1;
const KIND_SKIP: u8 = 2;

/// Relative pointer of `offset` in the segment of local rank `local`.
pub fn rel(local: usize, offset: usize) -> i64 {
    ((local as i64) << 32) | offset as i64
}

/// Inverse of [`rel`]: `(local rank, offset)`.
pub fn unrel(r: i64) -> (usize, usize) {
    ((r >> 32) as usize, (r & 0xffff_ffff) as usize)
}

/// FIFO control block (two cache lines, so the consumer's `head` and the
/// producers' `tail` do not share a line).
#[repr(C, align(64))]
pub struct FifoCtl {
    head: AtomicI64,
    _pad: [u8; 56],
    tail: AtomicI64,
    _pad2: [u8; 56],
}

/// Fragment header, at the start of every fragment slot. `next` is the FIFO
/// link; the other fields are written by the owner before the push and read
/// by the consumer after the pop (ordered by the FIFO's release/acquire).
#[repr(C, align(64))]
pub struct FragHdr {
    /// FIFO link (relative pointer or [`FREE`]).
    pub next: AtomicI64,
    /// Bytes of data after the header.
    pub len: u32,
    /// Upper-layer tag.
    pub tag: u8,
    _pad: [u8; 3],
    /// Local rank of the destination (owner's bookkeeping).
    pub dst: u32,
    _pad2: [u8; 44],
}

const _: () = assert!(std::mem::size_of::<FifoCtl>() == 128);
const _: () = assert!(std::mem::size_of::<FragHdr>() == FRAG_HDR);

/// Fast-box control block.
#[repr(C, align(64))]
pub struct FboxCtl {
    head: AtomicU64,
    _pad: [u8; 56],
    tail: AtomicU64,
    _pad2: [u8; 56],
}

/// Bytes of a fast-box control block.
pub const FBOX_CTL: usize = std::mem::size_of::<FboxCtl>();
/// Bytes of a FIFO control block.
pub const FIFO_CTL: usize = std::mem::size_of::<FifoCtl>();

/// Resolves a relative pointer to the fragment header it names.
pub trait Resolve {
    /// Address of the fragment header named by `r`, or `None` if `r` does
    /// not name a fragment slot of a mapped segment.
    fn frag(&self, r: i64) -> Option<*mut FragHdr>;
}

/// A view of a FIFO control block in mapped memory.
#[derive(Clone, Copy)]
pub struct Fifo<'a> {
    ctl: &'a FifoCtl,
}

impl<'a> Fifo<'a> {
    /// # Safety
    /// `p` must be 64-byte aligned, point to [`FIFO_CTL`] bytes of a live
    /// (shared) mapping that outlives `'a`, and be initialised with
    /// [`Fifo::init`] before any concurrent use.
    pub unsafe fn at(p: *mut u8) -> Fifo<'a> {
        // SAFETY: per the caller's contract the memory is valid, aligned
        // and only accessed atomically by all parties.
        Fifo {
            ctl: unsafe { &*(p as *const FifoCtl) },
        }
    }

    /// Makes the FIFO empty (owner only, before publishing the segment).
    pub fn init(&self) {
        self.ctl.head.store(FREE, Ordering::Relaxed);
        self.ctl.tail.store(FREE, Ordering::Release);
    }

    /// Enqueues the fragment `r`. Any process may push.
    ///
    /// # Safety
    /// `r` must resolve (through `res`) to a fragment header of a live
    /// mapping that is in no FIFO, and the caller must own it (it was
    /// allocated by this process, or popped by this process and not pushed
    /// since).
    pub unsafe fn push(&self, r: i64, res: &impl Resolve) -> bool {
        let Some(node) = res.frag(r) else {
            return false;
        };
        // SAFETY: `node` is a fragment header in a live mapping (contract);
        // `next` is atomic.
        unsafe { (*node).next.store(FREE, Ordering::Relaxed) };
        let prev = self.ctl.tail.swap(r, Ordering::AcqRel);
        if prev == FREE {
            self.ctl.head.store(r, Ordering::Release);
        } else if let Some(p) = res.frag(prev) {
            // SAFETY: `prev` was the tail, so it is a fragment in this FIFO
            // whose `next` only we may write now (invariant 3).
            unsafe { (*p).next.store(r, Ordering::Release) };
        } else {
            // A corrupt tail (unresolvable) cannot be linked; the FIFO is
            // broken. Report so the caller can fail loudly.
            return false;
        }
        true
    }

    /// Whether the queue holds nothing right now (consumer side; a push
    /// racing with this check is seen by the next one).
    #[inline]
    pub fn looks_empty(&self) -> bool {
        self.ctl.head.load(Ordering::Relaxed) == FREE
    }

    /// Dequeues one fragment (consumer only: the process owning the FIFO).
    /// `None` when empty or when a producer is mid-push (retry later).
    ///
    /// # Safety
    /// Only one thread of one process may pop this FIFO; `res` must resolve
    /// every fragment that producers push.
    pub unsafe fn pop(&self, res: &impl Resolve) -> Option<i64> {
        let r = self.ctl.head.load(Ordering::Acquire);
        if r == FREE {
            return None;
        }
        let node = res.frag(r)?;
        // Take the head before trying to close the queue: a producer that
        // finds the queue empty after our CAS writes `head`, and that write
        // must not be overwritten by ours.
        self.ctl.head.store(FREE, Ordering::Relaxed);
        // SAFETY: `node` is the head fragment (resolved above).
        let mut next = unsafe { (*node).next.load(Ordering::Acquire) };
        if next == FREE {
            if self
                .ctl
                .tail
                .compare_exchange(r, FREE, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                return Some(r);
            }
            // A producer swapped the tail after `r` and will link
            // `r.next`; look once more, otherwise restore the head (no
            // producer writes `head` while `tail != FREE`) and retry later.
            // SAFETY: as above.
            next = unsafe { (*node).next.load(Ordering::Acquire) };
            if next == FREE {
                self.ctl.head.store(r, Ordering::Release);
                return None;
            }
        }
        self.ctl.head.store(next, Ordering::Release);
        Some(r)
    }
}

/// A view of one fast box (control block + data ring) in mapped memory.
pub struct Fbox<'a> {
    ctl: &'a FboxCtl,
    data: *mut u8,
    size: usize,
}

impl<'a> Fbox<'a> {
    /// # Safety
    /// `p` must be 64-byte aligned and point to `FBOX_CTL + size` bytes of a
    /// live mapping that outlives `'a`; `size` must be a power of two and a
    /// multiple of 8; exactly one process writes (sender) and one reads
    /// (receiver); control words zeroed before first use.
    pub unsafe fn at(p: *mut u8, size: usize) -> Fbox<'a> {
        Fbox {
            // SAFETY: caller contract: valid, aligned, atomically accessed.
            ctl: unsafe { &*(p as *const FboxCtl) },
            // SAFETY: in bounds of the same mapping (contract).
            data: unsafe { p.add(FBOX_CTL) },
            size,
        }
    }

    /// Largest data length a record can have in a ring of `size` bytes.
    pub fn max_record(size: usize) -> usize {
        size / 2 - FBOX_REC_HDR
    }

    /// Whether every record written so far was consumed (sender side).
    pub fn drained(&self) -> bool {
        self.ctl.tail.load(Ordering::Acquire) == self.ctl.head.load(Ordering::Relaxed)
    }

    /// Writes one record `header ++ payload` tagged `tag` (sender only).
    /// `false` when there is no room now.
    pub fn write(&self, tag: u8, header: &[u8], payload: &[u8]) -> bool {
        let mut hint = TailHint {
            tail: self.ctl.tail.load(Ordering::Acquire),
            at: self.ctl.head.load(Ordering::Relaxed),
        };
        self.write_hinted(&mut hint, true, tag, header, payload)
    }

    /// As [`Fbox::write`], with the sender's last seen value of the
    /// receiver's `tail` in `tail_hint` (zeros for a fresh ring): the
    /// shared `tail` is read only when the hint shows no room, or no room
    /// for a padded record and the last read was a while ago, and the
    /// hint is then updated. A stale hint only underestimates the free space, so
    /// nothing unread is overwritten; in the common case the write touches
    /// no cache line the receiver modified (a cross-core miss on the
    /// critical path of every small message otherwise).
    #[inline(always)]
    pub fn write_hinted(
        &self,
        tail_hint: &mut TailHint,
        pad_ok: bool,
        tag: u8,
        header: &[u8],
        payload: &[u8],
    ) -> bool {
        let len = header.len() + payload.len();
        if len > Self::max_record(self.size) {
            return false;
        }
        let packed = FBOX_REC_HDR + len.div_ceil(8) * 8;
        let head = self.ctl.head.load(Ordering::Relaxed);
        let pos = (head as usize) & (self.size - 1);
        let skip = if pos + packed > self.size {
            self.size - pos
        } else {
            0
        };
        let at = if skip > 0 { 0 } else { pos };
        // Padding that makes the next record start on a line pair (the
        // size is a multiple of the pair, so it never passes the ring end),
        // for records of one pair at most: larger ones measured no better
        // padded, see FBOX_REC_ALIGN.
        let pad = if pad_ok && packed <= FBOX_REC_ALIGN {
            (at + packed).wrapping_neg() & (FBOX_REC_ALIGN - 1)
        } else {
            0
        };
        // Bytes in use after this record of `rec` bytes, if the receiver's
        // tail is `tail`. A hint above `head` cannot come from this ring:
        // treat as full.
        let used_after = |tail: u64, rec: usize| {
            if tail <= head {
                head.wrapping_sub(tail) as usize + skip + rec
            } else {
                usize::MAX
            }
        };
        // Padded while the ring is at most half full (the common case of
        // a message or a few in flight); packed beyond, so a stream of
        // small messages still finds room. FBOX_REC_HDR: the zero word
        // after the record.
        // (A record that is not padded only needs room: each refresh of
        // the hint below costs a cross-core miss, so it is not done early.)
        let roomy = |tail: u64| pad > 0 && used_after(tail, packed + pad) <= self.size / 2;
        let fits = |tail: u64| used_after(tail, packed).saturating_add(FBOX_REC_HDR) <= self.size;
        // A stream the receiver lags behind by more than half the ring
        // would otherwise refresh on every record: at most once per
        // REFRESH_EVERY bytes written unless the record does not fit.
        let recent = head.wrapping_sub(tail_hint.at) < (self.size / REFRESH_EVERY) as u64;
        let rec = if roomy(tail_hint.tail) {
            packed + pad
        } else if (pad == 0 || recent) && fits(tail_hint.tail) {
            packed
        } else {
            tail_hint.tail = self.ctl.tail.load(Ordering::Acquire);
            tail_hint.at = head;
            if roomy(tail_hint.tail) {
                packed + pad
            } else if fits(tail_hint.tail) {
                packed
            } else {
                return false;
            }
        };
        // SAFETY: the bytes `pos..pos+skip`, the record's bytes and the
        // word after them lie in the free part of the ring
        // (`used + skip + rec + 8 <= size`); the receiver reads nothing
        // there but the header word at `pos` (0 until the release stores
        // below, which come after the data and the next zero word); `data`
        // covers `size` bytes (constructor contract); positions are 8-byte
        // aligned, so header words are aligned for atomic access.
        unsafe {
            let p = self.data.add(at);
            let d = p.add(FBOX_REC_HDR);
            copy_bytes(header.as_ptr(), d, header.len());
            copy_bytes(payload.as_ptr(), d.add(header.len()), payload.len());
            let next = (at + rec) & (self.size - 1);
            rec_word(self.data.add(next)).store(0, Ordering::Relaxed);
            let pad_words = ((rec - packed) / 8) as u8;
            rec_word(p).store(
                rec_hdr(len as u32, tag, KIND_DATA, pad_words),
                Ordering::Release,
            );
            if skip > 0 {
                rec_word(self.data.add(pos)).store(rec_hdr(0, 0, KIND_SKIP, 0), Ordering::Release);
            }
        }
        // The sender's own counter (the receiver does not read it).
        self.ctl
            .head
            .store(head + (skip + rec) as u64, Ordering::Release);
        true
    }

    /// The record at reader position `tail` (receiver only), past a skip
    /// marker there.
    #[inline(always)]
    fn head(&self, mut tail: u64) -> Head<'_> {
        loop {
            let pos = (tail as usize) & (self.size - 1);
            // SAFETY: `pos` is 8-byte aligned (records are padded to 8) and
            // in bounds; the sender writes this word only atomically.
            let w = unsafe { rec_word(self.data.add(pos)) }.load(Ordering::Acquire);
            let (len, tag, kind) = (w as u32, (w >> 32) as u8, (w >> 40) as u8);
            let rec =
                FBOX_REC_HDR + (len as usize).div_ceil(8) * 8 + ((w >> 48) as u8 as usize) * 8;
            match kind {
                KIND_EMPTY => return Head::Empty(tail),
                // The writer never puts a SKIP at position 0 (a record always
                // fits an empty ring): one there would send `tail` round the
                // ring forever without consuming anything (found by fuzzing:
                // a corrupt ring made `read` spin). Treated as corrupt.
                KIND_SKIP if pos != 0 => {
                    tail += (self.size - pos) as u64;
                }
                KIND_DATA
                    if (len as usize) <= Self::max_record(self.size) && pos + rec <= self.size =>
                {
                    // SAFETY: the header was published (acquired above)
                    // after the record's bytes; they are in bounds (checked)
                    // and the sender does not touch them before `tail`
                    // moves past them.
                    let bytes = unsafe {
                        std::slice::from_raw_parts(self.data.add(pos + FBOX_REC_HDR), len as usize)
                    };
                    let next = tail + rec as u64;
                    return Head::Record(tag, bytes, next);
                }
                _ => return Head::Corrupt(tail),
            }
        }
    }

    /// Hands up to `budget` records to `f` (receiver only), freeing each
    /// after `f` returns. Returns the number of records handled, or the
    /// position of a corrupt record as `Err`.
    pub fn read(&self, budget: usize, f: &mut dyn FnMut(u8, &[u8])) -> Result<usize, u64> {
        let start = self.ctl.tail.load(Ordering::Relaxed);
        let mut tail = start;
        let mut n = 0;
        let res = loop {
            if n >= budget {
                break Ok(n);
            }
            match self.head(tail) {
                Head::Record(tag, bytes, next) => {
                    f(tag, bytes);
                    tail = next;
                    n += 1;
                }
                Head::Empty(at) => {
                    tail = at;
                    break Ok(n);
                }
                Head::Corrupt(pos) => break Err(pos),
            }
        };
        // One release store for the whole batch: the sender may reuse the
        // space once the records were handled. None for an empty round: the
        // line stays shared with a sender that read it.
        if tail != start {
            self.ctl.tail.store(tail, Ordering::Release);
        }
        res
    }

    /// Offers the record at the reader's position to `take` (receiver
    /// only): it is freed when `take` returns `true`, left in place (for
    /// the next `read`) otherwise. Returns whether it was taken; `false`
    /// also when there is none or it is corrupt (`read` reports that).
    #[inline(always)]
    pub fn take_head(&self, take: &mut dyn FnMut(u8, &[u8]) -> bool) -> bool {
        let start = self.ctl.tail.load(Ordering::Relaxed);
        let (taken, tail) = match self.head(start) {
            Head::Record(tag, bytes, next) => {
                if take(tag, bytes) {
                    (true, next)
                } else {
                    (false, start)
                }
            }
            _ => (false, start),
        };
        if tail != start {
            self.ctl.tail.store(tail, Ordering::Release);
        }
        taken
    }
}

/// The sender's view of a fast box's reader ([`Fbox::write_hinted`]): the
/// last value of `tail` it read, and its own `head` when it read it.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct TailHint {
    /// The receiver's `tail` as last read.
    pub tail: u64,
    /// The sender's `head` at that read.
    pub at: u64,
}

/// A sender that found no room for a padded record reads the shared `tail`
/// again only after writing `size / REFRESH_EVERY` more bytes (while the
/// record still fits packed).
const REFRESH_EVERY: usize = 8;

/// What [`Fbox::head`] found at a reader position.
enum Head<'b> {
    /// A record (tag, bytes) and the reader position after it.
    Record(u8, &'b [u8], u64),
    /// None published yet: the position to keep (past a skip marker).
    Empty(u64),
    /// A corrupt header at this position.
    Corrupt(u64),
}

/// A record header word: data length, tag, kind, and the 8-byte words of
/// padding after the (8-byte padded) data.
fn rec_hdr(len: u32, tag: u8, kind: u8, pad_words: u8) -> u64 {
    (len as u64) | ((tag as u64) << 32) | ((kind as u64) << 40) | ((pad_words as u64) << 48)
}

/// The record header word at `p`, for atomic access.
///
/// # Safety
/// `p` is 8-byte aligned and points to 8 bytes of the live ring mapping,
/// which outlives the returned reference.
unsafe fn rec_word<'a>(p: *mut u8) -> &'a AtomicU64 {
    // SAFETY: caller contract (aligned, valid); the word is accessed
    // atomically by both sides.
    unsafe { &*(p as *const AtomicU64) }
}

/// Writes a fragment's header fields and data (owner, before pushing).
///
/// # Safety
/// `hdr` is a fragment slot of this process's own segment with room for
/// `header.len() + payload.len()` data bytes, in no FIFO.
pub unsafe fn fill_frag(hdr: *mut FragHdr, tag: u8, dst: u32, header: &[u8], payload: &[u8]) {
    // SAFETY: caller contract: exclusive, in bounds.
    unsafe {
        (*hdr).len = (header.len() + payload.len()) as u32;
        (*hdr).tag = tag;
        (*hdr).dst = dst;
        let d = (hdr as *mut u8).add(FRAG_HDR);
        std::ptr::copy_nonoverlapping(header.as_ptr(), d, header.len());
        std::ptr::copy_nonoverlapping(payload.as_ptr(), d.add(header.len()), payload.len());
    }
}

/// Reads a popped fragment: `(tag, dst, data)`, the data at most `cap`
/// bytes (a longer `len` is reported as `Err(len)`).
///
/// # Safety
/// `hdr` was popped from this process's FIFO (so its fields are visible and
/// stable) and has `cap` data bytes; the slice must not outlive the time
/// before the fragment is pushed back.
pub unsafe fn frag_data<'a>(hdr: *const FragHdr, cap: usize) -> Result<(u8, u32, &'a [u8]), u32> {
    // SAFETY: caller contract.
    unsafe {
        let len = (*hdr).len;
        if len as usize > cap {
            return Err(len);
        }
        let d = (hdr as *const u8).add(FRAG_HDR);
        Ok((
            (*hdr).tag,
            (*hdr).dst,
            std::slice::from_raw_parts(d, len as usize),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;

    /// 64-byte aligned heap memory standing in for a segment.
    #[derive(Clone, Copy)]
    #[repr(C, align(64))]
    struct Line([u64; 8]);

    struct Mem {
        words: Vec<Line>,
    }
    impl Mem {
        fn new(bytes: usize) -> Mem {
            Mem {
                words: vec![Line([0u64; 8]); bytes.div_ceil(64)],
            }
        }
        fn base(&self) -> usize {
            self.words.as_ptr() as usize
        }
    }

    /// All "segments" are one buffer: local rank 0, fragment slots of
    /// `slot` bytes starting at `first`.
    struct Res {
        base: usize,
        first: usize,
        slot: usize,
        n: usize,
    }
    impl Resolve for Res {
        fn frag(&self, r: i64) -> Option<*mut FragHdr> {
            let (l, off) = unrel(r);
            if l != 0 || off < self.first || !(off - self.first).is_multiple_of(self.slot) {
                return None;
            }
            if (off - self.first) / self.slot >= self.n {
                return None;
            }
            Some((self.base + off) as *mut FragHdr)
        }
    }

    /// The real protocol in threads: P producers each own F fragments,
    /// push them (with a sequence number) onto the consumer's FIFO; the
    /// consumer checks order and exactly-once, and returns each fragment to
    /// its owner's FIFO, which only the owner pops.
    #[test]
    fn fifo_mpsc_stress_exactly_once_in_order() {
        const P: usize = 4;
        const F: usize = 8;
        const MSGS: u32 = 5_000;
        let slot = FRAG_HDR + 64;
        let first = (P + 1) * FIFO_CTL;
        let mem = Arc::new(Mem::new(first + P * F * slot));
        let base = mem.base();
        // FIFO 0 = consumer, 1..=P = producers' return FIFOs
        for i in 0..=P {
            // SAFETY: aligned, in bounds, not shared yet.
            unsafe { Fifo::at((base + i * FIFO_CTL) as *mut u8) }.init();
        }
        let done = Arc::new(AtomicBool::new(false));
        let mut hs = Vec::new();
        for p in 0..P {
            let mem = mem.clone();
            hs.push(std::thread::spawn(move || {
                let base = mem.base();
                let res = Res {
                    base,
                    first,
                    slot,
                    n: P * F,
                };
                // SAFETY: as above; FIFOs live as long as `mem`.
                let cons = unsafe { Fifo::at(base as *mut u8) };
                // SAFETY: as above.
                let mine = unsafe { Fifo::at((base + (p + 1) * FIFO_CTL) as *mut u8) };
                let mut free: Vec<i64> =
                    (0..F).map(|i| rel(0, first + (p * F + i) * slot)).collect();
                let mut seq = 0u32;
                while seq < MSGS {
                    // SAFETY: only this thread pops its return FIFO.
                    while let Some(r) = unsafe { mine.pop(&res) } {
                        free.push(r);
                    }
                    let Some(r) = free.pop() else {
                        std::thread::yield_now();
                        continue;
                    };
                    let h = res.frag(r).unwrap();
                    let mut b = [0u8; 8];
                    b[..4].copy_from_slice(&seq.to_le_bytes());
                    b[4..].copy_from_slice(&(p as u32).to_le_bytes());
                    // SAFETY: `r` is ours and in no FIFO.
                    unsafe {
                        fill_frag(h, p as u8, 0, &b, &[]);
                        assert!(cons.push(r, &res));
                    }
                    seq += 1;
                }
                // wait for all our fragments to come back (nothing lost)
                while free.len() < F {
                    // SAFETY: only this thread pops its return FIFO.
                    if let Some(r) = unsafe { mine.pop(&res) } {
                        free.push(r);
                    } else {
                        std::thread::yield_now();
                    }
                }
                free.sort();
                free.dedup();
                assert_eq!(free.len(), F, "fragment returned twice");
            }));
        }
        let res = Res {
            base,
            first,
            slot,
            n: P * F,
        };
        // SAFETY: as above.
        let cons = unsafe { Fifo::at(base as *mut u8) };
        let mut next = [0u32; P];
        let mut total = 0u64;
        while total < P as u64 * MSGS as u64 {
            // SAFETY: single consumer.
            let Some(r) = (unsafe { cons.pop(&res) }) else {
                std::thread::yield_now();
                continue;
            };
            let h = res.frag(r).unwrap();
            // SAFETY: popped, stable until pushed back.
            let (tag, _, d) = unsafe { frag_data(h, 64) }.unwrap();
            let seq = u32::from_le_bytes(d[..4].try_into().unwrap());
            let p = u32::from_le_bytes(d[4..8].try_into().unwrap()) as usize;
            assert_eq!(tag as usize, p);
            assert_eq!(seq, next[p], "producer {p} out of order");
            next[p] += 1;
            total += 1;
            // SAFETY: popped by us, pushed once to its owner.
            let back = unsafe { Fifo::at((base + (p + 1) * FIFO_CTL) as *mut u8) };
            // SAFETY: we own `r` now.
            assert!(unsafe { back.push(r, &res) });
        }
        done.store(true, Ordering::Relaxed);
        for h in hs {
            h.join().unwrap();
        }
        // SAFETY: single consumer.
        assert!(unsafe { cons.pop(&res) }.is_none());
        assert_eq!(next, [MSGS; P]);
    }

    #[test]
    fn fifo_rejects_unresolvable() {
        let mem = Mem::new(FIFO_CTL + 4 * 128);
        let res = Res {
            base: mem.base(),
            first: FIFO_CTL,
            slot: 128,
            n: 4,
        };
        // SAFETY: aligned, in bounds, single thread.
        let f = unsafe { Fifo::at(mem.base() as *mut u8) };
        f.init();
        // SAFETY: single thread; invalid pointers are refused, not followed.
        unsafe {
            assert!(!f.push(rel(0, FIFO_CTL + 1), &res));
            assert!(!f.push(rel(1, FIFO_CTL), &res));
            assert!(f.pop(&res).is_none());
            assert!(f.push(rel(0, FIFO_CTL + 128), &res));
            assert!(f.push(rel(0, FIFO_CTL), &res));
            assert_eq!(f.pop(&res), Some(rel(0, FIFO_CTL + 128)));
            assert_eq!(f.pop(&res), Some(rel(0, FIFO_CTL)));
            assert_eq!(f.pop(&res), None);
        }
    }

    /// The window a loom run would find: a producer swapped the tail but
    /// has not linked the previous node yet. Pop must neither lose nor
    /// block: it reports empty, leaves the queue intact, and delivers both
    /// nodes in order once the link is written.
    #[test]
    fn fifo_pop_during_unfinished_push() {
        let mem = Mem::new(FIFO_CTL + 4 * 128);
        let res = Res {
            base: mem.base(),
            first: FIFO_CTL,
            slot: 128,
            n: 4,
        };
        // SAFETY: aligned, in bounds, single thread.
        let f = unsafe { Fifo::at(mem.base() as *mut u8) };
        f.init();
        let a = rel(0, FIFO_CTL);
        let b = rel(0, FIFO_CTL + 128);
        // SAFETY: single thread; `a`/`b` are slots of `mem`.
        unsafe {
            assert!(f.push(a, &res));
            // first half of push(b): swap the tail, do not link yet
            (*res.frag(b).unwrap()).next.store(FREE, Ordering::Relaxed);
            assert_eq!(f.ctl.tail.swap(b, Ordering::AcqRel), a);
            assert_eq!(f.pop(&res), None, "cannot take `a` before it is linked");
            assert_eq!(f.ctl.head.load(Ordering::Relaxed), a, "head restored");
            // second half: link
            (*res.frag(a).unwrap()).next.store(b, Ordering::Release);
            assert_eq!(f.pop(&res), Some(a));
            assert_eq!(f.pop(&res), Some(b));
            assert_eq!(f.pop(&res), None);
            assert_eq!(f.ctl.tail.load(Ordering::Relaxed), FREE);
            // empty again: the next push writes the head
            assert!(f.push(a, &res));
            assert_eq!(f.pop(&res), Some(a));
            assert_eq!(f.pop(&res), None);
        }
    }

    #[test]
    fn fbox_spsc_stress_wraps_in_order() {
        fbox_spsc_stress(false);
    }

    /// The module's path: the writer keeps a (stale) copy of `tail`.
    #[test]
    fn fbox_spsc_stress_hinted_tail_wraps_in_order() {
        fbox_spsc_stress(true);
    }

    fn fbox_spsc_stress(hinted: bool) {
        const SIZE: usize = 512;
        const N: u32 = 30_000;
        let mem = Arc::new(Mem::new(FBOX_CTL + SIZE));
        let m2 = mem.clone();
        let writer = std::thread::spawn(move || {
            // SAFETY: aligned, sized, one writer.
            let fb = unsafe { Fbox::at(m2.base() as *mut u8, SIZE) };
            let mut i = 0u32;
            let mut hint = TailHint::default();
            while i < N {
                let len = (i as usize * 7) % (Fbox::max_record(SIZE) - 4);
                let payload: Vec<u8> = (0..len).map(|k| (k as u32 ^ i) as u8).collect();
                let tag = (i % 251) as u8;
                let ok = if hinted {
                    fb.write_hinted(
                        &mut hint,
                        !i.is_multiple_of(3),
                        tag,
                        &i.to_le_bytes(),
                        &payload,
                    )
                } else {
                    fb.write(tag, &i.to_le_bytes(), &payload)
                };
                if ok {
                    i += 1;
                } else {
                    std::thread::yield_now();
                }
            }
        });
        // SAFETY: aligned, sized, one reader.
        let fb = unsafe { Fbox::at(mem.base() as *mut u8, SIZE) };
        let mut next = 0u32;
        while next < N {
            fb.read(16, &mut |tag, b| {
                let i = u32::from_le_bytes(b[..4].try_into().unwrap());
                assert_eq!(i, next);
                assert_eq!(tag, (i % 251) as u8);
                let len = (i as usize * 7) % (Fbox::max_record(SIZE) - 4);
                assert_eq!(b.len(), 4 + len);
                assert!(b[4..]
                    .iter()
                    .enumerate()
                    .all(|(k, &x)| x == (k as u32 ^ i) as u8));
                next += 1;
            })
            .unwrap();
            if next < N {
                // Two cores run every test thread of the crate: a reader
                // spinning without yielding made the run take 1-30 s.
                std::thread::yield_now();
            }
        }
        writer.join().unwrap();
        assert!(fb.drained());
        assert!(!fb.write(0, &[0; 256], &[]), "too large for the ring");
    }

    #[test]
    fn fbox_full_and_corrupt() {
        const SIZE: usize = 1024;
        let mem = Mem::new(FBOX_CTL + SIZE);
        // SAFETY: aligned, sized, single thread.
        let fb = unsafe { Fbox::at(mem.base() as *mut u8, SIZE) };
        // Lightly used: a record of one line pair at most ends on a pair,
        // a larger one is packed (and the next small one aligns again).
        for len in [0, 1, 119, 120, 121, 0, 200, 1, 5] {
            let before = fb.ctl.head.load(Ordering::Relaxed);
            assert!(fb.write(2, &vec![7; len], &[]));
            let after = fb.ctl.head.load(Ordering::Relaxed);
            let packed = (FBOX_REC_HDR + len.div_ceil(8) * 8) as u64;
            if packed <= FBOX_REC_ALIGN as u64 {
                assert_eq!(after % FBOX_REC_ALIGN as u64, 0, "len {len}");
                assert!(after - before >= packed);
            } else {
                assert_eq!(after - before, packed, "len {len}");
            }
            assert_eq!(fb.read(1, &mut |_, b| assert_eq!(b.len(), len)), Ok(1));
        }
        assert!(fb.drained());
        // Filling: padded up to half the ring, packed (16-byte records)
        // beyond; one 8-byte word stays free (the zero word after the
        // newest record).
        let mut n = 0;
        while fb.write(1, b"12345678", &[]) {
            n += 1;
        }
        let padded = SIZE / 2 / FBOX_REC_ALIGN;
        assert_eq!(n, padded + (SIZE / 2 - 8) / 16);
        assert!(!fb.drained());
        assert_eq!(fb.read(100, &mut |_, b| assert_eq!(b, b"12345678")), Ok(n));
        assert!(fb.drained());
        // corrupt record kind
        assert!(fb.write(1, b"x", &[]));
        let pos = (fb.ctl.tail.load(Ordering::Relaxed) as usize) & (SIZE - 1);
        // SAFETY: in bounds, single thread.
        unsafe { rec_word(fb.data.add(pos)).store(rec_hdr(1, 1, 9, 0), Ordering::Relaxed) };
        assert!(fb.read(1, &mut |_, _| panic!("corrupt delivered")).is_err());
    }

    #[test]
    fn fbox_take_head_in_order_across_the_wrap() {
        // One- and two-pair records (every fourth is two) in a 1 KiB ring:
        // writes regularly wrap with a skip marker. take_head refusals
        // leave the record for `read`; accepted ones free it; both agree
        // on the order.
        const SIZE: usize = 1024;
        let mem = Mem::new(FBOX_CTL + SIZE);
        // SAFETY: aligned, sized, single thread.
        let fb = unsafe { Fbox::at(mem.base() as *mut u8, SIZE) };
        assert!(!fb.take_head(&mut |_, _| panic!("empty ring offered a record")));
        let mut next_write = 0u64;
        let mut next_read = 0u64;
        let mut skips = 0;
        for round in 0..40 {
            loop {
                let payload: &[u8] = if next_write.is_multiple_of(4) {
                    &[b'a'; 150]
                } else {
                    b"abcdefgh"
                };
                let before = fb.ctl.head.load(Ordering::Relaxed);
                if !fb.write(3, &next_write.to_le_bytes(), payload) {
                    break;
                }
                let pos = before as usize % SIZE;
                if pos + (fb.ctl.head.load(Ordering::Relaxed) - before) as usize > SIZE {
                    skips += 1;
                }
                next_write += 1;
            }
            // Refused: still there, same record.
            let mut seen = None;
            assert!(!fb.take_head(&mut |_, b| {
                seen = Some(u64::from_le_bytes(b[..8].try_into().unwrap()));
                false
            }));
            assert_eq!(seen, Some(next_read));
            // Alternate: take one through take_head, the rest through read.
            assert!(fb.take_head(&mut |tag, b| {
                assert_eq!(tag, 3);
                assert!(&b[8..] == b"abcdefgh" || b[8..] == [b'a'; 150][..]);
                assert_eq!(u64::from_le_bytes(b[..8].try_into().unwrap()), next_read);
                true
            }));
            next_read += 1;
            let budget = if round % 2 == 0 { 1 } else { 100 };
            let got = fb
                .read(budget, &mut |_, b| {
                    assert_eq!(u64::from_le_bytes(b[..8].try_into().unwrap()), next_read);
                    next_read += 1;
                })
                .unwrap();
            assert!(got >= 1);
        }
        fb.read(100, &mut |_, b| {
            assert_eq!(u64::from_le_bytes(b[..8].try_into().unwrap()), next_read);
            next_read += 1;
        })
        .unwrap();
        assert_eq!(next_read, next_write);
        assert!(skips > 0, "no write wrapped with a skip marker");
        assert!(fb.drained());
        assert!(!fb.take_head(&mut |_, _| panic!("drained ring offered a record")));
    }

    #[test]
    fn fbox_skip_at_ring_start_is_corrupt() {
        // A peer publishing far ahead with a SKIP record at position 0 must
        // not make the reader spin (fuzz finding).
        const SIZE: usize = FBOX_MIN_SIZE;
        let mem = Mem::new(FBOX_CTL + SIZE);
        // SAFETY: aligned, sized, single thread.
        let fb = unsafe { Fbox::at(mem.base() as *mut u8, SIZE) };
        // SAFETY: in bounds, single thread.
        unsafe { rec_word(fb.data).store(rec_hdr(0, 0, KIND_SKIP, 0), Ordering::Relaxed) };
        fb.ctl.head.store(u64::MAX / 2, Ordering::Release);
        assert_eq!(fb.read(4, &mut |_, _| panic!("delivered")), Err(0));
    }
}
