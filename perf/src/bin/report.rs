//! `report`: the benchmark report of issue 11 (docs/perf.md).
//!
//! `cargo run --release -p tmpi-perf --bin report -- --out DIR [--prefix TMPI_PREFIX] [--quick] [--rt]`
//!
//! Builds perf/c's benchmarks with tmpi's `mpicc` (from the prefix made by
//! `cargo xtask install --prefix DIR`; without `--prefix`, the report makes
//! one under `target/report-prefix` with `cargo xtask install` (release)),
//! `mpicc.openmpi` and `mpicc.mpich`,
//! runs them alternately (tmpi, Open MPI, MPICH, tmpi, ...), and writes
//! `DIR/report.md` with medians, min-max and ratios to Open MPI, plus PNG
//! plots (`plotters`, with the DejaVu Sans font embedded: no system font library).
//!
//! `--rt` (root only): every 2-rank job runs under the real-time FIFO
//! class (`chrt -f 20`, RT throttling off for the run, restored after), so
//! compilers and other jobs on the machine cannot preempt the two
//! busy-polling ranks: on a shared 2-core machine this is what makes
//! figures of different runs comparable (without it Open MPI's own 8-byte
//! latency more than doubled while two builds ran; docs/perf.md). Each such job
//! is wrapped in `chrt -f 90 timeout` so a hung one is still killed.
//! Oversubscribed jobs (4 and 8 ranks on 2 cores) run as usual: ranks that
//! spin without yielding would starve each other under FIFO.

#[path = "../report/plot.rs"]
mod plot;

use plot::{Labels, Line, Series, COLORS};

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

#[derive(Debug, thiserror::Error)]
enum ReportError {
    #[error("usage: report --out DIR [--prefix TMPI_PREFIX] [--quick] [--rt] [--reps N] [--only GROUP,...] [--replot] ({0})")]
    Usage(String),
    #[error("io: {0}")]
    Io(#[from] std::io::Error),
    #[error("building {0} failed")]
    Build(String),
    #[error("plot: {0}")]
    Plot(#[from] plot::PlotError),
}

const LIBS: [&str; 3] = ["tmpi", "ompi", "mpich"];

struct Cfg {
    out: PathBuf,
    prefix: PathBuf,
    quick: bool,
    reps: usize,
    src: PathBuf,
    /// `--only match,deepq,sm,tcp,coll`: run these groups, keep the other sections' samples
    /// from DIR/samples.csv.
    only: Option<Vec<String>>,
    /// `--replot`: run nothing, rewrite report.md and the plots from DIR/samples.csv.
    replot: bool,
    /// `--rt`: 2-rank jobs under the real-time FIFO class.
    rt: bool,
}

/// The operations of perf/c/collbench.c, in the order the report lists them.
const COLL_OPS: [&str; 6] = [
    "barrier",
    "bcast",
    "allreduce",
    "reduce",
    "allgather",
    "alltoall",
];

/// The benchmark groups `--only` selects.
const GROUPS: [&str; 5] = ["match", "deepq", "sm", "tcp", "coll"];

/// The group of a section key.
fn group_of(sec: &str) -> &'static str {
    if sec.starts_with("match-") {
        "match"
    } else if sec.starts_with("deepq-") {
        "deepq"
    } else if sec.ends_with("-sm") {
        "sm"
    } else if sec.ends_with("-tcp") {
        "tcp"
    } else {
        "coll"
    }
}

impl Cfg {
    fn want(&self, group: &str) -> bool {
        self.only
            .as_ref()
            .is_none_or(|o| o.iter().any(|g| g == group))
    }
}

/// Raw samples, `section,x,lib,value` per line (kept beside the report so that a section can
/// be rerun, `--only`, or the report redrawn, `--replot`).
fn load_samples(path: &Path) -> Result<Data, ReportError> {
    let mut data = Data::new();
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(data),
        Err(e) => return Err(e.into()),
    };
    for (i, l) in text.lines().enumerate() {
        if l.starts_with('#') || l.trim().is_empty() {
            continue;
        }
        let f: Vec<&str> = l.split(',').collect();
        match (
            f.len(),
            f.get(1).map(|x| x.parse::<u64>()),
            f.get(3).map(|v| v.parse::<f64>()),
        ) {
            (4, Some(Ok(x)), Some(Ok(v))) => add(&mut data, f[0], x, f[2], v),
            _ => {
                return Err(ReportError::Usage(format!(
                    "{}:{}: not section,x,lib,value",
                    path.display(),
                    i + 1
                )))
            }
        }
    }
    Ok(data)
}

fn save_samples(path: &Path, data: &Data) -> Result<(), ReportError> {
    let mut s = String::from("# section,x,lib,value (one line per run)\n");
    for ((sec, x, lib), v) in data {
        for v in v {
            let _ = writeln!(s, "{sec},{x},{lib},{v}");
        }
    }
    std::fs::write(path, s)?;
    Ok(())
}

/// (section, x, lib) -> samples
type Data = BTreeMap<(String, u64, String), Vec<f64>>;

