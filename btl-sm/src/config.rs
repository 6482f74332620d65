//! Configuration of the sm BTL and its MCA parameters (`btl_sm_*`).

use tmpi_base::mca::{Level, McaError, ParamSpec, Registry, Source};
use tmpi_btl::EXCLUSIVITY_HIGH;

use crate::segment::Layout;
use crate::shm::{Fbox, FBOX_MIN_SIZE};

/// Room reserved for upper-layer headers in eager fragments, on top of the
/// eager limit.
pub const EAGER_HEADER_ROOM: usize = 128;
/// Payload bytes an eager-class FIFO fragment holds at most: eager
/// messages above it (up to `btl_sm_eager_limit`) take max-class fragments,
/// so that raising the eager limit does not shrink the eager class's count.
pub const EAGER_FRAG_DATA: usize = 4096;

/// Single-copy mechanism for large messages (`btl_sm_single_copy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SingleCopy {
    /// CMA if the probe at wire-up succeeds for every peer, else none.
    Auto,
    /// CMA; wire-up fails if it does not work.
    Cma,
    /// No single copy: no GET capability, the pml copies through the
    /// segment in pipelined fragments.
    None,
}

/// sm configuration; [`Default`] is the built-in default of every parameter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SmConfig {
    /// `btl_sm_eager_limit` (default 4 KiB). Above 4 KiB
    /// ([`EAGER_FRAG_DATA`]) an eager message takes a max-class fragment:
    /// one copy in, one copy out, no rendezvous. 16 KiB was much faster than
    /// the rendezvous at 8-16 KiB when the two cores are close and much
    /// slower when the host placed them far apart (each eager byte crosses
    /// between the cores twice), so it is not the default
    /// (docs/journal/pml-performance.md, "Eager up to 16 KiB over sm").
    pub eager_limit: usize,
    /// `btl_sm_max_send_size` (default 32 KiB): largest fragment.
    pub max_send_size: usize,
    /// `btl_sm_fbox_size` (default 4 KiB): ring bytes per sender per
    /// receiver (power of two).
    pub fbox_size: usize,
    /// `btl_sm_fbox_max` (default 1 KiB, capped at the largest record of
    /// the `btl_sm_fbox_size` ring when not set): largest fragment sent
    /// through a fast box. Set explicitly above that largest record, it is
    /// an error.
    pub fbox_max: usize,
    /// `btl_sm_fifo_size` (default 1 MiB): bytes of fragment memory in each
    /// process's segment (half for max-size fragments, the rest for eager
    /// ones, at least 2 of each). Bounds what one process can have queued
    /// in its peers' FIFOs.
    pub fifo_size: usize,
    /// `btl_sm_single_copy`.
    pub single_copy: SingleCopy,
    /// `btl_sm_exclusivity` (default `EXCLUSIVITY_HIGH - 1`).
    pub exclusivity: u32,
    /// `btl_sm_poll_budget` (default 31, like vader): FIFO pops per
    /// progress call.
    pub poll_budget: usize,
    /// `btl_sm_coop_min` (default 32 KiB, 0 = off): smallest registered
    /// region for which the sender offers a cooperative copy slot (it then
    /// writes part of the message into the receiver's buffer with
    /// `process_vm_writev` while the receiver reads the rest).
    pub coop_min: usize,
    /// `btl_sm_coop_chunk` (default 128 KiB): preferred chunk of a
    /// cooperative copy (a 4 KiB multiple >= 16 KiB; a message has at most
    /// 64 chunks, so larger messages get larger chunks, and at least two,
    /// so messages below twice this size are cut in halves).
    pub coop_chunk: usize,
    /// `btl_sm_coop_fail_test` (default false, tests only): the sender's
    /// cooperative writes are not done and reported as failed, so the
    /// receiver re-reads those chunks.
    pub coop_fail_test: bool,
    /// `btl_sm_huge_after` (default 4, 0 = never): a single-copy source
    /// whose whole 2 MiB ranges were registered this many times goes onto
    /// transparent huge pages ([`tmpi_smsc::huge`]).
    pub huge_after: u32,
}

/// Default of `btl_sm_fbox_max`: a 1 KiB message with the pml's match
/// header (1 044 bytes) still goes through the fast box, with room for a
/// longer header: the fast box (and the direct receive) instead of the
/// FIFO for the small and 1 KiB messages of ping-pongs and collectives
/// (measurements: docs/journal/pml-performance.md).
pub const DEFAULT_FBOX_MAX: usize = 1088;

/// Default of `btl_sm_fbox_max` in an oversubscribed launch (more ranks
/// than cores): 1 KiB messages go through the FIFO.
pub const OVERSUBSCRIBED_FBOX_MAX: usize = 1024;

