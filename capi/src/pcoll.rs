//! Persistent collectives (MPI-4.0 §6.13): `MPI_<coll>_init` keeps the
//! call's arguments in an inactive persistent request and reserves the
//! communicator's next collective sequence number; each `MPI_Start` starts
//! the non-blocking form with them on that number's tags, so starts match
//! by the order of the inits whatever order the ranks start them in (MPICH's
//! coll/p_order), and completion leaves the request inactive again, to be
//! started anew or freed. On an inter-communicator the number is reserved
//! on its union, where its rounds run.
//!
//! The datatype arguments are held ([`crate::state::Tables::hold_type`]),
//! so the user may free a datatype while a persistent request uses it, as
//! with persistent point-to-point requests; buffers and the count,
//! displacement and type arrays are the caller's until the request is
//! freed (MPI-4.0 §6.13: they must not change meanwhile). The `info`
//! argument is accepted and not used.

use std::ffi::{c_int, c_void};
use std::fmt;
use std::sync::Arc;

use crate::error::{guard, Error, MpiErrorClass as C, Res};
use crate::ffi::put;
use crate::request::{Persist, Req};
use crate::state::tables;

/// Starts one round of a persistent collective: the non-blocking call with
/// the kept arguments, writing its request handle to the pointer given.
type Starter = dyn Fn(*mut c_int) -> c_int + Send + Sync;

/// What a persistent collective request restarts, and the datatype
/// handles it holds.
#[derive(Clone)]
pub(crate) struct CollStart {
    start: Arc<Starter>,
    held: Vec<c_int>,
    /// The communicator and the collective sequence number reserved at
    /// init: every start runs on its tags (`Comm::reserve_seq`).
    comm: tmpi_coll::Comm,
    seq: u32,
}

impl fmt::Debug for CollStart {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CollStart")
            .field("held", &self.held)
            .finish()
    }
}

impl CollStart {
    /// Starts the non-blocking call; its request, to be kept under the
    /// persistent handle.
    pub(crate) fn start(&self) -> Res<Req> {
        let mut h: c_int = 0;
        let rc = self
            .comm
            .with_reserved_seq(self.seq, || (self.start)(&mut h));
        if rc != 0 {
            return Err(Error::callback(
                rc,
                "starting a persistent collective failed",
            ));
        }
        tables()
            .reqs
            .remove(&h)
            .ok_or_else(|| Error::new(C::Intern, "the started collective has no request"))
    }

    /// Gives back the datatype handles it holds (the request is freed).
    pub(crate) fn release(&self) {
        let mut t = tables();
        for &h in &self.held {
            t.release_type(h);
        }
    }
}

/// An argument kept by a persistent request: pointers as addresses (the
/// caller keeps the memory valid while the request exists), integers and
/// handles as they are.
trait Kept: Copy {
    type Stored: Copy + Send + Sync + 'static;
    fn keep(self) -> Self::Stored;
    fn back(s: Self::Stored) -> Self;
}

impl Kept for c_int {
    type Stored = c_int;
    fn keep(self) -> c_int {
        self
    }
    fn back(s: c_int) -> c_int {
        s
    }
}

impl<T> Kept for *const T {
    type Stored = usize;
    fn keep(self) -> usize {
        self as usize
    }
    fn back(s: usize) -> *const T {
        s as *const T
    }
}

impl<T> Kept for *mut T {
    type Stored = usize;
    fn keep(self) -> usize {
        self as usize
    }
    fn back(s: usize) -> *mut T {
        s as *mut T
    }
}

/// Registers the inactive persistent request of `comm` that `start`
/// starts, holding the datatype handles `held`; reserves its sequence
/// number.
fn persistent(comm: c_int, start: Arc<Starter>, held: Vec<c_int>, request: *mut c_int) -> Res<()> {
    // On an inter-communicator the rounds run on its union.
    let c = match tables().comm(comm) {
        Ok(e) => match &e.inter {
            Some(i) => i.union.clone(),
            None => e.comm.clone(),
        },
        Err(e) => {
            let mut t = tables();
            for h in held {
                t.release_type(h);
            }
            return Err(e);
        }
    };
    let seq = c.reserve_seq();
    let start = CollStart {
        start,
        held,
        comm: c,
        seq,
    };
    let p = Persist {
        send: None,
        buf: 0,
        count: 0,
        dtype: 0,
        peer: 0,
        tag: 0,
        comm,
        coll: Some(Box::new(start)),
    };
    let h = tables().add_req(Req::Inactive(p));
    put(request, h, "request")
}

