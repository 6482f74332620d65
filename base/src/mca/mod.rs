//! MCA parameters: typed, documented settings registered by the components
//! that own them, resolved from several sources.
//!
//! # Names
//! `<framework>_<component>_<param>` (`btl_sm_fifo_size`), framework-level
//! `<framework>_<param>` (`pml_eager_limit`), and the framework selection
//! lists named after the framework (`btl=self,sm`, `btl=^tcp`, see
//! [`SelectionList`]).
//!
//! # Sources, highest precedence first
//! 1. `tmpirun --mca NAME VALUE`, handed to the ranks in [`CMDLINE_ENV`]
//!    (encoded with [`encode_cmdline`]); a later pair wins over an earlier one.
//! 2. The environment variable `TMPI_MCA_<NAME>`, name exactly as registered.
//! 3. `$HOME/.tmpi/mca-params.conf` (format: [`ConfigFile`]).
//! 4. `<prefix>/etc/tmpi-mca-params.conf`, prefix from [`PREFIX_ENV`] or the
//!    executable's location (see [`PREFIX_ENV`]).
//! 5. The default given at registration.
//!
//! Each resolved value records its [`Source`].
//!
//! # Use from a component
//! ```
//! use tmpi_base::mca::{self, Level, ParamSpec};
//! # fn open() -> Result<(), mca::McaError> {
//! let reg = mca::registry();
//! let fifo = reg.register_size(
//!     ParamSpec::new("btl", "sm", "fifo_size")
//!         .help("Bytes in each receive FIFO")
//!         .level(Level::TunerBasic),
//!     64 * 1024,
//! )?;
//! let bytes: u64 = fifo.value();
//! # let _ = bytes; Ok(()) }
//! ```
//! Register every parameter at component-open time, whether or not the
//! component turns out to be usable here, so that settings for it are known
//! (not reported as unknown) and `tmpi_info` lists them.
//!
//! # Bad input
//! An invalid value makes `register_*` fail with [`McaError::InvalidValue`]
//! naming the parameter, the value, its source and what was expected. A name
//! that no component registered is reported by [`check_unknown`] (to be
//! called once all components registered) with the nearest registered names.
//! Problems reading the sources (malformed file lines, a corrupt
//! [`CMDLINE_ENV`]) are returned by [`init`] and [`Registry::source_errors`].

mod registry;
mod selection;
mod source;
mod value;

use std::path::PathBuf;
use std::sync::OnceLock;

pub use registry::{nearest, Level, Param, ParamInfo, ParamSpec, Registry, UnknownParam};
pub use selection::{SelectionError, SelectionList};
pub use source::{
    decode_cmdline, encode_cmdline, is_param_name, prefix_of_exe, ConfigFile, FileEntry, Source,
    Sources, CMDLINE_ENV, ENV_PREFIX, OVERSUBSCRIBED_ENV, PREFIX_ENV, SYSTEM_FILE, USER_FILE,
};
pub use value::{
    parse_bool, parse_int, parse_list, parse_size, parse_tristate, ParamType, ParamValue, Tristate,
    Value,
};

/// Errors of the MCA parameter system.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum McaError {
    /// A source set a parameter to text that does not parse as its type.
    #[error("MCA parameter {name}: invalid value {value:?} from {origin}: expected {expected}")]
    InvalidValue {
        /// Full parameter name.
        name: String,
        /// The offending text.
        value: String,
        /// What a valid value looks like (and why this one is not).
        expected: String,
        /// Who set it.
        origin: Source,
    },
    /// A component registered a default its own type rejects.
    #[error("MCA parameter {name}: default {default:?} is invalid: expected {expected}")]
    InvalidDefault {
        /// Full parameter name.
        name: String,
        /// The default, formatted.
        default: String,
        /// What the type accepts.
        expected: String,
    },
    /// A registration used an invalid name.
    #[error("invalid MCA parameter name {name:?}: {reason}")]
    InvalidName {
        /// The name as built from the spec.
        name: String,
        /// What is wrong.
        reason: String,
    },
    /// The same name was registered twice with different definitions.
    #[error("MCA parameter {name} registered twice inconsistently: {reason}")]
    Conflict {
        /// Full parameter name.
        name: String,
        /// The difference.
        reason: String,
    },
    /// A line of a parameter file is malformed.
    #[error("{}:{line}: malformed MCA parameter line {text:?}: {reason}", path.display())]
    MalformedFile {
        /// The file.
        path: PathBuf,
        /// 1-based line number.
        line: usize,
        /// The line as written.
        text: String,
        /// What is wrong.
        reason: String,
    },
    /// A parameter file exists but cannot be read.
    #[error("cannot read MCA parameter file {}: {reason}", path.display())]
    FileRead {
        /// The file.
        path: PathBuf,
        /// The OS error.
        reason: String,
    },
    /// The value of [`CMDLINE_ENV`] is corrupt.
    #[error("invalid {CMDLINE_ENV} value {text:?}: {reason}")]
    Cmdline {
        /// The variable's value.
        text: String,
        /// What is wrong.
        reason: String,
    },
    /// A control variable of the launcher has an invalid value.
    #[error("environment variable {var}={value:?} is invalid: {reason}")]
    InvalidEnv {
        /// Variable name.
        var: String,
        /// Its value.
        value: String,
        /// What is wrong.
        reason: String,
    },
    /// A `TMPI_MCA_*` (or related) variable is not valid UTF-8.
    #[error("environment variable {var} is not valid UTF-8")]
    NonUnicodeEnv {
        /// Variable name.
        var: String,
    },
}

