//! Start-up and shut-down of the pml.
//!
//! Init: MCA sources and logging → `PmiClient::connect_from_env`
//! (singleton job of one without a launcher) → `ProcessInfo` → pml
//! parameters → BTL components allowed by the `btl` selection list open and
//! publish their addresses through the PMI modex → fence → each BTL adds
//! the peers it reaches → per peer, the BTL with the highest exclusivity →
//! `mca::check_unknown()`.
//!
//! Finalize: the driver first drains what it owes (FINs, ACKs, queued data);
//! then a PMI fence, during which a helper keeps the pml progressing so that
//! peers still pulling from us finish; then the BTLs and PMI are released.

use std::sync::atomic::{AtomicBool, Ordering};

use tmpi_base::mca::{self, Level, ParamSpec};
use tmpi_base::modex::Modex;
use tmpi_base::pmi::{PmiClient, PmiModex};

use crate::comm::CommRecord;
use crate::core::Core;
use crate::matching::EngineMatcher;
use crate::pml::{InitOptions, Pml};
use crate::transport::Transport;
use crate::PmlError;

/// What stays alive between init and finalize besides the core.
pub(crate) struct Runtime {
    pub(crate) modex: PmiModex,
}

pub(crate) struct Started {
    pub(crate) core: Core,
    pub(crate) net: Box<dyn Transport>,
    pub(crate) yield_when_idle: bool,
    pub(crate) stats: bool,
    pub(crate) rt: Runtime,
    /// Node label of every rank (PMI's process mapping).
    pub(crate) node_of: Vec<u32>,
}

/// The pml's MCA parameters.
#[derive(Debug, Clone, Copy)]
pub struct PmlParams {
    /// `pml_eager_limit`: 0 = each BTL's own limit; otherwise caps it.
    pub eager_limit: u64,
    /// `pml_stats`: print protocol counters at finalize.
    pub stats: bool,
    /// `mpi_yield_when_idle`, resolved.
    pub yield_when_idle: bool,
    /// `pml_tm_thresh`: smallest receive offloaded to a tag-matching NIC.
    pub tm_thresh: u64,
    /// `pml_ob1_unexpected_limit`: bytes of eager data + per-message
    /// overhead a sender may have unconsumed at one peer before it switches
    /// to rendezvous (0 = no window).
    pub unexpected_limit: u64,
    /// `pml_ob1_bye_all_max`: largest job whose finalizing ranks tell every
    /// peer, not only those they talked with (core/bye.rs).
    pub bye_all_max: u64,
}

/// Registers (idempotently) and reads the pml's parameters.
pub fn params(reg: &mca::Registry) -> Result<PmlParams, PmlError> {
    let eager = reg
        .register_size(
            ParamSpec::new("pml", "", "eager_limit")
                .help(
                    "Largest message payload sent eagerly; 0 = each BTL's own eager limit \
                     (a non-zero value can only lower a BTL's limit)",
                )
                .level(Level::TunerBasic),
            0,
        )
        .map_err(tmpi_base::error::Error::from)?;
    let stats = reg
        .register_bool(
            ParamSpec::new("pml", "", "stats")
                .help("Print the pml's protocol counters at finalize")
                .level(Level::UserBasic),
            false,
        )
        .map_err(tmpi_base::error::Error::from)?;
    let tm_thresh = reg
        .register_size(
            ParamSpec::new("pml", "", "tm_thresh")
                .help(
                    "Smallest receive buffer offloaded to a tag-matching NIC (UCX_TM_THRESH); \
                     smaller receives are matched in software",
                )
                .level(Level::TunerBasic),
            1024,
        )
        .map_err(tmpi_base::error::Error::from)?;
    let unexpected_limit = reg
        .register_size(
            ParamSpec::new("pml", "ob1", "unexpected_limit")
                .help(
                    "Per-peer window of eager data a receiver holds unexpected from one sender: payload \
                     bytes + 512 B per eager message not yet matched; past it the sender sends \
                     eager-sized messages above 256 B as rendezvous (payload left at the sender) \
                     until the receiver receives. 0 = no window (Open MPI's behaviour). Should be \
                     the same on every rank",
                )
                .level(Level::TunerBasic),
            crate::core::DEFAULT_UNEXPECTED_LIMIT as u64,
        )
        .map_err(tmpi_base::error::Error::from)?;
    let bye_all_max = reg
        .register_int(
            ParamSpec::new("pml", "ob1", "bye_all_max")
                .help(
                    "A finalizing rank tells its peers it finalized, so that a call still waiting \
                     on it fails instead of waiting forever. Peers on the same node and peers it \
                     exchanged messages with are always told; in jobs of at most this many ranks \
                     every other peer is told too, at the cost of a connection per such pair at \
                     finalize (0: never). In larger jobs a receive naming a rank that never \
                     talked to the receiver over the network waits until the job ends",
                )
                .level(Level::TunerDetail),
            256,
        )
        .map_err(tmpi_base::error::Error::from)?;
    reg.register_verbose("pml", "ob1")
        .map_err(tmpi_base::error::Error::from)?;
    let yield_when_idle = mca::yield_when_idle(reg).map_err(tmpi_base::error::Error::from)?;
    Ok(PmlParams {
        eager_limit: eager.value(),
        stats: stats.value(),
        yield_when_idle,
        tm_thresh: tm_thresh.value(),
        unexpected_limit: unexpected_limit.value(),
        bye_all_max: bye_all_max.value().max(0) as u64,
    })
}

