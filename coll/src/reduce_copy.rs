//! How a blocking reduce's large receives are copied: with the sender's
//! help (btl-sm's cooperative copy, where the sender writes part of the
//! message into the receiver's buffer; the default) or by the receiver
//! alone ([`tmpi_smsc::CopyAlone`]), chosen per size class from what each
//! way has cost this process's reduce calls lately ([`CostChoice`]).
//!
//! Why: the fold that follows each receive reads the bytes just received,
//! and the part the sender wrote is in the sender's cache. With the two
//! cores close the shared copy wins; with them far apart those lines cross
//! between the cores a second time and it loses (measurements:
//! docs/journal/coll-performance.md). The host moves its vCPUs between the two placements every
//! few seconds, so the choice is made from timings, not from a topology.
//! Transports without a cooperative copy are unaffected by the hint (both
//! ways then cost the same and the choice does not matter).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use tmpi_smsc::CopyAlone;

use crate::cost_choice::{CostChoice, Way};

/// Smallest vector measured (btl-sm's default `btl_sm_coop_min`).
pub const MIN: usize = 32 << 10;
/// Size classes by powers of two from [`MIN`] up to 256 KiB. From 512 KiB
/// the shared copy is kept: it won there in both placements, and sampling
/// the losing way cost more than the choice could gain.
const CLASSES: usize = 4;
/// Every this many calls of a class the other way is timed once. Rarely:
/// a call of the other way costs its own difference plus a slower call or
/// two after it (sampling every 32 calls showed in a 64 KiB loop); a change of placement shows in the taken way's own
/// figures within 4 calls, and the way back needs one sample of the other.
const SAMPLE_EVERY: u64 = 128;
/// Copying alone is taken only when the shared copy costs more than
/// `1 + MARGIN` times it: with the cores close the two ways time within a few
/// percent of each other call by call (a call after one of the other way
/// pays for the change), while a loop that stays with the shared copy runs
/// clearly faster than one that copies alone; with the cores far apart
/// copying alone is about as much cheaper.
const MARGIN: f64 = 0.1;
/// `Way::First`: with the sender's help; `Way::Second`: alone.
static CHOICES: [CostChoice; CLASSES] =
    [const { CostChoice::with_margin(SAMPLE_EVERY, MARGIN) }; CLASSES];
static CALLS_ALONE: AtomicU64 = AtomicU64::new(0);

fn class(n: usize) -> Option<usize> {
    let c = (n >= MIN).then(|| (n.ilog2() - MIN.ilog2()) as usize)?;
    (c < CLASSES).then_some(c)
}

/// One timed reduce call; while it lives, this thread copies alone if
/// that was the pick.
#[derive(Debug)]
pub(crate) struct ReduceCopy {
    class: usize,
    way: Way,
    bytes: usize,
    start: Instant,
    _alone: Option<CopyAlone>,
}

impl ReduceCopy {
    /// Picks the way for a reduce of `n` bytes (`None` below [`MIN`] and
    /// from 512 KiB: the shared copy).
    pub(crate) fn start(n: usize) -> Option<Self> {
        let c = class(n)?;
        let (way, changed) = CHOICES[c].pick();
        if let Some(cheaper) = changed {
            tracing::debug!(
                target: "coll_base",
                "reduce receives of {}-{} KiB now copy {} (with help {:.0} ns/KiB, alone {:.0})",
                (MIN << c) >> 10,
                ((MIN << (c + 1)) >> 10) - 1,
                if cheaper == Way::First { "with the sender's help" } else { "alone" },
                CHOICES[c].cost(Way::First).unwrap_or(0.0),
                CHOICES[c].cost(Way::Second).unwrap_or(0.0),
            );
        }
        if way == Way::Second {
            CALLS_ALONE.fetch_add(1, Ordering::Relaxed);
        }
        Some(ReduceCopy {
            class: c,
            way,
            bytes: n,
            start: Instant::now(),
            _alone: (way == Way::Second).then(CopyAlone::new),
        })
    }

    /// The call completed: its time is a sample of its way.
    pub(crate) fn done(self) {
        let ns = self.start.elapsed().as_nanos() as f64;
        CHOICES[self.class].sample(self.way, ns, self.bytes);
    }
}

/// Blocking reduce calls of this process that copied alone (tests and
/// diagnostics).
pub fn calls_alone() -> u64 {
    CALLS_ALONE.load(Ordering::Relaxed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn size_classes() {
        assert_eq!(class(MIN - 1), None);
        assert_eq!(class(MIN), Some(0));
        assert_eq!(class(64 << 10), Some(1));
        assert_eq!(class((64 << 10) - 1), Some(0));
        assert_eq!(class((512 << 10) - 1), Some(3));
        assert_eq!(class(512 << 10), None);
        assert_eq!(class(usize::MAX), None);
    }
}
