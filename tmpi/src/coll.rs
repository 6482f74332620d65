//! Collectives and communicator creation of the Rust API: typed wrappers
//! over the coll framework (`tmpi_coll`), opened on the first call that
//! needs it.
//!
//! Buffers are typed slices; counts are in elements of `T`. Non-blocking
//! collectives ([`Comm::ibcast`], ...) take their input by value and give
//! the result back from [`CollRequest::wait`]: no buffer is borrowed while
//! the operation runs, so no scope is needed. Reductions
//! combine elements of `T::ELEMENT` ([`Equivalence::ELEMENT`]) with an
//! [`Op`]; an op that does not apply to the type (a sum of `u128`, which
//! is bytes) is `MPI_ERR_OP`. [`Comm::barrier`] stays the point-to-point
//! barrier of the pml (it works on every handle).

use std::marker::PhantomData;
use std::sync::{Arc, OnceLock};

use tmpi_coll::{CollError, Input, Op};
use tmpi_comm::SplitType;
use tmpi_comm::Universe;
use tmpi_pml::Pml;

use crate::comm::Comm;
use crate::datatype::{bytes, bytes_mut, vec_from_bytes, Equivalence};
use crate::error::Error;
use crate::MpiErrorClass;

/// The coll framework of this process, opened on first use.
pub(crate) type CollSlot = OnceLock<Result<Universe, Error>>;

/// Which coll communicator a [`Comm`] is.
#[derive(Clone)]
pub(crate) enum CollHandle {
    /// `MPI_COMM_WORLD` of the process's framework.
    World(Arc<CollSlot>),
    /// `MPI_COMM_SELF` of the process's framework.
    SelfComm(Arc<CollSlot>),
    /// A communicator made by [`Comm::dup`] or [`Comm::split`].
    Made(tmpi_comm::Comm),
    /// A point-to-point handle (`Mpi::comm_for_context`).
    None,
}

impl From<CollError> for Error {
    fn from(e: CollError) -> Self {
        Error::new(e.class(), e.to_string())
    }
}

fn universe<'a>(slot: &'a CollSlot, pml: &Arc<Pml>) -> Result<&'a Universe, Error> {
    slot.get_or_init(|| crate::runtime::open_coll(pml))
        .as_ref()
        .map_err(Clone::clone)
}

/// A root as coll takes it; a negative one is `MPI_ERR_ROOT` here (coll
/// checks the upper bound against the communicator's size).
fn root(root: i32) -> Result<u32, Error> {
    u32::try_from(root).map_err(|_| {
        Error::new(
            tmpi_pml::MpiErrorClass::Root,
            format!("root {root} is not a rank"),
        )
    })
}

impl Comm {
    /// The coll communicator behind this handle.
    pub(crate) fn coll(&self) -> Result<tmpi_comm::Comm, Error> {
        match &self.coll {
            CollHandle::World(s) => Ok(universe(s, self.pml_handle())?.world.clone()),
            CollHandle::SelfComm(s) => Ok(universe(s, self.pml_handle())?.self_comm.clone()),
            CollHandle::Made(c) => Ok(c.clone()),
            CollHandle::None => Err(Error::new(
                MpiErrorClass::Comm,
                "a point-to-point handle from comm_for_context has no collectives",
            )),
        }
    }

    /// `MPI_Comm_dup`: same group, new context (collective).
    pub fn dup(&self) -> Result<Comm, Error> {
        let c = self.coll()?.dup()?;
        Ok(Comm::from_coll(self.pml_handle().clone(), c))
    }

    /// `MPI_Comm_split` (collective): ranks with equal `color` form a
    /// communicator, ordered by `key` then by rank here; `None`
    /// (`MPI_UNDEFINED`) takes part and gets none.
    pub fn split(&self, color: Option<u32>, key: i32) -> Result<Option<Comm>, Error> {
        let c = self.coll()?.split(color, key)?;
        Ok(c.map(|c| Comm::from_coll(self.pml_handle().clone(), c)))
    }

    /// `MPI_Comm_split_type(MPI_COMM_TYPE_SHARED)` (collective): the ranks
    /// of this one on this rank's node (from the launcher's process
    /// mapping), ordered by `key` then by rank here.
    pub fn split_shared(&self, key: i32) -> Result<Comm, Error> {
        let c = self
            .coll()?
            .split_type(SplitType::Shared, key)?
            .ok_or_else(|| {
                Error::new(
                    MpiErrorClass::Intern,
                    "split_type(SHARED) gave no communicator",
                )
            })?;
        Ok(Comm::from_coll(self.pml_handle().clone(), c))
    }

    /// `MPI_Bcast` of `buf` from `root`.
    pub fn bcast<T: Equivalence>(&self, buf: &mut [T], root_rank: i32) -> Result<(), Error> {
        Ok(self.coll()?.bcast(bytes_mut(buf), root(root_rank)?)?)
    }