impl Default for SmConfig {
    fn default() -> Self {
        SmConfig {
            eager_limit: 4096,
            max_send_size: 32 * 1024,
            fbox_size: 4096,
            fbox_max: DEFAULT_FBOX_MAX,
            fifo_size: 1 << 20,
            single_copy: SingleCopy::Auto,
            exclusivity: EXCLUSIVITY_HIGH - 1,
            poll_budget: 31,
            coop_min: 32 * 1024,
            coop_chunk: 128 * 1024,
            coop_fail_test: false,
            huge_after: 4,
        }
    }
}

impl SmConfig {
    /// Checks the values and their relations.
    pub fn validate(&self) -> Result<(), String> {
        if self.max_send_size < 256 || self.max_send_size > 64 << 20 {
            return Err(format!(
                "btl_sm_max_send_size {} not in 256..=64M",
                self.max_send_size
            ));
        }
        if self.eager_limit == 0 || self.eager_limit > self.max_send_size {
            return Err(format!(
                "btl_sm_eager_limit {} not in 1..=max_send_size",
                self.eager_limit
            ));
        }
        if !self.fbox_size.is_power_of_two() || !(FBOX_MIN_SIZE..=1 << 20).contains(&self.fbox_size)
        {
            return Err(format!(
                "btl_sm_fbox_size {} is not a power of two in {FBOX_MIN_SIZE}..=1M",
                self.fbox_size
            ));
        }
        if self.fbox_max > Fbox::max_record(self.fbox_size) {
            return Err(format!(
                "btl_sm_fbox_max {} exceeds {} for btl_sm_fbox_size {}",
                self.fbox_max,
                Fbox::max_record(self.fbox_size),
                self.fbox_size
            ));
        }
        if self.fifo_size > 1 << 30 {
            return Err(format!("btl_sm_fifo_size {} exceeds 1G", self.fifo_size));
        }
        if self.poll_budget == 0 {
            return Err("btl_sm_poll_budget 0 is not above 0".into());
        }
        if self.coop_chunk < 16 * 1024
            || !self.coop_chunk.is_multiple_of(4096)
            || self.coop_chunk > 1 << 30
        {
            return Err(format!(
                "btl_sm_coop_chunk {} is not a 4 KiB multiple in 16K..=1G",
                self.coop_chunk
            ));
        }
        Ok(())
    }

    /// Data capacity of eager fragments.
    pub fn eager_cap(&self) -> usize {
        (self.eager_limit.min(EAGER_FRAG_DATA) + EAGER_HEADER_ROOM).min(self.max_send_size)
    }

    /// Segment layout for `slots` local processes.
    pub fn layout(&self, slots: u32) -> Layout {
        let max_slot = 64 + self.max_send_size.div_ceil(64) * 64;
        let eager_slot = 64 + self.eager_cap().div_ceil(64) * 64;
        let n_max = (self.fifo_size / 2 / max_slot).max(2);
        let n_eager = (self.fifo_size.saturating_sub(n_max * max_slot) / eager_slot).max(2);
        Layout {
            slots,
            fbox_size: self.fbox_size as u32,
            n_eager: n_eager as u32,
            eager_cap: self.eager_cap() as u32,
            n_max: n_max as u32,
            max_cap: self.max_send_size as u32,
        }
    }

