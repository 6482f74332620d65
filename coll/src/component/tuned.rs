//! `tuned`: several algorithms per collective, chosen per call by a
//! decision table over communicator size `p` and message size `n` (bytes),
//! or forced with `coll_tuned_<function>_algorithm` (0 = decide, otherwise
//! the algorithm's number below). gatherv and scatterv are not provided:
//! their calls go to the underlying module (basic).
//!
//! Decision table (`n` = bytes of the whole vector unless said otherwise):
//!
//! | function | algorithms (number) | automatic choice |
//! |---|---|---|
//! | barrier | linear 1, dissemination 2, tree 3 | dissemination (one round at p = 2, ceil(log2 p) rounds) |
//! | bcast | linear 1, binomial 2, scatter_allgather 3, chain 4 (64 KiB segments) | binomial if p <= 4, n < 64 KiB or ranks yield when idle (oversubscribed); else scatter_allgather |
//! | reduce | linear 1, binomial 2, rabenseifner 3 (forced only) | linear if p <= 2, else binomial |
//! | allreduce | reduce_bcast 1, recursive_doubling 2, ring 3, rabenseifner 4 | if the op commutes, p > 2, n >= 32 KiB and count >= p: rabenseifner if p is a power of two, else ring; else recursive_doubling |
//! | gather, scatter | linear 1, binomial 2 | binomial if p * block <= 16 KiB, else linear |
//! | allgather | gather_bcast 1, ring 2, recursive_doubling 3, bruck 4 | p * block <= 64 KiB: recursive_doubling if p is a power of two, else bruck; larger: ring |
//! | allgatherv | gatherv_bcast 1, ring 2 | ring |
//! | alltoall(v,w) | linear 1, pairwise 2 | pairwise if p > 2 and the average block >= 32 KiB, else linear |
//! | reduce_scatter(_block) | reduce_scatterv 1, ring 2 | ring if the op commutes and n >= 64 KiB, else reduce_scatterv |
//! | scan, exscan | linear 1, recursive_doubling 2 | linear if p <= 4, else recursive_doubling |
//!
//! Algorithms that need a commutative op (ring allreduce, ring
//! reduce_scatter) fall back to an order-preserving one when forced with a
//! non-commutative op. The thresholds come from the measurements in
//! `docs/coll.md` (2-core shared memory); they are starting points, not
//! universal truths.

use std::sync::Arc;

use tmpi_base::component::{Availability, ComponentDescriptor};
use tmpi_base::mca::{Level, McaError, ParamSpec, Registry};

use crate::algo::{alltoall, barrier, bcast, gather, reduce, Call, CollKind, Pos};
use crate::framework::{CollComponent, CollModule, CommShape, Underlying};
use crate::schedule::Schedule;
use crate::Result;

/// Default priority (above basic, below self).
pub const PRIORITY: i64 = 30;

/// Default pipeline segment of the chain broadcast.
pub const BCAST_SEGMENT: u64 = 64 * 1024;

/// Default of `coll_tuned_direct_max`: blocking barrier, bcast, reduce and
/// allreduce of at most this many bytes run as direct algorithms
/// (`crate::direct`) when their algorithm is decided (not forced). At most
/// [`crate::direct::DIRECT_CAP`] (larger values are capped there).
pub const DIRECT_MAX: u64 = crate::direct::DIRECT_CAP as u64;

/// The functions tuned provides and the names of their algorithms
/// (number = index + 1).
pub const ALGORITHMS: &[(CollKind, &[&str])] = &[
    (CollKind::Barrier, &["linear", "dissemination", "tree"]),
    (
        CollKind::Bcast,
        &["linear", "binomial", "scatter_allgather", "chain"],
    ),
    (CollKind::Reduce, &["linear", "binomial", "rabenseifner"]),
    (
        CollKind::Allreduce,
        &["reduce_bcast", "recursive_doubling", "ring", "rabenseifner"],
    ),
    (CollKind::Gather, &["linear", "binomial"]),
    (CollKind::Scatter, &["linear", "binomial"]),
    (
        CollKind::Allgather,
        &["gather_bcast", "ring", "recursive_doubling", "bruck"],
    ),
    (CollKind::Allgatherv, &["gatherv_bcast", "ring"]),
    (CollKind::Alltoall, &["linear", "pairwise"]),
    (CollKind::Alltoallv, &["linear", "pairwise"]),
    (CollKind::Alltoallw, &["linear", "pairwise"]),
    (CollKind::ReduceScatter, &["reduce_scatterv", "ring"]),
    (CollKind::ReduceScatterBlock, &["reduce_scatterv", "ring"]),
    (CollKind::Scan, &["linear", "recursive_doubling"]),
    (CollKind::Exscan, &["linear", "recursive_doubling"]),
];

