//! Configuration of the soft NIC: its TM capabilities and transport sizes,
//! as MCA parameters (DESIGN.md §4) registered in [`tmpi_base::mca`]:
//! - `btl_openib_tmsoft_max_num_tags` (default 1024): `tm_caps.max_num_tags`
//!   (0 = advertise no tag matching);
//! - `btl_openib_tmsoft_max_ops` (default 64): `tm_caps.max_ops`;
//! - `btl_openib_tmsoft_max_rndv_hdr_size` (default 64):
//!   `tm_caps.max_rndv_hdr_size` (at least 32: TMH + RVH);
//! - `btl_openib_tmsoft_sync_mode` (`global` default | `stale`): see
//!   [`crate::soft::tm::SyncMode`];
//! - `btl_openib_tmsoft_ring_size` (default 1M): bytes of each QP's receive
//!   ring; the largest message is half of it minus a 56-byte header;
//! - `btl_openib_tmsoft_inject_error` (default empty = off): fault injection
//!   for tests, `OP:N` with `OP` one of `read` (RDMA reads, the NIC's own
//!   rendezvous reads included: the `N`-th completes with `RemAccessErr`)
//!   or `send` (the `N`-th send completes with `RetryExcErr`, nothing is
//!   delivered), counted per opened device from 1. See [`Inject`].

use tmpi_base::mca::{Level, ParamSpec, Registry};

use super::tm::SyncMode;
use crate::api::VerbsError;

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
    /// Fault injection (tests): `None` = off.
    pub inject: Option<Inject>,
}

/// Which work request fails (`btl_openib_tmsoft_inject_error=OP:N`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Inject {
    /// `true`: RDMA reads (software- and NIC-issued); `false`: sends.
    pub read: bool,
    /// The `n`-th such request of the device (from 1) fails.
    pub n: u64,
}

impl std::str::FromStr for Inject {
    type Err = VerbsError;
    fn from_str(s: &str) -> Result<Self, VerbsError> {
        let bad = || {
            VerbsError::InvalidArgument(format!(
                "btl_openib_tmsoft_inject_error: {s:?} is not read:N or send:N (N >= 1)"
            ))
        };
        let (op, n) = s.split_once(':').ok_or_else(bad)?;
        let read = match op.trim() {
            "read" => true,
            "send" => false,
            _ => return Err(bad()),
        };
        let n: u64 = n.trim().parse().map_err(|_| bad())?;
        if n == 0 {
            return Err(bad());
        }
        Ok(Inject { read, n })
    }
}

impl Default for SoftConfig {
    fn default() -> Self {
        SoftConfig {
            max_num_tags: 1024,
            max_ops: 64,
            max_rndv_hdr_size: 64,
            sync_mode: SyncMode::Global,
            ring_size: 1 << 20,
            inject: None,
        }
    }
}

fn mca(e: tmpi_base::mca::McaError) -> VerbsError {
    VerbsError::InvalidArgument(e.to_string())
}

fn spec(name: &str, help: &str) -> ParamSpec {
    ParamSpec::new("btl", "openib", name)
        .help(help)
        .level(Level::DevDetail)
}

impl SoftConfig {
    /// Registers the soft NIC's parameters in `reg` and returns their
    /// values. A malformed or out-of-range value is an error, never silently
    /// replaced by the default.
    pub fn register(reg: &Registry) -> Result<Self, VerbsError> {
        let d = SoftConfig::default();
        let tags = reg
            .register_int_range(
                spec("tmsoft_max_num_tags", "Soft NIC tmsoft0: tag list capacity it advertises (tm_caps.max_num_tags; 0 = no tag matching)"),
                i64::from(d.max_num_tags),
                0..=65_535,
            )
            .map_err(mca)?;
        let ops = reg
            .register_int_range(
                spec(
                    "tmsoft_max_ops",
                    "Soft NIC tmsoft0: outstanding tag-list operations (tm_caps.max_ops)",
                ),
                i64::from(d.max_ops),
                1..=65_535,
            )
            .map_err(mca)?;
        let rndv = reg
            .register_int_range(
                spec("tmsoft_max_rndv_hdr_size", "Soft NIC tmsoft0: largest rendezvous request it matches (tm_caps.max_rndv_hdr_size)"),
                i64::from(d.max_rndv_hdr_size),
                32..=65_536,
            )
            .map_err(mca)?;
        let mode = reg
            .register_enum(
                spec("tmsoft_sync_mode", "Soft NIC tmsoft0: while the unexpected counts differ, suspend all matching (global) or skip only entries added with a stale count (stale)"),
                &["global", "stale"],
                "global",
            )
            .map_err(mca)?;
        let ring = reg
            .register_size(
                spec("tmsoft_ring_size", "Soft NIC tmsoft0: bytes of each QP's receive ring (largest message: half of it)"),
                d.ring_size as u64,
            )
            .map_err(mca)?;
        let inject = reg
            .register_string(
                spec("tmsoft_inject_error", "Soft NIC tmsoft0, tests only: OP:N makes the N-th RDMA read (OP=read, NIC rendezvous reads included) or send (OP=send) of each opened device fail; empty = off"),
                "",
            )
            .map_err(mca)?
            .value();
        let inject = match inject.trim() {
            "" => None,
            s => Some(s.parse()?),
        };
        let c = SoftConfig {
            max_num_tags: tags.value() as u32,
            max_ops: ops.value() as u32,
            max_rndv_hdr_size: rndv.value() as u32,
            sync_mode: mode.value().parse().map_err(VerbsError::InvalidArgument)?,
            ring_size: usize::try_from(ring.value()).unwrap_or(usize::MAX),
            inject,
        };
        c.validate()?;
        Ok(c)
    }

