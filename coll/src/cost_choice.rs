//! A choice between two ways of doing the same thing, made from what each
//! has cost lately: per way the least of its last [`WINDOW`] samples in ns
//! per KiB (one slow sample, a preemption or a page fault, does not hold a
//! way back; a moving average did, for as long as the way was not sampled
//! again), the first sample of each way dropped (it pays for cold caches
//! and first-time set-up), the cheaper way taken, and the other one once
//! every few picks ([`SAMPLE_EVERY`] by default) so that both figures
//! follow a machine whose costs move (a shared host moves its vCPUs
//! between near and far cores every few seconds).
//!
//! Used by sm's single copy (pipes or `process_vm_readv`) and by reduce
//! (btl-sm's cooperative copy or copying alone before a fold).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// The usual sampling period: every this many picks, the way that is not
/// the cheaper one is taken once, to keep both costs current.
pub const SAMPLE_EVERY: u64 = 16;
/// Samples kept per way.
pub const WINDOW: usize = 4;

/// Which of two ways, `First` or `Second`. Until the first has a figure
/// it is taken; then the second until it has one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Way {
    /// The way tried first (the usual default).
    First,
    /// The alternative.
    Second,
}

/// Costs of two ways and the choice between them. Lock-free: the fields
/// are relaxed atomics (a lost update only delays a change of mind).
#[derive(Debug)]
pub struct CostChoice {
    ways: [Samples; 2],
    picks: AtomicU64,
    /// The cheaper way at the last pick (for the log on a change).
    first_cheaper: AtomicBool,
    /// Sampling period (picks).
    every: u64,
    /// The second way is taken only when the first costs more than
    /// `1 + margin` times the second (a bias towards the first way, the
    /// default).
    margin: f64,
}

/// One way's last [`WINDOW`] samples (f64 bits, 0 = empty) and how many
/// samples it has seen.
#[derive(Debug)]
struct Samples {
    ring: [AtomicU64; WINDOW],
    seen: AtomicU64,
}

impl Samples {
    const fn new() -> Self {
        Samples {
            ring: [const { AtomicU64::new(0) }; WINDOW],
            seen: AtomicU64::new(0),
        }
    }
}

impl Default for CostChoice {
    fn default() -> Self {
        Self::new(SAMPLE_EVERY)
    }
}

impl CostChoice {
    /// No figures yet; the other way is taken once every `every` picks
    /// (at least 2).
    pub const fn new(every: u64) -> Self {
        Self::with_margin(every, 0.0)
    }

    /// As [`CostChoice::new`], taking the second way only when the first
    /// costs more than `1 + margin` times it (0.1: 10% more).
    pub const fn with_margin(every: u64, margin: f64) -> Self {
        CostChoice {
            ways: [Samples::new(), Samples::new()],
            picks: AtomicU64::new(0),
            first_cheaper: AtomicBool::new(true),
            every: if every < 2 { 2 } else { every },
            margin,
        }
    }

    fn way(&self, way: Way) -> &Samples {
        &self.ways[match way {
            Way::First => 0,
            Way::Second => 1,
        }]
    }

    /// The way's cost in ns per KiB: the least of its last samples
    /// (`None` before its second sample).
    pub fn cost(&self, way: Way) -> Option<f64> {
        self.way(way)
            .ring
            .iter()
            .map(|a| f64::from_bits(a.load(Ordering::Relaxed)))
            .filter(|&x| x > 0.0)
            .reduce(f64::min)
    }

    /// Records a sample of `ns` for `bytes` (the way's first sample is
    /// dropped).
    pub fn sample(&self, way: Way, ns: f64, bytes: usize) {
        if bytes == 0 || !ns.is_finite() || ns < 0.0 {
            return;
        }
        let w = self.way(way);
        let k = w.seen.fetch_add(1, Ordering::Relaxed);
        if k == 0 {
            return;
        }
        let x = (ns * 1024.0 / bytes as f64).max(f64::MIN_POSITIVE);
        w.ring[(k - 1) as usize % WINDOW].store(x.to_bits(), Ordering::Relaxed);
    }

