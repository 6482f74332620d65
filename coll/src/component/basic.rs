//! `basic`: simple algorithms for every collective, linear for small
//! communicators and logarithmic from `coll_basic_crossover` ranks on
//! (Open MPI's basic component, default crossover 4).
//!
//! | function | size < crossover | size >= crossover |
//! |---|---|---|
//! | barrier | linear | binomial tree |
//! | bcast | linear | binomial |
//! | reduce | linear | binomial (in order for non-commutative ops) |
//! | allreduce | binomial reduce to 0 + binomial bcast | same |
//! | gather, scatter | linear | binomial |
//! | gatherv, scatterv, alltoall(v,w) | linear | linear |
//! | allgather(v) | gather(v) to 0 + bcast | same |
//! | reduce_scatter(_block) | reduce to 0 + scatterv | same |
//! | scan, exscan | linear chain | linear chain |

use std::sync::Arc;

use tmpi_base::component::{Availability, ComponentDescriptor};
use tmpi_base::mca::{Level, McaError, ParamSpec, Registry};

use crate::algo::{alltoall, barrier, bcast, gather, reduce, Builder, Call, CollKind, Pos};
use crate::framework::{CollComponent, CollModule, CommShape, Underlying};
use crate::schedule::Schedule;
use crate::Result;

/// Default priority (low: the fallback under tuned).
pub const PRIORITY: i64 = 10;

fn register_params(reg: &Registry) -> Result<(), McaError> {
    reg.register_priority("coll", "basic", PRIORITY)?;
    reg.register_int_range(
        ParamSpec::new("coll", "basic", "crossover")
            .help(
                "Communicator size from which basic uses logarithmic instead of linear algorithms",
            )
            .level(Level::TunerDetail),
        4,
        1..=1 << 20,
    )?;
    reg.register_verbose("coll", "basic")?;
    Ok(())
}

fn probe() -> Availability {
    Availability::Available
}

/// The component descriptor.
pub static DESCRIPTOR: ComponentDescriptor = ComponentDescriptor {
    framework: "coll",
    name: "basic",
    priority: PRIORITY as i32,
    description: "linear and binomial algorithms for every collective",
    register_params,
    probe,
};

/// The opened component.
#[derive(Debug)]
pub struct Basic {
    priority: i64,
    crossover: u32,
}

impl Basic {
    /// Opens the component with its parameters from `reg`.
    pub fn open(reg: &Registry) -> Result<Self> {
        register_params(reg)?;
        let priority = reg.register_priority("coll", "basic", PRIORITY)?.value();
        let crossover = reg
            .register_int_range(ParamSpec::new("coll", "basic", "crossover"), 4, 1..=1 << 20)?
            .value() as u32;
        Ok(Basic {
            priority,
            crossover,
        })
    }
}

impl CollComponent for Basic {
    fn descriptor(&self) -> &'static ComponentDescriptor {
        &DESCRIPTOR
    }

    fn comm_query(&self, _shape: &CommShape) -> Result<Option<(i64, Arc<dyn CollModule>)>> {
        Ok(Some((
            self.priority,
            Arc::new(BasicModule {
                crossover: self.crossover,
            }),
        )))
    }
}

/// basic's module.
#[derive(Debug)]
pub struct BasicModule {
    crossover: u32,
}

impl BasicModule {
    fn pick(&self, c: &Call, pos: Pos) -> (&'static str, Builder) {
        let log = pos.size >= self.crossover;
        match (c.kind, log) {
            (CollKind::Barrier, false) => ("linear", barrier::linear),
            (CollKind::Barrier, true) => ("tree", barrier::tree),
            (CollKind::Bcast, false) => ("linear", bcast::linear),
            (CollKind::Bcast, true) => ("binomial", bcast::binomial),
            (CollKind::Reduce, false) => ("linear", reduce::reduce_linear),
            (CollKind::Reduce, true) => ("binomial", reduce::reduce_binomial),
            (CollKind::Allreduce, _) => ("reduce_bcast", reduce::allreduce_reduce_bcast),
            (CollKind::Gather, false) => ("linear", gather::gather_linear),
            (CollKind::Gather, true) => ("binomial", gather::gather_binomial),
            (CollKind::Gatherv, _) => ("linear", gather::gatherv_linear),
            (CollKind::Scatter, false) => ("linear", gather::scatter_linear),
            (CollKind::Scatter, true) => ("binomial", gather::scatter_binomial),
            (CollKind::Scatterv, _) => ("linear", gather::scatterv_linear),
            (CollKind::Allgather, _) => ("gather_bcast", gather::allgather_gather_bcast),
            (CollKind::Allgatherv, _) => ("gatherv_bcast", gather::allgatherv_gatherv_bcast),
            (CollKind::Alltoall | CollKind::Alltoallv | CollKind::Alltoallw, _) => {
                ("linear", alltoall::linear)
            }
            (CollKind::ReduceScatter | CollKind::ReduceScatterBlock, _) => {
                ("reduce_scatterv", reduce::reduce_scatter_reduce_scatterv)
            }
            (CollKind::Scan, _) => ("linear", |c, p| reduce::scan_linear(c, p, false)),
            (CollKind::Exscan, _) => ("linear", |c, p| reduce::scan_linear(c, p, true)),
        }
    }
}

impl CollModule for BasicModule {
    fn component(&self) -> &'static str {
        "basic"
    }

    fn provides(&self, _kind: CollKind) -> bool {
        true
    }

    fn build(&self, call: &Call, pos: Pos, _under: Underlying<'_>) -> Result<Schedule> {
        (self.pick(call, pos).1)(call, pos)
    }

    fn algorithm(&self, call: &Call, pos: Pos) -> &'static str {
        self.pick(call, pos).0
    }
}
