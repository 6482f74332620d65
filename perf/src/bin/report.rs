//! `report`: the benchmark report of issue 11 (docs/perf.md).
//!
//! `cargo run --release -p tmpi-perf --bin report -- --out DIR [--prefix TMPI_PREFIX] [--quick]`
//!
//! Builds perf/c's benchmarks with tmpi's `mpicc` (from the prefix made by
//! `cargo xtask install --prefix DIR`; without `--prefix`, the report makes
//! one under `target/report-prefix` with `cargo xtask install --release`),
//! `mpicc.openmpi` and `mpicc.mpich`,
//! runs them alternately (tmpi, Open MPI, MPICH, tmpi, ...), and writes
//! `DIR/report.md` with medians, min-max and ratios to Open MPI, plus PNG
//! plots (drawn by a built-in PNG writer: no font or image libraries).

#[path = "../report/png.rs"]
mod png;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

#[derive(Debug, thiserror::Error)]
enum ReportError {
    #[error("usage: report --out DIR [--prefix TMPI_PREFIX] [--quick] [--reps N] ({0})")]
    Usage(String),
    #[error("io: {0}")]
    Io(#[from] std::io::Error),
    #[error("building {0} failed")]
    Build(String),
}

const LIBS: [&str; 3] = ["tmpi", "ompi", "mpich"];
const COLORS: [[u8; 3]; 3] = [[0, 90, 200], [210, 40, 40], [30, 150, 60]];

struct Cfg {
    out: PathBuf,
    prefix: PathBuf,
    quick: bool,
    reps: usize,
    src: PathBuf,
}

/// (section, x, lib) -> samples
type Data = BTreeMap<(String, u64, String), Vec<f64>>;

/// (x, median, min, max) points of one line.
type Series = Vec<(u64, f64, f64, f64)>;

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
    v
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
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        match a.as_str() {
            "--out" => out = it.next().map(PathBuf::from),
            "--prefix" => prefix = it.next().map(PathBuf::from),
            "--quick" => quick = true,
            "--reps" => reps = it.next().and_then(|s| s.parse().ok()),
            x => return Err(ReportError::Usage(format!("unknown argument {x}"))),
        }
    }
    let out = out.ok_or_else(|| ReportError::Usage("--out missing".into()))?;
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("c");
    let prefix = match prefix {
        Some(p) => p,
        None => own_prefix()?,
    };
    Ok(Cfg {
        out,
        prefix,
        quick,
        reps: reps.unwrap_or(if quick { 1 } else { 3 }),
        src,
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
    cargo(&["xtask", "install", "--release", "--prefix", &p])?;
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
    if mb.exists() {
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
            for mode in ["posted", "unexpected"] {
                let mut a = vec![mode, "--iters", if q { "50" } else { "200" }];
                a.extend_from_slice(depths);
                for f in run(&launch(&cfg, lib, 2, false, to), &e("deepq"), &a) {
                    if let (Ok(d), Ok(us)) = (f[1].parse(), f[2].parse()) {
                        add(&mut data, &format!("deepq-{mode}"), d, lib, us);
                    }
                }
            }
            // point to point, sm and tcp (MPICH: sm only, see report)
            for tcp in [false, true] {
                if tcp && *lib == "mpich" {
                    continue;
                }
                let tr = if tcp { "tcp" } else { "sm" };
                let lat_max = if q { "65536" } else { "4194304" };
                let mut a = vec!["pingpong", "--csv", "--max", lat_max];
                if q {
                    a.extend(["--iters", "200"]);
                }
                for f in run(&launch(&cfg, lib, 2, tcp, to), &e("p2pbench"), &a) {
                    if let (Ok(n), Ok(us)) = (f[0].parse(), f[1].parse()) {
                        add(&mut data, &format!("lat-{tr}"), n, lib, us);
                    }
                }
                let bw_max = if q { "1048576" } else { "16777216" };
                let mut a = vec!["bw", "--csv", "--max", bw_max];
                if q {
                    a.extend(["--iters", "20"]);
                }
                for f in run(&launch(&cfg, lib, 2, tcp, to), &e("p2pbench"), &a) {
                    if let (Ok(n), Ok(mb)) = (f[0].parse::<u64>(), f[1].parse()) {
                        if n >= 1024 {
                            add(&mut data, &format!("bw-{tr}"), n, lib, mb);
                        }
                    }
                }
            }
            // collectives
            let ranks: &[usize] = if q { &[2, 4] } else { &[2, 4, 8] };
            for &n in ranks {
                if n > 2 && *lib == "mpich" {
                    // busy-polls when oversubscribed: no output within 200 s (docs/coll.md)
                    continue;
                }
                for f in run(
                    &launch(&cfg, lib, n, false, to),
                    &e("collbench"),
                    &["--csv"],
                ) {
                    if f.len() == 3 && ["barrier", "bcast", "allreduce"].contains(&f[0].as_str()) {
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
    write_report(&cfg, &data, &libs, &started, &up_before, &up_after)
}

/// Sections: (key, title, unit, lower is better, plot file)
const SECTIONS: &[(&str, &str, &str, bool)] = &[
    ("deepq-posted", "Deep posted queue: 0 B ping-pong behind D non-matching posted receives (x = D)", "µs one-way", true),
    ("deepq-unexpected", "Deep unexpected queue: 0 B ping-pong with D unexpected messages waiting at the receiver (x = D)", "µs one-way", true),
    ("lat-sm", "Latency over shared memory (x = bytes)", "µs one-way", true),
    ("bw-sm", "Bandwidth over shared memory (x = bytes, window 64)", "MB/s", false),
    ("lat-tcp", "Latency over tcp on loopback (x = bytes)", "µs one-way", true),
    ("bw-tcp", "Bandwidth over tcp on loopback (x = bytes)", "MB/s", false),
];

fn series(data: &Data, sec: &str, lib: &str) -> Series {
    data.iter()
        .filter(|((s, _, l), _)| s == sec && l == lib)
        .map(|((_, x, _), v)| {
            let (m, lo, hi) = stats(v);
            (*x, m, lo, hi)
        })
        .collect()
}

fn plot(path: &Path, lines: &[([u8; 3], Series)]) -> Result<(), ReportError> {
    let (w, h, m) = (760i64, 460i64, 50i64);
    let mut c = png::Canvas::new(w as usize, h as usize);
    let pts: Vec<_> = lines.iter().flat_map(|(_, s)| s.iter()).collect();
    if pts.is_empty() {
        return Ok(());
    }
    let lx = |x: u64| ((x.max(1)) as f64).log10();
    let ly = |y: f64| y.max(1e-3).log10();
    let (x0, x1) = (
        pts.iter().map(|p| lx(p.0)).fold(f64::MAX, f64::min).floor(),
        pts.iter()
            .map(|p| lx(p.0))
            .fold(f64::MIN, f64::max)
            .ceil()
            .max(1.0),
    );
    let (y0, y1) = (
        pts.iter().map(|p| ly(p.2)).fold(f64::MAX, f64::min).floor(),
        pts.iter().map(|p| ly(p.3)).fold(f64::MIN, f64::max).ceil(),
    );
    let y1 = if y1 <= y0 { y0 + 1.0 } else { y1 };
    let x1 = if x1 <= x0 { x0 + 1.0 } else { x1 };
    let px = |x: f64| m + ((x - x0) / (x1 - x0) * (w - 2 * m) as f64) as i64;
    let py = |y: f64| h - m - ((y - y0) / (y1 - y0) * (h - 2 * m) as f64) as i64;
    let grey = [215, 215, 215];
    for d in (x0 as i64)..=(x1 as i64) {
        c.line(px(d as f64), m, px(d as f64), h - m, grey, 1);
    }
    for d in (y0 as i64)..=(y1 as i64) {
        c.line(m, py(d as f64), w - m, py(d as f64), grey, 1);
    }
    c.line(m, h - m, w - m, h - m, [0, 0, 0], 2);
    c.line(m, m, m, h - m, [0, 0, 0], 2);
    for (col, s) in lines {
        for p in s {
            let x = px(lx(p.0));
            c.line(x, py(ly(p.2)), x, py(ly(p.3)), *col, 1);
            c.line(x - 4, py(ly(p.2)), x + 4, py(ly(p.2)), *col, 1);
            c.line(x - 4, py(ly(p.3)), x + 4, py(ly(p.3)), *col, 1);
        }
        for win in s.windows(2) {
            c.line(
                px(lx(win[0].0)),
                py(ly(win[0].1)),
                px(lx(win[1].0)),
                py(ly(win[1].1)),
                *col,
                3,
            );
        }
    }
    std::fs::write(path, c.png())?;
    Ok(())
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

fn write_report(
    cfg: &Cfg,
    data: &Data,
    libs: &[&str],
    started: &str,
    up0: &str,
    up1: &str,
) -> Result<(), ReportError> {
    let mut md = String::new();
    let _ = writeln!(md, "# tmpi benchmark report\n");
    let _ = writeln!(md, "Generated by `cargo run --release -p tmpi-perf --bin report -- --out {} --prefix {}{}` (started {started}). Method: docs/perf.md.\n", cfg.out.display(), cfg.prefix.display(), if cfg.quick { " --quick" } else { "" });
    let _ = writeln!(md, "Every figure is the median of {} alternating runs (tmpi, Open MPI, MPICH, tmpi, ...) with min-max in brackets; each run itself reports a median or an average over many iterations (see the C sources in perf/c). Load: before `{up0}`, after `{up1}` (2-core machine shared with other engineers).\n", cfg.reps);
    let _ = writeln!(md, "Plots: log-log, x = the table's first column, y = the value; lines join the medians, bars are min-max. Colours: **blue = tmpi, red = Open MPI, green = MPICH** (match plot: blue = tm-engine, red = list baseline). The plots carry no text labels (the report draws them with a built-in PNG writer, no font library); the axis ranges are the tables' ranges, grid lines are powers of 10.\n");
    // match latency
    let mut mlines = vec![];
    for (i, wl) in data
        .keys()
        .filter(|k| k.0.starts_with("match-"))
        .map(|k| k.0.clone())
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .enumerate()
    {
        let _ = writeln!(md, "## Match latency vs queue depth (a): tm-engine vs list, in-process, workload `{}` (ns per match; x = depth)\n", &wl[6..]);
        table(
            &mut md,
            data,
            &wl,
            &["tm-engine", "list"],
            true,
            ["depth", "ns", "list"],
        );
        if i == 0 {
            mlines.push((COLORS[0], series(data, &wl, "tm-engine")));
            mlines.push((COLORS[1], series(data, &wl, "list")));
        }
    }
    if !mlines.is_empty() {
        plot(&cfg.out.join("match-engine.png"), &mlines)?;
        let _ = writeln!(md, "![match engine](match-engine.png)\n");
    }
    for (sec, title, unit, lower) in SECTIONS {
        let _ = writeln!(md, "## {title}\n\nUnit: {unit}.\n");
        if !data.keys().any(|k| k.0 == *sec) {
            let _ = writeln!(md, "No results.\n");
            continue;
        }
        table(
            &mut md,
            data,
            sec,
            libs,
            *lower,
            [
                if sec.starts_with("deepq") {
                    "D"
                } else {
                    "bytes"
                },
                "",
                "ompi",
            ],
        );
        let lines: Vec<_> = libs
            .iter()
            .enumerate()
            .map(|(i, l)| (COLORS[i], series(data, sec, l)))
            .collect();
        plot(&cfg.out.join(format!("{sec}.png")), &lines)?;
        let _ = writeln!(md, "![{sec}]({sec}.png)\n");
    }
    let colls: std::collections::BTreeSet<String> = data
        .keys()
        .filter(|k| k.0.starts_with("coll-"))
        .map(|k| k.0.clone())
        .collect();
    if !colls.is_empty() {
        let _ = writeln!(md, "## Collectives (µs, x = ranks; 4 and 8 ranks oversubscribe 2 cores: tmpi and Open MPI with `--mca mpi_yield_when_idle 1`, MPICH only at 2 ranks: it busy-polls when oversubscribed and produced no output within 200 s at 4 ranks, docs/coll.md)\n");
        for s in &colls {
            let _ = writeln!(md, "### {}\n", &s[5..]);
            table(&mut md, data, s, libs, true, ["ranks", "", "ompi"]);
        }
    }
    std::fs::write(cfg.out.join("report.md"), md)?;
    eprintln!("report: wrote {}", cfg.out.join("report.md").display());
    Ok(())
}