    /// `MPI_Reduce`: `recv` (as long as `send`) at the root only.
    pub fn reduce<T: Equivalence>(
        &self,
        send: &[T],
        recv: Option<&mut [T]>,
        op: &Op,
        root_rank: i32,
    ) -> Result<(), Error> {
        let recv = recv.map(bytes_mut);
        Ok(self.coll()?.reduce(
            Input::Buf(bytes(send)),
            recv,
            T::ELEMENT,
            op,
            root(root_rank)?,
        )?)
    }

    /// `MPI_Allreduce` of `send` into `recv` (same length).
    pub fn allreduce<T: Equivalence>(
        &self,
        send: &[T],
        recv: &mut [T],
        op: &Op,
    ) -> Result<(), Error> {
        Ok(self
            .coll()?
            .allreduce(Input::Buf(bytes(send)), bytes_mut(recv), T::ELEMENT, op)?)
    }

    /// `MPI_Allreduce` with `MPI_IN_PLACE`: `buf` is the input and the
    /// result.
    pub fn allreduce_in_place<T: Equivalence>(&self, buf: &mut [T], op: &Op) -> Result<(), Error> {
        Ok(self
            .coll()?
            .allreduce(Input::InPlace, bytes_mut(buf), T::ELEMENT, op)?)
    }

    /// `MPI_Gather`: every rank's `send` into `recv` (size x `send.len()`
    /// elements, in rank order) at the root only.
    pub fn gather<T: Equivalence>(
        &self,
        send: &[T],
        recv: Option<&mut [T]>,
        root_rank: i32,
    ) -> Result<(), Error> {
        let recv = recv.map(bytes_mut);
        Ok(self
            .coll()?
            .gather(Input::Buf(bytes(send)), recv, root(root_rank)?)?)
    }

    /// `MPI_Scatter`: block `r` of the root's `send` (size x `recv.len()`
    /// elements) to rank `r`'s `recv`.
    pub fn scatter<T: Equivalence>(
        &self,
        send: Option<&[T]>,
        recv: &mut [T],
        root_rank: i32,
    ) -> Result<(), Error> {
        let send = send.map(bytes);
        Ok(self
            .coll()?
            .scatter(send, Some(bytes_mut(recv)), root(root_rank)?)?)
    }

    /// `MPI_Allgather`: every rank's `send` into every rank's `recv`
    /// (size x `send.len()` elements, in rank order).
    pub fn allgather<T: Equivalence>(&self, send: &[T], recv: &mut [T]) -> Result<(), Error> {
        Ok(self
            .coll()?
            .allgather(Input::Buf(bytes(send)), bytes_mut(recv))?)
    }

    /// `MPI_Alltoall`: block `r` of `send` (size equal blocks) to rank `r`,
    /// whose block from this rank lands at this rank's position of `recv`.
    pub fn alltoall<T: Equivalence>(&self, send: &[T], recv: &mut [T]) -> Result<(), Error> {
        Ok(self
            .coll()?
            .alltoall(Input::Buf(bytes(send)), bytes_mut(recv))?)
    }

    /// `MPI_Scan`: `recv` = the reduction of ranks 0..=this one's `send`.
    pub fn scan<T: Equivalence>(&self, send: &[T], recv: &mut [T], op: &Op) -> Result<(), Error> {
        Ok(self
            .coll()?
            .scan(Input::Buf(bytes(send)), bytes_mut(recv), T::ELEMENT, op)?)
    }

    /// `MPI_Exscan`: `recv` = the reduction of ranks 0..this one's `send`
    /// (rank 0's `recv` is left as it was).
    pub fn exscan<T: Equivalence>(&self, send: &[T], recv: &mut [T], op: &Op) -> Result<(), Error> {
        Ok(self
            .coll()?
            .exscan(Input::Buf(bytes(send)), bytes_mut(recv), T::ELEMENT, op)?)
    }
}

/// A non-blocking collective in progress (`MPI_Request` of `MPI_Ibcast`,
/// ...): progressed by [`CollRequest::test`], [`CollRequest::wait`], and
/// while this process waits in any other collective or point-to-point
/// call on the same framework. Its result is a vector of `T` (empty for
/// ranks without one: [`Comm::ibarrier`], a reduce or gather away from the
/// root, exscan on rank 0). Dropping it before it completed waits for it
/// (the other ranks may need this rank's part); an error found then is
/// logged.
#[derive(Debug)]
#[must_use = "the result of a non-blocking collective comes from wait (dropping the request waits and discards it)"]
pub struct CollRequest<T: Equivalence> {
    req: Option<tmpi_coll::CollRequest>,
    _t: PhantomData<fn() -> T>,
}

impl<T: Equivalence> CollRequest<T> {
    fn new(req: tmpi_coll::CollRequest) -> Self {
        CollRequest {
            req: Some(req),
            _t: PhantomData,
        }
    }

    /// Advances the collective; `Ok(true)` once it completed
    /// (`MPI_Test`); the result is then taken with [`CollRequest::wait`].
    pub fn test(&self) -> Result<bool, Error> {
        match &self.req {
            Some(r) => Ok(r.test()?),
            None => Ok(true),
        }
    }