static GLOBAL: OnceLock<Registry> = OnceLock::new();

/// The process-wide registry, built from [`Sources::from_process`] on first
/// use. Source problems do not prevent its creation; see [`init`].
pub fn registry() -> &'static Registry {
    GLOBAL.get_or_init(Registry::from_process)
}

/// Initialises (if needed) the process-wide registry and reports the first
/// problem met while reading its sources (all of them are logged). MPI
/// initialisation calls this before opening components.
pub fn init() -> Result<&'static Registry, McaError> {
    let reg = registry();
    let errors = reg.source_errors();
    for e in errors {
        tracing::error!(target: "mca_base", "{e}");
    }
    match errors.first() {
        Some(e) => Err(e.clone()),
        None => Ok(reg),
    }
}

/// Reports every name set by a source that no component of the process-wide
/// registry registered, as a warning with the nearest registered names, and
/// returns them. Call once all components have registered their parameters.
/// Warnings go through `tracing` (target `mca_base`) when a subscriber is
/// installed, otherwise straight to stderr, so they are never lost.
pub fn check_unknown() -> Vec<UnknownParam> {
    let unknown = registry().unknown();
    report_unknown(&unknown);
    unknown
}

/// Emits the warnings of [`check_unknown`] for `unknown`.
pub fn report_unknown(unknown: &[UnknownParam]) {
    for u in unknown {
        warn(&u.to_string());
    }
}

/// A configuration warning: through `tracing` (target `mca_base`) when a
/// global subscriber is installed, otherwise on stderr, so that it is never
/// lost before logging is set up.
pub(crate) fn warn(msg: &str) {
    if tracing::dispatcher::has_been_set() {
        tracing::warn!(target: "mca_base", "{msg}");
    } else {
        eprintln!("tmpi: warning: {msg}");
    }
}

/// Registers `mpi_yield_when_idle` (`auto|1|0`, default `auto`) in `reg` and
/// resolves it: `auto` means yield when [`Registry::launch_oversubscribed`].
/// Safe to call from several places (re-registration is idempotent).
pub fn yield_when_idle(reg: &Registry) -> Result<bool, McaError> {
    let p = reg.register_tristate(
        ParamSpec::new("mpi", "", "yield_when_idle")
            .help(
                "Yield the processor when waiting for progress: 1 always, 0 never, \
                 auto when tmpirun reports more ranks than cores",
            )
            .level(Level::TunerBasic),
        Tristate::Auto,
    )?;
    Ok(p.resolve(reg.launch_oversubscribed()))
}

/// Registers `mpi_param_check` (bool, default true): whether the C interface
/// checks the arguments of every MPI call. Read by tmpi-capi at `MPI_Init`;
/// registered here, beside the other `mpi_*` parameters, so that `tmpi_info`
/// lists it without linking the C library.
pub fn mpi_param_check(reg: &Registry) -> Result<bool, McaError> {
    Ok(reg
        .register_bool(
            ParamSpec::new("mpi", "", "param_check")
                .help("Check the arguments of every MPI call (1) or trust them (0)")
                .level(Level::UserBasic),
            true,
        )?
        .value())
}

/// Registers `mpi_pack_per_fragment` (bool, default true): how the C
/// interface moves non-contiguous datatypes. Read by tmpi-capi at `MPI_Init`.
pub fn mpi_pack_per_fragment(reg: &Registry) -> Result<bool, McaError> {
    Ok(reg
        .register_bool(
            ParamSpec::new("mpi", "", "pack_per_fragment")
                .help(
                    "Send and receive non-contiguous datatypes by packing each fragment \
                     straight from/into the user layout (1) or through a whole-message \
                     temporary (0)",
                )
                .level(Level::UserDetail),
            true,
        )?
        .value())
}
