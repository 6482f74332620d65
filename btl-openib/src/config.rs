//! MCA parameters of btl-openib (DESIGN.md §4), registered in
//! [`tmpi_base::mca`]. Every value is validated: a malformed or inconsistent
//! setting is an [`OpenibError::Config`], never silently replaced.
//!
//! | name | default | meaning |
//! | --- | --- | --- |
//! | `btl_openib_tm_enable` | `auto` | hardware tag matching: `auto` (on when the device has TM caps), `1` (on; warn and fall back when absent), `0` (software matching) |
//! | `btl_openib_if_include` | (empty) | devices/ports to use: `mlx5_0`, `mlx5_0:1`; `tmsoft0` selects the soft NIC |
//! | `btl_openib_if_exclude` | (empty) | devices/ports never to use (exclusive with `if_include`) |
//! | `btl_openib_gid_index` | `-1` | GID table index on RoCE; `-1` = automatic (RoCE v2, IPv4-mapped preferred) |
//! | `btl_openib_eager_limit` | `8K` | largest eager payload (bytes after the TMH) |
//! | `btl_openib_srq_size` | `256` | untagged receive buffers posted at start |
//! | `btl_openib_srq_max` | `1024` | most untagged receive buffers (the SRQ's capacity); the pool doubles when it runs below a quarter |
//! | `btl_openib_send_queue` | `256` | send buffers / outstanding signalled sends per module |
//! | `btl_openib_tm_max_tags` | `1024` | tag list entries to ask for (capped by the device) |
//! | `btl_openib_rcache_max_entries` | `0` | registration cache: most unpinned cached regions (0: deregister as soon as unused; see docs/btl-openib.md before raising it) |
//! | `btl_openib_rcache_max_bytes` | `1G` | registration cache: most bytes held by unpinned cached regions |
//! | `btl_openib_rnr_retry` | `7` | RNR retries (7 = infinite; a last resort: buffers are replenished first) |
//! | `btl_openib_timeout` | `14` | local ACK timeout code (4.096 µs · 2^n) |
//! | `btl_openib_retry_count` | `7` | transport retries before a completion error |

use tmpi_base::mca::{Level, ParamSpec, Registry, Tristate};

use crate::error::OpenibError;

/// Resolved configuration of the component.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenibConfig {
    /// `btl_openib_tm_enable`.
    pub tm_enable: Tristate,
    /// `btl_openib_if_include`.
    pub if_include: Vec<String>,
    /// `btl_openib_if_exclude`.
    pub if_exclude: Vec<String>,
    /// `btl_openib_gid_index` (`None` = automatic).
    pub gid_index: Option<u32>,
    /// `btl_openib_eager_limit`.
    pub eager_limit: usize,
    /// `btl_openib_srq_size`.
    pub srq_size: u32,
    /// `btl_openib_srq_max`.
    pub srq_max: u32,
    /// `btl_openib_send_queue`.
    pub send_queue: u32,
    /// `btl_openib_tm_max_tags`.
    pub tm_max_tags: u32,
    /// `btl_openib_rcache_max_entries`.
    pub rcache_max_entries: usize,
    /// `btl_openib_rcache_max_bytes`.
    pub rcache_max_bytes: u64,
    /// `btl_openib_rnr_retry`.
    pub rnr_retry: u8,
    /// `btl_openib_timeout`.
    pub timeout: u8,
    /// `btl_openib_retry_count`.
    pub retry_count: u8,
}

impl Default for OpenibConfig {
    fn default() -> Self {
        OpenibConfig {
            tm_enable: Tristate::Auto,
            if_include: Vec::new(),
            if_exclude: Vec::new(),
            gid_index: None,
            eager_limit: 8192,
            srq_size: 256,
            srq_max: 1024,
            send_queue: 256,
            tm_max_tags: 1024,
            // 0: tmpi sees no free()/munmap, so a cached registration of
            // freed memory would move data from/into the old pages (found
            // on rxe, docs/journal/stress-soaks.md). Raise only for stable buffers.
            rcache_max_entries: 0,
            rcache_max_bytes: 1 << 30,
            rnr_retry: 7,
            timeout: 14,
            retry_count: 7,
        }
    }
}

