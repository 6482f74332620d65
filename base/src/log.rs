//! Logging through `tracing`, with per-component levels set by MCA
//! verbosity parameters and every line tagged with the rank.
//!
//! # Convention for component authors
//! Log with the tracing target `"<framework>_<component>"`, spelled as the
//! parameter prefix: `tracing::debug!(target: "btl_sm", peer, "fifo full")`.
//! Framework-wide code (selection, shared helpers) uses `"<framework>_base"`
//! (`"pml_base"`); the MCA system itself uses `"mca_base"`. Register the
//! verbosity parameter at component open with
//! [`Registry::register_verbose`](crate::mca::Registry::register_verbose) so
//! `tmpi_info` lists it.
//!
//! # Levels
//! `<framework>_base_verbose` sets the level of every target starting with
//! `<framework>` (`btl_base_verbose=100` covers `btl_sm`, `btl_openib`, ...);
//! `<framework>_<component>_verbose` sets target `<framework>_<component>`
//! and wins over the framework's setting. Only parameters that some source
//! sets (command line, environment, file) take effect; everything else logs
//! at `WARN` and above. Verbosity, 0..=100 as in Open MPI, maps to:
//!
//! | verbose   | shown                          |
//! |-----------|--------------------------------|
//! | 0         | `ERROR`, `WARN` (the default)  |
//! | 1..=59    | + `INFO`                       |
//! | 60..=79   | + `DEBUG`                      |
//! | 80..=100  | + `TRACE`                      |
//!
//! (Open MPI's named levels: 10 component, 20 warn, 40 info, 60 trace,
//! 80 debug, 100 max; its "trace" is our `DEBUG`, its "debug" our `TRACE`.)
//!
//! # Output
//! One line per event on stderr: `[rank 3] btl_sm: DEBUG fifo full peer=2`.

use std::fmt;

use tracing::{Event, Subscriber};
use tracing_subscriber::filter::{LevelFilter, Targets};
use tracing_subscriber::fmt::format::{self, FormatEvent, FormatFields};
use tracing_subscriber::fmt::{FmtContext, MakeWriter};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::Layer;

use crate::error::Error;
use crate::mca::{self, McaError, Registry};

/// Level shown for targets without a verbosity setting.
pub const DEFAULT_LEVEL: LevelFilter = LevelFilter::WARN;

/// Maps an Open MPI style verbosity (0..=100) to the most verbose tracing
/// level shown (see the module docs). Values outside the range saturate.
pub fn verbosity_to_level(verbose: i64) -> LevelFilter {
    match verbose {
        i64::MIN..=0 => LevelFilter::WARN,
        1..=59 => LevelFilter::INFO,
        60..=79 => LevelFilter::DEBUG,
        _ => LevelFilter::TRACE,
    }
}

/// The per-target levels requested by the sources of `reg`: one entry per
/// set `*_verbose` parameter, `(target, level)` sorted by target. Each such
/// parameter is registered in `reg` (so it is validated, listed by
/// `tmpi_info`, and not reported as unknown); an invalid value is an error.
/// Names ending in `_verbose` that are not `<framework>_<component>_verbose`
/// are left alone (the unknown-name check reports them).
pub fn verbosity_targets(reg: &Registry) -> Result<Vec<(String, LevelFilter)>, McaError> {
    let mut out = Vec::new();
    for (name, _) in reg.sources().set_names() {
        let Some(stem) = name.strip_suffix("_verbose") else {
            continue;
        };
        let Some((framework, component)) = stem.split_once('_') else {
            continue;
        };
        let param = match reg.register_verbose(framework, component) {
            Ok(p) => p,
            Err(McaError::InvalidName { .. }) => continue,
            Err(e) => return Err(e),
        };
        let target = if component == "base" {
            framework.to_owned()
        } else {
            stem.to_owned()
        };
        out.push((target, verbosity_to_level(param.value())));
    }
    out.sort();
    Ok(out)
}

/// The tracing filter for `reg`: [`verbosity_targets`] over a default of
/// [`DEFAULT_LEVEL`]. The most specific (longest) matching target wins.
pub fn filter_for(reg: &Registry) -> Result<Targets, McaError> {
    Ok(verbosity_targets(reg)?.into_iter().fold(
        Targets::new().with_default(DEFAULT_LEVEL),
        |t, (target, lvl)| t.with_target(target, lvl),
    ))
}

/// Formats `[rank R] target: LEVEL message fields`.
#[derive(Debug, Clone, Copy)]
pub struct RankFormat {
    rank: u32,
}

impl RankFormat {
    /// A formatter tagging lines with `rank`.
    pub fn new(rank: u32) -> Self {
        RankFormat { rank }
    }
}

impl<S, N> FormatEvent<S, N> for RankFormat
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: format::Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let meta = event.metadata();
        write!(
            writer,
            "[rank {}] {}: {} ",
            self.rank,
            meta.target(),
            meta.level()
        )?;
        ctx.field_format().format_fields(writer.by_ref(), event)?;
        writeln!(writer)
    }
}

/// The formatting and filtering layer for `rank` with levels from `reg`,
/// writing to `writer`, for callers that compose their own subscriber.
pub fn layer<S, W>(
    rank: u32,
    reg: &Registry,
    writer: W,
) -> Result<impl Layer<S> + Send + Sync + 'static, Error>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    W: for<'w> MakeWriter<'w> + Send + Sync + 'static,
{
    let filter = filter_for(reg)?;
    Ok(tracing_subscriber::fmt::layer()
        .event_format(RankFormat::new(rank))
        .with_writer(writer)
        .with_filter(filter))
}

/// A subscriber for `rank` whose levels come from `reg`, writing to
/// `writer`. Tests install it with `tracing::subscriber::with_default`.
pub fn subscriber<W>(
    rank: u32,
    reg: &Registry,
    writer: W,
) -> Result<impl Subscriber + Send + Sync + 'static, Error>
where
    W: for<'w> MakeWriter<'w> + Send + Sync + 'static,
{
    Ok(tracing_subscriber::registry().with(layer(rank, reg, writer)?))
}

/// Installs the process-wide subscriber: stderr, levels from the global
/// registry ([`mca::registry`]), lines tagged with `rank`. Fails if a
/// verbosity parameter has an invalid value or a global subscriber is
/// already installed.
pub fn init_logging(rank: u32) -> Result<(), Error> {
    let sub = subscriber(rank, mca::registry(), std::io::stderr)?;
    tracing::subscriber::set_global_default(sub).map_err(|e| Error::Logging(e.to_string()))
}
