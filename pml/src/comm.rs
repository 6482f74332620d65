//! Communicator records: what the pml needs to know about a communicator.
//!
//! A record is a context id (unique per communicator in the job; the pml
//! keys matching and sequence numbers on it), this process's rank in it and
//! the rank → world-rank table. COMM_WORLD (context 0) and COMM_SELF
//! (context 1) exist from init; coll adds more with
//! [`crate::Pml::add_comm`], allocating context ids from 2 upwards (and may
//! use a second id per communicator for its own traffic).

use crate::PmlError;

/// Context id of `MPI_COMM_WORLD`.
pub const CTX_WORLD: u32 = 0;
/// Context id of `MPI_COMM_SELF`.
pub const CTX_SELF: u32 = 1;
/// First context id free for communicators created later.
pub const CTX_FIRST_FREE: u32 = 2;

/// One communicator as the pml sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommRecord {
    /// Context id.
    pub ctx: u32,
    /// This process's rank in the communicator.
    pub rank: i32,
    /// World rank of each communicator rank.
    pub world: Vec<u32>,
}

impl CommRecord {
    /// Number of ranks.
    pub fn size(&self) -> i32 {
        self.world.len() as i32
    }

    /// World rank of communicator rank `r`, or `MPI_ERR_RANK`.
    pub fn world_rank(&self, r: i32) -> Result<u32, PmlError> {
        if r < 0 {
            return Err(PmlError::Rank(r));
        }
        // A `match`, not `ok_or`: `ok_or` builds the error eagerly and drops
        // it on every send and receive.
        match self.world.get(r as usize) {
            Some(&w) => Ok(w),
            None => Err(PmlError::Rank(r)),
        }
    }

    /// COMM_WORLD of a job of `size` seen from `me`.
    pub fn world(me: u32, size: u32) -> Self {
        CommRecord {
            ctx: CTX_WORLD,
            rank: me as i32,
            world: (0..size).collect(),
        }
    }

    /// COMM_SELF of `me`.
    pub fn self_comm(me: u32) -> Self {
        CommRecord {
            ctx: CTX_SELF,
            rank: 0,
            world: vec![me],
        }
    }
}
