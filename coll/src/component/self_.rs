//! `self`: communicators of one process. Every collective is a local copy
//! (no messages, no tags consumed on the wire).

use std::sync::Arc;

use tmpi_base::component::{Availability, ComponentDescriptor};
use tmpi_base::mca::{McaError, Registry};

use crate::algo::{Call, CollKind, Pos};
use crate::framework::{CollComponent, CollModule, CommShape, Underlying};
use crate::schedule::{Schedule, Slice};
use crate::{CollError, Result};

/// Default priority (Open MPI's coll/self uses 75).
pub const PRIORITY: i64 = 75;

fn register_params(reg: &Registry) -> Result<(), McaError> {
    reg.register_priority("coll", "self", PRIORITY)?;
    Ok(())
}

fn probe() -> Availability {
    Availability::Available
}

/// The component descriptor.
pub static DESCRIPTOR: ComponentDescriptor = ComponentDescriptor {
    framework: "coll",
    name: "self",
    priority: PRIORITY as i32,
    description: "collectives on single-process communicators (local copies)",
    register_params,
    probe,
};

/// The opened component.
#[derive(Debug)]
pub struct SelfComponent {
    priority: i64,
}

impl SelfComponent {
    /// Opens the component.
    pub fn open(reg: &Registry) -> Result<Self> {
        Ok(SelfComponent {
            priority: reg.register_priority("coll", "self", PRIORITY)?.value(),
        })
    }
}

impl CollComponent for SelfComponent {
    fn descriptor(&self) -> &'static ComponentDescriptor {
        &DESCRIPTOR
    }

    fn comm_query(&self, shape: &CommShape) -> Result<Option<(i64, Arc<dyn CollModule>)>> {
        Ok((shape.size() == 1)
            .then(|| (self.priority, Arc::new(SelfModule) as Arc<dyn CollModule>)))
    }
}

/// self's module.
#[derive(Debug)]
pub struct SelfModule;

impl CollModule for SelfModule {
    fn component(&self) -> &'static str {
        "self"
    }

    fn provides(&self, _kind: CollKind) -> bool {
        true
    }

    fn build(&self, c: &Call, pos: Pos, _under: Underlying<'_>) -> Result<Schedule> {
        if pos.size != 1 {
            return Err(CollError::Intern(
                "coll/self on a communicator of several ranks".into(),
            ));
        }
        let mut s = Schedule::new();
        let input = c.input(&mut s);
        let out = match c.kind {
            CollKind::Barrier | CollKind::Exscan => return Ok(s),
            CollKind::Bcast
            | CollKind::Reduce
            | CollKind::Allreduce
            | CollKind::Gather
            | CollKind::Scatter
            | CollKind::Allgather
            | CollKind::Alltoall
            | CollKind::ReduceScatterBlock
            | CollKind::Scan => input,
            CollKind::ReduceScatter => {
                let n = c.counts.first().copied().unwrap_or(0);
                let o = s.zeros(n);
                s.copy(Slice::new(input, 0, n), s.all(o));
                o
            }
            CollKind::Gatherv | CollKind::Allgatherv => {
                let o = s.zeros(c.recv_len);
                s.copy(s.all(input), Slice::new(o, c.displs[0], c.counts[0]));
                o
            }
            CollKind::Scatterv => {
                let o = s.zeros(c.block);
                s.copy(Slice::new(input, c.sdispls[0], c.scounts[0]), s.all(o));
                o
            }
            CollKind::Alltoallv | CollKind::Alltoallw => {
                let o = s.zeros(c.recv_len);
                s.copy(
                    Slice::new(input, c.sdispls[0], c.scounts[0]),
                    Slice::new(o, c.displs[0], c.counts[0]),
                );
                o
            }
        };
        s.result = Some(out);
        Ok(s)
    }

    fn algorithm(&self, _call: &Call, _pos: Pos) -> &'static str {
        "local copy"
    }
}
