//! # tmpi: the safe Rust API of the tmpi MPI library
//!
//! ```no_run
//! let mpi = tmpi::init()?;                 // finalizes when dropped
//! let world = mpi.world();
//! let (rank, size) = (world.rank(), world.size());
//! if rank == 0 {
//!     world.send(&[1.5f64, 2.5], 1 % size, 7)?;
//! } else if rank == 1 {
//!     let mut buf = [0f64; 2];
//!     let st = world.recv(&mut buf, 0, 7)?;
//!     assert_eq!(st.count::<f64>(), 2);
//! }
//! // Non-blocking operations borrow their buffers for a scope; the scope
//! // waits for whatever is still in flight when it ends, so a forgotten
//! // (`mem::forget`) or leaked request can never outlive its buffer.
//! let mut inbox = [0i32; 4];
//! let outbox = [rank; 4];
//! tmpi::scope(|s| -> Result<(), tmpi::Error> {
//!     let r = world.irecv(s, &mut inbox, tmpi::ANY_SOURCE, 0)?;
//!     let q = world.isend(s, &outbox, (rank + 1) % size, 0)?;
//!     q.wait()?;
//!     r.wait()?;
//!     Ok(())
//! })?;
//! # Ok::<(), tmpi::Error>(())
//! ```
//!
//! ## Semantics
//! * Messages are typed slices of [`Equivalence`] types (the primitive
//!   numbers and arrays of them); counts are in
//!   elements of the receive type; a message whose length is not a
//!   multiple of the element size reports `count::<T>()` rounded down.
//! * Errors are [`Error`] values carrying an MPI error class; a truncated
//!   receive is `Err` with class `MPI_ERR_TRUNCATE` *and* the status (the
//!   buffer holds the message's prefix, nothing was written past it).
//! * Tags: `0..=TAG_UB`; negative tags are reserved for the library.
//! * Threads: [`Mpi`] and [`Comm`] are `Send + Sync`; any thread may call
//!   (MPI_THREAD_MULTIPLE); requests are tied to their scope's thread.
//! * Collectives ([`Comm::bcast`], [`Comm::reduce`], [`Comm::allreduce`],
//!   gather, scatter, allgather, alltoall, scan, exscan) and communicator
//!   creation ([`Comm::dup`], [`Comm::split`], [`Comm::split_shared`]) are
//!   blocking calls, and [`Comm::ibarrier`], [`Comm::ibcast`],
//!   [`Comm::ireduce`], [`Comm::iallreduce`], gather, scatter, allgather,
//!   alltoall, scan and exscan non-blocking ones (input by value, result
//!   from [`CollRequest::wait`]), of the coll framework (components chosen by the `coll`
//!   MCA parameters, as in the C API), opened on first use; reductions
//!   combine `T::ELEMENT` values ([`Equivalence::ELEMENT`]) with an [`Op`].
//!   Like any MPI program, every rank calls them in the same order. Do not
//!   also open a second coll framework over [`Mpi::pml`] and use both: their
//!   context ids and collective tags are not coordinated.
//! * Start-up: [`init`] and the C API's `MPI_Init` (tmpi-capi) bring the
//!   runtime up through the same function, [`runtime::start`].

mod coll;
mod comm;
mod datatype;
mod error;
mod request;
pub mod runtime;
mod window;

pub use coll::CollRequest;
pub use comm::{Comm, Mpi};
pub use datatype::Equivalence;
pub use error::Error;
pub use request::{scope, Message, Request, Scope, Status};
pub use tmpi_coll::{Op, UserOp};
pub use tmpi_pml::{MpiErrorClass, ANY_SOURCE, ANY_TAG, PROC_NULL, TAG_UB};
pub use window::{Lock, Ticket, Window};

/// Initialises MPI for this process (`MPI_Init`): wire-up through the
/// launcher's PMI (a singleton job of one without a launcher). The returned
/// owner finalizes MPI when dropped; only one may exist per process.
pub fn init() -> Result<Mpi, Error> {
    Mpi::init()
}