/// Registers `pml_tm_rndv` (read by the BTL wiring in `net.rs`).
pub(crate) fn register_tm_rndv(reg: &mca::Registry) -> Result<bool, mca::McaError> {
    Ok(reg
        .register_bool(
            ParamSpec::new("pml", "", "tm_rndv")
                .help(
                    "Rendezvous to peers on a tag-matching NIC as NIC rendezvous requests \
                     (the receiver's NIC reads the data when it matched the receive)",
                )
                .level(Level::TunerDetail),
            true,
        )?
        .value())
}

/// Registers the BTL selection parameter `btl` (read by the BTL wiring in
/// `net.rs`).
pub(crate) fn register_btl_selection(
    reg: &mca::Registry,
) -> Result<mca::SelectionList, mca::McaError> {
    Ok(reg
        .register_selection(
            "btl",
            "BTL components to use: a list (self,sm) or an exclusion (^sm)",
        )?
        .value())
}

/// The pml's parameter provider, for `tmpi_info` and the parameter
/// reference: every parameter the pml reads (`pml_*`, `pml_ob1_*`, the `btl`
/// selection list and `mpi_yield_when_idle`). The pml has no components.
pub fn register(
    reg: &mca::Registry,
    _comps: &mut tmpi_base::component::ComponentRegistry,
) -> Result<(), tmpi_base::error::Error> {
    params(reg).map_err(|e| match e {
        PmlError::Base(b) => b,
        other => tmpi_base::error::Error::Mpi {
            class: other.class(),
            message: other.to_string(),
        },
    })?;
    register_tm_rndv(reg)?;
    register_btl_selection(reg)?;
    Ok(())
}

fn pmi_err(e: impl std::fmt::Display) -> PmlError {
    PmlError::Transport(format!("PMI: {e}"))
}

pub(crate) fn start(opts: InitOptions) -> Result<Started, PmlError> {
    let reg = mca::init().map_err(tmpi_base::error::Error::from)?;
    let mut client = PmiClient::connect_from_env().map_err(pmi_err)?;
    let info = client.process_info().map_err(pmi_err)?;
    if opts.logging {
        // Another subscriber (the application's) wins; that is fine.
        let _ = tmpi_base::log::init_logging(info.rank);
    }
    let p = params(reg)?;
    let mut modex = PmiModex::new(client);
    let net = crate::net::open(reg, &info, &mut modex, p.eager_limit, &opts.btls)?;
    // Warns about every parameter set but registered by nobody.
    mca::check_unknown();
    let mut core = match net.tm_caps() {
        Some((tags, ops)) => {
            let m = crate::offload::SplitMatch::new(tags, ops, p.tm_thresh as usize)
                .map_err(|e| PmlError::Transport(e.to_string()))?;
            let mut core = Core::new(info.rank, info.size, Box::new(m));
            core.set_tm_peers((0..info.size).map(|r| net.tm_peer(r)).collect());
            core
        }
        None => Core::new(info.rank, info.size, Box::new(EngineMatcher::new())),
    };
    core.set_unexpected_limit(p.unexpected_limit);
    core.set_bye_all_max(p.bye_all_max);
    core.add_comm(CommRecord::world(info.rank, info.size))?;
    core.add_comm(CommRecord::self_comm(info.rank))?;
    tracing::debug!(target: "pml_ob1", rank = info.rank, size = info.size, "pml ready");
    Ok(Started {
        core,
        net,
        yield_when_idle: p.yield_when_idle,
        stats: p.stats,
        rt: Runtime { modex },
        node_of: info.node_of,
    })
}

pub(crate) fn finish(mut rt: Runtime, pml: &Pml) -> Result<(), PmlError> {
    // Fence while progressing: a peer may still be pulling from our send
    // buffers or waiting for our FIN; a blocking fence would starve it.
    let done = AtomicBool::new(false);
    let fence = std::thread::scope(|s| {
        let h = s.spawn(|| {
            let r = rt.modex.fence();
            done.store(true, Ordering::Release);
            r
        });
        pml.progress_until(&done);
        h.join()
    });
    match fence {
        Ok(Ok(())) => {}
        Ok(Err(e)) => return Err(pmi_err(e)),
        Err(_) => return Err(PmlError::Transport("finalize fence panicked".into())),
    }
    pml.lock().net.finalize();
    rt.modex.client().finalize().map_err(pmi_err)?;
    Ok(())
}
