//! The transport over the real BTLs (self, sm): opening, wire-up, per-peer
//! selection by exclusivity. (Placeholder until tmpi-btl's interface lands.)

use tmpi_base::identity::ProcessInfo;
use tmpi_base::mca::Registry;
use tmpi_base::pmi::PmiModex;

use crate::transport::{Loopback, LoopbackConfig, Transport};
use crate::PmlError;

pub(crate) fn open(
    _reg: &Registry,
    info: &ProcessInfo,
    _modex: &mut PmiModex,
    _eager_limit: u64,
) -> Result<Box<dyn Transport>, PmlError> {
    if info.size == 1 {
        let mut v = Loopback::job(1, LoopbackConfig::default());
        return Ok(Box::new(v.remove(0)));
    }
    Err(PmlError::Unsupported("BTLs not wired yet".into()))
}
