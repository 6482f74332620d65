//! The buffered-send buffer: `MPI_Buffer_attach` and `MPI_Buffer_detach`
//! (the buffered sends themselves are the core's, `core/send.rs`).

use crate::PmlError;

use super::Pml;

impl Pml {
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