fn have(tool: &str) -> bool {
    Command::new("sh")
        .arg("-c")
        .arg(format!("command -v {tool} >/dev/null"))
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

fn mpicc(cfg: &Cfg, lib: &str) -> String {
    match lib {
        "tmpi" => cfg.prefix.join("bin/mpicc").display().to_string(),
        "ompi" => "mpicc.openmpi".into(),
        _ => "mpicc.mpich".into(),
    }
}

/// Where the C benchmarks are built (outside OUT, which is committed).
fn bin_dir() -> PathBuf {
    std::env::temp_dir().join(format!("tmpi-report-{}", std::process::id()))
}

fn build(cfg: &Cfg, lib: &str, prog: &str) -> Result<PathBuf, ReportError> {
    let exe = bin_dir().join(format!("{prog}-{lib}"));
    let st = Command::new(mpicc(cfg, lib))
        .args(["-O2", "-Wno-stringop-overflow", "-o"])
        .arg(&exe)
        .arg(cfg.src.join(format!("{prog}.c")))
        .status()?;
    if !st.success() {
        return Err(ReportError::Build(format!("{prog} with {lib}")));
    }
    Ok(exe)
}

/// The launch command line for `lib`, `n` ranks, transport "sm" or "tcp".
fn launch(cfg: &Cfg, lib: &str, n: usize, tcp: bool, timeout: u32) -> Vec<String> {
    let n = n.to_string();
    let t = timeout.to_string();
    let mut v: Vec<String> = match lib {
        "tmpi" => vec![
            cfg.prefix.join("bin/mpirun").display().to_string(),
            "-n".into(),
            n.clone(),
            "--timeout".into(),
            t,
            "--mca".into(),
            "btl".into(),
            if tcp { "self,tcp" } else { "self,sm" }.into(),
        ],
        "ompi" => vec![
            "timeout".into(),
            t,
            "mpirun.openmpi".into(),
            "--allow-run-as-root".into(),
            "--oversubscribe".into(),
            "-np".into(),
            n.clone(),
            "--mca".into(),
            "pml".into(),
            "ob1".into(),
            "--mca".into(),
            "btl".into(),
            if tcp { "tcp,self" } else { "vader,self" }.into(),
        ],
        _ => vec![
            "timeout".into(),
            t,
            "mpiexec.mpich".into(),
            "-n".into(),
            n.clone(),
        ],
    };
    if n != "2" && lib != "mpich" {
        v.extend(["--mca", "mpi_yield_when_idle", "1"].map(String::from));
    }
    if n == "2" {
        // Each rank on its own core, as in perf/c/capi-compare.sh (Open MPI
        // binds nothing with --oversubscribe; two unbound busy-polling ranks
        // may share a core for a while, which made its 2-rank figures bimodal).
        let bind = if lib == "mpich" {
            "-bind-to"
        } else {
            "--bind-to"
        };
        v.extend([bind, "core"].map(String::from));
    }
    if cfg.rt && n == "2" {
        // The outer timeout, at a higher priority than the ranks, still
        // fires when they spin forever.
        let guard = (timeout + 30).to_string();
        let mut w: Vec<String> = ["chrt", "-f", "90", "timeout", &guard, "chrt", "-f", "20"]
            .map(String::from)
            .to_vec();
        w.extend(v);
        return w;
    }
    v
}

/// RT throttling off while it lives (`--rt`), restored on drop.
struct RtThrottle {
    old: String,
}

const RT_RUNTIME: &str = "/proc/sys/kernel/sched_rt_runtime_us";

impl RtThrottle {
    fn off() -> Result<RtThrottle, ReportError> {
        let old = std::fs::read_to_string(RT_RUNTIME)?.trim().to_string();
        std::fs::write(RT_RUNTIME, "-1")
            .map_err(|e| ReportError::Usage(format!("--rt needs root ({RT_RUNTIME}: {e})")))?;
        if !have("chrt") {
            return Err(ReportError::Usage("--rt needs chrt (util-linux)".into()));
        }
        Ok(RtThrottle { old })
    }
}

impl Drop for RtThrottle {
    fn drop(&mut self) {
        if let Err(e) = std::fs::write(RT_RUNTIME, &self.old) {
            eprintln!("report: restoring {RT_RUNTIME} to {}: {e}", self.old);
        }
    }
}

/// The placement probe: `perf/c/cacheline_floor.c` (one cache line
/// passed between cores 0 and 1, ~2 ms) run before and after each 2-rank
/// job. On a shared host the two vCPUs move between physical placements
/// whose core-to-core floor differs several-fold within a minute
/// (docs/report/notes.md), and a job that ran in
/// another placement than the others of its table compared nothing. A job
/// whose probes stray from the median of all probes so far by more than
/// [`PROBE_SPREAD`] is run again, up to [`PROBE_ATTEMPTS`] times, each
/// time once the probe is back near the median (or [`PROBE_SETTLE`] has
/// passed): the slow placement lasts from seconds to minutes, and retrying
/// at once inside it kept such jobs as they were.
struct Probe {
    exe: Option<PathBuf>,
    rt: bool,
    seen: Vec<f64>,
    /// Jobs run again because a probe strayed.
    retried: usize,
    /// Jobs kept after the last attempt with a stray probe.
    unsteady: usize,
    /// Time spent waiting for the placement to come back.
    settled: std::time::Duration,
}

const PROBE_SPREAD: f64 = 1.4;
const PROBE_ATTEMPTS: usize = 5;
/// Longest wait for the placement before a job is run again.
const PROBE_SETTLE: std::time::Duration = std::time::Duration::from_secs(60);

/// Whether probe reading `p` is within [`PROBE_SPREAD`] of the median `m`.
fn near(p: f64, m: f64) -> bool {
    p <= m * PROBE_SPREAD && p >= m / PROBE_SPREAD
}

impl Probe {
    fn new(cfg: &Cfg) -> Probe {
        let exe = bin_dir().join("cacheline_floor");
        let built = Command::new("cc")
            .args(["-O2", "-o"])
            .arg(&exe)
            .arg(cfg.src.join("cacheline_floor.c"))
            .status()
            .is_ok_and(|s| s.success());
        if !built {
            eprintln!("report: cacheline_floor not built (cc); jobs are not checked for placement");
        }
        Probe {
            exe: built.then_some(exe),
            rt: cfg.rt,
            seen: vec![],
            retried: 0,
            unsteady: 0,
            settled: std::time::Duration::ZERO,
        }
    }

    /// One-way core-to-core time in us, or `None`.
    fn measure(&self) -> Option<f64> {
        let exe = self.exe.as_ref()?;
        let mut cmd = if self.rt {
            let mut c = Command::new("chrt");
            c.args(["-f", "90", "timeout", "10"]).arg(exe);
            c
        } else {
            let mut c = Command::new("timeout");
            c.arg("10").arg(exe);
            c
        };
        let out = cmd.args(["20000", "1"]).output().ok()?;
        let text = String::from_utf8_lossy(&out.stdout);
        let ns: f64 = text.split_whitespace().nth(1)?.parse().ok()?;
        Some(ns / 1000.0)
    }

    /// Runs `job` until the probes before and after it agree with the
    /// placement most jobs ran in (or the attempts are spent).
    fn steady(&mut self, mut job: impl FnMut() -> Vec<Vec<String>>) -> Vec<Vec<String>> {
        for attempt in 1..=PROBE_ATTEMPTS {
            let Some(a) = self.measure() else {
                return job();
            };
            let out = job();
            let Some(b) = self.measure() else {
                return out;
            };
            self.seen.extend([a, b]);
            let (m, _, _) = stats(&self.seen);
            if near(a, m) && near(b, m) {
                return out;
            }
            if attempt == PROBE_ATTEMPTS {
                self.unsteady += 1;
                return out;
            }
            eprintln!("report: placement probe {a:.3} / {b:.3} us (median {m:.3}): job run again");
            self.retried += 1;
            self.settle(m);
        }
        unreachable!("the last attempt returns")
    }

    /// Waits until a probe reads near `m` again (every 2 s, at most
    /// [`PROBE_SETTLE`]).
    fn settle(&mut self, m: f64) {
        let start = std::time::Instant::now();
        while start.elapsed() < PROBE_SETTLE {
            match self.measure() {
                Some(p) if near(p, m) => break,
                Some(_) => std::thread::sleep(std::time::Duration::from_secs(2)),
                None => break,
            }
        }
        self.settled += start.elapsed();
    }

    fn summary(&self) -> String {
        if self.exe.is_none() {
            return ", no placement probe".into();
        }
        let (m, lo, hi) = if self.seen.is_empty() {
            (0.0, 0.0, 0.0)
        } else {
            stats(&self.seen)
        };
        format!(
            ", placement probe median {m:.3} us ({lo:.3}-{hi:.3}), {} job(s) run again ({} s waiting for the placement), {} kept off-placement",
            self.retried,
            self.settled.as_secs(),
            self.unsteady
        )
    }
}

/// Runs and returns the CSV lines (fields) of stdout; empty on failure.
fn run(cmd: &[String], exe: &Path, args: &[&str]) -> Vec<Vec<String>> {
    eprintln!(
        "report: {} {} {}",
        cmd.join(" "),
        exe.display(),
        args.join(" ")
    );
    let out = match Command::new(&cmd[0])
        .args(&cmd[1..])
        .arg(exe)
        .args(args)
        .output()
    {
        Ok(o) => o,
        Err(e) => {
            eprintln!("report: launch failed: {e}");
            return vec![];
        }
    };
    if !out.status.success() {
        eprintln!(
            "report: exit {:?}: {}",
            out.status.code(),
            String::from_utf8_lossy(&out.stderr)
                .lines()
                .last()
                .unwrap_or("")
        );
    }
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| !l.starts_with('#') && l.contains(','))
        .map(|l| l.split(',').map(|s| s.trim().to_string()).collect())
        .collect()
}

