//! `matchbench`: ns per post+match pair of tm-engine and the ob1-style list matcher, per
//! workload and queue depth, measured alternately in one run (medians of samples).
//!
//! ```text
//! matchbench [--csv] [--depths 1,16,256,4096,65536] [--workloads specific,unexpected,...]
//!            [--samples 11] [--sample-ms 20] [--check]
//! ```
//! Without `--csv` it prints a table (with the speed-up of tm-engine over list); with `--csv`
//! it prints `matcher,workload,depth,ns_per_match` lines. Build with `--release`.
//!
//! `--check` evaluates the targets of the matching issue on the rows measured and exits with
//! status 1 if one is missed: `specific` flat within 2x over the depths measured, tm-engine
//! >= 50x faster than `list` on `specific` at depth 4096, <= 100 ns per pair at depth 1.

use std::process::ExitCode;
use std::time::Duration;

use tmpi_perf::measure::{measure, Row};
use tmpi_perf::workload::Workload;
use tmpi_tm_engine::Engine;

#[derive(Debug, thiserror::Error)]
enum ArgError {
    #[error("unknown argument {0:?}")]
    Unknown(String),
    #[error("{0} needs a value")]
    Missing(&'static str),
    #[error("bad value {value:?} for {flag}")]
    Bad { flag: &'static str, value: String },
    #[error(transparent)]
    Name(#[from] tmpi_perf::workload::UnknownName),
}

struct Args {
    csv: bool,
    depths: Vec<usize>,
    workloads: Vec<Workload>,
    samples: usize,
    sample: Duration,
    check: bool,
}

fn parse() -> Result<Args, ArgError> {
    let mut a = Args {
        csv: false,
        depths: vec![1, 16, 256, 4096, 65536],
        workloads: Workload::ALL.to_vec(),
        samples: 11,
        sample: Duration::from_millis(20),
        check: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut value = |flag: &'static str| it.next().ok_or(ArgError::Missing(flag));
        match arg.as_str() {
            "--csv" => a.csv = true,
            "--check" => a.check = true,
            "--depths" => {
                let v = value("--depths")?;
                a.depths = v
                    .split(',')
                    .map(|d| d.trim().parse::<usize>())
                    .collect::<Result<_, _>>()
                    .map_err(|_| ArgError::Bad {
                        flag: "--depths",
                        value: v.clone(),
                    })?;
                if a.depths.iter().any(|&d| d > (u32::MAX / 2) as usize) {
                    return Err(ArgError::Bad {
                        flag: "--depths",
                        value: v,
                    });
                }
            }
            "--workloads" => {
                a.workloads = value("--workloads")?
                    .split(',')
                    .map(|w| w.trim().parse())
                    .collect::<Result<_, _>>()?;
            }
            "--samples" => {
                let v = value("--samples")?;
                a.samples = v.parse().ok().filter(|&n| n > 0).ok_or(ArgError::Bad {
                    flag: "--samples",
                    value: v,
                })?;
            }
            "--sample-ms" => {
                let v = value("--sample-ms")?;
                a.sample = v
                    .parse()
                    .ok()
                    .filter(|&n| n > 0)
                    .map(Duration::from_millis)
                    .ok_or(ArgError::Bad {
                        flag: "--sample-ms",
                        value: v,
                    })?;
            }
            "-h" | "--help" => {
                println!(
                    "matchbench [--csv] [--depths 1,16,256,4096,65536] \
                     [--workloads specific,unexpected,any_source10,any_tag10] \
                     [--samples 11] [--sample-ms 20] [--check]"
                );
                std::process::exit(0);
            }
            _ => return Err(ArgError::Unknown(arg)),
        }
    }
    Ok(a)
}

fn main() -> ExitCode {
    let args = match parse() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("matchbench: {e}");
            return ExitCode::from(2);
        }
    };
    if cfg!(debug_assertions) {
        eprintln!("matchbench: warning: debug build; use --release for meaningful figures");
    }
    if args.csv {
        println!("matcher,workload,depth,ns_per_match");
    } else {
        let f = Engine::<u64, u64>::footprint();
        println!(
            "tm-engine memory: {} B per posted receive, {} B per unexpected message, {} B per hash bin",
            f.posted_slot, f.unexpected_slot, f.bin
        );
        println!(
            "medians of {} alternating samples of ~{} ms; ns per post+match pair",
            args.samples,
            args.sample.as_millis()
        );
        println!(
            "{:<13} {:>7} {:>12} {:>12} {:>9}",
            "workload", "depth", "tm-engine", "list", "speed-up"
        );
    }
    let mut rows = Vec::new();
    for &w in &args.workloads {
        for &d in &args.depths {
            let row: Row = measure(w, d, args.samples, args.sample);
            rows.push(row);
            if args.csv {
                println!("tm-engine,{},{},{:.1}", w, d, row.engine_ns);
                println!("list,{},{},{:.1}", w, d, row.list_ns);
            } else {
                println!(
                    "{:<13} {:>7} {:>12.1} {:>12.1} {:>8.1}x",
                    w.name(),
                    d,
                    row.engine_ns,
                    row.list_ns,
                    row.speedup()
                );
            }
        }
    }
    if args.check && !check_targets(&rows) {
        return ExitCode::from(1);
    }
    ExitCode::SUCCESS
}

/// Print one line per target (to stderr, so CSV output stays clean); all met?
fn check_targets(rows: &[Row]) -> bool {
    let mut ok = true;
    let mut report = |name: &str, pass: Option<bool>, detail: String| {
        let verdict = match pass {
            Some(true) => "PASS",
            Some(false) => {
                ok = false;
                "FAIL"
            }
            None => "SKIP",
        };
        eprintln!("{verdict} {name}: {detail}");
    };
    let specific: Vec<&Row> = rows
        .iter()
        .filter(|r| r.workload == Workload::Specific)
        .collect();
    let lo = specific
        .iter()
        .map(|r| r.engine_ns)
        .fold(f64::INFINITY, f64::min);
    let hi = specific.iter().map(|r| r.engine_ns).fold(0.0, f64::max);
    report(
        "specific flat within 2x",
        (specific.len() >= 2).then_some(hi <= 2.0 * lo),
        format!("min {lo:.1} ns, max {hi:.1} ns, ratio {:.2}", hi / lo),
    );
    match specific.iter().find(|r| r.depth == 4096) {
        Some(r) => report(
            ">= 50x faster than list at depth 4096",
            Some(r.speedup() >= 50.0),
            format!("{:.1}x", r.speedup()),
        ),
        None => report(
            ">= 50x faster than list at depth 4096",
            None,
            "not measured".into(),
        ),
    }
    let depth1: Vec<&Row> = rows.iter().filter(|r| r.depth == 1).collect();
    let worst = depth1.iter().map(|r| r.engine_ns).fold(0.0, f64::max);
    report(
        "<= 100 ns per post+match pair at depth 1",
        (!depth1.is_empty()).then_some(worst <= 100.0),
        format!("worst workload {worst:.1} ns"),
    );
    ok
}