/// `MPI_<coll>_init`: the arguments of `MPI_I<coll>` (datatype arguments
/// named in `held`, the communicator after `on`), then `info` and
/// `request`.
macro_rules! pinit {
    ($init:ident => $icall:path; ($($arg:ident: $ty:ty),*); held($($dt:ident),*); on $comm:ident) => {
        #[allow(clippy::too_many_arguments)]
        #[no_mangle]
        pub extern "C" fn $init($($arg: $ty,)* _info: c_int, request: *mut c_int) -> c_int {
            guard(stringify!($init), $comm, || {
                $(let $dt = tables().hold_type($dt);)*
                let held = vec![$($dt),*];
                $(let $arg = <$ty as Kept>::keep($arg);)*
                let start = move |req: *mut c_int| {
                    $icall($(<$ty as Kept>::back($arg),)* req)
                };
                persistent($comm, Arc::new(start), held, request)
            })
        }
    };
}

use crate::coll::{
    MPI_Iallgather, MPI_Iallgatherv, MPI_Iallreduce, MPI_Ialltoall, MPI_Ialltoallv, MPI_Ialltoallw,
    MPI_Ibarrier, MPI_Ibcast, MPI_Iexscan, MPI_Igather, MPI_Igatherv, MPI_Ireduce,
    MPI_Ireduce_scatter, MPI_Ireduce_scatter_block, MPI_Iscan, MPI_Iscatter, MPI_Iscatterv,
};
use crate::neighbor::{
    MPI_Ineighbor_allgather, MPI_Ineighbor_allgatherv, MPI_Ineighbor_alltoall,
    MPI_Ineighbor_alltoallv, MPI_Ineighbor_alltoallw,
};

pinit!(MPI_Barrier_init => MPI_Ibarrier; (comm: c_int); held(); on comm);
pinit!(MPI_Bcast_init => MPI_Ibcast;
    (buf: *mut c_void, count: c_int, datatype: c_int, root: c_int, comm: c_int); held(datatype); on comm);
pinit!(MPI_Reduce_init => MPI_Ireduce;
    (sendbuf: *const c_void, recvbuf: *mut c_void, count: c_int, datatype: c_int, op: c_int,
     root: c_int, comm: c_int); held(datatype); on comm);
pinit!(MPI_Allreduce_init => MPI_Iallreduce;
    (sendbuf: *const c_void, recvbuf: *mut c_void, count: c_int, datatype: c_int, op: c_int,
     comm: c_int); held(datatype); on comm);
pinit!(MPI_Scan_init => MPI_Iscan;
    (sendbuf: *const c_void, recvbuf: *mut c_void, count: c_int, datatype: c_int, op: c_int,
     comm: c_int); held(datatype); on comm);
pinit!(MPI_Exscan_init => MPI_Iexscan;
    (sendbuf: *const c_void, recvbuf: *mut c_void, count: c_int, datatype: c_int, op: c_int,
     comm: c_int); held(datatype); on comm);
pinit!(MPI_Reduce_scatter_block_init => MPI_Ireduce_scatter_block;
    (sendbuf: *const c_void, recvbuf: *mut c_void, recvcount: c_int, datatype: c_int, op: c_int,
     comm: c_int); held(datatype); on comm);
pinit!(MPI_Reduce_scatter_init => MPI_Ireduce_scatter;
    (sendbuf: *const c_void, recvbuf: *mut c_void, recvcounts: *const c_int, datatype: c_int,
     op: c_int, comm: c_int); held(datatype); on comm);
pinit!(MPI_Gather_init => MPI_Igather;
    (sendbuf: *const c_void, sendcount: c_int, sendtype: c_int, recvbuf: *mut c_void,
     recvcount: c_int, recvtype: c_int, root: c_int, comm: c_int); held(sendtype, recvtype); on comm);
pinit!(MPI_Gatherv_init => MPI_Igatherv;
    (sendbuf: *const c_void, sendcount: c_int, sendtype: c_int, recvbuf: *mut c_void,
     recvcounts: *const c_int, displs: *const c_int, recvtype: c_int, root: c_int, comm: c_int);
    held(sendtype, recvtype); on comm);
