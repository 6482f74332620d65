//! The buffered-send buffer: `MPI_Buffer_attach` and `MPI_Buffer_detach`
//! (the buffered sends themselves are the core's, `core/send.rs`).

use std::time::{Duration, Instant};

use crate::PmlError;

use super::Pml;

/// How long a buffered send that does not fit keeps progressing without
/// any completion before it gives up (and fails with `MPI_ERR_BUFFER`).
const BSEND_PATIENCE: Duration = Duration::from_secs(1);

impl Pml {
    /// Before a buffered send of `len` bytes: when the attached buffer is
    /// full of earlier buffered sends, progress until their completions
    /// give the space back, as MPICH and Open MPI progress before refusing.
    /// A sent message stays charged until the pml processes its completion
    /// (the fragment left; a rendezvous' FIN arrived), so a program that
    /// sizes its buffer for the messages it knows were received would
    /// otherwise be refused by timing. Gives up when progress found nothing
    /// for [`BSEND_PATIENCE`] (a receiver that does not receive): the send
    /// then fails as it must when the buffer really is too small.
    pub(super) fn make_bsend_room(&self, len: usize) {
        let mut since = Instant::now();
        loop {
            {
                let mut g = self.lock();
                if g.core.bsend_room_or_hopeless(len) {
                    return;
                }
                if g.progress() > 0 {
                    since = Instant::now();
                    continue;
                }
            }
            if since.elapsed() >= BSEND_PATIENCE {
                return;
            }
            self.idle();
        }
    }

    /// `MPI_Buffer_attach` of a buffer of `bytes` bytes.
    pub fn buffer_attach(&self, bytes: usize) -> Result<(), PmlError> {
        self.lock().core.buffer_attach(bytes)
    }

    /// `MPI_Buffer_detach`: waits until every buffered send completed, then
    /// detaches and returns the size.
    pub fn buffer_detach(&self) -> Result<usize, PmlError> {
        loop {
            {
                let mut g = self.lock();
                match g.core.buffer_in_use() {
                    None => return Err(PmlError::Buffer("no buffer attached".into())),
                    Some(0) => return g.core.buffer_detach(),
                    Some(_) => {
                        g.progress();
                    }
                }
            }
            self.idle();
        }
    }
}
