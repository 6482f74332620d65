//! The per-peer state shared by [`crate::SmModule`] and the direct
//! handles it gives the pml. [`PeerRx`] ([`DirectRecv`]): the fast box the
//! peer writes in this process's segment, whose head record the pml's
//! blocking receive may take. [`PeerTx`] ([`DirectSend`]): the peer's fast box, the
//! sender's hint of its `tail`, and the FIFO fragments outstanding to the
//! peer (while there are any, a fast-box record could overtake them, so
//! both the module and the handle fall back to the FIFO).
//!
//! The fields are atomics accessed with relaxed loads and stores (plain
//! moves on x86): the module and the handles are used under one lock (the
//! pml's), so there is no concurrent writer; the atomics only make the
//! sharing expressible without `unsafe impl Sync`.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;

use tmpi_btl::{DirectRecv, DirectSend};

use crate::shm::{Fbox, TailHint};

/// Sending state for one local peer.
#[derive(Debug, Default)]
pub(crate) struct PeerTx {
    /// Address of the fast box this process writes in the peer's segment
    /// (0 until attached).
    fbox: AtomicUsize,
    /// Its ring size in bytes.
    size: AtomicUsize,
    /// Largest fragment that goes through the fast box (`btl_sm_fbox_max`).
    fbox_max: AtomicUsize,
    /// The last value of the peer's `tail` read (`Fbox::write_hinted`).
    tail_hint: AtomicU64,
    /// This sender's `head` when it read it.
    tail_hint_at: AtomicU64,
    /// Own FIFO fragments outstanding to the peer, per class
    /// (`[eager, max]`).
    held: [AtomicU32; 2],
    /// Records written to the fast box.
    sends: AtomicU64,
    /// Whether a record of this peer was read since the last record to
    /// it was written: the exchange is a ping-pong (pad the next record
    /// to its own cache-line pair) rather than a stream (pack it).
    heard: AtomicBool,
}

impl PeerTx {
    /// Records the peer's fast box once its segment is attached.
    pub(crate) fn attach(&self, fbox: *mut u8, size: usize, fbox_max: usize) {
        self.size.store(size, Relaxed);
        self.fbox_max.store(fbox_max, Relaxed);
        self.fbox.store(fbox as usize, Relaxed);
    }

    /// Forgets the fast box (the segment is about to be unmapped).
    pub(crate) fn detach(&self) {
        self.fbox.store(0, Relaxed);
    }

    pub(crate) fn held(&self) -> [u32; 2] {
        [self.held[0].load(Relaxed), self.held[1].load(Relaxed)]
    }

    pub(crate) fn held_add(&self, class: usize) {
        let h = &self.held[class];
        h.store(h.load(Relaxed) + 1, Relaxed);
    }

    pub(crate) fn held_sub(&self, class: usize) {
        let h = &self.held[class];
        h.store(h.load(Relaxed).saturating_sub(1), Relaxed);
    }

    /// A record of this peer was read (its fast box to us).
    #[inline]
    pub(crate) fn heard(&self) {
        self.heard.store(true, Relaxed);
    }

    pub(crate) fn sends(&self) -> u64 {
        self.sends.load(Relaxed)
    }

    /// Writes one fast-box record if the fragment fits, nothing is
    /// outstanding in the FIFO to this peer and the ring has room.
    ///
    /// # Safety
    /// No other write to this fast box is in progress (all writers are
    /// serialized: [`DirectSend::try_send`]'s contract), and the peer's
    /// segment is still mapped (the module detaches before unmapping).
    pub(crate) unsafe fn try_write(&self, tag: u8, header: &[u8], payload: &[u8]) -> bool {
        let addr = self.fbox.load(Relaxed);
        if addr == 0
            || header.len() + payload.len() > self.fbox_max.load(Relaxed)
            || self.held[0].load(Relaxed) | self.held[1].load(Relaxed) != 0
        {
            return false;
        }
        // SAFETY: `addr` is the 64-aligned fast box of `size` bytes that
        // `attach` recorded from the peer's validated segment, still mapped
        // (contract); this process is its only writer and no other write is
        // in progress (contract).
        let fb = unsafe { Fbox::at(addr as *mut u8, self.size.load(Relaxed)) };
        let mut hint = TailHint {
            tail: self.tail_hint.load(Relaxed),
            at: self.tail_hint_at.load(Relaxed),
        };
        let reply = self.heard.load(Relaxed);
        let ok = fb.write_hinted(&mut hint, reply, tag, header, payload);
        self.tail_hint.store(hint.tail, Relaxed);
        self.tail_hint_at.store(hint.at, Relaxed);
        if ok {
            self.sends.store(self.sends.load(Relaxed) + 1, Relaxed);
            if reply {
                self.heard.store(false, Relaxed);
            }
        }
        ok
    }
}

