//! Configuration of the soft NIC: its TM capabilities and transport sizes,
//! as MCA parameters (DESIGN.md §4) registered in [`tmpi_base::mca`]:
//! - `btl_openib_tmsoft_max_num_tags` (default 1024): `tm_caps.max_num_tags`
//!   (0 = advertise no tag matching);
//! - `btl_openib_tmsoft_max_qp_wr` (default 32768, a power of two): the
//!   device's `max_qp_wr`; no QP may be created with more send work
//!   requests, and a TM-SRQ's hidden command QP must fit it (see below);
//! - `btl_openib_tmsoft_max_ops` (default: the value of
//!   `btl_openib_tmsoft_max_qp_wr`, as mlx5 reports): `tm_caps.max_ops`.
//!   Like mlx5 (rdma-core `providers/mlx5/verbs.c`, `create_cmd_qp`), a
//!   TM-SRQ created with `max_ops` such that `roundup_pow2(4 * max_ops) >
//!   max_qp_wr` fails with `EINVAL`: the advertised maximum itself is
//!   refused;
//! - `btl_openib_tmsoft_max_rndv_hdr_size` (default 64):
//!   `tm_caps.max_rndv_hdr_size` (at least 32: TMH + RVH);
//! - `btl_openib_tmsoft_sync_mode` (`global` default | `stale`): see
//!   [`crate::soft::tm::SyncMode`];
//! - `btl_openib_tmsoft_mtu` (256, 512, 1024 default, 2048, 4096): the
//!   port's `active_mtu`; a matched eager message longer than it (TMH
//!   included) completes with two CQEs (see [`crate::soft::tm`]);
//! - `btl_openib_tmsoft_max_msg_sz` (default 1G, at least 4096): the port's
//!   `max_msg_sz`; RDMA reads and writes longer than it, the NIC's own
//!   rendezvous reads included, complete with `LocLenErr`, sends with
//!   `LocLenErr` too (sends are further limited by the ring, below);
//! - `btl_openib_tmsoft_sw_rndv_form` (`rotate` default | `single` |
//!   `match_first` | `cancel`): which of mlx5's three completion forms a
//!   software rendezvous takes; see [`crate::soft::tm::SwRndvForm`];
//! - `btl_openib_tmsoft_ring_size` (default 1M): bytes of each QP's receive
//!   ring; the largest send is half of it minus a 56-byte header (larger
//!   sends are refused at post time with an invalid-argument error);
//! - `btl_openib_tmsoft_inject_error` (default empty = off): fault injection
//!   for tests, `OP:N` with `OP` one of `read` (RDMA reads, the NIC's own
//!   rendezvous reads included: the target refuses the `N`-th as for a bad
//!   rkey, it completes with `RemAccessErr` and both QPs fail)
//!   or `send` (the `N`-th send completes with `RetryExcErr`, nothing is
//!   delivered), counted per opened device from 1. See [`Inject`].

use tmpi_base::mca::{Level, ParamSpec, Registry};

use super::tm::{SwRndvForm, SyncMode, TmNicParams};
use crate::api::{Mtu, VerbsError};

/// Soft NIC configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SoftConfig {
    /// Advertised `tm_caps.max_num_tags` (0 = advertise no tag matching).
    pub max_num_tags: u32,
    /// Advertised `tm_caps.max_ops`.
    pub max_ops: u32,
    /// The device's `max_qp_wr` (a power of two).
    pub max_qp_wr: u32,
    /// The port's `active_mtu`.
    pub mtu: Mtu,
    /// The port's `max_msg_sz`.
    pub max_msg_sz: u32,
    /// Completion form of a software rendezvous.
    pub sw_rndv_form: SwRndvForm,
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
            max_ops: DEFAULT_MAX_QP_WR,
            max_qp_wr: DEFAULT_MAX_QP_WR,
            mtu: Mtu::Mtu1024,
            max_msg_sz: 1 << 30,
            sw_rndv_form: SwRndvForm::Rotate,
            max_rndv_hdr_size: 64,
            sync_mode: SyncMode::Global,
            ring_size: 1 << 20,
            inject: None,
        }
    }
}

