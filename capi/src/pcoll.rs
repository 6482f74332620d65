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
//! with persistent point-to-point requests. The count, displacement and
//! type arrays of the v, w and neighbourhood forms are copied at init (the
//! types in them held too): a caller may free or reuse them once the init
//! call returns, as mpi4py does with the temporaries it converts its
//! arguments into (MPICH builds its schedule at init, so they work there).
//! The buffers stay the caller's until the request is freed. The `info`
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
    comm: tmpi_comm::Comm,
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

/// Pointers, `*const T` and `*mut T`, are kept as their addresses.
macro_rules! kept_pointer {
    ($($mutability:tt),*) => {$(
        impl<T> Kept for *$mutability T {
            type Stored = usize;
            fn keep(self) -> usize {
                self as usize
            }
            fn back(s: usize) -> *$mutability T {
                s as *$mutability T
            }
        }
    )*};
}
kept_pointer!(const, mut);

/// An array argument copied at init: its entries, or the caller's pointer
/// as it was when the call does not read it (NULL, or no entries
/// significant here: a non-root's counts, `MPI_IN_PLACE`'s send side).
enum Copied<T> {
    Raw(usize),
    Own(Vec<T>),
}

impl<T: Copy> Copied<T> {
    fn of(p: *const T, n: usize, what: &str) -> Res<Copied<T>> {
        if n == 0 || p.is_null() {
            return Ok(Copied::Raw(p as usize));
        }
        crate::ffi::array(p, n, what).map(Copied::Own)
    }

    fn ptr(&self) -> *const T {
        match self {
            Copied::Raw(a) => *a as *const T,
            Copied::Own(v) => v.as_ptr(),
        }
    }
}

/// Datatype handles held for a request being made; released on drop
/// unless [`Held::keep`] takes them (the init failed otherwise).
#[derive(Default)]
struct Held(Vec<c_int>);

impl Held {
    fn hold(&mut self, h: c_int) -> c_int {
        let held = tables().hold_type(h);
        self.0.push(held);
        held
    }

    /// A copied array of datatype handles, each one held.
    fn types(&mut self, p: *const c_int, n: usize, what: &str) -> Res<Copied<c_int>> {
        let c = Copied::of(p, n, what)?;
        Ok(match c {
            Copied::Own(v) => Copied::Own(v.into_iter().map(|h| self.hold(h)).collect()),
            raw => raw,
        })
    }

    fn keep(mut self) -> Vec<c_int> {
        std::mem::take(&mut self.0)
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        let mut t = tables();
        for &h in &self.0 {
            t.release_type(h);
        }
    }
}

/// Entries per array of the processes a call addresses: the remote group
/// of an inter-communicator, the communicator otherwise.
pub(crate) fn peers(comm: c_int) -> Res<usize> {
    Ok(match crate::intercoll::target(comm)? {
        crate::intercoll::Target::Inter(ic) => crate::intercoll::remote_size(&ic),
        crate::intercoll::Target::Intra(c) => c.size() as usize,
    })
}

/// Entries of an array with one per local process (reduce-scatter's counts).
pub(crate) fn local(comm: c_int) -> Res<usize> {
    Ok(tables().comm(comm)?.comm.size() as usize)
}

/// [`peers`] at the root, which alone reads a rooted v-form's arrays (`root`
/// is `MPI_ROOT` there on an inter-communicator); 0 elsewhere.
pub(crate) fn at_root(comm: c_int, root: c_int) -> Res<usize> {
    let t = tables();
    let e = t.comm(comm)?;
    let is_root = match &e.inter {
        Some(_) => root == crate::intercoll::ROOT,
        None => e.comm.rank() as c_int == root,
    };
    drop(t);
    if is_root {
        peers(comm)
    } else {
        Ok(0)
    }
}

/// `n`, or 0 when the send side is `MPI_IN_PLACE` (its arrays are ignored).
pub(crate) fn unless_in_place(sendbuf: *const c_void, n: Res<usize>) -> Res<usize> {
    if crate::ffi::is_in_place(sendbuf) {
        Ok(0)
    } else {
        n
    }
}

pub(crate) fn indegree(comm: c_int) -> Res<usize> {
    Ok(crate::topo::neighborhood(comm)?.indegree)
}

pub(crate) fn outdegree(comm: c_int) -> Res<usize> {
    Ok(crate::topo::neighborhood(comm)?.outdegree)
}

