//! `tmpi_info`: what this tmpi installation contains and how it is configured.
//!
//! ```text
//! tmpi_info [--all] [--param FRAMEWORK COMPONENT] [--level N] [--parsable]
//! tmpi_info --version | --help
//! ```
//! - no option: version, parameter files, and every component with whether it
//!   can run here (and why not);
//! - `--all`: that, plus every registered MCA parameter with value, default,
//!   source, type, level and help;
//! - `--param F C`: only the parameters of framework `F`, component `C`
//!   (`all` matches any; `base` also matches framework-level parameters such
//!   as `pml_eager_limit`);
//! - `--level N` (1..=9, default 9): only parameters of that info level or
//!   below;
//! - `--parsable`: one `key:...:value` record per line (format below) instead
//!   of the human layout.
//!
//! Parsable records (fields never contain a newline; the last field may
//! contain `:`):
//! ```text
//! version:tmpi:<version>
//! file:user:<path>:present|absent
//! file:system:<path>:present|absent
//! component:<fw>:<comp>:priority:<n>
//! component:<fw>:<comp>:available:yes
//! component:<fw>:<comp>:available:no:<reason>
//! mca:<fw>:<comp|base>:param:<name>:value:<value>
//! mca:<fw>:<comp|base>:param:<name>:default:<value>
//! mca:<fw>:<comp|base>:param:<name>:source:<default|system-file|user-file|env|cmdline>
//! mca:<fw>:<comp|base>:param:<name>:source_detail:<where exactly>
//! mca:<fw>:<comp|base>:param:<name>:type:<type>
//! mca:<fw>:<comp|base>:param:<name>:enumerator:<choice>      (enum only, one per choice)
//! mca:<fw>:<comp|base>:param:<name>:range:<min>..=<max>      (bounded int only)
//! mca:<fw>:<comp|base>:param:<name>:level:<1..9>
//! mca:<fw>:<comp|base>:param:<name>:help:<text>
//! ```
//! Problems with the configuration (invalid values, malformed files) are
//! printed to stderr and make the exit status 1; unknown parameter names are
//! warnings (exit status unchanged). Usage errors exit with 2.
//!
//! # Adding a crate's components and parameters
//! Each crate exports a [`Provider`] (conventionally `pub fn register`);
//! add it to the crate's dependencies (`cargo add -p tmpi-run <crate>`) and
//! append **one line** to [`PROVIDERS`] below.

use std::fmt::Write as _;
use std::process::ExitCode;

use tmpi_base::component::{Availability, ComponentRegistry, Provider};
use tmpi_base::mca::{self, Level, ParamInfo, ParamType, Registry};

/// Every crate that contributes components or parameters, one line each.
const PROVIDERS: &[Provider] = &[
    tmpi_base::component::register_base,
    tmpi_btl_self::register,
    tmpi_btl_sm::register,
    tmpi_btl_tcp::register,
    tmpi_btl_openib::register,
    tmpi_coll::register,
];

const USAGE: &str =
    "usage: tmpi_info [--all] [--param FRAMEWORK COMPONENT] [--level N] [--parsable]
       tmpi_info --version | --help";

/// Parsed command line.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Options {
    all: bool,
    param: Option<(String, String)>,
    level: Level,
    parsable: bool,
    version_only: bool,
    help: bool,
}

fn parse_args(args: &[String]) -> Result<Options, String> {
    let mut o = Options {
        all: false,
        param: None,
        level: Level::DevAll,
        parsable: false,
        version_only: false,
        help: false,
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--all" | "-a" => o.all = true,
            "--parsable" | "--parseable" => o.parsable = true,
            "--version" | "-V" => o.version_only = true,
            "--help" | "-h" => o.help = true,
            "--param" => {
                let (Some(f), Some(c)) = (it.next(), it.next()) else {
                    return Err("--param needs FRAMEWORK and COMPONENT".into());
                };
                o.param = Some((f.clone(), c.clone()));
            }
            "--level" => {
                let n = it.next().ok_or("--level needs a number 1..9")?;
                o.level = n
                    .parse::<u8>()
                    .ok()
                    .and_then(Level::from_u8)
                    .ok_or_else(|| format!("--level {n:?}: expected a number 1..9"))?;
            }
            other => return Err(format!("unknown option {other:?}")),
        }
    }
    Ok(o)
}

