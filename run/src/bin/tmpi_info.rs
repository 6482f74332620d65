//! `tmpi_info`: what this tmpi installation contains and how it is configured.
//!
//! ```text
//! tmpi_info [--all] [--param FRAMEWORK COMPONENT] [--level N] [--parsable | --markdown]
//! tmpi_info --version | --help
//! ```
//! - no option: version, parameter files, every component with whether it
//!   can run here (and why not), and the RDMA devices: each libibverbs device
//!   with its ports and tag-matching caps (or the line `libibverbs not found`
//!   when rdma-core is not installed), plus the soft NIC `tmsoft0` (used only
//!   when `btl_openib_if_include` names it) with the caps it would advertise;
//! - `--all`: that, plus every registered MCA parameter with value, default,
//!   source, type, level and help;
//! - `--param F C`: only the parameters of framework `F`, component `C`
//!   (`all` matches any; `base` also matches framework-level parameters such
//!   as `pml_eager_limit`);
//! - `--level N` (1..=9, default 9): only parameters of that info level or
//!   below;
//! - `--parsable`: one `key:...:value` record per line (format below) instead
//!   of the human layout;
//! - `--markdown`: the parameter reference (`docs/mca-params.md` is
//!   `tmpi_info --all --markdown`): the selected parameters by framework and
//!   component with type, default, level and help. Defaults only, never the
//!   values set here, so the output depends on the code alone.
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
//! rdma:libibverbs:available:yes|no[:<reason>]
//! rdma:device:<name>:provider:<libibverbs|soft>
//! rdma:device:<name>:fw:<version>                 (or :error:<reason>)
//! rdma:device:<name>:atomics:<cap|max_qp_rd_atom|max_qp_init_rd_atom>:<value>   (cap: none|hca|glob)
//! rdma:device:<name>:tm:<supported|max_num_tags|max_ops|max_sge|max_rndv_hdr_size|flags>:<value>
//! rdma:device:<name>:port:<n>:<state>:<link layer>:mtu:<bytes>:lid:<lid>   (or :error:<reason>)
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
//! append **one line** to [`PROVIDERS`] below (a BTL: to
//! `tmpi_components`, which the pml is started with too).

use std::fmt::Write as _;
use std::process::ExitCode;

use tmpi_base::component::{Availability, ComponentRegistry, Provider};
use tmpi_base::mca::{self, Level, ParamInfo, ParamType, Registry};
use tmpi_verbs::api::{Context as _, Provider as _};

/// Every crate that contributes components or parameters, one line each;
/// the BTLs are the build's list (`tmpi_components::BTL_PROVIDERS`), placed
/// after base.
const PROVIDERS: &[Provider] = &[
    tmpi_base::component::register_base,
    tmpi_pml::register,
    tmpi_comm::register,
    tmpi_osc::register,
];

/// [`PROVIDERS`] with the BTLs in their place.
fn providers() -> impl Iterator<Item = &'static Provider> {
    PROVIDERS[..1]
        .iter()
        .chain(tmpi_components::BTL_PROVIDERS)
        .chain(&PROVIDERS[1..])
}

const USAGE: &str =
    "usage: tmpi_info [--all] [--param FRAMEWORK COMPONENT] [--level N] [--parsable | --markdown]
       tmpi_info --version | --help";

/// Parsed command line.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Options {
    all: bool,
    param: Option<(String, String)>,
    level: Level,
    parsable: bool,
    markdown: bool,
    version_only: bool,
    help: bool,
}