    /// Waits for completion (`MPI_Wait`) and returns the result.
    pub fn wait(mut self) -> Result<Vec<T>, Error> {
        match self.req.take() {
            Some(r) => Ok(vec_from_bytes(&r.wait()?)),
            None => Ok(Vec::new()),
        }
    }
}

impl<T: Equivalence> Drop for CollRequest<T> {
    fn drop(&mut self) {
        if let Some(r) = self.req.take() {
            if let Err(e) = r.wait() {
                tracing::warn!(target: "tmpi", "a dropped non-blocking collective failed: {e}");
            }
        }
    }
}

/// The bytes of an owned input (one copy: coll keeps them until the
/// collective completes).
fn owned<T: Equivalence>(v: &[T]) -> Vec<u8> {
    bytes(v).to_vec()
}

impl Comm {
    /// `MPI_Ibarrier`; the result is empty.
    pub fn ibarrier(&self) -> Result<CollRequest<u8>, Error> {
        Ok(CollRequest::new(self.coll()?.ibarrier()?))
    }

    /// `MPI_Ibcast` of the root's `buf` (every rank passes a vector of the
    /// same length; only the root's contents count); the result is the
    /// broadcast vector.
    pub fn ibcast<T: Equivalence>(
        &self,
        buf: Vec<T>,
        root_rank: i32,
    ) -> Result<CollRequest<T>, Error> {
        Ok(CollRequest::new(
            self.coll()?.ibcast(owned(&buf), root(root_rank)?)?,
        ))
    }

    /// `MPI_Ireduce`: the result is the reduction at the root, empty
    /// elsewhere.
    pub fn ireduce<T: Equivalence>(
        &self,
        send: Vec<T>,
        op: &Op,
        root_rank: i32,
    ) -> Result<CollRequest<T>, Error> {
        let c = self.coll()?;
        Ok(CollRequest::new(c.ireduce(
            owned(&send),
            T::ELEMENT,
            op,
            root(root_rank)?,
        )?))
    }

    /// `MPI_Iallreduce`: the result is the reduction on every rank.
    pub fn iallreduce<T: Equivalence>(
        &self,
        send: Vec<T>,
        op: &Op,
    ) -> Result<CollRequest<T>, Error> {
        let c = self.coll()?;
        Ok(CollRequest::new(c.iallreduce(
            owned(&send),
            T::ELEMENT,
            op,
        )?))
    }

    /// `MPI_Igather`: the root's result holds every rank's `send` in rank
    /// order (size x `send.len()` elements), empty elsewhere.
    pub fn igather<T: Equivalence>(
        &self,
        send: Vec<T>,
        root_rank: i32,
    ) -> Result<CollRequest<T>, Error> {
        Ok(CollRequest::new(
            self.coll()?.igather(owned(&send), root(root_rank)?)?,
        ))
    }

    /// `MPI_Iscatter`: the root passes size x `count` elements (the others
    /// `None`); every rank's result is its block of `count` elements.
    pub fn iscatter<T: Equivalence>(
        &self,
        send: Option<Vec<T>>,
        count: usize,
        root_rank: i32,
    ) -> Result<CollRequest<T>, Error> {
        let send = send.as_deref().map(owned).unwrap_or_default();
        let block = count.checked_mul(std::mem::size_of::<T>()).ok_or_else(|| {
            Error::new(MpiErrorClass::Count, format!("iscatter: {count} elements"))
        })?;
        Ok(CollRequest::new(self.coll()?.iscatter(
            send,
            block,
            root(root_rank)?,
        )?))
    }

    /// `MPI_Iallgather`: the result holds every rank's `send` in rank order.
    pub fn iallgather<T: Equivalence>(&self, send: Vec<T>) -> Result<CollRequest<T>, Error> {
        Ok(CollRequest::new(self.coll()?.iallgather(owned(&send))?))
    }

    /// `MPI_Ialltoall`: block `r` of `send` (size equal blocks) goes to
    /// rank `r`; the result holds the blocks for this rank in rank order.
    pub fn ialltoall<T: Equivalence>(&self, send: Vec<T>) -> Result<CollRequest<T>, Error> {
        let p = self.size() as usize;
        if !send.len().is_multiple_of(p.max(1)) {
            return Err(Error::new(
                MpiErrorClass::Count,
                format!("ialltoall: {} elements is not {p} equal blocks", send.len()),
            ));
        }
        Ok(CollRequest::new(self.coll()?.ialltoall(owned(&send))?))
    }

    /// `MPI_Iscan`: the result is the reduction of ranks 0..=this one.
    pub fn iscan<T: Equivalence>(&self, send: Vec<T>, op: &Op) -> Result<CollRequest<T>, Error> {
        let c = self.coll()?;
        Ok(CollRequest::new(c.iscan(owned(&send), T::ELEMENT, op)?))
    }

    /// `MPI_Iexscan`: the result is the reduction of ranks 0..this one
    /// (empty on rank 0).
    pub fn iexscan<T: Equivalence>(&self, send: Vec<T>, op: &Op) -> Result<CollRequest<T>, Error> {
        let c = self.coll()?;
        Ok(CollRequest::new(c.iexscan(owned(&send), T::ELEMENT, op)?))
    }
}