impl DirectSend for PeerTx {
    unsafe fn try_send(&self, tag: u8, header: &[u8], payload: &[u8]) -> bool {
        // SAFETY: the caller serializes every send of the module (the
        // trait's contract); the module detaches this state before it
        // unmaps the peer's segment (finalize, also run on drop), after
        // which `try_write` refuses without touching it.
        unsafe { self.try_write(tag, header, payload) }
    }

    fn max_fragment(&self) -> usize {
        if self.fbox.load(Relaxed) == 0 {
            0
        } else {
            self.fbox_max.load(Relaxed)
        }
    }
}

/// Receiving state for one local peer: the fast box it writes in this
/// process's segment.
#[derive(Debug)]
pub(crate) struct PeerRx {
    /// The sending state for the same peer (told when a record is taken).
    tx: Arc<PeerTx>,
    /// Address of the fast box (0 until attached, and after detach).
    fbox: AtomicUsize,
    /// Its ring size in bytes.
    size: AtomicUsize,
    /// Records taken through the handle.
    takes: AtomicU64,
}

impl PeerRx {
    pub(crate) fn new(tx: Arc<PeerTx>) -> Self {
        PeerRx {
            tx,
            fbox: AtomicUsize::new(0),
            size: AtomicUsize::new(0),
            takes: AtomicU64::new(0),
        }
    }

    /// Records the fast box once the peer is attached.
    pub(crate) fn attach(&self, fbox: *mut u8, size: usize) {
        self.size.store(size, Relaxed);
        self.fbox.store(fbox as usize, Relaxed);
    }

    /// Forgets the fast box (the segment is about to be unmapped).
    pub(crate) fn detach(&self) {
        self.fbox.store(0, Relaxed);
    }

    pub(crate) fn takes(&self) -> u64 {
        self.takes.load(Relaxed)
    }
}

impl DirectRecv for PeerRx {
    #[inline]
    unsafe fn take_head(&self, take: &mut dyn FnMut(u8, &[u8]) -> bool) -> bool {
        let addr = self.fbox.load(Relaxed);
        if addr == 0 {
            return false;
        }
        // SAFETY: `addr` is the fast box of `size` bytes in this process's
        // own segment that `attach` recorded, mapped until the module
        // detaches this state (finalize, also run on drop); this process
        // is its only reader and the caller serializes every read of it
        // (the trait's contract).
        let fb = unsafe { Fbox::at(addr as *mut u8, self.size.load(Relaxed)) };
        let taken = fb.take_head(take);
        if taken {
            self.takes.store(self.takes.load(Relaxed) + 1, Relaxed);
            self.tx.heard();
        }
        taken
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shm::{FBOX_CTL, FBOX_REC_ALIGN};

    #[repr(C, align(128))]
    struct Ring([u8; FBOX_CTL + 1024]);

    /// Takes every record there is; returns how many.
    fn take_all(rx: &PeerRx) -> usize {
        let mut at = 0;
        // SAFETY: single thread; the ring outlives the call.
        while unsafe { rx.take_head(&mut |_, _| true) } {
            at += 1;
        }
        at
    }

    #[test]
    fn records_are_padded_only_when_answering_the_peer() {
        let mut ring = Box::new(Ring([0; FBOX_CTL + 1024]));
        let tx = Arc::new(PeerTx::default());
        let rx = PeerRx::new(Arc::clone(&tx));
        let p = ring.0.as_mut_ptr();
        tx.attach(p, 1024, 512);
        rx.attach(p, 1024);
        let head = || {
            // SAFETY: the control block's first word is `head` (repr C).
            unsafe { (p as *const u64).read_volatile() }
        };
        // A stream: packed (8-byte header + 16 bytes).
        // SAFETY: single thread, ring mapped for the test's duration.
        assert!(unsafe { tx.try_write(1, &[1; 8], &[2; 8]) });
        assert!(unsafe { tx.try_write(1, &[1; 8], &[2; 8]) });
        assert_eq!(head(), 48);
        // Reading the peer's records marks the next send as an answer...
        assert_eq!(take_all(&rx), 2);
        // SAFETY: as above.
        assert!(unsafe { tx.try_write(1, &[1; 8], &[2; 8]) });
        assert_eq!(
            head() % FBOX_REC_ALIGN as u64,
            0,
            "answer padded to a line pair"
        );
        // ...once: the following one streams again.
        // SAFETY: as above.
        assert!(unsafe { tx.try_write(1, &[1; 8], &[2; 8]) });
        assert_eq!(head() % FBOX_REC_ALIGN as u64, 24);
        assert_eq!(take_all(&rx), 2);
    }
}