pinit!(MPI_Scatter_init => MPI_Iscatter;
    (sendbuf: *const c_void, sendcount: c_int, sendtype: c_int, recvbuf: *mut c_void,
     recvcount: c_int, recvtype: c_int, root: c_int, comm: c_int); held(sendtype, recvtype); on comm);
pinit!(MPI_Scatterv_init => MPI_Iscatterv;
    (sendbuf: *const c_void, sendcounts: *const c_int, displs: *const c_int, sendtype: c_int,
     recvbuf: *mut c_void, recvcount: c_int, recvtype: c_int, root: c_int, comm: c_int);
    held(sendtype, recvtype); on comm);
pinit!(MPI_Allgather_init => MPI_Iallgather;
    (sendbuf: *const c_void, sendcount: c_int, sendtype: c_int, recvbuf: *mut c_void,
     recvcount: c_int, recvtype: c_int, comm: c_int); held(sendtype, recvtype); on comm);
pinit!(MPI_Allgatherv_init => MPI_Iallgatherv;
    (sendbuf: *const c_void, sendcount: c_int, sendtype: c_int, recvbuf: *mut c_void,
     recvcounts: *const c_int, displs: *const c_int, recvtype: c_int, comm: c_int);
    held(sendtype, recvtype); on comm);
pinit!(MPI_Alltoall_init => MPI_Ialltoall;
    (sendbuf: *const c_void, sendcount: c_int, sendtype: c_int, recvbuf: *mut c_void,
     recvcount: c_int, recvtype: c_int, comm: c_int); held(sendtype, recvtype); on comm);
pinit!(MPI_Alltoallv_init => MPI_Ialltoallv;
    (sendbuf: *const c_void, sendcounts: *const c_int, sdispls: *const c_int, sendtype: c_int,
     recvbuf: *mut c_void, recvcounts: *const c_int, rdispls: *const c_int, recvtype: c_int,
     comm: c_int); held(sendtype, recvtype); on comm);
pinit!(MPI_Alltoallw_init => MPI_Ialltoallw;
    (sendbuf: *const c_void, sendcounts: *const c_int, sdispls: *const c_int,
     sendtypes: *const c_int, recvbuf: *mut c_void, recvcounts: *const c_int,
     rdispls: *const c_int, recvtypes: *const c_int, comm: c_int); held(); on comm);
pinit!(MPI_Neighbor_allgather_init => MPI_Ineighbor_allgather;
    (sendbuf: *const c_void, sendcount: c_int, sendtype: c_int, recvbuf: *mut c_void,
     recvcount: c_int, recvtype: c_int, comm: c_int); held(sendtype, recvtype); on comm);
pinit!(MPI_Neighbor_allgatherv_init => MPI_Ineighbor_allgatherv;
    (sendbuf: *const c_void, sendcount: c_int, sendtype: c_int, recvbuf: *mut c_void,
     recvcounts: *const c_int, displs: *const c_int, recvtype: c_int, comm: c_int);
    held(sendtype, recvtype); on comm);
pinit!(MPI_Neighbor_alltoall_init => MPI_Ineighbor_alltoall;
    (sendbuf: *const c_void, sendcount: c_int, sendtype: c_int, recvbuf: *mut c_void,
     recvcount: c_int, recvtype: c_int, comm: c_int); held(sendtype, recvtype); on comm);
pinit!(MPI_Neighbor_alltoallv_init => MPI_Ineighbor_alltoallv;
    (sendbuf: *const c_void, sendcounts: *const c_int, sdispls: *const c_int, sendtype: c_int,
     recvbuf: *mut c_void, recvcounts: *const c_int, rdispls: *const c_int, recvtype: c_int,
     comm: c_int); held(sendtype, recvtype); on comm);
pinit!(MPI_Neighbor_alltoallw_init => MPI_Ineighbor_alltoallw;
    (sendbuf: *const c_void, sendcounts: *const c_int, sdispls: *const isize,
     sendtypes: *const c_int, recvbuf: *mut c_void, recvcounts: *const c_int,
     rdispls: *const isize, recvtypes: *const c_int, comm: c_int); held(); on comm);