/// The component part as shown: framework-level parameters belong to `base`.
fn component_of(p: &ParamInfo) -> &str {
    if p.component.is_empty() {
        "base"
    } else {
        &p.component
    }
}

fn param_selected(p: &ParamInfo, o: &Options) -> bool {
    if p.level > o.level {
        return false;
    }
    match &o.param {
        None => o.all,
        Some((f, c)) => (f == "all" || *f == p.framework) && (c == "all" || c == component_of(p)),
    }
}

/// Renders the report. Pure (no I/O) so it can be tested directly.
fn render(
    o: &Options,
    reg: &Registry,
    comps: &ComponentRegistry,
    verdicts: &[Availability],
) -> String {
    let mut out = String::new();
    let version = env!("CARGO_PKG_VERSION");
    let files = [
        ("user", reg.sources().user_file_path()),
        ("system", reg.sources().system_file_path()),
    ];
    let params: Vec<ParamInfo> = reg
        .params()
        .into_iter()
        .filter(|p| param_selected(p, o))
        .collect();
    let show_components = o.param.is_none();
    if o.parsable {
        let _ = writeln!(out, "version:tmpi:{version}");
        for (kind, f) in files {
            if let Some((path, present)) = f {
                let state = if present { "present" } else { "absent" };
                let _ = writeln!(out, "file:{kind}:{}:{state}", path.display());
            }
        }
        if show_components {
            for (c, v) in comps.components().iter().zip(verdicts) {
                let head = format!("component:{}:{}", c.framework, c.name);
                let _ = writeln!(out, "{head}:priority:{}", c.priority);
                match v {
                    Availability::Available => {
                        let _ = writeln!(out, "{head}:available:yes");
                    }
                    Availability::Unavailable(why) => {
                        let _ = writeln!(out, "{head}:available:no:{}", one_line(why));
                    }
                }
            }
        }
        for p in &params {
            let head = format!("mca:{}:{}:param:{}", p.framework, component_of(p), p.name);
            let _ = writeln!(out, "{head}:value:{}", one_line(&p.value.to_string()));
            let _ = writeln!(out, "{head}:default:{}", one_line(&p.default.to_string()));
            let _ = writeln!(out, "{head}:source:{}", p.source.kind());
            let _ = writeln!(
                out,
                "{head}:source_detail:{}",
                one_line(&p.source.to_string())
            );
            let _ = writeln!(out, "{head}:type:{}", p.ty.name());
            match &p.ty {
                ParamType::Enum { choices } => {
                    for c in choices {
                        let _ = writeln!(out, "{head}:enumerator:{c}");
                    }
                }
                ParamType::Int { min, max } if (*min, *max) != (i64::MIN, i64::MAX) => {
                    let _ = writeln!(out, "{head}:range:{min}..={max}");
                }
                _ => {}
            }
            let _ = writeln!(out, "{head}:level:{}", p.level.as_u8());
            let _ = writeln!(out, "{head}:help:{}", one_line(&p.help));
        }
        return out;
    }

    let _ = writeln!(out, "tmpi {version}");
    for (kind, f) in files {
        match f {
            Some((path, present)) => {
                let state = if present { "" } else { " (not present)" };
                let _ = writeln!(out, "  {kind} parameter file: {}{state}", path.display());
            }
            None => {
                let why = if kind == "user" {
                    "HOME is not set"
                } else {
                    "no prefix: set TMPI_PREFIX"
                };
                let _ = writeln!(out, "  {kind} parameter file: none ({why})");
            }
        }
    }
    if show_components {
        let _ = writeln!(out, "\nComponents:");
        if comps.components().is_empty() {
            let _ = writeln!(out, "  (none registered)");
        }
        for (c, v) in comps.components().iter().zip(verdicts) {
            let _ = writeln!(
                out,
                "  {:<6} {:<10} priority {:>4}  {}",
                c.framework, c.name, c.priority, v
            );
        }
    }
    if o.all || o.param.is_some() {
        let _ = writeln!(out, "\nMCA parameters:");
        if params.is_empty() {
            let _ = writeln!(out, "  (none match)");
        }
        for p in &params {
            let _ = writeln!(out, "  {} = {}", p.name, show_value(&p.value.to_string()));
            let mut line = format!(
                "      default {}, source: {}, type: {}",
                show_value(&p.default.to_string()),
                p.source,
                p.ty.name()
            );
            match &p.ty {
                ParamType::Enum { choices } => {
                    let _ = write!(line, " ({})", choices.join("|"));
                }
                ParamType::Int { min, max } if (*min, *max) != (i64::MIN, i64::MAX) => {
                    let _ = write!(line, " ({min}..={max})");
                }
                _ => {}
            }
            let _ = write!(line, ", level {}", p.level);
            let _ = writeln!(out, "{line}");
            if !p.help.is_empty() {
                let _ = writeln!(out, "      {}", one_line(&p.help));
            }
        }
    } else {
        let _ = writeln!(
            out,
            "\n{} MCA parameters registered; `tmpi_info --all` lists them.",
            reg.params().len()
        );
    }
    out
}

