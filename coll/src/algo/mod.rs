//! The algorithm library: schedule builders, one function per algorithm,
//! each taking the call's arguments and this rank's position and returning
//! the rank's [`Schedule`]. Components (basic, tuned, self) choose among them.
//!
//! Conventions shared by every builder:
//! * byte counts, not element counts: reductions split vectors only at
//!   element boundaries (`Call::dtype`);
//! * the result buffer is [`Schedule::result`]; ranks without a result
//!   (non-roots of rooted operations, rank 0 of exscan) have none;
//! * non-commutative ops always combine in rank order (each builder says how).

pub mod alltoall;
pub mod barrier;
pub mod bcast;
pub mod gather;
pub mod reduce;

use std::fmt;
use std::sync::Arc;

use crate::datatype::Datatype;
use crate::op::Op;
use crate::schedule::{BufId, ExtRef, Schedule};
use crate::{CollError, Result};

/// The collective operations of the framework (the entries of a
/// communicator's function table).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum CollKind {
    /// `MPI_Barrier`.
    Barrier,
    /// `MPI_Bcast`.
    Bcast,
    /// `MPI_Reduce`.
    Reduce,
    /// `MPI_Allreduce`.
    Allreduce,
    /// `MPI_Gather`.
    Gather,
    /// `MPI_Gatherv`.
    Gatherv,
    /// `MPI_Scatter`.
    Scatter,
    /// `MPI_Scatterv`.
    Scatterv,
    /// `MPI_Allgather`.
    Allgather,
    /// `MPI_Allgatherv`.
    Allgatherv,
    /// `MPI_Alltoall`.
    Alltoall,
    /// `MPI_Alltoallv`.
    Alltoallv,
    /// `MPI_Alltoallw` (per-peer byte counts after packing).
    Alltoallw,
    /// `MPI_Reduce_scatter`.
    ReduceScatter,
    /// `MPI_Reduce_scatter_block`.
    ReduceScatterBlock,
    /// `MPI_Scan`.
    Scan,
    /// `MPI_Exscan`.
    Exscan,
}

impl CollKind {
    /// Every kind, in table order.
    pub const ALL: [CollKind; 17] = [
        CollKind::Barrier,
        CollKind::Bcast,
        CollKind::Reduce,
        CollKind::Allreduce,
        CollKind::Gather,
        CollKind::Gatherv,
        CollKind::Scatter,
        CollKind::Scatterv,
        CollKind::Allgather,
        CollKind::Allgatherv,
        CollKind::Alltoall,
        CollKind::Alltoallv,
        CollKind::Alltoallw,
        CollKind::ReduceScatter,
        CollKind::ReduceScatterBlock,
        CollKind::Scan,
        CollKind::Exscan,
    ];

    /// Index in [`CollKind::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }

    /// Lower-case name as in MCA parameters (`"reduce_scatter_block"`).
    pub fn name(self) -> &'static str {
        match self {
            CollKind::Barrier => "barrier",
            CollKind::Bcast => "bcast",
            CollKind::Reduce => "reduce",
            CollKind::Allreduce => "allreduce",
            CollKind::Gather => "gather",
            CollKind::Gatherv => "gatherv",
            CollKind::Scatter => "scatter",
            CollKind::Scatterv => "scatterv",
            CollKind::Allgather => "allgather",
            CollKind::Allgatherv => "allgatherv",
            CollKind::Alltoall => "alltoall",
            CollKind::Alltoallv => "alltoallv",
            CollKind::Alltoallw => "alltoallw",
            CollKind::ReduceScatter => "reduce_scatter",
            CollKind::ReduceScatterBlock => "reduce_scatter_block",
            CollKind::Scan => "scan",
            CollKind::Exscan => "exscan",
        }
    }
}

impl fmt::Display for CollKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The arguments of one collective call on one rank, with `MPI_IN_PLACE`
/// already resolved (the input is in `send`). All lengths are in bytes.
///
/// | kind | `send` | `block` | `counts`/`displs` | `scounts`/`sdispls` | result |
/// |---|---|---|---|---|---|
/// | barrier | - | - | - | - | - |
/// | bcast | root: data | length | - | - | `block` bytes |
/// | reduce, allreduce, scan, exscan | contribution | - | - | - | same length (reduce: root only; exscan: not on rank 0) |
/// | gather | block | block | - | - | root: `size*block` |
/// | gatherv | block | - | root: per rank | - | root: `recv_len` |
/// | scatter | root: `size*block` | block | - | - | `block` |
/// | scatterv | root: data | my length | - | root: per rank | `block` |
/// | allgather | block | block | - | - | `size*block` |
/// | allgatherv | block | - | per rank | - | `recv_len` |
/// | alltoall | `size*block` | block | - | - | `size*block` |
/// | alltoallv/w | data | - | receive side | send side | `recv_len` |
/// | reduce_scatter(_block) | full vector | - | per rank | - | `counts[rank]` |
#[derive(Debug, Clone)]
pub struct Call {
    /// Which collective.
    pub kind: CollKind,
    /// Root rank of rooted collectives.
    pub root: u32,
    /// Element type.
    pub dtype: Datatype,
    /// Reduction op, for reductions.
    pub op: Option<Op>,
    /// This rank's input, shared with the schedule without a copy (drop the
    /// call before running the schedule, or the schedule's first write to it
    /// copies it).
    pub send: Arc<Vec<u8>>,
    /// Bytes per block (see the table).
    pub block: usize,
    /// Receive-side bytes per rank.
    pub counts: Vec<usize>,
    /// Receive-side displacements in bytes.
    pub displs: Vec<usize>,
    /// Send-side bytes per rank.
    pub scounts: Vec<usize>,
    /// Send-side displacements in bytes.
    pub sdispls: Vec<usize>,
    /// Length of the result buffer where the table says `recv_len`.
    pub recv_len: usize,
    /// Blocking calls: the caller's input, read in place instead of `send`
    /// (see [`Call::input`]).
    pub(crate) ext_send: Option<ExtRef>,
    /// Blocking calls: the caller's output memory, which an algorithm may
    /// take as its result buffer ([`Call::output`]).
    pub(crate) ext_out: Option<ExtRef>,
}

