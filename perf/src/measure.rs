//! Timing: batches of post+match pairs, matchers measured alternately, medians reported.

use std::hint::black_box;
use std::time::{Duration, Instant};

use tmpi_tm_engine::{Engine, EngineConfig};

use crate::list::ListMatcher;
use crate::workload::{pair, prepared, BenchMatcher, Workload};

/// A matcher prepared for timing, with its running iteration count.
#[derive(Debug)]
pub struct Timed<X> {
    matcher: X,
    workload: Workload,
    next: u64,
    batch: u64,
}

impl<X: BenchMatcher> Timed<X> {
    /// Build at `depth` (checked by [`prepared`]) and calibrate the batch size so that one batch
    /// takes about `sample`.
    pub fn new(matcher: X, workload: Workload, depth: usize, sample: Duration) -> Self {
        let mut t = Timed {
            matcher: prepared(matcher, workload, depth),
            workload,
            next: 20,
            batch: 1,
        };
        // Warm up and calibrate: double until a batch takes a quarter of the sample.
        loop {
            let d = t.batch_time(t.batch);
            if d >= sample / 4 || t.batch >= 1 << 30 {
                let per = d.as_nanos().max(1) as f64 / t.batch as f64;
                t.batch = ((sample.as_nanos() as f64 / per) as u64).max(1);
                break;
            }
            t.batch *= 2;
        }
        t
    }

    fn batch_time(&mut self, n: u64) -> Duration {
        let mut wrong = 0u64;
        let start = Instant::now();
        for _ in 0..n {
            let i = self.next;
            self.next += 1;
            wrong += (black_box(pair(&mut self.matcher, self.workload, i)) != i) as u64;
        }
        let d = start.elapsed();
        assert_eq!(
            wrong,
            0,
            "{} {}: wrong matches while timing",
            X::NAME,
            self.workload
        );
        d
    }

    /// One sample: ns per post+match pair over one calibrated batch.
    pub fn sample(&mut self) -> f64 {
        let n = self.batch;
        self.batch_time(n).as_nanos() as f64 / n as f64
    }
}

/// Median of a non-empty slice (NaN for an empty one).
pub fn median(v: &[f64]) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.total_cmp(b));
    let n = s.len();
    if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    }
}

/// Medians (ns per pair) of one workload at one depth, engine and list measured alternately.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Row {
    /// The workload.
    pub workload: Workload,
    /// Background depth.
    pub depth: usize,
    /// tm-engine median.
    pub engine_ns: f64,
    /// list median.
    pub list_ns: f64,
}

impl Row {
    /// How many times faster the engine is than the list matcher.
    pub fn speedup(&self) -> f64 {
        self.list_ns / self.engine_ns
    }
}

/// Measure one row: `samples` alternating samples of `sample` each per matcher.
pub fn measure(workload: Workload, depth: usize, samples: usize, sample: Duration) -> Row {
    let engine = Engine::<u64, u64>::with_config(EngineConfig {
        initial_capacity: depth + 64,
        ..EngineConfig::default()
    })
    .expect("valid configuration");
    let mut e = Timed::new(engine, workload, depth, sample);
    let mut l = Timed::new(ListMatcher::<u64, u64>::new(), workload, depth, sample);
    let mut es = Vec::with_capacity(samples);
    let mut ls = Vec::with_capacity(samples);
    for _ in 0..samples.max(1) {
        es.push(e.sample());
        ls.push(l.sample());
    }
    Row {
        workload,
        depth,
        engine_ns: median(&es),
        list_ns: median(&ls),
    }
}