    /// The way to take now, and `Some(cheaper)` when the cheaper way
    /// changed since the last pick (for the caller's log).
    pub fn pick(&self) -> (Way, Option<Way>) {
        let k = self.picks.fetch_add(1, Ordering::Relaxed);
        let (first, second) = match (self.cost(Way::First), self.cost(Way::Second)) {
            (None, _) => return (Way::First, None),
            (Some(_), None) => return (Way::Second, None),
            (Some(f), Some(s)) => (f, s),
        };
        let first_cheaper = first <= second * (1.0 + self.margin);
        let changed = self.first_cheaper.swap(first_cheaper, Ordering::Relaxed) != first_cheaper;
        let (cheaper, other) = if first_cheaper {
            (Way::First, Way::Second)
        } else {
            (Way::Second, Way::First)
        };
        let way = if k % self.every == self.every - 1 {
            other
        } else {
            cheaper
        };
        (way, changed.then_some(cheaper))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Picks `n` times, feeding each pick the cost `f(way)` for 1 KiB.
    fn run(c: &CostChoice, n: usize, f: impl Fn(Way) -> f64) -> Vec<Way> {
        (0..n)
            .map(|_| {
                let (w, _) = c.pick();
                c.sample(w, f(w), 1024);
                w
            })
            .collect()
    }

    #[test]
    fn first_way_until_it_has_a_figure_then_the_second_then_the_cheaper() {
        let c = CostChoice::default();
        let ways = run(&c, 40, |w| if w == Way::First { 100.0 } else { 10.0 });
        // Two samples of each way (the first dropped), then the cheaper
        // (the second), the first way again once every SAMPLE_EVERY picks.
        assert_eq!(
            ways[..4],
            [Way::First, Way::First, Way::Second, Way::Second]
        );
        for (k, w) in ways.iter().enumerate().skip(4) {
            let sampled = k as u64 % SAMPLE_EVERY == SAMPLE_EVERY - 1;
            assert_eq!(*w == Way::First, sampled, "pick {k}: {ways:?}");
        }
        assert_eq!(c.cost(Way::First), Some(100.0));
        assert_eq!(c.cost(Way::Second), Some(10.0));
    }

    #[test]
    fn a_change_of_costs_changes_the_choice_within_a_few_samples() {
        let c = CostChoice::default();
        run(&c, 40, |w| if w == Way::First { 10.0 } else { 20.0 });
        assert_eq!(c.pick().0, Way::First);
        // The first way becomes dear (the cores moved apart): once its
        // window holds only dear samples the second way is taken.
        let ways = run(&c, 8, |w| if w == Way::First { 40.0 } else { 20.0 });
        assert_eq!(ways[..WINDOW], [Way::First; WINDOW], "{ways:?}");
        // (one of them may be the first way's sample)
        let second = ways[WINDOW..].iter().filter(|&&w| w == Way::Second).count();
        assert!(second >= 8 - WINDOW - 1, "{ways:?}");
        // ... and back at its next sample (a cheaper sample counts at once).
        let ways = run(&c, 2 * SAMPLE_EVERY as usize, |w| {
            if w == Way::First {
                10.0
            } else {
                20.0
            }
        });
        assert_eq!(*ways.last().unwrap(), Way::First, "{ways:?}");
    }

    #[test]
    fn one_slow_sample_does_not_hold_a_way_back() {
        let c = CostChoice::default();
        run(&c, 20, |w| if w == Way::First { 10.0 } else { 12.0 });
        c.sample(Way::First, 1000.0, 1024);
        assert_eq!(c.cost(Way::First), Some(10.0));
        assert_eq!(c.pick().0, Way::First);
    }

    #[test]
    fn a_change_is_reported_once() {
        let c = CostChoice::default();
        for (w, x) in [
            (Way::First, 1.0),
            (Way::First, 1.0),
            (Way::Second, 5.0),
            (Way::Second, 5.0),
        ] {
            c.sample(w, x, 1024);
        }
        assert_eq!(c.pick(), (Way::First, None));
        for _ in 0..WINDOW {
            c.sample(Way::First, 100.0, 1024);
        }
        assert_eq!(c.pick(), (Way::Second, Some(Way::Second)));
        assert_eq!(c.pick(), (Way::Second, None));
    }

    #[test]
    fn with_a_margin_the_second_way_must_be_clearly_cheaper() {
        let c = CostChoice::with_margin(SAMPLE_EVERY, 0.1);
        // 5% cheaper: not enough.
        let ways = run(&c, 40, |w| if w == Way::First { 100.0 } else { 95.0 });
        assert_eq!(ways.iter().filter(|&&w| w == Way::Second).count(), 2 + 2);
        // 20% cheaper: taken.
        let c = CostChoice::with_margin(SAMPLE_EVERY, 0.1);
        let ways = run(&c, 40, |w| if w == Way::First { 100.0 } else { 80.0 });
        assert_eq!(ways.iter().filter(|&&w| w == Way::First).count(), 2 + 2);
    }

    #[test]
    fn empty_or_bad_samples_are_ignored() {
        let c = CostChoice::default();
        c.sample(Way::First, 5.0, 0);
        c.sample(Way::First, f64::NAN, 1024);
        c.sample(Way::First, -1.0, 1024);
        assert_eq!(c.cost(Way::First), None);
        assert_eq!(c.pick().0, Way::First);
    }
}