fn add(data: &mut Data, sec: &str, x: u64, lib: &str, v: f64) {
    data.entry((sec.to_string(), x, lib.to_string()))
        .or_default()
        .push(v);
}

fn stats(v: &[f64]) -> (f64, f64, f64) {
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.total_cmp(b));
    (s[s.len() / 2], s[0], s[s.len() - 1])
}

fn parse_args() -> Result<Cfg, ReportError> {
    let mut out = None;
    let mut prefix = None;
    let mut quick = false;
    let mut reps = None;
    let mut only = None;
    let mut replot = false;
    let mut rt = false;
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        match a.as_str() {
            "--out" => out = it.next().map(PathBuf::from),
            "--prefix" => prefix = it.next().map(PathBuf::from),
            "--quick" => quick = true,
            "--reps" => reps = it.next().and_then(|s| s.parse().ok()),
            "--replot" => replot = true,
            "--rt" => rt = true,
            "--only" => {
                let list: Vec<String> = it
                    .next()
                    .unwrap_or_default()
                    .split(',')
                    .map(str::to_string)
                    .collect();
                if let Some(g) = list.iter().find(|g| !GROUPS.contains(&g.as_str())) {
                    return Err(ReportError::Usage(format!(
                        "--only: unknown group {g:?} (groups: {})",
                        GROUPS.join(",")
                    )));
                }
                only = Some(list);
            }
            x => return Err(ReportError::Usage(format!("unknown argument {x}"))),
        }
    }
    let out = out.ok_or_else(|| ReportError::Usage("--out missing".into()))?;
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("c");
    let prefix = match prefix {
        Some(p) => p,
        None if replot => PathBuf::new(),
        None => own_prefix()?,
    };
    Ok(Cfg {
        out,
        prefix,
        quick,
        reps: reps.unwrap_or(if quick { 1 } else { 3 }),
        src,
        only,
        replot,
        rt,
    })
}