impl Call {
    /// A call of `kind` with everything else empty.
    pub fn new(kind: CollKind) -> Self {
        Call {
            kind,
            root: 0,
            dtype: Datatype::Byte,
            op: None,
            send: Arc::default(),
            block: 0,
            counts: Vec::new(),
            displs: Vec::new(),
            scounts: Vec::new(),
            sdispls: Vec::new(),
            recv_len: 0,
            ext_send: None,
            ext_out: None,
        }
    }

    /// Length of this rank's input in bytes.
    pub fn send_len(&self) -> usize {
        match &self.ext_send {
            Some(e) => e.len(),
            None => self.send.len(),
        }
    }

    /// Adds this rank's input to `s`: the caller's memory for a blocking
    /// call (read in place, copied on the first write), else `send` shared.
    pub fn input(&self, s: &mut Schedule) -> BufId {
        match self.ext_send {
            Some(e) => s.ext(e),
            None => s.shared(&self.send),
        }
    }

    /// A result buffer of `len` bytes every byte of which the schedule
    /// writes: the caller's output memory when a blocking call lent one of
    /// that length (no copy out at the end), else a scratch buffer.
    pub fn output(&self, s: &mut Schedule, len: usize) -> BufId {
        match self.ext_out {
            Some(e) if e.len() == len => s.ext(e),
            _ => s.scratch(len),
        }
    }

    /// `Schedule::out_buf` (a buffer whose bytes outside `blocks` stay
    /// zero), or the caller's output memory when a blocking call lent one of
    /// that length (bytes outside the blocks then keep the caller's values,
    /// as MPI requires of a receive buffer).
    pub fn out_buf(
        &self,
        s: &mut Schedule,
        len: usize,
        blocks: impl Iterator<Item = (usize, usize)>,
    ) -> BufId {
        match self.ext_out {
            Some(e) if e.len() == len => s.ext(e),
            _ => s.out_buf(len, blocks),
        }
    }

    /// Whether a blocking call lent its output memory.
    pub fn has_ext_out(&self) -> bool {
        self.ext_out.is_some()
    }

    /// The op, or an internal error for a reduction built without one.
    pub fn op(&self) -> Result<&Op> {
        self.op
            .as_ref()
            .ok_or_else(|| CollError::Intern(format!("{} without an op", self.kind)))
    }

    /// Whether the op (if any) is commutative.
    pub fn commutative(&self) -> bool {
        self.op.as_ref().is_none_or_commutative()
    }

    /// A schedule prepared for this call's reduction (or a plain one).
    pub fn schedule(&self) -> Schedule {
        match &self.op {
            Some(op) => Schedule::reducing(self.dtype, op.clone()),
            None => Schedule::new(),
        }
    }
}

trait OptOpExt {
    fn is_none_or_commutative(&self) -> bool;
}
impl OptOpExt for Option<&Op> {
    fn is_none_or_commutative(&self) -> bool {
        match self {
            None => true,
            Some(op) => op.is_commutative(),
        }
    }
}

/// Where this rank sits: what every builder needs besides the call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pos {
    /// Communicator rank.
    pub rank: u32,
    /// Communicator size.
    pub size: u32,
}

impl Pos {
    /// Rank relative to `root` (the root is 0).
    pub fn vrank(&self, root: u32) -> u32 {
        (self.rank + self.size - root) % self.size
    }

    /// Real rank of relative rank `v`.
    pub fn real(&self, v: u32, root: u32) -> u32 {
        (v + root) % self.size
    }
}

/// Lowest set bit of `v`, or `None` for 0.
pub(crate) fn lowbit(v: u32) -> Option<u32> {
    (v != 0).then(|| v & v.wrapping_neg())
}

/// Largest power of two `<= n` (n >= 1).
pub(crate) fn pof2_floor(n: u32) -> u32 {
    1 << (31 - n.leading_zeros())
}

/// Element-aligned split of `len` bytes into `parts` nearly equal chunks:
/// `(offset, length)` of chunk `i`.
pub(crate) fn chunk(len: usize, elem: usize, parts: u32, i: u32) -> (usize, usize) {
    let n = len / elem;
    let p = parts as usize;
    let i = i as usize;
    let start = n * i / p;
    let end = n * (i + 1) / p;
    (start * elem, (end - start) * elem)
}

/// Signature of a schedule builder.
pub type Builder = fn(&Call, Pos) -> Result<Schedule>;

#[cfg(test)]
mod kind_tests {
    use super::CollKind;

    /// Tables indexed by `CollKind::index` are filled from `ALL` in order.
    #[test]
    fn all_kinds_in_index_order() {
        for (i, k) in CollKind::ALL.iter().enumerate() {
            assert_eq!(k.index(), i, "{k:?}");
        }
    }
}
