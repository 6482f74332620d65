//! tmpi-btl-sm: the shared-memory BTL between processes of one node, after
//! Open MPI's vader BTL.
//!
//! * [`shm`]: the lock-free FIFO (MPSC, vader's algorithm) and fast boxes
//!   (SPSC rings), the only code touching shared memory concurrently.
//! * [`segment`]: one segment per process in `/dev/shm`, its layout and
//!   header.
//! * single copy: `process_vm_readv` (the receiver) and, for the
//!   cooperative copy of large messages, `process_vm_writev` (the sender),
//!   from [`tmpi_smsc::cma`], which coll's sm component shares; a receiver
//!   may ask to copy alone ([`tmpi_smsc::CopyAlone`]), and reused send
//!   buffers go onto huge pages ([`tmpi_smsc::huge`]).
//! * [`module`]: wire-up, send paths, flow control, progress, get
//!   ([`SmModule`] documents the protocol).
//! * [`config`]: the `btl_sm_*` MCA parameters.
//!
//! Large messages: with `btl_sm_single_copy=auto` (default) every peer is
//! probed with a CMA read at `add_procs`; if any read fails (e.g. `EPERM`
//! under Yama or in containers) the module drops [`tmpi_btl::BtlFlags::GET`] and the
//! pml moves large messages as pipelined fragments of `max_send_size`
//! through the segment; a `get` that fails with `EPERM` later returns
//! [`BtlError::GetDenied`] and disables single copy. `none` forces the
//! copy path, `cma` makes a failed probe an error.

pub mod config;
mod direct;
pub mod liveness;
pub mod module;
pub mod segment;
pub mod shm;

pub use config::{SingleCopy, SmConfig};
pub use module::{segment_path, SmModule, SmStats, MODEX_KEY};

use tmpi_base::component::{Availability, ComponentDescriptor, ComponentRegistry};
use tmpi_base::error::Error;
use tmpi_base::identity::ProcessInfo;
use tmpi_base::mca::{McaError, Registry};
use tmpi_base::modex::Modex;
use tmpi_btl::{BtlComponent, BtlError, BtlModule};

fn register_params(reg: &Registry) -> Result<(), McaError> {
    SmConfig::from_registry(reg).map(|_| ())
}

fn probe() -> Availability {
    if std::path::Path::new("/dev/shm").is_dir() {
        Availability::Available
    } else {
        Availability::Unavailable("/dev/shm is missing".into())
    }
}

/// The component descriptor for `tmpi_info` and selection.
pub static COMPONENT: ComponentDescriptor = ComponentDescriptor {
    framework: "btl",
    name: "sm",
    priority: 50,
    description: "shared-memory transport between processes of one node (fast boxes, FIFOs, CMA)",
    register_params,
    probe,
};

/// Provider of this crate (see `tmpi_base::component::Provider`).
pub fn register(reg: &Registry, comps: &mut ComponentRegistry) -> Result<(), Error> {
    comps.add(&COMPONENT)?;
    register_params(reg)?;
    Ok(())
}

/// The sm BTL component.
#[derive(Debug, Default, Clone, Copy)]
pub struct SmComponent;

impl BtlComponent for SmComponent {
    fn name(&self) -> &'static str {
        "sm"
    }
    fn register_params(&self, reg: &Registry) -> Result<(), McaError> {
        register_params(reg)
    }
    /// No module (empty vector) when this process is alone on its node.
    fn init(
        &self,
        reg: &Registry,
        info: &ProcessInfo,
        modex: &mut dyn Modex,
    ) -> Result<Vec<Box<dyn BtlModule>>, BtlError> {
        let cfg = SmConfig::from_registry(reg).map_err(|e| BtlError::Config(e.to_string()))?;
        Ok(SmModule::open(info, modex, cfg)?
            .map(|m| Box::new(m) as Box<dyn BtlModule>)
            .into_iter()
            .collect())
    }
}