/// The workspace root (perf/..).
fn workspace() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."))
}

/// Runs `cargo ARGS` in the workspace; an error names the command.
fn cargo(args: &[&str]) -> Result<(), ReportError> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    eprintln!("report: cargo {}", args.join(" "));
    let st = Command::new(&cargo)
        .args(args)
        .current_dir(workspace())
        .status()?;
    if st.success() {
        Ok(())
    } else {
        Err(ReportError::Build(format!("cargo {}", args.join(" "))))
    }
}

/// Without `--prefix`: tmpi's own install prefix, built (release) under
/// the workspace's target directory. Nothing is installed on the system.
fn own_prefix() -> Result<PathBuf, ReportError> {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace().join("target"));
    let prefix = target.join("report-prefix");
    let p = prefix.display().to_string();
    cargo(&["xtask", "install", "--prefix", &p])?;
    Ok(prefix)
}

fn sh(cmd: &str) -> String {
    Command::new("sh")
        .arg("-c")
        .arg(cmd)
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default()
}

fn main() {
    if let Err(e) = real_main() {
        eprintln!("report: {e}");
        std::process::exit(1);
    }
}

fn real_main() -> Result<(), ReportError> {
    let cfg = parse_args()?;
    std::fs::create_dir_all(&cfg.out)?;
    let samples = cfg.out.join("samples.csv");
    let runs = cfg.out.join("runs.md");
    if cfg.replot {
        let data = load_samples(&samples)?;
        let libs: Vec<&str> = LIBS
            .iter()
            .copied()
            .filter(|l| data.keys().any(|k| k.2 == *l))
            .collect();
        let runs = std::fs::read_to_string(&runs).unwrap_or_default();
        return write_report(&cfg, &data, &libs, &runs);
    }
    std::fs::create_dir_all(bin_dir())?;
    let mut missing = vec![];
    for t in [
        "mpicc.openmpi",
        "mpirun.openmpi",
        "mpicc.mpich",
        "mpiexec.mpich",
    ] {
        if !have(t) {
            missing.push(t);
        }
    }
    if !cfg.prefix.join("bin/mpicc").exists() {
        return Err(ReportError::Usage(format!(
            "{}/bin/mpicc missing: run `cargo xtask install --prefix {}`",
            cfg.prefix.display(),
            cfg.prefix.display()
        )));
    }
    if !missing.is_empty() && cfg.only.is_some() {
        // A partial run replaces its groups' samples: the missing
        // libraries' figures would be dropped, and the ratios against them
        // with it (a run on a fresh machine without Open MPI wiped the
        // collectives' baseline this way).
        return Err(ReportError::Usage(format!(
            "missing {}: a run with --only would drop those libraries' samples of its groups \
             (install them: bash ci/install-deps.sh)",
            missing.join(", ")
        )));
    }
    if !missing.is_empty() {
        eprintln!(
            "report: missing {} (apt-get install openmpi-bin libopenmpi-dev mpich libmpich-dev); those libraries are skipped",
            missing.join(", ")
        );
    }
    let libs: Vec<&str> = LIBS
        .iter()
        .copied()
        .filter(|l| match *l {
            "ompi" => !missing.iter().any(|m| m.contains("openmpi")),
            "mpich" => !missing.iter().any(|m| m.contains("mpich")),
            _ => true,
        })
        .collect();
    let mut exe: BTreeMap<(String, String), PathBuf> = BTreeMap::new();
    for lib in &libs {
        for prog in ["deepq", "p2pbench", "collbench"] {
            exe.insert((prog.into(), lib.to_string()), build(&cfg, lib, prog)?);
        }
    }
    let _rt = if cfg.rt {
        Some(RtThrottle::off()?)
    } else {
        None
    };
    let mut probe = Probe::new(&cfg);
    let up_before = sh("uptime");
    let started = sh("date -u +%FT%TZ");
    let mut data = Data::new();
    let q = cfg.quick;
    let depths: &[&str] = if q {
        &["0", "64", "1024", "8192"]
    } else {
        &["0", "64", "1024", "8192", "65536"]
    };
    let to = if q { 60 } else { 120 };

    // matchbench (in-process): tm-engine vs list baseline.
    let mb = std::env::current_exe()?.with_file_name("matchbench");
    if !mb.exists() {
        // Best effort: the section is skipped (and says so) if this fails.
        let _ = cargo(&[
            "build",
            "--release",
            "-p",
            "tmpi-perf",
            "--bin",
            "matchbench",
        ]);
    }
    if !cfg.want("match") {
        // not selected
    } else if mb.exists() {
        for _ in 0..cfg.reps {
            let args: &[&str] = if q {
                &["--csv", "--samples", "3", "--sample-ms", "5"]
            } else {
                &["--csv"]
            };
            let o = Command::new(&mb).args(args).output()?;
            for l in String::from_utf8_lossy(&o.stdout).lines() {
                let f: Vec<&str> = l.split(',').collect();
                if f.len() == 4 {
                    if let (Ok(d), Ok(ns)) = (f[2].parse::<u64>(), f[3].parse::<f64>()) {
                        add(&mut data, &format!("match-{}", f[1]), d, f[0], ns);
                    }
                }
            }
        }
    } else {
        eprintln!("report: {} not built (cargo build --release -p tmpi-perf --bin matchbench); section (a) skipped", mb.display());
    }

    for _rep in 0..cfg.reps {
        for lib in &libs {
            let e = |p: &str| exe[&(p.to_string(), lib.to_string())].clone();
            // deep queues
            let modes: &[&str] = if cfg.want("deepq") {
                &["posted", "unexpected"]
            } else {
                &[]
            };
            for &mode in modes {
                let mut a = vec![mode, "--iters", if q { "50" } else { "200" }];
                a.extend_from_slice(depths);
                for f in probe.steady(|| run(&launch(&cfg, lib, 2, false, to), &e("deepq"), &a)) {
                    if let (Ok(d), Ok(us)) = (f[1].parse(), f[2].parse()) {
                        add(&mut data, &format!("deepq-{mode}"), d, lib, us);
                    }
                }
            }
            // point to point, sm and tcp (MPICH: sm only, see report)
            for tcp in [false, true] {
                if (tcp && *lib == "mpich") || !cfg.want(if tcp { "tcp" } else { "sm" }) {
                    continue;
                }
                let tr = if tcp { "tcp" } else { "sm" };
                let lat_max = if q { "65536" } else { "4194304" };
                let mut a = vec!["pingpong", "--csv", "--max", lat_max];
                if q {
                    a.extend(["--iters", "200"]);
                }
                for f in probe.steady(|| run(&launch(&cfg, lib, 2, tcp, to), &e("p2pbench"), &a)) {
                    if let (Ok(n), Ok(us)) = (f[0].parse(), f[1].parse()) {
                        add(&mut data, &format!("lat-{tr}"), n, lib, us);
                    }
                }
                let bw_max = if q { "1048576" } else { "16777216" };
                let mut a = vec!["bw", "--csv", "--max", bw_max];
                if q {
                    a.extend(["--iters", "20"]);
                }
                for f in probe.steady(|| run(&launch(&cfg, lib, 2, tcp, to), &e("p2pbench"), &a)) {
                    if let (Ok(n), Ok(mb)) = (f[0].parse::<u64>(), f[1].parse()) {
                        if n >= 1024 {
                            add(&mut data, &format!("bw-{tr}"), n, lib, mb);
                        }
                    }
                }
            }
            // collectives
            let ranks: &[usize] = match (cfg.want("coll"), q) {
                (false, _) => &[],
                (true, true) => &[2, 4],
                (true, false) => &[2, 4, 8],
            };
            for &n in ranks {
                if n > 2 && *lib == "mpich" {
                    // busy-polls when oversubscribed: no output within 200 s (docs/coll.md)
                    continue;
                }
                let job = || {
                    run(
                        &launch(&cfg, lib, n, false, to),
                        &e("collbench"),
                        &["--csv"],
                    )
                };
                // Oversubscribed jobs (4 and 8 ranks) are not checked: their
                // ranks share the two cores whatever the placement.
                let out = if n == 2 { probe.steady(job) } else { job() };
                for f in out {
                    if f.len() == 3 && COLL_OPS.contains(&f[0].as_str()) {
                        if let (Ok(b), Ok(us)) = (f[1].parse::<u64>(), f[2].parse()) {
                            add(
                                &mut data,
                                &format!("coll-{}-{}B", f[0], b),
                                n as u64,
                                lib,
                                us,
                            );
                        }
                    }
                }
            }
        }
    }
    let up_after = sh("uptime");
    let _ = std::fs::remove_dir_all(bin_dir());
    // A partial run replaces only its groups' samples; a full run starts the run log anew.
    let mut log = String::new();
    if let Some(only) = &cfg.only {
        let mut old = load_samples(&samples)?;
        old.retain(|k, _| !only.iter().any(|g| g == group_of(&k.0)));
        for (k, v) in std::mem::take(&mut data) {
            old.insert(k, v);
        }
        data = old;
        log = std::fs::read_to_string(&runs).unwrap_or_default();
    }
    let _ = writeln!(
        log,
        "- started {started}, {} round(s){}{}{}, groups {}: load before `{up_before}`, after `{up_after}`",
        cfg.reps,
        if cfg.quick { ", --quick" } else { "" },
        if cfg.rt { ", --rt (2-rank jobs real-time)" } else { "" },
        probe.summary(),
        cfg.only
            .as_ref()
            .map_or_else(|| GROUPS.join(","), |o| o.join(","))
    );
    std::fs::write(&runs, &log)?;
    save_samples(&samples, &data)?;
    write_report(&cfg, &data, &libs, &log)
}

