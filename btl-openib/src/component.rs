//! The openib component: availability, module selection and wire-up.
//!
//! Selection: every device the provider lists (the soft NIC `tmsoft0` only
//! when `btl_openib_if_include` names it, and then the soft provider is used
//! for all modules), every port passing `btl_openib_if_include` /
//! `_if_exclude`, and of those every *active* port becomes one [`Module`].
//! No module at all is [`OpenibError::Unavailable`]: the component
//! disqualifies itself with one clear line and the pml uses other BTLs.
//!
//! Wire-up ([`wire_up`]): publish all modules' addresses under
//! [`crate::addr::MODEX_KEY`], fence, connect module `k` to each peer's
//! module `k` (same link layer; a peer with fewer modules is reached only by
//! the first ones), fence again so that no process sends before every QP
//! towards it is ready to receive.

use tmpi_base::component::{Availability, ComponentDescriptor};
use tmpi_base::identity::ProcessInfo;
use tmpi_base::mca::{McaError, Registry};
use tmpi_base::modex::{Modex, ModexError};
use tmpi_verbs::ibv::IbvProvider;
use tmpi_verbs::soft::{SoftProvider, DEVICE_NAME};
use tmpi_verbs::{Context, Provider};

use crate::addr::{decode, encode, MODEX_KEY};
use crate::config::OpenibConfig;
use crate::error::{OpenibError, Result};
use crate::module::Module;

fn register_params(reg: &Registry) -> Result<(), McaError> {
    // An invalid value is reported (with its name) by `init` and `probe`;
    // the parameters are registered either way.
    let _ = OpenibConfig::register(reg);
    let _ = tmpi_verbs::soft::SoftConfig::register(reg);
    Ok(())
}

/// The component descriptor (framework `btl`, name `openib`).
pub static COMPONENT: ComponentDescriptor = ComponentDescriptor {
    framework: "btl",
    name: "openib",
    priority: 30,
    description: "RDMA verbs transport (InfiniBand, RoCE, rxe; soft NIC tmsoft0 on request) with hardware tag matching",
    register_params,
    probe,
};

/// The crate's provider for `tmpi_info` and MPI initialisation.
pub fn register(
    reg: &Registry,
    comps: &mut tmpi_base::component::ComponentRegistry,
) -> Result<(), tmpi_base::error::Error> {
    comps.add(&COMPONENT)?;
    let _ = reg;
    Ok(())
}

/// Cheap availability check: the soft NIC when named, else libibverbs with
/// at least one device with an active, selected port. Opens nothing that
/// outlives the call.
pub fn probe() -> Availability {
    let cfg = match OpenibConfig::register(tmpi_base::mca::registry()) {
        Ok(c) => c,
        Err(e) => return Availability::Unavailable(e.to_string()),
    };
    if cfg.names_device(DEVICE_NAME) {
        return Availability::Available;
    }
    let p = match IbvProvider::load() {
        Ok(p) => p,
        Err(e) => return Availability::Unavailable(format!("libibverbs not usable: {e}")),
    };
    match active_ports(&p, &cfg) {
        Ok(v) if !v.is_empty() => Availability::Available,
        Ok(_) => Availability::Unavailable("no active RDMA port selected".into()),
        Err(e) => Availability::Unavailable(e.to_string()),
    }
}

/// The selected, active `(device, port)` pairs of a provider.
pub fn active_ports<P: Provider>(p: &P, cfg: &OpenibConfig) -> Result<Vec<(String, u8)>> {
    let mut out = Vec::new();
    for d in p.devices()? {
        if d.explicit_only && !cfg.names_device(&d.name) {
            continue;
        }
        let ctx = match p.open(&d.name) {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(target: "btl_openib", device = %d.name, "cannot open: {e}");
                continue;
            }
        };
        let nports = ctx.query_device_ex()?.phys_port_cnt;
        for port in 1..=nports {
            if !cfg.port_selected(&d.name, port) {
                continue;
            }
            match ctx.query_port(port) {
                Ok(a) if a.state == tmpi_verbs::PortState::Active => {
                    out.push((d.name.clone(), port))
                }
                Ok(a) => {
                    tracing::info!(target: "btl_openib", device = %d.name, port, state = ?a.state, "port not active; not used")
                }
                Err(e) => {
                    tracing::warn!(target: "btl_openib", device = %d.name, port, "query_port: {e}")
                }
            }
        }
    }
    Ok(out)
}

