//! Configuration of the soft NIC: its TM capabilities and transport sizes.
//!
//! The values come from MCA parameters (DESIGN.md §4). Until the registry in
//! `tmpi_base::mca` is wired in, [`SoftConfig::from_env`] reads the MCA
//! environment form `TMPI_MCA_<name>` of:
//! - `btl_openib_tmsoft_max_num_tags` (default 1024): `tm_caps.max_num_tags`;
//! - `btl_openib_tmsoft_max_ops` (default 64): `tm_caps.max_ops`;
//! - `btl_openib_tmsoft_max_rndv_hdr_size` (default 64): `tm_caps.max_rndv_hdr_size`;
//! - `btl_openib_tmsoft_sync_mode` (`global` default | `stale`): see
//!   [`crate::soft::tm::SyncMode`];
//! - `btl_openib_tmsoft_ring_size` (default 1 MiB): bytes of each QP's
//!   receive ring; the largest message is half of it minus a header.

use super::tm::SyncMode;
use crate::api::VerbsError;

/// MCA parameter names (without the `TMPI_MCA_` prefix).
pub const PARAM_MAX_NUM_TAGS: &str = "btl_openib_tmsoft_max_num_tags";
/// See [`PARAM_MAX_NUM_TAGS`].
pub const PARAM_MAX_OPS: &str = "btl_openib_tmsoft_max_ops";
/// See [`PARAM_MAX_NUM_TAGS`].
pub const PARAM_MAX_RNDV_HDR_SIZE: &str = "btl_openib_tmsoft_max_rndv_hdr_size";
/// See [`PARAM_MAX_NUM_TAGS`].
pub const PARAM_SYNC_MODE: &str = "btl_openib_tmsoft_sync_mode";
/// See [`PARAM_MAX_NUM_TAGS`].
pub const PARAM_RING_SIZE: &str = "btl_openib_tmsoft_ring_size";

/// Soft NIC configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SoftConfig {
    /// Advertised `tm_caps.max_num_tags` (0 = advertise no tag matching).
    pub max_num_tags: u32,
    /// Advertised `tm_caps.max_ops`.
    pub max_ops: u32,
    /// Advertised `tm_caps.max_rndv_hdr_size`.
    pub max_rndv_hdr_size: u32,
    /// Counter synchronisation reading.
    pub sync_mode: SyncMode,
    /// Bytes of each QP's receive ring.
    pub ring_size: usize,
}

impl Default for SoftConfig {
    fn default() -> Self {
        SoftConfig {
            max_num_tags: 1024,
            max_ops: 64,
            max_rndv_hdr_size: 64,
            sync_mode: SyncMode::Global,
            ring_size: 1 << 20,
        }
    }
}

fn env_param(name: &str) -> Option<String> {
    std::env::var(format!("TMPI_MCA_{name}")).ok()
}

fn parse_u32(name: &str, v: &str) -> Result<u32, VerbsError> {
    v.trim()
        .parse()
        .map_err(|_| VerbsError::InvalidArgument(format!("{name}={v:?}: not an unsigned integer")))
}

impl SoftConfig {
    /// Defaults overridden by `TMPI_MCA_btl_openib_tmsoft_*` variables.
    /// A malformed value is an error, not silently ignored.
    pub fn from_env() -> Result<Self, VerbsError> {
        let mut c = SoftConfig::default();
        if let Some(v) = env_param(PARAM_MAX_NUM_TAGS) {
            c.max_num_tags = parse_u32(PARAM_MAX_NUM_TAGS, &v)?;
        }
        if let Some(v) = env_param(PARAM_MAX_OPS) {
            c.max_ops = parse_u32(PARAM_MAX_OPS, &v)?;
        }
        if let Some(v) = env_param(PARAM_MAX_RNDV_HDR_SIZE) {
            c.max_rndv_hdr_size = parse_u32(PARAM_MAX_RNDV_HDR_SIZE, &v)?;
        }
        if let Some(v) = env_param(PARAM_SYNC_MODE) {
            c.sync_mode = v.trim().parse().map_err(|e: String| {
                VerbsError::InvalidArgument(format!("{PARAM_SYNC_MODE}: {e}"))
            })?;
        }
        if let Some(v) = env_param(PARAM_RING_SIZE) {
            c.ring_size = parse_u32(PARAM_RING_SIZE, &v)? as usize;
        }
        c.validate()?;
        Ok(c)
    }

    /// Checks the values are usable.
    pub fn validate(&self) -> Result<(), VerbsError> {
        if self.max_num_tags > 0 && self.max_ops == 0 {
            return Err(VerbsError::InvalidArgument(format!(
                "{PARAM_MAX_OPS} must be > 0 when tag matching is on"
            )));
        }
        if self.max_num_tags > 0 && self.max_rndv_hdr_size < 32 {
            return Err(VerbsError::InvalidArgument(format!(
                "{PARAM_MAX_RNDV_HDR_SIZE} must be >= 32 (TMH + RVH)"
            )));
        }
        if self.ring_size < 8192 || self.ring_size > (1 << 30) {
            return Err(VerbsError::InvalidArgument(format!(
                "{PARAM_RING_SIZE} must be in 8 KiB..1 GiB"
            )));
        }
        Ok(())
    }
}