fn spec(name: &str, level: Level, help: &str) -> ParamSpec {
    ParamSpec::new("btl", "openib", name)
        .help(help)
        .level(level)
}

impl OpenibConfig {
    /// Registers the parameters in `reg` and returns their values.
    pub fn register(reg: &Registry) -> Result<Self, OpenibError> {
        let d = OpenibConfig::default();
        let e = |e: tmpi_base::mca::McaError| OpenibError::Config(e.to_string());
        let int =
            |name: &str, lvl: Level, help: &str, def: i64, r: std::ops::RangeInclusive<i64>| {
                reg.register_int_range(spec(name, lvl, help), def, r)
                    .map(|p| p.value())
                    .map_err(e)
            };
        let tm_enable = reg
            .register_tristate(
                spec("tm_enable", Level::UserBasic, "Hardware tag matching: auto (on when the device has TM caps), 1 (on; warn and fall back when the device has none), 0 (software matching over openib)"),
                d.tm_enable,
            )
            .map_err(e)?
            .value();
        let if_include = reg
            .register_list(spec("if_include", Level::UserBasic, "RDMA devices or device:port to use (e.g. mlx5_0,mlx5_1:1); tmsoft0 selects the soft NIC; exclusive with btl_openib_if_exclude"), &[])
            .map_err(e)?
            .value();
        let if_exclude = reg
            .register_list(spec("if_exclude", Level::UserBasic, "RDMA devices or device:port never to use; exclusive with btl_openib_if_include"), &[])
            .map_err(e)?
            .value();
        let gid = int("gid_index", Level::UserDetail, "GID table index used on RoCE ports (-1: automatic, a RoCE v2 GID, IPv4-mapped preferred)", -1, -1..=65_535)?;
        let eager = reg
            .register_size(spec("eager_limit", Level::TunerBasic, "Largest eager payload in bytes (after the 16-byte TMH); larger messages use rendezvous"), d.eager_limit as u64)
            .map_err(e)?
            .value();
        let srq_size = int(
            "srq_size",
            Level::TunerBasic,
            "Untagged receive buffers posted to the shared receive queue at start",
            i64::from(d.srq_size),
            16..=1 << 20,
        )?;
        let srq_max = int("srq_max", Level::TunerBasic, "Most untagged receive buffers (SRQ capacity); the posted pool doubles when it runs below a quarter", i64::from(d.srq_max), 16..=1 << 20)?;
        let send_queue = int(
            "send_queue",
            Level::TunerBasic,
            "Send buffers and outstanding sends per module (beyond: the send is refused as busy)",
            i64::from(d.send_queue),
            4..=1 << 16,
        )?;
        let tm_max_tags = int(
            "tm_max_tags",
            Level::TunerDetail,
            "Tag list entries requested for the TM-SRQ (capped by the device's max_num_tags)",
            i64::from(d.tm_max_tags),
            1..=1 << 20,
        )?;
        let rc_entries = int("rcache_max_entries", Level::TunerDetail, "Registration cache: most unpinned regions kept registered (0: deregister as soon as unused)", d.rcache_max_entries as i64, 0..=1 << 20)?;
        let rc_bytes = reg
            .register_size(
                spec(
                    "rcache_max_bytes",
                    Level::TunerDetail,
                    "Registration cache: most bytes kept registered by unpinned regions",
                ),
                d.rcache_max_bytes,
            )
            .map_err(e)?
            .value();
        let rnr = int(
            "rnr_retry",
            Level::TunerDetail,
            "RNR retry count (7 = infinite); a last resort, receive buffers are replenished first",
            7,
            0..=7,
        )?;
        let timeout = int(
            "timeout",
            Level::TunerDetail,
            "Local ACK timeout code (4.096 us * 2^n)",
            14,
            1..=31,
        )?;
        let retry = int(
            "retry_count",
            Level::TunerDetail,
            "Transport retries before a completion error",
            7,
            0..=7,
        )?;
        reg.register_verbose("btl", "openib").map_err(e)?;
        reg.register_priority("btl", "openib", 30).map_err(e)?;
        let c = OpenibConfig {
            tm_enable,
            if_include,
            if_exclude,
            gid_index: u32::try_from(gid).ok(),
            eager_limit: usize::try_from(eager).unwrap_or(usize::MAX),
            srq_size: srq_size as u32,
            srq_max: srq_max as u32,
            send_queue: send_queue as u32,
            tm_max_tags: tm_max_tags as u32,
            rcache_max_entries: rc_entries as usize,
            rcache_max_bytes: rc_bytes,
            rnr_retry: rnr as u8,
            timeout: timeout as u8,
            retry_count: retry as u8,
        };
        c.validate()?;
        Ok(c)
    }