/// Registers the inactive persistent request of `comm` that `start`
/// starts, holding the datatype handles `held`; reserves its sequence
/// number.
fn persistent(comm: c_int, start: Arc<Starter>, held: Held, request: *mut c_int) -> Res<()> {
    // On an inter-communicator the rounds run on its union.
    let c = {
        let t = tables();
        let e = t.comm(comm)?;
        match &e.inter {
            Some(i) => i.union.clone(),
            None => e.comm.clone(),
        }
    };
    let seq = c.reserve_seq();
    let start = CollStart {
        start,
        held: held.keep(),
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
        part: None,
    };
    let h = tables().add_req(Req::Inactive(Arc::new(p)));
    put(request, h, "request")
}

/// One argument as the request keeps it: as it is ([`Kept`]), an array
/// copied (`array(n)`: its first `n` entries) or an array of datatypes
/// copied and held (`types(n)`).
macro_rules! keep_arg {
    ($held:ident, $arg:ident: $ty:ty) => {
        <$ty as Kept>::keep($arg)
    };
    ($held:ident, $arg:ident: $ty:ty => array($n:expr)) => {
        Copied::of($arg, $n?, stringify!($arg))?
    };
    ($held:ident, $arg:ident: $ty:ty => types($n:expr)) => {
        $held.types($arg, $n?, stringify!($arg))?
    };
}

/// A kept argument back as the non-blocking call takes it.
macro_rules! back_arg {
    ($arg:ident: $ty:ty) => {
        <$ty as Kept>::back($arg)
    };
    ($arg:ident: $ty:ty => $kind:ident($n:expr)) => {
        $arg.ptr()
    };
}