    /// Registers the `btl_sm_*` parameters in `reg` and reads them.
    pub fn from_registry(reg: &Registry) -> Result<SmConfig, McaError> {
        let d = SmConfig::default();
        let spec = |name: &str, help: &str, level| {
            ParamSpec::new("btl", "sm", name).help(help).level(level)
        };
        let size = |name: &str, help: &str, def: usize| {
            reg.register_size(spec(name, help, Level::TunerBasic), def as u64)
                .map(|p| p.value() as usize)
        };
        let eager_limit = size(
            "eager_limit",
            "Largest message payload sent eagerly over shared memory (copied into a FIFO \
             fragment and out again; larger ones go rendezvous, read with one CMA call)",
            d.eager_limit,
        )?;
        let max_send_size = size(
            "max_send_size",
            "Largest fragment (header + payload); pipelined copies use fragments of this size",
            d.max_send_size,
        )?;
        let fbox_size = size(
            "fbox_size",
            "Bytes of each per-peer fast box ring (power of two)",
            d.fbox_size,
        )?;
        let fbox_max = reg.register_size(
            spec(
                "fbox_max",
                "Largest fragment sent through a fast box (default: 1088, capped at the largest \
                 record of the btl_sm_fbox_size ring)",
                Level::TunerBasic,
            ),
            d.fbox_max as u64,
        )?;
        let fbox_max = match fbox_max.source() {
            // Not set: the default, within what the configured ring holds;
            // in an oversubscribed launch 1 KiB messages keep the FIFO,
            // whose many fragments let a sender run ahead of a descheduled
            // receiver (a 4 KiB ring holds three such records): an
            // oversubscribed 1 KiB bcast was several times faster through
            // the FIFO.
            Source::Default if reg.launch_oversubscribed() => OVERSUBSCRIBED_FBOX_MAX
                .min(fbox_max.value() as usize)
                .min(Fbox::max_record(fbox_size)),
            Source::Default => (fbox_max.value() as usize).min(Fbox::max_record(fbox_size)),
            _ => fbox_max.value() as usize,
        };
        let fifo_size = size(
            "fifo_size",
            "Bytes of fragment memory per process (bounds data queued towards peers)",
            d.fifo_size,
        )?;
        let sc = reg.register_enum(
            spec(
                "single_copy",
                "Single-copy mechanism for large messages: auto (CMA if permitted), cma, none \
                 (copy through the segment)",
                Level::UserBasic,
            ),
            &["auto", "cma", "none"],
            "auto",
        )?;
        let excl = reg.register_int_range(
            spec(
                "exclusivity",
                "Selection weight of the sm BTL (highest reachable wins)",
                Level::DevBasic,
            ),
            d.exclusivity as i64,
            0..=u32::MAX as i64,
        )?;
        let budget = reg.register_int_range(
            spec(
                "poll_budget",
                "FIFO fragments handled per progress call",
                Level::DevDetail,
            ),
            d.poll_budget as i64,
            1..=1 << 20,
        )?;
        let coop_min_p = reg.register_size(
            spec(
                "coop_min",
                "Smallest single-copy message the sender helps copy into the receiver's buffer \
                 (process_vm_writev while the receiver reads the rest, when the sender waits in \
                 its progress loop); 0 = off. Off by default when tmpirun reports more ranks \
                 than cores",
                Level::TunerBasic,
            ),
            d.coop_min as u64,
        )?;
        // With more ranks than cores a sender is often preempted in the
        // middle of a chunk it claimed, and the receiver then waits for it
        // (on a loaded machine no faster than the plain copy): the built-in
        // default turns the cooperation off there; a value set anywhere wins.
        let coop_min = if *coop_min_p.source() == Source::Default && reg.launch_oversubscribed() {
            0
        } else {
            coop_min_p.value() as usize
        };
        let coop_chunk = size(
            "coop_chunk",
            "Preferred chunk of a cooperative copy (4 KiB multiple >= 16K; at least 2 and at \
             most 64 chunks per message)",
            d.coop_chunk,
        )?;
        let coop_fail_test = reg
            .register_bool(
                spec(
                    "coop_fail_test",
                    "Testing only: the sender's cooperative writes fail, the receiver re-reads",
                    Level::DevAll,
                ),
                d.coop_fail_test,
            )?
            .value();
        let huge_after = reg.register_int_range(
            spec(
                "huge_after",
                "Single copy: once a message source's whole 2 MiB ranges have been sent this many \
                 times, they are put on transparent huge pages (madvise MADV_COLLAPSE, once each; \
                 contents unchanged, only ranges whose pages are all in memory), so the \
                 receiver's process_vm_readv pins one page per 2 MiB instead of 512; 0 = never",
                Level::TunerBasic,
            ),
            i64::from(d.huge_after),
            0..=i64::from(u32::MAX),
        )?;
        reg.register_verbose("btl", "sm")?;
        let single_copy = match sc.get().as_str() {
            "cma" => SingleCopy::Cma,
            "none" => SingleCopy::None,
            _ => SingleCopy::Auto,
        };
        let cfg = SmConfig {
            eager_limit,
            max_send_size,
            fbox_size,
            fbox_max,
            fifo_size,
            single_copy,
            exclusivity: excl.value() as u32,
            poll_budget: budget.value() as usize,
            coop_min,
            coop_chunk,
            coop_fail_test,
            huge_after: huge_after.value() as u32,
        };
        // Every reason starts with the parameter and its value.
        cfg.validate().map_err(|why| {
            let mut w = why.splitn(3, ' ');
            let (name, value) = (w.next().unwrap_or_default(), w.next().unwrap_or_default());
            McaError::InvalidValue {
                name: name.to_string(),
                value: value.to_string(),
                expected: why.clone(),
                origin: Source::Default,
            }
        })?;
        Ok(cfg)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tmpi_base::mca::Sources;

    #[test]
    fn defaults_validate_and_bound_memory() {
        let c = SmConfig::default();
        c.validate().unwrap();
        let l = c.layout(4);
        l.validate().unwrap();
        assert!(
            l.total() <= (1 << 20) + 64 * 1024,
            "segment {} bytes",
            l.total()
        );
        assert!(l.n_max >= 2 && l.n_eager >= 2);
        let reg = tmpi_base::mca::Registry::new(Sources::default());
        assert_eq!(SmConfig::from_registry(&reg).unwrap(), c);
        assert!(reg.get("btl_sm_single_copy").is_some());
    }

    /// `btl_sm_fbox_max` left at its default follows a small ring; set
    /// explicitly above what the ring holds, it is a typed error.
    #[test]
    fn fbox_max_default_is_capped_by_the_ring() {
        let small =
            Registry::new(Sources::default().with_env([("TMPI_MCA_btl_sm_fbox_size", "1024")]));
        let c = SmConfig::from_registry(&small).unwrap();
        assert_eq!(c.fbox_max, Fbox::max_record(1024));
        c.validate().unwrap();
        let big = Registry::new(Sources::default());
        assert_eq!(
            SmConfig::from_registry(&big).unwrap().fbox_max,
            DEFAULT_FBOX_MAX
        );
        let over =
            Registry::new(Sources::default().with_env([(tmpi_base::mca::OVERSUBSCRIBED_ENV, "1")]));
        assert_eq!(
            SmConfig::from_registry(&over).unwrap().fbox_max,
            OVERSUBSCRIBED_FBOX_MAX
        );
        let over_set = Registry::new(Sources::default().with_env([
            (tmpi_base::mca::OVERSUBSCRIBED_ENV, "1"),
            ("TMPI_MCA_btl_sm_fbox_max", "1100"),
        ]));
        assert_eq!(SmConfig::from_registry(&over_set).unwrap().fbox_max, 1100);
        let too_big = Registry::new(Sources::default().with_env([
            ("TMPI_MCA_btl_sm_fbox_size", "1024"),
            ("TMPI_MCA_btl_sm_fbox_max", "1024"),
        ]));
        let err = SmConfig::from_registry(&too_big)
            .expect_err("explicit fbox_max above the ring accepted")
            .to_string();
        // Plain words: the parameter, its value and why; no Rust forms.
        assert!(
            err.starts_with("MCA parameter btl_sm_fbox_max: invalid value \"1024\"")
                && err.contains("exceeds")
                && !err.contains("SmConfig")
                && !err.contains('{'),
            "{err}"
        );
    }

    /// With eager messages up to 16 KiB (`btl_sm_eager_limit=16384`) the
    /// eager fragment class keeps 4 KiB fragments (and so its count for
    /// small messages); a 16 KiB eager message fits a max-class fragment.
    #[test]
    fn eager_limit_above_the_eager_fragments() {
        assert_eq!(SmConfig::default().eager_limit, 4096);
        let d = SmConfig {
            eager_limit: 16 * 1024,
            ..SmConfig::default()
        };
        d.validate().unwrap();
        assert_eq!(d.eager_cap(), EAGER_FRAG_DATA + EAGER_HEADER_ROOM);
        assert_eq!(d.eager_cap(), SmConfig::default().eager_cap());
        assert!(d.eager_limit + EAGER_HEADER_ROOM <= d.max_send_size);
        let l = d.layout(4);
        assert!(l.n_eager >= 100, "{l:?}");
        let small = SmConfig {
            eager_limit: 1024,
            ..d
        };
        assert_eq!(small.eager_cap(), 1024 + EAGER_HEADER_ROOM);
    }

    /// The cooperative copy is off by default in an oversubscribed launch;
    /// an explicit `btl_sm_coop_min` still wins.
    #[test]
    fn coop_off_by_default_when_oversubscribed() {
        use tmpi_base::mca::OVERSUBSCRIBED_ENV;
        let plain = Registry::new(Sources::default());
        assert_eq!(SmConfig::from_registry(&plain).unwrap().coop_min, 32 * 1024);
        let over = Registry::new(Sources::default().with_env([(OVERSUBSCRIBED_ENV, "1")]));
        assert_eq!(SmConfig::from_registry(&over).unwrap().coop_min, 0);
        let forced = Registry::new(Sources::default().with_env([
            (OVERSUBSCRIBED_ENV, "1"),
            ("TMPI_MCA_btl_sm_coop_min", "262144"),
        ]));
        assert_eq!(
            SmConfig::from_registry(&forced).unwrap().coop_min,
            256 * 1024
        );
    }

    #[test]
    fn bad_values_are_typed_errors() {
        let bad = [
            SmConfig {
                eager_limit: 1 << 20,
                ..SmConfig::default()
            },
            SmConfig {
                fbox_size: 3000,
                ..SmConfig::default()
            },
            SmConfig {
                fbox_max: 4096,
                ..SmConfig::default()
            },
            SmConfig {
                max_send_size: 10,
                ..SmConfig::default()
            },
            SmConfig {
                coop_chunk: 100_000,
                ..SmConfig::default()
            },
            SmConfig {
                coop_chunk: 4096,
                ..SmConfig::default()
            },
        ];
        for b in bad {
            assert!(b.validate().is_err(), "{b:?}");
        }
    }
}