/// The algorithm names of `kind` (empty when tuned does not provide it).
pub fn algorithms(kind: CollKind) -> &'static [&'static str] {
    ALGORITHMS
        .iter()
        .find(|(k, _)| *k == kind)
        .map_or(&[], |(_, a)| a)
}

fn algo_spec(kind: CollKind) -> ParamSpec {
    let names = algorithms(kind);
    let list: Vec<String> = names
        .iter()
        .enumerate()
        .map(|(i, n)| format!("{} {n}", i + 1))
        .collect();
    ParamSpec::new("coll", "tuned", &format!("{}_algorithm", kind.name()))
        .help(&format!(
            "Algorithm of {}: 0 decides by message and communicator size, {}",
            kind.name(),
            list.join(", ")
        ))
        .level(Level::TunerAll)
}

fn direct_spec() -> ParamSpec {
    ParamSpec::new("coll", "tuned", "direct_max")
        .help(
            "Blocking barrier, bcast, reduce and allreduce of at most this many bytes \
             (capped at 1024) run their decided algorithm directly on the pml's blocking \
             eager calls instead of a schedule; 0 = always schedules",
        )
        .level(Level::TunerAll)
}

fn direct_large_spec() -> ParamSpec {
    ParamSpec::new("coll", "tuned", "direct_large")
        .help(
            "Blocking bcast and alltoall (not in place) above coll_tuned_direct_max also run \
             directly, on the pml's blocking receives into the caller's buffer with the \
             larger sends started together as requests, wherever the decided algorithm is \
             binomial (bcast) or linear (alltoall, at most 9 ranks); 0 = only up to \
             coll_tuned_direct_max",
        )
        .level(Level::TunerAll)
}

fn register_params(reg: &Registry) -> Result<(), McaError> {
    reg.register_priority("coll", "tuned", PRIORITY)?;
    for (k, names) in ALGORITHMS {
        reg.register_int_range(algo_spec(*k), 0, 0..=names.len() as i64)?;
    }
    reg.register_size(
        ParamSpec::new("coll", "tuned", "bcast_segment_size")
            .help("Segment size of the pipelined chain broadcast")
            .level(Level::TunerAll),
        BCAST_SEGMENT,
    )?;
    reg.register_size(direct_spec(), DIRECT_MAX)?;
    reg.register_bool(direct_large_spec(), true)?;
    reg.register_verbose("coll", "tuned")?;
    Ok(())
}

fn probe() -> Availability {
    Availability::Available
}

/// The component descriptor.
pub static DESCRIPTOR: ComponentDescriptor = ComponentDescriptor {
    framework: "coll",
    name: "tuned",
    priority: PRIORITY as i32,
    description: "several algorithms per collective chosen by message and communicator size",
    register_params,
    probe,
};

/// The opened component: priority and forced algorithms.
#[derive(Debug)]
pub struct Tuned {
    priority: i64,
    forced: Arc<[u8; 17]>,
    segment: usize,
    direct_max: usize,
    direct_large: bool,
    yielding: bool,
}

impl Tuned {
    /// Opens the component with its parameters from `reg`.
    pub fn open(reg: &Registry) -> Result<Self> {
        register_params(reg)?;
        let priority = reg.register_priority("coll", "tuned", PRIORITY)?.value();
        let mut forced = [0u8; 17];
        for (k, names) in ALGORITHMS {
            let v = reg
                .register_int_range(algo_spec(*k), 0, 0..=names.len() as i64)?
                .value();
            forced[k.index()] = v as u8;
            if v != 0 {
                tracing::info!(target: "coll_tuned", "{} forced to algorithm {v} ({})", k, names[v as usize - 1]);
            }
        }
        let segment = reg
            .register_size(
                ParamSpec::new("coll", "tuned", "bcast_segment_size"),
                BCAST_SEGMENT,
            )?
            .value()
            .max(1) as usize;
        let direct_max = reg
            .register_size(direct_spec(), DIRECT_MAX)?
            .value()
            .min(crate::direct::DIRECT_CAP as u64) as usize;
        let direct_large = reg.register_bool(direct_large_spec(), true)?.value();
        // Ranks that yield while waiting (mpi_yield_when_idle, on by itself
        // when the launcher reports more ranks than cores) pay a trip
        // through the scheduler per communication round: decisions then
        // prefer fewer rounds.
        let yielding = tmpi_base::mca::yield_when_idle(reg)?;
        Ok(Tuned {
            priority,
            forced: Arc::new(forced),
            segment,
            direct_max,
            direct_large,
            yielding,
        })
    }
}