/// A report section: table key, heading, unit, lower is better, plot title, x and y axis labels.
struct Section {
    key: &'static str,
    heading: &'static str,
    unit: &'static str,
    lower: bool,
    title: &'static str,
    x: &'static str,
    y: &'static str,
}

const SECTIONS: &[Section] = &[
    Section {
        key: "deepq-posted",
        heading: "Deep posted queue: 0 B ping-pong behind D non-matching posted receives (x = D)",
        unit: "µs one-way",
        lower: true,
        title: "0 B ping-pong behind D non-matching posted receives (sm)",
        x: "D = posted receives ahead in the queue",
        y: "one-way latency (µs)",
    },
    Section {
        key: "deepq-unexpected",
        heading: "Deep unexpected queue: 0 B ping-pong with D unexpected messages waiting at the receiver (x = D)",
        unit: "µs one-way",
        lower: true,
        title: "0 B ping-pong with D unexpected messages waiting (sm)",
        x: "D = unexpected messages queued at the receiver",
        y: "one-way latency (µs)",
    },
    Section {
        key: "lat-sm",
        heading: "Latency over shared memory (x = bytes)",
        unit: "µs one-way",
        lower: true,
        title: "Ping-pong latency over shared memory",
        x: "message size (bytes, K = 1024)",
        y: "one-way latency (µs)",
    },
    Section {
        key: "bw-sm",
        heading: "Bandwidth over shared memory (x = bytes, window 64)",
        unit: "MB/s",
        lower: false,
        title: "Bandwidth over shared memory (window of 64 messages)",
        x: "message size (bytes, K = 1024)",
        y: "bandwidth (MB/s)",
    },
    Section {
        key: "lat-tcp",
        heading: "Latency over tcp on loopback (x = bytes)",
        unit: "µs one-way",
        lower: true,
        title: "Ping-pong latency over tcp (loopback)",
        x: "message size (bytes, K = 1024)",
        y: "one-way latency (µs)",
    },
    Section {
        key: "bw-tcp",
        heading: "Bandwidth over tcp on loopback (x = bytes)",
        unit: "MB/s",
        lower: false,
        title: "Bandwidth over tcp (loopback, window of 64 messages)",
        x: "message size (bytes, K = 1024)",
        y: "bandwidth (MB/s)",
    },
];