    /// [`SoftConfig::register`] on the process-wide registry
    /// (`tmpi_base::mca::registry()`: command line, `TMPI_MCA_*`, files).
    pub fn from_mca() -> Result<Self, VerbsError> {
        Self::register(tmpi_base::mca::registry())
    }

    /// Checks the values are usable.
    pub fn validate(&self) -> Result<(), VerbsError> {
        if self.max_num_tags > 0 && self.max_ops == 0 {
            return Err(VerbsError::InvalidArgument(
                "btl_openib_tmsoft_max_ops must be > 0 when tag matching is on".into(),
            ));
        }
        if self.max_num_tags > 0 && self.max_rndv_hdr_size < 32 {
            return Err(VerbsError::InvalidArgument(
                "btl_openib_tmsoft_max_rndv_hdr_size must be >= 32 (TMH + RVH)".into(),
            ));
        }
        if self.ring_size < 8192 || self.ring_size > (1 << 30) {
            return Err(VerbsError::InvalidArgument(
                "btl_openib_tmsoft_ring_size must be in 8K..1G".into(),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tmpi_base::mca::Sources;

    fn reg(vars: &[(&str, &str)]) -> Registry {
        Registry::new(Sources::default().with_env(vars.iter().map(|(k, v)| (*k, *v))))
    }

    #[test]
    fn defaults_without_settings() {
        assert_eq!(
            SoftConfig::register(&reg(&[])).unwrap(),
            SoftConfig::default()
        );
    }

    #[test]
    fn values_from_the_environment_form() {
        let c = SoftConfig::register(&reg(&[
            ("TMPI_MCA_btl_openib_tmsoft_max_num_tags", "16"),
            ("TMPI_MCA_btl_openib_tmsoft_max_ops", "4"),
            ("TMPI_MCA_btl_openib_tmsoft_max_rndv_hdr_size", "128"),
            ("TMPI_MCA_btl_openib_tmsoft_sync_mode", "stale"),
            ("TMPI_MCA_btl_openib_tmsoft_ring_size", "64K"),
        ]))
        .unwrap();
        assert_eq!(
            c,
            SoftConfig {
                max_num_tags: 16,
                max_ops: 4,
                max_rndv_hdr_size: 128,
                sync_mode: SyncMode::StaleEntries,
                ring_size: 65536,
                inject: None,
            }
        );
        let c = SoftConfig::register(&reg(&[(
            "TMPI_MCA_btl_openib_tmsoft_inject_error",
            "read:3",
        )]))
        .unwrap();
        assert_eq!(c.inject, Some(Inject { read: true, n: 3 }));
        let c = SoftConfig::register(&reg(&[(
            "TMPI_MCA_btl_openib_tmsoft_inject_error",
            "send:1",
        )]))
        .unwrap();
        assert_eq!(c.inject, Some(Inject { read: false, n: 1 }));
    }

    #[test]
    fn bad_values_are_errors() {
        for (k, v) in [
            ("TMPI_MCA_btl_openib_tmsoft_max_num_tags", "many"),
            ("TMPI_MCA_btl_openib_tmsoft_max_ops", "0"),
            ("TMPI_MCA_btl_openib_tmsoft_max_rndv_hdr_size", "16"),
            ("TMPI_MCA_btl_openib_tmsoft_sync_mode", "sometimes"),
            ("TMPI_MCA_btl_openib_tmsoft_ring_size", "1K"),
            ("TMPI_MCA_btl_openib_tmsoft_inject_error", "read"),
            ("TMPI_MCA_btl_openib_tmsoft_inject_error", "write:1"),
            ("TMPI_MCA_btl_openib_tmsoft_inject_error", "send:0"),
        ] {
            let e = SoftConfig::register(&reg(&[(k, v)])).unwrap_err();
            assert!(matches!(e, VerbsError::InvalidArgument(_)), "{k}={v}: {e}");
        }
    }
}