impl CollComponent for Tuned {
    fn descriptor(&self) -> &'static ComponentDescriptor {
        &DESCRIPTOR
    }

    fn comm_query(&self, shape: &CommShape) -> Result<Option<(i64, Arc<dyn CollModule>)>> {
        if shape.size() < 2 {
            return Ok(None);
        }
        Ok(Some((
            self.priority,
            Arc::new(TunedModule {
                forced: Arc::clone(&self.forced),
                segment: self.segment,
                direct_max: self.direct_max,
                direct_large: self.direct_large,
                yielding: self.yielding,
                size: shape.size() as usize,
            }),
        )))
    }
}

/// tuned's module.
#[derive(Debug)]
pub struct TunedModule {
    forced: Arc<[u8; 17]>,
    segment: usize,
    direct_max: usize,
    direct_large: bool,
    yielding: bool,
    /// Ranks of the communicator.
    size: usize,
}

const K64: usize = 64 * 1024;

/// Largest allgather result (bytes, p x block) for which tuned decides
/// recursive doubling / Bruck; ring above (`crate::direct` follows it).
pub const ALLGATHER_RING_ABOVE: usize = K64;
const K32: usize = 32 * 1024;
const K16: usize = 16 * 1024;

impl TunedModule {
    /// The algorithm number for `c` (1-based): forced or decided.
    pub fn decide(&self, c: &Call, pos: Pos) -> u8 {
        let f = self.forced[c.kind.index()];
        if f != 0 {
            return f;
        }
        let p = pos.size as usize;
        let n = c.send_len();
        match c.kind {
            CollKind::Barrier => 2,
            CollKind::Bcast => {
                // Binomial up to 4 ranks at every size: on btl-sm it beat
                // scatter_allgather and chain at 4 ranks for 64 KiB and 1 MiB;
                // at every size when ranks yield (scatter_allgather's
                // log p + p - 1 rounds each wait for the scheduler).
                // Measurements: docs/journal/coll-performance.md.
                if p <= 4 || c.block < K64 || self.yielding {
                    2
                } else {
                    3
                }
            }
            CollKind::Reduce => {
                // Rabenseifner (3) only when forced: on 4 ranks sharing 2
                // cores it lost to binomial at 1 MiB (its 2 log p rounds
                // each wait for the scheduler; docs/coll.md).
                if p <= 2 {
                    1
                } else {
                    2
                }
            }
            CollKind::Allreduce => {
                let count = n / c.dtype.size();
                if c.commutative() && p > 2 && n >= K32 && count >= p {
                    if p.is_power_of_two() {
                        4
                    } else {
                        3
                    }
                } else {
                    2
                }
            }
            CollKind::Gather | CollKind::Scatter => {
                if p * c.block <= K16 {
                    2
                } else {
                    1
                }
            }
            CollKind::Allgather => {
                if p * c.block <= ALLGATHER_RING_ABOVE {
                    if p.is_power_of_two() {
                        3
                    } else {
                        4
                    }
                } else {
                    2
                }
            }
            CollKind::Allgatherv => 2,
            CollKind::Alltoall | CollKind::Alltoallv | CollKind::Alltoallw => {
                // Pairwise's p - 1 rounds each wait for the scheduler when
                // ranks yield, so linear is faster then.
                if p > 2 && n / p >= K32 && !self.yielding {
                    2
                } else {
                    1
                }
            }
            CollKind::ReduceScatter | CollKind::ReduceScatterBlock => {
                if c.commutative() && n >= K64 {
                    2
                } else {
                    1
                }
            }
            CollKind::Scan | CollKind::Exscan => {
                if p <= 4 {
                    1
                } else {
                    2
                }
            }
            CollKind::Gatherv | CollKind::Scatterv => 0,
        }
    }
}