/// The collectives' section keys ("coll-bcast-65536B") in report order: operation as in
/// `COLL_OPS` (unknown ones last), then size.
fn coll_keys(data: &Data) -> Vec<String> {
    let mut keys: Vec<String> = data
        .keys()
        .filter(|k| k.0.starts_with("coll-"))
        .map(|k| k.0.clone())
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    keys.sort_by_key(|k| coll_order(k));
    keys
}

/// Sort key of a collectives' section key: operation index, bytes, the key itself.
fn coll_order(key: &str) -> (usize, u64, String) {
    let (op, size) = key[5..].split_once('-').unwrap_or((&key[5..], ""));
    let b = size.trim_end_matches('B').parse().unwrap_or(u64::MAX);
    let i = COLL_OPS
        .iter()
        .position(|o| *o == op)
        .unwrap_or(COLL_OPS.len());
    (i, b, key.to_string())
}

/// Time ratios tmpi / Open MPI of one collectives' section per rank count: (ranks, median
/// ratio, low, high), the bars spanning tmpi's min / Open MPI's max to tmpi's max / Open MPI's min.
fn coll_ratios(data: &Data, key: &str) -> Series {
    let o = series(data, key, "ompi");
    series(data, key, "tmpi")
        .iter()
        .filter_map(|p| {
            let q = o.iter().find(|q| q.0 == p.0)?;
            (q.1 > 0.0 && q.2 > 0.0 && q.3 > 0.0).then(|| (p.0, p.1 / q.1, p.2 / q.3, p.3 / q.2))
        })
        .collect()
}

/// The collectives' summary: one row per operation and size, one column per rank count, the
/// median time ratio tmpi / Open MPI in each cell, and how many cells are at or below 1.0.
fn coll_summary(data: &Data, colls: &[String], md: &mut String) {
    let ranks: Vec<u64> = colls
        .iter()
        .flat_map(|k| coll_ratios(data, k).into_iter().map(|p| p.0))
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    if ranks.is_empty() {
        return;
    }
    let _ = write!(
        md,
        "### Summary: time tmpi / Open MPI (medians)\n\n| operation |"
    );
    for n in &ranks {
        let _ = write!(md, " {n} ranks |");
    }
    let _ = writeln!(md, "\n|---|{}", "---|".repeat(ranks.len()));
    let (mut met, mut cells) = (0, 0);
    for k in colls {
        let r = coll_ratios(data, k);
        let _ = write!(md, "| {} |", coll_name(&k[5..]));
        for n in &ranks {
            match r.iter().find(|p| p.0 == *n) {
                Some(p) => {
                    cells += 1;
                    if p.1 <= 1.0 {
                        met += 1;
                        let _ = write!(md, " **{:.2}** |", p.1);
                    } else {
                        let _ = write!(md, " {:.2} |", p.1);
                    }
                }
                None => {
                    let _ = write!(md, " - |");
                }
            }
        }
        md.push('\n');
    }
    let _ = writeln!(md, "\nAt or below 1.0 (bold): {met} of {cells} cells.\n");
}