/// Default `max_qp_wr` (and `tm_caps.max_ops`), as on ConnectX (2^15).
pub const DEFAULT_MAX_QP_WR: u32 = 1 << 15;

/// Largest `btl_openib_tmsoft_max_qp_wr`.
const MAX_QP_WR_LIMIT: u32 = 1 << 22;

/// Smallest `btl_openib_tmsoft_max_msg_sz`.
pub const MIN_MAX_MSG_SZ: u32 = 4096;

fn mtu_from_bytes(bytes: i64) -> Option<Mtu> {
    [
        Mtu::Mtu256,
        Mtu::Mtu512,
        Mtu::Mtu1024,
        Mtu::Mtu2048,
        Mtu::Mtu4096,
    ]
    .into_iter()
    .find(|m| i64::from(m.bytes()) == bytes)
}

fn invalid(msg: &str) -> VerbsError {
    VerbsError::InvalidArgument(msg.into())
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
        let qp_wr = reg
            .register_int_range(
                spec("tmsoft_max_qp_wr", "Soft NIC tmsoft0: the device's max_qp_wr, a power of two (largest send queue; a TM-SRQ's command QP needs roundup_pow2(4 * max_ops) of it, as on mlx5)"),
                i64::from(d.max_qp_wr),
                1..=i64::from(MAX_QP_WR_LIMIT),
            )
            .map_err(mca)?;
        let ops = reg
            .register_int_range(
                spec(
                    "tmsoft_max_ops",
                    "Soft NIC tmsoft0: outstanding tag-list operations it advertises (tm_caps.max_ops; default: btl_openib_tmsoft_max_qp_wr, as mlx5 reports, which a TM-SRQ cannot be created with)",
                ),
                qp_wr.value(),
                1..=i64::from(MAX_QP_WR_LIMIT),
            )
            .map_err(mca)?;
        let mtu = reg
            .register_int_range(
                spec("tmsoft_mtu", "Soft NIC tmsoft0: the port's active MTU in bytes (256, 512, 1024, 2048 or 4096); a matched eager message longer than it completes with two CQEs"),
                i64::from(d.mtu.bytes()),
                256..=4096,
            )
            .map_err(mca)?;
        let msg_sz = reg
            .register_size(
                spec("tmsoft_max_msg_sz", "Soft NIC tmsoft0: the port's max_msg_sz (at least 4K, at most 2G); longer RDMA reads and writes, the NIC's rendezvous reads included, fail with LOC_LEN_ERR"),
                u64::from(d.max_msg_sz),
            )
            .map_err(mca)?;
        let form = reg
            .register_enum(
                spec("tmsoft_sw_rndv_form", "Soft NIC tmsoft0: completions of a rendezvous left to software, one of mlx5's three forms: single, match_first, cancel, or rotate (each occurrence takes the next form)"),
                &["rotate", "single", "match_first", "cancel"],
                "rotate",
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
        let mtu = mtu_from_bytes(mtu.value())
            .ok_or_else(|| invalid("btl_openib_tmsoft_mtu must be 256, 512, 1024, 2048 or 4096"))?;
        let c = SoftConfig {
            max_num_tags: tags.value() as u32,
            max_ops: ops.value() as u32,
            max_qp_wr: qp_wr.value() as u32,
            mtu,
            max_msg_sz: u32::try_from(msg_sz.value()).unwrap_or(u32::MAX),
            sw_rndv_form: form.value().parse().map_err(VerbsError::InvalidArgument)?,
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

    /// The link and NIC properties a TM-SRQ model of this device uses.
    pub fn nic_params(&self) -> TmNicParams {
        TmNicParams {
            mtu: self.mtu.bytes(),
            max_msg_sz: self.max_msg_sz,
            sw_rndv_form: self.sw_rndv_form,
        }
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
        if !self.max_qp_wr.is_power_of_two() || self.max_qp_wr > MAX_QP_WR_LIMIT {
            return Err(invalid(
                "btl_openib_tmsoft_max_qp_wr must be a power of two, at most 4M",
            ));
        }
        if self.max_msg_sz < MIN_MAX_MSG_SZ || self.max_msg_sz > 1 << 31 {
            return Err(invalid("btl_openib_tmsoft_max_msg_sz must be in 4K..2G"));
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
            ("TMPI_MCA_btl_openib_tmsoft_max_qp_wr", "1024"),
            ("TMPI_MCA_btl_openib_tmsoft_mtu", "4096"),
            ("TMPI_MCA_btl_openib_tmsoft_max_msg_sz", "64K"),
            ("TMPI_MCA_btl_openib_tmsoft_sw_rndv_form", "match_first"),
        ]))
        .unwrap();
        assert_eq!(
            c,
            SoftConfig {
                max_num_tags: 16,
                max_ops: 4,
                max_qp_wr: 1024,
                mtu: Mtu::Mtu4096,
                max_msg_sz: 65536,
                sw_rndv_form: SwRndvForm::MatchFirst,
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

    /// mlx5 reports `max_ops` equal to `max_qp_wr`; so does the soft NIC
    /// unless `btl_openib_tmsoft_max_ops` is set.
    #[test]
    fn max_ops_defaults_to_max_qp_wr() {
        let d = SoftConfig::default();
        assert_eq!((d.max_qp_wr, d.max_ops), (32768, 32768));
        assert_eq!(d.mtu, Mtu::Mtu1024);
        assert_eq!(d.max_msg_sz, 1 << 30);
        assert_eq!(d.sw_rndv_form, SwRndvForm::Rotate);
        let c =
            SoftConfig::register(&reg(&[("TMPI_MCA_btl_openib_tmsoft_max_qp_wr", "256")])).unwrap();
        assert_eq!((c.max_qp_wr, c.max_ops), (256, 256));
        for (v, f) in [
            ("rotate", SwRndvForm::Rotate),
            ("single", SwRndvForm::Single),
            ("match_first", SwRndvForm::MatchFirst),
            ("cancel", SwRndvForm::Cancel),
        ] {
            let c = SoftConfig::register(&reg(&[("TMPI_MCA_btl_openib_tmsoft_sw_rndv_form", v)]))
                .unwrap();
            assert_eq!(c.sw_rndv_form, f);
        }
        for b in [256, 512, 1024, 2048, 4096] {
            let v = b.to_string();
            let c = SoftConfig::register(&reg(&[("TMPI_MCA_btl_openib_tmsoft_mtu", &v)])).unwrap();
            assert_eq!(c.nic_params().mtu, b);
        }
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
            ("TMPI_MCA_btl_openib_tmsoft_max_qp_wr", "1000"),
            ("TMPI_MCA_btl_openib_tmsoft_max_qp_wr", "0"),
            ("TMPI_MCA_btl_openib_tmsoft_max_qp_wr", "8388608"),
            ("TMPI_MCA_btl_openib_tmsoft_mtu", "1500"),
            ("TMPI_MCA_btl_openib_tmsoft_mtu", "9000"),
            ("TMPI_MCA_btl_openib_tmsoft_max_msg_sz", "1K"),
            ("TMPI_MCA_btl_openib_tmsoft_max_msg_sz", "4G"),
            ("TMPI_MCA_btl_openib_tmsoft_sw_rndv_form", "sometimes"),
        ] {
            let e = SoftConfig::register(&reg(&[(k, v)])).unwrap_err();
            assert!(matches!(e, VerbsError::InvalidArgument(_)), "{k}={v}: {e}");
        }
    }
}