/// Opens one module per selected active port.
pub fn open_modules<P: Provider>(
    p: &P,
    cfg: &OpenibConfig,
    me: u32,
    size: u32,
) -> Result<Vec<Module<P>>> {
    let mut mods = Vec::new();
    for (dev, port) in active_ports(p, cfg)? {
        match Module::open(p, &dev, port, cfg, me, size) {
            Ok(m) => mods.push(m),
            Err(e @ OpenibError::Config(_)) => return Err(e),
            Err(e) => {
                tracing::warn!(target: "btl_openib", device = %dev, port, "port not used: {e}")
            }
        }
    }
    if mods.is_empty() {
        return Err(OpenibError::Unavailable(format!(
            "no usable RDMA port (provider {}, if_include={:?}, if_exclude={:?})",
            p.name(),
            cfg.if_include,
            cfg.if_exclude
        )));
    }
    Ok(mods)
}

/// Publishes the modules' addresses, fences, connects every peer, fences
/// again. Returns, per rank, whether some module reaches it.
pub fn wire_up<P: Provider>(
    mods: &mut [Module<P>],
    modex: &mut dyn Modex,
    me: u32,
    size: u32,
) -> Result<Vec<bool>> {
    let addrs: Vec<_> = mods.iter().map(|m| m.address()).collect();
    modex.put(MODEX_KEY, &encode(&addrs))?;
    modex.fence()?;
    let mut reach = vec![false; size as usize];
    for rank in (0..size).filter(|&r| r != me) {
        let remote = match modex.get(rank, MODEX_KEY) {
            Ok(v) => decode(&v, size).map_err(|e| ModexError::Malformed {
                rank,
                key: MODEX_KEY.into(),
                reason: e.to_string(),
            })?,
            Err(ModexError::NotFound { .. }) => continue, // the peer has no openib
            Err(e) => return Err(e.into()),
        };
        for (k, m) in mods.iter_mut().enumerate() {
            let Some(ra) = remote.get(k) else { break };
            match m.connect(rank, ra) {
                Ok(()) => reach[rank as usize] = true,
                Err(OpenibError::Unreachable(_)) => {}
                Err(e) => {
                    tracing::error!(target: "btl_openib", rank, device = m.device(), "connecting failed: {e}");
                    return Err(e);
                }
            }
        }
    }
    modex.fence()?;
    Ok(reach)
}

/// The modules of this process, per provider.
pub enum Btl {
    /// Over the soft NIC (`btl_openib_if_include=tmsoft0`).
    Soft(Vec<Module<SoftProvider>>),
    /// Over libibverbs.
    Ibv(Vec<Module<IbvProvider>>),
}

/// Component initialisation: reads the parameters from `reg`, opens the
/// modules (soft NIC when named in `btl_openib_if_include`, libibverbs
/// otherwise) and wires them up through `modex`. Returns the modules and
/// per-rank reachability. [`OpenibError::Unavailable`] disqualifies the
/// component.
pub fn init(
    reg: &Registry,
    proc_info: &ProcessInfo,
    modex: &mut dyn Modex,
) -> Result<(Btl, Vec<bool>)> {
    let cfg = OpenibConfig::register(reg)?;
    let (me, size) = (proc_info.rank, proc_info.size);
    if cfg.names_device(DEVICE_NAME) {
        let p = SoftProvider::new(tmpi_verbs::soft::SoftConfig::register(reg)?)?;
        let mut mods = open_modules(&p, &cfg, me, size)?;
        let reach = wire_up(&mut mods, modex, me, size)?;
        Ok((Btl::Soft(mods), reach))
    } else {
        let p = IbvProvider::load()
            .map_err(|e| OpenibError::Unavailable(format!("libibverbs not usable: {e}")))?;
        let mut mods = open_modules(&p, &cfg, me, size)?;
        let reach = wire_up(&mut mods, modex, me, size)?;
        Ok((Btl::Ibv(mods), reach))
    }
}