fn parse_args(args: &[String]) -> Result<Options, String> {
    let mut o = Options {
        all: false,
        param: None,
        level: Level::DevAll,
        parsable: false,
        markdown: false,
        version_only: false,
        help: false,
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--all" | "-a" => o.all = true,
            "--parsable" | "--parseable" => o.parsable = true,
            "--markdown" => o.markdown = true,
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
    if o.parsable && o.markdown {
        return Err("--parsable and --markdown exclude each other".into());
    }
    if o.markdown && !o.all && o.param.is_none() {
        return Err("--markdown needs --all or --param FRAMEWORK COMPONENT".into());
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
    rdma: &RdmaReport,
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
    if o.markdown {
        render_markdown(&mut out, &params, comps);
        return out;
    }
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
            rdma.render_parsable(&mut out);
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
        rdma.render_human(&mut out);
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

/// The parameter reference in Markdown: a section per framework, a table per
/// component (framework-level parameters first, as `base`). Only what the
/// code defines (names, types, defaults, levels, help): nothing from the
/// environment, the parameter files or the machine.
fn render_markdown(out: &mut String, params: &[ParamInfo], comps: &ComponentRegistry) {
    let _ = writeln!(
        out,
        "# MCA parameter reference\n\n\
         <!-- Generated by `tmpi_info --all --markdown`; do not edit. Regenerate with\n     \
         cargo run -q -p tmpi-run --bin tmpi_info -- --all --markdown > docs/mca-params.md\n     \
         (run/tests/tmpi_info.rs fails when this file and the registry differ.) -->\n\n\
         Every parameter tmpi registers, with its type, default and info level (1-3 \
         user, 4-6 tuner, 7-9 developer; `tmpi_info --level N` shows levels up to N). \
         Set one with `tmpirun --mca NAME VALUE`, the environment variable \
         `TMPI_MCA_NAME=VALUE`, a line `NAME = VALUE` in `$HOME/.tmpi/mca-params.conf`, \
         or in `PREFIX/etc/tmpi-mca-params.conf` of the installation, in that order of \
         precedence. `tmpi_info --all` shows the values in effect and where each came \
         from; a name nobody registered is reported as a warning with the nearest known \
         names. Sizes accept the suffixes K, M and G (powers of 1024). Every framework \
         and component also takes `<framework>_<component>_verbose` and \
         `<framework>_base_verbose` (0-100); the ones listed below are those registered \
         up front.\n\n\
         How to use them: [user guide](user-guide.md#tuning)."
    );
    let mut frameworks: Vec<&str> = params.iter().map(|p| p.framework.as_str()).collect();
    frameworks.sort_unstable();
    frameworks.dedup();
    for fw in frameworks {
        let _ = writeln!(out, "\n## {fw}");
        let listed: Vec<_> = comps
            .components()
            .iter()
            .filter(|c| c.framework == fw)
            .collect();
        if !listed.is_empty() {
            let _ = writeln!(out, "\nComponents (priority):");
            for c in &listed {
                let _ = writeln!(
                    out,
                    "- `{}` ({}): {}",
                    c.name,
                    c.priority,
                    md_cell(c.description)
                );
            }
        }
        let mut groups: Vec<&str> = params
            .iter()
            .filter(|p| p.framework == fw)
            .map(component_of)
            .collect();
        groups.sort_unstable_by_key(|c| (*c != "base", *c));
        groups.dedup();
        for comp in groups {
            let title = if comp == "base" {
                format!("{fw} (framework)")
            } else {
                format!("{fw} {comp}")
            };
            let _ = writeln!(out, "\n### {title}\n");
            let _ = writeln!(out, "| name | type | default | level | meaning |");
            let _ = writeln!(out, "|---|---|---|---|---|");
            for p in params
                .iter()
                .filter(|p| p.framework == fw && component_of(p) == comp)
            {
                let ty = match &p.ty {
                    ParamType::Enum { choices } => format!("enum: {}", choices.join(", ")),
                    ParamType::Int { min, max } if (*min, *max) != (i64::MIN, i64::MAX) => {
                        format!("int {min}..={max}")
                    }
                    ParamType::Tristate => "auto, 1, 0".to_string(),
                    t => t.name().to_string(),
                };
                let default = p.default.to_string();
                let default = if default.is_empty() && p.ty == ParamType::Selection {
                    "(all)".to_string()
                } else if default.is_empty() {
                    "(empty)".to_string()
                } else {
                    format!("`{}`", one_line(&default))
                };
                let _ = writeln!(
                    out,
                    "| `{}` | {} | {} | {} | {} |",
                    p.name,
                    md_cell(&ty),
                    md_cell(&default),
                    p.level.as_u8(),
                    md_cell(&p.help)
                );
            }
        }
    }
}

/// Text safe inside a Markdown table cell.
fn md_cell(s: &str) -> String {
    one_line(s).replace('|', "\\|")
}

/// Tag-matching caps as shown (`struct ibv_tm_caps`; rdma-core has no other
/// TM fields: the list size is `max_num_tags`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
struct TmView {
    max_num_tags: u32,
    max_ops: u32,
    max_sge: u32,
    max_rndv_hdr_size: u32,
    /// `IBV_TM_CAP_*` bits (`IBV_TM_CAP_RC` = 1).
    flags: u32,
}

impl TmView {
    fn supported(&self) -> bool {
        self.max_num_tags > 0 && self.flags & IBV_TM_CAP_RC != 0
    }
}

/// `IBV_TM_CAP_RC` (rdma-core `verbs.h`).
const IBV_TM_CAP_RC: u32 = 1;

/// NIC atomics as shown: what osc rdma needs for accumulates and window
/// locks without the target (docs/osc.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
struct AtomicView {
    /// `atomic_cap`: `none`, `hca` (atomic among this device's operations)
    /// or `glob`.
    cap: &'static str,
    /// Responder resources per QP (`max_qp_rd_atom`).
    max_qp_rd_atom: u32,
    /// Initiator depth per QP (`max_qp_init_rd_atom`).
    max_qp_init_rd_atom: u32,
}

impl AtomicView {
    /// From `atomic_cap` as `enum ibv_atomic_cap` (0 none, 1 HCA, 2 GLOB).
    fn from_code(code: u32, rd: i64, init_rd: i64) -> AtomicView {
        AtomicView {
            cap: match code {
                1 => "hca",
                2 => "glob",
                _ => "none",
            },
            max_qp_rd_atom: rd.clamp(0, i64::from(u32::MAX)) as u32,
            max_qp_init_rd_atom: init_rd.clamp(0, i64::from(u32::MAX)) as u32,
        }
    }

    /// Whether osc rdma can use them (as btl-openib decides: a capability
    /// and responder resources).
    fn usable(&self) -> bool {
        self.cap != "none" && self.max_qp_rd_atom > 0
    }
}

/// One port as shown.
#[derive(Debug, Clone, PartialEq, Eq)]
struct PortView {
    state: String,
    link_layer: String,
    mtu: u32,
    lid: u16,
}

/// One RDMA device as shown.
#[derive(Debug, Clone, PartialEq, Eq)]
struct RdmaDevice {
    name: String,
    /// `libibverbs` or `soft`.
    provider: &'static str,
    /// Firmware version, TM caps and atomics, or why the device could not
    /// be queried.
    attr: Result<(String, TmView, AtomicView), String>,
    ports: Vec<(u8, Result<PortView, String>)>,
}

/// What `tmpi_info` knows about RDMA: libibverbs' devices and the soft NIC.
#[derive(Debug, Clone, PartialEq, Eq)]
struct RdmaReport {
    /// `Err(reason)` when libibverbs cannot be used (not installed).
    libibverbs: Result<(), String>,
    devices: Vec<RdmaDevice>,
}

impl RdmaReport {
    /// Asks libibverbs (loaded at run time) for its devices, and opens the
    /// soft NIC with the configuration from `reg` (its MCA parameters).
    fn gather(reg: &Registry) -> RdmaReport {
        let mut devices = Vec::new();
        let libibverbs = match tmpi_verbs::ibv::list_devices_with_caps() {
            Ok(list) => {
                for d in list {
                    devices.push(RdmaDevice {
                        name: d.name.clone(),
                        provider: "libibverbs",
                        attr: d.attr.as_ref().map_err(Clone::clone).map(|a| {
                            let t = a.tm_caps;
                            (
                                a.fw_ver.clone(),
                                TmView {
                                    max_num_tags: t.max_num_tags,
                                    max_ops: t.max_ops,
                                    max_sge: t.max_sge,
                                    max_rndv_hdr_size: t.max_rndv_hdr_size,
                                    flags: t.flags,
                                },
                                AtomicView::from_code(
                                    a.atomic_cap,
                                    i64::from(a.max_qp_rd_atom),
                                    i64::from(a.max_qp_init_rd_atom),
                                ),
                            )
                        }),
                        ports: d
                            .ports
                            .iter()
                            .map(|(n, p)| {
                                let p = p.as_ref().map_err(Clone::clone).map(|p| PortView {
                                    state: format!("{:?}", p.state),
                                    link_layer: format!("{:?}", p.link_layer),
                                    mtu: p.active_mtu_bytes(),
                                    lid: p.lid,
                                });
                                (*n, p)
                            })
                            .collect(),
                    });
                }
                Ok(())
            }
            Err(e) => Err(e.to_string()),
        };
        devices.push(soft_device(reg));
        RdmaReport {
            libibverbs,
            devices,
        }
    }

    fn render_human(&self, out: &mut String) {
        let _ = writeln!(out, "\nRDMA devices:");
        match &self.libibverbs {
            Err(why) => {
                let _ = writeln!(out, "  libibverbs not found ({})", one_line(detail(why)));
            }
            Ok(()) if !self.devices.iter().any(|d| d.provider == "libibverbs") => {
                let _ = writeln!(out, "  libibverbs: no RDMA devices");
            }
            Ok(()) => {}
        }
        for d in &self.devices {
            let what = if d.provider == "soft" {
                "soft NIC, used only when btl_openib_if_include names it"
            } else {
                "libibverbs"
            };
            let _ = write!(out, "  {} ({what})", d.name);
            match &d.attr {
                Err(e) => {
                    let _ = writeln!(out, ": cannot query: {}", one_line(e));
                }
                Ok((fw, t, at)) => {
                    let tm = if t.supported() { "yes" } else { "no" };
                    let _ = writeln!(
                        out,
                        ": fw {}, tag matching: {tm} (max_num_tags {}, max_ops {}, max_sge {}, max_rndv_hdr_size {}, flags {:#x}{})",
                        one_line(fw),
                        t.max_num_tags,
                        t.max_ops,
                        t.max_sge,
                        t.max_rndv_hdr_size,
                        t.flags,
                        if t.flags & IBV_TM_CAP_RC != 0 { " RC" } else { "" }
                    );
                    if at.usable() {
                        let _ = writeln!(
                            out,
                            "    atomics: {} (responder resources {}, initiator depth {}): osc rdma does accumulates and window locks by NIC atomics",
                            if at.cap == "glob" { "global" } else { "among this device's operations" },
                            at.max_qp_rd_atom,
                            at.max_qp_init_rd_atom
                        );
                    } else {
                        let _ = writeln!(
                            out,
                            "    atomics: none: osc rdma does accumulates and window locks through the target's progress (pt2pt)"
                        );
                    }
                }
            }
            for (n, p) in &d.ports {
                match p {
                    Ok(p) => {
                        let _ = writeln!(
                            out,
                            "    port {n}: {}, {}, active MTU {}, LID {}",
                            p.state, p.link_layer, p.mtu, p.lid
                        );
                    }
                    Err(e) => {
                        let _ = writeln!(out, "    port {n}: cannot query: {}", one_line(e));
                    }
                }
            }
        }
    }

    fn render_parsable(&self, out: &mut String) {
        match &self.libibverbs {
            Ok(()) => {
                let _ = writeln!(out, "rdma:libibverbs:available:yes");
            }
            Err(why) => {
                let _ = writeln!(out, "rdma:libibverbs:available:no:{}", one_line(why));
            }
        }
        for d in &self.devices {
            let head = format!("rdma:device:{}", d.name);
            let _ = writeln!(out, "{head}:provider:{}", d.provider);
            match &d.attr {
                Err(e) => {
                    let _ = writeln!(out, "{head}:error:{}", one_line(e));
                }
                Ok((fw, t, at)) => {
                    let _ = writeln!(out, "{head}:fw:{}", one_line(fw));
                    let _ = writeln!(out, "{head}:atomics:cap:{}", at.cap);
                    let _ = writeln!(out, "{head}:atomics:max_qp_rd_atom:{}", at.max_qp_rd_atom);
                    let _ = writeln!(
                        out,
                        "{head}:atomics:max_qp_init_rd_atom:{}",
                        at.max_qp_init_rd_atom
                    );
                    let yes = if t.supported() { "yes" } else { "no" };
                    let _ = writeln!(out, "{head}:tm:supported:{yes}");
                    for (k, v) in [
                        ("max_num_tags", t.max_num_tags),
                        ("max_ops", t.max_ops),
                        ("max_sge", t.max_sge),
                        ("max_rndv_hdr_size", t.max_rndv_hdr_size),
                        ("flags", t.flags),
                    ] {
                        let _ = writeln!(out, "{head}:tm:{k}:{v}");
                    }
                }
            }
            for (n, p) in &d.ports {
                match p {
                    Ok(p) => {
                        let _ = writeln!(
                            out,
                            "{head}:port:{n}:{}:{}:mtu:{}:lid:{}",
                            p.state, p.link_layer, p.mtu, p.lid
                        );
                    }
                    Err(e) => {
                        let _ = writeln!(out, "{head}:port:{n}:error:{}", one_line(e));
                    }
                }
            }
        }
    }
}

/// The loader's reason without the leading "libibverbs not found: ".
fn detail(why: &str) -> &str {
    why.strip_prefix("libibverbs not found: ").unwrap_or(why)
}

/// The soft NIC as a process of this job would see it with the current
/// parameters (`btl_openib_tmsoft_*`).
fn soft_device(reg: &Registry) -> RdmaDevice {
    use tmpi_verbs::soft::{SoftConfig, SoftProvider, DEVICE_NAME};
    let mut d = RdmaDevice {
        name: DEVICE_NAME.to_string(),
        provider: "soft",
        attr: Err(String::new()),
        ports: Vec::new(),
    };
    let ctx = SoftConfig::register(reg)
        .and_then(SoftProvider::new)
        .and_then(|p| p.open(DEVICE_NAME));
    let ctx = match ctx {
        Ok(c) => c,
        Err(e) => {
            d.attr = Err(e.to_string());
            return d;
        }
    };
    let attr = ctx.query_device_ex();
    let n = attr.as_ref().map(|a| a.phys_port_cnt).unwrap_or(0);
    d.attr = attr
        .map(|a| {
            let t = a.tm_caps;
            (
                a.fw_ver,
                TmView {
                    max_num_tags: t.max_num_tags,
                    max_ops: t.max_ops,
                    max_sge: t.max_sge,
                    max_rndv_hdr_size: t.max_rndv_hdr_size,
                    flags: if t.rc { IBV_TM_CAP_RC } else { 0 },
                },
                AtomicView::from_code(
                    match a.atomic_cap {
                        tmpi_verbs::AtomicCap::None => 0,
                        tmpi_verbs::AtomicCap::Hca => 1,
                        tmpi_verbs::AtomicCap::Glob => 2,
                    },
                    i64::from(a.max_qp_rd_atom),
                    i64::from(a.max_qp_init_rd_atom),
                ),
            )
        })
        .map_err(|e| e.to_string());
    for p in 1..=n {
        let v = ctx
            .query_port(p)
            .map(|a| PortView {
                state: format!("{:?}", a.state),
                link_layer: format!("{:?}", a.link_layer),
                mtu: a.active_mtu.bytes(),
                lid: a.lid,
            })
            .map_err(|e| e.to_string());
        d.ports.push((p, v));
    }
    d
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
    for provider in providers() {
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
    let rdma = if opts.param.is_none() {
        RdmaReport::gather(reg)
    } else {
        RdmaReport {
            libibverbs: Ok(()),
            devices: Vec::new(),
        }
    };
    mca::report_unknown(&reg.unknown());
    print!("{}", render(&opts, reg, &comps, &verdicts, &rdma));
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

    fn no_rdma() -> RdmaReport {
        RdmaReport {
            libibverbs: Err("libibverbs not found: cannot load libibverbs.so.1: gone".into()),
            devices: Vec::new(),
        }
    }

    fn mlx5() -> RdmaDevice {
        RdmaDevice {
            name: "mlx5_0".into(),
            provider: "libibverbs",
            attr: Ok((
                "16.35.2000".into(),
                TmView {
                    max_num_tags: 511,
                    max_ops: 32768,
                    max_sge: 1,
                    max_rndv_hdr_size: 64,
                    flags: IBV_TM_CAP_RC,
                },
                AtomicView::from_code(1, 16, 16),
            )),
            ports: vec![
                (
                    1,
                    Ok(PortView {
                        state: "Active".into(),
                        link_layer: "InfiniBand".into(),
                        mtu: 4096,
                        lid: 7,
                    }),
                ),
                (2, Err("ibv_query_port failed: EIO".into())),
            ],
        }
    }

    #[test]
    fn rdma_devices_with_tm_caps() {
        let (reg, comps, v) = setup(&[]);
        let rdma = RdmaReport {
            libibverbs: Ok(()),
            devices: vec![
                mlx5(),
                RdmaDevice {
                    name: "rxe0".into(),
                    provider: "libibverbs",
                    attr: Err("ibv_open_device failed: EPERM".into()),
                    ports: Vec::new(),
                },
                RdmaDevice {
                    name: "siw0".into(),
                    provider: "libibverbs",
                    attr: Ok((
                        "0.0.0".into(),
                        TmView::default(),
                        AtomicView::from_code(0, 0, 0),
                    )),
                    ports: Vec::new(),
                },
            ],
        };
        let out = render(&opts(&[]), &reg, &comps, &v, &rdma);
        let (_, section) = out.split_once("\nRDMA devices:\n").expect("RDMA section");
        assert!(!section.contains("libibverbs not found"), "{out}");
        assert!(out.contains("  mlx5_0 (libibverbs): fw 16.35.2000, tag matching: yes (max_num_tags 511, max_ops 32768, max_sge 1, max_rndv_hdr_size 64, flags 0x1 RC)\n    atomics: among this device's operations (responder resources 16, initiator depth 16): osc rdma does accumulates and window locks by NIC atomics\n    port 1: Active, InfiniBand, active MTU 4096, LID 7\n    port 2: cannot query: ibv_query_port failed: EIO\n"), "{out}");
        assert!(
            out.contains("  rxe0 (libibverbs): cannot query: ibv_open_device failed: EPERM\n"),
            "{out}"
        );
        assert!(
            out.contains("  siw0 (libibverbs): fw 0.0.0, tag matching: no (max_num_tags 0, max_ops 0, max_sge 0, max_rndv_hdr_size 0, flags 0x0)\n    atomics: none: osc rdma does accumulates and window locks through the target's progress (pt2pt)\n"),
            "{out}"
        );
        let out = render(&opts(&["--parsable"]), &reg, &comps, &v, &rdma);
        let lines: Vec<&str> = out.lines().collect();
        for want in [
            "rdma:libibverbs:available:yes",
            "rdma:device:mlx5_0:provider:libibverbs",
            "rdma:device:mlx5_0:fw:16.35.2000",
            "rdma:device:mlx5_0:atomics:cap:hca",
            "rdma:device:mlx5_0:atomics:max_qp_rd_atom:16",
            "rdma:device:mlx5_0:atomics:max_qp_init_rd_atom:16",
            "rdma:device:mlx5_0:tm:supported:yes",
            "rdma:device:mlx5_0:tm:max_num_tags:511",
            "rdma:device:mlx5_0:tm:max_ops:32768",
            "rdma:device:mlx5_0:tm:max_rndv_hdr_size:64",
            "rdma:device:mlx5_0:tm:flags:1",
            "rdma:device:mlx5_0:port:1:Active:InfiniBand:mtu:4096:lid:7",
            "rdma:device:mlx5_0:port:2:error:ibv_query_port failed: EIO",
            "rdma:device:rxe0:error:ibv_open_device failed: EPERM",
            "rdma:device:siw0:atomics:cap:none",
        ] {
            assert!(lines.contains(&want), "missing {want:?} in\n{out}");
        }
        // No devices but a library: said plainly.
        let none = RdmaReport {
            libibverbs: Ok(()),
            devices: Vec::new(),
        };
        let out = render(&opts(&[]), &reg, &comps, &v, &none);
        assert!(out.contains("  libibverbs: no RDMA devices\n"), "{out}");
        // Absent library: one plain line with the loader's reason.
        let out = render(&opts(&[]), &reg, &comps, &v, &no_rdma());
        assert!(
            out.contains("  libibverbs not found (cannot load libibverbs.so.1: gone)\n"),
            "{out}"
        );
        // --param hides the device list like the component list.
        let out = render(&opts(&["--param", "btl", "sm"]), &reg, &comps, &v, &rdma);
        assert!(
            !out.contains("RDMA devices") && !out.contains("mlx5_0"),
            "{out}"
        );
    }

    fn opts(args: &[&str]) -> Options {
        parse_args(&args.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap()
    }

    #[test]
    fn parsable_components_and_params() {
        let (reg, comps, v) = setup(&[("TMPI_MCA_btl_sm_fifo_size", "64K")]);
        let out = render(
            &opts(&["--all", "--parsable"]),
            &reg,
            &comps,
            &v,
            &no_rdma(),
        );
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
        let out = render(&opts(&[]), &reg, &comps, &v, &no_rdma());
        assert!(out.contains("openib") && out.contains("unavailable: libibverbs not found"));
        assert!(
            !out.contains("btl_sm_fifo_size"),
            "no params without --all:\n{out}"
        );
        let out = render(
            &opts(&["--param", "btl", "sm"]),
            &reg,
            &comps,
            &v,
            &no_rdma(),
        );
        assert!(out.contains("btl_sm_fifo_size = 4096"), "{out}");
        assert!(out.contains("source: default, type: size"), "{out}");
        assert!(!out.contains("mpi_yield_when_idle"), "{out}");
        assert!(!out.contains("Components:"), "{out}");
        let out = render(
            &opts(&["--param", "btl", "sm", "--level", "5"]),
            &reg,
            &comps,
            &v,
            &no_rdma(),
        );
        assert!(out.contains("btl_sm_fifo_size") && !out.contains("btl_sm_single_copy"));
        let out = render(
            &opts(&["--param", "mpi", "base"]),
            &reg,
            &comps,
            &v,
            &no_rdma(),
        );
        assert!(out.contains("mpi_yield_when_idle = auto"), "{out}");
    }

    #[test]
    fn bad_arguments() {
        let parse = |a: &[&str]| parse_args(&a.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        assert!(parse(&["--param", "btl"]).is_err());
        assert!(parse(&["--level", "10"]).is_err());
        assert!(parse(&["--level"]).is_err());
        assert!(parse(&["--bogus"]).is_err());
        assert!(
            parse(&["--markdown"]).is_err(),
            "--markdown needs --all or --param"
        );
        assert!(parse(&["--all", "--markdown", "--parsable"]).is_err());
        assert!(parse(&["--all", "--markdown"]).is_ok());
    }
}