/// Collectives as time ratios tmpi / Open MPI vs ranks, one panel per operation with one line
/// per size (`coll_ratios`); a black line marks 1.0.
fn coll_plot(cfg: &Cfg, data: &Data, colls: &[String], md: &mut String) -> Result<(), ReportError> {
    // (operation, [(size name, points)]) in report order
    let mut ops: Vec<(String, Vec<(String, Series)>)> = vec![];
    for k in colls {
        let pts = coll_ratios(data, k);
        if pts.is_empty() {
            continue;
        }
        let name = coll_name(&k[5..]);
        let (op, size) = name.split_once(' ').unwrap_or((&name, ""));
        match ops.last_mut() {
            Some(o) if o.0 == op => o.1.push((size.to_string(), pts)),
            _ => ops.push((op.to_string(), vec![(size.to_string(), pts)])),
        }
    }
    if ops.is_empty() {
        return Ok(());
    }
    let ranks: Vec<u64> = ops
        .iter()
        .flat_map(|o| o.1.iter().flat_map(|s| s.1.iter().map(|p| p.0)))
        .collect();
    let (lo, hi) = (
        ranks.iter().copied().min().unwrap_or(2),
        ranks.iter().copied().max().unwrap_or(2),
    );
    // One colour per size, the same in every panel.
    let mut sizes: Vec<&str> = vec![];
    for s in ops.iter().flat_map(|o| o.1.iter()) {
        if !sizes.contains(&s.0.as_str()) {
            sizes.push(&s.0);
        }
    }
    let panels: Vec<(String, Vec<Line<'_>>)> = ops
        .iter()
        .map(|(op, series)| {
            let mut lines: Vec<Line<'_>> = series
                .iter()
                .map(|(size, pts)| Line {
                    name: size,
                    color: plot::MANY
                        [sizes.iter().position(|s| s == size).unwrap_or(0) % plot::MANY.len()],
                    points: pts.clone(),
                })
                .collect();
            lines.push(Line {
                name: "1.0 = Open MPI",
                color: plotters::style::RGBColor(0, 0, 0),
                points: vec![(lo, 1.0, 1.0, 1.0), (hi, 1.0, 1.0, 1.0)],
            });
            (op.clone(), lines)
        })
        .collect();
    plot::plot_grid(
        &cfg.out.join("coll.png"),
        &Labels {
            title: "Collectives: time tmpi / Open MPI (below 1 = tmpi faster; 4 and 8 ranks oversubscribe 2 cores)",
            x: "ranks",
            y: "time ratio tmpi / Open MPI",
            x_binary: true,
            legend_right: true,
        },
        &panels,
        3,
    )?;
    let _ = writeln!(
        md,
        "![Collectives: time ratio tmpi / Open MPI per operation (panels) and size (lines) vs ranks](coll.png)\n"
    );
    Ok(())
}

/// "bcast-1048576B" -> "bcast 1 MiB".
fn coll_name(key: &str) -> String {
    let Some((op, size)) = key.split_once('-') else {
        return key.to_string();
    };
    let b: u64 = size.trim_end_matches('B').parse().unwrap_or(0);
    let size = match b {
        b if b >= 1 << 20 && b % (1 << 20) == 0 => format!("{} MiB", b >> 20),
        b if b >= 1 << 10 && b % (1 << 10) == 0 => format!("{} KiB", b >> 10),
        b => format!("{b} B"),
    };
    format!("{op} {size}")
}

/// The legend name of a library key.
fn lib_name(lib: &str) -> &str {
    match lib {
        "tmpi" => "tmpi",
        "ompi" => "Open MPI",
        "mpich" => "MPICH",
        other => other,
    }
}

fn series(data: &Data, sec: &str, lib: &str) -> Series {
    data.iter()
        .filter(|((s, _, l), _)| s == sec && l == lib)
        .map(|((_, x, _), v)| {
            let (m, lo, hi) = stats(v);
            (*x, m, lo, hi)
        })
        .collect()
}

fn fmt(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0}")
    } else if v >= 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    }
}

fn table(md: &mut String, data: &Data, sec: &str, libs: &[&str], lower: bool, cols: [&str; 3]) {
    let mut xs: Vec<u64> = data.keys().filter(|k| k.0 == sec).map(|k| k.1).collect();
    xs.dedup();
    let _ = write!(md, "| {} |", cols[0]);
    for l in libs {
        let _ = write!(md, " {l} {} (min-max) |", cols[1]);
    }
    let _ = writeln!(
        md,
        " {} / {} |",
        libs[0],
        if cols[2] == "ompi" {
            "Open MPI"
        } else {
            cols[2]
        }
    );
    let _ = writeln!(md, "|{}", "---|".repeat(libs.len() + 2));
    for x in xs {
        let _ = write!(md, "| {x} |");
        let mut med = BTreeMap::new();
        for l in libs {
            match data.get(&(sec.to_string(), x, l.to_string())) {
                Some(v) => {
                    let (m, lo, hi) = stats(v);
                    med.insert(*l, m);
                    let _ = write!(md, " {} ({}-{}) |", fmt(m), fmt(lo), fmt(hi));
                }
                None => {
                    let _ = write!(md, " no result |");
                }
            }
        }
        let ratio = match (med.get(libs[0]), med.get(cols[2])) {
            (Some(t), Some(o)) if *o > 0.0 => format!(
                "{:.2}{}",
                t / o,
                if lower { "" } else { " (higher is better)" }
            ),
            _ => "-".into(),
        };
        let _ = writeln!(md, " {ratio} |");
    }
    md.push('\n');
}