impl CollModule for TunedModule {
    fn component(&self) -> &'static str {
        "tuned"
    }

    fn provides(&self, kind: CollKind) -> bool {
        !algorithms(kind).is_empty()
    }

    fn build(&self, c: &Call, pos: Pos, under: Underlying<'_>) -> Result<Schedule> {
        let a = self.decide(c, pos);
        let excl = c.kind == CollKind::Exscan;
        match (c.kind, a) {
            (CollKind::Barrier, 1) => barrier::linear(c, pos),
            (CollKind::Barrier, 3) => barrier::tree(c, pos),
            (CollKind::Barrier, _) => barrier::dissemination(c, pos),
            (CollKind::Bcast, 1) => bcast::linear(c, pos),
            (CollKind::Bcast, 3) => bcast::scatter_allgather(c, pos),
            (CollKind::Bcast, 4) => bcast::chain(c, pos, self.segment),
            (CollKind::Bcast, _) => bcast::binomial(c, pos),
            (CollKind::Reduce, 1) => reduce::reduce_linear(c, pos),
            (CollKind::Reduce, 3) => reduce::reduce_rabenseifner(c, pos),
            (CollKind::Reduce, _) => reduce::reduce_binomial(c, pos),
            (CollKind::Allreduce, 1) => reduce::allreduce_reduce_bcast(c, pos),
            (CollKind::Allreduce, 3) => reduce::allreduce_ring(c, pos),
            (CollKind::Allreduce, 4) => reduce::allreduce_rabenseifner(c, pos),
            (CollKind::Allreduce, _) => reduce::allreduce_recursive_doubling(c, pos),
            (CollKind::Gather, 1) => gather::gather_linear(c, pos),
            (CollKind::Gather, _) => gather::gather_binomial(c, pos),
            (CollKind::Scatter, 1) => gather::scatter_linear(c, pos),
            (CollKind::Scatter, _) => gather::scatter_binomial(c, pos),
            (CollKind::Allgather, 1) => gather::allgather_gather_bcast(c, pos),
            (CollKind::Allgather, 3) => gather::allgather_recursive_doubling(c, pos),
            (CollKind::Allgather, 4) => gather::allgather_bruck(c, pos),
            (CollKind::Allgather, _) => gather::allgather_ring(c, pos),
            (CollKind::Allgatherv, 1) => gather::allgatherv_gatherv_bcast(c, pos),
            (CollKind::Allgatherv, _) => gather::allgatherv_ring(c, pos),
            (CollKind::Alltoall | CollKind::Alltoallv | CollKind::Alltoallw, 2) => {
                alltoall::pairwise(c, pos)
            }
            (CollKind::Alltoall | CollKind::Alltoallv | CollKind::Alltoallw, _) => {
                alltoall::linear(c, pos)
            }
            (CollKind::ReduceScatter | CollKind::ReduceScatterBlock, 2) => {
                reduce::reduce_scatter_ring(c, pos)
            }
            (CollKind::ReduceScatter | CollKind::ReduceScatterBlock, _) => {
                reduce::reduce_scatter_reduce_scatterv(c, pos)
            }
            (CollKind::Scan | CollKind::Exscan, 2) => reduce::scan_recursive_doubling(c, pos, excl),
            (CollKind::Scan | CollKind::Exscan, _) => reduce::scan_linear(c, pos, excl),
            (CollKind::Gatherv | CollKind::Scatterv, _) => under.build(c, pos),
        }
    }

    fn direct_max(&self, kind: CollKind) -> usize {
        // Up to `DIRECT_CAP` (1 KiB) the decided algorithms are dissemination,
        // binomial, linear (p <= 2) / binomial, recursive doubling,
        // recursive doubling / Bruck (allgather) and linear (alltoall):
        // exactly what `crate::direct` runs. A forced algorithm keeps its
        // schedule.
        match kind {
            // Bcast and alltoall need no stack buffer above `DIRECT_CAP`
            // (the messages land in the caller's buffer;
            // `coll_tuned_direct_large`): up to where `decide` leaves
            // binomial (bcast: 64 KiB above 4 ranks) or linear (alltoall:
            // 32 KiB blocks above 2 ranks) when ranks do not yield.
            // Allgather at 2 ranks: recursive doubling and ring are the same
            // exchange, in the caller's buffer at every size. (A direct
            // ring at 4 and 8 ranks was no faster than the schedule.)
            // Reduce at 2 ranks (linear: the non-root sends, the root
            // receives into its result or, at rank 1, a pooled buffer).
            CollKind::Allgather | CollKind::Reduce
                if self.forced[kind.index()] == 0
                    && self.direct_max > 0
                    && self.direct_large
                    && self.size == 2 =>
            {
                usize::MAX
            }
            CollKind::Bcast | CollKind::Alltoall
                if self.forced[kind.index()] == 0 && self.direct_max > 0 && self.direct_large =>
            {
                let (all_sizes, below) = if kind == CollKind::Bcast {
                    (self.size <= 4, K64)
                } else {
                    (self.size <= 2, K32)
                };
                if all_sizes || self.yielding {
                    usize::MAX
                } else {
                    below - 1
                }
            }
            CollKind::Barrier
            | CollKind::Bcast
            | CollKind::Reduce
            | CollKind::Allreduce
            | CollKind::Allgather
            | CollKind::Alltoall
                if self.forced[kind.index()] == 0 =>
            {
                self.direct_max
            }
            _ => 0,
        }
    }

    fn algorithm(&self, c: &Call, pos: Pos) -> &'static str {
        let a = self.decide(c, pos) as usize;
        algorithms(c.kind)
            .get(a.wrapping_sub(1))
            .copied()
            .unwrap_or("underlying")
    }
}