fn one_line(s: &str) -> String {
    s.replace(['\n', '\r'], " ")
}

fn show_value(s: &str) -> String {
    if s.is_empty() {
        "\"\"".into()
    } else {
        one_line(s)
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let opts = match parse_args(&args) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("tmpi_info: {e}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    if opts.help {
        println!("{USAGE}");
        return ExitCode::SUCCESS;
    }
    if opts.version_only {
        println!("tmpi {}", env!("CARGO_PKG_VERSION"));
        return ExitCode::SUCCESS;
    }
    let mut failed = false;
    let reg = mca::registry();
    for e in reg.source_errors() {
        eprintln!("tmpi_info: error: {e}");
        failed = true;
    }
    let mut comps = ComponentRegistry::new();
    for provider in PROVIDERS {
        if let Err(e) = provider(reg, &mut comps) {
            eprintln!("tmpi_info: error: {e}");
            failed = true;
        }
    }
    // Register per component so one bad value does not hide the others.
    for c in comps.components() {
        if let Err(e) = (c.register_params)(reg) {
            eprintln!("tmpi_info: error: {} {}: {e}", c.framework, c.name);
            failed = true;
        }
    }
    let verdicts: Vec<Availability> = comps.components().iter().map(|c| (c.probe)()).collect();
    mca::report_unknown(&reg.unknown());
    print!("{}", render(&opts, reg, &comps, &verdicts));
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tmpi_base::component::{no_params, ComponentDescriptor};
    use tmpi_base::mca::{ParamSpec, Sources};

    fn yes() -> Availability {
        Availability::Available
    }
    fn no() -> Availability {
        Availability::Unavailable("libibverbs not found".into())
    }
    fn sm_params(reg: &Registry) -> Result<(), mca::McaError> {
        reg.register_size(
            ParamSpec::new("btl", "sm", "fifo_size")
                .help("Bytes per FIFO")
                .level(Level::TunerBasic),
            4096,
        )?;
        reg.register_enum(
            ParamSpec::new("btl", "sm", "single_copy")
                .help("Single-copy mechanism")
                .level(Level::DevDetail),
            &["cma", "none"],
            "cma",
        )?;
        Ok(())
    }
    static SM: ComponentDescriptor = ComponentDescriptor {
        framework: "btl",
        name: "sm",
        priority: 50,
        description: "shared memory",
        register_params: sm_params,
        probe: yes,
    };
    static OPENIB: ComponentDescriptor = ComponentDescriptor {
        framework: "btl",
        name: "openib",
        priority: 80,
        description: "verbs",
        register_params: no_params,
        probe: no,
    };

    fn setup(env: &[(&str, &str)]) -> (Registry, ComponentRegistry, Vec<Availability>) {
        let reg = Registry::new(Sources::default().with_env(env.iter().copied()));
        let mut comps = ComponentRegistry::new();
        tmpi_base::component::register_base(&reg, &mut comps).unwrap();
        comps.add(&SM).unwrap();
        comps.add(&OPENIB).unwrap();
        comps.register_params(&reg).unwrap();
        let verdicts = comps.components().iter().map(|c| (c.probe)()).collect();
        (reg, comps, verdicts)
    }

    fn opts(args: &[&str]) -> Options {
        parse_args(&args.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap()
    }

    #[test]
    fn parsable_components_and_params() {
        let (reg, comps, v) = setup(&[("TMPI_MCA_btl_sm_fifo_size", "64K")]);
        let out = render(&opts(&["--all", "--parsable"]), &reg, &comps, &v);
        let lines: Vec<&str> = out.lines().collect();
        for want in [
            "component:btl:sm:priority:50",
            "component:btl:sm:available:yes",
            "component:btl:openib:available:no:libibverbs not found",
            "mca:btl:sm:param:btl_sm_fifo_size:value:65536",
            "mca:btl:sm:param:btl_sm_fifo_size:default:4096",
            "mca:btl:sm:param:btl_sm_fifo_size:source:env",
            "mca:btl:sm:param:btl_sm_fifo_size:source_detail:environment TMPI_MCA_btl_sm_fifo_size",
            "mca:btl:sm:param:btl_sm_fifo_size:type:size",
            "mca:btl:sm:param:btl_sm_fifo_size:level:4",
            "mca:btl:sm:param:btl_sm_fifo_size:help:Bytes per FIFO",
            "mca:btl:sm:param:btl_sm_single_copy:enumerator:cma",
            "mca:btl:sm:param:btl_sm_single_copy:enumerator:none",
            "mca:mpi:base:param:mpi_yield_when_idle:value:auto",
            "mca:mca:base:param:mca_base_verbose:range:0..=100",
        ] {
            assert!(lines.contains(&want), "missing {want:?} in\n{out}");
        }
    }

    #[test]
    fn human_layout_and_filters() {
        let (reg, comps, v) = setup(&[]);
        let out = render(&opts(&[]), &reg, &comps, &v);
        assert!(out.contains("openib") && out.contains("unavailable: libibverbs not found"));
        assert!(
            !out.contains("btl_sm_fifo_size"),
            "no params without --all:\n{out}"
        );
        let out = render(&opts(&["--param", "btl", "sm"]), &reg, &comps, &v);
        assert!(out.contains("btl_sm_fifo_size = 4096"), "{out}");
        assert!(out.contains("source: default, type: size"), "{out}");
        assert!(!out.contains("mpi_yield_when_idle"), "{out}");
        assert!(!out.contains("Components:"), "{out}");
        let out = render(
            &opts(&["--param", "btl", "sm", "--level", "5"]),
            &reg,
            &comps,
            &v,
        );
        assert!(out.contains("btl_sm_fifo_size") && !out.contains("btl_sm_single_copy"));
        let out = render(&opts(&["--param", "mpi", "base"]), &reg, &comps, &v);
        assert!(out.contains("mpi_yield_when_idle = auto"), "{out}");
    }

    #[test]
    fn bad_arguments() {
        let parse = |a: &[&str]| parse_args(&a.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        assert!(parse(&["--param", "btl"]).is_err());
        assert!(parse(&["--level", "10"]).is_err());
        assert!(parse(&["--level"]).is_err());
        assert!(parse(&["--bogus"]).is_err());
    }
}
