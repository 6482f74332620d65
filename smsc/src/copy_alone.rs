//! A receiver's request to copy large messages alone: while a
//! [`CopyAlone`] guard lives on a thread, whole-region gets that thread
//! makes skip the cooperative copy (the sender writing part of the message
//! into the receiver's buffer) and read the region with `process_vm_readv`
//! alone.
//!
//! Why a receiver would: a reduction's fold reads the received bytes right
//! after the get, and the part the sender wrote sits in the sender's cache.
//! With the two cores close that costs little and the shared copy wins;
//! with them far apart each of those lines crosses between the cores again
//! and copying alone is cheaper.
//! The collective layer measures both ways and says which it wants
//! (`tmpi-coll`'s reduce). A hint only: a get made on another thread (a
//! progress thread) ignores it, which costs time, never correctness.

use std::cell::Cell;

thread_local! {
    static ALONE: Cell<bool> = const { Cell::new(false) };
}

/// While alive, this thread's whole-region gets copy alone. Restores the
/// previous state when dropped (guards nest).
#[must_use = "the request lasts as long as the guard"]
#[derive(Debug)]
pub struct CopyAlone {
    before: bool,
}

impl CopyAlone {
    /// Starts copying alone on this thread.
    pub fn new() -> Self {
        CopyAlone {
            before: ALONE.with(|a| a.replace(true)),
        }
    }
}

impl Default for CopyAlone {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for CopyAlone {
    fn drop(&mut self) {
        ALONE.with(|a| a.set(self.before));
    }
}

/// Whether this thread's gets copy alone now.
pub fn copying_alone() -> bool {
    ALONE.with(Cell::get)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guards_nest_and_stay_on_their_thread() {
        assert!(!copying_alone());
        {
            let _a = CopyAlone::new();
            assert!(copying_alone());
            {
                let _b = CopyAlone::new();
                assert!(copying_alone());
            }
            assert!(copying_alone());
            std::thread::spawn(|| assert!(!copying_alone()))
                .join()
                .unwrap();
        }
        assert!(!copying_alone());
    }
}