/// `MPI_<coll>_init`: the arguments of `MPI_I<coll>` (datatype arguments
/// named in `held`, array arguments marked with how they are copied, the
/// communicator after `on`), then `info` and `request`.
macro_rules! pinit {
    ($init:ident => $icall:path;
     ($($arg:ident: $ty:ty $(=> $kind:ident($n:expr))?),*); held($($dt:ident),*); on $comm:ident) => {
        #[allow(clippy::too_many_arguments)]
        #[no_mangle]
        pub extern "C" fn $init($($arg: $ty,)* _info: c_int, request: *mut c_int) -> c_int {
            guard(stringify!($init), $comm, || {
                #[allow(unused_mut)]
                let mut held = Held::default();
                $(let $dt = held.hold($dt);)*
                // One tuple: every length is computed from the arguments
                // as the caller passed them.
                let ($($arg,)*) = ($(keep_arg!(held, $arg: $ty $(=> $kind($n))?),)*);
                let start = move |req: *mut c_int| {
                    $icall($(back_arg!($arg: $ty $(=> $kind($n))?),)* req)
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
    (sendbuf: *const c_void, recvbuf: *mut c_void,
     recvcounts: *const c_int => array(local(comm)), datatype: c_int, op: c_int, comm: c_int);
    held(datatype); on comm);
pinit!(MPI_Gather_init => MPI_Igather;
    (sendbuf: *const c_void, sendcount: c_int, sendtype: c_int, recvbuf: *mut c_void,
     recvcount: c_int, recvtype: c_int, root: c_int, comm: c_int); held(sendtype, recvtype); on comm);
pinit!(MPI_Gatherv_init => MPI_Igatherv;
    (sendbuf: *const c_void, sendcount: c_int, sendtype: c_int, recvbuf: *mut c_void,
     recvcounts: *const c_int => array(at_root(comm, root)),
     displs: *const c_int => array(at_root(comm, root)), recvtype: c_int, root: c_int,
     comm: c_int); held(sendtype, recvtype); on comm);
pinit!(MPI_Scatter_init => MPI_Iscatter;
    (sendbuf: *const c_void, sendcount: c_int, sendtype: c_int, recvbuf: *mut c_void,
     recvcount: c_int, recvtype: c_int, root: c_int, comm: c_int); held(sendtype, recvtype); on comm);
pinit!(MPI_Scatterv_init => MPI_Iscatterv;
    (sendbuf: *const c_void, sendcounts: *const c_int => array(at_root(comm, root)),
     displs: *const c_int => array(at_root(comm, root)), sendtype: c_int,
     recvbuf: *mut c_void, recvcount: c_int, recvtype: c_int, root: c_int, comm: c_int);
    held(sendtype, recvtype); on comm);
pinit!(MPI_Allgather_init => MPI_Iallgather;
    (sendbuf: *const c_void, sendcount: c_int, sendtype: c_int, recvbuf: *mut c_void,
     recvcount: c_int, recvtype: c_int, comm: c_int); held(sendtype, recvtype); on comm);
pinit!(MPI_Allgatherv_init => MPI_Iallgatherv;
    (sendbuf: *const c_void, sendcount: c_int, sendtype: c_int, recvbuf: *mut c_void,
     recvcounts: *const c_int => array(peers(comm)), displs: *const c_int => array(peers(comm)),
     recvtype: c_int, comm: c_int);
    held(sendtype, recvtype); on comm);
pinit!(MPI_Alltoall_init => MPI_Ialltoall;
    (sendbuf: *const c_void, sendcount: c_int, sendtype: c_int, recvbuf: *mut c_void,
     recvcount: c_int, recvtype: c_int, comm: c_int); held(sendtype, recvtype); on comm);
pinit!(MPI_Alltoallv_init => MPI_Ialltoallv;
    (sendbuf: *const c_void,
     sendcounts: *const c_int => array(unless_in_place(sendbuf, peers(comm))),
     sdispls: *const c_int => array(unless_in_place(sendbuf, peers(comm))), sendtype: c_int,
     recvbuf: *mut c_void, recvcounts: *const c_int => array(peers(comm)),
     rdispls: *const c_int => array(peers(comm)), recvtype: c_int, comm: c_int); held(sendtype, recvtype); on comm);
pinit!(MPI_Alltoallw_init => MPI_Ialltoallw;
    (sendbuf: *const c_void,
     sendcounts: *const c_int => array(unless_in_place(sendbuf, peers(comm))),
     sdispls: *const c_int => array(unless_in_place(sendbuf, peers(comm))),
     sendtypes: *const c_int => types(unless_in_place(sendbuf, peers(comm))),
     recvbuf: *mut c_void, recvcounts: *const c_int => array(peers(comm)),
     rdispls: *const c_int => array(peers(comm)),
     recvtypes: *const c_int => types(peers(comm)), comm: c_int); held(); on comm);
pinit!(MPI_Neighbor_allgather_init => MPI_Ineighbor_allgather;
    (sendbuf: *const c_void, sendcount: c_int, sendtype: c_int, recvbuf: *mut c_void,
     recvcount: c_int, recvtype: c_int, comm: c_int); held(sendtype, recvtype); on comm);
pinit!(MPI_Neighbor_allgatherv_init => MPI_Ineighbor_allgatherv;
    (sendbuf: *const c_void, sendcount: c_int, sendtype: c_int, recvbuf: *mut c_void,
     recvcounts: *const c_int => array(indegree(comm)),
     displs: *const c_int => array(indegree(comm)), recvtype: c_int, comm: c_int);
    held(sendtype, recvtype); on comm);
pinit!(MPI_Neighbor_alltoall_init => MPI_Ineighbor_alltoall;
    (sendbuf: *const c_void, sendcount: c_int, sendtype: c_int, recvbuf: *mut c_void,
     recvcount: c_int, recvtype: c_int, comm: c_int); held(sendtype, recvtype); on comm);
pinit!(MPI_Neighbor_alltoallv_init => MPI_Ineighbor_alltoallv;
    (sendbuf: *const c_void, sendcounts: *const c_int => array(outdegree(comm)),
     sdispls: *const c_int => array(outdegree(comm)), sendtype: c_int,
     recvbuf: *mut c_void, recvcounts: *const c_int => array(indegree(comm)),
     rdispls: *const c_int => array(indegree(comm)), recvtype: c_int, comm: c_int); held(sendtype, recvtype); on comm);
pinit!(MPI_Neighbor_alltoallw_init => MPI_Ineighbor_alltoallw;
    (sendbuf: *const c_void, sendcounts: *const c_int => array(outdegree(comm)),
     sdispls: *const isize => array(outdegree(comm)),
     sendtypes: *const c_int => types(outdegree(comm)),
     recvbuf: *mut c_void, recvcounts: *const c_int => array(indegree(comm)),
     rdispls: *const isize => array(indegree(comm)),
     recvtypes: *const c_int => types(indegree(comm)), comm: c_int); held(); on comm);