    /// Checks the values are consistent.
    pub fn validate(&self) -> Result<(), OpenibError> {
        if !self.if_include.is_empty() && !self.if_exclude.is_empty() {
            return Err(OpenibError::Config(
                "btl_openib_if_include and btl_openib_if_exclude are mutually exclusive".into(),
            ));
        }
        if self.srq_size > self.srq_max {
            return Err(OpenibError::Config(format!(
                "btl_openib_srq_size ({}) exceeds btl_openib_srq_max ({})",
                self.srq_size, self.srq_max
            )));
        }
        if self.eager_limit == 0 || self.eager_limit > (1 << 30) {
            return Err(OpenibError::Config(format!(
                "btl_openib_eager_limit must be in 1..=1G, not {}",
                self.eager_limit
            )));
        }
        Ok(())
    }

    /// Whether `device:port` passes the include/exclude lists. Entries are
    /// `device` (all ports) or `device:port`.
    pub fn port_selected(&self, device: &str, port: u8) -> bool {
        let hit = |list: &[String]| {
            list.iter().any(|e| match e.split_once(':') {
                Some((d, p)) => d == device && p.parse::<u8>().ok() == Some(port),
                None => e == device,
            })
        };
        if !self.if_include.is_empty() {
            hit(&self.if_include)
        } else {
            !hit(&self.if_exclude)
        }
    }

    /// Whether a device was named explicitly in `btl_openib_if_include`
    /// (required for explicit-only devices such as the soft NIC).
    pub fn names_device(&self, device: &str) -> bool {
        self.if_include
            .iter()
            .any(|e| e.split_once(':').map_or(e.as_str(), |(d, _)| d) == device)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tmpi_base::mca::Sources;

    fn reg(pairs: &[(&str, &str)]) -> Registry {
        Registry::new(
            Sources::default()
                .with_cmdline(pairs.iter().map(|(k, v)| (k.to_string(), v.to_string()))),
        )
    }

    #[test]
    fn defaults_and_overrides() {
        let c = OpenibConfig::register(&reg(&[])).unwrap();
        assert_eq!(c, OpenibConfig::default());
        let c = OpenibConfig::register(&reg(&[
            ("btl_openib_tm_enable", "0"),
            ("btl_openib_if_include", "mlx5_0:1,tmsoft0"),
            ("btl_openib_gid_index", "3"),
            ("btl_openib_eager_limit", "4K"),
        ]))
        .unwrap();
        assert_eq!(c.tm_enable, Tristate::Off);
        assert_eq!(c.gid_index, Some(3));
        assert_eq!(c.eager_limit, 4096);
        assert!(c.port_selected("mlx5_0", 1));
        assert!(!c.port_selected("mlx5_0", 2));
        assert!(c.port_selected("tmsoft0", 1));
        assert!(!c.port_selected("rxe0", 1));
        assert!(c.names_device("tmsoft0"));
        assert!(c.names_device("mlx5_0"));
    }

    #[test]
    fn bad_values_are_errors() {
        assert!(OpenibConfig::register(&reg(&[("btl_openib_tm_enable", "maybe")])).is_err());
        assert!(OpenibConfig::register(&reg(&[
            ("btl_openib_if_include", "a"),
            ("btl_openib_if_exclude", "b")
        ]))
        .is_err());
        assert!(OpenibConfig::register(&reg(&[
            ("btl_openib_srq_size", "2048"),
            ("btl_openib_srq_max", "1024")
        ]))
        .is_err());
        let c = OpenibConfig::register(&reg(&[("btl_openib_if_exclude", "rxe0:1")])).unwrap();
        assert!(!c.port_selected("rxe0", 1));
        assert!(c.port_selected("rxe0", 2));
    }
}