fn write_report(cfg: &Cfg, data: &Data, libs: &[&str], runs: &str) -> Result<(), ReportError> {
    let mut md = String::new();
    let _ = writeln!(md, "# tmpi benchmark report\n");
    let _ = writeln!(md, "Generated by `cargo run --release -p tmpi-perf --bin report -- --out DIR [--only GROUPS]` (method and options: docs/perf.md); raw samples in `samples.csv`. Runs (2-core machine shared with other engineers; `uptime` before and after each):\n\n{runs}");
    let _ = writeln!(md, "Every figure is the median of the alternating runs (tmpi, Open MPI, MPICH, tmpi, ...) with min-max in brackets; each run itself reports a median or an average over many iterations (see the C sources in perf/c).\n");
    let _ = writeln!(md, "Plots (PNG, `plotters`): log-log, lines join the medians, error bars are min-max; the legend names the series. Points at x = 0 (0 bytes, D = 0) cannot sit on a log axis and are in the tables only.\n");
    // match latency
    let workloads: Vec<String> = data
        .keys()
        .filter(|k| k.0.starts_with("match-"))
        .map(|k| k.0.clone())
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    for wl in &workloads {
        let _ = writeln!(md, "## Match latency vs queue depth (a): tm-engine vs list, in-process, workload `{}` (ns per match; x = depth)\n", &wl[6..]);
        table(
            &mut md,
            data,
            wl,
            &["tm-engine", "list"],
            true,
            ["depth", "ns", "list"],
        );
    }
    // The plot: the exact-source workload and the wildcard-source one (if measured).
    let mut names = vec![];
    for wl in ["specific", "any_source10"] {
        if workloads.iter().any(|w| w[6..] == *wl) {
            for imp in ["tm-engine", "list"] {
                names.push((format!("{imp} ({wl})"), format!("match-{wl}"), imp));
            }
        }
    }
    let mlines: Vec<Line<'_>> = names
        .iter()
        .enumerate()
        .map(|(i, (name, wl, imp))| Line {
            name,
            color: COLORS[[0, 1, 3, 2][i % 4]],
            points: series(data, wl, imp),
        })
        .collect();
    if !mlines.is_empty() {
        plot::plot(
            &cfg.out.join("match-engine.png"),
            &Labels {
                title: "Match cost vs queue depth, in-process: tm-engine vs list",
                x: "queue depth (entries searched past)",
                y: "ns per match",
                x_binary: false,
                legend_right: false,
            },
            &mlines,
        )?;
        let _ = writeln!(md, "![Match cost per message vs queue depth: tm-engine flat, the list grows linearly](match-engine.png)\n");
    }
    for sec in SECTIONS {
        let _ = writeln!(md, "## {}\n\nUnit: {}.\n", sec.heading, sec.unit);
        if !data.keys().any(|k| k.0 == sec.key) {
            let _ = writeln!(md, "No results.\n");
            continue;
        }
        let deepq = sec.key.starts_with("deepq");
        table(
            &mut md,
            data,
            sec.key,
            libs,
            sec.lower,
            [if deepq { "D" } else { "bytes" }, "", "ompi"],
        );
        let lines: Vec<Line<'_>> = libs
            .iter()
            .enumerate()
            .map(|(i, l)| Line {
                name: lib_name(l),
                color: COLORS[i % COLORS.len()],
                points: series(data, sec.key, l),
            })
            .collect();
        plot::plot(
            &cfg.out.join(format!("{}.png", sec.key)),
            &Labels {
                title: sec.title,
                x: sec.x,
                y: sec.y,
                x_binary: !deepq,
                legend_right: false,
            },
            &lines,
        )?;
        let _ = writeln!(md, "![{}]({}.png)\n", sec.title, sec.key);
    }
    let colls = coll_keys(data);
    if !colls.is_empty() {
        let _ = writeln!(md, "## Collectives (µs, x = ranks; 4 and 8 ranks oversubscribe 2 cores: tmpi and Open MPI with `--mca mpi_yield_when_idle 1`, MPICH only at 2 ranks: it busy-polls when oversubscribed and produced no output within 200 s at 4 ranks, docs/coll.md)\n");
        coll_summary(data, &colls, &mut md);
        coll_plot(cfg, data, &colls, &mut md)?;
        for s in &colls {
            let _ = writeln!(md, "### {}\n", coll_name(&s[5..]));
            table(&mut md, data, s, libs, true, ["ranks", "", "ompi"]);
        }
    }
    // Hand-written sections (the soft-NIC offload figures from the criterion/sync benches, the
    // target verdicts) live in DIR/notes.md and are appended, so a rerun keeps them.
    match std::fs::read_to_string(cfg.out.join("notes.md")) {
        Ok(notes) => md.push_str(&notes),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e.into()),
    }
    std::fs::write(cfg.out.join("report.md"), md)?;
    eprintln!("report: wrote {}", cfg.out.join("report.md").display());
    Ok(())
}
